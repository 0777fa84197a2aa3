//! The memory engine's own rules: uniqueness, IDs, transactions, batches,
//! concurrency, indexes after many writes.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use burrow_core::{
    Batch, BatchResult, Column, Database, Error, ErrorKind, Filter, Orm, Placement, Query, Record,
    RowOps, Select, Storage, Value,
};
use burrow_memory::{MemoryEngine, MemoryOptions};
use common::*;

fn filled(n: u64) -> (Database, Arc<MemoryEngine>) {
    let (c, e) = memory_client();
    let mut b = Batch::new();
    for p in people(n, 5) {
        b.add(p);
    }
    c.send(&mut b).unwrap();
    (c, e)
}

/// A filled engine whose callers give up on a transaction after 100 ms.
fn impatient(n: u64) -> (Database, Arc<MemoryEngine>) {
    let opts = MemoryOptions::memory().lock_timeout(Duration::from_millis(100));
    let e = Arc::new(MemoryEngine::open(opts).unwrap());
    let c = Database::open(model(), e.clone()).unwrap();
    let mut b = Batch::new();
    for p in people(n, 5) {
        b.add(p);
    }
    c.send(&mut b).unwrap();
    (c, e)
}

fn snapshot(c: &Database) -> Vec<Person> {
    c.select::<Person>(&Query::all()).unwrap()
}

#[test]
fn crud_round_trip() {
    let (c, _) = memory_client();
    let mut p = people(1, 1).remove(0);
    let id = c.add(&mut p).unwrap();
    assert_eq!(id, 1);
    assert_eq!(c.retrieve::<Person>(id).unwrap(), p);
    p.age = Some(77);
    p.first_name = None;
    p.photo = Some(vec![1, 2, 3]);
    c.update(&mut p).unwrap();
    assert_eq!(c.retrieve::<Person>(id).unwrap(), p);
    let mut partial = p.clone();
    partial.age = Some(1);
    partial.last_name = "Changed".into();
    c.update_fields(&mut partial, &["LastName"]).unwrap();
    let got = c.retrieve::<Person>(id).unwrap();
    assert_eq!(got.last_name, "Changed");
    assert_eq!(got.age, Some(77));
    assert!(c.delete::<Person>(id).unwrap());
    assert!(!c.delete::<Person>(id).unwrap());
    assert!(c.get::<Person>(id).unwrap().is_none());
    let e = c.update(&mut p).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
}

#[test]
fn deleted_ids_are_never_reused() {
    let (c, _) = filled(10);
    assert!(c.delete::<Person>(10).unwrap());
    assert!(c.delete::<Person>(9).unwrap());
    let mut p = people(1, 77).remove(0);
    p.email = "new@example.org".into();
    assert_eq!(c.add(&mut p).unwrap(), 11);
    // A forced ID raises the high-water mark.
    p.email = "forced@example.org".into();
    assert_eq!(c.add_with_id(&mut p, 100).unwrap(), 100);
    assert!(c.delete::<Person>(100).unwrap());
    p.email = "after@example.org".into();
    assert_eq!(c.add(&mut p).unwrap(), 101);
    // A lower free ID can still be forced, and scans stay in ID order.
    p.email = "low@example.org".into();
    assert_eq!(c.add_with_id(&mut p, 9).unwrap(), 9);
    let ids: Vec<i64> = snapshot(&c).iter().map(|p| p.id).collect();
    assert_eq!(ids, [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 101]);
    let desc = c
        .select::<Person>(&Query::all().order_by("ID").desc().limit(3))
        .unwrap();
    assert_eq!(desc.iter().map(|p| p.id).collect::<Vec<_>>(), [101, 11, 9]);
    let e = c.add_with_id(&mut p, 9).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UniqueViolation);
}

