//! The line charts of `scaling-plot`, drawn with [plotters](https://crates.io/crates/plotters): a
//! figure of panels, each a [`Chart`] of rate against GPU count with its series, dashed reference
//! lines (ideal scaling) under them, and a legend below the plot, so that it never hides data.
//!
//! This module lives with the one program that draws such charts (`src/bin/scaling-plot.rs` takes
//! it in with `#[path]`). Text is DejaVu Sans compiled in, as in the field pictures
//! ([`png::register_fonts`]): no system fonts are needed, which the GPU machines and CI lack.

use std::path::Path;

use lattice_gpu::formats::png::{self, tick_label, FONT};
use lattice_gpu::formats::IoError;
use plotters::coord::ranged1d::Ranged;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

/// An RGB colour.
pub type Rgb = [u8; 3];

/// The grey of reference lines (such as ideal scaling), light enough to stay behind the data.
pub const GREY: Rgb = [140, 140, 140];
/// The grey of grid lines.
const LIGHT_GREY: Rgb = [225, 225, 225];

/// matplotlib's "tab10" colours without its grey (which [`GREY`] reference lines use): distinct on
/// screen, in print and for most colour-blind readers.
pub const PALETTE: [Rgb; 9] = [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [188, 189, 34],
    [23, 190, 207],
];

/// The shape drawn at each point of a series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// A filled disc.
    Circle,
    /// A filled square.
    Square,
    /// A filled triangle, point up.
    Triangle,
    /// A filled diamond.
    Diamond,
}

/// One line of a [`Chart`]: its points in data coordinates, joined in the order given.
#[derive(Clone, Debug)]
pub struct Series {
    /// The legend's text; an empty label leaves the series out of the legend.
    pub label: String,
    /// The data points `(x, y)`; non-finite ones are skipped.
    pub points: Vec<(f64, f64)>,
    /// The colour of the line and its markers.
    pub color: Rgb,
    /// The line's width in pixels.
    pub width: u32,
    /// `(on, off)` pixels of a dashed line, or `None` for a solid one.
    pub dash: Option<(u32, u32)>,
    /// The marker at each point, if any.
    pub marker: Option<Marker>,
}

impl Series {
    /// A solid line 2 pixels wide with `Circle` markers.
    pub fn new(label: impl Into<String>, points: Vec<(f64, f64)>, color: Rgb) -> Self {
        Series {
            label: label.into(),
            points,
            color,
            width: 2,
            dash: None,
            marker: Some(Marker::Circle),
        }
    }

    /// Its finite points.
    fn finite(&self) -> Vec<(f64, f64)> {
        self.points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect()
    }
}

/// A line chart: title, axes with numbered ticks and light grid lines, the series, and a legend
/// below the plot.
#[derive(Clone, Debug, Default)]
pub struct Chart {
    /// The title above the plot.
    pub title: String,
    /// The x axis label, under the tick numbers.
    pub x_label: String,
    /// The y axis label (often the unit), beside the y axis.
    pub y_label: String,
    /// Where the x axis has ticks; empty: round numbers over the data's range.
    pub x_ticks: Vec<f64>,
    /// Whether the y axis starts at 0 whatever the data (rates and sizes), rather than near the
    /// smallest value.
    pub y_from_zero: bool,
    /// The lines, drawn in order (later ones on top) and listed in the legend in order.
    pub series: Vec<Series>,
    /// Reference lines (such as ideal scaling): drawn under every series, so that they never hide
    /// data, and listed after them in the legend.
    pub references: Vec<Series>,
    /// Columns of the legend; `None`: as many as fit.
    pub legend_columns: Option<usize>,
}

/// Where a [`Chart`] put its plot: the pixel rectangle (left, top, right, bottom; right and bottom
/// exclusive) and the data ranges at its edges, to map data to pixels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlotArea {
    /// The plot's frame in the figure's pixels.
    pub frame: (i32, i32, i32, i32),
    /// The data x at the left and right edge.
    pub x_range: (f64, f64),
    /// The data y at the bottom and top edge.
    pub y_range: (f64, f64),
}

