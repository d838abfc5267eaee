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
/// launched only on the GPU; the CPU engine calls the bodies they wrap).
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
#[macro_export]
macro_rules! kernel {
    ($(#[$meta:meta])* pub unsafe fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        #[cfg(target_arch = "nvptx64")]
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name($($arg: $ty),*) $body
    };
}
