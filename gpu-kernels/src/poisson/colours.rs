//! The finest multigrid levels stored by colour: every field of cells `(i + j + k) % 2 == c` (array
//! coordinates, margins included) packed into half `c` of a two-half array, so that a red-black half
//! sweep reads and writes only its colour's values instead of every sector of every array (a sweep
//! then moves 11 values per cell instead of 20).
//!
//! A natural array of size `n = [nx, ny, nz]` (`nx` even) becomes an array of `[w, ny, 2 nz]`, whose rows
//! of `w` slots hold the `nx / 2 - 1` interior cells of a row of one colour, whatever the row's parity:
//! the interior cell `(i, j, k)` of colour `c` sits in slot `s = (i - 1) / 2` (rounded down) of row
//! `j + ny k` of half `c`, which starts at `w ny nz`. Its x neighbours `i - 1` and `i + 1` have the
//! other colour, at slots `s - 1 + e` and `s + e` (`e = (i + 1) % 2`); its y and z neighbours sit in
//! slot `s` of the other half. The x margins have no slots: the iterate is zero there (walls live in
//! the coefficients, zero towards a margin), and the updates take that zero instead of loading it, as
//! the natural layout loads it. So the rows, padded to a multiple of [`HALF_ROW_MULTIPLE`] slots, are
//! whole 16-byte vectors of interior cells (128-byte lines too, at 256 cells a row), and the vector
//! sweep has no ragged vector at either end. (With the margins stored, at `i / 2`, the 128 interior
//! cells of a 256-cell row took 33 vectors, one of them a single cell, and the 33rd thread of each
//! row a block of its own: the sweep ran 7% (f32) and 5% (f64) slower per cell than on rows of whole
//! vectors.) Padding slots hold zeros: written only with the values they hold.
//!
//! The updates do exactly the arithmetic of their natural-layout twins ([`RedBlack`](super::RedBlack),
//! [`Residual`](super::Residual), [`ProlongAdd`](super::ProlongAdd), [`Convert`](super::Convert)), in
//! the same order: the results are the same to the bit.

use super::{combine, parent_cell, CellIndex, Coeffs};
use crate::device::math::Real;
use crate::stencil::{
    ArrayIndex3D, FieldMut, FieldRef, LanesUpdate3D, LoopRange, PointUpdate3D, SumUpdate3D,
    VECTOR_BYTES,
};

/// The rows of a half are padded to a multiple of this many cells: a 16-byte vector of f32 (and two of
/// f64), so that the vector sweep's loads are aligned on every row.
pub const HALF_ROW_MULTIPLE: u32 = 4;

/// Where a field's two colour halves are: the natural array size they stand for and their row length.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Halves {
    /// The natural array size (margins included; `n[0]` even).
    pub n: [u32; 3],
    /// Slots per row of a half: the `n[0] / 2 - 1` interior cells, padded to a multiple of
    /// [`HALF_ROW_MULTIPLE`].
    pub pitch: u32,
}

impl Halves {
    /// The halves of a natural array of size `n` (margins included; `n[0]` even).
    pub fn new(n: [u32; 3]) -> Self {
        Self {
            n,
            pitch: (n[0] / 2 - 1).next_multiple_of(HALF_ROW_MULTIPLE),
        }
    }

    /// The two-half array's size: `[pitch, ny, 2 nz]`.
    pub fn size(&self) -> [u32; 3] {
        [self.pitch, self.n[1], 2 * self.n[2]]
    }

    /// Values in one half, padding included.
    #[inline(always)]
    pub fn half(&self) -> usize {
        self.pitch as usize * self.n[1] as usize * self.n[2] as usize
    }

    /// What [`RedBlackByColour`] runs over: the `nx / 2 - 1` interior cells of every interior row and
    /// plane of a half.
    pub fn sweep_range(&self) -> LoopRange {
        let [nx, ny, nz] = self.n;
        LoopRange {
            n: [self.pitch, ny, nz],
            begin: [0, 1, 1],
            end: [nx / 2 - 1, ny - 1, nz - 1],
        }
    }

    /// The colour of natural cell `(i, j, k)` (`i` not on an x margin) and its index in the two-half
    /// array.
    #[inline(always)]
    pub fn place(&self, i: u32, j: u32, k: u32) -> (u32, usize) {
        let c = (i + j + k) % 2;
        let at = ((i - 1) / 2) as usize
            + self.pitch as usize * (j as usize + self.n[1] as usize * k as usize);
        (c, c as usize * self.half() + at)
    }

