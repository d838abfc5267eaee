//! CPU loops compiled for the widest vectors the CPU has, chosen at run time: the binary's baseline
//! is what every x86-64 CPU has (SSE2), and a build for the machine at hand (`-C target-cpu`) would
//! not run on the next one. The twins have AVX2 and FMA (x86-64-v3): without FMA an update's
//! `mul_add` is a call to libm's `fma`, which no loop vectorises. The bits are the same either way:
//! the FMA instruction and libm round once alike, and LLVM fuses no multiply and add that Rust did
//! not write fused.
//!
//! Each loop has a twin marked `#[target_feature(enable = "avx2,fma")]` that calls it, the loop itself
//! `#[inline(always)]` so that it is compiled again inside the twin ([`avx2!`] writes the twin). A
//! generic twin taking a closure left the closure's body uninlined, in SSE2, in the `diffusion`
//! binary.

/// Whether the CPU has AVX2 and FMA, for which the loops' twins are compiled (x86-64 only).
#[inline(always)]
pub(crate) fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `fn $twin<generics>(args) { $body }` compiled with AVX2 and FMA on x86-64 (an unsafe fn: call it
/// where [`has_avx2_fma`] holds); on other targets a function that is never called.
macro_rules! avx2 {
    ($(#[$doc:meta])* fn $twin:ident<$($g:ident: $b:path),*>($($a:ident: $t:ty),*) $body:block) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The CPU has AVX2 and FMA ([`has_avx2_fma`](super::vectors::has_avx2_fma)).
        #[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx2,fma"))]
        unsafe fn $twin<$($g: $b),*>($($a: $t),*) $body
    };
}
pub(crate) use avx2;