#[test]
fn unique_violation_changes_nothing() {
    let (c, _) = filled(50);
    let before = snapshot(&c);
    let mut dup = people(1, 8).remove(0);
    dup.email = "p10@example.org".into();
    let e = c.add(&mut dup).unwrap_err();
    assert!(matches!(e, Error::UniqueViolation { .. }), "{e}");
    assert!(e.to_string().contains("Person.Email"), "{e}");
    let mut q = c.retrieve::<Person>(3).unwrap();
    q.email = "p4@example.org".into();
    q.age = Some(1234);
    assert_eq!(
        c.update(&mut q).unwrap_err().kind(),
        ErrorKind::UniqueViolation
    );
    assert_eq!(snapshot(&c), before);
    // The old value is still found through the index, the refused one is not.
    assert_eq!(
        c.list::<Person>("Email = ?", &["p3@example.org".into()])
            .unwrap()
            .len(),
        1
    );
    // Swapping two unique values in one transaction works through a free one.
    let mut a = c.retrieve::<Person>(1).unwrap();
    let mut b = c.retrieve::<Person>(2).unwrap();
    c.in_transaction(|tx| {
        let (ea, eb) = (a.email.clone(), b.email.clone());
        a.email = "tmp".into();
        tx.update(&mut a)?;
        b.email = ea;
        tx.update(&mut b)?;
        a.email = eb;
        tx.update(&mut a)
    })
    .unwrap();
    assert_eq!(c.retrieve::<Person>(1).unwrap().email, "p1@example.org");
    assert_eq!(c.retrieve::<Person>(2).unwrap().email, "p0@example.org");
    assert_eq!(
        c.list::<Person>("Email = 'p0@example.org'", &[]).unwrap()[0].id,
        2
    );
}

#[test]
fn rollback_leaves_nothing_behind() {
    let (c, _) = filled(100);
    let before = snapshot(&c);
    let tx = c.transaction().unwrap();
    let mut p = people(1, 11).remove(0);
    p.email = "in-tx@example.org".into();
    let id = tx.add(&mut p).unwrap();
    assert_eq!(id, 101);
    p.age = Some(5);
    tx.update(&mut p).unwrap();
    tx.delete::<Person>(id).unwrap();
    let mut q = tx.retrieve::<Person>(7).unwrap();
    q.last_name = "Rolled".into();
    tx.update(&mut q).unwrap();
    tx.delete::<Person>(8).unwrap();
    tx.delete_where::<Person>("ID > ?", &[Value::Int(90)])
        .unwrap();
    let mut r = people(1, 12).remove(0);
    r.email = "p7@example.org".into(); // free again after the delete of ID 8
    tx.add_with_id(&mut r, 8).unwrap();
    assert_eq!(tx.count::<Person>("", &[]).unwrap(), 90);
    tx.rollback().unwrap();
    assert_eq!(snapshot(&c), before);
    // The indexes agree with the rows again.
    assert_eq!(
        c.list::<Person>("Email = ?", &["p7@example.org".into()])
            .unwrap()[0]
            .id,
        8
    );
    assert_eq!(
        c.list::<Person>("LastName = 'Rolled'", &[]).unwrap().len(),
        0
    );
    // The ID given in the transaction is given again: it never existed.
    let mut p = people(1, 13).remove(0);
    p.email = "after@example.org".into();
    assert_eq!(c.add(&mut p).unwrap(), 101);
}

#[test]
fn a_dropped_transaction_leaves_nothing() {
    let (c, e) = impatient(20);
    let before = snapshot(&c);
    let table = Person::table();
    let tx = e.clone().begin().unwrap();
    let mut p = people(1, 51).remove(0);
    p.email = "dropped@example.org".into();
    let id = tx.insert(table, None, &p).unwrap();
    assert_eq!(tx.count(table, &Filter::all()).unwrap(), 21);
    let mut q = tx_retrieve(&*tx, 3);
    q.last_name = "Dropped".into();
    assert!(tx.update(table, &q, None).unwrap());
    assert!(tx.delete(table, 4).unwrap());
    drop(tx);
    // Ended by the drop: the engine answers at once (its lock timeout is
    // short), without the writes.
    assert_eq!(snapshot(&c), before);
    assert!(c.get::<Person>(id).unwrap().is_none());
    // The same through the client's transaction.
    let tx = c.transaction().unwrap();
    tx.add(&mut p).unwrap();
    tx.delete::<Person>(5).unwrap();
    drop(tx);
    assert_eq!(snapshot(&c), before);
}

/// Reads a row through a transaction's own calls.
fn tx_retrieve(rows: &dyn RowOps, id: i64) -> Person {
    let mut found = None;
    rows.retrieve(Person::table(), id, &mut |row| {
        found = Some(Person::from_row(row)?);
        Ok(())
    })
    .unwrap();
    found.expect("the row exists")
}

#[test]
fn a_failed_transaction_takes_no_more_calls_and_cannot_commit() {
    let (c, _) = impatient(20);
    let before = snapshot(&c);
    let tx = c.transaction().unwrap();
    let mut p = people(1, 54).remove(0);
    p.email = "failed@example.org".into();
    tx.add(&mut p).unwrap();
    assert!(!tx.is_failed());
    tx.fail();
    assert!(tx.is_failed());
    let mut q = people(1, 55).remove(0);
    q.email = "after@example.org".into();
    for e in [
        tx.add(&mut q).unwrap_err(),
        tx.count::<Person>("", &[]).unwrap_err(),
    ] {
        assert!(matches!(e, Error::Transaction(_)), "{e:?}");
    }
    assert!(matches!(tx.commit(), Err(Error::Transaction(_))));
    // Rolled back, and the engine free again.
    assert_eq!(snapshot(&c), before);
    assert!(c.add(&mut q).is_ok());
}

