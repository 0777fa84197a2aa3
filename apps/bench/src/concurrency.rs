//! By-ID reads from several threads sharing one engine: what each engine's
//! concurrency model gives. The SQLite engine serves a private in-memory
//! database through one connection behind a lock, so threads take turns; on
//! a file in WAL mode it reads outside transactions through a pool of reader
//! connections; the memory engine takes a readers-writer lock, so readers run
//! side by side.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use burrow::chrono::Utc;
use burrow::memory::MemoryEngine;
use burrow::sqlite::{SqliteEngine, Synchronous};
use burrow::{Batch, Database, Model, Orm, Storage};

use crate::sample::{make_all, verify_read, Sample};
use crate::targets::sqlite_options;

/// Thread counts measured.
pub const THREADS: [usize; 3] = [1, 2, 4];

/// The engines measured, by benchmark ID and title.
pub const ENGINES: [(&str, &str); 3] = [
    ("sqlite-file-off", "SQLite file off (WAL, one process)"),
    ("sqlite-mem", "SQLite in memory"),
    ("memory-static", "In memory static"),
];

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The engine `id` names; a file goes in `dir`, opened as the engine
/// benchmark opens its row of the same ID (see [`crate::targets::SHARED_FILE`]).
fn open(id: &str, dir: &Path) -> Result<Database, String> {
    let engine: Arc<dyn Storage> = match id {
        "sqlite-mem" => Arc::new(SqliteEngine::memory().map_err(err)?),
        "sqlite-file-off" => {
            let path = dir.join("concurrency.db");
            let options = sqlite_options(Some(&path), Synchronous::Off, false)
                .wal(true)
                .one_process(true);
            Arc::new(SqliteEngine::open(options).map_err(err)?)
        }
        _ => Arc::new(MemoryEngine::new()),
    };
    Database::open(Model::new().with::<Sample>(), engine).map_err(err)
}

/// Reads a thread takes from the shared count at a time: few enough that
/// threads run out of work within a few microseconds of each other.
const GRAB: usize = 64;

/// Objects per second, all threads together, for each of [`THREADS`] (best of
/// `repeat`): the threads read every row by ID `threads` times over between
/// them, taking the next reads from one shared count, and every row read is
/// checked. With a fixed share per thread, more threads than processors
/// finish at different times (the scheduler runs them by turns), and the
/// last one alone left a processor idle at the end: the figure measured the
/// scheduler's tail, not the engine (the memory engine, which shares no
/// connection, read 0.76–0.85 as fast with 4 threads as with 2 on 2
/// processors).
pub fn by_one(id: &str, n: usize, repeat: usize) -> Result<Vec<f64>, String> {
    let dir = tempfile::tempdir().map_err(err)?;
    let client = open(id, dir.path())?;
    let since = Utc::now();
    let mut batch = Batch::new();
    batch.add_all(make_all(n));
    client.send(&mut batch).map_err(err)?;
    // The thread counts take turns, one run each per round, rather than
    // each running all its repeats in a row: on a shared machine a stretch
    // of slow seconds then lowers every count alike, and their ratios
    // compare runs made side by side.
    let mut rates = vec![0f64; THREADS.len()];
    for _ in 0..repeat {
        for (best, threads) in rates.iter_mut().zip(THREADS) {
            let total = threads * n;
            let next = AtomicUsize::new(0);
            let start = Instant::now();
            let reads = std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads)
                    .map(|_| {
                        let (client, next) = (&client, &next);
                        s.spawn(move || {
                            let mut rows = Vec::new();
                            loop {
                                let from = next.fetch_add(GRAB, Ordering::Relaxed);
                                if from >= total {
                                    return Ok::<_, String>(rows);
                                }
                                for k in from..(from + GRAB).min(total) {
                                    let id = (k % n + 1) as i64;
                                    rows.push((k, client.retrieve::<Sample>(id).map_err(err)?));
                                }
                            }
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
            // Read `k` is row `k % n + 1` of pass `k / n`: each pass must
            // hold every row once, as written.
            let mut passes = vec![Vec::with_capacity(n); threads];
            for (k, row) in reads.into_iter().flatten() {
                if row.id != (k % n + 1) as i64 {
                    return Err(format!("read of ID {} returned row {}", k % n + 1, row.id));
                }
                passes[k / n].push(row);
            }
            for rows in &passes {
                verify_read(rows, n, since)?;
            }
            *best = best.max(total as f64 / secs);
        }
    }
    Ok(rates)
}
