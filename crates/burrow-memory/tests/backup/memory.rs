//! Backups of a live memory engine: a backup taken while two writers commit
//! is one committed state; a broken backup is refused whole.

use std::path::Path;
use std::sync::Arc;

use burrow_core::{Database, ErrorKind, Orm};
use burrow_memory::{MemoryEngine, MemoryOptions};

use super::ledger::*;

fn filled(rows: i64) -> Result<(Arc<MemoryEngine>, Database), Box<dyn std::error::Error>> {
    let engine = Arc::new(MemoryEngine::new());
    let db = Database::open(model(), engine.clone())?;
    fill(&db, rows)?;
    Ok((engine, db))
}

#[test]
fn backup_while_two_writers_commit_is_one_committed_state() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (engine, db) = filled(4_000)?;
    let db = Arc::new(db);
    for gzip in [false, true] {
        let writers = Writers::start(&db);
        let target = dir.path().join(if gzip { "b.gz" } else { "b.bmem" });
        // Several backups in a row, the writers committing in between.
        let before = writers.commits();
        for _ in 0..3 {
            // Backups between commits, not before the writers start.
            writers.next_commit();
            if gzip {
                engine.backup_gz(&target)?;
            } else {
                engine.backup(&target)?;
            }
            let copy = Database::open(
                model(),
                Arc::new(MemoryEngine::open_backup(&target, MemoryOptions::memory())?),
            )?;
            let tallies = check_consistent(&copy)?;
            assert!(tallies.iter().all(|t| t.rows >= 2_000), "{tallies:?}");
        }
        let during = writers.commits() - before;
        writers.stop()?;
        assert!(during > 0, "the writers were blocked for the whole backups");
    }
    Ok(())
}

#[test]
fn a_backup_replaces_a_database_file() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (engine, db) = filled(1_000)?;
    let want = db.list::<Item>("", &[])?;
    engine.backup_gz(dir.path().join("b.gz"))?;
    let target = dir.path().join("data.bmem");
    {
        let old = Arc::new(MemoryEngine::open(MemoryOptions::file(&target))?);
        let db = Database::open(model(), old.clone())?;
        db.add(&mut item(1, 1))?;
    }
    {
        let e = MemoryEngine::open_backup(dir.path().join("b.gz"), MemoryOptions::file(&target))?;
        assert_eq!(
            Database::open(model(), Arc::new(e))?.list::<Item>("", &[])?,
            want
        );
    }
    let reopened = MemoryEngine::open(MemoryOptions::file(&target))?;
    assert_eq!(
        Database::open(model(), Arc::new(reopened))?.list::<Item>("", &[])?,
        want
    );
    Ok(())
}

#[test]
fn backup_to_an_unwritable_path_fails_and_the_engine_keeps_working() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (engine, db) = filled(100)?;
    std::fs::write(dir.path().join("file"), b"x")?;
    let bad = dir.path().join("file").join("b.bmem");
    for err in [
        engine.backup(&bad).unwrap_err(),
        engine.backup_gz(&bad).unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::Engine, "{err}");
        assert!(err.to_string().contains("b.bmem"), "{err}");
    }
    db.add(&mut item(1, 1))?;
    assert_eq!(db.count::<Item>("", &[])?, 101);
    Ok(())
}

fn assert_refused(bad: &Path, why: &str, target: &Path) -> TestResult {
    let err = MemoryEngine::open_backup(bad, MemoryOptions::file(target))
        .err()
        .expect("refused");
    assert_eq!(err.kind(), ErrorKind::BadInput, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&bad.display().to_string()) && msg.contains(why),
        "{msg}"
    );
    assert!(!target.exists(), "nothing written at the target");
    Ok(())
}

#[test]
fn truncated_or_corrupted_backups_are_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (engine, _db) = filled(5_000)?;
    let target = dir.path().join("target.bmem");
    engine.backup_gz(dir.path().join("b.gz"))?;
    engine.backup(dir.path().join("b.bmem"))?;
    let gz = std::fs::read(dir.path().join("b.gz"))?;
    let plain = std::fs::read(dir.path().join("b.bmem"))?;
    for cut in [gz.len() / 2, gz.len() - 4, 10] {
        let bad = dir.path().join(format!("cut{cut}.gz"));
        std::fs::write(&bad, &gz[..cut])?;
        assert_refused(&bad, "truncated", &target)?;
    }
    let mut flipped = gz.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x55;
    let bad = dir.path().join("flipped.gz");
    std::fs::write(&bad, &flipped)?;
    assert_refused(&bad, "corrupted", &target)?;

    let bad = dir.path().join("cut.bmem");
    std::fs::write(&bad, &plain[..plain.len() / 2])?;
    assert_refused(&bad, "truncated", &target)?;
    let mut flipped = plain.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x55;
    let bad = dir.path().join("flipped.bmem");
    std::fs::write(&bad, &flipped)?;
    assert_refused(&bad, "checksum", &target)?;
    Ok(())
}
