//! One time step of one cell: gather the 19 populations (streaming and bounce-back), collide (TRT, BGK
//! being TRT with equal rates, Guo forcing), scatter. The streaming scheme is a compile-time parameter, so
//! the two-lattice and the in-place kernels share every arithmetic operation and give the same bits.
// The velocity, weight and population arrays run in lock step: index loops read best here.
#![allow(clippy::needless_range_loop)]

use super::storage::Storage;
use super::{opposite, tag, C, Q, W};
use crate::device::math::Real;
#[cfg_attr(not(target_arch = "nvptx64"), allow(unused_imports))]
use crate::device::thread;

/// Runs `$body` once for each population `$q` in `0..19` (or each odd `$q`), written out so that every
/// array index is a constant: LLVM does not unroll loops this large by itself, and a population array
/// indexed at run time lives in local memory, not registers.
macro_rules! each_q {
    ($q:ident => $body:block) => {
        each_q!(@ $q $body; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18)
    };
    (odd $q:ident => $body:block) => {
        each_q!(@ $q $body; 1 3 5 7 9 11 13 15 17)
    };
    (@ $q:ident $body:block; $($i:literal)*) => {
        $({
            let $q: usize = $i;
            $body
        })*
    };
}

/// How populations move between steps.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Two lattices: pull from the neighbours of lattice A, write the cell of lattice B (then swap).
    Ab = 0,
    /// One lattice, AA pattern, even step: read the cell's own populations, write them back reversed.
    AaEven = 1,
    /// One lattice, AA pattern, odd step: read reversed from the neighbours, write to the neighbours.
    AaOdd = 2,
}

/// The arguments of one time step over the whole grid (the kernel's one parameter).
///
/// Lattice `f` holds, before a step, the post-collision populations of the previous step (for
/// [`Scheme::Ab`] and [`Scheme::AaOdd`]) or the streamed ones (for [`Scheme::AaEven`]), as deviations
/// `f_q - w_q` in structure-of-arrays order. Wall cells are never written.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Step<S: Storage> {
    /// The lattice read (and, in place, written).
    pub f: *mut S,
    /// The lattice written by [`Scheme::Ab`]; unused in place.
    pub g: *mut S,
    /// One tag per cell ([`tag`]).
    pub tags: *const u8,
    /// Where to write density and velocity (`rho`, `ux`, `uy`, `uz`, each `cells` long), or null.
    pub moments: *mut S::Real,
    /// Grid `[nx, ny, nz]`.
    pub dims: [u32; 3],
    /// The relaxation rate of the symmetric part, `1 / tau`.
    pub omega: S::Real,
    /// The relaxation rate of the antisymmetric part (TRT); equal to `omega` for BGK.
    pub omega_minus: S::Real,
    /// Body force per unit volume (Guo forcing).
    pub force: [S::Real; 3],
    /// Velocity of the moving-wall cells.
    pub wall: [S::Real; 3],
}

// SAFETY: each population slot is read and written by one cell only within a step (see `cell`); the
// pointers are otherwise shared read-only.
unsafe impl<S: Storage> Send for Step<S> {}
// SAFETY: as above.
unsafe impl<S: Storage> Sync for Step<S> {}

/// The equilibrium of density `1 + drho` and velocity `u`, as deviations from the weights:
/// `w_q (drho + rho (3 c.u + 4.5 (c.u)^2 - 1.5 u.u))`.
#[inline(always)]
pub fn equilibrium<R: Real>(drho: R, u: [R; 3]) -> [R; Q] {
    let rho = R::ONE + drho;
    let c = |v: f64| R::from_f64(v);
    let usq = u[0] * u[0] + u[1] * u[1] + u[2] * u[2];
    let mut e = [R::ZERO; Q];
    each_q!(q => {
        let cu = dot(q, u);
        e[q] = c(W[q]) * (drho + rho * (c(3.0) * cu + c(4.5) * cu * cu - c(1.5) * usq));
    });
    e
}

/// `c_q . v`, with the zero terms left out at compile time.
#[inline(always)]
fn dot<R: Real>(q: usize, v: [R; 3]) -> R {
    let mut s = R::ZERO;
    for a in 0..3 {
        match C[q][a] {
            1 => s += v[a],
            -1 => s -= v[a],
            _ => {}
        }
    }
    s
}

