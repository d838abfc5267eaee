//! Temporal blocking in registers (the column form of AN5D, Matsumura et al., CGO 2020): `T` steps of a
//! star-shaped [`StencilUpdate3D`] in one pass over memory, for updates that read off their own column
//! only in their own plane (offsets `(dx, dy, 0)` and `(0, 0, dz)`, as the 7-point diffusion does).
//!
//! Each thread owns [`column_rows`] columns of the block's tile, adjacent in y; the tile is the output
//! tile widened by `T` radii on every side. The thread keeps its columns' values of levels `0 .. T` (the
//! input and the first `T - 1` steps) in register z-queues, and shares only each level's middle plane
//! with its neighbours, in a shared plane per level (double-buffered by the step's parity). Level `l`
//! lags level `l - 1` by `rz + 1` planes: each step then needs a single barrier for all its levels. Per
//! z step, phase A moves the input's plane loaded `2 rz + 1` steps before into the level-0 queues (the
//! loads run that far ahead, their latency behind the steps between), loads the next, and writes every
//! level's queue middles into its shared plane. After the barrier, phase B computes every level, the
//! last first, each from the shared plane (the `dx`, `dy` neighbours; those in the thread's own columns
//! from registers) and the queue (the `dz` ones) of the level below, and pushes the value into its own
//! queue; the last level goes to the output.
//!
//! Points outside the live range ([`PassRange`]), and columns within a radius of the tile's edge
//! (whose neighbours lie outside the tile: they read the margin around the shared planes), take the
//! value of the level below unchanged. For points outside the live range that is the input's value,
//! as single steps keep it. The edge columns are wrong from the first level on, and wrong one radius
//! further in with each level, but nothing in the output tile reads them. Only the points of the
//! pass's `out` are written. The result is that of `T` single steps to the bit, under the margin
//! condition of [`super::temporal`].
//!
//! Compared with the general form ([`super::temporal`]), a level costs a point two shared reads in x
//! and at most two in y, one shared write, and its z neighbours from registers. There is no per-cell
//! index logic, and there is one barrier per plane for all levels, where the general form has one per
//! level. The step loop is unrolled by the period in which the queues and the shared planes come back
//! to their places ([`ColumnThread::PERIOD`]), so the queues are registers that never move and every
//! shared address is a constant offset. Reading a diagonal offset does not compile (a `const`
//! assertion).

use super::{ArrayIndex3D, PassRange, Source3D, StencilUpdate3D, ThreadCoords, ZQUEUE_MAX_RADIUS};
use crate::device::atomic::{add_u32, fence_device, Scope};
use crate::device::math::Real;
use crate::device::shared::SharedPtr;

const MID: usize = ZQUEUE_MAX_RADIUS as usize;
const CAP: usize = 2 * MID + 1;

/// Runs `$body` for each of a thread's columns, `$k` a constant in each copy: a loop over them is
/// not always unrolled, and an array indexed by a variable lives in local memory.
macro_rules! each_row {
    ($k:ident => $body:block) => {
        each_row!(@ $k $body; 0 1)
    };
    (@ $k:ident $body:block; $($i:literal)*) => {
        $(
            if $i < Self::ROWS {
                let $k: usize = $i;
                $body
            }
        )*
    };
}

/// The most steps a column-form pass advances: each level is written out once (a loop over levels
/// left the queues in local memory).
pub const MAX_COLUMN_STEPS: usize = 4;

/// The register cap of each column entry's twin, whose name adds [`COLUMN_MAXNREG_SUFFIX`]: room for
/// two blocks of 1024 threads on an SM of 65536 registers. A block of 1024 threads has the tallest
/// tile, so the fewest halo columns per output column; without the cap the diffusion update's f32
/// pass of four steps (40 registers; three steps take 32) keeps one such block on an SM. The host
/// launches the twin where it keeps more blocks on an SM and spills nothing.
pub const COLUMN_MAXNREG: u32 = 32;

