//! The REST router: one request in, one response out, by synchronous calls
//! into the hosted client's engines, or into the connection's open
//! transaction. Where it runs (event loop, blocking pool) is the connection
//! loop's business.

use std::ops::Deref;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use burrow_core::chrono::Utc;
use burrow_core::driver::{apart, refuse, waits_refused};
use burrow_core::json::{self, ListWriter};
use burrow_core::{
    BatchOptions, BatchResult, CmpOp, Column, Error, ErrorKind, Expr, Filter, JsonDialect, Orm,
    OwnedRow, RowOps, Select, Table, Transaction, Value, ValueRef,
};

use crate::auth::{Denied, Principal, Rights};
use crate::batch;
use crate::select::{self as sql, Projection, SqlError};
use crate::server::Shared;
use crate::web::{BodyStream, PieceFuture, Request, RequestHead, Response, JSON, TEXT};

type Outcome = std::result::Result<Response, Response>;

/// A request as the REST routes see it: what its headers ask of the answer
/// read once, and its body shared (a large batch's is parsed on another
/// thread).
pub(crate) struct RestRequest {
    head: Request,
    pub body: Arc<Vec<u8>>,
    /// A mORMot client (its User-Agent says so): lists are compact.
    pub mormot: bool,
    /// A Burrow client asking for exact date-times (`Burrow-Json: exact`).
    pub exact: bool,
    /// A client asking for compact lists (`Burrow-Json: compact`).
    pub compact: bool,
}

impl RestRequest {
    pub fn new(mut head: Request) -> RestRequest {
        let body = Arc::new(std::mem::take(&mut head.body));
        let (mut mormot, mut exact, mut compact) = (false, false, false);
        for (name, v) in head.headers() {
            if name.eq_ignore_ascii_case("user-agent") {
                mormot = v.contains("mORMot");
            } else if name.eq_ignore_ascii_case("burrow-json") {
                exact = v.contains("exact");
                compact = v.contains("compact");
            }
        }
        RestRequest {
            head,
            body,
            mormot,
            exact,
            compact,
        }
    }
}

impl Deref for RestRequest {
    type Target = RequestHead<'static>;

    fn deref(&self) -> &RequestHead<'static> {
        &self.head
    }
}

/// The response for a failed call.
pub(crate) fn error_response(e: &Error) -> Response {
    let status = status_of(e);
    let text = match e {
        Error::NotFound { .. } => "Not Found".to_owned(),
        Error::Denied { reason, .. } => reason.clone(),
        // Engine failures are logged by no one here; their text may name
        // files or internals, so the client gets the kind only.
        Error::Engine { .. } | Error::Io(_) => "Internal Server Error".to_owned(),
        other => other.to_string(),
    };
    let mut r = Response::error(status, &text);
    // Members a Burrow client rebuilds the error from (a mORMot client reads
    // errorCode and errorText only).
    match e {
        Error::Busy { waited, .. } => {
            r.body.pop();
            r.body.extend_from_slice(b",\"waited\":");
            let ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
            r.body
                .extend_from_slice(itoa::Buffer::new().format(ms).as_bytes());
            r.body.push(b'}');
        }
        Error::TypeMismatch {
            at,
            expected,
            found,
        } => add_members(
            &mut r,
            &[
                ("at", at.as_str()),
                ("expected", expected),
                ("found", found),
            ],
        ),
        Error::UniqueViolation { table, detail } => {
            add_members(&mut r, &[("table", table.as_str()), ("detail", detail)])
        }
        _ => {}
    }
    r
}

/// Adds text members to an error body (`{"errorCode":…,"errorText":…}`).
fn add_members(r: &mut Response, members: &[(&str, &str)]) {
    r.body.pop();
    for (name, v) in members {
        r.body.push(b',');
        burrow_core::json::write_str(&mut r.body, name);
        r.body.push(b':');
        burrow_core::json::write_str(&mut r.body, v);
    }
    r.body.push(b'}');
}

/// The one HTTP status of each error kind.
pub(crate) fn status_of(e: &Error) -> u16 {
    match e.kind() {
        ErrorKind::NotFound => 404,
        ErrorKind::UniqueViolation => 409,
        ErrorKind::BadInput => 400,
        // Nothing was done, and the same request may succeed later.
        ErrorKind::Busy => 503,
        ErrorKind::Denied => match e {
            Error::Denied { status, .. } => *status,
            _ => 403,
        },
        _ => 500,
    }
}

pub(crate) fn err(e: Error) -> Response {
    error_response(&e)
}

fn bad(msg: &str) -> Response {
    Response::error(400, msg)
}

/// Refuses work that may take long (a large batch, a list without a small
/// limit, a count, a delete by WHERE, a backup) on the event loop: the server
/// runs the request again off its event loop. Called before any engine
/// call, so nothing was done.
fn off_loop() -> std::result::Result<(), Response> {
    if waits_refused() {
        Err(err(refuse("burrow-http")))
    } else {
        Ok(())
    }
}