    /// Whether the x neighbours `i - 1` and `i + 1` of natural cell `i` are margins (no slots; the
    /// iterate is zero there).
    #[inline(always)]
    fn walls(&self, i: u32) -> [bool; 2] {
        [i == 1, i + 2 == self.n[0]]
    }
}

/// `(A x)` at the cell of natural x index `i`, at two-half index `own` of the halves `h`, whose
/// neighbours, of the other colour, are around two-half index `other` (the same slot in the other
/// half), with the coefficients `a` stored by colour.
#[inline(always)]
fn apply<T: Real>(
    a: &Coeffs<T>,
    x: FieldRef<T>,
    h: &Halves,
    i: u32,
    [own, other]: [usize; 2],
) -> T {
    let c = a.fields().map(|f| f.get(own));
    let (row, e) = (h.pitch as usize, ((i + 1) % 2) as usize);
    let plane = row * h.n[1] as usize;
    let [west, east] = h.walls(i);
    let side = |wall: bool, at: usize| if wall { T::ZERO } else { x.get(at) };
    let xs = [
        x.get(own),
        side(west, other + e - 1),
        side(east, other + e),
        x.get(other - row),
        x.get(other + row),
        x.get(other - plane),
        x.get(other + plane),
    ];
    combine(c, xs)
}

/// One half sweep of red-black Gauss-Seidel on colour-split fields: runs over one half
/// ([`Halves::sweep_range`]), each point the cell of colour `parity` there, margins skipped.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RedBlackByColour<T> {
    /// The operator, each coefficient array stored by colour.
    pub a: Coeffs<T>,
    /// The iterate, updated in place.
    pub x: FieldMut<T>,
    /// The right-hand side.
    pub b: FieldRef<T>,
    /// The natural array this stands for.
    pub halves: Halves,
    /// The colour updated: 0 or 1.
    pub parity: u32,
    /// Over-relaxation (1: Gauss-Seidel).
    pub omega: T,
}

impl<T: Real> PointUpdate3D for RedBlackByColour<T> {
    type Real = T;
    const RADIUS: [u32; 3] = [0, 1, 1];

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        let i = 2 * idx.i() + 2 - (idx.j() + idx.k() + self.parity) % 2;
        let half = self.halves.half();
        let (own, other) = (
            self.parity as usize * half + idx.ix(),
            (1 - self.parity) as usize * half + idx.ix(),
        );
        let x = self.x.as_ref();
        let r = self.b.get(own) - apply(&self.a, x, &self.halves, i, [own, other]);
        self.x
            .set(own, x.get(own) + self.omega * r / self.a.diag.get(own));
    }
}

/// The vector sweep: the `W` cells `own .. own + W` of a half row share the row's `e`, so their x
/// neighbours are the other half's cells `other - 1 + e .. other + W + e`: one vector load of
/// `other .. other + W` and one scalar load of the cell before it (`e = 0`) or after it (`e = 1`),
/// zero where that is the row's margin. Every other array is one vector load at `own` (or `other` one
/// row or plane away). Lanes past the range (padding) keep their values, so a cell's neighbour there
/// is zero, as the margin is.
impl<T: Real> LanesUpdate3D for RedBlackByColour<T> {
    /// Rows and halves of whole vectors, and every array aligned at the cell: then so is every load
    /// of the column.
    #[inline(always)]
    fn lanes_aligned<const W: usize>(&self, idx: &ArrayIndex3D) -> bool {
        let whole = |cells: usize| (cells * core::mem::size_of::<T>()).is_multiple_of(VECTOR_BYTES);
        let half = self.halves.half();
        let own = self.parity as usize * half + idx.ix();
        whole(self.halves.pitch as usize)
            && whole(half)
            && (self.a.fields().iter())
                .chain([&self.b, &self.x.as_ref()])
                .all(|f| f.vector_aligned(own))
    }

