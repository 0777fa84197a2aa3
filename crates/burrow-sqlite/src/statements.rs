//! SQL text for one table, built once when the table is opened.
//!
//! [`TableNames`] writes the statements of a table from its quoted names:
//! this engine's, and the external layer's (`burrow-sql`) for every database
//! it speaks to, so that each statement is written once.

use std::collections::HashMap;

use std::fmt::Write as _;

use burrow_core::{AutoTime, Column, Fields, Select, SqlStyle, Table};

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

/// The fields of `table` a batch stamps with one time for all its records
/// (its automatic times): the fields a multi-row insert may bind once for
/// all its rows ([`TableNames::insert_rows_shared`]).
pub fn shared_times(table: &Table) -> Vec<usize> {
    (0..table.fields.len())
        .filter(|&i| table.fields[i].auto != AutoTime::No)
        .collect()
}

/// Whether every one of `rows` holds the same values as the first in the
/// `shared` fields, so that one parameter each can carry them for all. An
/// empty `shared` or `rows` shares nothing.
pub fn rows_share<'r>(mut rows: impl Iterator<Item = &'r dyn Fields>, shared: &[usize]) -> bool {
    if shared.is_empty() {
        return false;
    }
    let Some(first) = rows.next() else {
        return false;
    };
    rows.all(|r| shared.iter().all(|&i| r.field(i) == first.field(i)))
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
    /// The same, with the table's automatic times ([`shared_times`], here
    /// `shared`) bound once for all rows; `None` for a table without them.
    pub bulk_insert_shared: Option<String>,
    pub shared: Vec<usize>,
    pub bulk_rows: usize,
    /// `UPDATE t SET every col WHERE ID=?`
    pub update_all: String,
    /// `DELETE FROM t WHERE ID=?`
    pub delete: String,
    /// `SELECT max(ID) FROM t`
    pub max_id: String,
    /// Partial updates seen so far, by field list.
    pub update_some: HashMap<Vec<usize>, String>,
    names: TableNames,
}

impl TableSql {
    pub fn new(table: &'static Table) -> Self {
        let names = TableNames::of(table);
        let bulk_rows = rows_per_insert(table);
        let shared = shared_times(table);
        TableSql {
            bulk_insert_shared: (!shared.is_empty())
                .then(|| names.insert_rows_shared(bulk_rows, &shared)),
            shared,
            table,
            select: names.select(),
            select_by_id: names.select_by_id(),
            insert: names.insert_with_id(),
            insert_new: names.insert_rows(1),
            bulk_insert: names.insert_rows(bulk_rows),
            bulk_rows,
            update_all: names.update_all(),
            delete: names.delete(),
            max_id: names.max_id(),
            update_some: HashMap::new(),
            names,
        }
    }

    /// `UPDATE t SET listed cols WHERE ID=?`, built once per distinct list.
    pub fn update_some(&mut self, fields: &[usize]) -> &str {
        let names = &self.names;
        self.update_some
            .entry(fields.to_vec())
            .or_insert_with(|| names.update_some(fields))
    }

    /// The text of a SELECT of `what` (`None`: ID and every field) with the
    /// filter, order, limit and offset of `select`. LIMIT and OFFSET are bound
    /// after the filter's parameters when present.
    pub fn select_sql(&self, what: Option<Column>, select: &Select) -> (String, bool) {
        let names = &self.names;
        let mut style = |c: Column, out: &mut String| names.write_column(c, out);
        names.select_sql(&self.select, what, select, &mut style, None)
    }
}

impl AsRef<TableSql> for TableSql {
    fn as_ref(&self) -> &TableSql {
        self
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
    TableNames::of(table).insert_rows(rows)
}

/// The quoted names of a table's columns, from which its statements are
/// written: the embedded engine's, and the external layer's for each
/// database it speaks to.
#[derive(Debug, Clone)]
pub struct TableNames {
    /// The table.
    pub table: String,
    /// The ID column.
    pub id: String,
    /// The column of each field.
    pub columns: Vec<String>,
    /// Whether placeholders are numbered (`$1`, PostgreSQL) rather than `?`.
    pub numbered: bool,
}

impl TableNames {
    /// The names of `table` as this engine stores it.
    pub(crate) fn of(table: &Table) -> TableNames {
        TableNames {
            table: quoted(table.name),
            id: "ID".into(),
            columns: table.fields.iter().map(|f| quoted(f.column)).collect(),
            numbered: false,
        }
    }

    /// Appends the `n`th placeholder (from 1).
    fn param(&self, s: &mut String, n: usize) {
        if self.numbered {
            s.push('$');
            s.push_str(&n.to_string());
        } else {
            s.push('?');
        }
    }

