//! Line charts as PNG pictures: an RGB [`Canvas`] with lines, dashed lines, markers and text, and
//! a [`Chart`] that lays out axes, ticks, a title and a legend on it.
//!
//! Benchmark results (scaling runs above all) are wanted as a picture on machines that have no
//! Python or plotting library, so the drawing is done here with nothing but the `png` crate. Text
//! comes from a 5 × 7 bitmap font compiled into the code: no font files to find, install or ship.
//! The canvas is y down, as PNG rows are; a chart maps its data y up.

use std::path::Path;

use lattice_gpu_formats::IoError;

/// An RGB colour.
pub type Rgb = [u8; 3];

/// White, the background of charts.
pub const WHITE: Rgb = [255, 255, 255];
/// Black, for axes and text.
pub const BLACK: Rgb = [0, 0, 0];
/// The grey of reference lines (such as ideal scaling), light enough to stay behind the data.
pub const GREY: Rgb = [140, 140, 140];
/// The grey of grid lines.
pub const LIGHT_GREY: Rgb = [225, 225, 225];

/// matplotlib's "tab10" colours without its grey (which [`GREY`] reference lines use): distinct
/// on screen, in print and for most colour-blind readers.
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

/// Width of a glyph of the built-in font, in font pixels.
pub const GLYPH_WIDTH: usize = 5;
/// Height of a glyph of the built-in font, in font pixels.
pub const GLYPH_HEIGHT: usize = 7;
/// Horizontal distance from one character to the next, in font pixels (a glyph and one blank
/// column).
pub const GLYPH_ADVANCE: usize = GLYPH_WIDTH + 1;

