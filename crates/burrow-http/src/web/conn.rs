//! One connection: requests read, admitted, handled and answered in order,
//! pipelined ones answered together.

use std::future::Future;
use std::net::IpAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use crate::allowance::Allowance;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::{timeout, timeout_at, Instant};

use super::request::{self, Parsed, Request, RequestHead};
use super::response::{self, Response};
use super::{Core, Handler};
use crate::spin::Spin;

/// Responses waiting to be written past this are written before the next
/// pipelined request is handled: a connection's memory stays bounded (to
/// this and one response), however many requests a client pipelines
/// without reading.
pub(crate) const OUT_HIGH: usize = 64 * 1024;

/// A connection's byte stream: a socket, or TLS over one.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send {
    /// The processor the socket's last packet arrived on
    /// ([`burrow_core::driver::apart::incoming_cpu`]), when known.
    fn incoming_cpu(&self) -> Option<usize>;
}

impl Stream for tokio::net::TcpStream {
    #[cfg(unix)]
    fn incoming_cpu(&self) -> Option<usize> {
        burrow_core::driver::apart::incoming_cpu(std::os::fd::AsFd::as_fd(self))
    }
    #[cfg(not(unix))]
    fn incoming_cpu(&self) -> Option<usize> {
        None
    }
}

#[cfg(feature = "tls")]
impl Stream for tokio_rustls::server::TlsStream<tokio::net::TcpStream> {
    fn incoming_cpu(&self) -> Option<usize> {
        self.get_ref().0.incoming_cpu()
    }
}

/// What the handler said of a head.
enum Admitted {
    Yes(RequestHead<'static>),
    No {
        resp: Response,
        body: usize,
        keep_alive: bool,
        head_only: bool,
    },
    Panicked,
}

/// Writes `resp` for a connection about to close.
pub(crate) fn write_error<H: Handler>(core: &Core<H>, out: &mut Vec<u8>, resp: &Response) {
    write(core, out, resp, false, false, true, true);
}

fn write<H: Handler>(
    core: &Core<H>,
    out: &mut Vec<u8>,
    resp: &Response,
    head_only: bool,
    gzip: bool,
    close: bool,
    chunked: bool,
) {
    let how = response::Framing {
        head_only,
        gzip,
        gzip_min: core.limits.gzip_min_bytes,
        close,
        chunked,
        server: &core.server_name,
    };
    response::write(out, resp, &how, |h| core.handler.extra_headers(h));
}

/// A request body's share of [`super::Limits::max_body_bytes_in_flight`], given
/// back when dropped.
struct BodyShare<'a> {
    total: &'a Allowance,
    bytes: usize,
}

impl<'a> BodyShare<'a> {
    /// Takes `bytes` of the server's allowance, unless too little is left.
    fn take(total: &'a Allowance, bytes: usize) -> Option<BodyShare<'a>> {
        // Made only once taken: a share dropped gives its bytes back.
        total.try_take(bytes).then(|| BodyShare { total, bytes })
    }
}

impl Drop for BodyShare<'_> {
    fn drop(&mut self) {
        self.total.give_back(self.bytes);
    }
}

/// Writes out what waits in `out`; false when the client is gone or stopped
/// reading for the write timeout.
async fn flush<H: Handler>(core: &Core<H>, stream: &mut impl Stream, out: &mut Vec<u8>) -> bool {
    if out.is_empty() {
        return true;
    }
    let limits = &core.limits;
    if out.len() > OUT_HIGH {
        core.peak_output.fetch_max(out.len(), Ordering::SeqCst);
    }
    let mut done = 0;
    // The timeout is per write, so that a slow reader of a large response
    // is cut off only when it stops reading.
    let ok = loop {
        if done == out.len() {
            break matches!(
                timeout(limits.write_timeout, stream.flush()).await,
                Ok(Ok(()))
            );
        }
        match timeout(limits.write_timeout, stream.write(&out[done..])).await {
            Ok(Ok(n)) if n > 0 => done += n,
            _ => break false,
        }
    };
    out.clear();
    if out.capacity() > 1 << 20 {
        out.shrink_to(64 * 1024);
    }
    ok
}

/// Writes a streamed body after its head (in `out`), a piece at a time;
/// false when the connection must close: the client is gone or stopped
/// reading, or the body failed midway (its end is then not sent, so the
/// client sees it cut short).
async fn stream_body<H: Handler>(
    core: &Core<H>,
    stream: &mut impl Stream,
    out: &mut Vec<u8>,
    mut pieces: response::Pieces,
    first: Vec<u8>,
    mut rest: Box<dyn response::BodyStream>,
) -> bool {
    if pieces.piece(out, &first).is_err() {
        return false;
    }
    drop(first);
    rest.peer_cpu(stream.incoming_cpu());
    loop {
        if !flush(core, stream, out).await {
            return false;
        }
        // A panicking producer fails the body, as an error does.
        match unwinding(rest.next()).await {
            Some(Some(Ok(piece))) => {
                if pieces.piece(out, &piece).is_err() {
                    return false;
                }
            }
            Some(Some(Err(_))) | None => return false,
            Some(None) => break,
        }
    }
    pieces.finish(out).is_ok() && flush(core, stream, out).await
}

