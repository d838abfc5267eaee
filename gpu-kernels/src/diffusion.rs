//! The 3-D diffusion point update: `df/dt = kappa lap f`, explicit Euler in time, 7-point Laplacian.

use crate::device::math::Real;
use crate::stencil::{
    ArrayIndex3D, EntryOf, FieldMut, FieldRef, PointUpdate3D, Source3D, StencilUpdate3D,
};

/// One explicit step of the heat equation at one point (the paper's `Diffusion3d` functor):
/// `fnew = cc f + cx (f(x+1) + f(x-1)) + cy (f(y+1) + f(y-1)) + cz (f(z+1) + f(z-1))`, each axis's
/// pair summed first, then added by fused multiply-adds: 10 floating-point operations per point (3
/// adds, a multiply and 3 FMAs), where the paper's form takes 13 instructions (7 multiplies, 6 adds).
/// The FMAs are written out (`mul_add`: `fma.rn` on the GPU, the FMA instruction or libm's `fma` on
/// the CPU, each rounding once), as Rust contracts nothing itself, so every engine rounds
/// identically. The temporally blocked passes, bound by their instructions, gained from the six
/// fewer: on an H200 the f32 pass of three steps went from 1.44x to 1.51x the single step at 512^3,
/// f64 from 1.46x to 1.63x (docs/benchmarks/history.md). Written once, as a [`StencilUpdate3D`], so
/// every kernel runs the same arithmetic in the same order on values staged in registers and shared
/// memory.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Diffusion3d<T> {
    /// The field at the current step.
    pub f: FieldRef<T>,
    /// The field at the next step.
    pub fnew: FieldMut<T>,
    /// Centre coefficient, `1 - 2 (ce + cn + ct)`.
    pub cc: T,
    /// East/west (x) coefficient, `kappa dt / dx^2`.
    pub cx: T,
    /// North/south (y) coefficient, `kappa dt / dy^2`.
    pub cy: T,
    /// Top/bottom (z) coefficient, `kappa dt / dz^2`.
    pub cz: T,
}

/// Floating-point operations per updated point, as counted for GFLOPS.
pub const FLOPS_PER_POINT: u64 = 10;

impl<T: Real> Diffusion3d<T> {
    /// The update for diffusivity `kappa`, time step `dt` and grid spacings `h = (dx, dy, dz)`.
    pub fn new(f: FieldRef<T>, fnew: FieldMut<T>, kappa: f64, dt: f64, h: [f64; 3]) -> Self {
        let [cx, cy, cz] = h.map(|d| kappa * dt / (d * d));
        Self {
            f,
            fnew,
            cc: T::from_f64(1.0 - 2.0 * (cx + cy + cz)),
            cx: T::from_f64(cx),
            cy: T::from_f64(cy),
            cz: T::from_f64(cz),
        }
    }
}

impl<T: Real> PointUpdate3D for Diffusion3d<T> {
    type Real = T;
    const FLOPS: u32 = FLOPS_PER_POINT as u32;
    /// The point read once and written once.
    const BYTES: u32 = 2 * core::mem::size_of::<T>() as u32;

    #[inline(always)]
    fn update(&self, idx: &ArrayIndex3D) {
        self.update_with(idx, &self.f)
    }
}

impl<T: Real> StencilUpdate3D for Diffusion3d<T> {
    #[inline(always)]
    fn input(&self) -> FieldRef<T> {
        self.f
    }

    #[inline(always)]
    fn output(&self) -> FieldMut<T> {
        self.fnew
    }

    #[inline(always)]
    fn value_with<S: Source3D<T>>(&self, idx: &ArrayIndex3D, f: &S) -> T {
        let x = f.at::<1, 0, 0>(idx) + f.at::<-1, 0, 0>(idx);
        let y = f.at::<0, 1, 0>(idx) + f.at::<0, -1, 0>(idx);
        let z = f.at::<0, 0, 1>(idx) + f.at::<0, 0, -1>(idx);
        self.cz.mul_add(
            z,
            self.cy
                .mul_add(y, self.cx.mul_add(x, self.cc * f.at::<0, 0, 0>(idx))),
        )
    }
}

crate::kernel3d!(for<T> Diffusion3d<T> {
    f32 => diffusion3d_f32 {
        zqueue = diffusion3d_zqueue_f32, tiled = diffusion3d_tiled_f32, vector = diffusion3d_vector_f32,
        temporal = diffusion3d_temporal_f32,
        columns = [diffusion3d_columns1_f32, diffusion3d_columns2_f32, diffusion3d_columns3_f32, diffusion3d_columns4_f32]
    },
    f64 => diffusion3d_f64 {
        zqueue = diffusion3d_zqueue_f64, tiled = diffusion3d_tiled_f64, vector = diffusion3d_vector_f64,
        temporal = diffusion3d_temporal_f64,
        columns = [diffusion3d_columns1_f64, diffusion3d_columns2_f64, diffusion3d_columns3_f64, diffusion3d_columns4_f64]
    },
});

/// A precision of the diffusion kernels: the one bound generic code over precisions needs for
/// `Diffusion3d<T>: GpuEntry`.
pub trait DiffusionReal: Real + EntryOf<Diffusion3d<Self>> {}
impl DiffusionReal for f32 {}
impl DiffusionReal for f64 {}