/// The classic 5 × 7 font for printable ASCII (space to `~`): five columns per glyph, left to
/// right, bit 0 the top row.
const FONT: [[u8; 5]; 95] = [
    [0x00, 0x00, 0x00, 0x00, 0x00], // space
    [0x00, 0x00, 0x5F, 0x00, 0x00], // !
    [0x00, 0x07, 0x00, 0x07, 0x00], // "
    [0x14, 0x7F, 0x14, 0x7F, 0x14], // #
    [0x24, 0x2A, 0x7F, 0x2A, 0x12], // $
    [0x23, 0x13, 0x08, 0x64, 0x62], // %
    [0x36, 0x49, 0x55, 0x22, 0x50], // &
    [0x00, 0x05, 0x03, 0x00, 0x00], // '
    [0x00, 0x1C, 0x22, 0x41, 0x00], // (
    [0x00, 0x41, 0x22, 0x1C, 0x00], // )
    [0x14, 0x08, 0x3E, 0x08, 0x14], // *
    [0x08, 0x08, 0x3E, 0x08, 0x08], // +
    [0x00, 0x50, 0x30, 0x00, 0x00], // ,
    [0x08, 0x08, 0x08, 0x08, 0x08], // -
    [0x00, 0x60, 0x60, 0x00, 0x00], // .
    [0x20, 0x10, 0x08, 0x04, 0x02], // /
    [0x3E, 0x51, 0x49, 0x45, 0x3E], // 0
    [0x00, 0x42, 0x7F, 0x40, 0x00], // 1
    [0x42, 0x61, 0x51, 0x49, 0x46], // 2
    [0x21, 0x41, 0x45, 0x4B, 0x31], // 3
    [0x18, 0x14, 0x12, 0x7F, 0x10], // 4
    [0x27, 0x45, 0x45, 0x45, 0x39], // 5
    [0x3C, 0x4A, 0x49, 0x49, 0x30], // 6
    [0x01, 0x71, 0x09, 0x05, 0x03], // 7
    [0x36, 0x49, 0x49, 0x49, 0x36], // 8
    [0x06, 0x49, 0x49, 0x29, 0x1E], // 9
    [0x00, 0x36, 0x36, 0x00, 0x00], // :
    [0x00, 0x56, 0x36, 0x00, 0x00], // ;
    [0x08, 0x14, 0x22, 0x41, 0x00], // <
    [0x14, 0x14, 0x14, 0x14, 0x14], // =
    [0x00, 0x41, 0x22, 0x14, 0x08], // >
    [0x02, 0x01, 0x51, 0x09, 0x06], // ?
    [0x32, 0x49, 0x79, 0x41, 0x3E], // @
    [0x7E, 0x11, 0x11, 0x11, 0x7E], // A
    [0x7F, 0x49, 0x49, 0x49, 0x36], // B
    [0x3E, 0x41, 0x41, 0x41, 0x22], // C
    [0x7F, 0x41, 0x41, 0x22, 0x1C], // D
    [0x7F, 0x49, 0x49, 0x49, 0x41], // E
    [0x7F, 0x09, 0x09, 0x09, 0x01], // F
    [0x3E, 0x41, 0x49, 0x49, 0x7A], // G
    [0x7F, 0x08, 0x08, 0x08, 0x7F], // H
    [0x00, 0x41, 0x7F, 0x41, 0x00], // I
    [0x20, 0x40, 0x41, 0x3F, 0x01], // J
    [0x7F, 0x08, 0x14, 0x22, 0x41], // K
    [0x7F, 0x40, 0x40, 0x40, 0x40], // L
    [0x7F, 0x02, 0x0C, 0x02, 0x7F], // M
    [0x7F, 0x04, 0x08, 0x10, 0x7F], // N
    [0x3E, 0x41, 0x41, 0x41, 0x3E], // O
    [0x7F, 0x09, 0x09, 0x09, 0x06], // P
    [0x3E, 0x41, 0x51, 0x21, 0x5E], // Q
    [0x7F, 0x09, 0x19, 0x29, 0x46], // R
    [0x46, 0x49, 0x49, 0x49, 0x31], // S
    [0x01, 0x01, 0x7F, 0x01, 0x01], // T
    [0x3F, 0x40, 0x40, 0x40, 0x3F], // U
    [0x1F, 0x20, 0x40, 0x20, 0x1F], // V
    [0x3F, 0x40, 0x38, 0x40, 0x3F], // W
    [0x63, 0x14, 0x08, 0x14, 0x63], // X
    [0x07, 0x08, 0x70, 0x08, 0x07], // Y
    [0x61, 0x51, 0x49, 0x45, 0x43], // Z
    [0x00, 0x7F, 0x41, 0x41, 0x00], // [
    [0x02, 0x04, 0x08, 0x10, 0x20], // backslash
    [0x00, 0x41, 0x41, 0x7F, 0x00], // ]
    [0x04, 0x02, 0x01, 0x02, 0x04], // ^
    [0x40, 0x40, 0x40, 0x40, 0x40], // _
    [0x00, 0x01, 0x02, 0x04, 0x00], // `
    [0x20, 0x54, 0x54, 0x54, 0x78], // a
    [0x7F, 0x48, 0x44, 0x44, 0x38], // b
    [0x38, 0x44, 0x44, 0x44, 0x20], // c
    [0x38, 0x44, 0x44, 0x48, 0x7F], // d
    [0x38, 0x54, 0x54, 0x54, 0x18], // e
    [0x08, 0x7E, 0x09, 0x01, 0x02], // f
    [0x0C, 0x52, 0x52, 0x52, 0x3E], // g
    [0x7F, 0x08, 0x04, 0x04, 0x78], // h
    [0x00, 0x44, 0x7D, 0x40, 0x00], // i
    [0x20, 0x40, 0x44, 0x3D, 0x00], // j
    [0x7F, 0x10, 0x28, 0x44, 0x00], // k
    [0x00, 0x41, 0x7F, 0x40, 0x00], // l
    [0x7C, 0x04, 0x18, 0x04, 0x78], // m
    [0x7C, 0x08, 0x04, 0x04, 0x78], // n
    [0x38, 0x44, 0x44, 0x44, 0x38], // o
    [0x7C, 0x14, 0x14, 0x14, 0x08], // p
    [0x08, 0x14, 0x14, 0x18, 0x7C], // q
    [0x7C, 0x08, 0x04, 0x04, 0x08], // r
    [0x48, 0x54, 0x54, 0x54, 0x20], // s
    [0x04, 0x3F, 0x44, 0x40, 0x20], // t
    [0x3C, 0x40, 0x40, 0x20, 0x7C], // u
    [0x1C, 0x20, 0x40, 0x20, 0x1C], // v
    [0x3C, 0x40, 0x30, 0x40, 0x3C], // w
    [0x44, 0x28, 0x10, 0x28, 0x44], // x
    [0x0C, 0x50, 0x50, 0x50, 0x3C], // y
    [0x44, 0x64, 0x54, 0x4C, 0x44], // z
    [0x00, 0x08, 0x36, 0x41, 0x00], // {
    [0x00, 0x00, 0x7F, 0x00, 0x00], // |
    [0x00, 0x41, 0x36, 0x08, 0x00], // }
    [0x08, 0x04, 0x08, 0x10, 0x08], // ~
];

/// The glyph of `c`; characters the font lacks are drawn as `?`, so a label never silently loses
/// a character.
fn glyph(c: char) -> &'static [u8; 5] {
    let i = match c {
        ' '..='~' => c as usize - ' ' as usize,
        _ => '?' as usize - ' ' as usize,
    };
    &FONT[i]
}

/// The width in pixels of `text` drawn at `scale` by [`Canvas::text`].
pub fn text_width(text: &str, scale: usize) -> usize {
    let n = text.chars().count();
    if n == 0 {
        0
    } else {
        (n * GLYPH_ADVANCE - 1) * scale
    }
}

/// A rectangle of pixels: left and top edge, width and height.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rect {
    /// The left edge.
    pub x: i64,
    /// The top edge.
    pub y: i64,
    /// The width.
    pub width: i64,
    /// The height.
    pub height: i64,
}

