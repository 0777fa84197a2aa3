#![no_main]

//! A WHERE clause that parses is rendered twice, as the SQL engines render it
//! (placeholders) and as a remote client sends it (inline parameters); each
//! parses back into the same filter.
//!
//! Known exception, not fixed: the rendered text nests deeper than the text
//! parsed (each NOT adds `NOT (`, each AND/OR group its parentheses), so a
//! filter nested more than half of `MAX_WHERE_DEPTH` deep can render into
//! text the depth limit refuses (the remote client then refuses it before
//! sending). Only that refusal is let through, and only for such filters.

use burrow_core::filter::MAX_WHERE_DEPTH;
use burrow_core::{Column, Expr, Filter, Value};

/// Levels of NOT, AND and OR.
fn depth(e: &Expr) -> usize {
    match e {
        Expr::Not(x) => 1 + depth(x),
        Expr::And(v) | Expr::Or(v) => 1 + v.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}
use burrow_http::fuzzing::{render_filter, SAMPLE};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&n, text)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let given = [
        Value::Int(7),
        Value::Text("a'b".into()),
        Value::Real(2.5),
        Value::Text("2024-01-02".into()),
    ];
    let params = &given[..usize::from(n) % (given.len() + 1)];
    let Ok(f) = Filter::parse(&SAMPLE, text, params) else {
        return;
    };
    let mut sql = String::new();
    f.write_sql(&mut sql, &mut |c: Column, o: &mut String| {
        o.push('"');
        o.push_str(SAMPLE.column_name(c));
        o.push('"');
    });
    let deep = f.expr.as_ref().map_or(0, depth) * 2 >= MAX_WHERE_DEPTH;
    let known = |e: &burrow_core::Error| deep && e.to_string().contains("nest deeper");
    match Filter::parse(&SAMPLE, &sql, &f.params) {
        Ok(again) => assert_eq!(again, f, "{text:?} renders as {sql:?}"),
        Err(e) if known(&e) => {}
        Err(e) => panic!("{text:?} renders as {sql:?}, refused: {e}"),
    }
    // The remote client refuses, before sending, a filter whose rendering the
    // server's depth limit would refuse: the same known exception.
    let inline = match render_filter(&SAMPLE, &f) {
        Ok(inline) => inline,
        Err(e) if known(&e) => return,
        Err(e) => panic!("{text:?} does not render inline: {e}"),
    };
    match Filter::parse(&SAMPLE, &inline, &[]) {
        Ok(again) => assert_eq!(again, f, "{text:?} renders as {inline:?}"),
        Err(e) if known(&e) => {}
        Err(e) => panic!("{text:?} renders as {inline:?}, refused: {e}"),
    }
});
