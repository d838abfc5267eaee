//! The CPU engine: the same point updates, run by rayon over planes (3-D) or rows (2-D).

use lattice_gpu_kernels::stencil::{
    ArrayIndex2D, ArrayIndex3D, BlockProgram, GpuEntry, LoopRange, PassRange, PointUpdate2D,
    PointUpdate3D, Serial, StencilUpdate3D, SumUpdate3D, ZQUEUE_MAX_RADIUS,
};
use rayon::prelude::*;

use super::vectors::{avx2, has_avx2_fma};
use super::LoopEngine;
use crate::error::{Error, Result};
use crate::field::{Element, Field, HostField, Shape};

/// Runs point updates on the CPU, one rayon task per z plane (3-D) or row (2-D).
#[derive(Clone, Copy, Debug, Default)]
pub struct HostLoopEngine;

/// The steps a pass of [`HostLoopEngine`]'s [`run3d_steps`](LoopEngine::run3d_steps) advances
/// where the fields leave the cache: on the 16 Xeon cores of an H200 machine, passes of three steps
/// of the 7-point diffusion ran 2.25x the single step at 512^3 in f32 and 2.22x in f64, 1.18x and
/// 1.32x at 256^3 (docs/BENCHMARKS.md). The CPU engine does not tune.
pub const HOST_PASS_STEPS: u32 = 3;

/// Visits the points of plane `k` of `r` in order, x fastest.
#[inline(always)]
fn plane(r: &LoopRange, k: u32, mut point: impl FnMut(&ArrayIndex3D)) {
    let mut idx = ArrayIndex3D::new(r.n);
    for j in r.begin[1]..r.end[1] {
        for i in r.begin[0]..r.end[0] {
            idx.set(i, j, k);
            point(&idx);
        }
    }
}

avx2! {
    /// The points of plane `k` of `r` updated by `f`, with AVX2 and FMA.
    fn plane_avx2<F: PointUpdate3D>(r: &LoopRange, k: u32, f: &F) {
        plane(r, k, |idx| f.update(idx))
    }
}

impl LoopEngine for HostLoopEngine {
    type Field<T: Element> = HostField<T>;
    type Site = ();

    fn describe(&self) -> String {
        format!("CPU ({} threads)", rayon::current_num_threads())
    }

    fn check_fits(&self, bytes: u64, what: &str) -> Result<()> {
        match crate::memory::available_host() {
            Some(free) if bytes > free => Err(Error::OutOfHostMemory {
                what: what.to_string(),
                needed: bytes,
                free,
            }),
            _ => Ok(()),
        }
    }

    fn alloc<T: Element>(&self, shape: Shape) -> Result<HostField<T>> {
        Ok(HostField::zeros(shape))
    }

    fn run3d<F: PointUpdate3D + GpuEntry>(&self, r: &LoopRange, f: &F, _: &mut ()) -> Result<()> {
        (r.begin[2]..r.end[2])
            .into_par_iter()
            .for_each(|k| match has_avx2_fma() {
                // SAFETY: the CPU has AVX2 and FMA.
                true => unsafe { plane_avx2(r, k, f) },
                false => plane(r, k, |idx| f.update(idx)),
            });
        Ok(())
    }

    /// The GPU's blocked schedule in a CPU's form ([`wavefront`](super::wavefront)): one rayon task
    /// per tile of whole rows and slab of z, its levels between in a cache-sized scratch.
    fn run3d_temporal<F: StencilUpdate3D + GpuEntry>(
        &self,
        pass: &PassRange,
        f: &F,
        steps: u32,
        _: &mut (),
    ) -> Result<()> {
        if pass.signal.counter != 0 {
            return Err(Error::InvalidSetting(
                "the CPU engine's passes count no end planes for a halo exchange: signalled passes \
                 run on the GPU"
                    .into(),
            ));
        }
        let tile = super::wavefront::host_tile::<F>(&pass.out, steps.max(1));
        super::wavefront::host_pass(f, pass, steps, tile)
    }

    /// Passes of up to [`untuned_steps`](LoopEngine::untuned_steps) steps, single steps where that
    /// is 1.
    fn run3d_steps<F: StencilUpdate3D + GpuEntry>(
        &self,
        pass: &PassRange,
        f: &F,
        max_steps: u32,
        site: &mut (),
    ) -> Result<u32> {
        match max_steps.min(self.untuned_steps::<F>(pass)) {
            t if t > 1 => self.run3d_temporal(pass, f, t, site).map(|()| t),
            _ => self.run3d(&pass.out, f, site).map(|()| 1),
        }
    }

