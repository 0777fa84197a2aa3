//! Schema: persistence across reopening, added fields, type conflicts, indexes
//! and name overrides.

use burrow::chrono::{DateTime, NaiveDate, Utc};
use burrow::{params, Currency, Database, ErrorKind, Json, Model, Orm, Record};
use serde::{Deserialize, Serialize};

use crate::common::*;

conformance!(
    reopening_keeps_the_data,
    unique_index_is_enforced_after_reopen,
    added_fields_get_columns_and_defaults_after_reopen,
    added_fields_on_the_same_engine,
    added_json_field_reads_old_rows,
    column_type_conflict_is_a_schema_error,
    unique_on_duplicated_data_is_a_schema_error,
    names_and_columns_can_differ,
    indexes_exist,
);

/// The first version of a record.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Evolve")]
pub struct EvolveV1 {
    pub id: i64,
    #[burrow(unique)]
    pub code: String,
    pub qty: i32,
}

/// The same table with more fields, one of each default-able kind.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Evolve")]
pub struct EvolveV2 {
    pub id: i64,
    #[burrow(unique)]
    pub code: String,
    pub qty: i32,
    #[burrow(index)]
    pub score: i64,
    pub ratio: f64,
    pub flag: bool,
    pub label: String,
    pub price: Currency,
    pub day: NaiveDate,
    pub seen: DateTime<Utc>,
    pub blob: Vec<u8>,
    pub doc: serde_json::Value,
    pub note: Option<String>,
    pub maybe_day: Option<NaiveDate>,
    #[burrow(modified)]
    pub changed: Option<DateTime<Utc>>,
}

/// A JSON-stored struct.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Extra {
    pub level: u8,
    pub words: Vec<String>,
}

/// The first version plus a `Json<T>` field.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Evolve")]
pub struct EvolveJson {
    pub id: i64,
    #[burrow(unique)]
    pub code: String,
    pub qty: i32,
    pub extra: Json<Extra>,
}

/// The first version plus an optional `Json<T>` field: the way to add one to a
/// table that holds rows.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Evolve")]
pub struct EvolveJsonOpt {
    pub id: i64,
    #[burrow(unique)]
    pub code: String,
    pub qty: i32,
    pub extra: Option<Json<Extra>>,
}

/// `Qty` is now text: a conflict with the stored INTEGER column.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Evolve")]
pub struct EvolveConflict {
    pub id: i64,
    #[burrow(unique)]
    pub code: String,
    pub qty: String,
}

/// `Code` is now an integer: a conflict with the stored TEXT column.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Evolve")]
pub struct EvolveConflict2 {
    pub id: i64,
    #[burrow(unique)]
    pub code: i64,
    pub qty: i32,
}

/// `Qty` as a float: REAL against INTEGER.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Evolve")]
pub struct EvolveConflict3 {
    pub id: i64,
    #[burrow(unique)]
    pub code: String,
    pub qty: f64,
}

/// Without the unique index, so that duplicates can be stored.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Loose")]
pub struct LooseV1 {
    pub id: i64,
    pub code: String,
}

/// The same table, now asking `Code` to be unique.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Loose")]
pub struct LooseV2 {
    pub id: i64,
    #[burrow(unique)]
    pub code: String,
    pub added: i32,
}

/// Field names that differ from column names.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Renamed")]
pub struct Renamed {
    pub id: i64,
    #[burrow(index, column = "LAST_NAME")]
    pub last_name: String,
    #[burrow(name = "Amt", unique)]
    pub amount: Currency,
    #[burrow(name = "Kind", column = "kind_col")]
    pub r#type: String,
    #[burrow(skip)]
    pub scratch: Vec<String>,
}

fn v1(code: &str, qty: i32) -> EvolveV1 {
    EvolveV1 {
        id: 0,
        code: code.to_owned(),
        qty,
    }
}

