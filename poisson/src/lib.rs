//! The pressure Poisson solver of the kinaco non-hydrostatic ocean model on lattice-gpu:
//! `-div(c grad p) = f` on a cell-centred grid, solved by conjugate gradients in f64 preconditioned by a
//! geometric-multigrid V-cycle that runs in f32 (or f64) on any loop engine, with the point updates of
//! `lattice_gpu_kernels::poisson`.
//!
//! - [`problem`]: the grid, coefficients and right-hand side, their checks, the 7-point discretisation
//!   and the manufactured solutions.
//! - [`multigrid`]: the level hierarchy and the V-cycle.
//! - [`cg`]: preconditioned conjugate gradients, the operator in f64 and the solve.

pub mod cg;
pub mod error;
pub mod multigrid;
pub mod problem;

pub use error::{Error, Result};
