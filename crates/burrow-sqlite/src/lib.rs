//! Burrow's embedded SQLite engine.
//!
//! SQLite is compiled in (the `bundled` build of `rusqlite`): no system library
//! is needed. A database is a file or private memory; [`SqliteOptions`] sets the
//! speed options, each documented with what it risks. The defaults are the safe
//! ones: `synchronous=FULL`, rollback journal, shared locking.
//!
//! # Concurrency
//!
//! One writer connection behind a mutex. Every call locks it for the duration
//! of one statement (or one batch run), so calls from many threads are safe and
//! each is atomic. A transaction is a value, [`SqliteTx`], handed out by
//! [`Storage::begin`]: calls made through it run inside it, from any thread;
//! writes made on the engine while it is open wait for it to end, at most the
//! [`SqliteOptions::busy_timeout`] ([`burrow_core::Error::Busy`]). SQLite
//! serialises writers anyway, and an in-process call takes about a microsecond,
//! so the lock is held only briefly.
//!
//! On a file in WAL mode, reads made on the engine (not through a
//! transaction) that find the connection taken run on a pool of read-only
//! connections instead ([`SqliteOptions::readers`], which also says what a
//! read sees): threads read side by side, and a read never waits for the
//! writer or an open transaction; it sees the last commit. In memory and in rollback-journal
//! mode everything runs on the one connection, so reads from several threads
//! take turns. The benchmark measures both (its concurrent-read table).
//!
//! # Storage
//!
//! Each table has an `ID INTEGER PRIMARY KEY` (the rowid) and one column per
//! field, typed as [`burrow_core::FieldKind`] documents. Tables and indexes are
//! created on open; a field added to a record becomes a column added to the
//! table, existing rows getting the type's zero value; a column whose stored
//! type disagrees with the record is a [`burrow_core::Error::Schema`].
//!
//! # Encryption
//!
//! With the `encryption` feature, SQLCipher replaces SQLite (for the whole
//! build: cargo unifies features) and `SqliteOptions::passphrase` or
//! `SqliteOptions::raw_key` open a file encrypted with AES-256, each page
//! authenticated (HMAC-SHA512). `SqliteEngine::rekey` changes the key;
//! `SqliteEngine::encrypt_file` encrypts a plain file in place. A wrong
//! key, a missing one, or a key for a plain file is refused by name before
//! anything is written. Reads cost nothing measurable; writes roughly half
//! the plain speed in bulk, a fifth for one-row commits (the README has the
//! figures, what `Key::page_hmac` gains, and what encryption does not
//! protect).
//!
//! # Backup and restore
//!
//! [`SqliteEngine::backup`] (and [`SqliteEngine::backup_gz`],
//! [`SqliteEngine::backup_with`] for step size and progress) copies a live
//! database with SQLite's online backup API, a step at a time, so writers
//! go on between steps; the copy is the committed state at the moment the
//! last step ends. [`SqliteEngine::open_backup`] and [`SqliteEngine::restore`]
//! load a backup, plain or gzip, only after checking it whole
//! ([`verify_backup`]): a truncated or corrupted one is refused, naming it.
//! The backup of an encrypted database is encrypted under its key and is
//! restored with it (feature `encryption`).
//! `docs/backup.md` has the details and measured figures.
//!
//! Inside: `statements` holds the SQL text of one table, built when the table
//! is opened; `schema` creates tables and brings existing ones up to the
//! record; `hot` keeps prepared statements across calls; `vtab` shows tables
//! of other engines to SQL, and `scan` reads a large one on a worker beside
//! the SQL consuming it. The external layer (`burrow-sql`) writes its
//! statements with [`statements::TableNames`] and its SQLite columns and
//! indexes with [`schema`], so each is written once for both engines.

mod backup;
mod cells;
#[cfg(feature = "encryption")]
mod crypt;
mod hot;
mod options;
mod raw;
mod readers;
mod scan;
pub mod schema;
mod snapshots;
pub mod statements;
mod vtab;
pub mod walvfs;

use std::borrow::Cow;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use burrow_core::chrono::{DateTime, Utc};
use burrow_core::datetime::{write_date, write_datetime, DATETIME_BUF};
use burrow_core::driver::{apply_each, next_tx_token};
use burrow_core::{
    BatchItem, BatchOp, BatchResult, Caps, Column, EngineTx, Error, FieldKind, Fields, Filter,
    Result, Row, RowOps, Select, SqlHost, Storage, Table, Value, ValueRef,
};
use rusqlite::types::{ToSqlOutput, ValueRef as SqlValue};
use rusqlite::{Connection, OpenFlags, Statement};

#[cfg(feature = "encryption")]
pub use backup::verify_encrypted_backup;
pub use backup::{verify_backup, BackupOptions, BackupProgress, BackupSummary};
#[cfg(feature = "encryption")]
pub use crypt::{Key, PageHmac};
pub use hot::{configure_library, widen_lookaside, KeptConnection, KeptStatement};
pub use options::{LockingMode, SqliteOptions, Synchronous};
pub use raw::{InPlace, RawStmt, Rows};
pub use rusqlite;

use hot::Hot;
use raw::Kept;
use statements::TableSql;

const ENGINE: &str = "sqlite";

/// The SQLite storage engine. Share it as `Arc<SqliteEngine>`.
pub struct SqliteEngine {
    /// The reader connections of a WAL file (see [`SqliteOptions::readers`]);
    /// declared before `inner` so that they close first, leaving the writer
    /// the last connection, the one that checkpoints the log on close.
    readers: Option<Arc<readers::Readers>>,
    inner: Mutex<Inner>,
    /// Signalled when a transaction ends, waking threads that wait for it.
    tx_ended: Condvar,
    options: SqliteOptions,
    /// Tables of other engines this connection's SQL can see.
    exposed: Arc<vtab::Registry>,
    /// Lets a backup's next step go before the callers arriving after it.
    turn: backup::Turn,
}

struct Inner {
    /// Kept statements, one per table of `tables`; declared before `conn` so that
    /// they are finalized first (the contract of [`Hot`]).
    hot: Vec<Hot>,
    /// The table reads' statements, by SQL text; before `conn` for the same
    /// reason.
    kept: Kept,
    tables: Vec<TableSql>,
    /// Boxed so that the kept statements' pointer to it stays valid.
    conn: Box<Connection>,
    /// The commit hook of a WAL file (see [`snapshots`]); declared after
    /// `conn`, which calls it until it closes.
    hook: Option<snapshots::CommitHook>,
    /// The token of the open transaction ([`SqliteTx`]), if any.
    owner: Option<u64>,
    /// The last date-time written as text: a record's creation and modification
    /// times, and every row of a batch, share one instant.
    last_time: TimeText,
    /// The text of an insert's dates, bound in place.
    dates: DateTexts,
    /// The key of an encrypted file: kept here rather than in the options, so
    /// that a rekey replaces the only copy.
    #[cfg(feature = "encryption")]
    key: Option<Key>,
}

// SAFETY: `Inner` owns its connection and the statements that borrow it (see
// `Hot`); it is only reached through the engine's mutex, so they move between
// threads together and are never used from two threads at once, which SQLite's
// multi-thread mode (rusqlite's default open flags) allows.
#[allow(unsafe_code)]
unsafe impl Send for Inner {}

/// The text form of the last date-time written: a record's creation and
/// modification times are mostly one instant, and rows of a batch share it,
/// so it is written once for all of them.
pub struct TimeText {
    at: Option<DateTime<Utc>>,
    buf: [u8; DATETIME_BUF],
    len: usize,
}

impl Default for TimeText {
    fn default() -> Self {
        TimeText {
            at: None,
            buf: [0; DATETIME_BUF],
            len: 0,
        }
    }
}

impl TimeText {
    /// `t` as the ISO text SQLite stores.
    pub fn text(&mut self, t: DateTime<Utc>) -> &[u8] {
        if self.at != Some(t) {
            self.len = write_datetime(t, &mut self.buf).len();
            self.at = Some(t);
        }
        &self.buf[..self.len]
    }
}

