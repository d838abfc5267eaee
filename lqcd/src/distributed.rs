//! The CPU reference operator and BiCGStab split over the ranks of a communicator, as Doi's paper splits
//! the lattice over MPI ranks: t is cut first, then z, then y (the rank grid takes the largest factors of
//! the rank count that each axis can hold); each rank holds its box with one halo site on each side of a
//! cut axis (refreshed before every hopping term), and every inner product is summed over the ranks. The
//! result equals the one-domain solve to rounding (the sums are grouped differently).

use lattice_gpu_host::comm::Communicator;
use lattice_gpu_host::decomp::{Decomposition, Face, Region};
use num_complex::Complex64;

use crate::error::{Error, Result};
use crate::gauge::GaugeField;
use crate::geometry::{Lattice, SPINOR_LEN};
use crate::reference::{bicgstab_with, check_kappa, hop_from, Hop, Link, OnIteration, Solve};
use crate::spinor::{read_site, write_site, SiteSpinor};

/// One site's spinor as 24 reals: what the halo exchange moves.
type Packed = [f64; 2 * SPINOR_LEN];

/// The rank grid `[1, py, pz, pt]` for `ranks` ranks on `dims`: t takes the largest factor it can hold
/// (`planes` planes per rank at least), then z, then y.
pub fn rank_grid(dims: [usize; 4], ranks: usize, planes: usize) -> Result<[usize; 4]> {
    let mut procs = [1; 4];
    let mut left = ranks;
    for axis in [3, 2, 1] {
        let take = (1..=left)
            .rev()
            .find(|&f| left.is_multiple_of(f) && f * planes <= dims[axis])
            .unwrap_or(1);
        procs[axis] = take;
        left /= take;
    }
    if left != 1 {
        return Err(Error::InvalidParameter(format!(
            "{ranks} ranks do not split the lattice {}x{}x{}x{} along t, z and y (at least {planes} \
             site{} per rank along each); use fewer ranks",
            dims[0],
            dims[1],
            dims[2],
            dims[3],
            if planes == 1 { "" } else { "s" }
        )));
    }
    Ok(procs)
}

/// The Wilson-Dirac operator on this rank's box of the lattice.
pub struct Distributed<'a, C: Communicator> {
    comm: &'a C,
    lat: &'a Lattice,
    split: Decomposition<4>,
    own: Region<4>,
    /// The local array: the box and its halos.
    local: [usize; 4],
    plan: Vec<Face<4>>,
    /// `U_mu` of every site of the local array (halos included), 4 per site.
    links: Vec<Link>,
}

impl<'a, C: Communicator> Distributed<'a, C> {
    /// Splits `lat` over the ranks of `comm` ([`rank_grid`]); every rank passes the whole gauge field and
    /// keeps the links of its box and halo. Fails with the fix when the ranks do not fit the lattice.
    pub fn new(comm: &'a C, lat: &'a Lattice, u: &GaugeField) -> Result<Self> {
        Self::on_grid(comm, lat, u, rank_grid(lat.dims, comm.size(), 1)?)
    }

    /// [`new`](Self::new) on the rank grid `procs` (`[1, py, pz, pt]`, as many ranks as `comm` has).
    pub fn on_grid(
        comm: &'a C,
        lat: &'a Lattice,
        u: &GaugeField,
        procs: [usize; 4],
    ) -> Result<Self> {
        if procs.iter().product::<usize>() != comm.size() || procs[0] != 1 {
            return Err(Error::InvalidParameter(format!(
                "a rank grid of {}x{}x{}x{} for {} ranks: give one rank along x and as many ranks in \
                 all as the run has",
                procs[0],
                procs[1],
                procs[2],
                procs[3],
                comm.size()
            )));
        }
        let halo = procs.map(|p| usize::from(p > 1));
        let split = Decomposition::new(lat.dims, procs, halo, [true; 4])
            .map_err(|e| Error::InvalidParameter(e.to_string()))?;
        let own = split.owned(comm.rank());
        let local = split.local_size(comm.rank());
        let mut this = Self {
            comm,
            lat,
            plan: split.halo_plan(comm.rank()),
            split,
            own,
            local,
            links: Vec::new(),
        };
        let sites: usize = local.iter().product();
        // Sized at once: a collected iterator of unknown length would grow by doubling.
        let mut links = Vec::with_capacity(4 * sites);
        for l in 0..sites {
            let n = lat.index(this.global_of(this.coords(l)));
            links.extend_from_slice(&u.links[4 * n..4 * n + 4]);
        }
        this.links = links;
        Ok(this)
    }

