//! The auto-tuning GPU engine (the paper's `DeviceAutoTuningLoopEngine`).
//!
//! The first calls at a call site each run the real work with the next candidate launch shape, timed with
//! CUDA events; so every timed step is a real step of the simulation. The host does not wait for a timed
//! step: the steps run back to back among the rest of the work, as they will once tuned. (Timed one at a
//! time on an idle GPU, the f32 red-black sweep's best shapes came within 1% of each other, and the pick
//! changed from run to run, up to 11% slower in the stream.) Once every candidate has been timed `reps`
//! times (round robin, so clock drift spreads evenly), the one tuner's [`Search`] picks the fastest (by
//! its median), which is used from then on and is stored in the tune cache, keyed by kernel (with the
//! kernel variants tuned over), range, precision, device and PTX hash, so the next run of the program
//! starts tuned.
//!
//! The kernel [`Variant`] is a tuning parameter like the block shape (`variant`, its `u32` value): by
//! default the tuner times every variant the kernel has, with every shape, and keeps the fastest pair.

use std::sync::{Arc, Mutex};

use lattice_gpu_kernels::stencil::{
    BlockProgram, GpuEntry, LoopRange, PassRange, PointUpdate2D, PointUpdate3D, StencilUpdate3D,
    SumUpdate3D, Variant, MAX_COLUMN_STEPS,
};

use super::cost::Cost;
use super::device::{
    launch, launch_pass, pass_candidates, DotScratch, KernelInfo, LaunchShape, PassForm, SumTarget,
};
use super::tunecache::{TuneCache, TuneKey};
use super::tuner::Search;
use super::LoopEngine;
use crate::error::Result;
use crate::field::{DeviceField, Element, Shape};
use crate::gpu::{Gpu, Timed};

/// One named tuning parameter and the values to try.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TuneParam {
    /// Its name in the tune cache (`block_x`).
    pub name: &'static str,
    /// The candidate values.
    pub values: Vec<u32>,
}

/// The candidates of a tuner: the product of its parameters' values. Kernels with knobs of their own
/// (unroll factor, streaming scheme) add parameters with [`TuneSpace::with`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TuneSpace {
    params: Vec<TuneParam>,
}

impl TuneSpace {
    /// The paper's Table 1: block x 4..128, block y 1..16, march 1..16, powers of two.
    pub fn table1() -> Self {
        Self { params: Vec::new() }
            .with("block_x", vec![4, 8, 16, 32, 64, 128])
            .with("block_y", vec![1, 2, 4, 8, 16])
            .with("march", vec![1, 2, 4, 8, 16])
    }

    /// Table 1 with every kernel variant: what [`DeviceAutoTuningLoopEngine`] tunes by default.
    pub fn table1_all_variants() -> Self {
        Self::table1().with_variants(&Variant::ALL)
    }

    /// This space with one more parameter (replacing one of the same name).
    pub fn with(mut self, name: &'static str, values: Vec<u32>) -> Self {
        self.params.retain(|p| p.name != name);
        self.params.push(TuneParam { name, values });
        self
    }

    /// This space tuning over `variants` (the `variant` parameter). Kernels without some of them are
    /// tuned over the ones they have, kernels with none of them over their plain variant; a space
    /// without the parameter tunes the plain variant only.
    pub fn with_variants(self, variants: &[Variant]) -> Self {
        self.with("variant", variants.iter().map(|&v| v as u32).collect())
    }

    /// The variants of this space that `kernel` has, in [`Variant::ALL`] order; the plain one if it has
    /// none of them (every kernel has that).
    pub fn variants_for(&self, kernel: &KernelInfo) -> Vec<Variant> {
        let wanted: Vec<Variant> = match self.params.iter().find(|p| p.name == "variant") {
            Some(p) => p
                .values
                .iter()
                .filter_map(|&v| Variant::from_u32(v))
                .collect(),
            None => vec![Variant::Plain],
        };
        let have: Vec<Variant> = kernel
            .variants()
            .into_iter()
            .filter(|v| wanted.contains(v))
            .collect();
        if have.is_empty() {
            vec![Variant::Plain]
        } else {
            have
        }
    }

    /// The parameters.
    pub fn params(&self) -> &[TuneParam] {
        &self.params
    }

    /// Every combination of values, as named parameter lists.
    pub fn configs(&self) -> Vec<Vec<(String, u32)>> {
        self.params.iter().fold(vec![Vec::new()], |acc, p| {
            acc.iter()
                .flat_map(|c| {
                    p.values.iter().map(move |&v| {
                        let mut c = c.clone();
                        c.push((p.name.to_string(), v));
                        c
                    })
                })
                .collect()
        })
    }
}

