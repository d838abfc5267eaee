//! `lqcd`: Wilson fermions on a gauge configuration: even-odd BiCGStab solves on the GPU (or the CPU
//! reference), the pion correlator, the plaquette, and the benchmark of Doi's overhead-hiding variants.

use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, Parser, Subcommand, ValueEnum};
use lattice_gpu_cli::Placement;
use lattice_gpu_formats::checkpoint::{Checkpoint, Saver, Written};
use lattice_gpu_host::comm::{Communicator, Solo};
use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::engine::tuner::param;
use lattice_gpu_host::engine::Tuned;
use lattice_gpu_host::health::Verdict;
use lattice_gpu_host::memory::{self, Footprint};
use lattice_gpu_host::solvers::bicgstab::{
    BiCgStab, DeviceOperator, Fusion, OverheadHiding, SolveOptions, SolveReport, SolveStatus,
    SolverPrecision,
};
use lattice_gpu_host::solvers::reliable::{
    Method, MixedBiCgStab, MixedOptions, MixedReport, DEFAULT_DELTA,
};
use lattice_gpu_host::split::{DeviceRanks, HostStaged};
use lattice_gpu_host::{Error as HostError, Gpu};
use lattice_gpu_kernels::wilson::{Fixed, Half, FLOPS_PER_SITE, T_CUT, Y_CUT, Z_CUT};
use lattice_gpu_lqcd::checkpoint::{self, Progress, SOURCES};
use lattice_gpu_lqcd::clover::{check_csw, solve_clover_eo_checked, CloverField};
use lattice_gpu_lqcd::clover_gpu::{
    clover_len, solve_clover_mixed_with, solve_clover_with, CloverEvenOdd, CloverGpu, CloverReal,
    CloverStorage,
};
use lattice_gpu_lqcd::config::{gauge_dims, load_gauge, save_gauge};
use lattice_gpu_lqcd::gauge::{GaugeField, Su3};
use lattice_gpu_lqcd::geometry::{check_dims, Lattice, SPINOR_LEN};
use lattice_gpu_lqcd::gpu::{
    gauge_len, gpu_grid, parity_len, parity_slots, solve_mixed_with, solve_with, Block, EvenOdd,
    Recon, WilsonGpu, WilsonReal, WilsonStorage,
};
use lattice_gpu_lqcd::ildg::Precision as FilePrecision;
use lattice_gpu_lqcd::spinor::SpinorField;
use lattice_gpu_lqcd::{pion, reference, Error, Result};
use num_complex::Complex64;

mod bench;
mod bench_mixed;
use bench::{bench, BenchArgs};
use bench_mixed::{bench_mixed, BenchMixedArgs};

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
    /// 12 solves (every spin and colour of a point source at the origin), the pion correlator and its
    /// effective mass, with a checkpoint after each solve (--resume continues a stopped run).
    Propagator(PropagatorArgs),
    /// The average plaquette of a configuration (and optionally write it as ILDG).
    Plaquette(GaugeArgs),
    /// Dslash GFLOPS and solver time per iteration for every variant, against the copy bandwidth.
    Bench(BenchArgs),
    /// Time to a 1e-10 solution: all-f64 BiCGStab against mixed f32/f64 with reliable updates (GPU).
    BenchMixed(BenchMixedArgs),
}

#[derive(Args, Clone)]
struct GaugeArgs {
    /// Lattice X x Y x Z x T (all even), e.g. 8x8x8x16, or one number for N^4.
    #[arg(long, default_value = "8x8x8x16", allow_hyphen_values = true, value_parser = parse_dims4,
          conflicts_with = "gauge")]
    dims: [usize; 4],
    /// Gauge configuration file (ILDG/LIME); the lattice has its dimensions (no --dims).
    #[arg(long)]
    gauge: Option<PathBuf>,
    /// Seed of the random (Haar) gauge field, made when there is no --gauge.
    #[arg(long, default_value_t = 1, conflicts_with = "gauge", allow_hyphen_values = true,
          value_parser = parse_seed)]
    seed: u64,
    /// Project the links of a loaded file onto SU(3) instead of refusing a file whose links are not.
    #[arg(long)]
    reunitarize: bool,
    /// Write the configuration to this ILDG file (f64), at the end of a successful run (atomically:
    /// an interrupted or failed run leaves the file as it was).
    #[arg(long)]
    write_gauge: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Prec {
    F32,
    F64,
}

/// The precision of a mixed-precision solve's inner iterations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Sloppy {
    F64,
    F32,
    /// IEEE binary16 with a norm per site, f32 arithmetic.
    Half,
    /// QUDA's 16-bit fixed point with a norm per site (and per clover site), f32 arithmetic.
    Fixed,
}

impl Sloppy {
    /// The outer precision `p` iterating in itself.
    fn of(p: Prec) -> Self {
        match p {
            Prec::F32 => Sloppy::F32,
            Prec::F64 => Sloppy::F64,
        }
    }

    /// The name in tables and summaries.
    fn name(self) -> &'static str {
        match self {
            Sloppy::F64 => "f64",
            Sloppy::F32 => "f32",
            Sloppy::Half => "half",
            Sloppy::Fixed => "fixed",
        }
    }

    /// Bytes a stored real takes (a link's or clover entry's; a 16-bit spinor site adds its norm).
    fn bytes(self) -> usize {
        match self {
            Sloppy::F64 => 8,
            Sloppy::F32 => 4,
            Sloppy::Half | Sloppy::Fixed => 2,
        }
    }

    /// Numbers of one packed clover parity of `lat` (a fixed-point site holds its factor too).
    fn clover_len(self, lat: &Lattice) -> usize {
        match self {
            Sloppy::Fixed => clover_len::<Fixed>(lat),
            _ => clover_len::<f64>(lat),
        }
    }
}

#[derive(Args, Clone)]
struct SolverArgs {
    #[command(flatten)]
    gauge: GaugeArgs,
    /// Hopping parameter, 0 < kappa < 0.25.
    #[arg(long, allow_hyphen_values = true, default_value_t = 0.12)]
    kappa: f64,
    /// Clover coefficient c_sw: 0 solves the Wilson operator; above 0 the Wilson-clover
    /// (Sheikholeslami-Wohlert) one, D = A - kappa H (1 is the tree-level value). Clover solves run
    /// BiCGStab in one precision on one GPU (or the CPU).
    #[arg(long, allow_hyphen_values = true, default_value_t = 0.0)]
    csw: f64,
    /// Precision of the GPU solve: of the solution and of the true residual that decides convergence
    /// (the outer precision).
    #[arg(long, value_enum, default_value_t = Prec::F64)]
    precision: Prec,
    /// Precision of the inner (sloppy) iterations on the GPU: f64, f32, half (IEEE binary16 storage
    /// with f32 arithmetic) or fixed (QUDA's 16-bit fixed point, f32 arithmetic: 15 bits a value where
    /// binary16 keeps 11, for the clover operator's harder solves); 16-bit under --precision f64 only,
    /// Wilson and clover; BiCGStab only in practice: CGNR in 16 bits stalls on rough fields. Default: the outer --precision, no mixed precision. A coarser one iterates in it with reliable updates in the
    /// outer precision (Clark et al. 2010): whenever the iterated residual has fallen by --delta, the
    /// true residual is recomputed and replaces it.
    #[arg(long, value_enum)]
    sloppy: Option<Sloppy>,
    /// Reliable updates: the factor (0 < delta < 1) by which the iterated residual falls below its
    /// largest since the last update before the next one.
    #[arg(long, default_value_t = DEFAULT_DELTA, allow_hyphen_values = true)]
    delta: f64,
    /// Krylov method on the GPU: bicgstab, or cgnr (conjugate gradients on M_hat^dag M_hat, with
    /// M_hat^dag = g5 M_hat g5; converges on |b - M_hat x| like BiCGStab, in more iterations, but
    /// never breaks down).
    #[arg(long, default_value = "bicgstab")]
    solver: Method,
    /// How the host drives the GPU: sync, async, graph, waitkernel, streamwait.
    #[arg(long, default_value = "async")]
    variant: OverheadHiding,
    /// Relative residual to reach.
    #[arg(long, allow_hyphen_values = true, default_value_t = 1e-10)]
    tol: f64,
    /// Iteration limit.
    #[arg(long, default_value_t = 2000, allow_hyphen_values = true, value_parser = parse_count)]
    max_iter: u32,
    /// Iterations between residual reads (and progress lines).
    #[arg(long, default_value_t = 10, allow_hyphen_values = true, value_parser = parse_count)]
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
    #[command(flatten)]
    tuning: TuningArgs,
}

impl SolverArgs {
    /// Whether the GPU solve goes through the reliable-update driver: a sloppy precision coarser
    /// than the outer one, or CGNR (whose convergence is judged on the true residual).
    fn mixed(&self) -> bool {
        self.solver == Method::Cgnr || self.sloppy() != Sloppy::of(self.precision)
    }

    /// Whether the operator is Wilson-clover (`--csw` above 0) rather than Wilson.
    fn clover(&self) -> bool {
        self.csw > 0.0
    }

    /// The operator's name for the summaries.
    fn operator_name(&self) -> String {
        match self.clover() {
            true => format!("Wilson-clover, c_sw = {}, kappa = {}", self.csw, self.kappa),
            false => format!("Wilson, kappa = {}", self.kappa),
        }
    }

    /// Refuses what the clover solve does not offer yet, naming what works instead.
    fn check_clover(&self) -> Result<()> {
        if !self.clover() {
            return Ok(());
        }
        let refuse = |what: &str| {
            Err(Error::InvalidParameter(format!(
                "{what} with --csw {} is not supported yet: the clover kernels run in f32, f64 and \
                 half, BiCGStab or CGNR, mixed f32/f64 and half/f64 too, on one GPU (or the CPU); \
                 leave the option out, or give --csw 0 for the Wilson operator, which has it",
                self.csw
            )))
        };
        if self.fused == Fusion::On {
            return refuse("--fused on (the one-kernel iteration is the Wilson operator's)");
        }
        Ok(())
    }

    /// The sloppy precision (the outer one where none is given).
    fn sloppy(&self) -> Sloppy {
        self.sloppy.unwrap_or(Sloppy::of(self.precision))
    }

    /// The reliable-update options of these arguments.
    fn mixed_options(&self) -> MixedOptions {
        let mut o = MixedOptions::new(SolveOptions {
            tol: self.tol,
            max_iter: self.max_iter,
            variant: self.variant,
            check_every: self.check_every,
            fused: self.fused,
        });
        o.method = self.solver;
        o.delta = self.delta;
        o
    }

    /// What a mixed solve did: its iterations in the sloppy precision and its reliable updates.
    fn updates_line(&self, r: &SolveReport, updates: u32) -> String {
        format!(
            "{} {} iterations in {} with {updates} reliable updates in {}; true residual of the \
             even-site system {:.3e}",
            r.iterations,
            self.solver,
            self.sloppy().name(),
            prec_name(self.precision),
            r.residual
        )
    }

    /// The line that names the solve's method and precisions.
    fn method_line(&self) -> String {
        let method = match self.solver {
            Method::BiCgStab => "BiCGStab",
            Method::Cgnr => "CGNR",
        };
        if self.mixed() {
            format!(
                "solver: {method}, outer precision {}, sloppy {}, reliable updates at delta {}",
                prec_name(self.precision),
                self.sloppy().name(),
                self.delta
            )
        } else {
            format!("solver: {method}, precision {}", prec_name(self.precision))
        }
    }

    /// Refuses what a split run on the CPU lacks: its solver is the Wilson operator's BiCGStab in
    /// f64 (on GPUs a split solve takes every operator, precision and method).
    fn check_split(&self, on_gpu: bool) -> Result<()> {
        if self.clover() && !on_gpu {
            return Err(Error::InvalidParameter(format!(
                "--csw {} with --gpus/--mpi on the CPU is not supported yet: the CPU's split \
                 solver is the Wilson operator's; split the clover solve over GPUs (--engine \
                 device), leave out --gpus/--mpi, or give --csw 0",
                self.csw
            )));
        }
        Ok(())
    }
}

/// How the hopping kernel's launch is chosen on a GPU (a lattice split over ranks keeps blocks of
/// 128 threads).
#[derive(Args, Clone, Copy)]
struct TuningArgs {
    /// On a GPU, time the hopping kernel's block sizes (and the face packing's, and the solver's vector
    /// launches) again even where the tune cache has this lattice's.
    #[arg(long)]
    retune: bool,
    /// On a GPU, keep the tuned launches in memory only (do not read or write the tune cache file).
    #[arg(long)]
    no_tune_cache: bool,
}

impl TuningArgs {
    /// The tune cache these options name.
    fn cache(self) -> TuneCache {
        match self.no_tune_cache {
            false => TuneCache::per_user(),
            true => TuneCache::in_memory(),
        }
    }

