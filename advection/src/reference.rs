//! An independent, naive f64 implementation of one advection step, for the tests.
//!
//! It shares no code with the optimised kernels on purpose: it is the yardstick they are checked against,
//! so it favours being obviously correct over being fast.
//!
//! # The scheme
//!
//! - Grid `nx` x `ny` nodes; arrays are row-major with x fastest: node `(i, j)` is at index `i + nx*j`.
//! - `f` (the advected field) and the velocities `(u, v)` are f64 values on the nodes. The Courant numbers
//!   are `a = u*c`, `b = v*c` with `c = dt/h`.
//! - For each node `(i, j)` the departure point is `(i - a, j - b)`.
//! - Interpolation is cubic Lagrange on 4 upwind-biased nodes per direction: for `a >= 0` the nodes
//!   `i-2, i-1, i, i+1`; for `a < 0` the nodes `i-1, i, i+1, i+2`.
//! - With `s = -a` and node offsets `-2..=1`, the weights are
//!   - `w(-2) = -(s+1) s (s-1) / 6`
//!   - `w(-1) =  (s+2) s (s-1) / 2`
//!   - `w(0)  = -(s+2) (s+1) (s-1) / 2`
//!   - `w(1)  =  (s+2) (s+1) s / 6`
//!
//!   For `a < 0` the node offsets `+2, +1, 0, -1` take those same four weights evaluated at `s = a`.
//! - 2-D is the tensor product: interpolate each of the 4 upwind rows (`j-2..=j+1` for `b >= 0`,
//!   `j+2, j+1, j, j-1` for `b < 0`, in that weight order) in x, then those 4 values in y.
//! - The two outermost nodes on every side (`i < 2`, `i >= nx-2`, `j < 2`, `j >= ny-2`) keep their values.
//! - The velocity field is steady; `f` is double-buffered (new values from old only).
//!
//! The sign tests are `a >= 0` / `a < 0` on the f64 value, so `a = -0.0` takes the `a >= 0` stencil.

/// The four cubic weights for offsets -2, -1, 0, 1 at `s` (see the module docs).
pub fn weights(s: f64) -> [f64; 4] {
    [
        -(s + 1.0) * s * (s - 1.0) / 6.0,
        (s + 2.0) * s * (s - 1.0) / 2.0,
        -(s + 2.0) * (s + 1.0) * (s - 1.0) / 2.0,
        (s + 2.0) * (s + 1.0) * s / 6.0,
    ]
}

/// The 4 node indices along one axis, in weight order, and their weights, for Courant number `a` at `i`.
fn stencil(i: usize, a: f64) -> ([usize; 4], [f64; 4]) {
    if a >= 0.0 {
        ([i - 2, i - 1, i, i + 1], weights(-a))
    } else {
        ([i + 2, i + 1, i, i - 1], weights(a))
    }
}

