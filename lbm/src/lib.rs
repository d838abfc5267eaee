//! Lattice Boltzmann on lattice-gpu: a D3Q19 and D3Q27 solver after the Palabos GPU port and
//! FluidX3D, with the collide-and-stream body of `lattice_gpu_kernels::lbm` run on a GPU or the CPU.
//!
//! - [`params`]: relaxation time, BGK or TRT, body force, wall velocity, and their stability checks.
//! - [`geometry`]: the grid, its cell tags (fluid, wall, moving wall; periodic where no walls are) and
//!   its velocity set (D3Q19 or D3Q27).
//! - [`solver`]: a run in f64, f32 or f16 storage with two-lattice or in-place (AA) streaming, its
//!   memory footprint (checked before anything is allocated), and the collective check of its state
//!   for NaN and for a stop asked by a signal ([`Lbm::verdict`]).
//! - [`cases`]: the lid-driven cavity, Poiseuille channel and Taylor-Green vortex, with their analytic or
//!   published solutions.
//! - [`restart`]: checkpoints of a run (the whole lattice, gathered to rank 0 in a layout independent
//!   of the rank count), the parameters a resume must match, and the collective read of one.
//! - [`output`]: velocity and density as .npy and VTK, a PNG of the speed, CSV profiles, into a staged
//!   output directory.
//! - [`tunnel`]: a body between an inlet and an outlet, its frontal area, Reynolds number and drag and
//!   lift coefficients.
//! - [`voxelise`](mod@voxelise): bodies from closed surfaces (STL files): the nodes inside a triangle
//!   mesh, scaled and placed in the grid, as a mask for [`Geometry::add_mask`].
//! - [`reference`](mod@reference): an independent, naive f64 implementation for the tests.
//!
//! Conventions (lattice units, grid `[nx, ny, nz]`, cell `x + nx (y + ny z)`, velocity order) are those of
//! `lattice_gpu_kernels::lbm`.
//!
//! A Taylor-Green vortex on the CPU engine (`Engine::Gpu` runs the same on a GPU) decays at the rate
//! `2 nu k^2`:
//!
//! ```
//! use lattice_gpu_lbm::{cases, Engine, Geometry, Lbm, Params, Streaming};
//!
//! # fn main() -> lattice_gpu_lbm::Result<()> {
//! let dims = [48, 48, 2];
//! let params = Params::bgk(0.8);
//! let init = cases::taylor_green(dims, 0.02)?;
//! let mut lbm = Lbm::<f64>::new(&Engine::Host, Geometry::periodic(dims)?, params, Streaming::TwoLattice, init)?;
//! lbm.run(100)?;
//! let e0 = lbm.moments()?.kinetic_energy();
//! lbm.run(500)?;
//! let rate = (e0 / lbm.moments()?.kinetic_energy()).ln() / 500.0;
//! assert!((rate / cases::taylor_green_rate(dims, &params) - 1.0).abs() < 0.02);
//! # Ok(())
//! # }
//! ```

pub mod cases;
pub mod error;
pub mod geometry;
pub mod output;
pub mod params;
pub mod reference;
pub mod restart;
pub mod schaefer_turek;
pub mod solver;
pub mod tunnel;
pub mod voxelise;

pub use error::{Error, Result};
pub use geometry::Geometry;
pub use lattice_gpu_kernels::lbm::Velocities;
pub use params::{Collision, Open, Params};
pub use solver::{Engine, Lbm, LbmStorage, Moments, Spread, Streaming};
