//! The Wilson-clover CPU reference checked against what its conventions imply: the free field, `c_sw = 0`,
//! the symmetries of `F` and `sigma`, a hermitian chirality-block-diagonal `A`, gamma5-hermiticity, gauge
//! covariance, the inverse blocks, and an independent operator assembled entry by entry.

use std::collections::HashMap;

use lattice_gpu_lqcd::clover::{
    apply_clover, apply_clover_inverse, check_csw, clover_dirac, clover_dirac_dagger, clover_m_hat,
    clover_site_matrix, clover_true_residual, field_strength, sigma, solve_clover_eo,
    solve_clover_full, CloverBlock, CloverField, SiteMatrix,
};
use lattice_gpu_lqcd::gamma::{gamma, gamma5, SpinMatrix};
use lattice_gpu_lqcd::gauge::{random_gauge_transform, GaugeField, Su3};
use lattice_gpu_lqcd::geometry::Lattice;
use lattice_gpu_lqcd::reference::{hopping, m_hat, solve_eo, wilson_dirac};
use lattice_gpu_lqcd::spinor::SpinorField;
use lattice_gpu_lqcd::Error;
use num_complex::Complex64;

const D44: [usize; 4] = [4, 4, 4, 4];
const KAPPA: f64 = 0.12;
const CSW: f64 = 1.0;

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

fn max_entry<'a>(m: impl IntoIterator<Item = &'a Complex64>) -> f64 {
    m.into_iter().map(|z| z.norm()).fold(0.0, f64::max)
}

fn lattice() -> Lattice {
    Lattice::new(D44, true).unwrap()
}

/// `g5` in spin x colour, index `3 s + c`.
fn g5_site() -> SiteMatrix {
    let g5 = gamma5();
    SiteMatrix::from_fn(|i, j| {
        if i % 3 == j % 3 {
            g5[(i / 3, j / 3)]
        } else {
            c(0.0, 0.0)
        }
    })
}

#[test]
fn unit_links_give_zero_field_strength_and_the_wilson_operator() {
    let (lat, u) = (lattice(), GaugeField::unit(D44));
    for n in 0..lat.volume() {
        for mu in 0..4 {
            for nu in mu + 1..4 {
                assert_eq!(
                    max_entry(field_strength(&u, n, mu, nu).iter()),
                    0.0,
                    "site {n} ({mu}, {nu})"
                );
            }
        }
    }
    let clover = CloverField::new(&u, CSW, KAPPA).unwrap();
    for n in 0..lat.volume() {
        assert_eq!(clover.site_matrix(n), SiteMatrix::identity(), "site {n}");
        assert_eq!(clover.site_inverse(n), SiteMatrix::identity(), "site {n}");
    }
    let psi = SpinorField::random(D44, 3);
    assert_eq!(
        clover_dirac(&lat, &u, &clover, &psi).data,
        wilson_dirac(&lat, &u, KAPPA, &psi).data
    );
}

#[test]
fn csw_zero_is_wilson_bit_for_bit_on_a_random_field() {
    let (lat, u, psi) = (
        lattice(),
        GaugeField::random(D44, 11),
        SpinorField::random(D44, 12),
    );
    let clover = CloverField::new(&u, 0.0, KAPPA).unwrap();
    assert_eq!(
        clover_dirac(&lat, &u, &clover, &psi).data,
        wilson_dirac(&lat, &u, KAPPA, &psi).data
    );
    // With c_sw > 0 on the same field the operators must differ, or the test above proves nothing.
    let clover = CloverField::new(&u, CSW, KAPPA).unwrap();
    let d = max_diff(
        &clover_dirac(&lat, &u, &clover, &psi).data,
        &wilson_dirac(&lat, &u, KAPPA, &psi).data,
    );
    assert!(d > 1e-2, "clover and Wilson differ by only {d}");
}

#[test]
fn field_strength_is_antisymmetric_anti_hermitian_and_not_traceless() {
    let (lat, u) = (lattice(), GaugeField::random(D44, 21));
    let mut largest_trace: f64 = 0.0;
    let mut largest_entry: f64 = 0.0;
    for n in 0..lat.volume() {
        for mu in 0..4 {
            // The four leaves of a (mu, mu) "plane" are U U^dag pairs: 1 up to rounding.
            assert!(max_entry(field_strength(&u, n, mu, mu).iter()) < 1e-15);
            for nu in 0..4 {
                let f = field_strength(&u, n, mu, nu);
                let g = field_strength(&u, n, nu, mu);
                assert!(max_entry((f + g).iter()) < 1e-14, "F antisymmetric at {n}");
                assert!(
                    max_entry((f + f.adjoint()).iter()) < 1e-15,
                    "F anti-hermitian at {n}"
                );
                assert!(f.trace().re.abs() < 1e-15, "tr F imaginary at {n}");
                largest_trace = largest_trace.max(f.trace().norm());
                largest_entry = largest_entry.max(max_entry(f.iter()));
            }
        }
    }
    // QUDA and Chroma keep the trace; a field strength made traceless would fail here.
    assert!(largest_trace > 1e-2, "largest |tr F| = {largest_trace}");
    assert!(largest_entry > 1e-2, "F vanishes on a random field");
}