#[test]
fn calls_on_the_engine_during_a_transaction_are_busy() {
    let (c, e) = impatient(10);
    assert_eq!(e.caps().name, "memory");
    assert_eq!(e.caps().placement, Placement::InProcess);
    let tx = c.transaction().unwrap();
    let mut p = people(1, 52).remove(0);
    p.email = "in-tx@example.org".into();
    tx.add(&mut p).unwrap();
    let start = Instant::now();
    let err = e.count(Person::table(), &Filter::all()).unwrap_err();
    let elapsed = start.elapsed();
    match err {
        Error::Busy { engine, waited } => {
            assert_eq!(engine, "memory");
            assert_eq!(waited, Duration::from_millis(100));
        }
        other => panic!("{other:?}"),
    }
    assert!(elapsed >= Duration::from_millis(100), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    // A write, and a second transaction, give up the same way, doing nothing.
    let mut q = people(1, 53).remove(0);
    q.email = "outside@example.org".into();
    assert_eq!(c.add(&mut q).unwrap_err().kind(), ErrorKind::Busy);
    assert_eq!(c.transaction().err().unwrap().kind(), ErrorKind::Busy);
    assert_eq!(tx.count::<Person>("", &[]).unwrap(), 11);
    tx.commit().unwrap();
    assert_eq!(c.count::<Person>("", &[]).unwrap(), 11);
    assert!(c
        .list::<Person>("Email = 'outside@example.org'", &[])
        .unwrap()
        .is_empty());
    c.add(&mut q).unwrap();
}

#[test]
fn a_transaction_can_end_on_another_thread() {
    let (c, e) = filled(10);
    let tx = e.clone().begin().unwrap();
    let mut p = people(1, 54).remove(0);
    p.email = "moved@example.org".into();
    let id = tx.insert(Person::table(), None, &p).unwrap();
    thread::spawn(move || tx.commit().unwrap()).join().unwrap();
    assert_eq!(c.retrieve::<Person>(id).unwrap().email, "moved@example.org");
}

#[test]
fn other_threads_wait_for_a_transaction() {
    let (c, e) = filled(10);
    let table = Person::table();
    let tx = e.clone().begin().unwrap();
    let mut p = people(1, 21).remove(0);
    p.email = "uncommitted@example.org".into();
    tx.insert(table, None, &p).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (e, done) = (e.clone(), done.clone());
        thread::spawn(move || {
            let n = e.count(table, &Filter::all()).unwrap();
            done.store(true, Ordering::SeqCst);
            n
        })
    };
    let writer = {
        let e = e.clone();
        thread::spawn(move || {
            let mut p = people(1, 22).remove(0);
            p.email = "other-thread@example.org".into();
            e.insert(table, None, &p).unwrap()
        })
    };
    thread::sleep(Duration::from_millis(100));
    assert!(
        !done.load(Ordering::SeqCst),
        "a reader ran inside another thread's transaction"
    );
    tx.rollback().unwrap();
    // The reader saw the state without the rolled-back row; the writer's row
    // came after the rollback and got the next free ID.
    let n = reader.join().unwrap();
    let id = writer.join().unwrap();
    assert!(n == 10 || n == 11, "{n}");
    assert_eq!(id, 11);
    assert_eq!(c.count::<Person>("", &[]).unwrap(), 11);
    assert!(c
        .list::<Person>("Email = 'uncommitted@example.org'", &[])
        .unwrap()
        .is_empty());
}

