//! Crash tests: nothing committed is lost when the process is killed.
//!
//! The bug this guards against: a write reported committed to the caller
//! that a SIGKILL right after the call returned makes disappear, or a kill
//! in the middle of a commit that leaves a file that does not open, or half
//! a batch or transaction.
//!
//! This binary is its own child. Run with `BURROW_CRASH_CHILD` set, it opens
//! a database and writes through the ORM forever (single adds, batches with
//! and without rollback-on-error, some failing on purpose, transactions),
//! printing each operation after the call returned: `C n` committed, `R n`
//! rolled back, `U n` committed in memory only (a single add on the memory
//! engine, which saves on commits and batches, not on single writes). The
//! parent kills it with SIGKILL after a random delay, reopens the database,
//! and checks it: it opens (and passes `PRAGMA integrity_check`), every
//! operation in it is whole, every `C` is there, and so is every `U`
//! followed by a `C` (that commit's save wrote it), no `R` is, and nothing
//! else is but the one operation in flight when the child died.
//!
//! Configurations: SQLite files with `synchronous` FULL, NORMAL and OFF, with
//! and without WAL, and the memory engine saving on commit; with
//! `--features encryption`, also an encrypted SQLite file (SQLCipher, FULL). Kills per
//! configuration: `BURROW_CRASH_KILLS` (default 20; 200 or more for a long
//! run); `BURROW_CRASH_SEED` replays a run; `BURROW_CRASH_ONLY` (a comma-separated
//! list) runs only the configurations named.
//!
//! Lives with the memory engine's tests because this crate's tests build both
//! engines (SQLite is already its reference in `parity.rs`).

#![allow(missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use burrow_core::{Batch, Database, Model, Orm, Storage};
use burrow_derive::Record;
use burrow_memory::{MemoryEngine, MemoryOptions};
use burrow_sqlite::{SqliteEngine, SqliteOptions, Synchronous};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Record, Debug, Clone, Default)]
#[burrow(crate = "burrow_core")]
struct Item {
    id: i64,
    /// The operation that wrote it, and its part of how many.
    op: i64,
    part: i64,
    parts: i64,
    #[burrow(unique)]
    key: String,
}

/// Rows written by transactions, counted by each transaction itself.
#[derive(Record, Debug, Clone, Default)]
#[burrow(crate = "burrow_core")]
struct Tally {
    id: i64,
    rows: i64,
}

const CONFIGS: &[&str] = &[
    "sqlite-full",
    "sqlite-normal",
    "sqlite-off",
    "sqlite-wal-full",
    "sqlite-wal-normal",
    // Nothing syncs the log at commit: only the commit's own write puts
    // its frames in the system before the commit returns.
    "sqlite-wal-off",
    "sqlite-wal-off-one-process",
    // SQLCipher's pages go through the same journal, encrypted; a kill
    // between a page and its journal entry must leave a file the key opens.
    #[cfg(feature = "encryption")]
    "sqlite-aes-full",
    // Encrypted pages in log frames the log VFS gathers.
    #[cfg(feature = "encryption")]
    "sqlite-aes-wal-off",
    "memory-save-on-commit",
];

fn open(config: &str, path: &Path) -> Res<(Database, Option<Arc<SqliteEngine>>)> {
    let model = Model::new().with::<Item>().with::<Tally>();
    if config.starts_with("memory") {
        let engine = MemoryEngine::open(MemoryOptions::file(path).save_on_commit(true))?;
        return Ok((Database::open(model, Arc::new(engine))?, None));
    }
    let sync = if config.ends_with("full") {
        Synchronous::Full
    } else if config.contains("normal") {
        Synchronous::Normal
    } else {
        Synchronous::Off
    };
    let options = SqliteOptions::file(path)
        .synchronous(sync)
        .wal(config.contains("wal"))
        .one_process(config.ends_with("one-process"));
    #[cfg(feature = "encryption")]
    let options = if config.contains("aes") {
        options.raw_key([0x5c; 32])
    } else {
        options
    };
    let engine = Arc::new(SqliteEngine::open(options)?);
    let db = Database::open(model, engine.clone() as Arc<dyn Storage>)?;
    Ok((db, Some(engine)))
}

fn items(op: i64, parts: i64) -> impl Iterator<Item = Item> {
    (0..parts).map(move |part| Item {
        id: 0,
        op,
        part,
        parts,
        key: format!("{op}-{part}"),
    })
}

