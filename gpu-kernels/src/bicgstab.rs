//! Device half of the BiCGStab solver: the fused vector kernels, their dot products reduced on the device
//! (warp shuffles, one partial per block, then the last block to finish sums the partials and updates the
//! scalars), and the scalar recurrences.
//!
//! The scalars live in a [`BiCgState`] in device memory, so kernels read `alpha`, `omega`, `beta` there and
//! the host never has to wait for them. The same scalar code runs on the host for the `sync` variant, which
//! computes the scalars from copied partial sums.
//! All vectors are complex arrays of `n` elements; sums are accumulated in f64 whatever the field precision.
#![cfg_attr(not(target_arch = "nvptx64"), allow(unused_imports))]
// Four sums, indexed in lock step across arrays: index loops read best here.
#![allow(clippy::needless_range_loop)]

use crate::complex::{Complex, ComplexReal};
use crate::device::atomic::{self, Scope};
use crate::device::thread::{self, sync_threads};
use crate::device::warp;
use crate::solver_store::{SolverStore, SolverValue};

/// The solver is still iterating.
pub const RUNNING: u32 = 0;
/// The residual reached the tolerance.
pub const CONVERGED: u32 = 1;
/// The iteration limit was reached.
pub const MAX_ITER: u32 = 2;
/// `rho = <r0, r>` vanished.
pub const BREAKDOWN_RHO: u32 = 3;
/// `<r0, v>` vanished.
pub const BREAKDOWN_R0V: u32 = 4;
/// `<t, t>` vanished while the residual had not converged, or `omega` vanished.
pub const BREAKDOWN_OMEGA: u32 = 5;
/// A reliable-update stop ([`BiCgState::delta_sq`]): the iterated residual fell to its target. The
/// next step's scalars (`beta`, `rho`) are computed, so the host may swap in a recomputed residual
/// and resume the same recurrence where it stopped (with the direction update).
pub const TARGET: u32 = 6;
/// Conjugate gradients: `<p, A p>` vanished or is not positive (the operator is not positive definite).
pub const BREAKDOWN_PAP: u32 = 7;

/// Relative size under which a denominator counts as zero: far below f64 rounding of any real solve,
/// so only a true breakdown (or garbage) trips it.
const BREAKDOWN: f64 = 1e-24;

/// The scalars of one BiCGStab solve (always f64), kept in device memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BiCgState {
    /// `rho = <r0, r>` of the current iteration.
    pub rho: Complex<f64>,
    /// Step along `p`.
    pub alpha: Complex<f64>,
    /// Step along `s`.
    pub omega: Complex<f64>,
    /// Update factor of the search direction.
    pub beta: Complex<f64>,
    /// `|b|^2`.
    pub bb: f64,
    /// `|r|^2` after the last completed iteration.
    pub rr: f64,
    /// The squared residual to reach: `tol^2 |b|^2`.
    pub stop_rr: f64,
    /// Completed iterations.
    pub iterations: u32,
    /// Iteration limit.
    pub max_iter: u32,
    /// [`RUNNING`], [`CONVERGED`], [`MAX_ITER`] or a breakdown code.
    pub status: u32,
    /// Padding (keeps the layout the same on both sides).
    pub _pad: u32,
    /// Reliable updates (mixed precision): `delta^2`, or 0 for a plain solve. When positive, an
    /// iteration whose `|r|^2` falls to `delta^2 max_rr` or to `floor_rr` stops the solve with
    /// [`TARGET`] instead of testing `stop_rr`'s convergence (set `stop_rr` to 0).
    pub delta_sq: f64,
    /// The largest `|r|^2` since the last reliable update (the start counts as one).
    pub max_rr: f64,
    /// `|r|^2` at which a reliable-update solve stops whatever `max_rr` (the outer tolerance, so that
    /// the host checks the true residual as soon as the iterated one says it may have converged).
    pub floor_rr: f64,
}

/// The four sums a reduction kernel produces: a complex dot product and two squared norms.
pub type Sums = [f64; 4];

