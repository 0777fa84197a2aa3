//! One table as the engine sees it: resolved names, per-column storage, and
//! the text of its statements, built once when the table is opened.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use burrow_core::{Column, FieldKind, Select, Table};
use burrow_sqlite::statements::TableNames;

use crate::dialect::{write_where, Dialect, Enc, SqlText, Style};

/// The statements and storage of one table.
pub struct TableSql {
    pub table: &'static Table,
    pub dialect: Dialect,
    /// The quoted names of the table, its ID and its columns.
    pub names: TableNames,
    /// How each field is stored.
    pub encs: Vec<Enc>,
    /// PostgreSQL: the element type of each column, ID first, for array casts.
    pub pg_types: Vec<String>,
    /// PostgreSQL: the ID sequence, quoted and qualified.
    pub sequence: Option<String>,
    /// `SELECT id, cols FROM t`
    pub select: String,
    /// … `WHERE id = ?`
    pub select_by_id: String,
    /// Insert with a new ID (PostgreSQL: `RETURNING id`).
    pub insert: String,
    /// Insert with a forced ID.
    pub insert_with_id: String,
    /// `UPDATE t SET every col WHERE id = ?`
    pub update_all: String,
    /// `DELETE FROM t WHERE id = ?`
    pub delete: String,
    /// `SELECT max(id) FROM t`
    pub max_id: String,
    /// Partial updates, by field list.
    update_some: Mutex<HashMap<Vec<usize>, Arc<str>>>,
    /// SQLite: the fields a batch stamps with one time for all its records,
    /// which a multi-row insert binds once when its rows share them
    /// ([`burrow_sqlite::statements::shared_times`]); empty elsewhere.
    pub shared: Vec<usize>,
    /// Multi-row inserts, by row count and whether they bind `shared` once.
    bulk: Mutex<HashMap<(usize, bool), Arc<str>>>,
}

impl TableSql {
    /// Builds the statements of `table` stored under `names`, each field
    /// with `encs`.
    pub fn new(
        table: &'static Table,
        dialect: Dialect,
        names: TableNames,
        encs: Vec<Enc>,
        pg_types: Vec<String>,
        sequence: Option<String>,
    ) -> Self {
        let insert = match (dialect.insert_returns_id(), names.columns.len()) {
            (true, 0) => format!(
                "INSERT INTO {} DEFAULT VALUES RETURNING {}",
                names.table, names.id
            ),
            (true, _) => format!("{} RETURNING {}", names.insert_rows(1), names.id),
            (false, _) => names.insert_rows(1),
        };
        TableSql {
            table,
            dialect,
            encs,
            pg_types,
            sequence,
            select: names.select(),
            select_by_id: names.select_by_id(),
            insert,
            insert_with_id: names.insert_with_id(),
            update_all: names.update_all(),
            delete: names.delete(),
            max_id: names.max_id(),
            shared: if dialect == Dialect::Sqlite {
                burrow_sqlite::statements::shared_times(table)
            } else {
                Vec::new()
            },
            names,
            update_some: Mutex::new(HashMap::new()),
            bulk: Mutex::new(HashMap::new()),
        }
    }

    /// The storage of a column (the ID is an integer).
    pub fn enc(&self, c: Column) -> Enc {
        match c {
            Column::Id => Enc::Int,
            Column::Field(i) => self.encs[i],
        }
    }

    /// The field kind of a column.
    pub fn kind(&self, c: Column) -> FieldKind {
        match c {
            Column::Id => FieldKind::I64,
            Column::Field(i) => self.table.fields[i].kind,
        }
    }

    /// Appends a column's quoted name.
    pub fn write_column(&self, c: Column, out: &mut String) {
        self.names.write_column(c, out)
    }

    /// `UPDATE t SET listed cols WHERE id = ?`, built once per distinct list.
    pub fn update_some(&self, fields: &[usize]) -> Arc<str> {
        let mut m = self
            .update_some
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        m.entry(fields.to_vec())
            .or_insert_with(|| self.names.update_some(fields).into())
            .clone()
    }

    /// A multi-row `INSERT … VALUES (…),(…)` of `rows` rows with new IDs
    /// (MySQL, SQLite), built once per row count.
    pub fn bulk_insert(&self, rows: usize) -> Arc<str> {
        self.bulk_sql(rows, false)
    }

