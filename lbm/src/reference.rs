//! A naive CPU reference for the D3Q19 and D3Q27 lattice-Boltzmann solvers: f64, array of
//! structures, one cell at a time, two arrays.
//!
//! It exists to check the optimised implementation, so it is written from the specification
//! alone and shares nothing with it: its own velocity tables, weights and opposite map. Clarity
//! wins over speed everywhere; a test grid of a few thousand cells runs hundreds of steps in well
//! under a second, which is all a reference needs.
//!
//! The velocity set is chosen per solver ([`RefLattice`]): D3Q19, or D3Q27, whose first 19
//! velocities are D3Q19's in the same order, so that population `q` means the same velocity in
//! both. Every rule below is the same for both, summed over the chosen set with its weights.
//!
//! The model: pull streaming with halfway bounce-back at wall cells (moving walls add the usual
//! `6 w_q rho_w (c_q . u_w)`, `rho_w = 1`; inlet cells the same with the inflow profile's velocity at
//! the link's midpoint; outlet cells send anti-bounce-back `-f*_opp + 2 w_q rho_out (1 + 4.5 (c.u)^2 -
//! 1.5 u.u)`, `u` being the velocity of the streamed populations with the velocity terms left out;
//! a resting wall whose surface lies a share `d` along the link instead sends Bouzidi, Firdaouss and
//! Lallemand's linear interpolation: `2 d f*_k(x) + (1 - 2 d) f*_k(x - c_k)` for `d < 1/2`, the cell
//! upstream being fluid, `f*_k(x) / (2 d) + (1 - 1 / (2 d)) f*_opp(k)(x)` for `d >= 1/2`),
//! Guo forcing with the half-force velocity shift, and a
//! two-relaxation-time collision that reduces to BGK when no magic parameter is given. The state
//! of a cell is its `q` full post-collision populations of the last step.

// Index loops over q and the axes read like the sums in the specification, which is the point
// of a reference.
#![allow(clippy::needless_range_loop)]

/// Number of discrete velocities of D3Q19.
pub const REF_Q: usize = 19;

/// Number of discrete velocities of D3Q27.
pub const REF_Q27: usize = 27;

/// The D3Q27 velocities: rest, the six faces, the twelve edges, then the eight corners, each
/// moving one followed by its opposite so that `q` and [`ref_opposite`]`(q)` are neighbours in the
/// table. The first [`REF_Q`] are D3Q19's ([`REF_C`]).
pub const REF_C27: [[i32; 3]; REF_Q27] = [
    [0, 0, 0],
    [1, 0, 0],
    [-1, 0, 0],
    [0, 1, 0],
    [0, -1, 0],
    [0, 0, 1],
    [0, 0, -1],
    [1, 1, 0],
    [-1, -1, 0],
    [1, 0, 1],
    [-1, 0, -1],
    [0, 1, 1],
    [0, -1, -1],
    [1, -1, 0],
    [-1, 1, 0],
    [1, 0, -1],
    [-1, 0, 1],
    [0, 1, -1],
    [0, -1, 1],
    [1, 1, 1],
    [-1, -1, -1],
    [1, 1, -1],
    [-1, -1, 1],
    [1, -1, 1],
    [-1, 1, -1],
    [-1, 1, 1],
    [1, -1, -1],
];

/// The D3Q19 velocities: rest, the six faces, then the twelve edges, each followed by its
/// opposite so that `q` and [`ref_opposite`]`(q)` are neighbours in the table.
pub const REF_C: [[i32; 3]; REF_Q] = {
    // One table, so that D3Q19 cannot drift from D3Q27's first 19.
    let mut c = [[0; 3]; REF_Q];
    let mut q = 0;
    while q < REF_Q {
        c[q] = REF_C27[q];
        q += 1;
    }
    c
};

const W_REST: f64 = 1.0 / 3.0;
const W_FACE: f64 = 1.0 / 18.0;
const W_EDGE: f64 = 1.0 / 36.0;

/// The lattice weights of [`REF_C`]: 1/3 at rest, 1/18 on faces, 1/36 on edges.
pub const REF_W: [f64; REF_Q] = [
    W_REST, W_FACE, W_FACE, W_FACE, W_FACE, W_FACE, W_FACE, W_EDGE, W_EDGE, W_EDGE, W_EDGE, W_EDGE,
    W_EDGE, W_EDGE, W_EDGE, W_EDGE, W_EDGE, W_EDGE, W_EDGE,
];

const W27_REST: f64 = 8.0 / 27.0;
const W27_FACE: f64 = 2.0 / 27.0;
const W27_EDGE: f64 = 1.0 / 54.0;
const W27_CORNER: f64 = 1.0 / 216.0;

/// The lattice weights of [`REF_C27`]: 8/27 at rest, 2/27 on faces, 1/54 on edges, 1/216 on
/// corners.
pub const REF_W27: [f64; REF_Q27] = [
    W27_REST, W27_FACE, W27_FACE, W27_FACE, W27_FACE, W27_FACE, W27_FACE, W27_EDGE, W27_EDGE,
    W27_EDGE, W27_EDGE, W27_EDGE, W27_EDGE, W27_EDGE, W27_EDGE, W27_EDGE, W27_EDGE, W27_EDGE,
    W27_EDGE, W27_CORNER, W27_CORNER, W27_CORNER, W27_CORNER, W27_CORNER, W27_CORNER, W27_CORNER,
    W27_CORNER,
];

/// The velocity set of a [`Reference`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefLattice {
    /// Rest, faces and edges: [`REF_C`] with [`REF_W`].
    D3Q19,
    /// Rest, faces, edges and corners: [`REF_C27`] with [`REF_W27`].
    D3Q27,
}

impl RefLattice {
    /// Number of discrete velocities: 19 or 27.
    pub fn q(self) -> usize {
        match self {
            RefLattice::D3Q19 => REF_Q,
            RefLattice::D3Q27 => REF_Q27,
        }
    }

    /// The discrete velocities, in the shared order (D3Q19's are D3Q27's first 19).
    pub fn velocities(self) -> &'static [[i32; 3]] {
        &REF_C27[..self.q()]
    }

    /// The lattice weights, one per velocity of [`velocities`](Self::velocities).
    pub fn weights(self) -> &'static [f64] {
        match self {
            RefLattice::D3Q19 => &REF_W,
            RefLattice::D3Q27 => &REF_W27,
        }
    }
}

