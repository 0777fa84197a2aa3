//! The external engine against real databases: SQLite through the external
//! layer always, PostgreSQL and MariaDB when their URLs are set (see
//! `common`). Each test body runs once per backend, in its own database.

#![allow(missing_docs)]

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use burrow_core::chrono::{DateTime, NaiveDate, Utc};
use burrow_core::{
    params, Batch, Currency, Database, EngineTx, Error, ErrorKind, Json, Model, Orm, Query, Record,
    Ref, RowOps, Storage, Value,
};
use burrow_derive::Record;
use burrow_sql::{DateTimeStorage, SqlEngine};
use burrow_sqlite::SqliteEngine;

use common::*;

external!(
    crud_round_trip,
    queries_where_order_limit,
    batch_ids_in_order_and_grouped_writes,
    batch_rollback_on_error_leaves_nothing,
    batch_failures_reported_and_rest_applied,
    transactions_commit_rollback_nested,
    transaction_other_thread,
    dropped_transaction_leaves_nothing_and_frees_its_connection,
    full_pool_is_busy_after_the_lock_timeout,
    failure_inside_transaction_does_not_end_it,
    field_kinds_round_trip,
    datetimes_as_text_are_exact,
    unique_violation_changes_nothing,
    mapping_onto_existing_table,
    value_too_long_for_mapped_column,
    type_mismatch,
    forced_ids_and_new_ids_do_not_collide,
    two_engines_share_one_database,
    virtual_table_through_sqlite,
    killed_connection_mid_batch,
    record_of_no_fields,
    calls_from_inside_runtimes,
    engines_dropped_inside_runtimes,
);

fn client(db: &Db) -> Result<(Arc<SqlEngine>, Database), Box<dyn std::error::Error>> {
    let e = db.engine()?;
    let c = Database::open(Model::new().with::<Sample>(), e.clone())?;
    Ok((e, c))
}

/// A short lock timeout, for tests of waiting for a transaction.
const SHORT_WAIT: Duration = Duration::from_millis(300);

/// A client whose engine has one connection and a short lock timeout: a
/// connection not handed back to the pool shows as a busy error.
fn one_connection(db: &Db) -> Result<(Arc<SqlEngine>, Database), Box<dyn std::error::Error>> {
    let e = Arc::new(db.builder().pool_size(1).lock_timeout(SHORT_WAIT).open()?);
    let c = Database::open(Model::new().with::<Sample>(), e.clone())?;
    Ok((e, c))
}

fn seed(c: &Database, prefix: &str, n: i32) -> burrow_core::Result<Vec<Sample>> {
    (0..n)
        .map(|i| {
            let mut s = Sample::new(&format!("{prefix}{i}"), i, &format!("{i}.5"));
            c.add(&mut s)?;
            Ok(s)
        })
        .collect()
}

fn crud_round_trip(db: &Db) -> TestResult {
    let (_, c) = client(db)?;
    let mut s = Sample::new("Ada", 36, "12.3456");
    s.note = Some("first".into());
    let id = c.add(&mut s)?;
    assert!(id > 0 && s.id == id);
    same_sample(db, &c.retrieve::<Sample>(id)?, &s)?;
    s.age = 37;
    s.note = None;
    c.update(&mut s)?;
    same_sample(db, &c.retrieve::<Sample>(id)?, &s)?;
    s.amount = "1".parse()?;
    s.name = "not written".into();
    c.update_fields(&mut s, &["Amount"])?;
    let back = c.retrieve::<Sample>(id)?;
    assert_eq!(back.amount, "1".parse()?);
    assert_eq!(back.name, "Ada");
    let mut into = Sample::default();
    assert!(c.retrieve_into(id, &mut into)?);
    assert_eq!(into.id, id);
    assert!(c.delete::<Sample>(id)?);
    assert!(!c.delete::<Sample>(id)?);
    assert!(c.get::<Sample>(id)?.is_none());
    let mut ghost = Sample::new("ghost", 1, "1");
    ghost.id = 999_999;
    assert_eq!(
        c.update(&mut ghost).map_err(|e| e.kind()),
        Err(ErrorKind::NotFound)
    );
    Ok(())
}

fn queries_where_order_limit(db: &Db) -> TestResult {
    let (_, c) = client(db)?;
    let seeded = seed(&c, "q", 10)?;
    assert_eq!(c.count::<Sample>("", &[])?, 10);
    assert_eq!(c.count::<Sample>("Age >= ?", &params![5])?, 5);
    let page: Vec<Sample> = c.select(
        &Query::filter("Age < ?", params![8])
            .order_by("Age")
            .desc()
            .limit(3)
            .offset(1),
    )?;
    assert_eq!(
        page.iter().map(|s| s.age).collect::<Vec<_>>(),
        vec![6, 5, 4]
    );
    let off: Vec<Sample> = c.select(&Query::all().order_by("ID").offset(8))?;
    assert_eq!(off.len(), 2);
    // LIKE ignores case, as in SQLite.
    assert_eq!(c.count::<Sample>("Name LIKE ?", &params!["Q1%"])?, 1);
    assert_eq!(
        c.count::<Sample>("Age IN (1, 2, 3) AND NOT Age = 2", &[])?,
        2
    );
    assert_eq!(
        c.count::<Sample>("Amount BETWEEN ? AND ?", &params!["2", "4"])?,
        2
    );
    assert_eq!(c.count::<Sample>("Born >= ?", &params!["1975-01-01"])?, 5);
    assert_eq!(c.count::<Sample>("Note IS NULL", &[])?, 10);
    let first = c
        .get_where::<Sample>("Name = ?", &params!["q3"])?
        .ok_or("q3")?;
    same_sample(db, &first, &seeded[3])?;
    assert_eq!(
        c.one_field_value::<Sample>("Amount", "Name = ?", &params!["q4"])?,
        Some(Value::Currency("4.5".parse()?))
    );
    assert_eq!(
        c.one_field_value::<Sample>("Born", "ID = ?", &params![seeded[2].id])?,
        Some(Value::Date(seeded[2].born))
    );
    // NULLs sort first ascending, on every backend.
    let mut n = Sample::new("with-note", 100, "0");
    n.note = Some("a".into());
    c.add(&mut n)?;
    let by_note: Vec<Sample> = c.select(&Query::all().order_by("Note").order_by("ID"))?;
    assert_eq!(by_note.last().map(|s| s.id), Some(n.id));
    // Text sorts by bytes, as in SQLite: upper case first.
    let mut upper = Sample::new("Z-upper", 101, "0");
    c.add(&mut upper)?;
    let names: Vec<Sample> = c.select(&Query::all().order_by("Name").limit(1))?;
    assert_eq!(names[0].name, "Z-upper");
    assert_eq!(c.delete_where::<Sample>("Age < ?", &params![3])?, 3);
    assert_eq!(c.count::<Sample>("", &[])?, 9);
    Ok(())
}

