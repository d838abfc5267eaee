//! The pinned nightly that compiles kernels: found through rustup, installed by it where missing.
//!
//! rustc's nvptx backend and `-Zbuild-std` need a nightly, while everything else builds on stable; so the
//! nightly is pinned here, in one place, and used for the nested kernel compile only. rustup's automatic
//! installation is often off (`RUSTUP_AUTO_INSTALL=0`), but an explicit `rustup toolchain install` works
//! there too, so the builder runs one when the toolchain or its `rust-src` is missing, and says so.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::error::{io, Error};

/// The nightly that compiles kernel crates to PTX (rustc's nvptx backend, `-Zbuild-std=core`).
pub const TOOLCHAIN: &str = "nightly-2026-05-20";

/// The command that installs [`TOOLCHAIN`] with what the kernel build needs.
pub fn install_command() -> String {
    format!("rustup toolchain install {TOOLCHAIN} --profile minimal --component rust-src")
}

/// Makes sure [`TOOLCHAIN`] and its `rust-src` are installed, installing them with rustup where not
/// (saying so as a build warning).
pub(crate) fn ensure() -> Result<(), Error> {
    if ready()? {
        return Ok(());
    }
    // Two build scripts of one build may get here at once (the framework's and a user's); rustup does
    // not guard against two installs of one toolchain, so they take turns.
    let lock_path = std::env::temp_dir().join("lattice-gpu-builder-toolchain.lock");
    let lock = File::create(&lock_path).map_err(io(format!(
        "creating the toolchain lock {}",
        lock_path.display()
    )))?;
    lock.lock()
        .map_err(io(format!("locking {}", lock_path.display())))?;
    if ready()? {
        return Ok(());
    }
    eprintln!(
        "lattice-gpu-builder: installing {TOOLCHAIN} with rust-src: {}",
        install_command()
    );
    let out = rustup()
        .args(["toolchain", "install", TOOLCHAIN])
        .args(["--profile", "minimal", "--component", "rust-src"])
        .stdin(Stdio::null())
        .output()
        .map_err(io("running rustup toolchain install"))?;
    if !out.status.success() {
        return Err(Error::Toolchain {
            problem: format!(
                "`{}` failed; run it yourself and build again. rustup said:\n{}{}",
                install_command(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        });
    }
    // Said once the toolchain is there: cargo repeats a build script's warnings when it reuses the
    // script's output, and "installing" would then read as if it happened again.
    println!(
        "cargo:warning=lattice-gpu-builder: the kernel toolchain {TOOLCHAIN} was missing and has been \
         installed (once per machine) with `{}`",
        install_command()
    );
    match ready()? {
        true => Ok(()),
        false => Err(Error::Toolchain {
            problem: format!(
                "`{}` succeeded but {TOOLCHAIN}'s rust-src is still missing; run `rustup component \
                 add rust-src --toolchain {TOOLCHAIN}` and build again",
                install_command()
            ),
        }),
    }
}

/// Whether [`TOOLCHAIN`] is installed with `rust-src`.
fn ready() -> Result<bool, Error> {
    let out = match rustup()
        .args(["run", TOOLCHAIN, "rustc", "--print", "sysroot"])
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::Toolchain {
                problem: format!(
                    "rustup was not found; the GPU kernels are compiled by the pinned nightly \
                     {TOOLCHAIN}: install rustup (https://rustup.rs), then run `{}`",
                    install_command()
                ),
            })
        }
        Err(e) => return Err(io("running rustup")(e)),
    };
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let src = sysroot.join("lib/rustlib/src/rust/library/core/Cargo.toml");
    Ok(out.status.success() && src.exists())
}

/// `rustup` with the outer build's toolchain choice removed, so that it acts on [`TOOLCHAIN`].
pub(crate) fn rustup() -> Command {
    let mut c = Command::new("rustup");
    c.env_remove("RUSTUP_TOOLCHAIN");
    c
}
