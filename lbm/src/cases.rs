//! The validation cases: lid-driven cavity (against Ghia, Ghia and Shin 1982), Poiseuille channel
//! (against the parabola) and the decaying Taylor-Green vortex (against `exp(-2 nu k^2 t)`), as set-ups
//! and measurements the binary, the tests and the benchmarks share.

use std::f64::consts::PI;

use crate::geometry::Geometry;
use crate::params::{Collision, Open, Params, MAX_SPEED};
use crate::solver::{max_or_nan, Moments};
use crate::{Error, Result};

/// A lid-driven cavity of `dims` cells (walls included) at Reynolds number `re = U L / nu` with lid
/// speed `lid` along +x; `L` is the fluid width in x. Closed in z (3-D) or periodic in z (quasi-2-D).
pub fn cavity(
    dims: [usize; 3],
    closed_z: bool,
    re: f64,
    lid: f64,
    collision: Collision,
) -> Result<(Geometry, Params)> {
    let geometry = Geometry::cavity(dims, closed_z)?;
    if !(re.is_finite() && re > 0.0) {
        return Err(Error::InvalidParameter(format!(
            "the Reynolds number {re} must be positive"
        )));
    }
    // The centreline profiles and Ghia's table are for a lid moving along +x.
    if !(lid.is_finite() && lid > 0.0) {
        return Err(Error::InvalidParameter(format!(
            "the lid speed {lid} must be positive (the lid moves along +x); 0.1 is usual"
        )));
    }
    let length = (dims[0] - 2) as f64;
    let params = Params {
        tau: Params::tau_for_viscosity(lid * length / re),
        collision,
        force: [0.0; 3],
        wall_velocity: [lid, 0.0, 0.0],
        open: Open::NONE,
    };
    params.check()?;
    Ok((geometry, params))
}

/// A velocity profile: (position in [0, 1], value) pairs, sorted by position.
pub type Profile = Vec<(f64, f64)>;

/// The two centreline profiles of a cavity, normalised by the lid speed and the cavity size:
/// `u(y) / U` on the vertical centreline and `v(x) / U` on the horizontal one, each as
/// (position in [0, 1], value), walls included (the lid gives `u = 1` at `y = 1`). Cells of an even
/// count straddle the centre: the two middle ones are averaged. The z position is the middle.
pub fn centrelines(m: &Moments, lid: f64) -> (Profile, Profile) {
    let [nx, ny, nz] = m.dims;
    // With halfway walls, fluid cell i (1..=n-2) sits at (i - 1/2) / (n - 2).
    let mid = |n: usize| {
        if n % 2 == 1 {
            (n / 2, n / 2)
        } else {
            (n / 2 - 1, n / 2)
        }
    };
    let (x0, x1) = mid(nx);
    let (y0, y1) = mid(ny);
    let z = nz / 2;
    let at = |x: usize, y: usize, a: usize| m.u[m.index([x, y, z])][a] / lid;
    let mut u = vec![(0.0, 0.0)];
    for y in 1..ny - 1 {
        u.push((
            (y as f64 - 0.5) / (ny - 2) as f64,
            0.5 * (at(x0, y, 0) + at(x1, y, 0)),
        ));
    }
    u.push((1.0, 1.0));
    let mut v = vec![(0.0, 0.0)];
    for x in 1..nx - 1 {
        v.push((
            (x as f64 - 0.5) / (nx - 2) as f64,
            0.5 * (at(x, y0, 1) + at(x, y1, 1)),
        ));
    }
    v.push((1.0, 0.0));
    (u, v)
}

/// Ghia, Ghia and Shin (1982), Re = 100: `u / U` on the vertical centreline, (y, u).
pub const GHIA_RE100_U: [(f64, f64); 17] = [
    (0.0000, 0.00000),
    (0.0547, -0.03717),
    (0.0625, -0.04192),
    (0.0703, -0.04775),
    (0.1016, -0.06434),
    (0.1719, -0.10150),
    (0.2813, -0.15662),
    (0.4531, -0.21090),
    (0.5000, -0.20581),
    (0.6172, -0.13641),
    (0.7344, 0.00332),
    (0.8516, 0.23151),
    (0.9531, 0.68717),
    (0.9609, 0.73722),
    (0.9688, 0.78871),
    (0.9766, 0.84123),
    (1.0000, 1.00000),
];

/// Ghia, Ghia and Shin (1982), Re = 100: `v / U` on the horizontal centreline, (x, v).
pub const GHIA_RE100_V: [(f64, f64); 17] = [
    (0.0000, 0.00000),
    (0.0625, 0.09233),
    (0.0703, 0.10091),
    (0.0781, 0.10890),
    (0.0938, 0.12317),
    (0.1563, 0.16077),
    (0.2266, 0.17507),
    (0.2344, 0.17527),
    (0.5000, 0.05454),
    (0.8047, -0.24533),
    (0.8594, -0.22445),
    (0.9063, -0.16914),
    (0.9453, -0.10313),
    (0.9531, -0.08864),
    (0.9609, -0.07391),
    (0.9688, -0.05906),
    (1.0000, 0.00000),
];

/// The largest difference between `profile` (sorted by position), interpolated linearly, and the
/// published points `data`; NaN where the profile holds one.
pub fn profile_error(profile: &[(f64, f64)], data: &[(f64, f64)]) -> f64 {
    data.iter()
        .map(|&(s, want)| (interpolate(profile, s) - want).abs())
        .fold(0.0, max_or_nan)
}

