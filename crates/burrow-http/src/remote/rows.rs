//! The row calls ([`RowOps`]) and the engine ([`Storage`], [`SqlHost`]) over
//! HTTP: each call one request on the REST routes, wrapped in its cache call
//! ([`burrow_core::driver::CacheScope`]).

use std::sync::Arc;

use burrow_core::json::{self, JsonDialect};
use burrow_core::{
    BatchItem, BatchResult, Caps, Column, EngineTx, Error, Fields, Filter, OwnedRow, Result, Row,
    RowOps, Select, SqlHost, Storage, Table, Value,
};

use super::conn::{Body, Sink};
use super::render::{inline_sql, render_filter, render_tail};
use super::reply::{first_cell, found, parse_object};
use super::tx::RemoteTx;
use super::{Link, RemoteEngine, ENGINE};
use crate::web::wire::percent_encode;

impl Link<'_> {
    /// The path of a list of `columns`.
    fn list_path(table: &'static Table, columns: &str, select: &Select) -> Result<String> {
        let mut path = format!("{}?select=", table.name);
        percent_encode(columns, &mut path);
        let tail = render_tail(table, select)?;
        if !tail.is_empty() {
            path.push_str("&where=");
            percent_encode(&tail, &mut path);
        }
        Ok(path)
    }

    fn list(&self, table: &'static Table, columns: &str, select: &Select) -> Result<Vec<u8>> {
        let r = self.call("GET", &Self::list_path(table, columns, select)?, b"")?;
        if r.status != 200 {
            return Err(r.error(Some(table)));
        }
        Ok(r.body)
    }

    /// Sends a GET answered by a list of `table`, and hands its rows to
    /// `out` as they arrive: the rows at the start of a long list are read
    /// while the server still writes its end.
    fn rows(
        &self,
        table: &'static Table,
        path: &str,
        body: &[u8],
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        let mut feed = json::ListFeed::new(table);
        if self.tx.is_some() {
            // A transaction's one connection is held for the whole exchange:
            // rows handed out during it could not call back through the
            // transaction (a nested read would find it taken), so they are
            // handed out once the answer is whole.
            let r = self.call("GET", path, body)?;
            if r.status != 200 {
                return Err(r.error(Some(table)));
            }
            return feed.feed(&r.body, true, out).map(drop);
        }
        // The first error, from the list or from `out`. The rest of the body
        // is still read (and dropped), so that the connection (and the
        // transaction on it) outlives a failed list, as with a whole body.
        let mut failed = None;
        let mut sink = |data: &[u8], end: bool| -> Result<usize> {
            if failed.is_none() {
                match feed.feed(data, end, out) {
                    Ok(used) => return Ok(used),
                    Err(e) => failed = Some(e),
                }
            }
            Ok(data.len())
        };
        let sink: &mut Sink<'_> = &mut sink;
        let r = self.call_with("GET", path, Body::Bytes(body), &mut || {}, Some(sink))?;
        if r.status != 200 {
            return Err(r.error(Some(table)));
        }
        failed.map_or(Ok(()), Err)
    }

    pub(super) fn sql_select(
        &self,
        table: &'static Table,
        sql: &str,
        params: &[Value],
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        let text = inline_sql(sql, params)?;
        self.rows(table, "", text.as_bytes(), out)
    }
}

