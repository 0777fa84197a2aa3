//! The ORM cache: rows by ID, per table, each kept for a bounded time.
//!
//! One [`OrmCache`] serves three places: the HTTP client ([`crate::RemoteEngine`]
//! keeps the rows it read or wrote), the server (it answers `GET /{root}/{Table}/{ID}`
//! from it), and any in-process engine through [`CachedEngine`]. Rules:
//!
//! - only the tables (or the IDs of a table) configured are cached, each with a
//!   time to live; an entry older than that is never returned, so a write made
//!   elsewhere is visible at the latest one timeout after it;
//! - a write through the same cache updates (whole rows) or drops (partial
//!   updates, deletes) the entry before the call returns;
//! - [`OrmCache::flush`] empties it, [`OrmCache::flush_table`] and
//!   [`OrmCache::flush_id`] drop less.
//!
//! Entries live in one `RwLock`ed hash map per table: reads (the hot path) share
//! the lock, and a time check is one `Instant::now()`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockWriteGuard};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use burrow_core::{
    BatchItem, BatchOp, BatchResult, Column, Fields, Filter, OwnedRow, Record, Result, Row, Select,
    Storage, Table, Value,
};

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
    /// Stores `row` (if its ID is cached) in `rows`, this table's map.
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

/// A row written inside a transaction, waiting for its end.
struct Pending {
    thread: ThreadId,
    table: &'static Table,
    id: i64,
    row: Arc<OwnedRow>,
}

/// Rows by table and ID, each valid for its table's time to live.
#[derive(Default)]
pub struct OrmCache {
    tables: Vec<TableCache>,
    /// Rows written inside a transaction, per thread: stored at commit,
    /// forgotten at rollback, so that the cache never shows uncommitted data.
    pending: Mutex<Vec<Pending>>,
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

    /// Updates the cache after a write: whole rows added or updated are stored
    /// (inside a transaction, only once it commits: see [`OrmCache::commit`]),
    /// partial updates and deletes drop their entry.
    pub fn after_write(&self, item: &BatchItem<'_>, result: &BatchResult, in_tx: bool) {
        if self.slot(item.table).is_none() {
            return;
        }
        let store = |r: OwnedRow| {
            if in_tx {
                self.flush_id(r.table, r.id);
                self.pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Pending {
                        thread: std::thread::current().id(),
                        table: r.table,
                        id: r.id,
                        row: Arc::new(r),
                    });
            } else {
                self.put(r);
            }
        };
        match (&item.op, result) {
            (BatchOp::Add { row, .. }, BatchResult::Added(id)) => {
                let mut r = OwnedRow::from_fields(*row);
                r.id = *id;
                store(r);
            }
            (BatchOp::Update { row, fields: None }, BatchResult::Done) => {
                store(OwnedRow::from_fields(*row))
            }
            (BatchOp::Update { row, .. }, _) => self.flush_id(item.table, row.id()),
            (BatchOp::Delete { id }, _) => self.flush_id(item.table, *id),
            (BatchOp::Add { .. }, _) => {}
        }
    }
}

impl OrmCache {
    /// The copies of the rows a batch stores if its writes succeed (see
    /// [`OrmCache::after_batch`]), one per item (`None` where nothing would be
    /// stored). A client builds them while the server works on the batch.
    pub(crate) fn prepare_batch(&self, items: &[BatchItem<'_>]) -> Vec<Option<Arc<OwnedRow>>> {
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
    pub(crate) fn after_batch(
        &self,
        items: &[BatchItem<'_>],
        results: &[BatchResult],
        mut prepared: Vec<Option<Arc<OwnedRow>>>,
        in_tx: bool,
    ) {
        if self.tables.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut pending = Vec::new();
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
                    (*id, copy(*row, Some(*id), &mut prepared))
                }
                (BatchOp::Update { row, fields: None }, BatchResult::Done) => {
                    (row.id(), copy(*row, None, &mut prepared))
                }
                (BatchOp::Update { row, .. }, _) => {
                    remove(rows, row.id());
                    continue;
                }
                (BatchOp::Delete { id }, _) => {
                    remove(rows, *id);
                    continue;
                }
                (BatchOp::Add { .. }, _) => continue,
            };
            if in_tx {
                remove(rows, id);
                if pending.capacity() == 0 {
                    pending.reserve(items.len() - k);
                }
                pending.push((item.table, id, row));
            } else {
                if rows.is_empty() {
                    rows.reserve(items.len().min(t.rule.max_entries));
                }
                t.store(rows, id, row, now);
            }
        }
        drop(locked);
        // Copies left over belong to failed writes; they go off the lock.
        drop(prepared);
        if !pending.is_empty() {
            let me = std::thread::current().id();
            let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            let mine = pending.into_iter().map(|(table, id, row)| Pending {
                thread: me,
                table,
                id,
                row,
            });
            if p.is_empty() {
                *p = mine.collect();
            } else {
                p.extend(mine);
            }
        }
    }

    /// Stores the rows the calling thread wrote in its transaction, which has
    /// just committed.
    pub fn commit(&self) {
        let rows = self.take_pending();
        let n = rows.len();
        let now = Instant::now();
        let mut locked = Locked::new(self);
        for r in rows {
            if let Some((t, map)) = locked.get(r.table) {
                if map.is_empty() {
                    map.reserve(n.min(t.rule.max_entries));
                }
                t.store(map, r.id, r.row, now);
            }
        }
    }

    /// Forgets the rows the calling thread wrote in its transaction, which
    /// has just rolled back.
    pub fn rollback(&self) {
        let mut locked = Locked::new(self);
        for r in self.take_pending() {
            if let Some((_, map)) = locked.get(r.table) {
                remove(map, r.id);
            }
        }
    }