    /// SQLite: the same with the [`TableSql::shared`] fields bound once for
    /// all rows ([`TableNames::insert_rows_shared`]).
    pub fn bulk_insert_shared(&self, rows: usize) -> Arc<str> {
        self.bulk_sql(rows, true)
    }

    fn bulk_sql(&self, rows: usize, shared: bool) -> Arc<str> {
        let mut m = self.bulk.lock().unwrap_or_else(PoisonError::into_inner);
        if m.len() > 64 {
            m.clear();
        }
        m.entry((rows, shared))
            .or_insert_with(|| {
                if shared {
                    self.names.insert_rows_shared(rows, &self.shared).into()
                } else {
                    self.names.insert_rows(rows).into()
                }
            })
            .clone()
    }

    /// PostgreSQL: `$1::int8[],$2::text[],…`, one typed array parameter per
    /// column, ID first.
    fn pg_arrays(&self) -> String {
        let arrays: Vec<String> = self
            .pg_types
            .iter()
            .enumerate()
            .map(|(i, t)| format!("${}::{}[]", i + 1, t))
            .collect();
        arrays.join(",")
    }

    /// PostgreSQL: `INSERT … SELECT * FROM UNNEST($1::int8[], …)`, the ID
    /// and every field bound as one array each.
    pub fn pg_unnest_insert(&self) -> String {
        let mut all = vec![self.names.id.clone()];
        all.extend(self.names.columns.iter().cloned());
        let arrays = self.pg_arrays();
        format!(
            "INSERT INTO {} ({}) SELECT * FROM UNNEST({arrays})",
            self.names.table,
            all.join(",")
        )
    }

    /// PostgreSQL: the listed field indexes (in that order) of many rows
    /// updated from arrays in one statement, the ID array first; returns the
    /// IDs found.
    pub fn pg_unnest_update(&self, fields: &[usize]) -> String {
        let mut arrays = vec![format!("$1::{}[]", self.pg_types[0])];
        let mut names = vec!["k".to_owned()];
        let mut sets = Vec::with_capacity(fields.len());
        for (i, &f) in fields.iter().enumerate() {
            arrays.push(format!("${}::{}[]", i + 2, self.pg_types[f + 1]));
            names.push(format!("v{}", i + 1));
            sets.push(format!("{}=u.v{}", self.names.columns[f], i + 1));
        }
        let sets = if sets.is_empty() {
            format!("{0}={0}", self.names.id)
        } else {
            sets.join(",")
        };
        format!(
            "UPDATE {} AS x SET {sets} FROM UNNEST({}) AS u({}) WHERE x.{}=u.k RETURNING x.{}",
            self.names.table,
            arrays.join(","),
            names.join(","),
            self.names.id,
            self.names.id
        )
    }

    /// `DELETE … WHERE id IN (…) RETURNING id` for `n` IDs (PostgreSQL:
    /// `= ANY($1)` with one array).
    pub fn delete_many(&self, n: usize) -> String {
        match self.dialect {
            Dialect::Postgres => format!(
                "DELETE FROM {} WHERE {}=ANY($1::int8[]) RETURNING {}",
                self.names.table, self.names.id, self.names.id
            ),
            _ => format!(
                "DELETE FROM {} WHERE {} IN ({}) RETURNING {}",
                self.names.table,
                self.names.id,
                vec!["?"; n].join(","),
                self.names.id
            ),
        }
    }

    /// A SELECT of `what` (`None`: ID and every field) with the filter, order,
    /// limit and offset of `select`; returns whether LIMIT and OFFSET follow
    /// the filter's parameters.
    pub fn select_sql(&self, what: Option<Column>, select: &Select) -> (String, bool) {
        let mut params = 0;
        let mut style = Style {
            dialect: self.dialect,
            params: &mut params,
            col: &|c, out| self.names.write_column(c, out),
        };
        let nulls = self.dialect.sorts_nulls_last().then_some(self.table);
        self.names
            .select_sql(&self.select, what, select, &mut style, nulls)
    }

    /// Appends ` WHERE …` for `filter`.
    pub fn write_where(&self, s: &mut SqlText, filter: &burrow_core::Filter) {
        write_where(s, filter, &|c, out| self.write_column(c, out));
    }
}
