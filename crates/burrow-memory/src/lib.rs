//! Burrow's in-memory storage engine.
//!
//! [`MemoryEngine`] holds whole tables in memory behind the same
//! [`burrow_core::Storage`] trait as SQLite, so any table of a model can live
//! here while the others stay in SQLite:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use burrow_core::{Database, Model};
//! # fn demo(model: Model, sqlite: Arc<dyn burrow_core::Storage>) -> burrow_core::Result<()> {
//! use burrow_memory::{MemoryEngine, MemoryOptions};
//! let memory = Arc::new(MemoryEngine::open(MemoryOptions::file("sessions.bmem"))?);
//! let client = Database::builder(model).default_engine(sqlite).place::<Session>(memory).open()?;
//! # Ok(()) }
//! # #[derive(burrow_derive::Record)] #[burrow(crate = "burrow_core")] struct Session { id: i64 }
//! ```
//!
//! # Rows and indexes
//!
//! A row is one byte string: a NULL bitmap, the fixed-width fields in place,
//! then the text and blob bytes; reading a field borrows from it, and dates,
//! times and amounts come back typed, without parsing. Rows are copied into
//! 64 KiB chunks shared by their neighbours rather than allocated one by one;
//! the bytes of updated and deleted rows are reclaimed when half of a table's
//! are garbage, by copying the live rows into fresh chunks (never inside a
//! transaction). NaN is
//! refused ([`burrow_core::Error::BadInput`], nothing written), as the SQLite
//! engine refuses it rather than store it as NULL. Every table
//! has a hashed index on the ID, one on each `unique` field (enforced: a
//! duplicate is an [`burrow_core::Error::UniqueViolation`] and changes nothing,
//! for inserts, updates and batch items alike) and one on each `indexed` field.
//! IDs are given out above the highest ever stored, never reused after a
//! delete; the high-water mark is saved with the table. Once `i64::MAX` has been
//! stored no ID is left to give: an add without an explicit ID is then a
//! [`burrow_core::Error::BadInput`] saying so (per item in a batch), and adds
//! nothing; explicit IDs still work.
//!
//! # Versions of a record
//!
//! Two record types with the same table name are two versions of one table,
//! and both can be opened on one engine: opening the second adds the fields the
//! table lacks (existing rows get NULL, or the type's zero value when NOT NULL,
//! as SQLite's `ADD COLUMN` gives) and the indexes it asks for (duplicates in a
//! field it makes unique are a [`burrow_core::Error::Schema`]); nothing is
//! dropped. Each version sees the table through its own fields, matched by
//! name: reads give its fields, its inserts give the fields it lacks their
//! defaults, its updates leave them alone. A field whose kind changed is a
//! [`burrow_core::Error::Schema`], except an `i32` or `u32` widened to `i64`
//! (an `i64` and a reference are the same integer). A failed change leaves the
//! table as it was. Opening a version is a call on the engine, so it waits for
//! an open transaction to end (its undo log holds rows in their old form).
//!
//! # Queries
//!
//! Every WHERE the ORM parses is evaluated by [`burrow_core::eval`], with SQLite's
//! semantics (NULLs, typed comparisons, `LIKE`), so answers equal SQLite's on the
//! same data. An `=` or `IN` on the ID or an indexed field, alone or as a term of
//! a top-level AND, is answered through its index; anything else scans. Rows
//! come in ID order unless ORDER BY says otherwise (any columns, NULLs first
//! ascending); LIMIT/OFFSET, `count` and `select_value` follow SQLite.
//!
//! As a client's default engine it answers one-table SQL (`Orm::sql_list`):
//! `SELECT * FROM T [WHERE …] [ORDER BY …] [LIMIT n [OFFSET m]]`, the WHERE
//! parsed and evaluated as above, the rows read straight from the table, or
//! from the engine a table was placed on. Joins, aggregates and column lists
//! are [`burrow_core::Error::Unsupported`]: a SQLite default engine runs them.
//!
//! # Concurrency and transactions
//!
//! The tables sit behind one `RwLock`: reads run in parallel, each write (or a
//! whole batch) holds the write lock. A call made on the engine is its own
//! transaction. [`Storage::begin`] hands out a [`MemoryTx`]: the calls made
//! through it run inside its transaction and see its writes, and it ends when
//! committed, rolled back, or dropped (which rolls back). One transaction is
//! open at a time: while it is, every other caller (calls on the engine, a
//! second `begin`, [`MemoryEngine::flush`]) waits for it to end, at most
//! [`MemoryOptions::lock_timeout`], and then fails with
//! [`burrow_core::Error::Busy`], having done nothing. Whoever holds a
//! transaction makes its calls through it: a call on the engine meanwhile
//! waits for that very transaction and ends in `Busy`. Writes in a
//! transaction keep an undo log (the old bytes of updated and deleted rows,
//! moved rather than copied), so a rollback, or a batch with
//! rollback-on-error, leaves nothing behind. Outside a transaction nothing is
//! logged. A read callback must not call back into the engine.
//!
//! # Persistence
//!
//! With [`MemoryOptions::path`] set, the file is loaded on open (a truncated or
//! corrupted file is refused whole, with a [`FileError`] naming it) and written
//! by [`MemoryEngine::flush`], on drop, and, when
//! [`MemoryOptions::save_on_commit`] is set, after each commit that wrote
//! something and each batch run on the engine itself. It is written to
//! `<file>.tmp`, synced, renamed over the file and the folder synced, so a
//! crash leaves the previous file or the new one; it only ever holds committed
//! data. The binary form is zstd-compressed with a
//! CRC-32 in its header (`docs/memory-format.md`); the JSON form is one
//! readable document with a CRC-32 member at its end. Tables in the file that
//! no record claims are kept and written back; fields the record no longer
//! declares are kept too, and new ones get NULL or the type's zero value, as
//! SQLite's `ADD COLUMN` would give; kinds change only as between versions on
//! one engine (above).
//!
//! # Backup
//!
//! [`MemoryEngine::backup`] and [`MemoryEngine::backup_gz`] write one
//! committed state in the file format, as a save does, to another path, while
//! the engine serves; [`MemoryEngine::open_backup`] opens an engine from a
//! backup (plain or gzip), checked whole first: a truncated or corrupted one is
//! a [`burrow_core::Error::BadInput`] naming it. `docs/backup.md` has the
//! figures and what a crash can lose.

