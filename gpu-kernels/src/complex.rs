//! Complex numbers for device code, generic over f32/f64, and aligned pair loads so a complex element is
//! one vector memory access (`ld.global.v2`) on the GPU.

use core::ops::{Add, AddAssign, Div, Mul, Neg, Sub};

use crate::device::math::Real;

/// A complex number `re + i im`, laid out as two consecutive reals.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Complex<T> {
    /// Real part.
    pub re: T,
    /// Imaginary part.
    pub im: T,
}

impl<T: Real> Complex<T> {
    /// `re + i im`.
    #[inline(always)]
    pub const fn new(re: T, im: T) -> Self {
        Self { re, im }
    }

    /// 0.
    pub const ZERO: Self = Self {
        re: T::ZERO,
        im: T::ZERO,
    };

    /// The complex conjugate.
    #[inline(always)]
    pub fn conj(self) -> Self {
        Self::new(self.re, -self.im)
    }

    /// `i z`: exact, no multiplication.
    #[inline(always)]
    pub fn mul_i(self) -> Self {
        Self::new(-self.im, self.re)
    }

    /// `conj(self) * b`, the term of a dot product `<a, b>`.
    #[inline(always)]
    pub fn conj_mul(self, b: Self) -> Self {
        Self::new(
            self.re * b.re + self.im * b.im,
            self.re * b.im - self.im * b.re,
        )
    }

    /// `self * b + c`, each part with two fused multiply-adds (one rounding each): half the
    /// instructions of a product and a sum, and the same bits on the CPU and the GPU.
    #[inline(always)]
    pub fn mul_add(self, b: Self, c: Self) -> Self {
        Self::new(
            self.re.mul_add(b.re, (-self.im).mul_add(b.im, c.re)),
            self.re.mul_add(b.im, self.im.mul_add(b.re, c.im)),
        )
    }

    /// `conj(self) * b + c` with fused multiply-adds, as [`mul_add`](Self::mul_add).
    #[inline(always)]
    pub fn conj_mul_add(self, b: Self, c: Self) -> Self {
        Self::new(
            self.re.mul_add(b.re, self.im.mul_add(b.im, c.re)),
            self.re.mul_add(b.im, (-self.im).mul_add(b.re, c.im)),
        )
    }

    /// `|z|^2`.
    #[inline(always)]
    pub fn norm_sqr(self) -> T {
        self.re * self.re + self.im * self.im
    }

    /// `s z` for a real `s`.
    #[inline(always)]
    pub fn scale(self, s: T) -> Self {
        Self::new(self.re * s, self.im * s)
    }

    /// Converts to f64 (exact).
    #[inline(always)]
    pub fn to_f64(self) -> Complex<f64> {
        Complex::new(self.re.to_f64(), self.im.to_f64())
    }

    /// Converts from f64, rounding each part to nearest.
    #[inline(always)]
    pub fn from_f64(z: Complex<f64>) -> Self {
        Self::new(T::from_f64(z.re), T::from_f64(z.im))
    }
}

impl Div for Complex<f64> {
    type Output = Self;
    /// `self / b` (the scalars of a solver, always f64).
    #[inline(always)]
    fn div(self, b: Self) -> Self {
        let d = b.norm_sqr();
        Self::new(
            (self.re * b.re + self.im * b.im) / d,
            (self.im * b.re - self.re * b.im) / d,
        )
    }
}

impl Complex<f64> {
    /// `|z|`.
    #[inline(always)]
    pub fn abs(self) -> f64 {
        self.norm_sqr().sqrt()
    }
}

impl<T: Real> Add for Complex<T> {
    type Output = Self;
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        Self::new(self.re + b.re, self.im + b.im)
    }
}

impl<T: Real> AddAssign for Complex<T> {
    #[inline(always)]
    fn add_assign(&mut self, b: Self) {
        *self = *self + b;
    }
}

impl<T: Real> Sub for Complex<T> {
    type Output = Self;
    #[inline(always)]
    fn sub(self, b: Self) -> Self {
        Self::new(self.re - b.re, self.im - b.im)
    }
}

impl<T: Real> Neg for Complex<T> {
    type Output = Self;
    #[inline(always)]
    fn neg(self) -> Self {
        Self::new(-self.re, -self.im)
    }
}

impl<T: Real> Mul for Complex<T> {
    type Output = Self;
    #[inline(always)]
    fn mul(self, b: Self) -> Self {
        Self::new(
            self.re * b.re - self.im * b.im,
            self.re * b.im + self.im * b.re,
        )
    }
}

/// A real type whose complex arrays (re, im interleaved) can be read and written one element at a time
/// with a single aligned vector access.
pub trait ComplexReal: Real {
    /// Element `i` of the complex array at `p`.
    ///
    /// # Safety
    /// `p` must point to at least `i + 1` complex elements, aligned to twice the size of `Self`.
    unsafe fn load(p: *const Self, i: usize) -> Complex<Self>;
    /// Stores `v` at element `i` of the complex array at `p`.
    ///
    /// # Safety
    /// As for [`load`](Self::load), and nothing else may access the element concurrently.
    unsafe fn store(p: *mut Self, i: usize, v: Complex<Self>);
}

macro_rules! complex_real {
    ($t:ty, $pair:ident, $align:literal) => {
        #[repr(C, align($align))]
        #[derive(Clone, Copy)]
        struct $pair($t, $t);

        impl ComplexReal for $t {
            #[inline(always)]
            unsafe fn load(p: *const Self, i: usize) -> Complex<Self> {
                // SAFETY: the caller guarantees bounds and pair alignment.
                let v = unsafe { *(p as *const $pair).add(i) };
                Complex::new(v.0, v.1)
            }
            #[inline(always)]
            unsafe fn store(p: *mut Self, i: usize, v: Complex<Self>) {
                // SAFETY: as for `load`.
                unsafe { *(p as *mut $pair).add(i) = $pair(v.re, v.im) }
            }
        }
    };
}

complex_real!(f32, PairF32, 8);
complex_real!(f64, PairF64, 16);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_matches_the_definitions() {
        let a = Complex::new(1.5f64, -2.0);
        let b = Complex::new(-0.25f64, 3.0);
        assert_eq!(a * b, Complex::new(1.5 * -0.25 + 6.0, 4.5 + 0.5));
        assert_eq!(a.conj_mul(b), a.conj() * b);
        assert_eq!(a.mul_i(), Complex::new(0.0, 1.0) * a);
        assert_eq!(a.norm_sqr(), 6.25);
        let q = a / b;
        let back = q * b;
        assert!((back - a).abs() < 1e-15);
    }

    #[test]
    fn pair_loads_and_stores_address_whole_elements() {
        let mut v = [0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0];
        // SAFETY: 3 complex elements; f32 arrays on the stack are only 4-byte aligned, so copy into an
        // aligned buffer first.
        #[repr(align(8))]
        struct A([f32; 6]);
        let mut a = A(v);
        unsafe {
            assert_eq!(f32::load(a.0.as_ptr(), 1), Complex::new(2.0, 3.0));
            f32::store(a.0.as_mut_ptr(), 2, Complex::new(-1.0, -2.0));
        }
        v.copy_from_slice(&a.0);
        assert_eq!(v, [0.0, 1.0, 2.0, 3.0, -1.0, -2.0]);
    }
}
