//! The two ways each engine configuration is driven: through Burrow's ORM, and
//! with the raw driver alone (the baseline).

use std::path::Path;
use std::sync::Arc;

use burrow::chrono::Utc;
use burrow::driver::datetime::{
    parse_date, parse_datetime, write_date, write_datetime, DATETIME_BUF,
};
use burrow::sqlite::rusqlite::{self, params, Connection};
use burrow::sqlite::{SqliteEngine, SqliteOptions, Synchronous};
use burrow::{Batch, Currency, Database, Model, Orm, Query};

use crate::sample::{Sample, RAW_DDL};

/// A benchmark mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Direct,
    Batch,
    Trans,
    BatchTrans,
    ByOne,
    AllVirtual,
    AllDirect,
    Cached,
}

impl Mode {
    pub const INSERTS: [Mode; 4] = [Mode::Direct, Mode::Batch, Mode::Trans, Mode::BatchTrans];
    pub const READS: [Mode; 4] = [Mode::ByOne, Mode::AllVirtual, Mode::AllDirect, Mode::Cached];

    pub fn id(self) -> &'static str {
        match self {
            Mode::Direct => "direct",
            Mode::Batch => "batch",
            Mode::Trans => "trans",
            Mode::BatchTrans => "batch-trans",
            Mode::ByOne => "by-one",
            Mode::AllVirtual => "all-virtual",
            Mode::AllDirect => "all-direct",
            Mode::Cached => "cached",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Mode::Direct => "Direct",
            Mode::Batch => "Batch",
            Mode::Trans => "Trans",
            Mode::BatchTrans => "Batch Trans",
            Mode::ByOne => "By one",
            Mode::AllVirtual => "All Virtual",
            Mode::AllDirect => "All Direct",
            Mode::Cached => "Cached",
        }
    }
}

/// Totals of a filled table, read by the engine's own means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub count: i64,
    /// Sum of Amount in 1/10,000.
    pub amount_sum: i64,
    pub min_id: i64,
    pub max_id: i64,
}

/// What a timed run needs: the database, opened fresh.
pub trait Target {
    /// Inserts `rows` in `mode`; returns the IDs in order. The rows stay the
    /// caller's (a batch may take them), so that freeing the input is not timed.
    fn insert(&mut self, mode: Mode, rows: &mut Vec<Sample>) -> Result<Vec<i64>, String>;
    /// Reads `n` rows (IDs 1..=n) in `mode`.
    fn read(&mut self, mode: Mode, n: usize) -> Result<Vec<Sample>, String>;
    /// Gets ready, untimed, for a `read` of `n` rows in `mode` (a client cache
    /// is filled for Cached).
    fn prepare_read(&mut self, _mode: Mode, _n: usize) -> Result<(), String> {
        Ok(())
    }
    /// The table's totals, read outside the path being measured.
    fn stats(&self) -> Result<Stats, String>;
    /// One row, read outside the path being measured.
    fn fetch(&self, id: i64) -> Result<Option<Sample>, String>;
}

/// Opens a fresh target: in a new file under the given path when the engine
/// keeps one.
pub type Opener = Box<dyn Fn(Option<&Path>) -> Result<Box<dyn Target>, String>>;

/// A row of the result tables: one engine configuration.
pub struct EngineSpec {
    pub id: &'static str,
    pub title: &'static str,
    /// Whether it needs a fresh file per run.
    pub file: bool,
    /// Whether every Direct insert waits for the disk (fewer rows are used).
    pub slow_direct: bool,
    /// The modes it runs; others print as "-".
    pub modes: &'static [Mode],
    pub orm: Opener,
    /// The raw driver doing the same work, when there is one.
    pub raw: Option<Opener>,
}

pub const ALL_MODES: [Mode; 8] = [
    Mode::Direct,
    Mode::Batch,
    Mode::Trans,
    Mode::BatchTrans,
    Mode::ByOne,
    Mode::AllVirtual,
    Mode::AllDirect,
    Mode::Cached,
];

