//! Tables of another engine seen through SQLite's SQL as virtual tables.

use std::sync::Arc;

use burrow_core::{params, Currency, Database, Model, Orm, Record, RowOps};
use burrow_derive::Record;
use burrow_sqlite::SqliteEngine;

#[derive(Record, Debug, Clone, PartialEq)]
#[burrow(crate = "burrow_core")]
struct Owner {
    id: i64,
    #[burrow(unique)]
    name: String,
}

#[derive(Record, Debug, Clone, PartialEq)]
#[burrow(crate = "burrow_core")]
struct Pet {
    id: i64,
    owner: i64,
    #[burrow(index)]
    kind: String,
    price: Currency,
}

type Res = Result<(), Box<dyn std::error::Error>>;

/// Pets live in a second engine; owners in the main one.
/// A client, its main engine, and the engine that holds the pets.
type Opened = (Database, Arc<SqliteEngine>, Arc<SqliteEngine>);

fn open() -> Result<Opened, Box<dyn std::error::Error>> {
    let main = Arc::new(SqliteEngine::memory()?);
    let other = Arc::new(SqliteEngine::memory()?);
    let client = Database::builder(Model::new().with::<Owner>().with::<Pet>())
        .default_engine(main.clone())
        .place::<Pet>(other.clone())
        .open()?;
    for (name, pets) in [
        ("Ann", vec![("cat", "10.5"), ("dog", "20")]),
        ("Bob", vec![("cat", "7.25")]),
        ("Cy", vec![]),
    ] {
        let mut o = Owner {
            id: 0,
            name: name.into(),
        };
        client.add(&mut o)?;
        for (kind, price) in pets {
            client.add(&mut Pet {
                id: 0,
                owner: o.id,
                kind: kind.into(),
                price: price.parse()?,
            })?;
        }
    }
    Ok((client, main, other))
}

#[test]
fn join_and_aggregate_across_engines() -> Res {
    let (client, main, other) = open()?;
    // The pets are really in the other engine, not in the main database.
    assert_eq!(other.count(Pet::table(), &burrow_core::Filter::all())?, 3);
    let rows = main.with_connection(|c| {
        let mut s = c.prepare(
            "SELECT o.Name, count(p.ID), coalesce(sum(p.Price), 0) FROM Owner o \
             LEFT JOIN Pet p ON p.Owner = o.ID GROUP BY o.Name ORDER BY o.Name",
        )?;
        let r = s.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })?;
        r.collect::<Result<Vec<_>, _>>()
    })?;
    assert_eq!(
        rows,
        vec![
            ("Ann".into(), 2, 305_000),
            ("Bob".into(), 1, 72_500),
            ("Cy".into(), 0, 0)
        ]
    );
    // Typed reads of a virtual table through the ORM's SQL path.
    let cats: Vec<Pet> = client.sql_list(
        "SELECT * FROM Pet WHERE Kind = ? ORDER BY ID",
        params!["cat"],
    )?;
    assert_eq!(cats.len(), 2);
    assert_eq!(cats[1].price, "7.25".parse()?);
    Ok(())
}

#[test]
fn results_equal_the_same_data_held_in_sqlite() -> Res {
    let (client, main, _) = open()?;
    // The same pets copied into a table of the main engine.
    main.with_connection(|c| c.execute_batch("CREATE TABLE PetCopy AS SELECT * FROM Pet"))?;
    let q = |table: &str| {
        main.with_connection(|c| {
            let sql = format!("SELECT Kind, count(*), sum(Price), max(ID) FROM {table} GROUP BY Kind ORDER BY Kind");
            let mut s = c.prepare(&sql)?;
            let r = s.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?, r.get::<_, i64>(3)?)))?;
            r.collect::<Result<Vec<_>, _>>()
        })
    };
    assert_eq!(q("Pet")?, q("PetCopy")?);
    assert!(!q("Pet")?.is_empty());
    drop(client);
    Ok(())
}

