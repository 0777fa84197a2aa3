//! Every field kind round-trips through the engine, and compares in WHERE.

use burrow::chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};
use burrow::driver::{BatchItem, BatchOp, OwnedRow};
use burrow::{params, Currency, ErrorKind, Json, Orm, Query, Record, Ref, Value};
use serde::{Deserialize, Serialize};

use crate::common::*;

conformance!(
    extremes_round_trip,
    ordinary_values_round_trip,
    none_and_some_round_trip,
    automatic_times_are_filled,
    currency_is_exact,
    float_specials,
    dates_outside_four_digit_years,
    datetimes_outside_four_digit_years,
    long_text_and_blobs,
    where_compares_each_kind,
    where_on_sample_dates_and_amounts,
    a_long_batch_of_every_kind_round_trips,
    a_date_in_a_text_field_takes_no_other_field_s_date,
);

/// A JSON-stored struct.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Point {
    pub x: i32,
    pub y: i32,
    pub label: String,
    pub tags: Vec<String>,
}

/// One field of every kind, plain and optional.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Kinds")]
pub struct Kinds {
    pub id: i64,
    pub small: i32,
    pub big: i64,
    pub unsigned: u32,
    pub real: f64,
    pub money: Currency,
    pub flag: bool,
    pub text: String,
    pub bytes: Vec<u8>,
    pub day: NaiveDate,
    pub instant: DateTime<Utc>,
    pub doc: serde_json::Value,
    pub point: Json<Point>,
    pub owner: Ref<Sample>,
    pub maybe_small: Option<i32>,
    pub maybe_big: Option<i64>,
    pub maybe_unsigned: Option<u32>,
    pub maybe_real: Option<f64>,
    pub maybe_money: Option<Currency>,
    pub maybe_flag: Option<bool>,
    pub maybe_text: Option<String>,
    pub maybe_bytes: Option<Vec<u8>>,
    pub maybe_day: Option<NaiveDate>,
    pub maybe_instant: Option<DateTime<Utc>>,
    pub maybe_doc: Option<serde_json::Value>,
    pub maybe_point: Option<Json<Point>>,
    pub maybe_owner: Option<Ref<Sample>>,
    #[burrow(created)]
    pub created: DateTime<Utc>,
    #[burrow(modified)]
    pub modified: Option<DateTime<Utc>>,
}

fn kinds_model() -> burrow::Model {
    model().with::<Kinds>()
}

fn instant(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32, nanos: u32) -> DateTime<Utc> {
    let date = NaiveDate::from_ymd_opt(y, mo, d).expect("date");
    let time = NaiveTime::from_hms_nano_opt(h, mi, s, nanos).expect("time");
    Utc.from_utc_datetime(&NaiveDateTime::new(date, time))
}

/// Adds `k`, reads it back three ways, and compares (times filled by the ORM
/// included, as `add` writes them into `k`).
fn round_trip(c: &impl Orm, mut k: Kinds, what: &str) -> Result<Kinds, Box<dyn std::error::Error>> {
    c.add(&mut k)?;
    let back: Kinds = c.retrieve(k.id)?;
    same(&back, &k, &format!("{what}: retrieve"))?;
    let mut into = Kinds::default();
    c.retrieve_into(k.id, &mut into)?;
    same(&into, &k, &format!("{what}: retrieve_into"))?;
    let listed = c.list::<Kinds>("ID = ?", &params![k.id])?;
    same(&listed, &vec![k.clone()], &format!("{what}: list"))?;
    // Update round trip: write the same values through update as well.
    c.update(&mut k)?;
    same(
        &c.retrieve::<Kinds>(k.id)?,
        &k,
        &format!("{what}: after update"),
    )?;
    Ok(k)
}

fn all_bytes() -> Vec<u8> {
    (0..=255u8).collect()
}

