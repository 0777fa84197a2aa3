//! The one error type of Burrow, with kinds a caller can match on.

use std::fmt;

/// The result of every Burrow operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A coarse classification of [`Error`], stable across engines: what a caller
/// usually branches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The record asked for does not exist.
    NotFound,
    /// A unique field (or the ID) already holds that value.
    UniqueViolation,
    /// The request itself is wrong: unknown table or field, wrong type, bad
    /// WHERE, misuse of a transaction. Retrying it unchanged fails again.
    BadInput,
    /// The stored schema and the declared one disagree.
    Schema,
    /// The engine or the operating system failed.
    Engine,
    /// Another transaction held the engine for longer than the lock timeout;
    /// nothing was done, and the same call may succeed later.
    Busy,
    /// A server refused who sent the request: no or wrong credentials, no
    /// right to do this, or too many failed logins. Nothing was done.
    Denied,
}

/// Everything that can go wrong in Burrow.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// No record of `table` has this ID.
    NotFound {
        /// The table.
        table: &'static str,
        /// The ID asked for.
        id: i64,
    },
    /// A unique index (or the primary key) refused a duplicate; nothing was written.
    UniqueViolation {
        /// The table.
        table: String,
        /// What the engine said, naming the index or column.
        detail: String,
    },
    /// A table that is not in the model, or that the engine does not hold.
    UnknownTable(String),
    /// A field name that the table does not have.
    UnknownField {
        /// The table.
        table: &'static str,
        /// The name that was given.
        field: String,
    },
    /// A value of the wrong type for a field or a parameter.
    TypeMismatch {
        /// Where: `Table.Field`, or a parameter position.
        at: String,
        /// What was expected.
        expected: &'static str,
        /// What was found.
        found: String,
    },
    /// A WHERE clause Burrow will not run, with the reason.
    InvalidWhere(String),
    /// Any other invalid request, with the reason.
    BadInput(String),
    /// Misuse of a transaction, such as a call through one that has ended.
    Transaction(&'static str),
    /// Another transaction held the engine for longer than `waited`; nothing
    /// was done.
    Busy {
        /// The engine's name.
        engine: &'static str,
        /// How long the call waited.
        waited: std::time::Duration,
    },
    /// A server refused who sent the request, with its HTTP status (401: no
    /// or wrong credentials, 403: no right, 429: too many failed logins)
    /// and its reason; nothing was done.
    Denied {
        /// The HTTP status.
        status: u16,
        /// The server's reason.
        reason: String,
    },
    /// The engine cannot do this (an operation it does not support).
    Unsupported(String),
    /// The stored schema disagrees with the declared one.
    Schema(String),
    /// An item of a batch failed; with rollback-on-error, nothing of the batch remains.
    Batch {
        /// The item's position in the batch, from 0.
        index: usize,
        /// Why it failed.
        source: Box<Error>,
    },
    /// The engine failed.
    Engine {
        /// The engine's name (`sqlite`, …).
        engine: &'static str,
        /// The engine's own error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Input or output failed.
    Io(std::io::Error),
}

impl Error {
    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::UniqueViolation { .. } => ErrorKind::UniqueViolation,
            Error::UnknownTable(_)
            | Error::UnknownField { .. }
            | Error::TypeMismatch { .. }
            | Error::InvalidWhere(_)
            | Error::BadInput(_)
            | Error::Transaction(_)
            | Error::Unsupported(_) => ErrorKind::BadInput,
            Error::Schema(_) => ErrorKind::Schema,
            Error::Busy { .. } => ErrorKind::Busy,
            Error::Denied { .. } => ErrorKind::Denied,
            Error::Batch { source, .. } => source.kind(),
            Error::Engine { .. } | Error::Io(_) => ErrorKind::Engine,
        }
    }

    /// Wraps an engine's own error.
    pub fn engine(
        engine: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Error::Engine {
            engine,
            source: source.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotFound { table, id } => write!(f, "{table} {id} not found"),
            Error::UniqueViolation { table, detail } => {
                write!(
                    f,
                    "duplicate value refused by a unique key of {table}: {detail}"
                )
            }
            Error::UnknownTable(t) => write!(f, "unknown table {t:?}"),
            Error::UnknownField { table, field } => {
                write!(f, "table {table} has no field {field:?}")
            }
            Error::TypeMismatch {
                at,
                expected,
                found,
            } => write!(f, "{at}: expected {expected}, got {found}"),
            Error::InvalidWhere(m) => write!(f, "invalid WHERE clause: {m}"),
            Error::BadInput(m) => write!(f, "bad input: {m}"),
            Error::Transaction(m) => write!(f, "transaction: {m}"),
            Error::Busy { engine, waited } => write!(
                f,
                "{engine} engine busy: another transaction held it for more than {} ms \
                 (on one thread, use the open transaction's handle instead of a second one)",
                waited.as_millis()
            ),
            Error::Denied { status, reason } => write!(f, "denied ({status}): {reason}"),
            Error::Unsupported(m) => write!(f, "unsupported: {m}"),
            Error::Schema(m) => write!(f, "schema mismatch: {m}"),
            Error::Batch { index, source } => write!(f, "batch item {index} failed: {source}"),
            Error::Engine { engine, source } => write!(f, "{engine} engine: {source}"),
            Error::Io(e) => write!(f, "I/O: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Batch { source, .. } => Some(source.as_ref()),
            Error::Engine { source, .. } => Some(source.as_ref()),
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}