impl Rect {
    /// The rectangle at `(x, y)` of `width` × `height` pixels.
    pub fn new(x: i64, y: i64, width: i64, height: i64) -> Self {
        Rect {
            x,
            y,
            width,
            height,
        }
    }

    /// The right edge (the first column outside).
    pub fn right(&self) -> i64 {
        self.x + self.width
    }

    /// The bottom edge (the first row outside).
    pub fn bottom(&self) -> i64 {
        self.y + self.height
    }

    /// Whether pixel `(x, y)` lies inside.
    pub fn contains(&self, x: i64, y: i64) -> bool {
        x >= self.x && x < self.right() && y >= self.y && y < self.bottom()
    }
}

/// The shape drawn at each data point of a [`Series`].
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

/// An RGB picture in memory, `(0, 0)` the top-left pixel; everything drawn outside is clipped.
#[derive(Clone, Debug)]
pub struct Canvas {
    width: usize,
    height: usize,
    rgb: Vec<u8>,
}

impl Canvas {
    /// A `width` × `height` canvas filled with `background`.
    pub fn new(width: usize, height: usize, background: Rgb) -> Self {
        Canvas {
            width,
            height,
            rgb: background.repeat(width * height),
        }
    }

    /// The width in pixels.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The height in pixels.
    pub fn height(&self) -> usize {
        self.height
    }

    /// The RGB bytes, row by row from the top.
    pub fn rgb(&self) -> &[u8] {
        &self.rgb
    }

    /// The colour of pixel `(x, y)`, or `None` outside the canvas.
    pub fn pixel(&self, x: i64, y: i64) -> Option<Rgb> {
        let i = self.index(x, y)?;
        Some([self.rgb[i], self.rgb[i + 1], self.rgb[i + 2]])
    }

    fn index(&self, x: i64, y: i64) -> Option<usize> {
        let x = usize::try_from(x).ok().filter(|&x| x < self.width)?;
        let y = usize::try_from(y).ok().filter(|&y| y < self.height)?;
        Some(3 * (y * self.width + x))
    }

    /// Sets pixel `(x, y)` to `color`; nothing happens outside the canvas.
    pub fn put(&mut self, x: i64, y: i64, color: Rgb) {
        if let Some(i) = self.index(x, y) {
            self.rgb[i..i + 3].copy_from_slice(&color);
        }
    }

    /// Fills `rect` with `color`.
    pub fn fill_rect(&mut self, rect: Rect, color: Rgb) {
        for y in rect.y..rect.bottom() {
            for x in rect.x..rect.right() {
                self.put(x, y, color);
            }
        }
    }

    /// Draws the one-pixel outline of `rect`.
    pub fn stroke_rect(&mut self, rect: Rect, color: Rgb) {
        let (r, b) = (rect.right() - 1, rect.bottom() - 1);
        for x in rect.x..=r {
            self.put(x, rect.y, color);
            self.put(x, b, color);
        }
        for y in rect.y..=b {
            self.put(rect.x, y, color);
            self.put(r, y, color);
        }
    }

    /// A disc of diameter `width` centred on `(cx, cy)`: the pen that lines are drawn with, round
    /// so that thick lines join without notches at any angle.
    fn stamp(&mut self, cx: f64, cy: f64, width: f64, color: Rgb) {
        let r = width / 2.0;
        // A disc thinner than a pixel may contain no pixel centre; such a pen marks the pixel
        // under it instead.
        if r <= 0.75 {
            self.put(cx.floor() as i64, cy.floor() as i64, color);
            return;
        }
        let (x0, x1) = ((cx - r).floor() as i64, (cx + r).ceil() as i64);
        let (y0, y1) = ((cy - r).floor() as i64, (cy + r).ceil() as i64);
        for y in y0..=y1 {
            for x in x0..=x1 {
                let (dx, dy) = (x as f64 + 0.5 - cx, y as f64 + 0.5 - cy);
                if dx * dx + dy * dy <= r * r {
                    self.put(x, y, color);
                }
            }
        }
    }

    /// A straight line `width` pixels wide from `from` to `to` (pixel coordinates; pixel `(i, j)`
    /// covers `[i, i + 1) × [j, j + 1)`).
    pub fn line(&mut self, from: (f64, f64), to: (f64, f64), width: f64, color: Rgb) {
        self.polyline(&[from, to], width, None, color);
    }

