//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz). **Not part of
//! the API**: hidden from the documentation, no stability promise, may change
//! or go at any time.
//!
//! The parsers they reach are crate-private; each entry point runs one of them
//! on arbitrary bytes and checks what must hold of its answer, so that the
//! targets stay thin and a crash found by one replays as an ordinary test
//! here.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use burrow_core::{
    AutoTime, Database, Field, FieldKind, Filter, Model, Orm, OwnedRow, Result, Select, Table,
    Value,
};

use crate::auth::{Auth, Group, Principal, Rights, UriSignature, METHOD_BOUND_NONCE};
use crate::batch::{self, Run};
use crate::select::{parse_select, Projection};
use crate::server::Worker;
use crate::web::request::{self, Parsed};
use crate::web::wire::{percent_decode, percent_encode};
use crate::web::Limits;

const fn f(name: &'static str, kind: FieldKind) -> Field {
    Field::new(name, kind).nullable()
}

/// A table with a field of every kind the parsers convert to.
pub static SAMPLE: Table = Table {
    name: "Sample",
    fields: &[
        f("Name", FieldKind::Text),
        f("Age", FieldKind::I32),
        f("Big", FieldKind::I64),
        f("Count", FieldKind::U32),
        f("Score", FieldKind::F64),
        f("Flag", FieldKind::Bool),
        f("Amount", FieldKind::Currency),
        f("Data", FieldKind::Blob),
        f("Born", FieldKind::Date),
        f("Seen", FieldKind::DateTime),
        f("Doc", FieldKind::Json),
        Field::new("Plain", FieldKind::Text),
        Field::new("Stamp", FieldKind::DateTime).auto(AutoTime::No),
    ],
};

/// A model holding [`SAMPLE`].
pub fn model() -> Model {
    let mut m = Model::new();
    m.add_table(&SAMPLE);
    m
}

// ------------------------------------------------------------ HTTP heads

/// Small limits, so that the fuzzer reaches them.
fn limits() -> Limits {
    Limits {
        max_header_bytes: 2048,
        max_body_bytes: 4096,
        ..Limits::default()
    }
}

/// Reads `data` as a connection's bytes: heads and their bodies, one request
/// after the other, as the server cuts a pipelined stream.
pub fn request_stream(data: &[u8]) {
    let limits = limits();
    let mut pos = 0;
    while pos < data.len() {
        let buf = &data[pos..];
        match request::parse(buf, &limits) {
            Parsed::Head(head, len) => {
                assert!(len > 0 && len <= buf.len() && len <= limits.max_header_bytes);
                check_head(&head);
                // Where a head ends must not depend on what follows it: the
                // same head alone parses the same, and one byte short of it
                // is not yet a head.
                match request::parse(&buf[..len], &limits) {
                    Parsed::Head(again, n) => {
                        assert_eq!(n, len);
                        assert_same_head(&head, &again);
                    }
                    _ => panic!("a head does not parse alone"),
                }
                assert!(
                    !matches!(request::parse(&buf[..len - 1], &limits), Parsed::Head(..)),
                    "a head less its last byte is a head"
                );
                let owned = head.clone().into_owned();
                assert_same_head(&head, &owned);
                let body = head.content_length();
                assert!(body <= limits.max_body_bytes);
                if buf.len() - len < body {
                    return;
                }
                pos += len + body;
            }
            Parsed::Partial => {
                assert!(buf.len() <= limits.max_header_bytes);
                return;
            }
            Parsed::Fail(r) => {
                assert!(matches!(r.status, 400 | 411 | 413), "{}", r.status);
                return;
            }
        }
    }
}

fn check_head(h: &request::RequestHead<'_>) {
    assert!(!h.method().is_empty());
    let target = h.target();
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    assert_eq!(h.path(), percent_decode(path, false));
    assert_eq!(h.query(), query);
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let k = kv.split_once('=').map_or(kv, |(k, _)| k);
        // `param` compares names decoded, as it decodes values.
        assert!(
            h.param(&percent_decode(k, true)).is_some(),
            "{k:?} of {query:?}"
        );
    }
    let mut lengths = Vec::new();
    for (name, value) in h.headers() {
        assert!(h.header(name).is_some());
        if name.eq_ignore_ascii_case("content-length") {
            lengths.push(value);
        }
    }
    assert!(h.headers().count() <= 64);
    // Every Content-Length was checked, and all agree.
    match lengths.first() {
        Some(v) => {
            for l in &lengths {
                assert_eq!(l.parse::<usize>().ok(), Some(h.content_length()), "{l:?}");
            }
            assert_eq!(v.parse::<usize>().ok(), Some(h.content_length()));
        }
        None => assert_eq!(h.content_length(), 0),
    }
}

