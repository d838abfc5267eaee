//! Block-shared memory: static arrays ([`shared_array!`](crate::shared_array)) and the dynamic segment sized
//! at launch ([`dynamic_shared`]), and [`SharedPtr`] for accesses that must compile to
//! `ld.shared`/`st.shared`.
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

/// A location in block-shared memory whose reads and writes are `ld.shared`/`st.shared` on the GPU. Through
/// the generic pointers of [`dynamic_shared`] and [`shared_array!`](crate::shared_array) they are generic
/// loads and stores (LLVM cannot see through the `cvta` in `asm!`), which the hardware resolves to the
/// shared window at a cost that hot loops notice. On the GPU this holds the 32-bit shared-window address;
/// on the host a plain pointer (to whatever memory stands in for the block's shared memory there).
/// Elements of 4 and 8 bytes use the shared instructions; others go through a generic pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedPtr<T> {
    #[cfg(target_arch = "nvptx64")]
    addr: u32,
    #[cfg(target_arch = "nvptx64")]
    elem: core::marker::PhantomData<*mut T>,
    #[cfg(not(target_arch = "nvptx64"))]
    ptr: *mut T,
}

impl<T: Copy> SharedPtr<T> {
    /// The start of this block's dynamic shared segment ([`dynamic_shared`]); null on the host.
    #[inline(always)]
    pub fn dynamic() -> Self {
        #[cfg(target_arch = "nvptx64")]
        {
            let addr: u32;
            // SAFETY: takes the shared-window address of the module's dynamic segment.
            unsafe {
                core::arch::asm!("mov.u32 {a}, lg_dynamic_shared;", a = out(reg32) addr, options(pure, nomem, nostack));
            }
            Self {
                addr,
                elem: core::marker::PhantomData,
            }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            Self {
                ptr: core::ptr::null_mut(),
            }
        }
    }

    /// Host code: `p` as a shared pointer. Emulations of a block on the host pass the memory that stands
    /// in for its shared memory this way.
    #[cfg(not(target_arch = "nvptx64"))]
    pub fn from_host_ptr(p: *mut T) -> Self {
        Self { ptr: p }
    }

    /// The element `n` places further (wrapping, as address arithmetic in the shared window does).
    #[inline(always)]
    pub fn wrapping_offset(self, n: isize) -> Self {
        #[cfg(target_arch = "nvptx64")]
        {
            Self {
                addr: self
                    .addr
                    .wrapping_add((n as i32).wrapping_mul(core::mem::size_of::<T>() as i32) as u32),
                elem: core::marker::PhantomData,
            }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            Self {
                ptr: self.ptr.wrapping_offset(n),
            }
        }
    }

    /// The element `n` places further.
    #[inline(always)]
    pub fn wrapping_add(self, n: usize) -> Self {
        self.wrapping_offset(n as isize)
    }

    /// Reads the element.
    ///
    /// # Safety
    /// The location must be inside the block's shared memory (on the host: valid for reads) and hold an
    /// initialised `T`.
    #[inline(always)]
    pub unsafe fn read(self) -> T {
        #[cfg(target_arch = "nvptx64")]
        {
            match core::mem::size_of::<T>() {
                4 => {
                    let v: u32;
                    core::arch::asm!("ld.shared.b32 {v}, [{a}];", v = out(reg32) v, a = in(reg32) self.addr, options(readonly, nostack, preserves_flags));
                    core::mem::transmute_copy(&v)
                }
                8 => {
                    let v: u64;
                    core::arch::asm!("ld.shared.b64 {v}, [{a}];", v = out(reg64) v, a = in(reg32) self.addr, options(readonly, nostack, preserves_flags));
                    core::mem::transmute_copy(&v)
                }
                _ => *self.generic(),
            }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            *self.ptr
        }
    }

    /// Writes the element.
    ///
    /// # Safety
    /// The location must be inside the block's shared memory (on the host: valid for writes).
    #[inline(always)]
    pub unsafe fn write(self, v: T) {
        #[cfg(target_arch = "nvptx64")]
        {
            match core::mem::size_of::<T>() {
                4 => {
                    let v: u32 = core::mem::transmute_copy(&v);
                    core::arch::asm!("st.shared.b32 [{a}], {v};", v = in(reg32) v, a = in(reg32) self.addr, options(nostack, preserves_flags));
                }
                8 => {
                    let v: u64 = core::mem::transmute_copy(&v);
                    core::arch::asm!("st.shared.b64 [{a}], {v};", v = in(reg64) v, a = in(reg32) self.addr, options(nostack, preserves_flags));
                }
                _ => *self.generic() = v,
            }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            *self.ptr = v
        }
    }

    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    fn generic(self) -> *mut T {
        let p: u64;
        // SAFETY: converts a shared-window address to the generic address of the same location.
        unsafe {
            core::arch::asm!("cvta.shared.u64 {p}, {a};", p = out(reg64) p, a = in(reg64) self.addr as u64, options(pure, nomem, nostack));
        }
        p as *mut T
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

    #[test]
    fn host_shared_ptr_reads_and_writes_its_memory() {
        let mut mem = [0.0f64; 6];
        let p = super::SharedPtr::from_host_ptr(mem.as_mut_ptr());
        // SAFETY: every location used is inside `mem`.
        unsafe {
            p.wrapping_add(4).write(2.5);
            p.wrapping_add(5).wrapping_offset(-4).write(-1.0);
            assert_eq!(p.wrapping_add(4).read(), 2.5);
            assert_eq!(p.wrapping_offset(1).read(), -1.0);
        }
        assert_eq!(mem, [0.0, -1.0, 0.0, 0.0, 2.5, 0.0]);
        assert_eq!(
            super::SharedPtr::<f32>::dynamic(),
            super::SharedPtr::from_host_ptr(core::ptr::null_mut())
        );
    }
}
