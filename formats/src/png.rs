//! PNG pictures of 2-D slices of a field that a scientist can read: the field in colour, axes in
//! the case's units, a colour bar with the value range, and a title naming the case, the quantity
//! and the step or time ([`write_field_png`]).
//!
//! Pictures follow the physicist's convention: row 0 of the data is the bottom of the picture
//! (y up), as `matplotlib.pyplot.imshow(a, origin='lower')` draws it. The colours follow
//! matplotlib too: viridis, or grey. Non-finite values (NaN, ±inf) are drawn magenta, a colour
//! neither map uses, so a blow-up is visible at a glance, and the colour bar then says so.
//!
//! The axes, ticks and text are drawn with [plotters](https://crates.io/crates/plotters) on its
//! bitmap backend, the same crate as the scaling charts, with DejaVu Sans compiled in
//! ([`register_fonts`]): no system font or fontconfig is needed, which GPU nodes and CI machines
//! often lack. The field's pixels are set one by one, each the colour of the cell under it; the
//! colour table is this module's because plotters' viridis has 8 anchors and strays from
//! matplotlib's by up to 11 units, where these 33 stay within 3.

use std::io;
use std::path::Path;

use plotters::prelude::*;
use plotters::style::{FontStyle, RGBColor};

use crate::{write_atomically, IoError};

/// How values become colours: the lowest value of the range gets the map's first colour, the
/// highest its last.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ColorMap {
    /// matplotlib's viridis, dark blue to yellow: perceptually uniform and readable in grey and
    /// by colour-blind readers.
    #[default]
    Viridis,
    /// Black to white.
    Grey,
}

/// matplotlib's viridis at 33 evenly spaced points (entries 0, 8, 16, …, 247, 255 of its 256);
/// linear interpolation between them stays within 3 units of the full table.
const VIRIDIS: [[u8; 3]; 33] = [
    [68, 1, 84],
    [71, 13, 96],
    [72, 24, 106],
    [72, 35, 116],
    [71, 45, 123],
    [69, 55, 129],
    [66, 64, 134],
    [62, 73, 137],
    [59, 82, 139],
    [55, 91, 141],
    [51, 99, 141],
    [47, 107, 142],
    [44, 114, 142],
    [41, 122, 142],
    [38, 130, 142],
    [35, 137, 142],
    [33, 145, 140],
    [31, 151, 139],
    [31, 159, 136],
    [33, 166, 133],
    [39, 173, 129],
    [49, 181, 123],
    [61, 188, 116],
    [76, 194, 108],
    [92, 200, 99],
    [110, 206, 88],
    [129, 211, 77],
    [149, 216, 64],
    [170, 220, 50],
    [192, 223, 37],
    [213, 226, 26],
    [234, 229, 26],
    [253, 231, 37],
];

/// The colour of non-finite values.
pub const NON_FINITE_COLOR: [u8; 3] = [255, 0, 255];

impl ColorMap {
    /// The RGB colour at `t` in `[0, 1]` (clamped) along the map.
    pub fn color(self, t: f64) -> [u8; 3] {
        let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
        match self {
            ColorMap::Grey => [(t * 255.0).round() as u8; 3],
            ColorMap::Viridis => {
                let x = t * (VIRIDIS.len() - 1) as f64;
                let i = (x.floor() as usize).min(VIRIDIS.len() - 2);
                let f = x - i as f64;
                let (a, b) = (VIRIDIS[i], VIRIDIS[i + 1]);
                std::array::from_fn(|c| {
                    (f64::from(a[c]) + f * (f64::from(b[c]) - f64::from(a[c]))).round() as u8
                })
            }
        }
    }
}

/// The font family of the pictures' text ([`register_fonts`] registers it).
pub const FONT: &str = "sans-serif";

/// Registers DejaVu Sans, compiled into the program, as plotters' [`FONT`] family: plotters' text backend knows only the fonts registered with it. Called by every drawing
/// function here; a program drawing with plotters itself calls it first.
pub fn register_fonts() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The font is the dejavu crate's own file, which parses; were it refused, text would fail to
        // draw and the picture's writer would report that.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
    });
}

