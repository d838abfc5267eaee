//! `scaling-plot`: the table of `scripts/scaling-check.sh` (`scaling.csv`) as a PNG, rate against
//! GPU count: one panel for each of diffusion, LBM and advection, and for each lattice size of the
//! QCD runs one of BiCGStab (every solver variant, with and without overlap) and one of M_hat, and
//! for each precision of diffusion's temporally blocked passes one (`scaling-check.sh 2 temporal`). Each
//! panel has one line per run and a dashed grey line of ideal scaling from its first line's
//! one-GPU rate.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use lattice_gpu::formats::IoError;

#[path = "../scaling_chart.rs"]
mod scaling_chart;
use scaling_chart::{Chart, Figure, Marker, Series, GREY, PALETTE};

/// Draws the scaling table that scripts/scaling-check.sh writes (scaling.csv) as a PNG: rate
/// against GPU count, one panel per application (per lattice size for lqcd), one line per run,
/// and ideal scaling dashed in grey.
#[derive(Parser, Debug)]
#[command(version)]
struct Cli {
    /// The CSV: header run,gpus,rate,unit,efficiency_percent, one row per run and GPU count.
    csv: PathBuf,
    /// The PNG to write (default: the CSV's path with .png).
    #[arg(long)]
    output: Option<PathBuf>,
}

/// The header scripts/scaling-check.sh writes.
const HEADER: &str = "run,gpus,rate,unit,efficiency_percent";

/// What the error messages suggest for a CSV that cannot be used.
const FIX: &str = "give the scaling.csv that scripts/scaling-check.sh writes (in $OUT/scaling, or \
                   /tmp/scaling), or run that script again";

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("cannot read {}: {source}; {FIX}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("{}:{line}: {problem}", path.display())]
    Line {
        path: PathBuf,
        line: usize,
        problem: String,
    },
    #[error("{}: {problem}", path.display())]
    File { path: PathBuf, problem: String },
    #[error(transparent)]
    Write(#[from] IoError),
}

type Result<T> = std::result::Result<T, Error>;

/// One row of the CSV.
#[derive(Clone, Debug, PartialEq)]
struct Row {
    /// The line it came from (1 is the header), for messages.
    line: usize,
    run: String,
    gpus: u32,
    rate: f64,
    unit: String,
}

/// Reads the rows of `text`, the contents of `path`, checking every field: a corrupt table is
/// refused with its line named, not drawn wrong.
fn parse(path: &Path, text: &str) -> Result<Vec<Row>> {
    let at = |line: usize, problem: String| Error::Line {
        path: path.to_path_buf(),
        line,
        problem,
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
    match lines.next() {
        Some((_, HEADER)) => {}
        None | Some((_, "")) => {
            return Err(Error::File {
                path: path.to_path_buf(),
                problem: format!("the file is empty, with no header `{HEADER}`; {FIX}"),
            })
        }
        Some((n, other)) => {
            return Err(at(
                n,
                format!(
                    "the header is `{}`, not `{HEADER}`: this is not a table of \
                     scripts/scaling-check.sh; {FIX}",
                    shorten(other)
                ),
            ))
        }
    }
    let mut rows: Vec<Row> = Vec::new();
    let mut seen: BTreeMap<(String, u32), usize> = BTreeMap::new();
    for (n, line) in lines.filter(|(_, l)| !l.is_empty()) {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [run, gpus, rate, unit, efficiency] = fields[..] else {
            return Err(at(
                n,
                format!(
                    "{} fields, expected 5 ({HEADER}), as in `diffusion,2,180.1,GLUPS,94.6`: \
                     `{}`",
                    fields.len(),
                    shorten(line)
                ),
            ));
        };
        if run.is_empty() || unit.is_empty() {
            let which = if run.is_empty() { "run" } else { "unit" };
            return Err(at(n, format!("the {which} is empty: `{}`", shorten(line))));
        }
        let gpus = match gpus.parse::<u32>() {
            Ok(g) if g >= 1 => g,
            _ => {
                return Err(at(
                    n,
                    format!(
                        "the GPU count `{}` is not a whole number of at least 1",
                        shorten(gpus)
                    ),
                ))
            }
        };
        let number = |what: &str, s: &str| match s.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
            _ => Err(at(
                n,
                format!(
                    "the {what} `{}` is not a number of at least 0; each row is {HEADER}, as in \
                     `diffusion,2,180.1,GLUPS,94.6`",
                    shorten(s)
                ),
            )),
        };
        let rate = number("rate", rate)?;
        number("efficiency", efficiency)?;
        if let Some(first) = seen.insert((run.to_string(), gpus), n) {
            return Err(at(
                n,
                format!(
                    "a second row for {run} on {gpus} GPU{} (the first is on line {first}); a \
                     table of one scripts/scaling-check.sh run has each run and GPU count once",
                    if gpus == 1 { "" } else { "s" }
                ),
            ));
        }
        rows.push(Row {
            line: n,
            run: run.to_string(),
            gpus,
            rate,
            unit: unit.to_string(),
        });
    }
    if rows.is_empty() {
        return Err(Error::File {
            path: path.to_path_buf(),
            problem: "the table has a header but no rows: every run failed or none ran (the table \
                      scaling-check.sh printed says FAILED); see the logs beside the CSV"
                .to_string(),
        });
    }
    Ok(rows)
}

/// `s`, cut to a length that fits in an error message.
fn shorten(s: &str) -> String {
    const MAX: usize = 60;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(MAX).collect::<String>())
    }
}

