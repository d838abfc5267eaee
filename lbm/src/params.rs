//! Physical parameters of a run and the checks that keep it in the method's range.

use crate::{Error, Result};

/// The largest wall speed allowed: Mach 0.3 (`u / c_s` with `c_s = 1 / sqrt(3)`); above it the
/// compressibility error of the lattice-Boltzmann method is no longer small.
pub const MAX_SPEED: f64 = 0.3 / 1.732_050_807_568_877_2;

/// The collision operator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Collision {
    /// Single relaxation time (Bhatnagar-Gross-Krook).
    Bgk,
    /// Two relaxation times; `magic` is Ginzburg's `Lambda = (tau+ - 1/2)(tau- - 1/2)` (3/16 puts
    /// bounce-back walls exactly halfway for Poiseuille flow, 1/4 is the most stable).
    Trt {
        /// The magic parameter.
        magic: f64,
    },
}

/// Relaxation time, collision, body force and wall velocity, in lattice units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// Relaxation time `tau` (> 1/2); kinematic viscosity `(tau - 1/2) / 3`.
    pub tau: f64,
    /// BGK or TRT.
    pub collision: Collision,
    /// Body force per unit volume (Guo forcing).
    pub force: [f64; 3],
    /// Velocity of the moving-wall cells.
    pub wall_velocity: [f64; 3],
    /// The inlet's velocity profile and the outlet's density.
    pub open: Open,
}

/// The open boundaries: the velocity of the inlet cells, which ramps up smoothly, and the density of the
/// outlet cells.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Open {
    /// The inflow velocity where the profile peaks, once ramped up.
    pub velocity: [f64; 3],
    /// Per axis, the two coordinates between which the profile is a parabola, zero at both (the walls'
    /// halfway planes), or `None` for a profile uniform along that axis.
    pub parabola: [Option<[f64; 2]>; 3],
    /// Steps over which the inflow rises from rest as `(1 - cos(pi t / ramp)) / 2`; 0 starts at full speed.
    pub ramp: u64,
    /// The density of the outlet cells (the pressure `(rho - 1) / 3` above the reference).
    pub outlet_density: f64,
    /// 0 for an outlet that holds its density, and reflects sound whole (inverted); otherwise a
    /// non-reflecting one ([`Physics::outlet_follow`](lattice_gpu_kernels::lbm::Physics)), whose
    /// reference velocity follows the outflow over this many steps: longer than the waves it lets
    /// out, shorter than the changes of the mean flow it should follow.
    pub outlet_memory: u64,
}

impl Open {
    /// No inflow, outlets at density 1.
    pub const NONE: Self = Self {
        velocity: [0.0; 3],
        parabola: [None; 3],
        ramp: 0,
        outlet_density: 1.0,
        outlet_memory: 0,
    };

    /// The share of the full inflow at step `t` (the first step is 1).
    pub fn ramp_at(&self, t: u64) -> f64 {
        if t >= self.ramp {
            1.0
        } else {
            0.5 * (1.0 - (std::f64::consts::PI * t as f64 / self.ramp as f64).cos())
        }
    }

    /// The inflow at step `t` and its profile per axis as `[centre, k]`, the velocity scaled by
    /// `1 - k (p - centre)^2` (the kernels' form, [`Physics`](lattice_gpu_kernels::lbm::Physics)).
    pub fn profile_at(&self, t: u64) -> ([f64; 3], [[f64; 2]; 3]) {
        let share = self.ramp_at(t);
        let shape = self.parabola.map(|p| match p {
            Some([lo, hi]) => [0.5 * (lo + hi), 4.0 / ((hi - lo) * (hi - lo))],
            None => [0.0, 0.0],
        });
        (self.velocity.map(|v| v * share), shape)
    }
}

impl Params {
    /// BGK with relaxation time `tau`, no force, walls at rest.
    pub fn bgk(tau: f64) -> Self {
        Self {
            tau,
            collision: Collision::Bgk,
            force: [0.0; 3],
            wall_velocity: [0.0; 3],
            open: Open::NONE,
        }
    }

    /// The relaxation time that gives kinematic viscosity `nu`.
    pub fn tau_for_viscosity(nu: f64) -> f64 {
        3.0 * nu + 0.5
    }

    /// Kinematic viscosity `(tau - 1/2) / 3`.
    pub fn viscosity(&self) -> f64 {
        (self.tau - 0.5) / 3.0
    }

    /// `1 / tau`, the relaxation rate of the symmetric part.
    pub fn omega(&self) -> f64 {
        1.0 / self.tau
    }

    /// The relaxation rate of the antisymmetric part (equal to [`omega`](Self::omega) for BGK).
    pub fn omega_minus(&self) -> f64 {
        match self.collision {
            Collision::Bgk => self.omega(),
            Collision::Trt { magic } => 1.0 / (magic / (self.tau - 0.5) + 0.5),
        }
    }