mod arena;
mod backup;
#[doc(hidden)]
pub mod fuzzing;
mod ids;
mod layout;
mod options;
mod persist;
mod query;
mod sql;
mod table;

use std::ops::Deref;
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{
    Arc, Condvar, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError,
    TryLockResult,
};
use std::time::Instant;

use burrow_core::driver::{apply_each, holding, next_tx_token};
use burrow_core::eval::column;
use burrow_core::{
    BatchItem, BatchOp, BatchResult, Caps, Column, EngineTx, Error, Fields, Filter, Result, Row,
    RowOps, Select, SqlHost, Storage, Table, Value,
};

pub use options::{FileFormat, MemoryOptions};
pub use persist::FileError;

use arena::RowBytes;
use layout::{Layout, SlotSpec};
use persist::{FileTable, Source};
use table::{check_kind, spec, Meta, Stored, TableData, View};

pub(crate) const ENGINE: &str = "memory";

/// The in-memory storage engine. Share it as `Arc<MemoryEngine>`.
pub struct MemoryEngine {
    state: RwLock<State>,
    /// The token of the open transaction, 0 for none: a copy of
    /// `State::owner` that waiting callers read without the state lock.
    owner: AtomicU64,
    /// Pairs with `tx_ended`: the owner is cleared before it is taken, so a
    /// waiter checking the owner under it cannot miss the wake-up.
    tx_wait: Mutex<()>,
    /// Signalled when a transaction ends.
    tx_ended: Condvar,
    /// The generation last written to the file; held while writing, so that
    /// writes do not overlap. Never held while taking `state`.
    saved: Mutex<u64>,
    options: MemoryOptions,
    /// Tables of other engines its one-table SQL reads ([`SqlHost::expose`]).
    exposed: Mutex<Vec<(&'static Table, Arc<dyn Storage>)>>,
}

enum Undo {
    /// Rows inserted into slots `from..from + n` (consecutive inserts share one entry).
    Inserts {
        t: usize,
        from: u32,
        n: u32,
    },
    Update {
        t: usize,
        slot: u32,
        old: RowBytes,
    },
    Delete {
        t: usize,
        slot: u32,
        row: Stored,
    },
}

struct State {
    tables: Vec<TableData>,
    /// Tables read from the file that no `ensure_table` has claimed yet.
    pending: Vec<FileTable>,
    /// The token of the open transaction's [`MemoryTx`].
    owner: Option<u64>,
    undo: Vec<Undo>,
    /// The tables' metadata when the transaction began.
    metas: Vec<Meta>,
    /// The row being encoded.
    scratch: Vec<u8>,
    /// Bumped by every change; compared with the saved one to skip useless saves.
    generation: u64,
}

/// One committed state's tables, their rows shared with the live ones.
struct Frozen {
    tables: Vec<FileTable>,
    generation: u64,
}

/// The file's contents for one committed state, not yet written.
struct Snapshot {
    bytes: Vec<u8>,
    generation: u64,
}

impl Default for MemoryEngine {
    fn default() -> Self {
        MemoryEngine::new()
    }
}

impl MemoryEngine {
    /// An engine whose data lives in memory only.
    pub fn new() -> Self {
        MemoryEngine::with_tables(MemoryOptions::memory(), Vec::new())
    }

