//! Readers that keep their WAL snapshot between reads, on a file no other
//! process can open ([`crate::SqliteOptions::one_process`]).
//!
//! Beginning and ending a WAL read transaction is about half of a read by
//! ID, and it takes locks every connection of the file shares: two in the
//! WAL index's lock table, three memory barriers under the unix VFS's
//! global mutex. Threads reading side by side pass those locks' cache lines
//! from processor to processor at every read, so two threads read little
//! faster than one. A reader that keeps its read transaction open between
//! reads skips all of it, for as long as nothing is committed: every commit
//! rewrites the header at the start of the WAL index, so a header equal to
//! the one read before the snapshot began means the snapshot is still the
//! last commit. That check is a few loads from memory every connection of
//! the file shares, written under SQLite's own barriers.
//!
//! A snapshot kept while its reader is idle would stop the WAL from
//! restarting: checkpoints cannot copy the frames committed after it, and
//! the log would grow with every write. So every commit of a writer of the
//! file in this process (its `sqlite3_wal_hook`, [`CommitHook`]) ends the
//! snapshots of the readers idle at that moment, on every engine of this
//! process that has the file open ([`SameFile`]). That is why snapshots are
//! kept only when no other process can open the file: another process's
//! commits would reach no hook here.
//!
//! The WAL index header's layout (48 bytes, written twice, the copy at
//! offset 0 last) is part of SQLite's documented file format
//! (<https://sqlite.org/walformat.html>), shared by every version that
//! opens the same file.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use rusqlite::{ffi, Connection};

use crate::raw::RawStmt;
use crate::readers::Readers;

/// The words of the WAL index header: 48 bytes.
const HEADER_WORDS: usize = 12;
/// The size SQLite maps the WAL index in (`WALINDEX_PGSZ`).
const INDEX_REGION: c_int = 32768;
/// The word of the header that every write of it changes (`iChange`).
pub(crate) const CHANGE_WORD: usize = 2;
/// SQLite's own auto-checkpoint, which the commit hook replaces: a passive
/// checkpoint after a commit that leaves the log at 1,000 frames or more.
const DEFAULT_AUTOCHECKPOINT: c_int = 1000;
const MAIN: &std::ffi::CStr = c"main";

/// The header of a file's WAL index, where a connection of the file maps it.
#[derive(Clone, Copy)]
pub(crate) struct WalIndex(NonNull<u32>);

/// One reading of the WAL index header.
pub(crate) type Header = [u32; HEADER_WORDS];

impl WalIndex {
    /// Where `conn` maps the WAL index, once it has a read transaction
    /// open (before that, it may have mapped nothing yet). The mapping is
    /// the connection's until it closes (or leaves WAL mode, which a
    /// reader cannot do), so it is asked for once.
    ///
    /// The connection is `stmt`'s, which its owner uses alone.
    pub(crate) fn of(stmt: &RawStmt) -> Option<WalIndex> {
        let db = stmt.db();
        // SAFETY: a statement's connection is live while it is, and used by
        // the statement's owner alone; the file pointer SQLite hands out is its main
        // database file, valid while the connection is open; `xShmMap` of
        // region 0 with `bExtend` 0 returns the region the connection's WAL
        // already maps (a read transaction is open, so the WAL is).
        unsafe {
            if ffi::sqlite3_txn_state(db, MAIN.as_ptr()) != ffi::SQLITE_TXN_READ {
                return None;
            }
            let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
            let rc = ffi::sqlite3_file_control(
                db,
                MAIN.as_ptr(),
                ffi::SQLITE_FCNTL_FILE_POINTER,
                std::ptr::from_mut(&mut file).cast(),
            );
            if rc != ffi::SQLITE_OK || file.is_null() {
                return None;
            }
            let methods = (*file).pMethods;
            if methods.is_null() || (*methods).iVersion < 2 {
                return None;
            }
            let map = (*methods).xShmMap?;
            let mut region: *mut c_void = std::ptr::null_mut();
            if map(file, 0, INDEX_REGION, 0, &mut region) != ffi::SQLITE_OK {
                return None;
            }
            NonNull::new(region.cast()).map(WalIndex)
        }
    }

    fn word(self, i: usize) -> u32 {
        // SAFETY: the region is at least 48 bytes, aligned for its words,
        // and mapped while the connection it came from is open (its owner
        // keeps it only that long); other connections write it, so it is
        // read atomically.
        unsafe { AtomicU32::from_ptr(self.0.as_ptr().add(i)) }.load(Ordering::Relaxed)
    }

    /// The header's first copy, the one a commit writes last.
    pub(crate) fn header(self) -> Header {
        std::array::from_fn(|i| self.word(i))
    }

    /// The header's change counter: different after every commit.
    pub(crate) fn change(self) -> u32 {
        self.word(CHANGE_WORD)
    }
}

// SAFETY: a `WalIndex` is only read through, atomically; its owner keeps
// it no longer than the connection that mapped it.
unsafe impl Send for WalIndex {}

/// What identifies a file: its device and inode (one file under any of its
/// names, as SQLite's unix VFS identifies it).
#[cfg(unix)]
type FileId = (u64, u64);
#[cfg(not(unix))]
type FileId = std::path::PathBuf;

