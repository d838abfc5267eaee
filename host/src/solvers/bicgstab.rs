//! BiCGStab on the GPU with its scalars in device memory, and the ways of hiding CUDA launch overhead
//! that Doi's strong-scaling paper compares (see [`OverheadHiding`]).
//!
//! The solver works on any [`DeviceOperator`] (complex vectors of `len()` elements). One iteration queues
//! two operator applications and five vector kernels, three of them reductions whose last block to finish
//! also updates the scalars (no separate finishing kernels, whose launches and gaps dominate small
//! lattices); the scalars
//! (`rho`, `alpha`, `omega`, `beta`) never leave the GPU except in the `sync` variant. Once the device
//! state says the solve stopped (converged, limit, breakdown), every queued kernel returns at once, so
//! iterations queued past convergence cost only their launches and never change the answer: all variants
//! take the same iterations. On one rank of an operator split over GPUs ([`DeviceOperator::ranks`]) each
//! reduction's last block writes the rank's sums instead, which are summed over the ranks (NCCL on the
//! stream, or through the host) before a one-thread kernel (or, for `sync`, the host) applies the stage.
//!
//! The same state machine runs conjugate gradients on the normal equations ([`Krylov::CgNormal`], for
//! CGNR: `A` and [`DeviceOperator::apply_dagger`] per iteration, three vector kernels, never fused),
//! and stops at reliable-update targets ([`BiCgState::reliable`]): a solve is started, run until the
//! device stops (`run_segment`), and after the host has swapped in a recomputed residual, resumed
//! where it stopped ([`reliable`](super::reliable) drives this for mixed precision).

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::sync::{mpsc, Arc};
use std::time::Instant;

use cudarc::driver::{result as cu, sys, CudaEvent, CudaGraph, CudaStream};
use lattice_gpu_kernels::bicgstab::{
    BiCgState, Blas, Finish, Op, Signal, Stage, Sums, BREAKDOWN_OMEGA, BREAKDOWN_PAP,
    BREAKDOWN_R0V, BREAKDOWN_RHO, CONVERGED, HOST_FINISHES, MAX_ITER, RUNNING, TARGET, TOTALS,
};
use lattice_gpu_kernels::bind::{Span, SpanMut};
use lattice_gpu_kernels::complex::Complex;
use lattice_gpu_kernels::device::grid::{BarrierRun, GridBarrier};
use lattice_gpu_kernels::solver_store::SolverStore;

use crate::buffer::{DeviceBuffer, Plain};
use crate::engine::tunecache::TuneCache;
use crate::engine::tuner::{param, tune, Params, Trials, Tunable, Tuned, BLOCK as BLOCK_PARAM};
use crate::engine::Cost;
use crate::error::{CudaContext, Error, Result};
use crate::gpu::Gpu;
use crate::split::DeviceRanks;

/// A linear operator on complex vectors in GPU memory, stored as [`SolverStore`] `T` says (f32 or f64
/// complex arrays, or 16-bit Wilson spinors).
pub trait DeviceOperator<T: SolverStore> {
    /// Complex slots of the vectors it acts on (a 16-bit spinor site's norm takes one).
    fn len(&self) -> usize;
    /// Complex slots each vector is allocated with: `len()` and the room the operator keeps after
    /// them (the ghost sites of a split lattice).
    fn storage_len(&self) -> usize {
        self.len()
    }
    /// On one rank of an operator split over GPUs: the ranks, over which every reduction is summed.
    fn ranks(&self) -> Option<&dyn DeviceRanks<T::Elem>> {
        None
    }
    /// Whether the vectors are empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Queues `out = A inp` on the GPU's stream. When `halt` is given and the `u32` there is non-zero
    /// when the kernels run, they must do nothing (the solve has stopped).
    fn apply(
        &self,
        out: &DeviceBuffer<T::Elem>,
        inp: &DeviceBuffer<T::Elem>,
        halt: Option<Span<'_, u32>>,
    ) -> Result<()>;
    /// Queues `out = A^dag inp` (the adjoint), as [`apply`](Self::apply) queues `A inp`: what CGNR
    /// ([`Krylov::CgNormal`]) needs. The default is an error saying this operator has none.
    fn apply_dagger(
        &self,
        out: &DeviceBuffer<T::Elem>,
        inp: &DeviceBuffer<T::Elem>,
        halt: Option<Span<'_, u32>>,
    ) -> Result<()> {
        let _ = (out, inp, halt);
        Err(Error::InvalidSetting(
            "this operator has no adjoint (DeviceOperator::apply_dagger), which CGNR needs; \
             solve with BiCGStab instead, or implement apply_dagger for it"
                .into(),
        ))
    }
    /// Floating-point operations of one application (for GFLOPS).
    fn flops(&self) -> u64;
    /// Queues one whole BiCGStab iteration on `f` as a single kernel, if this operator has one (its
    /// hopping terms, vector updates and reductions separated by grid barriers); `Ok(false)` if it has
    /// none, and the solver queues the separate kernels.
    fn queue_fused_iteration(&self, f: FusedVectors<'_, T::Elem>) -> Result<bool> {
        let _ = f;
        Ok(false)
    }
    /// Whether the fused iteration is the faster form here ([`Fusion::Auto`]): `false` for an operator
    /// without one.
    fn fused_pays(&self) -> Result<bool> {
        Ok(false)
    }
}

/// Whether the solver runs each iteration as one kernel ([`DeviceOperator::queue_fused_iteration`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fusion {
    /// The separate kernels.
    Off,
    /// One kernel, where the operator has one.
    On,
    /// One kernel where the operator says it pays ([`DeviceOperator::fused_pays`]).
    Auto,
}

impl FromStr for Fusion {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "off" => Ok(Fusion::Off),
            "on" => Ok(Fusion::On),
            "auto" => Ok(Fusion::Auto),
            _ => Err(format!("unknown fusion `{s}`; use auto, on or off")),
        }
    }
}

/// The Krylov recurrence a [`BiCgStab`] runs on its operator `A` (the state machine, the overhead
/// hiding and the split sums are the same for both).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Krylov {
    /// BiCGStab on `A x = b`.
    BiCgStab,
    /// Conjugate gradients on the normal equations `A^dag A x = b` (the caller passes `A^dag b'` as
    /// `b` for CGNR): each iteration applies `A` and [`DeviceOperator::apply_dagger`]; never fused.
    CgNormal,
}

/// What a fused iteration ([`DeviceOperator::queue_fused_iteration`]) works on: the solver's vectors,
/// its state, room for `8 * blocks` partial sums and a grid barrier (one word).
pub struct FusedVectors<'a, T> {
    /// `x, r, r0, p, v, s, t`.
    pub vectors: [&'a DeviceBuffer<T>; 7],
    /// The solver state.
    pub state: SpanMut<'a, BiCgState>,
    /// Partial sums.
    pub partials: &'a DeviceBuffer<f64>,
    /// The grid barrier's word.
    pub barrier: &'a DeviceBuffer<u32>,
}

