//! Online backup of a live database, and restore from a backup.
//!
//! A backup runs SQLite's online backup API on the engine's own connection, a
//! few pages per step, taking the engine's lock for each step only: writers go
//! on between steps. Because the backup and the writers share one connection,
//! SQLite copies every page a writer changes into the backup as the writer
//! commits, rather than restarting the backup; when the last step ends, the
//! backup holds exactly the committed state of that moment. Steps run only
//! when no transaction is open, so no uncommitted write is ever copied.
//!
//! Files appear whole or not at all: each is written beside its target,
//! synced, renamed over it, and the folder synced.
//!
//! A restore copies the backup (ungzipped if needed) to a temporary file, then
//! checks it: the gzip stream must end cleanly with its CRC, the file must be
//! as long as its header says, and `PRAGMA integrity_check` must say `ok`.
//! Only then does it replace anything. SQLite files carry no checksum of their
//! own: damage to the structure is found, a changed byte inside a stored value
//! is not; the gzip form's CRC-32 covers every byte.
#![allow(unsafe_code)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Seek};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use burrow_core::{Error, Result};
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use rusqlite::backup::{Backup, StepResult};
use rusqlite::Connection;

use crate::{eng, schema, SqliteEngine, SqliteOptions};

#[cfg(feature = "encryption")]
use crate::Key;
/// Without the `encryption` feature no key exists: `Option<&Key>` is always
/// `None`, and the restore paths are the same code in both builds.
#[cfg(not(feature = "encryption"))]
enum Key {}

/// How a backup is taken: [`SqliteEngine::backup_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupOptions {
    pages_per_step: u32,
    pause: Duration,
    gzip: Option<u32>,
}

impl Default for BackupOptions {
    /// 1,024 pages per step (4 MiB with SQLite's default page size: a few
    /// milliseconds of the engine's lock), no pause, no compression.
    fn default() -> Self {
        BackupOptions {
            pages_per_step: 1024,
            pause: Duration::ZERO,
            gzip: None,
        }
    }
}

impl BackupOptions {
    /// Plain SQLite file, the default steps.
    pub fn new() -> Self {
        BackupOptions::default()
    }

    /// Pages copied per step, while the engine's lock is held (at least 1).
    /// Fewer pages: writers wait less, the backup takes longer.
    pub fn pages_per_step(mut self, pages: u32) -> Self {
        self.pages_per_step = pages.max(1);
        self
    }

    /// A pause between steps, the lock released, for writers to catch up.
    /// With none, the thread only yields.
    pub fn pause(mut self, pause: Duration) -> Self {
        self.pause = pause;
        self
    }

    /// Writes the backup gzip-compressed at `level` (1 fastest … 9 smallest),
    /// or plain with `None`.
    pub fn gzip(mut self, level: Option<u32>) -> Self {
        self.gzip = level.map(|l| l.clamp(1, 9));
        self
    }
}

/// How far a backup is, passed to its progress callback after each step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BackupProgress {
    /// Pages copied so far.
    pub pages_done: u64,
    /// Pages the database has now (it may grow while the backup runs).
    pub pages_total: u64,
}

/// What a finished backup wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackupSummary {
    /// Pages of the database copied.
    pub pages: u64,
    /// Steps taken (times the engine's lock was held).
    pub steps: u64,
    /// The size of the backup file, compressed or not.
    pub bytes: u64,
}

impl SqliteEngine {
    /// Writes a consistent copy of the database to `path`, a plain SQLite
    /// file, while the engine keeps serving (see [`SqliteEngine::backup_with`]).
    /// The copy of an encrypted database is encrypted under the same key
    /// (feature `encryption`): [`SqliteEngine::restore`] on the engine reads
    /// it with the engine's key, [`SqliteEngine::open_backup`] with the key
    /// of its options, `verify_encrypted_backup` with a key given; without
    /// one it is refused as encrypted.
    pub fn backup(&self, path: impl AsRef<Path>) -> Result<BackupSummary> {
        self.backup_with(path, &BackupOptions::default(), |_| {})
    }

    /// As [`SqliteEngine::backup`], gzip-compressed (level 1, the fastest).
    pub fn backup_gz(&self, path: impl AsRef<Path>) -> Result<BackupSummary> {
        self.backup_with(
            path,
            &BackupOptions::default().gzip(Some(GZIP_LEVEL)),
            |_| {},
        )
    }

