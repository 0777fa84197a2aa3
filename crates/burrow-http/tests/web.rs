//! The server core with a tiny handler of its own, over raw sockets: what
//! the core owns (framing, pipelining, limits, admission, `Date`) and what
//! it leaves to the handler (routes, 404, 405).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use burrow_http::web::{
    BodyStream, Handler, Headers, HttpServer, Limits, PieceFuture, Request, RequestHead, Response,
};

/// What the test handler saw.
#[derive(Default)]
struct Seen {
    calls: AtomicUsize,
    closed: AtomicUsize,
}

struct Echo(Arc<Seen>);

/// Per connection: the requests it carried so far, and where to count its
/// end.
#[derive(Default)]
struct Count {
    n: usize,
    seen: Option<Arc<Seen>>,
}

impl Drop for Count {
    fn drop(&mut self) {
        if let Some(s) = &self.seen {
            s.closed.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Handler for Echo {
    type Conn = Count;

    fn admit(&self, conn: &mut Count, head: &RequestHead<'_>) -> Result<(), Response> {
        conn.seen.get_or_insert_with(|| self.0.clone());
        if head.path() == "/private" && head.header("x-key") != Some("open") {
            return Err(Response::error(401, "no key"));
        }
        Ok(())
    }

    async fn call(&self, conn: &mut Count, req: Request) -> Response {
        self.0.calls.fetch_add(1, Ordering::SeqCst);
        conn.n += 1;
        match (req.method(), req.path()) {
            ("GET", "/echo") => {
                let text = format!(
                    "{} {} {}",
                    conn.n,
                    req.param("v").unwrap_or_default(),
                    req.header("x-tag").unwrap_or("")
                );
                Response::text(text)
            }
            ("POST", "/echo" | "/private") => Response::with("application/octet-stream", req.body),
            ("GET", "/slow") => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Response::text("slow")
            }
            ("GET", "/thread") => Response::text(format!("{:?}", std::thread::current().id())),
            ("GET", "/block") => {
                // Blocking work done the way the core's documentation asks.
                tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(600)));
                Response::text("blocked")
            }
            ("GET", "/panic") => panic!("a handler bug"),
            ("GET" | "HEAD", "/big") => Response::text(vec![b'x'; 10_000]),
            ("GET", "/huge") => Response::text(vec![b'x'; HUGE]),
            ("GET" | "HEAD", "/pieces") => Response::streamed(
                "text/plain",
                b"first;".to_vec(),
                Pieces {
                    left: req.param("n").and_then(|n| n.parse().ok()).unwrap_or(3),
                    fail: req.param("fail").is_some(),
                },
            ),
            (_, "/echo") => Response::error(405, "Method Not Allowed"),
            _ => Response::error(404, "Not Found"),
        }
    }

    fn extra_headers(&self, out: &mut Headers<'_>) {
        out.number("X-Calls", self.0.calls.load(Ordering::SeqCst) as u64);
    }
}

/// A streamed body: `left` pieces of 1,000 bytes, then the end or, with
/// `fail`, an error.
struct Pieces {
    left: usize,
    fail: bool,
}

impl BodyStream for Pieces {
    fn next(&mut self) -> PieceFuture<'_> {
        Box::pin(async move {
            if self.left == 0 {
                return self.fail.then(|| Err(std::io::Error::other("broken")));
            }
            self.left -= 1;
            tokio::task::yield_now().await;
            Some(Ok(vec![b'0' + (self.left % 10) as u8; 1000]))
        })
    }
}

fn server_with(limits: Limits) -> (HttpServer<Echo>, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let server = HttpServer::builder(Echo(seen.clone()))
        .threads(2)
        .server_name("Test")
        .limits(limits)
        .bind("127.0.0.1:0")
        .expect("bind");
    (server, seen)
}

fn server() -> (HttpServer<Echo>, Arc<Seen>) {
    server_with(Limits::default())
}

