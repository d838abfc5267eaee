//! How populations are stored: f32 and f64 as they are, or as IEEE half precision (FluidX3D's FP16S)
//! with f32 arithmetic, which halves the bytes per cell.

use crate::device::math::Real;

/// The scale of half-precision storage: deviations `f_q - w_q` are stored times this, which moves them
/// (at most about 1 in magnitude) up to where f16 keeps 11 significant bits instead of flushing to
/// subnormals.
pub const HALF_SCALE: f32 = 32768.0;

/// A population storage type and the precision the collision computes in.
pub trait Storage:
    Copy + Default + Send + Sync + 'static + super::step::StepEntry + super::force::ForceEntry
{
    /// The arithmetic precision.
    type Real: Real;
    /// `"f32"`, `"f64"` or `"f16"`: names kernels, tables and files.
    const NAME: &'static str;

    /// Element `i` of `p` as a deviation `f_q - w_q`.
    ///
    /// # Safety
    /// `p.add(i)` must be valid for reads.
    unsafe fn load(p: *const Self, i: usize) -> Self::Real;

    /// Stores the deviation `v` at element `i` of `p`.
    ///
    /// # Safety
    /// `p.add(i)` must be valid for writes.
    unsafe fn store(p: *mut Self, i: usize, v: Self::Real);
    /// The stored form of deviation `v`.
    fn encode(v: Self::Real) -> Self;
    /// The deviation this holds.
    fn decode(self) -> Self::Real;
}

macro_rules! plain_storage {
    ($t:ty, $name:literal) => {
        impl Storage for $t {
            type Real = $t;
            const NAME: &'static str = $name;

            #[inline(always)]
            unsafe fn load(p: *const Self, i: usize) -> $t {
                // SAFETY: the caller's contract.
                unsafe { *p.add(i) }
            }

            #[inline(always)]
            unsafe fn store(p: *mut Self, i: usize, v: $t) {
                // SAFETY: the caller's contract.
                unsafe { *p.add(i) = v }
            }
            #[inline(always)]
            fn encode(v: $t) -> Self {
                v
            }
            #[inline(always)]
            fn decode(self) -> $t {
                self
            }
        }
    };
}
plain_storage!(f32, "f32");
plain_storage!(f64, "f64");

/// An IEEE binary16 value (its bits), the storage of the half-precision lattice.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Half(pub u16);

impl Half {
    /// `v * HALF_SCALE` rounded to the nearest half (ties to even), as the GPU's `cvt.rn.f16.f32` does.
    /// The host converts with the `half` crate (`f16` is unstable in Rust), which rounds the same way.
    #[inline(always)]
    pub fn encode(v: f32) -> Self {
        #[cfg(target_arch = "nvptx64")]
        return Half(((v * HALF_SCALE) as f16).to_bits());
        #[cfg(not(target_arch = "nvptx64"))]
        return Half(half::f16::from_f32(v * HALF_SCALE).to_bits());
    }

    /// The deviation this half holds (exact: every half is an f32).
    #[inline(always)]
    pub fn decode(self) -> f32 {
        #[cfg(target_arch = "nvptx64")]
        let v = f16::from_bits(self.0) as f32;
        #[cfg(not(target_arch = "nvptx64"))]
        let v = half::f16::from_bits(self.0).to_f32();
        v * (1.0 / HALF_SCALE)
    }
}

impl Storage for Half {
    type Real = f32;
    const NAME: &'static str = "f16";

    #[inline(always)]
    unsafe fn load(p: *const Self, i: usize) -> f32 {
        // SAFETY: the caller's contract.
        unsafe { *p.add(i) }.decode()
    }

    #[inline(always)]
    unsafe fn store(p: *mut Self, i: usize, v: f32) {
        // SAFETY: the caller's contract.
        unsafe { *p.add(i) = Half::encode(v) }
    }
    #[inline(always)]
    fn encode(v: f32) -> Self {
        Half::encode(v)
    }
    #[inline(always)]
    fn decode(self) -> f32 {
        Half::decode(self)
    }
}

// SAFETY: `Half` is a transparent `u16`; every bit pattern is a valid value of either.
unsafe impl crate::bind::Bits<u16> for Half {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_round_trip_and_rounding() {
        for v in [0.0f32, 1e-3, -0.25, 0.5, 1.0 / 3.0, -1.0 / 36.0] {
            let back = Half::encode(v).decode();
            // 11 significant bits.
            assert!(
                (back - v).abs() <= v.abs() * 2f32.powi(-11),
                "{v} -> {back}"
            );
            assert_eq!(Half::encode(back), Half::encode(v));
        }
        // Ties go to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
        let tie = (1.0 + 2f32.powi(-11)) / HALF_SCALE;
        assert_eq!(Half::encode(tie).decode(), 1.0 / HALF_SCALE);
    }

    /// Every pair of neighbouring finite halves (subnormals included): values just inside either side of
    /// their midpoint round to the nearer one, the midpoint to the one with the even last bit, as
    /// `cvt.rn.f16.f32` rounds on the GPU; decoding is exact.
    #[test]
    fn encoding_rounds_to_the_nearest_half_ties_to_even() {
        // The value of half `h` from its bits, computed independently of any converter.
        let value = |h: u16| -> f64 {
            let (exp, man) = ((h >> 10) & 0x1f, f64::from(h & 0x3ff));
            let mag = match exp {
                0 => man * 2f64.powi(-24),
                e => (1024.0 + man) * 2f64.powi(i32::from(e) - 25),
            };
            if h & 0x8000 != 0 {
                -mag
            } else {
                mag
            }
        };
        let scale = f64::from(HALF_SCALE);
        for sign in [0u16, 0x8000] {
            for h in 0..0x7bffu16 {
                let (lo, hi) = (h | sign, (h + 1) | sign);
                assert_eq!(f64::from(Half(lo).decode()), value(lo) / scale);
                let mid = (value(lo) + value(hi)) / 2.0;
                // One f32 step towards zero and away from it (bits order magnitudes, whatever the sign).
                let (near_lo, near_hi) = (
                    f64::from(f32::from_bits((mid as f32).to_bits() - 1)),
                    f64::from(f32::from_bits((mid as f32).to_bits() + 1)),
                );
                let enc = |x: f64| Half::encode((x / scale) as f32).0;
                assert_eq!(enc(near_lo), lo, "just inside {lo:#06x}");
                assert_eq!(enc(near_hi), hi, "just inside {hi:#06x}");
                let even = if lo & 1 == 0 { lo } else { hi };
                assert_eq!(enc(mid), even, "tie between {lo:#06x} and {hi:#06x}");
            }
        }
    }
}
