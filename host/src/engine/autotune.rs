//! The auto-tuning GPU engine (the paper's `DeviceAutoTuningLoopEngine`).
//!
//! The first calls at a call site each run the real work with the next candidate launch shape, timed with
//! CUDA events; so every timed step is a real step of the simulation. Once every candidate has been timed
//! `reps` times (round robin, so clock drift spreads evenly), the fastest median wins, is used from then
//! on and is stored in the tune cache, keyed by kernel, range, precision, device and PTX hash, so the next
//! run of the program starts tuned.

use std::sync::{Arc, Mutex};

use lattice_gpu_kernels::device::math::Real;
use lattice_gpu_kernels::stencil::{GpuEntry, LoopRange, PointUpdate2D, PointUpdate3D};

use super::device::{launch, Dims, LaunchShape};
use super::tunecache::{TuneCache, TuneEntry, TuneKey};
use super::LoopEngine;
use crate::error::Result;
use crate::field::{DeviceField, Element, Shape};
use crate::gpu::Gpu;

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

    /// This space with one more parameter (replacing one of the same name).
    pub fn with(mut self, name: &'static str, values: Vec<u32>) -> Self {
        self.params.retain(|p| p.name != name);
        self.params.push(TuneParam { name, values });
        self
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
}

impl TuningReport {
    /// Time lost to tuning: the tuning steps' time beyond what the best shape would have taken.
    pub fn overhead_ms(&self) -> f64 {
        (self.tuning_ms - self.steps as f64 * self.best_ms).max(0.0)
    }
}

struct Tuning {
    key: TuneKey,
    candidates: Vec<LaunchShape>,
    times: Vec<Vec<f64>>,
    step: usize,
    needed: usize,
    total_ms: f64,
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
            State::Tuning(t) => Some((t.step, t.needed)),
            _ => None,
        }
    }
}

/// Runs point updates on the GPU, tuning the launch shape per call site on the real work.
pub struct DeviceAutoTuningLoopEngine {
    gpu: Arc<Gpu>,
    space: TuneSpace,
    cache: Mutex<TuneCache>,
    retune: bool,
    reps: usize,
}

