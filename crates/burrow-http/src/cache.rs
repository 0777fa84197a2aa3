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
use std::sync::{Arc, Mutex, PoisonError, RwLock};
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

struct TableCache {
    table: &'static str,
    rule: CacheRule,
    rows: RwLock<HashMap<i64, (Instant, Arc<OwnedRow>)>>,
}

/// Rows by table and ID, each valid for its table's time to live.
#[derive(Default)]
pub struct OrmCache {
    tables: Vec<TableCache>,
    /// Rows written inside a transaction, per thread: stored at commit,
    /// forgotten at rollback, so that the cache never shows uncommitted data.
    pending: Mutex<Vec<(ThreadId, OwnedRow)>>,
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
            rows: RwLock::new(HashMap::new()),
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
        if t.rule
            .ids
            .as_ref()
            .is_some_and(|ids| !ids.contains(&row.id))
        {
            return;
        }
        let now = Instant::now();
        let mut rows = t.rows.write().unwrap_or_else(PoisonError::into_inner);
        if rows.len() >= t.rule.max_entries && !rows.contains_key(&row.id) {
            rows.retain(|_, (at, _)| now.duration_since(*at) < t.rule.ttl);
            if rows.len() >= t.rule.max_entries {
                return;
            }
        }
        rows.insert(row.id, (now, Arc::new(row)));
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
                    .push((std::thread::current().id(), r));
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
    /// Stores the rows the calling thread wrote in its transaction, which has
    /// just committed.
    pub fn commit(&self) {
        for r in self.take_pending() {
            self.put(r);
        }
    }

    /// Forgets the rows the calling thread wrote in its transaction, which
    /// has just rolled back.
    pub fn rollback(&self) {
        for r in self.take_pending() {
            self.flush_id(r.table, r.id);
        }
    }

    fn take_pending(&self) -> Vec<OwnedRow> {
        let me = std::thread::current().id();
        let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if p.is_empty() {
            return Vec::new();
        }
        let (mine, rest): (Vec<_>, Vec<_>) = p.drain(..).partition(|(t, _)| *t == me);
        *p = rest;
        mine.into_iter().map(|(_, r)| r).collect()
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
        for item in items {
            match item.op {
                BatchOp::Update { row, .. } => self.cache.flush_id(item.table, row.id()),
                BatchOp::Delete { id } => self.cache.flush_id(item.table, id),
                BatchOp::Add { .. } => {}
            }
        }
        let start = results.len();
        let r = self.inner.apply_batch(items, results, stop_on_error);
        let tx = self.inner.in_transaction();
        for (item, res) in items.iter().zip(&results[start..]) {
            self.cache.after_write(item, res, tx);
        }
        r
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