/// Every mode but Cached: engines without a cache in front.
pub const UNCACHED_MODES: [Mode; 7] = [
    Mode::Direct,
    Mode::Batch,
    Mode::Trans,
    Mode::BatchTrans,
    Mode::ByOne,
    Mode::AllVirtual,
    Mode::AllDirect,
];

/// Verification reads that a storage engine answers natively.
pub trait Native {
    fn stats(&self) -> Result<Stats, String>;
    fn fetch(&self, id: i64) -> Result<Option<Sample>, String>;
}

/// An error as the message the bench prints.
pub fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Burrow's ORM over some engine, with that engine's native reads to verify.
pub struct OrmTarget {
    pub client: Database,
    pub native: Box<dyn Native>,
}

impl Target for OrmTarget {
    fn insert(&mut self, mode: Mode, rows: &mut Vec<Sample>) -> Result<Vec<i64>, String> {
        let c = &self.client;
        match mode {
            Mode::Direct => rows.iter_mut().map(|r| c.add(r).map_err(err)).collect(),
            Mode::Trans => {
                let tx = c.transaction().map_err(err)?;
                let ids = rows
                    .iter_mut()
                    .map(|r| tx.add(r).map_err(err))
                    .collect::<Result<_, _>>()?;
                tx.commit().map_err(err)?;
                Ok(ids)
            }
            Mode::Batch | Mode::BatchTrans => {
                let mut batch = Batch::new();
                batch.add_all(std::mem::take(rows));
                let results = if mode == Mode::BatchTrans {
                    let tx = c.transaction().map_err(err)?;
                    let results = tx.send(&mut batch).map_err(err)?;
                    tx.commit().map_err(err)?;
                    results
                } else {
                    c.send(&mut batch).map_err(err)?
                };
                results
                    .iter()
                    .map(|r| r.id().ok_or_else(|| format!("batch item failed: {r:?}")))
                    .collect()
            }
            _ => Err("not an insert mode".into()),
        }
    }

    fn read(&mut self, mode: Mode, n: usize) -> Result<Vec<Sample>, String> {
        match mode {
            Mode::ByOne => (1..=n as i64)
                .map(|id| self.client.retrieve::<Sample>(id).map_err(err))
                .collect(),
            Mode::AllDirect => self.client.select::<Sample>(&Query::all()).map_err(err),
            // Through SQL on the main SQLite engine, where a table of another
            // engine is a virtual table.
            Mode::AllVirtual => self
                .client
                .sql_list::<Sample>("SELECT * FROM Sample", &[])
                .map_err(err),
            _ => Err("not a read mode".into()),
        }
    }

    fn stats(&self) -> Result<Stats, String> {
        self.native.stats()
    }

    fn fetch(&self, id: i64) -> Result<Option<Sample>, String> {
        self.native.fetch(id)
    }
}

/// The raw driver alone: prepared statements and hand-written row mapping, the
/// best it can do for each mode.
pub struct RawTarget {
    conn: Connection,
}

const RAW_INSERT: &str = "INSERT INTO Sample (FirstName,LastName,Amount,BirthDate,LastChange,CreatedAt) VALUES (?,?,?,?,?,?)";
pub(crate) const RAW_SELECT: &str =
    "SELECT ID,FirstName,LastName,Amount,BirthDate,LastChange,CreatedAt FROM Sample";
/// Rows per multi-row INSERT, as the ORM uses.
const RAW_BULK: usize = 200;

/// How a raw connection opens its file, beyond its row's `synchronous` and
/// locking mode: as the ORM side of the same row opens it.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawFile {
    /// SQLite's VFS (`None`: its default).
    pub vfs: Option<&'static str>,
    /// A write-ahead log instead of the rollback journal.
    pub wal: bool,
    /// Keyed with the bench's passphrase, as the ORM's encrypted row is.
    pub encrypted: bool,
}

/// How the shared-locking file rows (both SQLite layers) open their file,
/// on both sides: a write-ahead log, and SQLite's `unix-excl` VFS, which
/// locks the file against other processes once, at open, as mORMot2 opens
/// every SQLite file on Linux. The locking mode stays NORMAL: connections of
/// this process lock each other as usual. In rollback mode each read in
/// autocommit takes and drops a shared lock and looks for another process's
/// hot journal (4 fcntl, 3 stat and a pread per by-ID read, most of its
/// time); with both, it makes no system call. `synchronous=FULL` in WAL
/// syncs the log at each commit, so a commit still survives a power cut.
pub const SHARED_FILE: RawFile = RawFile {
    vfs: Some("unix-excl"),
    wal: true,
    encrypted: false,
};