/// The suffix of the capped twin's entry name ([`COLUMN_MAXNREG`]; `kernel3d!` writes it out).
pub const COLUMN_MAXNREG_SUFFIX: &str = "__maxnreg32";
const _: () = assert!(
    COLUMN_MAXNREG == 32,
    "kernel3d! writes the twin's name out with __maxnreg32, as COLUMN_MAXNREG_SUFFIX does"
);

/// The most columns a thread owns ([`column_rows`]).
pub const MAX_COLUMN_ROWS: usize = 2;
const _: () = assert!(MAX_COLUMN_ROWS == 2, "each_row! writes out two rows");

/// Columns each thread owns for values of `elem_bytes`, adjacent in y: their y neighbours within the
/// thread are registers, the per-step work (loads' addresses, the barrier) is shared, and a block of a
/// given size has a taller tile, so fewer of its columns are halo. Two for f64, one for f32: on an
/// H200, two made the f64 passes of two steps 1.34x the single step at 512^3 (one: 0.94x); in f32
/// two need 64 registers at three steps, where one fits the 32-register twin ([`COLUMN_MAXNREG`]) in
/// blocks of 1024 threads, two an SM: 1.20x against 1.44x (docs/benchmarks/history.md). The tuner
/// does not choose it yet.
pub const fn column_rows(elem_bytes: usize) -> usize {
    if elem_bytes >= 8 {
        2
    } else {
        1
    }
}

/// The most columns a column-form block's tile has (1024 threads), and the cells of each of its
/// shared planes: a stride known to the compiler makes every plane's address a constant offset from
/// the thread's cell.
pub const COLUMN_PLANE_CELLS: usize = 1024 * MAX_COLUMN_ROWS;

/// Bytes of dynamic shared memory a column-form launch of `steps` steps of radius `radius` with
/// `block` threads (x, y) needs: two planes of [`COLUMN_PLANE_CELLS`] per level below the last, and a
/// margin of a radius each side of them, which the tile's edge columns read (and discard) as they
/// compute with the rest.
pub const fn column_shared_bytes(
    block: [u32; 2],
    radius: [u32; 3],
    steps: u32,
    elem_bytes: usize,
) -> usize {
    (2 * steps as usize * COLUMN_PLANE_CELLS + 2 * column_margin(block, radius)) * elem_bytes
}

/// Cells before and after the shared planes: a radius of rows and of cells.
const fn column_margin(block: [u32; 2], radius: [u32; 3]) -> usize {
    radius[1] as usize * block[0] as usize + radius[0] as usize
}

/// The tile of a column-form block of `block` threads for values of `elem_bytes`: a column per thread
/// in x, [`column_rows`] in y.
pub const fn column_tile(block: [u32; 2], elem_bytes: usize) -> [u32; 2] {
    [block[0], block[1] * column_rows(elem_bytes) as u32]
}

/// The output tile of a column-form block of `block` threads: its [`column_tile`] less `steps` radii
/// on each side (zero where nothing is left).
pub const fn column_output_tile(
    block: [u32; 2],
    radius: [u32; 3],
    steps: u32,
    elem_bytes: usize,
) -> [u32; 2] {
    let [tx, ty] = column_tile(block, elem_bytes);
    [
        tx.saturating_sub(2 * steps * radius[0]),
        ty.saturating_sub(2 * steps * radius[1]),
    ]
}