fn extremes_round_trip(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.client(kinds_model())?;
    let lows = Kinds {
        small: i32::MIN,
        big: i64::MIN,
        unsigned: 0,
        real: f64::MIN,
        money: Currency::from_scaled(i64::MIN),
        flag: false,
        text: String::new(),
        bytes: Vec::new(),
        day: date(1, 1, 1),
        instant: instant(1, 1, 1, 0, 0, 0, 0),
        doc: serde_json::Value::Null,
        point: Json(Point::default()),
        owner: Ref::new(i64::MIN),
        maybe_small: Some(i32::MIN),
        maybe_big: Some(i64::MIN),
        maybe_unsigned: Some(0),
        maybe_real: Some(f64::MIN_POSITIVE),
        maybe_money: Some(Currency::from_scaled(i64::MIN)),
        maybe_flag: Some(false),
        maybe_text: Some(String::new()),
        maybe_bytes: Some(Vec::new()),
        maybe_day: Some(date(1, 1, 1)),
        maybe_instant: Some(instant(1, 1, 1, 0, 0, 0, 1)),
        maybe_doc: f.json_null_in_option().then_some(serde_json::Value::Null),
        maybe_point: Some(Json(Point::default())),
        maybe_owner: Some(Ref::new(0)),
        ..Kinds::default()
    };
    round_trip(&c, lows, "lows")?;
    let highs = Kinds {
        small: i32::MAX,
        big: i64::MAX,
        unsigned: u32::MAX,
        real: f64::MAX,
        money: Currency::from_scaled(i64::MAX),
        flag: true,
        text: "\u{10FFFF}".into(),
        bytes: all_bytes(),
        day: date(9999, 12, 31),
        instant: instant(9999, 12, 31, 23, 59, 59, 999_999_999),
        doc: serde_json::json!({"max": i64::MAX, "min": i64::MIN, "u": u64::MAX}),
        point: Json(Point {
            x: i32::MAX,
            y: i32::MIN,
            label: "\"'\\\u{0}".into(),
            tags: vec![String::new(); 3],
        }),
        owner: Ref::new(i64::MAX),
        maybe_small: Some(i32::MAX),
        maybe_big: Some(i64::MAX),
        maybe_unsigned: Some(u32::MAX),
        maybe_real: Some(5e-324),
        maybe_money: Some(Currency::from_scaled(i64::MAX)),
        maybe_flag: Some(true),
        maybe_text: Some(storable(f, "\u{0}")),
        maybe_bytes: Some(vec![0; 17]),
        maybe_day: Some(date(9999, 12, 31)),
        maybe_instant: Some(instant(9999, 12, 31, 23, 59, 59, 999_999_999)),
        maybe_doc: Some(serde_json::json!([[], {}, "", 0, -0.5, true, null])),
        maybe_point: Some(Json(Point {
            x: -1,
            y: 1,
            label: "🦀".into(),
            tags: vec!["a".into()],
        })),
        maybe_owner: Some(Ref::new(i64::MAX)),
        ..Kinds::default()
    };
    round_trip(&c, highs, "highs")?;
    Ok(())
}

