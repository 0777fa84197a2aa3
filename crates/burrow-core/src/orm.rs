//! The `Orm` trait: the application's whole surface, in-process or remote.

use std::marker::PhantomData;
use std::ops::Deref;

use crate::batch::{field_subset, Batch};
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::query::{Query, Select};
use crate::record::Record;
use crate::schema::Table;
use crate::storage::{BatchResult, Storage};
use crate::value::Value;

/// Typed reads and writes of records, transactions and batches.
///
/// Implementors supply routing ([`Orm::route`], [`Orm::engines`]); every other
/// method is provided on top of the [`Storage`] trait, so the in-process client
/// and a remote client behave the same way.
pub trait Orm: Send + Sync {
    /// The engine that holds `table`, or [`Error::UnknownTable`].
    fn route(&self, table: &'static Table) -> Result<&dyn Storage>;

    /// Calls `f` once for every distinct engine of the model, in a fixed order.
    fn engines(&self, f: &mut dyn FnMut(&dyn Storage) -> Result<()>) -> Result<()>;

    /// The engine that runs SQL for the model, where tables of other engines are
    /// visible as virtual tables; [`Error::Unsupported`] if there is none.
    fn sql_engine(&self) -> Result<&dyn Storage> {
        Err(Error::Unsupported("this ORM has no SQL engine".into()))
    }

    /// The `T`s a read-only SQL statement returns (its columns matched to `T`'s
    /// ID and fields by name), with `params` bound to its `?` in order. The SQL
    /// runs on [`Orm::sql_engine`], so it may join tables of every engine.
    fn sql_list<T: Record>(&self, sql: &str, params: &[Value]) -> Result<Vec<T>> {
        let mut out = Vec::new();
        self.sql_engine()?
            .sql_select(T::table(), sql, params, &mut |row| {
                out.push(T::from_row(row)?);
                Ok(())
            })?;
        Ok(out)
    }

    /// Adds `rec` with a new ID, which is set in `rec` and returned. The
    /// creation and modification times, if the record has them, are filled.
    fn add<T: Record>(&self, rec: &mut T) -> Result<i64> {
        insert(self, rec, None)
    }

    /// Adds `rec` with the given ID (a [`crate::ErrorKind::UniqueViolation`] if taken).
    fn add_with_id<T: Record>(&self, rec: &mut T, id: i64) -> Result<i64> {
        insert(self, rec, Some(id))
    }

    /// The `T` with this ID, or [`Error::NotFound`].
    fn retrieve<T: Record>(&self, id: i64) -> Result<T> {
        self.get(id)?.ok_or_else(|| Error::NotFound {
            table: T::table().name,
            id,
        })
    }

    /// The `T` with this ID, if any.
    fn get<T: Record>(&self, id: i64) -> Result<Option<T>> {
        let mut found = None;
        self.route(T::table())?
            .retrieve(T::table(), id, &mut |row| {
                found = Some(T::from_row(row)?);
                Ok(())
            })?;
        Ok(found)
    }

    /// Reads the `T` with this ID into `rec`, reusing its buffers; returns whether
    /// it exists (`rec` is unchanged when it does not).
    fn retrieve_into<T: Record>(&self, id: i64, rec: &mut T) -> Result<bool> {
        self.route(T::table())?
            .retrieve(T::table(), id, &mut |row| rec.read_row(row))
    }

    /// The first `T` matching `where_text` (with `?` bound to `params`), if any.
    fn retrieve_where<T: Record>(&self, where_text: &str, params: &[Value]) -> Result<Option<T>> {
        let mut select = Select::filtered(Filter::parse(T::table(), where_text, params)?);
        select.limit = Some(1);
        let mut found = None;
        self.route(T::table())?
            .select(T::table(), &select, &mut |row| {
                found = Some(T::from_row(row)?);
                Ok(())
            })?;
        Ok(found)
    }

    /// Writes every field of `rec` to the record with its ID (refreshing its
    /// modification time); [`Error::NotFound`] if there is none.
    fn update<T: Record>(&self, rec: &mut T) -> Result<()> {
        rec.stamp(crate::datetime::now(), false);
        found(self.route(T::table())?.update(T::table(), rec, None)?, rec)
    }

    /// Adds `rec` under its ID when no `T` has that ID, else writes every field
    /// over the stored record, as [`Orm::update`] does: the stored creation time
    /// is kept (and read back into `rec`), the modification time refreshed. A
    /// record with ID 0 is added with a new ID. Returns whether it was added.
    ///
    /// It is an update and, when no row had the ID, an insert with it; should
    /// another writer add the same ID in between, the insert's unique
    /// violation turns into an update, not an error. (A database's own upsert,
    /// PostgreSQL's `INSERT … ON CONFLICT` say, guards only the conflict it
    /// names: concurrent upserts of a row that also has a unique field
    /// deadlock or fail on that field's index.)
    fn add_or_update<T: Record>(&self, rec: &mut T) -> Result<bool> {
        if rec.id() == 0 {
            self.add(rec)?;
            return Ok(true);
        }
        let table = T::table();
        rec.stamp(crate::datetime::now(), true);
        // Every field but the creation times is written over a stored record.
        let created = |i: &usize| table.fields[*i].auto == crate::schema::AutoTime::Created;
        let all = 0..table.fields.len();
        let written: Option<Vec<usize>> = all
            .clone()
            .any(|i| created(&i))
            .then(|| all.clone().filter(|i| !created(i)).collect());
        let engine = self.route(table)?;
        let added = upsert(engine, table, rec, written.as_deref())?;
        if !added && written.is_some() {
            let id = rec.id();
            engine.retrieve(table, id, &mut |row| {
                all.clone()
                    .filter(created)
                    .try_for_each(|c| rec.set_field(c, row.get(c)?))
            })?;
        }
        Ok(added)
    }

    /// Writes only the named fields of `rec` (and its modification time);
    /// unknown names are refused before anything is written.
    fn update_fields<T: Record>(&self, rec: &mut T, fields: &[&str]) -> Result<()> {
        let idx = field_subset(T::table(), fields)?;
        rec.stamp(crate::datetime::now(), false);
        found(
            self.route(T::table())?
                .update(T::table(), rec, Some(&idx))?,
            rec,
        )
    }

    /// Deletes the `T` with this ID; returns whether it existed.
    fn delete<T: Record>(&self, id: i64) -> Result<bool> {
        self.route(T::table())?.delete(T::table(), id)
    }

    /// Deletes every `T` matching `where_text`; returns how many.
    fn delete_where<T: Record>(&self, where_text: &str, params: &[Value]) -> Result<u64> {
        let filter = Filter::parse(T::table(), where_text, params)?;
        if filter.expr.is_none() {
            return Err(Error::BadInput(
                "delete_where needs a WHERE clause; an empty one would delete every row".into(),
            ));
        }
        self.route(T::table())?.delete_where(T::table(), &filter)
    }

    /// Every `T` matching `where_text` (empty: all), in ID order only if asked.
    fn list<T: Record>(&self, where_text: &str, params: &[Value]) -> Result<Vec<T>> {
        self.select(&Query::filter(where_text, params.to_vec()))
    }

    /// The `T`s a [`Query`] selects, with its order, limit and offset.
    fn select<T: Record>(&self, query: &Query) -> Result<Vec<T>> {
        let select = query.resolve(T::table())?;
        let mut out = Vec::new();
        self.route(T::table())?
            .select(T::table(), &select, &mut |row| {
                out.push(T::from_row(row)?);
                Ok(())
            })?;
        Ok(out)
    }

    /// Streams the selected `T`s through `f`, reading every row into one record
    /// whose text and blob buffers are reused.
    fn for_each<T: Record>(
        &self,
        query: &Query,
        f: &mut dyn FnMut(&T) -> Result<()>,
    ) -> Result<()> {
        let select = query.resolve(T::table())?;
        let mut rec: Option<T> = None;
        self.route(T::table())?
            .select(T::table(), &select, &mut |row| {
                match rec.as_mut() {
                    Some(r) => r.read_row(row)?,
                    None => rec = Some(T::from_row(row)?),
                }
                f(rec.as_ref().expect("just read"))
            })
    }

    /// How many `T`s match `where_text` (empty: all).
    fn count<T: Record>(&self, where_text: &str, params: &[Value]) -> Result<u64> {
        let filter = Filter::parse(T::table(), where_text, params)?;
        self.route(T::table())?.count(T::table(), &filter)
    }

    /// The value of `field` in the first `T` matching `where_text`, if any.
    fn one_field_value<T: Record>(
        &self,
        field: &str,
        where_text: &str,
        params: &[Value],
    ) -> Result<Option<Value>> {
        let table = T::table();
        let column = table.column(field).ok_or_else(|| Error::UnknownField {
            table: table.name,
            field: field.to_owned(),
        })?;
        let mut select = Select::filtered(Filter::parse(table, where_text, params)?);
        select.limit = Some(1);
        self.route(table)?.select_value(table, column, &select)
    }

    /// Sends every item of `batch` and empties it; returns one result per item,
    /// in order. See [`crate::BatchOptions`] for how it is committed.
    fn send(&self, batch: &mut Batch) -> Result<Vec<BatchResult>> {
        batch.stamp(crate::datetime::now());
        let results = run_batch(self, batch);
        batch.clear();
        results
    }

    /// Begins a transaction on every engine of the model, for the calling thread;
    /// it rolls back unless committed. A second begin while one is open on this
    /// thread is [`Error::Transaction`].
    fn transaction(&self) -> Result<Transaction<'_, Self>>
    where
        Self: Sized,
    {
        let mut begun = 0usize;
        let r = self.engines(&mut |e| {
            e.begin()?;
            begun += 1;
            Ok(())
        });
        if let Err(e) = r {
            // Undo only the engines this call began: on a nested begin, the
            // outer transaction must survive.
            let mut left = begun;
            let _ = self.engines(&mut |s| {
                if left > 0 {
                    left -= 1;
                    s.rollback()?;
                }
                Ok(())
            });
            return Err(e);
        }
        Ok(Transaction {
            orm: self,
            done: false,
            _thread_bound: PhantomData,
        })
    }

    /// Runs `f` in a transaction: committed when it returns `Ok`, rolled back
    /// when it returns an error or panics.
    fn in_transaction<R>(&self, f: impl FnOnce(&Self) -> Result<R>) -> Result<R>
    where
        Self: Sized,
    {
        let tx = self.transaction()?;
        let r = f(self)?;
        tx.commit()?;
        Ok(r)
    }
}

fn insert<O: Orm + ?Sized, T: Record>(orm: &O, rec: &mut T, id: Option<i64>) -> Result<i64> {
    rec.stamp(crate::datetime::now(), true);
    let new_id = orm.route(T::table())?.insert(T::table(), id, rec)?;
    rec.set_id(new_id);
    Ok(new_id)
}

fn found<T: Record>(yes: bool, rec: &T) -> Result<()> {
    if yes {
        Ok(())
    } else {
        Err(Error::NotFound {
            table: T::table().name,
            id: rec.id(),
        })
    }
}

/// Writes `row` under its ID: an update of `fields` (`None`: all), else an
/// insert with the ID; returns whether it inserted. Should another writer
/// insert the same ID in between, the insert fails as a unique violation and
/// the update is tried again; a unique violation on another column is
/// returned as it is.
fn upsert(
    engine: &dyn Storage,
    table: &'static Table,
    row: &dyn crate::record::Fields,
    fields: Option<&[usize]>,
) -> Result<bool> {
    if engine.update(table, row, fields)? {
        return Ok(false);
    }
    match engine.insert(table, Some(row.id()), row) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == crate::ErrorKind::UniqueViolation => {
            if engine.update(table, row, fields)? {
                Ok(false)
            } else {
                Err(e)
            }
        }
        Err(e) => Err(e),
    }
}

