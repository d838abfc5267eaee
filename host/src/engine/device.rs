//! The GPU engine with a fixed launch shape, and the launch itself (shared with the auto-tuner).

use std::fmt;
use std::sync::{Arc, Mutex};

use cudarc::driver::{sys, CudaGraph, LaunchConfig, PushKernelArg};
use lattice_gpu_kernels::stencil::{
    temporal_shared_bytes, tile_shared_bytes, BlockProgram, GpuEntry, LoopRange, PassRange,
    PointUpdate2D, PointUpdate3D, StencilUpdate3D, SumInto, SumUpdate3D, Variant,
    MAX_TEMPORAL_STEPS,
};

use super::LoopEngine;
use crate::buffer::{ByValue, DeviceBuffer, DOT_BLOCK};
use crate::error::{CudaContext, Error, Result};
use crate::field::{DeviceField, Element, Field, Shape};
pub use crate::gpu::MAX_DYNAMIC_SHARED_BYTES;
use crate::gpu::{allow_shared, Gpu};

/// How a loop is spread over GPU threads: a `block_x` x `block_y` block in the xy plane, each thread
/// marching `march` points along the last axis (z in 3-D, y in 2-D): the paper's Table 1 parameters; and
/// which kernel [`Variant`] reads the stencil input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchShape {
    /// Threads per block along x.
    pub block_x: u32,
    /// Threads per block along y.
    pub block_y: u32,
    /// Points each thread computes along the last axis.
    pub march: u32,
    /// The kernel variant (plain for every kernel; z-queue and tiled for updates that have them).
    pub variant: Variant,
}

impl LaunchShape {
    /// The paper's fixed baseline: (128, 1, 1) blocks, z-march 2, plain loads.
    pub const FIXED: Self = Self {
        block_x: 128,
        block_y: 1,
        march: 2,
        variant: Variant::Plain,
    };

    /// Threads per block.
    pub fn threads(&self) -> u32 {
        self.block_x * self.block_y
    }

    /// The same shape with another variant.
    pub fn with_variant(self, variant: Variant) -> Self {
        Self { variant, ..self }
    }

    /// The shape as named tuning parameters (`variant` as its `u32` value).
    pub fn to_params(&self) -> Vec<(String, u32)> {
        vec![
            ("block_x".into(), self.block_x),
            ("block_y".into(), self.block_y),
            ("march".into(), self.march),
            ("variant".into(), self.variant as u32),
        ]
    }

    /// The shape from named tuning parameters (None if a block or march parameter is missing or the
    /// variant is unknown); without a `variant` parameter, the plain variant.
    pub fn from_params(params: &[(String, u32)]) -> Option<Self> {
        let get = |name: &str| params.iter().find(|(n, _)| n == name).map(|&(_, v)| v);
        Some(Self {
            block_x: get("block_x")?,
            block_y: get("block_y")?,
            march: get("march")?,
            variant: match get("variant") {
                Some(v) => Variant::from_u32(v)?,
                None => Variant::Plain,
            },
        })
    }

