//! The Wilson-clover term on the GPU: the hopping term of [`Dslash`] followed, in the same thread, by the
//! per-site clover matrix `A = 1 + i kappa c_sw sum sigma F` (or its inverse) of the output site, so that
//! QUDA's asymmetric even-odd operator `M_hat = A_ee - kappa^2 H_eo A_oo^{-1} H_oe` is two launches.
//!
//! [`CloverDslash`] computes the hopping sum `h` of an output site exactly as [`Dslash::site`] does (the
//! same hops in the same order, the same fences), then one of ([`CloverMode`]):
//! - [`CloverMode::Inverse`]: `out = C (x + a h)` (`a h` without `x`), `C` being `A^{-1}` of the output
//!   parity: `t = A_oo^{-1} H_oe x_e` in `M_hat`, and the reconstruction
//!   `x_o = A_oo^{-1} (b_o + kappa H_oe x_e)`;
//! - [`CloverMode::Diagonal`]: `out = C x + a h`, `C` being `A` of the output parity:
//!   `M_hat x_e = A_ee x_e - kappa^2 H_eo t`, and `D x = A x - kappa H x` parity by parity.
//!
//! [`CloverSite`] applies a clover field alone (`out = C x`, no hops): `A_oo^{-1} b_o` for the source
//! `b_hat = b_e + kappa H_eo A_oo^{-1} b_o`.
//!
//! Layout of a clover field of one parity (the matrix `C` of each site of that parity), tiled like the
//! spinors ([`crate::wilson`]): per site [`CLOVER_ENTRIES`] = 36 complex entries (72 reals), entry `k`
//! of site `cb` at [`tile_index`]`(cb, 36) + 32 k`, so that a warp's loads of one entry are one
//! contiguous run. In fixed point ([`WilsonStore::CLOVER_SLOTS`] = 37) the entries are integers,
//! `round(32767 c / m)` with `m` the site's largest real, and slot 36 holds `m / 32767` as an f32: the
//! entries of `A^{-1}` grow without bound near a singular block, so no one scale fits a field. `C` is
//! block-diagonal in chirality (DeGrand-Rossi: `g_5 = diag(1, 1, -1, -1)`), block
//! `ch` acting on spins `2 ch` and `2 ch + 1`, i.e. on spinor components `6 ch .. 6 ch + 6` (index
//! `3 s + c`, row `i` of the block being component `6 ch + i`). Each block is hermitian and stored in
//! the 18 entries `18 ch .. 18 ch + 18`:
//! - entries `0, 1, 2`: the real diagonal in pairs, `(C_00, C_11)`, `(C_22, C_33)`, `(C_44, C_55)`;
//! - entries `3 ..= 17`: the strictly upper triangle `C_ij`, `i < j`, row by row
//!   (`(0,1), (0,2), .., (0,5), (1,2), .., (4,5)`): entry `3 + `[`upper_index`]`(i, j)`; the lower
//!   triangle is `C_ji = conj(C_ij)`.
//!
//! The blocks are applied row by row, each row's output stored as soon as it is summed, so that only
//! the block's six input components and one accumulator stay live besides the hopping sum (f64
//! registers are what limits the hopping kernels).
// Rows, columns and components run in lock step: index loops read best here.
#![allow(clippy::needless_range_loop)]

use super::dslash::{schedule_fence, spinor_elems};
use super::WilsonStore;
use super::{component_index, load_site, store_site, tile_index, Dslash, HopFields, TILE};
use crate::bind::{check_len, Bound, Place, Span, SpanError, SpanMut};
use crate::complex::Complex;

/// Complex entries per site of a clover field (two hermitian 6x6 blocks of 3 + 15 entries).
pub const CLOVER_ENTRIES: usize = 36;

/// Floating-point operations per site of one clover-matrix application (both chiral blocks: per row a
/// real times complex and five complex multiply-adds), as QUDA counts them.
pub const CLOVER_FLOPS_PER_SITE: u64 = 504;

/// Where the entry of row `i` and column `j > i` of a block lies among its 15 strictly upper entries.
#[inline(always)]
pub const fn upper_index(i: usize, j: usize) -> usize {
    i * 6 - i * (i + 1) / 2 + (j - i - 1)
}

/// Numbers (of storage `T`) of a clover field of `sites` sites in the tiled layout (padding to whole
/// tiles included).
#[inline(always)]
pub const fn clover_reals<T: WilsonStore>(sites: usize) -> usize {
    2 * T::CLOVER_SLOTS * sites.div_ceil(TILE) * TILE
}