fn denied(d: Denied) -> Response {
    match d {
        Denied::Unauthenticated(m) => Response::error(401, m),
        Denied::Throttled(wait) => {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            Response::error(429, "too many failed logins; try again later")
                .header("Retry-After", secs.to_string())
        }
        Denied::Busy => Response::error(503, "too many logins at once; try again later")
            .header("Retry-After", "1"),
    }
}

/// Identifies the sender from the request's head, before its body is read
/// (always [`Principal::Anyone`] without access control).
pub(crate) fn authenticate(
    sh: &Shared,
    head: &RequestHead<'_>,
) -> std::result::Result<Principal, Response> {
    let Some(auth) = &sh.auth else {
        return Ok(Principal::Anyone);
    };
    let bearer = bearer(head)?;
    // The server's time and the login itself need no credentials.
    if let Some(rest) = root_rest(sh, head.path()) {
        let first = rest.split('/').next().unwrap_or("");
        if first.eq_ignore_ascii_case("timestamp") || first.eq_ignore_ascii_case("auth") {
            let signed = head.query().contains("session_signature=") || bearer.is_some();
            if !signed {
                return Ok(Principal::Anyone);
            }
        }
    }
    auth.identify(head.method(), head.target(), bearer)
        .map_err(denied)
}

/// The `Authorization: Bearer` token. Two `Authorization` headers are
/// refused: which one counts would depend on the reader.
fn bearer<'h>(head: &'h RequestHead<'_>) -> std::result::Result<Option<&'h str>, Response> {
    let mut values = head
        .headers()
        .filter(|(n, _)| n.eq_ignore_ascii_case("authorization"));
    let Some((_, v)) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(bad("more than one Authorization header"));
    }
    Ok(v.strip_prefix("Bearer ")
        .or_else(|| v.strip_prefix("bearer "))
        .map(str::trim))
}

fn root_rest<'a>(sh: &Shared, path: &'a str) -> Option<&'a str> {
    let p = path.strip_prefix('/')?;
    let (root, rest) = p.split_once('/').unwrap_or((p, ""));
    root.eq_ignore_ascii_case(&sh.root).then_some(rest)
}

fn check(sh: &Shared, who: Principal, table: &Table, need: fn(&Rights) -> bool) -> Outcome {
    let Some(auth) = &sh.auth else {
        return Ok(Response::empty(200));
    };
    if who == Principal::Anyone {
        return Err(Response::error(401, "authentication required"));
    }
    if need(&auth.rights(who, table.name)) {
        Ok(Response::empty(200))
    } else {
        Err(Response::error(403, "Forbidden"))
    }
}

/// Any right that changes a table.
fn writes(r: &Rights) -> bool {
    r.create || r.update || r.delete
}

fn dialect(req: &RestRequest) -> JsonDialect {
    if req.exact {
        JsonDialect::Exact
    } else {
        JsonDialect::Mormot
    }
}

fn parse_id(s: &str) -> std::result::Result<i64, Response> {
    s.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| bad(&format!("{s:?} is not a valid ID (a positive integer)")))
}

fn json_object(
    body: &[u8],
) -> std::result::Result<serde_json::Map<String, serde_json::Value>, Response> {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(o)) => Ok(o),
        Ok(_) => Err(bad("the body must be a JSON object")),
        Err(e) => Err(bad(&format!("invalid JSON: {e}"))),
    }
}

/// What a request runs with: the server's state, and its connection's open
/// transaction, if any, through which its engine calls then go.
struct Ctx<'a> {
    sh: &'a Arc<Shared>,
    tx: Option<&'a Transaction<'static>>,
}

impl Deref for Ctx<'_> {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        self.sh
    }
}

/// Handles one request, inside `tx` when its connection has one open.
pub(crate) fn handle(
    sh: &Arc<Shared>,
    req: &RestRequest,
    who: Principal,
    tx: Option<&Transaction<'static>>,
) -> Response {
    match route(&Ctx { sh, tx }, req, who) {
        Ok(r) | Err(r) => r,
    }
}

