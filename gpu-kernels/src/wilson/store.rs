//! How the Wilson fields are stored: f32 and f64 as they are, or in 16 bits with a norm per spinor site
//! and f32 arithmetic, which halves the bytes a hopping term moves: IEEE binary16 ([`Half`]) or QUDA's
//! 16-bit fixed point ([`Fixed`]).
//!
//! Half precision ([`Half`]; QUDA's half fields, Clark et al. 2010, section IV, with binary16 where
//! QUDA stores 16-bit fixed point):
//! - a link entry (every entry of an SU(3) matrix lies in `[-1, 1]`) is stored as the nearest binary16;
//! - a spinor site stores its 24 reals divided by `m`, the largest of their magnitudes, each rounded to
//!   11 significant bits, and `m` as an f32 in one more complex slot (slot 12 of the tiled layout: a
//!   spinor site takes 13 slots, so ghosts and staging carry their norms with them).
//!
//! Binary16 rather than fixed point: both were built and measured (H100, 2026-11-26). The GPU converts
//! binary16 on its multiply-add units but 16-bit integers on its quarter-rate conversion unit, which
//! held the fixed-point hopping kernel at 10044 GFLOPS against 11836 (32^3x64, 12-number links), and
//! mixed-precision BiCGStab to 1e-10 took 0.752 s in fixed point against 0.716 s in binary16 (750
//! and 782 iterations; all-f64 2.416 s). Fixed point keeps 15 bits where binary16 keeps 11, which
//! showed in CGNR only (see `lattice_gpu_host::solvers::reliable`).
//!
//! Fixed point ([`Fixed`]) is back beside it for the clover solves: on the CPU (the `rounding` example of
//! lattice-gpu-lqcd, 2026-11-28; f64 arithmetic, the storages' roundings) the clover BiCGStab at
//! `c_sw` 1 took 8% more iterations than f64 in fixed point and 23.5% more in binary16 (8^3x16, six
//! fields), 3.8% and 13.5% at 16^3x32. Its values carry 15 bits where binary16's carry 11, and that is
//! what the even-odd clover operator's low modes feel. A fixed-point site stores `round(32767 v / m)`
//! and `m / 32767` as its norm; a link entry `round(32767 u)`; a clover site its 36 entries scaled by
//! their largest, with that factor in a 37th slot ([`WilsonStore::CLOVER_SLOTS`]).

use crate::complex::{Complex, ComplexReal};
use crate::device::math::Real;
use crate::solver_store::SolverStore;

/// A storage of the Wilson fields and the precision its arithmetic runs in.
///
/// Its [`SolverStore`] says what a buffer holds (`Elem`: `f32`, `f64`, `u16` or `i16`) and names kernels,
/// tables and tune-cache keys (`PRECISION`: `"f32"`, `"f64"`, `"half"` or `"fixed"`).
pub trait WilsonStore: SolverStore {
    /// The arithmetic precision.
    type Real: ComplexReal;
    /// Whether values are 16-bit, a spinor site's scaled by its norm ([`norm`](Self::norm)).
    const NORMED: bool;
    /// Whether the hopping term multiplies links and spinors with fused multiply-adds. Measured on the
    /// H100 (`lqcd bench`, 2026-11-26): faster in f64 (r18 +7%, r12 +2% at 32^3x64) and in 16-bit storage
    /// (r12 +9% to +10%), slower in f32 (r18 -3.5% at both sizes), whose kernels keep the plain products.
    const FMA: bool = true;
    /// What a stored link entry or spinor value of magnitude 1 holds: 1, or 32767 in [`Fixed`], whose
    /// loads give the integers (the scale is applied once per product: the site's norm, the hop's
    /// factor, the clover site's norm).
    const UNIT: f32 = 1.0;
    /// Complex slots of a clover site in the tiled layout ([`crate::wilson::clover`]): its 36 entries,
    /// and in [`Fixed`] a 37th holding the factor of its entries.
    const CLOVER_SLOTS: usize = 36;
    /// Complex slots of a spinor site in the tiled layout: its 12 components, and its norm if
    /// [`NORMED`](Self::NORMED).
    const SLOTS: usize;
    /// A number to fill a spinor with so that every site decodes to NaN: outputs are poisoned with it
    /// before a kernel writes them.
    const POISON: Self::Elem;

