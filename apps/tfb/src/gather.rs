//! The ORM family's calls on PostgreSQL, gathered across requests.
//!
//! The external engine's calls block, so they cannot run on an event loop.
//! Handing each request's call to a pool thread costs two thread hand-offs,
//! and a round trip per query while that thread waits. Instead, requests
//! queue their work here and a few threads each take whatever is queued: the
//! rows by ID that the waiting requests asked for are read by one
//! [`Orm::get_many`] (on PostgreSQL one pipeline, a prepared query and a Sync
//! per row, as TFB allows) and handed back to each request; each waiting
//! request's fortunes query is run by one [`Orm::select_many`], pipelined the
//! same way. Under load one hand-off serves dozens of requests; alone, a
//! request waits for nobody.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use burrow::prelude::*;
use burrow::Query;
use tokio::sync::oneshot;

use crate::orm::{must_exist, Fortune, World};

/// The most row IDs, and the most other jobs, one thread takes at once, so
/// that a burst is shared between the threads rather than served by one
/// while the others idle.
const MOST_IDS: usize = 1024;
const MOST_JOBS: usize = 64;

/// The most jobs waiting at once. A request waits for its job, but one whose
/// client went away leaves it queued: clients connecting, asking and
/// leaving faster than PostgreSQL answers must not grow the queue without
/// end. Past this, requests are answered at once with an error.
const MOST_QUEUED: usize = 1 << 16;

/// Threads running queued ORM work on one [`Database`].
pub struct Gather {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Threads waiting for work: only then does a push wake one (a wake is
    /// a system call even when nobody waits).
    idle: usize,
    closed: bool,
}

type Reply<T> = oneshot::Sender<burrow::Result<T>>;
type Call = Box<dyn FnOnce(&Database) + Send>;

enum Job {
    /// `World` rows by ID, read together with every other request's.
    Read(Vec<i64>, Reply<Vec<World>>),
    /// Every `Fortune`, one query per request, sent with the others'.
    Fortunes(Reply<Vec<Fortune>>),
    /// Any other call, run as it is.
    Call(Call),
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Gather {
    /// Starts `threads` threads (at least one) on `db`.
    pub fn start(db: Arc<Database>, threads: usize) -> std::io::Result<Gather> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
        });
        let mut g = Gather {
            shared: shared.clone(),
            threads: Vec::new(),
        };
        for i in 0..threads.max(1) {
            let (shared, db) = (shared.clone(), db.clone());
            g.threads.push(
                std::thread::Builder::new()
                    .name(format!("tfb-orm-{i}"))
                    .spawn(move || work(&shared, &db))?,
            );
        }
        Ok(g)
    }

    /// The `World` rows with these IDs, in order; a missing one is
    /// [`burrow::Error::NotFound`].
    pub async fn read(&self, ids: Vec<i64>) -> burrow::Result<Vec<World>> {
        let (tx, rx) = oneshot::channel();
        self.push(Job::Read(ids, tx))?;
        rx.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Every `Fortune`, read by a query of this request's own.
    pub async fn fortunes(&self) -> burrow::Result<Vec<Fortune>> {
        let (tx, rx) = oneshot::channel();
        self.push(Job::Fortunes(tx))?;
        rx.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Runs `f` on one of the threads.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Database) -> burrow::Result<R> + Send + 'static,
    ) -> burrow::Result<R> {
        let (tx, rx) = oneshot::channel();
        self.push(Job::Call(Box::new(move |db| {
            let _ = tx.send(f(db));
        })))?;
        rx.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Queues `job`, or refuses it when the threads have stopped or
    /// [`MOST_QUEUED`] jobs already wait.
    fn push(&self, job: Job) -> burrow::Result<()> {
        let mut q = self.shared.lock();
        if q.closed {
            return Err(stopped());
        }
        if q.jobs.len() >= MOST_QUEUED {
            return Err(failed(&format!(
                "{} ORM calls already wait for PostgreSQL",
                q.jobs.len()
            )));
        }
        q.jobs.push_back(job);
        let wake = q.idle > 0;
        drop(q);
        if wake {
            self.shared.ready.notify_one();
        }
        Ok(())
    }
}

