//! The diffusion benchmark of the paper's table: for each grid and precision, the launch shape the tuner
//! chose, its GLUPS and effective bandwidth against a device-to-device copy measured in the same run, and
//! the fixed (128,1)/march=2 launch for comparison. Kernels are timed with CUDA events, after tuning.
//! Each grid can be tuned several times, over every kernel variant ([`VariantSet::Auto`]) and over each
//! one alone, so one run shows what each variant reaches and what the tuner picks.

use std::sync::Arc;

use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::engine::{
    launch_pass, pass_candidates, LoopEngine, PassForm, Rate, TuningReport, Variant,
};
use lattice_gpu_host::{
    DeviceAutoTuningLoopEngine, DeviceField, DeviceLoopEngine, Element, Field, Gpu, LaunchShape,
    Loop3D, PassRange,
};
use lattice_gpu_kernels::diffusion::{Diffusion3d, DiffusionReal};

use crate::{queue_steps, Problem, Result};

/// The kernel variants a benchmark row is tuned over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VariantSet {
    /// Every variant, the tuner choosing (what applications get by default).
    Auto,
    /// One variant, forced.
    Only(Variant),
}

impl VariantSet {
    /// `"auto"` or the variant's name.
    pub fn label(self) -> &'static str {
        match self {
            VariantSet::Auto => "auto",
            VariantSet::Only(v) => v.name(),
        }
    }

    /// The set named `s` (`auto`, `plain`, `zqueue`, `tiled`, `vector`).
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(VariantSet::Auto),
            _ => Variant::from_name(s).map(VariantSet::Only).ok_or_else(|| {
                format!("`{s}` is not a kernel variant: use auto, plain, zqueue, tiled or vector")
            }),
        }
    }

    /// The variants tuned over.
    pub fn variants(self) -> Vec<Variant> {
        match self {
            VariantSet::Auto => Variant::ALL.to_vec(),
            VariantSet::Only(v) => vec![v],
        }
    }
}

/// One row of the table.
#[derive(Clone, Debug)]
pub struct BenchRow {
    /// Interior size.
    pub size: [usize; 3],
    /// "f32" or "f64".
    pub precision: &'static str,
    /// The variants tuned over.
    pub variants: VariantSet,
    /// What the tuner found.
    pub tuning: TuningReport,
    /// Median ms per step with the tuned shape.
    pub tuned_ms: f64,
    /// Median ms per step with the fixed shape.
    pub fixed_ms: f64,
    /// Median ms per step with the tuned shape, a batch of steps recorded once and replayed as a graph
    /// (the GPU's gaps between launches without the host queueing each).
    pub tuned_graph_ms: f64,
    /// The same with the fixed shape.
    pub fixed_graph_ms: f64,
}

impl BenchRow {
    /// The rates of a step of `ms` milliseconds against a copy bandwidth of `copy` GB/s, from the
    /// update's stated work (10 flops per point, each point read and written once).
    pub fn rate(&self, ms: f64, copy: f64) -> Rate {
        self.tuning.cost.rate(ms, copy)
    }
    /// Giga lattice-point updates per second, tuned.
    pub fn glups(&self) -> f64 {
        self.rate(self.tuned_ms, 1.0).gpoints
    }
    /// GFLOPS, tuned.
    pub fn gflops(&self) -> f64 {
        self.rate(self.tuned_ms, 1.0).gflops
    }
    /// Effective bandwidth, GB/s, tuned.
    pub fn gbs(&self) -> f64 {
        self.rate(self.tuned_ms, 1.0).gbs
    }
    /// GLUPS of the fixed launch.
    pub fn fixed_glups(&self) -> f64 {
        self.rate(self.fixed_ms, 1.0).gpoints
    }
    /// GLUPS, tuned, steps replayed from a graph.
    pub fn graph_glups(&self) -> f64 {
        self.rate(self.tuned_graph_ms, 1.0).gpoints
    }
}

fn median(mut ms: Vec<f64>) -> f64 {
    ms.sort_by(f64::total_cmp);
    ms[ms.len() / 2]
}

/// Median ms per step over `batches` event-timed batches of `per_batch` steps.
pub fn time_steps<E: LoopEngine, T: Element + DiffusionReal>(
    gpu: &Gpu,
    lp: &mut Loop3D<'_, E>,
    f: &mut E::Field<T>,
    g: &mut E::Field<T>,
    problem: &Problem,
    per_batch: usize,
    batches: usize,
) -> Result<f64> {
    let mut times = Vec::with_capacity(batches);
    for _ in 0..batches {
        let ms = gpu.time_ms(|| queue_steps(lp, f, g, problem, per_batch, 1))?;
        times.push(ms / per_batch as f64);
    }
    Ok(median(times))
}