/// One thread of a column-form launch of `T` steps: its [`column_rows`] columns' queues and where
/// they lie.
///
/// A block runs [`steps`](Self::steps) steps `s`, each [`stage`](Self::stage) then a barrier then
/// [`compute`](Self::compute), every thread all of them in order after [`prime`](Self::prime) (the
/// offsets into the fields advance with each step).
#[derive(Clone, Copy, Debug)]
pub struct ColumnThread<F: StencilUpdate3D, const T: usize> {
    /// Per column, levels `0 .. T` at planes `N_l - 2 rz ..= N_l`, the newest at `MID + rz` (those
    /// from `T` on unused).
    queues: [[[F::Real; CAP]; MAX_COLUMN_STEPS]; MAX_COLUMN_ROWS],
    /// Per column, the input's next [`AHEAD`](Self::AHEAD) planes, loaded that many steps before
    /// they enter the level-0 queue: a load's latency is hidden behind the steps between, not waited
    /// for at the next barrier.
    ahead: [[F::Real; CAP]; MAX_COLUMN_ROWS],
    /// The live range: its size and, for points not computed, a point of it to name.
    n: [u32; 3],
    begin: [u32; 3],
    /// The first column (x, y); the others follow in y.
    col: [u32; 2],
    /// The input's plane entering the level-0 queue at step `s` is `first + s`. `next` is the address
    /// of the first column's next plane loaded in the input, [`AHEAD`](Self::AHEAD) planes further
    /// (an index until [`prime`](Self::prime)); the output's point lies `shift` bytes from it; a row is
    /// `row` bytes and a plane `plane`. Addresses rather than indices: an index costs each access its
    /// scaling and the field's base.
    first: i32,
    next: usize,
    row: usize,
    plane: usize,
    shift: usize,
    steps: u32,
    /// Per column, a plane `p` is read where `p - load_lo < load_len` (within a radius of the live
    /// range, for columns within a radius of it), computed where `p - comp_lo < comp_len` (in the live
    /// range, for columns a radius inside the tile) and written where `p - write_lo < write_len` (in
    /// the block's slab and in `out`, for columns of `out` in the output tile), the differences
    /// unsigned: each one compare.
    load_lo: i32,
    load_len: [u32; MAX_COLUMN_ROWS],
    comp_lo: i32,
    comp_len: [u32; MAX_COLUMN_ROWS],
    write_lo: i32,
    write_len: [u32; MAX_COLUMN_ROWS],
    /// The first column's cell in level 0's shared plane of step parity 0, and cells per row.
    cell: usize,
    pitch: usize,
}