async fn fail<H: Handler>(
    core: &Core<H>,
    stream: &mut impl Stream,
    out: &mut Vec<u8>,
    r: Response,
) {
    write_error(core, out, &r);
    flush(core, stream, out).await;
}

/// Runs `fut`, `None` if it panics.
async fn unwinding<F: Future>(fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(move |cx| {
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(Poll::Ready(v)) => Poll::Ready(Some(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(None),
        }
    })
    .await
}

/// Reads what comes on `stream` within `budget`, looking again each time
/// the runtime has polled for I/O and run whatever else was ready (the
/// thread stays awake, and no other connection waits on it); `None` when
/// nothing came in that time, or once the server is `stopping`. A read
/// dropped unfinished loses nothing.
async fn read_soon(
    stream: &mut impl Stream,
    buf: &mut Vec<u8>,
    budget: Duration,
    stopping: &AtomicBool,
) -> Option<std::io::Result<usize>> {
    let start = std::time::Instant::now();
    loop {
        let mut read = std::pin::pin!(stream.read_buf(buf));
        let got = std::future::poll_fn(|cx| match read.as_mut().poll(cx) {
            Poll::Ready(r) => Poll::Ready(Some(r)),
            Poll::Pending => Poll::Ready(None),
        })
        .await;
        if got.is_some() {
            return got;
        }
        if start.elapsed() >= budget || stopping.load(Ordering::Relaxed) {
            return None;
        }
        tokio::task::yield_now().await;
    }
}

/// Serves one connection until it closes.
pub(crate) async fn serve<H: Handler>(
    core: &Core<H>,
    mut stream: impl Stream,
    peer: Option<IpAddr>,
    loop_load: &AtomicUsize,
    mut stop: watch::Receiver<bool>,
) {
    let limits = &core.limits;
    let mut conn = H::Conn::default();
    // Received bytes; those before `pos` are handled already.
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut pos = 0;
    let mut out: Vec<u8> = Vec::with_capacity(4096);
    let mut spin = Spin::new(limits.spin_wait);
    'conn: loop {
        if pos == buf.len() {
            buf.clear();
            pos = 0;
        }
        // The head of the next request. Its time limit runs from when its
        // first bytes are seen, and is read from the clock only when the head
        // must wait for more: a request already whole in the buffer (every
        // pipelined one but the last) costs no clock read.
        let mut deadline = None;
        let (admitted, len) = loop {
            if pos < buf.len() {
                match request::parse(&buf[pos..], limits) {
                    Parsed::Head(mut head, len) => {
                        head.set_peer(peer);
                        let verdict = std::panic::catch_unwind(AssertUnwindSafe(|| {
                            core.handler.admit(&mut conn, &head)
                        }));
                        let admitted = match verdict {
                            Ok(Ok(())) => Admitted::Yes(head.into_owned()),
                            Ok(Err(resp)) => Admitted::No {
                                resp,
                                body: head.content_length(),
                                keep_alive: head.keep_alive(),
                                head_only: head.method() == "HEAD",
                            },
                            Err(_) => Admitted::Panicked,
                        };
                        break (admitted, len);
                    }
                    Parsed::Partial => {
                        deadline.get_or_insert_with(|| Instant::now() + limits.request_timeout);
                    }
                    Parsed::Fail(r) => {
                        fail(core, &mut stream, &mut out, r).await;
                        break 'conn;
                    }
                }
            }
            if !flush(core, &mut stream, &mut out).await {
                break 'conn;
            }
            if buf.capacity() - buf.len() < 2048 {
                if pos > 0 {
                    buf.drain(..pos);
                    pos = 0;
                }
                buf.reserve(8192);
            }
            let n = match deadline {
                Some(d) => match timeout_at(d, stream.read_buf(&mut buf)).await {
                    Ok(r) => r,
                    Err(_) => {
                        fail(
                            core,
                            &mut stream,
                            &mut out,
                            Response::error(408, "request timeout"),
                        )
                        .await;
                        break 'conn;
                    }
                },
                None => {
                    if core.stopping.load(Ordering::SeqCst) {
                        break 'conn;
                    }
                    let soon = if loop_load.load(Ordering::Relaxed) <= 1 && spin.try_now() {
                        let got =
                            read_soon(&mut stream, &mut buf, spin.budget, &core.stopping).await;
                        spin.seen(got.is_some());
                        got
                    } else {
                        None
                    };
                    if let Some(r) = soon {
                        r
                    } else {
                        let idle = core
                            .handler
                            .idle_timeout(&conn)
                            .map_or(limits.idle_timeout, |d| d.min(limits.idle_timeout));
                        tokio::select! {
                            r = timeout(idle, stream.read_buf(&mut buf)) => match r {
                                Ok(r) => r,
                                Err(_) => break 'conn,
                            },
                            _ = stop.changed() => continue,
                        }
                    }
                }
            };
            if matches!(n, Ok(0) | Err(_)) {
                break 'conn;
            }
        };
        pos += len;
        let head = match admitted {
            Admitted::Yes(head) => head,
            Admitted::No {
                resp,
                body,
                keep_alive,
                head_only,
            } => {
                // A body already here is skipped; one still to come is not
                // waited for.
                let keep = keep_alive && buf.len() - pos >= body;
                if keep {
                    pos += body;
                }
                let close = !keep || core.stopping.load(Ordering::Relaxed);
                write(core, &mut out, &resp, head_only, false, close, true);
                if close {
                    flush(core, &mut stream, &mut out).await;
                    break 'conn;
                }
                continue;
            }
            Admitted::Panicked => {
                fail(
                    core,
                    &mut stream,
                    &mut out,
                    Response::error(500, "Internal Server Error"),
                )
                .await;
                break 'conn;
            }
        };
        // Its body, if the server can hold it now: a declared length is
        // counted before any of it is read, so that many clients announcing
        // large bodies at once cannot together exhaust memory.
        let length = head.content_length();
        let share = match length {
            0 => None,
            n => match BodyShare::take(&core.body_bytes, n) {
                Some(share) => Some(share),
                None => {
                    fail(
                        core,
                        &mut stream,
                        &mut out,
                        Response::error(503, "too many request bodies in flight; try again later")
                            .header("Retry-After", "1"),
                    )
                    .await;
                    break 'conn;
                }
            },
        };
        let body = if buf.len() - pos >= length {
            let b = buf[pos..pos + length].to_vec();
            pos += length;
            b
        } else {
            if head.expects_continue() {
                out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                if !flush(core, &mut stream, &mut out).await {
                    break 'conn;
                }
            }
            buf.drain(..pos);
            pos = 0;
            buf.reserve(length - buf.len());
            let d = deadline.unwrap_or_else(|| Instant::now() + limits.request_timeout);
            while buf.len() < length {
                match timeout_at(d, stream.read_buf(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => break 'conn,
                    Ok(Ok(_)) => {}
                    Err(_) => {
                        fail(
                            core,
                            &mut stream,
                            &mut out,
                            Response::error(408, "request timeout"),
                        )
                        .await;
                        break 'conn;
                    }
                }
            }
            // The body keeps the buffer it was read into (no copy of a large
            // body); what follows it moves to a new one.
            let rest = buf.split_off(length);
            let body = std::mem::replace(&mut buf, rest);
            if buf.capacity() < 4096 {
                buf.reserve(4096 - buf.len());
            }
            body
        };
        let head_only = head.method() == "HEAD";
        let gzip = head.accepts_gzip();
        let keep_alive = head.keep_alive();
        let http11 = head.is_http11();
        let answer = unwinding(core.handler.call(&mut conn, Request::new(head, body))).await;
        // Given back before the answer is written: the handler is done with
        // the body, and a client told to retry may retry at once.
        drop(share);
        let (mut resp, mut close) = match answer {
            Some(resp) => (resp, !keep_alive || core.stopping.load(Ordering::Relaxed)),
            // The connection's state may be half-changed: it goes.
            None => (Response::error(500, "Internal Server Error"), true),
        };
        // A streamed body to an HTTP/1.0 client ends with the connection.
        close |= resp.stream.is_some() && !http11 && !head_only;
        write(core, &mut out, &resp, head_only, gzip, close, http11);
        if let Some(rest) = resp.stream.take().filter(|_| !head_only) {
            let first = std::mem::take(&mut resp.body);
            drop(resp);
            let pieces = response::Pieces::new(gzip, http11);
            if !stream_body(core, &mut stream, &mut out, pieces, first, rest).await {
                break 'conn;
            }
        }
        if close {
            flush(core, &mut stream, &mut out).await;
            break 'conn;
        }
        if out.len() >= OUT_HIGH && !flush(core, &mut stream, &mut out).await {
            break 'conn;
        }
    }
    // The handler's state goes first: what it holds (a transaction) is
    // released before the client sees the connection close.
    drop(conn);
    let _ = timeout(limits.write_timeout, stream.shutdown()).await;
}