    /// Sets the hopping kernel's block of `w` (the tune cache's, or timed and stored); says which
    /// where `say`.
    fn apply<T: WilsonStorage>(self, w: &mut WilsonGpu<T>, say: bool) -> Result<()> {
        let mut cache = self.cache();
        let tuned = w.tune_block(&mut cache, self.retune)?;
        if let (Some(t), true) = (tuned, say) {
            let pack = match param(&t.params, "pack") {
                Some(p) => format!(", face packing {p}"),
                None => String::new(),
            };
            println!(
                "hopping kernel: blocks of {} threads{pack} ({:.1} us per call; {})",
                w.hopping_block(),
                t.ms_per_call * 1e3,
                tuned_from(&t)
            );
        }
        warn_of(&mut cache);
        Ok(())
    }

    /// Sets the launch of `solver`'s vector kernels (the tune cache's, or timed and stored); says which
    /// where `say`.
    fn apply_vectors<T: SolverPrecision, O: DeviceOperator<T>>(
        self,
        solver: &mut BiCgStab<T, O>,
        say: bool,
    ) -> Result<()> {
        let mut cache = self.cache();
        let tuned = solver.tune_vectors(&mut cache, self.retune)?;
        if let (Some(t), true) = (tuned, say) {
            let (block, blocks) = solver.vector_launch();
            println!(
                "solver vector kernels: {blocks} blocks of {block} threads ({:.1} us per iteration; {})",
                t.ms_per_call * 1e3,
                tuned_from(&t)
            );
        }
        warn_of(&mut cache);
        Ok(())
    }
}

/// Where a tuned launch came from, for the line that reports it.
fn tuned_from(t: &Tuned) -> &'static str {
    match t.cached {
        true => "from the tune cache",
        false => "tuned",
    }
}

/// Prints the tune cache's warnings.
fn warn_of(cache: &mut TuneCache) {
    for warning in cache.take_warnings() {
        eprintln!("warning: {warning}");
    }
}

#[derive(Args)]
struct SolveArgs {
    #[command(flatten)]
    solver: SolverArgs,
    /// Seed of the random source.
    #[arg(long, default_value_t = 7, allow_hyphen_values = true, value_parser = parse_seed)]
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
    #[arg(long, value_name = "YxZxT", allow_hyphen_values = true, value_parser = parse_grid)]
    grid: Option<[usize; 3]>,
    /// Also cut these axes of a GPU split (a comma list of y, z and t) where the grid has one rank
    /// along them, the ghosts then coming from the block's own far side: what the split costs,
    /// measured on one GPU (as QUDA's --partition). The results are unchanged.
    #[arg(long, value_name = "AXES", value_parser = parse_cut)]
    cut: Option<[bool; 3]>,
    #[command(flatten)]
    split: lattice_gpu_cli::HaloArgs,
    /// Instead of one solve, time N iterations (the tolerance set out of reach) of every solver variant
    /// the halos allow, each after an untimed run, and M_hat alone: the strong-scaling figures of a
    /// split run, and the one-GPU baseline without --mpi/--gpus.
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = parse_count)]
    bench: Option<u32>,
}

#[derive(Args)]
struct PropagatorArgs {
    #[command(flatten)]
    solver: SolverArgs,
    /// Directory for pion.csv, meff.csv (m_eff(t) = ln(C(t)/C(t+1))) and meff.png (m_eff and C(t)):
    /// written only when all 12 solves succeed (a failed or interrupted run leaves the files there as
    /// they were, beside the checkpoint of its finished sources).
    #[arg(long, default_value = "lqcd-out")]
    output: PathBuf,
    /// Directory of the checkpoint file propagator.ckpt [default: OUTPUT/checkpoint]. One is written
    /// after every finished source, in the background (there is no --checkpoint-every: a source is
    /// the propagator's unit of work), and kept after the run: a signal (SIGINT, SIGTERM, SIGHUP,
    /// SIGUSR1) or a failed solve leaves the one of the sources finished before it.
    #[arg(long, value_name = "DIR")]
    checkpoint: Option<PathBuf>,
    /// Continue the propagator of a checkpoint (its directory or the file) with the sources it has
    /// not finished: the same pion.csv, to the bit, as a run never stopped. The lattice, the gauge
    /// field (its checksum), kappa, --csw, the boundary, --tol and the solver (the engine; on a GPU also
    /// --precision, --recon, --variant, --fused and --check-every) must be the run's; --max-iter may
    /// differ (raise it to continue a run whose source did not converge).
    #[arg(long, value_name = "DIR")]
    resume: Option<PathBuf>,
    /// Refused with the reason: a checkpoint is written after every source.
    #[arg(long, hide = true, value_name = "N|TIME", allow_hyphen_values = true,
          value_parser = no_checkpoint_every)]
    checkpoint_every: Option<String>,
    /// Refused with the reason: the propagator's solves are not split over ranks.
    #[arg(long, hide = true, value_name = "N", allow_hyphen_values = true,
          value_parser = no_gpus)]
    gpus: Option<String>,
}

/// `propagator --checkpoint-every`, which diffusion and the other applications take: refused, saying
/// what the propagator does instead (clap would suggest --check-every, another option).
fn no_checkpoint_every(_: &str) -> std::result::Result<String, String> {
    Err(
        "the propagator writes a checkpoint after every finished source (a source is its unit of \
         work), so it has no other cadence to set: leave the option out"
            .into(),
    )
}

/// `propagator --gpus`: refused, saying what splits instead.
fn no_gpus(_: &str) -> std::result::Result<String, String> {
    Err(
        "the propagator solves its 12 sources on one GPU (or the CPU), one after another, not \
         split over ranks: leave the option out (`lqcd solve --gpus N` splits one solve)"
            .into(),
    )
}

fn parse_dims4(s: &str) -> std::result::Result<[usize; 4], String> {
    let v = lattice_gpu_cli::parse_dims(s)?;
    match v.as_slice() {
        [n] => Ok([*n; 4]),
        [x, y, z, t] => Ok([*x, *y, *z, *t]),
        _ => Err(format!(
            "lattice `{s}` must be N or XxYxZxT (e.g. 8x8x8x16)"
        )),
    }
}

/// A seed: a whole number from 0 to 2^64 - 1 (a minus sign is named, not taken for an option).
fn parse_seed(s: &str) -> std::result::Result<u64, String> {
    s.trim().parse::<u64>().map_err(|_| {
        format!(
            "`{s}` is not a seed: give a whole number from 0 to {}",
            u64::MAX
        )
    })
}

/// A count of iterations: a whole number below 2^32 (a zero passes here, to be refused by the check
/// that names the option).
fn parse_count(s: &str) -> std::result::Result<u32, String> {
    s.trim().parse::<u32>().map_err(|_| {
        format!(
            "`{s}` is not a count: give a whole number from 1 to {}",
            u32::MAX
        )
    })
}

fn parse_grid(s: &str) -> std::result::Result<[usize; 3], String> {
    match lattice_gpu_cli::parse_dims(s)?.as_slice() {
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
    default: impl FnOnce() -> lattice_gpu_lqcd::Result<[usize; 4]>,
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
    let cli = Cli::parse();
    lattice_gpu_cli::start();
    lattice_gpu_cli::exit(run(cli))
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Plaquette(a) => plaquette_only(&a),
        Command::Solve(a) => solve(&a),
        Command::Propagator(a) => propagator(&a),
        Command::Bench(a) => bench(&a),
        Command::BenchMixed(a) => bench_mixed(&a),
    }
}

/// `lqcd plaquette`: the configuration, its plaquette, and `--write-gauge`.
fn plaquette_only(a: &GaugeArgs) -> Result<()> {
    check_write_gauge(a)?;
    let dims = gauge_lattice(a)?;
    let footprint = Footprint::new(
        format!("a {} gauge field", dims_name(dims)),
        with_slack(volume_bytes(dims, GAUGE_SITE, "the gauge field")?),
        0,
        false,
    );
    footprint.check(None)?;
    let u = make_gauge(a, true)?;
    plaquette(&u, true)?;
    write_gauge(a, &u)?;
    footprint.report(None);
    Ok(())
}

/// The lattice extents of the gauge options, known before any field is made (so that its memory can
/// be checked first): `--dims`, or the extents the file's format record gives.
fn gauge_lattice(a: &GaugeArgs) -> Result<[usize; 4]> {
    let dims = match &a.gauge {
        Some(path) => gauge_dims(path)?.0,
        None => a.dims,
    };
    check_dims(dims)?;
    Ok(dims)
}

/// The gauge field of the options; `lead` prints what it is (the other ranks of an MPI run make the
/// same field quietly). A loaded file with a NaN or infinite link is refused by name.
fn make_gauge(a: &GaugeArgs, lead: bool) -> Result<GaugeField> {
    let say = |line: String| {
        if lead {
            println!("{line}");
        }
    };
    match &a.gauge {
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
            Ok(u)
        }
        None => {
            check_dims(a.dims)?;
            let u = GaugeField::random(a.dims, a.seed);
            say(format!(
                "gauge: random SU(3) (Haar), seed {}, {}x{}x{}x{}",
                a.seed, a.dims[0], a.dims[1], a.dims[2], a.dims[3]
            ));
            Ok(u)
        }
    }
}

/// The average plaquette of `u`, printed where `lead`; a non-finite one is an error, not a result.
fn plaquette(u: &GaugeField, lead: bool) -> Result<f64> {
    let p = finite(
        u.plaquette(),
        "the average plaquette",
        "the average over every site and plane",
        "a link of the gauge field is not a finite SU(3) matrix; check the configuration",
    )?;
    if lead {
        println!("plaquette {p:.12}");
    }
    Ok(p)
}

/// Refuses at the start, not after the run, a `--write-gauge` path that cannot be written: one that
/// exists and is no regular file, or whose directory does not exist.
fn check_write_gauge(a: &GaugeArgs) -> Result<()> {
    let Some(path) = &a.write_gauge else {
        return Ok(());
    };
    let bad = |why: String| {
        Err(Error::InvalidParameter(format!(
            "--write-gauge {}: {why}",
            path.display()
        )))
    };
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return bad(
            "it exists and is not a regular file (a directory, device, pipe or socket); name a \
             regular file, or a path that does not exist yet"
                .into(),
        );
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        return bad(format!(
            "the directory {} does not exist; create it, or name a file in one that does",
            dir.display()
        ));
    }
    Ok(())
}

