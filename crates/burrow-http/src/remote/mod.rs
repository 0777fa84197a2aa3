//! The HTTP client: [`RemoteEngine`], a [`Storage`](burrow_core::Storage)
//! engine whose tables live on a Burrow (or mORMot-compatible) server.
//!
//! `Database::open(model, Arc::new(RemoteEngine::connect(url)?))` is a remote
//! [`burrow_core::Orm`]: application code does not change. A server can also
//! place one of its own tables in a `RemoteEngine`, keeping it on another server.
//!
//! - Connections are blocking sockets (TLS over them for `https://` URLs, with
//!   the `tls` feature) kept alive in a pool: a call takes one, or opens one,
//!   and puts it back after a complete response.
//! - A transaction is a value that owns a connection taken from the pool:
//!   `BEGIN` on it, every call through the transaction on it (the server
//!   ties the transaction to that connection), then `END` or `ABORT`, and
//!   the connection goes back to the pool. Dropped without a commit, it
//!   sends `ABORT`.
//! - A batch is one `PUT /{root}/Batch` request.
//! - WHERE clauses travel as mORMot's inline parameters (`:(…):`), rendered from
//!   the checked [`Filter`](burrow_core::Filter), so the server parses and
//!   binds them again.
//! - An [`OrmCache`] may keep rows by ID; see [`RemoteBuilder::cache`].
//!
//! This file holds the engine, its builder (connecting, logging in), and
//! [`Link`], the calls of the engine or of one of its transactions, down to
//! the request each sends. The rest, by responsibility: `conn.rs` (one
//! connection, plain or TLS, and one exchange on it), `pool.rs` (the idle
//! connections), `retry.rs` (when a request goes again on a new
//! connection), `login.rs` (mORMot's signed sessions, bearer tokens),
//! `render.rs` (filters, selects and SQL into URLs), `reply.rs` (answers,
//! and the errors they stand for), `batch.rs` (batch bodies and results),
//! `tx.rs` (the transaction handle), `rows.rs` (the row calls and the
//! engine's `Storage` and `SqlHost` impls).

mod batch;
mod conn;
mod login;
mod pool;
pub(crate) mod render;
mod reply;
mod retry;
mod rows;
mod tx;

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use burrow_core::driver::CacheScope;
use burrow_core::{Error, OrmCache, Result};

use conn::{Body, Conn, Request, Sink, SMALL_BODY};
use login::Credentials;
use reply::Reply;
use tx::TxLine;

/// The socket the TLS connector wraps.
#[cfg(feature = "tls")]
pub(crate) use conn::Stream;
pub use reply::RemoteError;

const ENGINE: &str = "remote";

/// See [`RemoteBuilder::spin_wait`].
const DEFAULT_SPIN_WAIT: Duration = Duration::from_micros(100);

/// Options of a [`RemoteEngine`]; see [`RemoteEngine::builder`].
pub struct RemoteBuilder {
    url: String,
    timeout: Duration,
    cache: OrmCache,
    login: Option<(String, String, bool)>,
    weak_signatures: bool,
    bearer: Option<String>,
    spin_wait: Duration,
    #[cfg(feature = "tls")]
    tls_roots: Option<Vec<u8>>,
}

impl RemoteBuilder {
    /// Sends `Authorization: Bearer {token}` with every request.
    pub fn bearer(mut self, token: impl Into<String>) -> Self {
        self.bearer = Some(token.into());
        self
    }

    /// Logs in with mORMot's signed-session scheme, then signs every URI.
    pub fn login(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.login = Some((user.into(), password.into(), false));
        self
    }

    /// Accepts a server that signs sessions with CRC-32 (mORMot's historical
    /// form, [`crate::UriSignature::Crc32`]): one observed signed request
    /// gives its session's key away. Off by default: [`Self::login`] then
    /// fails against such a server.
    pub fn weak_signatures(mut self, allow: bool) -> Self {
        self.weak_signatures = allow;
        self
    }

    /// Logs in with a password for a bearer token (`POST /{root}/auth`).
    pub fn login_bearer(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.login = Some((user.into(), password.into(), true));
        self
    }

