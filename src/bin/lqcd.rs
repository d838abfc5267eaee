//! `lqcd`: Wilson fermions on a gauge configuration: even-odd BiCGStab solves on the GPU (or the CPU
//! reference), the pion correlator, the plaquette, and the benchmark of Doi's overhead-hiding variants.

use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, Parser, Subcommand, ValueEnum};
use lattice_gpu::cli::Placement;
use lattice_gpu::host::krylov::{
    grid_barrier_cost, launch_overhead, BiCgStab, Fusion, SolveOptions, SolveReport, SolveStatus,
    Variant,
};
use lattice_gpu::host::{DeviceBuffer, Error as HostError, Gpu};
use lattice_gpu::kernels::wilson::{FLOPS_PER_SITE, FUSED_BLOCK, T_SPLIT, Y_SPLIT, Z_SPLIT};
use lattice_gpu::lqcd::config::{load_gauge, save_gauge};
use lattice_gpu::lqcd::gauge::GaugeField;
use lattice_gpu::lqcd::geometry::Lattice;
use lattice_gpu::lqcd::gpu::{gpu_grid, solve_with, Block, EvenOdd, Recon, WilsonGpu, WilsonReal};
use lattice_gpu::lqcd::ildg::Precision as FilePrecision;
use lattice_gpu::lqcd::spinor::SpinorField;
use lattice_gpu::lqcd::{pion, reference, Error, Result};

/// Lattice QCD with Wilson fermions: solve D x = b by even-odd preconditioned BiCGStab on the GPU (or the
/// CPU reference without one), compute the pion correlator, measure the plaquette, and benchmark the
/// solver's ways of hiding CUDA launch overhead.
#[derive(Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// One solve with a random source; prints iterations, time, GFLOPS and the true residual.
    Solve(SolveArgs),
    /// 12 solves (every spin and colour of a point source at the origin) and the pion correlator.
    Propagator(PropagatorArgs),
    /// The average plaquette of a configuration (and optionally write it as ILDG).
    Plaquette(GaugeArgs),
    /// Dslash GFLOPS and solver time per iteration for every variant, against the copy bandwidth.
    Bench(BenchArgs),
}

