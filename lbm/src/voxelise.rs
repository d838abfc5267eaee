//! Bodies from closed surfaces: which nodes of the grid lie inside a triangle mesh (an STL file read
//! by [`lattice_gpu_formats::stl`]), as a mask for [`Geometry::add_mask`].
//!
//! The built-in obstacles are spheres, cylinders and boxes; a car, an aerofoil or a scanned stone
//! comes from a CAD program or a scanner as a surface, and this turns it into the cells the solver
//! walls off, with no converter to install and trust.
//!
//! # Placing
//!
//! An STL file has no unit, so the mesh is put into the grid by a [`Placement`]: scaled by one factor
//! on every axis so that its bounding box's longest side is `size` cells, and moved so that the box's
//! centre is at `centre` (grid coordinates: cell `[x, y, z]` has its node at `(x, y, z)`). The placed
//! box must lie within the grid's cells, `-0.5 ..= n - 0.5` on every axis (the nodes `0 ..= n - 1`
//! and the half cell each reaches beyond its node; the slack is 1e-9 cells, for rounding): a body
//! cut off at the edge of the grid would lose its nodes beyond without a word, and one across a
//! periodic side would be cut in two. Within that, a surface may reach past the first or last node,
//! so that a prism from `z = -0.5` to `nz - 0.5` is a cylinder through the whole grid, as
//! [`Obstacle::Cylinder`](crate::geometry::Obstacle::Cylinder) is.
//!
//! # Inside and outside
//!
//! By ray parity, three times: for each axis, a ray along it through every line of nodes (for x, one
//! per `(y, z)`), its crossings with the triangles sorted along it; a node is inside where an odd
//! number of crossings lie below it. Each triangle is projected onto the plane across the ray and
//! binned by the rows of rays its projection spans, so that the work is proportional to the triangles
//! plus the cells, and rows run in parallel (rayon). Triangles parallel to the ray are skipped.
//!
//! Two kinds of tie need a rule. A ray that passes exactly through an edge or a vertex shared by
//! several triangles must count the crossing there once, or the parity of the whole ray flips; and a
//! node exactly on the surface must be classed alike by all three directions. Both are settled as if
//! every node were moved by `(ε, ε², ε³)` in `(x, y, z)`, `ε → 0` (a simulation of simplicity): across
//! the ray, a point on an edge belongs to the triangle the moved point falls into; along it, a
//! crossing at exactly a node's depth counts as below the node where the moved node lies above the
//! crossing moved with it, which the signs of the triangle's normal decide. Each edge's function is
//! computed from its ends in one fixed order, so that two triangles sharing the edge see exactly
//! opposite values and a watertight mesh (neighbours share vertices with equal coordinates, as STL
//! files have them) has each crossing counted once whatever its triangulation or winding. Where the
//! arithmetic is exact (vertices at whole or binary-fraction coordinates: a box, an octahedron on
//! the nodes), the three directions class every node as the moved node is classed: a box whose faces
//! lie on node planes holds its nodes from its low faces up to, not including, its high ones
//! (`lo <= p < hi` on each axis, the half-open rule of rasterisers).
//!
//! The three directions vote: a node is inside where at least two say so. For a closed surface they
//! agree everywhere but at nodes on the surface within rounding, which are counted as
//! [`Voxels::ambiguous`]. A surface with a hole lets the rays through it see an odd number of
//! crossings, so their nodes beyond the hole flip, along that direction only.
//!
//! # Open surfaces: the policy
//!
//! [`Voxels::open_edges`] counts the edges not shared by exactly two triangles
//! ([`Mesh::open_edges`]). Where there are some but the three directions agree on every node, no ray
//! met a hole where it mattered and the mask is returned: the caller warns with the count. Where there
//! are some and the directions disagree anywhere, inside and outside are undefined there and
//! [`voxelise`] refuses, naming both counts and the fix (close the surface, or give a voxel mask).
//! Nothing is printed here.
//!
//! Two closed parts that overlap (a union not merged by the exporter) make their overlap outside by
//! parity, consistently in all three directions: merge them (a boolean union) first.
//!
//! # Links' cuts
//!
//! Interpolated bounce-back needs, for each link from a fluid node into a solid one, where along it
//! the surface lies. [`Surface`] holds the mesh placed as [`voxelise`] places it, its triangles
//! binned by the dual cells (`[i - 0.5, i + 0.5]³` about node `i`) they reach; a D3Q19 link lies in
//! its two ends' dual cells, so [`Surface::cut`] tests only their triangles (Möller and Trumbore's
//! test in f64) and takes the nearest crossing to the fluid end. A link that crosses none (rounding at
//! a grazing surface, or an open one) is left to the caller, which bounces it back halfway.
//!
//! # Cost
//!
//! A UV sphere of 199,808 triangles, 200 cells across, on a 256³ grid: about 0.25 s in a release
//! build on 2 cores (the test `timing_of_a_200k_triangle_sphere_on_256_cubed`, ignored by default; run
//! it with `cargo test --release -p lattice-gpu-lbm voxelise -- --ignored --nocapture`). Memory: three
//! bytes per cell besides the mask, one for each direction's answers.
//!
//! Binning the same sphere for the cuts takes about 0.2 s, and cutting its 720,000 links 0.3 s more
//! (`timing_of_the_cuts_of_a_200k_triangle_sphere`, likewise). Memory: 80 bytes per triangle, 4 per
//! triangle in each bin it reaches (a few bins each for triangles smaller than a cell) and 16 per bin;
//! while binning, 16 per triangle in each bin.

use lattice_gpu_formats::stl::Mesh;
use lattice_gpu_kernels::lbm::C;
use rayon::prelude::*;

use crate::{Error, Geometry, Result};

/// How far, in cells, a placed mesh may reach past the grid's cells through rounding alone.
const SLACK: f64 = 1e-9;

/// Cells by which a row's span of a triangle is widened before the exact test decides: the span is
/// found by interpolation, which rounds.
const SPAN_MARGIN: f64 = 1e-6;

const AXES: [char; 3] = ['x', 'y', 'z'];

/// The fix for a surface whose inside is undefined.
const CLOSE_IT: &str = "close the surface (e.g. in MeshLab: Filters > Remeshing, Simplification \
                        and Reconstruction > Close Holes) or give a voxel mask";

/// Where and how large a mesh is put into the grid.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Placement {
    /// Where the centre of the mesh's bounding box goes, in grid coordinates (cell `[x, y, z]` has its
    /// node at `(x, y, z)`).
    pub centre: [f64; 3],
    /// The length in cells that the bounding box's longest side is scaled to; the other sides scale by
    /// the same factor.
    pub size: f64,
}

/// A surface turned into grid cells.
#[derive(Clone, Debug, PartialEq)]
pub struct Voxels {
    /// Whether each cell's node is inside, one per cell, x fastest, for [`Geometry::add_mask`].
    pub mask: Vec<bool>,
    /// The cells inside: the mask's `true`s.
    pub solid: usize,
    /// The mesh's edges not shared by exactly two triangles ([`Mesh::open_edges`]): 0 for a closed
    /// surface; a caller warns of any.
    pub open_edges: usize,
    /// The nodes where the rays along x, y and z did not all agree and the majority decided: for a
    /// closed surface, nodes on it within rounding.
    pub ambiguous: usize,
}