/// Whether `a` and `b` are the same engine (not merely equal ones).
pub fn same_engine(a: &dyn Storage, b: &dyn Storage) -> bool {
    std::ptr::addr_eq(a as *const dyn Storage, b as *const dyn Storage)
}

fn run_batch<O: Orm + ?Sized>(orm: &O, batch: &Batch) -> Result<Vec<BatchResult>> {
    let items = batch.items();
    let mut engines: Vec<&dyn Storage> = Vec::with_capacity(items.len());
    for item in &items {
        engines.push(orm.route(item.table)?);
    }
    let in_tx = engines.iter().any(|e| e.in_transaction());
    apply_batch_items(&items, &engines, batch.options, false, in_tx)
}

/// Runs batch items on their engines (`engines[i]` holds `items[i]`'s table)
/// with the commit rules of [`crate::BatchOptions`]: the ORM's [`Orm::send`]
/// and servers that receive batches share it.
///
/// Without an open transaction (`in_tx` false), chunks of
/// `auto_transaction_rows` items (the whole batch with `rollback_on_error`)
/// each run in a transaction on every engine they involve. `stop_on_error`
/// stops at the first failed item and keeps what ran before it; with
/// `rollback_on_error` the batch is undone instead. A failure of an engine
/// itself rolls back the chunk in progress.
pub fn apply_batch_items(
    items: &[crate::storage::BatchItem<'_>],
    engines: &[&dyn Storage],
    opts: crate::batch::BatchOptions,
    stop_on_error: bool,
    in_tx: bool,
) -> Result<Vec<BatchResult>> {
    let stop = opts.rollback_on_error || stop_on_error;
    let use_tx = !in_tx && (opts.rollback_on_error || opts.auto_transaction_rows > 0);
    let chunk = if opts.rollback_on_error || opts.auto_transaction_rows == 0 {
        items.len().max(1)
    } else {
        opts.auto_transaction_rows
    };
    let mut results = Vec::with_capacity(items.len());
    let mut start = 0;
    while start < items.len() {
        let end = (start + chunk).min(items.len());
        let mut involved: Vec<&dyn Storage> = Vec::new();
        for &e in &engines[start..end] {
            if !involved.iter().any(|&x| same_engine(x, e)) {
                involved.push(e);
            }
        }
        if use_tx && involved.len() == 1 {
            let one = involved[0].apply_batch_in_transaction(
                &items[start..end],
                &mut results,
                stop,
                opts.rollback_on_error,
            );
            if let Some(outcome) = one {
                outcome.map_err(|err| match err {
                    Error::Batch { index, source } => Error::Batch {
                        index: index + start,
                        source,
                    },
                    other => other,
                })?;
                start = end;
                continue;
            }
        }
        if use_tx {
            for (i, e) in involved.iter().enumerate() {
                if let Err(err) = e.begin() {
                    for x in &involved[..i] {
                        let _ = x.rollback();
                    }
                    return Err(err);
                }
            }
        }
        let mut run = start;
        let mut outcome = Ok(());
        let mut item_failed = false;
        while run < end {
            let e = engines[run];
            let mut run_end = run + 1;
            while run_end < end && same_engine(engines[run_end], e) {
                run_end += 1;
            }
            outcome = e
                .apply_batch(&items[run..run_end], &mut results, stop)
                .map_err(|err| match err {
                    Error::Batch { index, source } => {
                        item_failed = true;
                        Error::Batch {
                            index: index + run,
                            source,
                        }
                    }
                    other => other,
                });
            if outcome.is_err() {
                break;
            }
            run = run_end;
        }
        if use_tx {
            // Keep what ran only when an item stopped a stop-on-error batch.
            let keep = outcome.is_ok() || (item_failed && !opts.rollback_on_error);
            if keep {
                for e in &involved {
                    e.commit()?;
                }
            } else {
                for e in &involved {
                    let _ = e.rollback();
                }
            }
        }
        outcome?;
        start = end;
    }
    Ok(results)
}

/// An open transaction on every engine of a model, for the thread that began it.
///
/// Calls made through the ORM on this thread run inside it; it dereferences to the
/// ORM for convenience. Dropping it without [`Transaction::commit`] rolls back.
/// It cannot move to another thread: engines tie a transaction to its thread.
#[must_use = "a transaction rolls back when dropped; call commit()"]
pub struct Transaction<'a, O: Orm> {
    orm: &'a O,
    done: bool,
    _thread_bound: PhantomData<*const ()>,
}