    /// Writes a copy of the database to `path` as it was at one committed
    /// moment, a few pages at a time: the engine's lock is held for one step,
    /// then released for writers; a step waits for an open transaction to end,
    /// as every call on the engine does. `progress` is called after each step.
    ///
    /// `path` appears whole or not at all (written beside it, synced, renamed
    /// into place); an existing file there is replaced. A path that cannot be
    /// written is an [`Error::Io`] naming it, and the engine is not affected.
    /// The database's own file is refused as a target.
    pub fn backup_with(
        &self,
        path: impl AsRef<Path>,
        options: &BackupOptions,
        mut progress: impl FnMut(BackupProgress),
    ) -> Result<BackupSummary> {
        let path = path.as_ref();
        if let Some(own) = &self.options.path {
            if same_file(own, path) {
                return Err(Error::BadInput(format!(
                    "a backup of {} cannot replace the database itself",
                    own.display()
                )));
            }
        }
        let raw = sibling(path, ".backup-tmp");
        let done = (|| {
            let (pages, steps) = self.copy_pages(&raw, options, &mut progress)?;
            match options.gzip {
                None => {
                    sync_file(&raw)?;
                    fs::rename(&raw, path).map_err(|e| io_err(path, "cannot write", e))?;
                    sync_dir(path)?;
                }
                Some(level) => gzip_file(&raw, path, level)?,
            }
            let bytes = fs::metadata(path)
                .map_err(|e| io_err(path, "cannot read", e))?
                .len();
            Ok(BackupSummary {
                pages,
                steps,
                bytes,
            })
        })();
        let _ = fs::remove_file(&raw);
        done
    }

