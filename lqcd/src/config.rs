//! Gauge configurations to and from ILDG/LIME files, as [`GaugeField`]s.

use std::path::Path;

use nalgebra::Matrix3;
use num_complex::Complex64;

use crate::gauge::{link_name, su3_violation, GaugeField, Su3};
use crate::ildg::{write_ildg_sites, IldgReader, Precision, ScidacChecksum};
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

/// The extents and precision of the configuration in `path`, from its format record alone: what a
/// caller needs to size the memory of a load before it starts.
pub fn gauge_dims(path: &Path) -> Result<([usize; 4], Precision)> {
    let r = IldgReader::open(path)?;
    Ok((r.dims, r.precision))
}

/// Reads a gauge configuration. A link with a NaN or infinite entry is an error naming its site and
/// direction (a file without a checksum record has nothing else to catch a damaged one). Links further
/// than `max_violation` from SU(3) are an error (a file of another convention or a corrupt one),
/// unless `reunitarize` is set, which projects every link back.
///
/// The links go straight from the file into the field, so the load holds one copy of the field.
pub fn load_gauge(
    path: &Path,
    reunitarize: bool,
    max_violation: f64,
) -> Result<(GaugeField, LoadInfo)> {
    let reader = IldgReader::open(path)?;
    let (dims, precision) = (reader.dims, reader.precision);
    let bad = |problem: String| Error::GaugeFile {
        path: path.to_path_buf(),
        problem,
    };
    let n_links = usize::try_from(reader.volume())
        .ok()
        .and_then(|v| v.checked_mul(4))
        .ok_or_else(|| bad("the lattice is too large for this machine's memory".into()))?;
    let mut links: Vec<Su3> = Vec::new();
    links.try_reserve_exact(n_links).map_err(|_| {
        bad(format!(
            "cannot allocate memory for the {n_links} links of {dims:?}"
        ))
    })?;
    let unchecked = match reader.stored_checksum() {
        None => " (the file has no checksum record that could have told)",
        Some(_) => "",
    };
    let checksum = reader.read_sites(|rank, site| {
        for (mu, m) in site.chunks_exact(9).enumerate() {
            if let Some(z) = m.iter().find(|z| !(z.re.is_finite() && z.im.is_finite())) {
                return Err(bad(format!(
                    "the link at {} has the entry {z}, which is not a finite number, so the \
                     configuration is damaged{unchecked}; re-copy or regenerate it",
                    link_name(dims, rank as usize, mu),
                )));
            }
            links.push(Matrix3::from_row_slice(m));
        }
        Ok(())
    })?;
    let mut u = GaugeField { dims, links };
    let violation = u.max_unitarity_violation();
    if reunitarize {
        u.reunitarize();
        // A link whose rows are zero, parallel or too large to square has no projection: it comes
        // back with zero or NaN rows, which no later check would notice.
        if let Some(l) = u
            .links
            .iter()
            .position(|m| !within(su3_violation(m), max_violation))
        {
            return Err(bad(format!(
                "the link at {} cannot be projected onto SU(3) by --reunitarize (its rows are zero, \
                 parallel or too large), so the configuration is damaged; re-copy or regenerate it",
                link_name(dims, l / 4, l % 4)
            )));
        }
    } else if !within(violation, max_violation) {
        return Err(bad(format!(
            "links deviate from SU(3) by up to {violation:.2e} (allowed {max_violation:.0e}); the file may use another layout or be corrupt, or pass --reunitarize to project the links back"
        )));
    }
    Ok((
        u,
        LoadInfo {
            precision,
            checksum,
            su3_violation: violation,
        },
    ))
}

/// Whether a violation is at most `max`: a NaN one (a link of NaNs) is not.
fn within(violation: f64, max: f64) -> bool {
    violation.is_finite() && violation <= max
}

/// Writes `u` as an ILDG file (atomically: a temporary file renamed into place), site by site from the
/// field itself. A field with a NaN or infinite link is refused, naming it: a configuration file is
/// read back as trusted input.
pub fn save_gauge(path: &Path, u: &GaugeField, precision: Precision) -> Result<()> {
    if let Some((l, z)) = u.first_non_finite() {
        return Err(Error::NonFinite {
            what: "a link of the gauge field".into(),
            value: if z.re.is_finite() { z.im } else { z.re },
            at: link_name(u.dims, l / 4, l % 4),
            fix: format!("{} was not written", path.display()),
        });
    }
    write_ildg_sites(path, u.dims, precision, |n, out: &mut [Complex64]| {
        for (mu, m) in out.chunks_exact_mut(9).enumerate() {
            let link = &u.links[4 * n + mu];
            for (k, z) in m.iter_mut().enumerate() {
                *z = link[(k / 3, k % 3)];
            }
        }
    })
}
