//! Cubic semi-Lagrangian advection on lattice-gpu (Fukuzawa, GPU Challenge 2010): a 2-D f32 field
//! carried by a steady velocity field, the scheme written once in `lattice_gpu_kernels::advection` and
//! run on the CPU or the GPU, with the paper's GPU techniques as kernel variants.
//!
//! - [`solver`]: the checked problem and a run on any loop engine, with its kernel variant.
//! - [`cases`]: translation, solid-body rotation and a steady swirl, with exact solutions where known.
//! - [`norms`]: error norms and mass drift.
//! - [`checkpoint`]: a run's state written to continue it later with the same bytes.
//! - [`reference`](mod@reference): an independent, straightforward f64 implementation for the tests.
//!
//! A Gaussian hill carried by a constant wind on the CPU engine (a GPU engine runs the same) keeps its
//! shape:
//!
//! ```
//! use lattice_gpu_advection::{cases, Advection, Kernel, Problem};
//! use lattice_gpu_host::HostLoopEngine;
//!
//! # fn main() -> lattice_gpu_advection::Result<()> {
//! let case = cases::translation(96, 96, [1.0, 0.5]);
//! let dt = 0.5 * case.h; // a Courant number of 0.5 along x
//! let problem = Problem { size: [case.nx, case.ny], f0: case.f0, u: case.u, v: case.v, c: dt / case.h };
//! let mut run = Advection::new(&HostLoopEngine, &problem, Kernel::Packed, true)?;
//! for _ in 0..40 {
//!     run.step()?;
//! }
//! let exact = (case.exact.as_ref().unwrap())(40.0 * dt);
//! let worst = run.field()?.iter().zip(&exact).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
//! assert!(worst < 0.02, "largest error {worst}");
//! # Ok(())
//! # }
//! ```

pub mod cases;
pub mod checkpoint;
pub mod error;
pub mod norms;
pub mod reference;
pub mod solver;

pub use error::{Error, Result};
pub use lattice_gpu_host::halo::Halos;
pub use solver::{check_size, most_ranks, Advection, Kernel, Problem, RankMemory};
