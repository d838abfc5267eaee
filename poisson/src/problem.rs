//! A Poisson problem `-div(c grad p) = f` on a box of `n` cells with spacings `h`, cell-centred: its
//! checks, the 7-point discretisation (harmonic-mean face coefficients; Dirichlet walls `p = 0` through a
//! mirrored ghost cell, Neumann walls closed), coarsening for multigrid, and manufactured solutions.

use std::f64::consts::PI;

use rayon::prelude::*;

use crate::{Error, Result};

/// The boundary condition on all six walls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walls {
    /// `p = 0` on the walls.
    Dirichlet,
    /// No flux through the walls (`p` is then fixed up to a constant).
    Neumann,
}

/// A problem: cells, spacings, the coefficient `c` and right-hand side `f` per cell (x fastest), walls.
#[derive(Clone, Debug)]
pub struct Problem {
    /// Cells per axis.
    pub n: [usize; 3],
    /// Cell size per axis.
    pub h: [f64; 3],
    /// `c > 0` per cell.
    pub c: Vec<f64>,
    /// `f` per cell.
    pub rhs: Vec<f64>,
    /// Boundary condition.
    pub walls: Walls,
}

/// The 7 coefficients per cell (interior order): diagonal, then x-, x+, y-, y+, z-, z+ neighbours.
pub type Stencil = [Vec<f64>; 7];

impl Problem {
    /// Cells.
    pub fn cells(&self) -> usize {
        self.n.iter().product()
    }

    /// Fails, naming the cell and the fix, on bad sizes, non-positive or non-finite coefficients,
    /// non-finite right-hand sides, and (Neumann walls) a right-hand side that does not sum to zero.
    pub fn check(&self) -> Result<()> {
        let cells = self.cells();
        if self.n.contains(&0) || !self.h.iter().all(|h| h.is_finite() && *h > 0.0) {
            return Err(Error::Invalid(format!(
                "grid {:?} with spacings {:?}: every axis needs cells and a positive spacing",
                self.n, self.h
            )));
        }
        for (name, v) in [("coefficient c", &self.c), ("right-hand side", &self.rhs)] {
            if v.len() != cells {
                return Err(Error::Invalid(format!(
                    "the {name} has {} values; the {}x{}x{} grid needs {cells}",
                    v.len(),
                    self.n[0],
                    self.n[1],
                    self.n[2]
                )));
            }
        }
        let at = |k: usize| {
            format!(
                "({}, {}, {})",
                k % self.n[0],
                (k / self.n[0]) % self.n[1],
                k / (self.n[0] * self.n[1])
            )
        };
        if let Some(k) = self.c.iter().position(|c| !(c.is_finite() && *c > 0.0)) {
            return Err(Error::Invalid(format!(
                "the coefficient c is {} at cell {}: it must be positive and finite everywhere",
                self.c[k],
                at(k)
            )));
        }
        if let Some(k) = self.rhs.iter().position(|f| !f.is_finite()) {
            return Err(Error::Invalid(format!(
                "the right-hand side is {} at cell {}",
                self.rhs[k],
                at(k)
            )));
        }
        if self.walls == Walls::Neumann {
            let sum: f64 = self.rhs.iter().sum();
            let scale: f64 = self.rhs.iter().map(|f| f.abs()).sum();
            if sum.abs() > 1e-10 * scale.max(f64::MIN_POSITIVE) {
                return Err(Error::Invalid(format!(
                    "with Neumann walls the right-hand side must sum to zero (nothing flows out), but it sums \
                     to {sum:.3e} ({:.1e} of its magnitude); subtract its mean",
                    sum / scale
                )));
            }
        }
        Ok(())
    }

    /// The 7-point discretisation of `-div(c grad p)`.
    pub fn stencil(&self) -> Stencil {
        stencil(self.n, self.h, &self.c, self.walls)
    }
}

