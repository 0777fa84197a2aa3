//! SQL per database: quoting, placeholders, column types, LIMIT forms, and the
//! WHERE clauses of Burrow's checked filters rendered for each.

use burrow_core::{Caps, Column, Expr, FieldKind, Filter, SqlStyle};

/// The SQL dialect of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// PostgreSQL: `"quoted"` names, `$n` placeholders, `RETURNING`, sequences.
    Postgres,
    /// MySQL and MariaDB: `` `quoted` `` names, `?` placeholders, `AUTO_INCREMENT`.
    MySql,
    /// SQLite: `"quoted"` names, `?` placeholders, the rowid as ID.
    Sqlite,
}

/// How a field's values are stored in its column: decided per column when the
/// table is opened, from the field kind, the dialect, the engine options and,
/// for a table that already exists, the column's actual type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Enc {
    /// An integer column (also IDs and references).
    Int,
    /// A double.
    Real,
    /// A native boolean, or 0/1 in an integer column.
    Bool,
    /// An integer count of 1/10,000 (exact, as the SQLite engine stores it).
    Currency,
    /// Text (also JSON documents).
    Text,
    /// Bytes.
    Blob,
    /// A native `DATE`.
    Date,
    /// A date as `YYYY-MM-DD` text.
    DateText,
    /// A native timestamp (`TIMESTAMP`, `DATETIME(6)`): microsecond precision.
    Stamp,
    /// A date-time as ISO-8601 UTC text: nanosecond precision.
    StampText,
}

/// Where date-times go in tables the engine creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DateTimeStorage {
    /// The database's own type: `TIMESTAMP` (PostgreSQL), `DATETIME(6)`
    /// (MySQL/MariaDB). Readable by every SQL tool and indexable as time, but
    /// precise to the microsecond: sub-microsecond parts are dropped (floored)
    /// when written, and parameters compared with such columns are floored
    /// alike. SQLite has no such type and always uses text.
    #[default]
    Native,
    /// ISO-8601 UTC text (`2024-05-01T12:00:00.123456789`), exact to the
    /// nanosecond and sorting in time order, as the SQLite engine stores it.
    Text,
}

