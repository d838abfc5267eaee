//! Legacy VTK files of fields on the whole grid, for ParaView and VisIt.
//!
//! The legacy format is the simplest one ParaView reads without plugins: a few text lines naming
//! the grid, then each field as raw big-endian float32 values, x fastest (the order of the
//! simulation's cell index `x + nx*(y + ny*z)`). Binary keeps files at 4 bytes a value and
//! exact, which ASCII would not be.
//!
//! Written by hand: the header is five lines, and the writer streams each field from the caller's
//! slice in chunks, where the VTK crate (vtkio) writes from its own model of the whole data set,
//! which would hold a second copy of every field.

use std::io;
use std::path::Path;

use crate::{write_atomically, IoError};

/// Values converted per write, so that huge fields need no second copy in memory.
const CHUNK_VALUES: usize = 1 << 18;

/// Readers of the legacy format keep at most 256 characters of the title line.
const MAX_TITLE_BYTES: usize = 255;

/// One field of a VTK file.
#[derive(Clone, Copy, Debug)]
pub enum VtkField<'a> {
    /// One value a point.
    Scalars {
        /// The name ParaView shows; non-empty, without whitespace.
        name: &'a str,
        /// `nx*ny*nz` values, x fastest.
        data: &'a [f32],
    },
    /// Three components a point.
    Vectors {
        /// The name ParaView shows; non-empty, without whitespace.
        name: &'a str,
        /// `nx*ny*nz` vectors, x fastest.
        data: &'a [[f32; 3]],
    },
}

impl VtkField<'_> {
    fn name(&self) -> &str {
        match self {
            VtkField::Scalars { name, .. } | VtkField::Vectors { name, .. } => name,
        }
    }

    /// The number of points the field covers.
    fn len(&self) -> usize {
        match self {
            VtkField::Scalars { data, .. } => data.len(),
            VtkField::Vectors { data, .. } => data.len(),
        }
    }
}

/// Writes a legacy binary VTK file (STRUCTURED_POINTS, POINT_DATA, big-endian f32, x fastest)
/// that ParaView opens.
///
/// The grid has `dims = [nx, ny, nz]` points at unit spacing from the origin. Line breaks in
/// `title` become spaces and it is cut to 255 bytes, since the format allows one line of 256.
/// The file is written atomically.
///
/// Fails with [`IoError::Vtk`], before anything is written, if there is no field, a dimension is
/// zero, a field does not have `nx*ny*nz` entries, or a name is empty, holds whitespace or
/// repeats another field's name.
pub fn write_vtk(
    path: &Path,
    dims: [usize; 3],
    title: &str,
    fields: &[VtkField],
) -> Result<(), IoError> {
    let bad = |problem: String| IoError::Vtk {
        path: path.to_path_buf(),
        problem,
    };
    let [nx, ny, nz] = dims;
    let points = check_dims(dims).map_err(bad)?;
    if fields.is_empty() {
        return Err(bad(
            "no fields given; pass at least one VtkField::Scalars or VtkField::Vectors".into(),
        ));
    }
    for (i, field) in fields.iter().enumerate() {
        let name = field.name();
        if name.is_empty() {
            return Err(bad(format!(
                "field {i} has an empty name; give every field a name such as \"density\""
            )));
        }
        if name.chars().any(char::is_whitespace) {
            return Err(bad(format!(
                "field name {name:?} contains whitespace, which ends a name in the VTK header; \
                 use underscores instead"
            )));
        }
        if fields[..i].iter().any(|other| other.name() == name) {
            return Err(bad(format!(
                "two fields are named {name:?}; ParaView would show only one, so give each \
                 field its own name"
            )));
        }
        if field.len() != points {
            return Err(bad(format!(
                "field {name:?} has {} entries but the {nx}x{ny}x{nz} grid has {points} \
                 points; pass one entry per point, x fastest, or the grid's dims",
                field.len()
            )));
        }
    }

    let header = format!(
        "# vtk DataFile Version 3.0\n{}\nBINARY\nDATASET STRUCTURED_POINTS\n\
         DIMENSIONS {nx} {ny} {nz}\nORIGIN 0 0 0\nSPACING 1 1 1\nPOINT_DATA {points}\n",
        one_line(title)
    );
    write_atomically(path, |out| {
        out.write_all(header.as_bytes())?;
        for field in fields {
            match field {
                VtkField::Scalars { name, data } => {
                    write!(out, "SCALARS {name} float 1\nLOOKUP_TABLE default\n")?;
                    write_be(out, data.iter().copied())?;
                }
                VtkField::Vectors { name, data } => {
                    writeln!(out, "VECTORS {name} float")?;
                    write_be(out, data.iter().flatten().copied())?;
                }
            }
            // ParaView's reader expects the next keyword on a line of its own.
            out.write_all(b"\n")?;
        }
        Ok(())
    })
}

