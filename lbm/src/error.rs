//! The error type of the lattice-Boltzmann crate: bad parameters name the problem and the fix; GPU and
//! file errors come from the host runtime.

/// Errors of the lattice-Boltzmann crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A parameter outside the range where the method is stable or meaningful.
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
    /// A GPU, memory or size error of the host runtime.
    #[error(transparent)]
    Host(#[from] lattice_gpu_host::Error),
    /// A file could not be written.
    #[error(transparent)]
    Io(#[from] lattice_gpu_formats::IoError),
    /// What rank 0 met where only it looks (the checkpoint a run resumes from), as every other rank
    /// of a split run reports it.
    #[error("{0}")]
    OnRank0(String),
}

/// For code that answers in the host runtime's error type (work timed by
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

/// Results of the lattice-Boltzmann crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
