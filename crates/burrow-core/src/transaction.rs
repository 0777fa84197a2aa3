//! Transactions as values: a [`Transaction`] over every engine of a client,
//! and the batch runner that opens short ones per chunk.
//!
//! Several engines are always taken in one global order ([`engine_order`]),
//! so two units of work that each need the same two engines queue behind one
//! another instead of each holding one and waiting for the other.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::batch::BatchOptions;
use crate::database::Database;
use crate::error::{Error, Result};
use crate::orm::Orm;
use crate::schema::Table;
use crate::storage::{BatchItem, BatchResult, Caps, EngineTx, RowOps, SqlHost, Storage};

/// The key of the one order in which engines are taken: the address of the
/// shared engine, fixed for as long as anybody holds it.
pub fn engine_order(engine: &Arc<dyn Storage>) -> usize {
    Arc::as_ptr(engine) as *const () as usize
}

/// Whether `a` and `b` are the same engine (not merely equal ones).
pub fn same_engine(a: &dyn Storage, b: &dyn Storage) -> bool {
    std::ptr::addr_eq(a as *const dyn Storage, b as *const dyn Storage)
}

/// A process-wide unique, non-zero number for a transaction: what an engine
/// records as the owner of its write lock while that transaction is open.
pub fn next_tx_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The client a transaction routes through: borrowed, or shared so that the
/// transaction can outlive the borrow.
pub(crate) enum ClientRef<'a> {
    Borrowed(&'a Database),
    Shared(Arc<Database>),
}

impl Deref for ClientRef<'_> {
    type Target = Database;
    fn deref(&self) -> &Database {
        match self {
            ClientRef::Borrowed(c) => c,
            ClientRef::Shared(c) => c,
        }
    }
}

/// An open transaction on every engine of a [`Database`]'s model.
///
/// Reads and writes go through it (it implements [`Orm`]) and see its own
/// uncommitted writes; other callers see none of them until
/// [`Transaction::commit`], which consumes it. Dropped without a commit, it
/// rolls back. It can move to another thread, and it cannot begin a nested
/// transaction (it has no `transaction` method).
#[must_use = "a transaction rolls back when dropped; call commit()"]
pub struct Transaction<'a> {
    client: ClientRef<'a>,
    /// One per engine of the client, in the client's (global) order.
    txs: Vec<Box<dyn EngineTx>>,
    /// Set by [`Transaction::fail`]: nothing more goes through, and the end
    /// is a rollback.
    failed: AtomicBool,
}

