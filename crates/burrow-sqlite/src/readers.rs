//! The reader pool of a file in WAL mode: reads outside a transaction run on
//! read-only connections of their own, so that threads reading at once do not
//! take turns on the writer's lock (see `SqliteOptions::readers`).
//!
//! WAL gives each statement of a reader a snapshot of the last commit, taken
//! when it starts, and lets it read while the writer writes: a reader never
//! sees a transaction that is not committed, and never waits for one. On a
//! file no other process can open, a reader keeps its snapshot between
//! reads for as long as it is the last commit ([`crate::snapshots`]).

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use burrow_core::{Error, Result, Table};
use rusqlite::{Connection, OpenFlags};

use crate::raw::{Kept, RawStmt};
use crate::snapshots::{Header, SameFile, WalIndex};
use crate::statements::TableSql;
use crate::{eng, find_table, TimeText, ENGINE};

/// The reader connections, opened on first use, and what they need to open
/// one and to prepare a table's statements.
pub(crate) struct Readers {
    slots: Box<[Slot]>,
    /// How many callers wait for a free reader: a reader handed back wakes
    /// them only when there are any, so a read costs no extra lock otherwise.
    waiting: AtomicUsize,
    freed: Mutex<()>,
    freed_cv: Condvar,
    /// The tables the writer has opened: a reader prepares a table's
    /// statements the first time it reads it, from here.
    tables: Mutex<Vec<Arc<TableSql>>>,
    path: PathBuf,
    vfs: Option<&'static str>,
    busy_timeout: Duration,
    cache_size_kib: Option<u32>,
    /// The key of an encrypted file, kept apart from the writer's so that
    /// opening a reader never waits for the writer's lock; a rekey replaces it.
    #[cfg(feature = "encryption")]
    key: Mutex<Option<crate::Key>>,
    /// The engines of this process on the file, when its readers keep
    /// their snapshot between reads (no other process can open it): `None`
    /// begins a snapshot at each read.
    file: Option<Arc<SameFile>>,
    /// See [`Readers::quiet_since_last_look`].
    looked: std::sync::atomic::AtomicU64,
}

/// A reader's slot, on cache lines of its own: threads reading side by side
/// each lock their own slot and write to their own reader at every read, and
/// a line shared by the end of one slot and the lock of the next would move
/// between their processors at each of those writes.
#[repr(align(128))]
struct Slot(Mutex<Option<Reader>>);

/// One reader connection and its kept statements.
pub(crate) struct Reader {
    /// The by-ID statement of each table of `tables`; declared before `conn`
    /// so that they are finalized first (the contract of [`hot::Hot`]).
    by_id: Vec<RawStmt>,
    /// The table reads' statements, by SQL text; before `conn` too.
    kept: Kept,
    /// `BEGIN` and `COMMIT`, when the reader keeps its snapshot; before
    /// `conn` too.
    keep: Option<Keep>,
    tables: Vec<Arc<TableSql>>,
    /// Boxed so that the kept statements' pointer to it stays valid.
    conn: Box<Connection>,
    last_time: TimeText,
}

/// What a reader that keeps its snapshot between reads knows of it.
struct Keep {
    begin: RawStmt,
    commit: RawStmt,
    file: Arc<SameFile>,
    /// Where the connection maps the WAL index, known once a read
    /// transaction of it was open in WAL mode.
    index: Option<WalIndex>,
    /// Whether the file is in WAL mode, once asked: a file another
    /// connection took out of it is read one transaction per read.
    wal: Option<bool>,
    /// The header read just before the snapshot began: while the header
    /// is still this, nothing has been committed since, and the snapshot
    /// is the last commit. `None`: unknown, so the transaction is ended
    /// when the reader is handed back.
    seen: Option<Header>,
    /// Whether a transaction of ours is open, counted in the file's `held`.
    holding: bool,
    /// The file's commit count when this reader was last considered.
    looked: Option<u64>,
}