fn route(sh: &Ctx<'_>, req: &RestRequest, who: Principal) -> Outcome {
    let rest = root_rest(sh, req.path()).ok_or_else(|| Response::error(404, "Not Found"))?;
    let segs: Vec<&str> = if rest.is_empty() {
        Vec::new()
    } else {
        rest.split('/').collect()
    };
    let m = req.method();
    let get = m == "GET" || m == "HEAD";
    match segs.as_slice() {
        [] if get => sql_select(sh, req, who),
        [t] if t.eq_ignore_ascii_case("timestamp") && get => {
            let mut r = Response::json(json::to_timelog(Utc::now()).to_string().into_bytes());
            r.content_type = TEXT.into();
            Ok(r)
        }
        [t, i] if t.eq_ignore_ascii_case("timestamp") && i.eq_ignore_ascii_case("info") && get => {
            Ok(Response::json(
                format!(
                    "{{\"server\":\"Burrow\",\"version\":\"{}\",\"nowutc\":\"{}\"}}",
                    env!("CARGO_PKG_VERSION"),
                    burrow_core::datetime::format_datetime(Utc::now())
                )
                .into_bytes(),
            ))
        }
        [a] if a.eq_ignore_ascii_case("auth") => auth(sh, req, who),
        [c, rest @ ..] if c.eq_ignore_ascii_case("CacheFlush") => {
            if sh.auth.is_some() && who == Principal::Anyone {
                return Err(Response::error(401, "authentication required"));
            }
            // A flush costs every later reader of the table a trip to its
            // engine: only a client that may change the table may ask for
            // one, as its writes would flush it anyway.
            match rest {
                [] => {
                    for t in sh.client.model().tables() {
                        check(sh, who, t, writes)?;
                    }
                    sh.cache.flush()
                }
                [p] if *p == "_ping_" => return Ok(Response::json(b"{\"count\":0}".to_vec())),
                [t] => {
                    let t = table_for(sh, who, t)?;
                    check(sh, who, t, writes)?;
                    sh.cache.flush_table(t)
                }
                [t, id] => {
                    let t = table_for(sh, who, t)?;
                    check(sh, who, t, writes)?;
                    sh.cache.flush_id(t, parse_id(id)?)
                }
                _ => return Err(Response::error(404, "Not Found")),
            }
            Ok(Response::empty(200))
        }
        [b, rest @ ..] if b.eq_ignore_ascii_case("_backup") => {
            off_loop()?;
            crate::admin::handle(sh, req, who, rest)
        }
        [b] if b.eq_ignore_ascii_case("Batch") && (m == "PUT" || m == "POST") => {
            run_batch(sh, req, who, None)
        }
        [t, b] if b.eq_ignore_ascii_case("Batch") && (m == "PUT" || m == "POST") => {
            let t = table_for(sh, who, t)?;
            run_batch(sh, req, who, Some(t))
        }
        [t] => {
            let t = table_for(sh, who, t)?;
            match m {
                "GET" | "HEAD" => list(sh, req, who, t),
                "POST" => add(sh, req, who, t),
                "DELETE" => delete_where(sh, req, who, t),
                _ => Err(Response::error(405, "Method Not Allowed")),
            }
        }
        [t, id] => {
            let t = table_for(sh, who, t)?;
            let id = parse_id(id)?;
            match m {
                "GET" | "HEAD" => retrieve(sh, req, who, t, id),
                "PUT" => update(sh, req, who, t, id),
                "DELETE" => delete(sh, req, who, t, id),
                _ => Err(Response::error(405, "Method Not Allowed")),
            }
        }
        [t, id, field] if get => {
            let t = table_for(sh, who, t)?;
            let id = parse_id(id)?;
            blob(sh, who, t, id, field)
        }
        _ => Err(Response::error(404, "Not Found")),
    }
}

pub(crate) fn table(sh: &Shared, name: &str) -> std::result::Result<&'static Table, Response> {
    sh.client
        .model()
        .table(name)
        .ok_or_else(|| err(Error::UnknownTable(name.to_owned())))
}

/// The table `name` names for `who`; a name the model does not hold gets,
/// under access control, the answer a table `who` may not use gets (401
/// before a login, 403 after), unless `who` holds a right on every table:
/// otherwise comparing the answers for two names (400 "unknown table"
/// against 401 or 403) would tell which tables exist.
fn table_for(
    sh: &Shared,
    who: Principal,
    name: &str,
) -> std::result::Result<&'static Table, Response> {
    sh.client
        .model()
        .table(name)
        .ok_or_else(|| unknown_table(sh, who, name))
}

/// The answer to `who` for a table name the model does not hold (see
/// [`table_for`]).
fn unknown_table(sh: &Shared, who: Principal, name: &str) -> Response {
    match &sh.auth {
        Some(_) if who == Principal::Anyone => Response::error(401, "authentication required"),
        // A name no group lists takes the group's rights on every table.
        Some(auth) if !any_right(&auth.rights(who, name)) => Response::error(403, "Forbidden"),
        _ => err(Error::UnknownTable(name.to_owned())),
    }
}

fn any_right(r: &Rights) -> bool {
    r.read || writes(r)
}

/// The row calls for `t`: its engine's, or those of the engine's part of
/// the connection's transaction.
fn engine<'a>(sh: &'a Ctx<'_>, t: &'static Table) -> std::result::Result<&'a dyn RowOps, Response> {
    match sh.tx {
        Some(tx) => tx.route(t),
        None => sh.client.route(t),
    }
    .map_err(err)
}

fn wrote(sh: &Shared) {
    sh.state.fetch_add(1, Ordering::Relaxed);
}

fn retrieve(
    sh: &Ctx<'_>,
    req: &RestRequest,
    who: Principal,
    t: &'static Table,
    id: i64,
) -> Outcome {
    // Inside a transaction the engine has the rows it wrote, which the cache
    // does not.
    let in_tx = sh.tx.is_some();
    check(sh, who, t, |r| r.read)?;
    let d = dialect(req);
    let cols: Vec<Column> = sql::columns_of(t).collect();
    let mut body = Vec::with_capacity(64 + 24 * cols.len());
    if !in_tx {
        if let Some(row) = sh.cache.get(t, id) {
            json::write_row(&mut body, t, row.as_ref(), &cols, d).map_err(err)?;
            return Ok(Response::json(body));
        }
    }
    let caching = !in_tx && sh.cache.covers(t, id);
    let mut copy = None;
    let found = engine(sh, t)?
        .retrieve(t, id, &mut |row| {
            json::write_row(&mut body, t, row, &cols, d)?;
            if caching {
                copy = Some(OwnedRow::from_row(t, row)?);
            }
            Ok(())
        })
        .map_err(err)?;
    if !found {
        return Err(Response::error(404, "Not Found"));
    }
    if let Some(c) = copy {
        sh.cache.put(c);
    }
    Ok(Response::json(body))
}

