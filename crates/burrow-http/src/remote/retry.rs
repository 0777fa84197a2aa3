//! When a request may go again on a new connection: a kept-alive
//! connection the server closed while it was idle fails the next request on
//! it, and whether sending that request again is safe depends on how far it
//! got (unsent, or sent and unanswered) and on whether running it twice
//! changes anything (a read, a `BEGIN`).

use burrow_core::{Error, Result};

use super::conn::{exchange, Conn, Request, Sink};
use super::reply::Reply;
use super::{RemoteEngine, ENGINE};

pub(super) enum Retry {
    /// The request was not written whole: the server cannot have run it, and
    /// it can be sent again.
    Unsent(Error),
    /// Written whole, then the connection closed before any byte of an
    /// answer: the server may or may not have run it. Sent again only when
    /// running it twice changes nothing (a read).
    Unanswered(Error),
    No(Error),
}

impl Retry {
    pub(super) fn into_error(self) -> Error {
        match self {
            Retry::Unsent(e) | Retry::No(e) => e,
            Retry::Unanswered(e) => Error::engine(
                ENGINE,
                format!(
                    "the connection closed after the request was sent, before any answer \
                     ({e}): the server may or may not have applied it"
                ),
            ),
        }
    }

    /// Whether the request can go again on a new connection.
    pub(super) fn again(&self, replayable: bool) -> bool {
        match self {
            Retry::Unsent(_) => true,
            Retry::Unanswered(_) => replayable,
            Retry::No(_) => false,
        }
    }
}

impl RemoteEngine {
    /// Exchanges `req` on `conn`, and once more on a new connection (which
    /// then replaces `conn`) when `conn` was reused and the failure allows
    /// it (`replayable`: running the request twice changes nothing). The
    /// flag says whether the connection can be kept.
    pub(super) fn exchange_or_again(
        &self,
        conn: &mut Conn,
        req: Request<'_>,
        replayable: bool,
        waiting: &mut dyn FnMut(),
        mut sink: Option<&mut Sink<'_>>,
    ) -> Result<(Reply, bool)> {
        // A failure that allows another try came before any byte of the
        // answer: the sink has not been given anything.
        match exchange(conn, req, waiting, sink.as_deref_mut()) {
            Ok(r) => Ok(r),
            Err(e) if conn.reused && e.again(replayable) => {
                *conn = self.open_conn()?;
                exchange(conn, req, waiting, sink).map_err(Retry::into_error)
            }
            Err(e) => Err(e.into_error()),
        }
    }
}