impl<S: Storage> Step<S> {
    /// Cells of the grid.
    #[inline(always)]
    pub fn cells(&self) -> usize {
        self.dims[0] as usize * self.dims[1] as usize * self.dims[2] as usize
    }

    /// The bounce-back correction of a population entering along `q` from a wall of tag `t`:
    /// `6 w_q (c_q . u_wall)` for a moving wall (density 1), nothing otherwise.
    #[inline(always)]
    fn bounce(&self, v: S::Real, q: usize, t: u8) -> S::Real {
        if t & tag::MOVING_WALL != 0 {
            v + S::Real::from_f64(6.0 * W[q]) * dot(q, self.wall)
        } else {
            v
        }
    }

    /// One time step of cell `n` (`n < cells`) under `SCHEME` (a [`Scheme`] as `u32`).
    ///
    /// # Safety
    /// The pointers must cover the grid (`f`, and `g` for [`Scheme::Ab`]: `19 * cells` elements; `tags`:
    /// `cells`; `moments`, if not null: `4 * cells`), `g` must not overlap `f`, and no other step may run
    /// on them at the same time. Every cell of the grid may run at once: within a step each population slot
    /// is read and written by one cell only.
    #[inline(always)]
    pub unsafe fn cell<const SCHEME: u32>(&self, n: u32) {
        // SAFETY (all accesses below): indices are below `cells` per population; the caller's contract.
        let t = unsafe { *self.tags.add(n as usize) };
        if tag::is_wall(t) {
            return;
        }
        let [nx, ny, _] = self.dims;
        let cells = self.cells();
        let (x, r) = (n % nx, n / nx);
        let (y, z) = (r % ny, r / ny);
        let wrap = |v: u32, len: u32| {
            [
                if v == 0 { len - 1 } else { v - 1 },
                v,
                if v + 1 == len { 0 } else { v + 1 },
            ]
        };
        let xs = wrap(x, nx);
        let ys = wrap(y, ny).map(|v| v * nx);
        let zs = wrap(z, self.dims[2]).map(|v| v * nx * ny);
        // The cell at offset `sign * c_q`.
        let at = |q: usize, sign: i32| {
            let o = |a: usize| (sign * C[q][a] + 1) as usize;
            (xs[o(0)] + ys[o(1)] + zs[o(2)]) as usize
        };
        let near = t & tag::NEAR_WALL != 0;
        let wall_at = |m: usize| -> Option<u8> {
            if near {
                let tm = unsafe { *self.tags.add(m) };
                tag::is_wall(tm).then_some(tm)
            } else {
                None
            }
        };
        let n = n as usize;
        let (f, g) = (self.f, self.g);

        let mut p = [S::Real::ZERO; Q];
        each_q!(q => {
            p[q] = unsafe {
                if SCHEME == Scheme::AaEven as u32 {
                    // The odd step left populations that hit a wall here unchanged; the moving-wall
                    // correction is added on reading, as in the other schemes, so that f16 rounds the
                    // same value in all of them.
                    let v = S::load(f, q * cells + n);
                    match wall_at(at(q, -1)) {
                        Some(tw) => self.bounce(v, q, tw),
                        None => v,
                    }
                } else {
                    let src = at(q, -1);
                    // Entering from a wall: what this cell sent into it last step, reflected.
                    let (from, slot) = if SCHEME == Scheme::Ab as u32 {
                        (opposite(q), q)
                    } else {
                        (q, opposite(q))
                    };
                    match wall_at(src) {
                        Some(tw) => self.bounce(S::load(f, from * cells + n), q, tw),
                        None => S::load(f, slot * cells + src),
                    }
                }
            };
        });

        let out = self.collide(&p, n, cells);

        each_q!(q => {
            unsafe {
                if SCHEME == Scheme::Ab as u32 {
                    S::store(g, q * cells + n, out[q]);
                } else if SCHEME == Scheme::AaEven as u32 {
                    S::store(f, opposite(q) * cells + n, out[q]);
                } else {
                    let dst = at(q, 1);
                    match wall_at(dst) {
                        // Into a wall: it comes back to this cell as the opposite population.
                        Some(_) => S::store(f, opposite(q) * cells + n, out[q]),
                        None => S::store(f, q * cells + dst, out[q]),
                    }
                }
            }
        });
    }

