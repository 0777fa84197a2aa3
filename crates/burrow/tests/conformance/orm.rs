//! Every call of the `Orm` trait, on the happy path and at its edges.

use std::collections::HashSet;

use burrow::chrono::Utc;
use burrow::{params, Error, ErrorKind, Orm, Query, Value};

use crate::common::*;

conformance!(
    add_sets_and_returns_the_id,
    add_with_id_forces_the_id,
    add_with_id_taken_is_a_unique_violation,
    retrieve_get_and_retrieve_into_when_missing,
    retrieve_into_overwrites_the_record,
    get_many_answers_each_id_in_order,
    select_many_answers_each_query_in_order,
    retrieve_where_finds_the_first_match,
    update_writes_every_field,
    update_of_a_missing_id_is_not_found,
    update_fields_writes_only_those_fields,
    add_or_update_adds_a_new_id_and_updates_a_taken_one,
    add_or_update_refuses_a_unique_clash_and_changes_nothing,
    add_or_update_from_many_threads_adds_one_row,
    delete_by_id,
    delete_where_deletes_the_matches,
    delete_where_refuses_an_empty_where,
    list_filters,
    select_orders_limits_and_offsets,
    for_each_streams_every_row,
    for_each_stops_on_the_callbacks_error,
    row_callback_calling_the_engine_again_works_or_fails_at_once,
    count_with_and_without_where,
    one_field_value_is_typed,
    unknown_table_is_refused_everywhere,
    empty_table_reads,
);

fn add_sets_and_returns_the_id(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let mut ids = HashSet::new();
    for i in 0..5 {
        let mut s = Sample::new(&format!("n{i}"), i, "1.25");
        let id = c.add(&mut s)?;
        assert!(id > 0, "{}: id {id}", f.name());
        assert_eq!(s.id, id, "the ID is set in the record");
        assert!(ids.insert(id), "ID {id} given twice");
        let back: Sample = c.retrieve(id)?;
        same(&back, &s, "read back after add")?;
    }
    assert_eq!(c.count::<Sample>("", &[])?, 5);
    // A record whose ID field is already set is still added with a new ID.
    let mut again = Sample::new("again", 9, "0");
    again.id = 424_242;
    let id = c.add(&mut again)?;
    assert!(!ids.contains(&id));
    assert_eq!(again.id, id);
    Ok(())
}

fn add_with_id_forces_the_id(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let mut s = Sample::new("forced", 1, "2");
    assert_eq!(c.add_with_id(&mut s, 1000)?, 1000);
    assert_eq!(s.id, 1000);
    same(&c.retrieve::<Sample>(1000)?, &s, "forced ID")?;
    // A later add gets an ID of its own.
    let mut t = Sample::new("next", 2, "3");
    let id = c.add(&mut t)?;
    assert_ne!(id, 1000);
    same(&c.retrieve::<Sample>(id)?, &t, "after a forced ID")?;
    // Large and small forced IDs.
    let mut big = Sample::new("big", 3, "4");
    assert_eq!(c.add_with_id(&mut big, i64::MAX - 1)?, i64::MAX - 1);
    same(
        &c.retrieve::<Sample>(i64::MAX - 1)?,
        &big,
        "large forced ID",
    )?;
    let mut one = Sample::new("one", 4, "5");
    assert_eq!(c.add_with_id(&mut one, 1)?, 1);
    same(&c.retrieve::<Sample>(1)?, &one, "forced ID 1")?;
    Ok(())
}

fn add_with_id_taken_is_a_unique_violation(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let mut s = Sample::new("first", 1, "2");
    c.add_with_id(&mut s, 7)?;
    let before = all::<Sample>(&c)?;
    let mut dup = Sample::new("second", 2, "3");
    let err = expect_kind!(c.add_with_id(&mut dup, 7), UniqueViolation);
    assert!(matches!(err, Error::UniqueViolation { .. }), "{err:?}");
    assert_eq!(dup.id, 0, "the ID is not set on failure");
    same(
        &all::<Sample>(&c)?,
        &before,
        "data after a duplicate forced ID",
    )?;
    // The name of the refused record is free.
    assert!(c
        .get_where::<Sample>("Name = ?", &params!["second"])?
        .is_none());
    Ok(())
}