    /// [`HOST_PASS_STEPS`] where the update has a temporal entry and a z radius the blocked pass
    /// takes, and its two fields exceed half the CPU's last-level cache (or its size is unknown);
    /// else 1, as the passes save little where a cache holds the fields: on 16 Xeon cores with 300
    /// MiB of L3, passes of three ran 0.85x to 1.18x the single step (three runs) with the 170 MB of
    /// f32 fields at 256^3 (rows padded), 1.08x to 1.52x with the 307 MB of f64, and 2.1x to 2.4x
    /// at 512^3. Half the cache leaves room for the rest of the run.
    fn untuned_steps<F: StencilUpdate3D + GpuEntry>(&self, pass: &PassRange) -> u32 {
        let fields = 2
            * pass.live.n.iter().map(|&n| n as u64).product::<u64>()
            * std::mem::size_of::<F::Real>() as u64;
        let beyond_cache = crate::memory::last_level_cache().is_none_or(|c| fields > c / 2);
        match F::TEMPORAL_ENTRY.is_some() && F::RADIUS[2] <= ZQUEUE_MAX_RADIUS && beyond_cache {
            true => HOST_PASS_STEPS,
            false => 1,
        }
    }

    fn run3d_sum<F: SumUpdate3D + GpuEntry>(
        &self,
        r: &LoopRange,
        f: &F,
        _: &mut (),
        out: &mut HostField<f64>,
        slot: usize,
    ) -> Result<()> {
        // Each plane summed in order, then the planes in order: the same bits whatever the threads.
        let planes: Vec<f64> = (r.begin[2]..r.end[2])
            .into_par_iter()
            .map(|k| {
                let mut acc = 0.0;
                plane(r, k, |idx| acc += f.update_term(idx));
                acc
            })
            .collect();
        out.upload_span(slot, &[planes.iter().sum()])
    }

    type Recording = ();

    fn record(&self, _: &mut dyn FnMut() -> Result<()>) -> Result<Option<()>> {
        Ok(None)
    }

    fn replay(&self, _: &()) -> Result<()> {
        Ok(())
    }

    fn run_block<P: BlockProgram + GpuEntry>(&self, p: &P) -> Result<()> {
        p.run(&Serial);
        Ok(())
    }

    fn run2d<F: PointUpdate2D + GpuEntry>(&self, r: &LoopRange, f: &F, _: &mut ()) -> Result<()> {
        (r.begin[1]..r.end[1]).into_par_iter().for_each(|j| {
            let mut idx = ArrayIndex2D::new([r.n[0], r.n[1]]);
            for i in r.begin[0]..r.end[0] {
                idx.set(i, j);
                f.update(&idx);
            }
        });
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn first_non_finite<T: Element>(&self, f: &HostField<T>) -> Result<Option<usize>> {
        Ok(crate::health::first_non_finite(f.as_slice()))
    }

    fn dot(&self, a: &HostField<f64>, b: &HostField<f64>) -> Result<f64> {
        // Fixed chunks summed in order: the result does not depend on the thread count.
        let partials: Vec<f64> = a
            .as_slice()
            .par_chunks(1 << 14)
            .zip(b.as_slice().par_chunks(1 << 14))
            .map(|(x, y)| x.iter().zip(y).map(|(x, y)| x * y).sum::<f64>())
            .collect();
        Ok(partials.iter().sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_host_allocation_is_refused() {
        if crate::memory::available_host().is_none() {
            return;
        }
        let e = HostLoopEngine
            .check_fits(1 << 60, "a test field")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a test field") && e.contains("GiB"), "{e}");
        HostLoopEngine.check_fits(1 << 20, "a small field").unwrap();
    }

    #[test]
    fn passes_run_where_the_fields_leave_the_cache() {
        use lattice_gpu_kernels::diffusion::Diffusion3d;
        let pass = |n: u32| {
            PassRange::whole(LoopRange {
                n: [n; 3],
                begin: [1; 3],
                end: [n - 1; 3],
            })
        };
        let steps = |n| HostLoopEngine.untuned_steps::<Diffusion3d<f32>>(&pass(n));
        // 32 GiB of fields leave any cache; 128 KiB stay in any last level that can be read.
        assert_eq!(steps(2048), HOST_PASS_STEPS);
        let small = match crate::memory::last_level_cache() {
            Some(_) => 1,
            None => HOST_PASS_STEPS,
        };
        assert_eq!(steps(32), small);
    }
}