#[derive(Debug)]
struct Raw {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        Conn {
            stream,
            buf: Vec::new(),
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// One response (the body of a `HEAD` one left out); `None` once the
    /// server closed.
    fn read_for(&mut self, head_only: bool) -> Option<Raw> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut r = httparse::Response::new(&mut headers);
            if let Ok(httparse::Status::Complete(n)) = r.parse(&self.buf) {
                let headers: Vec<(String, String)> = r
                    .headers
                    .iter()
                    .map(|h| {
                        let v = String::from_utf8_lossy(h.value).into_owned();
                        (h.name.to_owned(), v)
                    })
                    .collect();
                let status = r.code.unwrap_or(0);
                let len: usize = headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0);
                let len = if head_only || status == 100 { 0 } else { len };
                while self.buf.len() < n + len {
                    if !self.fill() {
                        return None;
                    }
                }
                let body = self.buf[n..n + len].to_vec();
                self.buf.drain(..n + len);
                return Some(Raw {
                    status,
                    headers,
                    body,
                });
            }
            if !self.fill() {
                return None;
            }
        }
    }

    fn read(&mut self) -> Option<Raw> {
        self.read_for(false)
    }

    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16384];
        match self.stream.read(&mut chunk) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// True when the server closed the connection (with nothing more sent).
    fn closed(&mut self) -> bool {
        !self.fill()
    }

    fn get(&mut self, target: &str) -> Raw {
        self.send(format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        self.read().expect("a response")
    }
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let (server, seen) = server();
    let mut c = Conn::open(server.local_addr());
    let mut all = Vec::new();
    for i in 0..20 {
        // A slow one among them must not let a later one overtake it.
        let target = if i == 3 {
            "/slow".to_owned()
        } else {
            format!("/echo?v={i}")
        };
        all.extend_from_slice(
            format!("GET {target} HTTP/1.1\r\nHost: t\r\nX-Tag: t{i}\r\n\r\n").as_bytes(),
        );
    }
    all.extend_from_slice(b"POST /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
    all.extend_from_slice(b"GET /echo?v=last HTTP/1.1\r\n\r\n");
    c.send(&all);
    for i in 0..20 {
        let r = c.read().expect("a response");
        assert_eq!(r.status, 200);
        let want = if i == 3 {
            "slow".to_owned()
        } else {
            format!("{} {i} t{i}", i + 1)
        };
        assert_eq!(r.text(), want);
    }
    assert_eq!(c.read().expect("a response").text(), "hello");
    assert_eq!(c.read().expect("a response").text(), "22 last ");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 22);
    // The connection's state lives with the connection.
    let mut other = Conn::open(server.local_addr());
    assert_eq!(other.get("/echo").text(), "1  ");
    drop((c, other));
    let t = Instant::now();
    while seen.closed.load(Ordering::SeqCst) < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "connection state dropped"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn every_response_carries_the_core_headers() {
    let (server, _) = server();
    let mut c = Conn::open(server.local_addr());
    let r = c.get("/echo?v=a%20b+c");
    assert_eq!(r.text(), "1 a b c ");
    assert_eq!(r.header("Server"), Some("Test"));
    assert_eq!(r.header("Content-Type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("Content-Length"), Some("8"));
    assert_eq!(r.header("X-Calls"), Some("1"));
    let date = r.header("Date").expect("a Date");
    let parsed =
        burrow_core::chrono::NaiveDateTime::parse_from_str(date, "%a, %d %b %Y %H:%M:%S GMT")
            .expect("an HTTP date");
    let skew = burrow_core::chrono::Utc::now().naive_utc() - parsed;
    assert!(skew.num_seconds().abs() <= 2, "{date}");
    // HEAD: the length of the body, without it.
    c.send(b"HEAD /big HTTP/1.1\r\n\r\n");
    let r = c.read_for(true).expect("a response");
    assert_eq!((r.status, r.header("Content-Length")), (200, Some("10000")));
    assert_eq!(c.get("/echo").text(), "3  ", "nothing followed the head");
    // gzip for a large body when accepted.
    c.send(b"GET /big HTTP/1.1\r\nAccept-Encoding: br, gzip\r\n\r\n");
    let r = c.read().expect("a response");
    assert_eq!(r.header("Content-Encoding"), Some("gzip"));
    assert!(r.body.len() < 1000);
    // HTTP/1.0 closes unless asked otherwise.
    c.send(b"GET /echo HTTP/1.0\r\n\r\n");
    let r = c.read().expect("a response");
    assert_eq!(r.header("Connection"), Some("close"));
    assert!(c.closed());
}

#[test]
fn routes_404_and_405_are_the_handlers() {
    let (server, seen) = server();
    let mut c = Conn::open(server.local_addr());
    assert_eq!(c.get("/nope").status, 404);
    c.send(b"BREW /echo HTTP/1.1\r\n\r\n");
    assert_eq!(c.read().expect("a response").status, 405);
    assert_eq!(c.get("/echo").status, 200, "the connection stays open");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 3);
}

#[test]
fn a_malformed_request_gets_400_and_only_its_connection_closes() {
    let (server, seen) = server();
    let mut keep = Conn::open(server.local_addr());
    assert_eq!(keep.get("/echo").status, 200);
    for bad in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET /echo HTTP/1.1\r\nContent-Length: +2\r\n\r\nab",
        b"GET /echo HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab",
        b"GET /echo HTTP/1.1\r\nBad Header\r\n\r\n",
        b"GET /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ] {
        let mut c = Conn::open(server.local_addr());
        // A good request first: the bad one still closes the connection.
        let mut bytes = b"GET /echo HTTP/1.1\r\n\r\n".to_vec();
        bytes.extend_from_slice(bad);
        c.send(&bytes);
        assert_eq!(c.read().expect("the good one").status, 200);
        let r = c.read().expect("an answer");
        assert!(matches!(r.status, 400 | 411), "{bad:?}: {}", r.status);
        assert_eq!(r.header("Connection"), Some("close"));
        assert!(c.closed(), "{bad:?}");
    }
    assert_eq!(keep.get("/echo").status, 200);
    assert_eq!(seen.calls.load(Ordering::SeqCst), 7);
}

#[test]
fn oversize_heads_and_bodies_get_413() {
    let (server, seen) = server_with(Limits {
        max_header_bytes: 1024,
        max_body_bytes: 100,
        ..Limits::default()
    });
    let mut c = Conn::open(server.local_addr());
    c.send(format!("GET /echo HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(2000)).as_bytes());
    assert_eq!(c.read().expect("an answer").status, 413);
    assert!(c.closed());
    // A head that never ends is cut off at the limit too.
    let mut c = Conn::open(server.local_addr());
    c.send(format!("GET /echo HTTP/1.1\r\nX-Big: {}", "a".repeat(2000)).as_bytes());
    assert_eq!(c.read().expect("an answer").status, 413);
    let mut c = Conn::open(server.local_addr());
    c.send(b"POST /echo HTTP/1.1\r\nContent-Length: 101\r\n\r\n");
    assert_eq!(c.read().expect("an answer").status, 413);
    assert!(c.closed());
    let mut c = Conn::open(server.local_addr());
    c.send(b"POST /echo HTTP/1.1\r\nContent-Length: 100\r\n\r\n");
    c.send(&[b'y'; 100]);
    assert_eq!(c.read().expect("an answer").body, vec![b'y'; 100]);
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
}

#[test]
fn admit_refuses_before_the_body_is_read() {
    let (server, seen) = server();
    // A declared large body, never sent: the answer comes at once, and the
    // connection closes rather than wait for it.
    let mut c = Conn::open(server.local_addr());
    let t = Instant::now();
    c.send(b"POST /private HTTP/1.1\r\nContent-Length: 50000000\r\n\r\nsome");
    let r = c.read().expect("an answer");
    assert_eq!(r.status, 401);
    assert!(c.closed());
    assert!(t.elapsed() < Duration::from_secs(5));
    // With Expect, no 100 Continue before a refusal.
    let mut c = Conn::open(server.local_addr());
    c.send(b"POST /private HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 9\r\n\r\n");
    assert_eq!(c.read().expect("an answer").status, 401);
    // A refused request whose body is already here: skipped, and the
    // connection serves the next one.
    let mut c = Conn::open(server.local_addr());
    c.send(b"POST /private HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /echo HTTP/1.1\r\n\r\n");
    assert_eq!(c.read().expect("an answer").status, 401);
    assert_eq!(c.read().expect("an answer").text(), "1  ");
    assert_eq!(
        seen.calls.load(Ordering::SeqCst),
        1,
        "refused ones never reach call"
    );
    // Admitted with Expect: 100 Continue, then the body.
    let mut c = Conn::open(server.local_addr());
    c.send(b"POST /private HTTP/1.1\r\nX-Key: open\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n");
    assert_eq!(c.read().expect("an interim answer").status, 100);
    c.send(b"ok");
    assert_eq!(c.read().expect("an answer").text(), "ok");
}

#[test]
fn a_panicking_handler_costs_its_connection_only() {
    let (server, _) = server();
    let mut c = Conn::open(server.local_addr());
    let r = c.get("/panic");
    assert_eq!(r.status, 500);
    assert!(c.closed());
    assert_eq!(Conn::open(server.local_addr()).get("/echo").status, 200);
    let t = Instant::now();
    while server.connections() > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "connections counted down"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn connections_past_the_cap_get_503() {
    let (server, _) = server_with(Limits {
        max_connections: 1,
        ..Limits::default()
    });
    let mut first = Conn::open(server.local_addr());
    assert_eq!(first.get("/echo").status, 200);
    let mut second = Conn::open(server.local_addr());
    assert_eq!(second.read().expect("an answer").status, 503);
    assert!(second.closed());
    assert_eq!(first.get("/echo").status, 200);
}

/// Waits (a bounded while) for `done`.
fn eventually(what: &str, done: impl Fn() -> bool) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < Duration::from_secs(5), "{what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn connections_past_the_cap_of_one_address_get_503() {
    let (server, _) = server_with(Limits {
        max_connections_per_address: 2,
        ..Limits::default()
    });
    let addr = server.local_addr();
    let mut first = Conn::open(addr);
    assert_eq!(first.get("/echo").status, 200);
    let mut second = Conn::open(addr);
    assert_eq!(second.get("/echo").status, 200);
    assert_eq!(server.connections_from(addr.ip()), 2);
    let mut third = Conn::open(addr);
    let r = third.read().expect("an answer");
    assert_eq!(r.status, 503);
    assert!(r.text().contains("from this address"), "{}", r.text());
    assert!(third.closed());
    // The refused one took no slot, and a closed one gives its slot back.
    assert_eq!(first.get("/echo").status, 200);
    drop(first);
    eventually("the closed connection's slot given back", || {
        server.connections_from(addr.ip()) == 1
    });
    let mut again = Conn::open(addr);
    assert_eq!(again.get("/echo").status, 200);
    assert_eq!(second.get("/echo").status, 200);
    drop((second, again));
    eventually("every slot given back", || {
        server.connections_from(addr.ip()) == 0
    });
}

#[test]
fn the_per_address_cap_can_be_turned_off() {
    let (server, _) = server_with(Limits {
        max_connections_per_address: usize::MAX,
        ..Limits::default()
    });
    let addr = server.local_addr();
    let mut conns: Vec<Conn> = (0..300).map(|_| Conn::open(addr)).collect();
    for c in &mut conns {
        assert_eq!(c.get("/echo").status, 200);
    }
    assert_eq!(server.connections_from(addr.ip()), 0, "not counted");
}

#[test]
fn request_bodies_in_flight_are_capped_server_wide() {
    let (server, seen) = server_with(Limits {
        max_body_bytes_in_flight: 1000,
        ..Limits::default()
    });
    let addr = server.local_addr();
    // The first body is admitted (100 Continue says so), then arrives slowly.
    let mut first = Conn::open(addr);
    first.send(b"POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 800\r\n\r\n");
    assert_eq!(first.read().expect("an interim answer").status, 100);
    first.send(&[b'a'; 300]);
    assert_eq!(server.body_bytes_in_flight(), 800);
    // A second one that would not fit beside it: 503 before its body is
    // read, and the connection closes.
    let mut second = Conn::open(addr);
    second.send(b"POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 800\r\n\r\n");
    let r = second.read().expect("an answer");
    assert_eq!(r.status, 503);
    assert_eq!(r.header("Retry-After"), Some("1"));
    assert_eq!(r.header("Connection"), Some("close"));
    assert!(second.closed());
    // One that fits beside it is served meanwhile.
    let mut small = Conn::open(addr);
    small.send(b"POST /echo HTTP/1.1\r\nContent-Length: 200\r\n\r\n");
    small.send(&[b'b'; 200]);
    assert_eq!(small.read().expect("an answer").body, vec![b'b'; 200]);
    // The first finishes; its share is back, and a new large one succeeds.
    first.send(&[b'a'; 500]);
    assert_eq!(first.read().expect("an answer").body, vec![b'a'; 800]);
    assert_eq!(server.body_bytes_in_flight(), 0);
    let mut third = Conn::open(addr);
    third.send(b"POST /echo HTTP/1.1\r\nContent-Length: 800\r\n\r\n");
    third.send(&[b'c'; 800]);
    assert_eq!(third.read().expect("an answer").body, vec![b'c'; 800]);
    assert_eq!(seen.calls.load(Ordering::SeqCst), 3);
    // A body whose client leaves halfway gives its share back too.
    let mut gone = Conn::open(addr);
    gone.send(b"POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 900\r\n\r\n");
    assert_eq!(gone.read().expect("an interim answer").status, 100);
    assert_eq!(server.body_bytes_in_flight(), 900);
    drop(gone);
    eventually("the share of a body never finished given back", || {
        server.body_bytes_in_flight() == 0
    });
}

#[test]
fn pipelined_responses_wait_unwritten_only_up_to_a_bound() {
    let (server, seen) = server();
    let mut c = Conn::open(server.local_addr());
    // 100 requests in one write, each answered with 10 kB, and nothing read
    // until all are sent: 1 MB of answers if they all waited to be written.
    let one = b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n";
    c.send(&one.repeat(100));
    for _ in 0..100 {
        let r = c.read().expect("a response");
        assert_eq!((r.status, r.body.len()), (200, 10_000));
    }
    assert_eq!(seen.calls.load(Ordering::SeqCst), 100);
    let peak = server.peak_pending_output();
    // Past 64 KiB, what waits is written before the next request is
    // handled: at most 64 KiB and one response wait.
    assert!(peak > 64 * 1024, "the bound was reached: {peak}");
    assert!(peak < 64 * 1024 + 11_000, "{peak} bytes waited unwritten");
}

#[test]
fn shutdown_closes_idle_connections() {
    let (server, _) = server();
    let mut c = Conn::open(server.local_addr());
    assert_eq!(c.get("/echo").status, 200);
    let t = Instant::now();
    server.shutdown();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(c.closed());
}

/// A server started, used and dropped by async code (a task that owns it, an
/// async `main`, a `#[tokio::test]`): it stops as it does elsewhere, where
/// blocking there, or dropping its runtime there, would make tokio panic.
#[test]
fn a_server_dropped_inside_async_code_stops_cleanly() {
    let used_and_dropped = || {
        let (server, seen) = server();
        let mut c = Conn::open(server.local_addr());
        assert_eq!(c.get("/echo").status, 200);
        drop(server);
        assert!(c.closed());
        seen.calls.load(Ordering::SeqCst)
    };
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let on_worker = multi.block_on(multi.spawn(async move { used_and_dropped() }));
    assert_eq!(on_worker.expect("no panic"), 1);
    assert_eq!(multi.block_on(async { used_and_dropped() }), 1);
    let single = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    assert_eq!(single.block_on(async { used_and_dropped() }), 1);
}

/// A body far larger than the socket buffers hold.
const HUGE: usize = 24 << 20;

#[test]
fn the_write_timeout_cuts_off_a_reader_that_stops_not_one_that_is_slow() {
    let (server, _) = server_with(Limits {
        // Progress shows when the kernel's send buffer has room again, once
        // the reader drained about half of it (up to a few MiB): the
        // timeout must leave time for that.
        write_timeout: Duration::from_secs(1),
        ..Limits::default()
    });
    // Slow but steady: about 6 MiB/s, so the answer takes seconds, many
    // times the write timeout.
    let mut c = Conn::open(server.local_addr());
    c.send(b"GET /huge HTTP/1.1\r\nHost: t\r\n\r\n");
    let started = Instant::now();
    let mut got = 0;
    let mut chunk = vec![0u8; 256 * 1024];
    while got < HUGE {
        match c.stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
        std::thread::sleep(Duration::from_millis(40));
    }
    assert!(got > HUGE, "the whole answer came ({got} bytes)");
    assert!(started.elapsed() > Duration::from_secs(3));
    // One that stops reading is cut off: after a pause, what the socket
    // buffers held, then the end.
    let mut c = Conn::open(server.local_addr());
    c.send(b"GET /huge HTTP/1.1\r\nHost: t\r\n\r\n");
    std::thread::sleep(Duration::from_millis(2500));
    let mut got = 0;
    loop {
        match c.stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    assert!(got < HUGE, "cut off after {got} bytes");
}

/// The body `/pieces?n=N` streams.
fn pieces(n: usize) -> Vec<u8> {
    let mut want = b"first;".to_vec();
    for left in (0..n).rev() {
        want.extend(std::iter::repeat_n(b'0' + (left % 10) as u8, 1000));
    }
    want
}

/// Reads a chunked body off `c`: its chunks, and whether it ended properly.
fn chunks(c: &mut Conn) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    loop {
        let (start, size) = loop {
            match httparse::parse_chunk_size(&c.buf) {
                Ok(httparse::Status::Complete(found)) => break found,
                Ok(httparse::Status::Partial) if c.fill() => {}
                _ => return (body, false),
            }
        };
        let end = start + size as usize + 2;
        while c.buf.len() < end {
            if !c.fill() {
                return (body, false);
            }
        }
        body.extend_from_slice(&c.buf[start..end - 2]);
        c.buf.drain(..end);
        if size == 0 {
            return (body, true);
        }
    }
}

#[test]
fn streamed_bodies_go_chunked_gzipped_or_cut_short() {
    let (server, _) = server();
    let mut c = Conn::open(server.local_addr());
    c.send(b"GET /pieces?n=12 HTTP/1.1\r\nHost: t\r\n\r\n");
    let head = c.read_for(true).expect("a head");
    assert_eq!(head.header("Transfer-Encoding"), Some("chunked"));
    assert_eq!(head.header("Content-Length"), None);
    assert_eq!(chunks(&mut c), (pieces(12), true));
    // The connection goes on; gzipped on the fly for who accepts it.
    c.send(b"GET /pieces?n=40 HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n");
    let head = c.read_for(true).expect("a head");
    assert_eq!(head.header("Content-Encoding"), Some("gzip"));
    let (gz, whole) = chunks(&mut c);
    assert!(whole);
    let mut body = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut body)
        .expect("gzip");
    assert_eq!(body, pieces(40));
    // A HEAD gets the head only, and the connection goes on.
    c.send(b"HEAD /pieces HTTP/1.1\r\nHost: t\r\n\r\nGET /echo?v=1 HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.read_for(true).map(|r| r.status), Some(200));
    assert_eq!(c.read().map(|r| r.status), Some(200));
    // A body that fails midway ends without its last chunk, and closes.
    c.send(b"GET /pieces?n=2&fail=1 HTTP/1.1\r\nHost: t\r\n\r\n");
    c.read_for(true).expect("a head");
    let (body, whole) = chunks(&mut c);
    assert!(!whole, "a failed body must not look whole");
    assert_eq!(body, pieces(2));
    assert!(c.closed());
    // HTTP/1.0: no chunks, the body ends with the connection.
    let mut c = Conn::open(server.local_addr());
    c.send(b"GET /pieces?n=5 HTTP/1.0\r\n\r\n");
    let head = c.read_for(true).expect("a head");
    assert_eq!(head.header("Transfer-Encoding"), None);
    assert_eq!(head.header("Connection"), Some("close"));
    while c.fill() {}
    assert_eq!(c.buf, pieces(5));
}

#[test]
fn a_head_trickled_in_gets_408_at_its_time_limit() {
    let limits = Limits {
        request_timeout: Duration::from_millis(400),
        ..Limits::default()
    };
    let (server, _) = server_with(limits);
    // A whole request, then the start of another in the same write: the
    // first is answered, and the second's limit runs from its first bytes
    // however slowly the rest comes.
    let mut c = Conn::open(server.local_addr());
    let start = Instant::now();
    c.send(b"GET /echo?v=1 HTTP/1.1\r\nHost: t\r\n\r\nGET /echo?v=2 HTTP/1.1\r\nHo");
    assert_eq!(c.read().expect("the whole one").text(), "1 1 ");
    let mut late = None;
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        if c.stream.write_all(b"x").is_err() {
            break;
        }
        if late.is_none() {
            let _ = c.stream.set_read_timeout(Some(Duration::from_millis(1)));
            if let Some(r) = c.read() {
                late = Some((r.status, start.elapsed()));
            }
            let _ = c.stream.set_read_timeout(Some(Duration::from_secs(10)));
        }
    }
    let (status, after) = late.expect("a 408 before the trickle ends");
    assert_eq!(status, 408);
    assert!(after < Duration::from_millis(1_500), "{after:?}");
    // A head that arrives whole after an idle wait is no late one.
    let mut c = Conn::open(server.local_addr());
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(c.get("/echo?v=3").text(), "1 3 ");
    server.shutdown();
}

#[test]
fn a_connection_polling_for_its_next_request_holds_up_no_other_one() {
    // One event-loop thread and a long poll: after its answer, the first
    // connection polls for seconds on the thread every connection shares.
    let spin = Duration::from_secs(3);
    let seen = Arc::new(Seen::default());
    let server = HttpServer::builder(Echo(seen.clone()))
        .threads(1)
        .limits(Limits {
            spin_wait: spin,
            ..Limits::default()
        })
        .bind("127.0.0.1:0")
        .expect("bind");
    let mut a = Conn::open(server.local_addr());
    assert_eq!(a.get("/echo?v=1").text(), "1 1 ");
    // Another connection is accepted and answered while the first polls.
    let t = Instant::now();
    let mut b = Conn::open(server.local_addr());
    assert_eq!(b.get("/echo?v=2").text(), "1 2 ");
    assert!(t.elapsed() < spin / 3, "waited {:?}", t.elapsed());
    // With the second one gone, the first polls again; a request that
    // comes part-way through the poll is read by it.
    drop(b);
    eventually("the second connection closed", || {
        seen.closed.load(Ordering::SeqCst) == 1
    });
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(a.get("/echo?v=3").text(), "2 3 ");
    // Shutdown does not wait for a poll to run out.
    let t = Instant::now();
    server.shutdown();
    assert!(t.elapsed() < spin / 3, "shutdown took {:?}", t.elapsed());
    assert!(a.closed());
}

#[test]
fn connections_are_spread_over_the_event_loops_and_stay_on_theirs() {
    let (server, _) = server();
    // Two loops: each new connection goes to the one serving fewer, so
    // these four alternate between them.
    let mut conns: Vec<Conn> = (0..4).map(|_| Conn::open(server.local_addr())).collect();
    let threads: Vec<String> = conns.iter_mut().map(|c| c.get("/thread").text()).collect();
    assert_ne!(threads[0], threads[1]);
    assert_eq!(threads[0], threads[2]);
    assert_eq!(threads[1], threads[3]);
    // A connection's requests are all served on its loop.
    for _ in 0..5 {
        for (c, t) in conns.iter_mut().zip(&threads) {
            assert_eq!(&c.get("/thread").text(), t);
        }
    }
    // Work that blocks its thread through `block_in_place` leaves the loop
    // to the other connections on it.
    conns[0].send(b"GET /block HTTP/1.1\r\nHost: t\r\n\r\n");
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    assert_eq!(conns[2].get("/echo?v=1").text(), "7 1 ");
    assert!(
        t.elapsed() < Duration::from_millis(400),
        "waited {:?}",
        t.elapsed()
    );
    assert_eq!(conns[0].read().expect("a response").text(), "blocked");
    // Once the first loop's two connections close, a new one goes there,
    // not to the other loop (whose thread never blocked, so is the same).
    drop(conns.remove(2));
    drop(conns.remove(0));
    eventually("both connections closed", || server.connections() == 2);
    let mut c = Conn::open(server.local_addr());
    assert_ne!(c.get("/thread").text(), threads[1]);
    assert_eq!(conns[0].get("/thread").text(), threads[1]);
    server.shutdown();
}