/// How the exclusive file rows (both SQLite layers) open their file, on
/// both sides: a write-ahead log. Under exclusive locking SQLite keeps the
/// log's index in the process's memory (no `-shm` file), and a one-row
/// commit appends its pages to the log, where the rollback journal wrote
/// each page's old content to the journal, the page to the file, then
/// zeroed the journal's header (6 writes per commit against 1 through the
/// engine's log VFS). Direct inserts went 1.7–2.2× faster on both sides of
/// the embedded row; Batch, Batch Trans and the reads moved within the
/// noise of three alternating runs, Trans by 0.75–1.1×.
pub const EXCLUSIVE_FILE: RawFile = RawFile {
    vfs: None,
    wal: true,
    encrypted: false,
};

impl RawTarget {
    /// A connection to a new database at `path` (`None`: in memory), opened
    /// as `file` says, with the bench's table.
    pub fn open_as(
        path: Option<&Path>,
        sync: Synchronous,
        exclusive: bool,
        file: RawFile,
    ) -> Result<Self, String> {
        let conn = match (path, file.vfs) {
            (Some(p), Some(vfs)) => {
                Connection::open_with_flags_and_vfs(p, rusqlite::OpenFlags::default(), vfs)
            }
            (Some(p), None) => Connection::open(p),
            (None, _) => Connection::open_in_memory(),
        }
        .map_err(err)?;
        if file.encrypted {
            // A constant of this program, not user input: spliced safely.
            conn.execute_batch(&format!("PRAGMA key = '{BENCH_PASSPHRASE}';"))
                .map_err(err)?;
        }
        let sync = match sync {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
            Synchronous::Off => "OFF",
        };
        let lock = if exclusive { "EXCLUSIVE" } else { "NORMAL" };
        let journal = if file.wal {
            "PRAGMA journal_mode=WAL;"
        } else {
            ""
        };
        conn.execute_batch(&format!(
            "PRAGMA synchronous={sync}; PRAGMA locking_mode={lock}; {journal} {RAW_DDL}"
        ))
        .map_err(err)?;
        Ok(RawTarget { conn })
    }

    fn bind_row(
        stmt: &mut rusqlite::Statement<'_>,
        at: usize,
        r: &Sample,
        now: &str,
    ) -> rusqlite::Result<()> {
        let mut buf = [0u8; DATETIME_BUF];
        stmt.raw_bind_parameter(at, r.first_name.as_str())?;
        stmt.raw_bind_parameter(at + 1, r.last_name.as_str())?;
        stmt.raw_bind_parameter(at + 2, r.amount.scaled())?;
        stmt.raw_bind_parameter(at + 3, write_date(r.birth_date, &mut buf))?;
        stmt.raw_bind_parameter(at + 4, now)?;
        stmt.raw_bind_parameter(at + 5, now)
    }

    fn one_by_one(&self, rows: &[Sample]) -> rusqlite::Result<Vec<i64>> {
        let mut stmt = self.conn.prepare(RAW_INSERT)?;
        let mut ids = Vec::with_capacity(rows.len());
        let mut buf = [0u8; DATETIME_BUF];
        for r in rows {
            let now = write_datetime(Utc::now(), &mut buf);
            Self::bind_row(&mut stmt, 1, r, now)?;
            stmt.raw_execute()?;
            ids.push(self.conn.last_insert_rowid());
        }
        Ok(ids)
    }

