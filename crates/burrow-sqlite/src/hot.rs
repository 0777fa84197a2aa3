//! Statements of the per-row paths, prepared once per table and kept.
//!
//! rusqlite's statement cache costs a hash of the SQL text, two LRU updates and
//! a `sqlite3_clear_bindings` on every use: about a fifth of an in-memory insert,
//! measured with the engine benchmark. Holding the statements avoids all three,
//! but a `Statement` borrows its `Connection`, which lives in the same struct.
//! This module is the one place that erases that borrow; see [`Hot`].
#![allow(unsafe_code)]

use std::collections::HashMap;

use rusqlite::{Connection, Statement};

use crate::raw::RawStmt;
use crate::statements::TableSql;

/// The kept statements of one table.
///
/// # Safety contract
///
/// A `Hot` holds statements whose borrow of the connection was erased to
/// `'static`. Its owner must (1) keep the `Connection` at a stable address (in a
/// `Box`), (2) drop every `Hot` before that connection (declare the field that
/// holds them before the connection's field), and (3) use the statements only
/// while it has exclusive access to the connection, as it does for the
/// connection itself.
pub struct Hot {
    pub insert: Statement<'static>,
    pub insert_new: Statement<'static>,
    pub select_by_id: RawStmt,
    pub update_all: Statement<'static>,
    pub delete: Statement<'static>,
    pub bulk_insert: Statement<'static>,
}

/// Slots of SQLite's per-connection lookaside allocator: 1200 bytes each (its
/// default size), ten times its default count.
const LOOKASIDE_SLOTS: i32 = 400;

/// Widens the connection's lookaside allocator, the cheap, lock-free memory
/// SQLite uses for small allocations (the cells of a row being read, for one).
/// The kept statements pin lookaside slots for the connection's lifetime; with
/// the default 40 slots they exhaust it, and every row read then goes through
/// the global allocator and its mutex: a by-ID read cost 40% more instructions
/// than the same read on a fresh connection, measured with callgrind. Call it
/// right after opening, before any statement holds lookaside memory.
pub fn widen_lookaside(conn: &Connection) -> rusqlite::Result<()> {
    // SAFETY: the handle is live for the call; SQLITE_DBCONFIG_LOOKASIDE with a
    // null buffer makes SQLite allocate the slots itself, and SQLite refuses
    // the change (SQLITE_BUSY) if any lookaside memory is in use.
    let rc = unsafe {
        rusqlite::ffi::sqlite3_db_config(
            conn.handle(),
            rusqlite::ffi::SQLITE_DBCONFIG_LOOKASIDE,
            std::ptr::null_mut::<std::ffi::c_void>(),
            1200 as std::ffi::c_int,
            LOOKASIDE_SLOTS as std::ffi::c_int,
        )
    };
    if rc == rusqlite::ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rc),
            Some("cannot widen the lookaside allocator".into()),
        ))
    }
}

pub(crate) fn keep(conn: &Connection, sql: &str) -> rusqlite::Result<Statement<'static>> {
    let stmt = conn.prepare(sql)?;
    // SAFETY: only the lifetime changes. Per the contract above, the connection
    // outlives the statement at a fixed address and is never used concurrently
    // with it, which is everything the borrow guaranteed.
    Ok(unsafe { std::mem::transmute::<Statement<'_>, Statement<'static>>(stmt) })
}

impl Hot {
    /// Prepares the statements of `sql` on `conn`, under the contract above.
    pub fn prepare(conn: &Connection, sql: &TableSql) -> rusqlite::Result<Hot> {
        Ok(Hot {
            insert: keep(conn, &sql.insert)?,
            insert_new: keep(conn, &sql.insert_new)?,
            select_by_id: RawStmt::prepare(conn, &sql.select_by_id)?,
            update_all: keep(conn, &sql.update_all)?,
            delete: keep(conn, &sql.delete)?,
            bulk_insert: keep(conn, &sql.bulk_insert)?,
        })
    }
}