#[derive(Args, Clone)]
struct GaugeArgs {
    /// Lattice X x Y x Z x T (all even), e.g. 8x8x8x16, or one number for N^4.
    #[arg(long, default_value = "8x8x8x16", value_parser = parse_dims4, conflicts_with = "gauge")]
    dims: [usize; 4],
    /// Gauge configuration file (ILDG/LIME); the lattice has its dimensions (no --dims).
    #[arg(long)]
    gauge: Option<PathBuf>,
    /// Seed of the random (Haar) gauge field, made when there is no --gauge.
    #[arg(long, default_value_t = 1, conflicts_with = "gauge")]
    seed: u64,
    /// Project the links of a loaded file onto SU(3) instead of refusing a file whose links are not.
    #[arg(long)]
    reunitarize: bool,
    /// Write the configuration to this ILDG file (f64).
    #[arg(long)]
    write_gauge: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Prec {
    F32,
    F64,
}

#[derive(Args, Clone)]
struct SolverArgs {
    #[command(flatten)]
    gauge: GaugeArgs,
    /// Hopping parameter, 0 < kappa < 0.25.
    #[arg(long, allow_hyphen_values = true, default_value_t = 0.12)]
    kappa: f64,
    /// Precision of the GPU solve.
    #[arg(long, value_enum, default_value_t = Prec::F64)]
    precision: Prec,
    /// How the host drives the GPU: sync, async, graph, waitkernel, streamwait.
    #[arg(long, default_value = "async")]
    variant: Variant,
    /// Relative residual to reach.
    #[arg(long, allow_hyphen_values = true, default_value_t = 1e-10)]
    tol: f64,
    /// Iteration limit.
    #[arg(long, default_value_t = 2000)]
    max_iter: u32,
    /// Iterations between residual reads (and progress lines).
    #[arg(long, default_value_t = 10)]
    check_every: u32,
    /// Every variant but sync: each iteration as one cooperative kernel (hopping terms, vector updates
    /// and reductions separated by grid barriers) instead of nine: auto (where the GPU holds every
    /// site at once: about 8^4 and below on an H100, where it is 3x faster; from 16^4 on it is slower,
    /// see `lqcd bench`), on or off.
    #[arg(long, default_value = "auto")]
    fused: Fusion,
    /// Antiperiodic boundary in t for the fermions.
    #[arg(long)]
    antiperiodic_t: bool,
    /// Complex numbers stored per link on the GPU: 12 (two rows, third rebuilt) or 18.
    #[arg(long, default_value = "12", value_parser = parse_recon)]
    recon: Recon,
    /// Where to run.
    #[arg(long, value_enum, default_value_t = Placement::Auto)]
    engine: Placement,
}

#[derive(Args)]
struct SolveArgs {
    #[command(flatten)]
    solver: SolverArgs,
    /// Seed of the random source.
    #[arg(long, default_value_t = 7)]
    source_seed: u64,
    /// Split the lattice over the ranks of the MPI job this process belongs to (start it with `mpirun -np
    /// N`) into blocks along t, then z, then y (see --grid): on GPUs one GPU per rank (a rank takes its
    /// node-local rank's GPU), even-odd BiCGStab with every sum over the ranks; on the CPU engine the
    /// reference solver. Rank 0 prints. Needs `--features mpi`.
    #[arg(long)]
    mpi: bool,
    /// The rank grid of a split run (--mpi or --gpus): ranks along y, z and t as `YxZxT` (e.g. 1x2x4),
    /// their product the number of ranks. Default: t takes the largest factor of the ranks it can hold,
    /// then z, then y.
    #[arg(long, value_name = "YxZxT", value_parser = parse_grid)]
    grid: Option<[usize; 3]>,
    /// Also cut these axes of a GPU split (a comma list of y, z and t) where the grid has one rank
    /// along them, the ghosts then coming from the block's own far side: what the split costs,
    /// measured on one GPU (as QUDA's --partition). The results are unchanged.
    #[arg(long, value_name = "AXES", value_parser = parse_cut)]
    cut: Option<[bool; 3]>,
    #[command(flatten)]
    split: lattice_gpu::cli::HaloArgs,
    /// Instead of one solve, time N iterations (the tolerance set out of reach) of every solver variant
    /// the halos allow, each after an untimed run, and M_hat alone: the strong-scaling figures of a
    /// split run, and the one-GPU baseline without --mpi/--gpus.
    #[arg(long, value_name = "N")]
    bench: Option<u32>,
}

#[derive(Args)]
struct PropagatorArgs {
    #[command(flatten)]
    solver: SolverArgs,
    /// Directory for pion.csv.
    #[arg(long, default_value = "lqcd-out")]
    output: PathBuf,
}

#[derive(Args)]
struct BenchArgs {
    /// Dslash lattices.
    #[arg(long, value_delimiter = ',', default_value = "16,24,32x32x32x64,48x48x48x96", value_parser = parse_dims4)]
    dslash: Vec<[usize; 4]>,
    /// Solver lattices.
    #[arg(long, value_delimiter = ',', default_value = "4,8,16,32x32x32x64,48x48x48x96", value_parser = parse_dims4)]
    solver: Vec<[usize; 4]>,
    /// Solver iterations timed per variant (fixed count: the tolerance is set unreachable).
    #[arg(long, default_value_t = 200)]
    iterations: u32,
    /// Iterations per residual read for the pipelined variants.
    #[arg(long, default_value_t = 20)]
    check_every: u32,
    /// CSV of the results.
    #[arg(long)]
    csv: Option<PathBuf>,
}

fn parse_dims4(s: &str) -> std::result::Result<[usize; 4], String> {
    let v = lattice_gpu::cli::parse_dims(s)?;
    match v.as_slice() {
        [n] => Ok([*n; 4]),
        [x, y, z, t] => Ok([*x, *y, *z, *t]),
        _ => Err(format!(
            "lattice `{s}` must be N or XxYxZxT (e.g. 8x8x8x16)"
        )),
    }
}

fn parse_grid(s: &str) -> std::result::Result<[usize; 3], String> {
    match lattice_gpu::cli::parse_dims(s)?.as_slice() {
        [y, z, t] => Ok([*y, *z, *t]),
        _ => Err(format!(
            "rank grid `{s}` must be YxZxT, the ranks along y, z and t (e.g. 1x2x4)"
        )),
    }
}

/// The rank grid `[1, py, pz, pt]` of a split run over `ranks` ranks: `--grid`, or the engine's
/// `default`.
fn rank_grid(
    a: &SolveArgs,
    ranks: usize,
    default: impl FnOnce() -> lattice_gpu::lqcd::Result<[usize; 4]>,
) -> Result<[usize; 4]> {
    let Some([y, z, t]) = a.grid else {
        return default();
    };
    if y * z * t != ranks {
        return Err(Error::InvalidParameter(format!(
            "--grid {y}x{z}x{t} places {} ranks, but the run has {ranks}: give a grid of {ranks} \
             ranks, or start as many",
            y * z * t
        )));
    }
    Ok([1, y, z, t])
}

fn parse_cut(s: &str) -> std::result::Result<[bool; 3], String> {
    let mut cut = [false; 3];
    for axis in s.split(',') {
        match axis.trim() {
            "y" => cut[0] = true,
            "z" => cut[1] = true,
            "t" => cut[2] = true,
            other => {
                return Err(format!(
                    "--cut `{other}`: give axes y, z and t, separated by commas (x is never cut)"
                ))
            }
        }
    }
    Ok(cut)
}

fn parse_recon(s: &str) -> std::result::Result<Recon, String> {
    match s {
        "12" => Ok(Recon::R12),
        "18" => Ok(Recon::R18),
        _ => Err(format!("--recon `{s}`: use 12 or 18")),
    }
}

fn main() -> ExitCode {
    lattice_gpu::cli::exit(run(Cli::parse()))
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Plaquette(a) => {
            // Prints the plaquette (and writes the file if asked).
            gauge_field(&a, false).map(|_| ())
        }
        Command::Solve(a) => solve(&a),
        Command::Propagator(a) => propagator(&a),
        Command::Bench(a) => bench(&a),
    }
}