/// The panels, in the order they are laid out.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum PanelKind {
    Diffusion,
    Lbm,
    Advection,
    /// BiCGStab on the lattice `XxYxZxT`.
    Bicgstab(String),
    /// The operator M_hat on the lattice `XxYxZxT`.
    Mhat(String),
    /// Diffusion's temporally blocked passes in a precision (`f32`, `f64`).
    Temporal(String),
}

impl PanelKind {
    /// The title; the sizes are those scripts/scaling-check.sh runs.
    fn title(&self) -> String {
        match self {
            PanelKind::Diffusion => "diffusion 512^3 f32".into(),
            PanelKind::Lbm => "lbm cavity 384^3 f32".into(),
            PanelKind::Advection => "advection swirl 8192^2".into(),
            PanelKind::Bicgstab(dims) => format!("BiCGStab {dims} f32, every solver variant"),
            PanelKind::Mhat(dims) => format!("M_hat {dims} f32"),
            PanelKind::Temporal(precision) => {
                format!("diffusion 512^3 {precision}, temporal passes")
            }
        }
    }

    /// How many of the figure's three columns the panel spans: BiCGStab's ten lines need two.
    fn span(&self) -> i64 {
        match self {
            PanelKind::Bicgstab(_) => 2,
            _ => 1,
        }
    }

    /// The figure row: the stencils share one, each lattice size has its own, the temporal passes one.
    fn row(&self) -> Option<&str> {
        match self {
            PanelKind::Bicgstab(dims) | PanelKind::Mhat(dims) => Some(dims),
            PanelKind::Temporal(_) => Some("temporal"),
            _ => None,
        }
    }
}

/// The solver variants of `lqcd solve --bench`, in the order of scripts/scaling-check.sh.
const VARIANTS: [&str; 5] = ["sync", "async", "graph", "waitkernel", "streamwait"];

/// Where a run goes: its panel, its place among the panel's lines (also the legend's order), its
/// label and its look.
#[derive(Clone, Debug, PartialEq)]
struct LineKind {
    panel: PanelKind,
    order: usize,
    label: String,
    color: usize,
    dashed: bool,
    marker: Marker,
}

