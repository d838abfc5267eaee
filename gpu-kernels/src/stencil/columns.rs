//! Temporal blocking in registers (the column form of AN5D, Matsumura et al., CGO 2020): `T` steps of a
//! star-shaped [`StencilUpdate3D`] in one pass over memory, for updates that read off their own column
//! only in their own plane (offsets `(dx, dy, 0)` and `(0, 0, dz)`, as the 7-point diffusion does).
//!
//! Each thread owns one column of the block's tile, which is the output tile widened by `T` radii on
//! every side. It keeps the column's values of levels `0 .. T` (the input and the first `T - 1` steps)
//! in register z-queues, and shares only each level's middle plane with its neighbours, in a shared
//! plane per level (double-buffered by the step's parity). Level `l` lags level `l - 1` by `rz + 1`
//! planes: each step then needs a single barrier for all its levels. Per z step, phase A loads the
//! input's next plane into the level-0 queue and writes every level's queue middle into its shared
//! plane. After the barrier, phase B computes every level, the last first, each from the shared plane
//! (the `dx`, `dy` neighbours) and the queue (the `dz` ones) of the level below, and pushes the value
//! into its own queue; the last level goes to the output.
//!
//! Points outside the range, and columns within a radius of the tile's edge (whose neighbours lie
//! outside the tile), take the value of the level below unchanged. For points outside the range that is
//! the input's value, as single steps keep it. The edge columns are wrong from the first level on, and
//! wrong one radius further in with each level, but nothing in the output tile reads them. The result
//! is that of `T` single steps to the bit, under the margin condition of [`super::temporal`].
//!
//! Compared with the general form ([`super::temporal`]), a level costs a point two shared reads in x and
//! two in y, one shared write, and its z neighbours from registers. There is no per-cell index logic,
//! and there is one barrier per plane for all levels, where the general form has one per level.
//! Reading a diagonal offset does not compile (a `const` assertion).

use super::{ArrayIndex3D, LoopRange, Source3D, StencilUpdate3D, ThreadCoords, ZQUEUE_MAX_RADIUS};
use crate::device::math::Real;
use crate::device::shared::SharedPtr;

const MID: usize = ZQUEUE_MAX_RADIUS as usize;
const CAP: usize = 2 * MID + 1;

/// The most steps a column-form pass advances: each level is written out once (a loop over levels
/// left the queues in local memory).
pub const MAX_COLUMN_STEPS: usize = 4;

/// Bytes of dynamic shared memory a column-form launch of `steps` steps with `block` threads (x, y)
/// needs: two planes of the block's tile per level below the last.
pub const fn column_shared_bytes(block: [u32; 2], steps: u32, elem_bytes: usize) -> usize {
    2 * steps as usize * block[0] as usize * block[1] as usize * elem_bytes
}

/// The output tile of a column-form block of `block` threads: the block less `steps` radii on each
/// side (zero where nothing is left).
pub const fn column_output_tile(block: [u32; 2], radius: [u32; 3], steps: u32) -> [u32; 2] {
    [
        block[0].saturating_sub(2 * steps * radius[0]),
        block[1].saturating_sub(2 * steps * radius[1]),
    ]
}

/// One thread of a column-form launch of `T` steps: its column's queues and where the column lies.
#[derive(Clone, Copy, Debug)]
pub struct ColumnThread<F: StencilUpdate3D, const T: usize> {
    /// Levels `0 .. T` of the column at planes `N_l - 2 rz ..= N_l`, the newest at `MID + rz` (those
    /// from `T` on unused).
    queues: [[F::Real; CAP]; MAX_COLUMN_STEPS],
    range: LoopRange,
    /// The column (x, y), and where it lies in a plane (x + nx y).
    col: [u32; 2],
    at: usize,
    /// The column is within one radius of the range (its input is read), inside the range and a radius
    /// from the tile's edge (it computes), or in the output tile inside the range (it writes).
    loads: bool,
    computes: bool,
    writes: bool,
    /// The thread's cell in a shared plane, cells per row and per plane.
    cell: usize,
    pitch: usize,
    cells: usize,
    k0: i32,
    k1: i32,
}

/// Level `l - 1` as level `l`'s point reads it: the shared plane at the point's cell, and the queue.
struct ColumnSource<'a, T: Copy> {
    plane: SharedPtr<T>,
    pitch: isize,
    queue: &'a [T; CAP],
}

