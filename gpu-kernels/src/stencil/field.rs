//! Field pointers held by point updates. They are plain addresses (host or device memory, whichever the
//! engine allocated), `#[repr(transparent)]` so a point-update struct has the same layout on both sides.

use crate::bind::Bits;

/// A read-only field: element `ix` of a linear array (see [`ArrayIndex3D`](super::ArrayIndex3D)).
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
    #[inline(always)]
    pub fn get(self, ix: usize) -> T {
        // SAFETY: `from_raw`'s contract and the range check of the loop.
        unsafe { *self.0.add(ix) }
    }

    /// The address.
    pub fn as_ptr(self) -> *const T {
        self.0
    }

    /// The same field read as `U`, a type of the same size, alignment and bits: the same indices.
    pub fn cast<U: Bits<T>>(self) -> FieldRef<U> {
        FieldRef(self.0 as *const U)
    }
}

/// Bytes of the vector loads and stores of [`FieldRef::get_vector`] and [`FieldMut::set_vector`]: the
/// widest a GPU thread issues (`ld.global.v4.b32`, `ld.global.v2.b64`).
pub const VECTOR_BYTES: usize = 16;

/// `W` elements as one [`VECTOR_BYTES`]-aligned value, moved with one vector instruction.
#[repr(C, align(16))]
struct Vector<T, const W: usize>([T; W]);

/// The [`VECTOR_BYTES`] at `p` as `[T; W]`. On the GPU one `ld.global.v4.b32` (or `.v2.b64`) in
/// inline PTX: LLVM splits a plain vector load whose lanes are used apart into scalar and 2-wide
/// loads (the red-black sweep by colour issued 36 load instructions where 12 do), each touching a
/// whole sector per thread; the assembly cannot be split.
///
/// # Safety
/// `p` must be valid for the read, [`VECTOR_BYTES`]-aligned, and in global memory on the GPU.
#[inline(always)]
unsafe fn load_vector<T: Copy, const W: usize>(p: *const T) -> [T; W] {
    #[cfg(target_arch = "nvptx64")]
    if core::mem::size_of::<[T; W]>() == VECTOR_BYTES {
        // SAFETY (both arms): the caller's contract; `[T; W]` has the 16 bytes loaded.
        unsafe {
            if core::mem::size_of::<T>() == 8 {
                let (a, b): (u64, u64);
                core::arch::asm!("ld.global.v2.b64 {{{a}, {b}}}, [{p}];",
                    a = out(reg64) a, b = out(reg64) b, p = in(reg64) p,
                    options(pure, readonly, nostack, preserves_flags));
                return core::mem::transmute_copy(&[a, b]);
            }
            let (a, b, c, d): (u32, u32, u32, u32);
            core::arch::asm!("ld.global.v4.b32 {{{a}, {b}, {c}, {d}}}, [{p}];",
                a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
                p = in(reg64) p, options(pure, readonly, nostack, preserves_flags));
            return core::mem::transmute_copy(&[a, b, c, d]);
        }
    }
    // SAFETY: the caller's contract.
    unsafe { (p as *const Vector<T, W>).read().0 }
}

/// Stores `v` at `p`: on the GPU one `st.global.v4.b32` (or `.v2.b64`), as [`load_vector`] loads.
///
/// # Safety
/// As [`load_vector`], for a write.
#[inline(always)]
unsafe fn store_vector<T: Copy, const W: usize>(p: *mut T, v: [T; W]) {
    #[cfg(target_arch = "nvptx64")]
    if core::mem::size_of::<[T; W]>() == VECTOR_BYTES {
        // SAFETY (both arms): the caller's contract; `[T; W]` has the 16 bytes stored.
        unsafe {
            if core::mem::size_of::<T>() == 8 {
                let [a, b]: [u64; 2] = core::mem::transmute_copy(&v);
                core::arch::asm!("st.global.v2.b64 [{p}], {{{a}, {b}}};",
                    a = in(reg64) a, b = in(reg64) b, p = in(reg64) p,
                    options(nostack, preserves_flags));
                return;
            }
            let [a, b, c, d]: [u32; 4] = core::mem::transmute_copy(&v);
            core::arch::asm!("st.global.v4.b32 [{p}], {{{a}, {b}, {c}, {d}}};",
                a = in(reg32) a, b = in(reg32) b, c = in(reg32) c, d = in(reg32) d,
                p = in(reg64) p, options(nostack, preserves_flags));
            return;
        }
    }
    // SAFETY: the caller's contract.
    unsafe { (p as *mut Vector<T, W>).write(Vector(v)) }
}

impl<T: Copy> FieldRef<T> {
    /// Elements `ix .. ix + W` in one vector load when they are [`VECTOR_BYTES`] (as the vector loop's
    /// are; other `W` are never run, but compile in its dead arms).
    ///
    /// # Safety
    /// Element `ix` must be [`VECTOR_BYTES`]-aligned ([`vector_aligned`](Self::vector_aligned)).
    #[inline(always)]
    pub unsafe fn get_vector<const W: usize>(self, ix: usize) -> [T; W] {
        // SAFETY: the caller's alignment, `from_raw`'s contract and the range check of the loop.
        unsafe { load_vector(self.0.add(ix)) }
    }

    /// Whether element `ix` is [`VECTOR_BYTES`]-aligned, as [`get_vector`](Self::get_vector) needs.
    #[inline(always)]
    pub fn vector_aligned(self, ix: usize) -> bool {
        (self.0.wrapping_add(ix) as usize).is_multiple_of(VECTOR_BYTES)
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

    /// Stores `v` at `ix .. ix + W`, in one vector store when they are [`VECTOR_BYTES`].
    ///
    /// # Safety
    /// Element `ix` must be [`VECTOR_BYTES`]-aligned.
    #[inline(always)]
    pub unsafe fn set_vector<const W: usize>(self, ix: usize, v: [T; W]) {
        // SAFETY: the caller's alignment, `from_raw`'s contract and the range check of the loop.
        unsafe { store_vector(self.0.add(ix), v) }
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
