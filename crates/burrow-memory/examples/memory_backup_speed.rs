//! Backup of a live memory engine holding 1,000,000 sample rows, plain and
//! gzip, with and without a concurrent writer: time, size, rows/s, the
//! writer's throughput during the backups against without, and its longest
//! wait (the time writers are stopped while the rows are encoded).
//!
//! `cargo run --release -p burrow-memory --example memory_backup_speed [rows]`

#![allow(missing_docs)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burrow_core::chrono::{NaiveDate, Utc};
use burrow_core::{Batch, Currency, Database, Model, Orm};
use burrow_derive::Record;
use burrow_memory::MemoryEngine;

#[derive(Record, Debug, Clone)]
#[burrow(crate = "burrow_core")]
struct Sample {
    id: i64,
    first_name: String,
    last_name: String,
    amount: Currency,
    birth_date: NaiveDate,
    last_change: burrow_core::chrono::DateTime<Utc>,
}

fn sample(i: i64) -> Sample {
    Sample {
        id: 0,
        first_name: format!("Salvador{i}"),
        last_name: format!("Dali{i}"),
        amount: Currency::from_scaled(i * 100 + 1234),
        birth_date: NaiveDate::from_ymd_opt(1904, 5, 11).expect("a date"),
        last_change: Utc::now(),
    }
}

/// Runs a writer (one update per call) while `during` runs; returns its result,
/// the writer's adds per second and its longest update.
fn with_writer<R>(db: &Arc<Database>, during: impl FnOnce() -> R) -> (R, f64, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let adds = Arc::new(AtomicU64::new(0));
    let worst = Arc::new(Mutex::new(Duration::ZERO));
    let writer = {
        let (db, stop, adds, worst) = (db.clone(), stop.clone(), adds.clone(), worst.clone());
        std::thread::spawn(move || {
            let rows = db.count::<Sample>("", &[]).expect("a count") as i64;
            let mut i = 0;
            let mut longest = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                // Updates, so that every backup holds as many rows.
                let mut s = sample(i);
                s.id = 1 + i % rows;
                let t = Instant::now();
                db.update(&mut s).expect("the writer's update");
                longest = longest.max(t.elapsed());
                adds.fetch_add(1, Ordering::Relaxed);
            }
            *worst.lock().expect("not poisoned") = longest;
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let (a0, t0) = (adds.load(Ordering::Relaxed), Instant::now());
    let r = during();
    let rate = (adds.load(Ordering::Relaxed) - a0) as f64 / t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer panicked");
    let worst = *worst.lock().expect("not poisoned");
    (r, rate, worst)
}

fn main() -> burrow_core::Result<()> {
    let rows: i64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let dir = std::env::temp_dir().join(format!("burrow-mem-backup-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let engine = Arc::new(MemoryEngine::new());
    let db = Arc::new(Database::open(
        Model::new().with::<Sample>(),
        engine.clone(),
    )?);
    let mut batch = Batch::new();
    batch.add_all((0..rows).map(sample));
    let tx = db.transaction()?;
    tx.send(&mut batch)?;
    tx.commit()?;
    let ((), alone, worst_alone) = with_writer(&db, || std::thread::sleep(Duration::from_secs(2)));
    println!(
        "memory engine, {rows} rows; writer alone: {alone:.0} updates/s, longest update {worst_alone:?}"
    );
    println!(
        "{:<6} {:<7} {:>8} {:>9} {:>11} {:>12} {:>6} {:>12}",
        "form", "writer", "time s", "size MB", "rows/s", "writer upd/s", "kept", "longest update"
    );
    for gzip in [false, true] {
        let target = dir.join(if gzip { "b.bmem.gz" } else { "b.bmem" });
        let backup = || {
            let t = Instant::now();
            let mut n = 0u32;
            let mut size = 0;
            while n == 0 || t.elapsed() < Duration::from_secs(2) {
                size = if gzip {
                    engine.backup_gz(&target)
                } else {
                    engine.backup(&target)
                }
                .expect("backup");
                n += 1;
            }
            (size, t.elapsed().as_secs_f64() / f64::from(n))
        };
        for writer in [false, true] {
            let ((size, secs), rate, worst) = if writer {
                let (r, rate, worst) = with_writer(&db, backup);
                (r, Some(rate), Some(worst))
            } else {
                (backup(), None, None)
            };
            println!(
                "{:<6} {:<7} {:>8.3} {:>9.1} {:>11.0} {:>12} {:>6} {:>12}",
                if gzip { "gzip" } else { "plain" },
                if writer { "yes" } else { "no" },
                secs,
                size as f64 / 1e6,
                rows as f64 / secs,
                rate.map_or("-".into(), |r| format!("{r:.0}")),
                rate.map_or("-".into(), |r| format!("{:.0}%", 100.0 * r / alone)),
                worst.map_or("-".into(), |w| format!("{w:.1?}")),
            );
        }
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