impl Dialect {
    /// A short name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::MySql => "mysql",
            Dialect::Sqlite => "sqlite",
        }
    }

    /// Appends `ident` quoted, inner quote characters doubled, so that any name
    /// (a reserved word, mixed case, spaces) is taken literally.
    pub fn quote(self, out: &mut String, ident: &str) {
        let q = match self {
            Dialect::MySql => '`',
            _ => '"',
        };
        out.push(q);
        for c in ident.chars() {
            if c == q {
                out.push(q);
            }
            out.push(c);
        }
        out.push(q);
    }

    /// `ident`, quoted.
    pub fn quoted(self, ident: &str) -> String {
        let mut s = String::with_capacity(ident.len() + 2);
        self.quote(&mut s, ident);
        s
    }

    /// How a field kind is stored in a table this engine creates.
    pub fn encoding(self, kind: FieldKind, times: DateTimeStorage) -> Enc {
        match kind {
            FieldKind::F64 => Enc::Real,
            FieldKind::Bool => Enc::Bool,
            FieldKind::Currency => Enc::Currency,
            FieldKind::Text | FieldKind::Json => Enc::Text,
            FieldKind::Blob => Enc::Blob,
            FieldKind::Date => match self {
                Dialect::Sqlite => Enc::DateText,
                _ => Enc::Date,
            },
            FieldKind::DateTime => match (self, times) {
                (Dialect::Sqlite, _) | (_, DateTimeStorage::Text) => Enc::StampText,
                _ => Enc::Stamp,
            },
            _ => Enc::Int,
        }
    }

    /// The column type of a field in a table this engine creates. `keyed`:
    /// the column carries an index (MySQL cannot index unbounded text).
    pub fn column_type(self, kind: FieldKind, enc: Enc, keyed: bool) -> &'static str {
        match self {
            Dialect::Postgres => match enc {
                Enc::Int if kind == FieldKind::I32 => "INTEGER",
                Enc::Int | Enc::Currency => "BIGINT",
                Enc::Real => "DOUBLE PRECISION",
                Enc::Bool => "BOOLEAN",
                // Byte order, as SQLite compares text.
                Enc::Text | Enc::DateText | Enc::StampText => "TEXT COLLATE \"C\"",
                Enc::Blob => "BYTEA",
                Enc::Date => "DATE",
                Enc::Stamp => "TIMESTAMP",
            },
            Dialect::MySql => match enc {
                Enc::Int if kind == FieldKind::I32 => "INT",
                Enc::Int | Enc::Currency => "BIGINT",
                Enc::Real => "DOUBLE",
                Enc::Bool => "BOOLEAN",
                // InnoDB indexes at most 3,072 bytes: 768 four-byte characters.
                Enc::Text if keyed => "VARCHAR(768)",
                Enc::Text => "LONGTEXT",
                Enc::DateText | Enc::StampText => "VARCHAR(40)",
                Enc::Blob => "LONGBLOB",
                Enc::Date => "DATE",
                Enc::Stamp => "DATETIME(6)",
            },
            // As the embedded engine types it: one file, one schema.
            Dialect::Sqlite => burrow_sqlite::schema::column_type(kind),
        }
    }

    /// The default of a NOT NULL column added to a table that has rows: the
    /// zero value of its field type (JSON `null` for a document).
    pub fn column_default(self, kind: FieldKind, enc: Enc) -> &'static str {
        if self == Dialect::Sqlite {
            return burrow_sqlite::schema::column_default(kind);
        }
        if kind == FieldKind::Json {
            return "'null'";
        }
        match (self, enc) {
            (_, Enc::Real) => "0.0",
            (Dialect::Postgres, Enc::Bool) => "false",
            (_, Enc::Text) => "''",
            (_, Enc::DateText | Enc::Date) => "'1970-01-01'",
            (_, Enc::StampText) => "'1970-01-01T00:00:00'",
            (_, Enc::Stamp) => "'1970-01-01 00:00:00'",
            (Dialect::Postgres, Enc::Blob) => "'\\x'",
            (_, Enc::Blob) => "''",
            _ => "0",
        }
    }

    /// The ID column of a table this engine creates: a sequence or identity,
    /// so that several servers sharing the database never hand out one ID twice.
    pub fn id_column_def(self, id: &str) -> String {
        match self {
            Dialect::Postgres => {
                format!("{id} BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY")
            }
            Dialect::MySql => format!("{id} BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY"),
            Dialect::Sqlite => format!("{id} {}", burrow_sqlite::schema::ID_TYPE),
        }
    }

    /// Appends what follows a column's quoted name in CREATE TABLE
    /// (`adding`: ADD COLUMN, where a NOT NULL column needs a default for the
    /// rows already there).
    pub(crate) fn write_column_def(
        self,
        out: &mut String,
        kind: FieldKind,
        enc: Enc,
        keyed: bool,
        nullable: bool,
        adding: bool,
    ) {
        if self == Dialect::Sqlite {
            return burrow_sqlite::schema::write_column_def(out, kind, nullable);
        }
        out.push(' ');
        out.push_str(self.column_type(kind, enc, keyed));
        if !nullable {
            out.push_str(" NOT NULL");
            if adding {
                out.push_str(" DEFAULT ");
                out.push_str(self.column_default(kind, enc));
            }
        }
    }

    /// The name of a field's index, within the servers' length limits
    /// (PostgreSQL 63 bytes, MySQL 64); SQLite has none, and gets the
    /// embedded engine's name.
    pub(crate) fn index_name(self, table: &str, column: &str, unique: bool) -> String {
        let mut s = burrow_sqlite::schema::index_name(table, column, unique);
        if self != Dialect::Sqlite && s.len() > 60 {
            let mut cut = 60;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
        }
        s
    }

    /// What follows `CREATE TABLE t (…)`.
    pub fn table_suffix(self) -> &'static str {
        match self {
            // Binary collation: text compares and sorts by bytes, as in SQLite,
            // and unique keys are case-sensitive.
            Dialect::MySql => " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
            _ => "",
        }
    }

    /// What the engine reports of itself for tables on this database.
    pub(crate) fn caps(self) -> Caps {
        match self {
            Dialect::Postgres => Caps::network("postgres"),
            Dialect::MySql => Caps::network("mysql"),
            Dialect::Sqlite => Caps::in_process("sqlite-external").with_sqlite_order(),
        }
    }

    /// The statement that begins a transaction.
    pub(crate) fn begin_verb(self) -> &'static str {
        match self {
            Dialect::Postgres => "BEGIN",
            Dialect::MySql => "START TRANSACTION",
            // Take the write lock now, as the SQLite engine does, so that a
            // transaction never fails half-way to upgrade its lock.
            Dialect::Sqlite => "BEGIN IMMEDIATE",
        }
    }

    /// Whether NULLs sort last ascending (PostgreSQL), so that ORDER BY needs
    /// `NULLS FIRST` to sort them first as SQLite and MySQL do.
    pub(crate) fn sorts_nulls_last(self) -> bool {
        self == Dialect::Postgres
    }

    /// Whether placeholders are numbered (`$1`) rather than `?`.
    pub(crate) fn numbered_params(self) -> bool {
        self == Dialect::Postgres
    }

    /// Whether one failed statement aborts the whole transaction (PostgreSQL),
    /// so that writes inside one need a savepoint each to leave it usable.
    pub(crate) fn aborts_tx_on_error(self) -> bool {
        self == Dialect::Postgres
    }

    /// Whether DDL runs inside a transaction, all or nothing. MySQL commits
    /// each DDL statement by itself.
    pub(crate) fn transactional_ddl(self) -> bool {
        self != Dialect::MySql
    }

    /// The query of the server's version; MySQL's also reads what bounds its
    /// multi-row INSERTs (see `crate::server`).
    pub(crate) fn server_info_sql(self) -> &'static str {
        match self {
            Dialect::Postgres => "SELECT version()",
            Dialect::MySql => {
                "SELECT VERSION(), @@innodb_autoinc_lock_mode, @@auto_increment_increment, \
                 @@max_allowed_packet"
            }
            Dialect::Sqlite => "SELECT sqlite_version()",
        }
    }

    /// The name and type of each column of a table (its name bound as the
    /// one parameter), in order.
    pub(crate) fn columns_sql(self) -> &'static str {
        match self {
            Dialect::Postgres => {
                "SELECT column_name::text, udt_name::text FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position"
            }
            Dialect::MySql => {
                "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION"
            }
            Dialect::Sqlite => "SELECT name, type FROM pragma_table_info(?)",
        }
    }

    /// Rows per bulk statement when the builder sets none, and the most that
    /// the parameter limit lets through for `columns` parameters a row.
    pub(crate) fn bulk_rows(self, columns: usize) -> (usize, usize) {
        let columns = columns.max(1);
        match self {
            Dialect::Postgres => (5_000, usize::MAX),
            Dialect::MySql => (1_000, 65_535 / columns),
            Dialect::Sqlite => (
                burrow_sqlite::statements::MAX_ROWS,
                burrow_sqlite::statements::MAX_PARAMS / columns,
            ),
        }
    }

    /// Whether many rows go as one array per column (PostgreSQL's `UNNEST`
    /// and `= ANY`) rather than a placeholder per value.
    pub(crate) fn binds_arrays(self) -> bool {
        self == Dialect::Postgres
    }

    /// Whether an INSERT hands back the new ID as a row (`RETURNING`) rather
    /// than through the connection's last insert ID.
    pub(crate) fn insert_returns_id(self) -> bool {
        self == Dialect::Postgres
    }

    /// Whether a filter on a boolean column compares native booleans rather
    /// than whatever integers another writer stored.
    pub(crate) fn native_bools(self) -> bool {
        self == Dialect::Postgres
    }

    /// The IDs of a multi-row INSERT of `rows` rows, from the connection's
    /// last insert ID after it. SQLite reports the last row's: one INSERT
    /// gives its rows consecutive rowids after the current maximum, under the
    /// database's write lock. MySQL reports the first row's, and lock modes 0
    /// and 1 give the others `step` apart.
    pub(crate) fn bulk_insert_ids(self, reported: i64, rows: i64, step: i64) -> Vec<i64> {
        match self {
            Dialect::Sqlite => (reported - rows + 1..=reported).collect(),
            _ => (0..rows).map(|i| reported + i * step).collect(),
        }
    }

    /// The LIMIT value meaning "no limit", bound as a parameter.
    pub fn no_limit(self) -> Option<i64> {
        match self {
            Dialect::Postgres => None,
            Dialect::MySql => Some(i64::MAX),
            Dialect::Sqlite => Some(-1),
        }
    }
}

