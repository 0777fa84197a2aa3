//! Where the database is and how the engine talks to it: a URL, and options
//! set with [`SqlEngineBuilder`].

use std::collections::HashMap;
use std::time::Duration;

use burrow_core::{Error, Result, Table};

use crate::dialect::{DateTimeStorage, Dialect};

/// Everything [`crate::SqlEngine`] is opened with. Built by [`SqlEngineBuilder`].
#[derive(Debug, Clone)]
pub struct SqlOptions {
    pub(crate) url: String,
    pub(crate) dialect: Dialect,
    pub(crate) pool_size: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) lock_timeout: Duration,
    pub(crate) statement_timeout: Option<Duration>,
    pub(crate) check_after_idle: Duration,
    pub(crate) schema: Option<String>,
    pub(crate) datetimes: DateTimeStorage,
    pub(crate) savepoints: bool,
    pub(crate) bulk_rows: usize,
    pub(crate) tables: HashMap<String, String>,
    pub(crate) columns: HashMap<(String, String), String>,
}

impl SqlOptions {
    /// The dialect the URL selects.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The URL, as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database table that holds `table`: mapped, or the record's name.
    pub fn table_name<'a>(&'a self, table: &'a Table) -> &'a str {
        self.tables
            .get(&table.name.to_ascii_lowercase())
            .map_or(table.name, String::as_str)
    }

    /// The column that holds `field` (a field name, or `ID`) of `table`.
    pub fn column_name<'a>(&'a self, table: &'a Table, field: &'a str) -> &'a str {
        let key = (table.name.to_ascii_lowercase(), field.to_ascii_lowercase());
        if let Some(c) = self.columns.get(&key) {
            return c;
        }
        table
            .fields
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(field))
            .map_or(field, |f| f.column)
    }
}

/// Sets up a [`crate::SqlEngine`]: the URL picks the database, the methods
/// set the pool, the timeouts and the mapping of records onto an existing
/// schema. Every option has a safe default.
///
/// | URL | database |
/// |---|---|
/// | `postgres://user:pass@host:5432/db` (or `postgresql://`) | PostgreSQL; the query string takes `tokio-postgres` options (`application_name=…`) and libpq's `sslmode` and `sslrootcert` (TLS needs the `tls` feature) |
/// | `mysql://user:pass@host:3306/db` (or `mariadb://`) | MySQL or MariaDB |
/// | `sqlite://path/to/file.db`, `sqlite::memory:` | SQLite; `?synchronous=off&locking_mode=exclusive&journal_mode=wal` set those pragmas, `vfs=unix-excl` locks the file against other processes (`docs/external.md` has what each risks) |
#[derive(Debug, Clone)]
#[must_use = "call open() to connect"]
pub struct SqlEngineBuilder {
    opts: SqlOptions,
    error: Option<String>,
}

impl SqlEngineBuilder {
    /// Starts from a URL; the scheme picks the dialect.
    pub fn new(url: &str) -> Self {
        let (dialect, error) = match scheme_dialect(url) {
            Some(d) => (d, None),
            None => (
                Dialect::Sqlite,
                Some(format!(
                    "unknown database URL {:?}: expected postgres://, mysql://, mariadb:// or sqlite://",
                    redact(url)
                )),
            ),
        };
        SqlEngineBuilder {
            opts: SqlOptions {
                url: url.to_owned(),
                dialect,
                // SQLite has one writer at a time, and a memory database exists
                // only inside its one connection.
                pool_size: if dialect == Dialect::Sqlite { 1 } else { 8 },
                connect_timeout: Duration::from_secs(10),
                lock_timeout: burrow_core::DEFAULT_LOCK_TIMEOUT,
                statement_timeout: None,
                check_after_idle: Duration::from_secs(30),
                schema: None,
                datetimes: DateTimeStorage::Native,
                savepoints: true,
                bulk_rows: 0,
                tables: HashMap::new(),
                columns: HashMap::new(),
            },
            error,
        }
    }

    /// The most connections open at once (default 8; SQLite: 1, and a memory
    /// database always 1). An open transaction holds one until it ends; other
    /// calls share the rest.
    pub fn pool_size(mut self, n: usize) -> Self {
        if self.opts.dialect == Dialect::Sqlite && is_sqlite_memory(&self.opts.url) {
            return self;
        }
        self.opts.pool_size = n.max(1);
        self
    }

