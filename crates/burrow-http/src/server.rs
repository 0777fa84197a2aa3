//! The REST server: the mORMot REST protocol as a handler of the server core
//! ([`crate::web`]), and the engines' synchronous calls run where they
//! cannot stall its event loop.
//!
//! # Where calls run
//!
//! - **Inline**, on the event loop's thread, for in-process engines
//!   ([`Placement::InProcess`]) while no remote transaction is open, and
//!   only if the call cannot wait: it runs with waits refused
//!   ([`burrow_core::driver::without_waiting`]), so an engine whose lock is
//!   taken (by a long call, a transaction, a backup step) refuses at once,
//!   having done nothing, and the request runs again **aside**. A short
//!   call costs microseconds, less than a hand-off to another thread.
//! - **Long work** is refused inline the same way, before any engine call,
//!   and runs aside: batches of 64 KiB or more (and batches that would
//!   commit in more than one part, which a second run would apply twice),
//!   lists without a `results=` of at most a page, counts, deletes by
//!   WHERE, backups. So a slow request never holds an event-loop thread:
//!   the requests of the other connections on it go on.
//! - **Aside** (in-process engines, and calls made while a remote
//!   transaction is open): on the request's own thread once it has handed
//!   its event loop to another thread (`tokio::task::block_in_place`; the
//!   server's runtime is multi-threaded), where the request's data is still
//!   in cache: a 10,000-row batch is applied as fast as inline, where a trip
//!   to the blocking pool cost it a fifth. Logins (Argon2) go to the pool.
//! - On tokio's **blocking pool** for other engines (network-bound ones),
//!   and for calls through a connection's transaction that cannot run
//!   inline (the transaction goes there with the request and comes back).
//! - **Large lists** (more rows than a page; by ID or in no order; outside
//!   a transaction) are read a page at a time, by ascending (or descending)
//!   ID, each page past the last ID written, aside, and streamed
//!   ([`crate::web::BodyStream`]): the next page is read once the last is
//!   written, so an answer holds about [`ServerBuilder::list_piece_bytes`]
//!   however long the list, a slow reader slows only its own list, and the
//!   engine's lock is held for one page at a time. A row that exists
//!   throughout shows exactly once; the JSON is that of the list written
//!   whole.
//! - **Transactions**: `BEGIN` opens a [`burrow_core::Transaction`] on the
//!   blocking pool (it may wait for another one) and the connection keeps it
//!   between requests; each later request of that connection runs through
//!   it, on the pool, until `END` (commit) or `ABORT`. No thread is tied to
//!   a transaction. A connection that closes (or times out) with a
//!   transaction open drops it, which rolls it back (on the blocking pool
//!   unless every engine is in-process).
//! - **Bounds**: an open transaction holds its engines' write locks, so
//!   every other writer waits while it is open. `BEGIN` needs an
//!   authenticated user with a write right on some table (when
//!   authentication is on), and [`TxLimits`] bounds how many are open at
//!   once (503 beyond), how long a connection holding one may stay silent
//!   (it is then closed, rolling back) and how long one may stay open at all
//!   (then it is rolled back: a connection waiting for its next request is
//!   closed, and a request that finds its transaction expired gets 408).
//!
//! A large batch body (outside a remote transaction, with in-process engines)
//! is also parsed on the server's **parser thread**, started with the server,
//! while the request's thread applies the rows already parsed, inside a
//! transaction committed only once the whole body has parsed (and rolled back
//! should that thread panic). One body at a time: a body arriving while the
//! parser is busy is parsed on its own request's thread, then applied.
//!
//! # Connections
//!
//! The REST protocol is one [`Handler`] on the server core
//! ([`crate::web`]), which owns the connections: keep-alive, pipelining,
//! limits ([`Limits`]), the `Date` header, TLS and graceful shutdown. The
//! handler authenticates a request from its head ([`Handler::admit`]), so
//! a request without valid credentials is refused before its body is read,
//! keeps a connection's open transaction in its per-connection state, and
//! adds `Server-InternalState` to every response.
use std::io;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use burrow_core::{Database, Error, OrmCache, Placement, Result, Transaction};