    /// Slot `i` of `p` as stored (for a normed site, before the norm).
    ///
    /// # Safety
    /// `p` must hold at least `i + 1` slots, aligned to one slot.
    unsafe fn load(p: *const Self::Elem, i: usize) -> Complex<Self::Real>;
    /// Stores `v` at slot `i` of `p`, rounded to the storage.
    ///
    /// # Safety
    /// As for [`load`](Self::load), and nothing else may access the slot concurrently.
    unsafe fn store(p: *mut Self::Elem, i: usize, v: Complex<Self::Real>);
    /// Copies slot `from` of `p` to slot `to`, bits unchanged.
    ///
    /// # Safety
    /// As for [`store`](Self::store), for both slots.
    unsafe fn copy(p: *mut Self::Elem, from: usize, to: usize);
    /// The factor of a normed spinor site's values, kept in slot `i`; 1 otherwise.
    ///
    /// # Safety
    /// As for [`load`](Self::load).
    #[inline(always)]
    unsafe fn norm(p: *const Self::Elem, i: usize) -> Self::Real {
        let _ = (p, i);
        <Self::Real as crate::device::math::Real>::ONE
    }
    /// Stores a normed spinor site's factor at slot `i`; nothing otherwise.
    ///
    /// # Safety
    /// As for [`store`](Self::store).
    #[inline(always)]
    unsafe fn store_norm(p: *mut Self::Elem, i: usize, n: Self::Real) {
        let _ = (p, i, n);
    }

    /// A spinor site's 12 components as the slots it stores (the first [`SLOTS`](Self::SLOTS)): for
    /// 16-bit storage, as [`store_site`] writes them on the GPU.
    fn encode_site(v: &[Complex<f64>; 12]) -> [[Self::Elem; 2]; 13] {
        let mut s = SiteSlots([[Self::Elem::default(); 2]; 13]);
        let v = v.map(Complex::from_f64);
        // SAFETY: 13 slots, contiguous (stride 1) and aligned as a slot and an f32.
        unsafe { store_site::<Self>(s.0.as_mut_ptr() as *mut Self::Elem, 0, 1, &v) };
        s.0
    }
    /// The 12 components a spinor site's slots hold: for 16-bit storage, each value times the norm in
    /// f64 (exact).
    fn decode_site(s: &[[Self::Elem; 2]; 13]) -> [Complex<f64>; 12] {
        let s = SiteSlots(*s);
        let p = s.0.as_ptr() as *const Self::Elem;
        // SAFETY: as in `encode_site`.
        let n = unsafe { Self::norm(p, 12) }.to_f64();
        core::array::from_fn(|k| unsafe { Self::load(p, k) }.to_f64().scale(n))
    }
    /// A link's or a clover field's entry as stored (in binary16, the nearest binary16; in fixed point,
    /// `u` times [`UNIT`](Self::UNIT) rounded, `|u|` at most 1, and a NaN as 0, since 16-bit integers
    /// hold none: links are checked finite where they are read, a clover site's NaN goes to its factor).
    fn encode_entry(u: Complex<f64>) -> [Self::Elem; 2];
    /// A site's factor `n` as the slot [`store_norm`](Self::store_norm) writes holds it (the f32's bytes
    /// in 16-bit storage), for the host's packing of fixed-point clover sites.
    fn encode_norm(n: f32) -> [Self::Elem; 2];
}

/// A site's slots on the host, aligned for the 32-bit slot and norm accesses of [`store_site`].
#[repr(C, align(16))]
struct SiteSlots<E>([[E; 2]; 13]);

/// Stores a 16-bit spinor site: its 12 values `v` at slots `at + k stride`, scaled so that its largest
/// real is [`UNIT`](WilsonStore::UNIT), and the factor back (that largest magnitude over the unit) at
/// slot `at + 12 stride`. A NaN or infinity
/// in `v` makes that norm NaN (the sum of each real times zero), so that it is not lost in the rounding. The one writer of
/// a 16-bit site: the hopping kernels, the solvers' vector kernels and the host's encoding.
///
/// # Safety
/// `p` must hold the 13 slots, each aligned to one slot, and nothing else may access them concurrently.
#[inline(always)]
pub unsafe fn store_site<T: WilsonStore>(
    p: *mut T::Elem,
    at: usize,
    stride: usize,
    v: &[Complex<T::Real>; 12],
) {
    let zero = T::Real::ZERO;
    let (mut m, mut bad) = (zero, zero);
    for z in v {
        m = m.max(z.re.abs()).max(z.im.abs());
        bad += z.re * zero + z.im * zero;
    }
    let unit = T::Real::from_f64(T::UNIT as f64);
    let scale = if m > zero { unit / m } else { zero };
    // Written out: LLVM unrolls this loop only in part, and `v` then goes to local memory.
    macro_rules! store {
        ($($k:literal)*) => {
            $(unsafe { T::store(p, at + $k * stride, v[$k].scale(scale)) };)*
        };
    }
    store!(0 1 2 3 4 5 6 7 8 9 10 11);
    let norm = if T::UNIT == 1.0 { m } else { m / unit };
    unsafe { T::store_norm(p, at + 12 * stride, norm + bad) };
}

