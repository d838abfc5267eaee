//! Sums reduced on the device: every thread sums its share, the block sums its threads (warp shuffles,
//! then one value per warp), and each block leaves one partial sum, which the host adds
//! (`field_dot_f64`) or the last blocks to finish add, group by group, into a value on the device
//! ([`SumInto`]: the engines' `dot_into`, and the summing loops of
//! [`SumUpdate3D`](super::SumUpdate3D)). Margins hold zeros in the fields the dot products serve, so
//! whole arrays can be summed.

#[cfg_attr(not(target_arch = "nvptx64"), allow(unused_imports))]
use crate::device::atomic::{self, Scope};
#[cfg_attr(not(target_arch = "nvptx64"), allow(unused_imports))]
use crate::device::thread;
#[cfg_attr(not(target_arch = "nvptx64"), allow(unused_imports))]
use crate::device::warp::{self, Shuffle, WARP_SIZE};

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
        let total = crate::bicgstab::block_sum([s, 0.0, 0.0, 0.0]);
        if thread::thread_idx_x() == 0 {
            *d.partials.add(thread::block_idx_x() as usize) = total[0];
        }
    }
}

/// Where a sum reduced on the device goes: `*out`, written by the last block to finish (so a solver can
/// read it in a later kernel without the host waiting for it). The blocks count off in groups of
/// `SUM_GROUP`: the last block of a group adds its group's partials, the last group to finish adds
/// the groups' sums. A grid of many small blocks then takes its tickets on many counters instead of
/// one, whose atomics the L2 serialises (one counter for 65536 blocks cost 0.4 ms on an H100, longer
/// than the loop's work). The order of the additions is fixed, so the same launch gives the same bits
/// every time.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SumInto {
    /// One partial sum per block, then one per group ([`SumInto::scratch`]).
    pub partials: *mut f64,
    /// Where the sum goes.
    pub out: *mut f64,
    /// Groups finished so far, then blocks finished so far in each group: zero before the launch, and
    /// again after it (the last to finish rewinds each).
    pub done: *mut u32,
}

/// Blocks per group of a [`SumInto`].
pub const SUM_GROUP: u32 = 64;

impl SumInto {
    /// The partial sums and the counters a grid of `blocks` blocks needs.
    pub const fn scratch(blocks: u32) -> (usize, usize) {
        let groups = blocks.div_ceil(SUM_GROUP) as usize;
        (blocks as usize + groups, 1 + groups)
    }

    /// Adds `mine`, this thread's share, to the sum: the block's total becomes its partial, the last
    /// block of its group adds the group's partials, and the last group's writes their sum. Every
    /// thread of the block must call it (the block in whole warps).
    ///
    /// # Safety
    /// `partials` and `done` must be as long as [`SumInto::scratch`] says for the grid, the counters at
    /// zero; `out` one value.
    #[inline(always)]
    pub unsafe fn finish(&self, mine: f64) {
        let blocks = thread::grid_dim_x() * thread::grid_dim_y() * thread::grid_dim_z();
        let block = thread::block_idx_x()
            + thread::grid_dim_x()
                * (thread::block_idx_y() + thread::grid_dim_y() * thread::block_idx_z());
        let (group, groups) = (block / SUM_GROUP, blocks.div_ceil(SUM_GROUP));
        let start = group * SUM_GROUP;
        let members = (blocks - start).min(SUM_GROUP);
        let total = crate::bicgstab::block_sum([mine, 0.0, 0.0, 0.0])[0];
        // Warp 0 alone goes on (it holds the block's total): the other warps leave at once, rather
        // than wait at a barrier while it takes its tickets, so the block's place frees sooner.
        if thread::thread_rank_in_block() >= WARP_SIZE {
            return;
        }
        // SAFETY: a partial per block and per group, a counter per group and one for the groups (the
        // caller's contract).
        unsafe {
            let counter = self.done.add(1 + group as usize);
            if !publish(self.partials.add(block as usize), total, counter, members) {
                return;
            }
            let total = add_up(self.partials.add(start as usize), members);
            if !publish(
                self.partials.add((blocks + group) as usize),
                total,
                self.done,
                groups,
            ) {
                return;
            }
            let sum = add_up(self.partials.add(blocks as usize), groups);
            if warp::lane_id() == 0 {
                *self.out = sum;
            }
        }
    }
}

/// In a block's first warp: lane 0 stores the block's `value` at `at`, then takes a ticket on
/// `counter`, one of `count`: true, in every lane, for the block that took the last one (which then
/// sees every value stored before a ticket).
///
/// # Safety
/// `at` one value, `counter` a counter that the `count` blocks taking tickets on it rewind.
#[inline(always)]
unsafe fn publish(at: *mut f64, value: f64, counter: *mut u32, count: u32) -> bool {
    let mut ticket = 0;
    if warp::lane_id() == 0 {
        // SAFETY: the caller's contract.
        unsafe {
            *at = value;
            // Publish the value, then take the ticket.
            atomic::fence_device();
            ticket = atomic::inc_u32(counter, count - 1, Scope::Device);
        }
    }
    let last = ticket.shfl_idx(0) == count - 1;
    if last {
        atomic::fence_device();
    }
    last
}

