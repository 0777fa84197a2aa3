//! Encrypted database files (the `encryption` feature): keys, rekeying, and
//! encrypting a plain file.
//!
//! Keys reach SQLCipher through `sqlite3_key_v2` / `sqlite3_rekey_v2` and
//! bound parameters of `ATTACH … KEY ?`, never as SQL text, so no key can
//! change a statement. A raw key is handed over in SQLCipher's `x'<64 hex>'`
//! form, which it recognises and uses without derivation; a passphrase of
//! that shape would be taken for a raw key, so it is refused.

use std::ffi::CStr;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use burrow_core::{Error, Result};
use rusqlite::{Connection, ErrorCode};

use crate::backup::{sibling, sync_dir, sync_file};
use crate::{eng, read_header, Header, SqliteEngine};

/// The key of an encrypted database file: a passphrase, from which SQLCipher
/// derives the AES-256 key (PBKDF2-HMAC-SHA512, 256,000 iterations, salted
/// per file), or a raw 256-bit key used as is; with it, the HMAC that
/// authenticates each page ([`PageHmac`]), part of how the file is read.
/// Its `Debug` form shows which kind it is, never the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Key {
    secret: Secret,
    hmac: PageHmac,
}

/// The HMAC that authenticates each page of an encrypted file. A file is
/// read with the one it was written with: any other fails every page's
/// check, and the open is refused as a wrong key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PageHmac {
    /// HMAC-SHA512, SQLCipher 4's default: its shell and other bindings
    /// open the file with `PRAGMA key` alone.
    #[default]
    Sha512,
    /// HMAC-SHA256: as strong for page authentication (a 256-bit tag), and
    /// faster on processors with SHA extensions, where OpenSSL computes
    /// SHA-256 in hardware (2.4 times SHA-512's speed on 4 KiB here; see the
    /// README for what it gains). Other SQLCipher tools need
    /// `PRAGMA cipher_hmac_algorithm = HMAC_SHA256` after the key.
    Sha256,
}

impl PageHmac {
    /// SQLCipher's name for it.
    fn pragma(self) -> &'static str {
        match self {
            PageHmac::Sha512 => "HMAC_SHA512",
            PageHmac::Sha256 => "HMAC_SHA256",
        }
    }
}

#[derive(Clone, PartialEq, Eq)]
enum Secret {
    Passphrase(String),
    Raw([u8; 32]),
}

impl Key {
    /// A passphrase (checked when used: not empty, not of the form `x'…'`).
    pub fn passphrase(passphrase: impl Into<String>) -> Key {
        Key {
            secret: Secret::Passphrase(passphrase.into()),
            hmac: PageHmac::default(),
        }
    }

    /// A raw 256-bit AES key.
    pub fn raw(key: [u8; 32]) -> Key {
        Key {
            secret: Secret::Raw(key),
            hmac: PageHmac::default(),
        }
    }

    /// The same key with pages authenticated by `hmac` (default
    /// [`PageHmac::Sha512`]).
    pub fn page_hmac(mut self, hmac: PageHmac) -> Key {
        self.hmac = hmac;
        self
    }

    /// The bytes SQLCipher takes as key material, or why this key is refused
    /// for `file`. The caller wipes them after use ([`wipe`]).
    pub(crate) fn material(&self, file: &Path) -> Result<Vec<u8>> {
        match &self.secret {
            Secret::Passphrase(p) if p.is_empty() => Err(Error::BadInput(format!(
                "{}: an empty passphrase would leave the file unencrypted; nothing was changed",
                file.display()
            ))),
            Secret::Passphrase(p) if looks_raw(p) => Err(Error::BadInput(format!(
                "{}: a passphrase of the form x'…' would be taken for a raw key; use Key::raw \
                 for a raw key, or another passphrase; nothing was changed",
                file.display()
            ))),
            Secret::Passphrase(p) => Ok(p.as_bytes().to_vec()),
            Secret::Raw(k) => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let mut m = Vec::with_capacity(3 + 64);
                m.extend_from_slice(b"x'");
                for b in k {
                    m.push(HEX[usize::from(b >> 4)]);
                    m.push(HEX[usize::from(b & 15)]);
                }
                m.push(b'\'');
                Ok(m)
            }
        }
    }
}

