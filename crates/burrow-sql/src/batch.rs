//! Batches on one connection: runs of alike items grouped into bulk
//! statements (multi-row INSERT, `DELETE … RETURNING`, PostgreSQL's
//! array-bound `UNNEST`), and the item-by-item fallback that finds and
//! reports the item a failed bulk statement stumbled on.

use std::collections::HashSet;

use burrow_core::{BatchItem, BatchOp, BatchResult, Error, Result, ValueRef};
use burrow_sqlite::statements::rows_share;

use crate::conn::{query_i64, Conn, DbError, DbErrorKind, QueryError, RawRow, RowFn};
use crate::dialect::Dialect;
use crate::engine::SqlEngine;
use crate::table::TableSql;
use crate::values::store;
use crate::{writes, ENGINE};

/// The kind of a batch item, for grouping consecutive ones.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Group {
    AddNew,
    /// Updates of every field, or of one same list of fields.
    Update,
    Delete,
    Other,
}

fn group_of(item: &BatchItem<'_>) -> Group {
    match item.op {
        BatchOp::Add { id: None, .. } => Group::AddNew,
        BatchOp::Update { .. } => Group::Update,
        BatchOp::Delete { .. } => Group::Delete,
        _ => Group::Other,
    }
}

/// The fields an update writes (`None`: every one); `None` for other items.
fn updated_fields<'i>(item: &BatchItem<'i>) -> Option<&'i [usize]> {
    match item.op {
        BatchOp::Update { fields, .. } => fields,
        _ => None,
    }
}

/// A batch being applied on one connection, and where its results go.
pub(crate) struct Batch<'x> {
    pub engine: &'x SqlEngine,
    pub conn: &'x mut dyn Conn,
    /// Whether each statement runs under a savepoint (see [`Conn`]).
    pub guard: bool,
    pub results: &'x mut Vec<BatchResult>,
    /// Whether the first failing item ends the batch, rather than being
    /// reported in its result while the others go on.
    pub stop_on_error: bool,
}

/// A failed query as a driver error, for the bulk paths that fall back on
/// applying their items one by one.
fn db_err(e: QueryError) -> DbError {
    match e {
        QueryError::Db(d) => d,
        QueryError::Out(e) => DbError::new(DbErrorKind::Other, e.to_string()),
    }
}