/// A 16-bit spinor site's 12 values, each stored number times the site's norm (its factor) (slots `at + k stride`,
/// the norm at `at + 12 stride`), in the arithmetic precision.
///
/// # Safety
/// `p` must hold the 13 slots, each aligned to one slot.
#[inline(always)]
pub unsafe fn load_site<T: WilsonStore>(
    p: *const T::Elem,
    at: usize,
    stride: usize,
) -> [Complex<T::Real>; 12] {
    let n = unsafe { T::norm(p, at + 12 * stride) };
    core::array::from_fn(|k| unsafe { T::load(p, at + k * stride) }.scale(n))
}

macro_rules! plain_store {
    ($t:ty, $pair:ident, $align:literal, $fma:literal) => {
        #[repr(C, align($align))]
        #[derive(Clone, Copy)]
        struct $pair($t, $t);

        impl WilsonStore for $t {
            type Real = $t;
            const NORMED: bool = false;
            const SLOTS: usize = 12;
            const POISON: $t = <$t>::NAN;
            const FMA: bool = $fma;

            #[inline(always)]
            unsafe fn load(p: *const $t, i: usize) -> Complex<$t> {
                // SAFETY: the caller's contract.
                unsafe { <$t as ComplexReal>::load(p, i) }
            }
            #[inline(always)]
            unsafe fn store(p: *mut $t, i: usize, v: Complex<$t>) {
                // SAFETY: the caller's contract.
                unsafe { <$t as ComplexReal>::store(p, i, v) }
            }
            #[inline(always)]
            unsafe fn copy(p: *mut $t, from: usize, to: usize) {
                // SAFETY: the caller's contract.
                unsafe {
                    let p = p as *mut $pair;
                    *p.add(to) = *p.add(from);
                }
            }
            fn encode_site(v: &[Complex<f64>; 12]) -> [[$t; 2]; 13] {
                let mut s = [[0.0; 2]; 13];
                for (s, z) in s.iter_mut().zip(v) {
                    *s = [z.re as $t, z.im as $t];
                }
                s
            }
            fn decode_site(s: &[[$t; 2]; 13]) -> [Complex<f64>; 12] {
                core::array::from_fn(|k| Complex::new(s[k][0] as f64, s[k][1] as f64))
            }
            fn encode_entry(u: Complex<f64>) -> [$t; 2] {
                [u.re as $t, u.im as $t]
            }
            fn encode_norm(n: f32) -> [$t; 2] {
                [n as $t, 0.0]
            }
        }
    };
}
plain_store!(f32, SlotF32, 8, false);
plain_store!(f64, SlotF64, 16, true);

/// The slot-level items a 16-bit storage shares: a slot copied as one 32-bit word, and the site's
/// norm read and written as the f32 its slot holds.
macro_rules! sixteen_bit_slots {
    ($elem:ty, $pair:ident) => {
        #[inline(always)]
        unsafe fn copy(p: *mut $elem, from: usize, to: usize) {
            // SAFETY: the caller's contract.
            unsafe {
                let p = p as *mut $pair;
                *p.add(to) = *p.add(from);
            }
        }
        #[inline(always)]
        unsafe fn norm(p: *const $elem, i: usize) -> f32 {
            // SAFETY: the caller's contract; a slot is 4 bytes, aligned to 4.
            unsafe { *(p as *const f32).add(i) }
        }
        #[inline(always)]
        unsafe fn store_norm(p: *mut $elem, i: usize, n: f32) {
            // SAFETY: as for `norm`.
            unsafe { *(p as *mut f32).add(i) = n }
        }
        fn encode_norm(n: f32) -> [$elem; 2] {
            let b = n.to_bits();
            [b as u16 as $elem, (b >> 16) as u16 as $elem]
        }
    };
}

