//! The options of a decomposed run: how its ranks start (`--mpi`, `--gpus N`), how they exchange
//! their halos (`--halos host|nccl`, `--no-overlap`), `--cut`, and the check that every rank was started
//! alike.

#[cfg(feature = "nccl")]
use std::sync::Arc;

#[cfg(feature = "nccl")]
use lattice_gpu_host::{Gpu, Result};

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