impl<O: Orm> Transaction<'_, O> {
    /// Commits on every engine.
    pub fn commit(mut self) -> Result<()> {
        self.done = true;
        let mut first_err = None;
        self.orm.engines(&mut |e| {
            if first_err.is_none() {
                if let Err(err) = e.commit() {
                    first_err = Some(err);
                }
            } else if e.in_transaction() {
                let _ = e.rollback();
            }
            Ok(())
        })?;
        first_err.map_or(Ok(()), Err)
    }

    /// Rolls back on every engine.
    pub fn rollback(mut self) -> Result<()> {
        self.done = true;
        roll_back_all(self.orm)
    }
}

fn roll_back_all<O: Orm>(orm: &O) -> Result<()> {
    let mut first_err = None;
    orm.engines(&mut |e| {
        if e.in_transaction() {
            if let Err(err) = e.rollback() {
                first_err.get_or_insert(err);
            }
        }
        Ok(())
    })?;
    first_err.map_or(Ok(()), Err)
}

impl<O: Orm> Deref for Transaction<'_, O> {
    type Target = O;
    fn deref(&self) -> &O {
        self.orm
    }
}

impl<O: Orm> Drop for Transaction<'_, O> {
    fn drop(&mut self) {
        if !self.done {
            let _ = roll_back_all(self.orm);
        }
    }
}
