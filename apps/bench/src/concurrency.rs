//! By-ID reads from several threads sharing one engine: what each engine's
//! concurrency model gives. The SQLite engine serves every call through one
//! connection behind a lock, so threads take turns; the memory engine takes a
//! readers-writer lock, so readers run side by side.

use std::sync::Arc;
use std::time::Instant;

use burrow::chrono::Utc;
use burrow::memory::MemoryEngine;
use burrow::sqlite::SqliteEngine;
use burrow::{Batch, Database, Model, Orm, Storage};

use crate::sample::{make_all, verify_read, Sample};

/// Thread counts measured.
pub const THREADS: [usize; 3] = [1, 2, 4];

/// The engines measured, by benchmark ID and title.
pub const ENGINES: [(&str, &str); 2] = [
    ("sqlite-mem", "SQLite in memory"),
    ("memory-static", "In memory static"),
];

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn open(id: &str) -> Result<Database, String> {
    let engine: Arc<dyn Storage> = match id {
        "sqlite-mem" => Arc::new(SqliteEngine::memory().map_err(err)?),
        _ => Arc::new(MemoryEngine::new()),
    };
    Database::open(Model::new().with::<Sample>(), engine).map_err(err)
}

/// Objects per second, all threads together, for each of [`THREADS`] (best of
/// `repeat`): every thread reads all `n` rows by ID, each starting at a
/// different row, and every row read is checked.
pub fn by_one(id: &str, n: usize, repeat: usize) -> Result<Vec<f64>, String> {
    let client = open(id)?;
    let since = Utc::now();
    let mut batch = Batch::new();
    batch.add_all(make_all(n));
    client.send(&mut batch).map_err(err)?;
    let mut rates = Vec::new();
    for threads in THREADS {
        let mut best = 0f64;
        for _ in 0..repeat {
            let start = Instant::now();
            let reads = std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads)
                    .map(|t| {
                        let client = &client;
                        s.spawn(move || {
                            let first = t * n / threads;
                            (0..n)
                                .map(|k| {
                                    let id = ((first + k) % n + 1) as i64;
                                    client.retrieve::<Sample>(id).map_err(err)
                                })
                                .collect::<Result<Vec<_>, _>>()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .map_err(|_| "a reader thread panicked".to_string())?
                    })
                    .collect::<Result<Vec<_>, _>>()
            })?;
            let secs = start.elapsed().as_secs_f64();
            for mut rows in reads {
                rows.sort_by_key(|r| r.id);
                verify_read(&rows, n, since)?;
            }
            best = best.max((threads * n) as f64 / secs);
        }
        rates.push(best);
    }
    Ok(rates)
}
