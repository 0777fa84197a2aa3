//! Batches: mixed writes across tables, per-item results, failures, rollback
//! and automatic transactions.

use std::collections::HashSet;

use burrow::chrono::{DateTime, Duration, TimeZone, Utc};
use burrow::driver::{BatchItem, BatchOp};
use burrow::{
    Batch, BatchOptions, BatchResult, Database, Error, ErrorKind, Model, Orm, Query, Record,
};

use crate::common::*;

conformance!(
    mixed_batch_across_two_tables,
    empty_batch,
    failed_item_is_reported_and_the_rest_applies,
    failed_item_inside_a_run_of_adds,
    rollback_on_error_leaves_nothing,
    rollback_on_error_in_a_run_of_adds,
    rollback_on_error_ignores_auto_transaction_rows,
    auto_transaction_rows_zero_and_small,
    auto_transaction_commits_earlier_chunks,
    batch_in_a_rolled_back_transaction_leaves_nothing,
    batch_in_a_committed_transaction,
    batch_update_fields_writes_only_those_fields,
    batch_ids_after_the_largest_id,
    rollback_on_error_across_two_engines,
    chunks_cut_across_runs_of_two_engines,
    many_adds_keep_their_fields_and_one_stamp,
    many_adds_of_distinct_times_keep_each_time,
);

/// What the results should look like, item by item.
#[derive(Debug, PartialEq)]
enum Want {
    Added,
    AddedAs(i64),
    Done,
    Missing,
    Failed(ErrorKind),
}

fn check_results(results: &[BatchResult], want: &[Want]) -> TestResult {
    let got: Vec<String> = results.iter().map(|r| format!("{r:?}")).collect();
    if results.len() != want.len() {
        return Err(format!(
            "{} results for {} items: {got:?}",
            results.len(),
            want.len()
        )
        .into());
    }
    for (i, (r, w)) in results.iter().zip(want).enumerate() {
        let ok = match (r, w) {
            (BatchResult::Added(id), Want::Added) => *id != 0,
            (BatchResult::Added(id), Want::AddedAs(want)) => id == want,
            (BatchResult::Done, Want::Done) | (BatchResult::Missing, Want::Missing) => true,
            (BatchResult::Failed(e), Want::Failed(k)) => e.kind() == *k,
            _ => false,
        };
        if !ok {
            return Err(format!("item {i}: want {w:?}, got {r:?} (all: {got:?})").into());
        }
    }
    Ok(())
}

fn mixed_batch_across_two_tables(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let mut s1 = Sample::new("s1", 1, "1");
    let mut s2 = Sample::new("s2", 2, "2");
    c.add(&mut s1)?;
    c.add(&mut s2)?;
    let mut t1 = Tag::new("t1", s1.id);
    c.add(&mut t1)?;

    let mut batch = Batch::new();
    batch.add(Sample::new("a", 10, "10"));
    batch.add(Sample::new("b", 11, "11"));
    batch.add(Tag::new("x", s2.id));
    let mut s1_new = s1.clone();
    s1_new.age = 100;
    s1_new.note = Some("updated in a batch".into());
    batch.update(s1_new.clone());
    let mut ghost = Sample::new("ghost", 0, "0");
    ghost.id = 987_654;
    batch.update(ghost);
    batch.delete::<Tag>(t1.id);
    batch.delete::<Tag>(555_555);
    batch.add_with_id(Sample::new("forced", 12, "12"), 500);
    batch.delete::<Sample>(s2.id);
    batch.add(Tag::new("y", 500));
    assert_eq!(batch.len(), 10);
    assert_eq!(batch.tables().len(), 2);

    let results = c.send(&mut batch)?;
    assert!(batch.is_empty(), "send empties the batch");
    check_results(
        &results,
        &[
            Want::Added,
            Want::Added,
            Want::Added,
            Want::Done,
            Want::Missing,
            Want::Done,
            Want::Missing,
            Want::AddedAs(500),
            Want::Done,
            Want::Added,
        ],
    )?;
    let ids: Vec<i64> = results.iter().filter_map(BatchResult::id).collect();
    assert_eq!(ids.len(), 5);
    let a: Sample = c.retrieve(ids[0])?;
    let b: Sample = c.retrieve(ids[1])?;
    assert_eq!((a.name.as_str(), a.age), ("a", 10));
    assert_eq!((b.name.as_str(), b.age), ("b", 11));
    assert_ne!(a.id, b.id);
    let x: Tag = c.retrieve(ids[2])?;
    assert_eq!((x.label.as_str(), x.owner.id()), ("x", s2.id));
    assert_eq!(ids[3], 500);
    assert_eq!(c.retrieve::<Sample>(500)?.name, "forced");
    let y: Tag = c.retrieve(ids[4])?;
    assert_eq!((y.label.as_str(), y.owner.id()), ("y", 500));
    let s1_back: Sample = c.retrieve(s1.id)?;
    assert_eq!(s1_back.age, 100);
    assert_eq!(s1_back.note.as_deref(), Some("updated in a batch"));
    assert_eq!(s1_back.created_at, s1.created_at, "created time kept");
    assert!(s1_back.changed >= s1.changed);
    expect_kind!(c.retrieve::<Sample>(s2.id), NotFound);
    expect_kind!(c.retrieve::<Tag>(t1.id), NotFound);
    assert!(
        c.get::<Sample>(987_654)?.is_none(),
        "an update never inserts"
    );
    assert_eq!(c.count::<Sample>("", &[])?, 4);
    assert_eq!(c.count::<Tag>("", &[])?, 2);
    // The batch can be reused after send.
    batch.add(Sample::new("again", 1, "1"));
    check_results(&c.send(&mut batch)?, &[Want::Added])?;
    Ok(())
}