fn reopening_keeps_the_data(f: &dyn Factory) -> TestResult {
    let mut store = f.fresh()?;
    if !store.persistent() {
        return Ok(());
    }
    let (samples, tags) = {
        let c = store.open()?;
        let samples = seed(&c, "p", 20)?;
        let mut t = Tag::new("kept", samples[3].id);
        c.add(&mut t)?;
        c.delete::<Sample>(samples[5].id)?;
        (all::<Sample>(&c)?, all::<Tag>(&c)?)
    };
    store.reopen()?;
    let c = store.open()?;
    same(&all::<Sample>(&c)?, &samples, "samples after reopen")?;
    same(&all::<Tag>(&c)?, &tags, "tags after reopen")?;
    // New IDs do not reuse kept ones.
    let mut s = Sample::new("after-reopen", 1, "1");
    let id = c.add(&mut s)?;
    assert!(samples.iter().all(|x| x.id != id));
    // A committed transaction persists; a rolled-back one does not.
    let tx = c.transaction()?;
    let mut a = Sample::new("tx-committed", 1, "1");
    tx.add(&mut a)?;
    tx.commit()?;
    let tx = c.transaction()?;
    let mut b = Sample::new("tx-rolled-back", 1, "1");
    tx.add(&mut b)?;
    tx.rollback()?;
    drop(c);
    store.reopen()?;
    let c = store.open()?;
    assert_eq!(c.count::<Sample>("", &[])?, samples.len() as u64 + 2);
    assert_eq!(c.count::<Sample>("Name = 'tx-committed'", &[])?, 1);
    assert_eq!(c.count::<Sample>("Name = 'tx-rolled-back'", &[])?, 0);
    Ok(())
}

fn unique_index_is_enforced_after_reopen(f: &dyn Factory) -> TestResult {
    let mut store = f.fresh()?;
    if !store.persistent() {
        return Ok(());
    }
    {
        let c = store.open()?;
        seed(&c, "u", 3)?;
    }
    store.reopen()?;
    let c = store.open()?;
    let mut dup = Sample::new("u1", 1, "1");
    expect_kind!(c.add(&mut dup), UniqueViolation);
    let mut other = all::<Sample>(&c)?[0].clone();
    other.name = "u2".into();
    expect_kind!(c.update(&mut other), UniqueViolation);
    assert_eq!(c.count::<Sample>("", &[])?, 3);
    Ok(())
}

fn check_v2_defaults(old: &EvolveV1, new: &EvolveV2) -> TestResult {
    let want = EvolveV2 {
        id: old.id,
        code: old.code.clone(),
        qty: old.qty,
        ..EvolveV2::default()
    };
    same(new, &want, "an old row read through the new struct")?;
    assert!(
        new.doc.is_null(),
        "the added JSON field reads as null: {:?}",
        new.doc
    );
    Ok(())
}

fn write_through_v2(c: &Database, old: &[EvolveV1]) -> TestResult {
    let mut fresh = EvolveV2 {
        code: "v2-row".into(),
        qty: 3,
        score: -5,
        ratio: 0.5,
        flag: true,
        label: "new".into(),
        price: cur("9.99"),
        day: date(2020, 2, 2),
        seen: Utc::now(),
        blob: vec![1, 2, 3],
        doc: serde_json::json!({"k": [1, 2]}),
        note: Some("note".into()),
        maybe_day: Some(date(2021, 1, 1)),
        ..EvolveV2::default()
    };
    c.add(&mut fresh)?;
    same(&c.retrieve::<EvolveV2>(fresh.id)?, &fresh, "a new row")?;
    // An old row updated through a new field.
    let mut upd = c.retrieve::<EvolveV2>(old[0].id)?;
    upd.score = 42;
    c.update_fields(&mut upd, &["Score"])?;
    assert_eq!(c.retrieve::<EvolveV2>(old[0].id)?.score, 42);
    assert_eq!(
        c.count::<EvolveV2>("Score = ? AND Code = ?", &params![42, "a"])?,
        1
    );
    // The unique index still holds.
    let mut dup = EvolveV2 {
        code: "b".into(),
        ..EvolveV2::default()
    };
    expect_kind!(c.add(&mut dup), UniqueViolation);
    Ok(())
}

fn added_fields_get_columns_and_defaults_after_reopen(f: &dyn Factory) -> TestResult {
    let mut store = f.fresh()?;
    if !store.persistent() {
        return Ok(());
    }
    let old = {
        let c = store.client(Model::new().with::<EvolveV1>())?;
        let mut rows = vec![v1("a", 1), v1("b", 2), v1("c", -3)];
        for r in &mut rows {
            c.add(r)?;
        }
        rows
    };
    store.reopen()?;
    let c = store.client(Model::new().with::<EvolveV2>())?;
    let news = all::<EvolveV2>(&c)?;
    assert_eq!(news.len(), old.len());
    for (o, n) in old.iter().zip(&news) {
        check_v2_defaults(o, n)?;
    }
    write_through_v2(&c, &old)?;
    drop(c);
    // Opening the new version again changes nothing; the old version still
    // opens the upgraded table and reads its own fields.
    store.reopen()?;
    let c = store.client(Model::new().with::<EvolveV2>())?;
    assert_eq!(c.count::<EvolveV2>("", &[])?, 4);
    drop(c);
    store.reopen()?;
    let c = store.client(Model::new().with::<EvolveV1>())?;
    let back = all::<EvolveV1>(&c)?;
    same(&back[..3].to_vec(), &old, "old rows through the old struct")?;
    Ok(())
}