/// A connection that keeps every statement it prepares, by SQL text: what the
/// external SQL layer's SQLite connections use. rusqlite's statement cache costs
/// a SipHash of the SQL, an LRU update and a `sqlite3_clear_bindings` on every
/// use, about an eighth of a read by ID counted with callgrind; a map with a
/// fast hash costs a fraction of that.
///
/// Statements are reached only through [`KeptStatement`], which cannot move
/// one out, so the contract of `Hot` (this module) holds: `statements` is declared before
/// `conn` (dropped first) and the connection is boxed (a stable address).
pub struct KeptConnection {
    statements: Vec<Statement<'static>>,
    /// Where each SQL text's statement is in `statements`: a hit costs one
    /// hash of the text.
    by_sql: HashMap<Box<str>, usize, foldhash::fast::RandomState>,
    /// The text of each statement in `statements`.
    texts: Vec<Box<str>>,
    /// The statement used last. A per-row loop runs one statement over and
    /// over, and comparing its text costs less than hashing it: a lookup fell
    /// from about 200 instructions to 80 (callgrind, the engine benchmark's
    /// insert).
    last: Option<usize>,
    conn: Box<Connection>,
}

/// Kept statements beyond this are dropped all at once: an engine's SQL per
/// table is a handful of texts, so only ad-hoc queries ever reach it.
const KEPT_MAX: usize = 256;

// SAFETY: a `Statement` is not `Send` only because it borrows its `Connection`
// (which is `Send` but not `Sync`). The connection and its statements move
// between threads together and are used only through `&mut self`, so no two
// threads ever touch them at once, which SQLite's multi-thread mode (rusqlite's
// default open flags) allows.
unsafe impl Send for KeptConnection {}

impl KeptConnection {
    /// Takes over `conn`.
    pub fn new(conn: Connection) -> Self {
        KeptConnection {
            statements: Vec::new(),
            by_sql: HashMap::default(),
            texts: Vec::new(),
            last: None,
            conn: Box::new(conn),
        }
    }

    /// The connection, for what needs no kept statement.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The statement of `sql`, prepared on first use. Its parameters keep
    /// their last bindings: bind every one before running it.
    pub fn statement(&mut self, sql: &str) -> rusqlite::Result<KeptStatement<'_>> {
        if let Some(at) = self.last {
            if *self.texts[at] == *sql {
                return Ok(KeptStatement(&mut self.statements[at]));
            }
        }
        let at = match self.by_sql.get(sql) {
            Some(&at) => at,
            None => {
                if self.statements.len() >= KEPT_MAX {
                    self.last = None;
                    self.statements.clear();
                    self.texts.clear();
                    self.by_sql.clear();
                }
                self.statements.push(keep(&self.conn, sql)?);
                let at = self.statements.len() - 1;
                self.texts.push(sql.into());
                self.by_sql.insert(sql.into(), at);
                at
            }
        };
        self.last = Some(at);
        Ok(KeptStatement(&mut self.statements[at]))
    }
}

/// A kept statement, lent for one use.
pub struct KeptStatement<'k>(&'k mut Statement<'static>);

