//! Many threads on one shared client.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use burrow::{Batch, ErrorKind, Model, Orm, Query, Record};

use crate::common::*;

conformance!(
    four_threads_add_two_thousand_rows,
    racing_adds_of_one_unique_name_add_it_once,
    readers_never_see_partial_rows_or_batches,
    transactions_do_not_lose_updates,
);

/// A row whose fields must always agree: `b == -a`, `text` spells `a`.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Pair")]
pub struct Pair {
    pub id: i64,
    pub a: i64,
    pub b: i64,
    pub text: String,
}

impl Pair {
    fn at(id: i64, generation: i64) -> Pair {
        Pair {
            id,
            a: generation,
            b: -generation,
            // Lengths vary between generations, to catch torn or stale text.
            text: format!("{generation}:").repeat(1 + (generation % 7) as usize),
        }
    }

    fn consistent(&self) -> bool {
        *self == Pair::at(self.id, self.a)
    }
}

fn pair_model() -> Model {
    model().with::<Pair>()
}

fn four_threads_add_two_thousand_rows(f: &dyn Factory) -> TestResult {
    const THREADS: usize = 4;
    let per = if f.slow_writes() { 150 } else { 500 };
    let store = f.fresh()?;
    let c = store.open()?;
    let ids: Vec<Vec<(i64, String)>> = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let c = &c;
                s.spawn(move || -> burrow::Result<Vec<(i64, String)>> {
                    let mut out = Vec::with_capacity(per);
                    for i in 0..per {
                        let name = format!("t{t}-{i}");
                        let mut rec = Sample::new(&name, i as i32, "0.01");
                        out.push((c.add(&mut rec)?, name));
                    }
                    Ok(out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("adder thread panicked"))
            .collect::<burrow::Result<_>>()
    })?;
    let all_ids: HashSet<i64> = ids.iter().flatten().map(|(id, _)| *id).collect();
    assert_eq!(all_ids.len(), THREADS * per, "distinct IDs");
    assert_eq!(c.count::<Sample>("", &[])?, (THREADS * per) as u64);
    let stored = all::<Sample>(&c)?;
    let by_id: std::collections::HashMap<i64, &Sample> = stored.iter().map(|s| (s.id, s)).collect();
    for (id, name) in ids.iter().flatten() {
        let s = by_id.get(id).ok_or_else(|| format!("ID {id} missing"))?;
        assert_eq!(&s.name, name, "ID {id}");
    }
    let total = stored
        .iter()
        .fold(burrow::Currency::ZERO, |a, s| a + s.amount);
    assert_eq!(total, cur(&format!("{}", (THREADS * per) as f64 / 100.0)));
    Ok(())
}

fn racing_adds_of_one_unique_name_add_it_once(f: &dyn Factory) -> TestResult {
    const THREADS: usize = 4;
    let names = if f.slow_writes() { 30 } else { 100 };
    let store = f.fresh()?;
    let c = store.open()?;
    let wins: Vec<usize> = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let c = &c;
                s.spawn(move || -> burrow::Result<usize> {
                    let mut won = 0;
                    for i in 0..names {
                        let mut rec = Sample::new(&format!("race{i}"), t as i32, "1");
                        match c.add(&mut rec) {
                            Ok(_) => won += 1,
                            Err(e) if e.kind() == ErrorKind::UniqueViolation => {}
                            Err(e) => return Err(e),
                        }
                    }
                    Ok(won)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("racing thread panicked"))
            .collect::<burrow::Result<_>>()
    })?;
    assert_eq!(
        wins.iter().sum::<usize>(),
        names,
        "each name added exactly once"
    );
    assert_eq!(c.count::<Sample>("", &[])?, names as u64);
    Ok(())
}