impl PlotArea {
    /// The figure's pixel coordinates of data point `(x, y)`.
    #[cfg(test)]
    pub fn to_pixel(self, x: f64, y: f64) -> (f64, f64) {
        let (l, t, r, b) = self.frame;
        let ((x0, x1), (y0, y1)) = (self.x_range, self.y_range);
        let px = f64::from(l) + (x - x0) / (x1 - x0) * f64::from(r - 1 - l);
        let py = f64::from(b - 1) - (y - y0) / (y1 - y0) * f64::from(b - 1 - t);
        (px, py)
    }
}

/// Height of a legend row, in pixels.
const LEGEND_ROW: u32 = 18;
/// Width of a legend entry's line sample.
const SWATCH: i32 = 28;

fn rgb(c: Rgb) -> RGBColor {
    RGBColor(c[0], c[1], c[2])
}

impl Chart {
    /// The series, then the reference lines: the legend's order.
    fn lines(&self) -> impl Iterator<Item = &Series> {
        self.series.iter().chain(&self.references)
    }

    /// The x and y ranges: every point and tick, y from 0 where asked, a little room beyond the
    /// ends so that markers there are not cut by the frame.
    fn ranges(&self) -> ((f64, f64), (f64, f64)) {
        let points: Vec<(f64, f64)> = self.lines().flat_map(Series::finite).collect();
        let span = |values: &mut dyn Iterator<Item = f64>| {
            values.fold(None, |r: Option<(f64, f64)>, v| match r {
                None => Some((v, v)),
                Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
            })
        };
        let widen = |(lo, hi): (f64, f64), below: f64, above: f64| {
            if lo == hi {
                let d = lo.abs().max(1.0);
                (lo - d * below.max(0.5), hi + d * above.max(0.5))
            } else {
                (lo - (hi - lo) * below, hi + (hi - lo) * above)
            }
        };
        let x = span(
            &mut points
                .iter()
                .map(|p| p.0)
                .chain(self.x_ticks.iter().copied()),
        )
        .unwrap_or((0.0, 1.0));
        let mut y = span(&mut points.iter().map(|p| p.1)).unwrap_or((0.0, 1.0));
        if self.y_from_zero {
            y = (y.0.min(0.0), y.1.max(0.0));
        }
        let below = if self.y_from_zero && y.0 == 0.0 {
            0.0
        } else {
            0.04
        };
        (widen(x, 0.04, 0.04), widen(y, below, 0.06))
    }

