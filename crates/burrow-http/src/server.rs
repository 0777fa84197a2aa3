//! The HTTP server: a tokio event loop reading requests with `httparse`, and
//! the engines' synchronous calls run where they cannot stall it.
//!
//! # Where calls run
//!
//! - **Inline**, on the event loop's thread, for in-process engines (SQLite,
//!   memory) while no remote transaction is open: a call costs microseconds,
//!   less than a hand-off to another thread.
//! - On tokio's **blocking pool** for other engines (network-bound ones), and
//!   for every call while a remote transaction is open (other threads' calls
//!   then wait for it inside the engine, and must not block the event loop).
//! - On a **transaction's own thread**: `BEGIN` starts a thread for its
//!   connection, and every request of that connection runs there until `END`
//!   or `ABORT`, because engines tie a transaction to the thread that began it.
//!   A connection that closes (or times out) with a transaction open rolls it
//!   back.
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
//! HTTP/1.1 keep-alive; pipelined requests are answered in order, and their
//! responses written together. Limits ([`Limits`]): header and body size
//! (413), a deadline for a whole request once its first byte arrived (408,
//! against slow clients), an idle keep-alive timeout, a write timeout, and a
//! cap on open connections (503). A malformed request closes only its own
//! connection.
//!
//! With the `tls` feature and [`ServerBuilder::tls`], every connection is TLS
//! (rustls): the handshake must finish within the request timeout, and past
//! the connection cap a connection is closed without a 503, which would need a
//! handshake first.

use std::io;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use burrow_core::{Client, Error, Orm, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::{timeout, timeout_at, Instant};

use crate::auth::Auth;
use crate::cache::OrmCache;
use crate::http::{percent_decode, write_response, DateCache, Request, Response};
use crate::rest;

/// Limits that protect the server from clients.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request head (request line and headers), in bytes.
    pub max_header_bytes: usize,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Time allowed to receive a whole request once its first byte arrived.
    pub request_timeout: Duration,
    /// Time a keep-alive connection may stay idle between requests.
    pub idle_timeout: Duration,
    /// Time allowed to write a response.
    pub write_timeout: Duration,
    /// Most connections open at once; more are answered 503 and closed.
    pub max_connections: usize,
    /// Bodies at least this large are gzipped for clients that accept it.
    pub gzip_min_bytes: usize,
    /// How long a graceful shutdown waits for requests in flight.
    pub shutdown_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 16 * 1024,
            max_body_bytes: 64 * 1024 * 1024,
            request_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            gzip_min_bytes: 4096,
            shutdown_timeout: Duration::from_secs(10),
        }
    }
}

