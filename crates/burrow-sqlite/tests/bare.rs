//! A record that is only its ID: the statements written from its names alone
//! (an INSERT of the ID column, an UPDATE that sets the ID to itself) work.

#![allow(missing_docs)]

use std::sync::Arc;

use burrow_core::{Batch, Database, Model, Orm};
use burrow_derive::Record;
use burrow_sqlite::SqliteEngine;

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core")]
struct Bare {
    id: i64,
}

#[test]
fn record_of_no_fields() -> Result<(), Box<dyn std::error::Error>> {
    let c = Database::open(
        Model::new().with::<Bare>(),
        Arc::new(SqliteEngine::memory()?),
    )?;
    let mut rows = vec![Bare::default(); 2];
    for r in &mut rows {
        c.add(r)?;
        c.update(r)?;
        assert_eq!(&c.retrieve::<Bare>(r.id)?, r);
    }
    let mut batch = Batch::new();
    batch.add_all(rows.iter().map(|_| Bare::default()));
    let added = c.send(&mut batch)?;
    assert!(added.iter().all(|r| r.id() > Some(rows[1].id)));
    assert!(c.delete::<Bare>(rows[0].id)?);
    assert_eq!(c.count::<Bare>("", &[])?, 3);
    Ok(())
}