/// The number of points, or what is wrong with `dims`.
fn check_dims(dims: [usize; 3]) -> Result<usize, String> {
    let [nx, ny, nz] = dims;
    if dims.contains(&0) {
        return Err(format!(
            "the grid {nx}x{ny}x{nz} has no points; every dimension must be at least 1"
        ));
    }
    nx.checked_mul(ny)
        .and_then(|p| p.checked_mul(nz))
        .ok_or_else(|| format!("the grid {nx}x{ny}x{nz} has too many points to count"))
}

/// `title` as a single header line: line breaks become spaces, and it is cut (at a character
/// boundary) to what readers keep.
fn one_line(title: &str) -> String {
    let mut line: String = title
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    if line.len() > MAX_TITLE_BYTES {
        let mut end = MAX_TITLE_BYTES;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
    }
    line
}

/// Writes `values` as big-endian float32, a chunk at a time.
fn write_be(out: &mut dyn io::Write, values: impl Iterator<Item = f32>) -> io::Result<()> {
    let mut buf = Vec::with_capacity(4 * CHUNK_VALUES);
    for v in values {
        buf.extend_from_slice(&v.to_be_bytes());
        if buf.len() == buf.capacity() {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    out.write_all(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    use crate::test_support::{entries, scratch_dir};

    /// Splits a file into its first `lines` text lines and the bytes after them.
    fn split_lines(bytes: &[u8], lines: usize) -> (Vec<String>, &[u8]) {
        let mut rest = bytes;
        let mut out = Vec::new();
        for _ in 0..lines {
            let end = rest.iter().position(|&b| b == b'\n').expect("a text line");
            out.push(String::from_utf8(rest[..end].to_vec()).unwrap());
            rest = &rest[end + 1..];
        }
        (out, rest)
    }

    fn be_floats(bytes: &[u8]) -> Vec<f32> {
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_be_bytes(b.try_into().unwrap()))
            .collect()
    }

    fn problem(err: IoError) -> String {
        match err {
            IoError::Vtk { problem, .. } => problem,
            other => panic!("expected IoError::Vtk, got {other}"),
        }
    }

    #[test]
    fn header_and_big_endian_data_read_back() {
        let dir = scratch_dir("vtk-write");
        let path = dir.join("field.vtk");
        let dims = [3, 2, 2];
        let points = 12;
        let rho: Vec<f32> = (0..points).map(|i| 1.0 + i as f32 / 8.0).collect();
        let u: Vec<[f32; 3]> = (0..points).map(|i| [i as f32, -(i as f32), 0.5]).collect();
        let fields = [
            VtkField::Scalars {
                name: "rho",
                data: &rho,
            },
            VtkField::Vectors {
                name: "u",
                data: &u,
            },
        ];
        write_vtk(&path, dims, "step 10\nof the cavity", &fields).unwrap();
        let bytes = fs::read(&path).unwrap();

        let (header, rest) = split_lines(&bytes, 10);
        assert_eq!(
            header,
            [
                "# vtk DataFile Version 3.0",
                "step 10 of the cavity",
                "BINARY",
                "DATASET STRUCTURED_POINTS",
                "DIMENSIONS 3 2 2",
                "ORIGIN 0 0 0",
                "SPACING 1 1 1",
                "POINT_DATA 12",
                "SCALARS rho float 1",
                "LOOKUP_TABLE default",
            ]
        );
        // 1.125 is 0x3F900000: big-endian puts the sign and exponent byte first.
        assert_eq!(&rest[4..8], &[0x3F, 0x90, 0x00, 0x00]);
        assert_eq!(be_floats(&rest[..4 * points]), rho);
        assert_eq!(rest[4 * points], b'\n');

        let (vector_header, rest) = split_lines(&rest[4 * points + 1..], 1);
        assert_eq!(vector_header, ["VECTORS u float"]);
        let flat: Vec<f32> = u.iter().flatten().copied().collect();
        assert_eq!(be_floats(&rest[..12 * points]), flat);
        assert_eq!(&rest[12 * points..], b"\n");
        assert_eq!(entries(&dir), ["field.vtk"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn wrong_length_is_refused_and_leaves_no_file() {
        let dir = scratch_dir("vtk-length");
        let path = dir.join("bad.vtk");
        let data = vec![0.0f32; 11];
        let fields = [VtkField::Scalars {
            name: "rho",
            data: &data,
        }];
        let msg = problem(write_vtk(&path, [3, 2, 2], "t", &fields).unwrap_err());
        assert!(
            msg.contains("11 entries") && msg.contains("12 points"),
            "{msg}"
        );
        assert!(!path.exists());
        assert!(entries(&dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refused_write_keeps_the_old_file() {
        let dir = scratch_dir("vtk-keep");
        let path = dir.join("f.vtk");
        let good = vec![1.0f32; 8];
        let fields = [VtkField::Scalars {
            name: "rho",
            data: &good,
        }];
        write_vtk(&path, [2, 2, 2], "first", &fields).unwrap();
        let before = fs::read(&path).unwrap();
        let short = [[0.0f32; 3]; 7];
        let fields = [VtkField::Vectors {
            name: "u",
            data: &short,
        }];
        let err = write_vtk(&path, [2, 2, 2], "second", &fields).unwrap_err();
        assert!(err.to_string().contains("cannot write VTK"), "{err}");
        assert_eq!(fs::read(&path).unwrap(), before);
        assert_eq!(entries(&dir), ["f.vtk"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_names_empty_fields_and_empty_grids_are_refused() {
        let dir = scratch_dir("vtk-checks");
        let path = dir.join("x.vtk");
        let data = [0.0f32; 4];
        let scalars = |name| VtkField::Scalars { name, data: &data };
        let dims = [2, 2, 1];

        let msg = problem(write_vtk(&path, dims, "t", &[]).unwrap_err());
        assert!(msg.contains("at least one"), "{msg}");
        let msg = problem(write_vtk(&path, dims, "t", &[scalars("")]).unwrap_err());
        assert!(msg.contains("empty name"), "{msg}");
        let msg = problem(write_vtk(&path, dims, "t", &[scalars("wall speed")]).unwrap_err());
        assert!(
            msg.contains("whitespace") && msg.contains("underscores"),
            "{msg}"
        );
        let msg = problem(write_vtk(&path, dims, "t", &[scalars("a"), scalars("a")]).unwrap_err());
        assert!(msg.contains("two fields"), "{msg}");
        let msg = problem(write_vtk(&path, [2, 0, 1], "t", &[scalars("a")]).unwrap_err());
        assert!(msg.contains("at least 1"), "{msg}");
        assert!(entries(&dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn title_becomes_one_short_line() {
        assert_eq!(one_line("a\r\nb\nc"), "a  b c");
        let long = "é".repeat(200);
        let line = one_line(&long);
        assert!(line.len() <= MAX_TITLE_BYTES && line.len() >= MAX_TITLE_BYTES - 1);
        assert!(long.starts_with(&line));
    }

    #[test]
    fn large_fields_cross_chunk_boundaries_intact() {
        let dir = scratch_dir("vtk-large");
        let path = dir.join("big.vtk");
        let dims = [64, 64, 65];
        let data: Vec<f32> = (0..64 * 64 * 65).map(|i| i as f32).collect();
        assert!(data.len() > CHUNK_VALUES);
        let fields = [VtkField::Scalars {
            name: "i",
            data: &data,
        }];
        write_vtk(&path, dims, "big", &fields).unwrap();
        let bytes = fs::read(&path).unwrap();
        let (_, rest) = split_lines(&bytes, 10);
        assert_eq!(rest.len(), 4 * data.len() + 1);
        assert_eq!(be_floats(&rest[..4 * data.len()]), data);
        fs::remove_dir_all(&dir).unwrap();
    }
}
