//! The HTTP client: [`RemoteEngine`], a [`Storage`] engine whose tables live on
//! a Burrow (or mORMot-compatible) server.
//!
//! `Client::open(model, Arc::new(RemoteEngine::connect(url)?))` is a remote
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
//!   the checked [`Filter`], so the server parses and binds them again.
//! - An [`OrmCache`] may keep rows by ID; see [`RemoteBuilder::cache`].

use std::cell::RefCell;
use std::io::{IoSlice, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use burrow_core::driver::{CacheScope, TxWrites};
use burrow_core::json::{self, JsonDialect};
use burrow_core::{
    BatchItem, BatchOp, BatchResult, Caps, Column, EngineTx, Error, Fields, Filter, OrmCache,
    OwnedRow, Result, Row, RowOps, Select, SqlHost, Storage, Table, Value,
};

use crate::auth::{mormot_password_hash, mormot_private_key, mormot_proof, mormot_signature};
use crate::web::wire::{header_text, percent_encode, Framing};

const ENGINE: &str = "remote";

/// An error status a server answered, with its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteError {
    /// The HTTP status.
    pub status: u16,
    /// The server's `errorText` (or body).
    pub text: String,
}

impl std::fmt::Display for RemoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {}: {}", self.status, self.text)
    }
}

impl std::error::Error for RemoteError {}

/// A response read by the client.
struct Reply {
    status: u16,
    body: Vec<u8>,
    location: Option<String>,
}

/// What a record's conversions say they expected (`burrow-core`'s
/// `FieldType` impls and JSON readers), for rebuilding a server's
/// [`Error::TypeMismatch`].
const KNOWN_EXPECTATIONS: [&str; 14] = [
    "i64",
    "i32",
    "u32",
    "f64",
    "bool",
    "currency",
    "text",
    "blob",
    "date",
    "date-time",
    "JSON",
    "JSON text",
    "reference ID",
    "a value (the field is not nullable)",
];

impl Reply {
    fn text(&self) -> String {
        serde_json::from_slice::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| {
                v.get("errorText")
                    .and_then(|t| t.as_str())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| String::from_utf8_lossy(&self.body).into_owned())
    }

    /// How long the server waited for another transaction, when it answered
    /// that an engine was busy.
    fn waited(&self) -> Option<Duration> {
        serde_json::from_slice::<serde_json::Value>(&self.body)
            .ok()?
            .get("waited")?
            .as_u64()
            .map(Duration::from_millis)
    }

    /// A type mismatch the server reported, as it reported it.
    fn mismatch(&self) -> Option<Error> {
        let v = serde_json::from_slice::<serde_json::Value>(&self.body).ok()?;
        let member = |name: &str| v.get(name).and_then(|m| m.as_str());
        let expected = member("expected")?;
        Some(Error::TypeMismatch {
            at: member("at")?.to_owned(),
            // The error holds a static text: one of the expectations a
            // record's conversion states, else a general one.
            expected: KNOWN_EXPECTATIONS
                .iter()
                .find(|k| **k == expected)
                .copied()
                .unwrap_or("a value of the field's type"),
            found: member("found")?.to_owned(),
        })
    }

    /// The error this reply stands for (a status other than 2xx).
    fn error(&self, table: Option<&Table>) -> Error {
        if self.status == 400 {
            if let Some(e) = self.mismatch() {
                return e;
            }
        }
        let text = self.text();
        match self.status {
            409 => Error::UniqueViolation {
                table: table.map_or_else(String::new, |t| t.name.to_owned()),
                detail: text,
            },
            503 => match self.waited() {
                Some(waited) => Error::Busy {
                    engine: ENGINE,
                    waited,
                },
                None => Error::engine(
                    ENGINE,
                    RemoteError {
                        status: self.status,
                        text,
                    },
                ),
            },
            400 | 404 | 405 | 411 | 413 => Error::BadInput(format!(
                "the server refused the request ({}): {text}",
                self.status
            )),
            _ => Error::engine(
                ENGINE,
                RemoteError {
                    status: self.status,
                    text,
                },
            ),
        }
    }
}

