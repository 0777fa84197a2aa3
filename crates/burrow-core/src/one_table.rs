//! One-table SQL read without an SQL engine: `SELECT * FROM T [WHERE …]
//! [ORDER BY …] [LIMIT n [OFFSET m]]`, turned into a [`Select`] on `T`.
//!
//! The WHERE goes to [`crate::Filter::parse`], the very parser of every other
//! read, so the statement is answered by a table's own engine with the
//! meaning it gives every filter. [`crate::Orm::sql_list`] sends such a
//! statement straight to the engine holding the table when the SQL host is
//! another engine (as mORMot2 routes a one-table statement to its static or
//! external table instead of SQLite's virtual table), and the memory engine
//! answers its SQL with it. Joins, aggregates, column lists and writes are
//! refused with [`Error::Unsupported`], naming what is answered.

use crate::error::{Error, Result};
use crate::query::Select;
use crate::schema::Table;
use crate::value::Value;

/// What is answered, for the error that refuses the rest.
pub const SUBSET: &str = "one-table SQL: SELECT * FROM table [WHERE …] \
                          [ORDER BY column [ASC|DESC], …] [LIMIT n [OFFSET m]]";

fn unsupported(what: &str) -> Error {
    Error::Unsupported(format!("{what}: {SUBSET}"))
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Tok<'s> {
    /// A keyword, a name or a number.
    Word(&'s str),
    /// A `"quoted"`, `[bracketed]` or `` `ticked` `` name, without its quotes.
    Name(&'s str),
    /// A `'string'` (its quotes kept: only the WHERE holds one, as text).
    Text,
    Sym(char),
}

/// The tokens of `sql` and where each starts: enough to find the clauses,
/// never to evaluate anything (the WHERE's own text goes to [`Filter::parse`]).
fn tokens(sql: &str) -> Result<Vec<(Tok<'_>, usize)>> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c >= 0x80 {
            while i < b.len()
                && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.' || b[i] >= 0x80)
            {
                i += 1;
            }
            out.push((Tok::Word(&sql[start..i]), start));
            continue;
        }
        let close = match c {
            b'\'' => Some(b'\''),
            b'"' => Some(b'"'),
            b'`' => Some(b'`'),
            b'[' => Some(b']'),
            _ => None,
        };
        if let Some(close) = close {
            i += 1;
            loop {
                match b.get(i) {
                    None => return Err(Error::BadInput(format!("unclosed quote in {sql:?}"))),
                    // A doubled quote is one quote inside the string.
                    Some(&q) if q == close && b.get(i + 1) == Some(&close) && close != b']' => {
                        i += 2
                    }
                    Some(&q) if q == close => break,
                    Some(_) => i += 1,
                }
            }
            i += 1;
            let tok = if c == b'\'' {
                Tok::Text
            } else {
                Tok::Name(&sql[start + 1..i - 1])
            };
            out.push((tok, start));
            continue;
        }
        // One character: `sql` is a `str`, so a non-ASCII one was taken above.
        out.push((Tok::Sym(c as char), start));
        i += 1;
    }
    Ok(out)
}

fn is_kw(t: Option<&(Tok<'_>, usize)>, kw: &str) -> bool {
    matches!(t, Some((Tok::Word(w), _)) if w.eq_ignore_ascii_case(kw))
}

/// A LIMIT or OFFSET: a number or a `?`.
enum Count {
    Lit(u64),
    Param,
}

/// A statement of the subset, its parts located in the text.
struct OneTable<'s> {
    table: &'s str,
    where_text: &'s str,
    where_params: usize,
    order: Vec<(String, bool)>,
    limit: Option<Count>,
    offset: Option<Count>,
}

fn parse(sql: &str) -> Result<OneTable<'_>> {
    let toks = tokens(sql)?;
    let mut at = 0;
    let next = |at: &mut usize| {
        let t = toks.get(*at).copied();
        *at += 1;
        t
    };
    if !is_kw(toks.first(), "select") {
        return Err(unsupported("not a SELECT"));
    }
    at += 1;
    if next(&mut at).map(|t| t.0) != Some(Tok::Sym('*')) {
        return Err(unsupported("a column list"));
    }
    if !is_kw(toks.get(at), "from") {
        return Err(unsupported("no FROM after SELECT *"));
    }
    at += 1;
    let table = match next(&mut at).map(|t| t.0) {
        Some(Tok::Word(w) | Tok::Name(w)) => w,
        _ => return Err(unsupported("no table after FROM")),
    };
    let mut st = OneTable {
        table,
        where_text: "",
        where_params: 0,
        order: Vec::new(),
        limit: None,
        offset: None,
    };
    if is_kw(toks.get(at), "where") {
        at += 1;
        let from = toks.get(at).map_or(sql.len(), |t| t.1);
        let mut depth = 0usize;
        while let Some(&(t, _)) = toks.get(at) {
            match t {
                Tok::Sym('(') => depth += 1,
                Tok::Sym(')') => depth = depth.saturating_sub(1),
                Tok::Sym('?') => st.where_params += 1,
                Tok::Sym(';') if depth == 0 => break,
                Tok::Word(w)
                    if depth == 0
                        && (w.eq_ignore_ascii_case("order") || w.eq_ignore_ascii_case("limit")) =>
                {
                    break
                }
                _ => {}
            }
            at += 1;
        }
        let to = toks.get(at).map_or(sql.len(), |t| t.1);
        st.where_text = sql[from..to].trim();
        if st.where_text.is_empty() {
            // Not "every row": SQL refuses a WHERE without a condition.
            return Err(unsupported("a WHERE without a condition"));
        }
    }
    if is_kw(toks.get(at), "order") {
        at += 1;
        if !is_kw(toks.get(at), "by") {
            return Err(unsupported("ORDER without BY"));
        }
        at += 1;
        loop {
            let name = match next(&mut at).map(|t| t.0) {
                Some(Tok::Word(w) | Tok::Name(w)) => w.to_owned(),
                _ => return Err(unsupported("an ORDER BY that is not a list of columns")),
            };
            let desc = if is_kw(toks.get(at), "desc") {
                at += 1;
                true
            } else {
                if is_kw(toks.get(at), "asc") {
                    at += 1;
                }
                false
            };
            st.order.push((name, desc));
            if toks.get(at).map(|t| t.0) != Some(Tok::Sym(',')) {
                break;
            }
            at += 1;
        }
    }
    let count = |at: &mut usize| match next(at).map(|t| t.0) {
        Some(Tok::Sym('?')) => Ok(Count::Param),
        Some(Tok::Word(w)) => w
            .parse()
            .map(Count::Lit)
            .map_err(|_| Error::BadInput(format!("LIMIT or OFFSET {w:?}: not a count"))),
        _ => Err(unsupported("a LIMIT or OFFSET that is not a number or ?")),
    };
    if is_kw(toks.get(at), "limit") {
        at += 1;
        st.limit = Some(count(&mut at)?);
        if is_kw(toks.get(at), "offset") {
            at += 1;
            st.offset = Some(count(&mut at)?);
        }
    }
    if toks.get(at).map(|t| t.0) == Some(Tok::Sym(';')) {
        at += 1;
    }
    match toks.get(at) {
        None => Ok(st),
        Some(&(_, pos)) => Err(unsupported(&format!(
            "{:?} after the statement's end",
            &sql[pos..]
        ))),
    }
}