/// What [`CloverDslash`] does with the hopping sum `h` of a site.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloverMode {
    /// `out = C x + a h` (`x` required): `C` holds `A`.
    Diagonal = 0,
    /// `out = C (x + a h)`, or `C (a h)` without `x`: `C` holds `A^{-1}`.
    Inverse = 1,
}

/// The hopping term and the clover term of the output site in one kernel, as [`CloverMode`] says.
/// `hop` holds the hopping term's lattice, fields and numbers exactly as for [`Dslash`] (its `x`,
/// `a`, `halt`, `cut` and `sites` included); `clover` is the clover field of the output parity, in the
/// fields' storage `T` (in binary16 each entry rounded as a link's, with no norm, since the entries of
/// `A` and `A^{-1}` lie near the unit diagonal and their error counts against it; in fixed point with
/// the site's factor, as the module documentation says).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CloverDslash<T: WilsonStore, const R: usize, const SPLIT: bool = false> {
    /// The hopping term.
    pub hop: Dslash<T, R, SPLIT>,
    /// The clover field `C` of the output parity ([`crate::wilson::clover`] layout).
    pub clover: *const T::Elem,
    /// What to do with the hopping sum.
    pub mode: CloverMode,
}

// SAFETY: each site is written by exactly one thread; the pointers are shared read-only otherwise.
unsafe impl<T: WilsonStore, const R: usize, const S: bool> Send for CloverDslash<T, R, S> {}
// SAFETY: as above.
unsafe impl<T: WilsonStore, const R: usize, const S: bool> Sync for CloverDslash<T, R, S> {}

/// The memory of a clover hopping term ([`CloverDslash::bind`]).
#[derive(Debug)]
pub struct CloverFields<'a, E> {
    /// The hopping term's fields ([`Dslash::bind`]); `x` is required in [`CloverMode::Diagonal`].
    pub hop: HopFields<'a, E>,
    /// The clover field of the output parity: the block's own sites (no ghosts: it is per site).
    pub clover: Span<'a, E>,
}

/// Row `i` of chiral block `ch` of the clover field at site `cb` times `v` (that block's six input
/// components), loading the row's entries as it goes.
///
/// # Safety
/// `clover` addresses a clover field holding site `cb`.
#[inline(always)]
unsafe fn clover_row<T: WilsonStore>(
    clover: *const T::Elem,
    cb: usize,
    ch: usize,
    i: usize,
    v: &[Complex<T::Real>; 6],
) -> Complex<T::Real> {
    let base = tile_index(cb, T::CLOVER_SLOTS) + 18 * ch * TILE;
    let e = |k: usize| unsafe { T::load(clover, base + k * TILE) };
    let pair = e(i / 2);
    let d = if i.is_multiple_of(2) {
        pair.re
    } else {
        pair.im
    };
    let mut w = v[i].scale(d);
    for j in 0..6 {
        if j > i {
            w += e(3 + upper_index(i, j)) * v[j];
        } else if j < i {
            w += e(3 + upper_index(j, i)).conj() * v[j];
        }
    }
    w
}

/// Chiral block `CH` of the clover field at site `cb` times the block's components `x(k)`
/// (`k = 6 CH .. 6 CH + 6`), each row's result given to `put(k, row)` as soon as it is summed.
///
/// # Safety
/// As [`clover_row`].
#[inline(always)]
unsafe fn clover_block<T: WilsonStore, const CH: usize>(
    clover: *const T::Elem,
    cb: usize,
    x: impl Fn(usize) -> Complex<T::Real>,
    mut put: impl FnMut(usize, Complex<T::Real>),
) {
    // Written out, as `components!`.
    let c = 6 * CH;
    let v = [x(c), x(c + 1), x(c + 2), x(c + 3), x(c + 4), x(c + 5)];
    macro_rules! rows {
        ($($i:literal)*) => {$(put(c + $i, unsafe { clover_row::<T>(clover, cb, CH, $i, &v) });)*};
    }
    rows!(0 1 2 3 4 5);
}

