//! NCCL between GPUs (the `nccl` cargo feature; `libnccl.so.2` is loaded at run time, so builds need no
//! NCCL): sums over ranks and halo exchanges of device memory, queued on each GPU's stream so that the
//! host never waits for them. Two ways to make the communicator: one process per GPU started by
//! `mpirun`/`srun`, with the host [`Communicator`] handing NCCL's unique id from rank 0 to the others
//! ([`Nccl::new`], the multi-node path), and one process driving several GPUs ([`Nccl::for_gpus`]).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use cudarc::driver::{CudaEvent, CudaStream};
use cudarc::nccl::{result as nc, sys as ns};

use crate::buffer::{DeviceBuffer, Plain};
use crate::comm::{Communicator, Wire};
use crate::decomp::{layers, Face, Region, Side};
use crate::error::{CudaContext, Error, Result};
use crate::field::{Element, Field};
use crate::gpu::Gpu;

/// Checks that NCCL can be loaded, or says how to install it.
pub fn check_library() -> Result<()> {
    // SAFETY: only tries to load the shared library.
    if unsafe { ns::is_culib_present() } {
        Ok(())
    } else {
        Err(Error::Comm(
            "the NCCL library (libnccl.so.2) was not found; install it (`apt install libnccl2` from \
             NVIDIA's CUDA repository, or `pip install nvidia-nccl-cu12` and add its `lib` directory to \
             LD_LIBRARY_PATH), or exchange through MPI on the host instead"
                .into(),
        ))
    }
}

fn failed(what: &str) -> impl FnOnce(nc::NcclError) -> Error + '_ {
    move |e| Error::Comm(format!("NCCL failed while {what}: {e:?}"))
}

/// Fails on every rank where two ranks of `host` run on the same GPU (NCCL refuses them only once it
/// has started, with a message that names no rank), naming them and the fix.
fn one_gpu_each<C: Communicator>(host: &C, gpu: &Arc<Gpu>) -> Result<()> {
    let uuid = gpu
        .context()
        .uuid()
        .cuda(|| "reading the GPU's UUID".into())?
        .bytes
        .map(|b| b as u8);
    let all = host.gather(&uuid)?;
    // Rank 0 finds the first pair and tells every rank: [first rank, second rank] or [0, 0].
    let mut pair = [0u32; 2];
    let ids: Vec<&[u8]> = all.chunks(16).collect();
    'find: for (i, a) in ids.iter().enumerate() {
        for (j, b) in ids.iter().enumerate().skip(i + 1) {
            if a == b {
                pair = [i as u32, j as u32];
                break 'find;
            }
        }
    }
    host.broadcast(&mut pair)?;
    if pair[1] == 0 {
        return Ok(());
    }
    Err(Error::Comm(format!(
        "ranks {} and {} run on the same GPU, and NCCL needs a GPU of its own for each rank: start \
         at most as many ranks (or --gpus) per node as it has GPUs, or exchange through host memory \
         (--halos host)",
        pair[0], pair[1]
    )))
}

/// One rank of an NCCL communicator, on one GPU. Collective: every rank must make the same calls in the
/// same order.
pub struct Nccl {
    comm: ns::ncclComm_t,
    gpu: Arc<Gpu>,
    /// Where overlapped exchanges ([`start`](Self::start)) run, beside the GPU's stream.
    side: Arc<CudaStream>,
    rank: usize,
    size: usize,
    /// The exchanges' times, once [`time_exchanges`](Self::time_exchanges) asked for them.
    timing: Option<RefCell<Timing>>,
}

/// Exchanges timed on the exchange stream: those still in flight, and the totals of those done.
#[derive(Default)]
struct Timing {
    /// Start and end events of each exchange not yet added up, and the bytes it sent.
    pending: VecDeque<(CudaEvent, CudaEvent, u64)>,
    /// Events of exchanges added up, to record again.
    free: Vec<CudaEvent>,
    bytes: u64,
    ms: f64,
    count: usize,
    /// Whether the first exchange, which sets up NCCL's connections, has been left out.
    first_left_out: bool,
}

