//! `poisson`: the variable-coefficient pressure Poisson equation `-div(c grad p) = f` solved by CG in f64
//! preconditioned with a multigrid V-cycle in f32 (or f64), on the CPU or a GPU: a manufactured solution
//! (optionally with the thin vertical cells of an ocean grid) or your own coefficients and right-hand side;
//! and `poisson bench`, the time to solve in each precision and layout against the GPU's copy bandwidth.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, Parser, Subcommand, ValueEnum};
use lattice_gpu_cli::{self as cli, parse_size3, progress, Placement, VariantArg};
use lattice_gpu_formats::npy::{read_npy_shaped, write_npy};
use lattice_gpu_formats::png::{significant, write_field_png, Axis, Picture};
use lattice_gpu_formats::IoError;
use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::engine::Variant;
use lattice_gpu_host::health;
use lattice_gpu_host::memory::Footprint;
use lattice_gpu_host::{
    DeviceAutoTuningLoopEngine, DeviceLoopEngine, Error as HostError, Gpu, HostLoopEngine,
    LaunchShape, LoopEngine,
};
use lattice_gpu_lbm::output::{numbers, write_csv};
use lattice_gpu_poisson::multigrid::{
    check_cycle, max_levels, Cycle, Layout, Smoother, COARSE_SWEEPS, FUSED_CELLS,
};
use lattice_gpu_poisson::problem::{manufactured_error, manufactured_problem, Problem, Walls};
use lattice_gpu_poisson::solver::{
    check_stop, footprint as footprint_of, stop_for_signal, Precision, Report, Solver,
};
use lattice_gpu_poisson::{Error, Result};

/// Variable-coefficient Poisson solver: CG (f64) with a geometric-multigrid preconditioner (f32 or f64).
/// Without --coeffs/--rhs it solves a manufactured problem with a known solution and reports the error.
#[derive(Parser)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Time to solve the manufactured problem on the GPU: f32 (mixed) against f64 multigrid, SoA against
    /// AoS coefficients, tuned against fixed launches; each level's time per V-cycle against its
    /// bandwidth floor, and the finest smoother alone against the copy bandwidth.
    Bench(BenchArgs),
}

#[derive(Args)]
struct RunArgs {
    /// Cells: N (a cube) or NXxNYxNZ; every axis even enough to halve --levels - 1 times.
    #[arg(long, default_value = "64", allow_hyphen_values = true, value_parser = parse_size3)]
    size: [usize; 3],
    /// Depth of the manufactured domain `[0,1]x[0,1]x[0,depth]`: below 1, thin vertical cells (anisotropy).
    #[arg(
        long,
        allow_hyphen_values = true,
        default_value_t = 1.0,
        conflicts_with = "coeffs"
    )]
    depth: f64,
    /// Vertical variation of the manufactured coefficient: c grows by this factor from bottom to top
    /// (above -1, so that c stays positive).
    #[arg(
        long,
        allow_hyphen_values = true,
        default_value_t = 1.0,
        conflicts_with = "coeffs"
    )]
    vertical: f64,
    /// Coefficient c per cell, .npy of shape (nz, ny, nx) (with --rhs; replaces the manufactured case).
    #[arg(long, requires = "rhs")]
    coeffs: Option<PathBuf>,
    /// Right-hand side f per cell, .npy of shape (nz, ny, nx).
    #[arg(long, requires = "coeffs")]
    rhs: Option<PathBuf>,
    /// Cell size hx,hy,hz for --coeffs/--rhs.
    #[arg(
        long,
        value_name = "HX,HY,HZ",
        value_delimiter = ',',
        allow_hyphen_values = true,
        default_value = "1,1,1",
        requires = "coeffs"
    )]
    spacing: Vec<f64>,
    /// Boundary condition on the walls (--coeffs/--rhs).
    #[arg(long, value_enum, default_value_t = WallsArg::Dirichlet, requires = "coeffs")]
    walls: WallsArg,
    /// Relative residual to reach.
    #[arg(long, allow_hyphen_values = true, default_value_t = 1e-10)]
    tol: f64,
    /// CG iteration limit.
    #[arg(long, default_value_t = 500)]
    max_iter: usize,
    /// Precision of the multigrid preconditioner (CG is always f64).
    #[arg(long, value_enum, default_value_t = PrecisionArg::F32)]
    precision: PrecisionArg,
    /// Smoother.
    #[arg(long, value_enum, default_value_t = SmootherArg::Rb)]
    smoother: SmootherArg,
    /// Layout of the 7 coefficients per cell: one array each (soa) or together per cell (aos).
    #[arg(long, value_enum, default_value_t = LayoutArg::Soa)]
    layout: LayoutArg,
    /// Multigrid levels [default: as many as the size allows, at most 6].
    #[arg(long)]
    levels: Option<usize>,
    /// Red-black (or Jacobi) sweeps before and after the coarse correction on every level but the
    /// coarsest (with --levels 1 there is none: --coarse-sweeps alone counts).
    #[arg(long, default_value_t = 2)]
    smooth: usize,
    /// Red-black (or Jacobi) sweeps on the coarsest level (its solve).
    #[arg(long, default_value_t = COARSE_SWEEPS)]
    coarse_sweeps: usize,
    /// Coarse levels of at most this many cells run their part of the V-cycle as one launch (a block
    /// program) instead of one launch per pass; 0: never. Red-black smoother only.
    #[arg(long, default_value_t = FUSED_CELLS)]
    fused_cells: usize,
    /// Record each preconditioner application once as a CUDA graph and replay it: `on` (also plain
    /// `--graph`) and `auto` alike record wherever it applies (a GPU engine, the red-black smoother, once
    /// every loop is tuned) and run the kernels one by one elsewhere (the CPU engine has no graphs);
    /// `off` never records.
    #[arg(long, value_enum, default_value_t = Switch::On, num_args = 0..=1, default_missing_value = "on")]
    graph: Switch,
    /// Store the finest level by colour (and the next, unless it is fused or the coarsest), so that each
    /// red-black half sweep moves its own colour's values only (the same bits): `auto` wherever it
    /// applies (red-black smoother, SoA layout, an even number of cells in x), `on` (also plain
    /// `--colours`) insists, `off`.
    #[arg(long, value_enum, default_value_t = Switch::Auto, num_args = 0..=1, default_missing_value = "on")]
    colours: Switch,
    /// Restrict with a thread per fine column (unit-stride loads) and x pairs added by a warp shuffle
    /// (the same bits); into a level stored by colour (--colours) the plain restriction runs.
    #[arg(long)]
    shuffle_restrict: bool,
    /// How CG's scalars travel: `sync` copies each dot product to the host, which computes the next
    /// factor; `async` keeps them on the engine (the vector updates read them there) and reads the
    /// residual every `--check-every` iterations only. The same iterations either way.
    #[arg(long, value_enum, default_value_t = CgArg::Sync)]
    cg: CgArg,
    /// Iterations between the host's reads of the residual with `--cg async` (only there) [default: 10].
    #[arg(long)]
    check_every: Option<usize>,
    /// Where to run: auto (the GPU if there is one, else the CPU with a notice), device (the GPU; an
    /// error without one) or host (the CPU). On a GPU every level's launch shapes are tuned (and
    /// cached) before the timed solve; `poisson bench` times them against fixed launches.
    #[arg(long, value_enum, default_value_t = Placement::Auto)]
    engine: Placement,
    /// Block shape XxY of a fixed GPU launch of every level's loops; given, they are not tuned.
    #[arg(long, value_parser = lattice_gpu_cli::parse_block)]
    block: Option<(u32, u32)>,
    /// Points each thread of a fixed GPU launch marches along the last axis [default: 2]; given,
    /// the loops are not tuned.
    #[arg(long)]
    march: Option<u32>,
    /// Skip the second, level-timed solve that gives the time per multigrid level (it waits for the
    /// engine at every change of level, so it is never the solve time reported).
    #[arg(long)]
    no_level_times: bool,
    /// Output directory for pressure.npy, pressure_midz.png and residuals.csv.
    #[arg(long, default_value = "poisson-out")]
    output: PathBuf,
}

