//! `lbm obstacle`: the flow around a body in a numerical wind tunnel (inlet at `x = 0`, outlet at
//! `x = nx - 1`), the body a built-in shape, a voxel mask (`.npy`) or an STL surface; its drag and lift
//! as a time series (CSV and a PNG chart) and, where the lift oscillates, the Strouhal number.

use std::path::PathBuf;

use clap::{ArgGroup, Args, ValueEnum};
use lattice_gpu_cli::parse_size3;
use lattice_gpu_formats::chart::{write_series_png, Panel};
use lattice_gpu_formats::csv::{numbers, write_csv};
use lattice_gpu_formats::npy::{read_npy_mask, read_npy_mask_shape};
use lattice_gpu_formats::stl::read_stl;
use lattice_gpu_host::comm::Communicator;
use lattice_gpu_host::engine::tunecache::fnv1a64;
use lattice_gpu_lbm::geometry::{Obstacle, Sides};
use lattice_gpu_lbm::schaefer_turek::strouhal;
use lattice_gpu_lbm::tunnel::{Body, Profile, Tunnel};
use lattice_gpu_lbm::voxelise::{voxelise, Placement, Surface};
use lattice_gpu_lbm::{Error, Geometry, LbmStorage, Result};

use super::{
    finish, make, more_than, prepare, release, resume, sampled, Boundaries, Checkpoints, Common,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum SidesArg {
    /// Periodic in y and z: the body in a row of its copies, the nearest to a free stream.
    Periodic,
    /// Walls at the y ends, periodic in z.
    WallsY,
    /// Walls at the y and z ends: a duct.
    Walls,
    /// Free-slip walls at the y and z ends: no boundary layer on the tunnel's sides.
    Slip,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum ProfileArg {
    Uniform,
    /// Parabolic between the walls (needs --sides walls or walls-y).
    Parabolic,
}

#[derive(Args)]
#[command(group(ArgGroup::new("body").required(true).args(["sphere", "cylinder", "cuboid", "stl", "mask"])))]
pub(super) struct ObstacleArgs {
    #[command(flatten)]
    pub(super) common: Common,
    #[command(flatten)]
    boundaries: Boundaries,
    /// Grid NXxNYxNZ, the inlet, outlet and walls included [default: 256x128x128; with --mask, the
    /// mask's shape].
    #[arg(long, value_parser = parse_size3, conflicts_with = "mask")]
    pub(super) size: Option<[usize; 3]>,
    /// A sphere X,Y,Z,R (lattice units: cell [x, y, z] has its node at (x, y, z)).
    #[arg(long, value_parser = numbers_of::<4>, allow_hyphen_values = true)]
    sphere: Option<[f64; 4]>,
    /// A cylinder along z through the grid, X,Y,R.
    #[arg(long, value_parser = numbers_of::<3>, allow_hyphen_values = true)]
    cylinder: Option<[f64; 3]>,
    /// A box X0,Y0,Z0,X1,Y1,Z1 (its nodes from the low corner to the high one).
    #[arg(long = "box", value_parser = numbers_of::<6>, allow_hyphen_values = true)]
    cuboid: Option<[f64; 6]>,
    /// A closed surface (STL, binary or ASCII), scaled to --body-size and placed at --centre.
    #[arg(long, value_name = "FILE")]
    stl: Option<PathBuf>,
    /// The STL's longest side in cells [default: a quarter of the grid's y side].
    #[arg(long, allow_hyphen_values = true)]
    body_size: Option<f64>,
    /// Where the STL's bounding box is centred, X,Y,Z [default: a quarter along x, centred across].
    #[arg(long, value_parser = numbers_of::<3>, allow_hyphen_values = true)]
    centre: Option<[f64; 3]>,
    /// A voxel mask (.npy of bool or uint8, shape (nz, ny, nx)): the body's cells are those not 0;
    /// its shape is the grid's.
    #[arg(long, value_name = "FILE.npy")]
    mask: Option<PathBuf>,
    /// The tunnel's sides across the flow.
    #[arg(long, value_enum, default_value_t = SidesArg::Periodic)]
    sides: SidesArg,
    /// The inflow's profile.
    #[arg(long, value_enum, default_value_t = ProfileArg::Uniform)]
    profile: ProfileArg,
    /// The inflow's peak velocity in lattice units.
    #[arg(long, allow_hyphen_values = true, default_value_t = 0.05)]
    u_in: f64,
    /// Reynolds number U L / nu (U the mean inflow, L the body's extent in y in cells).
    #[arg(
        long,
        allow_hyphen_values = true,
        default_value_t = 100.0,
        conflicts_with = "tau"
    )]
    re: f64,
    /// Relaxation time instead of --re (the Reynolds number then follows from it).
    #[arg(long, allow_hyphen_values = true)]
    tau: Option<f64>,
    /// Steps in all (a resumed run continues to this step).
    #[arg(long, default_value_t = 10_000)]
    steps: u64,
    /// Steps between samples of the forces.
    #[arg(long, default_value_t = 100)]
    force_every: u64,
}

