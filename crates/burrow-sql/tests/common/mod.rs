//! The databases every external test runs against, each test in its own
//! schema (PostgreSQL) or database (MariaDB) or file (SQLite), created here
//! and dropped when the test's [`Db`] goes, so tests run in parallel and
//! leave nothing behind.
//!
//! `BURROW_POSTGRES_URL` and `BURROW_MARIADB_URL` name the servers. Unset,
//! their tests print one line saying how to enable them and pass as skipped;
//! with `CI` set, an unset URL or an unreachable server fails the test.
#![allow(dead_code, missing_docs)]

use std::error::Error as StdError;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use burrow_core::chrono::{DateTime, NaiveDate, Utc};
use burrow_core::{Currency, Record, Value};
use burrow_derive::Record;
use burrow_sql::{SqlEngine, SqlEngineBuilder};
use tempfile::TempDir;

pub type TestResult = Result<(), Box<dyn StdError>>;

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    MariaDb,
}

impl Backend {
    fn env(self) -> Option<&'static str> {
        match self {
            Backend::Sqlite => None,
            Backend::Postgres => Some("BURROW_POSTGRES_URL"),
            Backend::MariaDb => Some("BURROW_MARIADB_URL"),
        }
    }
}

/// One test's private database; dropped (with everything in it) on drop.
pub struct Db {
    pub backend: Backend,
    /// The URL the engines of this test use.
    pub url: String,
    /// The schema (PostgreSQL) or database (MariaDB) of this test.
    pub name: String,
    admin: Option<SqlEngine>,
    _dir: Option<TempDir>,
}

static SERIAL: AtomicUsize = AtomicUsize::new(0);

impl Db {
    /// A fresh private database, or `None` when the backend is not configured
    /// (outside CI).
    pub fn fresh(backend: Backend, test: &str) -> Result<Db, Box<dyn StdError>> {
        let n = SERIAL.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            "burrow_{}_{}_{n}",
            test.chars().take(30).collect::<String>(),
            std::process::id()
        )
        .to_ascii_lowercase();
        let Some(var) = backend.env() else {
            let dir = tempfile::tempdir()?;
            let url = format!("sqlite://{}", dir.path().join("t.db").display());
            return Ok(Db {
                backend,
                url,
                name,
                admin: None,
                _dir: Some(dir),
            });
        };
        // Without the URL the test is compiled as ignored (build.rs); run
        // with --ignored anyway, it fails saying why.
        let url = match std::env::var(var) {
            Ok(u) if !u.is_empty() => u,
            _ => return Err(format!("{var} is not set").into()),
        };
        let admin = SqlEngine::builder(&url).pool_size(1).open().map_err(|e| {
            format!(
                "{var}={}: the server cannot be reached: {e}",
                burrow_sql::redact(&url)
            )
        })?;
        let url = match backend {
            Backend::Postgres => {
                admin.execute(&format!("CREATE SCHEMA \"{name}\""), &[])?;
                // The application name marks this test's connections.
                let sep = if url.contains('?') { '&' } else { '?' };
                format!("{url}{sep}application_name={name}")
            }
            _ => {
                admin.execute(&format!("CREATE DATABASE `{name}`"), &[])?;
                url
            }
        };
        Ok(Db {
            backend,
            url,
            name,
            admin: Some(admin),
            _dir: None,
        })
    }

    /// A builder for an engine on this test's database.
    pub fn builder(&self) -> SqlEngineBuilder {
        let b = SqlEngine::builder(&self.url);
        match self.backend {
            Backend::Sqlite => b,
            _ => b.schema(&self.name),
        }
    }

    /// An engine on this test's database, default options.
    pub fn engine(&self) -> burrow_core::Result<Arc<SqlEngine>> {
        self.builder().open().map(Arc::new)
    }

    /// The admin connection (servers only), outside the test's schema.
    pub fn admin(&self) -> Option<&SqlEngine> {
        self.admin.as_ref()
    }

    /// Runs DDL of the test's own in its schema/database.
    pub fn ddl(&self, engine: &SqlEngine, sql: &str) -> burrow_core::Result<u64> {
        engine.execute(sql, &[])
    }

    /// Kills every connection of this test's engines that is running a
    /// statement; returns how many were killed.
    pub fn kill_busy(&self) -> burrow_core::Result<usize> {
        let Some(admin) = &self.admin else {
            return Ok(0);
        };
        let mut n = 0;
        match self.backend {
            Backend::Postgres => admin.query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE application_name = $1 AND state <> 'idle' AND pid <> pg_backend_pid()",
                &[Value::from(self.name.as_str())],
                &mut |_| {
                    n += 1;
                    Ok(())
                },
            )?,
            _ => {
                let mut ids = Vec::new();
                admin.query(
                    "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND COMMAND <> 'Sleep'",
                    &[Value::from(self.name.as_str())],
                    &mut |row| {
                        if let Value::Int(id) = row[0] {
                            ids.push(id);
                        }
                        Ok(())
                    },
                )?;
                for id in ids {
                    if admin.execute(&format!("KILL {id}"), &[]).is_ok() {
                        n += 1;
                    }
                }
            }
        }
        Ok(n)
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(admin) = &self.admin {
            let sql = match self.backend {
                Backend::Postgres => format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name),
                _ => format!("DROP DATABASE IF EXISTS `{}`", self.name),
            };
            if let Err(e) = admin.execute(&sql, &[]) {
                eprintln!("could not drop {}: {e}", self.name);
            }
        }
    }
}

