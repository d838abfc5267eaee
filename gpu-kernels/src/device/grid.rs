//! A barrier across every block of a grid, for kernels whose blocks are all resident at once (launched
//! cooperatively, with no more blocks than the GPU runs together): what lets one kernel carry a whole
//! solver iteration, with its reductions, instead of one launch per step.

use super::atomic::{self, Scope};
use super::thread::{self, sync_threads};

/// Two device words: the blocks arrived at the current barrier (zero between barriers: the last block
/// rewinds it) and the barriers completed so far, which the last block to arrive raises.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GridBarrier {
    /// Blocks arrived; zero at launch.
    pub count: *mut u32,
    /// Barriers completed (wrapping).
    pub generation: *mut u32,
}

impl GridBarrier {
    /// Returns once every thread of every block has called it, their memory writes before it visible
    /// to all after it.
    ///
    /// # Safety
    /// Every thread of the grid must call it, as often as the others; all blocks must be resident at
    /// once (a cooperative launch), or it never returns; the words must be device memory, `count` zero
    /// at launch.
    #[inline(always)]
    pub unsafe fn sync(&self) {
        sync_threads();
        if thread::thread_idx_x() == 0 {
            let blocks = thread::grid_dim_x();
            // Read before arriving: the last block cannot raise it before this block has arrived.
            let seen = unsafe { self.generation.read_volatile() };
            atomic::fence_device();
            let ticket = unsafe { atomic::inc_u32(self.count, blocks - 1, Scope::Device) };
            if ticket == blocks - 1 {
                atomic::fence_device();
                unsafe { atomic::add_u32(self.generation, 1, Scope::Device) };
            } else {
                while unsafe { self.generation.read_volatile() } == seen {
                    pause();
                }
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