/// SQLCipher reads key material starting with `x'` (any case) and ending
/// with `'` as hex; refusing every such passphrase is simpler to state than
/// its exact lengths and alphabet.
fn looks_raw(p: &str) -> bool {
    let b = p.as_bytes();
    b.len() >= 3 && (b[0] == b'x' || b[0] == b'X') && b[1] == b'\'' && b[b.len() - 1] == b'\''
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.secret {
            Secret::Passphrase(_) => "Key::passphrase(<redacted>)",
            Secret::Raw(_) => "Key::raw(<redacted>)",
        })?;
        if self.hmac != PageHmac::default() {
            write!(f, ".page_hmac({:?})", self.hmac)?;
        }
        Ok(())
    }
}

impl Drop for Key {
    /// Best effort: copies made by `Clone`, or by a `String` that grew,
    /// are beyond reach.
    fn drop(&mut self) {
        match &mut self.secret {
            Secret::Passphrase(p) => wipe(std::mem::take(p).into_bytes()),
            Secret::Raw(k) => {
                k.fill(0);
                std::hint::black_box(k);
            }
        }
    }
}

/// Overwrites key material before its memory is freed.
pub(crate) fn wipe(mut bytes: Vec<u8>) {
    bytes.fill(0);
    std::hint::black_box(&bytes);
}

/// Keys a connection just opened on `file` and checks that the key opens it.
/// Only reads: a wrong key leaves the file as it was.
pub(crate) fn apply_key(conn: &Connection, file: &Path, key: &Key) -> Result<()> {
    // SQLCipher writes its own errors to stderr by default (an "hmac check
    // failed" line per wrong-key attempt); Burrow reports them as errors, so
    // its log goes off, once per process, leaving an application free to turn
    // it back on (`PRAGMA cipher_log`).
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| {
        let _ = conn.query_row("PRAGMA cipher_log = off", [], |_| Ok(()));
    });
    let m = key.material(file)?;
    let keyed = conn.key(None::<&CStr>, &m, false);
    wipe(m);
    keyed.map_err(eng)?;
    // Set between the key and the first read, which is when SQLCipher
    // settles how the file's pages are read.
    if key.hmac != PageHmac::default() {
        conn.execute_batch(&format!(
            "PRAGMA cipher_hmac_algorithm = {}",
            key.hmac.pragma()
        ))
        .map_err(eng)?;
    }
    match conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
        r.get::<_, i64>(0)
    }) {
        Ok(_) => Ok(()),
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::NotADatabase) => {
            Err(Error::BadInput(format!(
                "{}: wrong key (or another page HMAC, or not a SQLite database); nothing was changed",
                file.display()
            )))
        }
        Err(e) => Err(eng(e)),
    }
}

impl SqliteEngine {
    /// Whether the database is an encrypted file (opened with a key).
    pub fn is_encrypted(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .key
            .is_some()
    }

    /// Changes the key of the open encrypted file to `key`: every page is
    /// rewritten under the new key in one transaction (all or nothing; it
    /// waits for an open transaction to end, as any call does). Time grows
    /// with the file's size. Reopen with the new key afterwards; the old one
    /// no longer opens it. A file opened without a key is refused (encrypt it
    /// with [`SqliteEngine::encrypt_file`]).
    pub fn rekey(&self, key: Key) -> Result<()> {
        let file = self.options.path.clone().unwrap_or_default();
        let mut g = self.lock(None)?;
        if g.key.is_none() {
            return Err(Error::BadInput(format!(
                "{}: not encrypted, so it cannot be rekeyed; encrypt it with \
                 SqliteEngine::encrypt_file while it is closed",
                file.display()
            )));
        }
        if g.key.as_ref().map(|k| k.hmac) != Some(key.hmac) {
            return Err(Error::BadInput(format!(
                "{}: a rekey keeps the file's page HMAC; give the new key the same \
                 PageHmac (nothing was changed)",
                file.display()
            )));
        }
        // Readers keyed with the old key could not read a page written
        // under the new one: all are closed, and kept from reopening until
        // the new key is theirs.
        let _closed = self.readers.as_ref().map(|r| r.close_all());
        let m = key.material(&file)?;
        let done = g.conn.key(None::<&CStr>, &m, true);
        wipe(m);
        done.map_err(eng)?;
        if let Some(r) = &self.readers {
            r.set_key(Some(key.clone()));
        }
        g.key = Some(key);
        Ok(())
    }

