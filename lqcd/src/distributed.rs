//! The CPU reference operator and BiCGStab split over the ranks of a communicator, as Doi's paper splits
//! the lattice over MPI ranks: the time direction is cut into slabs, each rank holds its slab with one
//! halo time slice on each side (refreshed before every hopping term), and every inner product is summed
//! over the ranks. The result equals the one-domain solve to rounding (the sums are grouped differently).

use lattice_gpu_host::comm::Communicator;
use lattice_gpu_host::decomp::{Decomposition, Face};
use num_complex::Complex64;

use crate::error::{Error, Result};
use crate::gauge::GaugeField;
use crate::geometry::{Lattice, SPINOR_LEN};
use crate::reference::{bicgstab_with, check_kappa, hop_from, Hop, Link, Solve};
use crate::spinor::{read_site, write_site, SiteSpinor};

/// One site's spinor as 24 reals: what the halo exchange moves.
type Packed = [f64; 2 * SPINOR_LEN];

/// The Wilson-Dirac operator on this rank's time slab.
pub struct Distributed<'a, C: Communicator> {
    comm: &'a C,
    lat: &'a Lattice,
    /// First global time slice this rank owns, and how many.
    t0: usize,
    slices: usize,
    plan: Vec<Face<4>>,
    /// `U_mu` of every site of the local array (halo slices included), 4 per site.
    links: Vec<Link>,
}

impl<'a, C: Communicator> Distributed<'a, C> {
    /// Splits `lat` along t over the ranks of `comm`; every rank passes the whole gauge field and keeps
    /// the links of its slab and halo. Fails with the fix when there are more ranks than time slices.
    pub fn new(comm: &'a C, lat: &'a Lattice, u: &GaugeField) -> Result<Self> {
        let [nx, ny, nz, nt] = lat.dims;
        let d = Decomposition::new(lat.dims, [1, 1, 1, comm.size()], [0, 0, 0, 1], [true; 4])
            .map_err(|e| Error::InvalidParameter(e.to_string()))?;
        let own = d.owned(comm.rank());
        let (t0, slices) = (own.begin[3], own.size[3]);
        let volume3 = nx * ny * nz;
        let mut links = Vec::with_capacity(4 * volume3 * (slices + 2));
        for lt in 0..slices + 2 {
            let t = (t0 + nt + lt - 1) % nt;
            links.extend_from_slice(&u.links[4 * volume3 * t..4 * volume3 * (t + 1)]);
        }
        Ok(Self {
            comm,
            lat,
            t0,
            slices,
            plan: d.halo_plan(comm.rank()),
            links,
        })
    }

    /// Complex numbers of a spinor on this rank's slab.
    pub fn len(&self) -> usize {
        SPINOR_LEN * self.volume3() * self.slices
    }