    /// Copies the database into a new SQLite file at `to`, step by step.
    fn copy_pages(
        &self,
        to: &Path,
        options: &BackupOptions,
        progress: &mut dyn FnMut(BackupProgress),
    ) -> Result<(u64, u64)> {
        let _ = fs::remove_file(to);
        let mut dst = Connection::open(to).map_err(|e| io_err(to, "cannot write", e))?;
        // An encrypted database's backup is encrypted under its key: SQLCipher
        // copies pages only between two plain or two keyed databases, and a
        // plain copy would put the data on disk in the clear.
        #[cfg(feature = "encryption")]
        if let Some(key) = self.current_key() {
            crate::crypt::apply_key(&dst, to, &key)?;
        }
        // The file is synced once, whole, before it is renamed into place: a
        // journal would only double the writes of a file nobody reads yet.
        dst.execute_batch("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;")
            .map_err(|e| io_err(to, "cannot write", e))?;
        let pages = i32::try_from(options.pages_per_step).unwrap_or(i32::MAX);
        let job = {
            let g = self.lock(None)?;
            // SAFETY: the connection is boxed, so its address is stable, and
            // never replaced while the engine lives; `self` is borrowed for
            // this whole call, which drops the backup (in `Job::drop`) before
            // it returns. The backup uses the source connection only inside
            // `step` and when it is finished, and both happen under the
            // engine's lock, so the connection is never used from two threads
            // at once (SQLite's multi-thread mode requires no more).
            let src: &'static Connection = unsafe { &*(&*g.conn as *const Connection) };
            Job {
                engine: self,
                backup: Some(
                    Backup::new(src, &mut dst).map_err(|e| io_err(to, "cannot write", e))?,
                ),
            }
        };
        let mut steps = 0u64;
        let mut busy_since: Option<Instant> = None;
        loop {
            let (step, p, held, contended) = {
                let (g, contended) = self.step_lock()?;
                let at = Instant::now();
                let b = job.backup.as_ref().expect("finished only on drop");
                let step = b.step(pages);
                let p = b.progress();
                drop(g);
                let step = step.map_err(|e| io_err(to, "cannot write", e))?;
                (step, p, at.elapsed(), contended)
            };
            steps += 1;
            let total = u64::try_from(p.pagecount).unwrap_or(0);
            let left = u64::try_from(p.remaining).unwrap_or(0);
            progress(BackupProgress {
                pages_done: total.saturating_sub(left),
                pages_total: total,
            });
            match step {
                StepResult::Done => {
                    drop(job);
                    drop(dst);
                    return Ok((total, steps));
                }
                StepResult::More => {
                    busy_since = None;
                    // When others use the engine, they get it four times as
                    // long as the step held it: the backup takes at most a
                    // fifth of a busy engine's time. A writer loses what the
                    // backup holds: a `synchronous=FULL` writer holds the lock
                    // through its own syncs, so the backup's share is its loss
                    // (with a third it kept 54 to 57 % plain, 39 to 61 % gzip;
                    // with a fifth 57 to 70 % and 53 to 76 %, plain backups
                    // still above 1.1 M rows/s; skipping the backup file's
                    // final sync, or syncing it after each step, changed
                    // nothing). Idle, it goes on at once.
                    let pause = if contended {
                        options.pause.max(held * BUSY_PAUSE)
                    } else {
                        options.pause
                    };
                    if pause.is_zero() {
                        thread::yield_now();
                    } else {
                        thread::sleep(pause);
                    }
                }
                // Another process holds the file: wait for it as a call would.
                _ => {
                    let since = *busy_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > self.options.busy_timeout {
                        return Err(Error::Busy {
                            engine: crate::ENGINE,
                            waited: self.options.busy_timeout,
                        });
                    }
                    thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }

    /// The engine's lock for a backup step, which must not give way to itself.
    /// Also says whether another caller held the lock when the step came.
    fn step_lock(&self) -> Result<(crate::Locked<'_>, bool)> {
        if burrow_core::driver::holding(&self.inner) {
            return Err(burrow_core::driver::nested(crate::ENGINE));
        }
        let g = match self.inner.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                self.turn.set(true);
                let g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
                self.turn.set(false);
                if g.owner.is_none() {
                    return Ok((crate::Locked::new(&self.inner, g), true));
                }
                drop(g);
                // A transaction is open: wait for it as any call does.
                return Ok((self.lock(None)?, true));
            }
        };
        if g.owner.is_none() {
            return Ok((crate::Locked::new(&self.inner, g), false));
        }
        drop(g);
        Ok((self.lock(None)?, true))
    }

    /// Replaces the whole database with the contents of `backup` (plain or
    /// gzip), while the engine is open: the backup is checked whole first
    /// (see [`verify_backup`]); a truncated or corrupted one is an
    /// [`Error::BadInput`] naming it, and nothing is changed. The tables the
    /// engine has open are brought up to their records in the copy before it
    /// replaces anything. Waits for an open transaction to end, as a call does.
    pub fn restore(&self, backup: impl AsRef<Path>) -> Result<()> {
        let backup = backup.as_ref();
        #[cfg(feature = "encryption")]
        let key = self.current_key();
        #[cfg(not(feature = "encryption"))]
        let key: Option<Key> = None;
        let tmp = Scratch(scratch_path(self.options.path.as_deref()));
        unpack(backup, &tmp.0, key.as_ref())?;
        let src = open_unpacked(backup, &tmp.0, key.as_ref())?;
        let mut g = self.lock(None)?;
        for t in &g.tables {
            schema::ensure(&src, t.table).map_err(|e| refused(backup, e.to_string()))?;
        }
        let b = Backup::new(&src, &mut g.conn).map_err(eng)?;
        // One step: the engine's lock is held anyway, and a single step
        // replaces the database in one write transaction, whole or not at all.
        b.run_to_completion(i32::MAX, Duration::ZERO, None)
            .map_err(eng)?;
        drop(b);
        // A backup's commit reaches no commit hook: the idle readers'
        // snapshots of the old contents are ended here.
        g.end_idle_snapshots();
        drop(g);
        drop(src);
        Ok(())
    }

    /// Opens an engine on the contents of `backup` (plain or gzip), checked
    /// whole first ([`verify_backup`]): a truncated or corrupted backup is an
    /// [`Error::BadInput`] naming it, and nothing is written. An encrypted
    /// backup is read with the key of `options` (a file then, encrypted under
    /// that key); without one, or with a key for a plain backup, it is refused.
    ///
    /// With a file in `options`, the checked copy replaces that file (created
    /// if missing; it must not be open, and a `-wal` or `-journal` beside it is
    /// refused: it may hold commits of the old database); the backup itself is
    /// never modified. With [`SqliteOptions::memory`], the backup is loaded
    /// into a private in-memory database.
    pub fn open_backup(backup: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteEngine> {
        let backup = backup.as_ref();
        #[cfg(feature = "encryption")]
        let key = options.key.clone();
        #[cfg(not(feature = "encryption"))]
        let key: Option<Key> = None;
        match options.path.clone() {
            Some(target) => {
                for companion in ["-wal", "-journal"] {
                    let c = sibling(&target, companion);
                    if c.exists() {
                        return Err(Error::BadInput(format!(
                            "{} is open or was not closed cleanly ({} exists): open and close it first, then restore",
                            target.display(),
                            c.display()
                        )));
                    }
                }
                let tmp = Scratch(sibling(&target, ".restore-tmp"));
                unpack(backup, &tmp.0, key.as_ref())?;
                fs::rename(&tmp.0, &target).map_err(|e| io_err(&target, "cannot write", e))?;
                sync_dir(&target)?;
                SqliteEngine::open(options)
            }
            None => {
                // Refused before anything is unpacked: SQLCipher copies pages
                // only between two encrypted databases or two plain ones.
                let engine = SqliteEngine::open(options)?;
                let tmp = Scratch(scratch_path(None));
                unpack(backup, &tmp.0, key.as_ref())?;
                let src = open_unpacked(backup, &tmp.0, key.as_ref())?;
                {
                    let mut g = engine.lock(None)?;
                    let b = Backup::new(&src, &mut g.conn).map_err(eng)?;
                    b.run_to_completion(i32::MAX, Duration::ZERO, None)
                        .map_err(eng)?;
                }
                Ok(engine)
            }
        }
    }
}

/// Checks that `backup` (plain or gzip) can be restored whole: the gzip
/// stream ends cleanly and its CRC matches, the SQLite file is as long as its
/// header says, and `PRAGMA integrity_check` says `ok`. A backup that fails is
/// an [`Error::BadInput`] naming it and saying why.
pub fn verify_backup(backup: impl AsRef<Path>) -> Result<()> {
    let tmp = Scratch(scratch_path(None));
    unpack(backup.as_ref(), &tmp.0, None)
}

/// As [`verify_backup`], for the backup of an encrypted database: it must
/// open under `key`, and besides `PRAGMA integrity_check`, SQLCipher's
/// `PRAGMA cipher_integrity_check` must find every page's HMAC intact, so
/// that a changed byte anywhere is found, gzip or not. A plain backup, or a
/// wrong key, is refused.
#[cfg(feature = "encryption")]
pub fn verify_encrypted_backup(backup: impl AsRef<Path>, key: &Key) -> Result<()> {
    let tmp = Scratch(scratch_path(None));
    unpack(backup.as_ref(), &tmp.0, Some(key))
}

/// Makes callers give way to a backup step that waits for the engine's lock.
///
/// The engine's mutex is not fair: a writer that commits in a loop takes it
/// back within microseconds of releasing it, before the woken backup thread
/// runs, so each step waited for several of its commits (measured with a
/// `synchronous=FULL` writer: 45 ms a step, the backup five times slower).
/// While a step waits, calls of the engine's own wait for it to get the lock
/// (at most `GIVE_WAY_MAX`, so that nothing can hang on it). Calls through
/// an open transaction never wait: the step is waiting for that transaction.
#[derive(Default)]
pub(crate) struct Turn {
    waiting: AtomicBool,
    m: Mutex<()>,
    cv: Condvar,
}

const GIVE_WAY_MAX: Duration = Duration::from_millis(100);

impl Turn {
    #[inline]
    pub(crate) fn give_way(&self) {
        if self.waiting.load(Ordering::Relaxed) {
            self.wait();
        }
    }

    /// Whether a backup step waits for the lock now.
    #[inline]
    pub(crate) fn wanted(&self) -> bool {
        self.waiting.load(Ordering::Relaxed)
    }

    #[cold]
    fn wait(&self) {
        let g = self.m.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = self
            .cv
            .wait_timeout_while(g, GIVE_WAY_MAX, |_| self.waiting.load(Ordering::Acquire));
    }

    fn set(&self, waiting: bool) {
        let _g = self.m.lock().unwrap_or_else(PoisonError::into_inner);
        self.waiting.store(waiting, Ordering::Release);
        if !waiting {
            self.cv.notify_all();
        }
    }
}

/// A backup in progress; dropping it finishes the backup under the engine's
/// lock, which its source connection requires.
struct Job<'e, 'd> {
    engine: &'e SqliteEngine,
    backup: Option<Backup<'static, 'd>>,
}

impl Drop for Job<'_, '_> {
    fn drop(&mut self) {
        let _g = self
            .engine
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.backup = None;
    }
}

/// A temporary file, removed when dropped (whether or not it was used).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Writes the SQLite file inside `backup` to `to`, and checks it there
/// (under `key` when the backup is encrypted).
fn unpack(backup: &Path, to: &Path, key: Option<&Key>) -> Result<()> {
    let mut file = File::open(backup).map_err(|e| io_err(backup, "cannot read", e))?;
    let mut magic = [0u8; 2];
    let n = read_up_to(&mut file, &mut magic).map_err(|e| io_err(backup, "cannot read", e))?;
    file.rewind()
        .map_err(|e| io_err(backup, "cannot read", e))?;
    let mut out = BufWriter::new(File::create(to).map_err(|e| io_err(to, "cannot write", e))?);
    if n == 2 && magic == GZIP_MAGIC {
        let mut gz = GzDecoder::new(BufReader::new(file));
        // The decoder checks the CRC-32 and length at the end of the stream;
        // a stream cut short ends in an error, never in a short file.
        io::copy(&mut gz, &mut out).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => {
                refused(backup, "truncated: the gzip stream ends early".into())
            }
            io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData => {
                refused(backup, format!("corrupted gzip stream: {e}"))
            }
            _ => io_err(to, "cannot write", e),
        })?;
        let mut rest = gz.into_inner();
        let mut extra = [0u8; 1];
        if read_up_to(&mut rest, &mut extra).map_err(|e| io_err(backup, "cannot read", e))? > 0 {
            return Err(refused(
                backup,
                "bytes after the end of the gzip stream".into(),
            ));
        }
    } else {
        io::copy(&mut file, &mut out).map_err(|e| io_err(to, "cannot write", e))?;
    }
    out.into_inner()
        .map_err(|e| io_err(to, "cannot write", e.into_error()))?
        .sync_all()
        .map_err(|e| io_err(to, "cannot write", e))?;
    check_sqlite(backup, to, key)
}