/// The lattice and gauge field the options describe, with the numbers users compare across codes.
fn gauge_field(a: &GaugeArgs, antiperiodic_t: bool) -> Result<(Lattice, GaugeField)> {
    gauge_field_as(a, antiperiodic_t, true)
}

/// The gauge field of the options; `lead` prints what it is and writes `--write-gauge` (the other ranks
/// of a split run make the same field quietly).
fn gauge_field_as(
    a: &GaugeArgs,
    antiperiodic_t: bool,
    lead: bool,
) -> Result<(Lattice, GaugeField)> {
    let say = |line: String| {
        if lead {
            println!("{line}");
        }
    };
    let u = match &a.gauge {
        Some(path) => {
            let (u, info) = load_gauge(path, a.reunitarize, 1e-5)?;
            say(format!(
                "gauge: {} ({}x{}x{}x{}, {}-bit, checksum {}), max |U U^dag - 1| {:.1e}",
                path.display(),
                u.dims[0],
                u.dims[1],
                u.dims[2],
                u.dims[3],
                info.precision.bits(),
                info.checksum.map_or("none".to_string(), |c| c.to_string()),
                info.su3_violation
            ));
            u
        }
        None => {
            lattice_gpu::lqcd::geometry::check_dims(a.dims)?;
            let u = GaugeField::random(a.dims, a.seed);
            say(format!(
                "gauge: random SU(3) (Haar), seed {}, {}x{}x{}x{}",
                a.seed, a.dims[0], a.dims[1], a.dims[2], a.dims[3]
            ));
            u
        }
    };
    let lat = Lattice::new(u.dims, antiperiodic_t)?;
    say(format!("plaquette {:.12}", u.plaquette()));
    if let (Some(path), true) = (&a.write_gauge, lead) {
        save_gauge(path, &u, FilePrecision::F64)?;
        println!("wrote {}", path.display());
    }
    Ok((lat, u))
}

fn check(s: &SolverArgs) -> Result<()> {
    reference::check_kappa(s.kappa)?;
    if !(s.tol > 0.0 && s.tol < 1.0) {
        return Err(Error::InvalidParameter(format!(
            "--tol {} must be between 0 and 1 (e.g. 1e-10)",
            s.tol
        )));
    }
    if s.max_iter == 0 || s.check_every == 0 {
        return Err(Error::InvalidParameter(
            "--max-iter and --check-every must be at least 1".into(),
        ));
    }
    if s.precision == Prec::F32 && s.tol < 1e-6 {
        return Err(Error::InvalidParameter(format!(
            "--tol {:e} is below what f32 can reach (about 1e-6); use --precision f64 or a larger --tol",
            s.tol
        )));
    }
    Ok(())
}

/// One or more solves with the same operator: on the GPU in the chosen precision, or the CPU reference.
struct Solver {
    lat: Lattice,
    u: GaugeField,
    args: SolverArgs,
    gpu: Option<GpuSolver>,
}

enum GpuSolver {
    F32(BiCgStab<f32, EvenOdd<f32>>),
    F64(BiCgStab<f64, EvenOdd<f64>>),
}

impl Solver {
    fn new(args: &SolverArgs) -> Result<Self> {
        check(args)?;
        let (lat, u) = gauge_field(&args.gauge, args.antiperiodic_t)?;
        let gpu = match args.engine.gpu("the CPU reference solver (f64)")? {
            None => None,
            Some(g) => {
                println!("GPU: {}", g.name());
                Some(match args.precision {
                    Prec::F32 => GpuSolver::F32(make(&g, &lat, &u, args)?),
                    Prec::F64 => GpuSolver::F64(make(&g, &lat, &u, args)?),
                })
            }
        };
        Ok(Self {
            lat,
            u,
            args: args.clone(),
            gpu,
        })
    }

