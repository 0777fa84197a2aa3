//! External databases through `burrow-sql`: SQLite through the external layer
//! (file full / off / off exclusive, in memory), PostgreSQL and MariaDB when
//! `BURROW_POSTGRES_URL` / `BURROW_MARIADB_URL` are set, each beside a raw
//! driver baseline doing the same work with the driver alone.
//!
//! The ORM side is a client whose default engine is an in-memory SQLite and
//! whose Sample table is placed on the external engine: every mode but All
//! Virtual goes straight to the external engine, and All Virtual reads through
//! SQLite's virtual table over it. Each cell starts from a fresh table (a new
//! file, or the table dropped and created again on a server).

use std::path::Path;
use std::sync::Arc;

use burrow::chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use burrow::driver::datetime::{parse_date, parse_datetime};
use burrow::sqlite::{SqliteEngine, Synchronous};
use burrow::{Currency, Database, Model, Value};
use burrow_sql::mysql::prelude::Queryable;
use burrow_sql::tokio_postgres::types::ToSql;
use burrow_sql::SqlEngine;

use crate::sample::Sample;
use crate::targets::{
    EngineSpec, Mode, Native, OrmTarget, RawTarget, Stats, Target, EXCLUSIVE_FILE, SHARED_FILE,
    UNCACHED_MODES,
};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The modes of the server rows: a Direct insert there is a network round
/// trip and a commit per row, as in the other rows.
const MODES: &[Mode] = &UNCACHED_MODES;

/// Where a server benchmark keeps its table.
const BENCH_SCHEMA: &str = "burrow_bench";

/// Reads a Sample from the values of `SELECT ID, FirstName, … FROM Sample`.
fn sample_of(v: &[Value]) -> Result<Sample, String> {
    let text = |i: usize| match &v[i] {
        Value::Text(t) => Ok(t.clone()),
        other => Err(format!("column {i}: {other:?}")),
    };
    let int = |i: usize| match &v[i] {
        Value::Int(n) => Ok(*n),
        other => Err(format!("column {i}: {other:?}")),
    };
    let date = |i: usize| match &v[i] {
        Value::Date(d) => Ok(*d),
        Value::Text(t) => parse_date(t).ok_or_else(|| format!("column {i}: {t}")),
        other => Err(format!("column {i}: {other:?}")),
    };
    let time = |i: usize| match &v[i] {
        Value::DateTime(t) => Ok(*t),
        Value::Text(t) => parse_datetime(t).ok_or_else(|| format!("column {i}: {t}")),
        other => Err(format!("column {i}: {other:?}")),
    };
    Ok(Sample {
        id: int(0)?,
        first_name: text(1)?,
        last_name: text(2)?,
        amount: Currency::from_scaled(int(3)?),
        birth_date: date(4)?,
        last_change: time(5)?,
        created_at: time(6)?,
    })
}

/// The external engine's table, read with its own SQL.
struct SqlNative {
    engine: Arc<SqlEngine>,
    stats: String,
    fetch: String,
}

impl SqlNative {
    fn new(engine: Arc<SqlEngine>) -> Self {
        let (q, p, cast) = match engine.dialect() {
            burrow_sql::Dialect::MySql => ('`', "?", "SIGNED"),
            burrow_sql::Dialect::Postgres => ('"', "$1", "BIGINT"),
            _ => ('"', "?", "INTEGER"),
        };
        let c = |n: &str| format!("{q}{n}{q}");
        SqlNative {
            stats: format!(
                "SELECT count(*), CAST(coalesce(sum({a}),0) AS {cast}), coalesce(min({id}),0), \
                 coalesce(max({id}),0) FROM {t}",
                a = c("Amount"),
                id = c("ID"),
                t = c("Sample")
            ),
            fetch: format!(
                "SELECT {},{},{},{},{},{},{} FROM {} WHERE {}={p}",
                c("ID"),
                c("FirstName"),
                c("LastName"),
                c("Amount"),
                c("BirthDate"),
                c("LastChange"),
                c("CreatedAt"),
                c("Sample"),
                c("ID")
            ),
            engine,
        }
    }
}

impl Native for SqlNative {
    fn stats(&self) -> Result<Stats, String> {
        let mut s = None;
        self.engine
            .query(&self.stats, &[], &mut |v| {
                let i = |k: usize| match &v[k] {
                    Value::Int(n) => *n,
                    Value::Text(t) => t.parse().unwrap_or(-1),
                    _ => -1,
                };
                s = Some(Stats {
                    count: i(0),
                    amount_sum: i(1),
                    min_id: i(2),
                    max_id: i(3),
                });
                Ok(())
            })
            .map_err(err)?;
        s.ok_or_else(|| "no stats row".into())
    }

