//! The ledger both engines' backup tests write: items and a tally per
//! writer, consistent in every committed state and in no half-applied one.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use burrow_core::{Batch, Database, Model, Orm};
use burrow_derive::Record;

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

#[derive(Record, Debug, Clone, Default, PartialEq)]
#[burrow(crate = "burrow_core")]
pub struct Item {
    pub id: i64,
    pub writer: i64,
    pub amount: i64,
    pub note: String,
}

/// Per writer: how many items it committed and the sum of their amounts.
#[derive(Record, Debug, Clone, Default, PartialEq)]
#[burrow(crate = "burrow_core")]
pub struct Tally {
    pub id: i64,
    pub rows: i64,
    pub total: i64,
}

pub fn model() -> Model {
    Model::new().with::<Item>().with::<Tally>()
}

pub fn item(writer: i64, amount: i64) -> Item {
    Item {
        id: 0,
        writer,
        amount,
        note: format!("item of writer {writer}, amount {amount}, padded to look like a row"),
    }
}

/// Fills an empty ledger with `rows` items, split between the two writers,
/// and their tallies, in one transaction.
pub fn fill(db: &Database, rows: i64) -> TestResult {
    let mut batch = Batch::new();
    let mut tallies = [1, 2].map(|id| Tally {
        id,
        ..Tally::default()
    });
    for i in 0..rows {
        let w = 1 + i % 2;
        batch.add(item(w, i));
        tallies[(w - 1) as usize].rows += 1;
        tallies[(w - 1) as usize].total += i;
    }
    for t in tallies {
        batch.add_with_id(t.clone(), t.id);
    }
    let tx = db.transaction()?;
    tx.send(&mut batch)?;
    tx.commit()?;
    Ok(())
}

/// The two writers of [`write_until`], running on their own threads.
pub struct Writers {
    stop: Arc<AtomicBool>,
    commits: Arc<AtomicU64>,
    threads: Vec<JoinHandle<Result<(), String>>>,
}

impl Writers {
    /// Starts both writers on `db` and returns once they committed 20
    /// times (a writer that stops before is a failure).
    pub fn start(db: &Arc<Database>) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let commits = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (1..=2)
            .map(|w| {
                let (db, stop, commits) = (db.clone(), stop.clone(), commits.clone());
                std::thread::spawn(move || {
                    write_until(&db, w, &stop, &commits).map_err(|e| e.to_string())
                })
            })
            .collect();
        while commits.load(Ordering::Relaxed) < 20 {
            if let Some(w) = threads.iter().position(|w| w.is_finished()) {
                let failed = threads.into_iter().nth(w).map(|w| w.join());
                panic!("a writer stopped early: {failed:?}");
            }
            std::thread::yield_now();
        }
        Writers {
            stop,
            commits,
            threads,
        }
    }

    /// Commits so far.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Waits (at most 30 s) until the writers commit once more.
    pub fn next_commit(&self) {
        let seen = self.commits();
        let t = std::time::Instant::now();
        while self.commits() == seen && t.elapsed().as_secs() < 30 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Stops both writers, failing if either failed.
    pub fn stop(self) -> TestResult {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.threads {
            w.join().expect("writer panicked")?;
        }
        Ok(())
    }
}

/// Checks that every writer's tally matches its items: true of every
/// committed state, false of any half-applied transaction or batch.
pub fn check_consistent(db: &Database) -> Result<Vec<Tally>, Box<dyn std::error::Error>> {
    let items = db.list::<Item>("", &[])?;
    let tallies = db.list::<Tally>("", &[])?;
    assert_eq!(tallies.len(), 2, "both tallies are there");
    for t in &tallies {
        let mine = items.iter().filter(|i| i.writer == t.id);
        let (n, sum) = mine.fold((0, 0), |(n, s), i| (n + 1, s + i.amount));
        assert_eq!((n, sum), (t.rows, t.total), "writer {} half applied", t.id);
    }
    Ok(tallies)
}

/// Writer 1 commits transactions: five adds and its tally, or an amount
/// moved between two of its items. Writer 2 sends batches with
/// rollback-on-error: five adds and its tally. Returns how many commits.
pub fn write_until(db: &Database, w: i64, stop: &AtomicBool, commits: &AtomicU64) -> TestResult {
    let mut tally: Tally = db.retrieve(w)?;
    let mut mine: Vec<i64> = Vec::new();
    let mut round = 0i64;
    while !stop.load(Ordering::Relaxed) {
        round += 1;
        if w == 1 && round % 3 == 0 && mine.len() >= 2 {
            let tx = db.transaction()?;
            let (a, b) = (mine[round as usize % mine.len()], mine[0]);
            let mut from: Item = tx.retrieve(a)?;
            let mut to: Item = tx.retrieve(b)?;
            from.amount -= 7;
            to.amount += 7;
            tx.update(&mut from)?;
            tx.update(&mut to)?;
            tx.commit()?;
        } else if w == 1 {
            let tx = db.transaction()?;
            for k in 0..5 {
                let mut it = item(w, round * 10 + k);
                mine.push(tx.add(&mut it)?);
                tally.rows += 1;
                tally.total += it.amount;
            }
            tx.update(&mut tally)?;
            tx.commit()?;
        } else {
            let mut batch = Batch::new().rollback_on_error(true);
            for k in 0..5 {
                batch.add(item(w, round * 10 + k));
                tally.rows += 1;
                tally.total += round * 10 + k;
            }
            batch.update(tally.clone());
            db.send(&mut batch)?;
        }
        commits.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}