fn ordinary_values_round_trip(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.client(kinds_model())?;
    let mut owner = Sample::new("owner", 30, "1");
    c.add(&mut owner)?;
    let texts = [
        "plain",
        "héllo wörld, 日本語, Ελληνικά, עברית, 🦀👍🏽",
        "it's \"quoted\" `back` \\ slash",
        "line\nbreak\r\ttab",
        "NUL \u{0} inside",
        "trailing space ",
        "'; DROP TABLE Kinds; --",
        "%_ like wildcards",
    ];
    for (i, t) in texts.iter().enumerate() {
        let stored = storable(f, t);
        let t = &stored.as_str();
        let i32v = i as i32;
        let k = Kinds {
            small: -i32v * 1000,
            big: 1 << (i * 7),
            unsigned: 3_000_000_000 + i as u32,
            real: 0.1 * i as f64 - 0.35,
            money: cur(&format!("-{i}.0{i}")),
            flag: i % 2 == 0,
            text: (*t).to_owned(),
            bytes: t.as_bytes().to_vec(),
            day: date(2024, 2, 29),
            instant: instant(2024, 2, 29, 23, 59, 59, 123_456_789 + i as u32),
            doc: serde_json::json!({
                "text": t,
                "n": i,
                "nested": {"list": [1.5, "two", null, {"deep": [true]}]},
            }),
            point: Json(Point {
                x: i32v,
                y: -i32v,
                label: (*t).to_owned(),
                tags: vec![(*t).to_owned(), "b".into()],
            }),
            owner: Ref::new(owner.id),
            maybe_text: Some((*t).to_owned()),
            maybe_owner: Some(Ref::new(owner.id)),
            ..Kinds::default()
        };
        let back = round_trip(&c, k, &format!("text #{i}"))?;
        assert_eq!(back.text, *t);
        assert_eq!(back.owner.id(), owner.id);
        // The referenced record is reachable through the reference.
        let o: Sample = c.retrieve(back.owner.id())?;
        assert_eq!(o.name, "owner");
    }
    // Leap second, kept as second 60.
    let leap = instant(2016, 12, 31, 23, 59, 59, 1_500_000_000);
    let back = round_trip(
        &c,
        Kinds {
            instant: leap,
            maybe_instant: Some(leap),
            ..Kinds::default()
        },
        "leap second",
    )?;
    assert_eq!(back.instant, leap);
    Ok(())
}

fn none_and_some_round_trip(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.client(kinds_model())?;
    let nothing = round_trip(&c, Kinds::default(), "all None")?;
    assert_eq!(nothing.maybe_small, None);
    assert_eq!(nothing.maybe_doc, None);
    assert_eq!(
        c.count::<Kinds>("MaybeText IS NULL AND MaybeDoc IS NULL", &[])?,
        1
    );
    // Some(0), Some(""), Some(false): not NULL.
    let zeros = Kinds {
        maybe_small: Some(0),
        maybe_big: Some(0),
        maybe_unsigned: Some(0),
        maybe_real: Some(0.0),
        maybe_money: Some(Currency::ZERO),
        maybe_flag: Some(false),
        maybe_text: Some(String::new()),
        maybe_bytes: Some(Vec::new()),
        maybe_day: Some(date(1970, 1, 1)),
        maybe_instant: Some(instant(1970, 1, 1, 0, 0, 0, 0)),
        maybe_doc: Some(serde_json::json!({})),
        maybe_point: Some(Json(Point::default())),
        maybe_owner: Some(Ref::new(0)),
        ..Kinds::default()
    };
    let mut zeros = round_trip(&c, zeros, "all Some(zero)")?;
    assert_eq!(c.count::<Kinds>("MaybeText IS NOT NULL", &[])?, 1);
    assert_eq!(
        c.count::<Kinds>("MaybeBytes IS NOT NULL AND MaybeFlag IS NOT NULL", &[])?,
        1
    );
    // Some → None through update and update_fields.
    zeros.maybe_small = None;
    zeros.maybe_text = None;
    c.update_fields(&mut zeros, &["MaybeSmall", "MaybeText"])?;
    let back = c.retrieve::<Kinds>(zeros.id)?;
    assert_eq!(back.maybe_small, None);
    assert_eq!(back.maybe_text, None);
    assert_eq!(back.maybe_big, Some(0));
    // A None read into a record holding Some.
    let mut into = zeros.clone();
    into.maybe_big = Some(5);
    c.retrieve_into(nothing.id, &mut into)?;
    same(&into, &nothing, "None over Some")?;
    Ok(())
}

