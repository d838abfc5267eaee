//! Block-shared memory: static arrays ([`shared_array!`](crate::shared_array)) and the dynamic segment sized
//! at launch ([`dynamic_shared`]).
//!
//! On the GPU both are `.shared` declarations made through `asm!` and turned into generic pointers with
//! `cvta.shared`, so ordinary loads and stores reach them. On the host (one thread per block) a static
//! array is a fresh array on the stack of the caller, and there is no dynamic segment.

/// A pointer to `N` elements of `T` in block-shared memory: `shared_array![f32; 256]`, the cuda_std macro of
/// the same name. Each use site is its own array, shared by the threads of a block and uninitialised.
/// Sizes are `const` operands, because PTX wants literal array sizes.
#[cfg(target_arch = "nvptx64")]
#[macro_export]
macro_rules! shared_array {
    ($t:ty; $n:expr) => {{
        let p: u64;
        // SAFETY: declares a `.shared` array inside braces (its own PTX scope, so every use site is a
        // distinct variable) and converts its address to a generic pointer.
        unsafe {
            core::arch::asm!(
                "{{ .shared .align 16 .b8 lg_shared_array[{bytes}]; cvta.shared.u64 {p}, lg_shared_array; }}",
                bytes = const ($n) * core::mem::size_of::<$t>(),
                p = out(reg64) p,
                options(pure, nomem, nostack),
            );
        }
        p as *mut $t
    }};
}

/// A pointer to `N` elements of `T` in block-shared memory. On the host (one thread per block) this is a
/// default-initialised array whose lifetime is extended to the enclosing block, so write
/// `let p = shared_array![f32; 256];` and use `p` within that block.
#[cfg(not(target_arch = "nvptx64"))]
#[macro_export]
macro_rules! shared_array {
    ($t:ty; $n:expr) => {
        &mut [<$t as core::default::Default>::default(); $n] as *mut [$t; $n] as *mut $t
    };
}

#[cfg(target_arch = "nvptx64")]
core::arch::global_asm!(".extern .shared .align 16 .b8 lg_dynamic_shared[];");

/// The dynamic shared-memory segment of this block (its size is the launch's `shared_mem_bytes`), as a
/// pointer to `T`. Null on the host.
#[inline(always)]
pub fn dynamic_shared<T>() -> *mut T {
    #[cfg(target_arch = "nvptx64")]
    {
        let p: u64;
        // SAFETY: converts the address of the module's dynamic shared segment to a generic pointer.
        unsafe {
            core::arch::asm!("cvta.shared.u64 {p}, lg_dynamic_shared;", p = out(reg64) p, options(pure, nomem, nostack));
        }
        p as *mut T
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        core::ptr::null_mut()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_static_array_is_usable_and_dynamic_is_null() {
        let p = crate::shared_array![f64; 8];
        // SAFETY: the host expansion is an 8-element stack array alive in this block.
        unsafe {
            for i in 0..8 {
                *p.add(i) = i as f64;
            }
            assert_eq!(*p.add(7), 7.0);
        }
        assert!(super::dynamic_shared::<f32>().is_null());
    }
}
