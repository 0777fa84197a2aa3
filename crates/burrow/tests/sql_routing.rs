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
