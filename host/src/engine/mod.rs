//! Loop engines: what runs a point update over a range. The paper's template parameter of `Loop3D`, as a
//! trait, so users can plug in their own.
//!
//! - [`HostLoopEngine`]: the CPU, rayon-parallel over planes; its temporally blocked passes are
//!   [`wavefront`]'s.
//! - [`DeviceLoopEngine`]: the GPU with one fixed [`LaunchShape`].
//! - [`DeviceAutoTuningLoopEngine`]: the GPU, timing the candidates of a [`TuneSpace`] (block shape,
//!   march and kernel [`Variant`]) on the real work and keeping the fastest, persisted in the
//!   [`tunecache`].
//! - [`tuner`]: the one tuner ([`Search`]) and its [`Tunable`] trait for work that is not a point loop
//!   (a whole LBM step, a hopping term); [`cost`] its rates.
//!
//! [`emulate3d`] runs a GPU launch's per-thread code on the CPU, for tests without a GPU.

pub mod autotune;
pub mod cost;
pub mod device;
pub mod emulate;
pub mod host;
pub mod tunecache;
pub mod tuner;
mod vectors;
pub mod wavefront;

pub use autotune::{
    tune_candidates, tune_key, AutoTuningInfo, DeviceAutoTuningLoopEngine, StepsChoice, TuneParam,
    TuneSpace, TuningReport,
};
pub use cost::{Cost, Rate};
pub use device::{
    column_kernel, launch_columns, launch_pass, pass_candidates, DeviceLoopEngine, Dims,
    KernelInfo, LaunchShape, PassForm, MAX_DYNAMIC_SHARED_BYTES,
};
pub use emulate::{emulate3d, emulate3d_columns, emulate3d_temporal};
pub use host::HostLoopEngine;
pub use lattice_gpu_kernels::stencil::Variant;
pub use tuner::{tune, Params, Search, Trials, Tunable, Tuned};
pub use wavefront::host_pass;

use lattice_gpu_kernels::stencil::{
    BlockProgram, GpuEntry, LoopRange, PassRange, PointUpdate2D, PointUpdate3D, StencilUpdate3D,
    SumUpdate3D,
};
#[cfg(doc)]
use lattice_gpu_kernels::stencil::{TemporalBlock, MAX_TEMPORAL_STEPS};

use crate::error::{Error, Result};
use crate::field::{Element, Field, Shape};

/// Runs point updates over ranges of fields it allocates. Engines differ in where the fields live and how
/// the points are spread over threads; the point updates are the same.
pub trait LoopEngine {
    /// The fields this engine's loops run on.
    type Field<T: Element>: Field<T>;
    /// State an engine keeps per call site (per [`Loop3D`](crate::Loop3D)): the [`AutoTuningInfo`] of the
    /// auto-tuner, nothing for the others.
    type Site: Default;

