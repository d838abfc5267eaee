//! Typed device arrays and kernel launches with one `#[repr(C)]` argument struct: what applications with
//! their own kernels (lattice QCD, Krylov solvers) use instead of cudarc.

use std::sync::Arc;

use cudarc::driver::{
    sys, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg,
    ValidAsZeroBits,
};

use lattice_gpu_kernels::device::math::Real;

use crate::error::{CudaContext, Error, Result};
use crate::gpu::Gpu;

/// An element type device arrays can hold: plain bits, valid as all zeros.
pub trait Plain: DeviceRepr + ValidAsZeroBits + Clone + Default + Unpin {}
impl<T: DeviceRepr + ValidAsZeroBits + Clone + Default + Unpin> Plain for T {}

/// An array of `T` in GPU memory.
pub struct DeviceBuffer<T> {
    gpu: Arc<Gpu>,
    buf: CudaSlice<T>,
}

impl<T> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("len", &self.buf.len())
            .finish()
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        self.gpu
            .hold((self.buf.len() * std::mem::size_of::<T>()) as u64, false);
    }
}

/// A `u32` in device memory from `cuMemAlloc`, not from the stream-ordered pool that device arrays
/// come from: the count a signalled pass keeps for a halo exchange to wait on
/// ([`PassSignal`](lattice_gpu_kernels::stencil::PassSignal)). `cuStreamWaitValue32` refused a
/// count in pool memory (`CUDA_ERROR_INVALID_VALUE`, H200, driver 580).
#[derive(Debug)]
pub struct DeviceCounter {
    gpu: Arc<Gpu>,
    addr: sys::CUdeviceptr,
}

impl DeviceCounter {
    /// A counter at 0.
    pub fn new(gpu: &Arc<Gpu>) -> Result<Self> {
        gpu.context()
            .bind_to_thread()
            .cuda(|| "binding the GPU for a counter".into())?;
        // SAFETY: a fresh allocation of one word, set before use and freed once (Drop).
        let addr = unsafe { cudarc::driver::result::malloc_sync(4) }
            .cuda(|| "allocating a counter".into())?;
        let counter = Self {
            gpu: gpu.clone(),
            addr,
        };
        // SAFETY: the word just allocated.
        unsafe { cudarc::driver::result::memset_d8_sync(addr, 0, 4) }
            .cuda(|| "zeroing a counter".into())?;
        Ok(counter)
    }

    /// Its device address.
    pub fn addr(&self) -> u64 {
        self.addr
    }
}

impl Drop for DeviceCounter {
    fn drop(&mut self) {
        let _ = self.gpu.context().bind_to_thread();
        // SAFETY: allocated by `new`, freed once; a failure leaves only a leak.
        let _ = unsafe { cudarc::driver::result::free_sync(self.addr) };
    }
}

impl<T: Plain> DeviceBuffer<T> {
    /// `len` zeros.
    pub fn zeros(gpu: &Arc<Gpu>, len: usize) -> Result<Self> {
        let buf = gpu
            .stream()
            .alloc_zeros(len.max(1))
            .cuda(|| format!("allocating {len} elements on the GPU"))?;
        gpu.hold((buf.len() * std::mem::size_of::<T>()) as u64, true);
        Ok(Self {
            gpu: gpu.clone(),
            buf,
        })
    }

    /// A copy of `data`.
    pub fn from_host(gpu: &Arc<Gpu>, data: &[T]) -> Result<Self> {
        let mut b = Self::zeros(gpu, data.len())?;
        b.upload(data)?;
        Ok(b)
    }

    /// The index of its first NaN or infinite value, `None` where all are finite: counted on the GPU,
    /// copied to the host only when there is one to find.
    pub fn first_non_finite(&self) -> Result<Option<usize>>
    where
        T: Real,
    {
        let n = self.len();
        match device_count_non_finite(&self.gpu, self.ptr::<T>(), n)? {
            0 => Ok(None),
            _ => Ok(crate::health::first_non_finite(&self.download()?)),
        }
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.buf.len() == 0
    }

    /// Copies `data` (at most `len()` elements) to the start of the buffer.
    pub fn upload(&mut self, data: &[T]) -> Result<()> {
        let mut view = self.buf.slice_mut(0..data.len());
        self.gpu
            .stream()
            .memcpy_htod(data, &mut view)
            .cuda(|| "copying to the GPU".into())
    }

