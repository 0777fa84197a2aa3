//! Engines per table: invoices in SQLite, sessions in the memory engine, and
//! one SQL statement joining both.
//!
//! `cargo run -p burrow --example mixed_engines`

use std::sync::Arc;

use burrow::memory::{MemoryEngine, MemoryOptions};
use burrow::prelude::*;
use burrow::sqlite::SqliteEngine;

#[derive(Record, Debug, Clone)]
struct Invoice {
    id: i64,
    customer: i64,
    total: Currency,
}

#[derive(Record, Debug, Clone)]
struct Session {
    id: i64,
    customer: i64,
    #[burrow(unique)]
    token: String,
}

fn main() -> burrow::Result<()> {
    let sqlite = Arc::new(SqliteEngine::memory()?);
    // In memory only; MemoryOptions::file(path) keeps the sessions in a file.
    let memory = Arc::new(MemoryEngine::open(MemoryOptions::memory())?);
    let db = Database::builder(Model::new().with::<Invoice>().with::<Session>())
        .default_engine(sqlite)
        .place::<Session>(memory)
        .open()?;

    for (customer, total) in [(7, "12.50"), (7, "3.10"), (8, "99")] {
        db.add(&mut Invoice {
            id: 0,
            customer,
            total: total.parse().expect("an amount"),
        })?;
    }
    db.add(&mut Session {
        id: 0,
        customer: 7,
        token: "s-1".into(),
    })?;

    // The memory engine answers this without SQL, through its indexes.
    let session = db
        .get_where::<Session>("Token = ?", &params!["s-1"])?
        .expect("the session");
    // The default engine's SQL sees the memory table as a virtual table.
    let invoices: Vec<Invoice> = db.sql_list(
        "SELECT i.* FROM Invoice i JOIN Session s ON s.Customer = i.Customer WHERE s.Token = ?",
        params!["s-1"],
    )?;
    println!(
        "customer {} has {} invoice(s) through session {}",
        session.customer,
        invoices.len(),
        session.token
    );
    assert_eq!(invoices.len(), 2);
    Ok(())
}
