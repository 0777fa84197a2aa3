#![doc = include_str!("../../../README.md")]
//!
//! # Crate layout
//!
//! What applications use is here, flat: the [`Record`] derive and trait,
//! [`Orm`], [`Database`], [`Transaction`], [`Model`], [`Query`], [`Batch`],
//! [`Value`], [`Currency`], [`Error`], and the ORM cache ([`OrmCache`] in
//! front of any engine through [`CachedEngine`]); [`prelude`] brings the traits and the
//! common types in with one `use`. Engines live behind cargo features:
//! [`sqlite`] (default), [`memory`] (default), [`sql`] (`sql`, `postgres`,
//! `mysql`), [`http`] (`http`, `tls`). What engine authors need, and
//! applications do not, is in [`driver`].
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use burrow_core::{
    params, Batch, BatchOptions, BatchResult, CacheRule, CachedEngine, Currency, Database,
    DatabaseBuilder, Error, ErrorKind, Json, Model, Orm, OrmCache, Params, ParseCurrencyError,
    Query, Record, Ref, Result, Storage, Transaction, Value, CURRENCY_SCALE,
};
pub use burrow_core::{AutoTime, Field, FieldKind, FieldType, Table};
pub use burrow_derive::Record;
pub use {burrow_core::chrono, serde_json};

// What `#[derive(Record)]` expands to names these; applications seldom do.
#[doc(hidden)]
pub use burrow_core::{ConvertError, Fields, Row, ValueRef};

/// The traits and the types most code needs: `use burrow::prelude::*;`.
pub mod prelude {
    pub use burrow_core::{
        params, Batch, Currency, Database, Error, ErrorKind, Model, Orm, Query, Record, Result,
        Transaction, Value,
    };
    pub use burrow_derive::Record;
}

/// What engine authors and servers need: the row calls and transaction
/// handles engines implement, batch items, filters and selects as engines
/// receive them, and the helpers engines share.
pub mod driver {
    pub use burrow_core::driver::*;
    pub use burrow_core::forward_row_ops;
    pub use burrow_core::{
        datetime, eval, filter, json, BatchItem, BatchOp, Caps, CmpOp, Column, ConvertError,
        EngineTx, Expr, Fields, Filter, JsonDialect, OnlineBackup, OwnedRow, Placement, Row,
        RowOps, Select, SqlHost, SqlStyle, ValueRef, DEFAULT_LOCK_TIMEOUT,
    };
}

/// The embedded SQLite engine (feature `sqlite`).
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod sqlite {
    pub use burrow_sqlite::{
        configure_library, rusqlite, verify_backup, BackupOptions, BackupProgress, BackupSummary,
        LockingMode, SqliteEngine, SqliteOptions, SqliteTx, Synchronous,
    };
    /// An encrypted file's key, its page authentication, and the check of
    /// an encrypted backup (feature `encryption`).
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub use burrow_sqlite::{verify_encrypted_backup, Key, PageHmac};
}

/// The in-memory engine (feature `memory`).
#[cfg(feature = "memory")]
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
pub mod memory {
    pub use burrow_memory::{FileError, FileFormat, MemoryEngine, MemoryOptions, MemoryTx};
}

/// The HTTP server and the HTTP client engine (feature `http`); both take an
/// [`OrmCache`].
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http {
    pub use burrow_http::*;
}

/// External databases: PostgreSQL (feature `postgres`), MySQL/MariaDB
/// (feature `mysql`) and SQLite files through the same layer (feature `sql`).
#[cfg(feature = "sql")]
#[cfg_attr(docsrs, doc(cfg(feature = "sql")))]
pub mod sql {
    pub use burrow_sql::{
        redact, DateTimeStorage, Dialect, SqlEngine, SqlEngineBuilder, SqlOptions,
    };
}