/// One axis of a field picture: its label, with the unit, and the coordinates of the picture's
/// edges along it in the case's units (the outer edges of the first and last cell).
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    /// The label, such as `"x"` or `"x (lattice units)"`.
    pub label: String,
    /// The coordinate at the left (bottom) edge.
    pub from: f64,
    /// The coordinate at the right (top) edge; larger than `from`.
    pub to: f64,
}

impl Axis {
    /// The axis `label` from `from` to `to`.
    pub fn new(label: impl Into<String>, from: f64, to: f64) -> Self {
        Axis {
            label: label.into(),
            from,
            to,
        }
    }

    /// The axis of `cells` cells of width `spacing`, their centres at `first + k spacing`: from half
    /// a cell before the first centre to half a cell after the last.
    pub fn cells(label: impl Into<String>, first: f64, spacing: f64, cells: usize) -> Self {
        let from = first - spacing / 2.0;
        Self::new(label, from, from + spacing * cells as f64)
    }
}

/// What a field picture shows besides the field.
#[derive(Clone, Debug, PartialEq)]
pub struct Picture {
    /// The title: the case, the quantity and the step or time, such as
    /// `"diffusion 64×64×64: f at z = 0.5, t = 0.0123 (step 2000)"`.
    pub title: String,
    /// The quantity the colours show, with its unit: the colour bar's label.
    pub quantity: String,
    /// The horizontal axis (the slice's first index).
    pub x: Axis,
    /// The vertical axis (the slice's second index, up).
    pub y: Axis,
    /// The values of the colour bar's ends (values outside get the end colours), or `None` for the
    /// minimum and maximum of the finite values.
    pub range: Option<(f64, f64)>,
    /// The colour map.
    pub map: ColorMap,
}

impl Picture {
    /// A picture titled `title` of `quantity` over the axes `x` and `y`, coloured with viridis over
    /// the data's range.
    pub fn new(title: impl Into<String>, quantity: impl Into<String>, x: Axis, y: Axis) -> Self {
        Picture {
            title: title.into(),
            quantity: quantity.into(),
            x,
            y,
            range: None,
            map: ColorMap::Viridis,
        }
    }

    /// The same picture with the colour bar fixed to `lo..hi` (so that pictures of one run compare).
    pub fn range(mut self, lo: f64, hi: f64) -> Self {
        self.range = Some((lo, hi));
        self
    }
}

/// The longer side of the field's part of a picture, in pixels.
const PLOT_SIDE: u32 = 480;
/// The shorter side's least length, in pixels, however elongated the domain.
const MIN_PLOT_SIDE: u32 = 120;
/// The band of the title, and its font's size, in pixels.
const TITLE_HEIGHT: u32 = 40;
const TITLE_PX: u32 = 17;
/// Room for the tick labels and the label left of the y axis and under the x axis.
const Y_LABELS: u32 = 72;
const X_LABELS: u32 = 48;
/// The space around the plot, and the colour bar's part of the picture (bar, ticks and label).
const MARGIN: u32 = 16;
const BAR_PART: u32 = 104;
const BAR_WIDTH: u32 = 22;

/// Where [`render`] put the field and the colour bar: pixel rectangles `(left, top, right, bottom)`,
/// right and bottom exclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    plot: (i32, i32, i32, i32),
    bar: (i32, i32, i32, i32),
}

/// Writes the `width` × `height` slice `data` (row-major, `width` values per row, row 0 at the
/// bottom) as a PNG picture with axes, colour bar and title ([`Picture`]), atomically.
///
/// Colours span `picture.range` or, if `None`, the minimum and maximum of the finite values; a
/// constant field gets the middle colour, non-finite values [`NON_FINITE_COLOR`].
///
/// Fails with [`IoError::Png`] if the size is zero or does not match `data.len()`, if the range is
/// not finite with `lo <= hi`, or if an axis is not finite with `from < to`.
pub fn write_field_png(
    path: &Path,
    width: usize,
    height: usize,
    data: &[f64],
    picture: &Picture,
) -> Result<(), IoError> {
    let (w, h, rgb, _) = render(path, width, height, data, picture)?;
    write_rgb(path, w, h, |out| out.write_all(&rgb))
}