use crate::admin::Backups;
use crate::auth::{Auth, Principal};
use crate::rest::{self, RestRequest};
use crate::web::{Handler, Headers, HttpServer, Limits, Request, RequestHead, Response};

/// Where engine calls run; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Execution {
    /// Inline when every engine is in-process ([`Placement::InProcess`]),
    /// else the pool.
    #[default]
    Auto,
    /// Always on the event loop's thread (when no transaction is open).
    Inline,
    /// Always on the blocking pool.
    Pool,
}

/// Keeps inline calls out of the way of remote transactions.
pub(crate) struct TxGate {
    open: AtomicUsize,
    lock: RwLock<()>,
}

impl TxGate {
    /// Runs `f` here if no remote transaction is open or beginning.
    fn try_inline<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        if self.open.load(Ordering::SeqCst) != 0 {
            return None;
        }
        let _g = self.lock.try_read().ok()?;
        if self.open.load(Ordering::SeqCst) != 0 {
            return None;
        }
        Some(f())
    }

    /// Called before a remote transaction begins (off the event loop): from
    /// now on calls go to the pool, and the inline ones under way finish
    /// first. Inline calls come back when the ticket is dropped.
    fn opening(sh: &Arc<Shared>) -> GateTicket {
        sh.gate.open.fetch_add(1, Ordering::SeqCst);
        drop(sh.gate.lock.write());
        GateTicket(sh.clone())
    }
}

/// Keeps inline calls off while a remote transaction is open or beginning.
struct GateTicket(Arc<Shared>);

impl Drop for GateTicket {
    fn drop(&mut self) {
        self.0.gate.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Bounds on the transactions clients open with `BEGIN`; see the module
/// documentation.
#[derive(Debug, Clone)]
pub struct TxLimits {
    /// Transactions open at once, server-wide; one more `BEGIN` gets 503.
    pub max_open: usize,
    /// How long the connection of an open transaction may send nothing;
    /// then it is closed and the transaction rolled back.
    pub idle_timeout: Duration,
    /// How long a transaction may stay open; then it is rolled back.
    pub max_lifetime: Duration,
}

impl Default for TxLimits {
    /// 16 open, 5 s idle (the engines' default lock timeout: a writer
    /// waiting behind a silent transaction gives up about then anyway),
    /// 60 s in all.
    fn default() -> Self {
        TxLimits {
            max_open: 16,
            idle_timeout: Duration::from_secs(5),
            max_lifetime: Duration::from_secs(60),
        }
    }
}

/// A connection's open transaction.
struct OpenTx {
    /// Declared first: dropped, it rolls back before inline calls resume
    /// and before its slot is given back.
    tx: Transaction<'static>,
    ticket: GateTicket,
    slot: TxSlot,
    opened: Instant,
}

/// One of the [`TxLimits::max_open`] transactions, held from `BEGIN` until
/// the transaction ends.
struct TxSlot(Arc<Shared>);

impl TxSlot {
    fn take(sh: &Arc<Shared>) -> Option<TxSlot> {
        let max = sh.tx_limits.max_open;
        sh.open_txs
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| TxSlot(sh.clone()))
    }
}

impl Drop for TxSlot {
    fn drop(&mut self) {
        self.0.open_txs.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What every connection shares.
pub(crate) struct Shared {
    pub client: Arc<Database>,
    pub root: String,
    pub auth: Option<Auth>,
    pub cache: OrmCache,
    /// Backups over HTTP, when a folder was set.
    pub backups: Option<Backups>,
    /// `Server-InternalState`: grows on every write.
    pub state: AtomicU64,
    pub compact: bool,
    /// Every engine is in-process ([`Placement::InProcess`]).
    pub local_engines: bool,
    /// Parses large batch bodies while the request's thread applies them
    /// (see [`crate::batch::parse_and_run`]). Started with the server, not
    /// per request: a thread that is woken gets a core sooner, on a busy
    /// machine, than a new one.
    pub parser: Option<Worker>,
    /// Batches applied while their body was still being parsed.
    pub ran_ahead: AtomicU64,
    /// The size a large list's answer is written in pieces of.
    pub list_piece_bytes: usize,
    /// What parsed batch bodies hold, server-wide.
    pub batch_memory: Arc<crate::allowance::Allowance>,
    inline: bool,
    gate: TxGate,
    tx_limits: TxLimits,
    /// Transactions open or beginning (see [`TxSlot`]).
    open_txs: AtomicUsize,
}

/// The REST protocol, as a handler of the server core.
pub(crate) struct Rest(Arc<Shared>);

/// A REST connection's state.
#[derive(Default)]
pub(crate) struct RestConn {
    /// Who sent the request being handled, identified from its head.
    who: Option<Principal>,
    /// The transaction `BEGIN` opened on this connection.
    tx: Option<OpenTx>,
}

impl Drop for RestConn {
    fn drop(&mut self) {
        let Some(open) = self.tx.take() else {
            return;
        };
        // The client left with its transaction open: undo it. An engine that
        // may answer over a network does it off the event loop.
        let sh = open.ticket.0.clone();
        let local = sh.local_engines;
        let undo = move || {
            let OpenTx {
                tx, ticket, slot, ..
            } = open;
            rest::end(&sh, tx, false);
            drop(ticket);
            drop(slot);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) if !local => {
                rt.spawn_blocking(undo);
            }
            _ => undo(),
        }
    }
}

impl Handler for Rest {
    type Conn = RestConn;