/// `mesh` as [`voxelise`] places it: scaled and moved as `at` says (see the [module docs](self)).
///
/// Fails on an empty mesh, one whose vertices are all one point or that has a coordinate that is
/// not finite, and on a size that is not finite and positive or a centre that is not finite.
pub fn transform(mesh: &Mesh, at: &Placement) -> Result<Mesh> {
    let bad = |problem: String| Err(Error::InvalidParameter(problem));
    if mesh.triangles.is_empty() {
        return bad("the mesh has no triangles; give a surface that has some".into());
    }
    if let Some(t) = mesh
        .triangles
        .iter()
        .find(|t| t.iter().flatten().any(|c| !c.is_finite()))
    {
        return bad(format!(
            "the mesh has a triangle with a coordinate that is not a finite number, {t:?}; repair \
             the mesh"
        ));
    }
    let (lo, hi) = mesh.bounds();
    let sides: [f64; 3] = std::array::from_fn(|a| hi[a] - lo[a]);
    let longest = sides.iter().fold(0.0_f64, |m, &s| m.max(s));
    if !sides.iter().all(|s| s.is_finite()) {
        return bad(format!(
            "the mesh spans {lo:?} to {hi:?}, a range too wide for f64; rescale the mesh"
        ));
    }
    if longest <= 0.0 {
        return bad(format!(
            "every vertex of the mesh is the point {lo:?}: it has no extent to scale; give a surface"
        ));
    }
    if !(at.size.is_finite() && at.size > 0.0) {
        return bad(format!(
            "the body's size {} must be a positive number of cells, the length of its bounding box's \
             longest side (e.g. --body-size 40)",
            at.size
        ));
    }
    if !at.centre.iter().all(|c| c.is_finite()) {
        return bad(format!(
            "the body's centre {:?} must be finite grid coordinates (e.g. --centre 64,32,32)",
            at.centre
        ));
    }
    let scale = at.size / longest;
    if !scale.is_finite() {
        return bad(format!(
            "scaling the mesh's longest side, {longest:e}, to {} cells overflows; rescale the mesh",
            at.size
        ));
    }
    // Halves first: the sum of two large coordinates could overflow.
    let mid: [f64; 3] = std::array::from_fn(|a| lo[a] / 2.0 + hi[a] / 2.0);
    let place = |p: [f64; 3]| std::array::from_fn(|a| (p[a] - mid[a]) * scale + at.centre[a]);
    Ok(Mesh {
        triangles: mesh.triangles.iter().map(|t| t.map(place)).collect(),
    })
}

/// The nodes of a grid of `dims` inside `mesh`, placed as `at` says (the [module docs](self) say how,
/// and what happens on the surface).
///
/// Fails with [`Error::InvalidParameter`], naming the problem and the fix, where the grid or the
/// placement is invalid ([`transform`]), where the placed mesh reaches beyond the grid's cells (by how
/// much, on which axis), where it holds no node, and where the surface is open and the three ray
/// directions disagree on some node. Prints nothing: a caller warns of [`Voxels::open_edges`].
pub fn voxelise(mesh: &Mesh, dims: [usize; 3], at: &Placement) -> Result<Voxels> {
    let cells = Geometry::check_dims(dims, "use a smaller grid")?;
    let placed = transform(mesh, at)?;
    let (lo, hi) = placed.bounds();
    let beyond: Vec<String> = (0..3)
        .flat_map(|a| {
            let top = dims[a] as f64 - 0.5;
            let below = (-0.5 - lo[a] > SLACK)
                .then(|| format!("{:.3} cells below {} = -0.5", -0.5 - lo[a], AXES[a]));
            let above = (hi[a] - top > SLACK)
                .then(|| format!("{:.3} cells above {} = {top}", hi[a] - top, AXES[a]));
            [below, above]
        })
        .flatten()
        .collect();
    if !beyond.is_empty() {
        let spans: Vec<String> = (0..3)
            .map(|a| format!("{} {:.3} to {:.3}", AXES[a], lo[a], hi[a]))
            .collect();
        return Err(Error::InvalidParameter(format!(
            "the body, {} cells across and centred at {:?}, spans {}: it reaches {} beyond the \
             grid's cells (-0.5 to n - 0.5 on each axis, n = {}x{}x{}); make it smaller \
             (--body-size), move it (--centre) or make the grid larger",
            at.size,
            at.centre,
            spans.join(", "),
            beyond.join(" and "),
            dims[0],
            dims[1],
            dims[2]
        )));
    }

    let open_edges = mesh.open_edges();
    let along: Vec<Vec<bool>> = (0..3).map(|a| cast(&placed, dims, a)).collect();
    let [nx, ny, nz] = dims;
    let mut mask = vec![false; cells];
    // Each direction's answers are laid out by its rows (see `cast`); gathered here into x-fastest.
    let (solid, ambiguous) = mask
        .par_chunks_mut(nx * ny)
        .enumerate()
        .map(|(z, plane)| {
            let (mut solid, mut ambiguous) = (0, 0);
            for y in 0..ny {
                for x in 0..nx {
                    let votes = along[0][(z * ny + y) * nx + x] as u8
                        + along[1][(z * nx + x) * ny + y] as u8
                        + along[2][(y * nx + x) * nz + z] as u8;
                    let inside = votes >= 2;
                    plane[y * nx + x] = inside;
                    solid += inside as usize;
                    ambiguous += (votes == 1 || votes == 2) as usize;
                }
            }
            (solid, ambiguous)
        })
        .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));

    if open_edges > 0 && ambiguous > 0 {
        return Err(Error::InvalidParameter(format!(
            "the surface is not closed: {open_edges} open edges (edges not shared by exactly two \
             triangles), and the rays along x, y and z disagree at {ambiguous} nodes, whose inside \
             or outside is therefore undefined; {CLOSE_IT}"
        )));
    }
    if solid == 0 {
        return Err(Error::InvalidParameter(format!(
            "the body, {} cells across and centred at {:?}, holds no node of the grid (nodes lie at \
             whole coordinates): make it larger (--body-size)",
            at.size, at.centre
        )));
    }
    Ok(Voxels {
        mask,
        solid,
        open_edges,
        ambiguous,
    })
}

/// The surface of a placed mesh in lattice coordinates, for the links' cuts (interpolated
/// bounce-back; see the [module docs](self)).
///
/// Shared by reference between threads: every query only reads it.
#[derive(Clone, Debug, Default)]
pub struct Surface {
    /// Each placed triangle as its first vertex, its two edges from it and the length of their cross
    /// product, what every crossing test needs, computed once.
    triangles: Vec<Facet>,
    /// The bins' nodes (see [`key`]), sorted, each once: a sparse grid, since only the cells
    /// along the surface hold any triangle and a dense one would cost a word per cell.
    keys: Vec<u64>,
    /// Bin `i`'s triangles are `binned[start[i]..start[i + 1]]`.
    start: Vec<usize>,
    /// Indices into `triangles`, 4 bytes rather than 8: a million-triangle mesh fills several million.
    binned: Vec<u32>,
    /// The grid's sides plus 2, for the nodes one beyond each side that a link from the edge reaches.
    extent: [u64; 3],
}

/// A triangle as a link's crossing test reads it: vertex, two edges, `|e1 × e2|`.
#[derive(Clone, Copy, Debug)]
struct Facet {
    v0: [f64; 3],
    e1: [f64; 3],
    e2: [f64; 3],
    area2: f64,
}