/// How the host drives the iterations, hiding the CUDA launch and synchronisation overhead or not: the
/// ways Doi's paper compares, from none (`Sync`) to a queue the GPU never waits on (`WaitKernel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OverheadHiding {
    /// Every dot product is copied to the host, which computes the scalars and launches the next kernels.
    Sync,
    /// Scalars stay on the device; the host only reads the state every few iterations through pinned
    /// memory, polling an event, never blocking the stream (a split solve's ranks read a block once
    /// the next is queued, all alike, so that they stop together).
    Async,
    /// As `Async`, with each block of iterations captured once as a CUDA graph and replayed.
    Graph,
    /// Doi's mechanism: a one-thread wait kernel holds each block of iterations until a helper host thread
    /// launches a stop kernel on a second stream, so the queue fills before the GPU starts on it.
    WaitKernel,
    /// The same with driver stream memory operations (`cuStreamWaitValue32` / `cuStreamWriteValue32`).
    StreamWait,
}

impl OverheadHiding {
    /// Every variant, in the order benchmarks print them.
    pub const ALL: [OverheadHiding; 5] = [
        OverheadHiding::Sync,
        OverheadHiding::Async,
        OverheadHiding::Graph,
        OverheadHiding::WaitKernel,
        OverheadHiding::StreamWait,
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            OverheadHiding::Sync => "sync",
            OverheadHiding::Async => "async",
            OverheadHiding::Graph => "graph",
            OverheadHiding::WaitKernel => "waitkernel",
            OverheadHiding::StreamWait => "streamwait",
        }
    }
}

impl fmt::Display for OverheadHiding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OverheadHiding {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown solver variant `{s}`; use one of {}",
                    Self::ALL.map(|v| v.name()).join(", ")
                )
            })
    }
}

/// Options of one solve.
#[derive(Clone, Copy, Debug)]
pub struct SolveOptions {
    /// Stop when `|r| <= tol |b|`.
    pub tol: f64,
    /// Iteration limit.
    pub max_iter: u32,
    /// How the host drives the GPU.
    pub variant: OverheadHiding,
    /// Iterations between residual reads (all variants but `sync`, which sees every iteration).
    pub check_every: u32,
    /// All variants but `sync`: each iteration as one kernel where the operator has one
    /// ([`DeviceOperator::queue_fused_iteration`]).
    pub fused: Fusion,
}

/// How a solve ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SolveStatus {
    /// The residual reached the tolerance.
    Converged,
    /// The iteration limit was reached first.
    MaxIter,
    /// A recurrence denominator vanished; names it.
    Breakdown(&'static str),
}

/// What a solve did.
#[derive(Clone, Debug)]
pub struct SolveReport {
    /// How it ended.
    pub status: SolveStatus,
    /// Iterations completed.
    pub iterations: u32,
    /// The solver's relative residual `|r| / |b|` (the recurrence's, not recomputed).
    pub residual: f64,
    /// (iteration, relative residual) at every check.
    pub history: Vec<(usize, f64)>,
    /// Wall-clock seconds from the first queued kernel to the final synchronisation.
    pub seconds: f64,
    /// Whether each iteration ran as one kernel ([`SolveOptions::fused`]).
    pub fused: bool,
}

/// The vector kernels' launch until tuned ([`BiCgStab::tune_vectors`]): blocks of 256 threads, four a
/// multiprocessor.
pub(crate) const BLOCK: u32 = 256;
pub(crate) const WAVES: u32 = 4;
/// The tuner's candidates: threads per block, and blocks per multiprocessor (the grid strides over the
/// vectors; each block adds one partial sum for the last one to add up).
const TUNE_BLOCKS: [u32; 4] = [128, 256, 512, 1024];
const TUNE_WAVES: [u32; 4] = [1, 2, 4, 8];
/// The tuner's name of the blocks per multiprocessor.
const WAVES_PARAM: &str = "waves";
pub(crate) const STATE_WORDS: usize = std::mem::size_of::<BiCgState>().div_ceil(8);
const SLOTS: usize = 2;
/// Iterations (about ten launches each) that may wait behind one wait kernel: far below the driver's
/// queue of pending launches, which would otherwise fill and block the host while the GPU waits for it.
pub const MAX_HELD_ITERATIONS: u32 = 32;

/// Pinned host memory the GPU copies the state into, read by the host once an event says it arrived.
struct Pinned(*mut u64);

impl Pinned {
    fn new() -> Result<Self> {
        // SAFETY: a plain page-locked allocation, freed in `drop`. Not write-combined: the host reads it.
        let p = unsafe { cu::malloc_host(STATE_WORDS * 8, sys::CU_MEMHOSTALLOC_PORTABLE) }
            .cuda(|| "allocating pinned host memory".into())?;
        Ok(Self(p as *mut u64))
    }

    fn read(&self) -> BiCgState {
        // SAFETY: STATE_WORDS * 8 >= size_of::<BiCgState>() bytes, written by a completed copy.
        unsafe { std::ptr::read_unaligned(self.0 as *const BiCgState) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated by `malloc_host` and no copy into it is pending (the solve synchronised).
        let _ = unsafe { cu::free_host(self.0 as *mut std::ffi::c_void) };
    }
}

/// The `u32` the wait kernel or `cuStreamWaitValue32` watches, from plain `cuMemAlloc`: stream memory
/// operations refuse memory from the stream-ordered pool that [`DeviceBuffer`] allocates from.
struct Flag(sys::CUdeviceptr);

impl Flag {
    fn new() -> Result<Self> {
        // SAFETY: a 4-byte allocation, freed in `drop`, cleared before any wait reads it.
        let p = unsafe { cu::malloc_sync(4) }.cuda(|| "allocating the release flag".into())?;
        // SAFETY: the 4 bytes just allocated.
        unsafe { cu::memset_d8_sync(p, 0, 4) }.cuda(|| "clearing the release flag".into())?;
        Ok(Self(p))
    }

