//! Temporal blocking: `steps` time steps of a [`StencilUpdate3D`] in one pass over memory, each point
//! read once and written once per pass (2.5-D blocking with a z wavefront, as in AN5D, Matsumura et
//! al., CGO 2020). A block owns an xy tile of the output and marches its z slab; per z step it
//! stages the input's next plane of the tile widened by `steps` radii, then computes each time level
//! one plane behind the level below (the wavefront) on a tile one radius narrower than that level's,
//! recomputing the halo its neighbours also compute instead of exchanging it. The intermediate levels
//! live in shared memory, a ring of `2 RADIUS[2] + STEP_PLANES` planes per level; only the last level is
//! written to the output.
//!
//! Each point of each level is computed by the update's own [`value_with`](StencilUpdate3D::value_with)
//! from the level below, read through a [`Source3D`] over the ring (so any offset within the radius,
//! diagonal ones included), and points outside the pass's live range ([`PassRange`]) keep the input's
//! values at every level: the result is that of `steps` single steps to the bit, provided the margin
//! holds the same values in both fields the single steps would swap between (the caller's boundary
//! condition). The last level is written at the points of the pass's `out` only.
//!
//! The block's threads keep nothing between its barriers but their [`Stage`], worked out once from
//! their coordinates (everything else a phase needs is in shared memory or recomputed from the step),
//! so the launch emulator runs a phase for every thread in turn between barriers.
//!
//! The wavefront advances [`STEP_PLANES`] planes per step: each thread loads its cells of that many
//! input planes into registers ([`Stage`], its cells fixed for the whole march) before storing any,
//! then each level is computed on that many planes between two barriers, each thread walking its own
//! cells (every block-size-th of the tile) by column and row. On an H100 (docs/benchmarks/history.md,
//! runs Y' to Z4) the first form, a plane a step and each row's bounds worked out per level, ran at a
//! tenth of the single step; loading planes ahead in registers gained little, the form being bound by
//! its instructions per point; four planes a step and the walk reached 0.30x at T=2 and 3. The GPU's
//! `cp.async` would stage into shared memory without registers, but it needs sm_80 and the kernels
//! are built for sm_70.
//!
//! This is the exact, general form: any offset within the radius. Updates that read off their column
//! only in their own plane have the column form too ([`super::columns`]), each level's z
//! neighbours in registers: a fraction of the instructions per point (not yet measured on a GPU).

use super::{ArrayIndex3D, LoopRange, PassRange, Source3D, StencilUpdate3D, ThreadCoords};
use crate::device::math::Real;
use crate::device::shared::SharedPtr;
use crate::device::thread::sync_threads;

/// The most steps one temporally blocked pass advances.
pub const MAX_TEMPORAL_STEPS: u32 = 8;

/// The cells of a staged plane a thread keeps in registers: enough for the launch shapes worth tuning
/// (a 32x4 block at 4 steps of radius 1 has 3.75 cells a thread); a tile with more stages the rest
/// one at a time, when the plane is stored.
pub const STAGE_CELLS: usize = 4;

/// The planes a wavefront step stages and computes at each level: their loads are in flight together
/// (in registers, [`STAGE_CELLS`] values a plane), and a level's barrier serves them all.
pub const STEP_PLANES: usize = 4;

/// No cell: a staging slot outside what level 0 holds.
const NO_CELL: u32 = u32::MAX;

/// Bytes of dynamic shared memory a temporally blocked launch of `steps` steps with `block` threads
/// (x, y) needs for an update of `radius` with `elem_bytes`-byte elements: the rings of levels
/// `0 .. steps` (the last level goes to the output), `2 radius[2] + STEP_PLANES` planes each, of the block's tile
/// widened by `steps` radii on every side.
pub const fn temporal_shared_bytes(
    block: [u32; 2],
    radius: [u32; 3],
    steps: u32,
    elem_bytes: usize,
) -> usize {
    let w = (block[0] + 2 * steps * radius[0]) as usize;
    let h = (block[1] + 2 * steps * radius[1]) as usize;
    steps as usize * (2 * radius[2] as usize + STEP_PLANES) * w * h * elem_bytes
}

/// Runs `steps` steps of `f` over `pass` (1 to [`MAX_TEMPORAL_STEPS`]): reads `f.input()`, writes the
/// last step into `f.output()` (a field other than the input) at the points of `pass.out`, with
/// [`temporal_shared_bytes`] of dynamic shared memory. The grid covers `pass.out` as the tiled
/// variant's covers its range (x and y by the block, z by `march`).
#[inline(always)]
pub fn device_loop3d_temporal<F: StencilUpdate3D>(f: &F, pass: &PassRange, march: u32, steps: u32) {
    let shared = SharedPtr::dynamic();
    let c = ThreadCoords::current();
    let block = TemporalBlock::new(f, pass, march, steps, c);
    // SAFETY: launched with `temporal_shared_bytes` of dynamic shared memory; every thread of the
    // block runs the pass, the barrier after each phase.
    unsafe { block.run(f, shared, &block.stage::<F>(c), sync_threads) };
}

