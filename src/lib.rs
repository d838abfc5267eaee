//! lattice-gpu: write the update of one grid point once, in plain `no_std` Rust, and run it over a whole
//! lattice on the CPU or an NVIDIA GPU, with launch configurations tuned automatically.
//!
//! This facade re-exports the device crate ([`kernels`]), the host runtime ([`host`]), the lattice-QCD
//! crate ([`lqcd`]), the lattice-Boltzmann crate ([`lbm`]), the advection crate ([`advection`]) and the Poisson
//! crate ([`poisson`]), embeds the PTX
//! that `build.rs` compiled from `gpu-kernels`, and holds the applications' drivers ([`diffusion`]).

pub use lattice_gpu_advection as advection;
pub use lattice_gpu_host as host;
pub use lattice_gpu_kernels as kernels;
pub use lattice_gpu_lbm as lbm;
pub use lattice_gpu_lqcd as lqcd;
pub use lattice_gpu_poisson as poisson;

pub mod bench;
pub mod cli;
pub mod diffusion;

/// The PTX module compiled from `gpu-kernels` by `build.rs`.
pub const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/lattice_gpu_kernels.ptx"));

/// The PTX target the module was built for (`LATTICE_GPU_ARCH` at build time, default `sm_70`).
pub const PTX_ARCH: &str = env!("LATTICE_GPU_PTX_ARCH");
