//! The CPU engine: the same point updates, run by rayon over planes (3-D) or rows (2-D).

use lattice_gpu_kernels::stencil::{
    ArrayIndex2D, ArrayIndex3D, GpuEntry, LoopRange, PointUpdate2D, PointUpdate3D,
};
use rayon::prelude::*;

use super::LoopEngine;
use crate::error::Result;
use crate::field::{Element, HostField, Shape};

/// Runs point updates on the CPU, one rayon task per z plane (3-D) or row (2-D).
#[derive(Clone, Copy, Debug, Default)]
pub struct HostLoopEngine;

impl LoopEngine for HostLoopEngine {
    type Field<T: Element> = HostField<T>;
    type Site = ();

    fn describe(&self) -> String {
        format!("CPU ({} threads)", rayon::current_num_threads())
    }

    fn check_fits(&self, _bytes: u64, _what: &str) -> Result<()> {
        Ok(())
    }

    fn alloc<T: Element>(&self, shape: Shape) -> Result<HostField<T>> {
        Ok(HostField::zeros(shape))
    }

    fn run3d<F: PointUpdate3D + GpuEntry>(&self, r: &LoopRange, f: &F, _: &mut ()) -> Result<()> {
        (r.begin[2]..r.end[2]).into_par_iter().for_each(|k| {
            let mut idx = ArrayIndex3D::new(r.n);
            for j in r.begin[1]..r.end[1] {
                for i in r.begin[0]..r.end[0] {
                    idx.set(i, j, k);
                    f.update(&idx);
                }
            }
        });
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
}