#[derive(Args)]
struct BenchArgs {
    /// Grids, comma separated: N (a cube) or NXxNYxNZ.
    #[arg(long, value_delimiter = ',', value_parser = parse_size3, default_value = "128,256")]
    sizes: Vec<[usize; 3]>,
    /// Timed solves per configuration, after an untimed one; the median counts.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Sweeps of the finest smoother timed together (per configuration).
    #[arg(long, default_value_t = 20)]
    sweeps: usize,
    /// Relative residual to reach.
    #[arg(long, allow_hyphen_values = true, default_value_t = 1e-10)]
    tol: f64,
    /// CG iteration limit.
    #[arg(long, default_value_t = 500)]
    max_iter: usize,
    /// Multigrid levels, comma separated: every configuration is timed with each [default: as many as
    /// each size allows, at most 6].
    #[arg(long, value_delimiter = ',')]
    levels: Vec<usize>,
    /// Red-black sweeps on the coarsest level (its solve).
    #[arg(long, default_value_t = COARSE_SWEEPS)]
    coarse_sweeps: usize,
    /// Smoothing sweeps before and after the coarse correction, comma separated: every configuration
    /// is timed with each.
    #[arg(long, value_delimiter = ',', default_value = "2")]
    smooth: Vec<usize>,
    /// Coarse levels of at most this many cells fused into one launch in the configuration that
    /// measures the fusion (the others launch every pass).
    #[arg(long, default_value_t = FUSED_CELLS)]
    fused_cells: usize,
    /// Only these configurations, by key: f64, mixed, aos, fixed, fused, graph, shuffle, f64-colours,
    /// colours, jacobi, f64-fused-graph, fused-graph, f64-all, all, f64-all-async, all-async
    /// [default: every one].
    #[arg(long, value_delimiter = ',')]
    configs: Vec<String>,
    /// Ignore the tune cache and tune every loop again.
    #[arg(long)]
    retune: bool,
    /// Kernel variants the tuner may pick, comma separated (kernels without any of them run their
    /// plain one; the configurations with a fixed launch run the plain ones) [default: every variant].
    #[arg(long, value_enum, value_delimiter = ',')]
    variants: Vec<VariantArg>,
    /// Also write the tables as CSV: the solves to this file, the levels and the smoother beside it
    /// (NAME-levels.csv, NAME-smoother.csv).
    #[arg(long)]
    csv: Option<PathBuf>,
}

/// How CG's scalars travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CgArg {
    Sync,
    Async,
}

