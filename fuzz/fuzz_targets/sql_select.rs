#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| burrow_http::fuzzing::select_sql(data));
