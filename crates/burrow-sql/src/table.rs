//! One table as the engine sees it: resolved names, per-column storage, and
//! the text of its statements, built once when the table is opened.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use burrow_core::{Column, FieldKind, Select, Table};
use burrow_sqlite::statements::write_bulk_insert;

use crate::dialect::{write_where, Dialect, Enc, SqlText};

/// The statements and storage of one table.
pub struct TableSql {
    pub table: &'static Table,
    pub dialect: Dialect,
    /// The quoted table name.
    pub name: String,
    /// The quoted ID column.
    pub id: String,
    /// The quoted column of each field.
    pub cols: Vec<String>,
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
    /// Multi-row inserts, by row count.
    bulk: Mutex<HashMap<usize, Arc<str>>>,
}

fn placeholders(d: Dialect, from: usize, n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        match d {
            Dialect::Postgres => {
                s.push('$');
                s.push_str(&(from + i).to_string());
            }
            _ => s.push('?'),
        }
    }
    s
}

impl TableSql {
    /// Builds the statements of `table` stored in `db_name`, its ID in
    /// `id_col` and each field in `columns` with `encs`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        table: &'static Table,
        dialect: Dialect,
        db_name: &str,
        id_col: &str,
        columns: &[String],
        encs: Vec<Enc>,
        pg_types: Vec<String>,
        sequence: Option<String>,
    ) -> Self {
        let q = |s: &str| dialect.quoted(s);
        let name = q(db_name);
        let id = q(id_col);
        let cols: Vec<String> = columns.iter().map(|c| q(c)).collect();
        let n = cols.len();
        let select = if n == 0 {
            format!("SELECT {id} FROM {name}")
        } else {
            format!("SELECT {id},{} FROM {name}", cols.join(","))
        };
        let select_by_id = format!("{select} WHERE {id}={}", placeholders(dialect, 1, 1));
        let insert = match (dialect, n) {
            (Dialect::Postgres, 0) => format!("INSERT INTO {name} DEFAULT VALUES RETURNING {id}"),
            (Dialect::Postgres, _) => format!(
                "INSERT INTO {name} ({}) VALUES ({}) RETURNING {id}",
                cols.join(","),
                placeholders(dialect, 1, n)
            ),
            (Dialect::MySql, 0) => format!("INSERT INTO {name} () VALUES ()"),
            (_, 0) => format!("INSERT INTO {name} DEFAULT VALUES"),
            _ => format!(
                "INSERT INTO {name} ({}) VALUES ({})",
                cols.join(","),
                placeholders(dialect, 1, n)
            ),
        };
        let mut all = vec![id.clone()];
        all.extend(cols.iter().cloned());
        let insert_with_id = format!(
            "INSERT INTO {name} ({}) VALUES ({})",
            all.join(","),
            placeholders(dialect, 1, n + 1)
        );
        let update_all = if n == 0 {
            format!(
                "UPDATE {name} SET {id}={id} WHERE {id}={}",
                placeholders(dialect, 1, 1)
            )
        } else {
            let sets: Vec<String> = cols
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{c}={}", placeholders(dialect, i + 1, 1)))
                .collect();
            format!(
                "UPDATE {name} SET {} WHERE {id}={}",
                sets.join(","),
                placeholders(dialect, n + 1, 1)
            )
        };
        let delete = format!(
            "DELETE FROM {name} WHERE {id}={}",
            placeholders(dialect, 1, 1)
        );
        let max_id = format!("SELECT max({id}) FROM {name}");
        TableSql {
            max_id,
            table,
            dialect,
            name,
            id,
            cols,
            encs,
            pg_types,
            sequence,
            select,
            select_by_id,
            insert,
            insert_with_id,
            update_all,
            delete,
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
        match c {
            Column::Id => out.push_str(&self.id),
            Column::Field(i) => out.push_str(&self.cols[i]),
        }
    }

    /// `UPDATE t SET listed cols WHERE id = ?`, built once per distinct list.
    pub fn update_some(&self, fields: &[usize]) -> Arc<str> {
        let mut m = self
            .update_some
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        m.entry(fields.to_vec())
            .or_insert_with(|| {
                let mut s = SqlText::new(self.dialect, "UPDATE ");
                s.push(&self.name);
                s.push(" SET ");
                for (n, &i) in fields.iter().enumerate() {
                    if n > 0 {
                        s.push(",");
                    }
                    s.push(&self.cols[i]);
                    s.push("=");
                    s.param();
                }
                s.push(" WHERE ");
                s.push(&self.id);
                s.push("=");
                s.param();
                s.text.into()
            })
            .clone()
    }

    /// A multi-row `INSERT … VALUES (…),(…)` of `rows` rows with new IDs
    /// (MySQL, SQLite), built once per row count.
    pub fn bulk_insert(&self, rows: usize) -> Arc<str> {
        let mut m = self.bulk.lock().unwrap_or_else(PoisonError::into_inner);
        if m.len() > 64 {
            m.clear();
        }
        m.entry(rows)
            .or_insert_with(|| {
                let mut s = String::new();
                write_bulk_insert(
                    &mut s,
                    &self.name,
                    &self.id,
                    self.cols.len(),
                    |i, out| out.push_str(&self.cols[i]),
                    rows,
                );
                s.into()
            })
            .clone()
    }

    /// PostgreSQL: `INSERT … SELECT * FROM UNNEST($1::int8[], …)`, the ID
    /// and every field bound as one array each.
    pub fn pg_unnest_insert(&self) -> String {
        let mut all = vec![self.id.clone()];
        all.extend(self.cols.iter().cloned());
        let arrays: Vec<String> = self
            .pg_types
            .iter()
            .enumerate()
            .map(|(i, t)| format!("${}::{}[]", i + 1, t))
            .collect();
        format!(
            "INSERT INTO {} ({}) SELECT * FROM UNNEST({})",
            self.name,
            all.join(","),
            arrays.join(",")
        )
    }

    /// PostgreSQL: every field of many rows updated from arrays in one
    /// statement; returns the IDs found.
    pub fn pg_unnest_update(&self) -> String {
        let arrays: Vec<String> = self
            .pg_types
            .iter()
            .enumerate()
            .map(|(i, t)| format!("${}::{}[]", i + 1, t))
            .collect();
        let names: Vec<String> = (0..self.pg_types.len())
            .map(|i| if i == 0 { "k".into() } else { format!("v{i}") })
            .collect();
        let sets: Vec<String> = self
            .cols
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c}=u.v{}", i + 1))
            .collect();
        let sets = if sets.is_empty() {
            format!("{0}={0}", self.id)
        } else {
            sets.join(",")
        };
        format!(
            "UPDATE {} AS x SET {sets} FROM UNNEST({}) AS u({}) WHERE x.{}=u.k RETURNING x.{}",
            self.name,
            arrays.join(","),
            names.join(","),
            self.id,
            self.id
        )
    }

    /// `DELETE … WHERE id IN (…) RETURNING id` for `n` IDs (PostgreSQL:
    /// `= ANY($1)` with one array).
    pub fn delete_many(&self, n: usize) -> String {
        match self.dialect {
            Dialect::Postgres => format!(
                "DELETE FROM {} WHERE {}=ANY($1::int8[]) RETURNING {}",
                self.name, self.id, self.id
            ),
            _ => format!(
                "DELETE FROM {} WHERE {} IN ({}) RETURNING {}",
                self.name,
                self.id,
                vec!["?"; n].join(","),
                self.id
            ),
        }
    }

    /// A SELECT of `what` (`None`: ID and every field) with the filter, order,
    /// limit and offset of `select`; returns whether LIMIT and OFFSET follow
    /// the filter's parameters.
    pub fn select_sql(&self, what: Option<Column>, select: &Select) -> (String, bool) {
        let mut s = match what {
            None => SqlText::new(self.dialect, &self.select),
            Some(c) => {
                let mut s = SqlText::new(self.dialect, "SELECT ");
                self.write_column(c, &mut s.text);
                s.push(" FROM ");
                s.push(&self.name);
                s
            }
        };
        self.write_where(&mut s, &select.filter);
        for (n, (c, desc)) in select.order.iter().enumerate() {
            s.push(if n == 0 { " ORDER BY " } else { "," });
            self.write_column(*c, &mut s.text);
            if *desc {
                s.push(" DESC");
            }
            // NULLs sort first, as in SQLite and MySQL.
            let nullable = matches!(c, Column::Field(i) if self.table.fields[*i].nullable);
            if self.dialect == Dialect::Postgres && nullable {
                s.push(if *desc { " NULLS LAST" } else { " NULLS FIRST" });
            }
        }
        let paged = select.limit.is_some() || select.offset > 0;
        if paged {
            s.push(" LIMIT ");
            s.param();
            s.push(" OFFSET ");
            s.param();
        }
        (s.text, paged)
    }

    /// Appends ` WHERE …` for `filter`.
    pub fn write_where(&self, s: &mut SqlText, filter: &burrow_core::Filter) {
        write_where(s, filter, &|c, out| self.write_column(c, out));
    }
}
