//! Burrow's external SQL engine: tables of a model kept in PostgreSQL,
//! MySQL/MariaDB, or SQLite through the same layer, with the same `Orm` API as
//! the embedded engines.
//!
//! ```no_run
//! use std::sync::Arc;
//! use burrow_sql::SqlEngine;
//!
//! let pg = Arc::new(SqlEngine::connect("postgres://postgres@127.0.0.1/test")?);
//! // Database::builder(model).default_engine(sqlite).place::<Sample>(pg).open()?
//! # Ok::<(), burrow_core::Error>(())
//! ```
//!
//! - [`SqlEngine`]: the [`burrow_core::Storage`] implementation.
//! - [`SqlTx`]: its open transaction, which owns one pooled connection.
//! - [`SqlEngineBuilder`]: the URL, the pool, the timeouts, the mapping of
//!   records onto an existing schema.
//! - [`Dialect`], [`DateTimeStorage`]: how SQL and values differ per database.
//!
//! Inside: `conn` is what the engine asks of a connection; `pg`, `my` and
//! `lite` are the three drivers (each behind its cargo feature); `pool` lends
//! connections, for one call or for a transaction's whole life; `schema`
//! creates or maps tables; `table` holds each table's statements; `dialect`
//! says how each database differs; `engine` is the `Storage` implementation
//! and `server` what it learns from the server; `rows` writes each row call
//! once, for the engine's own calls and for `tx`, the transaction handle;
//! `writes` holds the single-row writes, `batch` the array-bound and
//! multi-row batches, and `values` the conversion of values to and from
//! their columns.
//! `docs/external.md` explains the choices and the measured gains.
#![forbid(unsafe_code)]
// Parts used by one driver only are dead when its feature is off.
#![cfg_attr(not(all(feature = "postgres", feature = "mysql")), allow(dead_code))]

mod batch;
mod conn;
mod dialect;
mod engine;
#[cfg(feature = "sqlite")]
mod lite;
#[cfg(feature = "mysql")]
mod my;
mod options;
#[cfg(feature = "postgres")]
mod pg;
#[cfg(feature = "postgres")]
mod pgtls;
mod pool;
mod rows;
mod schema;
mod server;
mod table;
mod tx;
mod values;
mod writes;

pub use dialect::{DateTimeStorage, Dialect};
pub use engine::SqlEngine;
pub use options::{redact, SqlEngineBuilder, SqlOptions};
pub use tx::SqlTx;

/// The engine name in errors.
const ENGINE: &str = "external SQL";

/// The PostgreSQL driver, for SQL of your own beside the engine (feature `postgres`).
#[cfg(feature = "postgres")]
pub use tokio_postgres;

/// The Tokio runtime the PostgreSQL driver runs on (feature `postgres`).
#[cfg(feature = "postgres")]
pub use tokio;

/// The MySQL/MariaDB driver (feature `mysql`).
#[cfg(feature = "mysql")]
pub use mysql;
