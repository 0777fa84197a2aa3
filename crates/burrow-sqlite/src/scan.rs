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

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Mutex, OnceLock, PoisonError};

/// The most scan workers kept, whatever the processor count.
pub const MAX_WORKERS: usize = 4;

type Job = Box<dyn FnOnce() + Send>;

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
    if let Some(worker) = idle {
        // A worker's channel stays open while its thread runs, and its thread
        // runs as long as the process: a failed send only drops the job.
        return worker.send(Box::new(job)).is_ok();
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
    worker.send(Box::new(job)).is_ok()
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
    while let Ok(job) = jobs.recv() {
        // A job reports its own panic to its consumer; the worker goes on.
        let _ = catch_unwind(AssertUnwindSafe(job));
        pool()
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(me.clone());
    }
}
