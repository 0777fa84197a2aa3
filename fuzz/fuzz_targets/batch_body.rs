#![no_main]

use std::sync::Arc;

use burrow_core::Database;
use burrow_http::fuzzing;
use burrow_memory::MemoryEngine;

fn open() -> Arc<Database> {
    let engine = Arc::new(MemoryEngine::new());
    Arc::new(Database::open(fuzzing::model(), engine).expect("a memory database"))
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::batch_body(&open, data));