impl SqliteEngine {
    /// Opens (or creates) a database with these options.
    pub fn open(options: SqliteOptions) -> Result<Self> {
        #[cfg(feature = "encryption")]
        let (options, key) = {
            let mut options = options;
            let key = options.key.take();
            (options, key)
        };
        #[cfg(feature = "encryption")]
        let keyed = key.is_some();
        #[cfg(not(feature = "encryption"))]
        let keyed = false;
        let vfs = (options.one_process && cfg!(unix)).then_some("unix-excl");
        configure_library();
        let conn = match &options.path {
            Some(p) => {
                check_header(p, keyed)?;
                // The one connection that writes the log writes it through
                // `walvfs`, over the VFS the options chose.
                match walvfs::over(vfs).or(vfs) {
                    Some(vfs) => Connection::open_with_flags_and_vfs(p, OpenFlags::default(), vfs),
                    None => Connection::open(p),
                }
            }
            None if keyed => {
                return Err(Error::BadInput(
                    "an in-memory database cannot be encrypted: give a file".into(),
                ))
            }
            None => Connection::open_in_memory(),
        }
        .map_err(eng)?;
        #[cfg(feature = "encryption")]
        if let (Some(k), Some(p)) = (&key, &options.path) {
            crypt::apply_key(&conn, p, k)?;
        }
        tune(&conn, options.busy_timeout, options.cache_size_kib)?;
        let sync = match options.synchronous {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
            Synchronous::Off => "OFF",
        };
        let locking = match options.locking_mode {
            LockingMode::Normal => "NORMAL",
            LockingMode::Exclusive => "EXCLUSIVE",
        };
        let mut pragmas = format!("PRAGMA synchronous={sync}; PRAGMA locking_mode={locking};");
        if options.path.is_some() {
            pragmas.push_str(if options.wal {
                "PRAGMA journal_mode=WAL;"
            } else {
                "PRAGMA journal_mode=DELETE;"
            });
        }
        conn.execute_batch(&pragmas).map_err(eng)?;
        let exposed = Arc::new(vtab::Registry::default());
        conn.create_module(vtab::MODULE, &vtab::BURROW_MODULE, Some(exposed.clone()))
            .map_err(eng)?;
        // Readers need what SQLite made of the options, not the options: a
        // file it really put in WAL mode (a memory database, or one opened
        // through a `mode=memory` URI, refuses it, and each reader would open
        // a database of its own), under the absolute name it resolved (a
        // reader opened later must not follow a change of directory).
        let wal_file = match options.path.is_some() && options.wal {
            true => {
                let mode: String = conn
                    .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                    .map_err(eng)?;
                conn.path()
                    .filter(|p| !p.is_empty() && mode.eq_ignore_ascii_case("wal"))
                    .map(std::path::PathBuf::from)
            }
            false => None,
        };
        // Every WAL file gets the commit hook, readers or not: its commits
        // end the idle snapshots of other engines' readers of the file.
        let file = wal_file
            .as_deref()
            .and_then(|p| snapshots::SameFile::of(p).ok());
        let hook_file = file.clone();
        let readers = match wal_file {
            Some(p)
                if options.locking_mode == LockingMode::Normal && options.readers != Some(0) =>
            {
                // Snapshots are kept only where no other process can commit
                // (its commits would reach no hook here; see `snapshots`).
                let keep = file.filter(|_| vfs.is_some());
                let pool = Arc::new(readers::Readers::new(
                    options.readers.unwrap_or_else(readers::default_count),
                    p,
                    vfs,
                    options.busy_timeout,
                    options.cache_size_kib,
                    #[cfg(feature = "encryption")]
                    key.clone(),
                    keep.clone(),
                ));
                if let Some(f) = &keep {
                    f.add_pool(&pool);
                }
                Some(pool)
            }
            _ => None,
        };
        // Set last: nothing between here and `Inner` can fail, so the hook's
        // state is never dropped while the connection still calls it.
        let hook = hook_file.map(|f| snapshots::CommitHook::set(&conn, f, options.busy_timeout));
        Ok(SqliteEngine {
            readers,
            exposed,
            inner: Mutex::new(Inner {
                hot: Vec::new(),
                kept: Kept::default(),
                tables: Vec::new(),
                conn: Box::new(conn),
                hook,
                owner: None,
                last_time: TimeText::default(),
                dates: DateTexts::default(),
                #[cfg(feature = "encryption")]
                key,
            }),
            tx_ended: Condvar::new(),
            turn: backup::Turn::default(),
            options,
        })
    }

    /// A private in-memory database.
    pub fn memory() -> Result<Self> {
        SqliteEngine::open(SqliteOptions::memory())
    }

    /// The options it was opened with.
    pub fn options(&self) -> &SqliteOptions {
        &self.options
    }

    /// The version of the SQLite library compiled in.
    pub fn sqlite_version() -> &'static str {
        rusqlite::version()
    }

    /// Runs `f` on the connection, under the engine's lock, outside any
    /// transaction (it waits for an open one, as every engine call does): for
    /// SQL the ORM does not speak, such as reports and maintenance. Bind
    /// values; never splice them. [`SqliteTx::with_connection`] runs inside
    /// a transaction.
    ///
    /// On a WAL file, the readers ([`SqliteOptions::readers`]) keep no
    /// snapshot between reads while `f` runs, so a `PRAGMA
    /// wal_checkpoint(TRUNCATE)` there waits only for the reads under way;
    /// a `PRAGMA wal_autocheckpoint=N` or `PRAGMA busy_timeout=N` is kept
    /// (a commit's waiting checkpoint sets the latter back after lowering
    /// it). Taking the file out of WAL
    /// mode needs every connection but this one closed: once a reader has
    /// opened, it fails with "database is locked".
    pub fn with_connection<R>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<R>,
    ) -> Result<R> {
        let g = self.lock(None)?;
        g.around_own_use(f)
    }

    /// Locks the connection for a call of transaction `tx`, or, for `None`,
    /// for a call of its own once no transaction is open (waiting for one at
    /// most the busy timeout).
    fn lock(&self, tx: Option<u64>) -> Result<Locked<'_>> {
        if tx.is_none() && burrow_core::driver::waits_refused() {
            return self.lock_now();
        }
        if burrow_core::driver::holding(&self.inner) {
            return Err(burrow_core::driver::nested(ENGINE));
        }
        if tx.is_none() {
            self.turn.give_way();
        }
        let g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match (tx, g.owner) {
            (None, None) => Ok(Locked::new(&self.inner, g)),
            (Some(t), Some(o)) if t == o => Ok(Locked::new(&self.inner, g)),
            (Some(_), _) => Err(Error::Transaction("the transaction has ended")),
            (None, Some(_)) => {
                let waited = self.options.busy_timeout;
                let (g, timeout) = self
                    .tx_ended
                    .wait_timeout_while(g, waited, |g| g.owner.is_some())
                    .unwrap_or_else(PoisonError::into_inner);
                if timeout.timed_out() && g.owner.is_some() {
                    return Err(Error::Busy {
                        engine: ENGINE,
                        waited,
                    });
                }
                Ok(Locked::new(&self.inner, g))
            }
        }
    }
}

/// The writer's connection, locked, and marked as held by this thread for as
/// long as the guard lives: a row callback of a read on it, or the closure
/// of `with_connection`, that calls the engine again gets an error at once
/// rather than waiting for its own thread ([`burrow_core::driver::Holding`]).
pub(crate) struct Locked<'a> {
    // Declared before the guard: unmarked before the mutex is released.
    _mark: burrow_core::driver::Holding,
    g: MutexGuard<'a, Inner>,
}

impl<'a> Locked<'a> {
    #[inline]
    pub(crate) fn new(lock: &Mutex<Inner>, g: MutexGuard<'a, Inner>) -> Self {
        Locked {
            _mark: burrow_core::driver::Holding::new(lock),
            g,
        }
    }
}