    /// The launch configuration covering `range` for `kernel`, checked against the device's thread
    /// limit, the kernel's variants and the shared memory a tiled launch needs.
    pub fn config(
        &self,
        range: &LoopRange,
        kernel: &KernelInfo,
        max_threads: u32,
    ) -> Result<LaunchConfig> {
        if !kernel.allows(self) {
            return Err(Error::InvalidSize(format!(
                "launch shape {self} is not valid for kernel {}: a summing loop reduces over whole \
                 warps, so its blocks must have a multiple of 32 threads; use a block such as (32,1)",
                kernel.name()
            )));
        }
        if self.block_x == 0 || self.block_y == 0 || self.march == 0 || self.threads() > max_threads
        {
            return Err(Error::InvalidSize(format!(
                "launch shape {self} is not valid for kernel {}: it takes 1 to {max_threads} threads per block \
                 on this GPU (a kernel that needs many registers takes fewer than the GPU's limit) and a march \
                 of at least 1; use a smaller block",
                kernel.name()
            )));
        }
        if kernel.entry(self.variant).is_none() {
            return Err(Error::InvalidSetting(format!(
                "kernel {} has no {} variant (variants: {}); use --variant plain, or give a 3-D stencil update its variants with kernel3d!(name => Type; zqueue = ..., tiled = ...)",
                kernel.name(),
                self.variant.name(),
                kernel
                    .variants()
                    .iter()
                    .map(|v| v.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let shared = kernel.shared_bytes(self);
        if shared > MAX_DYNAMIC_SHARED_BYTES {
            return Err(Error::InvalidSize(format!(
                "launch shape {self} of kernel {} needs {shared} bytes of shared memory for its tile; at most {MAX_DYNAMIC_SHARED_BYTES} are available: use smaller blocks",
                kernel.name()
            )));
        }
        let e = range.extent();
        let grid = match kernel.dims {
            Dims::Three => (
                e[0].div_ceil(self.variant.points_per_thread(kernel.elem_bytes))
                    .div_ceil(self.block_x),
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
            shared_mem_bytes: shared as u32,
        })
    }
}

/// `(32,4)/march=4`, with `/zqueue`, `/tiled` or `/vector` after it for those variants.
impl fmt::Display for LaunchShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "({},{})/march={}",
            self.block_x, self.block_y, self.march
        )?;
        if self.variant != Variant::Plain {
            write!(f, "/{}", self.variant.name())?;
        }
        Ok(())
    }
}

/// What the engines need to know about the kernels of a point-update type: the entry of each variant,
/// the radius and element size (which size a tiled launch's shared memory), and whether it is 2-D or 3-D.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// The module holding the entries ([`GpuEntry::MODULE`]).
    pub module: &'static str,
    /// The entry of each variant, indexed by `Variant as usize`; `None` where none was generated.
    pub entries: [Option<&'static str>; 4],
    /// `RADIUS` of the update (z = 0 in 2-D).
    pub radius: [u32; 3],
    /// Bytes per element of the update's precision.
    pub elem_bytes: usize,
    /// 2-D or 3-D loop.
    pub dims: Dims,
    /// Whether the kernel sums its update's terms ([`GpuEntry::SUMS`]).
    pub sums: bool,
    /// One point's floating-point operations, as the update states them ([`PointUpdate3D::FLOPS`]).
    pub point_flops: u32,
    /// One point's least device-memory bytes, as the update states them ([`PointUpdate3D::BYTES`]).
    pub point_bytes: u32,
}

impl KernelInfo {
    /// The kernels of a 3-D point update.
    pub fn of3d<F: PointUpdate3D + GpuEntry>() -> Self {
        Self {
            module: F::MODULE,
            entries: Variant::ALL.map(F::entry),
            radius: F::RADIUS,
            elem_bytes: std::mem::size_of::<F::Real>(),
            dims: Dims::Three,
            sums: F::SUMS,
            point_flops: F::FLOPS,
            point_bytes: F::BYTES,
        }
    }

    /// The kernel of a 2-D point update (2-D loops have the plain variant only).
    pub fn of2d<F: PointUpdate2D + GpuEntry>() -> Self {
        Self {
            module: F::MODULE,
            entries: [Some(F::ENTRY), None, None, None],
            radius: [F::RADIUS[0], F::RADIUS[1], 0],
            elem_bytes: std::mem::size_of::<F::Real>(),
            dims: Dims::Two,
            sums: F::SUMS,
            point_flops: F::FLOPS,
            point_bytes: F::BYTES,
        }
    }

    /// The plain entry, which names the kernel in messages and tune-cache keys.
    pub fn name(&self) -> &'static str {
        self.entries[0].unwrap_or("?")
    }

    /// The entry running `variant`, if there is one.
    pub fn entry(&self, variant: Variant) -> Option<&'static str> {
        self.entries[variant as usize]
    }

    /// Whether `shape` suits the kernel beyond the GPU's limits: a summing kernel's blocks must be whole
    /// warps (its block reduction shuffles over full warps).
    pub fn allows(&self, shape: &LaunchShape) -> bool {
        !self.sums || shape.threads().is_multiple_of(32)
    }

    /// The variants this kernel has.
    pub fn variants(&self) -> Vec<Variant> {
        Variant::ALL
            .into_iter()
            .filter(|&v| self.entry(v).is_some())
            .collect()
    }