/// Half precision: IEEE binary16 storage with a norm per spinor site, f32 arithmetic (see the module
/// documentation). Buffers hold `u16`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Half;

/// Two binary16 values of a slot, loaded and stored as one 32-bit access.
#[repr(C, align(4))]
#[derive(Clone, Copy)]
struct SlotF16(u16, u16);

/// The binary16 nearest `v` (ties to even), as the GPU's `cvt.rn.f16.f32`.
#[inline(always)]
fn to_f16(v: f32) -> u16 {
    #[cfg(target_arch = "nvptx64")]
    return (v as f16).to_bits();
    #[cfg(not(target_arch = "nvptx64"))]
    return half::f16::from_f32(v).to_bits();
}

/// The value of binary16 `h` (exact).
#[inline(always)]
fn from_f16(h: u16) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return f16::from_bits(h) as f32;
    #[cfg(not(target_arch = "nvptx64"))]
    return half::f16::from_bits(h).to_f32();
}

impl WilsonStore for Half {
    type Real = f32;
    const NORMED: bool = true;
    const SLOTS: usize = 13;
    /// A binary16 NaN: the norm slot reads `0x7e007e00`, a NaN too.
    const POISON: u16 = 0x7e00;

    #[inline(always)]
    unsafe fn load(p: *const u16, i: usize) -> Complex<f32> {
        // SAFETY: the caller's contract.
        let v = unsafe { *(p as *const SlotF16).add(i) };
        Complex::new(from_f16(v.0), from_f16(v.1))
    }
    #[inline(always)]
    unsafe fn store(p: *mut u16, i: usize, v: Complex<f32>) {
        // SAFETY: the caller's contract.
        unsafe { *(p as *mut SlotF16).add(i) = SlotF16(to_f16(v.re), to_f16(v.im)) }
    }
    sixteen_bit_slots!(u16, SlotF16);

    fn encode_entry(u: Complex<f64>) -> [u16; 2] {
        [to_f16(u.re as f32), to_f16(u.im as f32)]
    }
}

/// QUDA's half precision: 16-bit fixed point with a norm per spinor site and per clover site, f32
/// arithmetic (see the module documentation). Buffers hold `i16`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fixed;

/// What a fixed-point value of magnitude 1 holds.
const FIXED_ONE: f32 = 32767.0;

/// Two integers of a fixed-point slot, loaded and stored as one 32-bit access.
#[repr(C, align(4))]
#[derive(Clone, Copy)]
struct SlotI16(i16, i16);

/// `v` rounded to the nearest integer, ties away from zero, the same on the host and the GPU; 0 for a
/// value out of range or NaN (its site's norm is NaN then: [`store_site`]). One compare where a
/// saturating `as` costs a clamp and a NaN test.
#[inline(always)]
fn round_fixed(v: f32) -> i16 {
    // Selects, not a branch: the callers' loops then unroll.
    let v = if v.abs() < FIXED_ONE + 0.5 { v } else { 0.0 };
    let half = if v < 0.0 { -0.5 } else { 0.5 };
    // SAFETY: `|v| + 0.5 < 32768` truncates to at most 32767 in magnitude.
    unsafe { (v + half).to_int_unchecked::<i16>() }
}

impl WilsonStore for Fixed {
    type Real = f32;
    const NORMED: bool = true;
    const UNIT: f32 = FIXED_ONE;
    const CLOVER_SLOTS: usize = 37;
    const SLOTS: usize = 13;
    /// `0x7fc0`: the norm slot reads `0x7fc07fc0`, a NaN.
    const POISON: i16 = 0x7fc0;

    #[inline(always)]
    unsafe fn load(p: *const i16, i: usize) -> Complex<f32> {
        // SAFETY: the caller's contract.
        let v = unsafe { *(p as *const SlotI16).add(i) };
        Complex::new(v.0 as f32, v.1 as f32)
    }
    #[inline(always)]
    unsafe fn store(p: *mut i16, i: usize, v: Complex<f32>) {
        // SAFETY: the caller's contract.
        unsafe { *(p as *mut SlotI16).add(i) = SlotI16(round_fixed(v.re), round_fixed(v.im)) }
    }
    sixteen_bit_slots!(i16, SlotI16);