#[cfg(unix)]
fn file_id(path: &Path) -> std::io::Result<FileId> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    Ok((m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn file_id(path: &Path) -> std::io::Result<FileId> {
    std::fs::canonicalize(path)
}

/// The engines of this process that have one WAL file open: each writer's
/// commits end the idle snapshots of every engine's readers.
pub(crate) struct SameFile {
    id: FileId,
    /// How many readers of the file keep a snapshot: a commit while none
    /// does has nothing to end (one load, not a lock, per commit).
    held: AtomicUsize,
    pools: Mutex<Vec<Weak<Readers>>>,
}

/// Every WAL file open in this process, by identity.
static FILES: Mutex<Vec<Weak<SameFile>>> = Mutex::new(Vec::new());

impl SameFile {
    /// The shared record of the file at `path`, made on its first open.
    pub(crate) fn of(path: &Path) -> std::io::Result<Arc<SameFile>> {
        let id = file_id(path)?;
        let mut files = FILES.lock().unwrap_or_else(PoisonError::into_inner);
        files.retain(|f| f.strong_count() > 0);
        if let Some(f) = files.iter().filter_map(Weak::upgrade).find(|f| f.id == id) {
            return Ok(f);
        }
        let f = Arc::new(SameFile {
            id,
            held: AtomicUsize::new(0),
            pools: Mutex::new(Vec::new()),
        });
        files.push(Arc::downgrade(&f));
        Ok(f)
    }

    /// Lets this file's commits end the idle snapshots of `pool`.
    pub(crate) fn add_pool(&self, pool: &Arc<Readers>) {
        let mut pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        pools.retain(|p| p.strong_count() > 0);
        pools.push(Arc::downgrade(pool));
    }

    /// A reader began keeping a snapshot.
    pub(crate) fn held(&self) {
        self.held.fetch_add(1, Ordering::AcqRel);
    }

    /// A reader ended the snapshot it kept.
    pub(crate) fn let_go(&self) {
        self.held.fetch_sub(1, Ordering::AcqRel);
    }

    /// Ends the snapshot of every idle reader of the file (one in use ends
    /// its own at its next read, or here at the next commit).
    pub(crate) fn end_idle_snapshots(&self) {
        if self.held.load(Ordering::Acquire) == 0 {
            return;
        }
        let pools: Vec<Arc<Readers>> = self
            .pools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for p in pools {
            p.end_idle_snapshots();
        }
    }
}

/// The writer's commit hook: ends the file's idle snapshots, then
/// checkpoints as SQLite's own auto-checkpoint would (a WAL hook replaces
/// it). Owned by the writer's [`crate::Inner`], dropped after its
/// connection, and reached only through the raw pointer SQLite keeps.
pub(crate) struct CommitHook(NonNull<HookState>);

struct HookState {
    file: Arc<SameFile>,
    /// Frames in the log that make a commit checkpoint (0: never).
    autocheckpoint: Cell<c_int>,
}

// SAFETY: the state is used only on the thread that holds the writer's
// connection (its commit hook runs inside its calls), which the engine's
// mutex makes one at a time; `file` is `Sync`.
unsafe impl Send for CommitHook {}

unsafe extern "C" fn committed(
    arg: *mut c_void,
    db: *mut ffi::sqlite3,
    schema: *const c_char,
    frames: c_int,
) -> c_int {
    // SAFETY: `arg` is the live `HookState` this hook was set with; it is
    // freed only after the connection that calls the hook has closed.
    let state = unsafe { &*arg.cast::<HookState>() };
    // A panic must not unwind into SQLite; the commit itself is done, and
    // a snapshot left open is ended at its reader's next read.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        state.file.end_idle_snapshots();
    }));
    let every = state.autocheckpoint.get();
    if every > 0 && frames >= every {
        // SAFETY: called back by SQLite on this connection, as SQLite's own
        // hook does; a checkpoint that cannot run now returns busy, which
        // the next commit retries.
        unsafe { ffi::sqlite3_wal_checkpoint(db, schema) };
    }
    ffi::SQLITE_OK
}

impl CommitHook {
    /// Sets the hook on the writer connection of the file `file`.
    pub(crate) fn set(conn: &Connection, file: Arc<SameFile>) -> CommitHook {
        let state = Box::new(HookState {
            file,
            autocheckpoint: Cell::new(DEFAULT_AUTOCHECKPOINT),
        });
        let hook = CommitHook(NonNull::from(Box::leak(state)));
        hook.install(conn);
        hook
    }

    /// Installs the hook; the argument of the hook it replaces.
    fn install(&self, conn: &Connection) -> *mut c_void {
        // SAFETY: the handle is live; the state outlives the connection.
        unsafe {
            ffi::sqlite3_wal_hook(
                conn.handle(),
                Some(committed),
                self.0.as_ptr().cast::<c_void>(),
            )
        }
    }

    /// Ends the file's idle snapshots, as a commit does.
    pub(crate) fn end_idle_snapshots(&self) {
        // SAFETY: the state is live; only this thread uses it now.
        unsafe { self.0.as_ref() }.file.end_idle_snapshots();
    }

    /// After the caller's own use of the connection: a `PRAGMA
    /// wal_autocheckpoint` made there replaced this hook with SQLite's
    /// own, so it is set again, with the size asked for.
    pub(crate) fn reinstate(&self, conn: &Connection) {
        // Reads the size only while SQLite's hook is the one set (0 when
        // this one is): taken before the hook is set again.
        let asked: c_int = conn
            .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
            .unwrap_or(DEFAULT_AUTOCHECKPOINT);
        if self.install(conn) != self.0.as_ptr().cast::<c_void>() {
            // SAFETY: the state is live; only this thread uses it now.
            unsafe { self.0.as_ref() }.autocheckpoint.set(asked);
        }
    }
}

impl Drop for CommitHook {
    fn drop(&mut self) {
        // SAFETY: made by `Box::leak` in `set`; the connection that called
        // the hook is closed (the hook is declared after it).
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}
