//! One table in PostgreSQL, the others embedded (feature `postgres`). Needs
//! `BURROW_POSTGRES_URL`, e.g. `postgres://postgres@127.0.0.1:5432/test`.
//!
//! `BURROW_POSTGRES_URL=… cargo run -p burrow --features postgres --example postgres`

use std::sync::Arc;

use burrow::prelude::*;
use burrow::sql::SqlEngine;
use burrow::sqlite::SqliteEngine;

#[derive(Record, Debug, Clone)]
#[burrow(table = "ExampleOrder")]
struct Order {
    id: i64,
    item: String,
    quantity: i32,
}

#[derive(Record, Debug, Clone)]
struct Draft {
    id: i64,
    item: String,
}

fn main() -> burrow::Result<()> {
    let Ok(url) = std::env::var("BURROW_POSTGRES_URL") else {
        eprintln!("set BURROW_POSTGRES_URL, e.g. postgres://postgres@127.0.0.1:5432/test");
        std::process::exit(2);
    };
    let pg = Arc::new(SqlEngine::connect(&url)?);
    let db = Database::builder(Model::new().with::<Order>().with::<Draft>())
        .default_engine(Arc::new(SqliteEngine::memory()?))
        .place::<Order>(pg)
        .open()?;
    let id = db.add(&mut Order {
        id: 0,
        item: "pencils".into(),
        quantity: 12,
    })?;
    db.add(&mut Draft {
        id: 0,
        item: "erasers".into(),
    })?;
    println!(
        "order {id} is in PostgreSQL: {:?}",
        db.retrieve::<Order>(id)?
    );
    println!("drafts stay embedded: {}", db.count::<Draft>("", &[])?);
    db.delete::<Order>(id)?;
    Ok(())
}
