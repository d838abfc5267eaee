//! The CPU reference for the Wilson-clover (Sheikholeslami-Wohlert) operator `D = A - kappa H`, in f64,
//! written from the formulas of the crate docs' `# Clover` section: the four-leaf field strength,
//! `sigma_mu_nu` and the per-site clover matrix `A` kept as its two 6x6 chiral blocks with their
//! inverses.

use nalgebra::{SMatrix, Vector3};
use num_complex::Complex64;

use crate::error::{Error, Result};
use crate::gamma::{gamma, SpinMatrix};
use crate::gauge::{GaugeField, Su3};
use crate::geometry::{Lattice, SPINOR_LEN};
use crate::reference::{
    bicgstab_with, check_kappa, check_solve_inputs, hopping, hopping_dagger, hopping_eo,
    hopping_oe, solve_full_by, OnIteration, Solve,
};
use crate::spinor::{axpy, dot, write_site, SiteSpinor, SpinorField};

/// One chiral block of the clover matrix: spins `2 * chirality + {0, 1}` x 3 colours, index `3 * s + c`.
pub type CloverBlock = SMatrix<Complex64, 6, 6>;

/// The whole per-site clover matrix in spin x colour, index `3 * s + c` (as a spinor site is stored).
pub type SiteMatrix = SMatrix<Complex64, 12, 12>;

/// How far `A A^{-1}` may be from 1 before a block counts as numerically singular: a well-conditioned
/// 6x6 inverse in f64 lands near 1e-15, so anything this large means the inverse is mostly rounding.
const INVERSE_TOLERANCE: f64 = 1e-8;

/// Checks the clover coefficient: finite and not negative (0 gives plain Wilson).
pub fn check_csw(csw: f64) -> Result<()> {
    if csw.is_finite() && csw >= 0.0 {
        Ok(())
    } else {
        Err(Error::InvalidParameter(format!(
            "--csw = {csw} must be a finite number >= 0; use --csw 1.0 for the tree-level value, a \
             non-perturbative value such as 1.7 at beta around 6, or --csw 0 for plain Wilson"
        )))
    }
}

/// The lattice for gauge-field neighbours: links are periodic in every direction, whatever the fermions'
/// boundary, so the field strength never sees a boundary sign.
fn periodic(dims: [usize; 4]) -> Lattice {
    Lattice {
        dims,
        antiperiodic_t: false,
    }
}

/// The clover leaf `Q_mu_nu(n)`: the four plaquettes of the `(mu, nu)` plane that start and end at `n`,
/// each traversed in the same sense (`mu` before `nu`), as in QUDA's `computeFmunuCore` and Chroma's
/// `mesField`.
///
/// # Panics
/// If `mu` or `nu` is not 0..4 or `n` is not a site of `u`.
pub fn clover_leaf(u: &GaugeField, n: usize, mu: usize, nu: usize) -> Su3 {
    assert!(
        mu < 4 && nu < 4,
        "clover leaf ({mu}, {nu}): directions must be 0..4"
    );
    let lat = periodic(u.dims);
    let fwd = |m: usize, d: usize| lat.forward(m, d).0;
    let bwd = |m: usize, d: usize| lat.backward(m, d).0;
    let l = |m: usize, d: usize| *u.link(m, d);
    let (n_pmu, n_pnu, n_mmu, n_mnu) = (fwd(n, mu), fwd(n, nu), bwd(n, mu), bwd(n, nu));
    // n -> n+mu -> n+mu+nu -> n+nu -> n
    let q1 = l(n, mu) * l(n_pmu, nu) * l(n_pnu, mu).adjoint() * l(n, nu).adjoint();
    // n -> n+nu -> n+nu-mu -> n-mu -> n
    let q2 = l(n, nu) * l(bwd(n_pnu, mu), mu).adjoint() * l(n_mmu, nu).adjoint() * l(n_mmu, mu);
    // n -> n-mu -> n-mu-nu -> n-nu -> n
    let n_mmu_mnu = bwd(n_mmu, nu);
    let q3 = l(n_mmu, mu).adjoint() * l(n_mmu_mnu, nu).adjoint() * l(n_mmu_mnu, mu) * l(n_mnu, nu);
    // n -> n-nu -> n-nu+mu -> n+mu -> n
    let q4 = l(n_mnu, nu).adjoint() * l(n_mnu, mu) * l(fwd(n_mnu, mu), nu) * l(n, mu).adjoint();
    q1 + q2 + q3 + q4
}

