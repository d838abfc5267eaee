//! Sums reduced on the device: every thread sums its share, the block sums its threads (warp shuffles,
//! then one value per warp), and each block leaves one partial sum, which the host adds
//! (`field_dot_f64`) or the last block to finish adds into a value on the device ([`SumInto`]: the
//! engines' `dot_into`, and the summing loops of [`SumUpdate3D`](super::SumUpdate3D)). Margins hold
//! zeros in the fields the dot products serve, so whole arrays can be summed.

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

/// Where a sum reduced on the device goes: `*out`, written by the last block to finish, which adds the
/// blocks' partials in block order (so a solver can read it in a later kernel without the host waiting
/// for it, and the same launch gives the same bits every time).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SumInto {
    /// One partial sum per block.
    pub partials: *mut f64,
    /// Where the sum goes.
    pub out: *mut f64,
    /// Blocks finished so far: zero before the launch, and again after it (the last block rewinds it).
    pub done: *mut u32,
}

impl SumInto {
    /// Adds `mine`, this thread's share, to the sum: the block's total becomes its partial, and the
    /// last block of the grid writes their sum. Every thread of the block must call it (the block in
    /// whole warps).
    ///
    /// # Safety
    /// `partials` must hold one value per block of the grid, `out` one value, `done` a counter at zero.
    #[inline(always)]
    pub unsafe fn finish(&self, mine: f64) {
        let total = crate::krylov::block_sum([mine, 0.0, 0.0, 0.0]);
        let blocks = thread::grid_dim_x() * thread::grid_dim_y() * thread::grid_dim_z();
        let block = thread::block_idx_x()
            + thread::grid_dim_x()
                * (thread::block_idx_y() + thread::grid_dim_y() * thread::block_idx_z());
        let last = crate::shared_array![u32; 1];
        let first = thread::thread_rank_in_block() == 0;
        if first {
            // SAFETY: one partial per block (the caller's contract).
            unsafe { *self.partials.add(block as usize) = total[0] };
            // Publish the partial, then take a ticket: the block with the last one sees them all.
            atomic::fence_device();
            // SAFETY: `done` is a counter (the caller's contract).
            let ticket = unsafe { atomic::inc_u32(self.done, blocks - 1, Scope::Device) };
            // SAFETY: thread 0 alone writes the block's flag.
            unsafe { *last = (ticket == blocks - 1) as u32 };
        }
        sync_threads();
        // SAFETY: written before the barrier.
        if unsafe { *last } == 0 {
            return;
        }
        atomic::fence_device();
        let threads = thread::block_dim_x() * thread::block_dim_y() * thread::block_dim_z();
        let mut acc = 0.0;
        let mut b = thread::thread_rank_in_block();
        while b < blocks {
            // Volatile: written by other blocks in this kernel, never through this SM's L1.
            // SAFETY: b < blocks.
            acc += unsafe { self.partials.add(b as usize).read_volatile() };
            b += threads;
        }
        let sum = crate::krylov::block_sum([acc, 0.0, 0.0, 0.0]);
        if first {
            // SAFETY: one value (the caller's contract).
            unsafe { *self.out = sum[0] };
        }
    }
}

/// The arguments of the `field_dot_into_f64` kernel: the dot product into `*out` on the device (a
/// [`SumInto`] of the dot's partials).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FieldDotInto {
    /// The arrays, their length and one partial per block.
    pub dot: FieldDot,
    /// Where the sum goes.
    pub out: *mut f64,
    /// Blocks finished so far: zero before the launch, and again after it.
    pub done: *mut u32,
}

crate::kernel! {
    /// Generated kernel entry: the dot product in `*out` (every thread of the block takes part).
    pub unsafe fn field_dot_into_f64(d: FieldDotInto) {
        let stride = thread::grid_dim_x() as u64 * thread::block_dim_x() as u64;
        let sum = SumInto {
            partials: d.dot.partials,
            out: d.out,
            done: d.done,
        };
        sum.finish(d.dot.share(thread::index_1d() as u64, stride));
    }
}
