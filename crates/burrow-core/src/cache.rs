//! The ORM cache: rows by ID, per table, each kept for a bounded time.
//!
//! It lives in the core so that an embedded application caches without the
//! HTTP layer: [`CachedEngine`] puts an [`OrmCache`] in front of any engine.
//! `burrow-http` uses the same cache on both sides: its server answers
//! `GET /{root}/{Table}/{ID}` from one, and its client engine keeps the rows
//! it read or wrote in one, through [`CacheScope`], the write-through rules
//! below as calls an engine wraps its own row calls in. Rules:
//!
//! - only the tables (or the IDs of a table) configured are cached, each with a
//!   time to live; an entry older than that is never returned, so a write made
//!   elsewhere is visible at the latest one timeout after it;
//! - a write through the same cache updates (whole rows) or drops (partial
//!   updates, deletes) the entry before the call returns; inside a
//!   transaction it drops the entry, and the transaction's handle keeps the
//!   write until it commits (the entry is then set, or dropped again) or
//!   rolls back (forgotten);
//! - [`OrmCache::flush`] empties it, [`OrmCache::flush_table`] and
//!   [`OrmCache::flush_id`] drop less.
//!
//! Entries live in one `RwLock`ed hash map per table: reads (the hot path) share
//! the lock, and a time check is one `Instant::now()`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock, RwLockWriteGuard};
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::filter::Filter;
use crate::query::Select;
use crate::record::{Fields, Record, Row};
use crate::row::OwnedRow;
use crate::schema::{Column, Table};
use crate::storage::{BatchItem, BatchOp, BatchResult, Caps, EngineTx, RowOps, SqlHost, Storage};
use crate::value::Value;

/// What to cache of one table.
#[derive(Debug, Clone)]
pub struct CacheRule {
    /// How long an entry may be returned after it was stored.
    pub ttl: Duration,
    /// Only these IDs (all when `None`).
    pub ids: Option<Vec<i64>>,
    /// At most this many entries; beyond, expired entries are dropped first and
    /// new ones are not stored while it stays full.
    pub max_entries: usize,
}

// foldhash rather than SipHash: a batch stores thousands of rows at once, and
// the seed is still random per map.
type Rows = HashMap<i64, (Instant, Arc<OwnedRow>), foldhash::fast::RandomState>;

struct TableCache {
    table: &'static str,
    rule: CacheRule,
    rows: RwLock<Rows>,
}

impl TableCache {
    /// Stores `row`, whose ID is `id`, in `rows` (this table's map) if that
    /// ID is cached. The ID comes apart from the row so that storing many
    /// rows does not read each one back.
    fn store(&self, rows: &mut Rows, id: i64, row: Arc<OwnedRow>, now: Instant) {
        if self.rule.ids.as_ref().is_some_and(|ids| !ids.contains(&id)) {
            return;
        }
        if rows.len() >= self.rule.max_entries && !rows.contains_key(&id) {
            rows.retain(|_, (at, _)| now.duration_since(*at) < self.rule.ttl);
            if rows.len() >= self.rule.max_entries {
                return;
            }
        }
        rows.insert(id, (now, row));
    }

    fn write(&self) -> RwLockWriteGuard<'_, Rows> {
        self.rows.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A table's cache and its write-locked map.
type Held<'c> = (&'c TableCache, RwLockWriteGuard<'c, Rows>);

/// The write lock of one table's map, kept while consecutive rows go to
/// that table.
struct Locked<'c> {
    cache: &'c OrmCache,
    /// The last table asked for, and its cache and locked map if it has one.
    held: Option<(&'static Table, Option<Held<'c>>)>,
}

impl<'c> Locked<'c> {
    fn new(cache: &'c OrmCache) -> Self {
        Locked { cache, held: None }
    }

    /// The table's cache and its locked map, `None` when it is not cached.
    fn get(&mut self, table: &'static Table) -> Option<(&'c TableCache, &mut Rows)> {
        if !self
            .held
            .as_ref()
            .is_some_and(|(t, _)| std::ptr::eq(*t, table))
        {
            let slot = self.cache.slot(table);
            let same = match (&self.held, slot) {
                (Some((_, Some((h, _)))), Some(t)) => std::ptr::eq(*h, t),
                _ => false,
            };
            if same {
                if let Some((t, _)) = &mut self.held {
                    *t = table;
                }
            } else {
                self.held = None;
                self.held = Some((table, slot.map(|t| (t, t.write()))));
            }
        }
        match &mut self.held {
            Some((_, Some((t, rows)))) => Some((*t, &mut **rows)),
            _ => None,
        }
    }
}

