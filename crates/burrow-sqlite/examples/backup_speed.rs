//! Online backup speed: 1,000,000 sample rows backed up plain and gzip, with
//! and without a concurrent writer, and the writer's throughput during the
//! backup against without.
//!
//! `cargo run --release -p burrow-sqlite --example backup_speed [rows] [pages_per_step] [full|off|both] [cycles]`
//! (both synchronous modes by default; 10 backups with a writer, each beside
//! a span as long without a backup)

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

/// A writer making one add per transaction (the benchmark's "Direct") on
/// its own thread, until stopped; `commits` counts them.
struct Writer {
    stop: Arc<AtomicBool>,
    commits: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl Writer {
    fn start(db: &Arc<Database>) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let commits = Arc::new(AtomicU64::new(0));
        let thread = {
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
        // Let the writer reach its pace before anything is measured.
        std::thread::sleep(Duration::from_millis(100));
        Writer {
            stop,
            commits,
            thread,
        }
    }

    fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("writer panicked");
    }
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
    let cycles: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(10)
        .max(1);
    println!(
        "SQLite {}, {rows} rows, {pages} pages per step; each time the mean over >= 2 s of repeated backups, {cycles} backups with a writer, each beside a span as long without",
        SqliteEngine::sqlite_version()
    );
    for sync in modes {
        run(rows, pages, sync, cycles)?;
    }
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn run(rows: i64, pages: u32, sync: Synchronous, cycles: usize) -> burrow_core::Result<()> {
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
    // A synced writer's pace alone swings with what else the disk flushes
    // (60 to 1,200 commits/s within a minute here, while another program
    // built), so one writer runs throughout and spans of one backup alternate
    // with spans as long without one, in alternating order: "kept" is its
    // commits per second over all backup spans ÷ over all spans without.
    println!(
        "{:<6} {:<8} {:>8} {:>10} {:>12} {:>7} {:>12} {:>12} {:>8}",
        "form", "writer", "time s", "size MB", "rows/s", "steps", "alone c/s", "during c/s", "kept"
    );
    let mut first_pages = None;
    for gzip in [None, Some(1)] {
        let target = dir.join(if gzip.is_some() { "b.db.gz" } else { "b.db" });
        let options = BackupOptions::new().pages_per_step(pages).gzip(gzip);
        let (summary, secs) = timed(&engine, &target, &options)?;
        let first_pages = *first_pages.get_or_insert(summary.pages);
        let form = if gzip.is_some() { "gzip" } else { "plain" };
        let line = |writer: &str, secs: f64, summary: &burrow_sqlite::BackupSummary, rest: &str| {
            println!(
                "{form:<6} {writer:<8} {secs:>8.3} {:>10.1} {:>12.0} {:>7} {rest}",
                summary.bytes as f64 / 1e6,
                // The writer adds rows between backups: rows now, estimated
                // from the pages copied against the first backup's.
                rows as f64 * summary.pages as f64 / first_pages as f64 / secs,
                summary.steps,
            )
        };
        line(
            "no",
            secs,
            &summary,
            &format!("{:>12} {:>12} {:>8}", "-", "-", "-"),
        );
        let writer = Writer::start(&db);
        let (mut busy, mut idle) = ((0u64, 0.0f64), (0u64, 0.0f64));
        let mut times = Vec::new();
        let mut last = (summary, secs);
        for cycle in 0..cycles {
            for backing in if cycle % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            } {
                let (c0, t0) = (writer.commits(), Instant::now());
                if backing {
                    last.0 = engine.backup_with(&target, &options, |_| {})?;
                    last.1 = t0.elapsed().as_secs_f64();
                    times.push(last.1);
                } else {
                    std::thread::sleep(Duration::from_secs_f64(last.1));
                }
                let span = (writer.commits() - c0, t0.elapsed().as_secs_f64());
                let sum = if backing { &mut busy } else { &mut idle };
                sum.0 += span.0;
                sum.1 += span.1;
            }
        }
        writer.stop();
        let (alone, during) = (idle.0 as f64 / idle.1, busy.0 as f64 / busy.1);
        line(
            "yes",
            median(&mut times),
            &last.0,
            &format!(
                "{alone:>12.0} {during:>12.0} {:>7.0}%",
                100.0 * during / alone
            ),
        );
    }
    drop(db);
    drop(engine);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
