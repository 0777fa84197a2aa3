//! [`SqlEngine`]: the `Storage` trait over any connection of [`crate::conn`]:
//! opening the pool for the URL's database, the tables it has opened, and the
//! calls on the engine itself, each on a pooled connection of its own.
//!
//! The row calls are in `rows`, the single-row writes in `writes`, batches in
//! `batch`; how each database differs is in `dialect`.

use std::sync::{Arc, PoisonError, RwLock};

use burrow_core::{Caps, EngineTx, Error, Result, Storage, Table, Value};

use crate::conn::{Conn, DbError, DbErrorKind, QueryError};
use crate::dialect::{Dialect, Enc};
use crate::options::{redact, SqlEngineBuilder, SqlOptions};
use crate::pool::{Connector, Pool};
use crate::rows::{self, Session, Via};
use crate::server::ServerInfo;
use crate::table::TableSql;
use crate::tx::SqlTx;
use crate::{schema, ENGINE};

/// An engine whose tables live in an external database: PostgreSQL,
/// MySQL/MariaDB, or SQLite through the same layer. Share it as
/// `Arc<SqlEngine>` and place tables on it with
/// [`burrow_core::DatabaseBuilder::place`].
///
/// A call on the engine runs on its own (autocommit) on any free pooled
/// connection. A transaction ([`Storage::begin`], [`SqlEngine::transaction`])
/// holds one connection until it ends; when open transactions hold them all,
/// other calls wait for one at most the lock timeout
/// ([`crate::SqlEngineBuilder::lock_timeout`]), then fail with
/// [`Error::Busy`].
///
/// ```no_run
/// use burrow_sql::SqlEngine;
/// let engine = SqlEngine::builder("postgres://postgres@127.0.0.1/test")
///     .pool_size(16)
///     .map_table("Sample", "people")
///     .map_column("Sample", "FirstName", "FIRST_NAME")
///     .open()?;
/// # Ok::<(), burrow_core::Error>(())
/// ```
pub struct SqlEngine {
    opts: SqlOptions,
    pub(crate) pool: Pool,
    tables: RwLock<Vec<Arc<TableSql>>>,
    pub(crate) server: ServerInfo,
    caps: Caps,
}

/// Opens connections to the URL's database, with the driver of its dialect.
fn connector(opts: &SqlOptions) -> Result<Connector> {
    match opts.dialect {
        #[cfg(feature = "postgres")]
        Dialect::Postgres => Ok(boxed(
            crate::pg::PgSetup::new(opts)?,
            crate::pg::PgSetup::connect,
        )),
        #[cfg(feature = "mysql")]
        Dialect::MySql => Ok(boxed(
            crate::my::MySetup::new(opts)?,
            crate::my::MySetup::connect,
        )),
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => Ok(boxed(
            crate::lite::LiteSetup::new(opts)?,
            crate::lite::LiteSetup::connect,
        )),
        #[allow(unreachable_patterns)]
        other => Err(Error::Unsupported(format!(
            "burrow-sql was built without the {} feature",
            other.name()
        ))),
    }
}

/// A driver's setup as the pool's connector.
fn boxed<S, C>(setup: S, connect: fn(&S) -> Result<C, DbError>) -> Connector
where
    S: Send + Sync + 'static,
    C: Conn + 'static,
{
    Box::new(move || connect(&setup).map(|c| Box::new(c) as Box<dyn Conn>))
}

impl SqlEngine {
    /// Connects to the database at `url` with the default options.
    pub fn connect(url: &str) -> Result<SqlEngine> {
        SqlEngine::builder(url).open()
    }

    /// Starts setting up an engine for the database at `url`.
    pub fn builder(url: &str) -> SqlEngineBuilder {
        SqlEngineBuilder::new(url)
    }

    pub(crate) fn with_options(opts: SqlOptions) -> Result<SqlEngine> {
        let caps = opts.dialect.caps();
        let pool = Pool::new(
            caps.name,
            connector(&opts)?,
            opts.pool_size,
            opts.lock_timeout,
            opts.check_after_idle,
        );
        let server = {
            let mut lease = pool.acquire().map_err(|e| {
                Error::engine(
                    ENGINE,
                    format!("cannot connect to {}: {e}", redact(&opts.url)),
                )
            })?;
            ServerInfo::read(lease.conn(), opts.dialect)?
        };
        Ok(SqlEngine {
            opts,
            pool,
            tables: RwLock::new(Vec::new()),
            server,
            caps,
        })
    }
    /// The dialect of the database.
    pub fn dialect(&self) -> Dialect {
        self.opts.dialect
    }