fn empty_batch(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    for opts in [
        BatchOptions::default(),
        BatchOptions {
            auto_transaction_rows: 0,
            rollback_on_error: true,
        },
    ] {
        let mut batch = Batch::with_options(opts);
        assert!(c.send(&mut batch)?.is_empty());
    }
    Ok(())
}

fn failed_item_is_reported_and_the_rest_applies(f: &dyn Factory) -> TestResult {
    for rows in [10_000, 3, 1, 0] {
        let store = f.fresh()?;
        let c = store.open()?;
        let mut taken = Sample::new("taken", 1, "1");
        c.add(&mut taken)?;
        let mut keep = Sample::new("keep", 2, "2");
        c.add(&mut keep)?;
        let mut batch = Batch::new().auto_transaction_rows(rows);
        batch.add(Sample::new("first", 3, "3"));
        batch.add(Tag::new("tag", taken.id));
        batch.add(Sample::new("taken", 4, "4")); // duplicate unique name
        batch.add_with_id(Sample::new("dup-id", 5, "5"), keep.id); // duplicate ID
        let mut clash = keep.clone();
        clash.name = "taken".into(); // update to a taken unique name
        batch.update(clash);
        batch.add(Tag::new("tag", taken.id)); // duplicate within the batch
        batch.delete::<Sample>(taken.id);
        batch.add(Sample::new("last", 6, "6"));
        let results = c.send(&mut batch)?;
        check_results(
            &results,
            &[
                Want::Added,
                Want::Added,
                Want::Failed(ErrorKind::UniqueViolation),
                Want::Failed(ErrorKind::UniqueViolation),
                Want::Failed(ErrorKind::UniqueViolation),
                Want::Failed(ErrorKind::UniqueViolation),
                Want::Done,
                Want::Added,
            ],
        )
        .map_err(|e| format!("auto_transaction_rows {rows}: {e}"))?;
        let names: HashSet<String> = all::<Sample>(&c)?.into_iter().map(|s| s.name).collect();
        let want: HashSet<String> = ["keep", "first", "last"].map(String::from).into();
        same(&names, &want, &format!("rows {rows}: names"))?;
        same(
            &c.retrieve::<Sample>(keep.id)?,
            &keep,
            "the clashing update changed nothing",
        )?;
        assert_eq!(c.count::<Tag>("", &[])?, 1);
    }
    Ok(())
}