    /// Lines through `points` in turn; with `dash` = `(on, off)`, a dashed line of `on` pixels
    /// drawn and `off` left out, the pattern running on across corners so that short segments
    /// still look dashed.
    pub fn polyline(
        &mut self,
        points: &[(f64, f64)],
        width: f64,
        dash: Option<(f64, f64)>,
        color: Rgb,
    ) {
        let period = dash.map(|(on, off)| on + off).filter(|p| *p > 0.0);
        let mut travelled = 0.0;
        for pair in points.windows(2) {
            let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
            if ![x0, y0, x1, y1].iter().all(|v| v.is_finite()) {
                continue;
            }
            let length = (x1 - x0).hypot(y1 - y0);
            // Half-pixel steps leave no gaps between stamps at any angle.
            let steps = (length * 2.0).ceil().max(1.0) as usize;
            for i in 0..=steps {
                let t = i as f64 / steps as f64;
                let on = match (period, dash) {
                    (Some(p), Some((on, _))) => (travelled + t * length).rem_euclid(p) < on,
                    _ => true,
                };
                if on {
                    self.stamp(x0 + t * (x1 - x0), y0 + t * (y1 - y0), width, color);
                }
            }
            travelled += length;
        }
    }

    /// A filled `marker` about `size` pixels across, centred on `at`.
    pub fn marker(&mut self, at: (f64, f64), marker: Marker, size: f64, color: Rgb) {
        let (cx, cy) = at;
        if !(cx.is_finite() && cy.is_finite()) {
            return;
        }
        let r = size / 2.0;
        let (x0, x1) = ((cx - r).floor() as i64 - 1, (cx + r).ceil() as i64 + 1);
        let (y0, y1) = ((cy - r).floor() as i64 - 1, (cy + r).ceil() as i64 + 1);
        for y in y0..=y1 {
            for x in x0..=x1 {
                let (dx, dy) = (x as f64 + 0.5 - cx, y as f64 + 0.5 - cy);
                let inside = match marker {
                    Marker::Circle => dx * dx + dy * dy <= r * r,
                    // Squares and diamonds look larger than a disc of the same width, so they
                    // are drawn a little smaller to give every marker the same weight.
                    Marker::Square => dx.abs().max(dy.abs()) <= 0.85 * r,
                    Marker::Diamond => dx.abs() + dy.abs() <= 1.15 * r,
                    // Point up: the half-width grows from 0 at the top to r at the bottom.
                    Marker::Triangle => dy >= -r && dy <= 0.8 * r && dx.abs() <= (dy + r) / 1.8,
                };
                if inside {
                    self.put(x, y, color);
                }
            }
        }
    }

    /// Draws `text` with its top-left corner at `(x, y)`, each font pixel `scale` × `scale`
    /// pixels; returns the width drawn ([`text_width`]).
    pub fn text(&mut self, x: i64, y: i64, text: &str, scale: usize, color: Rgb) -> usize {
        let s = scale.max(1) as i64;
        for (n, c) in text.chars().enumerate() {
            let left = x + (n * GLYPH_ADVANCE) as i64 * s;
            for (col, bits) in glyph(c).iter().enumerate() {
                for row in 0..GLYPH_HEIGHT {
                    if bits >> row & 1 == 1 {
                        let rect = Rect::new(left + col as i64 * s, y + row as i64 * s, s, s);
                        self.fill_rect(rect, color);
                    }
                }
            }
        }
        text_width(text, scale.max(1))
    }

    /// Writes the canvas as an RGB PNG, atomically (as `png::write_rgb` writes).
    ///
    /// Fails with [`IoError::Png`] for an empty canvas and [`IoError::Write`] if the file cannot
    /// be written.
    pub fn write_png(&self, path: &Path) -> Result<(), IoError> {
        lattice_gpu_formats::png::write_rgb(path, self.width, self.height, |stream| {
            stream.write_all(&self.rgb)
        })
    }
}

/// About `target` evenly spaced round numbers (1, 2 or 5 times a power of ten apart) from at or
/// below `lo` to at or above `hi`: tick positions a reader can interpolate between.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && (hi - lo).is_finite()) || hi < lo {
        return Vec::new();
    }
    let span = if hi > lo { hi - lo } else { hi.abs().max(1.0) };
    let power = (span / target.max(1) as f64).log10().floor() as i32;
    // Ticks are k × mantissa × 10^power, computed in one rounding (dividing for negative
    // powers) so that they print as 0.6 and not 0.6000000000000001.
    let tick = |k: i64, mantissa: f64, power: i32| {
        let units = k as f64 * mantissa;
        if power >= 0 {
            units * 10f64.powi(power)
        } else {
            units / 10f64.powi(-power)
        }
    };
    let intervals = |mantissa: f64, power: i32| {
        let step = tick(1, mantissa, power);
        let (first, last) = ((lo / step).floor() as i64, (hi / step).ceil() as i64);
        (first, last.max(first + 1))
    };
    // The step whose tick count comes closest to the target; on a tie the larger step, since
    // fewer labels crowd less.
    let (mantissa, power) = (power - 1..=power + 1)
        .flat_map(|p| [1.0, 2.0, 5.0].map(|m| (m, p)))
        .min_by_key(|&(m, p)| {
            let (first, last) = intervals(m, p);
            let miss = (last - first).abs_diff(target as i64);
            (miss, std::cmp::Reverse(p), std::cmp::Reverse(m as i64))
        })
        .unwrap_or((1.0, power));
    let (first, last) = intervals(mantissa, power);
    (first..=last).map(|k| tick(k, mantissa, power)).collect()
}

