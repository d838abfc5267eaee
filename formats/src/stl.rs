//! STL surfaces, binary or ASCII: the triangles of a body's surface as CAD programs, scanners and
//! mesh editors (MeshLab, Blender, FreeCAD, OpenSCAD) export it, so that an obstacle of any shape can
//! come from the tool that drew it (the lattice Boltzmann solver voxelises it into a mask).
//!
//! STL is a bare list of triangles, each three vertices and a normal, in no unit and with no
//! connectivity: neighbours share a vertex only by having equal coordinates. A binary file is an
//! 80-byte header of free text, a little-endian `u32` triangle count and 50 bytes per triangle
//! (twelve `f32`: normal and vertices, then a 2-byte attribute); an ASCII file is
//! `solid NAME`, then `facet normal`, `outer loop`, three `vertex x y z`, `endloop`, `endfacet` per
//! triangle, then `endsolid`.
//!
//! # What stl_io does here, and what is written by hand
//!
//! [stl_io](https://crates.io/crates/stl_io) (0.11, the maintained STL reader and writer of the Rust
//! ecosystem, with no dependencies) parses the triangles of both kinds of file and writes binary ones.
//! It is handed bytes this module has checked, not the file, because on input that comes from
//! people and other programs it falls short of what every reader here promises (never a panic, never
//! an allocation the file does not justify, an error naming the file, the problem and the fix):
//! - it tells the kinds apart by whether the file starts with `solid `, but many exporters
//!   (SolidWorks among them) begin a binary file's free-text header with `solid`, which it then
//!   refuses as malformed ASCII;
//! - it trusts a binary file's triangle count: a count larger than the file ends in a generic
//!   "failed to fill whole buffer" after reading what is there, a smaller one silently drops the
//!   triangles after it, and an ASCII file that does not start with `solid ` (`solid` alone on its
//!   first line, which some exporters write) is read as binary, its text taken for a count and
//!   triangles;
//! - it reads only the first solid of an ASCII file that holds several (one per part), dropping
//!   the rest without a word;
//! - it lets through binary coordinates that are NaN or infinite;
//! - its errors name no file and no fix.
//!
//! So this module decides the kind itself: a file is binary when its length is exactly what its
//! count says (84 + 50 × count bytes: a truncated or padded file is refused with both numbers, before
//! anything is allocated for it), and ASCII when it does not fit that and starts with `solid` (text
//! only, no NUL byte). A binary file goes to stl_io with its header blanked, so that a header
//! starting with `solid` cannot mislead it; an ASCII file is cut into its solids, each handed over
//! on its own (with `solid` followed by a space, as stl_io wants), and the triangles of all of them
//! make the mesh. The checks of the coordinates and of an empty mesh, the count of open edges and
//! every message are this module's. Normals are not kept: the voxeliser does not need the surface's
//! orientation, and exporters' normals are often zero or stale. The file is read whole into memory
//! first, since the kind is decided from all of it; a binary file (50 bytes a triangle) is smaller
//! than the mesh made from it (72).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Cursor, ErrorKind, Read};
use std::path::Path;

use crate::{write_atomically, IoError};

/// A binary file's header: 80 bytes of free text, then the `u32` triangle count.
const BINARY_HEADER: usize = 80;

/// Bytes per triangle of a binary file: twelve `f32` and a 2-byte attribute.
const BINARY_TRIANGLE: u64 = 50;

/// What to do with a file that is broken in a way only its maker can mend.
const REEXPORT: &str = "export the surface again (binary STL is smaller and exact)";

/// A surface as a list of triangles, each three vertices `[x, y, z]`, in the file's units; neighbours
/// share a vertex by having equal coordinates, as in STL.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Mesh {
    /// The triangles, each its three vertices.
    pub triangles: Vec<[[f64; 3]; 3]>,
}

impl Mesh {
    /// The smallest box that holds every vertex: `(low corner, high corner)`. A mesh without triangles
    /// has the empty box, low corner `+inf` and high corner `-inf` on every axis.
    pub fn bounds(&self) -> ([f64; 3], [f64; 3]) {
        let mut lo = [f64::INFINITY; 3];
        let mut hi = [f64::NEG_INFINITY; 3];
        for p in self.triangles.iter().flatten() {
            for a in 0..3 {
                lo[a] = lo[a].min(p[a]);
                hi[a] = hi[a].max(p[a]);
            }
        }
        (lo, hi)
    }