/// Which scalar update a finishing step performs.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// After `<b, b>`: `rho = |b|^2` (r = r0 = p = b, x = 0).
    Init = 0,
    /// After `<v, r0>`, `|v|^2`: `alpha = rho / <r0, v>`.
    Alpha = 1,
    /// After `<t, s>`, `|t|^2`, `|s|^2`: `omega = <t, s> / <t, t>`.
    Omega = 2,
    /// After `<r0, r>`, `|r|^2`: convergence, `beta`, the next `rho`.
    Beta = 3,
    /// Conjugate gradients (on `A = M^dag M`, `rho = |r|^2`): after `|M p|^2 = <p, A p>`,
    /// `alpha = rho / <p, A p>`.
    CgAlpha = 4,
    /// Conjugate gradients: after `|r|^2`: convergence, `beta = |r|^2 / rho`, the next `rho`.
    CgBeta = 5,
}

impl Stage {
    /// The stage numbered `s` (as passed in [`Blas::stage`]).
    pub fn from_u32(s: u32) -> Self {
        match s {
            0 => Self::Init,
            1 => Self::Alpha,
            2 => Self::Omega,
            4 => Self::CgAlpha,
            5 => Self::CgBeta,
            _ => Self::Beta,
        }
    }
}

impl BiCgState {
    /// A state for a solve to relative residual `tol` in at most `max_iter` iterations.
    pub fn new(tol: f64, max_iter: u32) -> Self {
        Self {
            stop_rr: tol * tol,
            max_iter,
            ..Self::default()
        }
    }

    /// A state for a reliable-update solve ([`delta_sq`](Self::delta_sq)): no convergence test of its
    /// own, a [`TARGET`] stop whenever `|r|` falls by `delta` below its largest value since the start
    /// (or since the host last reset [`max_rr`](Self::max_rr)), or to `floor_rr` (absolute, `|r|^2`).
    pub fn reliable(delta: f64, floor_rr: f64, max_iter: u32) -> Self {
        Self {
            delta_sq: delta * delta,
            floor_rr,
            max_iter,
            ..Self::default()
        }
    }

    /// The reliable-update test of an iteration that ends with `|r|^2 = rr` and may go on.
    fn reliable_test(&mut self, rr: f64) {
        if self.delta_sq > 0.0 {
            if rr > self.max_rr {
                self.max_rr = rr;
            }
            if rr <= self.delta_sq * self.max_rr || rr <= self.floor_rr {
                self.status = TARGET;
            }
        }
    }

    /// The scalar step after a reduction: the paper's host-side arithmetic, done on the device by one
    /// thread (or on the host by the `sync` variant and the CPU engine).
    pub fn finish(&mut self, stage: Stage, s: Sums) {
        if self.status != RUNNING {
            return;
        }
        let dot = Complex::new(s[0], s[1]);
        match stage {
            Stage::Init => {
                self.bb = s[2];
                self.rr = s[2];
                self.max_rr = s[2];
                self.rho = Complex::new(s[2], 0.0);
                self.stop_rr *= s[2];
                if s[2] == 0.0 {
                    self.status = CONVERGED;
                }
            }
            Stage::Alpha => {
                // s: <v, r0>, |v|^2, |r0|^2 = bb.
                let r0v = dot.conj();
                if r0v.norm_sqr() <= BREAKDOWN * BREAKDOWN * s[2] * self.bb || !finite(r0v) {
                    self.status = BREAKDOWN_R0V;
                    return;
                }
                self.alpha = self.rho / r0v;
            }
            Stage::Omega => {
                // s: <t, s>, |t|^2, |s|^2.
                if s[3] <= self.stop_rr {
                    // s is already small enough: x + alpha p solves; omega = 0 makes r = s.
                    self.omega = Complex::ZERO;
                } else if s[2] <= BREAKDOWN * BREAKDOWN * s[3] || !finite(dot) {
                    self.status = BREAKDOWN_OMEGA;
                } else {
                    self.omega = Complex::new(s[0] / s[2], s[1] / s[2]);
                }
            }
            Stage::Beta => {
                // s: <r0, r>, |r|^2.
                self.iterations += 1;
                self.rr = s[2];
                if !s[2].is_finite() {
                    self.status = BREAKDOWN_RHO;
                } else if s[2] <= self.stop_rr {
                    self.status = CONVERGED;
                } else if self.iterations >= self.max_iter {
                    self.status = MAX_ITER;
                } else if dot.norm_sqr() <= BREAKDOWN * BREAKDOWN * self.bb * s[2] {
                    self.status = BREAKDOWN_RHO;
                } else if self.omega.norm_sqr() == 0.0 {
                    self.status = BREAKDOWN_OMEGA;
                } else {
                    self.beta = (dot / self.rho) * (self.alpha / self.omega);
                    self.rho = dot;
                    self.reliable_test(s[2]);
                }
            }
            Stage::CgAlpha => {
                // s: _, _, |M p|^2 = <p, A p>.
                if !s[2].is_finite() || s[2] <= BREAKDOWN * BREAKDOWN * self.rho.re {
                    self.status = BREAKDOWN_PAP;
                    return;
                }
                self.alpha = Complex::new(self.rho.re / s[2], 0.0);
            }
            Stage::CgBeta => {
                // s: _, _, |r|^2.
                self.iterations += 1;
                self.rr = s[2];
                if !s[2].is_finite() {
                    self.status = BREAKDOWN_RHO;
                } else if s[2] <= self.stop_rr {
                    self.status = CONVERGED;
                } else if self.iterations >= self.max_iter {
                    self.status = MAX_ITER;
                } else {
                    self.beta = Complex::new(s[2] / self.rho.re, 0.0);
                    self.rho = Complex::new(s[2], 0.0);
                    self.reliable_test(s[2]);
                }
            }
        }
    }
}