    /// Dynamic shared memory a launch with `shape` needs: the double-buffered tile of the tiled
    /// variant, nothing for the others.
    pub fn shared_bytes(&self, shape: &LaunchShape) -> usize {
        match shape.variant {
            Variant::Tiled => {
                tile_shared_bytes([shape.block_x, shape.block_y], self.radius, self.elem_bytes)
            }
            Variant::Plain | Variant::ZQueue | Variant::Vector => 0,
        }
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

/// The most threads a block of `kernel`'s `variant` may have on `gpu` (the GPU's limit for a variant the
/// kernel lacks, which [`LaunchShape::config`] then refuses by name).
pub(crate) fn block_limit(gpu: &Gpu, kernel: &KernelInfo, variant: Variant) -> Result<u32> {
    match kernel.entry(variant) {
        Some(entry) => Ok(gpu.lookup_in(kernel.module, entry)?.1),
        None => Ok(gpu.max_threads_per_block()),
    }
}

/// Where a summing loop's total goes: one f64 on the GPU, through the engine's partial sums.
#[derive(Clone, Copy)]
pub(crate) struct SumTarget<'a> {
    pub(crate) scratch: &'a DotScratch,
    pub(crate) out: *mut f64,
}

impl<'a> SumTarget<'a> {
    /// Value `slot` of `out` (checked), through `scratch`.
    pub(crate) fn new(
        scratch: &'a DotScratch,
        out: &mut DeviceField<f64>,
        slot: usize,
    ) -> Result<Self> {
        if slot >= out.shape().len() {
            return Err(Error::InvalidSize(format!(
                "a sum into value {slot} of a field of {}",
                out.shape().len()
            )));
        }
        // SAFETY: slot < len (checked above).
        let out = unsafe { out.view_mut().as_ptr().add(slot) };
        Ok(Self { scratch, out })
    }
}

/// Queues the entry of `shape`'s variant of `kernel` for `update` over `range` on the GPU's stream (or
/// the one [`Gpu::beside`] gave); a summing kernel's total into `sum` (which it must have, and no
/// other kernel may).
pub(crate) fn launch<F: Copy>(
    gpu: &Arc<Gpu>,
    kernel: &KernelInfo,
    update: &F,
    range: &LoopRange,
    shape: LaunchShape,
    sum: Option<SumTarget>,
) -> Result<()> {
    if kernel.sums != sum.is_some() {
        return Err(Error::InvalidSetting(format!(
            "kernel {} {} its terms: run it with {}",
            kernel.name(),
            if kernel.sums { "sums" } else { "does not sum" },
            if kernel.sums { "run_sum" } else { "run" }
        )));
    }
    // A variant the kernel lacks: `config` refuses it by name (checked against the GPU's own limit,
    // as `block_limit` does).
    let (entry, has_variant) = match kernel.entry(shape.variant) {
        Some(e) => (e, true),
        None => (kernel.name(), false),
    };
    let (function, limit) = gpu.lookup_in(kernel.module, entry)?;
    let limit = if has_variant {
        limit
    } else {
        gpu.max_threads_per_block()
    };
    let cfg = shape.config(range, kernel, limit)?;
    let (u, r, m) = (ByValue(*update), ByValue(*range), shape.march);
    let stream = gpu.launch_stream();
    if sum.is_some() && !Arc::ptr_eq(&stream, gpu.stream()) {
        // Its partials and counters are reused in the order of the GPU's one stream.
        return Err(Error::InvalidSetting(format!(
            "kernel {} sums its terms, which only the GPU's own stream may run: run it outside \
             Gpu::beside",
            kernel.name()
        )));
    }
    let queue = |sum: Option<&ByValue<SumInto>>| {
        let mut args = stream.launch_builder(&function);
        args.arg(&u).arg(&r).arg(&m);
        if let Some(s) = sum {
            args.arg(s);
        }
        // SAFETY: every generated entry takes (update, range, march) with exactly these layouts, and
        // a summing entry (the only one given a sum) a `SumInto` after them; the loop checked the
        // range against the update's radius and the fields' sizes, `config` sized the dynamic shared
        // memory a tiled entry indexes, and a sum's partials and counters (at zero) are the grid's
        // (`DotScratch::with`).
        unsafe { args.launch(cfg) }
            .cuda(|| format!("launching kernel {entry} with {shape}"))
            .map(drop)
    };
    let Some(sum) = sum else {
        return queue(None);
    };
    let (gx, gy, gz) = cfg.grid_dim;
    sum.scratch.with(gpu, gx * gy * gz, |partials, done| {
        queue(Some(&ByValue(SumInto {
            partials: partials.ptr(),
            out: sum.out,
            done: done.ptr(),
        })))
    })
}

/// `F`'s temporally blocked entry for passes of `steps` steps, checked: `F` has one, and `steps` lies
/// in `1 ..= MAX_TEMPORAL_STEPS` (what every engine's blocked pass asks first).
pub(crate) fn temporal_entry<F: StencilUpdate3D + GpuEntry>(steps: u32) -> Result<&'static str> {
    let Some(entry) = F::TEMPORAL_ENTRY else {
        return Err(Error::InvalidSetting(format!(
            "kernel {} has no temporally blocked entry; give it one with kernel3d!(name => Type; \
             zqueue = ..., tiled = ..., vector = ..., temporal = ...)",
            F::ENTRY
        )));
    };
    if !(1..=MAX_TEMPORAL_STEPS).contains(&steps) {
        return Err(Error::InvalidSetting(format!(
            "{steps} steps per pass: a temporally blocked pass advances 1 to {MAX_TEMPORAL_STEPS}"
        )));
    }
    Ok(entry)
}

/// The dynamic shared memory of a temporally blocked launch of `steps` steps with `shape`'s block,
/// checked as [`temporal_entry`] does, and the rings within `limit` bytes (what a block may have
/// with its kernel opting in).
pub(crate) fn temporal_bytes<F: StencilUpdate3D + GpuEntry>(
    shape: LaunchShape,
    steps: u32,
    limit: usize,
) -> Result<usize> {
    temporal_entry::<F>(steps)?;
    let elem = std::mem::size_of::<F::Real>();
    let bytes = temporal_shared_bytes([shape.block_x, shape.block_y], F::RADIUS, steps, elem);
    if bytes > limit {
        return Err(Error::InvalidSize(format!(
            "{steps} steps with blocks of {}x{} need {bytes} bytes of shared memory; at most \
             {limit} are available: use fewer steps or smaller blocks",
            shape.block_x, shape.block_y
        )));
    }
    Ok(bytes)
}