/// Cells by which a triangle's reach is widened when it is binned: the reach is found by arithmetic
/// that rounds, and a triangle left out of a bin is a crossing lost.
const BIN_MARGIN: f64 = 1e-6;

/// How far outside a triangle, in its barycentric coordinates, a crossing still counts: a link through
/// an edge shared by two triangles must hit one of them however the two tests round.
const BARY_SLACK: f64 = 1e-10;

/// How far beyond its ends, as a share of the link, a crossing still counts: a fluid node on the
/// surface (or a solid one) is crossed at 0 (or 1) only up to rounding.
const T_SLACK: f64 = 1e-9;

/// A link no more than this sine of an angle off a triangle's plane skips it: its crossing is
/// undefined up to rounding, and the division would make one up.
const GRAZING: f64 = 1e-12;

impl Surface {
    /// The mesh placed as `at` says (the same placement as [`voxelise`], through [`transform`]), its
    /// triangles binned for the links of a grid of `dims`.
    ///
    /// Each triangle goes into the bins of the dual cells `[i - 0.5, i + 0.5]³` (widened by 1e-6) that
    /// its bounding box and its plane both reach, for the nodes `i` from -1 to `n` on each axis (a link
    /// from a node of the grid ends at most one beyond it): the plane, so that a large tilted triangle
    /// fills the cells along it rather than its whole box. Triangles with no area are left out. A mesh
    /// or placement that [`voxelise`] refuses (which names the problem) gives a surface that no link
    /// crosses.
    pub fn new(mesh: &Mesh, dims: [usize; 3], at: &Placement) -> Self {
        let Ok(placed) = transform(mesh, at) else {
            return Self::default();
        };
        let extent = dims.map(|n| n as u64 + 2);
        let triangles: Vec<Facet> = placed
            .triangles
            .par_iter()
            .map(|t| {
                let e = |i: usize| std::array::from_fn(|a| t[i][a] - t[0][a]);
                let (e1, e2) = (e(1), e(2));
                Facet {
                    v0: t[0],
                    e1,
                    e2,
                    area2: dot(cross(e1, e2), cross(e1, e2)).sqrt(),
                }
            })
            .collect();
        assert!(
            triangles.len() <= u32::MAX as usize,
            "a mesh of {} triangles: the bins index at most 2^32",
            triangles.len()
        );
        let mut pairs: Vec<(u64, u32)> = placed
            .triangles
            .par_iter()
            .enumerate()
            .flat_map_iter(|(k, t)| {
                let mut keys = Vec::new();
                Self::reach(t, dims, |node| keys.push(key(extent, node)));
                keys.into_iter().map(move |key| (key, k as u32))
            })
            .collect();
        pairs.par_sort_unstable();
        let mut keys = Vec::new();
        let mut start = Vec::new();
        for (i, &(key, _)) in pairs.iter().enumerate() {
            if keys.last() != Some(&key) {
                keys.push(key);
                start.push(i);
            }
        }
        start.push(pairs.len());
        Self {
            triangles,
            keys,
            start,
            binned: pairs.into_iter().map(|(_, k)| k).collect(),
            extent,
        }
    }

    /// Calls `bin` with each node, -1 to `n` on each axis, whose dual cell the triangle `t` may reach.
    fn reach(t: &[[f64; 3]; 3], dims: [usize; 3], mut bin: impl FnMut([i64; 3])) {
        let n = cross(
            std::array::from_fn(|a| t[1][a] - t[0][a]),
            std::array::from_fn(|a| t[2][a] - t[0][a]),
        );
        let lo: [f64; 3] =
            std::array::from_fn(|a| t.iter().fold(f64::INFINITY, |m, p| m.min(p[a])));
        let hi: [f64; 3] =
            std::array::from_fn(|a| t.iter().fold(f64::NEG_INFINITY, |m, p| m.max(p[a])));
        // The nodes whose dual cells overlap [from, to] along axis a.
        let nodes = |a: usize, from: f64, to: f64| {
            let first = (from - 0.5 - BIN_MARGIN).ceil().max(-1.0);
            let last = (to + 0.5 + BIN_MARGIN).floor().min(dims[a] as f64);
            first as i64..=last as i64
        };
        // Along the axis the plane faces most, its depth over a column of dual cells is its depth at
        // the column's middle give or take the slopes' half cell: so the cells along the plane are
        // found column by column, as many as the triangle's area needs.
        let Some(a) = (0..3)
            .filter(|&a| n[a] != 0.0)
            .max_by(|&i, &j| n[i].abs().total_cmp(&n[j].abs()))
        else {
            return;
        };
        let (u, v) = ((a + 1) % 3, (a + 2) % 3);
        let (su, sv) = (n[u] / n[a], n[v] / n[a]);
        let half = (su.abs() + sv.abs()) * (0.5 + BIN_MARGIN) + BIN_MARGIN;
        for i in nodes(u, lo[u], hi[u]) {
            for j in nodes(v, lo[v], hi[v]) {
                let depth = t[0][a] - su * (i as f64 - t[0][u]) - sv * (j as f64 - t[0][v]);
                for k in nodes(a, (depth - half).max(lo[a]), (depth + half).min(hi[a])) {
                    let mut node = [0; 3];
                    (node[a], node[u], node[v]) = (k, i, j);
                    bin(node);
                }
            }
        }
    }

    /// Where the link along `c_q` ([`C`]`[q]`, `q < 19`) into the solid node `b` (from its fluid
    /// neighbour `b - c_q`) first crosses the surface, as a share of the link in (0, 1] measured from
    /// the fluid end; `None` where no triangle crosses it (the caller then bounces back halfway).
    ///
    /// The share is clamped to `[f64::EPSILON, 1]`: a fluid node on the surface would otherwise give 0,
    /// which the interpolation divides by.
    pub fn cut(&self, b: [f64; 3], q: usize) -> Option<f64> {
        let c = C[q].map(f64::from);
        let p: [f64; 3] = std::array::from_fn(|a| b[a] - c[a]);
        // A D3Q19 link is in the dual cells of its two ends: its first half in one's, the rest in the
        // other's. A triangle in both is tested twice, which the minimum does not mind.
        [p, b]
            .iter()
            .flat_map(|end| self.bin(end.map(|x| x.round() as i64)))
            .filter_map(|&k| crossing_of(&self.triangles[k as usize], p, c))
            .min_by(f64::total_cmp)
            .map(|t| t.clamp(f64::EPSILON, 1.0))
    }

    /// The triangles binned at `node`: none for a node beyond the bins.
    fn bin(&self, node: [i64; 3]) -> &[u32] {
        if (0..3).any(|a| node[a] < -1 || node[a] + 1 >= self.extent[a] as i64) {
            return &[];
        }
        match self.keys.binary_search(&key(self.extent, node)) {
            Ok(i) => &self.binned[self.start[i]..self.start[i + 1]],
            Err(_) => &[],
        }
    }
}

/// The bin of `node` (each coordinate -1 to `n`, the grid's side) in a grid of `extent` (sides + 2).
fn key(extent: [u64; 3], node: [i64; 3]) -> u64 {
    let [x, y, z] = node.map(|c| (c + 1) as u64);
    (z * extent[1] + y) * extent[0] + x
}