    fn ptr(&self) -> *mut u32 {
        self.0 as *mut u32
    }
}

impl Drop for Flag {
    fn drop(&mut self) {
        // SAFETY: allocated by `malloc_sync`; the solve that used it has synchronised.
        let _ = unsafe { cu::free_sync(self.0) };
    }
}

/// BiCGStab for one operator: owns the work vectors, the device state and (for `graph`) the captured
/// graphs, which are reused by later solves with the same `check_every` and [`SolveOptions::fused`].
pub struct BiCgStab<T: SolverStore, O> {
    /// First, so that they go before the operator: NCCL does not free a communicator while a graph
    /// holding its kernels exists (a split operator's halos and sums), and would wait for ever.
    graphs: Option<((u32, bool), Vec<CudaGraph>)>,
    gpu: Arc<Gpu>,
    op: O,
    x: DeviceBuffer<T::Elem>,
    r: DeviceBuffer<T::Elem>,
    r0: DeviceBuffer<T::Elem>,
    p: DeviceBuffer<T::Elem>,
    v: DeviceBuffer<T::Elem>,
    s: DeviceBuffer<T::Elem>,
    t: DeviceBuffer<T::Elem>,
    state: DeviceBuffer<u64>,
    partials: DeviceBuffer<f64>,
    /// A split solve's four sums of one reduction, summed over the ranks.
    sums: DeviceBuffer<f64>,
    done: DeviceBuffer<u32>,
    flag: Flag,
    /// The flag's value after every release queued so far. It only grows (wrapping; the waits compare
    /// cyclically): clearing it on the stream instead would race with a release already on its way.
    released: u32,
    /// The vector kernels' threads per block and blocks.
    block: u32,
    blocks: u32,
    pinned: Vec<Pinned>,
    events: Vec<CudaEvent>,
    /// The current solve's [`SolveOptions::fused`].
    fused: bool,
    /// The recurrence ([`set_krylov`](Self::set_krylov)).
    krylov: Krylov,
    /// The fused iteration's partial sums (two halves of up to `4 * SMs` blocks) and grid barrier.
    fused_partials: DeviceBuffer<f64>,
    barrier: DeviceBuffer<u32>,
}

impl<T: SolverPrecision, O: DeviceOperator<T>> BiCgStab<T, O> {
    /// Work space for solving with `op`. Checks the memory first.
    pub fn new(gpu: &Arc<Gpu>, op: O) -> Result<Self> {
        let reals = 2 * op.storage_len();
        gpu.check_fits(
            8 * reals as u64 * std::mem::size_of::<T::Elem>() as u64,
            "the BiCGStab work vectors",
        )?;
        let vec = || DeviceBuffer::<T::Elem>::zeros(gpu, reals);
        let ctx = gpu.context();
        let events = (0..SLOTS)
            .map(|_| {
                ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
                    .cuda(|| "creating an event".into())
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            x: vec()?,
            r: vec()?,
            r0: vec()?,
            p: vec()?,
            v: vec()?,
            s: vec()?,
            t: vec()?,
            state: DeviceBuffer::zeros(gpu, STATE_WORDS)?,
            partials: DeviceBuffer::zeros(gpu, 4 * Self::most_blocks(gpu) as usize)?,
            sums: DeviceBuffer::zeros(gpu, 4)?,
            done: DeviceBuffer::zeros(gpu, 1)?,
            flag: Flag::new()?,
            released: 0,
            block: BLOCK,
            blocks: grid(gpu, values::<T>(op.len()), BLOCK, WAVES),
            pinned: (0..SLOTS).map(|_| Pinned::new()).collect::<Result<_>>()?,
            events,
            graphs: None,
            fused: false,
            krylov: Krylov::BiCgStab,
            fused_partials: DeviceBuffer::zeros(gpu, 8 * 4 * gpu.sm_count() as usize)?,
            barrier: DeviceBuffer::zeros(gpu, 1)?,
            gpu: gpu.clone(),
            op,
        })
    }

    /// The most blocks a vector kernel is launched with ([`TUNE_WAVES`]' largest).
    fn most_blocks(gpu: &Gpu) -> u32 {
        TUNE_WAVES.iter().max().unwrap_or(&WAVES) * gpu.sm_count()
    }

    /// The vector kernels' (threads per block, blocks).
    pub fn vector_launch(&self) -> (u32, u32) {
        (self.block, self.blocks)
    }

    /// Sets the vector kernels' threads per block and blocks: the tune cache's for this vector length
    /// and precision on this GPU, else the fastest of timing one iteration's vector kernels (about 2 ms
    /// of calls a candidate) with each, stored in `cache`. It runs them on the solver's work vectors:
    /// call it before a solve (which sets them up again), not between.
    pub fn tune_vectors(&mut self, cache: &mut TuneCache, retune: bool) -> Result<Option<Tuned>> {
        let gpu = self.gpu.clone();
        let build = (gpu.name(), gpu.module_hash(lattice_gpu_kernels::MODULE)?);
        // A running state, so that the kernels are not skipped; a solve writes its own.
        self.write_state(&BiCgState::new(0.5, 1))?;
        let mut launch = VectorLaunch(self);
        launch.time_ms(1)?;
        let once = launch.time_ms(1)?.max(1e-3);
        let trials = Trials {
            rounds: 2,
            settle: 2,
            timed: ((2.0 / once) as u64).clamp(5, 1000),
        };
        tune(&mut launch, cache, build, retune, true, trials)
    }

    /// The operator.
    pub fn operator(&self) -> &O {
        &self.op
    }

    /// Gives the operator back.
    pub fn into_operator(self) -> O {
        self.op
    }

    /// Chooses the recurrence of later solves (BiCGStab unless set).
    pub fn set_krylov(&mut self, krylov: Krylov) {
        if krylov != self.krylov {
            // Captured with the other recurrence's kernels.
            self.graphs = None;
            self.krylov = krylov;
        }
    }

    /// The recurrence solves run.
    pub fn krylov(&self) -> Krylov {
        self.krylov
    }

    /// Whether the current (or last) solve runs each iteration as one kernel.
    pub(crate) fn fused_now(&self) -> bool {
        self.fused
    }

    /// The GPU this solver runs on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Solves `A x = b` from `x = 0`, writing `x`. `on_check(iteration, relative residual)` is called at
    /// every residual read, for progress output and to stop: an error it returns ends the solve there
    /// (after the GPU finishes the iterations already queued) and is returned. On a split solve every
    /// rank calls it after the same iterations, so it may decide collectively (e.g.
    /// [`Verdict::agree`](crate::health::Verdict::agree) for a signal).
    pub fn solve(
        &mut self,
        b: &DeviceBuffer<T::Elem>,
        x: &mut DeviceBuffer<T::Elem>,
        opt: &SolveOptions,
        on_check: &mut dyn FnMut(usize, f64) -> Result<()>,
    ) -> Result<SolveReport> {
        self.check_options(opt)?;
        let start = Instant::now();
        let st = self.start(b, opt, BiCgState::new(opt.tol, opt.max_iter))?;
        let mut history = Vec::new();
        if opt.variant == OverheadHiding::Sync {
            history.push((0, 1.0));
        }
        let st = self.run_segment(opt, st, &mut history, on_check)?;
        let seconds = start.elapsed().as_secs_f64();
        x.copy_from(&self.x)?;
        let status = status_of(&st)?;
        let residual = if st.bb > 0.0 {
            (st.rr / st.bb).sqrt()
        } else {
            0.0
        };
        if history.last().map(|h| h.0) != Some(st.iterations as usize) {
            history.push((st.iterations as usize, residual));
        }
        Ok(SolveReport {
            status,
            iterations: st.iterations,
            residual,
            history,
            seconds,
            fused: self.fused,
        })
    }