    fn fetch(&self, id: i64) -> Result<Option<Sample>, String> {
        let mut found = None;
        self.engine
            .query(&self.fetch, &[Value::Int(id)], &mut |v| {
                found = Some(sample_of(v).map_err(burrow::Error::BadInput)?);
                Ok(())
            })
            .map_err(err)?;
        Ok(found)
    }
}

/// The ORM over `engine`, behind an in-memory SQLite main engine.
fn orm_target(engine: Arc<SqlEngine>) -> Result<Box<dyn Target>, String> {
    let main = Arc::new(SqliteEngine::memory().map_err(err)?);
    let client = Database::builder(Model::new().with::<Sample>())
        .default_engine(main)
        .place::<Sample>(engine.clone())
        // All Virtual measures SQLite's virtual table, as mORMot2's does
        // (its static tables' direct route turned off for that cell).
        .sql_direct(false)
        .open()
        .map_err(err)?;
    Ok(Box::new(OrmTarget {
        client,
        native: Box::new(SqlNative::new(engine)),
    }))
}

/// [`SHARED_FILE`] in the external layer's URL.
const SHARED_FILE_URL: &str = "&journal_mode=wal&vfs=unix-excl";

/// [`EXCLUSIVE_FILE`] in the external layer's URL.
const EXCLUSIVE_FILE_URL: &str = "&journal_mode=wal";

fn sqlite_url(path: Option<&Path>, sync: Synchronous, exclusive: bool) -> String {
    let sync = match sync {
        Synchronous::Full => "full",
        Synchronous::Normal => "normal",
        Synchronous::Off => "off",
    };
    let lock = if exclusive { "exclusive" } else { "normal" };
    match path {
        Some(p) => format!(
            "sqlite://{}?synchronous={sync}&locking_mode={lock}{}",
            p.display(),
            if exclusive {
                EXCLUSIVE_FILE_URL
            } else {
                SHARED_FILE_URL
            }
        ),
        None => "sqlite::memory:".to_owned(),
    }
}

/// A PostgreSQL or MariaDB URL from the environment; `None` when unset.
fn server_url(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|u| !u.is_empty())
}

/// The variable that names each server row's database, and an example.
pub const SERVER_URLS: [(&str, &str, &str); 2] = [
    (
        "postgres",
        "BURROW_POSTGRES_URL",
        "postgres://postgres@127.0.0.1:5432/test",
    ),
    (
        "mariadb",
        "BURROW_MARIADB_URL",
        "mysql://root@127.0.0.1:3306/test",
    ),
];