fn failed_item_inside_a_run_of_adds(f: &dyn Factory) -> TestResult {
    // Consecutive adds of one table may be sent as one multi-row statement: a
    // duplicate among them must still be pinned on its own item.
    for rows in [10_000, 0, 7] {
        let store = f.fresh()?;
        let c = store.open()?;
        let mut taken = Sample::new("n13", 1, "1");
        c.add(&mut taken)?;
        let mut batch = Batch::new().auto_transaction_rows(rows);
        for i in 0..30 {
            batch.add(Sample::new(&format!("n{i}"), i, "1"));
        }
        batch.add(Sample::new("n20", 99, "1")); // duplicate of item 20
        let results = c.send(&mut batch)?;
        let mut want: Vec<Want> = (0..31).map(|_| Want::Added).collect();
        want[13] = Want::Failed(ErrorKind::UniqueViolation);
        want[30] = Want::Failed(ErrorKind::UniqueViolation);
        check_results(&results, &want).map_err(|e| format!("rows {rows}: {e}"))?;
        // Every reported ID holds the record of its item.
        for (i, r) in results.iter().enumerate() {
            if let Some(id) = r.id() {
                let s: Sample = c.retrieve(id)?;
                assert_eq!(s.name, format!("n{i}"), "rows {rows}: item {i} has ID {id}");
            }
        }
        assert_eq!(c.count::<Sample>("", &[])?, 30);
        assert_eq!(c.retrieve::<Sample>(taken.id)?.age, 1);
        assert_eq!(c.count::<Sample>("Name = 'n20' AND Age = 20", &[])?, 1);
    }
    Ok(())
}

/// Samples and tags before a batch, to check that nothing of it remains.
fn snapshot(c: &Database) -> burrow::Result<(Vec<Sample>, Vec<Tag>)> {
    Ok((all(c)?, all(c)?))
}

fn rollback_on_error_leaves_nothing(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let seeded = seed(&c, "r", 3)?;
    let mut tag = Tag::new("t", seeded[0].id);
    c.add(&mut tag)?;
    let before = snapshot(&c)?;
    let raw_before = store.raw_count("Sample").transpose()?;

    let mut batch = Batch::new().rollback_on_error(true);
    batch.add(Sample::new("new1", 10, "1"));
    batch.add(Tag::new("new-tag", seeded[1].id));
    let mut upd = seeded[0].clone();
    upd.age = 1000;
    batch.update(upd);
    batch.delete::<Sample>(seeded[1].id);
    batch.delete::<Tag>(tag.id);
    batch.add_with_id(Sample::new("forced", 11, "1"), 4242);
    batch.add(Sample::new("r2", 12, "1")); // index 6: duplicate name
    batch.add(Sample::new("never", 13, "1"));
    let err = match c.send(&mut batch) {
        Ok(r) => return Err(format!("the batch should fail, gave {r:?}").into()),
        Err(e) => e,
    };
    match &err {
        Error::Batch { index, source } => {
            assert_eq!(*index, 6, "{err}");
            assert_eq!(source.kind(), ErrorKind::UniqueViolation, "{err}");
        }
        other => return Err(format!("expected Error::Batch, got {other:?}").into()),
    }
    assert_eq!(err.kind(), ErrorKind::UniqueViolation);
    same(&snapshot(&c)?, &before, "nothing of the batch remains")?;
    assert!(c.get::<Sample>(4242)?.is_none());
    if let Some(n) = store.raw_count("Sample") {
        assert_eq!(Some(n?), raw_before, "raw count");
    }
    if let Some(n) = store.raw(|conn| {
        conn.query_row(
            "SELECT count(*) FROM Sample WHERE Name IN ('new1', 'forced', 'never') OR Age = 1000",
            [],
            |r| r.get::<_, i64>(0),
        )
    }) {
        assert_eq!(n?, 0, "raw SQL sees nothing of the batch");
    }
    // The engine is usable after the rollback, and not left in a transaction.
    let mut after = Sample::new("after", 1, "1");
    c.add(&mut after)?;
    c.in_transaction(|t| t.count::<Sample>("", &[]))?;
    Ok(())
}