    /// Draws the chart into `area` (of a figure on plotters' bitmap backend) and says where its plot
    /// went.
    pub fn draw(&self, area: &DrawingArea<BitMapBackend<'_>, Shift>) -> Result<PlotArea, String> {
        png::register_fonts();
        let e = |e: &dyn std::fmt::Display| e.to_string();
        let text = |px: u32| (FONT, px).into_font().color(&BLACK);
        let legend: Vec<&Series> = self.lines().filter(|s| !s.label.is_empty()).collect();
        let (width, height) = area.dim_in_pixel();
        let widest = legend
            .iter()
            .map(|s| {
                area.estimate_text_size(&s.label, &text(12))
                    .map_or(0, |(w, _)| w)
            })
            .max()
            .unwrap_or(0) as i32
            + SWATCH
            + 20;
        let fit = ((width as i32 - 20) / widest.max(1)).max(1) as usize;
        let columns = self
            .legend_columns
            .unwrap_or(fit)
            .clamp(1, legend.len().max(1));
        let rows = legend.len().div_ceil(columns) as u32;
        let (plot_area, legend_area) =
            area.split_vertically(height.saturating_sub(rows * LEGEND_ROW + 6));

        let ((x0, x1), (y0, y1)) = self.ranges();
        let x_ticks = if self.x_ticks.is_empty() {
            RangedCoordf64::from(x0..x1).key_points(6)
        } else {
            self.x_ticks.clone()
        };
        let mut chart = ChartBuilder::on(&plot_area)
            .caption(&self.title, (FONT, 18).into_font())
            .margin(10)
            .margin_right(16)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|x| e(&x))?;
        // The x ticks are the chart's own (the GPU counts), drawn here: plotters' fixed key points
        // do not take its f64 axis's label formatting.
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .light_line_style(TRANSPARENT)
            .bold_line_style(rgb(LIGHT_GREY))
            .x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .label_style(text(12))
            .axis_desc_style(text(14))
            .y_label_formatter(&|v| tick_label(*v))
            .draw()
            .map_err(|x| e(&x))?;
        let below = plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Center,
            plotters::style::text_anchor::VPos::Top,
        );
        for &x in x_ticks.iter().filter(|x| (x0..=x1).contains(*x)) {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x, y0), (x, y1)],
                    rgb(LIGHT_GREY),
                )))
                .map_err(|x| e(&x))?;
            // The figure's pixel under the tick, in `area`'s own coordinates.
            let (px, py) = chart.backend_coord(&(x, y0));
            let (ax, ay) = area.get_base_pixel();
            let (px, py) = (px - ax, py - ay);
            area.draw(&PathElement::new(vec![(px, py), (px, py + 5)], BLACK))
                .map_err(|x| e(&x))?;
            area.draw_text(&tick_label(x), &text(12).pos(below), (px, py + 8))
                .map_err(|x| e(&x))?;
        }
        for s in self.references.iter().chain(&self.series) {
            let points = s.finite();
            let style = rgb(s.color).stroke_width(s.width);
            match s.dash {
                Some((on, off)) => chart.draw_series(DashedLineSeries::new(
                    points.iter().copied(),
                    on,
                    off,
                    style,
                )),
                None => chart.draw_series(LineSeries::new(points.iter().copied(), style)),
            }
            .map_err(|x| e(&x))?;
            if let Some(m) = s.marker {
                for &p in &points {
                    marker(chart.plotting_area(), m, p, rgb(s.color)).map_err(|x| e(&x))?;
                }
            }
        }
        for (i, s) in legend.iter().enumerate() {
            let (col, row) = ((i % columns) as i32, (i / columns) as i32);
            let (x, y) = (
                10 + col * widest,
                2 + row * LEGEND_ROW as i32 + LEGEND_ROW as i32 / 2,
            );
            let style = rgb(s.color).stroke_width(s.width);
            match s.dash {
                Some((on, _)) => {
                    let on = on.min(SWATCH as u32 / 3) as i32;
                    for start in (0..SWATCH).step_by(2 * on.max(1) as usize) {
                        let end = (start + on).min(SWATCH);
                        legend_area
                            .draw(&PathElement::new(vec![(x + start, y), (x + end, y)], style))
                            .map_err(|x| e(&x))?;
                    }
                }
                None => legend_area
                    .draw(&PathElement::new(vec![(x, y), (x + SWATCH, y)], style))
                    .map_err(|x| e(&x))?,
            }
            if let Some(m) = s.marker {
                marker(&legend_area, m, (x + SWATCH / 2, y), rgb(s.color)).map_err(|x| e(&x))?;
            }
            let left = plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Left,
                plotters::style::text_anchor::VPos::Center,
            );
            legend_area
                .draw_text(&s.label, &text(12).pos(left), (x + SWATCH + 6, y))
                .map_err(|x| e(&x))?;
        }
        let (px, py) = chart.plotting_area().get_pixel_range();
        Ok(PlotArea {
            frame: (px.start, py.start, px.end, py.end),
            x_range: (x0, x1),
            y_range: (y0, y1),
        })
    }
}

/// Draws marker `m` at `at` (in `area`'s coordinates) in `color`.
fn marker<DB: DrawingBackend, CT: plotters::coord::CoordTranslate>(
    area: &DrawingArea<DB, CT>,
    m: Marker,
    at: CT::From,
    color: RGBColor,
) -> Result<(), plotters::drawing::DrawingAreaErrorKind<DB::ErrorType>> {
    let fill = color.filled();
    match m {
        Marker::Circle => area.draw(&Circle::new(at, 4, fill)),
        Marker::Square => {
            area.draw(&(EmptyElement::at(at) + Rectangle::new([(-4, -4), (4, 4)], fill)))
        }
        Marker::Triangle => area.draw(&TriangleMarker::new(at, 5, fill)),
        Marker::Diamond => area.draw(
            &(EmptyElement::at(at) + Polygon::new(vec![(0, -5), (5, 0), (0, 5), (-5, 0)], fill)),
        ),
    }
}

