//! Embedded quickstart: a record, a SQLite file, and the everyday calls.
//!
//! `cargo run -p burrow --example quickstart`

use std::sync::Arc;

use burrow::prelude::*;
use burrow::sqlite::{SqliteEngine, SqliteOptions};

#[derive(Record, Debug, Clone, PartialEq)]
struct Task {
    id: i64,
    #[burrow(unique)]
    title: String,
    #[burrow(index)]
    done: bool,
    estimate: Currency,
}

fn main() -> burrow::Result<()> {
    let dir = std::env::temp_dir().join(format!("burrow-quickstart-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // A file with the safe defaults: synchronous=FULL, a rollback journal.
    let engine = Arc::new(SqliteEngine::open(SqliteOptions::file(
        dir.join("tasks.db"),
    ))?);
    let db = Database::open(Model::new().with::<Task>(), engine)?;

    let mut write = Task {
        id: 0,
        title: "write the report".into(),
        done: false,
        estimate: "2.5".parse().expect("an amount"),
    };
    let id = db.add(&mut write)?; // the new ID is set in `write` too
    println!("added task {id}");

    write.done = true;
    db.update_fields(&mut write, &["Done"])?;
    let back: Task = db.retrieve(id)?;
    assert_eq!(back, write);

    // WHERE clauses are checked against the model; values are bound.
    let open = db.list::<Task>("Done = ?", &params![false])?;
    println!(
        "{} open task(s), {} in all",
        open.len(),
        db.count::<Task>("", &[])?
    );

    // A unique field refuses a duplicate, and nothing is written.
    let err = db.add(&mut write.clone()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UniqueViolation);
    println!("duplicate refused: {err}");

    db.delete::<Task>(id)?;
    assert!(db.get::<Task>(id)?.is_none());
    drop(db);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