/// The child: writes until killed.
fn child(config: &str, path: &Path) -> Res<()> {
    let (db, _) = open(config, path)?;
    let memory = config.starts_with("memory");
    let start = db
        .list::<Item>("", &[])?
        .iter()
        .map(|i| i.op)
        .max()
        .unwrap_or(0)
        + 1;
    if db.get::<Tally>(1)?.is_none() {
        let tx = db.transaction()?;
        tx.add_with_id(&mut Tally::default(), 1)?;
        tx.commit()?;
    }
    let mut out = std::io::stdout().lock();
    // One write per line: a pipe never splits a write this short.
    let mut say = |line: String| -> Res<()> {
        out.write_all(line.as_bytes())?;
        out.flush()?;
        Ok(())
    };
    say(format!("S {start}\n"))?;
    for op in start.. {
        let line = match op % 5 {
            0 => {
                db.add(&mut items(op, 1).next().expect("one item"))?;
                if memory {
                    format!("U {op}\n")
                } else {
                    format!("C {op}\n")
                }
            }
            1 => {
                let mut batch = Batch::new();
                batch.add_all(items(op, 3));
                db.send(&mut batch)?;
                format!("C {op}\n")
            }
            2 | 3 => {
                let mut batch = Batch::new().rollback_on_error(true);
                batch.add_all(items(op, 4));
                if op % 5 == 3 {
                    // A duplicate key: the whole batch must roll back.
                    batch.add(items(op, 1).next().expect("one item"));
                    match db.send(&mut batch) {
                        Err(_) => format!("R {op}\n"),
                        Ok(_) => return Err("a batch with a duplicate key was accepted".into()),
                    }
                } else {
                    db.send(&mut batch)?;
                    format!("C {op}\n")
                }
            }
            _ => {
                let tx = db.transaction()?;
                let mut tally: Tally = tx.retrieve(1)?;
                for mut it in items(op, 3) {
                    tx.add(&mut it)?;
                }
                tally.rows += 3;
                tx.update(&mut tally)?;
                tx.commit()?;
                format!("C {op}\n")
            }
        };
        say(line)?;
    }
    Ok(())
}

/// What the children reported, over every run on one database.
#[derive(Default)]
struct Reported {
    committed: BTreeSet<i64>,
    rolled_back: BTreeSet<i64>,
    /// Memory-only commits, and whether a later commit (whose save holds
    /// them) was reported in the same run.
    unsaved: BTreeMap<i64, bool>,
}

#[derive(Default, Debug)]
struct Tallies {
    kills: u64,
    reopen_failures: u64,
    rows_lost: u64,
    /// Operations found half written, rolled-back ones found, and ones
    /// found that no child was writing.
    broken: u64,
    committed_ops: u64,
    in_flight_found: u64,
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        // xorshift64*: enough to spread kill moments; seeded, so replayable.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

fn run_config(config: &str, kills: u64, seed: u64) -> Res<Tallies> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join(if config.starts_with("memory") {
        "data.bmem"
    } else {
        "data.db"
    });
    let mut rng = Rng(seed | 1);
    let mut rep = Reported::default();
    let mut t = Tallies::default();
    let exe = std::env::current_exe()?;
    for _ in 0..kills {
        let mut child = Command::new(&exe)
            .env("BURROW_CRASH_CHILD", config)
            .env("BURROW_CRASH_PATH", &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().expect("piped");
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            let mut r = BufReader::new(stdout);
            let mut buf = Vec::new();
            while r.read_until(b'\n', &mut buf).unwrap_or(0) > 0 {
                // A line without its newline was cut by the kill: not reported.
                if buf.ends_with(b"\n") {
                    lines.push(String::from_utf8_lossy(&buf).trim().to_owned());
                }
                buf.clear();
            }
            lines
        });
        std::thread::sleep(Duration::from_millis(rng.below(150)));
        let exited = child.try_wait()?;
        child.kill()?;
        let status = child.wait()?;
        let lines = reader.join().expect("reader panicked");
        if let Some(s) = exited {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                std::io::Read::read_to_string(&mut e, &mut err)?;
            }
            return Err(format!("{config}: the child stopped by itself ({s}): {err}").into());
        }
        t.kills += 1;
        debug_assert!(!status.success());

        let mut in_flight = None;
        let mut unsaved_this_run = Vec::new();
        for l in &lines {
            let (kind, n) = l.split_once(' ').ok_or("a malformed line")?;
            let n: i64 = n.parse()?;
            match kind {
                "S" => in_flight = Some(n),
                "C" => {
                    rep.committed.insert(n);
                    for u in unsaved_this_run.drain(..) {
                        rep.unsaved.insert(u, true);
                    }
                }
                "R" => {
                    rep.rolled_back.insert(n);
                }
                "U" => {
                    rep.unsaved.insert(n, false);
                    unsaved_this_run.push(n);
                }
                _ => return Err(format!("unknown line {l}").into()),
            }
            if kind != "S" {
                in_flight = Some(n + 1);
            }
        }

        // Reopen as the next user would, and check.
        let (db, sqlite) = match open(config, &path) {
            Ok(x) => x,
            Err(e) => {
                eprintln!("{config}: reopen failed: {e}");
                t.reopen_failures += 1;
                continue;
            }
        };
        if let Some(engine) = &sqlite {
            let check = engine.with_connection(|c| {
                c.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0))
            })?;
            if check != "ok" {
                eprintln!("{config}: integrity check: {check}");
                t.reopen_failures += 1;
            }
        }
        let mut found: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
        for it in db.list::<Item>("", &[])? {
            let e = found.entry(it.op).or_insert((0, it.parts));
            e.0 += 1;
        }
        for (&op, &(n, parts)) in &found {
            let expected = rep.committed.contains(&op)
                || rep.unsaved.contains_key(&op)
                || Some(op) == in_flight;
            if n != parts || rep.rolled_back.contains(&op) || !expected {
                eprintln!("{config}: operation {op} found with {n} of {parts} rows (expected: {expected})");
                t.broken += 1;
            }
            if Some(op) == in_flight && !rep.committed.contains(&op) {
                t.in_flight_found += 1;
            }
        }
        for op in &rep.committed {
            if !found.contains_key(op) {
                eprintln!("{config}: committed operation {op} lost");
                t.rows_lost += 1;
            }
        }
        for (op, saved_after) in &rep.unsaved {
            if *saved_after && !found.contains_key(op) {
                eprintln!("{config}: single add {op}, saved by a later commit, lost");
                t.rows_lost += 1;
            }
        }
        // Every transaction counted its own rows.
        let tx_rows: i64 = found
            .iter()
            .filter(|(op, _)| *op % 5 == 4)
            .map(|(_, (n, _))| n)
            .sum();
        let tally = db.get::<Tally>(1)?.map_or(0, |t| t.rows);
        if tally != tx_rows {
            eprintln!("{config}: the tally says {tally} transaction rows, {tx_rows} found");
            t.broken += 1;
        }
        // What was found but never reported is committed now: the next
        // child writes after it.
        if let Some(op) = in_flight {
            if found.contains_key(&op) {
                rep.committed.insert(op);
            }
        }
        // Single adds still unsaved may be lost by the next kill; forget them.
        rep.unsaved.retain(|op, _| found.contains_key(op));
        for op in rep.unsaved.values_mut() {
            *op = true;
        }
        t.committed_ops = rep.committed.len() as u64;
    }
    Ok(t)
}

