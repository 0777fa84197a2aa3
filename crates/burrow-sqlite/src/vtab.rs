//! Virtual tables: any engine's table seen by SQLite, for SQL and JOINs.
//!
//! A table held by another [`Storage`] (the memory engine, an external database)
//! is registered in this connection's `temp` schema as a virtual table of the
//! `burrow` module. SQLite then runs full SQL over it, JOINs with its own tables
//! included, while per-record calls still go straight to the owning engine.
//! WHERE constraints are pushed down to the engine (`xBestIndex`), which turns
//! them into its own query (SQL for an external database): equality on any
//! column, ranges on numbers and amounts, and `IS [NOT] NULL`; equality and
//! ranges on dates, times and booleans too where the engine compares them as
//! values ([`Storage::filters_typed`]: the memory engine, native date and
//! time columns of the servers). A lookup by ID is one engine call, not a
//! scan, and a join looks up the joined column in the engine for each outer
//! row. SQLite re-checks every pushed constraint, so a pushed-down filter can
//! only narrow what the engine sends, never change a result; what an engine
//! could answer differently stays with SQLite alone:
//! - a comparison under a collation other than bytes (`COLLATE NOCASE`);
//! - ranges and `<>` on text (a server table mapped from another application
//!   may sort by any collation), and JSON (PostgreSQL's `json` has no `=`);
//! - dates, times and booleans stored as text or integers, which another
//!   writer may have left in another layout that SQL is shown rewritten;
//! - date or time bounds not written as Burrow writes them (SQLite compares
//!   their text), and times finer than the microsecond the servers keep.
//!
//! `< bound` on a date also asks for the dates outside the years 0–9999,
//! which are written with a sign and sort as text before all others. An
//! `ORDER BY ID` is left to the engine, and so are `LIMIT` and `OFFSET` when
//! the statement has no WHERE on the table, so "the last ten rows" reads ten
//! rows, not the table. The module knows engines only through the `Storage`
//! trait, so every engine plugs in the same way.
//!
//! Values appear to SQL exactly as the SQLite engine stores them (currency as
//! 1/10,000 integers, dates as ISO text), so the same data gives the same
//! results whether a table lives in SQLite or elsewhere.
#![allow(unsafe_code)]

