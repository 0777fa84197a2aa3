//! The connection pool: idle kept-alive connections, taken by a call (or a
//! transaction, for its whole life) and put back after a complete answer.
//! A request that writes is never sent on a connection the server may have
//! closed while it was idle, since a failure after sending would leave open
//! whether it ran.

use std::net::TcpStream;
use std::sync::PoisonError;

use burrow_core::Result;

use super::conn::{Conn, InBuf, Request, Sink, Spin, Stream};
use super::reply::Reply;
use super::RemoteEngine;

impl RemoteEngine {
    /// A new connection, with the engine's timeouts (and TLS over it for an
    /// `https://` URL).
    pub(super) fn open_conn(&self) -> Result<Conn> {
        let stream = TcpStream::connect_timeout(&self.addr, self.timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(self.timeout))?;
        stream.set_write_timeout(Some(self.timeout))?;
        #[cfg(feature = "tls")]
        let stream = match &self.tls {
            Some(t) => t.wrap(stream)?,
            None => Stream::Plain(stream),
        };
        #[cfg(not(feature = "tls"))]
        let stream = Stream::Plain(stream);
        Ok(Conn {
            stream,
            buf: InBuf::with_capacity(8192),
            reused: false,
            spin: Spin::new(self.spin_wait),
        })
    }

    /// A connection for a request: an idle pooled one (for a request that
    /// is not `replayable`, only one the server still holds open), or a new
    /// one. A write must not be sent twice: on a kept connection the server
    /// may have closed while idle, which is checked first, since a failure
    /// after sending would leave open whether it ran.
    pub(super) fn take_conn(&self, replayable: bool) -> Result<Conn> {
        match self.idle() {
            Some(c) if replayable || c.open() => Ok(c),
            _ => self.open_conn(),
        }
    }

    /// Sends `req` on a pooled connection (a new one if none is idle), and
    /// pools the connection again after a complete answer.
    pub(super) fn pooled(
        &self,
        req: Request<'_>,
        replayable: bool,
        waiting: &mut dyn FnMut(),
        sink: Option<&mut Sink<'_>>,
    ) -> Result<Reply> {
        let mut conn = self.take_conn(replayable)?;
        let (reply, keep) = self.exchange_or_again(&mut conn, req, replayable, waiting, sink)?;
        if keep {
            self.put_back(conn);
        }
        Ok(reply)
    }

    /// An idle pooled connection, if any.
    fn idle(&self) -> Option<Conn> {
        self.pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
    }

    /// Pools a connection that carried a request and can carry another.
    pub(super) fn put_back(&self, mut conn: Conn) {
        conn.reused = true;
        self.pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(conn);
    }
}