fn batch_ids_in_order_and_grouped_writes(db: &Db) -> TestResult {
    let (_, c) = client(db)?;
    let mut b = Batch::new();
    b.add_all((0..2_500).map(|i| Sample::new(&format!("b{i}"), i, "1.25")));
    let results = c.send(&mut b)?;
    let ids: Vec<i64> = results
        .iter()
        .map(|r| r.id().ok_or("failed"))
        .collect::<Result<_, _>>()?;
    assert_eq!(ids.len(), 2_500);
    for (i, id) in ids.iter().enumerate() {
        let s: Sample = c.retrieve(*id)?;
        if i % 97 == 0 {
            assert_eq!(s.name, format!("b{i}"), "ID {id} holds row {i}");
        }
    }
    assert_eq!(c.count::<Sample>("", &[])?, 2_500);
    // Grouped updates and deletes, with a missing row in each run.
    let mut b = Batch::new();
    for (i, id) in ids.iter().take(300).enumerate() {
        let mut s = Sample::new(&format!("u{i}"), 1000 + i as i32, "2");
        s.id = *id;
        b.update(s);
    }
    let mut ghost = Sample::new("ghost", 1, "1");
    ghost.id = 9_999_999;
    b.update(ghost);
    for id in &ids[300..600] {
        b.delete::<Sample>(*id);
    }
    b.delete::<Sample>(9_999_999);
    b.delete::<Sample>(ids[300]);
    let r = c.send(&mut b)?;
    assert_eq!(r.len(), 603);
    assert!(r[..300]
        .iter()
        .all(|x| matches!(x, burrow_core::BatchResult::Done)));
    assert!(matches!(r[300], burrow_core::BatchResult::Missing));
    assert!(r[301..601]
        .iter()
        .all(|x| matches!(x, burrow_core::BatchResult::Done)));
    assert!(matches!(r[601], burrow_core::BatchResult::Missing));
    assert!(
        matches!(r[602], burrow_core::BatchResult::Missing),
        "deleted twice"
    );
    assert_eq!(c.count::<Sample>("", &[])?, 2_200);
    assert_eq!(c.retrieve::<Sample>(ids[5])?.name, "u5");
    assert_eq!(c.count::<Sample>("Amount = ?", &params!["2"])?, 300);
    Ok(())
}

fn batch_rollback_on_error_leaves_nothing(db: &Db) -> TestResult {
    let (_, c) = one_connection(db)?;
    seed(&c, "r", 3)?;
    let mut b = Batch::new().rollback_on_error(true);
    b.add_all((0..500).map(|i| Sample::new(&format!("new{i}"), i, "1")));
    b.add(Sample::new("r1", 1, "1")); // duplicate unique name
    b.add(Sample::new("after", 1, "1"));
    let err = c.send(&mut b).expect_err("the batch must fail");
    match &err {
        Error::Batch { index, source } => {
            assert_eq!(*index, 500);
            assert_eq!(source.kind(), ErrorKind::UniqueViolation);
        }
        other => return Err(format!("expected Error::Batch, got {other:?}").into()),
    }
    assert_eq!(
        c.count::<Sample>("", &[])?,
        3,
        "nothing of the batch remains"
    );
    // The batch's transaction gave its one connection back.
    let tx = c.transaction()?;
    assert_eq!(tx.count::<Sample>("", &[])?, 3);
    tx.commit()?;
    Ok(())
}

fn batch_failures_reported_and_rest_applied(db: &Db) -> TestResult {
    for rows in [10_000, 0] {
        let (_, c) = client(db)?;
        c.delete_where::<Sample>("ID > ?", &params![0])?;
        let mut taken = Sample::new("taken", 1, "1");
        c.add(&mut taken)?;
        let mut b = Batch::new().auto_transaction_rows(rows);
        b.add(Sample::new("first", 3, "3"));
        b.add(Sample::new("second", 3, "3"));
        b.add(Sample::new("taken", 4, "4"));
        b.add(Sample::new("last", 6, "6"));
        let r = c.send(&mut b)?;
        assert!(r[0].id().is_some() && r[1].id().is_some() && r[3].id().is_some());
        match &r[2] {
            burrow_core::BatchResult::Failed(e) => assert_eq!(e.kind(), ErrorKind::UniqueViolation),
            other => return Err(format!("rows {rows}: expected a failure, got {other:?}").into()),
        }
        assert_eq!(c.count::<Sample>("", &[])?, 4, "rows {rows}");
    }
    Ok(())
}

