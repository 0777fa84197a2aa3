//! A server's `run_until_signal` returns, after a graceful shutdown, when the
//! process gets SIGTERM, called from async code too. A test binary of its own: the signal is the
//! process's.
#![cfg(target_os = "linux")]
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use burrow_core::{Database, Model};
use burrow_http::Server;
use burrow_sqlite::SqliteEngine;

#[derive(burrow_derive::Record)]
#[burrow(crate = "burrow_core")]
struct Note {
    id: i64,
    text: String,
}

/// Whether the process catches SIGTERM (bit 15 of `SigCgt`), so that the
/// signal sent next cannot end the test process instead.
fn term_caught() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("SigCgt:"))
                .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        })
        .is_some_and(|mask| mask & (1 << (15 - 1)) != 0)
}

#[test]
fn sigterm_stops_a_server_gracefully() -> Result<(), Box<dyn std::error::Error>> {
    let client = Arc::new(Database::open(
        Model::new().with::<Note>(),
        Arc::new(SqliteEngine::memory()?),
    )?);
    let server = Server::builder(client, "root")
        .no_auth()
        .threads(1)
        .bind("127.0.0.1:0")?;
    let url = server.url();
    let killer = std::thread::spawn(move || -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !term_caught() {
            if Instant::now() > deadline {
                return Err("the server never caught SIGTERM".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let status = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .map_err(|e| e.to_string())?;
        status
            .success()
            .then_some(())
            .ok_or_else(|| "kill failed".into())
    });
    // From async code, as an async `main` would run it: there tokio panics
    // at a `block_on` unless the server waits on a thread of its own.
    let outer = tokio::runtime::Builder::new_current_thread().build()?;
    outer.block_on(async { server.run_until_signal() })?;
    killer.join().map_err(|_| "the killer thread panicked")??;
    // Shut down: the port no longer answers.
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/root")
        .to_owned();
    assert!(std::net::TcpStream::connect(addr).is_err());
    Ok(())
}
