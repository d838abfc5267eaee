//! The CPU reference checked against mathematics it must satisfy: the Clifford algebra, lattice geometry,
//! Haar SU(3), gauge invariance and covariance, gamma5-hermiticity, free-field plane waves, even-odd
//! identities and solver residuals.

use lattice_gpu_lqcd::gamma::{gamma, gamma5, identity, SpinMatrix};
use lattice_gpu_lqcd::gauge::{random_gauge_transform, random_su3, su3_violation, GaugeField, Su3};
use lattice_gpu_lqcd::geometry::Lattice;
use lattice_gpu_lqcd::reference::{
    bicgstab, check_kappa, hopping, hopping_dagger, hopping_eo, hopping_oe, m_hat, solve_eo,
    solve_full, wilson_dirac, wilson_dirac_dagger,
};
use lattice_gpu_lqcd::spinor::{dot, norm2, SpinorField};
use lattice_gpu_lqcd::{Error, Result};
use nalgebra::Vector3;
use num_complex::Complex64;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::f64::consts::PI;

const D44: [usize; 4] = [4, 4, 4, 4];
const D448: [usize; 4] = [4, 4, 4, 8];

fn c(re: f64, im: f64) -> Complex64 {
    Complex64::new(re, im)
}

fn max_diff(a: &[Complex64], b: &[Complex64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).norm())
        .fold(0.0, f64::max)
}

fn rel_diff(a: &[Complex64], b: &[Complex64]) -> f64 {
    let d: Vec<Complex64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    (norm2(&d) / norm2(b)).sqrt()
}

fn mat_diff(a: &SpinMatrix, b: &SpinMatrix) -> f64 {
    (a - b).iter().map(|z| z.norm()).fold(0.0, f64::max)
}

// ----------------------------------------------------------------------------------------------
// Gamma matrices
// ----------------------------------------------------------------------------------------------

/// The crate docs' table, transcribed independently of `gamma.rs` (as (re, im) rows).
fn table(mu: usize) -> SpinMatrix {
    let rows: [[(f64, f64); 4]; 4] = match mu {
        0 => [
            [(0., 0.), (0., 0.), (0., 0.), (0., 1.)],
            [(0., 0.), (0., 0.), (0., 1.), (0., 0.)],
            [(0., 0.), (0., -1.), (0., 0.), (0., 0.)],
            [(0., -1.), (0., 0.), (0., 0.), (0., 0.)],
        ],
        1 => [
            [(0., 0.), (0., 0.), (0., 0.), (-1., 0.)],
            [(0., 0.), (0., 0.), (1., 0.), (0., 0.)],
            [(0., 0.), (1., 0.), (0., 0.), (0., 0.)],
            [(-1., 0.), (0., 0.), (0., 0.), (0., 0.)],
        ],
        2 => [
            [(0., 0.), (0., 0.), (0., 1.), (0., 0.)],
            [(0., 0.), (0., 0.), (0., 0.), (0., -1.)],
            [(0., -1.), (0., 0.), (0., 0.), (0., 0.)],
            [(0., 0.), (0., 1.), (0., 0.), (0., 0.)],
        ],
        _ => [
            [(0., 0.), (0., 0.), (1., 0.), (0., 0.)],
            [(0., 0.), (0., 0.), (0., 0.), (1., 0.)],
            [(1., 0.), (0., 0.), (0., 0.), (0., 0.)],
            [(0., 0.), (1., 0.), (0., 0.), (0., 0.)],
        ],
    };
    SpinMatrix::from_fn(|i, j| c(rows[i][j].0, rows[i][j].1))
}

#[test]
fn gamma_matrices_match_the_degrand_rossi_table() {
    for mu in 0..4 {
        assert_eq!(gamma(mu), table(mu), "gamma({mu})");
        assert_eq!(gamma(mu), gamma(mu).adjoint(), "gamma({mu}) is hermitian");
    }
}

