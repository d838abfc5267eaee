//! The point updates of a geometric multigrid for the variable-coefficient Poisson equation
//! `-div(c grad p) = f` (the kinaco ocean model's pressure solve): the 7-point operator with its 7
//! coefficients per cell in structure-of-arrays fields (or, to measure the difference, one
//! array-of-structures field), the residual, weighted Jacobi and red-black
//! Gauss-Seidel smoothing, restriction (average of the 8 children) and prolongation (the parent's value
//! added to each child), between cell-centred grids with a margin of 1 and sizes halving level by level.

pub mod colours;

pub use crate::vector::{Convert, Fill};

use crate::device::math::Real;
use crate::device::warp;
use crate::stencil::{
    ArrayIndex3D, BlockProgram, EntryOf, FieldMut, FieldRef, LoopRange, Passes, PointUpdate3D,
    SumUpdate3D,
};

/// A 7-point operator as the point updates read it: `(A x)` at a point and its diagonal.
pub trait Operator7<T: Real>: Copy + Send + Sync {
    /// The 7 coefficients at `idx`, in [`Coeffs`]' order (diagonal, x-, x+, y-, y+, z-, z+).
    fn coefficients(&self, idx: &ArrayIndex3D) -> [T; 7];
    /// The diagonal at array index `i`.
    fn diag(&self, i: usize) -> T;
    /// `(A x)` at `idx`.
    #[inline(always)]
    fn apply(&self, x: FieldRef<T>, idx: &ArrayIndex3D) -> T {
        combine(self.coefficients(idx), neighbours(x, idx))
    }
}

/// The 7 coefficients of every cell in one array, cell after cell (array of structures: `7 i + k` for
/// diagonal, x-, x+, y-, y+, z-, z+): the layout the ocean-model report measured against
/// [`Coeffs`], whose per-coefficient arrays a warp reads coalesced.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CoeffsAos<T> {
    /// `7 * len` values.
    pub c: FieldRef<T>,
}

/// `sum c_t x_t`, the terms in [`Coeffs`]' order (diagonal, x-, x+, y-, y+, z-, z+), added left to
/// right: the one arithmetic of every operator application, whatever the layout (natural or by colour,
/// structure or array of structures, scalar or vector), so that all give the same bits.
#[inline(always)]
pub(crate) fn combine<T: Real>(c: [T; 7], x: [T; 7]) -> T {
    c[0] * x[0] + c[1] * x[1] + c[2] * x[2] + c[3] * x[3] + c[4] * x[4] + c[5] * x[5] + c[6] * x[6]
}

/// `x` at the cell `idx` and its 6 neighbours, in [`Coeffs`]' order (natural layout).
#[inline(always)]
fn neighbours<T: Copy>(x: FieldRef<T>, idx: &ArrayIndex3D) -> [T; 7] {
    [
        idx.ix(),
        idx.at::<-1, 0, 0>(),
        idx.at::<1, 0, 0>(),
        idx.at::<0, -1, 0>(),
        idx.at::<0, 1, 0>(),
        idx.at::<0, 0, -1>(),
        idx.at::<0, 0, 1>(),
    ]
    .map(|i| x.get(i))
}

impl<T: Real> Operator7<T> for CoeffsAos<T> {
    #[inline(always)]
    fn coefficients(&self, idx: &ArrayIndex3D) -> [T; 7] {
        let i = idx.ix();
        core::array::from_fn(|k| self.c.get(7 * i + k))
    }

    #[inline(always)]
    fn diag(&self, i: usize) -> T {
        self.c.get(7 * i)
    }
}

/// The 7 coefficients of every cell, one array each (structure of arrays):
/// `(A x)_i = diag_i x_i + sum_nb off_nb,i x_nb`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Coeffs<T> {
    /// Diagonal.
    pub diag: FieldRef<T>,
    /// The x-1 neighbour's coefficient (0 at a wall).
    pub xm: FieldRef<T>,
    /// The x+1 neighbour's coefficient.
    pub xp: FieldRef<T>,
    /// The y-1 neighbour's coefficient.
    pub ym: FieldRef<T>,
    /// The y+1 neighbour's coefficient.
    pub yp: FieldRef<T>,
    /// The z-1 neighbour's coefficient.
    pub zm: FieldRef<T>,
    /// The z+1 neighbour's coefficient.
    pub zp: FieldRef<T>,
}

