//! What the application binaries share: engine and precision options, opening the GPU (falling back to
//! the CPU with a notice), output directories and progress bars.

use std::path::Path;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use lattice_gpu_formats::{IoError, OutputDir};
use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::engine::Variant;
use lattice_gpu_host::{DeviceAutoTuningLoopEngine, Error, Gpu, LaunchShape, Result};

/// How a GPU engine launches its kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    /// The launch shape tuned on the real work and cached (the default).
    Tuned,
    /// The launch shape the options fix (`--block`, `--march`).
    Fixed,
}

/// Where every application runs: `--engine auto|device|host`, the same in every binary. On a GPU the
/// launch is tuned unless options fix it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Placement {
    /// The GPU if there is one, else the CPU with a one-line notice.
    Auto,
    /// The GPU; an error without one.
    Device,
    /// The CPU.
    Host,
}

/// What MPI launchers and Slurm set to a process's rank among the processes of its node: OpenMPI,
/// MPICH and Intel MPI, MVAPICH, Slurm, PMI.
const LOCAL_RANK_VARS: [&str; 5] = [
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "MV2_COMM_WORLD_LOCAL_RANK",
    "SLURM_LOCALID",
    "PMI_LOCAL_RANK",
];

/// The GPU a process runs on when none is named: started by `mpirun` or `srun`, its rank among the
/// processes of its node modulo the node's GPUs (one process per GPU then spreads over all of them,
/// instead of every rank sharing GPU 0); otherwise GPU 0.
pub fn default_gpu() -> usize {
    if let Some(g) = THREAD_GPU.get() {
        return g;
    }
    local_gpu(local_rank(), Gpu::probe().ok())
}

/// The process's rank among the processes of its node, where a launcher set one.
fn local_rank() -> Option<usize> {
    LOCAL_RANK_VARS
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse::<usize>().ok())
}

