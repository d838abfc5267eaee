//! The test cases of the `advection` binary: an initial field, a steady velocity, and where one is known the
//! exact solution.
//!
//! Geometry: one spacing `h` for both axes. For an `nx` x `ny` grid, `h = 1 / (min(nx, ny) - 1)`, node
//! `(i, j)` (index `i + nx*j`) sits at `x_i = i h`, `y_j = j h`, so the domain is
//! `[0, Lx] x [0, Ly]` with `Lx = (nx-1) h`, `Ly = (ny-1) h`, and its short side `L = min(Lx, Ly)` is 1.
//!
//! The initial field of every case is a Gaussian hill `exp(-r^2 / w^2)` of width `w = 0.08 L`, where `r` is
//! the distance to the hill's centre; its maximum, 1, is at the centre.

use rayon::prelude::*;
use std::f64::consts::PI;
use std::fmt;

/// Width of the Gaussian hill, as a fraction of the domain's short side.
pub(crate) const HILL_WIDTH: f64 = 0.08;

/// Radius of the rotating hill's centre from the domain centre, as a fraction of the short side.
pub(crate) const ROTATION_RADIUS: f64 = 0.25;

/// The scheme's exact answer after `steps` steps of `dt`, as a field.
pub type SchemeExact = Box<dyn Fn(usize, f64) -> Vec<f64> + Send + Sync>;

/// A named case: initial field, steady velocity, and the exact solution at time t where one is known.
pub struct Case {
    /// Nodes along x.
    pub nx: usize,
    /// Nodes along y.
    pub ny: usize,
    /// Node spacing, the same on both axes.
    pub h: f64,
    /// The initial field, `nx * ny` values with x fastest.
    pub f0: Vec<f64>,
    /// The x velocity on the nodes.
    pub u: Vec<f64>,
    /// The y velocity on the nodes.
    pub v: Vec<f64>,
    /// The exact field at time `t`, on the same nodes, where it is known.
    pub exact: Option<Box<dyn Fn(f64) -> Vec<f64> + Send + Sync>>,
    /// The time after which the exact solution returns to `f0`, where there is one.
    pub period: Option<f64>,
    /// The exact field after `steps` steps of `dt` of the scheme with exact interpolation, where it is
    /// known: the scheme's departure point `x - dt u(x)` is one straight step, first order in time, so in
    /// curved flow this, not [`exact`](Self::exact), is what the interpolation error is measured against.
    pub scheme_exact: Option<SchemeExact>,
}

impl fmt::Debug for Case {
    fn fmt(&self, fm: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The closure has no Debug; its presence is what matters.
        fm.debug_struct("Case")
            .field("nx", &self.nx)
            .field("ny", &self.ny)
            .field("h", &self.h)
            .field("f0.len()", &self.f0.len())
            .field("exact", &self.exact.as_ref().map(|_| "Fn(t)"))
            .field("period", &self.period)
            .field(
                "scheme_exact",
                &self.scheme_exact.as_ref().map(|_| "Fn(steps, dt)"),
            )
            .finish_non_exhaustive()
    }
}

/// The grid's spacing and domain lengths `(h, Lx, Ly)`.
fn geometry(nx: usize, ny: usize) -> (f64, f64, f64) {
    assert!(
        nx >= 2 && ny >= 2,
        "grid {nx} x {ny}: need at least 2 nodes per axis"
    );
    let h = 1.0 / (nx.min(ny) - 1) as f64;
    (h, (nx - 1) as f64 * h, (ny - 1) as f64 * h)
}

/// `g(x_i, y_j)` on every node, x fastest.
fn sample(nx: usize, ny: usize, h: f64, g: impl Fn(f64, f64) -> f64 + Sync) -> Vec<f64> {
    (0..nx * ny)
        .into_par_iter()
        .map(|k| g((k % nx) as f64 * h, (k / nx) as f64 * h))
        .collect()
}

/// The Gaussian hill of width `w` centred at `centre`, sampled on the nodes.
fn hill(nx: usize, ny: usize, h: f64, centre: [f64; 2], w: f64) -> Vec<f64> {
    sample(nx, ny, h, |x, y| {
        let (dx, dy) = (x - centre[0], y - centre[1]);
        (-(dx * dx + dy * dy) / (w * w)).exp()
    })
}

/// Constant velocity; f0 a Gaussian hill (width 0.08 in units of the domain's short side) centred at 1/3 of
/// each side; exact(t) = the hill moved by velocity*t (no wrap; only meaningful while the hill stays inside).
pub fn translation(nx: usize, ny: usize, velocity: [f64; 2]) -> Case {
    let (h, lx, ly) = geometry(nx, ny);
    let w = HILL_WIDTH * lx.min(ly);
    let centre = [lx / 3.0, ly / 3.0];
    let exact = move |t: f64| {
        hill(
            nx,
            ny,
            h,
            [centre[0] + velocity[0] * t, centre[1] + velocity[1] * t],
            w,
        )
    };
    Case {
        nx,
        ny,
        h,
        f0: exact(0.0),
        u: vec![velocity[0]; nx * ny],
        v: vec![velocity[1]; nx * ny],
        scheme_exact: Some(Box::new(move |steps, dt| exact(steps as f64 * dt))),
        exact: Some(Box::new(exact)),
        period: None,
    }
}

