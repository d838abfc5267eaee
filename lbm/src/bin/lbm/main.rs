//! `lbm`: D3Q19 or D3Q27 lattice Boltzmann on the GPU (or the CPU): the lid-driven cavity, the
//! Poiseuille channel, the decaying Taylor-Green vortex, the flow around a cylinder or any body, and
//! the MLUPs/s benchmark against the copy bandwidth.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand, ValueEnum};
use indicatif::ProgressBar;
use lattice_gpu_cli::{self as cli, parse_size3, progress, HaloTransport, Placement};
use lattice_gpu_formats::checkpoint::{Checkpoint, Saver, Written};
use lattice_gpu_formats::csv::{numbers, write_csv};
use lattice_gpu_formats::OutputDir;
#[cfg(feature = "mpi")]
use lattice_gpu_host::comm::Mpi;
use lattice_gpu_host::comm::{Communicator, Solo};
use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::health::Verdict;
use lattice_gpu_host::memory::Footprint;
use lattice_gpu_host::threads::Threads;
use lattice_gpu_host::Gpu;
use lattice_gpu_kernels::lbm::{Half, Velocities};
use lattice_gpu_lbm::cases::{self, GHIA_RE100_U, GHIA_RE100_V};
use lattice_gpu_lbm::geometry::{BounceBack, MAX_SIDE};
use lattice_gpu_lbm::output::write_fields;
use lattice_gpu_lbm::restart;
use lattice_gpu_lbm::solver::{check_memory, Spread, TUNE_BLOCKS, TUNE_STEPS};
use lattice_gpu_lbm::{
    Collision, Engine, Error, Geometry, Lbm, LbmStorage, Moments, Params, Result, Streaming,
};

mod bench;
mod cylinder;
mod obstacle;
use bench::{bench, BenchArgs};
use cylinder::{cylinder, CylinderArgs};
use obstacle::{obstacle, ObstacleArgs};