impl<T: Copy> Source3D<T> for ColumnSource<'_, T> {
    #[inline(always)]
    fn at<const DX: i32, const DY: i32, const DZ: i32>(&self, _: &ArrayIndex3D) -> T {
        const {
            assert!(
                DZ == 0 || (DX == 0 && DY == 0),
                "the column form reads off its column only in its own plane: use the general \
                 temporal form for diagonal offsets"
            )
        };
        if DX == 0 && DY == 0 {
            self.queue[(MID as i32 + DZ) as usize]
        } else {
            // SAFETY: a computing column lies a radius inside the tile, so the cell is in the plane.
            unsafe {
                self.plane
                    .wrapping_offset(DY as isize * self.pitch + DX as isize)
                    .read()
            }
        }
    }
}

impl<F: StencilUpdate3D, const T: usize> ColumnThread<F, T> {
    const RZ: i32 = {
        assert!(
            F::RADIUS[2] <= ZQUEUE_MAX_RADIUS,
            "the column form holds z radii up to ZQUEUE_MAX_RADIUS"
        );
        assert!(
            T >= 1 && T <= MAX_COLUMN_STEPS,
            "a column-form pass advances 1 to MAX_COLUMN_STEPS steps"
        );
        F::RADIUS[2] as i32
    };

    /// The thread at `c` of a launch over `r` whose blocks march `march` planes of z: block `b`'s output
    /// tile is the `b`-th [`column_output_tile`] of the range, which the caller keeps non-empty.
    #[inline(always)]
    pub fn new(r: &LoopRange, march: u32, c: ThreadCoords) -> Self {
        let [rx, ry, _] = F::RADIUS;
        let t = T as u32;
        let [bx, by] = c.block_dim;
        let [ox, oy] = column_output_tile(c.block_dim, F::RADIUS, t);
        let [tx, ty] = c.thread_idx;
        // The column's point, `T` radii before the output tile's start where tx = ty = 0; compared
        // before subtracting, as it may lie before the array.
        let gx = r.begin[0] + c.block_idx[0] * ox + tx;
        let gy = r.begin[1] + c.block_idx[1] * oy + ty;
        let (sx, sy) = (t * rx, t * ry);
        let within =
            |g: u32, s: u32, rad: u32, lo: u32, hi: u32| g + rad >= lo + s && g < hi + rad + s;
        let loads =
            within(gx, sx, rx, r.begin[0], r.end[0]) && within(gy, sy, ry, r.begin[1], r.end[1]);
        let inside =
            within(gx, sx, 0, r.begin[0], r.end[0]) && within(gy, sy, 0, r.begin[1], r.end[1]);
        let interior = tx >= rx && tx + rx < bx && ty >= ry && ty + ry < by;
        let output = tx >= sx && tx < sx + ox && ty >= sy && ty < sy + oy;
        let col = [gx.wrapping_sub(sx), gy.wrapping_sub(sy)];
        let slab = ThreadCoords {
            block_idx: c.block_idx,
            block_dim: c.block_dim,
            thread_idx: [0, 0],
        };
        let (k0, k1) = slab.slab(r, march);
        Self {
            queues: [[F::Real::ZERO; CAP]; MAX_COLUMN_STEPS],
            range: *r,
            col,
            at: match loads {
                true => col[0] as usize + r.n[0] as usize * col[1] as usize,
                false => 0,
            },
            loads,
            computes: inside && interior,
            writes: inside && output,
            cell: (tx + bx * ty) as usize,
            pitch: bx as usize,
            cells: (bx * by) as usize,
            k0: k0 as i32,
            k1: k1 as i32,
        }
    }

    /// The z steps of the block: the input's planes from `k0 - T rz`, until the last level has
    /// reached `k1 - 1`. Empty for an empty slab.
    #[inline(always)]
    pub fn wavefront(&self) -> core::ops::Range<i32> {
        let (t, rz) = (T as i32, Self::RZ);
        match self.k0 < self.k1 {
            true => self.k0 - t * rz..self.k1 + (t - 1) + t * rz,
            false => 0..0,
        }
    }

    /// The plane level `l` (1 to `T`) computes at step `q`: `l - 1` planes plus `l` radii behind.
    #[inline(always)]
    fn plane(q: i32, l: usize) -> i32 {
        q - (l as i32 - 1) - l as i32 * Self::RZ
    }

    /// Level `level`'s shared plane of step parity `q & 1`.
    #[inline(always)]
    fn shared_plane(&self, shared: SharedPtr<F::Real>, q: i32, level: usize) -> SharedPtr<F::Real> {
        let buf = (q & 1) as usize;
        shared.wrapping_add((buf * T + level) * self.cells)
    }