/// A statement being written, numbering placeholders as it goes.
pub struct SqlText {
    pub text: String,
    pub dialect: Dialect,
    params: usize,
}

impl SqlText {
    pub fn new(dialect: Dialect, start: &str) -> Self {
        SqlText {
            text: start.to_owned(),
            dialect,
            params: 0,
        }
    }

    /// Appends text.
    pub fn push(&mut self, s: &str) {
        self.text.push_str(s);
    }
}

/// Appends the next placeholder, counting it: `$n` or `?`.
fn placeholder(dialect: Dialect, params: &mut usize, out: &mut String) {
    *params += 1;
    if dialect.numbered_params() {
        use std::fmt::Write;
        let _ = write!(out, "${params}");
    } else {
        out.push('?');
    }
}

/// Appends ` WHERE …` for a non-empty filter; `col` writes a quoted column.
pub fn write_where(sql: &mut SqlText, filter: &Filter, col: &dyn Fn(Column, &mut String)) {
    if filter.expr.is_none() {
        return;
    }
    sql.push(" WHERE ");
    let SqlText {
        text,
        dialect,
        params,
    } = sql;
    filter.write_sql(
        text,
        &mut Style {
            dialect: *dialect,
            params,
            col,
        },
    );
}

/// The dialect's spelling of placeholders and of SQLite's case-blind `LIKE`.
pub(crate) struct Style<'a> {
    pub dialect: Dialect,
    /// Placeholders written so far.
    pub params: &'a mut usize,
    /// Writes a quoted column.
    pub col: &'a dyn Fn(Column, &mut String),
}

