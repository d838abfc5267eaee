//! A cuda_std-like device layer. Every function has a host meaning too, so code written against it also
//! runs in the CPU engine: the host behaves as a grid of one block of one thread (one lane per warp).

pub mod atomic;
pub mod grid;
pub mod math;
pub mod shared;
pub mod thread;
pub mod warp;

/// Marks a function as a GPU kernel entry, the role of rust-cuda's `#[kernel]`: on the nvptx target it
/// becomes an unmangled `extern "ptx-kernel"` function; on the host it is not compiled (kernels are
/// launched only on the GPU; the CPU engine calls the bodies they wrap). Users reach it through
/// [`kernel3d!`](crate::kernel3d), [`kernel2d!`](crate::kernel2d) and [`block_kernel!`](crate::block_kernel),
/// which write the entry and its `unsafe` for them.
///
/// An entry is emitted only in the kernel crate being built into a module (lattice-gpu-builder sets
/// `--cfg lattice_gpu_module` for that crate alone): a user's module does not carry the entries of the
/// framework it depends on. The cfg is cargo-unknown in the crate that expands the macro, hence the
/// `allow` around it. `allow_internal_unstable` lets that crate use the PTX ABI without asking for the
/// feature itself.
///
/// ```text
/// kernel! {
///     /// Scales `x` in place.
///     pub unsafe fn scale(x: *mut f32, a: f32, n: u32) {
///         let i = thread::index_1d();
///         if i < n as usize { *x.add(i) *= a; }
///     }
/// }
/// ```
///
/// `kernel! { export_name = "name"; ... }` exports the entry as `name` instead: entries named alike in
/// one Rust scope, or named by `concat!`. An exported name ending in `__maxnreg` and a number, e.g.
/// `step__maxnreg32`, gets that register cap (PTX `.maxnreg`, which lattice-gpu-builder adds).
#[macro_export]
#[cfg_attr(target_arch = "nvptx64", allow_internal_unstable(abi_ptx))]
macro_rules! kernel {
    (export_name = $export:expr; $(#[$meta:meta])* pub unsafe fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        #[allow(unexpected_cfgs)]
        const _: () = {
            $(#[$meta])*
            #[cfg(all(target_arch = "nvptx64", lattice_gpu_module))]
            #[export_name = $export]
            pub unsafe extern "ptx-kernel" fn $name($($arg: $ty),*) $body
        };
    };
    ($(#[$meta:meta])* pub unsafe fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        #[allow(unexpected_cfgs)]
        const _: () = {
            $(#[$meta])*
            #[cfg(all(target_arch = "nvptx64", lattice_gpu_module))]
            #[no_mangle]
            pub unsafe extern "ptx-kernel" fn $name($($arg: $ty),*) $body
        };
    };
}
