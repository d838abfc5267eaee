//! The force of the fluid on a body by momentum exchange (Ladd; Mei, Yu, Shyy and Luo 2002): every
//! link from a fluid cell into the body carries `c_q (f*_q + f_opp)` across it each step, and with
//! halfway bounce-back the population coming back is the one sent, `f_opp = f*_q`, so the body takes
//! `2 f*_q c_q` per link (full populations, `w_q` included). An interpolated link brings back
//! [`bouzidi`]'s population instead, made of the same step's populations as the next step makes it.
//!
//! The links of a body are listed once by the host, plane by plane; one body written here serves the
//! GPU entries and the CPU engine. Each plane's sum is left for the host, which adds them in z order:
//! a run gives the same bits every time (float atomics would not), split over ranks or not.
// The velocity, weight and population arrays run in lock step: index loops read best here.
#![allow(clippy::needless_range_loop)]

use super::storage::Storage;
use super::{bouzidi, opposite, weight, Scheme, C};
use crate::device::math::Real;
#[cfg_attr(not(target_arch = "nvptx64"), allow(unused_imports))]
use crate::device::thread;

/// A link from fluid cell `cell` into a body along population `q`, packed as `cell | q << 32`.
#[inline(always)]
pub const fn link(cell: u32, q: usize) -> u64 {
    cell as u64 | (q as u64) << 32
}

/// Threads per block of the force entries.
pub const FORCE_BLOCK: u32 = 256;

/// The arguments of a force sum over a body's links, plane by plane (the `lbm_force_*` entries' one
/// parameter; a block per plane).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Forces<S: Storage> {
    /// The lattice after a step: the post-collision populations (deviations `f - w`), `q * cells`.
    pub f: *const S,
    /// Populations per cell: the velocity set's (19 or 27), for the weights.
    pub q: u32,
    /// Cells of the lattice.
    pub cells: u64,
    /// The body's links ([`link`]), a plane's consecutive.
    pub links: *const u64,
    /// Where each plane's links start, and one past the last plane's.
    pub starts: *const u32,
    /// The [`Scheme`] of the step before, as `u32`: the in-place lattice keeps a population sent into a
    /// boundary in the sending cell's slot of the opposite direction, after either of its steps; the
    /// two-lattice one keeps it in its own slot. Where the interpolation's other population lies
    /// depends on the step too.
    pub scheme: u32,
    /// Per link, the wall's distance ([`Cuts`](super::Cuts): 0.5 bounces back halfway), or null for
    /// every link halfway.
    pub cuts: *const f32,
    /// Grid `[nx, ny, nz]` (periodic), for the interpolation's neighbours.
    pub dims: [u32; 3],
    /// Three sums per plane, `x, y, z`.
    pub partials: *mut f64,
}

impl<S: Storage> Forces<S> {
    /// The momentum link `i` carries into the body in one step.
    ///
    /// # Safety
    /// `links` holds link `i`, of a cell of the grid and a direction below `q` (19 or 27), and `cuts`,
    /// if not null, its distance; `f` holds `q * cells` populations.
    #[inline(always)]
    pub unsafe fn link(&self, i: usize) -> [f64; 3] {
        // SAFETY: the caller's contract.
        let l = unsafe { *self.links.add(i) };
        let (cell, k) = ((l & 0xffff_ffff) as usize, (l >> 32) as usize);
        let q = opposite(k);
        // SAFETY (the loads): cells of the grid, slots below `q`.
        let load = |slot: usize, cell: usize| unsafe {
            weight(self.q as usize, slot)
                + S::load(self.f, slot * self.cells as usize + cell).to_f64()
        };
        let ab = self.scheme == Scheme::Ab as u32;
        let sent = load(if ab { k } else { q }, cell);
        let d = match self.cuts.is_null() {
            true => 0.5,
            // SAFETY: as above.
            false => unsafe { *self.cuts.add(i) },
        };
        let back = if d == 0.5 {
            sent
        } else {
            // Where `interpolate` finds the other population when the next step reads it.
            let (slot, at) = match (d < 0.5, self.scheme) {
                (true, s) if s == Scheme::AaOdd as u32 => (k, cell),
                (true, _) => (if ab { k } else { q }, self.shifted(cell, k, -1)),
                (false, _) if ab => (q, cell),
                (false, _) => (k, self.shifted(cell, k, 1)),
            };
            bouzidi(d as f64, sent, load(slot, at))
        };
        [0, 1, 2].map(|a| (sent + back) * C[k][a] as f64)
    }

    /// The cell at `sign * c_k` from `cell`, wrapped periodically.
    #[inline(always)]
    fn shifted(&self, cell: usize, k: usize, sign: i32) -> usize {
        let [nx, ny, nz] = self.dims.map(|v| v as i64);
        let p = [
            cell as i64 % nx,
            cell as i64 / nx % ny,
            cell as i64 / (nx * ny),
        ];
        let at = |a: usize, n: i64| (p[a] + (sign * C[k][a]) as i64).rem_euclid(n);
        (at(0, nx) + nx * (at(1, ny) + ny * at(2, nz))) as usize
    }

    /// The sum over plane `group`'s links `first, first + stride, ...`: a thread's share (the whole
    /// plane's with `first = 0`, `stride = 1`).
    ///
    /// # Safety
    /// `starts` holds `group + 2` offsets into `links`, and the links are as [`link`](Self::link) needs.
    #[inline(always)]
    pub unsafe fn group(&self, group: u32, first: u32, stride: u32) -> [f64; 3] {
        // SAFETY: the caller's contract.
        let (start, end) = unsafe {
            (
                *self.starts.add(group as usize),
                *self.starts.add(group as usize + 1),
            )
        };
        let mut s = [0.0; 3];
        let mut i = start + first;
        while i < end {
            // SAFETY: i < end (the caller's contract).
            let f = unsafe { self.link(i as usize) };
            for a in 0..3 {
                s[a] += f[a];
            }
            i += stride;
        }
        s
    }
}

macro_rules! force_entries {
    ($($s:ty => $name:ident),*) => {$(
        crate::kernel! {
            /// Generated kernel entry: a block of [`FORCE_BLOCK`] threads per plane, three sums each.
            pub unsafe fn $name(d: Forces<$s>) {
                let group = thread::block_idx_x();
                let [x, y, z] = d.group(group, thread::thread_idx_x(), thread::block_dim_x());
                let total = crate::bicgstab::block_sum([x, y, z, 0.0]);
                if thread::thread_idx_x() == 0 {
                    for a in 0..3 {
                        *d.partials.add(3 * group as usize + a) = total[a];
                    }
                }
            }
        }
    )*};
}

force_entries!(f32 => lbm_force_f32, f64 => lbm_force_f64, super::Half => lbm_force_f16);

/// A storage type's force entry (a supertrait of [`Storage`], as [`StepEntry`](super::StepEntry)).
pub trait ForceEntry {
    /// The entry's name.
    const FORCE_ENTRY: &'static str;
}

impl ForceEntry for f32 {
    const FORCE_ENTRY: &'static str = "lbm_force_f32";
}
impl ForceEntry for f64 {
    const FORCE_ENTRY: &'static str = "lbm_force_f64";
}
impl ForceEntry for super::Half {
    const FORCE_ENTRY: &'static str = "lbm_force_f16";
}
