//! The ORM family: `World` and `Fortune` as Burrow records, read and written
//! through [`Orm`] on the external PostgreSQL engine, or on an embedded
//! engine filled at start.

use std::sync::Arc;
use std::time::Duration;

use burrow::driver::OwnedRow;
use burrow::memory::MemoryEngine;
use burrow::prelude::*;
use burrow::sql::SqlEngine;
use burrow::sqlite::SqliteEngine;
use burrow::{Batch, CachedEngine, OrmCache, Query};
use serde::Serialize;

use crate::gather::Gather;
use crate::{random_id, ROWS};

/// A row of TFB's `World` table.
#[derive(Record, Debug, Clone, PartialEq, Eq, Serialize)]
#[burrow(table = "World")]
pub struct World {
    /// 1..=10,000.
    pub id: i64,
    /// 1..=10,000.
    #[serde(rename = "randomNumber")]
    pub random_number: i32,
}

/// A row of TFB's `Fortune` table.
#[derive(Record, Debug, Clone, PartialEq, Eq)]
#[burrow(table = "Fortune")]
pub struct Fortune {
    /// The row's ID (0 for the one added at request time).
    pub id: i64,
    /// The text, any UTF-8.
    pub message: String,
}

/// Where the ORM family's tables live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Store {
    /// The external PostgreSQL engine, on TFB's database at this URL.
    Postgres(String),
    /// Embedded SQLite, in memory, filled at start.
    Sqlite,
    /// The memory engine, filled at start.
    Memory,
}

/// How long a cached `World` row is served: the cached-queries test reads
/// rows no other endpoint writes (see [`OrmSide`]), so a long life is safe,
/// and an expired row is read again from the engine on its next request.
const CACHE_TTL: Duration = Duration::from_secs(3600);

/// The ORM family's state, shared by every server.
pub struct OrmSide {
    db: Arc<Database>,
    /// `World` through the ORM cache. `/updates` writes through `db`, so a
    /// cached row may lag an update until its time to live ends, which TFB
    /// allows of a cache.
    cached: Arc<Database>,
    cache_engine: Arc<CachedEngine>,
    /// PostgreSQL's calls, which block, run on these threads, gathered
    /// across requests. Embedded engines answer in microseconds without
    /// blocking on a network, so their calls run on the event loop (`None`).
    gather: Option<Gather>,
}

impl OrmSide {
    /// Opens the store (for PostgreSQL, a pool of `pool` connections used by
    /// `threads` threads) and, for an embedded one, fills it as TFB's
    /// database is filled.
    pub fn open(store: &Store, pool: usize, threads: usize) -> burrow::Result<OrmSide> {
        let model = || Model::new().with::<World>().with::<Fortune>();
        let (engine, inline): (Arc<dyn burrow::Storage>, bool) = match store {
            Store::Postgres(url) => {
                let e = SqlEngine::builder(url)
                    .pool_size(pool.max(1))
                    .map_column("World", "ID", "id")
                    .map_column("World", "RandomNumber", "randomNumber")
                    .map_column("Fortune", "ID", "id")
                    .map_column("Fortune", "Message", "message")
                    // No transaction ever spans these writes: spare the
                    // server a savepoint per statement.
                    .statement_savepoints(false)
                    .open()?;
                (Arc::new(e), false)
            }
            Store::Sqlite => (Arc::new(SqliteEngine::memory()?), true),
            Store::Memory => (Arc::new(MemoryEngine::new()), true),
        };
        let db = Database::open(model(), engine.clone())?;
        if inline {
            fill(&db)?;
        }
        let cache_engine = Arc::new(CachedEngine::new(
            engine,
            OrmCache::new().table::<World>(CACHE_TTL),
        ));
        let cached = Database::open(model(), cache_engine.clone())?;
        let db = Arc::new(db);
        let gather = match inline {
            true => None,
            false => Some(Gather::start(db.clone(), threads)?),
        };
        let side = OrmSide {
            db,
            cached: Arc::new(cached),
            cache_engine,
            gather,
        };
        side.warm_cache()?;
        Ok(side)
    }

    /// Loads every `World` row into the cache, as a cache-backed service
    /// would at start.
    fn warm_cache(&self) -> burrow::Result<()> {
        let cache = self.cache_engine.cache();
        self.cached
            .for_each::<World>(&Query::all(), &mut |w: &World| {
                cache.put(OwnedRow::from_fields(w));
                Ok(())
            })?;
        Ok(())
    }

    /// Whether calls run on the event loop (see [`OrmSide::run`]).
    pub fn inline(&self) -> bool {
        self.gather.is_none()
    }

