//! The flow around a cylinder of Schäfer and Turek (1996, "Benchmark computations of laminar flow
//! around a cylinder"), cases 2D-1 (Re 20, steady) and 2D-2 (Re 100, periodic), quasi-2-D: one cell
//! in z, periodic. The paper's channel is 2.2 long and 0.41 high, the cylinder of diameter 0.1 centred
//! at (0.2, 0.2), the inflow parabolic with peak `U_m` (0.3 and 1.5), `nu = 1e-3`, `rho = 1`; the
//! mean inflow `U = 2 U_m / 3` and `D` make the Reynolds number and the coefficients.
//!
//! In the lattice the walls, the inlet and the outlet lie halfway between their cells and the fluid
//! ([`Geometry::open_channel`]): with `N` cells per diameter the fluid spans `22 N` by `4.1 N` cells, the
//! physical point `(X, Y)` being at `(1/2 + 10 N X, 1/2 + 10 N Y)`.

use crate::geometry::{Geometry, Obstacle};
use crate::params::{Collision, Open, Params};
use crate::solver::Moments;
use crate::{Error, Result};

/// Which of the paper's cases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    /// 2D-1: Re 20, a steady flow.
    Steady,
    /// 2D-2: Re 100, vortex shedding.
    Periodic,
}

impl Case {
    /// The Reynolds number `U D / nu`.
    pub fn reynolds(self) -> f64 {
        match self {
            Self::Steady => 20.0,
            Self::Periodic => 100.0,
        }
    }

    /// The paper's peak inflow `U_m` in m/s.
    pub fn peak_inflow(self) -> f64 {
        match self {
            Self::Steady => 0.3,
            Self::Periodic => 1.5,
        }
    }

    /// The paper's name of the case.
    pub fn name(self) -> &'static str {
        match self {
            Self::Steady => "2D-1",
            Self::Periodic => "2D-2",
        }
    }

    /// The paper's intervals for the case's quantities: (name, low, high).
    pub fn intervals(self) -> &'static [(&'static str, f64, f64)] {
        match self {
            Self::Steady => &[
                ("c_D", 5.57, 5.59),
                ("c_L", 0.0104, 0.0110),
                ("delta_p", 0.1172, 0.1176),
            ],
            Self::Periodic => &[
                ("c_D,max", 3.22, 3.24),
                ("c_L,max", 0.99, 1.01),
                ("St", 0.295, 0.305),
            ],
        }
    }
}

/// The channel length over the diameter.
const LENGTH: f64 = 22.0;

/// A set-up at a resolution: the grid, the cylinder, the lattice speeds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cylinder {
    /// The case.
    pub case: Case,
    /// Cells per diameter `N`.
    pub resolution: usize,
    /// The peak inflow in lattice units.
    pub peak: f64,
}

impl Cylinder {
    /// The case at `resolution` cells per diameter (a multiple of 10, so that the channel's 4.1
    /// diameters are whole cells) with peak inflow `peak` in lattice units.
    pub fn new(case: Case, resolution: usize, peak: f64) -> Result<Self> {
        if resolution < 10 || !resolution.is_multiple_of(10) {
            return Err(Error::InvalidParameter(format!(
                "--resolution {resolution}: the channel is 4.1 diameters high, a whole number of cells \
                 only for a multiple of 10 cells per diameter; use 10, 20, 40 or 80"
            )));
        }
        if !(peak.is_finite() && peak > 0.0 && peak <= 0.15) {
            return Err(Error::InvalidParameter(format!(
                "--u-max {peak}: the peak inflow in lattice units must lie in (0, 0.15] (Mach 0.26); \
                 0.05 to 0.1 is usual, lower for accuracy"
            )));
        }
        let c = Self {
            case,
            resolution,
            peak,
        };
        // tau - 1/2 = 3 nu; below about 0.51 TRT is no longer stable at these speeds.
        let tau = c.tau();
        if tau < 0.51 {
            // The cells per diameter N that bring tau to 0.51, with nu = U N / Re.
            let need = (0.01 / 3.0 * case.reynolds() / c.mean_inflow()).ceil() as usize;
            return Err(Error::InvalidParameter(format!(
                "Re {} at {resolution} cells per diameter and --u-max {peak} gives tau = {tau:.4}, too \
                 close to 1/2 to be stable: use --resolution {} or more, or a higher --u-max",
                case.reynolds(),
                need.div_ceil(10) * 10
            )));
        }
        Ok(c)
    }

