//! A file opened for one process (`SqliteOptions::one_process`): its data
//! is written and read back as usual, across a reopen, and in WAL mode its
//! log index lives in the process's memory (no `-shm` file), which shows the
//! `unix-excl` VFS is the one in use.

#![allow(missing_docs)]

use std::sync::Arc;

use burrow_core::{Database, Model, Orm};
use burrow_derive::Record;
use burrow_sqlite::{SqliteEngine, SqliteOptions, Synchronous};

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core")]
struct Note {
    id: i64,
    text: String,
}

fn open(path: &std::path::Path, one_process: bool) -> Result<Database, Box<dyn std::error::Error>> {
    let options = SqliteOptions::file(path)
        .synchronous(Synchronous::Full)
        .wal(true)
        .one_process(one_process);
    Ok(Database::open(
        Model::new().with::<Note>(),
        Arc::new(SqliteEngine::open(options)?),
    )?)
}

#[test]
fn a_one_process_file_keeps_its_data_and_has_no_shared_memory_file(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("notes.db");
    let shm = dir.path().join("notes.db-shm");
    {
        let db = open(&path, true)?;
        for i in 0..100 {
            db.add(&mut Note {
                id: 0,
                text: format!("note {i}"),
            })?;
        }
        assert_eq!(db.retrieve::<Note>(42)?.text, "note 41");
        assert!(!shm.exists(), "unix-excl keeps the WAL index in memory");
    }
    let db = open(&path, true)?;
    assert_eq!(db.count::<Note>("", &[])?, 100);
    assert_eq!(db.retrieve::<Note>(100)?.text, "note 99");
    drop(db);
    // The same file opened as usual: the index is shared through -shm.
    let db = open(&path, false)?;
    assert_eq!(db.count::<Note>("", &[])?, 100);
    assert!(shm.exists());
    Ok(())
}
