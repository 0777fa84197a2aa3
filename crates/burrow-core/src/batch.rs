//! Batches: many adds, updates and deletes, across tables, sent as one unit.

use std::any::Any;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::record::Record;
use crate::schema::{AutoTime, Table};
use crate::storage::{BatchItem, BatchOp};

/// How a batch is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOptions {
    /// Commit automatically every this many items (0: no automatic transaction,
    /// each statement commits on its own). Ignored inside an explicit transaction.
    /// When an engine fails outright (not one item), the chunk in progress is
    /// rolled back and the chunks committed before it stay.
    pub auto_transaction_rows: usize,
    /// On the first failed item, roll back the whole batch and return the error.
    /// The batch then runs as one transaction, whatever `auto_transaction_rows`
    /// says (inside an explicit transaction, the caller's guard decides).
    pub rollback_on_error: bool,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            auto_transaction_rows: 10_000,
            rollback_on_error: false,
        }
    }
}

enum Op<T> {
    Add(T, Option<i64>),
    Update(T, Option<Vec<usize>>),
    Delete(i64),
}

/// A run of consecutive writes to one record type.
trait Segment: Send {
    fn table(&self) -> &'static Table;
    fn len(&self) -> usize;
    fn items<'a>(&'a self, out: &mut Vec<BatchItem<'a>>);
    fn stamp(&mut self, now: DateTime<Utc>);
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

struct Typed<T>(Vec<Op<T>>);

impl<T: Record> Segment for Typed<T> {
    fn table(&self) -> &'static Table {
        T::table()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn items<'a>(&'a self, out: &mut Vec<BatchItem<'a>>) {
        out.extend(self.0.iter().map(|op| BatchItem {
            table: T::table(),
            op: match op {
                Op::Add(rec, id) => BatchOp::Add { id: *id, row: rec },
                Op::Update(rec, fields) => BatchOp::Update {
                    row: rec,
                    fields: fields.as_deref(),
                },
                Op::Delete(id) => BatchOp::Delete { id: *id },
            },
        }));
    }
    fn stamp(&mut self, now: DateTime<Utc>) {
        for op in &mut self.0 {
            match op {
                Op::Add(rec, _) => rec.stamp(now, true),
                Op::Update(rec, _) => rec.stamp(now, false),
                Op::Delete(_) => {}
            }
        }
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A run of adds with new IDs, as [`Batch::add_all`] takes them: the records
/// alone, so that a `Vec` handed over keeps its buffer (a 10,000-record batch
/// otherwise copied every record into a `Vec<Op<T>>`: a megabyte written to
/// memory no cache held yet).
struct Adds<T>(Vec<T>);

impl<T: Record> Segment for Adds<T> {
    fn table(&self) -> &'static Table {
        T::table()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn items<'a>(&'a self, out: &mut Vec<BatchItem<'a>>) {
        out.extend(self.0.iter().map(|rec| BatchItem {
            table: T::table(),
            op: BatchOp::Add { id: None, row: rec },
        }));
    }
    fn stamp(&mut self, now: DateTime<Utc>) {
        for rec in &mut self.0 {
            rec.stamp(now, true);
        }
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Writes collected to be sent at once with [`crate::Orm::send`].
///
/// Consecutive writes to the same record type are kept together, typed, so the
/// batch holds the records themselves (no per-item boxing) and an engine can turn
/// a run of adds into bulk statements.
#[derive(Default)]
pub struct Batch {
    segments: Vec<Box<dyn Segment>>,
    len: usize,
    /// How the batch is committed.
    pub options: BatchOptions,
}

impl Batch {
    /// An empty batch with default options.
    pub fn new() -> Self {
        Batch::default()
    }

    /// An empty batch with these options.
    pub fn with_options(options: BatchOptions) -> Self {
        Batch {
            options,
            ..Batch::default()
        }
    }

    /// Commits automatically every `n` items (0: never).
    pub fn auto_transaction_rows(mut self, n: usize) -> Self {
        self.options.auto_transaction_rows = n;
        self
    }

    /// Rolls back the whole batch on the first failed item.
    pub fn rollback_on_error(mut self, yes: bool) -> Self {
        self.options.rollback_on_error = yes;
        self
    }

    fn push<T: Record>(&mut self, op: Op<T>) {
        self.len += 1;
        if let Some(seg) = self.tail::<Typed<T>>() {
            seg.0.push(op);
            return;
        }
        self.segments.push(Box::new(Typed(vec![op])));
    }

    /// Adds `rec` with a new ID.
    pub fn add<T: Record>(&mut self, rec: T) {
        if let Some(seg) = self.tail::<Adds<T>>() {
            seg.0.push(rec);
            self.len += 1;
            return;
        }
        self.push(Op::Add(rec, None));
    }

    /// Adds every record of `recs` with new IDs. A `Vec` is kept as it is,
    /// without copying its records.
    pub fn add_all<T: Record>(&mut self, recs: impl IntoIterator<Item = T>) {
        if let Some(seg) = self.tail::<Adds<T>>() {
            let had = seg.0.len();
            seg.0.extend(recs);
            let added = seg.0.len() - had;
            self.len += added;
            return;
        }
        // A `Vec`'s own iterator collects back into its buffer (std does so
        // for an iterator not yet advanced): nothing is copied.
        let recs: Vec<T> = recs.into_iter().collect();
        if !recs.is_empty() {
            self.len += recs.len();
            self.segments.push(Box::new(Adds(recs)));
        }
    }

    /// The last segment, if it is an `S`.
    fn tail<S: 'static>(&mut self) -> Option<&mut S> {
        self.segments.last_mut()?.as_any_mut().downcast_mut::<S>()
    }

    /// Adds `rec` with the given ID.
    pub fn add_with_id<T: Record>(&mut self, rec: T, id: i64) {
        self.push(Op::Add(rec, Some(id)));
    }

    /// Updates every field of the record with `rec`'s ID.
    pub fn update<T: Record>(&mut self, rec: T) {
        self.push(Op::Update(rec, None));
    }

    /// Updates only the named fields (and the modification time, if the record
    /// has one) of the record with `rec`'s ID. Unknown names are refused here.
    pub fn update_fields<T: Record>(&mut self, rec: T, fields: &[&str]) -> Result<()> {
        let idx = field_subset(T::table(), fields)?;
        self.push(Op::Update(rec, Some(idx)));
        Ok(())
    }

    /// Deletes the `T` with this ID.
    pub fn delete<T: Record>(&mut self, id: i64) {
        self.push(Op::Delete::<T>(id));
    }

    /// How many items the batch holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the batch holds no item.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Drops every item, keeping the options.
    pub fn clear(&mut self) {
        self.segments.clear();
        self.len = 0;
    }

    /// The tables written, in order of first appearance.
    pub fn tables(&self) -> Vec<&'static Table> {
        let mut v: Vec<&'static Table> = Vec::new();
        for s in &self.segments {
            if !v.iter().any(|t| t.same(s.table())) {
                v.push(s.table());
            }
        }
        v
    }

    /// Fills the automatic time fields of every add and update.
    pub fn stamp(&mut self, now: DateTime<Utc>) {
        for s in &mut self.segments {
            s.stamp(now);
        }
    }

    /// The items, in the order they were added.
    pub fn items(&self) -> Vec<BatchItem<'_>> {
        let mut out = Vec::with_capacity(self.len);
        for s in &self.segments {
            debug_assert!(s.len() > 0);
            s.items(&mut out);
        }
        out
    }
}

/// Resolves field names to indexes for a partial update, adding the table's
/// modification-time fields so that they stay right.
pub fn field_subset(table: &'static Table, names: &[&str]) -> Result<Vec<usize>> {
    let mut idx = Vec::with_capacity(names.len() + 1);
    for name in names {
        let i = table.field_index(name).ok_or_else(|| Error::UnknownField {
            table: table.name,
            field: (*name).to_owned(),
        })?;
        if !idx.contains(&i) {
            idx.push(i);
        }
    }
    if idx.is_empty() {
        return Err(Error::BadInput(format!(
            "an update of {} names no field",
            table.name
        )));
    }
    for (i, f) in table.fields.iter().enumerate() {
        if f.auto == AutoTime::Modified && !idx.contains(&i) {
            idx.push(i);
        }
    }
    Ok(idx)
}