/// Queues `steps` steps of `update` over `pass` as one temporally blocked launch
/// ([`device_loop3d_temporal`](lattice_gpu_kernels::stencil::device_loop3d_temporal)) with `shape`'s
/// block and march: reads the input, writes the last step into the output (another field) at the
/// points of `pass.out`, those outside `pass.live` held at the input's values.
pub(crate) fn launch_temporal<F: StencilUpdate3D + GpuEntry>(
    gpu: &Arc<Gpu>,
    update: &F,
    pass: &PassRange,
    shape: LaunchShape,
    steps: u32,
) -> Result<()> {
    let bytes = temporal_bytes::<F>(shape, steps, gpu.max_shared_per_block())?;
    let entry = F::TEMPORAL_ENTRY.unwrap_or(F::ENTRY);
    let (function, limit) = gpu.lookup_in(F::MODULE, entry)?;
    allow_shared(&function, entry, bytes)?;
    let plain = shape.with_variant(Variant::Plain);
    // The grid of a plain launch, checked against the temporal entry's own thread limit and named
    // after it in errors.
    let mut kernel = KernelInfo::of3d::<F>();
    kernel.entries[Variant::Plain as usize] = Some(entry);
    let mut cfg = plain.config(&pass.out, &kernel, limit)?;
    cfg.shared_mem_bytes = bytes as u32;
    let (u, r, m) = (ByValue(*update), ByValue(*pass), shape.march);
    let stream = gpu.launch_stream();
    let mut args = stream.launch_builder(&function);
    args.arg(&u).arg(&r).arg(&m).arg(&steps);
    // SAFETY: a temporal entry takes (update, pass, march, steps) with these layouts; the caller's
    // loop checked the pass against the update's radius and the fields' sizes, the grid covers its
    // output as a plain launch's does, and the block gets the rings' shared memory.
    unsafe { args.launch(cfg) }
        .cuda(|| format!("launching kernel {entry} with {shape}, {steps} steps"))
        .map(drop)
}

/// The entry of `F`'s column form for `steps` steps
/// ([`device_loop3d_columns`](lattice_gpu_kernels::stencil::device_loop3d_columns)), if it has one.
pub(crate) fn column_entry<F: GpuEntry>(steps: u32) -> Result<&'static str> {
    use lattice_gpu_kernels::stencil::MAX_COLUMN_STEPS;
    (1..=MAX_COLUMN_STEPS as u32)
        .contains(&steps)
        .then(|| F::COLUMN_ENTRIES[steps as usize - 1])
        .flatten()
        .ok_or_else(|| {
            Error::InvalidSetting(format!(
                "kernel {} has no column-form entry for {steps} steps: the column form takes 1 to \
                 {MAX_COLUMN_STEPS}, each an entry of kernel3d!(...; temporal = ..., columns = [..])",
                F::ENTRY
            ))
        })
}

/// `pass` with its live range cut in z to `steps - 1` radii beyond the output: what lies further
/// cannot reach the output within `steps` steps (the values a held point's neighbours get wrong
/// move one radius in a step from the level after the first), so the output gets the same bits,
/// and the column form's blocks, which march the live range's planes, march no more than that.
pub(crate) fn column_pass<F: StencilUpdate3D>(pass: &PassRange, steps: u32) -> PassRange {
    let reach = steps.saturating_sub(1) * F::RADIUS[2];
    let mut live = pass.live;
    live.begin[2] = live.begin[2].max(pass.out.begin[2].saturating_sub(reach));
    live.end[2] = live.end[2].min(pass.out.end[2].saturating_add(reach));
    PassRange { live, ..*pass }
}

