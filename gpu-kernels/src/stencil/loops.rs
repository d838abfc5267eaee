//! The loops a generated kernel runs: each thread takes one (x, y) column of the range from its block
//! and grid position and marches `march` points along the last axis. 3-D loops come in four variants
//! ([`Variant`](super::Variant)): plain, z-queue, tiled and vector (of a [`StencilUpdate3D`], a
//! [`FieldsUpdate3D`] or a [`LanesUpdate3D`]).

use super::{
    ArrayIndex2D, ArrayIndex3D, FieldRef, FieldsUpdate3D, LanesUpdate3D, PointUpdate2D,
    PointUpdate3D, StencilUpdate3D, SumInto, SumUpdate3D, Tile, VectorQueue, ZQueue, VECTOR_BYTES,
};
use crate::device::shared::SharedPtr;
use crate::device::thread::{
    block_dim_x, block_dim_y, block_idx_x, block_idx_y, block_idx_z, sync_threads, thread_idx_x,
    thread_idx_y,
};

/// The points to update: the array size `n` (margins included) and the half-open range
/// `begin..end` per axis, as in the paper. 2-D ranges have `n[2] = 1`, `begin[2] = 0`, `end[2] = 1`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LoopRange {
    /// Array size per axis, margins included.
    pub n: [u32; 3],
    /// First point of the range per axis.
    pub begin: [u32; 3],
    /// One past the last point per axis.
    pub end: [u32; 3],
}

impl LoopRange {
    /// Points per axis inside the range.
    pub fn extent(&self) -> [u32; 3] {
        [
            self.end[0].saturating_sub(self.begin[0]),
            self.end[1].saturating_sub(self.begin[1]),
            self.end[2].saturating_sub(self.begin[2]),
        ]
    }

    /// Number of points inside the range.
    pub fn points(&self) -> u64 {
        self.extent().iter().map(|&e| e as u64).product()
    }
}

/// The points of a temporally blocked pass: those it writes (`out`) and those it advances (`live`,
/// which holds `out`). The points of `live` outside `out` are computed for the pass's steps but not
/// written: a split run's halo layers, received before the pass, which then needs no exchange between
/// its steps (each step's wrong values at their far edge move one radius in, and stop short of `out`
/// where `live` reaches `steps - 1` radii beyond it). Points outside `live` keep the input's values,
/// as single steps leave a margin.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PassRange {
    /// The points the pass advances; those outside it keep the input's values.
    pub live: LoopRange,
    /// The points it writes, within `live`.
    pub out: LoopRange,
    /// Where its blocks count the points they have written near `out`'s ends in z; none by default.
    pub signal: PassSignal,
}

/// A counter in device memory to which each block of a column-form pass
/// ([`device_loop3d_columns`](super::device_loop3d_columns)) adds, once it has written them, the
/// points of the pass's `out` it wrote within `depth` planes of `out`'s first and last plane. A
/// pass adds [`PassRange::end_points`] in all, whatever its launch. The blocks whose slabs hold those
/// planes run first (the slabs from both ends inwards), so that a split run's halo exchange, which
/// waits for the count (`cuStreamWaitValue32`), starts while the rest of the pass runs, and the pass
/// is one launch over the whole slab (no boundary passes beside it, each computing its steps' lead
/// again).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PassSignal {
    /// The counter's address (a `u32` in device memory; on the host, in host memory); 0: no signal.
    pub counter: u64,
    /// Planes at each end of `out` in z whose points count.
    pub depth: u32,
    /// Padding, so that the layout has no implicit bytes.
    pub pad: u32,
}

impl PassSignal {
    /// No signal.
    pub const NONE: Self = Self {
        counter: 0,
        depth: 0,
        pad: 0,
    };
}

impl PassRange {
    /// A pass over `live` writing `out`, with no signal.
    pub fn new(live: LoopRange, out: LoopRange) -> Self {
        Self {
            live,
            out,
            signal: PassSignal::NONE,
        }
    }

