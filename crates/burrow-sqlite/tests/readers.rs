//! Reads outside a transaction on a WAL file run on reader connections
//! (`SqliteOptions::readers`): they see only committed states, never wait for
//! an open transaction, see tables opened after them, and leave in-memory
//! and rollback-journal databases as they were (one connection).

#![allow(missing_docs)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use burrow_core::{params, Currency, Database, Error, Model, Orm, Record, RowOps};
use burrow_derive::Record;
use burrow_sqlite::{SqliteEngine, SqliteOptions};

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core")]
struct Account {
    id: i64,
    owner: String,
    balance: i64,
}

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core")]
struct Later {
    id: i64,
    text: String,
}

type Res = Result<(), Box<dyn std::error::Error>>;

fn wal(path: &std::path::Path, one_process: bool) -> SqliteOptions {
    SqliteOptions::file(path)
        .wal(true)
        .one_process(one_process)
        .readers(3)
        .busy_timeout(Duration::from_secs(10))
}

fn open(
    options: SqliteOptions,
) -> Result<(Database, Arc<SqliteEngine>), Box<dyn std::error::Error>> {
    let engine = Arc::new(SqliteEngine::open(options)?);
    let db = Database::open(Model::new().with::<Account>(), engine.clone())?;
    Ok((db, engine))
}

fn account(owner: &str, balance: i64) -> Account {
    Account {
        id: 0,
        owner: owner.into(),
        balance,
    }
}

/// Runs `f` on another thread and gives its result, or fails the test if it
/// takes longer than `limit` (a read that waits for the transaction would).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .expect("the read waited for the open transaction")
}

/// A writer moves money between two accounts, one transaction per move, and
/// adds two rows per transaction; readers on other threads must always see
/// the total unchanged and an even count: never one update without the
/// other. On both VFS: the default and `unix-excl` (`one_process`).
#[test]
fn readers_see_only_committed_states() -> Res {
    for one_process in [false, true] {
        let dir = tempfile::tempdir()?;
        let (db, _) = open(wal(&dir.path().join("bank.db"), one_process))?;
        let db = Arc::new(db);
        let mut a = account("a", 1_000);
        let mut b = account("b", 1_000);
        db.add(&mut a)?;
        db.add(&mut b)?;
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (db, stop) = (db.clone(), stop.clone());
                std::thread::spawn(move || -> Result<u64, String> {
                    let mut reads = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let pair = db
                            .list::<Account>("Owner IN (?, ?)", params!["a", "b"])
                            .map_err(|e| e.to_string())?;
                        let total: i64 = pair.iter().map(|r| r.balance).sum();
                        if total != 2_000 {
                            return Err(format!("saw a half-done move: {pair:?}"));
                        }
                        let n = db.count::<Account>("", &[]).map_err(|e| e.to_string())?;
                        if n % 2 != 0 {
                            return Err(format!("saw {n} rows, one of a pair"));
                        }
                        reads += 1;
                    }
                    Ok(reads)
                })
            })
            .collect();
        for i in 0..300 {
            let tx = db.transaction()?;
            a.balance -= 1;
            b.balance += 1;
            tx.update(&mut a)?;
            tx.update(&mut b)?;
            tx.add(&mut account(&format!("x{i}"), 0))?;
            tx.add(&mut account(&format!("y{i}"), 0))?;
            tx.commit()?;
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            let reads = r.join().map_err(|_| "a reader panicked")??;
            assert!(reads > 0, "each reader read at least once");
        }
        assert_eq!(db.retrieve::<Account>(a.id)?.balance, 700);
        assert_eq!(db.count::<Account>("", &[])?, 602);
    }
    Ok(())
}

/// While a transaction is open on the writer, reads on the engine from
/// another thread return at once with the state before it; after the commit
/// they see it. Without readers (`readers(0)`) the same read waits for the
/// transaction, which this test tells apart.
#[test]
fn a_read_does_not_wait_for_an_open_transaction() -> Res {
    for one_process in [false, true] {
        let dir = tempfile::tempdir()?;
        let (db, _) = open(wal(&dir.path().join("t.db"), one_process))?;
        let db = Arc::new(db);
        let mut a = account("a", 1);
        db.add(&mut a)?;
        let tx = db.transaction()?;
        a.balance = 2;
        tx.update(&mut a)?;
        tx.add(&mut account("new", 0))?;
        // The transaction's own reads see its changes.
        assert_eq!(tx.retrieve::<Account>(a.id)?.balance, 2);
        let (d, id) = (db.clone(), a.id);
        let seen = within(Duration::from_secs(5), move || {
            let one = d.retrieve::<Account>(id).map(|r| r.balance);
            let n = d.count::<Account>("", &[]);
            let sql: Result<Vec<Account>, _> =
                d.sql_list("SELECT * FROM Account WHERE Balance = ?", params![2i64]);
            (one, n, sql.map(|v| v.len()))
        });
        assert_eq!(seen.0?, 1, "the committed balance, not the open one");
        assert_eq!(seen.1?, 1, "the uncommitted row is not seen");
        assert_eq!(seen.2?, 0);
        tx.commit()?;
        assert_eq!(db.retrieve::<Account>(a.id)?.balance, 2);
        assert_eq!(db.count::<Account>("", &[])?, 2);
    }

    Ok(())
}