/// A client connection: plain, or TLS over it.
pub(crate) enum Stream {
    Plain(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    /// The socket under it.
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.get_ref(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write_vectored(bufs),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// A kept-alive connection.
struct Conn {
    stream: Stream,
    buf: Vec<u8>,
    /// Whether it already carried a request (a failure on a reused connection
    /// before any answer may be retried once on a new one).
    reused: bool,
}

impl Conn {
    /// Whether the server still holds the connection open: nothing to read
    /// yet (a closed one reads end of file, or an alert under TLS).
    fn open(&self) -> bool {
        let tcp = self.stream.tcp();
        if tcp.set_nonblocking(true).is_err() {
            return false;
        }
        let r = tcp.peek(&mut [0u8; 1]);
        tcp.set_nonblocking(false).is_ok()
            && matches!(r, Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

enum Credentials {
    None,
    Bearer(String),
    Session { hexa8: String, private_key: u32 },
}

/// Options of a [`RemoteEngine`]; see [`RemoteEngine::builder`].
pub struct RemoteBuilder {
    url: String,
    timeout: Duration,
    cache: OrmCache,
    login: Option<(String, String, bool)>,
    bearer: Option<String>,
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
        };
        // One round trip now, so that a wrong address fails here.
        let r = engine.call("GET", "timestamp", b"")?;
        if r.status != 200 {
            return Err(r.error(None));
        }
        match self.login {
            Some((user, password, false)) => engine.login_mormot(&user, &password)?,
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
}

impl std::fmt::Debug for RemoteEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteEngine")
            .field("addr", &self.addr)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

fn ticks() -> u32 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = START.get_or_init(Instant::now);
    // mORMot's timestamp: milliseconds / 256, from some origin.
    ((start.elapsed().as_millis() as u64 + (1 << 20)) >> 8) as u32
}

fn hex8(v: u32) -> String {
    format!("{v:08x}")
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
            bearer: None,
            #[cfg(feature = "tls")]
            tls_roots: None,
        }
    }

    /// The client-side cache.
    pub fn cache(&self) -> &OrmCache {
        &self.cache
    }

    fn login_mormot(&self, user: &str, password: &str) -> Result<()> {
        let mut q = String::from("auth?username=");
        percent_encode(user, &mut q);
        let r = self.call("GET", &q, b"")?;
        if r.status != 200 {
            return Err(r.error(None));
        }
        let nonce = result_of(&r.body)?;
        let mut rnd = [0u8; 16];
        crate::auth::random(&mut rnd);
        let cnonce: String = rnd.iter().map(|b| format!("{b:02x}")).collect();
        let hash = mormot_password_hash(password);
        let proof = mormot_proof(&self.root, &nonce, &cnonce, user, &hash);
        let q = format!("{q}&password={proof}&clientnonce={cnonce}");
        let r = self.call("GET", &q, b"")?;
        if r.status != 200 {
            return Err(r.error(None));
        }
        let key = result_of(&r.body)?;
        let id: u32 = key
            .split('+')
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Error::engine(ENGINE, format!("unexpected session key {key:?}")))?;
        *self
            .credentials
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Credentials::Session {
            hexa8: hex8(id),
            private_key: mormot_private_key(&key, &hash),
        };
        Ok(())
    }

    fn login_bearer(&self, user: &str, password: &str) -> Result<()> {
        let mut body = b"{\"userName\":".to_vec();
        json::write_str(&mut body, user);
        body.extend_from_slice(b",\"password\":");
        json::write_str(&mut body, password);
        body.push(b'}');
        let r = self.call("POST", "auth", &body)?;
        if r.status != 200 {
            return Err(r.error(None));
        }
        let token = result_of(&r.body)?;
        *self
            .credentials
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Credentials::Bearer(token);
        Ok(())
    }

    fn open_conn(&self) -> Result<Conn> {
        let stream = TcpStream::connect_timeout(&self.addr, self.timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(self.timeout))?;
        stream.set_write_timeout(Some(self.timeout))?;
        #[cfg(feature = "tls")]
        let stream = match &self.tls {
            Some(t) => t.wrap(stream)?,
            None => Stream::Plain(stream),
        };
        #[cfg(not(feature = "tls"))]
        let stream = Stream::Plain(stream);
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(8192),
            reused: false,
        })
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

    /// Sends `req` on a pooled connection (a new one if none is idle), and
    /// pools the connection again after a complete answer.
    fn pooled(
        &self,
        req: Request<'_>,
        replayable: bool,
        waiting: &mut dyn FnMut(),
    ) -> Result<Reply> {
        // A write must not be sent twice: on a kept connection the server may
        // have closed while idle, which is checked first, since a failure
        // after sending would leave open whether it ran.
        let mut conn = match self.idle() {
            Some(c) if replayable || c.open() => c,
            _ => self.open_conn()?,
        };
        let (reply, keep) = match exchange(&mut conn, req, waiting) {
            Ok(r) => r,
            Err(e) if conn.reused && e.again(replayable) => {
                conn = self.open_conn()?;
                exchange(&mut conn, req, waiting).map_err(Retry::into_error)?
            }
            Err(e) => return Err(e.into_error()),
        };
        if keep {
            self.put_back(conn);
        }
        Ok(reply)
    }

    /// An idle pooled connection, if any.
    fn idle(&self) -> Option<Conn> {
        self.pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
    }

    /// Pools a connection that carried a request and can carry another.
    fn put_back(&self, mut conn: Conn) {
        conn.reused = true;
        self.pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(conn);
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
        if let Credentials::Session { hexa8, private_key } = &*creds {
            let ts = hex8(ticks());
            let sign = mormot_signature(*private_key, ts.as_bytes(), uri.as_bytes());
            uri.push(if uri.contains('?') { '&' } else { '?' });
            uri.push_str("session_signature=");
            uri.push_str(hexa8);
            uri.push_str(&ts);
            uri.push_str(&hex8(sign));
        }
        let _ = write!(
            out,
            "{method} /{uri} HTTP/1.1\r\nHost: {}\r\nUser-Agent: Burrow/{}\r\nAccept: */*\r\nBurrow-Json: exact, compact\r\nContent-Type: application/json; charset=UTF-8\r\nContent-Length: {len}\r\n",
            self.host,
            env!("CARGO_PKG_VERSION")
        );
        if let Credentials::Bearer(t) = &*creds {
            let _ = write!(out, "Authorization: Bearer {t}\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }

    fn table_path(table: &Table, id: Option<i64>) -> String {
        match id {
            Some(id) => format!("{}/{id}", table.name),
            None => table.name.to_owned(),
        }
    }
}

enum Retry {
    /// The request was not written whole: the server cannot have run it, and
    /// it can be sent again.
    Unsent(Error),
    /// Written whole, then the connection closed before any byte of an
    /// answer: the server may or may not have run it. Sent again only when
    /// running it twice changes nothing (a read).
    Unanswered(Error),
    No(Error),
}

impl Retry {
    fn into_error(self) -> Error {
        match self {
            Retry::Unsent(e) | Retry::No(e) => e,
            Retry::Unanswered(e) => Error::engine(
                ENGINE,
                format!(
                    "the connection closed after the request was sent, before any answer \
                     ({e}): the server may or may not have applied it"
                ),
            ),
        }
    }

    /// Whether the request can go again on a new connection.
    fn again(&self, replayable: bool) -> bool {
        match self {
            Retry::Unsent(_) => true,
            Retry::Unanswered(_) => replayable,
            Retry::No(_) => false,
        }
    }
}

/// Bodies up to this size are copied behind the head and sent with it.
const SMALL_BODY: usize = 16 * 1024;

/// A batch body larger than this, of a batch the server runs in its own
/// transaction, is sent in pieces of about this size, each as soon as it is
/// encoded: the server receives one while the next is made, and the client's
/// memory stays this small, already touched, where a body of megabytes would
/// fault in page after page.
const PIECE: usize = 64 * 1024;

/// A request to send: its head, then its body.
#[derive(Clone, Copy)]
struct Request<'a> {
    head: &'a [u8],
    body: Body<'a>,
}

/// Writes a body piece by piece into the sink it is given.
type Pieces<'a> = &'a dyn Fn(&mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<()>;

/// A request's body.
#[derive(Clone, Copy)]
enum Body<'a> {
    Bytes(&'a [u8]),
    /// This many bytes, made while they are sent (and made again if the
    /// request is sent again): a large body goes out as it is encoded,
    /// rather than after, and is never whole in memory.
    Streamed(usize, Pieces<'a>),
}

/// Writes both parts of `req`, in as few system calls as the socket takes.
fn write_request(stream: &mut Stream, req: Request<'_>) -> std::io::Result<()> {
    let (len, pieces) = match req.body {
        Body::Bytes(body) => return write_parts(stream, req.head, body),
        Body::Streamed(len, pieces) => (len, pieces),
    };
    let mut head = Some(req.head);
    let mut sent = 0;
    pieces(&mut |piece| {
        sent += piece.len();
        if sent > len {
            return Err(wrong_length());
        }
        match head.take() {
            Some(h) => write_parts(stream, h, piece),
            None => stream.write_all(piece),
        }
    })?;
    if let Some(h) = head {
        stream.write_all(h)?;
    }
    // Fewer bytes than announced: the server waits for the rest, so the
    // connection is dropped, and nothing runs.
    if sent != len {
        return Err(wrong_length());
    }
    Ok(())
}

#[cold]
fn wrong_length() -> std::io::Error {
    std::io::Error::other("a request body came out another length than announced")
}

fn write_parts(stream: &mut Stream, mut head: &[u8], mut body: &[u8]) -> std::io::Result<()> {
    while !head.is_empty() {
        let n = stream.write_vectored(&[IoSlice::new(head), IoSlice::new(body)])?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let from_head = n.min(head.len());
        head = &head[from_head..];
        body = &body[n - from_head..];
    }
    stream.write_all(body)
}

/// Writes a request and reads its response; the flag says whether the
/// connection can be kept.
fn exchange(
    c: &mut Conn,
    req: Request<'_>,
    waiting: &mut dyn FnMut(),
) -> std::result::Result<(Reply, bool), Retry> {
    c.buf.clear();
    if let Err(e) = write_request(&mut c.stream, req) {
        return Err(Retry::Unsent(e.into()));
    }
    waiting();
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        match resp.parse(&c.buf) {
            Ok(httparse::Status::Complete(head)) => {
                let status = resp.code.unwrap_or(0);
                let mut framing = Framing::new(resp.version);
                let mut location = None;
                for h in resp.headers.iter() {
                    let framed = framing
                        .header(h.name, h.value)
                        .map_err(|_| Retry::No(Error::engine(ENGINE, "bad Content-Length")))?;
                    if !framed && h.name.eq_ignore_ascii_case("location") {
                        location = header_text(h.value).map(str::to_owned);
                    }
                }
                if framing.chunked {
                    return Err(Retry::No(Error::engine(
                        ENGINE,
                        "a chunked response (Burrow and mORMot servers send a Content-Length)",
                    )));
                }
                let len = framing.content_length.unwrap_or(0);
                let keep = framing.keep_alive;
                if status == 100 {
                    c.buf.drain(..head);
                    continue;
                }
                while c.buf.len() < head + len {
                    read_more(c).map_err(Retry::No)?;
                }
                let body = c.buf[head..head + len].to_vec();
                c.buf.drain(..head + len);
                return Ok((
                    Reply {
                        status,
                        body,
                        location,
                    },
                    keep && c.buf.is_empty(),
                ));
            }
            Ok(httparse::Status::Partial) => {
                let first = c.buf.is_empty();
                match read_more(c) {
                    Ok(()) => {}
                    Err(e) if first => return Err(Retry::Unanswered(e)),
                    Err(e) => return Err(Retry::No(e)),
                }
            }
            Err(e) => {
                return Err(Retry::No(Error::engine(
                    ENGINE,
                    format!("malformed response: {e}"),
                )))
            }
        }
    }
}

fn read_more(c: &mut Conn) -> Result<()> {
    let mut chunk = [0u8; 16 * 1024];
    let n = c.stream.read(&mut chunk)?;
    if n == 0 {
        return Err(Error::engine(ENGINE, "the server closed the connection"));
    }
    c.buf.extend_from_slice(&chunk[..n]);
    Ok(())
}

/// A compact array of integers (`[1,2,200]`, as Burrow and mORMot servers
/// write batch results), `None` for anything else.
fn integers(body: &[u8], hint: usize) -> Option<Vec<i64>> {
    let inner = body.trim_ascii().strip_prefix(b"[")?.strip_suffix(b"]")?;
    let mut out = Vec::with_capacity(hint);
    if inner.is_empty() {
        return Some(out);
    }
    let mut i = 0;
    loop {
        let neg = inner.get(i) == Some(&b'-');
        i += usize::from(neg);
        let start = i;
        let mut v: i64 = 0;
        while let Some(d) = inner
            .get(i)
            .map(|c| c.wrapping_sub(b'0'))
            .filter(|d| *d < 10)
        {
            // At most 18 digits: always within an i64.
            if i - start == 18 {
                return None;
            }
            v = v * 10 + i64::from(d);
            i += 1;
        }
        if i == start {
            return None;
        }
        out.push(if neg { -v } else { v });
        match inner.get(i) {
            None => return Some(out),
            Some(b',') => i += 1,
            Some(_) => return None,
        }
    }
}

fn mismatch() -> Error {
    Error::engine(ENGINE, "the batch results do not match its items")
}

fn result_of(body: &[u8]) -> Result<String> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("result").and_then(|r| r.as_str()).map(str::to_owned))
        .ok_or_else(|| Error::engine(ENGINE, "unexpected authentication answer"))
}

/// A value as mORMot's inline parameter `:(…):`.
fn inline_param(v: &Value, out: &mut String) -> Result<()> {
    let quoted = |s: &str, out: &mut String| {
        out.push_str(":('");
        out.push_str(&s.replace('\'', "''"));
        out.push_str("'):");
    };
    match v {
        Value::Int(i) => out.push_str(&format!(":({i}):")),
        Value::Real(f) if f.is_finite() => out.push_str(&format!(":({f:?}):")),
        Value::Bool(b) => out.push_str(if *b { ":(1):" } else { ":(0):" }),
        Value::Currency(c) => quoted(&c.to_string(), out),
        Value::Date(d) => quoted(&burrow_core::datetime::format_date(*d), out),
        Value::DateTime(t) => quoted(&burrow_core::datetime::format_datetime(*t), out),
        Value::Text(s) => quoted(s, out),
        // Burrow's WHERE reads SQL's blob literal (mORMot has none).
        Value::Blob(b) => {
            out.push_str("x'");
            for byte in b {
                out.push_str(&format!("{byte:02x}"));
            }
            out.push('\'');
        }
        other => {
            return Err(Error::Unsupported(format!(
                "a {} parameter cannot travel in a remote WHERE clause",
                other.type_name()
            )))
        }
    }
    Ok(())
}

/// The WHERE text of a filter with its parameters inline.
fn render_filter(table: &Table, filter: &Filter) -> Result<String> {
    let mut sql = String::new();
    filter.write_sql(&mut sql, &mut |c: Column, o: &mut String| {
        o.push_str(table.column_name(c))
    });
    let mut out = String::with_capacity(sql.len() + 16 * filter.params.len());
    let mut params = filter.params.iter();
    for (i, part) in sql.split('?').enumerate() {
        if i > 0 {
            let p = params
                .next()
                .ok_or_else(|| Error::BadInput("more placeholders than parameters".into()))?;
            inline_param(p, &mut out)?;
        }
        out.push_str(part);
    }
    Ok(out)
}

/// WHERE, ORDER BY, LIMIT and OFFSET of a select, as the `where=` parameter.
fn render_tail(table: &Table, select: &Select) -> Result<String> {
    let mut s = render_filter(table, &select.filter)?;
    for (i, (c, desc)) in select.order.iter().enumerate() {
        s.push_str(if i == 0 { " ORDER BY " } else { ", " });
        s.push_str(table.column_name(*c));
        if *desc {
            s.push_str(" DESC");
        }
    }
    if let Some(l) = select.limit {
        s.push_str(&format!(" LIMIT {l}"));
    }
    if select.offset > 0 {
        s.push_str(&format!(" OFFSET {}", select.offset));
    }
    Ok(s.trim().to_owned())
}

/// Replaces each `?` outside quotes with an inline parameter.
fn inline_sql(sql: &str, params: &[Value]) -> Result<String> {
    let mut out = String::with_capacity(sql.len() + 16 * params.len());
    let mut it = params.iter();
    let mut quoted = false;
    for ch in sql.chars() {
        match ch {
            '\'' => {
                quoted = !quoted;
                out.push(ch);
            }
            '?' if !quoted => inline_param(
                it.next()
                    .ok_or_else(|| Error::BadInput("more placeholders than parameters".into()))?,
                &mut out,
            )?,
            _ => out.push(ch),
        }
    }
    if it.next().is_some() {
        return Err(Error::BadInput("more parameters than placeholders".into()));
    }
    Ok(out)
}

fn parse_object(table: &'static Table, body: &[u8]) -> Result<OwnedRow> {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(o)) => OwnedRow::from_object(table, &o, false).map(|(r, _)| r),
        _ => Err(Error::engine(ENGINE, "the server sent an invalid object")),
    }
}

/// Whether an update or a delete found its row (200) or not (404).
fn found(table: &Table, r: Reply) -> Result<bool> {
    match r.status {
        200 => Ok(true),
        404 => Ok(false),
        _ => Err(r.error(Some(table))),
    }
}

/// The first cell of a one-column list, in either form.
fn first_cell(body: &[u8]) -> Result<Option<serde_json::Value>> {
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| Error::engine(ENGINE, format!("invalid list: {e}")))?;
    Ok(match v {
        serde_json::Value::Object(mut o) => {
            let n = o.get("fieldCount").and_then(|n| n.as_u64()).unwrap_or(1) as usize;
            match o.remove("values") {
                Some(serde_json::Value::Array(mut vals)) if vals.len() > n => {
                    Some(vals.swap_remove(n))
                }
                _ => None,
            }
        }
        serde_json::Value::Array(mut rows) if !rows.is_empty() => match rows.swap_remove(0) {
            serde_json::Value::Object(o) => o.into_iter().next().map(|(_, v)| v),
            _ => None,
        },
        _ => None,
    })
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
        self.call_with(method, path, Body::Bytes(body), &mut || {})
    }

    /// [`Link::call`], running `waiting` once the request is sent and
    /// before its answer is read.
    fn call_with(
        &self,
        method: &str,
        path: &str,
        body: Body<'_>,
        waiting: &mut dyn FnMut(),
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
            Some(line) => line.send(&self.engine.cache, req, waiting),
            None => self.engine.pooled(req, method == "GET", waiting),
        }
    }

    /// The cache as these calls write through it: the engine's own, or
    /// the open transaction's.
    fn scope(&self) -> CacheScope<'_> {
        self.engine.cache.scope(self.tx.map(|line| &line.writes))
    }

    /// Sends `items` as one batch request (`own_transaction`: see
    /// [`Link::write_batch`]), reads the results into `results`, and keeps
    /// the cache right, its copies of the rows made while the server works.
    fn batch(
        &self,
        items: &[BatchItem<'_>],
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
        own_transaction: Option<bool>,
    ) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let apply = |results: &mut Vec<BatchResult>, waiting: &mut dyn FnMut()| {
            let r = self.send_batch(items, stop_on_error, own_transaction, waiting)?;
            self.batch_results(items, &r, results)
        };
        self.scope()
            .apply_batch(items, results, own_transaction.is_some(), apply)
    }

    fn list(&self, table: &'static Table, columns: &str, select: &Select) -> Result<Vec<u8>> {
        let mut path = format!("{}?select=", table.name);
        percent_encode(columns, &mut path);
        let tail = render_tail(table, select)?;
        if !tail.is_empty() {
            path.push_str("&where=");
            percent_encode(&tail, &mut path);
        }
        let r = self.call("GET", &path, b"")?;
        if r.status != 200 {
            return Err(r.error(Some(table)));
        }
        Ok(r.body)
    }

    /// Sends a batch request for `items` (see [`Link::write_batch`]), and
    /// runs `waiting` once it is sent, while the server works.
    fn send_batch(
        &self,
        items: &[BatchItem<'_>],
        stop_on_error: bool,
        own_transaction: Option<bool>,
        waiting: &mut dyn FnMut(),
    ) -> Result<Reply> {
        let write =
            |out: &mut Vec<u8>,
             piece: &mut dyn FnMut(&mut Vec<u8>, bool) -> std::io::Result<()>| {
                self.write_batch(items, stop_on_error, own_transaction, out, piece)
            };
        // A batch the server runs in its own transaction, it parses and
        // applies at once (see `batch::parse_and_run`), and receiving it
        // while it is encoded paid (in the benchmark, Batch went from about
        // 0.47 to 0.50-0.55 of in-process); inside a transaction of the
        // client's, the server reads it whole first, and the second encoding
        // pass cost more than it saved (Batch Trans about 0.42 against
        // 0.47): that body is encoded once, whole.
        let stream = own_transaction.is_some();
        let mut whole = Vec::with_capacity(if stream {
            PIECE + PIECE / 8
        } else {
            items.len() * 160 + 64
        });
        // First the length: a body that fits in one piece is kept whole;
        // past that, it is only measured, then made again while it is sent.
        let mut len = 0;
        let mut streamed = false;
        let _ = write(&mut whole, &mut |out, last| {
            if !stream || (last && !streamed) {
                return Ok(());
            }
            streamed = true;
            len += out.len();
            out.clear();
            Ok(())
        });
        let pieces = |sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>| {
            let mut out = Vec::with_capacity(PIECE + PIECE / 8);
            write(&mut out, &mut |out, _| {
                sink(out)?;
                out.clear();
                Ok(())
            })
        };
        let body = if streamed {
            Body::Streamed(len, &pieces)
        } else {
            Body::Bytes(&whole)
        };
        self.call_with("PUT", "Batch", body, waiting)
    }

    /// Writes the body of a batch request for `items` into `body`, handing
    /// it to `piece` whenever it holds [`PIECE`] bytes or more, and at the
    /// end (`true`); `piece` empties it. With `own_transaction`
    /// (`Some(rollback_on_error)`) the server runs the batch in one
    /// transaction. The same items always make the same bytes.
    fn write_batch(
        &self,
        items: &[BatchItem<'_>],
        stop_on_error: bool,
        own_transaction: Option<bool>,
        body: &mut Vec<u8>,
        piece: &mut dyn FnMut(&mut Vec<u8>, bool) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        body.extend_from_slice(b"[\"stopOnError\",");
        body.extend_from_slice(if stop_on_error { b"true" } else { b"false" });
        if let Some(rollback_on_error) = own_transaction {
            body.extend_from_slice(b",\"automaticTransactionPerRow\",");
            body.extend_from_slice(itoa::Buffer::new().format(items.len()).as_bytes());
            if rollback_on_error {
                body.extend_from_slice(b",\"rollbackOnError\",true");
            }
        }
        let mut simple = json::SimpleWriter::new();
        // `,"SIMPLE@Table",` as last written: runs of adds repeat it.
        let mut simple_verb: (Option<&Table>, Vec<u8>) = (None, Vec::new());
        for item in items {
            body.push(b',');
            let verb = |body: &mut Vec<u8>, verb: &[u8]| {
                body.push(b'"');
                body.extend_from_slice(verb);
                body.push(b'@');
                body.extend_from_slice(item.table.name.as_bytes());
                body.extend_from_slice(b"\",");
            };
            match item.op {
                BatchOp::Add { id: None, row } => {
                    if !simple_verb.0.is_some_and(|t| std::ptr::eq(t, item.table)) {
                        simple_verb.1.clear();
                        verb(&mut simple_verb.1, b"SIMPLE");
                        simple_verb.0 = Some(item.table);
                    }
                    body.extend_from_slice(&simple_verb.1);
                    simple.write(body, row, JsonDialect::Exact);
                }
                BatchOp::Add { id: Some(id), row } => {
                    verb(body, b"POST");
                    let mut r = OwnedRow::from_fields(row);
                    r.id = id;
                    json::write_fields(body, &r, None, true, JsonDialect::Exact);
                }
                BatchOp::Update { row, fields } => {
                    verb(body, b"PUT");
                    json::write_fields(body, row, fields, true, JsonDialect::Exact);
                }
                BatchOp::Delete { id } => {
                    verb(body, b"DELETE");
                    body.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
                }
            }
            if body.len() >= PIECE {
                piece(body, false)?;
            }
        }
        body.push(b']');
        piece(body, true)
    }

    /// Reads the answer to a batch request for `items` into `results`.
    fn batch_results(
        &self,
        items: &[BatchItem<'_>],
        r: &Reply,
        results: &mut Vec<BatchResult>,
    ) -> Result<()> {
        if r.status != 200 {
            let err = r.error(Some(items[0].table));
            let index = serde_json::from_slice::<serde_json::Value>(&r.body)
                .ok()
                .and_then(|v| v.get("index").and_then(|i| i.as_u64()));
            return Err(match index {
                Some(index) => Error::Batch {
                    index: index as usize,
                    source: Box::new(err),
                },
                None => err,
            });
        }
        // The common answer is all numbers: read it without a JSON tree.
        if let Some(nums) = integers(&r.body, items.len()) {
            if nums.len() != items.len() {
                return Err(mismatch());
            }
            results.reserve(items.len());
            for (item, n) in items.iter().zip(nums) {
                results.push(match item.op {
                    BatchOp::Add { .. } => BatchResult::Added(n),
                    _ if n == 404 => BatchResult::Missing,
                    _ => BatchResult::Done,
                });
            }
        } else {
            let arr: Vec<serde_json::Value> = serde_json::from_slice(&r.body)
                .map_err(|e| Error::engine(ENGINE, format!("invalid batch results: {e}")))?;
            if arr.len() != items.len() {
                return Err(mismatch());
            }
            for (item, v) in items.iter().zip(arr) {
                results.push(match (&item.op, v) {
                    (_, serde_json::Value::Object(o)) => {
                        let status =
                            o.get("errorCode").and_then(|c| c.as_u64()).unwrap_or(500) as u16;
                        let text = o
                            .get("errorText")
                            .and_then(|t| t.as_str())
                            .unwrap_or("")
                            .to_owned();
                        let reply = Reply {
                            status,
                            body: serde_json::json!({ "errorText": text })
                                .to_string()
                                .into_bytes(),
                            location: None,
                        };
                        BatchResult::Failed(Box::new(reply.error(Some(item.table))))
                    }
                    (BatchOp::Add { .. }, v) => BatchResult::Added(
                        v.as_i64()
                            .ok_or_else(|| Error::engine(ENGINE, "a batch add without its ID"))?,
                    ),
                    (_, v) if v.as_u64() == Some(404) => BatchResult::Missing,
                    _ => BatchResult::Done,
                });
            }
        }
        Ok(())
    }

    fn sql_select(
        &self,
        table: &'static Table,
        sql: &str,
        params: &[Value],
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        let text = inline_sql(sql, params)?;
        let r = self.call("GET", "", text.as_bytes())?;
        if r.status != 200 {
            return Err(r.error(Some(table)));
        }
        for row in json::parse_list(table, &r.body)? {
            out(&row)?;
        }
        Ok(())
    }
}

impl RowOps for Link<'_> {
    fn insert(&self, table: &'static Table, id: Option<i64>, row: &dyn Fields) -> Result<i64> {
        self.scope().insert(table, id, row, || {
            let mut body = Vec::with_capacity(256);
            match id {
                Some(id) => {
                    // The forced ID travels in the object.
                    let mut r = OwnedRow::from_fields(row);
                    r.id = id;
                    json::write_fields(&mut body, &r, None, true, JsonDialect::Exact);
                }
                None => json::write_fields(&mut body, row, None, false, JsonDialect::Exact),
            }
            let r = self.call("POST", table.name, &body)?;
            if r.status != 201 {
                return Err(r.error(Some(table)));
            }
            r.location
                .as_deref()
                .and_then(|l| l.rsplit('/').next())
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Error::engine(ENGINE, "201 without a Location"))
        })
    }

    fn update(
        &self,
        table: &'static Table,
        row: &dyn Fields,
        fields: Option<&[usize]>,
    ) -> Result<bool> {
        self.scope().update(table, row, fields, || {
            let mut body = Vec::with_capacity(256);
            json::write_fields(&mut body, row, fields, false, JsonDialect::Exact);
            let path = RemoteEngine::table_path(table, Some(row.id()));
            found(table, self.call("PUT", &path, &body)?)
        })
    }

    fn delete(&self, table: &'static Table, id: i64) -> Result<bool> {
        self.scope().delete(table, id, || {
            let path = RemoteEngine::table_path(table, Some(id));
            found(table, self.call("DELETE", &path, b"")?)
        })
    }

    fn delete_where(&self, table: &'static Table, filter: &Filter) -> Result<u64> {
        self.scope().delete_where(table, || {
            let mut path = format!("{}?where=", table.name);
            percent_encode(&render_filter(table, filter)?, &mut path);
            let r = self.call("DELETE", &path, b"")?;
            if r.status != 200 {
                return Err(r.error(Some(table)));
            }
            serde_json::from_slice::<serde_json::Value>(&r.body)
                .ok()
                .and_then(|v| v.get("deleted").and_then(|d| d.as_u64()))
                .ok_or_else(|| Error::engine(ENGINE, "unexpected answer to a DELETE"))
        })
    }

    fn retrieve(
        &self,
        table: &'static Table,
        id: i64,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<bool> {
        // IDs are positive on the wire (as in mORMot): no row has another.
        if id <= 0 {
            return Ok(false);
        }
        self.scope().retrieve_owned(table, id, out, || {
            let r = self.call("GET", &RemoteEngine::table_path(table, Some(id)), b"")?;
            match r.status {
                200 => parse_object(table, &r.body).map(Some),
                404 => Ok(None),
                _ => Err(r.error(Some(table))),
            }
        })
    }

    fn select(
        &self,
        table: &'static Table,
        select: &Select,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        let body = self.list(table, "*", select)?;
        for row in json::parse_list(table, &body)? {
            out(&row)?;
        }
        Ok(())
    }

    fn count(&self, table: &'static Table, filter: &Filter) -> Result<u64> {
        let mut sql = format!("SELECT count(*) FROM {}", table.name);
        let w = render_filter(table, filter)?;
        if !w.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&w);
        }
        let r = self.call("GET", "", sql.as_bytes())?;
        if r.status != 200 {
            return Err(r.error(Some(table)));
        }
        first_cell(&r.body)?
            .and_then(|v| v.as_u64())
            .ok_or_else(|| Error::engine(ENGINE, "unexpected answer to a count"))
    }

    fn select_value(
        &self,
        table: &'static Table,
        column: Column,
        select: &Select,
    ) -> Result<Option<Value>> {
        let body = self.list(table, table.column_name(column), select)?;
        match first_cell(&body)? {
            None => Ok(None),
            Some(v) => match column {
                Column::Id => Ok(json::parse_id(&v).map(Value::Int)),
                Column::Field(i) => json::parse_value(table, &table.fields[i], &v).map(Some),
            },
        }
    }

    fn apply_batch(
        &self,
        items: &[BatchItem<'_>],
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
    ) -> Result<()> {
        self.batch(items, results, stop_on_error, None)
    }
}