use std::borrow::Cow;
use std::ffi::{c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use burrow_core::datetime::DATETIME_BUF;
use burrow_core::{CmpOp, Column, Expr, FieldKind, Row, Select, Storage, Table, Value, ValueRef};
use rusqlite::ffi;
use rusqlite::types::{Value as SqlOwned, ValueRef as SqlValue};
use rusqlite::vtab::{
    Context, CreateVTab, Filters, IndexConstraintOp, IndexInfo, Module, VTab, VTabConnection,
    VTabCursor, VTabKind,
};

use crate::cells::{copy_chunk, Buffers, Cell, Held};
use crate::schema::column_type;
use crate::statements::quote;

/// The module's name in SQL (`USING burrow`).
pub const MODULE: &str = "burrow";

/// The tables this connection may expose, by name.
#[derive(Default)]
pub struct Registry(Mutex<Vec<(&'static Table, Arc<dyn Storage>)>>);

impl Registry {
    pub fn add(&self, table: &'static Table, engine: Arc<dyn Storage>) {
        let mut v = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        v.retain(|(t, _)| !t.same(table));
        v.push((table, engine));
    }

    /// Whether no table is exposed: then no SQL can reach the module.
    pub fn is_empty(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    fn find(&self, name: &str) -> Option<(&'static Table, Arc<dyn Storage>)> {
        let v = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        v.iter()
            .find(|(t, _)| t.name.eq_ignore_ascii_case(name))
            .map(|(t, e)| (*t, e.clone()))
    }
}

/// The module; a `const` so that `&BURROW_MODULE` is promoted to `'static`.
pub const BURROW_MODULE: Module<'static, VirtualTable> =
    with_own_column(Module::read_only_module());

/// rusqlite's module with its `xColumn` replaced by [`column`]: SQLite calls
/// it once per cell, and rusqlite's wrappers around each call (a `Context`,
/// a `ToSqlOutput`, an error conversion) made 5% of the instructions of a
/// whole-table read over another engine (callgrind, `ext-sqlite-mem`).
const fn with_own_column(module: Module<'static, VirtualTable>) -> Module<'static, VirtualTable> {
    // SAFETY: `Module` is `repr(transparent)` over `sqlite3_module` (its other
    // field is a zero-sized marker), and `transmute` checks the sizes; the
    // cursor type `column` reads is the one rusqlite's `xOpen` makes.
    let mut base: ffi::sqlite3_module = unsafe { std::mem::transmute(module) };
    base.xColumn = Some(column);
    unsafe { std::mem::transmute(base) }
}

/// `xColumn`: cell `i` of the cursor's current row, handed to SQLite as
/// stored. Text and blobs are copied by SQLite (`SQLITE_TRANSIENT`): a
/// statement may keep a value (the best so far of `max()`) after the chunk it
/// came from is gone.
unsafe extern "C" fn column(
    cursor: *mut ffi::sqlite3_vtab_cursor,
    ctx: *mut ffi::sqlite3_context,
    i: c_int,
) -> c_int {
    // SAFETY: SQLite passes back a cursor made by this module's `xOpen`, a
    // live `VirtualCursor` (`repr(C)`, SQLite's part first), and calls
    // `xColumn` only between `xFilter`/`xNext` and `xClose`.
    let cursor = unsafe { &*cursor.cast::<VirtualCursor<'_>>() };
    let cell = usize::try_from(i)
        .ok()
        .filter(|&i| i < cursor.stride())
        .and_then(|i| cursor.cells.get(cursor.row * cursor.stride() + i))
        .map(Cell::get);
    // SAFETY: `ctx` is the context SQLite passed for this call; a text or
    // blob range lies within `bytes`, and its length was checked to fit.
    unsafe {
        match cell {
            Some(Held::Null) => ffi::sqlite3_result_null(ctx),
            Some(Held::Int(v)) => ffi::sqlite3_result_int64(ctx, v),
            Some(Held::Real(v)) => ffi::sqlite3_result_double(ctx, v),
            Some(Held::Text(a, b)) | Some(Held::Blob(a, b)) if c_int::try_from(b - a).is_err() => {
                ffi::sqlite3_result_error_toobig(ctx)
            }
            // The 64-bit call ends SQLite's copy with a NUL where it fits,
            // which spares the reader of the text a reallocation to add one.
            Some(Held::Text(a, b)) => ffi::sqlite3_result_text64(
                ctx,
                cursor.bytes.as_ptr().add(a).cast(),
                (b - a) as u64,
                ffi::SQLITE_TRANSIENT(),
                ffi::SQLITE_UTF8 as u8,
            ),
            Some(Held::Blob(a, b)) => ffi::sqlite3_result_blob(
                ctx,
                cursor.bytes.as_ptr().add(a).cast(),
                (b - a) as c_int,
                ffi::SQLITE_TRANSIENT(),
            ),
            None => {
                let msg = c"no such cell in the current row";
                ffi::sqlite3_result_error(ctx, msg.as_ptr(), -1);
                return ffi::SQLITE_ERROR;
            }
        }
    }
    ffi::SQLITE_OK
}

/// The SQL that creates the virtual table of `table`.
pub fn create_sql(table: &Table) -> String {
    let mut name = String::new();
    quote(&mut name, table.name);
    let mut arg = String::new();
    quote(&mut arg, table.name);
    format!("CREATE VIRTUAL TABLE IF NOT EXISTS temp.{name} USING {MODULE}({arg})")
}

/// One virtual table: a table of another engine.
#[repr(C)]
pub struct VirtualTable {
    /// SQLite's part of the structure; must come first.
    base: ffi::sqlite3_vtab,
    table: &'static Table,
    engine: Arc<dyn Storage>,
    /// Rows the last whole read of the table handed over, in full
    /// ([`NOT_SCANNED`] before the first): a whole read goes to a scan
    /// worker unless the table has shown itself small.
    last_scan: AtomicUsize,
}

/// Rows a full scan is assumed to read: the engine's size is not asked for at
/// planning time, and only the ratios between plans matter to SQLite.
const SCAN_ROWS: f64 = 1_000_000.0;

/// A constraint handed to the engine: its operator, as spelled in the plan's
/// `idx_str` (`column op` pairs separated by commas; column 0 is the ID).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Pushed {
    Cmp(CmpOp),
    IsNull,
    NotNull,
}

impl Pushed {
    fn of(op: IndexConstraintOp) -> Option<Self> {
        use IndexConstraintOp as O;
        Some(match op {
            O::SQLITE_INDEX_CONSTRAINT_EQ => Pushed::Cmp(CmpOp::Eq),
            O::SQLITE_INDEX_CONSTRAINT_LT => Pushed::Cmp(CmpOp::Lt),
            O::SQLITE_INDEX_CONSTRAINT_LE => Pushed::Cmp(CmpOp::Le),
            O::SQLITE_INDEX_CONSTRAINT_GT => Pushed::Cmp(CmpOp::Gt),
            O::SQLITE_INDEX_CONSTRAINT_GE => Pushed::Cmp(CmpOp::Ge),
            O::SQLITE_INDEX_CONSTRAINT_ISNULL => Pushed::IsNull,
            O::SQLITE_INDEX_CONSTRAINT_ISNOTNULL => Pushed::NotNull,
            // `<>` is left out: under a case-insensitive collation (MariaDB's
            // default) the engine would drop rows SQLite keeps; LIKE, GLOB and
            // the rest have engine-specific meanings.
            _ => return None,
        })
    }

    /// Its letter in a plan's `idx_str`.
    fn code(self) -> char {
        PLAN_CODES
            .iter()
            .find(|(p, _)| *p == self)
            .map_or('?', |&(_, c)| c)
    }

    fn from_code(c: char) -> Option<Self> {
        PLAN_CODES.iter().find(|&&(_, k)| k == c).map(|&(p, _)| p)
    }
}

/// The operators [`Pushed::of`] gives, and their letters in a plan.
const PLAN_CODES: [(Pushed, char); 7] = [
    (Pushed::Cmp(CmpOp::Eq), '='),
    (Pushed::Cmp(CmpOp::Lt), '<'),
    (Pushed::Cmp(CmpOp::Le), 'l'),
    (Pushed::Cmp(CmpOp::Gt), '>'),
    (Pushed::Cmp(CmpOp::Ge), 'g'),
    (Pushed::IsNull, 'n'),
    (Pushed::NotNull, 'N'),
];

/// Whether an engine orders values of `kind` as SQLite orders their stored
/// form, so that a range can be pushed. Text is not: SQLite compares bytes,
/// and a server table Burrow did not create may sort by any collation
/// (MariaDB's default ignores case).
fn orders_like_sqlite(kind: FieldKind) -> bool {
    matches!(
        kind,
        FieldKind::I32
            | FieldKind::I64
            | FieldKind::U32
            | FieldKind::Reference(_)
            | FieldKind::F64
            | FieldKind::Currency
            | FieldKind::Date
            | FieldKind::DateTime
    )
}

/// Appends one item to a plan's `idx_str`.
fn push_plan(plan: &mut String, item: &str) {
    if !plan.is_empty() {
        plan.push(',');
    }
    plan.push_str(item);
}

/// A LIMIT or OFFSET value as SQLite reads it (an integer, or text or a real
/// holding one); `None` for a negative one, which means none.
fn count_arg(v: SqlOwned) -> rusqlite::Result<Option<u64>> {
    let n = match v {
        SqlOwned::Integer(i) => Some(i),
        SqlOwned::Real(f) if f.fract() == 0.0 && f.abs() < 9.0e18 => Some(f as i64),
        SqlOwned::Text(ref t) => t.trim().parse().ok(),
        _ => None,
    }
    .ok_or_else(|| rusqlite::Error::ModuleError("LIMIT and OFFSET take integers".into()))?;
    Ok(u64::try_from(n).ok())
}

/// The vtab column `col` (0 for the ID, `1 + i` for field `i`) as a column
/// and its kind; `None` for a column the table does not have.
fn column_of(table: &Table, col: c_int) -> Option<(Column, FieldKind)> {
    match col {
        -1 | 0 => Some((Column::Id, FieldKind::I64)),
        c => {
            let i = usize::try_from(c - 1).ok()?;
            table.fields.get(i).map(|f| (Column::Field(i), f.kind))
        }
    }
}

impl VirtualTable {
    /// Whether constraint `i` (`column op …`) can go to the engine without
    /// changing a result: it must compare bytes (no `COLLATE NOCASE`), and the
    /// engine must compare the column as SQLite compares what it is shown.
    fn pushable(
        &self,
        i: usize,
        info: &IndexInfo,
        column: Column,
        kind: FieldKind,
        op: Pushed,
    ) -> bool {
        if !info
            .collation(i)
            .is_ok_and(|c| c.eq_ignore_ascii_case("BINARY"))
        {
            return false;
        }
        let Column::Field(f) = column else {
            // The ID is an integer, never NULL: SQLite answers IS NULL alone.
            return matches!(op, Pushed::Cmp(_));
        };
        match kind {
            // Shown as ISO text or 0/1, stored maybe otherwise: only an engine
            // comparing values means what SQLite's comparison of the text does.
            FieldKind::Date | FieldKind::DateTime | FieldKind::Bool
                if !self.engine.filters_typed(self.table, f) =>
            {
                matches!(op, Pushed::IsNull | Pushed::NotNull)
            }
            // PostgreSQL's `json` type has no equality.
            FieldKind::Json => matches!(op, Pushed::IsNull | Pushed::NotNull),
            FieldKind::Bool => !matches!(op, Pushed::Cmp(c) if c != CmpOp::Eq),
            _ => !matches!(op, Pushed::Cmp(c) if c != CmpOp::Eq) || orders_like_sqlite(kind),
        }
    }
}

// SAFETY: `VirtualTable` is `repr(C)` with `sqlite3_vtab` first, as the trait
// requires, and it owns everything its cursors borrow.
unsafe impl<'vtab> VTab<'vtab> for VirtualTable {
    type Aux = Arc<Registry>;
    type Cursor = VirtualCursor<'vtab>;

    fn connect(
        _db: &mut VTabConnection,
        aux: Option<&Arc<Registry>>,
        _module_name: &[u8],
        _database_name: &[u8],
        table_name: &[u8],
        _args: &[&[u8]],
    ) -> rusqlite::Result<(Cow<'static, CStr>, Self)> {
        let name = String::from_utf8_lossy(table_name);
        let (table, engine) = aux
            .and_then(|r| r.find(&name))
            .ok_or_else(|| rusqlite::Error::ModuleError(format!("no engine holds table {name}")))?;
        let mut ddl = String::from("CREATE TABLE x(ID INTEGER");
        for f in table.fields {
            ddl.push_str(", ");
            quote(&mut ddl, f.column);
            ddl.push(' ');
            ddl.push_str(column_type(f.kind));
        }
        ddl.push(')');
        let ddl = CString::new(ddl)
            .map_err(|_| rusqlite::Error::ModuleError("a column name holds a NUL".into()))?;
        crate::scan::start_early();
        let vtab = VirtualTable {
            base: ffi::sqlite3_vtab::default(),
            table,
            engine,
            last_scan: AtomicUsize::new(NOT_SCANNED),
        };
        Ok((Cow::Owned(ddl), vtab))
    }

    fn best_index(&self, info: &mut IndexInfo) -> rusqlite::Result<bool> {
        // Every constraint the engine can check with SQLite's meaning is
        // pushed, with `omit` left false: SQLite re-checks each one, so a
        // pushed filter narrows what the engine sends and never changes a
        // result. The estimate favours a lookup by ID or unique field, then an
        // indexed one, then the more constraints the better.
        let mut plan = String::new();
        let mut pushed = Vec::new();
        let (mut rows, mut keyed) = (SCAN_ROWS, false);
        // LIMIT and OFFSET, offered by SQLite when every WHERE term on the
        // table reached this method; usable by the engine only when there is
        // no WHERE term at all (SQLite's re-check would otherwise drop rows
        // after the engine stopped counting) and the order is the engine's.
        let (mut limit, mut offset, mut filtered) = (None, None, false);
        for (i, c) in info.constraints().enumerate() {
            match c.operator() {
                IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_LIMIT => {
                    limit = c.is_usable().then_some(i);
                    continue;
                }
                IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_OFFSET => {
                    offset = c.is_usable().then_some(i);
                    continue;
                }
                _ => filtered = true,
            }
            if !c.is_usable() {
                continue;
            }
            let (Some((column, kind)), Some(op)) =
                (column_of(self.table, c.column()), Pushed::of(c.operator()))
            else {
                continue;
            };
            if !self.pushable(i, info, column, kind, op) {
                continue;
            }
            let narrows = match (op, column) {
                (Pushed::Cmp(CmpOp::Eq), Column::Id) => {
                    keyed = true;
                    SCAN_ROWS
                }
                (Pushed::Cmp(CmpOp::Eq), Column::Field(f)) => {
                    let f = &self.table.fields[f];
                    keyed |= f.unique || f.indexed;
                    if f.unique {
                        SCAN_ROWS
                    } else if f.indexed {
                        SCAN_ROWS / 10.0
                    } else {
                        10.0
                    }
                }
                (Pushed::Cmp(_), _) => 4.0,
                (Pushed::IsNull | Pushed::NotNull, _) => 2.0,
            };
            rows = (rows / narrows).max(1.0);
            push_plan(&mut plan, &format!("{}{}", c.column().max(0), op.code()));
            pushed.push((i, op));
        }
        let mut argv = 0;
        for &(i, op) in &pushed {
            let mut usage = info.constraint_usage(i);
            if let Pushed::Cmp(_) = op {
                argv += 1;
                usage.set_argv_index(argv);
            }
            usage.set_omit(false);
        }
        // An order by the ID alone is the engine's to give (every engine
        // sorts IDs as SQLite does); any other order SQLite sorts itself.
        let by_id = match info.num_of_order_by() {
            0 => Some(None),
            1 => info
                .order_bys()
                .next()
                .filter(|o| matches!(o.column(), -1 | 0))
                .map(|o| Some(o.is_order_by_desc())),
            _ => None,
        };
        if let Some(Some(desc)) = by_id {
            info.set_order_by_consumed(true);
            push_plan(&mut plan, if desc { "o-" } else { "o+" });
        }
        if let (Some(l), false, Some(_)) = (limit, filtered, by_id) {
            argv += 1;
            info.constraint_usage(l).set_argv_index(argv);
            push_plan(&mut plan, "L");
            rows = rows.min(1_000.0);
            if let Some(o) = offset {
                argv += 1;
                let mut usage = info.constraint_usage(o);
                usage.set_argv_index(argv);
                // The engine skips the rows: SQLite must not skip them again.
                usage.set_omit(true);
                push_plan(&mut plan, "O");
            }
        }
        // Without a key the engine still reads the whole table, however few
        // rows it sends back.
        let cost = if keyed { rows } else { rows + SCAN_ROWS / 10.0 };
        info.set_idx_num(argv);
        if !plan.is_empty() {
            info.set_idx_str(&plan);
        }
        info.set_estimated_cost(if pushed.is_empty() { SCAN_ROWS } else { cost });
        info.set_estimated_rows(rows as i64);
        Ok(true)
    }

    fn open(&'vtab mut self) -> rusqlite::Result<VirtualCursor<'vtab>> {
        Ok(VirtualCursor {
            base: ffi::sqlite3_vtab_cursor::default(),
            vtab: self,
            cells: Vec::new(),
            bytes: Vec::new(),
            row: 0,
            feed: None,
            spent: None,
            streamed: 0,
            awake: WAIT_AWAKE,
        })
    }
}

impl CreateVTab<'_> for VirtualTable {
    const KIND: VTabKind = VTabKind::Default;
}

/// A scan of a virtual table: the rows the engine returned, `1 + fields` cells
/// per row, already in SQLite's form. Text and blobs share one byte buffer and
/// dates are written as text once, so a scan allocates nothing per row.
///
/// A lookup, a filtered read and a small table's read are made whole in
/// `filter`; a large table's whole read is made by a scan worker
/// ([`crate::scan`]) and arrives in chunks on `feed`, each replacing the
/// cells and bytes of the one before, which go back to the worker on `spent`
/// to carry a later chunk.
#[repr(C)]
pub struct VirtualCursor<'vtab> {
    /// SQLite's part of the structure; must come first.
    base: ffi::sqlite3_vtab_cursor,
    vtab: &'vtab VirtualTable,
    cells: Vec<Cell>,
    bytes: Vec<u8>,
    /// The current row within `cells`.
    row: usize,
    /// The chunks still to come of a streamed read.
    feed: Option<Receiver<Chunk>>,
    /// Where a streamed read's used buffers go back to its worker.
    spent: Option<Sender<Buffers>>,
    /// Rows of a streamed read handed over before the current chunk.
    streamed: usize,
    /// How long the next wait for a chunk stays awake ([`wait_for_chunk`]).
    awake: Duration,
}

/// What a scan worker sends its cursor.
enum Chunk {
    /// The next rows: their cells and the bytes their text and blobs point into.
    Rows(Vec<Cell>, Vec<u8>),
    /// The read ended after the rows sent; without it a closed feed is a
    /// worker that stopped part-way.
    End,
    /// The read failed after the rows sent.
    Failed(String),
}

/// A table whose last whole read handed over fewer rows reads in the caller's
/// thread: below this, waking a worker costs more than it overlaps.
const STREAM_FROM_ROWS: usize = 2_048;

/// [`VirtualTable::last_scan`] of a table not read whole yet: its first
/// whole read streams. A small table pays a worker's wake-up once (40–120
/// µs measured, once 1.3 ms); a large one is read at the streamed speed from the
/// first read on, and by the kind of thread that will read it again. After
/// a first read in the caller's thread, the next, streamed read ran at about
/// half its best speed in most processes, the table's data fresh in another
/// processor's caches (`ext-sqlite-mem` All Virtual, two sets of 30 bench
/// processes: median 2.1 and 2.4 M rows/s; streamed from the first read,
/// 2.4 and 3.3).
const NOT_SCANNED: usize = usize::MAX;

/// Rows in a streamed read's first chunk, small so that SQLite starts early;
/// later chunks double up to [`CHUNK_ROWS`].
const FIRST_CHUNK_ROWS: usize = 64;
/// Small enough that a chunk is still in the processors' caches when SQLite
/// reads it: 256-row chunks read about 5% faster than 1,024-row ones and 15%
/// faster than 4,096-row ones (`ext-sqlite-mem` All Virtual, four alternating
/// runs), for one channel message per 256 rows.
const CHUNK_ROWS: usize = 256;

/// Appends one row the engine handed over, ID first, in SQLite's form.
fn push_row(
    table: &Table,
    row: &dyn Row,
    cells: &mut Vec<Cell>,
    bytes: &mut Vec<u8>,
) -> burrow_core::Result<()> {
    cells.push(Held::Int(row.id()?).into());
    let typed = row.typed();
    for (i, f) in table.fields.iter().enumerate() {
        if typed {
            if let Some(cell) = typed_cell(f.kind, row, i, bytes)? {
                cells.push(cell.into());
                continue;
            }
        }
        // A date the engine holds as the text SQL shows is copied as it is,
        // not parsed and written again.
        if let Some(t) = row.written_text(i) {
            let (a, b) = keep(bytes, t.as_bytes());
            cells.push(Held::Text(a, b).into());
            continue;
        }
        push_cell(cells, bytes, &row.get(i)?)
            .map_err(|e| burrow_core::Error::engine(crate::ENGINE, e))?;
    }
    Ok(())
}

/// What a statement fails with when the engine's read of `table` panicked.
fn panicked(table: &Table) -> String {
    format!("the engine's read of table {} panicked", table.name)
}

/// A scan worker's read of `table`: every selected row, in chunks on `out`,
/// then [`Chunk::End`], or [`Chunk::Failed`] where the read failed. Stops at
/// the first chunk nobody receives.
fn stream(
    engine: &dyn Storage,
    table: &'static Table,
    select: &Select,
    out: &Sender<Chunk>,
    spent: &Receiver<Buffers>,
) {
    let stride = table.fields.len() + 1;
    let mut rows = FIRST_CHUNK_ROWS;
    // The worker's own buffers: each full chunk is copied out of them
    // ([`copy_chunk`]), so the engine's rows are written into lines no other
    // processor reads.
    let (mut cells, mut bytes) = (Vec::with_capacity(CHUNK_ROWS * stride), Vec::new());
    let read = catch_unwind(AssertUnwindSafe(|| {
        engine.select(table, select, &mut |row| {
            push_row(table, row, &mut cells, &mut bytes)?;
            if cells.len() >= rows * stride {
                rows = (rows * 2).min(CHUNK_ROWS);
                // A chunk SQLite has read carries the next: fresh memory for
                // every chunk is touched page by page, and freed to the
                // allocator from another thread.
                let mut chunk = spent.try_recv().unwrap_or_default();
                copy_chunk(&cells, &bytes, &mut chunk);
                cells.clear();
                bytes.clear();
                out.send(Chunk::Rows(chunk.0, chunk.1))
                    .map_err(|_| burrow_core::Error::Unsupported("the scan was dropped".into()))?;
            }
            Ok(())
        })
    }));
    let last = match read {
        Ok(Ok(())) => {
            if !cells.is_empty() && out.send(Chunk::Rows(cells, bytes)).is_err() {
                return;
            }
            Chunk::End
        }
        Ok(Err(e)) => Chunk::Failed(e.to_string()),
        Err(_) => Chunk::Failed(panicked(table)),
    };
    // Nobody to tell when the cursor is gone.
    let _ = out.send(last);
}

/// Appends `t` to the cursor's bytes: where it is kept.
fn keep(bytes: &mut Vec<u8>, t: &[u8]) -> (usize, usize) {
    let at = bytes.len();
    bytes.extend_from_slice(t);
    (at, bytes.len())
}

/// Appends `v` in SQLite's form.
fn push_cell(cells: &mut Vec<Cell>, bytes: &mut Vec<u8>, v: &ValueRef<'_>) -> rusqlite::Result<()> {
    let mut buf = [0u8; DATETIME_BUF];
    let held = match crate::stored(v, &mut buf)? {
        SqlValue::Null => Held::Null,
        SqlValue::Integer(i) => Held::Int(i),
        SqlValue::Real(f) => Held::Real(f),
        SqlValue::Text(t) => {
            let (a, b) = keep(bytes, t);
            Held::Text(a, b)
        }
        SqlValue::Blob(t) => {
            let (a, b) = keep(bytes, t);
            Held::Blob(a, b)
        }
    };
    cells.push(held.into());
    Ok(())
}

/// Field `idx` in SQLite's form read straight from a row that answers
/// [`Row::text`] and [`Row::int`], with no [`ValueRef`] made and converted;
/// `None` when the field needs the general path: it holds another type, or it
/// is a date not written as Burrow writes it, or its kind keeps a stored form
/// the general path rewrites (a boolean stored as 2 is shown as 1).
fn typed_cell(
    kind: FieldKind,
    row: &dyn Row,
    idx: usize,
    bytes: &mut Vec<u8>,
) -> burrow_core::Result<Option<Held>> {
    use burrow_core::datetime::{is_written_date, is_written_datetime, write_date, write_datetime};
    let text = |t: &str, bytes: &mut Vec<u8>| {
        let (a, b) = keep(bytes, t.as_bytes());
        Held::Text(a, b)
    };
    Ok(match kind {
        FieldKind::Text => row.text(idx)?.map(|t| text(t, bytes)),
        // A date the engine holds as one (the memory engine) is written as
        // SQLite stores it, with no `ValueRef` made on the way.
        FieldKind::Date => match row.text(idx)? {
            Some(t) => is_written_date(t).then(|| text(t, bytes)),
            None => row
                .date(idx)?
                .map(|d| text(write_date(d, &mut [0; DATETIME_BUF]), bytes)),
        },
        FieldKind::DateTime => match row.text(idx)? {
            Some(t) => is_written_datetime(t).then(|| text(t, bytes)),
            None => row
                .datetime(idx)?
                .map(|d| text(write_datetime(d, &mut [0; DATETIME_BUF]), bytes)),
        },
        // An integer is shown as stored; a currency's is its 1/10,000
        // amount, the stored form.
        FieldKind::I64
        | FieldKind::I32
        | FieldKind::U32
        | FieldKind::Reference(_)
        | FieldKind::Currency => row.int(idx)?.map(Held::Int),
        _ => None,
    })
}

/// How long a cursor whose feed ran dry first keeps looking for the next
/// chunk before it sleeps: about two chunks of a worker's time.
const WAIT_AWAKE: Duration = Duration::from_micros(200);

/// The next chunk of an empty feed, looked for awake for up to `*awake`
/// before sleeping; `Err` when its worker is gone.
///
/// A consumer asleep is woken by the worker's next send, and Linux may wake
/// it on the worker's processor, where the two then take turns for the rest
/// of the scan: a scheduler trace of slow `ext-sqlite-mem` All Virtual reads
/// on a 2-processor machine showed both threads on one processor, the other
/// idle, for the whole read. Awake, the consumer stays where it is (and the
/// worker is kept off its processor, [`crate::scan`]). It yields while it
/// looks, so that a worker sharing its processor all the same runs.
///
/// The time awake halves after each wait that ended asleep and long after
/// (four times the longest time awake), and doubles back after each that
/// did not sleep, so a worker slow for good (an engine across a network)
/// costs its consumer little more than sleeping would. A short sleep leaves
/// it as it is: shrinking it then made the consumer sleep for every chunk
/// of a worker only a little slower than itself, and each of those wake-ups
/// slowed the worker further (reads settled at 2.1M rows/s, where they
/// otherwise ran at 3.1–3.3M).
fn wait_for_chunk(feed: &Receiver<Chunk>, awake: &mut Duration) -> Result<Chunk, ()> {
    let since = Instant::now();
    loop {
        match feed.try_recv() {
            Ok(c) => {
                *awake = (*awake * 2).clamp(Duration::from_micros(1), WAIT_AWAKE);
                return Ok(c);
            }
            Err(TryRecvError::Disconnected) => return Err(()),
            Err(TryRecvError::Empty) if since.elapsed() < *awake => std::thread::yield_now(),
            Err(TryRecvError::Empty) => {
                let chunk = feed.recv().map_err(|_| ());
                if since.elapsed() > 4 * WAIT_AWAKE {
                    *awake /= 2;
                }
                return chunk;
            }
        }
    }
}

impl VirtualCursor<'_> {
    fn stride(&self) -> usize {
        self.vtab.table.fields.len() + 1
    }

    /// With the current chunk read to its end, waits for the next one of a
    /// streamed read; at the read's end the cursor is at EOF.
    fn pull(&mut self) -> rusqlite::Result<()> {
        while self.eof() {
            let Some(feed) = &self.feed else {
                return Ok(());
            };
            // A chunk is usually there already: only an empty feed waits.
            let chunk = match feed.try_recv() {
                Ok(c) => Ok(c),
                Err(TryRecvError::Empty) => wait_for_chunk(feed, &mut self.awake),
                Err(TryRecvError::Disconnected) => Err(()),
            };
            match chunk {
                Ok(Chunk::Rows(cells, bytes)) => {
                    self.streamed += self.cells.len() / self.stride();
                    self.row = 0;
                    let used = (
                        std::mem::replace(&mut self.cells, cells),
                        std::mem::replace(&mut self.bytes, bytes),
                    );
                    if let Some(spent) = &self.spent {
                        // A worker already done has no use for it.
                        let _ = spent.send(used);
                    }
                }
                Ok(Chunk::End) => {
                    let rows = self.streamed + self.cells.len() / self.stride();
                    self.vtab.last_scan.store(rows, Ordering::Relaxed);
                    self.feed = None;
                    self.spent = None;
                }
                Ok(Chunk::Failed(e)) => {
                    self.feed = None;
                    self.spent = None;
                    return Err(rusqlite::Error::ModuleError(e));
                }
                Err(()) => {
                    self.feed = None;
                    self.spent = None;
                    return Err(rusqlite::Error::ModuleError(format!(
                        "the read of table {} stopped part-way",
                        self.vtab.table.name
                    )));
                }
            }
        }
        Ok(())
    }
}

/// The constraint value as the column's typed value, or `None` when it cannot
/// be one (then the cursor scans, and SQLite's own check decides).
fn key(kind: FieldKind, v: &SqlOwned) -> Option<Value> {
    let v = match v {
        SqlOwned::Integer(i) => ValueRef::Int(*i),
        SqlOwned::Real(f) => ValueRef::Real(*f),
        SqlOwned::Text(t) => ValueRef::Text(t.as_str().into()),
        SqlOwned::Blob(b) => ValueRef::Blob(b),
        SqlOwned::Null => return None,
    };
    let typed = crate::typed(kind, v);
    let fits = matches!(
        (kind, &typed),
        (FieldKind::I64 | FieldKind::Reference(_), Value::Int(_))
            | (FieldKind::F64, Value::Real(_))
            | (FieldKind::Bool, Value::Bool(_))
            | (FieldKind::Currency, Value::Currency(_))
            | (FieldKind::Text | FieldKind::Json, Value::Text(_))
            | (FieldKind::Blob, Value::Blob(_))
            | (FieldKind::Date, Value::Date(_))
            | (FieldKind::DateTime, Value::DateTime(_))
    ) || match (kind, &typed) {
        // A value out of the column's range is no value it holds; an engine
        // could refuse to bind it.
        (FieldKind::I32, Value::Int(i)) => i32::try_from(*i).is_ok(),
        (FieldKind::U32, Value::Int(i)) => u32::try_from(*i).is_ok(),
        _ => false,
    };
    fits.then_some(typed)
}

/// Whether an engine compares `v` with a field of `kind` as SQLite compares
/// it with the stored form. A date or time is stored as ISO text and SQLite
/// compares the text: a range is pushed only when the constraint is text
/// Burrow itself would write, on which both orders agree, and a time only to
/// the microsecond, the precision of the servers' timestamp types (they would
/// round a finer bound).
fn ranges_like_sqlite(kind: FieldKind, raw: &SqlOwned, v: &Value) -> bool {
    use burrow_core::datetime::{is_written_date, is_written_datetime};
    match (raw, v) {
        // Text of that shape that parsed reads back as itself; years beyond
        // 0..=9999 (written with a sign) are not of it.
        (SqlOwned::Text(t), Value::Date(_)) => is_written_date(t),
        (SqlOwned::Text(t), Value::DateTime(d)) => {
            is_written_datetime(t) && d.timestamp_subsec_nanos() % 1_000 == 0
        }
        _ => !matches!(kind, FieldKind::Date | FieldKind::DateTime),
    }
}

/// `column < bound` (or `<=`) on a date or time as SQLite means it on the
/// ISO text it is shown: dates before year 0 and from year 10000 on are
/// written with a sign and sort before all others (`+10000-01-01` <
/// `2020-01-01`), so the engine is asked for `NOT (column >= bound AND column
/// <= 9999-12-31…)` instead (`>` for `<=`), with the last bound added to
/// `params` (every engine can bind it); `None` for any other comparison.
fn text_order_below(
    kind: FieldKind,
    cmp: CmpOp,
    column: Column,
    bound: usize,
    params: &mut Vec<Value>,
) -> Option<Expr> {
    let last = burrow_core::chrono::NaiveDate::from_ymd_opt(9_999, 12, 31)?;
    let last = match kind {
        FieldKind::Date => Value::Date(last),
        FieldKind::DateTime => {
            Value::DateTime(last.and_hms_nano_opt(23, 59, 59, 999_999_999)?.and_utc())
        }
        _ => return None,
    };
    let not_below = match cmp {
        CmpOp::Lt => CmpOp::Ge,
        CmpOp::Le => CmpOp::Gt,
        _ => return None,
    };
    params.push(last);
    Some(Expr::Not(Box::new(Expr::And(vec![
        Expr::Cmp(column, not_below, bound),
        Expr::Cmp(column, CmpOp::Le, params.len() - 1),
    ]))))
}

/// The engine query for a plan of [`VirtualTable::best_index`], with the
/// constraint values SQLite passed; `None` when a comparison with NULL makes
/// the result empty. A value that cannot be the column's typed value leaves its
/// constraint to SQLite alone.
fn pushed_select(
    table: &Table,
    plan: &str,
    args: &Filters<'_>,
) -> rusqlite::Result<Option<Select>> {
    let mut select = Select::all();
    let mut exprs = Vec::new();
    let mut argv = 0;
    for item in plan.split(',').filter(|p| !p.is_empty()) {
        let bad = || rusqlite::Error::ModuleError(format!("bad virtual table plan {plan:?}"));
        match item {
            "o+" | "o-" => {
                select.order = vec![(Column::Id, item == "o-")];
                continue;
            }
            "L" | "O" => {
                let n = count_arg(args.get::<SqlOwned>(argv)?)?;
                argv += 1;
                if item == "L" {
                    select.limit = n;
                } else {
                    select.offset = n.unwrap_or(0);
                }
                continue;
            }
            _ => {}
        }
        let op = item
            .chars()
            .last()
            .and_then(Pushed::from_code)
            .ok_or_else(bad)?;
        let col: c_int = item[..item.len() - 1].parse().map_err(|_| bad())?;
        let (column, kind) = column_of(table, col).ok_or_else(bad)?;
        let cmp = match op {
            Pushed::IsNull => {
                exprs.push(Expr::IsNull(column, false));
                continue;
            }
            Pushed::NotNull => {
                exprs.push(Expr::IsNull(column, true));
                continue;
            }
            Pushed::Cmp(cmp) => cmp,
        };
        let raw = args.get::<SqlOwned>(argv)?;
        argv += 1;
        if raw == SqlOwned::Null {
            return Ok(None);
        }
        let Some(v) = key(kind, &raw) else {
            continue;
        };
        if cmp != CmpOp::Eq && !ranges_like_sqlite(kind, &raw, &v) {
            continue;
        }
        let bound = select.filter.params.len();
        select.filter.params.push(v);
        exprs.push(
            text_order_below(kind, cmp, column, bound, &mut select.filter.params)
                .unwrap_or(Expr::Cmp(column, cmp, bound)),
        );
    }
    select.filter.expr = match exprs.len() {
        0 => None,
        1 => exprs.pop(),
        _ => Some(Expr::And(exprs)),
    };
    Ok(Some(select))
}

// SAFETY: `VirtualCursor` is `repr(C)` with `sqlite3_vtab_cursor` first.
unsafe impl VTabCursor for VirtualCursor<'_> {
    fn filter(
        &mut self,
        _idx_num: c_int,
        idx_str: Option<&str>,
        args: &Filters<'_>,
    ) -> rusqlite::Result<()> {
        let table = self.vtab.table;
        // A read still streaming from an earlier filter ends here: the
        // worker stops at its next chunk.
        self.feed = None;
        self.spent = None;
        self.streamed = 0;
        self.cells.clear();
        self.bytes.clear();
        self.row = 0;
        let Some(select) = pushed_select(table, idx_str.unwrap_or(""), args)? else {
            // A comparison with NULL holds for no row.
            return Ok(());
        };
        let whole = select.filter.expr.is_none() && select.offset == 0;
        if whole
            && select.limit.is_none_or(|l| l >= STREAM_FROM_ROWS as u64)
            && self.vtab.last_scan.load(Ordering::Relaxed) >= STREAM_FROM_ROWS
        {
            let (tx, rx) = mpsc::channel();
            let (spent, spent_rx) = mpsc::channel();
            let (engine, whole_read) = (self.vtab.engine.clone(), select.clone());
            if crate::scan::spawn(move || stream(&*engine, table, &whole_read, &tx, &spent_rx)) {
                self.feed = Some(rx);
                self.spent = Some(spent);
                return self.pull();
            }
        }
        let (cells, bytes) = (&mut self.cells, &mut self.bytes);
        // A panic must not unwind into SQLite's C frames (the process would
        // abort): it fails the statement, as on a scan worker.
        catch_unwind(AssertUnwindSafe(|| {
            self.vtab.engine.select(table, &select, &mut |row| {
                push_row(table, row, cells, bytes)
            })
        }))
        .map_err(|_| rusqlite::Error::ModuleError(panicked(table)))?
        .map_err(|e| rusqlite::Error::ModuleError(e.to_string()))?;
        if whole && select.limit.is_none() {
            self.vtab
                .last_scan
                .store(self.cells.len() / self.stride(), Ordering::Relaxed);
        }
        Ok(())
    }

    fn next(&mut self) -> rusqlite::Result<()> {
        self.row += 1;
        self.pull()
    }

    fn eof(&self) -> bool {
        (self.row + 1) * self.stride() > self.cells.len()
    }

    /// Not called: the module's `xColumn` is [`column`], which reads the
    /// cells without rusqlite's wrappers.
    fn column(&self, _: &mut Context, _: c_int) -> rusqlite::Result<()> {
        Err(rusqlite::Error::ModuleError(
            "cells are read by the module's own xColumn".into(),
        ))
    }

    fn rowid(&self) -> rusqlite::Result<i64> {
        match self.cells.get(self.row * self.stride()).map(Cell::get) {
            Some(Held::Int(id)) => Ok(id),
            _ => Err(rusqlite::Error::ModuleError("no current row".into())),
        }
    }
}

#[cfg(test)]
mod test {
    use super::{wait_for_chunk, Chunk, WAIT_AWAKE};
    use std::sync::mpsc;
    use std::time::Duration;

    /// A wait that ended asleep and long after halves the next wait's time
    /// awake; one whose chunk was there brings it back; a feed whose worker
    /// is gone is an error, not a wait.
    #[test]
    fn the_time_awake_follows_the_worker() {
        let (tx, feed) = mpsc::channel();
        let mut awake = WAIT_AWAKE;
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            tx.send(Chunk::End).expect("the feed is open");
            tx
        });
        assert!(matches!(wait_for_chunk(&feed, &mut awake), Ok(Chunk::End)));
        assert_eq!(awake, WAIT_AWAKE / 2);
        let tx = late.join().expect("the sender ran");
        tx.send(Chunk::End).expect("the feed is open");
        assert!(matches!(wait_for_chunk(&feed, &mut awake), Ok(Chunk::End)));
        assert_eq!(awake, WAIT_AWAKE);
        // Never past the longest time awake, never down to nothing.
        tx.send(Chunk::End).expect("the feed is open");
        assert!(wait_for_chunk(&feed, &mut awake).is_ok());
        assert_eq!(awake, WAIT_AWAKE);
        let mut none = Duration::ZERO;
        tx.send(Chunk::End).expect("the feed is open");
        assert!(wait_for_chunk(&feed, &mut none).is_ok());
        assert_eq!(none, Duration::from_micros(1));
        drop(tx);
        assert!(wait_for_chunk(&feed, &mut awake).is_err());
    }
}