    /// Keeps rows by ID in `cache` (client side): retrieves hit it, writes
    /// through this engine keep it right, other clients' writes show once
    /// an entry expires.
    pub fn cache(mut self, cache: OrmCache) -> Self {
        self.cache = cache;
        self
    }

    /// How long a request may wait for its answer.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// How long a call polls its connection for the answer before its
    /// thread sleeps until the answer comes (default 100 µs; zero never
    /// polls). Waking a sleeping thread costs tens of microseconds, much of
    /// a small call's round trip to a server nearby: polling keeps the
    /// thread running while the answer is on its way, which on loopback
    /// about doubles the calls per second of one thread. It spends the
    /// caller's CPU for at most this long per call, yielding it to any
    /// other thread ready to run meanwhile; a connection whose
    /// answers keep arriving later than this stops polling (and tries now
    /// and then whether answers come quickly again). Plain `http://` only:
    /// under TLS the thread sleeps as it waits. A Burrow server polls for
    /// the next request the same way ([`Limits::spin_wait`](crate::web::Limits::spin_wait)):
    /// with both, a call in a loop on loopback never waits for a wake-up.
    pub fn spin_wait(mut self, budget: Duration) -> Self {
        self.spin_wait = budget;
        self
    }

    /// For `https://` URLs: trusts the CA certificates in `pem` (one or more
    /// PEM blocks) instead of the public web roots, as for a server whose
    /// certificate a private CA signed.
    #[cfg(feature = "tls")]
    pub fn tls_roots(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_roots = Some(pem.into());
        self
    }

    /// Connects (and logs in, when asked).
    pub fn connect(self) -> Result<RemoteEngine> {
        let (https, rest) = match (
            self.url.strip_prefix("http://"),
            self.url.strip_prefix("https://"),
        ) {
            (Some(rest), _) => (false, rest),
            (None, Some(rest)) => (true, rest),
            (None, None) => {
                return Err(Error::BadInput(format!(
                    "{}: the URL must start with http:// or https://",
                    self.url
                )))
            }
        };
        let (host, root) = rest.split_once('/').unwrap_or((rest, ""));
        let addr = host
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| Error::BadInput(format!("{host}: no address")))?;
        #[cfg(feature = "tls")]
        let tls = if https {
            let name = host.rsplit_once(':').map_or(host, |(name, _)| name);
            Some(crate::tls::Connector::new(name, self.tls_roots.as_deref())?)
        } else {
            None
        };
        #[cfg(not(feature = "tls"))]
        if https {
            return Err(Error::BadInput(format!(
                "{}: https:// needs burrow-http's `tls` feature",
                self.url
            )));
        }
        let engine = RemoteEngine {
            addr,
            #[cfg(feature = "tls")]
            tls,
            host: host.to_owned(),
            root: root.trim_matches('/').to_owned(),
            pool: Mutex::new(Vec::new()),
            credentials: Mutex::new(match self.bearer {
                Some(t) => Credentials::Bearer(t),
                None => Credentials::None,
            }),
            cache: self.cache,
            timeout: self.timeout,
            spin_wait: self.spin_wait,
        };
        // One round trip now, so that a wrong address fails here.
        let r = engine.call("GET", "timestamp", b"")?;
        if r.status != 200 {
            return Err(r.error(None));
        }
        match self.login {
            Some((user, password, false)) => {
                engine.login_mormot(&user, &password, self.weak_signatures)?
            }
            Some((user, password, true)) => engine.login_bearer(&user, &password)?,
            None => {}
        }
        Ok(engine)
    }
}

/// A storage engine on a remote server, over HTTP/1.1.
pub struct RemoteEngine {
    addr: SocketAddr,
    #[cfg(feature = "tls")]
    tls: Option<crate::tls::Connector>,
    host: String,
    root: String,
    /// Idle connections, for calls outside a transaction and for
    /// transactions to begin on.
    pool: Mutex<Vec<Conn>>,
    credentials: Mutex<Credentials>,
    cache: OrmCache,
    timeout: Duration,
    /// See [`RemoteBuilder::spin_wait`].
    spin_wait: Duration,
}