/// What tuning found for one call site.
#[derive(Clone, Debug, PartialEq)]
pub struct TuningReport {
    /// The launch shape in use.
    pub best: LaunchShape,
    /// Its median time per step, ms.
    pub best_ms: f64,
    /// Candidates timed (0 when the result came from the cache).
    pub candidates: usize,
    /// Steps spent tuning.
    pub steps: usize,
    /// GPU time of those steps, ms.
    pub tuning_ms: f64,
    /// True when the shape came from the tune cache and no step was spent tuning.
    pub from_cache: bool,
    /// One step's work over the call site's range, as the update states it per point.
    pub cost: Cost,
}

impl TuningReport {
    /// Time lost to tuning: the tuning steps' time beyond what the best shape would have taken.
    pub fn overhead_ms(&self) -> f64 {
        (self.tuning_ms - self.steps as f64 * self.best_ms).max(0.0)
    }
}

/// The line applications print for a tuned call site.
impl std::fmt::Display for TuningReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.from_cache {
            true => write!(
                f,
                "launch shape {} from the tune cache ({:.3} ms/step when tuned)",
                self.best, self.best_ms
            ),
            false => write!(
                f,
                "auto-tuned: {} ({:.3} ms/step) out of {} candidates in {} steps; tuning overhead \
                 {:.1} ms",
                self.best,
                self.best_ms,
                self.candidates,
                self.steps,
                self.overhead_ms()
            ),
        }
    }
}

struct Tuning {
    search: Search,
    candidates: Vec<LaunchShape>,
    /// Each step's candidate and its timing, read once every step has run.
    steps: Vec<(usize, Timed)>,
    needed: usize,
    cost: Cost,
}

#[derive(Default)]
enum State {
    #[default]
    Untuned,
    Tuning(Tuning),
    Tuned(TuningReport),
}

/// The tuning state of one call site; the caller keeps one per loop (a [`Loop3D`](crate::Loop3D) holds it).
#[derive(Default)]
pub struct AutoTuningInfo {
    state: State,
    /// Temporally blocked passes, by their steps.
    passes: Vec<(u32, State)>,
    /// The steps per pass [`run3d_steps`](super::LoopEngine::run3d_steps) weighs, found once.
    weighed: Option<Vec<u32>>,
    /// What [`run3d_steps`](super::LoopEngine::run3d_steps) runs, once every pass it weighs is tuned.
    choice: Option<StepsChoice>,
}

/// What the auto-tuner chose for a call site's steps: single steps, or passes of several steps
/// (temporal blocking), whichever took the least time per step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepsChoice {
    /// Steps per pass (1: single steps).
    pub steps: u32,
    /// The form and launch of the chosen passes (`None` for single steps).
    pub pass: Option<(PassForm, LaunchShape)>,
    /// Milliseconds per step of the choice.
    pub ms_per_step: f64,
    /// The tuned single step's milliseconds.
    pub single_ms: f64,
    /// The fastest pass weighed against single steps (its steps and ms per step), where one was.
    pub best_pass: Option<(u32, f64)>,
}

/// The line applications print for the choice.
impl std::fmt::Display for StepsChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.pass, self.best_pass) {
            (Some((form, shape)), _) => write!(
                f,
                "temporal blocking: {} steps per pass, {} form {shape} ({:.4} ms/step, {:.2}x the \
                 tuned single step's {:.4})",
                self.steps,
                form.name(),
                self.ms_per_step,
                self.single_ms / self.ms_per_step,
                self.single_ms
            ),
            (None, Some((t, ms))) => write!(
                f,
                "single steps ({:.4} ms/step): faster here than the fastest temporally blocked pass \
                 ({t} steps, {ms:.4} ms/step)",
                self.single_ms
            ),
            (None, None) => write!(f, "single steps ({:.4} ms/step)", self.single_ms),
        }
    }
}

impl AutoTuningInfo {
    /// The result once tuning has finished (or was found in the cache).
    pub fn report(&self) -> Option<&TuningReport> {
        match &self.state {
            State::Tuned(r) => Some(r),
            _ => None,
        }
    }

    /// (steps done, steps needed) while tuning is under way.
    pub fn progress(&self) -> Option<(usize, usize)> {
        match &self.state {
            State::Tuning(t) => Some((t.steps.len(), t.needed)),
            _ => None,
        }
    }

    /// The tuning of passes of `steps` steps, once finished.
    pub fn pass_report(&self, steps: u32) -> Option<&TuningReport> {
        match self.passes.iter().find(|(t, _)| *t == steps) {
            Some((_, State::Tuned(r))) => Some(r),
            _ => None,
        }
    }

    /// The choice between single steps and passes, once made.
    pub fn choice(&self) -> Option<&StepsChoice> {
        self.choice.as_ref()
    }

