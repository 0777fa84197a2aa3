//! Remote over HTTP: the client ➜ loopback ➜ Burrow server ➜ in-memory SQLite.
//!
//! Each cell starts a fresh server on 127.0.0.1:0 over a fresh in-memory SQLite
//! engine, and drives it through `RemoteEngine` behind the ordinary `Database`.
//! Checks read the server-side engine directly, outside the HTTP path.
//!
//! Writes and reads go through a client as `RemoteEngine::connect` makes it,
//! without a cache. The Cached mode reads By one from a second client's
//! `OrmCache`, in-process: it reads every row once before the timing starts
//! (read-through), so the timed reads never leave the client. A write through
//! a client with a cache also copies each row into it; that cost is the
//! cache's, not the protocol's, and is left out of the insert figures.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use burrow::sqlite::SqliteEngine;
use burrow::{Database, Model, Orm, OrmCache};
use burrow_http::{RemoteEngine, Server};

use crate::sample::Sample;
use crate::targets::{
    sql_fetch, sql_stats, EngineSpec, Mode, Native, OrmTarget, Stats, Target, ALL_MODES,
};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The server-side engine, read directly.
struct ServerSide(Arc<SqliteEngine>);

impl Native for ServerSide {
    fn stats(&self) -> Result<Stats, String> {
        self.0.with_connection(|c| Ok(sql_stats(c))).map_err(err)?
    }

    fn fetch(&self, id: i64) -> Result<Option<Sample>, String> {
        self.0
            .with_connection(|c| Ok(sql_fetch(c, id)))
            .map_err(err)?
    }
}

/// A server and two clients of it: one without a cache (writes and the
/// uncached reads), one with a cache (the Cached mode).
struct RemoteTarget {
    plain: OrmTarget,
    cached: Database,
    // Dropped last: the clients' connections close before the server stops.
    _server: Server,
}

impl Target for RemoteTarget {
    fn insert(&mut self, mode: Mode, rows: &mut Vec<Sample>) -> Result<Vec<i64>, String> {
        self.plain.insert(mode, rows)
    }

    fn prepare_read(&mut self, mode: Mode, n: usize) -> Result<(), String> {
        if mode == Mode::Cached {
            for id in 1..=n as i64 {
                self.cached.retrieve::<Sample>(id).map_err(err)?;
            }
        }
        Ok(())
    }

    fn read(&mut self, mode: Mode, n: usize) -> Result<Vec<Sample>, String> {
        let c = &self.plain.client;
        match mode {
            Mode::Cached => (1..=n as i64)
                .map(|id| self.cached.retrieve::<Sample>(id).map_err(err))
                .collect(),
            Mode::ByOne => (1..=n as i64)
                .map(|id| c.retrieve::<Sample>(id).map_err(err))
                .collect(),
            Mode::AllDirect => c.select::<Sample>(&burrow::Query::all()).map_err(err),
            // Through the server's SQL entry point (GET /root with a SELECT).
            Mode::AllVirtual => c
                .sql_list::<Sample>("SELECT * FROM Sample", &[])
                .map_err(err),
            _ => Err("not a read mode".into()),
        }
    }

    fn stats(&self) -> Result<Stats, String> {
        self.plain.stats()
    }

    fn fetch(&self, id: i64) -> Result<Option<Sample>, String> {
        self.plain.fetch(id)
    }
}

fn open_remote() -> Result<Box<dyn Target>, String> {
    let engine = Arc::new(SqliteEngine::memory().map_err(err)?);
    let hosted =
        Arc::new(Database::open(Model::new().with::<Sample>(), engine.clone()).map_err(err)?);
    let server = Server::builder(hosted, "root")
        .no_auth()
        .bind("127.0.0.1:0")
        .map_err(err)?;
    let cached_engine = RemoteEngine::builder(&server.url())
        .cache(OrmCache::new().table::<Sample>(Duration::from_secs(600)))
        .connect()
        .map_err(err)?;
    let cached =
        Database::open(Model::new().with::<Sample>(), Arc::new(cached_engine)).map_err(err)?;
    let plain = Database::open(
        Model::new().with::<Sample>(),
        Arc::new(RemoteEngine::connect(&server.url()).map_err(err)?),
    )
    .map_err(err)?;
    Ok(Box::new(RemoteTarget {
        plain: OrmTarget {
            client: plain,
            native: Box::new(ServerSide(engine)),
        },
        cached,
        _server: server,
    }))
}

/// The remote configuration: every insert and read mode, and Cached.
pub fn remote_engines() -> Vec<EngineSpec> {
    vec![EngineSpec {
        id: "remote-http",
        title: "Remote HTTP (SQLite in memory)",
        file: false,
        slow_direct: false,
        modes: &ALL_MODES,
        orm: Box::new(|_: Option<&Path>| open_remote()),
        raw: None,
    }]
}
