//! Which GPU a process or a rank runs on: `--gpu`'s default under MPI launchers, the fallback to the
//! CPU with a notice, and the ranks of `--gpus N` run as threads of one process.

use std::sync::Arc;

use lattice_gpu_host::{Error, Gpu, Result};

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
pub(crate) fn gpu_or_cpu(ordinal: usize, instead: &str) -> Result<Option<Arc<Gpu>>> {
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
pub(crate) fn open_for_engine(ordinal: usize) -> Result<Arc<Gpu>> {
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