    /// The edges not shared by exactly two triangles: 0 for a closed (watertight) surface. An edge of
    /// one triangle borders a hole; an edge of three or more is where surfaces meet or overlap, which
    /// leaves inside and outside undefined as much as a hole does.
    ///
    /// Edges are matched by the positions of their ends, vertices being equal where their coordinates
    /// are (as stl_io's `as_indexed_triangles` indexes them, except that `-0.0` equals `0.0` here).
    /// A triangle with two equal vertices has no area and is left out; its edges would pair up with
    /// each other and close what is open.
    pub fn open_edges(&self) -> usize {
        let mut vertices: HashMap<[u64; 3], usize> = HashMap::new();
        let mut edges: HashMap<(usize, usize), u32> = HashMap::new();
        for triangle in &self.triangles {
            let v = triangle.map(|p| {
                // Adding +0.0 turns -0.0 into 0.0, which the bits would tell apart.
                let key = p.map(|c| (c + 0.0).to_bits());
                let next = vertices.len();
                *vertices.entry(key).or_insert(next)
            });
            if v[0] == v[1] || v[1] == v[2] || v[2] == v[0] {
                continue;
            }
            for (a, b) in [(v[0], v[1]), (v[1], v[2]), (v[2], v[0])] {
                *edges.entry((a.min(b), a.max(b))).or_insert(0) += 1;
            }
        }
        edges.values().filter(|&&n| n != 2).count()
    }
}

/// Reads the STL file `path`, binary or ASCII (every solid of an ASCII file), as a [`Mesh`] in the
/// file's units and triangle order.
///
/// Fails with [`IoError::Read`] where the file cannot be read, and with [`IoError::Stl`], naming the
/// problem and the fix, where it is not a complete STL file (a binary file whose length does not match
/// its triangle count, malformed ASCII), holds no triangle, or has a coordinate that is NaN or
/// infinite. Never panics, whatever the bytes.
pub fn read_stl(path: &Path) -> Result<Mesh, IoError> {
    let bad = |problem: String| IoError::Stl {
        path: path.to_path_buf(),
        problem,
    };
    let bytes = read_file(path)?;
    let triangles = match binary_count(&bytes) {
        Some(count) => read_binary(bytes, count).map_err(bad)?,
        None if is_ascii_stl(&bytes) => read_ascii(&bytes).map_err(bad)?,
        None => return Err(bad(neither(&bytes))),
    };
    if triangles.is_empty() {
        return Err(bad(format!(
            "it holds no triangle; an empty surface bounds nothing: {REEXPORT}, with the body selected"
        )));
    }
    if let Some(n) = triangles
        .iter()
        .position(|t| t.iter().flatten().any(|c| !c.is_finite()))
    {
        return Err(bad(format!(
            "triangle {} of {} has a coordinate that is not a finite number ({:?}); {REEXPORT}, or \
             repair the mesh (e.g. MeshLab: Filters > Cleaning and Repairing)",
            n + 1,
            triangles.len(),
            triangles[n]
        )));
    }
    Ok(Mesh {
        triangles: triangles
            .into_iter()
            .map(|t| t.map(|p| p.map(f64::from)))
            .collect(),
    })
}

/// Writes `mesh` to `path` as a binary STL file (the normals from the vertices' order, by the
/// right-hand rule), atomically (see [`write_atomically`]). STL holds `f32`, so coordinates are
/// rounded to it.
///
/// Fails with [`IoError::Stl`], writing nothing, where a coordinate is not finite or beyond `f32`'s
/// range, or where the triangles are more than a binary file's `u32` count holds.
pub fn write_stl(path: &Path, mesh: &Mesh) -> Result<(), IoError> {
    let bad = |problem: String| IoError::Stl {
        path: path.to_path_buf(),
        problem,
    };
    if u32::try_from(mesh.triangles.len()).is_err() {
        return Err(bad(format!(
            "{} triangles are more than a binary STL file holds (2^32 - 1); split the surface",
            mesh.triangles.len()
        )));
    }
    let mut triangles = Vec::with_capacity(mesh.triangles.len());
    for (n, t) in mesh.triangles.iter().enumerate() {
        let vertices = t.map(|p| stl_io::Vertex::new(p.map(|c| c as f32)));
        if vertices.iter().any(|v| v.0.iter().any(|c| !c.is_finite())) {
            return Err(bad(format!(
                "cannot save triangle {} ({t:?}): STL holds finite f32 coordinates; scale the mesh \
                 or mend the triangle",
                n + 1
            )));
        }
        triangles.push(stl_io::Triangle {
            normal: stl_io::Normal::new(unit_normal(t)),
            vertices,
        });
    }
    write_atomically(path, |mut out| {
        stl_io::write_stl(&mut out, triangles.iter())
    })
}

