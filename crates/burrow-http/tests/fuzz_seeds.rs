//! The HTTP fuzz target's checks over its named seeds, inputs it once found
//! failing among them: a regression shows in `cargo test`, not only in a
//! fuzzing run.

#![allow(missing_docs)]

use std::path::Path;

#[test]
fn http_request_seeds_pass_the_targets_checks() -> std::io::Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/http_request");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir)? {
        let data = std::fs::read(entry?.path())?;
        burrow_http::fuzzing::request_stream(&data);
        seen += 1;
    }
    assert!(seen >= 5, "the seeds are missing: {seen}");
    Ok(())
}
