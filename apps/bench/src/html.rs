//! The `--html` page: the run's figures as bar charts in one file that needs
//! nothing else (inline SVG drawn with plotters; no scripts, fonts or links),
//! so that it opens offline and can be attached to an issue as it is.
//!
//! The page is also well-formed XML, so that a test can parse all of it.

use std::fmt::Write as _;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::results::{Results, SPEEDS};
use crate::targets::{err, Mode, ALL_MODES};
use crate::vs_mormot::Comparison;

/// What each mode does, for the page's legend.
const MODE_NOTES: [(Mode, &str); 8] = [
    (
        Mode::Direct,
        "one insert per call, each its own transaction (on a file with synchronous FULL every row waits for the disk)",
    ),
    (
        Mode::Batch,
        "all objects in one batch, sent at once (multi-row INSERTs), no explicit transaction",
    ),
    (Mode::Trans, "one insert per call, all inside one transaction"),
    (Mode::BatchTrans, "one batch inside one transaction"),
    (Mode::ByOne, "reads each object by its ID, one call per object"),
    (
        Mode::AllVirtual,
        "reads all objects with one SQL SELECT on the main SQLite engine (a virtual table when the table lives in another engine)",
    ),
    (
        Mode::AllDirect,
        "reads all objects with one ORM query sent straight to the table's engine",
    ),
    (
        Mode::Cached,
        "reads each object by its ID from the client's cache (filled before timing)",
    ),
];

/// A colour per mode, the same in every chart (Tableau 10, told apart by most
/// colour-blind readers too).
fn color(mode: Mode) -> RGBColor {
    match mode {
        Mode::Direct => RGBColor(0x4e, 0x79, 0xa7),
        Mode::Batch => RGBColor(0xf2, 0x8e, 0x2b),
        Mode::Trans => RGBColor(0xe1, 0x57, 0x59),
        Mode::BatchTrans => RGBColor(0x76, 0xb7, 0xb2),
        Mode::ByOne => RGBColor(0x59, 0xa1, 0x4f),
        Mode::AllVirtual => RGBColor(0xed, 0xc9, 0x48),
        Mode::AllDirect => RGBColor(0xb0, 0x7a, 0xa1),
        Mode::Cached => RGBColor(0x9c, 0x75, 0x5f),
    }
}

/// How a chart's values read.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scale {
    /// Objects/second: bars from the axis' start, on a log axis since the
    /// engines span several orders of magnitude.
    Rate,
    /// A ratio: bars from 1 to the value on a log axis, so that twice as fast
    /// and half as fast are bars of the same length on either side of 1.
    Ratio,
}

#[derive(Debug)]
struct Bar {
    mode: Mode,
    value: f64,
    /// Measured on fewer objects than the run's count (see the chart's note).
    marked: bool,
    /// The raw driver's figure, drawn paler than the ORM's beside it.
    raw: bool,
}

#[derive(Debug)]
struct Group {
    label: String,
    bars: Vec<Bar>,
}

#[derive(Debug)]
struct Chart {
    title: String,
    scale: Scale,
    groups: Vec<Group>,
    /// How to read it, and what the marks mean.
    note: String,
}

