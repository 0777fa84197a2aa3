//! Readers of a file no other process can open keep their WAL snapshot
//! between reads: a read still sees every commit made before it, whoever
//! made it, and a snapshot kept while its reader is idle never stops the
//! log from being checkpointed and started again (the `-wal` file stays
//! bounded however many commits follow).

#![allow(missing_docs)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use burrow_core::{Database, Model, Orm};
use burrow_derive::Record;
use burrow_sqlite::rusqlite::{Connection, OpenFlags};
use burrow_sqlite::{SqliteEngine, SqliteOptions};

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core")]
struct Doc {
    id: i64,
    text: String,
}

type Res = Result<(), Box<dyn std::error::Error>>;

fn open(
    path: &Path,
    one_process: bool,
) -> Result<(Database, Arc<SqliteEngine>), Box<dyn std::error::Error>> {
    let engine = Arc::new(SqliteEngine::open(
        SqliteOptions::file(path)
            .wal(true)
            .one_process(one_process)
            .readers(2)
            .busy_timeout(Duration::from_secs(10)),
    )?);
    let db = Database::open(Model::new().with::<Doc>(), engine.clone())?;
    Ok((db, engine))
}

/// A connection of this process that no engine knows of: its commits reach
/// no engine's commit hook, so readers can only see them in the WAL index.
fn outsider(path: &Path) -> Result<Connection, Box<dyn std::error::Error>> {
    let c = Connection::open_with_flags_and_vfs(path, OpenFlags::default(), "unix-excl")?;
    // A checkpoint held up by a reader says so at once.
    c.busy_timeout(Duration::ZERO)?;
    Ok(c)
}

/// Whether a checkpoint that restarts the log is held up by a reader: one
/// keeps a snapshot of frames still in the log.
fn restart_blocked(c: &Connection) -> Result<bool, Box<dyn std::error::Error>> {
    let busy: i64 = c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
    Ok(busy != 0)
}

fn text(i: usize) -> String {
    format!("{i:06}").repeat(500)
}

fn wal_size(path: &Path) -> u64 {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map_or(0, |m| m.len())
}

/// Reads on one thread with no write between them move to a reader that
/// keeps its snapshot (shown by a restart of the log that it holds up);
/// commits made where no hook sees them are read at once, by the reads
/// that follow, whichever connection runs them; a commit through the
/// engine ends the idle snapshot.
#[test]
#[cfg(unix)]
fn a_kept_snapshot_is_the_last_commit_at_every_read() -> Res {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("kept.db");
    let (db, _engine) = open(&path, true)?;
    for i in 0..20 {
        db.add(&mut Doc {
            id: 0,
            text: text(i),
        })?;
    }
    for _ in 0..5 {
        assert_eq!(db.retrieve::<Doc>(1)?.text, text(0));
    }
    let other = outsider(&path)?;
    assert!(
        restart_blocked(&other)?,
        "an idle reader keeps its snapshot"
    );
    for round in 1..200 {
        other.execute("UPDATE Doc SET Text = ?1 WHERE ID = 1", [text(round)])?;
        for read in 0..3 {
            assert_eq!(
                db.retrieve::<Doc>(1)?.text,
                text(round),
                "round {round}, read {read}"
            );
        }
    }
    db.update(&mut Doc {
        id: 2,
        text: "through the engine".into(),
    })?;
    assert!(
        !restart_blocked(&other)?,
        "a commit ends the idle snapshots"
    );
    assert_eq!(db.retrieve::<Doc>(2)?.text, "through the engine");
    Ok(())
}

/// Adds the one document, then reads it a few times on `reader`, whose
/// reader is then idle with its snapshot kept (where snapshots are kept).
fn one_doc_read_until_idle(writer: &Database, reader: &Database) -> Res {
    writer.add(&mut Doc {
        id: 0,
        text: text(0),
    })?;
    for _ in 0..5 {
        assert_eq!(reader.retrieve::<Doc>(1)?.text, text(0));
    }
    Ok(())
}

/// Commits `n` updates of the document through `writer`; then `reader`
/// reads the last. The size the `-wal` file reached.
fn commits(
    writer: &Database,
    reader: &Database,
    path: &Path,
    n: usize,
) -> Result<u64, Box<dyn std::error::Error>> {
    for i in 1..=n {
        writer.update(&mut Doc {
            id: 1,
            text: text(i),
        })?;
    }
    let size = wal_size(path);
    for _ in 0..3 {
        assert_eq!(reader.retrieve::<Doc>(1)?.text, text(n));
    }
    Ok(size)
}

/// Thousands of commits after a reader went idle with its snapshot: each
/// commit ends it, the log is checkpointed every 1,000 frames, as SQLite's
/// own hook would, and starts again, so the `-wal` file stays near 4 MB
/// (the frames written are 12 MB). With and without kept snapshots (the
/// commit hook checkpoints on every WAL file).
#[test]
fn the_log_stays_bounded_behind_an_idle_reader() -> Res {
    for one_process in [true, false] {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("grow.db");
        let (db, _engine) = open(&path, one_process)?;
        one_doc_read_until_idle(&db, &db)?;
        let size = commits(&db, &db, &path, 3000)?;
        assert!(
            size < 6_000_000,
            "one_process {one_process}: the log grew to {size} bytes"
        );
    }
    Ok(())
}