/// Writes `--write-gauge` (atomically), at the end of a run that succeeded.
fn write_gauge(a: &GaugeArgs, u: &GaugeField) -> Result<()> {
    if let Some(path) = &a.write_gauge {
        save_gauge(path, u, FilePrecision::F64)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// A solve's printed results, `|x|` and the true residual, each refused where it is not finite; `fix`
/// is what the residual's message advises.
fn finite_results(x_norm: f64, res: f64, fix: &str) -> Result<(f64, f64)> {
    let x_norm = finite(
        x_norm,
        "|x|",
        "the solution's norm",
        "the solution's entries are too large to sum; try a smaller kappa",
    )?;
    let res = finite(
        res,
        "the true residual |b - D x|/|b|",
        "the whole lattice",
        fix,
    )?;
    Ok((x_norm, res))
}

/// `value`, or the error that names `what` non-finite at `at` with `fix`.
fn finite(value: f64, what: &str, at: &str, fix: &str) -> Result<f64> {
    if value.is_finite() {
        return Ok(value);
    }
    Err(Error::NonFinite {
        what: what.into(),
        value,
        at: at.into(),
        fix: fix.into(),
    })
}

/// Where the `k`-th complex number of a spinor field lies: `site` gives the coordinates of its site
/// (`k / 12`).
fn spinor_entry(k: usize, site: [usize; 4]) -> String {
    let [x, y, z, t] = site;
    format!(
        "site (x, y, z, t) = ({x}, {y}, {z}, {t}), spin {}, colour {}",
        k % SPINOR_LEN / 3,
        k % 3
    )
}

/// The first NaN or infinity of `x`: its index and value.
fn first_non_finite(x: &[Complex64]) -> Option<(u64, f64)> {
    let k = x.iter().position(|z| !z.is_finite())?;
    let z = x[k];
    Some((k as u64, if z.re.is_finite() { z.im } else { z.re }))
}

/// The check after a solve, on every rank of `comm` at once: a solution with a NaN or infinity stops
/// the run (naming the entry: `site(rank, site index)` gives its coordinates), as does a signal that
/// came during the solve where `stop` (the propagator keeps a finished solution, and stops after its
/// checkpoint). `iterations` is the step the error names.
fn agree_on_solution<C: Communicator>(
    comm: &C,
    x: &[Complex64],
    iterations: u64,
    site: impl Fn(usize, usize) -> [usize; 4],
    stop: bool,
) -> Result<()> {
    let verdict = match Verdict::agree(comm, first_non_finite(x))? {
        Verdict::Stop(_) if !stop => Verdict::Healthy,
        v => v,
    };
    Ok(verdict.into_result(
        iterations,
        "the solution",
        |nf| {
            let k = nf.index as usize;
            spinor_entry(k, site(nf.rank, k / SPINOR_LEN))
        },
        "the solver made it from finite input; try --precision f64, or a smaller kappa",
    )?)
}

/// The check of a signal after `iteration`, on every rank of `comm` at once (see
/// [`split_check_every`]): a signal ends the run with the error that says so.
fn agree_on_stop<C: Communicator>(comm: &C, iteration: usize) -> Result<()> {
    Ok(stop_at_signal(comm, iteration)?)
}

/// [`agree_on_stop`] in the GPU solver's own error type, for its residual checks.
fn stop_at_signal<C: Communicator>(comm: &C, iteration: usize) -> lattice_gpu_host::Result<()> {
    Verdict::agree(comm, None)?.into_result(iteration as u64, "the solve", |_| String::new(), "")
}

/// Work of one CPU reference BiCGStab iteration per site, in updates of a diffusion point (what
/// [`check_interval`](lattice_gpu_host::health::check_interval) budgets): two applications of
/// `M_hat`, four half-lattice hopping terms of about 1.3 kflops per site each.
const ITERATION_WORK: u64 = 1 << 11;

/// Iterations between the signal checks of a CPU solve over `ranks` ranks: one rank agrees with
/// itself at no cost, so it looks after every iteration; split ranks agree collectively, at the
/// health check's cadence (about a second of work between checks).
fn split_check_every(lat: &Lattice, max_iter: u32, ranks: usize) -> usize {
    if ranks == 1 {
        return 1;
    }
    let points = (lat.volume() as u64).saturating_mul(ITERATION_WORK);
    lattice_gpu_host::health::check_interval(points, max_iter as u64, false) as usize
}

fn check(s: &SolverArgs) -> Result<()> {
    check_write_gauge(&s.gauge)?;
    reference::check_kappa(s.kappa)?;
    check_csw(s.csw)?;
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
    if let (Prec::F32, Some(sloppy @ (Sloppy::Half | Sloppy::Fixed))) = (s.precision, s.sloppy) {
        return Err(Error::InvalidParameter(format!(
            "--sloppy {} runs under the outer --precision f64 only: give --precision f64, or \
             --sloppy f32 under --precision f32",
            sloppy.name()
        )));
    }
    if s.precision == Prec::F32 && s.sloppy == Some(Sloppy::F64) {
        return Err(Error::InvalidParameter(
            "--sloppy f64 is finer than the outer --precision f32: the inner iterations cannot be more \
             precise than the solution they update; use --sloppy f32 (or leave --sloppy out), or \
             --precision f64 --sloppy f32 for mixed precision"
                .into(),
        ));
    }
    if !(s.delta > 0.0 && s.delta < 1.0) {
        return Err(Error::InvalidParameter(format!(
            "--delta {} must lie between 0 and 1 (0.1 is usual for an f32 inner precision)",
            s.delta
        )));
    }
    s.check_clover()?;
    if s.precision == Prec::F32 && s.tol < 1e-6 {
        return Err(Error::InvalidParameter(format!(
            "--tol {:e} is below what f32 can reach (about 1e-6); use --precision f64 or a larger --tol",
            s.tol
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Memory: every run's peak, from what its code path holds at the worst moment
// ---------------------------------------------------------------------------------------------

/// Bytes of the gauge field per site on the host: four 3x3 complex links.
const GAUGE_SITE: u64 = 4 * std::mem::size_of::<Su3>() as u64;
/// Bytes of a whole-lattice spinor per site on the host (a half field holds half the sites).
const SPINOR_SITE: u64 = (SPINOR_LEN * std::mem::size_of::<Complex64>()) as u64;
/// The gauge file's 1 MiB reader or writer buffer, the solver's history, the correlator: small
/// beside the fields, bounded here.
const SMALL: u64 = 2 << 20;

/// The fields' bytes with what malloc adds on the host: its free lists keep some freed fields'
/// pages while the next are made (measured at about 1% of the solver's fields, give or take as
/// much), counted as 1/32 more; and [`SMALL`].
fn with_slack(fields: u64) -> u64 {
    fields.saturating_add(fields / 32).saturating_add(SMALL)
}
/// The GPU's small arrays beside the fields: the solver's state, partial sums and barrier.
const GPU_SMALL: u64 = 1 << 20;

/// `per_site` bytes for each site of `dims`, overflow-checked.
fn volume_bytes(dims: [usize; 4], per_site: u64, what: &str) -> Result<u64> {
    let per_site = usize::try_from(per_site).unwrap_or(usize::MAX);
    Ok(memory::bytes(
        &[dims[0], dims[1], dims[2], dims[3], per_site],
        1,
        what,
    )?)
}

/// `count` reals of `T`, overflow-checked.
fn reals<T>(count: usize, what: &str) -> Result<u64> {
    Ok(memory::bytes(&[count], std::mem::size_of::<T>(), what)?)
}

/// The peak of a one-rank solve (or propagator) on the CPU: the gauge field, the source, and during
/// the even-odd BiCGStab the odd half of the source, the even-site system's source and five work
/// vectors (x, r, p, v, s; the shadow residual is the source itself) with the two half fields of an
/// `M_hat` application being made. After the solve fewer are alive (x in halves and whole, `H x`).
fn cpu_footprint(lat: &Lattice, what: &str) -> Result<Footprint> {
    let dims = lat.dims;
    let gauge = volume_bytes(dims, GAUGE_SITE, "the gauge field")?;
    let spinors = volume_bytes(
        dims,
        SPINOR_SITE + 9 * SPINOR_SITE / 2,
        "the solver's spinors",
    )?;
    Ok(Footprint::new(
        format!("{what} on a {} lattice on the CPU", dims_name(dims)),
        with_slack(gauge.saturating_add(spinors)),
        0,
        false,
    ))
}

/// The peak of a one-rank solve on the GPU in `T` with `recon`. Host: the gauge field, and either the
/// packed copy of the links being uploaded, or later the source, the solution and one packed parity
/// on its way. GPU: the links, the operator's temporary, BiCGStab's seven vectors and the solve's
/// seven parity fields (the halves of b, the system's source, x in halves, and D x in halves for the
/// true residual), each one stored parity.
fn gpu_footprint<T>(lat: &Lattice, recon: Recon, what: &str) -> Result<Footprint> {
    let dims = lat.dims;
    let gauge = volume_bytes(dims, GAUGE_SITE, "the gauge field")?;
    let packed = reals::<T>(gauge_len(lat, recon), "the packed gauge field")?;
    let parity = reals::<T>(2 * parity_len(lat), "a spinor parity on the GPU")?;
    let fields = volume_bytes(dims, 2 * SPINOR_SITE, "the source and the solution")?;
    let host = with_slack(gauge.saturating_add(packed.max(fields.saturating_add(parity))));
    let gpu = packed
        .saturating_add(parity.saturating_mul(15))
        .saturating_add(GPU_SMALL);
    Ok(Footprint::new(
        format!(
            "{what} on a {} lattice on the GPU ({}, recon {})",
            dims_name(dims),
            std::any::type_name::<T>(),
            recon.name()
        ),
        host,
        gpu,
        true,
    ))
}

/// The footprint of a one-rank run of `args` on `lat`, on `gpu` or the CPU.
fn one_rank_footprint(
    lat: &Lattice,
    args: &SolverArgs,
    gpu: bool,
    what: &str,
) -> Result<Footprint> {
    let cgnr = args.solver == Method::Cgnr;
    let mut f = match (gpu, args.mixed(), args.precision, args.sloppy()) {
        (false, ..) => cpu_footprint(lat, what),
        (true, false, Prec::F32, _) => gpu_footprint::<f32>(lat, args.recon, what),
        (true, false, Prec::F64, _) => gpu_footprint::<f64>(lat, args.recon, what),
        (true, true, Prec::F64, Sloppy::F32) => {
            mixed_gpu_footprint::<f64, f32>(lat, args.recon, cgnr, what)
        }
        (true, true, Prec::F64, Sloppy::F64) => {
            mixed_gpu_footprint::<f64, f64>(lat, args.recon, cgnr, what)
        }
        (true, true, Prec::F64, Sloppy::Half) => {
            mixed_gpu_footprint::<f64, Half>(lat, args.recon, cgnr, what)
        }
        (true, true, Prec::F64, Sloppy::Fixed) => {
            mixed_gpu_footprint::<f64, Fixed>(lat, args.recon, cgnr, what)
        }
        (true, true, Prec::F32, _) => mixed_gpu_footprint::<f32, f32>(lat, args.recon, cgnr, what),
    }?;
    if args.clover() {
        // The host's clover field (A and its inverse) lives through a CPU run (on a GPU only until
        // its three packed parities, A even and odd and A^-1 odd, are uploaded beside the Wilson
        // operator); the CPU's clover M_hat holds one half field more than Wilson's.
        let clover = if gpu {
            CLOVER_SITE
        } else {
            CLOVER_SITE + SPINOR_SITE / 2
        };
        f.host = f
            .host
            .saturating_add(volume_bytes(lat.dims, clover, "the clover field")?);
        if gpu {
            // Three packed parities per operator: a mixed solve holds the outer and the sloppy one.
            let packed = |store: Sloppy| {
                memory::bytes(
                    &[3, store.clover_len(lat)],
                    store.bytes(),
                    "the clover field",
                )
            };
            let mut bytes = packed(Sloppy::of(args.precision))?;
            if args.mixed() {
                bytes = bytes.saturating_add(packed(args.sloppy())?);
            }
            f.gpu = f.gpu.saturating_add(bytes);
        }
        f.what = format!("{} with the clover term", f.what);
    }
    Ok(f)
}

/// Bytes of the host's clover field per site: the two 6x6 complex chiral blocks of `A` and of `A^-1`.
const CLOVER_SITE: u64 = 2 * 2 * 36 * std::mem::size_of::<Complex64>() as u64;

/// The peak of a one-rank mixed-precision solve (CGNR where `cgnr`) on the GPU, outer `H`, sloppy
/// `S`: as [`gpu_footprint`] on the host; on the GPU both operators' links and temporaries (and for
/// CGNR their gamma_5 scratch), the sloppy solver's seven vectors, the driver's three outer vectors
/// and one sloppy source, and the solve's seven outer parity fields.
fn mixed_gpu_footprint<H: WilsonStorage, S: WilsonStorage>(
    lat: &Lattice,
    recon: Recon,
    cgnr: bool,
    what: &str,
) -> Result<Footprint> {
    let scratch = u64::from(cgnr);
    let dims = lat.dims;
    let gauge = volume_bytes(dims, GAUGE_SITE, "the gauge field")?;
    let packed_h = reals::<H>(gauge_len(lat, recon), "the packed gauge field")?;
    let packed_s = reals::<S::Elem>(gauge_len(lat, recon), "the packed gauge field")?;
    let parity_h = reals::<H>(2 * parity_len(lat), "a spinor parity on the GPU")?;
    let parity_s = reals::<S::Elem>(2 * parity_slots::<S>(lat), "a spinor parity on the GPU")?;
    let fields = volume_bytes(dims, 2 * SPINOR_SITE, "the source and the solution")?;
    let host = with_slack(gauge.saturating_add(packed_h.max(fields.saturating_add(parity_h))));
    let gpu = packed_h
        .saturating_add(packed_s)
        .saturating_add(parity_h.saturating_mul(1 + scratch + 3 + 7))
        .saturating_add(parity_s.saturating_mul(1 + scratch + 7 + 1))
        .saturating_add(2 * GPU_SMALL);
    Ok(Footprint::new(
        format!(
            "{what} on a {} lattice on the GPU (outer {}, sloppy {}, recon {})",
            dims_name(lat.dims),
            H::PRECISION,
            S::PRECISION,
            recon.name()
        ),
        host,
        gpu,
        true,
    ))
}

/// The host peak of a split solve of which this process runs `here` of the `grid`'s ranks (all of
/// them as threads of `--gpus`, one under `--mpi`): the whole gauge field and source once, made
/// before the ranks start and shared by them, and for each rank here its own part.
///
/// On the CPU a rank holds the links of its box and halo, its part of the source, BiCGStab's five
/// work vectors and, during an application of D, the box and halo as packed spinors, the hopping term,
/// D psi and the halo messages (a thread's malloc arena keeps the packed spinors' pages while the
/// others are made, so they are counted together): 576 plus 192 bytes per site of box and halo, 1536
/// per site of the box and 768 per site of a face of a cut axis. On GPUs a rank holds a whole
/// lattice's solution (its own sites filled) and its block's packed links or a parity on its way.
fn split_host_footprint(
    lat: &Lattice,
    grid: [usize; 4],
    here: usize,
    gpu: Option<(Prec, Recon, &[usize])>,
) -> Result<Footprint> {
    let dims = lat.dims;
    let shared = volume_bytes(
        dims,
        GAUGE_SITE + SPINOR_SITE,
        "the gauge field and the source",
    )?;
    let ranks: usize = grid.iter().product();
    // The ranks' boxes: along each axis the sites dealt out as evenly as they go, with a halo site on
    // each side of a cut axis.
    let largest: [usize; 4] = std::array::from_fn(|a| dims[a].div_ceil(grid[a]));
    let halo = |a: usize| if grid[a] > 1 { 2 } else { 0 };
    let (boxes, with_halos) = if here == ranks {
        let all: [usize; 4] = std::array::from_fn(|a| dims[a] + grid[a] * halo(a));
        (dims, all)
    } else {
        (largest, std::array::from_fn(|a| largest[a] + halo(a)))
    };
    let k = if here == ranks { 1 } else { here } as u64;
    // A halo exchange sends a face each way along a cut axis and receives two.
    let mut faces = 0u64;
    for a in (1..4).filter(|&a| grid[a] > 1) {
        let mut face = boxes;
        face[a] = if here == ranks { grid[a] } else { 1 };
        faces = faces.saturating_add(volume_bytes(face, 4 * SPINOR_SITE, "the halo messages")?);
    }
    let per_rank = match gpu {
        None => volume_bytes(with_halos, GAUGE_SITE + SPINOR_SITE, "the ranks' links")?
            .saturating_add(volume_bytes(boxes, 8 * SPINOR_SITE, "the ranks' spinors")?)
            .saturating_add(faces)
            .saturating_mul(k),
        Some((prec, recon, cuts)) => {
            let solution = volume_bytes(dims, SPINOR_SITE, "the ranks' solutions")?;
            let mut sum = 0u64;
            for rank in 0..if here == ranks { ranks } else { here } {
                let block = Block::new(*lat, grid, rank)?.cutting(cuts)?;
                let bytes = match prec {
                    Prec::F32 => block_bytes::<f32>(&block, recon)?,
                    Prec::F64 => block_bytes::<f64>(&block, recon)?,
                };
                sum = sum.saturating_add(solution.saturating_add(bytes.0.max(bytes.1)));
            }
            sum
        }
    };
    Ok(Footprint::new(
        format!(
            "a {} solve split over {ranks} ranks{}",
            dims_name(dims),
            if gpu.is_some() {
                " on GPUs"
            } else {
                " on the CPU"
            }
        ),
        with_slack(shared.saturating_add(per_rank)),
        0,
        gpu.is_some(),
    ))
}

/// Bytes of a GPU block's packed links and of one stored parity, in `T`.
fn block_bytes<T>(block: &Block, recon: Recon) -> Result<(u64, u64)> {
    Ok((
        reals::<T>(block.gauge_len(recon), "a block's links")?,
        reals::<T>(2 * block.parity_len(), "a block's spinor parity")?,
    ))
}

/// The GPU peak of one rank's block in a split solve of `args`: each operator's (a mixed solve has
/// an outer and a sloppy one) as [`block_gpu_bytes`] counts it, with its three packed clover parities
/// where `--csw` is given.
fn split_gpu_bytes(args: &SolverArgs, block: &Block) -> Result<u64> {
    let recon = args.recon;
    let operator = |store: Sloppy| -> Result<u64> {
        let bytes = match store {
            Sloppy::F32 => block_gpu_bytes::<f32>(block, recon)?,
            Sloppy::F64 => block_gpu_bytes::<f64>(block, recon)?,
            // 16-bit values, a spinor site in 13 slots (its norm) where the others take 12.
            Sloppy::Half | Sloppy::Fixed => {
                block_gpu_bytes::<u16>(block, recon)?.saturating_mul(13) / 12
            }
        };
        let clover = match args.clover() {
            true => memory::bytes(
                &[3, store.clover_len(&block.local())],
                store.bytes(),
                "a block's clover",
            )?,
            false => 0,
        };
        Ok(bytes.saturating_add(clover))
    };
    let outer = operator(Sloppy::of(args.precision))?;
    Ok(match args.mixed() {
        true => outer.saturating_add(operator(args.sloppy())?),
        false => outer,
    })
}

/// The GPU peak of one rank's block: its links, the operator's temporary, the solver's seven vectors
/// and the solve's seven parity fields, and the order of its sites.
fn block_gpu_bytes<T>(block: &Block, recon: Recon) -> Result<u64> {
    let (links, parity) = block_bytes::<T>(block, recon)?;
    let order = memory::bytes(&[block.local().half_volume()], 4, "a block's site order")?;
    Ok(links
        .saturating_add(parity.saturating_mul(15))
        .saturating_add(order)
        .saturating_add(GPU_SMALL))
}

// ---------------------------------------------------------------------------------------------
// Solves
// ---------------------------------------------------------------------------------------------

/// One or more solves with the same operator: on the GPU in the chosen precision, or the CPU reference.
struct Solver {
    lat: Lattice,
    u: GaugeField,
    args: SolverArgs,
    gpu: Option<GpuSolver>,
    /// The clover field of a Wilson-clover solve on the CPU (on a GPU it is uploaded and dropped).
    clover: Option<CloverField>,
    device: Option<Arc<Gpu>>,
    footprint: Footprint,
}

enum GpuSolver {
    F32(BiCgStab<f32, EvenOdd<f32>>),
    F64(BiCgStab<f64, EvenOdd<f64>>),
    /// The Wilson-clover operator (`--csw` above 0) in f32.
    CloverF32(BiCgStab<f32, CloverEvenOdd<f32>>),
    /// The Wilson-clover operator in f64.
    CloverF64(BiCgStab<f64, CloverEvenOdd<f64>>),
    /// Reliable updates ([`SolverArgs::mixed`]): outer f64, sloppy f32.
    Mixed64x32(Box<MixedBiCgStab<f64, f32, EvenOdd<f64>, EvenOdd<f32>>>),
    /// CGNR in f64.
    Mixed64x64(Box<MixedBiCgStab<f64, f64, EvenOdd<f64>, EvenOdd<f64>>>),
    /// Reliable updates: outer f64, sloppy half.
    Mixed64xHalf(Box<MixedBiCgStab<f64, Half, EvenOdd<f64>, EvenOdd<Half>>>),
    /// Reliable updates: outer f64, sloppy 16-bit fixed point.
    Mixed64xFixed(Box<MixedBiCgStab<f64, Fixed, EvenOdd<f64>, EvenOdd<Fixed>>>),
    /// CGNR in f32.
    Mixed32x32(Box<MixedBiCgStab<f32, f32, EvenOdd<f32>, EvenOdd<f32>>>),
    /// The Wilson-clover operator with reliable updates: outer f64, sloppy f32.
    CloverMixed64x32(Box<MixedBiCgStab<f64, f32, CloverEvenOdd<f64>, CloverEvenOdd<f32>>>),
    /// The Wilson-clover operator with reliable updates: outer f64, sloppy half.
    CloverMixed64xHalf(Box<MixedBiCgStab<f64, Half, CloverEvenOdd<f64>, CloverEvenOdd<Half>>>),
    /// The Wilson-clover operator with reliable updates: outer f64, sloppy 16-bit fixed point.
    CloverMixed64xFixed(Box<MixedBiCgStab<f64, Fixed, CloverEvenOdd<f64>, CloverEvenOdd<Fixed>>>),
    /// The Wilson-clover operator, CGNR in f64.
    CloverMixed64x64(Box<MixedBiCgStab<f64, f64, CloverEvenOdd<f64>, CloverEvenOdd<f64>>>),
    /// The Wilson-clover operator, CGNR in f32.
    CloverMixed32x32(Box<MixedBiCgStab<f32, f32, CloverEvenOdd<f32>, CloverEvenOdd<f32>>>),
}

/// Where a run's GPU operators live: the whole lattice on this GPU, or this rank's block of a
/// lattice split over the GPUs of a communicator.
enum Layout<'a, C: Communicator> {
    /// The whole lattice.
    Whole(&'a Lattice),
    /// A rank's block.
    Split(&'a SplitLayout<C>),
}

/// A rank's block of a split lattice and how its ghosts travel.
struct SplitLayout<C: Communicator> {
    block: Block,
    comm: Rc<C>,
    halos: lattice_gpu_cli::HaloTransport,
    /// Whether the sites that read no ghost run while the ghosts travel.
    overlap: bool,
}

impl<C: Communicator + 'static> SplitLayout<C> {
    /// The ghost exchange and sums of one operator's fields (each operator has its own: a mixed
    /// solve's outer and sloppy fields differ in type).
    #[cfg_attr(not(feature = "nccl"), allow(unused_variables))]
    fn ranks<E: lattice_gpu_host::comm::Wire + lattice_gpu_host::Plain>(
        &self,
        g: &Arc<Gpu>,
    ) -> Result<Box<dyn DeviceRanks<E>>> {
        use lattice_gpu_cli::HaloTransport;
        Ok(match self.halos {
            HaloTransport::Host => Box::new(HostStaged(self.comm.clone())),
            #[cfg(feature = "nccl")]
            HaloTransport::Nccl => Box::new(lattice_gpu_host::nccl::Nccl::new(&*self.comm, g)?),
            #[cfg(not(feature = "nccl"))]
            HaloTransport::Nccl => {
                return Err(Error::InvalidParameter(lattice_gpu_cli::NO_NCCL.into()))
            }
        })
    }
}

impl<C: Communicator + 'static> Layout<'_, C> {
    /// The Wilson operator in `T` on this layout.
    fn wilson<T: WilsonStorage>(
        &self,
        g: &Arc<Gpu>,
        u: &GaugeField,
        kappa: f64,
        recon: Recon,
    ) -> Result<WilsonGpu<T>> {
        match self {
            Layout::Whole(lat) => WilsonGpu::<T>::new(g, lat, u, kappa, recon),
            Layout::Split(s) => {
                let ranks = s.ranks::<T::Elem>(g)?;
                WilsonGpu::<T>::split(g, s.block.clone(), u, kappa, recon, ranks, s.overlap)
            }
        }
    }

    /// The Wilson-clover operator in `T` on this layout.
    fn clover<T: CloverStorage>(
        &self,
        g: &Arc<Gpu>,
        u: &GaugeField,
        clover: &CloverField,
        recon: Recon,
    ) -> Result<CloverGpu<T>> {
        match self {
            Layout::Whole(lat) => CloverGpu::<T>::new(g, lat, u, clover, recon),
            Layout::Split(s) => {
                let ranks = s.ranks::<T::Elem>(g)?;
                CloverGpu::<T>::split(g, s.block.clone(), u, clover, recon, ranks, s.overlap)
            }
        }
    }
}

/// What a GPU solve gave: the solution (on a split lattice this rank's sites), its report, the
/// reliable updates of a mixed solve, and the true residual `|b - D x| / |b|`.
struct GpuSolved {
    x: SpinorField,
    report: SolveReport,
    updates: Option<u32>,
    residual: f64,
}

impl GpuSolved {
    fn of_mixed((x, r, residual): (SpinorField, MixedReport, f64)) -> Self {
        let updates = Some(r.updates);
        let report = SolveReport {
            status: r.status,
            iterations: r.iterations,
            residual: r.residual,
            history: r.history,
            seconds: r.seconds,
            fused: r.fused,
        };
        Self {
            x,
            report,
            updates,
            residual,
        }
    }

    fn of_plain((x, report, residual): (SpinorField, SolveReport, f64)) -> Self {
        Self {
            x,
            report,
            updates: None,
            residual,
        }
    }
}

impl GpuSolver {
    /// The solver `args` ask for (Wilson or clover, one precision or mixed), its operators on
    /// `layout`, tuned (saying what was tuned where `say`).
    fn new<C: Communicator + 'static>(
        args: &SolverArgs,
        g: &Arc<Gpu>,
        layout: &Layout<C>,
        u: &GaugeField,
        clover: Option<&CloverField>,
        say: bool,
    ) -> Result<Self> {
        let b = Build {
            say,
            ..args.build()
        };
        let kappa = args.kappa;
        if let Some(c) = clover {
            return Ok(match (args.mixed(), args.precision, args.sloppy()) {
                (false, Prec::F32, _) => Self::CloverF32(make_clover(g, layout, u, c, b)?),
                (false, Prec::F64, _) => Self::CloverF64(make_clover(g, layout, u, c, b)?),
                (true, Prec::F64, Sloppy::F32) => {
                    Self::CloverMixed64x32(Box::new(make_clover_mixed(g, layout, u, c, b)?))
                }
                (true, Prec::F64, Sloppy::F64) => {
                    Self::CloverMixed64x64(Box::new(make_clover_mixed(g, layout, u, c, b)?))
                }
                (true, Prec::F64, Sloppy::Half) => {
                    Self::CloverMixed64xHalf(Box::new(make_clover_mixed(g, layout, u, c, b)?))
                }
                (true, Prec::F64, Sloppy::Fixed) => {
                    Self::CloverMixed64xFixed(Box::new(make_clover_mixed(g, layout, u, c, b)?))
                }
                (true, Prec::F32, _) => {
                    Self::CloverMixed32x32(Box::new(make_clover_mixed(g, layout, u, c, b)?))
                }
            });
        }
        Ok(match (args.mixed(), args.precision, args.sloppy()) {
            (false, Prec::F32, _) => Self::F32(make(g, layout, u, kappa, b)?),
            (false, Prec::F64, _) => Self::F64(make(g, layout, u, kappa, b)?),
            (true, Prec::F64, Sloppy::F32) => {
                Self::Mixed64x32(Box::new(make_mixed(g, layout, u, kappa, b)?))
            }
            (true, Prec::F64, Sloppy::F64) => {
                Self::Mixed64x64(Box::new(make_mixed(g, layout, u, kappa, b)?))
            }
            (true, Prec::F64, Sloppy::Half) => {
                Self::Mixed64xHalf(Box::new(make_mixed(g, layout, u, kappa, b)?))
            }
            (true, Prec::F64, Sloppy::Fixed) => {
                Self::Mixed64xFixed(Box::new(make_mixed(g, layout, u, kappa, b)?))
            }
            (true, Prec::F32, _) => Self::Mixed32x32(Box::new(make_mixed(g, layout, u, kappa, b)?)),
        })
    }

    /// Solves `D x = b` with `opt` (a plain solver) or `mixed` (the reliable-update driver).
    fn solve(
        &mut self,
        b: &SpinorField,
        opt: &SolveOptions,
        mixed: &MixedOptions,
        on_check: &mut dyn FnMut(usize, f64) -> lattice_gpu_host::Result<()>,
    ) -> Result<GpuSolved> {
        Ok(match self {
            GpuSolver::F32(s) => GpuSolved::of_plain(solve_with(s, b, opt, on_check)?),
            GpuSolver::F64(s) => GpuSolved::of_plain(solve_with(s, b, opt, on_check)?),
            GpuSolver::CloverF32(s) => GpuSolved::of_plain(solve_clover_with(s, b, opt, on_check)?),
            GpuSolver::CloverF64(s) => GpuSolved::of_plain(solve_clover_with(s, b, opt, on_check)?),
            GpuSolver::Mixed64x32(s) => {
                GpuSolved::of_mixed(solve_mixed_with(s, b, mixed, on_check)?)
            }
            GpuSolver::Mixed64x64(s) => {
                GpuSolved::of_mixed(solve_mixed_with(s, b, mixed, on_check)?)
            }
            GpuSolver::Mixed64xHalf(s) => {
                GpuSolved::of_mixed(solve_mixed_with(s, b, mixed, on_check)?)
            }
            GpuSolver::Mixed64xFixed(s) => {
                GpuSolved::of_mixed(solve_mixed_with(s, b, mixed, on_check)?)
            }
            GpuSolver::Mixed32x32(s) => {
                GpuSolved::of_mixed(solve_mixed_with(s, b, mixed, on_check)?)
            }
            GpuSolver::CloverMixed64x32(s) => {
                GpuSolved::of_mixed(solve_clover_mixed_with(s, b, mixed, on_check)?)
            }
            GpuSolver::CloverMixed64xHalf(s) => {
                GpuSolved::of_mixed(solve_clover_mixed_with(s, b, mixed, on_check)?)
            }
            GpuSolver::CloverMixed64xFixed(s) => {
                GpuSolved::of_mixed(solve_clover_mixed_with(s, b, mixed, on_check)?)
            }
            GpuSolver::CloverMixed64x64(s) => {
                GpuSolved::of_mixed(solve_clover_mixed_with(s, b, mixed, on_check)?)
            }
            GpuSolver::CloverMixed32x32(s) => {
                GpuSolved::of_mixed(solve_clover_mixed_with(s, b, mixed, on_check)?)
            }
        })
    }

    /// GPU milliseconds of one application of the (outer) operator `M_hat` to the even part of `b`.
    fn time_apply(&self, b: &SpinorField) -> Result<f64> {
        match self {
            GpuSolver::F32(s) => s.operator().time_apply(b, OPERATOR_REPS),
            GpuSolver::F64(s) => s.operator().time_apply(b, OPERATOR_REPS),
            GpuSolver::CloverF32(s) => s.operator().time_apply(b, OPERATOR_REPS),
            GpuSolver::CloverF64(s) => s.operator().time_apply(b, OPERATOR_REPS),
            GpuSolver::Mixed64x32(s) => s.operator().time_apply(b, OPERATOR_REPS),
            GpuSolver::Mixed64x64(s) => s.operator().time_apply(b, OPERATOR_REPS),
            GpuSolver::Mixed64xHalf(s) => s.operator().time_apply(b, OPERATOR_REPS),
            GpuSolver::Mixed64xFixed(s) => s.operator().time_apply(b, OPERATOR_REPS),
            GpuSolver::Mixed32x32(s) => s.operator().time_apply(b, OPERATOR_REPS),
            GpuSolver::CloverMixed64x32(s) => s.operator().time_apply(b, OPERATOR_REPS),
            GpuSolver::CloverMixed64xHalf(s) => s.operator().time_apply(b, OPERATOR_REPS),
            GpuSolver::CloverMixed64xFixed(s) => s.operator().time_apply(b, OPERATOR_REPS),
            GpuSolver::CloverMixed64x64(s) => s.operator().time_apply(b, OPERATOR_REPS),
            GpuSolver::CloverMixed32x32(s) => s.operator().time_apply(b, OPERATOR_REPS),
        }
    }
}

impl Solver {
    /// Checks the options and the memory of `what` (a solve, a propagator) before anything large is
    /// made, then makes the gauge field and the operator.
    fn new(args: &SolverArgs, what: &str) -> Result<Self> {
        check(args)?;
        let lat = Lattice::new(gauge_lattice(&args.gauge)?, args.antiperiodic_t)?;
        let device = args.engine.gpu("the CPU reference solver (f64)")?;
        let footprint = one_rank_footprint(&lat, args, device.is_some(), what)?;
        footprint.check(device.as_deref())?;
        let u = make_gauge(&args.gauge, true)?;
        plaquette(&u, true)?;
        println!("operator: {}", args.operator_name());
        // A singular clover block is refused here, naming its site.
        let mut clover = match args.clover() {
            true => Some(CloverField::new(&u, args.csw, args.kappa)?),
            false => None,
        };
        let gpu = match &device {
            None => {
                if args.mixed() {
                    println!("{CPU_SOLVES_F64}");
                }
                None
            }
            Some(g) => {
                println!("GPU: {}", g.name());
                println!("{}", args.method_line());
                let whole = Layout::<Solo>::Whole(&lat);
                let c = clover.take();
                Some(GpuSolver::new(args, g, &whole, &u, c.as_ref(), true)?)
            }
        };
        Ok(Self {
            lat,
            u,
            args: args.clone(),
            gpu,
            clover,
            device,
            footprint,
        })
    }

    /// Solves `D x = b`; returns `x`, iterations, seconds, the true residual, and whether each
    /// iteration was one kernel. A signal stops the solve at its next check (each iteration on the CPU,
    /// each residual read on the GPU); one that comes after the last check stops the run after the
    /// solve where `stop` (else the finished solution is returned, and the caller stops). A solution
    /// with a NaN or infinity is an error, not a result.
    fn solve(
        &mut self,
        b: &SpinorField,
        label: &str,
        stop: bool,
    ) -> Result<(SpinorField, u32, f64, f64, bool)> {
        let a = &self.args;
        let opt = SolveOptions {
            tol: a.tol,
            max_iter: a.max_iter,
            variant: a.variant,
            check_every: a.check_every,
            fused: a.fused,
        };
        let progress = |it: usize, r: f64| println!("  {label} iteration {it:5}  residual {r:.3e}");
        let lat = self.lat;
        let at = |_: usize, n: usize| lat.coords(n);
        // A signal stops the solve at its next residual read, as it stops the CPU's after an iteration.
        let mut on_check = |it: usize, r: f64| {
            progress(it, r);
            stop_at_signal(&Solo, it)
        };
        let mixed = a.mixed_options();
        let (x, report, res) = match &mut self.gpu {
            Some(s) => {
                let done = s.solve(b, &opt, &mixed, &mut on_check)?;
                outcome(&done.report, a.tol)?;
                if let Some(updates) = done.updates {
                    println!("  {label}: {}", a.updates_line(&done.report, updates));
                }
                (done.x, done.report, done.residual)
            }
            None => {
                let t = Instant::now();
                let every = a.check_every as usize;
                progress(0, 1.0);
                let mut on_iteration = |it: usize, r: f64| -> Result<()> {
                    if it.is_multiple_of(every) {
                        progress(it, r);
                    }
                    agree_on_stop(&Solo, it)
                };
                let (x, solve, res) = match &self.clover {
                    Some(c) => solve_clover_eo_checked(
                        &self.lat,
                        &self.u,
                        c,
                        b,
                        a.tol,
                        a.max_iter as usize,
                        &mut on_iteration,
                    )?,
                    None => reference::solve_eo_checked(
                        &self.lat,
                        &self.u,
                        a.kappa,
                        b,
                        a.tol,
                        a.max_iter as usize,
                        &mut on_iteration,
                    )?,
                };
                let it = solve.iterations;
                if it.is_multiple_of(every) && it > 0 {
                    progress(it, solve.residual());
                }
                agree_on_solution(&Solo, &x.data, it as u64, at, stop)?;
                return Ok((x, it as u32, t.elapsed().as_secs_f64(), res, false));
            }
        };
        agree_on_solution(&Solo, &x.data, report.iterations as u64, at, stop)?;
        Ok((x, report.iterations, report.seconds, res, report.fused))
    }

    /// The summary line of `M_hat`'s time on the GPU, if the solve runs there.
    fn operator_line(&self, b: &SpinorField) -> Result<Option<String>> {
        let ms = match &self.gpu {
            Some(s) => s.time_apply(b)?,
            None => return Ok(None),
        };
        Ok(Some(m_hat_line(&self.lat, self.args.clover(), ms)))
    }

    /// Prints the footprint beside the measured peak (with `LATTICE_GPU_MEMORY_REPORT`).
    fn report(&self) {
        self.footprint.report(self.device.as_deref());
    }
}

/// Flops of one even-odd BiCGStab iteration on `lat`: two M_hat applications, each two hopping terms
/// on half the lattice.
fn flops_per_iteration(lat: &Lattice) -> f64 {
    4.0 * FLOPS_PER_SITE as f64 * lat.half_volume() as f64
}

fn make<T: WilsonReal, C: Communicator + 'static>(
    g: &Arc<Gpu>,
    layout: &Layout<C>,
    u: &GaugeField,
    kappa: f64,
    b: Build,
) -> Result<BiCgStab<T, EvenOdd<T>>> {
    let mut w = layout.wilson::<T>(g, u, kappa, b.recon)?;
    b.tuning.apply(&mut w, b.say)?;
    let mut solver = BiCgStab::new(g, EvenOdd(w))?;
    b.tuning.apply_vectors(&mut solver, b.say)?;
    Ok(solver)
}

/// The Wilson-clover solver of `clover` (built on `u` for `a`'s c_sw and kappa): the clover kernels'
/// block tuned as the hopping kernel's is (the tune cache's, or timed and stored), then the vector
/// kernels.
fn make_clover<T: CloverReal, C: Communicator + 'static>(
    g: &Arc<Gpu>,
    layout: &Layout<C>,
    u: &GaugeField,
    clover: &CloverField,
    b: Build,
) -> Result<BiCgStab<T, CloverEvenOdd<T>>> {
    let c = clover_operator::<T, C>(g, layout, u, clover, b)?;
    let mut solver = BiCgStab::new(g, CloverEvenOdd(c))?;
    b.tuning.apply_vectors(&mut solver, b.say)?;
    Ok(solver)
}

/// How a run builds its GPU operators and solvers: the links' storage, the launches' tuning, and
/// whether to say what was tuned.
#[derive(Clone, Copy)]
struct Build {
    recon: Recon,
    tuning: TuningArgs,
    say: bool,
}

impl SolverArgs {
    /// The build of a solve or propagator: it says what it tuned.
    fn build(&self) -> Build {
        Build {
            recon: self.recon,
            tuning: self.tuning,
            say: true,
        }
    }
}

/// The clover operator in storage `T` with its block tuned (on a split lattice, collectively).
fn clover_operator<T: CloverStorage, C: Communicator + 'static>(
    g: &Arc<Gpu>,
    layout: &Layout<C>,
    u: &GaugeField,
    clover: &CloverField,
    b: Build,
) -> Result<CloverGpu<T>> {
    let mut c = layout.clover::<T>(g, u, clover, b.recon)?;
    let mut cache = b.tuning.cache();
    if let (Some(t), true) = (c.tune_block(&mut cache, b.tuning.retune)?, b.say) {
        println!(
            "clover kernels ({}): blocks of {} threads ({:.1} us per M_hat; {})",
            T::PRECISION,
            c.clover_block(),
            t.ms_per_call * 1e3,
            tuned_from(&t)
        );
    }
    warn_of(&mut cache);
    Ok(c)
}

/// A mixed-precision clover solver (outer `H`, sloppy `S`): both operators tuned, the sloppy
/// solver's vector kernels too (the sloppy operator's tuning said only where it differs).
fn make_clover_mixed<H: CloverReal, S: CloverStorage, C: Communicator + 'static>(
    g: &Arc<Gpu>,
    layout: &Layout<C>,
    u: &GaugeField,
    clover: &CloverField,
    b: Build,
) -> Result<MixedBiCgStab<H, S, CloverEvenOdd<H>, CloverEvenOdd<S>>> {
    let hi = clover_operator::<H, C>(g, layout, u, clover, b)?;
    let lo_say = b.say && S::PRECISION != H::PRECISION;
    let lo = clover_operator::<S, C>(g, layout, u, clover, Build { say: lo_say, ..b })?;
    let mut solver = MixedBiCgStab::new(g, CloverEvenOdd(hi), CloverEvenOdd(lo))?;
    b.tuning.apply_vectors(solver.sloppy(), b.say)?;
    Ok(solver)
}

/// A mixed-precision Wilson solver at `kappa` (outer `H`, sloppy `S`): both operators tuned, the
/// sloppy solver's vector kernels too (the sloppy operator's tuning said only where it differs).
fn make_mixed<H: WilsonReal, S: WilsonStorage, C: Communicator + 'static>(
    g: &Arc<Gpu>,
    layout: &Layout<C>,
    u: &GaugeField,
    kappa: f64,
    b: Build,
) -> Result<MixedBiCgStab<H, S, EvenOdd<H>, EvenOdd<S>>> {
    let mut hi = layout.wilson::<H>(g, u, kappa, b.recon)?;
    b.tuning.apply(&mut hi, b.say)?;
    let mut lo = layout.wilson::<S>(g, u, kappa, b.recon)?;
    b.tuning
        .apply(&mut lo, b.say && S::PRECISION != H::PRECISION)?;
    let mut solver = MixedBiCgStab::new(g, EvenOdd(hi), EvenOdd(lo))?;
    b.tuning.apply_vectors(solver.sloppy(), b.say)?;
    Ok(solver)
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
        // The device calls a NaN a breakdown of the quantity it met first; the residual tells.
        SolveStatus::Breakdown(what) => Err(Error::Breakdown {
            iteration: r.iterations as usize,
            what: match r.residual.is_finite() {
                true => what.to_string(),
                false => format!(
                    "the residual became {}: the operator or the source produced a NaN or \
                     infinity (check the gauge field)",
                    r.residual
                ),
            },
        }),
    }
}

