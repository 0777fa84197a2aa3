//! The engines every test runs against, the records they share, and helpers.
//!
//! A test body is a plain function `fn body(f: &dyn Factory) -> TestResult`;
//! `conformance!(body, …)` turns each into one `#[test]` per engine, named
//! `module::body::engine`. Adding an engine is one line in [`conformance!`]
//! (plus its [`Factory`]).

use std::error::Error as StdError;
use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::Arc;

use burrow::chrono::{DateTime, NaiveDate, Utc};
use burrow::memory::{MemoryEngine, MemoryOptions};
use burrow::sqlite::{SqliteEngine, SqliteOptions};
use burrow::{Currency, Database, Model, Orm, Query, Record, Ref, Storage};
use tempfile::TempDir;

/// What every test body returns.
pub type TestResult = Result<(), Box<dyn StdError>>;

/// Expands each named body into one `#[test]` per engine.
///
/// The engine list lives here and only here: a new engine is one more
/// `name => factory,` line.
macro_rules! conformance {
    ($($body:ident),+ $(,)?) => {$(
        #[allow(non_snake_case)]
        mod $body {
            engine_tests!($body;
                sqlite_mem => $crate::common::SqliteMem,
                sqlite_file => $crate::common::SqliteFile,
                memory => $crate::common::Memory,
                memory_file => $crate::common::MemoryFile,
                ext_sqlite => $crate::common::ExtSqlite,
                cached => $crate::common::Cached,
                remote => $crate::common::Remote,
                #[cfg_attr(not(burrow_postgres), ignore = "BURROW_POSTGRES_URL is not set")]
                postgres => $crate::common::Server::Postgres,
                #[cfg_attr(not(burrow_mariadb), ignore = "BURROW_MARIADB_URL is not set")]
                mariadb => $crate::common::Server::MariaDb,
            );
        }
    )+};
}