    /// Solves `D x = b`; returns `x`, iterations, seconds, the true residual, and whether each
    /// iteration was one kernel.
    fn solve(
        &mut self,
        b: &SpinorField,
        label: &str,
    ) -> Result<(SpinorField, u32, f64, f64, bool)> {
        let a = &self.args;
        let opt = SolveOptions {
            tol: a.tol,
            max_iter: a.max_iter,
            variant: a.variant,
            check_every: a.check_every,
            fused: a.fused,
        };
        let mut progress =
            |it: usize, r: f64| println!("  {label} iteration {it:5}  residual {r:.3e}");
        let (x, report, res) = match &mut self.gpu {
            Some(GpuSolver::F32(s)) => solve_with(s, b, &opt, &mut progress)?,
            Some(GpuSolver::F64(s)) => solve_with(s, b, &opt, &mut progress)?,
            None => {
                let t = Instant::now();
                let (x, solve, res) = reference::solve_eo(
                    &self.lat,
                    &self.u,
                    a.kappa,
                    b,
                    a.tol,
                    a.max_iter as usize,
                )?;
                for &(it, r) in solve
                    .history
                    .iter()
                    .filter(|h| h.0 % a.check_every as usize == 0)
                {
                    progress(it, r);
                }
                return Ok((
                    x,
                    solve.iterations as u32,
                    t.elapsed().as_secs_f64(),
                    res,
                    false,
                ));
            }
        };
        outcome(&report, a.tol)?;
        Ok((x, report.iterations, report.seconds, res, report.fused))
    }

    /// The summary line of `M_hat`'s time on the GPU, if the solve runs there.
    fn operator_line(&self, b: &SpinorField) -> Result<Option<String>> {
        let ms = match &self.gpu {
            Some(GpuSolver::F32(s)) => s.operator().time_apply(b, OPERATOR_REPS)?,
            Some(GpuSolver::F64(s)) => s.operator().time_apply(b, OPERATOR_REPS)?,
            None => return Ok(None),
        };
        Ok(Some(operator_line(&self.lat, ms)))
    }
}

/// Flops of one even-odd BiCGStab iteration on `lat`: two M_hat applications, each two hopping terms
/// on half the lattice.
fn flops_per_iteration(lat: &Lattice) -> f64 {
    4.0 * FLOPS_PER_SITE as f64 * lat.half_volume() as f64
}

fn make<T: WilsonReal>(
    g: &Arc<Gpu>,
    lat: &Lattice,
    u: &GaugeField,
    a: &SolverArgs,
) -> Result<BiCgStab<T, EvenOdd<T>>> {
    let w = WilsonGpu::<T>::new(g, lat, u, a.kappa, a.recon)?;
    Ok(BiCgStab::new(g, EvenOdd(w))?)
}

/// Turns a stopped-but-not-converged report into the error that says so.
fn outcome(r: &SolveReport, tol: f64) -> Result<()> {
    match r.status {
        SolveStatus::Converged => Ok(()),
        SolveStatus::MaxIter => Err(Error::NotConverged {
            iterations: r.iterations as usize,
            residual: r.residual,
            tolerance: tol,
            history: r.history.clone(),
        }),
        SolveStatus::Breakdown(what) => Err(Error::Breakdown {
            iteration: r.iterations as usize,
            what: what.to_string(),
        }),
    }
}

fn solve(a: &SolveArgs) -> Result<()> {
    // --bench sets its own tolerance, out of reach; the one given need not suit the precision.
    let bench_args;
    let a = if a.bench.is_some() {
        bench_args = SolveArgs {
            solver: SolverArgs {
                tol: 0.5,
                ..a.solver.clone()
            },
            split: a.split.clone(),
            ..*a
        };
        &bench_args
    } else {
        a
    };
    a.split
        .check_launch(a.mpi)
        .map_err(Error::InvalidParameter)?;
    if (a.grid.is_some() || a.cut.is_some()) && !a.mpi && a.split.gpus.is_none() {
        return Err(Error::InvalidParameter(
            "--grid and --cut shape a split run: add --mpi (under mpirun) or --gpus N".into(),
        ));
    }
    if let Some(n) = a.split.gpus {
        return lattice_gpu::cli::on_gpus(n as usize, usize::MAX, "TODO(issue 34 A.5)", |c| {
            solve_split(a, Rc::new(c.clone()))
        });
    }
    if a.mpi {
        #[cfg(feature = "mpi")]
        return solve_split(a, Rc::new(lattice_gpu::host::comm::Mpi::init()?));
        #[cfg(not(feature = "mpi"))]
        return Err(Error::InvalidParameter(lattice_gpu::cli::NO_MPI.into()));
    }
    let mut s = Solver::new(&a.solver)?;
    let b = SpinorField::random(s.lat.dims, a.source_seed);
    if let Some(n) = a.bench {
        let c = a.solver.check_every;
        match &mut s.gpu {
            Some(GpuSolver::F32(g)) => bench_variants(g, &b, &s.lat, n, c, true)?,
            Some(GpuSolver::F64(g)) => bench_variants(g, &b, &s.lat, n, c, true)?,
            None => {
                return Err(Error::InvalidParameter(
                    "--bench times the GPU solver: run on a GPU (--engine device)".into(),
                ))
            }
        }
        return Ok(());
    }
    let (x, it, secs, res, fused) = s.solve(&b, "solve")?;
    let gflops = flops_per_iteration(&s.lat) * it as f64 / secs / 1e9;
    println!(
        "converged: {it} iterations in {secs:.4} s ({:.1} us/iteration{}, {gflops:.1} GFLOPS at {} flops/site/hopping term), |x| = {:.12e}, true residual |b - D x|/|b| = {res:.3e}",
        secs / it.max(1) as f64 * 1e6,
        if fused { ", one kernel each" } else { "" },
        FLOPS_PER_SITE,
        norm(&x.data),
    );
    if let Some(line) = s.operator_line(&b)? {
        println!("{line}");
    }
    Ok(())
}

