//! Point indices: the position (i, j, k) in an array of size (nx, ny, nz) that includes the margins, its
//! linear offset (x fastest), and neighbour offsets fixed at compile time (`idx.at::<1, 0, 0>()`).

/// A point of a 3-D array, x fastest: linear index `i + nx * (j + ny * k)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayIndex3D {
    n: [u32; 3],
    pos: [u32; 3],
    ix: usize,
}

impl ArrayIndex3D {
    /// An index into an array of size `n` (margins included), at the origin.
    #[inline(always)]
    pub fn new(n: [u32; 3]) -> Self {
        Self {
            n,
            pos: [0; 3],
            ix: 0,
        }
    }

    /// Moves to (i, j, k) (the paper's `set`).
    #[inline(always)]
    pub fn set(&mut self, i: u32, j: u32, k: u32) {
        self.pos = [i, j, k];
        self.ix = i as usize + self.n[0] as usize * (j as usize + self.n[1] as usize * k as usize);
    }

    /// Moves one point up in z, the step of a z-marching thread.
    #[inline(always)]
    pub fn next_k(&mut self) {
        self.pos[2] += 1;
        self.ix += self.n[0] as usize * self.n[1] as usize;
    }

    /// Linear index of this point.
    #[inline(always)]
    pub fn ix(&self) -> usize {
        self.ix
    }

    /// Linear index of the neighbour at offset (DX, DY, DZ); the offsets are constants, so this is one add.
    #[inline(always)]
    pub fn at<const DX: i32, const DY: i32, const DZ: i32>(&self) -> usize {
        let nx = self.n[0] as isize;
        let nxy = nx * self.n[1] as isize;
        self.ix
            .wrapping_add_signed(DX as isize + DY as isize * nx + DZ as isize * nxy)
    }

    /// Linear index of the neighbour at offset (dx, dy, dz) given at run time; the same as
    /// [`at`](Self::at) once the offsets are constants (the staged loops pass their radius here).
    #[inline(always)]
    pub fn offset(&self, dx: i32, dy: i32, dz: i32) -> usize {
        let nx = self.n[0] as isize;
        let nxy = nx * self.n[1] as isize;
        self.ix
            .wrapping_add_signed(dx as isize + dy as isize * nx + dz as isize * nxy)
    }

    /// x position.
    #[inline(always)]
    pub fn i(&self) -> u32 {
        self.pos[0]
    }

    /// y position.
    #[inline(always)]
    pub fn j(&self) -> u32 {
        self.pos[1]
    }

    /// z position.
    #[inline(always)]
    pub fn k(&self) -> u32 {
        self.pos[2]
    }

    /// Array size (margins included).
    #[inline(always)]
    pub fn size(&self) -> [u32; 3] {
        self.n
    }
}

/// A point of a 2-D array, x fastest: linear index `i + nx * j`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayIndex2D {
    n: [u32; 2],
    pos: [u32; 2],
    ix: usize,
}

impl ArrayIndex2D {
    /// An index into an array of size `n` (margins included), at the origin.
    #[inline(always)]
    pub fn new(n: [u32; 2]) -> Self {
        Self {
            n,
            pos: [0; 2],
            ix: 0,
        }
    }

    /// Moves to (i, j).
    #[inline(always)]
    pub fn set(&mut self, i: u32, j: u32) {
        self.pos = [i, j];
        self.ix = i as usize + self.n[0] as usize * j as usize;
    }

    /// Moves one point up in y, the step of a y-marching thread.
    #[inline(always)]
    pub fn next_j(&mut self) {
        self.pos[1] += 1;
        self.ix += self.n[0] as usize;
    }

    /// Linear index of this point.
    #[inline(always)]
    pub fn ix(&self) -> usize {
        self.ix
    }

    /// Linear index of the neighbour at offset (DX, DY).
    #[inline(always)]
    pub fn at<const DX: i32, const DY: i32>(&self) -> usize {
        self.ix
            .wrapping_add_signed(DX as isize + DY as isize * self.n[0] as isize)
    }

    /// x position.
    #[inline(always)]
    pub fn i(&self) -> u32 {
        self.pos[0]
    }

    /// y position.
    #[inline(always)]
    pub fn j(&self) -> u32 {
        self.pos[1]
    }

    /// Array size (margins included).
    #[inline(always)]
    pub fn size(&self) -> [u32; 2] {
        self.n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_index_and_neighbours_3d() {
        let mut idx = ArrayIndex3D::new([5, 4, 3]);
        idx.set(2, 1, 1);
        assert_eq!(idx.ix(), 2 + 5 * (1 + 4));
        assert_eq!(idx.at::<0, 0, 0>(), idx.ix());
        assert_eq!(idx.at::<1, 0, 0>(), idx.ix() + 1);
        assert_eq!(idx.at::<-1, 0, 0>(), idx.ix() - 1);
        assert_eq!(idx.at::<0, 1, 0>(), idx.ix() + 5);
        assert_eq!(idx.at::<0, -1, 0>(), idx.ix() - 5);
        assert_eq!(idx.at::<0, 0, 1>(), idx.ix() + 20);
        assert_eq!(idx.at::<0, 0, -1>(), idx.ix() - 20);
        assert_eq!(idx.at::<-2, 2, -1>(), idx.ix() - 2 + 10 - 20);
        assert_eq!(idx.offset(-2, 2, -1), idx.at::<-2, 2, -1>());
        assert_eq!(idx.offset(0, 0, 1), idx.at::<0, 0, 1>());
        idx.next_k();
        assert_eq!((idx.i(), idx.j(), idx.k()), (2, 1, 2));
        assert_eq!(idx.ix(), 2 + 5 * (1 + 4 * 2));
        assert_eq!(idx.size(), [5, 4, 3]);
    }

    #[test]
    fn large_arrays_do_not_wrap_u32() {
        let mut idx = ArrayIndex3D::new([2048, 2048, 2048]);
        idx.set(2047, 2047, 2047);
        assert_eq!(idx.ix(), 2048usize.pow(3) - 1);
        assert_eq!(idx.at::<0, 0, -1>(), 2048usize.pow(3) - 1 - 2048 * 2048);
    }

    #[test]
    fn linear_index_and_neighbours_2d() {
        let mut idx = ArrayIndex2D::new([7, 6]);
        idx.set(3, 2);
        assert_eq!(idx.ix(), 17);
        assert_eq!(idx.at::<1, 0>(), 18);
        assert_eq!(idx.at::<0, -2>(), 3);
        idx.next_j();
        assert_eq!((idx.i(), idx.j(), idx.ix()), (3, 3, 24));
        assert_eq!(idx.size(), [7, 6]);
    }
}
