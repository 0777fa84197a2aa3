//! Where `Orm::sql_list` runs a statement: a whole-table read of a table held
//! by another engine than the SQL host is answered by that engine; anything
//! with a WHERE, a join or a column list goes through the SQL host.

use std::sync::Arc;

use burrow::memory::MemoryEngine;
use burrow::sqlite::SqliteEngine;
use burrow::{Database, Model, Orm, Record};

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Item")]
struct Item {
    id: i64,
    name: String,
}

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[test]
fn whole_table_reads_skip_the_sql_host() -> TestResult {
    let host = Arc::new(SqliteEngine::memory()?);
    let db = Database::builder(Model::new().with::<Item>())
        .default_engine(host.clone())
        .place::<Item>(Arc::new(MemoryEngine::new()))
        .open()?;
    for name in ["b", "a", "c"] {
        db.add(&mut Item {
            id: 0,
            name: name.into(),
        })?;
    }
    let names = |rows: Vec<Item>| rows.into_iter().map(|i| i.name).collect::<Vec<_>>();
    assert_eq!(
        names(db.sql_list("SELECT * FROM Item WHERE ID > 1", &[])?),
        ["a", "c"]
    );
    // Without the host's virtual table, only what the engine answers works.
    host.with_connection(|c| c.execute_batch("DROP TABLE Item"))?;
    assert_eq!(
        names(db.sql_list("SELECT * FROM Item", &[])?),
        ["b", "a", "c"]
    );
    assert_eq!(
        names(db.sql_list(
            "select * from \"Item\" order by Name desc limit ?",
            &[2.into()]
        )?),
        ["c", "b"]
    );
    let tx = db.transaction()?;
    assert_eq!(tx.sql_list::<Item>("SELECT * FROM Item", &[])?.len(), 3);
    drop(tx);
    for through_host in [
        "SELECT * FROM Item WHERE ID > 1",
        "SELECT ID, Name FROM Item",
        "SELECT * FROM Item i JOIN Item j ON i.ID = j.ID",
    ] {
        let e = db
            .sql_list::<Item>(through_host, &[])
            .expect_err(through_host);
        assert!(
            e.to_string().contains("no such table"),
            "{through_host}: {e}"
        );
    }
    Ok(())
}

#[test]
fn sql_direct_off_sends_every_statement_to_the_host() -> TestResult {
    let host = Arc::new(SqliteEngine::memory()?);
    let db = Database::builder(Model::new().with::<Item>())
        .default_engine(host.clone())
        .place::<Item>(Arc::new(MemoryEngine::new()))
        .sql_direct(false)
        .open()?;
    db.add(&mut Item::default())?;
    assert_eq!(db.sql_list::<Item>("SELECT * FROM Item", &[])?.len(), 1);
    host.with_connection(|c| c.execute_batch("DROP TABLE Item"))?;
    let e = db
        .sql_list::<Item>("SELECT * FROM Item", &[])
        .expect_err("through the host");
    assert!(e.to_string().contains("no such table"), "{e}");
    Ok(())
}

/// A list read is given room for the rows the same read returned last time;
/// the rows are always the ones there now, and a read that returns far fewer
/// rows than last time keeps no more than twice their room.
#[test]
fn list_reads_sized_from_the_last_hold_the_rows_there_now() -> TestResult {
    let db = Database::builder(Model::new().with::<Item>())
        .default_engine(Arc::new(SqliteEngine::memory()?))
        .open()?;
    let mut batch = burrow::Batch::new();
    batch.add_all((0..1_000).map(|i| Item {
        id: 0,
        name: format!("n{i}"),
    }));
    db.send(&mut batch)?;
    let whole = burrow::Query::all();
    for _ in 0..2 {
        assert_eq!(db.select::<Item>(&whole)?.len(), 1_000);
        assert_eq!(db.sql_list::<Item>("SELECT * FROM Item", &[])?.len(), 1_000);
    }
    assert_eq!(db.delete_where::<Item>("ID > ?", &[10.into()])?, 990);
    let few = db.select::<Item>(&whole)?;
    assert_eq!(few.len(), 10);
    assert!(few.capacity() <= 20, "room for {}", few.capacity());
    let few = db.sql_list::<Item>("SELECT * FROM Item", &[])?;
    assert_eq!(
        few.iter().map(|i| i.id).collect::<Vec<_>>(),
        (1..=10).collect::<Vec<_>>()
    );
    assert!(few.capacity() <= 20, "room for {}", few.capacity());
    // Grown again, every row is read, past the room set aside.
    let mut batch = burrow::Batch::new();
    batch.add_all((0..3_000).map(|i| Item {
        id: 0,
        name: format!("m{i}"),
    }));
    db.send(&mut batch)?;
    assert_eq!(db.select::<Item>(&whole)?.len(), 3_010);
    assert_eq!(db.sql_list::<Item>("SELECT * FROM Item", &[])?.len(), 3_010);
    // A filtered read is not sized from a whole one.
    let one = db.list::<Item>("ID = ?", &[5.into()])?;
    assert_eq!((one.len(), one[0].id), (1, 5));
    assert!(one.capacity() < 100);
    Ok(())
}
