//! The CPU engine's temporally blocked pass: `T` steps of a [`StencilUpdate3D`] per pass over memory,
//! 2.5-D blocking with a z wavefront as the GPU's ([`TemporalBlock`]), in the form a core runs well.
//!
//! Each task owns an xy tile of the output and a slab of its planes. It marches z with a front: at
//! front `q`, level `l` (1 to `T`) computes its plane `q - (l - 1) rz` from the `2 rz + 1` planes of
//! level `l - 1` around it, which the front has just completed. Level 0 is the input field itself and
//! level `T` the output; the levels between live in rings of `2 rz + 1` planes of the tile widened by
//! `T - 1` radii, in a scratch of the thread's own that stays in the core's cache. Level `l` covers the
//! output tile widened by `T - l` radii (clipped to the array), recomputing the halo its neighbours
//! also compute, as the GPU's blocks do.
//!
//! A row is computed as one loop over x of the update's own
//! [`value_with`](StencilUpdate3D::value_with), its source a row pointer per plane: no per-point
//! bookkeeping, and the loop vectorises where the update does. Points outside the pass's live range
//! copy the level below, so they keep the input's values: the result is that of `T` single steps to
//! the bit (the update's arithmetic is the same), under the margin condition of [`PassRange`].
//!
//! Not the GPU's code run by one thread ([`emulate3d_temporal`](super::emulate3d_temporal) does that,
//! for the tests): that schedule's per-cell index work, made for a block of threads, ran a fifth of
//! the single step's rate on a CPU (docs/benchmarks/history.md).
//!
//! [`TemporalBlock`]: lattice_gpu_kernels::stencil::TemporalBlock

use lattice_gpu_kernels::stencil::{
    ArrayIndex3D, GpuEntry, LoopRange, PassRange, Source3D, StencilUpdate3D, ZQUEUE_MAX_RADIUS,
};
use rayon::prelude::*;

use super::vectors::{avx2, has_avx2_fma};
use crate::error::{Error, Result};

/// Bytes of a task's rings: within a core's L2 (1 MB and more on current x86 servers), beside the
/// input's planes streaming through it.
pub const HOST_RING_BYTES: usize = 512 << 10;

/// Rows of a task's tile in y, at most: the halo it recomputes is `T - 1` radii a side, an eighth
/// of 32 rows at three steps; more rows would make fewer tasks.
const MAX_ROWS: u32 = 32;

/// Fewest rows: fewer would recompute more halo rows than the tile holds (`T - 1` radii each side).
const MIN_ROWS: u32 = 8;

/// The slot of a row source's plane `p`: slots `MID - rz ..= MID + rz` hold planes `p - rz ..= p + rz`,
/// so each read's slot is a constant.
const MID: usize = ZQUEUE_MAX_RADIUS as usize;
const CAP: usize = 2 * MID + 1;

/// Fewest planes in a task's slab: each slab recomputes `T - l` z radii at both ends of level `l`.
const MIN_SLAB: u32 = 16;

/// Where a level's values lie: plane `p`'s point `(i, j)` at `base + (p % slots) plane + j pitch + i`
/// (the origin folded into `base`; `slots` 0 for a whole field, whose planes do not wrap).
#[derive(Clone, Copy)]
struct Level<T> {
    base: *mut T,
    plane: usize,
    slots: usize,
    pitch: usize,
}

impl<T: Copy> Level<T> {
    /// A whole field of `n` points.
    fn field(base: *mut T, n: [u32; 3]) -> Self {
        Self {
            base,
            plane: n[0] as usize * n[1] as usize,
            slots: 0,
            pitch: n[0] as usize,
        }
    }

    /// The point `(0, j)` of plane `p`: an address to add `i` to, out of bounds where `(0, j)` lies
    /// outside the ring's tile (hence wrapping).
    #[inline(always)]
    fn row(&self, p: u32, j: u32) -> *mut T {
        let slot = match self.slots {
            0 => p as usize,
            s => p as usize % s,
        };
        self.base
            .wrapping_add(slot * self.plane)
            .wrapping_add(j as usize * self.pitch)
    }
}

/// Level `l - 1` as level `l`'s point `i` of a row reads it: the row in each of the planes around.
struct RowSource<T> {
    rows: [*const T; CAP],
    pitch: isize,
    i: usize,
}

impl<T: Copy> Source3D<T> for RowSource<T> {
    #[inline(always)]
    fn at<const DX: i32, const DY: i32, const DZ: i32>(&self, _: &ArrayIndex3D) -> T {
        let row = self.rows[(MID as i32 + DZ) as usize];
        // SAFETY: the point lies within the update's radius of a live point, which the level below
        // holds: its region is this level's widened by a radius, and the margin keeps it in the array.
        unsafe {
            *row.wrapping_offset(DY as isize * self.pitch + DX as isize)
                .wrapping_add(self.i)
        }
    }
}

/// A half-open interval of points along an axis.
type Span = (u32, u32);