    /// A one-line description for logs ("GPU NVIDIA H100 80GB HBM3, auto-tuned").
    fn describe(&self) -> String;
    /// Fails unless `bytes` more can be allocated (GPU engines check free device memory).
    fn check_fits(&self, bytes: u64, what: &str) -> Result<()>;
    /// A zero-filled field.
    fn alloc<T: Element>(&self, shape: Shape) -> Result<Self::Field<T>>;
    /// Runs `f` at every point of `range` (already checked against the update's radius).
    fn run3d<F: PointUpdate3D + GpuEntry>(
        &self,
        range: &LoopRange,
        f: &F,
        site: &mut Self::Site,
    ) -> Result<()>;
    /// Runs `f` at every point of `range` and writes the sum of its terms into value `slot` of `out`
    /// where the fields live, queued (as [`dot_into`](Self::dot_into)): the same launch (on the CPU:
    /// any run) gives the same bits.
    fn run3d_sum<F: SumUpdate3D + GpuEntry>(
        &self,
        range: &LoopRange,
        f: &F,
        site: &mut Self::Site,
        out: &mut Self::Field<f64>,
        slot: usize,
    ) -> Result<()>;
    /// Runs `steps` steps (1 to [`MAX_TEMPORAL_STEPS`]) of `f` over `pass` in one temporally
    /// blocked pass ([`TemporalBlock`]): reads `f`'s input and writes the last step into its output,
    /// another field, at the points of `pass.out`; points outside `pass.live` keep the input's
    /// values, so the result is that of `steps` single steps where both fields hold the same margin.
    /// Engines without it refuse.
    fn run3d_temporal<F: StencilUpdate3D + GpuEntry>(
        &self,
        pass: &PassRange,
        f: &F,
        steps: u32,
        site: &mut Self::Site,
    ) -> Result<()> {
        let _ = (pass, f, steps, site);
        Err(Error::InvalidSetting(format!(
            "{} runs no temporally blocked passes: use one step per pass",
            self.describe()
        )))
    }
    /// Advances `f` by up to `max_steps` (at least 1) steps over `pass` as the engine finds fastest,
    /// and says how many it ran: the last lands in `f`'s output at the points of `pass.out`, as after
    /// one step over it. Engines that tune weigh temporally blocked passes against single steps
    /// ([`StepsChoice`]); the others run passes of [`untuned_steps`](Self::untuned_steps) (the CPU
    /// engine's where the fields leave its cache), one step by default.
    fn run3d_steps<F: StencilUpdate3D + GpuEntry>(
        &self,
        pass: &PassRange,
        f: &F,
        max_steps: u32,
        site: &mut Self::Site,
    ) -> Result<u32> {
        let _ = max_steps;
        self.run3d(&pass.out, f, site).map(|()| 1)
    }
    /// The steps a pass of [`run3d_steps`](Self::run3d_steps) over `pass` advances for `F` where
    /// there is room, on an engine that does not tune (what one that tunes chooses is its
    /// [`steps_choice`](Self::steps_choice)): 1, single steps, unless the engine says otherwise.
    fn untuned_steps<F: StencilUpdate3D + GpuEntry>(&self, pass: &PassRange) -> u32 {
        let _ = pass;
        1
    }
    /// Runs `f` at every point of the 2-D `range`.
    fn run2d<F: PointUpdate2D + GpuEntry>(
        &self,
        range: &LoopRange,
        f: &F,
        site: &mut Self::Site,
    ) -> Result<()>;
    /// Work recorded once and replayed without the host queueing each kernel again (a CUDA graph).
    type Recording;
    /// Records what `work` queues, instead of running it, for [`replay`](Self::replay); `Ok(None)`, with
    /// `work` not called, on an engine that cannot record (the CPU runs work as it is queued): the
    /// caller then runs the work itself. `work` must only queue (no waits, no downloads, no tuning).
    fn record(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<Option<Self::Recording>>;
    /// Queues a recording made by [`record`](Self::record) again.
    fn replay(&self, recording: &Self::Recording) -> Result<()>;
    /// Runs the block program `p`: on a GPU one block of as many threads as its kernel takes (at most
    /// 1024), on the CPU its passes one after another.
    fn run_block<P: BlockProgram + GpuEntry>(&self, p: &P) -> Result<()>;
    /// Waits until all queued work is done (a no-op on the CPU).
    fn synchronize(&self) -> Result<()>;
    /// `sum a_i b_i` over two whole f64 fields of one shape, margins included (solvers keep zeros there),
    /// reduced where the fields live; the same grouping every call, so repeated runs agree bit for bit.
    fn dot(&self, a: &Self::Field<f64>, b: &Self::Field<f64>) -> Result<f64>;
    /// [`dot`](Self::dot) written into value `slot` of `out` where the fields live, queued: on a GPU
    /// the host does not wait for it (a later kernel reads it there), so a solver's scalars need not
    /// cross to the host every iteration. The same sum as `dot` on the CPU.
    fn dot_into(
        &self,
        a: &Self::Field<f64>,
        b: &Self::Field<f64>,
        out: &mut Self::Field<f64>,
        slot: usize,
    ) -> Result<()> {
        let v = self.dot(a, b)?;
        out.upload_span(slot, &[v])
    }
    /// The index of the first NaN or infinite value of `f` (the whole array, margins included), `None`
    /// where all are finite: a run's health check ([`health`](crate::health)). On a GPU the values
    /// are counted where they live (one read of the field) and copied to the host only when there is
    /// one to find.
    fn first_non_finite<T: Element>(&self, f: &Self::Field<T>) -> Result<Option<usize>> {
        Ok(crate::health::first_non_finite(&f.download()?))
    }
    /// The GPU its fields live on; `None` on the CPU.
    fn device(&self) -> Option<&std::sync::Arc<crate::Gpu>> {
        None
    }
    /// The tuning result kept in a call site's state, for engines that tune.
    fn tuning(_site: &Self::Site) -> Option<&TuningReport> {
        None
    }
    /// (steps timed, steps needed) while a call site's tuning is under way, for engines that tune.
    fn tuning_progress(_site: &Self::Site) -> Option<(usize, usize)> {
        None
    }
    /// What [`run3d_steps`](Self::run3d_steps) chose at a call site, once tuned (engines that tune).
    fn steps_choice(_site: &Self::Site) -> Option<&autotune::StepsChoice> {
        None
    }
    /// Whether the engine tunes its launches (then [`tuning`](Self::tuning) reports once a site is tuned).
    fn tunes(&self) -> bool {
        false
    }
}

/// Refuses a range that is empty or leaves its array along an axis (`dims`: 2 or 3).
pub(crate) fn check_range(r: &LoopRange, dims: usize) -> Result<()> {
    if dims == 2 && (r.n[2] != 1 || r.begin[2] != 0 || r.end[2] != 1) {
        return Err(Error::InvalidSize(format!(
            "a 2-D range needs n[2] = 1 and z range 0..1, got {r:?}"
        )));
    }
    for a in 0..dims {
        if r.begin[a] >= r.end[a] || r.end[a] > r.n[a] {
            return Err(Error::InvalidSize(format!(
                "axis {a} of the range runs {}..{} in an array of {} points; it needs begin < end <= size",
                r.begin[a], r.end[a], r.n[a]
            )));
        }
    }
    Ok(())
}

/// Refuses a pass whose ranges are empty or leave their array, whose `out` leaves its `live`, or
/// whose `live` leaves less margin than the update `entry` reads beyond each point.
pub(crate) fn check_pass(p: &PassRange, radius: &[u32], entry: &str) -> Result<()> {
    check_range(&p.live, 3)?;
    check_range(&p.out, 3)?;
    if !p.nested() {
        return Err(Error::InvalidSize(format!(
            "a pass writes {:?}..{:?} outside the points it advances, {:?}..{:?} (or on another \
             array): its output range must lie within its live range",
            p.out.begin, p.out.end, p.live.begin, p.live.end
        )));
    }
    check_radius(&p.live, radius, entry)
}

/// Refuses a range that leaves less margin than the update `entry` reads beyond each point.
pub(crate) fn check_radius(r: &LoopRange, radius: &[u32], entry: &str) -> Result<()> {
    for (a, &rad) in radius.iter().enumerate() {
        if r.begin[a] < rad || r.end[a] + rad > r.n[a] {
            return Err(Error::InvalidSize(format!(
                "{entry} reads {rad} point(s) beyond each point along axis {a}, but the range {}..{} of {} leaves less margin; allocate the fields with a margin of at least {rad}",
                r.begin[a], r.end[a], r.n[a]
            )));
        }
    }
    Ok(())
}
