//! What the engine asks of one database connection, whatever the driver.
//!
//! Each driver module (`pg`, `my`, `lite`) implements [`Conn`] for its own
//! connection type. The engine speaks only this trait, so SQL generation, the
//! pool, transactions and batches are written once. A dynamic call per
//! statement costs nanoseconds beside a network round trip (or SQLite's own
//! statement step), so a trait object is the simpler choice here.

use std::fmt;

use burrow_core::{BatchItem, BatchOp, Error, Result, Table, ValueRef};

use crate::table::TableSql;
use crate::values::{push_fields, Params};

/// What went wrong in the database, classified so the engine can map it to a
/// [`burrow_core::ErrorKind`] a caller can match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbErrorKind {
    /// A unique index or the primary key refused a duplicate.
    Unique,
    /// A value longer than its column allows (`VARCHAR(n)`).
    TooLong,
    /// A value of a type the column does not take, or out of its range.
    Type,
    /// NULL into a NOT NULL column.
    NotNull,
    /// The ID sequence or auto-increment reached its maximum.
    IdsExhausted,
    /// The connection is gone: killed, dropped by the network, server restart.
    Lost,
    /// A timeout fired (statement, connect, or SQLite busy).
    Timeout,
    /// Anything else.
    Other,
}

/// An error of a driver, with its class and the database's own words.
#[derive(Debug)]
pub struct DbError {
    pub kind: DbErrorKind,
    pub message: String,
}

impl DbError {
    pub fn new(kind: DbErrorKind, message: impl Into<String>) -> Self {
        DbError {
            kind,
            message: message.into(),
        }
    }