    /// The diameter in cells.
    pub fn diameter(&self) -> f64 {
        self.resolution as f64
    }

    /// The mean inflow `U = 2 U_m / 3` in lattice units.
    pub fn mean_inflow(&self) -> f64 {
        2.0 / 3.0 * self.peak
    }

    /// The relaxation time of the case's Reynolds number.
    pub fn tau(&self) -> f64 {
        Params::tau_for_viscosity(self.mean_inflow() * self.diameter() / self.case.reynolds())
    }

    /// The fluid cells along the channel and across it.
    fn fluid(&self) -> [usize; 2] {
        let n = self.resolution;
        [(LENGTH as usize) * n, 41 * n / 10]
    }

    /// The grid: the fluid with the inlet and outlet cells in x and the walls in y, one cell in z.
    pub fn dims(&self) -> [usize; 3] {
        let [l, h] = self.fluid();
        [l + 2, h + 2, 1]
    }

    /// Lattice coordinates of the physical point `(x, y)` in metres.
    pub fn point(&self, x: f64, y: f64) -> [f64; 2] {
        let scale = self.diameter() / 0.1;
        [0.5 + scale * x, 0.5 + scale * y]
    }

    /// The channel with the cylinder, its one body.
    pub fn geometry(&self) -> Result<Geometry> {
        let mut g = Geometry::open_channel(self.dims())?;
        g.add_obstacle(&Obstacle::Cylinder {
            centre: self.point(0.2, 0.2),
            radius: 0.5 * self.diameter(),
        })?;
        Ok(g)
    }

    /// The flow's parameters with `collision`: the parabolic inflow ramped up over `ramp` steps, the
    /// outlet at density 1.
    pub fn params(&self, collision: Collision, ramp: u64) -> Result<Params> {
        let h = self.fluid()[1] as f64;
        let p = Params {
            open: Open {
                velocity: [self.peak, 0.0, 0.0],
                parabola: [None, Some([0.5, 0.5 + h]), None],
                ramp,
                ..Open::NONE
            },
            collision,
            ..Params::bgk(self.tau())
        };
        p.check()?;
        Ok(p)
    }

    /// Steps for the mean inflow to pass one diameter: the time unit `D / U`.
    pub fn steps_per_time_unit(&self) -> f64 {
        self.diameter() / self.mean_inflow()
    }

    /// The drag and lift coefficients `2 F / (rho U^2 D)` of the force `f` on the cylinder (per cell
    /// of depth, the grid's one).
    pub fn coefficients(&self, f: [f64; 3]) -> [f64; 2] {
        let scale = 2.0 / (self.mean_inflow().powi(2) * self.diameter());
        [f[0] * scale, f[1] * scale]
    }

    /// The pressure difference between the cylinder's front and back points, (0.15, 0.2) and
    /// (0.25, 0.2), in the paper's units (Pa, `rho = 1`): each point's density extrapolated linearly
    /// from the two fluid nodes before it on the rows either side, `p = (rho - 1) / 3`.
    pub fn pressure_drop(&self, g: &Geometry, m: &Moments) -> Result<f64> {
        let [fx, y] = self.point(0.15, 0.2);
        let [bx, _] = self.point(0.25, 0.2);
        let front = surface_density(g, m, fx, y, -1)?;
        let back = surface_density(g, m, bx, y, 1)?;
        let lattice = (front - back) / 3.0;
        Ok(lattice * (self.case.peak_inflow() / self.peak).powi(2))
    }
}