impl std::ops::Deref for Locked<'_> {
    type Target = Inner;
    #[inline]
    fn deref(&self) -> &Inner {
        &self.g
    }
}

impl std::ops::DerefMut for Locked<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Inner {
        &mut self.g
    }
}

impl SqliteEngine {
    /// Locks the connection for a call of its own if that needs no wait:
    /// no transaction open, no backup step waiting for its turn, the mutex
    /// free; else refuses (see [`burrow_core::driver::without_waiting`]).
    fn lock_now(&self) -> Result<Locked<'_>> {
        if burrow_core::driver::holding(&self.inner) {
            return Err(burrow_core::driver::nested(ENGINE));
        }
        if self.turn.wanted() {
            return Err(burrow_core::driver::refuse(ENGINE));
        }
        let g = burrow_core::driver::taken_now(self.inner.try_lock(), ENGINE)?;
        if g.owner.is_some() {
            return Err(burrow_core::driver::refuse(ENGINE));
        }
        Ok(Locked::new(&self.inner, g))
    }
}

/// What the first bytes of a database file say.
#[cfg_attr(not(feature = "encryption"), allow(dead_code))]
enum Header {
    /// No file, or an empty one: a new database.
    Missing,
    /// A plain SQLite database.
    Plain,
    /// Anything else: encrypted, or not a database.
    Other,
}

fn read_header(path: &std::path::Path) -> Result<Header> {
    use std::io::Read;
    const MAGIC: &[u8; 16] = b"SQLite format 3\0";
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Header::Missing),
        Err(e) => {
            return Err(Error::Io(std::io::Error::other(format!(
                "cannot read {}: {e}",
                path.display()
            ))))
        }
    };
    let mut h = [0u8; 16];
    let mut n = 0;
    while n < h.len() {
        match f.read(&mut h[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(Error::Io(std::io::Error::other(format!(
                    "cannot read {}: {e}",
                    path.display()
                ))))
            }
        }
    }
    Ok(match n {
        0 => Header::Missing,
        _ if &h == MAGIC => Header::Plain,
        _ => Header::Other,
    })
}

/// Refuses, before anything is opened or written, a file whose kind does not
/// match the options: SQLite would only say "file is not a database", later
/// and without naming the file, and SQLCipher given a key for a plain file
/// says the same.
fn check_header(path: &std::path::Path, keyed: bool) -> Result<Header> {
    match read_header(path)? {
        Header::Other if !keyed => Err(Error::BadInput(format!(
            "{} is not a plain SQLite database: it is encrypted (open it with its key, \
             which needs burrow-sqlite's `encryption` feature) or not a database at all; \
             nothing was changed",
            path.display()
        ))),
        Header::Plain if keyed => Err(Error::BadInput(format!(
            "{} is a plain (unencrypted) SQLite database but a key was given; nothing was \
             changed: open it without a key, or encrypt it first (SqliteEngine::encrypt_file)",
            path.display()
        ))),
        h => Ok(h),
    }
}

/// What every connection of an engine, the writer's and the readers', is
/// set to: wider lookaside, room for the statements it keeps, the lock
/// timeout and the page cache size.
fn tune(
    conn: &Connection,
    busy_timeout: std::time::Duration,
    cache_size_kib: Option<u32>,
) -> Result<()> {
    hot::widen_lookaside(conn).map_err(eng)?;
    conn.set_prepared_statement_cache_capacity(128);
    conn.busy_timeout(busy_timeout).map_err(eng)?;
    if let Some(kib) = cache_size_kib {
        conn.execute_batch(&format!("PRAGMA cache_size=-{kib};"))
            .map_err(eng)?;
    }
    Ok(())
}

// Out of line: every cell read maps its (rare) error with it.
#[cold]
#[inline(never)]
fn eng(e: rusqlite::Error) -> Error {
    Error::engine(ENGINE, e)
}

/// Maps a failed write to an error a caller can match on.
fn write_err(table: &Table, e: rusqlite::Error) -> Error {
    const CONSTRAINT_PRIMARYKEY: i32 = 1555;
    const CONSTRAINT_UNIQUE: i32 = 2067;
    const CONSTRAINT_NOTNULL: i32 = 1299;
    match &e {
        rusqlite::Error::SqliteFailure(f, msg) => match f.extended_code {
            CONSTRAINT_PRIMARYKEY | CONSTRAINT_UNIQUE => Error::UniqueViolation {
                table: table.name.to_owned(),
                detail: msg.clone().unwrap_or_else(|| f.to_string()),
            },
            CONSTRAINT_NOTNULL => Error::BadInput(format!(
                "{}: {}",
                table.name,
                msg.clone().unwrap_or_else(|| f.to_string())
            )),
            _ => eng(e),
        },
        rusqlite::Error::ToSqlConversionFailure(why) => {
            Error::BadInput(format!("{}: {why}", table.name))
        }
        _ => eng(e),
    }
}

/// `v` as the SQLite engine stores it: currency as 1/10,000 integers, booleans
/// as 0 and 1, dates and date-times as ISO text written into `buf`. NaN is
/// refused rather than lost (SQLite would store it as NULL). The external SQL
/// layer's SQLite and the virtual tables store values the same way, so a file
/// or a scan reads alike through every path.
#[inline]
pub fn stored<'a>(
    v: &'a ValueRef<'_>,
    buf: &'a mut [u8; DATETIME_BUF],
) -> rusqlite::Result<SqlValue<'a>> {
    Ok(match v {
        ValueRef::Date(d) => SqlValue::Text(write_date(*d, buf).as_bytes()),
        ValueRef::DateTime(t) => SqlValue::Text(write_datetime(*t, buf).as_bytes()),
        v => return stored_in_place(v),
    })
}

/// `v` as [`stored`] stores it, for every kind but dates and date-times
/// (those are text [`DateTexts`] or a buffer holds): borrowed from `v`.
#[inline]
fn stored_in_place<'a>(v: &'a ValueRef<'_>) -> rusqlite::Result<SqlValue<'a>> {
    Ok(match v {
        ValueRef::Null => SqlValue::Null,
        ValueRef::Int(i) => SqlValue::Integer(*i),
        ValueRef::Real(f) if f.is_nan() => {
            return Err(rusqlite::Error::ToSqlConversionFailure(
                "NaN cannot be stored (SQLite has no NaN)".into(),
            ))
        }
        ValueRef::Real(f) => SqlValue::Real(*f),
        ValueRef::Bool(b) => SqlValue::Integer(i64::from(*b)),
        ValueRef::Currency(c) => SqlValue::Integer(c.scaled()),
        ValueRef::Text(t) => SqlValue::Text(t.as_bytes()),
        ValueRef::Blob(b) => SqlValue::Blob(b),
        ValueRef::Date(_) | ValueRef::DateTime(_) => {
            unreachable!("dates are stored as text written out first")
        }
    })
}

/// The dates and date-times among a statement's values, as the ISO text
/// SQLite stores, written out before any value is bound so that every value
/// can be bound in place ([`execute_in_place`]). A date-time equal to the one
/// before (a batch's stamp, on every row) is written once. A connection keeps
/// one and reuses it, so a warm statement allocates nothing.
#[derive(Default)]
pub struct DateTexts {
    bytes: Vec<u8>,
    /// Where each date's text is in `bytes`, in the order of the values.
    spans: Vec<(usize, usize)>,
    /// The last date-time written, and where.
    last: Option<(DateTime<Utc>, (usize, usize))>,
}

/// Bytes of date text a connection keeps between statements; a larger
/// buffer, left by a long batch, is let go.
const DATE_TEXTS_KEPT: usize = 64 << 10;

