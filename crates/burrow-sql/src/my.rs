//! MySQL and MariaDB through the synchronous `mysql` driver.
//!
//! Statements go through the binary protocol and the driver's per-connection
//! statement cache (keyed by SQL text), so each is prepared once per
//! connection. Every connection runs in strict mode (a value too long or of
//! the wrong type is an error, never a silent truncation), in UTC, and reports
//! *matched* rather than changed rows, so an update that rewrites a row with
//! its own values still counts as found.

use std::time::Duration;

use burrow_core::chrono::{DateTime, Datelike, NaiveDate, NaiveTime, Timelike, Utc};
use burrow_core::{Error, Result, ValueRef};
use mysql::consts::{CapabilityFlags, ColumnType};
use mysql::prelude::Queryable;
use mysql::{Opts, OptsBuilder, Params, Value};

use crate::conn::{Conn, DbError, DbErrorKind, QueryError, RawRow, RowFn};
use crate::options::SqlOptions;

/// What the engine configures on every new connection.
pub struct MySetup {
    opts: Opts,
    statement_timeout: Option<Duration>,
}

impl MySetup {
    /// Parses the URL (`mysql://` or `mariadb://`) and applies the options.
    pub fn new(o: &SqlOptions) -> Result<Self> {
        let url = match o.url.split_once("://") {
            Some((s, rest)) if s.eq_ignore_ascii_case("mariadb") => format!("mysql://{rest}"),
            _ => o.url.clone(),
        };
        let opts =
            Opts::from_url(&url).map_err(|e| Error::BadInput(format!("bad MySQL URL: {e}")))?;
        let init = vec![
            "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,\
             ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'"
                .to_owned(),
            "SET SESSION time_zone = '+00:00'".to_owned(),
        ];
        let mut b = OptsBuilder::from_opts(opts)
            .tcp_connect_timeout(Some(o.connect_timeout))
            .stmt_cache_size(512)
            .additional_capabilities(CapabilityFlags::CLIENT_FOUND_ROWS);
        if let Some(t) = o.statement_timeout {
            // A socket read timeout is the backstop; MariaDB's own limit is
            // set on each new connection (MySQL lacks it).
            b = b.read_timeout(Some(t + Duration::from_secs(5)));
        }
        if let Some(db) = &o.schema {
            b = b.db_name(Some(db));
        }
        Ok(MySetup {
            opts: b.init(init).into(),
            statement_timeout: o.statement_timeout,
        })
    }

    /// Opens a connection.
    pub fn connect(&self) -> Result<MyConn, DbError> {
        let conn = mysql::Conn::new(self.opts.clone()).map_err(|e| {
            let mut d = classify(&e);
            if d.kind == DbErrorKind::Other {
                d.kind = DbErrorKind::Lost;
            }
            d
        })?;
        let mut conn = MyConn {
            conn,
            broken: false,
        };
        if let Some(t) = self.statement_timeout {
            // MariaDB only; MySQL refuses the name and keeps the read timeout.
            let _ = conn.simple(&format!(
                "SET SESSION max_statement_time = {}",
                t.as_secs_f64()
            ));
        }
        Ok(conn)
    }
}

/// One MySQL/MariaDB connection.
pub struct MyConn {
    conn: mysql::Conn,
    broken: bool,
}

impl MyConn {
    fn fail(&mut self, e: mysql::Error) -> DbError {
        let d = classify(&e);
        if d.kind == DbErrorKind::Lost {
            self.broken = true;
        }
        d
    }
}

fn classify(e: &mysql::Error) -> DbError {
    let kind = match e {
        mysql::Error::MySqlError(m) => match m.code {
            1062 | 1586 => DbErrorKind::Unique,
            1406 => DbErrorKind::TooLong,
            1264 | 1265 | 1292 | 1366 | 1367 | 1411 => DbErrorKind::Type,
            1048 | 1364 => DbErrorKind::NotNull,
            // HA_ERR_AUTOINC_ERANGE: the auto-increment passed its column's range.
            167 => DbErrorKind::IdsExhausted,
            1969 | 3024 => DbErrorKind::Timeout,
            1053 | 1152 | 1156 | 1158 | 1159 | 1160 | 1161 | 1184 | 1927 | 2006 | 2013 => {
                DbErrorKind::Lost
            }
            _ => DbErrorKind::Other,
        },
        // A socket that failed mid-exchange (a read timeout included) leaves the
        // protocol out of step: the connection cannot be used again.
        mysql::Error::IoError(_) => DbErrorKind::Lost,
        mysql::Error::CodecError(_) => DbErrorKind::Lost,
        mysql::Error::DriverError(d) => match d {
            mysql::DriverError::PacketOutOfSync
            | mysql::DriverError::UnexpectedPacket
            | mysql::DriverError::CouldNotConnect(_) => DbErrorKind::Lost,
            mysql::DriverError::ConnectTimeout | mysql::DriverError::Timeout => {
                DbErrorKind::Timeout
            }
            _ => DbErrorKind::Other,
        },
        _ => DbErrorKind::Other,
    };
    let message = match e {
        mysql::Error::MySqlError(m) => format!("{} (MySQL error {})", m.message, m.code),
        other => other.to_string(),
    };
    DbError::new(kind, message)
}

fn bind_err(msg: String) -> DbError {
    DbError::new(DbErrorKind::Type, msg)
}

fn date_value(d: NaiveDate, t: NaiveTime) -> Result<Value, DbError> {
    let year = u16::try_from(d.year())
        .ok()
        .filter(|y| *y <= 9999)
        .ok_or_else(|| bind_err(format!("year {} is outside what MySQL stores", d.year())))?;
    Ok(Value::Date(
        year,
        d.month() as u8,
        d.day() as u8,
        t.hour() as u8,
        t.minute() as u8,
        t.second().min(59) as u8,
        // Floored to the microsecond, the type's precision.
        (t.nanosecond() % 1_000_000_000) / 1000,
    ))
}