/// `v` with as many decimals as `step` (a tick spacing) needs, and none for whole numbers:
/// tick labels such as `0`, `2.5`, `0.05`, `12000`.
pub fn format_tick(v: f64, step: f64) -> String {
    let decimals = if step > 0.0 && step.is_finite() {
        (-step.log10().floor()).max(0.0) as usize
    } else {
        0
    };
    // Steps such as 2.5 need one more decimal than their power of ten says.
    let decimals = (decimals..decimals + 3)
        .find(|&d| {
            let scaled = step * 10f64.powi(d as i32);
            (scaled - scaled.round()).abs() < 1e-6 * scaled.max(1.0)
        })
        .unwrap_or(decimals);
    let s = format!("{v:.decimals$}");
    // "-0" reads as a different number from "0".
    if s.trim_start_matches('-')
        .chars()
        .all(|c| c == '0' || c == '.')
    {
        s.trim_start_matches('-').to_string()
    } else {
        s
    }
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
    pub width: f64,
    /// `(on, off)` pixels of a dashed line, or `None` for a solid one.
    pub dash: Option<(f64, f64)>,
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
            width: 2.0,
            dash: None,
            marker: Some(Marker::Circle),
        }
    }
}

/// A line chart: title, axes with numbered ticks and light grid lines, the series, and a legend
/// below the plot (below, so that it never hides data).
#[derive(Clone, Debug, Default)]
pub struct Chart {
    /// The title above the plot.
    pub title: String,
    /// The x axis label, under the tick numbers.
    pub x_label: String,
    /// The y axis label (often the unit), above the y axis.
    pub y_label: String,
    /// Where the x axis has ticks; empty: round numbers over the data's range.
    pub x_ticks: Vec<f64>,
    /// Whether the y axis starts at 0 whatever the data (rates and sizes), rather than near
    /// the smallest value.
    pub y_from_zero: bool,
    /// The lines, drawn in order (later ones on top) and listed in the legend in order.
    pub series: Vec<Series>,
    /// Reference lines (such as ideal scaling): drawn under every series, so that they never
    /// hide data, and listed after them in the legend.
    pub references: Vec<Series>,
    /// Columns of the legend; `None`: as many as fit.
    pub legend_columns: Option<usize>,
    /// The size of the title's font pixels (2 if 0).
    pub title_scale: usize,
    /// The size of the other text's font pixels (1 if 0).
    pub text_scale: usize,
}

/// Where a [`Chart`] put its plot: the pixel rectangle and the data ranges at its edges, to map
/// data to pixels (for annotations, or to check a picture).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlotArea {
    /// The plot's frame in canvas pixels.
    pub frame: Rect,
    /// The data x at the left and right end of the axis.
    pub x_range: (f64, f64),
    /// The data y at the bottom and top of the frame.
    pub y_range: (f64, f64),
}

/// Pixels between the frame and the first and last x tick, so that markers there are not cut by
/// the frame.
const X_INSET: f64 = 14.0;

impl PlotArea {
    /// The canvas pixel coordinates of data point `(x, y)`.
    pub fn to_pixel(&self, x: f64, y: f64) -> (f64, f64) {
        let f = self.frame;
        let (x0, x1) = self.x_range;
        let (y0, y1) = self.y_range;
        let inner = f.width as f64 - 2.0 * X_INSET;
        let px = f.x as f64 + X_INSET + (x - x0) / (x1 - x0) * inner;
        let py = f.bottom() as f64 - (y - y0) / (y1 - y0) * f.height as f64;
        (px, py)
    }
}

impl Chart {
    /// The series, then the reference lines: the legend's order.
    fn lines(&self) -> impl Iterator<Item = &Series> {
        self.series.iter().chain(&self.references)
    }