/// The field strength `F_mu_nu(n) = (Q_mu_nu(n) - Q_mu_nu(n)^dag) / 8`: anti-hermitian, antisymmetric in
/// `(mu, nu)`, and not made traceless (QUDA's and Chroma's convention; see the crate docs).
///
/// # Panics
/// If `mu` or `nu` is not 0..4 or `n` is not a site of `u`.
pub fn field_strength(u: &GaugeField, n: usize, mu: usize, nu: usize) -> Su3 {
    let q = clover_leaf(u, n, mu, nu);
    (q - q.adjoint()) * Complex64::new(0.125, 0.0)
}

/// `sigma_mu_nu = (i/2) [gamma_mu, gamma_nu]`, hermitian, zero for `mu = nu`.
///
/// # Panics
/// If `mu` or `nu` is not 0..4.
pub fn sigma(mu: usize, nu: usize) -> SpinMatrix {
    let (gm, gn) = (gamma(mu), gamma(nu));
    (gm * gn - gn * gm) * Complex64::new(0.0, 0.5)
}

/// The clover matrix `A(n) = 1 + i kappa c_sw sum_{mu<nu} sigma_mu_nu F_mu_nu(n)` as a dense 12x12
/// matrix (index `3 * s + c`); its off-chirality 6x6 blocks vanish because `sigma` is block-diagonal.
pub fn clover_site_matrix(u: &GaugeField, n: usize, csw: f64, kappa: f64) -> SiteMatrix {
    let mut a = SiteMatrix::identity();
    let coeff = Complex64::new(0.0, kappa * csw);
    for mu in 0..4 {
        for nu in mu + 1..4 {
            let (s, f) = (sigma(mu, nu), field_strength(u, n, mu, nu));
            for (si, ti, ci, di) in spin_colour_indices(4, 4, 3, 3) {
                a[(3 * si + ci, 3 * ti + di)] += coeff * s[(si, ti)] * f[(ci, di)];
            }
        }
    }
    a
}

/// Every `(a, b, c, d)` below the given bounds, so the spin x colour loops read as one.
fn spin_colour_indices(
    na: usize,
    nb: usize,
    nc: usize,
    nd: usize,
) -> impl Iterator<Item = (usize, usize, usize, usize)> {
    (0..na).flat_map(move |a| {
        (0..nb).flat_map(move |b| (0..nc).flat_map(move |c| (0..nd).map(move |d| (a, b, c, d))))
    })
}

/// The Sheikholeslami-Wohlert term on a whole lattice: per site the two 6x6 chiral blocks of `A(n)` and of
/// `A(n)^{-1}` (chirality 0 = spins 0, 1; chirality 1 = spins 2, 3), as QUDA stores a clover field.
#[derive(Clone, Debug, PartialEq)]
pub struct CloverField {
    /// Extents `[X, Y, Z, T]`.
    pub dims: [usize; 4],
    /// The clover coefficient `c_sw`.
    pub csw: f64,
    /// The hopping parameter `A` was built for (it scales the clover term).
    pub kappa: f64,
    /// `blocks[n][chirality]`: the chiral blocks of `A(n)`, hermitian.
    pub blocks: Vec<[CloverBlock; 2]>,
    /// `inverse[n][chirality]`: the chiral blocks of `A(n)^{-1}`.
    pub inverse: Vec<[CloverBlock; 2]>,
}

/// The chiral block `chirality` of a block-diagonal site matrix.
fn chiral_block(a: &SiteMatrix, chirality: usize) -> CloverBlock {
    a.fixed_view::<6, 6>(6 * chirality, 6 * chirality)
        .into_owned()
}

fn max_entry<const R: usize>(m: &SMatrix<Complex64, R, R>) -> f64 {
    m.iter().map(|z| z.norm()).fold(0.0, f64::max)
}

