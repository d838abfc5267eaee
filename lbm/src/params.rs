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
}

impl Params {
    /// BGK with relaxation time `tau`, no force, walls at rest.
    pub fn bgk(tau: f64) -> Self {
        Self {
            tau,
            collision: Collision::Bgk,
            force: [0.0; 3],
            wall_velocity: [0.0; 3],
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
        let speed = self.wall_velocity.iter().map(|v| v * v).sum::<f64>().sqrt();
        if speed.is_nan() || speed > MAX_SPEED {
            return Err(Error::InvalidParameter(format!(
                "the wall speed {speed} is above Mach 0.3 ({MAX_SPEED:.4} in lattice units): \
                 the flow would not be nearly incompressible; use a lid speed of 0.1 or less \
                 (the Reynolds number is set by the viscosity)"
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
        p.collision = Collision::Trt { magic: 0.0 };
        assert!(p.check().is_err());
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