/// `A,B,C`: `N` comma-separated numbers.
fn numbers_of<const N: usize>(s: &str) -> std::result::Result<[f64; N], String> {
    let v: Vec<f64> = s
        .split(',')
        .map(|t| t.trim().parse::<f64>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| format!("`{s}` must be {N} comma-separated numbers"))?;
    v.try_into()
        .map_err(|_| format!("`{s}` must be {N} comma-separated numbers, not another count"))
}

/// The checkpoint array of the force samples: (step, F_x, F_y, F_z) quadruples.
const FORCES: &str = "forces";

/// The inflow's ramp, in units of L / U.
const RAMP: f64 = 2.0;

impl ObstacleArgs {
    /// The grid: --size, the mask's shape, or the default.
    pub(super) fn dims(&self) -> Result<[usize; 3]> {
        match (&self.mask, self.size) {
            (Some(path), _) => match read_npy_mask_shape(path)?.as_slice() {
                &[nz, ny, nx] => Ok([nx, ny, nz]),
                other => Err(Error::InvalidParameter(format!(
                    "--mask {}: a mask of {} axes; give one of shape (nz, ny, nx)",
                    path.display(),
                    other.len()
                ))),
            },
            (None, Some(s)) => Ok(s),
            (None, None) => Ok([256, 128, 128]),
        }
    }

    fn sides(&self) -> Sides {
        match self.sides {
            SidesArg::Periodic => Sides::Periodic,
            SidesArg::WallsY => Sides::WallsY,
            SidesArg::Walls => Sides::Walls,
            SidesArg::Slip => Sides::Slip,
        }
    }

    /// The built-in shape given (--sphere, --cylinder, --box), if one is.
    fn shape(&self) -> Option<Obstacle> {
        if let Some([x, y, z, r]) = self.sphere {
            Some(Obstacle::Sphere {
                centre: [x, y, z],
                radius: r,
            })
        } else if let Some([x, y, r]) = self.cylinder {
            Some(Obstacle::Cylinder {
                centre: [x, y],
                radius: r,
            })
        } else {
            self.cuboid
                .map(|[x0, y0, z0, x1, y1, z1]| Obstacle::Cuboid {
                    lo: [x0, y0, z0],
                    hi: [x1, y1, z1],
                })
        }
    }