    fn multi_row(&self, rows: &[Sample]) -> rusqlite::Result<Vec<i64>> {
        let group = "(?,?,?,?,?,?)";
        let sql_for = |n: usize| {
            format!(
                "INSERT INTO Sample (FirstName,LastName,Amount,BirthDate,LastChange,CreatedAt) VALUES {}",
                vec![group; n].join(",")
            )
        };
        let mut full = self.conn.prepare(&sql_for(RAW_BULK))?;
        let mut buf = [0u8; DATETIME_BUF];
        let now = write_datetime(Utc::now(), &mut buf).to_owned();
        let mut ids = Vec::with_capacity(rows.len());
        for chunk in rows.chunks(RAW_BULK) {
            let mut tail;
            let stmt = if chunk.len() == RAW_BULK {
                &mut full
            } else {
                tail = self.conn.prepare(&sql_for(chunk.len()))?;
                &mut tail
            };
            for (k, r) in chunk.iter().enumerate() {
                Self::bind_row(stmt, k * 6 + 1, r, &now)?;
            }
            stmt.raw_execute()?;
            let last = self.conn.last_insert_rowid();
            ids.extend(last - chunk.len() as i64 + 1..=last);
        }
        Ok(ids)
    }

    fn in_tx<T>(&self, f: impl FnOnce() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        let r = f()?;
        self.conn.execute_batch("COMMIT")?;
        Ok(r)
    }
}

pub(crate) fn raw_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Sample> {
    let text = |i: usize| -> rusqlite::Result<&str> {
        r.get_ref(i)?.as_str().map_err(rusqlite::Error::from)
    };
    let bad = |i: usize| {
        rusqlite::Error::InvalidColumnType(i, "date".into(), rusqlite::types::Type::Text)
    };
    Ok(Sample {
        id: r.get(0)?,
        first_name: text(1)?.to_owned(),
        last_name: text(2)?.to_owned(),
        amount: Currency::from_scaled(r.get(3)?),
        birth_date: parse_date(text(4)?).ok_or_else(|| bad(4))?,
        last_change: parse_datetime(text(5)?).ok_or_else(|| bad(5))?,
        created_at: parse_datetime(text(6)?).ok_or_else(|| bad(6))?,
    })
}

impl Target for RawTarget {
    fn insert(&mut self, mode: Mode, rows: &mut Vec<Sample>) -> Result<Vec<i64>, String> {
        match mode {
            Mode::Direct => self.one_by_one(rows),
            Mode::Batch => self.multi_row(rows),
            Mode::Trans => self.in_tx(|| self.one_by_one(rows)),
            Mode::BatchTrans => self.in_tx(|| self.multi_row(rows)),
            _ => return Err("not an insert mode".into()),
        }
        .map_err(err)
    }

    fn read(&mut self, mode: Mode, n: usize) -> Result<Vec<Sample>, String> {
        match mode {
            Mode::ByOne => {
                let mut stmt = self
                    .conn
                    .prepare(&format!("{RAW_SELECT} WHERE ID=?"))
                    .map_err(err)?;
                (1..=n as i64)
                    .map(|id| stmt.query_row(params![id], raw_row).map_err(err))
                    .collect()
            }
            // SQLite's own table: a virtual read is the same SELECT.
            Mode::AllDirect | Mode::AllVirtual => {
                let mut stmt = self.conn.prepare(RAW_SELECT).map_err(err)?;
                let rows = stmt.query_map([], raw_row).map_err(err)?;
                rows.collect::<rusqlite::Result<_>>().map_err(err)
            }
            _ => Err("not a read mode".into()),
        }
    }

    fn stats(&self) -> Result<Stats, String> {
        sql_stats(&self.conn)
    }

    fn fetch(&self, id: i64) -> Result<Option<Sample>, String> {
        sql_fetch(&self.conn, id)
    }
}

/// Totals of the Sample table through SQL.
pub fn sql_stats(conn: &Connection) -> Result<Stats, String> {
    conn.query_row(
        "SELECT count(*), coalesce(sum(Amount),0), coalesce(min(ID),0), coalesce(max(ID),0) FROM Sample",
        [],
        |r| {
            Ok(Stats {
                count: r.get(0)?,
                amount_sum: r.get(1)?,
                min_id: r.get(2)?,
                max_id: r.get(3)?,
            })
        },
    )
    .map_err(err)
}