fn blob(sh: &Ctx<'_>, who: Principal, t: &'static Table, id: i64, field: &str) -> Outcome {
    check(sh, who, t, |r| r.read)?;
    let idx = t.field_index(field).ok_or_else(|| {
        err(Error::UnknownField {
            table: t.name,
            field: field.to_owned(),
        })
    })?;
    let mut out = None;
    let found = engine(sh, t)?
        .retrieve(t, id, &mut |row| {
            out = Some(match row.get(idx)? {
                ValueRef::Blob(b) => b.to_vec(),
                ValueRef::Null => Vec::new(),
                other => {
                    let mut v = Vec::new();
                    json::write_value(&mut v, Some(&t.fields[idx]), &other, JsonDialect::Mormot);
                    v
                }
            });
            Ok(())
        })
        .map_err(err)?;
    if !found {
        return Err(Response::error(404, "Not Found"));
    }
    let mut r = Response::json(out.unwrap_or_default());
    r.content_type = "application/octet-stream".into();
    Ok(r)
}

fn add(sh: &Ctx<'_>, req: &RestRequest, who: Principal, t: &'static Table) -> Outcome {
    check(sh, who, t, |r| r.create)?;
    let (mut row, mut present) = json::read_row(t, &req.body).map_err(err)?;
    batch::stamp_missing(&mut row, &mut present, true);
    let forced = (row.id > 0).then_some(row.id);
    let id = engine(sh, t)?.insert(t, forced, &row).map_err(err)?;
    wrote(sh);
    sh.cache.flush_id(t, id);
    Ok(Response::empty(201)
        .header("Location", format!("{}/{id}", t.name))
        .with_type(JSON))
}

fn update(sh: &Ctx<'_>, req: &RestRequest, who: Principal, t: &'static Table, id: i64) -> Outcome {
    check(sh, who, t, |r| r.update)?;
    let (mut row, mut present) = json::read_row(t, &req.body).map_err(err)?;
    if row.id != 0 && row.id != id {
        return Err(bad("the body's ID differs from the URI's"));
    }
    if present.is_empty() {
        return Err(bad("the body names no field to update"));
    }
    row.id = id;
    batch::stamp_missing(&mut row, &mut present, false);
    sh.cache.flush_id(t, id);
    let done = engine(sh, t)?
        .update(t, &row, Some(&present))
        .map_err(err)?;
    sh.cache.flush_id(t, id);
    if !done {
        return Err(Response::error(404, "Not Found"));
    }
    wrote(sh);
    Ok(Response::empty(200))
}

fn delete(sh: &Ctx<'_>, req: &RestRequest, who: Principal, t: &'static Table, id: i64) -> Outcome {
    check(sh, who, t, |r| r.delete)?;
    sh.cache.flush_id(t, id);
    let existed = engine(sh, t)?.delete(t, id).map_err(err)?;
    sh.cache.flush_id(t, id);
    if existed {
        wrote(sh);
    } else if req.exact {
        // Burrow clients learn whether the row existed; mORMot's get 200.
        return Err(Response::error(404, "Not Found"));
    }
    Ok(Response::empty(200))
}

fn delete_where(sh: &Ctx<'_>, req: &RestRequest, who: Principal, t: &'static Table) -> Outcome {
    check(sh, who, t, |r| r.delete)?;
    let text = req.param("where").unwrap_or_default();
    let filter = Filter::parse(t, &text, &[]).map_err(err)?;
    if filter.expr.is_none() {
        return Err(bad("DELETE on a table needs a where= clause"));
    }
    off_loop()?;
    sh.cache.flush_table(t);
    let n = engine(sh, t)?.delete_where(t, &filter).map_err(err)?;
    sh.cache.flush_table(t);
    if n > 0 {
        wrote(sh);
    }
    Ok(Response::json(format!("{{\"deleted\":{n}}}").into_bytes()))
}

fn projection_of(
    t: &'static Table,
    select: Option<std::borrow::Cow<'_, str>>,
) -> std::result::Result<Vec<Column>, Response> {
    match select.as_deref().map(str::trim) {
        None | Some("") | Some("*") => Ok(sql::columns_of(t).collect()),
        Some(list) => {
            let mut cols = Vec::new();
            for name in list.split(',').map(str::trim) {
                if name == "*" {
                    for c in sql::columns_of(t) {
                        sql::push_once(t, &mut cols, c).map_err(err)?;
                    }
                    continue;
                }
                let c = t.column(name).ok_or_else(|| {
                    err(Error::UnknownField {
                        table: t.name,
                        field: name.to_owned(),
                    })
                })?;
                sql::push_once(t, &mut cols, c).map_err(err)?;
            }
            Ok(cols)
        }
    }
}