    /// Opens an engine with these options, loading its file if it has one and
    /// the file exists. A file that cannot be loaded whole is refused with an
    /// error naming it (a [`FileError`] inside [`burrow_core::Error::Engine`]).
    pub fn open(options: MemoryOptions) -> Result<Self> {
        let mut pending = Vec::new();
        if let Some(path) = &options.path {
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            if !dir.is_dir() {
                return Err(Error::Io(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("the folder of {} does not exist", path.display()),
                )));
            }
            if let Some(tables) = persist::load(path)? {
                pending = tables;
            }
            // What an interrupted save left behind: never a committed state.
            let _ = std::fs::remove_file(persist::temp_path(path));
        }
        Ok(MemoryEngine::with_tables(options, pending))
    }

    fn with_tables(options: MemoryOptions, pending: Vec<FileTable>) -> Self {
        MemoryEngine {
            state: RwLock::new(State {
                tables: Vec::new(),
                pending,
                owner: None,
                undo: Vec::new(),
                metas: Vec::new(),
                scratch: Vec::new(),
                generation: 0,
            }),
            owner: AtomicU64::new(0),
            tx_wait: Mutex::new(()),
            tx_ended: Condvar::new(),
            saved: Mutex::new(0),
            options,
            exposed: Mutex::new(Vec::new()),
        }
    }

    /// The options it was opened with.
    pub fn options(&self) -> &MemoryOptions {
        &self.options
    }

    /// Writes the file now, if the engine has one and anything changed since the
    /// last save. The file only ever holds committed data, so while a
    /// transaction is open this waits for it to end, as a call on the engine
    /// does: at most [`MemoryOptions::lock_timeout`], then
    /// [`Error::Busy`] (from the thread holding the transaction, end it first).
    pub fn flush(&self) -> Result<()> {
        if self.options.path.is_none() {
            return Ok(());
        }
        let last = *self.saved.lock().unwrap_or_else(PoisonError::into_inner);
        let frozen = {
            let g = self.read(None)?;
            if g.generation == last {
                return Ok(());
            }
            Self::freeze(&g)
        };
        // Encoded, compressed and written outside the lock: readers and
        // writers go on.
        self.store(self.snapshot(frozen)?)
    }

    /// One committed state, taken under the lock: its rows are shared,
    /// not encoded (see [`TableData::frozen`]); [`MemoryEngine::snapshot`]
    /// encodes it once the lock is released.
    fn freeze(st: &State) -> Frozen {
        let mut tables: Vec<FileTable> = Vec::with_capacity(st.tables.len() + st.pending.len());
        tables.extend(st.tables.iter().map(TableData::frozen));
        tables.extend(st.pending.iter().cloned());
        Frozen {
            tables,
            generation: st.generation,
        }
    }

    /// The file's contents for a frozen committed state.
    fn snapshot(&self, frozen: Frozen) -> Result<Snapshot> {
        let Frozen {
            mut tables,
            generation,
        } = frozen;
        for t in &mut tables {
            t.sort();
        }
        let sources: Vec<&dyn Source> = tables.iter().map(|t| t as &dyn Source).collect();
        let bytes = match self.options.format {
            FileFormat::Binary => persist::binary_payload(&sources),
            FileFormat::Json => persist::json_file(&sources)?,
        };
        Ok(Snapshot { bytes, generation })
    }

    /// Writes a snapshot to the file, unless a later one is already there
    /// (two savers may finish in either order).
    fn store(&self, snapshot: Snapshot) -> Result<()> {
        let Some(path) = self.options.path.as_deref() else {
            return Ok(());
        };
        let mut saved = self.saved.lock().unwrap_or_else(PoisonError::into_inner);
        if *saved >= snapshot.generation {
            return Ok(());
        }
        match self.options.format {
            FileFormat::Binary => {
                let (header, stored) =
                    persist::binary_file(&snapshot.bytes, self.options.zstd_level)?;
                drop(snapshot.bytes);
                persist::write_atomic(path, &[&header, &stored])?;
            }
            FileFormat::Json => persist::write_atomic(path, &[&snapshot.bytes])?,
        }
        *saved = snapshot.generation;
        Ok(())
    }