/// One `#[test]` per `engine => factory` pair, calling `super::$body`.
macro_rules! engine_tests {
    ($body:ident; $($(#[$attr:meta])* $engine:ident => $factory:expr),+ $(,)?) => {$(
        #[test]
        $(#[$attr])*
        fn $engine() -> $crate::common::TestResult {
            super::$body(&$factory)
        }
    )+};
}

/// Asserts that `$e` is an error of kind `$kind` and evaluates to the error.
macro_rules! expect_kind {
    ($e:expr, $kind:ident) => {
        match $e {
            Ok(v) => {
                return Err(format!(
                    "line {}: `{}` should fail with {:?}, but gave Ok({:?})",
                    line!(),
                    stringify!($e),
                    burrow::ErrorKind::$kind,
                    v
                )
                .into())
            }
            Err(err) if err.kind() == burrow::ErrorKind::$kind => err,
            Err(err) => {
                return Err(format!(
                    "line {}: `{}` should fail with {:?}, but failed with {:?}: {} ({:?})",
                    line!(),
                    stringify!($e),
                    burrow::ErrorKind::$kind,
                    err.kind(),
                    err,
                    err
                )
                .into())
            }
        }
    };
}

/// Makes fresh, empty stores of one engine configuration.
pub trait Factory: Sync {
    /// A short name for messages.
    fn name(&self) -> &'static str;
    /// A new, empty store.
    fn fresh(&self) -> Result<Store, Box<dyn StdError>>;
    /// Whether another thread's call waits while a transaction is open (SQL
    /// engines); otherwise the engine only keeps it out of the transaction.
    fn serializes_transactions(&self) -> bool {
        true
    }
    /// Whether each write costs a disk sync: heavy tests then do less.
    fn slow_writes(&self) -> bool {
        false
    }
    /// Whether the engine may give a new record an ID that is free but below
    /// the largest ever given (SQLite, once `i64::MAX` is taken); otherwise IDs
    /// are never reused, and past `i64::MAX` only explicit IDs can be added.
    fn reuses_free_ids(&self) -> bool {
        true
    }
    /// Whether text may hold NUL (PostgreSQL's text cannot: it refuses it).
    fn text_holds_nul(&self) -> bool {
        true
    }
    /// Whether dates outside years 0–9999 are stored (MySQL/MariaDB's
    /// `DATE` refuses them).
    fn dates_beyond_four_digit_years(&self) -> bool {
        true
    }
    /// Whether infinite floats are stored (MySQL/MariaDB refuse them).
    fn float_infinities(&self) -> bool {
        true
    }
    /// Whether an optional JSON field tells the document `null` from no
    /// value (JSON on the wire cannot: both are `null`).
    fn json_null_in_option(&self) -> bool {
        true
    }
}

/// `t` as `f`'s engine can store it: where text cannot hold NUL, each NUL
/// becomes U+FFFD (that the NUL itself is refused is a test of its own).
pub fn storable(f: &dyn Factory, t: &str) -> String {
    if f.text_holds_nul() {
        t.to_owned()
    } else {
        t.replace('\u{0}', "\u{FFFD}")
    }
}

/// An opened engine, and its SQLite face for raw SQL checks when it has one.
pub struct Opened {
    pub engine: Arc<dyn Storage>,
    pub sqlite: Option<Arc<SqliteEngine>>,
}

type Opener = Box<dyn Fn() -> burrow::Result<Opened> + Send + Sync>;

/// One store under test: an engine, and how to open the same data again if it
/// persists.
pub struct Store {
    opened: Option<Opened>,
    reopen: Option<Opener>,
    /// For a remote store: the server side, which serves each model asked of
    /// [`Store::client`].
    host: Option<RemoteHost>,
    /// For a cached store: the cache, which raw SQL bypasses.
    cache: Option<Arc<burrow::CachedEngine>>,
    // Declared last: the database files, or the server schema, go after the
    // engine that holds them.
    _dir: Option<TempDir>,
    _scratch: Option<Scratch>,
}

impl Store {
    /// The engine.
    pub fn engine(&self) -> Arc<dyn Storage> {
        match &self.host {
            Some(host) => host.default_engine(),
            None => self.opened.as_ref().expect("open").engine.clone(),
        }
    }

    /// The engine, for a client of `model`: a remote store serves that model
    /// (a server knows the tables of its model only).
    pub fn engine_for(&self, model: Model) -> burrow::Result<Arc<dyn Storage>> {
        match &self.host {
            Some(host) => host.serve(model),
            None => Ok(self.engine()),
        }
    }

    /// A client with `model`, all of its tables in this store's engine.
    pub fn client(&self, model: Model) -> burrow::Result<Database> {
        Database::open(model.clone(), self.engine_for(model)?)
    }

    /// A client with [`model`].
    pub fn open(&self) -> burrow::Result<Database> {
        self.client(model())
    }

    /// The SQLite engine, for raw SQL checks (`None` for other engines).
    pub fn sqlite(&self) -> Option<&SqliteEngine> {
        self.opened.as_ref()?.sqlite.as_deref()
    }

    /// Whether the data outlives the engine (a file).
    pub fn persistent(&self) -> bool {
        self.reopen.is_some()
    }

    /// Closes the engine and opens the same data again. Every client of the old
    /// engine must be dropped first.
    pub fn reopen(&mut self) -> Result<(), Box<dyn StdError>> {
        let opener = self.reopen.as_ref().ok_or("this store does not persist")?;
        let old = self.opened.take().expect("open");
        // The SQLite face, when present, is a second handle on the same engine.
        if Arc::strong_count(&old.engine) > 1 + usize::from(old.sqlite.is_some()) {
            return Err("reopen: a client of the old engine is still alive".into());
        }
        drop(old);
        self.opened = Some(opener()?);
        Ok(())
    }

    /// Runs raw SQL on the SQLite engine; `None` when the engine is not SQLite.
    pub fn raw<R>(
        &self,
        f: impl FnOnce(&burrow::sqlite::rusqlite::Connection) -> burrow::sqlite::rusqlite::Result<R>,
    ) -> Option<burrow::Result<R>> {
        let r = self.sqlite().map(|e| e.with_connection(f));
        // Writes that bypass the cache show once their rows leave it.
        if let Some(c) = &self.cache {
            c.cache().flush();
        }
        r
    }

    /// `SELECT count(*)` straight from SQLite; `None` for other engines.
    pub fn raw_count(&self, table: &str) -> Option<burrow::Result<i64>> {
        let sql = format!("SELECT count(*) FROM \"{table}\"");
        self.raw(|c| c.query_row(&sql, [], |r| r.get(0)))
    }

    /// Whether SQLite still has `table` (`None` for other engines).
    pub fn raw_table_exists(&self, table: &str) -> Option<burrow::Result<bool>> {
        self.raw(|c| {
            c.query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [table],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n == 1)
        })
    }
}

/// The server side of a remote store: one SQLite engine, served over HTTP on
/// loopback for each model a test opens (a server serves one model, and
/// tests of schema changes open several over the same data).
pub struct RemoteHost {
    sqlite: Arc<SqliteEngine>,
    servers: std::sync::Mutex<Vec<burrow_http::Server>>,
    /// The engine of [`Store::engine`], serving [`model`]; made on first use,
    /// so that a test that serves other models finds only their tables.
    default: std::sync::OnceLock<Arc<dyn Storage>>,
}

impl RemoteHost {
    fn default_engine(&self) -> Arc<dyn Storage> {
        self.default
            .get_or_init(|| self.serve(model()).expect("serving the default model"))
            .clone()
    }

    /// A remote engine whose server serves `model` over this host's data.
    fn serve(&self, model: Model) -> burrow::Result<Arc<dyn Storage>> {
        let hosted = Arc::new(Database::open(model, self.sqlite.clone())?);
        let server = burrow_http::Server::builder(hosted, "root")
            .no_auth()
            .threads(1)
            .bind("127.0.0.1:0")?;
        let engine = burrow_http::RemoteEngine::connect(&server.url())?;
        self.servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(server);
        Ok(Arc::new(engine))
    }
}

/// SQLite in memory behind a Burrow server, through the HTTP client engine.
pub struct Remote;

impl Factory for Remote {
    fn name(&self) -> &'static str {
        "remote"
    }
    fn json_null_in_option(&self) -> bool {
        false
    }
    fn fresh(&self) -> Result<Store, Box<dyn StdError>> {
        let sqlite = Arc::new(SqliteEngine::open(
            SqliteOptions::memory().busy_timeout(LOCK_TIMEOUT),
        )?);
        let host = RemoteHost {
            sqlite: sqlite.clone(),
            servers: std::sync::Mutex::new(Vec::new()),
            default: std::sync::OnceLock::new(),
        };
        Ok(Store {
            // The server side's engine; `Store::engine` answers with the
            // remote engine in front of it.
            opened: Some(Opened {
                engine: sqlite.clone(),
                sqlite: Some(sqlite),
            }),
            reopen: None,
            host: Some(host),
            cache: None,
            _dir: None,
            _scratch: None,
        })
    }
}