fn finite(z: Complex<f64>) -> bool {
    z.re.is_finite() && z.im.is_finite()
}

/// [`Blas::stage`] of a reduction whose sums the host finishes (the `sync` variant, the true residual).
pub const HOST_FINISHES: u32 = u32::MAX;
/// [`Blas::stage`] of a reduction on one rank of a split solve: the last block writes the rank's totals
/// to [`Blas::sums`], which are summed over the ranks before [`Finish`] applies the stage.
pub const TOTALS: u32 = u32::MAX - 1;

/// Arguments of the vector kernels: `n` values of a [`SolverStore`] (complex numbers, or 16-bit spinor
/// sites), up to six vectors, the state and the per-block partial sums (`4 * blocks` f64, sum `q` of
/// block `b` at `q * blocks + b`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Blas<S: SolverStore> {
    /// Values per vector.
    pub n: u32,
    /// A [`Stage`] as `u32`: the last block to finish sums the partials and applies it to the state;
    /// or [`HOST_FINISHES`].
    pub stage: u32,
    /// The operation's vectors (meaning per operation).
    pub v: [*mut S::Elem; 6],
    /// The solver state.
    pub state: *mut BiCgState,
    /// Partial sums, `4 * blocks`.
    pub partials: *mut f64,
    /// Blocks that finished the reduction so far; zero between kernels (the last block rewinds it).
    pub done: *mut u32,
    /// With [`TOTALS`]: where the last block writes the four sums.
    pub sums: *mut f64,
}

// SAFETY: every value is written by exactly one thread.
unsafe impl<S: SolverStore> Send for Blas<S> {}
// SAFETY: as above.
unsafe impl<S: SolverStore> Sync for Blas<S> {}

/// The vector operations of one BiCGStab iteration; each returns its contribution to the sums.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `v = [a, b]`: sums `<a, b>`, `|a|^2`, `|b|^2`.
    Dot = 0,
    /// `v = [s, r, v]`: `s = r - alpha v`.
    S = 1,
    /// `v = [x, p, s, t, r, r0]`: `x += alpha p + omega s`, `r = s - omega t`; sums `<r0, r>`, `|r|^2`.
    Xr = 2,
    /// `v = [p, r, v]`: `p = r + beta (p - omega v)`.
    P = 3,
    /// `v = [a, b]`: sums `|a - b|^2`, `|b|^2` (in slots 2 and 3): the true residual `|b - D x|`.
    DiffNorm = 4,
    /// Conjugate gradients, `v = [x, p, r, t]` (`t = A p`): `x += alpha p`, `r -= alpha t`; sums
    /// `|r|^2` (slot 2).
    CgXr = 5,
    /// Conjugate gradients, `v = [p, r]`: `p = r + beta p`.
    CgP = 6,
    /// `v = [a, b, c]`: `a = b - c`; sums `|a|^2`, `|b|^2` (slots 2 and 3): a residual `b - A x`.
    Sub = 7,
    /// Conjugate gradients after a reliable update, `v = [p, r]`: `p -= omega r` (`omega` holding
    /// `<r, p> / |r|^2`), the direction made orthogonal to the recomputed residual again.
    CgOrth = 8,
}

