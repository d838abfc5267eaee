//! PNG pictures of 2-D slices of a field, for a quick look during or after a run without
//! leaving the terminal for a plotting script.
//!
//! Pictures follow the physicist's convention: row 0 of the data is the bottom of the picture
//! (y up), as `matplotlib.pyplot.imshow(a, origin='lower')` draws it. The colours follow
//! matplotlib too: viridis, or grey. Non-finite values (NaN, ±inf) are drawn magenta, a colour
//! neither map uses, so a blow-up is visible at a glance.

use std::io;
use std::path::Path;

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

/// [`write_png_scaled`] never enlarges a picture beyond this many pixels a side.
pub const MAX_SCALED_SIDE: usize = 8192;

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

/// Writes a `width` × `height` slice as an RGB PNG, one pixel per value, atomically.
///
/// `data` is row-major, `width` values per row, and row 0 is the bottom of the picture.
/// Colours span `range` (values outside it get the end colours) or, if `None`, the minimum and
/// maximum of the finite values; a constant field gets the middle colour, non-finite values
/// [`NON_FINITE_COLOR`].
///
/// Fails with [`IoError::Png`] if the size is zero or does not match `data.len()`, or if `range`
/// is not finite with `lo <= hi`.
pub fn write_png(
    path: &Path,
    width: usize,
    height: usize,
    data: &[f64],
    range: Option<(f64, f64)>,
    map: ColorMap,
) -> Result<(), IoError> {
    write_png_scaled(path, width, height, data, range, map, 1)
}

/// Like [`write_png`], but enlarges small grids so that they can be seen: each value becomes a
/// square of `k` × `k` pixels, with the smallest integer `k` that makes the shorter side at least
/// `min_pixels` (256 suits a screen), except that no side grows beyond [`MAX_SCALED_SIDE`]
/// pixels because of the scaling.
pub fn write_png_scaled(
    path: &Path,
    width: usize,
    height: usize,
    data: &[f64],
    range: Option<(f64, f64)>,
    map: ColorMap,
    min_pixels: usize,
) -> Result<(), IoError> {
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
    let (lo, hi) = match range {
        Some((lo, hi)) if lo.is_finite() && hi.is_finite() && lo <= hi => (lo, hi),
        Some((lo, hi)) => {
            return Err(bad(format!(
                "the colour range ({lo}, {hi}) is not valid: it needs finite bounds with \
                 low <= high, or None to use the data's minimum and maximum"
            )))
        }
        None => finite_min_max(data),
    };

    let shorter = width.min(height);
    let longer = width.max(height);
    let scale = min_pixels
        .div_ceil(shorter)
        .min(MAX_SCALED_SIDE / longer)
        .max(1);
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

    write_rgb(path, width * scale, height * scale, |stream| {
        let mut pixels = Vec::with_capacity(width * scale * 3);
        // PNG rows run top to bottom; ours bottom to top.
        for row in data.chunks_exact(width).rev() {
            pixels.clear();
            for &v in row {
                let rgb = color(v);
                for _ in 0..scale {
                    pixels.extend_from_slice(&rgb);
                }
            }
            for _ in 0..scale {
                stream.write_all(&pixels)?;
            }
        }
        Ok(())
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

    fn pixel(rgb: &[u8], width: u32, x: u32, y_from_top: u32) -> [u8; 3] {
        let i = 3 * (y_from_top * width + x) as usize;
        [rgb[i], rgb[i + 1], rgb[i + 2]]
    }

    #[test]
    fn gradient_is_flipped_and_spans_viridis() {
        let dir = scratch_dir("gradient");
        let path = dir.join("g.png");
        let (w, h) = (5, 3);
        // Increasing along x and y: row 0 (bottom) holds the minimum, the last row the maximum.
        let data: Vec<f64> = (0..w * h).map(|i| i as f64).collect();
        write_png(&path, w, h, &data, None, ColorMap::Viridis).unwrap();
        let (pw, ph, rgb) = decode(&path);
        assert_eq!((pw, ph), (5, 3));
        let range = (w * h - 1) as f64;
        let last_row_first = data[(h - 1) * w];
        assert_eq!(
            pixel(&rgb, pw, 0, 0),
            ColorMap::Viridis.color(last_row_first / range)
        );
        assert_eq!(pixel(&rgb, pw, 0, ph - 1), VIRIDIS[0]);
        assert_eq!(pixel(&rgb, pw, pw - 1, 0), VIRIDIS[32]);
        assert_eq!(VIRIDIS[0], [0x44, 0x01, 0x54]);
        assert_eq!(VIRIDIS[32], [0xfd, 0xe7, 0x25]);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn range_constant_non_finite_and_grey() {
        let dir = scratch_dir("special");
        let path = dir.join("s.png");
        let data = [-5.0, 0.5, f64::NAN, f64::INFINITY, 9.0, 1.0];
        write_png(&path, 3, 2, &data, Some((0.0, 1.0)), ColorMap::Grey).unwrap();
        let (pw, _, rgb) = decode(&path);
        // Bottom row (y_from_top 1) is data row 0.
        assert_eq!(pixel(&rgb, pw, 0, 1), [0; 3]);
        assert_eq!(pixel(&rgb, pw, 1, 1), [128; 3]);
        assert_eq!(pixel(&rgb, pw, 2, 1), NON_FINITE_COLOR);
        assert_eq!(pixel(&rgb, pw, 0, 0), NON_FINITE_COLOR);
        assert_eq!(pixel(&rgb, pw, 1, 0), [255; 3]);
        assert_eq!(pixel(&rgb, pw, 2, 0), [255; 3]);

        write_png(&path, 2, 1, &[3.0, 3.0], None, ColorMap::Viridis).unwrap();
        let (_, _, rgb) = decode(&path);
        assert_eq!(&rgb[..3], &VIRIDIS[16]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn small_grids_are_scaled_up() {
        let dir = scratch_dir("scaled");
        let path = dir.join("s.png");
        let data = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0];
        write_png_scaled(&path, 3, 2, &data, None, ColorMap::Grey, 256).unwrap();
        let (pw, ph, rgb) = decode(&path);
        assert_eq!((pw, ph), (384, 256));
        // Top-left square is data row 1, value 3.0 of 0..5.
        assert_eq!(pixel(&rgb, pw, 127, 127), [153; 3]);
        assert_eq!(pixel(&rgb, pw, 128, 255), [51; 3]);

        let long: Vec<f64> = vec![0.0; 4000];
        write_png_scaled(&path, 4000, 1, &long, None, ColorMap::Grey, 256).unwrap();
        assert_eq!(decode(&path).0, 8000);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_sizes_and_ranges_are_refused() {
        let dir = scratch_dir("errors");
        let path = dir.join("e.png");
        let problem = |err: IoError| match err {
            IoError::Png { problem, .. } => problem,
            other => panic!("expected IoError::Png, got {other:?}"),
        };
        let msg = problem(write_png(&path, 3, 3, &[0.0; 8], None, ColorMap::Viridis).unwrap_err());
        assert!(
            msg.contains("8 values cannot fill a 3 × 3 picture, which needs 9"),
            "{msg}"
        );
        let msg = problem(write_png(&path, 0, 3, &[], None, ColorMap::Viridis).unwrap_err());
        assert!(msg.contains("empty"), "{msg}");
        let err = write_png(&path, 1, 1, &[0.0], Some((1.0, 0.0)), ColorMap::Grey).unwrap_err();
        assert!(problem(err).contains("colour range (1, 0)"));
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
        assert_eq!(ColorMap::default(), ColorMap::Viridis);
    }
}
