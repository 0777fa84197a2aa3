//! SQL text for one table, built once when the table is opened.

use std::collections::HashMap;

use burrow_core::{Column, FieldKind, Select, Table};

/// Quotes an identifier: `"name"`, with inner quotes doubled.
pub fn quote(out: &mut String, ident: &str) {
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

/// The declared SQLite type of a field kind.
pub fn column_type(kind: FieldKind) -> &'static str {
    match kind {
        FieldKind::F64 => "REAL",
        FieldKind::Text | FieldKind::Json | FieldKind::Date | FieldKind::DateTime => "TEXT",
        FieldKind::Blob => "BLOB",
        _ => "INTEGER",
    }
}

/// The default a NOT NULL column gets, so that a column added to a table with
/// rows holds a value its field type reads back.
fn column_default(kind: FieldKind) -> &'static str {
    match kind {
        FieldKind::F64 => "0.0",
        FieldKind::Text => "''",
        FieldKind::Json => "'null'",
        FieldKind::Date => "'1970-01-01'",
        FieldKind::DateTime => "'1970-01-01T00:00:00'",
        FieldKind::Blob => "x''",
        _ => "0",
    }
}

/// The definition of a field's column, as in CREATE TABLE and ADD COLUMN.
pub fn column_def(table: &Table, idx: usize) -> String {
    let f = &table.fields[idx];
    let mut s = quoted(f.column);
    s.push(' ');
    s.push_str(column_type(f.kind));
    if !f.nullable {
        s.push_str(" NOT NULL DEFAULT ");
        s.push_str(column_default(f.kind));
    }
    s
}

/// Rows per multi-row INSERT: as many as fit under SQLite's bound-parameter
/// limit, capped where measurements stopped improving.
pub fn rows_per_insert(table: &Table) -> usize {
    const MAX_PARAMS: usize = 32_000;
    const MAX_ROWS: usize = 200;
    (MAX_PARAMS / (table.fields.len() + 1)).clamp(1, MAX_ROWS)
}

/// The statements of one table.
pub struct TableSql {
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
pub fn write_where(table: &Table, filter: &burrow_core::Filter, s: &mut String) {
    if filter.expr.is_some() {
        s.push_str(" WHERE ");
        filter.write_sql(s, &mut |c: Column, out: &mut String| {
            write_column(table, c, out)
        });
    }
}

/// Appends a column's quoted name (`ID` for the ID).
pub fn write_column(table: &Table, c: Column, out: &mut String) {
    match c {
        Column::Id => out.push_str("ID"),
        Column::Field(i) => quote(out, table.fields[i].column),
    }
}

/// `INSERT INTO t (cols) VALUES` with `rows` groups of placeholders.
pub fn bulk_insert_sql(table: &Table, rows: usize) -> String {
    let mut s = String::from("INSERT INTO ");
    quote(&mut s, table.name);
    if table.fields.is_empty() {
        s.push_str(" (ID) VALUES ");
        for r in 0..rows {
            s.push_str(if r == 0 { "(NULL)" } else { ",(NULL)" });
        }
        return s;
    }
    s.push_str(" (");
    for (i, f) in table.fields.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        quote(&mut s, f.column);
    }
    s.push_str(") VALUES ");
    let group = format!("({})", vec!["?"; table.fields.len()].join(","));
    for r in 0..rows {
        if r > 0 {
            s.push(',');
        }
        s.push_str(&group);
    }
    s
}