impl<S: SolverStore> Blas<S> {
    /// Operation `op` on value `i`, returning its share of the sums. The scalars come from `st`.
    ///
    /// # Safety
    /// The vectors the operation uses must hold `n` values each, and `i < n`.
    #[inline(always)]
    pub unsafe fn element(&self, op: Op, st: &BiCgState, i: usize) -> Sums {
        let ld = |k: usize| unsafe { S::load_value(self.v[k], i) };
        let st_ = |k: usize, z: S::Value| unsafe { S::store_value(self.v[k], i, z) };
        let c = Complex::<<S::Value as SolverValue>::Real>::from_f64;
        match op {
            Op::Dot => Self::dot_terms(ld(0), ld(1)),
            Op::S => {
                st_(0, ld(1) - ld(2).times(c(st.alpha)));
                [0.0; 4]
            }
            Op::Xr => {
                // Every load before the first store, which they might alias: one memory latency.
                let (x, p, s, t, r0) = (ld(0), ld(1), ld(2), ld(3), ld(5));
                let (alpha, omega) = (c(st.alpha), c(st.omega));
                st_(0, x + p.times(alpha) + s.times(omega));
                let r = s - t.times(omega);
                st_(4, r);
                let d = r0.conj_dot(r);
                [d.re, d.im, r.norm2(), 0.0]
            }
            Op::P => {
                let (beta, omega) = (c(st.beta), c(st.omega));
                st_(0, ld(1) + (ld(0) - ld(2).times(omega)).times(beta));
                [0.0; 4]
            }
            Op::DiffNorm => {
                let (a, b) = (ld(0), ld(1));
                [0.0, 0.0, a.diff_norm2(b), b.norm2()]
            }
            Op::CgXr => {
                let (x, p, r, t) = (ld(0), ld(1), ld(2), ld(3));
                let alpha = c(st.alpha);
                st_(0, x + p.times(alpha));
                let r = r - t.times(alpha);
                st_(2, r);
                [0.0, 0.0, r.norm2(), 0.0]
            }
            Op::CgP => {
                st_(0, ld(1) + ld(0).times(c(st.beta)));
                [0.0; 4]
            }
            Op::CgOrth => {
                st_(0, ld(0) - ld(1).times(c(st.omega)));
                [0.0; 4]
            }
            Op::Sub => {
                let (b, ax) = (ld(1), ld(2));
                let a = b - ax;
                st_(0, a);
                [0.0, 0.0, a.norm2(), b.norm2()]
            }
        }
    }

    /// The sums of [`Op::Dot`] for one value pair: `<a, b>`, `|a|^2`, `|b|^2`.
    #[inline(always)]
    pub fn dot_terms(a: S::Value, b: S::Value) -> Sums {
        let d = a.conj_dot(b);
        [d.re, d.im, a.norm2(), b.norm2()]
    }

    /// The GPU body of a vector kernel: a grid-stride loop over the elements, then (for reducing
    /// operations) the block's sums reduced with warp shuffles and written to `partials`.
    ///
    /// # Safety
    /// As for [`element`](Self::element); launched with at most 1024 threads per block.
    #[inline(always)]
    pub unsafe fn run(&self, op: Op) {
        let st = unsafe { *self.state };
        if st.status != RUNNING {
            return;
        }
        let stride = thread::grid_dim_x() as usize * thread::block_dim_x() as usize;
        let mut i = thread::index_1d();
        let mut acc = [0.0f64; 4];
        while i < self.n as usize {
            let s = unsafe { self.element(op, &st, i) };
            for q in 0..4 {
                acc[q] += s[q];
            }
            i += stride;
        }
        if !matches!(op, Op::Dot | Op::Xr | Op::DiffNorm | Op::CgXr | Op::Sub) {
            return;
        }
        let sums = block_sum(acc);
        let blocks = thread::grid_dim_x();
        let last = crate::shared_array![u32; 1];
        if thread::thread_idx_x() == 0 {
            let b = thread::block_idx_x() as usize;
            for q in 0..4 {
                unsafe { *self.partials.add(q * blocks as usize + b) = sums[q] };
            }
            if self.stage != HOST_FINISHES {
                // Publish the partials, then take a ticket: the block with the last one sees them all.
                // This saves a separate finishing kernel, its launch and its gap, on every reduction.
                atomic::fence_device();
                let ticket = unsafe { atomic::inc_u32(self.done, blocks - 1, Scope::Device) };
                unsafe { *last = (ticket == blocks - 1) as u32 };
            }
        }
        if self.stage == HOST_FINISHES {
            return;
        }
        sync_threads();
        if unsafe { *last } == 0 {
            return;
        }
        atomic::fence_device();
        let mut acc = [0.0f64; 4];
        let mut b = thread::thread_idx_x() as usize;
        while b < blocks as usize {
            for q in 0..4 {
                // Volatile: written by other blocks in this kernel, never through this SM's L1.
                acc[q] += unsafe { self.partials.add(q * blocks as usize + b).read_volatile() };
            }
            b += thread::block_dim_x() as usize;
        }
        let sums = block_sum(acc);
        if thread::thread_idx_x() == 0 {
            if self.stage == TOTALS {
                for q in 0..4 {
                    unsafe { *self.sums.add(q) = sums[q] };
                }
            } else {
                let mut st = st;
                st.finish(Stage::from_u32(self.stage), sums);
                unsafe { *self.state = st };
            }
        }
    }
}

