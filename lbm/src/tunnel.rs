//! A numerical wind tunnel: a body in a channel fed at `x = 0` and drained at `x = nx - 1`, its sides
//! periodic or walls ([`Sides`]), and the body's drag and lift coefficients. The body comes from a
//! built-in shape, a voxel mask or an STL surface; this module takes it as cells of the grid
//! ([`Geometry::add_mask`]) and sets the flow around it.
//!
//! The coefficients are `2 F / (rho U^2 A)` with `U` the mean inflow and `A` the body's frontal area:
//! the cells of its projection onto the inlet plane. The Reynolds number is `U L / nu` with `L` the
//! body's extent across the flow (in y, in cells), the diameter for a sphere or a cylinder.

use crate::geometry::{Geometry, Sides};
use crate::params::{Collision, Open, Params};
use crate::{Error, Result};

/// The inflow's shape across the inlet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// The same velocity everywhere on the inlet.
    Uniform,
    /// Zero at the walls' halfway planes and parabolic between them, along each walled axis.
    Parabolic,
}

/// A tunnel's grid, sides and inflow.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tunnel {
    /// The grid, inlet and outlet cells and walls included.
    pub dims: [usize; 3],
    /// Which ends across the flow are walls.
    pub sides: Sides,
    /// The inflow's shape.
    pub profile: Profile,
    /// The inflow's peak velocity along x in lattice units.
    pub peak: f64,
}

/// The largest inflow in lattice units (Mach 0.26): above it the compressibility error grows fast.
pub const MAX_INFLOW: f64 = 0.15;

impl Tunnel {
    /// The tunnel, or the error naming the option that cannot work: a profile needs walls to be
    /// parabolic between, the inflow a speed the lattice carries.
    pub fn new(dims: [usize; 3], sides: Sides, profile: Profile, peak: f64) -> Result<Self> {
        if profile == Profile::Parabolic && !sides.walled().contains(&true) {
            return Err(Error::InvalidParameter(format!(
                "a parabolic inflow runs between resting walls, and {sides:?} sides have none: give \
                 --sides walls (or walls-y), or --profile uniform"
            )));
        }
        if !(peak.is_finite() && peak > 0.0 && peak <= MAX_INFLOW) {
            return Err(Error::InvalidParameter(format!(
                "--u-in {peak}: the inflow in lattice units must lie in (0, {MAX_INFLOW}] (Mach 0.26); \
                 0.05 to 0.1 is usual, lower for accuracy"
            )));
        }
        Ok(Self {
            dims,
            sides,
            profile,
            peak,
        })
    }

    /// The empty tunnel: inlet, outlet and walls.
    pub fn geometry(&self) -> Result<Geometry> {
        Geometry::open_ended(self.dims, self.sides)
    }

    /// The mean inflow over the inlet: a parabola's mean is 2/3 of its peak along each axis it spans.
    pub fn mean_inflow(&self) -> f64 {
        let spans = match self.profile {
            Profile::Uniform => 0,
            Profile::Parabolic => self.sides.walled().iter().filter(|&&w| w).count(),
        };
        self.peak * (2.0f64 / 3.0).powi(spans as i32)
    }

    /// The flow's parameters: relaxation time `tau`, `collision`, the inflow ramped up over `ramp`
    /// steps, the outlet at density 1.
    pub fn params(&self, tau: f64, collision: Collision, ramp: u64) -> Result<Params> {
        let walled = self.sides.walled();
        let span = |a: usize| {
            let w = walled[a - 1] && self.profile == Profile::Parabolic;
            w.then(|| [0.5, self.dims[a] as f64 - 1.5])
        };
        let p = Params {
            open: Open {
                velocity: [self.peak, 0.0, 0.0],
                parabola: [None, span(1), span(2)],
                ramp,
                ..Open::NONE
            },
            collision,
            ..Params::bgk(tau)
        };
        p.check()?;
        Ok(p)
    }
}

/// What a body presents to the flow: its frontal area and its extent across the flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Body {
    /// The cells of its projection onto the y-z plane.
    pub frontal_area: usize,
    /// Its cells from lowest to highest on each axis, both counted.
    pub extent: [usize; 3],
}

impl Body {
    /// Body `b` of `g` (one of [`Geometry::bodies`]).
    pub fn of(g: &Geometry, b: usize) -> Self {
        let [nx, ny, _] = g.dims();
        let cells = &g.bodies()[b];
        let mut shadow = vec![false; g.cells() / nx];
        let mut lo = [usize::MAX; 3];
        let mut hi = [0; 3];
        for &n in cells {
            let n = n as usize;
            let p = [n % nx, n / nx % ny, n / (nx * ny)];
            shadow[n / nx] = true;
            for a in 0..3 {
                lo[a] = lo[a].min(p[a]);
                hi[a] = hi[a].max(p[a]);
            }
        }
        Self {
            frontal_area: shadow.iter().filter(|&&s| s).count(),
            extent: std::array::from_fn(|a| (hi[a] + 1).saturating_sub(lo[a])),
        }
    }

