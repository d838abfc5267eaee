//! One time step of one cell: gather the `Q` populations (streaming and bounce-back), collide (TRT, BGK
//! being TRT with equal rates, Guo forcing), scatter. The streaming scheme and the velocity set are
//! compile-time parameters, so the two-lattice and the in-place kernels share every arithmetic operation
//! and give the same bits, and D3Q19 and D3Q27 share every rule.
// The velocity, weight and population arrays run in lock step: index loops read best here.
#![allow(clippy::needless_range_loop)]

use super::storage::Storage;
use super::{mirror, opposite, tag, weight, Velocities, C};
use crate::bind::{check_len, Bound, Kernel, Place, Span, SpanError, SpanMut};
use crate::device::math::Real;
#[cfg_attr(not(target_arch = "nvptx64"), allow(unused_imports))]
use crate::device::thread;

/// Runs `$body` once for each population `$q` in `0..$count` (or each odd `$q`), written out so that
/// every array index is a constant: LLVM does not unroll loops this large by itself, and a population
/// array indexed at run time lives in local memory, not registers. `$count` is a constant (19 or 27):
/// the populations past it fall away at compile time.
macro_rules! each_q {
    ($count:expr, $q:ident => $body:block) => {
        each_q!(@ $count, $q $body;
            0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26)
    };
    ($count:expr, odd $q:ident => $body:block) => {
        each_q!(@ $count, $q $body; 1 3 5 7 9 11 13 15 17 19 21 23 25)
    };
    (@ $count:expr, $q:ident $body:block; $($i:literal)*) => {
        $(if $i < $count {
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

/// The arguments of one time step over the whole grid (the kernel's one parameter), made by
/// [`Step::bind`].
///
/// Lattice `f` holds, before a step, the post-collision populations of the previous step (for
/// [`Scheme::Ab`] and [`Scheme::AaOdd`]) or the streamed ones (for [`Scheme::AaEven`]), as deviations
/// `f_q - w_q` in structure-of-arrays order. Boundary cells are never updated, but their slots carry
/// four things: the f32 entries (and f64's on D3Q19) without free-slip cells, interpolated links or
/// outlets that let sound out push what a fluid cell sends into a boundary cell into the slot that the
/// cell's next step reads along the opposite direction there ([`Step::cell`]); the in-place odd step
/// streams into free-slip
/// cells as into fluid ones, and the even step reads the mirrored populations there; in place, a wall
/// cell's slot `k` holds a copy for the interpolated link along `c_k` into it ([`Cuts`]); an outlet
/// cell's slot 0 holds the reference velocity of the fluid cell before it where the outlet lets sound
/// out ([`Physics::outlet_follow`]). Each is one cell's alone, and the lattice (a checkpoint, a split's
/// exchanges) carries it, but for the pushes: a state just set is read without them until a step has
/// pushed ([`Bound::set_pushed`]).
///
/// `Q` is the velocity set's populations per cell ([`Velocities`]: 19 or 27).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Step<S: Storage, const Q: usize> {
    /// The lattice read (and, in place, written).
    f: *mut S,
    /// The lattice written by [`Scheme::Ab`]; unused in place.
    g: *mut S,
    /// One tag per cell ([`tag`]).
    tags: *const u8,
    /// Where to write density and velocity (`rho`, `ux`, `uy`, `uz`, each `cells` long), or null.
    moments: *mut S::Real,
    /// Grid `[nx, ny, nz]`.
    dims: [u32; 3],
    /// The z planes the step updates, `first .. first + count` (all of them but the halo planes of a
    /// decomposed run, which hold the neighbours' planes).
    planes: [u32; 2],
    /// The relaxation rates, body force and wall velocity.
    physics: Physics<S::Real>,
    /// The [`Scheme`] as `u32`: which entry runs it, and what the CPU engine's items run.
    scheme: u32,
    /// 1 where the grid has free-slip cells: the GPU runs the entries with their mirrored reads, which
    /// cost the others registers (8 in f32 and f16, 26 in the f64 odd step) wherever compiled in.
    slip: u32,
    /// Per cell, its row of [`cuts`](Self::cuts) (a fluid cell with interpolated links), or
    /// `u32::MAX`; null where no link is interpolated (the GPU then runs the entries without, unless
    /// the outlets let sound out).
    cut_rows: *const u32,
    /// Rows of `Q` wall distances ([`Cuts`]).
    cuts: *const f32,
    /// Rows in `cuts`: a row index at or above it (`u32::MAX`) is none.
    cut_count: u32,
    /// The GPU's threads run the rows shifted by this many cells ([`shifted`]; 0: as they lie).
    shift: u32,
    /// Which boundary slots a pushing step ([`Step::cell`]) may not take as pushed, and reads from the
    /// cell's own slot instead: 0 none; 1 those in the first and the last z plane, a split's halo
    /// planes (refreshed from neighbours that do not push for this rank's cells); 2 all of them (a
    /// state just set, whose boundary slots no step has pushed).
    unpushed: u32,
}

/// Where the links of fluid cells into bodies are interpolated (Bouzidi, Firdaouss and Lallemand 2001,
/// linear): the wall's distance from the fluid cell along each such link, as a share of the link.
///
/// The cell's row holds, for each direction `k`, `d` in `(0, 1]` for a link along `c_k` into a wall,
/// the wall at `x + d c_k`; 0.5 (halfway bounce-back, the plain rule) for the others. With `d < 1/2`
/// the rule needs the cell at `x - c_k` to be fluid; where it is not, the host gives 0.5.
#[derive(Debug)]
pub struct Cuts<'a> {
    /// Per cell, its row, or `u32::MAX` for a cell without interpolated links.
    pub rows: Span<'a, u32>,
    /// A distance per population (the velocity set's `Q`) per row.
    pub distances: Span<'a, f32>,
}

/// The physical parameters of a step.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Physics<R> {
    /// The relaxation rate of the symmetric part, `1 / tau`.
    pub omega: R,
    /// The relaxation rate of the antisymmetric part (TRT); equal to `omega` for BGK.
    pub omega_minus: R,
    /// Body force per unit volume (Guo forcing).
    pub force: [R; 3],
    /// Velocity of the moving-wall cells.
    pub wall: [R; 3],
    /// Velocity of the inlet cells where their profile peaks (the host ramps it up over the first steps).
    pub inflow: [R; 3],
    /// The inlet profile per axis, `[centre, k]`: the inflow is scaled by `1 - k (p - centre)^2` at each
    /// link's midpoint `p`, a parabola vanishing at `centre ± 1/sqrt(k)` (`k = 0`: uniform along the axis).
    pub profile: [[R; 2]; 3],
    /// The density of the outlet cells, less 1.
    pub outlet: R,
    /// The share of the gap to the outflow that an outlet's reference velocity closes each step (1 /
    /// its memory in steps), for a non-reflecting outlet; 0: the outlet holds its density and
    /// reflects sound whole.
    pub outlet_follow: R,
}

/// The memory of a step: the lattices, the tags and, where the step writes them, the moments.
#[derive(Debug)]
pub struct Lattices<'a, S: Storage> {
    /// The lattice read (and, in place, written): `Q * cells` populations.
    pub f: SpanMut<'a, S>,
    /// The lattice a two-lattice step writes (`Q * cells`); `None` in place.
    pub g: Option<SpanMut<'a, S>>,
    /// One tag per cell.
    pub tags: Span<'a, u8>,
    /// Density and velocity (`4 * cells`), or `None` for a step that does not write them.
    pub moments: Option<SpanMut<'a, S::Real>>,
    /// The interpolated links, or `None` where every link bounces back halfway.
    pub cuts: Option<Cuts<'a>>,
}

