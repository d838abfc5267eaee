//! The error type of the lattice-QCD crate: every failure a user can cause names the problem and the fix.

use std::path::PathBuf;

/// Errors of the lattice-QCD crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Lattice dimensions that cannot work (zero, odd, too large).
    #[error("invalid lattice dimensions {dims:?}: {why}")]
    InvalidDims {
        /// The dimensions given, `[X, Y, Z, T]`.
        dims: [usize; 4],
        /// What is wrong and how to fix it.
        why: String,
    },
    /// A parameter outside its valid range (kappa, tolerance, iterations, ...).
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
    /// The solver stopped at its iteration limit.
    #[error(
        "BiCGStab did not converge in {iterations} iterations: relative residual {residual:.3e} (asked for {tolerance:.1e}); residual history (iteration, residual): {}; raise --max-iter, loosen --tol, or lower kappa (kappa_c is about 0.125 on a free field)",
        fmt_history(history)
    )]
    NotConverged {
        /// Iterations run.
        iterations: usize,
        /// The last relative residual.
        residual: f64,
        /// The tolerance asked for.
        tolerance: f64,
        /// (iteration, relative residual) pairs recorded during the solve.
        history: Vec<(usize, f64)>,
    },
    /// BiCGStab broke down (a denominator or rho vanished), so going on would give NaNs.
    #[error("BiCGStab broke down at iteration {iteration}: {what}; try a different source or kappa, or f64")]
    Breakdown {
        /// The iteration where it happened.
        iteration: usize,
        /// Which quantity vanished.
        what: String,
    },
    /// A result (the plaquette, a solution, the correlator) came out NaN or infinite: it is neither
    /// printed nor written, since a wrong number reported as a result is worse than none.
    #[error("{what} is {value} at {at}, so nothing was printed or written from it; {fix}")]
    NonFinite {
        /// The quantity, e.g. "the plaquette".
        what: String,
        /// The value: NaN, inf or -inf.
        value: f64,
        /// Where, in the lattice's coordinates.
        at: String,
        /// What to change.
        fix: String,
    },
    /// A gauge-configuration file that cannot be read as ILDG/LIME.
    #[error("{}: {problem}", path.display())]
    GaugeFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// An error of the GPU runtime (no GPU, CUDA failure, out of memory).
    #[error(transparent)]
    Host(#[from] lattice_gpu_host::Error),
}

fn fmt_history(h: &[(usize, f64)]) -> String {
    h.iter()
        .map(|(i, r)| format!("{i}: {r:.2e}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A file the host's I/O layer could not read or write (it names the file and the fix).
impl From<lattice_gpu_formats::IoError> for Error {
    fn from(e: lattice_gpu_formats::IoError) -> Self {
        Error::Host(e.into())
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// For code that answers in the host runtime's error type (a [`DeviceOperator`] of the solver): a host
/// error comes back as it was, anything else keeps its message.
///
/// [`DeviceOperator`]: lattice_gpu_host::solvers::bicgstab::DeviceOperator
impl From<Error> for lattice_gpu_host::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Host(h) => h,
            other => lattice_gpu_host::Error::Caller(other.to_string()),
        }
    }
}
