//! Where one rank's block of a lattice split over GPUs keeps the sites of its neighbours, and the kernel
//! that packs the faces it sends.
//!
//! A block is cut along any of `y`, `z` and `t` (never `x`, the tiles' axis). A stored parity holds,
//! each region starting on a whole tile so that it travels as one contiguous range:
//! - the block's own sites (`cb < half volume`), padded to whole tiles;
//! - per cut axis (`t`, then `z`, then `y`): the upper ghost face (the upper neighbour's first layer),
//!   then the lower one (the lower neighbour's last layer), each padded to whole tiles;
//! - per cut axis other than `t` (`z`, then `y`): this block's first layer, then its last, packed by
//!   [`PackFaces`] (a `t` layer is already contiguous: it is sent from where it is stored).
//!
//! Links are stored for the own sites and the ghosts (a backward hop across a lower edge reads the lower
//! neighbour's link). A face site is numbered like `cb` with the cut axis's coordinate left out, so a
//! site and its neighbour across the edge have the same face index on both ranks.

use super::store::WilsonStore;
use crate::bind::{check_len, Bound, SpanError, SpanMut};

use super::{tile_index, TILE};

/// [`Dslash::cut`](super::Dslash::cut): `t` is cut.
pub const T_CUT: u32 = 1;
/// [`Dslash::cut`](super::Dslash::cut): this rank's lower `t` edge is the global boundary.
pub const T_LOW_EDGE: u32 = 2;
/// [`Dslash::cut`](super::Dslash::cut): this rank's upper `t` edge is the global boundary.
pub const T_HIGH_EDGE: u32 = 4;
/// [`Dslash::cut`](super::Dslash::cut): only the sites that read no ghost; they run while the
/// ghosts are exchanged.
pub const INNER: u32 = 8;
/// [`Dslash::cut`](super::Dslash::cut): only the sites that read a ghost.
pub const OUTER: u32 = 16;
/// [`Dslash::cut`](super::Dslash::cut): `z` is cut.
pub const Z_CUT: u32 = 32;
/// [`Dslash::cut`](super::Dslash::cut): `y` is cut.
pub const Y_CUT: u32 = 64;

/// The flag of cut axis `axis` (1: `y`, 2: `z`, 3: `t`).
#[inline(always)]
pub const fn cut_flag(axis: usize) -> u32 {
    match axis {
        1 => Y_CUT,
        2 => Z_CUT,
        3 => T_CUT,
        _ => 0,
    }
}

/// Whether `cut` cuts `axis`.
#[inline(always)]
pub const fn is_cut(cut: u32, axis: usize) -> bool {
    cut & cut_flag(axis) != 0
}

#[inline(always)]
const fn whole_tiles(sites: usize) -> usize {
    sites.div_ceil(TILE) * TILE
}

/// The stored layout of one parity of a block (sites, not elements): see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Halo {
    /// Sites of each axis's face (the block's sites of one parity in one layer); 0 where not cut.
    pub face: [usize; 4],
    /// First site of each cut axis's upper ghost; its lower ghost follows [`room`](Self::room) sites on.
    pub ghost: [usize; 4],
    /// First site of each packed axis's staging: its first layer, then its last, `room` sites apart.
    pub stage: [usize; 4],
    /// Sites with links: the own sites and the ghosts.
    pub link_sites: usize,
    /// Sites of a stored spinor parity: all the regions.
    pub sites: usize,
}

impl Halo {
    /// The layout of a block `dims` (local sizes, all even) cut as `cut` says.
    #[inline(always)]
    pub fn new(dims: [u32; 4], cut: u32) -> Self {
        let half = dims.iter().map(|&d| d as usize).product::<usize>() / 2;
        let mut h = Self {
            face: [0; 4],
            ghost: [0; 4],
            stage: [0; 4],
            link_sites: 0,
            sites: 0,
        };
        let mut at = whole_tiles(half);
        // Literal axes, no loop: every index is a constant, so the struct lives in registers (a loop
        // left rolled indexes it at run time and puts it on the stack).
        let mut ghost = |h: &mut Self, a: usize| {
            if is_cut(cut, a) {
                h.face[a] = half / dims[a] as usize;
                h.ghost[a] = at;
                at += 2 * whole_tiles(h.face[a]);
            }
        };
        ghost(&mut h, 3);
        ghost(&mut h, 2);
        ghost(&mut h, 1);
        h.link_sites = at;
        let mut stage = |h: &mut Self, a: usize| {
            if is_cut(cut, a) {
                h.stage[a] = at;
                at += 2 * whole_tiles(h.face[a]);
            }
        };
        stage(&mut h, 2);
        stage(&mut h, 1);
        h.sites = at;
        h
    }

    /// Sites a face region takes (the face padded to whole tiles).
    #[inline(always)]
    pub fn room(&self, axis: usize) -> usize {
        whole_tiles(self.face[axis])
    }
}

