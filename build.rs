//! Compiles `gpu-kernels` to PTX (the role rust-cuda's `cuda_builder` plays) and leaves it in `OUT_DIR`
//! for `include_str!`.
//!
//! A nested cargo builds the kernel crate for `nvptx64-nvidia-cuda` as a staticlib with `--emit=asm`
//! and fat LTO, so the `.s` it writes is one self-contained PTX module and no linker is needed. It runs
//! with its own target directory and a clean environment (the outer build's flags and target must not
//! leak in). `-Cpanic=immediate-abort` goes through `RUSTFLAGS` so that `core`, rebuilt by `-Zbuild-std`,
//! gets it too. Only the kernel sources trigger a rebuild.
//!
//! `LATTICE_GPU_ARCH` picks the PTX target (default `sm_70`, which runs on every GPU from Volta on, the
//! driver compiling it for the GPU at hand); `sm_90` gives Hopper-specific code.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let root =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let kernels = root.join("gpu-kernels");
    println!("cargo:rerun-if-changed=gpu-kernels/src");
    println!("cargo:rerun-if-changed=gpu-kernels/Cargo.toml");
    println!("cargo:rerun-if-env-changed=LATTICE_GPU_ARCH");

    let arch = env::var("LATTICE_GPU_ARCH").unwrap_or_else(|_| "sm_70".into());
    if !arch.starts_with("sm_") || arch[3..].parse::<u32>().map_or(true, |v| v < 70) {
        fail(&format!(
            "LATTICE_GPU_ARCH={arch} is not a PTX target this toolchain supports; use sm_70 or newer (e.g. sm_90)"
        ));
    }
    let target_dir = out.join("ptx-build");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(&kernels)
        .args([
            "rustc",
            "--release",
            "--target",
            "nvptx64-nvidia-cuda",
            "-Zbuild-std=core",
            "--crate-type",
            "staticlib",
            "--target-dir",
        ])
        .arg(&target_dir)
        .args(["--", "--emit=asm", "-Clto=fat", "-Ccodegen-units=1"])
        .arg(format!("-Ctarget-cpu={arch}"))
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        // `cargo clippy` wraps rustc; the nested PTX build must be a plain compile.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("CLIPPY_ARGS")
        .env("RUSTFLAGS", "-Zunstable-options -Cpanic=immediate-abort")
        // Without LTO in the profile cargo adds `-C embed-bitcode=no`, which rustc refuses next to `-Clto`.
        .env("CARGO_PROFILE_RELEASE_LTO", "fat")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        .status()
        .unwrap_or_else(|e| fail(&format!("could not start cargo for the PTX build: {e}")));
    if !status.success() {
        fail("the PTX build of gpu-kernels failed (see the errors above)");
    }
    let ptx = newest_asm(&target_dir.join("nvptx64-nvidia-cuda/release/deps"))
        .unwrap_or_else(|| fail("the PTX build wrote no lattice_gpu_kernels-*.s file"));
    std::fs::copy(&ptx, out.join("lattice_gpu_kernels.ptx"))
        .unwrap_or_else(|e| fail(&format!("could not copy {}: {e}", ptx.display())));
    println!("cargo:rustc-env=LATTICE_GPU_PTX_ARCH={arch}");
}

/// The most recently written kernel `.s` (old hashes stay behind after a change).
fn newest_asm(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "s")
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("lattice_gpu_kernels-"))
        })
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
}

fn fail(msg: &str) -> ! {
    eprintln!("lattice-gpu build: {msg}");
    std::process::exit(1)
}