/// `s` widened by `w` each side, within `0 .. n`.
fn widen(s: Span, w: u32, n: u32) -> Span {
    (s.0.saturating_sub(w), (s.1 + w).min(n))
}

/// The box of output points each task of the CPU engine's pass of `steps` steps of `F` over `out`
/// takes: whole rows in x, whose long runs the hardware prefetcher streams (tiles of 128 points
/// ran the single step at half its rate); as many rows in y as keep its rings within
/// [`HOST_RING_BYTES`], from [`MIN_ROWS`] to [`MAX_ROWS`]; and a slab of z that makes four tasks a
/// thread, no thinner than [`MIN_SLAB`] (all planes where there are fewer).
pub(crate) fn host_tile<F: StencilUpdate3D>(out: &LoopRange, steps: u32) -> [u32; 3] {
    let ext = out.extent();
    let r = F::RADIUS;
    let width = (ext[0] + 2 * (steps - 1) * r[0]) as usize;
    let ring_row =
        (steps as usize - 1) * (2 * r[2] as usize + 1) * width * core::mem::size_of::<F::Real>();
    let halo = 2 * (steps - 1) * r[1];
    let rows = match ring_row {
        0 => MAX_ROWS,
        b => ((HOST_RING_BYTES / b) as u32).saturating_sub(halo),
    }
    .clamp(MIN_ROWS, MAX_ROWS);
    let tiles = ext[1].div_ceil(rows).max(1);
    let want = (4 * rayon::current_num_threads() as u32).div_ceil(tiles);
    let slabs = want.min(ext[2] / MIN_SLAB).max(1);
    [ext[0].max(1), rows, ext[2].div_ceil(slabs).max(1)]
}

/// Runs `steps` steps of `f` over `pass` as the CPU engine does, one rayon task per `tile` (x, y, z)
/// points of `pass.out` ([`HostLoopEngine`](super::HostLoopEngine) takes whole rows, as many as
/// keep the rings within [`HOST_RING_BYTES`], and slabs that make four tasks a thread): reads
/// `f.input()`, writes the last step into `f.output()` at the points of `pass.out`.
/// Fails on ranges without the update's margin or not nested, steps out of `1 ..=`
/// [`MAX_TEMPORAL_STEPS`], an update without a temporal entry (which the GPU needs), an empty tile,
/// or a z radius beyond [`ZQUEUE_MAX_RADIUS`].
///
/// [`MAX_TEMPORAL_STEPS`]: lattice_gpu_kernels::stencil::MAX_TEMPORAL_STEPS
pub fn host_pass<F: StencilUpdate3D + GpuEntry>(
    f: &F,
    pass: &PassRange,
    steps: u32,
    tile: [u32; 3],
) -> Result<()> {
    super::check_pass(pass, &F::RADIUS, F::ENTRY)?;
    // The GPU engine's checks, so that code that runs here runs there.
    super::device::temporal_entry::<F>(steps)?;
    if tile.contains(&0) {
        return Err(Error::InvalidSetting(format!(
            "a blocked pass's task covers {tile:?} points: give it at least one along each axis"
        )));
    }
    if F::RADIUS[2] > ZQUEUE_MAX_RADIUS {
        return Err(Error::InvalidSetting(format!(
            "the CPU engine's blocked passes read z radii up to {ZQUEUE_MAX_RADIUS}, and {} reads {}: \
             run it in single steps (--temporal 1)",
            F::ENTRY,
            F::RADIUS[2]
        )));
    }
    let out = &pass.out;
    let ext = out.extent();
    if ext.contains(&0) {
        return Ok(());
    }
    let g = [0, 1, 2].map(|a| ext[a].div_ceil(tile[a]));
    (0..g[0] * g[1] * g[2]).into_par_iter().for_each(|t| {
        let b = [t % g[0], t / g[0] % g[1], t / (g[0] * g[1])];
        let lo: [u32; 3] = core::array::from_fn(|a| out.begin[a] + b[a] * tile[a]);
        let hi: [u32; 3] = core::array::from_fn(|a| (lo[a] + tile[a]).min(out.end[a]));
        // The task calls nothing that could run another of the pass's tasks on this thread, so
        // the scratch is borrowed once.
        RINGS.with_borrow_mut(|scratch| {
            let task = TileTask::new(f, pass, steps, lo, hi, scratch);
            // AVX2 made the passes of three and four steps 1.2x faster on a 2-core AMD EPYC.
            match has_avx2_fma() {
                // SAFETY: the CPU has AVX2 and FMA.
                true => unsafe { run_avx2(&task, f) },
                false => task.run(f),
            }
        });
    });
    Ok(())
}

