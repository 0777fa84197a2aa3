//! Statements of the per-row paths, prepared once per table and kept.
//!
//! rusqlite's statement cache costs a hash of the SQL text, two LRU updates and
//! a `sqlite3_clear_bindings` on every use: about a fifth of an in-memory insert,
//! measured with the engine benchmark. Holding the statements avoids all three,
//! but a `Statement` borrows its `Connection`, which lives in the same struct.
//! This module is the one place that erases that borrow; see [`Hot`].
#![allow(unsafe_code)]

use rusqlite::{Connection, Statement};

use crate::raw::{Kept, RawStmt, Rows};
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
    pub insert: RawStmt,
    pub insert_new: RawStmt,
    pub select_by_id: RawStmt,
    pub update_all: Statement<'static>,
    pub delete: Statement<'static>,
    pub bulk_insert: RawStmt,
    pub bulk_insert_shared: Option<RawStmt>,
}

/// Sets up the SQLite library for Burrow once per process, before its first
/// connection: without memory statistics. With them (SQLite's default),
/// every allocation SQLite makes takes and releases a process-wide mutex to
/// count the bytes, about 6% of an in-memory insert counted with callgrind,
/// and a point where threads on separate connections contend. Burrow uses
/// neither the counts nor the soft heap limit that needs them. SQLite takes
/// such settings only before it starts: where the process opened SQLite
/// before Burrow did, its settings stay and this does nothing.
pub fn configure_library() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: sqlite3_config is called with the option's documented
        // argument (an int); before sqlite3_initialize it applies, after it
        // SQLite refuses it with SQLITE_MISUSE and changes nothing. Once
        // guards against two threads calling it at once.
        unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS,
                0 as std::ffi::c_int,
            );
        }
    });
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
            insert: RawStmt::prepare(conn, &sql.insert)?,
            insert_new: RawStmt::prepare(conn, &sql.insert_new)?,
            select_by_id: RawStmt::prepare(conn, &sql.select_by_id)?,
            update_all: keep(conn, &sql.update_all)?,
            delete: keep(conn, &sql.delete)?,
            bulk_insert: RawStmt::prepare(conn, &sql.bulk_insert)?,
            bulk_insert_shared: match &sql.bulk_insert_shared {
                Some(text) => Some(RawStmt::prepare(conn, text)?),
                None => None,
            },
        })
    }
}

/// A connection that keeps every statement it prepares, by SQL text: what
/// the external SQL layer's SQLite connections use. Its statements are
/// [`RawStmt`]s, stepped through SQLite's C API.
///
/// Statements are reached only through [`KeptStatement`], which cannot move
/// one out, so the contract of `Hot` (this module) holds: `kept` is declared
/// before `conn` (dropped first) and the connection is boxed (a stable
/// address).
pub struct KeptConnection {
    kept: Kept,
    conn: Box<Connection>,
}

// SAFETY: the statements are not `Send` only because they point into their
// connection. The connection and its statements move between threads
// together and are used only through `&mut self`, so no two threads ever
// touch them at once, which SQLite's multi-thread mode (rusqlite's default
// open flags) allows.
unsafe impl Send for KeptConnection {}

impl KeptConnection {
    /// Takes over `conn`.
    pub fn new(conn: Connection) -> Self {
        KeptConnection {
            kept: Kept::default(),
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
        self.kept.get(&self.conn, sql).map(KeptStatement)
    }
}

/// A kept statement, lent for one use.
pub struct KeptStatement<'k>(&'k mut RawStmt);

impl KeptStatement<'_> {
    /// Binds a value already in SQLite's stored form (see [`crate::stored`]).
    #[inline]
    pub fn bind_stored(
        &mut self,
        one_based_index: usize,
        value: rusqlite::types::ValueRef<'_>,
    ) -> rusqlite::Result<()> {
        self.0.bind_sql(one_based_index, value)
    }

    /// How many parameters the statement takes.
    pub fn parameter_count(&self) -> usize {
        self.0.parameter_count()
    }

    /// Runs a statement that returns no rows; returns the rows changed.
    pub fn raw_execute(&mut self) -> rusqlite::Result<usize> {
        self.0.execute()
    }

    /// Runs a statement that returns no rows with `values` bound in place
    /// (see [`crate::execute_in_place`]); returns the rows changed.
    pub fn execute_in_place(
        &mut self,
        values: &[burrow_core::ValueRef<'_>],
        dates: &mut crate::DateTexts,
    ) -> rusqlite::Result<usize> {
        crate::execute_in_place(self.0, values, dates)
    }

    /// Runs a multi-row insert whose parameters are the fields of each of
    /// `rows` in turn, bound in place straight from the records (see
    /// [`crate::execute_in_place`]), each value as `map` gives it from its
    /// field's index and the record's value; returns the rows changed. With
    /// `shared` fields, the statement is one of
    /// [`crate::statements::TableNames::insert_rows_shared`] and the rows
    /// [`crate::statements::rows_share`] them: they are bound once, first.
    pub fn insert_in_place<'r>(
        &mut self,
        table: &burrow_core::Table,
        rows: impl Iterator<Item = &'r dyn burrow_core::Fields> + Clone,
        shared: &[usize],
        dates: &mut crate::DateTexts,
        map: impl Fn(usize, burrow_core::ValueRef<'r>) -> burrow_core::ValueRef<'r>,
    ) -> rusqlite::Result<usize> {
        crate::insert_in_place(self.0, table, None, rows, shared, dates, map)
    }

    /// Runs a statement that returns rows; the statement is reset when the
    /// rows are dropped.
    pub fn raw_query(&mut self) -> Rows<'_> {
        self.0.rows()
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn one(k: &mut KeptConnection, sql: &str, param: i64) -> i64 {
        let mut stmt = k.statement(sql).unwrap();
        stmt.bind_stored(1, rusqlite::types::ValueRef::Integer(param))
            .unwrap();
        let mut rows = stmt.raw_query();
        let row = rows.next_row().unwrap().expect("a row");
        match row.cell(0).unwrap() {
            rusqlite::types::ValueRef::Integer(i) => i,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn kept_statements_rebind_and_survive_eviction() {
        let mut k = KeptConnection::new(Connection::open_in_memory().unwrap());
        assert_eq!(one(&mut k, "SELECT ?1 + 1", 1), 2);
        assert_eq!(one(&mut k, "SELECT ?1 + 1", 41), 42);
        // More distinct texts than are kept: the set is dropped and rebuilt.
        for i in 0..(crate::raw::KEPT_MAX as i64 + 10) {
            assert_eq!(one(&mut k, &format!("SELECT ?1 * {i}"), 3), 3 * i);
        }
        assert!(k.kept.len() <= crate::raw::KEPT_MAX);
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
            let row = rows.next_row().unwrap().expect("a row");
            assert_eq!(row.cell(0).unwrap(), v);
            let rusqlite::types::ValueRef::Text(kind) = row.cell(1).unwrap() else {
                panic!("typeof gives text");
            };
            let kind = std::str::from_utf8(kind).unwrap();
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