/// Level `l - 1` as level `l`'s point reads it: the shared plane at the point's cell, the column's
/// queue, and the level's middles of the thread's columns (the point's is `row`).
struct ColumnSource<'a, T: Copy> {
    plane: SharedPtr<T>,
    pitch: isize,
    queue: &'a [T; CAP],
    rows: [T; MAX_COLUMN_ROWS],
    row: usize,
    nrows: usize,
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
        let y = self.row as i32 + DY;
        if DX == 0 && DY == 0 {
            self.queue[(MID as i32 + DZ) as usize]
        } else if DX == 0 && y >= 0 && y < self.nrows as i32 {
            // Another of the thread's columns: the value it staged in the plane.
            self.rows[y as usize]
        } else {
            // SAFETY: the cell lies in the plane, or at the tile's edge in the margin around them.
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

    /// Columns the thread owns.
    const ROWS: usize = column_rows(core::mem::size_of::<F::Real>());

    /// Planes loaded ahead: as many as a queue holds, which keeps [`PERIOD`](Self::PERIOD).
    const AHEAD: usize = 2 * Self::RZ as usize + 1;

    /// Steps after which the queues and the planes loaded ahead (each `2 rz + 1` planes) and the shared
    /// planes (two) are back in their places: a loop unrolled by this many keeps them in registers with
    /// no moves.
    pub const PERIOD: u32 = 2 * (2 * Self::RZ as u32 + 1);

    /// Planes the output lags the input: `T - 1` plus `T` radii.
    const LAG: i32 = T as i32 - 1 + T as i32 * Self::RZ;

    /// The thread at `c` of a launch over `pass` whose blocks march `march` planes of z: block `b`'s
    /// output tile is the `b`-th [`column_output_tile`] of `pass.out`, which the caller keeps
    /// non-empty, and its slab the `b`-th `march` planes of `pass.live`, of which it writes those in
    /// `pass.out`; its columns compute in `pass.live`. (Slabs of the output's planes kept the slab's
    /// first plane beside the live range's in a register: eight more in the f64 pass of two steps,
    /// which halved its blocks per SM.)
    #[inline(always)]
    pub fn new(pass: &PassRange, march: u32, c: ThreadCoords) -> Self {
        let (r, out) = (&pass.live, &pass.out);
        let [rx, ry, _] = F::RADIUS;
        let rz = Self::RZ;
        let t = T as u32;
        let elem = core::mem::size_of::<F::Real>();
        let [bx, by] = column_tile(c.block_dim, elem);
        let [ox, oy] = column_output_tile(c.block_dim, F::RADIUS, t, elem);
        let tx = c.thread_idx[0];
        let ty0 = c.thread_idx[1] * Self::ROWS as u32;
        // The first column's point, `T` radii before the output tile's start where tx = ty = 0;
        // compared before subtracting, as it may lie before the array.
        let gx = out.begin[0] + c.block_idx[0] * ox + tx;
        let gy0 = out.begin[1] + c.block_idx[1] * oy + ty0;
        let (sx, sy) = (t * rx, t * ry);
        let within =
            |g: u32, s: u32, rad: u32, lo: u32, hi: u32| g + rad >= lo + s && g < hi + rad + s;
        let slab = ThreadCoords {
            block_idx: c.block_idx,
            block_dim: c.block_dim,
            thread_idx: [0, 0],
        };
        let (k0, k1) = slab.slab(r, march);
        let (k0, k1) = (k0 as i32, k1 as i32);
        let (w0, w1) = (k0.max(out.begin[2] as i32), k1.min(out.end[2] as i32));
        let (begin, end) = (r.begin[2] as i32, r.end[2] as i32);
        let (mut load_len, mut comp_len, mut write_len) = (
            [0; MAX_COLUMN_ROWS],
            [0; MAX_COLUMN_ROWS],
            [0; MAX_COLUMN_ROWS],
        );
        for k in 0..Self::ROWS {
            let (gy, ty) = (gy0 + k as u32, ty0 + k as u32);
            let loads = within(gx, sx, rx, r.begin[0], r.end[0])
                && within(gy, sy, ry, r.begin[1], r.end[1]);
            let inside =
                within(gx, sx, 0, r.begin[0], r.end[0]) && within(gy, sy, 0, r.begin[1], r.end[1]);
            let written = within(gx, sx, 0, out.begin[0], out.end[0])
                && within(gy, sy, 0, out.begin[1], out.end[1]);
            let interior = tx >= rx && tx + rx < bx && ty >= ry && ty + ry < by;
            let output = tx >= sx && tx < sx + ox && ty >= sy && ty < sy + oy;
            load_len[k] = if loads {
                (end - begin + 2 * rz) as u32
            } else {
                0
            };
            comp_len[k] = if inside && interior {
                (end - begin) as u32
            } else {
                0
            };
            write_len[k] = if written && output {
                (w1 - w0).max(0) as u32
            } else {
                0
            };
        }
        let col = [gx.wrapping_sub(sx), gy0.wrapping_sub(sy)];
        // The input's planes from `k0 - T rz`, until the last level has reached `k1 - 1`.
        let first = k0 - T as i32 * rz;
        let plane = r.n[0] as usize * r.n[1] as usize;
        // Wrapping (as are the planes from `first`): a column may lie before the array, where
        // nothing is read.
        let at = (col[0] as i32 as isize)
            .wrapping_add((r.n[0] as isize).wrapping_mul(col[1] as i32 as isize))
            .wrapping_add((first as isize).wrapping_mul(plane as isize));
        Self {
            queues: [[[F::Real::ZERO; CAP]; MAX_COLUMN_STEPS]; MAX_COLUMN_ROWS],
            ahead: [[F::Real::ZERO; CAP]; MAX_COLUMN_ROWS],
            n: r.n,
            begin: r.begin,
            col,
            first,
            next: at as usize,
            row: r.n[0] as usize * elem,
            plane: plane * elem,
            shift: (Self::LAG as usize + Self::AHEAD + 1) * plane,
            steps: match k0 < k1 {
                true => (k1 - first + Self::LAG) as u32,
                false => 0,
            },
            load_lo: begin - rz,
            load_len,
            comp_lo: begin,
            comp_len,
            write_lo: w0,
            write_len,
            cell: column_margin(c.block_dim, F::RADIUS) + (tx + bx * ty0) as usize,
            pitch: bx as usize,
        }
    }

    /// The points of `pass.out` within `depth` planes of its ends in z that the block at `c` writes
    /// (its output tile's columns in `out`, its slab's planes among those): what it adds to a
    /// [`PassSignal`](super::PassSignal)'s counter.
    #[inline(always)]
    pub fn end_points(pass: &PassRange, march: u32, c: ThreadCoords, depth: u32) -> u32 {
        let (r, out) = (&pass.live, &pass.out);
        let elem = core::mem::size_of::<F::Real>();
        let [ox, oy] = column_output_tile(c.block_dim, F::RADIUS, T as u32, elem);
        let columns = |a: usize, o: u32| {
            let first = out.begin[a] + c.block_idx[a] * o;
            out.end[a].min(first + o).saturating_sub(first)
        };
        let (k0, k1) = c.slab(r, march);
        let (w0, w1) = (k0.max(out.begin[2]), k1.min(out.end[2]));
        let lower = w1.min(out.begin[2].saturating_add(depth));
        let upper = w0.max(out.end[2].saturating_sub(depth)).max(lower);
        let planes = lower.saturating_sub(w0) + w1.saturating_sub(upper);
        columns(0, ox) * columns(1, oy) * planes
    }

    /// The block's steps: one per input plane from `k0 - T rz`, until the last level has reached
    /// `k1 - 1`; none for an empty slab.
    #[inline(always)]
    pub fn steps(&self) -> u32 {
        self.steps
    }

    /// The plane level `l` (1 to `T`) computes at step `s`: `l - 1` planes plus `l` radii behind the
    /// input's.
    #[inline(always)]
    fn plane(&self, s: u32, l: usize) -> i32 {
        self.first + s as i32 - (l as i32 - 1) - l as i32 * Self::RZ
    }

    /// The first column's cell in level `level`'s shared plane of step `s`'s parity.
    #[inline(always)]
    fn shared_cell(&self, shared: SharedPtr<F::Real>, s: u32, level: usize) -> SharedPtr<F::Real> {
        let buf = (s & 1) as usize;
        shared.wrapping_add((buf * T + level) * COLUMN_PLANE_CELLS + self.cell)
    }

    /// The input's plane `q` of each column where the column reads it (zero elsewhere); `next` then
    /// moves on a plane.
    #[inline(always)]
    fn load(&mut self, q: i32) -> [F::Real; MAX_COLUMN_ROWS] {
        let mut v = [F::Real::ZERO; MAX_COLUMN_ROWS];
        each_row!(k => {
            if (q.wrapping_sub(self.load_lo) as u32) < self.load_len[k] {
                // SAFETY: the point lies in the input, as the load range is the live range's.
                v[k] = unsafe { *(self.next.wrapping_add(k * self.row) as *const F::Real) };
            }
        });
        // Opaque to LLVM, which otherwise keeps a 64-bit address per load and store of the unrolled
        // period (48 more registers in the f32 pass of three steps with two columns a thread).
        self.next = opaque(self.next.wrapping_add(self.plane));
        v
    }

    /// Points the thread at `f`'s fields, which the steps then read and write, and loads the planes
    /// ahead of step 0, before it is staged.
    #[inline(always)]
    pub fn prime(&mut self, f: &F) {
        let elem = core::mem::size_of::<F::Real>();
        let (input, output) = (f.input().as_ptr() as usize, f.output().as_ptr() as usize);
        self.next = input.wrapping_add(self.next.wrapping_mul(elem));
        self.shift = output
            .wrapping_sub(input)
            .wrapping_sub(self.shift.wrapping_mul(elem));
        for d in 0..Self::AHEAD {
            let v = self.load(self.first + d as i32);
            each_row!(k => {
                self.ahead[k][d] = v[k];
            });
        }
    }

    /// Phase A of step `s`: each column's oldest plane loaded ahead into its level-0 queue, the
    /// input's next plane loaded in its place, then each level's queue middles into its shared plane.
    ///
    /// # Safety
    /// `shared` holds [`column_shared_bytes`] for the launch, which every thread of the block shares;
    /// a barrier follows phase A, every thread taking part, and the planes of step parity `s & 1` are not
    /// written again before every thread has passed the next step's barrier. The thread was
    /// [`prime`](Self::prime)d with the update passed to [`compute`](Self::compute), and steps are
    /// staged in order from 0.
    #[inline(always)]
    pub unsafe fn stage(&mut self, shared: SharedPtr<F::Real>, s: u32) {
        let v = self.load(self.first + s as i32 + Self::AHEAD as i32);
        each_row!(k => {
            let ahead = &mut self.ahead[k];
            let entering = ahead[0];
            for d in 0..Self::AHEAD - 1 {
                ahead[d] = ahead[d + 1];
            }
            ahead[Self::AHEAD - 1] = v[k];
            push::<F::Real>(&mut self.queues[k][0], Self::RZ as usize, entering);
        });
        // Each level written out, its index a constant.
        macro_rules! share {
            ($l:literal) => {
                if $l < T {
                    let cell = self.shared_cell(shared, s, $l);
                    each_row!(k => {
                        // SAFETY: the cell lies in the plane, the plane in the launch's shared
                        // memory.
                        unsafe {
                            cell.wrapping_add(k * self.pitch)
                                .write(self.queues[k][$l][MID])
                        };
                    });
                }
            };
        }
        share!(0);
        share!(1);
        share!(2);
        share!(3);
    }

    /// Phase B of step `s`: every level from the last down, each from the shared plane and the queues
    /// of the level below as they stood after phase A.
    ///
    /// # Safety
    /// As for [`stage`](Self::stage), step `s` staged last.
    #[inline(always)]
    pub unsafe fn compute(&mut self, f: &F, shared: SharedPtr<F::Real>, s: u32) {
        // Each level written out, the last first, its index a constant.
        macro_rules! level {
            ($l:literal) => {
                if $l <= T {
                    // SAFETY: the caller's.
                    unsafe { self.level(f, shared, s, $l) };
                }
            };
        }
        level!(4);
        level!(3);
        level!(2);
        level!(1);
    }

    /// Level `l` of step `s` for each column (phase B). Every column computes, reading the shared
    /// planes' margin at the tile's edge, and keeps the level below's value where its point is not
    /// computed: a select, not a branch around the update, which would cost every warp its
    /// reconvergence. A point not computed names the range's first point to the update, so that an
    /// update reading other fields at its index stays inside them.
    ///
    /// # Safety
    /// As for [`compute`](Self::compute).
    #[inline(always)]
    unsafe fn level(&mut self, f: &F, shared: SharedPtr<F::Real>, s: u32, l: usize) {
        let p = self.plane(s, l);
        let mut rows = [F::Real::ZERO; MAX_COLUMN_ROWS];
        each_row!(k => {
            rows[k] = self.queues[k][l - 1][MID];
        });
        let cell = self.shared_cell(shared, s, l - 1);
        each_row!(k => {
            let computes = (p.wrapping_sub(self.comp_lo) as u32) < self.comp_len[k];
            let pick = |v: u32, safe: u32| core::hint::select_unpredictable(computes, v, safe);
            let mut idx = ArrayIndex3D::new(self.n);
            idx.set(
                pick(self.col[0], self.begin[0]),
                pick(self.col[1].wrapping_add(k as u32), self.begin[1]),
                pick(p as u32, self.begin[2]),
            );
            let below = &self.queues[k][l - 1];
            let src = ColumnSource {
                plane: cell.wrapping_add(k * self.pitch),
                pitch: self.pitch as isize,
                queue: below,
                rows,
                row: k,
                nrows: Self::ROWS,
            };
            let v =
                core::hint::select_unpredictable(computes, f.value_with(&idx, &src), below[MID]);
            if l == T {
                if (p.wrapping_sub(self.write_lo) as u32) < self.write_len[k] {
                    let at = self.next.wrapping_add(self.shift).wrapping_add(k * self.row);
                    // SAFETY: the point lies in the pass's `out`, in the output.
                    unsafe { *(at as *mut F::Real) = v };
                }
            } else {
                push::<F::Real>(&mut self.queues[k][l], Self::RZ as usize, v);
            }
        });
    }
}