/// The grid and the dynamic shared memory of a column-form launch of `steps` steps over `pass` with
/// blocks of `block` threads marching `march` planes, checked: the block has an output tile and at
/// most `max_threads` threads, the shared planes fit `max_shared` bytes, the grid the GPU's limits.
/// The grid tiles the output in x and y, and the live range's planes in z
/// ([`ColumnThread`](lattice_gpu_kernels::stencil::ColumnThread)).
pub(crate) fn column_launch<F: StencilUpdate3D>(
    pass: &PassRange,
    block: [u32; 2],
    march: u32,
    steps: u32,
    max_threads: u32,
    max_shared: usize,
) -> Result<((u32, u32, u32), usize)> {
    use lattice_gpu_kernels::stencil::{
        column_output_tile, column_rows, column_shared_bytes, COLUMN_PLANE_CELLS,
    };
    let elem = std::mem::size_of::<F::Real>();
    let rows = column_rows(elem);
    let [ox, oy] = column_output_tile(block, F::RADIUS, steps, elem);
    let threads = block[0] * block[1];
    let max_threads = max_threads.min((COLUMN_PLANE_CELLS / rows) as u32);
    if ox == 0 || oy == 0 || march == 0 || threads > max_threads {
        return Err(Error::InvalidSize(format!(
            "a column-form block of {}x{} threads ({rows} columns a thread in y) for {steps} \
             steps of radius {:?} has no output tile, too many threads or a march of 0: give it a \
             tile of more than {} x {} columns, at most {max_threads} threads, and a march of at \
             least 1",
            block[0],
            block[1],
            F::RADIUS,
            2 * steps * F::RADIUS[0],
            2 * steps * F::RADIUS[1]
        )));
    }
    let bytes = column_shared_bytes(block, F::RADIUS, steps, std::mem::size_of::<F::Real>());
    if bytes > max_shared {
        return Err(Error::InvalidSize(format!(
            "a column-form block of {}x{} threads for {steps} steps needs {bytes} bytes of shared \
             memory; at most {max_shared} are available: use a smaller block",
            block[0], block[1]
        )));
    }
    let (o, l) = (pass.out.extent(), pass.live.extent());
    let e = [o[0], o[1], l[2]];
    let grid = (e[0].div_ceil(ox), e[1].div_ceil(oy), e[2].div_ceil(march));
    if grid.1 > 65535 || grid.2 > 65535 {
        return Err(Error::InvalidSize(format!(
            "range {e:?} needs a grid of {grid:?} column-form blocks; the GPU allows at most 65535 \
             in y and z: use larger blocks or a longer march"
        )));
    }
    Ok((grid, bytes))
}

/// The entry a column-form launch of `steps` steps with blocks of `block` threads runs: `F`'s column
/// entry, or its twin capped at [`COLUMN_MAXNREG`] registers ([`GpuEntry::COLUMN_TWINS`]) where the
/// twin spills nothing and an SM holds more of its blocks (with their shared planes). That is where
/// the cap pays: the diffusion's f32 pass of four steps in blocks of 1024 threads, two on an SM
/// instead of one.
///
/// [`COLUMN_MAXNREG`]: lattice_gpu_kernels::stencil::COLUMN_MAXNREG
pub fn column_kernel<F: StencilUpdate3D + GpuEntry>(
    gpu: &Gpu,
    block: [u32; 2],
    steps: u32,
) -> Result<&'static str> {
    let entry = column_entry::<F>(steps)?;
    let Some(twin) = F::COLUMN_TWINS[steps as usize - 1] else {
        return Ok(entry);
    };
    let threads = block[0] * block[1];
    let bytes = lattice_gpu_kernels::stencil::column_shared_bytes(
        block,
        F::RADIUS,
        steps,
        std::mem::size_of::<F::Real>(),
    );
    let (capped, spills) = gpu.resident_blocks(F::MODULE, twin, threads, bytes)?;
    let (blocks, _) = gpu.resident_blocks(F::MODULE, entry, threads, bytes)?;
    Ok(match capped > blocks && !spills {
        true => twin,
        false => entry,
    })
}

/// Queues one column-form launch of `steps` steps of `update` over `pass` (the update reads off its
/// column only in its own plane; the caller checked the ranges against the fields), blocks of `block`
/// threads marching `march` planes.
pub fn launch_columns<F: StencilUpdate3D + GpuEntry>(
    gpu: &Arc<Gpu>,
    update: &F,
    pass: &PassRange,
    block: [u32; 2],
    march: u32,
    steps: u32,
) -> Result<()> {
    super::check_pass(pass, &F::RADIUS, F::ENTRY)?;
    let pass = &column_pass::<F>(pass, steps);
    let (_, limit) = gpu.lookup_in(F::MODULE, column_entry::<F>(steps)?)?;
    let (grid, bytes) =
        column_launch::<F>(pass, block, march, steps, limit, gpu.max_shared_per_block())?;
    let entry = column_kernel::<F>(gpu, block, steps)?;
    let (function, _) = gpu.lookup_in(F::MODULE, entry)?;
    allow_shared(&function, entry, bytes)?;
    let cfg = LaunchConfig {
        grid_dim: grid,
        block_dim: (block[0], block[1], 1),
        shared_mem_bytes: bytes as u32,
    };
    let (u, r) = (ByValue(*update), ByValue(*pass));
    let stream = gpu.launch_stream();
    let mut args = stream.launch_builder(&function);
    args.arg(&u).arg(&r).arg(&march);
    // SAFETY: a column entry takes (update, pass, march) with these layouts; the pass was checked
    // against the update's radius, the grid covers its output's tiles, and the block gets its
    // shared planes.
    unsafe { args.launch(cfg) }
        .cuda(|| format!("launching kernel {entry} with blocks of {block:?}, {steps} steps"))
        .map(drop)
}

