//! One connection to the server and one exchange on it: the socket (TLS
//! over it for `https://`), how a request's head and body go out in as few
//! writes as the socket takes, and how a response is framed and read.
//!
//! Kept apart from the pool and the retry policy: this file knows one
//! connection, not which one a call takes or whether a failed call may go
//! again.

use std::io::{IoSlice, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use burrow_core::{Error, Result};

use super::reply::Reply;
use super::retry::Retry;
use super::ENGINE;
pub(super) use crate::spin::Spin;
use crate::web::wire::{header_text, Framing};

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

impl Stream {
    /// The socket, when nothing is layered over it.
    fn plain(&mut self) -> Option<&mut TcpStream> {
        match self {
            Stream::Plain(s) => Some(s),
            #[cfg(feature = "tls")]
            Stream::Tls(_) => None,
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

/// What came from the server and is not read yet.
///
/// Its memory stays initialised once written, so a read from the socket goes
/// straight into the space after what is held, with nothing written first:
/// growing a `Vec` by the read's size wrote 64 KiB of zeros before each
/// read, whatever came.
#[derive(Default)]
pub(super) struct InBuf {
    /// Held bytes first; after them, space written before (by an earlier
    /// read, or zeros when it grew).
    bytes: Vec<u8>,
    /// How many of `bytes` are held.
    len: usize,
}

impl InBuf {
    pub(super) fn with_capacity(n: usize) -> InBuf {
        InBuf {
            bytes: Vec::with_capacity(n),
            len: 0,
        }
    }

    fn clear(&mut self) {
        self.len = 0;
    }

    /// Drops the first `n` held bytes.
    fn consume(&mut self, n: usize) {
        self.bytes.copy_within(n..self.len, 0);
        self.len -= n;
    }

    /// At least `want` bytes of space after what is held; zeroed only where
    /// the buffer grows beyond its longest length yet.
    fn space(&mut self, want: usize) -> &mut [u8] {
        let end = self.len + want;
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        &mut self.bytes[self.len..]
    }

    /// Holds `n` more bytes, written into [`InBuf::space`].
    fn filled(&mut self, n: usize) {
        debug_assert!(self.len + n <= self.bytes.len());
        self.len += n;
    }
}

impl std::ops::Deref for InBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// A kept-alive connection.
pub(super) struct Conn {
    pub(super) stream: Stream,
    pub(super) buf: InBuf,
    /// Whether it already carried a request (a failure on a reused connection
    /// before any answer may be retried once on a new one).
    pub(super) reused: bool,
    pub(super) spin: Spin,
}

impl Conn {
    /// Whether the server still holds the connection open: nothing to read
    /// yet (a closed one reads end of file, or an alert under TLS).
    pub(super) fn open(&self) -> bool {
        let tcp = self.stream.tcp();
        if tcp.set_nonblocking(true).is_err() {
            return false;
        }
        let r = tcp.peek(&mut [0u8; 1]);
        tcp.set_nonblocking(false).is_ok()
            && matches!(r, Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

/// Bodies up to this size are copied behind the head and sent with it.
pub(super) const SMALL_BODY: usize = 16 * 1024;

/// A request to send: its head, then its body.
#[derive(Clone, Copy)]
pub(super) struct Request<'a> {
    pub(super) head: &'a [u8],
    pub(super) body: Body<'a>,
}

/// Writes a body piece by piece into the sink it is given.
pub(super) type Pieces<'a> =
    &'a dyn Fn(&mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<()>;

/// A request's body.
#[derive(Clone, Copy)]
pub(super) enum Body<'a> {
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

/// Takes the body of a 200 answer as it arrives, instead of the [`Reply`]:
/// given the bytes it has not taken yet followed by those that came since,
/// and `true` once they are the rest of the body, it returns how many it
/// takes (the others are given again, with more behind them).
pub(super) type Sink<'a> = dyn FnMut(&[u8], bool) -> Result<usize> + 'a;

/// Writes a request and reads its response; the flag says whether the
/// connection can be kept. With a `sink`, the body of a 200 answer goes to
/// it as it arrives, and the reply's body is empty.
pub(super) fn exchange(
    c: &mut Conn,
    req: Request<'_>,
    waiting: &mut dyn FnMut(),
    sink: Option<&mut Sink<'_>>,
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
                let len = framing.content_length.unwrap_or(0);
                let keep = framing.keep_alive;
                if status == 100 {
                    c.buf.consume(head);
                    continue;
                }
                let body = if let Some(sink) = sink.filter(|_| status == 200) {
                    c.buf.consume(head);
                    let framed = match framing.chunked {
                        true => Framed::Size,
                        false => Framed::Data(len),
                    };
                    feed_body(c, framed, sink).map_err(Retry::No)?;
                    Vec::new()
                } else if framing.chunked {
                    // A large answer (a long list) comes in pieces.
                    c.buf.consume(head);
                    read_chunked(c).map_err(Retry::No)?
                } else {
                    while c.buf.len() < head + len {
                        read_more(c).map_err(Retry::No)?;
                    }
                    let body = c.buf[head..head + len].to_vec();
                    c.buf.consume(head + len);
                    body
                };
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
                let read = if first { read_first(c) } else { read_more(c) };
                match read {
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

/// Where a body being read stands.
#[derive(Clone, Copy)]
enum Framed {
    /// This many bytes of data still to come (of the body, or of a chunk).
    Data(usize),
    /// The line break after a chunk's data.
    DataEnd,
    /// A chunk's size line.
    Size,
    /// After the last chunk: trailers, if any, then a blank line.
    Trailers,
}

/// Reads a body from the start of `c.buf` (chunked when `framed` starts at
/// [`Framed::Size`], else of the length in [`Framed::Data`]), handing its
/// bytes to `sink` after each read. Only what came is kept: the sizes the
/// server announces are not taken on trust.
fn feed_body(c: &mut Conn, mut framed: Framed, sink: &mut Sink<'_>) -> Result<()> {
    let malformed = || Error::engine(ENGINE, "a malformed chunked response");
    let chunked = matches!(framed, Framed::Size);
    // The body's bytes the sink has not taken yet.
    let mut body = Vec::new();
    loop {
        let mut at = 0;
        let done = loop {
            let rest = &c.buf[at..];
            match framed {
                Framed::Data(0) if !chunked => break true,
                Framed::Data(0) => framed = Framed::DataEnd,
                Framed::Data(n) => {
                    let take = n.min(rest.len());
                    if take == 0 {
                        break false;
                    }
                    body.extend_from_slice(&rest[..take]);
                    at += take;
                    framed = Framed::Data(n - take);
                }
                Framed::DataEnd => match rest.get(..2) {
                    None => break false,
                    Some(b"\r\n") => {
                        at += 2;
                        framed = Framed::Size;
                    }
                    Some(_) => return Err(malformed()),
                },
                Framed::Size => match httparse::parse_chunk_size(rest) {
                    Ok(httparse::Status::Complete((start, 0))) => {
                        at += start;
                        framed = Framed::Trailers;
                    }
                    Ok(httparse::Status::Complete((start, size))) => {
                        at += start;
                        framed = Framed::Data(usize::try_from(size).map_err(|_| malformed())?);
                    }
                    Ok(httparse::Status::Partial) => break false,
                    Err(_) => return Err(malformed()),
                },
                Framed::Trailers => {
                    if rest.starts_with(b"\r\n") {
                        at += 2;
                        break true;
                    }
                    match rest.windows(4).position(|w| w == b"\r\n\r\n") {
                        Some(p) => {
                            at += p + 4;
                            break true;
                        }
                        None => break false,
                    }
                }
            }
        };
        c.buf.consume(at);
        if done || !body.is_empty() {
            let used = sink(&body, done)?;
            body.drain(..used.min(body.len()));
        }
        if done {
            return Ok(());
        }
        read_more(c)?;
    }
}

/// Reads a chunked body from the start of `c.buf`, trailers and all.
fn read_chunked(c: &mut Conn) -> Result<Vec<u8>> {
    let malformed = || Error::engine(ENGINE, "a malformed chunked response");
    let mut body = Vec::new();
    loop {
        let (start, size) = loop {
            match httparse::parse_chunk_size(&c.buf) {
                Ok(httparse::Status::Complete(found)) => break found,
                Ok(httparse::Status::Partial) => read_more(c)?,
                Err(_) => return Err(malformed()),
            }
        };
        if size == 0 {
            // The last chunk: trailers, if any, then a blank line.
            let end = loop {
                if c.buf.get(start..start + 2) == Some(b"\r\n") {
                    break start + 2;
                }
                if let Some(at) = c.buf[start..].windows(4).position(|w| w == b"\r\n\r\n") {
                    break start + at + 4;
                }
                read_more(c)?;
            };
            c.buf.consume(end);
            return Ok(body);
        }
        let size = usize::try_from(size).map_err(|_| malformed())?;
        let end = start.checked_add(size).ok_or_else(malformed)?;
        while c.buf.len() < end + 2 {
            read_more(c)?;
        }
        if &c.buf[end..end + 2] != b"\r\n" {
            return Err(malformed());
        }
        body.extend_from_slice(&c.buf[start..end]);
        c.buf.consume(end + 2);
    }
}

/// Reads the start of an answer. On a plain socket, with a spin budget,
/// it first polls the socket for up to that long: an answer that comes
/// within it is read without the thread sleeping and being woken again,
/// which on loopback is most of a small call's round trip. A connection
/// whose answers keep coming later than that (slow queries, a far server)
/// stops polling, and tries again once in a while.
fn read_first(c: &mut Conn) -> Result<()> {
    if c.spin.try_now() {
        if let Some(tcp) = c.stream.plain() {
            let got = poll_read(tcp, c.buf.space(READ_SIZE), c.spin.budget)?;
            c.spin.seen(got.is_some());
            match got {
                Some(0) => return Err(closed()),
                Some(n) => {
                    c.buf.filled(n);
                    return Ok(());
                }
                None => {}
            }
        }
    }
    read_more(c)
}

/// Reads from `tcp` without sleeping, for up to `budget`; `None` when
/// nothing came in that time.
fn poll_read(tcp: &mut TcpStream, buf: &mut [u8], budget: Duration) -> Result<Option<usize>> {
    tcp.set_nonblocking(true)?;
    let start = Instant::now();
    let got = loop {
        match tcp.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if start.elapsed() >= budget {
                    break Ok(None);
                }
                // Yielding rather than spinning hands the core to any thread
                // ready to run on it (the server's, on a busy machine):
                // polling then costs a loaded machine almost nothing.
                std::thread::yield_now();
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            r => break r.map(Some),
        }
    };
    tcp.set_nonblocking(false)?;
    Ok(got?)
}

#[cold]
fn closed() -> Error {
    Error::engine(ENGINE, "the server closed the connection")
}

/// How much one read asks for: a long answer comes in few system calls.
const READ_SIZE: usize = 64 * 1024;

fn read_more(c: &mut Conn) -> Result<()> {
    match c.stream.read(c.buf.space(READ_SIZE))? {
        0 => Err(closed()),
        n => {
            c.buf.filled(n);
            Ok(())
        }
    }
}

#[cfg(test)]
mod test {
    use super::{exchange, write_request, Body, Conn, InBuf, Request, Spin, Stream};
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    /// Held bytes are exactly those filled and not consumed, in order: the
    /// space a read writes into may hold older bytes, never shown as held.
    #[test]
    fn the_read_buffer_holds_what_was_filled_and_not_consumed() {
        let mut b = InBuf::default();
        let fill = |b: &mut InBuf, data: &[u8]| {
            let space = b.space(4);
            assert!(space.len() >= 4);
            space[..data.len()].copy_from_slice(data);
            b.filled(data.len());
        };
        fill(&mut b, b"abcd");
        fill(&mut b, b"ef");
        assert_eq!(&*b, b"abcdef");
        b.consume(4);
        assert_eq!(&*b, b"ef");
        // The bytes after "ef" are still "ef" from before the consume.
        fill(&mut b, b"g");
        assert_eq!(&*b, b"efg");
        b.consume(3);
        assert!(b.is_empty());
        fill(&mut b, b"hi");
        b.clear();
        assert!(b.is_empty());
        // A read that fills nothing holds nothing more.
        let _ = b.space(1024);
        b.filled(0);
        assert_eq!(&*b, b"");
    }

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

    /// The body bytes a sink is handed for `answer` (written in pieces of
    /// `step` bytes, then the connection closed), or the exchange's error.
    fn sunk(answer: &[u8], step: usize) -> Result<Vec<u8>, String> {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let tcp = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (mut server, _) = listener.accept().expect("accept");
        let answer = answer.to_vec();
        let writer = std::thread::spawn(move || {
            // Read first: closing with the request unread would reset the
            // connection rather than end it.
            let mut request = [0u8; 64];
            let _ = server.read(&mut request);
            for piece in answer.chunks(step) {
                if server.write_all(piece).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let mut c = Conn {
            stream: Stream::Plain(tcp),
            buf: InBuf::default(),
            reused: false,
            spin: Spin::new(Duration::ZERO),
        };
        let mut got = Vec::new();
        let mut ends = 0;
        let mut sink = |data: &[u8], end: bool| -> burrow_core::Result<usize> {
            // Takes all but the last byte until the end, as a reader waiting
            // for the rest of a row does.
            ends += usize::from(end);
            let n = if end {
                data.len()
            } else {
                data.len().saturating_sub(1)
            };
            got.extend_from_slice(&data[..n]);
            Ok(n)
        };
        let req = Request {
            head: b"GET / HTTP/1.1\r\n\r\n",
            body: Body::Bytes(b""),
        };
        let r = exchange(&mut c, req, &mut || {}, Some(&mut sink));
        writer.join().expect("writer");
        match r {
            Ok((reply, _)) => {
                assert_eq!((reply.status, ends), (200, 1));
                Ok(got)
            }
            Err(e) => Err(e.into_error().to_string()),
        }
    }

    #[test]
    fn a_sink_gets_the_body_whole_and_once_at_its_end_or_an_error() {
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1;x=y\r\n \r\n6\r\nworld!\r\n0\r\nT: 1\r\n\r\n";
        let sized = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nhello world!";
        for step in [1, 2, 7, 1000] {
            assert_eq!(sunk(chunked, step).as_deref(), Ok(&b"hello world!"[..]));
            assert_eq!(sunk(sized, step).as_deref(), Ok(&b"hello world!"[..]));
        }
        // Cut short, or framed wrong: an error, not a shorter body. A chunk
        // announced larger than what comes is not waited for past the close.
        for bad in [
            &chunked[..chunked.len() - 3],
            &sized[..sized.len() - 1],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffff\r\nab",
        ] {
            assert!(sunk(bad, 3).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
