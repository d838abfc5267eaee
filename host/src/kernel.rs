//! Typed kernels ([`lattice_gpu_kernels::bind`]): a bound argument struct launched on the GPU or run
//! on the CPU engine, with no entry name and no `unsafe` at the call site.
//!
//! The kernel crate checks each argument struct against the memory it addresses when binding it; this
//! module makes spans of device buffers for that, finds the struct's entry in its module, and runs the
//! struct's work items on the CPU in parallel, each once.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use lattice_gpu_kernels::bind::{Bound, Cooperative, Kernel, Place, Span, SpanMut};
use rayon::prelude::*;

use crate::buffer::DeviceBuffer;
use crate::gpu::Gpu;
use crate::Result;

impl<T: crate::buffer::Plain> DeviceBuffer<T> {
    /// The buffer's elements, for binding into a kernel that reads them.
    pub fn span(&self) -> Span<'_, T> {
        // SAFETY: the allocation holds `len()` elements and lives while the span borrows the buffer;
        // kernels queued meanwhile run before a drop frees it (cudarc frees in stream order).
        unsafe { Span::from_device_parts(self.ptr::<T>(), self.len()) }
    }

    /// The buffer's elements, for binding into a kernel that writes them. Device memory is never
    /// referenced by the host, so a shared borrow suffices: the GPU orders the kernels of a stream, and
    /// the buffer's own copies go through the same stream.
    pub fn span_mut(&self) -> SpanMut<'_, T> {
        // SAFETY: as for `span`; the host reads and writes the buffer only through stream-ordered copies.
        unsafe { SpanMut::from_device_parts(self.ptr::<T>(), self.len()) }
    }
}

impl Gpu {
    /// Queues bound kernel `k` on `stream` with `grid` blocks of `block` threads (any shape: every
    /// entry guards its threads).
    pub fn launch_kernel<K: Kernel>(
        &self,
        stream: &Arc<CudaStream>,
        k: &Bound<'_, K>,
        grid: [u32; 3],
        block: [u32; 3],
    ) -> Result<()> {
        let args = on_device(k)?;
        let entry = args.entry();
        let (f, _) = self.lookup_in(K::MODULE, entry)?;
        // SAFETY: `Kernel`'s contract: the entry takes one `K`, and a bound value touches only its
        // spans' memory on any grid.
        unsafe { self.launch_function(stream, &f, entry, args, grid, block, false) }
    }

    /// Queues bound kernel `k` with one thread per work item in 1-D blocks of `block` threads.
    pub fn launch_items<K: Kernel>(
        &self,
        stream: &Arc<CudaStream>,
        k: &Bound<'_, K>,
        block: u32,
    ) -> Result<()> {
        let grid = Gpu::blocks_for(k.args().items(), block);
        self.launch_kernel(stream, k, [grid, 1, 1], [block, 1, 1])
    }

    /// Launches bound cooperative kernel `k` on the GPU's stream as [`Cooperative::blocks`] blocks,
    /// all resident at once (`cuLaunchCooperativeKernel`), as a kernel with grid barriers needs. The
    /// caller sizes the grid ([`cooperative_blocks`](Self::cooperative_blocks), once); the driver
    /// refuses one that cannot be resident.
    pub fn launch_cooperative_kernel<K: Cooperative>(&self, k: &Bound<'_, K>) -> Result<()> {
        let args = on_device(k)?;
        let blocks = args.blocks();
        let entry = args.entry();
        let (f, _) = self.lookup_in(K::MODULE, entry)?;
        // SAFETY: `Cooperative`'s contract: `blocks()` blocks, all resident (or the driver refuses the
        // launch), touch only the spans' memory.
        unsafe {
            self.launch_function(
                self.stream(),
                &f,
                entry,
                args,
                [blocks.max(1), 1, 1],
                [K::BLOCK, 1, 1],
                true,
            )
        }
    }
}

/// The arguments of `k`, if it is bound to device memory.
fn on_device<'k, K: Kernel>(k: &'k Bound<'_, K>) -> Result<&'k K> {
    match k.place() {
        Place::Device => Ok(k.args()),
        Place::Host => Err(crate::Error::InvalidSetting(format!(
            "kernel {} was bound to host memory and cannot run on the GPU; bind device buffers' spans",
            k.args().entry()
        ))),
    }
}

/// Runs bound kernel `k` on the CPU: every work item once, in parallel (chunks of at least `min_items`,
/// so that small items do not drown in scheduling).
pub fn run_on_host<K: Kernel>(k: &mut Bound<'_, K>, min_items: usize) -> Result<()> {
    if k.place() == Place::Device {
        return Err(crate::Error::InvalidSetting(format!(
            "kernel {} was bound to device memory and cannot run on the CPU; bind host slices' spans",
            k.args().entry()
        )));
    }
    let args = *k.args();
    (0..args.items())
        .into_par_iter()
        .with_min_len(min_items.max(1))
        // SAFETY: bound (the `&mut` keeps any other run of it from overlapping), each `i < items()` once.
        .for_each(|i| unsafe { args.item(i) });
    Ok(())
}