    /// A pass that writes every point it advances: the points outside `range` are its margin.
    pub fn whole(range: LoopRange) -> Self {
        Self::new(range, range)
    }

    /// The points of `out` within `depth` planes of its first and last plane in z: what a signalled
    /// pass adds to its counter ([`PassSignal`]).
    pub fn end_points(&self, depth: u32) -> u64 {
        let [nx, ny, nz] = self.out.extent();
        nx as u64 * ny as u64 * nz.min(2 * depth) as u64
    }

    /// Whether every point of `out` lies within `live` (on the same array); an empty `out`, which
    /// writes nothing, does.
    pub fn nested(&self) -> bool {
        let (l, o) = (&self.live, &self.out);
        l.n == o.n
            && (0..3).all(|a| {
                o.begin[a] >= o.end[a] || (l.begin[a] <= o.begin[a] && o.end[a] <= l.end[a])
            })
    }
}

/// Where a thread of a generated 3-D kernel sits: `blockIdx`, `blockDim` (x, y) and `threadIdx` (x, y).
/// The loops take it as a value so that the host can run them for any thread of any launch (the launch
/// emulator of the tests); kernels pass [`ThreadCoords::current`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadCoords {
    /// Block index (x, y, z) in the grid.
    pub block_idx: [u32; 3],
    /// Threads per block (x, y).
    pub block_dim: [u32; 2],
    /// Thread index (x, y) in the block.
    pub thread_idx: [u32; 2],
}

impl ThreadCoords {
    /// The calling GPU thread's coordinates (all zero, block 1 x 1, on the host).
    #[inline(always)]
    pub fn current() -> Self {
        Self {
            block_idx: [block_idx_x(), block_idx_y(), block_idx_z()],
            block_dim: [block_dim_x(), block_dim_y()],
            thread_idx: [thread_idx_x(), thread_idx_y()],
        }
    }

    /// The (x, y) point of this thread's column in `r`.
    #[inline(always)]
    fn column(&self, r: &LoopRange) -> (u32, u32) {
        (
            r.begin[0] + self.block_idx[0] * self.block_dim[0] + self.thread_idx[0],
            r.begin[1] + self.block_idx[1] * self.block_dim[1] + self.thread_idx[1],
        )
    }

    /// The first point `(i, j, k0)` of this thread's vector of `w` x-neighbouring points and the end
    /// `k1` of its slab, or `None` when the thread has no points (a launch of the vector variant: grid
    /// x covers the range's x points divided by `w`).
    #[inline(always)]
    fn vector_slab(&self, r: &LoopRange, march: u32, w: u32) -> Option<([u32; 3], u32)> {
        let (col, j) = self.column(r);
        let i = r.begin[0] + w * (col - r.begin[0]);
        let (k0, k1) = self.slab(r, march);
        (i < r.end[0] && j < r.end[1] && k0 < k1).then_some(([i, j, k0], k1))
    }

    /// The z points `k0..k1` of this thread's block: `march` points from the block's grid z. The grid
    /// must not reach beyond the range in z (the host's launch configuration never does).
    #[inline(always)]
    pub(crate) fn slab(&self, r: &LoopRange, march: u32) -> (u32, u32) {
        let k0 = r.begin[2] + self.block_idx[2] * march;
        let k1 = if r.end[2] - k0 > march {
            k0 + march
        } else {
            r.end[2]
        };
        (k0, k1)
    }
}

/// Runs `f` over this thread's z column: grid x/y of blocks x/y cover the range's x/y, grid z covers z in
/// steps of `march`. The plain variant: `f` loads every neighbour from global memory.
#[inline(always)]
pub fn device_loop3d<F: PointUpdate3D>(f: &F, r: &LoopRange, march: u32) {
    plain_thread(f, r, march, ThreadCoords::current())
}

/// [`device_loop3d`] for the thread at `c`.
#[inline(always)]
pub fn plain_thread<F: PointUpdate3D>(f: &F, r: &LoopRange, march: u32, c: ThreadCoords) {
    let (i, j) = c.column(r);
    if i >= r.end[0] || j >= r.end[1] {
        return;
    }
    let (k0, k1) = c.slab(r, march);
    let mut idx = ArrayIndex3D::new(r.n);
    idx.set(i, j, k0);
    for _ in k0..k1 {
        f.update(&idx);
        idx.next_k();
    }
}

