//! The host runtime of lattice-gpu, on cudarc.
//!
//! - [`gpu`]: the GPU (context, stream, its loaded modules), timing, capacity checks; [`module`]: PTX modules,
//!   the framework's embedded one and users' ([`ptx_module!`]).
//! - [`field`]: fields with margins, in host or device memory.
//! - [`engine`]: the loop engines ([`HostLoopEngine`], [`DeviceLoopEngine`], [`DeviceAutoTuningLoopEngine`])
//!   and the persistent tune cache.
//! - [`lattice`]: [`Loop3D`] and [`Loop2D`], which run a point update over a range on an engine.
//! - [`buffer`]: typed device arrays; [`kernel`]: typed kernels (argument structs bound to their
//!   memory) launched on the GPU or run on the CPU.
//! - [`decomp`]: domain decomposition over ranks and the halo plan; [`comm`]: the communicators that run it
//!   ([`threads`]: the ranks as threads of one process); [`halo`]: a field's halo exchange through host
//!   memory or NCCL; [`wire`]: the values they move as bytes; [`overlap`]: the decomposed step with its
//!   exchange hidden behind the interior, written once for every application.
//! - [`solvers`]: the Krylov solvers, [`solvers::cg`] (preconditioned conjugate gradients on any
//!   engine's fields, host or device scalars) and [`solvers::bicgstab`] (BiCGStab on the GPU with
//!   device-resident scalars and four ways of hiding launch overhead); [`split`]: the sums and ghost
//!   layers of a solve split over GPUs.
//! - [`memory`]: a run's peak memory estimated before it allocates, and measured.
//! - [`health`]: non-finite state found and agreed on by every rank; [`interrupt`]: SIGINT, SIGTERM,
//!   SIGHUP and SIGUSR1 taken at a step boundary, temporaries removed ([`signal`]: the signals).
//!
//! The modules import each other in layers, never in a cycle (`scripts/module-cycles.py`, run by CI's
//! lint stage, checks it), each only from the layers below: [`wire`], [`signal`], [`module`],
//! [`overlap`]; [`error`]; [`decomp`], [`gpu`], [`interrupt`]; [`comm`], [`memory`]; [`health`],
//! [`threads`]; [`buffer`]; [`field`], [`kernel`]; [`engine`], NCCL; [`halo`], [`lattice`], [`split`];
//! [`solvers`].
//!
//! A point update runs on any engine; here the framework's diffusion update on the CPU engine (a GPU
//! engine is `DeviceAutoTuningLoopEngine::new(Gpu::open(0)?, TuneCache::per_user())`, the rest the
//! same):
//!
//! ```
//! use lattice_gpu_host::{Field, HostLoopEngine, LoopEngine, Loop3D, Shape};
//! use lattice_gpu_kernels::diffusion::Diffusion3d;
//!
//! # fn main() -> lattice_gpu_host::Result<()> {
//! let engine = HostLoopEngine;
//! let shape = Shape::new_3d([16, 16, 16], 1)?; // the interior and a one-point margin (held at 0)
//! let (mut f, mut g) = (engine.alloc::<f64>(shape)?, engine.alloc::<f64>(shape)?);
//! f.upload(&vec![1.0; shape.len()])?;
//! let mut step = Loop3D::new(&engine, shape.interior_range())?; // one per call site: it keeps the tuning
//! for _ in 0..10 {
//!     // kappa dt / h^2 = 0.1 per axis: stable, each new value a weighted mean of old ones.
//!     step.run(&Diffusion3d::new(f.view(), g.view_mut(), 1.0, 0.001, [0.1; 3]))?;
//!     std::mem::swap(&mut f, &mut g);
//! }
//! let u = f.download()?;
//! assert!(u.iter().all(|&v| (0.0..=1.0).contains(&v)));
//! assert!(u[shape.index(1, 1, 1)] < 0.9); // heat leaves through the cold walls
//! # Ok(())
//! # }
//! ```

pub mod buffer;
pub mod comm;
pub mod decomp;
pub mod engine;
pub mod error;
pub mod field;
pub mod gpu;
pub mod halo;
pub mod health;
pub mod interrupt;
pub mod kernel;
pub mod lattice;
pub mod memory;
pub mod module;
#[cfg(feature = "nccl")]
pub mod nccl;
pub mod overlap;
pub mod signal;
pub mod solvers;
pub mod split;
pub mod threads;
pub mod wire;

pub use buffer::{DeviceBuffer, DeviceCounter, Plain};
pub use engine::{
    AutoTuningInfo, DeviceAutoTuningLoopEngine, DeviceLoopEngine, HostLoopEngine, LaunchShape,
    LoopEngine, TuningReport,
};
pub use error::{Error, Result};
pub use field::{DeviceField, Element, Field, HostField, Shape};
pub use gpu::Gpu;
pub use lattice::{Loop2D, Loop3D};
pub use lattice_gpu_kernels::stencil::{LoopRange, PassRange, PointUpdate2D, PointUpdate3D};
pub use module::Module;