#[test]
fn sigma_is_hermitian_antisymmetric_chiral_and_as_the_docs_write_it() {
    let g5 = gamma5();
    for mu in 0..4 {
        assert_eq!(sigma(mu, mu), SpinMatrix::zeros());
        for nu in 0..4 {
            let s = sigma(mu, nu);
            assert!(max_entry((s - s.adjoint()).iter()) == 0.0, "({mu}, {nu})");
            assert!(max_entry((s + sigma(nu, mu)).iter()) == 0.0, "({mu}, {nu})");
            assert!(max_entry((s * g5 - g5 * s).iter()) == 0.0, "({mu}, {nu})");
            // The independent definition: i g_mu g_nu for mu != nu (the gammas anticommute).
            if mu != nu {
                let t = gamma(mu) * gamma(nu) * c(0.0, 1.0);
                assert!(max_entry((s - t).iter()) == 0.0, "({mu}, {nu})");
            }
        }
    }
    let diag = |d: [f64; 4]| SpinMatrix::from_diagonal(&d.map(|x| c(x, 0.0)).into());
    assert_eq!(sigma(0, 1), diag([1.0, -1.0, 1.0, -1.0]));
    assert_eq!(sigma(2, 3), diag([-1.0, 1.0, 1.0, -1.0]));
}

#[test]
fn clover_term_is_hermitian_and_block_diagonal_in_chirality() {
    let (lat, u) = (lattice(), GaugeField::random(D44, 31));
    let clover = CloverField::new(&u, CSW, KAPPA).unwrap();
    let g5 = g5_site();
    let mut off_identity: f64 = 0.0;
    for n in 0..lat.volume() {
        let a = clover_site_matrix(&u, n, CSW, KAPPA);
        for i in 0..12 {
            for j in 0..12 {
                if (i < 6) != (j < 6) {
                    assert_eq!(a[(i, j)], c(0.0, 0.0), "site {n} entry ({i}, {j})");
                }
            }
        }
        assert!(
            max_entry((a - a.adjoint()).iter()) < 1e-15,
            "A hermitian at {n}"
        );
        assert!(
            max_entry((a * g5 - g5 * a).iter()) == 0.0,
            "A commutes with g5 at {n}"
        );
        assert_eq!(clover.site_matrix(n), a, "stored blocks at {n}");
        off_identity = off_identity.max(max_entry((a - SiteMatrix::identity()).iter()));
    }
    assert!(off_identity > 1e-2, "A is 1 on a random field");
}

#[test]
fn inverse_blocks_invert_the_clover_term() {
    let (u, psi) = (GaugeField::random(D44, 41), SpinorField::random(D44, 42));
    let clover = CloverField::new(&u, 1.7, 0.13).unwrap();
    for (n, (a, inv)) in clover.blocks.iter().zip(&clover.inverse).enumerate() {
        for ch in 0..2 {
            let e = max_entry((inv[ch] * a[ch] - CloverBlock::identity()).iter());
            assert!(e < 1e-12, "site {n} chirality {ch}: |A^-1 A - 1| = {e}");
        }
    }
    let back = apply_clover_inverse(&clover, &apply_clover(&clover, &psi));
    assert!(max_diff(&back.data, &psi.data) < 1e-12);
}

#[test]
fn clover_operator_is_gamma5_hermitian() {
    let (lat, u) = (lattice(), GaugeField::random(D44, 51));
    let clover = CloverField::new(&u, CSW, KAPPA).unwrap();
    let (phi, psi) = (SpinorField::random(D44, 52), SpinorField::random(D44, 53));
    let g5dg5 = clover_dirac(&lat, &u, &clover, &psi.apply_gamma5()).apply_gamma5();
    let dagger = clover_dirac_dagger(&lat, &u, &clover, &psi);
    assert!(max_diff(&g5dg5.data, &dagger.data) < 1e-12);
    // <phi, g5 D g5 psi> = <D phi, psi>, with D^dag never formed.
    let lhs = phi.dot(&g5dg5);
    let rhs = clover_dirac(&lat, &u, &clover, &phi).dot(&psi);
    assert!((lhs - rhs).norm() < 1e-10 * lhs.norm(), "{lhs} vs {rhs}");
}