/// The external engine's rows.
pub fn external_engines() -> Vec<EngineSpec> {
    let configs: [(&'static str, &'static str, bool, Synchronous, bool); 4] = [
        (
            "ext-sqlite-file-full",
            "Ext SQLite file full",
            true,
            Synchronous::Full,
            false,
        ),
        (
            "ext-sqlite-file-off",
            "Ext SQLite file off",
            true,
            Synchronous::Off,
            false,
        ),
        (
            "ext-sqlite-file-off-exc",
            "Ext SQLite file off exc",
            true,
            Synchronous::Off,
            true,
        ),
        (
            "ext-sqlite-mem",
            "Ext SQLite in memory",
            false,
            Synchronous::Full,
            false,
        ),
    ];
    let mut all: Vec<EngineSpec> = configs
        .into_iter()
        .map(|(id, title, file, sync, exclusive)| EngineSpec {
            id,
            title,
            file,
            slow_direct: file && sync == Synchronous::Full,
            modes: MODES,
            orm: Box::new(move |path: Option<&Path>| {
                let url = sqlite_url(path, sync, exclusive);
                orm_target(Arc::new(SqlEngine::connect(&url).map_err(err)?))
            }),
            raw: Some(Box::new(move |path: Option<&Path>| {
                let file = if exclusive {
                    EXCLUSIVE_FILE
                } else {
                    SHARED_FILE
                };
                Ok(Box::new(RawTarget::open_as(path, sync, exclusive, file)?) as Box<dyn Target>)
            })),
        })
        .collect();
    if let Some(url) = server_url(SERVER_URLS[0].1) {
        let raw_url = url.clone();
        all.push(EngineSpec {
            id: "postgres",
            title: "PostgreSQL",
            file: false,
            slow_direct: false,
            modes: MODES,
            orm: Box::new(move |_| {
                let admin = SqlEngine::builder(&url).pool_size(1).open().map_err(err)?;
                admin
                    .execute(&format!("CREATE SCHEMA IF NOT EXISTS {BENCH_SCHEMA}"), &[])
                    .map_err(err)?;
                admin
                    .execute(
                        &format!("DROP TABLE IF EXISTS {BENCH_SCHEMA}.\"Sample\""),
                        &[],
                    )
                    .map_err(err)?;
                let e = SqlEngine::builder(&url)
                    .schema(BENCH_SCHEMA)
                    .open()
                    .map_err(err)?;
                orm_target(Arc::new(e))
            }),
            raw: Some(Box::new(move |_| {
                Ok(Box::new(PgRaw::open(&raw_url)?) as Box<dyn Target>)
            })),
        });
    }
    if let Some(url) = server_url(SERVER_URLS[1].1) {
        let raw_url = url.clone();
        all.push(EngineSpec {
            id: "mariadb",
            title: "MariaDB",
            file: false,
            slow_direct: false,
            modes: MODES,
            orm: Box::new(move |_| {
                let admin = SqlEngine::builder(&url).pool_size(1).open().map_err(err)?;
                admin
                    .execute(
                        &format!("CREATE DATABASE IF NOT EXISTS {BENCH_SCHEMA}"),
                        &[],
                    )
                    .map_err(err)?;
                admin
                    .execute(
                        &format!("DROP TABLE IF EXISTS {BENCH_SCHEMA}.`Sample`"),
                        &[],
                    )
                    .map_err(err)?;
                let e = SqlEngine::builder(&url)
                    .schema(BENCH_SCHEMA)
                    .open()
                    .map_err(err)?;
                orm_target(Arc::new(e))
            }),
            raw: Some(Box::new(move |_| {
                Ok(Box::new(MyRaw::open(&raw_url)?) as Box<dyn Target>)
            })),
        });
    }
    all
}

// ---------------------------------------------------------------------------
// PostgreSQL with tokio-postgres alone.

const PG_COLS: &str =
    "\"FirstName\",\"LastName\",\"Amount\",\"BirthDate\",\"LastChange\",\"CreatedAt\"";
/// Rows per UNNEST statement, as the engine uses.
const PG_CHUNK: usize = 5_000;

/// The PostgreSQL driver alone: prepared statements, binary values, and one
/// `INSERT … SELECT * FROM UNNEST(arrays) RETURNING ID` per 5,000 rows for
/// the batch modes.
struct PgRaw {
    rt: burrow_sql::tokio::runtime::Runtime,
    client: burrow_sql::tokio_postgres::Client,
}

impl PgRaw {
    fn open(url: &str) -> Result<Self, String> {
        let rt = burrow_sql::tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(err)?;
        let (client, conn) = rt
            .block_on(burrow_sql::tokio_postgres::connect(
                url,
                burrow_sql::tokio_postgres::NoTls,
            ))
            .map_err(err)?;
        rt.spawn(async move {
            let _ = conn.await;
        });
        let raw = PgRaw { rt, client };
        raw.batch(&format!(
            "CREATE SCHEMA IF NOT EXISTS {BENCH_SCHEMA}; SET search_path TO {BENCH_SCHEMA}; \
             DROP TABLE IF EXISTS \"Sample\"; CREATE TABLE \"Sample\" (\"ID\" BIGINT GENERATED BY \
             DEFAULT AS IDENTITY PRIMARY KEY, \"FirstName\" TEXT COLLATE \"C\" NOT NULL, \
             \"LastName\" TEXT COLLATE \"C\" NOT NULL, \"Amount\" BIGINT NOT NULL, \"BirthDate\" DATE \
             NOT NULL, \"LastChange\" TIMESTAMP NOT NULL, \"CreatedAt\" TIMESTAMP NOT NULL)"
        ))?;
        Ok(raw)
    }

    fn batch(&self, sql: &str) -> Result<(), String> {
        self.rt
            .block_on(self.client.batch_execute(sql))
            .map_err(err)
    }