/// SQLite in memory with the ORM cache in front of reads by ID.
pub struct Cached;

impl Factory for Cached {
    fn name(&self) -> &'static str {
        "cached"
    }
    fn fresh(&self) -> Result<Store, Box<dyn StdError>> {
        let sqlite = Arc::new(SqliteEngine::open(
            SqliteOptions::memory().busy_timeout(LOCK_TIMEOUT),
        )?);
        let ttl = std::time::Duration::from_secs(60);
        let cache = burrow::OrmCache::new()
            .table::<Sample>(ttl)
            .table::<Tag>(ttl);
        let cached = Arc::new(burrow::CachedEngine::new(sqlite.clone(), cache));
        Ok(Store {
            opened: Some(Opened {
                engine: cached.clone(),
                sqlite: Some(sqlite),
            }),
            reopen: None,
            host: None,
            cache: Some(cached),
            _dir: None,
            _scratch: None,
        })
    }
}

fn sqlite_opened(e: SqliteEngine) -> Opened {
    let e = Arc::new(e);
    Opened {
        engine: e.clone(),
        sqlite: Some(e),
    }
}

/// How long a call waits for another transaction before failing as busy:
/// long enough for every test's legitimate wait on a loaded machine, short
/// enough that the tests of the failure itself stay quick.
pub const LOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// SQLite in memory.
pub struct SqliteMem;

impl Factory for SqliteMem {
    fn name(&self) -> &'static str {
        "sqlite-mem"
    }
    fn fresh(&self) -> Result<Store, Box<dyn StdError>> {
        Ok(Store {
            opened: Some(sqlite_opened(SqliteEngine::open(
                SqliteOptions::memory().busy_timeout(LOCK_TIMEOUT),
            )?)),
            reopen: None,
            host: None,
            cache: None,
            _dir: None,
            _scratch: None,
        })
    }
}

/// SQLite in a file of a temporary directory, with the default (safe) options.
pub struct SqliteFile;

impl Factory for SqliteFile {
    fn name(&self) -> &'static str {
        "sqlite-file"
    }
    fn fresh(&self) -> Result<Store, Box<dyn StdError>> {
        let dir = tempfile::tempdir()?;
        let path: PathBuf = dir.path().join("burrow.db");
        let open = move || {
            SqliteEngine::open(SqliteOptions::file(&path).busy_timeout(LOCK_TIMEOUT))
                .map(sqlite_opened)
        };
        Ok(Store {
            opened: Some(open()?),
            reopen: Some(Box::new(open)),
            host: None,
            cache: None,
            _dir: Some(dir),
            _scratch: None,
        })
    }
    fn slow_writes(&self) -> bool {
        true
    }
}