    #[inline(always)]
    fn update_lanes<const W: usize>(&self, idx: &ArrayIndex3D, r: &LoopRange) {
        let e = (idx.j() + idx.k() + self.parity + 1) % 2;
        let half = self.halves.half();
        let (own, other) = (
            self.parity as usize * half + idx.ix(),
            (1 - self.parity) as usize * half + idx.ix(),
        );
        let a = &self.a;
        let row = self.halves.pitch as usize;
        let plane = row * self.halves.n[1] as usize;
        let x = self.x.as_ref();
        // SAFETY (every vector load and the store): aligned (`lanes_aligned`, the loop's check); the
        // lanes stay in the (padded) half row of a cell inside the range.
        let (c, xo, b, xc, y0, y1, z0, z1) = unsafe {
            (
                a.fields().map(|f| f.get_vector::<W>(own)),
                x.get_vector::<W>(own),
                self.b.get_vector::<W>(own),
                x.get_vector::<W>(other),
                x.get_vector::<W>(other - row),
                x.get_vector::<W>(other + row),
                x.get_vector::<W>(other - plane),
                x.get_vector::<W>(other + plane),
            )
        };
        // The range is a half row's interior, so the cell before it and the one after are margins.
        let edge = match e {
            0 if idx.i() == r.begin[0] => T::ZERO,
            0 => x.get(other - 1),
            _ if idx.i() + W as u32 >= r.end[0] => T::ZERO,
            _ => x.get(other + W),
        };
        let new: [T; W] = core::array::from_fn(|l| {
            if idx.i() + l as u32 >= r.end[0] {
                return xo[l];
            }
            let (west, east) = match e {
                0 => (if l == 0 { edge } else { xc[l - 1] }, xc[l]),
                _ => (xc[l], if l + 1 == W { edge } else { xc[l + 1] }),
            };
            let ax = combine(
                c.map(|v| v[l]),
                [xo[l], west, east, y0[l], y1[l], z0[l], z1[l]],
            );
            xo[l] + self.omega * (b[l] - ax) / c[0][l]
        });
        // SAFETY: as above.
        unsafe { self.x.set_vector(own, new) };
    }
}

/// `r = b - A x` into a natural-layout `r`, from colour-split `x` and `b`: runs over the natural range.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ResidualByColour<T> {
    /// The operator, each coefficient array stored by colour.
    pub a: Coeffs<T>,
    /// The iterate.
    pub x: FieldRef<T>,
    /// The right-hand side.
    pub b: FieldRef<T>,
    /// The residual (natural layout).
    pub r: FieldMut<T>,
    /// The natural array the halves stand for.
    pub halves: Halves,
}

impl<T: Real> PointUpdate3D for ResidualByColour<T> {
    type Real = T;
    const RADIUS: [u32; 3] = [0, 0, 0];

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        let (c, own) = self.halves.place(idx.i(), idx.j(), idx.k());
        let half = self.halves.half();
        let other = if c == 0 { own + half } else { own - half };
        let ax = apply(&self.a, self.x, &self.halves, idx.i(), [own, other]);
        self.r.set(idx.ix(), self.b.get(own) - ax);
    }
}

/// Adds the coarse correction to a colour-split fine iterate (as [`ProlongAdd`](super::ProlongAdd)):
/// runs over the fine natural range; `coarse` places the coarse cells (a natural array's size, or
/// the coarse level's halves).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProlongAddByColour<T, C = [u32; 3]> {
    /// The coarse correction.
    pub e: FieldRef<T>,
    /// The fine iterate, by colour.
    pub x: FieldMut<T>,
    /// The fine natural array the halves stand for.
    pub halves: Halves,
    /// Where the coarse cells sit.
    pub coarse: C,
}

impl<T: Real, C: CellIndex> PointUpdate3D for ProlongAddByColour<T, C> {
    type Real = T;
    const RADIUS: [u32; 3] = [0, 0, 0];

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        let (_, at) = self.halves.place(idx.i(), idx.j(), idx.k());
        let e = self.e.get(self.coarse.index_of(parent_cell(idx)));
        self.x.set(at, self.x.as_ref().get(at) + e);
    }
}

/// A natural-layout field converted into colour halves (CG's residual into the finest right-hand
/// side; the way back is [`FromColoursDot`]): runs over the natural range, converting each value
/// `A -> B` as [`Convert`](super::Convert) does.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ConvertByColour<A, B> {
    /// The natural-layout source.
    pub from: FieldRef<A>,
    /// The halves.
    pub to: FieldMut<B>,
    /// The natural array the halves stand for.
    pub halves: Halves,
}