fn assert_same_head(a: &request::RequestHead<'_>, b: &request::RequestHead<'_>) {
    assert_eq!(a.method(), b.method());
    assert_eq!(a.target(), b.target());
    assert_eq!(a.path(), b.path());
    assert_eq!(a.query(), b.query());
    assert!(a.headers().eq(b.headers()));
    assert_eq!(a.content_length(), b.content_length());
    assert_eq!(a.keep_alive(), b.keep_alive());
    assert_eq!(a.accepts_gzip(), b.accepts_gzip());
    assert_eq!(a.expects_continue(), b.expects_continue());
}

// ------------------------------------------------------ percent encoding

/// Percent encoding round-trips, decoding arbitrary text never grows it, and
/// a query built of encoded pairs gives each value back by name.
pub fn percent(data: &[u8]) {
    let s = String::from_utf8_lossy(data);
    let mut enc = String::new();
    percent_encode(&s, &mut enc);
    assert!(enc
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || b"-_.~%".contains(&c)));
    assert_eq!(percent_decode(&enc, true), s);
    assert_eq!(percent_decode(&enc, false), s);
    for plus in [false, true] {
        let d = percent_decode(&s, plus);
        assert!(d.len() <= s.len(), "{s:?} decodes to {d:?}");
        let escapes = s.contains('%') || (plus && s.contains('+'));
        assert_eq!(matches!(d, Cow::Borrowed(_)), !escapes);
    }
    // Pairs: the text cut at NUL bytes, alternately names and values. Names
    // are plain words, the same encoded or decoded.
    let parts: Vec<&str> = s.split('\0').collect();
    let plain = |k: &str| {
        k.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"-_.~".contains(&c))
    };
    let pairs: Vec<(&str, &str)> = parts
        .chunks(2)
        .map(|c| (c[0], c.get(1).copied().unwrap_or("")))
        .filter(|(k, _)| plain(k))
        .collect();
    let mut target = String::from("/p?");
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            target.push('&');
        }
        percent_encode(k, &mut target);
        target.push('=');
        percent_encode(v, &mut target);
    }
    let raw = format!("GET {target} HTTP/1.1\r\n\r\n");
    let limits = Limits {
        max_header_bytes: usize::MAX,
        ..Limits::default()
    };
    let Parsed::Head(head, _) = request::parse(raw.as_bytes(), &limits) else {
        panic!("an encoded query is refused: {raw:?}");
    };
    for (k, _) in &pairs {
        let want = pairs
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(k))
            .map(|(_, v)| *v);
        assert_eq!(head.param(k).as_deref(), want, "{k:?} in {target:?}");
    }
}

// ------------------------------------------------------------- WHERE / SQL

/// The WHERE text a remote client sends for `filter`, inline parameters and
/// all.
pub fn render_filter(table: &Table, filter: &Filter) -> Result<String> {
    crate::remote::render::render_filter(table, filter)
}

/// The SQL subset of `GET /{root}`: a statement that parses renders back,
/// as a remote client renders its selects, into one that parses the same.
pub fn select_sql(data: &[u8]) {
    let Ok(sql) = std::str::from_utf8(data) else {
        return;
    };
    let m = model();
    let Ok(s) = parse_select(&m, sql).and_then(|u| u.resolve()) else {
        return;
    };
    let projection = match &s.projection {
        Projection::Count(_) => "count(*)".to_owned(),
        Projection::Columns(cols) => cols
            .iter()
            .map(|c| s.table.column_name(*c))
            .collect::<Vec<_>>()
            .join(","),
    };
    let tail = match crate::remote::render::render_tail(s.table, &s.select) {
        Ok(t) => t,
        // What cannot travel inline (none of SAMPLE's kinds) is refused.
        Err(e) => panic!("{sql:?} parses but does not render: {e}"),
    };
    // `WHERE` before the tail, empty filter or not: after `FROM`, only
    // WHERE, ORDER BY and LIMIT may come, and the tail may start with OFFSET.
    let again = format!("SELECT {projection} FROM {} WHERE {tail}", s.table.name);
    let t = match parse_select(&m, &again).and_then(|u| u.resolve()) {
        Ok(t) => t,
        Err(e) => panic!("{sql:?} renders as {again:?}, refused: {e:?}"),
    };
    assert_eq!(t.select, s.select, "{sql:?} renders as {again:?}");
    match (&s.projection, &t.projection) {
        (Projection::Count(_), Projection::Count(_)) => {}
        (a, b) => assert_eq!(a, b, "{sql:?} renders as {again:?}"),
    }
}

