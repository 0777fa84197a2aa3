//! The soak test's server and its check of the database afterwards
//! (`apps/soak/run.sh` drives both).
//!
//! `burrow-soak serve FILE [ADDR] [SEED]` serves one table, `Item`, from the
//! SQLite file FILE (created and filled with SEED rows, 10,000 by default, if
//! empty), with access control: user `writer` (every right) and user
//! `reader` (read only), each with a configured bearer token, so that the
//! load generator never needs a login the login flood may be throttling. It
//! prints its URL on the first line of its output, then serves until SIGTERM
//! and shuts down gracefully.
//!
//! `burrow-soak check FILE SEED` opens the file once the server has stopped
//! and checks it: `PRAGMA integrity_check`, every row keeping the invariant
//! the writers keep (`Note` is `q` followed by `Qty`, set together by every
//! add and update), seed rows keeping their names, added rows named by one
//! writer's counter and never twice (an add applied twice would repeat one).
//! It prints `rows=N added=M qty_sum=S`, the figures the HTTP check prints
//! from the live server, and exits 1 on any problem.

use std::collections::HashSet;
use std::process::ExitCode;
use std::sync::Arc;

use burrow::chrono::{DateTime, Utc};
use burrow::http::{Auth, Group, Rights, Server};
use burrow::prelude::*;
use burrow::sqlite::{rusqlite, SqliteEngine, SqliteOptions};

/// The one table of the soak: reads and writes of small rows.
#[derive(Record, Debug, Clone, Default)]
struct Item {
    id: i64,
    name: String,
    qty: i64,
    note: String,
    #[burrow(modified)]
    last_change: DateTime<Utc>,
    #[burrow(created)]
    created_at: DateTime<Utc>,
}

/// The bearer tokens `run.sh` and its clients use (loopback only).
const WRITER_TOKEN: &str = "soak-writer-token";
const READER_TOKEN: &str = "soak-reader-token";

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str);
    let outcome = match (arg(0), arg(1)) {
        (Some("serve"), Some(file)) => serve(
            file,
            arg(2).unwrap_or("127.0.0.1:0"),
            arg(3).map_or(Ok(10_000), str::parse).unwrap_or(10_000),
        ),
        (Some("check"), Some(file)) => match arg(2).map(str::parse::<i64>) {
            Some(Ok(seed)) => check(file, seed),
            _ => Err("check needs the seed row count".into()),
        },
        _ => Err("usage: burrow-soak serve FILE [ADDR] [SEED] | check FILE SEED".into()),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("burrow-soak: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(file: &str, addr: &str, seed: usize) -> Res<bool> {
    // The engines' safe defaults (synchronous=FULL, rollback journal): the
    // soak measures what a deployment that keeps them gets.
    let engine = Arc::new(SqliteEngine::open(SqliteOptions::file(file))?);
    let db = Arc::new(Database::open(Model::new().with::<Item>(), engine)?);
    if db.count::<Item>("", &[])? == 0 {
        let mut batch = Batch::new();
        batch.add_all((1..=seed).map(|i| Item {
            name: format!("seed{i}"),
            qty: i as i64,
            note: format!("q{i}"),
            ..Item::default()
        }));
        db.send(&mut batch)?;
    }
    let auth = Auth::new()
        .group(Group::new("writers").all_tables(Rights::ALL))
        .group(Group::new("readers").all_tables(Rights::READ))
        .user("writer", "writer-pass", "writers")?
        .user("reader", "reader-pass", "readers")?
        .token(WRITER_TOKEN, "writer")?
        .token(READER_TOKEN, "reader")?;
    // Default limits: 256 connections per address is exactly what wrk
    // opens from 127.0.0.1, so the abusive clients come from other
    // loopback addresses.
    let server = Server::builder(db, "root").auth(auth).bind(addr)?;
    println!("{}", server.url());
    server.run_until_signal()?;
    Ok(true)
}

fn check(file: &str, seed: i64) -> Res<bool> {
    let conn = rusqlite::Connection::open_with_flags(
        file,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    let mut ok = true;
    let integrity: Vec<String> = conn
        .prepare("PRAGMA integrity_check")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    if integrity != ["ok"] {
        ok = false;
        eprintln!("integrity_check: {}", integrity.join("; "));
    }
    let mut stmt = conn.prepare("SELECT ID, Name, Qty, Note FROM Item ORDER BY ID")?;
    let mut rows = stmt.query([])?;
    let (mut count, mut added, mut qty_sum, mut bad) = (0i64, 0i64, 0i64, 0usize);
    let mut names = HashSet::new();
    let mut seen_seed = 0i64;
    while let Some(r) = rows.next()? {
        let (id, name, qty, note): (i64, String, i64, String) =
            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
        count += 1;
        qty_sum = qty_sum.wrapping_add(qty);
        let mut problem = None;
        if note != format!("q{qty}") {
            problem = Some("Note does not match Qty");
        } else if id <= seed {
            seen_seed += 1;
            if name != format!("seed{id}") {
                problem = Some("a seed row lost its name");
            }
        } else {
            added += 1;
            if !is_writer_name(&name) {
                problem = Some("an added row has a name no writer gives");
            } else if !names.insert(name.clone()) {
                problem = Some("an added row's name repeats: an add ran twice");
            }
        }
        if let Some(p) = problem {
            bad += 1;
            ok = false;
            if bad <= 10 {
                eprintln!("row {id} ({name:?}, {qty}, {note:?}): {p}");
            }
        }
    }
    if seen_seed != seed {
        ok = false;
        eprintln!("{seen_seed} seed rows of {seed}: rows were lost");
    }
    println!(
        "rows={count} added={added} qty_sum={qty_sum} bad={bad} integrity={}",
        integrity.join(";")
    );
    Ok(ok)
}

/// `w{run}-{thread}-{n}`: the names the wrk writers give (`mixed.lua`).
fn is_writer_name(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    name.strip_prefix('w').is_some_and(|rest| {
        let parts: Vec<&str> = rest.split('-').collect();
        parts.len() == 3 && parts.iter().all(|p| digits(p))
    })
}
