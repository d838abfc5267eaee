//! Compiles a `no_std` lattice-gpu kernel crate to PTX from any crate's `build.rs`: the role rust-cuda's
//! `cuda_builder` plays, with rustc's own nvptx backend.
//!
//! Everything else builds on stable Rust; the kernel compile alone needs the pinned nightly
//! [`TOOLCHAIN`] with `rust-src`, which the builder installs with rustup where it is missing (explicit
//! installation works where rustup's automatic installation is off), saying so in the build output.
//!
//! ```no_run
//! // build.rs of a crate whose GPU kernels live in the crate `kernels/` beside it.
//! fn main() -> Result<(), lattice_gpu_builder::Error> {
//!     lattice_gpu_builder::Builder::new("kernels").arch("sm_70").build()?;
//!     Ok(())
//! }
//! ```
//!
//! The PTX lands in `OUT_DIR` as `<crate name>.ptx` (the kernel crate's library name, with `_` for
//! `-`), where `lattice_gpu::host::ptx_module!("<crate name>")` embeds it; the host loads it with
//! `Gpu::load`. The build reruns when the kernel crate, or a local crate it depends on, changes.
//!
//! An entry exported as `name__maxnregN` gets the register cap `N` (PTX `.maxnreg`; `kernel!`'s
//! `export_name`).
//!
//! With `PTXAS` set, the module is also assembled (for `LATTICE_GPU_PTXAS_ARCH`, default sm_90), and its
//! registers and spills are reported as build warnings; ptxas rejecting it fails the build.
//! `LATTICE_GPU_ARCH` overrides [`Builder::arch`] for every module of a build.

mod compile;
mod directives;
mod error;
pub mod ptxas;
mod toolchain;

use std::path::{Path, PathBuf};

pub use compile::TARGET;
pub use error::Error;
pub use toolchain::{install_command, TOOLCHAIN};

use error::io;

/// The oldest architecture the nvptx backend supports (Volta).
pub const MIN_ARCH: u32 = 70;

/// The architecture modules are built for unless [`Builder::arch`] or `LATTICE_GPU_ARCH` says otherwise:
/// sm_70 PTX runs on every GPU from Volta on, the driver compiling it for the GPU at hand.
pub const DEFAULT_ARCH: &str = "sm_70";

/// Builds one kernel crate to PTX (see the crate documentation).
#[derive(Clone, Debug)]
#[must_use = "a Builder does nothing until `build` is called"]
pub struct Builder {
    path: PathBuf,
    arch: String,
}

/// A kernel crate built to PTX.
#[derive(Clone, Debug)]
pub struct Module {
    /// The module's name: the kernel crate's library name, which its kernel types are looked up by.
    pub name: String,
    /// The PTX file in `OUT_DIR`.
    pub ptx: PathBuf,
    /// The architecture it was built for.
    pub arch: String,
    /// What ptxas reported of each entry, when `PTXAS` is set.
    pub ptxas: Option<Vec<ptxas::EntryReport>>,
}

impl Builder {
    /// A builder for the kernel crate in directory `path`, relative to the crate whose build script runs
    /// it (or absolute).
    pub fn new(path: impl AsRef<Path>) -> Self {
        Self {
            path: path.as_ref().to_path_buf(),
            arch: DEFAULT_ARCH.to_string(),
        }
    }

    /// Builds for `arch` (`sm_70` or newer; default [`DEFAULT_ARCH`]).
    pub fn arch(mut self, arch: impl Into<String>) -> Self {
        self.arch = arch.into();
        self
    }

    /// Compiles the crate to PTX in `OUT_DIR` and tells cargo when to run the build script again.
    pub fn build(self) -> Result<Module, Error> {
        println!("cargo:rerun-if-env-changed=LATTICE_GPU_ARCH");
        println!("cargo:rerun-if-env-changed=PTXAS");
        println!("cargo:rerun-if-env-changed=LATTICE_GPU_PTXAS_ARCH");
        let out_dir =
            PathBuf::from(std::env::var_os("OUT_DIR").ok_or_else(|| Error::Toolchain {
                problem:
                    "OUT_DIR is not set: run the builder from a build script (build.rs)".into(),
            })?);
        let (arch, origin) = match std::env::var("LATTICE_GPU_ARCH") {
            Ok(a) if !a.is_empty() => (a, "LATTICE_GPU_ARCH"),
            _ => (self.arch.clone(), "Builder::arch"),
        };
        check_arch(&arch, origin)?;
        let root = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(PathBuf::new, PathBuf::from);
        let dir = root.join(&self.path);
        let manifest = dir.join("Cargo.toml");
        if !manifest.is_file() {
            println!("cargo:rerun-if-changed={}", dir.display());
            return Err(Error::NoKernelCrate { path: dir });
        }
        // Until the first build succeeds, the crate's own files are what a fix changes.
        println!("cargo:rerun-if-changed={}", manifest.display());
        println!("cargo:rerun-if-changed={}", dir.join("src").display());
        if std::env::var_os("DOCS_RS").is_some() {
            // docs.rs builds offline, without rustup's toolchains: documentation needs no kernels.
            let name = dir
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().replace('-', "_"));
            let ptx = out_dir.join(format!("{name}.ptx"));
            std::fs::write(&ptx, "").map_err(io(format!("writing {}", ptx.display())))?;
            return Ok(Module {
                name,
                ptx,
                arch,
                ptxas: None,
            });
        }
        toolchain::ensure()?;
        let compiled = compile::compile(&manifest, &arch, &nested_target_dir(&out_dir))?;
        for dir in &compiled.sources {
            for f in ["Cargo.toml", "src", "build.rs"] {
                if dir.join(f).exists() {
                    println!("cargo:rerun-if-changed={}", dir.join(f).display());
                }
            }
        }
        for w in &compiled.warnings {
            for line in w.lines().filter(|l| !l.trim().is_empty()) {
                println!("cargo:warning={}: {line}", compiled.name);
            }
        }
        let ptx = out_dir.join(format!("{}.ptx", compiled.name));
        // A temporary name, then a rename: an interrupted build never leaves half a module.
        let partial = out_dir.join(format!("{}.ptx.partial", compiled.name));
        let asm = std::fs::read_to_string(&compiled.asm)
            .map_err(io(format!("reading {}", compiled.asm.display())))?;
        std::fs::write(&partial, directives::apply(&asm))
            .map_err(io(format!("writing {}", partial.display())))?;
        std::fs::rename(&partial, &ptx).map_err(io(format!(
            "renaming {} to {}",
            partial.display(),
            ptx.display()
        )))?;
        let ptxas = check_with_ptxas(&ptx, &compiled.name)?;
        Ok(Module {
            name: compiled.name,
            ptx,
            arch,
            ptxas,
        })
    }
}

