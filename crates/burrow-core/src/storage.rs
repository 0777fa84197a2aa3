//! The `Storage` trait: what every engine implements.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::query::Select;
use crate::record::{Fields, Row};
use crate::schema::{Column, Table};
use crate::value::Value;

/// One write of a batch, borrowed from the [`crate::Batch`] that holds it.
pub enum BatchOp<'a> {
    /// Insert, with a forced ID or an engine-assigned one.
    Add {
        /// The forced ID, if any.
        id: Option<i64>,
        /// The record.
        row: &'a dyn Fields,
    },
    /// Update the record with `row.id()`: every field, or only those listed.
    Update {
        /// The record.
        row: &'a dyn Fields,
        /// The field indexes to write; `None` writes them all.
        fields: Option<&'a [usize]>,
    },
    /// Delete by ID.
    Delete {
        /// The ID.
        id: i64,
    },
}

/// One item of a batch: a table and a write.
pub struct BatchItem<'a> {
    /// The table written.
    pub table: &'static Table,
    /// The write.
    pub op: BatchOp<'a>,
}

/// The outcome of one batch item.
#[derive(Debug)]
pub enum BatchResult {
    /// Inserted with this ID.
    Added(i64),
    /// Updated or deleted.
    Done,
    /// The update or delete found no row with that ID.
    Missing,
    /// Failed (only reported when the batch does not roll back on error).
    /// Boxed: failures are rare, and this keeps every result two words long.
    Failed(Box<Error>),
}

impl BatchResult {
    /// The new ID of an insert.
    pub fn id(&self) -> Option<i64> {
        match self {
            BatchResult::Added(id) => Some(*id),
            _ => None,
        }
    }
}

/// A storage engine: holds tables and answers reads and writes on their rows.
///
/// Engines are shared between threads (`&self` everywhere). Transactions are tied
/// to the thread that began them: while one is open, calls from that thread run
/// inside it and calls from other threads wait for it to end (SQL engines), or the
/// engine otherwise keeps them out of it. Reads hand each row to a callback, so an
/// engine can lend its own buffers instead of copying rows out.
pub trait Storage: Send + Sync {
    /// A short name for messages (`sqlite`, `memory`, …).
    fn engine_name(&self) -> &'static str;