/// Solid-body rotation about the domain centre with angular velocity 2 pi (period 1),
/// `u = -2 pi (y - yc)`, `v = 2 pi (x - xc)`; a Gaussian hill of width 0.08 L at radius 0.25 L from the
/// centre, starting on the centre's right (+x); exact(t) = the hill rotated anticlockwise by 2 pi t.
pub fn rotation(nx: usize, ny: usize) -> Case {
    let (h, lx, ly) = geometry(nx, ny);
    let l = lx.min(ly);
    let w = HILL_WIDTH * l;
    let (xc, yc) = (lx / 2.0, ly / 2.0);
    let radius = ROTATION_RADIUS * l;
    let omega = 2.0 * PI;
    // The hill is radially symmetric, so rotating the field is moving its centre along the circle.
    let exact = move |t: f64| {
        let (sin, cos) = (omega * t).sin_cos();
        hill(nx, ny, h, [xc + radius * cos, yc + radius * sin], w)
    };
    // The departure point x - dt u(x) follows the tangent, not the circle: about the centre that is the
    // linear map M = [[1, w dt], [-w dt, 1]] = rho R(-theta), rho = sqrt(1 + (w dt)^2), theta = atan(w dt),
    // so with exact interpolation the scheme gives f_N(p) = f0(M^N p).
    let scheme_exact = move |steps: usize, dt: f64| {
        let wdt = omega * dt;
        let rho_n = (1.0 + wdt * wdt).powf(0.5 * steps as f64);
        let (sin, cos) = (-(steps as f64) * wdt.atan()).sin_cos();
        sample(nx, ny, h, |x, y| {
            let (x, y) = (x - xc, y - yc);
            let (qx, qy) = (rho_n * (cos * x - sin * y), rho_n * (sin * x + cos * y));
            let (dx, dy) = (qx - radius, qy);
            (-(dx * dx + dy * dy) / (w * w)).exp()
        })
    };
    Case {
        nx,
        ny,
        h,
        f0: exact(0.0),
        u: sample(nx, ny, h, |_, y| -omega * (y - yc)),
        v: sample(nx, ny, h, |x, _| omega * (x - xc)),
        exact: Some(Box::new(exact)),
        period: Some(1.0),
        scheme_exact: Some(Box::new(scheme_exact)),
    }
}

/// Steady deformational flow from the stream function `psi = sin^2(pi x/Lx) sin^2(pi y/Ly) / pi`
/// (`u = d psi/dy`, `v = -d psi/dx`, evaluated analytically on the nodes, so divergence-free up to
/// discretisation; the velocity vanishes on the domain's edges); f0 the Gaussian hill of width 0.08 L centred
/// at `(Lx/2, 3Ly/4)`; no exact solution.
pub fn swirl(nx: usize, ny: usize) -> Case {
    let (h, lx, ly) = geometry(nx, ny);
    let w = HILL_WIDTH * lx.min(ly);
    let u = sample(nx, ny, h, |x, y| {
        let sx = (PI * x / lx).sin();
        sx * sx * (2.0 * PI * y / ly).sin() / ly
    });
    let v = sample(nx, ny, h, |x, y| {
        let sy = (PI * y / ly).sin();
        -sy * sy * (2.0 * PI * x / lx).sin() / lx
    });
    Case {
        nx,
        ny,
        h,
        f0: hill(nx, ny, h, [lx / 2.0, 0.75 * ly], w),
        u,
        v,
        exact: None,
        period: None,
        scheme_exact: None,
    }
}