/// A thread's share of the input planes a temporally blocked pass stages: where its first
/// [`STAGE_CELLS`] cells lie in a plane (x + nx y; `NO_CELL` outside what level 0 holds), the same in
/// every plane. Their values are loaded into a `[T; STAGE_CELLS]` per plane.
#[derive(Clone, Copy, Debug)]
pub struct Stage {
    at: [u32; STAGE_CELLS],
    /// The cells between the thread's cells (the block's threads), as columns and rows (`threads` =
    /// `step[1]` rows and `step[0]` columns).
    threads: u32,
    step: [u32; 2],
    /// The walk from the thread's first cell, and from its first cell beyond its registers (worked
    /// out once, not per plane).
    start: Walk,
    tail: Walk,
}

/// A walk over one thread's cells of the tile, every `threads`-th from its first, by column and row
/// (no division per cell).
#[derive(Clone, Copy, Debug)]
struct Walk {
    cell: u32,
    cx: u32,
    cy: u32,
}

impl Walk {
    #[inline(always)]
    fn advance(&mut self, stage: &Stage, pitch: u32) {
        self.cell += stage.threads;
        self.cx += stage.step[0];
        self.cy += stage.step[1];
        if self.cx >= pitch {
            self.cx -= pitch;
            self.cy += 1;
        }
    }
}

/// The numbers a block's threads share in a temporally blocked launch, the same for each of them.
#[derive(Clone, Copy, Debug)]
pub struct TemporalBlock {
    /// The live range (whose points are computed) and the output's bounds (x, y: those it writes).
    range: LoopRange,
    out_begin: [u32; 2],
    out_end: [u32; 2],
    steps: u32,
    /// The block's output tile starts at `origin` (x, y); its z slab is `k0 .. k1`.
    origin: [u32; 2],
    k0: i32,
    k1: i32,
    /// Tile cells per row and per plane, planes per ring, and the update's z radius.
    pitch: u32,
    cells: u32,
    planes: u32,
    rz: u32,
    /// The tile (x, y), and how far apart one thread's cells lie in a phase (the block's threads on a
    /// GPU, 1 for the CPU engine's one thread per tile).
    tile: [u32; 2],
    stride: [u32; 2],
}

impl TemporalBlock {
    /// The block of thread `c` (only its block index and shape count) of a launch over `pass`: a tile
    /// of the block's shape, each thread taking every block-shape-th cell.
    #[inline(always)]
    pub fn new<F: StencilUpdate3D>(
        f: &F,
        pass: &PassRange,
        march: u32,
        steps: u32,
        c: ThreadCoords,
    ) -> Self {
        Self::tiled(f, pass, c.block_dim, march, steps, c.block_idx, c.block_dim)
    }

    /// Tile `block_idx` of shape `tile` over `pass.out`, its threads `stride` apart: the CPU
    /// engine's one thread per tile has stride 1 (and thread index 0).
    #[inline(always)]
    pub fn tiled<F: StencilUpdate3D>(
        f: &F,
        pass: &PassRange,
        tile: [u32; 2],
        march: u32,
        steps: u32,
        block_idx: [u32; 3],
        stride: [u32; 2],
    ) -> Self {
        let _ = f;
        let (r, out) = (&pass.live, &pass.out);
        let [rx, ry, rz] = F::RADIUS;
        let [bx, by] = tile;
        let origin = [
            out.begin[0] + block_idx[0] * bx,
            out.begin[1] + block_idx[1] * by,
        ];
        let slab = ThreadCoords {
            block_idx,
            block_dim: tile,
            thread_idx: [0, 0],
        };
        let (k0, k1) = slab.slab(out, march);
        let pitch = bx + 2 * steps * rx;
        Self {
            range: *r,
            out_begin: [out.begin[0], out.begin[1]],
            out_end: [out.end[0], out.end[1]],
            steps,
            origin,
            k0: k0 as i32,
            k1: k1 as i32,
            pitch,
            cells: pitch * (by + 2 * steps * ry),
            planes: 2 * rz + STEP_PLANES as u32,
            rz,
            tile,
            stride,
        }
    }