#[test]
fn gamma_clifford_algebra_and_gamma5() {
    for mu in 0..4 {
        for nu in 0..4 {
            let anti = gamma(mu) * gamma(nu) + gamma(nu) * gamma(mu);
            let want = if mu == nu {
                identity() * c(2.0, 0.0)
            } else {
                SpinMatrix::zeros()
            };
            assert!(mat_diff(&anti, &want) == 0.0, "{{g{mu}, g{nu}}} = {anti}");
        }
        let g5g = gamma5() * gamma(mu) + gamma(mu) * gamma5();
        assert!(
            mat_diff(&g5g, &SpinMatrix::zeros()) == 0.0,
            "g5 anticommutes with g{mu}"
        );
    }
    let product = gamma(0) * gamma(1) * gamma(2) * gamma(3);
    assert_eq!(product, gamma5());
    let diag = SpinMatrix::from_diagonal(&nalgebra::Vector4::new(
        c(1., 0.),
        c(1., 0.),
        c(-1., 0.),
        c(-1., 0.),
    ));
    assert_eq!(gamma5(), diag);
}

// ----------------------------------------------------------------------------------------------
// Geometry
// ----------------------------------------------------------------------------------------------

#[test]
fn geometry_round_trips_and_neighbours() {
    for dims in [D448, [2, 4, 6, 8], [6, 2, 2, 4]] {
        for antiperiodic in [false, true] {
            let lat = Lattice::new(dims, antiperiodic).unwrap();
            let v = lat.volume();
            assert_eq!(v, dims.iter().product::<usize>());
            assert_eq!(lat.half_volume() * 2, v);
            for n in 0..v {
                let x = lat.coords(n);
                assert_eq!(
                    n,
                    x[0] + dims[0] * (x[1] + dims[1] * (x[2] + dims[2] * x[3]))
                );
                assert_eq!(lat.index(x), n);
                assert_eq!(lat.parity(n), x.iter().sum::<usize>() % 2);
                for mu in 0..4 {
                    let (f, sf) = lat.forward(n, mu);
                    let (b, sb) = lat.backward(n, mu);
                    assert_eq!(lat.backward(f, mu), (n, sf), "back of forward");
                    assert_eq!(lat.forward(b, mu), (n, sb), "forward of back");
                    assert_ne!(lat.parity(f), lat.parity(n));
                    let xf = lat.coords(f);
                    for nu in 0..4 {
                        let want = if nu == mu {
                            (x[nu] + 1) % dims[nu]
                        } else {
                            x[nu]
                        };
                        assert_eq!(xf[nu], want);
                    }
                    let wraps_f = x[mu] == dims[mu] - 1;
                    let wraps_b = x[mu] == 0;
                    let sign = |w: bool| {
                        if w && mu == 3 && antiperiodic {
                            -1.0
                        } else {
                            1.0
                        }
                    };
                    assert_eq!(sf, sign(wraps_f), "forward sign at {x:?} mu {mu}");
                    assert_eq!(sb, sign(wraps_b), "backward sign at {x:?} mu {mu}");
                }
            }
        }
    }
}

#[test]
fn eo_index_is_a_bijection_with_checkerboard_halves() {
    let lat = Lattice::new(D448, true).unwrap();
    let (v, h) = (lat.volume(), lat.half_volume());
    let mut seen = vec![false; v];
    for n in 0..v {
        let e = lat.eo_index(n);
        assert_eq!(e, lat.parity(n) * h + n / 2);
        assert!(!seen[e], "eo index {e} used twice");
        seen[e] = true;
        assert_eq!(lat.site_of_eo(e), n);
    }
    for e in 0..v {
        let n = lat.site_of_eo(e);
        assert_eq!(lat.parity(n), e / h);
        assert_eq!(lat.eo_index(n), e);
    }
    // The first odd site is x = 1 at the origin's row.
    assert_eq!(lat.site_of_eo(h), 1);
    // (1, 1, 0, 0) is even and has checkerboard index (1 + 4) / 2 = 2.
    assert_eq!(lat.eo_index(lat.index([1, 1, 0, 0])), 2);
}

#[test]
fn invalid_dims_are_rejected_with_a_fix() {
    for (dims, needle) in [
        ([3, 4, 4, 4], "odd"),
        ([4, 4, 4, 5], "odd"),
        ([0, 4, 4, 4], "at least 2"),
        ([4, 4, 1, 4], "at least 2"),
        ([1024, 1024, 1024, 2], "u32"),
        ([usize::MAX - 1, 4, 4, 4], "u32"),
    ] {
        match Lattice::new(dims, false) {
            Err(Error::InvalidDims { dims: d, why }) => {
                assert_eq!(d, dims);
                assert!(why.contains(needle), "{dims:?}: {why}");
            }
            other => panic!("{dims:?} gave {other:?}"),
        }
    }
    assert!(Lattice::new([2, 2, 2, 2], true).is_ok());
    assert!(Lattice::new([256, 256, 256, 2], false).is_ok());
}