// SAFETY: each population slot is read and written by one cell only within a step (see `cell`); the
// pointers are otherwise shared read-only.
unsafe impl<S: Storage, const Q: usize> Send for Step<S, Q> {}
// SAFETY: as above.
unsafe impl<S: Storage, const Q: usize> Sync for Step<S, Q> {}

/// The equilibrium of density `1 + drho` and velocity `u` on the velocity set of `Q` populations, as
/// deviations from the weights: `w_q (drho + rho (3 c.u + 4.5 (c.u)^2 - 1.5 u.u))`.
#[inline(always)]
pub fn equilibrium<R: Real, const Q: usize>(drho: R, u: [R; 3]) -> [R; Q] {
    let rho = R::ONE + drho;
    let c = |v: f64| R::from_f64(v);
    let usq = u[0] * u[0] + u[1] * u[1] + u[2] * u[2];
    let mut e = [R::ZERO; Q];
    each_q!(Q, q => {
        let cu = dot(q, u);
        e[q] = c(weight(Q, q)) * (drho + rho * (c(3.0) * cu + c(4.5) * cu * cu - c(1.5) * usq));
    });
    e
}

/// Linear interpolated bounce-back (Bouzidi, Firdaouss and Lallemand 2001) of a link whose wall lies a
/// share `d` of the link from the fluid cell: the population coming back is `2 d f*_k + (1 - 2 d) f*_k(x
/// - c_k)` for `d < 1/2` and `f*_k / (2 d) + (1 - 1 / (2 d)) f*_q(x)` otherwise, `bounced` being the
/// cell's own `f*_k` (halfway bounce-back's value) and `other` the second term's population. Both
/// weights lie in `[0, 1]`; `d = 1/2` gives `bounced`.
#[inline(always)]
pub fn bouzidi<R: Real>(d: R, bounced: R, other: R) -> R {
    let two = d + d;
    if d < R::from_f64(0.5) {
        two * bounced + (R::ONE - two) * other
    } else {
        bounced / two + (R::ONE - R::ONE / two) * other
    }
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

impl<S: Storage, const Q: usize> Step<S, Q> {
    /// The velocity set: `Q` must be one's (checked at compile time).
    pub const VELOCITIES: Velocities = match Velocities::of(Q) {
        Some(v) => v,
        None => panic!("a step's Q must be a velocity set's: 19 or 27"),
    };

    /// A step of `scheme` over `planes` (`[first, count]`) of grid `dims`, checked against its memory:
    /// every lattice must hold `Q * cells` populations, `tags` one per cell, `moments` four per cell,
    /// the lattices may not overlap, a two-lattice step needs `g`, and the planes lie in the grid.
    pub fn bind<'a>(
        scheme: Scheme,
        mem: Lattices<'a, S>,
        dims: [u32; 3],
        planes: [u32; 2],
        physics: Physics<S::Real>,
    ) -> Result<Bound<'a, Self>, SpanError> {
        let _ = Self::VELOCITIES;
        let cells = dims.iter().map(|&d| d as usize).product::<usize>();
        let mut places = [
            mem.f.place(),
            mem.tags.place(),
            mem.f.place(),
            mem.f.place(),
        ];
        if let Some(g) = &mem.g {
            places[2] = g.place();
        }
        if let Some(m) = &mem.moments {
            places[3] = m.place();
        }
        let mut place = Place::common(&places)?;
        let (mut cut_rows, mut cuts, mut cut_count) = (core::ptr::null(), core::ptr::null(), 0);
        if let Some(c) = &mem.cuts {
            place = Place::common(&[place, c.rows.place(), c.distances.place()])?;
            check_len("cut rows", c.rows.len(), cells)?;
            // The kernels take a row index at or above the count for none, so the rows need no check.
            let rows = c.distances.len() / Q;
            (cut_rows, cuts) = (c.rows.ptr(), c.distances.ptr());
            cut_count = rows.min(u32::MAX as usize) as u32;
        }
        check_len("f", mem.f.len(), Q * cells)?;
        check_len("tags", mem.tags.len(), cells)?;
        if let Some(m) = &mem.moments {
            check_len("moments", m.len(), 4 * cells)?;
        }
        let g = match (&mem.g, scheme) {
            (Some(g), _) => {
                check_len("g", g.len(), Q * cells)?;
                let (f0, g0) = (mem.f.ptr() as usize, g.ptr() as usize);
                let bytes = Q * cells * core::mem::size_of::<S>();
                if f0 < g0 + bytes && g0 < f0 + bytes {
                    return Err(SpanError::Overlap {
                        written: "g",
                        other: "f",
                    });
                }
                g.ptr()
            }
            (None, Scheme::Ab) => check_len("g", 0, Q * cells).map(|_| core::ptr::null_mut())?,
            (None, _) => core::ptr::null_mut(),
        };
        let step = Step {
            f: mem.f.ptr(),
            g,
            tags: mem.tags.ptr(),
            moments: mem.moments.map_or(core::ptr::null_mut(), |m| m.ptr()),
            dims,
            planes: [0, 0],
            physics,
            scheme: scheme as u32,
            slip: 0,
            cut_rows,
            cuts,
            cut_count,
            shift: 0,
            unpushed: 0,
        };
        // SAFETY: every span was checked above to cover the grid, and they are borrowed for `'a`.
        let mut bound = unsafe { Bound::new_unchecked(step, place) };
        bound.set_planes(planes)?;
        Ok(bound)
    }

    /// Grid `[nx, ny, nz]`.
    pub fn dims(&self) -> [u32; 3] {
        self.dims
    }

    /// The z planes the step updates, `[first, count]`.
    pub fn planes(&self) -> [u32; 2] {
        self.planes
    }

    /// Cells of the grid.
    #[inline(always)]
    pub fn cells(&self) -> usize {
        self.dims[0] as usize * self.dims[1] as usize * self.dims[2] as usize
    }

    /// The population entering fluid cell `xyz` along `q` from boundary cell of tag `t`, given `v`, what
    /// the cell sent into it last step: `v` off a resting wall, `v + 6 w_q (c_q . u)` off a moving wall or
    /// an inlet (density 1, `u` the inflow profile's at the link's midpoint), and off an outlet the part of
    /// the anti-bounce-back that does not depend on the cell's velocity, `-v + 2 w_q (rho_out - 1)`
    /// ([`outflow`](Self::outflow) adds the rest).
    #[inline(always)]
    fn boundary(&self, v: S::Real, q: usize, t: u8, xyz: [u32; 3]) -> S::Real {
        let c = |v: f64| S::Real::from_f64(v);
        if t & tag::MOVING_WALL != 0 {
            v + c(6.0 * weight(Q, q)) * dot(q, self.physics.wall)
        } else if t & tag::INLET != 0 {
            let mut shape = S::Real::ONE;
            for a in 0..3 {
                let [centre, k] = self.physics.profile[a];
                // Exact: whole and half coordinates.
                let d = (S::Real::from_u32(xyz[a]) - c(0.5 * C[q][a] as f64)) - centre;
                shape *= S::Real::ONE - k * d * d;
            }
            v + c(6.0 * weight(Q, q)) * dot(q, self.physics.inflow) * shape
        } else if t & tag::OUTLET != 0 {
            c(2.0 * weight(Q, q)) * self.physics.outlet - v
        } else {
            v
        }
    }

    /// [`mirror`] of the population entering this cell along `q` from the free-slip cell of tag `t`.
    #[inline(always)]
    fn mirror(&self, q: usize, t: u8, nb: &Neighbours) -> Option<(usize, usize, usize)> {
        mirror(q, t, |axes| {
            let m = nb.along(q, -1, axes);
            // SAFETY: a cell of the grid (the step's contract).
            (m, unsafe { *self.tags.add(m) })
        })
    }

    /// Completes the anti-bounce-back of the populations `p` entered from outlets (bit `q` of `open`):
    /// adds `2 w_q rho_out (4.5 (c_q.u)^2 - 1.5 u.u)` with `u` the cell's velocity from `p` as they stand
    /// (one fixed-point pass: the error is of third order in the velocity).
    ///
    /// A non-reflecting outlet (`outlet_follow` above 0; compiled in with `OPEN`) moves the density on
    /// the links by `(u_n - U) / c_s`, `u_n` the velocity along the outward normal that the shifted
    /// populations leave and `U` its reference, which follows `u_n` slowly: the pressure and the
    /// velocity of a sound wave leaving through it then keep the ratio of a wave that goes on
    /// (`p' = rho c_s u'`, the incoming characteristic held), and little comes back (5% of a pulse,
    /// against 98% at a fixed density), while the mean density stays `rho_out`. The normal is that of the
    /// first face (in `q` order) with an outlet behind it, whose slot 0 holds the cell's reference
    /// (the outlet cell's alone, where outlet cells form planes with fluid on one side; the host
    /// checks); without such a face the outlet holds its density.
    #[inline(always)]
    fn outflow<const SCHEME: u32, const OPEN: bool>(
        &self,
        p: &mut [S::Real; Q],
        open: u32,
        nb: &Neighbours,
    ) {
        let c = |v: f64| S::Real::from_f64(v);
        let mut drho = S::Real::ZERO;
        let mut j = [S::Real::ZERO; 3];
        each_q!(Q, q => {
            drho += p[q];
            for a in 0..3 {
                match C[q][a] {
                    1 => j[a] += p[q],
                    -1 => j[a] -= p[q],
                    _ => {}
                }
            }
        });
        let inv = S::Real::ONE / (S::Real::ONE + drho);
        let u = [0, 1, 2].map(|a| (j[a] + c(0.5) * self.physics.force[a]) * inv);
        let usq = u[0] * u[0] + u[1] * u[1] + u[2] * u[2];
        let follow = self.physics.outlet_follow;
        let mut shift = S::Real::ZERO;
        // The first face with an outlet behind it.
        let faces = open & 0x7e;
        let first = faces & faces.wrapping_neg();
        if OPEN && follow != S::Real::ZERO && first != 0 {
            each_q!(7, f => {
                if f >= 1 && first == 1 << f {
                    // The outlet lies at `-c_f`: the outward normal velocity is `-c_f . u`.
                    let (un, o) = (-dot(f, u), nb.at(f, -1));
                    // The shift moves it too, by `a shift / rho` (the shifted populations'
                    // momentum along the normal): the shift is the one that agrees with the velocity
                    // it leaves, `shift = sqrt(3) (un + a shift / rho - U)`.
                    let mut a = S::Real::ZERO;
                    each_q!(Q, q => {
                        if open & (1 << q) != 0 {
                            let along = -(C[q][0] * C[f][0] + C[q][1] * C[f][1] + C[q][2] * C[f][2]);
                            a += c(2.0 * weight(Q, q) * along as f64);
                        }
                    });
                    // SAFETY: a cell of the grid (the step's contract); slot 0 of an outlet cell
                    // is this cell's alone.
                    let reference = unsafe { S::load(self.f, o) };
                    let root3 = c(3f64.sqrt());
                    let moves = a * inv;
                    shift = root3 * (un - reference) / (S::Real::ONE - root3 * moves);
                    let left = un + moves * shift;
                    let to = if SCHEME == Scheme::Ab as u32 { self.g } else { self.f };
                    unsafe { S::store(to, o, reference + follow * (left - reference)) };
                }
            });
        }
        let rho = S::Real::ONE + self.physics.outlet + shift;
        each_q!(Q, q => {
            if open & (1 << q) != 0 {
                let cu = dot(q, u);
                p[q] += c(2.0 * weight(Q, q)) * (shift + rho * (c(4.5) * cu * cu - c(1.5) * usq));
            }
        });
    }

    /// Replaces the bounced-back populations `p` of the cell's interpolated links (its `row` of
    /// [`Cuts`]) by [`bouzidi`]'s: the link along `c_k` brings back `p[q]`, `q` opposite to `k`, which
    /// holds what the cell sent along `k` (`f*_k`). A wall nearer than halfway takes the population sent
    /// along `k` by the cell upstream, `x - c_k`, which arrived here as `p[k]` (fluid: the host's
    /// promise); one further, what the cell itself sent along `q` away from the wall. The two-lattice
    /// scheme finds that in the cell's own slot `q`; in place, the odd step's cell upstream reads and
    /// writes the slot that holds it, so both steps leave a copy in the wall cell's slot `k`, which
    /// no other cell touches (and which the host primes from the cell's slot `k` in a state stored as
    /// the even step stores it).
    #[inline(always)]
    fn interpolate<const SCHEME: u32>(
        &self,
        p: &mut [S::Real; Q],
        row: *const f32,
        n: usize,
        nb: &Neighbours,
        cells: usize,
    ) {
        each_q!(Q, q => {
            let k = opposite(q);
            // SAFETY: a row holds Q distances, the cells lie in the grid (the step's contract).
            let d = unsafe { *row.add(k) };
            if q != 0 && d != 0.5 {
                let other = if d < 0.5 {
                    p[k]
                } else {
                    let (slot, cell) = match SCHEME == Scheme::Ab as u32 {
                        true => (q, n),
                        false => (k, nb.at(q, -1)),
                    };
                    unsafe { S::load(self.f, slot * cells + cell) }
                };
                p[q] = bouzidi(S::Real::from_f64(d as f64), p[q], other);
            }
        });
    }

    /// One time step of cell `[x, y, z]` (inside the grid) under `SCHEME` (a [`Scheme`] as `u32`); with
    /// `SLIP` false free-slip cells are taken for resting walls, with `CUT` false every link into a
    /// wall bounces back halfway ([`Cuts`]) and outlets hold their density (each costs registers).
    ///
    /// With neither, f32 steps (and f64 on D3Q19) push: a population sent into a boundary cell is
    /// stored, besides in the cell's own slot, in the boundary cell's slot that the cell's next step
    /// streams along the opposite direction (the two-lattice step into the next lattice; in place,
    /// the even step for the odd one). Every cell then gathers its populations from the same
    /// addresses as a cell away from walls, and a cell next to a boundary only corrects them by the
    /// boundary's rule once the neighbours' tags have come: its loads no longer wait for the tags,
    /// which held up the warps of a channel's cells next to its inlet and outlet (the sphere's
    /// channel from 78 to 87% of the periodic box in f32 in place, 85 to 91% in f64, on an H200).
    /// The values are the bits the other entries take from the cell's own slot. A split's halo
    /// planes are refreshed from the neighbours, which do not push for this rank's cells, and a
    /// state just set has no pushes: those boundary cells are read from the cell's own slot
    /// ([`Bound::set_pushed`]).
    ///
    /// # Safety
    /// The pointers must cover the grid (`f`, and `g` for [`Scheme::Ab`]: `Q * cells` elements; `tags`:
    /// `cells`; `moments`, if not null: `4 * cells`), `g` must not overlap `f`, and no other step may run
    /// on them at the same time. Every cell of the grid may run at once: within a step each population slot
    /// is read and written by one cell only.
    #[inline(always)]
    pub unsafe fn cell<const SCHEME: u32, const SLIP: bool, const CUT: bool>(
        &self,
        [x, y, z]: [u32; 3],
    ) {
        let nb = Neighbours::new([x, y, z], self.dims);
        let n = nb.at(0, 1);
        // SAFETY (all accesses below): indices are below `cells` per population; the caller's contract.
        let t = unsafe { *self.tags.add(n) };
        if tag::is_boundary(t) {
            return;
        }
        let cells = self.cells();
        let at = |q: usize, sign: i32| nb.at(q, sign);
        let near = t & tag::NEAR_WALL != 0;
        // `near` is a constant in each of the two copies of the loops below: cells away from walls
        // (nearly all) run straight-line code, where the Q loads are all issued before the first use.
        // With a branch per population, each load's first use (the f16 conversion) came before the
        // next load was issued, and f16 storage ran at a third of its bandwidth.
        let wall_at = |m: usize, near: bool| -> Option<u8> {
            if near {
                let tm = unsafe { *self.tags.add(m) };
                tag::is_boundary(tm).then_some(tm)
            } else {
                None
            }
        };
        let (f, g) = (self.f, self.g);
        // The cell's row of wall distances, if it has interpolated links.
        let row = if CUT && near && !self.cut_rows.is_null() {
            let r = unsafe { *self.cut_rows.add(n) };
            (r < self.cut_count).then(|| unsafe { self.cuts.add(r as usize * Q) })
        } else {
            None
        };

        // The slot of this cell that holds what it sent along `-c_q` in the step before: where the
        // population entering along `q` from a boundary comes from.
        let own_slot = |q: usize| {
            if SCHEME == Scheme::Ab as u32 {
                opposite(q)
            } else {
                q
            }
        };
        // The value entering along `q`, and whether it came from an outlet.
        let gather = |q: usize, near: bool| unsafe {
            let src = at(q, -1);
            if SCHEME == Scheme::AaEven as u32 {
                // The odd step left populations that hit a boundary here unchanged; the boundary's rule is
                // applied on reading, as in the other schemes, so that f16 rounds the same value in all
                // of them. Into a free-slip cell the odd step streamed as into a fluid one: the mirrored
                // path's start left its population in the wall cell the path meets, and where the link
                // bounces back this cell left its own in the slip cell.
                match wall_at(src, near) {
                    Some(tw) if SLIP && tw & tag::SLIP != 0 => match self.mirror(q, tw, &nb) {
                        Some((m, _, wall)) => (S::load(f, m * cells + wall), false),
                        None => (S::load(f, opposite(q) * cells + src), false),
                    },
                    Some(tw) => {
                        let v = S::load(f, q * cells + n);
                        (self.boundary(v, q, tw, [x, y, z]), tw & tag::OUTLET != 0)
                    }
                    None => (S::load(f, q * cells + n), false),
                }
            } else {
                // Entering from a boundary: what this cell sent into it last step, reflected.
                let (from, slot) = (own_slot(q), opposite(own_slot(q)));
                match wall_at(src, near) {
                    Some(tw) if SLIP && tw & tag::SLIP != 0 => match self.mirror(q, tw, &nb) {
                        // What the mirrored path's start sent along the mirrored direction.
                        Some((m, start, _)) => {
                            let slot = if SCHEME == Scheme::Ab as u32 {
                                m
                            } else {
                                opposite(m)
                            };
                            (S::load(f, slot * cells + start), false)
                        }
                        None => (S::load(f, from * cells + n), false),
                    },
                    Some(tw) => {
                        let v = S::load(f, from * cells + n);
                        (self.boundary(v, q, tw, [x, y, z]), tw & tag::OUTLET != 0)
                    }
                    None => (S::load(f, slot * cells + src), false),
                }
            }
        };
        let mut p = [S::Real::ZERO; Q];
        // f32, and f64 on D3Q19: the pushes' registers (f16 56 to 72, f64 on D3Q27 128 to 166) cost
        // f16's in-place box 7% (bound by the issue of instructions) and D3Q27's f64 box 11%.
        let bytes = core::mem::size_of::<S>();
        let push = !SLIP && !CUT && (bytes == 4 || (bytes == 8 && Q == 19));
        // Bit `q`: the cell at `-c_q` is a boundary one (pushing steps; the scatter's neighbours are
        // the gather's, so their tags are not loaded twice).
        let mut walls = 0u32;
        if push {
            // The loads of a cell away from walls, for every cell: those next to one issue them
            // before their tags are in.
            each_q!(Q, q => { p[q] = gather(q, false).0; });
            if near {
                let mut open = 0u32;
                let nz = self.dims[2] as i32;
                each_q!(Q, q => {
                    if let Some(tw) = wall_at(at(q, -1), true) {
                        walls |= 1 << q;
                        let sz = z as i32 - C[q][2];
                        let own = self.unpushed == 2
                            || (self.unpushed == 1 && (sz == 0 || sz == nz - 1));
                        let v = match (own, SCHEME == Scheme::AaEven as u32) {
                            // The cell's own slot, which holds the same value.
                            (true, false) => unsafe { S::load(f, own_slot(q) * cells + n) },
                            _ => p[q],
                        };
                        p[q] = self.boundary(v, q, tw, [x, y, z]);
                        open |= u32::from(tw & tag::OUTLET != 0) << q;
                    }
                });
                if open != 0 {
                    self.outflow::<SCHEME, CUT>(&mut p, open, &nb);
                }
            }
        } else if near {
            let mut open = 0u32;
            each_q!(Q, q => {
                let (v, out) = gather(q, true);
                p[q] = v;
                open |= (out as u32) << q;
            });
            if let Some(row) = row {
                self.interpolate::<SCHEME>(&mut p, row, n, &nb, cells);
            }
            if open != 0 {
                self.outflow::<SCHEME, CUT>(&mut p, open, &nb);
            }
        } else {
            each_q!(Q, q => { p[q] = gather(q, false).0; });
        }

        let out = self.collide(&p, n, cells);

        // The in-place schemes write exactly where they read. Left alone, LLVM keeps the Q addresses
        // of the gather alive through the collision for the scatter, which takes ~50 more registers
        // (a quarter of the occupancy); hiding the coordinates makes it recompute them instead.
        let (cells, n) = (opaque(cells as u64) as usize, opaque(n as u64) as usize);
        let nb = Neighbours::new([x, y, z].map(|v| opaque(v as u64) as u32), self.dims);
        let at = |q: usize, sign: i32| nb.at(q, sign);

        let scatter = |q: usize, near: bool| unsafe {
            if SCHEME == Scheme::Ab as u32 {
                S::store(g, q * cells + n, out[q]);
            } else if SCHEME == Scheme::AaEven as u32 {
                S::store(f, opposite(q) * cells + n, out[q]);
            } else {
                let dst = at(q, 1);
                match wall_at(dst, near) {
                    // Into a wall: it comes back to this cell as the opposite population. A free-slip
                    // cell takes it as a fluid one would (this cell is the only one streaming into that
                    // slot), for the next step's mirrored reads.
                    Some(tw) if !SLIP || tw & tag::SLIP == 0 => {
                        S::store(f, opposite(q) * cells + n, out[q])
                    }
                    _ => S::store(f, q * cells + dst, out[q]),
                }
            }
        };
        let (to, ab) = if SCHEME == Scheme::Ab as u32 {
            (g, true)
        } else {
            (f, false)
        };
        // Where a neighbour is a boundary, from the gather's tags where that takes fewer registers
        // (the odd step; the even one in f32: 72 to 64 registers), else from its tag again (f64's
        // even step 128, not 146).
        let reuse =
            SCHEME == Scheme::AaOdd as u32 || (SCHEME == Scheme::AaEven as u32 && bytes == 4);
        if push && near && reuse {
            each_q!(Q, q => {
                let into_wall = walls & (1 << opposite(q)) != 0;
                unsafe {
                    if SCHEME == Scheme::AaOdd as u32 {
                        // Into a boundary: the cell's own slot, where the even step reads it.
                        match into_wall {
                            true => S::store(f, opposite(q) * cells + n, out[q]),
                            false => S::store(f, q * cells + at(q, 1), out[q]),
                        }
                    } else {
                        scatter(q, false);
                        if into_wall {
                            S::store(to, push_slot(ab, q) * cells + at(q, 1), out[q]);
                        }
                    }
                }
            });
        } else if push && near {
            each_q!(Q, q => { scatter(q, true); });
            each_q!(Q, q => {
                let dst = at(q, 1);
                if wall_at(dst, true).is_some() {
                    unsafe { S::store(to, push_slot(ab, q) * cells + dst, out[q]) };
                }
            });
        } else if push {
            each_q!(Q, q => { scatter(q, false); });
        } else if near {
            each_q!(Q, q => { scatter(q, true); });
            // In place, a copy of what leaves away from a wall further than halfway, for the next
            // step's interpolation (see `interpolate`) in the wall cell's slot of the link's
            // direction, which is this link's alone.
            if let (Some(row), false) = (row, SCHEME == Scheme::Ab as u32) {
                each_q!(Q, q => {
                    if q != 0 && unsafe { *row.add(q) } > 0.5 {
                        unsafe { S::store(f, q * cells + at(q, 1), out[opposite(q)]) };
                    }
                });
            }
        } else {
            each_q!(Q, q => { scatter(q, false); });
        }
    }

    /// TRT collision with Guo forcing of the streamed populations `p` (deviations) of cell `n`; writes the
    /// moments if asked.
    ///
    /// Written pair by pair, `q` with its opposite `o`, in terms of the equilibrium's symmetric part
    /// `w (drho + rho (4.5 (c.u)^2 - 1.5 u.u))` and antisymmetric part `3 w rho c.u`, with every factor that
    /// depends only on the weight computed once per cell: the GPU issues no more instructions than the
    /// collision needs (f16 storage is bound by instruction issue, not memory, otherwise).
    #[inline(always)]
    fn collide(&self, p: &[S::Real; Q], n: usize, cells: usize) -> [S::Real; Q] {
        let c = |v: f64| S::Real::from_f64(v);
        let mut drho = S::Real::ZERO;
        each_q!(Q, q => {
            drho += p[q];
        });
        let mut j = [S::Real::ZERO; 3];
        for a in 0..3 {
            each_q!(Q, q => {
                match C[q][a] {
                    1 => j[a] += p[q],
                    -1 => j[a] -= p[q],
                    _ => {}
                }
            });
        }
        let rho = S::Real::ONE + drho;
        let inv = S::Real::ONE / rho;
        let force = self.physics.force;
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
        let usq = u[0] * u[0] + u[1] * u[1] + u[2] * u[2];
        let uf = u[0] * force[0] + u[1] * force[1] + u[2] * force[2];
        let (wp, wm) = (self.physics.omega, self.physics.omega_minus);
        let (kp, km) = (S::Real::ONE - c(0.5) * wp, S::Real::ONE - c(0.5) * wm);
        let (hwp, hwm) = (c(0.5) * wp, c(0.5) * wm);
        let base = drho - c(1.5) * rho * usq;
        // Per weight: twice the equilibrium's parts (the pair sums below are twice the symmetric and
        // antisymmetric parts) and Guo's source, symmetric `s9 (c.u)(c.F) - s3`, antisymmetric `sa c.F`.
        let class = |w: f64| {
            let w = c(w);
            let w2 = c(2.0) * w;
            Class {
                eb: w2 * base,
                e2: c(4.5) * w2 * rho,
                ea: c(3.0) * w2 * rho,
                s9: c(9.0) * kp * w,
                s3: c(3.0) * kp * w * uf,
                sa: c(3.0) * km * w,
            }
        };
        let (face, edge, corner) = (
            class(weight(Q, 1)),
            class(weight(Q, 7)),
            class(weight(Q, 19)),
        );
        let mut out = [S::Real::ZERO; Q];
        let w0 = weight(Q, 0);
        out[0] = p[0] - wp * (p[0] - c(w0) * base) - c(3.0 * w0) * kp * uf;
        let pair = |q: usize, k: &Class<S::Real>, forced: bool| {
            let o = q + 1;
            let cu = dot(q, u);
            let sym = (p[q] + p[o]) - (k.eb + k.e2 * (cu * cu));
            let anti = (p[q] - p[o]) - k.ea * cu;
            let (a, b) = if forced {
                let cf = dot(q, force);
                ((k.s9 * cu * cf - k.s3) - hwp * sym, k.sa * cf - hwm * anti)
            } else {
                (-(hwp * sym), -(hwm * anti))
            };
            ((p[q] + a) + b, (p[o] + a) - b)
        };
        let forced =
            force[0] != S::Real::ZERO || force[1] != S::Real::ZERO || force[2] != S::Real::ZERO;
        // `forced` is uniform over the grid; the unforced copy leaves out the source terms.
        macro_rules! pairs {
            ($forced:expr) => {
                each_q!(Q, odd q => {
                    let k = if q < 7 {
                        &face
                    } else if q < 19 {
                        &edge
                    } else {
                        &corner
                    };
                    (out[q], out[q + 1]) = pair(q, k, $forced);
                });
            };
        }
        if forced {
            pairs!(true);
        } else {
            pairs!(false);
        }
        out
    }
}

