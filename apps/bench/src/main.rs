//! Burrow's engine benchmark.
//!
//! Inserts and reads N sample records through the whole ORM path, for every engine
//! configuration and mode, beside a raw-driver baseline measured in the same run,
//! and prints the classic "Insertion speed" and "Read speed" tables with the
//! ORM ÷ raw ratio. Every cell starts from a fresh database and is verified (row
//! count, the exact sum of Amount, the content of sampled or all rows) before its
//! figure is kept: a fast wrong answer fails the run.

mod concurrency;
mod external;
mod html;
mod memory;
mod remote;
mod results;
mod sample;
mod targets;
mod vs_mormot;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use burrow::chrono::Utc;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

use crate::results::{Cell, Engine, Results, SPEEDS};
use crate::sample::{make_all, verify_read, verify_table};
use crate::targets::{sqlite_engines, EngineSpec, Mode, ALL_MODES};

/// Insert and read speed of Burrow's engines, beside the raw driver.
#[derive(Parser, Debug)]
#[command(name = "burrow-bench", version)]
struct Args {
    /// Engine configurations to run, comma-separated, or `all` (default: the
    /// embedded ones, which need no server: SQLite, memory, external SQLite;
    /// the list is below).
    #[arg(long, value_delimiter = ',')]
    engines: Vec<String>,
    /// Modes to run, comma-separated (default: all; the list is below).
    #[arg(long, value_delimiter = ',')]
    modes: Vec<String>,
    /// Objects per cell.
    #[arg(long, default_value_t = 10_000)]
    rows: usize,
    /// Runs per cell; the best is kept.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Objects for Direct inserts into a file with synchronous FULL, which waits
    /// for the disk at every row (capped at --rows).
    #[arg(long, default_value_t = 500)]
    full_direct_rows: usize,
    /// Rows saved and loaded to time the memory engine's binary file (run
    /// when a memory engine is selected; 0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    persist_rows: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also write the results as a self-contained HTML page of bar charts to
    /// this file: objects/second per engine and mode, ORM ÷ raw, memory engine
    /// ÷ SQLite (inline SVG; opens offline in any browser).
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Add to the --html page a Burrow ÷ mORMot2 chart from this file, the
    /// JSON that `vs-mormot.py --json FILE` writes.
    #[arg(long, value_name = "FILE", requires = "html")]
    vs_mormot: Option<PathBuf>,
}