fn rollback_on_error_in_a_run_of_adds(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let mut taken = Sample::new("m250", 1, "1");
    c.add(&mut taken)?;
    let before = snapshot(&c)?;
    // More adds than one multi-row statement holds; the duplicate is item 250.
    let mut batch = Batch::new().rollback_on_error(true);
    for i in 0..400 {
        batch.add(Sample::new(&format!("m{i}"), i, "1"));
    }
    match c.send(&mut batch) {
        Err(Error::Batch { index, source }) => {
            assert_eq!(index, 250);
            assert_eq!(source.kind(), ErrorKind::UniqueViolation);
        }
        other => return Err(format!("expected Error::Batch at 250, got {other:?}").into()),
    }
    same(&snapshot(&c)?, &before, "nothing of the batch remains")?;
    if let Some(n) = store.raw_count("Sample") {
        assert_eq!(n?, 1);
    }
    Ok(())
}

fn rollback_on_error_ignores_auto_transaction_rows(f: &dyn Factory) -> TestResult {
    for rows in [0, 2] {
        let store = f.fresh()?;
        let c = store.open()?;
        seed(&c, "q", 2)?;
        let before = snapshot(&c)?;
        let mut batch = Batch::with_options(BatchOptions {
            auto_transaction_rows: rows,
            rollback_on_error: true,
        });
        for i in 0..7 {
            batch.add(Sample::new(&format!("new{i}"), i, "1"));
            batch.delete::<Sample>(before.0[0].id);
        }
        batch.add(Sample::new("q1", 1, "1")); // index 14
        match c.send(&mut batch) {
            Err(Error::Batch { index: 14, source }) => {
                assert_eq!(source.kind(), ErrorKind::UniqueViolation);
            }
            other => {
                return Err(
                    format!("rows {rows}: expected Error::Batch at 14, got {other:?}").into(),
                )
            }
        }
        same(
            &snapshot(&c)?,
            &before,
            &format!("rows {rows}: nothing remains"),
        )?;
    }
    Ok(())
}

fn auto_transaction_rows_zero_and_small(f: &dyn Factory) -> TestResult {
    for rows in [0, 1, 3, 10_000] {
        let store = f.fresh()?;
        let c = store.open()?;
        let seeded = seed(&c, "z", 4)?;
        let mut batch = Batch::new().auto_transaction_rows(rows);
        for i in 0..10 {
            batch.add(Sample::new(&format!("batch{i}"), i, "2"));
            if i % 3 == 0 {
                batch.add(Tag::new(&format!("tag{i}"), seeded[0].id));
            }
        }
        let mut upd = seeded[1].clone();
        upd.age = 77;
        batch.update(upd);
        batch.delete::<Sample>(seeded[2].id);
        let results = c.send(&mut batch)?;
        assert_eq!(results.len(), 16);
        let ids: HashSet<i64> = results.iter().filter_map(BatchResult::id).collect();
        assert_eq!(ids.len(), 14, "rows {rows}: distinct IDs");
        assert!(matches!(results[14], BatchResult::Done));
        assert!(matches!(results[15], BatchResult::Done));
        assert_eq!(c.count::<Sample>("", &[])?, 13, "rows {rows}");
        assert_eq!(c.count::<Tag>("", &[])?, 4, "rows {rows}");
        assert_eq!(c.retrieve::<Sample>(seeded[1].id)?.age, 77);
        assert_eq!(
            c.count::<Sample>("Name LIKE 'batch%' AND Amount = 2", &[])?,
            10
        );
        // No transaction is left open: another begins.
        c.transaction()?.commit()?;
    }
    Ok(())
}

fn auto_transaction_commits_earlier_chunks(f: &dyn Factory) -> TestResult {
    // Without rollback-on-error, a failure in a later chunk keeps what earlier
    // chunks committed, and the items after it still run.
    let store = f.fresh()?;
    let c = store.open()?;
    let mut taken = Sample::new("c4", 1, "1");
    c.add(&mut taken)?;
    let mut batch = Batch::new().auto_transaction_rows(3);
    for i in 0..9 {
        batch.add(Sample::new(&format!("c{i}"), i, "1"));
    }
    let results = c.send(&mut batch)?;
    let mut want: Vec<Want> = (0..9).map(|_| Want::Added).collect();
    want[4] = Want::Failed(ErrorKind::UniqueViolation);
    check_results(&results, &want)?;
    assert_eq!(c.count::<Sample>("", &[])?, 9);
    Ok(())
}

