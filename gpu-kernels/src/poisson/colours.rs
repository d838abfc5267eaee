//! The finest multigrid level stored by colour: every field of cells `(i + j + k) % 2 == c` (array
//! coordinates, margins included) packed into half `c` of a two-half array, so that a red-black half
//! sweep reads and writes only its colour's values instead of every sector of every array (a sweep
//! then moves 11 values per cell instead of 20).
//!
//! A natural array of size `n = [nx, ny, nz]` (`nx` even) becomes an array of `[nx / 2, ny, 2 nz]`: the
//! cell `(i, j, k)` of colour `c` sits at `i / 2 + nx / 2 (j + ny k)` in half `c`, which starts at
//! `nx / 2 ny nz`. Its x neighbours `i - 1` and `i + 1` have the other colour, at `i / 2 - 1 + p` and
//! `i / 2 + p` (`p = i % 2`); its y and z neighbours sit at the same `i / 2` in the other half.
//!
//! The updates do exactly the arithmetic of their natural-layout twins ([`RedBlack`](super::RedBlack),
//! [`Residual`](super::Residual), [`ProlongAdd`](super::ProlongAdd), [`Convert`](super::Convert)), in
//! the same order: the results are the same to the bit.

use super::{parent, Coeffs};
use crate::device::math::Real;
use crate::stencil::{ArrayIndex3D, FieldMut, FieldRef, LoopRange, PointUpdate3D};

/// Where a field's two colour halves are: the natural array size they stand for.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Halves {
    /// The natural array size (margins included; `n[0]` even).
    pub n: [u32; 3],
}

impl Halves {
    /// Values in one half.
    #[inline(always)]
    pub fn half(&self) -> usize {
        (self.n[0] / 2) as usize * self.n[1] as usize * self.n[2] as usize
    }

    /// What [`RedBlackByColour`] runs over: a whole half, interior rows and planes. (Running over only
    /// the `nx / 2 - 1` interior cells of each row, shifted by the row's parity, so that no warp of a
    /// row is mostly idle, measured 10% slower in f32 on an H100.)
    pub fn sweep_range(&self) -> LoopRange {
        let [nx, ny, nz] = self.n;
        LoopRange {
            n: [nx / 2, ny, nz],
            begin: [0, 1, 1],
            end: [nx / 2, ny - 1, nz - 1],
        }
    }

    /// The colour of natural cell `(i, j, k)` and its index in the two-half array.
    #[inline(always)]
    pub fn place(&self, i: u32, j: u32, k: u32) -> (u32, usize) {
        let c = (i + j + k) % 2;
        let at = (i / 2) as usize
            + (self.n[0] / 2) as usize * (j as usize + self.n[1] as usize * k as usize);
        (c, c as usize * self.half() + at)
    }
}

/// `(A x)` at the cell at two-half index `own` (parity `p` of its `i`) whose neighbours, of the other
/// colour, are around two-half index `other` (the same place in the other half), with the
/// coefficients `a` stored by colour; `row` and `plane` are one step in y and z within a half. The
/// terms in [`Coeffs`]' order.
#[inline(always)]
fn apply<T: Real>(
    a: &Coeffs<T>,
    x: FieldRef<T>,
    own: usize,
    other: usize,
    p: usize,
    row: usize,
    plane: usize,
) -> T {
    a.diag.get(own) * x.get(own)
        + a.xm.get(own) * x.get(other + p - 1)
        + a.xp.get(own) * x.get(other + p)
        + a.ym.get(own) * x.get(other - row)
        + a.yp.get(own) * x.get(other + row)
        + a.zm.get(own) * x.get(other - plane)
        + a.zp.get(own) * x.get(other + plane)
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
        let (j, k) = (idx.j(), idx.k());
        let p = (j + k + self.parity) % 2;
        let i = 2 * idx.i() + p;
        if i == 0 || i + 1 == self.halves.n[0] {
            return;
        }
        let half = self.halves.half();
        let (own, other) = (
            self.parity as usize * half + idx.ix(),
            (1 - self.parity) as usize * half + idx.ix(),
        );
        let row = (self.halves.n[0] / 2) as usize;
        let plane = row * self.halves.n[1] as usize;
        let x = self.x.as_ref();
        let r = self.b.get(own) - apply(&self.a, x, own, other, p as usize, row, plane);
        self.x
            .set(own, x.get(own) + self.omega * r / self.a.diag.get(own));
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
        let row = (self.halves.n[0] / 2) as usize;
        let plane = row * self.halves.n[1] as usize;
        let p = (idx.i() % 2) as usize;
        let ax = apply(&self.a, self.x, own, other, p, row, plane);
        self.r.set(idx.ix(), self.b.get(own) - ax);
    }
}

/// Adds the coarse correction to a colour-split fine iterate (as [`ProlongAdd`](super::ProlongAdd)):
/// runs over the fine natural range; the coarse array (natural layout) is `coarse` points wide.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProlongAddByColour<T> {
    /// The coarse correction.
    pub e: FieldRef<T>,
    /// The fine iterate, by colour.
    pub x: FieldMut<T>,
    /// The fine natural array the halves stand for.
    pub halves: Halves,
    /// The coarse array's size.
    pub coarse: [u32; 3],
}

impl<T: Real> PointUpdate3D for ProlongAddByColour<T> {
    type Real = T;
    const RADIUS: [u32; 3] = [0, 0, 0];

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        let (_, at) = self.halves.place(idx.i(), idx.j(), idx.k());
        self.x.set(
            at,
            self.x.as_ref().get(at) + self.e.get(parent(idx, self.coarse)),
        );
    }
}

/// A natural-layout field converted into colour halves (`to_halves`) or back: runs over the natural
/// range, converting each value `A -> B` as [`Convert`](super::Convert) does.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ConvertByColour<A, B> {
    /// The source.
    pub from: FieldRef<A>,
    /// The destination.
    pub to: FieldMut<B>,
    /// The natural array the halves stand for.
    pub halves: Halves,
    /// 1: natural to halves; 0: halves to natural.
    pub to_halves: u32,
}

impl<A: Real, B: Real> PointUpdate3D for ConvertByColour<A, B> {
    type Real = B;
    const RADIUS: [u32; 3] = [0, 0, 0];

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        let (_, at) = self.halves.place(idx.i(), idx.j(), idx.k());
        let (src, dst) = if self.to_halves != 0 {
            (idx.ix(), at)
        } else {
            (at, idx.ix())
        };
        self.to.set(dst, B::from_f64(self.from.get(src).to_f64()));
    }
}

crate::kernel3d!(poisson_redblack_colours_f32 => RedBlackByColour<f32>);
crate::kernel3d!(poisson_redblack_colours_f64 => RedBlackByColour<f64>);
crate::kernel3d!(poisson_residual_colours_f32 => ResidualByColour<f32>);
crate::kernel3d!(poisson_residual_colours_f64 => ResidualByColour<f64>);
crate::kernel3d!(poisson_prolong_colours_f32 => ProlongAddByColour<f32>);
crate::kernel3d!(poisson_prolong_colours_f64 => ProlongAddByColour<f64>);
crate::kernel3d!(poisson_convert_colours_f64_f32 => ConvertByColour<f64, f32>);
crate::kernel3d!(poisson_convert_colours_f32_f64 => ConvertByColour<f32, f64>);
crate::kernel3d!(poisson_convert_colours_f64_f64 => ConvertByColour<f64, f64>);
