//! The SQL the server accepts: one read-only `SELECT` on one table, checked by
//! Burrow's own parser and run through the table's engine, never as SQL text.
//!
//! ```text
//! SELECT { * | count(*) | column [, column]* } FROM table
//!        [WHERE filter] [ORDER BY column [ASC|DESC] [, …]] [LIMIT n [OFFSET m]] [;]
//! ```
//!
//! The filter is [`burrow_core::Filter`]'s grammar, with mORMot's inline
//! `:(…):` parameters turned into bound values. Anything else (joins, several
//! tables, functions, sub-selects, `GROUP BY`, `UNION`) is refused; a statement
//! that writes is refused as a right the caller does not have.

use burrow_core::{Column, Error, Model, Select, Table};

/// Why a statement is refused.
#[derive(Debug)]
pub(crate) enum SqlError {
    /// It would write: 403.
    Write(String),
    /// It is not the subset above, or names unknown tables or fields: 400.
    Bad(Error),
}

impl From<Error> for SqlError {
    fn from(e: Error) -> Self {
        SqlError::Bad(e)
    }
}

fn unsupported(msg: impl Into<String>) -> SqlError {
    SqlError::Bad(Error::Unsupported(msg.into()))
}

/// What a SELECT returns.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Projection {
    /// These columns of each row.
    Columns(Vec<Column>),
    /// The count of matching rows, under this column name (`Count(*)`).
    Count(String),
}

/// A checked SELECT.
#[derive(Debug)]
pub(crate) struct SqlSelect {
    pub table: &'static Table,
    pub projection: Projection,
    pub select: Select,
}

