//! The error type of the advection crate: bad input names the problem and the fix.

/// Errors of the advection crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Input that cannot work (sizes, CFL, non-finite values), with the fix.
    #[error("{0}")]
    Invalid(String),
    /// A GPU, memory or size error of the host runtime.
    #[error(transparent)]
    Host(#[from] lattice_gpu_host::Error),
    /// A file could not be read or written.
    #[error(transparent)]
    Io(#[from] lattice_gpu_formats::IoError),
}

/// Results of the advection crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