fn sql_err(e: SqlError) -> Response {
    match e {
        SqlError::Write(m) => Response::error(403, &m),
        SqlError::Bad(e) => err(e),
    }
}

fn list(sh: &Ctx<'_>, req: &RestRequest, who: Principal, t: &'static Table) -> Outcome {
    check(sh, who, t, |r| r.read)?;
    let cols = projection_of(t, req.param("select"))?;
    let tail = sql::split_tail(&req.param("where").unwrap_or_default()).map_err(sql_err)?;
    let mut select = sql::resolve(t, &tail).map_err(err)?;
    if let Some(sort) = req.param("sort") {
        let desc = req
            .param("dir")
            .is_some_and(|d| d.eq_ignore_ascii_case("desc"));
        select.order.clear();
        for name in sort.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let c = t.column(name).ok_or_else(|| {
                err(Error::UnknownField {
                    table: t.name,
                    field: name.to_owned(),
                })
            })?;
            select.then_by(c, desc);
        }
    }
    let num = |name: &str| -> std::result::Result<Option<u64>, Response> {
        req.param(name)
            .map(|v| {
                v.trim()
                    .parse::<u64>()
                    .map_err(|_| bad(&format!("{name} must be a non-negative integer")))
            })
            .transpose()
    };
    if let Some(start) = num("startIndex")? {
        select.offset = start;
    }
    if let Some(n) = num("results")? {
        select.limit = Some(n);
    }
    write_list(sh, req, t, &cols, &select)
}

fn compact(sh: &Shared, req: &RestRequest) -> bool {
    sh.compact || req.mormot || req.compact
}

fn write_list(
    sh: &Ctx<'_>,
    req: &RestRequest,
    t: &'static Table,
    cols: &[Column],
    select: &Select,
) -> Outcome {
    let first = first_page_rows(sh.list_piece_bytes);
    let large = select.limit.is_none_or(|n| n > first);
    // Read by ascending (or descending) ID, a page at a time: each page
    // starts past the last ID of the one before, so a row that exists
    // throughout shows exactly once, whatever is written meanwhile. A
    // transaction's lists stay whole: the transaction stays with its
    // connection.
    let by_id = match select.order.as_slice() {
        [] => Some(false),
        [(Column::Id, desc)] => Some(*desc),
        _ => None,
    };
    // A WHERE or a sort on another column may read the whole table for a
    // few rows: off the event loop, as a long list is, so that it cannot
    // stall other connections.
    if large || by_id.is_none() || select.filter.expr.is_some() {
        off_loop()?;
    }
    if let (true, Some(desc), None) = (large, by_id, sh.tx) {
        return stream_list(sh, req, t, cols, select, desc);
    }
    let mut body = Vec::with_capacity(1024);
    let mut w = ListWriter::begin(&mut body, t, cols, compact(sh, req), dialect(req));
    engine(sh, t)?
        .select(t, select, &mut |row| w.row(&mut body, row).map(drop))
        .map_err(err)?;
    w.finish(&mut body);
    Ok(Response::json(body))
}

/// Rows of a list's first page: about a piece's worth, guessing 100 bytes
/// a row (later pages are sized by the rows seen).
fn first_page_rows(piece_bytes: usize) -> u64 {
    (piece_bytes as u64 / 100).clamp(1, MAX_PAGE_ROWS)
}

/// The first piece of a streamed list, and the most later ones grow to
/// (doubling), when [`ServerBuilder::list_piece_bytes`] allows. The client
/// reads one piece while the server reads and writes the next: a small
/// first piece starts it early, and pieces small beside the list keep the
/// client's work on the last one (which nothing overlaps) short.
///
/// [`ServerBuilder::list_piece_bytes`]: crate::ServerBuilder::list_piece_bytes
const FIRST_PIECE: usize = 16 * 1024;
const STREAM_PIECE: usize = 128 * 1024;

/// Rows of one page at most, whatever their size: a page's work stays
/// short however small its rows.
const MAX_PAGE_ROWS: u64 = 10_000;

/// A list answered a page at a time; see [`write_list`].
fn stream_list(
    sh: &Ctx<'_>,
    req: &RestRequest,
    t: &'static Table,
    cols: &[Column],
    select: &Select,
    desc: bool,
) -> Outcome {
    let piece = sh.list_piece_bytes.min(FIRST_PIECE);
    let mut pages = ListPages {
        sh: sh.sh.clone(),
        table: t,
        cols: cols.to_vec(),
        filter: select.filter.clone(),
        desc,
        offset: select.offset,
        last: None,
        left: select.limit,
        rows: 0,
        page_rows: first_page_rows(piece),
        piece,
        compact: compact(sh, req),
        dialect: dialect(req),
        done: false,
        peer_cpu: None,
    };
    // Most lists turn out short: the buffer grows as rows come.
    let mut body = Vec::with_capacity(16 * 1024);
    pages.page(&mut body).map_err(err)?;
    if pages.done {
        return Ok(Response::json(body));
    }
    Ok(Response::streamed(JSON, body, pages))
}

