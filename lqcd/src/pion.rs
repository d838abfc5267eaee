//! The pion two-point function from a point-source propagator: `C(t) = sum_x sum_{s,c,s',c'} |S(x,t)|^2`,
//! the same in every gamma basis (gamma_5 hermiticity turns the pion's trace into this sum of squares), so
//! other codes can check it.

use lattice_gpu_formats::png::{register_fonts, tick_label, write_rgb, FONT};
use lattice_gpu_formats::{write_atomically, IoError};
use plotters::coord::Shift;
use plotters::prelude::*;
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

/// Writes `t, C(t), m_eff(t)` as CSV (atomically), the effective mass ([`effective_mass`]) below `T/2`,
/// where the forward-propagating state dominates; an undefined one is left empty, as beyond `T/2`,
/// never written as NaN or inf.
pub fn write_csv(path: &Path, c: &[f64], meff: &[Option<f64>]) -> Result<()> {
    let mut text = String::from("t,C,m_eff\n");
    for (t, v) in c.iter().enumerate() {
        match meff.get(t).copied().flatten().filter(|_| t < c.len() / 2) {
            Some(m) => text.push_str(&format!("{t},{v:.16e},{m:.10}\n")),
            None => text.push_str(&format!("{t},{v:.16e},\n")),
        }
    }
    Ok(write_atomically(path, |w| w.write_all(text.as_bytes()))?)
}

/// The effective mass `m_eff(t) = ln(C(t) / C(t + 1))` of a correlator `c` of `T` time slices, for every
/// `t` from 0 to `T - 2` (`T - 1` entries; `C(T)` does not exist): `None` where `C(t)` or `C(t + 1)` is
/// not a positive finite number, so that the logarithm has no value.
///
/// For a single state on a periodic lattice, `C(t) = A (exp(-m t) + exp(-m (T - t)))`, this tends to
/// `m` away from the midpoint `T/2` and falls to 0 at it, where the backward-propagating half of the
/// cosh takes over (beyond the midpoint it is negative). The cosh form, solving
/// `C(t) / C(t + 1) = cosh(m (T/2 - t)) / cosh(m (T/2 - t - 1))` for `m`, would remove that bias; the
/// plain log ratio is what is computed here.
pub fn effective_mass(c: &[f64]) -> Vec<Option<f64>> {
    let usable = |v: f64| v.is_finite() && v > 0.0;
    c.windows(2)
        .map(|w| {
            if usable(w[0]) && usable(w[1]) {
                Some((w[0] / w[1]).ln()).filter(|m| m.is_finite())
            } else {
                None
            }
        })
        .collect()
}

/// Writes `t, m_eff` as CSV (atomically), one row per entry of `meff` (from [`effective_mass`]),
/// an undefined value left empty.
pub fn write_meff_csv(path: &Path, meff: &[Option<f64>]) -> Result<()> {
    let mut text = String::from("t,m_eff\n");
    for (t, m) in meff.iter().enumerate() {
        match m {
            Some(m) => text.push_str(&format!("{t},{m:.16e}\n")),
            None => text.push_str(&format!("{t},\n")),
        }
    }
    Ok(write_atomically(path, |w| w.write_all(text.as_bytes()))?)
}

/// Width and height of the picture [`write_meff_png`] draws, in pixels.
const MEFF_PNG: (u32, u32) = (720, 840);

/// The blue of the data points (matplotlib's first "tab10" colour, as the scaling charts use).
const POINTS: RGBColor = RGBColor(31, 119, 180);

/// Writes a PNG (atomically) of two panels: the effective mass `meff` (from [`effective_mass`])
/// against `t` above, the correlator `c` against `t` on a logarithmic axis below; undefined values and
/// `C(t)` that are not positive are left out. `title` names the run (lattice, kappa, operator).
pub fn write_meff_png(path: &Path, title: &str, c: &[f64], meff: &[Option<f64>]) -> Result<()> {
    let (w, h) = MEFF_PNG;
    let mut rgb = vec![255u8; w as usize * h as usize * 3];
    draw_meff(&mut rgb, title, c, meff).map_err(|problem| IoError::Png {
        path: path.to_path_buf(),
        problem: format!("drawing the effective mass failed: {problem}"),
    })?;
    Ok(write_rgb(path, w as usize, h as usize, |out| {
        out.write_all(&rgb)
    })?)
}