/// Opens the checked copy `file` of `backup`, under `key` if it has one.
fn open_unpacked(backup: &Path, file: &Path, key: Option<&Key>) -> Result<Connection> {
    let conn = Connection::open(file).map_err(|e| refused(backup, e.to_string()))?;
    if let Some(key) = key {
        #[cfg(feature = "encryption")]
        crate::crypt::apply_key(&conn, file, key).map_err(|e| match e {
            Error::BadInput(_) => refused(
                backup,
                "its key is not the one given (a backup taken before a rekey keeps the old key)"
                    .into(),
            ),
            e => refused(backup, format!("it cannot be read: {e}")),
        })?;
        #[cfg(not(feature = "encryption"))]
        match *key {}
    }
    Ok(conn)
}

/// Checks the SQLite file `file` unpacked from `backup`.
fn check_sqlite(backup: &Path, file: &Path, key: Option<&Key>) -> Result<()> {
    let mut f = File::open(file).map_err(|e| io_err(file, "cannot read", e))?;
    let len = f
        .metadata()
        .map_err(|e| io_err(file, "cannot read", e))?
        .len();
    let mut h = [0u8; 100];
    if read_up_to(&mut f, &mut h).map_err(|e| io_err(file, "cannot read", e))? < h.len() {
        return Err(refused(
            backup,
            format!("truncated: {len} bytes, shorter than SQLite's 100-byte header"),
        ));
    }
    let plain = &h[..16] == SQLITE_MAGIC;
    match (plain, key.is_some()) {
        (true, true) => {
            return Err(refused(
                backup,
                "a plain (unencrypted) backup where an encrypted one was expected (a key was \
                 given, or the engine is encrypted)"
                    .into(),
            ))
        }
        (false, false) => {
            return Err(refused(
                backup,
                "not a SQLite database or gzip file as is: an encrypted backup is restored \
                 with its key (burrow-sqlite's `encryption` feature)"
                    .into(),
            ))
        }
        (false, true) => {
            drop(f);
            return check_encrypted(backup, file, key);
        }
        (true, false) => {}
    }
    let be32 = |at: usize| u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    let page_size = match u16::from_be_bytes([h[16], h[17]]) {
        1 => 65536,
        s => u64::from(s),
    };
    // The header's page count is trusted only when SQLite marked it current
    // (its "version-valid-for" equals the change counter).
    let pages = u64::from(be32(28));
    if be32(92) == be32(24) && pages > 0 && len < pages * page_size {
        return Err(refused(
            backup,
            format!(
                "truncated: the header announces {pages} pages of {page_size} bytes, the file holds {len} bytes"
            ),
        ));
    }
    drop(f);
    let conn = open_unpacked(backup, file, None)?;
    integrity(backup, &conn, "PRAGMA integrity_check(20)", &["ok"])
}

