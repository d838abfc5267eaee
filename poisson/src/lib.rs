//! The pressure Poisson solver of the kinaco non-hydrostatic ocean model on lattice-gpu:
//! `-div(c grad p) = f` on a cell-centred grid, solved by conjugate gradients in f64 preconditioned by a
//! geometric-multigrid V-cycle that runs in f32 (or f64) on any loop engine, with the point updates of
//! `lattice_gpu_kernels::poisson`.
//!
//! - [`problem`]: the grid, coefficients and right-hand side, their checks, the 7-point discretisation
//!   and the manufactured solutions.
//! - [`multigrid`]: the level hierarchy and the V-cycle.
//! - [`solver`]: the solve, by the framework's preconditioned conjugate gradients
//!   ([`lattice_gpu_host::solvers::cg`]) on the operator in f64 with the V-cycle, its checks (a
//!   signal, a NaN) and its memory footprint.
//! - [`memory`]: the tallies the footprint is replayed into.
//!
//! A manufactured problem solved on the CPU engine (a GPU engine runs the same), the multigrid in f32:
//!
//! ```
//! use lattice_gpu_host::HostLoopEngine;
//! use lattice_gpu_poisson::solver::{solve, Precision};
//! use lattice_gpu_poisson::multigrid::Cycle;
//! use lattice_gpu_poisson::problem::manufactured;
//!
//! # fn main() -> lattice_gpu_poisson::Result<()> {
//! let (problem, exact) = manufactured([16; 3], 1.0, 0.5);
//! let (p, report) =
//!     solve(&HostLoopEngine, &problem, Cycle::default(), Precision::F32, 1e-10, 100, false, &mut |_, _| {})?;
//! assert!(report.iterations < 30);
//! let err: f64 = p.iter().zip(&exact).map(|(a, b)| (a - b).powi(2)).sum::<f64>().sqrt();
//! let norm: f64 = exact.iter().map(|b| b * b).sum::<f64>().sqrt();
//! assert!(err / norm < 0.05); // second order in the cell size
//! # Ok(())
//! # }
//! ```

pub mod error;
pub mod memory;
pub mod multigrid;
pub mod problem;
pub mod solver;

pub use error::{Error, Result};