/// [`device_loop3d`] for a [`SumUpdate3D`]: the thread's terms added up as it marches, then the
/// block's and the grid's sums into `sum.out` ([`SumInto::finish`]). Threads outside the range take
/// part with nothing, since the whole block reduces.
///
/// # Safety
/// As [`SumInto::finish`]; the block must be whole warps.
#[inline(always)]
pub unsafe fn device_sum3d<F: SumUpdate3D>(f: &F, r: &LoopRange, march: u32, sum: &SumInto) {
    let mine = sum_thread(f, r, march, ThreadCoords::current());
    // SAFETY: the caller's contract.
    unsafe { sum.finish(mine) }
}

/// The terms of the thread at `c` of a summing loop ([`device_sum3d`]), its points computed: the plain
/// loop's points, in z order, each point's loads issued before the previous point's store
/// ([`SumUpdate3D`]).
#[inline(always)]
pub fn sum_thread<F: SumUpdate3D>(f: &F, r: &LoopRange, march: u32, c: ThreadCoords) -> f64 {
    let (i, j) = c.column(r);
    let (k0, k1) = c.slab(r, march);
    if i >= r.end[0] || j >= r.end[1] || k0 >= k1 {
        return 0.0;
    }
    let mut idx = ArrayIndex3D::new(r.n);
    idx.set(i, j, k0);
    let mut loads = f.load(&idx);
    let mut acc = 0.0;
    for _ in k0 + 1..k1 {
        let mut next = idx;
        next.next_k();
        let ahead = f.load(&next);
        acc += f.store_term(&idx, loads);
        (idx, loads) = (next, ahead);
    }
    acc + f.store_term(&idx, loads)
}

/// As [`device_loop3d`], with the thread's input column in a register [`ZQueue`]: each step loads one new
/// plane of the column instead of `2 RADIUS[2] + 1`; off-column neighbours come from global memory.
#[inline(always)]
pub fn device_loop3d_zqueue<F: StencilUpdate3D>(f: &F, r: &LoopRange, march: u32) {
    zqueue_thread(f, r, march, ThreadCoords::current())
}

/// [`device_loop3d_zqueue`] for the thread at `c`.
#[inline(always)]
pub fn zqueue_thread<F: StencilUpdate3D>(f: &F, r: &LoopRange, march: u32, c: ThreadCoords) {
    let (i, j) = c.column(r);
    let (k0, k1) = c.slab(r, march);
    if i >= r.end[0] || j >= r.end[1] || k0 >= k1 {
        return;
    }
    zqueue_column(f, r, (i, j), (k0, k1));
}

/// The z-queue loop over points `k0..k1` (at least one) of column `(i, j)`.
#[inline(always)]
fn zqueue_column<F: StencilUpdate3D>(
    f: &F,
    r: &LoopRange,
    (i, j): (u32, u32),
    (k0, k1): (u32, u32),
) {
    let mut idx = ArrayIndex3D::new(r.n);
    idx.set(i, j, k0);
    let mut queue = ZQueue::load(f, &idx);
    let mut k = k0;
    loop {
        f.update_with(&idx, &queue);
        k += 1;
        if k == k1 {
            break;
        }
        idx.next_k();
        queue.advance(&idx);
    }
}

/// Points a thread of the vector variant computes: as many `T` as fill a
/// [`VECTOR_BYTES`](super::VECTOR_BYTES) vector (4 in f32, 2 in f64).
pub const fn vector_lanes(elem_bytes: usize) -> usize {
    if elem_bytes >= VECTOR_BYTES {
        1
    } else {
        VECTOR_BYTES / elem_bytes
    }
}