/// The largest |u| and |v| over the nodes (for picking dt from a CFL number).
pub fn max_speed(u: &[f64], v: &[f64]) -> (f64, f64) {
    let max_abs = |s: &[f64]| s.par_iter().map(|x| x.abs()).reduce(|| 0.0, f64::max);
    (max_abs(u), max_abs(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest |du/dx + dv/dy| over the interior by central differences.
    fn max_divergence(case: &Case) -> f64 {
        let (nx, ny, h) = (case.nx, case.ny, case.h);
        let mut max: f64 = 0.0;
        for j in 1..ny - 1 {
            for i in 1..nx - 1 {
                let k = i + nx * j;
                let div = (case.u[k + 1] - case.u[k - 1]) / (2.0 * h)
                    + (case.v[k + nx] - case.v[k - nx]) / (2.0 * h);
                max = max.max(div.abs());
            }
        }
        max
    }

    fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: lengths");
        for (k, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= tol, "{what}: index {k}: {g} vs {w}");
        }
    }

    /// The node holding the field's maximum, and that maximum.
    fn argmax(nx: usize, f: &[f64]) -> ((usize, usize), f64) {
        let (k, &m) = f
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .unwrap();
        ((k % nx, k / nx), m)
    }

    #[test]
    fn spacing_is_shared_and_set_by_the_short_side() {
        let case = translation(81, 41, [0.0, 0.0]);
        assert_eq!(case.h, 1.0 / 40.0);
        assert_eq!(case.f0.len(), 81 * 41);
        let case = rotation(33, 65);
        assert_eq!(case.h, 1.0 / 32.0);
    }

    #[test]
    fn rotation_is_divergence_free() {
        for (nx, ny) in [(64, 64), (65, 49)] {
            let div = max_divergence(&rotation(nx, ny));
            assert!(div < 1e-12, "{nx} x {ny}: divergence {div}");
        }
    }

    #[test]
    fn swirl_is_divergence_free_up_to_discretisation() {
        // On a square domain central differences of the analytic velocity cancel term by term (the stream
        // function is a product of (1 - cos)/2 factors with equal wavelengths), so the discrete divergence
        // is zero to rounding; otherwise only their O(h^2) error remains.
        for n in [33, 64] {
            let div = max_divergence(&swirl(n, n));
            assert!(div < 1e-12, "{n} x {n}: divergence {div}");
        }
        let coarse = max_divergence(&swirl(49, 33));
        let fine = max_divergence(&swirl(97, 65));
        assert!(fine * 3.5 < coarse, "divergence {coarse} -> {fine}");
        assert!(fine < 1e-2, "divergence {fine}");
    }

    #[test]
    fn swirl_velocity_vanishes_on_the_edges() {
        let (nx, ny) = (40, 30);
        let case = swirl(nx, ny);
        for j in 0..ny {
            for i in 0..nx {
                if i == 0 || j == 0 || i == nx - 1 || j == ny - 1 {
                    let k = i + nx * j;
                    assert!(
                        case.u[k].abs() < 1e-14 && case.v[k].abs() < 1e-14,
                        "({i}, {j})"
                    );
                }
            }
        }
        let (umax, vmax) = max_speed(&case.u, &case.v);
        assert!(umax > 0.5 && vmax > 0.5, "swirl speeds {umax}, {vmax}");
    }

    #[test]
    fn hill_maximum_is_one_at_its_centre() {
        // Grids chosen so the hill's centre lies on a node.
        let case = translation(64, 64, [1.0, 0.5]);
        let (node, max) = argmax(64, &case.f0);
        assert_eq!(node, (21, 21));
        assert!((max - 1.0).abs() < 1e-15, "translation max {max}");

        let case = rotation(65, 65);
        let (node, max) = argmax(65, &case.f0);
        assert_eq!(node, (48, 32));
        assert!((max - 1.0).abs() < 1e-15, "rotation max {max}");

        let case = swirl(65, 65);
        let (node, max) = argmax(65, &case.f0);
        assert_eq!(node, (32, 48));
        assert!((max - 1.0).abs() < 1e-15, "swirl max {max}");

        for f0 in [
            translation(50, 37, [0.0, 0.0]).f0,
            rotation(50, 37).f0,
            swirl(50, 37).f0,
        ] {
            assert!(f0.iter().all(|&x| x > 0.0 && x <= 1.0));
        }
    }

    #[test]
    fn rotation_exact_returns_after_one_period() {
        for (nx, ny) in [(64, 64), (65, 49)] {
            let case = rotation(nx, ny);
            let period = case.period.expect("rotation has a period");
            assert_eq!(period, 1.0);
            let exact = case.exact.as_ref().expect("rotation has an exact solution");
            assert_close(&exact(period), &case.f0, 1e-12, "exact(period)");
            // Half a turn really moves the hill, so the test above is not vacuous.
            let half = exact(0.5 * period);
            let (node, _) = argmax(nx, &half);
            let (start, _) = argmax(nx, &case.f0);
            assert!(node.0 < start.0, "{node:?} vs {start:?}");
        }
    }

    #[test]
    fn rotation_speed_peaks_at_the_edges() {
        let case = rotation(64, 64);
        let (umax, vmax) = max_speed(&case.u, &case.v);
        assert!(
            (umax - PI).abs() < 1e-12 && (vmax - PI).abs() < 1e-12,
            "{umax}, {vmax}"
        );
    }

    #[test]
    fn translation_exact_starts_at_f0_and_moves_with_the_flow() {
        let velocity = [0.5, -0.25];
        let case = translation(64, 64, velocity);
        let exact = case
            .exact
            .as_ref()
            .expect("translation has an exact solution");
        assert_close(&exact(0.0), &case.f0, 0.0, "exact(0)");
        // h = 1/63: after t = 2/3 the centre has moved by (21, -10.5) h, from node (21, 21) to (42, 10.5),
        // halfway between two nodes.
        let moved = exact(2.0 / 3.0);
        let (node, _) = argmax(64, &moved);
        assert!(node == (42, 10) || node == (42, 11), "{node:?}");
        assert_eq!(max_speed(&case.u, &case.v), (0.5, 0.25));
    }

    #[test]
    fn max_speed_takes_absolute_values() {
        assert_eq!(max_speed(&[0.5, -2.0, 1.0], &[-0.25, 0.0]), (2.0, 0.25));
        assert_eq!(max_speed(&[], &[]), (0.0, 0.0));
    }
}