    /// The z steps of the wavefront: at step `q` level `l` computes plane `q - l RADIUS[2]`, so level 0
    /// stages from `k0 - steps rz` and the last level ends at `k1 - 1`. Empty for an empty slab.
    #[inline(always)]
    pub fn wavefront(&self) -> core::ops::Range<i32> {
        let reach = (self.steps * self.rz) as i32;
        match self.k0 < self.k1 {
            true => self.k0 - reach..self.k1 + reach,
            false => 0..0,
        }
    }

    /// The planes level `l` holds (`lo .. hi`): those within `steps - l` radii of the slab, and
    /// within one radius of the range (the margin the level above reads).
    #[inline(always)]
    fn level_planes(&self, l: i32) -> (i32, i32) {
        let rz = self.rz as i32;
        let (t, r) = (self.steps as i32, &self.range);
        let lo = (self.k0 - (t - l) * rz).max(r.begin[2] as i32 - rz);
        let hi = (self.k1 + (t - l) * rz).min(r.end[2] as i32 + rz);
        (lo, hi)
    }

    /// Where tile cell `cell` lies in a plane (x + nx y), if level 0 holds it: within one radius of the
    /// range in x and y (the tile's own bounds hold the rest).
    #[inline(always)]
    fn staged_at<F: StencilUpdate3D>(&self, cell: u32) -> Option<u32> {
        match cell < self.cells {
            true => self.staged_xy::<F>(cell % self.pitch, cell / self.pitch),
            false => None,
        }
    }

    /// [`staged_at`](Self::staged_at) for the cell in column `cx` and row `cy` of the tile.
    #[inline(always)]
    fn staged_xy<F: StencilUpdate3D>(&self, cx: u32, cy: u32) -> Option<u32> {
        let [rx, ry, _] = F::RADIUS;
        let r = &self.range;
        let x = self.origin[0] + cx;
        let y = self.origin[1] + cy;
        // The tile starts `steps` radii before the origin: compare before subtracting.
        let (ox, oy) = (self.steps * rx, self.steps * ry);
        let inside = x + rx >= r.begin[0] + ox
            && x < r.end[0] + rx + ox
            && y + ry >= r.begin[1] + oy
            && y < r.end[1] + ry + oy;
        inside.then(|| (x - ox) + r.n[0] * (y - oy))
    }

    /// Thread `c`'s staging cells: every `threads`-th cell of the tile from its linear index.
    #[inline(always)]
    pub fn stage<F: StencilUpdate3D>(&self, c: ThreadCoords) -> Stage {
        let threads = self.stride[0] * self.stride[1];
        let first = c.thread_idx[0] + self.stride[0] * c.thread_idx[1];
        let mut at = [NO_CELL; STAGE_CELLS];
        for (j, a) in at.iter_mut().enumerate() {
            *a = self
                .staged_at::<F>(first + j as u32 * threads)
                .unwrap_or(NO_CELL);
        }
        let walk = |cell: u32| Walk {
            cell,
            cx: cell % self.pitch,
            cy: cell / self.pitch,
        };
        Stage {
            at,
            threads,
            step: [threads % self.pitch, threads / self.pitch],
            start: walk(first),
            tail: walk(first + STAGE_CELLS as u32 * threads),
        }
    }

    /// Loads the input's plane `q` at `stage`'s cells into `values`, if level 0 holds it.
    #[inline(always)]
    fn load<F: StencilUpdate3D>(
        &self,
        f: &F,
        stage: &Stage,
        values: &mut [F::Real; STAGE_CELLS],
        q: i32,
    ) {
        let (lo, hi) = self.level_planes(0);
        if q < lo || q >= hi {
            return;
        }
        let base = q as usize * self.range.n[0] as usize * self.range.n[1] as usize;
        for (v, &at) in values.iter_mut().zip(&stage.at) {
            if at != NO_CELL {
                *v = f.input().get(base + at as usize);
            }
        }
    }

    /// Stores plane `q` into ring 0: `values`, loaded for `stage` from plane `q`, then the thread's
    /// cells beyond its registers straight from the input.
    ///
    /// # Safety
    /// As for [`phase`](Self::phase); `stage` is this thread's.
    #[inline(always)]
    unsafe fn store<F: StencilUpdate3D>(
        &self,
        f: &F,
        shared: SharedPtr<F::Real>,
        stage: &Stage,
        values: &[F::Real; STAGE_CELLS],
        q: i32,
    ) {
        let (lo, hi) = self.level_planes(0);
        if q < lo || q >= hi {
            return;
        }
        let cells = self.cells as usize;
        let plane = shared.wrapping_add(q.rem_euclid(self.planes as i32) as usize * cells);
        for (j, (&v, &at)) in values.iter().zip(&stage.at).enumerate() {
            if at != NO_CELL {
                let cell = (stage.start.cell + j as u32 * stage.threads) as usize;
                // SAFETY: the cell lies in the tile and the slot in ring 0.
                unsafe { plane.wrapping_add(cell).write(v) };
            }
        }
        let base = q as usize * self.range.n[0] as usize * self.range.n[1] as usize;
        let mut w = stage.tail;
        while w.cell < self.cells {
            if let Some(at) = self.staged_xy::<F>(w.cx, w.cy) {
                let v = f.input().get(base + at as usize);
                // SAFETY: as above.
                unsafe { plane.wrapping_add(w.cell as usize).write(v) };
            }
            w.advance(stage, self.pitch);
        }
    }

