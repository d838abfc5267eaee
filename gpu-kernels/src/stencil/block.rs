//! Programs for one thread block: a sequence of passes of point updates over small ranges with a
//! block-wide barrier after each pass, for work too small to fill the GPU, where one launch per pass
//! would cost more than the pass (the coarse levels of a multigrid cycle). The program is written once,
//! against [`Passes`]; the CPU engine runs it with [`Serial`] (pass after pass), the GPU with one block
//! whose threads share each pass ([`block_kernel!`](crate::block_kernel)).

use super::{ArrayIndex3D, LoopRange};

/// How a block program's passes run.
pub trait Passes {
    /// Calls `f` at every point of `range`, in any order and possibly in parallel (the points of one
    /// pass must be independent), and returns once every point of the pass is done and its writes are
    /// visible to the next pass.
    fn pass(&self, range: &LoopRange, f: impl FnMut(&ArrayIndex3D));
}

/// A program of passes for one thread block. Implementations must be `#[repr(C)]` (passed to the GPU
/// kernel by value) and small: the GPU runs all of it in one block.
pub trait BlockProgram: Copy + Send + Sync {
    /// Runs the program's passes through `p`.
    fn run<P: Passes>(&self, p: &P);
}

/// The passes one after another on the calling thread (the CPU engine).
#[derive(Clone, Copy, Debug, Default)]
pub struct Serial;

impl Passes for Serial {
    #[inline(always)]
    fn pass(&self, range: &LoopRange, mut f: impl FnMut(&ArrayIndex3D)) {
        let mut idx = ArrayIndex3D::new(range.n);
        for k in range.begin[2]..range.end[2] {
            for j in range.begin[1]..range.end[1] {
                for i in range.begin[0]..range.end[0] {
                    idx.set(i, j, k);
                    f(&idx);
                }
            }
        }
    }
}

/// Each pass shared by the threads of one block (x dimension only), the block's barrier after it.
#[derive(Clone, Copy, Debug, Default)]
pub struct BlockStrided;

impl Passes for BlockStrided {
    #[inline(always)]
    fn pass(&self, range: &LoopRange, mut f: impl FnMut(&ArrayIndex3D)) {
        let e = range.extent();
        let (row, plane) = (e[0], e[0] * e[1]);
        let mut idx = ArrayIndex3D::new(range.n);
        let mut c = crate::device::thread::thread_idx_x();
        let step = crate::device::thread::block_dim_x();
        while c < plane * e[2] {
            let (k, rest) = (c / plane, c % plane);
            idx.set(
                range.begin[0] + rest % row,
                range.begin[1] + rest / row,
                range.begin[2] + k,
            );
            f(&idx);
            c += step;
        }
        crate::device::thread::sync_threads();
    }
}

/// Makes the GPU kernel that runs a [`BlockProgram`] type in one block, and names it for the engines
/// ([`GpuEntry`](super::GpuEntry)): `block_kernel!(name => Type)`, or for a type generic over its
/// precision the precision-generic form of [`kernel3d!`](crate::kernel3d):
/// `block_kernel!(for<T> CoarseCycle<T> { f32 => poisson_coarse_cycle_f32, f64 => poisson_coarse_cycle_f64 });`
#[macro_export]
macro_rules! block_kernel {
    (@kernels $name:ident => $ty:ty) => {
        $crate::kernel! {
            /// Generated kernel entry: the block program, run by the one block of the launch.
            pub unsafe fn $name(program: $ty) {
                $crate::stencil::BlockProgram::run(&program, &$crate::stencil::BlockStrided)
            }
        }
    };
    (for<$p:ident> $ty:ty { $($real:ty => $name:ident),+ $(,)? }) => {
        $(
            const _: () = {
                type $p = $real;
                $crate::block_kernel!(@kernels $name => $ty);
                impl $crate::stencil::EntryOf<$ty> for $real {
                    $crate::kernel3d!(@names $name);
                }
            };
        )+
        $crate::kernel3d!(@generic $p, $ty);
    };
    ($name:ident => $ty:ty) => {
        $crate::block_kernel!(@kernels $name => $ty);
        impl $crate::stencil::GpuEntry for $ty {
            $crate::kernel3d!(@names $name);
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs one pass of `p` over a range inside a 5 x 4 x 3 array and checks every point of it, and only
    /// those, was visited once.
    fn visits_the_range_once(p: &impl Passes) {
        let r = LoopRange {
            n: [5, 4, 3],
            begin: [1, 1, 1],
            end: [4, 3, 3],
        };
        let mut seen = [0u32; 60];
        p.pass(&r, |idx| seen[idx.ix()] += 1);
        let inside = |i: usize| {
            let (x, y, z) = (i % 5, (i / 5) % 4, i / 20);
            (1..4).contains(&x) && (1..3).contains(&y) && (1..3).contains(&z)
        };
        for (i, &s) in seen.iter().enumerate() {
            assert_eq!(s, inside(i) as u32, "array index {i}");
        }
    }

    #[test]
    fn passes_visit_every_point_of_the_range_once() {
        visits_the_range_once(&Serial);
        // On the host a block is one thread: the strided pass must cover the range alone.
        visits_the_range_once(&BlockStrided);
    }
}