    fn one_by_one(&self, rows: &[Sample]) -> Result<Vec<i64>, String> {
        let stmt = self
            .rt
            .block_on(self.client.prepare(&format!(
                "INSERT INTO \"Sample\" ({PG_COLS}) VALUES ($1,$2,$3,$4,$5,$6) RETURNING \"ID\""
            )))
            .map_err(err)?;
        rows.iter()
            .map(|r| {
                let now = Utc::now().naive_utc();
                let amount = r.amount.scaled();
                let p: [&(dyn ToSql + Sync); 6] = [
                    &r.first_name,
                    &r.last_name,
                    &amount,
                    &r.birth_date,
                    &now,
                    &now,
                ];
                let row = self
                    .rt
                    .block_on(self.client.query_one(&stmt, &p))
                    .map_err(err)?;
                Ok(row.get::<_, i64>(0))
            })
            .collect()
    }

    fn unnest(&self, rows: &[Sample]) -> Result<Vec<i64>, String> {
        let stmt = self
            .rt
            .block_on(self.client.prepare(&format!(
                "INSERT INTO \"Sample\" ({PG_COLS}) SELECT * FROM UNNEST($1::text[],$2::text[],\
                 $3::int8[],$4::date[],$5::timestamp[],$6::timestamp[]) RETURNING \"ID\""
            )))
            .map_err(err)?;
        let now = Utc::now().naive_utc();
        let mut ids = Vec::with_capacity(rows.len());
        for chunk in rows.chunks(PG_CHUNK) {
            let first: Vec<&str> = chunk.iter().map(|r| r.first_name.as_str()).collect();
            let last: Vec<&str> = chunk.iter().map(|r| r.last_name.as_str()).collect();
            let amount: Vec<i64> = chunk.iter().map(|r| r.amount.scaled()).collect();
            let born: Vec<NaiveDate> = chunk.iter().map(|r| r.birth_date).collect();
            let times: Vec<NaiveDateTime> = vec![now; chunk.len()];
            let p: [&(dyn ToSql + Sync); 6] = [&first, &last, &amount, &born, &times, &times];
            let got = self
                .rt
                .block_on(self.client.query(&stmt, &p))
                .map_err(err)?;
            ids.extend(got.iter().map(|r| r.get::<_, i64>(0)));
        }
        Ok(ids)
    }

    fn in_tx<T>(&self, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
        self.batch("BEGIN")?;
        let r = f()?;
        self.batch("COMMIT")?;
        Ok(r)
    }

    fn select(&self, filter: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Sample>, String> {
        let sql = format!("SELECT \"ID\",{PG_COLS} FROM \"Sample\"{filter}");
        let stmt = self.rt.block_on(self.client.prepare(&sql)).map_err(err)?;
        let rows = self
            .rt
            .block_on(self.client.query(&stmt, params))
            .map_err(err)?;
        Ok(rows.iter().map(pg_sample).collect())
    }
}

fn pg_sample(r: &burrow_sql::tokio_postgres::Row) -> Sample {
    Sample {
        id: r.get(0),
        first_name: r.get(1),
        last_name: r.get(2),
        amount: Currency::from_scaled(r.get(3)),
        birth_date: r.get(4),
        last_change: r.get::<_, NaiveDateTime>(5).and_utc(),
        created_at: r.get::<_, NaiveDateTime>(6).and_utc(),
    }
}

impl Target for PgRaw {
    fn insert(&mut self, mode: Mode, rows: &mut Vec<Sample>) -> Result<Vec<i64>, String> {
        match mode {
            Mode::Direct => self.one_by_one(rows),
            Mode::Batch => self.unnest(rows),
            Mode::Trans => self.in_tx(|| self.one_by_one(rows)),
            Mode::BatchTrans => self.in_tx(|| self.unnest(rows)),
            _ => Err("not an insert mode".into()),
        }
    }

    fn read(&mut self, mode: Mode, n: usize) -> Result<Vec<Sample>, String> {
        match mode {
            Mode::ByOne => {
                let sql = format!("SELECT \"ID\",{PG_COLS} FROM \"Sample\" WHERE \"ID\"=$1");
                let stmt = self.rt.block_on(self.client.prepare(&sql)).map_err(err)?;
                (1..=n as i64)
                    .map(|id| {
                        let row = self
                            .rt
                            .block_on(self.client.query_one(&stmt, &[&id]))
                            .map_err(err)?;
                        Ok(pg_sample(&row))
                    })
                    .collect()
            }
            Mode::AllDirect | Mode::AllVirtual => self.select("", &[]),
            _ => Err("not a read mode".into()),
        }
    }