impl Timing {
    /// Adds up the exchanges whose end has passed (all of them with `wait`).
    fn settle(&mut self, wait: bool) -> Result<()> {
        while let Some((start, end, _)) = self.pending.front() {
            if wait {
                end.synchronize()
                    .cuda(|| "waiting for a timed halo exchange".into())?;
            } else if !end.is_complete() {
                break;
            }
            let ms = start
                .elapsed_ms(end)
                .cuda(|| "timing a halo exchange".into())?;
            let (start, end, bytes) = self.pending.pop_front().expect("the front exists");
            self.free.extend([start, end]);
            if !self.first_left_out {
                self.first_left_out = true;
                continue;
            }
            self.ms += ms as f64;
            self.bytes += bytes;
            self.count += 1;
        }
        Ok(())
    }
}

/// What a rank's timed halo exchanges moved ([`Nccl::exchange_time`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExchangeTime {
    /// Exchanges (after the first).
    pub count: usize,
    /// Bytes this rank sent (it received as many from its peers, at the same time, where the split is
    /// even).
    pub bytes: u64,
    /// Seconds their NCCL groups took on the exchange stream, each from its start to its end: the wait
    /// for the peers to start theirs included.
    pub seconds: f64,
}

impl ExchangeTime {
    /// Bytes sent per second, in GB/s.
    pub fn gb_per_s(&self) -> f64 {
        self.bytes as f64 / self.seconds / 1e9
    }
}

impl std::fmt::Debug for Nccl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nccl")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("gpu", &self.gpu)
            .finish_non_exhaustive()
    }
}

// SAFETY: an NCCL communicator may be used from any thread with its device's context bound, which
// every call here does first; `&self` calls are serialised by the caller's stream order.
unsafe impl Send for Nccl {}

impl Nccl {
    /// This rank's communicator among the ranks of `host`, on `gpu`: rank 0 makes NCCL's unique id and
    /// `host` broadcasts it (an MPI run: one process per GPU, any number of nodes).
    ///
    /// A rank that waits more than [`SETUP_TIMEOUT_VAR`] seconds (two minutes if unset) for the others
    /// fails, naming the variable.
    pub fn new<C: Communicator>(host: &C, gpu: &Arc<Gpu>) -> Result<Self> {
        Self::new_within(host, gpu, setup_timeout()?)
    }

    /// [`new`](Self::new), failing after `timeout` if the other ranks have not all joined.
    pub fn new_within<C: Communicator>(
        host: &C,
        gpu: &Arc<Gpu>,
        timeout: Duration,
    ) -> Result<Self> {
        check_library()?;
        one_gpu_each(host, gpu)?;
        let mut id = [0u8; 128];
        if host.rank() == 0 {
            let uid = nc::get_uniqueid().map_err(failed("making the unique id"))?;
            for (b, c) in id.iter_mut().zip(uid.internal) {
                *b = c as u8;
            }
        }
        host.broadcast(&mut id)?;
        let uid = ns::ncclUniqueId {
            internal: id.map(|b| b as core::ffi::c_char),
        };
        let (size, rank) = (host.size(), host.rank());
        let comm = join(gpu, uid, size, rank, timeout)?;
        Ok(Self {
            comm,
            gpu: gpu.clone(),
            side: side_stream(gpu)?,
            rank,
            size,
            timing: None,
        })
    }