impl<T: WilsonStore, const R: usize, const SPLIT: bool> CloverDslash<T, R, SPLIT> {
    /// These numbers (`hop`'s and `mode`) with `mem`'s addresses, checked: the hopping term's spans as
    /// [`Dslash::bind`] checks them, `x` present in [`CloverMode::Diagonal`], and `clover` holding the
    /// output parity's sites.
    pub fn bind<'a>(self, mem: CloverFields<'a, T::Elem>) -> Result<Bound<'a, Self>, SpanError> {
        if self.mode == CloverMode::Diagonal && mem.hop.x.is_none() {
            // `A x` needs the spinor of the output parity.
            check_len("x", 0, spinor_elems::<T>(self.hop.half_volume()))?;
        }
        let hop = self.hop.bind(mem.hop)?;
        check_len(
            "clover",
            mem.clover.len(),
            clover_reals::<T>(self.hop.half_volume()),
        )?;
        let place = Place::common(&[hop.place(), mem.clover.place()])?;
        let c = Self {
            hop: *hop.args(),
            clover: mem.clover.ptr(),
            ..self
        };
        // SAFETY: the hopping term's spans were checked by `Dslash::bind`, the clover field above
        // against every own site (the only sites whose matrix is read).
        Ok(unsafe { Bound::new_unchecked(c, place) })
    }

    /// Computes site `cb` of the output parity.
    ///
    /// # Safety
    /// As [`Dslash::site`], and `clover` addresses the output parity's clover field.
    #[inline(always)]
    pub unsafe fn site(&self, cb: usize) {
        let d = &self.hop;
        if !d.halt.is_null() && unsafe { *d.halt } != 0 {
            return;
        }
        let nb = d.neighbours(cb);
        let mut acc = [Complex::<T::Real>::ZERO; 12];
        // As `Dslash::site`: literal directions, one direction's loads live at a time.
        unsafe {
            d.hop_at(&mut acc, cb, &nb, 0, true);
            d.hop_at(&mut acc, cb, &nb, 0, false);
            schedule_fence();
            d.hop_at(&mut acc, cb, &nb, 1, true);
            d.hop_at(&mut acc, cb, &nb, 1, false);
            schedule_fence();
            d.hop_at(&mut acc, cb, &nb, 2, true);
            d.hop_at(&mut acc, cb, &nb, 2, false);
            schedule_fence();
            d.hop_at(&mut acc, cb, &nb, 3, true);
            d.hop_at(&mut acc, cb, &nb, 3, false);
            schedule_fence();
        }
        // One literal chirality and mode at a time: with a loop over the chiralities LLVM kept `acc` in
        // local memory, and a mode tested per component split the code into small blocks.
        unsafe {
            match (self.mode, T::NORMED) {
                (CloverMode::Inverse, false) => {
                    self.chiral::<0, true>(cb, &acc);
                    self.chiral::<1, true>(cb, &acc);
                }
                (CloverMode::Diagonal, false) => {
                    self.chiral::<0, false>(cb, &acc);
                    self.chiral::<1, false>(cb, &acc);
                }
                (CloverMode::Inverse, true) => self.normed::<true>(cb, &acc),
                (CloverMode::Diagonal, true) => self.normed::<false>(cb, &acc),
            }
        }
    }

    /// The input of the clover matrix at component `k` ([`CloverMode::Inverse`] if `INV`): `a h + x`
    /// in `Dslash::store`'s order (so that `A = 1` gives its bits), or `x`.
    #[inline(always)]
    fn clover_input<const INV: bool>(
        &self,
        h: Complex<T::Real>,
        x: impl FnOnce() -> Complex<T::Real>,
    ) -> Complex<T::Real> {
        if !INV {
            return x();
        }
        let mut s = h.scale(self.hop.a);
        if !self.hop.x.is_null() {
            s += x();
        }
        s
    }

    /// The output at a component whose clover row gave `w`: `w` ([`CloverMode::Inverse`] if `INV`),
    /// or `a h + w`.
    #[inline(always)]
    fn clover_output<const INV: bool>(
        &self,
        h: Complex<T::Real>,
        w: Complex<T::Real>,
    ) -> Complex<T::Real> {
        if INV {
            return w;
        }
        let mut s = h.scale(self.hop.a);
        s += w;
        s
    }

    /// Applies the clover term to chiral block `CH` of a plain site `cb` ([`CloverMode::Inverse`] if
    /// `INV`), `acc` holding its hopping sum, each row stored as soon as it is summed.
    ///
    /// # Safety
    /// As [`site`](Self::site).
    #[inline(always)]
    unsafe fn chiral<const CH: usize, const INV: bool>(
        &self,
        cb: usize,
        acc: &[Complex<T::Real>; 12],
    ) {
        let d = &self.hop;
        let at = |k: usize| component_index::<T>(cb, k);
        let x = |k: usize| self.clover_input::<INV>(acc[k], || unsafe { d.addend(at(k)) });
        let put = |k: usize, w| {
            let v = self.clover_output::<INV>(acc[k], w);
            unsafe { T::store(d.out, at(k), v) };
        };
        unsafe { clover_block::<T, CH>(self.clover, cb, x, put) };
    }

    /// [`chiral`](Self::chiral) for both blocks of a 16-bit site: its `x` loaded whole and its output
    /// stored whole (a site's norm depends on all its values).
    ///
    /// # Safety
    /// As [`site`](Self::site).
    #[inline(always)]
    unsafe fn normed<const INV: bool>(&self, cb: usize, acc: &[Complex<T::Real>; 12]) {
        let d = &self.hop;
        let at = tile_index(cb, T::SLOTS);
        let xs = if d.x.is_null() {
            [Complex::ZERO; 12]
        } else {
            unsafe { load_site::<T>(d.x, at, TILE) }
        };
        let v = components!(|k: usize| self.clover_input::<INV>(acc[k], || xs[k]));
        let w = unsafe { clover_site::<T>(self.clover, cb, &v) };
        let out = components!(|k: usize| self.clover_output::<INV>(acc[k], w[k]));
        unsafe { store_site::<T>(d.out, at, TILE, &out) };
    }
}