/// One time step of the scheme: the new field from `f`, with Courant factor `c = dt / h` (a = u c, b = v c).
///
/// Panics on wrong slice lengths, on `nx` or `ny` below 5, and where `|a|` or `|b|` exceeds 1 (or is NaN) at
/// an interior node.
pub fn step(nx: usize, ny: usize, f: &[f64], u: &[f64], v: &[f64], c: f64) -> Vec<f64> {
    assert!(
        nx >= 5 && ny >= 5,
        "grid {nx} x {ny}: need at least 5 nodes per axis"
    );
    let n = nx * ny;
    assert_eq!(f.len(), n, "f has {} values, grid has {n} nodes", f.len());
    assert_eq!(u.len(), n, "u has {} values, grid has {n} nodes", u.len());
    assert_eq!(v.len(), n, "v has {} values, grid has {n} nodes", v.len());

    // Boundary nodes keep their values, so start from a copy and overwrite the interior.
    let mut out = f.to_vec();
    for j in 2..ny - 2 {
        for i in 2..nx - 2 {
            let k = i + nx * j;
            let a = u[k] * c;
            let b = v[k] * c;
            // Phrased as `<= 1` so that a NaN Courant number fails too.
            assert!(
                a.abs() <= 1.0 && b.abs() <= 1.0,
                "Courant numbers a = {a}, b = {b} at node ({i}, {j}) exceed 1"
            );
            let (xs, wx) = stencil(i, a);
            let (ys, wy) = stencil(j, b);
            let mut acc = 0.0;
            for (&jj, &wj) in ys.iter().zip(&wy) {
                let mut row = 0.0;
                for (&ii, &wi) in xs.iter().zip(&wx) {
                    row += wi * f[ii + nx * jj];
                }
                acc += wj * row;
            }
            out[k] = acc;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn random_field(rng: &mut StdRng, n: usize) -> Vec<f64> {
        // Bounded away from zero so that no signed-zero subtleties can affect the bitwise tests.
        (0..n).map(|_| rng.random_range(0.5..1.5)).collect()
    }

    fn is_boundary(nx: usize, ny: usize, i: usize, j: usize) -> bool {
        i < 2 || i >= nx - 2 || j < 2 || j >= ny - 2
    }

    #[test]
    fn weights_sum_to_one() {
        let mut rng = StdRng::seed_from_u64(1);
        for _ in 0..10_000 {
            let s: f64 = rng.random_range(-1.0..=1.0);
            let sum: f64 = weights(s).iter().sum();
            assert!((sum - 1.0).abs() < 1e-14, "s = {s}: weights sum to {sum}");
        }
        for s in [-1.0, -0.5, 0.0, 0.5, 1.0] {
            let sum: f64 = weights(s).iter().sum();
            assert!((sum - 1.0).abs() < 1e-15, "s = {s}: weights sum to {sum}");
        }
    }

    #[test]
    fn weights_are_lagrange_at_the_nodes() {
        // At s equal to a node offset, the weight of that node is 1 and the others vanish.
        for (k, s) in [-2.0, -1.0, 0.0, 1.0].into_iter().enumerate() {
            let w = weights(s);
            for (m, &wm) in w.iter().enumerate() {
                assert_eq!(wm, if m == k { 1.0 } else { 0.0 }, "s = {s}, weight {m}");
            }
        }
    }

    #[test]
    fn weights_reproduce_cubics() {
        let mut rng = StdRng::seed_from_u64(2);
        let offsets = [-2.0, -1.0, 0.0, 1.0];
        for _ in 0..10_000 {
            let s: f64 = rng.random_range(-1.0..=1.0);
            let w = weights(s);
            let cube: f64 = w.iter().zip(&offsets).map(|(w, x)| w * x * x * x).sum();
            assert!(
                (cube - s * s * s).abs() < 1e-14,
                "s = {s}: x^3 gives {cube}, want {}",
                s * s * s
            );
            // A general cubic with random coefficients, shifted so the samples are not centred at 0.
            let p: [f64; 4] = std::array::from_fn(|_| rng.random_range(-2.0..2.0));
            let poly = |x: f64| p[0] + x * (p[1] + x * (p[2] + x * p[3]));
            let got: f64 = w
                .iter()
                .zip(&offsets)
                .map(|(w, &x)| w * poly(x + 7.0))
                .sum();
            let want = poly(s + 7.0);
            assert!(
                (got - want).abs() < 1e-11 * want.abs().max(1.0),
                "s = {s}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn step_reproduces_tensor_cubics_under_random_velocity() {
        // Any polynomial of degree <= 3 in each variable is interpolated exactly, whatever the stencil side,
        // so the interior must equal the polynomial at the departure point.
        let (nx, ny) = (11, 9);
        let c = 0.125;
        let mut rng = StdRng::seed_from_u64(3);
        let p: [f64; 4] = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
        let q: [f64; 4] = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
        let cubic = |c: &[f64; 4], x: f64| c[0] + x * (c[1] + x * (c[2] + x * c[3]));
        let poly = |x: f64, y: f64| cubic(&p, x / nx as f64) * cubic(&q, y / ny as f64) + x * y * y;
        let mut f = vec![0.0; nx * ny];
        let mut u = vec![0.0; nx * ny];
        let mut v = vec![0.0; nx * ny];
        for j in 0..ny {
            for i in 0..nx {
                let k = i + nx * j;
                f[k] = poly(i as f64, j as f64);
                u[k] = rng.random_range(-1.0..=1.0) / c;
                v[k] = rng.random_range(-1.0..=1.0) / c;
            }
        }
        let g = step(nx, ny, &f, &u, &v, c);
        for j in 2..ny - 2 {
            for i in 2..nx - 2 {
                let k = i + nx * j;
                let want = poly(i as f64 - u[k] * c, j as f64 - v[k] * c);
                assert!(
                    (g[k] - want).abs() < 1e-12 * want.abs().max(1.0),
                    "({i}, {j}): {} vs {want}",
                    g[k]
                );
            }
        }
    }

    #[test]
    fn stencil_is_upwind_biased() {
        // A single spike at (i0, j0) reaches, for a > 0, the new nodes i0-1..=i0+2 (they read i-2..=i+1), and
        // for a < 0 the nodes i0-2..=i0+1; likewise in y. A centred or mirrored stencil would differ.
        let (nx, ny) = (13, 13);
        let (i0, j0) = (6, 6);
        let mut f = vec![0.0; nx * ny];
        f[i0 + nx * j0] = 1.0;
        for (a, b) in [(0.3, 0.6), (-0.3, 0.6), (0.3, -0.6), (-0.3, -0.6)] {
            let u = vec![a; nx * ny];
            let v = vec![b; nx * ny];
            let g = step(nx, ny, &f, &u, &v, 1.0);
            let range = |a: f64, k0: usize| {
                if a >= 0.0 {
                    k0 - 1..=k0 + 2
                } else {
                    k0 - 2..=k0 + 1
                }
            };
            let (ri, rj) = (range(a, i0), range(b, j0));
            for j in 0..ny {
                for i in 0..nx {
                    let touched = ri.contains(&i) && rj.contains(&j);
                    assert_eq!(
                        g[i + nx * j] != 0.0,
                        touched,
                        "a = {a}, b = {b}: node ({i}, {j}) = {}",
                        g[i + nx * j]
                    );
                }
            }
        }
    }

    /// Steps with Courant numbers (a, b) everywhere and checks the interior equals `f` shifted by
    /// (di, dj) nodes, bit for bit, and the boundary is untouched.
    fn check_unit_shift(a: f64, b: f64, di: isize, dj: isize) {
        let (nx, ny) = (9, 7);
        let c = 0.25;
        let mut rng = StdRng::seed_from_u64(4);
        let f = random_field(&mut rng, nx * ny);
        let u = vec![a / c; nx * ny];
        let v = vec![b / c; nx * ny];
        let g = step(nx, ny, &f, &u, &v, c);
        for j in 0..ny {
            for i in 0..nx {
                let k = i + nx * j;
                let want = if is_boundary(nx, ny, i, j) {
                    f[k]
                } else {
                    let (si, sj) = ((i as isize - di) as usize, (j as isize - dj) as usize);
                    f[si + nx * sj]
                };
                assert_eq!(
                    g[k].to_bits(),
                    want.to_bits(),
                    "a = {a}, b = {b}: node ({i}, {j})"
                );
            }
        }
    }

    #[test]
    fn unit_courant_in_x_shifts_by_one_node() {
        check_unit_shift(1.0, 0.0, 1, 0);
    }

    #[test]
    fn unit_courant_in_y_shifts_by_one_node() {
        check_unit_shift(0.0, 1.0, 0, 1);
    }

    #[test]
    fn negative_unit_courant_in_x_shifts_back_by_one_node() {
        check_unit_shift(-1.0, 0.0, -1, 0);
    }

    #[test]
    fn negative_unit_courant_in_y_shifts_back_by_one_node() {
        check_unit_shift(0.0, -1.0, 0, -1);
    }

    #[test]
    fn zero_velocity_is_identity() {
        let (nx, ny) = (10, 8);
        let mut rng = StdRng::seed_from_u64(5);
        let f = random_field(&mut rng, nx * ny);
        let zero = vec![0.0; nx * ny];
        let g = step(nx, ny, &f, &zero, &zero, 0.7);
        for (k, (x, y)) in g.iter().zip(&f).enumerate() {
            assert_eq!(x.to_bits(), y.to_bits(), "index {k}");
        }
    }

    #[test]
    fn boundary_nodes_never_change() {
        let (nx, ny) = (12, 9);
        let c = 0.5;
        let mut rng = StdRng::seed_from_u64(6);
        let mut f = random_field(&mut rng, nx * ny);
        let f0 = f.clone();
        // Boundary velocities beyond |a| = 1 are allowed: they are never used.
        let u: Vec<f64> = (0..nx * ny).map(|_| rng.random_range(-2.0..=2.0)).collect();
        let v: Vec<f64> = (0..nx * ny).map(|_| rng.random_range(-2.0..=2.0)).collect();
        let mut interior_changed = false;
        for _ in 0..20 {
            let g = step(nx, ny, &f, &u, &v, c);
            interior_changed |= g.iter().zip(&f).any(|(x, y)| x != y);
            f = g;
        }
        assert!(interior_changed, "the random flow should move something");
        for j in 0..ny {
            for i in 0..nx {
                if is_boundary(nx, ny, i, j) {
                    let k = i + nx * j;
                    assert_eq!(f[k].to_bits(), f0[k].to_bits(), "boundary node ({i}, {j})");
                }
            }
        }
    }

    #[test]
    fn constant_field_stays_constant() {
        let (nx, ny) = (15, 11);
        let c = 0.5;
        let mut rng = StdRng::seed_from_u64(7);
        let u: Vec<f64> = (0..nx * ny).map(|_| rng.random_range(-2.0..=2.0)).collect();
        let v: Vec<f64> = (0..nx * ny).map(|_| rng.random_range(-2.0..=2.0)).collect();
        let value = 3.25;
        let mut f = vec![value; nx * ny];
        for _ in 0..10 {
            f = step(nx, ny, &f, &u, &v, c);
        }
        for (k, x) in f.iter().enumerate() {
            assert!((x - value).abs() < 1e-14 * value, "index {k}: {x}");
        }
    }

    #[test]
    #[should_panic(expected = "exceed 1")]
    fn courant_above_one_panics() {
        let (nx, ny) = (6, 6);
        let f = vec![1.0; nx * ny];
        let mut u = vec![0.0; nx * ny];
        u[2 + nx * 3] = 1.01;
        step(nx, ny, &f, &u, &vec![0.0; nx * ny], 1.0);
    }

    #[test]
    #[should_panic(expected = "grid has")]
    fn wrong_length_panics() {
        step(5, 5, &[0.0; 25], &[0.0; 24], &[0.0; 25], 1.0);
    }

    #[test]
    #[should_panic(expected = "at least 5")]
    fn small_grid_panics() {
        step(4, 6, &[0.0; 24], &[0.0; 24], &[0.0; 24], 1.0);
    }
}
