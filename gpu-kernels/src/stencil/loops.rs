//! The loops a generated kernel runs: each thread takes one (x, y) column of the range from its block
//! and grid position and marches `march` points along the last axis.

use super::{ArrayIndex2D, ArrayIndex3D, PointUpdate2D, PointUpdate3D};
use crate::device::thread::{
    block_dim_x, block_dim_y, block_idx_x, block_idx_y, block_idx_z, thread_idx_x, thread_idx_y,
};

/// The points to update: the array size `n` (margins included) and the half-open range
/// `begin..end` per axis, as in the paper. 2-D ranges have `n[2] = 1`, `begin[2] = 0`, `end[2] = 1`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LoopRange {
    /// Array size per axis, margins included.
    pub n: [u32; 3],
    /// First point of the range per axis.
    pub begin: [u32; 3],
    /// One past the last point per axis.
    pub end: [u32; 3],
}

impl LoopRange {
    /// Points per axis inside the range.
    pub fn extent(&self) -> [u32; 3] {
        [
            self.end[0].saturating_sub(self.begin[0]),
            self.end[1].saturating_sub(self.begin[1]),
            self.end[2].saturating_sub(self.begin[2]),
        ]
    }

    /// Number of points inside the range.
    pub fn points(&self) -> u64 {
        self.extent().iter().map(|&e| e as u64).product()
    }
}

/// Runs `f` over this thread's z column: grid x/y of blocks x/y cover the range's x/y, grid z covers z in
/// steps of `march`.
#[inline(always)]
pub fn device_loop3d<F: PointUpdate3D>(f: &F, r: &LoopRange, march: u32) {
    let i = r.begin[0] + block_idx_x() * block_dim_x() + thread_idx_x();
    let j = r.begin[1] + block_idx_y() * block_dim_y() + thread_idx_y();
    if i >= r.end[0] || j >= r.end[1] {
        return;
    }
    let k0 = r.begin[2] + block_idx_z() * march;
    let k1 = if r.end[2] - k0 > march {
        k0 + march
    } else {
        r.end[2]
    };
    let mut idx = ArrayIndex3D::new(r.n);
    idx.set(i, j, k0);
    for _ in k0..k1 {
        f.update(&idx);
        idx.next_k();
    }
}

/// Runs `f` over this thread's rows: grid x of blocks covers x, each thread y of the grid covers `march`
/// consecutive rows.
#[inline(always)]
pub fn device_loop2d<F: PointUpdate2D>(f: &F, r: &LoopRange, march: u32) {
    let i = r.begin[0] + block_idx_x() * block_dim_x() + thread_idx_x();
    let row = block_idx_y() * block_dim_y() + thread_idx_y();
    let j0 = r.begin[1] + row * march;
    if i >= r.end[0] || j0 >= r.end[1] {
        return;
    }
    let j1 = if r.end[1] - j0 > march {
        j0 + march
    } else {
        r.end[1]
    };
    let mut idx = ArrayIndex2D::new([r.n[0], r.n[1]]);
    idx.set(i, j0);
    for _ in j0..j1 {
        f.update(&idx);
        idx.next_j();
    }
}