    /// Refuses options no solve can run with.
    pub(crate) fn check_options(&self, opt: &SolveOptions) -> Result<()> {
        if !(opt.tol > 0.0 && opt.tol < 1.0) || opt.max_iter == 0 || opt.check_every == 0 {
            return Err(Error::InvalidSetting(format!(
                "solver options tol = {}, max_iter = {}, check_every = {}: need 0 < tol < 1 and positive counts",
                opt.tol, opt.max_iter, opt.check_every
            )));
        }
        if let Some(ranks) = self.op.ranks() {
            if ranks.waits_for_gpu()
                && !matches!(opt.variant, OverheadHiding::Sync | OverheadHiding::Async)
            {
                return Err(Error::InvalidSetting(format!(
                    "the {} variant queues iterations ahead of the GPU, which halos staged through \
                     host memory cannot (each exchange waits for the GPU); exchange through NCCL \
                     (--halos nccl), or use the sync or async variant",
                    opt.variant
                )));
            }
        }
        if matches!(
            opt.variant,
            OverheadHiding::WaitKernel | OverheadHiding::StreamWait
        ) && opt.check_every > MAX_HELD_ITERATIONS
        {
            return Err(Error::InvalidSetting(format!(
                "check_every = {} with the {} variant would hold more launches behind one wait than the driver queues; use at most {MAX_HELD_ITERATIONS}",
                opt.check_every, opt.variant
            )));
        }
        Ok(())
    }

    /// Runs the iterations the variant's way from state `st` (as [`start`](Self::start) or
    /// [`resume`](Self::resume) left it) until the device state says the solve stopped: converged, a
    /// reliable-update [`TARGET`], the limit, a breakdown. Returns the final state, the GPU finished.
    pub(crate) fn run_segment(
        &mut self,
        opt: &SolveOptions,
        mut st: BiCgState,
        history: &mut Vec<(usize, f64)>,
        on_check: &mut dyn FnMut(usize, f64) -> Result<()>,
    ) -> Result<BiCgState> {
        if opt.variant == OverheadHiding::Sync {
            while st.status == RUNNING {
                self.iteration(Some(&mut st))?;
                let rel = (st.rr / st.bb).sqrt();
                if st.iterations.is_multiple_of(opt.check_every) || st.status != RUNNING {
                    history.push((st.iterations as usize, rel));
                    on_check(st.iterations as usize, rel)?;
                }
            }
        } else if st.status == RUNNING {
            st = self.pipelined(opt, st.iterations, history, on_check)?;
        }
        self.gpu.synchronize()?;
        Ok(st)
    }

    /// Continues a solve that stopped at a reliable-update [`TARGET`] with state `st` (its status set
    /// back to running, its `rr` and `max_rr` to the swapped-in residual's): writes it and queues the
    /// direction update the stop skipped, with the new residual in place (`iterate_and_residual`).
    /// For CG the direction is first made orthogonal to the new residual ([`Op::CgOrth`], `omega`
    /// set in `st` here), which the recurrence keeps and a swapped-in residual breaks.
    pub(crate) fn resume(&mut self, st: &mut BiCgState) -> Result<()> {
        match self.krylov {
            Krylov::BiCgStab => {
                self.write_state(st)?;
                self.blas(Op::P, &[&self.p, &self.r, &self.v], HOST_FINISHES)
            }
            Krylov::CgNormal => {
                let rp = self.sums(Op::Dot, [&self.r, &self.p])?;
                st.omega = super::reliable::orthogonalizing(Complex::new(rp[0], rp[1]), st.rr);
                self.write_state(st)?;
                self.blas(Op::CgOrth, &[&self.p, &self.r], HOST_FINISHES)?;
                self.blas(Op::CgP, &[&self.p, &self.r], HOST_FINISHES)
            }
        }
    }

    /// Starts the recurrence afresh from the residual in place (`r0 = p = r`),
    /// keeping the iterate and the count: for a stop whose next scalars were not computed. `st.rho`
    /// must be that residual's `|r|^2`.
    pub(crate) fn restart(&mut self, st: &BiCgState) -> Result<()> {
        self.r0.copy_from(&self.r)?;
        self.p.copy_from(&self.r)?;
        self.write_state(st)
    }

    /// The iterate and the residual vectors (for a reliable update: the host accumulates `x` into its
    /// own, zeroes it, and writes a recomputed residual into `r`).
    pub(crate) fn iterate_and_residual(
        &mut self,
    ) -> (&mut DeviceBuffer<T::Elem>, &mut DeviceBuffer<T::Elem>) {
        (&mut self.x, &mut self.r)
    }

    /// Resets the work vectors for `b` (x = 0, r = r0 = p = b), writes state `st` (a fresh one:
    /// [`BiCgState::new`] or [`BiCgState::reliable`]) and queues `<b, b>` and the `Init` stage (on the
    /// host for `sync`, which then waits for it).
    pub(crate) fn start(
        &mut self,
        b: &DeviceBuffer<T::Elem>,
        opt: &SolveOptions,
        mut st: BiCgState,
    ) -> Result<BiCgState> {
        // A split operator's iteration has exchanges and sums over the ranks between its kernels;
        // conjugate gradients has no one-kernel form.
        self.fused = opt.variant != OverheadHiding::Sync
            && self.krylov == Krylov::BiCgStab
            && self.op.ranks().is_none()
            && match opt.fused {
                Fusion::Off => false,
                Fusion::On => true,
                Fusion::Auto => self.op.fused_pays()?,
            };
        if self.krylov == Krylov::CgNormal {
            // Once outside any graph capture: the operator's first adjoint may allocate scratch.
            self.op.apply_dagger(&self.t, &self.p, None)?;
        }
        self.write_state(&st)?;
        self.done.zero()?;
        self.x.zero()?;
        self.r.copy_from(b)?;
        self.r0.copy_from(b)?;
        self.p.copy_from(b)?;
        let mut host = (opt.variant == OverheadHiding::Sync).then_some(&mut st);
        self.reduce(&mut host, Op::Dot, &[&self.r0, &self.r0], Stage::Init)?;
        Ok(st)
    }