    /// Local array coordinates of local index `l`.
    fn coords(&self, mut l: usize) -> [usize; 4] {
        std::array::from_fn(|a| {
            let c = l % self.local[a];
            l /= self.local[a];
            c
        })
    }

    fn index(&self, p: [usize; 4]) -> usize {
        p[0] + self.local[0] * (p[1] + self.local[1] * (p[2] + self.local[2] * p[3]))
    }

    /// The global site coordinates of local point `p` (wrapped).
    fn global_of(&self, p: [usize; 4]) -> [usize; 4] {
        let h = self.split.halo();
        std::array::from_fn(|a| {
            let n = self.lat.dims[a];
            (self.own.begin[a] + n + p[a] - h[a]) % n
        })
    }

    /// Complex numbers of a spinor on this rank's box.
    pub fn len(&self) -> usize {
        SPINOR_LEN * self.own.len()
    }

    /// Whether the box is empty (never: every rank owns a site).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// This rank's part of a whole-lattice spinor (its box, x fastest).
    pub fn scatter(&self, global: &[Complex64]) -> Vec<Complex64> {
        // Sized at once: a collected iterator of unknown length would grow by doubling.
        let mut part = Vec::with_capacity(self.len());
        for g in self.own.points() {
            let n = self.lat.index(g);
            part.extend_from_slice(&global[SPINOR_LEN * n..SPINOR_LEN * (n + 1)]);
        }
        part
    }

    /// The whole spinor on rank 0, every rank's box put back in place; empty elsewhere.
    pub fn gather(&self, part: &[Complex64]) -> Result<Vec<Complex64>> {
        let reals: Vec<f64> = part.iter().flat_map(|z| [z.re, z.im]).collect();
        let all = self.comm.gather(&reals).map_err(host)?;
        if all.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = vec![Complex64::new(0.0, 0.0); SPINOR_LEN * self.lat.volume()];
        let mut at = 0;
        for r in 0..self.comm.size() {
            for g in self.split.owned(r).points() {
                let n = self.lat.index(g);
                for c in 0..SPINOR_LEN {
                    out[SPINOR_LEN * n + c] = Complex64::new(all[at], all[at + 1]);
                    at += 2;
                }
            }
        }
        Ok(out)
    }

    /// The hopping term `H psi` on the box (`psi`: this rank's part).
    pub fn hopping(&self, psi: &[Complex64]) -> Result<Vec<Complex64>> {
        let h = self.split.halo();
        let mut a: Vec<Packed> = vec![[0.0; 2 * SPINOR_LEN]; self.local.iter().product()];
        let inner = Region {
            begin: h,
            size: self.own.size,
        };
        for (k, p) in inner.points().enumerate() {
            let site = &mut a[self.index(p)];
            for c in 0..SPINOR_LEN {
                let z = psi[SPINOR_LEN * k + c];
                (site[2 * c], site[2 * c + 1]) = (z.re, z.im);
            }
        }
        self.comm
            .exchange(&self.plan, &mut a, &|p| self.index(p))
            .map_err(host)?;
        let spinor = |l: usize| -> SiteSpinor {
            let z: Vec<Complex64> = (0..SPINOR_LEN)
                .map(|c| Complex64::new(a[l][2 * c], a[l][2 * c + 1]))
                .collect();
            read_site(&z, 0)
        };
        let mut out = vec![Complex64::new(0.0, 0.0); self.len()];
        for (k, p) in inner.points().enumerate() {
            let l = self.index(p);
            let g = self.global_of(p);
            let hop = hop_from(Hop::Plain, |mu, forward| {
                let n = self.local[mu];
                let mut q = p;
                // Along a cut axis the halo holds the neighbour; along a whole axis it wraps here.
                q[mu] = match (forward, h[mu] > 0) {
                    (true, true) => p[mu] + 1,
                    (false, true) => p[mu] - 1,
                    (true, false) => (p[mu] + 1) % n,
                    (false, false) => (p[mu] + n - 1) % n,
                };
                let wraps = mu == 3
                    && if forward {
                        g[3] + 1 == self.lat.dims[3]
                    } else {
                        g[3] == 0
                    };
                let sign = if wraps && self.lat.antiperiodic_t {
                    -1.0
                } else {
                    1.0
                };
                let m = self.index(q);
                let link = if forward {
                    self.links[4 * l + mu]
                } else {
                    self.links[4 * m + mu].adjoint()
                };
                (link, spinor(m), sign)
            });
            write_site(&mut out, k, &hop);
        }
        Ok(out)
    }

