//! The row calls, written once over a [`Session`]: the engine's own (a
//! connection leased for each call, in autocommit) and an open
//! [`crate::SqlTx`]'s (its one connection) differ only in where a statement
//! runs.

use burrow_core::{
    BatchItem, BatchResult, Column, Error, Fields, Filter, Result, Row, Select, Table, Value,
    ValueRef,
};

use crate::batch::Batch;
use crate::conn::{q_err, query_i64, Conn, QueryError};
use crate::dialect::SqlText;
use crate::engine::SqlEngine;
use crate::values::{filter_params, page_params, typed, TypedRow};
use crate::{writes, ENGINE};

/// Where the statements of a row call run.
pub(crate) trait Session {
    /// The engine whose tables and options the call uses.
    fn engine(&self) -> &SqlEngine;

    /// Runs a write on a connection; `f` gets the connection and whether to
    /// guard each statement with a savepoint (see [`Conn`]).
    fn write<R>(&self, f: impl FnOnce(&mut dyn Conn, bool) -> Result<R>) -> Result<R>;

    /// Runs a read on a connection; a session may run `f` again on another
    /// connection when the first one turns out to be dead.
    fn read<R>(
        &self,
        f: impl FnMut(&mut dyn Conn) -> Result<R, QueryError>,
    ) -> Result<R, QueryError>;
}

pub(crate) fn insert(
    s: &impl Session,
    table: &'static Table,
    id: Option<i64>,
    row: &dyn Fields,
) -> Result<i64> {
    let t = s.engine().table(table)?;
    s.write(|conn, guard| writes::insert(conn, guard, &t, id, row))
}

pub(crate) fn update(
    s: &impl Session,
    table: &'static Table,
    row: &dyn Fields,
    fields: Option<&[usize]>,
) -> Result<bool> {
    let t = s.engine().table(table)?;
    s.write(|conn, guard| writes::update(conn, guard, &t, row, fields))
}

pub(crate) fn delete(s: &impl Session, table: &'static Table, id: i64) -> Result<bool> {
    let t = s.engine().table(table)?;
    s.write(|conn, guard| writes::delete(conn, guard, &t, id))
}

pub(crate) fn delete_where(
    s: &impl Session,
    table: &'static Table,
    filter: &Filter,
) -> Result<u64> {
    let t = s.engine().table(table)?;
    let mut sql = SqlText::new(t.dialect, "DELETE FROM ");
    sql.push(&t.names.table);
    t.write_where(&mut sql, filter);
    let mut p = Vec::with_capacity(filter.params.len());
    filter_params(&t, filter, &mut p);
    s.write(|conn, guard| {
        conn.execute(&sql.text, &p, guard)
            .map_err(|e| e.into_error(ENGINE, Some(table)))
    })
}

pub(crate) fn retrieve(
    s: &impl Session,
    table: &'static Table,
    id: i64,
    out: &mut dyn FnMut(&dyn Row) -> Result<()>,
) -> Result<bool> {
    let t = s.engine().table(table)?;
    s.read(|conn| {
        conn.query_first(&t.select_by_id, &[ValueRef::Int(id)], &mut |raw| {
            out(&TypedRow { raw, table })
        })
    })
    .map_err(|e| q_err(e, Some(table)))
}

pub(crate) fn retrieve_many(
    s: &impl Session,
    table: &'static Table,
    ids: &[i64],
    out: &mut burrow_core::EachRow<'_>,
) -> Result<()> {
    let t = s.engine().table(table)?;
    // Rows handed out before a connection died are not handed out again
    // when the session retries on another one.
    let mut done = 0;
    s.read(|conn| {
        let start = done;
        conn.query_first_each(&t.select_by_id, &ids[start..], &mut |i, raw| {
            done = start + i + 1;
            match raw {
                Some(raw) => out(start + i, Some(&TypedRow { raw, table })),
                None => out(start + i, None),
            }
        })
    })
    .map_err(|e| q_err(e, Some(table)))
}