/// Arguments of the one-thread kernel that applies a stage to the state from sums already added up over
/// the ranks of a split solve ([`TOTALS`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Finish {
    /// The solver state.
    pub state: *mut BiCgState,
    /// The four sums.
    pub sums: *const f64,
    /// A [`Stage`] as `u32`.
    pub stage: u32,
}

// SAFETY: one thread reads and writes.
unsafe impl Send for Finish {}
// SAFETY: as above.
unsafe impl Sync for Finish {}

crate::kernel! {
    /// Generated: the stage [`Finish`] names, applied by one thread.
    pub unsafe fn bicg_finish(f: Finish) {
        if thread::index_1d() == 0 {
            let sums = unsafe { [0, 1, 2, 3].map(|q| *f.sums.add(q)) };
            let mut st = unsafe { *f.state };
            st.finish(Stage::from_u32(f.stage), sums);
            unsafe { *f.state = st };
        }
    }
}

/// Sums four f64 over the block (valid in thread 0): warp shuffles, then one value per warp through
/// shared memory. Every thread of the block must call it, and the block (of any shape) must be whole
/// warps.
#[inline(always)]
pub fn block_sum(v: Sums) -> Sums {
    let shared = crate::shared_array![f64; 4 * 32];
    let lane = warp::lane_id() as usize;
    let w = thread::thread_rank_in_block() as usize / 32;
    let threads = thread::block_dim_x() * thread::block_dim_y() * thread::block_dim_z();
    let warps = (threads as usize).div_ceil(32);
    let mut out = [0.0; 4];
    for q in 0..4 {
        let s = warp::sum(v[q]);
        if lane == 0 {
            unsafe { *shared.add(q * 32 + w) = s };
        }
    }
    sync_threads();
    if w == 0 {
        for q in 0..4 {
            let s = if lane < warps {
                unsafe { *shared.add(q * 32 + lane) }
            } else {
                0.0
            };
            out[q] = warp::sum(s);
        }
    }
    out
}

macro_rules! blas_entries {
    ($t:ty, $dot:ident, $s:ident, $xr:ident, $p:ident, $diff:ident, $cgxr:ident, $cgp:ident, $sub:ident, $orth:ident) => {
        crate::kernel! {
            /// Generated: `Op::Dot`.
            pub unsafe fn $dot(a: Blas<$t>) { a.run(Op::Dot) }
        }
        crate::kernel! {
            /// Generated: `Op::S`.
            pub unsafe fn $s(a: Blas<$t>) { a.run(Op::S) }
        }
        crate::kernel! {
            /// Generated: `Op::Xr`.
            pub unsafe fn $xr(a: Blas<$t>) { a.run(Op::Xr) }
        }
        crate::kernel! {
            /// Generated: `Op::P`.
            pub unsafe fn $p(a: Blas<$t>) { a.run(Op::P) }
        }
        crate::kernel! {
            /// Generated: `Op::DiffNorm`.
            pub unsafe fn $diff(a: Blas<$t>) { a.run(Op::DiffNorm) }
        }
        crate::kernel! {
            /// Generated: `Op::CgXr`.
            pub unsafe fn $cgxr(a: Blas<$t>) { a.run(Op::CgXr) }
        }
        crate::kernel! {
            /// Generated: `Op::CgP`.
            pub unsafe fn $cgp(a: Blas<$t>) { a.run(Op::CgP) }
        }
        crate::kernel! {
            /// Generated: `Op::Sub`.
            pub unsafe fn $sub(a: Blas<$t>) { a.run(Op::Sub) }
        }
        crate::kernel! {
            /// Generated: `Op::CgOrth`.
            pub unsafe fn $orth(a: Blas<$t>) { a.run(Op::CgOrth) }
        }
    };
}

