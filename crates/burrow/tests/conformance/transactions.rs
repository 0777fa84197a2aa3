//! Transactions: the guard, the closure form, nesting, and other threads.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use burrow::{Database, Error, ErrorKind, Orm};

use crate::common::*;

conformance!(
    guard_commit,
    guard_drop_rolls_back,
    guard_rollback,
    updates_and_deletes_roll_back,
    closure_ok_commits,
    closure_err_rolls_back,
    closure_panic_rolls_back,
    second_transaction_waits_or_stands_apart_and_the_first_commits,
    engine_transaction_handles,
    transactions_follow_each_other,
    transaction_spans_two_engines,
    other_threads_write_waits_and_survives_the_rollback,
    other_threads_read_never_sees_uncommitted_rows,
    other_thread_may_transact_after_commit,
    opposite_batches_over_two_engines,
);

/// How long a thread that should go on may take before the test calls it stuck.
const PATIENCE: Duration = Duration::from_secs(20);
/// How long a thread that should wait is given to (wrongly) get through.
const GRACE: Duration = Duration::from_millis(150);

fn guard_commit(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let tx = c.transaction()?;
    let mut a = Sample::new("a", 1, "1");
    tx.add(&mut a)?;
    let mut t = Tag::new("t", a.id);
    tx.add(&mut t)?;
    assert_eq!(tx.count::<Sample>("", &[])?, 1, "own writes visible inside");
    tx.commit()?;
    same(&c.retrieve::<Sample>(a.id)?, &a, "committed")?;
    same(&c.retrieve::<Tag>(t.id)?, &t, "committed tag")?;
    // Visible from another thread after the commit.
    let n = thread::scope(|s| s.spawn(|| c.count::<Sample>("", &[])).join())
        .map_err(|_| "reader thread panicked")??;
    assert_eq!(n, 1);
    Ok(())
}

fn guard_drop_rolls_back(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let seeded = seed(&c, "g", 2)?;
    {
        let tx = c.transaction()?;
        let mut a = Sample::new("dropped", 1, "1");
        tx.add(&mut a)?;
        let mut t = Tag::new("dropped", seeded[0].id);
        tx.add(&mut t)?;
        assert_eq!(tx.count::<Sample>("", &[])?, 3);
    }
    same(&all::<Sample>(&c)?, &seeded, "after drop")?;
    assert_eq!(c.count::<Tag>("", &[])?, 0);
    // The rolled-back unique name is free.
    let mut again = Sample::new("dropped", 1, "1");
    c.add(&mut again)?;
    Ok(())
}

fn guard_rollback(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let seeded = seed(&c, "gr", 2)?;
    let tx = c.transaction()?;
    let mut a = Sample::new("rolled", 1, "1");
    tx.add(&mut a)?;
    tx.rollback()?;
    same(&all::<Sample>(&c)?, &seeded, "after rollback")?;
    Ok(())
}

fn updates_and_deletes_roll_back(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let seeded = seed(&c, "ud", 5)?;
    let tx = c.transaction()?;
    let mut s = seeded[0].clone();
    s.name = "renamed".into();
    s.age = 99;
    tx.update(&mut s)?;
    tx.update_fields(&mut seeded[1].clone(), &["Amount"])?;
    tx.delete::<Sample>(seeded[2].id)?;
    assert_eq!(
        tx.delete_where::<Sample>("Age >= ?", &burrow::params![3])?,
        3
    );
    assert_eq!(tx.count::<Sample>("", &[])?, 1);
    tx.rollback()?;
    same(&all::<Sample>(&c)?, &seeded, "after rollback")?;
    Ok(())
}

fn closure_ok_commits(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let (id, n) = c.in_transaction(|t| {
        let mut a = Sample::new("closure", 1, "1");
        let id = t.add(&mut a)?;
        let mut tag = Tag::new("closure", id);
        t.add(&mut tag)?;
        Ok((id, t.count::<Sample>("", &[])?))
    })?;
    assert_eq!(n, 1);
    assert_eq!(c.retrieve::<Sample>(id)?.name, "closure");
    assert_eq!(c.count::<Tag>("", &[])?, 1);
    Ok(())
}

