//! `lbm cylinder`: Schäfer and Turek's flow around a cylinder (2D-1, 2D-2), its drag and lift
//! coefficients as a time series (CSV and a PNG chart), the pressure difference across the cylinder and
//! the Strouhal number, each against the paper's interval.

use clap::{Args, ValueEnum};
use lattice_gpu_formats::chart::{write_series_png, Panel};
use lattice_gpu_formats::csv::{numbers, write_csv};
use lattice_gpu_host::comm::Communicator;
use lattice_gpu_lbm::schaefer_turek::{self as st, Case, Cylinder};
use lattice_gpu_lbm::{Error, LbmStorage, Result};

use super::{
    finish, make, more_than, prepare, release, resume, sampled, Boundaries, Checkpoints, Common,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum CaseArg {
    /// Re 20: steady; c_D, c_L and the pressure difference.
    #[value(name = "2d-1")]
    Steady,
    /// Re 100: vortex shedding; the largest c_D and c_L and the Strouhal number.
    #[value(name = "2d-2")]
    Periodic,
}

#[derive(Args)]
pub(super) struct CylinderArgs {
    #[command(flatten)]
    pub(super) common: Common,
    #[command(flatten)]
    boundaries: Boundaries,
    /// The paper's case.
    #[arg(long, value_enum, default_value_t = CaseArg::Steady)]
    case: CaseArg,
    /// Cells per cylinder diameter (a multiple of 10: the channel is 4.1 diameters high).
    #[arg(long, default_value_t = 20)]
    resolution: usize,
    /// The inflow's peak velocity in lattice units (lower: a smaller compressibility error, more
    /// steps).
    #[arg(long, allow_hyphen_values = true, default_value_t = 0.05)]
    u_max: f64,
    /// Simulated time in units of D / U, U the mean inflow [default: 2d-1 100, 2d-2 60].
    #[arg(long, allow_hyphen_values = true)]
    time: Option<f64>,
    /// Samples of the forces per unit of time D / U.
    #[arg(long, default_value_t = 25)]
    samples: u32,
}

/// The checkpoint array of the force samples: (step, c_D, c_L) triples.
const FORCES: &str = "forces";

/// The inflow's ramp, in units of D / U.
const RAMP: f64 = 2.0;

pub(super) fn cylinder<S: LbmStorage, C: Communicator>(a: &CylinderArgs, comm: C) -> Result<()> {
    let lead = comm.rank() == 0;
    let case = match a.case {
        CaseArg::Steady => Case::Steady,
        CaseArg::Periodic => Case::Periodic,
    };
    let cyl = Cylinder::new(case, a.resolution, a.u_max)?;
    let time = a.time.unwrap_or(match case {
        Case::Steady => 100.0,
        Case::Periodic => 60.0,
    });
    let unit = cyl.steps_per_time_unit();
    if !(time.is_finite() && time > RAMP) || a.samples == 0 {
        return Err(Error::InvalidParameter(format!(
            "--time {time} and --samples {}: the run must outlast the inflow's ramp ({RAMP} units of \
             D / U) and sample the forces at least once per unit",
            a.samples
        )));
    }
    let steps = (time * unit).round() as u64;
    let every = ((unit / a.samples as f64).round() as u64).max(1);
    let dims = cyl.dims();
    let run = prepare::<S, C>(&comm, &a.common, dims, "lower --resolution", 0)?;
    let mut g = cyl.geometry()?;
    let mut p = cyl.params(a.common.collision(), (RAMP * unit).round() as u64)?;
    a.boundaries.outlet(&mut p, unit)?;
    let mut params = a.common.physics::<S>("cylinder", dims, &p);
    params.push(("samples".into(), every.to_string()));
    a.boundaries.apply(&mut g, &mut params);
    let mut from = resume::<S, C, _>(&comm, &a.common, dims, &params, |ck, path| {
        more_than(ck.step, "--time", steps, path)?;
        let flat = ck.take::<f64>(FORCES, path)?;
        Ok(flat
            .chunks_exact(3)
            .map(|c| [c[0], c[1], c[2]])
            .collect::<Vec<_>>())
    })?;
    if lead {
        println!(
            "Schäfer-Turek {}: Re {}, {} cells per diameter, U_m {} (tau {:.4}), {steps} steps \
             ({time} D/U), forces every {every} steps",
            case.name(),
            case.reynolds(),
            a.resolution,
            a.u_max,
            cyl.tau()
        );
    }
    let init = |_| (1.0, [0.0; 3]);
    let mut lbm = make::<S, C, _>(
        comm,
        &a.common,
        &run.engine,
        g.clone(),
        p,
        init,
        from.as_mut(),
    )?;
    let rows = from.and_then(|r| r.resumed.taken).unwrap_or_default();
    let mut plan = Checkpoints::new(&a.common, params, lead);
    let rows = sampled(
        &mut lbm,
        &a.common,
        [steps, every],
        &mut plan,
        (FORCES, "raise --resolution or lower --u-max"),
        rows,
        |lbm| {
            let [cd, cl] = cyl.coefficients(lbm.forces()?[0]);
            Ok([lbm.steps() as f64, cd, cl])
        },
    )?;
    let m = lbm.moments()?;
    let (step, gpu) = (lbm.steps(), release(lbm));
    let Some(out) = run.out else {
        return Ok(());
    };
    let found = match case {
        Case::Steady => {
            let last = rows.last().expect("the run samples its last step");
            vec![last[1], last[2], cyl.pressure_drop(&g, &m)?]
        }
        Case::Periodic => {
            let lift: Vec<(f64, f64)> = rows.iter().map(|r| (r[0], r[2])).collect();
            let st = st::strouhal(&lift, unit).ok_or_else(|| {
                Error::InvalidParameter(format!(
                    "the lift did not oscillate for two periods in {time} units of D / U: give a longer \
                     --time"
                ))
            })?;
            let [cd, cl] = st::maxima(&rows, unit / st, 3.0);
            vec![cd, cl, st]
        }
    };
    for (&(name, lo, hi), v) in case.intervals().iter().zip(&found) {
        let off = st::off_interval(*v, lo, hi);
        let verdict = if off == 0.0 {
            "inside".to_string()
        } else {
            format!("{:.2}% outside", 100.0 * off)
        };
        println!("{name} = {v:.5} (Schäfer-Turek {lo}..{hi}: {verdict})");
    }
    let lines: Vec<Vec<String>> = rows
        .iter()
        .map(|r| numbers(&[r[0], r[0] / unit, r[1], r[2]]))
        .collect();
    write_csv(&out.file("forces.csv"), "step,time,c_d,c_l", &lines)?;
    let series =
        |k: usize| -> Vec<(f64, f64)> { rows.iter().map(|r| (r[0] / unit, r[k])).collect() };
    let (drag, lift) = (series(1), series(2));
    write_series_png(
        &out.file("forces.png"),
        &format!(
            "Schäfer-Turek {}, {} cells per diameter",
            case.name(),
            a.resolution
        ),
        "time (D / U)",
        &[Panel::new("c_D", &drag), Panel::new("c_L", &lift)],
    )?;
    let title = format!("Schäfer-Turek {} cylinder", case.name());
    finish(out, m, g.tags(), &title, step, &run.footprint, gpu)
}