impl Drop for Gather {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.ready.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// One request's copy of an error that failed every request of a call.
fn failed(message: &str) -> burrow::Error {
    burrow::Error::Io(std::io::Error::other(message.to_owned()))
}

fn stopped() -> burrow::Error {
    burrow::Error::Io(std::io::Error::other("the ORM threads have stopped"))
}

/// One thread: takes what is queued (up to [`MOST_IDS`] rows and
/// [`MOST_JOBS`] other jobs), reads every taken row in one call and every
/// taken fortunes query in another, answers each request, runs the calls.
fn work(shared: &Shared, db: &Database) {
    let mut ids: Vec<i64> = Vec::new();
    let mut reads: Vec<(usize, Reply<Vec<World>>)> = Vec::new();
    let mut fortunes: Vec<Reply<Vec<Fortune>>> = Vec::new();
    let mut calls: Vec<Call> = Vec::new();
    loop {
        {
            let mut q = shared.lock();
            while q.jobs.is_empty() {
                if q.closed {
                    return;
                }
                q.idle += 1;
                q = shared.ready.wait(q).unwrap_or_else(PoisonError::into_inner);
                q.idle -= 1;
            }
            while let Some(job) = q.jobs.front() {
                let full = match job {
                    Job::Read(i, _) => !ids.is_empty() && ids.len() + i.len() > MOST_IDS,
                    Job::Fortunes(_) | Job::Call(_) => fortunes.len() + calls.len() >= MOST_JOBS,
                };
                if full {
                    break;
                }
                match q.jobs.pop_front() {
                    Some(Job::Read(i, reply)) => {
                        ids.extend_from_slice(&i);
                        reads.push((i.len(), reply));
                    }
                    Some(Job::Fortunes(reply)) => fortunes.push(reply),
                    Some(Job::Call(f)) => calls.push(f),
                    None => break,
                }
            }
            if !q.jobs.is_empty() && q.idle > 0 {
                shared.ready.notify_one();
            }
        }
        // A panic drops the replies it had not sent: those requests get an
        // error, and the thread goes on serving.
        if !reads.is_empty() {
            let _ = catch_unwind(AssertUnwindSafe(|| {
                answer(db.get_many::<World>(&ids), &ids, reads.drain(..))
            }));
            reads.clear();
            ids.clear();
        }
        if !fortunes.is_empty() {
            let _ = catch_unwind(AssertUnwindSafe(|| {
                let queries = vec![Query::all(); fortunes.len()];
                match db.select_many::<Fortune>(&queries) {
                    Ok(lists) => {
                        for (list, reply) in lists.into_iter().zip(fortunes.drain(..)) {
                            let _ = reply.send(Ok(list));
                        }
                    }
                    Err(e) => {
                        let message = e.to_string();
                        for reply in fortunes.drain(..) {
                            let _ = reply.send(Err(failed(&message)));
                        }
                    }
                }
            }));
            fortunes.clear();
        }
        for f in calls.drain(..) {
            let _ = catch_unwind(AssertUnwindSafe(|| f(db)));
        }
    }
}

/// Hands each request its share of `got`, the rows of `ids` in order.
fn answer(
    got: burrow::Result<Vec<Option<World>>>,
    ids: &[i64],
    reads: impl Iterator<Item = (usize, Reply<Vec<World>>)>,
) {
    match got {
        Ok(rows) => {
            let mut rows = rows.into_iter().zip(ids);
            for (n, reply) in reads {
                let _ = reply.send(must_exist(rows.by_ref().take(n)));
            }
        }
        Err(e) => {
            let message = e.to_string();
            for (_, reply) in reads {
                let _ = reply.send(Err(failed(&message)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_full_queue_refuses_at_once_and_drains_on_drop() {
        let db = Database::open(
            Model::new().with::<World>().with::<Fortune>(),
            Arc::new(burrow::memory::MemoryEngine::new()),
        )
        .expect("memory database");
        let g = Gather::start(Arc::new(db), 1).expect("threads");
        // The one thread waits inside a call until released.
        let (release, wait) = mpsc::channel::<()>();
        let (started, running) = mpsc::channel::<()>();
        g.push(Job::Call(Box::new(move |_| {
            let _ = started.send(());
            let _ = wait.recv();
        })))
        .expect("first job queued");
        running.recv().expect("the thread runs the first job");
        let (done_tx, done_rx) = mpsc::channel::<()>();
        for _ in 0..MOST_QUEUED {
            let done = done_tx.clone();
            g.push(Job::Call(Box::new(move |_| {
                let _ = done.send(());
            })))
            .expect("room in the queue");
        }
        let refused = g.push(Job::Call(Box::new(|_| {})));
        let message = refused.expect_err("a full queue refuses").to_string();
        assert!(message.contains("already wait"), "{message}");
        release.send(()).expect("release the thread");
        drop(g);
        drop(done_tx);
        assert_eq!(done_rx.iter().count(), MOST_QUEUED, "every queued job ran");
    }
}