/// The per-cell factors of the collision that depend only on a population's weight.
struct Class<R> {
    eb: R,
    e2: R,
    ea: R,
    s9: R,
    s3: R,
    sa: R,
}

/// The row offsets of a cell's neighbours along each axis (periodic wrap).
struct Neighbours {
    xs: [u32; 3],
    ys: [u32; 3],
    zs: [u32; 3],
}

impl Neighbours {
    #[inline(always)]
    fn new([x, y, z]: [u32; 3], [nx, ny, nz]: [u32; 3]) -> Self {
        let wrap = |v: u32, len: u32| {
            [
                if v == 0 { len - 1 } else { v - 1 },
                v,
                if v + 1 == len { 0 } else { v + 1 },
            ]
        };
        Self {
            xs: wrap(x, nx),
            ys: wrap(y, ny).map(|v| v * nx),
            zs: wrap(z, nz).map(|v| v * nx * ny),
        }
    }

    /// The cell at offset `sign * c_q`.
    #[inline(always)]
    fn at(&self, q: usize, sign: i32) -> usize {
        let o = |a: usize| (sign * C[q][a] + 1) as usize;
        (self.xs[o(0)] + self.ys[o(1)] + self.zs[o(2)]) as usize
    }

    /// The cell at offset `sign * c_q` with the components along `axes` (bit `a`: axis `a`) left out.
    #[inline(always)]
    fn along(&self, q: usize, sign: i32, axes: u32) -> usize {
        // Each a choice between two constant indices: an index chosen at run time would put the
        // offsets in local memory.
        let pick = |row: &[u32; 3], a: usize| match axes & (1 << a) {
            0 => row[(sign * C[q][a] + 1) as usize],
            _ => row[1],
        };
        (pick(&self.xs, 0) + pick(&self.ys, 1) + pick(&self.zs, 2)) as usize
    }
}

