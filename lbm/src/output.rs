//! What a run leaves behind: the velocity and density as `.npy`, both in one legacy VTK file that
//! ParaView opens, a PNG of the speed on the middle z plane, and profiles as CSV. Every file is written
//! atomically: a killed run leaves the previous file or the new one, never half of one.

use std::io::Write;
use std::path::{Path, PathBuf};

use lattice_gpu_host::io::npy::write_npy;
use lattice_gpu_host::io::png::{write_png_scaled, ColorMap};
use lattice_gpu_host::io::vtk::{write_vtk, VtkField};
use lattice_gpu_host::io::{write_atomically, IoError};

use crate::solver::Moments;
use crate::Result;

/// Writes `velocity.npy` (shape `(nz, ny, nx, 3)`, f32), `density.npy` (`(nz, ny, nx)`), `fields.vtk`
/// and `speed.png` (the middle z plane, y up) into `dir`; returns the paths.
pub fn write_fields(dir: &Path, m: &Moments, title: &str) -> Result<Vec<PathBuf>> {
    let [nx, ny, nz] = m.dims;
    let u: Vec<[f32; 3]> = m.u.iter().map(|v| v.map(|c| c as f32)).collect();
    let rho: Vec<f32> = m.rho.iter().map(|&r| r as f32).collect();
    let flat: Vec<f32> = u.iter().flatten().copied().collect();
    let paths = ["velocity.npy", "density.npy", "fields.vtk", "speed.png"].map(|f| dir.join(f));
    write_npy(&paths[0], &[nz, ny, nx, 3], &flat)?;
    write_npy(&paths[1], &[nz, ny, nx], &rho)?;
    write_vtk(
        &paths[2],
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
        ],
    )?;
    let z = nz / 2;
    let speed: Vec<f64> = (0..nx * ny)
        .map(|i| {
            let v = m.u[z * nx * ny + i];
            (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt()
        })
        .collect();
    write_png_scaled(&paths[3], nx, ny, &speed, None, ColorMap::Viridis, 256)?;
    Ok(paths.to_vec())
}

/// Writes a CSV file: a header line, then one line per row, values joined by commas.
pub fn write_csv(path: &Path, header: &str, rows: &[Vec<String>]) -> Result<(), IoError> {
    write_atomically(path, |w: &mut dyn Write| {
        writeln!(w, "{header}")?;
        for r in rows {
            writeln!(w, "{}", r.join(","))?;
        }
        Ok(())
    })
}

/// Numbers as CSV fields, with enough digits to read them back as f64 would round them for plots.
pub fn numbers(values: &[f64]) -> Vec<String> {
    values.iter().map(|v| format!("{v:.9e}")).collect()
}