fn retrieve_get_and_retrieve_into_when_missing(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let mut s = Sample::new("here", 1, "1");
    let id = c.add(&mut s)?;
    let missing = id + 1000;
    let err = expect_kind!(c.retrieve::<Sample>(missing), NotFound);
    match err {
        Error::NotFound { table, id } => {
            assert_eq!(table, "Sample");
            assert_eq!(id, missing);
        }
        other => return Err(format!("expected Error::NotFound, got {other:?}").into()),
    }
    assert!(c.get::<Sample>(missing)?.is_none());
    assert!(c.get::<Sample>(0)?.is_none());
    assert!(c.get::<Sample>(-1)?.is_none());
    let mut into = Sample::new("untouched", 5, "5");
    let copy = into.clone();
    assert!(!c.retrieve_into(missing, &mut into)?);
    same(
        &into,
        &copy,
        "retrieve_into leaves the record alone when missing",
    )?;
    Ok(())
}

fn get_many_answers_each_id_in_order(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    assert!(c.get_many::<Sample>(&[])?.is_empty());
    // More rows than PostgreSQL's engine sends in one pipeline.
    let seeded = seed(&c, "m", 300)?;
    let missing = seeded.iter().map(|s| s.id).max().unwrap_or(0) + 1000;
    let mut ids: Vec<i64> = seeded.iter().rev().map(|s| s.id).collect();
    ids.insert(7, missing);
    ids.insert(260, 0);
    ids.push(seeded[3].id);
    ids.push(-1);
    let got = c.get_many::<Sample>(&ids)?;
    assert_eq!(got.len(), ids.len());
    for (id, row) in ids.iter().zip(&got) {
        same(row, &c.get::<Sample>(*id)?, &format!("get_many of ID {id}"))?;
    }
    assert!(got[7].is_none() && got[260].is_none() && got[ids.len() - 1].is_none());
    same(
        &got[ids.len() - 2],
        &Some(seeded[3].clone()),
        "an ID asked twice",
    )?;
    // Inside a transaction: its own uncommitted writes.
    let tx = c.transaction()?;
    let mut fresh = Sample::new("in-tx", 1, "1");
    tx.add(&mut fresh)?;
    let mut changed = seeded[0].clone();
    changed.age = 99;
    tx.update(&mut changed)?;
    let seen = tx.get_many::<Sample>(&[fresh.id, changed.id, missing])?;
    same(
        &seen,
        &vec![Some(fresh.clone()), Some(changed.clone()), None],
        "get_many in a transaction",
    )?;
    drop(tx);
    same(
        &c.get_many::<Sample>(&[seeded[0].id, fresh.id])?,
        &vec![Some(seeded[0].clone()), None],
        "after the rollback",
    )?;
    Ok(())
}

fn select_many_answers_each_query_in_order(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    assert!(c.select_many::<Sample>(&[])?.is_empty());
    seed(&c, "q", 30)?;
    // More queries than PostgreSQL's engine sends in one pipeline, with
    // filters, orders, limits, and some answering nothing.
    let queries: Vec<Query> = (0..40i64)
        .map(|i| match i % 4 {
            0 => Query::filter("Age >= ?", params![i % 30]).order_by("Age"),
            1 => Query::all()
                .order_by("Age")
                .desc()
                .limit(3)
                .offset(i as u64 % 7),
            2 => Query::filter("Name = ?", params![format!("q{}", i % 35)]),
            _ => Query::filter("Age > ?", params![100]),
        })
        .collect();
    let lists = c.select_many::<Sample>(&queries)?;
    assert_eq!(lists.len(), queries.len());
    for (i, (q, list)) in queries.iter().zip(&lists).enumerate() {
        same(list, &c.select::<Sample>(q)?, &format!("select_many #{i}"))?;
    }
    assert!(lists[3].is_empty() && !lists[0].is_empty());
    // A bad query is refused before anything runs.
    let bad = [Query::all(), Query::filter("Nope = ?", params![1])];
    expect_kind!(c.select_many::<Sample>(&bad), BadInput);
    // Inside a transaction: its own uncommitted writes.
    let tx = c.transaction()?;
    let mut fresh = Sample::new("in-tx", 77, "1");
    tx.add(&mut fresh)?;
    let seen = tx.select_many::<Sample>(&[
        Query::filter("Age = ?", params![77]),
        Query::filter("Name = ?", params!["q0"]),
    ])?;
    same(
        &seen[0],
        &vec![fresh.clone()],
        "select_many in a transaction",
    )?;
    assert_eq!(seen[1].len(), 1);
    drop(tx);
    let after = c.select_many::<Sample>(&[Query::filter("Age = ?", params![77])])?;
    assert!(after[0].is_empty(), "after the rollback");
    Ok(())
}

