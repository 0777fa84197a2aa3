//! SQL text for one table, built once when the table is opened.
//!
//! Its multi-row INSERT and row limits are also what the external layer
//! (`burrow-sql`) sends to SQLite and MySQL.

use std::collections::HashMap;

use burrow_core::{Column, Select, Table};

/// Quotes an identifier: `"name"`, with inner quotes doubled.
pub(crate) fn quote(out: &mut String, ident: &str) {
    out.push('"');
    for c in ident.chars() {
        if c == '"' {
            out.push('"');
        }
        out.push(c);
    }
    out.push('"');
}

fn quoted(ident: &str) -> String {
    let mut s = String::with_capacity(ident.len() + 2);
    quote(&mut s, ident);
    s
}

/// The most parameters one statement binds, under SQLite's limit.
pub const MAX_PARAMS: usize = 32_000;

/// The most rows one multi-row INSERT writes: measurements stopped improving
/// there.
pub const MAX_ROWS: usize = 200;

/// Rows per multi-row INSERT: as many as fit under [`MAX_PARAMS`], at most
/// [`MAX_ROWS`].
pub(crate) fn rows_per_insert(table: &Table) -> usize {
    (MAX_PARAMS / (table.fields.len() + 1)).clamp(1, MAX_ROWS)
}

/// The statements of one table.
pub(crate) struct TableSql {
    pub table: &'static Table,
    /// `SELECT ID, cols FROM t`, the prefix of every read.
    pub select: String,
    /// … `WHERE ID=?`
    pub select_by_id: String,
    /// `INSERT INTO t (ID, cols) VALUES (?, …)`, for a given ID.
    pub insert: String,
    /// `INSERT INTO t (cols) VALUES (…)`, for an ID SQLite assigns: binding no
    /// ID at all costs SQLite less than binding it NULL.
    pub insert_new: String,
    /// `INSERT INTO t (cols) VALUES (…),(…)…` for `bulk_rows` rows.
    pub bulk_insert: String,
    pub bulk_rows: usize,
    /// `UPDATE t SET every col WHERE ID=?`
    pub update_all: String,
    /// `DELETE FROM t WHERE ID=?`
    pub delete: String,
    /// `SELECT max(ID) FROM t`
    pub max_id: String,
    /// Partial updates seen so far, by field list.
    pub update_some: HashMap<Vec<usize>, String>,
}

impl TableSql {
    pub fn new(table: &'static Table) -> Self {
        let name = quoted(table.name);
        let cols: Vec<String> = table.fields.iter().map(|f| quoted(f.column)).collect();
        let select = format!(
            "SELECT ID{}{} FROM {name}",
            if cols.is_empty() { "" } else { "," },
            cols.join(",")
        );
        let qmarks = vec!["?"; cols.len() + 1].join(",");
        let insert = if cols.is_empty() {
            format!("INSERT INTO {name} (ID) VALUES (?)")
        } else {
            format!(
                "INSERT INTO {name} (ID,{}) VALUES ({qmarks})",
                cols.join(",")
            )
        };
        let bulk_rows = rows_per_insert(table);
        let bulk_insert = bulk_insert_sql(table, bulk_rows);
        let sets: Vec<String> = cols.iter().map(|c| format!("{c}=?")).collect();
        let update_all = format!("UPDATE {name} SET {} WHERE ID=?", sets.join(","));
        TableSql {
            table,
            select_by_id: format!("{select} WHERE ID=?"),
            select,
            insert,
            insert_new: bulk_insert_sql(table, 1),
            bulk_insert,
            bulk_rows,
            update_all,
            delete: format!("DELETE FROM {name} WHERE ID=?"),
            max_id: format!("SELECT max(ID) FROM {name}"),
            update_some: HashMap::new(),
        }
    }

    /// `UPDATE t SET listed cols WHERE ID=?`, built once per distinct list.
    pub fn update_some(&mut self, fields: &[usize]) -> &str {
        let table = self.table;
        self.update_some.entry(fields.to_vec()).or_insert_with(|| {
            let mut s = String::from("UPDATE ");
            quote(&mut s, table.name);
            s.push_str(" SET ");
            for (n, &i) in fields.iter().enumerate() {
                if n > 0 {
                    s.push(',');
                }
                quote(&mut s, table.fields[i].column);
                s.push_str("=?");
            }
            s.push_str(" WHERE ID=?");
            s
        })
    }

    /// The text of a SELECT of `what` (`None`: ID and every field) with the
    /// filter, order, limit and offset of `select`. LIMIT and OFFSET are bound
    /// after the filter's parameters when present.
    pub fn select_sql(&self, what: Option<Column>, select: &Select) -> (String, bool) {
        let table = self.table;
        let mut s = match what {
            None => self.select.clone(),
            Some(c) => {
                let mut s = String::from("SELECT ");
                write_column(table, c, &mut s);
                s.push_str(" FROM ");
                quote(&mut s, table.name);
                s
            }
        };
        write_where(table, &select.filter, &mut s);
        for (n, (c, desc)) in select.order.iter().enumerate() {
            s.push_str(if n == 0 { " ORDER BY " } else { "," });
            write_column(table, *c, &mut s);
            if *desc {
                s.push_str(" DESC");
            }
        }
        let paged = select.limit.is_some() || select.offset > 0;
        if paged {
            s.push_str(" LIMIT ? OFFSET ?");
        }
        (s, paged)
    }
}

/// Appends ` WHERE …` for a non-empty filter.
pub(crate) fn write_where(table: &Table, filter: &burrow_core::Filter, s: &mut String) {
    if filter.expr.is_some() {
        s.push_str(" WHERE ");
        filter.write_sql(s, &mut |c: Column, out: &mut String| {
            write_column(table, c, out)
        });
    }
}

/// Appends a column's quoted name (`ID` for the ID).
pub(crate) fn write_column(table: &Table, c: Column, out: &mut String) {
    match c {
        Column::Id => out.push_str("ID"),
        Column::Field(i) => quote(out, table.fields[i].column),
    }
}

/// `INSERT INTO t (cols) VALUES` with `rows` groups of placeholders.
pub(crate) fn bulk_insert_sql(table: &Table, rows: usize) -> String {
    let mut name = String::new();
    quote(&mut name, table.name);
    let mut s = String::new();
    write_bulk_insert(
        &mut s,
        &name,
        "ID",
        table.fields.len(),
        |i, out| quote(out, table.fields[i].column),
        rows,
    );
    s
}

/// Appends `INSERT INTO table (columns) VALUES (?,…),(?,…)…`, `rows` groups
/// for rows whose ID the database assigns; a table of no columns inserts
/// `(id) VALUES (NULL),…`. `table` and `id` come quoted; `column` appends the
/// quoted name of column `i` of `columns`.
pub fn write_bulk_insert(
    s: &mut String,
    table: &str,
    id: &str,
    columns: usize,
    column: impl Fn(usize, &mut String),
    rows: usize,
) {
    s.push_str("INSERT INTO ");
    s.push_str(table);
    if columns == 0 {
        s.push_str(" (");
        s.push_str(id);
        s.push_str(") VALUES ");
        for r in 0..rows {
            s.push_str(if r == 0 { "(NULL)" } else { ",(NULL)" });
        }
        return;
    }
    s.push_str(" (");
    for i in 0..columns {
        if i > 0 {
            s.push(',');
        }
        column(i, s);
    }
    s.push_str(") VALUES ");
    let group = format!("({})", vec!["?"; columns].join(","));
    for r in 0..rows {
        if r > 0 {
            s.push(',');
        }
        s.push_str(&group);
    }
}