/// As [`device_loop3d_zqueue`], each thread computing the x-neighbouring points of one 16-byte vector
/// ([`vector_lanes`]) from a [`VectorQueue`]: per plane one vector load of the new plane, one per
/// neighbouring row, one vector store, and scalar loads of the points left and right of the vector.
/// That is a fraction of the memory instructions of one thread per point, each moving 16 bytes, as the
/// memory system wants (f32 stencils are otherwise short of bytes in flight). Grid x of blocks covers
/// the range's x points divided by the lanes.
///
/// A thread whose vector is not aligned (or whose rows are not a whole number of vectors long), and the
/// last thread of a row whose length is not a multiple of the lanes, fall back to the z-queue loop, a
/// column at a time.
#[inline(always)]
pub fn device_loop3d_vector<F: StencilUpdate3D>(f: &F, r: &LoopRange, march: u32) {
    vector_thread(f, r, march, ThreadCoords::current())
}

/// Calls `$march::<F, ..., W>(f, r, march, c)` with `W` the [`vector_lanes`] of `F::Real` (a
/// constant: one arm survives).
macro_rules! by_lanes {
    ($march:ident::<$f:ty $(, $g:ident)*>($($arg:expr),*)) => {
        match vector_lanes(core::mem::size_of::<<$f as PointUpdate3D>::Real>()) {
            8 => $march::<$f, $($g,)* 8>($($arg),*),
            4 => $march::<$f, $($g,)* 4>($($arg),*),
            2 => $march::<$f, $($g,)* 2>($($arg),*),
            _ => $march::<$f, $($g,)* 1>($($arg),*),
        }
    };
}

/// [`device_loop3d_vector`] for the thread at `c`.
#[inline(always)]
pub fn vector_thread<F: StencilUpdate3D>(f: &F, r: &LoopRange, march: u32, c: ThreadCoords) {
    by_lanes!(vector_march::<F>(f, r, march, c))
}

/// [`vector_thread`] with `W` lanes.
#[inline(always)]
fn vector_march<F: StencilUpdate3D, const W: usize>(
    f: &F,
    r: &LoopRange,
    march: u32,
    c: ThreadCoords,
) {
    let Some(([i, j, k0], k1)) = c.vector_slab(r, march, W as u32) else {
        return;
    };
    let mut first = ArrayIndex3D::new(r.n);
    first.set(i, j, k0);
    let row_bytes = r.n[0] as usize * core::mem::size_of::<F::Real>();
    let aligned = row_bytes.is_multiple_of(VECTOR_BYTES)
        && f.input().vector_aligned(first.ix())
        && f.output().as_ref().vector_aligned(first.ix());
    if r.end[0] - i < W as u32 || !aligned {
        for p in i..r.end[0].min(i + W as u32) {
            zqueue_column(f, r, (p, j), (k0, k1));
        }
        return;
    }
    // SAFETY: checked above: the vector and every row start are aligned.
    let mut queue = unsafe { VectorQueue::<F, W>::load(f, &first) };
    let mut k = k0;
    loop {
        // SAFETY (and `advance` below): `first` is the vector's first point, aligned as checked.
        unsafe { queue.load_plane(&first) };
        let v: [F::Real; W] = core::array::from_fn(|lane| {
            let mut idx = first;
            idx.set(i + lane as u32, j, k);
            f.value_with(&idx, &queue.lane(lane))
        });
        // SAFETY: the output's vector is aligned, as checked above.
        unsafe { f.output().set_vector(first.ix(), v) };
        k += 1;
        if k == k1 {
            break;
        }
        first.next_k();
        // SAFETY: as above.
        unsafe { queue.advance(&first) };
    }
}

/// The vector variant of a [`FieldsUpdate3D`]: as [`device_loop3d_vector`], with a [`VectorQueue`] per
/// input field and one vector store per output field and plane. Grid x of blocks covers the range's x
/// points divided by the lanes.
///
/// A thread whose vector is not aligned in every field (or whose rows are not a whole number of vectors
/// long), and the last thread of a row whose length is not a multiple of the lanes, run the point
/// update a column at a time.
#[inline(always)]
pub fn device_loop3d_fields_vector<F: FieldsUpdate3D<N, M>, const N: usize, const M: usize>(
    f: &F,
    r: &LoopRange,
    march: u32,
) {
    fields_vector_thread(f, r, march, ThreadCoords::current())
}

