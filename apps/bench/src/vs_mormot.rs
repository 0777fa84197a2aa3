//! The comparison with mORMot2 that `shared/mormot2/vs-mormot.py --json FILE`
//! writes: `{"rounds": K, "cells": [{"engine", "mode", "mormot", "burrow",
//! "ratio", "burrow_raw"}, ...]}`, medians of K alternating rounds of both
//! benchmarks on the same machine.

use std::path::Path;

use serde_json::Value;

use crate::targets::{EngineSpec, Mode, ALL_MODES};

/// A cell both benchmarks measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Versus {
    /// The engine's title as the bench prints it (its id when the bench has
    /// no such engine).
    pub engine: String,
    /// The mode.
    pub mode: Mode,
    /// mORMot2's median, objects/second.
    pub mormot: f64,
    /// Burrow's median, objects/second.
    pub burrow: f64,
}

/// The comparison file, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Alternating rounds each median is taken from.
    pub rounds: u64,
    /// The cells both measured, in the file's order.
    pub cells: Vec<Versus>,
}

/// Reads and checks the file; `engines` names its engine ids.
pub fn read(path: &Path, engines: &[EngineSpec]) -> Result<Comparison, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse(&text, |id| {
        engines.iter().find(|e| e.id == id).map(|e| e.title)
    })
    .map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses the file's text. Cells only mORMot2 has (no Burrow figure) are
/// left out; a figure that is not a positive number, an unknown mode, or a
/// stored ratio that is not Burrow ÷ mORMot2 fails, since the chart would
/// show something that was not measured.
pub fn parse(
    text: &str,
    title: impl Fn(&str) -> Option<&'static str>,
) -> Result<Comparison, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let rounds = doc["rounds"]
        .as_u64()
        .ok_or("no \"rounds\" count: is this the file vs-mormot.py --json writes?")?;
    let list = doc["cells"].as_array().ok_or("no \"cells\" list")?;
    let mut cells = Vec::new();
    for (i, c) in list.iter().enumerate() {
        let at = |what: &str| format!("cell {i}: {what}");
        let engine = c["engine"].as_str().ok_or_else(|| at("no engine"))?;
        let mode_id = c["mode"].as_str().ok_or_else(|| at("no mode"))?;
        let mode = ALL_MODES
            .iter()
            .copied()
            .find(|m| m.id() == mode_id)
            .ok_or_else(|| at(&format!("unknown mode {mode_id:?}")))?;
        let figure = |key: &str| match &c[key] {
            Value::Null => Ok(None),
            v => v
                .as_f64()
                .filter(|f| f.is_finite() && *f > 0.0)
                .map(Some)
                .ok_or_else(|| at(&format!("{key} is {v}, not a positive figure"))),
        };
        let mormot = figure("mormot")?.ok_or_else(|| at("no mORMot2 figure"))?;
        let Some(burrow) = figure("burrow")? else {
            continue;
        };
        if let Some(stored) = figure("ratio")? {
            let q = burrow / mormot;
            if (stored - q).abs() > 1e-9 * q {
                return Err(at(&format!("ratio {stored} is not burrow ÷ mormot ({q})")));
            }
        }
        cells.push(Versus {
            engine: title(engine).map_or_else(|| engine.to_owned(), str::to_owned),
            mode,
            mormot,
            burrow,
        });
    }
    Ok(Comparison { rounds, cells })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn titles(id: &str) -> Option<&'static str> {
        (id == "sqlite-mem").then_some("SQLite in memory")
    }

    #[test]
    fn reads_what_the_script_writes() {
        let text = r#"{"rounds": 3, "cells": [
            {"engine": "sqlite-mem", "mode": "batch", "mormot": 400000.0, "burrow": 500000.0,
             "ratio": 1.25, "burrow_raw": 600000.0},
            {"engine": "sqlite-file-off-exc-aes", "mode": "direct", "mormot": 1000.0,
             "burrow": null, "ratio": null},
            {"engine": "ext-sqlite-mem", "mode": "by-one", "mormot": 100.0, "burrow": 50.0,
             "ratio": 0.5, "burrow_raw": null}]}"#;
        let c = parse(text, titles).unwrap();
        assert_eq!(c.rounds, 3);
        assert_eq!(c.cells.len(), 2);
        assert_eq!(c.cells[0].engine, "SQLite in memory");
        assert_eq!(c.cells[0].mode, Mode::Batch);
        assert_eq!(c.cells[1].engine, "ext-sqlite-mem");
        assert_eq!(c.cells[1].burrow / c.cells[1].mormot, 0.5);
    }

    #[test]
    fn refuses_what_was_not_measured() {
        for bad in [
            r#"{"cells": []}"#,
            r#"{"rounds": 1, "cells": [{"engine": "x", "mode": "fast", "mormot": 1, "burrow": 1}]}"#,
            r#"{"rounds": 1, "cells": [{"engine": "x", "mode": "batch", "mormot": 0, "burrow": 1}]}"#,
            r#"{"rounds": 1, "cells": [{"engine": "x", "mode": "batch", "mormot": 2, "burrow": 1, "ratio": 3}]}"#,
            "not json",
        ] {
            assert!(parse(bad, titles).is_err(), "{bad}");
        }
    }
}
