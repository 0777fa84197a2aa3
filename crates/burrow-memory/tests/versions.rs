//! Several versions of a record on one engine, kind changes, exhausted IDs and
//! NaN: the engine's own rules beyond the conformance suite.

mod common;

use std::sync::Arc;
use std::time::Duration;

use burrow_core::chrono::{DateTime, NaiveDate, Utc};
use burrow_core::{Batch, BatchResult, Database, Error, ErrorKind, Model, Orm, Query, Value};
use burrow_derive::Record;
use burrow_memory::{MemoryEngine, MemoryOptions};
use common::*;

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Item")]
struct ItemV1 {
    id: i64,
    #[burrow(unique)]
    name: String,
    qty: i32,
    #[burrow(index)]
    tag: Option<String>,
}

/// Reordered, without `Qty`, with a new indexed `Extra`: no field is where it
/// was in the first version.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Item")]
struct ItemV2 {
    id: i64,
    tag: Option<String>,
    #[burrow(index)]
    extra: i64,
    name: String,
}

fn item(name: &str, qty: i32, tag: Option<&str>) -> ItemV1 {
    ItemV1 {
        id: 0,
        name: name.into(),
        qty,
        tag: tag.map(Into::into),
    }
}

fn client<T: burrow_core::Record>(e: &Arc<MemoryEngine>) -> Database {
    Database::open(Model::new().with::<T>(), e.clone()).unwrap()
}

#[test]
fn versions_that_reorder_and_drop_fields_share_a_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("items.bmem");
    let e = Arc::new(MemoryEngine::open(MemoryOptions::file(&path)).unwrap());
    let c1 = client::<ItemV1>(&e);
    for (i, t) in [Some("red"), None, Some("blue"), Some("red")]
        .iter()
        .enumerate()
    {
        c1.add(&mut item(&format!("n{i}"), i as i32 + 1, *t))
            .unwrap();
    }
    let c2 = client::<ItemV2>(&e);
    // Old rows through the new version: its fields, the new one at zero.
    let rows = c2.select::<ItemV2>(&Query::all()).unwrap();
    assert_eq!(rows.len(), 4);
    assert_eq!(
        rows[2],
        ItemV2 {
            id: 3,
            tag: Some("blue".into()),
            extra: 0,
            name: "n2".into(),
        }
    );
    // Queries name the new version's fields, through the indexes too.
    assert_eq!(c2.count::<ItemV2>("Tag = ?", &["red".into()]).unwrap(), 2);
    assert_eq!(c2.count::<ItemV2>("Extra = 0", &[]).unwrap(), 4);
    assert_eq!(c2.count::<ItemV2>("Name IN ('n1', 'n3')", &[]).unwrap(), 2);
    let desc = c2
        .select::<ItemV2>(&Query::all().order_by("Name").desc().limit(2))
        .unwrap();
    assert_eq!(
        desc.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        ["n3", "n2"]
    );
    assert_eq!(
        c2.one_field_value::<ItemV2>("Tag", "Name = ?", &["n0".into()])
            .unwrap(),
        Some(Value::Text("red".into()))
    );
    // A write through the new version: the field it lacks gets its zero value.
    let mut fresh = ItemV2 {
        id: 0,
        tag: Some("green".into()),
        extra: 7,
        name: "v2".into(),
    };
    let id = c2.add(&mut fresh).unwrap();
    assert_eq!(id, 5);
    let old_view = c1.retrieve::<ItemV1>(id).unwrap();
    assert_eq!(
        old_view,
        ItemV1 {
            id,
            name: "v2".into(),
            qty: 0,
            tag: Some("green".into())
        }
    );
    // Partial updates through either version touch their fields only.
    let mut r = c2.retrieve::<ItemV2>(1).unwrap();
    r.extra = 42;
    r.name = "not written".into();
    c2.update_fields(&mut r, &["Extra"]).unwrap();
    let mut o = c1.retrieve::<ItemV1>(1).unwrap();
    assert_eq!((o.name.as_str(), o.qty), ("n0", 1));
    o.qty = 10;
    o.tag = None;
    c1.update_fields(&mut o, &["Qty"]).unwrap();
    assert_eq!(c2.retrieve::<ItemV2>(1).unwrap().extra, 42);
    assert_eq!(
        c2.retrieve::<ItemV2>(1).unwrap().tag.as_deref(),
        Some("red")
    );
    assert_eq!(c1.retrieve::<ItemV1>(1).unwrap().qty, 10);
    assert_eq!(c2.list::<ItemV2>("Extra = 42", &[]).unwrap()[0].name, "n0");
    // A write through the old version: the new field gets its zero value.
    let id = c1.add(&mut item("v1", 3, None)).unwrap();
    assert_eq!(c2.retrieve::<ItemV2>(id).unwrap().extra, 0);
    // The unique index of the first version holds for the second.
    let mut dup = fresh.clone();
    dup.id = 0;
    dup.name = "n2".into();
    assert_eq!(
        c2.add(&mut dup).unwrap_err().kind(),
        ErrorKind::UniqueViolation
    );
    // A full update through the new version keeps the old version's field.
    let mut r = c2.retrieve::<ItemV2>(2).unwrap();
    r.tag = Some("x".into());
    c2.update(&mut r).unwrap();
    assert_eq!(c1.retrieve::<ItemV1>(2).unwrap().qty, 2);
    assert_eq!(c2.delete_where::<ItemV2>("Tag = 'red'", &[]).unwrap(), 2);
    assert_eq!(c1.count::<ItemV1>("", &[]).unwrap(), 4);
    drop((c1, c2));
    e.flush().unwrap();
    drop(e);
    // Saved with every field of both versions; either opens the file.
    let e = Arc::new(MemoryEngine::open(MemoryOptions::file(&path)).unwrap());
    let c2 = client::<ItemV2>(&e);
    assert_eq!(c2.count::<ItemV2>("Extra = 0", &[]).unwrap(), 3);
    let c1 = client::<ItemV1>(&e);
    assert_eq!(c1.retrieve::<ItemV1>(6).unwrap().qty, 3);
    assert_eq!(
        c1.add(&mut item("n2", 1, None)).unwrap_err().kind(),
        ErrorKind::UniqueViolation
    );
}

