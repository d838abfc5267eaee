//! One GPU: its context, the stream all work goes to, and its kernel modules: the framework's, loaded when
//! it opens, and any users' ([`Gpu::load`]), each entry resolved within its module.
//!
//! cudarc is built with `dynamic-loading`, so nothing here needs CUDA at build time; [`Gpu::probe`] finds
//! out at run time whether a driver and a device are there, before any call that would otherwise panic
//! inside cudarc's loader.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{
    result as cu, sys, CudaContext as Ctx, CudaEvent, CudaFunction, CudaModule, CudaSlice,
    CudaStream,
};
use cudarc::nvrtc::Ptx;

use crate::error::{CudaContext, Error, Result};
use crate::module::{cuda_for_isa, Module};

/// A GPU with the framework's kernels, and any users' modules, loaded.
pub struct Gpu {
    ctx: Arc<Ctx>,
    stream: Arc<CudaStream>,
    /// Where kernels go instead of `stream` while [`beside`](Self::beside) runs.
    beside: Mutex<Option<Arc<CudaStream>>>,
    /// The loaded modules by name.
    modules: Mutex<HashMap<String, Loaded>>,
    /// [`resident_blocks`](Self::resident_blocks) by launch configuration.
    residency: Mutex<HashMap<LaunchKey, (u32, bool)>>,
    name: String,
    sm_count: u32,
    max_threads_per_block: u32,
    /// Dynamic shared memory a block may have when its kernel opts in (227 KiB on an H100).
    max_shared_per_block: u32,
    /// Bytes of the fields and buffers alive on it now, and the most there were at once.
    held: (AtomicU64, AtomicU64),
}

/// A launch configuration: module, entry, threads a block, bytes of dynamic shared memory (names
/// as the kernel types give them: a lookup allocates nothing).
type LaunchKey = (&'static str, &'static str, u32, usize);

/// A module on the GPU: every kernel with the most threads its blocks may have (read once: the register
/// use fixes it), and the hash of its PTX.
struct Loaded {
    /// Kept so that the functions stay valid.
    _module: Arc<CudaModule>,
    functions: HashMap<String, (CudaFunction, u32)>,
    hash: u64,
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

