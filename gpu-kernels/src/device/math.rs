//! Floating-point math for device code, the same on the host and the GPU, and the [`Real`] trait that
//! makes point updates generic over f32 and f64.
//!
//! On the GPU these go through `core::f{32,64}::math` (nightly, as the whole nvptx build is), which lowers to
//! the PTX instructions `sqrt.rn`, `fma.rn` and `cvt.rmi`; on the host through std's `f32::mul_add`, `sqrt`
//! and `floor` (stable), the same correctly rounded operations, so both give the same bits.

use core::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub, SubAssign};

/// A floating-point element type of fields and point updates (f32 or f64); values a warp can shuffle.
pub trait Real:
    crate::device::warp::Shuffle
    + Copy
    + Default
    + PartialOrd
    + Send
    + Sync
    + 'static
    + core::fmt::Debug
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
{
    /// `"f32"` or `"f64"`: names the precision in kernel names, tune-cache keys and file headers.
    const NAME: &'static str;
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// Converts from f64, rounding to nearest.
    fn from_f64(v: f64) -> Self;
    /// Converts from u32, rounding to nearest (one instruction on the GPU, where a detour through f64
    /// takes two of its slower f64 conversions).
    fn from_u32(v: u32) -> Self;
    /// Converts to f64 (exact).
    fn to_f64(self) -> f64;
    /// `self * a + b` with one rounding.
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// Correctly rounded square root.
    fn sqrt(self) -> Self;
    /// Largest integer not above `self`.
    fn floor(self) -> Self;
    /// Absolute value.
    fn abs(self) -> Self;
    /// The smaller of two values (the other one if either is NaN).
    fn min(self, other: Self) -> Self;
    /// The larger of two values (the other one if either is NaN).
    fn max(self, other: Self) -> Self;
}

macro_rules! real_impl {
    ($t:ident, $name:literal) => {
        impl Real for $t {
            const NAME: &'static str = $name;
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn from_u32(v: u32) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn mul_add(self, a: Self, b: Self) -> Self {
                #[cfg(target_arch = "nvptx64")]
                return core::$t::math::mul_add(self, a, b);
                #[cfg(not(target_arch = "nvptx64"))]
                return <$t>::mul_add(self, a, b);
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                #[cfg(target_arch = "nvptx64")]
                return core::$t::math::sqrt(self);
                #[cfg(not(target_arch = "nvptx64"))]
                return <$t>::sqrt(self);
            }
            #[inline(always)]
            fn floor(self) -> Self {
                #[cfg(target_arch = "nvptx64")]
                return core::$t::math::floor(self);
                #[cfg(not(target_arch = "nvptx64"))]
                return <$t>::floor(self);
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn min(self, other: Self) -> Self {
                <$t>::min(self, other)
            }
            #[inline(always)]
            fn max(self, other: Self) -> Self {
                <$t>::max(self, other)
            }
        }
    };
}

real_impl!(f32, "f32");
real_impl!(f64, "f64");

/// `a * b + c` with one rounding (`fma.rn`).
#[inline(always)]
pub fn fma<T: Real>(a: T, b: T, c: T) -> T {
    a.mul_add(b, c)
}

/// Correctly rounded square root (`sqrt.rn`).
#[inline(always)]
pub fn sqrt<T: Real>(x: T) -> T {
    x.sqrt()
}

/// Largest integer not above `x` (`cvt.rmi`).
#[inline(always)]
pub fn floor<T: Real>(x: T) -> T {
    x.floor()
}

/// Absolute value.
#[inline(always)]
pub fn abs<T: Real>(x: T) -> T {
    x.abs()
}

/// The smaller of two values.
#[inline(always)]
pub fn min<T: Real>(a: T, b: T) -> T {
    a.min(b)
}

/// The larger of two values.
#[inline(always)]
pub fn max<T: Real>(a: T, b: T) -> T {
    a.max(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fma_rounds_once() {
        // (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: the last term is half an f32 ulp, lost by a separate
        // multiply (round to even) but kept by a fused multiply-add.
        let a = 1.0f32 + 1.0 / 4096.0;
        let c = -(1.0f32 + 1.0 / 2048.0);
        assert_eq!(a * a + c, 0.0);
        assert_eq!(fma(a, a, c), 1.0 / (1u32 << 24) as f32);
        assert_eq!(fma(2.0f64, 3.0, 1.0), 7.0);
    }

    #[test]
    fn sqrt_floor_abs_min_max() {
        assert_eq!(sqrt(2.0f64), core::f64::consts::SQRT_2);
        assert_eq!(sqrt(16.0f32), 4.0);
        assert!(sqrt(-1.0f32).is_nan());
        assert_eq!(floor(-1.5f32), -2.0);
        assert_eq!(floor(2.999f64), 2.0);
        assert_eq!(abs(-0.25f64), 0.25);
        assert_eq!(min(1.0f32, -3.0), -3.0);
        assert_eq!(max(1.0f64, f64::NAN), 1.0);
        assert_eq!(f32::from_f64(0.1), 0.1f32);
        assert_eq!(<f64 as Real>::NAME, "f64");
    }
}