    fn pass_state(&mut self, steps: u32) -> &mut State {
        match self.passes.iter().position(|(t, _)| *t == steps) {
            Some(i) => &mut self.passes[i].1,
            None => {
                self.passes.push((steps, State::Untuned));
                &mut self.passes.last_mut().expect("just pushed").1
            }
        }
    }
}

/// The launch shapes of `space` worth timing for `kernel` over `range` on a device with `max_threads`
/// threads per block: the configurations the device accepts (the kernel has the variant, a tiled launch's
/// shared memory fits), less those that only add idle threads (a block or march longer than the range
/// needs). The same list the GPU tests and the host launch emulator check.
pub fn tune_candidates(
    space: &TuneSpace,
    range: &LoopRange,
    kernel: &KernelInfo,
    max_threads: u32,
) -> Vec<LaunchShape> {
    let e = range.extent();
    let last = if kernel.dims == super::Dims::Three {
        e[2]
    } else {
        e[1]
    };
    let fits = |v: u32, ext: u32, min: u32| v <= min.max(ext.next_power_of_two());
    // The variants the kernel has, in place of the space's (which may name none of them).
    let space = space.clone().with_variants(&space.variants_for(kernel));
    space
        .configs()
        .iter()
        .filter_map(|c| LaunchShape::from_params(c))
        .filter(|s| {
            fits(
                s.block_x,
                e[0].div_ceil(s.variant.points_per_thread(kernel.elem_bytes)),
                4,
            ) && fits(s.block_y, e[1], 1)
                && fits(s.march, last, 1)
        })
        .filter(|s| s.config(range, kernel, max_threads).is_ok())
        .collect()
}

/// `kernel`'s work over every point of `r`.
fn range_cost(kernel: &KernelInfo, r: &LoopRange) -> Cost {
    let points: f64 = r.extent().iter().map(|&e| f64::from(e)).product();
    Cost::point(kernel.point_flops, kernel.point_bytes) * points
}

/// The tune-cache key of `kernel` over `range` tuned over `variants`: the kernel field is the plain entry
/// name (`module::entry` for a module other than the framework's, whose keys keep their plain names),
/// followed by the variants in brackets unless only the plain one was tuned (so a result tuned over some
/// variants is never taken for a run tuning over others). `ptx_hash` is the module's.
pub fn tune_key(
    kernel: &KernelInfo,
    variants: &[Variant],
    r: &LoopRange,
    precision: &str,
    device: &str,
    ptx_hash: u64,
) -> TuneKey {
    let entry = match kernel.module == lattice_gpu_kernels::MODULE {
        true => kernel.name().to_string(),
        false => format!("{}::{}", kernel.module, kernel.name()),
    };
    let name = if variants == [Variant::Plain] {
        entry
    } else {
        let names: Vec<&str> = variants.iter().map(|v| v.name()).collect();
        format!("{entry}[{}]", names.join("+"))
    };
    TuneKey {
        kernel: name,
        size: format!(
            "{}x{}x{}[{}:{},{}:{},{}:{}]",
            r.n[0],
            r.n[1],
            r.n[2],
            r.begin[0],
            r.end[0],
            r.begin[1],
            r.end[1],
            r.begin[2],
            r.end[2]
        ),
        precision: precision.to_string(),
        device: device.to_string(),
        ptx_hash,
    }
}

/// Runs point updates on the GPU, tuning the launch shape and kernel variant per call site on the real
/// work.
pub struct DeviceAutoTuningLoopEngine {
    gpu: Arc<Gpu>,
    space: TuneSpace,
    cache: Mutex<TuneCache>,
    retune: bool,
    reps: usize,
    dots: DotScratch,
}

impl DeviceAutoTuningLoopEngine {
    /// A tuner on `gpu` over the paper's Table 1 and every kernel variant
    /// ([`TuneSpace::table1_all_variants`]), storing results in `cache`, timing each candidate over 3
    /// steps.
    pub fn new(gpu: Arc<Gpu>, cache: TuneCache) -> Self {
        Self {
            gpu,
            space: TuneSpace::table1_all_variants(),
            cache: Mutex::new(cache),
            retune: false,
            reps: 3,
            dots: Default::default(),
        }
    }

    /// Ignores cached results and tunes again (the new results replace the old ones).
    pub fn retune(mut self, retune: bool) -> Self {
        self.retune = retune;
        self
    }

    /// Times each candidate over `reps` steps (the median counts).
    pub fn reps(mut self, reps: usize) -> Self {
        self.reps = reps.max(1);
        self
    }

    /// Tunes over `space` instead (it must name `block_x`, `block_y` and `march`; without `variant` it
    /// tunes the plain variant only).
    pub fn space(mut self, space: TuneSpace) -> Self {
        self.space = space;
        self
    }