/// In a block's first warp: the sum of the `n` values from `from`, stored by other blocks of this
/// kernel, in an order fixed by `n` (in every lane).
///
/// # Safety
/// `from` must hold `n` values.
#[inline(always)]
unsafe fn add_up(from: *const f64, n: u32) -> f64 {
    let mut acc = 0.0;
    let mut b = warp::lane_id();
    while b < n {
        // Volatile: written by other blocks in this kernel, never through this SM's L1.
        // SAFETY: b < n.
        acc += unsafe { from.add(b as usize).read_volatile() };
        b += WARP_SIZE;
    }
    warp::sum(acc)
}

/// The arguments of the `field_dot_into_f64` kernel: the dot product into `*out` on the device (a
/// [`SumInto`] of the dot's partials).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FieldDotInto {
    /// The arrays, their length and the partials ([`SumInto::partials`]).
    pub dot: FieldDot,
    /// Where the sum goes.
    pub out: *mut f64,
    /// The counters ([`SumInto::done`]).
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

/// The arguments of the `count_non_finite_f32` and `_f64` kernels: `partials[block]` = how many of the
/// block's share of `a` are NaN or infinite. A run's health check: one read of the field, cheaper than
/// a step, and exact (a sum of the values would also overflow on large finite ones).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CountNonFinite<T> {
    /// The array.
    pub a: *const T,
    /// Elements.
    pub n: u64,
    /// One count per block (exact in f64 below 2^53).
    pub partials: *mut f64,
}

impl<T: crate::device::math::Real> CountNonFinite<T> {
    /// This thread's count: elements `first, first + stride, ...` below `n`.
    ///
    /// # Safety
    /// `a` must hold `n` elements.
    #[inline(always)]
    pub unsafe fn share(&self, first: u64, stride: u64) -> f64 {
        // Eight loads in flight a thread: one at a time, the check's read of a 512^3 f32 field
        // waited on each load's latency, at about a third of the copy bandwidth.
        const LOADS: u64 = 8;
        let bad = |v: T| u64::from(!v.to_f64().is_finite());
        let mut count = 0;
        let mut i = first;
        while i + (LOADS - 1) * stride < self.n {
            let mut v = [T::ZERO; LOADS as usize];
            for (k, v) in v.iter_mut().enumerate() {
                // SAFETY: below n (the loop's condition; the caller's contract).
                *v = unsafe { *self.a.add((i + k as u64 * stride) as usize) };
            }
            count += v.into_iter().map(bad).sum::<u64>();
            i += LOADS * stride;
        }
        while i < self.n {
            // SAFETY: i < n (the caller's contract).
            count += bad(unsafe { *self.a.add(i as usize) });
            i += stride;
        }
        count as f64
    }
}

macro_rules! count_non_finite {
    ($($name:ident: $t:ty),*) => {$(
        crate::kernel! {
            /// Generated kernel entry: one count of non-finite values per block (every thread of the
            /// block takes part).
            pub unsafe fn $name(d: CountNonFinite<$t>) {
                let stride = thread::grid_dim_x() as u64 * thread::block_dim_x() as u64;
                let bad = d.share(thread::index_1d() as u64, stride);
                let total = crate::bicgstab::block_sum([bad, 0.0, 0.0, 0.0]);
                if thread::thread_idx_x() == 0 {
                    *d.partials.add(thread::block_idx_x() as usize) = total[0];
                }
            }
        }
    )*};
}

count_non_finite!(count_non_finite_f32: f32, count_non_finite_f64: f64);

#[cfg(test)]
mod tests {
    use super::CountNonFinite;

    /// Every thread's share, summed over a grid of `threads`, counts each non-finite value once,
    /// whether it falls in a thread's unrolled loads or in its remainder.
    #[test]
    fn the_threads_shares_count_every_non_finite_value_once() {
        let mut a = [1.5f32; 1000];
        let bad = [0, 7, 8, 63, 64, 500, 991, 998, 999];
        for (k, &i) in bad.iter().enumerate() {
            a[i] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][k % 3];
        }
        a[300] = f32::MAX;
        for threads in [1u64, 3, 8, 64, 129, 1000, 2048] {
            let d = CountNonFinite {
                a: a.as_ptr(),
                n: a.len() as u64,
                partials: core::ptr::null_mut(),
            };
            // SAFETY: `a` holds `n` elements.
            let count: f64 = (0..threads).map(|t| unsafe { d.share(t, threads) }).sum();
            assert_eq!(count, bad.len() as f64, "{threads} threads");
        }
    }
}
