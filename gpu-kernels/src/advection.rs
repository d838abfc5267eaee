//! Cubic semi-Lagrangian advection of a 2-D f32 field by a steady velocity field (Fukuzawa, GPU
//! Challenge 2010): the per-point update every engine runs, and the GPU kernels with the paper's
//! techniques, each switchable so that its effect can be measured.
//!
//! The scheme: for node (i, j) with Courant numbers `a = u dt / h`, `b = v dt / h` (|a|, |b| <= 1) the
//! departure point is (i - a, j - b). Interpolation is cubic Lagrange on 4 upwind-biased nodes per
//! direction: for `a >= 0` the nodes i-2, i-1, i, i+1 with the [`weights`] at `s = -a` (offsets -2..1); for
//! `a < 0` the nodes i+2, i+1, i, i-1 take the same weights at `s = a`. In 2-D each of the 4 upwind rows is
//! interpolated in x, then those 4 values in y. The two outermost nodes on every side keep their values:
//! the host gives them zero velocity (then `s = 0` and the update returns the node's own value exactly),
//! and the fields have a margin of 2 (finite values) so that no update reads outside them.
//!
//! Kernels: [`Advect`] with technique flags `K` ([`BRANCH_FREE`], [`QUEUE`], [`SHARED`]) and a velocity
//! layout ([`Separate`] fields, or [`Packed`] pairs read with one 8-byte load). Without
//! [`QUEUE`] the kernel is the framework's plain 2-D loop over [`Advect::update`], one point at a time.
//! With it each thread marches `march` points up a column (the tuner's unroll factor, 4..32) keeping a
//! queue of 5 rows in registers, each row with the velocity-independent coefficients of its two cubics
//! (left- and right-biased, Newton form), computed once and used by the 5 outputs that share the row.

use crate::bind::Bits;
use crate::device::math::{abs, fma};
#[cfg_attr(not(target_arch = "nvptx64"), allow(unused_imports))]
use crate::device::thread;
use crate::stencil::{ArrayIndex2D, FieldMut, FieldRef, PointUpdate2D};

/// Upwind selection without divergent branches (absolute values and selects).
pub const BRANCH_FREE: u32 = 1;
/// Each thread marches up a column with a register queue of 5 rows and their coefficients.
pub const QUEUE: u32 = 4;
/// With [`QUEUE`]: each row is loaded once per block into shared memory (one load per thread, plus the
/// halo), and the threads read their 5 values from there.
pub const SHARED: u32 = 8;
/// The widest block the [`SHARED`] kernels take (the tuner's largest `block_x`).
pub const SHARED_MAX_X: u32 = 128;
/// The most thread rows per block the [`SHARED`] kernels take (the tuner's largest `block_y`).
pub const SHARED_MAX_Y: u32 = 16;
const SHARED_ROW: usize = SHARED_MAX_X as usize + 4;

/// A (u, v) pair, aligned so that one 8-byte load reads it.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Uv {
    /// x velocity.
    pub u: f32,
    /// y velocity.
    pub v: f32,
}

// SAFETY: 8 bytes, 8-aligned, both; any bits are a valid pair of f32 and a valid f64. The runtime's
// fields hold real numbers, so a field of pairs is allocated as an f64 field and viewed as pairs.
unsafe impl Bits<f64> for Uv {}
// SAFETY: as above.
unsafe impl Bits<Uv> for f64 {}

/// Where an [`Advect`] reads the velocities.
pub trait Velocity: Copy + Send + Sync {
    /// `(u, v)` at array index `ix`.
    fn at(&self, ix: usize) -> (f32, f32);
}

/// The velocities as two fields, `u` and `v`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Separate {
    /// x velocity.
    pub u: FieldRef<f32>,
    /// y velocity.
    pub v: FieldRef<f32>,
}

impl Velocity for Separate {
    #[inline(always)]
    fn at(&self, ix: usize) -> (f32, f32) {
        (self.u.get(ix), self.v.get(ix))
    }
}

/// The velocities as one field of (u, v) pairs, each read with one 8-byte load.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Packed {
    /// The pairs.
    pub uv: FieldRef<Uv>,
}

impl Velocity for Packed {
    #[inline(always)]
    fn at(&self, ix: usize) -> (f32, f32) {
        let w = self.uv.get(ix);
        (w.u, w.v)
    }
}