fn memory_opened(e: MemoryEngine) -> Opened {
    Opened {
        engine: Arc::new(e),
        sqlite: None,
    }
}

/// The memory engine, without a file.
pub struct Memory;

impl Factory for Memory {
    fn name(&self) -> &'static str {
        "memory"
    }
    fn fresh(&self) -> Result<Store, Box<dyn StdError>> {
        Ok(Store {
            opened: Some(memory_opened(MemoryEngine::open(
                MemoryOptions::memory().lock_timeout(LOCK_TIMEOUT),
            )?)),
            reopen: None,
            host: None,
            cache: None,
            _dir: None,
            _scratch: None,
        })
    }
    fn reuses_free_ids(&self) -> bool {
        false
    }
}

/// The memory engine persisted to a binary file, written after every commit so
/// that a reopen sees what was committed.
pub struct MemoryFile;

impl Factory for MemoryFile {
    fn name(&self) -> &'static str {
        "memory-file"
    }
    fn fresh(&self) -> Result<Store, Box<dyn StdError>> {
        let dir = tempfile::tempdir()?;
        let path: PathBuf = dir.path().join("burrow.bmem");
        let open = move || {
            MemoryEngine::open(
                MemoryOptions::file(&path)
                    .save_on_commit(true)
                    .lock_timeout(LOCK_TIMEOUT),
            )
            .map(memory_opened)
        };
        Ok(Store {
            opened: Some(open()?),
            reopen: Some(Box::new(open)),
            host: None,
            cache: None,
            _dir: Some(dir),
            _scratch: None,
        })
    }
    fn reuses_free_ids(&self) -> bool {
        false
    }
}

/// A SQLite file through the external-database layer (`burrow-sql`).
pub struct ExtSqlite;

impl Factory for ExtSqlite {
    fn name(&self) -> &'static str {
        "ext-sqlite"
    }
    fn fresh(&self) -> Result<Store, Box<dyn StdError>> {
        let dir = tempfile::tempdir()?;
        let url = format!("sqlite://{}", dir.path().join("burrow.db").display());
        let open = move || {
            burrow_sql::SqlEngine::builder(&url)
                .lock_timeout(LOCK_TIMEOUT)
                .open()
                .map(|e| Opened {
                    engine: Arc::new(e),
                    sqlite: None,
                })
        };
        Ok(Store {
            opened: Some(open()?),
            reopen: Some(Box::new(open)),
            host: None,
            cache: None,
            _dir: Some(dir),
            _scratch: None,
        })
    }
    fn slow_writes(&self) -> bool {
        true
    }
}

/// A database server through the external layer, each test in a schema
/// (PostgreSQL) or database (MariaDB) of its own, dropped after it, so tests
/// run in parallel and leave nothing behind. Date-times are stored as text, so
/// the suite's exact comparisons hold (native timestamps keep microseconds:
/// `burrow-sql`'s own tests cover them). Faults only a server has (a killed
/// connection, a too-long value, several engines on one database) are tested
/// in `burrow-sql` too. The server's URL comes from
/// `BURROW_POSTGRES_URL` / `BURROW_MARIADB_URL`; unset, the test passes as
/// skipped with one line saying so, except in CI, where it fails.
pub enum Server {
    Postgres,
    MariaDb,
}

/// A test's schema or database on a server, dropped with everything in it.
pub struct Scratch {
    admin: burrow_sql::SqlEngine,
    drop_sql: String,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(e) = self.admin.execute(&self.drop_sql, &[]) {
            eprintln!("could not drop a test schema: {e}");
        }
    }
}

static SCRATCH_SERIAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Server {
    fn var(&self) -> &'static str {
        match self {
            Server::Postgres => "BURROW_POSTGRES_URL",
            Server::MariaDb => "BURROW_MARIADB_URL",
        }
    }
}