impl Keep {
    /// Whether the connection is inside the read transaction kept, and
    /// nothing was committed since it began.
    fn current(&self, conn: &Connection) -> bool {
        self.holding
            && !conn.is_autocommit()
            && matches!((self.index, &self.seen), (Some(ix), Some(seen)) if ix.header().as_ref() == Some(seen))
    }

    /// Before a use of the reader: keeps its snapshot while it is the last
    /// commit, else ends it and begins another. The header is read before
    /// the new snapshot begins (at the caller's first statement), so the
    /// snapshot is at least as new as the header kept: a commit made after
    /// the header was read changes it and begins a snapshot again, one made
    /// before is in the snapshot. While the file's readers drain, and when
    /// the header cannot tell (not in WAL mode), the reader reads without
    /// a transaction of ours, one per statement.
    fn fresh(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        let draining = self.file.draining();
        if !draining && self.current(conn) {
            return Ok(());
        }
        self.end(conn)?;
        if draining || self.wal == Some(false) {
            return Ok(());
        }
        self.seen = match self.index {
            Some(ix) => match ix.header() {
                Some(h) => Some(h),
                None => return Ok(()),
            },
            // A transaction is begun anyway: its first read maps the index,
            // found when the reader is handed back.
            None => None,
        };
        self.begin.execute()?;
        self.holding = true;
        self.file.held();
        self.looked = Some(self.file.commits());
        Ok(())
    }

    /// When the reader is handed back: the index is looked for while a read
    /// transaction is open, and the transaction ends unless it is to be
    /// kept (the header was known when it began, and the readers are not
    /// draining).
    fn handed_back(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        if !self.holding {
            return Ok(());
        }
        if self.index.is_none() && self.wal.is_none() {
            // Asked of the connection itself: a file taken out of WAL mode
            // before this reader opened is not, and mapping the index of
            // such a file would make SQLite a shared-memory file it never
            // unmaps.
            let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
            let wal = mode.eq_ignore_ascii_case("wal");
            self.wal = Some(wal);
            if wal {
                self.index = WalIndex::of(&self.begin);
                if self.index.is_none() {
                    self.wal = None;
                }
            }
        }
        if self.seen.is_none() || self.file.draining() {
            self.end(conn)?;
        }
        Ok(())
    }

    /// Whether no commit was made through the file's engines since this
    /// reader was last considered.
    fn quiet(&mut self) -> bool {
        let now = self.file.commits();
        self.looked.replace(now) == Some(now)
    }

    /// Ends the transaction kept, if any.
    fn end(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        if !conn.is_autocommit() {
            self.commit.execute()?;
        }
        if std::mem::take(&mut self.holding) {
            self.file.let_go();
        }
        Ok(())
    }
}

impl Drop for Keep {
    fn drop(&mut self) {
        if self.holding {
            self.file.let_go();
        }
    }
}

// SAFETY: as for the writer's `Inner`: a reader owns its connection and the
// statements that borrow it, and is reached only through its slot's mutex,
// so they move between threads together and are never used from two threads
// at once, which SQLite's multi-thread mode allows.
#[allow(unsafe_code)]
unsafe impl Send for Reader {}

/// Numbers the threads that read, so that each starts looking for a free
/// reader at a slot of its own: with as many threads as readers, each keeps
/// finding its own free, with its pages in its cache.
static ARRIVALS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static HOME: Cell<Option<usize>> = const { Cell::new(None) };
    static ON_READER: Cell<usize> = const { Cell::new(0) };
}

/// Whether this thread reads on a reader of `pool` rather than trying the
/// writer first: set once it found that engine's writer taken (one engine
/// per thread is remembered: its pool's address, which only ever decides
/// where a read runs, never what it sees). Threads reading side by side
/// otherwise take turns on the writer, and its lock, its connection and its
/// page cache move from processor to processor with every read (two
/// threads reading by ID gained 1.1–1.6× over one); each on a connection of
/// its own, they share only SQLite's WAL index. A thread reading alone
/// never finds the writer taken and opens no reader.
pub(crate) fn sticks_to_reader(pool: &Readers) -> bool {
    ON_READER.with(Cell::get) == std::ptr::from_ref(pool) as usize
}

