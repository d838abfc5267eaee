//! SU(3) gauge fields: the unit and Haar-random configurations, reunitarisation, the plaquette and gauge
//! transformations.

use nalgebra::{Matrix3, Vector3};
use num_complex::Complex64;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::geometry::Lattice;

/// One link: a 3x3 complex matrix, `link[(a, b)]` = row `a`, column `b`.
pub type Su3 = Matrix3<Complex64>;

/// A gauge field: `links[4 * n + mu]` is `U_mu(n)` (ILDG order).
#[derive(Clone, Debug, PartialEq)]
pub struct GaugeField {
    /// Extents `[X, Y, Z, T]`.
    pub dims: [usize; 4],
    /// The links, `4 * volume` of them.
    pub links: Vec<Su3>,
}

/// The lattice used for gauge-field neighbours: gauge links are periodic in every direction.
fn periodic(dims: [usize; 4]) -> Lattice {
    Lattice {
        dims,
        antiperiodic_t: false,
    }
}

/// A standard normal number by Box-Muller (only `rand`'s uniform generator is used, so the stream is
/// fixed by the seed and this code alone).
pub fn gaussian(rng: &mut impl Rng) -> f64 {
    // 1 - u lies in (0, 1], so the logarithm is finite.
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A complex Gaussian number with `E|z|^2 = 1` (real and imaginary parts of variance 1/2).
pub fn complex_gaussian(rng: &mut impl Rng) -> Complex64 {
    let s = std::f64::consts::FRAC_1_SQRT_2;
    Complex64::new(s * gaussian(rng), s * gaussian(rng))
}

/// A Haar-random SU(3) matrix.
pub fn random_su3(rng: &mut impl Rng) -> Su3 {
    let z = Su3::from_fn(|_, _| complex_gaussian(rng));
    let qr = z.qr();
    let (q, r) = (qr.q(), qr.r());
    // Q is Haar only once R's diagonal phases are moved into it; nalgebra happens to return a positive real
    // diagonal already, but the result must not hinge on that choice of the QR routine.
    let phases = Vector3::from_fn(|i, _| {
        let d = r[(i, i)];
        if d.norm() > 0.0 {
            d / d.norm()
        } else {
            Complex64::new(1.0, 0.0)
        }
    });
    let u = q * Matrix3::from_diagonal(&phases);
    // U(3) -> SU(3) by removing a third of the determinant's phase commutes with left multiplication by
    // SU(3), so the result stays Haar-distributed.
    let phi = u.determinant().arg();
    u * Complex64::from_polar(1.0, -phi / 3.0)
}

/// Makes `u` exactly SU(3): Gram-Schmidt on rows 0 and 1, then row 2 = `conj(row0 x row1)`.
pub fn reunitarize_su3(u: &Su3) -> Su3 {
    let row = |i: usize| Vector3::new(u[(i, 0)], u[(i, 1)], u[(i, 2)]);
    let r0 = row(0).normalize();
    let r1 = row(1);
    let r1 = (r1 - r0 * r0.dotc(&r1)).normalize();
    let r2 = r0.cross(&r1).conjugate();
    Su3::from_rows(&[r0.transpose(), r1.transpose(), r2.transpose()])
}

/// How far `u` is from SU(3): the largest of `max |U U^dag - 1|_ij` and `|det U - 1|`.
pub fn su3_violation(u: &Su3) -> f64 {
    let unit = (u * u.adjoint() - Su3::identity())
        .iter()
        .map(|z| z.norm())
        .fold(0.0, max_or_nan);
    max_or_nan(unit, (u.determinant() - Complex64::new(1.0, 0.0)).norm())
}

/// The larger of `a` and `b`, NaN if either is: `f64::max` would drop a NaN, and a link of NaNs would
/// then look exactly unitary.
fn max_or_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Names link `U_mu` of lexicographic site `n` on a lattice of extents `dims`, as messages give it.
pub fn link_name(dims: [usize; 4], n: usize, mu: usize) -> String {
    let [x, y, z, t] = periodic(dims).coords(n);
    format!(
        "site (x, y, z, t) = ({x}, {y}, {z}, {t}), direction mu = {mu} ({})",
        ["x", "y", "z", "t"][mu.min(3)]
    )
}

/// One Haar-random SU(3) matrix per site, e.g. a random gauge transformation `g(n)`.
pub fn random_gauge_transform(dims: [usize; 4], seed: u64) -> Vec<Su3> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..periodic(dims).volume())
        .map(|_| random_su3(&mut rng))
        .collect()
}