/// The value of a LIMIT or OFFSET, taking the next parameter for a `?`.
fn count_value(c: &Count, params: &mut std::slice::Iter<'_, Value>) -> Result<u64> {
    match c {
        Count::Lit(n) => Ok(*n),
        Count::Param => match params.next() {
            Some(Value::Int(n)) => u64::try_from(*n)
                .map_err(|_| Error::BadInput(format!("LIMIT or OFFSET {n}: below zero"))),
            Some(v) => Err(Error::BadInput(format!(
                "LIMIT or OFFSET bound to {}: expected an integer",
                v.type_name()
            ))),
            None => Err(Error::BadInput(
                "more placeholders than parameters".to_owned(),
            )),
        },
    }
}

/// A statement of the subset on `table`, as a [`Select`] of it, with
/// `params` bound to its `?` in order (the WHERE's, then LIMIT's and
/// OFFSET's). A statement on another table is refused: its rows would be
/// `table`'s only by a coincidence of field names.
pub fn select(table: &'static Table, sql: &str, params: &[Value]) -> Result<Select> {
    let st = parse(sql)?;
    if !st.table.eq_ignore_ascii_case(table.name) {
        return Err(Error::BadInput(format!(
            "rows of {} asked from table {}: one-table SQL reads a table as its own record",
            table.name, st.table
        )));
    }
    let given = st.where_params
        + [&st.limit, &st.offset]
            .iter()
            .filter(|c| matches!(c, Some(Count::Param)))
            .count();
    if given != params.len() {
        return Err(Error::BadInput(format!(
            "{given} placeholder(s) but {} parameter(s)",
            params.len()
        )));
    }
    let (for_where, rest) = params.split_at(st.where_params);
    let mut rest = rest.iter();
    let limit = st
        .limit
        .as_ref()
        .map(|c| count_value(c, &mut rest))
        .transpose()?;
    let offset = st
        .offset
        .as_ref()
        .map_or(Ok(0), |c| count_value(c, &mut rest))?;
    Select::checked(table, st.where_text, for_where, &st.order, limit, offset)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn finds_the_clauses_outside_quotes() -> Result<()> {
        let st = parse(
            "select * from \"Sample\" where Name = 'order limit' and (A < ? or B > ?) \
             order by Name desc, ID limit 10 offset ?;",
        )?;
        assert_eq!(st.table, "Sample");
        assert_eq!(st.where_text, "Name = 'order limit' and (A < ? or B > ?)");
        assert_eq!(st.where_params, 2);
        assert_eq!(
            st.order,
            vec![("Name".to_owned(), true), ("ID".to_owned(), false)]
        );
        assert!(matches!(st.limit, Some(Count::Lit(10))));
        assert!(matches!(st.offset, Some(Count::Param)));
        let all = parse("SELECT * FROM Sample")?;
        assert_eq!(all.where_text, "");
        assert!(all.order.is_empty() && all.limit.is_none());
        Ok(())
    }

    #[test]
    fn refuses_what_it_does_not_answer() {
        for sql in [
            "SELECT ID FROM Sample",
            "SELECT count(*) FROM Sample",
            "SELECT * FROM Sample, Other",
            "SELECT * FROM Sample JOIN Other ON 1",
            "DELETE FROM Sample",
            "SELECT * FROM Sample LIMIT 1 UNION SELECT * FROM Sample",
            "SELECT * FROM Sample WHERE",
            "SELECT * FROM Sample WHERE LIMIT 5",
            "SELECT * FROM Sample WHERE ORDER BY ID",
        ] {
            match parse(sql) {
                Err(Error::Unsupported(m)) => assert!(m.contains("one-table SQL"), "{sql}: {m}"),
                Err(e) => panic!("{sql}: {e}"),
                Ok(_) => panic!("{sql}: accepted"),
            }
        }
        assert!(matches!(
            parse("SELECT * FROM Sample WHERE Name = 'x"),
            Err(Error::BadInput(_))
        ));
    }
}