/// A row a transaction wrote, waiting for its end: the whole row to store
/// at commit, or `None` for an entry to drop again then (a partial update,
/// a delete).
struct Pending {
    table: &'static Table,
    id: i64,
    row: Option<Arc<OwnedRow>>,
}

/// What a transaction wrote through a cache so far.
#[derive(Default)]
struct TxRows {
    rows: Vec<Pending>,
    /// Tables whose entries all go at commit (a delete by filter).
    tables: Vec<&'static Table>,
}

/// What a transaction wrote through a cache, kept by the transaction's handle
/// until it ends ([`TxWrites::end`]): the cache never shows uncommitted data,
/// and a reader outside the transaction that puts the old row back
/// meanwhile does not keep it past the commit.
#[derive(Default)]
pub struct TxWrites {
    rows: RefCell<TxRows>,
}

impl TxWrites {
    /// Hands what the transaction wrote to `cache` as it ended: stored (its
    /// whole rows) and dropped again (the other entries it touched) when
    /// `committed`, else forgotten, the entries it touched dropped again (a
    /// reader may have put back a row the transaction had not committed).
    /// Later calls find nothing left.
    pub fn end(&self, cache: &OrmCache, committed: bool) {
        let rows = self.rows.take();
        if committed {
            cache.commit(rows);
        } else {
            cache.rollback(rows);
        }
    }
}

/// Rows by table and ID, each valid for its table's time to live.
#[derive(Default)]
pub struct OrmCache {
    tables: Vec<TableCache>,
}

impl std::fmt::Debug for OrmCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.tables.iter().map(|t| (t.table, &t.rule)))
            .finish()
    }
}

impl OrmCache {
    /// An empty cache that caches nothing.
    pub fn new() -> Self {
        OrmCache::default()
    }

    /// Caches every row of `T` for `ttl`.
    pub fn table<T: Record>(self, ttl: Duration) -> Self {
        self.table_named(T::TABLE_NAME, ttl)
    }

    /// Caches every row of the table called `name` for `ttl`.
    pub fn table_named(mut self, name: &'static str, ttl: Duration) -> Self {
        self.set(
            name,
            CacheRule {
                ttl,
                ids: None,
                max_entries: 1 << 20,
            },
        );
        self
    }

    /// Caches only these IDs of `T` for `ttl`.
    pub fn ids<T: Record>(mut self, ids: &[i64], ttl: Duration) -> Self {
        self.set(
            T::TABLE_NAME,
            CacheRule {
                ttl,
                ids: Some(ids.to_vec()),
                max_entries: ids.len(),
            },
        );
        self
    }

    /// Sets the rule of the table called `name`.
    pub fn set(&mut self, name: &'static str, rule: CacheRule) {
        self.tables.retain(|t| !t.table.eq_ignore_ascii_case(name));
        self.tables.push(TableCache {
            table: name,
            rule,
            rows: RwLock::new(HashMap::default()),
        });
    }

