//! A row held as values.

use chrono::{DateTime, NaiveDate, Utc};

use crate::error::{Error, Result};
use crate::json::zero_value;
use crate::record::{Fields, Row};
use crate::schema::{FieldKind, Table};
use crate::value::{Value, ValueRef};

/// A row held as values: what the server builds from a request body and what
/// the HTTP client builds from a response. It is a [`Row`] (to read into a
/// record) and a [`Fields`] (to hand to an engine).
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedRow {
    /// The table.
    pub table: &'static Table,
    /// The ID (0 when not assigned).
    pub id: i64,
    /// One value per field of the table, in declared order.
    pub values: Vec<Value>,
}

impl OwnedRow {
    /// A row of zero values (see [`zero_value`]).
    pub fn zero(table: &'static Table) -> Self {
        OwnedRow {
            table,
            id: 0,
            values: table.fields.iter().map(zero_value).collect(),
        }
    }

    /// Copies a record's values.
    pub fn from_fields(rec: &dyn Fields) -> Self {
        let table = rec.table();
        OwnedRow {
            table,
            id: rec.id(),
            values: (0..table.fields.len())
                .map(|i| rec.field(i).to_owned())
                .collect(),
        }
    }

    /// Copies a row read from an engine.
    pub fn from_row(table: &'static Table, row: &dyn Row) -> Result<Self> {
        Ok(OwnedRow {
            table,
            id: row.id()?,
            values: (0..table.fields.len())
                .map(|i| row.get(i).map(|v| v.to_owned()))
                .collect::<Result<_>>()?,
        })
    }
}

impl Row for OwnedRow {
    fn id(&self) -> Result<i64> {
        Ok(self.id)
    }

    fn get(&self, idx: usize) -> Result<ValueRef<'_>> {
        self.values
            .get(idx)
            .map(Value::as_ref)
            .ok_or_else(|| Error::BadInput(format!("{} has no field #{idx}", self.table.name)))
    }

    // The typed reads answer each value in the one form `get` would hand
    // over and the reader would convert it from, so a record read from a
    // remote list skips a `ValueRef` made and matched for every field. Any
    // other value (and a missing field, which `get` reports) answers `None`.

    #[inline]
    fn typed(&self) -> bool {
        true
    }

    #[inline]
    fn text(&self, idx: usize) -> Result<Option<&str>> {
        Ok(match self.values.get(idx) {
            Some(Value::Text(t)) => Some(t),
            _ => None,
        })
    }

    #[inline]
    fn int(&self, idx: usize) -> Result<Option<i64>> {
        Ok(match self.values.get(idx) {
            Some(Value::Int(i)) => Some(*i),
            // A currency read as an integer is its scaled amount, the form
            // engines store; only for a currency field, where `get` would
            // convert it so too.
            Some(Value::Currency(c))
                if self
                    .table
                    .fields
                    .get(idx)
                    .is_some_and(|f| f.kind == FieldKind::Currency) =>
            {
                Some(c.scaled())
            }
            _ => None,
        })
    }

    #[inline]
    fn date(&self, idx: usize) -> Result<Option<NaiveDate>> {
        Ok(match self.values.get(idx) {
            Some(Value::Date(d)) => Some(*d),
            _ => None,
        })
    }

    #[inline]
    fn datetime(&self, idx: usize) -> Result<Option<DateTime<Utc>>> {
        Ok(match self.values.get(idx) {
            Some(Value::DateTime(d)) => Some(*d),
            _ => None,
        })
    }
}

impl Fields for OwnedRow {
    fn table(&self) -> &'static Table {
        self.table
    }

    fn id(&self) -> i64 {
        self.id
    }

    fn field(&self, idx: usize) -> ValueRef<'_> {
        self.values.get(idx).map_or(ValueRef::Null, Value::as_ref)
    }
}