/// Where engine calls run; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Execution {
    /// Inline when every engine is in-process (`sqlite`, `memory`), else the pool.
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

    /// Called on a transaction's thread before it begins: from now on calls
    /// go to the pool, and the inline ones under way finish first.
    fn opening(&self) {
        self.open.fetch_add(1, Ordering::SeqCst);
        drop(self.lock.write());
    }

    fn closed(&self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What every connection shares.
pub(crate) struct Shared {
    pub client: Arc<Client>,
    pub root: String,
    pub auth: Option<Auth>,
    pub cache: OrmCache,
    /// `Server-InternalState`: grows on every write.
    pub state: AtomicU64,
    pub limits: Limits,
    pub compact: bool,
    /// Every engine is in-process (SQLite, memory).
    pub local_engines: bool,
    /// Parses large batch bodies while the request's thread applies them
    /// (see [`crate::batch::parse_and_run`]). Started with the server, not
    /// per request: a thread that is woken gets a core sooner, on a busy
    /// machine, than a new one.
    pub parser: Option<Worker>,
    /// Batches applied while their body was still being parsed.
    pub ran_ahead: AtomicU64,
    inline: bool,
    gate: TxGate,
    date: DateCache,
    server_name: String,
    connections: AtomicUsize,
}

/// Configures a [`Server`]; see [`Server::builder`].
pub struct ServerBuilder {
    client: Arc<Client>,
    root: String,
    auth: Option<Option<Auth>>,
    cache: OrmCache,
    limits: Limits,
    compact: bool,
    execution: Execution,
    threads: usize,
    server_name: String,
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

    /// Answers every list in the compact form (mORMot clients always get it).
    pub fn compact_lists(mut self, on: bool) -> Self {
        self.compact = on;
        self
    }

    /// Where engine calls run.
    pub fn execution(mut self, e: Execution) -> Self {
        self.execution = e;
        self
    }

    /// Event-loop threads (default: one per core).
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n.max(1);
        self
    }

    /// The `Server` header's value.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = name.into();
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
        #[cfg(feature = "tls")]
        let tls = match &self.tls {
            Some((cert, key)) => Some(crate::tls::acceptor(cert, key)?),
            None => None,
        };
        #[cfg(not(feature = "tls"))]
        let tls: Option<Tls> = None;
        let std_listener = std::net::TcpListener::bind(addr)?;
        std_listener.set_nonblocking(true)?;
        let local = std_listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.threads)
            .thread_name("burrow-http")
            .enable_io()
            .enable_time()
            .build()?;
        let mut local_engines = true;
        let _ = self.client.engines(&mut |e| {
            local_engines &= matches!(e.engine_name(), "sqlite" | "memory");
            Ok(())
        });
        let inline = match self.execution {
            Execution::Auto => local_engines,
            Execution::Inline => true,
            Execution::Pool => false,
        };
        let shared = Arc::new(Shared {
            client: self.client,
            root: self.root,
            auth,
            cache: self.cache,
            state: AtomicU64::new(1),
            limits: self.limits,
            compact: self.compact,
            local_engines,
            parser: Worker::start("burrow-parse").ok(),
            inline,
            gate: TxGate {
                open: AtomicUsize::new(0),
                lock: RwLock::new(()),
            },
            date: DateCache::new(),
            server_name: self.server_name,
            connections: AtomicUsize::new(0),
            ran_ahead: AtomicU64::new(0),
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        let listener = {
            let _g = runtime.enter();
            TcpListener::from_std(std_listener)?
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let accept = runtime.spawn(accept_loop(shared.clone(), listener, tls, stop_rx));
        Ok(Server {
            scheme,
            shared,
            runtime: Some(runtime),
            stop: stop_tx,
            accept: Some(accept),
            local,
        })
    }
}

/// A running server. Dropping it shuts it down gracefully.
pub struct Server {
    scheme: &'static str,
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
    stop: watch::Sender<bool>,
    accept: Option<tokio::task::JoinHandle<()>>,
    local: SocketAddr,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.local)
            .field("root", &self.shared.root)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Serves `client` at `/{root}`.
    pub fn builder(client: Arc<Client>, root: impl Into<String>) -> ServerBuilder {
        ServerBuilder {
            client,
            root: root.into().trim_matches('/').to_owned(),
            auth: None,
            cache: OrmCache::new(),
            limits: Limits::default(),
            compact: false,
            execution: Execution::Auto,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            server_name: format!("Burrow/{}", env!("CARGO_PKG_VERSION")),
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The base URL clients connect to: `http://{addr}/{root}`, or `https://`
    /// with TLS.
    pub fn url(&self) -> String {
        format!("{}://{}/{}", self.scheme, self.local, self.shared.root)
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
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// Large batches applied while their body was still being parsed, on
    /// the server's parser thread (the others were parsed, then applied).
    pub fn batches_run_ahead(&self) -> u64 {
        self.shared.ran_ahead.load(Ordering::Relaxed)
    }

    /// Stops accepting, lets requests in flight finish (up to
    /// [`Limits::shutdown_timeout`]), then closes every connection.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        let _ = self.stop.send(true);
        let Some(rt) = self.runtime.take() else {
            return;
        };
        let deadline = std::time::Instant::now() + self.shared.limits.shutdown_timeout;
        if let Some(a) = self.accept.take() {
            let _ = rt.block_on(async { timeout(self.shared.limits.shutdown_timeout, a).await });
        }
        while self.shared.connections.load(Ordering::SeqCst) > 0
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        rt.shutdown_timeout(Duration::from_millis(100));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_now();
    }
}

#[cfg(feature = "tls")]
type Tls = tokio_rustls::TlsAcceptor;
/// No TLS without the feature: a type with no value.
#[cfg(not(feature = "tls"))]
#[derive(Clone)]
enum Tls {}

async fn accept_loop(
    sh: Arc<Shared>,
    listener: TcpListener,
    tls: Option<Tls>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        let Ok((stream, _)) = accepted else {
            // Out of descriptors or a connection reset before accept: wait a
            // little rather than spin.
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        if *stop.borrow() {
            return;
        }
        let _ = stream.set_nodelay(true);
        let n = sh.connections.fetch_add(1, Ordering::SeqCst);
        let sh2 = sh.clone();
        if n >= sh.limits.max_connections && tls.is_some() {
            // A 503 would need a handshake first: too many connections means
            // no time for one.
            drop(stream);
            sh.connections.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        if n >= sh.limits.max_connections {
            tokio::spawn(async move {
                let mut s = stream;
                let mut out = Vec::new();
                let r = Response::error(503, "too many connections");
                write_response(
                    &mut out,
                    &r,
                    false,
                    false,
                    usize::MAX,
                    true,
                    0,
                    &sh2.server_name,
                    &sh2.date,
                );
                let _ = timeout(Duration::from_secs(1), s.write_all(&out)).await;
                sh2.connections.fetch_sub(1, Ordering::SeqCst);
            });
            continue;
        }
        let stop = stop.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => serve(&sh2, stream, stop).await,
                #[cfg(feature = "tls")]
                Some(acceptor) => {
                    // The handshake gets the time a request would.
                    let hs = timeout(sh2.limits.request_timeout, acceptor.accept(stream)).await;
                    if let Ok(Ok(tls_stream)) = hs {
                        serve(&sh2, tls_stream, stop).await;
                    }
                }
                #[cfg(not(feature = "tls"))]
                Some(never) => match never {},
            }
            sh2.connections.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// A thread of its own that runs jobs in order: a transaction's (engines tie
/// a transaction to the thread that began it), or the batch parser's.
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
    fn start(name: &str) -> io::Result<Worker> {
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

    async fn run<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> Option<R> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Box::new(move || {
                let _ = tx.send(f());
            }))
            .ok()?;
        rx.await.ok()
    }
}

/// Runs the router, turning a panic into a 500 (a panic must not kill a
/// transaction's thread, whose engines still hold its transaction).
fn safe_handle(sh: &Shared, req: &Request, who: crate::auth::Principal, in_tx: bool) -> Response {
    std::panic::catch_unwind(AssertUnwindSafe(|| rest::handle(sh, req, who, in_tx)))
        .unwrap_or_else(|_| Response::error(500, "Internal Server Error"))
}

fn is_slow_route(req: &Request) -> bool {
    // Password checks (Argon2) take tens of milliseconds.
    req.path.to_ascii_lowercase().ends_with("/auth")
}

async fn dispatch(sh: &Arc<Shared>, req: Request, tx: &mut Option<Worker>) -> Response {
    let who = match rest::authenticate(sh, &req) {
        Ok(w) => w,
        Err(r) => return r,
    };
    match req.method.as_str() {
        "BEGIN" => {
            if tx.is_some() {
                return Response::error(400, "a transaction is already open on this connection");
            }
            let Ok(w) = Worker::start("burrow-tx") else {
                return Response::error(503, "cannot start a transaction thread");
            };
            let sh2 = sh.clone();
            let r = w
                .run(move || {
                    sh2.gate.opening();
                    let r = std::panic::catch_unwind(AssertUnwindSafe(|| rest::begin_all(&sh2)))
                        .unwrap_or_else(|_| Response::error(500, "Internal Server Error"));
                    if r.status != 200 {
                        sh2.gate.closed();
                    }
                    r
                })
                .await
                .unwrap_or_else(|| Response::error(500, "Internal Server Error"));
            if r.status == 200 {
                *tx = Some(w);
            }
            return r;
        }
        "END" | "ABORT" => {
            let Some(w) = tx.take() else {
                return Response::error(400, "no transaction is open on this connection");
            };
            let sh2 = sh.clone();
            let commit = req.method == "END";
            return w
                .run(move || {
                    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        if commit {
                            rest::commit_all(&sh2)
                        } else {
                            rest::rollback_all(&sh2)
                        }
                    }))
                    .unwrap_or_else(|_| Response::error(500, "Internal Server Error"));
                    sh2.gate.closed();
                    r
                })
                .await
                .unwrap_or_else(|| Response::error(500, "Internal Server Error"));
        }
        _ => {}
    }
    if let Some(w) = tx {
        let sh2 = sh.clone();
        return w
            .run(move || safe_handle(&sh2, &req, who, true))
            .await
            .unwrap_or_else(|| Response::error(500, "Internal Server Error"));
    }
    if sh.inline && !is_slow_route(&req) {
        if let Some(r) = sh.gate.try_inline(|| safe_handle(sh, &req, who, false)) {
            return r;
        }
    }
    let sh2 = sh.clone();
    tokio::task::spawn_blocking(move || safe_handle(&sh2, &req, who, false))
        .await
        .unwrap_or_else(|_| Response::error(500, "Internal Server Error"))
}