    /// The whole buffer, copied to the host (waits for queued work).
    pub fn download(&self) -> Result<Vec<T>> {
        self.gpu
            .stream()
            .clone_dtoh(&self.buf)
            .cuda(|| "copying from the GPU (a kernel failed)".into())
    }

    /// `len` elements from `start` on, copied to the host (waits for queued work).
    pub fn download_span(&self, start: usize, len: usize) -> Result<Vec<T>> {
        self.check_span(start, len)?;
        self.gpu
            .stream()
            .clone_dtoh(&self.buf.slice(start..start + len))
            .cuda(|| "copying part of a GPU array to the host (a kernel may have failed)".into())
    }

    /// Overwrites `data.len()` elements from `start` on, queued after the work before it.
    pub fn upload_span(&mut self, start: usize, data: &[T]) -> Result<()> {
        self.check_span(start, data.len())?;
        self.gpu
            .stream()
            .memcpy_htod(data, &mut self.buf.slice_mut(start..start + data.len()))
            .cuda(|| "copying part of a GPU array from the host".into())
    }

    /// [`upload_span`](Self::upload_span) through `&self`, for vectors a solver lends out by shared
    /// reference (a split solve's ghost layers and sums): queued on the buffer's stream, a pageable
    /// source copied out before the call returns.
    pub(crate) fn write_span(&self, start: usize, data: &[T]) -> Result<()> {
        self.check_span(start, data.len())?;
        let dst = self.addr() + (start * std::mem::size_of::<T>()) as u64;
        // SAFETY: the range lies inside the buffer (checked), on the stream its work is ordered on.
        unsafe { cudarc::driver::result::memcpy_htod_async(dst, data, self.stream().cu_stream()) }
            .cuda(|| "copying part of a GPU array from the host".into())
    }

    /// `rows` runs of `len` elements, `pitch` elements apart from `start` on, gathered into one host
    /// vector by one strided copy (waits for queued work): e.g. one z plane of every population of a
    /// structure-of-arrays lattice.
    pub fn download_rows(
        &self,
        start: usize,
        len: usize,
        pitch: usize,
        rows: usize,
    ) -> Result<Vec<T>> {
        self.check_rows(start, len, pitch, rows)?;
        let mut out = vec![T::default(); len * rows];
        if !out.is_empty() {
            let copy = self.rows_copy(start, len, pitch, rows, true, out.as_mut_ptr() as *mut _);
            self.copy_2d(&copy)?;
        }
        Ok(out)
    }

    /// Scatters `data` (`data.len() / len` runs of `len` elements) into runs `pitch` elements apart
    /// from `start` on, by one strided copy, queued after the work before it (and finished on return).
    pub fn upload_rows(
        &mut self,
        start: usize,
        pitch: usize,
        data: &[T],
        len: usize,
    ) -> Result<()> {
        let rows = data.len().checked_div(len).unwrap_or(0);
        if rows * len != data.len() {
            return Err(Error::InvalidSize(format!(
                "{} elements are not whole runs of {len}",
                data.len()
            )));
        }
        self.check_rows(start, len, pitch, rows)?;
        if !data.is_empty() {
            let copy = self.rows_copy(start, len, pitch, rows, false, data.as_ptr() as *mut _);
            self.copy_2d(&copy)?;
        }
        Ok(())
    }

    fn check_rows(&self, start: usize, len: usize, pitch: usize, rows: usize) -> Result<()> {
        if rows > 0 && len > pitch {
            return Err(Error::InvalidSize(format!(
                "runs of {len} elements overlap at a pitch of {pitch}"
            )));
        }
        let span = match rows {
            0 => Some(0),
            _ => (rows - 1)
                .checked_mul(pitch)
                .and_then(|v| v.checked_add(len)),
        };
        match span {
            Some(span) => self.check_span(start, span),
            None => Err(Error::InvalidSize(format!(
                "{rows} runs {pitch} elements apart are outside a GPU array of {}",
                self.len()
            ))),
        }
    }