/// [`device_loop3d_fields_vector`] for the thread at `c`.
#[inline(always)]
pub fn fields_vector_thread<F: FieldsUpdate3D<N, M>, const N: usize, const M: usize>(
    f: &F,
    r: &LoopRange,
    march: u32,
    c: ThreadCoords,
) {
    by_lanes!(fields_vector_march::<F, N, M>(f, r, march, c))
}

/// [`fields_vector_thread`] with `W` lanes.
#[inline(always)]
fn fields_vector_march<F: FieldsUpdate3D<N, M>, const N: usize, const M: usize, const W: usize>(
    f: &F,
    r: &LoopRange,
    march: u32,
    c: ThreadCoords,
) {
    let Some(([i, j, k0], k1)) = c.vector_slab(r, march, W as u32) else {
        return;
    };
    let mut first = ArrayIndex3D::new(r.n);
    first.set(i, j, k0);
    let (inputs, outputs) = (f.inputs(), f.outputs());
    let row_bytes = r.n[0] as usize * core::mem::size_of::<F::Real>();
    let aligned = row_bytes.is_multiple_of(VECTOR_BYTES)
        && inputs.iter().all(|x| x.vector_aligned(first.ix()))
        && outputs
            .iter()
            .all(|x| x.as_ref().vector_aligned(first.ix()));
    if r.end[0] - i < W as u32 || !aligned {
        // Column by column, so that the scalar updates' registers are not live together.
        for p in i..r.end[0].min(i + W as u32) {
            first.set(p, j, k0);
            for _ in k0..k1 {
                f.update(&first);
                first.next_k();
            }
        }
        return;
    }
    // SAFETY: checked above: the vector and every row start are aligned in every input.
    let mut queues = inputs.map(|x| unsafe { VectorQueue::<F, W>::load_field(x, &first) });
    let mut k = k0;
    loop {
        for q in &mut queues {
            // SAFETY (and `advance` below): `first` is the vector's first point, aligned as checked.
            unsafe { q.load_plane(&first) };
        }
        let v: [[F::Real; M]; W] = core::array::from_fn(|lane| {
            let mut idx = first;
            idx.set(i + lane as u32, j, k);
            f.values_with(&idx, &queues.each_ref().map(|q| q.lane(lane)))
        });
        for (m, out) in outputs.iter().enumerate() {
            // SAFETY: every output's vector is aligned, as checked above.
            unsafe { out.set_vector(first.ix(), v.map(|p| p[m])) };
        }
        k += 1;
        if k == k1 {
            break;
        }
        first.next_k();
        for q in &mut queues {
            // SAFETY: as above.
            unsafe { q.advance(&first) };
        }
    }
}

/// The vector variant of a [`LanesUpdate3D`]: each thread marches the `W` x-neighbouring points of one
/// 16-byte vector ([`vector_lanes`]) along z, computing them together with
/// [`LanesUpdate3D::update_lanes`] (or, where the update's vectors are not aligned, one column at a time
/// with its point update). Grid x of blocks covers the range's x points divided by the lanes.
#[inline(always)]
pub fn device_loop3d_lanes<F: LanesUpdate3D>(f: &F, r: &LoopRange, march: u32) {
    lanes_thread(f, r, march, ThreadCoords::current())
}

/// [`device_loop3d_lanes`] for the thread at `c`.
#[inline(always)]
pub fn lanes_thread<F: LanesUpdate3D>(f: &F, r: &LoopRange, march: u32, c: ThreadCoords) {
    by_lanes!(lanes_march::<F>(f, r, march, c))
}