/// Two engines of one process on one file: the commits of the one end the
/// idle snapshots of the other's readers (the log stays bounded), and the
/// other reads them.
#[test]
fn commits_of_another_engine_end_idle_snapshots() -> Res {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("two.db");
    let (a, _ea) = open(&path, true)?;
    let (b, _eb) = open(&path, true)?;
    one_doc_read_until_idle(&b, &a)?;
    let size = commits(&b, &a, &path, 3000)?;
    assert!(size < 6_000_000, "the log grew to {size} bytes");
    Ok(())
}

/// A `PRAGMA wal_autocheckpoint` run through `with_connection` is kept,
/// and so is the hook that ends idle snapshots: with 100 frames asked and a
/// reader idle with its snapshot, the log stays far below the default's
/// 4 MB (without the hook it would grow with every commit).
#[test]
fn an_autocheckpoint_size_asked_is_kept() -> Res {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("small.db");
    let (db, engine) = open(&path, true)?;
    engine.with_connection(|c| c.execute_batch("PRAGMA wal_autocheckpoint=100"))?;
    one_doc_read_until_idle(&db, &db)?;
    let size = commits(&db, &db, &path, 1000)?;
    assert!(size < 1_500_000, "the log grew to {size} bytes");
    Ok(())
}

/// A writer committing while threads keep reading: readers in use at a
/// commit keep their snapshot, so the log could only start again if they
/// let go of it; once it is full they do (they drain), and a log grown to
/// twice its size is checkpointed waiting for the reads under way. The
/// `-wal` file stays near 8 MB (it would hold all 8,000 commits, 33 MB,
/// otherwise; draining alone let it reach 15–24 MB with 4–8 threads). On a
/// machine busy with other work the waiting checkpoint can run out of time
/// once, and the next try comes at twice the size: 16.5 MB, measured with
/// two processors' worth of other work running.
#[test]
fn the_log_stays_bounded_while_threads_read() -> Res {
    use std::sync::atomic::{AtomicBool, Ordering};
    for threads in [2, 4, 8] {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("busy.db");
        let engine = Arc::new(SqliteEngine::open(
            SqliteOptions::file(&path)
                .wal(true)
                .one_process(true)
                .synchronous(burrow_sqlite::Synchronous::Normal),
        )?);
        let db = Database::open(Model::new().with::<Doc>(), engine)?;
        for _ in 0..100 {
            db.add(&mut Doc {
                id: 0,
                text: "x".repeat(100),
            })?;
        }
        let done = AtomicBool::new(false);
        let mut largest = 0;
        std::thread::scope(|s| -> Res {
            let reading: Vec<_> = (0..threads)
                .map(|t| {
                    let (db, done) = (&db, &done);
                    s.spawn(move || {
                        let mut id = t;
                        while !done.load(Ordering::Relaxed) {
                            id = id % 100 + 1;
                            db.retrieve::<Doc>(id)?;
                        }
                        Ok::<_, burrow_core::Error>(())
                    })
                })
                .collect();
            let wrote = (0..8000).try_for_each(|c| {
                db.update(&mut Doc {
                    id: c % 100 + 1,
                    text: format!("{c}").repeat(20),
                })?;
                if c % 100 == 0 {
                    largest = largest.max(wal_size(&path));
                }
                Ok::<_, burrow_core::Error>(())
            });
            done.store(true, Ordering::Relaxed);
            for r in reading {
                r.join().expect("a reader panicked")?;
            }
            Ok(wrote?)
        })?;
        assert!(
            largest < 20_000_000,
            "{threads} reading: the log grew to {largest} bytes"
        );
        assert_eq!(db.retrieve::<Doc>(100)?.text, "7999".repeat(20));
    }
    Ok(())
}

/// A checkpoint that truncates the log, run through `with_connection`
/// while threads read: the readers let go of their snapshots meanwhile,
/// so it waits only for the reads under way and truncates the log.
#[test]
fn a_truncating_checkpoint_goes_through_while_threads_read() -> Res {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("trunc.db");
    let (db, engine) = open(&path, true)?;
    one_doc_read_until_idle(&db, &db)?;
    commits(&db, &db, &path, 200)?;
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| -> Res {
        let reading: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        db.retrieve::<Doc>(1)?;
                    }
                    Ok::<_, burrow_core::Error>(())
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        let checkpoint = engine.with_connection(|c| {
            c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                r.get::<_, i64>(0)
            })
        });
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in reading {
            r.join().expect("a reader panicked")?;
        }
        assert_eq!(checkpoint?, 0, "the checkpoint was held up by a reader");
        Ok(())
    })?;
    assert_eq!(wal_size(&path), 0);
    Ok(())
}

/// A file taken out of WAL mode before any reader opened: the readers
/// then read one transaction per read (the WAL index cannot tell them of
/// commits), and never keep the lock that would stop the writer.
#[test]
fn a_file_taken_out_of_wal_mode_is_read_and_written() -> Res {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("left.db");
    let engine = Arc::new(SqliteEngine::open(
        SqliteOptions::file(&path)
            .wal(true)
            .one_process(true)
            .readers(2)
            .busy_timeout(Duration::from_millis(500)),
    )?);
    let mode: String =
        engine.with_connection(|c| c.query_row("PRAGMA journal_mode=DELETE", [], |r| r.get(0)))?;
    assert_eq!(mode, "delete");
    let db = Database::open(Model::new().with::<Doc>(), engine)?;
    one_doc_read_until_idle(&db, &db)?;
    for i in 1..=20 {
        db.update(&mut Doc {
            id: 1,
            text: text(i),
        })?;
        for _ in 0..3 {
            assert_eq!(db.retrieve::<Doc>(1)?.text, text(i));
        }
    }
    Ok(())
}
