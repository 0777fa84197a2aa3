//! PostgreSQL through `tokio-postgres`, driven synchronously.
//!
//! Each connection owns a single-threaded Tokio runtime (as the `postgres`
//! crate does) and blocks on it for every call. Driving `tokio-postgres`
//! directly rather than through the `postgres` crate buys one thing the
//! synchronous wrapper hides: pipelining. A guarded write sends `SAVEPOINT`,
//! the statement and `RELEASE` in one round trip.
//!
//! Values are bound in binary, converted by [`PgArg`] to whatever type the
//! server reports for each parameter, so the same record binds to a column
//! the engine created (`BIGINT`, `TIMESTAMP`) or to an existing one of a
//! compatible type (`INTEGER`, `VARCHAR(40)`, `TIMESTAMPTZ`).

use std::collections::HashMap;
use std::error::Error as StdError;
use std::time::Duration;

use burrow_core::chrono::{DateTime, Datelike, NaiveDate, Utc};
use burrow_core::datetime::{format_date, format_datetime};
use burrow_core::{Error, Result, ValueRef};
use bytes::BytesMut;
use futures_util::future::{join3, join_all};
use futures_util::{pin_mut, TryStreamExt};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{FromSql, IsNull, Kind, ToSql, Type};
use tokio_postgres::{Client, Config, NoTls, Row, Statement};

use crate::conn::{Conn, DbError, DbErrorKind, EachQueried, EachRawRow, QueryError, RawRow, RowFn};
use crate::options::SqlOptions;

/// Prepared statements kept per connection before the cache is cleared.
const STATEMENT_CACHE: usize = 512;

/// By-key queries sent in one pipeline before their answers are read: it
/// bounds the rows held at once (one per key at most), not the round trips
/// (one per 256 keys).
const PIPELINE: usize = 256;

/// Selects sent in one pipeline: their rows are all held until the last
/// answers, so fewer than by-key reads.
const SELECTS_PIPELINED: usize = 16;

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// What the engine configures on every new connection.
pub struct PgSetup {
    pub config: Config,
    pub schema: Option<String>,
    pub statement_timeout: Option<Duration>,
    #[cfg(feature = "tls")]
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
}

impl PgSetup {
    /// Parses the URL and applies the options.
    pub fn new(o: &SqlOptions) -> Result<Self> {
        let tls = crate::pgtls::TlsSettings::from_url(&o.url)?;
        let mut config: Config = tls
            .url
            .parse()
            .map_err(|e| Error::BadInput(format!("bad PostgreSQL URL: {e}")))?;
        config.connect_timeout(o.connect_timeout);
        config.ssl_mode(tls.driver_mode());
        if config.get_application_name().is_none() {
            config.application_name("burrow");
        }
        #[cfg(not(feature = "tls"))]
        if tls.root_cert.is_some()
            || !matches!(
                tls.mode,
                crate::pgtls::SslMode::Disable | crate::pgtls::SslMode::Prefer
            )
        {
            return Err(Error::BadInput(
                "this URL's sslmode or sslrootcert needs TLS, which this build leaves out: \
                 enable burrow-sql's `tls` feature (burrow's `postgres-tls`)"
                    .into(),
            ));
        }
        Ok(PgSetup {
            config,
            schema: o.schema.clone(),
            statement_timeout: o.statement_timeout,
            #[cfg(feature = "tls")]
            tls: crate::pgtls::connector(&tls)?,
        })
    }

    /// Opens a connection.
    pub fn connect(&self) -> Result<PgConn, DbError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| {
                DbError::new(DbErrorKind::Other, format!("cannot start a runtime: {e}"))
            })?;
        // The connection task runs whenever the runtime is driven, which is
        // during every call; it ends when the server closes the socket.
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            let (client, connection) =
                block(&rt, self.config.connect(tls.clone())).map_err(|e| classify(&e, true))?;
            rt.spawn(async move {
                let _ = connection.await;
            });
            return self.set_up(rt, client);
        }
        let (client, connection) =
            block(&rt, self.config.connect(NoTls)).map_err(|e| classify(&e, true))?;
        rt.spawn(async move {
            let _ = connection.await;
        });
        self.set_up(rt, client)
    }

    /// Applies the schema and timeout settings to a new connection.
    fn set_up(&self, rt: tokio::runtime::Runtime, client: Client) -> Result<PgConn, DbError> {
        let mut conn = PgConn {
            rt: ConnRuntime(Some(rt)),
            client,
            stmts: HashMap::new(),
        };
        let mut setup = String::new();
        if let Some(s) = &self.schema {
            setup.push_str("SET search_path TO ");
            setup.push_str(&crate::Dialect::Postgres.quoted(s));
            setup.push(';');
        }
        if let Some(t) = self.statement_timeout {
            setup.push_str(&format!(
                "SET statement_timeout = {};",
                t.as_millis().max(1)
            ));
        }
        if !setup.is_empty() {
            conn.simple(&setup)?;
        }
        Ok(conn)
    }
}

