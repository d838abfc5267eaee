//! The error type of the Poisson crate: bad input names the problem and the fix; a solve that does not
//! converge carries its residual history.

/// Errors of the Poisson crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Input that cannot work, with the fix.
    #[error("{0}")]
    Invalid(String),
    /// The solve stopped making progress or ran out of iterations.
    #[error("{what} after {iterations} iterations (relative residual {residual:.3e}, wanted {tolerance:.1e}); residual history: {history}")]
    NotConverged {
        /// Why it stopped.
        what: String,
        /// Iterations run.
        iterations: usize,
        /// The last relative residual.
        residual: f64,
        /// The tolerance asked for.
        tolerance: f64,
        /// Every 10th relative residual, for the message.
        history: String,
    },
    /// A GPU, memory or size error of the host runtime.
    #[error(transparent)]
    Host(#[from] lattice_gpu_host::Error),
}

impl From<lattice_gpu_host::solvers::cg::Stalled> for Error {
    fn from(s: lattice_gpu_host::solvers::cg::Stalled) -> Self {
        let shown: Vec<String> = s
            .history
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 10 == 0 || *i + 1 == s.history.len())
            .map(|(i, r)| format!("{i}: {r:.2e}"))
            .collect();
        Error::NotConverged {
            what: s.what,
            iterations: s.iterations,
            residual: s.history.last().copied().unwrap_or(1.0),
            tolerance: s.tolerance,
            history: shown.join(", "),
        }
    }
}

/// For code that answers in the host runtime's error type (work queued inside
/// [`LoopEngine::record`](lattice_gpu_host::LoopEngine::record) or
/// [`Gpu::time_ms`](lattice_gpu_host::Gpu::time_ms)): a host error comes back as it was, anything else
/// keeps its message.
impl From<Error> for lattice_gpu_host::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Host(h) => h,
            other => lattice_gpu_host::Error::Caller(other.to_string()),
        }
    }
}

/// Results of the Poisson crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
