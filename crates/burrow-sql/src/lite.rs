//! SQLite through the external layer (`rusqlite`, bundled): the same code
//! path as the servers, so its cost can be read against the embedded engine.
//!
//! Values are stored as the embedded SQLite engine stores them (currency as
//! 1/10,000 integers, booleans as 0/1, dates and date-times as ISO text), so a
//! file written by one engine reads the same through the other.

use std::time::Duration;

use burrow_core::datetime::DATETIME_BUF;
use burrow_core::{BatchItem, BatchOp, Error, Result, ValueRef};
use burrow_sqlite::{DateTexts, KeptConnection, KeptStatement, RawStmt, TimeText};
use rusqlite::types::ValueRef as SqlValue;
use rusqlite::{Connection, OpenFlags};

use crate::conn::{Conn, DbError, DbErrorKind, QueryError, RawRow, RowFn};
use crate::dialect::Dialect;
use crate::options::{is_sqlite_memory, sqlite_path, url_query, SqlOptions};
use crate::table::TableSql;
use crate::values::store;

/// What the engine configures on every new connection.
pub struct LiteSetup {
    path: Option<String>,
    pragmas: String,
    busy: Duration,
    /// SQLite's VFS for the file (`vfs=` of the URL); `None`: its default.
    vfs: Option<String>,
}

impl LiteSetup {
    /// Reads the path and the pragmas of a `sqlite:` URL. A statement waits
    /// for another connection's lock up to the statement timeout, or else the
    /// lock timeout.
    pub fn new(o: &SqlOptions) -> Result<Self> {
        let url = o.url.as_str();
        let busy = o.statement_timeout.unwrap_or(o.lock_timeout);
        let path = (!is_sqlite_memory(url)).then(|| sqlite_path(url).to_owned());
        let mut pragmas = String::new();
        let mut vfs = None;
        for (k, v) in url_query(url) {
            let allowed: &[&str] = match k.as_str() {
                "synchronous" => &["off", "normal", "full", "extra"],
                "locking_mode" => &["normal", "exclusive"],
                "journal_mode" => &["delete", "truncate", "persist", "memory", "wal", "off"],
                "vfs" => &["unix", "unix-excl"],
                _ => {
                    return Err(Error::BadInput(format!(
                        "unknown SQLite URL option {k:?}: expected synchronous, locking_mode, \
                         journal_mode or vfs"
                    )))
                }
            };
            let v = v.to_ascii_lowercase();
            if !allowed.contains(&v.as_str()) {
                return Err(Error::BadInput(format!(
                    "SQLite option {k}={v:?}: expected one of {}",
                    allowed.join(", ")
                )));
            }
            if k == "vfs" {
                vfs = Some(v);
            } else {
                pragmas.push_str(&format!("PRAGMA {k}={v};"));
            }
        }
        Ok(LiteSetup {
            path,
            pragmas,
            busy,
            vfs,
        })
    }

    /// Opens a connection.
    pub fn connect(&self) -> Result<LiteConn, DbError> {
        burrow_sqlite::configure_library();
        let conn = match (&self.path, &self.vfs) {
            // unix-excl takes a POSIX lock on the file once, at open, and keeps
            // it; the connections of this process then lock each other in
            // memory. A read in autocommit otherwise pays 4 fcntl, 3 stat and a
            // pread of the header to take and drop its shared lock and check
            // for another process's journal: most of a by-ID read.
            // A log's writes are gathered (see `burrow_sqlite::walvfs`).
            (Some(p), vfs) => {
                let below = vfs.as_deref();
                match burrow_sqlite::walvfs::over(below).or(below) {
                    Some(vfs) => Connection::open_with_flags_and_vfs(p, OpenFlags::default(), vfs),
                    None => Connection::open(p),
                }
            }
            (None, _) => Connection::open_in_memory(),
        }
        .map_err(classify)?;
        burrow_sqlite::widen_lookaside(&conn).map_err(classify)?;
        conn.busy_timeout(self.busy).map_err(classify)?;
        if !self.pragmas.is_empty() {
            conn.execute_batch(&self.pragmas).map_err(classify)?;
        }
        Ok(LiteConn {
            kept: KeptConnection::new(conn),
            dates: DateTexts::default(),
        })
    }
}

/// One SQLite connection.
pub struct LiteConn {
    kept: KeptConnection,
    /// The text of a write's dates, bound in place.
    dates: DateTexts,
}

