//! Temporal blocking: `steps` time steps of a [`StencilUpdate3D`] in one pass over memory, each point
//! read once and written once per pass (2.5-D blocking with a z wavefront, as in AN5D, Matsumura et
//! al., CGO 2020). A block owns an xy tile of the output and marches its z slab; per z step it
//! stages the input's next plane of the tile widened by `steps` radii, then computes each time level
//! one plane behind the level below (the wavefront) on a tile one radius narrower than that level's,
//! recomputing the halo its neighbours also compute instead of exchanging it. The intermediate levels
//! live in shared memory, a ring of `2 RADIUS[2] + 1` planes per level; only the last level is
//! written to the output.
//!
//! Each point of each level is computed by the update's own [`value_with`](StencilUpdate3D::value_with)
//! from the level below, read through a [`Source3D`] over the ring (so any offset within the radius,
//! diagonal ones included), and points outside the range keep the input's values at every level: the
//! result is that of `steps` single steps to the bit, provided the margin holds the same values in
//! both fields the single steps would swap between (the caller's boundary condition).
//!
//! The block's threads are stateless between its barriers (everything a phase needs is in shared
//! memory or recomputed from the step and the thread's coordinates), so the launch emulator runs a
//! phase for every thread in turn between barriers.
//!
//! Not yet tuned or measured on a GPU (issue 37): this is the exact, general form the faster ones
//! (the levels' own columns in registers for star-shaped updates) are checked against.

use super::{ArrayIndex3D, LoopRange, Source3D, StencilUpdate3D, ThreadCoords};
use crate::device::shared::SharedPtr;
use crate::device::thread::sync_threads;

/// The most steps one temporally blocked pass advances.
pub const MAX_TEMPORAL_STEPS: u32 = 8;

/// Bytes of dynamic shared memory a temporally blocked launch of `steps` steps with `block` threads
/// (x, y) needs for an update of `radius` with `elem_bytes`-byte elements: the rings of levels
/// `0 .. steps` (the last level goes to the output), `2 radius[2] + 1` planes each, of the block's tile
/// widened by `steps` radii on every side.
pub const fn temporal_shared_bytes(
    block: [u32; 2],
    radius: [u32; 3],
    steps: u32,
    elem_bytes: usize,
) -> usize {
    let w = (block[0] + 2 * steps * radius[0]) as usize;
    let h = (block[1] + 2 * steps * radius[1]) as usize;
    steps as usize * (2 * radius[2] as usize + 1) * w * h * elem_bytes
}

/// Runs `steps` steps of `f` over `r` (1 to [`MAX_TEMPORAL_STEPS`]): reads `f.input()`, writes the last
/// step into `f.output()` (a field other than the input), with [`temporal_shared_bytes`] of dynamic
/// shared memory. The grid covers the range as the tiled variant's does (x and y by the block, z by
/// `march`).
#[inline(always)]
pub fn device_loop3d_temporal<F: StencilUpdate3D>(f: &F, r: &LoopRange, march: u32, steps: u32) {
    let shared = SharedPtr::dynamic();
    let block = TemporalBlock::new(f, r, march, steps, ThreadCoords::current());
    for q in block.wavefront() {
        for phase in 0..=steps {
            // SAFETY: launched with `temporal_shared_bytes` of dynamic shared memory, and every
            // thread of the block runs every phase of every step, with a barrier after each.
            unsafe { block.phase(f, shared, q, phase, ThreadCoords::current()) };
            sync_threads();
        }
    }
}

/// The numbers a block's threads share in a temporally blocked launch, the same for each of them.
#[derive(Clone, Copy, Debug)]
pub struct TemporalBlock {
    range: LoopRange,
    steps: u32,
    /// The block's output tile starts at `origin` (x, y); its z slab is `k0 .. k1`.
    origin: [u32; 2],
    k0: i32,
    k1: i32,
    /// Tile cells per row and per plane, and planes per ring.
    pitch: u32,
    cells: u32,
    planes: u32,
    /// The tile (x, y), and how far apart one thread's cells lie in a phase (the block's threads on a
    /// GPU, 1 for the CPU engine's one thread per tile).
    tile: [u32; 2],
    stride: [u32; 2],
}

impl TemporalBlock {
    /// The block of thread `c` (only its block index and shape count) of a launch over `r`: a tile of
    /// the block's shape, each thread taking every block-shape-th cell.
    #[inline(always)]
    pub fn new<F: StencilUpdate3D>(
        f: &F,
        r: &LoopRange,
        march: u32,
        steps: u32,
        c: ThreadCoords,
    ) -> Self {
        Self::tiled(f, r, c.block_dim, march, steps, c.block_idx, c.block_dim)
    }

    /// Tile `block_idx` of shape `tile` over `r`, its threads `stride` apart: the CPU engine's one
    /// thread per tile has stride 1 (and thread index 0).
    #[inline(always)]
    pub fn tiled<F: StencilUpdate3D>(
        f: &F,
        r: &LoopRange,
        tile: [u32; 2],
        march: u32,
        steps: u32,
        block_idx: [u32; 3],
        stride: [u32; 2],
    ) -> Self {
        let _ = f;
        let [rx, ry, rz] = F::RADIUS;
        let [bx, by] = tile;
        let origin = [
            r.begin[0] + block_idx[0] * bx,
            r.begin[1] + block_idx[1] * by,
        ];
        let slab = ThreadCoords {
            block_idx,
            block_dim: tile,
            thread_idx: [0, 0],
        };
        let (k0, k1) = slab.slab(r, march);
        let pitch = bx + 2 * steps * rx;
        Self {
            range: *r,
            steps,
            origin,
            k0: k0 as i32,
            k1: k1 as i32,
            pitch,
            cells: pitch * (by + 2 * steps * ry),
            planes: 2 * rz + 1,
            tile,
            stride,
        }
    }