blas_entries!(
    f32,
    bicg_dot_f32,
    bicg_s_f32,
    bicg_xr_f32,
    bicg_p_f32,
    bicg_diffnorm_f32,
    bicg_cgxr_f32,
    bicg_cgp_f32,
    bicg_sub_f32,
    bicg_cgorth_f32
);
blas_entries!(
    crate::wilson::Half,
    bicg_dot_half,
    bicg_s_half,
    bicg_xr_half,
    bicg_p_half,
    bicg_diffnorm_half,
    bicg_cgxr_half,
    bicg_cgp_half,
    bicg_sub_half,
    bicg_cgorth_half
);
blas_entries!(
    crate::wilson::Fixed,
    bicg_dot_fixed,
    bicg_s_fixed,
    bicg_xr_fixed,
    bicg_p_fixed,
    bicg_diffnorm_fixed,
    bicg_cgxr_fixed,
    bicg_cgp_fixed,
    bicg_sub_fixed,
    bicg_cgorth_fixed
);
blas_entries!(
    f64,
    bicg_dot_f64,
    bicg_s_f64,
    bicg_xr_f64,
    bicg_p_f64,
    bicg_diffnorm_f64,
    bicg_cgxr_f64,
    bicg_cgp_f64,
    bicg_sub_f64,
    bicg_cgorth_f64
);

/// What a precision-changing vector kernel ([`Mixed`]) does.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MixedOp {
    /// `lo = hi`, rounded to the low precision.
    ToLo = 0,
    /// `hi = lo` (exact).
    ToHi = 1,
    /// `hi += lo`: a mixed-precision solve's accumulation of its sloppy iterate.
    AddToHi = 2,
}

/// Arguments of the precision-changing vector kernels of mixed-precision solves: `n` values of a
/// low-precision vector `lo` ([`SolverStore`] `L`) and the same complex numbers of a high-precision one
/// `hi` (f32 or f64, laid out as [`SolverStore::plain_index`] says).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Mixed<H, L: SolverStore> {
    /// Values of `lo`.
    pub n: u32,
    /// The high-precision vector.
    pub hi: *mut H,
    /// The low-precision vector.
    pub lo: *mut L::Elem,
}

// SAFETY: every value is written by exactly one thread.
unsafe impl<H, L: SolverStore> Send for Mixed<H, L> {}
// SAFETY: as above.
unsafe impl<H, L: SolverStore> Sync for Mixed<H, L> {}

impl<H: ComplexReal, L: SolverStore> Mixed<H, L> {
    /// Operation `op` on value `i` of `lo`.
    ///
    /// # Safety
    /// Both vectors must hold `n` values, and `i < n`.
    #[inline(always)]
    pub unsafe fn element(&self, op: MixedOp, i: usize) {
        let hi = |k: usize| unsafe { H::load(self.hi, L::plain_index(i, k)) }.to_f64();
        let set_hi = |k: usize, z: Complex<f64>| unsafe {
            H::store(self.hi, L::plain_index(i, k), Complex::from_f64(z))
        };
        let width = <L::Value as SolverValue>::WIDTH;
        match op {
            MixedOp::ToLo => unsafe { L::store_value(self.lo, i, SolverValue::from_numbers(hi)) },
            MixedOp::ToHi => {
                let z = unsafe { L::load_value(self.lo, i) };
                for k in 0..width {
                    set_hi(k, z.number(k));
                }
            }
            MixedOp::AddToHi => {
                let z = unsafe { L::load_value(self.lo, i) };
                for k in 0..width {
                    set_hi(k, hi(k) + z.number(k));
                }
            }
        }
    }

    /// The GPU body: a grid-stride loop over the elements.
    ///
    /// # Safety
    /// As for [`element`](Self::element).
    #[inline(always)]
    pub unsafe fn run(&self, op: MixedOp) {
        let stride = thread::grid_dim_x() as usize * thread::block_dim_x() as usize;
        let mut i = thread::index_1d();
        while i < self.n as usize {
            unsafe { self.element(op, i) };
            i += stride;
        }
    }
}

