//! Online backup speed: 1,000,000 sample rows backed up plain and gzip, with
//! and without a concurrent writer, and the writer's throughput during the
//! backup against without.
//!
//! `cargo run --release -p burrow-sqlite --example backup_speed [rows] [pages_per_step]`

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
    println!(
        "SQLite {}, {rows} rows, {pages} pages per step; each figure is the mean over >= 2 s of repeated backups",
        SqliteEngine::sqlite_version()
    );
    for sync in [Synchronous::Full, Synchronous::Off] {
        run(rows, pages, sync)?;
    }
    Ok(())
}

fn run(rows: i64, pages: u32, sync: Synchronous) -> burrow_core::Result<()> {
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
    // The writer alone, as the baseline, over a span like the backups'. A
    // synced writer's pace depends on what the disk still flushes (the fill,
    // the backups): measured before and after them, the mean is the baseline.
    let alone_rate = || with_writer(&db, || std::thread::sleep(Duration::from_secs(2))).1;
    let before = alone_rate();
    let mut lines = Vec::new();
    let mut measured = Vec::new();
    for gzip in [None, Some(1)] {
        let target = dir.join(if gzip.is_some() { "b.db.gz" } else { "b.db" });
        let options = BackupOptions::new().pages_per_step(pages).gzip(gzip);
        for writer in [false, true] {
            let (r, rate) = if writer {
                let (r, rate) = with_writer(&db, || timed(&engine, &target, &options));
                (r, Some(rate))
            } else {
                (timed(&engine, &target, &options), None)
            };
            let (summary, secs) = r?;
            measured.push((gzip.is_some(), writer, secs, summary, rate));
        }
    }
    let after = alone_rate();
    let alone = (before + after) / 2.0;
    println!(
        "writer alone (one add per commit): {before:.0} commits/s before the backups, {after:.0} after"
    );
    println!(
        "{:<6} {:<8} {:>8} {:>10} {:>12} {:>7} {:>16} {:>8}",
        "form", "writer", "time s", "size MB", "rows/s", "steps", "writer commits/s", "kept"
    );
    for (gzip, writer, secs, summary, rate) in measured {
        lines.push(format!(
            "{:<6} {:<8} {:>8.3} {:>10.1} {:>12.0} {:>7} {:>16} {:>8}",
            if gzip { "gzip" } else { "plain" },
            if writer { "yes" } else { "no" },
            secs,
            summary.bytes as f64 / 1e6,
            rows as f64 / secs,
            summary.steps,
            rate.map_or("-".into(), |r: f64| format!("{r:.0}")),
            rate.map_or("-".into(), |r| format!("{:.0}%", 100.0 * r / alone)),
        ));
    }
    for l in lines {
        println!("{l}");
    }
    drop(db);
    drop(engine);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