impl SqlStyle for Style<'_> {
    fn column(&mut self, c: Column, out: &mut String) {
        (self.col)(c, out)
    }

    fn placeholder(&mut self, out: &mut String) {
        placeholder(self.dialect, self.params, out);
    }

    fn like(&mut self, c: Column, negated: bool, out: &mut String) {
        let not = if negated { "NOT " } else { "" };
        match self.dialect {
            Dialect::Postgres => {
                self.column(c, out);
                out.push(' ');
                out.push_str(not);
                out.push_str("ILIKE ");
                self.placeholder(out);
            }
            Dialect::MySql => {
                out.push_str("LOWER(");
                self.column(c, out);
                out.push_str(") ");
                out.push_str(not);
                out.push_str("LIKE LOWER(");
                self.placeholder(out);
                out.push(')');
            }
            Dialect::Sqlite => {
                self.column(c, out);
                out.push(' ');
                out.push_str(not);
                out.push_str("LIKE ");
                self.placeholder(out);
            }
        }
    }
}

/// The column each parameter of `filter` is compared with, in parameter order,
/// so that each can be bound in its column's storage form.
pub fn param_columns(filter: &Filter) -> Vec<Column> {
    fn walk(e: &Expr, out: &mut Vec<(usize, Column)>) {
        match e {
            Expr::And(v) | Expr::Or(v) => v.iter().for_each(|x| walk(x, out)),
            Expr::Not(x) => walk(x, out),
            Expr::Cmp(c, _, p) | Expr::Like(c, p, _) => out.push((*p, *c)),
            Expr::In(c, list, _) => out.extend(list.iter().map(|p| (*p, *c))),
            Expr::IsNull(..) => {}
            Expr::Between(c, a, b, _) => {
                out.push((*a, *c));
                out.push((*b, *c));
            }
        }
    }
    let mut v = Vec::with_capacity(filter.params.len());
    if let Some(e) = &filter.expr {
        walk(e, &mut v);
    }
    v.sort_by_key(|(p, _)| *p);
    v.into_iter().map(|(_, c)| c).collect()
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn quoting_doubles_the_quote_character() {
        assert_eq!(Dialect::Postgres.quoted("a\"b"), "\"a\"\"b\"");
        assert_eq!(Dialect::MySql.quoted("or`der"), "`or``der`");
        assert_eq!(Dialect::Sqlite.quoted("select"), "\"select\"");
    }

    #[test]
    fn postgres_placeholders_are_numbered() {
        let (mut s, mut n) = (String::from("x="), 0);
        placeholder(Dialect::Postgres, &mut n, &mut s);
        s.push_str(",y=");
        placeholder(Dialect::Postgres, &mut n, &mut s);
        assert_eq!(s, "x=$1,y=$2");
    }
}
