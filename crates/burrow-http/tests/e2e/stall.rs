//! Slow requests (large batches, lists of a whole large table) must not
//! hold the server's event-loop threads: requests that need no engine, or
//! only a moment of it, keep being answered while they run.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use burrow_core::{Batch, Database, Orm};
use burrow_http::Server;

use crate::common::*;

/// Rows in the table the slow requests read or rewrite whole.
const ROWS: usize = 60_000;
/// A probe answered later than this was stalled (the slow requests take
/// seconds each; a probe needs microseconds of the engine).
const BOUND: Duration = Duration::from_secs(1);

fn filled_server() -> (Server, Arc<Database>) {
    let (client, _) = hosted();
    let mut b = Batch::new();
    b.add_all((1..=ROWS).map(sample));
    client.send(&mut b).expect("fill");
    let server = Server::builder(client.clone(), "root")
        .no_auth()
        .threads(2)
        .bind("127.0.0.1:0")
        .expect("bind");
    (server, client)
}

/// A batch updating every row of the table, `times` over.
fn rewrite_all(times: usize) -> Vec<u8> {
    let mut body = b"[".to_vec();
    for n in 0..times * ROWS {
        if n > 0 {
            body.push(b',');
        }
        let id = n % ROWS + 1;
        body.extend_from_slice(
            format!("\"PUT\",{{\"ID\":{id},\"FirstName\":\"R{n}\"}}").as_bytes(),
        );
    }
    body.push(b']');
    body
}

/// Runs `slow` on `n` connections, each in a loop, and probes the server
/// meanwhile with `probes`; returns the slowest answer of each probe and
/// how long one slow request took.
fn probe_during(
    addr: SocketAddr,
    n: usize,
    slow: impl Fn(&mut RawConn) + Send + Sync,
    probes: &[(&str, u16)],
) -> (Vec<Duration>, Duration) {
    let stop = AtomicBool::new(false);
    let slow = &slow;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..n)
            .map(|_| {
                let stop = &stop;
                s.spawn(move || {
                    let mut c = RawConn::open(addr);
                    c.stream
                        .set_read_timeout(Some(Duration::from_secs(120)))
                        .expect("timeout");
                    let mut longest = Duration::ZERO;
                    while !stop.load(SeqCst) {
                        let t = Instant::now();
                        slow(&mut c);
                        longest = longest.max(t.elapsed());
                    }
                    longest
                })
            })
            .collect();
        // Let the slow requests get under way.
        std::thread::sleep(Duration::from_millis(300));
        let mut worst = vec![Duration::ZERO; probes.len()];
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(3) {
            for (w, (path, status)) in worst.iter_mut().zip(probes) {
                let t = Instant::now();
                let r = raw(addr, "GET", path, "", b"");
                *w = (*w).max(t.elapsed());
                assert_eq!(r.status, *status, "{path}: {}", r.text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, SeqCst);
        let slowest = workers
            .into_iter()
            .map(|w| w.join().expect("a slow client"))
            .max()
            .unwrap_or_default();
        (worst, slowest)
    })
}

#[test]
fn large_batches_do_not_stall_the_event_loop() {
    let (server, _client) = filled_server();
    let body = rewrite_all(4);
    let (worst, slowest) = probe_during(
        server.local_addr(),
        2,
        |c| {
            let r = c
                .request("PUT", "/root/Sample/Batch", "", &body)
                .expect("an answer");
            assert_eq!(r.status, 200, "{}", r.text());
        },
        &[("/root/timestamp", 200)],
    );
    eprintln!("batches: probe {worst:?}, slowest batch {slowest:?}");
    assert!(
        worst[0] < BOUND,
        "GET /root/timestamp took {:?} while batches of {ROWS} rows ran (each up to {slowest:?})",
        worst[0]
    );
}

#[test]
fn full_table_lists_do_not_stall_the_event_loop() {
    let (server, _client) = filled_server();
    let (worst, slowest) = probe_during(
        server.local_addr(),
        4,
        |c| {
            let r = c
                .request("GET", "/root/Sample", "", b"")
                .expect("an answer");
            assert_eq!(r.status, 200);
        },
        &[("/root/timestamp", 200), ("/root/Sample/7", 200)],
    );
    eprintln!("lists: probes {worst:?}, slowest list {slowest:?}");
    for (w, what) in worst
        .iter()
        .zip(["GET /root/timestamp", "GET /root/Sample/7"])
    {
        assert!(
            *w < BOUND,
            "{what} took {w:?} while lists of {ROWS} rows ran (each up to {slowest:?})"
        );
    }
}