/// The cubic Lagrange weights of the nodes at offsets -2, -1, 0, 1 for the point at offset `s`.
/// Multiplications by 1/6 and 1/2, not divisions: a `div.rn.f32` is a multi-instruction sequence on the GPU.
#[inline(always)]
pub fn weights(s: f32) -> [f32; 4] {
    let (p2, p1, m1) = (s + 2.0, s + 1.0, s - 1.0);
    let (sm, pp) = (s * m1, p2 * p1);
    [
        -(p1 * sm) * SIXTH,
        (p2 * sm) * 0.5,
        -(pp * m1) * 0.5,
        (pp * s) * SIXTH,
    ]
}

const SIXTH: f32 = 1.0 / 6.0;

/// Bytes a step must move per point at the least: `f` read and written, `u` and `v` read (f32 each).
pub const BYTES_PER_POINT: u32 = 16;

/// One step of the advection: `out` from `f` with velocities `vel` and `c = dt / h`. All fields share
/// one array shape (margin 2).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Advect<const K: u32, V = Separate> {
    /// The field at the start of the step.
    pub f: FieldRef<f32>,
    /// The field at the end of the step.
    pub out: FieldMut<f32>,
    /// The velocities.
    pub vel: V,
    /// `dt / h`.
    pub c: f32,
}

impl<const K: u32, V: Velocity> Advect<K, V> {
    /// Courant numbers `(a, b)` at array index `ix`.
    #[inline(always)]
    fn courant(&self, ix: usize) -> (f32, f32) {
        let (u, v) = self.vel.at(ix);
        (u * self.c, v * self.c)
    }
}

impl<const K: u32, V: Velocity> PointUpdate2D for Advect<K, V> {
    type Real = f32;
    const RADIUS: [u32; 2] = [2, 2];
    /// The variants' flops differ, and are not stated.
    const BYTES: u32 = BYTES_PER_POINT;

    /// The scheme exactly as written: upwind side by branch, Lagrange weights, rows in x, then y.
    #[inline(always)]
    fn update(&self, idx: &ArrayIndex2D) {
        let (a, b) = self.courant(idx.ix());
        let (sx, dx): (f32, isize) = if a >= 0.0 { (-a, 1) } else { (a, -1) };
        let (sy, dy): (f32, isize) = if b >= 0.0 { (-b, 1) } else { (b, -1) };
        let (wx, wy) = (weights(sx), weights(sy));
        let nx = idx.size()[0] as isize;
        let mut sum = 0.0;
        // Index loops: LLVM unrolls them and keeps the weights in registers (an iterator zip left them in
        // local memory).
        #[allow(clippy::needless_range_loop)]
        for m in 0..4 {
            let row = idx.ix() as isize + dy * (m as isize - 2) * nx;
            let mut r = 0.0;
            for k in 0..4 {
                r = fma(wx[k], self.f.get((row + dx * (k as isize - 2)) as usize), r);
            }
            sum = fma(wy[m], r, sum);
        }
        self.out.set(idx.ix(), sum);
    }
}

/// The Newton-form coefficients of one row's two cubics around node `i`: `p(s) = f0 + s (c1 + s (c2 + s
/// c3))`, left-biased (nodes i-2..i+1, `l1`, `l3`) and right-biased (nodes i+2..i-1, `r1`, `r3`; `c2` is
/// the same for both). They do not depend on the velocity. `l3` and `r3` are kept times 6: the 1/6 goes
/// into `s / 6`, computed once per output for all its rows.
#[derive(Clone, Copy)]
struct Row {
    f0: f32,
    l1: f32,
    r1: f32,
    c2: f32,
    l3x6: f32,
    r3x6: f32,
}

impl Row {
    /// Fused multiply-adds throughout: the arithmetic, not the memory, bounded the kernel with separate
    /// roundings (87 floating-point instructions per output against about 50 fused).
    #[inline(always)]
    fn new(f: [f32; 5]) -> Self {
        let [fm2, fm1, f0, fp1, fp2] = f;
        Row {
            f0,
            c2: fma(0.5, fm1 + fp1, -f0),
            l1: fma(SIXTH, fma(3.0, f0, fma(2.0, fp1, fm2)), -fm1),
            r1: fma(SIXTH, fma(3.0, f0, fma(2.0, fm1, fp2)), -fp1),
            l3x6: fma(3.0, fm1 - f0, fp1 - fm2),
            r3x6: fma(3.0, fp1 - f0, fm1 - fp2),
        }
    }

