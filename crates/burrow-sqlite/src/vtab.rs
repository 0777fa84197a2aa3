//! Virtual tables: any engine's table seen by SQLite, for SQL and JOINs.
//!
//! A table held by another [`Storage`] (the memory engine, an external database)
//! is registered in this connection's `temp` schema as a virtual table of the
//! `burrow` module. SQLite then runs full SQL over it, JOINs with its own tables
//! included, while per-record calls still go straight to the owning engine.
//! Equality on the ID or on a unique or indexed field is pushed down to the
//! engine (`xBestIndex`), so a lookup by ID is one engine call, not a scan;
//! SQLite re-checks every pushed constraint, so a pushed-down filter can only
//! narrow what it reads, never change a result. The module knows engines only
//! through the `Storage` trait, so every engine plugs in the same way.
//!
//! Values appear to SQL exactly as the SQLite engine stores them (currency as
//! 1/10,000 integers, dates as ISO text), so the same data gives the same
//! results whether a table lives in SQLite or elsewhere.
#![allow(unsafe_code)]

use std::borrow::Cow;
use std::ffi::{c_int, CStr, CString};
use std::sync::{Arc, Mutex, PoisonError};

use burrow_core::datetime::DATETIME_BUF;
use burrow_core::{
    CmpOp, Column, Expr, FieldKind, Filter, Select, Storage, Table, Value, ValueRef,
};
use rusqlite::ffi;
use rusqlite::types::{ToSqlOutput, Value as SqlOwned, ValueRef as SqlValue};
use rusqlite::vtab::{
    Context, CreateVTab, Filters, IndexConstraintOp, IndexInfo, Module, VTab, VTabConnection,
    VTabCursor, VTabKind,
};

use crate::sql::{column_type, quote};

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

    fn find(&self, name: &str) -> Option<(&'static Table, Arc<dyn Storage>)> {
        let v = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        v.iter()
            .find(|(t, _)| t.name.eq_ignore_ascii_case(name))
            .map(|(t, e)| (*t, e.clone()))
    }
}

/// The module; a `const` so that `&BURROW_MODULE` is promoted to `'static`.
pub const BURROW_MODULE: Module<'static, VirtualTable> = Module::read_only_module();

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
}

/// idx_num values: a full scan, or equality on one column.
const PLAN_SCAN: c_int = 0;
const PLAN_ID: c_int = 1;
/// `PLAN_FIELD + i`: equality on field `i`.
const PLAN_FIELD: c_int = 2;

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
        let vtab = VirtualTable {
            base: ffi::sqlite3_vtab::default(),
            table,
            engine,
        };
        Ok((Cow::Owned(ddl), vtab))
    }

    fn best_index(&self, info: &mut IndexInfo) -> rusqlite::Result<bool> {
        // Prefer the ID, then a unique field, then an indexed one.
        let mut best: Option<(usize, c_int, u8)> = None;
        for (i, c) in info.constraints().enumerate() {
            if !c.is_usable() || c.operator() != IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_EQ {
                continue;
            }
            let (plan, rank) = match c.column() {
                -1 | 0 => (PLAN_ID, 3),
                col => {
                    let f = &self.table.fields[(col - 1) as usize];
                    match (f.unique, f.indexed) {
                        (true, _) => (PLAN_FIELD + col - 1, 2),
                        (false, true) => (PLAN_FIELD + col - 1, 1),
                        _ => continue,
                    }
                }
            };
            if best.is_none_or(|(_, _, r)| rank > r) {
                best = Some((i, plan, rank));
            }
        }
        match best {
            Some((i, plan, rank)) => {
                let mut usage = info.constraint_usage(i);
                usage.set_argv_index(1);
                // SQLite re-checks the value: the engine's equality is typed.
                usage.set_omit(false);
                info.set_idx_num(plan);
                let rows = if rank >= 2 { 1 } else { 10 };
                info.set_estimated_cost(rows as f64);
                info.set_estimated_rows(rows);
            }
            None => {
                info.set_idx_num(PLAN_SCAN);
                info.set_estimated_cost(1_000_000.0);
            }
        }
        Ok(true)
    }

    fn open(&'vtab mut self) -> rusqlite::Result<VirtualCursor<'vtab>> {
        Ok(VirtualCursor {
            base: ffi::sqlite3_vtab_cursor::default(),
            vtab: self,
            cells: Vec::new(),
            bytes: Vec::new(),
            row: 0,
        })
    }
}

impl CreateVTab<'_> for VirtualTable {
    const KIND: VTabKind = VTabKind::Default;
}

/// One value of a scanned row, as SQLite stores it; text and blobs are ranges
/// of the cursor's byte buffer.
#[derive(Clone, Copy)]
enum Cell {
    Null,
    Int(i64),
    Real(f64),
    Text(usize, usize),
    Blob(usize, usize),
}

/// A scan of a virtual table: the rows the engine returned, `1 + fields` cells
/// per row, already in SQLite's form. Text and blobs share one byte buffer and
/// dates are written as text once, so a scan allocates nothing per row.
#[repr(C)]
pub struct VirtualCursor<'vtab> {
    /// SQLite's part of the structure; must come first.
    base: ffi::sqlite3_vtab_cursor,
    vtab: &'vtab VirtualTable,
    cells: Vec<Cell>,
    bytes: Vec<u8>,
    row: usize,
}