// ----------------------------------------------------------------------------------------------
// Gauge fields
// ----------------------------------------------------------------------------------------------

#[test]
fn random_links_are_su3() {
    let u = GaugeField::random(D44, 1);
    assert_eq!(u.links.len(), 4 * 256);
    assert!(
        u.max_unitarity_violation() < 1e-13,
        "{}",
        u.max_unitarity_violation()
    );
    for link in &u.links {
        assert!((link * link.adjoint() - Su3::identity()).norm() < 1e-13);
        assert!((link.determinant() - c(1.0, 0.0)).norm() < 1e-13);
    }
    // Distinct links and a reproducible stream.
    assert!((u.links[0] - u.links[1]).norm() > 0.1);
    assert_eq!(u, GaugeField::random(D44, 1));
    assert_ne!(u, GaugeField::random(D44, 2));
}

#[test]
fn random_su3_has_haar_moments() {
    // Haar SU(3): E U = 0, E tr U = 0, E |tr U|^2 = 1, E (tr U)^3 = 1 (0 for U(3)), E |U_00|^2 = 1/3.
    let mut rng = StdRng::seed_from_u64(7);
    let samples = 20_000;
    let (mut t1, mut t2, mut t3, mut u00) = (c(0., 0.), 0.0, c(0., 0.), 0.0);
    // E U = 0 entry by entry: fails if R's diagonal phases are not divided out of Q.
    let mut mean = Su3::zeros();
    for _ in 0..samples {
        let u = random_su3(&mut rng);
        mean += u;
        let t = u.trace();
        t1 += t;
        t2 += t.norm_sqr();
        t3 += t * t * t;
        u00 += u[(0, 0)].norm_sqr();
    }
    let s = samples as f64;
    let (t1, t2, t3, u00) = (t1 / s, t2 / s, t3 / s, u00 / s);
    assert!(t1.norm() < 0.04, "E tr U = {t1}");
    assert!((t2 - 1.0).abs() < 0.05, "E |tr U|^2 = {t2}");
    assert!((t3 - 1.0).norm() < 0.12, "E (tr U)^3 = {t3}");
    assert!((u00 - 1.0 / 3.0).abs() < 0.01, "E |U_00|^2 = {u00}");
    let mean = mean / c(s, 0.0);
    let worst = mean.iter().map(|z| z.norm()).fold(0.0, f64::max);
    assert!(worst < 0.02, "E U = {mean}");
}

#[test]
fn plaquette_of_unit_random_and_single_link_fields() {
    assert_eq!(GaugeField::unit(D448).plaquette(), 1.0);
    let p = GaugeField::random(D44, 3).plaquette();
    assert!(p.abs() < 0.05, "hot plaquette {p}");

    // One link U_x(0) = diag(e^{i th}, e^{-i th}, 1) enters 6 plaquettes, each with Re tr = 1 + 2 cos th.
    let th = 0.7;
    let mut u = GaugeField::unit(D44);
    u.links[0] = Su3::from_diagonal(&Vector3::new(
        Complex64::from_polar(1.0, th),
        Complex64::from_polar(1.0, -th),
        c(1.0, 0.0),
    ));
    let want = 1.0 - (2.0 / 3.0) * (1.0 - th.cos()) / 256.0;
    assert!(
        (u.plaquette() - want).abs() < 1e-15,
        "{} vs {want}",
        u.plaquette()
    );
}

#[test]
fn plaquette_is_gauge_invariant() {
    let u = GaugeField::random(D448, 4);
    let g = random_gauge_transform(D448, 5);
    let ug = u.gauge_transform(&g);
    assert!(
        (ug.links[0] - u.links[0]).norm() > 0.1,
        "the transform did something"
    );
    assert!(ug.max_unitarity_violation() < 1e-13);
    let (p, pg) = (u.plaquette(), ug.plaquette());
    assert!((p - pg).abs() < 1e-12, "{p} vs {pg}");
    // A pure gauge is flat.
    let flat = GaugeField::unit(D448).gauge_transform(&g);
    assert!((flat.plaquette() - 1.0).abs() < 1e-12);
}