fn automatic_times_are_filled(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.client(kinds_model())?;
    let t0 = Utc::now();
    let mut k = Kinds::default();
    c.add(&mut k)?;
    let t1 = Utc::now();
    let back = c.retrieve::<Kinds>(k.id)?;
    assert!(
        back.created >= t0 && back.created <= t1,
        "created {}",
        back.created
    );
    let m = back.modified.ok_or("modified time not filled on add")?;
    assert!(m >= t0 && m <= t1);
    // An update refreshes the modification time only.
    let mut upd = back.clone();
    upd.created = instant(2000, 1, 1, 0, 0, 0, 0);
    upd.modified = None;
    let t2 = Utc::now();
    c.update_fields(&mut upd, &["Small"])?;
    let after = c.retrieve::<Kinds>(k.id)?;
    assert_eq!(
        after.created, back.created,
        "created time not written by update_fields"
    );
    assert!(after.modified.ok_or("modified cleared")? >= t2);
    // Nanoseconds survive: the stored times equal the record's to the nanosecond.
    assert_eq!(after.modified, upd.modified);
    // A batch fills them too.
    let mut batch = burrow::Batch::new();
    batch.add(Kinds::default());
    let t3 = Utc::now();
    let r = c.send(&mut batch)?;
    let id = r[0].id().ok_or("batch add gave no ID")?;
    let b = c.retrieve::<Kinds>(id)?;
    assert!(b.created >= t3, "batch add fills the created time");
    assert!(b.modified.is_some_and(|m| m >= t3));
    Ok(())
}

/// A batch long enough to fill several multi-row inserts, and a partial one,
/// of records with every kind of field, set and unset by turns: each record
/// reads back as it was sent, each value in its own column and row.
fn a_long_batch_of_every_kind_round_trips(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.client(kinds_model())?;
    let kinds = |i: usize| {
        let i32v = i as i32;
        let some = i % 3 != 0;
        let text = format!("row {i}: {}", "é".repeat(i % 5));
        Kinds {
            small: -i32v,
            big: (i as i64) << 33,
            unsigned: 4_000_000_000 - i as u32,
            real: i as f64 / 8.0,
            money: cur(&format!("{i}.{:04}", i % 10_000)),
            flag: i % 2 == 0,
            text: text.clone(),
            bytes: vec![(i % 256) as u8; i % 7],
            day: date(
                1900 + (i % 200) as i32,
                1 + (i % 12) as u32,
                1 + (i % 28) as u32,
            ),
            instant: instant(
                2020,
                1 + (i % 12) as u32,
                1,
                (i % 24) as u32,
                0,
                0,
                i as u32,
            ),
            doc: serde_json::json!({ "i": i, "text": text }),
            point: Json(Point {
                x: i32v,
                y: 1 - i32v,
                label: text.clone(),
                tags: vec![format!("t{i}")],
            }),
            owner: Ref::new(i as i64),
            maybe_small: some.then_some(i32v),
            maybe_big: some.then_some(-(i as i64)),
            maybe_unsigned: some.then_some(i as u32),
            maybe_real: some.then_some(-(i as f64)),
            maybe_money: some.then(|| cur(&format!("-{i}.5"))),
            maybe_flag: some.then_some(i % 4 == 0),
            maybe_text: some.then(|| format!("maybe {i}")),
            maybe_bytes: some.then(|| vec![1, 2, (i % 256) as u8]),
            maybe_day: some.then(|| date(2000, 1, 1 + (i % 28) as u32)),
            maybe_instant: some.then(|| instant(1999, 12, 31, 23, 59, (i % 60) as u32, 7)),
            maybe_doc: some.then(|| serde_json::json!([i, null])),
            maybe_point: some.then(|| Json(Point::default())),
            maybe_owner: some.then(|| Ref::new(-(i as i64))),
            ..Kinds::default()
        }
    };
    const N: usize = 1_234;
    let mut batch = burrow::Batch::new();
    batch.add_all((0..N).map(kinds).collect::<Vec<_>>());
    let t0 = Utc::now();
    let results = c.send(&mut batch)?;
    let t1 = Utc::now();
    assert_eq!(results.len(), N);
    for (i, r) in results.iter().enumerate() {
        let id = r.id().ok_or_else(|| format!("row {i}: {r:?}"))?;
        let mut back: Kinds = c.retrieve(id)?;
        assert!(back.created >= t0 && back.created <= t1, "row {i}: created");
        assert!(back.modified == Some(back.created), "row {i}: modified");
        let mut want = kinds(i);
        want.id = id;
        (back.created, back.modified) = (want.created, want.modified);
        same(&back, &want, &format!("batch row {i}"))?;
    }
    Ok(())
}

