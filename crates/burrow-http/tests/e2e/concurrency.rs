//! Many clients at once: no lost update, and a slow engine does not stall the
//! event loop.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use burrow_core::{
    Batch, Caps, Column, Database, EngineTx, ErrorKind, Fields, Filter, Orm, Result, Row, RowOps,
    Select, Storage, Table, Value,
};
use burrow_http::{RemoteEngine, Server};
use burrow_sqlite::{SqliteEngine, SqliteOptions};

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

/// An engine in front of the tests' SQLite: it declares `caps`; its
/// retrieve waits at `gate`, when it has one, until the gate opens (a slow
/// network-bound engine); with `loose`, its transactions exclude nothing
/// (an engine that locks rows rather than itself).
struct Wrapped {
    inner: Arc<dyn Storage>,
    caps: Caps,
    gate: Option<Gate>,
    loose: bool,
}

/// A gate, open once its flag is set.
type Gate = Arc<(Mutex<bool>, Condvar)>;

/// Implements [`RowOps`] for `$ty` by calling the same on `self.$to`.
macro_rules! forward_row_ops {
    ($ty:ty, $to:ident, |$s:ident, $t:ident, $id:ident, $out:ident| $retrieve:expr) => {
        impl RowOps for $ty {
            fn insert(&self, t: &'static Table, id: Option<i64>, row: &dyn Fields) -> Result<i64> {
                self.$to.insert(t, id, row)
            }
            fn update(
                &self,
                t: &'static Table,
                row: &dyn Fields,
                f: Option<&[usize]>,
            ) -> Result<bool> {
                self.$to.update(t, row, f)
            }
            fn delete(&self, t: &'static Table, id: i64) -> Result<bool> {
                self.$to.delete(t, id)
            }
            fn delete_where(&self, t: &'static Table, f: &Filter) -> Result<u64> {
                self.$to.delete_where(t, f)
            }
            fn retrieve(
                &self,
                $t: &'static Table,
                $id: i64,
                $out: &mut dyn FnMut(&dyn Row) -> Result<()>,
            ) -> Result<bool> {
                let $s = self;
                $retrieve
            }
            fn select(
                &self,
                t: &'static Table,
                s: &Select,
                out: &mut dyn FnMut(&dyn Row) -> Result<()>,
            ) -> Result<()> {
                self.$to.select(t, s, out)
            }
            fn count(&self, t: &'static Table, f: &Filter) -> Result<u64> {
                self.$to.count(t, f)
            }
            fn select_value(
                &self,
                t: &'static Table,
                c: Column,
                s: &Select,
            ) -> Result<Option<Value>> {
                self.$to.select_value(t, c, s)
            }
        }
    };
}

forward_row_ops!(Wrapped, inner, |w, t, id, out| {
    if let Some(gate) = &w.gate {
        let (lock, cv) = &**gate;
        let open = lock
            .lock()
            .map_err(|_| burrow_core::Error::BadInput("poisoned".into()))?;
        WAITING.fetch_add(1, SeqCst);
        // Bounded: a test that fails must not hang.
        let _open = cv
            .wait_timeout_while(open, Duration::from_secs(10), |open| !*open)
            .map_err(|_| burrow_core::Error::BadInput("poisoned".into()))?;
    }
    w.inner.retrieve(t, id, out)
});

/// Retrieves that reached a gated [`Wrapped`] engine (one test uses one).
static WAITING: AtomicUsize = AtomicUsize::new(0);

impl Storage for Wrapped {
    fn caps(&self) -> Caps {
        self.caps
    }
    fn ensure_table(&self, t: &'static Table) -> Result<()> {
        self.inner.ensure_table(t)
    }
    fn begin(self: Arc<Self>) -> Result<Box<dyn EngineTx>> {
        if self.loose {
            Ok(Box::new(LooseTx { engine: self }))
        } else {
            self.inner.clone().begin()
        }
    }
}

/// A transaction of a loose [`Wrapped`] engine: its calls are the
/// engine's, and nothing waits for it.
struct LooseTx {
    engine: Arc<Wrapped>,
}

forward_row_ops!(LooseTx, engine, |x, t, id, out| x
    .engine
    .retrieve(t, id, out));