/// The two forms of a temporally blocked pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassForm {
    /// Register queues along z, one thread a column, one barrier a plane for all steps
    /// ([`device_loop3d_columns`](lattice_gpu_kernels::stencil::device_loop3d_columns)): for
    /// updates reading off their column only in their own plane, whose kernel declares it.
    Columns,
    /// Rings of planes in shared memory
    /// ([`device_loop3d_temporal`](lattice_gpu_kernels::stencil::device_loop3d_temporal)): any
    /// offsets within the radius.
    General,
}

impl PassForm {
    /// The form a pass of `steps` steps of `F` runs in: the column form where the kernel has its
    /// entry, the general form elsewhere.
    pub fn of<F: GpuEntry>(steps: u32) -> Self {
        match column_entry::<F>(steps) {
            Ok(_) => Self::Columns,
            Err(_) => Self::General,
        }
    }

    /// Its name in benchmark tables and tuning reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Columns => "columns",
            Self::General => "general",
        }
    }
}

/// The entry of `F`'s passes of `steps` steps in `form`; an error where it has none, or where the
/// form cannot take that many steps.
pub(crate) fn pass_entry<F: StencilUpdate3D + GpuEntry>(
    form: PassForm,
    steps: u32,
) -> Result<&'static str> {
    match form {
        PassForm::Columns => column_entry::<F>(steps),
        PassForm::General => temporal_entry::<F>(steps),
    }
}

/// The launches worth timing on `gpu` for a pass of `steps` steps of `F` over `pass` in `form`:
/// blocks a warp wide or wider within the entry's own thread limit (its registers' share) and the
/// GPU's shared memory, the column form's with at least a quarter of the block's tile in output;
/// each marching the range cut into 1 to 8 equal slabs, 32 or 16 planes (the column form), or the
/// whole range, 128 or 32 planes (the general form).
pub fn pass_candidates<F: StencilUpdate3D + GpuEntry>(
    gpu: &Gpu,
    form: PassForm,
    pass: &PassRange,
    steps: u32,
) -> Result<Vec<LaunchShape>> {
    let (_, max_threads) = gpu.lookup_in(F::MODULE, pass_entry::<F>(form, steps)?)?;
    let max_shared = gpu.max_shared_per_block();
    // The planes a block may march: the column form's blocks march the live range's.
    let pass = &column_pass::<F>(pass, steps);
    let nz = match form {
        PassForm::Columns => pass.live.extent()[2],
        PassForm::General => pass.out.extent()[2],
    }
    .max(1);
    let (blocks, marches): (&[[u32; 2]], Vec<u32>) = match form {
        // The range cut into 1 to 8 equal slabs: a pass has few blocks, each a tile of many columns,
        // and the number that fills the GPU best is the timing's to say. The marches of 64 and 16
        // planes alone left f32 at 256^3 at 1.38x the single step, where (32,32) blocks marching a
        // fifth of the range give 1.55x (docs/benchmarks/history.md).
        PassForm::Columns => (
            &[[32, 8], [32, 16], [32, 32], [64, 8], [64, 16], [128, 8]],
            (1..=8).map(|k| nz.div_ceil(k)).chain([32, 16]).collect(),
        ),
        PassForm::General => (
            &[
                [32, 1],
                [32, 2],
                [32, 4],
                [32, 8],
                [32, 16],
                [64, 1],
                [64, 2],
                [64, 4],
                [64, 8],
                [64, 16],
                [128, 1],
                [128, 2],
                [128, 4],
                [128, 8],
            ],
            vec![nz, 128, 32],
        ),
    };
    let mut out: Vec<LaunchShape> = Vec::new();
    for &[block_x, block_y] in blocks {
        for &march in &marches {
            let shape = LaunchShape {
                block_x,
                block_y,
                march: march.min(nz),
                variant: Variant::Plain,
            };
            let fits = match form {
                PassForm::Columns => column_launch::<F>(
                    pass,
                    [block_x, block_y],
                    shape.march,
                    steps,
                    max_threads,
                    max_shared,
                )
                .is_ok_and(|_| {
                    use lattice_gpu_kernels::stencil::{column_output_tile, column_tile};
                    let elem = std::mem::size_of::<F::Real>();
                    let [ox, oy] = column_output_tile([block_x, block_y], F::RADIUS, steps, elem);
                    let [tx, ty] = column_tile([block_x, block_y], elem);
                    4 * ox * oy >= tx * ty
                }),
                PassForm::General => {
                    shape.threads() <= max_threads
                        && temporal_bytes::<F>(shape, steps, max_shared).is_ok()
                }
            };
            if fits && !out.contains(&shape) {
                out.push(shape);
            }
        }
    }
    Ok(out)
}