fn retrieve_into_overwrites_the_record(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let mut a = Sample::new("a-long-name-to-reuse-the-buffer", 1, "1.5");
    a.note = Some("note a".into());
    let mut b = Sample::new("b", 2, "2.5");
    c.add(&mut a)?;
    c.add(&mut b)?;
    let mut rec = Sample::default();
    assert!(c.retrieve_into(a.id, &mut rec)?);
    same(&rec, &a, "retrieve_into a")?;
    // Reading b into the same record must overwrite every field, including
    // shortening the text and clearing the note.
    assert!(c.retrieve_into(b.id, &mut rec)?);
    same(&rec, &b, "retrieve_into b over a")?;
    assert_eq!(c.get::<Sample>(a.id)?, Some(a));
    Ok(())
}

fn retrieve_where_finds_the_first_match(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let seeded = seed(&c, "w", 6)?;
    let found = c.get_where::<Sample>("Name = ?", &params!["w3"])?;
    same(&found, &Some(seeded[3].clone()), "by name")?;
    let found = c.get_where::<Sample>("Age >= ? AND Age < ?", &params![2, 3])?;
    same(&found, &Some(seeded[2].clone()), "by a range")?;
    // Several matches: one of them.
    let found = c
        .get_where::<Sample>("Age > ?", &params![3])?
        .ok_or("a match was expected")?;
    assert!(found.age > 3);
    assert!(seeded.contains(&found));
    assert!(c
        .get_where::<Sample>("Name = ?", &params!["nobody"])?
        .is_none());
    // An empty WHERE: any row.
    assert!(c.get_where::<Sample>("", &[])?.is_some());
    Ok(())
}

fn update_writes_every_field(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let t0 = Utc::now();
    let mut s = Sample::new("before", 1, "1");
    c.add(&mut s)?;
    let t1 = Utc::now();
    assert!(
        s.created_at >= t0 && s.created_at <= t1,
        "created time filled"
    );
    assert!(s.changed >= t0 && s.changed <= t1, "modified time filled");
    let created = s.created_at;
    let mut other = Sample::new("other", 2, "2");
    c.add(&mut other)?;

    let mut upd = c.retrieve::<Sample>(s.id)?;
    upd.name = "after".into();
    upd.last_name = "Renamed".into();
    upd.amount = cur("-12.3456");
    upd.age = -7;
    upd.born = date(2001, 2, 3);
    upd.note = Some("now with a note".into());
    let t2 = Utc::now();
    c.update(&mut upd)?;
    assert!(upd.changed >= t2, "modified time refreshed in the record");
    let back = c.retrieve::<Sample>(s.id)?;
    same(&back, &upd, "after update")?;
    assert_eq!(back.created_at, created, "created time kept");
    assert!(back.changed >= t2, "modified time refreshed in the store");
    // The other row is untouched, and the old name is free again.
    same(&c.retrieve::<Sample>(other.id)?, &other, "other row")?;
    let mut reuse = Sample::new("before", 3, "3");
    c.add(&mut reuse)?;
    // Back to None.
    upd.note = None;
    c.update(&mut upd)?;
    assert_eq!(c.retrieve::<Sample>(s.id)?.note, None);
    Ok(())
}

fn update_of_a_missing_id_is_not_found(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let seeded = seed(&c, "u", 3)?;
    let before = all::<Sample>(&c)?;
    let mut ghost = Sample::new("ghost", 9, "9");
    ghost.id = 999_999;
    let err = expect_kind!(c.update(&mut ghost), NotFound);
    assert!(
        matches!(err, Error::NotFound { id: 999_999, .. }),
        "{err:?}"
    );
    expect_kind!(c.update_fields(&mut ghost, &["Name"]), NotFound);
    // Missing even when its unique name collides with an existing row.
    ghost.name = seeded[0].name.clone();
    let r = c.update(&mut ghost);
    assert!(r.is_err(), "update of a missing ID succeeded");
    same(
        &all::<Sample>(&c)?,
        &before,
        "data after updates of a missing ID",
    )?;
    assert!(
        c.get::<Sample>(999_999)?.is_none(),
        "update must not insert"
    );
    Ok(())
}