    /// Milliseconds of GPU time per iteration when the GPU never waits for the host: `iterations`
    /// (at most 32) are queued behind a wait kernel and released at once, so the time between the events
    /// around them is the kernels' own time plus the GPU's gaps between them, free of launch overhead.
    pub fn kernel_ms_per_iteration(
        &mut self,
        b: &DeviceBuffer<T::Elem>,
        iterations: u32,
        fused: bool,
    ) -> Result<f64> {
        let n = iterations.clamp(1, MAX_HELD_ITERATIONS);
        let opt = SolveOptions {
            tol: f64::MIN_POSITIVE,
            max_iter: n + 1,
            variant: OverheadHiding::Async,
            check_every: n,
            fused: if fused { Fusion::On } else { Fusion::Off },
        };
        self.start(b, &opt, BiCgState::new(opt.tol, opt.max_iter))?;
        self.released = self.released.wrapping_add(1);
        let sig = Signal {
            flag: self.flag.ptr(),
            value: self.released,
        };
        let gpu = self.gpu.clone();
        let ms = time_held(&gpu, sig, || {
            for _ in 0..n {
                self.iteration(None)?;
            }
            Ok(())
        })?;
        Ok(ms / n as f64)
    }

    /// Queues blocks of `check_every` iterations the variant's way, reading the state of finished blocks
    /// without blocking the stream, until the state says the solve stopped.
    fn pipelined(
        &mut self,
        opt: &SolveOptions,
        done: u32,
        history: &mut Vec<(usize, f64)>,
        on_check: &mut dyn FnMut(usize, f64) -> Result<()>,
    ) -> Result<BiCgState> {
        let k = opt.check_every;
        let key = (k, self.fused);
        if opt.variant == OverheadHiding::Graph && self.graphs.as_ref().map(|g| g.0) != Some(key) {
            self.graphs = None;
            let graphs = (0..SLOTS)
                .map(|slot| self.capture(k, slot))
                .collect::<Result<Vec<_>>>()?;
            self.graphs = Some((key, graphs));
        }
        let helper = match opt.variant {
            OverheadHiding::WaitKernel | OverheadHiding::StreamWait => {
                Some(self.spawn_releaser(opt.variant)?)
            }
            _ => None,
        };
        // Ranks of a split solve must stop after the same block, for each block queues collective calls
        // (exchanges, sums): a rank may read a block early only if every rank does, so they read a
        // block only when both slots are taken, never as soon as its event happens to have passed.
        let poll = self.op.ranks().is_none();
        let mut pending: VecDeque<usize> = VecDeque::new();
        let mut block = 0u32;
        // The device stops itself at max_iter; one more block covers the iterations already queued.
        let blocks = opt.max_iter.saturating_sub(done).div_ceil(k) + 1;
        let result = (|| -> Result<()> {
            while block < blocks {
                // Read every block already done (on one rank), waiting only for the oldest when both
                // slots are taken.
                while let Some(&s) = pending.front() {
                    if pending.len() == SLOTS {
                        self.events[s]
                            .synchronize()
                            .cuda(|| "waiting for the solver (a kernel failed)".into())?;
                    } else if !poll
                        || !self.events[s]
                            .try_is_complete()
                            .cuda(|| "polling the solver (a kernel failed)".into())?
                    {
                        break;
                    }
                    pending.pop_front();
                    if self.consume(s, history, on_check)?.status != RUNNING {
                        return Ok(());
                    }
                }
                let slot = block as usize % SLOTS;
                let target = self.released.wrapping_add(1);
                self.queue_block(opt.variant, k, slot, target)?;
                if let Some((tx, _)) = &helper {
                    // The helper thread releases this block now that it is fully queued.
                    self.released = target;
                    let _ = tx.send(target);
                }
                pending.push_back(slot);
                block += 1;
            }
            Ok(())
        })();
        if let Some((tx, handle)) = helper {
            drop(tx);
            handle
                .join()
                .map_err(|_| Error::Internal("the release thread panicked".into()))??;
        }
        if result.is_err() {
            // The blocks already queued still run (and, split, still exchange): wait for them, so the
            // solver is idle and reusable when the error reaches the caller.
            let _ = self.gpu.synchronize();
        }
        result?;
        // Waits for the queued work: the state is final.
        self.read_state()
    }

    fn consume(
        &self,
        slot: usize,
        history: &mut Vec<(usize, f64)>,
        on_check: &mut dyn FnMut(usize, f64) -> Result<()>,
    ) -> Result<BiCgState> {
        let st = self.pinned[slot].read();
        if st.bb > 0.0 {
            let rel = (st.rr / st.bb).sqrt();
            if history.last().map(|h| h.0) != Some(st.iterations as usize) {
                history.push((st.iterations as usize, rel));
                on_check(st.iterations as usize, rel)?;
            }
        }
        Ok(st)
    }

    /// Queues one block: (a wait), `k` iterations (or their graph), the state copy to `slot`, its event.
    fn queue_block(
        &mut self,
        variant: OverheadHiding,
        k: u32,
        slot: usize,
        target: u32,
    ) -> Result<()> {
        let stream = self.gpu.stream().clone();
        match variant {
            OverheadHiding::WaitKernel => {
                let sig = Signal {
                    flag: self.flag.ptr(),
                    value: target,
                };
                // SAFETY: `wait_kernel` takes one `Signal`; the flag is a live device u32.
                unsafe { self.gpu.launch("wait_kernel", &sig, 1, 1)? };
            }
            OverheadHiding::StreamWait => {
                // SAFETY: the flag is a live device u32; GEQ (a cyclic comparison) waits until the helper writes
                // `target`.
                unsafe {
                    sys::cuStreamWaitValue32_v2(
                        stream.cu_stream(),
                        self.flag.0,
                        target,
                        sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
                    )
                }
                .result()
                .cuda(|| "queueing cuStreamWaitValue32".into())?;
            }
            _ => {}
        }
        if variant == OverheadHiding::Graph {
            let (_, graphs) = self.graphs.as_ref().expect("captured before the loop");
            graphs[slot]
                .launch()
                .cuda(|| "launching the solver graph".into())?;
        } else {
            for _ in 0..k {
                self.iteration(None)?;
            }
            self.copy_state(slot, &stream)?;
        }
        self.events[slot]
            .record(&stream)
            .cuda(|| "recording an event".into())
    }

    fn capture(&mut self, k: u32, slot: usize) -> Result<CudaGraph> {
        let stream = self.gpu.stream().clone();
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .cuda(|| "starting a graph capture".into())?;
        let queued = (|| {
            for _ in 0..k {
                self.iteration(None)?;
            }
            self.copy_state(slot, &stream)
        })();
        let graph = stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .cuda(|| "capturing the solver graph".into());
        queued?;
        let graph = graph?
            .ok_or_else(|| Error::Internal("the solver graph capture recorded nothing".into()))?;
        graph
            .upload()
            .cuda(|| "uploading the solver graph".into())?;
        Ok(graph)
    }