/// Rows built by hand, whose values need not match their fields' kinds: a
/// date in a text field, sent beside the date fields of many rows in one
/// multi-row insert, is stored as its text or refused, and never takes (or
/// shifts) the text of another field's date.
fn a_date_in_a_text_field_takes_no_other_field_s_date(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.client(kinds_model())?;
    let engine = store.engine_for(kinds_model())?;
    let table = Kinds::table();
    let at = |name: &str| (table.fields.iter()).position(|f| f.name.eq_ignore_ascii_case(name));
    let (text, day) = (at("text").ok_or("text")?, at("day").ok_or("day")?);
    let rows: Vec<OwnedRow> = (0..300u32)
        .map(|i| {
            let k = Kinds {
                day: date(2001, 1 + i % 12, 1 + i % 28),
                instant: instant(2002, 2, 2, 2, 2, 2, i),
                ..Kinds::default()
            };
            let mut row = OwnedRow::from_fields(&k);
            if i % 2 == 1 {
                row.values[text] = Value::Date(date(1990 + (i % 30) as i32, 3, 3));
            }
            row
        })
        .collect();
    let items: Vec<BatchItem<'_>> = rows
        .iter()
        .map(|row| BatchItem {
            table,
            op: BatchOp::Add { id: None, row },
        })
        .collect();
    let mut results = Vec::new();
    let tx = engine.begin()?;
    match tx.apply_batch(&items, &mut results, true) {
        Ok(()) => tx.commit()?,
        Err(e) if e.kind() == ErrorKind::BadInput => {
            tx.rollback()?;
            assert_eq!(c.count::<Kinds>("", &[])?, 0, "a refused batch wrote rows");
            return Ok(());
        }
        Err(e) => return Err(format!("neither stored nor refused as bad input: {e}").into()),
    }
    assert_eq!(results.len(), rows.len());
    for (i, r) in results.iter().enumerate() {
        let id = r.id().ok_or_else(|| format!("row {i}: {r:?}"))?;
        let back: Kinds = c.retrieve(id)?;
        let sent = &rows[i];
        same(
            &Value::Date(back.day),
            &sent.values[day],
            &format!("row {i} day"),
        )?;
        let want_instant = instant(2002, 2, 2, 2, 2, 2, i as u32);
        same(&back.instant, &want_instant, &format!("row {i} instant"))?;
        let want_text = match &sent.values[text] {
            Value::Date(d) => d.format("%Y-%m-%d").to_string(),
            _ => String::new(),
        };
        same(&back.text, &want_text, &format!("row {i} text"))?;
    }
    Ok(())
}

fn currency_is_exact(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let tenth = Currency::from_f64(0.1).ok_or("0.1")?;
    let fifth = Currency::from_f64(0.2).ok_or("0.2")?;
    let mut s = Sample::new("sum", 1, "0");
    s.amount = tenth + fifth;
    c.add(&mut s)?;
    let back: Sample = c.retrieve(s.id)?;
    assert_eq!(back.amount, cur("0.3"));
    assert_eq!(back.amount.to_string(), "0.3");
    assert_eq!(c.count::<Sample>("Amount = ?", &params![cur("0.3")])?, 1);
    assert_eq!(c.count::<Sample>("Amount = 0.3", &[])?, 1);
    assert_eq!(c.count::<Sample>("Amount = '0.3'", &[])?, 1);
    // Ten rows of 0.1 sum to exactly 1 read back and added up.
    for i in 0..10 {
        let mut t = Sample::new(&format!("tenth{i}"), 2, "0.1");
        c.add(&mut t)?;
    }
    let total = c
        .list::<Sample>("Name LIKE ?", &params!["tenth%"])?
        .iter()
        .fold(Currency::ZERO, |a, s| a + s.amount);
    assert_eq!(total, cur("1"));
    if let Some(sum) = store.raw(|conn| {
        conn.query_row(
            "SELECT sum(Amount) FROM Sample WHERE Name LIKE 'tenth%'",
            [],
            |r| r.get::<_, i64>(0),
        )
    }) {
        assert_eq!(sum?, 10_000, "stored as exact 1/10,000 units");
    }
    // Negative amounts, four decimals, the smallest unit.
    for (name, text) in [
        ("neg", "-1234.5678"),
        ("unit", "0.0001"),
        ("negunit", "-0.0001"),
        ("big", "922337203685477.5807"),
        ("small", "-922337203685477.5807"),
    ] {
        let mut t = Sample::new(name, 3, "0");
        t.amount = cur(text);
        c.add(&mut t)?;
        let back: Sample = c.retrieve(t.id)?;
        assert_eq!(back.amount, cur(text), "{name}");
        assert_eq!(back.amount.to_string(), text.trim_end_matches('0'));
        assert_eq!(
            c.one_field_value::<Sample>("Amount", "ID = ?", &params![t.id])?,
            Some(Value::Currency(cur(text)))
        );
    }
    Ok(())
}

