//! lattice-gpu: write the update of one grid point once, in plain `no_std` Rust, and run it over a whole
//! lattice on the CPU or an NVIDIA GPU, with launch configurations tuned automatically.
//!
//! This facade re-exports the device crate ([`kernels`]), the host runtime ([`host`]), the lattice-QCD
//! crate ([`lqcd`]), the lattice-Boltzmann crate ([`lbm`]), the advection crate ([`advection`]) and the Poisson
//! crate ([`poisson`]), and holds the applications' drivers ([`diffusion`]). The framework's PTX is
//! embedded by the host crate ([`host::Module::framework`]); a crate with kernels of its own builds them
//! with lattice-gpu-builder (README: "Use lattice-gpu in your own crate").

pub use lattice_gpu_advection as advection;
pub use lattice_gpu_host as host;
pub use lattice_gpu_kernels as kernels;
pub use lattice_gpu_lbm as lbm;
pub use lattice_gpu_lqcd as lqcd;
pub use lattice_gpu_poisson as poisson;

pub mod bench;
pub mod cli;
pub mod diffusion;