fn added_fields_on_the_same_engine(f: &dyn Factory) -> TestResult {
    // No reopening: a second client of the same engine with the new version
    // (how an in-memory store meets an upgraded struct).
    let store = f.fresh()?;
    let old = {
        let c = store.client(Model::new().with::<EvolveV1>())?;
        let mut rows = vec![v1("a", 1), v1("b", 2), v1("c", -3)];
        for r in &mut rows {
            c.add(r)?;
        }
        rows
    };
    let c = store.client(Model::new().with::<EvolveV2>())?;
    let news = all::<EvolveV2>(&c)?;
    assert_eq!(news.len(), old.len());
    for (o, n) in old.iter().zip(&news) {
        check_v2_defaults(o, n)?;
    }
    write_through_v2(&c, &old)?;
    Ok(())
}

fn added_json_field_reads_old_rows(f: &dyn Factory) -> TestResult {
    // Through a reopen; the same-engine path is `added_fields_on_the_same_engine`.
    let mut store = f.fresh()?;
    if !store.persistent() {
        return Ok(());
    }
    {
        let c = store.client(Model::new().with::<EvolveV1>())?;
        c.add(&mut v1("old", 1))?;
    }
    store.reopen()?;
    {
        // A non-optional Json<T> whose T cannot hold JSON null: the old row's
        // added column holds null, so reading it is a clear type error naming
        // the field and the remedy, and the row itself is intact.
        let c = store.client(Model::new().with::<EvolveJson>())?;
        let err = all::<EvolveJson>(&c).expect_err("an old row cannot hold Extra");
        let text = err.to_string();
        assert_eq!(err.kind(), ErrorKind::BadInput, "{text}");
        assert!(
            text.contains("Evolve.Extra") && text.contains("Option"),
            "{text}"
        );
    }
    store.reopen()?;
    let c = store.client(Model::new().with::<EvolveJsonOpt>())?;
    // Declared as an Option, the old row reads (no data lost) and is writable.
    let rows = all::<EvolveJsonOpt>(&c)?;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].code, "old");
    assert_eq!(rows[0].extra, None);
    let mut row = rows[0].clone();
    row.extra = Some(Json(Extra {
        level: 3,
        words: vec!["w".into()],
    }));
    c.update(&mut row)?;
    same(&c.retrieve::<EvolveJsonOpt>(row.id)?, &row, "after update")?;
    Ok(())
}

fn column_type_conflict_is_a_schema_error(f: &dyn Factory) -> TestResult {
    let mut store = f.fresh()?;
    let old = {
        let c = store.client(Model::new().with::<EvolveV1>())?;
        let mut rows = vec![v1("a", 1), v1("b", 2)];
        for r in &mut rows {
            c.add(r)?;
        }
        rows
    };
    for reopen in [false, true] {
        if reopen {
            if !store.persistent() {
                break;
            }
            store.reopen()?;
        }
        let e = match store.client(Model::new().with::<EvolveConflict>()) {
            Ok(_) => return Err("String over an INTEGER column was accepted".into()),
            Err(e) => e,
        };
        assert_eq!(e.kind(), ErrorKind::Schema, "{e}");
        assert!(
            e.to_string().contains("Qty"),
            "the message names the column: {e}"
        );
        for r in [
            store
                .client(Model::new().with::<EvolveConflict2>())
                .map(drop),
            store
                .client(Model::new().with::<EvolveConflict3>())
                .map(drop),
            // A model whose other tables are fine is refused as a whole.
            store
                .client(Model::new().with::<Sample>().with::<EvolveConflict>())
                .map(drop),
        ] {
            let e = r.err().ok_or("a conflicting column type was accepted")?;
            assert_eq!(e.kind(), ErrorKind::Schema, "{e}");
        }
        // Nothing changed: the old version opens and reads its rows.
        let c = store.client(Model::new().with::<EvolveV1>())?;
        same(&all::<EvolveV1>(&c)?, &old, "data after a refused schema")?;
        if let Some(cols) = store.raw(|conn| {
            let mut st =
                conn.prepare("SELECT name, type FROM pragma_table_info('Evolve') ORDER BY cid")?;
            let rows = st.query_map([], |r| {
                Ok(format!(
                    "{} {}",
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?
                ))
            })?;
            rows.collect::<Result<Vec<_>, _>>()
        }) {
            assert_eq!(cols?, ["ID INTEGER", "Code TEXT", "Qty INTEGER"]);
        }
    }
    Ok(())
}