/// The most ranks `--gpus` can split `dims` over, and what they split, on GPUs or on the CPU: the
/// lattice is cut along y, z and t only (x holds the tiles' lanes), a rank at least one site deep
/// along a cut axis on the CPU and two (a pair of planes, for even-odd ordering) on a GPU.
fn split_bound(dims: [usize; 4], on_gpu: bool) -> (usize, String) {
    let planes = if on_gpu { 2 } else { 1 };
    let [_, y, z, t] = dims.map(|d| d / planes);
    let most = y.saturating_mul(z).saturating_mul(t);
    let over = if on_gpu {
        format!("the lattice's {y}x{z}x{t} pairs of sites along y, z and t (a GPU's block is two sites deep along a cut axis)")
    } else {
        format!("the lattice's {y}x{z}x{t} sites along y, z and t")
    };
    (most, over)
}

/// Whether the ranks of `--gpus` will run on GPUs: `--engine device`, or `auto` where there is one.
fn ranks_on_gpu(engine: Placement) -> bool {
    match engine {
        Placement::Host => false,
        Placement::Device => true,
        Placement::Auto => Gpu::probe().is_ok_and(|n| n > 0),
    }
}

/// What the CPU engine says of `--sloppy` and `--solver cgnr`, on one domain or split.
const CPU_SOLVES_F64: &str = "notice: the CPU reference solves with BiCGStab in f64; --sloppy and \
     --solver cgnr apply on a GPU";

