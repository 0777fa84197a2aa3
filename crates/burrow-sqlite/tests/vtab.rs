//! Tables of another engine seen through SQLite's SQL as virtual tables.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use burrow_core::{
    params, Batch, Caps, Column, Currency, Database, EngineTx, Fields, Filter, Model, Orm, Record,
    Result as BResult, Row as BRow, RowOps, Select, Storage, Table, Value,
};
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
    assert_eq!(
        other.count(<Pet as Record>::table(), &burrow_core::Filter::all())?,
        3
    );
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

/// An engine in front of another that notes which thread each `select` ran
/// on, and can fail or panic part-way through one (after `fail_after` rows).
struct Probe {
    inner: Arc<SqliteEngine>,
    fail_after: AtomicUsize,
    panic: AtomicBool,
    threads: Mutex<Vec<Option<String>>>,
}

impl RowOps for Probe {
    fn insert(&self, t: &'static Table, id: Option<i64>, row: &dyn Fields) -> BResult<i64> {
        self.inner.insert(t, id, row)
    }
    fn update(&self, t: &'static Table, row: &dyn Fields, f: Option<&[usize]>) -> BResult<bool> {
        self.inner.update(t, row, f)
    }
    fn delete(&self, t: &'static Table, id: i64) -> BResult<bool> {
        self.inner.delete(t, id)
    }
    fn delete_where(&self, t: &'static Table, f: &Filter) -> BResult<u64> {
        self.inner.delete_where(t, f)
    }
    fn retrieve(
        &self,
        t: &'static Table,
        id: i64,
        out: &mut dyn FnMut(&dyn BRow) -> BResult<()>,
    ) -> BResult<bool> {
        self.inner.retrieve(t, id, out)
    }
    fn select(
        &self,
        t: &'static Table,
        s: &Select,
        out: &mut dyn FnMut(&dyn BRow) -> BResult<()>,
    ) -> BResult<()> {
        let name = std::thread::current().name().map(str::to_owned);
        self.threads.lock().unwrap().push(name);
        let fail_after = self.fail_after.load(SeqCst);
        let mut seen = 0;
        self.inner.select(t, s, &mut |row| {
            seen += 1;
            if seen > fail_after {
                if self.panic.load(SeqCst) {
                    panic!("the probe panics part-way");
                }
                return Err(burrow_core::Error::BadInput(
                    "the probe fails part-way".into(),
                ));
            }
            out(row)
        })
    }
    fn count(&self, t: &'static Table, f: &Filter) -> BResult<u64> {
        self.inner.count(t, f)
    }
    fn select_value(&self, t: &'static Table, c: Column, s: &Select) -> BResult<Option<Value>> {
        self.inner.select_value(t, c, s)
    }
}

impl Storage for Probe {
    fn caps(&self) -> Caps {
        self.inner.caps()
    }
    fn ensure_table(&self, t: &'static Table) -> BResult<()> {
        self.inner.ensure_table(t)
    }
    fn begin(self: Arc<Self>) -> BResult<Box<dyn EngineTx>> {
        self.inner.clone().begin()
    }
}

/// Pets enough that a whole read of their table goes to a scan worker once
/// the table has shown its size.
const MANY: i64 = 5_000;

/// A client, its main engine, and the probe in front of the pets' engine.
type Large = (Database, Arc<SqliteEngine>, Arc<Probe>);

fn open_large() -> Result<Large, Box<dyn std::error::Error>> {
    open_pets(MANY)
}

/// [`open_large`] with `n` pets.
fn open_pets(n: i64) -> Result<Large, Box<dyn std::error::Error>> {
    let main = Arc::new(SqliteEngine::memory()?);
    let probe = Arc::new(Probe {
        inner: Arc::new(SqliteEngine::memory()?),
        fail_after: AtomicUsize::new(usize::MAX),
        panic: AtomicBool::new(false),
        threads: Mutex::new(Vec::new()),
    });
    let client = Database::builder(Model::new().with::<Owner>().with::<Pet>())
        .default_engine(main.clone())
        .place::<Pet>(probe.clone())
        .open()?;
    let mut batch = Batch::new();
    for i in 0..n {
        batch.add(Pet {
            id: 0,
            owner: i % 7,
            kind: ["cat", "dog", "newt"][(i % 3) as usize].into(),
            price: Currency::from_int(i * 25).expect("in range"),
        });
    }
    client.send(&mut batch)?;
    Ok((client, main, probe))
}

type PetRow = (i64, i64, String, i64);

fn pets(main: &SqliteEngine, sql: &str) -> burrow_core::Result<Vec<PetRow>> {
    main.with_connection(|c| {
        let mut s = c.prepare(sql)?;
        let r = s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
        r.collect()
    })
}

/// Whether the last `select` the probe saw ran on a scan worker.
fn last_on_worker(probe: &Probe) -> bool {
    let threads = probe.threads.lock().unwrap();
    threads.last().cloned().flatten().as_deref() == Some("burrow-scan")
}

fn workers_available() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
}

