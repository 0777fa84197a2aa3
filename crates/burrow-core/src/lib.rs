//! The core of Burrow: what every engine and client shares.
//!
//! - [`Table`], [`Field`], [`FieldKind`]: the static schema of a record.
//! - [`Value`], [`ValueRef`], [`Currency`]: values between records, engines and the wire.
//! - [`Record`], [`FieldType`], [`Fields`], [`Row`]: records and their per-field conversions.
//! - [`Filter`], [`Query`], [`Select`]: WHERE clauses, checked and re-rendered, never spliced.
//! - [`Storage`]: the trait every engine implements.
//! - [`Orm`], [`Client`], [`Model`], [`Transaction`], [`Batch`]: the application's API.
//! - [`Error`], [`ErrorKind`], [`Result`]: the one error type.

mod batch;
mod client;
mod currency;
pub mod datetime;
mod error;
pub mod eval;
pub mod filter;
pub mod json;
mod orm;
mod query;
mod record;
mod schema;
mod storage;
mod value;

pub use batch::{field_subset, Batch, BatchOptions};
pub use chrono;
pub use client::{Client, ClientBuilder, Model};
pub use currency::{Currency, ParseCurrencyError, CURRENCY_SCALE};
pub use error::{Error, ErrorKind, Result};
pub use filter::{CmpOp, Expr, Filter, SqlStyle};
pub use json::{JsonDialect, OwnedRow};
pub use orm::{apply_batch_items, same_engine, Orm, Transaction};
pub use query::{Query, Select};
pub use record::{ConvertError, FieldType, Fields, Json, Record, Ref, Row};
pub use schema::{AutoTime, Column, Field, FieldKind, Table};
pub use storage::{apply_one, BatchItem, BatchOp, BatchResult, Storage};
pub use value::{Value, ValueRef};