    /// Tunes over `variants` only (forcing one: `&[Variant::Tiled]`).
    pub fn variants(mut self, variants: &[Variant]) -> Self {
        self.space = self.space.with_variants(variants);
        self
    }

    /// The space tuned over.
    pub fn tune_space(&self) -> &TuneSpace {
        &self.space
    }

    /// The GPU.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The launch shapes worth timing for `kernel` over `range` on this GPU ([`tune_candidates`]).
    /// Shapes with more threads than a variant's registers allow are left out.
    pub fn candidates(&self, range: &LoopRange, kernel: &KernelInfo) -> Vec<LaunchShape> {
        tune_candidates(&self.space, range, kernel, self.gpu.max_threads_per_block())
            .into_iter()
            .filter(|s| self.fits(kernel, *s))
            .collect()
    }

    /// Whether this GPU can launch `kernel` with `shape` (its block within the variant's limit; what
    /// else a shape needs, `LaunchShape::config` checks).
    fn fits(&self, kernel: &KernelInfo, shape: LaunchShape) -> bool {
        super::device::block_limit(&self.gpu, kernel, shape.variant)
            .is_ok_and(|max| shape.threads() <= max)
    }

    fn warn_cache(cache: &mut TuneCache) {
        for w in cache.take_warnings() {
            eprintln!("lattice-gpu: warning: {w}");
        }
    }

    fn start(&self, kernel: &KernelInfo, precision: &str, r: &LoopRange) -> Result<State> {
        let variants = self.space.variants_for(kernel);
        let key = tune_key(
            kernel,
            &variants,
            r,
            precision,
            self.gpu.name(),
            self.gpu.module_hash(kernel.module)?,
        );
        let max = self.gpu.max_threads_per_block();
        let valid = |s: &LaunchShape| {
            variants.contains(&s.variant)
                && s.config(r, kernel, max).is_ok()
                && self.fits(kernel, *s)
        };
        let candidates = || self.candidates(r, kernel);
        if let Some(state) = self.begin(key, candidates, &valid, range_cost(kernel, r)) {
            return Ok(state);
        }
        eprintln!(
            "lattice-gpu: warning: no tuning candidate fits {}; using {}",
            kernel.name(),
            LaunchShape::FIXED
        );
        Ok(State::Tuned(TuningReport {
            best: LaunchShape::FIXED,
            best_ms: 0.0,
            candidates: 0,
            steps: 0,
            tuning_ms: 0.0,
            from_cache: false,
            cost: range_cost(kernel, r),
        }))
    }

    /// The cache's launch for `key`, where `valid` takes it.
    fn cached(
        &self,
        key: &TuneKey,
        valid: &dyn Fn(&LaunchShape) -> bool,
    ) -> Option<(LaunchShape, f64)> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let cached = Search::cached(&mut cache, key, self.retune);
        Self::warn_cache(&mut cache);
        let e = cached?;
        LaunchShape::from_params(&e.params)
            .filter(|s| valid(s))
            .map(|s| (s, e.time_ms))
    }

    /// A call site's state for `key`: tuned from the cache where it holds a launch `valid` takes, else
    /// tuning over `candidates()` (asked for only then), each `reps` times; `None` where there are
    /// none.
    fn begin(
        &self,
        key: TuneKey,
        candidates: impl FnOnce() -> Vec<LaunchShape>,
        valid: &dyn Fn(&LaunchShape) -> bool,
        cost: Cost,
    ) -> Option<State> {
        if let Some((shape, ms)) = self.cached(&key, valid) {
            return Some(State::Tuned(TuningReport {
                best: shape,
                best_ms: ms,
                candidates: 0,
                steps: 0,
                tuning_ms: 0.0,
                from_cache: true,
                cost,
            }));
        }
        let candidates = candidates();
        if candidates.is_empty() {
            return None;
        }
        let needed = candidates.len() * self.reps;
        let params = candidates.iter().map(|s| s.to_params()).collect();
        Some(State::Tuning(Tuning {
            search: Search::new(key, params),
            needed,
            candidates,
            steps: Vec::with_capacity(needed),
            cost,
        }))
    }

    fn run<F: Copy>(
        &self,
        kernel: &KernelInfo,
        precision: &str,
        r: &LoopRange,
        f: &F,
        info: &mut AutoTuningInfo,
        sum: Option<SumTarget>,
    ) -> Result<()> {
        if matches!(info.state, State::Untuned) {
            info.state = self.start(kernel, precision, r)?;
        }
        self.advance(&mut info.state, 1, &|shape| {
            launch(&self.gpu, kernel, f, r, shape, sum)
        })
    }

    /// Runs the work once (`launch` with a launch shape) as `state` has it: with the tuned shape, or
    /// timed with the next candidate, the search ending when every candidate has been timed `reps`
    /// times. A launch does `steps` steps; tuning compares times per step.
    fn advance(
        &self,
        state: &mut State,
        steps: u32,
        launch: &dyn Fn(LaunchShape) -> Result<()>,
    ) -> Result<()> {
        let t = match state {
            State::Tuned(rep) => return launch(rep.best),
            State::Tuning(t) => t,
            State::Untuned => unreachable!("tuning state is set before the first launch"),
        };
        let c = t.steps.len() % t.candidates.len();
        // Not waited for: the steps run back to back, as the real work does once tuned.
        let timed = self.gpu.timed(|| launch(t.candidates[c]))?;
        t.steps.push((c, timed));
        if t.steps.len() == t.needed {
            let mut total_ms = 0.0;
            for (c, timed) in &t.steps {
                let ms = timed.ms()?;
                t.search.record(*c, ms / f64::from(steps));
                total_ms += ms;
            }
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            // Every candidate was timed (`needed` is `reps` steps of each), so there is a fastest.
            let (best, best_ms) = t.search.finish(&mut cache).unwrap_or((0, f64::NAN));
            Self::warn_cache(&mut cache);
            *state = State::Tuned(TuningReport {
                best: t.candidates[best],
                best_ms,
                candidates: t.candidates.len(),
                steps: t.needed * steps as usize,
                tuning_ms: total_ms,
                from_cache: false,
                cost: t.cost,
            });
        }
        Ok(())
    }
}

