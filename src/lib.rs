//! lattice-gpu: write the update of one grid point once, in plain `no_std` Rust, and run it over a whole
//! lattice on the CPU or an NVIDIA GPU, with launch configurations tuned automatically.
//!
//! This facade re-exports the device crate ([`kernels`]), the host runtime ([`host`]), the file formats
//! ([`formats`]: `.npy`, checkpoints, VTK, PNG, atomic writes, output directories), the applications'
//! crates, each with its binary, benchmark and tests (the diffusion equation [`diffusion`], lattice QCD
//! [`lqcd`], lattice Boltzmann [`lbm`], advection [`advection`] and the Poisson solver [`poisson`]), and
//! their command-line kit (`cli`, the default feature of that name). The framework's PTX is embedded by the host crate
//! ([`host::Module::framework`]); a crate with kernels of its own builds them with lattice-gpu-builder
//! (README: "Use lattice-gpu in your own crate").

//!
//! A point update runs on the GPU, auto-tuned, as it runs on the CPU (`HostLoopEngine`):
//!
//! ```no_run
//! use lattice_gpu::host::engine::tunecache::TuneCache;
//! use lattice_gpu::host::{DeviceAutoTuningLoopEngine, Field, Gpu, LoopEngine, Loop3D, Shape};
//! use lattice_gpu::kernels::diffusion::Diffusion3d;
//!
//! fn main() -> lattice_gpu::host::Result<()> {
//!     let gpu = Gpu::open(0)?; // the framework's kernels are loaded; a crate's own with `gpu.load`
//!     let engine = DeviceAutoTuningLoopEngine::new(gpu, TuneCache::per_user());
//!     let shape = Shape::new_3d([256, 256, 256], 1)?;
//!     let (mut f, mut g) = (engine.alloc::<f32>(shape)?, engine.alloc::<f32>(shape)?);
//!     f.upload(&vec![1.0; shape.len()])?;
//!     let mut step = Loop3D::new(&engine, shape.interior_range())?;
//!     for _ in 0..1000 {
//!         step.run(&Diffusion3d::new(f.view(), g.view_mut(), 1.0, 1e-6, [1.0 / 256.0; 3]))?;
//!         std::mem::swap(&mut f, &mut g);
//!     }
//!     engine.synchronize()?;
//!     Ok(())
//! }
//! ```

pub use lattice_gpu_advection as advection;
/// The applications' command-line kit (the `cli` feature, on by default).
#[cfg(feature = "cli")]
pub use lattice_gpu_cli as cli;
pub use lattice_gpu_diffusion as diffusion;
pub use lattice_gpu_formats as formats;
pub use lattice_gpu_host as host;
pub use lattice_gpu_kernels as kernels;
pub use lattice_gpu_lbm as lbm;
pub use lattice_gpu_lqcd as lqcd;
pub use lattice_gpu_poisson as poisson;
