//! Responses, their serialization (status line, the core's headers, the
//! handler's, gzip), and the `Date` header's cache.

use std::borrow::Cow;
use std::cell::Cell;
use std::io::Write as _;

/// `application/json; charset=UTF-8`.
pub const JSON: &str = "application/json; charset=UTF-8";
/// `text/plain; charset=utf-8`.
pub const TEXT: &str = "text/plain; charset=utf-8";

/// A response, as a handler returns it. The core adds `Server`, `Date`,
/// `Content-Length`, the [`super::Handler::extra_headers`], `Connection:
/// close` when it closes, and gzips a large body for a client that accepts
/// it.
pub struct Response {
    /// The status code.
    pub status: u16,
    /// `Content-Type`; not sent when empty.
    pub content_type: Cow<'static, str>,
    /// The body (for `HEAD`, only its length is sent); with a
    /// [`Response::stream`], its first piece.
    pub body: Vec<u8>,
    /// More headers (e.g. `Location`). A name or value holding a line break
    /// is not sent.
    pub headers: Vec<(Cow<'static, str>, Cow<'static, str>)>,
    /// The rest of the body, produced a piece at a time as the client reads
    /// it (see [`Response::streamed`]).
    pub stream: Option<Box<dyn BodyStream>>,
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("content_type", &self.content_type)
            .field("body", &self.body.len())
            .field("headers", &self.headers)
            .field("streamed", &self.stream.is_some())
            .finish()
    }
}

/// The pieces of a body too large to hold whole: the core asks for the next
/// one once the previous one is written, so a response holds one piece at a
/// time however large it is, and a client that reads slowly slows its
/// producer rather than filling memory.
///
/// Such a body is sent with `Transfer-Encoding: chunked` (to an HTTP/1.0
/// client: until the connection closes), gzipped on the fly for a client
/// that accepts gzip. Its length is not known in advance: a `HEAD` gets the
/// head only.
pub trait BodyStream: Send + 'static {
    /// The next piece, or `None` once the body is whole. An error ends the
    /// response early: the connection closes without the body's end, so the
    /// client sees it cut short rather than taking it for whole.
    fn next(&mut self) -> PieceFuture<'_>;

    /// Told once, before the pieces after the first are asked for: the
    /// processor the request arrived on (Linux's `SO_INCOMING_CPU`; `None`
    /// where unknown). On loopback that is where the client runs, and reads
    /// this body as it comes: a producer that keeps a processor busy for
    /// each piece may keep its thread off that one
    /// ([`burrow_core::driver::apart`]), so that the two run side by side
    /// rather than take turns on one. Ignored by default.
    fn peer_cpu(&mut self, cpu: Option<usize>) {
        let _ = cpu;
    }
}

/// What [`BodyStream::next`] returns.
pub type PieceFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Option<std::io::Result<Vec<u8>>>> + Send + 'a>,
>;

impl Response {
    /// A status with an empty body and no content type.
    pub fn empty(status: u16) -> Self {
        Response {
            status,
            content_type: Cow::Borrowed(""),
            body: Vec::new(),
            headers: Vec::new(),
            stream: None,
        }
    }

    /// 200 with this body and content type.
    pub fn with(content_type: impl Into<Cow<'static, str>>, body: Vec<u8>) -> Self {
        Response {
            status: 200,
            content_type: content_type.into(),
            body,
            headers: Vec::new(),
            stream: None,
        }
    }

    /// 200 with a body of `first`, then what `rest` produces: see
    /// [`BodyStream`].
    pub fn streamed(
        content_type: impl Into<Cow<'static, str>>,
        first: Vec<u8>,
        rest: impl BodyStream,
    ) -> Self {
        Response {
            stream: Some(Box::new(rest)),
            ..Response::with(content_type, first)
        }
    }

    /// 200 with a JSON body ([`JSON`]).
    pub fn json(body: Vec<u8>) -> Self {
        Response::with(JSON, body)
    }

    /// 200 with a plain-text body ([`TEXT`]).
    pub fn text(body: impl Into<Vec<u8>>) -> Self {
        Response::with(TEXT, body.into())
    }

    /// An error as JSON: `{"errorCode":N,"errorText":"…"}` (the form the
    /// core's own errors take, and mORMot's).
    pub fn error(status: u16, text: &str) -> Self {
        let mut body = Vec::with_capacity(40 + text.len());
        body.extend_from_slice(b"{\"errorCode\":");
        body.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
        body.extend_from_slice(b",\"errorText\":");
        burrow_core::json::write_str(&mut body, text);
        body.push(b'}');
        Response {
            status,
            ..Response::json(body)
        }
    }

    /// Sets the content type.
    pub fn with_type(mut self, content_type: impl Into<Cow<'static, str>>) -> Self {
        self.content_type = content_type.into();
        self
    }