/// Appends `v` in SQLite's form.
fn push_cell(cells: &mut Vec<Cell>, bytes: &mut Vec<u8>, v: &ValueRef<'_>) -> rusqlite::Result<()> {
    let mut buf = [0u8; DATETIME_BUF];
    let mut keep = |t: &[u8]| {
        let at = bytes.len();
        bytes.extend_from_slice(t);
        (at, bytes.len())
    };
    cells.push(match crate::stored(v, &mut buf)? {
        SqlValue::Null => Cell::Null,
        SqlValue::Integer(i) => Cell::Int(i),
        SqlValue::Real(f) => Cell::Real(f),
        SqlValue::Text(t) => {
            let (a, b) = keep(t);
            Cell::Text(a, b)
        }
        SqlValue::Blob(t) => {
            let (a, b) = keep(t);
            Cell::Blob(a, b)
        }
    });
    Ok(())
}

impl VirtualCursor<'_> {
    fn stride(&self) -> usize {
        self.vtab.table.fields.len() + 1
    }
}

/// The constraint value as the column's typed value, or `None` when it cannot
/// be one (then the cursor scans, and SQLite's own check decides).
fn key(kind: FieldKind, v: SqlOwned) -> Option<Value> {
    let v = match v {
        SqlOwned::Integer(i) => ValueRef::Int(i),
        SqlOwned::Real(f) => ValueRef::Real(f),
        SqlOwned::Text(ref t) => ValueRef::Text(t.as_str().into()),
        SqlOwned::Blob(ref b) => ValueRef::Blob(b),
        SqlOwned::Null => return None,
    };
    let typed = crate::typed(kind, v);
    let fits = matches!(
        (kind, &typed),
        (
            FieldKind::I32 | FieldKind::I64 | FieldKind::U32 | FieldKind::Reference(_),
            Value::Int(_)
        ) | (FieldKind::F64, Value::Real(_))
            | (FieldKind::Bool, Value::Bool(_))
            | (FieldKind::Currency, Value::Currency(_))
            | (FieldKind::Text | FieldKind::Json, Value::Text(_))
            | (FieldKind::Blob, Value::Blob(_))
            | (FieldKind::Date, Value::Date(_))
            | (FieldKind::DateTime, Value::DateTime(_))
    );
    fits.then_some(typed)
}

// SAFETY: `VirtualCursor` is `repr(C)` with `sqlite3_vtab_cursor` first.
unsafe impl VTabCursor for VirtualCursor<'_> {
    fn filter(
        &mut self,
        idx_num: c_int,
        _idx_str: Option<&str>,
        args: &Filters<'_>,
    ) -> rusqlite::Result<()> {
        let table = self.vtab.table;
        let column = match idx_num {
            PLAN_ID => Some(Column::Id),
            n if n >= PLAN_FIELD => Some(Column::Field((n - PLAN_FIELD) as usize)),
            _ => None,
        };
        let mut select = Select::all();
        if let Some(col) = column {
            let kind = match col {
                Column::Id => FieldKind::I64,
                Column::Field(i) => table.fields[i].kind,
            };
            match key(kind, args.get::<SqlOwned>(0)?) {
                Some(v) => {
                    select.filter = Filter {
                        expr: Some(Expr::Cmp(col, CmpOp::Eq, 0)),
                        params: vec![v],
                    }
                }
                // NULL equals nothing.
                None if args.get::<SqlOwned>(0)? == SqlOwned::Null => {
                    self.cells.clear();
                    self.bytes.clear();
                    self.row = 0;
                    return Ok(());
                }
                None => {}
            }
        }
        let n = table.fields.len();
        let (cells, bytes) = (&mut self.cells, &mut self.bytes);
        cells.clear();
        bytes.clear();
        self.row = 0;
        self.vtab
            .engine
            .select(table, &select, &mut |row| {
                cells.push(Cell::Int(row.id()?));
                for i in 0..n {
                    push_cell(cells, bytes, &row.get(i)?)
                        .map_err(|e| burrow_core::Error::engine(crate::ENGINE, e))?;
                }
                Ok(())
            })
            .map_err(|e| rusqlite::Error::ModuleError(e.to_string()))
    }

    fn next(&mut self) -> rusqlite::Result<()> {
        self.row += 1;
        Ok(())
    }

    fn eof(&self) -> bool {
        (self.row + 1) * self.stride() > self.cells.len()
    }

    fn column(&self, ctx: &mut Context, i: c_int) -> rusqlite::Result<()> {
        let out = match self.cells[self.row * self.stride() + i as usize] {
            Cell::Null => SqlValue::Null,
            Cell::Int(i) => SqlValue::Integer(i),
            Cell::Real(f) => SqlValue::Real(f),
            Cell::Text(a, b) => SqlValue::Text(&self.bytes[a..b]),
            Cell::Blob(a, b) => SqlValue::Blob(&self.bytes[a..b]),
        };
        ctx.set_result(ToSqlOutput::Borrowed(out))
    }

    fn rowid(&self) -> rusqlite::Result<i64> {
        match self.cells.get(self.row * self.stride()) {
            Some(Cell::Int(id)) => Ok(*id),
            _ => Err(rusqlite::Error::ModuleError("no current row".into())),
        }
    }
}