fn unique_on_duplicated_data_is_a_schema_error(f: &dyn Factory) -> TestResult {
    let mut store = f.fresh()?;
    {
        let c = store.client(Model::new().with::<LooseV1>())?;
        for code in ["x", "y", "x"] {
            c.add(&mut LooseV1 {
                id: 0,
                code: code.into(),
            })?;
        }
    }
    if store.persistent() {
        store.reopen()?;
    }
    let e = store
        .client(Model::new().with::<LooseV2>())
        .err()
        .ok_or("a unique index over duplicates was accepted")?;
    assert_eq!(e.kind(), ErrorKind::Schema, "{e}");
    // The failed upgrade left the table as it was: no added column.
    let c = store.client(Model::new().with::<LooseV1>())?;
    assert_eq!(c.count::<LooseV1>("Code = 'x'", &[])?, 2);
    if let Some(n) = store.raw(|conn| {
        conn.query_row(
            "SELECT count(*) FROM pragma_table_info('Loose') WHERE name = 'Added'",
            [],
            |r| r.get::<_, i64>(0),
        )
    }) {
        assert_eq!(n?, 0, "the failed upgrade added a column");
    }
    // Once the duplicate is gone, the upgrade goes through (after a reopen:
    // the same-engine upgrade is `added_fields_on_the_same_engine`).
    assert_eq!(c.delete_where::<LooseV1>("Code = 'x' AND ID > 1", &[])?, 1);
    drop(c);
    if !store.persistent() {
        return Ok(());
    }
    store.reopen()?;
    let c = store.client(Model::new().with::<LooseV2>())?;
    let mut dup = LooseV2 {
        code: "y".into(),
        ..LooseV2::default()
    };
    expect_kind!(c.add(&mut dup), UniqueViolation);
    Ok(())
}

fn names_and_columns_can_differ(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.client(Model::new().with::<Renamed>())?;
    let mut r = Renamed {
        id: 0,
        last_name: "Dupont".into(),
        amount: cur("12.5"),
        r#type: "kind-a".into(),
        scratch: vec!["not stored".into()],
    };
    c.add(&mut r)?;
    let back: Renamed = c.retrieve(r.id)?;
    assert_eq!(
        back.scratch,
        Vec::<String>::new(),
        "a skipped field reads as default"
    );
    r.scratch.clear();
    same(&back, &r, "renamed fields")?;
    // Queries use field names, never column names.
    assert_eq!(
        c.count::<Renamed>(
            "LastName = ? AND Amt = ? AND Kind = ?",
            &params!["Dupont", cur("12.5"), "kind-a"]
        )?,
        1
    );
    expect_kind!(c.count::<Renamed>("LAST_NAME = 'Dupont'", &[]), BadInput);
    expect_kind!(c.count::<Renamed>("Amount = 1", &[]), BadInput);
    expect_kind!(c.count::<Renamed>("kind_col = 'x'", &[]), BadInput);
    expect_kind!(c.count::<Renamed>("Scratch = 'x'", &[]), BadInput);
    assert_eq!(
        c.one_field_value::<Renamed>("Kind", "Amt > ?", &params![1])?,
        Some(burrow::Value::Text("kind-a".into()))
    );
    let mut dup = Renamed {
        amount: cur("12.5"),
        ..Renamed::default()
    };
    expect_kind!(c.add(&mut dup), UniqueViolation);
    if let Some(cols) = store.raw(|conn| {
        let mut st = conn.prepare("SELECT name FROM pragma_table_info('Renamed') ORDER BY cid")?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        rows.collect::<Result<Vec<_>, _>>()
    }) {
        assert_eq!(cols?, ["ID", "LAST_NAME", "Amt", "kind_col"]);
    }
    Ok(())
}

fn indexes_exist(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let _c = store.open()?;
    let _r = store.client(Model::new().with::<Renamed>())?;
    let Some(indexes) = store.raw(|conn| {
        let mut st = conn.prepare(
            "SELECT m.tbl_name || '.' || i.name || CASE WHEN l.\"unique\" THEN ' unique' ELSE '' END \
             FROM sqlite_master m, pragma_index_list(m.tbl_name) l, pragma_index_info(l.name) i \
             WHERE m.type = 'table' AND l.origin = 'c' ORDER BY 1",
        )?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        rows.collect::<Result<Vec<_>, _>>()
    }) else {
        return Ok(());
    };
    assert_eq!(
        indexes?,
        [
            "Renamed.Amt unique",
            "Renamed.LAST_NAME",
            "Sample.LastName",
            "Sample.Name unique",
            "Tag.Label unique",
        ]
    );
    Ok(())
}