/// Converts a value to the driver's; text and bytes are copied (the driver
/// owns its parameters).
pub fn to_value(v: &ValueRef<'_>) -> Result<Value, DbError> {
    Ok(match v {
        ValueRef::Null => Value::NULL,
        ValueRef::Int(i) => Value::Int(*i),
        ValueRef::Real(f) if !f.is_finite() => {
            return Err(bind_err(format!(
                "{f} cannot be stored (MySQL has no NaN or infinity)"
            )))
        }
        ValueRef::Real(f) => Value::Double(*f),
        ValueRef::Bool(b) => Value::Int(i64::from(*b)),
        ValueRef::Currency(c) => Value::Int(c.scaled()),
        ValueRef::Text(t) => Value::Bytes(t.as_bytes().to_vec()),
        ValueRef::Blob(b) => Value::Bytes(b.to_vec()),
        ValueRef::Date(d) => date_value(*d, NaiveTime::MIN)?,
        ValueRef::DateTime(t) => date_value(t.date_naive(), t.time())?,
    })
}

fn params(values: &[ValueRef<'_>]) -> Result<Params, DbError> {
    if values.is_empty() {
        return Ok(Params::Empty);
    }
    values
        .iter()
        .map(to_value)
        .collect::<Result<Vec<_>, _>>()
        .map(Params::Positional)
}

impl Conn for MyConn {
    fn execute(
        &mut self,
        sql: &str,
        values: &[ValueRef<'_>],
        _guard: bool,
    ) -> Result<u64, DbError> {
        let p = params(values)?;
        match self.conn.exec_drop(sql, p) {
            Ok(()) => Ok(self.conn.affected_rows()),
            Err(e) => Err(self.fail(e)),
        }
    }

    fn query(
        &mut self,
        sql: &str,
        values: &[ValueRef<'_>],
        _guard: bool,
        out: &mut RowFn<'_>,
    ) -> Result<(), QueryError> {
        let p = params(values)?;
        let mut failed = None;
        let r = (|| -> Result<(), mysql::Error> {
            let result = self.conn.exec_iter(sql, p)?;
            for row in result {
                let row = row?;
                if failed.is_none() {
                    if let Err(e) = out(&MyRow(&row)) {
                        failed = Some(e);
                    }
                }
            }
            Ok(())
        })();
        if let Err(e) = r {
            return Err(QueryError::Db(self.fail(e)));
        }
        match failed {
            Some(e) => Err(QueryError::Out(e)),
            None => Ok(()),
        }
    }

    fn simple(&mut self, sql: &str) -> Result<(), DbError> {
        self.conn.query_drop(sql).map_err(|e| self.fail(e))
    }

    fn last_insert_id(&mut self) -> i64 {
        self.conn.last_insert_id() as i64
    }

    fn broken(&self) -> bool {
        self.broken
    }

    fn ping(&mut self) -> bool {
        let ok = self.conn.ping().is_ok();
        self.broken |= !ok;
        ok
    }
}

struct MyRow<'r>(&'r mysql::Row);

fn bad(msg: String) -> Error {
    Error::engine(crate::ENGINE, msg)
}

impl RawRow for MyRow<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn value(&self, col: usize) -> Result<ValueRef<'_>> {
        let v = self
            .0
            .as_ref(col)
            .ok_or_else(|| bad(format!("no result column {col}")))?;
        let column = &self.0.columns_ref()[col];
        Ok(match v {
            Value::NULL => ValueRef::Null,
            Value::Int(i) => ValueRef::Int(*i),
            Value::UInt(u) => ValueRef::Int(
                i64::try_from(*u).map_err(|_| bad(format!("{u} does not fit a 64-bit integer")))?,
            ),
            Value::Float(f) => ValueRef::Real(f64::from(*f)),
            Value::Double(f) => ValueRef::Real(*f),
            Value::Bytes(b) => {
                // Character set 63 is `binary`: BLOB and VARBINARY columns.
                if column.character_set() == 63
                    && matches!(
                        column.column_type(),
                        ColumnType::MYSQL_TYPE_BLOB
                            | ColumnType::MYSQL_TYPE_TINY_BLOB
                            | ColumnType::MYSQL_TYPE_MEDIUM_BLOB
                            | ColumnType::MYSQL_TYPE_LONG_BLOB
                            | ColumnType::MYSQL_TYPE_VAR_STRING
                            | ColumnType::MYSQL_TYPE_STRING
                    )
                {
                    ValueRef::Blob(b)
                } else {
                    ValueRef::Text(
                        std::str::from_utf8(b)
                            .map_err(|_| bad("invalid UTF-8 in a text column".into()))?
                            .into(),
                    )
                }
            }
            Value::Date(y, m, d, h, mi, s, us) => {
                let date = NaiveDate::from_ymd_opt((*y).into(), (*m).into(), (*d).into())
                    .ok_or_else(|| bad(format!("invalid date {y}-{m}-{d}")))?;
                if column.column_type() == ColumnType::MYSQL_TYPE_DATE {
                    ValueRef::Date(date)
                } else {
                    let time =
                        NaiveTime::from_hms_micro_opt((*h).into(), (*mi).into(), (*s).into(), *us)
                            .ok_or_else(|| bad("invalid time of day".into()))?;
                    ValueRef::DateTime(DateTime::<Utc>::from_naive_utc_and_offset(
                        date.and_time(time),
                        Utc,
                    ))
                }
            }
            Value::Time(..) => return Err(bad("TIME columns are not supported".into())),
        })
    }
}