/// Where the segment `p + t d`, `t` in [0, 1], crosses the triangle, by Möller and Trumbore's test, in
/// f64 with the slack the constants above give; `None` where it misses or grazes it.
fn crossing_of(tri: &Facet, p: [f64; 3], d: [f64; 3]) -> Option<f64> {
    let h = cross(d, tri.e2);
    let det = dot(tri.e1, h);
    // A NaN (from a mesh that overflowed) fails the tests below.
    if det.abs() <= GRAZING * tri.area2 * dot(d, d).sqrt() {
        return None;
    }
    let s: [f64; 3] = std::array::from_fn(|a| p[a] - tri.v0[a]);
    let u = dot(s, h) / det;
    if !(-BARY_SLACK..=1.0 + BARY_SLACK).contains(&u) {
        return None;
    }
    let k = cross(s, tri.e1);
    let v = dot(d, k) / det;
    if v < -BARY_SLACK || u + v > 1.0 + BARY_SLACK {
        return None;
    }
    let t = dot(tri.e2, k) / det;
    (-T_SLACK..=1.0 + T_SLACK).contains(&t).then_some(t)
}

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// Whether each node is inside by the parity of the rays along `axis`, laid out by rows: index
/// `(v * nu + u) * na + t` for the node `t` along the ray, `u` and `v` the other two axes in the order
/// x, y, z (for x the grid's own layout).
fn cast(mesh: &Mesh, dims: [usize; 3], axis: usize) -> Vec<bool> {
    let (ua, va) = match axis {
        0 => (1, 2),
        1 => (0, 2),
        _ => (0, 1),
    };
    let (nu, nv, na) = (dims[ua], dims[va], dims[axis]);
    // Each triangle as (u, v, depth along the ray), with the rows of rays its projection spans; those
    // parallel to the ray (no area across it) cross none.
    let projected: Vec<[[f64; 3]; 3]> = mesh
        .triangles
        .iter()
        .map(|t| t.map(|p| [p[ua], p[va], p[axis]]))
        .collect();
    // Whether a crossing exactly at a node counts as below it: whether the node moved by
    // (ε, ε², ε³) in (x, y, z) lies above the crossing moved with it, the point every direction
    // classes (see the module docs). The depth moves by -(n_u ε_u + n_v ε_v) / n_a across the plane
    // of normal n, so the node stays above where the first of n's components in x, y, z order that
    // is not 0 has the sign of n_a.
    let below_at_node = |t: &[[f64; 3]; 3]| {
        let [nu_, nv_, na_] = normal(t);
        let ordered = match axis {
            0 => [na_, nu_, nv_],
            1 => [nu_, na_, nv_],
            _ => [nu_, nv_, na_],
        };
        let first = ordered.into_iter().find(|&c| c != 0.0).unwrap_or(0.0);
        (first > 0.0) == (na_ > 0.0)
    };
    let rows_of = |t: &[[f64; 3]; 3]| {
        let vmin = t.iter().fold(f64::INFINITY, |m, p| m.min(p[1]));
        let vmax = t.iter().fold(f64::NEG_INFINITY, |m, p| m.max(p[1]));
        let (first, last) = (vmin.ceil().max(0.0), vmax.floor().min(nv as f64 - 1.0));
        (normal(t)[2] != 0.0 && first <= last).then_some((first as usize, last as usize))
    };
    let spans: Vec<Option<(usize, usize)>> = projected.par_iter().map(rows_of).collect();

    // The triangles of each row, compressed: row r's are binned[start[r]..start[r + 1]].
    let mut start = vec![0usize; nv + 1];
    for &(first, last) in spans.iter().flatten() {
        for r in first..=last {
            start[r + 1] += 1;
        }
    }
    for r in 0..nv {
        start[r + 1] += start[r];
    }
    let mut fill = start.clone();
    let mut binned = vec![0usize; start[nv]];
    for (k, span) in spans.iter().enumerate() {
        if let Some((first, last)) = *span {
            for r in first..=last {
                binned[fill[r]] = k;
                fill[r] += 1;
            }
        }
    }

    let mut inside = vec![false; nu * nv * na];
    inside
        .par_chunks_mut(nu * na)
        .enumerate()
        .for_each(|(row, out)| {
            let v = row as f64;
            // (ray, depth, whether it counts as below a node at its very depth) of every crossing.
            let mut hits: Vec<(usize, f64, bool)> = Vec::new();
            for &k in &binned[start[row]..start[row + 1]] {
                let t = &projected[k];
                let below = below_at_node(t);
                let Some((umin, umax)) = span_at(t, v) else {
                    continue;
                };
                let first = (umin - SPAN_MARGIN).ceil().max(0.0) as usize;
                let last = (umax + SPAN_MARGIN).floor().min(nu as f64 - 1.0);
                if last < 0.0 {
                    continue;
                }
                for u in first..=last as usize {
                    if let Some(depth) = crossing(t, [u as f64, v]) {
                        hits.push((u, depth, below));
                    }
                }
            }
            // At one depth those that count below a node there come first, so that a walk up the ray
            // can stop at the others.
            hits.sort_unstable_by(|a, b| {
                (a.0.cmp(&b.0))
                    .then(a.1.total_cmp(&b.1))
                    .then(b.2.cmp(&a.2))
            });
            let mut h = 0;
            for (u, ray) in out.chunks_mut(na).enumerate() {
                let from = h;
                while h < hits.len() && hits[h].0 == u {
                    h += 1;
                }
                let crossings = &hits[from..h];
                let mut below = 0;
                for (i, node) in ray.iter_mut().enumerate() {
                    let at = i as f64;
                    while let Some(&(_, depth, counts)) = crossings.get(below) {
                        if depth < at || (depth == at && counts) {
                            below += 1;
                        } else {
                            break;
                        }
                    }
                    *node = below % 2 == 1;
                }
            }
        });
    inside
}

/// The normal of the projected triangle `t` by the right-hand rule, in its (u, v, depth) axes: its
/// last component is twice its area across the ray, 0 for one parallel to it.
fn normal(t: &[[f64; 3]; 3]) -> [f64; 3] {
    let e = |i: usize| std::array::from_fn::<f64, 3, _>(|a| t[i][a] - t[0][a]);
    let (e1, e2) = (e(1), e(2));
    [
        e1[1] * e2[2] - e1[2] * e2[1],
        e1[2] * e2[0] - e1[0] * e2[2],
        e1[0] * e2[1] - e1[1] * e2[0],
    ]
}

/// The span in u of the projected triangle `t` on the line at `v`, or `None` where it misses it.
fn span_at(t: &[[f64; 3]; 3], v: f64) -> Option<(f64, f64)> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for i in 0..3 {
        let (p, q) = (t[i], t[(i + 1) % 3]);
        if (p[1] < v && q[1] < v) || (p[1] > v && q[1] > v) {
            continue;
        }
        let us = if p[1] == q[1] {
            [p[0], q[0]]
        } else {
            let s = ((v - p[1]) / (q[1] - p[1])).clamp(0.0, 1.0);
            let u = p[0] + s * (q[0] - p[0]);
            [u, u]
        };
        for u in us {
            lo = lo.min(u);
            hi = hi.max(u);
        }
    }
    (lo <= hi).then_some((lo, hi))
}

