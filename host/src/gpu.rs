//! One GPU: its context, the stream all work goes to, and the kernel module loaded from the embedded PTX.
//!
//! cudarc is built with `dynamic-loading`, so nothing here needs CUDA at build time; [`Gpu::probe`] finds
//! out at run time whether a driver and a device are there, before any call that would otherwise panic
//! inside cudarc's loader.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{
    result as cu, sys, CudaContext as Ctx, CudaEvent, CudaFunction, CudaModule, CudaSlice,
    CudaStream,
};
use cudarc::nvrtc::Ptx;

use crate::engine::tunecache::fnv1a64;
use crate::error::{CudaContext, Error, Result};

/// A GPU with the lattice-gpu kernels loaded.
pub struct Gpu {
    ctx: Arc<Ctx>,
    stream: Arc<CudaStream>,
    /// Where kernels go instead of `stream` while [`beside`](Self::beside) runs.
    beside: Mutex<Option<Arc<CudaStream>>>,
    module: Arc<CudaModule>,
    /// Every kernel with the most threads its blocks may have (read once: the register use fixes it).
    functions: Mutex<HashMap<String, (CudaFunction, u32)>>,
    name: String,
    ptx_hash: u64,
    sm_count: u32,
    max_threads_per_block: u32,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("name", &self.name)
            .field("ordinal", &self.ctx.ordinal())
            .finish_non_exhaustive()
    }
}