#[test]
fn field_strength_and_clover_operator_are_gauge_covariant() {
    let (lat, u, psi) = (
        lattice(),
        GaugeField::random(D44, 61),
        SpinorField::random(D44, 62),
    );
    let g = random_gauge_transform(D44, 63);
    let v = u.gauge_transform(&g);
    assert_eq!(g.len(), lat.volume());
    for (n, gn) in g.iter().enumerate() {
        for mu in 0..4 {
            for nu in mu + 1..4 {
                let want = gn * field_strength(&u, n, mu, nu) * gn.adjoint();
                let got = field_strength(&v, n, mu, nu);
                assert!(max_entry((got - want).iter()) < 1e-13, "site {n}");
            }
        }
    }
    let (cu, cv) = (
        CloverField::new(&u, CSW, KAPPA).unwrap(),
        CloverField::new(&v, CSW, KAPPA).unwrap(),
    );
    let got = clover_dirac(&lat, &v, &cv, &psi.gauge_transform(&g));
    let want = clover_dirac(&lat, &u, &cu, &psi).gauge_transform(&g);
    assert!(max_diff(&got.data, &want.data) < 1e-12);
}

/// The site `n` moved by `step` (+-1) along `d`, and the fermion sign of that hop (antiperiodic `t`).
fn shift(lat: &Lattice, n: usize, d: usize, step: isize) -> (usize, f64) {
    let mut x = lat.coords(n);
    let l = lat.dims[d] as isize;
    let moved = x[d] as isize + step;
    let sign = if d == 3 && !(0..l).contains(&moved) {
        -1.0
    } else {
        1.0
    };
    x[d] = moved.rem_euclid(l) as usize;
    (lat.index(x), sign)
}

/// The ordered product of links along `path` from `n`: a step `+d` takes `U_d(x)`, a step `-d` takes
/// `U_d(x - d)^dag`.
fn path(lat: &Lattice, u: &GaugeField, n: usize, steps: &[(usize, isize)]) -> Su3 {
    let mut x = n;
    let mut p = Su3::identity();
    for &(d, s) in steps {
        let (y, _) = shift(lat, x, d, s);
        p *= if s > 0 {
            u.links[4 * x + d]
        } else {
            u.links[4 * y + d].adjoint()
        };
        x = y;
    }
    assert_eq!(x, n, "a leaf must close");
    p
}

#[test]
fn clover_operator_matches_an_independent_entry_by_entry_assembly() {
    let (lat, u, psi) = (
        lattice(),
        GaugeField::random(D44, 71),
        SpinorField::random(D44, 72),
    );
    let (csw, kappa) = (1.9, 0.125);
    let clover = CloverField::new(&u, csw, kappa).unwrap();
    let mut m: HashMap<(usize, usize), Complex64> = HashMap::new();
    let one = SpinMatrix::identity();
    for n in 0..lat.volume() {
        for k in 0..12 {
            *m.entry((12 * n + k, 12 * n + k)).or_default() += c(1.0, 0.0);
        }
        for mu in 0..4 {
            for nu in mu + 1..4 {
                let (p, q) = (mu, nu);
                let leaves = [
                    [(p, 1), (q, 1), (p, -1), (q, -1)],
                    [(q, 1), (p, -1), (q, -1), (p, 1)],
                    [(p, -1), (q, -1), (p, 1), (q, 1)],
                    [(q, -1), (p, 1), (q, 1), (p, -1)],
                ];
                let qsum: Su3 = leaves.iter().map(|l| path(&lat, &u, n, l)).sum();
                let f = (qsum - qsum.adjoint()) / c(8.0, 0.0);
                let (gm, gn) = (gamma(mu), gamma(nu));
                let sig = (gm * gn - gn * gm) * c(0.0, 0.5);
                for (s, t, a, b) in (0..144).map(|i| (i / 36, (i / 9) % 4, (i / 3) % 3, i % 3)) {
                    *m.entry((12 * n + 3 * s + a, 12 * n + 3 * t + b))
                        .or_default() += c(0.0, kappa * csw) * sig[(s, t)] * f[(a, b)];
                }
            }
            let (nf, sf) = shift(&lat, n, mu, 1);
            let (nb, sb) = shift(&lat, n, mu, -1);
            let (pf, pb) = (one - gamma(mu), one + gamma(mu));
            let (uf, ub) = (u.links[4 * n + mu], u.links[4 * nb + mu].adjoint());
            for s in 0..4 {
                for t in 0..4 {
                    for a in 0..3 {
                        for b in 0..3 {
                            let (row, col) = (12 * n + 3 * s + a, 3 * t + b);
                            *m.entry((row, 12 * nf + col)).or_default() -=
                                kappa * sf * pf[(s, t)] * uf[(a, b)];
                            *m.entry((row, 12 * nb + col)).or_default() -=
                                kappa * sb * pb[(s, t)] * ub[(a, b)];
                        }
                    }
                }
            }
        }
    }
    let mut dense = vec![c(0.0, 0.0); psi.data.len()];
    for (&(row, col), v) in &m {
        dense[row] += v * psi.data[col];
    }
    let got = clover_dirac(&lat, &u, &clover, &psi);
    let d = max_diff(&got.data, &dense);
    assert!(d < 1e-12, "max difference {d}");
}

