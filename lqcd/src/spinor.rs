//! Spinor fields (4 spins x 3 colours per site, `data[(n * 4 + s) * 3 + c]`), their linear algebra, and the
//! split into and merge from even-odd halves in checkerboard order.

use nalgebra::Vector3;
use num_complex::Complex64;
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::error::{Error, Result};
use crate::gamma::gamma5;
use crate::gauge::{complex_gaussian, Su3};
use crate::geometry::{Lattice, SPINOR_LEN};

/// One site's spinor as four colour vectors, indexed by spin.
pub type SiteSpinor = [Vector3<Complex64>; 4];

/// A spinor field on the whole lattice in lexicographic order.
#[derive(Clone, Debug, PartialEq)]
pub struct SpinorField {
    /// Extents `[X, Y, Z, T]`.
    pub dims: [usize; 4],
    /// `12 * volume` complex numbers, `data[(n * 4 + s) * 3 + c]`.
    pub data: Vec<Complex64>,
}

/// Site geometry only (boundary signs are the operator's business, not the field's).
fn sites(dims: [usize; 4]) -> Lattice {
    Lattice {
        dims,
        antiperiodic_t: false,
    }
}

/// `sum_i conj(a_i) b_i`.
///
/// # Panics
/// If the lengths differ.
pub fn dot(a: &[Complex64], b: &[Complex64]) -> Complex64 {
    assert_eq!(a.len(), b.len(), "dot of vectors of different lengths");
    a.iter().zip(b).map(|(x, y)| x.conj() * y).sum()
}

/// `sum_i |a_i|^2`.
pub fn norm2(a: &[Complex64]) -> f64 {
    a.iter().map(|z| z.norm_sqr()).sum()
}