    /// Whether no table is cached.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    fn slot(&self, table: &Table) -> Option<&TableCache> {
        self.tables
            .iter()
            .find(|t| std::ptr::eq(t.table, table.name) || t.table.eq_ignore_ascii_case(table.name))
    }

    /// Whether rows of `table` with this ID are cached.
    pub fn covers(&self, table: &Table, id: i64) -> bool {
        self.slot(table)
            .is_some_and(|t| t.rule.ids.as_ref().is_none_or(|ids| ids.contains(&id)))
    }

    /// Calls `f` on the row with this ID, if cached and not expired, under the
    /// read lock (no reference count is touched: the hot path of a hit).
    pub fn with<R>(&self, table: &Table, id: i64, f: impl FnOnce(&OwnedRow) -> R) -> Option<R> {
        let t = self.slot(table)?;
        let rows = t.rows.read().unwrap_or_else(PoisonError::into_inner);
        let (at, row) = rows.get(&id)?;
        (at.elapsed() < t.rule.ttl).then(|| f(row))
    }

    /// The row with this ID, if cached and not expired.
    pub fn get(&self, table: &Table, id: i64) -> Option<Arc<OwnedRow>> {
        let t = self.slot(table)?;
        let rows = t.rows.read().unwrap_or_else(PoisonError::into_inner);
        let (at, row) = rows.get(&id)?;
        (at.elapsed() < t.rule.ttl).then(|| row.clone())
    }

    /// Stores a row (when its table and ID are cached).
    pub fn put(&self, row: OwnedRow) {
        let Some(t) = self.slot(row.table) else {
            return;
        };
        let mut rows = t.rows.write().unwrap_or_else(PoisonError::into_inner);
        t.store(&mut rows, row.id, Arc::new(row), Instant::now());
    }

    /// Drops the entry of one row.
    pub fn flush_id(&self, table: &Table, id: i64) {
        if let Some(t) = self.slot(table) {
            t.rows
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
        }
    }

    /// Drops every entry of a table.
    pub fn flush_table(&self, table: &Table) {
        if let Some(t) = self.slot(table) {
            t.rows
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
        }
    }

    /// Drops every entry.
    pub fn flush(&self) {
        for t in &self.tables {
            t.rows
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
        }
    }

    /// Updates the cache after a write: whole rows added or updated are stored,
    /// partial updates and deletes drop their entry. Inside a transaction
    /// (`tx`) the entry is dropped now and the write noted for its end.
    fn after_write(&self, item: &BatchItem<'_>, result: &BatchResult, tx: Option<&TxWrites>) {
        if self.slot(item.table).is_none() {
            return;
        }
        let (id, row) = match (&item.op, result) {
            (BatchOp::Add { row, .. }, BatchResult::Added(id)) => {
                let mut r = OwnedRow::from_fields(*row);
                r.id = *id;
                (*id, Some(r))
            }
            (BatchOp::Update { row, fields: None }, BatchResult::Done) => {
                (row.id(), Some(OwnedRow::from_fields(*row)))
            }
            (BatchOp::Update { row, .. }, _) => (row.id(), None),
            (BatchOp::Delete { id }, _) => (*id, None),
            (BatchOp::Add { .. }, _) => return,
        };
        match (tx, row) {
            (None, Some(r)) => self.put(r),
            (None, None) => self.flush_id(item.table, id),
            (Some(tx), row) => {
                self.flush_id(item.table, id);
                tx.rows.borrow_mut().rows.push(Pending {
                    table: item.table,
                    id,
                    row: row.map(Arc::new),
                });
            }
        }
    }
}

