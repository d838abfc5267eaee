//! The grid and its cell tags: which cells are fluid, resting walls or moving walls. Axes without
//! wall cells at their ends are periodic. Obstacles inside it come from built-in shapes
//! ([`Obstacle`]) or a voxel mask ([`Geometry::add_mask`], e.g. from a `.npy` file); where their
//! surface is known, so is where it cuts each link into them ([`Geometry::cut`]).

use std::collections::HashMap;

use lattice_gpu_kernels::lbm::{link, opposite, tag, Velocities, C};
use rayon::prelude::*;

use crate::{Error, Result};

/// The longest side: a GPU grid has at most 65535 blocks along y and z.
pub const MAX_SIDE: usize = 65535;

/// A solid body in the grid, in lattice units: cell `[x, y, z]` has its node at `(x, y, z)`. The
/// nodes inside become resting walls, from which the populations bounce back halfway to their fluid
/// neighbours.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Obstacle {
    /// A cylinder along z through the whole grid: the nodes within `radius` of `centre` in x and y.
    Cylinder {
        /// `(x, y)` of its axis.
        centre: [f64; 2],
        /// Its radius.
        radius: f64,
    },
    /// The nodes within `radius` of `centre`.
    Sphere {
        /// Its centre.
        centre: [f64; 3],
        /// Its radius.
        radius: f64,
    },
    /// The nodes with `lo <= p <= hi` on every axis.
    Cuboid {
        /// The low corner.
        lo: [f64; 3],
        /// The high corner.
        hi: [f64; 3],
    },
}

impl Obstacle {
    /// Whether the node at `p` lies inside.
    fn contains(&self, p: [f64; 3]) -> bool {
        let square = |d: &[f64]| d.iter().map(|v| v * v).sum::<f64>();
        match *self {
            Self::Cylinder { centre, radius } => {
                square(&[p[0] - centre[0], p[1] - centre[1]]) <= radius * radius
            }
            Self::Sphere { centre, radius } => {
                square(&[p[0] - centre[0], p[1] - centre[1], p[2] - centre[2]]) <= radius * radius
            }
            Self::Cuboid { lo, hi } => (0..3).all(|a| lo[a] <= p[a] && p[a] <= hi[a]),
        }
    }

    /// The box that holds it (a cylinder's spans z whatever the grid: `dims_z` its extent).
    fn bounds(&self, dims_z: usize) -> ([f64; 3], [f64; 3]) {
        match *self {
            Self::Cylinder { centre, radius } => (
                [centre[0] - radius, centre[1] - radius, 0.0],
                [centre[0] + radius, centre[1] + radius, dims_z as f64 - 1.0],
            ),
            Self::Sphere { centre, radius } => {
                (centre.map(|c| c - radius), centre.map(|c| c + radius))
            }
            Self::Cuboid { lo, hi } => (lo, hi),
        }
    }

    /// Where the link from the node at `p` (outside) along `c` (to a node inside) enters the body, as
    /// a share of the link in `(0, 1]`, in a grid of `dims` (a box spanning an axis's nodes has no
    /// faces across it: the axis may be periodic).
    fn cut(&self, p: [f64; 3], c: [i32; 3], dims: [usize; 3]) -> f64 {
        let c = c.map(f64::from);
        // The smaller root of `|p + t c - o|^2 = r^2` over the axes that count.
        let ball = |o: &[f64], r: f64, axes: usize| {
            let (mut a, mut b, mut s) = (0.0, 0.0, -r * r);
            for i in 0..axes {
                let d = p[i] - o[i];
                (a, b, s) = (a + c[i] * c[i], b + c[i] * d, s + d * d);
            }
            (-b - (b * b - a * s).max(0.0).sqrt()) / a
        };
        let t = match *self {
            Self::Cylinder { centre, radius } => ball(&centre, radius, 2),
            Self::Sphere { centre, radius } => ball(&centre, radius, 3),
            // The last of the slabs' entries.
            Self::Cuboid { lo, hi } => (0..3)
                .filter(|&a| c[a] != 0.0 && !(lo[a] <= 0.0 && hi[a] >= (dims[a] - 1) as f64))
                .map(|a| ((if c[a] > 0.0 { lo[a] } else { hi[a] }) - p[a]) / c[a])
                .fold(0.0, f64::max),
        };
        // Rounding may put a surface through a node a hair outside the link.
        t.clamp(f64::EPSILON, 1.0)
    }
}

