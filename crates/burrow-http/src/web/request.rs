//! Request heads, parsed with `httparse`: borrowed from the connection's
//! buffer while the handler admits them, owned once their body is read.

use std::borrow::Cow;
use std::mem::MaybeUninit;
use std::net::IpAddr;
use std::ops::{Deref, Range};

use super::response::Response;
use super::wire::{percent_decode, Framing};
use super::Limits;

/// Most headers a request may carry (more: 413).
const MAX_HEADERS: usize = 64;

/// A request's head: request line and headers, parsed and checked.
///
/// Borrowed from the connection's buffer when [`super::Handler::admit`]
/// sees it (nothing copied yet); a [`Request`] holds an owned one.
#[derive(Debug, Clone)]
pub struct RequestHead<'a> {
    /// The head as received, request line and header lines. Invalid UTF-8
    /// in a header value is replaced (the request line is always text).
    text: Cow<'a, str>,
    method_len: usize,
    target: Range<usize>,
    /// Where the path ends in `text` (at the `?`, or `target.end`).
    path_end: usize,
    /// Where the query starts in `text` (after the `?`), or `target.end`.
    query_start: usize,
    /// The path percent-decoded, when decoding changed it.
    decoded_path: Option<String>,
    content_length: usize,
    keep_alive: bool,
    gzip: bool,
    expect_continue: bool,
    http11: bool,
    peer: Option<IpAddr>,
}

impl RequestHead<'_> {
    /// The address of the client (the TCP peer), when known.
    pub fn peer(&self) -> Option<IpAddr> {
        self.peer
    }

    pub(crate) fn set_peer(&mut self, peer: Option<IpAddr>) {
        self.peer = peer;
    }

    /// The method, as sent (`GET`, `POST`, or any other token).
    pub fn method(&self) -> &str {
        &self.text[..self.method_len]
    }

    /// The request target as sent: path and query, still encoded.
    pub fn target(&self) -> &str {
        &self.text[self.target.clone()]
    }

    /// The target's path, percent-decoded (`+` stays a `+`).
    pub fn path(&self) -> &str {
        match &self.decoded_path {
            Some(p) => p,
            None => &self.text[self.target.start..self.path_end],
        }
    }

    /// The target's query (after `?`), still encoded; empty without one.
    pub fn query(&self) -> &str {
        &self.text[self.query_start..self.target.end]
    }

    /// The percent-decoded value (`+` as a space) of the first query
    /// parameter named `name`, compared decoded and ignoring ASCII case (so
    /// `%77here=` is `where=`, as any other HTTP stack reads it); `Some("")`
    /// for a parameter without `=`.
    pub fn param(&self, name: &str) -> Option<Cow<'_, str>> {
        let q = self.query();
        if q.is_empty() {
            return None;
        }
        q.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            percent_decode(k, true)
                .eq_ignore_ascii_case(name)
                .then(|| percent_decode(v, true))
        })
    }

    /// The headers, in the order sent: name as sent, value with its blanks
    /// trimmed.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &str)> {
        // The request line ends at the first line feed; the head ends with an
        // empty line. `httparse` checked every line in between.
        let start = self.text.find('\n').map_or(self.text.len(), |i| i + 1);
        self.text[start..]
            .split('\n')
            .map(|line| line.strip_suffix('\r').unwrap_or(line))
            .take_while(|line| !line.is_empty())
            .filter_map(|line| {
                let (name, value) = line.split_once(':')?;
                Some((name, value.trim_matches([' ', '\t'])))
            })
    }

    /// The value of the first header named `name` (ignoring ASCII case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// The body's length (`Content-Length`; 0 without one).
    pub fn content_length(&self) -> usize {
        self.content_length
    }

    /// The connection stays open after this request (HTTP/1.1 without
    /// `Connection: close`, or HTTP/1.0 with `Connection: keep-alive`).
    pub fn keep_alive(&self) -> bool {
        self.keep_alive
    }

    /// The client accepts a gzipped response (`Accept-Encoding`).
    pub fn accepts_gzip(&self) -> bool {
        self.gzip
    }

    /// The request is HTTP/1.1 (not 1.0): it may be answered chunked.
    pub fn is_http11(&self) -> bool {
        self.http11
    }

    /// The client waits for `100 Continue` before sending its body.
    pub fn expects_continue(&self) -> bool {
        self.expect_continue
    }

    /// An owned copy (the only allocation of a request without escapes in
    /// its path and without a body).
    pub fn into_owned(self) -> RequestHead<'static> {
        RequestHead {
            text: Cow::Owned(self.text.into_owned()),
            method_len: self.method_len,
            target: self.target,
            path_end: self.path_end,
            query_start: self.query_start,
            decoded_path: self.decoded_path,
            content_length: self.content_length,
            keep_alive: self.keep_alive,
            gzip: self.gzip,
            expect_continue: self.expect_continue,
            http11: self.http11,
            peer: self.peer,
        }
    }
}

