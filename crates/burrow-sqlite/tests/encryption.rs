//! Encrypted files (the `encryption` feature): nothing readable on disk,
//! keys checked before anything is written, rekeying, encrypting a plain
//! file. The tests outside `encrypted` run in every build: the plain file
//! does show the marker (so the encrypted tests' "absent" means something),
//! and a file that is not a plain database is refused by name.

#![allow(missing_docs)]

use std::path::Path;
use std::sync::Arc;

use burrow_core::{Database, Model, Orm};
use burrow_derive::Record;
use burrow_sqlite::{SqliteEngine, SqliteOptions};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core")]
struct Note {
    id: i64,
    text: String,
}

const MARKER: &str = "burrow-marker-5d1e9c0a-plaintext";

fn write_marker(options: SqliteOptions) -> Res<()> {
    let db = Database::open(
        Model::new().with::<Note>(),
        Arc::new(SqliteEngine::open(options)?),
    )?;
    db.add(&mut Note {
        id: 0,
        text: MARKER.into(),
    })?;
    Ok(())
}

fn read_marker(options: SqliteOptions) -> Res<String> {
    let db = Database::open(
        Model::new().with::<Note>(),
        Arc::new(SqliteEngine::open(options)?),
    )?;
    Ok(db.retrieve::<Note>(1)?.text)
}

fn contains(path: &Path, needle: &[u8]) -> Res<bool> {
    let bytes = std::fs::read(path)?;
    Ok(bytes.windows(needle.len()).any(|w| w == needle))
}

/// The bytes and modification time of a file, and whether a journal sits
/// beside it: what "nothing was changed" is checked against.
fn snapshot(path: &Path) -> Res<(Vec<u8>, std::time::SystemTime, bool)> {
    let journal = Path::new(&format!("{}-journal", path.display())).exists();
    Ok((
        std::fs::read(path)?,
        std::fs::metadata(path)?.modified()?,
        journal,
    ))
}

#[test]
fn a_plain_file_shows_the_marker() -> Res<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("plain.db");
    write_marker(SqliteOptions::file(&path))?;
    assert!(contains(&path, MARKER.as_bytes())?);
    assert_eq!(read_marker(SqliteOptions::file(&path))?, MARKER);
    Ok(())
}

#[test]
fn a_file_that_is_not_a_plain_database_is_refused_by_name() -> Res<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("noise.db");
    std::fs::write(&path, [0x5a; 4096])?;
    let before = snapshot(&path)?;
    let err = SqliteEngine::open(SqliteOptions::file(&path))
        .err()
        .ok_or("opened")?
        .to_string();
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("not a plain SQLite database"), "{err}");
    assert_eq!(snapshot(&path)?, before);
    Ok(())
}

#[cfg(feature = "encryption")]
mod encrypted {
    use super::*;
    use burrow_sqlite::Key;

    const PASS: &str = "correct horse battery staple";

