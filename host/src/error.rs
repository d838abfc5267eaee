//! The error type of the host runtime: every failure a user can cause or meet names the problem and,
//! where there is one, the fix.

use cudarc::driver::DriverError;

/// Errors of the host runtime.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable CUDA GPU (no driver library, no device, or the driver failed to start).
    #[error("no CUDA GPU available: {0}")]
    NoGpu(String),
    /// A CUDA driver call failed.
    #[error("CUDA error while {context}: {source}")]
    Cuda {
        /// What was being done.
        context: String,
        /// The driver's error.
        source: DriverError,
    },
    /// A kernel's module is not loaded on the GPU.
    #[error(
        "module `{module}` is not loaded on this GPU (loaded: {}): build its kernel crate with lattice_gpu_builder::Builder in build.rs, then `gpu.load(&ptx_module!(\"{module}\"))`",
        loaded.join(", ")
    )]
    MissingModule {
        /// The module asked for.
        module: String,
        /// The modules that are loaded.
        loaded: Vec<String>,
    },
    /// A module has no entry of that name.
    #[error(
        "kernel `{entry}` is not in module `{module}`, whose entries are: {}; declare it in that kernel crate with `kernel3d!({entry} => YourType)` (or `kernel2d!`) and rebuild",
        entries.join(", ")
    )]
    MissingKernel {
        /// The module looked in.
        module: String,
        /// The entry asked for.
        entry: String,
        /// The module's entries.
        entries: Vec<String>,
    },
    /// The fields would not fit in the GPU's free memory.
    #[error(
        "{what} would take {:.2} GiB of GPU memory but only {:.2} GiB are free on {device}; use a smaller grid, or a lower precision where the run offers one",
        *needed as f64 / GIB,
        *free as f64 / GIB
    )]
    OutOfDeviceMemory {
        /// What was to be allocated.
        what: String,
        /// Bytes needed.
        needed: u64,
        /// Bytes free on the device.
        free: u64,
        /// The device's name.
        device: String,
    },
    /// The fields would not fit in the host's available memory.
    #[error(
        "{what} would take {:.2} GiB of memory but only {:.2} GiB are available; use a smaller grid, or a lower precision where the run offers one",
        *needed as f64 / GIB,
        *free as f64 / GIB
    )]
    OutOfHostMemory {
        /// What was to be allocated.
        what: String,
        /// Bytes needed.
        needed: u64,
        /// Bytes available.
        free: u64,
    },
    /// A grid, range or launch shape that cannot work.
    #[error("invalid size: {0}")]
    InvalidSize(String),
    /// Settings that cannot work, alone or together: solver tolerances, a variant the halos cannot
    /// serve, a call made where it may not run.
    #[error("invalid setting: {0}")]
    InvalidSetting(String),
    /// A kernel's argument struct does not fit the memory it was to be bound to.
    #[error(transparent)]
    Bind(#[from] lattice_gpu_kernels::bind::SpanError),
    /// A check of the runtime's own state failed: a fault of lattice-gpu, not of its input.
    #[error("internal error: {0} (please report it)")]
    Internal(String),
    /// An error of the caller's code, raised inside a closure the runtime runs, kept as its message.
    #[error("{0}")]
    Caller(String),
    /// A communication library is missing, or one of its calls failed.
    #[error("communication error: {0}")]
    Comm(String),
    /// A file could not be read or written.
    #[error(transparent)]
    Io(#[from] lattice_gpu_formats::IoError),
    /// A signal asked the run to stop ([`interrupt`](crate::interrupt)), and it did after `step`.
    #[error("stopped by {signal} after step {step}; the run's results were not written")]
    Interrupted {
        /// The signal.
        signal: crate::signal::Signal,
        /// The last step done.
        step: u64,
    },
    /// The run's state turned NaN or infinite ([`health`](crate::health)); nothing was written from it.
    #[error(
        "the run diverged: {what} is {value} at {at} after step {step}, so it stopped and wrote no \
         results; {fix}"
    )]
    Diverged {
        /// The step after which the check found it.
        step: u64,
        /// What holds the value (the temperature, the velocity).
        what: String,
        /// The value: NaN, inf or -inf.
        value: f64,
        /// The cell, in the application's coordinates.
        at: String,
        /// What to change.
        fix: String,
    },
    /// A solve whose residual stopped falling (a mixed-precision solve past what its sloppy
    /// precision resolves): what stalled, where, the true residuals, and what to change.
    #[error(
        "the solve stalled: {what}, after {iterations} iterations and {updates} reliable updates \
         (true relative residual at each update: {}); {fix}",
        residuals(history)
    )]
    Stalled {
        /// What made no progress.
        what: String,
        /// Iterations run.
        iterations: u32,
        /// Reliable updates made.
        updates: u32,
        /// (iteration, true relative residual) at each reliable update.
        history: Vec<(usize, f64)>,
        /// What to change.
        fix: String,
    },
}

/// A residual history as `it: residual` pairs, the first and last few where it is long.
fn residuals(history: &[(usize, f64)]) -> String {
    let show = |h: &[(usize, f64)]| {
        h.iter()
            .map(|(i, r)| format!("{i}: {r:.3e}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match history.len() {
        0 => "none".into(),
        n if n <= 12 => show(history),
        n => format!("{} ... {}", show(&history[..4]), show(&history[n - 8..])),
    }
}

const GIB: f64 = (1u64 << 30) as f64;

/// Results of the host runtime.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attaches what was being done to a driver error.
pub(crate) trait CudaContext<T> {
    fn cuda(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> CudaContext<T> for std::result::Result<T, DriverError> {
    fn cuda(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Cuda {
            context: context(),
            source,
        })
    }
}
