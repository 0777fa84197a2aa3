//! The connection pool, and transactions pinned to the thread that began them.
//!
//! Hand-rolled rather than `r2d2` or `deadpool`: the engine needs one thing
//! neither offers, a connection *pinned to a thread* for the length of its
//! transaction (that thread's calls find it again; other threads never see
//! it), and a broken pinned connection reported as a lost transaction instead
//! of silently replaced. What is left of a pool is small: a stack of idle
//! connections, a count, and a condition variable, under one `std` mutex that
//! is held only to push or pop (never across a network call).

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use burrow_core::{Error, Result};

use crate::conn::{Conn, DbError, DbErrorKind};

/// Opens a new connection.
pub type Connector = Box<dyn Fn() -> Result<Box<dyn Conn>, DbError> + Send + Sync>;

/// A transaction's connection, parked between the owning thread's calls.
struct Pinned {
    thread: ThreadId,
    /// `None` while the owning thread is using it.
    conn: Option<Box<dyn Conn>>,
}

struct State {
    /// Idle connections and when each was last handed out (`None` for one
    /// that is never checked: [`Conn::in_process`]); the most recent last.
    /// Handed out rather than given back: the time read to check an idle
    /// connection then serves for its next return too, so a call reads the
    /// clock once, not twice. A connection held long is then pinged once more
    /// than needed, never once less.
    idle: Vec<(Box<dyn Conn>, Option<Instant>)>,
    /// Connections alive: idle, in use, or pinned.
    open: usize,
    pinned: Vec<Pinned>,
    /// Threads waiting for a connection. Waking nobody is skipped: a
    /// `notify_one` is a system call even when no thread waits, and it would
    /// be paid on every call.
    waiting: usize,
}

/// A fixed-size pool of connections.
pub struct Pool {
    state: Mutex<State>,
    freed: Condvar,
    connect: Connector,
    size: usize,
    acquire_timeout: Duration,
    check_after_idle: Duration,
    engine: &'static str,
}

/// The calling thread's ID, read once per thread.
pub fn current_thread() -> ThreadId {
    thread_local!(static ID: ThreadId = thread::current().id());
    ID.with(|id| *id)
}

impl Pool {
    pub fn new(
        engine: &'static str,
        connect: Connector,
        size: usize,
        acquire_timeout: Duration,
        check_after_idle: Duration,
    ) -> Self {
        Pool {
            state: Mutex::new(State {
                idle: Vec::new(),
                open: 0,
                pinned: Vec::new(),
                waiting: 0,
            }),
            freed: Condvar::new(),
            connect,
            size,
            acquire_timeout,
            check_after_idle,
            engine,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A connection for the calling thread: its transaction's, if one is open,
    /// else an idle one, a new one, or the first freed within the timeout.
    pub fn acquire(&self) -> Result<Lease<'_>> {
        let me = current_thread();
        let mut deadline = None;
        let mut g = self.lock();
        if let Some(p) = g.pinned.iter_mut().find(|p| p.thread == me) {
            let conn = p.conn.take().ok_or_else(|| {
                Error::Transaction("the transaction's connection is already in use on this thread")
            })?;
            return Ok(Lease {
                pool: self,
                conn: Some(conn),
                pinned: true,
                taken: None,
            });
        }
        loop {
            if let Some((mut conn, used)) = g.idle.pop() {
                let Some(used) = used else {
                    return Ok(self.lease(conn, None));
                };
                let now = Instant::now();
                if now.saturating_duration_since(used) < self.check_after_idle {
                    return Ok(self.lease(conn, Some(now)));
                }
                // Idle for long: check it outside the lock.
                drop(g);
                if !conn.broken() && conn.ping() {
                    return Ok(self.lease(conn, Some(now)));
                }
                drop(conn);
                g = self.lock();
                g.open -= 1;
                continue;
            }
            if g.open < self.size {
                g.open += 1;
                drop(g);
                return match (self.connect)() {
                    Ok(conn) => Ok(self.lease(conn, None)),
                    Err(e) => {
                        self.lock().open -= 1;
                        self.wake();
                        Err(e.into_error(self.engine, None))
                    }
                };
            }
            let now = Instant::now();
            let deadline = *deadline.get_or_insert(now + self.acquire_timeout);
            if now >= deadline {
                return Err(DbError::new(
                    DbErrorKind::Timeout,
                    format!(
                        "no database connection came free within {:?} (pool of {}; raise \
                         pool_size or acquire_timeout)",
                        self.acquire_timeout, self.size
                    ),
                )
                .into_error(self.engine, None));
            }
            g.waiting += 1;
            g = self
                .freed
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            g.waiting -= 1;
        }
    }

    fn lease(&self, conn: Box<dyn Conn>, taken: Option<Instant>) -> Lease<'_> {
        Lease {
            pool: self,
            conn: Some(conn),
            pinned: false,
            taken,
        }
    }

    /// Whether the calling thread has a transaction open.
    pub fn in_transaction(&self) -> bool {
        let me = current_thread();
        self.lock().pinned.iter().any(|p| p.thread == me)
    }

    /// Pins `lease` to the calling thread: its later calls get it back.
    pub fn pin(&self, mut lease: Lease<'_>) {
        let conn = lease.conn.take();
        lease.pinned = true;
        self.lock().pinned.push(Pinned {
            thread: current_thread(),
            conn,
        });
    }

    /// Unpins the calling thread's connection and returns it as a plain lease,
    /// or `None` when the thread has no transaction.
    pub fn unpin(&self) -> Option<Lease<'_>> {
        let me = current_thread();
        let mut g = self.lock();
        let at = g.pinned.iter().position(|p| p.thread == me)?;
        let p = g.pinned.swap_remove(at);
        Some(Lease {
            pool: self,
            conn: p.conn,
            pinned: false,
            taken: None,
        })
    }

    fn give_back(&self, conn: Box<dyn Conn>, pinned: bool, taken: Option<Instant>) {
        let mut g = self.lock();
        if pinned {
            let me = current_thread();
            if let Some(p) = g.pinned.iter_mut().find(|p| p.thread == me) {
                p.conn = Some(conn);
                return;
            }
        }
        let wake = g.waiting > 0;
        if conn.broken() {
            g.open -= 1;
            drop(g);
            drop(conn);
        } else {
            let stamp = (!conn.in_process()).then(|| taken.unwrap_or_else(Instant::now));
            g.idle.push((conn, stamp));
            drop(g);
        }
        if wake {
            self.freed.notify_one();
        }
    }

    fn forget(&self) {
        self.lock().open -= 1;
        self.wake();
    }

    fn wake(&self) {
        if self.lock().waiting > 0 {
            self.freed.notify_one();
        }
    }
}

/// A connection lent to one call; returned to the pool (or to its thread's
/// transaction) when dropped.
pub struct Lease<'p> {
    pool: &'p Pool,
    conn: Option<Box<dyn Conn>>,
    pinned: bool,
    /// When it was handed out, if the clock was read then.
    taken: Option<Instant>,
}

impl Lease<'_> {
    /// The connection.
    pub fn conn(&mut self) -> &mut dyn Conn {
        self.conn
            .as_deref_mut()
            .expect("a lease holds its connection")
    }

    /// Whether it belongs to a transaction of the calling thread.
    pub fn in_transaction(&self) -> bool {
        self.pinned
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        match self.conn.take() {
            Some(conn) => self.pool.give_back(conn, self.pinned, self.taken),
            // Unpinned with no connection: a transaction whose connection was
            // taken (never happens), or a lease emptied by `pin`.
            None if !self.pinned => self.pool.forget(),
            None => {}
        }
    }
}
