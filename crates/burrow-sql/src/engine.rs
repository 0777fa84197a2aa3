//! [`SqlEngine`]: the `Storage` trait over any connection of [`crate::conn`].

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::{Arc, PoisonError, RwLock};

use burrow_core::chrono::NaiveTime;
use burrow_core::datetime::{format_date, format_datetime};
use burrow_core::{
    BatchItem, BatchOp, BatchResult, Caps, EngineTx, Error, FieldKind, Fields, Filter, Result, Row,
    Select, Storage, Table, Value, ValueRef,
};
use smallvec::SmallVec;

use crate::conn::{query_i64, Conn, DbError, DbErrorKind, QueryError, RawRow};
use crate::dialect::{param_columns, Dialect, Enc};
use crate::options::{redact, SqlEngineBuilder, SqlOptions};
use crate::pool::{Connector, Pool};
use crate::rows::{self, Session, Via};
use crate::table::TableSql;
use crate::tx::SqlTx;
use crate::{schema, ENGINE};

/// What the engine learnt about the server when it connected.
#[derive(Debug, Clone)]
struct ServerInfo {
    version: String,
    /// MySQL: a multi-row INSERT gets consecutive IDs (`innodb_autoinc_lock_mode`
    /// 0 or 1), `id_step` apart (`auto_increment_increment`).
    consecutive_ids: bool,
    id_step: i64,
    /// MySQL: `max_allowed_packet`, which bounds a multi-row INSERT.
    max_packet: usize,
    /// `DELETE … RETURNING` (PostgreSQL, SQLite, MariaDB; not MySQL).
    returning: bool,
}

/// An engine whose tables live in an external database: PostgreSQL,
/// MySQL/MariaDB, or SQLite through the same layer. Share it as
/// `Arc<SqlEngine>` and place tables on it with
/// [`burrow_core::ClientBuilder::place`].
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
    server: ServerInfo,
    caps: Caps,
}

/// Converts a value to the form its column stores.
// Inlined: called per value, and its match folds into the caller's loop.
#[inline(always)]
fn store<'a>(dialect: Dialect, enc: Enc, v: ValueRef<'a>) -> ValueRef<'a> {
    match (enc, v) {
        // The SQLite driver writes dates and date-times as this same text
        // itself, into a stack buffer: a `String` here would be an allocation
        // per value, a third of the ORM's own cost of an in-memory insert.
        (Enc::DateText, v @ ValueRef::Date(_)) | (Enc::StampText, v @ ValueRef::DateTime(_))
            if dialect == Dialect::Sqlite =>
        {
            v
        }
        (Enc::StampText, ValueRef::Date(d)) if dialect == Dialect::Sqlite => {
            ValueRef::DateTime(d.and_time(NaiveTime::MIN).and_utc())
        }
        (Enc::DateText, ValueRef::Date(d)) => ValueRef::Text(format_date(d).into()),
        (Enc::StampText, ValueRef::DateTime(t)) => ValueRef::Text(format_datetime(t).into()),
        (Enc::StampText, ValueRef::Date(d)) => {
            ValueRef::Text(format_datetime(d.and_time(NaiveTime::MIN).and_utc()).into())
        }
        (Enc::Stamp, ValueRef::Date(d)) => ValueRef::DateTime(d.and_time(NaiveTime::MIN).and_utc()),
        (_, v) => v,
    }
}

/// A stored value read back as the typed value of its field kind.
pub(crate) fn typed(kind: FieldKind, v: ValueRef<'_>) -> ValueRef<'_> {
    kind.typed(&v).unwrap_or(v)
}

/// A result row of `SELECT id, fields…`, each value typed by its field.
pub(crate) struct TypedRow<'r> {
    pub raw: &'r dyn RawRow,
    pub table: &'static Table,
}