/// The column that thread column `x` of a row of `nx` cells updates: `x + shift`, wrapped around the
/// row ([`Bound::set_shift`]).
///
/// With an inlet and an outlet across x, every row has a cell next to each, and such a cell holds up
/// its warp (the neighbours' tags, then the populations they decide). With the rows as they lie, two
/// warps in eight have one at 256^3; shifted by half a warp ([`END_SHIFT`]), both ends share one, and
/// every warp's cells still lie on whole 32-byte sectors. That helps f16 storage, bound by the issue
/// of instructions (the sphere's channel from 62 to 72% of the periodic box's rate on an H200), but
/// not f32 and f64, bound by memory, whose warps then straddle 128-byte lines (f32 76 to 69%): the
/// host shifts f16 only. Two cells, the near ones in warps of their own, cost f32 more (54%).
#[inline(always)]
pub fn shifted(nx: u32, shift: u32, x: u32) -> u32 {
    let r = x + shift;
    if r >= nx {
        r - nx
    } else {
        r
    }
}

/// The slot of boundary cell `n + c_q` into which a pushing step ([`Step::cell`]) stores what fluid
/// cell `n` sends along `q`, two-lattice or in place: the slot that `n`'s next step streams along
/// `opposite(q)` from there.
const fn push_slot(two_lattice: bool, q: usize) -> usize {
    if two_lattice {
        opposite(q)
    } else {
        q
    }
}