/// The state of a list answered a page at a time.
struct ListPages {
    sh: Arc<Shared>,
    table: &'static Table,
    cols: Vec<Column>,
    /// The list's own WHERE.
    filter: Filter,
    desc: bool,
    /// Rows the first page skips.
    offset: u64,
    /// The last ID written.
    last: Option<i64>,
    /// Rows still to write, for a list with a limit.
    left: Option<u64>,
    /// Rows written.
    rows: usize,
    page_rows: u64,
    /// The size the next page stops at.
    piece: usize,
    compact: bool,
    dialect: JsonDialect,
    done: bool,
    /// See [`BodyStream::peer_cpu`].
    peer_cpu: Option<usize>,
}

impl ListPages {
    /// Reads the next page and appends it to `out` (the list's head before
    /// the first, its end after the last, when `done` is then set).
    fn page(&mut self, out: &mut Vec<u8>) -> burrow_core::Result<()> {
        let t = self.table;
        let mut filter = self.filter.clone();
        if let Some(last) = self.last {
            let past = Expr::Cmp(
                Column::Id,
                if self.desc { CmpOp::Lt } else { CmpOp::Gt },
                filter.params.len(),
            );
            filter.params.push(Value::Int(last));
            filter.expr = Some(match filter.expr.take() {
                None => past,
                Some(Expr::And(mut all)) => {
                    all.push(past);
                    Expr::And(all)
                }
                Some(e) => Expr::And(vec![e, past]),
            });
        }
        let want = self.left.map_or(self.page_rows, |l| l.min(self.page_rows));
        // One row more than the page says whether another page follows: a
        // list of exactly a page is answered whole, without an empty page.
        let select = Select {
            filter,
            order: vec![(Column::Id, self.desc)],
            limit: Some(want + 1),
            offset: std::mem::take(&mut self.offset),
        };
        let start = out.len();
        let mut w = if self.rows == 0 {
            ListWriter::begin(out, t, &self.cols, self.compact, self.dialect)
        } else {
            ListWriter::resume(t, &self.cols, self.compact, self.dialect, self.rows)
        };
        let before = w.rows();
        let mut last = self.last;
        let mut more = false;
        let piece = self.piece;
        self.sh.client.route(t)?.select(t, &select, &mut |row| {
            // A page ends at its row count, or once it holds a piece (rows
            // larger than guessed), one row at least: the rest is read again
            // with the next page.
            let got = (w.rows() - before) as u64;
            if got == want || (got > 0 && out.len() - start >= piece) {
                more = true;
                return Ok(());
            }
            last = Some(match w.row(out, row)? {
                Some(id) => id,
                None => row.id()?,
            });
            Ok(())
        })?;
        let got = (w.rows() - before) as u64;
        self.rows = w.rows();
        self.last = last;
        if let Some(l) = &mut self.left {
            *l -= got;
        }
        if !more || self.left == Some(0) {
            w.finish(out);
            self.done = true;
        } else if let Some(per_row) = ((out.len() - start) as u64).checked_div(got) {
            // The next page: about a piece's worth of rows like these.
            let most = self.sh.list_piece_bytes.min(STREAM_PIECE).max(self.piece);
            self.piece = (self.piece * 2).min(most);
            self.page_rows = (self.piece as u64 / per_row.max(1)).clamp(1, MAX_PAGE_ROWS);
        }
        Ok(())
    }
}

impl BodyStream for ListPages {
    /// A page is held off the client's processor while it is read and
    /// written: on a 2-processor machine, a server's page thread woken next
    /// to its client on loopback took turns with it in slices of about 3 ms
    /// while the other processor stayed idle. A 10,000-row list, one read
    /// per process: 6 of 24 reads ran at 1.5–2.1M rows/s, the others at
    /// 2.7–3.5M; held off, 23 of 24 ran at 2.8–3.5M and one at 2.5M.
    fn peer_cpu(&mut self, cpu: Option<usize>) {
        self.peer_cpu = cpu;
    }

    fn next(&mut self) -> PieceFuture<'_> {
        Box::pin(async move {
            if self.done {
                return None;
            }
            // A page may scan much of a table, and wait for the engine's
            // lock: it runs off the event loop.
            let mut out = Vec::with_capacity(self.piece.min(1 << 22) + 1024);
            let peer_cpu = self.peer_cpu;
            match crate::server::aside(|| {
                let _away = peer_cpu.and_then(apart::keep_off);
                self.page(&mut out)
            }) {
                Ok(()) => Some(Ok(out)),
                Err(e) => {
                    self.done = true;
                    Some(Err(std::io::Error::other(e.to_string())))
                }
            }
        })
    }
}

/// The longest SELECT taken as a body: room for a WHERE of the most values
/// one takes ([`burrow_core::filter::MAX_WHERE_VALUES`]), while what a body
/// grows to as it is parsed stays a few times its size.
const MAX_SQL_BYTES: usize = 1 << 20;