impl DeviceAutoTuningLoopEngine {
    /// A tuner on `gpu` over the paper's Table 1, storing results in `cache`, timing each candidate
    /// over 3 steps.
    pub fn new(gpu: Arc<Gpu>, cache: TuneCache) -> Self {
        Self {
            gpu,
            space: TuneSpace::table1(),
            cache: Mutex::new(cache),
            retune: false,
            reps: 3,
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

    /// Tunes over `space` instead of Table 1 (it must name `block_x`, `block_y` and `march`).
    pub fn space(mut self, space: TuneSpace) -> Self {
        self.space = space;
        self
    }

    /// The GPU.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The launch shapes worth timing for `range`: the space's configurations that the device accepts,
    /// less those that only add idle threads (a block or march longer than the range needs).
    pub fn candidates(&self, range: &LoopRange, dims: Dims) -> Vec<LaunchShape> {
        let e = range.extent();
        let last = if dims == Dims::Three { e[2] } else { e[1] };
        let fits = |v: u32, ext: u32, min: u32| v <= min.max(ext.next_power_of_two());
        self.space
            .configs()
            .iter()
            .filter_map(|c| LaunchShape::from_params(c))
            .filter(|s| {
                fits(s.block_x, e[0], 4) && fits(s.block_y, e[1], 1) && fits(s.march, last, 1)
            })
            .filter(|s| {
                s.config(range, dims, self.gpu.max_threads_per_block())
                    .is_ok()
            })
            .collect()
    }

    fn key<R: Real>(&self, entry: &str, r: &LoopRange) -> TuneKey {
        TuneKey {
            kernel: entry.to_string(),
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
            precision: R::NAME.to_string(),
            device: self.gpu.name().to_string(),
            ptx_hash: self.gpu.ptx_hash(),
        }
    }

    fn warn_cache(cache: &mut TuneCache) {
        for w in cache.take_warnings() {
            eprintln!("lattice-gpu: warning: {w}");
        }
    }

    fn start(&self, entry: &str, key: TuneKey, r: &LoopRange, dims: Dims) -> State {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let cached = if self.retune { None } else { cache.get(&key) };
        Self::warn_cache(&mut cache);
        let max = self.gpu.max_threads_per_block();
        if let Some(shape) = cached
            .as_ref()
            .and_then(|e| LaunchShape::from_params(&e.params))
            .filter(|s| s.config(r, dims, max).is_ok())
        {
            return State::Tuned(TuningReport {
                best: shape,
                best_ms: cached.map_or(0.0, |e| e.time_ms),
                candidates: 0,
                steps: 0,
                tuning_ms: 0.0,
                from_cache: true,
            });
        }
        let candidates = self.candidates(r, dims);
        if candidates.is_empty() {
            eprintln!(
                "lattice-gpu: warning: no tuning candidate fits {entry}; using {}",
                LaunchShape::FIXED
            );
            return State::Tuned(TuningReport {
                best: LaunchShape::FIXED,
                best_ms: 0.0,
                candidates: 0,
                steps: 0,
                tuning_ms: 0.0,
                from_cache: false,
            });
        }
        let times = (0..candidates.len())
            .map(|_| Vec::with_capacity(self.reps))
            .collect();
        State::Tuning(Tuning {
            key,
            needed: candidates.len() * self.reps,
            candidates,
            times,
            step: 0,
            total_ms: 0.0,
        })
    }

    fn run<F: Copy, R: Real>(
        &self,
        entry: &str,
        r: &LoopRange,
        f: &F,
        info: &mut AutoTuningInfo,
        dims: Dims,
    ) -> Result<()> {
        if matches!(info.state, State::Untuned) {
            let key = self.key::<R>(entry, r);
            info.state = self.start(entry, key, r, dims);
        }
        let t = match &mut info.state {
            State::Tuned(rep) => return launch(&self.gpu, entry, f, r, rep.best, dims),
            State::Tuning(t) => t,
            State::Untuned => unreachable!("tuning state was just set"),
        };
        let c = t.step % t.candidates.len();
        let ms = self
            .gpu
            .time_ms(|| launch(&self.gpu, entry, f, r, t.candidates[c], dims))?;
        t.times[c].push(ms);
        t.total_ms += ms;
        t.step += 1;
        if t.step == t.needed {
            let (best, best_ms) = t
                .candidates
                .iter()
                .zip(&mut t.times)
                .map(|(s, v)| {
                    v.sort_by(f64::total_cmp);
                    (*s, v[v.len() / 2])
                })
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .expect("at least one candidate");
            let entry_ = TuneEntry {
                params: best.to_params(),
                time_ms: best_ms,
            };
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = cache.insert(t.key.clone(), entry_) {
                let path = cache
                    .path()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                eprintln!("lattice-gpu: warning: could not save the tune cache {path}: {e}");
            }
            info.state = State::Tuned(TuningReport {
                best,
                best_ms,
                candidates: t.candidates.len(),
                steps: t.step,
                tuning_ms: t.total_ms,
                from_cache: false,
            });
        }
        Ok(())
    }
}

impl LoopEngine for DeviceAutoTuningLoopEngine {
    type Field<T: Element> = DeviceField<T>;
    type Site = AutoTuningInfo;

    fn describe(&self) -> String {
        format!("GPU {} (auto-tuned)", self.gpu.name())
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
        self.run::<F, F::Real>(F::ENTRY, r, f, info, Dims::Three)
    }

    fn run2d<F: PointUpdate2D + GpuEntry>(
        &self,
        r: &LoopRange,
        f: &F,
        info: &mut AutoTuningInfo,
    ) -> Result<()> {
        self.run::<F, F::Real>(F::ENTRY, r, f, info, Dims::Two)
    }

    fn synchronize(&self) -> Result<()> {
        self.gpu.synchronize()
    }

    fn tuning(site: &AutoTuningInfo) -> Option<&TuningReport> {
        site.report()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                march: 1
            })
        );
        let last = LaunchShape::from_params(c.last().unwrap()).unwrap();
        assert_eq!(
            last,
            LaunchShape {
                block_x: 128,
                block_y: 16,
                march: 16
            }
        );
        let s = s.with("unroll", vec![1, 2]).with("march", vec![4]);
        assert_eq!(s.configs().len(), 6 * 5 * 2);
        assert!(s
            .configs()
            .iter()
            .all(|c| c.iter().any(|(n, v)| n == "march" && *v == 4)));
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
        };
        assert_eq!(r.overhead_ms(), 2.5);
    }
}
