//! The `Orm` trait: the application's whole surface, in-process or remote.

use crate::batch::{field_subset, Batch, BatchOptions};
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::query::{Query, Select};
use crate::record::Record;
use crate::schema::Table;
use crate::storage::{BatchItem, BatchResult, RowOps, SqlHost};
use crate::value::{Params, Value};

/// Typed reads and writes of records, and batches: what the in-process
/// [`crate::Database`] and an open [`crate::Transaction`] both answer.
///
/// Implementors supply routing ([`Orm::route`], [`Orm::sql_host`]) and how a
/// batch is committed ([`Orm::apply_items`]); every other method is provided
/// on top of [`RowOps`], so every engine, and a transaction, behave alike.
pub trait Orm {
    /// The row calls for `table`: its engine's, or its engine's open
    /// transaction's; [`Error::UnknownTable`] if the model lacks it.
    fn route(&self, table: &'static Table) -> Result<&dyn RowOps>;

    /// The SQL that sees every table of the model (other engines' tables as
    /// virtual tables); [`Error::Unsupported`] if there is none.
    fn sql_host(&self) -> Result<&dyn SqlHost>;

    /// Applies batch items with the commit rules of `options` (see
    /// [`BatchOptions`]): a client wraps chunks in transactions of their
    /// engines, a transaction runs them inside itself. With `stop_on_error`
    /// the first failed item stops the batch as with `rollback_on_error`,
    /// keeping what ran before it.
    fn apply_items(
        &self,
        items: &[BatchItem<'_>],
        options: BatchOptions,
        stop_on_error: bool,
    ) -> Result<Vec<BatchResult>>;

    /// The `T`s a read-only SQL statement returns (its columns matched to `T`'s
    /// ID and fields by name), with `params` bound to its `?` in order. The SQL
    /// runs on [`Orm::sql_host`], so it may join tables of every engine.
    ///
    /// A statement reading `T`'s table whole (`SELECT * FROM T [ORDER BY …]
    /// [LIMIT …]`) whose table another engine holds is answered by that
    /// engine, without the SQL host's virtual table, when the answer is the
    /// same: the statement does not sort, or the engine sorts as SQLite does
    /// ([`crate::Caps::sqlite_order`]). mORMot2 routes such statements so
    /// too; [`crate::DatabaseBuilder::sql_direct`] turns it off. A WHERE always goes through the SQL host: there it compares
    /// stored values as SQL does (a currency literal is its stored count of
    /// 1/10,000), where a [`crate::Filter`] reads literals as field values.
    ///
    /// The list starts with room for the rows the same statement returned
    /// the last time this thread ran it (one of the last few statements),
    /// rather than growing by doubling, and gives back room left over by
    /// half or more; [`Orm::select`] does the same for whole-table reads.
    fn sql_list<T: Record>(&self, sql: &str, params: impl Params) -> Result<Vec<T>> {
        let read = ListSize::<T>::of(Some(sql));
        let mut out = read.list();
        let mut push = |row: &dyn crate::Row| {
            out.push(T::from_row(row)?);
            Ok(())
        };
        let params = params.as_values();
        if let Some((engine, caps)) = self.sql_elsewhere(T::table()) {
            // Anything the subset does not read goes to the SQL host, which
            // answers it or says why not.
            if let Ok(select) = crate::one_table::select(T::table(), sql, params) {
                if select.filter.expr.is_none() && (select.order.is_empty() || caps.sqlite_order) {
                    engine.select(T::table(), &select, &mut push)?;
                    read.done(&mut out);
                    return Ok(out);
                }
            }
        }
        self.sql_host()?
            .sql_select(T::table(), sql, params, &mut push)?;
        read.done(&mut out);
        Ok(out)
    }

    /// The row calls and capabilities of the engine holding `table`, when
    /// that engine is not the SQL host's (see [`Orm::sql_list`]); `None`
    /// sends every statement to the SQL host.
    fn sql_elsewhere(&self, table: &'static Table) -> Option<(&dyn RowOps, crate::Caps)> {
        let _ = table;
        None
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

    /// The `T`s with these IDs, in the order of `ids` (`None` where there is
    /// none), each read by its own query: an engine across a network sends
    /// them together, PostgreSQL in one pipelined round trip (see
    /// [`RowOps::retrieve_many`]).
    fn get_many<T: Record>(&self, ids: &[i64]) -> Result<Vec<Option<T>>> {
        let mut found: Vec<Option<T>> = Vec::with_capacity(ids.len());
        found.resize_with(ids.len(), || None);
        let mut answered = 0;
        self.route(T::table())?
            .retrieve_many(T::table(), ids, &mut |i, row| {
                if let (Some(slot), Some(row)) = (found.get_mut(i), row) {
                    *slot = Some(T::from_row(row)?);
                }
                answered += 1;
                Ok(())
            })?;
        if answered != ids.len() {
            return Err(Error::engine(
                "orm",
                format!(
                    "{}: {answered} answers for {} IDs",
                    T::table().name,
                    ids.len()
                ),
            ));
        }
        Ok(found)
    }

    /// Reads the `T` with this ID into `rec`, reusing its buffers; returns whether
    /// it exists (`rec` is unchanged when it does not).
    fn retrieve_into<T: Record>(&self, id: i64, rec: &mut T) -> Result<bool> {
        self.route(T::table())?
            .retrieve(T::table(), id, &mut |row| rec.read_row(row))
    }

    /// The first `T` matching `where_text` (with `?` bound to `params`), if any.
    fn get_where<T: Record>(&self, where_text: &str, params: impl Params) -> Result<Option<T>> {
        let mut select =
            Select::filtered(Filter::parse(T::table(), where_text, params.as_values())?);
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
    fn delete_where<T: Record>(&self, where_text: &str, params: impl Params) -> Result<u64> {
        let filter = Filter::parse(T::table(), where_text, params.as_values())?;
        if filter.expr.is_none() {
            return Err(Error::BadInput(
                "delete_where needs a WHERE clause; an empty one would delete every row".into(),
            ));
        }
        self.route(T::table())?.delete_where(T::table(), &filter)
    }

    /// Every `T` matching `where_text` (empty: all), in ID order only if asked.
    fn list<T: Record>(&self, where_text: &str, params: impl Params) -> Result<Vec<T>> {
        self.select(&Query::filter(where_text, params))
    }

    /// The `T`s a [`Query`] selects, with its order, limit and offset.
    fn select<T: Record>(&self, query: &Query) -> Result<Vec<T>> {
        let select = query.resolve(T::table())?;
        // Only a whole-table read is sized from the last: a filter's rows
        // change with its parameters.
        let whole = select.filter.expr.is_none() && select.limit.is_none() && select.offset == 0;
        let read = ListSize::<T>::of(whole.then_some(""));
        let mut out = read.list();
        self.route(T::table())?
            .select(T::table(), &select, &mut |row| {
                out.push(T::from_row(row)?);
                Ok(())
            })?;
        read.done(&mut out);
        Ok(out)
    }

    /// The `T`s each [`Query`] selects, one list per query, each query run
    /// on its own: an engine across a network sends them together,
    /// PostgreSQL in one pipelined round trip (see [`RowOps::select_many`]).
    fn select_many<T: Record>(&self, queries: &[Query]) -> Result<Vec<Vec<T>>> {
        let selects = queries
            .iter()
            .map(|q| q.resolve(T::table()))
            .collect::<Result<Vec<_>>>()?;
        let mut out: Vec<Vec<T>> = Vec::with_capacity(queries.len());
        out.resize_with(queries.len(), Vec::new);
        self.route(T::table())?
            .select_many(T::table(), &selects, &mut |i, row| {
                let list = out.get_mut(i).ok_or_else(|| {
                    Error::engine(
                        "orm",
                        format!("an answer to select #{i} of {}", queries.len()),
                    )
                })?;
                list.push(T::from_row(row)?);
                Ok(())
            })?;
        Ok(out)
    }

    /// Streams the selected `T`s through `f`, reading every row into one record
    /// whose text and blob buffers are reused.
    ///
    /// `f` may call the engine again. Where the read holds a lock the call
    /// needs, the call fails at once with [`Error::BadInput`] and does
    /// nothing, rather than wait for its own thread: on SQLite, a write (or,
    /// without reader connections, any call) while the read runs on the
    /// writer's connection, and a call of the transaction the read belongs
    /// to; on the memory engine, a write; on an engine that lends pooled
    /// connections, a call when this thread's calls hold every connection
    /// of the pool. To write what a read finds, collect it first
    /// ([`Orm::select`]).
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
    fn count<T: Record>(&self, where_text: &str, params: impl Params) -> Result<u64> {
        let filter = Filter::parse(T::table(), where_text, params.as_values())?;
        self.route(T::table())?.count(T::table(), &filter)
    }

    /// The value of `field` in the first `T` matching `where_text`, if any.
    fn one_field_value<T: Record>(
        &self,
        field: &str,
        where_text: &str,
        params: impl Params,
    ) -> Result<Option<Value>> {
        let table = T::table();
        let column = table.column(field).ok_or_else(|| Error::UnknownField {
            table: table.name,
            field: field.to_owned(),
        })?;
        let mut select = Select::filtered(Filter::parse(table, where_text, params.as_values())?);
        select.limit = Some(1);
        self.route(table)?.select_value(table, column, &select)
    }

    /// Sends every item of `batch` and empties it; returns one result per item,
    /// in order. See [`crate::BatchOptions`] for how it is committed.
    fn send(&self, batch: &mut Batch) -> Result<Vec<BatchResult>> {
        batch.stamp(crate::datetime::now());
        let results = self.apply_items(&batch.items(), batch.options, false);
        batch.clear();
        results
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
    engine: &dyn RowOps,
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

/// Reads remembered per thread, each at the place its key names (a later
/// read of another key at the same place takes it over).
const SIZED_READS: usize = 8;

thread_local! {
    /// This thread's last list reads of some size: which read, and its rows.
    static LAST_LIST: [std::cell::Cell<(u64, usize)>; SIZED_READS] =
        const { [const { std::cell::Cell::new((0, 0)) }; SIZED_READS] };
}

/// Room in a list read's list for the rows the same thread's last run of the
/// same read returned (the same table and SQL text, or the whole table). A
/// list of 10,000 records grown by doubling was moved and reallocated about
/// 14 times, 7% of the instructions of a read through a virtual table, and an
/// application runs the same list reads over and over.
struct ListSize<T> {
    /// The read's table and text, hashed; 0 for a read not sized.
    key: u64,
    record: std::marker::PhantomData<T>,
}

impl<T: Record> ListSize<T> {
    /// Room set aside from one hint: at most this many bytes.
    const MAX_ROOM: usize = 64 << 20;
    /// Shorter lists gain nothing worth a hint.
    const MIN_ROWS: usize = 64;

    /// The sizing of a read by its SQL text, `""` for a whole-table read;
    /// `None` for a read not sized.
    fn of(sql: Option<&str>) -> Self {
        use std::hash::{BuildHasher, Hash, Hasher};
        let key = if let Some(sql) = sql {
            let mut h = foldhash::fast::FixedState::with_seed(0).build_hasher();
            (std::ptr::from_ref(T::table()) as usize).hash(&mut h);
            sql.hash(&mut h);
            h.finish() | 1
        } else {
            0
        };
        ListSize {
            key,
            record: std::marker::PhantomData,
        }
    }

    fn place(&self) -> usize {
        (self.key >> 32) as usize % SIZED_READS
    }

    fn list(&self) -> Vec<T> {
        let (key, rows) = LAST_LIST.with(|l| l[self.place()].get());
        if self.key == 0 || key != self.key {
            return Vec::new();
        }
        Vec::with_capacity(rows.min(Self::MAX_ROOM / std::mem::size_of::<T>().max(1)))
    }

    /// Notes the rows read; room left over by half or more is given back
    /// (the same read returned fewer rows this time).
    fn done(&self, out: &mut Vec<T>) {
        if self.key == 0 {
            return;
        }
        LAST_LIST.with(|l| {
            let c = &l[self.place()];
            if out.len() >= Self::MIN_ROWS {
                c.set((self.key, out.len()));
            } else if c.get().0 == self.key {
                c.set((0, 0));
            }
        });
        if out.capacity() / 2 > out.len() {
            out.shrink_to_fit();
        }
    }
}