/// See [`sticks_to_reader`].
pub(crate) fn stick_to_reader(pool: &Readers) {
    ON_READER.with(|r| r.set(std::ptr::from_ref(pool) as usize));
}

fn home() -> usize {
    HOME.with(|h| match h.get() {
        Some(n) => n,
        None => {
            let n = ARRIVALS.fetch_add(1, Ordering::Relaxed);
            h.set(Some(n));
            n
        }
    })
}

/// The readers of a pool when `SqliteOptions::readers` does not say: one per
/// processor, at least four, at most eight (each keeps its own page cache).
/// Threads often outnumber processors (a server's workers): with fewer
/// readers than threads reading, the ones left over read on the writer,
/// which begins a read transaction at every read; four threads reading by
/// ID on two processors went from 0.79–0.87 to 0.92–0.98 of two threads'
/// rate with four readers instead of two.
pub(crate) fn default_count() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get().clamp(4, 8))
}

impl Readers {
    pub(crate) fn new(
        count: usize,
        path: PathBuf,
        vfs: Option<&'static str>,
        busy_timeout: Duration,
        cache_size_kib: Option<u32>,
        #[cfg(feature = "encryption")] key: Option<crate::Key>,
        file: Option<Arc<SameFile>>,
    ) -> Self {
        Readers {
            slots: (0..count).map(|_| Slot(Mutex::new(None))).collect(),
            waiting: AtomicUsize::new(0),
            freed: Mutex::new(()),
            freed_cv: Condvar::new(),
            tables: Mutex::new(Vec::new()),
            path,
            vfs,
            busy_timeout,
            cache_size_kib,
            #[cfg(feature = "encryption")]
            key: Mutex::new(key),
            file,
            looked: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Whether the readers keep their snapshot between reads.
    pub(crate) fn keeps_snapshots(&self) -> bool {
        self.file.is_some()
    }

    /// Makes a table the writer has opened readable by the readers.
    pub(crate) fn add_table(&self, sql: Arc<TableSql>) {
        self.tables
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(sql);
    }

    /// A reader for one call: the first free one from this thread's own
    /// slot on; if all are busy, the first to be handed back, waiting at most
    /// the busy timeout ([`Error::Busy`] after it). The wait is for any
    /// reader, never for one in particular: a row callback that reads again
    /// on the same engine holds a reader while it waits for another, and a
    /// wait for its own would never end. Opened here the first time its slot
    /// is used. Under [`burrow_core::driver::without_waiting`], all busy is a
    /// refusal.
    pub(crate) fn take(&self) -> Result<ReaderGuard<'_>> {
        let slot = match self.try_take() {
            Some(g) => g,
            None if burrow_core::driver::waits_refused() => {
                return Err(burrow_core::driver::refuse(ENGINE))
            }
            None => self.wait_for_one()?,
        };
        self.guard(slot)
    }

    /// A free reader if there is one this instant, without waiting.
    pub(crate) fn take_free(&self) -> Result<Option<ReaderGuard<'_>>> {
        self.try_take().map(|slot| self.guard(slot)).transpose()
    }