/// One PostgreSQL connection.
pub struct PgConn {
    rt: ConnRuntime,
    client: Client,
    stmts: HashMap<String, Statement>,
}

/// A connection's runtime, which may be dropped anywhere: tokio panics when
/// a runtime is dropped where blocking is not allowed (a task of another
/// runtime, such as the end of an async `main` that owned the engine), as it
/// would wait there for the runtime's threads to end.
struct ConnRuntime(Option<tokio::runtime::Runtime>);

impl std::ops::Deref for ConnRuntime {
    type Target = tokio::runtime::Runtime;

    fn deref(&self) -> &tokio::runtime::Runtime {
        self.0
            .as_ref()
            .expect("a connection's runtime lives until the connection is dropped")
    }
}

impl Drop for ConnRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            if wait_here() != Wait::Here {
                // Its tasks (the connection's socket) are dropped all the
                // same; only the wait for threads its resolver may have
                // started is skipped.
                rt.shutdown_background();
            }
        }
    }
}

/// Classifies a driver error. `connecting`: failures are the server's absence.
fn classify(e: &tokio_postgres::Error, connecting: bool) -> DbError {
    let message = match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(d) => format!("{} ({d})", db.message()),
            None => db.message().to_owned(),
        },
        None => {
            let mut m = e.to_string();
            let mut src = e.source();
            while let Some(s) = src {
                m.push_str(": ");
                m.push_str(&s.to_string());
                src = s.source();
            }
            m
        }
    };
    if let Some(bind) = e.source().and_then(|s| s.downcast_ref::<BindError>()) {
        return DbError::new(DbErrorKind::Type, bind.0.clone());
    }
    let kind = match e.code() {
        Some(c) if *c == SqlState::UNIQUE_VIOLATION => DbErrorKind::Unique,
        Some(c) if *c == SqlState::STRING_DATA_RIGHT_TRUNCATION => DbErrorKind::TooLong,
        Some(c) if *c == SqlState::NOT_NULL_VIOLATION => DbErrorKind::NotNull,
        Some(c) if *c == SqlState::SEQUENCE_GENERATOR_LIMIT_EXCEEDED => DbErrorKind::IdsExhausted,
        Some(c)
            if *c == SqlState::INVALID_TEXT_REPRESENTATION
                || *c == SqlState::NUMERIC_VALUE_OUT_OF_RANGE
                || *c == SqlState::DATATYPE_MISMATCH
                || *c == SqlState::DATETIME_FIELD_OVERFLOW
                || *c == SqlState::INVALID_DATETIME_FORMAT
                || *c == SqlState::CHARACTER_NOT_IN_REPERTOIRE
                || *c == SqlState::UNTRANSLATABLE_CHARACTER =>
        {
            DbErrorKind::Type
        }
        Some(c) if *c == SqlState::QUERY_CANCELED => DbErrorKind::Timeout,
        Some(c)
            if *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
                || c.code().starts_with("08") =>
        {
            DbErrorKind::Lost
        }
        Some(_) => DbErrorKind::Other,
        None if e.is_closed() || connecting => DbErrorKind::Lost,
        None if message.contains("timeout") || message.contains("timed out") => {
            DbErrorKind::Timeout
        }
        None => DbErrorKind::Lost,
    };
    DbError::new(kind, message)
}

fn err_of(client: &Client, e: &tokio_postgres::Error) -> DbError {
    let mut d = classify(e, false);
    if client.is_closed() {
        d.kind = DbErrorKind::Lost;
    }
    d
}

/// Rows a read made from a single-threaded runtime's context holds in
/// flight between the thread that reads them and the caller's.
const ASIDE_ROWS: usize = 256;