    /// Draws the chart into `area` of `canvas` and returns where its plot went.
    pub fn draw(&self, canvas: &mut Canvas, area: Rect) -> PlotArea {
        let ts = if self.title_scale == 0 {
            2
        } else {
            self.title_scale
        };
        let s = self.text_scale.max(1);
        let line_height = (GLYPH_HEIGHT * s) as i64;
        let gap = 6 * s as i64;
        let pad = 8;

        let points = || {
            self.lines()
                .flat_map(|s| s.points.iter().copied())
                .filter(|(x, y)| x.is_finite() && y.is_finite())
        };
        let x_range = {
            let (lo, hi) = points()
                .map(|p| p.0)
                .chain(self.x_ticks.iter().copied())
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
                    (lo.min(x), hi.max(x))
                });
            if !lo.is_finite() {
                (0.0, 1.0)
            } else if lo == hi {
                (lo - 1.0, hi + 1.0)
            } else {
                (lo, hi)
            }
        };
        let x_ticks: Vec<f64> = if self.x_ticks.is_empty() {
            nice_ticks(x_range.0, x_range.1, 6)
                .into_iter()
                .filter(|x| *x >= x_range.0 - 1e-9 && *x <= x_range.1 + 1e-9)
                .collect()
        } else {
            self.x_ticks.clone()
        };
        let x_step = min_gap(&x_ticks);
        let y_ticks = {
            let (mut lo, mut hi) = points()
                .map(|p| p.1)
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), y| {
                    (lo.min(y), hi.max(y))
                });
            if !lo.is_finite() {
                (lo, hi) = (0.0, 1.0);
            }
            if self.y_from_zero {
                lo = lo.min(0.0);
                hi = hi.max(0.0);
            }
            if lo == hi {
                hi = lo + lo.abs().max(1.0);
            }
            // Room above the highest point, so that its marker is not cut by the frame.
            let hi = hi + 0.02 * (hi - lo);
            let ticks = nice_ticks(lo, hi, 6);
            // Only a range beyond f64 (data near its largest values) has no ticks; an axis
            // without numbers then beats a panic.
            if ticks.len() < 2 || !ticks.iter().all(|t| t.is_finite()) {
                vec![lo, hi]
            } else {
                ticks
            }
        };
        let y_range = (y_ticks[0], y_ticks[y_ticks.len() - 1]);
        let y_step = min_gap(&y_ticks);
        let y_labels: Vec<String> = y_ticks.iter().map(|&v| format_tick(v, y_step)).collect();

        // The legend's size decides how much height the plot gets, so it is laid out first.
        let swatch = 28 * s as i64;
        let legend: Vec<&Series> = self.lines().filter(|s| !s.label.is_empty()).collect();
        let entry_width = legend
            .iter()
            .map(|e| text_width(&e.label, s) as i64)
            .max()
            .unwrap_or(0)
            + swatch
            + 3 * gap;
        let fit = ((area.width - 2 * pad) / entry_width.max(1)).max(1) as usize;
        let columns = self
            .legend_columns
            .unwrap_or(fit)
            .clamp(1, legend.len().max(1));
        let rows = legend.len().div_ceil(columns) as i64;
        let row_height = line_height + 4 * s as i64;
        let legend_height = rows * row_height;

        let title_height = (GLYPH_HEIGHT * ts) as i64;
        let y_label_width = y_labels
            .iter()
            .map(|l| text_width(l, s) as i64)
            .max()
            .unwrap_or(0);
        let left = area.x + pad + y_label_width + gap;
        let top = area.y + pad + title_height + gap + line_height + gap;
        let bottom = area.bottom()
            - pad
            - legend_height
            - gap
            - if self.x_label.is_empty() {
                0
            } else {
                line_height + gap
            }
            - line_height
            - gap;
        let frame = Rect::new(
            left,
            top,
            (area.right() - pad - left).max(1),
            (bottom - top).max(1),
        );
        let plot = PlotArea {
            frame,
            x_range,
            y_range,
        };

        // Title, centred over the panel.
        let tw = text_width(&self.title, ts) as i64;
        canvas.text(
            area.x + (area.width - tw) / 2,
            area.y + pad,
            &self.title,
            ts,
            BLACK,
        );
        canvas.text(
            frame.x - y_label_width - gap,
            frame.y - gap - line_height,
            &self.y_label,
            s,
            BLACK,
        );

        for (v, label) in y_ticks.iter().zip(&y_labels) {
            let (_, py) = plot.to_pixel(x_range.0, *v);
            let py = (py.round() as i64).min(frame.bottom() - 1);
            for x in frame.x..frame.right() {
                canvas.put(x, py, LIGHT_GREY);
            }
            canvas.fill_rect(Rect::new(frame.x - 4, py, 4, 1), BLACK);
            let w = text_width(label, s) as i64;
            canvas.text(frame.x - 6 - w, py - line_height / 2, label, s, BLACK);
        }
        for &v in &x_ticks {
            let (px, _) = plot.to_pixel(v, y_range.0);
            let px = px.round() as i64;
            canvas.fill_rect(Rect::new(px, frame.bottom(), 1, 4), BLACK);
            let label = format_tick(v, x_step);
            let w = text_width(&label, s) as i64;
            canvas.text(px - w / 2, frame.bottom() + gap, &label, s, BLACK);
        }
        if !self.x_label.is_empty() {
            let w = text_width(&self.x_label, s) as i64;
            canvas.text(
                frame.x + (frame.width - w) / 2,
                frame.bottom() + gap + line_height + gap,
                &self.x_label,
                s,
                BLACK,
            );
        }
        canvas.stroke_rect(frame, BLACK);

        for series in self.references.iter().chain(&self.series) {
            let pixels: Vec<(f64, f64)> = series
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|&(x, y)| plot.to_pixel(x, y))
                .collect();
            canvas.polyline(&pixels, series.width, series.dash, series.color);
            if let Some(m) = series.marker {
                for &p in &pixels {
                    canvas.marker(p, m, 4.0 + 2.0 * series.width, series.color);
                }
            }
        }

        let legend_top = area.bottom() - pad - legend_height;
        for (i, series) in legend.iter().enumerate() {
            let (col, row) = ((i % columns) as i64, (i / columns) as i64);
            let x = frame.x + col * entry_width;
            let y = legend_top + row * row_height;
            let mid = (y + line_height / 2) as f64 + 0.5;
            canvas.polyline(
                &[(x as f64, mid), ((x + swatch) as f64, mid)],
                series.width,
                series.dash,
                series.color,
            );
            if let Some(m) = series.marker {
                let at = ((x + swatch / 2) as f64, mid);
                canvas.marker(at, m, 4.0 + 2.0 * series.width, series.color);
            }
            canvas.text(x + swatch + gap, y, &series.label, s, BLACK);
        }
        plot
    }
}

