//! Lattice QCD on lattice-gpu: the Wilson-Dirac operator, even-odd preconditioned BiCGStab run entirely on
//! the GPU with CUDA-overhead hiding (after Doi's strong-scaling paper), ILDG/LIME gauge files, the pion
//! two-point correlator, and the Wilson-clover term (its CPU reference, [`clover`], and the even-odd
//! operator and solve on the GPU, [`clover_gpu`]).
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
//!
//! # Half precision
//!
//! The hopping term runs in three storages of its fields (`gpu::WilsonStorage`): `f64`, `f32`, and
//! `Half`, IEEE binary16 with the arithmetic in f32: a link entry is stored as the nearest binary16, a
//! spinor site as `v / m` with `m` its largest real, and `m` as an f32 beside it. QUDA stores 16-bit
//! fixed point instead; both were built here, and binary16 was kept as the faster (the GPU converts it
//! on its multiply-add units, `HADD2`, and integers on its slower conversion unit, `I2F`: H100,
//! 12-number links, 11836 against 10044 GFLOPS at 32^3x64), though it rounds to 11 bits where fixed
//! point keeps 15.
//!
//! The rounding of one hopping term `x + a H psi`, relative to the f64 result in the 2-norm over a
//! parity, is at most `gpu::HALF_HOPPING_BOUND = 2^-11` (measured on random fields: `3.1e-4`). A NaN
//! or infinity in a site makes its norm NaN, so it is not lost in the rounding.
//!
//! The clover kernels run in it too (`clover_gpu::CloverStorage`), the clover entries as binary16 like
//! the links: `M_hat` within `clover_gpu::HALF_CLOVER_BOUND = 2^-10` of f64 (measured: `3.5e-4`).
//!
//! QUDA's 16-bit fixed point is a storage too, `Fixed`: spinor values `round(32767 v / m)` with the
//! site's `m / 32767` beside them, link entries `round(32767 u)`, and a clover site's 36 entries scaled
//! by their largest with that factor in a 37th slot. One hopping term is within
//! `gpu::FIXED_HOPPING_BOUND = 2^-14` (measured `3.3e-5`), `M_hat` with clover within
//! `clover_gpu::FIXED_CLOVER_BOUND = 2^-13` (measured `4.3e-5`). Its 15 bits cost the clover solves
//! fewer iterations than binary16's 11 (the `rounding` example, on the CPU; on an H100 at 32^3x64 the
//! clover BiCGStab took 5% more iterations than f64 in fixed point, 41% in binary16), which more than
//! pays for its slower kernels there: use it for clover solves.
//!
//! The mixed-precision solvers (`lqcd solve --sloppy half` or `fixed`, Wilson or clover) iterate in it with
//! reliable updates in f64. BiCGStab converges as in f32; CG on the normal equations (CGNR) loses conjugacy to the
//! rounding on rough fields near their critical kappa and stops with an error that advises an f32
//! inner precision.
//!
//! # Clover
//!
//! The Wilson-clover (Sheikholeslami-Wohlert) operator, module `clover`, follows QUDA and Chroma, which agree
//! on every convention below (read in QUDA `include/kernels/field_strength_tensor.cuh` `computeFmunuCore`,
//! `include/kernels/clover_compute.cuh` `CloverCompute`, `lib/interface_quda.cpp` `loadCloverQuda`; Chroma
//! `lib/meas/glue/mesfield.cc` `mesField`, `lib/actions/ferm/linop/clover_term_qdp_w.h` `makeClov`):
//!
//! - `sigma_mu_nu = (i/2) [g_mu, g_nu]` with the gammas above: hermitian, and block-diagonal in
//!   chirality (spins 0, 1 and 2, 3), so it commutes with `g_5`.
//! - The clover leaf `Q_mu_nu(n)` is the sum of the four plaquettes in the `(mu, nu)` plane that start and
//!   end at `n`, all in the same sense (a step along `+mu` is followed by one along `+nu`):
//!
//! ```text
//!   U_mu(n) U_nu(n+mu) U_mu(n+nu)^dag U_nu(n)^dag
//! + U_nu(n) U_mu(n+nu-mu)^dag U_nu(n-mu)^dag U_mu(n-mu)
//! + U_mu(n-mu)^dag U_nu(n-mu-nu)^dag U_mu(n-mu-nu) U_nu(n-nu)
//! + U_nu(n-nu)^dag U_mu(n-nu) U_nu(n-nu+mu) U_mu(n)^dag
//! ```
//!
//!   Gauge links are periodic in every direction here: the antiperiodic `t` boundary is the fermions'.
//! - `F_mu_nu(n) = (Q_mu_nu(n) - Q_mu_nu(n)^dag) / 8`: anti-hermitian and antisymmetric in `(mu, nu)`,
//!   and not made traceless (neither QUDA nor Chroma subtracts the trace). It is `i` times the hermitian
//!   field strength of the textbooks, `F_mu_nu = i F^herm_mu_nu`.
//! - In this crate's kappa normalisation the operator is `D = A - kappa H`, with per site
//!
//!   `A(n) = 1 + i kappa c_sw sum_{mu<nu} sigma_mu_nu F_mu_nu(n)
//!         = 1 - (kappa c_sw / 2) sum_{mu,nu} sigma_mu_nu F^herm_mu_nu(n)`,
//!
//!   hermitian and block-diagonal: `A = diag(A_+, A_-)`, two 6x6 blocks indexed `3 s + c` (spin `s` within
//!   the block, colour `c`), as QUDA stores a clover field. `c_sw = 0` gives the Wilson operator exactly.
//!
//!   The sign and factor were worked out by hand against both codes. With `c = c_sw / 2` (Chroma halves
//!   `clovCoeff` in `create`), Chroma's `makeClov` builds, in mass normalisation,
//!   `(4 + m) + i c (F_01 - F_23)` for the spin-0, spin-0 colour block (it adds `Im` of
//!   `c (F_23 - F_01)` to the real diagonal) and `c [i (F_12 - F_03) - (F_02 + F_13)]` for spin 1,
//!   spin 0; times `2 kappa = 1 / (4 + m)` these are the entries of `A` above
//!   (`sigma_01 = diag(s_3, s_3)`, `sigma_23 = diag(-s_3, s_3)` in the Pauli matrices `s_k`). QUDA's
//!   `CloverCompute` comment and code give the same block, `1 + c i (F[0,1] - F[2,3])` (its code holds
//!   `F_10 = -F_01` and subtracts), with `c = kappa * csw` (`loadCloverQuda` sets `clover_coeff` to
//!   `kappa * clover_csw`); QUDA then halves it (`A *= 0.5`) for its own storage, whose accessors scale
//!   by 2 (`clover_field_order.h`, "normalization of native storage"). That halving was not traced further
//!   through QUDA's basis change; Chroma's DeGrand-Rossi code fixes the factor on its own.
//! - Even-odd preconditioning puts the clover term on the diagonal, `D = [[A_ee, -kappa H_eo],
//!   [-kappa H_oe, A_oo]]`, and solves QUDA's asymmetric form `M_hat = A_ee - kappa^2 H_eo A_oo^{-1} H_oe`
//!   on even sites with `M_hat x_e = b_e + kappa H_eo A_oo^{-1} b_o`, then
//!   `x_o = A_oo^{-1} (b_o + kappa H_oe x_e)`; `A^{-1}` is the per-site inverse held in the clover field.
//! - On the GPU ([`clover_gpu`]) `M_hat` is two launches of one kernel that adds each site's hops and then
//!   applies its clover matrix: `t = A_oo^{-1} H_oe x_e`, then `A_ee x_e - kappa^2 H_eo t`. GFLOPS count
//!   QUDA's 1320 flops a site per hopping term and 504 per clover matrix applied.
//! - The `lqcd` program solves with it under `--csw C` (`solve` and `propagator`; 0, the default, is the
//!   Wilson operator): [`clover_gpu::solve_clover_with`] on a GPU, [`clover::solve_clover_eo_checked`]
//!   on the CPU engine.

pub mod checkpoint;
pub mod clover;
pub mod clover_gpu;
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