    /// For a thread that would otherwise read on the writer: a free reader
    /// whose snapshot is the last commit (it reads without a lock), or one
    /// that has seen no commit since it last looked, whose snapshot is worth
    /// beginning (reads come without writes between them). After a commit,
    /// a reader's page cache starts empty, and the writer's is warm: a read
    /// that follows a write is left to the writer.
    pub(crate) fn take_current(&self) -> Result<Option<ReaderGuard<'_>>> {
        let Some(mut slot) = self.try_take() else {
            return Ok(None);
        };
        let worth = match slot.as_mut() {
            None => self.quiet_since_last_look(),
            Some(Reader { keep, conn, .. }) => keep
                .as_mut()
                .is_some_and(|k| (k.current(conn) && !k.file.draining()) || k.quiet()),
        };
        if worth {
            return self.guard(slot).map(Some);
        }
        drop(slot);
        self.handed_back();
        Ok(None)
    }

    /// For a slot with no reader yet: whether no commit was made through
    /// the file's engines since the last time one was found so.
    fn quiet_since_last_look(&self) -> bool {
        let Some(file) = &self.file else {
            return false;
        };
        // Stored one above the count, so that 0 is "never looked".
        let now = file.commits() + 1;
        self.looked.swap(now, Ordering::Relaxed) == now
    }

    /// Ends the snapshots of the readers no one is using.
    pub(crate) fn end_idle_snapshots(&self) {
        for Slot(s) in &*self.slots {
            let mut slot = match s.try_lock() {
                Ok(g) => g,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => continue,
            };
            let failed = match slot.as_mut() {
                Some(Reader {
                    keep: Some(k),
                    conn,
                    ..
                }) if k.holding => k.end(conn).is_err(),
                _ => false,
            };
            if failed {
                // A reader whose snapshot could not be ended is closed,
                // which ends it.
                *slot = None;
            }
            drop(slot);
            self.handed_back();
        }
    }

    /// The guard of a taken slot, its reader opened on first use, its
    /// snapshot the last commit. A reader that cannot begin one is closed
    /// (opened again at its next use).
    fn guard<'a>(&'a self, mut slot: MutexGuard<'a, Option<Reader>>) -> Result<ReaderGuard<'a>> {
        if slot.is_none() {
            *slot = Some(self.open()?);
        }
        if let Some(Reader {
            keep: Some(k),
            conn,
            ..
        }) = slot.as_mut()
        {
            if let Err(e) = k.fresh(conn) {
                *slot = None;
                return Err(eng(e));
            }
        }
        Ok(ReaderGuard {
            pool: self,
            slot: Some(slot),
        })
    }

    fn try_take(&self) -> Option<MutexGuard<'_, Option<Reader>>> {
        let n = self.slots.len();
        let first = home() % n;
        (0..n).find_map(|k| match self.slots[(first + k) % n].0.try_lock() {
            Ok(g) => Some(g),
            // A panic in a caller's row callback leaves the reader as usable
            // as the writer's connection is in that case: its statement was
            // reset when its rows were dropped.
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        })
    }

    /// Waits until a reader is handed back (a blocking wait, not a spin: the
    /// callers holding them are each reading one statement).
    fn wait_for_one(&self) -> Result<MutexGuard<'_, Option<Reader>>> {
        let deadline = Instant::now() + self.busy_timeout;
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&self.waiting);
        let mut lock = self.freed.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            // Tried again under `freed`: a reader handed back after the
            // failed try and before this wait has already signalled, and a
            // signal is sent under the same lock, so none is missed.
            if let Some(g) = self.try_take() {
                return Ok(g);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Busy {
                    engine: ENGINE,
                    waited: self.busy_timeout,
                });
            }
            lock = self
                .freed_cv
                .wait_timeout(lock, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Wakes a caller waiting for a reader, if there is one.
    fn handed_back(&self) {
        // Orders the slot's unlock before the load: paired with the waiter's
        // count before its try, one of the two sees the other.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            let _lock = self.freed.lock().unwrap_or_else(PoisonError::into_inner);
            self.freed_cv.notify_one();
        }
    }

    /// Closes every reader and keeps them all taken until the guards are
    /// dropped: for a change no open reader may outlive (a rekey).
    #[cfg(feature = "encryption")]
    pub(crate) fn close_all(&self) -> Vec<MutexGuard<'_, Option<Reader>>> {
        self.slots
            .iter()
            .map(|s| {
                let mut g = s.0.lock().unwrap_or_else(PoisonError::into_inner);
                *g = None;
                g
            })
            .collect()
    }

    #[cfg(feature = "encryption")]
    pub(crate) fn set_key(&self, key: Option<crate::Key>) {
        *self.key.lock().unwrap_or_else(PoisonError::into_inner) = key;
    }

    fn open(&self) -> Result<Reader> {
        // On the default VFS a reader opens the file read-only. Through
        // unix-excl it opens it read-write, made read-only by
        // `query_only`: unix-excl passes the locks of a read-only handle
        // through to the system (they are not the process's one exclusive
        // lock, kept in memory), and a lock or unlock of one handle replaces
        // the process's lock on the file for every handle: the last reader
        // to let go of the file would release the lock that keeps other
        // processes out while the writer still relies on it.
        let access = if self.vfs.is_some() {
            OpenFlags::SQLITE_OPEN_READ_WRITE
        } else {
            OpenFlags::SQLITE_OPEN_READ_ONLY
        };
        let flags = access | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = match self.vfs {
            Some(vfs) => Connection::open_with_flags_and_vfs(&self.path, flags, vfs),
            None => Connection::open_with_flags(&self.path, flags),
        }
        .map_err(eng)?;
        #[cfg(feature = "encryption")]
        {
            let key = self
                .key
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            if let Some(k) = &key {
                crate::crypt::apply_key(&conn, &self.path, k)?;
            }
        }
        crate::tune(&conn, self.busy_timeout, self.cache_size_kib)?;
        conn.execute_batch("PRAGMA query_only=ON;").map_err(eng)?;
        let keep = match &self.file {
            Some(file) => Some(Keep {
                begin: RawStmt::prepare(&conn, "BEGIN").map_err(eng)?,
                commit: RawStmt::prepare(&conn, "COMMIT").map_err(eng)?,
                file: file.clone(),
                index: None,
                wal: None,
                seen: None,
                holding: false,
                looked: None,
            }),
            None => None,
        };
        Ok(Reader {
            by_id: Vec::new(),
            kept: Kept::default(),
            keep,
            tables: Vec::new(),
            conn: Box::new(conn),
            last_time: TimeText::default(),
        })
    }
}