/// Checks an encrypted copy: its header is ciphertext, so its length is
/// checked by the pages' HMACs (a page cut short fails its HMAC, a missing
/// one fails the structure check).
fn check_encrypted(backup: &Path, file: &Path, key: Option<&Key>) -> Result<()> {
    let conn = open_unpacked(backup, file, key)?;
    integrity(backup, &conn, "PRAGMA cipher_integrity_check", &[])?;
    integrity(backup, &conn, "PRAGMA integrity_check(20)", &["ok"])
}

/// Runs a check pragma on `conn`, which must answer `expected`.
fn integrity(backup: &Path, conn: &Connection, pragma: &str, expected: &[&str]) -> Result<()> {
    let problems = (|| -> rusqlite::Result<Vec<String>> {
        let mut st = conn.prepare(pragma)?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        rows.collect()
    })()
    .map_err(|e| refused(backup, format!("integrity check failed: {e}")))?;
    if problems != expected {
        return Err(refused(
            backup,
            format!("integrity check failed: {}", problems.join("; ")),
        ));
    }
    Ok(())
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Compresses `raw` into `path`, atomically.
fn gzip_file(raw: &Path, path: &Path, level: u32) -> Result<()> {
    let tmp = Scratch(sibling(path, ".tmp"));
    let write = || -> io::Result<()> {
        let mut src = BufReader::with_capacity(1 << 20, File::open(raw)?);
        let out = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp.0)?;
        let mut gz = GzEncoder::new(
            BufWriter::with_capacity(1 << 20, out),
            Compression::new(level),
        );
        io::copy(&mut src, &mut gz)?;
        gz.finish()?
            .into_inner()
            .map_err(|e| e.into_error())?
            .sync_all()
    };
    write().map_err(|e| io_err(path, "cannot write", e))?;
    fs::rename(&tmp.0, path).map_err(|e| io_err(path, "cannot write", e))?;
    sync_dir(path)
}