fn closure_err_rolls_back(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let seeded = seed(&c, "ce", 2)?;
    let r: burrow::Result<()> = c.in_transaction(|t| {
        let mut a = Sample::new("in-closure", 1, "1");
        t.add(&mut a)?;
        Err(Error::BadInput("the caller changed its mind".into()))
    });
    let err = expect_kind!(r, BadInput);
    assert!(err.to_string().contains("changed its mind"), "{err}");
    same(&all::<Sample>(&c)?, &seeded, "after Err")?;
    // An error from the ORM itself, after a good write.
    let r = c.in_transaction(|t| {
        let mut a = Sample::new("good", 1, "1");
        t.add(&mut a)?;
        let mut dup = Sample::new("ce0", 1, "1");
        t.add(&mut dup)
    });
    expect_kind!(r, UniqueViolation);
    same(&all::<Sample>(&c)?, &seeded, "after a unique violation")?;
    Ok(())
}

fn closure_panic_rolls_back(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let seeded = seed(&c, "cp", 2)?;
    let r = catch_unwind(AssertUnwindSafe(|| {
        let _ = c.in_transaction(|t| -> burrow::Result<()> {
            let mut a = Sample::new("before-panic", 1, "1");
            t.add(&mut a)?;
            panic!("a panic inside a transaction (expected by the test)")
        });
    }));
    assert!(r.is_err(), "the panic went through");
    same(&all::<Sample>(&c)?, &seeded, "after a panic")?;
    // Usable afterwards, from this thread and another.
    c.in_transaction(|t| {
        let mut a = Sample::new("after-panic", 1, "1");
        t.add(&mut a)
    })?;
    let n = thread::scope(|s| s.spawn(|| c.count::<Sample>("", &[])).join())
        .map_err(|_| "reader thread panicked")??;
    assert_eq!(n, 3);
    Ok(())
}

fn second_transaction_waits_or_stands_apart_and_the_first_commits(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let tx = c.transaction()?;
    let mut a = Sample::new("outer-a", 1, "1");
    tx.add(&mut a)?;
    // A transaction has no `transaction` method: nesting does not compile.
    // A second transaction on the client, from the same thread, either
    // waits for the first and gives up with a clear error (engines that
    // serialise writers), or is a transaction of its own.
    match c.transaction() {
        Ok(second) => {
            assert!(!f.serializes_transactions(), "a second transaction got in");
            assert_eq!(second.count::<Sample>("", &[])?, 0, "saw uncommitted rows");
            second.rollback()?;
        }
        Err(e) => {
            assert!(f.serializes_transactions(), "{e}");
            assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
            assert!(e.to_string().contains("busy"), "{e}");
        }
    }
    // The first transaction still works and commits both writes.
    let mut b = Sample::new("outer-b", 2, "2");
    tx.add(&mut b)?;
    assert_eq!(tx.count::<Sample>("", &[])?, 2);
    tx.commit()?;
    assert_eq!(c.count::<Sample>("", &[])?, 2);
    same(&c.retrieve::<Sample>(a.id)?, &a, "outer write a")?;
    same(&c.retrieve::<Sample>(b.id)?, &b, "outer write b")?;
    Ok(())
}