/// Why `--bench` refuses a mixed-precision or CGNR solver.
const BENCH_ONE_PRECISION: &str = "--bench times one precision's BiCGStab variants; leave out \
     --sloppy and --solver, or time mixed precision with `lqcd bench-mixed`";

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
    if a.bench.is_some() && a.solver.clover() {
        return Err(Error::InvalidParameter(format!(
            "solve --bench with --csw {} is not supported yet: it times the Wilson solver's \
             variants; time the clover kernels and M_hat with `lqcd bench`, leave out --bench, or \
             give --csw 0 to time the Wilson solver",
            a.solver.csw
        )));
    }
    // Before the operators are built and tuned (a mixed solver has two).
    if a.bench.is_some() && a.solver.mixed() {
        return Err(Error::InvalidParameter(BENCH_ONE_PRECISION.into()));
    }
    if (a.grid.is_some() || a.cut.is_some()) && !a.mpi && a.split.gpus.is_none() {
        return Err(Error::InvalidParameter(
            "--grid and --cut shape a split run: add --mpi (under mpirun) or --gpus N".into(),
        ));
    }
    if a.split.gpus.is_some() || a.mpi {
        a.solver.check_split(ranks_on_gpu(a.solver.engine))?;
    }
    if let Some(n) = a.split.gpus {
        return solve_on_threads(a, n as usize);
    }
    if a.mpi {
        #[cfg(feature = "mpi")]
        {
            check(&a.solver)?;
            let comm = Rc::new(lattice_gpu_host::comm::Mpi::init()?);
            let lead = comm.rank() == 0;
            let lat = Lattice::new(gauge_lattice(&a.solver.gauge)?, a.solver.antiperiodic_t)?;
            let on_gpu = ranks_on_gpu(a.solver.engine);
            let footprint = split_footprint(a, &lat, comm.size(), 1, on_gpu)?.under_mpi();
            footprint.check(None)?;
            let (u, b, clover) = split_fields(a, &lat, lead)?;
            solve_split(a, comm, &lat, &u, &b, clover.as_ref(), &footprint)?;
            if lead {
                write_gauge(&a.solver.gauge, &u)?;
            }
            return Ok(());
        }
        #[cfg(not(feature = "mpi"))]
        return Err(Error::InvalidParameter(lattice_gpu_cli::NO_MPI.into()));
    }
    let mut s = Solver::new(&a.solver, "a solve")?;
    let b = SpinorField::random(s.lat.dims, a.source_seed);
    if let Some(n) = a.bench {
        let c = a.solver.check_every;
        let mut stop = |step: u64| agree_on_stop(&Solo, step as usize);
        match &mut s.gpu {
            Some(GpuSolver::F32(g)) => bench_variants(g, &b, &s.lat, n, c, true, &mut stop)?,
            Some(GpuSolver::F64(g)) => bench_variants(g, &b, &s.lat, n, c, true, &mut stop)?,
            Some(_) => return Err(Error::InvalidParameter(BENCH_ONE_PRECISION.into())),
            None => {
                return Err(Error::InvalidParameter(
                    "--bench times the GPU solver: run on a GPU (--engine device)".into(),
                ))
            }
        }
        s.report();
        return Ok(());
    }
    let (x, it, secs, res, fused) = s.solve(&b, "solve", true)?;
    let (x_norm, res) = finite_results(norm(&x.data), res, "try --precision f64")?;
    if s.args.clover() {
        let gflops = clover_flops_per_iteration(&s.lat) * it as f64 / secs / 1e9;
        println!(
            "converged ({}): {it} iterations in {secs:.4} s ({:.1} us/iteration, {gflops:.1} GFLOPS at {FLOPS_PER_SITE} + 504 flops/site/clover hopping term), |x| = {x_norm:.12e}, true residual of the clover system |b - D x|/|b| = {res:.3e}",
            s.args.operator_name(),
            secs / it.max(1) as f64 * 1e6,
        );
    } else {
        let gflops = flops_per_iteration(&s.lat) * it as f64 / secs / 1e9;
        println!(
            "converged: {it} iterations in {secs:.4} s ({:.1} us/iteration{}, {gflops:.1} GFLOPS at {} flops/site/hopping term), |x| = {x_norm:.12e}, true residual |b - D x|/|b| = {res:.3e}",
            secs / it.max(1) as f64 * 1e6,
            if fused { ", one kernel each" } else { "" },
            FLOPS_PER_SITE,
        );
    }
    drop(x);
    if let Some(line) = s.operator_line(&b)? {
        println!("{line}");
    }
    write_gauge(&a.solver.gauge, &s.u)?;
    s.report();
    Ok(())
}

