//! The lattice-Boltzmann method on a D3Q19 or D3Q27 lattice (after the Palabos GPU port and FluidX3D):
//! one collide-and-stream body per cell, run by the GPU kernels and by the CPU engine alike.
//!
//! Conventions (the `lattice-gpu-lbm` crate and its independent reference follow them too):
//! - grid `[nx, ny, nz]`, cell `n = x + nx * (y + ny * z)`; every axis wraps around (periodic) unless wall
//!   cells close it;
//! - populations in structure-of-arrays order: population `q` of cell `n` at `q * cells + n`, stored as the
//!   deviation `f_q - w_q` from the rest equilibrium (keeps the digits that matter in f32 and f16);
//! - the velocity set ([`Velocities`]) is a compile-time parameter of the step, `Q` populations: D3Q27's
//!   first 19 directions are D3Q19's, so one table ([`C`]) serves both;
//! - one tag byte per cell ([`tag`]): fluid, wall (halfway bounce-back), moving wall (bounce-back with the
//!   wall-velocity correction, wall density 1), inlet (the same with the inflow profile's velocity),
//!   outlet (anti-bounce-back at a given density) and free-slip wall (specular reflection), links into
//!   bodies optionally interpolated at their wall's distance ([`Cuts`]); fluid cells
//!   next to any of them carry [`tag::NEAR_WALL`], set by the host, so that only they look at their
//!   neighbours' tags.

mod force;
mod step;
mod storage;

pub use force::{link, ForceEntry, Forces, FORCE_BLOCK};
pub use step::{
    bouzidi, equilibrium, shifted, step_entry, Cuts, Lattices, Physics, Scheme, Step, StepEntry,
    END_SHIFT,
};
pub use storage::{Half, Storage, HALF_SCALE};

/// The populations of the largest velocity set (D3Q27).
pub const Q_MAX: usize = 27;

/// A velocity set: its populations per cell are its value.
#[repr(u32)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Velocities {
    /// Rest, the 6 faces and the 12 edges of the cube: the usual set, 19 populations.
    #[default]
    D3Q19 = 19,
    /// D3Q19 and the 8 corners: more isotropic (for turbulent flows), 27 populations.
    D3Q27 = 27,
}

impl Velocities {
    /// Both sets.
    pub const ALL: [Velocities; 2] = [Velocities::D3Q19, Velocities::D3Q27];

    /// Populations per cell.
    #[inline(always)]
    pub const fn q(self) -> usize {
        self as usize
    }

    /// The set of `q` populations, if there is one.
    pub const fn of(q: usize) -> Option<Self> {
        match q {
            19 => Some(Velocities::D3Q19),
            27 => Some(Velocities::D3Q27),
            _ => None,
        }
    }

    /// `"D3Q19"` or `"D3Q27"`.
    pub const fn name(self) -> &'static str {
        match self {
            Velocities::D3Q19 => "D3Q19",
            Velocities::D3Q27 => "D3Q27",
        }
    }

    /// The set's directions, [`C`]'s first [`q`](Self::q).
    pub fn directions(self) -> &'static [[i32; 3]] {
        &C[..self.q()]
    }

    /// The weight of direction `q` ([`weight`]).
    #[inline(always)]
    pub const fn weight(self, q: usize) -> f64 {
        weight(self.q(), q)
    }
}