impl KeptStatement<'_> {
    /// Binds parameter `one_based_index`.
    pub fn raw_bind_parameter<T: rusqlite::ToSql>(
        &mut self,
        one_based_index: usize,
        param: T,
    ) -> rusqlite::Result<()> {
        self.0.raw_bind_parameter(one_based_index, param)
    }

    /// Binds a value already in SQLite's stored form (see [`crate::stored`]).
    /// Each kind is bound through its own concrete type, so rusqlite's
    /// generic binding folds down to the one SQLite call.
    #[inline]
    pub fn bind_stored(
        &mut self,
        one_based_index: usize,
        value: rusqlite::types::ValueRef<'_>,
    ) -> rusqlite::Result<()> {
        use rusqlite::types::{Null, ToSqlOutput, ValueRef};
        match value {
            ValueRef::Integer(i) => self.0.raw_bind_parameter(one_based_index, i),
            ValueRef::Text(t) => self.0.raw_bind_parameter(one_based_index, TextBytes(t)),
            ValueRef::Real(f) => self.0.raw_bind_parameter(one_based_index, f),
            ValueRef::Null => self.0.raw_bind_parameter(one_based_index, Null),
            ValueRef::Blob(b) => self
                .0
                .raw_bind_parameter(one_based_index, ToSqlOutput::Borrowed(ValueRef::Blob(b))),
        }
    }

    /// Runs a statement that returns no rows; returns the rows changed.
    pub fn raw_execute(&mut self) -> rusqlite::Result<usize> {
        self.0.raw_execute()
    }

    /// Runs a statement that returns rows; the statement is reset when the
    /// rows are dropped.
    pub fn raw_query(&mut self) -> rusqlite::Rows<'_> {
        self.0.raw_query()
    }
}

/// Text already checked as UTF-8, bound as text (`&[u8]` binds as a blob).
struct TextBytes<'a>(&'a [u8]);

impl rusqlite::ToSql for TextBytes<'_> {
    #[inline]
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(rusqlite::types::ToSqlOutput::Borrowed(
            rusqlite::types::ValueRef::Text(self.0),
        ))
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn one(k: &mut KeptConnection, sql: &str, param: i64) -> i64 {
        let mut stmt = k.statement(sql).unwrap();
        stmt.raw_bind_parameter(1, param).unwrap();
        let mut rows = stmt.raw_query();
        let row = rows.next().unwrap().expect("a row");
        row.get(0).unwrap()
    }

    #[test]
    fn kept_statements_rebind_and_survive_eviction() {
        let mut k = KeptConnection::new(Connection::open_in_memory().unwrap());
        assert_eq!(one(&mut k, "SELECT ?1 + 1", 1), 2);
        assert_eq!(one(&mut k, "SELECT ?1 + 1", 41), 42);
        // More distinct texts than are kept: the set is dropped and rebuilt.
        for i in 0..(KEPT_MAX as i64 + 10) {
            assert_eq!(one(&mut k, &format!("SELECT ?1 * {i}"), 3), 3 * i);
        }
        assert!(k.statements.len() <= KEPT_MAX);
        assert_eq!(one(&mut k, "SELECT ?1 + 1", 9), 10);
        let mut stmt = k.statement("CREATE TABLE t(x)").unwrap();
        assert_eq!(stmt.raw_execute().unwrap(), 0);
        // Alternating texts: the last-used shortcut must follow the switch.
        for i in 0..3 {
            assert_eq!(one(&mut k, "SELECT ?1 + 1", i), i + 1);
            assert_eq!(one(&mut k, "SELECT ?1 * 2", i), i * 2);
        }
    }

    #[test]
    fn bind_stored_keeps_each_kind() {
        use rusqlite::types::ValueRef;
        let mut k = KeptConnection::new(Connection::open_in_memory().unwrap());
        let values = [
            ValueRef::Null,
            ValueRef::Integer(-7),
            ValueRef::Real(2.5),
            ValueRef::Text(b"h\xc3\xa9"),
            ValueRef::Blob(b"\0\x01"),
        ];
        for v in values {
            let mut stmt = k.statement("SELECT ?1, typeof(?1)").unwrap();
            stmt.bind_stored(1, v).unwrap();
            let mut rows = stmt.raw_query();
            let row = rows.next().unwrap().expect("a row");
            assert_eq!(row.get_ref(0).unwrap(), v);
            let kind: String = row.get(1).unwrap();
            let want = match v {
                ValueRef::Null => "null",
                ValueRef::Integer(_) => "integer",
                ValueRef::Real(_) => "real",
                ValueRef::Text(_) => "text",
                ValueRef::Blob(_) => "blob",
            };
            assert_eq!(kind, want);
        }
    }
}
