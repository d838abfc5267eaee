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
//!   [`tile_index`]`(cb, 12) + 32 k`; in 16-bit storage ([`WilsonStore::NORMED`]) `ncomp = 13`, slot 12
//!   holding the site's norm as an f32;
//! - gauge field: 8 blocks `(p * 4 + mu)` of `tiles * R * 32` entries; link `U_mu(n)` of a site `cb` of
//!   parity `p` has entry `k` at `(p * 4 + mu) * tiles * R * 32 + tile_index(cb, R) + 32 k`. `R = 9` holds
//!   the whole matrix (`k = 3 a + b`), `R = 6` only rows 0 and 1, row 2 being rebuilt as
//!   `conj(row0 x row1)` (exact for SU(3)).
//! - clover field on one parity (the Wilson-clover term, [`clover`]): 36 complex entries per site, entry
//!   `k` of site `cb` at [`tile_index`]`(cb, 36) + 32 k` (two hermitian 6x6 chiral blocks); in fixed point
//!   ([`WilsonStore::CLOVER_SLOTS`]) 37 slots a site, slot 36 holding the factor of its entries.

#[macro_use]
pub mod clover;
#[macro_use]
mod dslash;
#[macro_use]
mod fused;
#[macro_use]
pub mod halo;
mod store;

pub use clover::{
    clover_reals, upper_index, CloverDslash, CloverFields, CloverMode, CloverSite, CLOVER_ENTRIES,
    CLOVER_FLOPS_PER_SITE,
};
pub use dslash::{
    component_index, edge_order, tile_index, Dslash, HopFields, Neighbours, FLOPS_PER_SITE, TILE,
};
pub use fused::{FusedFields, FusedIteration, Phase, FUSED_BLOCK};
pub use halo::{Halo, PackFaces, INNER, OUTER, T_CUT, T_HIGH_EDGE, T_LOW_EDGE, Y_CUT, Z_CUT};
pub use store::{load_site, store_site, Fixed, Half, WilsonStore};

/// A storage with the Wilson kernels' entries in the framework's module: a supertrait of a precision
/// bound, so that generic code over precisions names no kernel type.
pub trait WilsonEntries: WilsonStore {
    /// The hopping kernel's entries, `[split][r12]` (one lattice or a rank's block; 18 or 12 numbers).
    const DSLASH: [[&'static str; 2]; 2];
    /// The face packing's entry.
    const PACK: &'static str;
    /// [`Gamma5`]'s entry.
    const GAMMA5: &'static str;
}

/// `out = gamma_5 inp` on one parity's spinor in the tiled layout: `gamma_5 = diag(1, 1, -1, -1)` in
/// the DeGrand-Rossi basis, so components `k = s * 3 + c` with spin `s` 2 or 3 (`k >= 6`) change sign.
/// It makes the adjoint of a gamma_5-hermitian operator: `M^dag = gamma_5 M gamma_5`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Gamma5<T: WilsonStore> {
    /// Complex slots (whole tiles of [`WilsonStore::SLOTS`]).
    pub n: u32,
    /// The result (may be `inp`).
    pub out: *mut T::Elem,
    /// The spinor.
    pub inp: *const T::Elem,
    /// When not null and non-zero when the kernel runs, it does nothing (a stopped solve).
    pub halt: *const u32,
}

// SAFETY: every element is written by exactly one thread.
unsafe impl<T: WilsonStore> Send for Gamma5<T> {}
// SAFETY: as above.
unsafe impl<T: WilsonStore> Sync for Gamma5<T> {}

impl<T: WilsonStore> Gamma5<T> {
    /// Element `i`'s sign under gamma_5: `-1` for the lower two spins.
    #[inline(always)]
    pub fn flips(i: usize) -> bool {
        (6..12).contains(&((i / TILE) % T::SLOTS))
    }

    /// Element `i`.
    ///
    /// # Safety
    /// Both vectors hold `n` complex elements and `i < n`.
    #[inline(always)]
    pub unsafe fn element(&self, i: usize) {
        // A 16-bit site's norm (slot 12) is the same for both.
        if T::NORMED && (i / TILE) % T::SLOTS == 12 {
            unsafe { T::store_norm(self.out, i, T::norm(self.inp, i)) };
            return;
        }
        let z = unsafe { T::load(self.inp, i) };
        let z = if Self::flips(i) { -z } else { z };
        unsafe { T::store(self.out, i, z) };
    }