/// Runs a statement that binds one array per column (PostgreSQL).
fn query_arrays(
    conn: &mut dyn Conn,
    sql: &str,
    columns: &[Vec<ValueRef<'_>>],
    guard: bool,
    out: &mut RowFn<'_>,
) -> Result<(), QueryError> {
    #[cfg(feature = "postgres")]
    if let Some(pg) = conn.as_pg() {
        return pg.query_arrays(sql, columns, guard, out);
    }
    let _ = (conn, sql, columns, guard, out);
    Err(QueryError::Db(DbError::new(
        DbErrorKind::Other,
        "not a PostgreSQL connection",
    )))
}

impl Batch<'_> {
    /// Applies `items`, grouping runs of alike items into bulk statements
    /// where the database allows.
    pub(crate) fn apply(&mut self, items: &[BatchItem<'_>]) -> Result<()> {
        let mut i = 0;
        while i < items.len() {
            let g = group_of(&items[i]);
            let table = items[i].table;
            let run = if g == Group::Other || !self.can_group(g) {
                1
            } else {
                let fields = updated_fields(&items[i]);
                items[i..]
                    .iter()
                    .take_while(|it| {
                        group_of(it) == g && it.table.same(table) && updated_fields(it) == fields
                    })
                    .count()
            };
            if run > 1 {
                let t = self.engine.table(table)?;
                let slice = &items[i..i + run];
                match g {
                    Group::AddNew => self.add(&t, slice, i)?,
                    Group::Delete => self.delete(&t, slice, i)?,
                    Group::Update => self.update(&t, slice, i)?,
                    Group::Other => self.one_by_one(slice, i)?,
                }
                i += run;
                continue;
            }
            self.one_by_one(&items[i..=i], i)?;
            i += 1;
        }
        Ok(())
    }

    fn can_group(&self, g: Group) -> bool {
        let server = &self.engine.server;
        match g {
            Group::AddNew => server.consecutive_ids,
            Group::Delete => server.returning,
            Group::Update => self.engine.dialect().binds_arrays(),
            Group::Other => false,
        }
    }

    fn one(&mut self, item: &BatchItem<'_>) -> Result<BatchResult> {
        let t = self.engine.table(item.table)?;
        let (conn, guard) = (&mut *self.conn, self.guard);
        let found = |yes| {
            if yes {
                BatchResult::Done
            } else {
                BatchResult::Missing
            }
        };
        Ok(match item.op {
            BatchOp::Add { id, row } => {
                BatchResult::Added(writes::insert(conn, guard, &t, id, row)?)
            }
            BatchOp::Update { row, fields } => found(writes::update(conn, guard, &t, row, fields)?),
            BatchOp::Delete { id } => found(writes::delete(conn, guard, &t, id)?),
        })
    }

    /// Applies items one by one (the fallback of a failed bulk statement, to
    /// find and report the failing item). `base`: index of `items[0]`.
    fn one_by_one(&mut self, items: &[BatchItem<'_>], base: usize) -> Result<()> {
        for (k, item) in items.iter().enumerate() {
            match self.one(item) {
                Ok(r) => self.results.push(r),
                Err(e) if self.stop_on_error || self.conn.broken() => {
                    return Err(Error::Batch {
                        index: base + k,
                        source: Box::new(e),
                    })
                }
                Err(e) => self.results.push(BatchResult::Failed(Box::new(e))),
            }
        }
        Ok(())
    }

    /// The error that ends a batch whose connection is lost.
    fn lost(t: &TableSql, index: usize, e: DbError) -> Error {
        Error::Batch {
            index,
            source: Box::new(e.into_error(ENGINE, Some(t.table))),
        }
    }

    /// Rows per bulk statement of this table.
    fn bulk_rows(&self, t: &TableSql) -> usize {
        let (default, param_cap) = t.dialect.bulk_rows(t.names.columns.len() + 1);
        let set = self.engine.options().bulk_rows;
        let want = if set > 0 { set } else { default };
        want.min(param_cap).max(1)
    }

    /// Splits `items` into chunks of at most `bulk_rows`, and where the server
    /// limits its packets (MySQL) of at most half of one by an estimate of
    /// their size.
    fn chunks<'i, 'a>(&self, t: &TableSql, items: &'i [BatchItem<'a>]) -> Vec<&'i [BatchItem<'a>]> {
        let cap = self.bulk_rows(t);
        let Some(max_packet) = self.engine.server.max_packet else {
            return items.chunks(cap).collect();
        };
        let budget = (max_packet / 2).max(16 * 1024);
        let mut out = Vec::new();
        let (mut start, mut bytes) = (0, 0usize);
        for (k, item) in items.iter().enumerate() {
            let size: usize = match item.op {
                BatchOp::Add { row, .. } | BatchOp::Update { row, .. } => {
                    (0..t.names.columns.len())
                        .map(|i| match row.field(i) {
                            ValueRef::Text(s) => s.len() + 9,
                            ValueRef::Blob(b) => b.len() + 9,
                            _ => 13,
                        })
                        .sum()
                }
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
    fn add(&mut self, t: &TableSql, items: &[BatchItem<'_>], base: usize) -> Result<()> {
        let mut at = base;
        for chunk in self.chunks(t, items) {
            let added = if t.dialect.binds_arrays() {
                self.add_arrays(t, chunk)
            } else {
                self.add_rows(t, chunk)
            };
            match added {
                Ok(ids) => self.results.extend(ids.into_iter().map(BatchResult::Added)),
                Err(e) if e.kind == DbErrorKind::Lost => return Err(Self::lost(t, at, e)),
                // The failed statement left nothing behind: find the culprit.
                Err(_) => self.one_by_one(chunk, at)?,
            }
            at += chunk.len();
        }
        Ok(())
    }

    /// One multi-row `INSERT … VALUES (…),(…)`; the database numbers the rows.
    fn add_rows(&mut self, t: &TableSql, chunk: &[BatchItem<'_>]) -> Result<Vec<i64>, DbError> {
        let k = chunk.len() as i64;
        if t.dialect == Dialect::Sqlite {
            // New rowids follow the current maximum, unless it is near
            // i64::MAX (then SQLite picks free ones at random): such a
            // chunk goes row by row.
            let max = query_i64(self.conn, &t.max_id, &[], self.guard).map_err(db_err)?;
            if max.unwrap_or(0).checked_add(k).is_none() {
                return Err(DbError::new(DbErrorKind::Other, "IDs near the largest"));
            }
        }
        // Rows that share their automatic times (a batch's stamp) bind them
        // once a statement (SQLite only: `t.shared` is empty elsewhere).
        let rows = chunk.iter().filter_map(|it| match it.op {
            BatchOp::Add { row, .. } => Some(row),
            _ => None,
        });
        let (sql, shared) = if rows_share(rows, &t.shared) {
            (t.bulk_insert_shared(chunk.len()), &t.shared[..])
        } else {
            (t.bulk_insert(chunk.len()), &[][..])
        };
        self.conn.insert_rows(t, &sql, chunk, shared, self.guard)?;
        let reported = self.conn.last_insert_id();
        Ok(t.dialect
            .bulk_insert_ids(reported, k, self.engine.server.id_step))
    }

    /// PostgreSQL: IDs drawn from the sequence, then every row inserted from
    /// one array per column.
    fn add_arrays(&mut self, t: &TableSql, chunk: &[BatchItem<'_>]) -> Result<Vec<i64>, DbError> {
        let n = t.names.columns.len();
        let seq = t.sequence.as_deref().unwrap_or_default();
        let sql = format!(
            "SELECT nextval('{}') FROM generate_series(1, $1)",
            seq.replace('\'', "''")
        );
        let mut ids = Vec::with_capacity(chunk.len());
        self.conn
            .query(
                &sql,
                &[ValueRef::Int(chunk.len() as i64)],
                self.guard,
                &mut |r| {
                    if let ValueRef::Int(i) = r.value(0)? {
                        ids.push(i);
                    }
                    Ok(())
                },
            )
            .map_err(db_err)?;
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
        for it in chunk {
            if let BatchOp::Add { row, .. } = it.op {
                for (i, col) in columns[1..].iter_mut().enumerate() {
                    col.push(store(t.dialect, t.encs[i], row.field(i)));
                }
            }
        }
        query_arrays(
            self.conn,
            &t.pg_unnest_insert(),
            &columns,
            self.guard,
            &mut |_| Ok(()),
        )
        .map_err(db_err)?;
        Ok(ids)
    }

    /// Deletes a run of IDs with `DELETE … RETURNING`, one statement per chunk.
    fn delete(&mut self, t: &TableSql, items: &[BatchItem<'_>], base: usize) -> Result<()> {
        let mut at = base;
        // One array binds any number of IDs.
        let cap = if t.dialect.binds_arrays() {
            self.bulk_rows(t).max(1_000)
        } else {
            1_000
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
            let r = if t.dialect.binds_arrays() {
                query_arrays(self.conn, &sql, &[ids], self.guard, &mut collect)
            } else {
                self.conn.query(&sql, &ids, self.guard, &mut collect)
            };
            match r {
                Ok(()) => {
                    for it in chunk {
                        if let BatchOp::Delete { id } = it.op {
                            // A second delete of one ID in the batch finds nothing.
                            self.results.push(if gone.remove(&id) {
                                BatchResult::Done
                            } else {
                                BatchResult::Missing
                            });
                        }
                    }
                }
                Err(QueryError::Db(e)) if e.kind == DbErrorKind::Lost => {
                    return Err(Self::lost(t, at, e))
                }
                Err(_) => self.one_by_one(chunk, at)?,
            }
            at += chunk.len();
        }
        Ok(())
    }

    /// PostgreSQL: updates a run of rows from arrays, one statement per
    /// chunk, every field or the one list of fields the run shares; a chunk
    /// never holds one ID twice.
    fn update(&mut self, t: &TableSql, items: &[BatchItem<'_>], base: usize) -> Result<()> {
        let n = t.names.columns.len();
        let fields = items.first().and_then(updated_fields);
        if fields.is_some_and(|f| f.iter().any(|&i| i >= n)) {
            // Item by item, each refused with its own result.
            return self.one_by_one(items, base);
        }
        let all: Vec<usize> = (0..n).collect();
        let written = fields.unwrap_or(&all);
        let sql = t.pg_unnest_update(written);
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
            let mut columns: Vec<Vec<ValueRef<'_>>> = (0..=written.len())
                .map(|_| Vec::with_capacity(chunk.len()))
                .collect();
            for it in chunk {
                if let BatchOp::Update { row, .. } = it.op {
                    columns[0].push(ValueRef::Int(row.id()));
                    for (col, &f) in columns[1..].iter_mut().zip(written) {
                        col.push(store(t.dialect, t.encs[f], row.field(f)));
                    }
                }
            }
            let mut found = HashSet::with_capacity(chunk.len());
            let r = query_arrays(self.conn, &sql, &columns, self.guard, &mut |r| {
                if let ValueRef::Int(i) = r.value(0)? {
                    found.insert(i);
                }
                Ok(())
            });
            match r {
                Ok(()) => {
                    for it in chunk {
                        if let BatchOp::Update { row, .. } = it.op {
                            self.results.push(if found.contains(&row.id()) {
                                BatchResult::Done
                            } else {
                                BatchResult::Missing
                            });
                        }
                    }
                }
                Err(QueryError::Db(e)) if e.kind == DbErrorKind::Lost => {
                    return Err(Self::lost(t, base + start, e))
                }
                Err(_) => self.one_by_one(chunk, base + start)?,
            }
            start = end;
        }
        Ok(())
    }
}
