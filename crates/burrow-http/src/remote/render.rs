//! Filters, selects and SQL rendered into what travels in a URL or a
//! `GET /{root}` body: WHERE clauses with mORMot's inline parameters
//! (`:(…):`), rendered from the checked [`Filter`], so that the server
//! parses and binds them again, never splices them.

use burrow_core::filter::MAX_WHERE_DEPTH;
use burrow_core::{Column, Error, Filter, Result, Select, Table, Value};

use super::RemoteEngine;

/// A value as mORMot's inline parameter `:(…):`.
fn inline_param(v: &Value, out: &mut String) -> Result<()> {
    let quoted = |s: &str, out: &mut String| {
        out.push_str(":('");
        out.push_str(&s.replace('\'', "''"));
        out.push_str("'):");
    };
    match v {
        Value::Int(i) => out.push_str(&format!(":({i}):")),
        Value::Real(f) if f.is_finite() => out.push_str(&format!(":({f:?}):")),
        Value::Bool(b) => out.push_str(if *b { ":(1):" } else { ":(0):" }),
        Value::Currency(c) => quoted(&c.to_string(), out),
        Value::Date(d) => quoted(&burrow_core::datetime::format_date(*d), out),
        Value::DateTime(t) => quoted(&burrow_core::datetime::format_datetime(*t), out),
        Value::Text(s) => quoted(s, out),
        // Burrow's WHERE reads SQL's blob literal (mORMot has none).
        Value::Blob(b) => {
            out.push_str("x'");
            for byte in b {
                out.push_str(&format!("{byte:02x}"));
            }
            out.push('\'');
        }
        other => {
            return Err(Error::Unsupported(format!(
                "a {} parameter cannot travel in a remote WHERE clause",
                other.type_name()
            )))
        }
    }
    Ok(())
}

/// The WHERE text of a filter with its parameters inline.
pub(crate) fn render_filter(table: &Table, filter: &Filter) -> Result<String> {
    // The server parses the text again and refuses it past this depth:
    // refused here, with the same words, nothing is sent.
    let depth = filter.written_depth();
    if depth > MAX_WHERE_DEPTH {
        return Err(Error::InvalidWhere(format!(
            "parentheses and NOTs nest deeper than {MAX_WHERE_DEPTH} levels \
             (written for the server, this filter nests {depth})"
        )));
    }
    let mut sql = String::new();
    filter.write_sql(&mut sql, &mut |c: Column, o: &mut String| {
        o.push_str(table.column_name(c))
    });
    let mut out = String::with_capacity(sql.len() + 16 * filter.params.len());
    let mut params = filter.params.iter();
    for (i, part) in sql.split('?').enumerate() {
        if i > 0 {
            let p = params
                .next()
                .ok_or_else(|| Error::BadInput("more placeholders than parameters".into()))?;
            inline_param(p, &mut out)?;
        }
        out.push_str(part);
    }
    Ok(out)
}

/// WHERE, ORDER BY, LIMIT and OFFSET of a select, as the `where=` parameter.
pub(crate) fn render_tail(table: &Table, select: &Select) -> Result<String> {
    let mut s = render_filter(table, &select.filter)?;
    for (i, (c, desc)) in select.order.iter().enumerate() {
        s.push_str(if i == 0 { " ORDER BY " } else { ", " });
        s.push_str(table.column_name(*c));
        if *desc {
            s.push_str(" DESC");
        }
    }
    if let Some(l) = select.limit {
        s.push_str(&format!(" LIMIT {l}"));
    }
    if select.offset > 0 {
        s.push_str(&format!(" OFFSET {}", select.offset));
    }
    Ok(s.trim().to_owned())
}

/// Replaces each `?` outside quotes with an inline parameter.
pub(super) fn inline_sql(sql: &str, params: &[Value]) -> Result<String> {
    let mut out = String::with_capacity(sql.len() + 16 * params.len());
    let mut it = params.iter();
    let mut quoted = false;
    for ch in sql.chars() {
        match ch {
            '\'' => {
                quoted = !quoted;
                out.push(ch);
            }
            '?' if !quoted => inline_param(
                it.next()
                    .ok_or_else(|| Error::BadInput("more placeholders than parameters".into()))?,
                &mut out,
            )?,
            _ => out.push(ch),
        }
    }
    if it.next().is_some() {
        return Err(Error::BadInput("more parameters than placeholders".into()));
    }
    Ok(out)
}

impl RemoteEngine {
    pub(super) fn table_path(table: &Table, id: Option<i64>) -> String {
        match id {
            Some(id) => format!("{}/{id}", table.name),
            None => table.name.to_owned(),
        }
    }
}