    /// The options it was opened with.
    pub fn options(&self) -> &SqlOptions {
        &self.opts
    }

    /// The server's version string.
    pub fn server_version(&self) -> &str {
        &self.server.version
    }

    /// Runs a statement of your own (maintenance, reports) on its own;
    /// returns the rows it changed. Placeholders are the dialect's (`$1` or
    /// `?`); bind values, never splice them. [`SqlTx::execute`] runs one
    /// inside a transaction.
    pub fn execute(&self, sql: &str, params: &[Value]) -> Result<u64> {
        rows::execute(self, sql, params)
    }

    /// Runs a query of your own, handing each row to `f` as owned values.
    pub fn query(
        &self,
        sql: &str,
        params: &[Value],
        f: &mut dyn FnMut(&[Value]) -> Result<()>,
    ) -> Result<()> {
        rows::query(self, sql, params, f)
    }

    /// Begins a transaction of this engine alone, as [`Storage::begin`] does,
    /// returned as itself so that statements of your own can run in it
    /// ([`SqlTx::execute`], [`SqlTx::query`]). It holds one pooled
    /// connection until committed, rolled back or dropped (which rolls back).
    pub fn transaction(self: &Arc<Self>) -> Result<SqlTx> {
        SqlTx::begin(self.clone())
    }

    pub(crate) fn table(&self, table: &Table) -> Result<Arc<TableSql>> {
        let v = self.tables.read().unwrap_or_else(PoisonError::into_inner);
        v.iter()
            .find(|t| std::ptr::eq(t.table, table))
            .or_else(|| v.iter().find(|t| t.table.same(table)))
            .cloned()
            .ok_or_else(|| {
                Error::UnknownTable(format!(
                    "{} is not open in this {} engine",
                    table.name, self.caps.name
                ))
            })
    }

    /// Whether writes inside a transaction run under a savepoint.
    pub(crate) fn tx_guard(&self) -> bool {
        self.opts.dialect.aborts_tx_on_error() && self.opts.savepoints
    }
}

impl Session for SqlEngine {
    fn engine(&self) -> &SqlEngine {
        self
    }

    // Autocommit on any free connection.
    fn write<R>(&self, f: impl FnOnce(&mut dyn Conn, bool) -> Result<R>) -> Result<R> {
        f(self.pool.acquire()?.conn(), false)
    }

    // Reads are safe to repeat, so a connection found dead (the server
    // restarted, a firewall dropped it while idle) costs one retry, not an
    // error.
    fn read<R>(
        &self,
        mut f: impl FnMut(&mut dyn Conn) -> Result<R, QueryError>,
    ) -> Result<R, QueryError> {
        let mut lease = self.pool.acquire().map_err(QueryError::Out)?;
        match f(lease.conn()) {
            Err(QueryError::Db(e)) if e.kind == DbErrorKind::Lost => {
                drop(lease);
                f(self.pool.acquire().map_err(QueryError::Out)?.conn())
            }
            r => r,
        }
    }
}

burrow_core::forward_row_ops!(SqlEngine, |s| Via(s));

impl Storage for SqlEngine {
    fn caps(&self) -> Caps {
        self.caps
    }

    // Native dates, timestamps and PostgreSQL booleans compare as values;
    // text dates and 0/1 integers compare as whatever another writer stored.
    fn filters_typed(&self, table: &'static Table, field: usize) -> bool {
        self.table(table).is_ok_and(|t| match t.encs.get(field) {
            Some(Enc::Date | Enc::Stamp) => true,
            Some(Enc::Bool) => t.dialect.native_bools(),
            _ => false,
        })
    }

    fn ensure_table(&self, table: &'static Table) -> Result<()> {
        let sql = schema::ensure(self.pool.acquire()?.conn(), &self.opts, table)?;
        let mut v = self.tables.write().unwrap_or_else(PoisonError::into_inner);
        v.retain(|t| !t.table.same(table));
        v.push(Arc::new(sql));
        Ok(())
    }

    fn begin(self: Arc<Self>) -> Result<Box<dyn EngineTx>> {
        Ok(Box::new(SqlTx::begin(self)?))
    }
}
