//! HTTP/1.1 requests and responses as the server sees them, and the error body.

use std::io::Write as _;
use std::sync::atomic::{AtomicI64, Ordering};

use burrow_core::{Error, ErrorKind};

/// A request, parsed and with its body read.
#[derive(Debug, Default)]
pub(crate) struct Request {
    /// The method, as sent (`GET`, `BEGIN`, …).
    pub method: String,
    /// The request target as sent, e.g. `/root/Sample?where=…`.
    pub target: String,
    /// The target's path, percent-decoded.
    pub path: String,
    /// The target's query, still encoded.
    pub query: String,
    /// The body (shared: a large batch's is parsed on another thread).
    pub body: std::sync::Arc<Vec<u8>>,
    /// The client accepts gzip.
    pub gzip: bool,
    /// A mORMot client (its User-Agent says so): lists are compact.
    pub mormot: bool,
    /// A Burrow client asking for exact date-times (`Burrow-Json: exact`).
    pub exact: bool,
    /// A client asking for compact lists (`Burrow-Json: compact`).
    pub compact: bool,
    /// An `Authorization: Bearer` token.
    pub bearer: Option<String>,
}

impl Request {
    /// The decoded value of a query parameter (name compared ignoring case).
    pub fn param(&self, name: &str) -> Option<String> {
        self.query.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            k.eq_ignore_ascii_case(name)
                .then(|| percent_decode(v, true))
        })
    }
}

/// A response about to be written.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: u16,
    pub body: Vec<u8>,
    pub content_type: &'static str,
    pub location: Option<String>,
}

pub(crate) const JSON: &str = "application/json; charset=UTF-8";
pub(crate) const TEXT: &str = "text/plain; charset=utf-8";

impl Response {
    /// 200 with a JSON body.
    pub fn json(body: Vec<u8>) -> Self {
        Response {
            status: 200,
            body,
            content_type: JSON,
            location: None,
        }
    }

    /// A status with an empty body.
    pub fn empty(status: u16) -> Self {
        Response {
            status,
            body: Vec::new(),
            content_type: JSON,
            location: None,
        }
    }

    /// The JSON error body `{"errorCode":N,"errorText":"…"}`.
    pub fn error(status: u16, text: &str) -> Self {
        let mut body = Vec::with_capacity(40 + text.len());
        body.extend_from_slice(b"{\"errorCode\":");
        body.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
        body.extend_from_slice(b",\"errorText\":");
        burrow_core::json::write_str(&mut body, text);
        body.push(b'}');
        Response {
            status,
            body,
            content_type: JSON,
            location: None,
        }
    }

    /// The response for a failed call.
    pub fn from_error(e: &Error) -> Self {
        let status = status_of(e);
        let text = match e {
            Error::NotFound { .. } => "Not Found".to_owned(),
            // Engine failures are logged by no one here; their text may name
            // files or internals, so the client gets the kind only.
            Error::Engine { .. } | Error::Io(_) => "Internal Server Error".to_owned(),
            other => other.to_string(),
        };
        Response::error(status, &text)
    }
}

/// The one HTTP status of each error kind.
pub fn status_of(e: &Error) -> u16 {
    match e.kind() {
        ErrorKind::NotFound => 404,
        ErrorKind::UniqueViolation => 409,
        ErrorKind::BadInput => 400,
        _ => 500,
    }
}

/// The reason phrase of a status.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
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

/// Decodes `%XX` escapes (and `+` as a space when `plus`); invalid escapes
/// and invalid UTF-8 are kept as they are, lossily.
pub fn percent_decode(s: &str, plus: bool) -> String {
    if !s.bytes().any(|b| b == b'%' || (plus && b == b'+')) {
        return s.to_owned();
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' if plus => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Encodes a query-parameter value.
pub fn percent_encode(s: &str, out: &mut String) {
    for &c in s.as_bytes() {
        if c.is_ascii_alphanumeric() || b"-_.~".contains(&c) {
            out.push(c as char);
        } else {
            out.push('%');
            out.push(char::from(b"0123456789ABCDEF"[usize::from(c >> 4)]));
            out.push(char::from(b"0123456789ABCDEF"[usize::from(c & 15)]));
        }
    }
}

/// The `Date` header value, rebuilt at most once a second.
pub(crate) struct DateCache {
    second: AtomicI64,
    text: std::sync::RwLock<String>,
}

impl DateCache {
    pub fn new() -> Self {
        DateCache {
            second: AtomicI64::new(-1),
            text: std::sync::RwLock::new(String::new()),
        }
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        let now = burrow_core::chrono::Utc::now();
        let sec = now.timestamp();
        if self.second.load(Ordering::Relaxed) != sec {
            let t = now.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
            *self
                .text
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = t;
            self.second.store(sec, Ordering::Relaxed);
        }
        out.extend_from_slice(
            self.text
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .as_bytes(),
        );
    }
}

/// Serializes `resp` (head and body) into `out`, gzipping large bodies when
/// the client accepts it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_response(
    out: &mut Vec<u8>,
    resp: &Response,
    head_only: bool,
    gzip_ok: bool,
    gzip_min: usize,
    close: bool,
    state: u64,
    server: &str,
    date: &DateCache,
) {
    let gz = if gzip_ok && resp.body.len() >= gzip_min {
        let mut enc = flate2::write::GzEncoder::new(
            Vec::with_capacity(resp.body.len() / 4),
            flate2::Compression::fast(),
        );
        enc.write_all(&resp.body)
            .ok()
            .and_then(|()| enc.finish().ok())
    } else {
        None
    };
    let body: &[u8] = gz.as_deref().unwrap_or(&resp.body);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(resp.status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason(resp.status).as_bytes());
    out.extend_from_slice(b"\r\nServer: ");
    out.extend_from_slice(server.as_bytes());
    out.extend_from_slice(b"\r\nDate: ");
    date.write(out);
    out.extend_from_slice(b"\r\nServer-InternalState: ");
    out.extend_from_slice(itoa::Buffer::new().format(state).as_bytes());
    if !body.is_empty() || resp.status != 200 {
        out.extend_from_slice(b"\r\nContent-Type: ");
        out.extend_from_slice(resp.content_type.as_bytes());
    }
    if gz.is_some() {
        out.extend_from_slice(b"\r\nContent-Encoding: gzip\r\nVary: Accept-Encoding");
    }
    if let Some(loc) = &resp.location {
        out.extend_from_slice(b"\r\nLocation: ");
        out.extend_from_slice(loc.as_bytes());
    }
    out.extend_from_slice(b"\r\nContent-Length: ");
    out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
    if close {
        out.extend_from_slice(b"\r\nConnection: close");
    }
    out.extend_from_slice(b"\r\n\r\n");
    if !head_only {
        out.extend_from_slice(body);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b+c", true), "a b c");
        assert_eq!(percent_decode("a%2", false), "a%2");
        assert_eq!(percent_decode("%zz%41", false), "%zzA");
        assert_eq!(percent_decode("%C3%A9", false), "é");
        let mut s = String::new();
        percent_encode("LastName='Du pont'", &mut s);
        assert_eq!(percent_decode(&s, true), "LastName='Du pont'");
    }
}