/// A request whose body has been read: its [`RequestHead`] (reached through
/// `Deref`: `req.method()`, `req.param("q")`, `req.header("Authorization")`…)
/// and its body.
#[derive(Debug, Clone)]
pub struct Request {
    head: RequestHead<'static>,
    /// The body, exactly `content_length()` bytes.
    pub body: Vec<u8>,
}

impl Request {
    pub(crate) fn new(head: RequestHead<'static>, body: Vec<u8>) -> Request {
        Request { head, body }
    }

    /// The head, without the body.
    pub fn head(&self) -> &RequestHead<'static> {
        &self.head
    }

    /// Both parts, for a handler that moves the body elsewhere.
    pub fn into_parts(self) -> (RequestHead<'static>, Vec<u8>) {
        (self.head, self.body)
    }
}

impl Deref for Request {
    type Target = RequestHead<'static>;

    fn deref(&self) -> &RequestHead<'static> {
        &self.head
    }
}

/// What [`parse`] found at the start of a buffer.
pub(crate) enum Parsed<'a> {
    /// A whole head, this many bytes long.
    Head(RequestHead<'a>, usize),
    /// Not yet the whole head; read more.
    Partial,
    /// Answer this and close the connection.
    Fail(Response),
}

/// Parses the request head at the start of `buf`.
pub(crate) fn parse<'a>(buf: &'a [u8], limits: &Limits) -> Parsed<'a> {
    // Left uninitialized for `httparse` to fill: setting 64 empty headers
    // first cost more than parsing a short request.
    let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut r = httparse::Request::new(&mut []);
    let len = match r.parse_with_uninit_headers(buf, &mut headers) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return if buf.len() > limits.max_header_bytes {
                Parsed::Fail(Response::error(413, "request head too large"))
            } else {
                Parsed::Partial
            };
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Parsed::Fail(Response::error(413, "too many headers"))
        }
        Err(e) => return Parsed::Fail(Response::error(400, &format!("malformed request: {e}"))),
    };
    if len > limits.max_header_bytes {
        return Parsed::Fail(Response::error(413, "request head too large"));
    }
    let (Some(method), Some(target)) = (r.method, r.path) else {
        return Parsed::Fail(Response::error(400, "malformed request line"));
    };
    let mut framing = Framing::new(r.version);
    let mut gzip = false;
    let mut expect_continue = false;
    for h in r.headers.iter() {
        match framing.header(h.name, h.value) {
            Ok(true) => {}
            Ok(false) => {
                if h.name.eq_ignore_ascii_case("accept-encoding") {
                    gzip = contains_ignore_case(h.value, b"gzip");
                } else if h.name.eq_ignore_ascii_case("expect") {
                    expect_continue = h.value.trim_ascii().eq_ignore_ascii_case(b"100-continue");
                }
            }
            Err(_) => return Parsed::Fail(Response::error(400, "invalid Content-Length")),
        }
    }
    if framing.chunked {
        return Parsed::Fail(Response::error(
            411,
            "send a Content-Length (chunked bodies are not accepted)",
        ));
    }
    let content_length = framing.content_length.unwrap_or(0);
    if content_length > limits.max_body_bytes {
        return Parsed::Fail(Response::error(413, "request body too large"));
    }
    // Offsets into the buffer: `httparse` skips leading blank lines.
    let at = |s: &str| s.as_ptr() as usize - buf.as_ptr() as usize;
    let method_start = at(method);
    let target_start = at(target) - method_start;
    let target = target_start..target_start + target.len();
    let raw = &buf[method_start..len];
    let text = match std::str::from_utf8(raw) {
        Ok(t) => Cow::Borrowed(t),
        // Only header values can be other than text; the request line keeps
        // its offsets.
        Err(_) => Cow::Owned(String::from_utf8_lossy(raw).into_owned()),
    };
    let t = &text[target.clone()];
    let (path, path_end, query_start) = match t.bytes().position(|b| b == b'?') {
        Some(q) => (&t[..q], target.start + q, target.start + q + 1),
        None => (t, target.end, target.end),
    };
    let decoded_path = match percent_decode(path, false) {
        Cow::Borrowed(_) => None,
        Cow::Owned(p) => Some(p),
    };
    Parsed::Head(
        RequestHead {
            method_len: method.len(),
            target,
            path_end,
            query_start,
            decoded_path,
            content_length,
            keep_alive: framing.keep_alive,
            gzip,
            expect_continue,
            http11: r.version == Some(1),
            peer: None,
            text,
        },
        len,
    )
}