/// How a split solve fills its ghosts.
fn ghosts(split: &lattice_gpu::cli::HaloArgs) -> &'static str {
    use lattice_gpu::cli::HaloTransport;
    match (split.halos, split.no_overlap) {
        (HaloTransport::Host, _) => "ghosts through host memory before each hopping term",
        (HaloTransport::Nccl, true) => "ghosts through NCCL before each hopping term (no overlap)",
        (HaloTransport::Nccl, false) => "ghosts through NCCL behind the inner sites",
    }
}

/// `solve --bench N`: each variant's time per iteration over `n` iterations (after an untimed run that
/// captures the graphs), on the even-odd system of `b`, then `M_hat` alone; `lead` prints. `lat` is the
/// whole lattice (the GFLOPS are of all ranks together).
fn bench_variants<T: WilsonReal>(
    solver: &mut BiCgStab<T, EvenOdd<T>>,
    b: &SpinorField,
    lat: &Lattice,
    n: u32,
    check_every: u32,
    lead: bool,
) -> Result<()> {
    use lattice_gpu::host::krylov::DeviceOperator;
    let src = solver.operator().0.upload_parity(b, 0)?;
    let mut x = solver.operator().0.parity_buffer()?;
    let staged = solver.operator().ranks().is_some_and(|r| r.waits_for_gpu());
    let flops = flops_per_iteration(lat);
    for variant in Variant::ALL {
        if staged && !matches!(variant, Variant::Sync | Variant::Async) {
            continue;
        }
        let opt = SolveOptions {
            tol: f64::MIN_POSITIVE,
            max_iter: n.max(1),
            variant,
            check_every: check_every.min(lattice_gpu::host::krylov::MAX_HELD_ITERATIONS),
            fused: Fusion::Auto,
        };
        solver.solve(&src, &mut x, &opt, &mut |_, _| {})?;
        let r = solver.solve(&src, &mut x, &opt, &mut |_, _| {})?;
        if let SolveStatus::Breakdown(what) = r.status {
            return Err(Error::Breakdown {
                iteration: r.iterations as usize,
                what: what.to_string(),
            });
        }
        let per = r.seconds / r.iterations.max(1) as f64;
        if lead {
            println!(
                "bench {variant}: {:.1} us/iteration, {:.1} GFLOPS ({} iterations{})",
                per * 1e6,
                flops / per / 1e9,
                r.iterations,
                if r.fused { ", one kernel each" } else { "" }
            );
        }
    }
    let ms = solver.operator().time_apply(b, OPERATOR_REPS)?;
    if lead {
        println!("{}", operator_line(lat, ms));
    }
    Ok(())
}

/// Applications of `M_hat` timed for its summary line.
const OPERATOR_REPS: u32 = 50;

/// What one application of `M_hat` (two hopping terms over half the lattice each) taking `ms` means.
fn operator_line(lat: &Lattice, ms: f64) -> String {
    let flops = 2.0 * FLOPS_PER_SITE as f64 * lat.half_volume() as f64;
    format!(
        "operator M_hat (two hopping terms, ghost exchanges included when split): {:.1} us per application, {:.1} GFLOPS",
        ms * 1e3,
        flops / ms / 1e6
    )
}

fn norm(x: &[num_complex::Complex64]) -> f64 {
    x.iter().map(|z| z.norm_sqr()).sum::<f64>().sqrt()
}

