//! The ORM cache in an embedded application: `burrow` with its default
//! features (no `http`), a `CachedEngine` in front of SQLite.
//!
//! The staleness bound is checked without clocks: a time to live of an hour
//! stands for "within it", one of zero for "past it" (an entry is never
//! returned once its time to live has elapsed, and zero has elapsed at once).

use std::sync::Arc;
use std::time::Duration;

use burrow::driver::{OwnedRow, RowOps};
use burrow::sqlite::SqliteEngine;
use burrow::{params, CachedEngine, Database, Model, Orm, OrmCache, Record};

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[derive(Record, Debug, Clone, PartialEq, Default)]
struct Note {
    id: i64,
    title: String,
    stars: i64,
}

fn note(title: &str) -> Note {
    Note {
        title: title.into(),
        ..Note::default()
    }
}

/// A client over SQLite in memory with `cache` in front, the cached engine,
/// and the SQLite engine itself, for writes that bypass the cache.
type Cached = (Database, Arc<CachedEngine>, Arc<SqliteEngine>);

fn cached(cache: OrmCache) -> Result<Cached, burrow::Error> {
    let sqlite = Arc::new(SqliteEngine::memory()?);
    let engine = Arc::new(CachedEngine::new(sqlite.clone(), cache));
    let db = Database::open(Model::new().with::<Note>(), engine.clone())?;
    Ok((db, engine, sqlite))
}

/// Every note cached for an hour: longer than any test runs.
fn for_an_hour() -> OrmCache {
    OrmCache::new().table::<Note>(Duration::from_secs(3600))
}

/// [`cached`], with a first note added through the cache.
fn cached_with_a_note(cache: OrmCache) -> Result<(Cached, Note), burrow::Error> {
    let c = cached(cache)?;
    let mut n = note("Cached");
    c.0.add(&mut n)?;
    Ok((c, n))
}

/// Changes the title of `n` in SQLite, behind the cache's back.
fn change_underneath(sqlite: &SqliteEngine, n: &Note, title: &str) -> TestResult {
    let mut changed = n.clone();
    changed.title = title.into();
    assert!(sqlite.update(Note::table(), &changed, None)?);
    Ok(())
}

#[test]
fn a_row_changed_underneath_reads_from_the_cache_within_its_time_to_live() -> TestResult {
    let ((db, engine, sqlite), mut n) = cached_with_a_note(for_an_hour())?;
    change_underneath(&sqlite, &n, "Underneath")?;
    // The add stored the row: the cache answers, not SQLite.
    assert_eq!(db.retrieve::<Note>(n.id)?.title, "Cached");
    // Lists never go through the cache.
    assert_eq!(
        db.select::<Note>(&burrow::Query::all())?[0].title,
        "Underneath"
    );
    // Dropping the entry makes the next retrieve read SQLite, and keep it.
    engine.cache().flush_id(Note::table(), n.id);
    assert_eq!(db.retrieve::<Note>(n.id)?.title, "Underneath");
    change_underneath(&sqlite, &n, "Again")?;
    assert_eq!(db.retrieve::<Note>(n.id)?.title, "Underneath");
    // A write through the cache is seen at once.
    n.title = "Through".into();
    db.update(&mut n)?;
    assert_eq!(db.retrieve::<Note>(n.id)?, n);
    Ok(())
}

#[test]
fn a_row_changed_underneath_reads_from_the_engine_past_its_time_to_live() -> TestResult {
    let ((db, engine, sqlite), n) =
        cached_with_a_note(OrmCache::new().table::<Note>(Duration::ZERO))?;
    assert!(engine.cache().covers(Note::table(), n.id));
    change_underneath(&sqlite, &n, "Underneath")?;
    assert_eq!(db.retrieve::<Note>(n.id)?.title, "Underneath");
    assert!(engine.cache().get(Note::table(), n.id).is_none());
    Ok(())
}

#[test]
fn only_the_ids_configured_are_cached() -> TestResult {
    let ((db, engine, _), mut one) =
        cached_with_a_note(OrmCache::new().ids::<Note>(&[1], Duration::from_secs(3600)))?;
    db.add(&mut note("Two"))?;
    assert!(engine.cache().get(Note::table(), 1).is_some());
    assert!(engine.cache().get(Note::table(), 2).is_none());
    // Within one process, writes through the cache are seen at once.
    one.stars = 5;
    db.update(&mut one)?;
    assert_eq!(db.retrieve::<Note>(1)?.stars, 5);
    engine.cache().flush();
    assert!(engine.cache().get(Note::table(), 1).is_none());
    assert_eq!(db.retrieve::<Note>(1)?, one);
    assert!(engine.cache().get(Note::table(), 1).is_some());
    Ok(())
}

#[test]
fn partial_updates_deletes_and_batches_keep_the_cache_right() -> TestResult {
    let ((db, engine, _), mut n) = cached_with_a_note(for_an_hour())?;
    n.stars = 3;
    db.update_fields(&mut n, &["Stars"])?;
    assert!(engine.cache().get(Note::table(), n.id).is_none());
    assert_eq!(db.retrieve::<Note>(n.id)?.stars, 3);
    db.delete::<Note>(n.id)?;
    assert!(db.get::<Note>(n.id)?.is_none());
    let mut batch = burrow::Batch::new();
    batch.add(note("Batched"));
    let id = db.send(&mut batch)?[0].id().expect("added");
    assert_eq!(
        engine.cache().get(Note::table(), id).map(|r| r.id),
        Some(id)
    );
    assert_eq!(db.retrieve::<Note>(id)?.title, "Batched");
    Ok(())
}

#[test]
fn a_transaction_s_writes_reach_the_cache_only_once_committed() -> TestResult {
    let (db, engine, _) = cached(for_an_hour())?;
    let table = Note::table();
    let mut n = note("First");
    let tx = db.transaction()?;
    tx.add(&mut n)?;
    // The transaction reads its own write; the cache does not hold it yet.
    assert_eq!(tx.retrieve::<Note>(n.id)?, n);
    assert!(engine.cache().get(table, n.id).is_none());
    tx.commit()?;
    assert_eq!(engine.cache().get(table, n.id).map(|r| r.id), Some(n.id));
    // Rolled back (dropped): the entry it dropped stays dropped, and the
    // committed row reads back.
    {
        let tx = db.transaction()?;
        let mut changed = n.clone();
        changed.title = "Rolled back".into();
        tx.update(&mut changed)?;
        assert!(engine.cache().get(table, n.id).is_none());
        assert_eq!(tx.retrieve::<Note>(n.id)?.title, "Rolled back");
    }
    assert!(engine.cache().get(table, n.id).is_none());
    assert_eq!(db.retrieve::<Note>(n.id)?, n);
    // A delete by filter inside a transaction: an entry put back meanwhile
    // (the committed row, read outside it) goes at its commit.
    let tx = db.transaction()?;
    tx.delete_where::<Note>("ID = ?", &params![n.id])?;
    engine.cache().put(OwnedRow::from_fields(&n));
    tx.commit()?;
    assert!(engine.cache().get(table, n.id).is_none());
    assert!(db.get::<Note>(n.id)?.is_none());
    Ok(())
}