/// Refuses architectures the nvptx backend cannot target.
fn check_arch(arch: &str, origin: &'static str) -> Result<(), Error> {
    let number = arch
        .strip_prefix("sm_")
        .and_then(|v| v.trim_end_matches(['a', 'f']).parse::<u32>().ok());
    match number {
        Some(v) if v >= MIN_ARCH => Ok(()),
        _ => Err(Error::Arch {
            arch: arch.to_string(),
            origin,
        }),
    }
}

/// Where nested builds keep their files: beside the outer build's profile directories, so that the
/// debug, release and clippy builds of one target directory share one kernel build (cargo's lock on
/// that directory keeps two nested builds apart); inside `OUT_DIR` where its layout is unfamiliar.
fn nested_target_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "build"))
        .and_then(|build| build.parent()?.parent())
        .map_or_else(|| out_dir.join("ptx-build"), |t| t.join("lattice-gpu-ptx"))
}

/// Modules with at most this many entries get a warning line per entry from [`check_with_ptxas`].
const LISTED_ENTRIES: usize = 16;

/// Assembles the module with `$PTXAS`, if set, and reports each entry's registers and spills.
fn check_with_ptxas(ptx: &Path, name: &str) -> Result<Option<Vec<ptxas::EntryReport>>, Error> {
    let Some(exe) = std::env::var_os("PTXAS").filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let arch =
        std::env::var("LATTICE_GPU_PTXAS_ARCH").unwrap_or_else(|_| ptxas::DEFAULT_ARCH.into());
    let log = ptxas::assemble(Path::new(&exe), ptx, &arch, name)?;
    let report = ptxas::parse(&log);
    let spilling: Vec<_> = report.iter().filter(|e| e.stack > 0).collect();
    let most = report.iter().max_by_key(|e| e.registers);
    println!(
        "cargo:warning=ptxas {arch}: module {name}: {} entries, most registers {}, {} with a stack \
         frame or spills",
        report.len(),
        most.map_or_else(String::new, |e| format!("{} ({})", e.registers, e.name)),
        spilling.len()
    );
    // Every entry of a small module (a user's few kernels); of a large one (the framework's hundred)
    // those with a stack frame or spills, the rest in the summary line above.
    let listed: Vec<_> = match report.len() <= LISTED_ENTRIES {
        true => report.iter().collect(),
        false => spilling,
    };
    for e in listed {
        println!(
            "cargo:warning=ptxas {arch}: {name}::{}: {} registers, {}-byte stack, {} bytes spill \
             stores, {} bytes spill loads",
            e.name, e.registers, e.stack, e.spill_stores, e.spill_loads
        );
    }
    Ok(Some(report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architectures_below_volta_and_misspellings_are_refused() {
        for ok in ["sm_70", "sm_80", "sm_90", "sm_90a", "sm_100f"] {
            assert!(check_arch(ok, "Builder::arch").is_ok(), "{ok}");
        }
        for bad in ["sm_60", "sm_35", "compute_90", "90", "sm_", "sm_9x"] {
            let e = check_arch(bad, "LATTICE_GPU_ARCH").unwrap_err().to_string();
            assert!(
                e.contains(bad) && e.contains("LATTICE_GPU_ARCH") && e.contains("sm_70"),
                "{e}"
            );
        }
    }

    #[test]
    fn nested_builds_share_the_outer_target_directory() {
        assert_eq!(
            nested_target_dir(Path::new("/p/target/release/build/k-0123/out")),
            Path::new("/p/target/lattice-gpu-ptx")
        );
        assert_eq!(
            nested_target_dir(Path::new(
                "/p/target/x86_64-unknown-linux-gnu/debug/build/k-1/out"
            )),
            Path::new("/p/target/x86_64-unknown-linux-gnu/lattice-gpu-ptx")
        );
        assert_eq!(
            nested_target_dir(Path::new("/elsewhere/out")),
            Path::new("/elsewhere/out/ptx-build")
        );
    }
}