fn update_fields_writes_only_those_fields(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let mut s = Sample::new("orig", 10, "10");
    s.note = Some("orig note".into());
    c.add(&mut s)?;
    let stored = c.retrieve::<Sample>(s.id)?;

    let mut local = stored.clone();
    local.name = "changed-but-not-written".into();
    local.amount = cur("99.99");
    local.age = 11;
    local.note = None;
    let t0 = Utc::now();
    // Field names ignore ASCII case, as in SQL.
    c.update_fields(&mut local, &["Amount", "age"])?;
    let back = c.retrieve::<Sample>(s.id)?;
    assert_eq!(back.amount, cur("99.99"), "Amount written");
    assert_eq!(back.age, 11, "Age written");
    assert_eq!(back.name, "orig", "Name not written");
    assert_eq!(back.note.as_deref(), Some("orig note"), "Note not written");
    assert_eq!(back.last_name, stored.last_name);
    assert_eq!(back.born, stored.born);
    assert_eq!(back.created_at, stored.created_at, "created time kept");
    assert!(back.changed >= t0, "modified time refreshed");
    assert_eq!(back.changed, local.changed);

    // A nullable field set to NULL through a subset.
    c.update_fields(&mut local, &["Note"])?;
    let back = c.retrieve::<Sample>(s.id)?;
    assert_eq!(back.note, None);
    assert_eq!(back.name, "orig");
    // The same field named twice is fine.
    local.age = 12;
    c.update_fields(&mut local, &["Age", "AGE"])?;
    assert_eq!(c.retrieve::<Sample>(s.id)?.age, 12);
    Ok(())
}

fn delete_by_id(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let seeded = seed(&c, "d", 4)?;
    assert!(c.delete::<Sample>(seeded[1].id)?);
    assert!(
        !c.delete::<Sample>(seeded[1].id)?,
        "second delete finds nothing"
    );
    assert!(!c.delete::<Sample>(123_456)?);
    expect_kind!(c.retrieve::<Sample>(seeded[1].id), NotFound);
    assert_eq!(c.count::<Sample>("", &[])?, 3);
    let rest: Vec<Sample> = seeded
        .iter()
        .filter(|s| s.id != seeded[1].id)
        .cloned()
        .collect();
    same(&all::<Sample>(&c)?, &rest, "rows left")?;
    // The deleted unique name is free again.
    let mut again = Sample::new("d1", 1, "1");
    c.add(&mut again)?;
    Ok(())
}

fn delete_where_deletes_the_matches(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let seeded = seed(&c, "dw", 10)?;
    assert_eq!(c.delete_where::<Sample>("Age >= ?", &params![7])?, 3);
    assert_eq!(c.delete_where::<Sample>("Age >= ?", &params![7])?, 0);
    assert_eq!(
        c.delete_where::<Sample>("Name IN (?, ?) OR Age = 0", &params!["dw2", "dw4"])?,
        3
    );
    let left: Vec<Sample> = seeded
        .into_iter()
        .filter(|s| ![0, 2, 4, 7, 8, 9].contains(&s.age))
        .collect();
    same(&all::<Sample>(&c)?, &left, "rows left")?;
    Ok(())
}

fn delete_where_refuses_an_empty_where(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    seed(&c, "e", 3)?;
    let before = all::<Sample>(&c)?;
    let err = expect_kind!(c.delete_where::<Sample>("", &[]), BadInput);
    assert!(matches!(err, Error::BadInput(_)), "{err:?}");
    expect_kind!(c.delete_where::<Sample>("   \n\t", &[]), BadInput);
    same(
        &all::<Sample>(&c)?,
        &before,
        "data after refused delete_where",
    )?;
    Ok(())
}