/// Readers opened before a table exists read it once the engine opens it,
/// and see a column added to a table they have already read.
#[test]
fn readers_see_tables_opened_after_them() -> Res {
    let dir = tempfile::tempdir()?;
    let (db, engine) = open(wal(&dir.path().join("s.db"), true))?;
    let db = Arc::new(db);
    db.add(&mut account("a", 5))?;
    // Every reader opened and its Account statements prepared, from
    // several threads at once.
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| assert_eq!(db.retrieve::<Account>(1).unwrap().balance, 5));
        }
    });
    let later = Database::open(Model::new().with::<Later>(), engine.clone())?;
    later.add(&mut Later {
        id: 0,
        text: "made after the readers".into(),
    })?;
    // A read takes the writer when it is free: an open transaction keeps
    // it taken, so that the reads below run on readers.
    let tx = db.transaction()?;
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                assert_eq!(
                    later.retrieve::<Later>(1).unwrap().text,
                    "made after the readers"
                );
                assert_eq!(later.count::<Later>("", &[]).unwrap(), 1);
            });
        }
    });
    drop(tx);
    engine.with_connection(|c| {
        c.execute_batch("ALTER TABLE Account ADD COLUMN Extra INTEGER NOT NULL DEFAULT 7")
    })?;
    let tx = db.transaction()?;
    let extra: Vec<Account> =
        db.sql_list("SELECT * FROM Account WHERE Extra = ?", params![7i64])?;
    assert_eq!(extra.len(), 1);
    assert_eq!(db.retrieve::<Account>(1)?.balance, 5);
    drop(tx);
    Ok(())
}

/// In memory, on a rollback-journal file and with `readers(0)` there is one
/// connection, as before: a read waits for an open transaction (the
/// contrast to the test above, so that it can fail).
#[test]
fn one_connection_reads_wait_for_an_open_transaction() -> Res {
    let dir = tempfile::tempdir()?;
    for options in [
        SqliteOptions::memory(),
        SqliteOptions::file(dir.path().join("rollback.db")).readers(4),
        wal(&dir.path().join("one.db"), false).readers(0),
    ] {
        let (db, _) = open(options.busy_timeout(Duration::from_millis(200)))?;
        let db = Arc::new(db);
        db.add(&mut account("a", 1))?;
        let tx = db.transaction()?;
        let d = db.clone();
        let r = within(Duration::from_secs(5), move || d.count::<Account>("", &[]));
        assert!(matches!(r, Err(Error::Busy { .. })), "{r:?}");
        tx.rollback()?;
    }
    Ok(())
}

/// A backup of a WAL file taken while readers read holds what was
/// committed, and after a restore through the engine the readers read the
/// restored state.
#[test]
fn readers_read_through_a_backup_and_a_restore() -> Res {
    let dir = tempfile::tempdir()?;
    let (db, engine) = open(wal(&dir.path().join("b.db"), true))?;
    let db = Arc::new(db);
    for i in 0..10 {
        db.add(&mut account(&format!("o{i}"), i))?;
    }
    let counts = |db: &Arc<Database>| -> Vec<u64> {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..3)
                .map(|_| s.spawn(|| db.count::<Account>("", &[]).unwrap()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    assert_eq!(counts(&db), vec![10; 3]);
    let copy = dir.path().join("copy.db");
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..200 {
                assert_eq!(db.count::<Account>("", &[]).unwrap(), 10);
            }
        });
        engine.backup(&copy).unwrap();
    });
    for i in 10..15 {
        db.add(&mut account(&format!("o{i}"), i))?;
    }
    assert_eq!(counts(&db), vec![15; 3]);
    engine.restore(&copy)?;
    assert_eq!(counts(&db), vec![10; 3]);
    assert!(db.get::<Account>(11)?.is_none());
    assert_eq!(db.retrieve::<Account>(10)?.balance, 9);
    Ok(())
}

