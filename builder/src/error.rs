//! The builder's one error type. Each message names the problem and the fix; `Debug` prints the same
//! message, so `fn main() -> Result<(), Error>` in a build script shows it as it is.

use std::fmt;
use std::path::PathBuf;

/// Why a kernel crate could not be built to PTX.
#[non_exhaustive]
pub enum Error {
    /// The kernel crate's directory, or its `Cargo.toml`, does not exist.
    NoKernelCrate {
        /// The directory looked in.
        path: PathBuf,
    },
    /// An architecture the nvptx backend cannot target.
    Arch {
        /// The architecture asked for.
        arch: String,
        /// Where it came from (`Builder::arch` or `LATTICE_GPU_ARCH`).
        origin: &'static str,
    },
    /// The pinned nightly is missing and cannot be installed here.
    Toolchain {
        /// What went wrong.
        problem: String,
    },
    /// The kernel crate does not compile for the GPU.
    Compile {
        /// The kernel crate.
        krate: String,
        /// rustc's errors (and cargo's, where rustc said nothing), rendered.
        errors: String,
    },
    /// ptxas rejected the PTX.
    Ptxas {
        /// The module.
        module: String,
        /// ptxas' output.
        log: String,
    },
    /// A file or a program could not be used.
    Io {
        /// What was being done.
        what: String,
        /// The system's error.
        source: std::io::Error,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoKernelCrate { path } => write!(
                f,
                "no kernel crate at {}: the path given to Builder::new must be a directory holding \
                 a Cargo.toml (relative paths start at the crate whose build.rs runs the builder)",
                path.display()
            ),
            Error::Arch { arch, origin } => write!(
                f,
                "{origin} = {arch:?} is not a PTX target rustc's nvptx backend supports: use \
                 sm_70 or newer (sm_70 runs on every GPU from Volta on; sm_90 is the H100)"
            ),
            Error::Toolchain { problem } => write!(f, "{problem}"),
            Error::Compile { krate, errors } => write!(
                f,
                "kernel crate `{krate}` does not compile for the GPU (nvptx64-nvidia-cuda):\n\n\
                 {errors}"
            ),
            Error::Ptxas { module, log } => {
                write!(f, "ptxas rejected the PTX of module `{module}`:\n{log}")
            }
            Error::Io { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lattice-gpu-builder: {self}")
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Wraps an I/O error with what was being done.
pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}