/// The words of `s` at parenthesis depth 0, outside string literals and
/// inline parameters, with their byte offsets.
fn top_words(s: &str) -> Vec<(usize, &str)> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut depth) = (0, 0i32);
    while i < b.len() {
        match b[i] {
            b'\'' => {
                i += 1;
                while i < b.len() {
                    if b[i] == b'\'' {
                        if b.get(i + 1) == Some(&b'\'') {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            b':' if b.get(i + 1) == Some(&b'(') => {
                // Inline parameter: skip to its closing "):", minding quotes.
                i += 2;
                let mut quoted = false;
                while i < b.len() {
                    match b[i] {
                        b'\'' => quoted = !quoted,
                        b')' if !quoted && b.get(i + 1) == Some(&b':') => {
                            i += 1;
                            break;
                        }
                        _ => {}
                    }
                    i += 1;
                }
                i += 1;
            }
            b'(' => {
                depth += 1;
                i += 1;
            }
            b')' => {
                depth -= 1;
                i += 1;
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                if depth == 0 {
                    out.push((start, &s[start..i]));
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// A WHERE clause followed by optional ORDER BY / LIMIT / OFFSET, as in
/// mORMot's `where=` URI parameter and after `FROM table`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Tail {
    pub where_text: String,
    pub order: Vec<(String, bool)>,
    pub limit: Option<u64>,
    pub offset: Option<u64>,
}

/// Words after a WHERE clause: an ORDER BY of SQLite's most columns (2,000),
/// each with a direction and a comma, and a LIMIT and OFFSET.
const MAX_TAIL_WORDS: usize = 6_010;

/// Splits `text` into its WHERE part and its ORDER BY / LIMIT / OFFSET part.
pub(crate) fn split_tail(text: &str) -> Result<Tail, SqlError> {
    let text = text.trim();
    let words = top_words(text);
    let cut = words
        .iter()
        .find(|(_, w)| {
            ["order", "limit", "offset", "group", "having", "union"]
                .iter()
                .any(|k| w.eq_ignore_ascii_case(k))
        })
        .map_or(text.len(), |(p, _)| *p);
    let mut where_text = text[..cut].trim();
    if let Some((0, w)) = words.first() {
        if w.eq_ignore_ascii_case("where") {
            where_text = where_text[5..].trim();
        }
    }
    let mut tail = Tail {
        where_text: where_text.to_owned(),
        ..Tail::default()
    };
    let rest = text[cut..].trim().replace(',', " , ");
    let toks: Vec<&str> = rest.split_whitespace().take(MAX_TAIL_WORDS + 1).collect();
    if toks.len() > MAX_TAIL_WORDS {
        return Err(unsupported(format!(
            "ORDER BY, LIMIT and OFFSET take at most {MAX_TAIL_WORDS} words"
        )));
    }
    let mut i = 0;
    let kw = |i: usize, k: &str| toks.get(i).is_some_and(|t| t.eq_ignore_ascii_case(k));
    let number = |t: Option<&&str>| -> Result<u64, SqlError> {
        t.and_then(|t| t.parse().ok())
            .ok_or_else(|| unsupported("LIMIT and OFFSET take a non-negative integer"))
    };
    if kw(i, "order") {
        if !kw(i + 1, "by") {
            return Err(unsupported("expected BY after ORDER"));
        }
        i += 2;
        loop {
            let col = toks
                .get(i)
                .filter(|t| **t != ",")
                .ok_or_else(|| unsupported("expected a column after ORDER BY"))?;
            i += 1;
            let mut desc = false;
            if kw(i, "desc") {
                desc = true;
                i += 1;
            } else if kw(i, "asc") {
                i += 1;
            }
            tail.order.push((unquote(col).to_owned(), desc));
            if toks.get(i).is_some_and(|t| *t == ",") {
                i += 1;
            } else {
                break;
            }
        }
    }
    if kw(i, "limit") {
        tail.limit = Some(number(toks.get(i + 1))?);
        i += 2;
    }
    if kw(i, "offset") {
        tail.offset = Some(number(toks.get(i + 1))?);
        i += 2;
    }
    if let Some(t) = toks.get(i) {
        return Err(unsupported(format!(
            "unexpected {t:?} after the WHERE clause"
        )));
    }
    Ok(tail)
}

fn unquote(s: &str) -> &str {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(b'"'), Some(b'"')) | (Some(b'`'), Some(b'`')) | (Some(b'['), Some(b']'))
            if b.len() >= 2 =>
        {
            &s[1..s.len() - 1]
        }
        _ => s,
    }
}

/// Turns a [`Tail`] into a checked [`Select`] on `table`.
pub(crate) fn resolve(table: &'static Table, tail: &Tail) -> Result<Select, Error> {
    Select::checked(
        table,
        &tail.where_text,
        &[],
        &tail.order,
        tail.limit,
        tail.offset.unwrap_or(0),
    )
}

const WRITES: &[&str] = &[
    "insert",
    "update",
    "delete",
    "replace",
    "create",
    "drop",
    "alter",
    "pragma",
    "attach",
    "detach",
    "vacuum",
    "reindex",
    "analyze",
    "begin",
    "commit",
    "rollback",
    "savepoint",
    "release",
    "with",
];

/// A SELECT whose table is known, its columns and filter not yet checked
/// against that table: the caller checks the right to read the table
/// first, so that a client without it learns nothing of its fields (an
/// unknown one would be a 400 that names it).
#[derive(Debug)]
pub(crate) struct Unresolved<'s> {
    pub table: &'static Table,
    cols_text: &'s str,
    tail: Tail,
}

impl Unresolved<'_> {
    /// Checks the columns and the filter against the table.
    pub fn resolve(self) -> Result<SqlSelect, SqlError> {
        let projection = projection(self.table, self.cols_text)?;
        let select = resolve(self.table, &self.tail)?;
        Ok(SqlSelect {
            table: self.table,
            projection,
            select,
        })
    }
}

/// Parses a statement sent as the body of `GET /{root}`, up to what needs
/// its table's schema (see [`Unresolved`]).
pub(crate) fn parse_select<'s>(model: &Model, sql: &'s str) -> Result<Unresolved<'s>, SqlError> {
    let sql = sql.trim();
    let sql = sql.strip_suffix(';').unwrap_or(sql).trim_end();
    let words = top_words(sql);
    let first = words.first().map(|(_, w)| *w).unwrap_or("");
    if !first.eq_ignore_ascii_case("select") || words[0].0 != 0 {
        if WRITES.iter().any(|w| first.eq_ignore_ascii_case(w)) {
            return Err(SqlError::Write(format!(
                "SQL statements other than SELECT are refused ({first})"
            )));
        }
        return Err(unsupported("only a SELECT statement is accepted"));
    }
    let from = words
        .iter()
        .find(|(_, w)| w.eq_ignore_ascii_case("from"))
        .ok_or_else(|| unsupported("SELECT without FROM"))?;
    let cols_text = sql["select".len()..from.0].trim();
    let after = sql[from.0 + 4..].trim_start();
    let name_end = after
        .find(|c: char| c.is_whitespace() || c == ',')
        .unwrap_or(after.len());
    let name = unquote(&after[..name_end]);
    let table = model
        .table(name)
        .ok_or_else(|| Error::UnknownTable(name.to_owned()))?;
    let rest = after[name_end..].trim_start();
    if rest.starts_with(',') {
        return Err(unsupported("a SELECT reads one table"));
    }
    if let Some((_, w)) = top_words(rest).first() {
        if !["where", "order", "limit"]
            .iter()
            .any(|k| w.eq_ignore_ascii_case(k))
        {
            return Err(unsupported(format!(
                "{w} is not supported after FROM {name}"
            )));
        }
    }
    if !rest.is_empty() && top_words(rest).first().is_none_or(|(p, _)| *p != 0) {
        return Err(unsupported(format!("unexpected text after FROM {name}")));
    }
    let tail = split_tail(rest)?;
    Ok(Unresolved {
        table,
        cols_text,
        tail,
    })
}

fn projection(table: &'static Table, text: &str) -> Result<Projection, SqlError> {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    if compact.eq_ignore_ascii_case("count(*)") {
        return Ok(Projection::Count(text.trim().to_owned()));
    }
    let mut cols = Vec::new();
    for item in text.split(',') {
        let item = item.trim();
        if item == "*" {
            for c in columns_of(table) {
                push_once(table, &mut cols, c)?;
            }
            continue;
        }
        let name = unquote(item);
        let name = name
            .rsplit_once('.')
            .filter(|(t, _)| unquote(t).eq_ignore_ascii_case(table.name))
            .map_or(name, |(_, f)| f);
        let name = unquote(name);
        if name.is_empty() || !name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
            return Err(unsupported(format!(
                "{item:?}: a SELECT lists columns, * or count(*)"
            )));
        }
        let c = table.column(name).ok_or_else(|| Error::UnknownField {
            table: table.name,
            field: name.to_owned(),
        })?;
        push_once(table, &mut cols, c)?;
    }
    Ok(Projection::Columns(cols))
}