    fn admit(
        &self,
        conn: &mut RestConn,
        head: &RequestHead<'_>,
    ) -> std::result::Result<(), Response> {
        conn.who = Some(rest::authenticate(&self.0, head)?);
        Ok(())
    }

    async fn call(&self, conn: &mut RestConn, req: Request) -> Response {
        let who = match conn.who.take() {
            Some(who) => who,
            None => match rest::authenticate(&self.0, &req) {
                Ok(who) => who,
                Err(r) => return r,
            },
        };
        dispatch(&self.0, RestRequest::new(req), who, &mut conn.tx).await
    }

    fn idle_timeout(&self, conn: &RestConn) -> Option<Duration> {
        let open = conn.tx.as_ref()?;
        let l = &self.0.tx_limits;
        Some(
            l.idle_timeout
                .min(l.max_lifetime.saturating_sub(open.opened.elapsed())),
        )
    }

    fn extra_headers(&self, out: &mut Headers<'_>) {
        out.number("Server-InternalState", self.0.state.load(Ordering::Relaxed));
    }
}

/// Configures a [`Server`]; see [`Server::builder`].
pub struct ServerBuilder {
    client: Arc<Database>,
    root: String,
    auth: Option<Option<Auth>>,
    cache: OrmCache,
    limits: Limits,
    tx_limits: TxLimits,
    compact: bool,
    execution: Execution,
    threads: Option<usize>,
    server_name: Option<String>,
    backup_folder: Option<std::path::PathBuf>,
    list_piece_bytes: usize,
    batch_bytes_in_flight: usize,
    #[cfg(feature = "tls")]
    tls: Option<(Vec<u8>, Vec<u8>)>,
}

impl ServerBuilder {
    /// Serves HTTPS with this certificate chain and private key, both PEM
    /// (checked when the server binds: a bad one is [`Error::BadInput`]).
    #[cfg(feature = "tls")]
    pub fn tls(mut self, cert_chain_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> Self {
        self.tls = Some((cert_chain_pem.into(), key_pem.into()));
        self
    }

    /// Lets administrators (see [`crate::Group::admin`]) back up an engine
    /// over HTTP into `folder` (created if missing when the server binds),
    /// and only there: see `POST /{root}/_backup` in the protocol
    /// documentation. Off by default.
    pub fn backup_folder(mut self, folder: impl Into<std::path::PathBuf>) -> Self {
        self.backup_folder = Some(folder.into());
        self
    }

    /// Requires authentication with these users, groups and schemes.
    pub fn auth(mut self, auth: Auth) -> Self {
        self.auth = Some(Some(auth));
        self
    }

    /// Serves everyone with every right. Must be chosen explicitly: a server
    /// without [`ServerBuilder::auth`] or this refuses to start.
    pub fn no_auth(mut self) -> Self {
        self.auth = Some(None);
        self
    }

    /// Answers retrieve-by-ID from this cache (writes through the server
    /// keep it right).
    pub fn cache(mut self, cache: OrmCache) -> Self {
        self.cache = cache;
        self
    }

    /// Sets the limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the bounds on clients' transactions (`BEGIN` … `END`).
    pub fn transactions(mut self, limits: TxLimits) -> Self {
        self.tx_limits = limits;
        self
    }

    /// Answers every list in the compact form (mORMot clients always get it).
    pub fn compact_lists(mut self, on: bool) -> Self {
        self.compact = on;
        self
    }

    /// The most a piece of a large list, read and written at once, holds
    /// (default 1 MiB, at least 1 byte): a list answer holds about one piece
    /// in memory at a time (one row at least), whatever its length. Pieces
    /// start at 16 KiB and grow to at most 128 KiB below this bound, so that
    /// a client reads one while the next is made. See the module
    /// documentation.
    pub fn list_piece_bytes(mut self, n: usize) -> Self {
        self.list_piece_bytes = n.max(1);
        self
    }

    /// The most memory batch bodies may hold once parsed, server-wide
    /// (default 1 GiB). A body parses to several times its size, and to
    /// tens of times for rows that name few fields of a wide table (each
    /// write holds a value for every field), so [`Limits`]' allowance for
    /// bodies in flight does not bound it. What a body's writes hold is
    /// counted as they are parsed: past this bound the batch is refused
    /// before any of it runs, 503 (retry later) when the other batches in
    /// flight leave no room, 413 when it alone would not fit.
    pub fn batch_bytes_in_flight(mut self, n: usize) -> Self {
        self.batch_bytes_in_flight = n;
        self
    }

    /// Where engine calls run.
    pub fn execution(mut self, e: Execution) -> Self {
        self.execution = e;
        self
    }

    /// Event-loop threads (default: one per core).
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = Some(n);
        self
    }

