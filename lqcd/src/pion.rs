//! The pion two-point function from a point-source propagator: `C(t) = sum_x sum_{s,c,s',c'} |S(x,t)|^2`,
//! the same in every gamma basis (gamma_5 hermiticity turns the pion's trace into this sum of squares), so
//! other codes can check it.

use lattice_gpu_formats::write_atomically;
use std::path::Path;

use crate::geometry::Lattice;
use crate::spinor::SpinorField;
use crate::Result;

/// `C(t)` from the 12 solutions (one per source spin and colour at the origin).
pub fn correlator(lat: &Lattice, solutions: &[SpinorField]) -> Vec<f64> {
    let mut c = vec![0.0; lat.dims[3]];
    for s in solutions {
        add_solution(lat, s, &mut c);
    }
    c
}

/// Adds one solution's part of `C(t)` to `c` (`T` entries): the correlator of the 12 solutions taken
/// one at a time, so that a propagator need not hold all 12 at once. The sums are those of
/// [`correlator`], in the same order.
///
/// # Panics
/// If `c` does not have `T` entries.
pub fn add_solution(lat: &Lattice, solution: &SpinorField, c: &mut [f64]) {
    let nt = lat.dims[3];
    assert_eq!(c.len(), nt, "the correlator has one entry per time slice");
    let per_t = lat.volume() / nt;
    for n in 0..lat.volume() {
        let t = n / per_t;
        c[t] += solution.data[12 * n..12 * n + 12]
            .iter()
            .map(|z| z.norm_sqr())
            .sum::<f64>();
    }
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

/// Writes `t, C(t), m_eff(t)` as CSV (atomically); an effective mass that is not a finite number (where
/// `C(t)` or `C(t + 1)` is zero) is left empty, as beyond `T/2`, never written as NaN or inf.
pub fn write_csv(path: &Path, c: &[f64], meff: &[f64]) -> Result<()> {
    let mut text = String::from("t,C,m_eff\n");
    for (t, v) in c.iter().enumerate() {
        match meff.get(t).filter(|m| m.is_finite()) {
            Some(m) => text.push_str(&format!("{t},{v:.16e},{m:.10}\n")),
            None => text.push_str(&format!("{t},{v:.16e},\n")),
        }
    }
    Ok(write_atomically(path, |w| w.write_all(text.as_bytes()))?)
}
