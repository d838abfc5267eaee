//! The device half of the stencil framework (Shimokawabe et al.): a point index with compile-time
//! neighbour offsets, the loop range, the point-update traits the user implements, the loops that run a
//! point update over a range on the GPU, and the macros that make a kernel entry for a point-update type.
//!
//! A point update is a `#[repr(C)]` struct holding everything one grid point needs (field pointers,
//! coefficients): the functor of the paper together with its parameters. The host builds it, an engine
//! runs `update` for every point of a range, on the CPU or as a generated GPU kernel.

mod field;
mod index;
mod loops;

pub use field::{FieldMut, FieldRef};
pub use index::{ArrayIndex2D, ArrayIndex3D};
pub use loops::{device_loop2d, device_loop3d, LoopRange};

use crate::device::math::Real;

/// The update of one point of a 3-D grid. Implementations must be `#[repr(C)]` (the struct is passed to
/// the GPU kernel by value) and must not use block barriers (threads outside the range return early).
pub trait PointUpdate3D: Copy + Send + Sync {
    /// The working precision; names the precision in tune-cache keys and bandwidth figures.
    type Real: Real;
    /// The largest neighbour offset `update` reads along each axis (x, y, z). The loop checks that the
    /// range leaves at least this much margin, so `update` may index without bounds checks.
    const RADIUS: [u32; 3] = [1, 1, 1];
    /// Computes the point `idx`.
    fn update(&self, idx: &ArrayIndex3D);
}

/// The update of one point of a 2-D grid; as [`PointUpdate3D`].
pub trait PointUpdate2D: Copy + Send + Sync {
    /// The working precision.
    type Real: Real;
    /// The largest neighbour offset `update` reads along each axis (x, y).
    const RADIUS: [u32; 2] = [1, 1];
    /// Computes the point `idx`.
    fn update(&self, idx: &ArrayIndex2D);
}

/// A point-update type that has a GPU kernel entry in the embedded PTX, made by [`kernel3d!`](crate::kernel3d)
/// or [`kernel2d!`](crate::kernel2d).
pub trait GpuEntry {
    /// The PTX `.entry` name of the kernel running this update.
    const ENTRY: &'static str;
}

/// Makes the GPU kernel that runs a [`PointUpdate3D`] type over a range: a 2-D grid of 2-D blocks in the xy
/// plane, each thread marching in z (the paper's Fig. 1). `kernel3d!(diffusion3d_f32 => Diffusion3d<f32>);`
/// The entry takes `(update: T, range: LoopRange, march: u32)`.
#[macro_export]
macro_rules! kernel3d {
    ($name:ident => $ty:ty) => {
        $crate::kernel! {
            /// Generated kernel entry: runs the point update over the range, marching in z.
            pub unsafe fn $name(update: $ty, range: $crate::stencil::LoopRange, march: u32) {
                $crate::stencil::device_loop3d(&update, &range, march)
            }
        }
        impl $crate::stencil::GpuEntry for $ty {
            const ENTRY: &'static str = stringify!($name);
        }
    };
}

/// Makes the GPU kernel that runs a [`PointUpdate2D`] type over a range: 2-D blocks, each thread marching
/// over consecutive rows in y. As [`kernel3d!`](crate::kernel3d).
#[macro_export]
macro_rules! kernel2d {
    ($name:ident => $ty:ty) => {
        $crate::kernel! {
            /// Generated kernel entry: runs the point update over the range, marching in y.
            pub unsafe fn $name(update: $ty, range: $crate::stencil::LoopRange, march: u32) {
                $crate::stencil::device_loop2d(&update, &range, march)
            }
        }
        impl $crate::stencil::GpuEntry for $ty {
            const ENTRY: &'static str = stringify!($name);
        }
    };
}
