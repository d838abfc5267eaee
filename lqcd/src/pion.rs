//! The pion two-point function from a point-source propagator: `C(t) = sum_x sum_{s,c,s',c'} |S(x,t)|^2`,
//! the same in every gamma basis (gamma_5 hermiticity turns the pion's trace into this sum of squares), so
//! other codes can check it.

use lattice_gpu_host::io::write_atomically;
use std::path::Path;

use crate::geometry::Lattice;
use crate::spinor::SpinorField;
use crate::Result;

/// `C(t)` from the 12 solutions (one per source spin and colour at the origin).
pub fn correlator(lat: &Lattice, solutions: &[SpinorField]) -> Vec<f64> {
    let nt = lat.dims[3];
    let per_t = lat.volume() / nt;
    let mut c = vec![0.0; nt];
    for s in solutions {
        for n in 0..lat.volume() {
            let t = n / per_t;
            c[t] += s.data[12 * n..12 * n + 12]
                .iter()
                .map(|z| z.norm_sqr())
                .sum::<f64>();
        }
    }
    c
}

/// The effective mass `m(t) = ln(C(t) / C(t + 1))` for `t` below `T/2`, where the forward-propagating
/// state dominates (NaN where the ratio is not positive).
pub fn effective_mass(c: &[f64]) -> Vec<f64> {
    (0..c.len() / 2)
        .map(|t| {
            let r = c[t] / c[t + 1];
            if r > 0.0 {
                r.ln()
            } else {
                f64::NAN
            }
        })
        .collect()
}

/// Writes `t, C(t), m_eff(t)` as CSV (atomically).
pub fn write_csv(path: &Path, c: &[f64], meff: &[f64]) -> Result<()> {
    let mut text = String::from("t,C,m_eff\n");
    for (t, v) in c.iter().enumerate() {
        match meff.get(t) {
            Some(m) => text.push_str(&format!("{t},{v:.16e},{m:.10}\n")),
            None => text.push_str(&format!("{t},{v:.16e},\n")),
        }
    }
    Ok(write_atomically(path, |w| w.write_all(text.as_bytes()))?)
}
