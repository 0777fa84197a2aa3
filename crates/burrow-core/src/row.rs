//! A row held as values.

use crate::error::{Error, Result};
use crate::json::zero_value;
use crate::record::{Fields, Row};
use crate::schema::Table;
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