/// The sides of an open channel ([`Geometry::open_ended`]): which of its y and z ends are resting walls
/// or free-slip walls; the others are periodic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sides {
    /// Periodic in y and z: a body in an unbounded row of its copies.
    Periodic,
    /// Resting walls at the y ends, periodic in z: a plane channel.
    WallsY,
    /// Resting walls at the y and z ends: a duct.
    Walls,
    /// Free-slip walls at the y and z ends: a wind tunnel whose sides hold no boundary layer.
    Slip,
}

impl Sides {
    /// The tags of the cells at the y ends and at the z ends (0: none, periodic).
    pub fn tags(self) -> [u8; 2] {
        match self {
            Self::Periodic => [0, 0],
            Self::WallsY => [tag::WALL, 0],
            Self::Walls => [tag::WALL, tag::WALL],
            Self::Slip => [tag::SLIP_Y, tag::SLIP_Z],
        }
    }

    /// Whether the y ends and the z ends are resting walls (a parabolic inflow runs between them).
    pub fn walled(self) -> [bool; 2] {
        self.tags().map(|t| t == tag::WALL)
    }
}

/// How populations come back from a body's surface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BounceBack {
    /// Halfway between the fluid cell and the body's cell: the surface a staircase of cells.
    Halfway,
    /// At the surface's distance along each link, by linear interpolation (Bouzidi, Firdaouss and
    /// Lallemand 2001), where the surface is known (built-in shapes, STL files); halfway elsewhere
    /// (masks, walls).
    Interpolated,
}

/// A grid of tagged cells, and the bodies in it whose forces a run reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Geometry {
    dims: [usize; 3],
    tags: Vec<u8>,
    /// The cells of each body, in the order added.
    bodies: Vec<Vec<u32>>,
    /// Where a body's surface cuts a link into it ([`link`]), as a share of the link.
    cuts: HashMap<u64, f64>,
    bounce_back: BounceBack,
    velocities: Velocities,
}

impl Geometry {
    /// All fluid, periodic in every direction. Fails on an empty grid, a side above [`MAX_SIDE`], or more
    /// cells than the kernels' 32-bit cell index holds.
    pub fn periodic(dims: [usize; 3]) -> Result<Self> {
        let cells = Self::check_dims(dims, "use a smaller grid")?;
        Ok(Self {
            dims,
            tags: vec![tag::FLUID; cells],
            bodies: Vec::new(),
            cuts: HashMap::new(),
            bounce_back: BounceBack::Halfway,
            velocities: Velocities::D3Q19,
        })
    }

    /// The cells of a grid of `dims`, or the error that [`periodic`](Self::periodic) would give, with
    /// `fix` (which names what sets the grid, e.g. "use a smaller --size"); allocates nothing.
    pub fn check_dims(dims: [usize; 3], fix: &str) -> Result<usize> {
        let cells = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        match cells {
            Some(c)
                if dims.iter().all(|&d| (1..=MAX_SIDE).contains(&d)) && c <= u32::MAX as usize =>
            {
                Ok(c)
            }
            _ => Err(Error::InvalidParameter(format!(
                "grid {}x{}x{}: every side must be 1 to {MAX_SIDE} cells and the cells fewer than 2^32; \
                 {fix}",
                dims[0], dims[1], dims[2]
            ))),
        }
    }