    /// The cubic at `s` (`s = -|a|`, `s6 = s / 6`), left-biased for `left`.
    #[inline(always)]
    fn eval<const BF: bool>(&self, s: f32, s6: f32, left: bool) -> f32 {
        let (c1, c3x6) = if BF {
            (
                select(left, self.l1, self.r1),
                select(left, self.l3x6, self.r3x6),
            )
        } else if left {
            (self.l1, self.l3x6)
        } else {
            (self.r1, self.r3x6)
        };
        cubic(self.f0, c1, self.c2, c3x6, s, s6)
    }
}

/// `f0 + s (c1 + s (c2 + s c3))` with `c3x6 = 6 c3` and `s6 = s / 6`.
#[inline(always)]
fn cubic(f0: f32, c1: f32, c2: f32, c3x6: f32, s: f32, s6: f32) -> f32 {
    fma(s, fma(s, fma(s6, c3x6, c2), c1), f0)
}

/// The left-biased cubic through `fm2, fm1, f0, fp1` (offsets -2..1) at `s` (`s6 = s / 6`): only the one
/// side the output needs, for the interpolation in y.
#[inline(always)]
fn left_cubic(fm2: f32, fm1: f32, f0: f32, fp1: f32, s: f32, s6: f32) -> f32 {
    let c2 = fma(0.5, fm1 + fp1, -f0);
    let c1 = fma(SIXTH, fma(3.0, f0, fma(2.0, fp1, fm2)), -fm1);
    cubic(f0, c1, c2, fma(3.0, fm1 - f0, fp1 - fm2), s, s6)
}

/// `if c { a } else { b }` as a select instruction, not a branch.
#[inline(always)]
fn select(c: bool, a: f32, b: f32) -> f32 {
    let m = (c as u32).wrapping_neg();
    f32::from_bits((a.to_bits() & m) | (b.to_bits() & !m))
}

impl<const K: u32, V: Velocity> Advect<K, V> {
    /// The 5 values of the row around array index `ix`.
    #[inline(always)]
    fn values(&self, ix: usize) -> [f32; 5] {
        let f = self.f;
        [
            f.get(ix - 2),
            f.get(ix - 1),
            f.get(ix),
            f.get(ix + 1),
            f.get(ix + 2),
        ]
    }

    #[inline(always)]
    fn row(&self, ix: usize) -> Row {
        Row::new(self.values(ix))
    }

    /// The new value of the output whose 5 rows (j-2..j+2) are `q`, from its Courant numbers.
    #[inline(always)]
    fn output(&self, q: &[Row; 5], a: f32, b: f32) -> f32 {
        let bf = K & BRANCH_FREE != 0;
        let (left, s) = (a >= 0.0, -abs(a));
        let (down, t) = (b >= 0.0, -abs(b));
        let (s6, t6) = (s * SIXTH, t * SIXTH);
        // The rows' values at the departure abscissa, then the cubic in y through 4 of them, the upwind
        // ones mirrored onto offsets -2..1 (upwind from above, row j+2 plays j-2).
        let g = |m: usize| {
            if bf {
                q[m].eval::<true>(s, s6, left)
            } else {
                q[m].eval::<false>(s, s6, left)
            }
        };
        if bf {
            let [g0, g1, g2, g3, g4] = [g(0), g(1), g(2), g(3), g(4)];
            left_cubic(
                select(down, g0, g4),
                select(down, g1, g3),
                g2,
                select(down, g3, g1),
                t,
                t6,
            )
        } else if down {
            left_cubic(g(0), g(1), g(2), g(3), t, t6)
        } else {
            left_cubic(g(4), g(3), g(2), g(1), t, t6)
        }
    }

