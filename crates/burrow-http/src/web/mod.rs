//! Burrow's HTTP/1.1 server core: a tokio event loop that speaks the
//! protocol and hands each request to a [`Handler`]. The REST server
//! ([`crate::Server`]) is one handler on it; an application can be another.
//!
//! ```no_run
//! use burrow_http::web::{Handler, HttpServer, Request, Response};
//!
//! struct Hello;
//!
//! impl Handler for Hello {
//!     type Conn = ();
//!
//!     async fn call(&self, _: &mut (), req: Request) -> Response {
//!         match req.path() {
//!             "/plaintext" => Response::with("text/plain", b"Hello, World!".to_vec()),
//!             _ => Response::error(404, "Not Found"),
//!         }
//!     }
//! }
//!
//! # fn main() -> burrow_core::Result<()> {
//! let server = HttpServer::builder(Hello).bind("127.0.0.1:8080")?;
//! println!("http://{}/plaintext", server.local_addr());
//! # Ok(())
//! # }
//! ```
//!
//! # What the core owns
//!
//! - **Connections**: the accept loop, a cap on open connections and one on
//!   those of a single client address (past either, a 503 and close),
//!   HTTP/1.1 keep-alive, and **pipelining**: requests
//!   already received are handled in order, one after the other, and their
//!   responses written together, in one write, once no whole request is left
//!   to handle (or once 64 KiB of responses wait, which bounds a
//!   connection's memory).
//! - **Requests**: the head is parsed with `httparse` and checked (a
//!   malformed head: 400; too large: 413; a bad or twice-different
//!   `Content-Length`: 400; a chunked body: 411), each of these answered
//!   and the connection closed, the server unharmed. Then
//!   [`Handler::admit`] sees the borrowed [`RequestHead`]; only once it
//!   accepts, and the server-wide allowance for bodies in flight has room
//!   for the declared length (else 503 with `Retry-After`, and close), is
//!   `100 Continue` sent (for `Expect: 100-continue`) and the body read. A
//!   head it refuses is answered with its response: the body,
//!   if already received, is skipped and the connection kept; else the
//!   connection closes without waiting for it.
//! - **Responses**: `Server`, `Date` (rendered at most once a second per
//!   thread, never frozen), `Content-Length`, `Connection: close` when it
//!   closes; a body of at least [`Limits::gzip_min_bytes`] is gzipped when
//!   the request accepts gzip; a `HEAD` gets the head only. A body too large
//!   to hold whole is a [`BodyStream`]: written a piece at a time, the next
//!   asked for once the last is written, chunked (HTTP/1.0: until close) and
//!   gzipped on the fly when accepted.
//! - **Time limits** ([`Limits`]): a whole request (head and body) must
//!   arrive within the request timeout once its first byte came (408); an
//!   idle keep-alive connection closes after the idle timeout; a write that
//!   makes no progress for the write timeout closes the connection.
//! - **TLS** (feature `tls`: `tls` on [`HttpServerBuilder`]): every connection,
//!   handshake within the request timeout; past a connection cap a
//!   connection is closed without a 503, which would need a handshake.
//! - **Shutdown** ([`HttpServer::shutdown`], or drop): stop accepting, let
//!   requests in flight finish (at most [`Limits::shutdown_timeout`]), close
//!   idle connections, then every connection.
//! - **Threads**: one event loop per core unless
//!   [`HttpServerBuilder::threads`] says otherwise, each a tokio runtime of
//!   one worker thread. The accept loop gives each new connection to the
//!   loop serving the fewest, and the connection stays there: no request
//!   waits for a task to be stolen by, or a wake-up of, another thread, and
//!   a loop's only connection finds it awake for its next request (see
//!   [`Limits::spin_wait`]). Work that blocks still leaves the loop free:
//!   each runtime is tokio's multi-threaded kind, so
//!   `tokio::task::block_in_place` hands the loop to another thread. The
//!   loops' blocking pools share tokio's default bound of 512 threads (at
//!   least 16 each). [`HttpServer::runtime`] lets an application start its
//!   own tasks (database connections…) on the first loop.
//! - A panicking handler: its client gets a 500 and the connection closes.
//!
//! # What the handler owns
//!
//! Routing (404, 405 are its answers), authentication, the meaning of the
//! body, and where its work runs: `call` runs on the event loop, so work
//! that blocks (a synchronous engine call over a network, a password hash)
//! belongs on `tokio::task::spawn_blocking`. Per-connection state lives in
//! [`Handler::Conn`], created with the connection and dropped when it
//! closes (the REST handler keeps a connection's open transaction there,
//! so a client that leaves rolls it back).
//!
//! # Limits and their defaults
//!
//! | [`Limits`] field | default | past it |
//! |---|---|---|
//! | `max_header_bytes` | 16 KiB | 413, closed |
//! | `max_body_bytes` | 64 MiB | 413, closed |
//! | `request_timeout` | 30 s | 408, closed |
//! | `idle_timeout` | 60 s | closed |
//! | `write_timeout` | 30 s without progress | closed |
//! | `max_connections` | 10,000 | 503, closed |
//! | `max_connections_per_address` | 256 (IPv6: per /64) | 503, closed |
//! | `max_body_bytes_in_flight` | 256 MiB, server-wide | 503 + `Retry-After`, closed |
//! | `gzip_min_bytes` | 4 KiB | body gzipped if accepted |
//! | `shutdown_timeout` | 10 s | connections closed |
//!
//! `docs/limits.md` lists them with what each protects against, beside the
//! REST server's own (transactions, logins, WHERE clauses).