#[test]
fn a_large_table_read_whole_streams_from_a_worker_with_every_row() -> Res {
    let (_client, main, probe) = open_large()?;
    let expected: Vec<PetRow> = (1..=MANY)
        .map(|id| {
            let i = id - 1;
            let kind = ["cat", "dog", "newt"][(i % 3) as usize].to_string();
            (id, i % 7, kind, i * 25 * 10_000)
        })
        .collect();
    let all = "SELECT ID, Owner, Kind, Price FROM Pet";
    // Every whole read streams, the first included (the table's size is not
    // known yet). The workers are shared by the whole process (the other tests here
    // included): a read that finds them all busy runs in the caller's
    // thread, so reads go on until three ran on a worker.
    let mut on_worker = 0;
    for _ in 0..300 {
        assert_eq!(pets(&main, all)?, expected);
        on_worker += usize::from(last_on_worker(&probe));
        if on_worker == 3 {
            break;
        }
    }
    assert_eq!(
        on_worker == 3,
        workers_available(),
        "{on_worker} read(s) on a worker"
    );
    let mut reversed = expected.clone();
    reversed.reverse();
    assert_eq!(pets(&main, &format!("{all} ORDER BY ID DESC"))?, reversed);
    // Aggregates and joins over the streamed rows.
    let n: i64 = main.with_connection(|c| {
        c.query_row("SELECT count(*) + sum(Price = 0) FROM Pet", [], |r| {
            r.get(0)
        })
    })?;
    assert_eq!(n, MANY + 1);
    // `max()` and `min()` keep a text of an early chunk while later chunks
    // replace it in the cursor: SQLite must hold its own copy.
    let kinds: (String, String, i64) = main.with_connection(|c| {
        c.query_row(
            "SELECT max(Kind), min(Kind), sum(length(Kind)) FROM Pet",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
    })?;
    let length: usize = expected.iter().map(|p| p.2.len()).sum();
    assert_eq!(kinds, ("newt".into(), "cat".into(), length as i64));
    // A lookup and a short limited read stay in the caller's thread.
    assert_eq!(
        pets(&main, &format!("{all} WHERE ID = 42"))?,
        [expected[41].clone()]
    );
    assert!(!last_on_worker(&probe));
    assert_eq!(
        pets(&main, &format!("{all} ORDER BY ID LIMIT 3"))?,
        expected[..3]
    );
    assert!(!last_on_worker(&probe));
    Ok(())
}

#[test]
fn a_small_table_is_read_in_the_caller_s_thread_once_its_size_is_known() -> Res {
    let (_client, main, probe) = open_pets(10)?;
    let all = "SELECT ID, Owner, Kind, Price FROM Pet";
    // The first whole read may stream; it shows the table small.
    assert_eq!(pets(&main, all)?.len(), 10);
    for _ in 0..3 {
        assert_eq!(pets(&main, all)?.len(), 10);
        assert!(!last_on_worker(&probe));
    }
    Ok(())
}

#[test]
fn a_streamed_read_stopped_early_lets_the_engine_go() -> Res {
    let (client, main, _probe) = open_large()?;
    let all = "SELECT ID, Owner, Kind, Price FROM Pet";
    pets(&main, all)?;
    for _ in 0..20 {
        // LIKE is SQLite's alone, so the engine is asked for every row and
        // SQLite stops reading after two.
        let two = pets(&main, &format!("{all} WHERE Kind LIKE 'n%' LIMIT 2"))?;
        assert_eq!(two.iter().map(|p| p.0).collect::<Vec<_>>(), [3, 6]);
        // The engine is free for a write at once.
        client.add(&mut Pet {
            id: 0,
            owner: 1,
            kind: "ant".into(),
            price: Currency::from_int(1).expect("in range"),
        })?;
    }
    assert_eq!(client.count::<Pet>("", &[])?, MANY as u64 + 20);
    Ok(())
}

#[test]
fn a_streamed_read_that_fails_part_way_fails_the_statement() -> Res {
    let (_client, main, probe) = open_large()?;
    let all = "SELECT ID, Owner, Kind, Price FROM Pet";
    // Each read fails on a scan worker when one is free, else in the
    // caller's thread: either way a failure or a panic fails the statement
    // (a panic must not unwind into SQLite).
    for panic in [true, false, true, false] {
        probe.panic.store(panic, SeqCst);
        probe.fail_after.store(3_000, SeqCst);
        let err = pets(&main, all).expect_err("a read failing part-way fails");
        let expected = if panic { "panicked" } else { "fails part-way" };
        assert!(err.to_string().contains(expected), "{err}");
        // Not a short answer: every row, once the engine reads again.
        probe.fail_after.store(usize::MAX, SeqCst);
        assert_eq!(pets(&main, all)?.len(), MANY as usize);
    }
    Ok(())
}

#[test]
fn streamed_reads_from_many_threads_at_once_each_get_every_row() -> Res {
    let (_client, main, _probe) = open_large()?;
    let all = "SELECT ID, Owner, Kind, Price FROM Pet";
    let expected = pets(&main, all)?;
    // More threads than scan workers: the others read in their own thread.
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|_| {
                s.spawn(|| -> burrow_core::Result<()> {
                    for _ in 0..5 {
                        assert_eq!(pets(&main, all)?, expected);
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("no panic"))
    })?;
    Ok(())
}