    /// The [`QUEUE`] kernels' thread: marches `n` points up the column from array index `ix` (the first
    /// output), in rows of `nx` elements, with a queue of 5 rows. Public so that the CPU tests can check it.
    #[inline(always)]
    pub fn march(&self, ix: usize, nx: usize, n: u32) {
        if n == 0 {
            return;
        }
        let (mut r0, mut r1, mut r2, mut r3) = (
            self.row(ix - 2 * nx),
            self.row(ix - nx),
            self.row(ix),
            self.row(ix + nx),
        );
        let mut r4: Row;
        // The Courant numbers are loaded two outputs ahead (past the column's end, its last output's
        // again), so that their load need not wait for the stores before it, which the compiler must
        // assume may alias them: 6% faster at 4096^2 than loading them in place, 2% faster than one output
        // ahead. Loading the row's 5 values ahead as well cost more registers than it gained (72 against
        // 51: 3% slower).
        let first = ix;
        let courant = |k: u32| self.courant(first + nx * k.min(n - 1) as usize);
        let (mut uv0, mut uv1) = (courant(0), courant(1));
        let mut ix = ix;
        let mut k = 0;
        // One output: the new row into `$new`, the slot of the row no longer needed. Five of them, each
        // with the queue rotated, make one pass of the loop: a rotating array cost 24 register moves per
        // output (a quarter of the kernel's instructions); named slots cost none.
        macro_rules! step {
            ($a:ident, $b:ident, $c:ident, $d:ident, $new:ident) => {
                if k == n {
                    break;
                }
                k += 1;
                let (a, b) = uv0;
                uv0 = uv1;
                uv1 = courant(k + 1);
                $new = self.row(ix + 2 * nx);
                self.out.set(ix, self.output(&[$a, $b, $c, $d, $new], a, b));
                ix += nx;
            };
        }
        loop {
            step!(r0, r1, r2, r3, r4);
            step!(r1, r2, r3, r4, r0);
            step!(r2, r3, r4, r0, r1);
            step!(r3, r4, r0, r1, r2);
            step!(r4, r0, r1, r2, r3);
        }
    }
}

/// Where a thread of a [`SHARED`] kernel sits: its block's first column `i0`, its place `tx` in a block
/// `bx` wide, its thread row `ty` (`by` rows per block) and its first output row `j0`.
#[derive(Clone, Copy, Debug)]
pub struct BlockPlace {
    /// First column of the block (array coordinates).
    pub i0: u32,
    /// Column of the thread within the block.
    pub tx: u32,
    /// Block width.
    pub bx: u32,
    /// Thread row within the block.
    pub ty: u32,
    /// First output row of the thread (array coordinates).
    pub j0: u32,
}

impl<const K: u32, V: Velocity> Advect<K, V> {
    /// The [`SHARED`] kernels' thread: `march` outputs up its column as in [`march`](Self::march), each
    /// row staged by its block row in shared memory (two slots, one barrier a row). Every thread of the
    /// block takes part in every barrier, so those outside the range only help load.
    ///
    /// # Safety
    /// `bx <= SHARED_MAX_X`, `ty < SHARED_MAX_Y`, and every thread of the block calls this with the same
    /// `i0`, `bx` and `march`.
    #[inline(always)]
    pub unsafe fn march_shared(&self, r: &crate::stencil::LoopRange, p: BlockPlace, march: u32) {
        let buf = crate::shared_array![f32; SHARED_MAX_Y as usize * 2 * SHARED_ROW];
        // SAFETY: `ty < SHARED_MAX_Y` (the caller's contract).
        let mine = unsafe { buf.add(p.ty as usize * 2 * SHARED_ROW) };
        let nx = r.n[0] as usize;
        let (last_col, last_row) = (r.n[0] - 1, r.n[1] - 1);
        let i = p.i0 + p.tx;
        let width = p.bx + 4;
        let stage = |step: u32| {
            // Rows j0-2 .. j0+march+1; columns i0-2 .. i0+bx+1, clamped to the array (clamped values
            // are never used: they belong to threads outside the range).
            let j = (p.j0 + step - 2).min(last_row) as usize;
            let slot = (step % 2) as usize * SHARED_ROW;
            let mut k = p.tx;
            while k < width {
                let col = (p.i0 + k - 2).min(last_col) as usize;
                // SAFETY: `k < bx + 4 <= SHARED_ROW`.
                unsafe { *mine.add(slot + k as usize) = self.f.get(col + nx * j) };
                k += p.bx;
            }
            thread::sync_threads();
            // SAFETY: `tx + 4 < bx + 4 <= SHARED_ROW`.
            let at = |d: usize| unsafe { *mine.add(slot + p.tx as usize + d) };
            Row::new([at(0), at(1), at(2), at(3), at(4)])
        };
        let mut q = [stage(0), stage(1), stage(2), stage(3), Row::new([0.0; 5])];
        for step in 4..march + 4 {
            q[4] = stage(step);
            let jo = p.j0 + step - 4;
            if i < r.end[0] && jo < r.end[1] {
                let ix = i as usize + nx * jo as usize;
                let (a, b) = self.courant(ix);
                self.out.set(ix, self.output(&q, a, b));
            }
            q = [q[1], q[2], q[3], q[4], q[4]];
        }
    }
}