    /// The Burrow error for a failure on `table` (if known) of engine `engine`.
    pub fn into_error(self, engine: &'static str, table: Option<&Table>) -> Error {
        let name = table.map_or("?", |t| t.name);
        match self.kind {
            DbErrorKind::Unique => Error::UniqueViolation {
                table: name.to_owned(),
                detail: self.message,
            },
            DbErrorKind::TooLong => Error::BadInput(format!(
                "{name}: value too long for its column: {}",
                self.message
            )),
            DbErrorKind::Type => Error::BadInput(format!(
                "{name}: value of the wrong type for its column: {}",
                self.message
            )),
            DbErrorKind::NotNull => Error::BadInput(format!("{name}: {}", self.message)),
            DbErrorKind::IdsExhausted => Error::BadInput(format!(
                "the IDs of table {name} are exhausted: the database's ID sequence has reached \
                 its maximum ({}); give IDs explicitly",
                self.message
            )),
            DbErrorKind::Lost => Error::engine(
                engine,
                format!(
                    "the connection to the database was lost ({}); the statement in flight \
                     and any open transaction were not committed; the next call reconnects",
                    self.message
                ),
            ),
            DbErrorKind::Timeout => Error::engine(engine, format!("timed out: {}", self.message)),
            DbErrorKind::Other => Error::engine(engine, self),
        }
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DbError {}

/// The failure of a query: the database's, or the row callback's own.
pub enum QueryError {
    Db(DbError),
    Out(Error),
}

impl From<DbError> for QueryError {
    fn from(e: DbError) -> Self {
        QueryError::Db(e)
    }
}

/// The Burrow error of a failed query on `table` (if known): the database's,
/// or the one the row callback returned.
pub fn q_err(e: QueryError, table: Option<&Table>) -> Error {
    match e {
        QueryError::Db(d) => d.into_error(crate::ENGINE, table),
        QueryError::Out(e) => e,
    }
}

/// One row of a result, as the database returned it (before the engine turns
/// each value into its field's typed value).
pub trait RawRow {
    /// How many columns the row has.
    fn len(&self) -> usize;
    /// The value of result column `col` (from 0).
    fn value(&self, col: usize) -> Result<ValueRef<'_>>;

    /// Column `col` as borrowed text when it holds text, else `None`; a
    /// driver that has it at hand skips making a [`ValueRef`] (see
    /// [`burrow_core::Row::text`]).
    #[inline]
    fn text(&self, col: usize) -> Result<Option<&str>> {
        Ok(match self.value(col)? {
            ValueRef::Text(std::borrow::Cow::Borrowed(t)) => Some(t),
            _ => None,
        })
    }

    /// Column `col` as an integer when it holds one, else `None`.
    #[inline]
    fn int(&self, col: usize) -> Result<Option<i64>> {
        Ok(match self.value(col)? {
            ValueRef::Int(i) => Some(i),
            _ => None,
        })
    }
}

/// Row callback of [`Conn::query_first_each`]: the key's position, its row.
pub type EachRawRow<'f> = dyn FnMut(usize, Option<&dyn RawRow>) -> Result<()> + 'f;

/// Row callback of [`Conn::query_each`]: the query's position, one row.
pub type EachQueried<'f> = dyn FnMut(usize, &dyn RawRow) -> Result<()> + 'f;

/// Row callback of [`Conn::query`].
pub type RowFn<'f> = dyn FnMut(&dyn RawRow) -> Result<()> + 'f;

/// One pooled connection of a driver.
///
/// `guard`, on the write calls, asks the driver to make the statement atomic
/// inside an open transaction: PostgreSQL aborts the whole transaction on a
/// failed statement, so its driver wraps the statement in a savepoint, sent in
/// the same round trip. The other databases roll back only the failed statement
/// and ignore the flag.
pub trait Conn: Send {
    /// Runs a statement with bound parameters; returns the rows it changed.
    fn execute(&mut self, sql: &str, params: &[ValueRef<'_>], guard: bool) -> Result<u64, DbError>;

    /// Runs `sql`, a multi-row insert of `t` with one row of parameters per
    /// item of `adds` (each an add): the fields of each record in turn, in
    /// their storage form, but for the `shared` fields, which every row
    /// holds alike and `sql` binds once, first
    /// ([`TableSql::bulk_insert_shared`]; empty: none). The default collects
    /// the values and runs [`Conn::execute`]; SQLite binds them straight
    /// from the records.
    fn insert_rows(
        &mut self,
        t: &TableSql,
        sql: &str,
        adds: &[BatchItem<'_>],
        shared: &[usize],
        guard: bool,
    ) -> Result<u64, DbError> {
        let n = t.names.columns.len();
        let mut p = Params::with_capacity(adds.len() * n);
        let rows = adds.iter().filter_map(|it| match it.op {
            BatchOp::Add { row, .. } => Some(row),
            _ => None,
        });
        if let Some(first) = rows.clone().next().filter(|_| !shared.is_empty()) {
            push_fields(t, first, shared.iter().copied(), &mut p);
        }
        for row in rows {
            push_fields(t, row, (0..n).filter(|i| !shared.contains(i)), &mut p);
        }
        self.execute(sql, &p, guard)
    }

    /// Runs a statement that returns rows, handing each to `out`.
    fn query(
        &mut self,
        sql: &str,
        params: &[ValueRef<'_>],
        guard: bool,
        out: &mut RowFn<'_>,
    ) -> Result<(), QueryError>;

    /// Runs a statement that returns at most one row the caller needs (a read
    /// by primary key), handing it to `out`; returns whether there was one.
    fn query_first(
        &mut self,
        sql: &str,
        params: &[ValueRef<'_>],
        out: &mut RowFn<'_>,
    ) -> Result<bool, QueryError> {
        let mut found = false;
        self.query(sql, params, false, &mut |raw| {
            if !found {
                found = true;
                out(raw)?;
            }
            Ok(())
        })?;
        Ok(found)
    }

    /// Runs a by-key query ([`Conn::query_first`]) once per key, handing
    /// `out` each key's position and its row (`None` without one), in order.
    /// The default runs them one after the other; PostgreSQL pipelines them.
    fn query_first_each(
        &mut self,
        sql: &str,
        keys: &[i64],
        out: &mut EachRawRow<'_>,
    ) -> Result<(), QueryError> {
        for (i, &k) in keys.iter().enumerate() {
            if !self.query_first(sql, &[ValueRef::Int(k)], &mut |raw| out(i, Some(raw)))? {
                out(i, None).map_err(QueryError::Out)?;
            }
        }
        Ok(())
    }

    /// Runs each query (statement, parameters) as [`Conn::query`] does,
    /// handing `out` the query's position and each of its rows, in order.
    /// The default runs them one after the other; PostgreSQL pipelines them.
    fn query_each(
        &mut self,
        queries: &[(&str, &[ValueRef<'_>])],
        out: &mut EachQueried<'_>,
    ) -> Result<(), QueryError> {
        for (i, (sql, params)) in queries.iter().enumerate() {
            self.query(sql, params, false, &mut |raw| out(i, raw))?;
        }
        Ok(())
    }

    /// Runs parameterless statements (DDL, BEGIN, COMMIT), unprepared.
    fn simple(&mut self, sql: &str) -> Result<(), DbError>;

    /// The ID the last INSERT of this connection generated (MySQL, SQLite).
    fn last_insert_id(&mut self) -> i64;

    /// Whether the connection is known to be unusable.
    fn broken(&self) -> bool;

    /// Checks that the server still answers (a cheap round trip).
    fn ping(&mut self) -> bool;

    /// Whether the database runs in this process, so that an idle connection
    /// cannot have been dropped and is never pinged (nor the clock read for it).
    fn in_process(&self) -> bool {
        false
    }

    /// The PostgreSQL connection, for its array-bound bulk statements.
    #[cfg(feature = "postgres")]
    fn as_pg(&mut self) -> Option<&mut crate::pg::PgConn> {
        None
    }
}

/// Runs a query whose first column of the first row is an integer.
pub fn query_i64(
    conn: &mut dyn Conn,
    sql: &str,
    params: &[ValueRef<'_>],
    guard: bool,
) -> Result<Option<i64>, QueryError> {
    let mut found = None;
    conn.query(sql, params, guard, &mut |row| {
        if found.is_none() {
            found = match row.value(0)? {
                ValueRef::Int(i) => Some(i),
                ValueRef::Null => None,
                other => {
                    return Err(Error::BadInput(format!(
                        "expected an integer, got {}",
                        other.type_name()
                    )))
                }
            };
        }
        Ok(())
    })?;
    Ok(found)
}