    /// A channel: resting walls at `y = 0` and `y = ny - 1`, periodic in x and z.
    pub fn channel(dims: [usize; 3]) -> Result<Self> {
        let mut g = Self::periodic(dims)?;
        g.need("a channel", [1, 3, 1])?;
        for z in 0..dims[2] {
            for x in 0..dims[0] {
                g.set([x, 0, z], tag::WALL);
                g.set([x, dims[1] - 1, z], tag::WALL);
            }
        }
        g.mark_near_walls();
        Ok(g)
    }

    /// A channel fed at `x = 0` and drained at `x = nx - 1`: resting walls at `y = 0` and `y = ny - 1`,
    /// inlet and outlet cells between them ([`tag::INLET`], [`tag::OUTLET`]), periodic in z.
    pub fn open_channel(dims: [usize; 3]) -> Result<Self> {
        Self::open_ended(dims, Sides::WallsY)
    }

    /// A channel fed at `x = 0` and drained at `x = nx - 1` ([`tag::INLET`], [`tag::OUTLET`]), its
    /// sides as `sides` says; the inlet and outlet fill the ends between the walls.
    pub fn open_ended(dims: [usize; 3], sides: Sides) -> Result<Self> {
        let mut g = Self::periodic(dims)?;
        let [ty, tz] = sides.tags();
        let min = |t: u8| if t != 0 { 3 } else { 1 };
        g.need("an open channel", [3, min(ty), min(tz)])?;
        let [nx, ny, nz] = dims;
        for z in 0..nz {
            for y in 0..ny {
                let side = |t: u8, v: usize, n: usize| if v == 0 || v == n - 1 { t } else { 0 };
                // A free-slip edge of a duct mirrors along both normals; a resting wall is one kind.
                let wall = match side(ty, y, ny) | side(tz, z, nz) {
                    t if t & tag::WALL != 0 => tag::WALL,
                    t => t,
                };
                if wall != 0 {
                    for x in 0..nx {
                        g.set([x, y, z], wall);
                    }
                } else {
                    g.set([0, y, z], tag::INLET);
                    g.set([nx - 1, y, z], tag::OUTLET);
                }
            }
        }
        g.mark_near_walls();
        Ok(g)
    }

    /// A lid-driven cavity: resting walls at `x = 0`, `x = nx - 1`, `y = 0` (and `z = 0`, `z = nz - 1`
    /// when `closed_z`; otherwise periodic in z, a quasi-2-D cavity); the lid `y = ny - 1` is a moving
    /// wall.
    pub fn cavity(dims: [usize; 3], closed_z: bool) -> Result<Self> {
        let mut g = Self::periodic(dims)?;
        g.need("a cavity", [3, 3, if closed_z { 3 } else { 1 }])?;
        let [nx, ny, nz] = dims;
        for z in 0..nz {
            for y in 0..ny {
                for x in 0..nx {
                    let side = x == 0 || x == nx - 1 || y == 0;
                    let end = closed_z && (z == 0 || z == nz - 1);
                    if side || end {
                        g.set([x, y, z], tag::WALL);
                    } else if y == ny - 1 {
                        g.set([x, y, z], tag::MOVING_WALL);
                    }
                }
            }
        }
        g.mark_near_walls();
        Ok(g)
    }

    fn need(&self, what: &str, min: [usize; 3]) -> Result<()> {
        if (0..3).all(|a| self.dims[a] >= min[a]) {
            Ok(())
        } else {
            Err(Error::InvalidParameter(format!(
                "{what} needs at least {}x{}x{} cells (walls take one cell on each closed side); \
                 got {}x{}x{}",
                min[0], min[1], min[2], self.dims[0], self.dims[1], self.dims[2]
            )))
        }
    }