/// Bytes of date text a connection holds room for from its first statement:
/// eight date-times at their longest. A date-time's text is as long as its
/// fraction of a second needs (trailing zeros dropped), so the same
/// statement's dates can need more room on a later call than on its first,
/// and the buffer grew then, once in a while (an allocation on the per-row
/// path, seen by `tests/alloc.rs` on a loaded machine).
const DATE_TEXTS_MIN: usize = 8 * DATETIME_BUF;

impl DateTexts {
    /// Empties it for a statement's values.
    fn start(&mut self) {
        if self.bytes.capacity() > DATE_TEXTS_KEPT {
            *self = DateTexts::default();
        }
        if self.bytes.capacity() < DATE_TEXTS_MIN {
            self.bytes.reserve(DATE_TEXTS_MIN);
        }
        self.bytes.clear();
        self.spans.clear();
        self.last = None;
    }

    /// Writes the text of `v`, a date or a date-time (other values are not
    /// pushed: see [`is_date`]).
    fn push(&mut self, v: &ValueRef<'_>) {
        let mut buf = [0u8; DATETIME_BUF];
        let (text, at) = match v {
            ValueRef::Date(d) => (write_date(*d, &mut buf), None),
            ValueRef::DateTime(t) => match self.last {
                Some((last, span)) if last == *t => {
                    self.spans.push(span);
                    return;
                }
                _ => (write_datetime(*t, &mut buf), Some(*t)),
            },
            _ => return,
        };
        let span = (self.bytes.len(), text.len());
        self.bytes.extend_from_slice(text.as_bytes());
        self.spans.push(span);
        if let Some(t) = at {
            self.last = Some((t, span));
        }
    }

    /// The text of the `n`th date pushed.
    #[inline]
    fn text(&self, n: usize) -> rusqlite::Result<&[u8]> {
        let &(at, len) = self
            .spans
            .get(n)
            .ok_or_else(|| rusqlite::Error::InvalidQuery)?;
        Ok(&self.bytes[at..at + len])
    }
}

/// Whether `v` is stored as text [`DateTexts`] writes.
#[inline(always)]
fn is_date(v: &ValueRef<'_>) -> bool {
    matches!(v, ValueRef::Date(_) | ValueRef::DateTime(_))
}

/// Runs `stmt`, a statement that returns no rows, with `values` bound in
/// place from its first parameter on ([`RawStmt::execute_in_place`]): the
/// rows it changed. `dates` holds their dates' text meanwhile.
pub fn execute_in_place(
    stmt: &mut RawStmt,
    values: &[ValueRef<'_>],
    dates: &mut DateTexts,
) -> rusqlite::Result<usize> {
    let want = stmt.parameter_count();
    if values.len() != want {
        return Err(rusqlite::Error::InvalidParameterCount(values.len(), want));
    }
    dates.start();
    values
        .iter()
        .filter(|v| is_date(v))
        .for_each(|v| dates.push(v));
    let dates = &*dates;
    stmt.execute_in_place(|run| {
        let mut n = 0;
        for v in values {
            bind_in_place(run, v.lent(), dates, &mut n)?;
        }
        Ok(())
    })
}

/// Inserts `rows` of `table` with `stmt`, a statement with a row of
/// parameters per record (after the ID, if `id`), their fields bound in
/// place straight from the records: nothing is collected first (a multi-row
/// insert's values would fill more than the CPU's first-level cache, to be
/// read back as they are bound, then again to drop them). Only the date
/// fields are read twice: first to write out their text. Each value is
/// bound as `map` gives it, from its field's index and the record's value
/// (the external SQL layer's storage form; the identity here).
///
/// With `shared` fields (a statement of
/// [`statements::TableNames::insert_rows_shared`], rows that
/// [`statements::rows_share`] them), those are bound once, from the first
/// row, before every row's other fields.
pub(crate) fn insert_in_place<'r, I, M>(
    stmt: &mut RawStmt,
    table: &Table,
    id: Option<i64>,
    rows: I,
    shared: &[usize],
    dates: &mut DateTexts,
    map: M,
) -> rusqlite::Result<usize>
where
    I: Iterator<Item = &'r dyn Fields> + Clone,
    M: Fn(usize, ValueRef<'r>) -> ValueRef<'r>,
{
    let date_field =
        |i: usize| matches!(table.fields[i].kind, FieldKind::Date | FieldKind::DateTime);
    let own = |i: &usize| !shared.contains(i);
    let nf = table.fields.len();
    let first = if shared.is_empty() {
        None
    } else {
        rows.clone().next()
    };
    dates.start();
    if let Some(row) = first {
        for &i in shared.iter().filter(|&&i| date_field(i)) {
            dates.push(&map(i, row.field(i)));
        }
    }
    for row in rows.clone() {
        for i in (0..nf).filter(|i| date_field(*i) && own(i)) {
            dates.push(&map(i, row.field(i)));
        }
    }
    let dates = &*dates;
    stmt.execute_in_place(|run| {
        if let Some(id) = id {
            run.bind(SqlValue::Integer(id))?;
        }
        let mut n = 0;
        if let Some(row) = first {
            for &i in shared {
                bind_field(run, map(i, row.field(i)), date_field(i), dates, &mut n)?;
            }
        }
        for row in rows {
            for i in 0..nf {
                if shared.is_empty() || own(&i) {
                    bind_field(run, map(i, row.field(i)), date_field(i), dates, &mut n)?;
                }
            }
        }
        Ok(())
    })
}

/// Binds `v`, the value of a field, to the next parameter of `run`: as
/// [`bind_in_place`] does, but a date in a field of another kind (a
/// hand-built row's values need not match their fields), which
/// [`insert_in_place`]'s first pass did not write, must not take the next
/// text: it is written here and copied.
#[inline(always)]
fn bind_field<'v>(
    run: &mut InPlace<'_, 'v>,
    v: ValueRef<'v>,
    date_field: bool,
    dates: &'v DateTexts,
    n: &mut usize,
) -> rusqlite::Result<()> {
    if is_date(&v) && !date_field {
        let mut buf = [0u8; DATETIME_BUF];
        return run.bind_copy(stored(&v, &mut buf)?);
    }
    bind_in_place(run, v, dates, n)
}

/// Binds `v` to the next parameter of `run`: a date as the text of the
/// `n`th date in `dates` (counting `n` on), borrowed text and blobs in
/// place, text `v` owns (a rendered JSON field) as a copy.
#[inline(always)]
fn bind_in_place<'v>(
    run: &mut InPlace<'_, 'v>,
    v: ValueRef<'v>,
    dates: &'v DateTexts,
    n: &mut usize,
) -> rusqlite::Result<()> {
    match v {
        ValueRef::Date(_) | ValueRef::DateTime(_) => {
            *n += 1;
            run.bind(SqlValue::Text(dates.text(*n - 1)?))
        }
        ValueRef::Text(Cow::Borrowed(t)) => run.bind(SqlValue::Text(t.as_bytes())),
        ValueRef::Blob(b) => run.bind(SqlValue::Blob(b)),
        v => run.bind_copy(stored_in_place(&v)?),
    }
}

/// A statement values are bound to: rusqlite's, or one of [`raw`]'s.
trait BindSql {
    fn bind_sql(&mut self, at: usize, v: SqlValue<'_>) -> rusqlite::Result<()>;
}

impl BindSql for Statement<'_> {
    /// Each kind is bound through its own concrete type, so that rusqlite's
    /// generic binding folds down to the one SQLite call (through
    /// `ToSqlOutput` it stays a call of its own per value: 5% of an insert
    /// inside a transaction, counted with callgrind).
    #[inline(always)]
    fn bind_sql(&mut self, at: usize, v: SqlValue<'_>) -> rusqlite::Result<()> {
        match v {
            SqlValue::Integer(i) => self.raw_bind_parameter(at, i),
            SqlValue::Text(t) => self.raw_bind_parameter(at, TextBytes(t)),
            SqlValue::Real(f) => self.raw_bind_parameter(at, f),
            SqlValue::Null => self.raw_bind_parameter(at, rusqlite::types::Null),
            SqlValue::Blob(_) => self.raw_bind_parameter(at, ToSqlOutput::Borrowed(v)),
        }
    }
}

