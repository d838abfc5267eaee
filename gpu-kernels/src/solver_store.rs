//! How a Krylov solver's work vectors are stored ([`SolverStore`]) and the values its vector kernels
//! compute with ([`SolverValue`]): flat complex arrays of f32 or f64, one complex number a value; or
//! Wilson spinors in 16-bit storage ([`Half`], [`Fixed`]), one site a value, because a site's norm
//! depends on all twelve of its numbers, so one thread reads and writes the whole site.

use core::ops::{Add, Sub};

use crate::complex::{Complex, ComplexReal};
use crate::wilson::{load_site, store_site, tile_index, Fixed, Half, WilsonStore, TILE};

/// What a solver's vector kernels compute with: one or more complex numbers, added and scaled alike.
pub trait SolverValue: Copy + Add<Output = Self> + Sub<Output = Self> {
    /// The arithmetic precision.
    type Real: ComplexReal;
    /// Complex numbers in one value.
    const WIDTH: usize;
    /// `c self`, each number multiplied as `c * z`.
    fn times(self, c: Complex<Self::Real>) -> Self;
    /// `<self, b>`, summed in f64.
    fn conj_dot(self, b: Self) -> Complex<f64>;
    /// `|self|^2`, summed in f64.
    fn norm2(self) -> f64;
    /// `|self - b|^2`, the difference taken in f64.
    fn diff_norm2(self, b: Self) -> f64;
    /// Number `k < WIDTH` in f64 (exact).
    fn number(&self, k: usize) -> Complex<f64>;
    /// The value whose number `k` is `f(k)`, each rounded to the precision.
    fn from_numbers(f: impl FnMut(usize) -> Complex<f64>) -> Self;
}

impl<T: ComplexReal> SolverValue for Complex<T> {
    type Real = T;
    const WIDTH: usize = 1;
    #[inline(always)]
    fn times(self, c: Complex<T>) -> Self {
        c * self
    }
    #[inline(always)]
    fn conj_dot(self, b: Self) -> Complex<f64> {
        self.to_f64().conj_mul(b.to_f64())
    }
    #[inline(always)]
    fn norm2(self) -> f64 {
        self.to_f64().norm_sqr()
    }
    #[inline(always)]
    fn diff_norm2(self, b: Self) -> f64 {
        (self.to_f64() - b.to_f64()).norm_sqr()
    }
    #[inline(always)]
    fn number(&self, _: usize) -> Complex<f64> {
        self.to_f64()
    }
    #[inline(always)]
    fn from_numbers(mut f: impl FnMut(usize) -> Complex<f64>) -> Self {
        Complex::from_f64(f(0))
    }
}

/// The 12 complex numbers of a Wilson spinor site (spin times colour).
#[derive(Clone, Copy, Debug)]
pub struct Site<T>(pub [Complex<T>; 12]);

impl<T: ComplexReal> Add for Site<T> {
    type Output = Self;
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        Self(core::array::from_fn(|k| self.0[k] + b.0[k]))
    }
}

impl<T: ComplexReal> Sub for Site<T> {
    type Output = Self;
    #[inline(always)]
    fn sub(self, b: Self) -> Self {
        Self(core::array::from_fn(|k| self.0[k] - b.0[k]))
    }
}

impl<T: ComplexReal> SolverValue for Site<T> {
    type Real = T;
    const WIDTH: usize = 12;
    #[inline(always)]
    fn times(self, c: Complex<T>) -> Self {
        Self(self.0.map(|z| c * z))
    }
    #[inline(always)]
    fn conj_dot(self, b: Self) -> Complex<f64> {
        let mut d = Complex::ZERO;
        for k in 0..12 {
            d += self.0[k].conj_dot(b.0[k]);
        }
        d
    }
    #[inline(always)]
    fn norm2(self) -> f64 {
        self.0.iter().map(|z| z.to_f64().norm_sqr()).sum()
    }
    #[inline(always)]
    fn diff_norm2(self, b: Self) -> f64 {
        (0..12).map(|k| self.0[k].diff_norm2(b.0[k])).sum()
    }
    #[inline(always)]
    fn number(&self, k: usize) -> Complex<f64> {
        self.0[k].to_f64()
    }
    #[inline(always)]
    fn from_numbers(mut f: impl FnMut(usize) -> Complex<f64>) -> Self {
        Self(core::array::from_fn(|k| Complex::from_f64(f(k))))
    }
}

