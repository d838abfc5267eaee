//! What a run leaves behind: the velocity and density as `.npy`, both in one legacy VTK file that
//! ParaView opens, a PNG of the speed on the middle z plane, and profiles as CSV. The run's files go
//! into a staged output directory ([`OutputDir`]) that the binary commits once all are written: a run
//! that fails or is stopped half-way leaves the previous files, never some new beside some old; and
//! every file is written atomically.

use lattice_gpu_formats::npy::write_npy;
use lattice_gpu_formats::png::{write_field_png, Axis, Picture};
use lattice_gpu_formats::vtk::{write_vtk, VtkField};
use lattice_gpu_formats::OutputDir;
use lattice_gpu_host::health::first_non_finite;
use lattice_gpu_kernels::lbm::tag;

use crate::solver::{non_finite_at, Moments};
use crate::{Error, Result};

/// The files [`write_fields`] writes.
pub const FIELD_FILES: [&str; 4] = ["velocity.npy", "density.npy", "fields.vtk", "speed.png"];

/// A cell's kind as the VTK file's `cell_type` holds it: 0 fluid, 1 resting wall (a body's cells
/// among them), 2 moving wall, 3 inlet, 4 outlet, 5 free-slip wall; ParaView's Threshold at 1 to 1
/// shows the bodies.
pub fn cell_type(t: u8) -> f32 {
    match t & !tag::NEAR_WALL {
        tag::WALL => 1.0,
        tag::MOVING_WALL => 2.0,
        tag::INLET => 3.0,
        tag::OUTLET => 4.0,
        t if t & tag::SLIP != 0 => 5.0,
        _ => 0.0,
    }
}

/// Writes `velocity.npy` (shape `(nz, ny, nx, 3)`, f32), `density.npy` (`(nz, ny, nx)`), `fields.vtk`
/// (with the cells' kinds from `tags` as the scalar `cell_type`, see [`cell_type`]) and `speed.png`
/// (the middle z plane, y up, titled with the case `title` and the `step`) into the staged `out`.
/// Refuses moments with a NaN or an infinity, which are no result.
pub fn write_fields(
    out: &OutputDir,
    m: &Moments,
    tags: &[u8],
    title: &str,
    step: u64,
) -> Result<()> {
    let [nx, ny, nz] = m.dims;
    let cells = m.rho.len() as u64;
    let bad = first_non_finite(&m.rho).map(|i| i as u64).or_else(|| {
        first_non_finite(m.u.as_flattened()).map(|i| (1 + i % 3) as u64 * cells + i as u64 / 3)
    });
    if let Some(i) = bad {
        let (what, at) = non_finite_at(m.dims, i);
        return Err(Error::InvalidParameter(format!(
            "{what} is not finite at {at}: the flow diverged, so nothing was written; raise tau or \
             lower the speeds"
        )));
    }
    // The f32 copies are what the files hold; the vectors are written from them as flat triples.
    let u: Vec<[f32; 3]> = m.u.iter().map(|v| v.map(|c| c as f32)).collect();
    let rho: Vec<f32> = m.rho.iter().map(|&r| r as f32).collect();
    let path = |i: usize| out.file(FIELD_FILES[i]);
    write_npy(&path(0), &[nz, ny, nx, 3], u.as_flattened())?;
    write_npy(&path(1), &[nz, ny, nx], &rho)?;
    write_vtk(
        &path(2),
        m.dims,
        title,
        &[
            VtkField::Vectors {
                name: "velocity",
                data: &u,
            },
            VtkField::Scalars {
                name: "density",
                data: &rho,
            },
            VtkField::Scalars {
                name: "cell_type",
                data: &tags.iter().map(|&t| cell_type(t)).collect::<Vec<_>>(),
            },
        ],
    )?;
    let z = nz / 2;
    let speed: Vec<f64> = (0..nx * ny)
        .map(|i| {
            let v = m.u[z * nx * ny + i];
            (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt()
        })
        .collect();
    // Cell centres at 0, 1, 2, ... lattice units.
    let picture = Picture::new(
        format!("{title} {nx}×{ny}×{nz}: speed |u| at z = {z}, step {step}"),
        "|u| (lattice units)",
        Axis::cells("x (lattice units)", 0.0, 1.0, nx),
        Axis::cells("y (lattice units)", 0.0, 1.0, ny),
    );
    write_field_png(&path(3), nx, ny, &speed, &picture)?;
    Ok(())
}
