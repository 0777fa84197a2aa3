//! Online backup and restore of the SQLite engine: a backup taken while two
//! writers commit is one committed state; a broken backup is refused whole.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use burrow_core::{Database, ErrorKind, Orm};
use burrow_sqlite::{verify_backup, BackupOptions, SqliteEngine, SqliteOptions};

use super::ledger::*;

fn filled(
    path: &Path,
    rows: i64,
) -> Result<(Arc<SqliteEngine>, Database), Box<dyn std::error::Error>> {
    let engine = Arc::new(SqliteEngine::open(SqliteOptions::file(path))?);
    let db = Database::open(model(), engine.clone())?;
    fill(&db, rows)?;
    Ok((engine, db))
}

#[test]
fn backup_while_two_writers_commit_is_one_committed_state() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (engine, db) = filled(&dir.path().join("live.db"), 20_000)?;
    let db = Arc::new(db);
    for gzip in [None, Some(1)] {
        let writers = Writers::start(&db);
        let before = writers.commits();
        let target = dir
            .path()
            .join(if gzip.is_some() { "b.db.gz" } else { "b.db" });
        // Small steps with pauses: the writers commit between them.
        let options = BackupOptions::new()
            .pages_per_step(16)
            .pause(Duration::from_millis(1))
            .gzip(gzip);
        let mut calls = 0;
        let summary = engine.backup_with(&target, &options, |p| {
            calls += 1;
            assert!(p.pages_done <= p.pages_total);
            if calls == 1 {
                // The lock is free between steps: a writer commits here,
                // between the first step and the next.
                writers.next_commit();
            }
        })?;
        let during = writers.commits() - before;
        writers.stop()?;
        assert!(summary.steps > 10, "{summary:?}");
        assert_eq!(calls, summary.steps);
        assert!(during > 0, "the writers were blocked for the whole backup");

        verify_backup(&target)?;
        let copy = Database::open(
            model(),
            Arc::new(SqliteEngine::open_backup(&target, SqliteOptions::memory())?),
        )?;
        let tallies = check_consistent(&copy)?;
        let live = check_consistent(&db)?;
        for (t, l) in tallies.iter().zip(&live) {
            assert!(t.rows >= 10_000 && t.rows <= l.rows, "{t:?} vs live {l:?}");
        }
    }
    Ok(())
}

#[test]
fn round_trip_plain_and_gzip_into_a_file_and_into_a_live_engine() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (engine, db) = filled(&dir.path().join("live.db"), 3_000)?;
    let want = db.list::<Item>("", &[])?;
    engine.backup(dir.path().join("b.db"))?;
    let gz = engine.backup_gz(dir.path().join("b.db.gz"))?;
    assert!(gz.bytes < std::fs::metadata(dir.path().join("b.db"))?.len());
    for (i, name) in ["b.db", "b.db.gz"].into_iter().enumerate() {
        let target = dir.path().join(format!("restored{i}.db"));
        let e = SqliteEngine::open_backup(dir.path().join(name), SqliteOptions::file(&target))?;
        let copy = Database::open(model(), Arc::new(e))?;
        assert_eq!(copy.list::<Item>("", &[])?, want);
    }
    // Replace the live database: later writes are gone, the engine serves on.
    db.delete_where::<Item>("Amount < ?", burrow_core::params![1000])?;
    db.add(&mut item(1, 5))?;
    engine.restore(dir.path().join("b.db.gz"))?;
    assert_eq!(db.list::<Item>("", &[])?, want);
    db.add(&mut item(2, 6))?;
    assert_eq!(db.count::<Item>("", &[])?, want.len() as u64 + 1);
    Ok(())
}

#[test]
fn backup_to_an_unwritable_path_fails_and_the_engine_keeps_working() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (engine, db) = filled(&dir.path().join("live.db"), 100)?;
    // A regular file where a folder should be: unwritable even for root.
    std::fs::write(dir.path().join("file"), b"x")?;
    let bad = dir.path().join("file").join("b.db");
    for gzip in [None, Some(1)] {
        let err = engine
            .backup_with(&bad, &BackupOptions::new().gzip(gzip), |_| {})
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Engine, "{err}");
        assert!(err.to_string().contains("b.db"), "{err}");
    }
    let err = engine.backup(dir.path().join("live.db")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadInput, "{err}");
    db.add(&mut item(1, 1))?;
    assert_eq!(db.count::<Item>("", &[])?, 101);
    let names: Vec<_> = std::fs::read_dir(dir.path())?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()?;
    assert_eq!(
        names.len(),
        2,
        "only the database and the blocker remain: {names:?}"
    );
    Ok(())
}

/// Asserts that restoring `bad` fails with `BadInput` naming it and saying
/// `why`, and that neither the target file nor the live engine changed.
fn assert_refused(
    bad: &Path,
    why: &str,
    dir: &Path,
    engine: &SqliteEngine,
    db: &Database,
) -> TestResult {
    let before = db.count::<Item>("", &[])?;
    let target = dir.join("target.db");
    for err in [
        verify_backup(bad).unwrap_err(),
        SqliteEngine::open_backup(bad, SqliteOptions::file(&target))
            .err()
            .expect("refused"),
        SqliteEngine::open_backup(bad, SqliteOptions::memory())
            .err()
            .expect("refused"),
        engine.restore(bad).unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::BadInput, "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains(&bad.display().to_string()) && msg.contains(why),
            "{msg}"
        );
    }
    assert!(!target.exists(), "nothing written at the target");
    assert_eq!(db.count::<Item>("", &[])?, before);
    Ok(())
}

#[test]
fn truncated_or_corrupted_gzip_backups_are_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (engine, db) = filled(&dir.path().join("live.db"), 5_000)?;
    engine.backup_gz(dir.path().join("b.gz"))?;
    let good = std::fs::read(dir.path().join("b.gz"))?;
    for cut in [good.len() / 2, good.len() - 4, 10] {
        let bad = dir.path().join(format!("cut{cut}.gz"));
        std::fs::write(&bad, &good[..cut])?;
        assert_refused(&bad, "truncated", dir.path(), &engine, &db)?;
    }
    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x55;
    let bad = dir.path().join("flipped.gz");
    std::fs::write(&bad, &flipped)?;
    assert_refused(&bad, "corrupted", dir.path(), &engine, &db)?;
    Ok(())
}

#[test]
fn truncated_or_corrupted_plain_backups_are_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (engine, db) = filled(&dir.path().join("live.db"), 5_000)?;
    engine.backup(dir.path().join("b.db"))?;
    let good = std::fs::read(dir.path().join("b.db"))?;
    assert!(good.len() > 16 * 4096, "several pages to damage");

    let bad = dir.path().join("cut.db");
    std::fs::write(&bad, &good[..good.len() - 4096])?;
    assert_refused(&bad, "truncated", dir.path(), &engine, &db)?;

    let bad = dir.path().join("short.db");
    std::fs::write(&bad, &good[..50])?;
    assert_refused(&bad, "truncated", dir.path(), &engine, &db)?;

    // Pages of the table overwritten: the b-tree no longer holds together.
    let mut damaged = good.clone();
    for b in &mut damaged[4 * 4096..8 * 4096] {
        *b = 0xA5;
    }
    let bad = dir.path().join("damaged.db");
    std::fs::write(&bad, &damaged)?;
    assert_refused(&bad, "integrity check failed", dir.path(), &engine, &db)?;

    let bad = dir.path().join("other.db");
    std::fs::write(&bad, vec![b'x'; 8192])?;
    assert_refused(&bad, "not a SQLite database", dir.path(), &engine, &db)?;
    Ok(())
}