fn sql_select(sh: &Ctx<'_>, req: &RestRequest, who: Principal) -> Outcome {
    if req.body.len() > MAX_SQL_BYTES {
        return Err(Response::error(
            413,
            &format!("a SELECT is at most {} KiB", MAX_SQL_BYTES / 1024),
        ));
    }
    let text = std::str::from_utf8(&req.body).map_err(|_| bad("the SQL is not valid UTF-8"))?;
    if text.trim().is_empty() {
        return Err(bad("GET on the root takes a SELECT statement as its body"));
    }
    let s = sql::parse_select(sh.client.model(), text).map_err(|e| match e {
        SqlError::Bad(Error::UnknownTable(name)) => unknown_table(sh, who, &name),
        e => sql_err(e),
    })?;
    check(sh, who, s.table, |r| r.read)?;
    let s = s.resolve().map_err(sql_err)?;
    match &s.projection {
        Projection::Count(label) => {
            off_loop()?;
            let n = engine(sh, s.table)?
                .count(s.table, &s.select.filter)
                .map_err(err)?;
            let mut body = Vec::new();
            if compact(sh, req) {
                body.extend_from_slice(b"{\"fieldCount\":1,\"values\":[");
                json::write_str(&mut body, label);
                body.extend_from_slice(format!(",{n}],\"rowCount\":1}}\n").as_bytes());
            } else {
                body.extend_from_slice(b"[{");
                json::write_str(&mut body, label);
                body.extend_from_slice(format!(":{n}}}]\n").as_bytes());
            }
            Ok(Response::json(body))
        }
        Projection::Columns(cols) => write_list(sh, req, s.table, cols, &s.select),
    }
}

/// Bodies from this size are parsed on a second thread while the writes
/// already read are applied (see [`batch::parse_and_run`]): below it, the
/// hand-off costs more than the overlap saves.
const PIPELINE_BYTES: usize = 256 * 1024;

fn run_batch(
    sh: &Ctx<'_>,
    req: &RestRequest,
    who: Principal,
    default: Option<&'static Table>,
) -> Outcome {
    let need = |op: &batch::Op| -> fn(&Rights) -> bool {
        match op {
            batch::Op::Add(..) => |r| r.create,
            batch::Op::Update(..) => |r| r.update,
            batch::Op::Delete(..) => |r| r.delete,
        }
    };
    let flush = |op: &batch::Op| {
        if let Some((t, id)) = op.changes() {
            sh.cache.flush_id(t, id);
        }
    };
    let writable: Option<Arc<[batch::WriteRights]>> = match &sh.auth {
        None => None,
        Some(_) if who == Principal::Anyone => {
            return Err(Response::error(401, "authentication required"))
        }
        Some(auth) => Some(
            sh.client
                .model()
                .tables()
                .iter()
                .map(|t| (*t, auth.rights(who, t.name)))
                .filter(|(_, r)| writes(r))
                .collect(),
        ),
    };
    let route = |t: &'static Table| sh.client.engine(t);
    let admit = |op: &batch::Op| {
        flush(op);
        check(sh, who, op.table(), need(op)).is_ok()
    };
    if req.body.len() >= LONG_BATCH_BYTES {
        off_loop()?;
    }
    let mut charge = batch::Charge::new(&sh.batch_memory);
    if let (Some(parser), Some(tx)) = (&sh.parser, sh.tx) {
        if sh.local_engines && req.body.len() >= PIPELINE_BYTES {
            let admit = |op: &batch::Op| {
                flush(op);
                check(sh, who, op.table(), need(op)).map(drop)
            };
            let ran = batch::parse_and_run_in_tx(
                parser,
                &sh.client,
                tx,
                writable.clone(),
                default,
                &req.body,
                &charge,
                &admit,
            );
            match ran {
                Some(batch::TxRun::Ran(changed, r)) => return ran_ahead(sh, req, changed, r),
                Some(batch::TxRun::Refused(refused, wrote)) => {
                    let resp = match refused {
                        // Said of a malformed body or one that holds too
                        // much once parsed; a refused write says no more.
                        Ok(e)
                            if wrote
                                && matches!(e.kind(), ErrorKind::BadInput | ErrorKind::Denied) =>
                        {
                            let why = match &e {
                                Error::Denied { reason, .. } => reason.clone(),
                                e => e.to_string(),
                            };
                            Response::error(
                                status_of(&e),
                                &format!(
                                    "{why}; writes of this batch had already run, so the \
                                     transaction failed and is rolled back: end it"
                                ),
                            )
                        }
                        Ok(e) => err(e),
                        Err(resp) => resp,
                    };
                    return Err(resp);
                }
                None => {}
            }
        }
    }
    let ahead = match &sh.parser {
        Some(parser) if sh.tx.is_none() && sh.local_engines && req.body.len() >= PIPELINE_BYTES => {
            batch::parse_and_run(
                parser,
                &sh.client,
                writable.clone(),
                default,
                &req.body,
                &charge,
                &route,
                &admit,
            )
        }
        _ => None,
    };
    if let Some(batch::Run::Again) = ahead {
        // What the first parse held is gone: the next one holds its own.
        charge = batch::Charge::new(&sh.batch_memory);
    }
    let parsed = match ahead {
        Some(batch::Run::Invalid(e)) => return Err(err(e)),
        Some(batch::Run::Ran(changed, r)) => return ran_ahead(sh, req, changed, r),
        Some(batch::Run::Parsed(p)) => p,
        Some(batch::Run::Again) | None => batch::parse(
            sh.client.model(),
            writable.as_deref(),
            default,
            &req.body,
            &charge,
        )
        .map_err(err)?,
    };
    // Every right is checked before anything is written.
    for op in parsed.ops() {
        check(sh, who, op.table(), need(op))?;
    }
    parsed.ops().for_each(flush);
    let r = batch::execute(&parsed, |items, opts, stop| match sh.tx {
        Some(tx) => tx.apply_items(items, opts, stop),
        None => {
            // On the event loop, a batch must commit once: a part committed
            // before another part refuses to wait would be done twice when
            // the request runs again.
            if waits_refused() && !commits_once(sh, items, opts) {
                return Err(refuse("burrow-http"));
            }
            sh.client.apply_items(items, opts, stop)
        }
    });
    parsed.ops().for_each(flush);
    batch_outcome(sh, req, &r)
}

