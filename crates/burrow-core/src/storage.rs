//! The engine traits: [`RowOps`] (the row calls), [`Storage`] (an engine),
//! [`EngineTx`] (one engine's open transaction) and [`SqlHost`] (an engine
//! that runs SQL).

use std::sync::Arc;
use std::time::Duration;

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

/// Where an engine's calls spend their time: what a server needs to know to
/// decide whether a call may run on its event loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Placement {
    /// In this process: a call takes microseconds unless it waits for another
    /// transaction's lock.
    InProcess,
    /// Across a network: every call waits for a round trip.
    Network,
}

/// What an engine is and can do, declared once by the engine.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Caps {
    /// A short name for messages (`sqlite`, `memory`, `postgres`, …).
    pub name: &'static str,
    /// Where its calls spend their time.
    pub placement: Placement,
    /// Whether it sorts rows as SQLite does (numbers as numbers, text by
    /// its bytes, NULLs first): then a one-table SQL statement that sorts
    /// its table may be answered by the engine itself instead of through a
    /// SQL host's virtual table (see [`crate::Orm::sql_list`]). Engines with
    /// other collations or NULL orders (PostgreSQL, MariaDB) leave it off.
    pub sqlite_order: bool,
}

impl Caps {
    /// An engine answering in this process.
    pub const fn in_process(name: &'static str) -> Caps {
        Caps {
            name,
            placement: Placement::InProcess,
            sqlite_order: false,
        }
    }

    /// An engine behind a network connection.
    pub const fn network(name: &'static str) -> Caps {
        Caps {
            name,
            placement: Placement::Network,
            sqlite_order: false,
        }
    }

    /// The same, sorting as SQLite does (see [`Caps::sqlite_order`]).
    pub const fn with_sqlite_order(self) -> Caps {
        Caps {
            sqlite_order: true,
            ..self
        }
    }
}

/// The callback of [`RowOps::retrieve_many`]: a position in the IDs asked
/// for, and that ID's row (`None` when there is none).
pub type EachRow<'f> = dyn FnMut(usize, Option<&dyn Row>) -> Result<()> + 'f;

/// The callback of [`RowOps::select_many`]: a position in the selects, and
/// one of that select's rows.
pub type EachSelected<'f> = dyn FnMut(usize, &dyn Row) -> Result<()> + 'f;

/// The row calls of a unit of work: an engine's own (each call its own
/// transaction) or those of an open [`EngineTx`].
///
/// Reads hand each row to a callback, so an engine can lend its own buffers
/// instead of copying rows out; a callback must not call back into the same
/// engine.
pub trait RowOps {
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

    /// Reads the rows with these IDs, each by its own read, handing `out`
    /// the position in `ids` and the row (`None` where no row has that ID),
    /// in the order of `ids`. An engine across a network sends the reads
    /// together (PostgreSQL pipelines one prepared query per ID, each with
    /// its own Sync, in one round trip); the default reads one after the
    /// other through [`RowOps::retrieve`].
    fn retrieve_many(
        &self,
        table: &'static Table,
        ids: &[i64],
        out: &mut EachRow<'_>,
    ) -> Result<()> {
        for (i, &id) in ids.iter().enumerate() {
            if !self.retrieve(table, id, &mut |row| out(i, Some(row)))? {
                out(i, None)?;
            }
        }
        Ok(())
    }

    /// Hands every selected row to `out`, in the requested order.
    fn select(
        &self,
        table: &'static Table,
        select: &Select,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()>;

    /// Runs each select as its own query, handing `out` the select's
    /// position and each of its rows, the selects in order. An engine across
    /// a network sends them together (PostgreSQL pipelines them, each with
    /// its own Sync, holding a few selects' rows at a time until they are
    /// handed out); the default runs them one after the other.
    fn select_many(
        &self,
        table: &'static Table,
        selects: &[Select],
        out: &mut EachSelected<'_>,
    ) -> Result<()> {
        for (i, select) in selects.iter().enumerate() {
            self.select(table, select, &mut |row| out(i, row))?;
        }
        Ok(())
    }

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
        apply_each(items, results, stop_on_error, |_, item| {
            apply_one(self, item)
        })
    }
}