burrow_core::forward_row_ops!(RemoteEngine, |s| s.link());

impl Storage for RemoteEngine {
    fn caps(&self) -> Caps {
        Caps::network(ENGINE)
    }

    fn ensure_table(&self, table: &'static Table) -> Result<()> {
        let r = self.call("GET", &format!("{}?select=ID&results=1", table.name), b"")?;
        match r.status {
            200 | 401 | 403 => Ok(()),
            _ => Err(Error::UnknownTable(format!(
                "{} on the server: {}",
                table.name,
                r.text()
            ))),
        }
    }

    fn begin(self: Arc<Self>) -> Result<Box<dyn EngineTx>> {
        let mut conn = match self.idle() {
            Some(c) => c,
            None => self.open_conn()?,
        };
        let mut head = Vec::new();
        self.write_head(&mut head, "BEGIN", "", 0);
        let req = Request {
            head: &head,
            body: Body::Bytes(b""),
        };
        // A BEGIN that ran on a connection now gone ended with it: sending it
        // again is safe.
        let (reply, keep) = match exchange(&mut conn, req, &mut || {}) {
            Ok(r) => r,
            Err(e) if conn.reused && e.again(true) => {
                conn = self.open_conn()?;
                exchange(&mut conn, req, &mut || {}).map_err(Retry::into_error)?
            }
            Err(e) => return Err(e.into_error()),
        };
        if reply.status != 200 {
            if keep {
                self.put_back(conn);
            }
            return Err(reply.error(None));
        }
        if !keep {
            return Err(Error::engine(
                ENGINE,
                "the server closed the transaction's connection",
            ));
        }
        conn.reused = true;
        Ok(Box::new(RemoteTx {
            engine: self,
            line: TxLine {
                conn: RefCell::new(Some(conn)),
                writes: TxWrites::default(),
            },
        }))
    }