/// Lattice Boltzmann (D3Q19 or D3Q27) on the GPU, or on the CPU without one.
#[derive(Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Lid-driven cavity at a Reynolds number: centreline profiles (CSV), compared with Ghia et al. at Re 100.
    Cavity(CavityArgs),
    /// Body-force-driven channel: L2 error of the steady profile against the parabola.
    Poiseuille(PoiseuilleArgs),
    /// Decaying 2-D Taylor-Green vortex: measured kinetic-energy decay rate against 2 nu k^2.
    TaylorGreen(TaylorGreenArgs),
    /// Flow around a cylinder (Schäfer and Turek 1996, 2D-1 and 2D-2): drag, lift, pressure
    /// difference and Strouhal number against the paper's intervals.
    Cylinder(CylinderArgs),
    /// Flow around a body (a sphere, cylinder or box, a voxel mask or an STL surface) between an inlet
    /// and an outlet: drag and lift coefficients over time, and the Strouhal number.
    Obstacle(Box<ObstacleArgs>),
    /// MLUPs/s for every storage and streaming scheme, against the copy bandwidth.
    Bench(BenchArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Storage {
    F64,
    F32,
    /// Half-precision storage, f32 arithmetic.
    F16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum StreamingArg {
    /// Two lattices (A/B), pull.
    Ab,
    /// One lattice, in place (AA pattern).
    Aa,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum VelocitiesArg {
    /// 19 velocities: rest, faces and edges of the cube.
    D3q19,
    /// 27 velocities: the corners too; more isotropic (for turbulent flows), 27/19 the bytes.
    D3q27,
}

impl VelocitiesArg {
    fn set(self) -> Velocities {
        match self {
            VelocitiesArg::D3q19 => Velocities::D3Q19,
            VelocitiesArg::D3q27 => Velocities::D3Q27,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CollisionArg {
    Bgk,
    Trt,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BounceBackArg {
    /// Halfway between the fluid cell and the body's: the surface a staircase of cells.
    Halfway,
    /// At the surface along each link (Bouzidi's linear interpolation): built-in shapes and STL
    /// files; a mask's cells still bounce back halfway.
    Interpolated,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum OutletArg {
    /// At density 1: it reflects sound whole, inverted.
    Fixed,
    /// Density 1 on average, letting sound out (about 5% of a pulse comes back): its reference
    /// velocity follows the outflow over --outlet-memory.
    NonReflecting,
}

/// How a body and the outlet send populations back (`lbm cylinder`, `lbm obstacle`).
#[derive(Args, Clone)]
struct Boundaries {
    /// Where populations bounce back from the body.
    #[arg(long, value_enum, default_value_t = BounceBackArg::Halfway)]
    bounce_back: BounceBackArg,
    /// The outlet.
    #[arg(long, value_enum, default_value_t = OutletArg::Fixed)]
    outlet: OutletArg,
    /// The time over which a non-reflecting outlet's reference velocity follows the outflow, in the
    /// case's time units: longer than the waves it lets out, shorter than the changes of the mean flow.
    #[arg(long, allow_hyphen_values = true, default_value_t = 10.0)]
    outlet_memory: f64,
}

impl Boundaries {
    /// Sets the outlet of `p`, a run of `unit` steps per time unit; fails on a memory that is not
    /// positive or finite.
    fn outlet(&self, p: &mut Params, unit: f64) -> Result<()> {
        if self.outlet == OutletArg::NonReflecting {
            let steps = (self.outlet_memory * unit).round();
            if !(steps >= 1.0 && steps.is_finite()) {
                return Err(Error::InvalidParameter(format!(
                    "--outlet-memory {}: give a positive time (in the case's time units, e.g. 10)",
                    self.outlet_memory
                )));
            }
            p.open.outlet_memory = steps as u64;
        }
        Ok(())
    }

    /// Sets the rule on `g`, and names it in the checkpoint's parameters `params` where it is not the
    /// default (checkpoints of halfway runs keep the parameters they had before the rule was added).
    fn apply(&self, g: &mut Geometry, params: &mut Vec<(String, String)>) {
        if self.bounce_back == BounceBackArg::Interpolated {
            g.set_bounce_back(BounceBack::Interpolated);
            params.push(("bounce-back".into(), "interpolated".into()));
        }
    }
}

#[derive(Args, Clone)]
struct Common {
    /// Storage precision of the populations (f16: half the bytes, f32 arithmetic).
    #[arg(long, value_enum, default_value_t = Storage::F32)]
    precision: Storage,
    /// Streaming scheme.
    #[arg(long, value_enum, default_value_t = StreamingArg::Aa)]
    streaming: StreamingArg,
    /// Velocity set.
    #[arg(long, value_enum, default_value_t = VelocitiesArg::D3q19)]
    velocities: VelocitiesArg,
    /// Collision operator.
    #[arg(long, value_enum, default_value_t = CollisionArg::Trt)]
    collision: CollisionArg,
    /// TRT magic parameter (3/16: exact halfway walls for Poiseuille flow; 1/4: most stable)
    /// [default: 0.25]. With --collision trt only: BGK has none.
    #[arg(long, allow_hyphen_values = true)]
    magic: Option<f64>,
    /// Where to run. The GPU is GPU 0, or under mpirun/srun the process's rank on its node modulo
    /// the node's GPUs, or with --gpus N GPU r for rank r. There is no --gpu option: to run on
    /// another GPU, make it the visible one (CUDA_VISIBLE_DEVICES=2 lbm cavity ...).
    #[arg(long, value_enum, default_value_t = Placement::Auto)]
    engine: Placement,
    /// On a GPU, time the kernels' block sizes again on the run's first steps even where the tune
    /// cache has this lattice's.
    #[arg(long)]
    retune: bool,
    /// On a GPU, keep the tuned block size in memory only (do not read or write the tune cache file).
    #[arg(long)]
    no_tune_cache: bool,
    /// Not an option of lbm: given, it says how to choose the GPU (see --engine).
    #[arg(long, hide = true, value_name = "N", value_parser = no_gpu_option)]
    #[allow(dead_code)]
    gpu: Option<String>,
    /// Output directory. Its files appear together when the run succeeds; a run that fails or is
    /// stopped leaves the files that were there before (a stopped run adds its checkpoint, in
    /// OUTPUT/checkpoint unless --checkpoint says where).
    #[arg(long, default_value = "lbm-out")]
    output: PathBuf,
    /// Write a checkpoint every N steps (e.g. 1000), or every given time (e.g. 30s, 10m, 2h; at the
    /// run's first check after it), into --checkpoint, from a copy written while the run goes on.
    /// Without it, a checkpoint is written only when a signal stops the run (SIGINT, SIGTERM, SIGHUP
    /// or SIGUSR1; then it exits with 130, 143, 129 or 138).
    #[arg(long, value_name = "N|TIME", allow_hyphen_values = true, value_parser = cli::parse_every)]
    checkpoint_every: Option<cli::Every>,
    /// Directory of the checkpoint file lbm.ckpt [default: OUTPUT/checkpoint].
    #[arg(long, value_name = "DIR")]
    checkpoint: Option<PathBuf>,
    /// Continue the run of a checkpoint (its directory or the file), with the bytes of a run never
    /// stopped, on any number of ranks: to --steps in all; to steady state (the same --steady and
    /// --check-every: it stops at the step the straight run stops at) up to --max-steps in all;
    /// taylor-green to --steps in all, which may differ from the run's own where the energy samples
    /// the checkpoint holds include those of the new --steps. The case, grid, precision, streaming
    /// and physical parameters must be the checkpoint's: each difference is named.
    #[arg(long, value_name = "DIR")]
    resume: Option<PathBuf>,
    /// Split the lattice along z over the ranks of the MPI job this process belongs to (start it with
    /// `mpirun -np N`); rank 0 prints and writes. Needs `--features mpi`.
    #[arg(long)]
    mpi: bool,
    #[command(flatten)]
    split: lattice_gpu_cli::SplitArgs,
}

/// `--gpu N`: lbm has none, and clap's own answer would point at --gpus, which splits the run.
fn no_gpu_option(_: &str) -> std::result::Result<String, String> {
    Err("lbm has no --gpu: it runs on GPU 0 (under mpirun or srun, the process's rank on its node \
         modulo the node's GPUs; with --gpus N, GPU r for rank r), or on the CPU with --engine host; \
         to run on another GPU, make it the visible one, e.g. CUDA_VISIBLE_DEVICES=2 lbm cavity"
        .into())
}

impl Common {
    fn collision(&self) -> Collision {
        match self.collision {
            CollisionArg::Bgk => Collision::Bgk,
            CollisionArg::Trt => Collision::Trt {
                magic: self.magic.unwrap_or(0.25),
            },
        }
    }

    /// Refuses --magic with BGK, which has no magic parameter to set.
    fn check(&self) -> Result<()> {
        if self.collision == CollisionArg::Bgk && self.magic.is_some() {
            return Err(Error::InvalidParameter(
                "--magic sets the TRT collision's magic parameter, and --collision bgk has none: \
                 leave --magic out, or use --collision trt"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Refuses a checkpoint directory where no checkpoint can be written: found before the run, not
    /// when a signal stops it and the checkpoint is all that would be left of it.
    fn check_checkpoint_dir(&self) -> Result<()> {
        let dir = self.checkpoint_dir();
        let file = dir.join(restart::FILE);
        let (there, not) = match (
            dir.exists() && !dir.is_dir(),
            file.exists() && !file.is_file(),
        ) {
            (true, _) => (&dir, "a directory"),
            (false, true) => (&file, "a file"),
            (false, false) => return Ok(()),
        };
        Err(Error::InvalidParameter(format!(
            "the checkpoints go to {}, and {} is there and not {not}: give --checkpoint another \
             directory",
            file.display(),
            there.display()
        )))
    }

    /// The directory of the run's checkpoint file: --checkpoint, or OUTPUT/checkpoint.
    fn checkpoint_dir(&self) -> PathBuf {
        self.checkpoint
            .clone()
            .unwrap_or_else(|| self.output.join("checkpoint"))
    }

    /// The notice for the halo options of a split run given to a run over `ranks` ranks that is not
    /// split: they change nothing there. Not refused, since scripts pass one command line to the run
    /// on one rank and to its split twin (scripts/mpi-check.sh, scripts/scaling-check.sh).
    fn unsplit_notice(&self, ranks: usize) -> Option<String> {
        let halo = &self.split.halo;
        if ranks > 1 || self.split.cut {
            return None;
        }
        let flags: Vec<&str> = [
            (halo.no_overlap, "--no-overlap"),
            (halo.halos == HaloTransport::Nccl, "--halos nccl"),
        ]
        .into_iter()
        .filter_map(|(given, flag)| given.then_some(flag))
        .collect();
        (!flags.is_empty()).then(|| {
            format!(
                "notice: {} sets how a split run exchanges its halos, and this run on one rank is not \
                 split, so it changes nothing; split it with --gpus N or --mpi (or one rank's steps \
                 with --cut)",
                flags.join(" and ")
            )
        })
    }

    fn velocities(&self) -> Velocities {
        self.velocities.set()
    }

    /// What a resume of case `case` on grid `dims` with parameters `p` must match
    /// ([`restart::physics`]), with these options' storage, streaming and velocity set.
    fn physics<S: LbmStorage>(
        &self,
        case: &str,
        dims: [usize; 3],
        p: &Params,
    ) -> Vec<(String, String)> {
        restart::physics::<S>(case, dims, self.streaming(), self.velocities(), p)
    }

    fn streaming(&self) -> Streaming {
        match self.streaming {
            StreamingArg::Ab => Streaming::TwoLattice,
            StreamingArg::Aa => Streaming::InPlace,
        }
    }
}

#[derive(Args, Clone)]
struct Stop {
    /// Steps to run in all (a resumed run continues to this step); without it, run until steady
    /// (see --steady and --max-steps, which a fixed number of steps leaves out).
    #[arg(long, conflicts_with_all = ["steady", "max_steps"])]
    steps: Option<u64>,
    /// Stop when no velocity changes by more than this fraction of the largest speed between checks.
    #[arg(long, allow_hyphen_values = true, default_value_t = 1e-5)]
    steady: f64,
    /// Steps between steadiness checks and progress updates. The run also checks its state for NaN
    /// and for a stop asked by SIGINT or SIGTERM this often, or more often on large grids.
    #[arg(long, default_value_t = 1000)]
    check_every: u64,
    /// Most steps in all when running to steady state (a resumed run counts those before).
    #[arg(long, default_value_t = 1_000_000)]
    max_steps: u64,
}

impl Stop {
    /// The most steps the run takes, or the error naming the option that cannot work.
    fn total(&self) -> Result<u64> {
        let total = self.steps.unwrap_or(self.max_steps);
        if total == 0 || self.check_every == 0 || !(self.steady.is_finite() && self.steady > 0.0) {
            return Err(Error::InvalidParameter(
                "--steps, --max-steps and --check-every must be at least 1 and --steady positive"
                    .into(),
            ));
        }
        Ok(total)
    }

    /// The whole grid's moments a run to steady state keeps beside the new ones at a check.
    fn snapshots(&self) -> u64 {
        u64::from(self.steps.is_none())
    }

    /// What a checkpoint records of how the run stops: for a run to steady state, its criterion
    /// (the moments it compares are in the checkpoint too); for a fixed number of steps, that.
    fn params(&self) -> Vec<(String, String)> {
        match self.steps {
            Some(_) => vec![("until".into(), "steps".into())],
            None => vec![
                ("until".into(), "steady".into()),
                ("steady".into(), self.steady.to_string()),
                ("check-every".into(), self.check_every.to_string()),
            ],
        }
    }

    /// Which of [`params`](Self::params) a resume must match: a run to steady state, all (the
    /// moments of the last check, which a run of a fixed number of steps has none of, and its
    /// criterion decide where it stops); a fixed number of steps, none (it continues either kind).
    fn must_match(&self) -> Vec<(String, String)> {
        match self.steps {
            Some(_) => Vec::new(),
            None => self.params(),
        }
    }
}

#[derive(Args)]
struct CavityArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    stop: Stop,
    /// Grid NXxNYxNZ with the walls (or N for a cube); quasi-2-D unless --closed-z.
    #[arg(long, default_value = "130x130x4", value_parser = parse_size3)]
    size: [usize; 3],
    /// Close the cavity in z too (3-D cavity); otherwise z is periodic.
    #[arg(long)]
    closed_z: bool,
    /// Reynolds number U L / nu (L: fluid cells across in x).
    #[arg(
        long,
        allow_hyphen_values = true,
        default_value_t = 100.0,
        conflicts_with = "tau"
    )]
    re: f64,
    /// Relaxation time instead of --re (the Reynolds number then follows from it).
    #[arg(long, allow_hyphen_values = true)]
    tau: Option<f64>,
    /// Lid speed in lattice units (at most 0.17, Mach 0.3).
    #[arg(long, allow_hyphen_values = true, default_value_t = 0.1)]
    lid: f64,
}

#[derive(Args)]
struct PoiseuilleArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    stop: Stop,
    /// Fluid cells across the channel (y; with the two walls, at most 65535 cells).
    #[arg(long, default_value_t = 32, value_parser = parse_width)]
    width: usize,
    /// Cells along the flow (x) and in z (periodic).
    #[arg(long, default_value = "4x4", value_parser = parse_pair)]
    extent: (usize, usize),
    /// Relaxation time.
    #[arg(long, allow_hyphen_values = true, default_value_t = 0.8)]
    tau: f64,
    /// Body force along x.
    #[arg(long, allow_hyphen_values = true, default_value_t = 1e-6)]
    force: f64,
}

#[derive(Args)]
struct TaylorGreenArgs {
    #[command(flatten)]
    common: Common,
    /// Grid NXxNYxNZ (one period in x and y).
    #[arg(long, default_value = "128x128x2", value_parser = parse_size3)]
    size: [usize; 3],
    /// Relaxation time.
    #[arg(long, allow_hyphen_values = true, default_value_t = 0.8)]
    tau: f64,
    /// Initial velocity amplitude.
    #[arg(long, allow_hyphen_values = true, default_value_t = 0.02)]
    u0: f64,
    /// Steps in all (a resumed run continues to this step); the energy is sampled every twentieth
    /// of them.
    #[arg(long, default_value_t = 4000)]
    steps: u64,
}

/// `--width`: the fluid cells and the two walls must fit a side of the grid.
fn parse_width(s: &str) -> std::result::Result<usize, String> {
    let most = MAX_SIDE - 2;
    match s.trim().parse::<u64>() {
        Ok(w) if (1..=most as u64).contains(&w) => Ok(w as usize),
        Ok(0) => {
            Err("the channel needs at least 1 fluid cell across; give --width 1 or more".into())
        }
        Ok(w) => Err(format!(
            "{w} fluid cells and the two walls are {} cells across the channel, more than the \
             {MAX_SIDE} a side of the grid may have; give --width {most} or less",
            w as u128 + 2
        )),
        Err(_) => Err(format!(
            "`{s}` is not a number of cells; give a width such as --width 32"
        )),
    }
}

fn parse_pair(s: &str) -> std::result::Result<(usize, usize), String> {
    match lattice_gpu_cli::parse_dims(s)?.as_slice() {
        [a, b] => Ok((*a, *b)),
        _ => Err(format!("`{s}` must be two sizes, AxB (e.g. 4x4)")),
    }
}

fn engine(arg: Placement) -> Result<Engine> {
    Ok(arg.gpu("on the CPU")?.map_or(Engine::Host, Engine::Device))
}

fn describe(e: &Engine) -> String {
    match e {
        Engine::Host => format!("CPU ({} threads)", rayon::current_num_threads()),
        Engine::Device(g) => g.name().to_string(),
    }
}

/// What a case has ready before it builds its lattice.
struct Prepared {
    engine: Engine,
    /// The run's peak memory, checked, reported at the end.
    footprint: Footprint,
    /// The staged output directory (rank 0).
    out: Option<OutputDir>,
}

/// What every case does before it allocates anything: checks that all ranks have the same options
/// and that none is one the run would ignore, opens the engine, checks the grid `dims` (set by the
/// options `fix` names) and the run's peak memory with `snapshots` moments kept at a check, and on
/// rank 0 stages the output directory.
fn prepare<S: LbmStorage, C: Communicator>(
    comm: &C,
    c: &Common,
    dims: [usize; 3],
    fix: &str,
    snapshots: u64,
) -> Result<Prepared> {
    cli::same_options(comm).map_err(Error::InvalidParameter)?;
    c.check()?;
    // Rank 0 writes the checkpoints: under MPI the others may not see where.
    let writable = match comm.rank() {
        0 => c.check_checkpoint_dir(),
        _ => Ok(()),
    };
    restart::agree(comm, writable)?;
    if let Some(notice) = c.unsplit_notice(comm.size()).filter(|_| comm.rank() == 0) {
        eprintln!("{notice}");
    }
    // --gpus is bounded before its threads start; this is for the ranks of --mpi.
    if comm.size() > dims[2] {
        return Err(Error::InvalidParameter(format!(
            "the grid's {} z layers split over at most {} ranks, and {} were started; start at most {} \
             MPI ranks",
            dims[2],
            dims[2],
            comm.size(),
            dims[2]
        )));
    }
    let engine = engine(c.engine)?;
    let gpu = match &engine {
        Engine::Host => None,
        Engine::Device(gpu) => Some(gpu),
    };
    c.split
        .halo
        .check(gpu.is_some())
        .map_err(Error::InvalidParameter)?;
    let spread = Spread::of(comm, c.split.cut);
    // Every run may write a checkpoint (a signal asks for one), or resumes from one.
    let footprint = Lbm::<S>::footprint(
        dims,
        c.streaming(),
        c.velocities(),
        spread,
        gpu.is_some(),
        snapshots,
        true,
    )?;
    check_memory(&footprint, gpu.map(|g| &**g))?;
    Geometry::check_dims(dims, fix)?;
    let out = (comm.rank() == 0)
        .then(|| cli::output_dir(&c.output))
        .transpose()?;
    Ok(Prepared {
        engine,
        footprint,
        out,
    })
}

/// The fewest steps a run must have for [`advance`] to tune its block size on the first ones: the
/// tuning is at most a fifth of the run (its steps are the run's own, each block size's as exact).
const TUNE_AT_LEAST: u64 = 5 * TUNE_BLOCKS.len() as u64 * TUNE_STEPS;

/// The most steps [`Lbm::tune_block`] takes.
const TUNE_MOST: u64 = TUNE_BLOCKS.len() as u64 * TUNE_STEPS;

/// Where and when a run writes its checkpoints (rank 0 writes them, from a host copy, on a thread of
/// their own while the run goes on), and those it wrote.
struct Checkpoints {
    /// The checkpoint file.
    path: PathBuf,
    /// `--checkpoint-every`; without it, a checkpoint only when a signal stops the run.
    every: Option<cli::Every>,
    /// What every checkpoint says a resume must match.
    params: Vec<(String, String)>,
    /// Rank 0's writer.
    saver: Option<Saver>,
    /// When the last checkpoint was started (rank 0's clock decides for all).
    since: Instant,
    /// What the finished writes took.
    written: Vec<Written>,
}

impl Checkpoints {
    /// The checkpoints of a run with the options `c` on a rank (`lead`: rank 0), carrying `params`.
    fn new(c: &Common, params: Vec<(String, String)>, lead: bool) -> Self {
        let path = c.checkpoint_dir().join(restart::FILE);
        Self {
            saver: lead.then(|| Saver::new(&path)),
            path,
            every: c.checkpoint_every,
            params,
            since: Instant::now(),
            written: Vec::new(),
        }
    }

    /// The steps from step `done` to the next one a checkpoint is due at by its step count
    /// (`u64::MAX` where they are not counted in steps): the runs stop there for it.
    fn steps_to_next(&self, done: u64) -> u64 {
        match self.every {
            Some(cli::Every::Steps(n)) => {
                let n = n as u64;
                n - done % n
            }
            _ => u64::MAX,
        }
    }

    /// Whether a checkpoint is due at step `done`: at a multiple of `--checkpoint-every N` (counted
    /// from step 0, so a resumed run writes at the same steps as a straight one), or once its time
    /// has passed on rank 0's clock. Collective: every rank asks at the same checks.
    fn due<C: Communicator>(&self, comm: &C, done: u64) -> Result<bool> {
        Ok(match self.every {
            None => false,
            Some(cli::Every::Steps(n)) => done.is_multiple_of(n as u64),
            Some(cli::Every::Seconds(t)) => {
                let mine = comm.rank() == 0 && self.since.elapsed().as_secs_f64() >= t;
                comm.sum(f64::from(u8::from(mine)))? > 0.0
            }
        })
    }

    /// Starts writing the checkpoint of `lbm`'s step, with what `extra` adds to it on rank 0 (what
    /// the case keeps beside the lattice). Collective: the lattice is gathered to rank 0, and a
    /// failed write (the one before, which this one waited for) stops every rank.
    fn save<S: LbmStorage, C: Communicator>(
        &mut self,
        lbm: &Lbm<S, C>,
        extra: impl FnOnce(Checkpoint) -> Checkpoint,
    ) -> Result<()> {
        // The previous checkpoint is on disk before this one is copied: one copy of the populations
        // at a time, as the memory estimate counts (a slow disk held two, and the run went past it).
        let before = match &mut self.saver {
            Some(saver) => saver.wait().map_err(Error::from),
            None => Ok(None),
        };
        self.written.extend(restart::agree(lbm.comm(), before)?);
        let mut ck = Checkpoint::new(restart::APPLICATION, lbm.steps());
        ck.params = self.params.clone();
        let ck = lbm.save_state(ck)?;
        let started = match &mut self.saver {
            Some(saver) => saver.save(extra(ck)).map_err(Error::from),
            None => Ok(None),
        };
        self.written.extend(restart::agree(lbm.comm(), started)?);
        self.since = Instant::now();
        Ok(())
    }

    /// Where a signal stops the run: writes the checkpoint of `lbm`'s step (as [`save`](Self::save)),
    /// waits until it is on disk, and says how to go on. Collective.
    fn stopped<S: LbmStorage, C: Communicator>(
        &mut self,
        lbm: &Lbm<S, C>,
        extra: impl FnOnce(Checkpoint) -> Checkpoint,
    ) -> Result<()> {
        self.save(lbm, extra)?;
        let waited = self.wait();
        restart::agree(lbm.comm(), waited)?;
        if lbm.comm().rank() == 0 {
            eprintln!(
                "checkpoint of step {} written to {}; continue the run with the same options and \
                 --resume {}",
                lbm.steps(),
                self.path.display(),
                self.path.parent().unwrap_or(&self.path).display()
            );
        }
        Ok(())
    }

    /// Waits for the write under way (rank 0).
    fn wait(&mut self) -> Result<()> {
        if let Some(saver) = &mut self.saver {
            self.written.extend(saver.wait()?);
        }
        Ok(())
    }

    /// At the end of a run: waits for the last write, then says what the checkpoints cost (rank 0).
    /// Collective.
    fn finish<C: Communicator>(&mut self, comm: &C) -> Result<()> {
        let waited = self.wait();
        restart::agree(comm, waited)?;
        if let (Some(last), Some(saver)) = (self.written.last(), &self.saver) {
            let n = self.written.len();
            println!(
                "{n} checkpoint{} written, the last {last}; the run waited {:.3} s for them",
                if n == 1 { "" } else { "s" },
                saver.waited()
            );
        }
        Ok(())
    }

    /// On a run's error: waits for a write under way, so that the checkpoint before the error is
    /// whole and no temporary file is left, and says where that write failed too (rank 0).
    fn abandon(&mut self) {
        if let Err(e) = self.wait() {
            eprintln!("error: the last checkpoint was not written: {e}");
        }
    }
}

/// The state a resumed run starts from: rank 0's checkpoint (its arrays not yet taken) and what the
/// case took out of it.
struct Resume<T> {
    /// The checkpoint file.
    path: PathBuf,
    /// Its step (every rank), checkpoint and what the case keeps beside the lattice (rank 0).
    resumed: restart::Resumed<T>,
}

/// The checkpoint `--resume` names, where it is one of a run with `params` of the grid `dims` in
/// storage `S`, read on rank 0, with what `take` takes out of it (and whose errors refuse it);
/// `None` without --resume. Collective.
fn resume<S: LbmStorage, C: Communicator, T>(
    comm: &C,
    c: &Common,
    dims: [usize; 3],
    params: &[(String, String)],
    take: impl FnOnce(&mut Checkpoint, &std::path::Path) -> Result<T>,
) -> Result<Option<Resume<T>>> {
    let Some(dir) = &c.resume else {
        return Ok(None);
    };
    let path = cli::checkpoint_file(dir, restart::FILE);
    // Only rank 0 reads it: under MPI the others may not see the file.
    let there = match comm.rank() == 0 && !path.exists() {
        // An output directory given for its checkpoint directory is the likely slip.
        true => Err(Error::InvalidParameter(
            match cli::checkpoint_file(&dir.join("checkpoint"), restart::FILE) {
                inner if inner.is_file() => format!(
                    "--resume {}: there is no checkpoint there, and {} holds one: give --resume {}",
                    dir.display(),
                    dir.join("checkpoint").display(),
                    dir.join("checkpoint").display()
                ),
                _ => format!(
                    "--resume {}: there is no checkpoint there; give the directory a run wrote its \
                     checkpoint into (OUTPUT/checkpoint, or its --checkpoint DIR), or the {} file in \
                     it",
                    dir.display(),
                    restart::FILE
                ),
            },
        )),
        false => Ok(()),
    };
    restart::agree(comm, there)?;
    let cells = dims.iter().product();
    let resumed = restart::read(comm, &path, params, |ck| {
        Lbm::<S>::check_checkpoint(ck, c.velocities(), cells, &path)?;
        take(ck, &path)
    })?;
    if comm.rank() == 0 {
        println!("resuming from step {} of {}", resumed.step, path.display());
    }
    Ok(Some(Resume { path, resumed }))
}

/// Refuses to resume from a checkpoint at `step` where `--option total` asks for no more steps.
fn more_than(step: u64, option: &str, total: u64, path: &std::path::Path) -> Result<()> {
    if step < total {
        return Ok(());
    }
    Err(Error::InvalidParameter(format!(
        "{} is at step {step}, and {option} {total} asks for no more; give {option} above {step} to \
         continue it",
        path.display()
    )))
}

/// Runs `lbm` for `--steps`, or until steady, with a progress bar showing MLUPs/s; returns the last
/// moments. Checks the state for NaN and the signals at every steadiness check and, on large grids,
/// between them; stops with the error that names the step, the cell and `fix` when one is found;
/// writes the checkpoints `plan` asks for, and one where a signal stops it. `before`: the moments
/// of the last steadiness check, where it resumes a run to steady state.
fn advance<S: LbmStorage, C: Communicator>(
    lbm: &mut Lbm<S, C>,
    common: &Common,
    stop: &Stop,
    fix: &str,
    plan: &mut Checkpoints,
    before: Option<Moments>,
) -> Result<Moments> {
    let total = stop.total()?;
    let bar = progress(total, "steps");
    bar.set_position(lbm.steps());
    if lbm.comm().rank() != 0 {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let result = advance_with(lbm, common, stop, fix, total, &bar, plan, before);
    match &result {
        Ok(_) => bar.finish_and_clear(),
        Err(_) => {
            bar.abandon();
            plan.abandon();
        }
    }
    result
}

/// `ck` with the moments of the last steadiness check, where there is one.
fn with_monitor(ck: Checkpoint, before: Option<&Moments>) -> Checkpoint {
    match before {
        Some(m) => restart::put_moments(ck, restart::MONITOR, m),
        None => ck,
    }
}

/// Sets the GPU kernels' block size (nothing on the CPU): the tune cache's, or tuned on the run's
/// first steps where they are few against the run's `left` steps and hold no checkpoint's step; the
/// time it took.
fn tune<S: LbmStorage, C: Communicator>(
    lbm: &mut Lbm<S, C>,
    c: &Common,
    left: u64,
    plan: &Checkpoints,
) -> Result<Duration> {
    let start = Instant::now();
    let may_time = left >= TUNE_AT_LEAST && plan.steps_to_next(lbm.steps()) >= TUNE_MOST;
    let mut cache = match c.no_tune_cache {
        false => TuneCache::per_user(),
        true => TuneCache::in_memory(),
    };
    let tuned = lbm.tune_block(&mut cache, c.retune, may_time)?;
    let lead = lbm.comm().rank() == 0;
    if let (Some(t), true) = (tuned, lead) {
        let how = match t.cached {
            true => "from the tune cache".to_string(),
            false => format!("tuned on the run's first {} steps", t.calls),
        };
        let [bx, by] = lbm.block_shape();
        println!(
            "blocks of {} threads, {bx}x{by} ({:.3} ms per step; {how})",
            lbm.block(),
            t.ms_per_call
        );
    }
    for warning in cache.take_warnings() {
        if lead {
            eprintln!("warning: {warning}");
        }
    }
    Ok(start.elapsed())
}

/// [`advance`] in the progress bar `bar`, to step `total`.
#[allow(clippy::too_many_arguments)]
fn advance_with<S: LbmStorage, C: Communicator>(
    lbm: &mut Lbm<S, C>,
    common: &Common,
    stop: &Stop,
    fix: &str,
    total: u64,
    bar: &ProgressBar,
    plan: &mut Checkpoints,
    mut before: Option<Moments>,
) -> Result<Moments> {
    let lead = lbm.comm().rank() == 0;
    let cells = lbm.global_dims().iter().product::<usize>() as f64;
    let first = lbm.steps();
    // Only the steps are timed: each check brings every cell's moments to rank 0's host (0.9 GB at
    // 384^3), which took five times as long as 300 steps.
    let mut stepping = tune(lbm, common, total - first, plan)?;
    let steady = stop.steps.is_none();
    let every = stop.check_every;
    let health = lbm.check_interval(total)?.min(every);
    let m = loop {
        let done = lbm.steps();
        let n = health
            .min(every - done % every)
            .min(total - done)
            .min(plan.steps_to_next(done));
        let start = Instant::now();
        lbm.run(n)?;
        lbm.synchronize()?;
        stepping += start.elapsed();
        let done = lbm.steps();
        let verdict = lbm.verdict()?;
        if let Verdict::Diverged(_) = verdict {
            lbm.stop_on(verdict, fix)?;
        }
        let mlups = cells * (done - first) as f64 / stepping.as_secs_f64() / 1e6;
        bar.set_position(done);
        bar.set_message(format!("{mlups:.0} MLUPs/s"));
        // A fixed number of steps needs the moments only at the end; a run to steady state at every
        // steadiness check.
        let check = steady && done.is_multiple_of(every);
        let last = done >= total;
        let m = match last || check {
            true => Some(lbm.moments()?),
            false => None,
        };
        let mut ended_steady = false;
        // Only at the checks, --check-every steps apart: the last step of a run whose --max-steps
        // is no multiple of it ends an interval that the criterion does not measure (and a run
        // resumed past it never checks there).
        if let (true, Some(m)) = (check, &m) {
            bar.set_message(format!("{mlups:.0} MLUPs/s, max |u| {:.3e}", m.max_speed()));
            // Rank 0 holds the moments; its word reaches every rank.
            let mine = lead
                && before
                    .as_ref()
                    .is_some_and(|b| cases::is_steady(b, m, stop.steady));
            ended_steady = lbm.comm().sum(f64::from(u8::from(mine)))? > 0.0;
        }
        // A run that ends steady is complete (whatever signal came meanwhile), and writes no
        // checkpoint to go on from: the straight run stops there too.
        if ended_steady {
            if lead {
                println!(
                    "steady after {done} steps (changes below {:e} of the largest speed)",
                    stop.steady
                );
            }
            plan.finish(lbm.comm())?;
            return m.ok_or_else(|| unreachable_moments(done));
        }
        if last {
            // A signal at the run's last step stops nothing: its results are complete. What the
            // next steadiness check would compare with is the monitor, as below.
            let monitor = if check { m.as_ref() } else { before.as_ref() };
            if plan.due(lbm.comm(), done)? {
                plan.save(lbm, |ck| with_monitor(ck, monitor))?;
            }
            plan.finish(lbm.comm())?;
            break m.ok_or_else(|| unreachable_moments(done))?;
        }
        // What the next steadiness check compares with (the moments at a step between two checks
        // are not, so that a run resumed from a checkpoint taken there compares what this one
        // does).
        if check {
            before = m;
        }
        match verdict {
            Verdict::Stop(_) => {
                plan.stopped(lbm, |ck| with_monitor(ck, before.as_ref()))?;
                lbm.stop_on(verdict, fix)?;
            }
            _ if plan.due(lbm.comm(), done)? => {
                plan.save(lbm, |ck| with_monitor(ck, before.as_ref()))?
            }
            _ => {}
        }
    };
    let secs = stepping.as_secs_f64();
    let done = lbm.steps();
    if lead {
        println!(
            "{} steps{} in {secs:.2} s: {:.0} MLUPs/s (the steps alone, without the checks' moments)",
            done - first,
            match first {
                0 => String::new(),
                _ => format!(" (from step {first} to {done})"),
            },
            cells * (done - first) as f64 / secs / 1e6
        );
        #[cfg(feature = "nccl")]
        lattice_gpu_cli::print_exchange_time(lbm.exchange_time()?);
    }
    if lead && steady {
        eprintln!("warning: not steady after --max-steps {}", stop.max_steps);
    }
    Ok(m)
}

/// The error for moments missing where the loop above always reads them: a fault of lbm.
fn unreachable_moments(step: u64) -> Error {
    Error::InvalidParameter(format!(
        "no moments were read at step {step}, where the run ends: a fault of lbm; please report it"
    ))
}

/// The case's lattice from `init`, or from the checkpoint `from` where the run resumes, split over
/// the ranks of `comm` as the options `c` say; rank 0 prints what runs where.
fn make<S: LbmStorage, C: Communicator, T>(
    comm: C,
    c: &Common,
    e: &Engine,
    mut geometry: Geometry,
    params: Params,
    init: impl Fn(usize) -> (f64, [f64; 3]) + Sync,
    from: Option<&mut Resume<T>>,
) -> Result<Lbm<S, C>> {
    geometry.set_velocities(c.velocities());
    // Before the header and the near-1/2 warning, which an unusable tau would contradict.
    params.check()?;
    let d = geometry.dims();
    let lead = comm.rank() == 0;
    if let Some(line) = c.split.describe('z', comm.size()).filter(|_| lead) {
        println!("{line}");
    }
    lead.then(|| {
        println!(
            "{}: {}x{}x{} cells, {}, {} storage, {} streaming, tau {:.6}, {:?}",
            describe(e),
            d[0],
            d[1],
            d[2],
            c.velocities().name(),
            S::NAME,
            c.streaming().name(),
            params.tau,
            params.collision
        )
    });
    if lead && params.tau < 0.51 {
        eprintln!(
            "warning: tau {:.5} is close to 1/2; the run may become unstable (raise the resolution or lower the Reynolds number)",
            params.tau
        );
    }
    #[cfg(feature = "nccl")]
    let nccl = {
        let gpu = match e {
            Engine::Host => None,
            Engine::Device(gpu) => Some(gpu),
        };
        c.split.communicator(&comm, gpu)?
    };
    let mut lbm = Lbm::new_on_cut(comm, c.split.cut, e, geometry, params, c.streaming(), init)?;
    lbm.set_overlap(!c.split.halo.no_overlap);
    // Before the halos through NCCL are first exchanged: they are then the restored lattice's.
    if let Some(r) = from {
        lbm.restore_state(r.resumed.checkpoint.as_mut(), &r.path)?;
    }
    #[cfg(feature = "nccl")]
    if let Some(n) = nccl {
        lbm.exchange_through(n)?;
    }
    Ok(lbm)
}

/// Ends a case's run: frees the lattice (its memory goes before the files' copies are made) and
/// hands back the GPU it ran on, for the memory report.
fn release<S: LbmStorage, C: Communicator>(lbm: Lbm<S, C>) -> Option<Arc<Gpu>> {
    lbm.gpu().cloned()
}

/// The moments of the last steadiness check that a checkpoint of a run to steady state holds (none
/// before its first check), taken out of `ck` for a run on the grid `dims` to step `total`.
fn resume_monitor(
    ck: &mut Checkpoint,
    path: &std::path::Path,
    stop: &Stop,
    dims: [usize; 3],
) -> Result<Option<Moments>> {
    let total = stop.total()?;
    let option = match stop.steps {
        Some(_) => "--steps",
        None => "--max-steps",
    };
    more_than(ck.step, option, total, path)?;
    match stop.steps {
        Some(_) => Ok(None),
        None => restart::take_moments(ck, restart::MONITOR, dims, path),
    }
}

fn cavity<S: LbmStorage, C: Communicator>(a: &CavityArgs, comm: C) -> Result<()> {
    let lead = comm.rank() == 0;
    a.stop.total()?;
    // --tau sets the viscosity, and so the Reynolds number U L / nu.
    let re = match a.tau {
        Some(tau) => {
            Params::bgk(tau).check()?;
            a.lid * (a.size[0] as f64 - 2.0) / Params::bgk(tau).viscosity()
        }
        None => a.re,
    };
    let run = prepare::<S, C>(
        &comm,
        &a.common,
        a.size,
        "use a smaller --size",
        a.stop.snapshots(),
    )?;
    let (g, p) = cases::cavity(a.size, a.closed_z, re, a.lid, a.common.collision())?;
    let mut params = a.common.physics::<S>("cavity", a.size, &p);
    params.extend([
        ("re".to_string(), re.to_string()),
        ("lid".into(), a.lid.to_string()),
        ("closed-z".into(), a.closed_z.to_string()),
    ]);
    let written = [params.clone(), a.stop.params()].concat();
    params.extend(a.stop.must_match());
    let mut from = resume::<S, C, _>(&comm, &a.common, a.size, &params, |ck, path| {
        resume_monitor(ck, path, &a.stop, a.size)
    })?;
    if lead && a.tau.is_some() {
        println!("Reynolds number {re:.3} (from --tau)");
    }
    let fix = match a.tau {
        Some(tau) => format!(
            "tau = {tau} is too close to 1/2 for this flow on this grid: raise --tau, or refine the \
             grid (--size)"
        ),
        None => format!(
            "tau = {:.6} is too close to 1/2 for Re {re} on this grid: lower --re, or refine the grid \
             (--size)",
            p.tau
        ),
    };
    let init = |_| (1.0, [0.0; 3]);
    let tags = g.tags().to_vec();
    let mut lbm = make::<S, C, _>(comm, &a.common, &run.engine, g, p, init, from.as_mut())?;
    let before = from.and_then(|r| r.resumed.taken).flatten();
    let mut plan = Checkpoints::new(&a.common, written, lead);
    let m = advance(&mut lbm, &a.common, &a.stop, &fix, &mut plan, before)?;
    let (step, gpu) = (lbm.steps(), release(lbm));
    let Some(out) = run.out else {
        return Ok(());
    };
    let (u, v) = cases::centrelines(&m, a.lid);
    let rows = |p: &[(f64, f64)]| p.iter().map(|&(s, v)| numbers(&[s, v])).collect::<Vec<_>>();
    write_csv(&out.file("centreline_u.csv"), "y,u_over_U", &rows(&u))?;
    write_csv(&out.file("centreline_v.csv"), "x,v_over_U", &rows(&v))?;
    if (re - 100.0).abs() < 1e-9 && !a.closed_z {
        println!(
            "against Ghia et al. (Re 100): max |u - u_Ghia| = {:.4}, max |v - v_Ghia| = {:.4} (of U)",
            cases::profile_error(&u, &GHIA_RE100_U),
            cases::profile_error(&v, &GHIA_RE100_V)
        );
    }
    finish(
        out,
        m,
        &tags,
        &format!("lid-driven cavity Re {re}"),
        step,
        &run.footprint,
        gpu,
    )
}

fn poiseuille<S: LbmStorage, C: Communicator>(a: &PoiseuilleArgs, comm: C) -> Result<()> {
    let lead = comm.rank() == 0;
    a.stop.total()?;
    let dims = [a.extent.0, a.width + 2, a.extent.1];
    let run = prepare::<S, C>(
        &comm,
        &a.common,
        dims,
        "lower --width or --extent",
        a.stop.snapshots(),
    )?;
    let (g, p) = cases::poiseuille(
        a.width,
        a.extent.0,
        a.extent.1,
        a.tau,
        a.force,
        a.common.collision(),
    )?;
    let mut params = a.common.physics::<S>("poiseuille", dims, &p);
    params.extend([
        ("width".to_string(), a.width.to_string()),
        ("extent".into(), format!("{}x{}", a.extent.0, a.extent.1)),
    ]);
    let written = [params.clone(), a.stop.params()].concat();
    params.extend(a.stop.must_match());
    let mut from = resume::<S, C, _>(&comm, &a.common, dims, &params, |ck, path| {
        resume_monitor(ck, path, &a.stop, dims)
    })?;
    let fix = "raise --tau or lower --force";
    let init = |_| (1.0, [0.0; 3]);
    let tags = g.tags().to_vec();
    let mut lbm = make::<S, C, _>(comm, &a.common, &run.engine, g, p, init, from.as_mut())?;
    let before = from.and_then(|r| r.resumed.taken).flatten();
    let mut plan = Checkpoints::new(&a.common, written, lead);
    let m = advance(&mut lbm, &a.common, &a.stop, fix, &mut plan, before)?;
    let (step, gpu) = (lbm.steps(), release(lbm));
    let Some(out) = run.out else {
        return Ok(());
    };
    let ny = a.width + 2;
    let rows: Vec<Vec<String>> = (1..ny - 1)
        .map(|y| {
            numbers(&[
                y as f64 - 0.5,
                m.u[m.index([0, y, 0])][0],
                cases::poiseuille_profile(&p, ny, y),
            ])
        })
        .collect();
    write_csv(&out.file("profile.csv"), "y,u,u_analytic", &rows)?;
    println!(
        "L2 error of the profile against the parabola: {:.3e}",
        cases::poiseuille_error(&m, &p)
    );
    finish(
        out,
        m,
        &tags,
        "Poiseuille channel",
        step,
        &run.footprint,
        gpu,
    )
}

/// The name of the checkpoint array of the Taylor-Green vortex's energy samples: (step, energy)
/// pairs.
const ENERGY: &str = "energy";

/// The steps between the Taylor-Green vortex's energy samples in a run of `steps`: 20 samples.
fn sample_every(steps: u64) -> u64 {
    (steps / 20).max(1)
}

/// The energy samples of a Taylor-Green checkpoint (`ck`, read from `path`) that a run of `steps`
/// in all keeps: those at its own sampling steps up to the checkpoint's, which must all be there (a
/// run with another --steps samples at other steps; where those are a subset of the checkpoint's,
/// its result is that of a straight run of `steps`).
fn resume_samples(
    ck: &mut Checkpoint,
    path: &std::path::Path,
    steps: u64,
) -> Result<Vec<[f64; 2]>> {
    more_than(ck.step, "--steps", steps, path)?;
    let pairs = ck.take::<f64>(ENERGY, path)?;
    let every = sample_every(steps);
    let kept: Vec<[f64; 2]> = pairs
        .chunks_exact(2)
        .map(|p| [p[0], p[1]])
        .filter(|&[t, _]| (t as u64).is_multiple_of(every))
        .collect();
    let wanted = ck.step / every;
    let held: Vec<u64> = kept.iter().map(|&[t, _]| t as u64).collect();
    let whole = held.len() as u64 == wanted
        && held
            .iter()
            .zip(1..)
            .all(|(&t, k): (&u64, u64)| t == k * every);
    if whole {
        return Ok(kept);
    }
    let had = pairs.first().map_or(1, |&t| (t as u64).max(1));
    let example = (ck.step / (20 * had) + 1) * 20 * had;
    Err(Error::InvalidParameter(format!(
        "{} holds the kinetic energy every {had} steps up to step {}, and --steps {steps} samples it \
         every {every} steps, which it lacks; give --steps whose twentieth is a multiple of {had}, \
         e.g. --steps {example}",
        path.display(),
        ck.step
    )))
}

fn taylor_green<S: LbmStorage, C: Communicator>(a: &TaylorGreenArgs, comm: C) -> Result<()> {
    let lead = comm.rank() == 0;
    if a.steps < 20 {
        return Err(Error::InvalidParameter(
            "--steps must be at least 20: the decay rate is measured over 20 samples of the energy"
                .into(),
        ));
    }
    let init = cases::taylor_green(a.size, a.u0)?;
    let run = prepare::<S, C>(&comm, &a.common, a.size, "use a smaller --size", 0)?;
    let g = Geometry::periodic(a.size)?;
    let mut p = Params::bgk(a.tau);
    p.collision = a.common.collision();
    let mut params = a.common.physics::<S>("taylor-green", a.size, &p);
    params.push(("u0".into(), a.u0.to_string()));
    let mut from = resume::<S, C, _>(&comm, &a.common, a.size, &params, |ck, path| {
        resume_samples(ck, path, a.steps)
    })?;
    let tags = g.tags().to_vec();
    let mut lbm = make::<S, C, _>(comm, &a.common, &run.engine, g, p, init, from.as_mut())?;
    let rows = from.and_then(|r| r.resumed.taken).unwrap_or_default();
    let mut plan = Checkpoints::new(&a.common, params, lead);
    let rows = sampled(
        &mut lbm,
        &a.common,
        [a.steps, sample_every(a.steps)],
        &mut plan,
        (ENERGY, "raise --tau or lower --u0"),
        rows,
        |lbm| Ok([lbm.steps() as f64, lbm.moments()?.kinetic_energy()]),
    )?;
    let m = lbm.moments()?;
    let (step, gpu) = (lbm.steps(), release(lbm));
    let Some(out) = run.out else {
        return Ok(());
    };
    // Skip the first interval: the initial equilibrium lacks the non-equilibrium part of the flow.
    let [t0, e0] = rows[1];
    let [t1, e1] = rows[rows.len() - 1];
    let rate = (e0 / e1).ln() / (t1 - t0);
    if !(e0 > 0.0 && e1 > 0.0 && rate.is_finite()) {
        return Err(Error::InvalidParameter(format!(
            "the kinetic energy went from {e0:e} at step {t0} to {e1:e} at step {t1}, which gives no \
             decay rate: the vortex's energy fell below what the storage holds; raise --u0, or run \
             fewer --steps"
        )));
    }
    let want = cases::taylor_green_rate(a.size, &p);
    println!(
        "kinetic energy decay rate {rate:.6e} per step, analytic 2 nu k^2 = {want:.6e} ({:+.3}%)",
        100.0 * (rate / want - 1.0)
    );
    let lines: Vec<Vec<String>> = rows.iter().map(|r| numbers(r)).collect();
    write_csv(&out.file("energy.csv"), "step,kinetic_energy", &lines)?;
    finish(
        out,
        m,
        &tags,
        "Taylor-Green vortex",
        step,
        &run.footprint,
        gpu,
    )
}

/// Runs `lbm` to step `steps` after the samples `rows` (rank 0's) of the steps before (those at
/// multiples of `every`), adding `sample(lbm)` (the step first) every `every` steps and at the last, and checking the state at each
/// and, on large grids, between them; writes the checkpoints `plan` asks for, and one where a signal
/// stops it, with the samples as checkpoint array `name`. A divergence stops it naming `fix`.
/// Shows its progress on rank 0.
#[allow(clippy::too_many_arguments)]
fn sampled<S: LbmStorage, C: Communicator, const K: usize>(
    lbm: &mut Lbm<S, C>,
    common: &Common,
    [steps, every]: [u64; 2],
    plan: &mut Checkpoints,
    (name, fix): (&str, &str),
    rows: Vec<[f64; K]>,
    sample: impl FnMut(&mut Lbm<S, C>) -> Result<[f64; K]>,
) -> Result<Vec<[f64; K]>> {
    let first = lbm.steps();
    // Tuned on the run's first steps only where they hold no sample: up to the first one.
    let tuning = tune(
        lbm,
        common,
        (every - first % every).min(steps - first),
        plan,
    )?;
    let start = Instant::now();
    let bar = progress(steps, "steps");
    bar.set_position(lbm.steps());
    if lbm.comm().rank() != 0 {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let rows = sample_to(lbm, [steps, every], &bar, plan, (name, fix), rows, sample);
    if rows.is_ok() && lbm.comm().rank() == 0 {
        // The tuning's steps are the run's own.
        let secs = (start.elapsed() + tuning).as_secs_f64();
        let cells = lbm.global_dims().iter().product::<usize>() as f64;
        println!(
            "{} steps in {secs:.2} s: {:.0} MLUPs/s (with the samples every {every} steps)",
            steps - first,
            cells * (steps - first) as f64 / secs / 1e6
        );
    }
    match &rows {
        Ok(_) => bar.finish_and_clear(),
        Err(_) => {
            bar.abandon();
            plan.abandon();
        }
    }
    rows
}

/// [`sampled`]'s steps.
fn sample_to<S: LbmStorage, C: Communicator, const K: usize>(
    lbm: &mut Lbm<S, C>,
    [steps, every]: [u64; 2],
    bar: &ProgressBar,
    plan: &mut Checkpoints,
    (name, fix): (&str, &str),
    mut rows: Vec<[f64; K]>,
    mut sample: impl FnMut(&mut Lbm<S, C>) -> Result<[f64; K]>,
) -> Result<Vec<[f64; K]>> {
    let health = lbm.check_interval(steps)?.min(every);
    // A run stopped at a step between samples sampled its last step too; one going on from it does not.
    rows.retain(|r| (r[0] as u64).is_multiple_of(every));
    while lbm.steps() < steps {
        let done = lbm.steps();
        lbm.run(
            health
                .min(every - done % every)
                .min(steps - done)
                .min(plan.steps_to_next(done)),
        )?;
        let verdict = lbm.verdict()?;
        if let Verdict::Diverged(_) = verdict {
            lbm.stop_on(verdict, fix)?;
        }
        let done = lbm.steps();
        if done.is_multiple_of(every) || done == steps {
            rows.push(sample(lbm)?);
        }
        bar.set_position(done);
        let with_rows = |ck: Checkpoint| ck.array(name, rows.as_flattened());
        // A signal at the run's last step stops nothing: its results are complete.
        if done == steps {
            if plan.due(lbm.comm(), done)? {
                plan.save(lbm, with_rows)?;
            }
            break;
        }
        match verdict {
            Verdict::Stop(_) => {
                plan.stopped(lbm, with_rows)?;
                lbm.stop_on(verdict, fix)?;
            }
            _ if plan.due(lbm.comm(), done)? => plan.save(lbm, with_rows)?,
            _ => {}
        }
    }
    plan.finish(lbm.comm())?;
    Ok(rows)
}

/// Writes the fields of `m` and the cells' kinds (`tags`) into the staged `out` beside the case's
/// files, moves them into place, and reports the memory `footprint` estimated beside the measured peak.
fn finish(
    out: OutputDir,
    m: Moments,
    tags: &[u8],
    title: &str,
    step: u64,
    footprint: &Footprint,
    gpu: Option<Arc<Gpu>>,
) -> Result<()> {
    write_fields(&out, &m, tags, title, step)?;
    drop(m);
    cli::commit(out)?;
    footprint.report(gpu.as_deref());
    Ok(())
}

fn dispatch(cli: Cli) -> Result<()> {
    // Each case on one domain or, with --mpi, split over the ranks of the MPI job.
    // `$layers` z layers, set by `$set`: the ranks split along z, each needs at least one.
    macro_rules! by_storage {
        ($f:ident, $a:expr, $layers:expr, $set:expr) => {{
            let split = &$a.common.split;
            split
                .check_launch($a.common.mpi)
                .map_err(Error::InvalidParameter)?;
            if let Some(n) = split.halo.gpus {
                let layers: usize = $layers;
                return lattice_gpu_cli::on_gpus(
                    n as usize,
                    layers,
                    &format!("the grid's {layers} z layers ({})", $set),
                    |c| match $a.common.precision {
                        Storage::F64 => $f::<f64, Threads>($a, c.clone()),
                        Storage::F32 => $f::<f32, Threads>($a, c.clone()),
                        Storage::F16 => $f::<Half, Threads>($a, c.clone()),
                    },
                );
            }
            match ($a.common.precision, $a.common.mpi) {
                (Storage::F64, false) => $f::<f64, Solo>($a, Solo),
                (Storage::F32, false) => $f::<f32, Solo>($a, Solo),
                (Storage::F16, false) => $f::<Half, Solo>($a, Solo),
                #[cfg(feature = "mpi")]
                (Storage::F64, true) => $f::<f64, Mpi>($a, Mpi::init()?),
                #[cfg(feature = "mpi")]
                (Storage::F32, true) => $f::<f32, Mpi>($a, Mpi::init()?),
                #[cfg(feature = "mpi")]
                (Storage::F16, true) => $f::<Half, Mpi>($a, Mpi::init()?),
                #[cfg(not(feature = "mpi"))]
                (_, true) => Err(Error::InvalidParameter(lattice_gpu_cli::NO_MPI.into())),
            }
        }};
    }
    let size = |s: [usize; 3]| format!("--size {}x{}x{}", s[0], s[1], s[2]);
    match &cli.command {
        Command::Cavity(a) => by_storage!(cavity, a, a.size[2], size(a.size)),
        Command::Poiseuille(a) => by_storage!(
            poiseuille,
            a,
            a.extent.1,
            format!("--extent {}x{}", a.extent.0, a.extent.1)
        ),
        Command::TaylorGreen(a) => by_storage!(taylor_green, a, a.size[2], size(a.size)),
        Command::Cylinder(a) => by_storage!(cylinder, a, 1, "quasi-2-D: one cell deep"),
        Command::Obstacle(a) => {
            let dims = a.dims()?;
            let set = match a.size {
                Some(s) => size(s),
                None => format!("the grid of {}x{}x{} cells", dims[0], dims[1], dims[2]),
            };
            by_storage!(obstacle, a, dims[2], set)
        }
        Command::Bench(a) => bench(a),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli::start();
    cli::exit(dispatch(cli))
}