/// `solve --gpus N`: the ranks as threads of this process. The rank count is checked against the
/// lattice, and the memory of all ranks together against the host, before the gauge field is made;
/// the field and the source are made once and shared by the ranks.
fn solve_on_threads(a: &SolveArgs, n: usize) -> Result<()> {
    check(&a.solver)?;
    let lat = Lattice::new(gauge_lattice(&a.solver.gauge)?, a.solver.antiperiodic_t)?;
    let on_gpu = ranks_on_gpu(a.solver.engine);
    let (most, over) = split_bound(lat.dims, on_gpu);
    // As `on_gpus` refuses them, but before the whole gauge field is made.
    lattice_gpu_cli::check_gpus(n, most, &over)?;
    let footprint = split_footprint(a, &lat, n, n, on_gpu)?;
    footprint.check(None)?;
    let (u, b, clover) = split_fields(a, &lat, true)?;
    lattice_gpu_cli::on_gpus(n, most, &over, |c| {
        solve_split(
            a,
            Rc::new(c.clone()),
            &lat,
            &u,
            &b,
            clover.as_ref(),
            &footprint,
        )
    })?;
    write_gauge(&a.solver.gauge, &u)
}

/// The host footprint of a split solve of `ranks` ranks, `here` of them in this process.
fn split_footprint(
    a: &SolveArgs,
    lat: &Lattice,
    ranks: usize,
    here: usize,
    on_gpu: bool,
) -> Result<Footprint> {
    let cuts: Vec<usize> = (1..4)
        .filter(|&axis| a.cut.is_some_and(|c| c[axis - 1]))
        .collect();
    let grid = match on_gpu {
        true => rank_grid(a, ranks, || gpu_grid(lat.dims, ranks))?,
        false => rank_grid(a, ranks, || {
            lattice_gpu_lqcd::distributed::rank_grid(lat.dims, ranks, 1)
        })?,
    };
    let gpu = on_gpu.then_some((a.solver.precision, a.solver.recon, &cuts[..]));
    let mut f = split_host_footprint(lat, grid, here, gpu)?;
    if a.solver.clover() {
        // The whole lattice's clover field, made once a process for all its ranks.
        let clover = volume_bytes(lat.dims, CLOVER_SITE, "the clover field")?;
        f.host = f.host.saturating_add(clover);
    }
    Ok(f)
}

/// The gauge field (with its plaquette, printed where `lead`), the random source and, with `--csw`,
/// the clover field of a split solve: the whole lattice's, made once a process for all its ranks.
fn split_fields(
    a: &SolveArgs,
    lat: &Lattice,
    lead: bool,
) -> Result<(GaugeField, SpinorField, Option<CloverField>)> {
    let args = &a.solver;
    let u = make_gauge(&args.gauge, lead)?;
    plaquette(&u, lead)?;
    if lead {
        println!("operator: {}", args.operator_name());
    }
    // A singular clover block is refused here, naming its site.
    let clover = match args.clover() {
        true => Some(CloverField::new(&u, args.csw, args.kappa)?),
        false => None,
    };
    Ok((u, SpinorField::random(lat.dims, a.source_seed), clover))
}

/// How a split solve fills its ghosts.
fn ghosts(split: &lattice_gpu_cli::HaloArgs) -> &'static str {
    use lattice_gpu_cli::HaloTransport;
    match (split.halos, split.no_overlap) {
        (HaloTransport::Host, _) => "ghosts through host memory before each hopping term",
        (HaloTransport::Nccl, true) => "ghosts through NCCL before each hopping term (no overlap)",
        (HaloTransport::Nccl, false) => "ghosts through NCCL behind the inner sites",
    }
}

