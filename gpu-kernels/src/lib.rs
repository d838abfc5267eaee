//! Device code of lattice-gpu.
//!
//! This crate is `#![no_std]` and compiled twice: by `build.rs` to PTX for the GPU, and as an ordinary
//! rlib for the host, so the CPU engine and the tests run the very same point-update bodies.
//!
//! - [`device`]: a cuda_std-like layer (thread indices, warp intrinsics, shared memory, atomics, math).
//! - [`stencil`]: the stencil framework's device half (point index, loop range, point-update traits, loops,
//!   kernel-entry macros).
//! - [`diffusion`]: the 3-D diffusion point update.
//! - [`complex`], [`wilson`], [`krylov`]: complex numbers, the Wilson-Dirac hopping term and the device half
//!   of BiCGStab, for lattice QCD.
//! - [`lbm`]: the D3Q19 lattice-Boltzmann collide-and-stream body and its kernels.
//! - [`poisson`]: the multigrid point updates of the variable-coefficient Poisson solver.
//! - [`vector`]: whole-field vector operations (fill, convert, conjugate gradients' updates).
//! - [`advection`]: the cubic semi-Lagrangian advection update and its optimised kernels.
//! - [`selftest`]: small kernels that exercise the device layer from the GPU tests.
#![no_std]
#![feature(core_float_math, f16)]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(abi_ptx, asm_experimental_arch, link_llvm_intrinsics, stdarch_nvptx)
)]
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]

pub mod advection;
pub mod complex;
pub mod device;
pub mod diffusion;
pub mod krylov;
pub mod lbm;
pub mod poisson;
pub mod selftest;
pub mod stencil;
pub mod vector;
pub mod wilson;

/// Device panics abort the kernel (`trap`): there is no unwinding and no message on the GPU. Indexing in hot
/// loops is unchecked; the host checks sizes before every launch.
#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: `trap` ends the kernel; nothing runs after it.
    unsafe { core::arch::nvptx::trap() }
}