    /// Locks for reading, for a call of transaction `tx` or, for `None`, for
    /// a call of the engine's own once no transaction is open.
    #[inline]
    fn read(&self, tx: Option<u64>) -> Result<Marked<RwLockReadGuard<'_, State>>> {
        if holding(&self.state) {
            return self.read_nested(tx);
        }
        let g = if tx.is_none() && burrow_core::driver::waits_refused() {
            lock_now(self.state.try_read())?
        } else {
            self.lock(tx, || {
                self.state.read().unwrap_or_else(PoisonError::into_inner)
            })?
        };
        Ok(Marked::new(&self.state, g))
    }

    /// A read from a row callback of this thread's own read (writes run no
    /// callbacks, so the lock is held for reading). Another read lock is
    /// taken only if it is free this instant: a writer queued behind the
    /// outer read keeps new readers out until the outer read ends, which
    /// waits for this one. A call of the engine's own would also wait for
    /// the transaction the outer read belongs to.
    #[cold]
    #[inline(never)]
    fn read_nested(&self, tx: Option<u64>) -> Result<Marked<RwLockReadGuard<'_, State>>> {
        let g = match self.state.try_read() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Err(burrow_core::driver::nested(ENGINE)),
        };
        if tx.is_none() && g.owner.is_some() {
            return Err(burrow_core::driver::nested(ENGINE));
        }
        Ok(Marked::new(&self.state, g))
    }

    /// Locks for writing, as [`MemoryEngine::read`] does; refused at once
    /// from a row callback of this thread's own read.
    #[inline]
    fn write(&self, tx: Option<u64>) -> Result<RwLockWriteGuard<'_, State>> {
        if holding(&self.state) {
            return Err(burrow_core::driver::nested(ENGINE));
        }
        if tx.is_none() && burrow_core::driver::waits_refused() {
            return lock_now(self.state.try_write());
        }
        self.lock(tx, || {
            self.state.write().unwrap_or_else(PoisonError::into_inner)
        })
    }

    /// Takes the lock `lock` gives. A transaction's call takes it at once:
    /// the transaction is open for as long as its handle lives. A call of the
    /// engine's own waits until no transaction is open, at most the lock
    /// timeout.
    #[inline]
    fn lock<G: Deref<Target = State>>(&self, tx: Option<u64>, lock: impl Fn() -> G) -> Result<G> {
        let g = lock();
        debug_assert!(
            tx.is_none() || g.owner == tx,
            "a call after its transaction ended"
        );
        if tx.is_some() || g.owner.is_none() {
            return Ok(g);
        }
        drop(g);
        self.lock_after_tx(lock)
    }

    /// The slow path of [`MemoryEngine::lock`], kept out of line so that the
    /// fast one stays small enough to inline into every call.
    #[cold]
    #[inline(never)]
    fn lock_after_tx<G: Deref<Target = State>>(&self, lock: impl Fn() -> G) -> Result<G> {
        let deadline = Instant::now() + self.options.lock_timeout;
        loop {
            self.wait_for_tx(deadline)?;
            // Another caller may have begun a transaction since it ended.
            let g = lock();
            if g.owner.is_none() {
                return Ok(g);
            }
        }
    }

    /// Waits until no transaction is open, or fails with [`Error::Busy`] at
    /// `deadline`.
    fn wait_for_tx(&self, deadline: Instant) -> Result<()> {
        let w = self.tx_wait.lock().unwrap_or_else(PoisonError::into_inner);
        let left = deadline.saturating_duration_since(Instant::now());
        let (_w, timeout) = self
            .tx_ended
            .wait_timeout_while(w, left, |_| self.owner.load(Ordering::Acquire) != 0)
            .unwrap_or_else(PoisonError::into_inner);
        if timeout.timed_out() {
            return Err(Error::Busy {
                engine: ENGINE,
                waited: self.options.lock_timeout,
            });
        }
        Ok(())
    }

    /// Ends transaction `token`, keeping its writes or undoing them, and
    /// wakes the callers waiting for it. With
    /// [`MemoryOptions::save_on_commit`], a commit that wrote something is
    /// saved; an error then means the save failed, the commit stands.
    fn end_tx(&self, token: u64, commit: bool) -> Result<()> {
        if holding(&self.state) {
            return Err(burrow_core::driver::nested(ENGINE));
        }
        let mut g = self.state.write().unwrap_or_else(PoisonError::into_inner);
        debug_assert_eq!(g.owner, Some(token), "a transaction ended twice");
        let wrote = !g.undo.is_empty();
        if commit {
            g.undo.clear();
            g.metas.clear();
        } else {
            g.rollback();
        }
        g.owner = None;
        self.owner.store(0, Ordering::Release);
        for t in &mut g.tables {
            if t.wants_compaction() {
                // Rows of a live table are unique by construction.
                let _ = t.compact();
            }
        }
        if g.undo.capacity() > 1 << 16 {
            g.undo = Vec::new();
        }
        // Taken before anyone else writes: the file gets exactly this commit.
        let frozen = if commit && wrote && self.saves_on_commit() {
            Some(Self::freeze(&g))
        } else {
            None
        };
        drop(g);
        let snapshot = frozen.map(|f| self.snapshot(f));
        {
            let _w = self.tx_wait.lock().unwrap_or_else(PoisonError::into_inner);
            self.tx_ended.notify_all();
        }
        match snapshot {
            Some(s) => self.store(s?),
            None => Ok(()),
        }
    }

    fn saves_on_commit(&self) -> bool {
        self.options.save_on_commit && self.options.path.is_some()
    }
}