#[test]
fn a_new_version_waits_for_an_open_transaction() {
    let opts = MemoryOptions::memory().lock_timeout(Duration::from_millis(100));
    let e = Arc::new(MemoryEngine::open(opts).unwrap());
    let c1 = client::<ItemV1>(&e);
    c1.add(&mut item("a", 1, None)).unwrap();
    let tx = c1.transaction().unwrap();
    tx.add(&mut item("b", 2, None)).unwrap();
    // Opening it rewrites the rows, which the transaction's undo log names.
    let err = Database::open(Model::new().with::<ItemV2>(), e.clone())
        .err()
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::Busy, "{err}");
    tx.rollback().unwrap();
    let c2 = client::<ItemV2>(&e);
    assert_eq!(c2.count::<ItemV2>("", &[]).unwrap(), 1);
    // Once open, a version is found inside a transaction as well.
    let tx = c2.transaction().unwrap();
    assert_eq!(tx.count::<ItemV2>("Extra = 0", &[]).unwrap(), 1);
    tx.commit().unwrap();
}

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Kinds")]
struct KindsV1 {
    id: i64,
    n: i32,
    u: u32,
    text: String,
    day: NaiveDate,
    owner: i64,
}

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Kinds")]
struct KindsWide {
    id: i64,
    n: i64,
    u: i64,
    text: String,
    day: NaiveDate,
    owner: burrow_core::Ref<KindsWide>,
}

macro_rules! kinds_change {
    ($name:ident, $field:ident: $ty:ty) => {
        #[derive(Record, Debug, Clone, PartialEq, Default)]
        #[burrow(crate = "burrow_core", table = "Kinds")]
        struct $name {
            id: i64,
            $field: $ty,
        }
    };
}

kinds_change!(NToF64, n: f64);
kinds_change!(NToText, n: String);
kinds_change!(NToBool, n: bool);
kinds_change!(UToI32, u: i32);
kinds_change!(TextToJson, text: serde_json::Value);
kinds_change!(DayToDateTime, day: DateTime<Utc>);
kinds_change!(DayToText, day: String);

fn refused_kind_changes(e: &Arc<MemoryEngine>) {
    for (what, r) in [
        (
            "i32 to f64",
            Database::open(Model::new().with::<NToF64>(), e.clone()),
        ),
        (
            "i32 to text",
            Database::open(Model::new().with::<NToText>(), e.clone()),
        ),
        (
            "i32 to bool",
            Database::open(Model::new().with::<NToBool>(), e.clone()),
        ),
        (
            "u32 to i32",
            Database::open(Model::new().with::<UToI32>(), e.clone()),
        ),
        (
            "text to JSON",
            Database::open(Model::new().with::<TextToJson>(), e.clone()),
        ),
        (
            "date to date-time",
            Database::open(Model::new().with::<DayToDateTime>(), e.clone()),
        ),
        (
            "date to text",
            Database::open(Model::new().with::<DayToText>(), e.clone()),
        ),
    ] {
        let err = r.err().unwrap_or_else(|| panic!("{what} was accepted"));
        assert_eq!(err.kind(), ErrorKind::Schema, "{what}: {err}");
        assert!(err.to_string().contains("Kinds."), "{what}: {err}");
    }
}