impl LoopEngine for DeviceAutoTuningLoopEngine {
    type Field<T: Element> = DeviceField<T>;
    type Site = AutoTuningInfo;

    fn describe(&self) -> String {
        let variants: Vec<&str> = self
            .space
            .params()
            .iter()
            .find(|p| p.name == "variant")
            .map_or(vec![Variant::Plain.name()], |p| {
                p.values
                    .iter()
                    .filter_map(|&v| Variant::from_u32(v).map(Variant::name))
                    .collect()
            });
        // The space, not a kernel's: each kernel is tuned over those of these variants it has.
        format!(
            "GPU {} (auto-tuned over the kernels' variants among {})",
            self.gpu.name(),
            variants.join("+")
        )
    }

    fn check_fits(&self, bytes: u64, what: &str) -> Result<()> {
        self.gpu.check_fits(bytes, what)
    }

    fn alloc<T: Element>(&self, shape: Shape) -> Result<DeviceField<T>> {
        DeviceField::zeros(&self.gpu, shape)
    }

    fn run3d<F: PointUpdate3D + GpuEntry>(
        &self,
        r: &LoopRange,
        f: &F,
        info: &mut AutoTuningInfo,
    ) -> Result<()> {
        let precision = <F::Real as lattice_gpu_kernels::device::math::Real>::NAME;
        self.run(&KernelInfo::of3d::<F>(), precision, r, f, info, None)
    }

    /// The launch tuned per step count and cached (under the form's entry, and the steps for the
    /// general form), in the column form where the kernel has it.
    fn run3d_temporal<F: StencilUpdate3D + GpuEntry>(
        &self,
        pass: &PassRange,
        f: &F,
        steps: u32,
        info: &mut AutoTuningInfo,
    ) -> Result<()> {
        // The launch covers the output: its size names the tuning.
        let r = &pass.out;
        let form = PassForm::of::<F>(steps);
        let state = info.pass_state(steps);
        if matches!(state, State::Untuned) {
            let entry = super::device::pass_entry::<F>(form, steps)?;
            let kernel = KernelInfo::of3d::<F>();
            let mut named = kernel;
            named.entries[Variant::Plain as usize] = Some(entry);
            let mut key = tune_key(
                &named,
                &[Variant::Plain],
                r,
                <F::Real as lattice_gpu_kernels::device::math::Real>::NAME,
                self.gpu.name(),
                self.gpu.module_hash(kernel.module)?,
            );
            // One entry serves every step count of the general form.
            if form == PassForm::General {
                key.kernel = format!("{}[{steps} steps]", key.kernel);
            }
            let candidates = pass_candidates::<F>(&self.gpu, form, pass, steps)?;
            let valid = |s: &LaunchShape| candidates.contains(s);
            *state = self
                .begin(key, || candidates.clone(), &valid, range_cost(&kernel, r))
                .ok_or_else(|| {
                    crate::Error::InvalidSize(format!(
                        "no launch of the {} form fits a pass of {steps} steps of {} over {:?}: \
                         use single steps",
                        form.name(),
                        F::ENTRY,
                        r.extent()
                    ))
                })?;
        }
        self.advance(state, steps, &|shape| {
            launch_pass(&self.gpu, f, pass, form, shape, steps)
        })
    }