fn transactions_commit_rollback_nested(db: &Db) -> TestResult {
    let e = Arc::new(db.builder().lock_timeout(SHORT_WAIT).open()?);
    let c = Database::open(Model::new().with::<Sample>(), e)?;
    {
        let tx = c.transaction()?;
        let mut a = Sample::new("tx-a", 1, "1");
        tx.add(&mut a)?;
        assert_eq!(tx.count::<Sample>("", &[])?, 1);
        // A transaction cannot begin another (it has no `transaction`). A
        // second one on the client waits for the only connection (SQLite)
        // and gives up as busy, or stands apart from the first.
        match c.transaction() {
            Ok(second) => {
                assert_ne!(db.backend, Backend::Sqlite, "a second transaction got in");
                assert_eq!(second.count::<Sample>("", &[])?, 0, "saw uncommitted rows");
            }
            Err(e) => {
                assert_eq!(db.backend, Backend::Sqlite, "{e}");
                assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
            }
        }
        let mut b = Batch::new();
        b.add_all((0..50).map(|i| Sample::new(&format!("tx-b{i}"), i, "1")));
        tx.send(&mut b)?;
        assert_eq!(tx.count::<Sample>("", &[])?, 51);
    }
    assert_eq!(c.count::<Sample>("", &[])?, 0, "dropped guard rolled back");
    let tx = c.transaction()?;
    let mut a = Sample::new("kept", 1, "1");
    tx.add(&mut a)?;
    tx.commit()?;
    assert_eq!(c.count::<Sample>("", &[])?, 1);
    let n = c.in_transaction(|tx| {
        let mut b = Sample::new("closure", 2, "2");
        tx.add(&mut b)?;
        tx.count::<Sample>("", &[])
    })?;
    assert_eq!(n, 2);
    assert_eq!(
        c.in_transaction(|tx| -> burrow_core::Result<()> {
            tx.add(&mut Sample::new("undone", 3, "3"))?;
            Err(Error::BadInput("the closure fails".into()))
        })
        .map_err(|e| e.kind()),
        Err(ErrorKind::BadInput)
    );
    assert_eq!(
        c.count::<Sample>("", &[])?,
        2,
        "a failed closure rolled back"
    );
    Ok(())
}

fn transaction_other_thread(db: &Db) -> TestResult {
    let (_, c) = client(db)?;
    seed(&c, "base", 2)?;
    thread::scope(|s| -> TestResult {
        let tx = c.transaction()?;
        let mut mine = Sample::new("mine", 1, "1");
        tx.add(&mut mine)?;
        let cl = &c;
        let other = s.spawn(move || -> burrow_core::Result<(u64, i64)> {
            // Never sees the uncommitted row; its own write commits on its own.
            let n = cl.count::<Sample>("Name = ?", &params!["mine"])?;
            let mut theirs = Sample::new("theirs", 2, "2");
            Ok((n, cl.add(&mut theirs)?))
        });
        if db.backend == Backend::Sqlite {
            // One connection: the other thread waits for the transaction.
            thread::sleep(Duration::from_millis(100));
            assert!(
                !other.is_finished(),
                "SQLite: another thread got into a transaction"
            );
        }
        tx.rollback()?;
        let (n, id) = other.join().map_err(|_| "thread panicked")??;
        assert_eq!(n, 0, "another thread saw an uncommitted row");
        assert_eq!(c.retrieve::<Sample>(id)?.name, "theirs");
        Ok(())
    })?;
    assert_eq!(c.count::<Sample>("", &[])?, 3);
    Ok(())
}

fn dropped_transaction_leaves_nothing_and_frees_its_connection(db: &Db) -> TestResult {
    let (e, c) = one_connection(db)?;
    let table = Sample::table();
    let insert = match db.backend {
        Backend::Postgres => "INSERT INTO \"Sample\" (\"Name\", \"LastName\", \"Amount\", \"Age\", \"Born\", \"CreatedAt\", \"Changed\") \
                              VALUES ($1, '', 0, 0, '2000-01-01', now(), now())",
        Backend::MariaDb => "INSERT INTO Sample (Name, LastName, Amount, Age, Born, CreatedAt, Changed) \
                             VALUES (?, '', 0, 0, '2000-01-01', now(), now())",
        Backend::Sqlite => "INSERT INTO Sample (Name, LastName, Amount, Age, Born, CreatedAt, Changed) \
                            VALUES (?, '', 0, 0, '2000-01-01', '', '')",
    };
    // Through the engine's own handle: row calls and statements of one's own.
    {
        let tx = e.transaction()?;
        tx.insert(table, None, &Sample::new("dropped-a", 1, "1"))?;
        assert_eq!(tx.execute(insert, &[Value::from("dropped-b")])?, 1);
        assert_eq!(tx.count(table, &burrow_core::Filter::default())?, 2);
        // A row callback that calls back into its transaction is refused,
        // not deadlocked.
        let mut inner = None;
        tx.query("SELECT 1", &[], &mut |_| {
            inner = Some(tx.count(table, &burrow_core::Filter::default()));
            Ok(())
        })?;
        match inner {
            Some(Err(e)) => assert_eq!(e.kind(), ErrorKind::BadInput, "{e}"),
            other => return Err(format!("expected a refusal, got {other:?}").into()),
        }
    }
    // Through the trait: the handle a client's transaction holds.
    {
        let tx: Box<dyn EngineTx> = e.clone().begin()?;
        tx.insert(table, None, &Sample::new("dropped-c", 1, "1"))?;
    }
    // Nothing is left, and the one connection is back: these calls would be
    // busy otherwise.
    let start = Instant::now();
    assert_eq!(
        c.count::<Sample>("", &[])?,
        0,
        "a dropped transaction left rows"
    );
    assert!(start.elapsed() < SHORT_WAIT, "waited for a connection");
    // A committed handle keeps its writes and frees its connection too.
    let tx = e.transaction()?;
    tx.execute(insert, &[Value::from("kept")])?;
    tx.commit()?;
    assert_eq!(c.count::<Sample>("Name = ?", &params!["kept"])?, 1);
    let tx = e.transaction()?;
    tx.execute(insert, &[Value::from("rolled-back")])?;
    tx.rollback()?;
    assert_eq!(c.count::<Sample>("", &[])?, 1);
    Ok(())
}