/// Queues a temporally blocked pass of `steps` steps of `update` over `pass` in `form`, with
/// `shape`'s block and march ([`launch_columns`] or the general form's launch).
pub fn launch_pass<F: StencilUpdate3D + GpuEntry>(
    gpu: &Arc<Gpu>,
    update: &F,
    pass: &PassRange,
    form: PassForm,
    shape: LaunchShape,
    steps: u32,
) -> Result<()> {
    match form {
        PassForm::Columns => launch_columns(
            gpu,
            update,
            pass,
            [shape.block_x, shape.block_y],
            shape.march,
            steps,
        ),
        PassForm::General if pass.signal.counter != 0 => Err(Error::InvalidSetting(format!(
            "a pass of {steps} steps of {} runs in the general form, whose blocks count no end \
             planes for a halo exchange: signalled passes need the column form (1 to \
             {} steps of a kernel with column entries)",
            F::ENTRY,
            lattice_gpu_kernels::stencil::MAX_COLUMN_STEPS
        ))),
        PassForm::General => launch_temporal(gpu, update, pass, shape, steps),
    }
}

/// Runs point updates on the GPU with one fixed launch shape.
#[derive(Clone, Debug)]
pub struct DeviceLoopEngine {
    gpu: Arc<Gpu>,
    shape: LaunchShape,
    dots: DotScratch,
}

impl DeviceLoopEngine {
    /// An engine on `gpu` launching every loop with `shape` (its variant included: a loop whose kernel
    /// lacks that variant fails with a message saying so).
    pub fn new(gpu: Arc<Gpu>, shape: LaunchShape) -> Self {
        Self {
            gpu,
            shape,
            dots: DotScratch::default(),
        }
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
        launch(&self.gpu, &KernelInfo::of3d::<F>(), f, r, self.shape, None)
    }

    fn run3d_sum<F: SumUpdate3D + GpuEntry>(
        &self,
        r: &LoopRange,
        f: &F,
        _: &mut (),
        out: &mut DeviceField<f64>,
        slot: usize,
    ) -> Result<()> {
        let sum = SumTarget::new(&self.dots, out, slot)?;
        launch(
            &self.gpu,
            &KernelInfo::of3d::<F>(),
            f,
            r,
            self.shape,
            Some(sum),
        )
    }

    fn run3d_temporal<F: StencilUpdate3D + GpuEntry>(
        &self,
        pass: &PassRange,
        f: &F,
        steps: u32,
        _: &mut (),
    ) -> Result<()> {
        launch_pass(
            &self.gpu,
            f,
            pass,
            PassForm::of::<F>(steps),
            self.shape,
            steps,
        )
    }

    fn run2d<F: PointUpdate2D + GpuEntry>(&self, r: &LoopRange, f: &F, _: &mut ()) -> Result<()> {
        launch(&self.gpu, &KernelInfo::of2d::<F>(), f, r, self.shape, None)
    }

    type Recording = CudaGraph;

    fn record(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<Option<CudaGraph>> {
        record(&self.gpu, work).map(Some)
    }

    fn replay(&self, graph: &CudaGraph) -> Result<()> {
        replay(graph)
    }

    fn run_block<P: BlockProgram + GpuEntry>(&self, p: &P) -> Result<()> {
        launch_block(&self.gpu, p)
    }

    fn synchronize(&self) -> Result<()> {
        self.gpu.synchronize()
    }

    fn dot(&self, a: &DeviceField<f64>, b: &DeviceField<f64>) -> Result<f64> {
        device_dot(&self.gpu, &self.dots, a, b)
    }

    fn device(&self) -> Option<&Arc<Gpu>> {
        Some(&self.gpu)
    }

    fn first_non_finite<T: Element>(&self, f: &DeviceField<T>) -> Result<Option<usize>> {
        f.first_non_finite()
    }

    fn dot_into(
        &self,
        a: &DeviceField<f64>,
        b: &DeviceField<f64>,
        out: &mut DeviceField<f64>,
        slot: usize,
    ) -> Result<()> {
        device_dot_into(&self.gpu, &self.dots, a, b, out, slot)
    }
}

/// Captures what `work` queues on the GPU's stream as a CUDA graph, instantiated and uploaded.
pub(crate) fn record(gpu: &Gpu, work: &mut dyn FnMut() -> Result<()>) -> Result<CudaGraph> {
    let stream = gpu.stream().clone();
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .cuda(|| "starting a graph capture".into())?;
    let queued = work();
    // The capture ends whatever `work` did, so that the stream is usable again.
    let graph = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .cuda(|| "capturing a graph".into());
    queued?;
    let graph =
        graph?.ok_or_else(|| Error::Internal("the graph capture recorded no work".into()))?;
    graph.upload().cuda(|| "uploading a graph".into())?;
    Ok(graph)
}

/// Queues a graph made by [`record`] on the stream it was recorded from.
pub(crate) fn replay(graph: &CudaGraph) -> Result<()> {
    graph.launch().cuda(|| "launching a recorded graph".into())
}

/// Queues block program `p` as one block of as many threads as its kernel takes (at most 1024).
pub(crate) fn launch_block<P: BlockProgram + GpuEntry>(gpu: &Gpu, p: &P) -> Result<()> {
    let (function, limit) = gpu.lookup_in(P::MODULE, P::ENTRY)?;
    let threads = limit.min(1024);
    // SAFETY: a block kernel takes its program by value, and the program's passes stay inside the
    // ranges its fields were built for.
    unsafe {
        gpu.launch_function(
            gpu.stream(),
            &function,
            P::ENTRY,
            p,
            [1; 3],
            [threads, 1, 1],
            false,
        )
    }
}

/// The work space of an engine's dot products, kept from call to call: the partial sums and the block
/// counters of a [`SumInto`] (its kernel leaves the counters at zero), so that a solver's dot products
/// allocate and clear nothing per iteration. Reuse is safe: every user is queued on the GPU's one
/// stream, in order. Buffers a larger launch outgrows are kept until the engine goes, not freed: a
/// CUDA graph that recorded a kernel using them still holds their addresses.
#[derive(Clone, Debug, Default)]
pub(crate) struct DotScratch(Arc<Mutex<Scratch>>);

/// Partial sums and block counters.
type DotBuffers = (DeviceBuffer<f64>, DeviceBuffer<u32>);

/// The buffers in use and those outgrown.
#[derive(Debug, Default)]
struct Scratch {
    now: Option<DotBuffers>,
    outgrown: Vec<DotBuffers>,
}

impl DotScratch {
    /// Runs `f` with the partials and zero counters of a [`SumInto`] over `blocks` blocks.
    fn with<R>(
        &self,
        gpu: &Arc<Gpu>,
        blocks: u32,
        f: impl FnOnce(&DeviceBuffer<f64>, &DeviceBuffer<u32>) -> Result<R>,
    ) -> Result<R> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (values, counters) = SumInto::scratch(blocks);
        let (partials, done) = match held.now.take() {
            Some((p, d)) if p.len() >= values && d.len() >= counters => (p, d),
            old => {
                held.outgrown.extend(old);
                (
                    DeviceBuffer::zeros(gpu, values)?,
                    DeviceBuffer::zeros(gpu, counters)?,
                )
            }
        };
        let out = f(&partials, &done);
        held.now = Some((partials, done));
        out
    }
}