impl<T: Real> Operator7<T> for Coeffs<T> {
    #[inline(always)]
    fn diag(&self, i: usize) -> T {
        self.diag.get(i)
    }

    /// The operator is symmetric (its face coefficients are shared by the two cells of a face, to the
    /// bit), so a cell's coefficient towards its `-1` neighbour on an axis is that neighbour's towards
    /// `+1` (zero in the margin, as at a wall): read there, from the cache its neighbouring threads
    /// filled, it takes 3 of the 7 arrays off the traffic of every application.
    #[inline(always)]
    fn coefficients(&self, idx: &ArrayIndex3D) -> [T; 7] {
        let i = idx.ix();
        [
            self.diag.get(i),
            self.xp.get(idx.at::<-1, 0, 0>()),
            self.xp.get(i),
            self.yp.get(idx.at::<0, -1, 0>()),
            self.yp.get(i),
            self.zp.get(idx.at::<0, 0, -1>()),
            self.zp.get(i),
        ]
    }
}

impl<T: Copy> Coeffs<T> {
    /// The 7 arrays in the terms' order: diagonal, x-, x+, y-, y+, z-, z+.
    #[inline(always)]
    pub fn fields(&self) -> [FieldRef<T>; 7] {
        [
            self.diag, self.xm, self.xp, self.ym, self.yp, self.zm, self.zp,
        ]
    }
}

/// `y = A x`, summing `x.y` (conjugate gradients' `p.Ap`) in the same loop.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Apply<T, A = Coeffs<T>> {
    /// The operator.
    pub a: A,
    /// Input.
    pub x: FieldRef<T>,
    /// Output.
    pub y: FieldMut<T>,
}

impl<T: Real, A: Operator7<T>> PointUpdate3D for Apply<T, A> {
    type Real = T;

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        self.update_term(idx);
    }
}

impl<T: Real, A: Operator7<T>> SumUpdate3D for Apply<T, A> {
    /// The coefficients and `x` at the cell and its neighbours.
    type Loads = ([T; 7], [T; 7]);

    #[inline(always)]
    fn load(&self, idx: &ArrayIndex3D) -> Self::Loads {
        (self.a.coefficients(idx), neighbours(self.x, idx))
    }

    #[inline(always)]
    fn store_term(&self, idx: &ArrayIndex3D, (c, x): Self::Loads) -> f64 {
        let y = combine(c, x);
        self.y.set(idx.ix(), y);
        (x[0] * y).to_f64()
    }
}

/// `r = b - A x`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Residual<T, A = Coeffs<T>> {
    /// The operator.
    pub a: A,
    /// The iterate.
    pub x: FieldRef<T>,
    /// The right-hand side.
    pub b: FieldRef<T>,
    /// The residual.
    pub r: FieldMut<T>,
}

impl<T: Real, A: Operator7<T>> PointUpdate3D for Residual<T, A> {
    type Real = T;

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        let i = idx.ix();
        self.r.set(i, self.b.get(i) - self.a.apply(self.x, idx));
    }
}

/// One weighted Jacobi sweep: `out = x + omega (b - A x) / diag`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Jacobi<T, A = Coeffs<T>> {
    /// The operator.
    pub a: A,
    /// The iterate before the sweep.
    pub x: FieldRef<T>,
    /// The right-hand side.
    pub b: FieldRef<T>,
    /// The iterate after the sweep.
    pub out: FieldMut<T>,
    /// The weight (2/3 smooths best in 3-D).
    pub omega: T,
}

