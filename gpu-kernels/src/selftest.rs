//! Kernels that exercise the device layer on the GPU; the host's GPU tests launch them and check the
//! results against what the host layer computes. They are small and cost nothing unless launched.
#![cfg_attr(not(target_arch = "nvptx64"), allow(unused_imports))]

use crate::device::atomic::{self, Scope};
use crate::device::math::{floor, fma, max, min, sqrt};
use crate::device::shared::dynamic_shared;
use crate::device::thread::{self, sync_threads};
use crate::device::warp::{self, Shuffle};
use crate::stencil::{ArrayIndex2D, FieldMut, FieldRef, PointUpdate2D};

crate::kernel! {
    /// Writes each thread's (x, y, z) global index and its block rank at its linear global position.
    pub unsafe fn selftest_thread_index(out: *mut u32) {
        let (x, y, z) = thread::index_3d();
        let nx = thread::grid_dim_x() as usize * thread::block_dim_x() as usize;
        let ny = thread::grid_dim_y() as usize * thread::block_dim_y() as usize;
        let g = x + nx * (y + ny * z);
        *out.add(4 * g) = x as u32;
        *out.add(4 * g + 1) = y as u32;
        *out.add(4 * g + 2) = z as u32;
        *out.add(4 * g + 3) = thread::thread_rank_in_block();
        sync_threads();
    }
}

crate::kernel! {
    /// Per warp of `x` (f32 and f64): the warp sum, shuffles down by 1, xor 1, broadcast of lane 3,
    /// the ballot of `x > 0`, `all`/`any` of it, and the lane id.
    pub unsafe fn selftest_warp(x: *const f32, y: *const f64, out_f32: *mut f32, out_f64: *mut f64, out_u32: *mut u32) {
        let i = thread::index_1d();
        let v = *x.add(i);
        let w = *y.add(i);
        *out_f32.add(4 * i) = warp::sum(v);
        *out_f32.add(4 * i + 1) = v.shfl_down(1);
        *out_f32.add(4 * i + 2) = v.shfl_xor(1);
        *out_f32.add(4 * i + 3) = v.shfl_idx(3);
        *out_f64.add(2 * i) = warp::sum(w);
        *out_f64.add(2 * i + 1) = w.shfl_down(2);
        *out_u32.add(4 * i) = warp::ballot(v > 0.0);
        *out_u32.add(4 * i + 1) = warp::all(v > 0.0) as u32;
        *out_u32.add(4 * i + 2) = warp::any(v > 0.0) as u32;
        *out_u32.add(4 * i + 3) = warp::lane_id();
    }
}

crate::kernel! {
    /// Reverses each block's 256 elements of `x` through a static shared array, and each block's
    /// elements again through the dynamic segment (launched with 256 * 4 bytes), into `out` and `out2`.
    pub unsafe fn selftest_shared(x: *const f32, out: *mut f32, out2: *mut f32) {
        let t = thread::thread_idx_x() as usize;
        let base = thread::block_idx_x() as usize * 256;
        let s = crate::shared_array![f32; 256];
        *s.add(t) = *x.add(base + t);
        sync_threads();
        *out.add(base + t) = *s.add(255 - t);
        let d = dynamic_shared::<f32>();
        *d.add(t) = *x.add(base + t) * 2.0;
        sync_threads();
        *out2.add(base + t) = *d.add(255 - t);
    }
}

crate::kernel! {
    /// Sums `x` into `sum_f32[0]` and `sum_f64[0]` (device scope) and into a block-scope shared total
    /// added once per block; counts positive values in `count[0]`, and keeps their largest bit pattern
    /// in `count[1]`.
    pub unsafe fn selftest_atomic(x: *const f32, n: u32, sum_f32: *mut f32, sum_f64: *mut f64, block_sums: *mut f64, count: *mut u32) {
        let i = thread::index_1d();
        let t = thread::thread_idx_x();
        let s = crate::shared_array![f64; 1];
        if t == 0 {
            *s = 0.0;
        }
        sync_threads();
        if i < n as usize {
            let v = *x.add(i);
            atomic::add_f32(sum_f32, v, Scope::Device);
            atomic::add_f64(sum_f64, v as f64, Scope::Device);
            atomic::add_f64(s, v as f64, Scope::Block);
            if v > 0.0 {
                atomic::add_u32(count, 1, Scope::Device);
                atomic::max_u32(count.add(1), v.to_bits(), Scope::Device);
            }
        }
        sync_threads();
        if t == 0 {
            atomic::exch_u32(count.add(2), 1, Scope::Device);
            atomic::add_f64(block_sums, *s, Scope::Device);
        }
    }
}

crate::kernel! {
    /// Per element: fma(a, b, c), sqrt(|a|), floor(a), min(a, b), max(a, b), in f32 and f64.
    pub unsafe fn selftest_math(a: *const f64, b: *const f64, c: *const f64, n: u32, out_f32: *mut f32, out_f64: *mut f64) {
        let i = thread::index_1d();
        if i >= n as usize {
            return;
        }
        let (x, y, z) = (*a.add(i), *b.add(i), *c.add(i));
        let (xf, yf, zf) = (x as f32, y as f32, z as f32);
        let o = out_f64.add(5 * i);
        *o = fma(x, y, z);
        *o.add(1) = sqrt(crate::device::math::abs(x));
        *o.add(2) = floor(x);
        *o.add(3) = min(x, y);
        *o.add(4) = max(x, y);
        let o = out_f32.add(5 * i);
        *o = fma(xf, yf, zf);
        *o.add(1) = sqrt(crate::device::math::abs(xf));
        *o.add(2) = floor(xf);
        *o.add(3) = min(xf, yf);
        *o.add(4) = max(xf, yf);
    }
}

/// A 5-point 2-D average, the point update behind the `Loop2D` GPU tests.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Smooth2d {
    /// Input.
    pub f: FieldRef<f32>,
    /// Output.
    pub out: FieldMut<f32>,
}

impl PointUpdate2D for Smooth2d {
    type Real = f32;

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex2D) {
        let f = self.f;
        let v = 0.5 * f.get(idx.ix())
            + 0.125
                * (f.get(idx.at::<1, 0>())
                    + f.get(idx.at::<-1, 0>())
                    + f.get(idx.at::<0, 1>())
                    + f.get(idx.at::<0, -1>()));
        self.out.set(idx.ix(), v);
    }
}

crate::kernel2d!(smooth2d_f32 => Smooth2d);