impl GaugeField {
    /// The free field: every link is the identity.
    pub fn unit(dims: [usize; 4]) -> Self {
        Self {
            dims,
            links: vec![Su3::identity(); 4 * periodic(dims).volume()],
        }
    }

    /// A hot start: independent Haar-random links, reproducible from `seed` whatever the thread count
    /// (each time slice has its own generator, so large lattices fill in parallel).
    pub fn random(dims: [usize; 4], seed: u64) -> Self {
        use rayon::prelude::*;
        let slice = 4 * periodic(dims).volume() / dims[3].max(1);
        let mut links = vec![Su3::identity(); 4 * periodic(dims).volume()];
        links
            .par_chunks_mut(slice.max(1))
            .enumerate()
            .for_each(|(t, chunk)| {
                let mut rng =
                    StdRng::seed_from_u64(seed ^ (t as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                chunk.iter_mut().for_each(|u| *u = random_su3(&mut rng));
            });
        Self { dims, links }
    }

    /// `U_mu(n)`.
    pub fn link(&self, n: usize, mu: usize) -> &Su3 {
        &self.links[4 * n + mu]
    }

    /// Projects every link back onto SU(3) (see [`reunitarize_su3`]).
    pub fn reunitarize(&mut self) {
        for u in &mut self.links {
            *u = reunitarize_su3(u);
        }
    }

    /// The largest [`su3_violation`] over all links (NaN where a link has a NaN or infinity).
    pub fn max_unitarity_violation(&self) -> f64 {
        self.links.iter().map(su3_violation).fold(0.0, max_or_nan)
    }

    /// The first link (in storage order: `links[4 * n + mu]`) with an entry that is NaN or infinite:
    /// its index and that entry.
    pub fn first_non_finite(&self) -> Option<(usize, Complex64)> {
        self.links.iter().enumerate().find_map(|(l, u)| {
            u.iter()
                .find(|z| !(z.re.is_finite() && z.im.is_finite()))
                .map(|z| (l, *z))
        })
    }

    /// Average plaquette `Re tr(U_mu(n) U_nu(n+mu) U_mu(n+nu)^dag U_nu(n)^dag) / 3` over sites and the
    /// six planes; exactly 1 on the unit field.
    pub fn plaquette(&self) -> f64 {
        let lat = periodic(self.dims);
        let mut sum = 0.0;
        for n in 0..lat.volume() {
            for mu in 0..4 {
                for nu in mu + 1..4 {
                    let (n_mu, _) = lat.forward(n, mu);
                    let (n_nu, _) = lat.forward(n, nu);
                    let p = self.link(n, mu)
                        * self.link(n_mu, nu)
                        * self.link(n_nu, mu).adjoint()
                        * self.link(n, nu).adjoint();
                    sum += p.trace().re;
                }
            }
        }
        sum / (3.0 * 6.0 * lat.volume() as f64)
    }

    /// The transformed field `U'_mu(n) = g(n) U_mu(n) g(n+mu)^dag`.
    ///
    /// # Panics
    /// If `g` does not hold one matrix per site.
    pub fn gauge_transform(&self, g: &[Su3]) -> GaugeField {
        let lat = periodic(self.dims);
        assert_eq!(
            g.len(),
            lat.volume(),
            "a gauge transformation needs one SU(3) matrix per site"
        );
        let mut links = Vec::with_capacity(self.links.len());
        for n in 0..lat.volume() {
            for mu in 0..4 {
                let (n_mu, _) = lat.forward(n, mu);
                links.push(g[n] * self.link(n, mu) * g[n_mu].adjoint());
            }
        }
        GaugeField {
            dims: self.dims,
            links,
        }
    }
}
