//! What a run measured and verified. The text tables, the JSON file and the
//! HTML page are all built from this one value, so that they cannot disagree.

use crate::targets::{EngineSpec, Mode};

/// One verified figure: a cell of the tables.
#[derive(Debug, Clone)]
pub struct Cell {
    /// The engine configuration's id.
    pub engine: &'static str,
    /// The mode measured.
    pub mode: Mode,
    /// Whether this is the raw driver's figure rather than the ORM's.
    pub baseline: bool,
    /// Objects inserted or read.
    pub rows: usize,
    /// Objects per second, the best of the repeats.
    pub rows_per_sec: f64,
}

/// An engine configuration as the tables name it.
#[derive(Debug, Clone, Copy)]
pub struct Engine {
    /// The id `--engines` takes.
    pub id: &'static str,
    /// The name the tables print.
    pub title: &'static str,
    /// Whether a raw-driver baseline runs beside it.
    pub raw: bool,
}

impl Engine {
    /// The naming part of a configuration (the openers stay behind).
    pub fn of(spec: &EngineSpec) -> Self {
        Engine {
            id: spec.id,
            title: spec.title,
            raw: spec.raw.is_some(),
        }
    }
}

/// A run's figures, with what is needed to name and compare them.
#[derive(Debug, Clone)]
pub struct Results {
    /// Objects per cell asked for (a few cells use fewer; their `rows` says).
    pub rows: usize,
    /// Runs per cell, the best kept.
    pub repeat: usize,
    /// The engines run, in table order.
    pub engines: Vec<Engine>,
    /// Every verified cell.
    pub cells: Vec<Cell>,
}

/// A speed table: its title and the modes in its columns.
pub const SPEEDS: [(&str, [Mode; 4]); 2] = [
    ("Insertion speed (objects/second)", Mode::INSERTS),
    ("Read speed (objects/second)", Mode::READS),
];

/// A row of a ratio table: one engine's figures divided by another's.
#[derive(Debug, Clone)]
pub struct RatioRow {
    /// The row's name.
    pub title: String,
    /// The engine divided.
    pub num: &'static str,
    /// Whether the dividend is that engine's raw-driver figure (else its ORM's).
    pub num_raw: bool,
    /// The engine it is divided by.
    pub den: &'static str,
    /// Whether the divisor is that engine's raw-driver figure.
    pub den_raw: bool,
}

/// A ratio table: a title and its rows, none when the run has nothing to compare.
#[derive(Debug, Clone)]
pub struct Ratios {
    /// The table's title.
    pub title: &'static str,
    /// Its rows.
    pub rows: Vec<RatioRow>,
}

impl Results {
    /// The figure of one cell, when it was measured.
    pub fn get(&self, engine: &str, mode: Mode, baseline: bool) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.engine == engine && c.mode == mode && c.baseline == baseline)
    }

    /// A row's ratio in one mode, when both cells were measured on the same
    /// number of objects (a ratio of unlike runs would mislead).
    pub fn ratio(&self, row: &RatioRow, mode: Mode) -> Option<f64> {
        let a = self.get(row.num, mode, row.num_raw)?;
        let b = self.get(row.den, mode, row.den_raw)?;
        (b.rows_per_sec > 0.0 && a.rows == b.rows).then(|| a.rows_per_sec / b.rows_per_sec)
    }

    /// The ratio tables: ORM ÷ raw driver, the memory engine ÷ SQLite in
    /// memory, and an encrypted SQLite file ÷ the same file plain (each when
    /// both sides ran).
    pub fn ratio_tables(&self) -> [Ratios; 3] {
        let raw = self
            .engines
            .iter()
            .filter(|e| e.raw)
            .map(|e| RatioRow {
                title: e.title.into(),
                num: e.id,
                num_raw: false,
                den: e.id,
                den_raw: true,
            })
            .collect();
        let sqlite_mem = self.engines.iter().any(|e| e.id == "sqlite-mem");
        let mem = self
            .engines
            .iter()
            .filter(|e| sqlite_mem && e.id.starts_with("memory-"))
            .map(|e| RatioRow {
                title: e.title.into(),
                num: e.id,
                num_raw: false,
                den: "sqlite-mem",
                den_raw: false,
            })
            .collect();
        let ran = |id: &str| self.engines.iter().any(|e| e.id == id);
        let aes = self
            .engines
            .iter()
            .filter_map(|e| {
                let plain = e.id.strip_suffix("-aes")?;
                ran(plain).then(|| {
                    let plain = self.engines.iter().find(|p| p.id == plain)?;
                    Some((e, plain))
                })?
            })
            .flat_map(|(e, plain)| {
                let orm = RatioRow {
                    title: e.title.into(),
                    num: e.id,
                    num_raw: false,
                    den: plain.id,
                    den_raw: false,
                };
                // The raw driver's own cost of encryption, for comparison.
                let raw = RatioRow {
                    title: format!("{} (raw ÷ raw)", e.title),
                    num: e.id,
                    num_raw: true,
                    den: plain.id,
                    den_raw: true,
                };
                [Some(orm), (e.raw && plain.raw).then_some(raw)]
            })
            .flatten()
            .collect();
        [
            Ratios {
                title: "ORM ÷ raw driver (same run; 1.00 = no overhead)",
                rows: raw,
            },
            Ratios {
                title: "Memory engine ÷ SQLite in memory (both through the ORM, same run)",
                rows: mem,
            },
            Ratios {
                title: "Encrypted ÷ the same SQLite file plain (same run)",
                rows: aes,
            },
        ]
    }
}