/// `x`, which LLVM cannot see through.
#[inline(always)]
fn opaque(x: usize) -> usize {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: a move.
    unsafe {
        let mut x = x;
        core::arch::asm!("mov.b64 {0}, {0};", inout(reg64) x, options(pure, nomem, nostack, preserves_flags));
        x
    }
    #[cfg(not(target_arch = "nvptx64"))]
    x
}

/// Moves queue `q` (radius `rz`) one plane up, `v` the newest.
#[inline(always)]
fn push<T: Copy>(q: &mut [T; CAP], rz: usize, v: T) {
    for d in MID - rz..MID + rz {
        q[d] = q[d + 1];
    }
    q[MID + rz] = v;
}

/// Runs `T` steps of `f` over `pass` in the column form: reads `f.input()`, writes the last step into
/// `f.output()` at the points of `pass.out`, with [`column_shared_bytes`] of dynamic shared memory.
/// Block `b` covers the `b`-th [`column_output_tile`] of `pass.out` in x and y, and `march` of the
/// live range's planes of z.
#[inline(always)]
pub fn device_loop3d_columns<F: StencilUpdate3D, const T: usize>(
    f: &F,
    pass: &PassRange,
    march: u32,
) {
    let shared = SharedPtr::dynamic();
    let mut c = ThreadCoords::current();
    let signal = pass.signal;
    if signal.counter != 0 {
        c.block_idx[2] = ends_first(c.block_idx[2], crate::device::thread::grid_dim_z());
    }
    let mut t = ColumnThread::<F, T>::new(pass, march, c);
    let (n, period) = (t.steps(), ColumnThread::<F, T>::PERIOD);
    t.prime(f);
    // SAFETY (all): launched with `column_shared_bytes` of dynamic shared memory, every thread
    // running every phase of every step in order (the steps are the block's), a barrier after each.
    // One barrier a step: the shared planes alternate with the step's parity, and a thread writing
    // step `s + 2`'s has passed step `s + 1`'s barrier, which every thread reached after reading
    // step `s`'s.
    let step = |t: &mut ColumnThread<F, T>, s: u32| {
        unsafe { t.stage(shared, s) };
        crate::device::thread::sync_threads();
        unsafe { t.compute(f, shared, s) };
    };
    let mut s = 0;
    // Whole periods unrolled: each queue slot and shared plane is then a fixed register or address.
    while s + period <= n {
        macro_rules! unrolled {
            ($($k:literal)*) => { $( if $k < period { step(&mut t, s + $k) } )* };
        }
        unrolled!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17);
        s += period;
    }
    while s < n {
        step(&mut t, s);
        s += 1;
    }
    if signal.counter != 0 {
        let count = ColumnThread::<F, T>::end_points(pass, march, c, signal.depth);
        if count > 0 {
            // SAFETY: every thread of the block takes this branch (the count is the block's).
            unsafe { signal_written(signal.counter, count, c.thread_idx == [0, 0]) };
        }
    }
}

/// The slab a block of grid z index `z` of `n` marches in a signalled pass: from both ends inwards
/// (0, `n - 1`, 1, `n - 2`, ...), so that the blocks holding the end planes start first.
#[inline(always)]
pub fn ends_first(z: u32, n: u32) -> u32 {
    match z % 2 {
        0 => z / 2,
        _ => n - 1 - z / 2,
    }
}

/// Adds `count` to the `u32` at `counter` once every thread of the block has passed here, its
/// writes before then visible on the device first: a barrier, so the caller's threads must all call
/// it, and `first` true for one of them, which adds.
///
/// # Safety
/// `counter` is the address of a `u32` in device memory (on the host, in host memory) that nothing
/// else writes but such adds; every thread of the block calls this.
#[inline(always)]
pub unsafe fn signal_written(counter: u64, count: u32, first: bool) {
    fence_device();
    crate::device::thread::sync_threads();
    if first {
        // SAFETY: the caller's.
        unsafe { add_u32(counter as *mut u32, count, Scope::Device) };
    }
}