    /// Tunes the single step, then passes of 2 to [`MAX_COLUMN_STEPS`] steps where the kernel has
    /// their column form (the general form is not weighed: it has not been faster than single steps),
    /// each on the run's own steps; then runs whichever takes the least time per step. A pass that
    /// does not fit `max_steps` gives way to a single step.
    fn run3d_steps<F: StencilUpdate3D + GpuEntry>(
        &self,
        pass: &PassRange,
        f: &F,
        max_steps: u32,
        info: &mut AutoTuningInfo,
    ) -> Result<u32> {
        let r = &pass.out;
        if info.report().is_none() {
            self.run3d(r, f, info)?;
            return Ok(1);
        }
        if info.choice.is_none() {
            let weighed = info
                .weighed
                .get_or_insert_with(|| {
                    (2..=MAX_COLUMN_STEPS as u32)
                        .filter(|&t| {
                            PassForm::of::<F>(t) == PassForm::Columns
                                && pass_candidates::<F>(&self.gpu, PassForm::Columns, pass, t)
                                    .is_ok_and(|c| !c.is_empty())
                        })
                        .collect()
                })
                .clone();
            for &t in &weighed {
                if info.pass_report(t).is_none() {
                    return match t <= max_steps {
                        true => self.run3d_temporal(pass, f, t, info).map(|()| t),
                        false => self.run3d(r, f, info).map(|()| 1),
                    };
                }
            }
            let single_ms = info.report().map_or(f64::NAN, |r| r.best_ms);
            let best_pass = weighed
                .into_iter()
                .filter_map(|t| info.pass_report(t).map(|p| (t, p.best_ms, p.best)))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            info.choice = Some(match best_pass {
                Some((t, ms, shape)) if ms < single_ms => StepsChoice {
                    steps: t,
                    pass: Some((PassForm::Columns, shape)),
                    ms_per_step: ms,
                    single_ms,
                    best_pass: Some((t, ms)),
                },
                _ => StepsChoice {
                    steps: 1,
                    pass: None,
                    ms_per_step: single_ms,
                    single_ms,
                    best_pass: best_pass.map(|(t, ms, _)| (t, ms)),
                },
            });
        }
        let t = info.choice.as_ref().map_or(1, |c| c.steps);
        match t > 1 && t <= max_steps {
            true => self.run3d_temporal(pass, f, t, info).map(|()| t),
            false => self.run3d(r, f, info).map(|()| 1),
        }
    }

    fn run3d_sum<F: SumUpdate3D + GpuEntry>(
        &self,
        r: &LoopRange,
        f: &F,
        info: &mut AutoTuningInfo,
        out: &mut DeviceField<f64>,
        slot: usize,
    ) -> Result<()> {
        let precision = <F::Real as lattice_gpu_kernels::device::math::Real>::NAME;
        let sum = SumTarget::new(&self.dots, out, slot)?;
        self.run(&KernelInfo::of3d::<F>(), precision, r, f, info, Some(sum))
    }

    fn run2d<F: PointUpdate2D + GpuEntry>(
        &self,
        r: &LoopRange,
        f: &F,
        info: &mut AutoTuningInfo,
    ) -> Result<()> {
        let precision = <F::Real as lattice_gpu_kernels::device::math::Real>::NAME;
        self.run(&KernelInfo::of2d::<F>(), precision, r, f, info, None)
    }

    type Recording = cudarc::driver::CudaGraph;

