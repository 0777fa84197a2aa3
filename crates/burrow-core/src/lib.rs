//! The core of Burrow: what every engine and client shares.
//!
//! - [`Table`], [`Field`], [`FieldKind`]: the static schema of a record.
//! - [`Value`], [`ValueRef`], [`Currency`]: values between records, engines and the wire.
//! - [`Record`], [`FieldType`], [`Fields`], [`Row`]: records and their per-field conversions.
//! - [`Filter`], [`Query`], [`Select`]: WHERE clauses, checked and re-rendered, never spliced.
//! - [`Storage`], [`RowOps`], [`EngineTx`], [`SqlHost`], [`Caps`]: what engines implement.
//! - [`Orm`], [`Database`], [`Model`], [`Transaction`], [`Batch`]: the application's API.
//! - [`OrmCache`], [`CachedEngine`]: the ORM cache, rows by ID in front of any engine.
//! - [`driver`]: helpers for engine authors.
//! - [`Error`], [`ErrorKind`], [`Result`]: the one error type.

mod apart;
mod batch;
mod cache;
mod currency;
mod database;
pub mod datetime;
mod error;
pub mod eval;
pub mod filter;
pub mod json;
mod nowait;
mod one_table;
mod orm;
mod query;
mod record;
mod reentry;
mod row;
mod schema;
mod storage;
mod text;
mod transaction;
mod value;

pub use batch::{Batch, BatchOptions};
pub use cache::{CacheRule, CachedEngine, OrmCache};
pub use chrono;
pub use currency::{Currency, ParseCurrencyError, CURRENCY_SCALE};
pub use database::{Database, DatabaseBuilder, Model};
pub use error::{Error, ErrorKind, Result};
pub use filter::{CmpOp, Expr, Filter, SqlStyle};
pub use json::JsonDialect;
pub use orm::Orm;
pub use query::{Query, Select};
pub use record::{ConvertError, FieldType, Fields, Json, Record, Ref, Row};
pub use row::OwnedRow;
pub use schema::{AutoTime, Column, Field, FieldKind, Table};
pub use storage::{
    BatchItem, BatchOp, BatchResult, Caps, EachRow, EachSelected, EngineTx, OnlineBackup,
    Placement, RowOps, SqlHost, Storage, DEFAULT_LOCK_TIMEOUT,
};
pub use transaction::Transaction;
pub use value::{Params, Value, ValueRef};

/// What engine authors and servers share, apart from what applications use.
pub mod driver {
    /// Keeping a thread off one processor for a while, where two threads
    /// that hand work to each other would otherwise share one.
    pub mod apart {
        #[cfg(unix)]
        pub use crate::apart::incoming_cpu;
        pub use crate::apart::{current, keep_off, Away};
    }
    pub use crate::batch::field_subset;
    pub use crate::cache::{CacheScope, TxWrites};
    pub use crate::nowait::{refuse, taken_now, waits_refused, without_waiting};
    pub use crate::reentry::{held, holding, nested, Holding};
    /// One-table SQL read without an SQL engine, as the memory engine and
    /// [`crate::Orm::sql_list`] read it.
    pub mod one_table {
        pub use crate::one_table::{select, SUBSET};
    }
    pub use crate::storage::{apply_each, apply_one};
    pub use crate::text::utf8;
    pub use crate::transaction::{engine_order, next_tx_token, run_batch, same_engine, Run};
}