impl<const K: u32, V: Velocity> Advect<K, V> {
    /// [`march_shared`](Self::march_shared) by a block of one thread on the host, which loads each
    /// row's values itself: column `i0`, `march` rows from `j0` (array coordinates). The CPU check of
    /// the shared kernels' arithmetic.
    #[cfg(not(target_arch = "nvptx64"))]
    pub fn march_shared_alone(&self, r: &crate::stencil::LoopRange, i0: u32, j0: u32, march: u32) {
        let place = BlockPlace {
            i0,
            tx: 0,
            bx: 1,
            ty: 0,
            j0,
        };
        // SAFETY: a block of one thread: `bx` 1 and `ty` 0 within the shared buffer, and its one thread
        // is every thread of the block.
        unsafe { self.march_shared(r, place, march) }
    }
}

macro_rules! advect_entries {
    ($($plain:ident, $k:expr, $v:ty;)*) => {$(
        crate::kernel! {
            /// Generated kernel entry: the framework's 2-D launch, each thread marching `march` rows.
            pub unsafe fn $plain(a: Advect<{ $k }, $v>, r: crate::stencil::LoopRange, march: u32) {
                if $k & QUEUE == 0 {
                    crate::stencil::device_loop2d(&a, &r, march)
                } else if $k & SHARED != 0 {
                    let (bx, ty) = (thread::block_dim_x(), thread::thread_idx_y());
                    let row = thread::block_idx_y() * thread::block_dim_y() + ty;
                    let place = BlockPlace {
                        i0: r.begin[0] + thread::block_idx_x() * bx,
                        tx: thread::thread_idx_x(),
                        bx,
                        ty,
                        j0: r.begin[1] + row * march,
                    };
                    // Blocks beyond the shared buffer do nothing (the tuner's space stays inside it).
                    if bx <= SHARED_MAX_X && thread::block_dim_y() <= SHARED_MAX_Y {
                        a.march_shared(&r, place, march)
                    }
                } else {
                    let i = r.begin[0] + thread::block_idx_x() * thread::block_dim_x() + thread::thread_idx_x();
                    let row = thread::block_idx_y() * thread::block_dim_y() + thread::thread_idx_y();
                    let j0 = r.begin[1] + row * march;
                    if i < r.end[0] && j0 < r.end[1] {
                        let n = march.min(r.end[1] - j0);
                        let nx = r.n[0] as usize;
                        a.march(i as usize + nx * j0 as usize, nx, n)
                    }
                }
            }
        }
        impl crate::stencil::GpuEntry for Advect<{ $k }, $v> {
            const MODULE: &'static str = env!("CARGO_CRATE_NAME");
            const ENTRY: &'static str = stringify!($plain);
        }
    )*};
}

advect_entries! {
    advect_plain, 0, Separate;
    advect_queue, QUEUE, Separate;
    advect_queue_bf, QUEUE | BRANCH_FREE, Separate;
    advect_queue_bf_packed, QUEUE | BRANCH_FREE, Packed;
    advect_queue_bf_packed_shared, QUEUE | BRANCH_FREE | SHARED, Packed;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newton_rows_equal_lagrange_weights() {
        let f = [0.3f32, -1.2, 2.5, 0.7, -0.4];
        let row = Row::new(f);
        for s in [-1.0f32, -0.75, -0.5, -0.1, 0.0] {
            let w = weights(s);
            let left: f32 = (0..4).map(|k| w[k] * f[k]).sum();
            let right: f32 = (0..4).map(|k| w[k] * f[4 - k]).sum();
            let s6 = s * SIXTH;
            assert!((row.eval::<false>(s, s6, true) - left).abs() < 1e-5, "{s}");
            assert!((row.eval::<true>(s, s6, false) - right).abs() < 1e-5, "{s}");
            let mirrored = left_cubic(f[4], f[3], f[2], f[1], s, s6);
            assert!((mirrored - right).abs() < 1e-5, "{s}");
        }
        assert_eq!(row.eval::<true>(0.0, 0.0, true), f[2]);
        assert_eq!(left_cubic(f[0], f[1], f[2], f[3], 0.0, 0.0), f[2]);
        assert_eq!(weights(-1.0), [0.0, 1.0, 0.0, 0.0]);
        assert_eq!(select(true, 1.0, 2.0), 1.0);
        assert_eq!(select(false, 1.0, 2.0), 2.0);
    }
}