    /// The tunnel with the body in it, and what names the body in the checkpoint; prints a warning
    /// for an STL surface that is not closed (rank 0: `lead`).
    fn geometry(&self, tunnel: &Tunnel, lead: bool) -> Result<(Geometry, String)> {
        let mut g = tunnel.geometry()?;
        let dims = tunnel.dims;
        if let Some(o) = self.shape() {
            g.add_obstacle(&o)?;
            return Ok((g, format!("{o:?}")));
        }
        let (mask, name, surface) = if let Some(path) = &self.stl {
            let mesh = read_stl(path)?;
            let at = Placement {
                centre: self.centre.unwrap_or([
                    dims[0] as f64 / 4.0,
                    (dims[1] as f64 - 1.0) / 2.0,
                    (dims[2] as f64 - 1.0) / 2.0,
                ]),
                size: self.body_size.unwrap_or(dims[1] as f64 / 4.0),
            };
            let v = voxelise(&mesh, dims, &at)?;
            // Where the surface cuts the links, for interpolated bounce-back.
            let surface = Surface::new(&mesh, dims, &at);
            if lead && v.open_edges > 0 {
                eprintln!(
                    "warning: {} is not closed ({} open edges); every cell's inside or outside was \
                     still clear",
                    path.display(),
                    v.open_edges
                );
            }
            let name = format!("stl {} at {:?} size {}", path.display(), at.centre, at.size);
            (v.mask, name, Some(surface))
        } else if let Some(path) = &self.mask {
            let [nx, ny, nz] = dims;
            let mask = read_npy_mask(path, &[nz, ny, nx])?;
            (mask, format!("mask {}", path.display()), None)
        } else {
            return Err(Error::InvalidParameter(
                "no body: give --sphere, --cylinder, --box, --stl or --mask".into(),
            ));
        };
        let cells = match &surface {
            Some(s) => g.add_body(&mask, |b, q| s.cut(b, q))?,
            None => g.add_mask(&mask)?,
        };
        if cells == 0 {
            return Err(Error::InvalidParameter(format!(
                "{name} holds no cell of the grid: give a larger --body-size, or a mask with cells set"
            )));
        }
        Ok((g, name))
    }
}

