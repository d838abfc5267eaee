//! The CPU reference for the Wilson-Dirac operator and its solvers, written plainly from the definitions in
//! the crate docs: per hop a 3x3 link times a colour vector for each spin, then a full 4x4 spin matrix
//! `1 -/+ gamma_mu`. It shares no code with the optimised GPU kernels (no spin projection, no half
//! spinors, no tiling), so agreement between the two is evidence, not a tautology.

use nalgebra::Vector3;
use num_complex::Complex64;

use crate::error::{Error, Result};
use crate::gamma::{gamma, identity, SpinMatrix};
use crate::gauge::GaugeField;
use crate::geometry::{Lattice, SPINOR_LEN};
use crate::spinor::{axpy, dot, read_site, write_site, SiteSpinor, SpinorField};

/// Below this, `|<a, b>|` relative to `|a| |b|` counts as zero: a BiCGStab breakdown. An exact zero
/// computes to rounding noise around 1e-16, while a healthy iteration keeps these overlaps near
/// `1 / sqrt(len)`, far above.
const BREAKDOWN: f64 = 1e-14;

/// The result of a converged [`bicgstab`].
#[derive(Clone, Debug, PartialEq)]
pub struct Solve {
    /// The solution.
    pub x: Vec<Complex64>,
    /// Iterations run.
    pub iterations: usize,
    /// `(iteration, |r| / |b|)` of the recursively updated residual, starting with `(0, 1)`.
    pub history: Vec<(usize, f64)>,
}

impl Solve {
    /// The last recorded relative residual.
    pub fn residual(&self) -> f64 {
        self.history.last().map_or(0.0, |&(_, r)| r)
    }
}

/// Checks `0 < kappa < 0.25`, the range where the Wilson-Dirac operator is a sensible quark matrix.
pub fn check_kappa(kappa: f64) -> Result<()> {
    if kappa > 0.0 && kappa < 0.25 {
        Ok(())
    } else {
        Err(Error::InvalidParameter(format!(
            "kappa = {kappa} is outside the valid range 0 < kappa < 0.25 (kappa_c is about 0.125 on a free field)"
        )))
    }
}

/// A 3x3 complex link matrix.
pub(crate) type Link = nalgebra::Matrix3<Complex64>;

/// Which operator a hop belongs to: `H` has `1 - gamma_mu` forward, `H^dag` has `1 + gamma_mu` forward.
#[derive(Clone, Copy)]
pub(crate) enum Hop {
    Plain,
    Dagger,
}

/// The spin matrices `(forward, backward)` of direction `mu`.
fn projectors(mu: usize, hop: Hop) -> (SpinMatrix, SpinMatrix) {
    let (one, g) = (identity(), gamma(mu));
    match hop {
        Hop::Plain => (one - g, one + g),
        Hop::Dagger => (one + g, one - g),
    }
}

/// `sum_t m[s][t] v[t]`, the spin matrix acting on a site spinor.
fn spin_mul(m: &SpinMatrix, v: &SiteSpinor) -> SiteSpinor {
    std::array::from_fn(|s| {
        (0..4).fold(Vector3::zeros(), |acc: Vector3<Complex64>, t| {
            acc + v[t] * m[(s, t)]
        })
    })
}

/// The hopping term at site `n`, reading neighbour `m`'s spinor through `fetch(m)`.
fn hop_site(
    lat: &Lattice,
    u: &GaugeField,
    n: usize,
    hop: Hop,
    fetch: impl Fn(usize) -> SiteSpinor,
) -> SiteSpinor {
    hop_from(hop, |mu, forward| {
        if forward {
            let (nf, sf) = lat.forward(n, mu);
            (u.links[4 * n + mu], fetch(nf), sf)
        } else {
            let (nb, sb) = lat.backward(n, mu);
            (u.links[4 * nb + mu].adjoint(), fetch(nb), sb)
        }
    })
}