/// Opens GPU `ordinal`, or `None` without a GPU, with a notice that `instead` runs on the CPU. The
/// notice is printed once per node: every rank of a decomposed run (threads of this process, or
/// processes started by `mpirun`/`srun`) falls back alike, and one line says it.
fn gpu_or_cpu(ordinal: usize, instead: &str) -> Result<Option<Arc<Gpu>>> {
    match Gpu::open(ordinal) {
        Ok(g) => Ok(Some(g)),
        Err(Error::NoGpu(why)) => {
            static ONCE: std::sync::Once = std::sync::Once::new();
            if local_rank().unwrap_or(0) == 0 {
                ONCE.call_once(|| eprintln!("notice: {why}; running {instead} instead"));
            }
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

thread_local! {
    /// The GPU of a rank run as a thread of this process ([`on_gpus`]).
    static THREAD_GPU: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// The most ranks `--gpus` starts as threads of one process; more is a job for `--mpi`.
pub const MOST_THREAD_RANKS: usize = 1024;

/// `--gpus N`: runs `run` on `ranks` threads of this process, rank `r` on GPU `r` (modulo the GPUs
/// there are: [`default_gpu`] in the thread), each with its rank of a
/// [`Threads`](lattice_gpu_host::threads::Threads) communicator; the error of the first rank that
/// failed, if one did. `most` is the most ranks the grid can be split over, `over` what they split
/// (e.g. "the 128 z layers"): more ranks are refused before a thread starts.
pub fn on_gpus<E: Send + From<Error>>(
    ranks: usize,
    most: usize,
    over: &str,
    run: impl Fn(&lattice_gpu_host::threads::Threads) -> std::result::Result<(), E> + Sync,
) -> std::result::Result<(), E> {
    check_gpus(ranks, most, over)?;
    let gpus = Gpu::probe().ok();
    lattice_gpu_host::threads::run(ranks, |comm| {
        use lattice_gpu_host::comm::Communicator;
        THREAD_GPU.set(Some(local_gpu(Some(comm.rank()), gpus)));
        run(comm)
    })
    .map(|_| ())
}

/// Opens GPU `ordinal`; without a GPU the error ends with `fix`, the way out that fits the caller.
fn open_or_say(ordinal: usize, fix: &str) -> Result<Arc<Gpu>> {
    Gpu::open(ordinal).map_err(|e| match e {
        Error::NoGpu(why) => Error::NoGpu(format!("{why}{fix}")),
        e => e,
    })
}

/// Opens GPU `ordinal` for a GPU engine the user asked for; without a GPU the error also names the CPU
/// engine.
fn open_for_engine(ordinal: usize) -> Result<Arc<Gpu>> {
    open_or_say(ordinal, ", or run on the CPU with --engine host")
}

/// Opens GPU `ordinal` for `{app} bench`: a benchmark measures the GPU, so there is no CPU engine to
/// offer instead.
pub fn bench_gpu(app: &str, ordinal: usize) -> Result<Arc<Gpu>> {
    open_or_say(
        ordinal,
        &format!("; `{app} bench` measures the GPU, so run it on a machine with one"),
    )
}

/// [`default_gpu`] for local rank `local` on a node with `gpus` devices.
fn local_gpu(local: Option<usize>, gpus: Option<usize>) -> usize {
    match (local, gpus) {
        (Some(r), Some(n)) if n > 0 => r % n,
        _ => 0,
    }
}

impl Placement {
    /// The GPU to run on ([`default_gpu`]), or `None` for the CPU; `instead` names what runs on the CPU
    /// in the notice that `Auto` prints when there is no GPU.
    pub fn gpu(self, instead: &str) -> Result<Option<Arc<Gpu>>> {
        self.gpu_at(default_gpu(), instead)
    }

    /// Refuses the launch options `options` (`given`: any of them is) with `--engine host`, where
    /// they would be ignored.
    pub fn check_launch(self, given: bool, options: &str) -> std::result::Result<(), String> {
        match self == Placement::Host && given {
            true => Err(format!(
                "{options} with --engine host: the launch shape is the GPU's, and --engine host \
                 runs on the CPU; leave them out, or run on the GPU (--engine auto or device)"
            )),
            false => Ok(()),
        }
    }

    /// [`gpu`](Self::gpu) with GPU `ordinal`.
    pub fn gpu_at(self, ordinal: usize, instead: &str) -> Result<Option<Arc<Gpu>>> {
        match self {
            Placement::Host => Ok(None),
            Placement::Device => Ok(Some(open_for_engine(ordinal)?)),
            Placement::Auto => gpu_or_cpu(ordinal, instead),
        }
    }
}

/// Refuses `--gpus ranks` where the grid splits over at most `most` ranks (`over` names what they
/// split), or where one process cannot run that many threads: [`on_gpus`] checks this before a
/// thread starts, and an application that prepares shared data first calls it before that.
pub fn check_gpus(ranks: usize, most: usize, over: &str) -> Result<()> {
    if ranks > most {
        return Err(Error::InvalidSetting(format!(
            "--gpus {ranks}: {over} split over at most {most} ranks; give --gpus {most} or fewer"
        )));
    }
    if ranks > MOST_THREAD_RANKS {
        return Err(Error::InvalidSetting(format!(
            "--gpus {ranks}: one process runs at most {MOST_THREAD_RANKS} ranks as threads; start \
             more as MPI processes with --mpi under mpirun"
        )));
    }
    Ok(())
}

/// Starts an application's run: SIGINT, SIGTERM, SIGHUP and SIGUSR1 from now on stop it at its next check
/// ([`interrupt`](lattice_gpu_host::interrupt)) instead of killing it mid-write; where they cannot be
/// taken, a notice says so and the run goes on without.
pub fn start() {
    if let Err(e) = lattice_gpu_host::interrupt::watch() {
        eprintln!("notice: {e}; a signal will end the run at once");
    }
}

/// How an application ends: success; or the error's message on stderr and exit code 1, or 128 + the
/// signal's number where a signal stopped the run (130 for SIGINT, as a shell reports it). Never a
/// panic. Usage errors exit with 2 before this (clap's convention).
pub fn exit<E: std::fmt::Display>(result: std::result::Result<(), E>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            match lattice_gpu_host::interrupt::requested() {
                Some(signal) => std::process::ExitCode::from(signal.exit_code()),
                None => std::process::ExitCode::FAILURE,
            }
        }
    }
}

/// What `--mpi` says in a binary built without the `mpi` feature.
pub const NO_MPI: &str = "--mpi: this binary was built without MPI support; install OpenMPI (apt install \
     libopenmpi-dev openmpi-bin libclang-dev) and build with `cargo build --release --features mpi`";

/// The error for `--halos nccl` in a build without NCCL support.
pub const NO_NCCL: &str = "--halos nccl: this binary was built without NCCL support; build with \
     `cargo build --release --features mpi,nccl` (NCCL itself is loaded at run time: libnccl.so.2)";

/// How a decomposed run starts its ranks and exchanges its halos (flattened into each application's
/// options).
#[derive(Clone, Debug, clap::Args)]
pub struct HaloArgs {
    /// How a decomposed run on GPUs moves its halos: `host` (face layers through host memory and MPI)
    /// or `nccl` (straight between the GPUs, beside the work that reads no halo; a build with
    /// `--features mpi,nccl`).
    #[arg(long, value_enum, default_value_t = HaloTransport::Host)]
    pub halos: HaloTransport,
    /// A decomposed run exchanges its halos before any layer runs instead of behind the layers that
    /// read none: the baseline that shows what overlap gains.
    #[arg(long)]
    pub no_overlap: bool,
    /// Split the run over N GPUs driven by this process, one thread per GPU (GPU r for rank r, modulo
    /// the GPUs there are), instead of over the MPI ranks of `--mpi`; with `--halos nccl`, one NCCL
    /// communicator of the process's GPUs. On the CPU engine: N threads, each a rank.
    #[arg(long, value_name = "N", allow_hyphen_values = true,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub gpus: Option<u32>,
}

/// `--halos`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HaloTransport {
    /// Through host memory and MPI.
    Host,
    /// Through NCCL, between the GPUs.
    Nccl,
}

impl HaloArgs {
    /// Refuses `--gpus` with `--mpi` (`mpi`): one way of starting the ranks at a time.
    pub fn check_launch(&self, mpi: bool) -> std::result::Result<(), String> {
        if mpi && self.gpus.is_some() {
            return Err(
                "--gpus runs the ranks as threads of this process and --mpi as MPI \
                        processes: give one of them"
                    .into(),
            );
        }
        Ok(())
    }

    /// Refuses `--halos nccl` off the GPU (`on_gpu` false) and in a build without NCCL, naming the fix.
    pub fn check(&self, on_gpu: bool) -> std::result::Result<(), String> {
        if self.halos == HaloTransport::Host {
            return Ok(());
        }
        if !on_gpu {
            return Err(
                "--halos nccl moves GPU memory: run on a GPU engine (--engine device or auto \
                 with a GPU)"
                    .into(),
            );
        }
        if cfg!(feature = "nccl") {
            Ok(())
        } else {
            Err(NO_NCCL.into())
        }
    }
}

/// The decomposition options of the stencil applications (diffusion, lbm, advection): the launch and
/// halo exchange of [`HaloArgs`], and `--cut`.
#[derive(Clone, Debug, clap::Args)]
pub struct SplitArgs {
    #[command(flatten)]
    pub halo: HaloArgs,
    /// Split the steps of a single rank as a decomposed run does (halo layers from itself, the boundary
    /// layers apart from the inner ones; beside them with `--halos nccl`): what the split costs on one
    /// GPU. With --mpi or --gpus.
    #[arg(long)]
    pub cut: bool,
}

impl SplitArgs {
    /// Refuses `--gpus` with `--mpi` (`mpi`), and `--cut` outside a decomposed launch: the flag says
    /// what the split costs on the ranks of `--mpi` or `--gpus`.
    pub fn check_launch(&self, mpi: bool) -> std::result::Result<(), String> {
        self.halo.check_launch(mpi)?;
        if self.cut && !mpi && self.halo.gpus.is_none() {
            return Err(
                "--cut splits the steps of a decomposed run: add --mpi (under mpirun) or --gpus N"
                    .into(),
            );
        }
        Ok(())
    }

    /// This rank's NCCL communicator among the ranks of `comm`, on `gpu`, where `--halos nccl` asks
    /// for one ([`HaloArgs::check`] first), timing its exchanges for [`exchange_time`].
    #[cfg(feature = "nccl")]
    pub fn communicator<C: lattice_gpu_host::comm::Communicator>(
        &self,
        comm: &C,
        gpu: Option<&Arc<Gpu>>,
    ) -> Result<Option<lattice_gpu_host::nccl::Nccl>> {
        match (self.halo.halos, gpu) {
            (HaloTransport::Nccl, Some(gpu)) => {
                let mut nccl = lattice_gpu_host::nccl::Nccl::new(comm, gpu)?;
                nccl.time_exchanges();
                Ok(Some(nccl))
            }
            _ => Ok(None),
        }
    }

    /// The line rank 0 prints for a run split along `axis` over `ranks` ranks (`None` for one rank
    /// that does not cut its steps).
    pub fn describe(&self, axis: char, ranks: usize) -> Option<String> {
        if ranks == 1 && !self.cut {
            return None;
        }
        let through = match self.halo.halos {
            HaloTransport::Host => "host memory",
            HaloTransport::Nccl => "NCCL",
        };
        let when = if self.halo.no_overlap {
            "exchanged before the interior (no overlap)"
        } else {
            "hidden behind the interior"
        };
        let s = if ranks == 1 { "" } else { "s" };
        let ranks = match self.halo.gpus {
            Some(_) => format!("{ranks} rank{s} run as threads of this process"),
            None => format!("{ranks} MPI rank{s}"),
        };
        Some(format!(
            "split along {axis} over {ranks}, halos through {through}, {when}"
        ))
    }
}

/// Prints what a split run's timed halo exchanges through NCCL achieved (`None`: not through NCCL):
/// the exchange bandwidth between its GPUs.
#[cfg(feature = "nccl")]
pub fn print_exchange_time(time: Option<lattice_gpu_host::nccl::ExchangeTime>) {
    let Some(t) = time else { return };
    if t.count > 0 {
        println!(
            "halo exchange through NCCL (rank 0): {} exchanges after the first, {:.3} MB sent in each, \
             {:.4} ms each on the exchange stream: {:.1} GB/s sent (as much received)",
            t.count,
            t.bytes as f64 / t.count as f64 / 1e6,
            1e3 * t.seconds / t.count as f64,
            t.gb_per_s()
        );
    }
}

/// The exchanges `nccl` timed, if there is one ([`print_exchange_time`]).
#[cfg(feature = "nccl")]
pub fn exchange_time(
    nccl: Option<&lattice_gpu_host::nccl::Nccl>,
) -> Result<Option<lattice_gpu_host::nccl::ExchangeTime>> {
    Ok(nccl.map(|n| n.exchange_time()).transpose()?.flatten())
}

/// Fails on every rank unless all ranks of `comm` were started with the same command-line options (a
/// decomposed run with, say, different sizes per rank would exchange halos that do not fit).
pub fn same_options<C: lattice_gpu_host::comm::Communicator>(
    comm: &C,
) -> std::result::Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // 20 bits of the options' hash: its sum and the sum of its square are exact in f64, and both equal
    // size * h (size * h^2) only if every rank has the same h.
    let h = (lattice_gpu_host::engine::tunecache::fnv1a64(args.join("\u{1f}").as_bytes())
        & 0xf_ffff) as f64;
    let n = comm.size() as f64;
    let (s1, s2) = (
        comm.sum(h).map_err(|e| e.to_string())?,
        comm.sum(h * h).map_err(|e| e.to_string())?,
    );
    if s1 == n * h && s2 == n * h * h {
        Ok(())
    } else {
        Err(format!(
            "the {} MPI ranks were started with different options (this is rank {}: {}); start every rank \
             with the same command line",
            comm.size(),
            comm.rank(),
            args.join(" ")
        ))
    }
}