/// `sum a_i b_i` of two device fields: one partial sum per block on the GPU (`field_dot_f64`), the
/// partials added on the host in block order.
pub(crate) fn device_dot(
    gpu: &Arc<Gpu>,
    scratch: &DotScratch,
    a: &DeviceField<f64>,
    b: &DeviceField<f64>,
) -> Result<f64> {
    let (blocks, n) = dot_size(gpu, a, b)?;
    scratch.with(gpu, blocks, |partials, _| {
        let args = dot_args(a, b, n, partials);
        // SAFETY: `field_dot_f64` takes one `FieldDot`; both fields hold `n` values and `partials`
        // at least one per block.
        unsafe { gpu.launch("field_dot_f64", &args, blocks, DOT_BLOCK)? };
        Ok(partials.download_span(0, blocks as usize)?.iter().sum())
    })
}

/// `dot` into `out[slot]` on the device, queued ([`LoopEngine::dot_into`]).
pub(crate) fn device_dot_into(
    gpu: &Arc<Gpu>,
    scratch: &DotScratch,
    a: &DeviceField<f64>,
    b: &DeviceField<f64>,
    out: &mut DeviceField<f64>,
    slot: usize,
) -> Result<()> {
    let target = SumTarget::new(scratch, out, slot)?;
    let (blocks, n) = dot_size(gpu, a, b)?;
    scratch.with(gpu, blocks, |partials, done| {
        let args = lattice_gpu_kernels::stencil::FieldDotInto {
            dot: dot_args(a, b, n, partials),
            out: target.out,
            done: done.ptr(),
        };
        // SAFETY: `field_dot_into_f64` takes one `FieldDotInto`: as in `device_dot`, `out` one
        // value, and the partials and counters of a `SumInto` over `blocks` (`DotScratch::with`).
        unsafe { gpu.launch("field_dot_into_f64", &args, blocks, DOT_BLOCK) }
    })
}

/// The block count of a dot product of `a` and `b`, and their length (checked to be one).
fn dot_size(gpu: &Gpu, a: &DeviceField<f64>, b: &DeviceField<f64>) -> Result<(u32, usize)> {
    let n = a.shape().len();
    if b.shape().len() != n {
        return Err(Error::InvalidSize(format!(
            "dot of fields of {n} and {} values; they must have one shape",
            b.shape().len()
        )));
    }
    Ok(((4 * gpu.sm_count()).min(Gpu::blocks_for(n, DOT_BLOCK)), n))
}

/// The arguments of a dot product of `a` and `b` (`n` values each) into `partials`.
fn dot_args(
    a: &DeviceField<f64>,
    b: &DeviceField<f64>,
    n: usize,
    partials: &DeviceBuffer<f64>,
) -> lattice_gpu_kernels::stencil::FieldDot {
    lattice_gpu_kernels::stencil::FieldDot {
        a: a.view().as_ptr(),
        b: b.view().as_ptr(),
        n: n as u64,
        partials: partials.ptr(),
    }
}