impl<T: Real, A: Operator7<T>> PointUpdate3D for Jacobi<T, A> {
    type Real = T;

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        let i = idx.ix();
        let r = self.b.get(i) - self.a.apply(self.x, idx);
        self.out
            .set(i, self.x.get(i) + self.omega * r / self.a.diag(i));
    }
}

/// One half sweep of red-black Gauss-Seidel, in place: the cells with `(i + j + k) % 2 == parity` (array
/// coordinates) move to `x + omega (b - A x) / diag`; their neighbours all have the other colour, so the
/// cells of one colour are independent.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RedBlack<T, A = Coeffs<T>> {
    /// The operator.
    pub a: A,
    /// The iterate, updated in place.
    pub x: FieldMut<T>,
    /// The right-hand side.
    pub b: FieldRef<T>,
    /// The colour updated: 0 or 1.
    pub parity: u32,
    /// Over-relaxation (1: Gauss-Seidel).
    pub omega: T,
}

impl<T: Real, A: Operator7<T>> PointUpdate3D for RedBlack<T, A> {
    type Real = T;

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        if (idx.i() + idx.j() + idx.k()) % 2 != self.parity {
            return;
        }
        let i = idx.ix();
        let x = self.x.as_ref();
        let r = self.b.get(i) - self.a.apply(x, idx);
        self.x.set(i, x.get(i) + self.omega * r / self.a.diag(i));
    }
}

/// Where a level's cells sit in its arrays: a natural array of this size (margins included), or
/// colour halves ([`colours::Halves`]).
pub trait CellIndex: Copy + Send + Sync {
    /// The array index of cell `[i, j, k]` (array coordinates; by colour, not on an x margin).
    fn index_of(&self, cell: [u32; 3]) -> usize;
}

impl CellIndex for [u32; 3] {
    #[inline(always)]
    fn index_of(&self, [i, j, k]: [u32; 3]) -> usize {
        i as usize + self[0] as usize * (j as usize + self[1] as usize * k as usize)
    }
}

impl CellIndex for colours::Halves {
    #[inline(always)]
    fn index_of(&self, [i, j, k]: [u32; 3]) -> usize {
        self.place(i, j, k).1
    }
}

/// The coarse right-hand side: the average of the 8 fine children's residuals. Runs over the coarse
/// grid's natural range, writing where `coarse` places the cell; the fine array (natural) is `fine`
/// points wide (margins included), and coarse cell `(i, j, k)` (array coordinates, margin 1) has the
/// fine children `2i - 1 + {0, 1}` on each axis.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Restrict<T, C = [u32; 3]> {
    /// The fine residual.
    pub r: FieldRef<T>,
    /// The coarse right-hand side.
    pub b: FieldMut<T>,
    /// The fine array's size.
    pub fine: [u32; 3],
    /// Where the coarse cells sit.
    pub coarse: C,
}

impl<T: Real, C: CellIndex> PointUpdate3D for Restrict<T, C> {
    type Real = T;
    const RADIUS: [u32; 3] = [0, 0, 0];

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        let at = self.coarse.index_of([idx.i(), idx.j(), idx.k()]);
        self.b.set(at, children_mean(self.r, self.fine, idx));
    }
}

/// The average of the 8 fine children (in `r`, an array `fine` points wide) of coarse cell `idx`,
/// summed in x pairs first, the order [`RestrictPairs`] can keep.
#[inline(always)]
fn children_mean<T: Real>(r: FieldRef<T>, fine: [u32; 3], idx: &ArrayIndex3D) -> T {
    let (nx, nxy) = (fine[0] as usize, fine[0] as usize * fine[1] as usize);
    let base = (2 * idx.i() - 1) as usize
        + nx * (2 * idx.j() - 1) as usize
        + nxy * (2 * idx.k() - 1) as usize;
    let pair = |at: usize| r.get(at) + r.get(at + 1);
    let sum = (pair(base) + pair(base + nx)) + (pair(base + nxy) + pair(base + nxy + nx));
    T::from_f64(0.125) * sum
}