#[test]
fn reunitarize_repairs_a_perturbed_field() {
    let mut u = GaugeField::random(D44, 8);
    let original = u.clone();
    u.reunitarize();
    assert!(
        max_link_diff(&u, &original) < 1e-13,
        "SU(3) links are fixed points"
    );

    let noise = random_gauge_transform(D44, 9);
    for (link, n) in u.links.iter_mut().zip(noise.iter().cycle()) {
        *link += n * c(1e-4, 0.0);
    }
    let before = u.max_unitarity_violation();
    assert!(before > 1e-5, "the perturbation shows: {before}");
    u.reunitarize();
    let after = u.max_unitarity_violation();
    assert!(after < 1e-14, "after reunitarize {after}");
    assert!(
        max_link_diff(&u, &original) < 1e-3,
        "stays near the original"
    );
    for link in &u.links {
        assert!(su3_violation(link) < 1e-14);
    }
}

fn max_link_diff(a: &GaugeField, b: &GaugeField) -> f64 {
    a.links
        .iter()
        .zip(&b.links)
        .map(|(x, y)| (x - y).norm())
        .fold(0.0, f64::max)
}

// ----------------------------------------------------------------------------------------------
// Spinors
// ----------------------------------------------------------------------------------------------

#[test]
fn spinor_layout_and_eo_split() {
    let lat = Lattice::new(D448, false).unwrap();
    let p = SpinorField::point_source(D448, 2, 1);
    assert_eq!(p.data.len(), 12 * lat.volume());
    assert_eq!(p.data[7], c(1.0, 0.0));
    assert_eq!(p.norm2(), 1.0);

    let psi = SpinorField::random(D448, 11);
    let (e, o) = psi.to_eo();
    assert_eq!(e.len(), 12 * lat.half_volume());
    // Site n = 1 (x = 1) is odd with checkerboard index 0; site index(1, 1, 0, 0) is even with index 2.
    assert_eq!(&o[0..12], &psi.data[12..24]);
    let n = lat.index([1, 1, 0, 0]);
    assert_eq!(&e[24..36], &psi.data[12 * n..12 * n + 12]);
    assert_eq!(SpinorField::from_eo(D448, &e, &o).unwrap(), psi);
    assert!(matches!(
        SpinorField::from_eo(D448, &e[1..], &o),
        Err(Error::InvalidParameter(_))
    ));

    let phi = SpinorField::random(D448, 12);
    let d = psi.dot(&phi);
    assert!((d - phi.dot(&psi).conj()).norm() < 1e-10);
    assert!((psi.dot(&psi).re - psi.norm2()).abs() < 1e-9);
    let mean = psi.norm2() / psi.data.len() as f64;
    assert!((mean - 1.0).abs() < 0.05, "E|z|^2 = {mean}");
}

// ----------------------------------------------------------------------------------------------
// The Wilson-Dirac operator
// ----------------------------------------------------------------------------------------------

/// One spinor at site `n` as 4 colour vectors.
fn site(psi: &SpinorField, n: usize) -> [Vector3<Complex64>; 4] {
    psi.site(n)
}

#[test]
fn hopping_stencil_pinned_by_a_point_source() {
    // psi = delta(n, n0) w: then (H psi)(n0 - mu) = (1 - g_mu) U_mu(n0 - mu) w and
    // (H psi)(n0 + mu) = (1 + g_mu) U_mu(n0)^dag w, times -1 across the antiperiodic t boundary.
    let lat = Lattice::new(D448, true).unwrap();
    let u = GaugeField::random(D448, 21);
    let w = SpinorField::random([2, 2, 2, 2], 22).data[..12].to_vec();
    for n0 in [0, lat.index([1, 2, 3, 7]), lat.index([3, 0, 2, 4])] {
        let mut psi = SpinorField::zeros(D448);
        psi.data[12 * n0..12 * n0 + 12].copy_from_slice(&w);
        let h = hopping(&lat, &u, &psi);
        let ws = site(&psi, n0);
        let mut touched = 0;
        for mu in 0..4 {
            let (nb, sb) = lat.backward(n0, mu);
            let (nf, sf) = lat.forward(n0, mu);
            let x0 = lat.coords(n0);
            assert_eq!(sb, if mu == 3 && x0[3] == 0 { -1.0 } else { 1.0 });
            let apply = |proj: SpinMatrix, link: Su3, sign: f64| -> Vec<Complex64> {
                let moved: Vec<Vector3<Complex64>> = ws.iter().map(|v| link * v).collect();
                let mut out = vec![c(0., 0.); 12];
                for s in 0..4 {
                    for t in 0..4 {
                        for col in 0..3 {
                            out[3 * s + col] += proj[(s, t)] * moved[t][col] * sign;
                        }
                    }
                }
                out
            };
            let want_b = apply(identity() - gamma(mu), u.links[4 * nb + mu], sb);
            let want_f = apply(identity() + gamma(mu), u.links[4 * n0 + mu].adjoint(), sf);
            assert!(
                max_diff(&h.data[12 * nb..12 * nb + 12], &want_b) < 1e-14,
                "n0 {n0} mu {mu} backward site"
            );
            assert!(
                max_diff(&h.data[12 * nf..12 * nf + 12], &want_f) < 1e-14,
                "n0 {n0} mu {mu} forward site"
            );
            touched += 2;
        }
        let nonzero = (0..lat.volume())
            .filter(|&n| norm2(&h.data[12 * n..12 * n + 12]) > 0.0)
            .count();
        assert_eq!(nonzero, touched, "H reaches exactly the 8 neighbours");
    }
}