fn contains_ignore_case(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod test {
    use super::*;

    fn head(text: &[u8]) -> RequestHead<'_> {
        match parse(text, &Limits::default()) {
            Parsed::Head(h, n) => {
                assert_eq!(n, text.len());
                h
            }
            Parsed::Partial => panic!("partial"),
            Parsed::Fail(r) => panic!("failed: {}", r.status),
        }
    }

    #[test]
    fn heads_parse_into_their_parts() {
        let raw = b"\r\nGET /a%20b/c?x=1&Name=J%C3%A9+D&flag HTTP/1.1\r\nHost: h\r\nX-Empty:\r\nAuthorization:  Bearer t \r\nAccept-Encoding: deflate, GZIP\r\n\r\n";
        let h = head(raw);
        assert_eq!(h.method(), "GET");
        assert_eq!(h.target(), "/a%20b/c?x=1&Name=J%C3%A9+D&flag");
        assert_eq!(h.path(), "/a b/c");
        assert_eq!(h.query(), "x=1&Name=J%C3%A9+D&flag");
        assert_eq!(h.param("name").as_deref(), Some("Jé D"));
        assert_eq!(h.param("FLAG").as_deref(), Some(""));
        assert_eq!(h.param("y"), None);
        let h = head(b"GET /t?%77here=a&sel%65ct=b&dir+x=c HTTP/1.1\r\n\r\n");
        assert_eq!(h.param("where").as_deref(), Some("a"));
        assert_eq!(h.param("SELECT").as_deref(), Some("b"));
        assert_eq!(h.param("dir x").as_deref(), Some("c"));
        let h = head(raw);
        assert_eq!(h.header("authorization"), Some("Bearer t"));
        assert_eq!(h.header("x-empty"), Some(""));
        assert_eq!(h.headers().count(), 4);
        assert!(h.accepts_gzip() && h.keep_alive() && !h.expects_continue());
        assert_eq!(h.content_length(), 0);
        let owned = h.clone().into_owned();
        assert_eq!((owned.path(), owned.query()), (h.path(), h.query()));

        let h = head(
            b"POST /p HTTP/1.0\r\nContent-Length: 3\r\nExpect: 100-continue\r\nX: \xff\r\n\r\n",
        );
        assert_eq!((h.method(), h.path(), h.query()), ("POST", "/p", ""));
        assert_eq!(h.content_length(), 3);
        assert!(!h.keep_alive() && h.expects_continue());
        assert_eq!(h.header("x"), Some("\u{fffd}"));
        let h = head("GET /caf\u{e9}%C3%A9 HTTP/1.1\r\n\r\n".as_bytes());
        assert_eq!(h.path(), "/caféé");
        assert!(matches!(
            parse(b"GET /\xff HTTP/1.1\r\nX: \xff\r\n\r\n", &Limits::default()),
            Parsed::Fail(_)
        ));
        let h = head(b"GET /q? HTTP/1.1\r\n\r\n");
        assert_eq!((h.path(), h.query()), ("/q", ""));
    }

    #[test]
    fn bad_heads_fail_with_their_status() {
        let limits = Limits {
            max_header_bytes: 64,
            max_body_bytes: 10,
            ..Limits::default()
        };
        let status = |raw: &[u8]| match parse(raw, &limits) {
            Parsed::Fail(r) => r.status,
            Parsed::Partial => 0,
            Parsed::Head(..) => 200,
        };
        assert_eq!(status(b"GET / HTTP/1.1\r\n"), 0);
        assert_eq!(status(b"GARBAGE\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nContent-Length: +2\r\n\r\n"), 400);
        assert_eq!(
            status(b"GET / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n"),
            400
        );
        assert_eq!(status(b"GET / HTTP/1.1\r\nContent-Length: 11\r\n\r\n"), 413);
        assert_eq!(status(&[b'a'; 65]), 413);
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            411
        );
    }
}