impl Drop for MemoryEngine {
    fn drop(&mut self) {
        // No transaction is open: each holds the engine's `Arc`, so it has
        // ended (rolled back if it was dropped) before the engine drops.
        if let Err(e) = self.flush() {
            eprintln!("burrow-memory: the data could not be saved on drop: {e}");
        }
    }
}

/// An open transaction of a [`MemoryEngine`], from [`Storage::begin`]. Its
/// calls see its own writes; the engine's other callers wait until it is
/// committed, rolled back, or dropped, which rolls it back:
///
/// ```
/// # use std::sync::Arc;
/// # use burrow_core::{Database, Model, Orm};
/// # #[derive(burrow_derive::Record)] #[burrow(crate = "burrow_core")]
/// # struct Session { id: i64, user: String }
/// # fn main() -> burrow_core::Result<()> {
/// use burrow_memory::MemoryEngine;
/// let client = Database::open(Model::new().with::<Session>(), Arc::new(MemoryEngine::new()))?;
/// let tx = client.transaction()?;
/// tx.add(&mut Session { id: 0, user: "ann".into() })?;
/// assert_eq!(tx.count::<Session>("", &[])?, 1);
/// drop(tx);
/// assert_eq!(client.count::<Session>("", &[])?, 0);
/// # Ok(()) }
/// ```
pub struct MemoryTx {
    engine: Arc<MemoryEngine>,
    token: u64,
    /// Still to be ended (by drop, if not by commit or rollback).
    open: bool,
}

impl EngineTx for MemoryTx {
    fn commit(mut self: Box<Self>) -> Result<()> {
        self.open = false;
        self.engine.end_tx(self.token, true)
    }

    fn rollback(mut self: Box<Self>) -> Result<()> {
        self.open = false;
        self.engine.end_tx(self.token, false)
    }
}

impl Drop for MemoryTx {
    fn drop(&mut self) {
        if self.open {
            // A rollback saves nothing, so it cannot fail.
            let _ = self.engine.end_tx(self.token, false);
        }
    }
}

/// A read guard of the state, marked as held by this thread while it lives,
/// so that a row callback that calls the engine again is answered at once
/// rather than left waiting for its own thread
/// ([`burrow_core::driver::Holding`]).
struct Marked<G> {
    // Declared before the guard: unmarked before the lock is released.
    _mark: burrow_core::driver::Holding,
    g: G,
}

impl<G> Marked<G> {
    #[inline]
    fn new(lock: &RwLock<State>, g: G) -> Self {
        Marked {
            _mark: burrow_core::driver::Holding::new(lock),
            g,
        }
    }
}

impl<G: Deref> Deref for Marked<G> {
    type Target = G::Target;
    #[inline]
    fn deref(&self) -> &G::Target {
        &self.g
    }
}

/// The lock `got` tried to take, for a call of the engine's own that must
/// not wait (see [`burrow_core::driver::without_waiting`]): refused if it
/// was held, or if a transaction is open.
fn lock_now<G: Deref<Target = State>>(got: TryLockResult<G>) -> Result<G> {
    let g = burrow_core::driver::taken_now(got, ENGINE)?;
    if g.owner.is_some() {
        return Err(burrow_core::driver::refuse(ENGINE));
    }
    Ok(g)
}