fn engine_transaction_handles(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    seed(&c, "eh", 1)?;
    let table = <Sample as burrow::Record>::table();
    let row = Sample::new("through-the-handle", 1, "1");
    // Dropped without a commit: nothing is left, and the engine is free.
    {
        let tx = store.engine().begin()?;
        tx.insert(table, None, &row)?;
        assert_eq!(tx.count(table, &burrow::driver::Filter::all())?, 2);
    }
    assert_eq!(c.count::<Sample>("", &[])?, 1);
    // Rolled back explicitly: the same.
    let tx = store.engine().begin()?;
    tx.insert(table, None, &row)?;
    tx.rollback()?;
    assert_eq!(c.count::<Sample>("", &[])?, 1);
    // Committed: kept. The handle may move to another thread.
    let tx = store.engine().begin()?;
    let id = thread::scope(|s| {
        s.spawn(move || -> burrow::Result<i64> {
            let id = tx.insert(table, None, &row)?;
            tx.commit()?;
            Ok(id)
        })
        .join()
    })
    .map_err(|_| "the thread holding the transaction panicked")??;
    assert_eq!(c.retrieve::<Sample>(id)?.name, "through-the-handle");
    assert_eq!(c.count::<Sample>("", &[])?, 2);
    Ok(())
}

fn transactions_follow_each_other(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    for i in 0..5 {
        let tx = c.transaction()?;
        let mut s = Sample::new(&format!("seq{i}"), i, "1");
        tx.add(&mut s)?;
        if i % 2 == 0 {
            tx.commit()?;
        } else {
            tx.rollback()?;
        }
    }
    assert_eq!(c.count::<Sample>("", &[])?, 3);
    Ok(())
}

/// Samples in one fresh store of `f`, tags in another: both stores, and a
/// client over them (last, so that it is dropped first).
fn two_engines(f: &dyn Factory) -> Result<(Store, Store, Database), Box<dyn std::error::Error>> {
    let a = f.fresh()?;
    let b = f.fresh()?;
    let c = Database::builder(model())
        .default_engine(a.engine())
        .place::<Tag>(b.engine())
        .open()?;
    Ok((a, b, c))
}

fn transaction_spans_two_engines(f: &dyn Factory) -> TestResult {
    let (_a, b, c) = two_engines(f)?;
    {
        let tx = c.transaction()?;
        let mut s = Sample::new("two", 1, "1");
        tx.add(&mut s)?;
        let mut t = Tag::new("two", s.id);
        tx.add(&mut t)?;
    }
    assert_eq!(c.count::<Sample>("", &[])?, 0);
    assert_eq!(c.count::<Tag>("", &[])?, 0);
    let tx = c.transaction()?;
    let mut s = Sample::new("two", 1, "1");
    tx.add(&mut s)?;
    let mut t = Tag::new("two", s.id);
    tx.add(&mut t)?;
    tx.commit()?;
    assert_eq!(c.count::<Sample>("", &[])?, 1);
    assert_eq!(c.count::<Tag>("", &[])?, 1);
    if let Some(n) = b.raw_count("Tag") {
        assert_eq!(n?, 1);
    }
    Ok(())
}