mod conn;
pub(crate) mod request;
mod response;
pub(crate) mod wire;

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::allowance::Allowance;
use burrow_core::Result;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio::time::timeout;

pub use request::{Request, RequestHead};
pub use response::{BodyStream, Headers, PieceFuture, Response, JSON, TEXT};

/// What a server does with requests: one per server, shared by every
/// connection (so `Send + Sync`).
pub trait Handler: Send + Sync + 'static {
    /// Per-connection state: made with [`Default`] when a connection opens,
    /// handed to every call of that connection, dropped when it closes.
    type Conn: Default + Send + 'static;

    /// Sees a request's head before its body is read, and may refuse it
    /// (say, 401 for a request without credentials): the server then does
    /// not wait for the body. Accepts everything unless overridden.
    fn admit(
        &self,
        conn: &mut Self::Conn,
        head: &RequestHead<'_>,
    ) -> std::result::Result<(), Response> {
        let _ = (conn, head);
        Ok(())
    }

    /// Answers a request (body read). Runs on the event loop: see the
    /// module documentation for work that blocks.
    fn call(&self, conn: &mut Self::Conn, req: Request) -> impl Future<Output = Response> + Send;

    /// How long this connection may wait for its next request, given its
    /// state: `None` keeps [`Limits::idle_timeout`], and a longer time is
    /// cut to it. A connection holding what others wait for (an open
    /// transaction, say) gets less. Past it the connection closes and its
    /// state is dropped.
    fn idle_timeout(&self, conn: &Self::Conn) -> Option<Duration> {
        let _ = conn;
        None
    }

    /// Headers added to every response, the core's own errors included.
    fn extra_headers(&self, out: &mut Headers<'_>) {
        let _ = out;
    }
}