    /// Appends `(…)` with placeholders `from` to `from + n - 1`.
    fn params(&self, s: &mut String, from: usize, n: usize) {
        s.push('(');
        for i in 0..n {
            if i > 0 {
                s.push(',');
            }
            self.param(s, from + i);
        }
        s.push(')');
    }

    /// `SELECT id,cols FROM t`, the prefix of every read of whole rows.
    pub fn select(&self) -> String {
        let mut s = format!("SELECT {}", self.id);
        for c in &self.columns {
            s.push(',');
            s.push_str(c);
        }
        s.push_str(" FROM ");
        s.push_str(&self.table);
        s
    }

    /// `SELECT id,cols FROM t WHERE id=?`
    pub fn select_by_id(&self) -> String {
        let mut s = self.select();
        self.where_id(&mut s, 1);
        s
    }

    /// Appends ` WHERE id=?`, the placeholder numbered `n`.
    fn where_id(&self, s: &mut String, n: usize) {
        s.push_str(" WHERE ");
        s.push_str(&self.id);
        s.push('=');
        self.param(s, n);
    }

    /// `INSERT INTO t (id,cols) VALUES (?,…)`, for a given ID.
    pub fn insert_with_id(&self) -> String {
        let mut s = format!("INSERT INTO {} ({}", self.table, self.id);
        for c in &self.columns {
            s.push(',');
            s.push_str(c);
        }
        s.push_str(") VALUES ");
        self.params(&mut s, 1, self.columns.len() + 1);
        s
    }

    /// `INSERT INTO t (cols) VALUES (…),(…)…` with `rows` rows whose IDs the
    /// database assigns: binding no ID at all costs SQLite less than binding
    /// it NULL. A table of no columns inserts `(id) VALUES (NULL),…`.
    pub fn insert_rows(&self, rows: usize) -> String {
        let mut s = format!("INSERT INTO {} (", self.table);
        let n = self.columns.len();
        if n == 0 {
            s.push_str(&self.id);
            s.push_str(") VALUES ");
            for r in 0..rows {
                s.push_str(if r == 0 { "(NULL)" } else { ",(NULL)" });
            }
            return s;
        }
        s.push_str(&self.columns.join(","));
        s.push_str(") VALUES ");
        for r in 0..rows {
            if r > 0 {
                s.push(',');
            }
            self.params(&mut s, r * n + 1, n);
        }
        s
    }

    /// `INSERT INTO t (cols) VALUES (…),(…)…` with `rows` rows whose IDs the
    /// database assigns, the `shared` fields (indexes, in order) of every row
    /// taking one parameter for all rows: parameters 1 to `shared.len()`, the
    /// rows' other fields those after them, row by row. A batch stamps its
    /// records with one time, and binding that time once a statement rather
    /// than once a row left SQLite a sixth less work in a batch of inserts.
    /// SQLite's placeholders: a `?` takes the number after the largest so
    /// far, so only the first of the rows' own needs its number written.
    pub fn insert_rows_shared(&self, rows: usize, shared: &[usize]) -> String {
        debug_assert!(!self.numbered, "numbered placeholders are SQLite's");
        let mut s = format!("INSERT INTO {} (", self.table);
        s.push_str(&self.columns.join(","));
        s.push_str(") VALUES ");
        let mut numbered_own = false;
        for r in 0..rows {
            s.push_str(if r == 0 { "(" } else { ",(" });
            for i in 0..self.columns.len() {
                if i > 0 {
                    s.push(',');
                }
                match shared.iter().position(|&f| f == i) {
                    Some(k) => {
                        let _ = write!(s, "?{}", k + 1);
                    }
                    None if !numbered_own => {
                        let _ = write!(s, "?{}", shared.len() + 1);
                        numbered_own = true;
                    }
                    None => s.push('?'),
                }
            }
            s.push(')');
        }
        s
    }

    /// `UPDATE t SET every col WHERE id=?` (a table of no columns sets the
    /// ID to itself, to find whether the row is there).
    pub fn update_all(&self) -> String {
        let all: Vec<usize> = (0..self.columns.len()).collect();
        self.update_some(&all)
    }

    /// `UPDATE t SET listed cols WHERE id=?`.
    pub fn update_some(&self, fields: &[usize]) -> String {
        let mut s = format!("UPDATE {} SET ", self.table);
        if fields.is_empty() {
            s.push_str(&format!("{0}={0}", self.id));
        }
        for (n, &i) in fields.iter().enumerate() {
            if n > 0 {
                s.push(',');
            }
            s.push_str(&self.columns[i]);
            s.push('=');
            self.param(&mut s, n + 1);
        }
        self.where_id(&mut s, fields.len() + 1);
        s
    }