/// The index of the velocity opposite to `q` (`c = -c_q`) in either set; 0 is its own opposite.
///
/// Panics if `q >= REF_Q27`.
pub fn ref_opposite(q: usize) -> usize {
    assert!(q < REF_Q27, "velocity index {q} out of range 0..{REF_Q27}");
    // REF_C27 lists each moving velocity right before its opposite, starting at 1.
    match q {
        0 => 0,
        q if q % 2 == 1 => q + 1,
        q => q - 1,
    }
}

const FLUID: u8 = 0;
const RESTING_WALL: u8 = 1;
const MOVING_WALL: u8 = 2;
const INLET: u8 = 4;
const OUTLET: u8 = 8;
/// Free-slip walls: bit `4 + a` set where the wall's normal lies along axis `a`.
const SLIP_BITS: u8 = 0x70;
/// The optimised code marks fluid cells next to walls with this bit; the reference finds walls
/// itself, so it only strips the bit.
const HINT_BIT: u8 = 0x80;

/// Physical parameters of a [`Reference`] run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RefParams {
    /// Relaxation time of the symmetric part (`omega_plus = 1 / tau`); kinematic viscosity is
    /// `(tau - 1/2) / 3`. Must be above 1/2.
    pub tau: f64,
    /// TRT magic parameter Lambda; `None` gives BGK (`omega_minus = omega_plus`). Must be
    /// positive.
    pub magic: Option<f64>,
    /// Body-force density `F`, the same in every fluid cell (Guo forcing).
    pub force: [f64; 3],
    /// Velocity `u_w` of every moving-wall cell (tag 2).
    pub wall_velocity: [f64; 3],
    /// The inflow velocity at the peak of its profile (inlet cells, tag 4), once ramped up.
    pub inflow: [f64; 3],
    /// Per axis, the coordinates `(a, b)` of a parabolic profile `4 (p - a)(b - p) / (b - a)^2`, or
    /// `None` for a uniform one.
    pub parabola: [Option<[f64; 2]>; 3],
    /// Steps `T` of the ramp: at step `t` (the first is 1) the inflow is scaled by
    /// `sin^2(pi t / (2 T))` while `t < T`.
    pub ramp: u64,
    /// The density of the outlet cells (tag 8).
    pub outlet_density: f64,
    /// 0: the outlets hold their density. Otherwise they let sound out: a fluid cell with an outlet
    /// cell on one of its faces (the first of the face directions in table order) sends the density
    /// `rho_out + d` instead, with `d = sqrt(3) (u_n - U)`, `u_n` its velocity along the outward
    /// normal once the populations from the outlets carry `d` too, and `U` a reference kept in the
    /// outlet cell's rest population (less its weight), which moves `(u_n - U) / outlet_memory`
    /// towards that `u_n` each step.
    pub outlet_memory: u64,
}

/// The reference solver: grid, tags, populations and the moments of the last step.
#[derive(Clone, Debug)]
pub struct Reference {
    dims: [usize; 3],
    lattice: RefLattice,
    /// Tags with the hint bit removed: 0 fluid, 1 resting wall, 2 moving wall.
    tags: Vec<u8>,
    params: RefParams,
    /// Post-collision populations of the last step, `q` per cell: cell `n`'s at `n q .. (n + 1) q`.
    f: Vec<f64>,
    /// Where a resting wall's surface lies on a link `(fluid cell, direction into the wall)`, as a
    /// share of the link; halfway where absent.
    surfaces: std::collections::HashMap<(usize, usize), f64>,
    /// `(rho, u)` of each cell as computed in the last step.
    moments: Vec<(f64, [f64; 3])>,
    /// Steps taken.
    steps: u64,
}

impl Reference {
    /// A D3Q19 solver on a periodic `dims` grid with one tag per cell (index `x + nx*(y + ny*z)`),
    /// every cell at rest equilibrium (`rho = 1`, `u = 0`); [`with_lattice`](Self::with_lattice)
    /// with [`RefLattice::D3Q19`].
    ///
    /// Panics if `tags.len()` is not the number of cells, if a tag (without bit 0x80) is not
    /// 0, 1 or 2, if `tau <= 1/2` or if the magic parameter is not positive.
    pub fn new(dims: [usize; 3], tags: Vec<u8>, params: RefParams) -> Self {
        Self::with_lattice(dims, tags, params, RefLattice::D3Q19)
    }

    /// A solver over the velocity set `lattice`, otherwise as [`new`](Self::new).
    ///
    /// Panics as [`new`](Self::new) does.
    pub fn with_lattice(
        dims: [usize; 3],
        tags: Vec<u8>,
        params: RefParams,
        lattice: RefLattice,
    ) -> Self {
        let cells = dims
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .expect("grid too large: the number of cells overflows usize");
        assert_eq!(
            tags.len(),
            cells,
            "{} tags for a {}x{}x{} grid of {cells} cells",
            tags.len(),
            dims[0],
            dims[1],
            dims[2]
        );
        let tags: Vec<u8> = tags.into_iter().map(|t| t & !HINT_BIT).collect();
        let known = [FLUID, RESTING_WALL, MOVING_WALL, INLET, OUTLET];
        let slip = |t: u8| t & !SLIP_BITS == 0 && t != 0;
        if let Some((n, t)) = tags
            .iter()
            .enumerate()
            .find(|&(_, &t)| !known.contains(&t) && !slip(t))
        {
            panic!(
                "cell {n} has tag {t}; tags are 0 (fluid), 1 (resting wall), 2 (moving wall), \
                 4 (inlet), 8 (outlet), or free-slip bits 16, 32, 64 (normal along x, y, z)"
            );
        }
        assert!(
            params.tau > 0.5,
            "tau = {} but must be above 1/2 for a positive viscosity",
            params.tau
        );
        if let Some(magic) = params.magic {
            assert!(magic > 0.0, "magic parameter {magic} must be positive");
        }
        let rest = equilibrium(lattice, 1.0, [0.0; 3]);
        let cells_q = cells
            .checked_mul(lattice.q())
            .expect("grid too large: the number of populations overflows usize");
        Reference {
            dims,
            lattice,
            tags,
            params,
            f: rest.iter().copied().cycle().take(cells_q).collect(),
            moments: vec![(0.0, [0.0; 3]); cells],
            surfaces: std::collections::HashMap::new(),
            steps: 0,
        }
    }