fn list_filters(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let seeded = seed(&c, "l", 8)?;
    let mut everything = c.list::<Sample>("", &[])?;
    everything.sort_by_key(|s| s.id);
    same(&everything, &seeded, "list everything")?;
    let mut some = c.list::<Sample>("Age < ? OR Name = ?", &params![2, "l5"])?;
    some.sort_by_key(|s| s.id);
    let want: Vec<Sample> = seeded
        .iter()
        .filter(|s| s.age < 2 || s.name == "l5")
        .cloned()
        .collect();
    same(&some, &want, "filtered list")?;
    assert!(c.list::<Sample>("Name = ?", &params!["none"])?.is_empty());
    let mut like = c.list::<Sample>("Name LIKE ?", &params!["l%"])?;
    like.sort_by_key(|s| s.id);
    same(&like, &seeded, "LIKE")?;
    let mut between = c.list::<Sample>("Age BETWEEN 2 AND 4", &[])?;
    between.sort_by_key(|s| s.id);
    same(&between, &seeded[2..=4].to_vec(), "BETWEEN")?;
    let not_in = c.list::<Sample>("Age NOT IN (0, 1, 2, 3, 4, 5)", &[])?;
    assert_eq!(not_in.len(), 2);
    let null = c.list::<Sample>("Note IS NULL", &[])?;
    assert_eq!(null.len(), 8);
    assert!(c.list::<Sample>("Note IS NOT NULL", &[])?.is_empty());
    let by_id = c.list::<Sample>("ID = ?", &params![seeded[6].id])?;
    same(&by_id, &vec![seeded[6].clone()], "by ID")?;
    let by_rowid = c.list::<Sample>("RowID = ?", &params![seeded[6].id])?;
    same(&by_rowid, &vec![seeded[6].clone()], "by RowID")?;
    Ok(())
}

fn select_orders_limits_and_offsets(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    // Ages 0..10 added in a shuffled order; last names repeat in pairs.
    let mut added = Vec::new();
    for age in [5, 2, 9, 0, 7, 3, 8, 1, 6, 4] {
        let mut s = Sample::new(&format!("s{age}"), age, "1");
        s.last_name = format!("L{}", age / 2);
        c.add(&mut s)?;
        added.push(s);
    }
    let ages = |v: &[Sample]| v.iter().map(|s| s.age).collect::<Vec<_>>();
    let asc = c.select::<Sample>(&Query::all().order_by("Age"))?;
    assert_eq!(ages(&asc), (0..10).collect::<Vec<_>>());
    let desc = c.select::<Sample>(&Query::all().order_by("Age").desc())?;
    assert_eq!(ages(&desc), (0..10).rev().collect::<Vec<_>>());
    let page = c.select::<Sample>(&Query::all().order_by("Age").desc().limit(3).offset(2))?;
    assert_eq!(ages(&page), vec![7, 6, 5]);
    let first = c.select::<Sample>(&Query::all().order_by("Age").limit(1))?;
    assert_eq!(ages(&first), vec![0]);
    let tail = c.select::<Sample>(&Query::all().order_by("Age").offset(8))?;
    assert_eq!(ages(&tail), vec![8, 9], "offset without limit");
    let past = c.select::<Sample>(&Query::all().order_by("Age").offset(50).limit(5))?;
    assert!(past.is_empty());
    let none = c.select::<Sample>(&Query::all().limit(0))?;
    assert!(none.is_empty(), "limit 0");
    let huge = c.select::<Sample>(&Query::all().order_by("Age").limit(u64::MAX))?;
    assert_eq!(huge.len(), 10);
    // Two keys: last name descending, then age ascending.
    let two = c.select::<Sample>(&Query::all().order_by("LastName").desc().order_by("Age"))?;
    assert_eq!(ages(&two), vec![8, 9, 6, 7, 4, 5, 2, 3, 0, 1]);
    // With a filter and parameters.
    let q = Query::filter("Age > ? AND Age <> ?", params![2, 6])
        .order_by("Age")
        .desc()
        .limit(2)
        .offset(1);
    assert_eq!(ages(&c.select::<Sample>(&q)?), vec![8, 7]);
    // Order by ID follows the IDs given.
    let by_id = c.select::<Sample>(&Query::all().order_by("ID").desc())?;
    let mut want = added.clone();
    want.sort_by_key(|s| std::cmp::Reverse(s.id));
    same(&by_id, &want, "ID descending")?;
    // Currency and dates sort by value.
    let by_amount = c.select::<Sample>(&Query::all().order_by("Born").order_by("ID"))?;
    let mut want = added;
    want.sort_by_key(|s| (s.born, s.id));
    same(&by_amount, &want, "by date")?;
    Ok(())
}

