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
//! A kept snapshot holds one of the WAL index's read marks, and the log
//! starts again from its beginning only when a writer finds every frame
//! checkpointed and no read mark taken: readers that keep snapshots at all
//! times would let it grow with every commit. So every commit made through
//! a [`crate::SqliteEngine`] on the file in this process (its
//! `sqlite3_wal_hook`, [`CommitHook`], on every engine of this process that
//! has the file open: [`SameFile`]) ends the snapshots of the readers idle
//! at that moment; and once a commit leaves the log at the auto-checkpoint
//! size, the file's readers *drain*: until a commit finds the log started
//! again, each ends its read transaction when it is handed back, and reads
//! without one, as without kept snapshots, so that the checkpoint can reach
//! the log's end and the next writer restart it. Readers that never all
//! pause at once can still keep a passive checkpoint short of the end, so a
//! log grown to twice its size is checkpointed waiting (briefly) for the
//! reads under way: with reads by ID, the `-wal` file stays near two to
//! three times the auto-checkpoint size however many threads read. A read
//! longer than that wait (a long scan) holds the log as it would without
//! kept snapshots, and the next waiting checkpoint comes once the log has
//! doubled. A checkpoint that copies the whole log ends the draining at
//! once (a snapshot begun then reads none of the log). A caller's own use of the writer's
//! connection (`with_connection`) drains them too, for a checkpoint that
//! truncates the log. That is why snapshots are kept only when no other
//! process can open the file: another process's commits would reach no hook
//! here. Nor do commits of this process made around the engines (another
//! connection of its own): reads see them (the header changes), but an
//! idle reader's snapshot keeps the log from starting again until an
//! engine's next commit (a restore through the engine ends them itself).
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
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use rusqlite::{ffi, Connection};

use crate::raw::RawStmt;
use crate::readers::Readers;

/// The words of the WAL index header: 48 bytes.
const HEADER_WORDS: usize = 12;
/// The size SQLite maps the WAL index in (`WALINDEX_PGSZ`).
const INDEX_REGION: c_int = 32768;
/// The header's version word (`iVersion`) in a WAL index SQLite has
/// built; a region it has not (a file not in WAL mode) holds zeros.
const INDEX_VERSION: u32 = 3_007_000;
/// The word whose low byte is `isInit`, 1 once the header is built.
const INIT_WORD: usize = 3;
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
        // keeps it only that long). Other connections write it with plain
        // stores; it is read atomically, word by word, the way SQLite's own
        // readers read it (a read torn by a commit in progress differs from
        // the header kept, and only begins a snapshot again).
        unsafe { AtomicU32::from_ptr(self.0.as_ptr().add(i)) }.load(Ordering::Relaxed)
    }

    /// The header's first copy, the one a commit writes last, if SQLite
    /// has built it (else nothing tells whether a commit was made).
    pub(crate) fn header(self) -> Option<Header> {
        let h: Header = std::array::from_fn(|i| self.word(i));
        (h[0] == INDEX_VERSION && h[INIT_WORD].to_ne_bytes()[0] == 1).then_some(h)
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
    /// Commits made through the file's engines: whether any was made
    /// between two reads of a thread decides where it reads.
    commits: AtomicU64,
    /// Set by a commit that left the log at the auto-checkpoint size,
    /// cleared by one that found it started again.
    log_full: AtomicBool,
    /// Callers' own uses of a writer connection under way.
    own_uses: AtomicUsize,
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
            commits: AtomicU64::new(0),
            log_full: AtomicBool::new(false),
            own_uses: AtomicUsize::new(0),
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

    /// Whether readers end their read transaction when handed back, and
    /// read without one, so that the log can be checkpointed to its end
    /// and started again.
    pub(crate) fn draining(&self) -> bool {
        self.log_full.load(Ordering::Relaxed) || self.own_uses.load(Ordering::Relaxed) > 0
    }

    /// How many commits the file's engines have made.
    pub(crate) fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// A commit through an engine of the file, leaving the log full (at the
    /// auto-checkpoint size) or not.
    fn committed(&self, log_full: bool) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.log_full.store(log_full, Ordering::Relaxed);
        self.end_idle_snapshots();
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
    /// The connection's busy timeout, in milliseconds, set back after a
    /// checkpoint that waited less (as last set: through the options, or a
    /// `PRAGMA busy_timeout` run through `with_connection`).
    busy_ms: Cell<c_int>,
    /// The log's size in frames at which the next checkpoint waits for the
    /// reads under way (see [`committed`]).
    wait_at: Cell<c_int>,
}

