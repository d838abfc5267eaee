//! Read access to a point update's stencil input fields. A [`StencilUpdate3D`] reads its input (a
//! [`FieldsUpdate3D`](super::FieldsUpdate3D) each of its inputs) only through a [`Source3D`], so the loop
//! that runs it chooses where the values come from: global memory ([`FieldRef`]), the thread's register
//! z-queue ([`ZQueue`]) or vector queue ([`VectorQueue`]), or the block's shared-memory tile ([`Tile`]).
//! All give the same value for every offset within the update's radius, so the update's arithmetic, and
//! hence its result, is the same bit for bit whichever loop runs it.

use super::{ArrayIndex3D, FieldRef, PointUpdate3D, StencilUpdate3D};
use crate::device::math::Real;
use crate::device::shared::SharedPtr;

/// Where a [`StencilUpdate3D`] reads its input field: `src.at::<DX, DY, DZ>(idx)` is the input at the
/// neighbour (DX, DY, DZ) of the point `idx` being computed. Offsets are constants, so each source resolves
/// at compile time which of its stores (register, shared memory, global memory) holds them.
pub trait Source3D<T: Copy> {
    /// The input at offset (DX, DY, DZ) from `idx`, which must be the point the loop is computing.
    fn at<const DX: i32, const DY: i32, const DZ: i32>(&self, idx: &ArrayIndex3D) -> T;
}

/// Plain global loads: the source of the host engine and of the plain GPU variant.
impl<T: Copy> Source3D<T> for FieldRef<T> {
    #[inline(always)]
    fn at<const DX: i32, const DY: i32, const DZ: i32>(&self, idx: &ArrayIndex3D) -> T {
        self.get(idx.at::<DX, DY, DZ>())
    }
}

/// The largest z radius (`RADIUS[2]`) the register z-queue holds; the staged variants of an update with a
/// larger one do not compile.
pub const ZQUEUE_MAX_RADIUS: u32 = 4;

/// The queue slot of the column's current point: slots `MID - rz ..= MID + rz` hold planes
/// `k - rz ..= k + rz`. A fixed centre keeps every slot index a constant, so the array lives in registers
/// whatever the radius (slots outside the radius are never touched and vanish).
const MID: usize = ZQUEUE_MAX_RADIUS as usize;
const CAP: usize = 2 * MID + 1;

/// The register z-queue of one z-marching thread: its input column at planes `k - rz ..= k + rz` (`rz` =
/// `F::RADIUS[2]`), kept in registers while it marches, so each step loads one new plane of the column
/// instead of `2 rz + 1`. Reads off the column go to global memory.
#[derive(Clone, Copy, Debug)]
pub struct ZQueue<F: PointUpdate3D> {
    f: FieldRef<F::Real>,
    q: [F::Real; CAP],
}

impl<F: StencilUpdate3D> ZQueue<F> {
    const RZ: usize = {
        assert!(
            F::RADIUS[2] <= ZQUEUE_MAX_RADIUS,
            "the z-queue holds z radii up to ZQUEUE_MAX_RADIUS"
        );
        F::RADIUS[2] as usize
    };

    /// A queue that holds nothing, for threads whose column nobody reads (kept so that every thread of a
    /// block runs the same code between barriers).
    #[inline(always)]
    pub fn empty(f: &F) -> Self {
        Self {
            f: f.input(),
            q: [F::Real::ZERO; CAP],
        }
    }

    /// The queue of the column of `idx`, loaded from global memory: planes `k - rz ..= k + rz`.
    #[inline(always)]
    pub fn load(f: &F, idx: &ArrayIndex3D) -> Self {
        let mut s = Self::empty(f);
        let rz = Self::RZ;
        for d in 0..2 * rz + 1 {
            s.q[MID - rz + d] = s.f.get(idx.offset(0, 0, d as i32 - rz as i32));
        }
        s
    }

