//! HTTP/1.1 pieces the server core and the client both use: the headers
//! that frame a message, and percent encoding.

use std::borrow::Cow;

/// What a message's headers say about its framing, gathered header by
/// header with [`Framing::header`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Framing {
    /// `Content-Length`, when sent.
    pub content_length: Option<usize>,
    /// A `Transfer-Encoding` was sent: the body is not framed by a length.
    pub chunked: bool,
    /// The connection stays open after this message.
    pub keep_alive: bool,
}

/// A framing header that cannot be trusted: the message cannot be delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BadLength;

impl Framing {
    /// Before any header, for a message of this HTTP/1.x minor version:
    /// HTTP/1.0 closes by default, HTTP/1.1 keeps the connection open.
    pub fn new(minor_version: Option<u8>) -> Framing {
        Framing {
            content_length: None,
            chunked: false,
            keep_alive: minor_version == Some(1),
        }
    }

    /// Takes one header: `Ok(true)` when it was a framing header, now
    /// accounted for, `Ok(false)` for any other (the caller's to read).
    pub fn header(&mut self, name: &str, value: &[u8]) -> Result<bool, BadLength> {
        if name.eq_ignore_ascii_case("content-length") {
            let n = content_length(value).ok_or(BadLength)?;
            // Two lengths that differ would let two readers split the stream
            // in two places (request smuggling).
            if self.content_length.is_some_and(|c| c != n) {
                return Err(BadLength);
            }
            self.content_length = Some(n);
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if token.eq_ignore_ascii_case(b"close") {
                    self.keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    self.keep_alive = true;
                }
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            self.chunked = true;
        } else {
            return Ok(false);
        }
        Ok(true)
    }
}

/// A `Content-Length` value: digits only (`usize::from_str` alone would take
/// `+2`), surrounding blanks aside.
pub(crate) fn content_length(value: &[u8]) -> Option<usize> {
    let v = value.trim_ascii();
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// A header value as text, blanks trimmed; `None` when it is not UTF-8.
pub(crate) fn header_text(value: &[u8]) -> Option<&str> {
    std::str::from_utf8(value.trim_ascii()).ok()
}

/// Decodes `%XX` escapes (and `+` as a space when `plus`); invalid escapes
/// and invalid UTF-8 are kept as they are, lossily. Borrows when there is
/// nothing to decode.
pub(crate) fn percent_decode(s: &str, plus: bool) -> Cow<'_, str> {
    // Without an early exit the scan is vectorized.
    let escaped = s
        .bytes()
        .fold(false, |e, b| e | (b == b'%') | (plus & (b == b'+')));
    if !escaped {
        return Cow::Borrowed(s);
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                }
                _ => {
                    out.push(b'%');
                    i += 1;
                }
            },
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
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Appends `s` percent-encoded, for a query parameter's value: everything
/// but unreserved characters is escaped.
pub(crate) fn percent_encode(s: &str, out: &mut String) {
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

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b+c", true), "a b c");
        assert_eq!(percent_decode("a+b", false), "a+b");
        assert_eq!(percent_decode("a%2", false), "a%2");
        assert_eq!(percent_decode("a%41", false), "aA");
        assert_eq!(percent_decode("%zz%41", false), "%zzA");
        assert_eq!(percent_decode("%C3%A9", false), "é");
        assert!(matches!(percent_decode("plain", true), Cow::Borrowed(_)));
        let mut s = String::new();
        percent_encode("LastName='Du pont'", &mut s);
        assert_eq!(percent_decode(&s, true), "LastName='Du pont'");
    }

    #[test]
    fn framing_headers() {
        assert_eq!(content_length(b" 12 "), Some(12));
        for bad in [
            &b"+2"[..],
            b"-1",
            b"",
            b"1 2",
            b"0x10",
            b"99999999999999999999999",
        ] {
            assert_eq!(content_length(bad), None, "{bad:?}");
        }
        let mut f = Framing::new(Some(1));
        assert_eq!(f.header("Content-Length", b"5"), Ok(true));
        assert_eq!(f.header("content-length", b"5"), Ok(true));
        assert_eq!(f.header("Content-Length", b"6"), Err(BadLength));
        assert_eq!(f.header("Host", b"x"), Ok(false));
        assert!(f.keep_alive);
        assert_eq!(f.header("Connection", b"Upgrade, close"), Ok(true));
        assert!(!f.keep_alive);
        let mut f = Framing::new(Some(0));
        assert!(!f.keep_alive);
        assert_eq!(f.header("Connection", b"Keep-Alive"), Ok(true));
        assert!(f.keep_alive);
        assert_eq!(f.header("Transfer-Encoding", b"chunked"), Ok(true));
        assert!(f.chunked && f.content_length.is_none());
    }
}