    /// A host thread that raises the flag to each block number it receives: a stop kernel on its own
    /// stream, or `cuStreamWriteValue32`.
    #[allow(clippy::type_complexity)]
    fn spawn_releaser(
        &self,
        variant: OverheadHiding,
    ) -> Result<(mpsc::Sender<u32>, std::thread::JoinHandle<Result<()>>)> {
        let stream: Arc<CudaStream> = self
            .gpu
            .context()
            .new_stream()
            .cuda(|| "creating the release stream".into())?;
        let (tx, rx) = mpsc::channel::<u32>();
        let gpu = self.gpu.clone();
        let flag = self.flag.0;
        let handle = std::thread::spawn(move || -> Result<()> {
            gpu.context()
                .bind_to_thread()
                .cuda(|| "binding the context to the release thread".into())?;
            for value in rx {
                if variant == OverheadHiding::WaitKernel {
                    let sig = Signal {
                        flag: flag as *mut u32,
                        value,
                    };
                    // SAFETY: `stop_kernel` takes one `Signal`; the flag outlives the solve.
                    unsafe { gpu.launch_on(&stream, "stop_kernel", &sig, 1, 1)? };
                } else {
                    // SAFETY: as above, through the driver's stream memory operation.
                    unsafe {
                        sys::cuStreamWriteValue32_v2(
                            stream.cu_stream(),
                            flag,
                            value,
                            sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32,
                        )
                    }
                    .result()
                    .cuda(|| "queueing cuStreamWriteValue32".into())?;
                }
            }
            stream
                .synchronize()
                .cuda(|| "finishing the release stream".into())
        });
        Ok((tx, handle))
    }

    /// Queues one iteration. With `host = Some(state)` (the `sync` variant) the scalars are computed on the
    /// host from dot products copied back after each reduction.
    fn iteration(&mut self, mut host: Option<&mut BiCgState>) -> Result<()> {
        if host.is_none() && self.fused {
            let f = FusedVectors {
                vectors: [
                    &self.x, &self.r, &self.r0, &self.p, &self.v, &self.s, &self.t,
                ],
                state: self.state_span(),
                partials: &self.fused_partials,
                barrier: &self.barrier,
            };
            if self.op.queue_fused_iteration(f)? {
                return Ok(());
            }
        }
        let halt = self.halt();
        if self.krylov == Krylov::CgNormal {
            // v = A p, t = A^dag v; alpha = |r|^2 / |v|^2; x += alpha p, r -= alpha t; p = r + beta p.
            self.op.apply(&self.v, &self.p, Some(halt))?;
            self.op.apply_dagger(&self.t, &self.v, Some(halt))?;
            self.reduce(&mut host, Op::Dot, &[&self.v, &self.v], Stage::CgAlpha)?;
            let xr = [&self.x, &self.p, &self.r, &self.t];
            self.reduce(&mut host, Op::CgXr, &xr, Stage::CgBeta)?;
            return self.blas(Op::CgP, &[&self.p, &self.r], HOST_FINISHES);
        }
        self.op.apply(&self.v, &self.p, Some(halt))?;
        self.reduce(&mut host, Op::Dot, &[&self.v, &self.r0], Stage::Alpha)?;
        self.blas(Op::S, &[&self.s, &self.r, &self.v], HOST_FINISHES)?;
        self.op.apply(&self.t, &self.s, Some(halt))?;
        self.reduce(&mut host, Op::Dot, &[&self.t, &self.s], Stage::Omega)?;
        let xr = [&self.x, &self.p, &self.s, &self.t, &self.r, &self.r0];
        self.reduce(&mut host, Op::Xr, &xr, Stage::Beta)?;
        self.blas(Op::P, &[&self.p, &self.r, &self.v], HOST_FINISHES)
    }

    /// A reducing operation followed by `stage`: on the device (by the kernel's last block) or, for the
    /// `sync` variant, on the host.
    fn reduce(
        &self,
        host: &mut Option<&mut BiCgState>,
        op: Op,
        v: &[&DeviceBuffer<T::Elem>],
        stage: Stage,
    ) -> Result<()> {
        if let Some(ranks) = self.op.ranks() {
            // One rank of a split solve: this rank's sums, summed over the ranks, then the stage.
            self.blas(op, v, TOTALS)?;
            ranks.sum_in_place(&self.sums)?;
            return match host {
                Some(st) => {
                    let s = self.sums.download()?;
                    st.finish(stage, [s[0], s[1], s[2], s[3]]);
                    self.write_state(st)
                }
                None => {
                    let args = Finish {
                        state: self.state.ptr(),
                        sums: self.sums.ptr(),
                        stage: stage as u32,
                    };
                    // SAFETY: the entry takes one `Finish`; the state and the four sums are live.
                    unsafe { self.gpu.launch("bicg_finish", &args, 1, 1) }
                }
            };
        }
        match host {
            Some(st) => {
                self.blas(op, v, HOST_FINISHES)?;
                self.host_finish(st, stage)
            }
            None => self.blas(op, v, stage as u32),
        }
    }

    /// The state as the kernels see it.
    fn state_span(&self) -> SpanMut<'_, BiCgState> {
        // SAFETY: the buffer holds `STATE_WORDS` u64 (8-byte aligned, as `BiCgState` needs), room for
        // one state, and lives while the span borrows it.
        unsafe { SpanMut::from_device_parts(self.state.ptr::<BiCgState>(), 1) }
    }