/// Limits that protect a server from its clients; see the module
/// documentation for the defaults.
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
    /// Time a response's write may go without progress.
    pub write_timeout: Duration,
    /// Most connections open at once; more are answered 503 and closed.
    pub max_connections: usize,
    /// Most connections open at once from one client address (an IPv6
    /// client counts per /64, the block one host usually holds); more are
    /// answered 503 and closed. `usize::MAX` turns the count off: behind a
    /// reverse proxy every client has the proxy's address.
    pub max_connections_per_address: usize,
    /// Most bytes of request bodies held at once, server-wide: a request
    /// whose `Content-Length` does not fit in what is left is answered 503
    /// (with `Retry-After`) before its body is read, and its connection
    /// closed. A body counts from its admission until its handler returns.
    pub max_body_bytes_in_flight: usize,
    /// Bodies at least this large are gzipped for clients that accept it.
    pub gzip_min_bytes: usize,
    /// How long a graceful shutdown waits for requests in flight.
    pub shutdown_timeout: Duration,
    /// How long a connection just answered polls for its next request
    /// before its thread sleeps (zero never polls), while it is the only
    /// connection of its event loop. A client that sends
    /// its next call as soon as it has the answer then finds the server
    /// awake: on loopback a sleeping thread's wake-up is most of a small
    /// call's round trip. Polling yields to every other connection's work
    /// between looks, and a connection whose requests keep coming later than
    /// this stops polling (and tries now and then whether they come quickly
    /// again); a loop with more connections has other work to do, and
    /// nobody on it polls.
    pub spin_wait: Duration,
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
            max_connections_per_address: 256,
            max_body_bytes_in_flight: 256 * 1024 * 1024,
            gzip_min_bytes: 4096,
            shutdown_timeout: Duration::from_secs(10),
            spin_wait: Duration::from_micros(100),
        }
    }
}

/// What the connections of a server share.
pub(crate) struct Core<H> {
    pub handler: H,
    pub limits: Limits,
    pub server_name: String,
    pub connections: AtomicUsize,
    /// Open connections per client address (see [`AddrKey`]); empty when
    /// the per-address cap is off.
    pub per_address: Mutex<HashMap<AddrKey, usize>>,
    /// Bytes of request bodies admitted and not yet handled.
    pub body_bytes: Allowance,
    /// The most output a connection held unwritten, recorded only past
    /// [`conn::OUT_HIGH`] (below it, the bound is not in question and the
    /// shared counter would cost every response a contended write).
    pub peak_output: AtomicUsize,
    /// Set when shutdown begins: connections close after their current
    /// request.
    pub stopping: AtomicBool,
    /// Connections open on each event loop: a new one goes to the loop
    /// with the fewest, and one alone on its loop polls for its next request
    /// (see [`Limits::spin_wait`]).
    pub loads: Box<[AtomicUsize]>,
}

#[cfg(feature = "tls")]
type Tls = tokio_rustls::TlsAcceptor;
/// No TLS without the feature: a type with no value.
#[cfg(not(feature = "tls"))]
#[derive(Clone)]
enum Tls {}

/// Configures an [`HttpServer`]; see [`HttpServer::builder`].
pub struct HttpServerBuilder<H> {
    handler: H,
    limits: Limits,
    threads: usize,
    server_name: String,
    reuse_port: bool,
    backlog: u32,
    on_thread_start: Option<Arc<dyn Fn() + Send + Sync>>,
    #[cfg(feature = "tls")]
    tls: Option<(Vec<u8>, Vec<u8>)>,
}