#[test]
fn bad_csw_and_non_finite_links_are_refused_with_the_fix() {
    let u = GaugeField::unit(D44);
    for bad in [-0.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let e = CloverField::new(&u, bad, KAPPA).unwrap_err().to_string();
        assert!(e.contains("--csw") && e.contains("--csw 0"), "{e}");
        assert!(check_csw(bad).is_err());
    }
    assert!(check_csw(0.0).is_ok() && check_csw(2.0).is_ok());
    let mut v = GaugeField::random(D44, 81);
    v.links[4 * 5 + 2][(1, 1)] = c(f64::NAN, 0.0);
    match CloverField::new(&v, CSW, KAPPA) {
        Err(Error::NonFinite { what, at, .. }) => {
            assert!(what.contains("clover"), "{what}");
            assert!(at.contains("site"), "{at}");
        }
        other => panic!("expected NonFinite, got {other:?}"),
    }
}

/// Chroma's `makeClov` (lib/actions/ferm/linop/clover_term_qdp_w.h) entries of the chirality-0 block, in
/// kappa normalisation (`c = kappa c_sw`): spin 0 x spin 0 is `1 + i c (F_01 - F_23)` and spin 1 x spin 0
/// is `c [i (F_12 - F_03) - (F_02 + F_13)]`; chirality 1 has `1 + i c (F_01 + F_23)` at spin 2 x spin 2.
#[test]
fn clover_blocks_match_chromas_entries() {
    let (lat, u) = (lattice(), GaugeField::random(D44, 91));
    let clover = CloverField::new(&u, CSW, KAPPA).unwrap();
    let (k, i) = (c(KAPPA * CSW, 0.0), c(0.0, 1.0));
    for n in [0, 17, lat.volume() - 1] {
        let f = |mu, nu| field_strength(&u, n, mu, nu);
        let a = clover.site_matrix(n);
        let block = |s: usize, t: usize| a.fixed_view::<3, 3>(3 * s, 3 * t).into_owned();
        let want00 = Su3::identity() + (f(0, 1) - f(2, 3)) * i * k;
        let want10 = ((f(1, 2) - f(0, 3)) * i - (f(0, 2) + f(1, 3))) * k;
        let want22 = Su3::identity() + (f(0, 1) + f(2, 3)) * i * k;
        assert!(max_entry((block(0, 0) - want00).iter()) < 1e-15, "site {n}");
        assert!(max_entry((block(1, 0) - want10).iter()) < 1e-15, "site {n}");
        assert!(max_entry((block(2, 2) - want22).iter()) < 1e-15, "site {n}");
    }
}

const D448: [usize; 4] = [4, 4, 4, 8];

fn lattice_448() -> Lattice {
    Lattice::new(D448, true).unwrap()
}

fn relative_diff(a: &SpinorField, b: &SpinorField) -> f64 {
    (a.sub(b).norm2() / b.norm2()).sqrt()
}

