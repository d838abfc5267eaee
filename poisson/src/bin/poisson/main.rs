//! `poisson`: the variable-coefficient pressure Poisson equation `-div(c grad p) = f` solved by CG in f64
//! preconditioned with a multigrid V-cycle in f32 (or f64), on the CPU or a GPU: a manufactured solution
//! (optionally with the thin vertical cells of an ocean grid) or your own coefficients and right-hand side;
//! and `poisson bench`, the time to solve in each precision and layout against the GPU's copy bandwidth.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Parser, Subcommand, ValueEnum};
use lattice_gpu_cli::{self as cli, parse_size3, progress, Placement};
use lattice_gpu_formats::csv::{numbers, write_csv};
use lattice_gpu_formats::npy::{read_npy_shaped, write_npy};
use lattice_gpu_formats::png::{significant, write_field_png, Axis, Picture};
use lattice_gpu_formats::IoError;
use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::engine::Variant;
use lattice_gpu_host::health;
use lattice_gpu_host::memory::Footprint;
use lattice_gpu_host::{
    DeviceAutoTuningLoopEngine, DeviceLoopEngine, Error as HostError, HostLoopEngine, LaunchShape,
    LoopEngine,
};
use lattice_gpu_poisson::multigrid::{
    check_cycle, max_levels, Cycle, Layout, Smoother, COARSE_SWEEPS, FUSED_CELLS,
};
use lattice_gpu_poisson::problem::{manufactured_error, manufactured_problem, Problem, Walls};
use lattice_gpu_poisson::solver::{
    check_stop, footprint as footprint_of, stop_for_signal, Precision, Report, Solver,
};
use lattice_gpu_poisson::{Error, Result};

mod bench;

use bench::{bench, BenchArgs};

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

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli::start();
    cli::exit(match &cli.command {
        Some(Command::Bench(b)) => bench(b),
        None => run(&cli.run),
    })
}