fn main() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let modes: Vec<&str> = ALL_MODES.iter().map(|m| m.id()).collect();
    let help = format!(
        "Engines: {} (remote-http, postgres and mariadb need a server: `all` adds them; \
         postgres and mariadb read BURROW_POSTGRES_URL and BURROW_MARIADB_URL).\nModes: {}.",
        engine_ids(),
        modes.join(", ")
    );
    let matches = Args::command().after_help(help).get_matches();
    let args = match Args::from_arg_matches(&matches) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("burrow-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Every engine configuration the benchmark knows, in table order.
fn all_engines() -> Vec<EngineSpec> {
    let mut all = sqlite_engines();
    all.extend(memory::memory_engines());
    all.extend(remote::remote_engines());
    all.extend(external::external_engines());
    all
}

/// Rows that talk to a server (a database or Burrow's own HTTP server on
/// loopback): run on request, with `--engines` naming them or `all`.
const NEEDS_SERVER: [&str; 3] = ["remote-http", "postgres", "mariadb"];

fn pick_engines(names: &[String]) -> Result<Vec<EngineSpec>, String> {
    let mut all = all_engines();
    if names.is_empty() {
        all.retain(|e| !NEEDS_SERVER.contains(&e.id));
        return Ok(all);
    }
    let every = names.len() == 1 && names[0].trim() == "all";
    let missing_url = |id: &str| {
        external::SERVER_URLS
            .iter()
            .find(|(row, var, _)| *row == id && std::env::var(var).map_or(true, |u| u.is_empty()))
    };
    if every {
        for (row, var, example) in external::SERVER_URLS {
            if missing_url(row).is_some() {
                eprintln!("burrow-bench: {var} is not set, so the {row} rows are left out (e.g. {var}={example})");
            }
        }
        return Ok(all);
    }
    for n in names {
        let n = n.trim();
        if let Some((_, var, example)) = missing_url(n) {
            return Err(format!(
                "engine {n:?} needs its database: set {var} (e.g. {var}={example})"
            ));
        }
        if !all.iter().any(|e| e.id == n) {
            return Err(format!("unknown engine {n:?}; available: {}", engine_ids()));
        }
    }
    all.retain(|e| names.iter().any(|n| n.trim() == e.id));
    Ok(all)
}

/// Every engine id, those needing a database server included.
fn engine_ids() -> String {
    let mut ids: Vec<&str> = all_engines().iter().map(|e| e.id).collect();
    for (row, _, _) in external::SERVER_URLS {
        if !ids.contains(&row) {
            ids.push(row);
        }
    }
    ids.join(", ")
}

fn pick_modes(names: &[String]) -> Result<Vec<Mode>, String> {
    let all = ALL_MODES.to_vec();
    if names.is_empty() {
        return Ok(all);
    }
    names
        .iter()
        .map(|n| {
            all.iter()
                .find(|m| m.id() == n.trim())
                .copied()
                .ok_or_else(|| {
                    let ids: Vec<_> = all.iter().map(|m| m.id()).collect();
                    format!("unknown mode {n:?}; available: {}", ids.join(", "))
                })
        })
        .collect()
}

fn run(args: &Args) -> Result<(), String> {
    if args.rows == 0 || args.repeat == 0 {
        return Err("--rows and --repeat must be at least 1".into());
    }
    let engines = pick_engines(&args.engines)?;
    let modes = pick_modes(&args.modes)?;
    // Read before the long run, so that a bad file fails at once.
    let versus = match &args.vs_mormot {
        Some(path) => Some(vs_mormot::read(path, &all_engines())?),
        None => None,
    };
    let dir = tempfile::tempdir().map_err(|e| format!("cannot create a temporary folder: {e}"))?;
    let cells: usize = engines
        .iter()
        .map(|e| {
            let sides = if e.raw.is_some() { 2 } else { 1 };
            modes.iter().filter(|m| e.modes.contains(m)).count() * sides
        })
        .sum();
    let bar = ProgressBar::new((cells * args.repeat) as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}").map_err(|e| e.to_string())?,
    );
    let mut cells = Vec::new();
    let mut serial = 0;
    for cfg in &engines {
        for mode in modes.iter().filter(|m| cfg.modes.contains(m)) {
            let n = if cfg.slow_direct && *mode == Mode::Direct {
                args.full_direct_rows.clamp(1, args.rows)
            } else {
                args.rows
            };
            // ORM and raw runs alternate, so that drift in the machine's speed
            // during the run affects both sides of a ratio alike.
            let mut best = [0f64; 2];
            let sides: &[bool] = if cfg.raw.is_some() {
                &[false, true]
            } else {
                &[false]
            };
            // A cell where every row waits for the disk first runs once
            // untimed (verified all the same): whichever side ran first there
            // read about 0.7 of the other in `vs-mormot.py` runs, the ORM
            // first or the raw driver first alike, with the same one sync a
            // row on both sides.
            let warm_up = (cfg.slow_direct && *mode == Mode::Direct)
                .then(|| sides.last().copied().unwrap_or(false));
            let runs = warm_up
                .into_iter()
                .map(|side| (side, false))
                .chain((0..args.repeat).flat_map(|_| sides.iter().map(|&side| (side, true))));
            for (baseline, timed) in runs {
                let label = format!(
                    "{} {}{}",
                    cfg.id,
                    mode.id(),
                    if baseline { " (raw)" } else { "" }
                );
                bar.set_message(label.clone());
                serial += 1;
                let path = cfg
                    .file
                    .then(|| dir.path().join(format!("bench-{serial}.db")));
                let rate = run_cell(cfg, *mode, baseline, n, path.as_deref())
                    .map_err(|e| format!("{label}: {e}"))?;
                if let Some(p) = path {
                    for suffix in ["", "-journal", "-wal", "-shm"] {
                        let _ = std::fs::remove_file(format!("{}{suffix}", p.display()));
                    }
                }
                if !timed {
                    continue;
                }
                let slot = &mut best[usize::from(baseline)];
                *slot = slot.max(rate);
                bar.inc(1);
            }
            for &baseline in sides {
                cells.push(Cell {
                    engine: cfg.id,
                    mode: *mode,
                    baseline,
                    rows: n,
                    rows_per_sec: best[usize::from(baseline)],
                });
            }
        }
    }
    let persist = if args.persist_rows > 0 && engines.iter().any(|e| e.id.starts_with("memory-")) {
        bar.set_message(format!(
            "memory engine: saving and loading {} rows",
            args.persist_rows
        ));
        Some(
            memory::persistence(dir.path(), args.persist_rows)
                .map_err(|e| format!("persistence: {e}"))?,
        )
    } else {
        None
    };
    let mut threads = Vec::new();
    if modes.contains(&Mode::ByOne) {
        for (id, title) in concurrency::ENGINES {
            if engines.iter().any(|e| e.id == id) {
                bar.set_message(format!("{id}: by-one reads from several threads"));
                let (rates, raw) = concurrency::by_one(id, args.rows, args.repeat)
                    .map_err(|e| format!("{id} concurrent by-one: {e}"))?;
                threads.push((title.to_owned(), rates));
                if let Some(raw) = raw {
                    threads.push((format!("{title} (raw: a connection per thread)"), raw));
                }
            }
        }
    }
    bar.finish_and_clear();
    let results = Results {
        rows: args.rows,
        repeat: args.repeat,
        engines: engines.iter().map(Engine::of).collect(),
        cells,
    };
    let cells = &results.cells;
    let text = report(&results);
    print!("{text}");
    if !threads.is_empty() {
        print!("{}", threads_report(&threads));
    }
    if let Some((save, load, size)) = persist {
        println!(
            "## Memory engine persistence\n\n{} rows in the binary file form (zstd): saved in {save:.3} s, loaded in {load:.3} s, file {:.1} MB ({} bytes); loaded rows verified.",
            fmt_rate(args.persist_rows as f64),
            size as f64 / 1e6,
            size
        );
    }
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "rows": args.rows,
            "persistence": persist.map(|(save, load, size)| serde_json::json!({
                "rows": args.persist_rows, "save_secs": save, "load_secs": load, "file_bytes": size,
            })),
            "results": cells.iter().map(|c| serde_json::json!({
                "engine": c.engine,
                "mode": c.mode.id(),
                "rows_per_sec": c.rows_per_sec,
                "baseline": c.baseline,
                "rows": c.rows,
            })).collect::<Vec<_>>(),
        });
        std::fs::write(path, format!("{json:#}\n"))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if let Some(path) = &args.html {
        let page = html::page(&results, &headline(&results), &text, versus.as_ref())?;
        std::fs::write(path, page).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// One timed, verified run on a fresh database; returns objects per second.
fn run_cell(
    cfg: &EngineSpec,
    mode: Mode,
    baseline: bool,
    n: usize,
    path: Option<&std::path::Path>,
) -> Result<f64, String> {
    let open = match (&cfg.raw, baseline) {
        (Some(raw), true) => raw,
        _ => &cfg.orm,
    };
    let mut target = open(path)?;
    let since = Utc::now();
    if Mode::INSERTS.contains(&mode) {
        let mut rows = make_all(n);
        let start = Instant::now();
        let ids = target.insert(mode, &mut rows)?;
        // Freeing the input is timed on both sides: a batch takes its records
        // and frees them when sent, which the raw driver, borrowing them,
        // would otherwise leave outside its time.
        drop(rows);
        let secs = start.elapsed().as_secs_f64();
        if ids.len() != n || ids.iter().enumerate().any(|(i, &id)| id != i as i64 + 1) {
            return Err(format!("returned {} IDs, not 1..={n} in order", ids.len()));
        }
        verify_table(target.as_ref(), n, since)?;
        Ok(n as f64 / secs)
    } else {
        // Fill untimed with the fastest insert, then time the read.
        target.insert(Mode::BatchTrans, &mut make_all(n))?;
        verify_table(target.as_ref(), n, since)?;
        target.prepare_read(mode, n)?;
        // One untimed read first, as mORMot2's benchmark reads a table it
        // has already read (By one, then All Virtual, then All Direct in one
        // session): the timed read then meets caches and an allocator in the
        // state a serving process keeps them, not first-touch page faults,
        // which otherwise fall on whichever side of a cell runs first.
        verify_read(&target.read(mode, n)?, n, since)?;
        let start = Instant::now();
        let rows = target.read(mode, n)?;
        let secs = start.elapsed().as_secs_f64();
        verify_read(&rows, n, since)?;
        Ok(n as f64 / secs)
    }
}

/// The concurrent-read table: one row per engine, objects per second for each
/// thread count, and the gains of two threads and of the most over one.
fn threads_report(rows: &[(String, Vec<f64>)]) -> String {
    let t = &concurrency::THREADS;
    let two = t.iter().position(|&n| n == 2).unwrap_or(0);
    let mut out = String::from(
        "## Concurrent reads: By one from threads sharing one engine (objects/second, all threads)\n\n| engine |",
    );
    for n in t {
        let _ = write!(out, " {n} thread{} |", if *n == 1 { "" } else { "s" });
    }
    let _ = writeln!(out, " 2 ÷ 1 | {} ÷ 1 |", t[t.len() - 1]);
    out.push_str("|---|");
    out.push_str(&"---:|".repeat(t.len() + 2));
    out.push('\n');
    for (title, rates) in rows {
        let _ = write!(out, "| {title} |");
        for r in rates {
            let _ = write!(out, " {} |", fmt_rate(*r));
        }
        let _ = writeln!(
            out,
            " {:.2} | {:.2} |",
            rates[two] / rates[0],
            rates[rates.len() - 1] / rates[0]
        );
    }
    out.push('\n');
    out
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{cpu}, {cores} cores, {}", std::env::consts::OS)
}

fn fmt_rate(v: f64) -> String {
    let v = v.round() as u64;
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What the run was: versions, machine, rows, repeats and build.
fn headline(results: &Results) -> String {
    format!(
        "Burrow {} · {} {} · {} · {} rows per cell · best of {} · {} build",
        env!("CARGO_PKG_VERSION"),
        // With the encryption feature every SQLite of the binary is
        // SQLCipher's, the plain rows included: the figures say so.
        if cfg!(feature = "encryption") {
            "SQLCipher (encryption feature; plain rows unencrypted)"
        } else {
            "SQLite"
        },
        burrow::sqlite::SqliteEngine::sqlite_version(),
        machine(),
        results.rows,
        results.repeat,
        if cfg!(debug_assertions) {
            "DEBUG (figures not meaningful)"
        } else {
            "release"
        },
    )
}

fn report(results: &Results) -> String {
    let cells = &results.cells;
    let mut out = String::new();
    let _ = writeln!(out, "{}\n", headline(results));
    let mut notes = Vec::new();
    for (title, modes) in SPEEDS {
        if !cells.iter().any(|c| modes.contains(&c.mode)) {
            continue;
        }
        let _ = writeln!(out, "## {title}\n");
        let heads: Vec<_> = modes.iter().map(|m| m.title()).collect();
        let _ = writeln!(out, "| engine | {} |", heads.join(" | "));
        let _ = writeln!(out, "|---|{}", "---:|".repeat(modes.len()));
        for e in &results.engines {
            let sides: &[bool] = if e.raw { &[false, true] } else { &[false] };
            for &baseline in sides {
                let vals: Vec<String> = modes
                    .iter()
                    .map(|m| match results.get(e.id, *m, baseline) {
                        Some(c) if c.rows != results.rows => {
                            let note = format!("{} rows", c.rows);
                            if !notes.contains(&note) {
                                notes.push(note);
                            }
                            format!("{} (*)", fmt_rate(c.rows_per_sec))
                        }
                        Some(c) => fmt_rate(c.rows_per_sec),
                        None => "-".into(),
                    })
                    .collect();
                let _ = writeln!(
                    out,
                    "| {}{} | {} |",
                    e.title,
                    if baseline { " (raw)" } else { "" },
                    vals.join(" | ")
                );
            }
        }
        out.push('\n');
    }
    if !notes.is_empty() {
        let _ = writeln!(
            out,
            "(*) measured on {}: every row waits for the disk.\n",
            notes.join(", ")
        );
    }
    let all: Vec<Mode> = Mode::INSERTS.iter().chain(&Mode::READS).copied().collect();
    for table in results.ratio_tables() {
        if table.rows.is_empty() {
            continue;
        }
        let _ = writeln!(out, "## {}\n", table.title);
        let heads: Vec<_> = all.iter().map(|m| m.title()).collect();
        let _ = writeln!(out, "| engine | {} |", heads.join(" | "));
        let _ = writeln!(out, "|---|{}", "---:|".repeat(all.len()));
        for row in &table.rows {
            let vals: Vec<String> = all
                .iter()
                .map(|m| match results.ratio(row, *m) {
                    Some(q) => format!("{q:.2}"),
                    None => "-".into(),
                })
                .collect();
            let _ = writeln!(out, "| {} | {} |", row.title, vals.join(" | "));
        }
        out.push('\n');
    }
    out
}