    /// Makes the nodes inside `obstacle` resting walls and returns how many there are. Fails, changing
    /// nothing, where its parameters are not finite and positive, where it reaches beyond the grid (a
    /// body across a periodic side would be cut in two), or where it holds no node.
    pub fn add_obstacle(&mut self, obstacle: &Obstacle) -> Result<usize> {
        let (lo, hi) = obstacle.bounds(self.dims[2]);
        let sized = match *obstacle {
            Obstacle::Cylinder { radius, .. } | Obstacle::Sphere { radius, .. } => radius > 0.0,
            Obstacle::Cuboid { lo, hi } => (0..3).all(|a| lo[a] <= hi[a]),
        };
        let finite = lo.iter().chain(&hi).all(|v| v.is_finite());
        if !sized || !finite {
            return Err(Error::InvalidParameter(format!(
                "obstacle {obstacle:?}: a radius must be positive and finite, a box's low corner \
                 below its high one on every axis"
            )));
        }
        let inside = (0..3).all(|a| lo[a] >= 0.0 && hi[a] <= (self.dims[a] - 1) as f64);
        if !inside {
            return Err(Error::InvalidParameter(format!(
                "obstacle {obstacle:?} reaches beyond the grid's nodes 0..{} x 0..{} x 0..{}: \
                 move or shrink it, or make the grid larger",
                self.dims[0] - 1,
                self.dims[1] - 1,
                self.dims[2] - 1
            )));
        }
        let solid: Vec<bool> = (0..self.cells())
            .into_par_iter()
            .map(|n| obstacle.contains(self.node(n)))
            .collect();
        if !solid.contains(&true) {
            return Err(Error::InvalidParameter(format!(
                "obstacle {obstacle:?} holds no node of the grid (nodes lie at whole coordinates): \
                 make it larger"
            )));
        }
        // Inside the grid, so a link into it wraps only across a box spanning an axis, whose cut
        // ignores that axis: its fluid end is the body's node less `c_q`.
        let dims = self.dims;
        self.add_body(&solid, |p, q| {
            let p = [0, 1, 2].map(|a| p[a] - f64::from(C[q][a]));
            Some(obstacle.cut(p, C[q], dims))
        })
    }

    /// [`add_mask`](Self::add_mask) with the surface's cuts: `cut(p, q)` says where the surface cuts
    /// the link along `c_q` into the body's node `p` from its fluid neighbour (a share of the link in
    /// `(0, 1]`, or `None` for halfway), for [`BounceBack::Interpolated`].
    pub fn add_body(
        &mut self,
        mask: &[bool],
        cut: impl Fn([f64; 3], usize) -> Option<f64> + Sync + Send,
    ) -> Result<usize> {
        let marked = self.add_mask(mask)?;
        let (this, cut) = (&*self, &cut);
        let body = this.bodies.last().expect("a body was added");
        let cuts: Vec<(u64, f64)> = body
            .par_iter()
            .flat_map_iter(|&b| {
                let b = b as usize;
                // Every direction of either set: the set may change after.
                (1..C.len()).filter_map(move |q| {
                    let n = this.neighbour(b, opposite(q));
                    let d = cut(this.node(b), q)?;
                    this.is_fluid(n).then_some((link(n as u32, q), d))
                })
            })
            .collect();
        self.cuts.extend(cuts);
        Ok(marked)
    }

    /// Sets how populations come back from the bodies' surfaces (default [`BounceBack::Halfway`]).
    pub fn set_bounce_back(&mut self, rule: BounceBack) {
        self.bounce_back = rule;
    }

    /// How populations come back from the bodies' surfaces.
    pub fn bounce_back(&self) -> BounceBack {
        self.bounce_back
    }

    /// Sets the velocity set (default D3Q19), which decides the links and which cells lie next to a
    /// boundary.
    pub fn set_velocities(&mut self, velocities: Velocities) {
        // Marking is a pass over the grid: not again for the set it has.
        if velocities != self.velocities {
            self.velocities = velocities;
            self.mark_near_walls();
        }
    }

    /// The velocity set.
    pub fn velocities(&self) -> Velocities {
        self.velocities
    }

