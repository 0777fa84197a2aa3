//! Queries: a WHERE with parameters, ORDER BY, LIMIT and OFFSET.

use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::schema::{Column, Table};
use crate::value::{Params, Value};

/// What to read: built by the application, checked against a table before any
/// engine sees it.
///
/// ```
/// use burrow_core::Query;
/// let q = Query::filter("LastName = ? AND Amount > ?", burrow_core::params!["Dupont", 10])
///     .order_by("FirstName")
///     .desc()
///     .limit(20)
///     .offset(40);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Query {
    where_text: String,
    params: Vec<Value>,
    order: Vec<(String, bool)>,
    limit: Option<u64>,
    offset: u64,
}

impl Query {
    /// Every row.
    pub fn all() -> Self {
        Query::default()
    }

    /// Rows matching `where_text`, with `params` bound to its `?` in order.
    pub fn filter(where_text: impl Into<String>, params: impl Params) -> Self {
        Query {
            where_text: where_text.into(),
            params: params.into_values(),
            ..Query::default()
        }
    }

    /// Adds an ascending sort on `field` (after any earlier ones).
    pub fn order_by(mut self, field: impl Into<String>) -> Self {
        self.order.push((field.into(), false));
        self
    }

    /// Makes the last sort descending.
    pub fn desc(mut self) -> Self {
        if let Some(last) = self.order.last_mut() {
            last.1 = true;
        }
        self
    }

    /// At most `n` rows.
    pub fn limit(mut self, n: u64) -> Self {
        self.limit = Some(n);
        self
    }

    /// Skips the first `n` rows.
    pub fn offset(mut self, n: u64) -> Self {
        self.offset = n;
        self
    }

    /// Checks the query against `table`: every name must be a column, every
    /// parameter of the right type.
    pub fn resolve(&self, table: &Table) -> Result<Select> {
        Select::checked(
            table,
            &self.where_text,
            &self.params,
            &self.order,
            self.limit,
            self.offset,
        )
    }
}

/// A query checked against its table: what engines receive.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Select {
    /// The rows to read.
    pub filter: Filter,
    /// Sort columns, `true` for descending.
    pub order: Vec<(Column, bool)>,
    /// At most this many rows.
    pub limit: Option<u64>,
    /// Rows skipped first.
    pub offset: u64,
}

impl Select {
    /// Checks a WHERE clause (with its `?` parameters) and sort columns,
    /// given by name with `true` for descending, against `table`.
    pub fn checked(
        table: &Table,
        where_text: &str,
        params: &[Value],
        order: &[(String, bool)],
        limit: Option<u64>,
        offset: u64,
    ) -> Result<Select> {
        let mut select = Select {
            filter: Filter::parse(table, where_text, params)?,
            order: Vec::new(),
            limit,
            offset,
        };
        for (name, desc) in order {
            let c = table.column(name).ok_or_else(|| Error::UnknownField {
                table: table.name,
                field: name.clone(),
            })?;
            select.then_by(c, *desc);
        }
        Ok(select)
    }

    /// Sorts next by `c` (descending when `desc`), unless that cannot change
    /// the order: a column already sorted on, or any key after the ID, which
    /// is unique. The sort list then holds at most one key per column, however
    /// many a request named, and orders rows as the whole list would.
    pub fn then_by(&mut self, c: Column, desc: bool) {
        if !self.order.iter().any(|&(o, _)| o == c || o == Column::Id) {
            self.order.push((c, desc));
        }
    }

    /// Every row, in no particular order.
    pub fn all() -> Self {
        Select::default()
    }

    /// Rows matching `filter`.
    pub fn filtered(filter: Filter) -> Self {
        Select {
            filter,
            ..Select::default()
        }
    }
}