/// The panel and line of a run name of scripts/scaling-check.sh (its `case $app` block), or
/// `None` for a name it does not write.
fn classify(run: &str) -> Option<LineKind> {
    const STENCIL_MARKERS: [Marker; 4] = [
        Marker::Circle,
        Marker::Square,
        Marker::Triangle,
        Marker::Diamond,
    ];
    // Without and with overlap differ only by dashes and markers, so that the colour still
    // says which variant a line is.
    let lqcd = |panel, order, label: String, seq: bool| LineKind {
        panel,
        order: order + if seq { VARIANTS.len() } else { 0 },
        label: if seq {
            format!("{label}, no overlap")
        } else {
            label
        },
        color: order,
        dashed: seq,
        marker: if seq { Marker::Square } else { Marker::Circle },
    };
    if let Some(rest) = run.strip_prefix("mhat-") {
        let (dims, seq) = match rest.strip_suffix("-seq") {
            Some(dims) => (dims, true),
            None => (rest, false),
        };
        return valid_dims(dims)
            .then(|| lqcd(PanelKind::Mhat(dims.to_string()), 0, "M_hat".into(), seq));
    }
    if let Some(rest) = run.strip_prefix("lqcd-") {
        let (rest, seq) = match rest.strip_suffix("-seq") {
            Some(rest) => (rest, true),
            None => (rest, false),
        };
        let (dims, variant) = rest.rsplit_once('-')?;
        let order = VARIANTS.iter().position(|v| *v == variant)?;
        return valid_dims(dims).then(|| {
            lqcd(
                PanelKind::Bicgstab(dims.to_string()),
                order,
                variant.to_string(),
                seq,
            )
        });
    }
    // `temporal-PRECISION-tSTEPS[-seq]`: passes of STEPS steps (1: single steps; auto: chosen on a
    // rank's slab), ideal scaling from the blocked pass's one-GPU rate, the measure.
    if let Some(rest) = run.strip_prefix("temporal-") {
        let (rest, seq) = match rest.strip_suffix("-seq") {
            Some(rest) => (rest, true),
            None => (rest, false),
        };
        let (precision, steps) = rest.split_once("-t")?;
        // 0 for auto.
        let steps: usize = match steps {
            "auto" => 0,
            t => t.parse().ok().filter(|t| (1..=16).contains(t))?,
        };
        if !matches!(precision, "f32" | "f64") || (steps <= 1 && seq) {
            return None;
        }
        let (order, label) = match (steps, seq) {
            (0, _) => (3, "--temporal auto".to_string()),
            (1, _) => (2, "single steps".to_string()),
            (t, false) => (0, format!("{t} steps a pass")),
            (t, true) => (1, format!("{t} steps a pass, no overlap")),
        };
        return Some(LineKind {
            panel: PanelKind::Temporal(precision.to_string()),
            order,
            label,
            color: order,
            dashed: seq,
            marker: STENCIL_MARKERS[order],
        });
    }
    let (app, kind) = run.split_once('-').unwrap_or((run, ""));
    let (panel, per_gpu) = match app {
        "diffusion" => (PanelKind::Diffusion, "512^3"),
        "lbm" => (PanelKind::Lbm, "384^3"),
        "advection" => (PanelKind::Advection, "8192^2"),
        _ => return None,
    };
    let host = if panel == PanelKind::Lbm {
        "in place, host halos"
    } else {
        "host halos"
    };
    let nccl = if panel == PanelKind::Lbm { "ab, " } else { "" };
    let (order, label) = match kind {
        "" => (0, host.to_string()),
        "nccl" => (1, format!("{nccl}NCCL halos")),
        "seq" => (2, format!("{nccl}NCCL, no overlap")),
        "weak" => (3, format!("weak: {per_gpu} per GPU, {nccl}NCCL")),
        _ => return None,
    };
    Some(LineKind {
        panel,
        order,
        label,
        color: order,
        dashed: false,
        marker: STENCIL_MARKERS[order],
    })
}

