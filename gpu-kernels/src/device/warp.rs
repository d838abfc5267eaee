//! Warp-level primitives: shuffles, votes, lane id and a warp sum.
//!
//! Shuffles and votes go through LLVM NVVM intrinsics, which LLVM knows are convergent (inline `asm!` call
//! sites are not, and could be moved across divergent branches). All take the full-warp mask.
//! On the host a warp has one lane: a shuffle returns the caller's own value, `ballot` is the predicate.

/// Threads per warp.
pub const WARP_SIZE: u32 = 32;
/// Mask naming every lane of a warp.
pub const FULL_MASK: u32 = 0xffff_ffff;

#[cfg(target_arch = "nvptx64")]
#[allow(improper_ctypes)]
extern "C" {
    #[link_name = "llvm.nvvm.shfl.sync.down.f32"]
    fn shfl_down_f32_(mask: u32, v: f32, delta: u32, c: u32) -> f32;
    #[link_name = "llvm.nvvm.shfl.sync.down.i32"]
    fn shfl_down_i32_(mask: u32, v: i32, delta: u32, c: u32) -> i32;
    #[link_name = "llvm.nvvm.shfl.sync.bfly.f32"]
    fn shfl_xor_f32_(mask: u32, v: f32, lane_mask: u32, c: u32) -> f32;
    #[link_name = "llvm.nvvm.shfl.sync.bfly.i32"]
    fn shfl_xor_i32_(mask: u32, v: i32, lane_mask: u32, c: u32) -> i32;
    #[link_name = "llvm.nvvm.shfl.sync.idx.f32"]
    fn shfl_idx_f32_(mask: u32, v: f32, lane: u32, c: u32) -> f32;
    #[link_name = "llvm.nvvm.shfl.sync.idx.i32"]
    fn shfl_idx_i32_(mask: u32, v: i32, lane: u32, c: u32) -> i32;
    #[link_name = "llvm.nvvm.vote.ballot.sync"]
    fn vote_ballot_(mask: u32, pred: bool) -> u32;
    #[link_name = "llvm.nvvm.vote.all.sync"]
    fn vote_all_(mask: u32, pred: bool) -> bool;
    #[link_name = "llvm.nvvm.vote.any.sync"]
    fn vote_any_(mask: u32, pred: bool) -> bool;
}

/// The `c` operand of `shfl.sync` for a full 32-lane segment: clamp at lane 31 (down, xor, idx).
#[cfg(target_arch = "nvptx64")]
const CLAMP: u32 = 0x1f;

/// Values that can move between lanes of a warp.
pub trait Shuffle: Copy {
    /// The value of lane `lane_id + delta` (own value past the end of the warp): `__shfl_down_sync`.
    fn shfl_down(self, delta: u32) -> Self;
    /// The value of lane `lane_id ^ lane_mask`: `__shfl_xor_sync`, the butterfly of a reduction.
    fn shfl_xor(self, lane_mask: u32) -> Self;
    /// The value of lane `lane`: `__shfl_sync`, a broadcast.
    fn shfl_idx(self, lane: u32) -> Self;
    /// [`shfl_xor`](Self::shfl_xor) among the lanes of `members` only (each of them must call it with
    /// the same `members`; the other lanes may have exited).
    fn shfl_xor_among(self, members: u32, lane_mask: u32) -> Self;
}

