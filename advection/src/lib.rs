//! Cubic semi-Lagrangian advection on lattice-gpu (Fukuzawa, GPU Challenge 2010): a 2-D f32 field
//! carried by a steady velocity field, the scheme written once in `lattice_gpu_kernels::advection` and
//! run on the CPU or the GPU, with the paper's GPU techniques as kernel variants.
//!
//! - [`solver`]: the checked problem and a run on any loop engine, with its kernel variant.
//! - [`cases`]: translation, solid-body rotation and a steady swirl, with exact solutions where known.
//! - [`norms`]: error norms and mass drift.
//! - [`reference`](mod@reference): an independent, straightforward f64 implementation for the tests.

pub mod cases;
pub mod error;
pub mod norms;
pub mod reference;
pub mod solver;

pub use error::{Error, Result};
pub use lattice_gpu_host::comm::Halos;
pub use solver::{Advection, Kernel, Problem};
