//! Batches and transactions: many writes as one unit, and a transaction as
//! a value that commits when consumed and rolls back when dropped.
//!
//! `cargo run -p burrow --example batches_and_transactions`

use std::sync::Arc;

use burrow::prelude::*;
use burrow::sqlite::{SqliteEngine, SqliteOptions};

#[derive(Record, Debug, Clone)]
struct Account {
    id: i64,
    #[burrow(unique)]
    owner: String,
    balance: Currency,
}

fn main() -> burrow::Result<()> {
    let engine = Arc::new(SqliteEngine::open(
        SqliteOptions::memory().busy_timeout(std::time::Duration::from_millis(200)),
    )?);
    let db = Database::open(Model::new().with::<Account>(), engine)?;
    let account = |owner: &str, balance: &str| Account {
        id: 0,
        owner: owner.into(),
        balance: balance.parse().expect("an amount"),
    };

    // A batch: one round of writes, committed in chunks of
    // `auto_transaction_rows` (10,000 by default).
    let mut batch = Batch::new();
    batch.add_all((0..1000).map(|i| account(&format!("user{i}"), "10")));
    let results = db.send(&mut batch)?;
    println!("batch added {} accounts", results.len());

    // With rollback_on_error, one failed item undoes the whole batch.
    let mut risky = Batch::new().rollback_on_error(true);
    risky.add(account("new-1", "1"));
    risky.add(account("user0", "1")); // a duplicate owner
    let err = db.send(&mut risky).unwrap_err();
    println!("batch refused: {err}");
    assert_eq!(db.count::<Account>("Owner LIKE ?", &params!["new-%"])?, 0);

    // A transfer in a transaction: both updates or neither.
    let tx = db.transaction()?;
    let mut from: Account = tx.retrieve(1)?;
    let mut to: Account = tx.retrieve(2)?;
    let amount: Currency = "2.5".parse().expect("an amount");
    from.balance = from.balance - amount;
    to.balance = to.balance + amount;
    tx.update(&mut from)?;
    tx.update(&mut to)?;
    tx.commit()?;
    println!(
        "after the transfer: {} and {}",
        db.retrieve::<Account>(1)?.balance,
        db.retrieve::<Account>(2)?.balance
    );

    // Dropped without a commit, a transaction leaves nothing behind.
    {
        let tx = db.transaction()?;
        tx.delete_where::<Account>("Balance < ?", &params![100])?;
        // While it is open, a call on the client itself waits for it, at most
        // the engine's lock timeout (here 200 ms), then says it is busy.
        let busy = db.count::<Account>("", &[]).unwrap_err();
        assert_eq!(busy.kind(), ErrorKind::Busy);
        println!("while the transaction is open: {busy}");
    }
    assert_eq!(db.count::<Account>("", &[])?, 1000);
    println!(
        "rolled back: {} accounts remain",
        db.count::<Account>("", &[])?
    );
    Ok(())
}