    /// The device address of the state's status word: the operator's kernels stop when it is set.
    fn halt(&self) -> Span<'_, u32> {
        let at = self.state.addr() + std::mem::offset_of!(BiCgState, status) as u64;
        // SAFETY: the status word of the state buffer, which lives while the span borrows it.
        unsafe { Span::from_device_parts(at as *const u32, 1) }
    }

    fn blas(&self, op: Op, v: &[&DeviceBuffer<T::Elem>], stage: u32) -> Result<()> {
        let mut ptrs = [std::ptr::null_mut(); 6];
        for (p, b) in ptrs.iter_mut().zip(v) {
            *p = b.ptr();
        }
        let args = Blas::<T> {
            n: values::<T>(self.op.len()) as u32,
            stage,
            v: ptrs,
            state: self.state.ptr(),
            partials: self.partials.ptr(),
            done: self.done.ptr(),
            sums: self.sums.ptr(),
        };
        // SAFETY: the entry takes one `Blas<T>`; every vector holds `len()` complex slots; the
        // partial sums have room for `most_blocks`, at least `self.blocks`.
        unsafe {
            self.gpu
                .launch(&blas_entry::<T>(op), &args, self.blocks, self.block)
        }
    }

    /// The `sync` variant's step: copy the partial sums back (this waits for the GPU), finish them on the
    /// host, send the new scalars.
    fn host_finish(&self, st: &mut BiCgState, stage: Stage) -> Result<()> {
        let parts = self.partials.download()?;
        let b = self.blocks as usize;
        let mut sums: Sums = [0.0; 4];
        for (q, s) in sums.iter_mut().enumerate() {
            *s = parts[q * b..(q + 1) * b].iter().sum();
        }
        st.finish(stage, sums);
        self.write_state(st)
    }

    pub(crate) fn write_state(&self, st: &BiCgState) -> Result<()> {
        let mut words = [0u64; STATE_WORDS];
        // SAFETY: the array has at least size_of::<BiCgState>() bytes; the state is plain data.
        unsafe { std::ptr::write_unaligned(words.as_mut_ptr() as *mut BiCgState, *st) };
        // SAFETY: the state buffer holds STATE_WORDS u64; a pageable source is copied out before the
        // call returns, so `words` may go.
        unsafe { cu::memcpy_htod_async(self.state.addr(), &words, self.gpu.stream().cu_stream()) }
            .cuda(|| "copying the solver state to the GPU".into())
    }

    fn read_state(&self) -> Result<BiCgState> {
        let words = self.state.download()?;
        // SAFETY: as in `write_state`.
        Ok(unsafe { std::ptr::read_unaligned(words.as_ptr() as *const BiCgState) })
    }

    fn copy_state(&self, slot: usize, stream: &Arc<CudaStream>) -> Result<()> {
        // SAFETY: the pinned slot holds STATE_WORDS words; the host reads it only after the event that
        // follows this copy has completed.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.pinned[slot].0, STATE_WORDS) };
        // SAFETY: the state buffer holds STATE_WORDS u64 on this stream's context.
        unsafe { cu::memcpy_dtoh_async(dst, self.state.addr(), stream.cu_stream()) }
            .cuda(|| "copying the solver state to the host".into())
    }

    /// Queues `|a - b|^2` and `|b|^2` (e.g. `|b - A x|` and `|b|` for the true residual) and returns them
    /// after synchronising.
    pub fn diff_norms(
        &self,
        a: &DeviceBuffer<T::Elem>,
        b: &DeviceBuffer<T::Elem>,
    ) -> Result<(f64, f64)> {
        let s = self.sums(Op::DiffNorm, [a, b])?;
        Ok((s[2], s[3]))
    }

    /// Queues the reducing operation `op` on `v` and returns its four sums (over the ranks of a split
    /// operator) after synchronising. Overwrites the solver state (with a running one, so that the
    /// kernel is not skipped).
    fn sums(&self, op: Op, v: [&DeviceBuffer<T::Elem>; 2]) -> Result<Sums> {
        self.write_state(&BiCgState::new(0.5, 1))?;
        if let Some(ranks) = self.op.ranks() {
            self.blas(op, &v, TOTALS)?;
            ranks.sum_in_place(&self.sums)?;
            let s = self.sums.download()?;
            return Ok([s[0], s[1], s[2], s[3]]);
        }
        self.blas(op, &v, HOST_FINISHES)?;
        let parts = self.partials.download()?;
        let n = self.blocks as usize;
        let mut sums: Sums = [0.0; 4];
        for (q, s) in sums.iter_mut().enumerate() {
            *s = parts[q * n..(q + 1) * n].iter().sum();
        }
        Ok(sums)
    }
}

/// How a stopped solve's state ended: an error for a state no solve leaves (a corrupt one, or a
/// reliable-update stop, which the caller resumes).
pub(crate) fn status_of(st: &BiCgState) -> Result<SolveStatus> {
    Ok(match st.status {
        CONVERGED => SolveStatus::Converged,
        MAX_ITER => SolveStatus::MaxIter,
        BREAKDOWN_RHO => SolveStatus::Breakdown("rho = <r0, r> vanished"),
        BREAKDOWN_R0V => SolveStatus::Breakdown("<r0, A p> vanished"),
        BREAKDOWN_OMEGA => SolveStatus::Breakdown("<t, t> or omega vanished"),
        BREAKDOWN_PAP => {
            SolveStatus::Breakdown("<p, A^dag A p> vanished (is the operator singular?)")
        }
        s => {
            let what = if s == TARGET {
                "a reliable-update stop left unresumed"
            } else {
                "corrupt"
            };
            return Err(Error::Internal(format!(
                "the solver state on the GPU is {what} (status {s})"
            )));
        }
    })
}

/// The vector kernels' operations timed by the tuner (conjugate gradients' [`Op::CgXr`], [`Op::CgP`]
/// and [`Op::CgOrth`] run with the launch it picks, and bound it too).
const OPS: [Op; 5] = [Op::Dot, Op::S, Op::Xr, Op::P, Op::DiffNorm];

/// A [`SolverStore`] whose vectors the host allocates: f32, f64, or a 16-bit Wilson storage.
pub trait SolverPrecision: SolverStore<Elem: Plain> {}
impl<T: SolverStore<Elem: Plain>> SolverPrecision for T {}

/// The values a vector kernel runs over in `len` complex slots of `T`: one thread's work each.
pub(crate) fn values<T: SolverStore>(len: usize) -> usize {
    len / T::VALUE_SLOTS
}

/// The entry of vector kernel `op` in precision `T`.
pub(crate) fn blas_entry<T: SolverStore>(op: Op) -> String {
    let name = match op {
        Op::Dot => "bicg_dot",
        Op::S => "bicg_s",
        Op::Xr => "bicg_xr",
        Op::P => "bicg_p",
        Op::DiffNorm => "bicg_diffnorm",
        Op::CgXr => "bicg_cgxr",
        Op::CgP => "bicg_cgp",
        Op::Sub => "bicg_sub",
        Op::CgOrth => "bicg_cgorth",
    };
    format!("{name}_{}", T::PRECISION)
}

/// Blocks of `block` threads for vectors of `len` elements: `waves` a multiprocessor, to fill the GPU,
/// but no more than the vectors need.
pub(crate) fn grid(gpu: &Gpu, len: usize, block: u32, waves: u32) -> u32 {
    (waves * gpu.sm_count())
        .min(Gpu::blocks_for(len, block))
        .max(1)
}

/// One iteration's vector kernels (two dot products, `s`, `x` and `r` with their sums, `p`) on a
/// solver's work vectors, tuned over their threads per block and blocks per multiprocessor: the vector
/// length and precision key the cache. The reductions are timed as a split solve's rank runs them
/// ([`TOTALS`]): their last block adds up every block's partial sums, as in a solve (more blocks cost it
/// more; timed without it, the tuner picked a grid 6% slower in the solve at 8^4), but leaves the sums
/// beside the state, which stays as it is.
struct VectorLaunch<'a, T: SolverStore, O>(&'a mut BiCgStab<T, O>);