    /// Communicators for several GPUs driven by this process, rank `i` on `gpus[i]` (each on its own
    /// device).
    pub fn for_gpus(gpus: &[Arc<Gpu>]) -> Result<Vec<Self>> {
        check_library()?;
        let ordinals: Vec<i32> = gpus.iter().map(|g| g.context().ordinal() as i32).collect();
        let mut comms = vec![std::ptr::null_mut(); gpus.len()];
        // SAFETY: `comms` has room for one communicator per device listed.
        unsafe { nc::comm_init_all(comms.as_mut_ptr(), gpus.len() as i32, ordinals.as_ptr()) }
            .map_err(failed("making the communicators of this process's GPUs"))?;
        comms
            .into_iter()
            .zip(gpus)
            .enumerate()
            .map(|(rank, (comm, gpu))| {
                Ok(Self {
                    comm,
                    gpu: gpu.clone(),
                    side: side_stream(gpu)?,
                    rank,
                    size: gpus.len(),
                    timing: None,
                })
            })
            .collect()
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Times every exchange started from now on ([`start`](Self::start), [`start_on`](Self::start_on),
    /// [`start_ranges`](Self::start_ranges)) with events around it on the exchange stream, for
    /// [`exchange_time`](Self::exchange_time), the first of them left out (NCCL connects two ranks
    /// in their first exchange). Not for exchanges recorded into a CUDA graph.
    pub fn time_exchanges(&mut self) {
        self.timing = Some(RefCell::default());
    }

    /// The exchanges timed since [`time_exchanges`](Self::time_exchanges) (none without it), once the
    /// GPU has finished them.
    pub fn exchange_time(&self) -> Result<Option<ExchangeTime>> {
        let Some(timing) = &self.timing else {
            return Ok(None);
        };
        let mut t = timing.borrow_mut();
        t.settle(true)?;
        Ok(Some(ExchangeTime {
            count: t.count,
            bytes: t.bytes,
            seconds: t.ms / 1e3,
        }))
    }

    /// Ranks in all.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The GPU this rank runs on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    fn stream(&self) -> ns::cudaStream_t {
        raw(self.gpu.stream())
    }

    /// Queues the sum of `buf` over all ranks into `buf`, on every rank (dot products and norms).
    pub fn sum_in_place(&self, buf: &DeviceBuffer<f64>) -> Result<()> {
        bind(&self.gpu)?;
        let p = buf.ptr::<core::ffi::c_void>();
        // SAFETY: `buf` holds `len` f64 on this communicator's device; in place is allowed.
        unsafe {
            nc::all_reduce(
                p,
                p,
                buf.len(),
                ns::ncclDataType_t::ncclFloat64,
                ns::ncclRedOp_t::ncclSum,
                self.comm,
                self.stream(),
            )
        }
        .map_err(failed("summing over the ranks"))?;
        Ok(())
    }

    /// Queues one halo exchange on `buf` as a single NCCL group: each `(peer, range)` of `sends` goes to
    /// `peer`, each of `recvs` is filled from it (element ranges of `buf`; matching sends and receives
    /// between two ranks must be listed in the same order and be of the same length). A rank may be its
    /// own peer (a periodic axis that is not split).
    pub fn exchange<T: Wire + Plain>(
        &self,
        buf: &DeviceBuffer<T>,
        sends: &[(usize, Range<usize>)],
        recvs: &[(usize, Range<usize>)],
    ) -> Result<()> {
        self.check_ranges(buf.len(), sends, recvs)?;
        self.queue_exchange(
            buf.addr(),
            sends,
            recvs,
            std::mem::size_of::<T>(),
            self.stream(),
        )
    }

    /// [`exchange`](Self::exchange) started the way [`start`](Self::start) starts a halo: after the work
    /// queued so far, on the side stream; [`finish`](Self::finish) completes it.
    pub fn start_ranges<T: Wire + Plain>(
        &self,
        buf: &DeviceBuffer<T>,
        sends: &[(usize, Range<usize>)],
        recvs: &[(usize, Range<usize>)],
    ) -> Result<()> {
        self.check_ranges(buf.len(), sends, recvs)?;
        self.start_exchange(buf.addr(), sends, recvs, std::mem::size_of::<T>())
    }

    /// Queues the exchange of element ranges (of `size` bytes) of the array at `base` on the exchange
    /// stream, after the work queued so far on the GPU's stream, between events when exchanges are
    /// timed.
    fn start_exchange(
        &self,
        base: u64,
        sends: &[(usize, Range<usize>)],
        recvs: &[(usize, Range<usize>)],
        size: usize,
    ) -> Result<()> {
        self.side
            .join(self.gpu.stream())
            .cuda(|| "ordering a halo exchange after the work before it".into())?;
        self.queue_timed(base, sends, recvs, size)
    }

    /// The exchange on the side stream after what is queued there, between events when exchanges
    /// are timed.
    fn queue_timed(
        &self,
        base: u64,
        sends: &[(usize, Range<usize>)],
        recvs: &[(usize, Range<usize>)],
        size: usize,
    ) -> Result<()> {
        if sends.is_empty() && recvs.is_empty() {
            return Ok(());
        }
        let exchange = || self.queue_exchange(base, sends, recvs, size, raw(&self.side));
        let Some(timing) = &self.timing else {
            return exchange();
        };
        let event = |t: &mut Timing| {
            let e = match t.free.pop() {
                Some(e) => e,
                None => self.gpu.timing_event()?,
            };
            e.record(&self.side).cuda(|| "recording an event".into())?;
            Ok::<_, Error>(e)
        };
        let mut t = timing.borrow_mut();
        t.settle(false)?;
        let start = event(&mut t)?;
        exchange()?;
        let end = event(&mut t)?;
        let bytes = sends.iter().map(|(_, r)| (r.len() * size) as u64).sum();
        t.pending.push_back((start, end, bytes));
        Ok(())
    }

    fn check_ranges(
        &self,
        len: usize,
        sends: &[(usize, Range<usize>)],
        recvs: &[(usize, Range<usize>)],
    ) -> Result<()> {
        match sends
            .iter()
            .chain(recvs)
            .find(|(peer, r)| *peer >= self.size || r.start > r.end || r.end > len)
        {
            Some((peer, r)) => Err(Error::InvalidSize(format!(
                "a halo exchange names rank {peer} and elements {r:?} of a buffer of {len} on a \
                 communicator of {} ranks",
                self.size
            ))),
            None => Ok(()),
        }
    }

    /// Starts `halo` on `field` once the work queued so far on the GPU's stream is done, on a stream of
    /// its own, and returns at once: kernels queued next (the interior, which reads no halo) run beside
    /// it. [`finish`](Self::finish) makes the GPU's stream wait for it.
    pub fn start<T: Element>(&self, halo: &LayerHalo, field: &impl Field<T>) -> Result<()> {
        let Some(base) = field.device_addr() else {
            return Err(Error::InvalidSetting(
                "an NCCL halo exchange needs its field in GPU memory; run on the GPU engine".into(),
            ));
        };
        self.start_at(halo, base, field.shape().len(), std::mem::size_of::<T>())
    }

    /// [`start`](Self::start) once the `u32` at `counter` (device memory) has reached `target` (a
    /// cyclic comparison: the count may wrap), rather than once the work queued so far is done: the
    /// halos of a field that a pass still running writes, whose blocks count the points of its end
    /// planes as they finish them ([`PassSignal`](lattice_gpu_kernels::stencil::PassSignal)). The
    /// exchange then runs beside the rest of the pass; [`finish`](Self::finish) makes the GPU's
    /// stream wait for it. The counter is memory from `cuMemAlloc`
    /// ([`DeviceCounter`](crate::DeviceCounter); the wait refuses the stream-ordered pool's), kept
    /// alive by the caller, and the exchange must read and write only what the pass no longer
    /// touches once the count is reached.
    pub fn start_when<T: Element>(
        &self,
        halo: &LayerHalo,
        field: &impl Field<T>,
        counter: u64,
        target: u32,
    ) -> Result<()> {
        let Some(base) = field.device_addr() else {
            return Err(Error::InvalidSetting(
                "an NCCL halo exchange needs its field in GPU memory; run on the GPU engine".into(),
            ));
        };
        let len = field.shape().len();
        self.check_layers(halo, len)?;
        bind(&self.gpu)?;
        let geq =
            cudarc::driver::sys::CUstreamWaitValue_flags_enum::CU_STREAM_WAIT_VALUE_GEQ as u32;
        // SAFETY: `counter` is a live u32 in this GPU's memory (the caller's contract).
        unsafe {
            cudarc::driver::sys::cuStreamWaitValue32_v2(self.side.cu_stream(), counter, target, geq)
        }
        .result()
        .cuda(|| "making the halo exchange wait for a pass's end planes".into())?;
        self.queue_timed(base, &halo.sends, &halo.recvs, std::mem::size_of::<T>())
    }

    /// [`start`](Self::start) on a buffer of layers rather than a field.
    pub fn start_on<T: Plain>(&self, halo: &LayerHalo, buf: &DeviceBuffer<T>) -> Result<()> {
        self.start_at(halo, buf.addr(), buf.len(), std::mem::size_of::<T>())
    }

    /// [`start`](Self::start) on the array of `len` elements of `size` bytes at `base`.
    fn start_at(&self, halo: &LayerHalo, base: u64, len: usize, size: usize) -> Result<()> {
        self.check_layers(halo, len)?;
        self.start_exchange(base, &halo.sends, &halo.recvs, size)
    }

    fn check_layers(&self, halo: &LayerHalo, len: usize) -> Result<()> {
        match halo
            .sends
            .iter()
            .chain(&halo.recvs)
            .find(|(_, r)| r.end > len)
        {
            Some((_, r)) => Err(Error::InvalidSize(format!(
                "a halo layer (elements {r:?}) lies outside a field of {len}"
            ))),
            None => Ok(()),
        }
    }

    /// Runs `work` with the loops' kernels it queues on the exchange stream, after the work queued so
    /// far on the GPU's stream ([`Gpu::beside`]): a decomposed step's boundary layers, which then run
    /// beside the interior queued next on the GPU's stream, and before the exchange of what they
    /// wrote ([`start`](Self::start)); [`finish`](Self::finish) joins both back.
    pub fn beside<R, E: From<Error>>(
        &self,
        work: impl FnOnce() -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        self.side
            .join(self.gpu.stream())
            .cuda(|| "ordering a step's boundary after the work before it".into())?;
        self.gpu.beside(&self.side, work)
    }

    /// Makes the GPU's stream wait for the exchange [`start`](Self::start) queued (before the kernels
    /// that read the halos); the host does not wait.
    pub fn finish(&self) -> Result<()> {
        self.gpu
            .stream()
            .join(&self.side)
            .cuda(|| "waiting for a halo exchange on the GPU".into())
    }

    /// One NCCL group of sends and receives of element ranges (elements of `size` bytes) of the array
    /// at `base`, on `stream`.
    fn queue_exchange(
        &self,
        base: u64,
        sends: &[(usize, Range<usize>)],
        recvs: &[(usize, Range<usize>)],
        size: usize,
        stream: ns::cudaStream_t,
    ) -> Result<()> {
        bind(&self.gpu)?;
        let u8 = ns::ncclDataType_t::ncclUint8;
        let at = |r: &Range<usize>| (base + (r.start * size) as u64) as *mut core::ffi::c_void;
        group(|| {
            for (peer, r) in sends {
                // SAFETY: the range is inside the array (checked by the callers), on this device.
                unsafe { nc::send(at(r), r.len() * size, u8, *peer as i32, self.comm, stream) }
                    .map_err(failed("queueing a halo send"))?;
            }
            for (peer, r) in recvs {
                // SAFETY: as above.
                unsafe { nc::recv(at(r), r.len() * size, u8, *peer as i32, self.comm, stream) }
                    .map_err(failed("queueing a halo receive"))?;
            }
            Ok(())
        })
    }
}

/// The halo exchange of a plan split along one axis, as whole array layers (planes of a z split, rows
/// of a y split: contiguous), each face one NCCL send and one receive straight between the GPUs' arrays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerHalo {
    sends: Vec<(usize, Range<usize>)>,
    recvs: Vec<(usize, Range<usize>)>,
}