    /// The server runs the batch under its own transaction: one request, where
    /// `begin`, the batch and `commit` would be three round trips.
    fn apply_batch_in_transaction(
        &self,
        items: &[BatchItem<'_>],
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
        rollback_on_error: bool,
    ) -> Option<Result<()>> {
        let own_transaction = Some(rollback_on_error);
        Some(
            self.link()
                .batch(items, results, stop_on_error, own_transaction),
        )
    }

    fn sql_host(&self) -> Option<&dyn SqlHost> {
        Some(self)
    }
}

impl SqlHost for RemoteEngine {
    fn sql_select(
        &self,
        table: &'static Table,
        sql: &str,
        params: &[Value],
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        self.link().sql_select(table, sql, params, out)
    }

    /// Nothing to do: the SQL runs on the server, which sees its own tables
    /// only; a statement naming a table held elsewhere fails there.
    fn expose(&self, table: &'static Table, engine: Arc<dyn Storage>) -> Result<()> {
        let _ = (table, engine);
        Ok(())
    }
}

/// What an open remote transaction holds.
struct TxLine {
    /// The connection the server ties the transaction to; `None` once it
    /// was lost, and the server rolled the transaction back with it.
    conn: RefCell<Option<Conn>>,
    /// What the transaction wrote through the cache.
    writes: TxWrites,
}

impl TxLine {
    /// Sends `req` on the transaction's connection.
    fn send(&self, cache: &OrmCache, req: Request<'_>, waiting: &mut dyn FnMut()) -> Result<Reply> {
        let mut slot = self.conn.borrow_mut();
        let Some(conn) = slot.as_mut() else {
            return Err(lost());
        };
        let r = exchange(conn, req, waiting);
        if !r.as_ref().is_ok_and(|(_, keep)| *keep) {
            // Never sent again on another connection: the transaction is gone
            // with this one.
            *slot = None;
            self.writes.end(cache, false);
        }
        r.map(|(reply, _)| reply).map_err(Retry::into_error)
    }
}

#[cold]
fn lost() -> Error {
    Error::Transaction(
        "the remote transaction's connection closed, and the server rolled the transaction back",
    )
}

/// An open transaction on the server: `BEGIN` was sent on its connection,
/// and every call goes on that connection until `END` or `ABORT`.
struct RemoteTx {
    engine: Arc<RemoteEngine>,
    line: TxLine,
}

impl RemoteTx {
    fn link(&self) -> Link<'_> {
        Link {
            engine: &self.engine,
            tx: Some(&self.line),
        }
    }