/// The page for a run, with the Burrow ÷ mORMot2 chart when a comparison is
/// given. `headline` says what the run was; `text` is the report as printed.
pub fn page(
    results: &Results,
    headline: &str,
    text: &str,
    versus: Option<&Comparison>,
) -> Result<String, String> {
    let mut out = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n\
         <title>Burrow engine benchmark</title>\n<style>\n\
         body { font-family: sans-serif; margin: 1.5em auto; max-width: 1120px; color: #222; }\n\
         h2 { margin: 1.6em 0 0.3em; font-size: 1.2em; }\n\
         .warn { background: #fde2e1; padding: 0.4em 0.6em; border-left: 4px solid #c0392b; }\n\
         table.modes td { padding: 0.1em 0.6em 0.1em 0; vertical-align: top; }\n\
         .swatch { display: inline-block; width: 0.9em; height: 0.9em; }\n\
         figure { margin: 0; }\n figcaption { color: #444; font-size: 0.9em; }\n\
         pre { font-size: 0.8em; overflow-x: auto; }\n\
         </style>\n</head>\n<body>\n<h1>Burrow engine benchmark</h1>\n",
    );
    let _ = writeln!(out, "<p>{}</p>", escape(headline));
    if cfg!(debug_assertions) {
        out.push_str(
            "<p class=\"warn\">Debug build: these figures are not meaningful; \
             run <code>cargo run --release -p burrow-bench</code>.</p>\n",
        );
    }
    out.push_str(
        "<p>Every figure was measured in this run on a fresh database and verified \
         (row count, the exact sum of Amount, the content of the rows) before it was kept.</p>\n\
         <h2>Modes</h2>\n<table class=\"modes\">\n",
    );
    for (mode, note) in MODE_NOTES {
        let _ = writeln!(
            out,
            "<tr><td><span class=\"swatch\" style=\"background: {}\"></span> <b>{}</b></td><td>{}</td></tr>",
            hex(color(mode)),
            escape(mode.title()),
            escape(note)
        );
    }
    out.push_str("</table>\n");
    for chart in charts(results, versus) {
        let _ = write!(
            out,
            "<section>\n<h2>{}</h2>\n<figure>\n{}<figcaption>{}</figcaption>\n</figure>\n</section>\n",
            escape(&chart.title),
            svg(&chart)?,
            escape(&chart.note)
        );
    }
    let _ = write!(
        out,
        "<details>\n<summary>The same figures as the bench printed them</summary>\n<pre>{}</pre>\n</details>\n</body>\n</html>\n",
        escape(text)
    );
    Ok(out)
}

/// The charts a run has data for, in the order of the printed tables.
fn charts(results: &Results, versus: Option<&Comparison>) -> Vec<Chart> {
    let mut charts = Vec::new();
    for (title, modes) in SPEEDS {
        let mut groups = Vec::new();
        let mut fewer = Vec::new();
        for e in &results.engines {
            let sides: &[bool] = if e.raw { &[false, true] } else { &[false] };
            for &baseline in sides {
                let bars = modes
                    .iter()
                    .filter_map(|m| results.get(e.id, *m, baseline))
                    .map(|c| {
                        let marked = c.rows != results.rows;
                        if marked && !fewer.contains(&c.rows) {
                            fewer.push(c.rows);
                        }
                        Bar {
                            mode: c.mode,
                            value: c.rows_per_sec,
                            marked,
                            raw: baseline,
                        }
                    })
                    .collect();
                let raw = if baseline { " (raw)" } else { "" };
                groups.push(Group {
                    label: format!("{}{raw}", e.title),
                    bars,
                });
            }
        }
        let mut note = String::from(
            "Objects per second on a log scale: each grid line is ten times the one before. \
             \"(raw)\" rows, paler, are the raw driver doing the same work in the same run.",
        );
        if !fewer.is_empty() {
            let counts: Vec<String> = fewer.iter().map(|n| format!("{n} objects")).collect();
            let _ = write!(
                note,
                " * measured on {}: every row waits for the disk.",
                counts.join(", ")
            );
        }
        charts.push(Chart {
            title: title.into(),
            scale: Scale::Rate,
            groups,
            note,
        });
    }
    for table in results.ratio_tables() {
        let groups = table
            .rows
            .iter()
            .map(|row| Group {
                label: row.title.clone(),
                bars: ALL_MODES
                    .iter()
                    .filter_map(|m| {
                        results.ratio(row, *m).map(|value| Bar {
                            mode: *m,
                            value,
                            marked: false,
                            raw: false,
                        })
                    })
                    .collect(),
            })
            .collect();
        charts.push(Chart {
            title: table.title.into(),
            scale: Scale::Ratio,
            groups,
            note: RATIO_NOTE.into(),
        });
    }
    if let Some(cmp) = versus {
        let mut groups: Vec<Group> = Vec::new();
        for c in &cmp.cells {
            let bar = Bar {
                mode: c.mode,
                value: c.burrow / c.mormot,
                marked: false,
                raw: false,
            };
            match groups.iter_mut().find(|g| g.label == c.engine) {
                Some(g) => g.bars.push(bar),
                None => groups.push(Group {
                    label: c.engine.clone(),
                    bars: vec![bar],
                }),
            }
        }
        for g in &mut groups {
            g.bars
                .sort_by_key(|b| ALL_MODES.iter().position(|m| *m == b.mode));
        }
        charts.push(Chart {
            title: format!(
                "Burrow ÷ mORMot2 (median of {} alternating rounds of both benchmarks, same machine)",
                cmp.rounds
            ),
            scale: Scale::Ratio,
            groups,
            note: format!(
                "{RATIO_NOTE} Above 1, Burrow is faster. Read from the file vs-mormot.py --json wrote."
            ),
        });
    }
    for c in &mut charts {
        // A log axis cannot show zero; a cell too fast to time is left out
        // rather than drawn wrong.
        for g in &mut c.groups {
            g.bars.retain(|b| b.value.is_finite() && b.value > 0.0);
        }
        c.groups.retain(|g| !g.bars.is_empty());
    }
    charts.retain(|c| !c.groups.is_empty());
    charts
}

const RATIO_NOTE: &str = "Ratio on a log scale, bars drawn from 1 (the line): \
     right of it the first is faster, left of it slower, by the factor printed at the bar's end.";

/// Total width of a chart, in pixels.
const WIDTH: u32 = 1100;
/// The mode legend on the right.
const LEGEND_WIDTH: u32 = 150;
/// Pixels per bar.
const BAR_PX: f64 = 16.0;
/// Space between groups, in bars.
const GAP: f64 = 0.9;
/// Above the plot, and below it for the axis labels and their description.
const TOP_PX: u32 = 12;
const BOTTOM_PX: u32 = 56;

/// One chart as an `<svg>` element.
fn svg(chart: &Chart) -> Result<String, String> {
    let bars: usize = chart.groups.iter().map(|g| g.bars.len()).sum();
    let units = bars as f64 + GAP * chart.groups.len() as f64;
    let height = (units * BAR_PX).ceil() as u32 + TOP_PX + BOTTOM_PX;
    let values = chart.groups.iter().flat_map(|g| &g.bars).map(|b| b.value);
    let min = values.clone().fold(f64::INFINITY, f64::min);
    let max = values.fold(0.0, f64::max);
    let (lo, hi, bold, light, base) = match chart.scale {
        Scale::Rate => {
            let lo = 10f64.powf((min / 1.5).log10().floor());
            // Room right of the longest bar for its figure.
            let hi = step_up(max * 3.0);
            let all = steps(lo, hi);
            let tens: Vec<f64> = all
                .iter()
                .copied()
                .filter(|v| is_power_of_ten(*v))
                .collect();
            if tens.len() >= 3 {
                let rest = all.into_iter().filter(|v| !is_power_of_ten(*v)).collect();
                (lo, hi, tens, rest, lo)
            } else {
                (lo, hi, all, Vec::new(), lo)
            }
        }
        Scale::Ratio => {
            let lo = step_down((min / 1.6).min(0.5));
            let hi = step_up((max * 1.8).max(2.0));
            (lo, hi, steps(lo, hi), Vec::new(), 1.0)
        }
    };
    // Groups top to bottom (the y axis grows upwards); each label sits at
    // its group's middle.
    let mut top = units;
    let mut labels: Vec<(f64, &str)> = Vec::new();
    let mut rects = Vec::new();
    for g in &chart.groups {
        top -= GAP / 2.0;
        labels.push((top - g.bars.len() as f64 / 2.0, &g.label));
        for b in &g.bars {
            rects.push((b, top - 0.88, top - 0.12));
            top -= 1.0;
        }
        top -= GAP / 2.0;
    }
    let longest = chart
        .groups
        .iter()
        .map(|g| g.label.chars().count())
        .max()
        .unwrap_or(0);
    // Plotters writes font sizes divided by 1.24: 16 is about 13 px.
    let label_px = (longest as f64 * 7.0 + 16.0).max(100.0) as u32;
    let small = ("sans-serif", 14).into_font();
    let mut modes: Vec<Mode> = Vec::new();
    for (b, _, _) in &rects {
        if !modes.contains(&b.mode) {
            modes.push(b.mode);
        }
    }
    modes.sort_by_key(|m| ALL_MODES.iter().position(|a| a == m));

    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (plot, legend) = root.split_horizontally(WIDTH - LEGEND_WIDTH);
        let mut ctx = ChartBuilder::on(&plot)
            .margin_top(TOP_PX)
            .margin_right(12)
            .x_label_area_size(BOTTOM_PX - 8)
            .y_label_area_size(label_px)
            .build_cartesian_2d(
                (lo..hi)
                    .log_scale()
                    .with_key_points(bold)
                    .with_light_points(light),
                Slots {
                    units,
                    middles: labels.iter().map(|(y, _)| *y).collect(),
                },
            )
            .map_err(err)?;
        let tick = |v: &f64| match chart.scale {
            Scale::Rate => si(*v, None),
            Scale::Ratio => format!("{v}"),
        };
        let name = |y: &f64| {
            labels
                .iter()
                .find(|(at, _)| (at - y).abs() < 1e-9)
                .map_or(String::new(), |(_, l)| (*l).to_owned())
        };
        ctx.configure_mesh()
            .disable_y_mesh()
            .x_desc(match chart.scale {
                Scale::Rate => "objects/second (log scale)",
                Scale::Ratio => "ratio (log scale; 1 = as fast)",
            })
            .x_label_formatter(&tick)
            .y_label_formatter(&name)
            .label_style(("sans-serif", 16))
            .axis_desc_style(("sans-serif", 16))
            .bold_line_style(RGBColor(0xcc, 0xcc, 0xcc))
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            .draw()
            .map_err(err)?;
        ctx.draw_series(rects.iter().map(|(b, y0, y1)| {
            let fill = if b.raw {
                color(b.mode).mix(0.55).filled()
            } else {
                color(b.mode).filled()
            };
            Rectangle::new([(base, *y0), (b.value, *y1)], fill)
        }))
        .map_err(err)?;
        if chart.scale == Scale::Ratio {
            ctx.draw_series(std::iter::once(PathElement::new(
                vec![(1.0, 0.0), (1.0, units)],
                BLACK.stroke_width(2),
            )))
            .map_err(err)?;
        }
        ctx.draw_series(rects.iter().map(|(b, y0, y1)| {
            let text = match chart.scale {
                Scale::Rate => si(b.value, Some(3)),
                Scale::Ratio => format!("{:.2}", b.value),
            } + if b.marked { " *" } else { "" };
            let left = b.value < base;
            let style = small.color(&BLACK).pos(Pos::new(
                if left { HPos::Right } else { HPos::Left },
                VPos::Center,
            ));
            EmptyElement::at((b.value, (y0 + y1) / 2.0))
                + Text::new(text, (if left { -6 } else { 6 }, 0), style)
        }))
        .map_err(err)?;
        let key = small.color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
        for (i, m) in modes.iter().enumerate() {
            let y = TOP_PX as i32 + 4 + i as i32 * 20;
            legend
                .draw(&Rectangle::new([(8, y), (22, y + 14)], color(*m).filled()))
                .map_err(err)?;
            legend
                .draw(&Text::new(m.title(), (28, y + 7), key.clone()))
                .map_err(err)?;
        }
        if rects.iter().any(|(b, _, _)| b.raw) {
            let y = TOP_PX as i32 + 4 + modes.len() as i32 * 20 + 8;
            legend
                .draw(&Rectangle::new(
                    [(8, y), (22, y + 14)],
                    RGBColor(0x55, 0x55, 0x55).mix(0.55).filled(),
                ))
                .map_err(err)?;
            legend
                .draw(&Text::new("paler: raw driver", (28, y + 7), key.clone()))
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(out)
}

/// The y axis: `units` bar slots, a tick at the middle of each group, where
/// its label goes.
struct Slots {
    units: f64,
    middles: Vec<f64>,
}

impl Ranged for Slots {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        limit.0 + (v / self.units * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.middles.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        0.0..self.units
    }
}

/// The 1-2-5 steps from `lo` to `hi`.
fn steps(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut exp = lo.log10().floor() as i32;
    while 10f64.powi(exp) <= hi {
        for m in [1.0, 2.0, 5.0] {
            let v = m * 10f64.powi(exp);
            if v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9) {
                out.push(v);
            }
        }
        exp += 1;
    }
    out
}

/// The smallest 1-2-5 step at or above `v`.
fn step_up(v: f64) -> f64 {
    let exp = v.log10().floor() as i32;
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * 10f64.powi(exp))
        .find(|s| *s >= v * (1.0 - 1e-9))
        .unwrap_or(v)
}

/// The largest 1-2-5 step at or below `v`.
fn step_down(v: f64) -> f64 {
    let exp = v.log10().floor() as i32;
    [5.0, 2.0, 1.0]
        .iter()
        .map(|m| m * 10f64.powi(exp))
        .find(|s| *s <= v * (1.0 + 1e-9))
        .unwrap_or(v)
}

fn is_power_of_ten(v: f64) -> bool {
    let l = v.log10();
    (l - l.round()).abs() < 1e-9
}

/// `v` with a k or M suffix: to `digits` significant digits, or as short as
/// it is exactly (axis ticks).
fn si(v: f64, digits: Option<usize>) -> String {
    // Rounded first, so that 999,960 reads 1.00M rather than 1000k.
    let v = match digits {
        Some(d) if v > 0.0 => {
            let unit = 10f64.powi(v.log10().floor() as i32 + 1 - d as i32);
            (v / unit).round() * unit
        }
        _ => v,
    };
    let (x, unit) = if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    match digits {
        Some(d) => {
            let whole = (x.log10().floor() as usize).saturating_add(1).min(d);
            format!("{x:.*}{unit}", d - whole)
        }
        None => format!("{x}{unit}"),
    }
}

/// `#rrggbb`.
fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// Text made safe inside HTML elements and quoted attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
#[path = "../tests/common/page.rs"]
mod page_check;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{Cell, Engine};
    use crate::vs_mormot::Versus;

    fn engine(id: &'static str, title: &'static str, raw: bool) -> Engine {
        Engine { id, title, raw }
    }

    /// Every mode of every engine, with figures from 40 to 4 million, and
    /// the few Direct rows a file with synchronous FULL uses.
    fn results() -> Results {
        let engines = vec![
            engine("sqlite-file-full", "SQLite file full", true),
            engine("sqlite-mem", "SQLite in memory", true),
            engine("memory-static", "In memory <static> & \"odd\"", false),
        ];
        let mut cells = Vec::new();
        for (k, e) in engines.iter().enumerate() {
            for (j, mode) in ALL_MODES.iter().enumerate() {
                for baseline in [false, true].into_iter().filter(|b| !b || e.raw) {
                    let slow = e.id == "sqlite-file-full" && *mode == Mode::Direct;
                    cells.push(Cell {
                        engine: e.id,
                        mode: *mode,
                        baseline,
                        rows: if slow { 500 } else { 10_000 },
                        rows_per_sec: if slow {
                            40.0
                        } else {
                            1000.0
                                * (k + 1) as f64
                                * (j + 1) as f64
                                * if baseline { 1.5 } else { 1.0 }
                        },
                    });
                }
            }
        }
        Results {
            rows: 10_000,
            repeat: 1,
            engines,
            cells,
        }
    }

    fn versus() -> Comparison {
        Comparison {
            rounds: 3,
            cells: vec![Versus {
                engine: "SQLite in memory".into(),
                mode: Mode::Batch,
                mormot: 400_000.0,
                burrow: 600_000.0,
            }],
        }
    }

    #[test]
    fn a_chart_for_each_table_and_the_comparison() {
        let r = results();
        let page = page(&r, "run <1>", "| a & b |", Some(&versus())).unwrap();
        assert_eq!(page_check::check_page(&page), Ok(5));
        // Text is escaped in the page and in the charts.
        assert!(page.contains("run &lt;1&gt;") && page.contains("| a &amp; b |"));
        assert!(page.contains("In memory &lt;static&gt; &amp; &quot;odd&quot;"));
        assert!(!page.contains("<static>"));
        // The figures shown are the cells', the ratios theirs.
        assert!(page.contains(">\n40.0 *\n<"), "the 500-row cell is marked");
        assert!(page.contains("* measured on 500 objects"));
        assert!(page.contains(">\n12.0k\n<"), "memory-static, By one");
        assert!(page.contains(">\n0.67\n<"), "ORM ÷ raw");
        assert!(page.contains(">\n1.50\n<"), "Burrow ÷ mORMot2");
        let without = super::page(&r, "", "", None).unwrap();
        assert_eq!(page_check::check_page(&without), Ok(4));
    }

    #[test]
    fn charts_only_for_what_was_measured() {
        let mut r = results();
        r.engines.retain(|e| e.id == "memory-static");
        r.cells
            .retain(|c| c.engine == "memory-static" && Mode::READS.contains(&c.mode));
        r.cells[0].rows_per_sec = f64::INFINITY;
        let page = page(&r, "", "", None).unwrap();
        assert_eq!(page_check::check_page(&page), Ok(1));
        assert!(page.contains("Read speed"));
        assert!(!page.contains("inf"));
    }

    #[test]
    fn ticks_and_figures() {
        assert_eq!(
            steps(10.0, 1000.0),
            [10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]
        );
        assert_eq!(step_up(3.1), 5.0);
        assert_eq!(step_down(0.31), 0.2);
        assert_eq!(si(1_234_567.0, Some(3)), "1.23M");
        assert_eq!(si(45_678.0, Some(3)), "45.7k");
        assert_eq!(si(20_000.0, None), "20k");
        assert_eq!(si(512.0, Some(3)), "512");
        assert_eq!(si(999_960.0, Some(3)), "1.00M");
        assert_eq!(si(9_996.0, Some(3)), "10.0k");
    }
}