thread_local! {
    /// Each thread's rings, kept from task to task and pass to pass: a task's own would be fresh
    /// pages (hundreds of kilobytes), which the kernel faults in and zeroes every time. Words of
    /// 8 bytes, aligned for any `Real`; every cell a task reads it has written first.
    static RINGS: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

avx2! {
    /// [`TileTask::run`] with AVX2 and FMA.
    fn run_avx2<F: StencilUpdate3D>(task: &TileTask<'_, F>, f: &F) {
        task.run(f)
    }
}

/// One task: an output box's levels and their spans.
struct TileTask<'a, F: StencilUpdate3D> {
    pass: &'a PassRange,
    steps: u32,
    /// Levels `0 ..= steps`: the input, the rings, the output.
    levels: Vec<Level<F::Real>>,
    /// Per level, the spans it covers in x, y and z (level 0's unused).
    spans: Vec<[Span; 3]>,
    /// The rings' storage, which `levels` points into.
    _rings: &'a mut Vec<u64>,
}

impl<'a, F: StencilUpdate3D> TileTask<'a, F> {
    /// The task of the output box `lo .. hi`, its rings in `scratch` (grown as they need).
    fn new(
        f: &F,
        pass: &'a PassRange,
        steps: u32,
        lo: [u32; 3],
        hi: [u32; 3],
        scratch: &'a mut Vec<u64>,
    ) -> Self {
        let n = pass.live.n;
        let r = F::RADIUS;
        let spans: Vec<[Span; 3]> = (0..=steps)
            .map(|l| core::array::from_fn(|a| widen((lo[a], hi[a]), (steps - l) * r[a], n[a])))
            .collect();
        // Every ring holds level 1's tile, the widest between.
        let [sx, sy, _] = spans[1];
        let (w, h) = ((sx.1 - sx.0) as usize, (sy.1 - sy.0) as usize);
        let slots = 2 * r[2] as usize + 1;
        let rings_len = (steps as usize - 1) * slots * w * h;
        let words = (rings_len * core::mem::size_of::<F::Real>()).div_ceil(8);
        if scratch.len() < words {
            scratch.resize(words, 0);
        }
        const { assert!(core::mem::align_of::<F::Real>() <= 8) };
        let rings = scratch.as_mut_ptr() as *mut F::Real;
        // The input is only read (`Level` serves the rings and the output too).
        let mut levels = vec![Level::field(f.input().as_ptr() as *mut F::Real, n)];
        for l in 1..steps as usize {
            // The origin folded in: the ring's first point is (sx.0, sy.0).
            let start = rings.wrapping_add((l - 1) * slots * w * h);
            levels.push(Level {
                base: start.wrapping_sub(sx.0 as usize + sy.0 as usize * w),
                plane: w * h,
                slots,
                pitch: w,
            });
        }
        levels.push(Level::field(f.output().as_ptr(), n));
        Self {
            pass,
            steps,
            levels,
            spans,
            _rings: scratch,
        }
    }

    /// Marches the front through the box's planes, every level one plane a front.
    #[inline(always)]
    fn run(&self, f: &F) {
        let rz = F::RADIUS[2];
        let t = self.steps;
        let first = self.spans[1][2].0;
        let last = self.spans[t as usize][2].1 + (t - 1) * rz;
        for q in first..last {
            for l in 1..=t {
                let Some(p) = q.checked_sub((l - 1) * rz) else {
                    continue;
                };
                let [_, _, (z0, z1)] = self.spans[l as usize];
                if (z0..z1).contains(&p) {
                    self.plane(f, l as usize, p);
                }
            }
        }
    }

    /// Level `l`'s plane `p` over its span: live points from the level below by the update, the
    /// others copied from it.
    #[inline(always)]
    fn plane(&self, f: &F, l: usize, p: u32) {
        let (below, dst) = (self.levels[l - 1], self.levels[l]);
        let [(x0, x1), (y0, y1), _] = self.spans[l];
        let live = &self.pass.live;
        let rz = F::RADIUS[2];
        let live_p = (live.begin[2]..live.end[2]).contains(&p);
        let i0 = x0.max(live.begin[0]).min(x1);
        let i1 = x1.min(live.end[0]).max(i0);
        let mut idx = ArrayIndex3D::new(live.n);
        for j in y0..y1 {
            let d = dst.row(p, j);
            let b = below.row(p, j) as *const F::Real;
            let computes = live_p && (live.begin[1]..live.end[1]).contains(&j);
            // SAFETY (all): the row's span lies in both levels (the ring's tile holds every level's
            // span, a field every point), and the task's output box is its own.
            let copy = |a: u32, e: u32| unsafe {
                core::ptr::copy_nonoverlapping(
                    b.add(a as usize),
                    d.add(a as usize),
                    (e - a) as usize,
                )
            };
            if !computes {
                copy(x0, x1);
                continue;
            }
            copy(x0, i0);
            copy(i1, x1);
            let mut rows = [core::ptr::null(); CAP];
            for dz in 0..=2 * rz {
                rows[MID - rz as usize + dz as usize] = below.row(p + dz - rz, j);
            }
            let mut src = RowSource {
                rows,
                pitch: below.pitch as isize,
                i: 0,
            };
            for i in i0..i1 {
                idx.set(i, j, p);
                src.i = i as usize;
                // SAFETY: as above.
                unsafe { d.add(i as usize).write(f.value_with(&idx, &src)) };
            }
        }
    }
}