/// The parts of a request head the server uses.
struct Head {
    len: usize,
    req: Request,
    content_length: usize,
    close: bool,
    expect_continue: bool,
}

enum Parsed {
    Head(Head),
    Partial,
    /// Answer this and close the connection.
    Fail(Response),
}

fn parse_head(buf: &[u8], limits: &Limits) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Request::new(&mut headers);
    let len = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return if buf.len() > limits.max_header_bytes {
                Parsed::Fail(Response::error(413, "request head too large"))
            } else {
                Parsed::Partial
            }
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Parsed::Fail(Response::error(413, "too many headers"))
        }
        Err(e) => return Parsed::Fail(Response::error(400, &format!("malformed request: {e}"))),
    };
    if len > limits.max_header_bytes {
        return Parsed::Fail(Response::error(413, "request head too large"));
    }
    let method = r.method.unwrap_or("GET").to_owned();
    let target = r.path.unwrap_or("/").to_owned();
    let http10 = r.version == Some(0);
    let mut req = Request {
        method,
        ..Request::default()
    };
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    req.path = percent_decode(path, false);
    req.query = query.to_owned();
    let mut content_length = None;
    let mut close = http10;
    let mut expect_continue = false;
    for h in r.headers.iter() {
        let v = match std::str::from_utf8(h.value) {
            Ok(v) => v.trim(),
            Err(_) => continue,
        };
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            match v.parse::<usize>() {
                Ok(n) if content_length.is_none_or(|c| c == n) => content_length = Some(n),
                _ => return Parsed::Fail(Response::error(400, "invalid Content-Length")),
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Parsed::Fail(Response::error(
                411,
                "send a Content-Length (chunked bodies are not accepted)",
            ));
        } else if name.eq_ignore_ascii_case("connection") {
            if v.eq_ignore_ascii_case("close") {
                close = true;
            } else if v.eq_ignore_ascii_case("keep-alive") {
                close = false;
            }
        } else if name.eq_ignore_ascii_case("accept-encoding") {
            req.gzip = v.to_ascii_lowercase().contains("gzip");
        } else if name.eq_ignore_ascii_case("user-agent") {
            req.mormot = v.contains("mORMot");
        } else if name.eq_ignore_ascii_case("burrow-json") {
            req.exact = v.contains("exact");
            req.compact = v.contains("compact");
        } else if name.eq_ignore_ascii_case("authorization") {
            if let Some(t) = v
                .strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
            {
                req.bearer = Some(t.trim().to_owned());
            }
        } else if name.eq_ignore_ascii_case("expect") {
            expect_continue = v.eq_ignore_ascii_case("100-continue");
        }
    }
    req.target = target;
    let content_length = content_length.unwrap_or(0);
    if content_length > limits.max_body_bytes {
        return Parsed::Fail(Response::error(413, "request body too large"));
    }
    Parsed::Head(Head {
        len,
        req,
        content_length,
        close,
        expect_continue,
    })
}