/// Every column of `table`, as `*` names them: the ID, then the fields.
pub(crate) fn columns_of(table: &Table) -> impl Iterator<Item = Column> {
    std::iter::once(Column::Id).chain((0..table.fields.len()).map(Column::Field))
}

/// Appends `c` to a list's columns, unless it is there already (`*,*`
/// included): a list holds at most one value per column and row, however
/// long the request that named them, and stops at the first repeat.
pub(crate) fn push_once(table: &Table, cols: &mut Vec<Column>, c: Column) -> Result<(), Error> {
    if cols.contains(&c) {
        return Err(Error::BadInput(format!(
            "column {} is listed twice",
            table.column_name(c)
        )));
    }
    cols.push(c);
    Ok(())
}

#[cfg(test)]
mod test {
    use super::*;
    use burrow_core::{Field, FieldKind, Value};

    static T: Table = Table {
        name: "Sample",
        fields: &[Field::new("LastName", FieldKind::Text)],
    };

    fn model() -> Model {
        let mut m = Model::new();
        m.add_table(&T);
        m
    }

    #[test]
    fn tails() -> Result<(), SqlError> {
        let t = split_tail("LastName='a order by' order by ID desc, LastName limit 5 offset 2")?;
        assert_eq!(t.where_text, "LastName='a order by'");
        assert_eq!(
            t.order,
            vec![("ID".into(), true), ("LastName".into(), false)]
        );
        assert_eq!((t.limit, t.offset), (Some(5), Some(2)));
        assert_eq!(split_tail("where ID=1")?.where_text, "ID=1");
        assert!(split_tail("ID=1 limit x").is_err());
        assert!(split_tail("ID=1 group by ID").is_err());
        Ok(())
    }

    /// What a request names more than once costs nothing more: a repeated
    /// column is refused at the first repeat, a repeated sort key (or one
    /// after the ID) is dropped, and a tail too long to be a sort is refused
    /// before it is split into words.
    #[test]
    fn repeats_are_bounded() -> Result<(), SqlError> {
        let m = model();
        for sql in [
            "SELECT *,* FROM Sample",
            "SELECT LastName, ID, lastname FROM Sample",
        ] {
            let e = parse_select(&m, sql).expect_err(sql);
            assert!(format!("{e:?}").contains("listed twice"), "{sql}: {e:?}");
        }
        let s = parse_select(
            &m,
            "SELECT ID FROM Sample ORDER BY LastName, LastName DESC, ID, LastName",
        )?;
        assert_eq!(
            s.select.order,
            vec![(Column::Field(0), false), (Column::Id, false)]
        );
        let long = format!("SELECT ID FROM Sample ORDER BY ID{}", ",".repeat(1 << 20));
        let e = parse_select(&m, &long).expect_err("a long tail");
        assert!(format!("{e:?}").contains("at most"), "{e:?}");
        Ok(())
    }

    fn parse_select(m: &Model, sql: &str) -> Result<SqlSelect, SqlError> {
        super::parse_select(m, sql).and_then(Unresolved::resolve)
    }

    #[test]
    fn selects() -> Result<(), SqlError> {
        let m = model();
        let s = parse_select(&m, "SELECT Count(*) FROM Sample")?;
        assert_eq!(s.projection, Projection::Count("Count(*)".into()));
        let s = parse_select(
            &m,
            "select ID,LastName from Sample where LastName=:('Du'' (pont'): limit 1;",
        )?;
        assert_eq!(
            s.projection,
            Projection::Columns(vec![Column::Id, Column::Field(0)])
        );
        assert_eq!(
            s.select.filter.params,
            vec![Value::Text("Du' (pont".into())]
        );
        assert_eq!(s.select.limit, Some(1));
        for bad in [
            "SELECT * FROM Sample, Other",
            "SELECT * FROM Sample JOIN Other",
            "SELECT * FROM Nope",
            "SELECT Nope FROM Sample",
            "SELECT lower(LastName) FROM Sample",
            "SELECT * FROM Sample WHERE LastName='a'; DROP TABLE Sample",
            "SELECT * FROM Sample WHERE ID IN (SELECT ID FROM Sample)",
            "SELECT * FROM Sample UNION SELECT * FROM Sample",
            "EXPLAIN SELECT 1",
        ] {
            assert!(
                matches!(parse_select(&m, bad), Err(SqlError::Bad(_))),
                "{bad}"
            );
        }
        for w in [
            "DELETE FROM Sample",
            "drop table Sample",
            "PRAGMA writable_schema=1",
        ] {
            assert!(
                matches!(parse_select(&m, w), Err(SqlError::Write(_))),
                "{w}"
            );
        }
        Ok(())
    }
}