fn for_each_streams_every_row(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let mut seeded = seed(&c, "fe", 25)?;
    // A long name first, then short ones: the reused buffers must not leak.
    seeded[0].name = "x".repeat(300);
    seeded[0].note = Some("only the first has a note".into());
    c.update(&mut seeded[0])?;
    let mut seen = Vec::new();
    c.for_each::<Sample>(&Query::all().order_by("ID"), &mut |s| {
        seen.push(s.clone());
        Ok(())
    })?;
    same(&seen, &seeded, "streamed rows")?;
    let mut n = 0;
    c.for_each::<Sample>(
        &Query::filter("Age >= ?", params![20])
            .order_by("Age")
            .desc(),
        &mut |s| {
            assert_eq!(s.age, 24 - n);
            n += 1;
            Ok(())
        },
    )?;
    assert_eq!(n, 5);
    let mut none = 0;
    c.for_each::<Sample>(&Query::filter("Age < 0", vec![]), &mut |_| {
        none += 1;
        Ok(())
    })?;
    assert_eq!(none, 0);
    Ok(())
}

fn for_each_stops_on_the_callbacks_error(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    seed(&c, "st", 10)?;
    let mut calls = 0;
    let r = c.for_each::<Sample>(&Query::all(), &mut |_| {
        calls += 1;
        if calls == 3 {
            Err(Error::BadInput("stop here".into()))
        } else {
            Ok(())
        }
    });
    let err = expect_kind!(r, BadInput);
    assert!(err.to_string().contains("stop here"), "{err}");
    assert_eq!(calls, 3, "no row after the error");
    // The engine is usable afterwards.
    assert_eq!(c.count::<Sample>("", &[])?, 10);
    let mut s = Sample::new("after-stop", 1, "1");
    c.add(&mut s)?;
    Ok(())
}

fn count_with_and_without_where(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    assert_eq!(c.count::<Sample>("", &[])?, 0);
    seed(&c, "c", 12)?;
    assert_eq!(c.count::<Sample>("", &[])?, 12);
    assert_eq!(c.count::<Sample>("Age < ?", &params![5])?, 5);
    assert_eq!(c.count::<Sample>("Amount > ?", &params![cur("3.5")])?, 8);
    assert_eq!(c.count::<Sample>("Name = ?", &params!["c11"])?, 1);
    assert_eq!(c.count::<Sample>("Name = 'c11' AND Age = 3", &[])?, 0);
    assert_eq!(c.count::<Tag>("", &[])?, 0);
    Ok(())
}

fn one_field_value_is_typed(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let seeded = seed(&c, "o", 4)?;
    let s = &seeded[2];
    let w = "Name = ?";
    let p = params!["o2"];
    assert_eq!(
        c.one_field_value::<Sample>("Name", w, &p)?,
        Some(Value::Text("o2".into()))
    );
    assert_eq!(
        c.one_field_value::<Sample>("ID", w, &p)?,
        Some(Value::Int(s.id))
    );
    assert_eq!(
        c.one_field_value::<Sample>("Age", w, &p)?,
        Some(Value::Int(2))
    );
    assert_eq!(
        c.one_field_value::<Sample>("Amount", w, &p)?,
        Some(Value::Currency(cur("2.5")))
    );
    assert_eq!(
        c.one_field_value::<Sample>("Born", w, &p)?,
        Some(Value::Date(s.born))
    );
    assert_eq!(
        c.one_field_value::<Sample>("CreatedAt", w, &p)?,
        Some(Value::DateTime(s.created_at))
    );
    assert_eq!(
        c.one_field_value::<Sample>("Note", w, &p)?,
        Some(Value::Null)
    );
    assert_eq!(
        c.one_field_value::<Sample>("Name", "Name = ?", &params!["zzz"])?,
        None
    );
    let mut t = Tag::new("t", s.id);
    c.add(&mut t)?;
    assert_eq!(
        c.one_field_value::<Tag>("Owner", "", &[])?,
        Some(Value::Int(s.id))
    );
    assert_eq!(
        c.one_field_value::<Tag>("Weight", "", &[])?,
        Some(Value::Real(1.5))
    );
    Ok(())
}

