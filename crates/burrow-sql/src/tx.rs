//! [`SqlTx`]: an open transaction, which owns the pooled connection it runs on.

use std::cell::{RefCell, RefMut};
use std::sync::Arc;

use burrow_core::{EngineTx, Error, Result, Value};

use crate::conn::{Conn, DbError, DbErrorKind, QueryError};
use crate::engine::SqlEngine;
use crate::pool::Pooled;
use crate::rows::{self, Session, Via};
use crate::ENGINE;

/// An open transaction of a [`SqlEngine`]: every call through it runs on the
/// one connection it took from the pool when it began, and sees its own
/// uncommitted writes. Committing or rolling back returns the connection to
/// the pool; dropping it without either rolls back.
///
/// It can move to another thread between calls (a server keeps it between
/// two requests of one client).
pub struct SqlTx {
    engine: Arc<SqlEngine>,
    /// `None` only inside `commit` and `rollback`, which consume the handle.
    /// A `RefCell`, not a mutex: the row calls take `&self`, and a handle is
    /// used by one thread at a time (it is `Send`, not `Sync`).
    conn: RefCell<Option<Pooled>>,
}

impl SqlTx {
    pub(crate) fn begin(engine: Arc<SqlEngine>) -> Result<SqlTx> {
        let mut p = engine.pool.take()?;
        if let Err(e) = p.conn.simple(engine.dialect().begin_verb()) {
            // Whether BEGIN took effect is unknown: keep the connection only
            // if a rollback puts it back to a known state.
            if p.conn.simple("ROLLBACK").is_ok() {
                engine.pool.give_back(p);
            } else {
                engine.pool.discard(p);
            }
            return Err(e.into_error(ENGINE, None));
        }
        Ok(SqlTx {
            engine,
            conn: RefCell::new(Some(p)),
        })
    }

    /// Runs a statement of your own inside this transaction; returns the
    /// rows it changed. Placeholders are the dialect's (`$1` or `?`); bind
    /// values, never splice them.
    pub fn execute(&self, sql: &str, params: &[Value]) -> Result<u64> {
        rows::execute(self, sql, params)
    }

    /// Runs a query of your own inside this transaction, handing each row to
    /// `f` as owned values.
    pub fn query(
        &self,
        sql: &str,
        params: &[Value],
        f: &mut dyn FnMut(&[Value]) -> Result<()>,
    ) -> Result<()> {
        rows::query(self, sql, params, f)
    }

    /// Commits, and returns the connection to the pool. A failed commit
    /// leaves nothing of the transaction behind.
    pub fn commit(mut self) -> Result<()> {
        self.end("COMMIT")
    }

    /// Rolls back, reporting a failure to do so (dropping rolls back
    /// silently).
    pub fn rollback(mut self) -> Result<()> {
        self.end("ROLLBACK")
    }

    /// The engine this transaction runs on.
    pub fn engine(&self) -> &Arc<SqlEngine> {
        &self.engine
    }

    fn conn(&self) -> Result<RefMut<'_, Box<dyn Conn>>> {
        let slot = self.conn.try_borrow_mut().map_err(|_| {
            Error::Transaction("a row callback called back into its own transaction")
        })?;
        let conn = RefMut::filter_map(slot, |p| p.as_mut().map(|p| &mut p.conn))
            .map_err(|_| Error::Transaction("the transaction has ended"))?;
        if conn.broken() {
            return Err(DbError::new(
                DbErrorKind::Lost,
                "the transaction's connection is gone, and the server rolled it back",
            )
            .into_error(ENGINE, None));
        }
        Ok(conn)
    }

    /// Ends the transaction with `verb` and returns its connection to the
    /// pool when the connection is known to be outside any transaction.
    fn end(&mut self, verb: &str) -> Result<()> {
        let Some(mut p) = self.conn.get_mut().take() else {
            return Ok(());
        };
        let pool = &self.engine.pool;
        if p.conn.broken() {
            pool.discard(p);
            // The server rolled the transaction back when the connection went.
            return if verb == "ROLLBACK" {
                Ok(())
            } else {
                Err(DbError::new(
                    DbErrorKind::Lost,
                    "the transaction's connection is gone, so it was rolled back",
                )
                .into_error(ENGINE, None))
            };
        }
        match p.conn.simple(verb) {
            Ok(()) => {
                pool.give_back(p);
                Ok(())
            }
            Err(e) if e.kind == DbErrorKind::Lost => {
                pool.discard(p);
                if verb == "ROLLBACK" {
                    Ok(())
                } else {
                    Err(e.into_error(ENGINE, None))
                }
            }
            Err(e) => {
                // A failed COMMIT leaves nothing behind; a connection whose
                // rollback fails too is in a state nobody knows, so it is
                // closed rather than lent again.
                if verb != "ROLLBACK" && p.conn.simple("ROLLBACK").is_ok() {
                    pool.give_back(p);
                } else {
                    pool.discard(p);
                }
                Err(e.into_error(ENGINE, None))
            }
        }
    }
}

impl Session for SqlTx {
    fn engine(&self) -> &SqlEngine {
        &self.engine
    }

    fn write<R>(&self, f: impl FnOnce(&mut dyn Conn, bool) -> Result<R>) -> Result<R> {
        f(&mut **self.conn()?, self.engine.tx_guard())
    }

    // Never repeated: a transaction's connection cannot be replaced.
    fn read<R>(
        &self,
        mut f: impl FnMut(&mut dyn Conn) -> Result<R, QueryError>,
    ) -> Result<R, QueryError> {
        f(&mut **self.conn().map_err(QueryError::Out)?)
    }
}

burrow_core::forward_row_ops!(SqlTx, |s| Via(s));

impl EngineTx for SqlTx {
    fn commit(self: Box<Self>) -> Result<()> {
        (*self).commit()
    }

    fn rollback(self: Box<Self>) -> Result<()> {
        (*self).rollback()
    }
}

impl Drop for SqlTx {
    fn drop(&mut self) {
        let _ = self.end("ROLLBACK");
    }
}