impl<'a> Transaction<'a> {
    pub(crate) fn begin(client: ClientRef<'a>) -> Result<Transaction<'a>> {
        let mut txs = Vec::with_capacity(client.engines().len());
        for e in client.engines() {
            // On a failure, the engines begun so far roll back as `txs` drops.
            txs.push(e.clone().begin()?);
        }
        Ok(Transaction {
            client,
            txs,
            failed: AtomicBool::new(false),
        })
    }

    /// Commits on every engine, in order. A commit that fails rolls back the
    /// engines after it; the engines before it stay committed (engines do
    /// not share a two-phase commit).
    /// A transaction marked failed ([`Transaction::fail`]) rolls back
    /// instead, and says so.
    pub fn commit(self) -> Result<()> {
        if self.is_failed() {
            let _ = self.rollback();
            return Err(FAILED);
        }
        for tx in self.txs {
            tx.commit()?;
        }
        Ok(())
    }

    /// Rolls back on every engine, reporting the first failure.
    pub fn rollback(self) -> Result<()> {
        let mut first = Ok(());
        for tx in self.txs {
            if let Err(e) = tx.rollback() {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// The client this transaction runs on.
    pub fn client(&self) -> &Database {
        &self.client
    }

    /// Marks the transaction failed, for a unit of work that went wrong
    /// part-way through in a way its caller cannot undo alone (such as a
    /// batch body found malformed after some of its writes ran): every later
    /// call through it fails, and [`Transaction::commit`] rolls back and
    /// fails. Only dropping (or rolling back) ends it.
    pub fn fail(&self) {
        self.failed.store(true, Ordering::Relaxed);
    }

    /// Whether [`Transaction::fail`] was called.
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    fn usable(&self) -> Result<()> {
        if self.is_failed() {
            Err(FAILED)
        } else {
            Ok(())
        }
    }
}

/// What a call through a failed transaction gets.
const FAILED: Error = Error::Transaction(
    "the transaction failed part-way through a unit of work and is rolled back; end it",
);

impl Orm for Transaction<'_> {
    fn route(&self, table: &'static Table) -> Result<&dyn RowOps> {
        self.usable()?;
        let e = self.client.engine_index(table)?;
        Ok(&*self.txs[e] as &dyn RowOps)
    }

    fn sql_host(&self) -> Result<&dyn SqlHost> {
        self.usable()?;
        let e = self.client.sql_index()?;
        self.txs[e].sql_host().ok_or_else(|| self.client.no_sql(e))
    }

    fn sql_elsewhere(&self, table: &'static Table) -> Option<(&dyn RowOps, Caps)> {
        self.usable().ok()?;
        let (e, caps) = self.client.elsewhere(table)?;
        Some((&*self.txs[e] as &dyn RowOps, caps))
    }

    fn apply_items(
        &self,
        items: &[BatchItem<'_>],
        options: BatchOptions,
        stop_on_error: bool,
    ) -> Result<Vec<BatchResult>> {
        // Inside a transaction the caller's handle decides what is kept: a
        // failed item stops the batch (with rollback-on-error the caller
        // rolls back) and the results so far are the caller's to drop.
        self.usable()?;
        let stop = options.rollback_on_error || stop_on_error;
        let mut results = Vec::with_capacity(items.len());
        let mut run = 0;
        while run < items.len() {
            let e = self.client.engine_index(items[run].table)?;
            let mut end = run + 1;
            while end < items.len() && self.client.engine_index(items[end].table)? == e {
                end += 1;
            }
            self.txs[e]
                .apply_batch(&items[run..end], &mut results, stop)
                .map_err(|err| shift(err, run))?;
            run = end;
        }
        Ok(results)
    }
}

/// An item error's index, from a run's start to the batch's.
fn shift(err: Error, by: usize) -> Error {
    match err {
        Error::Batch { index, source } => Error::Batch {
            index: index + by,
            source,
        },
        other => other,
    }
}

/// Consecutive batch items in one engine: those from the end of the run
/// before (or the first) up to `end`, exclusive, run on `engines[engine]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// The engine's index in the engines the batch runs on.
    pub engine: usize,
    /// The index of the first item past the run.
    pub end: usize,
}

/// Runs batch items on their engines (`runs` cover `items` in order, each
/// naming an index of `engines`, which are in the global order) with the
/// commit rules of [`BatchOptions`], outside any transaction of the
/// caller's: chunks of `auto_transaction_rows` items (the whole batch with
/// `rollback_on_error`) each run in a transaction of every engine they
/// involve, taken in order. `stop_on_error` stops at the first failed item
/// and keeps what ran before it; with `rollback_on_error` the batch is undone
/// instead. A failure of an engine itself rolls back the chunk in progress.
pub fn run_batch(
    engines: &[Arc<dyn Storage>],
    items: &[BatchItem<'_>],
    runs: &[Run],
    opts: BatchOptions,
    stop_on_error: bool,
) -> Result<Vec<BatchResult>> {
    // Runs that leave items out would skip them without a word.
    let mut covered = 0;
    for r in runs {
        if r.end <= covered || r.engine >= engines.len() {
            return Err(Error::BadInput(format!(
                "batch runs must end in increasing order on one of {} engines: {r:?} after item {covered}",
                engines.len()
            )));
        }
        covered = r.end;
    }
    if covered != items.len() {
        return Err(Error::BadInput(format!(
            "batch runs cover {covered} items of {}",
            items.len()
        )));
    }
    let stop = opts.rollback_on_error || stop_on_error;
    let use_tx = opts.rollback_on_error || opts.auto_transaction_rows > 0;
    let chunk = if opts.rollback_on_error || opts.auto_transaction_rows == 0 {
        items.len().max(1)
    } else {
        opts.auto_transaction_rows
    };
    let mut results = Vec::with_capacity(items.len());
    let mut start = 0;
    // The first run that ends after `start`.
    let mut first_run = 0;
    // Each chunk's runs, cut to it, and its engines: kept across chunks, as
    // a batch of one-item chunks would otherwise allocate both per item.
    let mut pieces: Vec<(usize, usize, usize)> = Vec::new();
    let mut involved: Vec<usize> = Vec::new();
    while start < items.len() {
        let end = (start + chunk).min(items.len());
        while runs.get(first_run).is_some_and(|r| r.end <= start) {
            first_run += 1;
        }
        // The runs of this chunk, each cut to it, with where each starts.
        pieces.clear();
        let mut from = start;
        for r in &runs[first_run..] {
            if from >= end {
                break;
            }
            let to = r.end.min(end);
            pieces.push((r.engine, from, to));
            from = to;
        }
        // The engines of this chunk, in the global order.
        involved.clear();
        involved.extend(pieces.iter().map(|p| p.0));
        involved.sort_unstable();
        involved.dedup();
        if use_tx && involved.len() == 1 {
            let one = engines[involved[0]].apply_batch_in_transaction(
                &items[start..end],
                &mut results,
                stop,
                opts.rollback_on_error,
            );
            if let Some(outcome) = one {
                outcome.map_err(|err| shift(err, start))?;
                start = end;
                continue;
            }
        }
        let mut txs: Vec<(usize, Box<dyn EngineTx>)> = Vec::new();
        if use_tx {
            for &e in &involved {
                // On a failure, the ones begun roll back as `txs` drops.
                txs.push((e, engines[e].clone().begin()?));
            }
        }
        let mut outcome = Ok(());
        let mut item_failed = false;
        for &(e, run, run_end) in &pieces {
            let rows: &dyn RowOps = match txs.iter().find(|(x, _)| *x == e) {
                Some((_, tx)) => &**tx,
                None => &*engines[e],
            };
            outcome = rows
                .apply_batch(&items[run..run_end], &mut results, stop)
                .map_err(|err| {
                    item_failed = matches!(err, Error::Batch { .. });
                    shift(err, run)
                });
            if outcome.is_err() {
                break;
            }
        }
        // Keep what ran only when an item stopped a stop-on-error batch.
        let keep = outcome.is_ok() || (item_failed && !opts.rollback_on_error);
        if keep {
            for (_, tx) in txs {
                tx.commit()?;
            }
        }
        // Otherwise the transactions roll back as they drop.
        outcome?;
        start = end;
    }
    Ok(results)
}

#[cfg(test)]
mod test {
    use super::{run_batch, Run};
    use crate::batch::BatchOptions;
    use crate::error::Error;
    use crate::schema::{Field, FieldKind, Table};
    use crate::storage::{BatchItem, BatchOp};

    static NOTE: Table = Table {
        name: "Note",
        fields: &[Field::new("Title", FieldKind::Text)],
    };

    /// Runs that leave items out, overlap, or name no engine are refused
    /// before any item runs: nothing is skipped without a word.
    #[test]
    fn runs_that_do_not_cover_the_items_exactly_are_refused() {
        let items: Vec<BatchItem<'_>> = (1..=3)
            .map(|id| BatchItem {
                table: &NOTE,
                op: BatchOp::Delete { id },
            })
            .collect();
        let bad: [&[Run]; 5] = [
            &[],
            &[Run { engine: 0, end: 2 }],
            &[
                Run { engine: 0, end: 2 },
                Run { engine: 0, end: 2 },
                Run { engine: 0, end: 3 },
            ],
            &[Run { engine: 0, end: 4 }],
            &[Run { engine: 0, end: 3 }],
        ];
        for runs in bad {
            // No engines at all: the last one names engine 0 of none.
            match run_batch(&[], &items, runs, BatchOptions::default(), false) {
                Err(Error::BadInput(_)) => {}
                other => panic!("{runs:?} accepted: {other:?}"),
            }
        }
        // No items and no runs: nothing to do.
        let none = run_batch(&[], &[], &[], BatchOptions::default(), false).expect("empty batch");
        assert!(none.is_empty());
    }
}