/// Text already checked as UTF-8, bound as text (`&[u8]` binds as a blob).
struct TextBytes<'a>(&'a [u8]);

impl rusqlite::ToSql for TextBytes<'_> {
    #[inline(always)]
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(SqlValue::Text(self.0)))
    }
}

impl BindSql for RawStmt {
    #[inline]
    fn bind_sql(&mut self, at: usize, v: SqlValue<'_>) -> rusqlite::Result<()> {
        RawStmt::bind_sql(self, at, v)
    }
}

/// Binds one value at a 1-based position; dates are written into a stack buffer
/// that SQLite copies, so nothing is allocated. A date-time is written once
/// for the rows that share it (a record's automatic times, a batch's stamp).
#[inline(always)]
fn bind(
    stmt: &mut impl BindSql,
    at: usize,
    v: &ValueRef<'_>,
    times: &mut TimeText,
) -> rusqlite::Result<()> {
    let mut buf = [0u8; DATETIME_BUF];
    let out = match v {
        ValueRef::DateTime(t) => SqlValue::Text(times.text(*t)),
        v => stored(v, &mut buf)?,
    };
    stmt.bind_sql(at, out)
}

fn bind_fields(
    stmt: &mut Statement<'_>,
    first: usize,
    row: &dyn Fields,
    fields: impl Iterator<Item = usize>,
    times: &mut TimeText,
) -> rusqlite::Result<usize> {
    let mut at = first;
    for idx in fields {
        bind(stmt, at, &row.field(idx), times)?;
        at += 1;
    }
    Ok(at)
}

fn bind_params(
    stmt: &mut impl BindSql,
    params: &[Value],
    times: &mut TimeText,
) -> rusqlite::Result<usize> {
    for (i, p) in params.iter().enumerate() {
        bind(stmt, i + 1, &p.as_ref(), times)?;
    }
    Ok(params.len() + 1)
}

fn from_sql(v: SqlValue<'_>) -> Result<ValueRef<'_>> {
    loaded(v, ENGINE)
}

/// A value SQLite holds as Burrow reads it (the inverse of [`stored`]): text
/// must be UTF-8, else an error of `engine`. The external SQL layer reads
/// SQLite files through it too.
#[inline]
pub fn loaded<'a>(v: SqlValue<'a>, engine: &'static str) -> Result<ValueRef<'a>> {
    Ok(match v {
        SqlValue::Null => ValueRef::Null,
        SqlValue::Integer(i) => ValueRef::Int(i),
        SqlValue::Real(f) => ValueRef::Real(f),
        SqlValue::Text(t) => ValueRef::Text(loaded_text(t, engine)?.into()),
        SqlValue::Blob(b) => ValueRef::Blob(b),
    })
}

/// Text SQLite holds, as Burrow reads it: it must be UTF-8, else an error of
/// `engine` (SQLite stores whatever bytes another writer gave it).
#[inline(always)]
pub fn loaded_text<'a>(t: &'a [u8], engine: &'static str) -> Result<&'a str> {
    burrow_core::driver::utf8(t).map_err(|e| not_utf8(engine, e))
}

/// The error of [`loaded_text`], kept out of line: every text cell of a
/// scan calls it, and the check inlined there is a few instructions.
#[cold]
#[inline(never)]
fn not_utf8(engine: &'static str, e: std::str::Utf8Error) -> Error {
    Error::engine(engine, format!("invalid UTF-8 in a text column: {e}"))
}

/// A stored value read back as the typed value of its field kind.
fn typed(kind: FieldKind, v: ValueRef<'_>) -> Value {
    kind.typed(&v).unwrap_or(v).to_owned()
}

/// A row of a statement that selected `ID` and then every field.
struct SqlRow<'a>(&'a RawStmt);

impl Row for SqlRow<'_> {
    fn id(&self) -> Result<i64> {
        id_at(self.0, 0)
    }

    fn get(&self, idx: usize) -> Result<ValueRef<'_>> {
        from_sql(self.0.cell(idx + 1).map_err(eng)?)
    }

    #[inline]
    fn typed(&self) -> bool {
        true
    }

    #[inline]
    fn text(&self, idx: usize) -> Result<Option<&str>> {
        text_at(self.0, idx + 1)
    }

    #[inline]
    fn int(&self, idx: usize) -> Result<Option<i64>> {
        int_at(self.0, idx + 1)
    }
}

/// Column `col` as text, if SQLite holds text there (UTF-8 checked).
#[inline(always)]
fn text_at(row: &RawStmt, col: usize) -> Result<Option<&str>> {
    row.text_cell(col)
        .map_err(eng)?
        .map(|t| loaded_text(t, ENGINE))
        .transpose()
}

/// The ID in column `col`: an integer, read without the general value made
/// unless the column holds something else, which is an error.
#[inline]
fn id_at(row: &RawStmt, col: usize) -> Result<i64> {
    if let Some(id) = row.int_cell(col).map_err(eng)? {
        return Ok(id);
    }
    let held = row.cell(col).map_err(eng)?.data_type();
    Err(Error::engine(ENGINE, format!("ID column holds {held:?}")))
}

/// Column `col` as an integer, if SQLite holds one there.
#[inline]
fn int_at(row: &RawStmt, col: usize) -> Result<Option<i64>> {
    row.int_cell(col).map_err(eng)
}

/// A row of an arbitrary SELECT, its columns matched to a table's by name.
struct NamedRow<'a> {
    row: &'a RawStmt,
    id_col: usize,
    map: &'a [usize],
}

impl Row for NamedRow<'_> {
    fn id(&self) -> Result<i64> {
        id_at(self.row, self.id_col)
    }

    fn get(&self, idx: usize) -> Result<ValueRef<'_>> {
        let col = *self
            .map
            .get(idx)
            .ok_or_else(|| Error::BadInput(format!("no field #{idx}")))?;
        from_sql(self.row.cell(col).map_err(eng)?)
    }

    #[inline]
    fn typed(&self) -> bool {
        true
    }

    fn text(&self, idx: usize) -> Result<Option<&str>> {
        match self.map.get(idx) {
            Some(&col) => text_at(self.row, col),
            None => Ok(None),
        }
    }

    fn int(&self, idx: usize) -> Result<Option<i64>> {
        match self.map.get(idx) {
            Some(&col) => int_at(self.row, col),
            None => Ok(None),
        }
    }
}

/// Where `table` is in `tables`: by address, or by an identical definition
/// (two versions of a record with the same table name each keep their own
/// statements).
fn find_table<T: AsRef<TableSql>>(tables: &[T], table: &Table) -> Option<usize> {
    tables
        .iter()
        .position(|t| std::ptr::eq(t.as_ref().table, table))
        .or_else(|| tables.iter().position(|t| t.as_ref().table == table))
}

