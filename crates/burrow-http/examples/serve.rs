//! A Burrow server over in-memory SQLite with sample rows, for load checks:
//! `cargo run --release -p burrow-http --example serve -- 127.0.0.1:8080 10000 [inline|pool]`.
//! Prints its URL, then serves until Ctrl-C or SIGTERM, and shuts down
//! gracefully.

use std::sync::Arc;

use burrow_core::chrono::{DateTime, NaiveDate, Utc};
use burrow_core::{Batch, Currency, Database, Model, Orm};
use burrow_derive::Record;
use burrow_http::{Execution, Server};
use burrow_sqlite::SqliteEngine;

/// The benchmark's record.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Sample")]
struct Sample {
    id: i64,
    first_name: String,
    last_name: String,
    amount: Currency,
    birth_date: NaiveDate,
    #[burrow(modified)]
    last_change: DateTime<Utc>,
    #[burrow(created)]
    created_at: DateTime<Utc>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let addr = args.get(1).map_or("127.0.0.1:8080", String::as_str);
    let rows: usize = args.get(2).map_or(Ok(10_000), |s| s.parse())?;
    let execution = match args.get(3).map(String::as_str) {
        Some("pool") => Execution::Pool,
        Some("inline") => Execution::Inline,
        _ => Execution::Auto,
    };
    let engine = Arc::new(SqliteEngine::memory()?);
    let client = Arc::new(Database::open(Model::new().with::<Sample>(), engine)?);
    let mut batch = Batch::new();
    batch.add_all((0..rows).map(|i| Sample {
        first_name: format!("Salvador{i}"),
        last_name: format!("Dali{}", i * 7),
        amount: Currency::from_scaled(i as i64 * 12_345),
        birth_date: NaiveDate::from_ymd_opt(1900 + (i % 100) as i32, 1, 1).unwrap_or_default(),
        ..Sample::default()
    }));
    client.send(&mut batch)?;
    let server = Server::builder(client, "root")
        .no_auth()
        .execution(execution)
        .bind(addr)?;
    println!("{}", server.url());
    server.run_until_signal()?;
    Ok(())
}