fn full_pool_is_busy_after_the_lock_timeout(db: &Db) -> TestResult {
    let (e, c) = one_connection(db)?;
    let tx = c.transaction()?;
    tx.add(&mut Sample::new("held", 1, "1"))?;
    // The engine's one connection is the transaction's: an engine call, here
    // from the same thread, waits for it the lock timeout, then fails.
    for attempt in [
        c.count::<Sample>("", &[]).map(drop),
        c.add(&mut Sample::new("waits", 2, "2")).map(drop),
        e.clone().begin().map(drop),
    ] {
        match attempt {
            Err(err @ Error::Busy { .. }) => {
                assert_eq!(err.kind(), ErrorKind::Busy);
                assert!(err.to_string().contains("busy"), "{err}");
            }
            other => return Err(format!("expected a busy error, got {other:?}").into()),
        }
    }
    let start = Instant::now();
    let err = c.count::<Sample>("", &[]).expect_err("busy");
    let waited = start.elapsed();
    assert_eq!(err.kind(), ErrorKind::Busy);
    assert!(
        waited >= SHORT_WAIT && waited < SHORT_WAIT * 10,
        "waited {waited:?} for a lock timeout of {SHORT_WAIT:?}"
    );
    // The transaction was not disturbed, and once it ends the engine is free.
    assert_eq!(tx.count::<Sample>("", &[])?, 1);
    tx.commit()?;
    assert_eq!(c.count::<Sample>("", &[])?, 1);
    Ok(())
}

fn failure_inside_transaction_does_not_end_it(db: &Db) -> TestResult {
    let (_, c) = client(db)?;
    let tx = c.transaction()?;
    let mut ok = Sample::new("fresh", 1, "1");
    tx.add(&mut ok)?;
    let mut bad = Sample::new("fresh", 2, "2");
    assert_eq!(
        tx.add(&mut bad).map_err(|e| e.kind()),
        Err(ErrorKind::UniqueViolation)
    );
    let mut more = Sample::new("more", 3, "3");
    tx.add(&mut more)?;
    assert_eq!(tx.count::<Sample>("", &[])?, 2);
    tx.commit()?;
    assert_eq!(c.count::<Sample>("", &[])?, 2);
    Ok(())
}

/// Every field kind.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Kinds")]
pub struct Kinds {
    pub id: i64,
    pub small: i32,
    pub big: i64,
    pub unsigned: u32,
    pub real: f64,
    pub flag: bool,
    pub money: Currency,
    pub text: String,
    pub bytes: Vec<u8>,
    pub day: NaiveDate,
    pub at: DateTime<Utc>,
    pub doc: serde_json_value::V,
    pub tags: Json<Vec<String>>,
    pub owner: Ref<Sample>,
    pub maybe_int: Option<i64>,
    pub maybe_text: Option<String>,
    pub maybe_day: Option<NaiveDate>,
}

mod serde_json_value {
    /// A JSON document field.
    pub type V = burrow_core::Json<std::collections::BTreeMap<String, i64>>;
}

fn kinds_sample(i: i64) -> Kinds {
    Kinds {
        id: 0,
        small: i32::MIN + i as i32,
        big: i64::MAX - i,
        unsigned: u32::MAX - i as u32,
        real: 0.1 + i as f64,
        flag: i % 2 == 0,
        money: Currency::from_scaled(-123_456_789 + i),
        text: format!("héllo ✓ '\"; DROP TABLE x; -- {i}"),
        bytes: vec![0, 255, 1, i as u8],
        day: NaiveDate::from_ymd_opt(1, 1, 1).expect("date")
            + burrow_core::chrono::Days::new(i as u64 * 1000),
        at: DateTime::from_timestamp(1_700_000_000 + i, 123_456_000).expect("time"),
        doc: Json([("a".to_owned(), i)].into()),
        tags: Json(vec!["x".into(), format!("{i}")]),
        owner: Ref::new(i),
        maybe_int: (i % 2 == 0).then_some(i),
        maybe_text: None,
        maybe_day: Some(NaiveDate::from_ymd_opt(2024, 2, 29).expect("date")),
    }
}

fn field_kinds_round_trip(db: &Db) -> TestResult {
    let e = db.engine()?;
    let c = Database::open(Model::new().with::<Kinds>().with::<Sample>(), e)?;
    let mut one = kinds_sample(1);
    c.add(&mut one)?;
    assert_eq!(c.retrieve::<Kinds>(one.id)?, one);
    let mut b = Batch::new();
    b.add_all((2..40).map(kinds_sample));
    let ids: Vec<i64> = c.send(&mut b)?.iter().filter_map(|r| r.id()).collect();
    for (k, id) in ids.iter().enumerate() {
        let mut want = kinds_sample(k as i64 + 2);
        want.id = *id;
        assert_eq!(c.retrieve::<Kinds>(*id)?, want, "batch row {k}");
    }
    // Typed comparisons in WHERE.
    let all: Vec<Kinds> = (1..40).map(kinds_sample).collect();
    let want = |f: &dyn Fn(&Kinds) -> bool| all.iter().filter(|k| f(k)).count() as u64;
    let limit: Currency = "-12345.6780".parse()?;
    assert_eq!(
        c.count::<Kinds>("Flag = ?", &params![true])?,
        want(&|k| k.flag)
    );
    assert_eq!(
        c.count::<Kinds>("Money < ?", &params!["-12345.6780"])?,
        want(&|k| k.money < limit)
    );
    assert_eq!(c.count::<Kinds>("At > ?", &params![one.at])?, 38);
    assert_eq!(c.count::<Kinds>("Day = ?", &params![one.day])?, 1);
    assert_eq!(
        c.count::<Kinds>("MaybeInt IS NULL", &[])?,
        want(&|k| k.maybe_int.is_none())
    );
    Ok(())
}

fn datetimes_as_text_are_exact(db: &Db) -> TestResult {
    let e = Arc::new(
        db.builder()
            .datetime_storage(DateTimeStorage::Text)
            .open()?,
    );
    let c = Database::open(Model::new().with::<Sample>(), e)?;
    let mut s = Sample::new("exact", 1, "1");
    c.add(&mut s)?;
    s.created_at = DateTime::from_timestamp(1_700_000_000, 123_456_789).ok_or("time")?;
    c.update(&mut s)?;
    let back = c.retrieve::<Sample>(s.id)?;
    assert_eq!(back.created_at.timestamp_subsec_nanos(), 123_456_789);
    assert_eq!(back, s);
    // Native storage keeps microseconds (floored).
    if db.backend != Backend::Sqlite {
        let (_, c2) = {
            let db2 = Db::fresh(db.backend, "native_us")?;
            let e = db2.engine()?;
            let c = Database::open(Model::new().with::<Sample>(), e.clone())?;
            let mut s = Sample::new("micro", 1, "1");
            c.add(&mut s)?;
            s.created_at = DateTime::from_timestamp(1_700_000_000, 123_456_789).ok_or("time")?;
            c.update(&mut s)?;
            let back = c.retrieve::<Sample>(s.id)?;
            assert_eq!(back.created_at.timestamp_subsec_nanos(), 123_456_000);
            assert_eq!(
                c.count::<Sample>("CreatedAt = ?", &params![s.created_at])?,
                1
            );
            (e, c)
        };
        drop(c2);
    }
    Ok(())
}