impl LayerHalo {
    /// For `plan` (one rank's [`halo_plan`](crate::decomp::Decomposition::halo_plan)), split along
    /// `axis` only, on an array of layers of `layer` values; `at` maps a plan coordinate along `axis`
    /// to its array layer. A received layer is written whole: its points outside the plan's regions
    /// get the sender's values there, which for the stencils here are the same walls.
    pub fn new<const D: usize>(
        plan: &[Face<D>],
        axis: usize,
        at: impl Fn(usize) -> usize,
        layer: usize,
    ) -> Result<Self> {
        if let Some(f) = plan.iter().find(|f| f.axis != axis) {
            return Err(Error::InvalidSetting(format!(
                "an NCCL layer exchange moves one split axis ({axis}); this plan also splits axis {}",
                f.axis
            )));
        }
        let span = |r: Region<D>| -> Vec<Range<usize>> {
            layers(std::iter::once(r), axis)
                .into_iter()
                .map(|l| at(l) * layer..(at(l) + 1) * layer)
                .collect()
        };
        // NCCL pairs the k-th send to a peer with the peer's k-th receive from this rank. What leaves
        // from the lower side arrives in the peer's upper margin, so sends go lower side first and
        // receives upper side first: two ranks on a periodic axis (each the other's neighbour on both
        // sides) then match.
        let lower_first = |f: &&Face<D>| f.side != Side::Lower;
        let mut faces: Vec<&Face<D>> = plan.iter().collect();
        faces.sort_by_key(lower_first);
        let sends = faces
            .iter()
            .flat_map(|f| span(f.send).into_iter().map(|r| (f.peer, r)))
            .collect();
        faces.reverse();
        let recvs = faces
            .iter()
            .flat_map(|f| span(f.recv).into_iter().map(|r| (f.peer, r)))
            .collect();
        Ok(Self { sends, recvs })
    }