macro_rules! shuffle_32 {
    ($t:ty, $down:ident, $xor:ident, $idx:ident) => {
        impl Shuffle for $t {
            #[inline(always)]
            fn shfl_down(self, delta: u32) -> Self {
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: full-mask shuffle, called by every lane (documented contract of this module).
                unsafe {
                    return $down(FULL_MASK, self as _, delta, CLAMP) as _;
                }
                #[cfg(not(target_arch = "nvptx64"))]
                {
                    let _ = delta;
                    self
                }
            }
            #[inline(always)]
            fn shfl_xor(self, lane_mask: u32) -> Self {
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: as above.
                unsafe {
                    return $xor(FULL_MASK, self as _, lane_mask, CLAMP) as _;
                }
                #[cfg(not(target_arch = "nvptx64"))]
                {
                    let _ = lane_mask;
                    self
                }
            }
            #[inline(always)]
            fn shfl_idx(self, lane: u32) -> Self {
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: as above.
                unsafe {
                    return $idx(FULL_MASK, self as _, lane, CLAMP) as _;
                }
                #[cfg(not(target_arch = "nvptx64"))]
                {
                    let _ = lane;
                    self
                }
            }
            #[inline(always)]
            fn shfl_xor_among(self, members: u32, lane_mask: u32) -> Self {
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: every lane of `members` calls it (the caller's contract).
                unsafe {
                    return $xor(members, self as _, lane_mask, CLAMP) as _;
                }
                #[cfg(not(target_arch = "nvptx64"))]
                {
                    let _ = (members, lane_mask);
                    self
                }
            }
        }
    };
}

shuffle_32!(f32, shfl_down_f32_, shfl_xor_f32_, shfl_idx_f32_);
shuffle_32!(i32, shfl_down_i32_, shfl_xor_i32_, shfl_idx_i32_);
shuffle_32!(u32, shfl_down_i32_, shfl_xor_i32_, shfl_idx_i32_);

/// 64-bit values move as two 32-bit halves, as CUDA does for `double`.
impl Shuffle for f64 {
    #[inline(always)]
    fn shfl_down(self, delta: u32) -> Self {
        let (lo, hi) = split(self);
        join(lo.shfl_down(delta), hi.shfl_down(delta))
    }
    #[inline(always)]
    fn shfl_xor(self, lane_mask: u32) -> Self {
        let (lo, hi) = split(self);
        join(lo.shfl_xor(lane_mask), hi.shfl_xor(lane_mask))
    }
    #[inline(always)]
    fn shfl_idx(self, lane: u32) -> Self {
        let (lo, hi) = split(self);
        join(lo.shfl_idx(lane), hi.shfl_idx(lane))
    }
    #[inline(always)]
    fn shfl_xor_among(self, members: u32, lane_mask: u32) -> Self {
        let (lo, hi) = split(self);
        join(
            lo.shfl_xor_among(members, lane_mask),
            hi.shfl_xor_among(members, lane_mask),
        )
    }
}

#[inline(always)]
fn split(v: f64) -> (u32, u32) {
    let b = v.to_bits();
    (b as u32, (b >> 32) as u32)
}

#[inline(always)]
fn join(lo: u32, hi: u32) -> f64 {
    f64::from_bits(lo as u64 | ((hi as u64) << 32))
}

/// Bit `l` set for each lane `l` whose `pred` is true: `__ballot_sync`.
#[inline(always)]
pub fn ballot(pred: bool) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: full-mask vote.
    unsafe {
        vote_ballot_(FULL_MASK, pred)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        pred as u32
    }
}

/// True when `pred` holds on every lane: `__all_sync`.
#[inline(always)]
pub fn all(pred: bool) -> bool {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: full-mask vote.
    unsafe {
        vote_all_(FULL_MASK, pred)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        pred
    }
}

/// True when `pred` holds on some lane: `__any_sync`.
#[inline(always)]
pub fn any(pred: bool) -> bool {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: full-mask vote.
    unsafe {
        vote_any_(FULL_MASK, pred)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        pred
    }
}

/// This thread's lane in its warp (`%laneid`).
#[inline(always)]
pub fn lane_id() -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let l: u32;
        // SAFETY: reads a special register.
        unsafe {
            core::arch::asm!("mov.u32 {l}, %laneid;", l = out(reg32) l, options(pure, nomem, nostack));
        }
        l
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        0
    }
}

/// Sum over the warp, left in every lane (butterfly of `shfl_xor`): the building block of device-side dot
/// products. On the host (one lane) it is `v`.
#[inline(always)]
pub fn sum<T: Shuffle + core::ops::Add<Output = T>>(v: T) -> T {
    #[cfg(target_arch = "nvptx64")]
    {
        let mut v = v;
        let mut m = WARP_SIZE / 2;
        while m > 0 {
            v = v + v.shfl_xor(m);
            m /= 2;
        }
        v
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        v
    }
}

/// `own` plus the value of the paired lane `lane_id ^ 1`, which calls this too (one shuffle between the
/// two lanes only, so pairs that exit together may leave the warp early). On the host a warp has one
/// lane: `partner` computes the other value there and is never called on the GPU. Lane `2m` gets
/// `own + other`, lane `2m + 1` the same sum in the other order, which is the same number.
#[inline(always)]
pub fn pair_sum<T: Shuffle + core::ops::Add<Output = T>>(own: T, partner: impl FnOnce() -> T) -> T {
    #[cfg(target_arch = "nvptx64")]
    {
        let _ = partner;
        own + own.shfl_xor_among(3 << (lane_id() & !1), 1)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        own + partner()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_warp_has_one_lane() {
        assert_eq!(1.5f32.shfl_down(1), 1.5);
        assert_eq!((-7i32).shfl_xor(3), -7);
        assert_eq!(9u32.shfl_idx(0), 9);
        assert_eq!(core::f64::consts::PI.shfl_down(4), core::f64::consts::PI);
        assert_eq!(ballot(true), 1);
        assert_eq!(ballot(false), 0);
        assert!(all(true) && !all(false) && any(true) && !any(false));
        assert_eq!(lane_id(), 0);
        assert_eq!(sum(2.25f64), 2.25);
        assert_eq!(0.5f32.shfl_xor_among(3, 1), 0.5);
        assert_eq!(pair_sum(0.25f64, || 2.0), 2.25);
    }

    #[test]
    fn f64_split_join_round_trips() {
        for v in [0.0, -0.0, 1.0e-300, -3.5e300, f64::MIN_POSITIVE, 1.0 / 3.0] {
            let (lo, hi) = split(v);
            assert_eq!(join(lo, hi).to_bits(), v.to_bits());
        }
    }
}