fn unique_violation_changes_nothing(db: &Db) -> TestResult {
    let (_, c) = client(db)?;
    let seeded = seed(&c, "u", 3)?;
    let mut dup = Sample::new("u1", 9, "9");
    match c.add(&mut dup) {
        Err(Error::UniqueViolation { table, .. }) => assert_eq!(table, "Sample"),
        other => return Err(format!("expected a unique violation, got {other:?}").into()),
    }
    assert_eq!(dup.id, 0);
    let mut clash = seeded[0].clone();
    clash.name = "u2".into();
    assert_eq!(
        c.update(&mut clash).map_err(|e| e.kind()),
        Err(ErrorKind::UniqueViolation)
    );
    let mut taken_id = Sample::new("other", 1, "1");
    assert_eq!(
        c.add_with_id(&mut taken_id, seeded[1].id)
            .map_err(|e| e.kind()),
        Err(ErrorKind::UniqueViolation)
    );
    assert_eq!(c.count::<Sample>("", &[])?, 3);
    same_sample(db, &c.retrieve::<Sample>(seeded[0].id)?, &seeded[0])?;
    Ok(())
}

/// A record stored in a table of an existing schema.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Person")]
pub struct Person {
    pub id: i64,
    pub first_name: String,
    #[burrow(column = "order")]
    pub rank: i32,
    pub born: NaiveDate,
    pub joined: DateTime<Utc>,
}

/// Creates `people` as another application would have.
fn create_people(db: &Db, e: &SqlEngine) -> burrow_core::Result<u64> {
    let ddl = match db.backend {
        Backend::Postgres => {
            "CREATE TABLE people (person_id BIGSERIAL PRIMARY KEY, \"FIRST_NAME\" VARCHAR(10) NOT NULL, \
             \"order\" SMALLINT NOT NULL, born VARCHAR(10) NOT NULL, joined TIMESTAMPTZ NOT NULL)"
        }
        Backend::MariaDb => {
            "CREATE TABLE people (person_id BIGINT AUTO_INCREMENT PRIMARY KEY, FIRST_NAME VARCHAR(10) NOT NULL, \
             `order` SMALLINT NOT NULL, born VARCHAR(10) NOT NULL, joined DATETIME(6) NOT NULL) ENGINE=InnoDB"
        }
        Backend::Sqlite => {
            "CREATE TABLE people (person_id INTEGER PRIMARY KEY, FIRST_NAME VARCHAR(10) NOT NULL, \
             \"order\" INTEGER NOT NULL, born VARCHAR(10) NOT NULL, joined TEXT NOT NULL)"
        }
    };
    db.ddl(e, ddl)
}

fn people_engine(db: &Db) -> burrow_core::Result<Arc<SqlEngine>> {
    db.builder()
        .map_table("Person", "people")
        .map_column("Person", "ID", "person_id")
        .map_column("Person", "FirstName", "FIRST_NAME")
        .map_column("Person", "Born", "born")
        .map_column("Person", "Joined", "joined")
        .open()
        .map(Arc::new)
}

fn mapping_onto_existing_table(db: &Db) -> TestResult {
    let e = people_engine(db)?;
    create_people(db, &e)?;
    let c = Database::open(Model::new().with::<Person>(), e.clone())?;
    let mut p = Person {
        id: 0,
        first_name: "Grace".into(),
        rank: 3,
        born: NaiveDate::from_ymd_opt(1906, 12, 9).ok_or("date")?,
        joined: DateTime::from_timestamp(1_000_000_000, 5_000).ok_or("time")?,
    };
    c.add(&mut p)?;
    assert_eq!(c.retrieve::<Person>(p.id)?, p);
    assert_eq!(
        c.count::<Person>("Rank = ? AND Born = ?", &params![3, "1906-12-09"])?,
        1
    );
    let mut b = Batch::new();
    b.add_all((0..20).map(|i| Person {
        rank: i,
        ..p.clone()
    }));
    c.send(&mut b)?;
    assert_eq!(c.count::<Person>("", &[])?, 21);
    // The rows are where another application expects them.
    let mut n = 0;
    let sql = match db.backend {
        Backend::MariaDb => "SELECT count(*) FROM people WHERE FIRST_NAME = ? AND born = ?",
        Backend::Postgres => "SELECT count(*) FROM people WHERE \"FIRST_NAME\" = $1 AND born = $2",
        Backend::Sqlite => "SELECT count(*) FROM people WHERE FIRST_NAME = ? AND born = ?",
    };
    e.query(
        sql,
        &[Value::from("Grace"), Value::from("1906-12-09")],
        &mut |r| {
            n = match r[0] {
                Value::Int(i) => i,
                _ => -1,
            };
            Ok(())
        },
    )?;
    assert_eq!(n, 21);
    // Seen through SQLite, the table's text compares by bytes, whatever the
    // collation the other application chose (MariaDB's default ignores case).
    let main = Arc::new(SqliteEngine::memory()?);
    let people = e.clone();
    let c = Database::builder(Model::new().with::<Person>())
        .default_engine(main.clone())
        .place::<Person>(e)
        .open()?;
    for name in ["grace", "Bob"] {
        c.add(&mut Person {
            first_name: name.into(),
            ..p.clone()
        })?;
    }
    for (cond, want) in [
        ("FirstName = 'grace'", 1),
        ("FirstName <> 'Grace'", 2),
        ("FirstName < 'a'", 22),
        ("FirstName > 'Z'", 1),
    ] {
        let sql = format!("SELECT count(*) FROM Person WHERE {cond}");
        let n = main.with_connection(|c| c.query_row(&sql, [], |r| r.get::<_, i64>(0)))?;
        assert_eq!(n, want, "{cond}");
    }
    // Times written by another application in another layout show in SQL as
    // Burrow writes them.
    let raw = match db.backend {
        Backend::Postgres => {
            "INSERT INTO people (\"FIRST_NAME\", \"order\", born, joined) \
             VALUES ('Raw', 1, '1906-12-09', '2001-09-09 01:46:40.250+00')"
        }
        Backend::MariaDb => {
            "INSERT INTO people (FIRST_NAME, `order`, born, joined) \
             VALUES ('Raw', 1, '1906-12-09', '2001-09-09 01:46:40.250')"
        }
        Backend::Sqlite => {
            "INSERT INTO people (FIRST_NAME, \"order\", born, joined) \
             VALUES ('Raw', 1, '1906-12-09', '2001-09-09 01:46:40.250')"
        }
    };
    people.execute(raw, &[])?;
    let shown = main.with_connection(|c| {
        c.query_row(
            "SELECT Born, Joined FROM Person WHERE FirstName = 'Raw'",
            [],
            |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)),
        )
    })?;
    assert_eq!(
        shown,
        ("1906-12-09".into(), "2001-09-09T01:46:40.25".into())
    );
    // And filters on them mean what they mean on the text SQL is shown.
    for cond in [
        "Joined = '2001-09-09T01:46:40.25'",
        "Joined >= '2001-09-09T01:46:40.25'",
        "Joined > '2001-09-09T01:46:40'",
        "Joined < '2001-09-09T01:46:41'",
        "Born = '1906-12-09'",
        "Born <= '1906-12-09'",
    ] {
        let sql = format!("SELECT count(*) FROM Person WHERE FirstName = 'Raw' AND {cond}");
        let n = main.with_connection(|c| c.query_row(&sql, [], |r| r.get::<_, i64>(0)))?;
        assert_eq!(n, 1, "{cond}");
    }
    Ok(())
}