/// The hopping term at one site from its 8 neighbours: `neighbour(mu, forward)` gives the link to
/// apply (`U_mu(n)` forward, `U_mu(n - mu)^dag` backward), the neighbour's spinor and the boundary sign.
pub(crate) fn hop_from(
    hop: Hop,
    neighbour: impl Fn(usize, bool) -> (Link, SiteSpinor, f64),
) -> SiteSpinor {
    let mut out: SiteSpinor = [Vector3::zeros(); 4];
    for mu in 0..4 {
        let (fwd_proj, bwd_proj) = projectors(mu, hop);
        let (link, psi, sf) = neighbour(mu, true);
        let moved: SiteSpinor = std::array::from_fn(|s| link * psi[s] * Complex64::from(sf));
        let fwd = spin_mul(&fwd_proj, &moved);
        let (link, psi, sb) = neighbour(mu, false);
        let moved: SiteSpinor = std::array::from_fn(|s| link * psi[s] * Complex64::from(sb));
        let bwd = spin_mul(&bwd_proj, &moved);
        for s in 0..4 {
            out[s] += fwd[s] + bwd[s];
        }
    }
    out
}

fn check_fields(lat: &Lattice, u: &GaugeField, psi: &SpinorField) {
    assert_eq!(u.dims, lat.dims, "gauge field and lattice differ in dims");
    assert_eq!(psi.dims, lat.dims, "spinor and lattice differ in dims");
    assert_eq!(
        u.links.len(),
        4 * lat.volume(),
        "gauge field has the wrong number of links"
    );
    assert_eq!(
        psi.data.len(),
        SPINOR_LEN * lat.volume(),
        "spinor has the wrong length"
    );
}

fn hop_full(lat: &Lattice, u: &GaugeField, psi: &SpinorField, hop: Hop) -> SpinorField {
    check_fields(lat, u, psi);
    let mut out = SpinorField::zeros(lat.dims);
    for n in 0..lat.volume() {
        let h = hop_site(lat, u, n, hop, |m| psi.site(m));
        write_site(&mut out.data, n, &h);
    }
    out
}

/// `1 - kappa H` (or its adjoint) from the hopping result.
fn one_minus_kappa(psi: &SpinorField, h: SpinorField, kappa: f64) -> SpinorField {
    let mut out = psi.clone();
    out.axpy(Complex64::new(-kappa, 0.0), &h);
    out
}

/// The hopping term `H psi(n) = sum_mu [(1 - g_mu) U_mu(n) psi(n+mu) + (1 + g_mu) U_mu(n-mu)^dag psi(n-mu)]`.
///
/// # Panics
/// If `u` or `psi` does not live on `lat`.
pub fn hopping(lat: &Lattice, u: &GaugeField, psi: &SpinorField) -> SpinorField {
    hop_full(lat, u, psi, Hop::Plain)
}

/// The adjoint hopping term, from the definition: `1 + g_mu` on the forward hop, `1 - g_mu` backward.
///
/// # Panics
/// If `u` or `psi` does not live on `lat`.
pub fn hopping_dagger(lat: &Lattice, u: &GaugeField, psi: &SpinorField) -> SpinorField {
    hop_full(lat, u, psi, Hop::Dagger)
}

/// The Wilson-Dirac operator `D psi = psi - kappa H psi`.
///
/// # Panics
/// If `u` or `psi` does not live on `lat`.
pub fn wilson_dirac(lat: &Lattice, u: &GaugeField, kappa: f64, psi: &SpinorField) -> SpinorField {
    one_minus_kappa(psi, hopping(lat, u, psi), kappa)
}

/// `D^dag psi = psi - kappa H^dag psi`, written from the definition (not as `g5 D g5`).
///
/// # Panics
/// If `u` or `psi` does not live on `lat`.
pub fn wilson_dirac_dagger(
    lat: &Lattice,
    u: &GaugeField,
    kappa: f64,
    psi: &SpinorField,
) -> SpinorField {
    one_minus_kappa(psi, hopping_dagger(lat, u, psi), kappa)
}

/// `H` from the half field `inp` (sites of parity `1 - parity`) to sites of `parity`, both in checkerboard
/// order.
fn hop_parity(lat: &Lattice, u: &GaugeField, parity: usize, inp: &[Complex64]) -> Vec<Complex64> {
    let half = lat.half_volume();
    assert_eq!(u.dims, lat.dims, "gauge field and lattice differ in dims");
    assert_eq!(
        inp.len(),
        SPINOR_LEN * half,
        "half spinor has the wrong length"
    );
    let mut out = vec![Complex64::new(0.0, 0.0); SPINOR_LEN * half];
    for e in 0..half {
        let n = lat.site_of_eo(parity * half + e);
        // Every neighbour of n has the other parity, so its checkerboard index m / 2 finds it in `inp`.
        let h = hop_site(lat, u, n, Hop::Plain, |m| read_site(inp, m / 2));
        write_site(&mut out, n / 2, &h);
    }
    out
}