    /// The same exchange on `copies` arrays laid `stride` elements apart in one buffer (the populations
    /// of a structure-of-arrays lattice), as one group. Copy by copy, in the same order on every rank,
    /// so that each rank's k-th send to a peer still meets that peer's k-th receive from it.
    pub fn repeated(&self, copies: usize, stride: usize) -> Self {
        let shift = |list: &[(usize, Range<usize>)]| -> Vec<(usize, Range<usize>)> {
            (0..copies)
                .flat_map(|k| {
                    list.iter()
                        .map(move |(p, r)| (*p, r.start + k * stride..r.end + k * stride))
                })
                .collect()
        };
        Self {
            sends: shift(&self.sends),
            recvs: shift(&self.recvs),
        }
    }
}

/// Runs `queue` (NCCL calls on several communicators) as one NCCL group: how one thread driving several
/// GPUs ([`Nccl::for_gpus`]) must issue a collective, since each rank's call waits for the others. The
/// group is closed even when queueing failed, so that NCCL stays usable.
pub fn group<R>(queue: impl FnOnce() -> Result<R>) -> Result<R> {
    nc::group_start().map_err(failed("starting a group"))?;
    let queued = queue();
    let ended = nc::group_end().map_err(failed("issuing a group"));
    match (queued, ended) {
        (Ok(r), Ok(_)) => Ok(r),
        (Err(e), _) | (Ok(_), Err(e)) => Err(e),
    }
}