fn main() -> Res<()> {
    if let Ok(config) = std::env::var("BURROW_CRASH_CHILD") {
        let path = std::env::var("BURROW_CRASH_PATH")?;
        return child(&config, Path::new(&path));
    }
    // `cargo test -- --list` and filters: this binary has no separate tests.
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    let kills: u64 = std::env::var("BURROW_CRASH_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("BURROW_CRASH_SEED")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    println!("crash test: {kills} kills per configuration, BURROW_CRASH_SEED={seed}");
    let only = std::env::var("BURROW_CRASH_ONLY").unwrap_or_default();
    if let Some(o) = only
        .split(',')
        .map(str::trim)
        .find(|o| !o.is_empty() && !CONFIGS.contains(o))
    {
        return Err(format!("BURROW_CRASH_ONLY: no configuration {o:?} (in this build)").into());
    }
    let started = Instant::now();
    let results: Vec<(&str, Res<Tallies>)> = std::thread::scope(|s| {
        // `BURROW_CRASH_ONLY=a,b` runs those configurations alone.
        let runs: Vec<_> = CONFIGS
            .iter()
            .filter(|c| only.is_empty() || only.split(',').any(|o| o.trim() == **c))
            .enumerate()
            .map(|(i, c)| {
                let seed = seed.wrapping_add(i as u64 * 0x9E37_79B9);
                (
                    *c,
                    s.spawn(move || run_config(c, kills, seed).map_err(|e| e.to_string())),
                )
            })
            .collect();
        runs.into_iter()
            .map(|(c, h)| (c, h.join().expect("panicked").map_err(Into::into)))
            .collect()
    });
    println!(
        "{:<22} {:>6} {:>16} {:>10} {:>7} {:>14} {:>10}",
        "configuration",
        "kills",
        "reopen failures",
        "rows lost",
        "broken",
        "committed ops",
        "in flight"
    );
    let mut failed = false;
    for (c, r) in results {
        match r {
            Ok(t) => {
                println!(
                    "{c:<22} {:>6} {:>16} {:>10} {:>7} {:>14} {:>10}",
                    t.kills,
                    t.reopen_failures,
                    t.rows_lost,
                    t.broken,
                    t.committed_ops,
                    t.in_flight_found
                );
                failed |= t.reopen_failures + t.rows_lost + t.broken > 0 || t.kills < kills;
            }
            Err(e) => {
                println!("{c:<22} failed: {e}");
                failed = true;
            }
        }
    }
    println!("in {:.1} s", started.elapsed().as_secs_f64());
    if failed {
        return Err("committed data lost, a half operation, or a file that did not reopen".into());
    }
    Ok(())
}