/// `H_eo x_o`: the hopping term from odd sites to even sites, half fields in checkerboard order.
///
/// # Panics
/// If `u` does not live on `lat` or `x_o` is not `12 * volume / 2` long.
pub fn hopping_eo(lat: &Lattice, u: &GaugeField, x_o: &[Complex64]) -> Vec<Complex64> {
    hop_parity(lat, u, 0, x_o)
}

/// `H_oe x_e`: the hopping term from even sites to odd sites, half fields in checkerboard order.
///
/// # Panics
/// If `u` does not live on `lat` or `x_e` is not `12 * volume / 2` long.
pub fn hopping_oe(lat: &Lattice, u: &GaugeField, x_e: &[Complex64]) -> Vec<Complex64> {
    hop_parity(lat, u, 1, x_e)
}

/// The even-odd preconditioned operator `M_hat x_e = x_e - kappa^2 H_eo H_oe x_e` on even sites.
///
/// # Panics
/// If `u` does not live on `lat` or `x_e` is not `12 * volume / 2` long.
pub fn m_hat(lat: &Lattice, u: &GaugeField, kappa: f64, x_e: &[Complex64]) -> Vec<Complex64> {
    // The result overwrites H_eo H_oe x_e in place: no third half field at the solver's peak.
    let mut y = hopping_eo(lat, u, &hopping_oe(lat, u, x_e));
    let k2 = kappa * kappa;
    for (y, x) in y.iter_mut().zip(x_e) {
        *y = x - k2 * *y;
    }
    y
}

fn check_solver_params(tol: f64, max_iter: usize) -> Result<()> {
    if !(tol > 0.0 && tol.is_finite()) {
        return Err(Error::InvalidParameter(format!(
            "tolerance {tol} must be a positive finite number, e.g. 1e-10"
        )));
    }
    if max_iter == 0 {
        return Err(Error::InvalidParameter(
            "max_iter must be at least 1".to_string(),
        ));
    }
    Ok(())
}

/// Unpreconditioned BiCGStab (van der Vorst) for `op(x) = b` from `x = 0`, stopping when the recursively
/// updated residual satisfies `|r| / |b| < tol`.
///
/// The shadow residual is `r0 = b`; `b = 0` returns `x = 0` at once. Fails with
/// [`Error::InvalidParameter`] for `tol` not positive and finite or `max_iter = 0`, with
/// [`Error::Breakdown`] when `rho = <r0, r>`, `<r0, v>`, `<t, t>` or `<t, s>` vanishes relative to the
/// norms involved (or turns non-finite), and with [`Error::NotConverged`] after `max_iter` iterations.
///
/// # Panics
/// If `op` returns a vector of another length than its input.
pub fn bicgstab(
    op: impl Fn(&[Complex64]) -> Vec<Complex64>,
    b: &[Complex64],
    tol: f64,
    max_iter: usize,
) -> Result<Solve> {
    bicgstab_with(
        |v| Ok(op(v)),
        |a, c| Ok(dot(a, c)),
        b,
        tol,
        max_iter,
        &mut |_, _| Ok(()),
    )
}

/// What a solve calls after each iteration that did not end it, with the iteration and the relative
/// residual: progress output, and the checks that stop a solve (a signal); an error ends the solve
/// with it. On the ranks of a split solve it is called at the same iterations on every rank (every
/// decision of the solver is taken on sums over all ranks), so it may make collective calls.
pub type OnIteration<'a> = dyn FnMut(usize, f64) -> Result<()> + 'a;