    /// The directions of the velocity set but the rest one.
    fn moving(&self) -> std::ops::Range<usize> {
        1..self.velocities.q()
    }

    /// The links whose wall is not halfway ([`cut`](Self::cut)): `(cell, q, distance)`, sorted.
    pub fn cut_links(&self) -> Vec<(usize, usize, f64)> {
        if self.bounce_back == BounceBack::Halfway {
            return Vec::new();
        }
        let mut links: Vec<(usize, usize, f64)> = self
            .cuts
            .keys()
            .map(|&l| ((l & 0xffff_ffff) as usize, (l >> 32) as usize))
            // A later body may have covered a cell; D3Q19 leaves the corners out.
            .filter(|&(n, q)| self.is_fluid(n) && q < self.velocities.q())
            .map(|(n, q)| (n, q, self.cut(n, q)))
            .filter(|&(.., d)| d != 0.5)
            .collect();
        links.sort_unstable_by_key(|&(n, q, _)| (n, q));
        links
    }

    /// Where the wall is on the link from fluid cell `n` along `c_q`, as a share of the link, for the
    /// kernels ([`Cuts`](lattice_gpu_kernels::lbm::Cuts)): the surface's cut with
    /// [`BounceBack::Interpolated`] where it is known, 0.5 (halfway) elsewhere, and 0.5 too where the
    /// cut is nearer than halfway but the cell upstream (`n - c_q`), whose population the rule would
    /// take, is not fluid.
    pub fn cut(&self, n: usize, q: usize) -> f64 {
        if self.bounce_back == BounceBack::Halfway {
            return 0.5;
        }
        match self.cuts.get(&link(n as u32, q)) {
            Some(&d) if d >= 0.5 || self.is_fluid(self.neighbour(n, opposite(q))) => d,
            _ => 0.5,
        }
    }

    /// Makes the cells where `mask` is true resting walls (one per cell, x fastest: a `.npy` array of
    /// shape `(nz, ny, nx)`), a body of its own ([`bodies`](Self::bodies)), and returns how many it
    /// marks. Fails, changing nothing, on a mask of another length.
    pub fn add_mask(&mut self, mask: &[bool]) -> Result<usize> {
        if mask.len() != self.cells() {
            let [nx, ny, nz] = self.dims;
            return Err(Error::InvalidParameter(format!(
                "a mask of {} cells for a grid of {nx}x{ny}x{nz} ({} cells): give one of shape \
                 ({nz}, {ny}, {nx})",
                mask.len(),
                self.cells()
            )));
        }
        let body: Vec<u32> = (0..mask.len())
            .filter(|&n| mask[n])
            .map(|n| n as u32)
            .collect();
        // A body on an inlet or outlet would feed or drain the flow through itself.
        let open = |n: usize| self.tags[n] & (tag::INLET | tag::OUTLET) != 0;
        let touching = body
            .iter()
            .map(|&n| n as usize)
            .find(|&n| open(n) || self.moving().any(|q| open(self.neighbour(n, q))));
        if let Some(n) = touching {
            let p = self.node(n).map(|v| v as usize);
            return Err(Error::InvalidParameter(format!(
                "the body's cell [{}, {}, {}] lies on or next to an inlet or outlet cell: move the body \
                 away from the open ends (at least one fluid cell between) or make the grid longer",
                p[0], p[1], p[2]
            )));
        }
        for &n in &body {
            self.tags[n as usize] = tag::WALL;
        }
        self.mark_near_walls();
        let marked = body.len();
        self.bodies.push(body);
        Ok(marked)
    }

    /// The bodies added ([`add_obstacle`](Self::add_obstacle), [`add_mask`](Self::add_mask)), each as
    /// its cells, in the order added.
    pub fn bodies(&self) -> &[Vec<u32>] {
        &self.bodies
    }

