//! Conformance tests of the ORM API, run against every engine configuration.
//!
//! Each test body is written once, against a [`common::Factory`] of fresh
//! stores, and `conformance!` runs it on SQLite in memory and SQLite in a file
//! (a later engine is one more line in that macro). Test names read
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
