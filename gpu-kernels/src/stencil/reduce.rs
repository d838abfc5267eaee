//! The dot product of two fields, reduced on the device: every thread sums a grid-stride share, the block
//! sums its threads (warp shuffles, then one value per warp), and each block leaves one partial sum for
//! the host to add. The engines' `dot` uses it; margins hold zeros in the fields it serves, so whole arrays
//! can be summed.

#[cfg_attr(not(target_arch = "nvptx64"), allow(unused_imports))]
use crate::device::atomic::{self, Scope};
#[cfg_attr(not(target_arch = "nvptx64"), allow(unused_imports))]
use crate::device::thread::{self, sync_threads};

/// The arguments of the `field_dot_f64` kernel: `partials[block] = sum over the block's share of a[i] b[i]`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FieldDot {
    /// First array.
    pub a: *const f64,
    /// Second array.
    pub b: *const f64,
    /// Elements.
    pub n: u64,
    /// One partial sum per block.
    pub partials: *mut f64,
}

impl FieldDot {
    /// This thread's share: elements `first, first + stride, ...` below `n`.
    ///
    /// # Safety
    /// `a` and `b` must hold `n` elements.
    #[inline(always)]
    pub unsafe fn share(&self, first: u64, stride: u64) -> f64 {
        let mut s = 0.0;
        let mut i = first;
        while i < self.n {
            // SAFETY: i < n (the caller's contract).
            s += unsafe { *self.a.add(i as usize) * *self.b.add(i as usize) };
            i += stride;
        }
        s
    }
}

crate::kernel! {
    /// Generated kernel entry: one partial sum per block (every thread of the block takes part).
    pub unsafe fn field_dot_f64(d: FieldDot) {
        let stride = thread::grid_dim_x() as u64 * thread::block_dim_x() as u64;
        let s = d.share(thread::index_1d() as u64, stride);
        let total = crate::krylov::block_sum([s, 0.0, 0.0, 0.0]);
        if thread::thread_idx_x() == 0 {
            *d.partials.add(thread::block_idx_x() as usize) = total[0];
        }
    }
}

/// The arguments of the `field_dot_into_f64` kernel: the dot product written to `*out` on the device by
/// the last block to finish (it sums the blocks' partials), so a solver can read it in a later kernel
/// without the host waiting for it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FieldDotInto {
    /// The arrays, their length and one partial per block.
    pub dot: FieldDot,
    /// Where the sum goes.
    pub out: *mut f64,
    /// Blocks finished so far: zero before the launch, and again after it (the last block rewinds it).
    pub done: *mut u32,
}

crate::kernel! {
    /// Generated kernel entry: the partials, then their sum in `*out` (every thread of the block takes
    /// part).
    pub unsafe fn field_dot_into_f64(d: FieldDotInto) {
        let stride = thread::grid_dim_x() as u64 * thread::block_dim_x() as u64;
        let s = d.dot.share(thread::index_1d() as u64, stride);
        let total = crate::krylov::block_sum([s, 0.0, 0.0, 0.0]);
        let blocks = thread::grid_dim_x();
        let last = crate::shared_array![u32; 1];
        if thread::thread_idx_x() == 0 {
            *d.dot.partials.add(thread::block_idx_x() as usize) = total[0];
            // Publish the partial, then take a ticket: the block with the last one sees them all.
            atomic::fence_device();
            let ticket = atomic::inc_u32(d.done, blocks - 1, Scope::Device);
            *last = (ticket == blocks - 1) as u32;
        }
        sync_threads();
        if *last == 0 {
            return;
        }
        atomic::fence_device();
        let mut acc = 0.0;
        let mut b = thread::thread_idx_x() as usize;
        while b < blocks as usize {
            // Volatile: written by other blocks in this kernel, never through this SM's L1.
            acc += d.dot.partials.add(b).read_volatile();
            b += thread::block_dim_x() as usize;
        }
        let sum = crate::krylov::block_sum([acc, 0.0, 0.0, 0.0]);
        if thread::thread_idx_x() == 0 {
            *d.out = sum[0];
        }
    }
}
