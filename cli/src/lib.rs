//! What the application binaries share, so that every option means the same in each: the choice of
//! GPU (and `--gpus N`), `--engine` and the launch options, the options of a decomposed run (halos),
//! the parsers of option values, the output directory and progress bars, and how a run starts and
//! ends (signals, exit codes).
//!
//! Each concern is a module of its own; the items are used from the crate root
//! (`lattice_gpu_cli::EngineArgs`), as the binaries and the facade (`lattice_gpu::cli`) name them.

mod engine;
mod gpu;
mod halo;
mod output;
mod parse;
mod run;

pub use engine::{Chosen, EngineArgs, Launch, Placement, Precision, VariantArg};
pub use gpu::{bench_gpu, check_gpus, default_gpu, on_gpus, MOST_THREAD_RANKS};
#[cfg(feature = "nccl")]
pub use halo::{exchange_time, print_exchange_time};
pub use halo::{same_options, HaloArgs, HaloTransport, SplitArgs, NO_MPI, NO_NCCL};
pub use output::{
    checkpoint_file, commit, make_output_dir, output_dir, progress, unfinished_tuning,
};
pub use parse::{parse_block, parse_dims, parse_every, parse_size3, Every};
pub use run::{exit, start};