    /// Moves the queue one plane up to `next`, the column's next point: drops the lowest plane and loads
    /// `next + rz`, the only new load of the step.
    #[inline(always)]
    pub fn advance(&mut self, next: &ArrayIndex3D) {
        let rz = Self::RZ;
        for d in MID - rz..MID + rz {
            self.q[d] = self.q[d + 1];
        }
        self.q[MID + rz] = self.f.get(next.offset(0, 0, rz as i32));
    }

    /// The input at the column's current point.
    #[inline(always)]
    pub fn centre(&self) -> F::Real {
        self.q[MID]
    }
}

impl<F: StencilUpdate3D> Source3D<F::Real> for ZQueue<F> {
    #[inline(always)]
    fn at<const DX: i32, const DY: i32, const DZ: i32>(&self, idx: &ArrayIndex3D) -> F::Real {
        // All conditions are constants: each read compiles to a register or to one load.
        if DX == 0 && DY == 0 && DZ.unsigned_abs() as usize <= Self::RZ {
            self.q[(MID as i32 + DZ) as usize]
        } else {
            self.f.get(idx.at::<DX, DY, DZ>())
        }
    }
}

/// The register queue of a thread computing the `W` x-neighbouring points `(i .. i + W, j)` of one
/// vector ([`Variant::Vector`](super::Variant)): their columns at planes `k - rz ..= k + rz`, each plane
/// one vector load; per plane also rows `j - ry ..= j + ry` of the vector, a vector load each, and the
/// `rx` points left and right of it. Every one of them is loaded whether the update reads it or not:
/// the loads the update never reads are dead code, which the compiler drops, so the queue costs only
/// what the update uses. Reads of anything else go to memory.
///
/// One queue holds one field, a [`StencilUpdate3D`]'s input or one input of a
/// [`FieldsUpdate3D`](super::FieldsUpdate3D), read within `F::RADIUS`.
///
/// Element `(i, j, k)` must be [`VECTOR_BYTES`](super::VECTOR_BYTES)-aligned, and so must the start of
/// every row: the loop checks both and otherwise runs a column at a time.
#[derive(Clone, Copy, Debug)]
pub struct VectorQueue<F: PointUpdate3D, const W: usize> {
    f: FieldRef<F::Real>,
    q: [[F::Real; W]; CAP],
    rows: [[F::Real; W]; CAP],
    west: [F::Real; MID],
    east: [F::Real; MID],
}

impl<F: StencilUpdate3D, const W: usize> VectorQueue<F, W> {
    /// The queue of the input of `f` at the vector whose first point is `idx`, loaded from global
    /// memory.
    ///
    /// # Safety
    /// As [`load_field`](Self::load_field).
    #[inline(always)]
    pub unsafe fn load(f: &F, idx: &ArrayIndex3D) -> Self {
        // SAFETY: the caller's contract.
        unsafe { Self::load_field(f.input(), idx) }
    }
}

impl<F: PointUpdate3D, const W: usize> VectorQueue<F, W> {
    const R: [usize; 3] = {
        let r = F::RADIUS;
        assert!(
            r[0] <= ZQUEUE_MAX_RADIUS && r[1] <= ZQUEUE_MAX_RADIUS && r[2] <= ZQUEUE_MAX_RADIUS,
            "the vector queue holds radii up to ZQUEUE_MAX_RADIUS"
        );
        [r[0] as usize, r[1] as usize, r[2] as usize]
    };

    /// The queue of `field` at the vector whose first point is `idx`, loaded from global memory.
    ///
    /// # Safety
    /// Element `idx` of `field` and the start of every row must be
    /// [`VECTOR_BYTES`](super::VECTOR_BYTES)-aligned.
    #[inline(always)]
    pub unsafe fn load_field(field: FieldRef<F::Real>, idx: &ArrayIndex3D) -> Self {
        let z = [F::Real::ZERO; W];
        let mut s = Self {
            f: field,
            q: [z; CAP],
            rows: [z; CAP],
            west: [F::Real::ZERO; MID],
            east: [F::Real::ZERO; MID],
        };
        let rz = Self::R[2];
        for d in 0..2 * rz + 1 {
            // SAFETY: the caller's alignment; planes are whole rows apart.
            s.q[MID - rz + d] = unsafe { s.f.get_vector(idx.offset(0, 0, d as i32 - rz as i32)) };
        }
        s
    }

