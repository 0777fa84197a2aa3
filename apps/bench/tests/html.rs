//! `--html` on a real, small run: the page is written, parses, and holds the
//! charts the run has figures for.

#[path = "common/page.rs"]
mod page;

use std::process::Command;

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_burrow-bench"))
}

#[test]
fn a_small_run_writes_a_well_formed_page() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("bench.html");
    let versus = dir.path().join("vs.json");
    std::fs::write(
        &versus,
        r#"{"rounds": 1, "cells": [
            {"engine": "sqlite-mem", "mode": "batch-trans", "mormot": 900000.0,
             "burrow": 800000.0, "ratio": 0.8888888888888888, "burrow_raw": null},
            {"engine": "memory-static", "mode": "by-one", "mormot": 900000.0,
             "burrow": 1800000.0, "ratio": 2.0, "burrow_raw": null}]}"#,
    )
    .unwrap();
    let out = bench()
        .args(["--rows", "40", "--persist-rows", "0"])
        .args(["--engines", "sqlite-mem,memory-static"])
        .arg("--html")
        .arg(&html)
        .arg("--vs-mormot")
        .arg(&versus)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = std::fs::read_to_string(&html).unwrap();
    // Inserts, reads, ORM ÷ raw, memory ÷ SQLite, Burrow ÷ mORMot2.
    assert_eq!(page::check_page(&page), Ok(5));
    assert!(page.contains("In memory static"));
    assert!(page.contains("Batch Trans"));
}

#[test]
fn the_mormot_file_needs_the_page_and_must_be_readable() {
    let dir = tempfile::tempdir().unwrap();
    let alone = bench()
        .args(["--rows", "10", "--vs-mormot", "vs.json"])
        .output()
        .unwrap();
    assert!(!alone.status.success());
    let missing = bench()
        .args(["--rows", "10", "--engines", "memory-static", "--html"])
        .arg(dir.path().join("p.html"))
        .arg("--vs-mormot")
        .arg(dir.path().join("none.json"))
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("none.json"));
    assert!(!dir.path().join("p.html").exists());
}