    fn stats(&self) -> Result<Stats, String> {
        let row = self
            .rt
            .block_on(self.client.query_one(
                "SELECT count(*), coalesce(sum(\"Amount\"),0)::bigint, coalesce(min(\"ID\"),0), \
                 coalesce(max(\"ID\"),0) FROM \"Sample\"",
                &[],
            ))
            .map_err(err)?;
        Ok(Stats {
            count: row.get(0),
            amount_sum: row.get(1),
            min_id: row.get(2),
            max_id: row.get(3),
        })
    }

    fn fetch(&self, id: i64) -> Result<Option<Sample>, String> {
        Ok(self.select(" WHERE \"ID\"=$1", &[&id])?.pop())
    }
}

// ---------------------------------------------------------------------------
// MariaDB with the mysql driver alone.

const MY_COLS: &str = "FirstName,LastName,Amount,BirthDate,LastChange,CreatedAt";
/// Rows per multi-row INSERT, as the engine uses.
const MY_CHUNK: usize = 1_000;

/// The mysql driver alone: prepared statements, and multi-row
/// `INSERT … VALUES` of 1,000 rows for the batch modes.
struct MyRaw {
    conn: std::cell::RefCell<burrow_sql::mysql::Conn>,
}

fn my_date(d: NaiveDate) -> burrow_sql::mysql::Value {
    use burrow::chrono::Datelike;
    burrow_sql::mysql::Value::Date(d.year() as u16, d.month() as u8, d.day() as u8, 0, 0, 0, 0)
}

fn my_time(t: DateTime<Utc>) -> burrow_sql::mysql::Value {
    use burrow::chrono::{Datelike, Timelike};
    burrow_sql::mysql::Value::Date(
        t.year() as u16,
        t.month() as u8,
        t.day() as u8,
        t.hour() as u8,
        t.minute() as u8,
        t.second() as u8,
        t.nanosecond() / 1000,
    )
}

fn my_sample(r: &burrow_sql::mysql::Row) -> Result<Sample, String> {
    use burrow_sql::mysql::Value as V;
    let text = |i: usize| match r.as_ref(i) {
        Some(V::Bytes(b)) => Ok(String::from_utf8_lossy(b).into_owned()),
        other => Err(format!("column {i}: {other:?}")),
    };
    let int = |i: usize| match r.as_ref(i) {
        Some(V::Int(n)) => Ok(*n),
        Some(V::UInt(n)) => Ok(*n as i64),
        other => Err(format!("column {i}: {other:?}")),
    };
    let date = |i: usize| match r.as_ref(i) {
        Some(V::Date(y, m, d, h, mi, s, us)) => {
            NaiveDate::from_ymd_opt(*y as i32, *m as u32, *d as u32)
                .and_then(|d| d.and_hms_micro_opt(*h as u32, *mi as u32, *s as u32, *us))
                .ok_or_else(|| format!("column {i}: bad date"))
        }
        other => Err(format!("column {i}: {other:?}")),
    };
    Ok(Sample {
        id: int(0)?,
        first_name: text(1)?,
        last_name: text(2)?,
        amount: Currency::from_scaled(int(3)?),
        birth_date: date(4)?.date(),
        last_change: date(5)?.and_utc(),
        created_at: date(6)?.and_utc(),
    })
}

impl MyRaw {
    fn open(url: &str) -> Result<Self, String> {
        let url = url.replacen("mariadb://", "mysql://", 1);
        let mut conn =
            burrow_sql::mysql::Conn::new(burrow_sql::mysql::Opts::from_url(&url).map_err(err)?)
                .map_err(err)?;
        conn.query_drop(format!("CREATE DATABASE IF NOT EXISTS {BENCH_SCHEMA}"))
            .map_err(err)?;
        conn.query_drop(format!("USE {BENCH_SCHEMA}"))
            .map_err(err)?;
        conn.query_drop(
            "DROP TABLE IF EXISTS Sample; CREATE TABLE Sample (ID BIGINT NOT NULL AUTO_INCREMENT \
             PRIMARY KEY, FirstName LONGTEXT NOT NULL, LastName LONGTEXT NOT NULL, Amount BIGINT NOT \
             NULL, BirthDate DATE NOT NULL, LastChange DATETIME(6) NOT NULL, CreatedAt DATETIME(6) \
             NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        )
        .map_err(err)?;
        Ok(MyRaw {
            conn: std::cell::RefCell::new(conn),
        })
    }

    fn one_by_one(&self, rows: &[Sample]) -> Result<Vec<i64>, String> {
        let mut conn = self.conn.borrow_mut();
        let sql = format!("INSERT INTO Sample ({MY_COLS}) VALUES (?,?,?,?,?,?)");
        rows.iter()
            .map(|r| {
                let now = my_time(Utc::now());
                conn.exec_drop(
                    &sql,
                    (
                        r.first_name.as_str(),
                        r.last_name.as_str(),
                        r.amount.scaled(),
                        my_date(r.birth_date),
                        now.clone(),
                        now,
                    ),
                )
                .map_err(err)?;
                Ok(conn.last_insert_id() as i64)
            })
            .collect()
    }

    fn multi_row(&self, rows: &[Sample]) -> Result<Vec<i64>, String> {
        let mut conn = self.conn.borrow_mut();
        let now = my_time(Utc::now());
        let mut ids = Vec::with_capacity(rows.len());
        for chunk in rows.chunks(MY_CHUNK) {
            let sql = format!(
                "INSERT INTO Sample ({MY_COLS}) VALUES {}",
                vec!["(?,?,?,?,?,?)"; chunk.len()].join(",")
            );
            let mut p = Vec::with_capacity(chunk.len() * 6);
            for r in chunk {
                p.push(burrow_sql::mysql::Value::from(r.first_name.as_str()));
                p.push(burrow_sql::mysql::Value::from(r.last_name.as_str()));
                p.push(burrow_sql::mysql::Value::Int(r.amount.scaled()));
                p.push(my_date(r.birth_date));
                p.push(now.clone());
                p.push(now.clone());
            }
            conn.exec_drop(&sql, p).map_err(err)?;
            let first = conn.last_insert_id() as i64;
            ids.extend(first..first + chunk.len() as i64);
        }
        Ok(ids)
    }

    fn in_tx<T>(&self, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
        self.conn
            .borrow_mut()
            .query_drop("START TRANSACTION")
            .map_err(err)?;
        let r = f()?;
        self.conn.borrow_mut().query_drop("COMMIT").map_err(err)?;
        Ok(r)
    }

    fn select(&self, filter: &str, id: Option<i64>) -> Result<Vec<Sample>, String> {
        let sql = format!("SELECT ID,{MY_COLS} FROM Sample{filter}");
        let mut conn = self.conn.borrow_mut();
        let rows: Vec<burrow_sql::mysql::Row> = match id {
            Some(id) => conn.exec(&sql, (id,)),
            None => conn.exec(&sql, ()),
        }
        .map_err(err)?;
        rows.iter().map(my_sample).collect()
    }
}

impl Target for MyRaw {
    fn insert(&mut self, mode: Mode, rows: &mut Vec<Sample>) -> Result<Vec<i64>, String> {
        match mode {
            Mode::Direct => self.one_by_one(rows),
            Mode::Batch => self.multi_row(rows),
            Mode::Trans => self.in_tx(|| self.one_by_one(rows)),
            Mode::BatchTrans => self.in_tx(|| self.multi_row(rows)),
            _ => Err("not an insert mode".into()),
        }
    }

    fn read(&mut self, mode: Mode, n: usize) -> Result<Vec<Sample>, String> {
        match mode {
            Mode::ByOne => (1..=n as i64)
                .map(|id| {
                    self.select(" WHERE ID=?", Some(id))?
                        .pop()
                        .ok_or_else(|| format!("no row {id}"))
                })
                .collect(),
            Mode::AllDirect | Mode::AllVirtual => self.select("", None),
            _ => Err("not a read mode".into()),
        }
    }

    fn stats(&self) -> Result<Stats, String> {
        let mut conn = self.conn.borrow_mut();
        let row: Option<(i64, i64, i64, i64)> = conn
            .query_first(
                "SELECT count(*), CAST(coalesce(sum(Amount),0) AS SIGNED), coalesce(min(ID),0), \
                 coalesce(max(ID),0) FROM Sample",
            )
            .map_err(err)?;
        let (count, amount_sum, min_id, max_id) = row.ok_or("no stats row")?;
        Ok(Stats {
            count,
            amount_sum,
            min_id,
            max_id,
        })
    }

    fn fetch(&self, id: i64) -> Result<Option<Sample>, String> {
        Ok(self.select(" WHERE ID=?", Some(id))?.pop())
    }
}