/// Expands each named body into one `#[test]` per backend.
#[macro_export]
macro_rules! external {
    ($($body:ident),+ $(,)?) => {$(
        mod $body {
            #[test]
            fn sqlite() -> $crate::common::TestResult {
                $crate::common::run(super::$body, $crate::common::Backend::Sqlite, stringify!($body))
            }
            #[test]
            #[cfg_attr(not(burrow_postgres), ignore = "BURROW_POSTGRES_URL is not set")]
            fn postgres() -> $crate::common::TestResult {
                $crate::common::run(super::$body, $crate::common::Backend::Postgres, stringify!($body))
            }
            #[test]
            #[cfg_attr(not(burrow_mariadb), ignore = "BURROW_MARIADB_URL is not set")]
            fn mariadb() -> $crate::common::TestResult {
                $crate::common::run(super::$body, $crate::common::Backend::MariaDb, stringify!($body))
            }
        }
    )+};
}

/// Runs `body` on a fresh database of `backend`.
pub fn run(body: fn(&Db) -> TestResult, backend: Backend, name: &str) -> TestResult {
    let db = Db::fresh(backend, name)?;
    body(&db).map_err(|e| format!("{backend:?}: {e}").into())
}

// ---------------------------------------------------------------------------
// Records.

/// The main test record.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Sample")]
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
    pub fn new(name: &str, age: i32, amount: &str) -> Self {
        Sample {
            name: name.to_owned(),
            last_name: format!("Last{age}"),
            amount: amount.parse().expect("currency"),
            age,
            born: NaiveDate::from_ymd_opt(
                1970 + age.rem_euclid(50),
                1 + age.rem_euclid(12) as u32,
                1,
            )
            .expect("date"),
            ..Sample::default()
        }
    }
}

/// The test record with times cut to the microsecond (what native timestamp
/// columns keep), for comparisons.
pub fn micros(mut s: Sample) -> Sample {
    s.created_at = cut(s.created_at);
    s.changed = cut(s.changed);
    s
}

/// A time floored to the microsecond.
pub fn cut(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(t.timestamp_micros()).expect("in range")
}

/// Whether `a` (read back) equals `b` (written), times to the precision of
/// the backend's default storage.
pub fn same_sample(db: &Db, a: &Sample, b: &Sample) -> TestResult {
    let (a, b) = if db.backend == Backend::Sqlite {
        (a.clone(), b.clone())
    } else {
        (micros(a.clone()), micros(b.clone()))
    };
    if a == b {
        Ok(())
    } else {
        Err(format!("{a:#?}\n  !=\n{b:#?}").into())
    }
}

/// The table of [`Sample`], for raw SQL.
pub fn sample_table() -> &'static burrow_core::Table {
    Sample::table()
}