    /// Runs `f` with the database: at once for an embedded engine, on the
    /// gathering threads for PostgreSQL, whose synchronous calls must not
    /// hold an event-loop thread.
    pub async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Database) -> burrow::Result<R> + Send + 'static,
    ) -> burrow::Result<R> {
        match &self.gather {
            Some(g) => g.call(f).await,
            None => f(&self.db),
        }
    }

    /// The `World` rows with these IDs, each read by its own query; on
    /// PostgreSQL read together with other requests' rows (see [`Gather`]).
    async fn read(&self, ids: Vec<i64>) -> burrow::Result<Vec<World>> {
        match &self.gather {
            Some(g) => g.read(ids).await,
            None => rows(&self.db, &ids),
        }
    }

    /// One random row.
    pub async fn one(&self) -> burrow::Result<World> {
        let mut rows = self.read(vec![random_id()]).await?;
        rows.pop().ok_or_else(|| lost("no row answered"))
    }

    /// `n` random rows, each read by its own query.
    pub async fn many(&self, n: usize) -> burrow::Result<Vec<World>> {
        self.read((0..n).map(|_| random_id()).collect()).await
    }

    /// `n` random rows, each given a new random number and written back in
    /// one batch (on PostgreSQL, one array-bound `UPDATE`).
    pub async fn update(&self, n: usize) -> burrow::Result<Vec<World>> {
        let mut rows = self.many(n).await?;
        // A row drawn twice is written once, and answered with that value
        // both times.
        let mut fresh = std::collections::HashMap::with_capacity(n);
        for w in &mut rows {
            w.random_number = *fresh
                .entry(w.id)
                .or_insert_with(|| new_number(w.random_number));
        }
        let mut ids: Vec<(i64, i32)> = fresh.into_iter().collect();
        // In ID order, so that concurrent requests lock rows in one order.
        ids.sort_unstable();
        let mut batch = Batch::new();
        for (id, random_number) in ids {
            batch.update_fields(World { id, random_number }, &["RandomNumber"])?;
        }
        self.run(move |db| db.send(&mut batch).map(drop)).await?;
        Ok(rows)
    }

    /// `n` random rows from the ORM cache; a row it does not hold (expired)
    /// is read through the cache, which keeps it again.
    pub async fn cached(&self, n: usize) -> burrow::Result<Vec<World>> {
        let cache = self.cache_engine.cache();
        let mut out = Vec::with_capacity(n);
        let mut missing = Vec::new();
        for _ in 0..n {
            let id = random_id();
            match cache.with(World::table(), id, |row| World::from_row(row)) {
                Some(w) => out.push(w?),
                None => missing.push(id),
            }
        }
        if !missing.is_empty() {
            let db = self.cached.clone();
            let rows = match self.gather {
                None => rows(&db, &missing)?,
                Some(_) => tokio::task::spawn_blocking(move || rows(&db, &missing))
                    .await
                    .map_err(|e| lost(&format!("ORM call failed: {e}")))??,
            };
            out.extend(rows);
        }
        Ok(out)
    }

    /// Every fortune, read by this request's own query (on PostgreSQL sent
    /// with other requests' queries, see [`Gather`]).
    pub async fn fortunes(&self) -> burrow::Result<Vec<Fortune>> {
        match &self.gather {
            Some(g) => g.fortunes().await,
            None => self.db.list::<Fortune>("", &[]),
        }
    }
}

/// Rows that must exist (TFB's IDs are 1..=10,000), each read by its own
/// query.
pub(crate) fn rows(db: &Database, ids: &[i64]) -> burrow::Result<Vec<World>> {
    must_exist(db.get_many::<World>(ids)?.into_iter().zip(ids))
}

/// The rows of `get_many`, each with its ID: a missing one is
/// [`burrow::Error::NotFound`].
pub(crate) fn must_exist<'i>(
    rows: impl Iterator<Item = (Option<World>, &'i i64)>,
) -> burrow::Result<Vec<World>> {
    rows.map(|(row, &id)| row.ok_or(burrow::Error::NotFound { table: "World", id }))
        .collect()
}

fn lost(why: &str) -> burrow::Error {
    burrow::Error::Io(std::io::Error::other(why.to_owned()))
}

/// A new random number, different from the old one so that every update
/// really changes its row.
pub(crate) fn new_number(old: i32) -> i32 {
    loop {
        let n = random_id() as i32;
        if n != old {
            return n;
        }
    }
}

/// Fills an embedded store as TFB's scripts fill PostgreSQL.
fn fill(db: &Database) -> burrow::Result<()> {
    let mut batch = Batch::new();
    for id in 1..=ROWS {
        batch.add_with_id(
            World {
                id,
                random_number: random_id() as i32,
            },
            id,
        );
    }
    for (id, message) in crate::FORTUNES.iter().enumerate() {
        batch.add_with_id(
            Fortune {
                id: id as i64 + 1,
                message: (*message).to_owned(),
            },
            id as i64 + 1,
        );
    }
    db.send(&mut batch)?;
    Ok(())
}