    /// Creates the table and its indexes, or brings an existing one up to the
    /// declared fields (adding missing columns; refusing a conflicting type).
    fn ensure_table(&self, table: &'static Table) -> Result<()>;

    /// Inserts a row and returns its ID: `id` when forced, else a new one.
    fn insert(&self, table: &'static Table, id: Option<i64>, row: &dyn Fields) -> Result<i64>;

    /// Updates the row `row.id()`: every field, or the listed field indexes.
    /// Returns whether a row had that ID.
    fn update(
        &self,
        table: &'static Table,
        row: &dyn Fields,
        fields: Option<&[usize]>,
    ) -> Result<bool>;

    /// Deletes a row; returns whether it existed.
    fn delete(&self, table: &'static Table, id: i64) -> Result<bool>;

    /// Deletes the matching rows; returns how many.
    fn delete_where(&self, table: &'static Table, filter: &Filter) -> Result<u64>;

    /// Hands the row with this ID to `out`; returns whether it existed.
    fn retrieve(
        &self,
        table: &'static Table,
        id: i64,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<bool>;

    /// Hands every selected row to `out`, in the requested order.
    fn select(
        &self,
        table: &'static Table,
        select: &Select,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()>;

    /// Counts the matching rows.
    fn count(&self, table: &'static Table, filter: &Filter) -> Result<u64>;

    /// One column of the first selected row, or `None` without a match.
    fn select_value(
        &self,
        table: &'static Table,
        column: Column,
        select: &Select,
    ) -> Result<Option<Value>>;

    /// Applies `items` in order, appending one result per item to `results`.
    /// With `stop_on_error` the first failure is returned as [`Error::Batch`]
    /// (its index relative to `items`) and nothing after it runs; otherwise a
    /// failure is recorded as [`BatchResult::Failed`] and the rest goes on.
    /// Transactions are the caller's business. Engines override this to group
    /// consecutive inserts into bulk statements.
    fn apply_batch(
        &self,
        items: &[BatchItem<'_>],
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
    ) -> Result<()> {
        for (index, item) in items.iter().enumerate() {
            let r = apply_one(self, item);
            match r {
                Ok(r) => results.push(r),
                Err(e) if stop_on_error => {
                    return Err(Error::Batch {
                        index,
                        source: Box::new(e),
                    })
                }
                Err(e) => results.push(BatchResult::Failed(Box::new(e))),
            }
        }
        Ok(())
    }

    /// Runs `items` as [`Storage::apply_batch`] does, inside one transaction
    /// of the engine's own that begins and ends within this one call, when the
    /// engine can do that more cheaply than separate [`Storage::begin`] and
    /// [`Storage::commit`] calls (a remote server applies a batch under its own
    /// transaction in one request, saving two round trips). The transaction is
    /// committed on success, and also after a failed item of a
    /// `stop_on_error` batch unless `rollback_on_error`; otherwise rolled
    /// back. `None`: the engine has no such path, and the caller wraps
    /// `apply_batch` in a transaction itself (the default).
    fn apply_batch_in_transaction(
        &self,
        items: &[BatchItem<'_>],
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
        rollback_on_error: bool,
    ) -> Option<Result<()>> {
        let _ = (items, results, stop_on_error, rollback_on_error);
        None
    }

    /// Makes `table`, held by `engine`, visible to this engine's SQL (as a
    /// virtual table), so that [`Storage::sql_select`] can read and join it.
    /// Returns `false` when this engine has no SQL to expose it to.
    fn expose(&self, table: &'static Table, engine: Arc<dyn Storage>) -> Result<bool> {
        let _ = (table, engine);
        Ok(false)
    }

    /// Whether a [`Filter`] on field `field` of `table` compares the field's
    /// typed values (a date as a date, a boolean as true or false) rather than
    /// its stored form. Where dates or booleans are stored as text or integers,
    /// another writer may have left them in another layout (`2001-09-09
    /// 01:46:40`, `2`) that reads back as the same value but compares
    /// differently; the SQL virtual tables push filters on such fields down
    /// only when this is `true`. The default is `false`.
    fn filters_typed(&self, table: &'static Table, field: usize) -> bool {
        let _ = (table, field);
        false
    }

    /// Runs a read-only SQL statement and hands each result row to `out` as a row
    /// of `table`: result columns are matched to the ID and fields by name.
    /// Values in `params` are bound to the statement's `?` in order. Engines
    /// without SQL return [`Error::Unsupported`].
    fn sql_select(
        &self,
        table: &'static Table,
        sql: &str,
        params: &[Value],
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        let _ = (table, sql, params, out);
        Err(Error::Unsupported(format!(
            "the {} engine does not run SQL",
            self.engine_name()
        )))
    }

    /// Begins a transaction on the calling thread. A second begin on the same
    /// thread is [`Error::Transaction`], not a silent no-op.
    fn begin(&self) -> Result<()>;

    /// Commits the calling thread's transaction.
    fn commit(&self) -> Result<()>;

    /// Rolls back the calling thread's transaction.
    fn rollback(&self) -> Result<()>;

    /// Whether the calling thread has a transaction open on this engine.
    fn in_transaction(&self) -> bool;
}

/// Applies one batch item through the row-at-a-time calls of `engine`.
pub fn apply_one<S: Storage + ?Sized>(engine: &S, item: &BatchItem<'_>) -> Result<BatchResult> {
    Ok(match item.op {
        BatchOp::Add { id, row } => BatchResult::Added(engine.insert(item.table, id, row)?),
        BatchOp::Update { row, fields } => {
            if engine.update(item.table, row, fields)? {
                BatchResult::Done
            } else {
                BatchResult::Missing
            }
        }
        BatchOp::Delete { id } => {
            if engine.delete(item.table, id)? {
                BatchResult::Done
            } else {
                BatchResult::Missing
            }
        }
    })
}