impl OrmCache {
    /// The copies of the rows a batch stores if its writes succeed (see
    /// [`OrmCache::after_batch`]), one per item (`None` where nothing would be
    /// stored). An engine that waits for its writes (a remote one) builds them meanwhile.
    fn prepare_batch(&self, items: &[BatchItem<'_>]) -> Vec<Option<Arc<OwnedRow>>> {
        if self.tables.is_empty() {
            return Vec::new();
        }
        let mut last: Option<(&Table, bool)> = None;
        items
            .iter()
            .map(|item| {
                let cached = match last {
                    Some((t, c)) if std::ptr::eq(t, item.table) => c,
                    _ => self.slot(item.table).is_some(),
                };
                last = Some((item.table, cached));
                match item.op {
                    BatchOp::Add { row, .. } | BatchOp::Update { row, fields: None } if cached => {
                        Some(Arc::new(OwnedRow::from_fields(row)))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// [`OrmCache::after_write`] for every item of a batch and its result,
    /// taking each lock once per run of items on the same table rather than
    /// once per row. `prepared` holds the rows from
    /// [`OrmCache::prepare_batch`], or is empty.
    fn after_batch(
        &self,
        items: &[BatchItem<'_>],
        results: &[BatchResult],
        mut prepared: Vec<Option<Arc<OwnedRow>>>,
        tx: Option<&TxWrites>,
    ) {
        if self.tables.is_empty() {
            return;
        }
        let mut tx = tx.map(|tx| tx.rows.borrow_mut());
        let now = Instant::now();
        let mut locked = Locked::new(self);
        for (k, (item, result)) in items.iter().zip(results).enumerate() {
            let Some((t, rows)) = locked.get(item.table) else {
                continue;
            };
            let copy = |row: &dyn Fields, id: Option<i64>, prepared: &mut Vec<_>| {
                let mut r: Arc<OwnedRow> = prepared
                    .get_mut(k)
                    .and_then(Option::take)
                    .unwrap_or_else(|| Arc::new(OwnedRow::from_fields(row)));
                if let Some(id) = id {
                    // Not shared yet: the copy was made for this item.
                    Arc::make_mut(&mut r).id = id;
                }
                r
            };
            let (id, row) = match (&item.op, result) {
                (BatchOp::Add { row, .. }, BatchResult::Added(id)) => {
                    (*id, Some(copy(*row, Some(*id), &mut prepared)))
                }
                (BatchOp::Update { row, fields: None }, BatchResult::Done) => {
                    (row.id(), Some(copy(*row, None, &mut prepared)))
                }
                (BatchOp::Update { row, .. }, _) => (row.id(), None),
                (BatchOp::Delete { id }, _) => (*id, None),
                (BatchOp::Add { .. }, _) => continue,
            };
            match (tx.as_deref_mut(), row) {
                (None, Some(row)) => {
                    if rows.is_empty() {
                        rows.reserve(items.len().min(t.rule.max_entries));
                    }
                    t.store(rows, id, row, now);
                }
                (None, None) => remove(rows, id),
                (Some(tx), row) => {
                    remove(rows, id);
                    if tx.rows.capacity() == 0 {
                        tx.rows.reserve(items.len() - k);
                    }
                    tx.rows.push(Pending {
                        table: item.table,
                        id,
                        row,
                    });
                }
            }
        }
        drop(locked);
        // Copies left over belong to failed writes; they go off the lock.
        drop(prepared);
    }

    /// Applies what a transaction wrote, now committed: its whole rows are
    /// stored, the other entries it touched dropped again.
    fn commit(&self, tx: TxRows) {
        for t in &tx.tables {
            self.flush_table(t);
        }
        let n = tx.rows.len();
        let now = Instant::now();
        let mut locked = Locked::new(self);
        for r in tx.rows {
            if let Some((t, map)) = locked.get(r.table) {
                match r.row {
                    Some(row) => {
                        if map.is_empty() {
                            map.reserve(n.min(t.rule.max_entries));
                        }
                        t.store(map, r.id, row, now);
                    }
                    None => remove(map, r.id),
                }
            }
        }
    }

    /// Forgets what a transaction wrote, now rolled back: an entry a reader
    /// put back meanwhile may hold a row the transaction had not committed.
    fn rollback(&self, tx: TxRows) {
        for t in &tx.tables {
            self.flush_table(t);
        }
        let mut locked = Locked::new(self);
        for r in tx.rows {
            if let Some((_, map)) = locked.get(r.table) {
                remove(map, r.id);
            }
        }
    }
}

/// Removes an entry, without hashing when the map is empty (as it is while
/// a fresh cache fills).
fn remove(rows: &mut Rows, id: i64) {
    if !rows.is_empty() {
        rows.remove(&id);
    }
}

/// The cache as one unit of work writes through it: an engine's own calls
/// (`tx` is `None`, each call its own transaction) or those of an open
/// transaction, whose writes wait in its [`TxWrites`] for its end.
///
/// An engine wraps each of its row calls in the matching call here, which
/// keeps the cache's rules: [`CachedEngine`] does so over any engine, and an
/// engine that must stay in charge of how it reads and writes (the HTTP
/// client, which builds the cache's copies of a batch while the server works
/// on it) does so itself.
#[derive(Clone, Copy)]
pub struct CacheScope<'a> {
    cache: &'a OrmCache,
    tx: Option<&'a TxWrites>,
}

impl OrmCache {
    /// The cache as seen by the engine's own calls (`tx` is `None`) or by a
    /// transaction that notes its writes in `tx`.
    pub fn scope<'a>(&'a self, tx: Option<&'a TxWrites>) -> CacheScope<'a> {
        CacheScope { cache: self, tx }
    }
}

impl CacheScope<'_> {
    /// The cache.
    pub fn cache(&self) -> &OrmCache {
        self.cache
    }

    /// An insert: `write` inserts `row` (with the forced `id`, if any) and
    /// returns its ID.
    pub fn insert(
        &self,
        table: &'static Table,
        id: Option<i64>,
        row: &dyn Fields,
        write: impl FnOnce() -> Result<i64>,
    ) -> Result<i64> {
        let new_id = write()?;
        let item = BatchItem {
            table,
            op: BatchOp::Add { id, row },
        };
        self.cache
            .after_write(&item, &BatchResult::Added(new_id), self.tx);
        Ok(new_id)
    }

    /// An update of `row` (the listed `fields`, or all): `write` updates it
    /// and says whether the row existed.
    pub fn update(
        &self,
        table: &'static Table,
        row: &dyn Fields,
        fields: Option<&[usize]>,
        write: impl FnOnce() -> Result<bool>,
    ) -> Result<bool> {
        // Dropped first: a failure after the write must not leave a stale entry.
        self.cache.flush_id(table, row.id());
        let done = write()?;
        let item = BatchItem {
            table,
            op: BatchOp::Update { row, fields },
        };
        let result = if done {
            BatchResult::Done
        } else {
            BatchResult::Missing
        };
        self.cache.after_write(&item, &result, self.tx);
        Ok(done)
    }

    /// A delete by ID: `write` deletes the row and says whether it existed.
    pub fn delete(
        &self,
        table: &'static Table,
        id: i64,
        write: impl FnOnce() -> Result<bool>,
    ) -> Result<bool> {
        self.cache.flush_id(table, id);
        let existed = write()?;
        // Outside a transaction the entry is gone for good; inside, it must
        // go again at the end, whatever a reader put back meanwhile.
        if self.tx.is_some() {
            let item = BatchItem {
                table,
                op: BatchOp::Delete { id },
            };
            self.cache.after_write(&item, &BatchResult::Done, self.tx);
        }
        Ok(existed)
    }

    /// A delete by filter: every entry of `table` goes, before and after
    /// `write` (which may fail halfway), and again when a transaction ends.
    pub fn delete_where(
        &self,
        table: &'static Table,
        write: impl FnOnce() -> Result<u64>,
    ) -> Result<u64> {
        self.cache.flush_table(table);
        if let Some(tx) = self.tx {
            let tables = &mut tx.rows.borrow_mut().tables;
            if !tables.iter().any(|t| std::ptr::eq(*t, table)) {
                tables.push(table);
            }
        }
        let n = write();
        self.cache.flush_table(table);
        n
    }

    /// The row with this ID from the cache, handed to `out`: `Some` with
    /// the outcome of `out` on a hit, `None` when the engine must read it.
    /// Inside a transaction always `None`: the engine has the rows the
    /// transaction wrote, which the cache holds only once it commits.
    #[inline]
    fn hit(
        &self,
        table: &'static Table,
        id: i64,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Option<Result<bool>> {
        if self.tx.is_some() {
            return None;
        }
        let r = self.cache.with(table, id, |row| out(row))?;
        Some(r.map(|()| true))
    }

    /// Whether a row read by the engine is to be kept.
    fn keeps(&self, table: &Table, id: i64) -> bool {
        self.tx.is_none() && self.cache.covers(table, id)
    }

    /// A retrieve by ID: a hit is handed to `out` under the cache's read
    /// lock, with no allocation; otherwise `read` hands the engine's row to
    /// the `out` it is given and says whether there was one, and a copy is
    /// kept when the cache covers it.
    pub fn retrieve(
        &self,
        table: &'static Table,
        id: i64,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
        read: impl FnOnce(&mut dyn FnMut(&dyn Row) -> Result<()>) -> Result<bool>,
    ) -> Result<bool> {
        if let Some(hit) = self.hit(table, id, out) {
            return hit;
        }
        if !self.keeps(table, id) {
            return read(out);
        }
        let mut copy = None;
        let found = read(&mut |row| {
            copy = Some(OwnedRow::from_row(table, row)?);
            out(row)
        })?;
        if let Some(c) = copy {
            self.cache.put(c);
        }
        Ok(found)
    }

    /// [`CacheScope::retrieve`] for an engine that reads rows into rows of
    /// its own (`read` returns it, `None` when there is none): the row goes
    /// into the cache as it is, rather than copied.
    pub fn retrieve_owned(
        &self,
        table: &'static Table,
        id: i64,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
        read: impl FnOnce() -> Result<Option<OwnedRow>>,
    ) -> Result<bool> {
        if let Some(hit) = self.hit(table, id, out) {
            return hit;
        }
        let Some(row) = read()? else {
            return Ok(false);
        };
        out(&row)?;
        if self.keeps(table, id) {
            self.cache.put(row);
        }
        Ok(true)
    }

    /// A batch: `apply` appends one result per item applied to the `Vec` it
    /// is given, and may call the function it is given once while it waits
    /// for the writes to apply elsewhere, for the cache to copy the rows
    /// meanwhile. With `own_transaction`, `apply` runs the batch in a
    /// transaction of the engine's own, begun and ended within it (see
    /// [`Storage::apply_batch_in_transaction`]), and the cache keeps its
    /// results only when it succeeds, as only then are they known to be
    /// committed; otherwise they stand whether or not it fails (each item
    /// its own write, or the open transaction's).
    pub fn apply_batch(
        &self,
        items: &[BatchItem<'_>],
        results: &mut Vec<BatchResult>,
        own_transaction: bool,
        apply: impl FnOnce(&mut Vec<BatchResult>, &mut dyn FnMut()) -> Result<()>,
    ) -> Result<()> {
        // Rows the batch changes leave the cache before it runs, once (an
        // engine may send it twice).
        for item in items {
            match item.op {
                BatchOp::Update { row, .. } => self.cache.flush_id(item.table, row.id()),
                BatchOp::Delete { id } => self.cache.flush_id(item.table, id),
                BatchOp::Add { .. } => {}
            }
        }
        let start = results.len();
        let mut prepared = Vec::new();
        let r = apply(results, &mut || prepared = self.cache.prepare_batch(items));
        if r.is_ok() || !own_transaction {
            self.cache
                .after_batch(items, &results[start..], prepared, self.tx);
        }
        r
    }
}

/// Any engine with an [`OrmCache`] in front of its retrieve-by-ID.
///
/// Writes through it keep the cache right; writes that bypass it (another
/// process, another engine handle) are seen once the entry expires. Inside
/// one of its transactions, reads by ID go to the engine (the transaction
/// sees its own writes, which the cache holds only once committed), and the
/// entries of rows it writes are dropped at once and set at its end.
pub struct CachedEngine {
    inner: Arc<dyn Storage>,
    cache: OrmCache,
}

impl CachedEngine {
    /// Puts `cache` in front of `inner`.
    pub fn new(inner: Arc<dyn Storage>, cache: OrmCache) -> Self {
        CachedEngine { inner, cache }
    }

    /// The cache.
    pub fn cache(&self) -> &OrmCache {
        &self.cache
    }

    /// The engine behind the cache.
    pub fn inner(&self) -> &Arc<dyn Storage> {
        &self.inner
    }

    fn link(&self) -> Cached<'_> {
        Cached {
            rows: &*self.inner,
            scope: self.cache.scope(None),
        }
    }
}

/// The row calls of a [`CachedEngine`] or of one of its transactions: the
/// inner engine's or transaction's, each wrapped in its cache call.
struct Cached<'a> {
    rows: &'a dyn RowOps,
    scope: CacheScope<'a>,
}

impl RowOps for Cached<'_> {
    fn insert(&self, table: &'static Table, id: Option<i64>, row: &dyn Fields) -> Result<i64> {
        self.scope
            .insert(table, id, row, || self.rows.insert(table, id, row))
    }

    fn update(
        &self,
        table: &'static Table,
        row: &dyn Fields,
        fields: Option<&[usize]>,
    ) -> Result<bool> {
        self.scope
            .update(table, row, fields, || self.rows.update(table, row, fields))
    }

    fn delete(&self, table: &'static Table, id: i64) -> Result<bool> {
        self.scope.delete(table, id, || self.rows.delete(table, id))
    }

    fn delete_where(&self, table: &'static Table, filter: &Filter) -> Result<u64> {
        self.scope
            .delete_where(table, || self.rows.delete_where(table, filter))
    }

    fn retrieve(
        &self,
        table: &'static Table,
        id: i64,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<bool> {
        self.scope
            .retrieve(table, id, out, |out| self.rows.retrieve(table, id, out))
    }

    fn select(
        &self,
        table: &'static Table,
        select: &Select,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        self.rows.select(table, select, out)
    }

    fn count(&self, table: &'static Table, filter: &Filter) -> Result<u64> {
        self.rows.count(table, filter)
    }

    fn select_value(
        &self,
        table: &'static Table,
        column: Column,
        select: &Select,
    ) -> Result<Option<Value>> {
        self.rows.select_value(table, column, select)
    }

    fn apply_batch(
        &self,
        items: &[BatchItem<'_>],
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
    ) -> Result<()> {
        self.scope.apply_batch(items, results, false, |results, _| {
            self.rows.apply_batch(items, results, stop_on_error)
        })
    }
}

crate::forward_row_ops!(CachedEngine, |s| s.link());

impl Storage for CachedEngine {
    fn caps(&self) -> Caps {
        self.inner.caps()
    }

    fn ensure_table(&self, table: &'static Table) -> Result<()> {
        self.inner.ensure_table(table)
    }

    fn begin(self: Arc<Self>) -> Result<Box<dyn EngineTx>> {
        let inner = self.inner.clone().begin()?;
        let writes = PendingWrites {
            engine: self,
            rows: TxWrites::default(),
        };
        Ok(Box::new(CachedTx { inner, writes }))
    }

    fn apply_batch_in_transaction(
        &self,
        items: &[BatchItem<'_>],
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
        rollback_on_error: bool,
    ) -> Option<Result<()>> {
        let mut unsupported = false;
        let r = self
            .cache
            .scope(None)
            .apply_batch(items, results, true, |results, _| {
                let r = self.inner.apply_batch_in_transaction(
                    items,
                    results,
                    stop_on_error,
                    rollback_on_error,
                );
                unsupported = r.is_none();
                r.unwrap_or(Ok(()))
            });
        // The inner engine has no such path: the caller wraps `apply_batch`
        // in a transaction; the entries the batch changes are gone already.
        (!unsupported).then_some(r)
    }

    fn filters_typed(&self, table: &'static Table, field: usize) -> bool {
        self.inner.filters_typed(table, field)
    }

    /// The inner engine's SQL, as it is: SQL reads never go through the
    /// cache, so they see the engine's rows, as fresh as they are there.
    fn sql_host(&self) -> Option<&dyn SqlHost> {
        self.inner.sql_host()
    }

    /// The inner engine's backup: the cache holds no write of its own.
    fn online_backup(&self) -> Option<&dyn crate::storage::OnlineBackup> {
        self.inner.online_backup()
    }
}

/// A transaction of a [`CachedEngine`]: the inner engine's, and what it
/// wrote through the cache.
struct CachedTx {
    /// Declared first: dropped without a commit, it rolls back before the
    /// cache forgets its writes.
    inner: Box<dyn EngineTx>,
    writes: PendingWrites,
}

/// The writes of a [`CachedTx`] so far; dropped before they are handed to
/// the cache as committed, they are forgotten as rolled back.
struct PendingWrites {
    engine: Arc<CachedEngine>,
    rows: TxWrites,
}

impl Drop for PendingWrites {
    fn drop(&mut self) {
        self.rows.end(&self.engine.cache, false);
    }
}

impl CachedTx {
    fn link(&self) -> Cached<'_> {
        Cached {
            rows: &*self.inner,
            scope: self.writes.engine.cache.scope(Some(&self.writes.rows)),
        }
    }
}

crate::forward_row_ops!(CachedTx, |s| s.link());

impl EngineTx for CachedTx {
    fn commit(self: Box<Self>) -> Result<()> {
        let CachedTx { inner, writes } = *self;
        let r = inner.commit();
        writes.rows.end(&writes.engine.cache, r.is_ok());
        r
    }

    fn rollback(self: Box<Self>) -> Result<()> {
        let CachedTx { inner, writes } = *self;
        let r = inner.rollback();
        drop(writes);
        r
    }

    fn sql_host(&self) -> Option<&dyn SqlHost> {
        self.inner.sql_host()
    }
}

#[cfg(test)]
mod test {
    use std::time::Duration;

    use super::{CacheRule, OrmCache, TxWrites};
    use crate::row::OwnedRow;
    use crate::schema::{Field, FieldKind, Table};
    use crate::storage::{BatchItem, BatchOp, BatchResult};
    use crate::value::Value;

    static NOTE: Table = Table {
        name: "Note",
        fields: &[Field::new("Title", FieldKind::Text)],
    };
    static OTHER: Table = Table {
        name: "Other",
        fields: &[Field::new("Title", FieldKind::Text)],
    };

    fn row(table: &'static Table, id: i64, title: &str) -> OwnedRow {
        OwnedRow {
            table,
            id,
            values: vec![Value::Text(title.into())],
        }
    }

    fn title(cache: &OrmCache, id: i64) -> Option<Value> {
        cache.get(&NOTE, id).map(|r| r.values[0].clone())
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn an_entry_is_returned_within_its_time_to_live_only() {
        let cache = OrmCache::new().table_named("Note", HOUR);
        cache.put(row(&NOTE, 1, "a"));
        assert_eq!(title(&cache, 1), Some(Value::Text("a".into())));
        assert_eq!(cache.with(&NOTE, 1, |r| r.id), Some(1));
        // Tables without a rule are not cached.
        cache.put(row(&OTHER, 1, "b"));
        assert!(cache.get(&OTHER, 1).is_none());
        assert!(!cache.covers(&OTHER, 1));
        let expired = OrmCache::new().table_named("Note", Duration::ZERO);
        expired.put(row(&NOTE, 1, "a"));
        assert!(expired.get(&NOTE, 1).is_none());
        assert!(expired.with(&NOTE, 1, |_| ()).is_none());
    }

    #[test]
    fn a_full_table_drops_expired_entries_and_then_stores_no_more() {
        let mut cache = OrmCache::new();
        let rule = |ttl| CacheRule {
            ttl,
            ids: None,
            max_entries: 2,
        };
        cache.set("Note", rule(HOUR));
        for id in 1..=3 {
            cache.put(row(&NOTE, id, "x"));
        }
        assert!(cache.get(&NOTE, 2).is_some());
        assert!(cache.get(&NOTE, 3).is_none());
        // An entry already there is replaced even when full.
        cache.put(row(&NOTE, 1, "y"));
        assert_eq!(title(&cache, 1), Some(Value::Text("y".into())));
        // Expired entries make room.
        cache.set("Note", rule(Duration::ZERO));
        for id in 1..=3 {
            cache.put(row(&NOTE, id, "x"));
        }
        let stored = cache.tables[0].rows.read().map(|r| r.len()).ok();
        assert_eq!(stored, Some(1));
    }

    #[test]
    fn a_transaction_s_writes_reach_the_cache_at_commit_only() {
        let cache = OrmCache::new().table_named("Note", HOUR);
        let tx = TxWrites::default();
        let written = row(&NOTE, 1, "written");
        let item = BatchItem {
            table: &NOTE,
            op: BatchOp::Update {
                row: &written,
                fields: None,
            },
        };
        cache.put(row(&NOTE, 1, "old"));
        cache
            .scope(Some(&tx))
            .update(&NOTE, &written, None, || Ok(true))
            .expect("update");
        assert!(title(&cache, 1).is_none());
        // A reader puts the committed row back meanwhile: gone at the end.
        cache.put(row(&NOTE, 1, "old"));
        tx.end(&cache, false);
        assert!(title(&cache, 1).is_none());
        let mut results = Vec::new();
        cache
            .scope(Some(&tx))
            .apply_batch(&[item], &mut results, false, |results, _| {
                results.push(BatchResult::Done);
                Ok(())
            })
            .expect("batch");
        assert!(title(&cache, 1).is_none());
        tx.end(&cache, true);
        assert_eq!(title(&cache, 1), Some(Value::Text("written".into())));
        // Ended: nothing is left to hand over.
        cache.flush();
        tx.end(&cache, true);
        assert!(title(&cache, 1).is_none());
    }
}
