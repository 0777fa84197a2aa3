//! The connection pool.
//!
//! Hand-rolled rather than `r2d2` or `deadpool`: the engine needs a
//! connection handed out as an owned value for a transaction's whole life
//! (its [`crate::SqlTx`] carries it, to whichever thread it moves), a wait
//! for a free one bounded by the engine's lock timeout and reported as
//! [`Error::Busy`], and an in-process connection never pinged nor timed.
//! What is left of a pool is small: a stack of idle connections, a count,
//! and a condition variable, under one `std` mutex that is held only to push
//! or pop (never across a network call).

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use burrow_core::{Error, Result};

use crate::conn::Conn;
use crate::ENGINE;

/// Opens a new connection.
pub type Connector = Box<dyn Fn() -> Result<Box<dyn Conn>, crate::conn::DbError> + Send + Sync>;

struct State {
    /// Idle connections and when each was last handed out (`None` for one
    /// that is never checked: [`Conn::in_process`]); the most recent last.
    /// Handed out rather than given back: the time read to check an idle
    /// connection then serves for its next return too, so a call reads the
    /// clock once, not twice. A connection held long is then pinged once more
    /// than needed, never once less.
    idle: Vec<(Box<dyn Conn>, Option<Instant>)>,
    /// Connections alive: idle or handed out.
    open: usize,
    /// Callers waiting for a connection. Waking nobody is skipped: a
    /// `notify_one` is a system call even when no thread waits, and it would
    /// be paid on every call.
    waiting: usize,
}

/// A connection taken out of the pool, and when (if the clock was read then).
pub struct Pooled {
    pub conn: Box<dyn Conn>,
    taken: Option<Instant>,
}

/// A fixed-size pool of connections.
pub struct Pool {
    state: Mutex<State>,
    freed: Condvar,
    connect: Connector,
    size: usize,
    lock_timeout: Duration,
    check_after_idle: Duration,
    /// The engine's name, for [`Error::Busy`].
    engine: &'static str,
}

impl Pool {
    pub fn new(
        engine: &'static str,
        connect: Connector,
        size: usize,
        lock_timeout: Duration,
        check_after_idle: Duration,
    ) -> Self {
        Pool {
            state: Mutex::new(State {
                idle: Vec::new(),
                open: 0,
                waiting: 0,
            }),
            freed: Condvar::new(),
            connect,
            size,
            lock_timeout,
            check_after_idle,
            engine,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A connection lent to one call, back in the pool when the lease drops.
    pub fn acquire(&self) -> Result<Lease<'_>> {
        Ok(Lease {
            pool: self,
            pooled: Some(self.take()?),
            _mark: burrow_core::driver::Holding::new(self),
        })
    }

    /// An idle connection, a new one, or the first freed within the lock
    /// timeout; then [`Error::Busy`] (every connection held, typically by open
    /// transactions). The caller hands it back with [`Pool::give_back`] or
    /// [`Pool::discard`].
    pub fn take(&self) -> Result<Pooled> {
        let mut started = None;
        let mut g = self.lock();
        loop {
            if let Some((mut conn, used)) = g.idle.pop() {
                let Some(used) = used else {
                    return Ok(Pooled { conn, taken: None });
                };
                let now = Instant::now();
                if now.saturating_duration_since(used) < self.check_after_idle {
                    return Ok(Pooled {
                        conn,
                        taken: Some(now),
                    });
                }
                // Idle for long: check it outside the lock.
                drop(g);
                if !conn.broken() && conn.ping() {
                    return Ok(Pooled {
                        conn,
                        taken: Some(now),
                    });
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
                    Ok(conn) => Ok(Pooled { conn, taken: None }),
                    Err(e) => {
                        self.forget();
                        Err(e.into_error(ENGINE, None))
                    }
                };
            }
            // Every connection lent to calls of this thread (a row callback
            // of a read calling the engine again): no other caller can give
            // one back, and the wait would only end at the timeout.
            if burrow_core::driver::held(self) >= self.size {
                return Err(burrow_core::driver::nested(self.engine));
            }
            let now = Instant::now();
            let start = *started.get_or_insert(now);
            let waited = now.saturating_duration_since(start);
            if waited >= self.lock_timeout {
                return Err(Error::Busy {
                    engine: self.engine,
                    waited,
                });
            }
            g.waiting += 1;
            g = self
                .freed
                .wait_timeout(g, self.lock_timeout - waited)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            g.waiting -= 1;
        }
    }

    /// Returns a connection to the idle stack, or closes it if it is broken.
    pub fn give_back(&self, p: Pooled) {
        if p.conn.broken() {
            return self.discard(p);
        }
        let stamp = (!p.conn.in_process()).then(|| p.taken.unwrap_or_else(Instant::now));
        let mut g = self.lock();
        g.idle.push((p.conn, stamp));
        let wake = g.waiting > 0;
        drop(g);
        if wake {
            self.freed.notify_one();
        }
    }

    /// Closes a connection whose state is unknown (a failed rollback), making
    /// room for a new one.
    pub fn discard(&self, p: Pooled) {
        drop(p);
        self.forget();
    }

    fn forget(&self) {
        let mut g = self.lock();
        g.open -= 1;
        let wake = g.waiting > 0;
        drop(g);
        if wake {
            self.freed.notify_one();
        }
    }
}

/// A connection lent to one call; returned to the pool when dropped.
pub struct Lease<'p> {
    pool: &'p Pool,
    /// Always `Some` until dropped.
    pooled: Option<Pooled>,
    /// Marks the pool as lending a connection to this thread's call, which
    /// may run a caller's row callback ([`Pool::take`] refuses to wait for
    /// itself).
    _mark: burrow_core::driver::Holding,
}

