//! Time series as a PNG line chart ([`write_series_png`]): one panel per quantity, stacked, sharing
//! the x axis, each with its own y range (a drag coefficient near 5 and a lift near 0.01 cannot share
//! one). Drawn with plotters on its bitmap backend and DejaVu Sans compiled in, as the field pictures
//! are ([`crate::png`]), and written atomically.

use std::path::Path;

use plotters::prelude::*;

use crate::png::{register_fonts, write_rgb, FONT};
use crate::IoError;

/// One panel: its quantity's name (the y label) and its points `(x, y)`.
#[derive(Clone, Copy, Debug)]
pub struct Panel<'a> {
    /// The y axis's label.
    pub label: &'a str,
    /// The points, in x order.
    pub points: &'a [(f64, f64)],
}

impl<'a> Panel<'a> {
    /// The panel of `points` with the y label `label`.
    pub fn new(label: &'a str, points: &'a [(f64, f64)]) -> Self {
        Self { label, points }
    }
}

const WIDTH: u32 = 900;
const PANEL_HEIGHT: u32 = 260;
const TITLE_HEIGHT: u32 = 40;

/// Writes `panels` stacked under `title`, their shared x axis labelled `x_label`. Fails with
/// [`IoError::Png`] naming the panel where one has no point or a non-finite value.
pub fn write_series_png(
    path: &Path,
    title: &str,
    x_label: &str,
    panels: &[Panel],
) -> Result<(), IoError> {
    let bad = |problem: String| IoError::Png {
        path: path.to_path_buf(),
        problem,
    };
    if panels.is_empty() {
        return Err(bad("a chart needs at least one panel".into()));
    }
    for p in panels {
        let finite = p.points.iter().all(|(x, y)| x.is_finite() && y.is_finite());
        if p.points.is_empty() || !finite {
            return Err(bad(format!(
                "the series {} has no point or a non-finite one: nothing to draw",
                p.label
            )));
        }
    }
    let size = (WIDTH, TITLE_HEIGHT + PANEL_HEIGHT * panels.len() as u32);
    let mut rgb = vec![255u8; size.0 as usize * size.1 as usize * 3];
    draw(&mut rgb, size, title, x_label, panels)
        .map_err(|e| bad(format!("drawing the chart failed: {e}")))?;
    write_rgb(path, size.0 as usize, size.1 as usize, |out| {
        out.write_all(&rgb)
    })
}

fn draw(
    rgb: &mut [u8],
    size: (u32, u32),
    title: &str,
    x_label: &str,
    panels: &[Panel],
) -> Result<(), String> {
    register_fonts();
    let root = BitMapBackend::with_buffer(rgb, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(title, (FONT, 20).into_font())
        .map_err(|e| e.to_string())?;
    let areas = root.split_evenly((panels.len(), 1));
    let range = |v: &mut dyn Iterator<Item = f64>| {
        let (lo, hi) = v.fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
        // A constant series gets a band around its value.
        let pad = if hi > lo {
            0.05 * (hi - lo)
        } else {
            0.5 * lo.abs().max(1.0)
        };
        (lo - pad)..(hi + pad)
    };
    for (area, panel) in areas.iter().zip(panels) {
        let xs = range(&mut panel.points.iter().map(|p| p.0));
        let ys = range(&mut panel.points.iter().map(|p| p.1));
        let mut chart = ChartBuilder::on(area)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(80)
            .build_cartesian_2d(xs, ys)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(panel.label)
            .label_style((FONT, 14).into_font())
            .axis_desc_style((FONT, 16).into_font())
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(LineSeries::new(panel.points.iter().copied(), &BLUE))
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_written_and_bad_series_are_named() {
        let dir = crate::test_support::scratch_dir("chart");
        let path = dir.join("c.png");
        let drag: Vec<(f64, f64)> = (0..200)
            .map(|t| (t as f64, 5.0 + (t as f64 * 0.1).sin()))
            .collect();
        let lift: Vec<(f64, f64)> = (0..200).map(|t| (t as f64, 0.01)).collect();
        let panels = [Panel::new("c_D", &drag), Panel::new("c_L", &lift)];
        write_series_png(&path, "forces", "time", &panels).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let (w, h, rgb) = crate::test_support::decode(&path);
        assert_eq!((w, h), (WIDTH, TITLE_HEIGHT + 2 * PANEL_HEIGHT));
        // The lines are drawn: plotters' blue.
        assert!(rgb.chunks(3).filter(|p| p == &[0, 0, 255]).count() > 200);
        let nan = [(0.0, f64::NAN)];
        let e = write_series_png(&path, "t", "x", &[Panel::new("c_L", &nan)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("c_L") && e.contains("non-finite"), "{e}");
        // The failed write left the good picture.
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