    /// `D psi = psi - kappa H psi` on the box.
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

    /// The global coordinates `[x, y, z, t]` of the `k`-th site of rank `rank`'s box, in the order of
    /// [`scatter`](Self::scatter) (x fastest): where a value found on that rank lies.
    pub fn site_of(&self, rank: usize, k: usize) -> [usize; 4] {
        let own = self.split.owned(rank);
        let mut k = k;
        std::array::from_fn(|a| {
            let c = own.begin[a] + k % own.size[a].max(1);
            k /= own.size[a].max(1);
            c
        })
    }

    /// `|a|^2` over all ranks (`a`: this rank's part).
    pub fn norm2(&self, a: &[Complex64]) -> Result<f64> {
        let local: f64 = a.iter().map(|z| z.norm_sqr()).sum();
        self.comm.sum(local).map_err(host)
    }

    /// Solves `D x = b` (this rank's part of `b`) by BiCGStab on the full lattice; returns this rank's
    /// part of `x`, the record (its `x` left empty: the solution is held once) and the true relative
    /// residual `|b - D x| / |b|`.
    pub fn solve(
        &self,
        kappa: f64,
        b: &[Complex64],
        tol: f64,
        max_iter: usize,
    ) -> Result<(Vec<Complex64>, Solve, f64)> {
        self.solve_checked(kappa, b, tol, max_iter, &mut |_, _| Ok(()))
    }

    /// [`solve`](Self::solve) with `check` called after every iteration on every rank at once
    /// ([`OnIteration`]): it may make collective calls, such as agreeing on a stop.
    pub fn solve_checked(
        &self,
        kappa: f64,
        b: &[Complex64],
        tol: f64,
        max_iter: usize,
        check: &mut OnIteration,
    ) -> Result<(Vec<Complex64>, Solve, f64)> {
        check_kappa(kappa)?;
        let mut solve = bicgstab_with(
            |v| self.wilson_dirac(kappa, v),
            |x, y| self.dot(x, y),
            b,
            tol,
            max_iter,
            check,
        )?;
        let dx = self.wilson_dirac(kappa, &solve.x)?;
        // |b - D x|^2 summed as it goes, without a residual vector.
        let r2: f64 = b.iter().zip(&dx).map(|(b, d)| (b - d).norm_sqr()).sum();
        drop(dx);
        let b_norm = self.dot(b, b)?.re.sqrt();
        let res = if b_norm == 0.0 {
            0.0
        } else {
            self.comm.sum(r2).map_err(host)?.sqrt() / b_norm
        };
        // The solution once, not also inside the record.
        let x = std::mem::take(&mut solve.x);
        Ok((x, solve, res))
    }
}

/// A communicator's error as it is: a failed exchange is no invalid parameter.
fn host(e: lattice_gpu_host::Error) -> Error {
    Error::Host(e)
}

#[cfg(test)]
mod tests {
    use lattice_gpu_host::comm::Solo;

    use super::*;
    use crate::reference;
    use crate::spinor::SpinorField;

    #[test]
    fn rank_grid_cuts_t_then_z_then_y() {
        assert_eq!(rank_grid([4, 4, 4, 8], 2, 1).unwrap(), [1, 1, 1, 2]);
        assert_eq!(rank_grid([4, 4, 4, 8], 16, 1).unwrap(), [1, 1, 2, 8]);
        assert_eq!(rank_grid([4, 4, 2, 2], 12, 1).unwrap(), [1, 3, 2, 2]);
        assert_eq!(rank_grid([4, 6, 4, 4], 6, 1).unwrap(), [1, 1, 2, 3]);
        assert!(rank_grid([2, 2, 2, 2], 16, 1).is_err());
        // Two planes per rank (the GPU's even-odd blocks): 16 ranks on T = 8 take 4 along t.
        assert_eq!(rank_grid([4, 4, 4, 8], 16, 2).unwrap(), [1, 2, 2, 4]);
        assert_eq!(rank_grid([4, 4, 4, 8], 4, 2).unwrap(), [1, 1, 1, 4]);
        let e = rank_grid([4, 4, 4, 8], 128, 2).unwrap_err().to_string();
        assert!(e.contains("at least 2 sites per rank"), "{e}");
    }

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
