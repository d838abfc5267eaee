//! The Krylov solvers: each drives an operator the caller supplies, with the vectors where the engine
//! keeps its fields, and reports iterations, residual history and time the same way.
//!
//! - [`cg`]: preconditioned conjugate gradients in f64 on any loop engine's fields (the CPU's or a
//!   GPU's), its scalars on the host or on the engine.
//! - [`bicgstab`]: BiCGStab on the GPU for complex operators (lattice QCD), its scalars in device
//!   memory, with the launch-overhead-hiding variants of Doi's paper; and conjugate gradients on the
//!   normal equations (CGNR) on the same state machine.
//! - [`reliable`]: mixed-precision BiCGStab and CGNR with reliable updates (Clark et al. 2010), the
//!   sloppy iterations on [`bicgstab`]'s solver, the true residual in the outer precision.

pub mod bicgstab;
pub mod cg;
pub mod reliable;