impl Factory for Server {
    fn name(&self) -> &'static str {
        match self {
            Server::Postgres => "postgres",
            Server::MariaDb => "mariadb",
        }
    }
    fn fresh(&self) -> Result<Store, Box<dyn StdError>> {
        let var = self.var();
        // Without the URL the test is compiled as ignored (build.rs); run
        // with --ignored anyway, it fails saying why.
        let url = match std::env::var(var) {
            Ok(u) if !u.is_empty() => u,
            _ => return Err(format!("{var} is not set").into()),
        };
        let name = format!(
            "burrow_conf_{}_{}",
            std::process::id(),
            SCRATCH_SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let admin = burrow_sql::SqlEngine::builder(&url).pool_size(1).open()?;
        let (create, drop_sql) = match self {
            Server::Postgres => (
                format!("CREATE SCHEMA \"{name}\""),
                format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"),
            ),
            Server::MariaDb => (
                format!("CREATE DATABASE `{name}`"),
                format!("DROP DATABASE IF EXISTS `{name}`"),
            ),
        };
        admin.execute(&create, &[])?;
        let scratch = Scratch { admin, drop_sql };
        let open = move || {
            burrow_sql::SqlEngine::builder(&url)
                .schema(&name)
                .datetime_storage(burrow_sql::DateTimeStorage::Text)
                .open()
                .map(|e| Opened {
                    engine: Arc::new(e),
                    sqlite: None,
                })
        };
        Ok(Store {
            opened: Some(open()?),
            reopen: Some(Box::new(open)),
            host: None,
            cache: None,
            _dir: None,
            _scratch: Some(scratch),
        })
    }
    fn slow_writes(&self) -> bool {
        true
    }
    /// Other connections' writes do not wait for a transaction (MVCC).
    fn serializes_transactions(&self) -> bool {
        false
    }
    /// A sequence or auto-increment never goes back below its maximum.
    fn reuses_free_ids(&self) -> bool {
        false
    }
    fn text_holds_nul(&self) -> bool {
        !matches!(self, Server::Postgres)
    }
    fn dates_beyond_four_digit_years(&self) -> bool {
        !matches!(self, Server::MariaDb)
    }
    fn float_infinities(&self) -> bool {
        !matches!(self, Server::MariaDb)
    }
}

// ---------------------------------------------------------------------------
// Records shared by the tests.

/// The main test record: a unique name, an index, every common kind, and both
/// automatic times.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Sample")]
pub struct Sample {
    pub id: i64,
    #[burrow(unique)]
    pub name: String,
    #[burrow(index)]
    pub last_name: String,
    pub amount: Currency,
    pub age: i32,
    pub born: NaiveDate,
    pub note: Option<String>,
    #[burrow(created)]
    pub created_at: DateTime<Utc>,
    #[burrow(modified)]
    pub changed: DateTime<Utc>,
}

impl Sample {
    /// A sample with these values and the rest default.
    pub fn new(name: &str, age: i32, amount: &str) -> Self {
        Sample {
            name: name.to_owned(),
            last_name: format!("Last{age}"),
            amount: cur(amount),
            age,
            born: date(1970 + age.rem_euclid(50), 1 + age.rem_euclid(12) as u32, 1),
            ..Sample::default()
        }
    }
}

/// A second table, for batches and transactions across tables.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Tag")]
pub struct Tag {
    pub id: i64,
    #[burrow(unique)]
    pub label: String,
    pub owner: Ref<Sample>,
    pub weight: f64,
}

impl Tag {
    /// A tag with this label and owner.
    pub fn new(label: &str, owner: i64) -> Self {
        Tag {
            id: 0,
            label: label.to_owned(),
            owner: Ref::new(owner),
            weight: 1.5,
        }
    }
}

/// A record whose table is in no model.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Stranger")]
pub struct Stranger {
    pub id: i64,
    pub name: String,
}

/// The model of [`Sample`] and [`Tag`].
pub fn model() -> Model {
    Model::new().with::<Sample>().with::<Tag>()
}

/// Parses a currency amount.
pub fn cur(s: &str) -> Currency {
    s.parse()
        .unwrap_or_else(|e| panic!("bad currency in a test: {e}"))
}

/// A date.
pub fn date(y: i32, m: u32, d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, d).expect("valid date in a test")
}

/// Every `T`, in ID order.
pub fn all<T: Record>(orm: &impl Orm) -> burrow::Result<Vec<T>> {
    orm.select(&Query::all().order_by("ID"))
}

/// Adds `n` samples named `{prefix}{i}` with ages 0..n and amounts i.5;
/// returns them with their IDs.
pub fn seed(orm: &impl Orm, prefix: &str, n: i32) -> burrow::Result<Vec<Sample>> {
    (0..n)
        .map(|i| {
            let mut s = Sample::new(&format!("{prefix}{i}"), i, &format!("{i}.5"));
            orm.add(&mut s)?;
            Ok(s)
        })
        .collect()
}

/// Fails with a message unless `a == b`.
pub fn same<T: PartialEq + Debug>(a: &T, b: &T, what: &str) -> TestResult {
    if a == b {
        Ok(())
    } else {
        Err(format!("{what}: {a:#?}\n  !=\n{b:#?}").into())
    }
}