/// `solve --mpi`: the lattice split over the MPI ranks (every rank makes the same gauge field and source
/// from the seeds) into blocks along t, z and y: on GPUs, else the CPU reference.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
fn solve_split<C: lattice_gpu::host::comm::Communicator + 'static>(
    a: &SolveArgs,
    comm: Rc<C>,
) -> Result<()> {
    let args = &a.solver;
    check(args)?;
    lattice_gpu::cli::same_options(&*comm).map_err(Error::InvalidParameter)?;
    let gpu = args.engine.gpu("the CPU reference split over the ranks")?;
    a.split
        .check(gpu.is_some())
        .map_err(Error::InvalidParameter)?;
    let lead = comm.rank() == 0;
    let (lat, u) = gauge_field_as(&args.gauge, args.antiperiodic_t, lead)?;
    let b = SpinorField::random(lat.dims, a.source_seed);
    if let Some(g) = gpu {
        return match args.precision {
            Prec::F32 => solve_split_gpu::<f32, C>(a, &comm, &g, &lat, &u, &b),
            Prec::F64 => solve_split_gpu::<f64, C>(a, &comm, &g, &lat, &u, &b),
        };
    }
    if a.cut.is_some() {
        return Err(Error::InvalidParameter(
            "--cut is for the GPU split: run it on GPUs (--engine device)".into(),
        ));
    }
    let comm = &*comm;
    let g = rank_grid(a, comm.size(), || {
        lattice_gpu::lqcd::distributed::rank_grid(lat.dims, comm.size(), 1)
    })?;
    let d = lattice_gpu::lqcd::distributed::Distributed::on_grid(comm, &lat, &u, g)?;
    let t = Instant::now();
    let (x, solve, res) = d.solve(
        args.kappa,
        &d.scatter(&b.data),
        args.tol,
        args.max_iter as usize,
    )?;
    let x = d.gather(&x)?;
    if lead {
        println!(
            "split over {} ranks (y x z x t: {}x{}x{}): converged in {} iterations ({:.4} s), |x| = {:.12e}, true residual |b - D x|/|b| = {res:.3e}",
            comm.size(),
            g[1],
            g[2],
            g[3],
            solve.iterations,
            t.elapsed().as_secs_f64(),
            norm(&x),
        );
    }
    Ok(())
}

/// `solve --mpi` on GPUs: this rank's block, ghosts and sums through NCCL or host memory.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
fn solve_split_gpu<T: WilsonReal, C: lattice_gpu::host::comm::Communicator + 'static>(
    a: &SolveArgs,
    comm: &Rc<C>,
    g: &Arc<Gpu>,
    lat: &Lattice,
    u: &GaugeField,
    b: &SpinorField,
) -> Result<()> {
    use lattice_gpu::cli::HaloTransport;
    use lattice_gpu::host::split::{DeviceRanks, HostStaged};
    let args = &a.solver;
    let ranks: Box<dyn DeviceRanks<T>> = match a.split.halos {
        HaloTransport::Host => Box::new(HostStaged(comm.clone())),
        #[cfg(feature = "nccl")]
        HaloTransport::Nccl => Box::new(lattice_gpu::host::nccl::Nccl::new(&**comm, g)?),
        #[cfg(not(feature = "nccl"))]
        HaloTransport::Nccl => {
            return Err(Error::InvalidParameter(lattice_gpu::cli::NO_NCCL.into()))
        }
    };
    let size = comm.size();
    let grid = rank_grid(a, size, || gpu_grid(lat.dims, size))?;
    let cuts: Vec<usize> = (1..4)
        .filter(|&axis| a.cut.is_some_and(|c| c[axis - 1]))
        .collect();
    let block = Block::new(*lat, grid, comm.rank())?.cutting(&cuts)?;
    let word = block.split();
    let cut: Vec<&str> = [(Y_SPLIT, "y"), (Z_SPLIT, "z"), (T_SPLIT, "t")]
        .into_iter()
        .filter(|&(flag, _)| word & flag != 0)
        .map(|(_, axis)| axis)
        .collect();
    let split = format!(
        "split over {size} GPUs (y x z x t: {}x{}x{}, cut along {})",
        grid[1],
        grid[2],
        grid[3],
        if cut.is_empty() {
            "none".to_string()
        } else {
            cut.join(", ")
        }
    );
    let w = WilsonGpu::<T>::split(
        g,
        block,
        u,
        args.kappa,
        args.recon,
        ranks,
        !a.split.no_overlap,
    )?;
    let mut solver = BiCgStab::new(g, EvenOdd(w))?;
    let lead = comm.rank() == 0;
    if let Some(n) = a.bench {
        if lead {
            println!("{split}, {}", ghosts(&a.split));
        }
        return bench_variants(&mut solver, b, lat, n, args.check_every, lead);
    }
    let opt = SolveOptions {
        tol: args.tol,
        max_iter: args.max_iter,
        variant: args.variant,
        check_every: args.check_every,
        fused: args.fused,
    };
    let mut progress = |it: usize, r: f64| {
        if lead {
            println!("  solve iteration {it:5}  residual {r:.3e}");
        }
    };
    let (x, report, res) = solve_with(&mut solver, b, &opt, &mut progress)?;
    outcome(&report, args.tol)?;
    // Each rank holds its own sites of x; the norm is summed over the ranks.
    let x_norm = comm.sum(norm(&x.data).powi(2))?.sqrt();
    if lead {
        let it = report.iterations;
        let secs = report.seconds;
        let gflops = flops_per_iteration(lat) * it as f64 / secs / 1e9;
        println!(
            "{split}, {} ({} variant): converged in {it} iterations ({secs:.4} s, {:.1} us/iteration, {gflops:.1} GFLOPS), |x| = {x_norm:.12e}, true residual |b - D x|/|b| = {res:.3e}",
            ghosts(&a.split),
            args.variant,
            secs / it.max(1) as f64 * 1e6,
        );
    }
    let ms = solver.operator().time_apply(b, OPERATOR_REPS)?;
    if lead {
        println!("{}", operator_line(lat, ms));
    }
    Ok(())
}