/// A connection's byte stream: a socket, or TLS over one.
trait Conn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send> Conn for S {}

async fn flush(stream: &mut impl Conn, out: &mut Vec<u8>, limits: &Limits) -> bool {
    if out.is_empty() {
        return true;
    }
    let ok = matches!(
        timeout(limits.write_timeout, stream.write_all(out)).await,
        Ok(Ok(()))
    );
    out.clear();
    if out.capacity() > 1 << 20 {
        out.shrink_to(64 * 1024);
    }
    ok
}

async fn fail(sh: &Shared, stream: &mut impl Conn, out: &mut Vec<u8>, r: Response) {
    let state = sh.state.load(Ordering::Relaxed);
    write_response(
        out,
        &r,
        false,
        false,
        usize::MAX,
        true,
        state,
        &sh.server_name,
        &sh.date,
    );
    flush(stream, out, &sh.limits).await;
}

async fn serve(sh: &Arc<Shared>, mut stream: impl Conn, mut stop: watch::Receiver<bool>) {
    let limits = &sh.limits;
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut out: Vec<u8> = Vec::with_capacity(4096);
    let mut tx: Option<Worker> = None;
    'conn: loop {
        // The head of the next request.
        let mut deadline = (!buf.is_empty()).then(|| Instant::now() + limits.request_timeout);
        let head = loop {
            if !buf.is_empty() {
                match parse_head(&buf, limits) {
                    Parsed::Head(h) => break h,
                    Parsed::Partial => {}
                    Parsed::Fail(r) => {
                        fail(sh, &mut stream, &mut out, r).await;
                        break 'conn;
                    }
                }
            }
            if !flush(&mut stream, &mut out, limits).await {
                break 'conn;
            }
            if buf.capacity() - buf.len() < 2048 {
                buf.reserve(8192);
            }
            let n = match deadline {
                Some(d) => match timeout_at(d, stream.read_buf(&mut buf)).await {
                    Ok(r) => r,
                    Err(_) => {
                        fail(
                            sh,
                            &mut stream,
                            &mut out,
                            Response::error(408, "request timeout"),
                        )
                        .await;
                        break 'conn;
                    }
                },
                None => {
                    if *stop.borrow() {
                        break 'conn;
                    }
                    tokio::select! {
                        r = timeout(limits.idle_timeout, stream.read_buf(&mut buf)) => match r {
                            Ok(r) => r,
                            Err(_) => break 'conn,
                        },
                        _ = stop.changed() => continue,
                    }
                }
            };
            match n {
                Ok(0) | Err(_) => break 'conn,
                Ok(_) => {
                    deadline.get_or_insert_with(|| Instant::now() + limits.request_timeout);
                }
            }
        };
        // Its body.
        let Head {
            len,
            mut req,
            content_length,
            close,
            expect_continue,
        } = head;
        buf.drain(..len);
        if expect_continue && buf.len() < content_length {
            out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
            if !flush(&mut stream, &mut out, limits).await {
                break 'conn;
            }
        }
        if buf.len() < content_length {
            buf.reserve(content_length - buf.len());
            let d = deadline.unwrap_or_else(|| Instant::now() + limits.request_timeout);
            while buf.len() < content_length {
                match timeout_at(d, stream.read_buf(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => break 'conn,
                    Ok(Ok(_)) => {}
                    Err(_) => {
                        fail(
                            sh,
                            &mut stream,
                            &mut out,
                            Response::error(408, "request timeout"),
                        )
                        .await;
                        break 'conn;
                    }
                }
            }
        }
        let rest = buf.split_off(content_length);
        req.body = Arc::new(std::mem::replace(&mut buf, rest));
        if buf.capacity() == 0 {
            buf.reserve(4096);
        }
        let head_only = req.method == "HEAD";
        let gzip = req.gzip;
        let resp = dispatch(sh, req, &mut tx).await;
        let close = close || *stop.borrow();
        let state = sh.state.load(Ordering::Relaxed);
        write_response(
            &mut out,
            &resp,
            head_only,
            gzip,
            limits.gzip_min_bytes,
            close,
            state,
            &sh.server_name,
            &sh.date,
        );
        if close {
            flush(&mut stream, &mut out, limits).await;
            break 'conn;
        }
    }
    if let Some(w) = tx.take() {
        // The client left with its transaction open: undo it.
        let sh2 = sh.clone();
        let _ = w
            .run(move || {
                let _ = std::panic::catch_unwind(AssertUnwindSafe(|| rest::rollback_all(&sh2)));
                sh2.gate.closed();
            })
            .await;
    }
    let _ = stream.shutdown().await;
}