fn batch_in_a_rolled_back_transaction_leaves_nothing(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    seed(&c, "p", 3)?;
    let before = snapshot(&c)?;
    for (rows, explicit_rollback) in [(10_000, true), (0, false), (2, true)] {
        let mut batch = Batch::new().auto_transaction_rows(rows);
        for i in 0..6 {
            batch.add(Sample::new(&format!("tx{i}"), i, "1"));
        }
        batch.add(Tag::new("tx-tag", before.0[0].id));
        batch.delete::<Sample>(before.0[1].id);
        let mut upd = before.0[2].clone();
        upd.age = -1;
        batch.update(upd);
        {
            let tx = c.transaction()?;
            let results = tx.send(&mut batch)?;
            assert_eq!(results.len(), 9);
            // Inside, the writes are visible.
            assert_eq!(tx.count::<Sample>("", &[])?, 8);
            if explicit_rollback {
                tx.rollback()?;
            }
        }
        same(
            &snapshot(&c)?,
            &before,
            &format!("rows {rows}: nothing remains"),
        )?;
    }
    // With rollback-on-error inside a transaction: the error comes back and
    // the caller's rollback undoes everything.
    let mut batch = Batch::new().rollback_on_error(true);
    batch.add(Sample::new("inside", 1, "1"));
    batch.add(Sample::new("p0", 1, "1"));
    let tx = c.transaction()?;
    let r = tx.send(&mut batch);
    assert!(matches!(r, Err(Error::Batch { index: 1, .. })), "{r:?}");
    tx.rollback()?;
    same(
        &snapshot(&c)?,
        &before,
        "rollback-on-error inside a transaction",
    )?;
    Ok(())
}

fn batch_in_a_committed_transaction(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let mut batch = Batch::new().auto_transaction_rows(2);
    for i in 0..5 {
        batch.add(Sample::new(&format!("ct{i}"), i, "1"));
    }
    let tx = c.transaction()?;
    let mut s = Sample::new("direct", 9, "1");
    tx.add(&mut s)?;
    let results = tx.send(&mut batch)?;
    tx.commit()?;
    assert_eq!(results.len(), 5);
    assert_eq!(c.count::<Sample>("", &[])?, 6);
    Ok(())
}

fn batch_update_fields_writes_only_those_fields(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let seeded = seed(&c, "bf", 3)?;
    let mut batch = Batch::new();
    let mut local = seeded[0].clone();
    local.age = 500;
    local.name = "not-written".into();
    batch.update_fields(local, &["Age"])?;
    let mut ghost = seeded[1].clone();
    ghost.id = 9_999;
    batch.update_fields(ghost, &["Age"])?;
    // Unknown names are refused when the item is collected.
    let err = expect_kind!(batch.update_fields(seeded[1].clone(), &["Nope"]), BadInput);
    assert!(matches!(err, Error::UnknownField { .. }), "{err:?}");
    expect_kind!(batch.update_fields(seeded[1].clone(), &[]), BadInput);
    // A run of another field list, one of them refused: each item gets its
    // own result, as when the run is written one row at a time.
    let mut clash = seeded[2].clone();
    clash.name = "bf0".into();
    clash.age = 600;
    batch.update_fields(clash, &["Name"])?;
    let mut renamed = seeded[1].clone();
    renamed.name = "bf1-new".into();
    renamed.age = 700;
    batch.update_fields(renamed, &["Name"])?;
    assert_eq!(batch.len(), 4);
    let results = c.send(&mut batch)?;
    check_results(
        &results,
        &[
            Want::Done,
            Want::Missing,
            Want::Failed(ErrorKind::UniqueViolation),
            Want::Done,
        ],
    )?;
    let back: Sample = c.retrieve(seeded[1].id)?;
    assert_eq!((back.name.as_str(), back.age), ("bf1-new", seeded[1].age));
    same(
        &c.retrieve::<Sample>(seeded[2].id)?,
        &seeded[2],
        "the refused row",
    )?;
    let back: Sample = c.retrieve(seeded[0].id)?;
    assert_eq!(back.age, 500);
    assert_eq!(back.name, "bf0");
    assert_eq!(back.created_at, seeded[0].created_at);
    assert!(back.changed >= seeded[0].changed);
    Ok(())
}