/// `path` with `suffix` added to its file name.
pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// A fresh temporary file name: beside the database when it has a file (the
/// same file system, room for the same size), else in the system's folder.
fn scratch_path(beside: Option<&Path>) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "burrow-restore-{}-{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    match beside {
        Some(p) => p.with_file_name(name),
        None => std::env::temp_dir().join(name),
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

pub(crate) fn sync_file(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_err(path, "cannot write", e))
}

/// Syncs the folder of `path`, so that a rename into it is durable.
pub(crate) fn sync_dir(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        File::open(dir)
            .and_then(|f| f.sync_all())
            .map_err(|e| io_err(path, "cannot sync the folder of", e))?;
    }
    #[cfg(not(unix))]
    let _ = path; // NTFS journals the rename itself.
    Ok(())
}

fn io_err(path: &Path, what: &str, e: impl std::fmt::Display) -> Error {
    Error::Io(io::Error::other(format!("{what} {}: {e}", path.display())))
}

fn refused(backup: &Path, why: String) -> Error {
    Error::BadInput(format!(
        "backup {} refused, nothing restored: {why}",
        backup.display()
    ))
}

/// How many times as long as a step held the engine's lock the backup
/// pauses when others were waiting for it (see `copy_pages`).
const BUSY_PAUSE: u32 = 4;

/// The gzip level of [`SqliteEngine::backup_gz`]: the fastest, as a backup
/// competes with the engine's writers for the cores.
const GZIP_LEVEL: u32 = 1;

/// Backups over a server's admin interface: as [`SqliteEngine::backup`] or
/// [`SqliteEngine::backup_gz`], progress in pages.
impl burrow_core::OnlineBackup for SqliteEngine {
    fn backup_to(
        &self,
        path: &Path,
        gzip: bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<u64> {
        let options = BackupOptions::default().gzip(gzip.then_some(GZIP_LEVEL));
        let summary =
            self.backup_with(path, &options, |p| progress(p.pages_done, p.pages_total))?;
        Ok(summary.bytes)
    }
}