/// A storage engine: holds tables and answers reads and writes on their rows.
///
/// Engines are shared between threads (`&self` everywhere). A call made on the
/// engine itself is its own transaction. [`Storage::begin`] hands out an
/// [`EngineTx`], a value through which the calls of one unit of work go: it
/// commits when consumed by [`EngineTx::commit`] and rolls back when dropped.
/// While a transaction is open, an engine that serialises writers makes other
/// callers wait for it, never longer than its lock timeout ([`Error::Busy`]).
pub trait Storage: RowOps + Send + Sync {
    /// What the engine is and where its calls spend their time.
    fn caps(&self) -> Caps;

    /// Creates the table and its indexes, or brings an existing one up to the
    /// declared fields (adding missing columns; refusing a conflicting type).
    fn ensure_table(&self, table: &'static Table) -> Result<()>;

    /// Begins a transaction. It takes the engine's `Arc` so that the handle
    /// owns what it needs and can outlive the caller's borrow (a server keeps
    /// it between two requests of one connection).
    fn begin(self: Arc<Self>) -> Result<Box<dyn EngineTx>>;

    /// Runs `items` as [`RowOps::apply_batch`] does, inside one transaction
    /// of the engine's own that begins and ends within this one call, when the
    /// engine can do that more cheaply than [`Storage::begin`] and
    /// [`EngineTx::commit`] (a remote server applies a batch under its own
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

    /// The engine's SQL, if it runs SQL.
    fn sql_host(&self) -> Option<&dyn SqlHost> {
        None
    }

    /// The engine's online backup, if it can copy its data to a file while
    /// it serves (a server offers it to administrators).
    fn online_backup(&self) -> Option<&dyn OnlineBackup> {
        None
    }
}

/// An engine that writes one committed state of its data to a file while
/// other callers go on using it.
pub trait OnlineBackup {
    /// Writes the backup to `path` (it appears whole or not at all), inside a
    /// gzip stream with `gzip`, calling `progress(done, total)` as it goes
    /// (in the engine's own units, such as pages), and returns the file's
    /// size in bytes. A path that cannot be written is an error naming it.
    fn backup_to(
        &self,
        path: &std::path::Path,
        gzip: bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<u64>;
}

/// One engine's open transaction: the calls of a unit of work go through it.
///
/// [`EngineTx::commit`] consumes it; dropping it without a commit rolls the
/// work back (implementations do that in their `Drop`).
pub trait EngineTx: RowOps + Send {
    /// Commits. A failed commit leaves nothing of the transaction behind.
    fn commit(self: Box<Self>) -> Result<()>;

    /// Rolls back, reporting a failure to do so (dropping rolls back silently).
    fn rollback(self: Box<Self>) -> Result<()>;

