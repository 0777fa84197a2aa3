#![no_main]

//! A WHERE clause that parses is rendered twice, as the SQL engines render it
//! (placeholders) and as a remote client sends it (inline parameters); each
//! parses back into the same filter.

use burrow_core::{Column, Filter, Value};
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
    match Filter::parse(&SAMPLE, &sql, &f.params) {
        Ok(again) => assert_eq!(again, f, "{text:?} renders as {sql:?}"),
        Err(e) => panic!("{text:?} renders as {sql:?}, refused: {e}"),
    }
    let inline = render_filter(&SAMPLE, &f).expect("every parameter renders inline");
    match Filter::parse(&SAMPLE, &inline, &[]) {
        Ok(again) => assert_eq!(again, f, "{text:?} renders as {inline:?}"),
        Err(e) => panic!("{text:?} renders as {inline:?}, refused: {e}"),
    }
});
