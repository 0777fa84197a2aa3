//! A request whose connection drops: sent again only when that cannot apply
//! it twice. The server here is a raw socket script, to drop connections at
//! exact points.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use burrow_core::{Record, RowOps};
use burrow_http::RemoteEngine;

use crate::common::*;

/// Reads one request (head and body); its first line.
fn read_request(s: &mut TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)?;
    Ok(head.lines().next().unwrap_or("").to_owned())
}

fn answer(s: &mut TcpStream, status: &str, extra: &str, body: &str) -> std::io::Result<()> {
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
}

/// Answers the client's first request (`GET /root/timestamp`) on its first
/// connection, then runs `then` on that connection; every later connection's
/// requests are counted in `later` and answered 201.
fn script(
    then: impl FnOnce(TcpStream) + Send + 'static,
) -> std::io::Result<(String, Arc<AtomicUsize>)> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}/root", l.local_addr()?);
    let later = Arc::new(AtomicUsize::new(0));
    let counted = later.clone();
    std::thread::spawn(move || {
        let Ok((mut first, _)) = l.accept() else {
            return;
        };
        if read_request(&mut first).is_ok() {
            let _ = answer(&mut first, "200 OK", "", "12345");
        }
        then(first);
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            while read_request(&mut s).is_ok() {
                counted.fetch_add(1, Ordering::SeqCst);
                let _ = answer(&mut s, "201 Created", "Location: root/Sample/9\r\n", "");
            }
        }
    });
    Ok((url, later))
}

#[test]
fn a_write_answered_by_a_dropped_connection_is_not_sent_again() -> TestResult {
    // The server reads the whole POST, then closes without a word.
    let (url, later) = script(|mut s| {
        let _ = read_request(&mut s);
    })?;
    let engine = RemoteEngine::connect(&url)?;
    let err = engine
        .insert(Sample::table(), None, &sample(1))
        .unwrap_err();
    assert!(err.to_string().contains("may or may not"), "{err}");
    // A second POST on a new connection would have been answered 201, and
    // the insert would have succeeded.
    assert_eq!(later.load(Ordering::SeqCst), 0);
    Ok(())
}

#[test]
fn a_write_on_a_connection_closed_while_idle_goes_on_a_new_one() -> TestResult {
    // The server closes the kept connection right after its first answer,
    // as an idle timeout would (on loopback the close has reached the client
    // once `close` returns).
    let (closed, is_closed) = std::sync::mpsc::channel();
    let (url, later) = script(move |s| {
        drop(s);
        let _ = closed.send(());
    })?;
    let engine = RemoteEngine::connect(&url)?;
    is_closed.recv_timeout(Duration::from_secs(10))?;
    assert_eq!(engine.insert(Sample::table(), None, &sample(1))?, 9);
    assert_eq!(later.load(Ordering::SeqCst), 1);
    Ok(())
}