#[test]
fn gamma5_hermiticity_and_dagger() {
    let lat = Lattice::new(D448, true).unwrap();
    let u = GaugeField::random(D448, 31);
    let kappa = 0.13;
    let phi = SpinorField::random(D448, 32);
    let psi = SpinorField::random(D448, 33);
    let lhs = phi.dot(&wilson_dirac(&lat, &u, kappa, &psi));
    let g5dg5 = wilson_dirac(&lat, &u, kappa, &phi.apply_gamma5()).apply_gamma5();
    let rhs = g5dg5.dot(&psi);
    assert!((lhs - rhs).norm() < 1e-12 * lhs.norm(), "{lhs} vs {rhs}");
    let rhs = wilson_dirac_dagger(&lat, &u, kappa, &phi).dot(&psi);
    assert!((lhs - rhs).norm() < 1e-12 * lhs.norm(), "{lhs} vs {rhs}");
    // Fieldwise D^dag = g5 D g5, and D is not hermitian (so the checks above had something to find).
    let dd = wilson_dirac_dagger(&lat, &u, kappa, &phi);
    assert!(rel_diff(&dd.data, &g5dg5.data) < 1e-13);
    let d = wilson_dirac(&lat, &u, kappa, &phi);
    assert!(rel_diff(&d.data, &dd.data) > 0.1);
    // And H^dag is the adjoint of H itself.
    let lhs = phi.dot(&hopping(&lat, &u, &psi));
    let rhs = hopping_dagger(&lat, &u, &phi).dot(&psi);
    assert!((lhs - rhs).norm() < 1e-12 * lhs.norm(), "{lhs} vs {rhs}");
}

#[test]
fn gauge_covariance() {
    for antiperiodic in [false, true] {
        let lat = Lattice::new(D448, antiperiodic).unwrap();
        let u = GaugeField::random(D448, 41);
        let g = random_gauge_transform(D448, 42);
        let psi = SpinorField::random(D448, 43);
        let lhs = wilson_dirac(
            &lat,
            &u.gauge_transform(&g),
            0.124,
            &psi.gauge_transform(&g),
        );
        let rhs = wilson_dirac(&lat, &u, 0.124, &psi).gauge_transform(&g);
        assert!(rel_diff(&lhs.data, &rhs.data) < 1e-12);
        // Transforming only the spinor breaks it, so the check is not empty.
        let wrong = wilson_dirac(&lat, &u, 0.124, &psi.gauge_transform(&g));
        assert!(rel_diff(&wrong.data, &rhs.data) > 0.1);
    }
}

/// The free-field symbol derived from the operator: with `psi(n + mu) = e^{i p_mu} psi(n)`,
/// `H psi = sum_mu [(1 - g_mu) e^{i p_mu} + (1 + g_mu) e^{-i p_mu}] psi = sum_mu [2 cos p_mu - 2 i g_mu sin p_mu] psi`,
/// so `D = 1 - 2 kappa sum cos p_mu + 2 i kappa sum g_mu sin p_mu`.
fn free_symbol(kappa: f64, p: [f64; 4]) -> SpinMatrix {
    let mut m = identity()
        * c(
            1.0 - 2.0 * kappa * p.iter().map(|q| q.cos()).sum::<f64>(),
            0.0,
        );
    for (mu, q) in p.iter().enumerate() {
        m += gamma(mu) * c(0.0, 2.0 * kappa * q.sin());
    }
    m
}

