//! Many clients at once: no lost update, and a slow engine does not stall the
//! event loop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use burrow_core::{Batch, Client, Orm, Storage};
use burrow_http::Server;

use crate::common::*;

#[test]
fn concurrent_clients_lose_no_update() -> TestResult {
    let (server, hosted, _) = open_server();
    hosted.add(&mut Counter { id: 0, value: 0 })?;
    const THREADS: usize = 8;
    const ROUNDS: usize = 25;
    let url = server.url();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let url = url.clone();
            std::thread::spawn(move || -> Result<(), String> {
                let db = remote_engine(
                    burrow_http::RemoteEngine::connect(&url).map_err(|e| e.to_string())?,
                );
                for r in 0..ROUNDS {
                    // Read-modify-write in a transaction: serialised on the server.
                    db.in_transaction(|d| {
                        let mut c: Counter = d.retrieve(1)?;
                        c.value += 1;
                        d.update(&mut c)
                    })
                    .map_err(|e| e.to_string())?;
                    let mut s = sample(1000 + t * ROUNDS + r);
                    db.add(&mut s).map_err(|e| e.to_string())?;
                    if r % 5 == 0 {
                        let mut b = Batch::new();
                        b.add(sample(100_000 + t * ROUNDS + r));
                        db.send(&mut b).map_err(|e| e.to_string())?;
                    }
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "a client panicked")??;
    }
    assert_eq!(
        hosted.retrieve::<Counter>(1)?.value,
        (THREADS * ROUNDS) as i64
    );
    assert_eq!(
        hosted.count::<Sample>("", &[])?,
        (THREADS * ROUNDS + THREADS * ROUNDS / 5) as u64
    );
    Ok(())
}

/// An engine whose retrieve blocks until released: stands for a slow
/// network-bound engine.
struct Slow {
    inner: Arc<dyn Storage>,
    gate: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    /// Reads that reached the engine and wait at the gate.
    waiting: Arc<std::sync::atomic::AtomicUsize>,
}

impl Storage for Slow {
    fn engine_name(&self) -> &'static str {
        "slow"
    }
    fn ensure_table(&self, t: &'static burrow_core::Table) -> burrow_core::Result<()> {
        self.inner.ensure_table(t)
    }
    fn insert(
        &self,
        t: &'static burrow_core::Table,
        id: Option<i64>,
        row: &dyn burrow_core::Fields,
    ) -> burrow_core::Result<i64> {
        self.inner.insert(t, id, row)
    }
    fn update(
        &self,
        t: &'static burrow_core::Table,
        row: &dyn burrow_core::Fields,
        f: Option<&[usize]>,
    ) -> burrow_core::Result<bool> {
        self.inner.update(t, row, f)
    }
    fn delete(&self, t: &'static burrow_core::Table, id: i64) -> burrow_core::Result<bool> {
        self.inner.delete(t, id)
    }
    fn delete_where(
        &self,
        t: &'static burrow_core::Table,
        f: &burrow_core::Filter,
    ) -> burrow_core::Result<u64> {
        self.inner.delete_where(t, f)
    }
    fn retrieve(
        &self,
        t: &'static burrow_core::Table,
        id: i64,
        out: &mut dyn FnMut(&dyn burrow_core::Row) -> burrow_core::Result<()>,
    ) -> burrow_core::Result<bool> {
        let (lock, cv) = &*self.gate;
        let mut open = lock
            .lock()
            .map_err(|_| burrow_core::Error::BadInput("poisoned".into()))?;
        self.waiting
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !*open && Instant::now() < deadline {
            open = cv
                .wait_timeout(open, Duration::from_millis(50))
                .map_err(|_| burrow_core::Error::BadInput("poisoned".into()))?
                .0;
        }
        drop(open);
        self.inner.retrieve(t, id, out)
    }
    fn select(
        &self,
        t: &'static burrow_core::Table,
        s: &burrow_core::Select,
        out: &mut dyn FnMut(&dyn burrow_core::Row) -> burrow_core::Result<()>,
    ) -> burrow_core::Result<()> {
        self.inner.select(t, s, out)
    }
    fn count(
        &self,
        t: &'static burrow_core::Table,
        f: &burrow_core::Filter,
    ) -> burrow_core::Result<u64> {
        self.inner.count(t, f)
    }
    fn select_value(
        &self,
        t: &'static burrow_core::Table,
        c: burrow_core::Column,
        s: &burrow_core::Select,
    ) -> burrow_core::Result<Option<burrow_core::Value>> {
        self.inner.select_value(t, c, s)
    }
    fn begin(&self) -> burrow_core::Result<()> {
        self.inner.begin()
    }
    fn commit(&self) -> burrow_core::Result<()> {
        self.inner.commit()
    }
    fn rollback(&self) -> burrow_core::Result<()> {
        self.inner.rollback()
    }
    fn in_transaction(&self) -> bool {
        self.inner.in_transaction()
    }
}

#[test]
fn a_slow_engine_does_not_stall_the_event_loop_and_shutdown_is_graceful() -> TestResult {
    let (_, sqlite) = hosted();
    let gate = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let waiting = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let slow = Arc::new(Slow {
        inner: sqlite,
        gate: gate.clone(),
        waiting: waiting.clone(),
    });
    let client = Arc::new(Client::open(model(), slow)?);
    client.add(&mut sample(1))?;
    let server = Server::builder(client, "root")
        .no_auth()
        .threads(1)
        .bind("127.0.0.1:0")?;
    let addr = server.local_addr();
    // Several slow requests in flight…
    let pending: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(move || raw(addr, "GET", "/root/Sample/1", "", b"").status))
        .collect();
    // …while the single event-loop thread still answers others.
    for _ in 0..20 {
        let r = raw(addr, "GET", "/root", "", b"SELECT Count(*) FROM Sample");
        assert_eq!(r.json(), serde_json::json!([{"Count(*)":1}]));
    }
    // All four are in the engine (bounded wait): a count of connections
    // could include closed ones the server has not reaped yet.
    let deadline = Instant::now() + Duration::from_secs(10);
    while waiting.load(std::sync::atomic::Ordering::SeqCst) < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(waiting.load(std::sync::atomic::Ordering::SeqCst), 4);
    assert!(server.connections() >= 4);
    // A graceful shutdown lets the requests in flight finish.
    let stopper = std::thread::spawn(move || server.shutdown());
    {
        let (lock, cv) = &*gate;
        *lock.lock().map_err(|_| "poisoned")? = true;
        cv.notify_all();
    }
    for p in pending {
        assert_eq!(p.join().map_err(|_| "panicked")?, 200);
    }
    stopper.join().map_err(|_| "panicked")?;
    assert!(std::net::TcpStream::connect(addr).is_err() || raw_fails(addr));
    Ok(())
}

fn raw_fails(addr: std::net::SocketAddr) -> bool {
    let mut c = RawConn::open(addr);
    c.request("GET", "/root/timestamp", "", b"").is_none()
}