    /// The copy between runs of this buffer and a packed host array at `host`.
    fn rows_copy(
        &self,
        start: usize,
        len: usize,
        pitch: usize,
        rows: usize,
        to_host: bool,
        host: *mut std::ffi::c_void,
    ) -> sys::CUDA_MEMCPY2D {
        let size = std::mem::size_of::<T>();
        let device = self.addr() + (start * size) as u64;
        let (dev, host_type) = (
            sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            sys::CUmemorytype::CU_MEMORYTYPE_HOST,
        );
        let (packed, strided) = (len * size, pitch * size);
        sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: if to_host { dev } else { host_type },
            srcHost: if to_host { std::ptr::null() } else { host },
            srcDevice: if to_host { device } else { 0 },
            srcArray: std::ptr::null_mut(),
            srcPitch: if to_host { strided } else { packed },
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: if to_host { host_type } else { dev },
            dstHost: if to_host { host } else { std::ptr::null_mut() },
            dstDevice: if to_host { 0 } else { device },
            dstArray: std::ptr::null_mut(),
            dstPitch: if to_host { packed } else { strided },
            WidthInBytes: packed,
            Height: rows,
        }
    }

    fn copy_2d(&self, copy: &sys::CUDA_MEMCPY2D) -> Result<()> {
        let stream = self.gpu.stream();
        // SAFETY: `copy` stays within this buffer (checked) and a host array of `len * rows` elements
        // that outlives the call, which waits for the copy to finish.
        unsafe { sys::cuMemcpy2DAsync_v2(copy, stream.cu_stream()) }
            .result()
            .cuda(|| {
                "a strided copy between the GPU and the host (a kernel may have failed)".into()
            })?;
        stream
            .synchronize()
            .cuda(|| "finishing a strided copy".into())
    }

    fn check_span(&self, start: usize, len: usize) -> Result<()> {
        if start.checked_add(len).is_none_or(|end| end > self.len()) {
            return Err(Error::InvalidSize(format!(
                "elements {start}..{} are outside a GPU array of {}",
                start.saturating_add(len),
                self.len()
            )));
        }
        Ok(())
    }

    /// Copies `other` (same length) into this buffer on the stream.
    pub fn copy_from(&mut self, other: &Self) -> Result<()> {
        self.gpu
            .stream()
            .memcpy_dtod(&other.buf, &mut self.buf)
            .cuda(|| "copying on the GPU".into())
    }

    /// Sets every element to zero on the stream.
    pub fn zero(&mut self) -> Result<()> {
        self.gpu
            .stream()
            .memset_zeros(&mut self.buf)
            .cuda(|| "clearing GPU memory".into())
    }

    /// The device address, for kernel argument structs.
    pub fn addr(&self) -> u64 {
        let (p, _sync) = self.buf.device_ptr(self.gpu.stream());
        p
    }

    /// The stream the buffer's copies are queued on.
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        self.gpu.stream()
    }

    /// The device address as a pointer to `U` (kernel argument structs hold typed pointers).
    pub fn ptr<U>(&self) -> *mut U {
        self.addr() as *mut U
    }
}

/// A `#[repr(C)]` kernel argument passed by value: its bytes are the kernel's parameter block.
#[repr(transparent)]
pub(crate) struct ByValue<T>(pub T);
// SAFETY: only `#[repr(C)]` structs of plain pointers and numbers, mirrored in gpu-kernels, are wrapped.
unsafe impl<T: Copy> DeviceRepr for ByValue<T> {}