    fn encode_entry(u: Complex<f64>) -> [i16; 2] {
        let f = |v: f64| round_fixed((v as f32 * FIXED_ONE).clamp(-FIXED_ONE, FIXED_ONE));
        [f(u.re), f(u.im)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A site of small values of both signs, and its largest real.
    fn small_site() -> ([Complex<f64>; 12], f64) {
        let v: [Complex<f64>; 12] = core::array::from_fn(|k| {
            let x = (k as f64 * 0.731).sin() * 1e-7;
            Complex::new(x, -0.5 * x + 1e-9 * k as f64)
        });
        let m = v
            .iter()
            .flat_map(|z| [z.re.abs(), z.im.abs()])
            .fold(0.0, f64::max);
        (v, m)
    }

    #[test]
    fn half_sites_keep_each_real_to_11_bits_of_the_sites_largest() {
        let (v, m) = small_site();
        let s = Half::encode_site(&v);
        let back = Half::decode_site(&s);
        for (a, b) in v.iter().zip(&back) {
            // Half a unit in the last of 11 bits of a value below 1, times m; plus the f32 roundings.
            let bound = m / 2048.0 * (1.0 + 1e-5);
            assert!((a.re - b.re).abs() <= bound && (a.im - b.im).abs() <= bound);
        }
        // The largest real is stored as 1 (binary16 0x3c00), its sign apart.
        let largest = s.iter().take(12).flatten().map(|x| x & 0x7fff).max();
        assert_eq!(largest, Some(0x3c00));
    }

    #[test]
    fn a_site_with_a_nan_or_infinity_decodes_to_nan() {
        for bad in [f64::NAN, f64::INFINITY] {
            let mut v = [Complex::new(0.25, -0.5); 12];
            v[7].im = bad;
            assert!(Half::decode_site(&Half::encode_site(&v))
                .iter()
                .all(|z| z.re.is_nan() && z.im.is_nan()));
        }
    }

    #[test]
    fn the_poison_decodes_to_nan() {
        let site = Half::decode_site(&[[Half::POISON; 2]; 13]);
        assert!(site.iter().all(|z| z.re.is_nan() && z.im.is_nan()));
    }

    #[test]
    fn a_zero_site_stays_zero_and_links_round_to_the_nearest_binary16() {
        let zero = [Complex::new(0.0, 0.0); 12];
        assert_eq!(Half::decode_site(&Half::encode_site(&zero)), zero);
        assert_eq!(
            Half::encode_entry(Complex::new(1.0, -1.0)),
            [0x3c00, 0xbc00]
        );
        // 1 + 2^-11 is a tie between 1 and 1 + 2^-10: to even, 1.
        assert_eq!(
            Half::encode_entry(Complex::new(1.0 + 1.0 / 2048.0, 0.5)),
            [0x3c00, 0x3800]
        );
    }

    #[test]
    fn fixed_sites_keep_each_real_to_half_a_step_of_the_sites_largest() {
        let (v, m) = small_site();
        let s = Fixed::encode_site(&v);
        let back = Fixed::decode_site(&s);
        for (a, b) in v.iter().zip(&back) {
            // Half a step of 32767 steps of m, plus the f32 roundings of the scale and the norm.
            let bound = m / 65534.0 * (1.0 + 1e-3);
            assert!((a.re - b.re).abs() <= bound && (a.im - b.im).abs() <= bound);
        }
        // The largest real is stored as 32767, its sign apart.
        let largest = s.iter().take(12).flatten().map(|x| x.unsigned_abs()).max();
        assert_eq!(largest, Some(32767));
        // A NaN makes the whole site NaN; so does the poison.
        let mut bad = v;
        bad[3].re = f64::NAN;
        assert!(Fixed::decode_site(&Fixed::encode_site(&bad))
            .iter()
            .all(|z| z.re.is_nan()));
        assert!(Fixed::decode_site(&[[Fixed::POISON; 2]; 13])
            .iter()
            .all(|z| z.re.is_nan() && z.im.is_nan()));
    }

    #[test]
    fn fixed_links_round_to_the_nearest_of_32767_steps() {
        assert_eq!(
            Fixed::encode_entry(Complex::new(1.0, -1.0)),
            [32767, -32767]
        );
        assert_eq!(Fixed::encode_entry(Complex::new(0.1, -0.25)), [3277, -8192]);
        let zero = [Complex::new(0.0, 0.0); 12];
        assert_eq!(Fixed::decode_site(&Fixed::encode_site(&zero)), zero);
    }
}