/// How a solver's work vectors are stored: a vector of `len` complex slots holds `len / VALUE_SLOTS`
/// values.
pub trait SolverStore: Copy + Default + Send + Sync + 'static {
    /// The number a buffer holds.
    type Elem: Copy + Default + Send + Sync + 'static;
    /// What the vector kernels compute with.
    type Value: SolverValue;
    /// `"f32"`, `"f64"`, `"half"` or `"fixed"`: names the vector kernels' entries and tune-cache keys.
    const PRECISION: &'static str;
    /// Complex slots of one value in the vector's length.
    const VALUE_SLOTS: usize;

    /// Value `u` of the vector at `p`.
    ///
    /// # Safety
    /// `p` must hold at least `(u + 1) * SLOTS` complex slots (whole tiles for a 16-bit site).
    unsafe fn load_value(p: *const Self::Elem, u: usize) -> Self::Value;
    /// Stores `v` as value `u` of the vector at `p`.
    ///
    /// # Safety
    /// As for [`load_value`](Self::load_value), and nothing else may access the value concurrently.
    unsafe fn store_value(p: *mut Self::Elem, u: usize, v: Self::Value);
    /// Where number `k` of value `u` lies in an f32 or f64 vector of the same field (the outer
    /// vectors of a mixed-precision solve): `u` for flat vectors; for a 16-bit spinor, component `k` of
    /// site `u` in the tiled layout of 12 slots.
    fn plain_index(u: usize, k: usize) -> usize;
}

macro_rules! flat_store {
    ($($t:ty),*) => {$(
        impl SolverStore for $t {
            type Elem = $t;
            type Value = Complex<$t>;
            const PRECISION: &'static str = stringify!($t);
            const VALUE_SLOTS: usize = 1;
            #[inline(always)]
            unsafe fn load_value(p: *const $t, u: usize) -> Complex<$t> {
                // SAFETY: the caller's contract.
                unsafe { <$t as ComplexReal>::load(p, u) }
            }
            #[inline(always)]
            unsafe fn store_value(p: *mut $t, u: usize, v: Complex<$t>) {
                // SAFETY: the caller's contract.
                unsafe { <$t as ComplexReal>::store(p, u, v) }
            }
            #[inline(always)]
            fn plain_index(u: usize, _: usize) -> usize {
                u
            }
        }
    )*};
}
flat_store!(f32, f64);

macro_rules! site_store {
    ($($t:ty => $elem:ty, $name:literal);*) => {$(
        impl SolverStore for $t {
            type Elem = $elem;
            type Value = Site<f32>;
            const PRECISION: &'static str = $name;
            const VALUE_SLOTS: usize = <$t as WilsonStore>::SLOTS;
            #[inline(always)]
            unsafe fn load_value(p: *const $elem, u: usize) -> Site<f32> {
                // SAFETY: the caller's contract: site `u`'s tile is whole.
                Site(unsafe { load_site::<$t>(p, tile_index(u, Self::VALUE_SLOTS), TILE) })
            }
            #[inline(always)]
            unsafe fn store_value(p: *mut $elem, u: usize, v: Site<f32>) {
                // SAFETY: as for `load_value`.
                unsafe { store_site::<$t>(p, tile_index(u, Self::VALUE_SLOTS), TILE, &v.0) }
            }
            #[inline(always)]
            fn plain_index(u: usize, k: usize) -> usize {
                tile_index(u, 12) + k * TILE
            }
        }
    )*};
}
site_store!(Half => u16, "half"; Fixed => i16, "fixed");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_round_trips_through_its_vector_within_its_rounding() {
        #[repr(C, align(16))]
        struct Tiles([u16; 2 * 13 * TILE * 2]);
        let mut buf = Tiles([0; 2 * 13 * TILE * 2]);
        let p = buf.0.as_mut_ptr();
        let v = Site::<f32>(core::array::from_fn(|k| {
            Complex::new((k as f32 * 0.37).sin(), -(k as f32 * 0.11).cos() * 3.0)
        }));
        // Site 37: the second tile, lane 5.
        unsafe { Half::store_value(p, 37, v) };
        let back = unsafe { Half::load_value(p, 37) };
        for k in 0..12 {
            let (a, b) = (v.0[k], back.0[k]);
            // 11 significant bits of the site's largest (3).
            assert!((a - b).to_f64().abs() <= 3.0 / 2048.0, "{k}: {a:?} {b:?}");
        }
        // The other sites are untouched.
        assert!(unsafe { Half::load_value(p, 36) }.norm2() == 0.0);
        assert_eq!(Half::plain_index(37, 2), 12 * TILE + 5 + 2 * TILE);
    }
}