// ------------------------------------------------------------ batch bodies

/// The rows of [`SAMPLE`], in ID order.
fn rows(db: &Database) -> Vec<OwnedRow> {
    let mut out = Vec::new();
    db.route(&SAMPLE)
        .and_then(|r| {
            r.select(&SAMPLE, &Select::default(), &mut |row| {
                out.push(OwnedRow::from_row(&SAMPLE, row)?);
                Ok(())
            })
        })
        .expect("the rows of the sample table");
    out
}

fn seed(db: &Database) {
    for (id, name) in [(1, "one"), (2, "two"), (5, "five")] {
        let mut row = OwnedRow::zero(&SAMPLE);
        row.values[0] = Value::Text(name.into());
        row.values[11] = Value::Text(name.into());
        db.route(&SAMPLE)
            .and_then(|r| r.insert(&SAMPLE, Some(id), &row))
            .expect("a seed row");
    }
}

/// A batch body (its first byte chooses whether the URL names the table) is
/// parsed the same whole and in parts; run with its writes applied while it
/// is still being parsed (the server's path for large bodies, here with
/// one-row parts), a malformed body changes nothing, and a valid one leaves
/// the rows and results a plain run leaves. `open` makes an empty database of
/// [`model`], on an engine with transactions.
pub fn batch_body(open: &dyn Fn() -> Arc<Database>, data: &[u8]) {
    static PARSER: OnceLock<Worker> = OnceLock::new();
    let Some((&how, body)) = data.split_first() else {
        return;
    };
    let default = (how & 1 == 1).then_some(&SAMPLE);
    let m = model();
    let charge = batch::Charge::new(&Arc::new(crate::allowance::Allowance::new(usize::MAX)));
    let whole = batch::parse(&m, None, default, body, &charge);
    let text = std::str::from_utf8(body).unwrap_or_default();
    let mut counts = Vec::new();
    let apart = batch::parse_in_parts(&m, None, default, text, &charge, (1, 2), &mut |p, _| {
        counts.push(p.ops.len());
        batch::Part::default()
    });
    match (&whole, &apart) {
        (Ok(w), Ok((last, settings))) => {
            assert_eq!(w.settings, *settings);
            assert_eq!(
                w.ops().count(),
                counts.iter().sum::<usize>() + last.ops.len()
            );
        }
        (Err(_), Err(_)) => {}
        _ => panic!("parsed whole and in parts, one fails"),
    }

    let ahead = open();
    seed(&ahead);
    let before = rows(&ahead);
    let body = Arc::new(body.to_vec());
    let parser = PARSER.get_or_init(|| Worker::start("fuzz-parse").expect("a parser thread"));
    let route = |t: &'static Table| ahead.engine(t);
    let Some(run) = batch::parse_and_run_in_parts(
        parser,
        &ahead,
        None,
        default,
        &body,
        &charge,
        &route,
        &|_| true,
        (1, 2),
    ) else {
        return;
    };
    let run_plain = |db: &Database, p: &batch::Parsed<'_>| {
        batch::execute(p, |items, opts, stop| db.apply_items(items, opts, stop))
    };
    let results = match run {
        Run::Invalid(_) => {
            assert!(whole.is_err(), "a body that parses is invalid ahead");
            assert_eq!(rows(&ahead), before, "a malformed body changed rows");
            return;
        }
        Run::Ran(_, r) => r,
        Run::Parsed(p) => run_plain(&ahead, &p),
        Run::Again => run_plain(&ahead, whole.as_ref().expect("a body that ran parses")),
    };
    let whole = whole.expect("a body that ran ahead parses");
    let plain = open();
    seed(&plain);
    let want = run_plain(&plain, &whole);
    assert_eq!(format!("{results:?}"), format!("{want:?}"));
    assert_eq!(rows(&ahead), rows(&plain));
}

// ------------------------------------------------------------ signatures