fn apply_spin(m: &SpinMatrix, u: &[Complex64; 12]) -> [Complex64; 12] {
    std::array::from_fn(|k| {
        let (s, col) = (k / 3, k % 3);
        (0..4).map(|t| m[(s, t)] * u[3 * t + col]).sum()
    })
}

#[test]
fn free_field_plane_waves() {
    let kappa = 0.11;
    let u_vec: [Complex64; 12] =
        std::array::from_fn(|k| c(0.3 * k as f64 - 1.0, 0.1 + 0.05 * (k * k) as f64));
    let dims = D448;
    let l = dims.map(|d| d as f64);
    for antiperiodic in [false, true] {
        let lat = Lattice::new(dims, antiperiodic).unwrap();
        let unit = GaugeField::unit(dims);
        for k in [
            [0, 0, 0, 0],
            [1, 0, 0, 0],
            [0, 1, 3, 2],
            [1, 2, 3, 5],
            [3, 1, 2, 7],
        ] {
            let pt_shift = if antiperiodic { PI / l[3] } else { 0.0 };
            let p: [f64; 4] = std::array::from_fn(|mu| {
                2.0 * PI * k[mu] as f64 / l[mu] + if mu == 3 { pt_shift } else { 0.0 }
            });
            let psi = SpinorField::plane_wave(dims, p, u_vec);
            let got = wilson_dirac(&lat, &unit, kappa, &psi);
            let want = SpinorField::plane_wave(dims, p, apply_spin(&free_symbol(kappa, p), &u_vec));
            assert!(
                max_diff(&got.data, &want.data) < 1e-12,
                "p = {p:?}, antiperiodic {antiperiodic}"
            );
            // The opposite sign of the gamma term is wrong whenever some sin p_mu is not zero.
            if p.iter().any(|q| q.sin().abs() > 1e-3) {
                let flipped: [f64; 4] = p.map(|q| -q);
                let wrong_m = free_symbol(kappa, flipped);
                let wrong = SpinorField::plane_wave(dims, p, apply_spin(&wrong_m, &u_vec));
                assert!(max_diff(&got.data, &wrong.data) > 1e-3);
            }
        }
    }
    // With antiperiodic t a periodic t-momentum is no eigenmode: the boundary sign is really applied.
    let lat = Lattice::new(dims, true).unwrap();
    let p = [0.0, 0.0, 0.0, 2.0 * PI / l[3]];
    let psi = SpinorField::plane_wave(dims, p, u_vec);
    let got = wilson_dirac(&lat, &GaugeField::unit(dims), kappa, &psi);
    let want = SpinorField::plane_wave(dims, p, apply_spin(&free_symbol(kappa, p), &u_vec));
    assert!(max_diff(&got.data, &want.data) > 0.1);
}

// ----------------------------------------------------------------------------------------------
// Even-odd
// ----------------------------------------------------------------------------------------------

#[test]
fn eo_hopping_matches_full_hopping() {
    let lat = Lattice::new(D448, true).unwrap();
    let u = GaugeField::random(D448, 51);
    let psi = SpinorField::random(D448, 52);
    let (e, o) = psi.to_eo();
    let zeros = vec![c(0., 0.); e.len()];
    let only_odd = SpinorField::from_eo(D448, &zeros, &o).unwrap();
    let only_even = SpinorField::from_eo(D448, &e, &zeros).unwrap();

    let (h_e, h_o) = hopping(&lat, &u, &only_odd).to_eo();
    assert!(max_diff(&h_e, &hopping_eo(&lat, &u, &o)) < 1e-13);
    assert_eq!(norm2(&h_o), 0.0, "H maps odd sites to even ones only");

    let (h_e, h_o) = hopping(&lat, &u, &only_even).to_eo();
    assert!(max_diff(&h_o, &hopping_oe(&lat, &u, &e)) < 1e-13);
    assert_eq!(norm2(&h_e), 0.0, "H maps even sites to odd ones only");
}