fn batch_ids_after_the_largest_id(f: &dyn Factory) -> TestResult {
    // Once the largest possible ID is taken, new IDs cannot follow it: each
    // reported ID must still be the one its record got.
    let store = f.fresh()?;
    let c = store.open()?;
    let mut top = Sample::new("top", 1, "1");
    c.add_with_id(&mut top, i64::MAX)?;
    let mut batch = Batch::new();
    for i in 0..5 {
        batch.add(Sample::new(&format!("after-max{i}"), i, "1"));
    }
    let results = c.send(&mut batch)?;
    if !f.reuses_free_ids() {
        return no_id_after_the_largest(f, &c, &results);
    }
    let mut ids = HashSet::new();
    for (i, r) in results.iter().enumerate() {
        let id = r.id().ok_or_else(|| format!("item {i}: {r:?}"))?;
        assert!(ids.insert(id), "ID {id} reported twice");
        let s = c
            .get::<Sample>(id)?
            .ok_or_else(|| format!("item {i}: reported ID {id} holds no record"))?;
        assert_eq!(s.name, format!("after-max{i}"), "item {i}: ID {id}");
    }
    // One by one as well.
    let mut one = Sample::new("one-after-max", 9, "1");
    let id = c.add(&mut one)?;
    assert_eq!(c.retrieve::<Sample>(id)?.name, "one-after-max");
    Ok(())
}

/// For engines that never reuse IDs: with `i64::MAX` taken no ID is left, and
/// each add says so clearly (not as a duplicate) and adds nothing.
fn no_id_after_the_largest(f: &dyn Factory, c: &Database, results: &[BatchResult]) -> TestResult {
    let exhausted = |e: &Error| -> TestResult {
        let text = e.to_string();
        assert_eq!(e.kind(), ErrorKind::BadInput, "{}: {text}", f.name());
        assert!(
            text.contains("IDs of table Sample are exhausted") && text.contains("explicitly"),
            "{}: {text}",
            f.name()
        );
        Ok(())
    };
    assert_eq!(results.len(), 5);
    for (i, r) in results.iter().enumerate() {
        match r {
            BatchResult::Failed(e) => exhausted(e)?,
            other => return Err(format!("item {i}: {other:?}").into()),
        }
    }
    let mut one = Sample::new("one-after-max", 9, "1");
    exhausted(&expect_kind!(c.add(&mut one), BadInput))?;
    assert_eq!(c.count::<Sample>("", &[])?, 1, "nothing was added");
    // An explicit ID still works.
    assert_eq!(c.add_with_id(&mut one, 7)?, 7);
    assert_eq!(c.retrieve::<Sample>(7)?.name, "one-after-max");
    Ok(())
}

/// Samples in one fresh store, tags in another, one client over both, and a
/// sample the tags can belong to.
fn two_engines(
    f: &dyn Factory,
) -> Result<(Store, Store, Database, Sample), Box<dyn std::error::Error>> {
    let a = f.fresh()?;
    let b = f.fresh()?;
    let c = Database::builder(model())
        .default_engine(a.engine_for(Model::new().with::<Sample>())?)
        .place::<Tag>(b.engine_for(Model::new().with::<Tag>())?)
        .open()?;
    let mut owner = Sample::new("owner", 1, "1");
    c.add(&mut owner)?;
    Ok((a, b, c, owner))
}