fn float_specials(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.client(kinds_model())?;
    for (i, v) in [
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.0,
        f64::EPSILON,
        1.0 / 3.0,
        -1e-300,
        std::f64::consts::PI,
    ]
    .into_iter()
    .enumerate()
    {
        if v.is_infinite() && !f.float_infinities() {
            let mut k = Kinds {
                real: v,
                ..Kinds::default()
            };
            expect_kind!(c.add(&mut k), BadInput);
            continue;
        }
        let k = round_trip(
            &c,
            Kinds {
                real: v,
                maybe_real: Some(v),
                ..Kinds::default()
            },
            &format!("float #{i}"),
        )?;
        assert!(
            k.real.to_bits() == v.to_bits() || k.real == v,
            "{v} read as {}",
            k.real
        );
    }
    // NaN: either stored and read back as NaN, or refused with an error; never
    // stored as something else.
    let mut nan = Kinds {
        real: f64::NAN,
        ..Kinds::default()
    };
    match c.add(&mut nan) {
        Ok(id) => {
            let back: Kinds = c.retrieve(id)?;
            assert!(back.real.is_nan(), "NaN read back as {}", back.real);
        }
        Err(e) => assert_eq!(e.kind(), burrow::ErrorKind::BadInput, "{e}"),
    }
    let mut nan = Kinds {
        maybe_real: Some(f64::NAN),
        ..Kinds::default()
    };
    match c.add(&mut nan) {
        Ok(id) => {
            let back: Kinds = c.retrieve(id)?;
            assert!(
                back.maybe_real.is_some_and(f64::is_nan),
                "Some(NaN) read back as {:?}",
                back.maybe_real
            );
        }
        Err(e) => assert_eq!(e.kind(), burrow::ErrorKind::BadInput, "{e}"),
    }
    Ok(())
}

const ODD_YEARS: [i32; 5] = [-44, 0, 10_000, 99_999, 262_000];

fn dates_outside_four_digit_years(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.client(kinds_model())?;
    for y in ODD_YEARS {
        let day = date(y, 3, 15);
        if !f.dates_beyond_four_digit_years() && !(0..=9999).contains(&y) {
            let mut k = Kinds {
                day,
                ..Kinds::default()
            };
            let before = c.count::<Kinds>("", &[])?;
            expect_kind!(c.add(&mut k), BadInput);
            assert_eq!(
                c.count::<Kinds>("", &[])?,
                before,
                "a refused date stored nothing"
            );
            continue;
        }
        round_trip(
            &c,
            Kinds {
                day,
                maybe_day: Some(day),
                ..Kinds::default()
            },
            &format!("date in year {y}"),
        )?;
    }
    Ok(())
}