    /// Loads the current plane's rows and x neighbours of the vector at `idx`.
    ///
    /// # Safety
    /// `idx` must be the first point of the queue's vector in the current plane (aligned, as `load`
    /// requires).
    #[inline(always)]
    pub unsafe fn load_plane(&mut self, idx: &ArrayIndex3D) {
        let [rx, ry, _] = Self::R;
        for d in 1..=ry {
            let d = d as i32;
            // SAFETY: the caller's alignment; rows are whole rows apart.
            self.rows[(MID as i32 - d) as usize] =
                unsafe { self.f.get_vector(idx.offset(0, -d, 0)) };
            // SAFETY: as above.
            self.rows[MID + d as usize] = unsafe { self.f.get_vector(idx.offset(0, d, 0)) };
        }
        for d in 0..rx {
            self.west[d] = self.f.get(idx.offset(-1 - d as i32, 0, 0));
            self.east[d] = self.f.get(idx.offset((W + d) as i32, 0, 0));
        }
    }

    /// Moves the queue one plane up to `next`, the vector's next first point: loads plane `next + rz`.
    ///
    /// # Safety
    /// As [`load_plane`](Self::load_plane), for `next`.
    #[inline(always)]
    pub unsafe fn advance(&mut self, next: &ArrayIndex3D) {
        let rz = Self::R[2];
        for d in MID - rz..MID + rz {
            self.q[d] = self.q[d + 1];
        }
        // SAFETY: the caller's alignment; planes are whole rows apart.
        self.q[MID + rz] = unsafe { self.f.get_vector(next.offset(0, 0, rz as i32)) };
    }

    /// The source of point `lane` (`0 .. W`) of the vector.
    #[inline(always)]
    pub fn lane(&self, lane: usize) -> Lane<'_, F, W> {
        Lane { queue: self, lane }
    }
}

/// One point of a [`VectorQueue`]'s vector, as the [`Source3D`] its update reads.
#[derive(Clone, Copy, Debug)]
pub struct Lane<'a, F: PointUpdate3D, const W: usize> {
    queue: &'a VectorQueue<F, W>,
    lane: usize,
}

impl<F: PointUpdate3D, const W: usize> Source3D<F::Real> for Lane<'_, F, W> {
    #[inline(always)]
    fn at<const DX: i32, const DY: i32, const DZ: i32>(&self, idx: &ArrayIndex3D) -> F::Real {
        let [rx, ry, rz] = VectorQueue::<F, W>::R;
        let q = self.queue;
        // The column relative to the vector's first one. The lanes are unrolled, so every condition is
        // a constant: each read compiles to a register or to one load.
        let c = DX as isize + self.lane as isize;
        let (y, z) = (DY.unsigned_abs() as usize, DZ.unsigned_abs() as usize);
        let inside = c >= 0 && c < W as isize;
        if inside && DY == 0 && z <= rz {
            q.q[(MID as i32 + DZ) as usize][c as usize]
        } else if inside && DZ == 0 && y <= ry {
            q.rows[(MID as i32 + DY) as usize][c as usize]
        } else if DY == 0 && DZ == 0 && c < 0 && (-c) as usize <= rx {
            q.west[(-c - 1) as usize]
        } else if DY == 0 && DZ == 0 && c >= W as isize && c as usize - W < rx {
            q.east[c as usize - W]
        } else {
            q.f.get(idx.at::<DX, DY, DZ>())
        }
    }
}