/// Median ms per step over `batches` event-timed replays of `per_batch` steps (rounded up to even, so
/// that the fields end where they started) recorded once on `engine`, which must record (a GPU engine).
#[allow(clippy::too_many_arguments)]
pub fn time_recorded_steps<E: LoopEngine, T: Element + DiffusionReal>(
    gpu: &Gpu,
    engine: &E,
    lp: &mut Loop3D<'_, E>,
    f: &mut E::Field<T>,
    g: &mut E::Field<T>,
    problem: &Problem,
    per_batch: usize,
    batches: usize,
) -> Result<f64> {
    let per_batch = per_batch.next_multiple_of(2);
    let recording = engine
        .record(&mut || queue_steps(lp, f, g, problem, per_batch, 1))?
        .ok_or_else(|| {
            lattice_gpu_host::Error::NoGpu(format!("{} cannot record a graph", engine.describe()))
        })?;
    let mut times = Vec::with_capacity(batches);
    for _ in 0..batches {
        times.push(gpu.time_ms(|| engine.replay(&recording))? / per_batch as f64);
    }
    Ok(median(times))
}

/// Runs real steps on an auto-tuned loop until its tuning has finished; the result.
pub fn run_until_tuned<T: Element + DiffusionReal>(
    lp: &mut Loop3D<'_, DeviceAutoTuningLoopEngine>,
    f: &mut DeviceField<T>,
    g: &mut DeviceField<T>,
    problem: &Problem,
) -> Result<TuningReport> {
    loop {
        if let Some(report) = lp.info().report() {
            return Ok(report.clone());
        }
        lp.run(&problem.update(f, g))?;
        std::mem::swap(f, g);
    }
}

/// Benchmarks one grid and precision on `gpu`, tuned over every variant.
pub fn bench_one<T: Element + DiffusionReal>(gpu: &Arc<Gpu>, size: [usize; 3]) -> Result<BenchRow> {
    let mut rows = bench_variants::<T>(gpu, size, &[VariantSet::Auto])?;
    Ok(rows.remove(0))
}

