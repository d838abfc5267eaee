//! The CPU engine: the same point updates, run by rayon over planes (3-D) or rows (2-D).

use lattice_gpu_kernels::device::math::Real;
use lattice_gpu_kernels::device::shared::SharedPtr;
use lattice_gpu_kernels::stencil::{
    ArrayIndex2D, ArrayIndex3D, BlockProgram, GpuEntry, LoopRange, PassRange, PointUpdate2D,
    PointUpdate3D, Serial, StencilUpdate3D, SumUpdate3D, TemporalBlock, ThreadCoords, Variant,
};
use rayon::prelude::*;

use super::device::LaunchShape;
use super::LoopEngine;
use crate::error::{Error, Result};
use crate::field::{Element, Field, HostField, Shape};

/// The xy tile of the CPU engine's temporally blocked passes: 64 x 16 points, whose rings (four f32
/// steps: 83 KB) stay in a core's L2.
pub const HOST_TILE: [u32; 2] = [64, 16];

/// Runs point updates on the CPU, one rayon task per z plane (3-D) or row (2-D).
#[derive(Clone, Copy, Debug, Default)]
pub struct HostLoopEngine;

/// Visits the points of plane `k` of `r` in order, x fastest.
fn plane(r: &LoopRange, k: u32, mut point: impl FnMut(&ArrayIndex3D)) {
    let mut idx = ArrayIndex3D::new(r.n);
    for j in r.begin[1]..r.end[1] {
        for i in r.begin[0]..r.end[0] {
            idx.set(i, j, k);
            point(&idx);
        }
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
            .for_each(|k| plane(r, k, |idx| f.update(idx)));
        Ok(())
    }

    /// The blocked schedule the GPU runs ([`TemporalBlock`]), one rayon task per xy tile of
    /// [`HOST_TILE`], marching the whole z range with its rings in a scratch of its own (cache-sized:
    /// 83 KB for four f32 steps).
    fn run3d_temporal<F: StencilUpdate3D + GpuEntry>(
        &self,
        pass: &PassRange,
        f: &F,
        steps: u32,
        _: &mut (),
    ) -> Result<()> {
        let tile = LaunchShape {
            block_x: HOST_TILE[0],
            block_y: HOST_TILE[1],
            march: 1,
            variant: Variant::Plain,
        };
        let bytes = super::device::temporal_bytes::<F>(tile, steps, usize::MAX)?;
        let ext = pass.out.extent();
        let [tx, ty] = HOST_TILE;
        let (gx, gy) = (ext[0].div_ceil(tx), ext[1].div_ceil(ty));
        let len = bytes / std::mem::size_of::<F::Real>();
        (0..gx * gy).into_par_iter().for_each(|b| {
            let block_idx = [b % gx, b / gx, 0];
            let block = TemporalBlock::tiled(f, pass, HOST_TILE, ext[2], steps, block_idx, [1, 1]);
            let mut rings = vec![F::Real::ZERO; len];
            let shared = SharedPtr::from_host_ptr(rings.as_mut_ptr());
            let c = ThreadCoords {
                block_idx,
                block_dim: HOST_TILE,
                thread_idx: [0, 0],
            };
            // SAFETY: `rings` holds the tile's rings, this task's alone, and its one thread runs the
            // phases in order, which needs no barrier.
            unsafe { block.run(f, shared, &block.stage::<F>(c), || {}) };
        });
        Ok(())
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
}