impl CloverField {
    /// Builds `A(n)` and its inverse at every site from the gauge field `u`.
    ///
    /// Fails on a negative or non-finite `csw`, a `kappa` outside `0 < kappa < 0.25`, a gauge field with
    /// non-finite entries, or a block that cannot be inverted (the error names the site and chirality).
    pub fn new(u: &GaugeField, csw: f64, kappa: f64) -> Result<Self> {
        check_csw(csw)?;
        check_kappa(kappa)?;
        let lat = periodic(u.dims);
        assert_eq!(
            u.links.len(),
            4 * lat.volume(),
            "gauge field has the wrong number of links"
        );
        let mut blocks = Vec::with_capacity(lat.volume());
        let mut inverse = Vec::with_capacity(lat.volume());
        for n in 0..lat.volume() {
            let a = clover_site_matrix(u, n, csw, kappa);
            if let Some(z) = a.iter().find(|z| !(z.re.is_finite() && z.im.is_finite())) {
                return Err(Error::NonFinite {
                    what: "the clover term A".into(),
                    value: if z.re.is_finite() { z.im } else { z.re },
                    at: site_name(&lat, n),
                    fix: "check the gauge field for NaN or infinite links".into(),
                });
            }
            let pair = [chiral_block(&a, 0), chiral_block(&a, 1)];
            let inv = [
                invert_block(&lat, n, 0, &pair[0], csw, kappa)?,
                invert_block(&lat, n, 1, &pair[1], csw, kappa)?,
            ];
            blocks.push(pair);
            inverse.push(inv);
        }
        Ok(Self {
            dims: u.dims,
            csw,
            kappa,
            blocks,
            inverse,
        })
    }

    /// `A(n)` as a 12x12 matrix, zero off the chiral blocks.
    pub fn site_matrix(&self, n: usize) -> SiteMatrix {
        embed(&self.blocks[n])
    }

    /// `A(n)^{-1}` as a 12x12 matrix, zero off the chiral blocks.
    pub fn site_inverse(&self, n: usize) -> SiteMatrix {
        embed(&self.inverse[n])
    }
}

fn embed(pair: &[CloverBlock; 2]) -> SiteMatrix {
    let mut m = SiteMatrix::zeros();
    for (ch, b) in pair.iter().enumerate() {
        m.fixed_view_mut::<6, 6>(6 * ch, 6 * ch).copy_from(b);
    }
    m
}

fn site_name(lat: &Lattice, n: usize) -> String {
    let [x, y, z, t] = lat.coords(n);
    format!("site (x, y, z, t) = ({x}, {y}, {z}, {t})")
}

/// The inverse of one chiral block, refused where LU finds it singular or the result does not invert it.
fn invert_block(
    lat: &Lattice,
    n: usize,
    chirality: usize,
    a: &CloverBlock,
    csw: f64,
    kappa: f64,
) -> Result<CloverBlock> {
    let inv = a.try_inverse();
    let err = inv.map_or(f64::INFINITY, |i| {
        max_entry(&(a * i - CloverBlock::identity()))
    });
    match inv {
        Some(i) if err <= INVERSE_TOLERANCE => Ok(i),
        _ => Err(Error::InvalidParameter(format!(
            "the clover term A at {}, chirality block {chirality} (spins {} and {}), is singular \
             (|A A^-1 - 1| = {err:.1e}) with --csw {csw} and kappa {kappa}; lower --csw or kappa, or smooth \
             the gauge field",
            site_name(lat, n),
            2 * chirality,
            2 * chirality + 1
        ))),
    }
}

/// One site's chiral blocks times the spinor `d` (12 entries, index `3 * s + c`).
fn block_times(pair: &[CloverBlock; 2], d: &[Complex64]) -> SiteSpinor {
    let mut site: SiteSpinor = [Vector3::zeros(); 4];
    for (ch, b) in pair.iter().enumerate() {
        let v = SMatrix::<Complex64, 6, 1>::from_fn(|i, _| d[6 * ch + i]);
        let w = b * v;
        for i in 0..6 {
            site[2 * ch + i / 3][i % 3] = w[i];
        }
    }
    site
}