/// A technique: on, off, or on wherever it applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Switch {
    Auto,
    On,
    Off,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LayoutArg {
    Soa,
    Aos,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum WallsArg {
    Dirichlet,
    Neumann,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PrecisionArg {
    F32,
    F64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SmootherArg {
    /// Red-black Gauss-Seidel.
    Rb,
    /// Weighted Jacobi.
    Jacobi,
}

/// The problem: read from --coeffs/--rhs, or the manufactured one (whose exact solution is computed
/// cell by cell when the error is reported, not stored).
fn problem(a: &RunArgs) -> Result<Problem> {
    let [nx, ny, nz] = a.size;
    let (Some(c), Some(f)) = (&a.coeffs, &a.rhs) else {
        return Ok(manufactured_problem(a.size, a.depth, a.vertical));
    };
    // The shape is checked before the data is read: a file of another grid is never loaded whole.
    let read = |path: &PathBuf| -> Result<Vec<f64>> {
        read_npy_shaped::<f64>(path, &[nz, ny, nx]).map_err(|e| match e {
            IoError::Shape { found, .. } => Error::Invalid(format!(
                "{}: shape {} does not match --size {nx}x{ny}x{nz}, which needs ({nz}, {ny}, {nx}) \
                 (numpy's order: z, y, x); give the file's grid as --size, or resample it",
                path.display(),
                match found.as_slice() {
                    [z, y, x] => format!("({z}, {y}, {x})"),
                    _ => format!("{found:?} (a 3-D array (nz, ny, nx) is needed)"),
                }
            )),
            e => HostError::from(e).into(),
        })
    };
    let h: [f64; 3] = a.spacing.clone().try_into().map_err(|_| {
        Error::Invalid(format!(
            "--spacing needs three values hx,hy,hz; got {:?}",
            a.spacing
        ))
    })?;
    let p = Problem {
        n: a.size,
        h,
        c: read(c)?,
        rhs: read(f)?,
        walls: match a.walls {
            WallsArg::Dirichlet => Walls::Dirichlet,
            WallsArg::Neumann => Walls::Neumann,
        },
    };
    p.check()?;
    Ok(p)
}

/// Refuses options that cannot work or would be ignored, naming the fix, before anything is built.
fn check_options(a: &RunArgs) -> Result<()> {
    check_stop(a.tol, a.max_iter)?;
    a.engine
        .check_launch(
            a.block.is_some() || a.march.is_some(),
            "--block and --march",
        )
        .map_err(Error::Invalid)?;
    if a.march == Some(0) {
        return Err(Error::Invalid(
            "--march 0: each thread computes at least one point; give --march 1 or more".into(),
        ));
    }
    if a.coeffs.is_none() {
        if !(a.depth.is_finite() && a.depth > 0.0) {
            return Err(Error::Invalid(format!(
                "--depth {} must be positive and finite",
                a.depth
            )));
        }
        // The coefficient is (1 + vertical z / depth) times a factor in [0.5, 1.5].
        if !(a.vertical.is_finite() && a.vertical > -1.0) {
            return Err(Error::Invalid(format!(
                "--vertical {}: the manufactured coefficient grows by this factor from bottom to top \
                 and must stay positive; give a finite value above -1",
                a.vertical
            )));
        }
    }
    match (a.cg, a.check_every) {
        (CgArg::Sync, Some(n)) => Err(Error::Invalid(format!(
            "--check-every {n} applies to --cg async only (--cg sync reads the residual after every \
             iteration); drop it, or add --cg async"
        ))),
        (CgArg::Async, Some(0)) => Err(Error::Invalid(
            "--check-every 0: the residual must be read every 1 or more iterations; give \
             --check-every 1 or more"
                .into(),
        )),
        _ => Ok(()),
    }
}

/// The V-cycle the options ask for on the `--size` grid (checked).
fn cycle_of(a: &RunArgs) -> Result<Cycle> {
    let mut cycle = Cycle {
        levels: a.levels.unwrap_or(max_levels(a.size).min(6)),
        smoother: match a.smoother {
            SmootherArg::Rb => Smoother::RedBlack,
            SmootherArg::Jacobi => Smoother::Jacobi,
        },
        layout: match a.layout {
            LayoutArg::Soa => Layout::Soa,
            LayoutArg::Aos => Layout::Aos,
        },
        fused_cells: a.fused_cells,
        graph: a.graph != Switch::Off,
        colours: a.colours == Switch::On,
        shuffle_restrict: a.shuffle_restrict,
        sweeps: a.smooth,
        coarse_sweeps: a.coarse_sweeps,
    };
    if a.colours == Switch::Auto {
        cycle.colours = cycle.colours_apply(a.size);
    }
    check_cycle(a.size, &cycle)?;
    Ok(cycle)
}

/// Host memory the outputs and the input files pass through (their write and read buffers), beside the
/// arrays.
const IO_BUFFERS: u64 = 4 << 20;

/// The run's peak memory, host and GPU: the problem, the solver ([`footprint_of`]), the solution
/// and the outputs' buffers.
fn footprint(a: &RunArgs, cycle: &Cycle, precision: Precision, on_gpu: bool) -> Result<Footprint> {
    let iterations = (a.cg == CgArg::Async).then_some(a.max_iter);
    let m = footprint_of(a.size, cycle, precision, on_gpu, iterations)?;
    let [nx, ny, nz] = a.size;
    Ok(Footprint::new(
        format!(
            "the {nx}x{ny}x{nz} Poisson solve ({} multigrid levels in {})",
            cycle.levels,
            precision_name(precision)
        ),
        m.host.peak().saturating_add(IO_BUFFERS),
        m.gpu.peak(),
        on_gpu,
    ))
}

fn precision_name(p: Precision) -> &'static str {
    match p {
        Precision::F32 => "f32",
        Precision::F64 => "f64",
    }
}

/// The cell of index `k` (x fastest), as the solver's messages name cells.
fn cell_name(n: [usize; 3], k: usize) -> String {
    let [nx, ny, _] = n;
    format!(
        "cell (x, y, z) = ({}, {}, {})",
        k % nx,
        k / nx % ny,
        k / (nx * ny)
    )
}

fn run(a: &RunArgs) -> Result<()> {
    check_options(a)?;
    let cycle = cycle_of(a)?;
    let levels = cycle.levels;
    let precision = match a.precision {
        PrecisionArg::F32 => Precision::F32,
        PrecisionArg::F64 => Precision::F64,
    };
    let gpu = a.engine.gpu("on the CPU engine")?;
    // Before the first large array: a grid the machine cannot hold ends here, with the sizes.
    let need = footprint(a, &cycle, precision, gpu.is_some())?;
    need.check(gpu.as_deref())?;
    let out = cli::output_dir(&a.output).map_err(HostError::from)?;
    let p = problem(a)?;
    stop_for_signal(0)?;
    let fixed = (a.block.is_some() || a.march.is_some()).then(|| LaunchShape {
        block_x: a.block.map_or(LaunchShape::FIXED.block_x, |b| b.0),
        block_y: a.block.map_or(LaunchShape::FIXED.block_y, |b| b.1),
        march: a.march.unwrap_or(LaunchShape::FIXED.march),
        variant: Variant::Plain,
    });
    let (x, done) = match (gpu.clone(), fixed) {
        (None, _) => solve_on(&HostLoopEngine, &p, cycle, precision, a)?,
        (Some(gpu), Some(shape)) => {
            solve_on(&DeviceLoopEngine::new(gpu, shape), &p, cycle, precision, a)?
        }
        // Every level and kind of loop keeps its site, so each is tuned once (and cached).
        (Some(gpu), None) => solve_on(
            &DeviceAutoTuningLoopEngine::new(gpu, default_cache()),
            &p,
            cycle,
            precision,
            a,
        )?,
    };
    let report = &done.report;
    let iterations = report.iterations as u64;
    // Nothing non-finite is reported or written, whatever the solve's own checks let through.
    if let Some(k) = health::first_non_finite(&x) {
        return Err(HostError::Diverged {
            step: iterations,
            what: "the solution p".into(),
            value: x[k],
            at: cell_name(p.n, k),
            fix: "scale the right-hand side and the coefficients towards 1 (p scales with f / c)"
                .into(),
        }
        .into());
    }
    // The techniques in use, so that a run says what it timed.
    let techniques: String = [
        (cycle.colours, ", finest level by colour"),
        (done.fused_from.is_some(), ", fused coarse levels"),
        (
            cycle.graph && cycle.smoother == Smoother::RedBlack,
            ", graph replay on a GPU",
        ),
        (cycle.shuffle_restrict, ", shuffle restriction"),
        (a.cg == CgArg::Async, ", CG scalars on the engine"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| *name)
    .collect();
    println!(
        "converged: {} CG iterations in {:.4} s ({:.3} ms per iteration), relative residual {:.3e} (f64 CG, {} preconditioner, {levels} levels, {} sweeps each way, {:?}{techniques})",
        report.iterations,
        report.seconds,
        1e3 * report.seconds / report.iterations.max(1) as f64,
        report.history.last().unwrap_or(&1.0),
        precision_name(precision),
        cycle.sweeps,
        cycle.smoother
    );
    let shown: Vec<String> = report
        .history
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 5 == 0 || *i + 1 == report.history.len())
        .map(|(i, r)| format!("{i}: {r:.2e}"))
        .collect();
    println!("residual history: {}", shown.join(", "));
    if let Some(timed) = &done.levels {
        println!(
            "time per multigrid level (a second solve, waiting for the engine at each change of level: {:.4} s in all):",
            timed.seconds
        );
        for (l, (n, s)) in timed.levels.iter().enumerate() {
            let fused = match done.fused_from {
                Some(f) if l == f => {
                    format!(", levels {f} to {} fused into one launch", levels - 1)
                }
                Some(f) if l > f => {
                    println!(
                        "level {l}: {}x{}x{} cells, in level {f}'s launch",
                        n[0], n[1], n[2]
                    );
                    continue;
                }
                _ => String::new(),
            };
            println!(
                "level {l}: {}x{}x{} cells, {:.4} ms per V-cycle ({s:.4} s over {} V-cycles{fused})",
                n[0],
                n[1],
                n[2],
                1e3 * s / timed.vcycles.max(1) as f64,
                timed.vcycles
            );
        }
    }
    if a.coeffs.is_none() {
        // Finite for a finite solution (the difference is scaled before it is squared).
        let error = manufactured_error(p.n, a.depth, &x);
        println!("error against the manufactured solution: relative L2 {error:.3e}");
    }
    let [nx, ny, nz] = p.n;
    write_npy(&out.file("pressure.npy"), &[nz, ny, nx], &x).map_err(HostError::from)?;
    let mid = nz / 2;
    let [hx, hy, hz] = p.h;
    let picture = Picture::new(
        format!(
            "poisson {nx}×{ny}×{nz}: solution p at z = {}",
            significant((mid as f64 + 0.5) * hz)
        ),
        "p",
        Axis::cells("x", hx / 2.0, hx, nx),
        Axis::cells("y", hy / 2.0, hy, ny),
    );
    write_field_png(
        &out.file("pressure_midz.png"),
        nx,
        ny,
        &x[nx * ny * mid..nx * ny * (mid + 1)],
        &picture,
    )
    .map_err(HostError::from)?;
    let rows: Vec<Vec<String>> = report
        .history
        .iter()
        .enumerate()
        .map(|(i, r)| numbers(&[i as f64, *r]))
        .collect();
    write_csv(
        &out.file("residuals.csv"),
        "iteration,relative_residual",
        &rows,
    )
    .map_err(HostError::from)?;
    // The last chance to stop before the outputs appear.
    stop_for_signal(iterations)?;
    cli::commit(out).map_err(HostError::from)?;
    println!(
        "pressure_midz.png shows the plane z = {mid} (of 0 to {})",
        nz - 1
    );
    need.report(gpu.as_deref());
    Ok(())
}

/// The tune cache of `--engine auto`: the user's file (or `LATTICE_GPU_TUNE_CACHE`), else in memory.
fn default_cache() -> TuneCache {
    TuneCache::default_path().map_or_else(TuneCache::in_memory, TuneCache::load)
}

/// What a run measured: the solve, and the level-timed second solve.
struct Done {
    report: Report,
    levels: Option<Report>,
    /// The first level of the fused coarse end of the cycle.
    fused_from: Option<usize>,
}

/// Builds the solver, tunes it (on a tuning engine), solves once untimed, which is the solve time
/// reported, and once more with the levels timed unless asked not to; returns the solution too. A
/// signal stops it between these phases, and in the solves before every preconditioner application.
fn solve_on<E: LoopEngine>(
    engine: &E,
    p: &Problem,
    cycle: Cycle,
    precision: Precision,
    a: &RunArgs,
) -> Result<(Vec<f64>, Done)> {
    println!(
        "{}x{}x{} cells, spacing {:?}, engine: {}",
        p.n[0],
        p.n[1],
        p.n[2],
        p.h,
        engine.describe()
    );
    let t = Instant::now();
    let mut solver = Solver::new(engine, p, cycle, precision)?;
    let built = t.elapsed().as_secs_f64();
    stop_for_signal(0)?;
    let tuning = if engine.tunes() {
        let t = Instant::now();
        solver.tune()?;
        Some(t.elapsed().as_secs_f64())
    } else {
        None
    };
    let shown = tuning.map_or(String::new(), |t| {
        format!(", launch shapes tuned in {t:.3} s")
    });
    println!(
        "set-up: {:.3} s (operator, {} multigrid levels and CG vectors built on the engine in {:.3} s{shown})",
        built + tuning.unwrap_or(0.0),
        cycle.levels,
        built
    );
    let bar = progress(a.max_iter as u64, "CG iterations");
    let mut show = |it: usize, r: f64| {
        bar.set_position(it as u64);
        bar.set_message(format!("residual {r:.2e}"));
    };
    let result = match a.cg {
        CgArg::Sync => solver.solve(a.tol, a.max_iter, false, &mut show),
        CgArg::Async => {
            solver.solve_async(a.tol, a.max_iter, a.check_every.unwrap_or(10), &mut show)
        }
    };
    bar.finish_and_clear();
    let report = result?;
    let x = solver.solution()?;
    let levels = if a.no_level_times {
        None
    } else {
        stop_for_signal(report.iterations as u64)?;
        Some(solver.solve(a.tol, a.max_iter, true, &mut |_, _| {})?)
    };
    Ok((
        x,
        Done {
            report,
            levels,
            fused_from: solver.fused_from(),
        },
    ))
}

/// One configuration of the benchmark.
#[derive(Clone, Copy)]
struct Config {
    /// What `--configs` calls it.
    key: &'static str,
    name: &'static str,
    precision: Precision,
    layout: Layout,
    tuned: bool,
    /// Coarse levels fused into one launch (`--fused-cells`).
    fused: bool,
    /// Each preconditioner application replayed as a recorded graph.
    graph: bool,
    /// The smoother.
    smoother: Smoother,
    /// The finest level stored by colour.
    colours: bool,
    /// The shuffle restriction.
    shuffle: bool,
    /// CG's scalars kept on the engine, the residual read every 10 iterations (`--cg async`).
    cg_async: bool,
}

impl Config {
    /// Its V-cycle of `levels` levels and `smooth` sweeps each way.
    fn cycle(&self, levels: usize, smooth: usize, a: &BenchArgs) -> Cycle {
        Cycle {
            levels,
            sweeps: smooth,
            layout: self.layout,
            fused_cells: if self.fused { a.fused_cells } else { 0 },
            graph: self.graph,
            smoother: self.smoother,
            colours: self.colours,
            shuffle_restrict: self.shuffle,
            coarse_sweeps: a.coarse_sweeps,
        }
    }
}

/// The plain mixed-precision configuration, which the others vary.
const MIXED: Config = Config {
    key: "mixed",
    name: "mixed, SoA, tuned",
    precision: Precision::F32,
    layout: Layout::Soa,
    tuned: true,
    fused: false,
    graph: false,
    smoother: Smoother::RedBlack,
    colours: false,
    shuffle: false,
    cg_async: false,
};

/// Each row's speed-up is over the last f64 row above it: the plain f64 one first, then each f64 row with
/// some techniques just before the mixed row with the same ones.
const CONFIGS: [Config; 16] = [
    Config {
        key: "f64",
        name: "f64 MG, SoA, tuned",
        precision: Precision::F64,
        ..MIXED
    },
    MIXED,
    Config {
        key: "aos",
        name: "mixed, AoS, tuned",
        layout: Layout::Aos,
        ..MIXED
    },
    Config {
        key: "fixed",
        name: "mixed, SoA, fixed",
        tuned: false,
        ..MIXED
    },
    Config {
        key: "fused",
        name: "mixed, SoA, tuned, fused",
        fused: true,
        ..MIXED
    },
    Config {
        key: "graph",
        name: "mixed, SoA, tuned, graph",
        graph: true,
        ..MIXED
    },
    Config {
        key: "shuffle",
        name: "mixed, SoA, tuned, shuffle",
        shuffle: true,
        ..MIXED
    },
    Config {
        key: "f64-colours",
        name: "f64 MG, SoA, tuned, by colour",
        precision: Precision::F64,
        colours: true,
        ..MIXED
    },
    Config {
        key: "colours",
        name: "mixed, SoA, tuned, by colour",
        colours: true,
        ..MIXED
    },
    Config {
        key: "jacobi",
        name: "mixed, SoA, tuned, Jacobi",
        smoother: Smoother::Jacobi,
        ..MIXED
    },
    Config {
        key: "f64-fused-graph",
        name: "f64 MG, SoA, tuned, fused, graph",
        precision: Precision::F64,
        fused: true,
        graph: true,
        ..MIXED
    },
    Config {
        key: "fused-graph",
        name: "mixed, SoA, tuned, fused, graph",
        fused: true,
        graph: true,
        ..MIXED
    },
    Config {
        key: "f64-all",
        name: "f64 MG, everything",
        precision: Precision::F64,
        fused: true,
        graph: true,
        colours: true,
        shuffle: true,
        ..MIXED
    },
    Config {
        key: "all",
        name: "mixed, everything",
        fused: true,
        graph: true,
        colours: true,
        shuffle: true,
        ..MIXED
    },
    Config {
        key: "f64-all-async",
        name: "f64 MG, everything, async",
        precision: Precision::F64,
        fused: true,
        graph: true,
        colours: true,
        shuffle: true,
        cg_async: true,
        ..MIXED
    },
    Config {
        key: "all-async",
        name: "mixed, everything, async",
        fused: true,
        graph: true,
        colours: true,
        shuffle: true,
        cg_async: true,
        ..MIXED
    },
];

/// The configurations whose levels are timed against their bandwidth floors.
const LEVELS_OF: [&str; 3] = ["mixed", "f64-all", "all"];

/// One row of the solve table.
struct SolveRow {
    size: [usize; 3],
    config: Config,
    levels: usize,
    /// Smoothing sweeps each way.
    smooth: usize,
    iterations: usize,
    vcycles: usize,
    /// Median wall seconds of the timed solves.
    seconds: f64,
    setup: f64,
    tuning: f64,
    error: f64,
}

/// One level of the level table: time per V-cycle against the floor of [`Multigrid::traffic`]'s byte
/// model at the copy bandwidth.
///
/// [`Multigrid::traffic`]: lattice_gpu_poisson::multigrid::Multigrid::traffic
struct LevelRow {
    size: [usize; 3],
    config: Config,
    smooth: usize,
    level: usize,
    cells: [usize; 3],
    launches: usize,
    ms: f64,
    bytes: f64,
    floor_ms: f64,
}

/// The finest smoother alone: milliseconds per sweep (GPU events over `--sweeps` sweeps) and the bytes of
/// [`SweepBytes`](lattice_gpu_poisson::multigrid::SweepBytes)' two models.
struct SweepRow {
    size: [usize; 3],
    config: Config,
    launch: String,
    ms: f64,
    needed: f64,
    sectors: f64,
}

fn size_name(n: [usize; 3]) -> String {
    if n[0] == n[1] && n[1] == n[2] {
        format!("{}^3", n[0])
    } else {
        format!("{}x{}x{}", n[0], n[1], n[2])
    }
}

/// Builds, tunes and times one configuration on `engine`: set-up, tuning, an untimed solve, the median
/// of `--repeats` solves, the finest smoother alone, and (with `levels`) a level-timed solve.
#[allow(clippy::too_many_arguments)]
fn bench_config<E: LoopEngine>(
    gpu: &Arc<Gpu>,
    engine: &E,
    p: &Problem,
    config: Config,
    (levels, smooth): (usize, usize),
    a: &BenchArgs,
    copy: f64,
    timed_levels: bool,
) -> Result<(SolveRow, SweepRow, Vec<LevelRow>)> {
    let cycle = config.cycle(levels, smooth, a);
    let t = Instant::now();
    let mut solver = Solver::new(engine, p, cycle, config.precision)?;
    let setup = t.elapsed().as_secs_f64();
    let t = Instant::now();
    solver.tune()?;
    let tuning = t.elapsed().as_secs_f64();
    let quiet = &mut |_: usize, _: f64| {};
    let mut solve = |solver: &mut Solver<E>| match config.cg_async {
        true => solver.solve_async(a.tol, a.max_iter, 10, quiet),
        false => solver.solve(a.tol, a.max_iter, false, quiet),
    };
    let warm = solve(&mut solver)?;
    let mut times = Vec::with_capacity(a.repeats);
    for _ in 0..a.repeats.max(1) {
        let r = solve(&mut solver)?;
        if r.iterations != warm.iterations {
            eprintln!(
                "warning: {} at {}: {} iterations, then {}: repeated solves should agree",
                config.name,
                size_name(p.n),
                warm.iterations,
                r.iterations
            );
        }
        times.push(r.seconds);
    }
    times.sort_by(f64::total_cmp);
    let error = manufactured_error(p.n, 1.0, &solver.solution()?);
    let solve = SolveRow {
        size: p.n,
        config,
        levels,
        smooth,
        iterations: warm.iterations,
        vcycles: warm.vcycles,
        seconds: times[times.len() / 2],
        setup,
        tuning,
        error,
    };
    // The smoother on the state the last solve left (finite, not trivial), after one untimed sweep.
    solver.smooth_finest(1)?;
    let sweeps = a.sweeps.max(1);
    let ms = gpu.time_ms(|| Ok(solver.smooth_finest(sweeps)?))? / sweeps as f64;
    let bytes = solver.sweep_bytes();
    let sweep = SweepRow {
        size: p.n,
        config,
        launch: solver
            .smoother_tuning()
            .map_or(LaunchShape::FIXED, |r| r.best)
            .to_string(),
        ms,
        needed: bytes.needed,
        sectors: bytes.sectors,
    };
    let mut level_rows = Vec::new();
    if timed_levels {
        let timed = solver.solve(a.tol, a.max_iter, true, quiet)?;
        for (l, (t, (_, s))) in solver.traffic().iter().zip(&timed.levels).enumerate() {
            level_rows.push(LevelRow {
                size: p.n,
                config,
                smooth,
                level: l,
                cells: t.cells,
                launches: t.launches,
                ms: 1e3 * s / timed.vcycles.max(1) as f64,
                bytes: t.bytes,
                floor_ms: 1e3 * t.bytes / (copy * 1e9),
            });
        }
    }
    Ok((solve, sweep, level_rows))
}

/// `name` with `suffix` before its extension: `bench.csv` -> `bench-levels.csv`.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let stem = path
        .file_stem()
        .map_or_else(|| "poisson-bench".into(), |s| s.to_string_lossy());
    let ext = path
        .extension()
        .map_or_else(|| "csv".into(), |e| e.to_string_lossy());
    path.with_file_name(format!("{stem}-{suffix}.{ext}"))
}

fn bench(a: &BenchArgs) -> Result<()> {
    if a.repeats == 0 || a.sweeps == 0 {
        return Err(Error::Invalid(
            "--repeats and --sweeps must be at least 1".into(),
        ));
    }
    if let Some(bad) = a
        .configs
        .iter()
        .find(|c| !CONFIGS.iter().any(|k| k.key == c.as_str()))
    {
        let keys: Vec<&str> = CONFIGS.iter().map(|k| k.key).collect();
        return Err(Error::Invalid(format!(
            "--configs: no configuration `{bad}`; the keys are {}",
            keys.join(", ")
        )));
    }
    if a.smooth.contains(&0) || a.coarse_sweeps == 0 {
        return Err(Error::Invalid(
            "--smooth and --coarse-sweeps: every count of smoothing sweeps must be at least 1"
                .into(),
        ));
    }
    let gpu = lattice_gpu_cli::bench_gpu("poisson", 0)?;
    let copy = gpu.copy_bandwidth(1 << 30, 20)?;
    println!(
        "GPU: {}; device-to-device copy {copy:.1} GB/s; CG in f64 from x = 0 to a relative residual of {:.0e}",
        gpu.name(),
        a.tol
    );
    let mut tuner = DeviceAutoTuningLoopEngine::new(gpu.clone(), default_cache()).retune(a.retune);
    if !a.variants.is_empty() {
        let only: Vec<Variant> = a.variants.iter().map(|&v| v.into()).collect();
        tuner = tuner.variants(&only);
    }
    let fixed = DeviceLoopEngine::new(gpu.clone(), LaunchShape::FIXED);
    let (mut solves, mut sweeps, mut levels) = (Vec::new(), Vec::new(), Vec::new());
    println!(
        "{:<8} {:<28} {:>6} {:>6} {:>6} {:>8} {:>10} {:>8} {:>7} {:>8} {:>8} {:>9}",
        "size",
        "preconditioner",
        "levels",
        "smooth",
        "iters",
        "V-cycles",
        "solve ms",
        "ms/iter",
        "vs f64",
        "set-up s",
        "tuning s",
        "L2 error"
    );
    let runs = a.sizes.iter().flat_map(|&n| {
        let depths = match a.levels.is_empty() {
            true => vec![max_levels(n).min(6)],
            false => a.levels.clone(),
        };
        depths
            .into_iter()
            .flat_map(move |d| a.smooth.iter().map(move |&s| (n, d, s)))
    });
    for (n, depth, smooth) in runs {
        let chosen = CONFIGS
            .iter()
            .filter(|c| a.configs.is_empty() || a.configs.iter().any(|k| k == c.key));
        // The host holds the problem and one configuration's set-up at a time: the largest must fit
        // before the problem is made (each configuration's GPU memory is checked as it is built, and
        // one that does not fit is skipped).
        let mut host = 0u64;
        for config in chosen.clone() {
            let cycle = config.cycle(depth, smooth, a);
            let iterations = config.cg_async.then_some(a.max_iter);
            let m = footprint_of(n, &cycle, config.precision, true, iterations)?;
            host = host.max(m.host.peak());
        }
        let what = format!(
            "the {} Poisson benchmark's problem and set-up",
            size_name(n)
        );
        Footprint::new(what, host, 0, true).check(None)?;
        let p = manufactured_problem(n, 1.0, 1.0);
        let mut f64_seconds = None;
        for &config in chosen {
            macro_rules! on {
                ($engine:expr) => {
                    bench_config(
                        &gpu,
                        $engine,
                        &p,
                        config,
                        (depth, smooth),
                        a,
                        copy,
                        LEVELS_OF.contains(&config.key),
                    )
                };
            }
            // Two engine types: the call is spelled once, for each.
            let run = if config.tuned {
                on!(&tuner)
            } else {
                on!(&fixed)
            };
            let (solve, sweep, rows) = match run {
                Ok(r) => r,
                Err(Error::Host(e @ HostError::OutOfDeviceMemory { .. })) => {
                    println!("{:<8} {:<28} skipped: {e}", size_name(n), config.name);
                    continue;
                }
                Err(e) => return Err(e),
            };
            if config.precision == Precision::F64 {
                f64_seconds = Some(solve.seconds);
            }
            println!(
                "{:<8} {:<28} {:>6} {:>6} {:>6} {:>8} {:>10.2} {:>8.3} {:>7} {:>8.2} {:>8.2} {:>9.2e}",
                size_name(n),
                config.name,
                solve.levels,
                solve.smooth,
                solve.iterations,
                solve.vcycles,
                1e3 * solve.seconds,
                1e3 * solve.seconds / solve.iterations.max(1) as f64,
                f64_seconds.map_or("-".into(), |f| format!("{:.2}x", f / solve.seconds)),
                solve.setup,
                solve.tuning,
                solve.error
            );
            solves.push((solve, f64_seconds));
            sweeps.push(sweep);
            levels.extend(rows);
        }
    }
    println!();
    println!(
        "time per V-cycle on each level (a level-timed solve that waits at each change of level, so never a \
         graph; fused levels timed as their first) against its floor: the bytes its kernels must move at the \
         copy bandwidth"
    );
    println!(
        "{:<8} {:<28} {:>6} {:>5} {:>12} {:>8} {:>11} {:>11} {:>9} {:>8}",
        "size",
        "preconditioner",
        "smooth",
        "level",
        "cells",
        "launches",
        "ms/V-cycle",
        "MB/V-cycle",
        "floor ms",
        "of floor"
    );
    for r in &levels {
        println!(
            "{:<8} {:<28} {:>6} {:>5} {:>12} {:>8} {:>11.4} {:>11.2} {:>9.4} {:>8}",
            size_name(r.size),
            r.config.name,
            r.smooth,
            r.level,
            format!("{}x{}x{}", r.cells[0], r.cells[1], r.cells[2]),
            r.launches,
            r.ms,
            r.bytes / 1e6,
            r.floor_ms,
            // A fused level's time is its first level's.
            match r.ms > 0.0 {
                true => format!("{:.1}%", 100.0 * r.floor_ms / r.ms),
                false => "fused".into(),
            }
        );
    }
    println!();
    println!(
        "finest smoother alone, {} sweeps: GB/s of the values per cell a sweep must move (the coefficients: \
         4 of the symmetric operator's 7 arrays in the natural SoA layout, all 7 by colour or in AoS; b and x \
         read, x written); red-black's two half sweeps each stream whole sectors (by colour: 1.1x)",
        a.sweeps
    );
    println!(
        "{:<8} {:<28} {:<18} {:>9} {:>8} {:>8} {:>11}",
        "size", "preconditioner", "launch", "ms/sweep", "GB/s", "of copy", "sector GB/s"
    );
    for r in &sweeps {
        let gbs = r.needed / (r.ms * 1e-3) / 1e9;
        println!(
            "{:<8} {:<28} {:<18} {:>9.4} {:>8.1} {:>7.1}% {:>11.1}",
            size_name(r.size),
            r.config.name,
            r.launch,
            r.ms,
            gbs,
            100.0 * gbs / copy,
            r.sectors / (r.ms * 1e-3) / 1e9
        );
    }
    if let Some(path) = &a.csv {
        write_bench_csv(path, copy, &solves, &levels, &sweeps)?;
    }
    Ok(())
}

fn dims(n: [usize; 3]) -> Vec<String> {
    n.iter().map(|v| v.to_string()).collect()
}

fn write_bench_csv(
    path: &Path,
    copy: f64,
    solves: &[(SolveRow, Option<f64>)],
    levels: &[LevelRow],
    sweeps: &[SweepRow],
) -> Result<()> {
    let io = |e: IoError| Error::Invalid(e.to_string());
    // Each row starts with the grid and the configuration as four columns, its key first (its display
    // name has commas).
    let head = |size: [usize; 3], c: &Config| {
        let mut line = dims(size);
        line.extend([
            c.key.into(),
            match c.precision {
                Precision::F32 => "f32".into(),
                Precision::F64 => "f64".into(),
            },
            match c.layout {
                Layout::Soa => "soa".into(),
                Layout::Aos => "aos".into(),
            },
            if c.tuned { "tuned" } else { "fixed" }.into(),
        ]);
        line
    };
    let rows: Vec<Vec<String>> = solves
        .iter()
        .map(|(r, f64_seconds)| {
            let mut line = head(r.size, &r.config);
            line.extend([
                r.levels.to_string(),
                r.smooth.to_string(),
                r.iterations.to_string(),
                r.vcycles.to_string(),
            ]);
            line.extend(numbers(&[
                r.seconds,
                r.seconds / r.iterations.max(1) as f64,
                f64_seconds.map_or(f64::NAN, |f| f / r.seconds),
                r.setup,
                r.tuning,
                r.error,
                copy,
            ]));
            line
        })
        .collect();
    write_csv(
        path,
        "nx,ny,nz,config,multigrid_precision,layout,launch,levels,smooth,iterations,vcycles,solve_s,s_per_iteration,speedup_over_f64,setup_s,tuning_s,rel_l2_error,copy_gb_per_s",
        &rows,
    )
    .map_err(io)?;
    let rows: Vec<Vec<String>> = levels
        .iter()
        .map(|r| {
            let mut line = head(r.size, &r.config);
            line.push(r.smooth.to_string());
            line.push(r.level.to_string());
            line.extend(dims(r.cells));
            line.push(r.launches.to_string());
            line.extend(numbers(&[
                r.ms,
                r.bytes,
                r.floor_ms,
                r.floor_ms / r.ms,
                copy,
            ]));
            line
        })
        .collect();
    let level_path = beside(path, "levels");
    write_csv(
        &level_path,
        "nx,ny,nz,config,multigrid_precision,layout,launch,smooth,level,level_nx,level_ny,level_nz,launches_per_vcycle,ms_per_vcycle,bytes_per_vcycle,floor_ms,of_floor,copy_gb_per_s",
        &rows,
    )
    .map_err(io)?;
    let rows: Vec<Vec<String>> = sweeps
        .iter()
        .map(|r| {
            let mut line = head(r.size, &r.config);
            line.push(format!("\"{}\"", r.launch));
            let gbs = r.needed / (r.ms * 1e-3) / 1e9;
            line.extend(numbers(&[
                r.ms,
                r.needed,
                gbs,
                gbs / copy,
                r.sectors / (r.ms * 1e-3) / 1e9,
                copy,
            ]));
            line
        })
        .collect();
    let sweep_path = beside(path, "smoother");
    write_csv(
        &sweep_path,
        "nx,ny,nz,config,multigrid_precision,layout,launch,launch_shape,ms_per_sweep,bytes_needed_per_sweep,gb_per_s,of_copy,sector_gb_per_s,copy_gb_per_s",
        &rows,
    )
    .map_err(io)?;
    println!(
        "wrote {}, {} and {}",
        path.display(),
        level_path.display(),
        sweep_path.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli::start();
    cli::exit(match &cli.command {
        Some(Command::Bench(b)) => bench(b),
        None => run(&cli.run),
    })
}