/// [`Restrict`] with the fine cells loaded coalesced (the ocean model's shuffle restriction): one thread
/// per fine column of the `2 x 2` block of children in y and z, so a warp's loads are unit-stride, and
/// each x pair of threads adds its columns with one shuffle; the even thread writes the parent. The same
/// sums in the same order as [`Restrict`]: the same bits. Runs over [`RestrictPairs::range`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RestrictPairs<T> {
    /// The fine residual.
    pub r: FieldRef<T>,
    /// The coarse right-hand side.
    pub b: FieldMut<T>,
    /// The fine array's size.
    pub fine: [u32; 3],
    /// The coarse array's size.
    pub coarse: [u32; 3],
}

impl<T> RestrictPairs<T> {
    /// Two points in x per interior coarse cell, starting on an even point (so that the pairs of
    /// threads of a block, whose x widths are even, are the pairs of children).
    pub fn range(coarse: [u32; 3]) -> LoopRange {
        let [nx, ny, nz] = coarse;
        LoopRange {
            n: [2 * nx, ny, nz],
            begin: [2, 1, 1],
            end: [2 * nx - 2, ny - 1, nz - 1],
        }
    }
}

impl<T: Real> PointUpdate3D for RestrictPairs<T> {
    type Real = T;
    const RADIUS: [u32; 3] = [0, 0, 0];

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        let (nx, nxy) = (
            self.fine[0] as usize,
            self.fine[0] as usize * self.fine[1] as usize,
        );
        // Point `i` is the fine column `i - 1`, child of coarse cell `i / 2`.
        let i = idx.i() as usize;
        let base = (i - 1) + nx * (2 * idx.j() - 1) as usize + nxy * (2 * idx.k() - 1) as usize;
        let even = i.is_multiple_of(2);
        let partner = if even { base + 1 } else { base - 1 };
        let pair = |o: usize| warp::pair_sum(self.r.get(base + o), || self.r.get(partner + o));
        let sum = (pair(0) + pair(nx)) + (pair(nxy) + pair(nxy + nx));
        if even {
            let [cx, cy, _] = self.coarse;
            let at = i / 2 + cx as usize * (idx.j() as usize + cy as usize * idx.k() as usize);
            self.b.set(at, T::from_f64(0.125) * sum);
        }
    }
}

/// Adds the coarse correction to the fine iterate: each fine cell gets its parent's value. Runs over the
/// fine grid; the coarse array is `coarse` points wide (margins included).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProlongAdd<T> {
    /// The coarse correction.
    pub e: FieldRef<T>,
    /// The fine iterate.
    pub x: FieldMut<T>,
    /// The coarse array's size.
    pub coarse: [u32; 3],
}

impl<T: Real> PointUpdate3D for ProlongAdd<T> {
    type Real = T;
    const RADIUS: [u32; 3] = [0, 0, 0];

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        let i = idx.ix();
        let e = self.e.get(self.coarse.index_of(parent_cell(idx)));
        self.x.set(i, self.x.as_ref().get(i) + e);
    }
}

/// The coarse cell (array coordinates) of fine cell `idx`'s parent: fine cells `2I - 1` and `2I`
/// (array coordinates, margin 1) have the parent `I`.
#[inline(always)]
pub(crate) fn parent_cell(idx: &ArrayIndex3D) -> [u32; 3] {
    [idx.i(), idx.j(), idx.k()].map(|v| v.div_ceil(2))
}

/// The most levels a [`CoarseCycle`] takes.
pub const COARSE_MAX_LEVELS: usize = 4;

/// One level of a [`CoarseCycle`]: its operator, iterate, right-hand side (set by the restriction into
/// it), residual, and interior range (the array size in `range.n`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CoarseLevel<T, A> {
    /// The operator.
    pub a: A,
    /// The iterate.
    pub x: FieldMut<T>,
    /// The right-hand side.
    pub b: FieldMut<T>,
    /// The residual.
    pub r: FieldMut<T>,
    /// The interior cells.
    pub range: LoopRange,
}