    /// The velocity set this solver runs on.
    pub fn lattice(&self) -> RefLattice {
        self.lattice
    }

    /// Number of discrete velocities, the populations per cell.
    pub fn q(&self) -> usize {
        self.lattice.q()
    }

    /// Cell `n`'s populations as stored: of the last step, or as set.
    fn cell(&self, n: usize) -> &[f64] {
        let q = self.q();
        &self.f[n * q..(n + 1) * q]
    }

    /// `c_q` as reals.
    fn c(&self, q: usize) -> [f64; 3] {
        self.lattice.velocities()[q].map(f64::from)
    }

    /// `w_q`.
    fn w(&self, q: usize) -> f64 {
        self.lattice.weights()[q]
    }

    /// Puts the surface of the resting wall next to fluid cell `n` along `c_k` at `n + d c_k`.
    ///
    /// Panics unless `d` lies in `(0, 1]`.
    pub fn set_wall_distance(&mut self, n: usize, k: usize, d: f64) {
        assert!(d > 0.0 && d <= 1.0, "wall distance {d} outside (0, 1]");
        self.surfaces.insert((n, k), d);
    }

    /// The population a resting wall sends back into fluid cell `n` along `q`: halfway bounce-back,
    /// or interpolated where the wall's surface was placed.
    fn returned_by_resting_wall(&self, n: usize, q: usize) -> f64 {
        let k = ref_opposite(q);
        let sent = self.cell(n)[k];
        match self.surfaces.get(&(n, k)) {
            None => sent,
            Some(&d) if d < 0.5 => {
                let up = self.neighbour(n, k, -1);
                if self.tags[up] == FLUID {
                    2.0 * d * sent + (1.0 - 2.0 * d) * self.cell(up)[k]
                } else {
                    sent
                }
            }
            Some(&d) => sent / (2.0 * d) + (1.0 - 1.0 / (2.0 * d)) * self.cell(n)[q],
        }
    }

    /// The momentum the fluid gives the resting walls on the links `(fluid cell, direction into the
    /// wall)` in the next step's streaming: `c_k (f*_k + what comes back)`, full populations, from
    /// the last step's.
    pub fn momentum_into(&self, links: &[(usize, usize)]) -> [f64; 3] {
        let mut m = [0.0; 3];
        for &(n, k) in links {
            let back = self.returned_by_resting_wall(n, ref_opposite(k));
            let c = self.c(k);
            for a in 0..3 {
                m[a] += c[a] * (self.cell(n)[k] + back);
            }
        }
        m
    }

    /// The grid size `[nx, ny, nz]`.
    pub fn dims(&self) -> [usize; 3] {
        self.dims
    }

    /// Sets cell `n`'s populations to the equilibrium of density `rho` and velocity `u`.
    pub fn set_equilibrium(&mut self, n: usize, rho: f64, u: [f64; 3]) {
        let feq = equilibrium(self.lattice, rho, u);
        self.set_populations(n, &feq);
    }

    /// Sets cell `n`'s `q` (full, post-collision) populations.
    ///
    /// Panics if `f.len()` is not [`q`](Self::q).
    pub fn set_populations(&mut self, n: usize, f: &[f64]) {
        let q = self.q();
        assert_eq!(
            f.len(),
            q,
            "{} populations given for a cell of {:?}, which has {q}",
            f.len(),
            self.lattice
        );
        self.f[n * q..(n + 1) * q].copy_from_slice(f);
    }

    /// Cell `n`'s `q` post-collision populations of the last step (or as set).
    pub fn populations(&self, n: usize) -> Vec<f64> {
        self.cell(n).to_vec()
    }

    /// One time step of every fluid cell: stream (pull, bounce-back at walls), take moments,
    /// collide (TRT/BGK with Guo forcing). Wall cells keep their populations.
    pub fn step(&mut self) {
        let tau = self.params.tau;
        let omega_plus = 1.0 / tau;
        // 1/omega_plus - 1/2 is tau - 1/2.
        let omega_minus = match self.params.magic {
            None => omega_plus,
            Some(magic) => 1.0 / (magic / (tau - 0.5) + 0.5),
        };
        let force = self.params.force;
        let u_wall = self.params.wall_velocity;
        let nq = self.q();

        self.steps += 1;
        let mut new_f = self.f.clone();
        for n in 0..self.tags.len() {
            if self.tags[n] != FLUID {
                self.moments[n] = (0.0, [0.0; 3]);
                continue;
            }
            let mut f = self.stream_into(n, u_wall);
            if let Some((o, reference)) = self.complete_outlets(n, &mut f) {
                new_f[o * nq] = self.w(0) + reference;
            }

            let rho: f64 = f.iter().sum();
            let mut j = [0.0; 3];
            for q in 0..nq {
                let c = self.c(q);
                for a in 0..3 {
                    j[a] += f[q] * c[a];
                }
            }
            let u: [f64; 3] = std::array::from_fn(|a| (j[a] + 0.5 * force[a]) / rho);
            self.moments[n] = (rho, u);

            let feq = equilibrium(self.lattice, rho, u);
            let u_dot_f = dot(u, force);
            let post = &mut new_f[n * nq..(n + 1) * nq];
            for q in 0..nq {
                let o = ref_opposite(q);
                let c = self.c(q);
                let w = self.w(q);
                let f_plus = 0.5 * (f[q] + f[o]);
                let f_minus = 0.5 * (f[q] - f[o]);
                let feq_plus = 0.5 * (feq[q] + feq[o]);
                let feq_minus = 0.5 * (feq[q] - feq[o]);
                let s_plus = w * (-3.0 * u_dot_f + 9.0 * dot(c, u) * dot(c, force));
                let s_minus = 3.0 * w * dot(c, force);
                post[q] =
                    f[q] - omega_plus * (f_plus - feq_plus) - omega_minus * (f_minus - feq_minus)
                        + (1.0 - 0.5 * omega_plus) * s_plus
                        + (1.0 - 0.5 * omega_minus) * s_minus;
            }
        }
        self.f = new_f;
    }