pub(super) fn obstacle<S: LbmStorage, C: Communicator>(a: &ObstacleArgs, comm: C) -> Result<()> {
    let lead = comm.rank() == 0;
    let dims = a.dims()?;
    if a.stl.is_none() && (a.body_size.is_some() || a.centre.is_some()) {
        return Err(Error::InvalidParameter(
            "--body-size and --centre place an STL surface, and no --stl is given: give --stl FILE, \
             or place the shape with its own numbers (e.g. --sphere X,Y,Z,R)"
                .into(),
        ));
    }
    if a.steps == 0 || a.force_every == 0 {
        return Err(Error::InvalidParameter(
            "--steps and --force-every must be at least 1".into(),
        ));
    }
    let profile = match a.profile {
        ProfileArg::Uniform => Profile::Uniform,
        ProfileArg::Parabolic => Profile::Parabolic,
    };
    let tunnel = Tunnel::new(dims, a.sides(), profile, a.u_in)?;
    let run = prepare::<S, C>(&comm, &a.common, dims, "use a smaller --size", 0)?;
    let (mut g, name) = a.geometry(&tunnel, lead)?;
    let body = Body::of(&g, 0);
    let u = tunnel.mean_inflow();
    let tau = match a.tau {
        Some(tau) => tau,
        None => body.tau_for(a.re, u)?,
    };
    let re = u * body.extent[1] as f64 / ((tau - 0.5) / 3.0);
    let unit = body.extent[1] as f64 / u;
    let mut p = tunnel.params(tau, a.common.collision(), (RAMP * unit).round() as u64)?;
    a.boundaries.outlet(&mut p, unit)?;
    let mut params = a.common.physics::<S>("obstacle", dims, &p);
    params.extend([
        // The body itself is in the tags' hash; its description may hold whitespace, which a
        // checkpoint's parameters may not.
        (
            "body".to_string(),
            name.split_whitespace().next().unwrap_or("").to_lowercase(),
        ),
        ("tags".into(), format!("{:016x}", fnv1a64(g.tags()))),
        ("force-every".into(), a.force_every.to_string()),
    ]);
    a.boundaries.apply(&mut g, &mut params);
    let mut from = resume::<S, C, _>(&comm, &a.common, dims, &params, |ck, path| {
        more_than(ck.step, "--steps", a.steps, path)?;
        let flat = ck.take::<f64>(FORCES, path)?;
        Ok(flat
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect::<Vec<_>>())
    })?;
    if lead {
        println!(
            "{name}: {} cells, frontal area {} cells, {} across; Re {re:.4}, mean inflow {u:.4} \
             (tau {tau:.5}); {} steps ({:.1} L/U), forces every {}",
            g.bodies()[0].len(),
            body.frontal_area,
            body.extent[1],
            a.steps,
            a.steps as f64 / unit,
            a.force_every
        );
    }
    let init = |_| (1.0, [0.0; 3]);
    let tags = g.tags().to_vec();
    let fix = "raise --tau (lower --re) or lower --u-in";
    let mut lbm = make::<S, C, _>(comm, &a.common, &run.engine, g, p, init, from.as_mut())?;
    let rows = from.and_then(|r| r.resumed.taken).unwrap_or_default();
    let mut plan = Checkpoints::new(&a.common, params, lead);
    let rows = sampled(
        &mut lbm,
        &a.common,
        [a.steps, a.force_every],
        &mut plan,
        (FORCES, fix),
        rows,
        |lbm| {
            let [fx, fy, fz] = lbm.forces()?[0];
            Ok([lbm.steps() as f64, fx, fy, fz])
        },
    )?;
    let m = lbm.moments()?;
    let (step, gpu) = (lbm.steps(), release(lbm));
    let Some(out) = run.out else {
        return Ok(());
    };
    let coefficients: Vec<[f64; 4]> = rows
        .iter()
        .map(|r| {
            let [cd, cy, cz] = body.coefficients([r[1], r[2], r[3]], u);
            [r[0] / unit, cd, cy, cz]
        })
        .collect();
    let last = coefficients.last().expect("the run samples its last step");
    let tail = &coefficients[coefficients.len() * 3 / 4..];
    let mean = tail.iter().map(|c| c[1]).sum::<f64>() / tail.len() as f64;
    println!(
        "c_D = {:.5} at the last step, {mean:.5} averaged over the last quarter of the run; \
         c_L = {:.5} (y), {:.5} (z)",
        last[1], last[2], last[3]
    );
    let lift: Vec<(f64, f64)> = rows
        .iter()
        .zip(&coefficients)
        .map(|(r, c)| (r[0], c[2]))
        .collect();
    // A steady wake's lift is rounding: its zero crossings are no shedding.
    let half = &coefficients[coefficients.len() / 2..];
    let (lo, hi) = half.iter().fold((f64::MAX, f64::MIN), |(lo, hi), c| {
        (lo.min(c[2]), hi.max(c[2]))
    });
    match strouhal(&lift[lift.len() / 2..], unit) {
        Some(st) if hi - lo > 1e-3 * mean.abs() => {
            println!("St = {st:.4} from the lift along y over the run's second half")
        }
        _ => println!("the lift along y does not oscillate: no Strouhal number"),
    }
    let lines: Vec<Vec<String>> = rows
        .iter()
        .zip(&coefficients)
        .map(|(r, c)| numbers(&[r[0], c[0], r[1], r[2], r[3], c[1], c[2], c[3]]))
        .collect();
    write_csv(
        &out.file("forces.csv"),
        "step,time,f_x,f_y,f_z,c_d,c_l_y,c_l_z",
        &lines,
    )?;
    let series =
        |k: usize| -> Vec<(f64, f64)> { coefficients.iter().map(|c| (c[0], c[k])).collect() };
    let (drag, ly, lz) = (series(1), series(2), series(3));
    write_series_png(
        &out.file("forces.png"),
        &format!("{name}, Re {re:.1}"),
        "time (L / U)",
        &[
            Panel::new("c_D", &drag),
            Panel::new("c_L (y)", &ly),
            Panel::new("c_L (z)", &lz),
        ],
    )?;
    finish(
        out,
        m,
        &tags,
        "flow around a body",
        step,
        &run.footprint,
        gpu,
    )
}