/// The unit normal of `t` by the right-hand rule, or zero where it has no area (which STL readers
/// take as "compute it yourself").
fn unit_normal(t: &[[f64; 3]; 3]) -> [f32; 3] {
    let d = |i: usize, a: usize| t[i][a] - t[0][a];
    let n = [
        d(1, 1) * d(2, 2) - d(1, 2) * d(2, 1),
        d(1, 2) * d(2, 0) - d(1, 0) * d(2, 2),
        d(1, 0) * d(2, 1) - d(1, 1) * d(2, 0),
    ];
    let len = n.iter().map(|c| c * c).sum::<f64>().sqrt();
    if len > 0.0 && len.is_finite() {
        n.map(|c| (c / len) as f32)
    } else {
        [0.0; 3]
    }
}

/// The bytes of the regular file `path`.
fn read_file(path: &Path) -> Result<Vec<u8>, IoError> {
    let read_error = |source: io::Error| {
        let source = match source.kind() {
            ErrorKind::NotFound => io::Error::new(
                ErrorKind::NotFound,
                format!(
                    "{source}; check the file's name and directory (a relative path starts in \
                     the working directory)"
                ),
            ),
            _ => source,
        };
        IoError::Read {
            path: path.to_path_buf(),
            source,
        }
    };
    let file = File::open(path).map_err(read_error)?;
    let meta = file.metadata().map_err(read_error)?;
    // The length decides the kind and is checked against a binary file's count; a pipe or a device has
    // none to check, and a directory has no bytes.
    if !meta.is_file() {
        return Err(IoError::Stl {
            path: path.to_path_buf(),
            problem: format!(
                "it is {}, not a regular file; name an .stl file",
                crate::kind_of(&meta)
            ),
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    (&file).read_to_end(&mut bytes).map_err(read_error)?;
    Ok(bytes)
}

/// The triangle count of a binary file, where the file's length is exactly what it says.
fn binary_count(bytes: &[u8]) -> Option<u32> {
    let count = count_field(bytes)?;
    (binary_len(count) == bytes.len() as u64).then_some(count)
}

/// The `u32` after a binary file's header, where the file is that long.
fn count_field(bytes: &[u8]) -> Option<u32> {
    let field = bytes.get(BINARY_HEADER..BINARY_HEADER + 4)?;
    Some(u32::from_le_bytes(field.try_into().ok()?))
}

/// The length of a binary file of `count` triangles.
fn binary_len(count: u32) -> u64 {
    (BINARY_HEADER as u64 + 4) + BINARY_TRIANGLE * u64::from(count)
}

/// Whether the bytes may be an ASCII file: text (UTF-8, no NUL, which binary headers and floats are
/// full of) whose first word is `solid`.
fn is_ascii_stl(bytes: &[u8]) -> bool {
    bytes.trim_ascii_start().starts_with(b"solid")
        && !bytes.contains(&0)
        && std::str::from_utf8(bytes).is_ok()
}

/// Why bytes that are neither kind of file were refused.
fn neither(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return format!("the file is empty; {REEXPORT}");
    }
    match count_field(bytes) {
        None => format!(
            "it has {} bytes, too few for a binary STL (84 at least), and it is not an ASCII STL, \
             which starts with `solid`; the file is truncated or not STL: {REEXPORT}",
            bytes.len()
        ),
        Some(count) => {
            let len = bytes.len() as u64;
            let verdict = if len < binary_len(count) {
                "truncated"
            } else {
                "followed by bytes that are no part of it"
            };
            format!(
                "it is not an ASCII STL (text starting with `solid`), and as a binary STL its header \
                 counts {count} triangles, which take 84 + 50 x {count} = {} bytes, but the file has \
                 {len}: it is {verdict}, or not STL at all; {REEXPORT}",
                binary_len(count)
            )
        }
    }
}

/// The triangles of a binary file whose length matches its `count`.
fn read_binary(mut bytes: Vec<u8>, count: u32) -> Result<Vec<[[f32; 3]; 3]>, String> {
    // stl_io would take a header beginning with "solid " for ASCII; the header means nothing.
    bytes[..BINARY_HEADER].fill(0);
    let mut cursor = Cursor::new(bytes);
    let reader = stl_io::create_stl_reader(&mut cursor).map_err(|e| e.to_string())?;
    // The length has been checked against the count, so the count is what the file holds.
    let mut triangles = Vec::with_capacity(count as usize);
    for t in reader {
        triangles.push(corners(t.map_err(|e| format!("{e}; {REEXPORT}"))?));
    }
    Ok(triangles)
}

/// The vertices of stl_io's triangle.
fn corners(t: stl_io::Triangle) -> [[f32; 3]; 3] {
    t.vertices.map(|v| v.0)
}

/// The triangles of every solid of an ASCII file (text, checked by [`is_ascii_stl`]).
fn read_ascii(bytes: &[u8]) -> Result<Vec<[[f32; 3]; 3]>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
    let mut triangles = Vec::new();
    for (first_line, solid) in solids(text) {
        let solid = solid.trim_start();
        let Some(rest) = solid.strip_prefix("solid") else {
            let word = solid.split_whitespace().next().unwrap_or_default();
            return Err(format!(
                "line {first_line} starts with `{}` where a solid (`solid NAME`) or the end of the \
                 file should be; {REEXPORT}",
                word.escape_debug()
            ));
        };
        // stl_io wants "solid " with a space; some exporters write the word alone on its line.
        let solid = match rest.starts_with(' ') {
            true => solid.to_string(),
            false => format!("solid {rest}"),
        };
        let malformed = |e: io::Error| {
            let what = match e.kind() {
                ErrorKind::UnexpectedEof => {
                    "the file ends before the solid does (no `endsolid`): it is truncated"
                        .to_string()
                }
                _ => format!("it is malformed: {e}"),
            };
            format!("in the solid that starts on line {first_line}, {what}; {REEXPORT}")
        };
        let mut cursor = Cursor::new(solid.as_bytes());
        let reader = stl_io::create_stl_reader(&mut cursor).map_err(malformed)?;
        for t in reader {
            triangles.push(corners(t.map_err(malformed)?));
        }
    }
    Ok(triangles)
}

/// The solids of an ASCII file, each with the number of the line it starts on: the text up to and
/// including each line whose first word is `endsolid`, and what follows the last one unless it is
/// blank.
fn solids(text: &str) -> Vec<(usize, &str)> {
    let mut solids = Vec::new();
    let (mut start, mut start_line, mut at) = (0, 1, 0);
    for (n, line) in text.split_inclusive('\n').enumerate() {
        at += line.len();
        if line.split_whitespace().next() == Some("endsolid") {
            solids.push((start_line, &text[start..at]));
            (start, start_line) = (at, n + 2);
        }
    }
    let rest = &text[start..];
    if !rest.trim().is_empty() {
        // Where the text starts, for the message: past the blank lines.
        let blank = rest.len() - rest.trim_start().len();
        solids.push((start_line + rest[..blank].matches('\n').count(), rest));
    }
    solids
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    use crate::test_support::scratch_dir;

    /// A tetrahedron with its faces wound outward.
    fn tetrahedron() -> Mesh {
        let v = [
            [0.0, 0.0, 0.0],
            [1.0, 0.0, 0.0],
            [0.0, 1.0, 0.0],
            [0.0, 0.0, 1.0],
        ];
        let faces = [[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]];
        Mesh {
            triangles: faces.iter().map(|f| f.map(|i| v[i])).collect(),
        }
    }

    /// `mesh` as an ASCII file of one solid per `split` triangles, the way an exporter writes it.
    fn ascii(mesh: &Mesh, split: usize, header: &str) -> String {
        let mut out = String::new();
        for (k, part) in mesh.triangles.chunks(split).enumerate() {
            out += &format!("{header}{}\n", if k == 0 { "" } else { " more" });
            for t in part {
                out += "  facet normal 0 0 0\n    outer loop\n";
                for p in t {
                    out += &format!("      vertex {} {} {}\n", p[0], p[1], p[2]);
                }
                out += "    endloop\n  endfacet\n";
            }
            out += "endsolid\n";
        }
        out
    }

    /// `mesh` as a binary file, as stl_io writes it, with `header` as its first bytes.
    fn binary(mesh: &Mesh, header: &[u8]) -> Vec<u8> {
        let triangles: Vec<stl_io::Triangle> = mesh
            .triangles
            .iter()
            .map(|t| stl_io::Triangle {
                normal: stl_io::Normal::new(unit_normal(t)),
                vertices: t.map(|p| stl_io::Vertex::new(p.map(|c| c as f32))),
            })
            .collect();
        let mut out = Vec::new();
        stl_io::write_stl(&mut out, triangles.iter()).unwrap();
        out[..header.len()].copy_from_slice(header);
        out
    }

    fn problem(err: IoError) -> String {
        match err {
            IoError::Stl { problem, .. } => problem,
            other => panic!("expected IoError::Stl, got {other:?}"),
        }
    }

    /// A closed tetrahedron reads back triangle for triangle from a binary file (stl_io's writer, and
    /// this module's), whatever its header says, and from an ASCII one; it has no open edge, and 3
    /// without one of its faces.
    #[test]
    fn stl_tetrahedron_round_trips_closed_and_open() {
        let dir = scratch_dir("stl-tetra");
        let tetra = tetrahedron();
        assert_eq!(tetra.bounds(), ([0.0; 3], [1.0; 3]));
        assert_eq!(tetra.open_edges(), 0);

        let files = [
            ("plain.stl", binary(&tetra, b"")),
            // SolidWorks and others start a binary header with "solid", as ASCII files start.
            (
                "solid.stl",
                binary(&tetra, b"solid part exported as binary"),
            ),
            ("ascii.stl", ascii(&tetra, 4, "solid tetra").into_bytes()),
            // Some exporters write "solid" alone; several solids are one mesh.
            ("parts.stl", ascii(&tetra, 3, "solid").into_bytes()),
        ];
        for (name, bytes) in files {
            fs::write(dir.join(name), bytes).unwrap();
            let mesh = read_stl(&dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(mesh, tetra, "{name}");
        }
        write_stl(&dir.join("written.stl"), &tetra).unwrap();
        assert_eq!(read_stl(&dir.join("written.stl")).unwrap(), tetra);

        let mut open = tetra.clone();
        open.triangles.pop();
        assert_eq!(open.open_edges(), 3);
        write_stl(&dir.join("open.stl"), &open).unwrap();
        let open = read_stl(&dir.join("open.stl")).unwrap();
        assert_eq!((open.triangles.len(), open.open_edges()), (3, 3));
        assert_eq!(open.bounds(), ([0.0; 3], [1.0; 3]));
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Edges are matched by position, in either direction and with -0 equal to 0; an edge of three
    /// triangles counts as open, a triangle with two equal vertices not at all.
    #[test]
    fn stl_open_edges_match_positions() {
        let mut tetra = tetrahedron();
        tetra.triangles[0][0] = [-0.0, 0.0, -0.0];
        tetra.triangles[1].reverse();
        assert_eq!(tetra.open_edges(), 0);
        tetra.triangles.push([[0.0; 3], [0.0; 3], [5.0; 3]]);
        assert_eq!(tetra.open_edges(), 0);
        // A fin on the edge (0,0,0)-(1,0,0): that edge now has three triangles, and the fin two edges
        // of its own.
        tetra
            .triangles
            .push([[0.0; 3], [1.0, 0.0, 0.0], [0.5, -1.0, 0.0]]);
        assert_eq!(tetra.open_edges(), 3);
        assert_eq!(Mesh::default().open_edges(), 0);
        assert_eq!(
            Mesh::default().bounds(),
            ([f64::INFINITY; 3], [f64::NEG_INFINITY; 3])
        );
    }

    /// Truncated, padded, garbage, empty, non-finite and malformed files are refused with an error that
    /// names the file and the problem; none panics.
    #[test]
    fn stl_bad_files_are_refused_by_name() {
        let dir = scratch_dir("stl-bad");
        let tetra = tetrahedron();
        let good = binary(&tetra, b"");
        let mut nan = good.clone();
        // The first vertex's x of the first triangle.
        nan[84 + 12..84 + 16].copy_from_slice(&f32::NAN.to_le_bytes());
        let mut huge = good[..84].to_vec();
        huge[80..84].copy_from_slice(&u32::MAX.to_le_bytes());
        let text = ascii(&tetra, 4, "solid t");
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("empty.stl", Vec::new(), "the file is empty"),
            (
                "short.stl",
                b"\x00\x01garbage".to_vec(),
                "too few for a binary STL",
            ),
            (
                "cut.stl",
                good[..good.len() - 7].to_vec(),
                "it is truncated",
            ),
            (
                "padded.stl",
                [&good[..], b"\0\0"].concat(),
                "followed by bytes",
            ),
            ("huge.stl", huge, "counts 4294967295 triangles"),
            ("garbage.stl", vec![0xA5; 1000], "not STL at all"),
            ("none.stl", binary(&Mesh::default(), b""), "no triangle"),
            ("nan.stl", nan, "triangle 1 of 4"),
            (
                "cut-ascii.stl",
                text.as_bytes()[..text.len() / 2].to_vec(),
                "no `endsolid`",
            ),
            (
                "typo.stl",
                text.replacen("vertex", "vertx", 1).into_bytes(),
                "malformed",
            ),
            (
                "inf.stl",
                text.replacen("vertex 0 0 0", "vertex 1e39 0 0", 1)
                    .into_bytes(),
                "finite",
            ),
            (
                "tail.stl",
                format!("{text}\n\nend of file\n").into_bytes(),
                "line 33 starts with `end`",
            ),
            (
                "empty-ascii.stl",
                b"solid x\nendsolid x\n".to_vec(),
                "no triangle",
            ),
        ];
        for (name, bytes, what) in cases {
            let path = dir.join(name);
            fs::write(&path, bytes).unwrap();
            let err = read_stl(&path).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains(name), "{name}: {msg}");
            let problem = problem(err);
            assert!(problem.contains(what), "{name}: {problem}");
        }
        let err = read_stl(&dir.join("missing.stl")).unwrap_err();
        assert!(matches!(err, IoError::Read { .. }), "{err}");
        assert!(
            err.to_string().contains("missing.stl") && err.to_string().contains("check the file"),
            "{err}"
        );
        let msg = problem(read_stl(&dir).unwrap_err());
        assert!(msg.contains("a directory"), "{msg}");

        let mut bad = tetra.clone();
        bad.triangles[2][1][2] = 1e300;
        let msg = problem(write_stl(&dir.join("out.stl"), &bad).unwrap_err());
        assert!(msg.contains("triangle 3"), "{msg}");
        assert!(!dir.join("out.stl").exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Random bytes, and random damage to good files, give an error or a mesh, never a panic.
    #[test]
    fn stl_never_panics_on_random_bytes() {
        use rand::{Rng, SeedableRng};
        let dir = scratch_dir("stl-random");
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let tetra = tetrahedron();
        let seeds = [
            binary(&tetra, b""),
            ascii(&tetra, 2, "solid r").into_bytes(),
        ];
        let path = dir.join("r.stl");
        for round in 0..400 {
            let mut bytes = seeds[round % 2].clone();
            match round % 4 {
                0 | 1 => {
                    for _ in 0..rng.random_range(1..6) {
                        let i = rng.random_range(0..bytes.len());
                        bytes[i] = rng.random();
                    }
                }
                2 => bytes.truncate(rng.random_range(0..bytes.len())),
                _ => {
                    bytes = (0..rng.random_range(0..300))
                        .map(|_| rng.random())
                        .collect()
                }
            }
            fs::write(&path, &bytes).unwrap();
            if let Ok(mesh) = read_stl(&path) {
                assert!(!mesh.triangles.is_empty());
                assert!(mesh
                    .triangles
                    .iter()
                    .flatten()
                    .flatten()
                    .all(|c| c.is_finite()));
            }
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
