//! One-table SQL on the memory engine: `SELECT * FROM T [WHERE …]
//! [ORDER BY …] [LIMIT n [OFFSET m]]`, answered by the engine's own select.
//!
//! An application whose default engine is the memory engine still reads its
//! tables with SQL (`Orm::sql_list`); mORMot2's in-memory static tables answer
//! the same subset. There is no SQL engine behind it: the statement becomes a
//! [`Select`] ([`burrow_core::driver::one_table`]) and the rows come straight
//! from the table (or from the engine holding a table placed elsewhere,
//! [`SqlHost::expose`]).

use std::sync::{Arc, PoisonError};

use burrow_core::driver::one_table;
use burrow_core::{Error, Result, Row, RowOps, Select, SqlHost, Storage, Table, Value};

use crate::MemoryEngine;

impl SqlHost for MemoryEngine {
    fn sql_select(
        &self,
        table: &'static Table,
        sql: &str,
        params: &[Value],
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        let select: Select = one_table::select(table, sql, params).map_err(|e| match e {
            Error::Unsupported(m) => Error::Unsupported(format!(
                "the memory engine answers {m}; make a SQLite engine the default engine for \
                 joins, aggregates and column lists"
            )),
            e => e,
        })?;
        let elsewhere = self
            .exposed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|(t, _)| t.same(table))
            .map(|(_, e)| e.clone());
        match elsewhere {
            Some(engine) => engine.select(table, &select, out),
            None => self.select(table, &select, out),
        }
    }

    fn expose(&self, table: &'static Table, engine: Arc<dyn Storage>) -> Result<()> {
        let mut v = self.exposed.lock().unwrap_or_else(PoisonError::into_inner);
        v.retain(|(t, _)| !t.same(table));
        v.push((table, engine));
        Ok(())
    }
}