/// How the calling thread may wait for a future of a connection's
/// single-threaded runtime: `Runtime::block_on` panics on a thread that is
/// driving a runtime's tasks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Outside any runtime: `block_on` here.
    Here,
    /// On a thread of a multi-threaded runtime: its blocking pool (where
    /// Burrow's HTTP server makes its engine calls), a `block_in_place`, or
    /// one of its workers. `block_in_place` runs the wait at once where
    /// blocking is allowed, and on a worker first hands the worker's other
    /// tasks to another thread.
    InPlace,
    /// Inside a single-threaded runtime, this module's own included: a row
    /// callback of a streamed read that calls a PostgreSQL engine again.
    /// Only another thread may wait there.
    Aside,
}

/// How this thread may wait, from the runtime whose context it is in.
fn wait_here() -> Wait {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Err(_) => Wait::Here,
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => Wait::InPlace,
        Ok(_) => Wait::Aside,
    }
}

/// Runs `f` on `rt` to its end, on this thread where [`wait_here`] allows
/// it, else on a short-lived thread of its own while this one waits. A new
/// thread for every call made from any runtime's context made a by-ID read
/// from a blocking-pool thread take 141–209 µs, where a plain thread's took
/// 27–83 µs (local PostgreSQL, runs of 200 and 1,000 reads); waiting in
/// place it takes 26–112 µs, as a plain thread's does (29–105 µs).
fn block<F>(rt: &tokio::runtime::Runtime, f: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    match wait_here() {
        Wait::Here => rt.block_on(f),
        Wait::InPlace => tokio::task::block_in_place(|| rt.block_on(f)),
        Wait::Aside => std::thread::scope(|s| s.spawn(|| rt.block_on(f)).join())
            .unwrap_or_else(|p| std::panic::resume_unwind(p)),
    }
}

/// Runs `stmt` and hands each row to `each` while it answers `true`.
async fn each_row(
    client: &Client,
    stmt: &Statement,
    params: &[&(dyn ToSql + Sync)],
    mut each: impl FnMut(Row) -> bool,
) -> Result<(), tokio_postgres::Error> {
    let stream = client.query_raw(stmt, params.iter().copied()).await?;
    pin_mut!(stream);
    while let Some(row) = stream.try_next().await? {
        if !each(row) {
            break;
        }
    }
    Ok(())
}

/// A streamed read's outcome: the row callback's failure first, else the
/// server's.
fn ended(
    client: &Client,
    failed: Option<Error>,
    read: Result<(), tokio_postgres::Error>,
) -> Result<(), QueryError> {
    match (failed, read) {
        (Some(e), _) => Err(QueryError::Out(e)),
        (None, Err(e)) => Err(QueryError::Db(err_of(client, &e))),
        (None, Ok(())) => Ok(()),
    }
}

/// Runs `run` (one statement) under a savepoint when `guard` is set, all
/// pipelined in one round trip; on failure rolls back to the savepoint, so the
/// transaction goes on as if the statement had not been sent.
fn guarded<T: Send>(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    guard: bool,
    run: impl std::future::Future<Output = Result<T, tokio_postgres::Error>> + Send,
) -> Result<T, DbError> {
    if !guard {
        return block(rt, run).map_err(|e| err_of(client, &e));
    }
    let (sp, r, rel) = block(
        rt,
        join3(
            client.batch_execute("SAVEPOINT burrow_stmt"),
            run,
            client.batch_execute("RELEASE SAVEPOINT burrow_stmt"),
        ),
    );
    if let Err(e) = sp {
        return Err(err_of(client, &e));
    }
    match r {
        Ok(v) => {
            rel.map_err(|e| err_of(client, &e))?;
            Ok(v)
        }
        Err(e) => {
            let failure = err_of(client, &e);
            if failure.kind != DbErrorKind::Lost {
                block(
                    rt,
                    client.batch_execute(
                        "ROLLBACK TO SAVEPOINT burrow_stmt; RELEASE SAVEPOINT burrow_stmt",
                    ),
                )
                .map_err(|e| err_of(client, &e))?;
            }
            Err(failure)
        }
    }
}

impl PgConn {
    fn prepare(&mut self, sql: &str) -> Result<Statement, DbError> {
        if let Some(s) = self.stmts.get(sql) {
            return Ok(s.clone());
        }
        let stmt =
            block(&self.rt, self.client.prepare(sql)).map_err(|e| err_of(&self.client, &e))?;
        if self.stmts.len() >= STATEMENT_CACHE {
            self.stmts.clear();
        }
        self.stmts.insert(sql.to_owned(), stmt.clone());
        Ok(stmt)
    }

