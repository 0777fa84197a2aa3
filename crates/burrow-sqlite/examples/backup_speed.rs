//! Online backup speed: 1,000,000 sample rows backed up plain and gzip, with
//! and without a concurrent writer, and the writer's throughput during the
//! backup against without.
//!
//! `cargo run --release -p burrow-sqlite --example backup_speed [rows] [pages_per_step] [full|off|both] [rounds]`
//! (both synchronous modes by default; 3 rounds, each the writer alone then
//! during backups, medians printed)

#![allow(missing_docs)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use burrow_core::chrono::{NaiveDate, Utc};
use burrow_core::{Batch, Currency, Database, Model, Orm};
use burrow_derive::Record;
use burrow_sqlite::{BackupOptions, SqliteEngine, SqliteOptions, Synchronous};

/// The engine benchmark's record.
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

/// Runs a writer (one add per transaction, the benchmark's "Direct") while
/// `during` runs, and returns its result with the writer's commits per second.
fn with_writer<R>(db: &Arc<Database>, during: impl FnOnce() -> R) -> (R, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let commits = Arc::new(AtomicU64::new(0));
    let writer = {
        let (db, stop, commits) = (db.clone(), stop.clone(), commits.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                db.add(&mut sample(i)).expect("the writer's add");
                commits.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // Let the writer reach its pace before the measured span.
    std::thread::sleep(Duration::from_millis(100));
    let (c0, t0) = (commits.load(Ordering::Relaxed), Instant::now());
    let r = during();
    let rate = (commits.load(Ordering::Relaxed) - c0) as f64 / t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer panicked");
    (r, rate)
}

/// Backs up `rounds` times (at least once, and until 2 s have passed when
/// `rounds` is 0), returning the last summary and the mean time of one.
fn timed(
    engine: &SqliteEngine,
    target: &std::path::Path,
    options: &BackupOptions,
) -> burrow_core::Result<(burrow_sqlite::BackupSummary, f64)> {
    let t = Instant::now();
    let mut n = 0;
    loop {
        let s = engine.backup_with(target, options, |_| {})?;
        n += 1;
        if t.elapsed() >= Duration::from_secs(2) {
            return Ok((s, t.elapsed().as_secs_f64() / f64::from(n)));
        }
    }
}

fn main() -> burrow_core::Result<()> {
    let mut args = std::env::args().skip(1);
    let rows: i64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let pages: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let modes = match args.next().as_deref() {
        Some("full") => vec![Synchronous::Full],
        Some("off") => vec![Synchronous::Off],
        _ => vec![Synchronous::Full, Synchronous::Off],
    };
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3).max(1);
    println!(
        "SQLite {}, {rows} rows, {pages} pages per step; each time the mean over >= 2 s of repeated backups, {rounds} rounds with a writer",
        SqliteEngine::sqlite_version()
    );
    for sync in modes {
        run(rows, pages, sync, rounds)?;
    }
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn run(rows: i64, pages: u32, sync: Synchronous, rounds: usize) -> burrow_core::Result<()> {
    let dir = std::env::temp_dir().join(format!("burrow-backup-speed-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let db_path = dir.join("live.db");
    let engine = Arc::new(SqliteEngine::open(
        SqliteOptions::file(&db_path).synchronous(sync),
    )?);
    let db = Arc::new(Database::open(
        Model::new().with::<Sample>(),
        engine.clone(),
    )?);
    let t = Instant::now();
    let tx = db.transaction()?;
    let mut batch = Batch::new();
    batch.add_all((0..rows).map(sample));
    tx.send(&mut batch)?;
    tx.commit()?;
    let db_size = std::fs::metadata(&db_path)?.len();
    println!();
    println!(
        "database synchronous={sync:?}: filled in {:.2} s, {:.1} MB",
        t.elapsed().as_secs_f64(),
        db_size as f64 / 1e6
    );
    // A synced writer's pace alone swings widely with what the disk still
    // flushes (600 to 1,000 commits/s within a minute here), so each span
    // with a backup is paired with a span of the writer alone just before
    // it; the figures are medians over `rounds` such pairs.
    let alone_rate = || with_writer(&db, || std::thread::sleep(Duration::from_secs(2))).1;
    println!(
        "{:<6} {:<8} {:>8} {:>10} {:>12} {:>7} {:>12} {:>12} {:>8}",
        "form", "writer", "time s", "size MB", "rows/s", "steps", "alone c/s", "during c/s", "kept"
    );
    for gzip in [None, Some(1)] {
        let target = dir.join(if gzip.is_some() { "b.db.gz" } else { "b.db" });
        let options = BackupOptions::new().pages_per_step(pages).gzip(gzip);
        for writer in [false, true] {
            let (mut secs, mut alone, mut during, mut kept) = (vec![], vec![], vec![], vec![]);
            let mut summary = None;
            for _ in 0..if writer { rounds } else { 1 } {
                let r = if writer {
                    let a = alone_rate();
                    let (r, rate) = with_writer(&db, || timed(&engine, &target, &options));
                    alone.push(a);
                    during.push(rate);
                    kept.push(rate / a);
                    r
                } else {
                    timed(&engine, &target, &options)
                };
                let (s, t) = r?;
                secs.push(t);
                summary = Some(s);
            }
            let summary = summary.expect("one round at least");
            let secs = median(&mut secs);
            let cell = |v: &mut Vec<f64>, f: &dyn Fn(f64) -> String| {
                if v.is_empty() {
                    "-".to_string()
                } else {
                    f(median(v))
                }
            };
            println!(
                "{:<6} {:<8} {:>8.3} {:>10.1} {:>12.0} {:>7} {:>12} {:>12} {:>8}",
                if gzip.is_some() { "gzip" } else { "plain" },
                if writer { "yes" } else { "no" },
                secs,
                summary.bytes as f64 / 1e6,
                rows as f64 / secs,
                summary.steps,
                cell(&mut alone, &|r| format!("{r:.0}")),
                cell(&mut during, &|r| format!("{r:.0}")),
                cell(&mut kept, &|r| format!("{:.0}%", 100.0 * r)),
            );
            if writer {
                let each: Vec<String> = kept.iter().map(|k| format!("{:.0}%", 100.0 * k)).collect();
                println!("       (kept in each round: {})", each.join(" "));
            }
        }
    }
    drop(db);
    drop(engine);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