fn propagator(a: &PropagatorArgs) -> Result<()> {
    lattice_gpu::cli::make_output_dir(&a.output)?;
    let mut s = Solver::new(&a.solver)?;
    let mut solutions = Vec::with_capacity(12);
    let t = Instant::now();
    for spin in 0..4 {
        for colour in 0..3 {
            let b = SpinorField::point_source(s.lat.dims, spin, colour);
            let label = format!("source s={spin} c={colour}");
            let (x, it, _, res, _) = s.solve(&b, &label)?;
            println!("{label}: {it} iterations, true residual {res:.2e}");
            solutions.push(x);
        }
    }
    let c = pion::correlator(&s.lat, &solutions);
    let m = pion::effective_mass(&c);
    println!(
        "12 solves in {:.3} s\n t  C(t)                    m_eff(t)",
        t.elapsed().as_secs_f64()
    );
    for (t, v) in c.iter().enumerate() {
        match m.get(t) {
            Some(mt) => println!("{t:2}  {v:.16e}  {mt:.6}"),
            None => println!("{t:2}  {v:.16e}"),
        }
    }
    let path = a.output.join("pion.csv");
    pion::write_csv(&path, &c, &m)?;
    println!("wrote {}", path.display());
    Ok(())
}

fn bench(a: &BenchArgs) -> Result<()> {
    let g = lattice_gpu::cli::bench_gpu("lqcd", 0)?;
    let copy = g.copy_bandwidth(1 << 30, 20)?;
    println!("GPU: {}; device-to-device copy {copy:.1} GB/s", g.name());
    let mut csv = String::from("kind,lattice,precision,variant,ms,gflops,gbs,of_copy,iterations\n");
    println!("\ndslash (one hopping term on one parity): GFLOPS at QUDA's 1320 flops/site; GB/s in QUDA's");
    println!("byte model (8 spinors + 8 links per site, no cache reuse); DRAM GB/s counts the least traffic");
    println!("(links, input and output once each), and its ratio to the copy bandwidth is the roofline fraction");
    println!("lattice       prec recon  us/call   GFLOPS  QUDA GB/s  DRAM GB/s  of copy");
    for &dims in &a.dslash {
        let lat = Lattice::new(dims, false)?;
        let u = GaugeField::random(dims, 3);
        let psi = SpinorField::random(dims, 4);
        for prec in [Prec::F32, Prec::F64] {
            for recon in [Recon::R18, Recon::R12] {
                let row = match prec {
                    Prec::F32 => bench_dslash::<f32>(&g, &lat, &u, &psi, recon)?,
                    Prec::F64 => bench_dslash::<f64>(&g, &lat, &u, &psi, recon)?,
                };
                let (ms, gflops, quda_gbs, gbs) = row;
                let name = dims_name(dims);
                println!(
                    "{name:12} {:4} {:>5} {:8.1} {gflops:8.0} {quda_gbs:10.0} {gbs:10.0} {:7.1}%",
                    prec_name(prec),
                    recon.name(),
                    ms * 1e3,
                    100.0 * gbs / copy
                );
                csv.push_str(&format!(
                    "dslash,{name},{},r{},{ms},{gflops},{gbs},{},\n",
                    prec_name(prec),
                    recon.name(),
                    gbs / copy
                ));
            }
        }
    }
    let (host_us, gpu_us) = launch_overhead(&g)?;
    println!(
        "\nlaunch overhead: {host_us:.2} us of host time per kernel launch, {gpu_us:.2} us of GPU time per empty kernel queued ahead"
    );
    csv.push_str(&format!(
        "launch,host,,,{},,,,\nlaunch,gpu,,,{},,,,\n",
        host_us / 1e3,
        gpu_us / 1e3
    ));
    // What the fused iteration is made of: a cooperative launch and grid barriers (7 per iteration).
    for blocks in [8, g.sm_count()] {
        let (launch_us, barrier_us) = grid_barrier_cost(&g, blocks, FUSED_BLOCK)?;
        println!(
            "grid of {blocks} blocks of {FUSED_BLOCK}: {launch_us:.2} us of GPU time per empty cooperative launch queued ahead, {barrier_us:.2} us per grid barrier"
        );
        csv.push_str(&format!(
            "cooperative_launch,{blocks} blocks,,,{},,,,\ngrid_barrier,{blocks} blocks,,,{},,,,\n",
            launch_us / 1e3,
            barrier_us / 1e3
        ));
    }
    println!(
        "\nsolver (f32, recon 12, {} iterations, reads every {}): time per iteration",
        a.iterations, a.check_every
    );
    println!("lattice       variant            us/iter  kernels us/iter  vs sync");
    for &dims in &a.solver {
        let lat = Lattice::new(dims, false)?;
        let u = GaugeField::random(dims, 1);
        let b = SpinorField::random(dims, 2);
        let w = WilsonGpu::<f32>::new(&g, &lat, &u, 0.12, Recon::R12)?;
        let mut solver = BiCgStab::new(&g, EvenOdd(w))?;
        let b_e = solver.operator().0.upload_parity(&b, 0)?;
        let mut x_e = solver.operator().0.parity_buffer()?;
        let mut sync_us = 0.0;
        // GPU time per iteration as nine kernels, and as one fused kernel.
        let kernel_us = [
            solver.kernel_ms_per_iteration(&b_e, 32, false)? * 1e3,
            solver.kernel_ms_per_iteration(&b_e, 32, true)? * 1e3,
        ];
        // Each variant as nine kernels per iteration, then (all but sync) as one fused kernel.
        let runs = Variant::ALL
            .map(|v| (v, false))
            .into_iter()
            .chain(Variant::ALL.into_iter().skip(1).map(|v| (v, true)));
        for (variant, fused) in runs {
            let kernels = kernel_us[fused as usize];
            let opt = SolveOptions {
                // Unreachable: every variant runs exactly `iterations`.
                tol: f64::MIN_POSITIVE,
                max_iter: a.iterations,
                variant,
                check_every: a.check_every,
                fused: if fused { Fusion::On } else { Fusion::Off },
            };
            // Once to capture graphs and warm up, once timed; straight on M_hat with the even half of
            // `b`, so no host packing is timed or repeated.
            solver.solve(&b_e, &mut x_e, &opt, &mut |_, _| {})?;
            let r = solver.solve(&b_e, &mut x_e, &opt, &mut |_, _| {})?;
            let us = r.seconds / r.iterations.max(1) as f64 * 1e6;
            if variant == Variant::Sync {
                sync_us = us;
            }
            let name = dims_name(dims);
            let label = match fused {
                true => format!("{}+fused", variant.name()),
                false => variant.name().to_string(),
            };
            println!(
                "{name:12} {label:16} {us:9.1} {:16.1} {:7.2}x",
                kernels,
                sync_us / us
            );
            csv.push_str(&format!(
                "solver,{name},f32,{label},{},,,,{}\n",
                us / 1e3,
                r.iterations
            ));
        }
    }
    if let Some(path) = &a.csv {
        lattice_gpu::host::io::write_atomically(path, |w| w.write_all(csv.as_bytes()))?;
    }
    Ok(())
}