/// The picture's size, RGB pixels (rows top first) and layout.
fn render(
    path: &Path,
    width: usize,
    height: usize,
    data: &[f64],
    picture: &Picture,
) -> Result<(usize, usize, Vec<u8>, Layout), IoError> {
    let bad = |problem: String| IoError::Png {
        path: path.to_path_buf(),
        problem,
    };
    check_not_empty(path, width, height)?;
    if width.checked_mul(height) != Some(data.len()) {
        return Err(bad(format!(
            "{} values cannot fill a {width} × {height} picture, which needs {}; pass the \
             width and height of the slice",
            data.len(),
            width.saturating_mul(height)
        )));
    }
    let (lo, hi) = match picture.range {
        Some((lo, hi)) if lo.is_finite() && hi.is_finite() && lo <= hi => (lo, hi),
        Some((lo, hi)) => {
            return Err(bad(format!(
                "the colour range ({lo}, {hi}) is not valid: it needs finite bounds with \
                 low <= high, or None to use the data's minimum and maximum"
            )))
        }
        None => finite_min_max(data),
    };
    for (name, axis) in [("x", &picture.x), ("y", &picture.y)] {
        if !(axis.from.is_finite() && axis.to.is_finite() && axis.from < axis.to) {
            return Err(bad(format!(
                "the {name} axis runs from {} to {}; it needs finite ends with from < to",
                axis.from, axis.to
            )));
        }
    }
    let map = picture.map;
    let color = |v: f64| {
        if !v.is_finite() {
            NON_FINITE_COLOR
        } else if hi > lo {
            map.color((v - lo) / (hi - lo))
        } else if v < lo {
            map.color(0.0)
        } else if v > hi {
            map.color(1.0)
        } else {
            map.color(0.5)
        }
    };

    // The field keeps the domain's proportions, within 4:1 so that neither side gets too thin.
    let (span_x, span_y) = (picture.x.to - picture.x.from, picture.y.to - picture.y.from);
    let aspect = (span_x / span_y).clamp(1.0 / 4.0, 4.0);
    let (plot_w, plot_h) = if aspect >= 1.0 {
        (
            PLOT_SIDE,
            ((f64::from(PLOT_SIDE) / aspect) as u32).max(MIN_PLOT_SIDE),
        )
    } else {
        (
            ((f64::from(PLOT_SIDE) * aspect) as u32).max(MIN_PLOT_SIDE),
            PLOT_SIDE,
        )
    };
    let main_w = MARGIN + Y_LABELS + plot_w + MARGIN;
    // A narrow domain's picture is widened, evenly on both sides, until the title fits.
    register_fonts();
    let title_w = (FONT, TITLE_PX)
        .into_font()
        .box_size(&picture.title)
        .map_or(0, |(w, _)| w);
    let pad = (title_w + 2 * MARGIN).saturating_sub(main_w + BAR_PART);
    let total_w = main_w + BAR_PART + pad;
    let total_h = TITLE_HEIGHT + MARGIN / 2 + plot_h + X_LABELS + MARGIN;
    let mut rgb = vec![255u8; total_w as usize * total_h as usize * 3];
    let cells = Cells {
        data,
        width,
        height,
        color: &color,
    };
    let layout = draw(
        &mut rgb,
        (total_w, total_h),
        (pad / 2, main_w),
        picture,
        (lo, hi),
        &cells,
    )
    .map_err(|e| bad(format!("drawing the picture failed: {e}")))?;
    Ok((total_w as usize, total_h as usize, rgb, layout))
}

/// The slice to draw and its colours.
struct Cells<'a> {
    data: &'a [f64],
    width: usize,
    height: usize,
    color: &'a dyn Fn(f64) -> [u8; 3],
}

/// A tick label: the value in at most 6 decimals, trailing zeros dropped (`0.2`, `50`, not `0.2000`
/// or `50.0`), or in exponent form where that would print nothing but zeros.
pub fn tick_label(v: f64) -> String {
    if v != 0.0 && v.abs() < 1e-4 || v.abs() >= 1e7 {
        return format!("{v:.2e}");
    }
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    // "-0" reads as a different number from "0".
    if s == "-0" { "0" } else { s }.to_string()
}