/// [`lanes_thread`] with `W` lanes.
#[inline(always)]
fn lanes_march<F: LanesUpdate3D, const W: usize>(
    f: &F,
    r: &LoopRange,
    march: u32,
    c: ThreadCoords,
) {
    let Some(([i, j, k0], k1)) = c.vector_slab(r, march, W as u32) else {
        return;
    };
    let mut idx = ArrayIndex3D::new(r.n);
    idx.set(i, j, k0);
    if f.lanes_aligned::<W>(&idx) {
        for _ in k0..k1 {
            f.update_lanes::<W>(&idx, r);
            idx.next_k();
        }
        return;
    }
    // Column by column, so that the scalar updates' registers are not live together.
    for p in i..r.end[0].min(i + W as u32) {
        idx.set(p, j, k0);
        for _ in k0..k1 {
            f.update(&idx);
            idx.next_k();
        }
    }
}

/// Bytes of dynamic shared memory a tiled launch with `block` threads (x, y) needs for an update of
/// `radius` with `elem_bytes`-byte elements: two buffers (so each plane needs one barrier, not two) of
/// the block's tile with its halo.
pub const fn tile_shared_bytes(block: [u32; 2], radius: [u32; 3], elem_bytes: usize) -> usize {
    2 * (block[0] + 2 * radius[0]) as usize * (block[1] + 2 * radius[1]) as usize * elem_bytes
}

/// As [`device_loop3d`], 2.5-D tiled: per z plane the block stages its xy tile of the input, with a halo
/// of `RADIUS[0..2]`, in dynamic shared memory ([`tile_shared_bytes`] of it, sized by the launch); each
/// thread keeps its column in a [`ZQueue`]. `f` reads in-plane neighbours from the tile ([`Tile`]).
///
/// Every thread of the block stays in the loop to the end, because of the barrier: threads outside the
/// range skip the work, not the barrier.
#[inline(always)]
pub fn device_loop3d_tiled<F: StencilUpdate3D>(f: &F, r: &LoopRange, march: u32) {
    let tile = SharedPtr::dynamic();
    let mut t = TiledThread::new(f, r, march, ThreadCoords::current());
    for s in 0..t.steps() {
        // SAFETY: the host launches tiled entries with `tile_shared_bytes` of dynamic shared memory.
        unsafe { t.stage(tile, s) };
        sync_threads();
        // SAFETY: as above; the barrier made every thread's staged cells of this plane visible.
        unsafe { t.compute(f, tile, s) };
        t.advance(s);
    }
}

/// One thread of a tiled block, split at the barrier: per step `s`, [`stage`](Self::stage) (every thread),
/// a block barrier, [`compute`](Self::compute) and [`advance`](Self::advance). The tile is double
/// buffered (step `s` uses buffer `s % 2`): a thread staging plane `s + 1` cannot overwrite what a slower
/// thread still reads of plane `s`, and the barrier of step `s + 1` orders it before anyone stages `s + 2`
/// into the same buffer, so one barrier per plane suffices.
#[derive(Clone, Copy, Debug)]
pub struct TiledThread<F: PointUpdate3D> {
    idx: ArrayIndex3D,
    queue: ZQueue<F>,
    input: FieldRef<F::Real>,
    steps: u32,
    /// The column is inside the range: this thread computes points.
    compute: bool,
    /// The column is within the radius of the range: computing threads read it, so its queue is kept.
    column: bool,
    thread: [u32; 2],
    block: [u32; 2],
    /// Tile row length, `block_x + 2 RADIUS[0]`.
    pitch: u32,
    /// Cells of one tile buffer.
    cells: u32,
    /// Linear index of tile cell (0, 0) in the current plane.
    origin: usize,
    /// Tile cells (x, y) at or beyond this are outside the range's radius: nobody reads them, and they
    /// may lie outside the array, so they are not loaded.
    limit: [u32; 2],
}