/// A figure: a title and a note above panels of charts, each in its pixel rectangle
/// `(x, y, width, height)` below the header.
#[derive(Clone, Debug, Default)]
pub struct Figure {
    /// The figure's size in pixels.
    pub width: u32,
    /// The figure's size in pixels.
    pub height: u32,
    /// The title, centred at the top.
    pub title: String,
    /// A line under the title saying how to read the charts.
    pub note: String,
    /// The charts and where they go.
    pub panels: Vec<(Chart, (i32, i32, u32, u32))>,
}

impl Figure {
    /// The figure's RGB pixels, rows top first, and where each panel's plot went.
    pub fn render(&self) -> Result<(Vec<u8>, Vec<PlotArea>), String> {
        if self.width == 0 || self.height == 0 {
            return Err(format!(
                "a {} × {} figure is empty; width and height must both be at least 1",
                self.width, self.height
            ));
        }
        png::register_fonts();
        let mut rgb = vec![255u8; self.width as usize * self.height as usize * 3];
        let mut plots = Vec::new();
        {
            let e = |e: &dyn std::fmt::Display| e.to_string();
            let root =
                BitMapBackend::with_buffer(&mut rgb, (self.width, self.height)).into_drawing_area();
            root.fill(&WHITE).map_err(|x| e(&x))?;
            let centred = plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Top,
            );
            let mid = self.width as i32 / 2;
            root.draw_text(
                &self.title,
                &(FONT, 22).into_font().color(&BLACK).pos(centred),
                (mid, 8),
            )
            .map_err(|x| e(&x))?;
            root.draw_text(
                &self.note,
                &(FONT, 12).into_font().color(&BLACK).pos(centred),
                (mid, 36),
            )
            .map_err(|x| e(&x))?;
            for (chart, (x, y, w, h)) in &self.panels {
                let area = root.clone().shrink((*x, *y), (*w, *h));
                plots.push(chart.draw(&area)?);
            }
            root.present().map_err(|x| e(&x))?;
        }
        Ok((rgb, plots))
    }

    /// Writes the figure as a PNG at `path`, atomically.
    pub fn write_png(&self, path: &Path) -> Result<(), IoError> {
        let (rgb, _) = self.render().map_err(|problem| IoError::Png {
            path: path.to_path_buf(),
            problem,
        })?;
        png::write_rgb(path, self.width as usize, self.height as usize, |out| {
            out.write_all(&rgb)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RED: Rgb = [214, 39, 40];

    fn chart() -> Chart {
        Chart {
            title: "scaling test".into(),
            x_label: "GPUs".into(),
            y_label: "GLUPS".into(),
            x_ticks: vec![1.0, 2.0, 4.0, 8.0],
            y_from_zero: true,
            series: vec![Series::new(
                "measured",
                vec![(1.0, 10.0), (2.0, 19.0), (4.0, 35.0), (8.0, 60.0)],
                RED,
            )],
            references: vec![Series {
                dash: Some((6, 4)),
                marker: None,
                ..Series::new("ideal", vec![(1.0, 10.0), (8.0, 80.0)], GREY)
            }],
            ..Chart::default()
        }
    }

    fn figure(chart: Chart) -> Figure {
        Figure {
            width: 640,
            height: 480,
            title: "Figure".into(),
            note: "a note".into(),
            panels: vec![(chart, (0, 60, 640, 420))],
        }
    }

    fn pixel(rgb: &[u8], x: i64, y: i64) -> Option<Rgb> {
        if !(0..640).contains(&x) || !(0..480).contains(&y) {
            return None;
        }
        let i = 3 * (y as usize * 640 + x as usize);
        Some([rgb[i], rgb[i + 1], rgb[i + 2]])
    }

    #[test]
    fn a_figure_is_written_as_a_png_of_its_size() {
        let dir = std::env::temp_dir().join(format!("scaling-chart-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("chart.png");
        let f = figure(chart());
        f.write_png(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        let be = |b: &[u8]| u32::from_be_bytes(b.try_into().unwrap());
        assert_eq!((be(&bytes[16..20]), be(&bytes[20..24])), (640, 480));
        // Drawn on, not left blank; mostly white still.
        let (rgb, _) = f.render().unwrap();
        let white = rgb.chunks(3).filter(|p| *p == [255; 3]).count();
        assert!(white < 640 * 480 && white > 640 * 480 / 2, "{white}");
        // An empty figure is refused by name, and nothing is written.
        let empty = Figure {
            width: 0,
            ..figure(chart())
        };
        let err = empty.write_png(&dir.join("e.png")).unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
        assert!(!dir.join("e.png").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lines_follow_their_data() {
        let (rgb, plots) = figure(chart()).render().unwrap();
        let plot = plots[0];
        assert_eq!(plot.y_range.0, 0.0);
        assert!(
            plot.y_range.1 >= 80.0 && plot.y_range.1 <= 100.0,
            "{plot:?}"
        );
        // y up: the rising line has red in the frame's top-right quarter and none in its top-left.
        let (l, t, r, b) = plot.frame;
        let (l, t, r, b) = (i64::from(l), i64::from(t), i64::from(r), i64::from(b));
        let red_in = |x0: i64, x1: i64, y0: i64, y1: i64| {
            (y0..y1).any(|y| (x0..x1).any(|x| pixel(&rgb, x, y) == Some(RED)))
        };
        let (mid_x, mid_y) = ((l + r) / 2, (t + b) / 2);
        assert!(red_in(mid_x, r, t, mid_y));
        assert!(!red_in(l, mid_x, t, mid_y));
        // Every sample along each segment of the red line is red within two pixels of where the
        // data put it.
        let data = [(1.0, 10.0), (2.0, 19.0), (4.0, 35.0), (8.0, 60.0)];
        for pair in data.windows(2) {
            let (a, z) = (
                plot.to_pixel(pair[0].0, pair[0].1),
                plot.to_pixel(pair[1].0, pair[1].1),
            );
            for i in 0..=20 {
                let s = f64::from(i) / 20.0;
                let (x, y) = (a.0 + s * (z.0 - a.0), a.1 + s * (z.1 - a.1));
                let near = (-2..=2).any(|dy| {
                    (-2..=2).any(|dx| pixel(&rgb, x as i64 + dx, y as i64 + dy) == Some(RED))
                });
                assert!(near, "no red near ({x:.1}, {y:.1}) between {a:?} and {z:?}");
            }
        }
        // The dashed ideal line has both grey and gaps along it.
        let (a, z) = (plot.to_pixel(1.5, 15.0), plot.to_pixel(7.5, 75.0));
        let grey = (0..200)
            .filter(|&i| {
                let s = f64::from(i) / 199.0;
                let (x, y) = (a.0 + s * (z.0 - a.0), a.1 + s * (z.1 - a.1));
                (-1..=1).any(|d| pixel(&rgb, x as i64, y as i64 + d) == Some(GREY))
            })
            .count();
        assert!(grey > 50 && grey < 190, "{grey} of 200 samples grey");
    }

    #[test]
    fn the_title_and_the_legend_are_drawn_where_they_belong() {
        let (rgb, plots) = figure(chart()).render().unwrap();
        let (_, t, _, b) = plots[0].frame;
        let dark = |y0: i64, y1: i64| {
            (y0..y1)
                .flat_map(|y| (0..640).map(move |x| (x, y)))
                .filter(|&(x, y)| pixel(&rgb, x, y).is_some_and(|p| p.iter().all(|&c| c < 90)))
                .count()
        };
        // The figure's title and note above the panel, the chart's title above its plot, the
        // legend (and the x axis's numbers and label) below it.
        assert!(dark(0, 50) > 100);
        assert!(dark(60, i64::from(t)) > 50);
        assert!(dark(i64::from(b) + 2, 480) > 100);
        // The legend's red swatch is under the plot.
        let red_below =
            (i64::from(b) + 30..480).any(|y| (0..640).any(|x| pixel(&rgb, x, y) == Some(RED)));
        assert!(red_below);
    }

    #[test]
    fn charts_without_usable_data_still_draw() {
        let odd = Chart {
            series: vec![
                Series::new("nothing", vec![], RED),
                Series::new("nan", vec![(f64::NAN, 1.0), (2.0, f64::INFINITY)], RED),
                Series::new("one", vec![(3.0, 5.0)], RED),
            ],
            ..Chart::default()
        };
        let (_, plots) = figure(odd).render().unwrap();
        assert!(plots[0].x_range.0 < 3.0 && plots[0].x_range.1 > 3.0);
    }
}