impl Gpu {
    /// The number of CUDA devices, or [`Error::NoGpu`] saying why there is none (no driver library,
    /// driver start failure, zero devices). Safe to call on machines without CUDA.
    pub fn probe() -> Result<usize> {
        // SAFETY: only checks whether the shared library can be loaded.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::NoGpu(
                "the CUDA driver library (libcuda.so) was not found; install the NVIDIA driver"
                    .into(),
            ));
        }
        cu::init().map_err(|e| Error::NoGpu(format!("the CUDA driver did not start: {e}")))?;
        match cu::device::get_count() {
            Ok(n) if n > 0 => Ok(n as usize),
            Ok(_) => Err(Error::NoGpu("the CUDA driver reports no devices".into())),
            Err(e) => Err(Error::NoGpu(format!("could not count CUDA devices: {e}"))),
        }
    }

    /// Opens device `ordinal` and loads `ptx` (the module `build.rs` embedded).
    pub fn open(ordinal: usize, ptx: &str) -> Result<Arc<Self>> {
        let count = Self::probe()?;
        if ordinal >= count {
            return Err(Error::NoGpu(format!(
                "GPU {ordinal} was asked for but only {count} device(s) exist (ordinals 0..{count})"
            )));
        }
        let ctx = Ctx::new(ordinal).cuda(|| format!("creating a context on GPU {ordinal}"))?;
        // One stream carries all the work, so cudarc's per-buffer event tracking would only add
        // launch overhead.
        // SAFETY: no buffers exist yet on this context.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().cuda(|| "creating a stream".into())?;
        let module = ctx.load_module(Ptx::from_src(ptx)).cuda(|| {
            "loading the embedded PTX module (is the driver older than the PTX version?)".into()
        })?;
        let name = ctx.name().cuda(|| "reading the device name".into())?;
        let attr = |a| {
            ctx.attribute(a)
                .cuda(|| "reading a device attribute".into())
        };
        let sm_count =
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let max_threads_per_block =
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)? as u32;
        // With lazy loading (the driver default) a kernel is loaded at its first cuModuleGetFunction, which
        // may synchronise the context: a stop kernel fetched while a wait kernel spins would deadlock.
        // So every entry is fetched, and loaded, now.
        let mut functions = HashMap::new();
        for entry in ptx_entries(ptx) {
            let f = module
                .load_function(entry)
                .cuda(|| format!("loading kernel {entry}"))?;
            let limit = block_limit(&f, entry)?;
            functions.insert(entry.to_string(), (f, limit));
        }
        Ok(Arc::new(Self {
            ctx,
            stream,
            beside: Mutex::new(None),
            module,
            functions: Mutex::new(functions),
            name,
            ptx_hash: fnv1a64(ptx.as_bytes()),
            sm_count,
            max_threads_per_block,
        }))
    }

    /// The device name, e.g. "NVIDIA H100 80GB HBM3".
    pub fn name(&self) -> &str {
        &self.name
    }

    /// FNV-1a hash of the loaded PTX: tune-cache entries of another build do not apply.
    pub fn ptx_hash(&self) -> u64 {
        self.ptx_hash
    }

    /// Streaming multiprocessors on the device.
    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    /// The most threads one block may have.
    pub fn max_threads_per_block(&self) -> u32 {
        self.max_threads_per_block
    }

    /// The CUDA context (for streams, events and pinned memory inside this crate).
    pub(crate) fn context(&self) -> &Arc<Ctx> {
        &self.ctx
    }

    /// The stream all of this GPU's work goes to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Runs `work` with the loops' kernels it queues (and the events that time them) on `stream`
    /// instead of the GPU's own: a decomposed step's boundary beside its interior. Copies stay on the
    /// GPU's stream; the caller orders `stream` against it.
    pub fn beside<R>(&self, stream: &Arc<CudaStream>, work: impl FnOnce() -> R) -> R {
        let before = self.redirect(Some(stream.clone()));
        let r = work();
        self.redirect(before);
        r
    }

    /// Sets where kernels go, returning where they went.
    fn redirect(&self, to: Option<Arc<CudaStream>>) -> Option<Arc<CudaStream>> {
        let mut at = self.beside.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *at, to)
    }

    /// The stream a loop's kernel queued now goes to: the GPU's, or the one [`beside`](Self::beside)
    /// gave.
    pub fn launch_stream(&self) -> Arc<CudaStream> {
        let at = self.beside.lock().unwrap_or_else(|e| e.into_inner());
        at.as_ref().unwrap_or(&self.stream).clone()
    }

    /// The kernel `entry` of the loaded module (looked up once, then cached) and the most threads a block
    /// of it may have.
    pub(crate) fn lookup(&self, entry: &str) -> Result<(CudaFunction, u32)> {
        let mut functions = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = functions.get(entry) {
            return Ok(f.clone());
        }
        let f = self
            .module
            .load_function(entry)
            .map_err(|_| Error::MissingKernel(entry.to_string()))?;
        let limit = block_limit(&f, entry)?;
        functions.insert(entry.to_string(), (f.clone(), limit));
        Ok((f, limit))
    }

    /// The kernel `entry` of the loaded module.
    pub fn function(&self, entry: &str) -> Result<CudaFunction> {
        Ok(self.lookup(entry)?.0)
    }

    /// The most threads a block of kernel `entry` may have (fewer than the device's limit when the
    /// kernel needs many registers).
    pub fn max_block_of(&self, entry: &str) -> Result<u32> {
        Ok(self.lookup(entry)?.1)
    }

    /// (free, total) device memory in bytes.
    pub fn memory(&self) -> Result<(u64, u64)> {
        let (free, total) = self
            .ctx
            .mem_get_info()
            .cuda(|| "reading free GPU memory".into())?;
        Ok((free as u64, total as u64))
    }

    /// Fails with [`Error::OutOfDeviceMemory`] unless `bytes` fit in the free memory with some room left
    /// for the driver: checked before allocating, so a too-large grid gives a clear error, not a crash.
    pub fn check_fits(&self, bytes: u64, what: &str) -> Result<()> {
        let (free, _) = self.memory()?;
        if bytes > free.saturating_sub(free / 32) {
            return Err(Error::OutOfDeviceMemory {
                what: what.to_string(),
                needed: bytes,
                free,
                device: self.name.clone(),
            });
        }
        Ok(())
    }

    /// Waits for all queued work, turning an asynchronous kernel failure into an error.
    pub fn synchronize(&self) -> Result<()> {
        self.stream
            .synchronize()
            .cuda(|| "waiting for GPU work to finish (a kernel failed)".into())
    }

    /// An event that records a time (for [`CudaEvent::elapsed_ms`]).
    pub fn timing_event(&self) -> Result<CudaEvent> {
        self.ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .cuda(|| "creating an event".into())
    }

    /// Milliseconds of GPU time the work queued by `work` takes, measured with events on the stream.
    pub fn time_ms(&self, work: impl FnOnce() -> Result<()>) -> Result<f64> {
        self.timed(work)?.ms()
    }

    /// The work queued by `work` between two events on the stream kernels go to
    /// ([`launch_stream`](Self::launch_stream)), without waiting for it: its time is read later
    /// ([`Timed::ms`]), so that the GPU never idles between timed kernels (a kernel started on an
    /// idle GPU can time unlike one in a stream of work).
    pub fn timed(&self, work: impl FnOnce() -> Result<()>) -> Result<Timed> {
        let (start, stop) = (self.timing_event()?, self.timing_event()?);
        let stream = self.launch_stream();
        start.record(&stream).cuda(|| "recording an event".into())?;
        work()?;
        stop.record(&stream).cuda(|| "recording an event".into())?;
        Ok(Timed { start, stop })
    }

    /// Device-to-device copy bandwidth in GB/s (bytes read plus bytes written), the median of `reps`
    /// copies of `bytes` bytes after a warm-up: the roofline figures are quoted against.
    pub fn copy_bandwidth(&self, bytes: usize, reps: usize) -> Result<f64> {
        let n = bytes / 4;
        self.check_fits(2 * n as u64 * 4, "the copy-bandwidth measurement")?;
        // Non-zero data: never time on zeros (a copy of zeros could take a faster path).
        let pattern: Vec<f32> = (0..n).map(|i| (i % 1021) as f32 + 0.5).collect();
        let src: CudaSlice<f32> = self
            .stream
            .clone_htod(&pattern)
            .cuda(|| "allocating".into())?;
        let mut dst: CudaSlice<f32> = self.stream.alloc_zeros(n).cuda(|| "allocating".into())?;
        let copy = |dst: &mut CudaSlice<f32>| {
            self.stream
                .memcpy_dtod(&src, dst)
                .cuda(|| "copying device to device".into())
        };
        copy(&mut dst)?;
        let mut times = (0..reps.max(1))
            .map(|_| self.time_ms(|| copy(&mut dst)))
            .collect::<Result<Vec<_>>>()?;
        times.sort_by(f64::total_cmp);
        let ms = times[times.len() / 2];
        Ok(2.0 * (n * 4) as f64 / (ms * 1e-3) / 1e9)
    }
}

/// The most threads a block of `f` may have.
fn block_limit(f: &CudaFunction, entry: &str) -> Result<u32> {
    let n = f
        .get_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        .cuda(|| format!("reading the block limit of kernel {entry}"))?;
    Ok(n as u32)
}

/// The kernel entry names of a PTX module (its `.visible .entry` lines).
pub fn ptx_entries(ptx: &str) -> impl Iterator<Item = &str> {
    ptx.lines().filter_map(|l| {
        let name = l.trim().strip_prefix(".visible .entry ")?;
        Some(name.trim_end_matches('(').trim())
    })
}

/// Queued work between two events ([`Gpu::timed`]).
pub struct Timed {
    start: CudaEvent,
    stop: CudaEvent,
}

impl Timed {
    /// Milliseconds between the events, once the work has run (waits for it).
    pub fn ms(&self) -> Result<f64> {
        Ok(self
            .start
            .elapsed_ms(&self.stop)
            .cuda(|| "timing GPU work (a kernel failed)".into())? as f64)
    }
}