/// The 7-point discretisation of `-div(c grad p)` on `n` cells of size `h` with cell coefficients `c`:
/// face coefficients are harmonic means of the two cells, `c_f / h^2` off the diagonal (negated) and on
/// it; a Dirichlet wall adds `2 c / h^2` to the diagonal (ghost cell `-p`), a Neumann wall nothing.
pub fn stencil(n: [usize; 3], h: [f64; 3], c: &[f64], walls: Walls) -> Stencil {
    let cells: usize = n.iter().product();
    let index = |p: [usize; 3]| p[0] + n[0] * (p[1] + n[1] * p[2]);
    // Face `f` of cell `k` (slot order: x-, x+, y-, y+, z-, z+): `Ok(face coefficient)` towards a
    // neighbour, `Err(wall term of the diagonal)` at a wall.
    let face = |k: usize, f: usize| {
        let p = [k % n[0], (k / n[0]) % n[1], k / (n[0] * n[1])];
        let (axis, side) = (f / 2, if f.is_multiple_of(2) { -1i64 } else { 1 });
        let w = 1.0 / (h[axis] * h[axis]);
        let q = p[axis] as i64 + side;
        if q < 0 || q >= n[axis] as i64 {
            return Err(if walls == Walls::Dirichlet {
                2.0 * c[k] * w
            } else {
                0.0
            });
        }
        let mut nb = p;
        nb[axis] = q as usize;
        let (a, b) = (c[k], c[index(nb)]);
        Ok(2.0 * a * b / (a + b) * w)
    };
    // One array at a time, each in parallel over the cells (set-up time on large grids); the diagonal
    // sums its terms in slot order.
    std::array::from_fn(|slot| {
        (0..cells)
            .into_par_iter()
            .map(|k| match slot {
                0 => (0..6).fold(0.0, |d, f| match face(k, f) {
                    Ok(term) | Err(term) => d + term,
                }),
                _ => face(k, slot - 1).map_or(0.0, |f| -f),
            })
            .collect()
    })
}

/// The coefficient of each coarse cell: the mean of its 8 children (`n` even on every axis).
pub fn coarsen(n: [usize; 3], c: &[f64]) -> Vec<f64> {
    let m = n.map(|v| v / 2);
    let mut out = vec![0.0; m.iter().product()];
    out.par_iter_mut().enumerate().for_each(|(k, o)| {
        let p = [k % m[0], (k / m[0]) % m[1], k / (m[0] * m[1])];
        let mut sum = 0.0;
        for d in 0..8 {
            let q = [
                2 * p[0] + (d & 1),
                2 * p[1] + ((d >> 1) & 1),
                2 * p[2] + (d >> 2),
            ];
            sum += c[q[0] + n[0] * (q[1] + n[1] * q[2])];
        }
        *o = sum / 8.0;
    });
    out
}

/// The manufactured case at cell `k` of `n` cells of size `h` on a domain of `depth`: the coefficient,
/// the right-hand side and the exact solution there.
fn manufactured_at(n: [usize; 3], h: [f64; 3], depth: f64, vertical: f64, k: usize) -> [f64; 3] {
    let kz = PI / depth;
    let p = [k % n[0], (k / n[0]) % n[1], k / (n[0] * n[1])];
    let [x, y, z] = [0, 1, 2].map(|a| (p[a] as f64 + 0.5) * h[a]);
    let (sx, cx) = (PI * x).sin_cos();
    let (sy, cy) = (PI * y).sin_cos();
    let (sz, cz) = (kz * z).sin_cos();
    let horiz = 1.0 + 0.5 * (2.0 * PI * x).sin() * (PI * y).cos();
    let vert = 1.0 + vertical * z / depth;
    let cc = horiz * vert;
    let dcx = PI * (2.0 * PI * x).cos() * (PI * y).cos() * vert;
    let dcy = -0.5 * PI * (2.0 * PI * x).sin() * (PI * y).sin() * vert;
    let dcz = horiz * vertical / depth;
    let (px, py, pz) = (PI * cx * sy * sz, PI * sx * cy * sz, kz * sx * sy * cz);
    let lap = -(2.0 * PI * PI + kz * kz) * sx * sy * sz;
    [
        cc,
        -(dcx * px + dcy * py + dcz * pz + cc * lap),
        sx * sy * sz,
    ]
}