impl<T: SolverPrecision, O: DeviceOperator<T>> Tunable for VectorLaunch<'_, T, O> {
    fn tune_key(&self) -> (String, String, String) {
        (
            "bicgstab_vectors".into(),
            self.0.op.len().to_string(),
            T::PRECISION.into(),
        )
    }

    fn candidates(&self) -> Vec<Params> {
        let (gpu, len) = (&self.0.gpu, values::<T>(self.0.op.len()));
        let mut seen = Vec::new();
        let mut out = Vec::new();
        for block in TUNE_BLOCKS {
            for waves in TUNE_WAVES {
                // Small vectors give several candidates the same grid: timed once.
                let launch = (block, grid(gpu, len, block, waves));
                if !seen.contains(&launch) {
                    seen.push(launch);
                    out.push(vec![
                        (BLOCK_PARAM.into(), block),
                        (WAVES_PARAM.into(), waves),
                    ]);
                }
            }
        }
        out
    }

    fn set_params(&mut self, params: &[(String, u32)]) -> Result<bool> {
        let (Some(block), Some(waves)) = (param(params, BLOCK_PARAM), param(params, WAVES_PARAM))
        else {
            return Ok(false);
        };
        let s = &mut *self.0;
        // Every one of the kernels runs with it (their registers bound the block, f64's below 1024).
        let mut max = s.gpu.max_threads_per_block().min(1024);
        for op in OPS.into_iter().chain([Op::CgXr, Op::CgP, Op::CgOrth]) {
            max = max.min(s.gpu.max_block_of(&blas_entry::<T>(op))?);
        }
        if !block.is_multiple_of(32) || block > max || !TUNE_WAVES.contains(&waves) {
            return Ok(false);
        }
        s.block = block;
        s.blocks = grid(&s.gpu, values::<T>(s.op.len()), block, waves);
        // Captured with the launch before.
        s.graphs = None;
        Ok(true)
    }

    fn time_ms(&mut self, calls: u64) -> Result<f64> {
        let s = &*self.0;
        let gpu = s.gpu.clone();
        gpu.time_ms(|| {
            for _ in 0..calls {
                s.blas(Op::Dot, &[&s.v, &s.r0], TOTALS)?;
                s.blas(Op::S, &[&s.s, &s.r, &s.v], HOST_FINISHES)?;
                s.blas(Op::Dot, &[&s.t, &s.s], TOTALS)?;
                let xr = [&s.x, &s.p, &s.s, &s.t, &s.r, &s.r0];
                s.blas(Op::Xr, &xr, TOTALS)?;
                s.blas(Op::P, &[&s.p, &s.r, &s.v], HOST_FINISHES)?;
            }
            Ok(())
        })
    }

    /// Per element: 18 vectors moved (the dot products read 2 each, `s` 3, `x` and `r` 7, `p` 4) and
    /// 81 flops (12 a dot product: a complex product and two norms; `s` 8; `x`, `r` and their sums 33;
    /// `p` 16; the sums' additions not counted).
    fn cost(&self) -> Cost {
        let n = self.0.op.len() as f64;
        Cost {
            points: n,
            flops: 81.0 * n,
            bytes: 18.0 * 2.0 * std::mem::size_of::<T::Elem>() as f64 * n,
        }
    }
}

/// The launch costs Doi's overhead hiding works against, in microseconds: host time per kernel launch,
/// and GPU time per empty kernel when launches are queued ahead (held behind a wait kernel, so the host's
/// pace does not show).
pub fn launch_overhead(gpu: &Arc<Gpu>) -> Result<(f64, f64)> {
    const N: u32 = 256;
    let scratch = Flag::new()?;
    let empty = Signal {
        flag: scratch.ptr(),
        value: 0,
    };
    // SAFETY (all launches below): `wait_kernel`/`stop_kernel` take one `Signal` on a live flag.
    let launch_empty = || unsafe { gpu.launch("stop_kernel", &empty, 1, 1) };
    launch_empty()?;
    gpu.synchronize()?;
    let t = Instant::now();
    for _ in 0..N {
        launch_empty()?;
    }
    let host_us = t.elapsed().as_secs_f64() * 1e6 / N as f64;
    gpu.synchronize()?;

    let flag = Flag::new()?;
    let release = Signal {
        flag: flag.ptr(),
        value: 1,
    };
    let ms = time_held(gpu, release, || {
        for _ in 0..N {
            launch_empty()?;
        }
        Ok(())
    })?;
    Ok((host_us, ms * 1e3 / N as f64))
}

/// What the fused iteration's structure costs on the GPU, in microseconds, for a grid of `blocks` blocks
/// of `block` threads: GPU time per empty cooperative launch queued ahead, and per grid barrier.
pub fn grid_barrier_cost(gpu: &Arc<Gpu>, blocks: u32, block: u32) -> Result<(f64, f64)> {
    const LAUNCHES: u32 = 32;
    const BARRIERS: u32 = 64;
    let word = DeviceBuffer::<u32>::zeros(gpu, 1)?;
    let flag = Flag::new()?;
    let mut us = [0.0; 2];
    for (u, n) in us.iter_mut().zip([0, BARRIERS]) {
        let run = BarrierRun {
            barrier: GridBarrier { count: word.ptr() },
            n,
        };
        let release = Signal {
            flag: flag.ptr(),
            value: n + 1,
        };
        let ms = time_held(gpu, release, || {
            for _ in 0..LAUNCHES {
                // SAFETY: the entry takes one `BarrierRun` on a live word of its own; `blocks` is
                // checked against what the GPU runs at once.
                unsafe { gpu.launch_cooperative("grid_barriers", &run, blocks, block)? };
            }
            Ok(())
        })?;
        *u = ms * 1e3 / LAUNCHES as f64;
    }
    Ok((us[0], (us[1] - us[0]) / BARRIERS as f64))
}

/// GPU milliseconds of the work `queue` puts on the GPU's stream, held behind a wait kernel on `sig`
/// until all of it is queued, so that the host's launch pace does not show. The hold is released even
/// when `queue` fails, so nothing is left waiting. `queue` must stay far below the driver's queue of
/// pending launches (see [`MAX_HELD_ITERATIONS`]).
fn time_held(gpu: &Arc<Gpu>, sig: Signal, queue: impl FnOnce() -> Result<()>) -> Result<f64> {
    let release = gpu
        .context()
        .new_stream()
        .cuda(|| "creating the release stream".into())?;
    // SAFETY: `wait_kernel` and `stop_kernel` take one `Signal`; the caller's flag is a live device u32.
    unsafe { gpu.launch("wait_kernel", &sig, 1, 1)? };
    gpu.time_ms(|| {
        let queued = queue();
        // SAFETY: as above.
        let released = unsafe { gpu.launch_on(&release, "stop_kernel", &sig, 1, 1) };
        queued.and(released)
    })
}