    /// The `Server` header's value.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Binds `addr` (e.g. `127.0.0.1:0`) and starts serving.
    pub fn bind(self, addr: impl std::net::ToSocketAddrs) -> Result<Server> {
        let Some(mut auth) = self.auth else {
            return Err(Error::BadInput(
                "choose access control: ServerBuilder::auth(...) or, explicitly, no_auth()".into(),
            ));
        };
        if let Some(a) = &mut auth {
            a.seal();
        }
        let local_engines = self
            .client
            .engines()
            .iter()
            .all(|e| e.caps().placement == Placement::InProcess);
        let inline = match self.execution {
            Execution::Auto => local_engines,
            Execution::Inline => true,
            Execution::Pool => false,
        };
        let backups = self
            .backup_folder
            .as_deref()
            .map(Backups::new)
            .transpose()?;
        let shared = Arc::new(Shared {
            client: self.client,
            root: self.root,
            auth,
            cache: self.cache,
            backups,
            state: AtomicU64::new(1),
            compact: self.compact,
            local_engines,
            parser: Worker::start("burrow-parse").ok(),
            inline,
            gate: TxGate {
                open: AtomicUsize::new(0),
                lock: RwLock::new(()),
            },
            ran_ahead: AtomicU64::new(0),
            list_piece_bytes: self.list_piece_bytes,
            batch_memory: Arc::new(crate::allowance::Allowance::new(self.batch_bytes_in_flight)),
            tx_limits: self.tx_limits,
            open_txs: AtomicUsize::new(0),
        });
        let mut core = HttpServer::builder(Rest(shared.clone())).limits(self.limits);
        if let Some(n) = self.threads {
            core = core.threads(n);
        }
        if let Some(name) = self.server_name {
            core = core.server_name(name);
        }
        #[cfg(feature = "tls")]
        if let Some((cert, key)) = self.tls {
            core = core.tls(cert, key);
        }
        Ok(Server {
            core: core.bind(addr)?,
            shared,
        })
    }
}

/// A running server. Dropping it shuts it down gracefully.
pub struct Server {
    core: HttpServer<Rest>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.core.local_addr())
            .field("root", &self.shared.root)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Serves `client` at `/{root}`.
    pub fn builder(client: Arc<Database>, root: impl Into<String>) -> ServerBuilder {
        ServerBuilder {
            client,
            root: root.into().trim_matches('/').to_owned(),
            auth: None,
            cache: OrmCache::new(),
            limits: Limits::default(),
            tx_limits: TxLimits::default(),
            compact: false,
            execution: Execution::Auto,
            threads: None,
            server_name: None,
            backup_folder: None,
            list_piece_bytes: 1 << 20,
            batch_bytes_in_flight: 1 << 30,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// How many clients' transactions are open (or beginning) now.
    pub fn transactions_open(&self) -> usize {
        self.shared.open_txs.load(Ordering::SeqCst)
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.core.local_addr()
    }

    /// The base URL clients connect to: `http://{addr}/{root}`, or `https://`
    /// with TLS.
    pub fn url(&self) -> String {
        format!(
            "{}://{}/{}",
            self.core.scheme(),
            self.core.local_addr(),
            self.shared.root
        )
    }

    /// The server-side cache.
    pub fn cache(&self) -> &OrmCache {
        &self.shared.cache
    }

    /// The `Server-InternalState` counter.
    pub fn internal_state(&self) -> u64 {
        self.shared.state.load(Ordering::Relaxed)
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.core.connections()
    }

    /// The most response bytes a connection has held unwritten, when that
    /// went past 64 KiB (else 0): for tests of the bounds on answers.
    #[doc(hidden)]
    pub fn peak_pending_output(&self) -> usize {
        self.core.peak_pending_output()
    }

    /// Large batches applied while their body was still being parsed, on
    /// the server's parser thread (the others were parsed, then applied).
    pub fn batches_run_ahead(&self) -> u64 {
        self.shared.ran_ahead.load(Ordering::Relaxed)
    }

    /// Bytes that parsed batch bodies hold now (see
    /// [`ServerBuilder::batch_bytes_in_flight`]).
    pub fn batch_bytes_in_flight(&self) -> usize {
        self.shared.batch_memory.used()
    }

    /// Stops accepting, lets requests in flight finish (up to
    /// [`Limits::shutdown_timeout`]), then closes every connection.
    pub fn shutdown(self) {
        self.core.shutdown();
    }

    /// Serves until the process gets Ctrl-C (SIGINT) or SIGTERM, then shuts
    /// down gracefully: what a server's `main` ends with.
    pub fn run_until_signal(self) -> Result<()> {
        let r = self.core.wait_for_signal();
        self.shutdown();
        r.map_err(Error::Io)
    }
}

/// A thread of its own that runs jobs in order: the batch parser's.
pub(crate) struct Worker {
    jobs: std::sync::mpsc::Sender<Box<dyn FnOnce() + Send>>,
    /// A job of [`Worker::try_send`] is queued or running.
    busy: Arc<AtomicBool>,
}

/// Clears a worker's busy flag when its job ends, panic or not.
struct NotBusy(Arc<AtomicBool>);

impl Drop for NotBusy {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Worker {
    /// Starts the thread; it ends when the worker is dropped.
    pub(crate) fn start(name: &str) -> io::Result<Worker> {
        let (jobs, rx) = std::sync::mpsc::channel::<Box<dyn FnOnce() + Send>>();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job();
                }
            })?;
        Ok(Worker {
            jobs,
            busy: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Queues `job`; false when the thread is gone.
    pub fn send(&self, job: impl FnOnce() + Send + 'static) -> bool {
        self.jobs.send(Box::new(job)).is_ok()
    }

    /// Queues `job` unless another job of this kind is queued or running;
    /// false when it is, or when the thread is gone.
    pub fn try_send(&self, job: impl FnOnce() + Send + 'static) -> bool {
        if self
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        let done = NotBusy(self.busy.clone());
        self.send(move || {
            let _done = done;
            job();
        })
    }
}

/// Runs the router, turning a panic into a 500 (a panic must not take down
/// the thread it runs on, nor lose an open transaction without a rollback).
fn safe_handle(
    sh: &Arc<Shared>,
    req: &RestRequest,
    who: Principal,
    tx: Option<&Transaction<'static>>,
) -> Response {
    std::panic::catch_unwind(AssertUnwindSafe(|| rest::handle(sh, req, who, tx)))
        .unwrap_or_else(|_| internal())
}

fn internal() -> Response {
    Response::error(500, "Internal Server Error")
}

fn is_slow_route(req: &RestRequest) -> bool {
    // Password checks (Argon2) take tens of milliseconds.
    let p = req.path().as_bytes();
    p.len() >= 5 && p[p.len() - 5..].eq_ignore_ascii_case(b"/auth")
}

/// Runs `f` with waits refused ([`burrow_core::driver::without_waiting`]):
/// its answer, or `None` when it would have had to wait for a lock or was
/// long work, and did nothing.
fn unless_refused(f: impl FnOnce() -> Response) -> Option<Response> {
    match burrow_core::driver::without_waiting(f) {
        (r, false) => Some(r),
        (_, true) => None,
    }
}

/// Runs `f` (a call to an in-process engine that may wait for a lock or run
/// long) on this thread once it has stopped being an event-loop thread: the
/// worker hands its other tasks to another thread first
/// (`block_in_place`; the server's runtime is multi-threaded). Cheaper than
/// a trip to the blocking pool for what is already here: the request, read
/// on this thread, is still in its cache (measured: a 10,000-row batch
/// applied a fifth slower from the pool).
pub(crate) fn aside<R>(f: impl FnOnce() -> R) -> R {
    tokio::task::block_in_place(f)
}

/// Runs `f` on the blocking pool: calls that may wait for a lock (begin, a
/// call inside or beside a transaction) or for a network never run on the
/// event loop. `None` if the runtime is shutting down.
async fn blocking<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> Option<R> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// Whether `who` may open a transaction: with authentication on, only a
/// user who may write to some table (a transaction blocks other writers).
fn may_begin(sh: &Shared, who: Principal) -> std::result::Result<(), Response> {
    let Some(auth) = &sh.auth else {
        return Ok(());
    };
    if who == Principal::Anyone {
        return Err(Response::error(401, "authentication required"));
    }
    let writes = sh.client.model().tables().iter().any(|t| {
        let r = auth.rights(who, t.name);
        r.create || r.update || r.delete
    });
    if writes {
        Ok(())
    } else {
        Err(Response::error(
            403,
            "a transaction needs the right to write to some table",
        ))
    }
}

/// Opens a transaction for a connection (`BEGIN`).
async fn begin(sh: &Arc<Shared>, slot: TxSlot) -> std::result::Result<OpenTx, Response> {
    let sh2 = sh.clone();
    blocking(move || {
        let ticket = TxGate::opening(&sh2);
        match std::panic::catch_unwind(AssertUnwindSafe(|| sh2.client.transaction_shared())) {
            Ok(Ok(tx)) => Ok(OpenTx {
                tx,
                ticket,
                slot,
                opened: Instant::now(),
            }),
            // Busy (another transaction held an engine too long): 503.
            Ok(Err(e)) => Err(rest::error_response(&e)),
            Err(_) => Err(internal()),
        }
    })
    .await
    .unwrap_or_else(|| Err(internal()))
}

/// Commits (`END`) or rolls back a connection's transaction, off the event
/// loop: an engine may answer over a network.
async fn end(sh: &Arc<Shared>, open: OpenTx, commit: bool) -> Response {
    let sh2 = sh.clone();
    blocking(move || {
        let OpenTx {
            tx, ticket, slot, ..
        } = open;
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| rest::end(&sh2, tx, commit)))
            .unwrap_or_else(|_| internal());
        drop(ticket);
        drop(slot);
        r
    })
    .await
    .unwrap_or_else(internal)
}

async fn dispatch(
    sh: &Arc<Shared>,
    req: RestRequest,
    who: Principal,
    tx: &mut Option<OpenTx>,
) -> Response {
    let lifetime = sh.tx_limits.max_lifetime;
    if let Some(open) = tx.take_if(|o| o.opened.elapsed() > lifetime) {
        end(sh, open, false).await;
        return Response::error(
            408,
            &format!(
                "the transaction was open for more than {} s and was rolled back",
                lifetime.as_secs_f64()
            ),
        );
    }
    match req.method() {
        "BEGIN" => {
            if tx.is_some() {
                return Response::error(400, "a transaction is already open on this connection");
            }
            if let Err(r) = may_begin(sh, who) {
                return r;
            }
            let Some(slot) = TxSlot::take(sh) else {
                return Response::error(
                    503,
                    &format!(
                        "{} transactions are open, the most this server allows; try again later",
                        sh.tx_limits.max_open
                    ),
                );
            };
            return match begin(sh, slot).await {
                Ok(open) => {
                    *tx = Some(open);
                    Response::empty(200)
                }
                Err(r) => r,
            };
        }
        m @ ("END" | "ABORT") => {
            let Some(open) = tx.take() else {
                return Response::error(400, "no transaction is open on this connection");
            };
            return end(sh, open, m == "END").await;
        }
        _ => {}
    }
    if let Some(open) = tx.as_ref().filter(|_| sh.inline && !is_slow_route(&req)) {
        // In-process engines answer a call of their own transaction at once:
        // it holds their locks, so nothing is waited for. Long work is
        // refused here, and goes to the pool below.
        if let Some(r) = unless_refused(|| safe_handle(sh, &req, who, Some(&open.tx))) {
            return r;
        }
        return aside(|| safe_handle(sh, &req, who, Some(&open.tx)));
    }
    if let Some(open) = tx.take() {
        // The transaction goes to the pool thread with the request and comes
        // back with the answer; lost with a runtime shutting down, it drops
        // there, rolling back.
        let sh2 = sh.clone();
        let back = blocking(move || {
            let r = safe_handle(&sh2, &req, who, Some(&open.tx));
            (open, r)
        })
        .await;
        return match back {
            Some((open, r)) => {
                *tx = Some(open);
                r
            }
            None => internal(),
        };
    }
    if sh.inline && !is_slow_route(&req) {
        let here = sh
            .gate
            .try_inline(|| unless_refused(|| safe_handle(sh, &req, who, None)));
        return match here {
            Some(Some(r)) => r,
            // Refused: it may wait, or run long.
            Some(None) => aside(|| safe_handle(sh, &req, who, None)),
            // A remote transaction is open: the call may wait for it.
            None => aside(|| safe_handle(sh, &req, who, None)),
        };
    }
    let sh2 = sh.clone();
    blocking(move || safe_handle(&sh2, &req, who, None))
        .await
        .unwrap_or_else(internal)
}