    fn refused(options: SqliteOptions, path: &Path, says: &str) -> Res<()> {
        let before = snapshot(path)?;
        let err = SqliteEngine::open(options)
            .err()
            .ok_or("opened")?
            .to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains(says), "{err}");
        assert_eq!(snapshot(path)?, before, "the file changed");
        Ok(())
    }

    #[test]
    fn no_marker_on_disk_with_a_passphrase_or_a_raw_key() -> Res<()> {
        let dir = tempfile::tempdir()?;
        for (name, options) in [
            (
                "pass.db",
                SqliteOptions::file(dir.path().join("pass.db")).passphrase(PASS),
            ),
            (
                "raw.db",
                SqliteOptions::file(dir.path().join("raw.db")).raw_key([7; 32]),
            ),
        ] {
            let path = dir.path().join(name);
            write_marker(options.clone())?;
            assert!(!contains(&path, MARKER.as_bytes())?, "{name}");
            assert!(!contains(&path, b"SQLite format 3")?, "{name}");
            assert_eq!(read_marker(options)?, MARKER);
        }
        Ok(())
    }

    #[test]
    fn a_wrong_or_missing_key_is_refused_and_changes_nothing() -> Res<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("e.db");
        write_marker(SqliteOptions::file(&path).passphrase(PASS))?;
        // An mtime change within the file system's granularity would be missed.
        std::thread::sleep(std::time::Duration::from_millis(20));
        refused(
            SqliteOptions::file(&path).passphrase("wrong"),
            &path,
            "wrong key",
        )?;
        refused(
            SqliteOptions::file(&path).raw_key([1; 32]),
            &path,
            "wrong key",
        )?;
        refused(SqliteOptions::file(&path), &path, "encrypted")?;
        assert_eq!(
            read_marker(SqliteOptions::file(&path).passphrase(PASS))?,
            MARKER
        );
        Ok(())
    }

    #[test]
    fn a_key_for_a_plain_file_is_refused_and_changes_nothing() -> Res<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("plain.db");
        write_marker(SqliteOptions::file(&path))?;
        refused(
            SqliteOptions::file(&path).passphrase(PASS),
            &path,
            "plain (unencrypted)",
        )?;
        assert_eq!(read_marker(SqliteOptions::file(&path))?, MARKER);
        Ok(())
    }

    #[test]
    fn unusable_keys_are_refused_before_a_file_is_made() -> Res<()> {
        let dir = tempfile::tempdir()?;
        for (pass, says) in [("", "empty passphrase"), ("x'00ff'", "raw key")] {
            let path = dir.path().join("never.db");
            let err = SqliteEngine::open(SqliteOptions::file(&path).passphrase(pass))
                .err()
                .ok_or("opened")?
                .to_string();
            assert!(err.contains(says), "{err}");
            assert!(err.contains(&path.display().to_string()), "{err}");
        }
        let err = SqliteEngine::open(SqliteOptions::memory().passphrase(PASS))
            .err()
            .ok_or("opened")?;
        assert!(err.to_string().contains("in-memory"), "{err}");
        assert_eq!(
            format!("{:?}", Key::passphrase(PASS)),
            "Key::passphrase(<redacted>)"
        );
        Ok(())
    }

    #[test]
    fn rekey_then_only_the_new_key_opens() -> Res<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("r.db");
        write_marker(SqliteOptions::file(&path).passphrase(PASS))?;
        {
            let engine = SqliteEngine::open(SqliteOptions::file(&path).passphrase(PASS))?;
            assert!(engine.is_encrypted());
            engine.rekey(Key::raw([9; 32]))?;
            // The open engine goes on with the new key.
            let n: i64 = engine
                .with_connection(|c| c.query_row("SELECT count(*) FROM Note", [], |r| r.get(0)))?;
            assert_eq!(n, 1);
        }
        refused(
            SqliteOptions::file(&path).passphrase(PASS),
            &path,
            "wrong key",
        )?;
        assert_eq!(
            read_marker(SqliteOptions::file(&path).raw_key([9; 32]))?,
            MARKER
        );
        assert!(!contains(&path, MARKER.as_bytes())?);

        let plain = dir.path().join("plain.db");
        write_marker(SqliteOptions::file(&plain))?;
        let engine = SqliteEngine::open(SqliteOptions::file(&plain))?;
        assert!(!engine.is_encrypted());
        let err = engine.rekey(Key::passphrase(PASS)).err().ok_or("rekeyed")?;
        assert!(err.to_string().contains("not encrypted"), "{err}");
        Ok(())
    }

    #[test]
    fn a_plain_file_is_encrypted_in_place() -> Res<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("p.db");
        write_marker(SqliteOptions::file(&path))?;
        assert!(contains(&path, MARKER.as_bytes())?);
        SqliteEngine::encrypt_file(&path, &Key::passphrase(PASS))?;
        assert!(!contains(&path, MARKER.as_bytes())?);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()?;
        assert_eq!(leftovers, ["p.db"]);
        refused(SqliteOptions::file(&path), &path, "encrypted")?;
        assert_eq!(
            read_marker(SqliteOptions::file(&path).passphrase(PASS))?,
            MARKER
        );
        // Twice is refused, and changes nothing.
        let before = snapshot(&path)?;
        let err = SqliteEngine::encrypt_file(&path, &Key::passphrase(PASS))
            .err()
            .ok_or("encrypted twice")?;
        assert!(err.to_string().contains("not a plain SQLite file"), "{err}");
        assert_eq!(snapshot(&path)?, before);
        Ok(())
    }

    #[test]
    fn the_backup_of_an_encrypted_file_is_encrypted_under_its_key() -> Res<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("b.db");
        let copy = dir.path().join("b.backup");
        write_marker(SqliteOptions::file(&path).raw_key([3; 32]))?;
        SqliteEngine::open(SqliteOptions::file(&path).raw_key([3; 32]))?.backup(&copy)?;
        assert!(!contains(&copy, MARKER.as_bytes())?);
        assert_eq!(
            read_marker(SqliteOptions::file(&copy).raw_key([3; 32]))?,
            MARKER
        );
        Ok(())
    }

    /// Before restore learned keys, an encrypted backup was refused as "not
    /// a SQLite database", whatever the key: it could be opened as a
    /// database by hand, never restored.
    #[test]
    fn an_encrypted_backup_is_restored_with_its_key_and_refused_without() -> Res<()> {
        let dir = tempfile::tempdir()?;
        let live = dir.path().join("live.db");
        let keyed = |p: &Path| SqliteOptions::file(p).raw_key([5; 32]);
        write_marker(keyed(&live))?;
        let engine = SqliteEngine::open(keyed(&live))?;
        for (name, gzip) in [("b.db", false), ("b.db.gz", true)] {
            let copy = dir.path().join(name);
            if gzip {
                engine.backup_gz(&copy)?;
            } else {
                engine.backup(&copy)?;
            }
            burrow_sqlite::verify_encrypted_backup(&copy, &Key::raw([5; 32]))?;
            let target = dir.path().join(format!("restored-{name}"));
            drop(SqliteEngine::open_backup(&copy, keyed(&target))?);
            assert!(!contains(&target, MARKER.as_bytes())?);
            assert_eq!(read_marker(keyed(&target))?, MARKER);

            for (options, says) in [
                (SqliteOptions::file(dir.path().join("none.db")), "encrypted"),
                (
                    SqliteOptions::file(dir.path().join("wrong.db")).raw_key([6; 32]),
                    "key",
                ),
                (SqliteOptions::memory(), "encrypted"),
            ] {
                let err = SqliteEngine::open_backup(&copy, options)
                    .err()
                    .ok_or("restored")?
                    .to_string();
                assert!(err.contains(&copy.display().to_string()), "{err}");
                assert!(err.contains(says), "{err}");
            }
            assert!(!dir.path().join("none.db").exists());
            assert!(!dir.path().join("wrong.db").exists());
            let err = burrow_sqlite::verify_backup(&copy)
                .err()
                .ok_or("verified")?;
            assert!(err.to_string().contains("encrypted"), "{err}");
        }
        Ok(())
    }

    #[test]
    fn a_live_encrypted_engine_restores_its_own_backup() -> Res<()> {
        let dir = tempfile::tempdir()?;
        let live = dir.path().join("live.db");
        let copy = dir.path().join("b.db.gz");
        let engine = Arc::new(SqliteEngine::open(
            SqliteOptions::file(&live).passphrase(PASS),
        )?);
        let db = Database::open(Model::new().with::<Note>(), engine.clone())?;
        let mut note = Note {
            id: 0,
            text: MARKER.into(),
        };
        db.add(&mut note)?;
        engine.backup_gz(&copy)?;
        note.text = "changed after the backup".into();
        db.update(&mut note)?;
        engine.restore(&copy)?;
        assert_eq!(db.retrieve::<Note>(1)?.text, MARKER);
        // A plain engine is handed the encrypted backup: refused by name.
        let plain = SqliteEngine::open(SqliteOptions::file(dir.path().join("plain.db")))?;
        let err = plain.restore(&copy).err().ok_or("restored")?.to_string();
        assert!(
            err.contains(&copy.display().to_string()) && err.contains("encrypted"),
            "{err}"
        );
        // And the encrypted engine a plain one.
        let plain_copy = dir.path().join("plain.backup");
        plain.backup(&plain_copy)?;
        let err = engine
            .restore(&plain_copy)
            .err()
            .ok_or("restored")?
            .to_string();
        assert!(err.contains("plain"), "{err}");
        assert_eq!(db.retrieve::<Note>(1)?.text, MARKER);
        Ok(())
    }

    #[test]
    fn a_damaged_encrypted_backup_is_refused() -> Res<()> {
        let dir = tempfile::tempdir()?;
        let live = dir.path().join("live.db");
        let copy = dir.path().join("b.db");
        let key = Key::raw([9; 32]);
        write_marker(SqliteOptions::file(&live).key(key.clone()))?;
        SqliteEngine::open(SqliteOptions::file(&live).key(key.clone()))?.backup(&copy)?;
        let whole = std::fs::read(&copy)?;
        let damaged = dir.path().join("damaged.db");
        // Cut at a page boundary, inside a page, and one byte changed in the
        // last page (the one holding the marker's row): each found.
        for (what, bytes) in [
            ("cut at a page", whole[..whole.len() - 4096].to_vec()),
            ("cut inside a page", whole[..whole.len() - 100].to_vec()),
            ("a byte changed", {
                let mut b = whole.clone();
                let at = b.len() - 2000;
                b[at] ^= 1;
                b
            }),
        ] {
            std::fs::write(&damaged, &bytes)?;
            let err = burrow_sqlite::verify_encrypted_backup(&damaged, &key)
                .err()
                .ok_or(what)?
                .to_string();
            assert!(err.contains("refused"), "{what}: {err}");
            let target = dir.path().join("target.db");
            assert!(
                SqliteEngine::open_backup(&damaged, SqliteOptions::file(&target).key(key.clone()))
                    .is_err(),
                "{what}"
            );
            assert!(!target.exists(), "{what}");
        }
        Ok(())
    }

    #[test]
    fn a_sha256_page_hmac_is_part_of_the_key() -> Res<()> {
        use burrow_sqlite::PageHmac;
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("h.db");
        let key = Key::raw([4; 32]).page_hmac(PageHmac::Sha256);
        write_marker(SqliteOptions::file(&path).key(key.clone()))?;
        assert!(!contains(&path, MARKER.as_bytes())?);
        assert_eq!(
            read_marker(SqliteOptions::file(&path).key(key.clone()))?,
            MARKER
        );
        // The same secret with SQLCipher's default HMAC reads no page.
        refused(
            SqliteOptions::file(&path).raw_key([4; 32]),
            &path,
            "wrong key",
        )?;
        // Backups and restores carry it with the key.
        let copy = dir.path().join("h.backup.gz");
        let engine = SqliteEngine::open(SqliteOptions::file(&path).key(key.clone()))?;
        engine.backup_gz(&copy)?;
        burrow_sqlite::verify_encrypted_backup(&copy, &key)?;
        assert!(burrow_sqlite::verify_encrypted_backup(&copy, &Key::raw([4; 32])).is_err());
        engine.restore(&copy)?;
        // A rekey keeps the HMAC: a new key with another is refused.
        let err = engine.rekey(Key::raw([8; 32])).err().ok_or("rekeyed")?;
        assert!(err.to_string().contains("HMAC"), "{err}");
        let new = Key::raw([8; 32]).page_hmac(PageHmac::Sha256);
        engine.rekey(new.clone())?;
        drop(engine);
        assert_eq!(read_marker(SqliteOptions::file(&path).key(new))?, MARKER);
        // A plain file encrypted in place with it.
        let plain = dir.path().join("p.db");
        write_marker(SqliteOptions::file(&plain))?;
        SqliteEngine::encrypt_file(&plain, &key)?;
        assert!(!contains(&plain, MARKER.as_bytes())?);
        assert_eq!(read_marker(SqliteOptions::file(&plain).key(key))?, MARKER);
        refused(
            SqliteOptions::file(&plain).raw_key([4; 32]),
            &plain,
            "wrong key",
        )?;
        Ok(())
    }
}
