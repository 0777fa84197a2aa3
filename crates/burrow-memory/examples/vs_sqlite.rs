//! A quick side-by-side of the memory engine and in-memory SQLite through the
//! ORM, in the benchmark's modes (the real benchmark is `apps/bench`).
//!
//! `cargo run --release -p burrow-memory --example vs_sqlite -- [rows] [runs]`, with
//! `MODES=Trans,By one` and `ENGINES=memory|sqlite` to run fewer.

use std::sync::Arc;
use std::time::Instant;

use burrow_core::chrono::{DateTime, Days, NaiveDate, Utc};
use burrow_core::{Batch, Currency, Database, Model, Orm, Query, Storage};
use burrow_derive::Record;
use burrow_memory::MemoryEngine;
use burrow_sqlite::SqliteEngine;

#[derive(Record, Debug, Clone, PartialEq)]
#[burrow(crate = "burrow_core", table = "Sample")]
struct Sample {
    id: i64,
    first_name: String,
    last_name: String,
    amount: Currency,
    birth_date: NaiveDate,
    #[burrow(modified)]
    last_change: DateTime<Utc>,
    #[burrow(created)]
    created_at: DateTime<Utc>,
}

fn make(i: usize) -> Sample {
    Sample {
        id: 0,
        first_name: format!("Salvador{i}"),
        last_name: format!("Dali{}", i * 7),
        amount: Currency::from_scaled(((i as i64).wrapping_mul(7_919_993) % 100_000_000) + 12_345),
        birth_date: NaiveDate::from_ymd_opt(1900, 1, 1).unwrap() + Days::new((i % 40_000) as u64),
        last_change: DateTime::UNIX_EPOCH,
        created_at: DateTime::UNIX_EPOCH,
    }
}

const MODES: [&str; 7] = [
    "Direct",
    "Batch",
    "Trans",
    "Batch Trans",
    "By one",
    "All Direct",
    "Count",
];

/// Objects per second of one mode on a fresh engine.
fn run(engine: &dyn Fn() -> Arc<dyn Storage>, mode: &str, n: usize) -> f64 {
    let client = Database::open(Model::new().with::<Sample>(), engine()).unwrap();
    let mut rows: Vec<Sample> = (0..n).map(make).collect();
    let fill = |c: &Database, rows: Vec<Sample>| {
        let tx = c.transaction().unwrap();
        let mut b = Batch::new();
        for r in rows {
            b.add(r);
        }
        tx.send(&mut b).unwrap();
        tx.commit().unwrap();
    };
    let start = Instant::now();
    match mode {
        "Direct" => {
            for r in &mut rows {
                client.add(r).unwrap();
            }
        }
        "Trans" => {
            let tx = client.transaction().unwrap();
            for r in &mut rows {
                tx.add(r).unwrap();
            }
            tx.commit().unwrap();
        }
        "Batch" | "Batch Trans" => {
            let tx = (mode == "Batch Trans").then(|| client.transaction().unwrap());
            let mut b = Batch::new();
            for r in rows {
                b.add(r);
            }
            let res = match &tx {
                Some(tx) => tx.send(&mut b),
                None => client.send(&mut b),
            };
            assert_eq!(res.unwrap().len(), n);
            if let Some(tx) = tx {
                tx.commit().unwrap();
            }
        }
        _ => {
            fill(&client, rows);
            let start = Instant::now();
            match mode {
                "By one" => {
                    for id in 1..=n as i64 {
                        let s: Sample = client.retrieve(id).unwrap();
                        assert_eq!(s.id, id);
                    }
                }
                "All Direct" => {
                    let all = client.select::<Sample>(&Query::all()).unwrap();
                    assert_eq!(all.len(), n);
                }
                _ => {
                    let c = client.count::<Sample>("Amount > ?", &[1.into()]).unwrap();
                    assert!(c > 0);
                }
            }
            return n as f64 / start.elapsed().as_secs_f64();
        }
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(5000);
    let runs = args.get(1).copied().unwrap_or(5);
    let memory = || Arc::new(MemoryEngine::new()) as Arc<dyn Storage>;
    let sqlite = || Arc::new(SqliteEngine::memory().unwrap()) as Arc<dyn Storage>;
    println!("{n} rows, best of {runs} runs, objects/second");
    println!(
        "{:<12} {:>12} {:>12} {:>7}",
        "mode", "memory", "sqlite mem", "ratio"
    );
    let only = std::env::var("MODES").unwrap_or_default();
    let engines = std::env::var("ENGINES").unwrap_or_default();
    for mode in MODES
        .into_iter()
        .filter(|m| only.is_empty() || only.split(',').any(|o| o == *m))
    {
        let best = |e: &dyn Fn() -> Arc<dyn Storage>| {
            (0..runs).map(|_| run(e, mode, n)).fold(0.0f64, f64::max)
        };
        let (m, s) = match engines.as_str() {
            "memory" => (best(&memory), f64::NAN),
            "sqlite" => (f64::NAN, best(&sqlite)),
            _ => (best(&memory), best(&sqlite)),
        };
        println!("{mode:<12} {m:>12.0} {s:>12.0} {:>7.2}", m / s);
    }
}