#[test]
fn batch_rollback_on_error() {
    let (c, _) = filled(20);
    let before = snapshot(&c);
    let mut b = Batch::new().rollback_on_error(true);
    for p in people(5, 31) {
        let mut p = p;
        p.email = format!("batch-{}", p.email);
        b.add(p);
    }
    let mut u = c.retrieve::<Person>(4).unwrap();
    u.age = Some(99);
    b.update(u);
    b.delete::<Person>(5);
    let mut dup = people(1, 32).remove(0);
    dup.email = "p1@example.org".into();
    b.add(dup);
    b.add(people(1, 33).remove(0));
    match c.send(&mut b) {
        Err(Error::Batch { index, source }) => {
            assert_eq!(index, 7);
            assert_eq!(source.kind(), ErrorKind::UniqueViolation);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(snapshot(&c), before);
    // Without rollback-on-error, the failure is reported and the rest applied.
    let mut b = Batch::new();
    let mut dup = people(1, 34).remove(0);
    dup.email = "p1@example.org".into();
    b.add(dup);
    let mut ok = people(1, 35).remove(0);
    ok.email = "fine@example.org".into();
    b.add(ok);
    b.delete::<Person>(999);
    let r = c.send(&mut b).unwrap();
    assert!(matches!(r[0], BatchResult::Failed(_)));
    assert_eq!(r[1].id(), Some(21));
    assert!(matches!(r[2], BatchResult::Missing));
}

#[test]
fn many_deletes_compact_and_indexes_stay_right() {
    let (c, _) = filled(5000);
    let n = c
        .delete_where::<Person>("ID > ? AND ID <> 4321", &[Value::Int(300)])
        .unwrap();
    assert_eq!(n, 4699);
    assert_eq!(c.count::<Person>("", &[]).unwrap(), 301);
    for id in [1, 150, 300, 4321] {
        let p = c.retrieve::<Person>(id).unwrap();
        let by_email = c
            .list::<Person>("Email = ?", &[p.email.clone().into()])
            .unwrap();
        assert_eq!(by_email, vec![p.clone()]);
        let by_name = c
            .list::<Person>("LastName = ?", &[p.last_name.clone().into()])
            .unwrap();
        assert!(by_name.contains(&p));
        assert!(by_name.iter().all(|q| q.last_name == p.last_name));
    }
    let mut p = people(1, 41).remove(0);
    p.email = "fresh@example.org".into();
    assert_eq!(c.add(&mut p).unwrap(), 5001);
}

#[test]
fn rows_stay_right_while_updates_fill_and_repack_the_arena() {
    let (c, _) = filled(400);
    let mut want = snapshot(&c);
    let photo = |round: usize, id: i64| -> Vec<u8> {
        (0..2000)
            .map(|j| (round * 31 + id as usize * 7 + j) as u8)
            .collect()
    };
    for round in 0..10 {
        let mut rows = want.clone();
        for p in &mut rows {
            p.photo = Some(photo(round, p.id));
            p.last_name = format!("Round{round}");
        }
        // A rolled-back round leaves the rows as they were, although its
        // updates made garbage that no repack may touch inside the transaction.
        if round % 3 == 1 {
            let tx = c.transaction().unwrap();
            for p in &mut rows {
                tx.update(p).unwrap();
            }
            tx.rollback().unwrap();
        } else {
            for p in &mut rows {
                c.update(p).unwrap();
            }
            want = rows;
        }
        assert_eq!(snapshot(&c), want, "after round {round}");
    }
    for p in want.iter().step_by(37) {
        let by_email = c
            .list::<Person>("Email = ?", &[p.email.clone().into()])
            .unwrap();
        assert_eq!(by_email, vec![p.clone()]);
        assert_eq!(c.retrieve::<Person>(p.id).unwrap(), *p);
    }
    let by_name = c
        .list::<Person>("LastName = ?", &["Round9".into()])
        .unwrap();
    assert_eq!(by_name.len(), want.len());
}

#[test]
fn indexed_lookups_equal_scans() {
    let (c, _) = filled(2000);
    // A low-cardinality indexed field (Team has 6 values): buckets grow into sets.
    for team in 0..6 {
        let via_index = c.list::<Person>("Team = ?", &[Value::Int(team)]).unwrap();
        let via_scan = c
            .list::<Person>(
                "Team >= ? AND Team <= ?",
                &[Value::Int(team), Value::Int(team)],
            )
            .unwrap();
        assert_eq!(via_index, via_scan);
    }
    assert!(c.delete_where::<Person>("Team = 2", &[]).unwrap() > 0);
    assert!(c.list::<Person>("Team = 2", &[]).unwrap().is_empty());
    let ids = c
        .list::<Person>("ID IN (5, 3, 5, 1999, 4000)", &[])
        .unwrap();
    assert_eq!(ids.iter().map(|p| p.id).collect::<Vec<_>>(), [3, 5, 1999]);
}

#[test]
fn select_value_and_unknown_tables() {
    let (c, e) = filled(30);
    let table = <Person as burrow_core::Record>::table();
    let sel = Select {
        order: vec![(Column::Id, true)],
        limit: Some(1),
        ..Select::all()
    };
    assert_eq!(
        e.select_value(table, Column::Id, &sel).unwrap(),
        Some(Value::Int(30))
    );
    assert_eq!(
        c.one_field_value::<Person>("Email", "ID = ?", &[Value::Int(4)])
            .unwrap(),
        Some(Value::Text("p3@example.org".into()))
    );
    assert_eq!(
        c.one_field_value::<Person>("Email", "ID = 999", &[])
            .unwrap(),
        None
    );
    let other = MemoryEngine::new();
    let err = other.count(table, &Filter::all()).unwrap_err();
    assert!(matches!(err, Error::UnknownTable(_)), "{err}");
}

#[test]
fn many_threads_read_and_write() {
    let (c, _) = filled(200);
    let c = Arc::new(c);
    let mut handles = Vec::new();
    for t in 0..4u64 {
        let c = c.clone();
        handles.push(thread::spawn(move || {
            let mut rng = Rng::new(100 + t);
            for i in 0..300 {
                match rng.below(4) {
                    0 => {
                        let mut p = person(i, &mut rng);
                        p.email = format!("t{t}-{i}@example.org");
                        c.add(&mut p).unwrap();
                    }
                    1 => {
                        let _ = c.get::<Person>(1 + rng.below(300) as i64).unwrap();
                    }
                    2 => {
                        let tx = c.transaction().unwrap();
                        let mut p = person(i, &mut rng);
                        p.email = format!("tx{t}-{i}@example.org");
                        tx.add(&mut p).unwrap();
                        if rng.chance(50) {
                            tx.commit().unwrap();
                        } else {
                            tx.rollback().unwrap();
                        }
                    }
                    _ => {
                        let _ = c.count::<Person>("Age > ?", &[Value::Int(30)]).unwrap();
                    }
                }
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    // Every row is reachable through its unique index.
    for p in snapshot(&c) {
        let hit = c
            .list::<Person>("Email = ?", &[p.email.clone().into()])
            .unwrap();
        assert_eq!(hit, vec![p]);
    }
}

#[test]
fn id_bounds_select_the_rows_past_them_either_way() {
    let (c, e) = filled(50);
    for id in [10, 20, 30] {
        c.delete::<Person>(id).unwrap();
    }
    let t = Person::table();
    let ids = |op: &str, bound: i64, desc: bool, rest: &str| -> Vec<i64> {
        let text = format!("ID {op} ?{rest}");
        let select = Select {
            filter: Filter::parse(t, &text, &[Value::Int(bound)]).unwrap(),
            order: vec![(Column::Id, desc)],
            limit: None,
            offset: 0,
        };
        let mut out = Vec::new();
        e.select(t, &select, &mut |row| {
            out.push(row.id()?);
            Ok(())
        })
        .unwrap();
        out
    };
    let live = |r: std::ops::RangeInclusive<i64>| -> Vec<i64> {
        r.filter(|id| ![10, 20, 30].contains(id)).collect()
    };
    // From a row that exists, and from one deleted (a full scan then).
    assert_eq!(ids(">", 15, false, ""), live(16..=50));
    assert_eq!(ids(">=", 15, false, ""), live(15..=50));
    assert_eq!(ids(">", 20, false, ""), live(21..=50));
    assert_eq!(
        ids("<", 15, true, ""),
        live(1..=14).into_iter().rev().collect::<Vec<_>>()
    );
    assert_eq!(
        ids("<=", 15, true, ""),
        live(1..=15).into_iter().rev().collect::<Vec<_>>()
    );
    // The bound among other terms, and a bound the other way than the order.
    assert_eq!(
        ids(">", 40, false, " AND ID <> 45"),
        vec![41, 42, 43, 44, 46, 47, 48, 49, 50]
    );
    assert_eq!(
        ids(">", 45, true, ""),
        live(46..=50).into_iter().rev().collect::<Vec<_>>()
    );
}

#[test]
fn one_table_sql_reads_the_engine_holding_the_table() -> burrow_core::Result<()> {
    // The memory engine as the default engine, Person placed on another one:
    // its SQL reaches the table where it lives.
    let main = Arc::new(MemoryEngine::new());
    let other = Arc::new(MemoryEngine::new());
    let client = Database::builder(model())
        .default_engine(main)
        .place::<Person>(other.clone())
        .open()?;
    let mut rng = Rng::new(3);
    for i in 0..20 {
        client.add(&mut person(i, &mut rng))?;
    }
    let got: Vec<Person> = client.sql_list(
        "SELECT * FROM Person WHERE ID > ? ORDER BY ID DESC LIMIT 3",
        &[Value::Int(5)],
    )?;
    assert_eq!(
        got.iter().map(|p| p.id).collect::<Vec<_>>(),
        vec![20, 19, 18]
    );
    let e = client
        .sql_list::<Person>("SELECT count(*) FROM Person", &[])
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    Ok(())
}
