//! The parsers of option values the binaries share: sizes, block shapes, `--checkpoint-every`.

/// Parses a block shape `XxY` of positive numbers.
pub fn parse_block(s: &str) -> std::result::Result<(u32, u32), String> {
    let dims = parse_dims(s)?;
    match dims.as_slice() {
        [x, y] if *x > 0 && *y > 0 => Ok((*x as u32, *y as u32)),
        _ => Err(format!(
            "block shape `{s}` must be two positive numbers, XxY (e.g. 32x8)"
        )),
    }
}

/// Parses `N`, `NxM` or `NxMxK` into positive integers.
pub fn parse_dims(s: &str) -> std::result::Result<Vec<usize>, String> {
    s.split(['x', 'X'])
        .map(|p| match p.trim().parse::<usize>() {
            Ok(v) if v > 0 && v <= 1 << 20 => Ok(v),
            _ => Err(format!(
                "`{s}` is not a size: use positive numbers below 2^20 such as 128 or 64x64x256"
            )),
        })
        .collect()
}

/// A 3-D grid size from `N` (a cube) or `NXxNYxNZ`.
pub fn parse_size3(s: &str) -> std::result::Result<[usize; 3], String> {
    match parse_dims(s)?.as_slice() {
        [n] => Ok([*n; 3]),
        [x, y, z] => Ok([*x, *y, *z]),
        _ => Err(format!(
            "size `{s}` must be N or NXxNYxNZ (e.g. 256 or 8x512x512)"
        )),
    }
}

/// `--checkpoint-every`: a number of steps, or a time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Every {
    /// Every this many steps.
    Steps(usize),
    /// Every this many seconds.
    Seconds(f64),
}

/// Parses `--checkpoint-every`: `N` steps, or a time `Ns`, `Nm` or `Nh` (seconds, minutes, hours).
pub fn parse_every(s: &str) -> std::result::Result<Every, String> {
    let bad = || {
        format!(
            "`{s}` is neither a number of steps nor a time: give e.g. 1000 (steps), 30s, 10m or 2h"
        )
    };
    if let Ok(n) = s.parse::<usize>() {
        return if n > 0 {
            Ok(Every::Steps(n))
        } else {
            Err(bad())
        };
    }
    let unit = match s.chars().last() {
        Some('s') => 1.0,
        Some('m') => 60.0,
        Some('h') => 3600.0,
        _ => return Err(bad()),
    };
    match s[..s.len() - 1].parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(Every::Seconds(v * unit)),
        _ => Err(bad()),
    }
}