/// A table as the record declares it, taking over the rows of `ft` (the same
/// table read from the file), converted if the fields changed. A field whose
/// stored kind cannot be read as the declared one without loss is
/// [`Error::Schema`]. On an error, `ft` is left as it was.
fn adopt(table: &'static Table, ft: &mut FileTable) -> Result<(TableData, bool)> {
    let fl = &ft.layout;
    let mut src: Vec<Option<usize>> = table
        .fields
        .iter()
        .map(|f| {
            fl.slots
                .iter()
                .position(|s| s.name.eq_ignore_ascii_case(f.name))
        })
        .collect();
    for (f, j) in table.fields.iter().zip(&src) {
        if let Some(j) = *j {
            check_kind(table.name, f, fl.slots[j].kind)?;
        }
    }
    let extras: Vec<usize> = (0..fl.len()).filter(|j| !src.contains(&Some(*j))).collect();
    let mut specs: Vec<SlotSpec> = table.fields.iter().map(spec).collect();
    for &j in &extras {
        let s = &fl.slots[j];
        specs.push(SlotSpec {
            name: s.name.clone(),
            kind: s.kind,
            target: s.target.clone(),
            nullable: s.nullable,
        });
    }
    let flags = table
        .fields
        .iter()
        .map(|f| (f.unique, f.indexed))
        .chain(extras.iter().map(|&j| ft.flags[j]))
        .collect();
    src.extend(extras.iter().map(|&j| Some(j)));
    let layout = Layout::new(table.name, specs)?;
    let same = layout.len() == fl.len()
        && layout.slots.iter().enumerate().all(|(i, s)| {
            let f = &fl.slots[i];
            src[i] == Some(i) && s.enc == f.enc && (s.nullable || !f.nullable)
        });
    let view = View::new(table, (0..table.fields.len()).collect());
    let mut td = TableData::new(layout, flags, vec![view]);
    let rows: Vec<Option<Stored>> = if same {
        td.arena.held(ft.rows.iter().map(|r| r.data.len()).sum());
        std::mem::take(&mut ft.rows).into_iter().map(Some).collect()
    } else {
        let mut buf = Vec::new();
        let mut rows = Vec::with_capacity(ft.rows.len());
        for r in &ft.rows {
            td.layout
                .encode(&mut buf, |i| match src[i] {
                    Some(j) => fl.get(&r.data, j),
                    None => Ok(td.layout.missing(i)),
                })
                .map_err(|e| {
                    Error::Schema(format!(
                        "table {}, ID {}: the stored row does not fit the record: {e}",
                        table.name, r.id
                    ))
                })?;
            rows.push(Some(Stored {
                id: r.id,
                data: td.arena.alloc(&buf)?,
            }));
        }
        rows
    };
    td.live = rows.len();
    td.meta = Meta {
        next_id: ft.next_id,
        last_id: rows.last().and_then(|r| r.as_ref().map(|r| r.id)),
        ordered: true,
    };
    td.rows = rows;
    if let Err(e) = td.compact() {
        if same {
            ft.rows = std::mem::take(&mut td.rows).into_iter().flatten().collect();
        }
        return Err(e);
    }
    Ok((td, !same))
}

impl State {
    /// The table and the version of its record that `table` is: by address, or
    /// by an identical definition (as the SQLite engine finds them).
    fn find(&self, table: &Table) -> Option<(usize, usize)> {
        let by = |same: &dyn Fn(&View) -> bool| {
            self.tables
                .iter()
                .enumerate()
                .find_map(|(t, td)| td.views.iter().position(same).map(|v| (t, v)))
        };
        by(&|v| ptr::eq(v.table, table)).or_else(|| by(&|v| *v.table == *table))
    }

    fn table(&self, table: &Table) -> Result<(usize, usize)> {
        self.find(table).ok_or_else(|| {
            let why = if self
                .tables
                .iter()
                .any(|t| t.name().eq_ignore_ascii_case(table.name))
            {
                "this version of its record was not opened (ensure_table) on this memory engine"
            } else {
                "it is not open in this memory engine"
            };
            Error::UnknownTable(format!("{}: {why}", table.name))
        })
    }

    fn insert(&mut self, (t, v): (usize, usize), id: Option<i64>, row: &dyn Fields) -> Result<i64> {
        let State {
            tables,
            scratch,
            undo,
            owner,
            generation,
            ..
        } = self;
        let td = &mut tables[t];
        let (layout, view) = (&td.layout, &td.views[v]);
        if view.map().is_none() && layout.len() == view.table.fields.len() {
            layout.encode(scratch, |i| Ok(row.field(i)))?;
        } else {
            layout.encode(scratch, |i| {
                Ok(match view.field_of(i) {
                    Some(f) => row.field(f),
                    None => layout.missing(i),
                })
            })?;
        }
        let (id, slot) = td.insert(id, scratch)?;
        if owner.is_some() {
            match undo.last_mut() {
                Some(Undo::Inserts { t: ut, from, n }) if *ut == t && *from + *n == slot => *n += 1,
                _ => undo.push(Undo::Inserts {
                    t,
                    from: slot,
                    n: 1,
                }),
            }
        }
        *generation += 1;
        Ok(id)
    }

    fn update(
        &mut self,
        (t, v): (usize, usize),
        row: &dyn Fields,
        fields: Option<&[usize]>,
    ) -> Result<bool> {
        let State {
            tables,
            scratch,
            undo,
            owner,
            generation,
            ..
        } = self;
        let td = &mut tables[t];
        let declared = td.views[v].table.fields.len();
        if let Some(&bad) = fields.and_then(|l| l.iter().find(|&&i| i >= declared)) {
            return Err(Error::BadInput(format!(
                "{} has no field #{bad}",
                td.name()
            )));
        }
        let Some(slot) = td.slot_of(row.id()) else {
            return Ok(false);
        };
        {
            let old: &[u8] = match &td.rows[slot as usize] {
                Some(r) => &r.data,
                None => return Ok(false),
            };
            let (layout, view) = (&td.layout, &td.views[v]);
            layout.encode(scratch, |i| match view.field_of(i) {
                Some(f) if fields.is_none_or(|list| list.contains(&f)) => Ok(row.field(f)),
                _ => layout.get(old, i),
            })?;
        }
        let old = td.update(slot, scratch)?;
        if owner.is_some() {
            undo.push(Undo::Update { t, slot, old });
        }
        *generation += 1;
        // The old bytes are garbage in the arena until it is repacked.
        self.compact_if_due(t);
        Ok(true)
    }

