//! Lattice QCD on lattice-gpu: the Wilson-Dirac operator, even-odd preconditioned BiCGStab run entirely on
//! the GPU with CUDA-overhead hiding (after Doi's strong-scaling paper), ILDG/LIME gauge files, and the pion
//! two-point correlator.
//!
//! # Conventions (every module and kernel follows these)
//!
//! - Lattice `dims = [X, Y, Z, T]`, all even. Directions `mu = 0, 1, 2, 3` are x, y, z, t.
//! - Lexicographic site index `n = x + X * (y + Y * (z + Z * t))`.
//! - Parity `p = (x + y + z + t) % 2` (even = 0). Because `X` is even, the sites `n` and `n ^ 1` differ
//!   only in `x` and have opposite parities, so `n / 2` numbers the sites of one parity without gaps
//!   (the checkerboard index `cb`). Even-odd ordered vectors hold all even sites (by `cb`), then all odd.
//! - Gauge links `U_mu(n)` in SU(3), stored as `links[4 * n + mu]`, a 3x3 complex matrix with row `a` and
//!   column `b`. This is exactly the ILDG order `[t][z][y][x][mu][a][b]`.
//! - Spinors: 4 spins x 3 colours, complex, stored as `data[(n * 4 + s) * 3 + c]`.
//! - Gamma matrices in the DeGrand-Rossi (chiral) basis, as in QUDA, Chroma and MILC:
//!
//! ```text
//!        | 0  0  0  i |        | 0  0  0 -1 |        | 0  0  i  0 |        | 0  0  1  0 |
//!   g_x =| 0  0  i  0 |   g_y =| 0  0  1  0 |   g_z =| 0  0  0 -i |   g_t =| 0  0  0  1 |
//!        | 0 -i  0  0 |        | 0  1  0  0 |        |-i  0  0  0 |        | 1  0  0  0 |
//!        |-i  0  0  0 |        |-1  0  0  0 |        | 0  i  0  0 |        | 0  1  0  0 |
//! ```
//!
//!   and `g_5 = g_x g_y g_z g_t = diag(1, 1, -1, -1)`.
//! - The Wilson-Dirac operator (Doi's eq. 1), hopping parameter `kappa`:
//!   `D psi(n) = psi(n) - kappa * sum_mu [ (1 - g_mu) U_mu(n) psi(n + mu) + (1 + g_mu) U_mu(n - mu)^dag psi(n - mu) ]`,
//!   written `D = 1 - kappa H` with the hopping term `H`. Boundaries are periodic; with antiperiodic `t` a hop
//!   across the `t` boundary (either direction) carries a factor `-1`.
//! - Even-odd preconditioning: `H` maps even sites to odd ones and back, so in even-odd order
//!   `D = [[1, -kappa H_eo], [-kappa H_oe, 1]]`. The solver works on
//!   `M_hat = 1 - kappa^2 H_eo H_oe` (even sites) with `M_hat x_e = b_e + kappa H_eo b_o`, then
//!   `x_o = b_o + kappa H_oe x_e`.
//!
//! The CPU reference solves `D x = b` on a random gauge field by even-odd preconditioned BiCGStab (the
//! GPU solver, `gpu`, takes the same fields and agrees with it):
//!
//! ```
//! use lattice_gpu_lqcd::gauge::GaugeField;
//! use lattice_gpu_lqcd::geometry::Lattice;
//! use lattice_gpu_lqcd::reference::solve_eo;
//! use lattice_gpu_lqcd::spinor::SpinorField;
//!
//! # fn main() -> lattice_gpu_lqcd::Result<()> {
//! let dims = [4, 4, 4, 8];
//! let lattice = Lattice::new(dims, true)?;
//! let (u, b) = (GaugeField::random(dims, 1), SpinorField::random(dims, 2));
//! let (_x, _record, residual) = solve_eo(&lattice, &u, 0.12, &b, 1e-10, 500)?;
//! assert!(residual < 1e-9, "residual {residual}");
//! # Ok(())
//! # }
//! ```

pub mod checkpoint;
pub mod config;
pub mod distributed;
pub mod error;
pub mod gamma;
pub mod gauge;
pub mod geometry;
pub mod gpu;
pub mod ildg;
pub mod pion;
pub mod reference;
pub mod spinor;

pub use error::{Error, Result};
