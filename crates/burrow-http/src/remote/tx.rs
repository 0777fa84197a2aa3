//! The transaction handle: `BEGIN` on a connection taken from the pool,
//! every call of the transaction on that connection (the server ties the
//! transaction to it), then `END` or `ABORT` and the connection back to the
//! pool. Dropped without a commit, it sends `ABORT`; a lost connection is a
//! transaction the server rolled back.

use std::cell::RefCell;
use std::sync::Arc;

use burrow_core::driver::TxWrites;
use burrow_core::{EngineTx, Error, OrmCache, Result, Row, SqlHost, Table, Value};

use super::conn::{exchange, Body, Conn, Request, Sink};
use super::reply::Reply;
use super::retry::Retry;
use super::{Link, RemoteEngine, ENGINE};

/// What an open remote transaction holds.
pub(super) struct TxLine {
    /// The connection the server ties the transaction to; `None` once it
    /// was lost, and the server rolled the transaction back with it.
    conn: RefCell<Option<Conn>>,
    /// What the transaction wrote through the cache.
    pub(super) writes: TxWrites,
}

impl TxLine {
    /// Sends `req` on the transaction's connection.
    pub(super) fn send(
        &self,
        cache: &OrmCache,
        req: Request<'_>,
        waiting: &mut dyn FnMut(),
        sink: Option<&mut Sink<'_>>,
    ) -> Result<Reply> {
        let mut slot = self.conn.borrow_mut();
        let Some(conn) = slot.as_mut() else {
            return Err(lost());
        };
        let r = exchange(conn, req, waiting, sink);
        if !r.as_ref().is_ok_and(|(_, keep)| *keep) {
            // Never sent again on another connection: the transaction is gone
            // with this one.
            *slot = None;
            self.writes.end(cache, false);
        }
        // Whatever cut the exchange, the transaction went with its
        // connection: the server rolled it back, this call included.
        r.map(|(reply, _)| reply).map_err(|_| lost())
    }
}

#[cold]
fn lost() -> Error {
    Error::Transaction(
        "the remote transaction's connection closed (the server's idle or lifetime limit for \
         transactions, a shutdown, or the network), and the server rolled the transaction back",
    )
}

/// An open transaction on the server: `BEGIN` was sent on its connection,
/// and every call goes on that connection until `END` or `ABORT`.
pub(super) struct RemoteTx {
    engine: Arc<RemoteEngine>,
    line: TxLine,
}

impl RemoteTx {
    /// Sends `BEGIN` on a connection from the pool, which the transaction
    /// then keeps.
    pub(super) fn begin(engine: Arc<RemoteEngine>) -> Result<Box<dyn EngineTx>> {
        let mut conn = engine.take_conn(true)?;
        let mut head = Vec::new();
        engine.write_head(&mut head, "BEGIN", "", 0);
        let req = Request {
            head: &head,
            body: Body::Bytes(b""),
        };
        // A BEGIN that ran on a connection now gone ended with it: sending it
        // again is safe.
        let (reply, keep) = engine.exchange_or_again(&mut conn, req, true, &mut || {}, None)?;
        if reply.status != 200 {
            if keep {
                engine.put_back(conn);
            }
            return Err(reply.error(None));
        }
        if !keep {
            return Err(Error::engine(
                ENGINE,
                "the server closed the transaction's connection",
            ));
        }
        conn.reused = true;
        Ok(Box::new(RemoteTx {
            engine,
            line: TxLine {
                conn: RefCell::new(Some(conn)),
                writes: TxWrites::default(),
            },
        }))
    }

    fn link(&self) -> Link<'_> {
        Link {
            engine: &self.engine,
            tx: Some(&self.line),
        }
    }

    /// Ends the transaction with `END` (commit) or `ABORT`, then pools its
    /// connection again.
    fn end(&mut self, verb: &str) -> Result<()> {
        let Some(mut conn) = self.line.conn.get_mut().take() else {
            // Already rolled back by the server, when the connection was lost.
            self.line.writes.end(&self.engine.cache, false);
            return if verb == "END" { Err(lost()) } else { Ok(()) };
        };
        let mut head = Vec::new();
        self.engine.write_head(&mut head, verb, "", 0);
        let req = Request {
            head: &head,
            body: Body::Bytes(b""),
        };
        let r = exchange(&mut conn, req, &mut || {}, None).map_err(Retry::into_error);
        let committed = verb == "END" && matches!(&r, Ok((reply, _)) if reply.status == 200);
        self.line.writes.end(&self.engine.cache, committed);
        let (reply, keep) = r?;
        if keep {
            self.engine.put_back(conn);
        }
        if reply.status != 200 {
            return Err(reply.error(None));
        }
        Ok(())
    }
}

burrow_core::forward_row_ops!(RemoteTx, |s| s.link());

impl EngineTx for RemoteTx {
    fn commit(mut self: Box<Self>) -> Result<()> {
        self.end("END")
    }

    fn rollback(mut self: Box<Self>) -> Result<()> {
        self.end("ABORT")
    }

    fn sql_host(&self) -> Option<&dyn SqlHost> {
        Some(self)
    }
}

impl SqlHost for RemoteTx {
    fn sql_select(
        &self,
        table: &'static Table,
        sql: &str,
        params: &[Value],
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        self.link().sql_select(table, sql, params, out)
    }
}

impl Drop for RemoteTx {
    /// `ABORT` rather than only closing the connection, which the server
    /// also rolls back on: once this returns the server has rolled back, so
    /// the caller's next call never waits for it, and the connection is
    /// pooled again.
    fn drop(&mut self) {
        if self.line.conn.get_mut().is_some() {
            let _ = self.end("ABORT");
        }
    }
}