#[derive(Record, Debug, Clone, PartialEq)]
#[burrow(crate = "burrow_core")]
struct Pet {
    id: i64,
    owner: i64,
    kind: String,
    price: Currency,
}

/// SQL over a table exposed from another engine (a virtual table of the
/// writer's connection) works on a WAL file with readers, and so does SQL
/// over a temporary table made on the writer's connection.
#[test]
fn sql_over_exposed_and_temporary_tables_runs_on_the_writer() -> Res {
    let dir = tempfile::tempdir()?;
    let main = Arc::new(SqliteEngine::open(wal(&dir.path().join("m.db"), true))?);
    let other = Arc::new(SqliteEngine::memory()?);
    let db = Database::builder(Model::new().with::<Account>().with::<Pet>())
        .default_engine(main.clone())
        .place::<Pet>(other.clone())
        .open()?;
    let mut ann = account("Ann", 0);
    db.add(&mut ann)?;
    for (kind, price) in [("cat", "10.5"), ("dog", "20")] {
        db.add(&mut Pet {
            id: 0,
            owner: ann.id,
            kind: kind.into(),
            price: price.parse()?,
        })?;
    }
    assert_eq!(other.count(Pet::table(), &burrow_core::Filter::all())?, 2);
    // A read first, so that a reader is open when the SQL comes.
    assert_eq!(db.retrieve::<Account>(ann.id)?.owner, "Ann");
    let cats: Vec<Pet> = db.sql_list("SELECT * FROM Pet WHERE Kind = ?", params!["cat"])?;
    assert_eq!(cats.len(), 1);
    assert_eq!(cats[0].price, "10.5".parse()?);
    let owners: Vec<Account> = db.sql_list(
        "SELECT a.* FROM Account a JOIN Pet p ON p.Owner = a.ID WHERE p.Kind = ?",
        params!["dog"],
    )?;
    assert_eq!(owners, vec![ann.clone()]);

    let dir2 = tempfile::tempdir()?;
    let (db, engine) = open(wal(&dir2.path().join("t.db"), false))?;
    db.add(&mut account("b", 3))?;
    engine.with_connection(|c| {
        c.execute_batch("CREATE TEMP TABLE Rich AS SELECT * FROM Account WHERE Balance > 2")
    })?;
    let rich: Vec<Account> = db.sql_list("SELECT * FROM Rich", params![])?;
    assert_eq!(rich.len(), 1);
    Ok(())
}

/// Every reader of an encrypted file is keyed as the writer: reads from
/// several threads succeed, a transaction's changes appear at its commit, and
/// after a rekey the readers (reopened under the new key) read on, with the
/// file opened again only under the new key.
#[cfg(feature = "encryption")]
#[test]
fn readers_of_an_encrypted_file_use_its_key_through_a_rekey() -> Res {
    use burrow_sqlite::{Key, PageHmac};
    for (one_process, hmac) in [(false, PageHmac::Sha512), (true, PageHmac::Sha256)] {
        let key = if one_process {
            Key::raw([7; 32]).page_hmac(hmac)
        } else {
            Key::passphrase("readers' passphrase")
        };
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("aes.db");
        let (db, engine) = open(wal(&path, one_process).key(key.clone()))?;
        let db = Arc::new(db);
        for i in 0..20 {
            db.add(&mut account(&format!("o{i}"), i))?;
        }
        let check = |want: u64| {
            std::thread::scope(|s| {
                for t in 0..3 {
                    let db = &db;
                    s.spawn(move || {
                        assert_eq!(db.count::<Account>("", &[]).unwrap(), want);
                        assert_eq!(db.retrieve::<Account>(t + 1).unwrap().balance, t);
                    });
                }
            })
        };
        check(20);
        let tx = db.transaction()?;
        tx.add(&mut account("in tx", 0))?;
        check(20);
        tx.commit()?;
        check(21);
        engine.rekey(Key::raw([3; 32]).page_hmac(hmac))?;
        check(21);
        db.add(&mut account("after rekey", 0))?;
        check(22);
        drop(db);
        drop(engine);
        assert!(SqliteEngine::open(wal(&path, one_process).key(key)).is_err());
        let reopened =
            SqliteEngine::open(wal(&path, one_process).key(Key::raw([3; 32]).page_hmac(hmac)))?;
        let n: i64 = reopened
            .with_connection(|c| c.query_row("SELECT count(*) FROM Account", [], |r| r.get(0)))?;
        assert_eq!(n, 22);
    }
    Ok(())
}