/// How a 3-D stencil kernel reads its input (see `Variant` in the stencil framework).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum VariantArg {
    /// Every neighbour from global memory, every step.
    Plain,
    /// The thread's z column kept in registers while it marches.
    Zqueue,
    /// Each xy plane staged in shared memory by the block, the z column in registers.
    Tiled,
    /// The x-neighbouring points of a 16-byte vector per thread, moved by vector loads and stores.
    Vector,
}

impl From<VariantArg> for Variant {
    fn from(v: VariantArg) -> Self {
        match v {
            VariantArg::Plain => Variant::Plain,
            VariantArg::Zqueue => Variant::ZQueue,
            VariantArg::Tiled => Variant::Tiled,
            VariantArg::Vector => Variant::Vector,
        }
    }
}

/// Floating-point precision of fields and arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Precision {
    /// 32-bit.
    F32,
    /// 64-bit.
    F64,
}

/// Engine options every application takes.
#[derive(Clone, Debug, clap::Args)]
pub struct EngineArgs {
    /// Where to run: auto (the GPU if there is one, else the CPU with a notice), device (the GPU; an
    /// error without one) or host (the CPU). On a GPU the launch shape is tuned on the run's steps
    /// and cached, unless --block or --march fixes it.
    #[arg(long, value_enum, default_value_t = Placement::Auto)]
    pub engine: Placement,
    /// GPU ordinal [default: 0, or under mpirun/srun the process's rank on its node modulo the
    /// node's GPUs].
    #[arg(long)]
    pub gpu: Option<usize>,
    /// Block shape of a fixed GPU launch, as XxY [default: 128x1]; given, the launch is not tuned.
    #[arg(long, value_parser = parse_block)]
    pub block: Option<(u32, u32)>,
    /// Points each thread of a fixed GPU launch marches along the last axis [default: 2]; given,
    /// the launch is not tuned.
    #[arg(long)]
    pub march: Option<u32>,
    /// Kernel variant: the one a fixed launch (--block, --march) runs [default: plain], or the only
    /// one the tuner tries [default: every variant, chosen with the block shape].
    #[arg(long, value_enum)]
    pub variant: Option<VariantArg>,
    /// Tune again even where the tune cache has a result.
    #[arg(long)]
    pub retune: bool,
    /// Keep tuning results in memory only (do not read or write the tune cache file).
    #[arg(long)]
    pub no_tune_cache: bool,
}

