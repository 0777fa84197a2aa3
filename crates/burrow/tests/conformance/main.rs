//! Conformance tests of the ORM API, run against every engine configuration.
//!
//! Each test body is written once, against a [`common::Factory`] of fresh
//! stores, and `conformance!` runs it on every engine: SQLite in memory and in
//! a file, the memory engine with and without a file, SQLite through the
//! external layer, SQLite behind the ORM cache (`cached`), SQLite behind a
//! Burrow server on loopback through the HTTP client engine (`remote`), and
//! PostgreSQL and MariaDB (each test in a schema of its own, when
//! `BURROW_POSTGRES_URL` / `BURROW_MARIADB_URL` are set). Test names read
//! `area::body::engine`, so `cargo test -p burrow sqlite_mem` picks one engine.

#[macro_use]
mod common;

mod bad_input;
mod batches;
mod concurrency;
mod field_kinds;
mod model_prop;
mod orm;
mod schema;
mod transactions;
mod virtual_tables;
