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
//! - [`complex`], [`wilson`], [`bicgstab`]: complex numbers, the Wilson-Dirac hopping term and the device half
//!   of BiCGStab, for lattice QCD.
//! - [`lbm`]: the D3Q19 lattice-Boltzmann collide-and-stream body and its kernels.
//! - [`poisson`]: the multigrid point updates of the variable-coefficient Poisson solver.
//! - [`vector`]: whole-field vector operations (fill, convert, conjugate gradients' updates).
//! - [`advection`]: the cubic semi-Lagrangian advection update and its optimised kernels.
//! - [`selftest`]: small kernels that exercise the device layer from the GPU tests.
//!
//! A kernel crate of your own (`#![no_std]`, depending on this one) writes a point update and declares
//! its GPU entry; lattice-gpu-builder compiles it to a module of its own, and the host's engines run it:
//!
//! ```
//! use lattice_gpu_kernels::stencil::{ArrayIndex3D, FieldMut, FieldRef, PointUpdate3D};
//!
//! /// One explicit step of `du/dt = u_xx` along x: `u + c (u(x+1) - 2 u + u(x-1))`.
//! #[repr(C)]
//! #[derive(Clone, Copy)]
//! pub struct Smooth {
//!     pub u: FieldRef<f32>,
//!     pub out: FieldMut<f32>,
//!     pub c: f32,
//! }
//!
//! impl PointUpdate3D for Smooth {
//!     type Real = f32;
//!     // Reads one point either side in x; the loops check the margins before every launch.
//!     const RADIUS: [u32; 3] = [1, 0, 0];
//!     fn update(&self, idx: &ArrayIndex3D) {
//!         let (u, i) = (self.u, idx.ix());
//!         let lap = u.get(idx.at::<1, 0, 0>()) - 2.0 * u.get(i) + u.get(idx.at::<-1, 0, 0>());
//!         self.out.set(i, u.get(i) + self.c * lap);
//!     }
//! }
//!
//! // The GPU entry `smooth_f32` in this crate's module; on the host, the engines' knowledge of it.
//! lattice_gpu_kernels::kernel3d!(smooth_f32 => Smooth);
//! ```
//!
//! An update generic over its precision declares every precision's entry at once,
//! `kernel3d!(for<T> Smooth<T> { f32 => smooth_f32, f64 => smooth_f64 })`, so that generic host code
//! bounds only the precision ([`stencil::EntryOf`]).
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
pub mod bicgstab;
pub mod bind;
pub mod complex;
pub mod device;
pub mod diffusion;
pub mod lbm;
pub mod poisson;
pub mod selftest;
pub mod solver_store;
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