fn rollback_on_error_across_two_engines(f: &dyn Factory) -> TestResult {
    let (a, b, c, owner) = two_engines(f)?;
    let mut t = Tag::new("taken", owner.id);
    c.add(&mut t)?;
    let before = snapshot(&c)?;
    let mut batch = Batch::new().rollback_on_error(true);
    batch.add(Sample::new("s-new", 2, "1"));
    batch.add(Tag::new("t-new", owner.id));
    batch.add(Sample::new("s-new2", 3, "1"));
    batch.add(Tag::new("taken", owner.id));
    match c.send(&mut batch) {
        Err(Error::Batch { index: 3, source }) => {
            assert_eq!(source.kind(), ErrorKind::UniqueViolation);
        }
        other => return Err(format!("expected Error::Batch at 3, got {other:?}").into()),
    }
    same(&snapshot(&c)?, &before, "nothing remains in either engine")?;
    // And a good batch lands in both.
    batch.add(Sample::new("s-ok", 2, "1"));
    batch.add(Tag::new("t-ok", owner.id));
    c.send(&mut batch)?;
    assert_eq!(c.count::<Sample>("", &[])?, 2);
    assert_eq!(c.count::<Tag>("", &[])?, 2);
    if let Some(n) = b.raw_count("Tag") {
        assert_eq!(n?, 2, "tags live in the second engine");
    }
    if let Some(exists) = a.raw_table_exists("Tag") {
        assert!(!exists?, "no stored Tag table in the first engine");
    }
    Ok(())
}

/// Items of two engines in runs (Sample, Sample, Tag, Tag, Tag, Sample,
/// Tag, Sample), cut by chunks of three that start and end inside runs: every
/// item lands in its own engine, results come back in item order, and a
/// failure inside a cut run is reported for that item alone (the rest
/// applies), or, with rollback-on-error, at its index in the batch with
/// nothing of the batch left.
fn chunks_cut_across_runs_of_two_engines(f: &dyn Factory) -> TestResult {
    let (a, b, c, owner) = two_engines(f)?;
    let kinds = "SSTTTSTS";
    let fill = |batch: &mut Batch, round: u32, taken: Option<usize>| {
        for (i, k) in kinds.chars().enumerate() {
            match k {
                'S' => batch.add(Sample::new(&format!("s{round}-{i}"), i as i32, "1")),
                _ if Some(i) == taken => batch.add(Tag::new("taken", owner.id)),
                _ => batch.add(Tag::new(&format!("t{round}-{i}"), owner.id)),
            };
        }
    };
    let mut batch = Batch::new().auto_transaction_rows(3);
    fill(&mut batch, 0, None);
    let results = c.send(&mut batch)?;
    check_results(
        &results,
        &[
            Want::Added,
            Want::Added,
            Want::Added,
            Want::Added,
            Want::Added,
            Want::Added,
            Want::Added,
            Want::Added,
        ],
    )?;
    assert_eq!(c.count::<Sample>("", &[])?, 5);
    assert_eq!(c.count::<Tag>("", &[])?, 4);
    if let Some(n) = b.raw_count("Tag") {
        assert_eq!(n?, 4, "tags live in the second engine");
    }
    if let Some(n) = a.raw_count("Sample") {
        assert_eq!(n?, 5, "samples live in the first engine");
    }
    // Item 4, a Tag inside the second chunk (items 3 to 5) and inside a run,
    // fails as a duplicate: it alone is reported failed, the rest applies.
    c.add(&mut Tag::new("taken", owner.id))?;
    let (samples, tags) = (c.count::<Sample>("", &[])?, c.count::<Tag>("", &[])?);
    let mut batch = Batch::new().auto_transaction_rows(3);
    fill(&mut batch, 1, Some(4));
    let results = c.send(&mut batch)?;
    let mut want: Vec<Want> = kinds.chars().map(|_| Want::Added).collect();
    want[4] = Want::Failed(ErrorKind::UniqueViolation);
    check_results(&results, &want)?;
    assert_eq!(c.count::<Sample>("", &[])?, samples + 4);
    assert_eq!(c.count::<Tag>("", &[])?, tags + 3);
    // With rollback-on-error, the same failure is reported at index 4 and
    // leaves nothing of the batch.
    let before = snapshot(&c)?;
    let mut batch = Batch::new().rollback_on_error(true);
    fill(&mut batch, 2, Some(4));
    match c.send(&mut batch) {
        Err(Error::Batch { index: 4, source }) => {
            assert_eq!(source.kind(), ErrorKind::UniqueViolation);
        }
        other => return Err(format!("expected Error::Batch at 4, got {other:?}").into()),
    }
    same(&snapshot(&c)?, &before, "nothing remains in either engine")?;
    Ok(())
}