impl<A: Real, B: Real> PointUpdate3D for ConvertByColour<A, B> {
    type Real = B;
    const RADIUS: [u32; 3] = [0, 0, 0];

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        let (_, at) = self.halves.place(idx.i(), idx.j(), idx.k());
        self.to
            .set(at, B::from_f64(self.from.get(idx.ix()).to_f64()));
    }
}

/// The finest iterate out of its colour halves into CG's f64 `to`, summing `to.with` (CG's `r.z`) in
/// the same loop: runs over the natural range, the way back of [`ConvertByColour`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FromColoursDot<A> {
    /// The halves.
    pub from: FieldRef<A>,
    /// The natural-layout destination.
    pub to: FieldMut<f64>,
    /// The other factor of each term (natural layout).
    pub with: FieldRef<f64>,
    /// The natural array the halves stand for.
    pub halves: Halves,
}

impl<A: Real> PointUpdate3D for FromColoursDot<A> {
    type Real = f64;
    const RADIUS: [u32; 3] = [0, 0, 0];

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        self.update_term(idx);
    }
}

impl<A: Real> SumUpdate3D for FromColoursDot<A> {
    /// The value (in f64) and its factor.
    type Loads = (f64, f64);

    #[inline(always)]
    fn load(&self, idx: &ArrayIndex3D) -> (f64, f64) {
        let (_, at) = self.halves.place(idx.i(), idx.j(), idx.k());
        (self.from.get(at).to_f64(), self.with.get(idx.ix()))
    }

    #[inline(always)]
    fn store_term(&self, idx: &ArrayIndex3D, (v, with): (f64, f64)) -> f64 {
        self.to.set(idx.ix(), v);
        v * with
    }
}

