//! Device code of lattice-gpu.
//!
//! This crate is `#![no_std]` and compiled twice: by lattice-gpu-builder to PTX for the GPU (with the
//! pinned nightly), and as an ordinary rlib for the host (on stable Rust), so the CPU engine and the tests
//! run the very same point-update bodies. Nightly features are asked for on the nvptx target alone.
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
#![cfg_attr(
    target_arch = "nvptx64",
    feature(
        abi_ptx,
        allow_internal_unstable,
        asm_experimental_arch,
        core_float_math,
        f16,
        link_llvm_intrinsics,
        stdarch_nvptx
    )
)]
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]

// The host's float functions (`f32::mul_add`, `sqrt`, `floor`) are std's: `core::f32::math` is unstable.
#[cfg(not(target_arch = "nvptx64"))]
extern crate std;

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

/// The name of the framework's own module: this crate's library name, as kernel types record it
/// ([`stencil::GpuEntry::MODULE`]).
pub const MODULE: &str = env!("CARGO_CRATE_NAME");

/// Device panics abort the kernel (`trap`): there is no unwinding and no message on the GPU. Indexing in hot
/// loops is unchecked; the host checks sizes before every launch.
#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: `trap` ends the kernel; nothing runs after it.
    unsafe { core::arch::nvptx::trap() }
}