fn datetimes_outside_four_digit_years(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.client(kinds_model())?;
    for y in ODD_YEARS {
        let at = instant(y, 3, 15, 12, 30, 15, 5);
        round_trip(
            &c,
            Kinds {
                instant: at,
                maybe_instant: Some(at),
                ..Kinds::default()
            },
            &format!("date-time in year {y}"),
        )?;
    }
    Ok(())
}

/// What `Display` prints, `FromStr` reads back: JSON and the wire depend on it.
#[test]
fn currency_text_round_trips_at_the_extremes() {
    for c in [
        Currency::from_scaled(i64::MAX),
        Currency::from_scaled(i64::MIN + 1),
        Currency::from_scaled(i64::MIN),
        Currency::from_scaled(-1),
        Currency::ZERO,
    ] {
        let text = c.to_string();
        assert_eq!(text.parse::<Currency>(), Ok(c), "{text}");
    }
}

fn long_text_and_blobs(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.client(kinds_model())?;
    let text: String = storable(f, "ab€🦀\u{0}'\"").repeat(40_000);
    let bytes: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    round_trip(
        &c,
        Kinds {
            text: text.clone(),
            bytes: bytes.clone(),
            maybe_text: Some(text),
            maybe_bytes: Some(bytes),
            ..Kinds::default()
        },
        "long",
    )?;
    Ok(())
}

fn where_compares_each_kind(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.client(kinds_model())?;
    let mut owner = Sample::new("owner", 1, "1");
    c.add(&mut owner)?;
    let mut rows = Vec::new();
    for i in 0..5i32 {
        let mut k = Kinds {
            small: i - 2,
            big: i64::from(i) * 10_000_000_000,
            unsigned: u32::MAX - 4 + i as u32,
            real: f64::from(i) / 4.0,
            money: Currency::from_scaled(i64::from(i) * 2_500 - 5_000),
            flag: i % 2 == 1,
            text: ["alpha", "Beta", "gamma", "δέλτα", "epsilon"][i as usize].into(),
            bytes: vec![i as u8; i as usize + 1],
            day: date(1999 + i, 12, 31),
            instant: instant(2024, 1, 1, 0, 0, i as u32, i as u32 * 100_000_000),
            doc: serde_json::json!({ "i": i }),
            owner: Ref::new(if i < 2 { owner.id } else { 0 }),
            maybe_small: (i % 2 == 0).then_some(i),
            maybe_day: (i >= 3).then(|| date(2020, 1, i as u32)),
            maybe_money: (i != 2).then(|| Currency::from_scaled(i64::from(i))),
            ..Kinds::default()
        };
        c.add(&mut k)?;
        rows.push(k);
    }
    let check = |w: &str, p: Vec<Value>, want: &[usize]| -> TestResult {
        let got = c.select::<Kinds>(&Query::filter(w, p.clone()).order_by("ID"))?;
        let want: Vec<Kinds> = want.iter().map(|&i| rows[i].clone()).collect();
        same(&got, &want, &format!("WHERE {w} with {p:?}"))?;
        assert_eq!(
            c.count::<Kinds>(w, &p)?,
            want.len() as u64,
            "count WHERE {w}"
        );
        Ok(())
    };
    check("Small < ?", params![0], &[0, 1])?;
    check("Small = ?", params![-2], &[0])?;
    check("Small >= -1 AND Small <= 1", vec![], &[1, 2, 3])?;
    check("Big > ?", params![25_000_000_000i64], &[3, 4])?;
    check("Big = ?", params![40_000_000_000i64], &[4])?;
    check("Unsigned > ?", params![u32::MAX - 2], &[3, 4])?;
    check("Unsigned = ?", params![u32::MAX], &[4])?;
    check("Real > ?", params![0.5], &[3, 4])?;
    check("Real <= ?", params![0.25], &[0, 1])?;
    check("Real BETWEEN ? AND ?", params![0.2, 0.8], &[1, 2, 3])?;
    check("Money > ?", params![Currency::ZERO], &[3, 4])?;
    check("Money < ?", params![cur("-0.25")], &[0])?;
    check("Money = ?", params![cur("-0.25")], &[1])?;
    check("Money = ?", params!["-0.25"], &[1])?;
    check("Money >= ?", params![0], &[2, 3, 4])?;
    check("Money > ?", params![0.3], &[4])?;
    check("Money IN (?, ?)", params![cur("-0.5"), cur("0.5")], &[0, 4])?;
    check("Flag = ?", params![true], &[1, 3])?;
    check("Flag = false", vec![], &[0, 2, 4])?;
    check("Flag = 1", vec![], &[1, 3])?;
    check("Text = ?", params!["δέλτα"], &[3])?;
    check("Text > ?", params!["alpha"], &[2, 3, 4])?;
    check("Text LIKE ?", params!["%a"], &[0, 1, 2])?;
    check("Text NOT LIKE ?", params!["%a"], &[3, 4])?;
    check("Bytes = ?", params![vec![2u8, 2, 2]], &[2])?;
    check("Day < ?", params!["2001-01-01"], &[0, 1])?;
    check("Day < ?", params![date(2001, 1, 1)], &[0, 1])?;
    check("Day = '2002-12-31'", vec![], &[3])?;
    check(
        "Day BETWEEN ? AND ?",
        params![date(2000, 12, 31), date(2002, 12, 31)],
        &[1, 2, 3],
    )?;
    check(
        "Instant > ?",
        params![instant(2024, 1, 1, 0, 0, 2, 0)],
        &[2, 3, 4],
    )?;
    check(
        "Instant >= ?",
        params!["2024-01-01T00:00:02.2Z"],
        &[2, 3, 4],
    )?;
    check("Instant > ?", params!["2024-01-01T00:00:02.2Z"], &[3, 4])?;
    check("Instant < ?", params!["2024-01-01 00:00:01.5"], &[0, 1])?;
    check(
        "Instant = ?",
        params![instant(2024, 1, 1, 0, 0, 4, 400_000_000)],
        &[4],
    )?;
    check("Owner = ?", params![owner.id], &[0, 1])?;
    check("Owner <> ?", params![owner.id], &[2, 3, 4])?;
    check("MaybeSmall IS NULL", vec![], &[1, 3])?;
    check(
        "MaybeSmall IS NOT NULL AND MaybeSmall > ?",
        params![0],
        &[2, 4],
    )?;
    check("MaybeDay IS NOT NULL", vec![], &[3, 4])?;
    check("MaybeDay > ?", params!["2020-01-03"], &[4])?;
    check("MaybeMoney < ?", params![cur("0.0002")], &[0, 1])?;
    check("NOT (Small < 0) AND NOT Flag = true", vec![], &[2, 4])?;
    Ok(())
}