fn unknown_table_is_refused_everywhere(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    seed(&c, "k", 2)?;
    let mut x = Stranger {
        id: 0,
        name: "x".into(),
    };
    let err = expect_kind!(c.add(&mut x), BadInput);
    assert!(matches!(err, Error::UnknownTable(_)), "{err:?}");
    assert!(err.to_string().contains("Stranger"), "{err}");
    assert_eq!(x.id, 0);
    let check = |r: burrow::Result<()>, what: &str| -> TestResult {
        match r {
            Err(Error::UnknownTable(_)) => Ok(()),
            other => Err(format!("{what}: expected UnknownTable, got {other:?}").into()),
        }
    };
    check(c.add_with_id(&mut x, 5).map(drop), "add_with_id")?;
    check(c.retrieve::<Stranger>(1).map(drop), "retrieve")?;
    check(c.get::<Stranger>(1).map(drop), "get")?;
    check(c.retrieve_into(1, &mut x).map(drop), "retrieve_into")?;
    check(c.get_where::<Stranger>("", &[]).map(drop), "get_where")?;
    check(c.update(&mut x), "update")?;
    check(c.update_fields(&mut x, &["Name"]), "update_fields")?;
    check(c.delete::<Stranger>(1).map(drop), "delete")?;
    check(
        c.delete_where::<Stranger>("Name = ?", &params!["x"])
            .map(drop),
        "delete_where",
    )?;
    check(c.list::<Stranger>("", &[]).map(drop), "list")?;
    check(c.select::<Stranger>(&Query::all()).map(drop), "select")?;
    check(
        c.for_each::<Stranger>(&Query::all(), &mut |_| Ok(())),
        "for_each",
    )?;
    check(c.count::<Stranger>("", &[]).map(drop), "count")?;
    check(
        c.one_field_value::<Stranger>("Name", "", &[]).map(drop),
        "one_field_value",
    )?;
    // A batch naming an unknown table is refused whole, before any item runs.
    let mut batch = burrow::Batch::new();
    batch.add(Sample::new("batched-before-the-stranger", 5, "5"));
    batch.add(x.clone());
    check(c.send(&mut batch).map(drop), "send")?;
    assert_eq!(
        c.count::<Sample>("", &[])?,
        2,
        "nothing of the batch written"
    );
    if let Some(exists) = store.raw_table_exists("Stranger") {
        assert!(!exists?, "no Stranger table was created");
    }
    Ok(())
}

fn empty_table_reads(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    assert!(c.list::<Sample>("", &[])?.is_empty());
    assert!(c
        .select::<Sample>(&Query::all().order_by("Name").limit(3))?
        .is_empty());
    assert!(c.get_where::<Sample>("", &[])?.is_none());
    assert_eq!(c.one_field_value::<Sample>("Name", "", &[])?, None);
    assert_eq!(c.delete_where::<Sample>("Age > 0", &[])?, 0);
    assert!(!c.delete::<Sample>(1)?);
    Ok(())
}

fn add_or_update_adds_a_new_id_and_updates_a_taken_one(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    // ID 0: a plain add.
    let mut a = Sample::new("a", 1, "1.5");
    assert!(c.add_or_update(&mut a)?);
    assert!(a.id > 0);
    // A free ID: added under it, both times stamped.
    let mut b = Sample::new("b", 2, "2.5");
    b.id = 1_000;
    assert!(c.add_or_update(&mut b)?, "{}", f.name());
    assert_eq!(b.id, 1_000);
    assert!(b.created_at.timestamp() > 0);
    assert_eq!(c.retrieve::<Sample>(1_000)?, b);
    // The ID sequence moved past it: the next new ID does not collide.
    let mut next = Sample::new("next", 3, "3");
    assert!(c.add(&mut next)? > 1_000 || f.reuses_free_ids());
    // A taken ID: every field written, the creation time kept.
    let created = b.created_at;
    std::thread::sleep(std::time::Duration::from_millis(5));
    let mut again = Sample::new("b2", 20, "20.25");
    again.id = 1_000;
    again.note = Some("second".into());
    assert!(!c.add_or_update(&mut again)?, "{}", f.name());
    assert_eq!(again.created_at, created, "{}", f.name());
    assert!(again.changed > b.changed);
    let back = c.retrieve::<Sample>(1_000)?;
    assert_eq!(back, again);
    assert_eq!(c.count::<Sample>("", &[])?, 3);
    // Inside a transaction rolled back, neither path leaves a trace.
    let tx = c.transaction()?;
    let mut fresh = Sample::new("tx", 4, "4");
    fresh.id = 2_000;
    tx.add_or_update(&mut fresh)?;
    let mut over = back.clone();
    over.name = "changed in tx".into();
    tx.add_or_update(&mut over)?;
    tx.rollback()?;
    assert!(c.get::<Sample>(2_000)?.is_none());
    assert_eq!(c.retrieve::<Sample>(1_000)?, back);
    Ok(())
}

