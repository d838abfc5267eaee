//! Thread, block and grid indices (u32, as the hardware gives them) and the block barrier.
//!
//! On the host these describe a grid of one block of one thread: indices 0, dimensions 1.

macro_rules! special_register {
    ($(#[$m:meta])* $name:ident, $nvptx:ident, $host:expr) => {
        $(#[$m])*
        #[inline(always)]
        pub fn $name() -> u32 {
            #[cfg(target_arch = "nvptx64")]
            // SAFETY: reading a special register has no side effect.
            unsafe {
                core::arch::nvptx::$nvptx() as u32
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                $host
            }
        }
    };
}

special_register!(/// `threadIdx.x`.
    thread_idx_x, _thread_idx_x, 0);
special_register!(/// `threadIdx.y`.
    thread_idx_y, _thread_idx_y, 0);
special_register!(/// `threadIdx.z`.
    thread_idx_z, _thread_idx_z, 0);
special_register!(/// `blockIdx.x`.
    block_idx_x, _block_idx_x, 0);
special_register!(/// `blockIdx.y`.
    block_idx_y, _block_idx_y, 0);
special_register!(/// `blockIdx.z`.
    block_idx_z, _block_idx_z, 0);
special_register!(/// `blockDim.x`.
    block_dim_x, _block_dim_x, 1);
special_register!(/// `blockDim.y`.
    block_dim_y, _block_dim_y, 1);
special_register!(/// `blockDim.z`.
    block_dim_z, _block_dim_z, 1);
special_register!(/// `gridDim.x`.
    grid_dim_x, _grid_dim_x, 1);
special_register!(/// `gridDim.y`.
    grid_dim_y, _grid_dim_y, 1);
special_register!(/// `gridDim.z`.
    grid_dim_z, _grid_dim_z, 1);

/// Global x index of this thread, widened before the multiply so large grids do not wrap.
#[inline(always)]
pub fn index_1d() -> usize {
    block_idx_x() as usize * block_dim_x() as usize + thread_idx_x() as usize
}

/// Global (x, y) index of this thread.
#[inline(always)]
pub fn index_2d() -> (usize, usize) {
    (
        index_1d(),
        block_idx_y() as usize * block_dim_y() as usize + thread_idx_y() as usize,
    )
}

/// Global (x, y, z) index of this thread.
#[inline(always)]
pub fn index_3d() -> (usize, usize, usize) {
    let (x, y) = index_2d();
    (
        x,
        y,
        block_idx_z() as usize * block_dim_z() as usize + thread_idx_z() as usize,
    )
}

/// Linear index of this thread inside its block (x fastest).
#[inline(always)]
pub fn thread_rank_in_block() -> u32 {
    thread_idx_x() + block_dim_x() * (thread_idx_y() + block_dim_y() * thread_idx_z())
}

#[cfg(target_arch = "nvptx64")]
extern "C" {
    #[link_name = "llvm.nvvm.barrier0"]
    fn barrier0();
}

/// `__syncthreads()`: every thread of the block waits here. Through the LLVM intrinsic, so the call stays
/// convergent. A no-op on the host (one thread per block).
#[inline(always)]
pub fn sync_threads() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: a block barrier; callers keep it in uniform control flow, as in CUDA.
    unsafe {
        barrier0()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_is_one_thread_grid() {
        assert_eq!(index_3d(), (0, 0, 0));
        assert_eq!((block_dim_x(), block_dim_y(), block_dim_z()), (1, 1, 1));
        assert_eq!((grid_dim_x(), grid_dim_y(), grid_dim_z()), (1, 1, 1));
        assert_eq!(thread_rank_in_block(), 0);
        sync_threads();
    }
}