/// Half a warp: the shift that gives both ends of a row one warp ([`shifted`]).
pub const END_SHIFT: u32 = 16;

/// `v`, which the compiler cannot see through: values derived from it are computed anew.
#[inline(always)]
fn opaque(v: u64) -> u64 {
    #[cfg(target_arch = "nvptx64")]
    {
        let mut v = v;
        // SAFETY: a register move. Not `pure`, so LLVM may neither merge nor hoist it.
        unsafe {
            core::arch::asm!("mov.b64 {v}, {v};", v = inout(reg64) v, options(nomem, nostack, preserves_flags))
        };
        v
    }
    #[cfg(not(target_arch = "nvptx64"))]
    v
}

impl<S: Storage, const Q: usize> Bound<'_, Step<S, Q>> {
    /// Whether the grid has free-slip cells (the GPU then runs the entries that mirror off them; the
    /// others take them for resting walls).
    pub fn set_slip(&mut self, slip: bool) {
        self.args_mut().slip = u32::from(slip);
    }

    /// Says whether the boundary slots hold what the last pushing step ([`Step::cell`]) pushed (else
    /// the state was set since, and a pushing step reads every boundary from the cell's own slot),
    /// and whether the first and the last z plane are a split's halo planes, which do not.
    pub fn set_pushed(&mut self, pushed: bool, halos: bool) {
        self.args_mut().unpushed = match (pushed, halos) {
            (false, _) => 2,
            (true, true) => 1,
            (true, false) => 0,
        };
    }

    /// Shifts the rows the GPU's threads run by `shift` cells ([`shifted`]): less than a row.
    pub fn set_shift(&mut self, shift: u32) -> Result<(), SpanError> {
        check_len(
            "row shift",
            self.args().dims[0] as usize,
            shift as usize + 1,
        )?;
        self.args_mut().shift = shift;
        Ok(())
    }

    /// Restricts the step to z planes `[first, count]`, which must lie in the grid.
    pub fn set_planes(&mut self, [first, count]: [u32; 2]) -> Result<(), SpanError> {
        let nz = self.args().dims[2];
        check_len("planes", nz as usize, first as usize + count as usize)?;
        self.args_mut().planes = [first, count];
        Ok(())
    }
}