pub(crate) fn select_many(
    s: &impl Session,
    table: &'static Table,
    selects: &[Select],
    out: &mut burrow_core::EachSelected<'_>,
) -> Result<()> {
    let t = s.engine().table(table)?;
    let texts: Vec<(String, Vec<ValueRef<'_>>)> = selects
        .iter()
        .map(|select| {
            let (sql, paged) = t.select_sql(None, select);
            (sql, page_params(&t, select, paged))
        })
        .collect();
    let queries: Vec<(&str, &[ValueRef<'_>])> = texts
        .iter()
        .map(|(sql, p)| (sql.as_str(), p.as_slice()))
        .collect();
    let mut started = false;
    s.read(|conn| {
        if started {
            // As in `select`: rows already handed out are not repeated.
            return Err(QueryError::Out(Error::engine(
                ENGINE,
                "connection lost mid-read",
            )));
        }
        conn.query_each(&queries, &mut |i, raw| {
            started = true;
            out(i, &TypedRow { raw, table })
        })
    })
    .map_err(|e| q_err(e, Some(table)))
}

pub(crate) fn select(
    s: &impl Session,
    table: &'static Table,
    select: &Select,
    out: &mut dyn FnMut(&dyn Row) -> Result<()>,
) -> Result<()> {
    let t = s.engine().table(table)?;
    let (sql, paged) = t.select_sql(None, select);
    let p = page_params(&t, select, paged);
    let mut started = false;
    s.read(|conn| {
        if started {
            // Rows were handed out before the connection died: repeating
            // the read would hand them out twice.
            return Err(QueryError::Out(Error::engine(
                ENGINE,
                "connection lost mid-read",
            )));
        }
        conn.query(&sql, &p, false, &mut |raw| {
            started = true;
            out(&TypedRow { raw, table })
        })
    })
    .map_err(|e| q_err(e, Some(table)))
}

pub(crate) fn count(s: &impl Session, table: &'static Table, filter: &Filter) -> Result<u64> {
    let t = s.engine().table(table)?;
    let mut sql = SqlText::new(t.dialect, "SELECT count(*) FROM ");
    sql.push(&t.names.table);
    t.write_where(&mut sql, filter);
    let mut p = Vec::with_capacity(filter.params.len());
    filter_params(&t, filter, &mut p);
    let n = s
        .read(|conn| query_i64(conn, &sql.text, &p, false))
        .map_err(|e| q_err(e, Some(table)))?;
    Ok(n.unwrap_or(0).max(0) as u64)
}

pub(crate) fn select_value(
    s: &impl Session,
    table: &'static Table,
    column: Column,
    select: &Select,
) -> Result<Option<Value>> {
    let t = s.engine().table(table)?;
    let (sql, paged) = t.select_sql(Some(column), select);
    let p = page_params(&t, select, paged);
    let kind = t.kind(column);
    let mut found = None;
    s.read(|conn| {
        conn.query(&sql, &p, false, &mut |raw| {
            if found.is_none() {
                found = Some(typed(kind, raw.value(0)?).to_owned());
            }
            Ok(())
        })
    })
    .map_err(|e| q_err(e, Some(table)))?;
    Ok(found)
}

pub(crate) fn apply_batch(
    s: &impl Session,
    items: &[BatchItem<'_>],
    results: &mut Vec<BatchResult>,
    stop_on_error: bool,
) -> Result<()> {
    let engine = s.engine();
    s.write(|conn, guard| {
        Batch {
            engine,
            conn,
            guard,
            results,
            stop_on_error,
        }
        .apply(items)
    })
}

/// A statement of the caller's own; returns the rows it changed.
pub(crate) fn execute(s: &impl Session, sql: &str, params: &[Value]) -> Result<u64> {
    let p: Vec<ValueRef<'_>> = params.iter().map(Value::as_ref).collect();
    s.write(|conn, _| {
        conn.execute(sql, &p, false)
            .map_err(|e| e.into_error(ENGINE, None))
    })
}

/// A query of the caller's own, each row handed to `f` as owned values.
pub(crate) fn query(
    s: &impl Session,
    sql: &str,
    params: &[Value],
    f: &mut dyn FnMut(&[Value]) -> Result<()>,
) -> Result<()> {
    let p: Vec<ValueRef<'_>> = params.iter().map(Value::as_ref).collect();
    let mut buf = Vec::new();
    s.write(|conn, _| {
        conn.query(sql, &p, false, &mut |row| {
            buf.clear();
            for i in 0..row.len() {
                buf.push(row.value(i)?.to_owned());
            }
            f(&buf)
        })
        .map_err(|e| q_err(e, None))
    })
}

/// A [`Session`] seen as [`burrow_core::RowOps`], each call forwarded to its
/// one body above; the engine and its transaction handle forward to it.
pub(crate) struct Via<'a, S>(pub &'a S);

impl<S: Session> burrow_core::RowOps for Via<'_, S> {
    fn insert(
        &self,
        table: &'static burrow_core::Table,
        id: Option<i64>,
        row: &dyn burrow_core::Fields,
    ) -> burrow_core::Result<i64> {
        insert(self.0, table, id, row)
    }

    fn update(
        &self,
        table: &'static burrow_core::Table,
        row: &dyn burrow_core::Fields,
        fields: Option<&[usize]>,
    ) -> burrow_core::Result<bool> {
        update(self.0, table, row, fields)
    }

    fn delete(&self, table: &'static burrow_core::Table, id: i64) -> burrow_core::Result<bool> {
        delete(self.0, table, id)
    }

    fn delete_where(
        &self,
        table: &'static burrow_core::Table,
        filter: &burrow_core::Filter,
    ) -> burrow_core::Result<u64> {
        delete_where(self.0, table, filter)
    }

    fn retrieve(
        &self,
        table: &'static burrow_core::Table,
        id: i64,
        out: &mut dyn FnMut(&dyn burrow_core::Row) -> burrow_core::Result<()>,
    ) -> burrow_core::Result<bool> {
        retrieve(self.0, table, id, out)
    }

    fn retrieve_many(
        &self,
        table: &'static burrow_core::Table,
        ids: &[i64],
        out: &mut burrow_core::EachRow<'_>,
    ) -> burrow_core::Result<()> {
        retrieve_many(self.0, table, ids, out)
    }

    fn select(
        &self,
        table: &'static burrow_core::Table,
        select: &burrow_core::Select,
        out: &mut dyn FnMut(&dyn burrow_core::Row) -> burrow_core::Result<()>,
    ) -> burrow_core::Result<()> {
        self::select(self.0, table, select, out)
    }

    fn select_many(
        &self,
        table: &'static burrow_core::Table,
        selects: &[burrow_core::Select],
        out: &mut burrow_core::EachSelected<'_>,
    ) -> burrow_core::Result<()> {
        select_many(self.0, table, selects, out)
    }

    fn count(
        &self,
        table: &'static burrow_core::Table,
        filter: &burrow_core::Filter,
    ) -> burrow_core::Result<u64> {
        count(self.0, table, filter)
    }

    fn select_value(
        &self,
        table: &'static burrow_core::Table,
        column: burrow_core::Column,
        select: &burrow_core::Select,
    ) -> burrow_core::Result<Option<burrow_core::Value>> {
        select_value(self.0, table, column, select)
    }

    fn apply_batch(
        &self,
        items: &[burrow_core::BatchItem<'_>],
        results: &mut Vec<burrow_core::BatchResult>,
        stop_on_error: bool,
    ) -> burrow_core::Result<()> {
        apply_batch(self.0, items, results, stop_on_error)
    }
}