/// The coarse end of a symmetric red-black V-cycle as one block program: from the first of `count`
/// levels (its right-hand side already restricted into it) down to the last, its `coarse_sweeps`, and
/// back up, leaving the first level's iterate for the prolongation above. The same point updates, in
/// the same order, as the cycle launched pass by pass, so the result is the same to the bit; on the
/// GPU the coarse levels' dozens of tiny launches become one.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CoarseCycle<T, A = Coeffs<T>> {
    /// The levels, finest first; entries from `count` on are unused.
    pub levels: [CoarseLevel<T, A>; COARSE_MAX_LEVELS],
    /// Levels in use (1 to [`COARSE_MAX_LEVELS`]).
    pub count: u32,
    /// Red-black sweeps before and after each coarse correction.
    pub sweeps: u32,
    /// Red-black sweeps on the last level.
    pub coarse_sweeps: u32,
}

impl<T: Real, A: Operator7<T>> CoarseCycle<T, A> {
    /// `sweeps` red-black sweeps on `lv`, the colours reversed on the way up.
    #[inline(always)]
    fn smooth<P: Passes>(p: &P, lv: &CoarseLevel<T, A>, sweeps: u32, up: bool) {
        for _ in 0..sweeps {
            for c in 0..2 {
                let rb = RedBlack {
                    a: lv.a,
                    x: lv.x,
                    b: lv.b.as_ref(),
                    parity: if up { 1 - c } else { c },
                    omega: T::ONE,
                };
                p.pass(&lv.range, |idx| rb.update(idx));
            }
        }
    }

    /// Level `l` on the way down: `x = 0`, then the coarse solve on the last level, else smoothing, the
    /// residual and its restriction into the next level's right-hand side.
    #[inline(always)]
    fn down<P: Passes>(&self, p: &P, l: usize, last: usize) {
        let lv = &self.levels[l];
        let fill = Fill {
            x: lv.x,
            value: T::ZERO,
        };
        p.pass(&lv.range, |idx| fill.update(idx));
        let coarse = match self.levels.get(l + 1) {
            Some(coarse) if l < last => coarse,
            _ => return Self::smooth(p, lv, self.coarse_sweeps, false),
        };
        Self::smooth(p, lv, self.sweeps, false);
        let residual = Residual {
            a: lv.a,
            x: lv.x.as_ref(),
            b: lv.b.as_ref(),
            r: lv.r,
        };
        p.pass(&lv.range, |idx| residual.update(idx));
        let restrict = Restrict {
            r: lv.r.as_ref(),
            b: coarse.b,
            fine: lv.range.n,
            coarse: coarse.range.n,
        };
        p.pass(&coarse.range, |idx| restrict.update(idx));
    }

    /// Level `l` on the way up: the next level's correction added, then smoothing.
    #[inline(always)]
    fn up<P: Passes>(&self, p: &P, l: usize) {
        let (lv, coarse) = (&self.levels[l], &self.levels[l + 1]);
        let prolong = ProlongAdd {
            e: coarse.x.as_ref(),
            x: lv.x,
            coarse: coarse.range.n,
        };
        p.pass(&lv.range, |idx| prolong.update(idx));
        Self::smooth(p, lv, self.sweeps, true);
    }
}

const _: () = assert!(
    COARSE_MAX_LEVELS == 4,
    "CoarseCycle::run names levels 0 to 3"
);

impl<T: Real, A: Operator7<T>> BlockProgram for CoarseCycle<T, A> {
    fn run<P: Passes>(&self, p: &P) {
        let last = (self.count as usize).clamp(1, COARSE_MAX_LEVELS) - 1;
        // Every level index a literal once inlined: indexed at run time, `levels` would be copied out
        // of the kernel parameters into local memory.
        self.down(p, 0, last);
        if last >= 1 {
            self.down(p, 1, last);
            if last >= 2 {
                self.down(p, 2, last);
                if last >= 3 {
                    self.down(p, 3, last);
                    self.up(p, 2);
                }
                self.up(p, 1);
            }
            self.up(p, 0);
        }
    }
}