/// The smallest distance between neighbouring ticks (which decides their labels' decimals).
fn min_gap(ticks: &[f64]) -> f64 {
    ticks
        .windows(2)
        .map(|w| (w[1] - w[0]).abs())
        .filter(|d| *d > 0.0)
        .fold(f64::INFINITY, f64::min)
        .min(1.0e300)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A fresh, empty directory for the test `name`.
    fn scratch_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("lattice-plot-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Decodes a PNG that must be 8-bit RGB: width, height and RGB bytes.
    fn decode(path: &Path) -> (u32, u32, Vec<u8>) {
        let decoder = png::Decoder::new(std::fs::File::open(path).unwrap());
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgb);
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
    }

    /// The sorted file names in `dir`.
    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    const RED: Rgb = [214, 39, 40];

    fn chart() -> Chart {
        Chart {
            title: "SCALING TEST".into(),
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
                dash: Some((6.0, 4.0)),
                marker: None,
                ..Series::new("ideal", vec![(1.0, 10.0), (8.0, 80.0)], GREY)
            }],
            ..Chart::default()
        }
    }

    #[test]
    fn chart_decodes_as_png_of_the_canvas_size() {
        let dir = scratch_dir("plot-size");
        let path = dir.join("chart.png");
        let mut canvas = Canvas::new(640, 480, WHITE);
        chart().draw(&mut canvas, Rect::new(0, 0, 640, 480));
        canvas.write_png(&path).unwrap();
        let (w, h, rgb) = decode(&path);
        assert_eq!((w, h), (640, 480));
        assert_eq!(rgb, canvas.rgb());
        // Drawn on, not left blank; mostly white still.
        let white = rgb.chunks(3).filter(|p| *p == WHITE).count();
        assert!(white < 640 * 480 && white > 640 * 480 / 2, "{white}");
        assert_eq!(entries(&dir), ["chart.png"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lines_follow_their_data() {
        let mut canvas = Canvas::new(640, 480, WHITE);
        let plot = chart().draw(&mut canvas, Rect::new(0, 0, 640, 480));
        assert_eq!(plot.y_range.0, 0.0);
        assert!(
            plot.y_range.1 >= 80.0 && plot.y_range.1 <= 100.0,
            "{plot:?}"
        );
        // y up: the rising line has red in the frame's top-right quarter (60 of at most 100 at
        // x = 8) and none in its top-left one.
        let f = plot.frame;
        let red_in = |x0: i64, x1: i64, y0: i64, y1: i64| {
            (y0..y1).any(|y| (x0..x1).any(|x| canvas.pixel(x, y) == Some(RED)))
        };
        let (mid_x, mid_y) = (f.x + f.width / 2, f.y + f.height / 2);
        assert!(red_in(mid_x, f.right(), f.y, mid_y));
        assert!(!red_in(f.x, mid_x, f.y, mid_y));
        // Every sample along each segment of the red line, ends (markers) included, is red
        // within a pixel of where the data put it.
        let data = [(1.0, 10.0), (2.0, 19.0), (4.0, 35.0), (8.0, 60.0)];
        for pair in data.windows(2) {
            let (a, b) = (
                plot.to_pixel(pair[0].0, pair[0].1),
                plot.to_pixel(pair[1].0, pair[1].1),
            );
            for i in 0..=20 {
                let t = f64::from(i) / 20.0;
                let (x, y) = (a.0 + t * (b.0 - a.0), a.1 + t * (b.1 - a.1));
                let near = (-1..=1).any(|dy| {
                    (-1..=1).any(|dx| {
                        canvas.pixel(x.floor() as i64 + dx, y.floor() as i64 + dy) == Some(RED)
                    })
                });
                assert!(near, "no red near ({x:.1}, {y:.1}) between {a:?} and {b:?}");
            }
        }
        // Far from the line there is no red: a point of the ideal's range the data never reach.
        let (x, y) = plot.to_pixel(8.0, 80.0);
        assert_ne!(canvas.pixel(x as i64, y as i64), Some(RED));
        // The dashed ideal line has both grey and gaps along it.
        let (a, b) = (plot.to_pixel(1.5, 15.0), plot.to_pixel(7.5, 75.0));
        let samples: Vec<Option<Rgb>> = (0..200)
            .map(|i| {
                let t = f64::from(i) / 199.0;
                canvas.pixel(
                    (a.0 + t * (b.0 - a.0)) as i64,
                    (a.1 + t * (b.1 - a.1)) as i64,
                )
            })
            .collect();
        let grey = samples.iter().filter(|p| **p == Some(GREY)).count();
        assert!(grey > 50 && grey < 190, "{grey} of 200 samples grey");
    }

    #[test]
    fn title_is_drawn_where_it_belongs() {
        let mut canvas = Canvas::new(640, 480, WHITE);
        let plot = chart().draw(&mut canvas, Rect::new(0, 0, 640, 480));
        let title_w = text_width("SCALING TEST", 2) as i64;
        let x0 = (640 - title_w) / 2;
        let inked = |x0: i64, x1: i64, y0: i64, y1: i64| {
            (y0..y1)
                .flat_map(|y| (x0..x1).map(move |x| (x, y)))
                .filter(|&(x, y)| canvas.pixel(x, y) == Some(BLACK))
                .count()
        };
        // The title's band holds black pixels between its ends and none beside them.
        let band = (0, plot.frame.y - 2 * GLYPH_HEIGHT as i64);
        assert!(inked(x0, x0 + title_w, band.0, band.1.min(24)) > 100);
        assert_eq!(inked(0, x0 - 1, 0, 22), 0);
        assert_eq!(inked(x0 + title_w + 1, 640, 0, 22), 0);
        // The first glyph is an S at twice the font's size, 8 pixels down: its top row (font
        // row 0) is ink in columns 1 to 4, not in column 0 nor in the blank column after it.
        assert_eq!(canvas.pixel(x0 + 2, 9), Some(BLACK));
        assert_eq!(canvas.pixel(x0 + 9, 8), Some(BLACK));
        assert_eq!(canvas.pixel(x0 + 10, 9), Some(WHITE));
        assert_eq!(canvas.pixel(x0, 9), Some(WHITE));
    }

    #[test]
    fn text_matches_the_font() {
        let mut canvas = Canvas::new(20, 10, WHITE);
        let w = canvas.text(1, 1, "1-", 1, BLACK);
        assert_eq!(w, 11);
        // '1': column 2 is the full stem, rows 0 to 6.
        for row in 0..7 {
            assert_eq!(canvas.pixel(3, 1 + row), Some(BLACK), "row {row}");
        }
        // '-': row 3 of all five columns, nothing above it.
        for col in 0..5 {
            assert_eq!(canvas.pixel(7 + col, 4), Some(BLACK));
            assert_eq!(canvas.pixel(7 + col, 3), Some(WHITE));
        }
        // Characters outside the font are drawn as '?', not dropped.
        let mut a = Canvas::new(8, 9, WHITE);
        let mut b = Canvas::new(8, 9, WHITE);
        a.text(1, 1, "é", 1, BLACK);
        b.text(1, 1, "?", 1, BLACK);
        assert_eq!(a.rgb(), b.rgb());
        assert_ne!(a.rgb(), Canvas::new(8, 9, WHITE).rgb());
    }

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(
            nice_ticks(0.0, 93.0, 6),
            [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
        );
        assert_eq!(nice_ticks(0.0, 1.0, 5), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(
            nice_ticks(0.25, 0.95, 7),
            [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
        );
        let t = nice_ticks(0.0, 12345.0, 6);
        assert_eq!((t[0], t[t.len() - 1], t[1] - t[0]), (0.0, 14000.0, 2000.0));
        assert_eq!(format_tick(0.6000000000000001, 0.2), "0.6");
        assert_eq!(format_tick(12000.0, 2000.0), "12000");
        assert_eq!(format_tick(2.5, 2.5), "2.5");
        assert_eq!(format_tick(-0.0, 1.0), "0");
        assert_eq!(format_tick(4.0, 1.0), "4");
    }

    #[test]
    fn empty_canvas_is_refused() {
        let dir = scratch_dir("plot-empty");
        let err = Canvas::new(0, 10, WHITE)
            .write_png(&dir.join("e.png"))
            .unwrap_err();
        assert!(matches!(err, IoError::Png { .. }), "{err}");
        assert!(err.to_string().contains("empty"), "{err}");
        assert!(entries(&dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }
}