impl<H: Handler> HttpServerBuilder<H> {
    /// Sets the limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Event loops, each a thread of its own (default: one per core).
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n.max(1);
        self
    }

    /// Lets several servers listen on the same address and port (Unix
    /// `SO_REUSEPORT`; the kernel spreads new connections among them), so
    /// that each can run its own event loop with its own resources. Off by
    /// default: a second bind of a port in use then fails, as it should.
    pub fn reuse_port(mut self, on: bool) -> Self {
        self.reuse_port = on;
        self
    }

    /// The listen backlog: connections the kernel queues before they are
    /// accepted (default 4,096; the kernel caps it at `somaxconn`). A burst
    /// of thousands of connects needs a deep one.
    pub fn backlog(mut self, n: u32) -> Self {
        self.backlog = n.max(1);
        self
    }

    /// Runs `f` on each event-loop thread as it starts (to pin it to a CPU,
    /// say).
    pub fn on_thread_start(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_thread_start = Some(Arc::new(f));
        self
    }

    /// The `Server` header's value (default `Burrow/{version}`).
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = name.into();
        self
    }

    /// Serves HTTPS with this certificate chain and private key, both PEM
    /// (checked when the server binds: a bad one is
    /// [`burrow_core::Error::BadInput`]).
    #[cfg(feature = "tls")]
    pub fn tls(mut self, cert_chain_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> Self {
        self.tls = Some((cert_chain_pem.into(), key_pem.into()));
        self
    }

    /// Binds `addr` (e.g. `127.0.0.1:0`) and starts serving.
    pub fn bind(self, addr: impl ToSocketAddrs) -> Result<HttpServer<H>> {
        #[cfg(feature = "tls")]
        let tls = match &self.tls {
            Some((cert, key)) => Some(crate::tls::acceptor(cert, key)?),
            None => None,
        };
        #[cfg(not(feature = "tls"))]
        let tls: Option<Tls> = None;
        let addr = addr.to_socket_addrs()?.next().ok_or_else(|| {
            burrow_core::Error::BadInput("the address to bind resolves to nothing".into())
        })?;
        // Tokio's default for one runtime, shared between the loops: each
        // has a blocking pool of its own.
        let blocking = (512 / self.threads).max(16);
        let loops = (0..self.threads)
            .map(|_| {
                // Multi-threaded with one worker, not current-thread: a
                // handler's `block_in_place` hands the loop to another
                // thread instead of stalling its connections.
                let mut rt = tokio::runtime::Builder::new_multi_thread();
                rt.worker_threads(1)
                    .max_blocking_threads(blocking)
                    .thread_name("burrow-http")
                    .enable_io()
                    .enable_time();
                if let Some(f) = self.on_thread_start.clone() {
                    rt.on_thread_start(move || f());
                }
                rt.build()
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let core = Arc::new(Core {
            handler: self.handler,
            body_bytes: Allowance::new(self.limits.max_body_bytes_in_flight),
            limits: self.limits,
            server_name: self.server_name,
            connections: AtomicUsize::new(0),
            per_address: Mutex::new(HashMap::new()),
            peak_output: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            loads: (0..self.threads).map(|_| AtomicUsize::new(0)).collect(),
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        let listener = {
            let _g = loops[0].enter();
            let socket = if addr.is_ipv4() {
                TcpSocket::new_v4()?
            } else {
                TcpSocket::new_v6()?
            };
            // As std's bind does on Unix: a restarted server can bind while
            // its old connections linger in TIME_WAIT.
            #[cfg(unix)]
            socket.set_reuseaddr(true)?;
            #[cfg(unix)]
            if self.reuse_port {
                socket.set_reuseport(true)?;
            }
            socket.bind(addr)?;
            socket.listen(self.backlog)?
        };
        let local = listener.local_addr()?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let handles = loops.iter().map(|rt| rt.handle().clone()).collect();
        let accept = loops[0].spawn(accept_loop(core.clone(), listener, handles, tls, stop_rx));
        Ok(HttpServer {
            scheme,
            core,
            loops,
            stop: stop_tx,
            accept: Some(accept),
            local,
        })
    }
}

/// A running server. Dropping it shuts it down gracefully, from async code
/// too (the wait then runs on a thread of its own).
pub struct HttpServer<H: Handler> {
    scheme: &'static str,
    core: Arc<Core<H>>,
    /// The event loops' runtimes; empty once stopped.
    loops: Vec<tokio::runtime::Runtime>,
    stop: watch::Sender<bool>,
    accept: Option<tokio::task::JoinHandle<()>>,
    local: SocketAddr,
}

impl<H: Handler> std::fmt::Debug for HttpServer<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpServer")
            .field("addr", &self.local)
            .finish_non_exhaustive()
    }
}

impl<H: Handler> HttpServer<H> {
    /// A server of `handler`, with default limits.
    pub fn builder(handler: H) -> HttpServerBuilder<H> {
        HttpServerBuilder {
            handler,
            limits: Limits::default(),
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            server_name: format!("Burrow/{}", env!("CARGO_PKG_VERSION")),
            reuse_port: false,
            backlog: 4096,
            on_thread_start: None,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// `https` with TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        self.scheme
    }

    /// The handler.
    pub fn handler(&self) -> &H {
        &self.core.handler
    }

    /// The limits it serves with.
    pub fn limits(&self) -> &Limits {
        &self.core.limits
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.core.connections.load(Ordering::Relaxed)
    }

    /// Connections open now from `addr` (counted as
    /// [`Limits::max_connections_per_address`] counts them; 0 when that
    /// cap is off).
    pub fn connections_from(&self, addr: IpAddr) -> usize {
        let map = self
            .core
            .per_address
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.get(&AddrKey::of(addr)).copied().unwrap_or(0)
    }

    /// Bytes of request bodies admitted and not yet handled (see
    /// [`Limits::max_body_bytes_in_flight`]).
    pub fn body_bytes_in_flight(&self) -> usize {
        self.core.body_bytes.used()
    }

    /// The most response bytes a connection has held unwritten, when that
    /// went past the pipelining bound's threshold (else 0): for tests of
    /// that bound.
    #[doc(hidden)]
    pub fn peak_pending_output(&self) -> usize {
        self.core.peak_output.load(Ordering::SeqCst)
    }

    /// The first event loop's runtime, to start an application's own tasks
    /// there.
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        self.loops
            .first()
            .map(tokio::runtime::Runtime::handle)
            .expect("the loops live until shutdown, which consumes the server")
    }

    /// Stops accepting, lets requests in flight finish (up to
    /// [`Limits::shutdown_timeout`]), then closes every connection.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    /// Blocks until the process is asked to stop: Ctrl-C (SIGINT) or, on
    /// Unix, SIGTERM (what `kill` and service managers send). The signals
    /// are caught from the first call on, so they no longer end the process
    /// by themselves: follow with [`HttpServer::shutdown`], or use
    /// [`HttpServer::run_until_signal`].
    pub fn wait_for_signal(&self) -> std::io::Result<()> {
        let rt = self.runtime();
        outside_runtimes(|| {
            rt.block_on(async {
                #[cfg(unix)]
                {
                    use tokio::signal::unix::{signal, SignalKind};
                    let mut term = signal(SignalKind::terminate())?;
                    tokio::select! {
                        r = tokio::signal::ctrl_c() => r,
                        _ = term.recv() => Ok(()),
                    }
                }
                #[cfg(not(unix))]
                tokio::signal::ctrl_c().await
            })
        })
    }

    /// Serves until Ctrl-C or SIGTERM, then shuts down gracefully.
    pub fn run_until_signal(self) -> std::io::Result<()> {
        let r = self.wait_for_signal();
        self.shutdown();
        r
    }

    fn stop_now(&mut self) {
        self.core.stopping.store(true, Ordering::SeqCst);
        let _ = self.stop.send(true);
        if self.loops.is_empty() {
            return;
        }
        let loops = std::mem::take(&mut self.loops);
        let (core, accept) = (&self.core, self.accept.take());
        let stop = move || {
            let wait = core.limits.shutdown_timeout;
            let deadline = std::time::Instant::now() + wait;
            if let Some(a) = accept {
                let _ = loops[0].block_on(async { timeout(wait, a).await });
            }
            while core.connections.load(Ordering::SeqCst) > 0
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            for rt in loops {
                rt.shutdown_timeout(Duration::from_millis(100));
            }
        };
        outside_runtimes(stop);
    }
}

/// Runs `f`, which blocks on a runtime, where it may: on this thread, or,
/// inside a runtime (a server run or dropped by async code), where tokio
/// panics at a `block_on` and at the wait for a runtime's threads, on a
/// thread of its own while this one waits.
fn outside_runtimes<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|s| s.spawn(f).join()).unwrap_or_else(|p| std::panic::resume_unwind(p))
}