/// Counts a caller among those waiting for a reader while it waits.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A reader taken for one call; dropping it hands the reader back.
pub(crate) struct ReaderGuard<'a> {
    pool: &'a Readers,
    /// Always `Some(Some(_))` until dropped: `take` opens the reader before
    /// handing it out, and `drop` unlocks the slot before it signals.
    slot: Option<MutexGuard<'a, Option<Reader>>>,
}

impl Drop for ReaderGuard<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.as_mut() {
            let failed = slot
                .as_mut()
                .and_then(|r| Some(r.keep.as_mut()?.handed_back(&r.conn)))
                .is_some_and(|done| done.is_err());
            if failed {
                // Closing the reader ends its transaction.
                **slot = None;
            }
        }
        // Unlocked first: a waiter woken while the slot is still held would
        // find it taken and sleep through the signal meant for it.
        drop(self.slot.take());
        self.pool.handed_back();
    }
}

impl ReaderGuard<'_> {
    pub(crate) fn reader(&mut self) -> &mut Reader {
        self.slot
            .as_mut()
            .and_then(|s| s.as_mut())
            .expect("a taken reader is open")
    }

    /// The index of `table` in the reader's tables, its statements prepared
    /// on its first read; a table the writer has not opened is unknown, as
    /// it is to the writer.
    pub(crate) fn table(&mut self, table: &Table) -> Result<usize> {
        let pool = self.pool;
        let r = self.reader();
        if let Some(t) = find_table(&r.tables, table) {
            return Ok(t);
        }
        let sql = {
            let all = pool.tables.lock().unwrap_or_else(PoisonError::into_inner);
            find_table(&all, table).map(|t| all[t].clone())
        }
        .ok_or_else(|| {
            Error::UnknownTable(format!("{} is not open in this SQLite engine", table.name))
        })?;
        r.by_id
            .push(RawStmt::prepare(&r.conn, &sql.select_by_id).map_err(eng)?);
        r.tables.push(sql);
        Ok(r.tables.len() - 1)
    }
}