/// Whether `dims` reads as a lattice size `XxYxZxT`.
fn valid_dims(dims: &str) -> bool {
    let parts: Vec<&str> = dims.split('x').collect();
    parts.len() == 4
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// One line of a panel: a run's rates by GPU count.
#[derive(Clone, Debug, PartialEq)]
struct Line {
    run: String,
    kind: LineKind,
    /// `(gpus, rate)`, by GPU count.
    points: Vec<(u32, f64)>,
}

/// One panel of the figure.
#[derive(Clone, Debug, PartialEq)]
struct Panel {
    kind: PanelKind,
    unit: String,
    /// In the panel's order ([`LineKind::order`]).
    lines: Vec<Line>,
}

impl Panel {
    /// The one-GPU rate of the first line that has one, and that line's label: where ideal
    /// scaling starts.
    fn ideal_base(&self) -> Option<(f64, &str)> {
        self.lines.iter().find_map(|l| {
            l.points
                .iter()
                .find(|p| p.0 == 1)
                .map(|p| (p.1, l.kind.label.as_str()))
        })
    }

    /// The GPU counts any line has, ascending.
    fn gpu_counts(&self) -> Vec<u32> {
        let mut counts: Vec<u32> = self
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.0))
            .collect();
        counts.sort_unstable();
        counts.dedup();
        counts
    }

    fn chart(&self) -> Chart {
        let series = self
            .lines
            .iter()
            .map(|l| Series {
                dash: l.kind.dashed.then_some((9, 5)),
                marker: Some(l.kind.marker),
                ..Series::new(
                    l.kind.label.clone(),
                    l.points.iter().map(|&(g, r)| (f64::from(g), r)).collect(),
                    PALETTE[l.kind.color % PALETTE.len()],
                )
            })
            .collect();
        let counts = self.gpu_counts();
        let most = counts.last().copied().unwrap_or(1);
        let references = self
            .ideal_base()
            .filter(|_| most > 1)
            .map(|(one, label)| Series {
                width: 1,
                dash: Some((5, 4)),
                marker: None,
                ..Series::new(
                    format!("ideal: n x {label} on 1 GPU"),
                    vec![(1.0, one), (f64::from(most), one * f64::from(most))],
                    GREY,
                )
            })
            .into_iter()
            .collect();
        Chart {
            title: self.kind.title(),
            x_label: "GPUs".into(),
            y_label: self.unit.clone(),
            x_ticks: counts.iter().map(|&g| f64::from(g)).collect(),
            y_from_zero: true,
            series,
            references,
            // BiCGStab: a column per solver variant, no overlap under overlap.
            legend_columns: Some(if self.kind.span() > 1 {
                VARIANTS.len()
            } else {
                2
            }),
        }
    }
}

/// The panels of `rows`, in figure order, and a warning for each row of a run this tool does not
/// know (left out rather than refused, so that a newer script's table still gets a picture).
fn group(path: &Path, rows: &[Row]) -> Result<(Vec<Panel>, Vec<String>)> {
    let mut warnings = Vec::new();
    // Lattice sizes in the order the table first has them (the script's order).
    let mut dims_order: Vec<String> = Vec::new();
    let mut panels: Vec<(Panel, usize)> = Vec::new();
    for row in rows {
        let Some(kind) = classify(&row.run) else {
            warnings.push(format!(
                "{}:{}: `{}` is not a run scripts/scaling-check.sh writes; left out of the picture",
                path.display(),
                row.line,
                shorten(&row.run)
            ));
            continue;
        };
        if let Some(dims) = kind.panel.row() {
            if !dims_order.iter().any(|d| d == dims) {
                dims_order.push(dims.to_string());
            }
        }
        let i = match panels.iter().position(|(p, _)| p.kind == kind.panel) {
            Some(i) => i,
            None => {
                let panel = Panel {
                    kind: kind.panel.clone(),
                    unit: row.unit.clone(),
                    lines: Vec::new(),
                };
                panels.push((panel, row.line));
                panels.len() - 1
            }
        };
        let (panel, unit_line) = &mut panels[i];
        if row.unit != panel.unit {
            return Err(Error::Line {
                path: path.to_path_buf(),
                line: row.line,
                problem: format!(
                    "the unit `{}` differs from `{}` on line {unit_line}, in the same panel ({}); \
                     one panel has one unit",
                    shorten(&row.unit),
                    panel.unit,
                    panel.kind.title()
                ),
            });
        }
        match panel.lines.iter_mut().find(|l| l.run == row.run) {
            Some(line) => line.points.push((row.gpus, row.rate)),
            None => panel.lines.push(Line {
                run: row.run.clone(),
                kind,
                points: vec![(row.gpus, row.rate)],
            }),
        }
    }
    let mut panels: Vec<Panel> = panels.into_iter().map(|(p, _)| p).collect();
    for panel in &mut panels {
        panel.lines.sort_by_key(|l| l.kind.order);
        for line in &mut panel.lines {
            line.points.sort_by_key(|p| p.0);
        }
    }
    let rank = |k: &PanelKind| match k.row() {
        Some(dims) => (
            1 + dims_order.iter().position(|d| d == dims).unwrap_or(0),
            k.clone(),
        ),
        None => (0, k.clone()),
    };
    panels.sort_by_key(|p| rank(&p.kind));
    if panels.is_empty() {
        return Err(Error::File {
            path: path.to_path_buf(),
            problem: format!("no row names a run of scripts/scaling-check.sh, so there is nothing to draw; {FIX}"),
        });
    }
    Ok((panels, warnings))
}

