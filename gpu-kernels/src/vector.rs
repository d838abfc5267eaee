//! Vector operations on whole fields, the same on every engine: setting and converting fields, and
//! the updates of conjugate gradients (host `cg`), with their scalars passed by the host or read from
//! an array on the engine so that the host need not wait for any dot product.

use crate::device::math::Real;
use crate::stencil::{ArrayIndex3D, FieldMut, FieldRef, PointUpdate3D, SumUpdate3D};

/// Sets a field's points to `value`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Fill<T> {
    /// The field.
    pub x: FieldMut<T>,
    /// The value.
    pub value: T,
}

impl<T: Real> PointUpdate3D for Fill<T> {
    type Real = T;
    const RADIUS: [u32; 3] = [0, 0, 0];

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        self.x.set(idx.ix(), self.value);
    }
}

/// Conjugate gradients' update of the residual, `r -= alpha q` (`q = A p`), summing the new `r.r` in
/// the same loop. The iterate's `x += alpha p` waits for the pass that writes the next direction and
/// reads `p` anyway ([`CgDirection`]; [`CgFinish`] after the last step): 8 bytes a point fewer.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CgStep {
    /// The residual.
    pub r: FieldMut<f64>,
    /// `A p`.
    pub q: FieldRef<f64>,
    /// The step length, as the host computed it; or, from [`CgScalars`] on the engine,
    /// `r.z / p.q` (and no update once the solve has converged or `p.q` is not positive).
    pub alpha: f64,
    /// Where the scalars are when the host does not pass them.
    pub scalars: CgScalars,
}

impl PointUpdate3D for CgStep {
    type Real = f64;
    const RADIUS: [u32; 3] = [0, 0, 0];

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        self.update_term(idx);
    }
}

impl SumUpdate3D for CgStep {
    /// `r` and `q`.
    type Loads = (f64, f64);

    #[inline(always)]
    fn load(&self, idx: &ArrayIndex3D) -> (f64, f64) {
        let i = idx.ix();
        (self.r.as_ref().get(i), self.q.get(i))
    }

    /// `r.r` after the update (of the unchanged `r` where the scalars stop it, so the sum stays true).
    #[inline(always)]
    fn store_term(&self, idx: &ArrayIndex3D, (r, q): (f64, f64)) -> f64 {
        let Some(alpha) = self.scalars.factor(self.alpha, true) else {
            return r * r;
        };
        let r = r - alpha * q;
        self.r.set(idx.ix(), r);
        r * r
    }
}

/// A step's update of the iterate, `x += alpha p`, with the step's length and scalars (so that it
/// stops where [`CgStep`] does); part of [`CgDirection`] and [`CgFinish`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CgIterate {
    /// The iterate.
    pub x: FieldMut<f64>,
    /// The step length (as [`CgStep::alpha`]).
    pub alpha: f64,
    /// The step's scalars (as [`CgStep::scalars`]).
    pub scalars: CgScalars,
}

impl CgIterate {
    /// `x[i] = x_i + alpha p_i`, unless the scalars stop the step.
    #[inline(always)]
    fn add(&self, i: usize, x: f64, p: f64) {
        if let Some(alpha) = self.scalars.factor(self.alpha, true) {
            self.x.set(i, x + alpha * p);
        }
    }
}

/// CG's scalars in an f64 array on the engine (asynchronous CG: the dot products land there, see
/// `LoopEngine::dot_into`, and the vector updates read them, so the host need not wait for any), or
/// none ([`CgScalars::HOST`]: the host passes each factor).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CgScalars {
    /// The array (null: none).
    pub values: FieldRef<f64>,
    /// The factor is `values[num] / values[den]`.
    pub num: u32,
    /// See `num`.
    pub den: u32,
    /// `|r|^2` of the previous iteration: the solve has converged once it is below `stop`.
    pub rr: u32,
    /// `tol^2 |b|^2`.
    pub stop: f64,
}

impl CgScalars {
    /// The host passes the factors.
    // SAFETY: a null array is never read (`factor` checks).
    pub const HOST: Self = Self {
        values: unsafe { FieldRef::from_raw(core::ptr::null()) },
        num: 0,
        den: 0,
        rr: 0,
        stop: 0.0,
    };