/// `[f(0), .., f(11)]`, written out: arrays of a site's components indexed in a loop LLVM unrolls only in
/// part go to local memory (240 bytes of stack and 40% of the copy bandwidth in the 16-bit clover
/// kernels), while literal indices keep them in registers.
macro_rules! components {
    ($f:expr) => {{
        let f = $f;
        [
            f(0),
            f(1),
            f(2),
            f(3),
            f(4),
            f(5),
            f(6),
            f(7),
            f(8),
            f(9),
            f(10),
            f(11),
        ]
    }};
}
use components;

/// The clover matrix of site `cb` times the site's 12 components `v`, both chiral blocks, for a site
/// stored whole (16-bit storage).
///
/// # Safety
/// As [`clover_row`].
#[inline(always)]
unsafe fn clover_site<T: WilsonStore>(
    clover: *const T::Elem,
    cb: usize,
    v: &[Complex<T::Real>; 12],
) -> [Complex<T::Real>; 12] {
    let mut out = [Complex::ZERO; 12];
    let mut put = |k: usize, w| out[k] = w;
    unsafe {
        clover_block::<T, 0>(clover, cb, |k| v[k], &mut put);
        clover_block::<T, 1>(clover, cb, |k| v[k], &mut put);
    }
    if T::UNIT != 1.0 {
        // Fixed point: the site's entries are integers, their factor in the last slot.
        let n = unsafe {
            T::norm(
                clover,
                tile_index(cb, T::CLOVER_SLOTS) + CLOVER_ENTRIES * TILE,
            )
        };
        return components!(|k: usize| out[k].scale(n));
    }
    out
}

/// A clover field applied alone: `out = C x` on the first `sites` sites of a parity (a block's own
/// sites), one thread per site.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CloverSite<T: WilsonStore> {
    /// Output spinor.
    pub out: *mut T::Elem,
    /// Input spinor (same parity).
    pub x: *const T::Elem,
    /// The clover field of that parity.
    pub clover: *const T::Elem,
    /// Sites computed.
    pub sites: u32,
}

// SAFETY: each site is written by exactly one thread.
unsafe impl<T: WilsonStore> Send for CloverSite<T> {}
// SAFETY: as above.
unsafe impl<T: WilsonStore> Sync for CloverSite<T> {}