    /// A query with parameters bound as given (values or arrays).
    fn run_query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        guard: bool,
        out: &mut RowFn<'_>,
    ) -> Result<(), QueryError> {
        let stmt = self.prepare(sql)?;
        // Streamed, the rows reach `out` inside the runtime, on this thread;
        // where only another thread may wait, from that thread
        // ([`PgConn::stream_aside`]). A guarded statement (a write's
        // `RETURNING`) is read whole under its savepoint.
        let wait = wait_here();
        if wait == Wait::Aside && !guard {
            return self.stream_aside(&stmt, params, out);
        }
        if guard {
            let client = &self.client;
            let rows: Vec<Row> = guarded(&self.rt, client, guard, client.query(&stmt, params))?;
            for row in &rows {
                out(&PgRow(row)).map_err(QueryError::Out)?;
            }
            return Ok(());
        }
        let mut failed = None;
        let mut stream = || {
            self.rt
                .block_on(each_row(&self.client, &stmt, params, |row| {
                    match out(&PgRow(&row)) {
                        Ok(()) => true,
                        Err(e) => {
                            failed = Some(e);
                            false
                        }
                    }
                }))
        };
        let read = if wait == Wait::InPlace {
            tokio::task::block_in_place(stream)
        } else {
            stream()
        };
        ended(&self.client, failed, read)
    }

    /// A read made where only another thread may wait ([`Wait::Aside`]):
    /// a thread of its own reads the rows and hands them over, at most
    /// [`ASIDE_ROWS`] in flight, and this one gives them to `out`, which
    /// need not be `Send`. A failing `out` ends the read at the next row.
    fn stream_aside(
        &self,
        stmt: &Statement,
        params: &[&(dyn ToSql + Sync)],
        out: &mut RowFn<'_>,
    ) -> Result<(), QueryError> {
        let (client, rt) = (&self.client, &self.rt);
        let (tx, rx) = std::sync::mpsc::sync_channel::<Row>(ASIDE_ROWS);
        std::thread::scope(|s| {
            // `send` blocks this runtime while the rows in flight are many:
            // the server then waits on the socket.
            let reader = s.spawn(move || {
                rt.block_on(each_row(client, stmt, params, |row| tx.send(row).is_ok()))
            });
            let mut failed = None;
            for row in rx.iter() {
                if let Err(e) = out(&PgRow(&row)) {
                    failed = Some(e);
                    break;
                }
            }
            // The reader, perhaps waiting for room, sees the end.
            drop(rx);
            let read = reader
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            ended(client, failed, read)
        })
    }

    /// Sends `queries` in pipelines of `chunk`, each its own Bind, Execute
    /// and Sync, back to back, and hands `out` each query's position and
    /// rows once its whole pipeline has answered: a failure hands out nothing
    /// of that pipeline, so the caller may read it again elsewhere.
    fn pipelined(
        &mut self,
        queries: &[(&str, &[ValueRef<'_>])],
        chunk: usize,
        out: &mut dyn FnMut(usize, &[Row]) -> Result<()>,
    ) -> Result<(), QueryError> {
        let mut stmts: Vec<Statement> = Vec::with_capacity(queries.len());
        for (i, (sql, _)) in queries.iter().enumerate() {
            // By-key reads repeat one statement: looked up once, not per key.
            let same = i > 0 && queries[i - 1].0 == *sql;
            let stmt = match stmts.last() {
                Some(last) if same => last.clone(),
                _ => self.prepare(sql)?,
            };
            stmts.push(stmt);
        }
        let client = &self.client;
        for (c, part) in queries.chunks(chunk).enumerate() {
            let at = c * chunk;
            // Every query's arguments in one vector, each query its slice.
            let args: Vec<PgArg<'_, '_>> = part
                .iter()
                .flat_map(|(_, params)| params.iter().map(PgArg))
                .collect();
            let mut from = 0;
            let answers = block(
                &self.rt,
                join_all(part.iter().zip(&stmts[at..]).map(|((_, params), stmt)| {
                    let mine = &args[from..from + params.len()];
                    from += params.len();
                    async move {
                        let rows = client
                            .query_raw(stmt, mine.iter().map(|a| a as &(dyn ToSql + Sync)))
                            .await?;
                        rows.try_collect::<Vec<Row>>().await
                    }
                })),
            );
            let mut lists = Vec::with_capacity(answers.len());
            for a in answers {
                lists.push(a.map_err(|e| QueryError::Db(err_of(client, &e)))?);
            }
            for (i, rows) in lists.iter().enumerate() {
                out(at + i, rows).map_err(QueryError::Out)?;
            }
        }
        Ok(())
    }

    /// Runs a statement whose parameters are whole columns, bound as arrays
    /// (for `UNNEST` and `= ANY`), handing each returned row to `out`.
    pub fn query_arrays(
        &mut self,
        sql: &str,
        columns: &[Vec<ValueRef<'_>>],
        guard: bool,
        out: &mut RowFn<'_>,
    ) -> Result<(), QueryError> {
        let arrays: Vec<PgArray<'_, '_>> = columns.iter().map(|c| PgArray(c)).collect();
        let refs: Vec<&(dyn ToSql + Sync)> =
            arrays.iter().map(|a| a as &(dyn ToSql + Sync)).collect();
        self.run_query(sql, &refs, guard, out)
    }
}

impl Conn for PgConn {
    fn execute(&mut self, sql: &str, params: &[ValueRef<'_>], guard: bool) -> Result<u64, DbError> {
        let stmt = self.prepare(sql)?;
        let args: Vec<PgArg<'_, '_>> = params.iter().map(PgArg).collect();
        let client = &self.client;
        guarded(
            &self.rt,
            client,
            guard,
            client.execute_raw(&stmt, args.iter()),
        )
    }

    fn query(
        &mut self,
        sql: &str,
        params: &[ValueRef<'_>],
        guard: bool,
        out: &mut RowFn<'_>,
    ) -> Result<(), QueryError> {
        let args: Vec<PgArg<'_, '_>> = params.iter().map(PgArg).collect();
        let refs: Vec<&(dyn ToSql + Sync)> =
            args.iter().map(|a| a as &(dyn ToSql + Sync)).collect();
        self.run_query(sql, &refs, guard, out)
    }

    fn query_first_each(
        &mut self,
        sql: &str,
        keys: &[i64],
        out: &mut EachRawRow<'_>,
    ) -> Result<(), QueryError> {
        let params: Vec<[ValueRef<'_>; 1]> = keys.iter().map(|&k| [ValueRef::Int(k)]).collect();
        let queries: Vec<(&str, &[ValueRef<'_>])> = params.iter().map(|p| (sql, &p[..])).collect();
        self.pipelined(&queries, PIPELINE, &mut |i, rows| match rows.first() {
            Some(row) => out(i, Some(&PgRow(row))),
            None => out(i, None),
        })
    }

    fn query_each(
        &mut self,
        queries: &[(&str, &[ValueRef<'_>])],
        out: &mut EachQueried<'_>,
    ) -> Result<(), QueryError> {
        self.pipelined(queries, SELECTS_PIPELINED, &mut |i, rows| {
            rows.iter().try_for_each(|row| out(i, &PgRow(row)))
        })
    }

    fn simple(&mut self, sql: &str) -> Result<(), DbError> {
        block(&self.rt, self.client.batch_execute(sql)).map_err(|e| err_of(&self.client, &e))
    }

    fn last_insert_id(&mut self) -> i64 {
        0
    }

    fn broken(&self) -> bool {
        self.client.is_closed()
    }

    fn ping(&mut self) -> bool {
        self.simple("").is_ok()
    }

    fn as_pg(&mut self) -> Option<&mut PgConn> {
        Some(self)
    }
}

/// A value refused by a parameter's type.
#[derive(Debug)]
struct BindError(String);

impl std::fmt::Display for BindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for BindError {}

type BoxError = Box<dyn StdError + Sync + Send>;

fn refuse(v: &ValueRef<'_>, ty: &Type) -> BoxError {
    Box::new(BindError(format!(
        "a {} value cannot be stored in a column of type {}",
        v.type_name(),
        ty.name()
    )))
}

fn int_to(i: i64, v: &ValueRef<'_>, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
    let range = || -> BoxError {
        Box::new(BindError(format!(
            "{i} is out of range for a column of type {}",
            ty.name()
        )))
    };
    match *ty {
        Type::INT8 => out.extend_from_slice(&i.to_be_bytes()),
        Type::INT4 => out.extend_from_slice(&i32::try_from(i).map_err(|_| range())?.to_be_bytes()),
        Type::INT2 => out.extend_from_slice(&i16::try_from(i).map_err(|_| range())?.to_be_bytes()),
        Type::FLOAT8 => out.extend_from_slice(&(i as f64).to_be_bytes()),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR => {
            out.extend_from_slice(i.to_string().as_bytes())
        }
        _ => return Err(refuse(v, ty)),
    }
    Ok(IsNull::No)
}

fn days_since_2000(d: NaiveDate) -> i32 {
    let base = NaiveDate::from_ymd_opt(2000, 1, 1).expect("valid date");
    (d - base).num_days() as i32
}

fn micros_since_2000(t: DateTime<Utc>) -> i64 {
    // Floored to the microsecond, the type's precision.
    t.timestamp_micros() - PG_EPOCH_MICROS
}

/// One value bound to a parameter, converted to the parameter's type.
#[derive(Debug)]
pub struct PgArg<'v, 'a>(&'v ValueRef<'a>);

impl ToSql for PgArg<'_, '_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        let v = self.0;
        match v {
            ValueRef::Null => return Ok(IsNull::Yes),
            ValueRef::Int(i) => return int_to(*i, v, ty, out),
            ValueRef::Currency(c) => {
                return match *ty {
                    Type::FLOAT8 => {
                        out.extend_from_slice(&c.to_f64().to_be_bytes());
                        Ok(IsNull::No)
                    }
                    Type::TEXT | Type::VARCHAR | Type::BPCHAR => {
                        out.extend_from_slice(c.to_string().as_bytes());
                        Ok(IsNull::No)
                    }
                    _ => int_to(c.scaled(), v, ty, out),
                }
            }
            ValueRef::Bool(b) => match *ty {
                Type::BOOL => out.extend_from_slice(&[u8::from(*b)]),
                _ => return int_to(i64::from(*b), v, ty, out),
            },
            ValueRef::Real(f) => match *ty {
                Type::FLOAT8 => out.extend_from_slice(&f.to_be_bytes()),
                Type::FLOAT4 => out.extend_from_slice(&(*f as f32).to_be_bytes()),
                _ => return Err(refuse(v, ty)),
            },
            ValueRef::Text(t) => match *ty {
                Type::TEXT
                | Type::VARCHAR
                | Type::BPCHAR
                | Type::NAME
                | Type::UNKNOWN
                | Type::JSON => out.extend_from_slice(t.as_bytes()),
                Type::JSONB => {
                    out.extend_from_slice(&[1]);
                    out.extend_from_slice(t.as_bytes());
                }
                _ => return Err(refuse(v, ty)),
            },
            ValueRef::Blob(b) => match *ty {
                Type::BYTEA => out.extend_from_slice(b),
                _ => return Err(refuse(v, ty)),
            },
            ValueRef::Date(d) => match *ty {
                Type::DATE => out.extend_from_slice(&days_since_2000(*d).to_be_bytes()),
                Type::TIMESTAMP | Type::TIMESTAMPTZ => {
                    let t = d.and_hms_opt(0, 0, 0).expect("midnight").and_utc();
                    out.extend_from_slice(&micros_since_2000(t).to_be_bytes())
                }
                Type::TEXT | Type::VARCHAR | Type::BPCHAR => {
                    out.extend_from_slice(format_date(*d).as_bytes())
                }
                _ => return Err(refuse(v, ty)),
            },
            ValueRef::DateTime(t) => match *ty {
                Type::TIMESTAMP | Type::TIMESTAMPTZ => {
                    out.extend_from_slice(&micros_since_2000(*t).to_be_bytes())
                }
                Type::TEXT | Type::VARCHAR | Type::BPCHAR => {
                    out.extend_from_slice(format_datetime(*t).as_bytes())
                }
                _ => return Err(refuse(v, ty)),
            },
        }
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

/// A column of values bound as one array parameter.
#[derive(Debug)]
pub struct PgArray<'v, 'a>(&'v [ValueRef<'a>]);

impl ToSql for PgArray<'_, '_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        let member = match ty.kind() {
            Kind::Array(m) => m,
            _ => {
                return Err(Box::new(BindError(format!(
                    "{} is not an array type",
                    ty.name()
                ))))
            }
        };
        // The binary array format: dimensions, a null flag, the element type,
        // then each element as a length and its bytes (-1 for NULL).
        let has_null = self.0.iter().any(ValueRef::is_null);
        out.extend_from_slice(&1i32.to_be_bytes());
        out.extend_from_slice(&i32::from(has_null).to_be_bytes());
        out.extend_from_slice(&member.oid().to_be_bytes());
        let len = i32::try_from(self.0.len())
            .map_err(|_| Box::new(BindError("array too long".into())) as BoxError)?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&1i32.to_be_bytes());
        for v in self.0 {
            let at = out.len();
            out.extend_from_slice(&0i32.to_be_bytes());
            match PgArg(v).to_sql(member, out)? {
                IsNull::Yes => out[at..at + 4].copy_from_slice(&(-1i32).to_be_bytes()),
                IsNull::No => {
                    let n = i32::try_from(out.len() - at - 4)
                        .map_err(|_| Box::new(BindError("value too large".into())) as BoxError)?;
                    out[at..at + 4].copy_from_slice(&n.to_be_bytes());
                }
            }
        }
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        matches!(ty.kind(), Kind::Array(_))
    }

    tokio_postgres::types::to_sql_checked!();
}

/// A column's raw bytes, whatever its type.
struct PgRaw<'a>(Option<&'a [u8]>);

impl<'a> FromSql<'a> for PgRaw<'a> {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        Ok(PgRaw(Some(raw)))
    }
    fn from_sql_null(_: &Type) -> Result<Self, BoxError> {
        Ok(PgRaw(None))
    }
    fn accepts(_: &Type) -> bool {
        true
    }
}

struct PgRow<'r>(&'r Row);

fn bad_value(ty: &Type) -> Error {
    Error::engine(
        crate::ENGINE,
        format!("cannot read a value of PostgreSQL type {}", ty.name()),
    )
}

fn be<const N: usize>(raw: &[u8], ty: &Type) -> Result<[u8; N]> {
    raw.try_into().map_err(|_| bad_value(ty))
}

impl RawRow for PgRow<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn value(&self, col: usize) -> Result<ValueRef<'_>> {
        let ty = self
            .0
            .columns()
            .get(col)
            .ok_or_else(|| Error::engine(crate::ENGINE, format!("no result column {col}")))?
            .type_();
        let raw = match self.0.try_get::<_, PgRaw<'_>>(col) {
            Ok(PgRaw(Some(r))) => r,
            Ok(PgRaw(None)) => return Ok(ValueRef::Null),
            Err(e) => return Err(Error::engine(crate::ENGINE, e)),
        };
        Ok(match *ty {
            Type::INT8 => ValueRef::Int(i64::from_be_bytes(be(raw, ty)?)),
            Type::INT4 => ValueRef::Int(i32::from_be_bytes(be(raw, ty)?).into()),
            Type::INT2 => ValueRef::Int(i16::from_be_bytes(be(raw, ty)?).into()),
            Type::FLOAT8 => ValueRef::Real(f64::from_be_bytes(be(raw, ty)?)),
            Type::FLOAT4 => ValueRef::Real(f32::from_be_bytes(be(raw, ty)?).into()),
            Type::BOOL => ValueRef::Bool(raw.first().is_some_and(|b| *b != 0)),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::JSON | Type::UNKNOWN => {
                ValueRef::Text(std::str::from_utf8(raw).map_err(|_| bad_value(ty))?.into())
            }
            Type::JSONB => ValueRef::Text(
                std::str::from_utf8(raw.get(1..).unwrap_or_default())
                    .map_err(|_| bad_value(ty))?
                    .into(),
            ),
            Type::BYTEA => ValueRef::Blob(raw),
            Type::DATE => {
                let days = i32::from_be_bytes(be(raw, ty)?);
                let base = NaiveDate::from_ymd_opt(2000, 1, 1).expect("valid date");
                ValueRef::Date(
                    base.checked_add_signed(burrow_core::chrono::Duration::days(days.into()))
                        .filter(|d| d.year() > -262_000)
                        .ok_or_else(|| bad_value(ty))?,
                )
            }
            Type::TIMESTAMP | Type::TIMESTAMPTZ => {
                let us = i64::from_be_bytes(be(raw, ty)?);
                ValueRef::DateTime(
                    us.checked_add(PG_EPOCH_MICROS)
                        .and_then(DateTime::from_timestamp_micros)
                        .ok_or_else(|| bad_value(ty))?,
                )
            }
            _ => return Err(bad_value(ty)),
        })
    }
}