/// The cell size of the manufactured case on `n` cells.
fn manufactured_h(n: [usize; 3], depth: f64) -> [f64; 3] {
    [1.0 / n[0] as f64, 1.0 / n[1] as f64, depth / n[2] as f64]
}

/// A manufactured problem with Dirichlet walls on `[0, 1] x [0, 1] x [0, depth]` (`n` cells): the exact
/// solution `p = sin(pi x) sin(pi y) sin(pi z / depth)` and a smoothly varying coefficient
/// `c = (1 + 0.5 sin(2 pi x) cos(pi y)) (1 + vertical z / depth)`; `f = -div(c grad p)` exactly. A small
/// `depth` gives the thin vertical cells of an ocean grid (strong anisotropy). Returns the problem and
/// the exact solution per cell.
pub fn manufactured(n: [usize; 3], depth: f64, vertical: f64) -> (Problem, Vec<f64>) {
    let p = manufactured_problem(n, depth, vertical);
    let exact = (0..p.cells())
        .into_par_iter()
        .map(|k| manufactured_at(n, p.h, depth, vertical, k)[2])
        .collect();
    (p, exact)
}

/// [`manufactured`]'s problem alone: its exact solution is not stored (a third more memory), and
/// [`manufactured_error`] computes it cell by cell instead.
pub fn manufactured_problem(n: [usize; 3], depth: f64, vertical: f64) -> Problem {
    let h = manufactured_h(n, depth);
    let cells: usize = n.iter().product();
    let (mut c, mut rhs) = (vec![0.0; cells], vec![0.0; cells]);
    c.par_iter_mut()
        .zip(&mut rhs)
        .enumerate()
        .for_each(|(k, (c, rhs))| {
            let [cc, f, _] = manufactured_at(n, h, depth, vertical, k);
            (*c, *rhs) = (cc, f);
        });
    Problem {
        n,
        h,
        c,
        rhs,
        walls: Walls::Dirichlet,
    }
}

