//! Lattice Boltzmann on lattice-gpu: a D3Q19 solver after the Palabos GPU port and FluidX3D, with the
//! collide-and-stream body of `lattice_gpu_kernels::lbm` run on a GPU or the CPU.
//!
//! - [`params`]: relaxation time, BGK or TRT, body force, wall velocity, and their stability checks.
//! - [`geometry`]: the grid and its cell tags (fluid, wall, moving wall; periodic where no walls are).
//! - [`solver`]: a run in f64, f32 or f16 storage with two-lattice or in-place (AA) streaming.
//! - [`cases`]: the lid-driven cavity, Poiseuille channel and Taylor-Green vortex, with their analytic or
//!   published solutions.
//! - [`output`]: velocity and density as .npy and VTK, a PNG of the speed, CSV profiles.
//! - [`reference`](mod@reference): an independent, naive f64 implementation for the tests.
//!
//! Conventions (lattice units, grid `[nx, ny, nz]`, cell `x + nx (y + ny z)`, velocity order) are those of
//! `lattice_gpu_kernels::lbm`.

pub mod cases;
pub mod error;
pub mod geometry;
pub mod output;
pub mod params;
pub mod reference;
pub mod solver;

pub use error::{Error, Result};
pub use geometry::Geometry;
pub use params::{Collision, Params};
pub use solver::{BlockTuning, Engine, Lbm, LbmStorage, Moments, Streaming};