    /// Only tuned loops may be recorded: a loop still tuning times its candidates and waits.
    fn record(
        &self,
        work: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Option<cudarc::driver::CudaGraph>> {
        super::device::record(&self.gpu, work).map(Some)
    }

    fn replay(&self, graph: &cudarc::driver::CudaGraph) -> Result<()> {
        super::device::replay(graph)
    }

    /// Block programs are not tuned: one block, as many threads as the kernel takes.
    fn run_block<P: BlockProgram + GpuEntry>(&self, p: &P) -> Result<()> {
        super::device::launch_block(&self.gpu, p)
    }

    fn synchronize(&self) -> Result<()> {
        self.gpu.synchronize()
    }

    fn dot(&self, a: &DeviceField<f64>, b: &DeviceField<f64>) -> Result<f64> {
        super::device::device_dot(&self.gpu, &self.dots, a, b)
    }

    fn device(&self) -> Option<&Arc<Gpu>> {
        Some(&self.gpu)
    }

    fn first_non_finite<T: Element>(&self, f: &DeviceField<T>) -> Result<Option<usize>> {
        f.first_non_finite()
    }

    fn dot_into(
        &self,
        a: &DeviceField<f64>,
        b: &DeviceField<f64>,
        out: &mut DeviceField<f64>,
        slot: usize,
    ) -> Result<()> {
        super::device::device_dot_into(&self.gpu, &self.dots, a, b, out, slot)
    }

    fn tuning(site: &AutoTuningInfo) -> Option<&TuningReport> {
        site.report()
    }

    fn tuning_progress(site: &AutoTuningInfo) -> Option<(usize, usize)> {
        site.progress()
    }

    fn steps_choice(site: &AutoTuningInfo) -> Option<&StepsChoice> {
        site.choice()
    }

    fn tunes(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Dims;

    #[test]
    fn table1_has_150_named_configs() {
        let s = TuneSpace::table1();
        let c = s.configs();
        assert_eq!(c.len(), 6 * 5 * 5);
        assert_eq!(
            LaunchShape::from_params(&c[0]),
            Some(LaunchShape {
                block_x: 4,
                block_y: 1,
                march: 1,
                variant: Variant::Plain
            })
        );
        let last = LaunchShape::from_params(c.last().unwrap()).unwrap();
        assert_eq!(
            last,
            LaunchShape {
                block_x: 128,
                block_y: 16,
                march: 16,
                variant: Variant::Plain
            }
        );
        let s = s.with("unroll", vec![1, 2]).with("march", vec![4]);
        assert_eq!(s.configs().len(), 6 * 5 * 2);
        assert!(s
            .configs()
            .iter()
            .all(|c| c.iter().any(|(n, v)| n == "march" && *v == 4)));
    }

    /// A 3-D kernel with every variant, radius 1, f32; and a 2-D one.
    fn kernels() -> (KernelInfo, KernelInfo) {
        let k3 = KernelInfo {
            module: lattice_gpu_kernels::MODULE,
            entries: [
                Some("k3"),
                Some("k3_zqueue"),
                Some("k3_tiled"),
                Some("k3_vector"),
            ],
            radius: [1, 1, 1],
            elem_bytes: 4,
            dims: Dims::Three,
            sums: false,
            point_flops: 13,
            point_bytes: 8,
        };
        let k2 = KernelInfo {
            module: lattice_gpu_kernels::MODULE,
            entries: [Some("k2"), None, None, None],
            radius: [1, 1, 0],
            elem_bytes: 4,
            dims: Dims::Two,
            sums: false,
            point_flops: 0,
            point_bytes: 0,
        };
        (k3, k2)
    }

    fn range(e: [u32; 3]) -> LoopRange {
        LoopRange {
            n: [e[0] + 2, e[1] + 2, e[2] + 2],
            begin: [1; 3],
            end: [e[0] + 1, e[1] + 1, e[2] + 1],
        }
    }

    #[test]
    fn variant_is_a_tuning_parameter_of_kernels_that_have_it() {
        let (k3, k2) = kernels();
        let r = range([256, 256, 256]);
        let space = TuneSpace::table1_all_variants();
        assert_eq!(space.variants_for(&k3), Variant::ALL.to_vec());
        assert_eq!(space.variants_for(&k2), vec![Variant::Plain]);
        let all = tune_candidates(&space, &r, &k3, 1024);
        let plain = tune_candidates(&TuneSpace::table1(), &r, &k3, 1024);
        // 150 shapes less the five 128x16 ones (2048 threads), per variant; the vector variant's
        // threads take 4 points each (f32), so its 128-wide blocks, 512 points, are left out too.
        assert_eq!(plain.len(), 145);
        assert_eq!(all.len(), 3 * 145 + 125);
        for v in Variant::ALL {
            let only = tune_candidates(&space.clone().with_variants(&[v]), &r, &k3, 1024);
            assert_eq!(only.len(), if v == Variant::Vector { 125 } else { 145 });
            assert!(only.iter().all(|s| s.variant == v));
            assert!(all.iter().filter(|s| s.variant == v).eq(only.iter()));
        }
        // A 2-D kernel keeps its plain candidates only.
        let r2 = LoopRange {
            n: [335, 259, 1],
            begin: [1, 1, 0],
            end: [334, 258, 1],
        };
        let c2 = tune_candidates(&space, &r2, &k2, 1024);
        assert!(c2.len() >= 100 && c2.iter().all(|s| s.variant == Variant::Plain));
        // Forcing a variant it lacks leaves it its plain variant.
        let forced = TuneSpace::table1().with_variants(&[Variant::Tiled]);
        assert_eq!(forced.variants_for(&k2), vec![Variant::Plain]);
        assert_eq!(tune_candidates(&forced, &r2, &k2, 1024), c2);
    }

    #[test]
    fn tiled_launch_gets_its_shared_memory_and_others_none() {
        let (k3, k2) = kernels();
        let r = range([37, 29, 23]);
        let shape = LaunchShape {
            block_x: 32,
            block_y: 4,
            march: 4,
            variant: Variant::Tiled,
        };
        let cfg = shape.config(&r, &k3, 1024).unwrap();
        assert_eq!(cfg.shared_mem_bytes, 2 * 34 * 6 * 4);
        assert_eq!(cfg.grid_dim, (2, 8, 6));
        let cfg = shape
            .with_variant(Variant::ZQueue)
            .config(&r, &k3, 1024)
            .unwrap();
        assert_eq!(cfg.shared_mem_bytes, 0);
        let e = shape.config(&r, &k2, 1024).unwrap_err().to_string();
        assert!(e.contains("k2") && e.contains("no tiled variant"), "{e}");
        // A radius-8 f64 tile of 128x8 threads needs 2 * 144 * 24 * 8 = 55296 bytes: over 48 KiB.
        let wide = KernelInfo {
            radius: [8, 8, 1],
            elem_bytes: 8,
            ..k3
        };
        let big = LaunchShape {
            block_x: 128,
            block_y: 8,
            ..shape
        };
        let e = big.config(&r, &wide, 1024).unwrap_err().to_string();
        assert!(e.contains("shared memory"), "{e}");
        // A summing kernel reduces over whole warps: (16,2) is one, (16,1) half of one.
        let sums = KernelInfo { sums: true, ..k3 };
        let half = LaunchShape {
            block_x: 16,
            block_y: 1,
            ..shape
        };
        assert!(LaunchShape { block_y: 2, ..half }
            .config(&r, &sums, 1024)
            .is_ok());
        let e = half.config(&r, &sums, 1024).unwrap_err().to_string();
        assert!(e.contains("multiple of 32 threads"), "{e}");
        assert!(half.config(&r, &k3, 1024).is_ok());
    }

    #[test]
    fn shape_params_round_trip_and_old_entries_read_as_plain() {
        for v in Variant::ALL {
            let s = LaunchShape::FIXED.with_variant(v);
            assert_eq!(LaunchShape::from_params(&s.to_params()), Some(s));
        }
        let old: Vec<(String, u32)> = LaunchShape::FIXED.to_params()[..3].to_vec();
        assert_eq!(LaunchShape::from_params(&old), Some(LaunchShape::FIXED));
        let mut bad = LaunchShape::FIXED.to_params();
        bad[3].1 = 7;
        assert_eq!(LaunchShape::from_params(&bad), None);
        assert_eq!(LaunchShape::FIXED.to_string(), "(128,1)/march=2");
        assert_eq!(
            LaunchShape::FIXED.with_variant(Variant::Tiled).to_string(),
            "(128,1)/march=2/tiled"
        );
    }

    #[test]
    fn tune_key_names_the_variants_tuned_over() {
        let (k3, _) = kernels();
        let r = range([8, 8, 8]);
        let key = |v: &[Variant]| tune_key(&k3, v, &r, "f32", "GPU", 1).kernel;
        assert_eq!(key(&[Variant::Plain]), "k3");
        assert_eq!(key(&Variant::ALL), "k3[plain+zqueue+tiled+vector]");
        assert_eq!(key(&[Variant::Tiled]), "k3[tiled]");
        assert_ne!(key(&[Variant::ZQueue]), key(&[Variant::Tiled]));
        let k = tune_key(&k3, &[Variant::Plain], &r, "f32", "GPU", 1);
        assert_eq!(k.size, "10x10x10[1:9,1:9,1:9]");
        // Another module's kernel of the same entry name has a key of its own.
        let mine = KernelInfo {
            module: "my_kernels",
            ..k3
        };
        assert_eq!(
            tune_key(&mine, &Variant::ALL, &r, "f32", "GPU", 2).kernel,
            "my_kernels::k3[plain+zqueue+tiled+vector]"
        );
    }

    #[test]
    fn a_call_site_costs_its_points_work_over_its_range() {
        let (k3, k2) = kernels();
        let c = range_cost(&k3, &range([8, 4, 2]));
        assert_eq!(
            (c.points, c.flops, c.bytes),
            (64.0, 13.0 * 64.0, 8.0 * 64.0)
        );
        let r2 = LoopRange {
            n: [12, 7, 1],
            begin: [2, 2, 0],
            end: [10, 5, 1],
        };
        assert_eq!(range_cost(&k2, &r2).points, 24.0);
        assert_eq!(range_cost(&k2, &r2).bytes, 0.0);
    }

    #[test]
    fn overhead_is_time_beyond_best() {
        let r = TuningReport {
            best: LaunchShape::FIXED,
            best_ms: 1.0,
            candidates: 2,
            steps: 4,
            tuning_ms: 6.5,
            from_cache: false,
            cost: Cost::UNKNOWN,
        };
        assert_eq!(r.overhead_ms(), 2.5);
    }
}