    /// Ends the transaction with `END` (commit) or `ABORT`, then pools its
    /// connection again.
    fn end(&mut self, verb: &str) -> Result<()> {
        let Some(mut conn) = self.line.conn.get_mut().take() else {
            // Already rolled back by the server, when the connection was lost.
            self.line.writes.end(&self.engine.cache, false);
            return if verb == "END" { Err(lost()) } else { Ok(()) };
        };
        let mut head = Vec::new();
        self.engine.write_head(&mut head, verb, "", 0);
        let req = Request {
            head: &head,
            body: Body::Bytes(b""),
        };
        let r = exchange(&mut conn, req, &mut || {}).map_err(Retry::into_error);
        let committed = verb == "END" && matches!(&r, Ok((reply, _)) if reply.status == 200);
        self.line.writes.end(&self.engine.cache, committed);
        let (reply, keep) = r?;
        if keep {
            self.engine.put_back(conn);
        }
        if reply.status != 200 {
            return Err(reply.error(None));
        }
        Ok(())
    }
}

burrow_core::forward_row_ops!(RemoteTx, |s| s.link());

impl EngineTx for RemoteTx {
    fn commit(mut self: Box<Self>) -> Result<()> {
        self.end("END")
    }

    fn rollback(mut self: Box<Self>) -> Result<()> {
        self.end("ABORT")
    }