/// `solve --bench N`: each variant's time per iteration over `n` iterations (after an untimed run that
/// captures the graphs), on the even-odd system of `b`, then `M_hat` alone; `lead` prints. `lat` is the
/// whole lattice (the GFLOPS are of all ranks together). `stop(variant)` is called before each variant
/// on every rank: a signal ends the benchmark there.
fn bench_variants<T: WilsonReal>(
    solver: &mut BiCgStab<T, EvenOdd<T>>,
    b: &SpinorField,
    lat: &Lattice,
    n: u32,
    check_every: u32,
    lead: bool,
    stop: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<()> {
    use lattice_gpu_host::solvers::bicgstab::DeviceOperator;
    let src = solver.operator().0.upload_parity(b, 0)?;
    let mut x = solver.operator().0.parity_buffer()?;
    let staged = solver.operator().ranks().is_some_and(|r| r.waits_for_gpu());
    let flops = flops_per_iteration(lat);
    for (k, variant) in OverheadHiding::ALL.into_iter().enumerate() {
        if staged && !matches!(variant, OverheadHiding::Sync | OverheadHiding::Async) {
            continue;
        }
        stop(k as u64)?;
        let opt = SolveOptions {
            tol: f64::MIN_POSITIVE,
            max_iter: n.max(1),
            variant,
            check_every: check_every.min(lattice_gpu_host::solvers::bicgstab::MAX_HELD_ITERATIONS),
            fused: Fusion::Auto,
        };
        solver.solve(&src, &mut x, &opt, &mut |_, _| Ok(()))?;
        let r = solver.solve(&src, &mut x, &opt, &mut |_, _| Ok(()))?;
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

/// Flops of one even-odd clover BiCGStab iteration on `lat`: two clover `M_hat` applications, each two
/// hopping terms and two clover matrices on half the lattice.
fn clover_flops_per_iteration(lat: &Lattice) -> f64 {
    4.0 * CLOVER_FLOPS_PER_SITE as f64 * lat.half_volume() as f64
}

/// Flops of one clover hopping term per site: QUDA's 1320 for the hops and 504 for the clover matrix.
const CLOVER_FLOPS_PER_SITE: u64 = FLOPS_PER_SITE + 504;

/// What one application of the clover `M_hat` (two clover hopping terms over half the lattice each)
/// taking `ms` means.
fn clover_operator_line(lat: &Lattice, ms: f64) -> String {
    let flops = 2.0 * CLOVER_FLOPS_PER_SITE as f64 * lat.half_volume() as f64;
    format!(
        "operator M_hat = A_ee - kappa^2 H_eo A_oo^-1 H_oe (two clover hopping terms): {:.1} us per application, {:.1} GFLOPS",
        ms * 1e3,
        flops / ms / 1e6
    )
}

/// Flops of one even-odd BiCGStab iteration on `lat`, of the clover operator where `clover`.
fn iteration_flops(lat: &Lattice, clover: bool) -> f64 {
    match clover {
        true => clover_flops_per_iteration(lat),
        false => flops_per_iteration(lat),
    }
}

/// The summary line of one `M_hat` application taking `ms`, of the clover operator where `clover`.
fn m_hat_line(lat: &Lattice, clover: bool, ms: f64) -> String {
    match clover {
        true => clover_operator_line(lat, ms),
        false => operator_line(lat, ms),
    }
}

/// What one application of `M_hat` (two hopping terms over half the lattice each) taking `ms` means.
fn operator_line(lat: &Lattice, ms: f64) -> String {
    let flops = 2.0 * FLOPS_PER_SITE as f64 * lat.half_volume() as f64;
    format!(
        "operator M_hat (two hopping terms, ghost exchanges included when split): {:.1} us per application, {:.1} GFLOPS",
        ms * 1e3,
        flops / ms / 1e6
    )
}

fn norm(x: &[Complex64]) -> f64 {
    x.iter().map(|z| z.norm_sqr()).sum::<f64>().sqrt()
}

/// `solve --mpi` or `--gpus`: the lattice split over the ranks of `comm` into blocks along t, z and y:
/// on GPUs, else the CPU reference. `u` and `b` are the whole gauge field and source (shared by the
/// threads of `--gpus`); `footprint` is the process's, which rank 0 reports.
fn solve_split<C: Communicator + 'static>(
    a: &SolveArgs,
    comm: Rc<C>,
    lat: &Lattice,
    u: &GaugeField,
    b: &SpinorField,
    clover: Option<&CloverField>,
    footprint: &Footprint,
) -> Result<()> {
    let args = &a.solver;
    lattice_gpu_cli::same_options(&*comm).map_err(Error::InvalidParameter)?;
    let gpu = args.engine.gpu("the CPU reference split over the ranks")?;
    a.split
        .check(gpu.is_some())
        .map_err(Error::InvalidParameter)?;
    let lead = comm.rank() == 0;
    if let Some(g) = gpu {
        return solve_split_gpu(a, &comm, &g, lat, u, b, clover, footprint);
    }
    if args.mixed() && lead {
        println!("{CPU_SOLVES_F64}");
    }
    if a.cut.is_some() {
        return Err(Error::InvalidParameter(
            "--cut is for the GPU split: run it on GPUs (--engine device)".into(),
        ));
    }
    let comm = &*comm;
    let g = rank_grid(a, comm.size(), || {
        lattice_gpu_lqcd::distributed::rank_grid(lat.dims, comm.size(), 1)
    })?;
    let d = lattice_gpu_lqcd::distributed::Distributed::on_grid(comm, lat, u, g)?;
    let every = split_check_every(lat, args.max_iter, comm.size());
    let mut on_iteration = |it: usize, _: f64| match it.is_multiple_of(every) {
        true => agree_on_stop(comm, it),
        false => Ok(()),
    };
    let t = Instant::now();
    let (x, solve, res) = d.solve_checked(
        args.kappa,
        &d.scatter(&b.data),
        args.tol,
        args.max_iter as usize,
        &mut on_iteration,
    )?;
    agree_on_solution(
        comm,
        &x,
        solve.iterations as u64,
        |rank, k| d.site_of(rank, k),
        true,
    )?;
    // The norm is summed over the ranks: no rank gathers the whole solution.
    let x_norm = d.norm2(&x)?.sqrt();
    if lead {
        let (x_norm, res) = finite_results(x_norm, res, "try a smaller kappa")?;
        println!(
            "split over {} ranks (y x z x t: {}x{}x{}): converged in {} iterations ({:.4} s), |x| = {x_norm:.12e}, true residual |b - D x|/|b| = {res:.3e}",
            comm.size(),
            g[1],
            g[2],
            g[3],
            solve.iterations,
            t.elapsed().as_secs_f64(),
        );
        footprint.report(None);
    }
    Ok(())
}

/// `solve --mpi` on GPUs: this rank's block, ghosts and sums through NCCL or host memory; the Wilson
/// or clover operator (`clover`, the whole lattice's), in one precision or mixed.
#[allow(clippy::too_many_arguments)]
fn solve_split_gpu<C: Communicator + 'static>(
    a: &SolveArgs,
    comm: &Rc<C>,
    g: &Arc<Gpu>,
    lat: &Lattice,
    u: &GaugeField,
    b: &SpinorField,
    clover: Option<&CloverField>,
    footprint: &Footprint,
) -> Result<()> {
    let args = &a.solver;
    let size = comm.size();
    let grid = rank_grid(a, size, || gpu_grid(lat.dims, size))?;
    let cuts: Vec<usize> = (1..4)
        .filter(|&axis| a.cut.is_some_and(|c| c[axis - 1]))
        .collect();
    let block = Block::new(*lat, grid, comm.rank())?.cutting(&cuts)?;
    // This rank's GPU part, before its first array; the host's was checked for the whole process.
    let mine = Footprint {
        gpu: split_gpu_bytes(args, &block)?,
        ..footprint.clone()
    };
    // Every rank learns whether some rank's GPU is too small, so that none goes on into the
    // collective set-up of the exchanges while another has stopped.
    let fits = g.check_fits(mine.gpu, &mine.what);
    let short = comm.sum(if fits.is_err() { 1.0 } else { 0.0 })?;
    fits?;
    if short > 0.0 {
        return Err(HostError::InvalidSetting(format!(
            "{short} of the {size} ranks' GPUs cannot hold their blocks of {}: split over more \
             GPUs, or use --precision f32 or --recon 12",
            mine.what
        ))
        .into());
    }
    let word = block.cut_flags();
    let cut: Vec<&str> = [(Y_CUT, "y"), (Z_CUT, "z"), (T_CUT, "t")]
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
    let layout = SplitLayout {
        block,
        comm: comm.clone(),
        halos: a.split.halos,
        overlap: !a.split.no_overlap,
    };
    let lead = comm.rank() == 0;
    if lead {
        println!("{}", args.method_line());
    }
    // Collective: the ranks time their exchanges together. Each rank's vector kernels run on its own
    // sites alone: each tunes them for its own GPU.
    let mut solver = GpuSolver::new(args, g, &Layout::Split(&layout), u, clover, lead)?;
    if let Some(n) = a.bench {
        if lead {
            println!("{split}, {}", ghosts(&a.split));
        }
        let mut stop = |step: u64| agree_on_stop(&**comm, step as usize);
        let c = args.check_every;
        match &mut solver {
            GpuSolver::F32(s) => bench_variants(s, b, lat, n, c, lead, &mut stop)?,
            GpuSolver::F64(s) => bench_variants(s, b, lat, n, c, lead, &mut stop)?,
            _ => return Err(Error::InvalidParameter(BENCH_ONE_PRECISION.into())),
        }
        if lead {
            mine.report(Some(g));
        }
        return Ok(());
    }
    let opt = SolveOptions {
        tol: args.tol,
        max_iter: args.max_iter,
        variant: args.variant,
        check_every: args.check_every,
        fused: args.fused,
    };
    // Every rank reads the residual after the same iterations, so they agree on a signal there.
    let mut on_check = |it: usize, r: f64| {
        if lead {
            println!("  solve iteration {it:5}  residual {r:.3e}");
        }
        stop_at_signal(&**comm, it)
    };
    let done = solver.solve(b, &opt, &args.mixed_options(), &mut on_check)?;
    outcome(&done.report, args.tol)?;
    if let (Some(updates), true) = (done.updates, lead) {
        println!("  solve: {}", args.updates_line(&done.report, updates));
    }
    let (x, report, res) = (done.x, done.report, done.residual);
    // Each rank holds its own sites of x (the others zero), in the whole lattice's order.
    agree_on_solution(
        &**comm,
        &x.data,
        report.iterations as u64,
        |_, n| lat.coords(n),
        true,
    )?;
    // The norm is summed over the ranks.
    let x_norm = comm.sum(norm(&x.data).powi(2))?.sqrt();
    drop(x);
    if lead {
        let (x_norm, res) = finite_results(x_norm, res, "try --precision f64")?;
        let it = report.iterations;
        let secs = report.seconds;
        let gflops = iteration_flops(lat, clover.is_some()) * it as f64 / secs / 1e9;
        println!(
            "{split}, {} ({} variant): converged in {it} iterations ({secs:.4} s, {:.1} us/iteration, {gflops:.1} GFLOPS), |x| = {x_norm:.12e}, true residual |b - D x|/|b| = {res:.3e}",
            ghosts(&a.split),
            args.variant,
            secs / it.max(1) as f64 * 1e6,
        );
    }
    let ms = solver.time_apply(b)?;
    if lead {
        println!("{}", m_hat_line(lat, clover.is_some(), ms));
        mine.report(Some(g));
    }
    Ok(())
}

/// `lqcd propagator`: the 12 solves of a point source, one after another, each solution added to the
/// pion correlator and dropped (the 12 are never held together), and a checkpoint of the finished
/// sources written after each. Between the solves (and on the CPU after every iteration) a signal
/// stops the run, the last checkpoint complete on disk; pion.csv is staged and appears only when the
/// correlator is complete and finite, with `--write-gauge` written after it.
fn propagator(a: &PropagatorArgs) -> Result<()> {
    let out = lattice_gpu_cli::output_dir(&a.output)?;
    let ck_dir = a
        .checkpoint
        .clone()
        .unwrap_or_else(|| a.output.join("checkpoint"));
    let ck_path = checkpoint_path(&ck_dir, a.checkpoint.is_some())?;
    // A damaged or foreign checkpoint is refused before the gauge field is made; whether it is of
    // this run is known once the field's checksum is.
    let resumed = match &a.resume {
        Some(path) => {
            let file = lattice_gpu_cli::checkpoint_file(path, checkpoint::FILE);
            Some((read_checkpoint(&file)?, file))
        }
        None => {
            notice_unfinished(&ck_path, &ck_dir);
            None
        }
    };
    let mut s = Solver::new(&a.solver, "a propagator")?;
    let (must, informed) = propagator_params(&s);
    let nt = s.lat.dims[3];
    let mut progress = match resumed {
        Some((ck, file)) => resume_progress(ck, &must, &informed, &file, nt)?,
        None => Progress::new(nt),
    };
    let first = progress.done();
    let params = [must, informed].concat();
    let mut saver = Saver::new(&ck_path);
    let mut written = Vec::new();
    let solved = solve_sources(&mut s, &mut progress, &params, &mut saver, &mut written);
    // Whatever ended the solves, the checkpoint being written is whole on disk before the run goes on
    // or ends (a process that exits mid-write would leave only its temporary file).
    let last = saver.wait();
    if let Err(e) = solved {
        match last {
            Ok(w) => written.extend(w),
            Err(w) => eprintln!("the last checkpoint could not be written: {w}"),
        }
        // What is on disk, which a failed write leaves behind the sources solved.
        let kept = match (written.last(), &a.resume) {
            (Some(w), _) => Some((ck_path.clone(), ck_dir.clone(), w.step)),
            (None, Some(r)) if first > 0 => Some((
                lattice_gpu_cli::checkpoint_file(r, checkpoint::FILE),
                r.clone(),
                first as u64,
            )),
            (None, _) => None,
        };
        match kept {
            Some((file, dir, n)) => eprintln!(
                "the checkpoint of the {n} finished sources of {SOURCES} is {}; continue the run \
                 with --resume {}",
                file.display(),
                dir.display()
            ),
            None if matches!(&e, Error::Host(HostError::Interrupted { .. })) => {
                eprintln!("no source was finished, so no checkpoint was written")
            }
            None => {}
        }
        return Err(e);
    }
    // The results are complete: a last checkpoint that could not be written costs only the way to
    // make them again, not them.
    match last {
        Ok(w) => written.extend(w),
        Err(e) => eprintln!(
            "notice: the checkpoint of all {SOURCES} sources could not be written ({e}); the \
             results are complete and are written"
        ),
    }
    let c = &progress.correlator;
    let m = pion::effective_mass(c);
    let iterations: u64 = progress.iterations.iter().map(|&i| u64::from(i)).sum();
    let seconds: f64 = progress.seconds.iter().sum();
    println!(
        "{SOURCES} solves, {iterations} iterations in all, in {seconds:.3} s{}\n t  C(t)                    m_eff(t)",
        match first {
            0 => String::new(),
            n => format!(" ({n} of them by the run that wrote the checkpoint)"),
        }
    );
    // The table shows m_eff below T/2, where the forward-propagating state dominates (pion.csv too);
    // meff.csv and meff.png hold every t.
    for (t, v) in c.iter().enumerate() {
        match m.get(t).filter(|_| t < c.len() / 2) {
            Some(Some(mt)) => println!("{t:2}  {v:.16e}  {mt:.6}"),
            Some(None) => println!("{t:2}  {v:.16e}  undefined"),
            None => println!("{t:2}  {v:.16e}"),
        }
    }
    // ln(C(t) / C(t + 1)) has no value where a C is not positive: the solutions do not reach that far
    // from the source, which only a loose tolerance allows. It is said once, and left empty in the files.
    let gaps: Vec<String> = (0..m.len())
        .filter(|&t| m[t].is_none())
        .map(|t| t.to_string())
        .collect();
    if !gaps.is_empty() {
        eprintln!(
            "notice: m_eff(t) = ln(C(t)/C(t + 1)) is undefined at t = {} (C(t) or C(t + 1) is not \
             positive: the solutions do not reach that far from the source; a smaller --tol makes \
             them), left empty in pion.csv and meff.csv and left out of meff.png",
            gaps.join(", ")
        );
    }
    pion::write_csv(&out.file("pion.csv"), c, &m)?;
    let meff = m;
    pion::write_meff_csv(&out.file("meff.csv"), &meff)?;
    let title = format!("pion {}, {}", dims_name(s.lat.dims), s.args.operator_name());
    pion::write_meff_png(&out.file("meff.png"), &title, c, &meff)?;
    // The directory first: its commit is what the state of the output directory can refuse. The
    // gauge file's path was checked at the start.
    lattice_gpu_cli::commit(out)?;
    write_gauge(&a.solver.gauge, &s.u)?;
    if let Some(w) = written.last() {
        println!(
            "{} checkpoints written to {}, one per source, the last {} bytes in {:.3} s ({:.1} MB/s); \
             the run waited {:.3} s for them",
            written.len(),
            ck_path.display(),
            w.bytes,
            w.seconds,
            w.bytes as f64 / 1e6 / w.seconds.max(1e-9),
            saver.waited()
        );
    }
    s.report();
    Ok(())
}

/// The sources from `progress.done()` on: each solved, added to the correlator and checkpointed
/// (`params` in the file; `saver` writes it while the next source is solved, `written` collects
/// what the writes took). A signal stops the run before the next source; on the CPU one also stops
/// the solve under way, whose source is then not finished and not in the checkpoint. After the last
/// source a signal stops nothing: the results are complete.
fn solve_sources(
    s: &mut Solver,
    progress: &mut Progress,
    params: &[(String, String)],
    saver: &mut Saver,
    written: &mut Vec<Written>,
) -> Result<()> {
    for k in progress.done()..SOURCES {
        Verdict::agree(&Solo, None)?.into_result(k as u64, "", |_| String::new(), "")?;
        let (spin, colour) = checkpoint::source(k);
        let b = SpinorField::point_source(s.lat.dims, spin, colour);
        let label = format!("source s={spin} c={colour}");
        // A signal stops the run after its k finished sources, whichever iteration it stopped.
        let (x, it, secs, res, _) = s.solve(&b, &label, false).map_err(|e| match e {
            Error::Host(HostError::Interrupted { signal, .. }) => {
                Error::Host(HostError::Interrupted {
                    signal,
                    step: k as u64,
                })
            }
            e => e,
        })?;
        drop(b);
        let res = finite(
            res,
            "the true residual |b - D x|/|b|",
            &label,
            "the solution is finite, but too large to apply D to; try a smaller kappa",
        )?;
        println!("{label}: {it} iterations, true residual {res:.2e}");
        progress.add(&s.lat, &x, it, res, secs);
        drop(x);
        // Only a finite correlator is checkpointed: the last checkpoint stays the one before.
        for (t, &v) in progress.correlator.iter().enumerate() {
            finite(
                v,
                "the pion correlator C(t)",
                &format!("t = {t} after {label}"),
                "a solution held a value too large to square; try a smaller kappa",
            )?;
        }
        written.extend(saver.save(progress.checkpoint(params))?);
    }
    Ok(())
}

/// The checkpoint file in `dir` (named by `--checkpoint` where `named`, else the output's), refused
/// at the start, not after the first source, where it cannot be written.
fn checkpoint_path(dir: &std::path::Path, named: bool) -> Result<PathBuf> {
    let option = match named {
        true => "--checkpoint",
        false => "the checkpoint directory (OUTPUT/checkpoint)",
    };
    let bad = |what: String| {
        Err(Error::InvalidParameter(format!(
            "{option} {}: {what}; name another with --checkpoint DIR",
            dir.display()
        )))
    };
    if let Ok(m) = std::fs::metadata(dir) {
        if !m.is_dir() {
            return bad(format!(
                "it is {}, not a directory",
                match m.is_file() {
                    true => "a file",
                    false => lattice_gpu_lqcd::ildg::kind_of(&m),
                }
            ));
        }
    }
    let file = dir.join(checkpoint::FILE);
    if let Ok(m) = std::fs::metadata(&file) {
        if !m.is_file() {
            return bad(format!(
                "its {} is {}, not a regular file",
                checkpoint::FILE,
                lattice_gpu_lqcd::ildg::kind_of(&m)
            ));
        }
    }
    Ok(file)
}

/// Reads the checkpoint at `file`: one that is no regular file (a pipe would wait for a writer for
/// ever) is refused by name before it is opened.
fn read_checkpoint(file: &std::path::Path) -> Result<Checkpoint> {
    if let Ok(m) = std::fs::metadata(file) {
        if !m.is_file() {
            return Err(lattice_gpu_formats::IoError::Checkpoint {
                path: file.to_path_buf(),
                problem: format!(
                    "it is {}, not a checkpoint file; give the checkpoint's directory or file",
                    lattice_gpu_lqcd::ildg::kind_of(&m)
                ),
            }
            .into());
        }
    }
    Ok(Checkpoint::read(file)?)
}

/// A fresh run that will replace, after its first source, the checkpoint of a propagator that did not
/// finish says so first.
fn notice_unfinished(file: &std::path::Path, dir: &std::path::Path) {
    if !std::fs::metadata(file).is_ok_and(|m| m.is_file()) {
        return;
    }
    if let Ok(ck) = Checkpoint::read(file) {
        if ck.application == checkpoint::APPLICATION && ck.step < SOURCES as u64 {
            eprintln!(
                "notice: {} holds {} finished sources of a propagator that did not finish; this run \
                 starts over and replaces it after its first source (to continue that one instead, \
                 stop this run and give --resume {})",
                file.display(),
                ck.step,
                dir.display()
            );
        }
    }
}

/// A checkpoint's parameters, (name, value).
type Params = Vec<(String, String)>;

/// The parameters a resumed propagator must share with the run that wrote its checkpoint (all that
/// decides the solutions' bits), and those that only inform: --max-iter (a converged solve's
/// iterations do not depend on it), where the gauge field came from (its checksum is what counts),
/// and the GPU's model.
fn propagator_params(s: &Solver) -> (Params, Params) {
    let a = &s.args;
    let [x, y, z, t] = s.lat.dims;
    let sum = checkpoint::gauge_checksum(&s.u);
    let mut must: Params = vec![
        ("lattice".into(), format!("{x}x{y}x{z}x{t}")),
        (
            "boundary-t".into(),
            match s.lat.antiperiodic_t {
                true => "antiperiodic",
                false => "periodic",
            }
            .into(),
        ),
        (
            "gauge-checksum".into(),
            format!("suma-{:08x}-sumb-{:08x}", sum.suma, sum.sumb),
        ),
        ("kappa".into(), a.kappa.to_string()),
        ("tol".into(), format!("{:e}", a.tol)),
    ];
    // Only for clover, so that a Wilson run writes the checkpoint it wrote before --csw existed;
    // [`resume_progress`] reads a checkpoint without it as c_sw = 0.
    if a.clover() {
        must.push(("csw".into(), a.csw.to_string()));
    }
    must.extend([
        ("source".into(), "point-at-origin".into()),
        ("engine".into(), engine_name(s.gpu.is_some()).into()),
    ]);
    // The CPU reference solves in f64 whatever the GPU's options say.
    if s.gpu.is_some() {
        must.extend([
            ("precision".to_string(), prec_name(a.precision).to_string()),
            ("recon".into(), a.recon.name().into()),
            ("variant".into(), a.variant.name().into()),
            (
                "fused".into(),
                match a.fused {
                    Fusion::Off => "off",
                    Fusion::On => "on",
                    Fusion::Auto => "auto",
                }
                .into(),
            ),
            ("check-every".into(), a.check_every.to_string()),
        ]);
        // Only where they change the solve, so that checkpoints of one-precision BiCGStab runs
        // written before these options existed still resume.
        if a.mixed() {
            must.extend([
                ("sloppy".to_string(), a.sloppy().name().to_string()),
                ("solver".into(), a.solver.name().into()),
                ("delta".into(), a.delta.to_string()),
            ]);
        }
    }
    let mut informed: Params = vec![
        ("max-iter".into(), a.max_iter.to_string()),
        (
            "gauge".into(),
            match &a.gauge.gauge {
                Some(_) => "file".to_string(),
                None => format!("random-seed-{}", a.gauge.seed),
            },
        ),
    ];
    if let Some(g) = &s.device {
        informed.push((
            "gpu".into(),
            g.name().split_whitespace().collect::<Vec<_>>().join("_"),
        ));
    }
    (must, informed)
}

fn engine_name(gpu: bool) -> &'static str {
    match gpu {
        true => "gpu",
        false => "cpu",
    }
}