    /// The links from fluid cells into body `b`: `(cell, q)` for each fluid cell whose neighbour along
    /// `c_q` belongs to the body, sorted by cell, then `q`.
    pub fn links(&self, b: usize) -> Vec<(usize, usize)> {
        let mut links: Vec<(usize, usize)> = self.bodies[b]
            .iter()
            .flat_map(|&cell| {
                self.moving()
                    .map(move |q| (self.neighbour(cell as usize, opposite(q)), q))
            })
            .filter(|&(n, _)| self.is_fluid(n))
            .collect();
        links.sort_unstable();
        links
    }

    /// The cell at `n + c_q`, wrapped periodically.
    pub(crate) fn neighbour(&self, n: usize, q: usize) -> usize {
        let p = self.node(n);
        let at: [usize; 3] = std::array::from_fn(|a| {
            (p[a] as i64 + C[q][a] as i64).rem_euclid(self.dims[a] as i64) as usize
        });
        self.index(at)
    }

    /// The node of cell `n`.
    fn node(&self, n: usize) -> [f64; 3] {
        let [nx, ny, _] = self.dims;
        [
            (n % nx) as f64,
            (n / nx % ny) as f64,
            (n / (nx * ny)) as f64,
        ]
    }

    /// Grid `[nx, ny, nz]`.
    pub fn dims(&self) -> [usize; 3] {
        self.dims
    }

    /// Cells of the grid.
    pub fn cells(&self) -> usize {
        self.tags.len()
    }

    /// The cell index of `[x, y, z]`.
    pub fn index(&self, p: [usize; 3]) -> usize {
        p[0] + self.dims[0] * (p[1] + self.dims[1] * p[2])
    }

    /// The tags, one per cell, [`tag::NEAR_WALL`] included.
    pub fn tags(&self) -> &[u8] {
        &self.tags
    }

    /// Whether cell `n` is fluid.
    pub fn is_fluid(&self, n: usize) -> bool {
        !tag::is_boundary(self.tags[n])
    }

    /// Fluid cells.
    pub fn fluid_cells(&self) -> usize {
        (0..self.cells()).filter(|&n| self.is_fluid(n)).count()
    }

    /// Sets the tag of one cell as given, near-wall mark included (for copying tags that were marked
    /// already).
    pub fn set_raw(&mut self, p: [usize; 3], t: u8) {
        let n = self.index(p);
        self.tags[n] = t;
    }

    /// Sets the tag of one cell (call [`mark_near_walls`](Self::mark_near_walls) when done).
    pub fn set(&mut self, p: [usize; 3], t: u8) {
        let n = self.index(p);
        self.tags[n] = t;
    }