    /// The z steps of the wavefront: at step `q` level `l` computes plane `q - l RADIUS[2]`, so level 0
    /// stages from `k0 - steps rz` and the last level ends at `k1 - 1`. Empty for an empty slab.
    #[inline(always)]
    pub fn wavefront(&self) -> core::ops::Range<i32> {
        let reach = self.steps as i32 * (self.planes as i32 - 1) / 2;
        match self.k0 < self.k1 {
            true => self.k0 - reach..self.k1 + reach,
            false => 0..0,
        }
    }

    /// Phase `phase` (0 to `steps`) of wavefront step `q` for thread `c`: phase 0 stages the input's
    /// plane `q` into ring 0; phase `l` computes level `l` at plane `q - l rz` from ring `l - 1`, into
    /// ring `l` or, for the last level, into the output.
    ///
    /// # Safety
    /// `shared` holds [`temporal_shared_bytes`] for the launch, which every thread of the block shares;
    /// the phases run in order with a barrier between each, every thread taking part.
    #[inline(always)]
    pub unsafe fn phase<F: StencilUpdate3D>(
        &self,
        f: &F,
        shared: SharedPtr<F::Real>,
        q: i32,
        phase: u32,
        c: ThreadCoords,
    ) {
        let [rx, ry, rz] = F::RADIUS.map(|v| v as i32);
        let l = phase as i32;
        let t = self.steps as i32;
        let r = &self.range;
        let p = q - l * rz;
        // The planes this level must hold: within `steps - l` radii of the slab, and of the range.
        let lo = (self.k0 - (t - l) * rz).max(r.begin[2] as i32 - rz);
        let hi = (self.k1 + (t - l) * rz).min(r.end[2] as i32 + rz);
        let last = phase == self.steps;
        if p < lo || p >= hi || (last && (p < self.k0 || p >= self.k1)) {
            return;
        }
        // Tile cell (0, 0) is the point `origin - steps radii`; level `l` spans cells within
        // `steps - l` radii of the output tile, and within one radius of the range (the margin it
        // reads); the last level only the tile's points inside the range.
        let x0 = self.origin[0] as i32 - t * rx;
        let y0 = self.origin[1] as i32 - t * ry;
        let span = |lo_pt: i32, hi_pt: i32, origin: i32, rad: i32, begin: u32, end: u32| {
            let (b, e) = match last {
                true => (begin as i32, end as i32),
                false => (begin as i32 - rad, end as i32 + rad),
            };
            (lo_pt.max(b) - origin, hi_pt.min(e) - origin)
        };
        let [bx, by] = self.tile.map(|v| v as i32);
        let [sx, sy] = self.stride.map(|v| v as i32);
        let (cx0, cx1) = span(
            self.origin[0] as i32 - (t - l) * rx,
            self.origin[0] as i32 + bx + (t - l) * rx,
            x0,
            rx,
            r.begin[0],
            r.end[0],
        );
        let (cy0, cy1) = span(
            self.origin[1] as i32 - (t - l) * ry,
            self.origin[1] as i32 + by + (t - l) * ry,
            y0,
            ry,
            r.begin[1],
            r.end[1],
        );
        let slot = p.rem_euclid(self.planes as i32) as usize;
        let cells = self.cells as usize;
        let ring = |level: i32| shared.wrapping_add(level as usize * self.planes as usize * cells);
        // This level's plane (not for the last level, which writes the output) and the level below.
        let dst = ring(l).wrapping_add(slot * cells);
        let below = ring(l - 1);
        let inside_z = p >= r.begin[2] as i32 && p < r.end[2] as i32;
        // The cells of a row this thread takes in `a .. b` (tile x): from the first at its offset.
        let (tx, ty) = (c.thread_idx[0] as i32, c.thread_idx[1] as i32);
        let first = |a: i32| a + (tx - a).rem_euclid(sx);
        // The row's inside points (tile x), where the level is computed; elsewhere the input is kept.
        let (ix0, ix1) = (r.begin[0] as i32 - x0, r.end[0] as i32 - x0);
        let mut idx = ArrayIndex3D::new(r.n);
        let mut cy = cy0 + ty;
        while cy < cy1 {
            let y = y0 + cy;
            let row = cy * self.pitch as i32;
            let row_inside = phase > 0 && inside_z && y >= r.begin[1] as i32 && y < r.end[1] as i32;
            let (a, b) = match row_inside {
                true => (ix0.max(cx0), ix1.min(cx1)),
                false => (cx1, cx1),
            };
            // The kept points left and right of the inside ones (the whole row where none is inside),
            // written out twice: a loop over an array of bounds put the array on the stack, and a
            // closure cost the CPU engine a quarter of its rate.
            macro_rules! keep {
                ($from:expr, $to:expr) => {
                    let to = $to;
                    let mut cx = first($from);
                    while cx < to {
                        idx.set((x0 + cx) as u32, y as u32, p as u32);
                        let v = f.input().get(idx.ix());
                        // SAFETY: the cell and slot lie in ring `l` (not the last level: its
                        // cells are all inside the range).
                        unsafe { dst.wrapping_add((row + cx) as usize).write(v) };
                        cx += sx;
                    }
                };
            }
            keep!(cx0, a.min(cx1));
            keep!(b.max(cx0).max(a), cx1);
            let mut cx = first(a);
            if cx < b {
                idx.set((x0 + cx) as u32, y as u32, p as u32);
            }
            while cx < b {
                let cell = (row + cx) as usize;
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
                    // SAFETY: as above.
                    unsafe { dst.wrapping_add(cell).write(v) };
                }
                cx += sx;
                idx.shift_i(sx as u32);
            }
            cy += sy;
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
