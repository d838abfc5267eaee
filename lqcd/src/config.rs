//! Gauge configurations to and from ILDG/LIME files, as [`GaugeField`]s.

use std::path::Path;

use nalgebra::Matrix3;
use num_complex::Complex64;

use crate::gauge::GaugeField;
use crate::ildg::{read_ildg, write_ildg, Precision, ScidacChecksum};
use crate::{Error, Result};

/// What a loaded file said about itself.
#[derive(Clone, Copy, Debug)]
pub struct LoadInfo {
    /// The precision the file stores.
    pub precision: Precision,
    /// The SciDAC checksum, if the file carries one (it was verified).
    pub checksum: Option<ScidacChecksum>,
    /// The largest deviation of a link from SU(3) as read (before any reunitarisation).
    pub su3_violation: f64,
}

/// Reads a gauge configuration. Links further than `max_violation` from SU(3) are an error (a file of
/// another convention or a corrupt one), unless `reunitarize` is set, which projects every link back.
pub fn load_gauge(
    path: &Path,
    reunitarize: bool,
    max_violation: f64,
) -> Result<(GaugeField, LoadInfo)> {
    let cfg = read_ildg(path)?;
    let links = cfg
        .links
        .chunks_exact(9)
        .map(Matrix3::from_row_slice)
        .collect();
    let mut u = GaugeField {
        dims: cfg.dims,
        links,
    };
    let violation = u.max_unitarity_violation();
    if reunitarize {
        u.reunitarize();
    } else if violation > max_violation {
        return Err(Error::GaugeFile {
            path: path.to_path_buf(),
            problem: format!(
                "links deviate from SU(3) by up to {violation:.2e} (allowed {max_violation:.0e}); the file may use another layout or be corrupt, or pass --reunitarize to project the links back"
            ),
        });
    }
    Ok((
        u,
        LoadInfo {
            precision: cfg.precision,
            checksum: cfg.checksum,
            su3_violation: violation,
        },
    ))
}

/// Writes `u` as an ILDG file (atomically: a temporary file renamed into place).
pub fn save_gauge(path: &Path, u: &GaugeField, precision: Precision) -> Result<()> {
    let data: Vec<Complex64> = u
        .links
        .iter()
        .flat_map(|m| (0..9).map(move |k| m[(k / 3, k % 3)]))
        .collect();
    write_ildg(path, u.dims, &data, precision)
}