/// A transaction begun on the writer's connection itself (through
/// `with_connection`) is not one of the engine's: a read outside it still
/// sees the last commit, never its writes.
#[test]
fn a_transaction_begun_on_the_connection_is_not_read_from_outside() -> Res {
    let dir = tempfile::tempdir()?;
    let (db, engine) = open(wal(&dir.path().join("c.db"), false))?;
    db.add(&mut account("a", 5))?;
    engine.with_connection(|c| c.execute_batch("BEGIN; UPDATE Account SET Balance = 99"))?;
    assert_eq!(db.retrieve::<Account>(1)?.balance, 5);
    assert_eq!(
        db.get_many::<Account>(&[1])?[0].as_ref().map(|a| a.balance),
        Some(5)
    );
    engine.with_connection(|c| c.execute_batch("ROLLBACK"))?;
    assert_eq!(db.retrieve::<Account>(1)?.balance, 5);
    Ok(())
}

/// Asked for WAL and readers, a file name SQLite opens in memory gets one
/// connection: readers would each open a database of their own.
#[test]
fn a_memory_name_with_wal_asked_keeps_one_connection() -> Res {
    let (db, _engine) = open(wal(std::path::Path::new(":memory:"), false))?;
    db.add(&mut account("a", 5))?;
    let db = Arc::new(db);
    // With the writer taken by a transaction, a read goes to a reader if
    // there are any; here it waits for the writer and finds the table.
    let tx = db.transaction()?;
    let reader = {
        let db = db.clone();
        std::thread::spawn(move || db.retrieve::<Account>(1).map(|a| a.balance))
    };
    std::thread::sleep(Duration::from_millis(100));
    drop(tx);
    assert_eq!(reader.join().expect("reader thread")?, 5);
    Ok(())
}

/// Calls of the engine from inside its own row callbacks on one thread. On
/// a WAL file a nested read runs on a reader, and from then on the thread's
/// reads do, so a write from their callbacks is done. A nested call of a
/// transaction from its own read, and a call from inside `with_connection`,
/// would wait for the writer the thread holds: they are refused at once,
/// changing nothing. (An in-memory database, one connection, refuses nested
/// reads and writes alike: the conformance tests.)
#[test]
fn calls_from_inside_a_read_run_on_a_reader_or_are_refused_at_once() -> Res {
    let dir = tempfile::tempdir()?;
    let opts = wal(&dir.path().join("nested.db"), false);
    let (db, engine) = open(opts)?;
    for i in 0..3 {
        db.add(&mut account(&format!("a{i}"), i))?;
    }
    let before = db.select::<Account>(&burrow_core::Query::all().order_by("ID"))?;
    let refused = |e: &Error| matches!(e, Error::BadInput(m) if m.contains("row callback"));
    within(Duration::from_secs(60), move || -> Result<(), String> {
        let q = burrow_core::Query::all().order_by("ID");
        let mut seen = 0;
        db.for_each::<Account>(&q, &mut |a| {
            let back: Account = db.retrieve(a.id)?;
            assert_eq!(&back, a);
            seen += 1;
            Ok(())
        })
        .map_err(|e| format!("nested read: {e}"))?;
        assert_eq!(seen, 3);
        // Having found the writer taken, this thread now reads on a reader:
        // a write from the callback takes the writer and is done.
        db.for_each::<Account>(&q, &mut |a| {
            let mut a = a.clone();
            a.balance += 10;
            db.update(&mut a).map(|_| ())
        })
        .map_err(|e| format!("nested write: {e}"))?;
        let tx = db.transaction().map_err(|e| e.to_string())?;
        let e = tx
            .for_each::<Account>(&q, &mut |a| {
                let mut a = a.clone();
                a.balance += 1;
                tx.update(&mut a).map(|_| ())
            })
            .expect_err("a nested call of the transaction is refused");
        assert!(refused(&e), "{e}");
        tx.rollback().map_err(|e| e.to_string())?;
        let e = engine
            .with_connection(|_| Ok(db.add(&mut account("inside", 1))))
            .map_err(|e| e.to_string())?
            .expect_err("a call from inside with_connection is refused");
        assert!(refused(&e), "{e}");
        let after = db.select::<Account>(&q).map_err(|e| e.to_string())?;
        let want: Vec<i64> = before.iter().map(|a| a.balance + 10).collect();
        let got: Vec<i64> = after.iter().map(|a| a.balance).collect();
        assert_eq!(
            got, want,
            "the nested writes done, the refused calls changed nothing"
        );
        Ok(())
    })?;
    Ok(())
}