    fn sql_host(&self) -> Option<&dyn SqlHost> {
        Some(self)
    }
}

impl SqlHost for RemoteTx {
    fn sql_select(
        &self,
        table: &'static Table,
        sql: &str,
        params: &[Value],
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        self.link().sql_select(table, sql, params, out)
    }
}

impl Drop for RemoteTx {
    /// `ABORT` rather than only closing the connection, which the server
    /// also rolls back on: once this returns the server has rolled back, so
    /// the caller's next call never waits for it, and the connection is
    /// pooled again.
    fn drop(&mut self) {
        if self.line.conn.get_mut().is_some() {
            let _ = self.end("ABORT");
        }
    }
}

#[cfg(test)]
mod test {
    use super::{integers, write_request, Body, Request, Stream};
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};

    /// What `write_request` puts on the wire for a body made in `pieces`
    /// and announced as `len` bytes, and whether it succeeded.
    fn streamed(len: usize, pieces: &[&[u8]]) -> (bool, Vec<u8>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut stream = Stream::Plain(
            TcpStream::connect(listener.local_addr().expect("addr")).expect("connect"),
        );
        let (mut server, _) = listener.accept().expect("accept");
        let write = |sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>| {
            pieces.iter().try_for_each(|p| sink(p))
        };
        let req = Request {
            head: b"HEAD|",
            body: Body::Streamed(len, &write),
        };
        let ok = write_request(&mut stream, req).is_ok();
        drop(stream);
        let mut wire = Vec::new();
        server.read_to_end(&mut wire).expect("read");
        (ok, wire)
    }

    #[test]
    fn a_streamed_body_goes_out_as_announced_or_not_whole() {
        assert_eq!(
            streamed(6, &[b"ab", b"", b"cdef"]),
            (true, b"HEAD|abcdef".to_vec())
        );
        assert_eq!(streamed(0, &[]), (true, b"HEAD|".to_vec()));
        // Longer than announced: the piece that overflows is not sent.
        assert_eq!(streamed(3, &[b"ab", b"cd"]), (false, b"HEAD|ab".to_vec()));
        // Shorter: an error, so that the connection is dropped rather than
        // left waiting for the rest.
        assert_eq!(streamed(5, &[b"ab"]), (false, b"HEAD|ab".to_vec()));
    }

    #[test]
    fn batch_results_as_integers() {
        assert_eq!(integers(b"[]", 0), Some(vec![]));
        assert_eq!(
            integers(b" [1,200,-3,404,999999999999999999]\n", 5),
            Some(vec![1, 200, -3, 404, 999_999_999_999_999_999])
        );
        for other in [
            &b"[1,]"[..],
            b"[,1]",
            b"[1 ,2]",
            b"[1.5]",
            b"[-]",
            b"[1000000000000000000]",
            b"[\"OK\"]",
            b"[{\"errorCode\":409}]",
            b"1,2",
        ] {
            assert_eq!(
                integers(other, 1),
                None,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }
}