/// `M_hat` checked against the Schur complement built from the full operator alone: with
/// `x_o = A_oo^{-1} kappa H_oe x_e` the odd rows of `D (x_e, x_o)` cancel and the even rows are
/// `M_hat x_e`. Only full-lattice `hopping`, `apply_clover_inverse` and `clover_dirac` build the reference.
#[test]
fn clover_m_hat_is_the_schur_complement_of_the_full_operator() {
    let (lat, u) = (lattice_448(), GaugeField::random(D448, 101));
    let clover = CloverField::new(&u, CSW, KAPPA).unwrap();
    let (x_e, _) = SpinorField::random(D448, 102).to_eo();
    let zero_half = vec![c(0.0, 0.0); x_e.len()];
    let even_only = SpinorField::from_eo(D448, &x_e, &zero_half).unwrap();
    let (_, h_oe) = hopping(&lat, &u, &even_only).to_eo();
    let mut kh = SpinorField::from_eo(D448, &zero_half, &h_oe).unwrap();
    kh.data.iter_mut().for_each(|z| *z *= KAPPA);
    let (_, x_o) = apply_clover_inverse(&clover, &kh).to_eo();
    let full = SpinorField::from_eo(D448, &x_e, &x_o).unwrap();
    let (d_e, d_o) = clover_dirac(&lat, &u, &clover, &full).to_eo();
    let got = clover_m_hat(&lat, &u, &clover, &x_e);
    let d = max_diff(&got, &d_e);
    assert!(d < 1e-12, "M_hat x_e vs the even rows of D x: {d}");
    let odd = max_entry(&d_o);
    assert!(odd < 1e-12, "odd rows of D x left {odd}");
    // The clover part and the kappa^2 term must both show, or the comparison above would be weak.
    assert!(max_diff(&got, &m_hat(&lat, &u, KAPPA, &x_e)) > 1e-2);
    assert!(max_diff(&got, &x_e) > 1e-2);
}

#[test]
fn even_odd_clover_solve_converges_and_agrees_with_the_full_solve() {
    let (lat, u, b) = (
        lattice_448(),
        GaugeField::random(D448, 111),
        SpinorField::random(D448, 112),
    );
    let clover = CloverField::new(&u, CSW, KAPPA).unwrap();
    let (x_eo, rec_eo, res_eo) = solve_clover_eo(&lat, &u, &clover, &b, 1e-12, 1000).unwrap();
    assert!(res_eo <= 1e-10, "even-odd true residual {res_eo}");
    assert_eq!(res_eo, clover_true_residual(&lat, &u, &clover, &b, &x_eo));
    let (x_full, rec_full, res_full) =
        solve_clover_full(&lat, &u, &clover, &b, 1e-12, 2000).unwrap();
    assert!(res_full <= 1e-10, "full true residual {res_full}");
    let d = relative_diff(&x_eo, &x_full);
    assert!(
        d <= 1e-8,
        "even-odd and full solutions differ by {d} relative"
    );
    assert!(
        rec_eo.iterations < rec_full.iterations,
        "preconditioning did not help: {} vs {} iterations",
        rec_eo.iterations,
        rec_full.iterations
    );
    // The Wilson solution of the same system must not pass as the clover one.
    let (x_w, _, _) = solve_eo(&lat, &u, KAPPA, &b, 1e-12, 1000).unwrap();
    assert!(relative_diff(&x_w, &x_full) > 1e-3);
}

/// With `A = 1` the clover source, operator and reconstruction are the Wilson ones step for step, and
/// multiplying by an identity block is exact, so the two solves agree bit for bit.
#[test]
fn csw_zero_even_odd_clover_solve_is_the_wilson_solve() {
    let (lat, u, b) = (
        lattice_448(),
        GaugeField::random(D448, 121),
        SpinorField::random(D448, 122),
    );
    let clover = CloverField::new(&u, 0.0, KAPPA).unwrap();
    let (x_c, rec_c, res_c) = solve_clover_eo(&lat, &u, &clover, &b, 1e-11, 1000).unwrap();
    let (x_w, rec_w, _) = solve_eo(&lat, &u, KAPPA, &b, 1e-11, 1000).unwrap();
    assert_eq!(rec_c, rec_w);
    assert_eq!(x_c, x_w);
    assert!(res_c <= 1e-10, "true residual {res_c}");
}

#[test]
fn clover_solves_refuse_a_clover_field_of_another_lattice() {
    let (lat, u, b) = (
        lattice_448(),
        GaugeField::random(D448, 131),
        SpinorField::random(D448, 132),
    );
    let other = CloverField::new(&GaugeField::random(D44, 133), CSW, KAPPA).unwrap();
    for e in [
        solve_clover_eo(&lat, &u, &other, &b, 1e-10, 100).unwrap_err(),
        solve_clover_full(&lat, &u, &other, &b, 1e-10, 100).unwrap_err(),
    ] {
        let e = e.to_string();
        assert!(
            e.contains("clover field") && e.contains("[4, 4, 4, 8]"),
            "{e}"
        );
    }
}