/// [`bicgstab`] with the operator and the inner product given (a decomposed run sums over its ranks),
/// either of which may fail (a communicator), and `check` called after every iteration.
pub(crate) fn bicgstab_with(
    op: impl Fn(&[Complex64]) -> Result<Vec<Complex64>>,
    dot: impl Fn(&[Complex64], &[Complex64]) -> Result<Complex64>,
    b: &[Complex64],
    tol: f64,
    max_iter: usize,
    check: &mut OnIteration,
) -> Result<Solve> {
    let norm2 = |a: &[Complex64]| dot(a, a).map(|z| z.re);
    check_solver_params(tol, max_iter)?;
    let zero = Complex64::new(0.0, 0.0);
    let len = b.len();
    let mut x = vec![zero; len];
    let b_norm = norm2(b)?.sqrt();
    if b_norm == 0.0 {
        return Ok(Solve {
            x,
            iterations: 0,
            history: vec![(0, 0.0)],
        });
    }
    let mut r = b.to_vec();
    // The shadow residual is b itself, borrowed rather than copied.
    let r0 = b;
    let r0_norm = b_norm;
    let mut p = vec![zero; len];
    let mut v = vec![zero; len];
    let (mut rho, mut alpha, mut omega) = (
        Complex64::new(1.0, 0.0),
        Complex64::new(1.0, 0.0),
        Complex64::new(1.0, 0.0),
    );
    let mut history = vec![(0, 1.0)];
    let breakdown = |iteration: usize, what: String| Err(Error::Breakdown { iteration, what });
    // A NaN or infinity is told apart from a vanishing denominator: it means the operator or the
    // source produced one, and no other source or kappa helps.
    let degenerate = |name: &str, z: Complex64, scale: f64| {
        if !z.is_finite() {
            Some(format!(
                "{name} became {z}: the operator or the source produced a NaN or infinity (check \
                 the gauge field)"
            ))
        } else if z.norm() <= BREAKDOWN * scale {
            Some(format!("{name} = {z:.3e} vanished"))
        } else {
            None
        }
    };

    for i in 1..=max_iter {
        let rho_new = dot(r0, &r)?;
        if let Some(what) = degenerate("rho = <r0, r>", rho_new, r0_norm * norm2(&r)?.sqrt()) {
            return breakdown(i, what);
        }
        let beta = (rho_new / rho) * (alpha / omega);
        for k in 0..len {
            p[k] = r[k] + beta * (p[k] - omega * v[k]);
        }
        v = op(&p)?;
        let r0v = dot(r0, &v)?;
        if let Some(what) = degenerate("<r0, v>", r0v, r0_norm * norm2(&v)?.sqrt()) {
            return breakdown(i, what);
        }
        alpha = rho_new / r0v;
        let s: Vec<Complex64> = r.iter().zip(&v).map(|(r, v)| r - alpha * v).collect();
        let s_norm = norm2(&s)?.sqrt();
        let s_rel = s_norm / b_norm;
        if s_rel < tol {
            // The half step already converged; A s could be zero here and <t, t> would look like a breakdown.
            axpy(alpha, &p, &mut x);
            history.push((i, s_rel));
            return Ok(Solve {
                x,
                iterations: i,
                history,
            });
        }
        let t = op(&s)?;
        let tt = norm2(&t)?;
        if let Some(what) = degenerate("|t| = sqrt(<t, t>)", Complex64::from(tt.sqrt()), s_norm) {
            return breakdown(i, what);
        }
        let ts = dot(&t, &s)?;
        if let Some(what) = degenerate("<t, s>", ts, tt.sqrt() * s_norm) {
            // omega = 0 would make the next beta divide by zero.
            return breakdown(i, what);
        }
        omega = ts / tt;
        for k in 0..len {
            x[k] += alpha * p[k] + omega * s[k];
            r[k] = s[k] - omega * t[k];
        }
        let rel = norm2(&r)?.sqrt() / b_norm;
        history.push((i, rel));
        if !rel.is_finite() {
            return breakdown(
                i,
                format!(
                    "the residual became {rel}: the operator or the source produced a NaN or \
                     infinity (check the gauge field)"
                ),
            );
        }
        if rel < tol {
            return Ok(Solve {
                x,
                iterations: i,
                history,
            });
        }
        check(i, rel)?;
        rho = rho_new;
    }
    let residual = history.last().map_or(1.0, |&(_, r)| r);
    Err(Error::NotConverged {
        iterations: max_iter,
        residual,
        tolerance: tol,
        history,
    })
}

/// The solvers' input checks as errors rather than panics: `kappa` in range, `u` and `b` on `lat`.
pub(crate) fn check_solve_inputs(
    lat: &Lattice,
    u: &GaugeField,
    kappa: f64,
    b: &SpinorField,
) -> Result<()> {
    check_kappa(kappa)?;
    if u.dims != lat.dims || u.links.len() != 4 * lat.volume() {
        return Err(Error::InvalidParameter(format!(
            "the gauge field ({:?}, {} links) does not live on the lattice {:?}",
            u.dims,
            u.links.len(),
            lat.dims
        )));
    }
    if b.dims != lat.dims || b.data.len() != SPINOR_LEN * lat.volume() {
        return Err(Error::InvalidParameter(format!(
            "the source ({:?}, {} entries) does not live on the lattice {:?}",
            b.dims,
            b.data.len(),
            lat.dims
        )));
    }
    Ok(())
}