impl Inner {
    /// Runs a caller's own code on the connection; on a WAL file, see
    /// [`snapshots::CommitHook::around`].
    fn around_own_use<R>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<R>) -> Result<R> {
        match &self.hook {
            Some(h) => h.around(&self.conn, f),
            None => f(&self.conn),
        }
        .map_err(eng)
    }

    /// Ends the idle readers' snapshots on a WAL file (see [`snapshots`]).
    fn end_idle_snapshots(&self) {
        if let Some(h) = &self.hook {
            h.end_idle_snapshots();
        }
    }

    fn table(&mut self, table: &Table) -> Result<usize> {
        find_table(&self.tables, table).ok_or_else(|| {
            Error::UnknownTable(format!("{} is not open in this SQLite engine", table.name))
        })
    }

    fn insert(&mut self, table: &'static Table, id: Option<i64>, row: &dyn Fields) -> Result<i64> {
        let t = self.table(table)?;
        let Inner {
            hot, conn, dates, ..
        } = self;
        let stmt = match id {
            Some(_) => &mut hot[t].insert,
            None => &mut hot[t].insert_new,
        };
        insert_in_place(stmt, table, id, std::iter::once(row), &[], dates, |_, v| v)
            .map_err(|e| write_err(table, e))?;
        Ok(conn.last_insert_rowid())
    }

    /// Inserts rows with engine-assigned IDs as multi-row INSERTs.
    fn bulk_insert(
        &mut self,
        table: &'static Table,
        items: &[BatchItem<'_>],
        base: usize,
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
    ) -> Result<()> {
        let t = self.table(table)?;
        let per = self.tables[t].bulk_rows;
        let nf = table.fields.len();
        for (c, chunk) in items.chunks(per).enumerate() {
            let Inner {
                hot,
                tables,
                conn,
                last_time,
                dates,
                ..
            } = &mut *self;
            // A multi-row INSERT gives its rows the IDs after the current
            // maximum, one by one, unless that maximum is near i64::MAX (then
            // SQLite picks free IDs at random): such chunks go row by row.
            let max: Option<i64> = conn
                .prepare_cached(&tables[t].max_id)
                .and_then(|mut s| s.query_row([], |r| r.get(0)))
                .map_err(eng)?;
            let first = max.unwrap_or(0).checked_add(1);
            let last = first.and_then(|f| f.checked_add(chunk.len() as i64 - 1));
            let done = match (first, last) {
                // Kept and cached statements differ in lifetime, so each
                // branch runs its own.
                (Some(_), Some(_)) if chunk.len() == per => {
                    let rows = chunk.iter().filter_map(|item| match item.op {
                        BatchOp::Add { row, .. } => Some(row),
                        _ => None,
                    });
                    let shared = &tables[t].shared;
                    let (stmt, shared) = match &mut hot[t].bulk_insert_shared {
                        Some(stmt) if statements::rows_share(rows.clone(), shared) => {
                            (stmt, &shared[..])
                        }
                        _ => (&mut hot[t].bulk_insert, &[][..]),
                    };
                    insert_in_place(stmt, table, None, rows, shared, dates, |_, v| v)
                }
                (Some(_), Some(_)) => {
                    match conn.prepare_cached(&statements::bulk_insert_sql(table, chunk.len())) {
                        Ok(mut stmt) => bind_rows(&mut stmt, chunk, nf, last_time),
                        Err(e) => Err(e),
                    }
                }
                _ => Err(rusqlite::Error::InvalidQuery),
            };
            if let (Ok(_), Some(first), Some(last)) = (&done, first, last) {
                if conn.last_insert_rowid() != last {
                    return Err(Error::engine(
                        ENGINE,
                        format!(
                            "a bulk insert into {} was not given IDs {first}..={last}",
                            table.name
                        ),
                    ));
                }
                results.extend((first..=last).map(BatchResult::Added));
                continue;
            }
            // The failed statement left nothing behind; find the culprit row by row.
            apply_each(chunk, results, stop_on_error, |_, item| {
                apply_one_locked(self, item)
            })
            .map_err(|e| match e {
                Error::Batch { index, source } => Error::Batch {
                    index: base + c * per + index,
                    source,
                },
                other => other,
            })?;
        }
        Ok(())
    }

    fn update(
        &mut self,
        table: &'static Table,
        row: &dyn Fields,
        fields: Option<&[usize]>,
    ) -> Result<bool> {
        let t = self.table(table)?;
        let Inner {
            hot,
            tables,
            conn,
            last_time,
            ..
        } = self;
        let n = match fields {
            None => update_row(&mut hot[t].update_all, row, fields, table, last_time),
            Some(list) => {
                if let Some(&bad) = list.iter().find(|&&i| i >= table.fields.len()) {
                    return Err(Error::BadInput(format!(
                        "{} has no field #{bad}",
                        table.name
                    )));
                }
                let mut stmt = conn
                    .prepare_cached(tables[t].update_some(list))
                    .map_err(eng)?;
                update_row(&mut stmt, row, fields, table, last_time)
            }
        };
        Ok(n.map_err(|e| write_err(table, e))? > 0)
    }

    fn delete(&mut self, table: &'static Table, id: i64) -> Result<bool> {
        let t = self.table(table)?;
        let Inner { hot, last_time, .. } = self;
        let stmt = &mut hot[t].delete;
        bind(stmt, 1, &ValueRef::Int(id), last_time).map_err(eng)?;
        Ok(stmt.raw_execute().map_err(|e| write_err(table, e))? > 0)
    }

    fn query(
        &mut self,
        sql: &str,
        params: &[Value],
        page: Option<(Option<u64>, u64)>,
        out: &mut dyn FnMut(&RawStmt) -> Result<()>,
    ) -> Result<()> {
        let stmt = self.kept.get(&self.conn, sql).map_err(eng)?;
        query(stmt, &mut self.last_time, params, page, out)
    }
}

/// Runs a read of the engine's own SQL on `conn`, `page` giving the values of
/// its trailing `LIMIT ? OFFSET ?`.
fn query(
    stmt: &mut RawStmt,
    times: &mut TimeText,
    params: &[Value],
    page: Option<(Option<u64>, u64)>,
    out: &mut dyn FnMut(&RawStmt) -> Result<()>,
) -> Result<()> {
    let at = bind_params(stmt, params, times).map_err(eng)?;
    if let Some((limit, offset)) = page {
        let limit = limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
        let offset = i64::try_from(offset).unwrap_or(i64::MAX);
        bind(stmt, at, &ValueRef::Int(limit), times).map_err(eng)?;
        bind(stmt, at + 1, &ValueRef::Int(offset), times).map_err(eng)?;
    }
    stmt.each(out)
}

fn bind_rows(
    stmt: &mut Statement<'_>,
    chunk: &[BatchItem<'_>],
    nf: usize,
    times: &mut TimeText,
) -> rusqlite::Result<usize> {
    let mut at = 1;
    for item in chunk {
        if let BatchOp::Add { row, .. } = item.op {
            at = bind_fields(stmt, at, row, 0..nf, times)?;
        }
    }
    stmt.raw_execute()
}

fn update_row(
    stmt: &mut Statement<'_>,
    row: &dyn Fields,
    fields: Option<&[usize]>,
    table: &Table,
    times: &mut TimeText,
) -> rusqlite::Result<usize> {
    let at = match fields {
        None => bind_fields(stmt, 1, row, 0..table.fields.len(), times)?,
        Some(list) => bind_fields(stmt, 1, row, list.iter().copied(), times)?,
    };
    bind(stmt, at, &ValueRef::Int(row.id()), times)?;
    stmt.raw_execute()
}

fn apply_one_locked(inner: &mut Inner, item: &BatchItem<'_>) -> Result<BatchResult> {
    Ok(match item.op {
        BatchOp::Add { id, row } => BatchResult::Added(inner.insert(item.table, id, row)?),
        BatchOp::Update { row, fields } => {
            if inner.update(item.table, row, fields)? {
                BatchResult::Done
            } else {
                BatchResult::Missing
            }
        }
        BatchOp::Delete { id } => {
            if inner.delete(item.table, id)? {
                BatchResult::Done
            } else {
                BatchResult::Missing
            }
        }
    })
}

/// The engine seen from one unit of work: its own calls (`tx` is `None`) or
/// those of the transaction with token `tx`. The row calls are written once,
/// here; the engine and its transaction handle forward to it.
struct At<'a> {
    engine: &'a SqliteEngine,
    tx: Option<u64>,
}

