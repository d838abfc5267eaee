//! Error norms and mass drift, for comparing a computed field with an exact one.

/// Error norms of `got` against `want` over all nodes: L1 = mean |e|, L2 = sqrt(mean e^2), Linf = max |e|,
/// relative = ||e||_2 / ||want||_2.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Norms {
    /// Mean absolute error.
    pub l1: f64,
    /// Root-mean-square error.
    pub l2: f64,
    /// Largest absolute error.
    pub linf: f64,
    /// The error's 2-norm over `want`'s (infinite or NaN if `want` is all zeros).
    pub relative: f64,
}

/// The error norms of `got` against `want` (`e = got - want`); panics if the lengths differ or are zero.
pub fn norms(got: &[f64], want: &[f64]) -> Norms {
    assert_eq!(
        got.len(),
        want.len(),
        "norms: {} values against {}",
        got.len(),
        want.len()
    );
    assert!(!got.is_empty(), "norms of empty fields");
    let (mut sum_abs, mut sum_sq, mut linf, mut want_sq) = (0.0_f64, 0.0_f64, 0.0_f64, 0.0_f64);
    for (&g, &w) in got.iter().zip(want) {
        let e = g - w;
        sum_abs += e.abs();
        sum_sq += e * e;
        linf = linf.max(e.abs());
        want_sq += w * w;
    }
    let n = got.len() as f64;
    Norms {
        l1: sum_abs / n,
        l2: (sum_sq / n).sqrt(),
        linf,
        relative: (sum_sq / want_sq).sqrt(),
    }
}

/// Relative mass change sum(f) / sum(f0) - 1.
pub fn mass_drift(f: &[f64], f0: &[f64]) -> f64 {
    assert_eq!(
        f.len(),
        f0.len(),
        "mass_drift: {} values against {}",
        f.len(),
        f0.len()
    );
    f.iter().sum::<f64>() / f0.iter().sum::<f64>() - 1.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{cases, reference};

    #[test]
    fn norms_of_a_known_error() {
        let want = [3.0, 4.0, 0.0, 0.0];
        let got = [3.0, 2.0, 1.0, -1.0];
        // e = (0, -2, 1, -1): sum |e| = 4, sum e^2 = 6, ||want||_2 = 5.
        let n = norms(&got, &want);
        assert_eq!(n.l1, 1.0);
        assert!((n.l2 - 1.5_f64.sqrt()).abs() < 1e-15, "{n:?}");
        assert_eq!(n.linf, 2.0);
        assert!((n.relative - 6.0_f64.sqrt() / 5.0).abs() < 1e-15, "{n:?}");
    }

    #[test]
    fn norms_of_equal_fields_are_zero() {
        let f = [0.5, -1.0, 2.0];
        assert_eq!(
            norms(&f, &f),
            Norms {
                l1: 0.0,
                l2: 0.0,
                linf: 0.0,
                relative: 0.0
            }
        );
    }

    #[test]
    #[should_panic(expected = "norms")]
    fn norms_reject_mismatched_lengths() {
        norms(&[1.0, 2.0], &[1.0]);
    }

    #[test]
    fn mass_drift_is_relative() {
        assert_eq!(mass_drift(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]), 0.0);
        assert!((mass_drift(&[1.5, 2.0, 3.0], &[1.0, 2.0, 3.0]) - 0.5 / 6.0).abs() < 1e-15);
        assert!((mass_drift(&[0.0, 1.0], &[2.0, 2.0]) + 0.75).abs() < 1e-15);
    }

    /// One revolution of `cases::rotation(n, n)` with the reference at CFL 0.5.
    struct Revolution {
        /// Relative L2 error against the exact solution, `exact(1.0)`.
        exact: f64,
        /// Relative L2 error against the exact solution of the time-discrete scheme (see below).
        time_discrete: f64,
        /// `mass_drift` after the revolution.
        drift: f64,
        /// The drift the straight-line departure points alone predict.
        predicted_drift: f64,
    }

    fn revolution(n: usize) -> Revolution {
        let case = cases::rotation(n, n);
        let period = case.period.expect("rotation has a period");
        let (umax, vmax) = cases::max_speed(&case.u, &case.v);
        let dt_cfl = 0.5 * case.h / umax.max(vmax);
        // Whole steps that land exactly on the period, so the comparison time is exact.
        let steps = (period / dt_cfl).ceil() as usize;
        let dt = period / steps as f64;
        let c = dt / case.h;
        let mut f = case.f0.clone();
        for _ in 0..steps {
            f = reference::step(n, n, &f, &case.u, &case.v, c);
        }
        let exact = case.exact.as_ref().expect("rotation has an exact solution");

        let omega = 2.0 * std::f64::consts::PI;
        let wdt = omega * dt;
        let time_discrete = (case.scheme_exact.as_ref().expect("rotation has one"))(steps, dt);
        // det M = 1 + (w dt)^2: each step samples a larger area, so mass shrinks by that factor per step.
        let predicted_drift = (1.0 + wdt * wdt).powf(-(steps as f64)) - 1.0;

        Revolution {
            exact: norms(&f, &exact(period)).relative,
            time_discrete: norms(&f, &time_discrete).relative,
            drift: mass_drift(&f, &case.f0),
            predicted_drift,
        }
    }

    #[test]
    fn reference_rotation_error_64_to_128() {
        let coarse = revolution(64);
        let fine = revolution(128);
        eprintln!(
            "reference rotation, one revolution, CFL 0.5, relative L2 error:\n  \
             against exact(1.0):          64^2 {:.4e}, 128^2 {:.4e} (falls {:.2}x)\n  \
             against time-discrete exact: 64^2 {:.4e}, 128^2 {:.4e} (falls {:.2}x)\n  \
             mass drift: 64^2 {:.4e} (predicted {:.4e}), 128^2 {:.4e} (predicted {:.4e})",
            coarse.exact,
            fine.exact,
            coarse.exact / fine.exact,
            coarse.time_discrete,
            fine.time_discrete,
            coarse.time_discrete / fine.time_discrete,
            coarse.drift,
            coarse.predicted_drift,
            fine.drift,
            fine.predicted_drift,
        );
        // The cubic interpolation is third order: its part of the error falls by about 8x.
        assert!(
            fine.time_discrete * 4.0 <= coarse.time_discrete,
            "interpolation error {:.4e} -> {:.4e} falls by less than 4x",
            coarse.time_discrete,
            fine.time_discrete
        );
        // Against the true solution the first-order departure point dominates: the error halves.
        assert!(
            fine.exact * 1.8 <= coarse.exact,
            "error {:.4e} -> {:.4e} falls by less than 1.8x",
            coarse.exact,
            fine.exact
        );
        assert!(coarse.exact < 0.3, "64^2 error {:.4e}", coarse.exact);
        for r in [&coarse, &fine] {
            assert!(
                (r.drift / r.predicted_drift - 1.0).abs() < 0.05,
                "mass drift {:.4e}, predicted {:.4e}",
                r.drift,
                r.predicted_drift
            );
        }
    }
}