    /// The key of the open file, for a backup written under the same key.
    pub(crate) fn current_key(&self) -> Option<Key> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .key
            .clone()
    }

    /// Encrypts the plain SQLite file at `path` under `key`, in place. The
    /// file must not be open, by this process or another. Its content is
    /// copied by SQLCipher's `sqlcipher_export` into a new encrypted file
    /// beside it, which is checked (`PRAGMA integrity_check` under the key),
    /// synced, and renamed over the original: at every moment `path` is the
    /// whole plain file or the whole encrypted one. Needs free space for a
    /// copy. The plain bytes the old file held stay on the disk's free
    /// blocks until overwritten; that is beyond a program's reach.
    pub fn encrypt_file(path: impl AsRef<Path>, key: &Key) -> Result<()> {
        let path = path.as_ref();
        match read_header(path)? {
            Header::Plain => {}
            Header::Missing => {
                return Err(Error::BadInput(format!(
                    "{}: no such database to encrypt",
                    path.display()
                )))
            }
            Header::Other => {
                return Err(Error::BadInput(format!(
                    "{}: not a plain SQLite file (already encrypted, or not a database); \
                     nothing was changed",
                    path.display()
                )))
            }
        }
        let m = key.material(path)?;
        // Absolute, so that SQLite cannot read the name as a `file:` URI.
        let tmp = std::path::absolute(sibling(path, ".encrypt-tmp"))
            .map_err(|e| Error::Io(std::io::Error::other(e)))?;
        let done = export(path, &tmp, &m, key.hmac);
        wipe(m);
        let done = done.and_then(|()| {
            let check = Connection::open(&tmp).map_err(eng)?;
            apply_key(&check, &tmp, key)?;
            let ok: String = check
                .query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .map_err(eng)?;
            drop(check);
            if ok != "ok" {
                return Err(Error::engine(
                    crate::ENGINE,
                    format!(
                        "the encrypted copy of {} fails its check: {ok}",
                        path.display()
                    ),
                ));
            }
            sync_file(&tmp)?;
            fs::rename(&tmp, path).map_err(Error::Io)?;
            sync_dir(path)
        });
        if done.is_err() {
            for suffix in ["", "-journal"] {
                let _ = fs::remove_file(sibling(&tmp, suffix));
            }
        }
        done
    }
}

/// Copies the plain file `from` into a new file `to` encrypted under the key
/// material `m`.
fn export(from: &Path, to: &PathBuf, m: &[u8], hmac: PageHmac) -> Result<()> {
    let _ = fs::remove_file(to);
    let to_text = to.to_str().ok_or_else(|| {
        Error::BadInput(format!("{}: the folder's name is not UTF-8", to.display()))
    })?;
    let conn = Connection::open(from).map_err(eng)?;
    conn.execute(
        "ATTACH DATABASE ?1 AS burrow_encrypted KEY ?2",
        (to_text, m),
    )
    .map_err(eng)?;
    if hmac != PageHmac::default() {
        conn.execute_batch(&format!(
            "PRAGMA burrow_encrypted.cipher_hmac_algorithm = {}",
            hmac.pragma()
        ))
        .map_err(eng)?;
    }
    conn.query_row(
        "SELECT sqlcipher_export('burrow_encrypted')",
        [],
        |_| Ok(()),
    )
    .map_err(eng)?;
    conn.execute_batch("DETACH DATABASE burrow_encrypted")
        .map_err(eng)?;
    drop(conn);
    // Closing the last connection checkpoints and removes a WAL; one left
    // behind (another process has the file open) would be replayed onto the
    // encrypted file and break it.
    let wal = sibling(from, "-wal");
    if fs::metadata(&wal).is_ok_and(|w| w.len() > 0) {
        return Err(Error::BadInput(format!(
            "{}: still open elsewhere (its -wal file remains); nothing was changed",
            from.display()
        )));
    }
    Ok(())
}