crate::kernel3d!(for<T> RedBlackByColour<T> {
    f32 => poisson_redblack_colours_f32 { lanes = poisson_redblack_colours_vector_f32 },
    f64 => poisson_redblack_colours_f64 { lanes = poisson_redblack_colours_vector_f64 },
});
crate::kernel3d!(for<T> ResidualByColour<T> {
    f32 => poisson_residual_colours_f32,
    f64 => poisson_residual_colours_f64,
});
crate::kernel3d!(for<T> ProlongAddByColour<T> {
    f32 => poisson_prolong_colours_f32,
    f64 => poisson_prolong_colours_f64,
});
crate::kernel3d!(for<T> ProlongAddByColour<T, Halves> {
    f32 => poisson_prolong_colours_colours_f32,
    f64 => poisson_prolong_colours_colours_f64,
});
crate::kernel3d!(for<T> ConvertByColour<f64, T> {
    f32 => poisson_convert_colours_f64_f32,
    f64 => poisson_convert_colours_f64_f64,
});
crate::kernel3d_sum!(for<T> FromColoursDot<T> {
    f32 => poisson_from_colours_dot_f32,
    f64 => poisson_from_colours_dot_f64,
});

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;
    use crate::stencil::{lanes_thread, vector_lanes, ThreadCoords};

    /// Values that differ at every index and are away from zero (the diagonal divides).
    fn value(seed: u32, i: usize) -> f64 {
        let h = (i as u32 ^ seed).wrapping_mul(2654435761) >> 8;
        1.0 + (h % 1000) as f64 / 1000.0
    }

    /// `count` arrays of `len` values of `T` in one 16-byte aligned block, each starting `shift`
    /// elements past a 16-byte boundary.
    struct Arrays<T> {
        _block: Vec<u128>,
        base: *mut T,
        stride: usize,
    }

    impl<T: Real> Arrays<T> {
        fn new(count: usize, len: usize, shift: usize) -> Self {
            let stride = (len + shift).next_multiple_of(16);
            let mut block = std::vec![0u128; count * stride * core::mem::size_of::<T>() / 16 + 1];
            let base = block.as_mut_ptr() as *mut T;
            for a in 0..count {
                for i in 0..len {
                    // SAFETY: inside the block.
                    unsafe { *base.add(a * stride + shift + i) = T::from_f64(value(a as u32, i)) };
                }
            }
            Self {
                _block: block,
                base: base.wrapping_add(shift),
                stride,
            }
        }

        fn array(&self, a: usize) -> *mut T {
            self.base.wrapping_add(a * self.stride)
        }
    }

    /// Both half sweeps of the natural `nx x 5 x 6` array, by the scalar update and by the vector
    /// loop; 16-byte aligned arrays (the vector path) and arrays one element off (the fallback).
    /// Returns the iterate of each, and the iterate it started from (zero in the padding, as the
    /// layout keeps it).
    fn sweeps<T: Real>(nx: u32, shift: usize) -> [Vec<T>; 3] {
        let halves = Halves::new([nx, 5, 6]);
        let (cells, pitch) = (nx as usize / 2 - 1, halves.pitch as usize);
        let len = 2 * halves.half();
        let arrays = Arrays::<T>::new(9, len, shift);
        let x0: Vec<T> = (0..len)
            .map(|i| match i % pitch {
                c if c >= cells => T::ZERO,
                // SAFETY: inside the array.
                _ => unsafe { *arrays.array(8).add(i) },
            })
            .collect();
        // SAFETY: every array holds `len` values and outlives the sweeps.
        let field = |a: usize| unsafe { FieldRef::from_raw(arrays.array(a) as *const T) };
        let coeffs = Coeffs {
            diag: field(0),
            xm: field(1),
            xp: field(2),
            ym: field(3),
            yp: field(4),
            zm: field(5),
            zp: field(6),
        };
        let r = halves.sweep_range();
        let run = |vector: bool| -> Vec<T> {
            let x = arrays.array(8);
            for (i, &v) in x0.iter().enumerate() {
                // SAFETY: inside the array.
                unsafe { *x.add(i) = v };
            }
            for parity in [0, 1] {
                let rb = RedBlackByColour {
                    a: coeffs,
                    // SAFETY: as above.
                    x: unsafe { FieldMut::from_raw(x) },
                    b: field(7),
                    halves,
                    parity,
                    omega: T::from_f64(1.1),
                };
                let [ex, ey, ez] = r.extent();
                if vector {
                    let w = vector_lanes(core::mem::size_of::<T>()) as u32;
                    let march = 3;
                    for bz in 0..ez.div_ceil(march) {
                        for by in 0..ey {
                            for bx in 0..ex.div_ceil(w) {
                                let c = ThreadCoords {
                                    block_idx: [bx, by, bz],
                                    block_dim: [1, 1],
                                    thread_idx: [0, 0],
                                };
                                lanes_thread(&rb, &r, march, c);
                            }
                        }
                    }
                } else {
                    let mut idx = ArrayIndex3D::new(r.n);
                    for k in r.begin[2]..r.end[2] {
                        for j in r.begin[1]..r.end[1] {
                            for i in r.begin[0]..r.end[0] {
                                idx.set(i, j, k);
                                rb.update(&idx);
                            }
                        }
                    }
                }
            }
            (0..len).map(|i| unsafe { *x.add(i) }).collect()
        };
        [run(false), run(true), x0]
    }

    /// Half rows of 6 interior cells (natural rows of 14: 8 slots, so f32's second vector runs past
    /// the range into padding) and of 4 (rows of 10: no padding, so the cell after a row's last vector
    /// is the next row's first, not the margin).
    fn vector_sweep_gives_the_scalar_bits<T: Real>() {
        for (nx, shift) in [(14, 0), (14, 1), (10, 0), (10, 1)] {
            let [scalar, vector, start] = sweeps::<T>(nx, shift);
            let changed = scalar.iter().zip(&start).filter(|(a, b)| a != b).count();
            // Every interior cell of the natural array, and nothing else.
            assert_eq!(
                changed,
                (nx as usize - 2) * 3 * 4,
                "{} shift {shift}",
                T::NAME
            );
            assert!(
                scalar
                    .iter()
                    .zip(&vector)
                    .all(|(a, b)| a.to_f64().to_bits() == b.to_f64().to_bits()),
                "{} shift {shift}: the vector sweep differs",
                T::NAME
            );
        }
    }

    #[test]
    fn vector_sweep_gives_the_scalar_bits_f32() {
        vector_sweep_gives_the_scalar_bits::<f32>();
    }

    #[test]
    fn vector_sweep_gives_the_scalar_bits_f64() {
        vector_sweep_gives_the_scalar_bits::<f64>();
    }
}