crate::block_kernel!(for<T> CoarseCycle<T> {
    f32 => poisson_coarse_cycle_f32,
    f64 => poisson_coarse_cycle_f64,
});
crate::block_kernel!(for<T> CoarseCycle<T, CoeffsAos<T>> {
    f32 => poisson_coarse_cycle_aos_f32,
    f64 => poisson_coarse_cycle_aos_f64,
});
crate::kernel3d_sum!(poisson_apply_aos_f64 => Apply<f64, CoeffsAos<f64>>);
crate::kernel3d!(for<T> Residual<T, CoeffsAos<T>> {
    f32 => poisson_residual_aos_f32,
    f64 => poisson_residual_aos_f64,
});
crate::kernel3d!(for<T> Jacobi<T, CoeffsAos<T>> {
    f32 => poisson_jacobi_aos_f32,
    f64 => poisson_jacobi_aos_f64,
});
crate::kernel3d!(for<T> RedBlack<T, CoeffsAos<T>> {
    f32 => poisson_redblack_aos_f32,
    f64 => poisson_redblack_aos_f64,
});
crate::kernel3d_sum!(poisson_apply_f64 => Apply<f64>);
crate::kernel3d!(for<T> Residual<T> { f32 => poisson_residual_f32, f64 => poisson_residual_f64 });
crate::kernel3d!(for<T> Jacobi<T> { f32 => poisson_jacobi_f32, f64 => poisson_jacobi_f64 });
crate::kernel3d!(for<T> RedBlack<T> { f32 => poisson_redblack_f32, f64 => poisson_redblack_f64 });
crate::kernel3d!(for<T> Restrict<T> { f32 => poisson_restrict_f32, f64 => poisson_restrict_f64 });
crate::kernel3d!(for<T> Restrict<T, colours::Halves> {
    f32 => poisson_restrict_colours_f32,
    f64 => poisson_restrict_colours_f64,
});
crate::kernel3d!(for<T> RestrictPairs<T> {
    f32 => poisson_restrict_pairs_f32,
    f64 => poisson_restrict_pairs_f64,
});
crate::kernel3d!(for<T> ProlongAdd<T> { f32 => poisson_prolong_f32, f64 => poisson_prolong_f64 });

/// A precision of the multigrid solver's kernels: every kernel type of its levels, by colour and in
/// either coefficient layout, and the conversions and fills around them, at this precision. The one
/// bound generic multigrid code needs for all of them to be [`GpuEntry`](crate::stencil::GpuEntry).
pub trait PoissonReal:
    Real
    + EntryOf<Fill<Self>>
    + EntryOf<Convert<f64, Self>>
    + EntryOf<crate::vector::ConvertDot<Self>>
    + EntryOf<Jacobi<Self>>
    + EntryOf<RedBlack<Self>>
    + EntryOf<Residual<Self>>
    + EntryOf<Jacobi<Self, CoeffsAos<Self>>>
    + EntryOf<RedBlack<Self, CoeffsAos<Self>>>
    + EntryOf<Residual<Self, CoeffsAos<Self>>>
    + EntryOf<Restrict<Self>>
    + EntryOf<Restrict<Self, colours::Halves>>
    + EntryOf<RestrictPairs<Self>>
    + EntryOf<ProlongAdd<Self>>
    + EntryOf<CoarseCycle<Self>>
    + EntryOf<CoarseCycle<Self, CoeffsAos<Self>>>
    + EntryOf<colours::RedBlackByColour<Self>>
    + EntryOf<colours::ResidualByColour<Self>>
    + EntryOf<colours::ProlongAddByColour<Self>>
    + EntryOf<colours::ProlongAddByColour<Self, colours::Halves>>
    + EntryOf<colours::ConvertByColour<f64, Self>>
    + EntryOf<colours::FromColoursDot<Self>>
{
}
impl PoissonReal for f32 {}
impl PoissonReal for f64 {}