#[test]
fn kinds_change_only_by_widening_integers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kinds.json");
    let row = KindsV1 {
        id: 0,
        n: -5,
        u: u32::MAX,
        text: "{}".into(),
        day: NaiveDate::from_ymd_opt(2020, 1, 2).unwrap(),
        owner: 9,
    };
    {
        let e = Arc::new(MemoryEngine::open(MemoryOptions::file(&path).json()).unwrap());
        let c = client::<KindsV1>(&e);
        c.add(&mut row.clone()).unwrap();
        // On the same engine: refused, and nothing changed.
        refused_kind_changes(&e);
        assert_eq!(c.select::<KindsV1>(&Query::all()).unwrap()[0].n, -5);
        // i32 and u32 widen to i64, an i64 becomes a reference.
        let w = client::<KindsWide>(&e);
        let mut wide = w.retrieve::<KindsWide>(1).unwrap();
        assert_eq!(
            (wide.n, wide.u, wide.owner.id()),
            (-5, i64::from(u32::MAX), 9)
        );
        wide.n = 1 << 40;
        wide.id = 0;
        w.add(&mut wide).unwrap();
        // The first version still reads the rows that fit it.
        let mut back = c.retrieve::<KindsV1>(1).unwrap();
        back.id = 0;
        assert_eq!(back, row);
    }
    // From the file: the widened kinds are stored; narrowing back is refused.
    let e = Arc::new(MemoryEngine::open(MemoryOptions::file(&path)).unwrap());
    refused_kind_changes(&e);
    let err = Database::open(Model::new().with::<KindsV1>(), e.clone())
        .err()
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::Schema, "{err}");
    let w = client::<KindsWide>(&e);
    assert_eq!(w.retrieve::<KindsWide>(2).unwrap().n, 1 << 40);
}

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Tiny")]
struct Tiny {
    id: i64,
    name: String,
}

fn tiny(name: &str) -> Tiny {
    Tiny {
        id: 0,
        name: name.into(),
    }
}

fn assert_exhausted(e: &Error) {
    assert_eq!(e.kind(), ErrorKind::BadInput, "{e}");
    assert!(
        e.to_string().contains("IDs of table Tiny are exhausted"),
        "{e}"
    );
}

#[test]
fn ids_stay_exhausted_after_a_delete_and_a_reopen() {
    for json in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny");
        let opts = || {
            let o = MemoryOptions::file(&path);
            if json {
                o.json()
            } else {
                o
            }
        };
        {
            let e = Arc::new(MemoryEngine::open(opts()).unwrap());
            let c = client::<Tiny>(&e);
            c.add(&mut tiny("a")).unwrap();
            c.add_with_id(&mut tiny("max"), i64::MAX).unwrap();
            assert_exhausted(&c.add(&mut tiny("b")).unwrap_err());
            // Never reused, even once free.
            assert!(c.delete::<Tiny>(i64::MAX).unwrap());
            assert_exhausted(&c.add(&mut tiny("b")).unwrap_err());
            let mut batch = Batch::new();
            batch.add(tiny("c"));
            batch.add_with_id(tiny("d"), 5);
            let r = c.send(&mut batch).unwrap();
            assert!(matches!(&r[0], BatchResult::Failed(e) if e.kind() == ErrorKind::BadInput));
            assert_eq!(r[1].id(), Some(5));
            assert_eq!(c.count::<Tiny>("", &[]).unwrap(), 2);
        }
        let e = Arc::new(MemoryEngine::open(opts()).unwrap());
        let c = client::<Tiny>(&e);
        assert_exhausted(&c.add(&mut tiny("e")).unwrap_err());
        assert_eq!(c.add_with_id(&mut tiny("f"), 6).unwrap(), 6);
        assert_eq!(c.count::<Tiny>("", &[]).unwrap(), 3, "json: {json}");
    }
}

#[test]
fn the_id_below_the_largest_is_still_given() {
    let (c, _) = memory_client();
    let mut p = people(2, 3);
    c.add_with_id(&mut p[0], i64::MAX - 1).unwrap();
    assert_eq!(c.add(&mut p[1]).unwrap(), i64::MAX);
    let mut q = people(3, 4).remove(2);
    q.email = "third@example.org".into();
    let e = c.add(&mut q).unwrap_err();
    assert!(e.to_string().contains("exhausted"), "{e}");
}

#[test]
fn nan_is_refused_and_changes_nothing() {
    let (c, _) = memory_client();
    let mut p = people(3, 9);
    p[0].score = Some(f64::NAN);
    let e = c.add(&mut p[0]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadInput, "{e}");
    assert!(e.to_string().contains("NaN cannot be stored"), "{e}");
    assert_eq!(c.count::<Person>("", &[]).unwrap(), 0);
    p[0].score = Some(1.5);
    let id = c.add(&mut p[0]).unwrap();
    let mut upd = p[0].clone();
    upd.score = Some(f64::NAN);
    upd.age = Some(99);
    assert_eq!(c.update(&mut upd).unwrap_err().kind(), ErrorKind::BadInput);
    assert_eq!(
        c.update_fields(&mut upd, &["Score"]).unwrap_err().kind(),
        ErrorKind::BadInput
    );
    assert_eq!(c.retrieve::<Person>(id).unwrap(), p[0]);
    let mut batch = Batch::new();
    batch.add(p[1].clone());
    p[2].score = Some(-f64::NAN);
    batch.add(p[2].clone());
    batch.update(upd);
    let r = c.send(&mut batch).unwrap();
    assert!(r[0].id().is_some());
    for r in &r[1..] {
        assert!(
            matches!(r, BatchResult::Failed(e) if e.kind() == ErrorKind::BadInput),
            "{r:?}"
        );
    }
    assert_eq!(c.count::<Person>("", &[]).unwrap(), 2);
    assert_eq!(c.retrieve::<Person>(id).unwrap(), p[0]);
}