    /// Sets the status.
    pub fn status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    /// Adds a header.
    pub fn header(
        mut self,
        name: impl Into<Cow<'static, str>>,
        value: impl Into<Cow<'static, str>>,
    ) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// Where [`super::Handler::extra_headers`] writes its headers.
pub struct Headers<'a>(&'a mut Vec<u8>);

impl Headers<'_> {
    /// Adds `name: value` (not sent if either holds a line break).
    pub fn add(&mut self, name: &str, value: &[u8]) {
        if !one_line(name.as_bytes()) || !one_line(value) {
            return;
        }
        // One reservation for the four pieces.
        self.0.reserve(name.len() + value.len() + 4);
        self.0.extend_from_slice(name.as_bytes());
        self.0.extend_from_slice(b": ");
        self.0.extend_from_slice(value);
        self.0.extend_from_slice(b"\r\n");
    }

    /// Adds `name: n`.
    pub fn number(&mut self, name: &str, n: u64) {
        self.add(name, itoa::Buffer::new().format(n).as_bytes());
    }
}

fn one_line(s: &[u8]) -> bool {
    // Without an early exit the scan is vectorized.
    !s.iter()
        .fold(false, |e, &b| e | (b == b'\r') | (b == b'\n'))
}

/// The reason phrase of a status.
fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// `Date` as HTTP writes it (IMF-fixdate): `Sun, 06 Nov 1994 08:49:37 GMT`.
const DATE_LEN: usize = 29;

thread_local! {
    /// Each event-loop thread's `Date` text and the second it shows:
    /// rendered again when the second changes, read without a lock.
    static DATE: Cell<(i64, [u8; DATE_LEN])> = const { Cell::new((i64::MIN, [0; DATE_LEN])) };
}

/// The clock, as a Unix time and the nanoseconds into its second.
fn clock() -> (i64, u32) {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or((0, 0), |d| {
            (
                i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                d.subsec_nanos(),
            )
        })
}

/// The current Unix second, kept by a thread that wakes as each second
/// starts, so that a response reads it from memory: a clock read for every
/// response cost about 3% of a server answering pipelined requests. Read
/// from the clock itself if that thread could not be started.
fn now_second() -> i64 {
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};
    static NOW: AtomicI64 = AtomicI64::new(0);
    static TICKING: AtomicBool = AtomicBool::new(false);
    static START: std::sync::Once = std::sync::Once::new();
    START.call_once(|| {
        NOW.store(clock().0, Relaxed);
        let ticker = std::thread::Builder::new()
            .name("burrow-date".into())
            .spawn(|| loop {
                let (second, nanos) = clock();
                NOW.store(second, Relaxed);
                // Just past the start of the next second.
                let left = 1_000_000_000 - u64::from(nanos.min(999_999_999));
                std::thread::sleep(std::time::Duration::from_nanos(left + 200_000));
            });
        TICKING.store(ticker.is_ok(), Relaxed);
    });
    if TICKING.load(Relaxed) {
        NOW.load(Relaxed)
    } else {
        clock().0
    }
}

/// Appends the `Date` value of now.
pub(crate) fn write_date(out: &mut Vec<u8>) {
    let now = now_second();
    let (second, mut text) = DATE.get();
    if second != now {
        text = render_date(now);
        DATE.set((now, text));
    }
    out.extend_from_slice(&text);
}

/// The `Date` text of a Unix time.
pub(crate) fn render_date(unix: i64) -> [u8; DATE_LEN] {
    let t = burrow_core::chrono::DateTime::from_timestamp(unix, 0).unwrap_or_default();
    let mut out = [0u8; DATE_LEN];
    let mut w = &mut out[..];
    let _ = write!(w, "{}", t.format("%a, %d %b %Y %H:%M:%S GMT"));
    out
}

/// How [`write`] writes one response.
pub(crate) struct Framing<'a> {
    /// A `HEAD` request: the length of the body, not the body.
    pub head_only: bool,
    /// The client accepts gzip.
    pub gzip: bool,
    /// Bodies from this size are gzipped when the client accepts it.
    pub gzip_min: usize,
    /// The connection closes after it.
    pub close: bool,
    /// A streamed body goes chunked (the client speaks HTTP/1.1); else it
    /// ends when the connection closes.
    pub chunked: bool,
    /// The `Server` header.
    pub server: &'a str,
}

