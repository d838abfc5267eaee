//! Scoped atomics on global or shared memory (generic addresses).
//!
//! On the GPU these are explicit PTX `atom` instructions with `.relaxed` semantics and `.gpu` (device) or
//! `.cta` (block) scope, because `core::sync::atomic` orderings are unreliable on nvptx. On the host the
//! same functions are real atomics (the CPU engine runs points in parallel), floats by compare-and-swap.

/// Which threads an atomic is atomic with respect to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The threads of one block (`.cta`): cheaper, for shared-memory accumulators.
    Block,
    /// Every thread on the device (`.gpu`): for global-memory results.
    Device,
}

macro_rules! atomic_op {
    ($(#[$m:meta])* $name:ident, $t:ty, $bits:ty, $ptx:literal, $cls:ident, $host:expr) => {
        $(#[$m])*
        /// Returns the old value.
        ///
        /// # Safety
        /// `p` must be valid and aligned for reads and writes of the type, in global or shared memory.
        #[inline(always)]
        pub unsafe fn $name(p: *mut $t, v: $t, scope: Scope) -> $t {
            #[cfg(target_arch = "nvptx64")]
            {
                let old: $t;
                match scope {
                    Scope::Block => core::arch::asm!(
                        concat!("atom.relaxed.cta.", $ptx, " {o}, [{p}], {v};"),
                        o = out($cls) old, p = in(reg64) p, v = in($cls) v, options(nostack)),
                    Scope::Device => core::arch::asm!(
                        concat!("atom.relaxed.gpu.", $ptx, " {o}, [{p}], {v};"),
                        o = out($cls) old, p = in(reg64) p, v = in($cls) v, options(nostack)),
                }
                old
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                let _ = scope;
                let f: fn(*mut $t, $t) -> $t = $host;
                f(p, v)
            }
        }
    };
}

#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

    /// Floating-point add through compare-and-swap on the bit pattern.
    pub fn add_f32(p: *mut f32, v: f32) -> f32 {
        // SAFETY: the caller of the public function guarantees a valid, aligned pointer.
        let a = unsafe { AtomicU32::from_ptr(p as *mut u32) };
        f32::from_bits(
            a.fetch_update(Relaxed, Relaxed, |b| {
                Some((f32::from_bits(b) + v).to_bits())
            })
            .unwrap_or_else(|b| b),
        )
    }

    pub fn add_f64(p: *mut f64, v: f64) -> f64 {
        // SAFETY: as above.
        let a = unsafe { AtomicU64::from_ptr(p as *mut u64) };
        f64::from_bits(
            a.fetch_update(Relaxed, Relaxed, |b| {
                Some((f64::from_bits(b) + v).to_bits())
            })
            .unwrap_or_else(|b| b),
        )
    }

    pub fn add_u32(p: *mut u32, v: u32) -> u32 {
        // SAFETY: as above.
        unsafe { AtomicU32::from_ptr(p) }.fetch_add(v, Relaxed)
    }

    pub fn max_u32(p: *mut u32, v: u32) -> u32 {
        // SAFETY: as above.
        unsafe { AtomicU32::from_ptr(p) }.fetch_max(v, Relaxed)
    }

    pub fn exch_u32(p: *mut u32, v: u32) -> u32 {
        // SAFETY: as above.
        unsafe { AtomicU32::from_ptr(p) }.swap(v, Relaxed)
    }

    pub fn inc_u32(p: *mut u32, v: u32) -> u32 {
        // SAFETY: as above.
        let a = unsafe { AtomicU32::from_ptr(p) };
        a.fetch_update(Relaxed, Relaxed, |o| Some(if o >= v { 0 } else { o + 1 }))
            .unwrap_or_else(|o| o)
    }
}

atomic_op!(/// `*p += v` for f32 (`atom.add.f32`).
    add_f32, f32, u32, "add.f32", reg32, host::add_f32);
atomic_op!(/// `*p += v` for f64 (`atom.add.f64`, sm_60 and later).
    add_f64, f64, u64, "add.f64", reg64, host::add_f64);
atomic_op!(/// `*p += v` for u32 (wrapping).
    add_u32, u32, u32, "add.u32", reg32, host::add_u32);
atomic_op!(/// `*p = max(*p, v)` for u32.
    max_u32, u32, u32, "max.u32", reg32, host::max_u32);
atomic_op!(/// `*p = v` for u32, as one atomic exchange.
    exch_u32, u32, u32, "exch.b32", reg32, host::exch_u32);
atomic_op!(/// `*p = if *p >= v { 0 } else { *p + 1 }` for u32: a ticket counter that rewinds itself.
    inc_u32, u32, u32, "inc.u32", reg32, host::inc_u32);

/// Orders this thread's memory accesses before and after it for every thread on the device
/// (`fence.acq_rel.gpu`, CUDA's `__threadfence`): writes before it are seen by a thread that observes an
/// atomic after it.
#[inline(always)]
pub fn fence_device() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: a fence has no operands.
    unsafe {
        core::arch::asm!("fence.acq_rel.gpu;", options(nostack))
    }
    #[cfg(not(target_arch = "nvptx64"))]
    core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_atomics_update_and_return_old() {
        let mut x = 1.5f32;
        let mut y = -2.0f64;
        let mut n = 7u32;
        // SAFETY: pointers to live locals.
        unsafe {
            assert_eq!(add_f32(&mut x, 2.0, Scope::Device), 1.5);
            assert_eq!(add_f64(&mut y, 0.5, Scope::Block), -2.0);
            assert_eq!(add_u32(&mut n, 3, Scope::Device), 7);
            assert_eq!(max_u32(&mut n, 4, Scope::Device), 10);
            assert_eq!(exch_u32(&mut n, 42, Scope::Block), 10);
        }
        assert_eq!((x, y, n), (3.5, -1.5, 42));
    }

    #[test]
    fn host_atomics_are_atomic_across_threads() {
        extern crate std;
        let mut total = 0.0f64;
        let p = &mut total as *mut f64 as usize;
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(move || {
                    for _ in 0..10_000 {
                        // SAFETY: `total` outlives the scope; every access is atomic.
                        unsafe { add_f64(p as *mut f64, 1.0, Scope::Device) };
                    }
                });
            }
        });
        assert_eq!(total, 40_000.0);
    }
}