/// The 2.5-D tile: the current plane of the block's xy tile with a halo of `F::RADIUS[0..2]`, staged in
/// shared memory, plus the thread's z-queue. In-plane reads come from the tile, reads along the column
/// from the queue, anything else (off-column reads in other planes) from global memory.
#[derive(Clone, Copy, Debug)]
pub struct Tile<'a, F: PointUpdate3D> {
    centre: SharedPtr<F::Real>,
    pitch: usize,
    queue: &'a ZQueue<F>,
}

impl<'a, F: StencilUpdate3D> Tile<'a, F> {
    /// A tile whose cell of the current point is at `centre`, rows `pitch` elements apart.
    ///
    /// # Safety
    /// Every cell within `F::RADIUS[0]` columns and `F::RADIUS[1]` rows of `centre` must be readable and
    /// hold the input at that point of the current plane.
    #[inline(always)]
    pub unsafe fn new(centre: SharedPtr<F::Real>, pitch: usize, queue: &'a ZQueue<F>) -> Self {
        Self {
            centre,
            pitch,
            queue,
        }
    }
}

impl<F: StencilUpdate3D> Source3D<F::Real> for Tile<'_, F> {
    #[inline(always)]
    fn at<const DX: i32, const DY: i32, const DZ: i32>(&self, idx: &ArrayIndex3D) -> F::Real {
        let [rx, ry, _] = F::RADIUS;
        // The centre comes from the queue's register, which holds the same value as its tile cell.
        if DZ == 0 && (DX != 0 || DY != 0) && DX.unsigned_abs() <= rx && DY.unsigned_abs() <= ry {
            let off = DX as isize + DY as isize * self.pitch as isize;
            // SAFETY: `new`'s contract covers every offset within the radius.
            unsafe { self.centre.wrapping_offset(off).read() }
        } else {
            self.queue.at::<DX, DY, DZ>(idx)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diffusion::Diffusion3d;
    use crate::stencil::FieldMut;

    /// Field values that differ at every point: `v(i, j, k) = i + 10 j + 100 k`.
    const N: [u32; 3] = [6, 5, 7];

    fn field() -> [f64; 210] {
        core::array::from_fn(|p| {
            let p = p as u32;
            let (i, j, k) = (p % N[0], (p / N[0]) % N[1], p / (N[0] * N[1]));
            (i + 10 * j + 100 * k) as f64
        })
    }

    /// Every offset of a radius-1 star and the diagonals, through `src`, against global loads.
    fn same_as_global<S: Source3D<f64>>(src: &S, g: &FieldRef<f64>, idx: &ArrayIndex3D) {
        macro_rules! check {
            ($($d:literal, $e:literal, $f:literal);*) => {$(
                assert_eq!(src.at::<$d, $e, $f>(idx), g.at::<$d, $e, $f>(idx), "offset ({}, {}, {})", $d, $e, $f);
            )*};
        }
        check!(0,0,0; 1,0,0; -1,0,0; 0,1,0; 0,-1,0; 0,0,1; 0,0,-1; 1,1,0; -1,-1,0; 1,-1,0; 1,0,1; 0,-1,-1);
    }

    #[test]
    fn zqueue_holds_the_column_as_it_advances() {
        let mut a = field();
        let mut out = [0.0; 210];
        // SAFETY: both arrays outlive the test; every index read is inside them.
        let (f, o) = unsafe {
            (
                FieldRef::from_raw(a.as_mut_ptr()),
                FieldMut::from_raw(out.as_mut_ptr()),
            )
        };
        let u = Diffusion3d::new(f, o, 1.0, 0.01, [1.0; 3]);
        let mut idx = ArrayIndex3D::new(N);
        idx.set(2, 3, 1);
        let mut q = ZQueue::load(&u, &idx);
        for _ in 0..4 {
            assert_eq!(q.centre(), f.get(idx.ix()));
            same_as_global(&q, &f, &idx);
            idx.next_k();
            q.advance(&idx);
        }
        assert_eq!(idx.k(), 5);
    }

    /// Every lane of a vector queue of `W` points at (0, 3, k), rows of 8, against global loads.
    fn vector_queue_lanes<const W: usize>() {
        const M: [u32; 3] = [8, 5, 7];
        #[repr(C, align(16))]
        struct Aligned([f64; 280]);
        let value = |p: usize| (p % 8 + 10 * (p / 8 % 5) + 100 * (p / 40)) as f64;
        let mut a = Aligned(core::array::from_fn(value));
        let mut out = Aligned([0.0; 280]);
        // SAFETY: both arrays outlive the test; every index read is inside them.
        let (f, o) = unsafe {
            (
                FieldRef::from_raw(a.0.as_mut_ptr()),
                FieldMut::from_raw(out.0.as_mut_ptr()),
            )
        };
        let u = Diffusion3d::new(f, o, 1.0, 0.01, [1.0; 3]);
        let mut first = ArrayIndex3D::new(M);
        first.set(2, 3, 1);
        assert!(f.vector_aligned(first.ix()));
        // SAFETY: aligned, as asserted; rows of 8 f64 keep every row aligned.
        let mut q = unsafe { VectorQueue::<_, W>::load(&u, &first) };
        for k in 1..5 {
            // SAFETY: `first` moves with the queue's vector.
            unsafe { q.load_plane(&first) };
            for lane in 0..W {
                let mut idx = ArrayIndex3D::new(M);
                idx.set(2 + lane as u32, 3, k);
                same_as_global(&q.lane(lane), &f, &idx);
            }
            first.next_k();
            // SAFETY: as above.
            unsafe { q.advance(&first) };
        }
    }

    #[test]
    fn vector_queue_gives_each_lane_its_neighbours() {
        vector_queue_lanes::<2>();
        vector_queue_lanes::<4>();
    }

    #[test]
    fn tile_reads_the_plane_from_shared_memory() {
        let mut a = field();
        let mut out = [0.0; 210];
        // SAFETY: as above.
        let (f, o) = unsafe {
            (
                FieldRef::from_raw(a.as_mut_ptr()),
                FieldMut::from_raw(out.as_mut_ptr()),
            )
        };
        let u = Diffusion3d::new(f, o, 1.0, 0.01, [1.0; 3]);
        let mut idx = ArrayIndex3D::new(N);
        idx.set(2, 2, 3);
        let q = ZQueue::load(&u, &idx);
        // A 3x3 tile around (2, 2) of plane 3, negated so that reads from it are told apart.
        let mut tile = [0.0f64; 9];
        for (c, t) in tile.iter_mut().enumerate() {
            let (dx, dy) = (c % 3, c / 3);
            let mut p = ArrayIndex3D::new(N);
            p.set(1 + dx as u32, 1 + dy as u32, 3);
            *t = -f.get(p.ix());
        }
        let base = SharedPtr::from_host_ptr(tile.as_mut_ptr());
        // SAFETY: every cell within radius 1 of the centre is in `tile`.
        let src = unsafe { Tile::new(base.wrapping_add(4), 3, &q) };
        assert_eq!(src.at::<1, 0, 0>(&idx), -f.at::<1, 0, 0>(&idx));
        assert_eq!(src.at::<-1, -1, 0>(&idx), -f.at::<-1, -1, 0>(&idx));
        assert_eq!(src.at::<0, 1, 0>(&idx), -f.at::<0, 1, 0>(&idx));
        // The centre and the column come from the queue, off-column points of other planes from memory.
        assert_eq!(src.at::<0, 0, 0>(&idx), f.at::<0, 0, 0>(&idx));
        assert_eq!(src.at::<0, 0, -1>(&idx), f.at::<0, 0, -1>(&idx));
        assert_eq!(src.at::<1, 0, 1>(&idx), f.at::<1, 0, 1>(&idx));
        for c in 0..9 {
            // SAFETY: inside `tile`.
            unsafe { base.wrapping_add(c).write(-base.wrapping_add(c).read()) };
        }
        same_as_global(&src, &f, &idx);
    }
}