/// The finished sources of checkpoint `ck` (read from `file`), checked against this run's `must`
/// parameters, printed as the straight run printed them. A checkpoint of the other engine is refused
/// first, with the option that changes it; one of another GPU model is resumed with a note.
fn resume_progress(
    mut ck: Checkpoint,
    must: &[(String, String)],
    informed: &[(String, String)],
    file: &std::path::Path,
    nt: usize,
) -> Result<Progress> {
    let ours = |p: &[(String, String)], name: &str| {
        p.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    };
    if ck.application == checkpoint::APPLICATION {
        if let (Some(there), Some(here)) = (checkpoint::param(&ck, "engine"), ours(must, "engine"))
        {
            if there != here {
                return Err(lattice_gpu_formats::IoError::Checkpoint {
                    path: file.to_path_buf(),
                    problem: format!(
                        "its sources were solved on the {there} and this run solves on the {here}: \
                         the solutions would differ in their rounding, so C(t) would be neither \
                         run's; resume with --engine {}",
                        match there {
                            "cpu" => "host",
                            _ => "device",
                        }
                    ),
                }
                .into());
            }
        }
    }
    let note = match (checkpoint::param(&ck, "gpu"), ours(informed, "gpu")) {
        (Some(there), Some(here)) if there != here => Some(format!(
            "note: the checkpoint's sources were solved on {there} and these are on {here}: \
             BiCGStab's sums are grouped by the GPU's multiprocessor count, so C(t) may differ in \
             its last bits from a run never stopped"
        )),
        _ => None,
    };
    // A checkpoint without c_sw is of the Wilson operator (those of clover runs name theirs), so
    // that a Wilson run and a clover one never resume each other's.
    let wilson = || ("csw".to_string(), "0".to_string());
    if checkpoint::param(&ck, "csw").is_none() {
        ck.params.push(wilson());
    }
    let mut must = must.to_vec();
    if ours(&must, "csw").is_none() {
        must.push(wilson());
    }
    let progress = Progress::resume(ck, &must, file, nt)?;
    let n = progress.done();
    println!(
        "resuming after {n} of {SOURCES} sources from {}{}",
        file.display(),
        match n {
            SOURCES => ": every source is finished; the results are made from it",
            _ => "; its sources:",
        }
    );
    if let Some(note) = note {
        eprintln!("{note}");
    }
    // As the run that solved them printed them.
    for k in 0..n {
        let (spin, colour) = checkpoint::source(k);
        println!(
            "source s={spin} c={colour}: {} iterations, true residual {:.2e}",
            progress.iterations[k], progress.residuals[k]
        );
    }
    Ok(progress)
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