/// Applies per-site chiral blocks to a spinor field.
fn apply_blocks(dims: [usize; 4], per_site: &[[CloverBlock; 2]], psi: &SpinorField) -> SpinorField {
    assert_eq!(psi.dims, dims, "spinor and clover field differ in dims");
    let mut out = SpinorField::zeros(dims);
    for (n, pair) in per_site.iter().enumerate() {
        let site = block_times(pair, &psi.data[SPINOR_LEN * n..SPINOR_LEN * (n + 1)]);
        write_site(&mut out.data, n, &site);
    }
    out
}

/// Applies the blocks of the sites of `parity` to a half field in checkerboard order.
fn apply_blocks_parity(
    dims: [usize; 4],
    per_site: &[[CloverBlock; 2]],
    parity: usize,
    half: &[Complex64],
) -> Vec<Complex64> {
    let lat = periodic(dims);
    let hv = lat.half_volume();
    assert_eq!(
        half.len(),
        SPINOR_LEN * hv,
        "half spinor has the wrong length"
    );
    let mut out = vec![Complex64::new(0.0, 0.0); half.len()];
    for cb in 0..hv {
        let n = lat.site_of_eo(parity * hv + cb);
        let site = block_times(&per_site[n], &half[SPINOR_LEN * cb..SPINOR_LEN * (cb + 1)]);
        write_site(&mut out, cb, &site);
    }
    out
}

/// `A psi`, site by site.
///
/// # Panics
/// If `psi` does not live on the clover field's lattice.
pub fn apply_clover(clover: &CloverField, psi: &SpinorField) -> SpinorField {
    apply_blocks(clover.dims, &clover.blocks, psi)
}

/// `A^{-1} psi`, site by site.
///
/// # Panics
/// If `psi` does not live on the clover field's lattice.
pub fn apply_clover_inverse(clover: &CloverField, psi: &SpinorField) -> SpinorField {
    apply_blocks(clover.dims, &clover.inverse, psi)
}

/// `A_pp x_p`: the clover term of the sites of `parity` (0 even, 1 odd) on a half field in checkerboard
/// order.
///
/// # Panics
/// If `parity > 1` or `x_p` is not `12 * volume / 2` long.
pub fn apply_clover_parity(
    clover: &CloverField,
    parity: usize,
    x_p: &[Complex64],
) -> Vec<Complex64> {
    assert!(parity < 2, "parity {parity} must be 0 (even) or 1 (odd)");
    apply_blocks_parity(clover.dims, &clover.blocks, parity, x_p)
}

/// `A_pp^{-1} x_p`: the inverse clover term of the sites of `parity` on a half field in checkerboard order.
///
/// # Panics
/// If `parity > 1` or `x_p` is not `12 * volume / 2` long.
pub fn apply_clover_inverse_parity(
    clover: &CloverField,
    parity: usize,
    x_p: &[Complex64],
) -> Vec<Complex64> {
    assert!(parity < 2, "parity {parity} must be 0 (even) or 1 (odd)");
    apply_blocks_parity(clover.dims, &clover.inverse, parity, x_p)
}

/// The Wilson-clover operator `D psi = A psi - kappa H psi`, with the `kappa` the clover field was built
/// for: `A` already depends on `kappa`, so a second, separate `kappa` could silently disagree with it.
///
/// # Panics
/// If `u`, `clover` or `psi` does not live on `lat`.
pub fn clover_dirac(
    lat: &Lattice,
    u: &GaugeField,
    clover: &CloverField,
    psi: &SpinorField,
) -> SpinorField {
    clover_with(clover, psi, &hopping(lat, u, psi), lat)
}

/// `D^dag psi = A psi - kappa H^dag psi`, from the definition (`A` is hermitian), not as `g5 D g5`.
///
/// # Panics
/// If `u`, `clover` or `psi` does not live on `lat`.
pub fn clover_dirac_dagger(
    lat: &Lattice,
    u: &GaugeField,
    clover: &CloverField,
    psi: &SpinorField,
) -> SpinorField {
    clover_with(clover, psi, &hopping_dagger(lat, u, psi), lat)
}