    /// The incoming populations of fluid cell `n`: pulled from the upstream neighbours, or
    /// bounced back from `n`'s own outgoing ones where the upstream cell is a wall.
    fn stream_into(&self, n: usize, u_wall: [f64; 3]) -> Vec<f64> {
        let own = self.cell(n);
        (0..self.q())
            .map(|q| {
                let from = self.neighbour(n, q, -1);
                let w = self.w(q);
                match self.tags[from] {
                    FLUID => self.cell(from)[q],
                    RESTING_WALL => self.returned_by_resting_wall(n, q),
                    MOVING_WALL => own[ref_opposite(q)] + 6.0 * w * 1.0 * dot(self.c(q), u_wall),
                    INLET => {
                        let u_in = self.inflow_at(n, q);
                        own[ref_opposite(q)] + 6.0 * w * 1.0 * dot(self.c(q), u_in)
                    }
                    // The velocity terms are added by `complete_outlets`, once all are streamed.
                    OUTLET => -own[ref_opposite(q)] + 2.0 * w * self.params.outlet_density,
                    t if t & SLIP_BITS != 0 => self.specular(n, q, t),
                    t => unreachable!("tag {t} was rejected in new"),
                }
            })
            .collect()
    }

    /// The population entering fluid cell `n` along `q` from the free-slip cell of tag `t`: the one that
    /// left, a step before, the cell from which the mirror image of `c_q` (its components along the
    /// wall's normals reversed) leads into the wall and, reflected, into `n`: the cell at `n - c_q`
    /// with those components of `c_q` undone. The image meets the wall at the cell `n - c_q` with the
    /// other components undone, which must be free-slip along the same normals. Bounced back where
    /// `c_q` has no component along a normal, the image's wall cell is not such a cell, or its first
    /// cell is not fluid.
    fn specular(&self, n: usize, q: usize, t: u8) -> f64 {
        let velocities = self.lattice.velocities();
        let c = velocities[q];
        let normals =
            |t: u8| -> [bool; 3] { std::array::from_fn(|a| t & (0x10 << a) != 0 && c[a] != 0) };
        let normal = normals(t);
        let [nx, ny, _] = self.dims;
        let pos = [n % nx, (n / nx) % ny, n / (nx * ny)];
        // The cell at n - c_q with the components where `keep` is false undone.
        let back = |keep: [bool; 3]| {
            let p: [usize; 3] = std::array::from_fn(|a| {
                let step = if keep[a] { c[a] } else { 0 };
                (pos[a] as i64 - i64::from(step)).rem_euclid(self.dims[a] as i64) as usize
            });
            p[0] + nx * (p[1] + ny * p[2])
        };
        let bounce = self.cell(n)[ref_opposite(q)];
        if !normal.contains(&true) || normals(self.tags[back(normal)]) != normal {
            return bounce;
        }
        let image: [i32; 3] = std::array::from_fn(|a| if normal[a] { -c[a] } else { c[a] });
        let q_image = velocities
            .iter()
            .position(|&r| r == image)
            .expect("both velocity sets hold every mirror image of their velocities");
        let from = back(normal.map(|b| !b));
        match self.tags[from] {
            FLUID => self.cell(from)[q_image],
            _ => bounce,
        }
    }

    /// The inflow velocity this step at the midpoint of the link into cell `n` along `q`.
    fn inflow_at(&self, n: usize, q: usize) -> [f64; 3] {
        let [nx, ny, _] = self.dims;
        let cell = [n % nx, (n / nx) % ny, n / (nx * ny)];
        let mut share = 1.0;
        let ramp = self.params.ramp;
        if self.steps < ramp {
            share = (std::f64::consts::PI * self.steps as f64 / (2.0 * ramp as f64))
                .sin()
                .powi(2);
        }
        let c = self.c(q);
        for a in 0..3 {
            if let Some([lo, hi]) = self.params.parabola[a] {
                let p = cell[a] as f64 - 0.5 * c[a];
                share *= 4.0 * (p - lo) * (hi - p) / ((hi - lo) * (hi - lo));
            }
        }
        self.params.inflow.map(|v| v * share)
    }

    /// Adds to the populations `f` of cell `n` that came from outlet cells the velocity terms of the
    /// anti-bounce-back, `2 w_q rho_out (4.5 (c.u)^2 - 1.5 u.u)`, `u` the velocity of `f` as streamed;
    /// for outlets that let sound out, also the density's shift (see [`RefParams::outlet_memory`]),
    /// and returns the outlet cell whose reference moved, and the reference's new value.
    fn complete_outlets(&self, n: usize, f: &mut [f64]) -> Option<(usize, f64)> {
        let from_outlet: Vec<usize> = (0..self.q())
            .filter(|&q| self.tags[self.neighbour(n, q, -1)] == OUTLET)
            .collect();
        if from_outlet.is_empty() {
            return None;
        }
        let rho: f64 = f.iter().sum();
        let mut u = [0.0; 3];
        for q in 0..self.q() {
            let c = self.c(q);
            for a in 0..3 {
                u[a] += f[q] * c[a];
            }
        }
        let u = std::array::from_fn(|a| (u[a] + 0.5 * self.params.force[a]) / rho);
        let mut shift = 0.0;
        let mut moved = None;
        let face = from_outlet.iter().find(|&&q| (1..=6).contains(&q));
        if let (Some(&q), m) = (face, self.params.outlet_memory) {
            if m > 0 {
                let o = self.neighbour(n, q, -1);
                let normal = self.c(q).map(|c| -c);
                let (u_n, reference) = (dot(u, normal), self.cell(o)[0] - self.w(0));
                // The velocity the shift leaves, linear in it: solve d = sqrt(3) (u_n + k d - U).
                let k: f64 = from_outlet
                    .iter()
                    .map(|&p| 2.0 * self.w(p) * dot(self.c(p), normal) / rho)
                    .sum();
                shift = 3f64.sqrt() * (u_n - reference) / (1.0 - 3f64.sqrt() * k);
                let left = u_n + k * shift;
                moved = Some((o, reference + (left - reference) / m as f64));
            }
        }
        let rho_out = self.params.outlet_density + shift;
        for q in from_outlet {
            let cu = dot(self.c(q), u);
            f[q] += 2.0 * self.w(q) * (shift + rho_out * (4.5 * cu * cu - 1.5 * dot(u, u)));
        }
        moved
    }