/// The true relative residual `|b - D x| / |b|` (0 for `b = 0`).
pub fn true_residual(
    lat: &Lattice,
    u: &GaugeField,
    kappa: f64,
    b: &SpinorField,
    x: &SpinorField,
) -> f64 {
    let b_norm = b.norm2().sqrt();
    if b_norm == 0.0 {
        return x.norm2().sqrt();
    }
    // |b - (x - kappa H x)| summed as it goes: no D x and no difference field beside H x.
    let h = hopping(lat, u, x);
    let r2: f64 = b
        .data
        .iter()
        .zip(&x.data)
        .zip(&h.data)
        .map(|((b, x), h)| (b - (x + Complex64::new(-kappa, 0.0) * h)).norm_sqr())
        .sum();
    r2.sqrt() / b_norm
}

/// Solves `D x = b` by BiCGStab on the full lattice. Returns `x`, the solver record and the true relative
/// residual `|b - D x| / |b|`.
pub fn solve_full(
    lat: &Lattice,
    u: &GaugeField,
    kappa: f64,
    b: &SpinorField,
    tol: f64,
    max_iter: usize,
) -> Result<(SpinorField, Solve, f64)> {
    check_solve_inputs(lat, u, kappa, b)?;
    solve_full_by(
        |psi| wilson_dirac(lat, u, kappa, psi),
        b,
        tol,
        max_iter,
        |x| true_residual(lat, u, kappa, b, x),
    )
}

/// BiCGStab on the full lattice for the operator `apply`: `x`, the solver record and `residual(x)`.
pub(crate) fn solve_full_by(
    apply: impl Fn(&SpinorField) -> SpinorField,
    b: &SpinorField,
    tol: f64,
    max_iter: usize,
    residual: impl Fn(&SpinorField) -> f64,
) -> Result<(SpinorField, Solve, f64)> {
    let field = |data: Vec<Complex64>| SpinorField { dims: b.dims, data };
    let solve = bicgstab(|v| apply(&field(v.to_vec())).data, &b.data, tol, max_iter)?;
    let x = field(solve.x.clone());
    let res = residual(&x);
    Ok((x, solve, res))
}

/// Solves `D x = b` by even-odd preconditioning: BiCGStab on `M_hat x_e = b_e + kappa H_eo b_o`, then
/// `x_o = b_o + kappa H_oe x_e`. Returns the full-lattice `x`, the record of the even-site solve (its
/// residuals are those of the `M_hat` system) and the true relative residual `|b - D x| / |b|`.
pub fn solve_eo(
    lat: &Lattice,
    u: &GaugeField,
    kappa: f64,
    b: &SpinorField,
    tol: f64,
    max_iter: usize,
) -> Result<(SpinorField, Solve, f64)> {
    solve_eo_checked(lat, u, kappa, b, tol, max_iter, &mut |_, _| Ok(()))
}

/// [`solve_eo`] with `check` called after every iteration of the even-site solve ([`OnIteration`]):
/// progress output, and the checks that may stop the solve with an error (a signal).
pub fn solve_eo_checked(
    lat: &Lattice,
    u: &GaugeField,
    kappa: f64,
    b: &SpinorField,
    tol: f64,
    max_iter: usize,
    check: &mut OnIteration,
) -> Result<(SpinorField, Solve, f64)> {
    check_solve_inputs(lat, u, kappa, b)?;
    let (b_e, b_o) = b.to_eo();
    let mut src = b_e;
    axpy(
        Complex64::new(kappa, 0.0),
        &hopping_eo(lat, u, &b_o),
        &mut src,
    );
    let solve = bicgstab_with(
        |v| Ok(m_hat(lat, u, kappa, v)),
        |a, c| Ok(dot(a, c)),
        &src,
        tol,
        max_iter,
        check,
    )?;
    drop(src);
    let mut x_o = b_o;
    axpy(
        Complex64::new(kappa, 0.0),
        &hopping_oe(lat, u, &solve.x),
        &mut x_o,
    );
    let x = SpinorField::from_eo(lat.dims, &solve.x, &x_o)?;
    let res = true_residual(lat, u, kappa, b, &x);
    Ok((x, solve, res))
}