fn add_or_update_refuses_a_unique_clash_and_changes_nothing(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let mut a = Sample::new("a", 1, "1");
    let mut b = Sample::new("b", 2, "2");
    c.add(&mut a)?;
    c.add(&mut b)?;
    // A new ID whose name another row holds.
    let mut clash = Sample::new("a", 9, "9");
    clash.id = 500;
    expect_kind!(c.add_or_update(&mut clash), UniqueViolation);
    // A taken ID renamed onto another row's name.
    let mut rename = b.clone();
    rename.name = "a".into();
    expect_kind!(c.add_or_update(&mut rename), UniqueViolation);
    assert!(c.get::<Sample>(500)?.is_none());
    assert_eq!(c.retrieve::<Sample>(a.id)?, a);
    assert_eq!(c.retrieve::<Sample>(b.id)?, b);
    assert_eq!(c.count::<Sample>("", &[])?, 2);
    Ok(())
}

fn add_or_update_from_many_threads_adds_one_row(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    // Four threads write the same 40 new IDs in the same order, racing on each.
    let ids = 100..140;
    let added: Vec<usize> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let (c, ids) = (&c, ids.clone());
                s.spawn(move || -> burrow::Result<usize> {
                    let mut n = 0;
                    for id in ids {
                        let mut r = Sample::new(&format!("n{id}"), t, "1");
                        r.id = id;
                        n += usize::from(c.add_or_update(&mut r)?);
                    }
                    Ok(n)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .collect::<burrow::Result<_>>()
    })?;
    assert_eq!(added.iter().sum::<usize>(), 40, "{}: {added:?}", f.name());
    assert_eq!(c.count::<Sample>("", &[])?, 40);
    assert_eq!(c.retrieve::<Sample>(120)?.name, "n120");
    Ok(())
}

/// A row callback that calls the same engine again, on the same thread: a
/// read by ID, then an update. Each engine either does it, or refuses at once
/// (`BadInput`) and changes nothing. It must never wait for itself (a hang,
/// caught by the watchdog; a pool of one connection waited out its lock
/// timeout), nor panic.
fn row_callback_calling_the_engine_again_works_or_fails_at_once(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let seeded = seed(&c, "nest", 5)?;
    let (done, watch) = std::sync::mpsc::channel::<()>();
    let name = f.name().to_string();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            watch.recv_timeout(std::time::Duration::from_secs(120))
        {
            eprintln!("{name}: a row callback calling the engine again never returned");
            std::process::abort();
        }
    });
    let allowed = |e: &Error| e.kind() == ErrorKind::BadInput;
    let mut reads = 0;
    let r = c.for_each::<Sample>(&Query::all().order_by("ID"), &mut |s| {
        let back: Option<Sample> = c.get(s.id)?;
        assert_eq!(back.as_ref(), Some(s), "{}: nested read", f.name());
        reads += 1;
        Ok(())
    });
    match r {
        Ok(()) => assert_eq!(reads, seeded.len(), "{}", f.name()),
        Err(e) => assert!(allowed(&e), "{}: nested read failed with {e}", f.name()),
    }
    let r = c.for_each::<Sample>(&Query::all().order_by("ID"), &mut |s| {
        let mut s = s.clone();
        s.age += 100;
        c.update(&mut s)?;
        Ok(())
    });
    let now = c.select::<Sample>(&Query::all().order_by("ID"))?;
    match r {
        Ok(()) => {
            let ages: Vec<i32> = now.iter().map(|s| s.age).collect();
            let want: Vec<i32> = seeded.iter().map(|s| s.age + 100).collect();
            assert_eq!(ages, want, "{}: every row updated", f.name());
        }
        Err(e) => {
            assert!(allowed(&e), "{}: nested write failed with {e}", f.name());
            same(&now, &seeded, "nothing changed by the refused write")?;
        }
    }
    let _ = done.send(());
    Ok(())
}