    fn delete_slot(&mut self, t: usize, slot: u32) {
        let row = self.tables[t].delete(slot);
        if self.owner.is_some() {
            self.undo.push(Undo::Delete { t, slot, row });
        }
        self.generation += 1;
    }

    fn compact_if_due(&mut self, t: usize) {
        if self.owner.is_none() && self.tables[t].wants_compaction() {
            // Rows of a live table are unique by construction.
            let _ = self.tables[t].compact();
        }
    }

    fn delete(&mut self, t: usize, id: i64) -> Result<bool> {
        let Some(slot) = self.tables[t].slot_of(id) else {
            return Ok(false);
        };
        self.delete_slot(t, slot);
        self.compact_if_due(t);
        Ok(true)
    }

    fn delete_where(&mut self, (t, v): (usize, usize), filter: &Filter) -> Result<u64> {
        let mut slots = Vec::new();
        let td = &self.tables[t];
        query::visit(td, td.views[v].map(), filter, false, &mut |s, _| {
            slots.push(s);
            Ok(true)
        })?;
        for &s in &slots {
            self.delete_slot(t, s);
        }
        self.compact_if_due(t);
        Ok(slots.len() as u64)
    }

    fn apply_batch(
        &mut self,
        items: &[BatchItem<'_>],
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
    ) -> Result<()> {
        results.reserve(items.len());
        let mut last: Option<(&'static Table, (usize, usize))> = None;
        let mut reserved_to = 0;
        apply_each(items, results, stop_on_error, |index, item| {
            let t = match last {
                Some((tb, tv)) if ptr::eq(tb, item.table) => tv,
                _ => {
                    let tv = self.table(item.table)?;
                    last = Some((item.table, tv));
                    tv
                }
            };
            Ok(match item.op {
                BatchOp::Add { id, row } => {
                    if index >= reserved_to {
                        let run = items[index..]
                            .iter()
                            .take_while(|it| {
                                matches!(it.op, BatchOp::Add { .. })
                                    && ptr::eq(it.table, item.table)
                            })
                            .count();
                        self.tables[t.0].reserve(run);
                        reserved_to = index + run;
                    }
                    BatchResult::Added(self.insert(t, id, row)?)
                }
                BatchOp::Update { row, fields } => {
                    if self.update(t, row, fields)? {
                        BatchResult::Done
                    } else {
                        BatchResult::Missing
                    }
                }
                BatchOp::Delete { id } => {
                    if self.delete(t.0, id)? {
                        BatchResult::Done
                    } else {
                        BatchResult::Missing
                    }
                }
            })
        })
    }

    /// Undoes the open transaction's writes (ending it is the caller's business).
    fn rollback(&mut self) {
        while let Some(u) = self.undo.pop() {
            match u {
                Undo::Inserts { t, from, n } => {
                    for slot in (from..from + n).rev() {
                        self.tables[t].undo_insert(slot);
                    }
                }
                Undo::Update { t, slot, old } => self.tables[t].undo_update(slot, old),
                Undo::Delete { t, slot, row } => self.tables[t].undo_delete(slot, row),
            }
        }
        for (td, m) in self.tables.iter_mut().zip(self.metas.drain(..)) {
            td.meta = m;
        }
        self.generation += 1;
    }
}

/// The engine seen from one unit of work: its own calls (`tx` is `None`) or
/// those of the transaction with token `tx`. The row calls are written once,
/// here; the engine and its transaction handle forward to it.
struct At<'a> {
    engine: &'a MemoryEngine,
    tx: Option<u64>,
}

impl RowOps for At<'_> {
    fn insert(&self, table: &'static Table, id: Option<i64>, row: &dyn Fields) -> Result<i64> {
        let mut g = self.engine.write(self.tx)?;
        let tv = g.table(table)?;
        g.insert(tv, id, row)
    }

    fn update(
        &self,
        table: &'static Table,
        row: &dyn Fields,
        fields: Option<&[usize]>,
    ) -> Result<bool> {
        let mut g = self.engine.write(self.tx)?;
        let tv = g.table(table)?;
        g.update(tv, row, fields)
    }

    fn delete(&self, table: &'static Table, id: i64) -> Result<bool> {
        let mut g = self.engine.write(self.tx)?;
        let (t, _) = g.table(table)?;
        g.delete(t, id)
    }

    fn delete_where(&self, table: &'static Table, filter: &Filter) -> Result<u64> {
        let mut g = self.engine.write(self.tx)?;
        let tv = g.table(table)?;
        g.delete_where(tv, filter)
    }