impl<F: StencilUpdate3D> TiledThread<F> {
    /// The thread at `c` of a tiled launch over `r`, its queue loaded.
    #[inline(always)]
    pub fn new(f: &F, r: &LoopRange, march: u32, c: ThreadCoords) -> Self {
        let [rx, ry, _] = F::RADIUS;
        let [bx, by] = c.block_dim;
        let (i, j) = c.column(r);
        let (k0, k1) = c.slab(r, march);
        let (x0, y0) = (i - c.thread_idx[0] - rx, j - c.thread_idx[1] - ry);
        let mut idx = ArrayIndex3D::new(r.n);
        idx.set(i, j, k0);
        let mut origin = ArrayIndex3D::new(r.n);
        origin.set(x0, y0, k0);
        let column = i < r.end[0] + rx && j < r.end[1] + ry && k0 < k1;
        Self {
            idx,
            queue: if column {
                ZQueue::load(f, &idx)
            } else {
                ZQueue::empty(f)
            },
            input: f.input(),
            steps: k1.saturating_sub(k0),
            compute: i < r.end[0] && j < r.end[1],
            column,
            thread: c.thread_idx,
            block: c.block_dim,
            pitch: bx + 2 * rx,
            cells: (bx + 2 * rx) * (by + 2 * ry),
            origin: origin.ix(),
            limit: [r.end[0] + rx - x0, r.end[1] + ry - y0],
        }
    }

    /// Planes this block computes; the same for every thread of the block.
    #[inline(always)]
    pub fn steps(&self) -> u32 {
        self.steps
    }

    /// Before the barrier of step `s`: writes this thread's share of the current plane's tile into buffer
    /// `s % 2` of `tile`: its own cell from its queue, and halo cells (rows above and below the block,
    /// corners included, then the columns left and right of its row) from global memory.
    ///
    /// # Safety
    /// `tile` must point to [`tile_shared_bytes`] bytes that the block's threads share.
    #[inline(always)]
    pub unsafe fn stage(&self, tile: SharedPtr<F::Real>, s: u32) {
        let [rx, ry, _] = F::RADIUS;
        let [tx, ty] = self.thread;
        let [bx, by] = self.block;
        let w = self.pitch;
        let buf = tile.wrapping_add((s & 1) as usize * self.cells as usize);
        if self.column {
            buf.wrapping_add(((ty + ry) * w + tx + rx) as usize)
                .write(self.queue.centre());
        }
        let nx = self.idx.size()[0] as usize;
        let load = |cx: u32, cy: u32| {
            if cx < self.limit[0] && cy < self.limit[1] {
                let v = self.input.get(self.origin + cx as usize + nx * cy as usize);
                buf.wrapping_add((cy * w + cx) as usize).write(v);
            }
        };
        let mut cy = ty;
        while cy < ry {
            let mut cx = tx;
            while cx < w {
                load(cx, cy);
                load(cx, cy + ry + by);
                cx += bx;
            }
            cy += by;
        }
        let mut cx = tx;
        while cx < rx {
            load(cx, ty + ry);
            load(cx + rx + bx, ty + ry);
            cx += bx;
        }
    }

    /// After the barrier of step `s`: computes this thread's point, if it is inside the range, reading
    /// the plane from buffer `s % 2` of `tile`.
    ///
    /// # Safety
    /// As [`stage`](Self::stage), and every thread of the block must have staged step `s`.
    #[inline(always)]
    pub unsafe fn compute(&self, f: &F, tile: SharedPtr<F::Real>, s: u32) {
        if self.compute {
            let [rx, ry, _] = F::RADIUS;
            let [tx, ty] = self.thread;
            let cell = (s & 1) as usize * self.cells as usize
                + ((ty + ry) * self.pitch + tx + rx) as usize;
            f.update_with(
                &self.idx,
                &Tile::new(tile.wrapping_add(cell), self.pitch as usize, &self.queue),
            );
        }
    }

    /// The end of step `s`: moves to the next plane and loads the queue's new plane.
    #[inline(always)]
    pub fn advance(&mut self, s: u32) {
        self.idx.next_k();
        let [nx, ny, _] = self.idx.size();
        self.origin += nx as usize * ny as usize;
        if self.column && s + 1 < self.steps {
            self.queue.advance(&self.idx);
        }
    }
}