fn value_too_long_for_mapped_column(db: &Db) -> TestResult {
    let e = people_engine(db)?;
    create_people(db, &e)?;
    let c = Database::open(Model::new().with::<Person>(), e)?;
    let mut ok = Person {
        first_name: "Short".into(),
        ..Person::default()
    };
    c.add(&mut ok)?;
    if db.backend == Backend::Sqlite {
        return Ok(()); // SQLite does not enforce VARCHAR(n).
    }
    let mut long = Person {
        first_name: "Much too long for ten".into(),
        ..Person::default()
    };
    let err = c.add(&mut long).expect_err("too long");
    assert_eq!(err.kind(), ErrorKind::BadInput, "{err}");
    assert!(err.to_string().contains("too long"), "{err}");
    let mut b = Batch::new().rollback_on_error(true);
    b.add_all((0..10).map(|_| ok.clone()));
    b.add(long.clone());
    let err = c.send(&mut b).expect_err("too long in a batch");
    assert!(matches!(err, Error::Batch { index: 10, .. }), "{err:?}");
    ok.first_name = "x".repeat(11);
    assert_eq!(
        c.update(&mut ok).map_err(|e| e.kind()),
        Err(ErrorKind::BadInput)
    );
    assert_eq!(c.count::<Person>("", &[])?, 1);
    assert_eq!(c.retrieve::<Person>(ok.id)?.first_name, "Short");
    Ok(())
}

/// A record whose field cannot live in the existing column.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Person")]
pub struct WrongPerson {
    pub id: i64,
    pub first_name: i64,
}

fn type_mismatch(db: &Db) -> TestResult {
    let e = people_engine(db)?;
    create_people(db, &e)?;
    // A field whose type the column cannot hold is refused when the table opens.
    let wrong = db
        .builder()
        .map_table("Person", "people")
        .map_column("Person", "ID", "person_id")
        .map_column("Person", "FirstName", "FIRST_NAME")
        .map_column("Person", "Born", "born")
        .open()?;
    match Database::open(Model::new().with::<WrongPerson>(), Arc::new(wrong)) {
        Err(e) => assert_eq!(e.kind(), ErrorKind::Schema, "{e}"),
        Ok(_) => return Err("a text column was accepted for an integer field".into()),
    }
    let c = Database::open(Model::new().with::<Person>(), e)?;
    if db.backend == Backend::Sqlite {
        return Ok(());
    }
    // A value out of the column's range (SMALLINT).
    let mut big = Person {
        first_name: "Big".into(),
        rank: 100_000,
        ..Person::default()
    };
    let err = c.add(&mut big).expect_err("out of range");
    assert_eq!(err.kind(), ErrorKind::BadInput, "{err}");
    // A wrong-typed WHERE parameter is refused before the database sees it.
    assert_eq!(
        c.count::<Person>("Rank = ?", &params!["abc"])
            .map_err(|e| e.kind()),
        Err(ErrorKind::BadInput)
    );
    assert_eq!(c.count::<Person>("", &[])?, 0);
    Ok(())
}

fn forced_ids_and_new_ids_do_not_collide(db: &Db) -> TestResult {
    let (_, c) = client(db)?;
    let mut a = Sample::new("forced", 1, "1");
    c.add_with_id(&mut a, 1000)?;
    let mut b = Sample::new("next", 2, "2");
    let id = c.add(&mut b)?;
    assert!(id > 1000, "new ID {id} after a forced 1000");
    let mut one = Sample::new("one", 3, "3");
    c.add_with_id(&mut one, 1)?;
    same_sample(db, &c.retrieve::<Sample>(1)?, &one)?;
    Ok(())
}