/// `A psi - kappa h`, `h` being a hopping term of `psi`.
fn clover_with(
    clover: &CloverField,
    psi: &SpinorField,
    h: &SpinorField,
    lat: &Lattice,
) -> SpinorField {
    assert_eq!(
        clover.dims, lat.dims,
        "clover field and lattice differ in dims"
    );
    let mut out = apply_clover(clover, psi);
    out.axpy(Complex64::new(-clover.kappa, 0.0), h);
    out
}

/// The even-odd preconditioned clover operator on even sites, in QUDA's asymmetric form
/// (`QUDA_MATPC_EVEN_EVEN_ASYMMETRIC`): `M_hat x_e = A_ee x_e - kappa^2 H_eo A_oo^{-1} H_oe x_e`.
///
/// In even-odd order `D = [[A_ee, -kappa H_eo], [-kappa H_oe, A_oo]]` (`A` is site-diagonal, `H` only
/// joins opposite parities). The odd rows of `D x = b` give `x_o = A_oo^{-1} (b_o + kappa H_oe x_e)`;
/// putting that into the even rows, `A_ee x_e - kappa H_eo x_o = b_e`, leaves the Schur complement
/// `M_hat x_e = b_hat` with `b_hat = b_e + kappa H_eo A_oo^{-1} b_o`. QUDA's symmetric form
/// `1 - kappa^2 A_ee^{-1} H_eo A_oo^{-1} H_oe` is this `M_hat` multiplied by `A_ee^{-1}` from the left
/// (source `A_ee^{-1} b_hat`); it is not implemented here. With `A = 1` this is
/// [`crate::reference::m_hat`], operation for operation.
///
/// # Panics
/// If `u` or `clover` does not live on `lat` or `x_e` is not `12 * volume / 2` long.
pub fn clover_m_hat(
    lat: &Lattice,
    u: &GaugeField,
    clover: &CloverField,
    x_e: &[Complex64],
) -> Vec<Complex64> {
    assert_eq!(
        clover.dims, lat.dims,
        "clover field and lattice differ in dims"
    );
    let t = apply_clover_inverse_parity(clover, 1, &hopping_oe(lat, u, x_e));
    let mut y = hopping_eo(lat, u, &t);
    let a = apply_clover_parity(clover, 0, x_e);
    let k2 = clover.kappa * clover.kappa;
    // The same update as the Wilson `m_hat`, so that `c_sw = 0` reproduces it bit for bit.
    for (y, a) in y.iter_mut().zip(&a) {
        *y = a - k2 * *y;
    }
    y
}

/// The true relative residual `|b - D x| / |b|` of the clover operator (`|x|` for `b = 0`).
///
/// # Panics
/// If `u`, `clover`, `b` or `x` does not live on `lat`.
pub fn clover_true_residual(
    lat: &Lattice,
    u: &GaugeField,
    clover: &CloverField,
    b: &SpinorField,
    x: &SpinorField,
) -> f64 {
    let b_norm = b.norm2().sqrt();
    if b_norm == 0.0 {
        return x.norm2().sqrt();
    }
    b.sub(&clover_dirac(lat, u, clover, x)).norm2().sqrt() / b_norm
}

/// The solvers' input checks, as errors: the Wilson ones plus a clover field on the same lattice.
fn check_clover_solve(
    lat: &Lattice,
    u: &GaugeField,
    clover: &CloverField,
    b: &SpinorField,
) -> Result<()> {
    check_solve_inputs(lat, u, clover.kappa, b)?;
    if clover.dims != lat.dims || clover.blocks.len() != lat.volume() {
        return Err(Error::InvalidParameter(format!(
            "the clover field ({:?}, {} sites) does not live on the lattice {:?}",
            clover.dims,
            clover.blocks.len(),
            lat.dims
        )));
    }
    Ok(())
}

