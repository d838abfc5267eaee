//! The GPU engine with a fixed launch shape, and the launch itself (shared with the auto-tuner).

use std::fmt;
use std::sync::Arc;

use cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};
use lattice_gpu_kernels::stencil::{GpuEntry, LoopRange, PointUpdate2D, PointUpdate3D};

use super::LoopEngine;
use crate::error::{CudaContext, Error, Result};
use crate::field::{DeviceField, Element, Shape};
use crate::gpu::Gpu;

/// How a loop is spread over GPU threads: a `block_x` x `block_y` block in the xy plane, each thread
/// marching `march` points along the last axis (z in 3-D, y in 2-D): the paper's Table 1 parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchShape {
    /// Threads per block along x.
    pub block_x: u32,
    /// Threads per block along y.
    pub block_y: u32,
    /// Points each thread computes along the last axis.
    pub march: u32,
}

impl LaunchShape {
    /// The paper's fixed baseline: (128, 1, 1) blocks, z-march 2.
    pub const FIXED: Self = Self {
        block_x: 128,
        block_y: 1,
        march: 2,
    };

    /// Threads per block.
    pub fn threads(&self) -> u32 {
        self.block_x * self.block_y
    }

    /// The shape as named tuning parameters.
    pub fn to_params(&self) -> Vec<(String, u32)> {
        vec![
            ("block_x".into(), self.block_x),
            ("block_y".into(), self.block_y),
            ("march".into(), self.march),
        ]
    }

    /// The shape from named tuning parameters (None if one is missing).
    pub fn from_params(params: &[(String, u32)]) -> Option<Self> {
        let get = |name: &str| params.iter().find(|(n, _)| n == name).map(|&(_, v)| v);
        Some(Self {
            block_x: get("block_x")?,
            block_y: get("block_y")?,
            march: get("march")?,
        })
    }

    /// The launch configuration covering `range`, checked against the device's thread limit.
    pub fn config(&self, range: &LoopRange, dims: Dims, max_threads: u32) -> Result<LaunchConfig> {
        if self.block_x == 0 || self.block_y == 0 || self.march == 0 || self.threads() > max_threads
        {
            return Err(Error::InvalidSize(format!(
                "launch shape {self} is not valid on this GPU (1..={max_threads} threads per block, march >= 1)"
            )));
        }
        let e = range.extent();
        let grid = match dims {
            Dims::Three => (
                e[0].div_ceil(self.block_x),
                e[1].div_ceil(self.block_y),
                e[2].div_ceil(self.march),
            ),
            Dims::Two => (
                e[0].div_ceil(self.block_x),
                e[1].div_ceil(self.march).div_ceil(self.block_y),
                1,
            ),
        };
        if grid.1 > 65535 || grid.2 > 65535 {
            return Err(Error::InvalidSize(format!(
                "range {:?} needs a grid of {grid:?} blocks with launch shape {self}; the GPU allows at most 65535 in y and z: use larger blocks or a longer march",
                e
            )));
        }
        Ok(LaunchConfig {
            grid_dim: grid,
            block_dim: (self.block_x, self.block_y, 1),
            shared_mem_bytes: 0,
        })
    }
}

impl fmt::Display for LaunchShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "({},{})/march={}",
            self.block_x, self.block_y, self.march
        )
    }
}

/// Whether a loop is 2-D (marching in y) or 3-D (marching in z).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dims {
    /// A 2-D loop.
    Two,
    /// A 3-D loop.
    Three,
}

/// Kernel parameters passed by value: the point-update struct and the range are `#[repr(C)]` with the
/// same layout on host and device, so their bytes are the kernel's parameter block.
#[repr(transparent)]
struct ByValue<T>(T);
// SAFETY: only `#[repr(C)]` point updates (plain pointers and numbers) and `LoopRange` are wrapped.
unsafe impl<T: Copy> DeviceRepr for ByValue<T> {}

/// Queues kernel `entry` for `update` over `range` with `shape` on the GPU's stream.
pub(crate) fn launch<F: Copy>(
    gpu: &Gpu,
    entry: &str,
    update: &F,
    range: &LoopRange,
    shape: LaunchShape,
    dims: Dims,
) -> Result<()> {
    let cfg = shape.config(range, dims, gpu.max_threads_per_block())?;
    let function = gpu.function(entry)?;
    let (u, r, m) = (ByValue(*update), ByValue(*range), shape.march);
    // SAFETY: the generated entry takes (update, range, march) with exactly these layouts, and the
    // loop checked the range against the update's radius and the fields' sizes.
    unsafe {
        gpu.stream()
            .launch_builder(&function)
            .arg(&u)
            .arg(&r)
            .arg(&m)
            .launch(cfg)
    }
    .cuda(|| format!("launching kernel {entry} with {shape}"))?;
    Ok(())
}

/// Runs point updates on the GPU with one fixed launch shape.
#[derive(Clone, Debug)]
pub struct DeviceLoopEngine {
    gpu: Arc<Gpu>,
    shape: LaunchShape,
}

impl DeviceLoopEngine {
    /// An engine on `gpu` launching every loop with `shape`.
    pub fn new(gpu: Arc<Gpu>, shape: LaunchShape) -> Self {
        Self { gpu, shape }
    }

    /// The GPU.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The launch shape used for every loop.
    pub fn shape(&self) -> LaunchShape {
        self.shape
    }

    /// Changes the launch shape (benchmarks and tests sweep it).
    pub fn set_shape(&mut self, shape: LaunchShape) {
        self.shape = shape;
    }
}

impl LoopEngine for DeviceLoopEngine {
    type Field<T: Element> = DeviceField<T>;
    type Site = ();

    fn describe(&self) -> String {
        format!("GPU {} (fixed launch {})", self.gpu.name(), self.shape)
    }

    fn check_fits(&self, bytes: u64, what: &str) -> Result<()> {
        self.gpu.check_fits(bytes, what)
    }

    fn alloc<T: Element>(&self, shape: Shape) -> Result<DeviceField<T>> {
        DeviceField::zeros(&self.gpu, shape)
    }

    fn run3d<F: PointUpdate3D + GpuEntry>(&self, r: &LoopRange, f: &F, _: &mut ()) -> Result<()> {
        launch(&self.gpu, F::ENTRY, f, r, self.shape, Dims::Three)
    }

    fn run2d<F: PointUpdate2D + GpuEntry>(&self, r: &LoopRange, f: &F, _: &mut ()) -> Result<()> {
        launch(&self.gpu, F::ENTRY, f, r, self.shape, Dims::Two)
    }

    fn synchronize(&self) -> Result<()> {
        self.gpu.synchronize()
    }
}