impl Row for TypedRow<'_> {
    fn id(&self) -> Result<i64> {
        match self.raw.value(0)? {
            ValueRef::Int(i) => Ok(i),
            other => Err(Error::engine(
                ENGINE,
                format!("the ID column holds {}", other.type_name()),
            )),
        }
    }

    fn get(&self, idx: usize) -> Result<ValueRef<'_>> {
        let f = self
            .table
            .fields
            .get(idx)
            .ok_or_else(|| Error::BadInput(format!("no field #{idx}")))?;
        Ok(typed(f.kind, self.raw.value(idx + 1)?))
    }

    fn written_text(&self, idx: usize) -> Option<&str> {
        let written = match self.table.fields.get(idx)?.kind {
            FieldKind::Date => burrow_core::datetime::is_written_date,
            FieldKind::DateTime => burrow_core::datetime::is_written_datetime,
            _ => return None,
        };
        match self.raw.value(idx + 1).ok()? {
            ValueRef::Text(Cow::Borrowed(t)) if written(t) => Some(t),
            _ => None,
        }
    }
}

/// Statement parameters: on the stack for one usual record, since a heap
/// allocation and free per written row is a measurable share of an in-memory
/// SQLite insert; a multi-row statement's spill to the heap once.
type Params<'a> = SmallVec<[ValueRef<'a>; 16]>;

fn push_fields<'a>(
    t: &TableSql,
    row: &'a dyn Fields,
    fields: impl Iterator<Item = usize>,
    out: &mut Params<'a>,
) {
    for i in fields {
        out.push(store(t.dialect, t.encs[i], row.field(i)));
    }
}

pub(crate) fn filter_params<'a>(t: &TableSql, filter: &'a Filter, out: &mut Vec<ValueRef<'a>>) {
    let cols = param_columns(filter);
    for (i, p) in filter.params.iter().enumerate() {
        let enc = cols.get(i).map_or(Enc::Int, |c| t.enc(*c));
        out.push(store(t.dialect, enc, p.as_ref()));
    }
}

/// The kind of a batch item, for grouping consecutive ones.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Group {
    AddNew,
    UpdateAll,
    Delete,
    Other,
}