/// Batch bodies from this size are long work (see [`off_loop`]).
const LONG_BATCH_BYTES: usize = 64 * 1024;

/// Whether `items` run in one engine, in one transaction or one call.
fn commits_once(sh: &Shared, items: &[burrow_core::BatchItem<'_>], opts: BatchOptions) -> bool {
    let one_part = opts.rollback_on_error
        || opts.auto_transaction_rows == 0
        || opts.auto_transaction_rows >= items.len();
    let mut engines = items.iter().map(|i| sh.client.engine(i.table).ok());
    let first = engines.next().flatten();
    one_part
        && engines.all(|e| match (e, first) {
            (Some(e), Some(f)) => Arc::ptr_eq(e, f),
            _ => false,
        })
}

/// The answer to a batch that ran while it was parsed.
fn ran_ahead(
    sh: &Ctx<'_>,
    req: &RestRequest,
    changed: Vec<(&'static Table, i64)>,
    r: burrow_core::Result<Vec<BatchResult>>,
) -> Outcome {
    sh.ran_ahead.fetch_add(1, Ordering::Relaxed);
    for (t, id) in changed {
        sh.cache.flush_id(t, id);
    }
    let outcome = batch_outcome(sh, req, &r);
    // Freeing a large batch unmaps memory: the parser's thread does it, off
    // the answer's way.
    if let Some(parser) = &sh.parser {
        let body = req.body.clone();
        parser.send(move || drop((r, body)));
    }
    outcome
}

/// The answer to a batch that ran.
fn batch_outcome(
    sh: &Shared,
    req: &RestRequest,
    r: &burrow_core::Result<Vec<BatchResult>>,
) -> Outcome {
    match r {
        Ok(results) => {
            wrote(sh);
            Ok(Response::json(batch::results_json(results, req.exact)))
        }
        Err(Error::Batch { index, source }) => {
            wrote(sh);
            let mut resp = error_response(source);
            resp.body.pop();
            resp.body
                .extend_from_slice(format!(",\"index\":{index}}}").as_bytes());
            Err(resp)
        }
        Err(e) => Err(error_response(e)),
    }
}

fn auth(sh: &Shared, req: &RestRequest, who: Principal) -> Outcome {
    let Some(auth) = &sh.auth else {
        return Err(Response::error(404, "authentication is not enabled"));
    };
    if req.method() == "POST" {
        let obj = json_object(&req.body)?;
        let s = |k: &str| {
            obj.iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(k))
                .and_then(|(_, v)| v.as_str())
                .unwrap_or("")
                .to_owned()
        };
        let token = auth
            .bearer_login(&s("userName"), &s("password"), req.peer())
            .map_err(denied)?;
        let mut body = b"{\"result\":".to_vec();
        json::write_str(&mut body, &token);
        body.push(b'}');
        return Ok(Response::json(body));
    }
    if let Some(session) = req.param("session") {
        let id: u32 = session.parse().map_err(|_| bad("bad session"))?;
        auth.close_session(id, who);
        return Ok(Response::empty(200));
    }
    let user = req
        .param("username")
        .ok_or_else(|| bad("username is missing"))?;
    match (req.param("password"), req.param("clientnonce")) {
        (Some(proof), Some(cnonce)) => {
            let body = auth
                .mormot_login(&sh.root, &user, &proof, &cnonce, req.peer())
                .map_err(denied)?;
            Ok(Response::json(body.into_bytes()))
        }
        _ => {
            let nonce = auth
                .mormot_nonce()
                .ok_or_else(|| Response::error(401, "mORMot sessions are disabled"))?;
            Ok(Response::json(
                format!("{{\"result\":\"{nonce}\"}}").into_bytes(),
            ))
        }
    }
}

/// Ends a connection's transaction: `END` commits it, `ABORT` rolls it back.
pub(crate) fn end(sh: &Shared, tx: Transaction<'static>, commit: bool) -> Response {
    if !commit {
        // What the transaction wrote never shows; what a reader cached
        // meanwhile from an engine that let it see those writes goes.
        let _ = tx.rollback();
        sh.cache.flush();
        return Response::empty(200);
    }
    let r = tx.commit();
    wrote(sh);
    match r {
        Ok(()) => Response::empty(200),
        Err(e) => {
            sh.cache.flush();
            err(e)
        }
    }
}
