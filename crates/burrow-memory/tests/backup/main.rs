//! Online backup and restore of both embedded engines, against one ledger
//! fixture (the memory engine's tests already build SQLite, as the crash
//! tests do).

#![allow(missing_docs)]

mod ledger;
mod memory;
mod sqlite;
