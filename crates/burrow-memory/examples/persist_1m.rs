//! Saves and loads 1,000,000 benchmark rows in every file form and prints the
//! times and sizes (the numbers in `docs/memory-format.md`).
//!
//! `cargo run --release -p burrow-memory --example persist_1m -- [rows]`

use std::sync::Arc;
use std::time::Instant;

use burrow_core::chrono::{DateTime, Days, NaiveDate, TimeZone, Utc};
use burrow_core::{Batch, Currency, Database, Model, Orm};
use burrow_derive::Record;
use burrow_memory::{MemoryEngine, MemoryOptions};

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
    let at = Utc.timestamp_opt(1_760_000_000, 0).unwrap();
    Sample {
        id: 0,
        first_name: format!("Salvador{i}"),
        last_name: format!("Dali{}", i * 7),
        amount: Currency::from_scaled(((i as i64).wrapping_mul(7_919_993) % 100_000_000) + 12_345),
        birth_date: NaiveDate::from_ymd_opt(1900, 1, 1).unwrap() + Days::new((i % 40_000) as u64),
        last_change: at,
        created_at: at,
    }
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let dir = std::env::temp_dir().join(format!("burrow-persist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = || Model::new().with::<Sample>();
    let forms: [(&str, MemoryOptions); 4] = [
        ("binary zstd-1", MemoryOptions::file(dir.join("a.bmem"))),
        (
            "binary zstd-3",
            MemoryOptions::file(dir.join("b.bmem")).zstd_level(Some(3)),
        ),
        (
            "binary raw",
            MemoryOptions::file(dir.join("c.bmem")).zstd_level(None),
        ),
        ("json", MemoryOptions::file(dir.join("d.json")).json()),
    ];
    println!("{n} rows");
    println!(
        "{:<14} {:>10} {:>10} {:>14}",
        "form", "save s", "load s", "file bytes"
    );
    for (name, opts) in forms {
        let path = opts.path.clone().unwrap();
        let _ = std::fs::remove_file(&path);
        let engine = Arc::new(MemoryEngine::open(opts.clone()).unwrap());
        let client = Database::open(model(), engine.clone()).unwrap();
        let mut batch = Batch::new();
        for i in 0..n {
            batch.add(make(i));
        }
        let t = Instant::now();
        client.send(&mut batch).unwrap();
        let insert = t.elapsed().as_secs_f64();
        let t = Instant::now();
        engine.flush().unwrap();
        let save = t.elapsed().as_secs_f64();
        drop(client);
        drop(engine);
        let size = std::fs::metadata(&path).unwrap().len();
        let t = Instant::now();
        let engine = Arc::new(MemoryEngine::open(opts).unwrap());
        let client = Database::open(model(), engine).unwrap();
        let load = t.elapsed().as_secs_f64();
        assert_eq!(client.count::<Sample>("", &[]).unwrap(), n as u64);
        let last: Sample = client.retrieve(n as i64).unwrap();
        assert_eq!(last.first_name, format!("Salvador{}", n - 1));
        println!(
            "{name:<14} {save:>10.3} {load:>10.3} {size:>14}   (batch insert {:.0} rows/s)",
            n as f64 / insert
        );
        drop(client);
        let _ = std::fs::remove_file(&path);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
