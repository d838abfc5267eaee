//! A barrier across every block of a grid, for kernels whose blocks are all resident at once (launched
//! cooperatively, with no more blocks than the GPU runs together): what lets one kernel carry a whole
//! solver iteration, with its reductions, instead of one launch per step.

use super::atomic::{self, Scope};
use super::thread::{self, sync_threads};

/// One device word. Each barrier, block 0 adds `2^31 - (blocks - 1)` and every other block 1: together
/// exactly `2^31`, so the top bit flips once all have arrived and the word is otherwise as before. A
/// block waits for the flip of the value its own add returned: one atomic per block and no separate
/// release step (the scheme of CUDA's cooperative groups), and no reset between barriers or launches.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GridBarrier {
    /// The arrival word; any value at launch.
    pub count: *mut u32,
}

impl GridBarrier {
    /// Returns once every thread of every block has called it, their memory writes before it visible
    /// to all after it.
    ///
    /// # Safety
    /// Every thread of the grid must call it, as often as the others; all blocks must be resident at
    /// once (a cooperative launch), or it never returns; `count` must be device memory that no other
    /// grid uses at the same time.
    #[inline(always)]
    pub unsafe fn sync(&self) {
        const FLIP: u32 = 1 << 31;
        sync_threads();
        if thread::thread_idx_x() == 0 {
            let add = if thread::block_idx_x() == 0 {
                FLIP - (thread::grid_dim_x() - 1)
            } else {
                1
            };
            atomic::fence_device();
            let old = unsafe { atomic::add_u32(self.count, add, Scope::Device) };
            while (unsafe { self.count.read_volatile() } ^ old) & FLIP == 0 {
                pause();
            }
            atomic::fence_device();
        }
        sync_threads();
    }
}

/// A short pause while spinning, so waiting blocks leave the memory system to the others.
#[inline(always)]
fn pause() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: a scheduling hint, no memory effect.
    unsafe {
        core::arch::asm!("nanosleep.u32 32;", options(nostack, nomem))
    }
}

/// Arguments of `grid_barriers`: `n` grid barriers in a row and nothing else, so that timing launches
/// of it with different `n` gives the cost of a barrier and of a cooperative launch.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BarrierRun {
    /// The barrier.
    pub barrier: GridBarrier,
    /// Barriers per launch.
    pub n: u32,
}

crate::kernel! {
    /// Generated kernel entry: `n` grid barriers; launched cooperatively.
    pub unsafe fn grid_barriers(a: BarrierRun) {
        for _ in 0..a.n {
            unsafe { a.barrier.sync() }
        }
    }
}