/// The relative L2 error `|x - p| / |p|` of `x` (per cell, x fastest) against the exact solution `p`
/// of [`manufactured`] on `n` cells and `depth`, computed cell by cell. Scaled by the largest
/// difference, so that finite values give a finite error however large they are.
pub fn manufactured_error(n: [usize; 3], depth: f64, x: &[f64]) -> f64 {
    let h = manufactured_h(n, depth);
    let exact = |k: usize| manufactured_at(n, h, depth, 0.0, k)[2];
    let scale = x
        .par_iter()
        .enumerate()
        .map(|(k, v)| (v - exact(k)).abs())
        .reduce(|| 0.0, |a, b| if a.is_nan() || a > b { a } else { b });
    // Per plane, then the planes in order: the same bits whatever the threads.
    let plane = (n[0] * n[1]).max(1);
    let sums: Vec<[f64; 2]> = x
        .par_chunks(plane)
        .enumerate()
        .map(|(z, values)| {
            let start = z * plane;
            values
                .iter()
                .enumerate()
                .fold([0.0; 2], |[num, den], (i, &v)| {
                    let e = exact(start + i);
                    let d = if scale > 0.0 { (v - e) / scale } else { 0.0 };
                    [num + d * d, den + e * e]
                })
        })
        .collect();
    let [num, den] = sums
        .iter()
        .fold([0.0; 2], |[num, den], s| [num + s[0], den + s[1]]);
    scale * num.sqrt() / den.sqrt()
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;

    /// The stencil applied to `x`, straight from its rows.
    fn apply(n: [usize; 3], s: &Stencil, x: &[f64]) -> Vec<f64> {
        let idx = |p: [i64; 3]| p[0] as usize + n[0] * (p[1] as usize + n[1] * p[2] as usize);
        (0..x.len())
            .map(|k| {
                let p = [k % n[0], (k / n[0]) % n[1], k / (n[0] * n[1])].map(|v| v as i64);
                let mut y = s[0][k] * x[k];
                for axis in 0..3 {
                    for (side, slot) in [(-1, 1 + 2 * axis), (1, 2 + 2 * axis)] {
                        let mut q = p;
                        q[axis] += side;
                        if q[axis] >= 0 && q[axis] < n[axis] as i64 {
                            y += s[slot][k] * x[idx(q)];
                        }
                    }
                }
                y
            })
            .collect()
    }

    #[test]
    fn stencil_is_symmetric_positive_and_conserving() {
        let n = [5, 4, 3];
        let c: Vec<f64> = (0..60).map(|k| 1.0 + (k % 7) as f64).collect();
        for walls in [Walls::Dirichlet, Walls::Neumann] {
            let s = stencil(n, [0.2, 0.25, 0.5], &c, walls);
            // Symmetric: <e_i, A e_j> = <e_j, A e_i>.
            let unit = |k: usize| (0..60).map(|j| f64::from(j == k)).collect::<Vec<_>>();
            for i in 0..60 {
                let ai = apply(n, &s, &unit(i));
                for j in 0..60 {
                    let aj = apply(n, &s, &unit(j));
                    assert!((ai[j] - aj[i]).abs() < 1e-12, "{walls:?} {i} {j}");
                }
            }
            // Neumann: constants are in the null space; Dirichlet: x^T A x > 0.
            let ones = apply(n, &s, &vec![1.0; 60]);
            let total: f64 = ones.iter().map(|v| v.abs()).sum();
            match walls {
                Walls::Neumann => assert!(total < 1e-10, "{total}"),
                Walls::Dirichlet => assert!(ones.iter().sum::<f64>() > 0.0),
            }
        }
    }

    #[test]
    fn interior_truncation_error_is_second_order() {
        // A p_exact - f away from the walls (next to a Dirichlet wall it is O(1) by design of the mirrored
        // ghost, yet the solution stays second order: the solver tests check that).
        let err = |m: usize| {
            let (p, exact) = manufactured([m, m, m], 1.0, 0.5);
            let r = apply(p.n, &p.stencil(), &exact);
            let inner = |k: usize| {
                let q = [k % m, (k / m) % m, k / (m * m)];
                q.iter().all(|&v| v > 0 && v + 1 < m)
            };
            let (mut num, mut den) = (0.0, 0.0);
            for k in (0..r.len()).filter(|&k| inner(k)) {
                num += (r[k] - p.rhs[k]).powi(2);
                den += p.rhs[k].powi(2);
            }
            (num / den).sqrt()
        };
        let (e8, e16) = (err(8), err(16));
        assert!(e8 / e16 > 3.0, "{e8:e} {e16:e}");
    }

    #[test]
    fn the_error_computed_cell_by_cell_is_the_stored_solutions() {
        let n = [8, 6, 4];
        let (p, exact) = manufactured(n, 0.5, 2.0);
        let q = manufactured_problem(n, 0.5, 2.0);
        assert_eq!((q.c, q.rhs, q.h), (p.c, p.rhs, p.h));
        let x: Vec<f64> = exact
            .iter()
            .enumerate()
            .map(|(k, e)| e + 1e-3 * (k % 5) as f64)
            .collect();
        let num: f64 = x.iter().zip(&exact).map(|(a, b)| (a - b).powi(2)).sum();
        let den: f64 = exact.iter().map(|b| b * b).sum();
        let got = manufactured_error(n, 0.5, &x);
        assert!((got - (num / den).sqrt()).abs() < 1e-12, "{got}");
        assert_eq!(manufactured_error(n, 0.5, &exact), 0.0);
        // Finite values give a finite error, however large.
        assert!(manufactured_error(n, 0.5, &vec![1e300; 192]).is_finite());
    }

    #[test]
    fn bad_input_says_what_and_where() {
        let (mut p, _) = manufactured([4, 4, 4], 1.0, 0.0);
        p.c[5] = -1.0;
        let e = p.check().unwrap_err().to_string();
        assert!(e.contains("positive") && e.contains("(1, 1, 0)"), "{e}");
        let (mut p, _) = manufactured([4, 4, 4], 1.0, 0.0);
        p.walls = Walls::Neumann;
        p.rhs = vec![1.0; 64];
        assert!(p.check().unwrap_err().to_string().contains("sum to zero"));
        assert_eq!(
            coarsen([2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]),
            vec![4.5]
        );
    }
}