fn group_of(item: &BatchItem<'_>) -> Group {
    match item.op {
        BatchOp::Add { id: None, .. } => Group::AddNew,
        BatchOp::Update { fields: None, .. } => Group::UpdateAll,
        BatchOp::Delete { .. } => Group::Delete,
        _ => Group::Other,
    }
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
        let connect: Connector = match opts.dialect {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => {
                let setup = crate::pg::PgSetup::new(
                    &opts.url,
                    opts.connect_timeout,
                    opts.schema.clone(),
                    opts.statement_timeout,
                )?;
                Box::new(move || setup.connect().map(|c| Box::new(c) as Box<dyn Conn>))
            }
            #[cfg(feature = "mysql")]
            Dialect::MySql => {
                let setup = crate::my::MySetup::new(
                    &opts.url,
                    opts.connect_timeout,
                    opts.schema.clone(),
                    opts.statement_timeout,
                )?;
                Box::new(move || setup.connect().map(|c| Box::new(c) as Box<dyn Conn>))
            }
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => {
                let setup = crate::lite::LiteSetup::new(
                    &opts.url,
                    opts.statement_timeout.unwrap_or(opts.lock_timeout),
                )?;
                Box::new(move || setup.connect().map(|c| Box::new(c) as Box<dyn Conn>))
            }
            #[allow(unreachable_patterns)]
            other => {
                return Err(Error::Unsupported(format!(
                    "burrow-sql was built without the {} feature",
                    other.name()
                )))
            }
        };
        let caps = match opts.dialect {
            Dialect::Postgres => Caps::network("postgres"),
            Dialect::MySql => Caps::network("mysql"),
            Dialect::Sqlite => Caps::in_process("sqlite-external"),
        };
        let pool = Pool::new(
            caps.name,
            connect,
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
            server_info(lease.conn(), opts.dialect)?
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
        self.opts.dialect == Dialect::Postgres && self.opts.savepoints
    }

    /// The statement that begins a transaction.
    pub(crate) fn begin_verb(&self) -> &'static str {
        match self.opts.dialect {
            Dialect::Postgres => "BEGIN",
            Dialect::MySql => "START TRANSACTION",
            // Take the write lock now, as the SQLite engine does, so that a
            // transaction never fails half-way to upgrade its lock.
            Dialect::Sqlite => "BEGIN IMMEDIATE",
        }
    }

    pub(crate) fn insert_on(
        &self,
        conn: &mut dyn Conn,
        guard: bool,
        t: &TableSql,
        id: Option<i64>,
        row: &dyn Fields,
    ) -> Result<i64> {
        let n = t.table.fields.len();
        let mut p = Params::new();
        let err = |e: DbError| e.into_error(ENGINE, Some(t.table));
        match id {
            None => {
                push_fields(t, row, 0..n, &mut p);
                match self.opts.dialect {
                    Dialect::Postgres => query_i64(conn, &t.insert, &p, guard)
                        .map_err(|e| q_err(e, Some(t.table)))?
                        .ok_or_else(|| Error::engine(ENGINE, "INSERT returned no ID")),
                    _ => {
                        conn.execute(&t.insert, &p, guard).map_err(err)?;
                        Ok(conn.last_insert_id())
                    }
                }
            }
            Some(id) => {
                p.push(ValueRef::Int(id));
                push_fields(t, row, 0..n, &mut p);
                conn.execute(&t.insert_with_id, &p, guard).map_err(err)?;
                if let Some(seq) = &t.sequence {
                    // Keep the sequence ahead of forced IDs, so that later new
                    // IDs do not collide with them.
                    let sql = format!(
                        "SELECT setval('{}', $1) FROM {seq} WHERE $1 > \
                         (CASE WHEN is_called THEN last_value ELSE last_value - 1 END)",
                        seq.replace('\'', "''")
                    );
                    conn.query(&sql, &[ValueRef::Int(id)], guard, &mut |_| Ok(()))
                        .map_err(|e| q_err(e, Some(t.table)))?;
                }
                Ok(id)
            }
        }
    }

    pub(crate) fn update_on(
        &self,
        conn: &mut dyn Conn,
        guard: bool,
        t: &TableSql,
        row: &dyn Fields,
        fields: Option<&[usize]>,
    ) -> Result<bool> {
        let n = t.table.fields.len();
        let mut p = Params::new();
        let some;
        let sql: &str = match fields {
            None => {
                push_fields(t, row, 0..n, &mut p);
                &t.update_all
            }
            Some(list) => {
                if let Some(&bad) = list.iter().find(|&&i| i >= n) {
                    return Err(Error::BadInput(format!(
                        "{} has no field #{bad}",
                        t.table.name
                    )));
                }
                push_fields(t, row, list.iter().copied(), &mut p);
                some = t.update_some(list);
                &some
            }
        };
        p.push(ValueRef::Int(row.id()));
        let changed = conn
            .execute(sql, &p, guard)
            .map_err(|e| e.into_error(ENGINE, Some(t.table)))?;
        Ok(changed > 0)
    }

    pub(crate) fn delete_on(
        &self,
        conn: &mut dyn Conn,
        guard: bool,
        t: &TableSql,
        id: i64,
    ) -> Result<bool> {
        let changed = conn
            .execute(&t.delete, &[ValueRef::Int(id)], guard)
            .map_err(|e| e.into_error(ENGINE, Some(t.table)))?;
        Ok(changed > 0)
    }

    fn one_on(
        &self,
        conn: &mut dyn Conn,
        guard: bool,
        item: &BatchItem<'_>,
    ) -> Result<BatchResult> {
        let t = self.table(item.table)?;
        Ok(match item.op {
            BatchOp::Add { id, row } => {
                BatchResult::Added(self.insert_on(conn, guard, &t, id, row)?)
            }
            BatchOp::Update { row, fields } => {
                if self.update_on(conn, guard, &t, row, fields)? {
                    BatchResult::Done
                } else {
                    BatchResult::Missing
                }
            }
            BatchOp::Delete { id } => {
                if self.delete_on(conn, guard, &t, id)? {
                    BatchResult::Done
                } else {
                    BatchResult::Missing
                }
            }
        })
    }

    /// Applies items one by one (the fallback of a failed bulk statement, to
    /// find and report the failing item). `base`: index of `items[0]`.
    #[allow(clippy::too_many_arguments)]
    fn one_by_one(
        &self,
        conn: &mut dyn Conn,
        guard: bool,
        items: &[BatchItem<'_>],
        base: usize,
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
    ) -> Result<()> {
        for (k, item) in items.iter().enumerate() {
            match self.one_on(conn, guard, item) {
                Ok(r) => results.push(r),
                Err(e) if stop_on_error || conn.broken() => {
                    return Err(Error::Batch {
                        index: base + k,
                        source: Box::new(e),
                    })
                }
                Err(e) => results.push(BatchResult::Failed(Box::new(e))),
            }
        }
        Ok(())
    }

    /// Rows per bulk statement of this table.
    fn bulk_rows(&self, t: &TableSql) -> usize {
        let cols = t.cols.len() + 1;
        let (default, param_cap) = match self.opts.dialect {
            Dialect::Postgres => (5_000, usize::MAX),
            Dialect::MySql => (1_000, 65_535 / cols),
            Dialect::Sqlite => (200, 32_000 / cols),
        };
        let want = if self.opts.bulk_rows > 0 {
            self.opts.bulk_rows
        } else {
            default
        };
        want.min(param_cap).max(1)
    }

    /// Splits `items` into chunks of at most `bulk_rows`, and for MySQL of at
    /// most half `max_allowed_packet` by an estimate of their size.
    fn chunks<'i, 'a>(&self, t: &TableSql, items: &'i [BatchItem<'a>]) -> Vec<&'i [BatchItem<'a>]> {
        let cap = self.bulk_rows(t);
        if self.opts.dialect != Dialect::MySql {
            return items.chunks(cap).collect();
        }
        let budget = (self.server.max_packet / 2).max(16 * 1024);
        let mut out = Vec::new();
        let (mut start, mut bytes) = (0, 0usize);
        for (k, item) in items.iter().enumerate() {
            let size: usize = match item.op {
                BatchOp::Add { row, .. } | BatchOp::Update { row, .. } => (0..t.cols.len())
                    .map(|i| match row.field(i) {
                        ValueRef::Text(s) => s.len() + 9,
                        ValueRef::Blob(b) => b.len() + 9,
                        _ => 13,
                    })
                    .sum(),
                BatchOp::Delete { .. } => 9,
            };
            if k > start && (k - start == cap || bytes + size > budget) {
                out.push(&items[start..k]);
                start = k;
                bytes = 0;
            }
            bytes += size;
        }
        if start < items.len() {
            out.push(&items[start..]);
        }
        out
    }

    /// Inserts a run of rows with new IDs, one bulk statement per chunk.
    #[allow(clippy::too_many_arguments)]
    fn bulk_add(
        &self,
        conn: &mut dyn Conn,
        guard: bool,
        t: &TableSql,
        items: &[BatchItem<'_>],
        base: usize,
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
    ) -> Result<()> {
        let mut at = base;
        for chunk in self.chunks(t, items) {
            match self.bulk_add_chunk(conn, guard, t, chunk) {
                Ok(ids) => results.extend(ids.into_iter().map(BatchResult::Added)),
                Err(e) if e.kind == DbErrorKind::Lost => {
                    return Err(Error::Batch {
                        index: at,
                        source: Box::new(e.into_error(ENGINE, Some(t.table))),
                    })
                }
                // The failed statement left nothing behind: find the culprit.
                Err(_) => self.one_by_one(conn, guard, chunk, at, results, stop_on_error)?,
            }
            at += chunk.len();
        }
        Ok(())
    }

    fn bulk_add_chunk(
        &self,
        conn: &mut dyn Conn,
        guard: bool,
        t: &TableSql,
        chunk: &[BatchItem<'_>],
    ) -> Result<Vec<i64>, DbError> {
        let n = t.cols.len();
        let rows = chunk.iter().filter_map(|it| match it.op {
            BatchOp::Add { row, .. } => Some(row),
            _ => None,
        });
        let q = |e: QueryError| match e {
            QueryError::Db(d) => d,
            QueryError::Out(e) => DbError::new(DbErrorKind::Other, e.to_string()),
        };
        match self.opts.dialect {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => {
                let seq = t.sequence.as_deref().unwrap_or_default();
                let sql = format!(
                    "SELECT nextval('{}') FROM generate_series(1, $1)",
                    seq.replace('\'', "''")
                );
                let mut ids = Vec::with_capacity(chunk.len());
                conn.query(
                    &sql,
                    &[ValueRef::Int(chunk.len() as i64)],
                    guard,
                    &mut |r| {
                        if let ValueRef::Int(i) = r.value(0)? {
                            ids.push(i);
                        }
                        Ok(())
                    },
                )
                .map_err(q)?;
                if ids.len() != chunk.len() {
                    return Err(DbError::new(
                        DbErrorKind::Other,
                        "the sequence gave too few IDs",
                    ));
                }
                let mut columns: Vec<Vec<ValueRef<'_>>> = Vec::with_capacity(n + 1);
                columns.push(ids.iter().map(|i| ValueRef::Int(*i)).collect());
                for _ in 0..n {
                    columns.push(Vec::with_capacity(chunk.len()));
                }
                for row in rows {
                    for (i, col) in columns[1..].iter_mut().enumerate() {
                        col.push(store(t.dialect, t.encs[i], row.field(i)));
                    }
                }
                let pg = conn.as_pg().ok_or_else(|| {
                    DbError::new(DbErrorKind::Other, "not a PostgreSQL connection")
                })?;
                pg.query_arrays(&t.pg_unnest_insert(), &columns, guard, &mut |_| Ok(()))
                    .map_err(q)?;
                Ok(ids)
            }
            _ => {
                let k = chunk.len() as i64;
                if self.opts.dialect == Dialect::Sqlite {
                    // New rowids follow the current maximum, unless it is near
                    // i64::MAX (then SQLite picks free ones at random): such a
                    // chunk goes row by row.
                    let max = query_i64(conn, &t.max_id, &[], guard).map_err(q)?;
                    let room = max.unwrap_or(0).checked_add(k);
                    if room.is_none() {
                        return Err(DbError::new(DbErrorKind::Other, "IDs near the largest"));
                    }
                }
                let mut p = Params::with_capacity(chunk.len() * n);
                for row in rows {
                    push_fields(t, row, 0..n, &mut p);
                }
                conn.execute(&t.bulk_insert(chunk.len()), &p, guard)?;
                Ok(if self.opts.dialect == Dialect::Sqlite {
                    // One INSERT gives its rows consecutive rowids after the
                    // current maximum, under the database's write lock.
                    let last = conn.last_insert_id();
                    (last - k + 1..=last).collect()
                } else {
                    // MySQL reports the first ID of the statement; lock modes 0
                    // and 1 give a multi-row INSERT consecutive values.
                    let first = conn.last_insert_id();
                    (0..k).map(|i| first + i * self.server.id_step).collect()
                })
            }
        }
    }

    /// Deletes a run of IDs with `DELETE … RETURNING`, one statement per chunk.
    #[allow(clippy::too_many_arguments)]
    fn bulk_delete(
        &self,
        conn: &mut dyn Conn,
        guard: bool,
        t: &TableSql,
        items: &[BatchItem<'_>],
        base: usize,
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
    ) -> Result<()> {
        let mut at = base;
        let cap = match self.opts.dialect {
            Dialect::Postgres => self.bulk_rows(t).max(1_000),
            _ => 1_000,
        };
        for chunk in items.chunks(cap) {
            let ids: Vec<ValueRef<'_>> = chunk
                .iter()
                .filter_map(|it| match it.op {
                    BatchOp::Delete { id } => Some(ValueRef::Int(id)),
                    _ => None,
                })
                .collect();
            let mut gone = HashSet::with_capacity(ids.len());
            let mut collect = |r: &dyn RawRow| {
                if let ValueRef::Int(i) = r.value(0)? {
                    gone.insert(i);
                }
                Ok(())
            };
            let sql = t.delete_many(ids.len());
            let r = match self.opts.dialect {
                #[cfg(feature = "postgres")]
                Dialect::Postgres => match conn.as_pg() {
                    Some(pg) => pg.query_arrays(&sql, &[ids], guard, &mut collect),
                    None => Err(QueryError::Db(DbError::new(
                        DbErrorKind::Other,
                        "no PostgreSQL",
                    ))),
                },
                _ => conn.query(&sql, &ids, guard, &mut collect),
            };
            match r {
                Ok(()) => {
                    for it in chunk {
                        if let BatchOp::Delete { id } = it.op {
                            // A second delete of one ID in the batch finds nothing.
                            results.push(if gone.remove(&id) {
                                BatchResult::Done
                            } else {
                                BatchResult::Missing
                            });
                        }
                    }
                }
                Err(QueryError::Db(e)) if e.kind == DbErrorKind::Lost => {
                    return Err(Error::Batch {
                        index: at,
                        source: Box::new(e.into_error(ENGINE, Some(t.table))),
                    })
                }
                Err(_) => self.one_by_one(conn, guard, chunk, at, results, stop_on_error)?,
            }
            at += chunk.len();
        }
        Ok(())
    }

    /// PostgreSQL: updates every field of a run of rows from arrays, one
    /// statement per chunk; a chunk never holds one ID twice.
    #[allow(clippy::too_many_arguments)]
    #[cfg(feature = "postgres")]
    fn bulk_update(
        &self,
        conn: &mut dyn Conn,
        guard: bool,
        t: &TableSql,
        items: &[BatchItem<'_>],
        base: usize,
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
    ) -> Result<()> {
        let n = t.cols.len();
        let cap = self.bulk_rows(t);
        let mut start = 0;
        while start < items.len() {
            let mut seen = HashSet::new();
            let mut end = start;
            while end < items.len() && end - start < cap {
                let id = match items[end].op {
                    BatchOp::Update { row, .. } => row.id(),
                    _ => break,
                };
                if !seen.insert(id) {
                    break;
                }
                end += 1;
            }
            let chunk = &items[start..end];
            let mut columns: Vec<Vec<ValueRef<'_>>> =
                (0..=n).map(|_| Vec::with_capacity(chunk.len())).collect();
            for it in chunk {
                if let BatchOp::Update { row, .. } = it.op {
                    columns[0].push(ValueRef::Int(row.id()));
                    for (i, col) in columns[1..].iter_mut().enumerate() {
                        col.push(store(t.dialect, t.encs[i], row.field(i)));
                    }
                }
            }
            let mut found = HashSet::with_capacity(chunk.len());
            let r = match conn.as_pg() {
                Some(pg) => pg.query_arrays(&t.pg_unnest_update(), &columns, guard, &mut |r| {
                    if let ValueRef::Int(i) = r.value(0)? {
                        found.insert(i);
                    }
                    Ok(())
                }),
                None => Err(QueryError::Db(DbError::new(
                    DbErrorKind::Other,
                    "no PostgreSQL",
                ))),
            };
            match r {
                Ok(()) => {
                    for it in chunk {
                        if let BatchOp::Update { row, .. } = it.op {
                            results.push(if found.contains(&row.id()) {
                                BatchResult::Done
                            } else {
                                BatchResult::Missing
                            });
                        }
                    }
                }
                Err(QueryError::Db(e)) if e.kind == DbErrorKind::Lost => {
                    return Err(Error::Batch {
                        index: base + start,
                        source: Box::new(e.into_error(ENGINE, Some(t.table))),
                    })
                }
                Err(_) => {
                    self.one_by_one(conn, guard, chunk, base + start, results, stop_on_error)?
                }
            }
            start = end;
        }
        Ok(())
    }

    fn can_group(&self, g: Group) -> bool {
        match g {
            Group::AddNew => self.opts.dialect != Dialect::MySql || self.server.consecutive_ids,
            Group::Delete => self.server.returning,
            Group::UpdateAll => {
                cfg!(feature = "postgres") && self.opts.dialect == Dialect::Postgres
            }
            Group::Other => false,
        }
    }

    /// Applies batch items on `conn`, grouping runs of alike items into bulk
    /// statements where the dialect allows.
    pub(crate) fn apply_on(
        &self,
        conn: &mut dyn Conn,
        guard: bool,
        items: &[BatchItem<'_>],
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
    ) -> Result<()> {
        let mut i = 0;
        while i < items.len() {
            let g = group_of(&items[i]);
            let table = items[i].table;
            let run = if g == Group::Other || !self.can_group(g) {
                1
            } else {
                items[i..]
                    .iter()
                    .take_while(|it| group_of(it) == g && it.table.same(table))
                    .count()
            };
            if run > 1 {
                let t = self.table(table)?;
                let slice = &items[i..i + run];
                match g {
                    Group::AddNew => {
                        self.bulk_add(conn, guard, &t, slice, i, results, stop_on_error)?
                    }
                    Group::Delete => {
                        self.bulk_delete(conn, guard, &t, slice, i, results, stop_on_error)?
                    }
                    #[cfg(feature = "postgres")]
                    Group::UpdateAll => {
                        self.bulk_update(conn, guard, &t, slice, i, results, stop_on_error)?
                    }
                    _ => self.one_by_one(conn, guard, slice, i, results, stop_on_error)?,
                }
                i += run;
                continue;
            }
            self.one_by_one(conn, guard, &items[i..=i], i, results, stop_on_error)?;
            i += 1;
        }
        Ok(())
    }
}

pub(crate) fn q_err(e: QueryError, table: Option<&Table>) -> Error {
    match e {
        QueryError::Db(d) => d.into_error(ENGINE, table),
        QueryError::Out(e) => e,
    }
}

fn server_info(conn: &mut dyn Conn, d: Dialect) -> Result<ServerInfo> {
    let mut info = ServerInfo {
        version: String::new(),
        consecutive_ids: true,
        id_step: 1,
        max_packet: 4 << 20,
        returning: true,
    };
    let sql = match d {
        Dialect::Postgres => "SELECT version()",
        Dialect::MySql => {
            "SELECT VERSION(), @@innodb_autoinc_lock_mode, @@auto_increment_increment, \
             @@max_allowed_packet"
        }
        Dialect::Sqlite => "SELECT sqlite_version()",
    };
    conn.query(sql, &[], false, &mut |row| {
        if let ValueRef::Text(v) = row.value(0)? {
            info.version = v.into_owned();
        }
        if d == Dialect::MySql {
            let int = |i: usize| -> Result<i64> {
                Ok(match row.value(i)? {
                    ValueRef::Int(v) => v,
                    ValueRef::Text(t) => t.parse().unwrap_or(0),
                    _ => 0,
                })
            };
            info.consecutive_ids = int(1)? != 2;
            info.id_step = int(2)?.max(1);
            info.max_packet = usize::try_from(int(3)?).unwrap_or(4 << 20).max(64 * 1024);
            info.returning = info.version.to_ascii_lowercase().contains("mariadb");
        }
        Ok(())
    })
    .map_err(|e| q_err(e, None))?;
    Ok(info)
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
            Some(Enc::Bool) => t.dialect == Dialect::Postgres,
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

/// The filter's parameters in storage form, then LIMIT and OFFSET if paged.
pub(crate) fn page_params<'s>(t: &TableSql, select: &'s Select, paged: bool) -> Vec<ValueRef<'s>> {
    let mut p = Vec::with_capacity(select.filter.params.len() + 2);
    filter_params(t, &select.filter, &mut p);
    if paged {
        let limit = match select.limit {
            Some(l) => Some(i64::try_from(l).unwrap_or(i64::MAX)),
            None => t.dialect.no_limit(),
        };
        p.push(limit.map_or(ValueRef::Null, ValueRef::Int));
        p.push(ValueRef::Int(
            i64::try_from(select.offset).unwrap_or(i64::MAX),
        ));
    }
    p
}