#[test]
fn m_hat_is_the_schur_complement() {
    // D (x_e, kappa H_oe x_e) = (M_hat x_e, 0).
    let lat = Lattice::new(D44, true).unwrap();
    let u = GaugeField::random(D44, 61);
    let kappa = 0.12;
    let (x_e, _) = SpinorField::random(D44, 62).to_eo();
    let x_o: Vec<Complex64> = hopping_oe(&lat, &u, &x_e)
        .iter()
        .map(|z| z * kappa)
        .collect();
    let full = SpinorField::from_eo(D44, &x_e, &x_o).unwrap();
    let (d_e, d_o) = wilson_dirac(&lat, &u, kappa, &full).to_eo();
    let mh = m_hat(&lat, &u, kappa, &x_e);
    assert!(rel_diff(&d_e, &mh) < 1e-13);
    assert!(norm2(&d_o).sqrt() < 1e-13 * norm2(&x_e).sqrt());
    assert!(rel_diff(&mh, &x_e) > 1e-3, "M_hat is not the identity");
}

#[test]
fn solve_eo_solves_d_and_matches_solve_full() -> Result<()> {
    let lat = Lattice::new(D448, true)?;
    let u = GaugeField::random(D448, 71);
    let b = SpinorField::random(D448, 72);
    let kappa = 0.12;
    let (x_eo, s_eo, res_eo) = solve_eo(&lat, &u, kappa, &b, 1e-11, 500)?;
    let (x_full, s_full, res_full) = solve_full(&lat, &u, kappa, &b, 1e-11, 500)?;
    let r = b.sub(&wilson_dirac(&lat, &u, kappa, &x_eo));
    let true_eo = (r.norm2() / b.norm2()).sqrt();
    assert!(
        (true_eo - res_eo).abs() < 1e-14,
        "reported {res_eo} vs {true_eo}"
    );
    assert!(res_eo < 1e-10 && res_full < 1e-10, "{res_eo} {res_full}");
    assert!(rel_diff(&x_eo.data, &x_full.data) < 1e-9);
    assert!(
        s_eo.iterations < s_full.iterations,
        "{} vs {}",
        s_eo.iterations,
        s_full.iterations
    );
    Ok(())
}

// ----------------------------------------------------------------------------------------------
// BiCGStab
// ----------------------------------------------------------------------------------------------

#[test]
fn bicgstab_converges_and_reports_the_true_residual() -> Result<()> {
    let lat = Lattice::new(D44, true)?;
    let u = GaugeField::random(D44, 81);
    let b = SpinorField::random(D44, 82);
    let kappa = 0.12;
    let (x, solve, true_res) = solve_full(&lat, &u, kappa, &b, 1e-10, 1000)?;
    let reported = solve.residual();
    assert!(reported < 1e-10, "{reported}");
    assert_eq!(solve.history[0], (0, 1.0));
    assert_eq!(solve.history.last().map(|h| h.0), Some(solve.iterations));
    assert!(
        solve.iterations > 3,
        "a real solve takes several iterations"
    );
    let direct = (b.sub(&wilson_dirac(&lat, &u, kappa, &x)).norm2() / b.norm2()).sqrt();
    assert!((direct - true_res).abs() < 1e-15);
    assert!(true_res < 2e-10, "{true_res}");
    assert!(
        (true_res - reported).abs() < 1e-11,
        "true {true_res} vs reported {reported}"
    );
    Ok(())
}

#[test]
fn bicgstab_not_converged_carries_the_history() {
    let lat = Lattice::new(D44, false).unwrap();
    let u = GaugeField::random(D44, 91);
    let b = SpinorField::random(D44, 92);
    match solve_full(&lat, &u, 0.12, &b, 1e-10, 2) {
        Err(Error::NotConverged {
            iterations,
            residual,
            tolerance,
            history,
        }) => {
            assert_eq!(iterations, 2);
            assert_eq!(tolerance, 1e-10);
            assert_eq!(history.len(), 3);
            assert_eq!(history[0], (0, 1.0));
            assert_eq!(history[2], (2, residual));
            assert!(residual > 1e-10 && residual < 1.0, "{residual}");
        }
        other => panic!("expected NotConverged, got {other:?}"),
    }
}