impl<T: WilsonStore> CloverSite<T> {
    /// `sites` with these addresses, checked: `out` and `x` hold `sites` tiled spinor sites, `clover`
    /// as many clover sites.
    pub fn bind<'a>(
        self,
        out: SpanMut<'a, T::Elem>,
        x: Span<'a, T::Elem>,
        clover: Span<'a, T::Elem>,
    ) -> Result<Bound<'a, Self>, SpanError> {
        let n = self.sites as usize;
        let spinor = spinor_elems::<T>(n);
        check_len("out", out.len(), spinor)?;
        check_len("x", x.len(), spinor)?;
        check_len("clover", clover.len(), clover_reals::<T>(n))?;
        let place = Place::common(&[out.place(), x.place(), clover.place()])?;
        let c = Self {
            out: out.ptr(),
            x: x.ptr(),
            clover: clover.ptr(),
            ..self
        };
        // SAFETY: every span was checked above against the `sites` sites the items address.
        Ok(unsafe { Bound::new_unchecked(c, place) })
    }

    /// Computes site `cb`.
    ///
    /// # Safety
    /// Bound, and `cb < sites`.
    #[inline(always)]
    pub unsafe fn site(&self, cb: usize) {
        if T::NORMED {
            let at = tile_index(cb, T::SLOTS);
            unsafe {
                let xs = load_site::<T>(self.x, at, TILE);
                let out = clover_site::<T>(self.clover, cb, &xs);
                store_site::<T>(self.out, at, TILE, &out);
            }
            return;
        }
        let at = |k: usize| component_index::<T>(cb, k);
        let x = |k: usize| unsafe { T::load(self.x, at(k)) };
        let put = |k: usize, w| unsafe { T::store(self.out, at(k), w) };
        unsafe {
            clover_block::<T, 0>(self.clover, cb, x, put);
            clover_block::<T, 1>(self.clover, cb, x, put);
        }
    }
}

/// Makes one clover hopping entry ([`clover_entries!`](super) names them for the precision).
macro_rules! clover_entry {
    ($name:ident => $t:ty, $r:literal, $split:literal) => {
        crate::kernel! {
            /// Generated kernel entry: one thread per site of the output parity (or of the slices
            /// selected), the hopping term then the clover term.
            pub unsafe fn $name(d: crate::wilson::CloverDslash<$t, $r, $split>) {
                let i = crate::device::thread::index_1d();
                if i < d.hop.threads() {
                    <crate::wilson::CloverDslash<$t, $r, $split> as crate::bind::Kernel>::item(&d, i)
                }
            }
        }
    };
}

/// Makes the clover-only entry of a precision.
macro_rules! clover_site_entry {
    ($name:ident => $t:ty) => {
        crate::kernel! {
            /// Generated kernel entry: one thread per site, `out = C x`.
            pub unsafe fn $name(c: crate::wilson::CloverSite<$t>) {
                let i = crate::device::thread::index_1d();
                if i < c.sites as usize {
                    c.site(i)
                }
            }
        }
    };
}

// SAFETY: the entries (`clover_entry!`) take one `CloverDslash<T, R, SPLIT>` and run `item` for their
// thread; a bound value's spans cover what the hops read (`Dslash::bind`) and the clover field of every
// own site, an item skips a listed site outside the parity, and each item writes only its own site.
unsafe impl<T: super::CloverEntries, const R: usize, const SPLIT: bool> crate::bind::Kernel
    for CloverDslash<T, R, SPLIT>
{
    const MODULE: &'static str = env!("CARGO_CRATE_NAME");

    fn entry(&self) -> &'static str {
        T::CLOVER[SPLIT as usize][(R == 6) as usize]
    }

    fn items(&self) -> usize {
        self.hop.threads()
    }

    #[inline(always)]
    unsafe fn item(&self, i: usize) {
        let cb = self.hop.site_of(i);
        if cb < self.hop.half_volume() {
            // SAFETY: bound, and `cb` a site of the output parity.
            unsafe { self.site(cb) }
        }
    }
}

// SAFETY: the entry (`clover_site_entry!`) takes one `CloverSite<T>` and guards its thread; a bound
// value's spans hold `sites` sites, and each item writes its own site.
unsafe impl<T: super::CloverEntries> crate::bind::Kernel for CloverSite<T> {
    const MODULE: &'static str = env!("CARGO_CRATE_NAME");

    fn entry(&self) -> &'static str {
        T::CLOVER_SITE
    }

    fn items(&self) -> usize {
        self.sites as usize
    }

    #[inline(always)]
    unsafe fn item(&self, i: usize) {
        // SAFETY: bound, and `i < sites` (the caller's contract).
        unsafe { self.site(i) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upper_entries_are_numbered_row_by_row_without_gaps() {
        let mut k = 0;
        for i in 0..6 {
            for j in i + 1..6 {
                assert_eq!(upper_index(i, j), k, "({i}, {j})");
                k += 1;
            }
        }
        assert_eq!(3 + k, CLOVER_ENTRIES / 2);
    }
}