/// `(lo, hi)` of the values, widened by a little (or around a single value) so that points at the
/// ends are not cut by the frame; `None` without values.
fn padded_range(values: impl Iterator<Item = f64>, log: bool) -> Option<(f64, f64)> {
    let (lo, hi) = values.fold(None, |r: Option<(f64, f64)>, v| match r {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })?;
    Some(if log {
        // Factors, not differences: a log axis needs positive ends.
        (lo / 2.0, hi * 2.0)
    } else if lo == hi {
        let d = lo.abs().max(0.1) / 2.0;
        (lo - d, hi + d)
    } else {
        let d = (hi - lo) * 0.06;
        (lo - d, hi + d)
    })
}

fn draw_meff(
    rgb: &mut [u8],
    title: &str,
    c: &[f64],
    meff: &[Option<f64>],
) -> std::result::Result<(), String> {
    register_fonts();
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let text = |px: u32| (FONT, px).into_font().color(&BLACK);
    let root = BitMapBackend::with_buffer(rgb, MEFF_PNG).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let root = root
        .titled(title, (FONT, 18).into_font().color(&BLACK))
        .map_err(|x| e(&x))?;
    let (top, bottom) = root.split_vertically(MEFF_PNG.1 / 2 - 20);
    let nt = c.len().max(1) as f64;
    let x_range = -0.5..(nt - 0.5);

    let points: Vec<(f64, f64)> = meff
        .iter()
        .enumerate()
        .filter_map(|(t, m)| m.map(|m| (t as f64, m)))
        .collect();
    let (lo, hi) = padded_range(points.iter().map(|p| p.1), false).unwrap_or((0.0, 1.0));
    panel(
        &top,
        "effective mass m_eff(t) = ln C(t)/C(t+1)",
        "m_eff",
        x_range.clone(),
        lo..hi,
        &points,
        text,
    )?;

    let points: Vec<(f64, f64)> = c
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_finite() && **v > 0.0)
        .map(|(t, &v)| (t as f64, v))
        .collect();
    let (lo, hi) = padded_range(points.iter().map(|p| p.1), true).unwrap_or((0.1, 10.0));
    let mut chart = ChartBuilder::on(&bottom)
        .caption("pion correlator C(t)", (FONT, 15).into_font())
        .margin(12)
        .margin_right(20)
        .x_label_area_size(44)
        .y_label_area_size(84)
        .build_cartesian_2d(x_range, (lo..hi).log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(225, 225, 225))
        .x_desc("t")
        .y_desc("C(t) (log scale)")
        .label_style(text(12))
        .axis_desc_style(text(14))
        .x_label_formatter(&|v| tick_label(*v))
        .y_label_formatter(&|v| format!("{v:.1e}"))
        .draw()
        .map_err(|x| e(&x))?;
    draw_points(chart.plotting_area(), &points).map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))
}

/// One linear panel of [`draw_meff`]: axes, grid and the points joined where consecutive in `t`.
fn panel<'a>(
    area: &DrawingArea<BitMapBackend<'a>, Shift>,
    caption: &str,
    y_desc: &str,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
    points: &[(f64, f64)],
    text: impl Fn(u32) -> TextStyle<'static>,
) -> std::result::Result<(), String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 15).into_font())
        .margin(12)
        .margin_right(20)
        .x_label_area_size(44)
        .y_label_area_size(84)
        .build_cartesian_2d(x, y)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(225, 225, 225))
        .x_desc("t")
        .y_desc(y_desc)
        .label_style(text(12))
        .axis_desc_style(text(14))
        .x_label_formatter(&|v| tick_label(*v))
        .y_label_formatter(&|v| tick_label(*v))
        .draw()
        .map_err(|x| e(&x))?;
    draw_points(chart.plotting_area(), points).map_err(|x| e(&x))
}

