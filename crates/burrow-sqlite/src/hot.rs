//! Statements of the per-row paths, prepared once per table and kept.
//!
//! rusqlite's statement cache costs a hash of the SQL text, two LRU updates and
//! a `sqlite3_clear_bindings` on every use: about a fifth of an in-memory insert,
//! measured with the engine benchmark. Holding the statements avoids all three,
//! but a `Statement` borrows its `Connection`, which lives in the same struct.
//! This module is the one place that erases that borrow; see [`Hot`].
#![allow(unsafe_code)]

use rusqlite::{Connection, Statement};

use crate::sql::TableSql;

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
    pub select_by_id: Statement<'static>,
    pub update_all: Statement<'static>,
    pub delete: Statement<'static>,
    pub bulk_insert: Statement<'static>,
}

fn keep(conn: &Connection, sql: &str) -> rusqlite::Result<Statement<'static>> {
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
            select_by_id: keep(conn, &sql.select_by_id)?,
            update_all: keep(conn, &sql.update_all)?,
            delete: keep(conn, &sql.delete)?,
            bulk_insert: keep(conn, &sql.bulk_insert)?,
        })
    }
}