/// One Sample row through SQL.
pub fn sql_fetch(conn: &Connection, id: i64) -> Result<Option<Sample>, String> {
    let mut stmt = conn
        .prepare_cached(&format!("{RAW_SELECT} WHERE ID=?"))
        .map_err(err)?;
    let mut rows = stmt.query([id]).map_err(err)?;
    match rows.next().map_err(err)? {
        Some(r) => raw_row(r).map(Some).map_err(err),
        None => Ok(None),
    }
}

/// The SQLite engine's tables answered through its connection.
struct SqliteNative(Arc<SqliteEngine>);

impl Native for SqliteNative {
    fn stats(&self) -> Result<Stats, String> {
        self.0.with_connection(|c| Ok(sql_stats(c))).map_err(err)?
    }

    fn fetch(&self, id: i64) -> Result<Option<Sample>, String> {
        self.0
            .with_connection(|c| Ok(sql_fetch(c, id)))
            .map_err(err)?
    }
}

/// The passphrase of the encrypted rows (ORM and raw alike).
pub const BENCH_PASSPHRASE: &str = "burrow-bench passphrase";

/// The SQLite configurations, each with its raw-driver baseline.
pub fn sqlite_engines() -> Vec<EngineSpec> {
    #[allow(unused_mut)] // Grows with the encryption feature only.
    let mut configs: Vec<(&str, &str, bool, Synchronous, bool, bool)> = vec![
        (
            "sqlite-file-full",
            "SQLite file full",
            true,
            Synchronous::Full,
            false,
            false,
        ),
        (
            "sqlite-file-off",
            "SQLite file off",
            true,
            Synchronous::Off,
            false,
            false,
        ),
        (
            "sqlite-file-off-exc",
            "SQLite file off exc",
            true,
            Synchronous::Off,
            true,
            false,
        ),
        (
            "sqlite-mem",
            "SQLite in memory",
            false,
            Synchronous::Full,
            false,
            false,
        ),
    ];
    #[cfg(feature = "encryption")]
    configs.insert(
        3,
        (
            "sqlite-file-off-exc-aes",
            "SQLite file off exc AES",
            true,
            Synchronous::Off,
            true,
            true,
        ),
    );
    configs
        .into_iter()
        .map(|(id, title, file, sync, exclusive, encrypted)| {
            // See SHARED_FILE and EXCLUSIVE_FILE: the row names fix only
            // `synchronous` and the locking mode. Both sides open the file
            // as this says.
            let opened = RawFile {
                encrypted,
                ..match (file, exclusive) {
                    (true, false) => SHARED_FILE,
                    (true, true) => EXCLUSIVE_FILE,
                    (false, _) => RawFile::default(),
                }
            };
            EngineSpec {
                id,
                title,
                file,
                slow_direct: file && sync == Synchronous::Full,
                modes: &UNCACHED_MODES,
                orm: Box::new(move |path: Option<&Path>| {
                    let options = sqlite_options(path, sync, exclusive)
                        .wal(opened.wal)
                        .one_process(opened.vfs == Some("unix-excl"));
                    #[cfg(feature = "encryption")]
                    let options = if encrypted {
                        options.passphrase(BENCH_PASSPHRASE)
                    } else {
                        options
                    };
                    let engine = Arc::new(SqliteEngine::open(options).map_err(err)?);
                    let client = Database::open(Model::new().with::<Sample>(), engine.clone())
                        .map_err(err)?;
                    Ok(Box::new(OrmTarget {
                        client,
                        native: Box::new(SqliteNative(engine)),
                    }) as Box<dyn Target>)
                }),
                raw: Some(Box::new(move |path: Option<&Path>| {
                    Ok(Box::new(RawTarget::open_as(path, sync, exclusive, opened)?)
                        as Box<dyn Target>)
                })),
            }
        })
        .collect()
}

/// The engine options of a SQLite configuration.
pub fn sqlite_options(path: Option<&Path>, sync: Synchronous, exclusive: bool) -> SqliteOptions {
    let opts = match path {
        Some(p) => SqliteOptions::file(p),
        None => SqliteOptions::memory(),
    }
    .synchronous(sync);
    if exclusive {
        opts.exclusive()
    } else {
        opts
    }
}