/// The points as discs, joined by lines where `t` follows on (a gap stays a gap).
fn draw_points<DB: DrawingBackend, CT: plotters::coord::CoordTranslate<From = (f64, f64)>>(
    area: &DrawingArea<DB, CT>,
    points: &[(f64, f64)],
) -> std::result::Result<(), plotters::drawing::DrawingAreaErrorKind<DB::ErrorType>> {
    for pair in points.windows(2) {
        if pair[1].0 - pair[0].0 == 1.0 {
            area.draw(&PathElement::new(
                vec![pair[0], pair[1]],
                POINTS.stroke_width(2),
            ))?;
        }
    }
    for &p in points {
        area.draw(&Circle::new(p, 4, POINTS.filled()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `C(t) = A (exp(-m t) + exp(-m (T - t)))`: far below the midpoint the backward half is
    /// negligible and the log ratio is `m`; at the midpoint it is 0 (the cosh is symmetric), and it
    /// is antisymmetric about it.
    #[test]
    fn effective_mass_of_a_periodic_single_state_is_its_mass_away_from_the_midpoint() {
        let (a, m, nt) = (2.5, 0.8, 48usize);
        let c: Vec<f64> = (0..nt)
            .map(|t| {
                let t = t as f64;
                a * ((-m * t).exp() + (-m * (nt as f64 - t)).exp())
            })
            .collect();
        let meff = effective_mass(&c);
        assert_eq!(meff.len(), nt - 1);
        // The backward half shifts the log ratio by about 2 exp(-m (T - 2t - 1)) sinh(m): bounded
        // here by 4 exp(-m (T - 2t - 2)), it is below 1e-11 up to t = 12 and grows towards T/2.
        for (t, v) in meff.iter().enumerate().take(13) {
            let v = v.unwrap();
            let bound = 4.0 * (-m * (nt - 2 * t - 2) as f64).exp() + 1e-14;
            assert!(
                (v - m).abs() <= bound,
                "m_eff({t}) = {v}, not {m} within {bound:.1e}"
            );
        }
        assert!((meff[12].unwrap() - m).abs() < 1e-7);
        // Exactly: ln(cosh(m (T/2 - t)) / cosh(m (T/2 - t - 1))).
        for (t, v) in meff.iter().enumerate() {
            let x = (nt as f64 / 2.0 - t as f64) * m;
            let want = (x.cosh() / (x - m).cosh()).ln();
            assert!((v.unwrap() - want).abs() < 1e-9, "t = {t}");
        }
        let mid = nt / 2;
        assert!(meff[mid - 1].unwrap() > 0.0 && meff[mid].unwrap() < 0.0);
        assert!((meff[mid - 1].unwrap() + meff[mid].unwrap()).abs() < 1e-12);
    }

    #[test]
    fn effective_mass_is_undefined_where_a_correlator_value_is_not_positive() {
        let c = [4.0, 2.0, 0.0, 1.0, -1.0, f64::NAN, 0.5, 0.25];
        let meff = effective_mass(&c);
        assert_eq!(meff.len(), 7);
        assert!((meff[0].unwrap() - 2f64.ln()).abs() < 1e-15);
        assert_eq!(&meff[1..6], &[None; 5]);
        assert!((meff[6].unwrap() - 2f64.ln()).abs() < 1e-15);
        assert!(effective_mass(&[1.0]).is_empty());
        assert!(effective_mass(&[]).is_empty());
    }

    #[test]
    fn meff_files_hold_the_values_and_a_png() {
        let dir = std::env::temp_dir().join(format!("lqcd-meff-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = [1.0, 0.5, 0.0, 0.2, 0.4];
        let meff = effective_mass(&c);
        write_meff_csv(&dir.join("meff.csv"), &meff).unwrap();
        let text = std::fs::read_to_string(dir.join("meff.csv")).unwrap();
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows[0], "t,m_eff");
        assert_eq!(rows.len(), 5);
        let v: f64 = rows[1].strip_prefix("0,").unwrap().parse().unwrap();
        assert_eq!(v, 2f64.ln());
        assert_eq!(rows[2], "1,");
        assert_eq!(rows[3], "2,");
        write_meff_png(&dir.join("meff.png"), "test", &c, &meff).unwrap();
        let png = std::fs::read(dir.join("meff.png")).unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
        // Nothing to draw is still a picture (empty panels), not an error.
        write_meff_png(&dir.join("empty.png"), "test", &[0.0; 4], &[None; 3]).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