/// The face index of the site at `c = [x, y, z, t]` on a face across `axis` of a block `dims`: its
/// `cb` with that axis left out.
#[inline(always)]
pub fn face_index(dims: [u32; 4], c: [u32; 4], axis: usize) -> usize {
    let [_, ny, nz, _] = dims;
    let xh = dims[0] / 2;
    let [x, y, z, t] = c;
    let rest = match axis {
        1 => t * nz + z,
        2 => t * ny + y,
        _ => z * ny + y,
    };
    (rest * xh + x / 2) as usize
}

/// Copies one parity's first and last layer across each cut axis other than `t` into its staging
/// regions ([`Halo::stage`]), one thread per site, so that each travels as one range.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PackFaces<T: WilsonStore> {
    /// The stored parity, own sites and staging.
    pub spinor: *mut T::Elem,
    /// The block `[X, Y, Z, T]`.
    pub dims: [u32; 4],
    /// The cut axes ([`Dslash::cut`](super::Dslash::cut)).
    pub cut: u32,
}

// SAFETY: each thread writes one staging site and reads only own sites, which nobody writes.
unsafe impl<T: WilsonStore> Send for PackFaces<T> {}
// SAFETY: as above.
unsafe impl<T: WilsonStore> Sync for PackFaces<T> {}

impl<T: WilsonStore> PackFaces<T> {
    /// These numbers (`dims`, `cut`) with `spinor`'s address, checked: it holds a stored parity of
    /// the block, own sites, ghosts and staging ([`Halo::sites`]).
    pub fn bind<'a>(self, spinor: SpanMut<'a, T::Elem>) -> Result<Bound<'a, Self>, SpanError> {
        super::dslash::check_dims(self.dims, self.cut)?;
        let sites = Halo::new(self.dims, self.cut).sites;
        check_len("spinor", spinor.len(), 2 * T::SLOTS * sites)?;
        let place = spinor.place();
        let p = Self {
            spinor: spinor.ptr(),
            ..self
        };
        // SAFETY: the span holds every region the packing reads and writes.
        Ok(unsafe { Bound::new_unchecked(p, place) })
    }

    /// Threads a launch needs: two faces per packed axis.
    #[inline(always)]
    pub fn threads(&self) -> usize {
        let h = Halo::new(self.dims, self.cut);
        2 * (h.face[1] + h.face[2])
    }

    /// Packs the `i`-th site of the packed faces (`z`'s first layer, its last, then `y`'s).
    ///
    /// # Safety
    /// `spinor` must hold a stored parity of this block ([`Halo::sites`] sites) and `i < threads()`.
    #[inline(always)]
    pub unsafe fn site(&self, i: usize) {
        let h = Halo::new(self.dims, self.cut);
        let (fz, fy) = (h.face[2], h.face[1]);
        // Literal axes (see `Halo::new`).
        unsafe {
            if i < 2 * fz {
                self.copy(&h, 2, i);
            } else if i < 2 * (fz + fy) {
                self.copy(&h, 1, i - 2 * fz);
            }
        }
    }

    /// Copies site `i < 2 face` of `axis`'s first layer then last into their staging.
    #[inline(always)]
    unsafe fn copy(&self, h: &Halo, axis: usize, i: usize) {
        let [nx, ny, nz, _] = self.dims;
        let xh = nx / 2;
        let f = h.face[axis];
        let (last, fi) = (i >= f, (if i >= f { i - f } else { i }) as u32);
        let layer = if last { self.dims[axis] - 1 } else { 0 };
        let (x2, rest) = (fi % xh, fi / xh);
        let cb = if axis == 2 {
            let (y, t) = (rest % ny, rest / ny);
            ((t * nz + layer) * ny + y) * xh + x2
        } else {
            let (z, t) = (rest % nz, rest / nz);
            ((t * nz + z) * ny + layer) * xh + x2
        };
        let from = tile_index(cb as usize, T::SLOTS);
        let to = tile_index(
            h.stage[axis] + usize::from(last) * h.room(axis) + fi as usize,
            T::SLOTS,
        );
        // Every slot, a fixed-point site's norm too.
        for k in 0..T::SLOTS {
            // SAFETY: both sites lie in the stored parity (the caller's contract).
            unsafe { T::copy(self.spinor, from + k * TILE, to + k * TILE) };
        }
    }
}

/// Makes the face-packing entry of a precision.
macro_rules! pack_entry {
    ($name:ident => $t:ty) => {
        crate::kernel! {
            /// Generated kernel entry: one thread per packed face site.
            pub unsafe fn $name(p: crate::wilson::PackFaces<$t>) {
                let i = crate::device::thread::index_1d();
                if i < p.threads() {
                    p.site(i)
                }
            }
        }
    };
}

// SAFETY: the entries (`pack_entry!`) take one `PackFaces<T>` and guard their thread; a bound value's
// spinor holds the block's sites and staging (`PackFaces::bind`), and each item writes one staging site.
unsafe impl<T: super::WilsonEntries> crate::bind::Kernel for PackFaces<T> {
    const MODULE: &'static str = env!("CARGO_CRATE_NAME");

    fn entry(&self) -> &'static str {
        T::PACK
    }

    fn items(&self) -> usize {
        self.threads()
    }

    #[inline(always)]
    unsafe fn item(&self, i: usize) {
        // SAFETY: bound, and `i < threads()` (the caller's contract).
        unsafe { self.site(i) }
    }
}