    /// The whole pass for the thread of `stage`: per wavefront step its planes staged, then each level,
    /// `barrier` after each phase (the block's barrier on a GPU; nothing for the CPU engine's one
    /// thread a tile).
    ///
    /// # Safety
    /// As for [`phase`](Self::phase), `barrier` being that barrier.
    #[inline(always)]
    pub unsafe fn run<F: StencilUpdate3D>(
        &self,
        f: &F,
        shared: SharedPtr<F::Real>,
        stage: &Stage,
        barrier: impl Fn(),
    ) {
        for q in self.wavefront().step_by(STEP_PLANES) {
            // SAFETY (both): the caller's; `q` is the block's, so every thread runs every phase.
            unsafe { self.stage_planes(f, shared, stage, q) };
            barrier();
            for level in 1..=self.steps {
                unsafe { self.level(f, shared, stage, q, level) };
                barrier();
            }
        }
    }

    /// Stages the input's planes `q .. q + STEP_PLANES` into ring 0 (those level 0 holds): this
    /// thread's registers' worth of each loaded before any is stored, so that they are in flight
    /// together, then the cells beyond its registers.
    ///
    /// # Safety
    /// As for [`phase`](Self::phase); `stage` is this thread's.
    #[inline(always)]
    pub unsafe fn stage_planes<F: StencilUpdate3D>(
        &self,
        f: &F,
        shared: SharedPtr<F::Real>,
        stage: &Stage,
        q: i32,
    ) {
        // Named sets, loaded in turn and stored in turn: a loop over an array of them left it on
        // the stack.
        let [mut v0, mut v1, mut v2, mut v3] = [[F::Real::ZERO; STAGE_CELLS]; STEP_PLANES];
        self.load(f, stage, &mut v0, q);
        self.load(f, stage, &mut v1, q + 1);
        self.load(f, stage, &mut v2, q + 2);
        self.load(f, stage, &mut v3, q + 3);
        // SAFETY (all four): the caller's.
        unsafe {
            self.store(f, shared, stage, &v0, q);
            self.store(f, shared, stage, &v1, q + 1);
            self.store(f, shared, stage, &v2, q + 2);
            self.store(f, shared, stage, &v3, q + 3);
        }
    }

    /// Level `level` (1 to `steps`) of wavefront step `q` for the thread of `stage`:
    /// [`phase`](Self::phase) for each of the step's planes.
    ///
    /// # Safety
    /// As for [`phase`](Self::phase).
    #[inline(always)]
    pub unsafe fn level<F: StencilUpdate3D>(
        &self,
        f: &F,
        shared: SharedPtr<F::Real>,
        stage: &Stage,
        q: i32,
        level: u32,
    ) {
        for i in 0..STEP_PLANES as i32 {
            // SAFETY: the caller's; a level reads the level below only within its radius of the
            // planes it computes, which the ring of `2 rz + STEP_PLANES` planes holds.
            unsafe { self.phase(f, shared, stage, q + i, level) };
        }
    }

