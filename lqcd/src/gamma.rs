//! Euclidean gamma matrices in the DeGrand-Rossi (chiral) basis of the crate docs, written out entry by
//! entry so that the reference operator depends on nothing but this table.

use nalgebra::Matrix4;
use num_complex::Complex64;

/// A 4x4 complex matrix acting on spin.
pub type SpinMatrix = Matrix4<Complex64>;

const O: Complex64 = Complex64::new(0.0, 0.0);
const R: Complex64 = Complex64::new(1.0, 0.0);
const N: Complex64 = Complex64::new(-1.0, 0.0);
const I: Complex64 = Complex64::new(0.0, 1.0);
const J: Complex64 = Complex64::new(0.0, -1.0);

/// `gamma_mu` for `mu = 0, 1, 2, 3` (x, y, z, t).
///
/// # Panics
/// If `mu > 3`.
pub fn gamma(mu: usize) -> SpinMatrix {
    // `Matrix4::new` takes the entries row by row, so these read like the table in the crate docs.
    match mu {
        0 => Matrix4::new(O, O, O, I, O, O, I, O, O, J, O, O, J, O, O, O),
        1 => Matrix4::new(O, O, O, N, O, O, R, O, O, R, O, O, N, O, O, O),
        2 => Matrix4::new(O, O, I, O, O, O, O, J, J, O, O, O, O, I, O, O),
        3 => Matrix4::new(O, O, R, O, O, O, O, R, R, O, O, O, O, R, O, O),
        _ => panic!("gamma({mu}): the direction must be 0, 1, 2 or 3"),
    }
}

/// `gamma_5 = gamma_x gamma_y gamma_z gamma_t = diag(1, 1, -1, -1)`.
pub fn gamma5() -> SpinMatrix {
    Matrix4::from_diagonal(&nalgebra::Vector4::new(R, R, N, N))
}

/// The 4x4 identity in spin space.
pub fn identity() -> SpinMatrix {
    Matrix4::identity()
}
