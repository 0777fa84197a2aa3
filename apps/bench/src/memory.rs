//! The memory engine's rows: static (the ORM straight to the engine; its All
//! Virtual is `SELECT * FROM Sample` answered by the memory engine's own
//! one-table SQL, as mORMot2's static table answers it) and virtual (the table
//! also registered in an in-memory SQLite database, so All Virtual reads go
//! through SQLite's virtual table), and the persistence timing.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use burrow::driver::{Filter, RowOps, Select};
use burrow::memory::{MemoryEngine, MemoryOptions};
use burrow::sqlite::SqliteEngine;
use burrow::{Batch, Database, Model, Orm, Record};

use crate::sample::{make_all, Sample};
use crate::targets::{EngineSpec, Native, OrmTarget, Stats, Target, UNCACHED_MODES};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The engine's own reads, outside the ORM path being measured.
struct MemoryNative(Arc<MemoryEngine>);

impl Native for MemoryNative {
    fn stats(&self) -> Result<Stats, String> {
        let t = Sample::table();
        let mut s = Stats {
            count: 0,
            amount_sum: 0,
            min_id: i64::MAX,
            max_id: 0,
        };
        self.0
            .select(t, &Select::all(), &mut |row| {
                let r = Sample::from_row(row)?;
                s.count += 1;
                s.amount_sum += r.amount.scaled();
                s.min_id = s.min_id.min(r.id);
                s.max_id = s.max_id.max(r.id);
                Ok(())
            })
            .map_err(err)?;
        if s.count == 0 {
            s.min_id = 0;
        }
        Ok(s)
    }

    fn fetch(&self, id: i64) -> Result<Option<Sample>, String> {
        let mut found = None;
        self.0
            .retrieve(Sample::table(), id, &mut |row| {
                found = Some(Sample::from_row(row)?);
                Ok(())
            })
            .map_err(err)?;
        Ok(found)
    }
}

/// `memory-static` and `memory-virtual`.
pub fn memory_engines() -> Vec<EngineSpec> {
    vec![
        EngineSpec {
            id: "memory-static",
            title: "In memory static",
            file: false,
            slow_direct: false,
            modes: &UNCACHED_MODES,
            orm: Box::new(|_: Option<&Path>| {
                let engine = Arc::new(MemoryEngine::new());
                let client =
                    Database::open(Model::new().with::<Sample>(), engine.clone()).map_err(err)?;
                Ok(Box::new(OrmTarget {
                    client,
                    native: Box::new(MemoryNative(engine)),
                }) as Box<dyn Target>)
            }),
            raw: None,
        },
        EngineSpec {
            id: "memory-virtual",
            title: "In memory virtual",
            file: false,
            slow_direct: false,
            modes: &UNCACHED_MODES,
            orm: Box::new(|_: Option<&Path>| {
                let engine = Arc::new(MemoryEngine::new());
                let main = Arc::new(SqliteEngine::memory().map_err(err)?);
                let client = Database::builder(Model::new().with::<Sample>())
                    .default_engine(main)
                    .place::<Sample>(engine.clone())
                    // All Virtual measures SQLite's virtual table, as
                    // mORMot2's does (its direct route off for that cell).
                    .sql_direct(false)
                    .open()
                    .map_err(err)?;
                Ok(Box::new(OrmTarget {
                    client,
                    native: Box::new(MemoryNative(engine)),
                }) as Box<dyn Target>)
            }),
            raw: None,
        },
    ]
}

/// Saving and loading `n` rows in the binary file form, verified: seconds to
/// save, seconds to load, file size in bytes.
pub fn persistence(dir: &Path, n: usize) -> Result<(f64, f64, u64), String> {
    let path = dir.join("persist.bmem");
    let model = || Model::new().with::<Sample>();
    let engine = Arc::new(MemoryEngine::open(MemoryOptions::file(&path)).map_err(err)?);
    {
        let client = Database::open(model(), engine.clone()).map_err(err)?;
        let mut batch = Batch::new();
        batch.add_all(make_all(n));
        client.send(&mut batch).map_err(err)?;
    }
    let start = Instant::now();
    engine.flush().map_err(err)?;
    let save = start.elapsed().as_secs_f64();
    let want = MemoryNative(engine).stats()?;
    let size = std::fs::metadata(&path).map_err(err)?.len();
    let start = Instant::now();
    let loaded = Arc::new(MemoryEngine::open(MemoryOptions::file(&path)).map_err(err)?);
    Database::open(model(), loaded.clone()).map_err(err)?;
    let load = start.elapsed().as_secs_f64();
    let got = MemoryNative(loaded.clone()).stats()?;
    if got != want || got.count != n as i64 {
        return Err(format!("loaded {got:?}, saved {want:?}"));
    }
    let sample = loaded.count(Sample::table(), &Filter::all()).map_err(err)?;
    if sample != n as u64 {
        return Err(format!("loaded {sample} rows, saved {n}"));
    }
    Ok((save, load, size))
}