fn two_engines_share_one_database(db: &Db) -> TestResult {
    if db.backend == Backend::Sqlite {
        return Ok(()); // Two servers share a database server, not a file.
    }
    let e1 = db.engine()?;
    let e2 = db.engine()?;
    let c1 = Database::open(Model::new().with::<Sample>(), e1)?;
    let c2 = Database::open(Model::new().with::<Sample>(), e2)?;
    let run = |c: &Database, tag: &str| -> burrow_core::Result<Vec<(i64, String)>> {
        let mut all = Vec::new();
        for round in 0..5 {
            let mut b = Batch::new();
            let names: Vec<String> = (0..200).map(|i| format!("{tag}-{round}-{i}")).collect();
            b.add_all(names.iter().map(|n| Sample::new(n, 1, "1")));
            let r = c.send(&mut b)?;
            for (res, n) in r.iter().zip(names) {
                all.push((res.id().unwrap_or(-1), n));
            }
            let mut one = Sample::new(&format!("{tag}-single-{round}"), 1, "1");
            all.push((c.add(&mut one)?, one.name.clone()));
        }
        Ok(all)
    };
    let (a, b) = thread::scope(|s| {
        let h1 = s.spawn(|| run(&c1, "one"));
        let h2 = s.spawn(|| run(&c2, "two"));
        (h1.join(), h2.join())
    });
    let a = a.map_err(|_| "panic")??;
    let b = b.map_err(|_| "panic")??;
    let ids: HashSet<i64> = a.iter().chain(&b).map(|(id, _)| *id).collect();
    assert_eq!(ids.len(), a.len() + b.len(), "an ID was handed out twice");
    for (id, name) in a.iter().chain(&b).step_by(7) {
        assert_eq!(&c1.retrieve::<Sample>(*id)?.name, name, "ID {id}");
    }
    Ok(())
}

/// A local table of the main SQLite engine, for a JOIN.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Note")]
pub struct Note {
    pub id: i64,
    pub sample: Ref<Sample>,
    pub text: String,
}

fn virtual_table_through_sqlite(db: &Db) -> TestResult {
    let ext = db.engine()?;
    let main = Arc::new(SqliteEngine::memory()?);
    let c = Database::builder(Model::new().with::<Sample>().with::<Note>())
        .default_engine(main)
        .place::<Sample>(ext.clone())
        .open()?;
    let seeded = seed(&c, "v", 20)?;
    let mut note = Note {
        sample: Ref::new(seeded[4].id),
        text: "hello".into(),
        ..Note::default()
    };
    c.add(&mut note)?;
    let all: Vec<Sample> = c.sql_list("SELECT * FROM Sample ORDER BY ID", &[])?;
    assert_eq!(all.len(), 20);
    for (a, b) in all.iter().zip(&seeded) {
        same_sample(db, a, b)?;
    }
    let one: Vec<Sample> =
        c.sql_list("SELECT * FROM Sample WHERE ID = ?", params![seeded[7].id])?;
    assert_eq!(one.len(), 1);
    same_sample(db, &one[0], &seeded[7])?;
    let by_name: Vec<Sample> = c.sql_list("SELECT * FROM Sample WHERE Name = ?", params!["v9"])?;
    assert_eq!(by_name.len(), 1);
    let joined: Vec<Sample> = c.sql_list(
        "SELECT s.* FROM Note n JOIN Sample s ON s.ID = n.Sample WHERE n.Text = ?",
        params!["hello"],
    )?;
    assert_eq!(joined.len(), 1);
    assert_eq!(joined[0].name, "v4");
    let amounts: Vec<Sample> = c.sql_list(
        "SELECT * FROM Sample WHERE Amount > ? ORDER BY Amount DESC",
        params![185_000],
    )?;
    assert_eq!(
        amounts.len(),
        1,
        "currency seen by SQL as 1/10,000 integers"
    );
    // A server keeps times to the microsecond and would round a finer bound:
    // such a range stays with SQLite, which compares the text.
    let c = Database::builder(Model::new().with::<Kinds>())
        .default_engine(Arc::new(SqliteEngine::memory()?))
        .place::<Kinds>(ext)
        .open()?;
    let mut k = kinds_sample(1);
    k.at = DateTime::from_timestamp(1_700_000_000, 1_000).ok_or("time")?;
    c.add(&mut k)?;
    for (cond, want) in [
        ("At > '2023-11-14T22:13:20.0000005'", 1),
        ("At < '2023-11-14T22:13:20.0000015'", 1),
        ("At >= '2023-11-14T22:13:20.000001'", 1),
        ("At < '2023-11-14T22:13:20.000001'", 0),
    ] {
        let n = c
            .sql_list::<Kinds>(&format!("SELECT * FROM Kinds WHERE {cond}"), &[])?
            .len();
        assert_eq!(n, want, "{cond}");
    }
    Ok(())
}

fn killed_connection_mid_batch(db: &Db) -> TestResult {
    if db.backend == Backend::Sqlite {
        return Ok(()); // No server to drop the connection.
    }
    // One connection: the calls after the kill work only if the batch's dead
    // connection left the pool and made room for a new one.
    let e = Arc::new(
        db.builder()
            .bulk_rows(200)
            .pool_size(1)
            .lock_timeout(Duration::from_secs(2))
            .open()?,
    );
    let c = Database::open(Model::new().with::<Sample>(), e)?;
    seed(&c, "k", 5)?;
    let mut killed = 0;
    let mut outcome = None;
    for attempt in 0..5 {
        let (r, k) = thread::scope(|s| {
            let sender = s.spawn(|| {
                let mut b = Batch::new().rollback_on_error(true);
                b.add_all((0..60_000).map(|i| Sample::new(&format!("kill{attempt}-{i}"), i, "1")));
                c.send(&mut b)
            });
            let mut k = 0;
            for _ in 0..400 {
                if sender.is_finished() {
                    break;
                }
                thread::sleep(Duration::from_millis(5));
                k += db.kill_busy().unwrap_or(0);
                if k > 0 {
                    break;
                }
            }
            (sender.join(), k)
        });
        killed += k;
        let r = r.map_err(|_| "sender panicked")?;
        if k > 0 {
            outcome = Some(r);
            break;
        }
    }
    if killed == 0 {
        return Err("the batch finished before any connection could be killed".into());
    }
    match outcome.ok_or("no outcome")? {
        Ok(_) => return Err("a batch whose connection was killed succeeded".into()),
        Err(err) => {
            let text = err.to_string();
            assert_eq!(err.kind(), ErrorKind::Engine, "{text}");
            assert!(text.contains("connection"), "unclear error: {text}");
        }
    }
    // Consistent: nothing of the rolled-back batch; and the next call works.
    assert_eq!(c.count::<Sample>("", &[])?, 5);
    let mut after = Sample::new("after-kill", 1, "1");
    c.add(&mut after)?;
    assert_eq!(c.count::<Sample>("", &[])?, 6);
    Ok(())
}