/// The connection a read runs on.
enum ReadConn<'a> {
    Reader(readers::ReaderGuard<'a>),
    Writer(Locked<'a>),
}

impl At<'_> {
    /// Where a read runs. Inside a transaction, or without a reader pool,
    /// on the writer once it is free. Else on the writer if it is free this
    /// instant (no transaction open, no backup step waiting): its page cache
    /// is warm, so one thread reading alone pays for no second connection;
    /// and when it is not, on a reader, which waits neither for the writer
    /// nor for an open transaction. A thread that once found the writer
    /// taken reads on a free reader first from then on
    /// ([`readers::sticks_to_reader`]), and on the writer only when every
    /// reader is taken. A read by ID (`by_id`) first tries a reader that
    /// keeps its snapshot ([`readers::Readers::take_current`]): it skips
    /// the read transaction, about half of such a read. A scan gains little
    /// from that, and a reader's page cache may be cold where the writer's
    /// is warm, so it does not.
    fn read_conn(&self, by_id: bool) -> Result<ReadConn<'_>> {
        if let (Some(pool), None) = (&self.engine.readers, self.tx) {
            if by_id && pool.keeps_snapshots() {
                if let Some(g) = pool.take_current()? {
                    return Ok(ReadConn::Reader(g));
                }
            }
            if readers::sticks_to_reader(pool) {
                if let Some(g) = pool.take_free()? {
                    return Ok(ReadConn::Reader(g));
                }
            }
            if !self.engine.turn.wanted() {
                match self.engine.inner.try_lock() {
                    // Not inside a transaction begun on the connection itself
                    // (`with_connection`): a read there would see its writes.
                    Ok(g) if g.owner.is_none() && g.conn.is_autocommit() => {
                        return Ok(ReadConn::Writer(Locked::new(&self.engine.inner, g)));
                    }
                    Ok(_) => {}
                    Err(_) => readers::stick_to_reader(pool),
                }
            }
            return pool.take().map(ReadConn::Reader);
        }
        self.engine.lock(self.tx).map(ReadConn::Writer)
    }
}

/// Reads the row of `id` with a table's by-ID statement.
fn read_by_id(
    stmt: &mut RawStmt,
    id: i64,
    times: &mut TimeText,
    out: &mut dyn FnMut(&dyn Row) -> Result<()>,
) -> Result<bool> {
    bind(stmt, 1, &ValueRef::Int(id), times).map_err(eng)?;
    stmt.first(|row| out(&SqlRow(row)))
}

impl RowOps for At<'_> {
    fn insert(&self, table: &'static Table, id: Option<i64>, row: &dyn Fields) -> Result<i64> {
        self.engine.lock(self.tx)?.insert(table, id, row)
    }

    fn update(
        &self,
        table: &'static Table,
        row: &dyn Fields,
        fields: Option<&[usize]>,
    ) -> Result<bool> {
        self.engine.lock(self.tx)?.update(table, row, fields)
    }

    fn delete(&self, table: &'static Table, id: i64) -> Result<bool> {
        self.engine.lock(self.tx)?.delete(table, id)
    }

    fn delete_where(&self, table: &'static Table, filter: &Filter) -> Result<u64> {
        let mut g = self.engine.lock(self.tx)?;
        g.table(table)?;
        let mut s = String::from("DELETE FROM ");
        statements::quote(&mut s, table.name);
        statements::write_where(table, filter, &mut s);
        let Inner {
            conn, last_time, ..
        } = &mut *g;
        let mut stmt = conn.prepare_cached(&s).map_err(eng)?;
        bind_params(&mut *stmt, &filter.params, last_time).map_err(eng)?;
        Ok(stmt.raw_execute().map_err(|e| write_err(table, e))? as u64)
    }

    fn retrieve(
        &self,
        table: &'static Table,
        id: i64,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<bool> {
        let mut g = match self.read_conn(true)? {
            ReadConn::Reader(mut r) => {
                let t = r.table(table)?;
                let (stmt, times) = r.reader().by_id(t);
                return read_by_id(stmt, id, times, out);
            }
            ReadConn::Writer(g) => g,
        };
        let t = g.table(table)?;
        let Inner { hot, last_time, .. } = &mut *g;
        read_by_id(&mut hot[t].select_by_id, id, last_time, out)
    }

    fn select(
        &self,
        table: &'static Table,
        select: &Select,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        let mut each = |row: &RawStmt| out(&SqlRow(row));
        let page = |paged: bool| paged.then_some((select.limit, select.offset));
        let mut g = match self.read_conn(false)? {
            ReadConn::Reader(mut g) => {
                let t = g.table(table)?;
                let r = g.reader();
                let (sql, paged) = r.sql(t).select_sql(None, select);
                let (stmt, times) = r.kept(&sql)?;
                return query(stmt, times, &select.filter.params, page(paged), &mut each);
            }
            ReadConn::Writer(g) => g,
        };
        let t = g.table(table)?;
        let (sql, paged) = g.tables[t].select_sql(None, select);
        g.query(&sql, &select.filter.params, page(paged), &mut each)
    }

    fn count(&self, table: &'static Table, filter: &Filter) -> Result<u64> {
        let mut s = String::from("SELECT count(*) FROM ");
        statements::quote(&mut s, table.name);
        statements::write_where(table, filter, &mut s);
        let mut n = 0;
        let mut each = |row: &RawStmt| {
            n = match row.cell(0).map_err(eng)? {
                SqlValue::Integer(i) => u64::try_from(i).unwrap_or(0),
                other => {
                    return Err(Error::engine(
                        ENGINE,
                        format!("count(*) gave {:?}", other.data_type()),
                    ))
                }
            };
            Ok(())
        };
        match self.read_conn(false)? {
            ReadConn::Reader(mut g) => {
                g.table(table)?;
                let (stmt, times) = g.reader().kept(&s)?;
                query(stmt, times, &filter.params, None, &mut each)?;
            }
            ReadConn::Writer(mut g) => {
                g.table(table)?;
                g.query(&s, &filter.params, None, &mut each)?;
            }
        }
        Ok(n)
    }

    fn select_value(
        &self,
        table: &'static Table,
        column: Column,
        select: &Select,
    ) -> Result<Option<Value>> {
        let kind = match column {
            Column::Id => FieldKind::I64,
            Column::Field(i) => table.fields[i].kind,
        };
        let mut found = None;
        let mut each = |row: &RawStmt| {
            if found.is_none() {
                found = Some(typed(kind, from_sql(row.cell(0).map_err(eng)?)?));
            }
            Ok(())
        };
        let page = |paged: bool| paged.then_some((select.limit, select.offset));
        let params = &select.filter.params;
        match self.read_conn(false)? {
            ReadConn::Reader(mut g) => {
                let t = g.table(table)?;
                let r = g.reader();
                let (sql, paged) = r.sql(t).select_sql(Some(column), select);
                let (stmt, times) = r.kept(&sql)?;
                query(stmt, times, params, page(paged), &mut each)?;
            }
            ReadConn::Writer(mut g) => {
                let t = g.table(table)?;
                let (sql, paged) = g.tables[t].select_sql(Some(column), select);
                g.query(&sql, params, page(paged), &mut each)?;
            }
        }
        Ok(found)
    }

    fn apply_batch(
        &self,
        items: &[BatchItem<'_>],
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
    ) -> Result<()> {
        let mut g = self.engine.lock(self.tx)?;
        let mut i = 0;
        while i < items.len() {
            let bulk = |it: &BatchItem<'_>| matches!(it.op, BatchOp::Add { id: None, .. });
            if bulk(&items[i]) {
                let table = items[i].table;
                let run = items[i..]
                    .iter()
                    .take_while(|it| bulk(it) && it.table.same(table))
                    .count();
                if run > 1 {
                    g.bulk_insert(table, &items[i..i + run], i, results, stop_on_error)?;
                    i += run;
                    continue;
                }
            }
            match apply_one_locked(&mut g, &items[i]) {
                Ok(r) => results.push(r),
                Err(e) if stop_on_error => {
                    return Err(Error::Batch {
                        index: i,
                        source: Box::new(e),
                    })
                }
                Err(e) => results.push(BatchResult::Failed(Box::new(e))),
            }
            i += 1;
        }
        Ok(())
    }
}

impl SqlHost for At<'_> {
    fn sql_select(
        &self,
        table: &'static Table,
        sql: &str,
        params: &[Value],
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        // The readers do not see the writer's `temp` schema, where exposed
        // tables live (and any temporary table made through
        // `with_connection`): with a table exposed, SQL runs on the writer,
        // and SQL a reader cannot prepare is tried there too, which also
        // gives the writer's word on SQL that is wrong.
        let mut g = if self.engine.exposed.is_empty() {
            match self.read_conn(false)? {
                ReadConn::Reader(mut g) => {
                    if let Ok((stmt, times)) = g.reader().kept(sql) {
                        return sql_select_on(stmt, times, table, params, out);
                    }
                    drop(g);
                    self.engine.lock(self.tx)?
                }
                ReadConn::Writer(g) => g,
            }
        } else {
            self.engine.lock(self.tx)?
        };
        let Inner {
            conn,
            kept,
            last_time,
            ..
        } = &mut *g;
        let stmt = kept
            .get(conn, sql)
            .map_err(|e| Error::BadInput(format!("SQL refused: {e}")))?;
        sql_select_on(stmt, last_time, table, params, out)
    }

    fn expose(&self, table: &'static Table, engine: Arc<dyn Storage>) -> Result<()> {
        if self.tx.is_some() {
            return Err(Error::Unsupported(
                "tables of other engines are shown to the engine's SQL, not inside a transaction"
                    .into(),
            ));
        }
        self.engine.expose_table(table, engine)
    }
}

