//! The grid and its cell tags: which cells are fluid, resting walls or moving walls. Axes without
//! wall cells at their ends are periodic.

use lattice_gpu_kernels::lbm::{tag, C};
use rayon::prelude::*;

use crate::{Error, Result};

/// The longest side: a GPU grid has at most 65535 blocks along y and z.
pub const MAX_SIDE: usize = 65535;

/// A grid of tagged cells.
#[derive(Clone, Debug, PartialEq)]
pub struct Geometry {
    dims: [usize; 3],
    tags: Vec<u8>,
}

impl Geometry {
    /// All fluid, periodic in every direction. Fails on an empty grid, a side above [`MAX_SIDE`], or more
    /// cells than the kernels' 32-bit cell index holds.
    pub fn periodic(dims: [usize; 3]) -> Result<Self> {
        let cells = Self::check_dims(dims, "use a smaller grid")?;
        Ok(Self {
            dims,
            tags: vec![tag::FLUID; cells],
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
        !tag::is_wall(self.tags[n])
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

    /// Marks every fluid cell with a wall among its 18 neighbours with [`tag::NEAR_WALL`] (and clears
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
                        let near = C.iter().any(|c| {
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
}