/// A record that is only its ID: its INSERT names the ID column alone (as
/// `(ID) VALUES (NULL)`, or PostgreSQL's `DEFAULT VALUES`) and its UPDATE
/// sets the ID to itself.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Bare")]
struct Bare {
    id: i64,
}

fn record_of_no_fields(db: &Db) -> TestResult {
    let c = Database::open(Model::new().with::<Bare>(), db.engine()?)?;
    let (mut a, mut b) = (Bare::default(), Bare::default());
    c.add(&mut a)?;
    c.add(&mut b)?;
    assert!(a.id > 0 && b.id > a.id);
    c.update(&mut a)?;
    let mut batch = Batch::new();
    batch.add_all((0..3).map(|_| Bare::default()));
    let ids: Vec<i64> = c
        .send(&mut batch)?
        .iter()
        .map(|r| r.id().ok_or("failed"))
        .collect::<Result<_, _>>()?;
    assert_eq!(ids.len(), 3);
    assert!(ids[0] > b.id && ids[1] > ids[0] && ids[2] > ids[1]);
    assert_eq!(c.count::<Bare>("", &[])?, 5);
    assert!(c.delete::<Bare>(a.id)?);
    assert_eq!(c.retrieve::<Bare>(b.id)?, b);
    Ok(())
}

/// Adds and deletes a row named `probe`, then reads every seeded row with
/// `for_each` and returns the names in ID order. With `nested`, reads each
/// row again by ID from inside the row callback: a second pooled connection
/// while the first still streams (SQLite through this layer refuses such a
/// call on one thread).
fn read_twice(c: &Database, nested: bool, probe: &str) -> burrow_core::Result<Vec<String>> {
    let mut s = Sample::new(probe, 1, "1.5");
    let id = c.add(&mut s)?;
    assert!(c.delete::<Sample>(id)?);
    let mut names = Vec::new();
    c.for_each::<Sample>(&Query::all().order_by("ID"), &mut |s| {
        if nested {
            let again = c.retrieve::<Sample>(s.id)?;
            assert_eq!(again.name, s.name);
        }
        names.push(s.name.clone());
        Ok(())
    })?;
    Ok(names)
}

/// Calls from Tokio's threads answer as from a plain thread: a
/// multi-threaded runtime's blocking pool, `block_in_place`, one of its
/// workers directly, and a single-threaded runtime's task; each with a
/// write, and a read whose callback calls the engine again (for
/// PostgreSQL, inside the connection's own runtime).
fn calls_from_inside_runtimes(db: &Db) -> TestResult {
    let (_, c) = client(db)?;
    let nested = db.backend != Backend::Sqlite;
    seed(&c, "rt", 5)?;
    let want = read_twice(&c, nested, "plain")?;
    assert_eq!(want.len(), 5);
    let c = Arc::new(c);
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()?;
    let d = c.clone();
    let pooled =
        multi.block_on(multi.spawn_blocking(move || read_twice(&d, nested, "pooled")))??;
    let d = c.clone();
    let in_place = multi.block_on(multi.spawn(async move {
        tokio::task::block_in_place(|| read_twice(&d, nested, "in place"))
    }))??;
    let d = c.clone();
    let on_worker =
        multi.block_on(multi.spawn(async move { read_twice(&d, nested, "worker") }))??;
    let single = tokio::runtime::Builder::new_current_thread().build()?;
    let d = c.clone();
    let on_single = single.block_on(async move { read_twice(&d, nested, "single") })?;
    for got in [pooled, in_place, on_worker, on_single] {
        assert_eq!(got, want);
    }
    // A callback that fails part-way, where the rows come from a thread of
    // their own, with more rows than that thread holds in flight: its error
    // comes back, and the engine answers as before.
    let mut more = Batch::new();
    more.add_all((0..600).map(|i| Sample::new(&format!("more{i}"), i, "2.5")));
    c.send(&mut more)?;
    let d = c.clone();
    let (stopped, after) = single.block_on(async move {
        let mut seen = 0;
        let stopped = d.for_each::<Sample>(&Query::all(), &mut |_| {
            seen += 1;
            if seen == 2 {
                return Err(Error::BadInput("stop here".into()));
            }
            Ok(())
        });
        (stopped.map(|()| seen), read_twice(&d, nested, "after"))
    });
    assert!(
        matches!(&stopped, Err(Error::BadInput(m)) if m == "stop here"),
        "{stopped:?}"
    );
    let after = after?;
    assert_eq!(after.len(), want.len() + 600);
    assert_eq!(after[..want.len()], want[..]);
    Ok(())
}

/// An engine used and dropped inside async code (the end of an async `main`,
/// a task that owns it): its connections close without a panic, on a worker
/// of a multi-threaded runtime, in its `block_on`, and in a single-threaded
/// runtime alike.
fn engines_dropped_inside_runtimes(db: &Db) -> TestResult {
    fn use_and_drop((e, c): (Arc<SqlEngine>, Database)) -> burrow_core::Result<usize> {
        let n = read_twice(&c, false, "dropped")?.len();
        drop(c);
        drop(e);
        Ok(n)
    }
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()?;
    let opened = client(db)?;
    assert_eq!(
        multi.block_on(multi.spawn(async move { use_and_drop(opened) }))??,
        0
    );
    let opened = client(db)?;
    assert_eq!(multi.block_on(async move { use_and_drop(opened) })?, 0);
    let single = tokio::runtime::Builder::new_current_thread().build()?;
    let opened = client(db)?;
    assert_eq!(single.block_on(async move { use_and_drop(opened) })?, 0);
    Ok(())
}
