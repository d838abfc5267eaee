//! The Wilson-Dirac hopping term for lattice QCD: half-spinor projection (Doi's eq. 2), SU(3) links with
//! 18- or 12-number storage, structure-of-arrays fields on one checkerboard parity.
//!
//! Conventions (lattice `[X, Y, Z, T]`, all even; DeGrand-Rossi gammas; `H` as in
//! `D = 1 - kappa H`) are those of the `lattice-gpu-lqcd` crate's documentation.
//!
//! Layouts: complex arrays (re, im interleaved) in tiles of [`TILE`] = 32 sites, sites numbered by their
//! checkerboard index `cb = n / 2` (`n` lexicographic). Within a tile, entry `k` of all 32 sites is
//! contiguous, so a warp's loads are coalesced, and the entries of one site are a compile-time stride
//! apart, so one address register serves them all (structure of arrays with a fixed inner stride).
//! The half volume `vh` is padded to whole tiles (`tiles = ceil(vh / 32)`); padding stays zero.
//! - spinor on one parity (`ncomp = 12`): component `k = s * 3 + c` of site `cb` at
//!   [`tile_index`]`(cb, 12) + 32 k`;
//! - gauge field: 8 blocks `(p * 4 + mu)` of `tiles * R * 32` entries; link `U_mu(n)` of a site `cb` of
//!   parity `p` has entry `k` at `(p * 4 + mu) * tiles * R * 32 + tile_index(cb, R) + 32 k`. `R = 9` holds
//!   the whole matrix (`k = 3 a + b`), `R = 6` only rows 0 and 1, row 2 being rebuilt as
//!   `conj(row0 x row1)` (exact for SU(3)).

mod dslash;
mod fused;
pub mod halo;

pub use dslash::{
    component_index, edge_order, tile_index, Dslash, Neighbours, FLOPS_PER_SITE, TILE,
};
pub use fused::{FusedIteration, Phase, FUSED_BLOCK};
pub use halo::{Halo, PackFaces, INNER, OUTER, T_HIGH_EDGE, T_LOW_EDGE, T_SPLIT, Y_SPLIT, Z_SPLIT};