/// Width of one of the figure's three columns.
const COLUMN_WIDTH: i64 = 540;
/// Height of one row of panels.
const ROW_HEIGHT: i64 = 400;
/// Height of the figure's title and note.
const HEADER_HEIGHT: i64 = 56;

/// The figure: a row of the stencil panels, then a row per lattice size (BiCGStab over two
/// columns, M_hat beside it).
fn render(panels: &[Panel], source: &Path) -> Figure {
    let mut rows: Vec<Vec<&Panel>> = Vec::new();
    let mut last_row = None;
    for panel in panels {
        let row = panel.kind.row();
        if rows.is_empty() || last_row != Some(row) {
            rows.push(Vec::new());
            last_row = Some(row);
        }
        if let Some(r) = rows.last_mut() {
            r.push(panel);
        }
    }
    let name = source.file_name().map_or_else(
        || source.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let mut figure = Figure {
        width: (3 * COLUMN_WIDTH) as u32,
        height: (HEADER_HEIGHT + ROW_HEIGHT * rows.len() as i64) as u32,
        title: format!("Scaling over the GPUs of one host, one rank per GPU ({name})"),
        note: "rate against GPU count, one line per run; dashed grey: ideal scaling, n x the \
               panel's first line on 1 GPU (efficiency = rate / ideal); lqcd and temporal \
               passes: dashed lines, squares: no overlap"
            .into(),
        panels: Vec::new(),
    };
    for (r, row) in rows.iter().enumerate() {
        let mut column = 0;
        for panel in row {
            let at = (
                (column * COLUMN_WIDTH) as i32,
                (HEADER_HEIGHT + r as i64 * ROW_HEIGHT) as i32,
                (panel.kind.span() * COLUMN_WIDTH) as u32,
                ROW_HEIGHT as u32,
            );
            figure.panels.push((panel.chart(), at));
            column += panel.kind.span();
        }
    }
    figure
}

fn run(cli: &Cli) -> Result<()> {
    let output = cli
        .output
        .clone()
        .unwrap_or_else(|| cli.csv.with_extension("png"));
    if output == cli.csv {
        return Err(Error::File {
            path: cli.csv.clone(),
            problem: "the picture would overwrite the table; give --output PNG".into(),
        });
    }
    let text = std::fs::read_to_string(&cli.csv).map_err(|source| Error::Read {
        path: cli.csv.clone(),
        source,
    })?;
    let rows = parse(&cli.csv, &text)?;
    let (panels, warnings) = group(&cli.csv, &rows)?;
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    render(&panels, &cli.csv).write_png(&output)?;
    let lines: usize = panels.iter().map(|p| p.lines.len()).sum();
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    println!(
        "scaling-plot: {} ({}, {})",
        output.display(),
        plural(panels.len(), "panel"),
        plural(lines, "line")
    );
    Ok(())
}

fn main() -> ExitCode {
    lattice_gpu::cli::exit(run(&Cli::parse()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
run,gpus,rate,unit,efficiency_percent
diffusion,1,95.2,GLUPS,100.0
diffusion,2,180.1,GLUPS,94.6
diffusion-nccl,2,185.0,GLUPS,97.2
diffusion-nccl,1,95.1,GLUPS,100.0
lbm-seq,1,9000,MLUPs/s,100.0
lbm-seq,4,30000,MLUPs/s,83.3
advection-weak,2,40.5,Gpoints/s,98.0
mhat-32x32x32x64,1,1234.5,GFLOPS,100.0
mhat-32x32x32x64-seq,2,2000.0,GFLOPS,81.0
lqcd-32x32x32x64-async-seq,2,900.0,GFLOPS,75.0
lqcd-32x32x32x64-sync,1,600.0,GFLOPS,100.0
lqcd-48x48x48x96-graph,8,4000.0,GFLOPS,70.0
lqcd-32x32x32x64-bogus,1,1.0,GFLOPS,100.0

";

    fn path() -> &'static Path {
        Path::new("scaling.csv")
    }

    #[test]
    fn sample_rows_go_to_their_panels() {
        let rows = parse(path(), SAMPLE).unwrap();
        assert_eq!(rows.len(), 13);
        assert_eq!(rows[0].line, 2);
        assert_eq!((rows[5].gpus, rows[5].rate), (4, 30000.0));
        let (panels, warnings) = group(path(), &rows).unwrap();
        let kinds: Vec<&PanelKind> = panels.iter().map(|p| &p.kind).collect();
        let d32 = "32x32x32x64".to_string();
        assert_eq!(
            kinds,
            [
                &PanelKind::Diffusion,
                &PanelKind::Lbm,
                &PanelKind::Advection,
                &PanelKind::Bicgstab(d32.clone()),
                &PanelKind::Mhat(d32.clone()),
                &PanelKind::Bicgstab("48x48x48x96".into()),
            ]
        );
        let runs =
            |i: usize| -> Vec<&str> { panels[i].lines.iter().map(|l| l.run.as_str()).collect() };
        assert_eq!(runs(0), ["diffusion", "diffusion-nccl"]);
        assert_eq!(runs(1), ["lbm-seq"]);
        assert_eq!(runs(2), ["advection-weak"]);
        // Overlapped variants before the ones without overlap, whatever the CSV's order.
        assert_eq!(
            runs(3),
            ["lqcd-32x32x32x64-sync", "lqcd-32x32x32x64-async-seq"]
        );
        assert_eq!(runs(4), ["mhat-32x32x32x64", "mhat-32x32x32x64-seq"]);
        assert_eq!(runs(5), ["lqcd-48x48x48x96-graph"]);
        // Points sorted by GPU count; units per panel.
        assert_eq!(panels[0].lines[1].points, [(1, 95.1), (2, 185.0)]);
        assert_eq!(panels[0].unit, "GLUPS");
        assert_eq!(panels[1].unit, "MLUPs/s");
        assert_eq!(panels[3].unit, "GFLOPS");
        assert_eq!(panels[3].lines[1].kind.label, "async, no overlap");
        assert!(panels[3].lines[1].kind.dashed && !panels[3].lines[0].kind.dashed);
        // Ideal scaling from the first line's one-GPU rate, over the panel's GPU counts.
        assert_eq!(panels[0].ideal_base(), Some((95.2, "host halos")));
        let chart = panels[1].chart();
        assert_eq!(chart.x_ticks, [1.0, 4.0]);
        assert_eq!(chart.references[0].points, [(1.0, 9000.0), (4.0, 36000.0)]);
        // No one-GPU rate, no ideal line.
        assert!(panels[2].chart().references.is_empty());
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("scaling.csv:14:") && warnings[0].contains("bogus"),
            "{warnings:?}"
        );
    }

    #[test]
    fn every_run_of_the_script_has_a_panel() {
        let mut runs: Vec<String> = ["diffusion", "lbm", "advection"]
            .iter()
            .flat_map(|a| ["", "-nccl", "-seq", "-weak"].map(|k| format!("{a}{k}")))
            .collect();
        for run in ["t3", "t3-seq", "t1", "tauto"] {
            runs.push(format!("temporal-f32-{run}"));
        }
        for run in ["t2", "t2-seq", "t1", "tauto"] {
            runs.push(format!("temporal-f64-{run}"));
        }
        for dims in ["32x32x32x64", "48x48x48x96"] {
            runs.push(format!("mhat-{dims}"));
            runs.push(format!("mhat-{dims}-seq"));
            for v in VARIANTS {
                runs.push(format!("lqcd-{dims}-{v}"));
                runs.push(format!("lqcd-{dims}-{v}-seq"));
            }
        }
        let mut keys = std::collections::BTreeSet::new();
        for run in &runs {
            let kind = classify(run).unwrap_or_else(|| panic!("{run} has no panel"));
            assert!(
                keys.insert((kind.panel, kind.order)),
                "{run} shares a place"
            );
        }
        for bad in [
            "diffusion-foo",
            "lqcd-32x32x32x64-fast",
            "mhat-32x32",
            "lqcd-sync",
            "poisson",
            "temporal-f16-t2",
            "temporal-f32-t1-seq",
            "temporal-f32-tauto-seq",
            "temporal-f32-tx",
        ] {
            assert_eq!(classify(bad), None, "{bad}");
        }
    }

    fn problem(text: &str) -> String {
        parse(path(), text)
            .map(|rows| panic!("parsed {rows:?}"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn corrupt_tables_are_refused_with_the_line() {
        let msg = problem("run,gpus,rate\ndiffusion,1,95.2\n");
        assert!(
            msg.starts_with("scaling.csv:1: the header is `run,gpus,rate`") && msg.contains(HEADER),
            "{msg}"
        );
        let msg = problem(&format!(
            "{HEADER}\ndiffusion,1,95.2,GLUPS,100.0\ndiffusion,2,fast,GLUPS,94.6\n"
        ));
        assert!(
            msg.starts_with("scaling.csv:3: the rate `fast` is not a number"),
            "{msg}"
        );
        let msg = problem(&format!("{HEADER}\ndiffusion,1,NaN,GLUPS,100.0\n"));
        assert!(msg.starts_with("scaling.csv:2: the rate `NaN`"), "{msg}");
        let msg = problem(&format!("{HEADER}\n\ndiffusion,0,1,GLUPS,100.0\n"));
        assert!(msg.starts_with("scaling.csv:3: the GPU count `0`"), "{msg}");
        let msg = problem(&format!("{HEADER}\ndiffusion,1,95.2,GLUPS\n"));
        assert!(
            msg.starts_with("scaling.csv:2: 4 fields, expected 5"),
            "{msg}"
        );
        let msg = problem(&format!(
            "{HEADER}\nlbm,1,1,MLUPs/s,100\nlbm,1,2,MLUPs/s,100\n"
        ));
        assert!(
            msg.starts_with(
                "scaling.csv:3: a second row for lbm on 1 GPU (the first is on line 2)"
            ),
            "{msg}"
        );
        let msg = problem(&format!("{HEADER}\n\n"));
        assert!(msg.contains("no rows") && msg.contains("FAILED"), "{msg}");
        let msg = problem("");
        assert!(msg.contains("empty") && msg.contains(HEADER), "{msg}");
        // A panel with two units would draw them on one axis.
        let rows = parse(
            path(),
            &format!("{HEADER}\nlbm,1,1,MLUPs/s,100\nlbm-seq,2,2,GLUPS,100\n"),
        )
        .unwrap();
        let msg = group(path(), &rows).unwrap_err().to_string();
        assert!(
            msg.starts_with("scaling.csv:3: the unit `GLUPS` differs from `MLUPs/s` on line 2"),
            "{msg}"
        );
        let rows = parse(path(), &format!("{HEADER}\npoisson,1,1,s,100\n")).unwrap();
        let msg = group(path(), &rows).unwrap_err().to_string();
        assert!(msg.contains("nothing to draw"), "{msg}");
    }

    /// A scratch directory for `name`, empty.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("scaling-plot-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn writes_a_png_beside_the_csv() {
        let dir = scratch("png");
        let csv = dir.join("scaling.csv");
        std::fs::write(&csv, SAMPLE).unwrap();
        run(&Cli {
            csv: csv.clone(),
            output: None,
        })
        .unwrap();
        let png = std::fs::read(dir.join("scaling.png")).unwrap();
        // The PNG signature, then the IHDR chunk with width and height (big-endian).
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&png[12..16], b"IHDR");
        let be = |b: &[u8]| u32::from_be_bytes(b.try_into().unwrap());
        // Three columns; a header and three rows of panels (stencils, 32^3x64, 48^3x96).
        assert_eq!(be(&png[16..20]), 3 * COLUMN_WIDTH as u32);
        assert_eq!(be(&png[20..24]), (HEADER_HEIGHT + 3 * ROW_HEIGHT) as u32);
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["scaling.csv", "scaling.png"]);

        let missing = dir.join("none.csv");
        let msg = run(&Cli {
            csv: missing.clone(),
            output: None,
        })
        .unwrap_err()
        .to_string();
        assert!(
            msg.starts_with(&format!("cannot read {}", missing.display()))
                && msg.contains("scaling-check.sh"),
            "{msg}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