/// `v` to 4 significant digits, trailing zeros dropped (`0.3699`, `-1.500e-7`, `12000`): for
/// titles and the data's extremes.
pub fn significant(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return v.to_string();
    }
    let power = v.abs().log10().floor() as i32;
    if !(-4..7).contains(&power) {
        return format!("{v:.3e}");
    }
    let s = format!("{v:.*}", (3 - power).max(0) as usize);
    match s.contains('.') {
        true => s.trim_end_matches('0').trim_end_matches('.').to_string(),
        false => s,
    }
}

/// Draws the picture into `rgb` with plotters: the field and the bar's colours pixel by pixel, then
/// the title, the axes and the bar's ticks over them. Says where the field and the bar went.
fn draw(
    rgb: &mut [u8],
    size: (u32, u32),
    (pad, main_w): (u32, u32),
    picture: &Picture,
    (lo, hi): (f64, f64),
    cells: &Cells,
) -> Result<Layout, String> {
    register_fonts();
    let text = |px: u32| (FONT, px).into_font().color(&BLACK);
    let rgb_of = |c: [u8; 3]| RGBColor(c[0], c[1], c[2]);
    let root = BitMapBackend::with_buffer(rgb, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (band, body) = root.split_vertically(TITLE_HEIGHT);
    let centred = plotters::style::text_anchor::Pos::new(
        plotters::style::text_anchor::HPos::Center,
        plotters::style::text_anchor::VPos::Center,
    );
    band.draw_text(
        &picture.title,
        &text(TITLE_PX).pos(centred),
        (size.0 as i32 / 2, TITLE_HEIGHT as i32 / 2),
    )
    .map_err(|e| e.to_string())?;
    let (_, body) = body.split_horizontally(pad);
    let (main, rest) = body.split_horizontally(main_w);
    let (bar, _) = rest.split_horizontally(BAR_PART);

    let (x, y) = (&picture.x, &picture.y);
    let mut chart = ChartBuilder::on(&main)
        .margin(MARGIN)
        .margin_top(MARGIN / 2)
        .x_label_area_size(X_LABELS)
        .y_label_area_size(Y_LABELS)
        .build_cartesian_2d(x.from..x.to, y.from..y.to)
        .map_err(|e| e.to_string())?;
    // The field first, each pixel the colour of the cell under it (the root's coordinates are the
    // picture's pixels); the axes go over its edges.
    let (px, py) = chart.plotting_area().get_pixel_range();
    let (pw, ph) = ((px.end - px.start) as usize, (py.end - py.start) as usize);
    for j in 0..ph {
        // Pixel rows run top down, data rows bottom up.
        let row = cells.height - 1 - ((j * cells.height) / ph).min(cells.height - 1);
        for i in 0..pw {
            let col = ((i * cells.width) / pw).min(cells.width - 1);
            let c = rgb_of((cells.color)(cells.data[row * cells.width + col]));
            root.draw_pixel((px.start + i as i32, py.start + j as i32), &c)
                .map_err(|e| e.to_string())?;
        }
    }
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(x.label.as_str())
        .y_desc(y.label.as_str())
        .label_style(text(13))
        .axis_desc_style(text(15))
        .x_labels(6)
        .y_labels(6)
        .x_label_formatter(&|v| tick_label(*v))
        .y_label_formatter(&|v| tick_label(*v))
        .draw()
        .map_err(|e| e.to_string())?;

    // A constant field's bar spans a little around its value, which sits in the middle.
    let (b_lo, b_hi) = if hi > lo {
        (lo, hi)
    } else {
        let d = if lo == 0.0 { 1.0 } else { lo.abs() / 10.0 };
        (lo - d, hi + d)
    };
    let scale = ChartBuilder::on(&bar)
        .margin_top(MARGIN / 2)
        .margin_bottom(MARGIN + X_LABELS)
        .margin_left(6)
        .margin_right(BAR_PART - BAR_WIDTH - 6)
        .build_cartesian_2d(0.0..1.0, b_lo..b_hi)
        .map_err(|e| e.to_string())?;
    let (bx, by) = scale.plotting_area().get_pixel_range();
    let bar_h = (by.end - by.start).max(2) as f64;
    for j in by.start..by.end {
        // The top row is the range's high end.
        let t = 1.0 - f64::from(j - by.start) / (bar_h - 1.0);
        let c = rgb_of(picture.map.color(t));
        for i in bx.start..bx.end {
            root.draw_pixel((i, j), &c).map_err(|e| e.to_string())?;
        }
    }
    // The bar's frame, ticks and labels are drawn here rather than by plotters' mesh, whose labels on
    // a right-hand axis start on the axis line with its text backend.
    root.draw(&Rectangle::new(
        [(bx.start - 1, by.start - 1), (bx.end, by.end)],
        BLACK.stroke_width(1),
    ))
    .map_err(|e| e.to_string())?;
    let left_centred = plotters::style::text_anchor::Pos::new(
        plotters::style::text_anchor::HPos::Left,
        plotters::style::text_anchor::VPos::Center,
    );
    let mut widest = 0;
    let values = plotters::coord::types::RangedCoordf64::from(b_lo..b_hi);
    for v in plotters::coord::ranged1d::Ranged::key_points(&values, 6) {
        let (_, y) = scale.backend_coord(&(0.0, v));
        root.draw(&PathElement::new(vec![(bx.end, y), (bx.end + 5, y)], BLACK))
            .map_err(|e| e.to_string())?;
        let label = tick_label(v);
        widest = widest.max(
            root.estimate_text_size(&label, &text(13))
                .map_or(0, |(w, _)| w),
        );
        root.draw_text(&label, &text(13).pos(left_centred), (bx.end + 8, y))
            .map_err(|e| e.to_string())?;
    }
    let rotated = text(15)
        .transform(plotters::style::FontTransform::Rotate270)
        .pos(plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Center,
            plotters::style::text_anchor::VPos::Top,
        ));
    root.draw_text(
        &picture.quantity,
        &rotated,
        (bx.end + 8 + widest as i32 + 24, (by.start + by.end) / 2),
    )
    .map_err(|e| e.to_string())?;
    // Under the bar, the data's extremes (the bar's ends may be a fixed range), then what magenta
    // means where there is any.
    let mut line = by.end + 12;
    if cells.data.iter().any(|v| v.is_finite()) {
        let (min, max) = finite_min_max(cells.data);
        for (name, v) in [("max", max), ("min", min)] {
            root.draw_text(
                &format!("{name} {}", significant(v)),
                &text(12),
                (bx.start, line),
            )
            .map_err(|e| e.to_string())?;
            line += 16;
        }
    }
    if cells.data.iter().any(|v| !v.is_finite()) {
        root.draw(&Rectangle::new(
            [(bx.start, line), (bx.start + 11, line + 11)],
            rgb_of(NON_FINITE_COLOR).filled(),
        ))
        .map_err(|e| e.to_string())?;
        root.draw_text("NaN, ±inf", &text(12), (bx.start + 15, line))
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(Layout {
        plot: (px.start, py.start, px.end, py.end),
        bar: (bx.start, by.start, bx.end, by.end),
    })
}

/// Fails with [`IoError::Png`] for a picture with no pixels.
fn check_not_empty(path: &Path, width: usize, height: usize) -> Result<(), IoError> {
    if width == 0 || height == 0 {
        return Err(IoError::Png {
            path: path.to_path_buf(),
            problem: format!(
                "a {width} × {height} picture is empty; width and height must both be at least 1"
            ),
        });
    }
    Ok(())
}

/// Writes an 8-bit RGB PNG of `width` × `height` pixels atomically ([`write_atomically`]), `rows`
/// writing its pixels row by row, top first. Fails with [`IoError::Png`] for an empty picture or
/// one too large for PNG, and [`IoError::Write`] if the file cannot be written.
pub fn write_rgb(
    path: &Path,
    width: usize,
    height: usize,
    rows: impl FnOnce(&mut dyn io::Write) -> io::Result<()>,
) -> Result<(), IoError> {
    check_not_empty(path, width, height)?;
    let too_large = || IoError::Png {
        path: path.to_path_buf(),
        problem: format!("a {width} × {height} picture is too large for PNG"),
    };
    let png_width = u32::try_from(width).map_err(|_| too_large())?;
    let png_height = u32::try_from(height).map_err(|_| too_large())?;
    write_atomically(path, |out| {
        let mut encoder = ::png::Encoder::new(out, png_width, png_height);
        encoder.set_color(::png::ColorType::Rgb);
        encoder.set_depth(::png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(into_io)?;
        let mut stream = writer.stream_writer().map_err(into_io)?;
        rows(&mut stream)?;
        stream.finish().map_err(into_io)?;
        writer.finish().map_err(into_io)
    })
}

/// The minimum and maximum of the finite values; `(0, 0)` if there are none.
fn finite_min_max(data: &[f64]) -> (f64, f64) {
    data.iter()
        .filter(|v| v.is_finite())
        .fold(None, |acc, &v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((v.min(lo), v.max(hi))),
        })
        .unwrap_or((0.0, 0.0))
}

/// The png crate's errors as the I/O errors `write_atomically` carries; with the size checked
/// beforehand, only genuine I/O errors are expected here.
fn into_io(err: ::png::EncodingError) -> io::Error {
    match err {
        ::png::EncodingError::IoError(err) => err,
        other => io::Error::other(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    use crate::test_support::{decode, scratch_dir};

    fn pixel(rgb: &[u8], width: usize, x: i32, y: i32) -> [u8; 3] {
        let i = 3 * (y as usize * width + x as usize);
        [rgb[i], rgb[i + 1], rgb[i + 2]]
    }

    fn unit_square(title: &str) -> Picture {
        Picture::new(
            title,
            "f",
            Axis::new("x", 0.0, 1.0),
            Axis::new("y", 0.0, 1.0),
        )
    }

    /// Row 0 of the data is at the bottom, the last row at the top; the bar runs from the low end's
    /// colour at its bottom to the high end's at its top; the written file is the rendered picture.
    #[test]
    fn the_field_is_drawn_y_up_with_its_colour_bar() {
        let dir = scratch_dir("gradient");
        let path = dir.join("g.png");
        let (w, h) = (5, 3);
        let data: Vec<f64> = (0..w * h).map(|i| i as f64).collect();
        let picture = unit_square("gradient");
        let (pw, ph, rgb, layout) = render(&path, w, h, &data, &picture).unwrap();
        let (x0, y0, x1, y1) = layout.plot;
        let top = (w * h - 1) as f64;
        // Pixel rows inside the top and bottom cell rows; columns inside the first and last cells.
        assert_eq!(
            pixel(&rgb, pw, x0 + 2, y1 - 3),
            ColorMap::Viridis.color(0.0)
        );
        assert_eq!(
            pixel(&rgb, pw, x1 - 3, y1 - 3),
            ColorMap::Viridis.color(4.0 / top)
        );
        assert_eq!(
            pixel(&rgb, pw, x0 + 2, y0 + 2),
            ColorMap::Viridis.color(10.0 / top)
        );
        assert_eq!(pixel(&rgb, pw, x1 - 3, y0 + 2), VIRIDIS[32]);
        let (bx0, by0, _, by1) = layout.bar;
        assert_eq!(pixel(&rgb, pw, bx0 + 5, by0), VIRIDIS[32]);
        assert_eq!(pixel(&rgb, pw, bx0 + 5, by1 - 1), VIRIDIS[0]);
        // The square domain is drawn square; the title and labels put dark text on the white.
        assert_eq!(x1 - x0, y1 - y0);
        let dark = |y: std::ops::Range<i32>| {
            y.flat_map(|y| (0..pw as i32).map(move |x| (x, y)))
                .any(|(x, y)| pixel(&rgb, pw, x, y).iter().all(|&c| c < 100))
        };
        assert!(dark(0..TITLE_HEIGHT as i32), "no title drawn");
        assert!(dark(y1 + 4..ph as i32), "no x axis labels drawn");

        write_field_png(&path, w, h, &data, &picture).unwrap();
        let (fw, fh, file) = decode(&path);
        assert_eq!((fw as usize, fh as usize), (pw, ph));
        assert_eq!(file, rgb);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Values outside a fixed range take the end colours, non-finite ones magenta (and the bar then
    /// shows the swatch), a constant field the middle colour, and the grey map runs black to white.
    #[test]
    fn range_constant_non_finite_and_grey() {
        let path = Path::new("unused.png");
        let data = [-5.0, 0.5, f64::NAN, f64::INFINITY, 9.0, 1.0];
        let picture = Picture {
            map: ColorMap::Grey,
            ..unit_square("special").range(0.0, 1.0)
        };
        let (pw, _, rgb, layout) = render(path, 3, 2, &data, &picture).unwrap();
        let (x0, y0, x1, y1) = layout.plot;
        let (cw, ch) = ((x1 - x0) / 3, (y1 - y0) / 2);
        let cell = |i: i32, j: i32| pixel(&rgb, pw, x0 + i * cw + cw / 2, y1 - 1 - j * ch - ch / 2);
        assert_eq!(cell(0, 0), [0; 3]);
        assert_eq!(cell(1, 0), [128; 3]);
        assert_eq!(cell(2, 0), NON_FINITE_COLOR);
        assert_eq!(cell(0, 1), NON_FINITE_COLOR);
        assert_eq!(cell(1, 1), [255; 3]);
        assert_eq!(cell(2, 1), [255; 3]);
        // Under the bar: the data's max and min, then the swatch of non-finite values.
        let (bx0, _, _, by1) = layout.bar;
        assert_eq!(
            pixel(&rgb, pw, bx0 + 3, by1 + 12 + 32 + 5),
            NON_FINITE_COLOR
        );
        assert_eq!(significant(0.36991), "0.3699");
        assert_eq!(significant(12000.0), "12000");
        assert_eq!(significant(-1.5e-7), "-1.500e-7");
        assert_eq!(tick_label(0.30000000000000004), "0.3");
        assert_eq!(tick_label(50.0), "50");
        assert_eq!(tick_label(-0.0), "0");

        let (pw, _, rgb, layout) =
            render(path, 2, 1, &[3.0, 3.0], &unit_square("constant")).unwrap();
        let (x0, y0, _, _) = layout.plot;
        assert_eq!(pixel(&rgb, pw, x0 + 3, y0 + 3), VIRIDIS[16]);
        let (bx0, by0, _, by1) = layout.bar;
        assert_eq!(pixel(&rgb, pw, bx0 + 3, (by0 + by1) / 2), VIRIDIS[16]);
    }

    /// The domain's proportions are kept (within 4:1), whatever the cell counts: a 2:1 channel of
    /// 8 x 64 cells is drawn twice as wide as high.
    #[test]
    fn the_domain_keeps_its_proportions() {
        let path = Path::new("unused.png");
        let picture = Picture::new(
            "channel",
            "speed",
            Axis::cells("x", 0.5, 0.25, 8),
            Axis::cells("y", 0.5, 1.0 / 64.0, 64),
        );
        assert_eq!((picture.x.from, picture.x.to), (0.375, 2.375));
        let (_, _, _, layout) = render(path, 8, 64, &vec![1.0; 8 * 64], &picture).unwrap();
        let (x0, y0, x1, y1) = layout.plot;
        assert!(((x1 - x0) as f64 / (y1 - y0) as f64 - 2.0).abs() < 0.02);

        // A tall, narrow domain under a long title: the picture widens for the title, and the field
        // keeps its 1:4 proportions (the limit) in the middle.
        let title = "Poiseuille channel 4×34×4: speed |u| at z = 2, step 123456 of a long run";
        let tall = Picture::new(
            title,
            "|u|",
            Axis::cells("x", 0.0, 1.0, 4),
            Axis::cells("y", 0.0, 1.0, 34),
        );
        let (w, _, _, layout) = render(path, 4, 34, &[0.5; 4 * 34], &tall).unwrap();
        let title_w = (FONT, TITLE_PX).into_font().box_size(title).unwrap().0;
        assert!(
            w as u32 >= title_w + 2 * MARGIN,
            "{w} px for a title of {title_w}"
        );
        let (x0, y0, x1, y1) = layout.plot;
        assert_eq!((x1 - x0, y1 - y0), (MIN_PLOT_SIDE as i32, PLOT_SIDE as i32));
        let (bx0, _, bx1, _) = layout.bar;
        assert_eq!(bx1 - bx0, BAR_WIDTH as i32);
    }

    #[test]
    fn bad_sizes_ranges_and_axes_are_refused() {
        let dir = scratch_dir("errors");
        let path = dir.join("e.png");
        let problem = |err: IoError| match err {
            IoError::Png { problem, .. } => problem,
            other => panic!("expected IoError::Png, got {other:?}"),
        };
        let p = unit_square("bad");
        let msg = problem(write_field_png(&path, 3, 3, &[0.0; 8], &p).unwrap_err());
        assert!(
            msg.contains("8 values cannot fill a 3 × 3 picture, which needs 9"),
            "{msg}"
        );
        let msg = problem(write_field_png(&path, 0, 3, &[], &p).unwrap_err());
        assert!(msg.contains("empty"), "{msg}");
        let err = write_field_png(&path, 1, 1, &[0.0], &p.clone().range(1.0, 0.0)).unwrap_err();
        assert!(problem(err).contains("colour range (1, 0)"));
        let flat = Picture {
            y: Axis::new("y", 1.0, 1.0),
            ..p
        };
        let msg = problem(write_field_png(&path, 1, 1, &[0.0], &flat).unwrap_err());
        assert!(msg.contains("the y axis runs from 1 to 1"), "{msg}");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn viridis_interpolates_between_anchors() {
        assert_eq!(ColorMap::Viridis.color(0.0), VIRIDIS[0]);
        assert_eq!(ColorMap::Viridis.color(1.0), VIRIDIS[32]);
        assert_eq!(ColorMap::Viridis.color(2.0), VIRIDIS[32]);
        assert_eq!(ColorMap::Viridis.color(0.5), VIRIDIS[16]);
        // Halfway between anchors 0 and 1.
        assert_eq!(ColorMap::Viridis.color(1.0 / 64.0), [70, 7, 90]);
        assert_eq!(VIRIDIS[0], [0x44, 0x01, 0x54]);
        assert_eq!(VIRIDIS[32], [0xfd, 0xe7, 0x25]);
        assert_eq!(ColorMap::default(), ColorMap::Viridis);
    }

    /// Writes sample pictures to $LATTICE_GPU_PICTURES (when set) for a person to look at.
    #[test]
    fn sample_pictures_for_a_look() {
        let Some(dir) = std::env::var_os("LATTICE_GPU_PICTURES") else {
            return;
        };
        let dir = std::path::PathBuf::from(dir);
        let (nx, ny) = (64, 64);
        let h = 1.0 / (nx as f64 + 1.0);
        let data: Vec<f64> = (0..nx * ny)
            .map(|k| {
                let (i, j) = ((k % nx + 1) as f64 * h, (k / nx + 1) as f64 * h);
                (std::f64::consts::PI * i).sin() * (std::f64::consts::PI * j).sin() * 0.37
            })
            .collect();
        let p = Picture::new(
            "diffusion 64×64×64: f at z = 0.5, t = 0.0123 (step 2000)",
            "f",
            Axis::cells("x", h, h, nx),
            Axis::cells("y", h, h, ny),
        );
        write_field_png(&dir.join("square.png"), nx, ny, &data, &p).unwrap();
        let mut bad = data.clone();
        bad[100] = f64::NAN;
        let channel = Picture::new(
            "lbm poiseuille 128×32×1: speed |u| at z = 0, step 5000",
            "|u| (lattice units)",
            Axis::cells("x (lattice units)", 0.5, 1.0, 128),
            Axis::cells("y (lattice units)", 0.5, 1.0, 32),
        );
        let speed: Vec<f64> = (0..128 * 32)
            .map(|k| {
                let y = (k / 128) as f64 + 0.5;
                0.05 * y * (32.0 - y) / 256.0
            })
            .collect();
        write_field_png(&dir.join("channel.png"), 128, 32, &speed, &channel).unwrap();
        write_field_png(&dir.join("nan.png"), nx, ny, &bad, &p).unwrap();
    }
}