struct Session {
    auth: Auth,
    /// The session's ID and private key, as the client holds them.
    id: u32,
    key: u32,
    algo: UriSignature,
    /// Signatures cover the method.
    bound: bool,
}

const TOKEN: &str = "fuzz-token-0123456789";

/// A session as a mORMot client opens it, on a server signing with `algo`;
/// `bound` asks for signatures bound to the method, as Burrow's client does.
fn open_session(algo: UriSignature, bound: bool) -> Session {
    let mut auth = Auth::new()
        .group(Group::new("g").all_tables(Rights::ALL))
        .user("ann", "secret", "g")
        .and_then(|a| a.token(TOKEN, "ann"))
        .expect("an Auth")
        .mormot_sessions(true)
        .uri_signature(algo)
        .bearer_tokens(true);
    auth.seal();
    let hash = crate::auth::mormot_password_hash("secret");
    let nonce = auth.mormot_nonce().expect("mORMot sessions are on");
    let cnonce = if bound {
        format!("{METHOD_BOUND_NONCE}cn")
    } else {
        "cn".to_owned()
    };
    let proof = crate::auth::mormot_proof("root", &nonce, &cnonce, "ann", &hash);
    let body = auth
        .mormot_login("root", "ann", &proof, &cnonce, None)
        .expect("a login");
    let v: serde_json::Value = serde_json::from_str(&body).expect("a login answer");
    let session_key = v["result"].as_str().expect("a session key").to_owned();
    let id = session_key
        .split_once('+')
        .and_then(|(id, _)| id.parse().ok())
        .expect("a session ID");
    let key = crate::auth::mormot_private_key(&session_key, &hash);
    assert_eq!(v["binding"].as_str() == Some("method"), bound);
    Session {
        auth,
        id,
        key,
        algo,
        bound,
    }
}

/// CRC-32 (mORMot 1's form): every change of one byte changes it, which the
/// target checks; SHA-256 bound to the method: Burrow's own client's form.
fn sessions() -> &'static [Session; 2] {
    static S: OnceLock<[Session; 2]> = OnceLock::new();
    S.get_or_init(|| {
        [
            open_session(UriSignature::Crc32, false),
            open_session(UriSignature::Sha256, true),
        ]
    })
}

/// Signature and token checks: an arbitrary target or token is refused or
/// names the one user, never panics; a URI signed as a mORMot client signs
/// it is accepted, and the same URI with one byte changed is refused.
pub fn signature(data: &[u8]) {
    let [crc, sha] = sessions();
    let text = String::from_utf8_lossy(data);
    for s in [crc, sha] {
        if let Ok(who) = s.auth.identify("GET", &text, None) {
            assert_eq!(who, Principal::User(0));
        }
        assert_eq!(
            s.auth.identify("GET", "/root/x", Some(&text)).is_ok(),
            text == TOKEN
        );
    }

    // A client's signed URI: the path (without its `/`), signed with the
    // timestamp's text and the session's key (and the method, if bound).
    static CLOCK: AtomicU32 = AtomicU32::new(1000);
    let Some((&at, path)) = data.split_first() else {
        return;
    };
    let Ok(path) = std::str::from_utf8(path) else {
        return;
    };
    let sep = if path.contains('?') { '&' } else { '?' };
    let ts = format!("{:08x}", CLOCK.fetch_add(1, Ordering::Relaxed));
    let signed = |s: &Session| {
        let parts: &[&[u8]] = if s.bound {
            &[b"GET ", path.as_bytes()]
        } else {
            &[path.as_bytes()]
        };
        let sign = s.algo.sign(s.key, ts.as_bytes(), parts);
        format!("/{path}{sep}session_signature={:08x}{ts}{sign:08x}", s.id)
    };
    for s in [crc, sha] {
        let target = signed(s);
        assert_eq!(
            s.auth.identify("GET", &target, None),
            Ok(Principal::User(0)),
            "{target:?}"
        );
    }
    // One byte changed, in the signed path or in the signature: refused
    // (a CRC catches every change of one byte).
    let mut bytes = signed(crc).into_bytes();
    let i = usize::from(at) % bytes.len();
    if bytes[i].is_ascii() && i > 0 {
        bytes[i] ^= 1;
        let changed = String::from_utf8(bytes).expect("ASCII for ASCII");
        assert!(
            crc.auth.identify("GET", &changed, None).is_err(),
            "{changed:?} is accepted"
        );
    }
}