/// Solves `D x = b` for the clover operator by BiCGStab on the full lattice. Returns `x`, the solver record
/// and the true relative residual `|b - D x| / |b|`.
pub fn solve_clover_full(
    lat: &Lattice,
    u: &GaugeField,
    clover: &CloverField,
    b: &SpinorField,
    tol: f64,
    max_iter: usize,
) -> Result<(SpinorField, Solve, f64)> {
    check_clover_solve(lat, u, clover, b)?;
    solve_full_by(
        |psi| clover_dirac(lat, u, clover, psi),
        b,
        tol,
        max_iter,
        |x| clover_true_residual(lat, u, clover, b, x),
    )
}

/// Solves `D x = b` for the clover operator by even-odd preconditioning ([`clover_m_hat`]): BiCGStab on
/// `M_hat x_e = b_e + kappa H_eo A_oo^{-1} b_o`, then `x_o = A_oo^{-1} (b_o + kappa H_oe x_e)`. Returns
/// the full-lattice `x`, the record of the even-site solve (its residuals are those of the `M_hat`
/// system) and the true relative residual `|b - D x| / |b|`.
pub fn solve_clover_eo(
    lat: &Lattice,
    u: &GaugeField,
    clover: &CloverField,
    b: &SpinorField,
    tol: f64,
    max_iter: usize,
) -> Result<(SpinorField, Solve, f64)> {
    solve_clover_eo_checked(lat, u, clover, b, tol, max_iter, &mut |_, _| Ok(()))
}

/// [`solve_clover_eo`] with `check` called after every iteration of the even-site solve
/// ([`OnIteration`]), as [`crate::reference::solve_eo_checked`] does for Wilson: progress output, and
/// the checks that may stop the solve with an error (a signal).
pub fn solve_clover_eo_checked(
    lat: &Lattice,
    u: &GaugeField,
    clover: &CloverField,
    b: &SpinorField,
    tol: f64,
    max_iter: usize,
    check: &mut OnIteration,
) -> Result<(SpinorField, Solve, f64)> {
    check_clover_solve(lat, u, clover, b)?;
    let kappa = Complex64::new(clover.kappa, 0.0);
    let (b_e, b_o) = b.to_eo();
    let mut src = b_e;
    let a_inv_b_o = apply_clover_inverse_parity(clover, 1, &b_o);
    axpy(kappa, &hopping_eo(lat, u, &a_inv_b_o), &mut src);
    drop(a_inv_b_o);
    let solve = bicgstab_with(
        |v| Ok(clover_m_hat(lat, u, clover, v)),
        |a, c| Ok(dot(a, c)),
        &src,
        tol,
        max_iter,
        check,
    )?;
    drop(src);
    let mut rhs_o = b_o;
    axpy(kappa, &hopping_oe(lat, u, &solve.x), &mut rhs_o);
    let x_o = apply_clover_inverse_parity(clover, 1, &rhs_o);
    let x = SpinorField::from_eo(lat.dims, &solve.x, &x_o)?;
    let res = clover_true_residual(lat, u, clover, b, &x);
    Ok((x, solve, res))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No gauge field at hand gives an exactly singular block, so the refusal is checked on the blocks
    /// themselves: a zero block (LU finds no pivot) and a rank-one one (rounding may leave a tiny pivot).
    #[test]
    fn singular_blocks_are_refused_naming_the_site_and_chirality() {
        let lat = periodic([4, 4, 4, 4]);
        let n = lat.index([1, 2, 3, 0]);
        let rank_one =
            CloverBlock::from_fn(|i, j| Complex64::new((i + 1) as f64, (j as f64) * 0.3));
        let rank_one = rank_one.adjoint() * rank_one.column(0) * rank_one.column(0).adjoint();
        for singular in [CloverBlock::zeros(), rank_one] {
            let e = invert_block(&lat, n, 1, &singular, 2.0, 0.13)
                .unwrap_err()
                .to_string();
            assert!(e.contains("(x, y, z, t) = (1, 2, 3, 0)"), "{e}");
            assert!(e.contains("chirality block 1 (spins 2 and 3)"), "{e}");
            assert!(e.contains("--csw"), "{e}");
        }
        let fine = CloverBlock::identity() * Complex64::new(2.0, 0.0);
        assert!(invert_block(&lat, n, 0, &fine, 2.0, 0.13).is_ok());
    }
}