    fn take_pending(&self) -> Vec<Pending> {
        let me = std::thread::current().id();
        let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if p.iter().all(|r| r.thread == me) {
            return std::mem::take(&mut *p);
        }
        let (mine, rest) = p.drain(..).partition(|r| r.thread == me);
        *p = rest;
        mine
    }
}

/// Removes an entry, without hashing when the map is empty (as it is while
/// a fresh cache fills).
fn remove(rows: &mut Rows, id: i64) {
    if !rows.is_empty() {
        rows.remove(&id);
    }
}

/// Any engine with an [`OrmCache`] in front of its retrieve-by-ID.
///
/// Writes through it keep the cache right; writes that bypass it (another
/// process, another engine handle) are seen once the entry expires.
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

    /// Drops the cached rows that `items` update or delete.
    fn flush_items(&self, items: &[BatchItem<'_>]) {
        for item in items {
            match item.op {
                BatchOp::Update { row, .. } => self.cache.flush_id(item.table, row.id()),
                BatchOp::Delete { id } => self.cache.flush_id(item.table, id),
                BatchOp::Add { .. } => {}
            }
        }
    }
}

impl Storage for CachedEngine {
    fn engine_name(&self) -> &'static str {
        self.inner.engine_name()
    }

    fn ensure_table(&self, table: &'static Table) -> Result<()> {
        self.inner.ensure_table(table)
    }

    fn insert(&self, table: &'static Table, id: Option<i64>, row: &dyn Fields) -> Result<i64> {
        let new_id = self.inner.insert(table, id, row)?;
        let item = BatchItem {
            table,
            op: BatchOp::Add { id, row },
        };
        let tx = self.inner.in_transaction();
        self.cache
            .after_write(&item, &BatchResult::Added(new_id), tx);
        Ok(new_id)
    }

    fn update(
        &self,
        table: &'static Table,
        row: &dyn Fields,
        fields: Option<&[usize]>,
    ) -> Result<bool> {
        // Dropped first: a failure after the write must not leave a stale entry.
        self.cache.flush_id(table, row.id());
        let done = self.inner.update(table, row, fields)?;
        let item = BatchItem {
            table,
            op: BatchOp::Update { row, fields },
        };
        let r = if done {
            BatchResult::Done
        } else {
            BatchResult::Missing
        };
        self.cache
            .after_write(&item, &r, self.inner.in_transaction());
        Ok(done)
    }

    fn delete(&self, table: &'static Table, id: i64) -> Result<bool> {
        self.cache.flush_id(table, id);
        self.inner.delete(table, id)
    }

    fn delete_where(&self, table: &'static Table, filter: &Filter) -> Result<u64> {
        self.cache.flush_table(table);
        let n = self.inner.delete_where(table, filter)?;
        self.cache.flush_table(table);
        Ok(n)
    }

    fn retrieve(
        &self,
        table: &'static Table,
        id: i64,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<bool> {
        if let Some(r) = self.cache.with(table, id, |row| out(row)) {
            r?;
            return Ok(true);
        }
        if !self.cache.covers(table, id) || self.inner.in_transaction() {
            return self.inner.retrieve(table, id, out);
        }
        let mut copy = None;
        let found = self.inner.retrieve(table, id, &mut |row| {
            copy = Some(OwnedRow::from_row(table, row)?);
            out(row)
        })?;
        if let Some(c) = copy {
            self.cache.put(c);
        }
        Ok(found)
    }

    fn select(
        &self,
        table: &'static Table,
        select: &Select,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        self.inner.select(table, select, out)
    }

    fn count(&self, table: &'static Table, filter: &Filter) -> Result<u64> {
        self.inner.count(table, filter)
    }

    fn select_value(
        &self,
        table: &'static Table,
        column: Column,
        select: &Select,
    ) -> Result<Option<Value>> {
        self.inner.select_value(table, column, select)
    }

    fn apply_batch(
        &self,
        items: &[BatchItem<'_>],
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
    ) -> Result<()> {
        self.flush_items(items);
        let start = results.len();
        let r = self.inner.apply_batch(items, results, stop_on_error);
        let tx = self.inner.in_transaction();
        for (item, res) in items.iter().zip(&results[start..]) {
            self.cache.after_write(item, res, tx);
        }
        r
    }

    fn apply_batch_in_transaction(
        &self,
        items: &[BatchItem<'_>],
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
        rollback_on_error: bool,
    ) -> Option<Result<()>> {
        self.flush_items(items);
        let start = results.len();
        let r = self.inner.apply_batch_in_transaction(
            items,
            results,
            stop_on_error,
            rollback_on_error,
        )?;
        // Committed (or undone) before returning: nothing waits for a commit.
        if r.is_ok() {
            for (item, res) in items.iter().zip(&results[start..]) {
                self.cache.after_write(item, res, false);
            }
        }
        Some(r)
    }

    fn expose(&self, table: &'static Table, engine: Arc<dyn Storage>) -> Result<bool> {
        self.inner.expose(table, engine)
    }

    fn sql_select(
        &self,
        table: &'static Table,
        sql: &str,
        params: &[Value],
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<()> {
        self.inner.sql_select(table, sql, params, out)
    }

    fn begin(&self) -> Result<()> {
        self.inner.begin()
    }

    fn commit(&self) -> Result<()> {
        let r = self.inner.commit();
        match r {
            Ok(()) => self.cache.commit(),
            Err(_) => self.cache.rollback(),
        }
        r
    }

    fn rollback(&self) -> Result<()> {
        self.cache.rollback();
        self.inner.rollback()
    }

    fn in_transaction(&self) -> bool {
        self.inner.in_transaction()
    }
}