    /// Phase A of step `q`: the input's plane `q` into the level-0 queue (where it is read at all),
    /// then each level's queue middle into its shared plane.
    ///
    /// # Safety
    /// `shared` holds [`column_shared_bytes`] for the launch, which every thread of the block shares;
    /// a barrier follows phase A, every thread taking part, and the planes of step parity `q & 1` are not
    /// written again before every thread has passed the next step's barrier.
    #[inline(always)]
    pub unsafe fn stage(&mut self, f: &F, shared: SharedPtr<F::Real>, q: i32) {
        let rz = Self::RZ;
        let r = &self.range;
        let v = if self.loads && q >= r.begin[2] as i32 - rz && q < r.end[2] as i32 + rz {
            let plane = r.n[0] as usize * r.n[1] as usize;
            f.input().get(self.at + q as usize * plane)
        } else {
            F::Real::ZERO
        };
        push::<F::Real>(&mut self.queues[0], rz as usize, v);
        // Each level written out, its index a constant.
        macro_rules! share {
            ($l:literal) => {
                if $l < T {
                    let p = self.shared_plane(shared, q, $l);
                    // SAFETY: the cell lies in the plane, the plane in the launch's shared memory.
                    unsafe { p.wrapping_add(self.cell).write(self.queues[$l][MID]) };
                }
            };
        }
        share!(0);
        share!(1);
        share!(2);
        share!(3);
    }

    /// Phase B of step `q`: every level from the last down, each from the shared plane and the queue of
    /// the level below as they stood after phase A.
    ///
    /// # Safety
    /// As for [`stage`](Self::stage).
    #[inline(always)]
    pub unsafe fn compute(&mut self, f: &F, shared: SharedPtr<F::Real>, q: i32) {
        // Each level written out, the last first, its index a constant.
        macro_rules! level {
            ($l:literal) => {
                if $l <= T {
                    // SAFETY: the caller's.
                    unsafe { self.level(f, shared, q, $l) };
                }
            };
        }
        level!(4);
        level!(3);
        level!(2);
        level!(1);
    }

    /// Level `l` of step `q` (phase B).
    ///
    /// # Safety
    /// As for [`stage`](Self::stage).
    #[inline(always)]
    unsafe fn level(&mut self, f: &F, shared: SharedPtr<F::Real>, q: i32, l: usize) {
        let r = &self.range;
        let p = Self::plane(q, l);
        let below = &self.queues[l - 1];
        let mut idx = ArrayIndex3D::new(r.n);
        let v = if self.computes && p >= r.begin[2] as i32 && p < r.end[2] as i32 {
            idx.set(self.col[0], self.col[1], p as u32);
            let src = ColumnSource {
                plane: self.shared_plane(shared, q, l - 1).wrapping_add(self.cell),
                pitch: self.pitch as isize,
                queue: below,
            };
            f.value_with(&idx, &src)
        } else {
            below[MID]
        };
        if l == T {
            if self.writes && p >= self.k0 && p < self.k1 {
                idx.set(self.col[0], self.col[1], p as u32);
                f.output().set(idx.ix(), v);
            }
        } else {
            push::<F::Real>(&mut self.queues[l], Self::RZ as usize, v);
        }
    }
}

/// Moves queue `q` (radius `rz`) one plane up, `v` the newest.
#[inline(always)]
fn push<T: Copy>(q: &mut [T; CAP], rz: usize, v: T) {
    for d in MID - rz..MID + rz {
        q[d] = q[d + 1];
    }
    q[MID + rz] = v;
}

/// Runs `T` steps of `f` over `r` in the column form: reads `f.input()`, writes the last step into
/// `f.output()`, with [`column_shared_bytes`] of dynamic shared memory. Block `b` covers the `b`-th
/// [`column_output_tile`] of the range in x and y, and `march` planes of z.
#[inline(always)]
pub fn device_loop3d_columns<F: StencilUpdate3D, const T: usize>(f: &F, r: &LoopRange, march: u32) {
    let shared = SharedPtr::dynamic();
    let mut t = ColumnThread::<F, T>::new(r, march, ThreadCoords::current());
    for q in t.wavefront() {
        // SAFETY (both): launched with `column_shared_bytes` of dynamic shared memory, every thread
        // running every phase of every step (the wavefront is the block's), a barrier after each.
        // One barrier a step: the shared planes alternate with the step's parity, and a thread
        // writing step `q + 2`'s has passed step `q + 1`'s barrier, which every thread reached
        // after reading step `q`'s.
        unsafe { t.stage(f, shared, q) };
        crate::device::thread::sync_threads();
        unsafe { t.compute(f, shared, q) };
    }
}