macro_rules! mixed_entries {
    ($h:ty, $l:ty, $to_lo:ident, $to_hi:ident, $add:ident) => {
        crate::kernel! {
            /// Generated: `MixedOp::ToLo`.
            pub unsafe fn $to_lo(a: Mixed<$h, $l>) { a.run(MixedOp::ToLo) }
        }
        crate::kernel! {
            /// Generated: `MixedOp::ToHi`.
            pub unsafe fn $to_hi(a: Mixed<$h, $l>) { a.run(MixedOp::ToHi) }
        }
        crate::kernel! {
            /// Generated: `MixedOp::AddToHi`.
            pub unsafe fn $add(a: Mixed<$h, $l>) { a.run(MixedOp::AddToHi) }
        }
    };
}

// Entries `mixed_{to_lo,to_hi,add}_{H}_{L}`: each outer precision with each sloppy one at most as fine.
mixed_entries!(
    f64,
    f32,
    mixed_to_lo_f64_f32,
    mixed_to_hi_f64_f32,
    mixed_add_f64_f32
);
mixed_entries!(
    f64,
    f64,
    mixed_to_lo_f64_f64,
    mixed_to_hi_f64_f64,
    mixed_add_f64_f64
);
mixed_entries!(
    f64,
    crate::wilson::Half,
    mixed_to_lo_f64_half,
    mixed_to_hi_f64_half,
    mixed_add_f64_half
);
mixed_entries!(
    f64,
    crate::wilson::Fixed,
    mixed_to_lo_f64_fixed,
    mixed_to_hi_f64_fixed,
    mixed_add_f64_fixed
);
mixed_entries!(
    f32,
    f32,
    mixed_to_lo_f32_f32,
    mixed_to_hi_f32_f32,
    mixed_add_f32_f32
);

/// A device flag and a value: the argument of Doi's wait and stop kernels.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Signal {
    /// The flag, a `u32` in device memory.
    pub flag: *mut u32,
    /// The value to wait for (at least, in wrapping order) or to store.
    pub value: u32,
}