    /// `given` when the host passes the factors, else `values[num] / values[den]`; `None` (with
    /// `guard`) once the solve has converged or when the denominator is not positive (a breakdown the
    /// host reports when it reads the array).
    #[inline(always)]
    pub fn factor(&self, given: f64, guard: bool) -> Option<f64> {
        if self.values.as_ptr().is_null() {
            return Some(given);
        }
        let v = |k: u32| self.values.get(k as usize);
        let den = v(self.den);
        if guard && (v(self.rr) < self.stop || den.is_nan() || den <= 0.0) {
            return None;
        }
        Some(v(self.num) / den)
    }
}

/// The last step's iterate update and the next search direction in one pass: `x += alpha p`, then
/// `p = z + beta p`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CgDirection {
    /// The iterate and the last step's length.
    pub step: CgIterate,
    /// The search direction, updated in place.
    pub p: FieldMut<f64>,
    /// The preconditioned residual.
    pub z: FieldRef<f64>,
    /// The conjugation factor, as the host computed it; or, from [`CgScalars`] on the engine, the new
    /// `r.z` over the previous one.
    pub beta: f64,
    /// Where the scalars are when the host does not pass them.
    pub scalars: CgScalars,
}

impl PointUpdate3D for CgDirection {
    type Real = f64;
    const RADIUS: [u32; 3] = [0, 0, 0];

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        let i = idx.ix();
        // Every load before the first store (as in `CgStep`).
        let (x, p, z) = (
            self.step.x.as_ref().get(i),
            self.p.as_ref().get(i),
            self.z.get(i),
        );
        self.step.add(i, x, p);
        if let Some(beta) = self.scalars.factor(self.beta, false) {
            self.p.set(i, z + beta * p);
        }
    }
}

/// The iterate update of a solve's last step, which no direction follows: `x += alpha p`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CgFinish {
    /// The iterate and the step's length.
    pub step: CgIterate,
    /// The search direction.
    pub p: FieldRef<f64>,
}

impl PointUpdate3D for CgFinish {
    type Real = f64;
    const RADIUS: [u32; 3] = [0, 0, 0];

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        let i = idx.ix();
        let (x, p) = (self.step.x.as_ref().get(i), self.p.get(i));
        self.step.add(i, x, p);
    }
}

/// `to = from` in the other precision (the mixed-precision preconditioner's way in and out).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Convert<A, B> {
    /// Source.
    pub from: FieldRef<A>,
    /// Destination.
    pub to: FieldMut<B>,
}

impl<A: Real, B: Real> PointUpdate3D for Convert<A, B> {
    type Real = B;
    const RADIUS: [u32; 3] = [0, 0, 0];

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        let i = idx.ix();
        self.to.set(i, B::from_f64(self.from.get(i).to_f64()));
    }
}

/// `to = from` in f64, summing `to.with` in the same loop: a preconditioner's result into CG's
/// precision with CG's `r.z`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ConvertDot<A> {
    /// Source.
    pub from: FieldRef<A>,
    /// Destination.
    pub to: FieldMut<f64>,
    /// The other factor of each term.
    pub with: FieldRef<f64>,
}

impl<A: Real> PointUpdate3D for ConvertDot<A> {
    type Real = f64;
    const RADIUS: [u32; 3] = [0, 0, 0];

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        self.update_term(idx);
    }
}

impl<A: Real> SumUpdate3D for ConvertDot<A> {
    /// The value (in f64) and its factor.
    type Loads = (f64, f64);

    #[inline(always)]
    fn load(&self, idx: &ArrayIndex3D) -> (f64, f64) {
        let i = idx.ix();
        (self.from.get(i).to_f64(), self.with.get(i))
    }

    #[inline(always)]
    fn store_term(&self, idx: &ArrayIndex3D, (v, with): (f64, f64)) -> f64 {
        self.to.set(idx.ix(), v);
        v * with
    }
}

crate::kernel3d_sum!(cg_step_f64 => CgStep);
crate::kernel3d_sum!(for<T> ConvertDot<T> { f32 => convert_dot_f32, f64 => convert_dot_f64 });
crate::kernel3d!(cg_direction_f64 => CgDirection);
crate::kernel3d!(cg_finish_f64 => CgFinish);
crate::kernel3d!(for<T> Convert<f64, T> { f32 => convert_f64_f32, f64 => convert_f64_f64 });
crate::kernel3d!(for<T> Fill<T> { f32 => fill_f32, f64 => fill_f64 });
