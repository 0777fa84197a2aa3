#![no_main]

//! A record body that reads is written back (the exact dialect, the fields
//! it named) and reads into the same row; list bodies are read too.

use burrow_core::json::{self, JsonDialect};
use burrow_core::Column;
use burrow_http::fuzzing::SAMPLE;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = json::parse_list(&SAMPLE, data);
    let Ok((row, present)) = json::read_row(&SAMPLE, data) else {
        return;
    };
    // ID 0 is a body without an ID (an explicit one must be positive).
    let mut cols = if row.id != 0 {
        vec![Column::Id]
    } else {
        Vec::new()
    };
    cols.extend(present.iter().map(|&i| Column::Field(i)));
    let mut out = Vec::new();
    json::write_row(&mut out, &SAMPLE, &row, &cols, JsonDialect::Exact)
        .expect("a row it read is written");
    let shown = String::from_utf8_lossy(&out);
    match json::read_row(&SAMPLE, &out) {
        Ok((back, again)) => {
            assert_eq!(back, row, "written as {shown}");
            assert_eq!(again, present, "written as {shown}");
        }
        Err(e) => panic!("written as {shown}, refused: {e}"),
    }
});