fn classify(e: rusqlite::Error) -> DbError {
    const CONSTRAINT_PRIMARYKEY: i32 = 1555;
    const CONSTRAINT_UNIQUE: i32 = 2067;
    const CONSTRAINT_NOTNULL: i32 = 1299;
    let kind = match &e {
        rusqlite::Error::SqliteFailure(f, _) => match f.extended_code {
            CONSTRAINT_PRIMARYKEY | CONSTRAINT_UNIQUE => DbErrorKind::Unique,
            CONSTRAINT_NOTNULL => DbErrorKind::NotNull,
            _ => match f.code {
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked => {
                    DbErrorKind::Timeout
                }
                rusqlite::ErrorCode::TypeMismatch | rusqlite::ErrorCode::TooBig => {
                    DbErrorKind::Type
                }
                _ => DbErrorKind::Other,
            },
        },
        rusqlite::Error::ToSqlConversionFailure(_) => DbErrorKind::Type,
        _ => DbErrorKind::Other,
    };
    DbError::new(kind, e.to_string())
}

/// Binds every parameter of `stmt`: a value for each, no more, no fewer (a
/// kept statement would otherwise read a missing one from its last run).
fn bind(stmt: &mut KeptStatement<'_>, params: &[ValueRef<'_>]) -> rusqlite::Result<()> {
    let want = stmt.parameter_count();
    if params.len() != want {
        return Err(rusqlite::Error::InvalidParameterCount(params.len(), want));
    }
    let mut buf = [0u8; DATETIME_BUF];
    let mut times = TimeText::default();
    for (i, v) in params.iter().enumerate() {
        let out = match v {
            ValueRef::DateTime(t) => SqlValue::Text(times.text(*t)),
            v => burrow_sqlite::stored(v, &mut buf)?,
        };
        stmt.bind_stored(i + 1, out)?;
    }
    Ok(())
}

impl Conn for LiteConn {
    fn execute(
        &mut self,
        sql: &str,
        params: &[ValueRef<'_>],
        _guard: bool,
    ) -> Result<u64, DbError> {
        let mut stmt = self.kept.statement(sql).map_err(classify)?;
        stmt.execute_in_place(params, &mut self.dates)
            .map(|n| n as u64)
            .map_err(classify)
    }

    fn insert_rows(
        &mut self,
        t: &TableSql,
        sql: &str,
        adds: &[BatchItem<'_>],
        shared: &[usize],
        _guard: bool,
    ) -> Result<u64, DbError> {
        let rows = adds.iter().filter_map(|it| match it.op {
            BatchOp::Add { row, .. } => Some(row),
            _ => None,
        });
        let mut stmt = self.kept.statement(sql).map_err(classify)?;
        stmt.insert_in_place(t.table, rows, shared, &mut self.dates, |i, v| {
            store(Dialect::Sqlite, t.encs[i], v)
        })
        .map(|n| n as u64)
        .map_err(classify)
    }

    fn query(
        &mut self,
        sql: &str,
        params: &[ValueRef<'_>],
        _guard: bool,
        out: &mut RowFn<'_>,
    ) -> Result<(), QueryError> {
        let mut stmt = self.kept.statement(sql).map_err(classify)?;
        bind(&mut stmt, params).map_err(classify)?;
        let mut rows = stmt.raw_query();
        while let Some(row) = rows.next_row().map_err(classify)? {
            out(&LiteRow(row)).map_err(QueryError::Out)?;
        }
        Ok(())
    }

    // Stepping once more only to hear "no more rows" costs about as much as
    // finding the row: the statement is reset instead.
    fn query_first(
        &mut self,
        sql: &str,
        params: &[ValueRef<'_>],
        out: &mut RowFn<'_>,
    ) -> Result<bool, QueryError> {
        let mut stmt = self.kept.statement(sql).map_err(classify)?;
        bind(&mut stmt, params).map_err(classify)?;
        let mut rows = stmt.raw_query();
        match rows.next_row().map_err(classify)? {
            Some(row) => out(&LiteRow(row)).map_err(QueryError::Out).map(|()| true),
            None => Ok(false),
        }
    }

    fn simple(&mut self, sql: &str) -> Result<(), DbError> {
        self.kept.connection().execute_batch(sql).map_err(classify)
    }

    fn last_insert_id(&mut self) -> i64 {
        self.kept.connection().last_insert_rowid()
    }

    fn broken(&self) -> bool {
        false
    }

    fn ping(&mut self) -> bool {
        true
    }

    fn in_process(&self) -> bool {
        true
    }
}

/// A row, its cells read through SQLite's C API ([`RawStmt::cell`]).
struct LiteRow<'a>(&'a RawStmt);

impl RawRow for LiteRow<'_> {
    fn len(&self) -> usize {
        self.0.column_count()
    }

    fn value(&self, col: usize) -> Result<ValueRef<'_>> {
        let v = self.0.cell(col).map_err(cell_err)?;
        burrow_sqlite::loaded(v, crate::ENGINE)
    }

    #[inline]
    fn text(&self, col: usize) -> Result<Option<&str>> {
        match self.0.text_cell(col) {
            Ok(Some(t)) => burrow_sqlite::loaded_text(t, crate::ENGINE).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(cell_err(e)),
        }
    }

    #[inline]
    fn int(&self, col: usize) -> Result<Option<i64>> {
        self.0.int_cell(col).map_err(cell_err)
    }
}

/// A cell that could not be read; out of line, as every cell read of a scan
/// maps its (rare) error with it.
#[cold]
#[inline(never)]
fn cell_err(e: rusqlite::Error) -> Error {
    Error::engine(crate::ENGINE, e)
}

#[cfg(test)]
mod test {
    use std::sync::Arc;