#[test]
fn constraints_are_pushed_down() -> Res {
    let (_client, main, _) = open()?;
    let plan = |sql: &str| {
        main.with_connection(|c| {
            let mut s = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
            let r = s.query_map([], |r| r.get::<_, String>(3))?;
            r.collect::<Result<Vec<_>, _>>()
        })
    };
    // The plan reads `INDEX <count>:<column><operator>,…`, column 0 the ID.
    for (sql, pushed) in [
        ("SELECT * FROM Pet WHERE ID = 2", "INDEX 1:0="),
        ("SELECT * FROM Pet WHERE rowid > 2", "INDEX 1:0>"),
        ("SELECT * FROM Pet WHERE Kind = 'cat'", "INDEX 1:2="),
        ("SELECT * FROM Pet WHERE Price > 0", "INDEX 1:3>"),
        (
            "SELECT * FROM Pet WHERE Owner = 1 AND Price >= 0 AND Price < 9",
            "INDEX 3:1=,3g,3<",
        ),
        // Text ranges and `<>` are left to SQLite: engines' collations differ.
        ("SELECT * FROM Pet WHERE Kind > 'b'", "INDEX 0:"),
        ("SELECT * FROM Pet WHERE Kind <> 'cat'", "INDEX 0:"),
        ("SELECT * FROM Pet WHERE Kind LIKE 'c%'", "INDEX 0:"),
        // A collation other than bytes is SQLite's to apply.
        (
            "SELECT * FROM Pet WHERE Kind = 'CAT' COLLATE NOCASE",
            "INDEX 0:",
        ),
        // The ID order is the engine's, and with no WHERE so are LIMIT and
        // OFFSET; another order, or a WHERE, leaves them to SQLite.
        ("SELECT * FROM Pet ORDER BY ID DESC", "INDEX 0:o-"),
        ("SELECT * FROM Pet LIMIT 2", "INDEX 1:L"),
        (
            "SELECT * FROM Pet ORDER BY ID LIMIT 2 OFFSET 1",
            "INDEX 2:o+,L,O",
        ),
        (
            "SELECT * FROM Pet WHERE Price > 0 ORDER BY ID LIMIT 1",
            "INDEX 1:3>,o+",
        ),
        ("SELECT * FROM Pet ORDER BY Price LIMIT 1", "INDEX 0:"),
    ] {
        let rows = plan(sql)?;
        assert!(rows.iter().any(|r| r.ends_with(pushed)), "{sql}: {rows:?}");
        // An order the engine gives is not sorted again.
        let sorted = rows.iter().any(|r| r.contains("B-TREE FOR ORDER BY"));
        assert_eq!(sorted, sql.contains("ORDER BY Price"), "{sql}: {rows:?}");
    }
    // In a join, the lookup on the joined column is pushed for each outer row.
    let join = plan("SELECT * FROM Owner o JOIN Pet p ON p.Owner = o.ID WHERE o.Name = 'Ann'")?
        .join(" | ");
    assert!(join.contains("INDEX 1:1="), "{join}");
    // And they answer right, including a key of the wrong type and NULL.
    let count = |sql: &str| main.with_connection(|c| c.query_row(sql, [], |r| r.get::<_, i64>(0)));
    assert_eq!(count("SELECT count(*) FROM Pet WHERE ID = 2")?, 1);
    // As on a real table, the INTEGER column's affinity makes '2' equal 2.
    assert_eq!(count("SELECT count(*) FROM Pet WHERE ID = '2'")?, 1);
    assert_eq!(count("SELECT count(*) FROM Pet WHERE ID = 'two'")?, 0);
    assert_eq!(count("SELECT count(*) FROM Pet WHERE ID = NULL")?, 0);
    assert_eq!(count("SELECT count(*) FROM Pet WHERE Kind = 'cat'")?, 2);
    assert_eq!(count("SELECT count(*) FROM Pet WHERE rowid = 3")?, 1);
    let ids = |sql: &str| {
        main.with_connection(|c| {
            let mut s = c.prepare(sql)?;
            let r = s.query_map([], |r| r.get::<_, i64>(0))?;
            r.collect::<Result<Vec<_>, _>>()
        })
    };
    assert_eq!(ids("SELECT ID FROM Pet ORDER BY ID DESC LIMIT 2")?, [3, 2]);
    assert_eq!(ids("SELECT ID FROM Pet ORDER BY ID LIMIT 1 OFFSET 1")?, [2]);
    assert_eq!(
        ids("SELECT ID FROM Pet ORDER BY ID LIMIT -1 OFFSET 2")?,
        [3]
    );
    assert_eq!(ids("SELECT ID FROM Pet ORDER BY ID LIMIT '2'")?, [1, 2]);
    assert_eq!(ids("SELECT ID FROM Pet LIMIT 0")?, Vec::<i64>::new());
    assert!(ids("SELECT ID FROM Pet LIMIT 'x'").is_err());
    assert_eq!(count("SELECT count(*) FROM Pet WHERE Price > 100000")?, 2);
    assert_eq!(count("SELECT count(*) FROM Pet WHERE Price > NULL")?, 0);
    assert_eq!(count("SELECT count(*) FROM Pet WHERE Price > 'x'")?, 0);
    assert_eq!(
        count("SELECT count(*) FROM Pet WHERE Owner = 1 AND Price >= 105000")?,
        2
    );
    Ok(())
}

#[test]
fn writes_through_sql_are_refused_and_change_nothing() -> Res {
    let (client, main, _) = open()?;
    let r = main.with_connection(|c| c.execute("DELETE FROM Pet", []));
    assert!(r.is_err());
    let r = client.sql_list::<Pet>("DELETE FROM Pet RETURNING *", &[]);
    assert!(r.is_err());
    assert_eq!(client.count::<Pet>("", &[])?, 3);
    Ok(())
}