    /// The engine's SQL inside this transaction, if the engine runs SQL.
    fn sql_host(&self) -> Option<&dyn SqlHost> {
        None
    }
}

/// An engine that runs SQL, over its own tables and the tables of other
/// engines it has been shown.
pub trait SqlHost {
    /// Runs a read-only SQL statement and hands each result row to `out` as a
    /// row of `table`: result columns are matched to the ID and fields by
    /// name. Values in `params` are bound to the statement's `?` in order.
    fn sql_select(
        &self,
        table: &'static Table,
        sql: &str,
        params: &[Value],
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()>;

    /// Makes `table`, held by `engine`, visible to this SQL (as a virtual
    /// table), so that [`SqlHost::sql_select`] can read and join it.
    fn expose(&self, table: &'static Table, engine: Arc<dyn Storage>) -> Result<()> {
        let _ = (table, engine);
        Err(Error::Unsupported(
            "tables of other engines are shown to an engine's SQL, not to a transaction's".into(),
        ))
    }
}

/// Applies one batch item through the row calls of `rows`.
pub fn apply_one<R: RowOps + ?Sized>(rows: &R, item: &BatchItem<'_>) -> Result<BatchResult> {
    Ok(match item.op {
        BatchOp::Add { id, row } => BatchResult::Added(rows.insert(item.table, id, row)?),
        BatchOp::Update { row, fields } => {
            if rows.update(item.table, row, fields)? {
                BatchResult::Done
            } else {
                BatchResult::Missing
            }
        }
        BatchOp::Delete { id } => {
            if rows.delete(item.table, id)? {
                BatchResult::Done
            } else {
                BatchResult::Missing
            }
        }
    })
}

/// Applies `items` one by one with `one` (given each item's index), by the
/// rules of [`RowOps::apply_batch`]: engines whose bulk path falls back to
/// single rows share it.
pub fn apply_each(
    items: &[BatchItem<'_>],
    results: &mut Vec<BatchResult>,
    stop_on_error: bool,
    mut one: impl FnMut(usize, &BatchItem<'_>) -> Result<BatchResult>,
) -> Result<()> {
    for (index, item) in items.iter().enumerate() {
        match one(index, item) {
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

/// How long an engine lets a caller wait for another transaction before
/// answering [`Error::Busy`], unless its options say otherwise.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// Implements [`RowOps`] for `$ty` by handing every call to `$target`, a value
/// that implements [`RowOps`] and is made from `$s` (the receiver). Engines
/// write their row calls once, on a private view that knows which
/// transaction a call runs in, and forward both the engine's own calls and
/// its transaction handle's to it:
///
/// ```ignore
/// burrow_core::forward_row_ops!(MyEngine, |e| View { engine: e, tx: None });
/// burrow_core::forward_row_ops!(MyTx, |t| View { engine: &t.engine, tx: Some(t.token) });
/// ```
#[macro_export]
macro_rules! forward_row_ops {
    ($ty:ty, |$s:ident| $target:expr) => {
        impl $crate::RowOps for $ty {
            #[inline]
            fn insert(
                &self,
                table: &'static $crate::Table,
                id: ::std::option::Option<i64>,
                row: &dyn $crate::Fields,
            ) -> $crate::Result<i64> {
                let $s = self;
                $crate::RowOps::insert(&$target, table, id, row)
            }

            #[inline]
            fn update(
                &self,
                table: &'static $crate::Table,
                row: &dyn $crate::Fields,
                fields: ::std::option::Option<&[usize]>,
            ) -> $crate::Result<bool> {
                let $s = self;
                $crate::RowOps::update(&$target, table, row, fields)
            }

            #[inline]
            fn delete(&self, table: &'static $crate::Table, id: i64) -> $crate::Result<bool> {
                let $s = self;
                $crate::RowOps::delete(&$target, table, id)
            }

            #[inline]
            fn delete_where(
                &self,
                table: &'static $crate::Table,
                filter: &$crate::Filter,
            ) -> $crate::Result<u64> {
                let $s = self;
                $crate::RowOps::delete_where(&$target, table, filter)
            }

            #[inline]
            fn retrieve(
                &self,
                table: &'static $crate::Table,
                id: i64,
                out: &mut dyn FnMut(&dyn $crate::Row) -> $crate::Result<()>,
            ) -> $crate::Result<bool> {
                let $s = self;
                $crate::RowOps::retrieve(&$target, table, id, out)
            }

            #[inline]
            fn retrieve_many(
                &self,
                table: &'static $crate::Table,
                ids: &[i64],
                out: &mut $crate::EachRow<'_>,
            ) -> $crate::Result<()> {
                let $s = self;
                $crate::RowOps::retrieve_many(&$target, table, ids, out)
            }

            #[inline]
            fn select(
                &self,
                table: &'static $crate::Table,
                select: &$crate::Select,
                out: &mut dyn FnMut(&dyn $crate::Row) -> $crate::Result<()>,
            ) -> $crate::Result<()> {
                let $s = self;
                $crate::RowOps::select(&$target, table, select, out)
            }

            #[inline]
            fn select_many(
                &self,
                table: &'static $crate::Table,
                selects: &[$crate::Select],
                out: &mut $crate::EachSelected<'_>,
            ) -> $crate::Result<()> {
                let $s = self;
                $crate::RowOps::select_many(&$target, table, selects, out)
            }

            #[inline]
            fn count(
                &self,
                table: &'static $crate::Table,
                filter: &$crate::Filter,
            ) -> $crate::Result<u64> {
                let $s = self;
                $crate::RowOps::count(&$target, table, filter)
            }

            #[inline]
            fn select_value(
                &self,
                table: &'static $crate::Table,
                column: $crate::Column,
                select: &$crate::Select,
            ) -> $crate::Result<::std::option::Option<$crate::Value>> {
                let $s = self;
                $crate::RowOps::select_value(&$target, table, column, select)
            }

            #[inline]
            fn apply_batch(
                &self,
                items: &[$crate::BatchItem<'_>],
                results: &mut ::std::vec::Vec<$crate::BatchResult>,
                stop_on_error: bool,
            ) -> $crate::Result<()> {
                let $s = self;
                $crate::RowOps::apply_batch(&$target, items, results, stop_on_error)
            }
        }
    };
}