    /// TRT collision with Guo forcing of the streamed populations `p` (deviations) of cell `n`; writes the
    /// moments if asked.
    #[inline(always)]
    fn collide(&self, p: &[S::Real; Q], n: usize, cells: usize) -> [S::Real; Q] {
        let c = |v: f64| S::Real::from_f64(v);
        let mut drho = S::Real::ZERO;
        each_q!(q => {
            drho += p[q];
        });
        let mut j = [S::Real::ZERO; 3];
        for a in 0..3 {
            each_q!(q => {
                match C[q][a] {
                    1 => j[a] += p[q],
                    -1 => j[a] -= p[q],
                    _ => {}
                }
            });
        }
        let rho = S::Real::ONE + drho;
        let inv = S::Real::ONE / rho;
        let force = self.force;
        let u = [0, 1, 2].map(|a| (j[a] + c(0.5) * force[a]) * inv);
        if !self.moments.is_null() {
            // SAFETY: `moments` covers 4 * cells (the step's contract).
            unsafe {
                *self.moments.add(n) = rho;
                for a in 0..3 {
                    *self.moments.add((a + 1) * cells + n) = u[a];
                }
            }
        }
        let e = equilibrium(drho, u);
        let (wp, wm) = (self.omega, self.omega_minus);
        // Guo's source, split into its symmetric part (relaxed with omega) and antisymmetric part.
        let uf = u[0] * force[0] + u[1] * force[1] + u[2] * force[2];
        let (kp, km) = (S::Real::ONE - c(0.5) * wp, S::Real::ONE - c(0.5) * wm);
        let mut out = [S::Real::ZERO; Q];
        out[0] = p[0] - wp * (p[0] - e[0]) - kp * c(3.0 * W[0]) * uf;
        each_q!(odd q => {
            let o = q + 1;
            let half = c(0.5);
            let sym = half * ((p[q] + p[o]) - (e[q] + e[o]));
            let anti = half * ((p[q] - p[o]) - (e[q] - e[o]));
            let cf = dot(q, force);
            let s_sym = kp * c(W[q]) * (c(9.0) * dot(q, u) * cf - c(3.0) * uf);
            let s_anti = km * c(3.0 * W[q]) * cf;
            out[q] = p[q] - wp * sym - wm * anti + s_sym + s_anti;
            out[o] = p[o] - wp * sym + wm * anti + s_sym - s_anti;
        });
        out
    }
}

/// A [`Step`] type with GPU kernel entries, one per [`Scheme`].
pub trait StepEntry {
    /// Entry names, indexed by `Scheme as usize`.
    const ENTRIES: [&'static str; 3];
}

macro_rules! step_entries {
    ($s:ty => $ab:ident, $even:ident, $odd:ident) => {
        step_entries!(@one $s, $ab, Scheme::Ab);
        step_entries!(@one $s, $even, Scheme::AaEven);
        step_entries!(@one $s, $odd, Scheme::AaOdd);
        impl StepEntry for Step<$s> {
            const ENTRIES: [&'static str; 3] =
                [stringify!($ab), stringify!($even), stringify!($odd)];
        }
    };
    (@one $s:ty, $name:ident, $scheme:expr) => {
        crate::kernel! {
            /// Generated kernel entry: one thread per cell.
            pub unsafe fn $name(s: Step<$s>) {
                let n = thread::index_1d();
                if n < s.cells() {
                    s.cell::<{ $scheme as u32 }>(n as u32)
                }
            }
        }
    };
}

step_entries!(f32 => lbm_ab_f32, lbm_aa_even_f32, lbm_aa_odd_f32);
step_entries!(f64 => lbm_ab_f64, lbm_aa_even_f64, lbm_aa_odd_f64);
step_entries!(super::Half => lbm_ab_f16, lbm_aa_even_f16, lbm_aa_odd_f16);