impl RowOps for Link<'_> {
    fn insert(&self, table: &'static Table, id: Option<i64>, row: &dyn Fields) -> Result<i64> {
        self.scope().insert(table, id, row, || {
            let mut body = Vec::with_capacity(256);
            match id {
                Some(id) => {
                    // The forced ID travels in the object.
                    let mut r = OwnedRow::from_fields(row);
                    r.id = id;
                    json::write_fields(&mut body, &r, None, true, JsonDialect::Exact);
                }
                None => json::write_fields(&mut body, row, None, false, JsonDialect::Exact),
            }
            let r = self.call("POST", table.name, &body)?;
            if r.status != 201 {
                return Err(r.error(Some(table)));
            }
            r.location
                .as_deref()
                .and_then(|l| l.rsplit('/').next())
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Error::engine(ENGINE, "201 without a Location"))
        })
    }

    fn update(
        &self,
        table: &'static Table,
        row: &dyn Fields,
        fields: Option<&[usize]>,
    ) -> Result<bool> {
        self.scope().update(table, row, fields, || {
            let mut body = Vec::with_capacity(256);
            json::write_fields(&mut body, row, fields, false, JsonDialect::Exact);
            let path = RemoteEngine::table_path(table, Some(row.id()));
            found(table, self.call("PUT", &path, &body)?)
        })
    }

    fn delete(&self, table: &'static Table, id: i64) -> Result<bool> {
        self.scope().delete(table, id, || {
            let path = RemoteEngine::table_path(table, Some(id));
            found(table, self.call("DELETE", &path, b"")?)
        })
    }

    fn delete_where(&self, table: &'static Table, filter: &Filter) -> Result<u64> {
        self.scope().delete_where(table, || {
            let mut path = format!("{}?where=", table.name);
            percent_encode(&render_filter(table, filter)?, &mut path);
            let r = self.call("DELETE", &path, b"")?;
            if r.status != 200 {
                return Err(r.error(Some(table)));
            }
            serde_json::from_slice::<serde_json::Value>(&r.body)
                .ok()
                .and_then(|v| v.get("deleted").and_then(|d| d.as_u64()))
                .ok_or_else(|| Error::engine(ENGINE, "unexpected answer to a DELETE"))
        })
    }

    fn retrieve(
        &self,
        table: &'static Table,
        id: i64,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<bool> {
        // IDs are positive on the wire (as in mORMot): no row has another.
        if id <= 0 {
            return Ok(false);
        }
        self.scope().retrieve_owned(table, id, out, || {
            let r = self.call("GET", &RemoteEngine::table_path(table, Some(id)), b"")?;
            match r.status {
                200 => parse_object(table, &r.body).map(Some),
                404 => Ok(None),
                _ => Err(r.error(Some(table))),
            }
        })
    }

    fn select(
        &self,
        table: &'static Table,
        select: &Select,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        self.rows(table, &Self::list_path(table, "*", select)?, b"", out)
    }

    fn count(&self, table: &'static Table, filter: &Filter) -> Result<u64> {
        let mut sql = format!("SELECT count(*) FROM {}", table.name);
        let w = render_filter(table, filter)?;
        if !w.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&w);
        }
        let r = self.call("GET", "", sql.as_bytes())?;
        if r.status != 200 {
            return Err(r.error(Some(table)));
        }
        first_cell(&r.body)?
            .and_then(|v| v.as_u64())
            .ok_or_else(|| Error::engine(ENGINE, "unexpected answer to a count"))
    }

    fn select_value(
        &self,
        table: &'static Table,
        column: Column,
        select: &Select,
    ) -> Result<Option<Value>> {
        let body = self.list(table, table.column_name(column), select)?;
        match first_cell(&body)? {
            None => Ok(None),
            Some(v) => match column {
                Column::Id => Ok(json::parse_id(&v).map(Value::Int)),
                Column::Field(i) => json::parse_value(table, &table.fields[i], &v).map(Some),
            },
        }
    }

    fn apply_batch(
        &self,
        items: &[BatchItem<'_>],
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
    ) -> Result<()> {
        self.batch(items, results, stop_on_error, None)
    }
}

burrow_core::forward_row_ops!(RemoteEngine, |s| s.link());

impl Storage for RemoteEngine {
    fn caps(&self) -> Caps {
        Caps::network(ENGINE)
    }

    fn ensure_table(&self, table: &'static Table) -> Result<()> {
        let r = self.call("GET", &format!("{}?select=ID&results=1", table.name), b"")?;
        match r.status {
            200 | 401 | 403 => Ok(()),
            _ => Err(Error::UnknownTable(format!(
                "{} on the server: {}",
                table.name,
                r.text()
            ))),
        }
    }

    fn begin(self: Arc<Self>) -> Result<Box<dyn EngineTx>> {
        RemoteTx::begin(self)
    }

    /// The server runs the batch under its own transaction: one request, where
    /// `begin`, the batch and `commit` would be three round trips.
    fn apply_batch_in_transaction(
        &self,
        items: &[BatchItem<'_>],
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
        rollback_on_error: bool,
    ) -> Option<Result<()>> {
        let own_transaction = Some(rollback_on_error);
        Some(
            self.link()
                .batch(items, results, stop_on_error, own_transaction),
        )
    }

    fn sql_host(&self) -> Option<&dyn SqlHost> {
        Some(self)
    }
}

impl SqlHost for RemoteEngine {
    fn sql_select(
        &self,
        table: &'static Table,
        sql: &str,
        params: &[Value],
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        self.link().sql_select(table, sql, params, out)
    }

    /// Nothing to do: the SQL runs on the server, which sees its own tables
    /// only; a statement naming a table held elsewhere fails there.
    fn expose(&self, table: &'static Table, engine: Arc<dyn Storage>) -> Result<()> {
        let _ = (table, engine);
        Ok(())
    }
}