/// The environment variable that bounds NCCL's set-up, in seconds.
pub const SETUP_TIMEOUT_VAR: &str = "LATTICE_NCCL_TIMEOUT";

/// How long a rank waits for the others to join its communicator: [`SETUP_TIMEOUT_VAR`] seconds, or
/// two minutes (every rank has just met in the host's gather, so only NCCL's own set-up is waited for).
fn setup_timeout() -> Result<Duration> {
    match std::env::var(SETUP_TIMEOUT_VAR) {
        Err(_) => Ok(Duration::from_secs(120)),
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(s) if s > 0.0 && s.is_finite() => Ok(Duration::from_secs_f64(s)),
            _ => Err(Error::Comm(format!(
                "{SETUP_TIMEOUT_VAR}={v:?} is not a time-out: give a positive number of seconds"
            ))),
        },
    }
}

/// Joins the communicator of `uid` as `rank` of `size` on `gpu`, or fails after `timeout`: NCCL's
/// set-up waits for ever for a rank that failed before joining (a thread of `--gpus` whose GPU
/// refused, a process that died without MPI aborting the others), so it runs on a thread of its own
/// and this rank stops waiting. That thread stays blocked in NCCL until the process ends, which an
/// error here is meant to lead to.
fn join(
    gpu: &Arc<Gpu>,
    uid: ns::ncclUniqueId,
    size: usize,
    rank: usize,
    timeout: Duration,
) -> Result<ns::ncclComm_t> {
    /// The communicator as an address, to cross threads.
    struct Made(std::result::Result<usize, Error>);
    let (tx, rx) = mpsc::channel();
    let context = gpu.clone();
    std::thread::Builder::new()
        .name(format!("nccl-setup-{rank}"))
        .spawn(move || {
            let made = bind(&context).and_then(|()| {
                let mut comm = std::ptr::null_mut();
                // SAFETY: `comm` receives the new communicator; every rank passes the same id and size.
                unsafe { nc::comm_init_rank(&mut comm, size as i32, uid, rank as i32) }
                    .map_err(failed("joining the communicator"))?;
                Ok(comm as usize)
            });
            let _ = tx.send(Made(made));
        })
        .map_err(|e| Error::Comm(format!("starting NCCL's set-up thread: {e}")))?;
    match rx.recv_timeout(timeout) {
        Ok(Made(made)) => {
            bind(gpu)?;
            Ok(made? as ns::ncclComm_t)
        }
        Err(mpsc::RecvTimeoutError::Timeout) => Err(Error::Comm(format!(
            "rank {rank} of {size} waited {:.0} s for the other ranks to join NCCL's communicator: \
             another rank failed or never started (its error comes first), or NCCL cannot connect \
             the nodes (check NCCL_SOCKET_IFNAME; NCCL_DEBUG=INFO says more); {SETUP_TIMEOUT_VAR} \
             sets the wait in seconds",
            timeout.as_secs_f64()
        ))),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(Error::Comm(
            "NCCL's set-up thread ended without a communicator".into(),
        )),
    }
}

fn raw(stream: &CudaStream) -> ns::cudaStream_t {
    stream.cu_stream() as ns::cudaStream_t
}