fn where_on_sample_dates_and_amounts(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let people = [
        ("ann", "1980-05-01", "100.10"),
        ("bob", "1975-12-31", "-3.5"),
        ("cat", "2001-01-01", "100.1"),
        ("dan", "1999-12-31", "0"),
    ];
    for (name, born, amount) in people {
        let mut s = Sample::new(name, 1, amount);
        s.born = born.parse()?;
        c.add(&mut s)?;
    }
    let names = |w: &str, p: Vec<Value>| -> burrow::Result<Vec<String>> {
        Ok(c.select::<Sample>(&Query::filter(w, p).order_by("Name"))?
            .into_iter()
            .map(|s| s.name)
            .collect())
    };
    assert_eq!(names("Born < ?", params!["1990-01-01"])?, ["ann", "bob"]);
    assert_eq!(names("Born >= ?", params!["1999-12-31"])?, ["cat", "dan"]);
    assert_eq!(names("Amount > ?", params![cur("100")])?, ["ann", "cat"]);
    assert_eq!(names("Amount = ?", params![cur("100.1")])?, ["ann", "cat"]);
    assert_eq!(names("Amount < ?", params![0])?, ["bob"]);
    assert_eq!(
        names("Amount > ? AND Born < ?", params![cur("50"), "2000-01-01"])?,
        ["ann"]
    );
    Ok(())
}