impl Lease<'_> {
    /// The connection.
    pub fn conn(&mut self) -> &mut dyn Conn {
        &mut *self
            .pooled
            .as_mut()
            .expect("a lease holds its connection until dropped")
            .conn
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.pooled.take() {
            self.pool.give_back(p);
        }
    }
}

#[cfg(test)]
mod test {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use burrow_core::{ErrorKind, ValueRef};

    use super::*;
    use crate::conn::{DbError, QueryError, RowFn};

    /// A connection that answers nothing, counting how many are alive.
    struct Dummy(Arc<AtomicUsize>);

    impl Drop for Dummy {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::Relaxed);
        }
    }

    impl Conn for Dummy {
        fn execute(&mut self, _: &str, _: &[ValueRef<'_>], _: bool) -> Result<u64, DbError> {
            Ok(0)
        }
        fn query(
            &mut self,
            _: &str,
            _: &[ValueRef<'_>],
            _: bool,
            _: &mut RowFn<'_>,
        ) -> Result<(), QueryError> {
            Ok(())
        }
        fn simple(&mut self, _: &str) -> Result<(), DbError> {
            Ok(())
        }
        fn last_insert_id(&mut self) -> i64 {
            0
        }
        fn broken(&self) -> bool {
            false
        }
        fn ping(&mut self) -> bool {
            true
        }
    }

    fn pool(size: usize, timeout: Duration) -> (Pool, Arc<AtomicUsize>) {
        let alive = Arc::new(AtomicUsize::new(0));
        let a = alive.clone();
        let connect: Connector = Box::new(move || {
            a.fetch_add(1, Ordering::Relaxed);
            Ok(Box::new(Dummy(a.clone())) as Box<dyn Conn>)
        });
        let p = Pool::new("test", connect, size, timeout, Duration::from_secs(30));
        (p, alive)
    }

    #[test]
    fn full_pool_is_busy_after_the_timeout_then_free_again() -> Result<()> {
        let timeout = Duration::from_millis(50);
        let (p, alive) = pool(1, timeout);
        let held = p.take()?;
        let start = Instant::now();
        match p.acquire() {
            Err(e @ Error::Busy { .. }) => assert_eq!(e.kind(), ErrorKind::Busy),
            Err(e) => panic!("expected Busy, got {e}"),
            Ok(_) => panic!("a second connection beyond the pool's size"),
        }
        assert!(start.elapsed() >= timeout);
        p.give_back(held);
        drop(p.acquire()?);
        assert_eq!(
            alive.load(Ordering::Relaxed),
            1,
            "the one connection reused"
        );
        Ok(())
    }

    #[test]
    fn a_thread_holding_every_lent_connection_is_refused_at_once() -> Result<()> {
        let timeout = Duration::from_secs(30);
        let (p, _) = pool(2, timeout);
        let first = p.acquire()?;
        let second = p.acquire()?;
        let start = Instant::now();
        match p.acquire() {
            Err(e @ Error::BadInput(_)) => assert!(e.to_string().contains("row callback"), "{e}"),
            Err(e) => panic!("expected BadInput, got {e}"),
            Ok(_) => panic!("a third connection beyond the pool's size"),
        }
        assert!(start.elapsed() < timeout, "refused without waiting");
        drop(second);
        drop(p.acquire()?);
        // Another thread, holding none, waits for one as before.
        std::thread::scope(|s| {
            let held = p.acquire().expect("the second connection");
            let waiter = s.spawn(|| p.acquire().map(drop));
            std::thread::sleep(Duration::from_millis(20));
            drop(held);
            waiter.join().expect("waiter panicked")
        })?;
        drop(first);
        Ok(())
    }

    #[test]
    fn a_waiter_gets_the_connection_given_back() -> Result<()> {
        let (p, _) = pool(1, Duration::from_secs(10));
        let held = p.take()?;
        std::thread::scope(|s| {
            let waiter = s.spawn(|| p.acquire().map(drop));
            std::thread::sleep(Duration::from_millis(20));
            p.give_back(held);
            waiter.join().expect("waiter panicked")
        })
    }

    #[test]
    fn a_discarded_connection_makes_room() -> Result<()> {
        let (p, alive) = pool(1, Duration::from_millis(10));
        let held = p.take()?;
        p.discard(held);
        assert_eq!(alive.load(Ordering::Relaxed), 0);
        drop(p.acquire()?);
        assert_eq!(alive.load(Ordering::Relaxed), 1);
        Ok(())
    }
}