/// The exchange stream, at the device's greatest priority: its NCCL kernels need a few SMs while the
/// interior kernel queued next fills all of them, and a stream of equal priority would get them only as
/// the interior's last wave drains, leaving the exchange unhidden.
fn side_stream(gpu: &Gpu) -> Result<Arc<CudaStream>> {
    bind(gpu)?;
    let (_, greatest) = cudarc::driver::result::stream::get_priority_range()
        .cuda(|| "reading the stream priorities".into())?;
    gpu.context()
        .new_stream_with_priority(greatest)
        .cuda(|| "creating the halo exchange stream".into())
}

fn bind(gpu: &Gpu) -> Result<()> {
    gpu.context()
        .bind_to_thread()
        .cuda(|| "binding the GPU's context for NCCL".into())
}

impl Drop for Nccl {
    fn drop(&mut self) {
        // SAFETY: the communicator was made by NCCL and is destroyed once; failure leaves only a leak.
        let _ = unsafe { nc::comm_destroy(self.comm) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decomp::Decomposition;

    /// Runs every rank's `halos` on `arrays` as NCCL pairs them: rank r's k-th send to p fills p's k-th
    /// receive from r.
    fn pair(halos: &[LayerHalo], arrays: &mut [Vec<u32>]) {
        let before = arrays.to_vec();
        for (r, h) in halos.iter().enumerate() {
            for p in 0..halos.len() {
                let sent = h.sends.iter().filter(|s| s.0 == p);
                let got = halos[p].recvs.iter().filter(|q| q.0 == r);
                assert_eq!(sent.clone().count(), got.clone().count(), "{r} -> {p}");
                for ((_, s), (_, q)) in sent.zip(got) {
                    assert_eq!(s.len(), q.len(), "{r} -> {p}: {s:?} into {q:?}");
                    arrays[p][q.clone()].copy_from_slice(&before[r][s.clone()]);
                }
            }
        }
    }

    #[test]
    fn repeated_layers_meet_their_receives_copy_by_copy() {
        // A periodic z split of 4 x 3 x nz over 2 and 3 ranks, one margin plane per side, and 5 copies
        // (populations) of each rank's array: every margin plane of every copy must receive the plane
        // of the same copy that it stands for, and nothing else may change.
        let (plane, copies) = (12, 5);
        for (nz, ranks) in [(6, 2), (7, 3)] {
            let d = Decomposition::new([4, 3, nz], [1, 1, ranks], [0, 0, 1], [true; 3]).unwrap();
            let owned: Vec<_> = (0..ranks).map(|r| d.owned(r)).collect();
            let len = |r: usize| (owned[r].size[2] + 2) * plane;
            let halos: Vec<LayerHalo> = (0..ranks)
                .map(|r| {
                    let h = LayerHalo::new(&d.halo_plan(r), 2, |l| l, plane).unwrap();
                    h.repeated(copies, len(r))
                })
                .collect();
            // Copy k, global plane z, point i: a value that names all three; margins poisoned.
            let value = |k: usize, z: usize, i: usize| (k * 1000 + z * 100 + i) as u32;
            let mut arrays: Vec<Vec<u32>> = (0..ranks)
                .map(|r| {
                    let (z0, n) = (owned[r].begin[2], owned[r].size[2]);
                    (0..copies * len(r))
                        .map(|e| {
                            let (k, lz, i) = (e / len(r), e % len(r) / plane, e % plane);
                            if lz == 0 || lz == n + 1 {
                                u32::MAX
                            } else {
                                value(k, z0 + lz - 1, i)
                            }
                        })
                        .collect()
                })
                .collect();
            pair(&halos, &mut arrays);
            for r in 0..ranks {
                let z0 = owned[r].begin[2];
                for (e, &v) in arrays[r].iter().enumerate() {
                    let (k, lz, i) = (e / len(r), e % len(r) / plane, e % plane);
                    let z = (z0 + nz + lz - 1) % nz;
                    assert_eq!(
                        v,
                        value(k, z, i),
                        "rank {r} of {ranks}, copy {k}, plane {lz}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_missing_library_says_how_to_install_it() {
        // Where NCCL is installed there is nothing to check; where it is not (CI), the error must name
        // the library and the ways to install it.
        if let Err(e) = check_library() {
            let msg = e.to_string();
            for part in [
                "libnccl.so.2",
                "apt install libnccl2",
                "pip install nvidia-nccl-cu12",
            ] {
                assert!(msg.contains(part), "{msg}");
            }
        }
    }
}
