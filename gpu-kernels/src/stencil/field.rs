//! Field pointers held by point updates. They are plain addresses (host or device memory, whichever the
//! engine allocated), `#[repr(transparent)]` so a point-update struct has the same layout on both sides.

/// A read-only field: element `ix` of a linear array (see [`ArrayIndex3D`](super::ArrayIndex3D)). It must
/// not be written during the launch that reads it (see [`get`](Self::get)).
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct FieldRef<T>(*const T);

/// A written field.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct FieldMut<T>(*mut T);

// SAFETY: the engines give each point to exactly one thread; a point update writes only its own point, so
// sharing the pointers between threads is the data-parallel pattern the framework exists for.
unsafe impl<T> Send for FieldRef<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for FieldRef<T> {}
// SAFETY: as above.
unsafe impl<T> Send for FieldMut<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for FieldMut<T> {}

impl<T: Copy> FieldRef<T> {
    /// Wraps an address. The host runtime makes these from its fields; point updates receive them.
    ///
    /// # Safety
    /// `p` must stay valid for every index the point update reads while it runs.
    pub const unsafe fn from_raw(p: *const T) -> Self {
        Self(p)
    }

    /// Element `ix`. Unchecked: the loop checked the range against the update's radius before launch.
    ///
    /// On the GPU, 4- and 8-byte elements are read with `ld.global.nc` through the read-only data cache,
    /// and the compiler is told the read touches no memory it could write: so it may move the loads of
    /// the next point above the store of this one, which keeps twice the bytes in flight per thread.
    /// That is why a read field must not be written by the same launch (the engines double-buffer).
    #[inline(always)]
    pub fn get(self, ix: usize) -> T {
        // SAFETY: `from_raw`'s contract and the range check of the loop.
        let p = unsafe { self.0.add(ix) };
        #[cfg(target_arch = "nvptx64")]
        {
            if core::mem::size_of::<T>() == 4 && core::mem::align_of::<T>() == 4 {
                let v: u32;
                // SAFETY: a valid, aligned global address; the data does not change during the launch,
                // so the load may be treated as pure.
                unsafe {
                    core::arch::asm!(
                        "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; ld.global.nc.b32 {v}, [g]; }}",
                        p = in(reg64) p, v = out(reg32) v, options(pure, nomem, nostack));
                    return core::mem::transmute_copy(&v);
                }
            }
            if core::mem::size_of::<T>() == 8 && core::mem::align_of::<T>() == 8 {
                let v: u64;
                // SAFETY: as above.
                unsafe {
                    core::arch::asm!(
                        "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; ld.global.nc.b64 {v}, [g]; }}",
                        p = in(reg64) p, v = out(reg64) v, options(pure, nomem, nostack));
                    return core::mem::transmute_copy(&v);
                }
            }
        }
        // SAFETY: as above.
        unsafe { *p }
    }

    /// The address.
    pub fn as_ptr(self) -> *const T {
        self.0
    }
}

impl<T: Copy> FieldMut<T> {
    /// Wraps an address; as [`FieldRef::from_raw`], for writing.
    ///
    /// # Safety
    /// `p` must stay valid for every index the point update writes while it runs, and no other reference
    /// may alias the written elements.
    pub const unsafe fn from_raw(p: *mut T) -> Self {
        Self(p)
    }

    /// Element `ix`.
    #[inline(always)]
    pub fn get(self, ix: usize) -> T {
        // SAFETY: as for `FieldRef::get`.
        unsafe { *self.0.add(ix) }
    }

    /// Stores `v` at `ix`.
    #[inline(always)]
    pub fn set(self, ix: usize, v: T) {
        // SAFETY: as for `FieldRef::get`.
        unsafe { *self.0.add(ix) = v }
    }

    /// The same field, read-only.
    #[inline(always)]
    pub fn as_ref(self) -> FieldRef<T> {
        FieldRef(self.0)
    }

    /// The address.
    pub fn as_ptr(self) -> *mut T {
        self.0
    }
}