fn readers_never_see_partial_rows_or_batches(f: &dyn Factory) -> TestResult {
    const ROWS: i64 = 6;
    const BATCH_ADDS: usize = 20;
    let generations: i64 = if f.slow_writes() { 40 } else { 150 };
    let store = f.fresh()?;
    let c = store.client(pair_model())?;
    let mut ids = Vec::new();
    for _ in 0..ROWS {
        let mut p = Pair::at(0, 0);
        ids.push(c.add(&mut p)?);
    }
    let done = AtomicBool::new(false);
    let reads = thread::scope(|s| -> Result<usize, String> {
        let (c, ids, done) = (&c, &ids, &done);
        // The writer: every generation rewrites all pairs at once, by a batch
        // (one automatic transaction) or an explicit transaction, and adds a
        // batch of samples that must appear all together.
        let writer = s.spawn(move || -> burrow::Result<()> {
            let r = (|| {
                for g in 1..=generations {
                    if g % 2 == 0 {
                        let mut batch = Batch::new();
                        for &id in ids {
                            batch.update(Pair::at(id, g));
                        }
                        c.send(&mut batch)?;
                    } else {
                        let tx = c.transaction()?;
                        for &id in ids {
                            tx.update(&mut Pair::at(id, g))?;
                        }
                        tx.commit()?;
                    }
                    if g % 10 == 0 {
                        let mut batch = Batch::new();
                        for i in 0..BATCH_ADDS {
                            batch.add(Sample::new(&format!("g{g}-{i}"), i as i32, "1"));
                        }
                        c.send(&mut batch)?;
                    }
                }
                Ok(())
            })();
            done.store(true, Ordering::Release);
            r
        });
        let readers: Vec<_> = (0..3)
            .map(|kind| {
                s.spawn(move || -> Result<usize, String> {
                    let mut n = 0usize;
                    // At least one read after the writer is done.
                    let mut last_round = false;
                    loop {
                        last_round |= done.load(Ordering::Acquire);
                        match kind {
                            0 => {
                                let pairs = c
                                    .select::<Pair>(&Query::all().order_by("ID"))
                                    .map_err(|e| e.to_string())?;
                                if pairs.len() != ROWS as usize {
                                    return Err(format!("{} pairs", pairs.len()));
                                }
                                let g = pairs[0].a;
                                for p in &pairs {
                                    if !p.consistent() || p.a != g {
                                        return Err(format!("a torn state: {pairs:?}"));
                                    }
                                }
                            }
                            1 => {
                                for &id in ids {
                                    let p: Pair = c.retrieve(id).map_err(|e| e.to_string())?;
                                    if !p.consistent() {
                                        return Err(format!("a torn row: {p:?}"));
                                    }
                                }
                                let mut bad = None;
                                c.for_each::<Pair>(&Query::all(), &mut |p| {
                                    if !p.consistent() {
                                        bad = Some(p.clone());
                                    }
                                    Ok(())
                                })
                                .map_err(|e| e.to_string())?;
                                if let Some(p) = bad {
                                    return Err(format!("a torn streamed row: {p:?}"));
                                }
                            }
                            _ => {
                                let n = c.count::<Sample>("", &[]).map_err(|e| e.to_string())?;
                                if n % BATCH_ADDS as u64 != 0 {
                                    return Err(format!("{n} samples: part of a batch"));
                                }
                            }
                        }
                        n += 1;
                        if last_round {
                            return Ok(n);
                        }
                    }
                })
            })
            .collect();
        writer
            .join()
            .map_err(|_| "writer panicked".to_owned())?
            .map_err(|e| format!("writer: {e}"))?;
        let mut reads = 0;
        for r in readers {
            reads += r.join().map_err(|_| "reader panicked".to_owned())??;
        }
        Ok(reads)
    })?;
    assert!(reads >= 3);
    let pairs = all::<Pair>(&c)?;
    assert!(pairs.iter().all(|p| p.consistent() && p.a == generations));
    assert_eq!(
        c.count::<Sample>("", &[])?,
        (generations / 10) as u64 * BATCH_ADDS as u64
    );
    Ok(())
}

fn transactions_do_not_lose_updates(f: &dyn Factory) -> TestResult {
    if !f.serializes_transactions() {
        return Ok(());
    }
    const THREADS: i32 = 3;
    let rounds = if f.slow_writes() { 15 } else { 60 };
    let store = f.fresh()?;
    let c = store.open()?;
    let mut counter = Sample::new("counter", 0, "0");
    let id = c.add(&mut counter)?;
    thread::scope(|s| -> burrow::Result<()> {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let c = &c;
                s.spawn(move || -> burrow::Result<()> {
                    for _ in 0..rounds {
                        c.in_transaction(|t| {
                            let mut rec: Sample = t.retrieve(id)?;
                            rec.age += 1;
                            rec.amount = rec.amount + cur("0.5");
                            t.update_fields(&mut rec, &["Age", "Amount"])
                        })?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().expect("incrementing thread panicked")?;
        }
        Ok(())
    })?;
    let back: Sample = c.retrieve(id)?;
    assert_eq!(back.age, THREADS * rounds, "no increment lost");
    assert_eq!(
        back.amount,
        cur(&format!("{}", f64::from(THREADS * rounds) / 2.0))
    );
    Ok(())
}

/// The hang of a batch over SQLite and the memory engine against one over
/// the memory engine and SQLite, each holding one engine's transaction and
/// waiting for the other's: they now take the engines in one order.
#[test]
fn opposite_batches_over_sqlite_and_memory() -> TestResult {
    use std::sync::Arc;

    use burrow::memory::{MemoryEngine, MemoryOptions};
    use burrow::sqlite::SqliteEngine;
    use burrow::Database;

    let sqlite = Arc::new(SqliteEngine::memory()?);
    let memory = Arc::new(MemoryEngine::open(MemoryOptions::memory())?);
    let c = Database::builder(model())
        .default_engine(sqlite)
        .place::<Tag>(memory)
        .open()?;
    crate::transactions::opposite_batches(&c, 200)
}