/// Runs `stmt`, the SQL of [`SqlHost::sql_select`], its rows read as `table`'s.
fn sql_select_on(
    stmt: &mut RawStmt,
    last_time: &mut TimeText,
    table: &'static Table,
    params: &[Value],
    out: &mut dyn FnMut(&dyn Row) -> Result<()>,
) -> Result<()> {
    if !stmt.readonly() {
        return Err(Error::BadInput(
            "sql_list runs read-only statements (SELECT) only".into(),
        ));
    }
    if stmt.parameter_count() != params.len() {
        return Err(Error::BadInput(format!(
            "the SQL has {} parameter(s), {} given",
            stmt.parameter_count(),
            params.len()
        )));
    }
    let names = stmt.column_names();
    let find = |want: &str| names.iter().position(|n| n.eq_ignore_ascii_case(want));
    let id_col = find("ID")
        .or_else(|| find("rowid"))
        .ok_or_else(|| Error::BadInput("the SQL result has no ID column".into()))?;
    let map = table
        .fields
        .iter()
        .map(|f| {
            find(f.column).or_else(|| find(f.name)).ok_or_else(|| {
                Error::BadInput(format!(
                    "the SQL result has no column for {}.{}",
                    table.name, f.name
                ))
            })
        })
        .collect::<Result<Vec<usize>>>()?;
    bind_params(stmt, params, last_time).map_err(eng)?;
    stmt.each(|row| {
        out(&NamedRow {
            row,
            id_col,
            map: &map,
        })
    })
}

impl SqliteEngine {
    fn at(&self, tx: Option<u64>) -> At<'_> {
        At { engine: self, tx }
    }

    /// Ends transaction `token` with `verb` (`COMMIT` or `ROLLBACK`) and
    /// wakes the callers waiting for it.
    fn end(&self, token: u64, verb: &str) -> Result<()> {
        let mut g = self.lock(Some(token))?;
        let r = g.conn.execute_batch(verb).map_err(eng);
        if r.is_err() && !g.conn.is_autocommit() {
            // A failed COMMIT leaves the transaction open: end it so that the
            // engine is usable again, and report the failure.
            let _ = g.conn.execute_batch("ROLLBACK");
        }
        g.owner = None;
        drop(g);
        self.tx_ended.notify_all();
        r
    }
}

burrow_core::forward_row_ops!(SqliteEngine, |e| e.at(None));
burrow_core::forward_row_ops!(SqliteTx, |t| t.engine.at(Some(t.token)));

impl SqlHost for SqliteEngine {
    fn sql_select(
        &self,
        table: &'static Table,
        sql: &str,
        params: &[Value],
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        self.at(None).sql_select(table, sql, params, out)
    }

    fn expose(&self, table: &'static Table, engine: Arc<dyn Storage>) -> Result<()> {
        self.expose_table(table, engine)
    }
}

impl SqlHost for SqliteTx {
    fn sql_select(
        &self,
        table: &'static Table,
        sql: &str,
        params: &[Value],
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        self.engine
            .at(Some(self.token))
            .sql_select(table, sql, params, out)
    }
}

impl SqliteEngine {
    fn expose_table(&self, table: &'static Table, engine: Arc<dyn Storage>) -> Result<()> {
        if std::ptr::addr_eq(Arc::as_ptr(&engine), self as *const Self) {
            return Ok(());
        }
        let g = self.lock(None)?;
        if g.tables
            .iter()
            .any(|t| t.table.name.eq_ignore_ascii_case(table.name))
        {
            return Err(Error::Schema(format!(
                "table {} is held by this SQLite engine and cannot also be exposed from another",
                table.name
            )));
        }
        self.exposed.add(table, engine);
        g.conn
            .execute_batch(&vtab::create_sql(table))
            .map_err(eng)?;
        Ok(())
    }
}

impl Storage for SqliteEngine {
    fn caps(&self) -> Caps {
        Caps::in_process(ENGINE).with_sqlite_order()
    }

    fn ensure_table(&self, table: &'static Table) -> Result<()> {
        let mut g = self.lock(None)?;
        schema::ensure(&g.conn, table)?;
        if !g
            .tables
            .iter()
            .any(|t| std::ptr::eq(t.table, table) || t.table == table)
        {
            let sql = TableSql::new(table);
            let hot = Hot::prepare(&g.conn, &sql).map_err(eng)?;
            g.hot.push(hot);
            // Made readable by the readers only now that the table exists
            // in a committed state.
            if let Some(pool) = &self.readers {
                pool.add_table(Arc::new(TableSql::new(table)));
            }
            g.tables.push(sql);
        }
        Ok(())
    }

    fn begin(self: Arc<Self>) -> Result<Box<dyn EngineTx>> {
        let token = next_tx_token();
        {
            let mut g = self.lock(None)?;
            g.conn.execute_batch("BEGIN IMMEDIATE").map_err(eng)?;
            g.owner = Some(token);
        }
        Ok(Box::new(SqliteTx {
            engine: self,
            token,
            open: true,
        }))
    }

    fn sql_host(&self) -> Option<&dyn SqlHost> {
        Some(self)
    }

    fn online_backup(&self) -> Option<&dyn burrow_core::OnlineBackup> {
        Some(self)
    }
}

/// An open transaction of a [`SqliteEngine`]: the engine's other callers wait
/// until it is committed, rolled back or dropped (which rolls back).
pub struct SqliteTx {
    engine: Arc<SqliteEngine>,
    token: u64,
    /// Still to be ended (by drop, if not by commit or rollback).
    open: bool,
}

impl SqliteTx {
    /// Runs `f` on the connection inside this transaction: for SQL the ORM
    /// does not speak. Bind values; never splice them.
    pub fn with_connection<R>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<R>,
    ) -> Result<R> {
        let g = self.engine.lock(Some(self.token))?;
        g.around_own_use(f)
    }

    fn end(&mut self, verb: &str) -> Result<()> {
        self.open = false;
        self.engine.end(self.token, verb)
    }
}

impl EngineTx for SqliteTx {
    fn commit(mut self: Box<Self>) -> Result<()> {
        self.end("COMMIT")
    }

    fn rollback(mut self: Box<Self>) -> Result<()> {
        self.end("ROLLBACK")
    }

    fn sql_host(&self) -> Option<&dyn SqlHost> {
        Some(self)
    }
}

impl Drop for SqliteTx {
    fn drop(&mut self) {
        if self.open {
            let _ = self.engine.end(self.token, "ROLLBACK");
        }
    }
}