#[test]
fn bicgstab_detects_breakdown_and_solves_trivial_systems() {
    let b = SpinorField::random([2, 2, 2, 2], 93).data;
    let zero_op = |v: &[Complex64]| vec![c(0., 0.); v.len()];
    match bicgstab(zero_op, &b, 1e-10, 10) {
        Err(Error::Breakdown { iteration, what }) => {
            assert_eq!(iteration, 1);
            assert!(what.contains("<r0, v>"), "{what}");
        }
        other => panic!("expected Breakdown, got {other:?}"),
    }
    // 2 x converges in one step with x = b / 2.
    let s = bicgstab(|v| v.iter().map(|z| z * 2.0).collect(), &b, 1e-12, 10).unwrap();
    assert_eq!(s.iterations, 1);
    let half: Vec<Complex64> = b.iter().map(|z| z * 0.5).collect();
    assert!(max_diff(&s.x, &half) < 1e-14);
    // b = 0 gives x = 0 at once.
    let s = bicgstab(|v| v.to_vec(), &vec![c(0., 0.); 24], 1e-10, 10).unwrap();
    assert_eq!((s.iterations, norm2(&s.x)), (0, 0.0));
    // Bad tolerances and iteration counts.
    assert!(matches!(
        bicgstab(|v| v.to_vec(), &b, 0.0, 10),
        Err(Error::InvalidParameter(_))
    ));
    assert!(matches!(
        bicgstab(|v| v.to_vec(), &b, f64::NAN, 10),
        Err(Error::InvalidParameter(_))
    ));
    assert!(matches!(
        bicgstab(|v| v.to_vec(), &b, 1e-10, 0),
        Err(Error::InvalidParameter(_))
    ));
    assert!(dot(&b, &b).re > 0.0);
}

#[test]
fn invalid_kappa_is_rejected_with_the_range() {
    let lat = Lattice::new([2, 2, 2, 2], true).unwrap();
    let u = GaugeField::unit(lat.dims);
    let b = SpinorField::point_source(lat.dims, 0, 0);
    for kappa in [0.0, -0.1, 0.25, 0.3, f64::NAN, f64::INFINITY] {
        match check_kappa(kappa) {
            Err(Error::InvalidParameter(msg)) => assert!(msg.contains("0 < kappa < 0.25"), "{msg}"),
            other => panic!("kappa {kappa} gave {other:?}"),
        }
        assert!(matches!(
            solve_full(&lat, &u, kappa, &b, 1e-10, 10),
            Err(Error::InvalidParameter(_))
        ));
        assert!(matches!(
            solve_eo(&lat, &u, kappa, &b, 1e-10, 10),
            Err(Error::InvalidParameter(_))
        ));
    }
    for kappa in [1e-6, 0.125, 0.2499] {
        assert!(check_kappa(kappa).is_ok());
    }
    // A source on another lattice is refused, not indexed out of bounds.
    let b4 = SpinorField::point_source(D44, 0, 0);
    assert!(matches!(
        solve_eo(&lat, &u, 0.1, &b4, 1e-10, 10),
        Err(Error::InvalidParameter(_))
    ));
}

#[test]
fn a_nan_in_the_operator_is_a_breakdown_that_says_so() {
    let b = SpinorField::random([2, 2, 2, 2], 94).data;
    let nan_op = |v: &[Complex64]| {
        let mut w = v.to_vec();
        w[5] = c(f64::NAN, 0.0);
        w
    };
    match bicgstab(nan_op, &b, 1e-10, 10) {
        Err(Error::Breakdown { iteration, what }) => {
            assert_eq!(iteration, 1);
            assert!(
                what.contains("became NaN") && !what.contains("vanished"),
                "{what}"
            );
        }
        other => panic!("expected Breakdown, got {other:?}"),
    }
    // A gauge field with a NaN link: the even-odd solve stops at once and names the NaN.
    let lat = Lattice::new(D44, false).unwrap();
    let mut u = GaugeField::random(D44, 95);
    u.links[17][(1, 2)] = c(f64::NAN, 0.0);
    assert_eq!(u.first_non_finite().map(|(l, _)| l), Some(17));
    assert!(u.max_unitarity_violation().is_nan());
    let src = SpinorField::random(D44, 96);
    match solve_eo(&lat, &u, 0.12, &src, 1e-10, 50) {
        Err(Error::Breakdown { what, .. }) => assert!(what.contains("NaN"), "{what}"),
        other => panic!("expected Breakdown, got {other:?}"),
    }
}