fn dims_name(d: [usize; 4]) -> String {
    format!("{}x{}x{}x{}", d[0], d[1], d[2], d[3])
}

fn prec_name(p: Prec) -> &'static str {
    match p {
        Prec::F32 => "f32",
        Prec::F64 => "f64",
    }
}

/// (ms per call, GFLOPS, GB/s in QUDA's model, least-traffic DRAM GB/s) of one hopping term on one
/// parity, event-timed over a batch.
fn bench_dslash<T: WilsonReal>(
    g: &Arc<Gpu>,
    lat: &Lattice,
    u: &GaugeField,
    psi: &SpinorField,
    recon: Recon,
) -> Result<(f64, f64, f64, f64)> {
    let w = WilsonGpu::<T>::new(g, lat, u, 0.12, recon)?;
    let inp = w.upload_parity(psi, 1)?;
    let out: DeviceBuffer<T> = w.parity_buffer()?;
    let call = || w.hopping(&out, 0, &inp, None, 1.0, std::ptr::null());
    call()?;
    let once = g.time_ms(|| call().map_err(HostError::from))?;
    let reps = ((20.0 / once.max(1e-3)) as usize).clamp(10, 2000);
    let mut times = (0..5)
        .map(|_| {
            g.time_ms(|| {
                for _ in 0..reps {
                    call().map_err(HostError::from)?;
                }
                Ok(())
            })
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    times.sort_by(f64::total_cmp);
    let ms = times[2] / reps as f64;
    let per_s = |x: u64| x as f64 / (ms * 1e-3) / 1e9;
    Ok((
        ms,
        per_s(w.hopping_flops()),
        per_s(w.hopping_bytes()),
        per_s(w.hopping_min_bytes(false)),
    ))
}
