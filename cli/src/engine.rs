//! `--engine auto|device|host` and the launch options: the same in every binary, tuned on a GPU
//! unless `--block` or `--march` fix the launch.

use std::sync::Arc;

use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::engine::Variant;
use lattice_gpu_host::{DeviceAutoTuningLoopEngine, Gpu, LaunchShape, Result};

use crate::gpu::{default_gpu, gpu_or_cpu, open_for_engine};
use crate::parse::parse_block;

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