/// The engine to use, with the GPU opened when it needs one.
pub enum Chosen {
    /// The CPU.
    Host,
    /// How the GPU launches, and the opened GPU.
    Gpu(Launch, Arc<Gpu>),
}

impl EngineArgs {
    /// Resolves `--engine`: the GPU (`auto` falls back to the CPU with a one-line notice where there
    /// is none; `device` fails there), launching as [`launch`](Self::launch) says; or the CPU.
    pub fn choose(&self) -> Result<Chosen> {
        Ok(match self.engine.gpu_at(self.gpu(), "on the CPU engine")? {
            Some(gpu) => Chosen::Gpu(self.launch(), gpu),
            None => Chosen::Host,
        })
    }

    /// A fixed launch where `--block` or `--march` gives its shape, else a tuned one.
    pub fn launch(&self) -> Launch {
        match self.block.is_some() || self.march.is_some() {
            true => Launch::Fixed,
            false => Launch::Tuned,
        }
    }

    /// Fails, naming the fix, where an option would be ignored: the GPU ordinal and the launch
    /// options with `--engine host`.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.engine == Placement::Host && self.gpu.is_some() {
            return Err(
                "--gpu picks the GPU of a GPU engine, and --engine host runs on the CPU: leave one \
                 of them out"
                    .into(),
            );
        }
        self.engine.check_launch(
            self.block.is_some() || self.march.is_some(),
            "--block and --march",
        )
    }

    /// The GPU ordinal: `--gpu`, or [`default_gpu`].
    pub fn gpu(&self) -> usize {
        self.gpu.unwrap_or_else(default_gpu)
    }

    /// The fixed launch shape of `--engine device`.
    pub fn shape(&self) -> LaunchShape {
        LaunchShape {
            block_x: self.block.map_or(128, |b| b.0),
            block_y: self.block.map_or(1, |b| b.1),
            march: self.march.unwrap_or(2),
            variant: self.variant.map_or(Variant::Plain, Variant::from),
        }
    }

    /// The auto-tuning engine on `gpu`, with the tune cache these options ask for.
    pub fn autotuner(&self, gpu: Arc<Gpu>) -> DeviceAutoTuningLoopEngine {
        let cache = match self.no_tune_cache {
            false => TuneCache::per_user(),
            true => TuneCache::in_memory(),
        };
        let tuner = DeviceAutoTuningLoopEngine::new(gpu, cache).retune(self.retune);
        match self.variant {
            Some(v) => tuner.variants(&[v.into()]),
            None => tuner,
        }
    }
}