/// Adds enough for several full multi-row statements and a short one after
/// them (engines write runs of adds in statements of up to a few hundred
/// rows, and may bind the automatic times the rows share once a statement).
const MANY: usize = 450;

/// The `i`th of [`MANY`] records, each field its own.
fn many(i: usize) -> Sample {
    let mut s = Sample::new(&format!("many{i}"), i as i32, &format!("{i}.25"));
    s.note = (i % 3 == 0).then(|| format!("note {i}"));
    s
}

/// Reads every Sample back in ID order and checks each against [`many`],
/// returning them.
fn read_many(
    c: &Database,
    results: &[BatchResult],
) -> Result<Vec<Sample>, Box<dyn std::error::Error>> {
    assert_eq!(results.len(), MANY);
    let mut back = c.select::<Sample>(&Query::all())?;
    back.sort_by_key(|s| s.id);
    assert_eq!(back.len(), MANY);
    for (i, (got, r)) in back.iter().zip(results).enumerate() {
        assert_eq!(r.id(), Some(got.id), "item {i}: reported ID");
        let want = many(i);
        assert_eq!(
            (
                &got.name,
                &got.last_name,
                got.amount,
                got.age,
                got.born,
                &got.note
            ),
            (
                &want.name,
                &want.last_name,
                want.amount,
                want.age,
                want.born,
                &want.note
            ),
            "item {i}"
        );
    }
    Ok(back)
}

fn many_adds_keep_their_fields_and_one_stamp(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let before = Utc::now() - Duration::seconds(1);
    let mut batch = Batch::new();
    batch.add_all((0..MANY).map(many));
    let results = c.send(&mut batch)?;
    let after = Utc::now() + Duration::seconds(1);
    let back = read_many(&c, &results)?;
    // One batch, one stamp: every row's times are the first row's.
    let stamp = back[0].created_at;
    assert!(before <= stamp && stamp <= after, "stamp {stamp}");
    for (i, s) in back.iter().enumerate() {
        assert_eq!((s.created_at, s.changed), (stamp, stamp), "item {i}");
    }
    Ok(())
}

/// Items applied as given, without a batch's stamp: rows whose automatic
/// times differ must each keep their own, and rows that share two distinct
/// times must keep each in its own field.
fn many_adds_of_distinct_times_keep_each_time(f: &dyn Factory) -> TestResult {
    let base: DateTime<Utc> = Utc.with_ymd_and_hms(2024, 5, 6, 7, 8, 9).unwrap();
    let later = base + Duration::days(1);
    type Times = fn(DateTime<Utc>, DateTime<Utc>, usize) -> (DateTime<Utc>, DateTime<Utc>);
    let cases: [(&str, Times); 2] = [
        ("shared by every row", |base, later, _| (base, later)),
        // Creation times all differ; modification times are all alike but
        // one, in the middle.
        ("differing", |base, later, i| {
            let changed = if i == MANY / 2 { later } else { base };
            (base + Duration::seconds(i as i64), changed)
        }),
    ];
    for (case, times) in cases {
        let store = f.fresh()?;
        let c = store.open()?;
        let recs: Vec<Sample> = (0..MANY)
            .map(|i| {
                let (created_at, changed) = times(base, later, i);
                Sample {
                    created_at,
                    changed,
                    ..many(i)
                }
            })
            .collect();
        let items: Vec<BatchItem<'_>> = recs
            .iter()
            .map(|r| BatchItem {
                table: Sample::table(),
                op: BatchOp::Add { id: None, row: r },
            })
            .collect();
        let results = c.apply_items(&items, BatchOptions::default(), false)?;
        let back = read_many(&c, &results)?;
        for (i, (got, want)) in back.iter().zip(&recs).enumerate() {
            assert_eq!(
                (got.created_at, got.changed),
                (want.created_at, want.changed),
                "{case}: item {i}"
            );
        }
    }
    Ok(())
}