    /// The drag and the two lift coefficients `2 F / (rho U^2 A)` of the force `f` at mean inflow
    /// `u` (rho 1).
    pub fn coefficients(&self, f: [f64; 3], u: f64) -> [f64; 3] {
        f.map(|c| 2.0 * c / (u * u * self.frontal_area as f64))
    }

    /// The relaxation time for Reynolds number `re` at mean inflow `u`, with the body's extent across
    /// the flow (y) as the length; or the error that says which resolution would be stable.
    pub fn tau_for(&self, re: f64, u: f64) -> Result<f64> {
        if !(re.is_finite() && re > 0.0) {
            return Err(Error::InvalidParameter(format!(
                "--re {re}: the Reynolds number must be positive"
            )));
        }
        let length = self.extent[1] as f64;
        let tau = Params::tau_for_viscosity(u * length / re);
        // tau - 1/2 = 3 U L / Re; below about 0.51 the collision is no longer stable at these speeds.
        if tau < 0.51 {
            let need = (0.01 / 3.0 * re / u).ceil();
            return Err(Error::InvalidParameter(format!(
                "Re {re} with a body {length} cells across and a mean inflow of {u:.4} gives tau = \
                 {tau:.4}, too close to 1/2 to be stable: make the body at least {need} cells across \
                 (a finer grid), raise --u-in, or lower --re"
            )));
        }
        Ok(tau)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Obstacle;
    use lattice_gpu_kernels::lbm::tag;

    #[test]
    fn a_duct_has_walls_on_four_sides_and_open_ends() {
        let t = Tunnel::new([8, 6, 5], Sides::Walls, Profile::Parabolic, 0.09).unwrap();
        let g = t.geometry().unwrap();
        assert_eq!(g.tags()[g.index([3, 0, 2])], tag::WALL);
        assert_eq!(g.tags()[g.index([3, 2, 4])], tag::WALL);
        assert_eq!(g.tags()[g.index([0, 2, 2])], tag::INLET);
        assert_eq!(g.tags()[g.index([7, 4, 3])], tag::OUTLET);
        assert_eq!(g.tags()[g.index([0, 0, 2])], tag::WALL);
        assert!((t.mean_inflow() - 0.04).abs() < 1e-15);
        let p = t.params(0.6, Collision::Bgk, 10).unwrap();
        assert_eq!(p.open.parabola, [None, Some([0.5, 4.5]), Some([0.5, 3.5])]);
        let slip = Tunnel::new([8, 6, 5], Sides::Slip, Profile::Uniform, 0.09).unwrap();
        let g = slip.geometry().unwrap();
        assert_eq!(g.tags()[g.index([3, 0, 2])], tag::SLIP_Y);
        assert_eq!(g.tags()[g.index([3, 2, 4])], tag::SLIP_Z);
        assert_eq!(g.tags()[g.index([3, 5, 0])], tag::SLIP_Y | tag::SLIP_Z);
        assert_eq!(g.tags()[g.index([0, 2, 2])], tag::INLET);
        assert!(Tunnel::new([8, 6, 5], Sides::Slip, Profile::Parabolic, 0.09).is_err());
        let free = Tunnel::new([8, 6, 5], Sides::Periodic, Profile::Uniform, 0.09).unwrap();
        let g = free.geometry().unwrap();
        assert_eq!(g.tags()[g.index([0, 0, 0])], tag::INLET);
        assert_eq!(g.fluid_cells(), 6 * 6 * 5);
        let e = Tunnel::new([8, 6, 5], Sides::Periodic, Profile::Parabolic, 0.09).unwrap_err();
        assert!(e.to_string().contains("--sides walls"), "{e}");
        assert!(Tunnel::new([8, 6, 5], Sides::Walls, Profile::Uniform, 0.2).is_err());
    }

    /// A sphere's frontal area is the lattice points of its central disc; its extent the nodes
    /// across it.
    #[test]
    fn a_sphere_shows_its_disc() {
        let mut g = Geometry::periodic([12, 12, 12]).unwrap();
        g.add_obstacle(&Obstacle::Sphere {
            centre: [6.0, 6.0, 6.0],
            radius: 2.0,
        })
        .unwrap();
        let b = Body::of(&g, 0);
        // 13 lattice points lie within 2 of a lattice point in the plane.
        assert_eq!(b.frontal_area, 13);
        assert_eq!(b.extent, [5, 5, 5]);
        let c = b.coefficients([0.13, 0.0, -0.013], 0.1);
        assert!((c[0] - 2.0).abs() < 1e-12 && (c[2] + 0.2).abs() < 1e-12);
        let tau = b.tau_for(10.0, 0.05).unwrap();
        // nu = (tau - 1/2) / 3 = U L / Re.
        assert!(((tau - 0.5) / 3.0 - 0.05 * 5.0 / 10.0).abs() < 1e-15);
        let e = b.tau_for(1000.0, 0.05).unwrap_err().to_string();
        assert!(e.contains("at least 67 cells across"), "{e}");
    }
}