/// The density at `(x, y)` on a body's surface, extrapolated from the fluid nodes met going from it
/// along `away` (-1: towards lower x) on rows `floor(y)` and `floor(y) + 1`, weighted by distance.
fn surface_density(g: &Geometry, m: &Moments, x: f64, y: f64, away: i64) -> Result<f64> {
    let y0 = y.floor();
    let mut sum = 0.0;
    for (row, weight) in [(y0, 1.0 - (y - y0)), (y0 + 1.0, y - y0)] {
        // The first node from the point along `away` whose neighbour further along is fluid too.
        let mut at = if away < 0 { x.floor() } else { x.ceil() } as i64;
        let fluid = |xi: i64| g.is_fluid(g.index([xi as usize, row as usize, 0]));
        while !fluid(at) {
            at += away;
            if at < 0 || at as usize >= m.dims[0] {
                return Err(Error::InvalidParameter(format!(
                    "no fluid node in row {row} beside x = {x}: the pressure points are not near the body"
                )));
            }
        }
        let (n0, n1) = (at, at + away);
        let rho = |xi: i64| m.rho[m.index([xi as usize, row as usize, 0])];
        // Linear through the two nodes, evaluated at x.
        let slope = (rho(n0) - rho(n1)) / (n0 - n1) as f64;
        sum += weight * (rho(n0) + slope * (x - n0 as f64));
    }
    Ok(sum)
}

/// The Strouhal number `f D / U` of a lift signal `(step, c_L)` in steps of `time_unit = D / U`: the
/// mean period between its last upward zero crossings (up to ten periods, interpolated linearly), or
/// `None` with fewer than two periods.
pub fn strouhal(samples: &[(f64, f64)], time_unit: f64) -> Option<f64> {
    let mean = samples.iter().map(|s| s.1).sum::<f64>() / samples.len().max(1) as f64;
    let crossings: Vec<f64> = samples
        .windows(2)
        .filter(|w| w[0].1 < mean && w[1].1 >= mean)
        .map(|w| w[0].0 + (mean - w[0].1) / (w[1].1 - w[0].1) * (w[1].0 - w[0].0))
        .collect();
    let last = &crossings[crossings.len().saturating_sub(11)..];
    (last.len() >= 3).then(|| {
        let period = (last[last.len() - 1] - last[0]) / (last.len() - 1) as f64;
        time_unit / period
    })
}

/// The largest values of `(step, c_D, c_L)` samples over their last `periods` lift periods (all of
/// them if fewer): `[c_D,max, c_L,max]`.
pub fn maxima(samples: &[[f64; 3]], period_steps: f64, periods: f64) -> [f64; 2] {
    let end = samples.last().map_or(0.0, |s| s[0]);
    let from = end - periods * period_steps;
    samples
        .iter()
        .filter(|s| s[0] >= from)
        .fold([f64::MIN, f64::MIN], |m, s| {
            [m[0].max(s[1]), m[1].max(s[2])]
        })
}

/// The relative error of a value against an interval: 0 inside, else the distance to its nearer end
/// over that end.
pub fn off_interval(v: f64, lo: f64, hi: f64) -> f64 {
    if v < lo {
        (lo - v) / lo
    } else if v > hi {
        (v - hi) / hi
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::f64::consts::PI;

    #[test]
    fn the_set_up_follows_the_paper() {
        let c = Cylinder::new(Case::Steady, 20, 0.1).unwrap();
        assert_eq!(c.dims(), [442, 84, 1]);
        assert_eq!(c.point(0.2, 0.2), [40.5, 40.5]);
        // Re = U D / nu = 20.
        let nu = (c.tau() - 0.5) / 3.0;
        assert!((c.mean_inflow() * 20.0 / nu - 20.0).abs() < 1e-12);
        let g = c.geometry().unwrap();
        assert_eq!(g.bodies().len(), 1);
        // A disc of radius 10 around a point at half-integer coordinates: 316 nodes (4 x 79).
        assert_eq!(g.bodies()[0].len(), 316);
        assert!(Cylinder::new(Case::Steady, 25, 0.1).is_err());
        let e = Cylinder::new(Case::Periodic, 10, 0.01)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--resolution"), "{e}");
    }

    #[test]
    fn a_sine_gives_its_strouhal_number() {
        let samples: Vec<(f64, f64)> = (0..5000)
            .map(|t| (t as f64, 0.3 + (2.0 * PI * t as f64 / 317.0).sin()))
            .collect();
        let st = strouhal(&samples, 100.0).unwrap();
        assert!((st - 100.0 / 317.0).abs() < 1e-4, "{st}");
        assert!(strouhal(&samples[..400], 100.0).is_none());
    }
}