    /// The index of the cell at `n + sign * c_q`, wrapped periodically.
    fn neighbour(&self, n: usize, q: usize, sign: i64) -> usize {
        let [nx, ny, nz] = self.dims;
        let pos = [n % nx, (n / nx) % ny, n / (nx * ny)];
        let c = self.lattice.velocities()[q];
        let moved: [usize; 3] = std::array::from_fn(|a| {
            let size = self.dims[a] as i64;
            (pos[a] as i64 + sign * i64::from(c[a])).rem_euclid(size) as usize
        });
        debug_assert!(moved[2] < nz);
        moved[0] + nx * (moved[1] + ny * moved[2])
    }

    /// `(rho, u)` of cell `n` as computed in the last step, with `u` including the half-force
    /// shift; `(0, [0; 3])` for wall cells and for every cell before the first step.
    pub fn moments(&self, n: usize) -> (f64, [f64; 3]) {
        self.moments[n]
    }

    /// Total mass of the current state: the sum over fluid cells of all populations.
    pub fn mass(&self) -> f64 {
        self.fluid_cells()
            .map(|n| self.cell(n).iter().sum::<f64>())
            .sum()
    }

    /// Total momentum of the current state: the sum over fluid cells of `f_q c_q`, without any
    /// half-force shift.
    pub fn momentum(&self) -> [f64; 3] {
        let mut p = [0.0; 3];
        for n in self.fluid_cells() {
            let f = self.cell(n);
            for q in 0..self.q() {
                let c = self.c(q);
                for a in 0..3 {
                    p[a] += f[q] * c[a];
                }
            }
        }
        p
    }

    fn fluid_cells(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.tags.len()).filter(|&n| self.tags[n] == FLUID)
    }
}

/// The second-order equilibrium `w_q rho (1 + 3 c.u + 4.5 (c.u)^2 - 1.5 u.u)` over `lattice`.
fn equilibrium(lattice: RefLattice, rho: f64, u: [f64; 3]) -> Vec<f64> {
    let uu = dot(u, u);
    lattice
        .velocities()
        .iter()
        .zip(lattice.weights())
        .map(|(c, w)| {
            let cu = dot(c.map(f64::from), u);
            w * rho * (1.0 + 3.0 * cu + 4.5 * cu * cu - 1.5 * uu)
        })
        .collect()
}

fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::f64::consts::PI;

    /// For each property `name(lattice)` below, the tests `name::d3q19` and `name::d3q27`, so that
    /// a failure names the velocity set.
    macro_rules! on_both_lattices {
        ($($name:ident),* $(,)?) => {$(
            mod $name {
                use super::RefLattice;

                #[test]
                fn d3q19() {
                    super::$name(RefLattice::D3Q19)
                }

                #[test]
                fn d3q27() {
                    super::$name(RefLattice::D3Q27)
                }
            }
        )*};
    }

    on_both_lattices!(
        weights_sum_to_one_and_moments_are_isotropic,
        velocities_are_distinct_and_opposites_match,
        equilibrium_has_the_requested_moments,
        uniform_equilibrium_is_a_fixed_point,
        periodic_box_conserves_mass_and_momentum,
        body_force_adds_exactly_f_per_cell_per_step,
        closed_box_with_resting_walls_conserves_mass,
        free_slip_walls_conserve_mass_and_tangential_momentum,
        rest_between_an_inlet_and_a_non_reflecting_outlet_stays_at_rest,
        shear_wave_decays_at_the_viscous_rate,
        couette_flow_is_linear_between_the_walls,
        trt_magic_three_sixteenths_gives_exact_poiseuille_flow,
    );

    fn bgk(tau: f64) -> RefParams {
        RefParams {
            tau,
            magic: None,
            force: [0.0; 3],
            wall_velocity: [0.0; 3],
            inflow: [0.0; 3],
            parabola: [None; 3],
            ramp: 0,
            outlet_density: 1.0,
            outlet_memory: 0,
        }
    }

    fn index(dims: [usize; 3], x: usize, y: usize, z: usize) -> usize {
        x + dims[0] * (y + dims[1] * z)
    }

    fn cells(dims: [usize; 3]) -> usize {
        dims[0] * dims[1] * dims[2]
    }

    fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    }

    fn norm(v: [f64; 3]) -> f64 {
        dot(v, v).sqrt()
    }

    fn delta(a: usize, b: usize) -> f64 {
        if a == b {
            1.0
        } else {
            0.0
        }
    }

    /// `sum_q w_q prod_i c_q[axes[i]]` over `lattice`.
    fn weighted_moment(lattice: RefLattice, axes: &[usize]) -> f64 {
        lattice
            .velocities()
            .iter()
            .zip(lattice.weights())
            .map(|(c, w)| w * axes.iter().map(|&a| f64::from(c[a])).product::<f64>())
            .sum()
    }

    /// Every cell at a random equilibrium near `(1, u0)`, so that all populations differ.
    fn perturb(sim: &mut Reference, u0: [f64; 3], seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        for n in 0..cells(sim.dims()) {
            let rho = 1.0 + rng.random_range(-0.05..0.05);
            let u = u0.map(|c| c + rng.random_range(-0.02..0.02));
            sim.set_equilibrium(n, rho, u);
        }
    }

    fn weights_sum_to_one_and_moments_are_isotropic(lattice: RefLattice) {
        let sum: f64 = lattice.weights().iter().sum();
        assert!((sum - 1.0).abs() < 1e-15, "weights sum to {sum}");
        for a in 0..3 {
            let first = weighted_moment(lattice, &[a]);
            assert!(first.abs() < 1e-15, "first moment {a} is {first}");
            for b in 0..3 {
                let second = weighted_moment(lattice, &[a, b]);
                let expected = delta(a, b) / 3.0;
                assert!(
                    (second - expected).abs() < 1e-15,
                    "second moment ({a}, {b}) is {second}"
                );
                for c in 0..3 {
                    let third = weighted_moment(lattice, &[a, b, c]);
                    assert!(
                        third.abs() < 1e-15,
                        "third moment ({a}, {b}, {c}) is {third}"
                    );
                    // The second-order equilibrium's stress is right only if the fourth moment is
                    // the isotropic tensor (d_ab d_cd + d_ac d_bd + d_ad d_bc) / 9.
                    for d in 0..3 {
                        let fourth = weighted_moment(lattice, &[a, b, c, d]);
                        let expected = (delta(a, b) * delta(c, d)
                            + delta(a, c) * delta(b, d)
                            + delta(a, d) * delta(b, c))
                            / 9.0;
                        assert!(
                            (fourth - expected).abs() < 1e-15,
                            "fourth moment ({a}, {b}, {c}, {d}) is {fourth}, not {expected}"
                        );
                    }
                }
            }
        }
        // The two cases the above covers, spelt out: sum w c_a^4 = 1/3, sum w c_a^2 c_b^2 = 1/9.
        for a in 0..3 {
            let aaaa = weighted_moment(lattice, &[a, a, a, a]);
            assert!((aaaa - 1.0 / 3.0).abs() < 1e-15, "sum w c_{a}^4 is {aaaa}");
            for b in (0..3).filter(|&b| b != a) {
                let aabb = weighted_moment(lattice, &[a, a, b, b]);
                assert!(
                    (aabb - 1.0 / 9.0).abs() < 1e-15,
                    "sum w c_{a}^2 c_{b}^2 is {aabb}"
                );
            }
        }
    }

    fn velocities_are_distinct_and_opposites_match(lattice: RefLattice) {
        let (c, w) = (lattice.velocities(), lattice.weights());
        assert_eq!(c.len(), lattice.q());
        assert_eq!(w.len(), lattice.q());
        let by_speed: &[f64] = match lattice {
            RefLattice::D3Q19 => &[W_REST, W_FACE, W_EDGE],
            RefLattice::D3Q27 => &[W27_REST, W27_FACE, W27_EDGE, W27_CORNER],
        };
        let mut per_speed = vec![0; by_speed.len()];
        for q in 0..lattice.q() {
            let o = ref_opposite(q);
            assert!(o < lattice.q(), "opposite of {q} is {o}, outside the set");
            assert_eq!(c[o], c[q].map(|c| -c), "opposite of {q}");
            assert_eq!(ref_opposite(o), q);
            for p in 0..q {
                assert_ne!(c[p], c[q], "{p} and {q} repeat a velocity");
            }
            assert!(c[q].iter().all(|c| c.abs() <= 1), "{q} reaches too far");
            let speed2 = c[q].iter().map(|c| c * c).sum::<i32>() as usize;
            assert_eq!(w[q], by_speed[speed2], "weight of {q}");
            per_speed[speed2] += 1;
            // Classes come in order of speed: rest, faces, edges, corners.
            if q > 0 {
                let before = c[q - 1].iter().map(|c| c * c).sum::<i32>() as usize;
                assert!(before <= speed2, "{q} is out of the order of speeds");
            }
        }
        let expected: &[usize] = match lattice {
            RefLattice::D3Q19 => &[1, 6, 12],
            RefLattice::D3Q27 => &[1, 6, 12, 8],
        };
        assert_eq!(per_speed, expected, "velocities per speed");
    }

    #[test]
    fn d3q27_extends_d3q19_by_the_eight_corners_in_the_given_order() {
        let (c19, c27) = (
            RefLattice::D3Q19.velocities(),
            RefLattice::D3Q27.velocities(),
        );
        assert_eq!(c19, &REF_C[..]);
        assert_eq!(RefLattice::D3Q19.weights(), &REF_W[..]);
        assert_eq!(RefLattice::D3Q27.weights(), &REF_W27[..]);
        assert_eq!(&c27[..REF_Q], c19, "D3Q27 must start with D3Q19");
        let corners = [
            [1, 1, 1],
            [-1, -1, -1],
            [1, 1, -1],
            [-1, -1, 1],
            [1, -1, 1],
            [-1, 1, -1],
            [-1, 1, 1],
            [1, -1, -1],
        ];
        assert_eq!(&c27[REF_Q..], &corners[..]);
        assert_eq!((RefLattice::D3Q19.q(), RefLattice::D3Q27.q()), (19, 27));
    }

    #[test]
    #[should_panic(expected = "out of range 0..27")]
    fn opposite_of_an_index_past_d3q27_panics() {
        ref_opposite(REF_Q27);
    }

    fn equilibrium_has_the_requested_moments(lattice: RefLattice) {
        let (rho, u) = (1.07, [0.03, -0.05, 0.02]);
        let feq = equilibrium(lattice, rho, u);
        assert_eq!(feq.len(), lattice.q());
        let c = lattice.velocities();
        let mass: f64 = feq.iter().sum();
        assert!((mass - rho).abs() < 1e-15);
        for a in 0..3 {
            let j: f64 = (0..lattice.q()).map(|q| feq[q] * f64::from(c[q][a])).sum();
            assert!((j - rho * u[a]).abs() < 1e-15, "momentum {a}: {j}");
            for b in 0..3 {
                let pi: f64 = (0..lattice.q())
                    .map(|q| feq[q] * f64::from(c[q][a] * c[q][b]))
                    .sum();
                let expected = rho * (delta(a, b) / 3.0 + u[a] * u[b]);
                assert!(
                    (pi - expected).abs() < 1e-15,
                    "momentum flux ({a}, {b}): {pi}, expected {expected}"
                );
            }
        }
    }

    fn uniform_equilibrium_is_a_fixed_point(lattice: RefLattice) {
        let dims = [5, 4, 3];
        for magic in [None, Some(0.25)] {
            let params = RefParams { magic, ..bgk(0.7) };
            let mut sim = Reference::with_lattice(dims, vec![0; cells(dims)], params, lattice);
            let (rho, u) = (1.1, [0.05, -0.02, 0.03]);
            for n in 0..cells(dims) {
                sim.set_equilibrium(n, rho, u);
            }
            let before = sim.populations(0);
            assert_eq!(before.len(), lattice.q());
            sim.step();
            for n in 0..cells(dims) {
                let d = max_abs_diff(&sim.populations(n), &before);
                assert!(d < 1e-14, "cell {n} changed by {d} (magic {magic:?})");
                let (r, v) = sim.moments(n);
                assert!((r - rho).abs() < 1e-14);
                assert!(max_abs_diff(&v, &u) < 1e-14);
            }
        }
    }

    fn periodic_box_conserves_mass_and_momentum(lattice: RefLattice) {
        let dims = [8, 6, 5];
        for magic in [None, Some(3.0 / 16.0)] {
            let params = RefParams { magic, ..bgk(0.65) };
            let mut sim = Reference::with_lattice(dims, vec![0; cells(dims)], params, lattice);
            perturb(&mut sim, [0.04, -0.03, 0.02], 1);
            let (m0, p0) = (sim.mass(), sim.momentum());
            for _ in 0..200 {
                sim.step();
            }
            let (m, p) = (sim.mass(), sim.momentum());
            assert!(
                ((m - m0) / m0).abs() < 1e-12,
                "mass {m0} -> {m} (magic {magic:?})"
            );
            let dp = norm([p[0] - p0[0], p[1] - p0[1], p[2] - p0[2]]);
            assert!(
                dp / norm(p0) < 1e-12,
                "momentum {p0:?} -> {p:?} (magic {magic:?})"
            );
        }
    }

    fn body_force_adds_exactly_f_per_cell_per_step(lattice: RefLattice) {
        let dims = [6, 5, 4];
        let force = [1e-4, -2e-5, 3e-5];
        for magic in [None, Some(0.25)] {
            let params = RefParams {
                magic,
                force,
                ..bgk(0.9)
            };
            let mut sim = Reference::with_lattice(dims, vec![0; cells(dims)], params, lattice);
            perturb(&mut sim, [0.0; 3], 2);
            let m0 = sim.mass();
            let per_step = force.map(|f| f * cells(dims) as f64);
            for step in 0..50 {
                let before = sim.momentum();
                sim.step();
                let after = sim.momentum();
                let gained: [f64; 3] = std::array::from_fn(|a| after[a] - before[a]);
                let err = norm(std::array::from_fn(|a| gained[a] - per_step[a]));
                assert!(
                    err < 1e-12 * norm(per_step),
                    "step {step}: gained {gained:?}, expected {per_step:?} (magic {magic:?})"
                );
            }
            assert!(((sim.mass() - m0) / m0).abs() < 1e-12);
        }
    }

    fn closed_box_with_resting_walls_conserves_mass(lattice: RefLattice) {
        let dims = [8, 7, 6];
        let mut tags = vec![0u8; cells(dims)];
        for z in 0..dims[2] {
            for y in 0..dims[1] {
                for x in 0..dims[0] {
                    let on_face = x == 0
                        || y == 0
                        || z == 0
                        || x == dims[0] - 1
                        || y == dims[1] - 1
                        || z == dims[2] - 1;
                    let n = index(dims, x, y, z);
                    // Fluid cells next to a wall carry the hint bit, which must not matter.
                    tags[n] = if on_face { RESTING_WALL } else { HINT_BIT };
                }
            }
        }
        for magic in [None, Some(3.0 / 16.0)] {
            let params = RefParams { magic, ..bgk(0.8) };
            let mut sim = Reference::with_lattice(dims, tags.clone(), params, lattice);
            perturb(&mut sim, [0.03, 0.02, -0.01], 3);
            let wall_cell = sim.populations(0);
            let m0 = sim.mass();
            for _ in 0..200 {
                sim.step();
            }
            let m = sim.mass();
            assert!(
                ((m - m0) / m0).abs() < 1e-12,
                "mass {m0} -> {m} (magic {magic:?})"
            );
            assert_eq!(sim.populations(0), wall_cell, "a wall cell changed");
            assert_eq!(sim.moments(0), (0.0, [0.0; 3]));
            // The walls stop the initial mean flow, which a periodic box would keep for ever.
            let left = norm(sim.momentum()) / (norm([0.03, 0.02, -0.01]) * m);
            assert!(left < 0.1, "{left} of the initial momentum is left");
        }
    }

    fn free_slip_walls_conserve_mass_and_tangential_momentum(lattice: RefLattice) {
        // Free-slip plates at y = 0 and y = ny - 1 reflect c_y only, so they exchange no x or z
        // momentum with the fluid: the force's x and z parts arrive whole. A wrong mirror image
        // (D3Q27's corners included) would move tangential momentum or mass.
        let dims = [5, 7, 4];
        let force = [2e-5, 1e-5, -3e-5];
        let mut tags = vec![0u8; cells(dims)];
        for z in 0..dims[2] {
            for x in 0..dims[0] {
                tags[index(dims, x, 0, z)] = 0x20;
                tags[index(dims, x, dims[1] - 1, z)] = 0x20;
            }
        }
        let fluid = (dims[1] - 2) * dims[0] * dims[2];
        for magic in [None, Some(3.0 / 16.0)] {
            let params = RefParams {
                magic,
                force,
                ..bgk(0.7)
            };
            let mut sim = Reference::with_lattice(dims, tags.clone(), params, lattice);
            perturb(&mut sim, [0.03, 0.0, -0.02], 4);
            let (m0, p0) = (sim.mass(), sim.momentum());
            let steps = 100;
            for _ in 0..steps {
                sim.step();
            }
            let (m, p) = (sim.mass(), sim.momentum());
            assert!(
                ((m - m0) / m0).abs() < 1e-12,
                "mass {m0} -> {m} (magic {magic:?})"
            );
            for a in [0, 2] {
                let expected = p0[a] + force[a] * (fluid * steps) as f64;
                assert!(
                    (p[a] - expected).abs() < 1e-12 * expected.abs(),
                    "momentum {a}: {} -> {}, expected {expected} (magic {magic:?})",
                    p0[a],
                    p[a]
                );
            }
        }
    }

    fn rest_between_an_inlet_and_a_non_reflecting_outlet_stays_at_rest(lattice: RefLattice) {
        // The outlet keeps its reference velocity in its rest population less w_0, so a set that
        // mistook w_0 would see a velocity at rest, shift the density and set the fluid moving.
        let dims = [3, 6, 2];
        let mut tags = vec![0u8; cells(dims)];
        for z in 0..dims[2] {
            for x in 0..dims[0] {
                tags[index(dims, x, 0, z)] = INLET;
                tags[index(dims, x, dims[1] - 1, z)] = OUTLET;
            }
        }
        for magic in [None, Some(0.25)] {
            let params = RefParams {
                magic,
                ramp: 3,
                outlet_memory: 4,
                ..bgk(0.7)
            };
            let mut sim = Reference::with_lattice(dims, tags.clone(), params, lattice);
            let rest = lattice.weights().to_vec();
            for step in 1..=20 {
                sim.step();
                for n in 0..cells(dims) {
                    let d = max_abs_diff(&sim.populations(n), &rest);
                    assert!(
                        d < 1e-15,
                        "step {step} cell {n} moved by {d} (magic {magic:?})"
                    );
                }
            }
        }
    }

    fn shear_wave_decays_at_the_viscous_rate(lattice: RefLattice) {
        let dims = [1, 32, 1];
        let tau = 0.8;
        let amplitude = 1e-3;
        let k = 2.0 * PI / dims[1] as f64;
        let nu = (tau - 0.5) / 3.0;
        let mut sim = Reference::with_lattice(dims, vec![0; cells(dims)], bgk(tau), lattice);
        for y in 0..dims[1] {
            let u = [amplitude * (k * y as f64).sin(), 0.0, 0.0];
            sim.set_equilibrium(index(dims, 0, y, 0), 1.0, u);
        }
        let steps = 200;
        for _ in 0..steps {
            sim.step();
        }
        // The projection on the initial mode: the amplitude of the surviving sine.
        let measured: f64 = (0..dims[1])
            .map(|y| sim.moments(index(dims, 0, y, 0)).1[0] * (k * y as f64).sin())
            .sum::<f64>()
            * 2.0
            / dims[1] as f64;
        let expected = amplitude * (-nu * k * k * steps as f64).exp();
        let rel = (measured - expected).abs() / expected;
        assert!(
            rel < 0.01,
            "amplitude {measured:e}, expected {expected:e} (relative error {rel:e})"
        );
        // The decay must be visible, or the check above would not test the viscosity.
        assert!(expected < 0.5 * amplitude);
    }

    fn couette_flow_is_linear_between_the_walls(lattice: RefLattice) {
        // Resting wall at y = 0, moving wall at y = ny - 1; halfway bounce-back puts the wall
        // surfaces at y = 1/2 and y = ny - 3/2, where the velocity is 0 and U.
        let dims = [1, 10, 1];
        let wall_u = 0.02;
        let mut tags = vec![0u8; cells(dims)];
        tags[index(dims, 0, 0, 0)] = RESTING_WALL;
        tags[index(dims, 0, dims[1] - 1, 0)] = MOVING_WALL;
        let params = RefParams {
            wall_velocity: [wall_u, 0.0, 0.0],
            ..bgk(1.0)
        };
        let mut sim = Reference::with_lattice(dims, tags, params, lattice);
        for _ in 0..4000 {
            sim.step();
        }
        let width = (dims[1] - 2) as f64;
        for y in 1..dims[1] - 1 {
            let (_, u) = sim.moments(index(dims, 0, y, 0));
            let expected = wall_u * (y as f64 - 0.5) / width;
            assert!(
                (u[0] - expected).abs() < 1e-9 * wall_u,
                "y = {y}: u_x = {}, expected {expected}",
                u[0]
            );
            assert!(u[1].abs() < 1e-12 && u[2].abs() < 1e-12);
        }
    }

    fn trt_magic_three_sixteenths_gives_exact_poiseuille_flow(lattice: RefLattice) {
        // With Lambda = 3/16 halfway bounce-back puts the walls exactly halfway for any tau,
        // so the discrete profile is the analytic parabola; tau = 1.5 makes BGK visibly wrong.
        let dims = [1, 12, 1];
        let tau = 1.5;
        let force = 1e-6;
        let mut tags = vec![0u8; cells(dims)];
        tags[index(dims, 0, 0, 0)] = RESTING_WALL;
        tags[index(dims, 0, dims[1] - 1, 0)] = RESTING_WALL;
        let profile = |magic| {
            let params = RefParams {
                magic,
                force: [force, 0.0, 0.0],
                ..bgk(tau)
            };
            let mut sim = Reference::with_lattice(dims, tags.clone(), params, lattice);
            for _ in 0..3000 {
                sim.step();
            }
            (1..dims[1] - 1)
                .map(|y| sim.moments(index(dims, 0, y, 0)).1[0])
                .collect::<Vec<f64>>()
        };
        let nu = (tau - 0.5) / 3.0;
        let (lo, hi) = (0.5, dims[1] as f64 - 1.5);
        let exact: Vec<f64> = (1..dims[1] - 1)
            .map(|y| force / (2.0 * nu) * (y as f64 - lo) * (hi - y as f64))
            .collect();
        let peak = exact.iter().cloned().fold(0.0, f64::max);
        let trt_err = max_abs_diff(&profile(Some(3.0 / 16.0)), &exact) / peak;
        let bgk_err = max_abs_diff(&profile(None), &exact) / peak;
        assert!(trt_err < 1e-9, "TRT relative error {trt_err:e}");
        assert!(
            bgk_err > 1e-3,
            "BGK relative error {bgk_err:e} should show the wall slip"
        );
    }

    /// `new` means D3Q19; `with_lattice` takes either; both start at rest, their weights in every cell.
    #[test]
    fn each_lattice_starts_at_rest_with_its_populations_per_cell() {
        let dims = [3, 2, 2];
        let tags = || vec![0; cells(dims)];
        let d3q27 = Reference::with_lattice(dims, tags(), bgk(0.8), RefLattice::D3Q27);
        for (sim, lattice, weights) in [
            (
                Reference::new(dims, tags(), bgk(0.8)),
                RefLattice::D3Q19,
                &REF_W[..],
            ),
            (d3q27, RefLattice::D3Q27, &REF_W27[..]),
        ] {
            assert_eq!((sim.lattice(), sim.q()), (lattice, weights.len()));
            for n in 0..cells(dims) {
                assert_eq!(sim.populations(n), weights, "{lattice:?} cell {n}");
            }
        }
    }

    #[test]
    fn set_populations_round_trips_per_cell() {
        let dims = [2, 2, 1];
        let mut sim =
            Reference::with_lattice(dims, vec![0; cells(dims)], bgk(0.8), RefLattice::D3Q27);
        let f: Vec<f64> = (0..REF_Q27).map(|q| 0.01 * q as f64).collect();
        sim.set_populations(2, &f);
        assert_eq!(sim.populations(2), f);
        for n in [0, 1, 3] {
            assert_eq!(sim.populations(n), REF_W27.to_vec(), "cell {n} was touched");
        }
    }

    #[test]
    #[should_panic(expected = "19 populations given for a cell of D3Q27, which has 27")]
    fn setting_d3q19_populations_on_d3q27_panics() {
        let dims = [2, 2, 2];
        let mut sim =
            Reference::with_lattice(dims, vec![0; cells(dims)], bgk(0.8), RefLattice::D3Q27);
        sim.set_populations(0, &REF_W);
    }

    #[test]
    #[should_panic(expected = "tags for a")]
    fn wrong_number_of_tags_panics() {
        Reference::new([2, 2, 2], vec![0; 7], bgk(0.8));
    }
}