/// Runs `f` over this thread's rows: grid x of blocks covers x, each thread y of the grid covers `march`
/// consecutive rows.
#[inline(always)]
pub fn device_loop2d<F: PointUpdate2D>(f: &F, r: &LoopRange, march: u32) {
    let i = r.begin[0] + block_idx_x() * block_dim_x() + thread_idx_x();
    let row = block_idx_y() * block_dim_y() + thread_idx_y();
    let j0 = r.begin[1] + row * march;
    if i >= r.end[0] || j0 >= r.end[1] {
        return;
    }
    let j1 = if r.end[1] - j0 > march {
        j0 + march
    } else {
        r.end[1]
    };
    let mut idx = ArrayIndex2D::new([r.n[0], r.n[1]]);
    idx.set(i, j0);
    for _ in j0..j1 {
        f.update(&idx);
        idx.next_j();
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;
    use crate::stencil::{FieldMut, FieldRef};
    use crate::vector::{CgScalars, CgStep};

    /// Every thread of launches of several shapes and marches (slabs that end inside a march, threads
    /// past the range) runs the pipelined summing loop of `r -= alpha q`: every point of the range is
    /// updated once, nothing else, and the threads' terms add up to the new `|r|^2`, all against
    /// a plain f64 loop over the range.
    #[test]
    fn the_summing_loop_updates_each_point_once_and_sums_its_terms() {
        let n = [7, 6, 9];
        let r = LoopRange {
            n,
            begin: [1, 1, 1],
            end: [6, 5, 8],
        };
        let len = (n[0] * n[1] * n[2]) as usize;
        let q: Vec<f64> = (0..len)
            .map(|i| ((i * 7919) % 31) as f64 / 8.0 - 2.0)
            .collect();
        let r0: Vec<f64> = (0..len)
            .map(|i| ((i * 104729) % 17) as f64 / 4.0 - 2.0)
            .collect();
        let alpha = 0.375;
        let inside = |i: usize| {
            let (x, y, z) = (
                i as u32 % n[0],
                i as u32 / n[0] % n[1],
                i as u32 / (n[0] * n[1]),
            );
            (0..3).all(|a| [x, y, z][a] >= r.begin[a] && [x, y, z][a] < r.end[a])
        };
        let want: Vec<f64> = (0..len)
            .map(|i| {
                if inside(i) {
                    r0[i] - alpha * q[i]
                } else {
                    r0[i]
                }
            })
            .collect();
        let want_sum: f64 = (0..len)
            .filter(|&i| inside(i))
            .map(|i| want[i] * want[i])
            .sum();
        for (block, march) in [
            ([4, 2], 1),
            ([2, 3], 2),
            ([8, 1], 3),
            ([1, 1], 7),
            ([3, 2], 16),
        ] {
            let mut rv = r0.clone();
            // SAFETY: both vectors outlive the loop and hold every index of `n`.
            let step = CgStep {
                r: unsafe { FieldMut::from_raw(rv.as_mut_ptr()) },
                q: unsafe { FieldRef::from_raw(q.as_ptr()) },
                alpha,
                scalars: CgScalars::HOST,
            };
            let e = r.extent();
            let grid = [
                e[0].div_ceil(block[0]) + 1,
                e[1].div_ceil(block[1]),
                e[2].div_ceil(march),
            ];
            let mut sum = 0.0;
            for bz in 0..grid[2] {
                for by in 0..grid[1] {
                    for bx in 0..grid[0] {
                        for ty in 0..block[1] {
                            for tx in 0..block[0] {
                                let c = ThreadCoords {
                                    block_idx: [bx, by, bz],
                                    block_dim: block,
                                    thread_idx: [tx, ty],
                                };
                                sum += sum_thread(&step, &r, march, c);
                            }
                        }
                    }
                }
            }
            assert!(
                rv.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-15),
                "{block:?}/march={march}: the points differ"
            );
            assert!(
                (sum - want_sum).abs() < 1e-12 * want_sum,
                "{block:?}/march={march}: sum {sum} against {want_sum}"
            );
        }
    }
}