impl EngineTx for LooseTx {
    fn commit(self: Box<Self>) -> Result<()> {
        Ok(())
    }
    fn rollback(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

#[test]
fn a_slow_engine_does_not_stall_the_event_loop_and_shutdown_is_graceful() -> TestResult {
    let (_, sqlite) = hosted();
    let gate: Gate = Arc::new((Mutex::new(false), Condvar::new()));
    let slow = Arc::new(Wrapped {
        inner: sqlite,
        caps: Caps::network("slow"),
        gate: Some(gate.clone()),
        loose: false,
    });
    let client = Arc::new(Database::open(model(), slow)?);
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
    while WAITING.load(SeqCst) < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(WAITING.load(SeqCst), 4);
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

/// Threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

#[test]
fn open_remote_transactions_take_no_thread_each() -> TestResult {
    // Threads are counted per process, and tests run side by side: the count
    // runs in a process of its own, with this test alone.
    const CHILD: &str = "BURROW_HTTP_COUNT_THREADS";
    if std::env::var_os(CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe()?)
            .args([
                "--exact",
                "concurrency::open_remote_transactions_take_no_thread_each",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return Ok(());
    }
    let (_, sqlite) = hosted();
    let loose = Arc::new(Wrapped {
        inner: sqlite,
        caps: Caps::in_process("loose"),
        gate: None,
        loose: true,
    });
    let hosted = Arc::new(Database::open(model(), loose)?);
    let server = Server::builder(hosted.clone(), "root")
        .no_auth()
        .transactions(burrow_http::TxLimits {
            max_open: 32,
            ..Default::default()
        })
        .bind("127.0.0.1:0")?;
    let db = remote(&server);
    // Once, so that the server's pool has a thread for what follows.
    db.in_transaction(|tx| tx.add(&mut sample(0)))?;
    let before = threads();
    const TXS: usize = 20;
    // Open at once, each on a connection of its own, and each writing.
    let txs = (1..=TXS)
        .map(|i| {
            let tx = db.transaction()?;
            tx.add(&mut sample(i))?;
            Ok(tx)
        })
        .collect::<Result<Vec<_>>>()?;
    let during = threads();
    assert!(server.connections() >= TXS);
    for tx in txs {
        tx.commit()?;
    }
    assert_eq!(count(&*hosted), TXS as u64 + 1);
    // A thread per transaction would add TXS; the server's blocking pool
    // may add a few, for calls that overlapped.
    assert!(
        during < before + TXS / 2,
        "{before} threads before {TXS} open transactions, {during} with them"
    );
    Ok(())
}

#[test]
fn a_begin_that_waits_too_long_is_busy_and_the_event_loop_answers_meanwhile() -> TestResult {
    let timeout = Duration::from_secs(2);
    let sqlite = Arc::new(SqliteEngine::open(
        SqliteOptions::memory().busy_timeout(timeout),
    )?);
    let hosted = Arc::new(Database::open(model(), sqlite)?);
    let server = Server::builder(hosted, "root")
        .no_auth()
        .threads(1)
        .bind("127.0.0.1:0")?;
    let addr = server.local_addr();
    let db = Database::open(model(), Arc::new(RemoteEngine::connect(&server.url())?))?;
    let holder = db.transaction()?;
    holder.add(&mut sample(1))?;
    let db = &db;
    std::thread::scope(|s| -> TestResult {
        let (sent, requests_sent) = mpsc::channel();
        // A second transaction of the same client, and one of a raw
        // connection, each wait for the first on the server.
        let sent2 = sent.clone();
        let same_client = s.spawn(move || {
            let _ = sent2.send(());
            db.transaction().err().map(|e| e.kind())
        });
        let raw_begin = s.spawn(move || {
            let mut c = RawConn::open(addr);
            let started = Instant::now();
            c.send(b"BEGIN /root HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n");
            let _ = sent.send(());
            (c.read(), started.elapsed())
        });
        requests_sent.recv()?;
        requests_sent.recv()?;
        // Meanwhile the server's one event-loop thread answers others.
        let r = raw(addr, "GET", "/root/timestamp", "", b"");
        assert_eq!(r.status, 200);
        assert!(!raw_begin.is_finished() && !same_client.is_finished());
        let (r, waited) = raw_begin.join().map_err(|_| "panicked")?;
        let r = r.ok_or("no answer to the BEGIN")?;
        assert_error(&r, 503);
        assert_eq!(r.json()["waited"], 2000, "{}", r.text());
        assert!(waited >= timeout);
        assert_eq!(
            same_client.join().map_err(|_| "panicked")?,
            Some(ErrorKind::Busy)
        );
        Ok(())
    })?;
    // The first transaction is unharmed, and once it ends, the next begins.
    assert_eq!(count(&holder), 1);
    holder.commit()?;
    let mut c = RawConn::open(addr);
    assert_eq!(
        c.request("BEGIN", "/root", "", b"").map(|r| r.status),
        Some(200)
    );
    assert_eq!(
        c.request("ABORT", "/root", "", b"").map(|r| r.status),
        Some(200)
    );
    Ok(())
}