/// `y += a x`.
///
/// # Panics
/// If the lengths differ.
pub fn axpy(a: Complex64, x: &[Complex64], y: &mut [Complex64]) {
    assert_eq!(x.len(), y.len(), "axpy of vectors of different lengths");
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

/// The spinor at offset `12 * k` of a flat vector (a lexicographic site or a checkerboard index).
pub fn read_site(data: &[Complex64], k: usize) -> SiteSpinor {
    let d = &data[SPINOR_LEN * k..SPINOR_LEN * (k + 1)];
    std::array::from_fn(|s| Vector3::new(d[3 * s], d[3 * s + 1], d[3 * s + 2]))
}

/// Writes `psi` at offset `12 * k` of a flat vector.
pub fn write_site(data: &mut [Complex64], k: usize, psi: &SiteSpinor) {
    for (s, v) in psi.iter().enumerate() {
        for c in 0..3 {
            data[SPINOR_LEN * k + 3 * s + c] = v[c];
        }
    }
}

impl SpinorField {
    /// The zero field.
    pub fn zeros(dims: [usize; 4]) -> Self {
        Self {
            dims,
            data: vec![Complex64::new(0.0, 0.0); SPINOR_LEN * sites(dims).volume()],
        }
    }

    /// Independent complex Gaussian entries with `E|z|^2 = 1`, reproducible from `seed`.
    pub fn random(dims: [usize; 4], seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        Self {
            dims,
            data: (0..SPINOR_LEN * sites(dims).volume())
                .map(|_| complex_gaussian(&mut rng))
                .collect(),
        }
    }

    /// A point source: 1 at the origin in spin `spin` and colour `colour`, 0 elsewhere.
    ///
    /// # Panics
    /// If `spin > 3` or `colour > 2`.
    pub fn point_source(dims: [usize; 4], spin: usize, colour: usize) -> Self {
        assert!(
            spin < 4 && colour < 3,
            "point source spin {spin} colour {colour}: spin must be 0..4 and colour 0..3"
        );
        let mut f = Self::zeros(dims);
        f.data[3 * spin + colour] = Complex64::new(1.0, 0.0);
        f
    }

    /// The plane wave `psi(n) = exp(i p . n) u` with `n = (x, y, z, t)` and `u[3 * s + c]`.
    ///
    /// On the lattice this is an eigenmode of the free hopping term when every `p_mu = 2 pi k / L_mu`, or
    /// with antiperiodic `t`, `p_t = (2 k + 1) pi / T`.
    pub fn plane_wave(dims: [usize; 4], p: [f64; 4], u: [Complex64; SPINOR_LEN]) -> Self {
        let lat = sites(dims);
        let mut f = Self::zeros(dims);
        for n in 0..lat.volume() {
            let c = lat.coords(n);
            let phase: f64 = (0..4).map(|mu| p[mu] * c[mu] as f64).sum();
            let e = Complex64::from_polar(1.0, phase);
            for (k, uk) in u.iter().enumerate() {
                f.data[SPINOR_LEN * n + k] = e * uk;
            }
        }
        f
    }

    /// Number of sites.
    pub fn volume(&self) -> usize {
        self.data.len() / SPINOR_LEN
    }

    /// The spinor at site `n`.
    pub fn site(&self, n: usize) -> SiteSpinor {
        read_site(&self.data, n)
    }

    /// `<self, other> = sum conj(self) other`.
    pub fn dot(&self, other: &SpinorField) -> Complex64 {
        dot(&self.data, &other.data)
    }

    /// `<self, self>`.
    pub fn norm2(&self) -> f64 {
        norm2(&self.data)
    }

    /// `self += a x`.
    ///
    /// # Panics
    /// If the fields differ in length.
    pub fn axpy(&mut self, a: Complex64, x: &SpinorField) {
        axpy(a, &x.data, &mut self.data);
    }

    /// `self - other`.
    ///
    /// # Panics
    /// If the fields live on different lattices.
    pub fn sub(&self, other: &SpinorField) -> SpinorField {
        assert_eq!(
            self.dims, other.dims,
            "difference of fields on different lattices"
        );
        SpinorField {
            dims: self.dims,
            data: self
                .data
                .iter()
                .zip(&other.data)
                .map(|(a, b)| a - b)
                .collect(),
        }
    }

    /// `gamma_5 psi` at every site.
    pub fn apply_gamma5(&self) -> SpinorField {
        let g5 = gamma5();
        self.map_sites(|_, psi| std::array::from_fn(|s| (0..4).map(|t| psi[t] * g5[(s, t)]).sum()))
    }

    /// The gauge-transformed field `psi'(n) = g(n) psi(n)`.
    ///
    /// # Panics
    /// If `g` does not hold one matrix per site.
    pub fn gauge_transform(&self, g: &[Su3]) -> SpinorField {
        assert_eq!(
            g.len(),
            self.volume(),
            "a gauge transformation needs one SU(3) matrix per site"
        );
        self.map_sites(|n, psi| psi.map(|v| g[n] * v))
    }

    /// Splits into the even and the odd half, each in checkerboard order (`n / 2`).
    pub fn to_eo(&self) -> (Vec<Complex64>, Vec<Complex64>) {
        let lat = sites(self.dims);
        let half = SPINOR_LEN * lat.half_volume();
        let mut halves = [
            vec![Complex64::new(0.0, 0.0); half],
            vec![Complex64::new(0.0, 0.0); half],
        ];
        for n in 0..lat.volume() {
            write_site(&mut halves[lat.parity(n)], n / 2, &self.site(n));
        }
        let [even, odd] = halves;
        (even, odd)
    }

    /// Merges even and odd halves in checkerboard order into a lexicographic field.
    pub fn from_eo(dims: [usize; 4], even: &[Complex64], odd: &[Complex64]) -> Result<SpinorField> {
        let lat = sites(dims);
        let half = SPINOR_LEN * lat.half_volume();
        if even.len() != half || odd.len() != half {
            return Err(Error::InvalidParameter(format!(
                "even-odd halves of lengths {} and {} do not fit lattice {dims:?}: each must hold 12 * volume / 2 = {half} entries",
                even.len(),
                odd.len()
            )));
        }
        let mut f = SpinorField::zeros(dims);
        for n in 0..lat.volume() {
            let src = if lat.parity(n) == 0 { even } else { odd };
            write_site(&mut f.data, n, &read_site(src, n / 2));
        }
        Ok(f)
    }

    fn map_sites(&self, f: impl Fn(usize, SiteSpinor) -> SiteSpinor) -> SpinorField {
        let mut out = SpinorField::zeros(self.dims);
        for n in 0..self.volume() {
            write_site(&mut out.data, n, &f(n, self.site(n)));
        }
        out
    }
}