/// Parses a block shape `XxY` of positive numbers.
pub fn parse_block(s: &str) -> std::result::Result<(u32, u32), String> {
    let dims = parse_dims(s)?;
    match dims.as_slice() {
        [x, y] if *x > 0 && *y > 0 => Ok((*x as u32, *y as u32)),
        _ => Err(format!(
            "block shape `{s}` must be two positive numbers, XxY (e.g. 32x8)"
        )),
    }
}

/// Parses `N`, `NxM` or `NxMxK` into positive integers.
pub fn parse_dims(s: &str) -> std::result::Result<Vec<usize>, String> {
    s.split(['x', 'X'])
        .map(|p| match p.trim().parse::<usize>() {
            Ok(v) if v > 0 && v <= 1 << 20 => Ok(v),
            _ => Err(format!(
                "`{s}` is not a size: use positive numbers below 2^20 such as 128 or 64x64x256"
            )),
        })
        .collect()
}

/// A 3-D grid size from `N` (a cube) or `NXxNYxNZ`.
pub fn parse_size3(s: &str) -> std::result::Result<[usize; 3], String> {
    match parse_dims(s)?.as_slice() {
        [n] => Ok([*n; 3]),
        [x, y, z] => Ok([*x, *y, *z]),
        _ => Err(format!(
            "size `{s}` must be N or NXxNYxNZ (e.g. 256 or 8x512x512)"
        )),
    }
}