/// How long a checkpoint of a log grown to [`STARVED`] times its
/// auto-checkpoint size waits for the reads under way: long enough for any
/// read by ID or page of a list, short enough that a long scan holds up
/// the commit that called it by no more than this.
const STARVED_WAIT_MS: c_int = 100;
/// See [`STARVED_WAIT_MS`].
const STARVED: c_int = 2;

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
    let every = state.autocheckpoint.get();
    let full = every > 0 && frames >= every;
    // A panic must not unwind into SQLite; the commit itself is done, and
    // a snapshot left open is ended at its reader's next read.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        state.file.committed(full);
    }));
    if !full {
        state.wait_at.set(every.saturating_mul(STARVED));
        return ffi::SQLITE_OK;
    }
    let (mut log, mut copied) = (0, 0);
    // SAFETY (all calls): called back by SQLite on this connection, as
    // SQLite's own hook calls its checkpoint; a checkpoint that cannot
    // finish now returns busy, and a later commit tries again.
    if frames < state.wait_at.get() {
        unsafe {
            ffi::sqlite3_wal_checkpoint_v2(
                db,
                schema,
                ffi::SQLITE_CHECKPOINT_PASSIVE,
                &mut log,
                &mut copied,
            )
        };
    } else {
        // The log has grown to several times its size: readers that never
        // all pause at once (each holds a read mark while it reads) keep a
        // passive checkpoint from reaching its end, and the log from
        // starting again. This one waits, briefly, until every read under
        // way has moved to the last commit (the readers drain meanwhile, so
        // none holds a snapshot between reads), then the next commit starts
        // the log again. A read longer than the wait (a long scan) holds
        // the log as it would without kept snapshots: the next try waits
        // until the log has doubled, so that such reads cost the writer a
        // wait of 100 ms at most once per doubling, not once per 1,000
        // frames.
        state
            .wait_at
            .set(frames.saturating_mul(2).max(frames.saturating_add(every)));
        let busy = state.busy_ms.get();
        unsafe {
            ffi::sqlite3_busy_timeout(db, STARVED_WAIT_MS.min(busy));
            ffi::sqlite3_wal_checkpoint_v2(
                db,
                schema,
                ffi::SQLITE_CHECKPOINT_RESTART,
                &mut log,
                &mut copied,
            );
            ffi::sqlite3_busy_timeout(db, busy);
        }
    }
    if log >= 0 && copied == log {
        // Every frame is in the database file: a snapshot begun now reads
        // none of the log and holds no read mark that stops it starting
        // again, so the readers keep snapshots again at once, not only from
        // the next commit (which may be long in coming after a burst).
        state.file.log_full.store(false, Ordering::Relaxed);
    }
    ffi::SQLITE_OK
}

impl CommitHook {
    /// Sets the hook on the writer connection of the file `file`.
    pub(crate) fn set(conn: &Connection, file: Arc<SameFile>, busy: Duration) -> CommitHook {
        let state = Box::new(HookState {
            file,
            autocheckpoint: Cell::new(DEFAULT_AUTOCHECKPOINT),
            busy_ms: Cell::new(c_int::try_from(busy.as_millis()).unwrap_or(c_int::MAX)),
            wait_at: Cell::new(DEFAULT_AUTOCHECKPOINT * STARVED),
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

    fn file(&self) -> &SameFile {
        // SAFETY: the state is live while the hook is; `file` is only read.
        &unsafe { self.0.as_ref() }.file
    }

    /// Ends the file's idle snapshots, as a commit does.
    pub(crate) fn end_idle_snapshots(&self) {
        self.file().end_idle_snapshots();
    }

    /// Runs a caller's own code on the writer's connection `conn`. The
    /// file's readers drain meanwhile (a checkpoint that truncates the log
    /// waits only for the reads under way, as without kept snapshots), and
    /// the hook is set again afterwards, even if `f` panics: a `PRAGMA
    /// wal_autocheckpoint` run there replaced it with SQLite's own.
    pub(crate) fn around<R>(&self, conn: &Connection, f: impl FnOnce(&Connection) -> R) -> R {
        struct Use<'a>(&'a CommitHook, &'a Connection);
        impl Drop for Use<'_> {
            fn drop(&mut self) {
                self.0.reinstate(self.1);
                self.0.file().own_uses.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.file().own_uses.fetch_add(1, Ordering::Relaxed);
        let _use = Use(self, conn);
        self.end_idle_snapshots();
        f(conn)
    }

    /// After the caller's own use of the connection: a `PRAGMA
    /// wal_autocheckpoint` made there replaced this hook with SQLite's
    /// own, so it is set again, with the size asked for.
    fn reinstate(&self, conn: &Connection) {
        // Reads the size only while SQLite's hook is the one set (0 when
        // this one is): taken before the hook is set again.
        let asked: c_int = conn
            .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
            .unwrap_or(DEFAULT_AUTOCHECKPOINT);
        // SAFETY: the state is live; only this thread uses it now.
        let state = unsafe { self.0.as_ref() };
        if self.install(conn) != self.0.as_ptr().cast::<c_void>() {
            state.autocheckpoint.set(asked);
            state.wait_at.set(asked.saturating_mul(STARVED));
        }
        // The busy timeout a checkpoint sets back: the caller's, if it set
        // one.
        if let Ok(ms) = conn.query_row("PRAGMA busy_timeout", [], |r| r.get::<_, c_int>(0)) {
            state.busy_ms.set(ms);
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