fn interpolate(profile: &[(f64, f64)], s: f64) -> f64 {
    let i = profile
        .partition_point(|p| p.0 < s)
        .clamp(1, profile.len() - 1);
    let ((s0, v0), (s1, v1)) = (profile[i - 1], profile[i]);
    v0 + (v1 - v0) * (s - s0) / (s1 - s0)
}

/// A body-force-driven channel `width` fluid cells across (walls at `y = 0` and `y = width + 1`),
/// `length` cells in x and `depth` in z, both periodic, with force `force` along x.
pub fn poiseuille(
    width: usize,
    length: usize,
    depth: usize,
    tau: f64,
    force: f64,
    collision: Collision,
) -> Result<(Geometry, Params)> {
    let geometry = Geometry::channel([length, width + 2, depth])?;
    let params = Params {
        tau,
        collision,
        force: [force, 0.0, 0.0],
        wall_velocity: [0.0; 3],
        open: Open::NONE,
    };
    params.check()?;
    let peak = poiseuille_profile(&params, width + 2, (width + 2) / 2).abs();
    if peak > MAX_SPEED {
        return Err(Error::InvalidParameter(format!(
            "the channel's peak speed F H^2 / (8 nu) = {peak:.4} is above Mach 0.3 ({MAX_SPEED:.4}); \
             lower the force or the width, or raise tau"
        )));
    }
    Ok((geometry, params))
}

/// The analytic Poiseuille velocity at cell row `y` of a channel of `ny` rows (walls halfway between
/// rows 0 and 1 and between rows `ny - 2` and `ny - 1`): `F / (2 nu) (y - 1/2)(ny - 3/2 - y)`.
pub fn poiseuille_profile(params: &Params, ny: usize, y: usize) -> f64 {
    let y = y as f64;
    params.force[0] / (2.0 * params.viscosity()) * (y - 0.5) * (ny as f64 - 1.5 - y)
}

/// The relative L2 error of the x velocity against [`poiseuille_profile`] over every fluid cell.
pub fn poiseuille_error(m: &Moments, params: &Params) -> f64 {
    let [nx, ny, nz] = m.dims;
    let (mut num, mut den) = (0.0, 0.0);
    for z in 0..nz {
        for y in 1..ny - 1 {
            let want = poiseuille_profile(params, ny, y);
            for x in 0..nx {
                let got = m.u[m.index([x, y, z])][0];
                num += (got - want) * (got - want);
                den += want * want;
            }
        }
    }
    (num / den).sqrt()
}

/// The decaying Taylor-Green vortex in the xy plane of a periodic `dims` box: one period per side,
/// amplitude `u0`, the pressure (density) of the nonlinear solution.
pub fn taylor_green(dims: [usize; 3], u0: f64) -> Result<impl Fn(usize) -> (f64, [f64; 3]) + Sync> {
    let [nx, ny, _] = dims;
    // Sampled at fewer than 4 points a period, the sines vanish at every cell (or nearly).
    if nx < 4 || ny < 4 {
        return Err(Error::InvalidParameter(format!(
            "the Taylor-Green vortex spans the grid once along x and y, and {nx}x{ny} cells cannot \
             resolve it; give at least 4 cells along each, e.g. --size 32x32x1"
        )));
    }
    // A vortex at rest has no energy to decay: its rate would be 0/0.
    if !(u0.is_finite() && u0 > 0.0) {
        return Err(Error::InvalidParameter(format!(
            "the Taylor-Green amplitude {u0} must be a positive speed: the decay rate is measured on \
             the vortex's kinetic energy, which needs one; give --u0 0.02 (or anything up to 0.05)"
        )));
    }
    if u0 * (1.0 + nx as f64 / ny as f64) > MAX_SPEED {
        return Err(Error::InvalidParameter(format!(
            "the Taylor-Green amplitude {u0} gives speeds above Mach 0.3 ({MAX_SPEED:.4}); use 0.05 or less"
        )));
    }
    let (kx, ky) = (2.0 * PI / nx as f64, 2.0 * PI / ny as f64);
    Ok(move |n: usize| {
        let (x, y) = ((n % nx) as f64, ((n / nx) % ny) as f64);
        let u = u0 * (kx * x).sin() * (ky * y).cos();
        let v = -u0 * (kx / ky) * (kx * x).cos() * (ky * y).sin();
        let p = u0 * u0 / 4.0 * ((2.0 * kx * x).cos() + (kx / ky).powi(2) * (2.0 * ky * y).cos());
        (1.0 + 3.0 * p, [u, v, 0.0])
    })
}

/// The analytic decay rate of the Taylor-Green kinetic energy, `2 nu (kx^2 + ky^2)`.
pub fn taylor_green_rate(dims: [usize; 3], params: &Params) -> f64 {
    let k2 = (2.0 * PI / dims[0] as f64).powi(2) + (2.0 * PI / dims[1] as f64).powi(2);
    2.0 * params.viscosity() * k2
}

/// Whether a flow has stopped changing: the largest change of any velocity component between two
/// snapshots, relative to the largest speed, is below `tol`. Never for a flow with a NaN or an
/// infinity: a diverged flow is not a steady one.
pub fn is_steady(before: &Moments, after: &Moments, tol: f64) -> bool {
    let change = before
        .u
        .iter()
        .zip(&after.u)
        .flat_map(|(a, b)| (0..3).map(move |i| (a[i] - b[i]).abs()))
        .fold(0.0, max_or_nan);
    let speed = after.max_speed();
    change.is_finite() && speed.is_finite() && change <= tol * speed.max(f64::MIN_POSITIVE)
}
