//! The four-dimensional lattice: site numbering, neighbours with their boundary signs, parity and the
//! even-odd (checkerboard) ordering, exactly as fixed in the crate docs.

use crate::error::{Error, Result};

/// Complex numbers per site of a spinor (4 spins x 3 colours).
pub const SPINOR_LEN: usize = 12;

/// A periodic `X x Y x Z x T` lattice, optionally antiperiodic in `t` for fermions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lattice {
    /// Extents `[X, Y, Z, T]`, all even.
    pub dims: [usize; 4],
    /// Whether a fermion hop across the `t` boundary picks up a factor `-1`.
    pub antiperiodic_t: bool,
}

impl Lattice {
    /// A lattice with checked dimensions: each even and at least 2, and `12 * volume` indexable by `u32`.
    pub fn new(dims: [usize; 4], antiperiodic_t: bool) -> Result<Self> {
        check_dims(dims)?;
        Ok(Self {
            dims,
            antiperiodic_t,
        })
    }

    /// Number of sites `X * Y * Z * T`.
    pub fn volume(&self) -> usize {
        self.dims.iter().product()
    }

    /// Number of sites of one parity.
    pub fn half_volume(&self) -> usize {
        self.volume() / 2
    }

    /// Coordinates `[x, y, z, t]` of the site with lexicographic index `n`.
    pub fn coords(&self, n: usize) -> [usize; 4] {
        let [nx, ny, nz, _] = self.dims;
        [
            n % nx,
            (n / nx) % ny,
            (n / (nx * ny)) % nz,
            n / (nx * ny * nz),
        ]
    }

    /// Lexicographic index `x + X (y + Y (z + Z t))` of the site at `c = [x, y, z, t]`.
    pub fn index(&self, c: [usize; 4]) -> usize {
        let [nx, ny, nz, _] = self.dims;
        c[0] + nx * (c[1] + ny * (c[2] + nz * c[3]))
    }

    /// Parity `(x + y + z + t) % 2` of site `n` (even = 0).
    pub fn parity(&self, n: usize) -> usize {
        self.coords(n).iter().sum::<usize>() % 2
    }

    /// The neighbour `n + mu` and the fermion boundary factor of the hop to it.
    pub fn forward(&self, n: usize, mu: usize) -> (usize, f64) {
        let mut c = self.coords(n);
        let wraps = c[mu] + 1 == self.dims[mu];
        c[mu] = if wraps { 0 } else { c[mu] + 1 };
        (self.index(c), self.boundary_sign(mu, wraps))
    }

    /// The neighbour `n - mu` and the fermion boundary factor of the hop to it.
    pub fn backward(&self, n: usize, mu: usize) -> (usize, f64) {
        let mut c = self.coords(n);
        let wraps = c[mu] == 0;
        c[mu] = if wraps { self.dims[mu] - 1 } else { c[mu] - 1 };
        (self.index(c), self.boundary_sign(mu, wraps))
    }

    /// Position of site `n` in even-odd order: `parity * V/2 + n/2`.
    pub fn eo_index(&self, n: usize) -> usize {
        self.parity(n) * self.half_volume() + n / 2
    }

    /// The site at position `e` of the even-odd order (inverse of [`Lattice::eo_index`]).
    pub fn site_of_eo(&self, e: usize) -> usize {
        let half = self.half_volume();
        let (p, cb) = (e / half, e % half);
        // Sites 2cb and 2cb+1 differ only in x (X is even), so exactly one of them has parity p.
        let n = 2 * cb;
        if self.parity(n) == p {
            n
        } else {
            n + 1
        }
    }

    fn boundary_sign(&self, mu: usize, wraps: bool) -> f64 {
        if wraps && mu == 3 && self.antiperiodic_t {
            -1.0
        } else {
            1.0
        }
    }
}

/// Checks lattice dimensions as [`Lattice::new`] does, for fields built from bare `dims`.
pub fn check_dims(dims: [usize; 4]) -> Result<()> {
    let bad = |why: String| Err(Error::InvalidDims { dims, why });
    for (mu, &d) in dims.iter().enumerate() {
        let name = ["X", "Y", "Z", "T"][mu];
        if d < 2 {
            return bad(format!(
                "{name} = {d} but every extent must be at least 2; use e.g. {name} = 4"
            ));
        }
        if d % 2 != 0 {
            return bad(format!(
                "{name} = {d} is odd but even-odd preconditioning needs every extent even; use {} or {}",
                d - 1,
                d + 1
            ));
        }
    }
    let entries = dims
        .iter()
        .try_fold(SPINOR_LEN, |acc, &d| acc.checked_mul(d));
    match entries {
        Some(e) if e <= u32::MAX as usize => Ok(()),
        _ => bad(format!(
            "12 * volume must fit in a u32 (at most {}) for GPU indexing; use smaller extents",
            u32::MAX
        )),
    }
}
