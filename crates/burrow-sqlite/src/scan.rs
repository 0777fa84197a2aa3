//! Whole-table reads of another engine's table, run beside the SQL that
//! consumes them.
//!
//! A virtual table's full scan has two halves of about equal weight: the
//! owning engine reads its rows and puts them in SQLite's form, then SQLite
//! runs the statement over them and the caller decodes its result. Done one
//! after the other they use one core; here the engine's half runs on a scan
//! worker and hands the rows over in chunks while SQLite consumes the first
//! ones, so a large scan takes about the time of the slower half.
//!
//! Workers are few (one per processor, at most [`MAX_WORKERS`]), kept between
//! scans (a new thread per scan would cost more than a small table's whole
//! read), and never waited for: with all of them busy a scan runs in the
//! caller's thread, as small scans always do. A worker never waits for its
//! consumer either: it sends every chunk as soon as it is filled, so it holds
//! the engine's read (and any lock that comes with it) no longer than a read
//! made in the caller's thread would, and a consumer that stops early (a
//! `LIMIT` SQLite applies itself, an error, a dropped statement) ends the
//! engine's read at the next chunk.
//!
//! The halves overlap only on two processors, and Linux does not always put
//! them there: it may wake a worker on the processor of the thread that woke
//! it, and leave the two taking turns there for longer than a scan lasts. So
//! a worker is held off its caller's processor for the length of a scan
//! ([`apart`]), and a consumer waiting for a chunk stays awake a while
//! (`vtab::wait_for_chunk`) rather than be woken next to its worker.
//! Measured on a 2-processor machine (`ext-sqlite-mem` All Virtual, 10,000
//! rows, one timed read per process, 18 processes each): 6 of 18 reads ran at
//! 2.8M rows/s or more without either (1.43–3.10M); with both, all 18 ran at
//! 3.08–3.30M. Either alone left most reads below 2.8M: 11 of 16 and 20 of 36.
//! Where the two processors share no cache, every chunk crosses between
//! caches; how a chunk is handed over so that the worker does not wait for
//! that is in `crate::cells`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Mutex, OnceLock, PoisonError};

use burrow_core::driver::apart;

/// The most scan workers kept, whatever the processor count.
pub const MAX_WORKERS: usize = 4;

/// A scan, and the processor its caller ran on when it was handed over.
type Job = (Box<dyn FnOnce() + Send>, Option<usize>);

/// Idle workers, each waiting on its own channel.
struct Pool {
    idle: Mutex<Vec<Sender<Job>>>,
    started: Mutex<usize>,
    max: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        idle: Mutex::new(Vec::new()),
        started: Mutex::new(0),
        // On one processor a second thread only takes turns with the caller.
        max: std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_WORKERS),
    })
}

/// Runs `job` on an idle scan worker, starting one if fewer than the maximum
/// exist. `false` when every worker is busy, or on one processor (where a
/// second thread only takes turns with the caller): `job` is dropped unrun and
/// the caller reads in its own thread.
pub fn spawn(job: impl FnOnce() + Send + 'static) -> bool {
    let pool = pool();
    if pool.max < 2 {
        return false;
    }
    let idle = pool
        .idle
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .pop();
    let job: Job = (Box::new(job), apart::current());
    if let Some(worker) = idle {
        // A worker's channel stays open while its thread runs, and its thread
        // runs as long as the process: a failed send only drops the job.
        return worker.send(job).is_ok();
    }
    let mut started = pool.started.lock().unwrap_or_else(PoisonError::into_inner);
    if *started >= pool.max {
        return false;
    }
    let Some(worker) = start_worker() else {
        return false;
    };
    *started += 1;
    drop(started);
    worker.send(job).is_ok()
}

/// Starts the first worker ahead of the first large scan, which would
/// otherwise wait for a thread to be created (about 200 µs, measured) with
/// SQLite already stepping its statement.
pub fn start_early() {
    let pool = pool();
    let mut started = pool.started.lock().unwrap_or_else(PoisonError::into_inner);
    if pool.max < 2 || *started > 0 {
        return;
    }
    if let Some(worker) = start_worker() {
        *started += 1;
        drop(started);
        pool.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(worker);
    }
}

/// A new worker thread, waiting for its first job on the channel returned.
fn start_worker() -> Option<Sender<Job>> {
    let (tx, rx) = mpsc::channel::<Job>();
    let back = tx.clone();
    std::thread::Builder::new()
        .name("burrow-scan".into())
        .spawn(move || work(rx, back))
        .ok()?;
    Some(tx)
}

/// A worker's life: each job, then back to the idle list.
fn work(jobs: Receiver<Job>, me: Sender<Job>) {
    while let Ok((job, caller)) = jobs.recv() {
        let _away = caller.and_then(apart::keep_off);
        // A job reports its own panic to its consumer; the worker goes on.
        let _ = catch_unwind(AssertUnwindSafe(job));
        pool()
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(me.clone());
    }
}