    /// Whether the slab is empty (never: every rank owns a slice).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn volume3(&self) -> usize {
        self.lat.dims[0] * self.lat.dims[1] * self.lat.dims[2]
    }

    /// This rank's part of a whole-lattice spinor.
    pub fn scatter(&self, global: &[Complex64]) -> Vec<Complex64> {
        let per_slice = SPINOR_LEN * self.volume3();
        global[per_slice * self.t0..per_slice * (self.t0 + self.slices)].to_vec()
    }

    /// The whole spinor on rank 0 (in rank order the slabs are in time order); empty elsewhere.
    pub fn gather(&self, part: &[Complex64]) -> Result<Vec<Complex64>> {
        let reals: Vec<f64> = part.iter().flat_map(|z| [z.re, z.im]).collect();
        let all = self.comm.gather(&reals).map_err(host)?;
        Ok(all.chunks(2).map(|c| Complex64::new(c[0], c[1])).collect())
    }

    /// The hopping term `H psi` on the slab (`psi`: this rank's part).
    pub fn hopping(&self, psi: &[Complex64]) -> Result<Vec<Complex64>> {
        let [nx, ny, nz, nt] = self.lat.dims;
        let v3 = self.volume3();
        // The slab with a halo slice on each side, one packed spinor per site.
        let mut a: Vec<Packed> = vec![[0.0; 2 * SPINOR_LEN]; v3 * (self.slices + 2)];
        for (k, site) in a[v3..v3 * (self.slices + 1)].iter_mut().enumerate() {
            for c in 0..SPINOR_LEN {
                let z = psi[SPINOR_LEN * k + c];
                (site[2 * c], site[2 * c + 1]) = (z.re, z.im);
            }
        }
        let index = |p: [usize; 4]| p[0] + nx * (p[1] + ny * (p[2] + nz * p[3]));
        self.comm
            .exchange(&self.plan, &mut a, &index)
            .map_err(host)?;
        let spinor = |l: usize| -> SiteSpinor {
            let z: Vec<Complex64> = (0..SPINOR_LEN)
                .map(|c| Complex64::new(a[l][2 * c], a[l][2 * c + 1]))
                .collect();
            read_site(&z, 0)
        };
        let mut out = vec![Complex64::new(0.0, 0.0); self.len()];
        for k in 0..v3 * self.slices {
            let l = k + v3;
            let p = [k % nx, (k / nx) % ny, (k / (nx * ny)) % nz, l / v3];
            let t = self.t0 + p[3] - 1;
            let h = hop_from(Hop::Plain, |mu, forward| {
                let mut q = p;
                let wraps = if mu == 3 {
                    // Halo slices hold the neighbours' (wrapped) slices; the sign is the lattice's.
                    q[3] = if forward { p[3] + 1 } else { p[3] - 1 };
                    if forward {
                        t + 1 == nt
                    } else {
                        t == 0
                    }
                } else {
                    let n = self.lat.dims[mu];
                    q[mu] = if forward {
                        (p[mu] + 1) % n
                    } else {
                        (p[mu] + n - 1) % n
                    };
                    false
                };
                let sign = if wraps && self.lat.antiperiodic_t {
                    -1.0
                } else {
                    1.0
                };
                let m = index(q);
                let link = if forward {
                    self.links[4 * l + mu]
                } else {
                    self.links[4 * m + mu].adjoint()
                };
                (link, spinor(m), sign)
            });
            write_site(&mut out, k, &h);
        }
        Ok(out)
    }

    /// `D psi = psi - kappa H psi` on the slab.
    pub fn wilson_dirac(&self, kappa: f64, psi: &[Complex64]) -> Result<Vec<Complex64>> {
        let h = self.hopping(psi)?;
        Ok(psi.iter().zip(&h).map(|(p, h)| p - kappa * h).collect())
    }

    /// `<a, b>` over all ranks.
    pub fn dot(&self, a: &[Complex64], b: &[Complex64]) -> Result<Complex64> {
        let local = crate::spinor::dot(a, b);
        Ok(Complex64::new(
            self.comm.sum(local.re).map_err(host)?,
            self.comm.sum(local.im).map_err(host)?,
        ))
    }

    /// Solves `D x = b` (this rank's part of `b`) by BiCGStab on the full lattice; returns this rank's
    /// part of `x`, the record, and the true relative residual `|b - D x| / |b|`.
    pub fn solve(
        &self,
        kappa: f64,
        b: &[Complex64],
        tol: f64,
        max_iter: usize,
    ) -> Result<(Vec<Complex64>, Solve, f64)> {
        check_kappa(kappa)?;
        let solve = bicgstab_with(
            |v| self.wilson_dirac(kappa, v),
            |x, y| self.dot(x, y),
            b,
            tol,
            max_iter,
        )?;
        let dx = self.wilson_dirac(kappa, &solve.x)?;
        let r: Vec<Complex64> = b.iter().zip(&dx).map(|(b, d)| b - d).collect();
        let b_norm = self.dot(b, b)?.re.sqrt();
        let res = if b_norm == 0.0 {
            0.0
        } else {
            self.dot(&r, &r)?.re.sqrt() / b_norm
        };
        Ok((solve.x.clone(), solve, res))
    }
}

fn host(e: lattice_gpu_host::Error) -> Error {
    Error::InvalidParameter(e.to_string())
}

#[cfg(test)]
mod tests {
    use lattice_gpu_host::comm::Solo;

    use super::*;
    use crate::reference;
    use crate::spinor::SpinorField;

    #[test]
    fn one_rank_equals_the_reference() {
        for antiperiodic in [false, true] {
            let dims = [4, 2, 4, 6];
            let lat = Lattice::new(dims, antiperiodic).unwrap();
            let u = GaugeField::random(dims, 3);
            let psi = SpinorField::random(dims, 4);
            let d = Distributed::new(&Solo, &lat, &u).unwrap();
            let got = d.hopping(&d.scatter(&psi.data)).unwrap();
            let want = reference::hopping(&lat, &u, &psi);
            let diff = got
                .iter()
                .zip(&want.data)
                .map(|(a, b)| (a - b).norm())
                .fold(0.0, f64::max);
            assert!(diff < 1e-13, "antiperiodic {antiperiodic}: {diff:e}");
            let b = SpinorField::random(dims, 5);
            let (x, s, res) = d.solve(0.12, &b.data, 1e-11, 500).unwrap();
            let (want_x, want_s, _) =
                reference::solve_full(&lat, &u, 0.12, &b, 1e-11, 500).unwrap();
            assert_eq!(s.iterations, want_s.iterations);
            assert!(res < 1e-10, "{res}");
            let dx = x
                .iter()
                .zip(&want_x.data)
                .map(|(a, b)| (a - b).norm())
                .fold(0.0, f64::max);
            assert!(dx < 1e-12, "{dx:e}");
        }
    }
}