    /// The GPU body: a grid-stride loop.
    ///
    /// # Safety
    /// As for [`element`](Self::element); `halt` null or one readable word.
    #[inline(always)]
    pub unsafe fn run(&self) {
        if !self.halt.is_null() && unsafe { *self.halt } != 0 {
            return;
        }
        let stride = crate::device::thread::grid_dim_x() as usize
            * crate::device::thread::block_dim_x() as usize;
        let mut i = crate::device::thread::index_1d();
        while i < self.n as usize {
            unsafe { self.element(i) };
            i += stride;
        }
    }
}

/// A plain precision: f32 or f64, stored as it computes.
pub trait PlainStore:
    crate::complex::ComplexReal
    + WilsonStore<Elem = Self, Real = Self, Value = crate::complex::Complex<Self>>
{
}
impl<T> PlainStore for T where
    T: crate::complex::ComplexReal
        + WilsonStore<Elem = T, Real = T, Value = crate::complex::Complex<T>>
{
}

/// A plain precision with the fused BiCGStab iteration, whose vector updates and reductions compute
/// in the stored numbers.
pub trait FusedEntries: WilsonEntries + PlainStore {
    /// The fused BiCGStab iteration's entries, `[r12]`.
    const FUSED: [&'static str; 2];
}

/// Makes a storage's Wilson entries and names them in its [`WilsonEntries`].
macro_rules! wilson_entries {
    ($t:ty => [$d18:ident, $d12:ident, $s18:ident, $s12:ident], $pack:ident, $g5:ident) => {
        dslash_entry!($d18 => $t, 9, false);
        dslash_entry!($d12 => $t, 6, false);
        dslash_entry!($s18 => $t, 9, true);
        dslash_entry!($s12 => $t, 6, true);
        pack_entry!($pack => $t);
        crate::kernel! {
            /// Generated: [`Gamma5`].
            pub unsafe fn $g5(a: Gamma5<$t>) { a.run() }
        }
        impl WilsonEntries for $t {
            const DSLASH: [[&'static str; 2]; 2] = [
                [stringify!($d18), stringify!($d12)],
                [stringify!($s18), stringify!($s12)],
            ];
            const PACK: &'static str = stringify!($pack);
            const GAMMA5: &'static str = stringify!($g5);
        }
    };
    ($t:ty => $d:tt, [$f18:ident, $f12:ident], $pack:ident, $g5:ident) => {
        wilson_entries!($t => $d, $pack, $g5);
        fused_entry!($f18 => $t, 9);
        fused_entry!($f12 => $t, 6);
        impl FusedEntries for $t {
            const FUSED: [&'static str; 2] = [stringify!($f18), stringify!($f12)];
        }
    };
}

wilson_entries!(
    f32 => [dslash_f32_r18, dslash_f32_r12, dslash_split_f32_r18, dslash_split_f32_r12],
    [bicg_fused_f32_r18, bicg_fused_f32_r12],
    pack_faces_f32,
    gamma5_f32
);
wilson_entries!(
    f64 => [dslash_f64_r18, dslash_f64_r12, dslash_split_f64_r18, dslash_split_f64_r12],
    [bicg_fused_f64_r18, bicg_fused_f64_r12],
    pack_faces_f64,
    gamma5_f64
);
wilson_entries!(
    Half => [dslash_half_r18, dslash_half_r12, dslash_split_half_r18, dslash_split_half_r12],
    pack_faces_half,
    gamma5_half
);
wilson_entries!(
    Fixed => [dslash_fixed_r18, dslash_fixed_r12, dslash_split_fixed_r18, dslash_split_fixed_r12],
    pack_faces_fixed,
    gamma5_fixed
);

/// A storage with the Wilson-clover kernels' entries ([`clover`]), beside its [`WilsonEntries`].
pub trait CloverEntries: WilsonEntries {
    /// The clover hopping kernel's entries, `[split][r12]`.
    const CLOVER: [[&'static str; 2]; 2];
    /// The clover-only entry ([`CloverSite`]).
    const CLOVER_SITE: &'static str;
}

/// Makes a precision's clover entries and names them in its [`CloverEntries`].
macro_rules! clover_entries {
    ($t:ty => [$c18:ident, $c12:ident, $s18:ident, $s12:ident], $site:ident) => {
        clover_entry!($c18 => $t, 9, false);
        clover_entry!($c12 => $t, 6, false);
        clover_entry!($s18 => $t, 9, true);
        clover_entry!($s12 => $t, 6, true);
        clover_site_entry!($site => $t);
        impl CloverEntries for $t {
            const CLOVER: [[&'static str; 2]; 2] = [
                [stringify!($c18), stringify!($c12)],
                [stringify!($s18), stringify!($s12)],
            ];
            const CLOVER_SITE: &'static str = stringify!($site);
        }
    };
}

clover_entries!(
    f32 => [clover_f32_r18, clover_f32_r12, clover_split_f32_r18, clover_split_f32_r12],
    clover_site_f32
);
clover_entries!(
    f64 => [clover_f64_r18, clover_f64_r12, clover_split_f64_r18, clover_split_f64_r12],
    clover_site_f64
);
clover_entries!(
    Half => [clover_half_r18, clover_half_r12, clover_split_half_r18, clover_split_half_r12],
    clover_site_half
);
clover_entries!(
    Fixed => [clover_fixed_r18, clover_fixed_r12, clover_split_fixed_r18, clover_split_fixed_r12],
    clover_site_fixed
);
