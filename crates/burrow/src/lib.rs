#![doc = include_str!("../../../README.md")]
//!
//! # Crate layout
//!
//! Everything an application needs is re-exported here, flat: the [`Record`]
//! derive and trait, [`Orm`], [`Client`], [`Model`], [`Query`], [`Batch`],
//! [`Value`], [`Currency`], [`Error`]. Engines live behind cargo features:
//! `sqlite` (default) adds [`sqlite::SqliteEngine`], `memory` (default) adds
//! [`memory::MemoryEngine`].

pub use burrow_core::*;
pub use burrow_derive::Record;

/// The embedded SQLite engine (feature `sqlite`).
#[cfg(feature = "sqlite")]
pub mod sqlite {
    pub use burrow_sqlite::{rusqlite, LockingMode, SqliteEngine, SqliteOptions, Synchronous};
}

/// The HTTP server, the HTTP client engine and the ORM cache (feature `http`).
#[cfg(feature = "http")]
pub mod http {
    pub use burrow_http::*;
}

/// The in-memory engine (feature `memory`).
#[cfg(feature = "memory")]
pub mod memory {
    pub use burrow_memory::{FileError, FileFormat, MemoryEngine, MemoryOptions};
}

/// External databases: PostgreSQL (feature `postgres`), MySQL/MariaDB
/// (feature `mysql`) and SQLite files through the same layer (feature `sql`).
#[cfg(feature = "sql")]
pub mod sql {
    pub use burrow_sql::{
        redact, DateTimeStorage, Dialect, SqlEngine, SqlEngineBuilder, SqlOptions,
    };
}
