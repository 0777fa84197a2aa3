//! Clients' transactions hold the engines' write locks: who may open one,
//! how many may be open, and how long one may be held.

use std::time::{Duration, Instant};

use burrow_core::Orm;
use burrow_http::TxLimits;

use crate::common::*;

/// Waits (at most 5 s) until `done`; the assertion after it says whether it came.
fn wait_until(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

const ANN: &str = "Authorization: Bearer tok-ann\r\n";

#[test]
fn begin_needs_a_user_who_may_write() -> TestResult {
    let (server, hosted) = server_with(|b| b.auth(auth()));
    let addr = server.local_addr();
    let bob = bob_token(addr);
    for path in ["/root", "/root/timestamp", "/root/auth", "/root/Sample"] {
        let mut c = RawConn::open(addr);
        let r = c.request("BEGIN", path, "", b"").ok_or("no answer")?;
        assert_error(&r, 401);
        // A reader may read, not hold every writer back.
        let r = c.request("BEGIN", path, &bob, b"").ok_or("no answer")?;
        assert_error(&r, 403);
    }
    // Nothing was left open: a writer goes straight through.
    let mut c = RawConn::open(addr);
    let r = c
        .request("POST", "/root/Sample", ANN, br#"{"FirstName":"x"}"#)
        .ok_or("no answer")?;
    assert_eq!(r.status, 201, "{}", r.text());
    let r = c.request("BEGIN", "/root", ANN, b"").ok_or("no answer")?;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = c.request("END", "/root", ANN, b"").ok_or("no answer")?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(count(&*hosted), 1);
    Ok(())
}

#[test]
fn open_transactions_are_capped() -> TestResult {
    let (server, _hosted) = server_with(|b| {
        b.no_auth().transactions(TxLimits {
            max_open: 2,
            ..TxLimits::default()
        })
    });
    let addr = server.local_addr();
    let mut first = RawConn::open(addr);
    assert_eq!(
        first.request("BEGIN", "/root", "", b"").map(|r| r.status),
        Some(200)
    );
    // A second BEGIN may wait for the first inside the engine; it holds its
    // place meanwhile, and a third is refused at once.
    let mut second = RawConn::open(addr);
    second.send(b"BEGIN /root HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n");
    wait_until(|| server.transactions_open() == 2);
    assert_eq!(server.transactions_open(), 2);
    let started = Instant::now();
    let r = raw(addr, "BEGIN", "/root", "", b"");
    assert_error(&r, 503);
    assert!(r.text().contains("2 transactions are open"), "{}", r.text());
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(
        first.request("ABORT", "/root", "", b"").map(|r| r.status),
        Some(200)
    );
    assert_eq!(second.read().map(|r| r.status), Some(200));
    assert_eq!(
        second.request("ABORT", "/root", "", b"").map(|r| r.status),
        Some(200)
    );
    assert_eq!(server.transactions_open(), 0);
    // Ended, they give their places back.
    let mut again = RawConn::open(addr);
    assert_eq!(
        again.request("BEGIN", "/root", "", b"").map(|r| r.status),
        Some(200)
    );
    Ok(())
}

/// A server with these limits, and a connection whose open transaction has
/// written one row.
fn writing_transaction(
    limits: TxLimits,
) -> Result<
    (
        burrow_http::Server,
        std::sync::Arc<burrow_core::Database>,
        RawConn,
    ),
    Box<dyn std::error::Error>,
> {
    let (server, hosted) = server_with(|b| b.no_auth().transactions(limits));
    let mut c = RawConn::open(server.local_addr());
    let r = c.request("BEGIN", "/root", "", b"").ok_or("no answer")?;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = c
        .request("POST", "/root/Sample", "", br#"{"FirstName":"x"}"#)
        .ok_or("no answer")?;
    assert_eq!(r.status, 201, "{}", r.text());
    Ok((server, hosted, c))
}

#[test]
fn a_silent_transaction_is_rolled_back_and_its_connection_closed() -> TestResult {
    let (server, hosted, mut c) = writing_transaction(TxLimits {
        idle_timeout: Duration::from_millis(300),
        ..TxLimits::default()
    })?;
    let addr = server.local_addr();
    // Silent past the idle time: the server closes the connection...
    let started = Instant::now();
    assert!(c.read().is_none(), "the connection stays open");
    assert!(started.elapsed() < Duration::from_secs(5));
    // ...and the write is gone, with the engine free for the next writer.
    wait_until(|| count(&*hosted) == 0);
    assert_eq!(count(&*hosted), 0);
    let r = raw(addr, "POST", "/root/Sample", "", br#"{"FirstName":"y"}"#);
    assert_eq!(r.status, 201);
    Ok(())
}

#[test]
fn a_transaction_held_too_long_is_rolled_back() -> TestResult {
    let (_server, hosted, mut c) = writing_transaction(TxLimits {
        max_lifetime: Duration::from_millis(400),
        ..TxLimits::default()
    })?;
    // Kept busy with reads, it still ends at its lifetime: the request
    // that finds it expired gets 408, or, when the lifetime runs out
    // between two requests, the connection is closed.
    let started = Instant::now();
    let last = loop {
        match c.request("GET", "/root/Sample", "", b"") {
            Some(r) if r.status == 200 && started.elapsed() < Duration::from_secs(5) => {}
            other => break other,
        }
    };
    assert!(started.elapsed() < Duration::from_secs(5));
    if let Some(r) = &last {
        assert_error(r, 408);
        assert!(r.text().contains("rolled back"), "{}", r.text());
        // The connection goes on, without a transaction.
        let r = c.request("END", "/root", "", b"").ok_or("no answer")?;
        assert_error(&r, 400);
    }
    wait_until(|| count(&*hosted) == 0);
    assert_eq!(count(&*hosted), 0);
    Ok(())
}

/// A Burrow client whose transaction the server closed for silence: its
/// next call fails, and neither it nor the earlier write lands outside
/// the transaction.
#[test]
fn a_client_transaction_closed_for_silence_fails_and_writes_nothing() -> TestResult {
    let (server, hosted) = server_with(|b| {
        b.no_auth().transactions(TxLimits {
            idle_timeout: Duration::from_millis(200),
            ..TxLimits::default()
        })
    });
    let db = remote(&server);
    let tx = db.transaction()?;
    tx.add(&mut sample(1))?;
    std::thread::sleep(Duration::from_millis(600));
    let e = tx.add(&mut sample(2)).unwrap_err();
    assert!(e.to_string().contains("rolled the transaction back"), "{e}");
    assert!(tx.commit().is_err());
    wait_until(|| count(&*hosted) == 0);
    assert_eq!(count(&*hosted), 0);
    assert_eq!(count(&db), 0);
    Ok(())
}