impl<H: Handler> Drop for HttpServer<H> {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// What connections are counted by, per client: an IPv4 address, or an
/// IPv6 /64 (one host is commonly given a whole /64, and could otherwise
/// open each connection from an address of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum AddrKey {
    V4(u32),
    V6(u64),
}

impl AddrKey {
    pub(crate) fn of(addr: IpAddr) -> AddrKey {
        match addr.to_canonical() {
            IpAddr::V4(a) => AddrKey::V4(a.to_bits()),
            IpAddr::V6(a) => AddrKey::V6((a.to_bits() >> 64) as u64),
        }
    }
}

impl<H: Handler> Core<H> {
    /// Counts one more connection from `key`, unless it has its share.
    fn take_address_slot(&self, key: AddrKey) -> bool {
        let mut map = self
            .per_address
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let n = map.entry(key).or_insert(0);
        if *n >= self.limits.max_connections_per_address {
            return false;
        }
        *n += 1;
        true
    }

    fn release_address_slot(&self, key: AddrKey) {
        let mut map = self
            .per_address
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = map.get_mut(&key) {
            *n -= 1;
            // Gone clients leave no entry: the map stays as large as the
            // set of addresses connected now.
            if *n == 0 {
                map.remove(&key);
            }
        }
    }
}

/// Counts a connection while it lives, whatever ends it (a panic too): in
/// all, against its address when it took one of its address's slots, and
/// against its event loop once it has one.
struct Counted<H: Handler> {
    core: Arc<Core<H>>,
    addr: Option<AddrKey>,
    lane: Option<usize>,
}