/// Benchmarks one grid and precision on `gpu`: one row per entry of `sets`, each tuned afresh (in
/// memory) over its variants and timed; the fixed launch is timed once and shared by the rows.
pub fn bench_variants<T: Element + DiffusionReal>(
    gpu: &Arc<Gpu>,
    size: [usize; 3],
    sets: &[VariantSet],
) -> Result<Vec<BenchRow>> {
    let problem = Problem::new(size, 0.1, None)?;
    let shape = problem.shape::<T>()?;
    gpu.check_fits(2 * shape.bytes::<T>(), "the benchmark's two fields")?;
    let fixed = DeviceLoopEngine::new(gpu.clone(), LaunchShape::FIXED);
    let initial = shape.embed(&problem.sine_mode::<T>(), T::ZERO)?;
    let mut f = fixed.alloc::<T>(shape)?;
    let mut g = fixed.alloc::<T>(shape)?;
    f.upload(&initial)?;
    g.upload(&initial)?;

    let mut lp = Loop3D::new(&fixed, shape.interior_range())?;
    let fixed_ms = time_steps(gpu, &mut lp, &mut f, &mut g, &problem, 3, 1)?;
    let per_batch = ((20.0 / fixed_ms.max(1e-3)) as usize).clamp(3, 2000);
    let fixed_ms = time_steps(gpu, &mut lp, &mut f, &mut g, &problem, per_batch, 5)?;
    let fixed_graph_ms =
        time_recorded_steps(gpu, &fixed, &mut lp, &mut f, &mut g, &problem, per_batch, 5)?;

    let mut rows = Vec::with_capacity(sets.len());
    for &set in sets {
        let tuner = DeviceAutoTuningLoopEngine::new(gpu.clone(), TuneCache::in_memory())
            .variants(&set.variants());
        let mut lp = Loop3D::new(&tuner, shape.interior_range())?;
        let tuning = run_until_tuned(&mut lp, &mut f, &mut g, &problem)?;
        // Batches of about 20 ms, so event resolution and launch gaps do not matter.
        let per_batch = ((20.0 / tuning.best_ms.max(1e-3)) as usize).clamp(5, 2000);
        let tuned_ms = time_steps(gpu, &mut lp, &mut f, &mut g, &problem, per_batch, 7)?;
        let tuned_graph_ms =
            time_recorded_steps(gpu, &tuner, &mut lp, &mut f, &mut g, &problem, per_batch, 7)?;
        rows.push(BenchRow {
            size,
            precision: T::NAME,
            variants: set,
            tuning,
            tuned_ms,
            fixed_ms,
            tuned_graph_ms,
            fixed_graph_ms,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_sets_parse_and_name_themselves() {
        for name in ["auto", "plain", "zqueue", "tiled", "vector"] {
            assert_eq!(VariantSet::parse(name).unwrap().label(), name);
        }
        assert_eq!(VariantSet::Auto.variants(), Variant::ALL.to_vec());
        assert_eq!(
            VariantSet::parse("tiled").unwrap().variants(),
            vec![Variant::Tiled]
        );
        let e = VariantSet::parse("fast").unwrap_err();
        assert!(e.contains("fast") && e.contains("zqueue"), "{e}");
    }
}

/// The best launch found for a temporally blocked pass of `steps` steps (issue 37: not yet in the
/// tuner; a sweep over a few block shapes and marches).
#[derive(Clone, Debug)]
pub struct TemporalRow {
    /// Interior size.
    pub size: [usize; 3],
    /// "f32" or "f64".
    pub precision: &'static str,
    /// Steps per pass.
    pub steps: u32,
    /// The form and fastest launch of the sweep: `(32,4)/march=32` for the general form,
    /// `columns (32,16)/march=64` for the column form.
    pub launch: String,
    /// Median ms per step (a pass's time over its steps).
    pub ms_per_step: f64,
    /// Lattice points updated per step.
    pub points: u64,
    /// Bytes a single step must move per point (read and write once).
    pub point_bytes: u64,
}

impl TemporalRow {
    /// Giga lattice-point updates per second.
    pub fn glups(&self) -> f64 {
        self.points as f64 / (self.ms_per_step * 1e6)
    }
    /// The single-step bandwidth that many updates would need (GLUPS times a step's bytes per point):
    /// above the copy bandwidth where the blocking pays.
    pub fn equivalent_gbs(&self) -> f64 {
        self.glups() * self.point_bytes as f64
    }
}

/// Times temporally blocked passes of `steps` steps (each of `steps_list`) of the diffusion update on
/// one grid: for each, in the general form and (up to 4 steps) the column form, the fastest of the
/// launches the auto-tuner weighs ([`pass_candidates`]), the fields swapping after each pass; a row
/// per form.
pub fn bench_temporal<T: Element + DiffusionReal>(
    gpu: &Arc<Gpu>,
    size: [usize; 3],
    steps_list: &[u32],
) -> Result<Vec<TemporalRow>> {
    let problem = Problem::new(size, 0.1, None)?;
    let shape = problem.shape::<T>()?;
    gpu.check_fits(2 * shape.bytes::<T>(), "the benchmark's two fields")?;
    let range = shape.interior_range();
    let engine = DeviceLoopEngine::new(gpu.clone(), LaunchShape::FIXED);
    let initial = shape.embed(&problem.sine_mode::<T>(), T::ZERO)?;
    let mut f = engine.alloc::<T>(shape)?;
    let mut g = engine.alloc::<T>(shape)?;
    f.upload(&initial)?;
    g.upload(&initial)?;
    let mut rows = Vec::new();
    for &steps in steps_list {
        for form in [PassForm::General, PassForm::Columns] {
            if form == PassForm::Columns && PassForm::of::<Diffusion3d<T>>(steps) != form {
                continue;
            }
            let whole = PassRange::whole(range);
            let candidates = pass_candidates::<Diffusion3d<T>>(gpu, form, &whole, steps)?;
            let mut best: Option<(LaunchShape, f64)> = None;
            for launch in candidates {
                let mut pass = |f: &mut DeviceField<T>, g: &mut DeviceField<T>| {
                    launch_pass(gpu, &problem.update(f, g), &whole, form, launch, steps)?;
                    std::mem::swap(f, g);
                    Ok::<_, lattice_gpu_host::Error>(())
                };
                let Some(ms) = time_passes(gpu, &mut f, &mut g, steps, &mut pass)? else {
                    continue;
                };
                if best.is_none_or(|(_, b)| ms < b) {
                    best = Some((launch, ms));
                }
            }
            if let Some((shape, ms_per_step)) = best {
                rows.push(TemporalRow {
                    size,
                    precision: T::NAME,
                    steps,
                    launch: format!("{} {}", form.name(), shape),
                    ms_per_step,
                    points: size.iter().map(|&n| n as u64).product(),
                    point_bytes: 2 * std::mem::size_of::<T>() as u64,
                });
            }
        }
    }
    Ok(rows)
}

/// The median ms per step of three timings of four passes of `steps` steps, after an untimed one;
/// `None` where the launch is refused as too large (a block beyond the entry's own thread limit, whose
/// registers allow fewer threads than the single step's, or beyond its shared memory): not a shape of
/// the sweep.
fn time_passes<T: Element>(
    gpu: &Arc<Gpu>,
    f: &mut DeviceField<T>,
    g: &mut DeviceField<T>,
    steps: u32,
    pass: &mut impl FnMut(&mut DeviceField<T>, &mut DeviceField<T>) -> lattice_gpu_host::Result<()>,
) -> Result<Option<f64>> {
    match pass(f, g) {
        Err(lattice_gpu_host::Error::InvalidSize(_)) => return Ok(None),
        r => r?,
    }
    let mut times = Vec::new();
    for _ in 0..3 {
        let passes = 4;
        let ms = gpu.time_ms(|| {
            for _ in 0..passes {
                pass(f, g)?;
            }
            Ok(())
        })?;
        times.push(ms / (passes * steps) as f64);
    }
    Ok(Some(median(times)))
}