/// The entry of storage `S` that runs `scheme`'s step on `velocities`: with the free-slip mirrors where
/// `slip`, with interpolated links and non-reflecting outlets (and the mirrors) where `full`, which
/// share their entries.
pub fn step_entry<S: StepEntry>(
    velocities: Velocities,
    scheme: Scheme,
    slip: bool,
    full: bool,
) -> &'static str {
    let variant = if full { 2 } else { usize::from(slip) };
    let set = usize::from(velocities == Velocities::D3Q27);
    S::ENTRIES[set][scheme as usize + 3 * variant]
}

/// A storage type's [`Step`] kernel entries, one per [`Scheme`] (a supertrait of [`Storage`], so that
/// generic code over storages needs no bound of its own).
pub trait StepEntry {
    /// Entry names of D3Q19, then of D3Q27: each indexed by `Scheme as usize`, then those with
    /// free-slip cells, then those with interpolated links and outlets that let sound out too.
    const ENTRIES: [[&'static str; 9]; 2];
}

// SAFETY: the entries (`step_entries!`) take one `Step<S, Q>`; a bound step covers its grid
// (`Step::bind`), its threads guard the planes and rows, and each cell of one step writes only its own
// population slots and moments.
unsafe impl<S: Storage, const Q: usize> Kernel for Step<S, Q> {
    const MODULE: &'static str = env!("CARGO_CRATE_NAME");

    fn entry(&self) -> &'static str {
        let scheme = match self.scheme {
            0 => Scheme::Ab,
            1 => Scheme::AaEven,
            _ => Scheme::AaOdd,
        };
        let full = !self.cut_rows.is_null() || self.physics.outlet_follow != S::Real::ZERO;
        step_entry::<S>(Self::VELOCITIES, scheme, self.slip != 0, full)
    }

    fn items(&self) -> usize {
        self.dims[0] as usize * self.dims[1] as usize * self.planes[1] as usize
    }

    #[inline(always)]
    unsafe fn item(&self, i: usize) {
        let (nx, ny) = (self.dims[0] as usize, self.dims[1] as usize);
        let xyz = [
            (i % nx) as u32,
            (i / nx % ny) as u32,
            self.planes[0] + (i / nx / ny) as u32,
        ];
        // SAFETY: bound, so the grid is covered and the planes lie in it; the caller runs each item once.
        unsafe {
            // On the CPU the mirrored reads and the interpolation cost nothing where there are none.
            match self.scheme {
                0 => self.cell::<{ Scheme::Ab as u32 }, true, true>(xyz),
                1 => self.cell::<{ Scheme::AaEven as u32 }, true, true>(xyz),
                _ => self.cell::<{ Scheme::AaOdd as u32 }, true, true>(xyz),
            }
        }
    }
}
macro_rules! step_entries {
    ($s:ty => $($q:literal: $plain:tt, $slip:tt, $cut:tt);*) => {
        $(
            step_entries!(@three $s, $q, $plain, false, false);
            step_entries!(@three $s, $q, $slip, true, false);
            step_entries!(@three $s, $q, $cut, true, true);
        )*
        impl StepEntry for $s {
            const ENTRIES: [[&'static str; 9]; 2] = [$(step_entries!(@names $plain $slip $cut)),*];
        }
    };
    (@names $([$ab:ident, $even:ident, $odd:ident])*) => {
        [$(stringify!($ab), stringify!($even), stringify!($odd)),*]
    };
    (@three $s:ty, $q:literal, [$ab:ident, $even:ident, $odd:ident], $slip:literal, $cut:literal) => {
        step_entries!(@one $s, $q, $ab, Scheme::Ab, $slip, $cut);
        step_entries!(@one $s, $q, $even, Scheme::AaEven, $slip, $cut);
        step_entries!(@one $s, $q, $odd, Scheme::AaOdd, $slip, $cut);
    };
    (@one $s:ty, $q:literal, $name:ident, $scheme:expr, $slip:literal, $cut:literal) => {
        crate::kernel! {
            /// Generated kernel entry: one thread per cell, 2-D blocks in xy, one z plane per grid layer
            /// (no divisions to find the cell).
            pub unsafe fn $name(s: Step<$s, $q>) {
                let x = thread::block_idx_x() * thread::block_dim_x() + thread::thread_idx_x();
                let y = thread::block_idx_y() * thread::block_dim_y() + thread::thread_idx_y();
                let z = thread::block_idx_z();
                if x < s.dims[0] && y < s.dims[1] && z < s.planes[1] {
                    let x = shifted(s.dims[0], s.shift, x);
                    s.cell::<{ $scheme as u32 }, $slip, $cut>([x, y, s.planes[0] + z])
                }
            }
        }
    };
}

step_entries!(f32 =>
    19: [lbm_ab_f32, lbm_aa_even_f32, lbm_aa_odd_f32],
        [lbm_ab_slip_f32, lbm_aa_even_slip_f32, lbm_aa_odd_slip_f32],
        [lbm_ab_full_f32, lbm_aa_even_full_f32, lbm_aa_odd_full_f32];
    27: [lbm_q27_ab_f32, lbm_q27_aa_even_f32, lbm_q27_aa_odd_f32],
        [lbm_q27_ab_slip_f32, lbm_q27_aa_even_slip_f32, lbm_q27_aa_odd_slip_f32],
        [lbm_q27_ab_full_f32, lbm_q27_aa_even_full_f32, lbm_q27_aa_odd_full_f32]);
step_entries!(f64 =>
    19: [lbm_ab_f64, lbm_aa_even_f64, lbm_aa_odd_f64],
        [lbm_ab_slip_f64, lbm_aa_even_slip_f64, lbm_aa_odd_slip_f64],
        [lbm_ab_full_f64, lbm_aa_even_full_f64, lbm_aa_odd_full_f64];
    27: [lbm_q27_ab_f64, lbm_q27_aa_even_f64, lbm_q27_aa_odd_f64],
        [lbm_q27_ab_slip_f64, lbm_q27_aa_even_slip_f64, lbm_q27_aa_odd_slip_f64],
        [lbm_q27_ab_full_f64, lbm_q27_aa_even_full_f64, lbm_q27_aa_odd_full_f64]);
step_entries!(super::Half =>
    19: [lbm_ab_f16, lbm_aa_even_f16, lbm_aa_odd_f16],
        [lbm_ab_slip_f16, lbm_aa_even_slip_f16, lbm_aa_odd_slip_f16],
        [lbm_ab_full_f16, lbm_aa_even_full_f16, lbm_aa_odd_full_f16];
    27: [lbm_q27_ab_f16, lbm_q27_aa_even_f16, lbm_q27_aa_odd_f16],
        [lbm_q27_ab_slip_f16, lbm_q27_aa_even_slip_f16, lbm_q27_aa_odd_slip_f16],
        [lbm_q27_ab_full_f16, lbm_q27_aa_even_full_f16, lbm_q27_aa_odd_full_f16]);