    use burrow_core::{ErrorKind, Value};

    use crate::SqlEngine;

    #[test]
    fn an_unknown_vfs_is_refused_by_name() {
        let Err(e) = SqlEngine::connect("sqlite:///tmp/never-opened.db?vfs=unix-dotfile") else {
            panic!("an unknown VFS was accepted");
        };
        assert_eq!(e.kind(), ErrorKind::BadInput);
        assert!(e.to_string().contains("unix-excl"), "{e}");
    }

    /// A kept statement run with a value missing must not take it from its
    /// last run; one with a value too many must not drop it silently.
    #[test]
    fn a_statement_given_the_wrong_number_of_values_is_refused() -> burrow_core::Result<()> {
        let engine = SqlEngine::connect("sqlite::memory:")?;
        engine.execute("CREATE TABLE t (a, b)", &[])?;
        let insert = "INSERT INTO t VALUES (?, ?)";
        engine.execute(insert, &[Value::Int(1), Value::Text("one".into())])?;
        for wrong in [
            vec![Value::Int(2)],
            vec![Value::Int(2), Value::Int(3), Value::Int(4)],
        ] {
            let e = engine.execute(insert, &wrong).expect_err("refused");
            assert!(e.to_string().contains("number of parameters"), "{e}");
        }
        let read = "SELECT a, b FROM t WHERE a = ? AND b = ?";
        let mut rows = Vec::new();
        engine.query(
            read,
            &[Value::Int(1), Value::Text("one".into())],
            &mut |r| {
                rows.push(r.to_vec());
                Ok(())
            },
        )?;
        assert_eq!(rows.len(), 1);
        let e = engine
            .query(read, &[Value::Int(1)], &mut |_| Ok(()))
            .expect_err("refused");
        assert!(e.to_string().contains("number of parameters"), "{e}");
        let mut all = Vec::new();
        engine.query("SELECT a, b FROM t", &[], &mut |r| {
            all.push(r.to_vec());
            Ok(())
        })?;
        assert_eq!(all, vec![vec![Value::Int(1), Value::Text("one".into())]]);
        Ok(())
    }

    #[test]
    fn connections_of_one_process_share_a_unix_excl_file() -> burrow_core::Result<()> {
        let dir = tempfile::tempdir()?;
        let url = format!(
            "sqlite://{}?journal_mode=wal&vfs=unix-excl",
            dir.path().join("a.db").display()
        );
        let engine = Arc::new(SqlEngine::builder(&url).pool_size(2).open()?);
        engine.execute("CREATE TABLE t (v INTEGER)", &[])?;
        // The transaction holds one connection; the engine's read takes the
        // other, and sees only what was committed.
        let tx = engine.transaction()?;
        tx.execute("INSERT INTO t VALUES (?)", &[Value::Int(7)])?;
        let count = |e: &SqlEngine| -> burrow_core::Result<i64> {
            let mut n = 0;
            e.query("SELECT count(*) FROM t", &[], &mut |row| {
                if let Value::Int(i) = row[0] {
                    n = i;
                }
                Ok(())
            })?;
            Ok(n)
        };
        assert_eq!(count(&engine)?, 0);
        tx.commit()?;
        assert_eq!(count(&engine)?, 1);
        Ok(())
    }
}