/// The velocities: rest, the 6 faces, the 12 edges (D3Q19 ends here), the 8 corners; opposite
/// directions are neighbours (`q` odd and `q + 1`), as in FluidX3D.
pub const C: [[i32; 3]; Q_MAX] = [
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

/// The weight of direction `q` in the set of `count` populations (19 or 27): by the direction's
/// length, `1/3, 1/18, 1/36` (D3Q19) or `8/27, 2/27, 1/54, 1/216` (D3Q27).
#[inline(always)]
pub const fn weight(count: usize, q: usize) -> f64 {
    let c = C[q];
    let len2 = c[0] * c[0] + c[1] * c[1] + c[2] * c[2];
    match (count == Q_MAX, len2) {
        (false, 0) => 1.0 / 3.0,
        (false, 1) => 1.0 / 18.0,
        (false, _) => 1.0 / 36.0,
        (true, 0) => 8.0 / 27.0,
        (true, 1) => 2.0 / 27.0,
        (true, 2) => 1.0 / 54.0,
        (true, _) => 1.0 / 216.0,
    }
}

/// The direction of `q` mirrored along the axes in `axes` (bit `a`: axis `a`): `c_q` with those
/// components reversed.
#[inline(always)]
const fn mirrored(q: usize, axes: u32) -> usize {
    MIRRORED[q][(axes & 7) as usize] as usize
}

/// The axes along which `c_q` moves (bit `a`: axis `a`).
#[inline(always)]
const fn moves_along(q: usize) -> u32 {
    (C[q][0] != 0) as u32 | ((C[q][1] != 0) as u32) << 1 | ((C[q][2] != 0) as u32) << 2
}

/// The specular reflection of the population entering a fluid cell along `q` from a free-slip cell of
/// tag `t` ([`tag::SLIP_X`]): `q` mirrored along the wall's normals that `c_q` crosses, the cell the
/// mirrored path starts at, and the wall cell it meets. `cell(axes)` gives the cell at `-c_q` from
/// the fluid cell with the components along `axes` (bit `a`: axis `a`) left out, and its tag: the
/// start is the one with the normals' components left out, the wall cell the one with the others'.
///
/// `None`, and the link bounces back, unless the mirror is whole: a normal crossed, the start fluid
/// and the wall cell free-slip along the same normals. The cells at the two ends of a mirrored path
/// see the same three cells, so they agree on it.
#[inline(always)]
pub fn mirror<I>(q: usize, t: u8, cell: impl Fn(u32) -> (I, u8)) -> Option<(usize, I, I)> {
    let axes = tag::slip_axes(t) & moves_along(q);
    if axes == 0 {
        return None;
    }
    let (wall, tw) = cell(!axes & 7);
    if tag::slip_axes(tw) & moves_along(q) != axes {
        return None;
    }
    let (start, ts) = cell(axes);
    (!tag::is_boundary(ts)).then_some((mirrored(q, axes), start, wall))
}

/// [`mirrored`] for every direction and set of axes.
const MIRRORED: [[u8; 8]; Q_MAX] = {
    let mut table = [[0u8; 8]; Q_MAX];
    let mut q = 0;
    while q < Q_MAX {
        let mut axes = 0;
        while axes < 8 {
            let mut c = C[q];
            let mut a = 0;
            while a < 3 {
                if axes & (1 << a) != 0 {
                    c[a] = -c[a];
                }
                a += 1;
            }
            let mut r = 0;
            while !(C[r][0] == c[0] && C[r][1] == c[1] && C[r][2] == c[2]) {
                r += 1;
            }
            table[q][axes] = r as u8;
            axes += 1;
        }
        q += 1;
    }
    table
};

/// The direction opposite to `q`.
#[inline(always)]
pub const fn opposite(q: usize) -> usize {
    if q == 0 {
        0
    } else if q % 2 == 1 {
        q + 1
    } else {
        q - 1
    }
}

/// Cell tags: one byte per cell, read by the collide step.
pub mod tag {
    /// A fluid cell.
    pub const FLUID: u8 = 0;
    /// A resting wall: populations bounce back halfway between the fluid cell and the wall.
    pub const WALL: u8 = 1;
    /// A wall moving with the step's wall velocity: bounce-back plus `6 w_q (c_q . u_wall)`.
    pub const MOVING_WALL: u8 = 2;
    /// A velocity inlet: bounce-back with the correction of a wall moving at the inflow profile's velocity
    /// (Ladd's rule, density 1), taken at the midpoint of each link.
    pub const INLET: u8 = 4;
    /// A pressure outlet: anti-bounce-back, `f_q = -f*_opp + 2 w_q rho_out (1 + 4.5 (c_q.u)^2 - 1.5 u.u)`
    /// with `u` the fluid cell's velocity, so that the density on the link's midpoint is `rho_out`
    /// (shifted with the outflow's velocity where it lets sound out: [`Physics::outlet_follow`](super::Physics::outlet_follow)).
    pub const OUTLET: u8 = 8;
    /// A free-slip wall whose normal lies along x: a population entering a fluid cell from it is the one
    /// that its mirror image left, the velocity's component along the normal reversed (specular
    /// reflection), from the fluid cell the mirrored path starts at. It takes no tangential momentum.
    /// Where that cell is not fluid (a corner with another kind of boundary) the link bounces back.
    /// Free-slip cells must form planes across their normal (the sides of a channel), so that the
    /// in-place scheme's mirrored stores meet the cells that read them.
    pub const SLIP_X: u8 = 0x10;
    /// A free-slip wall whose normal lies along y (see [`SLIP_X`]).
    pub const SLIP_Y: u8 = 0x20;
    /// A free-slip wall whose normal lies along z (see [`SLIP_X`]); a cell on two free-slip planes (an
    /// edge of a duct) carries both bits, and mirrors along both.
    pub const SLIP_Z: u8 = 0x40;
    /// Any free-slip bit: bit `4 + a` is the normal along axis `a`.
    pub const SLIP: u8 = SLIP_X | SLIP_Y | SLIP_Z;
    /// Added to a fluid cell with at least one boundary neighbour (set by the host from the geometry).
    pub const NEAR_WALL: u8 = 0x80;

    /// Whether the tag is a boundary cell (a wall of any kind, an inlet or an outlet): never updated,
    /// its fluid neighbours take the populations it would send from their own (or, off a free-slip
    /// wall, from their neighbours').
    #[inline(always)]
    pub const fn is_boundary(t: u8) -> bool {
        t & (WALL | MOVING_WALL | INLET | OUTLET | SLIP) != 0
    }

    /// The axes (bit `a`: axis `a`) along which a free-slip cell of tag `t` mirrors.
    #[inline(always)]
    pub const fn slip_axes(t: u8) -> u32 {
        ((t & SLIP) >> 4) as u32
    }
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;

    #[test]
    fn velocity_set_moments() {
        for v in Velocities::ALL {
            let (q_count, w) = (v.q(), |q: usize| v.weight(q));
            let mut m0 = 0.0;
            let mut m2 = [[0.0; 3]; 3];
            // The fourth moments: isotropic, 1/9 (d_ab d_cd + d_ac d_bd + d_ad d_bc).
            let mut m4 = [[0.0; 3]; 3];
            for q in 0..q_count {
                m0 += w(q);
                for a in 0..3 {
                    for b in 0..3 {
                        let ab = (C[q][a] * C[q][b]) as f64;
                        m2[a][b] += w(q) * ab;
                        m4[a][b] += w(q) * ab * ab;
                    }
                }
                let o = opposite(q);
                assert!(o < q_count);
                assert_eq!(opposite(o), q);
                assert_eq!(w(o), w(q));
                for a in 0..3 {
                    assert_eq!(C[o][a], -C[q][a], "q {q}");
                }
                for r in 0..q {
                    assert_ne!(C[r], C[q], "{v:?}: {q} repeats {r}");
                }
            }
            assert!((m0 - 1.0).abs() < 1e-15, "{v:?}");
            for a in 0..3 {
                for b in 0..3 {
                    let want = if a == b { 1.0 / 3.0 } else { 0.0 };
                    assert!((m2[a][b] - want).abs() < 1e-15, "{v:?} {a}{b}");
                    let want = if a == b { 3.0 / 9.0 } else { 1.0 / 9.0 };
                    assert!((m4[a][b] - want).abs() < 1e-15, "{v:?} {a}{b}");
                }
            }
            assert_eq!(Velocities::of(q_count), Some(v));
        }
        // Mirrors stay in the set they start from.
        for v in Velocities::ALL {
            for q in 0..v.q() {
                for axes in 0..8 {
                    assert!(mirrored(q, axes) < v.q());
                }
            }
        }
    }

    #[test]
    fn shifted_rows_run_every_cell_once_both_ends_in_one_warp() {
        for nx in [1, 5, 31, 32, 37, 256] {
            let mut seen = [0u32; 256];
            for x in 0..nx {
                seen[shifted(nx, END_SHIFT % nx, x) as usize] += 1;
            }
            assert!(
                seen[..nx as usize].iter().all(|&n| n == 1),
                "{nx}: {seen:?}"
            );
        }
        // The last warp of a 256-cell row holds both cells next to its ends, and no other warp does.
        let warp = |x: u32| (0..256).find(|&t| shifted(256, END_SHIFT, t) == x).unwrap() / 32;
        assert_eq!((warp(1), warp(254)), (7, 7));
        assert_eq!((warp(16), warp(239)), (0, 6));
    }
}