impl Signal {
    /// Wait kernel of Doi's overhead hiding: one thread spins until the flag reaches `value` (raised by a
    /// stop kernel or `cuStreamWriteValue32` from another stream), holding back the work queued behind it
    /// so the host can fill the queue first.
    ///
    /// # Safety
    /// `flag` must be a valid device address that another stream will eventually raise to `value`.
    #[inline(always)]
    pub unsafe fn wait(&self) {
        #[cfg(target_arch = "nvptx64")]
        loop {
            let v: u32;
            // SAFETY: a volatile load, so every poll sees the other stream's store.
            unsafe {
                core::arch::asm!("ld.volatile.global.u32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) self.flag, options(nostack, readonly));
            }
            if v.wrapping_sub(self.value) as i32 >= 0 {
                break;
            }
            // SAFETY: a pause hint, no memory effect.
            unsafe { core::arch::asm!("nanosleep.u32 64;", options(nostack, nomem)) };
        }
    }

    /// Stop kernel: stores `value` at the flag, releasing a waiting [`wait`](Self::wait).
    ///
    /// # Safety
    /// `flag` must be a valid device address.
    #[inline(always)]
    pub unsafe fn stop(&self) {
        #[cfg(target_arch = "nvptx64")]
        // SAFETY: a volatile store to the caller's flag.
        unsafe {
            core::arch::asm!("st.volatile.global.u32 [{p}], {v};", p = in(reg64) self.flag, v = in(reg32) self.value, options(nostack));
        }
    }
}

crate::kernel! {
    /// Doi's wait kernel: launch with one thread.
    pub unsafe fn wait_kernel(s: Signal) {
        s.wait()
    }
}

crate::kernel! {
    /// Doi's stop kernel: launch with one thread.
    pub unsafe fn stop_kernel(s: Signal) {
        s.stop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_sets_rho_and_the_stopping_residual() {
        let mut s = BiCgState::new(1e-3, 10);
        s.finish(Stage::Init, [4.0, 0.0, 4.0, 4.0]);
        assert_eq!(s.rho, Complex::new(4.0, 0.0));
        assert!((s.stop_rr - 4e-6).abs() < 1e-18);
        assert_eq!(s.status, RUNNING);
    }

    #[test]
    fn zero_denominator_is_a_breakdown_not_a_nan() {
        let mut s = BiCgState::new(1e-8, 10);
        s.finish(Stage::Init, [1.0, 0.0, 1.0, 1.0]);
        s.finish(Stage::Alpha, [0.0, 0.0, 1.0, 0.0]);
        assert_eq!(s.status, BREAKDOWN_R0V);
        // A stopped solve ignores further stages.
        s.finish(Stage::Beta, [1.0, 0.0, 1.0, 0.0]);
        assert_eq!(s.iterations, 0);
    }

    /// The vector kernels' body on 16-bit sites (two tiles of `x, p, s, t, r, r0`): `Op::Xr` against
    /// the same update in f64 from the decoded inputs, within the rounding of the stored results (11
    /// significant bits of each site's largest in binary16, 15 in fixed point), and its sums from the rounded `r` as stored.
    #[test]
    fn the_xr_update_on_16_bit_sites_matches_f64_within_the_storage_rounding() {
        use crate::solver_store::Site;
        fn case<S: crate::wilson::WilsonStore<Value = Site<f32>>>(bits: i32) {
            use crate::wilson::TILE;
            const SITES: usize = 2 * TILE;
            #[repr(C, align(16))]
            struct Vec16<E>([[E; 2]; 13 * SITES]);
            let mut vecs: [Vec16<S::Elem>; 6] =
                core::array::from_fn(|_| Vec16([[S::Elem::default(); 2]; 13 * SITES]));
            let value = |v: usize, u: usize, k: usize| {
                let a = (v * 1000 + u * 12 + k) as f64;
                Complex::new((a * 0.731).sin(), (a * 0.377).cos() * 0.5)
            };
            let mut want = [[Complex::<f64>::ZERO; 12]; SITES];
            let mut ptrs = [core::ptr::null_mut(); 6];
            for (v, (buf, p)) in vecs.iter_mut().zip(&mut ptrs).enumerate() {
                *p = buf.0.as_mut_ptr() as *mut S::Elem;
                for u in 0..SITES {
                    let z = Site(core::array::from_fn(|k| {
                        Complex::<f32>::from_f64(value(v, u, k))
                    }));
                    unsafe { S::store_value(*p, u, z) };
                }
            }
            let st = BiCgState {
                alpha: Complex::new(0.3, -0.2),
                omega: Complex::new(-0.7, 0.1),
                ..BiCgState::new(1e-10, 10)
            };
            for u in 0..SITES {
                let ld = |v: usize| unsafe { S::load_value(ptrs[v], u) };
                let (s, t) = (ld(2), ld(3));
                for k in 0..12 {
                    want[u][k] = s.0[k].to_f64() - st.omega * t.0[k].to_f64();
                }
            }
            let b = Blas::<S> {
                n: SITES as u32,
                stage: HOST_FINISHES,
                v: ptrs,
                state: core::ptr::null_mut(),
                partials: core::ptr::null_mut(),
                done: core::ptr::null_mut(),
                sums: core::ptr::null_mut(),
            };
            let mut rr = 0.0;
            for u in 0..SITES {
                rr += unsafe { b.element(Op::Xr, &st, u) }[2];
                let got = unsafe { S::load_value(ptrs[4], u) };
                let largest = want[u]
                    .iter()
                    .flat_map(|z| [z.re.abs(), z.im.abs()])
                    .fold(0.0, f64::max);
                for k in 0..12 {
                    let err = (got.0[k].to_f64() - want[u][k]).abs();
                    assert!(
                        err <= largest * 2f64.powi(-bits) + 1e-6 * largest,
                        "{}: site {u} component {k}: {err:e}",
                        S::PRECISION
                    );
                }
            }
            // The sums come from r before it is stored: within the same rounding of the stored one.
            let stored: f64 = (0..SITES)
                .map(|u| unsafe { S::load_value(ptrs[4], u) }.norm2())
                .sum();
            assert!(
                (rr - stored).abs() <= rr * 2f64.powi(2 - bits),
                "{rr} {stored}"
            );
        }
        case::<crate::wilson::Half>(11);
        case::<crate::wilson::Fixed>(15);
    }

    #[test]
    fn beta_follows_the_recurrence_and_stops_at_the_limit() {
        let mut s = BiCgState::new(1e-12, 1);
        s.finish(Stage::Init, [2.0, 0.0, 2.0, 2.0]);
        s.finish(Stage::Alpha, [1.0, -1.0, 3.0, 0.0]); // <r0, v> = 1 + i
        assert!((s.alpha - Complex::new(1.0, -1.0)).abs() < 1e-15);
        s.finish(Stage::Omega, [0.5, 0.0, 2.0, 1.0]);
        assert_eq!(s.omega, Complex::new(0.25, 0.0));
        s.finish(Stage::Beta, [0.5, 0.5, 0.5, 0.0]);
        assert_eq!((s.iterations, s.status), (1, MAX_ITER));
    }
}