fn other_threads_write_waits_and_survives_the_rollback(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    seed(&c, "base", 2)?;
    let (started_tx, started_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    thread::scope(|s| -> TestResult {
        let tx = c.transaction()?;
        let mut mine = Sample::new("mine", 1, "1");
        tx.add(&mut mine)?;
        let client = &c;
        let writer = s.spawn(move || -> burrow::Result<i64> {
            let _ = started_tx.send(());
            let mut theirs = Sample::new("theirs", 2, "2");
            let id = client.add(&mut theirs)?;
            let _ = done_tx.send(id);
            Ok(id)
        });
        started_rx.recv_timeout(PATIENCE)?;
        if f.serializes_transactions() {
            match done_rx.recv_timeout(GRACE) {
                Err(RecvTimeoutError::Timeout) => {}
                other => {
                    return Err(format!(
                        "another thread wrote while a transaction was open: {other:?}"
                    )
                    .into())
                }
            }
        }
        // Inside, only the own write shows (unless the engine let the other in).
        tx.rollback()?;
        let id = done_rx.recv_timeout(PATIENCE)?;
        let joined = writer.join().map_err(|_| "writer panicked")??;
        assert_eq!(id, joined);
        let theirs: Sample = c.retrieve(id)?;
        assert_eq!(theirs.name, "theirs", "the other thread's write survives");
        assert!(c
            .get_where::<Sample>("Name = ?", &burrow::params!["mine"])?
            .is_none());
        assert_eq!(c.count::<Sample>("", &[])?, 3);
        Ok(())
    })
}

fn other_threads_read_never_sees_uncommitted_rows(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    seed(&c, "base", 2)?;
    let (done_tx, done_rx) = mpsc::channel();
    thread::scope(|s| -> TestResult {
        let tx = c.transaction()?;
        let mut mine = Sample::new("uncommitted", 1, "1");
        tx.add(&mut mine)?;
        let client = &c;
        let reader = s.spawn(move || -> burrow::Result<u64> {
            let n = client.count::<Sample>("", &[])?;
            let _ = done_tx.send(n);
            Ok(n)
        });
        // Either the reader waits for the end, or it reads what was committed.
        if let Ok(n) = done_rx.recv_timeout(GRACE) {
            assert_eq!(n, 2, "a reader saw an uncommitted row");
        }
        tx.rollback()?;
        let n = reader.join().map_err(|_| "reader panicked")??;
        assert_eq!(n, 2, "a reader saw a row that was rolled back");
        Ok(())
    })
}

fn other_thread_may_transact_after_commit(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let c = store.open()?;
    let (go_tx, go_rx) = mpsc::channel::<()>();
    thread::scope(|s| -> TestResult {
        let tx = c.transaction()?;
        let mut a = Sample::new("first-thread", 1, "1");
        tx.add(&mut a)?;
        let client = &c;
        let other = s.spawn(move || -> burrow::Result<u64> {
            go_rx.recv().ok();
            // Begins while the first thread's transaction may still be open:
            // it waits for it (or is kept apart from it), then runs its own.
            let tx = client.transaction()?;
            let mut b = Sample::new("second-thread", 2, "2");
            tx.add(&mut b)?;
            let n = tx.count::<Sample>("", &[])?;
            tx.commit()?;
            Ok(n)
        });
        go_tx.send(())?;
        tx.commit()?;
        let n = other.join().map_err(|_| "second thread panicked")??;
        if f.serializes_transactions() {
            assert_eq!(n, 2, "the second transaction sees the first's commit");
        }
        assert_eq!(c.count::<Sample>("", &[])?, 2);
        Ok(())
    })
}

/// Two threads send batches that write two engines' tables in opposite
/// orders. Each batch runs in a transaction on both engines; when each
/// began its engines in the order of its items, the two threads each held
/// one engine and waited forever for the other.
fn opposite_batches_over_two_engines(f: &dyn Factory) -> TestResult {
    let (_a, _b, c) = two_engines(f)?;
    opposite_batches(&c, if f.slow_writes() { 10 } else { 100 })
}

/// Runs `rounds` batches `[Sample, Tag]` on one thread and `[Tag, Sample]` on
/// another, and checks every row arrived.
pub fn opposite_batches(c: &Database, rounds: usize) -> TestResult {
    thread::scope(|s| -> TestResult {
        let workers: Vec<_> = [false, true]
            .into_iter()
            .map(|tag_first| {
                s.spawn(move || -> burrow::Result<()> {
                    for i in 0..rounds {
                        let name = format!("{tag_first}-{i}");
                        let mut batch = burrow::Batch::new();
                        if tag_first {
                            batch.add(Tag::new(&name, 1));
                            batch.add(Sample::new(&name, 1, "1"));
                        } else {
                            batch.add(Sample::new(&name, 1, "1"));
                            batch.add(Tag::new(&name, 1));
                        }
                        c.send(&mut batch)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join().map_err(|_| "a batch thread panicked")??;
        }
        Ok(())
    })?;
    assert_eq!(c.count::<Sample>("", &[])?, 2 * rounds as u64);
    assert_eq!(c.count::<Tag>("", &[])?, 2 * rounds as u64);
    Ok(())
}