    /// Opens device `ordinal` and loads the framework's module ([`Module::framework`]).
    pub fn open(ordinal: usize) -> Result<Arc<Self>> {
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
        let name = ctx.name().cuda(|| "reading the device name".into())?;
        let attr = |a| {
            ctx.attribute(a)
                .cuda(|| "reading a device attribute".into())
        };
        let sm_count =
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let max_threads_per_block =
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)? as u32;
        let max_shared_per_block =
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
                as u32;
        let gpu = Arc::new(Self {
            ctx,
            stream,
            beside: Mutex::new(None),
            modules: Mutex::new(HashMap::new()),
            residency: Mutex::new(HashMap::new()),
            name,
            sm_count,
            max_threads_per_block,
            max_shared_per_block,
            held: (AtomicU64::new(0), AtomicU64::new(0)),
        });
        gpu.load(&Module::framework())?;
        Ok(gpu)
    }

    /// Loads `module`, whose kernel types then run on this GPU's engines. Loading a module of the same
    /// name again is a no-op if its PTX is the same and an error if not.
    pub fn load(&self, module: &Module) -> Result<()> {
        let mut modules = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(loaded) = modules.get(module.name()) {
            return match loaded.hash == module.hash() {
                true => Ok(()),
                false => Err(Error::InvalidSetting(format!(
                    "a different module named `{}` is already loaded on {}: give each kernel \
                     crate its own name",
                    module.name(),
                    self.name
                ))),
            };
        }
        let cu_module = self
            .ctx
            .load_module(Ptx::from_src(module.ptx()))
            .map_err(|e| self.load_error(module, e))?;
        // With lazy loading (the driver default) a kernel is loaded at its first cuModuleGetFunction,
        // which may synchronise the context: a stop kernel fetched while a wait kernel spins would
        // deadlock. So every entry is fetched, and loaded, now.
        let mut functions = HashMap::new();
        for entry in module.entries() {
            let f = cu_module
                .load_function(entry)
                .cuda(|| format!("loading kernel {entry} of module {}", module.name()))?;
            let limit = block_limit(&f, entry)?;
            functions.insert(entry.to_string(), (f, limit));
        }
        modules.insert(
            module.name().to_string(),
            Loaded {
                _module: cu_module,
                functions,
                hash: module.hash(),
            },
        );
        Ok(())
    }

    /// Why `module` did not load, with the fix where the driver's error tells one.
    fn load_error(&self, module: &Module, e: cudarc::driver::DriverError) -> Error {
        use sys::cudaError_enum as E;
        let what = format!("module `{}`", module.name());
        let driver = driver_version();
        let needs = module.isa_version().map(|isa| (isa, cuda_for_isa(isa)));
        // Drivers report a PTX version beyond their own as unsupported or as invalid PTX.
        let too_new = e.0 == E::CUDA_ERROR_UNSUPPORTED_PTX_VERSION
            || matches!((needs, driver), (Some((_, cuda)), Some(d)) if cuda > d);
        match e.0 {
            _ if too_new => {
                let driver = driver.map_or_else(
                    || "of unknown version".into(),
                    |(major, minor)| format!("for CUDA {major}.{minor}"),
                );
                Error::NoGpu(match needs {
                    Some(((isa_major, isa_minor), (major, minor))) => format!(
                        "{what} is PTX ISA {isa_major}.{isa_minor}, which the installed driver \
                         ({driver}) cannot load: PTX ISA {isa_major}.{isa_minor} needs a driver \
                         for CUDA {major}.{minor} or newer; update the NVIDIA driver"
                    ),
                    None => format!(
                        "{what} has a PTX version the installed driver ({driver}) cannot load; \
                         update the NVIDIA driver"
                    ),
                })
            }
            E::CUDA_ERROR_NO_BINARY_FOR_GPU | E::CUDA_ERROR_INVALID_PTX => Error::NoGpu(format!(
                "{what} (built for {}) cannot run on {}: build it for this GPU's architecture or \
                 an older one (LATTICE_GPU_ARCH=sm_70 runs on every GPU from Volta on); the \
                 driver said: {e}",
                module.target().unwrap_or("an unknown target"),
                self.name
            )),
            _ => Error::Cuda {
                context: format!("loading {what}"),
                source: e,
            },
        }
    }

    /// The device name, e.g. "NVIDIA H100 80GB HBM3".
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The PTX hash of loaded module `module` ([`Module::hash`]).
    pub fn module_hash(&self, module: &str) -> Result<u64> {
        self.with_module(module, |m| Ok(m.hash))
    }

    /// Streaming multiprocessors on the device.
    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    /// The most threads one block may have.
    pub fn max_threads_per_block(&self) -> u32 {
        self.max_threads_per_block
    }

    /// The most dynamic shared memory one block may have, its kernel opting in beyond the default
    /// 48 KiB (227 KiB on an H100).
    pub fn max_shared_per_block(&self) -> usize {
        self.max_shared_per_block as usize
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

    /// Runs `f` on loaded module `module`, or names the modules there are.
    fn with_module<R>(&self, module: &str, f: impl FnOnce(&Loaded) -> Result<R>) -> Result<R> {
        let modules = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        match modules.get(module) {
            Some(m) => f(m),
            None => {
                let mut loaded: Vec<String> = modules.keys().cloned().collect();
                loaded.sort();
                Err(Error::MissingModule {
                    module: module.to_string(),
                    loaded,
                })
            }
        }
    }

    /// Kernel `entry` of module `module` and the most threads a block of it may have.
    pub(crate) fn lookup_in(&self, module: &str, entry: &str) -> Result<(CudaFunction, u32)> {
        self.with_module(module, |m| match m.functions.get(entry) {
            Some(f) => Ok(f.clone()),
            None => {
                let mut entries: Vec<String> = m.functions.keys().cloned().collect();
                entries.sort();
                Err(Error::MissingKernel {
                    module: module.to_string(),
                    entry: entry.to_string(),
                    entries,
                })
            }
        })
    }

    /// How many blocks of `threads` threads with `bytes` of dynamic shared memory an SM holds at once
    /// for kernel `entry` of `module` (the driver's occupancy calculator), and whether the kernel
    /// spills registers to local memory. Asked once per launch configuration.
    pub(crate) fn resident_blocks(
        &self,
        module: &'static str,
        entry: &'static str,
        threads: u32,
        bytes: usize,
    ) -> Result<(u32, bool)> {
        let key = (module, entry, threads, bytes);
        let mut known = self.residency.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&r) = known.get(&key) {
            return Ok(r);
        }
        let (f, _) = self.lookup_in(module, entry)?;
        allow_shared(&f, entry, bytes)?;
        let blocks = f
            .occupancy_max_active_blocks_per_multiprocessor(threads, bytes, None)
            .cuda(|| format!("reading how many blocks of kernel {entry} an SM holds"))?;
        let spills = f
            .local_size_bytes()
            .cuda(|| format!("reading the local memory of kernel {entry}"))?
            > 0;
        known.insert(key, (blocks, spills));
        Ok((blocks, spills))
    }

    /// Kernel `entry` of the framework's module and the most threads a block of it may have.
    pub(crate) fn lookup(&self, entry: &str) -> Result<(CudaFunction, u32)> {
        self.lookup_in(lattice_gpu_kernels::MODULE, entry)
    }

    /// Kernel `entry` of the framework's module.
    pub fn function(&self, entry: &str) -> Result<CudaFunction> {
        Ok(self.lookup(entry)?.0)
    }

    /// The most threads a block of the framework's kernel `entry` may have (fewer than the device's
    /// limit when the kernel needs many registers).
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

    /// The most bytes the fields and buffers of this crate held on this GPU at once since it was
    /// opened: what a run's estimate of its GPU memory is held against.
    pub fn peak_held(&self) -> u64 {
        self.held.1.load(Ordering::Relaxed)
    }

    /// Counts `bytes` allocated (`taken`) or freed.
    pub(crate) fn hold(&self, bytes: u64, taken: bool) {
        if taken {
            let now = self.held.0.fetch_add(bytes, Ordering::Relaxed) + bytes;
            self.held.1.fetch_max(now, Ordering::Relaxed);
        } else {
            self.held.0.fetch_sub(bytes, Ordering::Relaxed);
        }
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

/// The CUDA version the installed driver supports, e.g. (13, 0).
pub fn driver_version() -> Option<(u32, u32)> {
    let mut v = 0;
    // SAFETY: writes one int; callers have loaded the driver (Gpu::probe).
    let r = unsafe { sys::cuDriverGetVersion(&mut v) };
    (r == sys::cudaError_enum::CUDA_SUCCESS).then_some((v as u32 / 1000, v as u32 % 1000 / 10))
}

/// The most threads a block of `f` may have.
fn block_limit(f: &CudaFunction, entry: &str) -> Result<u32> {
    let n = f
        .get_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        .cuda(|| format!("reading the block limit of kernel {entry}"))?;
    Ok(n as u32)
}

/// Dynamic shared memory a launch may use without opting in per kernel: 48 KiB on every GPU from Volta on.
pub const MAX_DYNAMIC_SHARED_BYTES: usize = 48 * 1024;

/// Lets `function` (entry `entry`) have `bytes` of dynamic shared memory: beyond the default 48 KiB a
/// kernel must opt in (up to `Gpu::max_shared_per_block`).
pub(crate) fn allow_shared(function: &CudaFunction, entry: &str, bytes: usize) -> Result<()> {
    if bytes > MAX_DYNAMIC_SHARED_BYTES {
        function
            .set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )
            .cuda(|| format!("letting kernel {entry} have {bytes} bytes of shared memory"))?;
    }
    Ok(())
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