    /// `DELETE FROM t WHERE id=?`
    pub fn delete(&self) -> String {
        let mut s = format!("DELETE FROM {}", self.table);
        self.where_id(&mut s, 1);
        s
    }

    /// Appends a column's quoted name.
    pub fn write_column(&self, c: Column, out: &mut String) {
        match c {
            Column::Id => out.push_str(&self.id),
            Column::Field(i) => out.push_str(&self.columns[i]),
        }
    }

    /// A SELECT of `what` with the filter, order, limit and offset of
    /// `select`, written in `style`; `None` reads the ID and every column,
    /// after `all`, the caller's kept copy of [`select`](Self::select).
    /// Returns whether LIMIT and OFFSET placeholders follow the filter's.
    /// `nulls` names the table whose nullable columns get an explicit
    /// `NULLS FIRST` ascending (`NULLS LAST` descending), for a database that
    /// would otherwise sort NULLs unlike SQLite.
    pub fn select_sql(
        &self,
        all: &str,
        what: Option<Column>,
        select: &Select,
        style: &mut dyn SqlStyle,
        nulls: Option<&Table>,
    ) -> (String, bool) {
        let mut s = match what {
            None => all.to_owned(),
            Some(c) => {
                let mut s = String::from("SELECT ");
                style.column(c, &mut s);
                s.push_str(" FROM ");
                s.push_str(&self.table);
                s
            }
        };
        if select.filter.expr.is_some() {
            s.push_str(" WHERE ");
            select.filter.write_sql(&mut s, style);
        }
        for (n, (c, desc)) in select.order.iter().enumerate() {
            s.push_str(if n == 0 { " ORDER BY " } else { "," });
            style.column(*c, &mut s);
            if *desc {
                s.push_str(" DESC");
            }
            if let (Some(t), Column::Field(i)) = (nulls, c) {
                if t.fields[*i].nullable {
                    s.push_str(if *desc { " NULLS LAST" } else { " NULLS FIRST" });
                }
            }
        }
        let paged = select.limit.is_some() || select.offset > 0;
        if paged {
            s.push_str(" LIMIT ");
            style.placeholder(&mut s);
            s.push_str(" OFFSET ");
            style.placeholder(&mut s);
        }
        (s, paged)
    }

    /// `SELECT max(id) FROM t`
    pub fn max_id(&self) -> String {
        format!("SELECT max({}) FROM {}", self.id, self.table)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// Runs `insert_rows_shared` for three rows of columns `a`, `b`, `c` with
    /// `shared` bound once and every other value numbered by row and
    /// column, and returns what the table holds.
    fn insert_shared(shared: &[usize]) -> Vec<(i64, i64, i64)> {
        let names = TableNames {
            table: "t".into(),
            id: "ID".into(),
            columns: vec!["a".into(), "b".into(), "c".into()],
            numbered: false,
        };
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (ID INTEGER PRIMARY KEY, a, b, c)")
            .unwrap();
        let sql = names.insert_rows_shared(3, shared);
        let mut stmt = conn.prepare(&sql).unwrap();
        assert_eq!(
            stmt.parameter_count(),
            shared.len() + 3 * (3 - shared.len()),
            "{sql}"
        );
        let mut at = 1;
        for &i in shared {
            stmt.raw_bind_parameter(at, -(i as i64)).unwrap();
            at += 1;
        }
        for r in 0..3 {
            for c in (0..3).filter(|c| !shared.contains(c)) {
                stmt.raw_bind_parameter(at, (r * 10 + c) as i64).unwrap();
                at += 1;
            }
        }
        assert_eq!(stmt.raw_execute().unwrap(), 3);
        let mut read = conn.prepare("SELECT a, b, c FROM t ORDER BY ID").unwrap();
        let rows = read
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap();
        rows.collect::<rusqlite::Result<_>>().unwrap()
    }

    #[test]
    fn shared_fields_take_their_one_parameter_wherever_they_stand() {
        assert_eq!(insert_shared(&[0]), [(0, 1, 2), (0, 11, 12), (0, 21, 22)]);
        assert_eq!(
            insert_shared(&[1]),
            [(0, -1, 2), (10, -1, 12), (20, -1, 22)]
        );
        assert_eq!(
            insert_shared(&[2, 0]),
            [(0, 1, -2), (0, 11, -2), (0, 21, -2)]
        );
        assert_eq!(
            insert_shared(&[1, 2]),
            [(0, -1, -2), (10, -1, -2), (20, -1, -2)]
        );
        assert_eq!(insert_shared(&[0, 1, 2]), [(0, -1, -2); 3]);
    }
}