impl<H: Handler> Counted<H> {
    /// Places the connection on the event loop serving the fewest.
    fn place(&mut self) -> usize {
        let loads = &self.core.loads;
        let lane = (0..loads.len())
            .min_by_key(|&i| loads[i].load(Ordering::Relaxed))
            .unwrap_or(0);
        loads[lane].fetch_add(1, Ordering::Relaxed);
        self.lane = Some(lane);
        lane
    }
}

impl<H: Handler> Drop for Counted<H> {
    fn drop(&mut self) {
        if let Some(key) = self.addr {
            self.core.release_address_slot(key);
        }
        if let Some(lane) = self.lane {
            self.core.loads[lane].fetch_sub(1, Ordering::Relaxed);
        }
        self.core.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn accept_loop<H: Handler>(
    core: Arc<Core<H>>,
    listener: TcpListener,
    loops: Vec<tokio::runtime::Handle>,
    tls: Option<Tls>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        let Ok((stream, peer)) = accepted else {
            // Out of descriptors or a connection reset before accept: wait a
            // little rather than spin.
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        if core.stopping.load(Ordering::SeqCst) {
            return;
        }
        let _ = stream.set_nodelay(true);
        let n = core.connections.fetch_add(1, Ordering::SeqCst);
        let mut counted = Counted {
            core: core.clone(),
            addr: None,
            lane: None,
        };
        let refused = if n >= core.limits.max_connections {
            Some("too many connections")
        } else if core.limits.max_connections_per_address == usize::MAX {
            None
        } else {
            let key = AddrKey::of(peer.ip());
            if core.take_address_slot(key) {
                counted.addr = Some(key);
                None
            } else {
                Some("too many connections from this address")
            }
        };
        if let Some(why) = refused {
            if tls.is_none() {
                // Answered off the accept loop: a client that does not read
                // must not hold it up.
                tokio::spawn(async move {
                    let mut s = stream;
                    let mut out = Vec::new();
                    conn::write_error(&counted.core, &mut out, &Response::error(503, why));
                    let _ = timeout(Duration::from_secs(1), s.write_all(&out)).await;
                    drop(counted);
                });
            }
            // With TLS, a 503 would need a handshake first: too many
            // connections means no time for one.
            continue;
        }
        let lane = counted.place();
        // Out of the accepting loop's poller, into that of the loop it goes
        // to: two calls per connection, none per request.
        let stream = stream.into_std();
        let stop = stop.clone();
        let tls = tls.clone();
        loops[lane].spawn(async move {
            let core = &counted.core;
            let loads = &core.loads[lane];
            let Ok(stream) = stream.and_then(tokio::net::TcpStream::try_from) else {
                return;
            };
            match tls {
                None => conn::serve(core, stream, Some(peer.ip()), loads, stop).await,
                #[cfg(feature = "tls")]
                Some(acceptor) => {
                    // The handshake gets the time a request would.
                    let hs = timeout(core.limits.request_timeout, acceptor.accept(stream)).await;
                    if let Ok(Ok(tls_stream)) = hs {
                        conn::serve(core, tls_stream, Some(peer.ip()), loads, stop).await;
                    }
                }
                #[cfg(not(feature = "tls"))]
                Some(never) => match never {},
            }
        });
    }
}