    /// Marks every fluid cell with a wall among its neighbours along the velocity set's directions
    /// with [`tag::NEAR_WALL`] (and clears
    /// the mark elsewhere), so that the kernels look at neighbour tags only there.
    pub fn mark_near_walls(&mut self) {
        let [nx, ny, nz] = self.dims;
        let wrap =
            |v: usize, d: i32, len: usize| (v as i64 + d as i64).rem_euclid(len as i64) as usize;
        let mut marked = self.tags.clone();
        marked
            .par_chunks_mut(nx * ny)
            .enumerate()
            .for_each(|(z, plane)| {
                for y in 0..ny {
                    for x in 0..nx {
                        let n = self.index([x, y, z]);
                        if !self.is_fluid(n) {
                            continue;
                        }
                        let near = self.velocities.directions().iter().any(|c| {
                            let m = self.index([
                                wrap(x, c[0], nx),
                                wrap(y, c[1], ny),
                                wrap(z, c[2], nz),
                            ]);
                            !self.is_fluid(m)
                        });
                        plane[x + nx * y] = if near { tag::NEAR_WALL } else { tag::FLUID };
                    }
                }
            });
        self.tags = marked;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cavity_tags() {
        let g = Geometry::cavity([5, 4, 3], false).unwrap();
        assert_eq!(g.tags()[g.index([2, 3, 1])], tag::MOVING_WALL);
        assert_eq!(g.tags()[g.index([0, 3, 1])], tag::WALL);
        assert_eq!(g.tags()[g.index([2, 1, 0])], tag::NEAR_WALL);
        assert_eq!(g.fluid_cells(), 3 * 2 * 3);
        let g = Geometry::channel([4, 8, 2]).unwrap();
        assert_eq!(g.tags()[g.index([1, 3, 1])], tag::FLUID);
        assert_eq!(g.tags()[g.index([1, 1, 1])], tag::NEAR_WALL);
        assert!(Geometry::cavity([2, 5, 5], true).is_err());
        assert!(Geometry::periodic([0, 5, 5]).is_err());
        assert!(Geometry::periodic([1 << 20, 1 << 20, 1]).is_err());
    }

    /// Built-in obstacles mark the lattice points inside them (Gauss's circle and ball counts), the
    /// fluid around them is marked near a wall, and bad ones are refused with the grid unchanged.
    #[test]
    fn obstacles_mark_the_nodes_inside() {
        let mut g = Geometry::channel([16, 16, 3]).unwrap();
        let walls = 16 * 2 * 3;
        let cylinder = Obstacle::Cylinder {
            centre: [7.0, 8.0],
            radius: 2.0,
        };
        // 13 lattice points lie within 2 of a lattice point in the plane.
        assert_eq!(g.add_obstacle(&cylinder).unwrap(), 13 * 3);
        assert_eq!(g.cells() - g.fluid_cells(), walls + 13 * 3);
        assert_eq!(g.tags()[g.index([7, 10, 1])], tag::WALL);
        assert_eq!(g.tags()[g.index([7, 11, 1])], tag::NEAR_WALL);
        assert_eq!(g.tags()[g.index([7, 13, 1])], tag::FLUID);

        let mut g = Geometry::periodic([9, 9, 9]).unwrap();
        let sphere = Obstacle::Sphere {
            centre: [4.0, 4.0, 4.0],
            radius: 2.0,
        };
        // 33 lattice points lie within 2 of a lattice point in space.
        assert_eq!(g.add_obstacle(&sphere).unwrap(), 33);
        let cuboid = Obstacle::Cuboid {
            lo: [0.5, 0.0, 7.0],
            hi: [2.0, 8.0, 8.0],
        };
        assert_eq!(g.add_obstacle(&cuboid).unwrap(), 2 * 9 * 2);
        assert_eq!(g.cells() - g.fluid_cells(), 33 + 36);

        let before = g.clone();
        let bad = [
            Obstacle::Sphere {
                centre: [1.0, 4.0, 4.0],
                radius: 2.0,
            },
            Obstacle::Sphere {
                centre: [4.5, 4.5, 4.5],
                radius: 0.5,
            },
            Obstacle::Cylinder {
                centre: [4.0, 4.0],
                radius: f64::NAN,
            },
            Obstacle::Cuboid {
                lo: [3.0, 3.0, 3.0],
                hi: [2.0, 5.0, 5.0],
            },
        ];
        for (o, what) in bad
            .iter()
            .zip(["beyond the grid", "no node", "positive", "low corner"])
        {
            let e = g.add_obstacle(o).unwrap_err().to_string();
            assert!(e.contains(what), "{o:?}: {e}");
        }
        assert_eq!(g, before);
    }

    /// An open channel's ends are inlet and outlet cells between its walls; a body on or next to them is
    /// refused with the grid unchanged, one a cell further in is taken.
    #[test]
    fn a_body_may_not_touch_the_open_ends() {
        let mut g = Geometry::open_channel([10, 6, 2]).unwrap();
        assert_eq!(g.tags()[g.index([0, 3, 1])], tag::INLET);
        assert_eq!(g.tags()[g.index([9, 3, 1])], tag::OUTLET);
        assert_eq!(g.tags()[g.index([0, 0, 1])], tag::WALL);
        assert_eq!(g.tags()[g.index([8, 3, 1])], tag::NEAR_WALL);
        let before = g.clone();
        for x in [0.0, 1.0, 8.0] {
            let cube = Obstacle::Cuboid {
                lo: [x, 2.0, 0.0],
                hi: [x, 3.0, 1.0],
            };
            let e = g.add_obstacle(&cube).unwrap_err().to_string();
            assert!(e.contains("inlet or outlet"), "{e}");
        }
        assert_eq!(g, before);
        let cube = Obstacle::Cuboid {
            lo: [2.0, 2.0, 0.0],
            hi: [7.0, 3.0, 1.0],
        };
        assert_eq!(g.add_obstacle(&cube).unwrap(), 6 * 2 * 2);
        assert_eq!(g.bodies().len(), 1);
    }

    /// Where a shape's surface cuts each link into it: on the surface, inside the link, halfway
    /// unless asked, and halfway where the rule would take a population from a wall.
    #[test]
    fn cuts_lie_on_the_surface() {
        let sphere = ([6.3, 5.2, 4.9], 2.7);
        let mut g = Geometry::channel([13, 11, 10]).unwrap();
        g.add_obstacle(&Obstacle::Sphere {
            centre: sphere.0,
            radius: sphere.1,
        })
        .unwrap();
        let links = g.links(0);
        assert!(links.iter().all(|&(n, q)| g.cut(n, q) == 0.5));
        g.set_bounce_back(BounceBack::Interpolated);
        let (mut near, mut far) = (0, 0);
        for &(n, q) in &links {
            let d = g.cut(n, q);
            assert!(d > 0.0 && d <= 1.0, "{d}");
            let p = g.node(n);
            let r2: f64 = (0..3)
                .map(|a| (p[a] + d * C[q][a] as f64 - sphere.0[a]).powi(2))
                .sum();
            assert!((r2.sqrt() - sphere.1).abs() < 1e-12, "link {n} {q}: {d}");
            (near, far) = (near + usize::from(d < 0.5), far + usize::from(d > 0.5));
        }
        assert!(near > 10 && far > 10, "{near} {far}");
        // A link nearer than halfway whose upstream cell becomes a wall falls back to halfway.
        let (n, q) = *links.iter().find(|&&(n, q)| g.cut(n, q) < 0.5).unwrap();
        let up = g.neighbour(n, opposite(q));
        g.set(g.node(up).map(|v| v as usize), tag::WALL);
        assert_eq!(g.cut(n, q), 0.5);
        // A box spanning a (periodic) axis has no face across it.
        let mut slab = Geometry::periodic([4, 8, 3]).unwrap();
        slab.add_obstacle(&Obstacle::Cuboid {
            lo: [0.0, 2.6, 0.0],
            hi: [3.0, 4.2, 2.0],
        })
        .unwrap();
        slab.set_bounce_back(BounceBack::Interpolated);
        for (n, q) in slab.links(0) {
            let y = slab.node(n)[1];
            let want = if C[q][1] > 0 { 2.6 - y } else { y - 4.2 };
            assert!((slab.cut(n, q) - want).abs() < 1e-12, "{n} {q}");
        }
    }

    #[test]
    fn a_mask_marks_its_cells_and_must_fit_the_grid() {
        let mut g = Geometry::periodic([4, 3, 2]).unwrap();
        let mut mask = vec![false; 24];
        mask[g.index([1, 2, 1])] = true;
        mask[g.index([3, 0, 0])] = true;
        assert_eq!(g.add_mask(&mask).unwrap(), 2);
        assert_eq!(g.tags()[g.index([1, 2, 1])], tag::WALL);
        assert_eq!(g.fluid_cells(), 22);
        let e = g.add_mask(&mask[..23]).unwrap_err().to_string();
        assert!(e.contains("23 cells") && e.contains("(2, 3, 4)"), "{e}");
    }
}