    /// How long opening a connection may take (default 10 s).
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.opts.connect_timeout = t;
        self
    }

    /// How long a call waits for another transaction (default
    /// [`burrow_core::DEFAULT_LOCK_TIMEOUT`], 5 s): for a free connection when
    /// open transactions hold them all (then [`Error::Busy`] instead of
    /// hanging), and, with SQLite, for another connection's write lock unless
    /// [`SqlEngineBuilder::statement_timeout`] says otherwise.
    pub fn lock_timeout(mut self, t: Duration) -> Self {
        self.opts.lock_timeout = t;
        self
    }

    /// The longest a statement may run before the server cancels it (off by
    /// default): PostgreSQL `statement_timeout`, MariaDB `max_statement_time`
    /// and a socket read timeout on MySQL, SQLite's busy timeout.
    pub fn statement_timeout(mut self, t: Duration) -> Self {
        self.opts.statement_timeout = Some(t);
        self
    }

    /// A pooled connection unused for longer than this is pinged before it is
    /// handed out, so a connection the server dropped while idle is replaced
    /// instead of failing a call (default 30 s).
    pub fn check_after_idle(mut self, t: Duration) -> Self {
        self.opts.check_after_idle = t;
        self
    }

    /// PostgreSQL: the schema that holds the tables (set as `search_path`).
    /// MySQL/MariaDB: the database (`USE`), overriding the URL's. Refused for SQLite.
    pub fn schema(mut self, name: &str) -> Self {
        if self.opts.dialect == Dialect::Sqlite {
            self.error
                .get_or_insert_with(|| "SQLite has no schemas to select".into());
        }
        self.opts.schema = Some(name.to_owned());
        self
    }

    /// How date-times are stored in tables the engine creates (default
    /// [`DateTimeStorage::Native`]; existing columns keep their type).
    pub fn datetime_storage(mut self, s: DateTimeStorage) -> Self {
        self.opts.datetimes = s;
        self
    }

    /// PostgreSQL: inside a transaction, run each write under a savepoint,
    /// sent in the same round trip, so that a failed statement (a duplicate
    /// key) leaves the transaction usable as in SQLite and MySQL (default on).
    /// Off saves the server the savepoint work, but then one failed statement
    /// aborts the whole transaction, as PostgreSQL does by itself.
    pub fn statement_savepoints(mut self, on: bool) -> Self {
        self.opts.savepoints = on;
        self
    }

    /// The most rows one bulk statement of a batch carries (0: the dialect's
    /// measured default: 5,000 for PostgreSQL arrays, 1,000 for MySQL
    /// multi-row VALUES, further capped by `max_allowed_packet`, 200 for SQLite).
    pub fn bulk_rows(mut self, n: usize) -> Self {
        self.opts.bulk_rows = n;
        self
    }

    /// Stores the record table `record_table` (its `#[burrow(table)]` name) in
    /// the database table `db_table`.
    pub fn map_table(mut self, record_table: &str, db_table: &str) -> Self {
        self.opts
            .tables
            .insert(record_table.to_ascii_lowercase(), db_table.to_owned());
        self
    }

    /// Stores `field` (a field name, or `ID` for the ID) of the record table
    /// `record_table` in the column `db_column`.
    pub fn map_column(mut self, record_table: &str, field: &str, db_column: &str) -> Self {
        self.opts.columns.insert(
            (
                record_table.to_ascii_lowercase(),
                field.to_ascii_lowercase(),
            ),
            db_column.to_owned(),
        );
        self
    }

    /// The options as set so far.
    pub fn options(&self) -> &SqlOptions {
        &self.opts
    }

    /// Checks the options and connects (one connection, to fail early).
    pub fn open(self) -> Result<crate::SqlEngine> {
        if let Some(e) = self.error {
            return Err(Error::BadInput(e));
        }
        crate::SqlEngine::with_options(self.opts)
    }
}

fn scheme_dialect(url: &str) -> Option<Dialect> {
    let scheme = url.split(':').next()?.to_ascii_lowercase();
    match scheme.as_str() {
        "postgres" | "postgresql" => Some(Dialect::Postgres),
        "mysql" | "mariadb" => Some(Dialect::MySql),
        "sqlite" => Some(Dialect::Sqlite),
        _ => None,
    }
}

/// Whether a SQLite URL names a private memory database.
pub(crate) fn is_sqlite_memory(url: &str) -> bool {
    let p = sqlite_path(url);
    p.is_empty() || p == ":memory:"
}

/// The path of a `sqlite:` URL, without its query string.
pub(crate) fn sqlite_path(url: &str) -> &str {
    let rest = url.split_once(':').map_or("", |(_, r)| r);
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    rest.split('?').next().unwrap_or("")
}

/// The `key=value` pairs of a URL's query string.
pub(crate) fn url_query(url: &str) -> Vec<(String, String)> {
    url.split_once('?')
        .map(|(_, q)| {
            q.split('&')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    (k.to_ascii_lowercase(), v.to_owned())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The URL with its password hidden, for messages.
pub fn redact(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        if let Some((auth, host)) = rest.split_once('@') {
            if let Some((user, _)) = auth.split_once(':') {
                return format!("{scheme}://{user}:***@{host}");
            }
        }
    }
    url.to_owned()
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn urls_pick_dialects() {
        assert_eq!(scheme_dialect("postgres://x@h/db"), Some(Dialect::Postgres));
        assert_eq!(scheme_dialect("mariadb://root@h/db"), Some(Dialect::MySql));
        assert_eq!(scheme_dialect("sqlite::memory:"), Some(Dialect::Sqlite));
        assert_eq!(scheme_dialect("oracle://x"), None);
        assert!(is_sqlite_memory("sqlite::memory:"));
        assert!(is_sqlite_memory("sqlite://:memory:"));
        assert!(!is_sqlite_memory("sqlite:///tmp/a.db?synchronous=off"));
        assert_eq!(
            sqlite_path("sqlite:///tmp/a.db?synchronous=off"),
            "/tmp/a.db"
        );
        assert_eq!(sqlite_path("sqlite://rel.db"), "rel.db");
        assert_eq!(
            url_query("sqlite://a.db?synchronous=off&locking_mode=exclusive"),
            vec![
                ("synchronous".into(), "off".into()),
                ("locking_mode".into(), "exclusive".into())
            ]
        );
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
    }
}