    /// Fails with a message naming the fix unless the run can be stable: `tau > 1/2`, a positive magic
    /// parameter, finite force and a wall speed at most [`MAX_SPEED`].
    pub fn check(&self) -> Result<()> {
        if !(self.tau.is_finite() && self.tau > 0.5) {
            return Err(Error::InvalidParameter(format!(
                "tau = {} must be above 0.5 (the viscosity (tau - 1/2)/3 must be positive); \
                 lower the Reynolds number, raise the resolution or the lid speed, or pass a larger --tau",
                self.tau
            )));
        }
        if let Collision::Trt { magic } = self.collision {
            if !(magic.is_finite() && magic > 0.0) {
                return Err(Error::InvalidParameter(format!(
                    "the TRT magic parameter {magic} must be positive (3/16 or 1/4 are usual)"
                )));
            }
        }
        if !self.force.iter().all(|f| f.is_finite()) {
            return Err(Error::InvalidParameter(format!(
                "the body force {:?} must be finite",
                self.force
            )));
        }
        let speed = |v: [f64; 3]| v.iter().map(|v| v * v).sum::<f64>().sqrt();
        for (what, v) in [("wall", self.wall_velocity), ("inflow", self.open.velocity)] {
            let speed = speed(v);
            if speed.is_nan() || speed > MAX_SPEED {
                return Err(Error::InvalidParameter(format!(
                    "the {what} speed {speed} is above Mach 0.3 ({MAX_SPEED:.4} in lattice units): \
                     the flow would not be nearly incompressible; use a speed of 0.1 or less \
                     (the Reynolds number is set by the viscosity)"
                )));
            }
        }
        let bad_parabola = self.open.parabola.iter().flatten();
        if let Some([lo, hi]) = bad_parabola
            .copied()
            .find(|[lo, hi]| !(lo < hi && hi.is_finite()))
        {
            return Err(Error::InvalidParameter(format!(
                "an inflow parabola from {lo} to {hi}: it must run between two finite coordinates, \
                 the lower first"
            )));
        }
        let rho = self.open.outlet_density;
        if !(rho.is_finite() && (rho - 1.0).abs() <= 0.1) {
            return Err(Error::InvalidParameter(format!(
                "the outlet density {rho} must lie within 0.1 of 1 (density differences are pressure \
                 differences, 3 (rho - 1) times the speed of sound squared, and must stay small)"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_name_the_problem() {
        let e = Params::bgk(0.5).check().unwrap_err().to_string();
        assert!(e.contains("tau = 0.5") && e.contains("above 0.5"), "{e}");
        let mut p = Params::bgk(0.8);
        p.wall_velocity = [0.2, 0.0, 0.0];
        let e = p.check().unwrap_err().to_string();
        assert!(e.contains("Mach 0.3"), "{e}");
        p.wall_velocity = [0.1, 0.0, 0.0];
        p.check().unwrap();
        p.open.velocity = [0.0, 0.3, 0.0];
        let e = p.check().unwrap_err().to_string();
        assert!(e.contains("inflow speed 0.3"), "{e}");
        p.open.velocity = [0.05, 0.0, 0.0];
        p.open.parabola[1] = Some([3.0, 3.0]);
        assert!(p.check().unwrap_err().to_string().contains("parabola"));
        p.open.parabola[1] = Some([0.5, 8.5]);
        p.open.outlet_density = 1.5;
        assert!(p
            .check()
            .unwrap_err()
            .to_string()
            .contains("outlet density"));
        p.open.outlet_density = 1.0;
        p.check().unwrap();
        p.collision = Collision::Trt { magic: 0.0 };
        assert!(p.check().is_err());
    }

    /// The ramp rises smoothly from 0 to 1, and the parabola's kernel form vanishes where it should.
    #[test]
    fn the_inflow_ramps_up_and_its_parabola_vanishes_at_the_walls() {
        let open = Open {
            velocity: [0.1, 0.0, 0.0],
            parabola: [None, Some([0.5, 10.5]), None],
            ramp: 100,
            ..Open::NONE
        };
        assert_eq!(open.ramp_at(0), 0.0);
        assert!((open.ramp_at(50) - 0.5).abs() < 1e-15);
        assert_eq!(open.ramp_at(100), 1.0);
        assert_eq!(Open::NONE.ramp_at(0), 1.0);
        let (u, shape) = open.profile_at(25);
        assert!((u[0] - 0.1 * (1.0 - 0.5f64.sqrt()) / 2.0).abs() < 1e-15);
        let s = |p: f64| 1.0 - shape[1][1] * (p - shape[1][0]).powi(2);
        assert!(s(0.5).abs() < 1e-15 && s(10.5).abs() < 1e-15 && s(5.5) == 1.0);
        assert_eq!(shape[0], [0.0, 0.0]);
    }

    #[test]
    fn trt_magic_links_the_rates() {
        let mut p = Params::bgk(0.9);
        assert_eq!(p.omega_minus(), p.omega());
        p.collision = Collision::Trt { magic: 3.0 / 16.0 };
        let lambda = (1.0 / p.omega() - 0.5) * (1.0 / p.omega_minus() - 0.5);
        assert!((lambda - 3.0 / 16.0).abs() < 1e-15);
    }
}