impl std::fmt::Debug for RemoteEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteEngine")
            .field("addr", &self.addr)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl RemoteEngine {
    /// Connects to `http://host:port/root` (or `https://`, with the `tls`
    /// feature) without credentials.
    pub fn connect(url: &str) -> Result<RemoteEngine> {
        RemoteEngine::builder(url).connect()
    }

    /// Starts configuring a connection to `http://host:port/root`.
    pub fn builder(url: &str) -> RemoteBuilder {
        RemoteBuilder {
            url: url.to_owned(),
            timeout: Duration::from_secs(60),
            cache: OrmCache::new(),
            login: None,
            weak_signatures: false,
            bearer: None,
            spin_wait: DEFAULT_SPIN_WAIT,
            #[cfg(feature = "tls")]
            tls_roots: None,
        }
    }

    /// The client-side cache.
    pub fn cache(&self) -> &OrmCache {
        &self.cache
    }

    /// The engine's own calls: each on any pooled connection, and its own
    /// transaction on the server.
    fn link(&self) -> Link<'_> {
        Link {
            engine: self,
            tx: None,
        }
    }

    /// Sends one request outside any transaction; `path` is relative to the
    /// root (`Sample/1?…`).
    fn call(&self, method: &str, path: &str, body: &[u8]) -> Result<Reply> {
        self.link().call(method, path, body)
    }

    fn write_head(&self, out: &mut Vec<u8>, method: &str, path: &str, len: usize) {
        let mut uri = String::with_capacity(self.root.len() + path.len() + 40);
        uri.push_str(&self.root);
        if !path.is_empty() {
            uri.push('/');
            uri.push_str(path);
        }
        let creds = self
            .credentials
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        creds.sign(method, &mut uri);
        let _ = write!(
            out,
            "{method} /{uri} HTTP/1.1\r\nHost: {}\r\nUser-Agent: Burrow/{}\r\nAccept: */*\r\nBurrow-Json: exact, compact\r\nContent-Type: application/json; charset=UTF-8\r\nContent-Length: {len}\r\n",
            self.host,
            env!("CARGO_PKG_VERSION")
        );
        creds.write_header(out);
        out.extend_from_slice(b"\r\n");
    }
}

/// The calls of a [`RemoteEngine`] (`tx` is `None`: each on any pooled
/// connection, its own transaction on the server) or of one of its open
/// transactions (on the connection the server ties that transaction to).
#[derive(Clone, Copy)]
struct Link<'a> {
    engine: &'a RemoteEngine,
    tx: Option<&'a TxLine>,
}

impl Link<'_> {
    /// Sends one request; `path` is relative to the root (`Sample/1?…`).
    fn call(&self, method: &str, path: &str, body: &[u8]) -> Result<Reply> {
        self.call_with(method, path, Body::Bytes(body), &mut || {}, None)
    }

    /// [`Link::call`], running `waiting` once the request is sent and
    /// before its answer is read.
    fn call_with(
        &self,
        method: &str,
        path: &str,
        body: Body<'_>,
        waiting: &mut dyn FnMut(),
        sink: Option<&mut Sink<'_>>,
    ) -> Result<Reply> {
        let len = match body {
            Body::Bytes(b) => b.len(),
            Body::Streamed(len, _) => len,
        };
        let mut head = Vec::with_capacity(256 + len.min(SMALL_BODY));
        self.engine.write_head(&mut head, method, path, len);
        // A small body travels in the head's buffer (one write); a large one
        // is written from where it is, not copied.
        let req = match body {
            Body::Bytes(b) if b.len() <= SMALL_BODY => {
                head.extend_from_slice(b);
                Request {
                    head: &head,
                    body: Body::Bytes(b""),
                }
            }
            _ => Request { head: &head, body },
        };
        match self.tx {
            Some(line) => line.send(&self.engine.cache, req, waiting, sink),
            None => self.engine.pooled(req, method == "GET", waiting, sink),
        }
    }

    /// The cache as these calls write through it: the engine's own, or
    /// the open transaction's.
    fn scope(&self) -> CacheScope<'_> {
        self.engine.cache.scope(self.tx.map(|line| &line.writes))
    }
}