/// Stages the run's output directory ([`OutputDir`]): its files appear together when the run
/// succeeds, or not at all.
pub fn output_dir(dir: &Path) -> std::result::Result<OutputDir, IoError> {
    OutputDir::stage(dir)
}

/// Makes the output directory at once, with an error that names it. Transitional: applications move
/// to [`output_dir`], whose files appear all or nothing.
pub fn make_output_dir(dir: &Path) -> std::result::Result<std::path::PathBuf, IoError> {
    std::fs::create_dir_all(dir).map_err(|source| IoError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    Ok(dir.to_path_buf())
}

/// Moves a successful run's staged files into place and says where they are.
pub fn commit(out: OutputDir) -> std::result::Result<(), IoError> {
    let dir = out.target().to_path_buf();
    let files = out.commit()?;
    let names: Vec<String> = files
        .iter()
        .filter_map(|f| Some(f.file_name()?.to_string_lossy().into_owned()))
        .collect();
    match names.len() {
        0 => {}
        n if n <= 6 => println!("wrote {} in {}", names.join(", "), dir.display()),
        n => println!("wrote {n} files in {}", dir.display()),
    }
    Ok(())
}

/// `--checkpoint-every`: a number of steps, or a time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Every {
    /// Every this many steps.
    Steps(usize),
    /// Every this many seconds.
    Seconds(f64),
}

/// Parses `--checkpoint-every`: `N` steps, or a time `Ns`, `Nm` or `Nh` (seconds, minutes, hours).
pub fn parse_every(s: &str) -> std::result::Result<Every, String> {
    let bad = || {
        format!(
            "`{s}` is neither a number of steps nor a time: give e.g. 1000 (steps), 30s, 10m or 2h"
        )
    };
    if let Ok(n) = s.parse::<usize>() {
        return if n > 0 {
            Ok(Every::Steps(n))
        } else {
            Err(bad())
        };
    }
    let unit = match s.chars().last() {
        Some('s') => 1.0,
        Some('m') => 60.0,
        Some('h') => 3600.0,
        _ => return Err(bad()),
    };
    match s[..s.len() - 1].parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(Every::Seconds(v * unit)),
        _ => Err(bad()),
    }
}

/// The checkpoint file `--resume PATH` names: `PATH/name` where PATH is a directory, else PATH.
pub fn checkpoint_file(path: &Path, name: &str) -> std::path::PathBuf {
    match path.is_dir() {
        true => path.join(name),
        false => path.to_path_buf(),
    }
}

/// The notice for a run that ended while the auto-tuner, `done` of its `needed` trial steps in, was
/// still timing launch shapes.
pub fn unfinished_tuning(done: usize, needed: usize) -> String {
    format!(
        "notice: the auto-tuner had timed {done} of its {needed} trial steps when the run ended, so the \
         rate above includes slow trial shapes and nothing went into the tune cache; run at least \
         {needed} steps once (later runs of this size take the cached shape), or fix a launch with \
         --engine device"
    )
}

/// A progress bar of `len` steps with a throughput field; hidden when stderr is not a terminal.
pub fn progress(len: u64, unit: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    let template =
        format!("{{bar:40}} {{pos}}/{{len}} {unit} [{{elapsed_precise}} < {{eta}}] {{msg}}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_spread_over_the_gpus_of_their_node() {
        assert_eq!(local_gpu(None, Some(4)), 0);
        assert_eq!(local_gpu(Some(3), Some(4)), 3);
        assert_eq!(local_gpu(Some(5), Some(4)), 1);
        // One visible device per rank (CUDA_VISIBLE_DEVICES), or none.
        assert_eq!(local_gpu(Some(5), Some(1)), 0);
        assert_eq!(local_gpu(Some(5), None), 0);
    }
}