/// Serializes `resp` (head and body) into `out`; `extra` adds the
/// handler's headers.
pub(crate) fn write(
    out: &mut Vec<u8>,
    resp: &Response,
    how: &Framing<'_>,
    extra: impl FnOnce(&mut Headers<'_>),
) {
    let streamed = resp.stream.is_some();
    let gz = if how.gzip && !streamed && resp.body.len() >= how.gzip_min {
        gzip(&resp.body)
    } else {
        None
    };
    let body: &[u8] = gz.as_deref().unwrap_or(&resp.body);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(resp.status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason(resp.status).as_bytes());
    out.extend_from_slice(b"\r\nServer: ");
    out.extend_from_slice(how.server.as_bytes());
    out.extend_from_slice(b"\r\nDate: ");
    write_date(out);
    out.extend_from_slice(b"\r\n");
    let mut h = Headers(out);
    extra(&mut h);
    if !resp.content_type.is_empty() {
        h.add("Content-Type", resp.content_type.as_bytes());
    }
    if gz.is_some() || (streamed && how.gzip) {
        h.add("Content-Encoding", b"gzip");
        h.add("Vary", b"Accept-Encoding");
    }
    for (name, value) in &resp.headers {
        h.add(name, value.as_bytes());
    }
    if !streamed {
        out.extend_from_slice(b"Content-Length: ");
        out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
    } else if how.chunked {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    if how.close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !how.head_only && !streamed {
        out.extend_from_slice(body);
    }
}

/// Frames the pieces of a streamed body (see [`BodyStream`]): gzipped on
/// the fly when the client accepts it, chunked for HTTP/1.1.
pub(crate) struct Pieces {
    gz: Option<flate2::write::GzEncoder<Vec<u8>>>,
    chunked: bool,
}

impl Pieces {
    pub(crate) fn new(gzip: bool, chunked: bool) -> Pieces {
        Pieces {
            gz: gzip
                .then(|| flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast())),
            chunked,
        }
    }

    /// Appends `data`, framed, to `out` (gzip may hold some of it back).
    pub(crate) fn piece(&mut self, out: &mut Vec<u8>, data: &[u8]) -> std::io::Result<()> {
        match &mut self.gz {
            Some(enc) => {
                enc.write_all(data)?;
                // The encoder only appends to its output: what it has
                // written so far can be taken.
                let done = enc.get_mut();
                frame(out, done, self.chunked);
                done.clear();
            }
            None => frame(out, data, self.chunked),
        }
        Ok(())
    }

    /// Appends the end of the body to `out`.
    pub(crate) fn finish(self, out: &mut Vec<u8>) -> std::io::Result<()> {
        if let Some(enc) = self.gz {
            frame(out, &enc.finish()?, self.chunked);
        }
        if self.chunked {
            out.extend_from_slice(b"0\r\n\r\n");
        }
        Ok(())
    }
}

fn frame(out: &mut Vec<u8>, data: &[u8], chunked: bool) {
    // An empty chunk would end the body.
    if data.is_empty() {
        return;
    }
    if chunked {
        let _ = write!(out, "{:x}\r\n", data.len());
    }
    out.extend_from_slice(data);
    if chunked {
        out.extend_from_slice(b"\r\n");
    }
}

fn gzip(body: &[u8]) -> Option<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 4),
        flate2::Compression::fast(),
    );
    enc.write_all(body).ok()?;
    enc.finish().ok()
}

#[cfg(test)]
mod test {
    use super::*;

    fn date() -> String {
        let mut out = Vec::new();
        write_date(&mut out);
        String::from_utf8(out).expect("ASCII")
    }

    #[test]
    fn dates_render_as_http_dates_and_follow_the_clock() {
        assert_eq!(&render_date(784_111_777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        let first = date();
        assert_eq!(first.len(), DATE_LEN);
        assert!(first.ends_with(" GMT"), "{first}");
        let parsed =
            burrow_core::chrono::NaiveDateTime::parse_from_str(&first, "%a, %d %b %Y %H:%M:%S GMT")
                .expect("an IMF-fixdate");
        let skew = burrow_core::chrono::Utc::now().naive_utc() - parsed;
        assert!(skew.num_seconds().abs() <= 1, "{first}");
        std::thread::sleep(std::time::Duration::from_millis(1100));
        assert_ne!(date(), first, "the cached Date must not freeze");
    }

    #[test]
    fn responses_carry_the_core_headers_and_drop_broken_ones() {
        let mut out = Vec::new();
        let r = Response::text("hi")
            .header("Location", "a/1")
            .header("X-Bad", "a\r\nInjected: 1");
        let how = Framing {
            head_only: false,
            gzip: true,
            gzip_min: 1000,
            close: true,
            chunked: true,
            server: "S",
        };
        write(&mut out, &r, &how, |h| h.number("X-State", 7));
        let text = String::from_utf8(out).expect("text");
        assert!(
            text.starts_with("HTTP/1.1 200 OK\r\nServer: S\r\nDate: "),
            "{text}"
        );
        assert!(text.ends_with(
            "\r\nX-State: 7\r\nContent-Type: text/plain; charset=utf-8\r\nLocation: a/1\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi"
        ), "{text}");
        assert!(!text.contains("Injected"));
    }
}