impl Reader {
    #[cfg(test)]
    fn conn(&self) -> &Connection {
        &self.conn
    }

    /// The kept statement of `sql`, and the date-time text buffer its binds
    /// use.
    pub(crate) fn kept(&mut self, sql: &str) -> Result<(&mut RawStmt, &mut TimeText)> {
        let stmt = self.kept.get(&self.conn, sql).map_err(eng)?;
        Ok((stmt, &mut self.last_time))
    }

    pub(crate) fn sql(&self, t: usize) -> &TableSql {
        &self.tables[t]
    }

    /// The by-ID statement of table `t`, and the date-time text buffer.
    pub(crate) fn by_id(&mut self, t: usize) -> (&mut RawStmt, &mut TimeText) {
        (&mut self.by_id[t], &mut self.last_time)
    }
}

/// The reader pool's own checks: a reader refuses to write, whatever it is
/// asked, on both VFS a pool opens files with.
#[cfg(test)]
mod test {
    use super::*;

    fn wal_pool(dir: &tempfile::TempDir, count: usize, timeout: Duration) -> Readers {
        let path = dir.path().join("w.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t(x);")
            .unwrap();
        Readers::new(
            count,
            path,
            None,
            timeout,
            None,
            #[cfg(feature = "encryption")]
            None,
            None,
        )
    }

    /// A thread holding a reader that asks for another (a row callback
    /// reading again) gets the first one handed back by anyone, not a wait
    /// for a slot it holds itself.
    #[test]
    fn a_nested_take_waits_for_any_reader_not_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let pool = wal_pool(&dir, 2, Duration::from_secs(30));
        let mine = pool.take().unwrap();
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let other = pool.take().unwrap();
                held_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(150));
                drop(other);
            });
            held_rx.recv().unwrap();
            let start = Instant::now();
            let again = pool.take().unwrap();
            assert!(start.elapsed() < Duration::from_secs(10));
            drop(again);
        });
        drop(mine);
    }

    /// Every reader held by the caller itself: the wait ends at the busy
    /// timeout with `Busy`, and a reader handed back is taken again.
    #[test]
    fn all_readers_held_is_busy_after_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let pool = wal_pool(&dir, 1, Duration::from_millis(100));
        let mine = pool.take().unwrap();
        let start = Instant::now();
        let e = pool.take().err().expect("no reader is free");
        assert!(matches!(e, Error::Busy { .. }), "{e}");
        assert!(start.elapsed() >= Duration::from_millis(100));
        drop(mine);
        assert!(pool.take().is_ok());
    }

    #[test]
    fn a_reader_cannot_write() {
        for vfs in [None, Some("unix-excl")] {
            if vfs.is_some() && !cfg!(unix) {
                continue;
            }
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("r.db");
            let writer = match vfs {
                Some(v) => Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), v),
                None => Connection::open(&path),
            }
            .unwrap();
            writer
                .execute_batch(
                    "PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);",
                )
                .unwrap();
            let pool = Readers::new(
                1,
                path.clone(),
                vfs,
                Duration::from_secs(1),
                None,
                #[cfg(feature = "encryption")]
                None,
                None,
            );
            let mut g = pool.take().unwrap();
            let conn = g.reader().conn();
            let n: i64 = conn
                .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .unwrap();
            assert_eq!(n, 1, "{vfs:?}");
            for sql in [
                "INSERT INTO t VALUES (2)",
                "DELETE FROM t",
                "CREATE TABLE u(y)",
            ] {
                let e = conn.execute(sql, []).unwrap_err();
                assert_eq!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::ReadOnly),
                    "{vfs:?} {sql}: {e}"
                );
            }
            drop(g);
            let n: i64 = writer
                .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .unwrap();
            assert_eq!(n, 1, "{vfs:?}");
        }
    }
}