    /// Phase `phase` (1 to `steps`) of wavefront step `q` for the thread of `stage`: it computes its
    /// cells of level `phase` at plane `q - phase rz` from ring `phase - 1` (ring 0 holds the staged
    /// input), into ring `phase` or, for the last level, into the output. Level `l` spans the cells
    /// within `steps - l` radii of the output tile and within one radius of the range; those outside
    /// the range keep the input's values.
    ///
    /// # Safety
    /// `shared` holds [`temporal_shared_bytes`] for the launch, which every thread of the block shares;
    /// the phases run in order with a barrier between each, every thread taking part.
    #[inline(always)]
    pub unsafe fn phase<F: StencilUpdate3D>(
        &self,
        f: &F,
        shared: SharedPtr<F::Real>,
        stage: &Stage,
        q: i32,
        phase: u32,
    ) {
        let [rx, ry, rz] = F::RADIUS;
        let l = phase as i32;
        let r = &self.range;
        let p = q - l * rz as i32;
        let (lo, hi) = self.level_planes(l);
        let last = phase == self.steps;
        if p < lo || p >= hi || (last && (p < self.k0 || p >= self.k1)) {
            return;
        }
        // In tile cells (cell 0 is the point `origin - steps radii`, which may lie before the
        // array): the level's span `a .. b` and the range's `inside`, each clipped as the other needs.
        let [rx, ry] = [rx as i32, ry as i32];
        let (t, k) = (self.steps as i32, (self.steps - phase) as i32);
        let [tx, ty] = self.tile.map(|v| v as i32);
        let [gx, gy] = self.origin.map(|v| v as i32);
        let (ox, oy) = (gx - t * rx, gy - t * ry);
        let rb = r.begin.map(|v| v as i32);
        let re = r.end.map(|v| v as i32);
        let clip = |a: i32, b: i32, lo: i32, hi: i32, o: i32| (a.max(lo) - o, b.min(hi) - o);
        let (wb, we) = (
            self.out_begin.map(|v| v as i32),
            self.out_end.map(|v| v as i32),
        );
        let ((ax, bx), (ay, by)) = match last {
            true => (
                clip(gx, gx + tx, wb[0], we[0], ox),
                clip(gy, gy + ty, wb[1], we[1], oy),
            ),
            false => (
                clip(gx - k * rx, gx + tx + k * rx, rb[0] - rx, re[0] + rx, ox),
                clip(gy - k * ry, gy + ty + k * ry, rb[1] - ry, re[1] + ry, oy),
            ),
        };
        let inside_z = p >= rb[2] && p < re[2];
        let (ix0, ix1, iy0, iy1) = (rb[0] - ox, re[0] - ox, rb[1] - oy, re[1] - oy);
        let slot = p.rem_euclid(self.planes as i32) as usize;
        let cells = self.cells as usize;
        let ring = |level: i32| shared.wrapping_add(level as usize * self.planes as usize * cells);
        // This level's plane (not for the last level, which writes the output) and the level below.
        let dst = ring(l).wrapping_add(slot * cells);
        let below = ring(l - 1);
        let mut idx = ArrayIndex3D::new(r.n);
        let mut w = stage.start;
        while w.cell < self.cells {
            let (cx, cy) = (w.cx as i32, w.cy as i32);
            if cx >= ax && cx < bx && cy >= ay && cy < by {
                idx.set((ox + cx) as u32, (oy + cy) as u32, p as u32);
                let cell = w.cell as usize;
                let inside = inside_z && cx >= ix0 && cx < ix1 && cy >= iy0 && cy < iy1;
                if inside {
                    let src = Ring::<F::Real> {
                        centre: below.wrapping_add(cell),
                        slot,
                        planes: self.planes as usize,
                        cells,
                        pitch: self.pitch as usize,
                    };
                    if last {
                        f.update_with(&idx, &src);
                    } else {
                        let v = f.value_with(&idx, &src);
                        // SAFETY: the cell and slot lie in ring `l` (not the last level: its
                        // cells are all inside the range).
                        unsafe { dst.wrapping_add(cell).write(v) };
                    }
                } else {
                    // A margin point the level above reads: the input's value, as single steps
                    // leave it.
                    let v = f.input().get(idx.ix());
                    // SAFETY: as above.
                    unsafe { dst.wrapping_add(cell).write(v) };
                }
            }
            w.advance(stage, self.pitch);
        }
    }
}

/// The level below, as the point being computed reads it: ring cells of its plane (`slot`) and the
/// planes above and below.
struct Ring<T: Copy> {
    /// The point's cell in slot 0 of the ring.
    centre: SharedPtr<T>,
    slot: usize,
    planes: usize,
    cells: usize,
    pitch: usize,
}

impl<T: Copy> Source3D<T> for Ring<T> {
    #[inline(always)]
    fn at<const DX: i32, const DY: i32, const DZ: i32>(&self, _: &ArrayIndex3D) -> T {
        // `|DZ|` is within the radius, below the ring's planes: one wrap at most.
        let s = self.slot as isize + DZ as isize;
        let p = self.planes as isize;
        let s = if s < 0 {
            s + p
        } else if s >= p {
            s - p
        } else {
            s
        };
        let off = s * self.cells as isize + DY as isize * self.pitch as isize + DX as isize;
        // SAFETY: the phase computes only cells whose neighbours within the radius lie in the tile
        // (it is widened by a radius per level above), and the ring holds the level's planes there.
        unsafe { self.centre.wrapping_offset(off).read() }
    }
}