/// Where the ray through `p = (u, v)` crosses the projected triangle `t`, as the depth along it, or
/// `None` where it misses (a point on an edge as the module docs say).
fn crossing(t: &[[f64; 3]; 3], p: [f64; 2]) -> Option<f64> {
    // w[i]: the edge function of the edge facing vertex i, twice the area of (edge, p): p's barycentric
    // weight of vertex i, unnormalised.
    let mut w = [0.0; 3];
    let mut sign = [0i8; 3];
    for i in 0..3 {
        (w[i], sign[i]) = edge(t[(i + 1) % 3], t[(i + 2) % 3], p);
    }
    if sign[0] == 0 || sign[0] != sign[1] || sign[1] != sign[2] {
        return None;
    }
    let total = w[0] + w[1] + w[2];
    if total == 0.0 {
        return None;
    }
    // From vertex 0, so that a face at one depth gives exactly that depth (a box face on a node plane).
    let d = |i: usize| t[i][2] - t[0][2];
    Some(t[0][2] + (w[1] * d(1) + w[2] * d(2)) / total)
}

/// The edge function of `a -> b` at `p` (positive where `p` lies to the left) and its sign, where it
/// is 0 the sign at `p + (ε, ε²)`; 0 only for an edge of no length. Computed from the ends in a fixed
/// order, so that `b -> a` gives exactly the opposite, whichever triangle asks.
fn edge(a: [f64; 3], b: [f64; 3], p: [f64; 2]) -> (f64, i8) {
    let flip = a[0] > b[0] || (a[0] == b[0] && a[1] > b[1]);
    let (a, b) = if flip { (b, a) } else { (a, b) };
    let (du, dv) = (b[0] - a[0], b[1] - a[1]);
    let w = du * (p[1] - a[1]) - dv * (p[0] - a[0]);
    // w(p + (ε, ε²)) = w + du ε² - dv ε.
    let tie = if dv != 0.0 { -dv } else { du };
    let s = match if w != 0.0 { w } else { tie } {
        x if x > 0.0 => 1,
        x if x < 0.0 => -1,
        _ => 0,
    };
    if flip {
        (-w, -s)
    } else {
        (w, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Obstacle;
    use std::f64::consts::PI;

    /// The placement that leaves a mesh where it is (within rounding): its own centre and size.
    fn in_place(mesh: &Mesh) -> Placement {
        let (lo, hi) = mesh.bounds();
        Placement {
            centre: std::array::from_fn(|a| lo[a] / 2.0 + hi[a] / 2.0),
            size: (0..3).map(|a| hi[a] - lo[a]).fold(0.0, f64::max),
        }
    }

    /// The mask of a built-in obstacle, through the geometry that marks it.
    fn obstacle_mask(dims: [usize; 3], o: &Obstacle) -> Vec<bool> {
        let mut g = Geometry::periodic(dims).unwrap();
        g.add_obstacle(o).unwrap();
        let mut mask = vec![false; g.cells()];
        for &n in &g.bodies()[0] {
            mask[n as usize] = true;
        }
        mask
    }

    fn node(dims: [usize; 3], n: usize) -> [f64; 3] {
        [n % dims[0], n / dims[0] % dims[1], n / (dims[0] * dims[1])].map(|c| c as f64)
    }

    /// A regular prism of `sides` around the axis `centre` from `z[0]` to `z[1]`, its vertices on the
    /// circle of radius `r`, with fans for caps.
    fn prism(centre: [f64; 2], r: f64, sides: usize, z: [f64; 2]) -> Mesh {
        let rim = |k: usize, z: f64| {
            let phi = 2.0 * PI * (k % sides) as f64 / sides as f64;
            [centre[0] + r * phi.cos(), centre[1] + r * phi.sin(), z]
        };
        let mut triangles = Vec::new();
        for k in 0..sides {
            let [b0, b1, t0, t1] = [
                rim(k, z[0]),
                rim(k + 1, z[0]),
                rim(k, z[1]),
                rim(k + 1, z[1]),
            ];
            triangles.push([[centre[0], centre[1], z[0]], b1, b0]);
            triangles.push([[centre[0], centre[1], z[1]], t0, t1]);
            triangles.push([b0, b1, t1]);
            triangles.push([b0, t1, t0]);
        }
        Mesh { triangles }
    }

    /// A UV sphere: `stacks` bands of latitude, `slices` of longitude, its vertices on the sphere.
    fn uv_sphere(centre: [f64; 3], r: f64, slices: usize, stacks: usize) -> Mesh {
        let at = |i: usize, j: usize| {
            let theta = PI * i as f64 / stacks as f64;
            let phi = 2.0 * PI * (j % slices) as f64 / slices as f64;
            // Each vertex computed once per (i, j), so that neighbours share it bit for bit; the poles
            // are one vertex each.
            let ring = if i == 0 || i == stacks {
                0.0
            } else {
                theta.sin()
            };
            let phi = if ring == 0.0 { 0.0 } else { phi };
            [
                centre[0] + r * ring * phi.cos(),
                centre[1] + r * ring * phi.sin(),
                centre[2] + r * theta.cos(),
            ]
        };
        let mut triangles = Vec::new();
        for i in 0..stacks {
            for j in 0..slices {
                let [a, b, c, d] = [at(i, j), at(i, j + 1), at(i + 1, j), at(i + 1, j + 1)];
                if i > 0 {
                    triangles.push([a, b, d]);
                }
                if i + 1 < stacks {
                    triangles.push([a, d, c]);
                }
            }
        }
        Mesh { triangles }
    }

    /// The unit cube's 12 triangles, each face cut along the diagonal `flip` picks, wound outward or
    /// (`reverse`) inward.
    fn unit_cube(flip: bool, reverse: bool) -> Mesh {
        let mut triangles = Vec::new();
        for a in 0..3 {
            for side in [0.0, 1.0] {
                let corner = |s: f64, t: f64| {
                    let mut p = [0.0; 3];
                    p[a] = side;
                    p[(a + 1) % 3] = s;
                    p[(a + 2) % 3] = t;
                    p
                };
                let [p00, p10, p11, p01] = [
                    corner(0.0, 0.0),
                    corner(1.0, 0.0),
                    corner(1.0, 1.0),
                    corner(0.0, 1.0),
                ];
                let mut pair = match flip {
                    false => [[p00, p10, p11], [p00, p11, p01]],
                    true => [[p00, p10, p01], [p10, p11, p01]],
                };
                if (side == 0.0) != reverse {
                    pair.iter_mut().for_each(|t| t.reverse());
                }
                triangles.extend(pair);
            }
        }
        Mesh { triangles }
    }

    /// The nodes where two masks differ.
    fn differing(a: &[bool], b: &[bool]) -> Vec<usize> {
        (0..a.len()).filter(|&n| a[n] != b[n]).collect()
    }

    /// A 256-sided prism through the whole grid in z (caps half a cell beyond the end nodes) marks what
    /// `Obstacle::Cylinder` marks, but for nodes between the polygon and the circle, within the
    /// polygon's sagitta r (1 - cos(pi/256)) of the surface.
    #[test]
    fn voxelise_a_prism_as_the_cylinder() {
        let dims = [48, 44, 5];
        let (centre, r, sides) = ([23.3, 21.7], 15.4, 256);
        let mesh = prism(centre, r, sides, [-0.5, 4.5]);
        assert_eq!(mesh.open_edges(), 0);
        let v = voxelise(&mesh, dims, &in_place(&mesh)).unwrap();
        assert_eq!((v.open_edges, v.ambiguous), (0, 0));
        assert_eq!(v.solid, v.mask.iter().filter(|&&m| m).count());
        let want = obstacle_mask(dims, &Obstacle::Cylinder { centre, radius: r });
        let diff = differing(&v.mask, &want);
        let inner = r * (PI / sides as f64).cos() - 1e-9;
        for &n in &diff {
            let p = node(dims, n);
            let d = ((p[0] - centre[0]).powi(2) + (p[1] - centre[1]).powi(2)).sqrt();
            assert!(
                (inner..=r + 1e-9).contains(&d) && want[n],
                "node {p:?} at {d} from the axis"
            );
        }
        // The sagitta is 1.2e-3 cells: few nodes lie that close to the circle.
        assert!(diff.len() <= 5 * dims[2], "{} nodes differ", diff.len());
        assert!(v.solid > 700 * dims[2], "{}", v.solid);
    }

    /// A UV sphere marks what `Obstacle::Sphere` marks, but for nodes between the polyhedron (no nearer
    /// the centre than its faces' planes) and the sphere it is inscribed in.
    #[test]
    fn voxelise_a_uv_sphere_as_the_sphere() {
        let dims = [40, 41, 42];
        let (centre, r) = ([19.6, 20.2, 20.9], 13.3);
        let mesh = uv_sphere(centre, r, 128, 64);
        assert_eq!(mesh.open_edges(), 0);
        let v = voxelise(&mesh, dims, &in_place(&mesh)).unwrap();
        assert_eq!((v.open_edges, v.ambiguous), (0, 0));
        let want = obstacle_mask(dims, &Obstacle::Sphere { centre, radius: r });
        let plane_distance = |t: &[[f64; 3]; 3]| {
            let e = |i: usize| std::array::from_fn::<f64, 3, _>(|a| t[i][a] - t[0][a]);
            let (e1, e2) = (e(1), e(2));
            let n = [
                e1[1] * e2[2] - e1[2] * e2[1],
                e1[2] * e2[0] - e1[0] * e2[2],
                e1[0] * e2[1] - e1[1] * e2[0],
            ];
            let len = n.iter().map(|c| c * c).sum::<f64>().sqrt();
            (0..3)
                .map(|a| n[a] * (t[0][a] - centre[a]))
                .sum::<f64>()
                .abs()
                / len
        };
        let inner = mesh.triangles.iter().map(plane_distance).fold(r, f64::min) - 1e-9;
        assert!(r - inner < 0.02, "{inner}");
        let diff = differing(&v.mask, &want);
        for &n in &diff {
            let p = node(dims, n);
            let d = (0..3)
                .map(|a| (p[a] - centre[a]).powi(2))
                .sum::<f64>()
                .sqrt();
            assert!(
                (inner..=r + 1e-9).contains(&d) && want[n],
                "node {p:?} at {d} from the centre"
            );
        }
        assert!(diff.len() < 60, "{} nodes differ", diff.len());
        assert!(v.solid > 9000, "{}", v.solid);
    }

    /// A cube whose faces lie on node planes holds its nodes from the low faces up to, not including,
    /// the high ones, in all three directions alike (none ambiguous), whatever its triangulation and
    /// winding; one whose faces lie between node planes holds exactly what `Obstacle::Cuboid` holds.
    #[test]
    fn voxelise_a_cube_on_node_planes_is_half_open() {
        let dims = [12, 11, 13];
        let on = Placement {
            centre: [6.0, 6.0, 7.0],
            size: 4.0,
        };
        let half_open = obstacle_mask(
            dims,
            &Obstacle::Cuboid {
                lo: [4.0, 4.0, 5.0],
                hi: [7.0, 7.0, 8.0],
            },
        );
        for (flip, reverse) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut cube = unit_cube(flip, reverse);
            cube.triangles.rotate_left(5);
            let v = voxelise(&cube, dims, &on).unwrap();
            assert_eq!((v.open_edges, v.ambiguous, v.solid), (0, 0, 64));
            assert_eq!(v.mask, half_open, "flip {flip}, reverse {reverse}");
        }
        let between = Placement {
            centre: [6.5, 6.5, 7.5],
            size: 4.0,
        };
        let v = voxelise(&unit_cube(false, false), dims, &between).unwrap();
        let cuboid = Obstacle::Cuboid {
            lo: [4.5, 4.5, 5.5],
            hi: [8.5, 8.5, 9.5],
        };
        assert_eq!(v.mask, obstacle_mask(dims, &cuboid));
        assert_eq!((v.ambiguous, v.solid), (0, 64));
    }

    /// A cube without one triangle has 3 open edges and is refused (its rays through the hole disagree
    /// with the others), naming them and the fix; an open edge that no ray meets only counts. Bad
    /// placements are refused by what is wrong.
    #[test]
    fn voxelise_refuses_open_surfaces_and_bad_placements() {
        let dims = [12, 11, 13];
        let at = Placement {
            centre: [6.0, 6.0, 7.0],
            size: 4.0,
        };
        let mut holed = unit_cube(false, false);
        holed.triangles.remove(3);
        assert_eq!(holed.open_edges(), 3);
        let e = voxelise(&holed, dims, &at).unwrap_err().to_string();
        assert!(
            e.contains("3 open edges") && e.contains("Close Holes") && e.contains("voxel mask"),
            "{e}"
        );

        // A stray triangle between the node lines: open, yet every ray agrees.
        let mut stray = unit_cube(false, false);
        stray
            .triangles
            .push([[0.1, 0.1, 0.1], [0.15, 0.1, 0.1], [0.1, 0.15, 0.12]]);
        let v = voxelise(&stray, dims, &at).unwrap();
        assert_eq!((v.open_edges, v.ambiguous, v.solid), (3, 0, 64));

        let cube = unit_cube(false, false);
        let cases = [
            ([1.0, 6.0, 7.0], 4.0, "0.500 cells below x = -0.5"),
            ([6.0, 6.0, 11.0], 4.0, "0.500 cells above z = 12.5"),
            ([6.0, 6.0, 7.0], 30.0, "make it smaller (--body-size)"),
            ([6.0, 6.0, 7.0], f64::NAN, "positive number of cells"),
            ([6.0, 6.0, 7.0], -2.0, "positive number of cells"),
            ([6.0, f64::INFINITY, 7.0], 4.0, "finite grid coordinates"),
            ([6.5, 6.5, 6.5], 0.3, "holds no node"),
        ];
        for (centre, size, what) in cases {
            let e = voxelise(&cube, dims, &Placement { centre, size })
                .unwrap_err()
                .to_string();
            assert!(e.contains(what), "{centre:?} {size}: {e}");
        }
        let e = voxelise(&Mesh::default(), dims, &at)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no triangles"), "{e}");
        let mut broken = cube.clone();
        broken.triangles[7][2][1] = f64::NAN;
        let e = voxelise(&broken, dims, &at).unwrap_err().to_string();
        assert!(e.contains("not a finite number"), "{e}");
        let e = voxelise(&cube, [0, 4, 4], &at).unwrap_err().to_string();
        assert!(e.contains("grid 0x4x4"), "{e}");
    }

    /// An octahedron with its vertices on nodes has nodes exactly on its tilted faces, edges and
    /// vertices: all three directions class each as the node moved by (ε, ε², ε³) is classed, so none
    /// is ambiguous, and those on the surface are inside exactly where x is below the centre's. A
    /// closed surface placed anywhere leaves no node ambiguous.
    #[test]
    fn voxelise_ties_on_tilted_faces_agree() {
        let (c, r) = ([10.0, 9.0, 11.0], 6.0);
        let vertex = |a: usize, s: f64| {
            let mut p = c;
            p[a] += s * r;
            p
        };
        let mut octahedron = Mesh::default();
        for s in 0..8 {
            let sign = |bit: usize| if s >> bit & 1 == 0 { -1.0 } else { 1.0 };
            octahedron
                .triangles
                .push([vertex(0, sign(0)), vertex(1, sign(1)), vertex(2, sign(2))]);
        }
        let dims = [21, 19, 23];
        let v = voxelise(&octahedron, dims, &in_place(&octahedron)).unwrap();
        assert_eq!((v.open_edges, v.ambiguous), (0, 0));
        let (mut on, mut inside) = (0, 0);
        for (n, &got) in v.mask.iter().enumerate() {
            let p = node(dims, n);
            let l1: f64 = (0..3).map(|a| (p[a] - c[a]).abs()).sum();
            on += (l1 == r) as usize;
            // On the surface, moving by +ε in x goes inwards where x is below the centre's; on the
            // plane x = c_x, the step outwards in |x| wins over any in y or z.
            let want = l1 < r || (l1 == r && p[0] < c[0]);
            inside += want as usize;
            assert_eq!(got, want, "node {p:?}");
        }
        assert_eq!((on, inside), (146, 231 + 61));

        // A square turned 45° about x, drawn out along x: faces whose normals have no x component,
        // on which the y and z rays decide by the step in y.
        let (cy, cz, r) = (8.0, 9.0, 5.0);
        let diamond = [[r, 0.0], [0.0, r], [-r, 0.0], [0.0, -r]].map(|d| [cy + d[0], cz + d[1]]);
        let at = |x: f64, k: usize| [x, diamond[k % 4][0], diamond[k % 4][1]];
        let (x0, x1) = (2.5, 12.5);
        let mut prism = Mesh {
            triangles: vec![
                [at(x0, 0), at(x0, 1), at(x0, 2)],
                [at(x0, 0), at(x0, 2), at(x0, 3)],
                [at(x1, 0), at(x1, 2), at(x1, 1)],
                [at(x1, 0), at(x1, 3), at(x1, 2)],
            ],
        };
        for k in 0..4 {
            prism.triangles.push([at(x0, k), at(x1, k), at(x1, k + 1)]);
            prism
                .triangles
                .push([at(x0, k), at(x1, k + 1), at(x0, k + 1)]);
        }
        let dims = [15, 17, 19];
        let v = voxelise(&prism, dims, &in_place(&prism)).unwrap();
        assert_eq!((v.open_edges, v.ambiguous), (0, 0));
        let mut on = 0;
        for (n, &got) in v.mask.iter().enumerate() {
            let p = node(dims, n);
            let l1 = (p[1] - cy).abs() + (p[2] - cz).abs();
            on += (l1 == r && x0 < p[0] && p[0] < x1) as usize;
            let want = (x0 < p[0] && p[0] < x1) && (l1 < r || (l1 == r && p[1] < cy));
            assert_eq!(got, want, "node {p:?}");
        }
        assert_eq!(on, 20 * 10);

        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let ball = uv_sphere([0.0; 3], 1.0, 40, 20);
        for _ in 0..10 {
            let centre = [(); 3].map(|()| rng.random_range(12.0..18.0));
            let at = Placement {
                centre,
                size: rng.random_range(4.0..20.0),
            };
            let v = voxelise(&ball, [31, 31, 31], &at).unwrap();
            assert_eq!(v.ambiguous, 0, "{at:?}");
        }
    }

    /// An edge's function is exactly the opposite read from its other end, for any ends and point, so
    /// that two triangles sharing an edge never both take (or both leave) a point on it by rounding.
    #[test]
    fn voxelise_edges_are_exactly_antisymmetric() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut point = || [(); 3].map(|()| rng.random_range(-50.0..50.0));
        for _ in 0..10_000 {
            let (a, b, p) = (point(), point(), point());
            let (w, s) = edge(a, b, [p[0], p[1]]);
            assert_eq!((w, s), {
                let (w, s) = edge(b, a, [p[0], p[1]]);
                (-w, -s)
            });
            assert_ne!(s, 0);
        }
        // On the edge's line, the sign is that of the point moved by (ε, ε²).
        let (a, b) = ([0.0, 0.0, 0.0], [2.0, 2.0, 5.0]);
        assert_eq!(edge(a, b, [1.0, 1.0]), (0.0, -1));
        let (a, b) = ([0.0, 3.0, 0.0], [2.0, 3.0, 5.0]);
        assert_eq!(edge(a, b, [1.0, 3.0]), (0.0, 1));
        assert_eq!(edge(a, a, [1.0, 3.0]).1, 0);
    }

    /// A mesh written to an STL file and read back is voxelised as the mesh itself (its coordinates
    /// are f32 already, as STL keeps them).
    #[test]
    fn voxelise_an_stl_file_as_its_mesh() {
        use lattice_gpu_formats::stl::{read_stl, write_stl};
        let mut mesh = uv_sphere([0.0; 3], 1.0, 24, 12);
        for c in mesh.triangles.iter_mut().flatten().flatten() {
            *c = *c as f32 as f64;
        }
        let dir = lattice_gpu_testkit::temp_dir("voxelise-stl");
        let path = dir.join("ball.stl");
        write_stl(&path, &mesh).unwrap();
        let read = read_stl(&path).unwrap();
        assert_eq!(read, mesh);
        let at = Placement {
            centre: [10.2, 9.7, 10.4],
            size: 14.0,
        };
        let v = voxelise(&read, [21, 20, 22], &at).unwrap();
        assert_eq!(v, voxelise(&mesh, [21, 20, 22], &at).unwrap());
        assert!(
            v.solid > 1000 && v.ambiguous == 0,
            "{} {}",
            v.solid,
            v.ambiguous
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The links of `mask` from a fluid node of the grid into a solid one, as `(b, q)` for
    /// [`Surface::cut`].
    fn links_into(dims: [usize; 3], mask: &[bool]) -> Vec<([f64; 3], usize)> {
        let mut links = Vec::new();
        for (n, _) in mask.iter().enumerate().filter(|(_, &m)| m) {
            let b = node(dims, n);
            for (q, c) in C.iter().enumerate().skip(1) {
                let p: [f64; 3] = std::array::from_fn(|a| b[a] - c[a] as f64);
                let within = (0..3).all(|a| (0.0..dims[a] as f64).contains(&p[a]));
                let at = |a: usize| p[a] as usize;
                if within && !mask[at(0) + dims[0] * (at(1) + dims[1] * at(2))] {
                    links.push((b, q));
                }
            }
        }
        links
    }

    /// Every link into `voxelise`'s sphere is cut, at a point between the polyhedron's innermost
    /// face plane and the sphere it is inscribed in (0.02 cells apart, against links of 1 to 1.4),
    /// queried from many threads at once.
    #[test]
    fn voxelise_surface_cuts_every_link_into_a_uv_sphere() {
        let dims = [40, 41, 42];
        let (centre, r) = ([19.6, 20.2, 20.9], 13.3);
        let mesh = uv_sphere(centre, r, 128, 64);
        let at = in_place(&mesh);
        let v = voxelise(&mesh, dims, &at).unwrap();
        let surface = Surface::new(&mesh, dims, &at);
        let inner = mesh
            .triangles
            .iter()
            .map(|t| {
                let n = normal(t);
                let len = dot(n, n).sqrt();
                (0..3)
                    .map(|a| n[a] * (t[0][a] - centre[a]))
                    .sum::<f64>()
                    .abs()
                    / len
            })
            .fold(r, f64::min);
        assert!(r - inner < 0.02, "{inner}");
        let links = links_into(dims, &v.mask);
        assert!(links.len() > 10_000, "{}", links.len());
        let cuts: Vec<Option<f64>> = links.par_iter().map(|&(b, q)| surface.cut(b, q)).collect();
        for (&(b, q), cut) in links.iter().zip(cuts) {
            let t = cut.unwrap_or_else(|| panic!("the link {q} into {b:?} is not cut"));
            assert!(t > 0.0 && t <= 1.0, "{t}");
            let hit: [f64; 3] = std::array::from_fn(|a| b[a] - (1.0 - t) * C[q][a] as f64);
            let d = (0..3)
                .map(|a| (hit[a] - centre[a]).powi(2))
                .sum::<f64>()
                .sqrt();
            assert!(
                (inner - 1e-9..=r + 1e-9).contains(&d),
                "the link {q} into {b:?} cut at {t}, {d} from the centre"
            );
        }
    }

    /// A box whose faces lie between node planes cuts each face and edge link at exactly its face's
    /// distance, also where a link passes through one of its edges (two faces at one share); a link
    /// through a thin plate, at the face it meets first.
    #[test]
    fn voxelise_surface_cuts_a_box_at_its_faces() {
        let (lo, hi) = ([4.25, 3.25, 2.6], [9.3, 7.7, 8.1]);
        let mut mesh = unit_cube(true, false);
        for p in mesh.triangles.iter_mut().flatten() {
            *p = std::array::from_fn(|a| lo[a] + p[a] * (hi[a] - lo[a]));
        }
        let dims = [13, 11, 11];
        let at = in_place(&mesh);
        let (lo, hi) = transform(&mesh, &at).unwrap().bounds();
        let v = voxelise(&mesh, dims, &at).unwrap();
        let surface = Surface::new(&mesh, dims, &at);
        let (mut faces, mut edges, mut through_edges) = (0, 0, 0);
        for (b, q) in links_into(dims, &v.mask) {
            // Where the link enters the box: the last of the slabs it enters.
            let c = C[q].map(f64::from);
            let entries: Vec<f64> = (0..3)
                .filter(|&a| c[a] != 0.0)
                .map(|a| {
                    let face = if c[a] > 0.0 { lo[a] } else { hi[a] };
                    (face - (b[a] - c[a])) / c[a]
                })
                .collect();
            let want = entries.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let got = surface.cut(b, q).unwrap();
            assert!(
                (got - want).abs() <= 1e-12,
                "link {q} into {b:?}: {got}, not {want}"
            );
            match entries.len() {
                1 => faces += 1,
                _ => edges += 1,
            }
            through_edges +=
                entries.iter().all(|&t| (t - want).abs() < 1e-12) as usize * (entries.len() - 1);
        }
        assert!(faces > 100 && edges > 400, "{faces} {edges}");
        assert!(through_edges > 0);

        // A plate thinner than a link is crossed twice: the cut is the first crossing, either way.
        let mut plate = unit_cube(false, false);
        for p in plate.triangles.iter_mut().flatten() {
            *p = std::array::from_fn(|a| [4.2, 2.0, 2.0][a] + p[a] * [0.4, 6.0, 6.0][a]);
        }
        let surface = Surface::new(&plate, dims, &in_place(&plate));
        let near = |got: Option<f64>, want: f64| (got.unwrap() - want).abs() <= 1e-12;
        assert!(near(surface.cut([5.0, 5.0, 5.0], 1), 0.2));
        assert!(near(surface.cut([4.0, 5.0, 5.0], 2), 0.4));
        assert!(near(surface.cut([5.0, 6.0, 5.0], 7), 0.2));
    }

    /// A link that crosses no triangle is not cut: one far from the body, one between two nodes inside
    /// it, one along a face's plane outside it; nor any link of a surface whose placement `voxelise`
    /// refuses.
    #[test]
    fn voxelise_surface_leaves_links_that_cross_nothing() {
        let dims = [12, 11, 13];
        let at = Placement {
            centre: [6.5, 6.5, 7.5],
            size: 4.0,
        };
        let cube = unit_cube(false, false);
        let surface = Surface::new(&cube, dims, &at);
        assert_eq!(surface.cut([5.0, 6.0, 7.0], 1), Some(0.5));
        assert_eq!(surface.cut([1.0, 1.0, 1.0], 1), None);
        assert_eq!(surface.cut([2.0, 10.0, 12.0], 8), None);
        assert_eq!(surface.cut([6.0, 6.0, 7.0], 7), None);
        assert_eq!(surface.cut([6.0, 4.0, 7.0], 1), None);
        let refused = Surface::new(&cube, dims, &Placement { size: -1.0, ..at });
        assert_eq!(refused.cut([5.0, 6.0, 7.0], 1), None);
    }

    /// The timings' case: a sphere of 200k triangles, 200 cells across, in a 256³ grid.
    fn big_sphere() -> (Mesh, [usize; 3], Placement) {
        let at = Placement {
            centre: [127.3, 127.6, 127.9],
            size: 200.0,
        };
        (uv_sphere([0.0; 3], 1.0, 448, 224), [256; 3], at)
    }

    /// The cost of binning a 200k-triangle sphere for a 256³ grid and of cutting every link into it.
    #[test]
    #[ignore = "a timing: run in release with --ignored --nocapture"]
    fn timing_of_the_cuts_of_a_200k_triangle_sphere() {
        let (mesh, dims, at) = big_sphere();
        let v = voxelise(&mesh, dims, &at).unwrap();
        let links = links_into(dims, &v.mask);
        let started = std::time::Instant::now();
        let surface = Surface::new(&mesh, dims, &at);
        let binned = started.elapsed();
        let cut = links
            .par_iter()
            .filter(|&&(b, q)| surface.cut(b, q).is_some())
            .count();
        println!(
            "{} triangles binned in {binned:.2?}, {} bins; {} links cut in {:.2?} more",
            mesh.triangles.len(),
            surface.keys.len(),
            links.len(),
            started.elapsed() - binned
        );
        assert_eq!(cut, links.len());
    }

    /// The time the module docs quote: a 200k-triangle sphere on a 256³ grid.
    #[test]
    #[ignore = "a timing, for the module docs: run in release with --ignored --nocapture"]
    fn timing_of_a_200k_triangle_sphere_on_256_cubed() {
        let (mesh, dims, at) = big_sphere();
        let started = std::time::Instant::now();
        let v = voxelise(&mesh, dims, &at).unwrap();
        let took = started.elapsed();
        println!(
            "{} triangles on {dims:?}: {took:.2?} on {} threads; {} solid, {} ambiguous",
            mesh.triangles.len(),
            rayon::current_num_threads(),
            v.solid,
            v.ambiguous
        );
        let ball = 4.0 / 3.0 * PI * 100f64.powi(3);
        assert!((v.solid as f64 / ball - 1.0).abs() < 0.01, "{}", v.solid);
    }
}