    fn retrieve(
        &self,
        table: &'static Table,
        id: i64,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<bool> {
        let g = self.engine.read(self.tx)?;
        let (t, v) = g.table(table)?;
        let td = &g.tables[t];
        match td.slot_of(id).and_then(|s| td.row(s, td.views[v].map())) {
            Some(row) => {
                out(&row)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn select(
        &self,
        table: &'static Table,
        select: &Select,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        let g = self.engine.read(self.tx)?;
        let (t, v) = g.table(table)?;
        let td = &g.tables[t];
        query::select(td, td.views[v].map(), select, &mut |row| {
            out(row)?;
            Ok(true)
        })
    }

    fn count(&self, table: &'static Table, filter: &Filter) -> Result<u64> {
        let g = self.engine.read(self.tx)?;
        let (t, v) = g.table(table)?;
        let td = &g.tables[t];
        query::count(td, td.views[v].map(), filter)
    }

    fn select_value(
        &self,
        table: &'static Table,
        col: Column,
        select: &Select,
    ) -> Result<Option<Value>> {
        let g = self.engine.read(self.tx)?;
        let (t, v) = g.table(table)?;
        let td = &g.tables[t];
        let mut found = None;
        query::select(td, td.views[v].map(), select, &mut |row| {
            found = Some(column(row, col)?.to_owned());
            Ok(false)
        })?;
        Ok(found)
    }

    fn apply_batch(
        &self,
        items: &[BatchItem<'_>],
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
    ) -> Result<()> {
        let (engine, tx): (&MemoryEngine, Option<u64>) = (self.engine, self.tx);
        let mut g = engine.write(tx)?;
        let before = g.generation;
        let r = g.apply_batch(items, results, stop_on_error);
        if tx.is_some() || g.generation == before || !engine.saves_on_commit() {
            return r;
        }
        // Outside a transaction, the batch's writes are committed as
        // made, those before a failure included: save them as they are.
        let frozen = MemoryEngine::freeze(&g);
        drop(g);
        let saved = engine.snapshot(frozen).and_then(|s| engine.store(s));
        r?;
        saved
    }
}

burrow_core::forward_row_ops!(MemoryEngine, |e| At {
    engine: e,
    tx: None
});
burrow_core::forward_row_ops!(MemoryTx, |t| At {
    engine: &t.engine,
    tx: Some(t.token)
});

impl Storage for MemoryEngine {
    fn caps(&self) -> Caps {
        Caps::in_process(ENGINE).with_sqlite_order()
    }

    // One-table SQL, answered by the engine's own select (`sql`).
    fn sql_host(&self) -> Option<&dyn SqlHost> {
        Some(self)
    }

    // Rows hold typed values, and filters compare them.
    fn filters_typed(&self, _table: &'static Table, _field: usize) -> bool {
        true
    }

    fn ensure_table(&self, table: &'static Table) -> Result<()> {
        let mut g = self.write(None)?;
        let st = &mut *g;
        if let Some((t, v)) = st.find(table) {
            if !ptr::eq(st.tables[t].views[v].table, table) {
                // An identical definition at another address: found by address from now on.
                let mut view = st.tables[t].views[v].clone();
                view.table = table;
                st.tables[t].views.push(view);
            }
            return Ok(());
        }
        if let Some(td) = st
            .tables
            .iter_mut()
            .find(|td| td.name().eq_ignore_ascii_case(table.name))
        {
            // Another version of a record already open on this engine.
            if td.add_version(table)? {
                st.generation += 1;
            }
            return Ok(());
        }
        let (td, changed) = match st
            .pending
            .iter()
            .position(|p| p.name.eq_ignore_ascii_case(table.name))
        {
            Some(p) => {
                let (td, changed) = adopt(table, &mut st.pending[p])?;
                st.pending.remove(p);
                (td, changed)
            }
            None => {
                let layout = Layout::new(table.name, table.fields.iter().map(spec).collect())?;
                let flags = table.fields.iter().map(|f| (f.unique, f.indexed)).collect();
                let view = View::new(table, (0..table.fields.len()).collect());
                (TableData::new(layout, flags, vec![view]), true)
            }
        };
        st.tables.push(td);
        if changed {
            st.generation += 1;
        }
        Ok(())
    }

    fn begin(self: Arc<Self>) -> Result<Box<dyn EngineTx>> {
        let token = next_tx_token();
        {
            let mut g = self.write(None)?;
            let st = &mut *g;
            st.owner = Some(token);
            self.owner.store(token, Ordering::Release);
            st.metas.clear();
            st.metas.extend(st.tables.iter().map(|t| t.meta));
            st.undo.clear();
        }
        Ok(Box::new(MemoryTx {
            engine: self,
            token,
            open: true,
        }))
    }

    fn online_backup(&self) -> Option<&dyn burrow_core::OnlineBackup> {
        Some(self)
    }
}