impl Gpu {
    /// Queues kernel `entry`, whose one parameter is the `#[repr(C)]` struct `args`, on `stream` with
    /// `grid` blocks of `block` threads.
    ///
    /// # Safety
    /// `entry` must take exactly one parameter of type `P` (same layout as in gpu-kernels), and every
    /// device address in `args` must be valid for what the kernel does with it.
    pub unsafe fn launch_on<P: Copy>(
        &self,
        stream: &Arc<CudaStream>,
        entry: &str,
        args: &P,
        grid: u32,
        block: u32,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.launch_3d_on(stream, entry, args, [grid.max(1), 1, 1], [block, 1, 1]) }
    }

    /// [`launch_on`](Self::launch_on) with 3-D grid and block shapes.
    ///
    /// # Safety
    /// As for [`launch_on`](Self::launch_on).
    pub unsafe fn launch_3d_on<P: Copy>(
        &self,
        stream: &Arc<CudaStream>,
        entry: &str,
        args: &P,
        grid: [u32; 3],
        block: [u32; 3],
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.launch_with(stream, entry, args, grid, block, false) }
    }

    /// Framework kernel `entry` with one by-value argument, plainly or cooperatively.
    ///
    /// # Safety
    /// As for [`launch_on`](Self::launch_on); a cooperative grid at most
    /// [`cooperative_blocks`](Self::cooperative_blocks).
    unsafe fn launch_with<P: Copy>(
        &self,
        stream: &Arc<CudaStream>,
        entry: &str,
        args: &P,
        grid: [u32; 3],
        block: [u32; 3],
        cooperative: bool,
    ) -> Result<()> {
        let f = self.function(entry)?;
        // SAFETY: the caller's contract.
        unsafe { self.launch_function(stream, &f, entry, args, grid, block, cooperative) }
    }

    /// Queues kernel `f` (named `entry` in messages) with one by-value argument, plainly or
    /// cooperatively: the one launch path of kernels with an argument struct.
    ///
    /// # Safety
    /// As for [`launch_with`](Self::launch_with).
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn launch_function<P: Copy>(
        &self,
        stream: &Arc<CudaStream>,
        f: &CudaFunction,
        entry: &str,
        args: &P,
        grid: [u32; 3],
        block: [u32; 3],
        cooperative: bool,
    ) -> Result<()> {
        let a = ByValue(*args);
        let cfg = LaunchConfig {
            grid_dim: (grid[0], grid[1], grid[2]),
            block_dim: (block[0], block[1], block[2]),
            shared_mem_bytes: 0,
        };
        let mut launch = stream.launch_builder(f);
        launch.arg(&a);
        // SAFETY: the caller's contract.
        let done = unsafe {
            match cooperative {
                true => launch.launch_cooperative(cfg),
                false => launch.launch(cfg),
            }
        };
        done.cuda(|| match cooperative {
            true => format!("launching kernel {entry} cooperatively"),
            false => format!("launching kernel {entry}"),
        })?;
        Ok(())
    }

    /// [`launch_on`](Self::launch_on) the GPU's own stream.
    ///
    /// # Safety
    /// As for [`launch_on`](Self::launch_on).
    pub unsafe fn launch<P: Copy>(
        &self,
        entry: &str,
        args: &P,
        grid: u32,
        block: u32,
    ) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.launch_on(self.stream(), entry, args, grid, block) }
    }

    /// The most blocks of `block` threads of kernel `entry` the GPU runs at once: the grid of a
    /// cooperative launch ([`launch_cooperative`](Self::launch_cooperative)) may not exceed it.
    pub fn cooperative_blocks(&self, entry: &str, block: u32) -> Result<u32> {
        let f = self.function(entry)?;
        let per_sm = f
            .occupancy_max_active_blocks_per_multiprocessor(block, 0, None)
            .cuda(|| format!("reading the occupancy of kernel {entry}"))?;
        Ok(per_sm * self.sm_count())
    }

    /// Launches `entry` on the GPU's stream with `grid` blocks of `block` threads all resident at once
    /// (`cuLaunchCooperativeKernel`), as a kernel with grid barriers needs.
    ///
    /// # Safety
    /// As for [`launch_on`](Self::launch_on); `grid` at most
    /// [`cooperative_blocks`](Self::cooperative_blocks).
    pub unsafe fn launch_cooperative<P: Copy>(
        &self,
        entry: &str,
        args: &P,
        grid: u32,
        block: u32,
    ) -> Result<()> {
        let (stream, grid) = (self.stream(), [grid.max(1), 1, 1]);
        // SAFETY: forwarded.
        unsafe { self.launch_with(stream, entry, args, grid, [block, 1, 1], true) }
    }

    /// Enough blocks of `block` threads for `threads` threads.
    pub fn blocks_for(threads: usize, block: u32) -> u32 {
        threads.div_ceil(block as usize).max(1) as u32
    }
}

/// Threads per block of the reductions over device arrays (dot products, counts of non-finite values).
pub(crate) const DOT_BLOCK: u32 = 256;

/// How many of the `n` values at `a` on `gpu` are NaN or infinite: one count per block on the GPU
/// (`count_non_finite_f32`/`_f64`), added on the host. `a` must point to `n` values of a live
/// allocation on `gpu`.
pub(crate) fn device_count_non_finite<T: Real>(
    gpu: &Arc<Gpu>,
    a: *const T,
    n: usize,
) -> Result<u64> {
    let blocks = (4 * gpu.sm_count()).min(Gpu::blocks_for(n, DOT_BLOCK));
    let partials = DeviceBuffer::<f64>::zeros(gpu, blocks as usize)?;
    let args = lattice_gpu_kernels::stencil::CountNonFinite {
        a,
        n: n as u64,
        partials: partials.ptr(),
    };
    let entry = format!("count_non_finite_{}", T::NAME);
    // SAFETY: the kernel takes one `CountNonFinite<T>`; `a` holds `n` values (the caller's contract)
    // and `partials` one per block.
    unsafe { gpu.launch(&entry, &args, blocks, DOT_BLOCK)? };
    Ok(partials.download()?.iter().sum::<f64>() as u64)
}
