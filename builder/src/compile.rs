//! The nested kernel compile: the pinned nightly's cargo builds the kernel crate for
//! `nvptx64-nvidia-cuda` as a staticlib with `--emit=asm` and fat LTO, so the `.s` it writes is one
//! self-contained PTX module and no linker is needed.
//!
//! It runs in a clean environment (the outer build's flags, wrappers and target must not leak in), with
//! `-Cpanic=immediate-abort` in `RUSTFLAGS` so that `core`, rebuilt by `-Zbuild-std`, gets it too, and
//! with `--cfg lattice_gpu_module` for the kernel crate alone: only its own entries are emitted, not those
//! of kernel crates it depends on (the framework's among them). Its JSON messages are read so that a
//! failure shows rustc's errors, not cargo's progress lines.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;

use crate::error::{io, Error};
use crate::toolchain::{rustup, TOOLCHAIN};

/// The GPU target of the nested build.
pub const TARGET: &str = "nvptx64-nvidia-cuda";

/// What a nested compile left: the PTX (`.s`) file, the crate's name, the path packages it was built
/// from (whose sources should trigger a rebuild) and the kernel crate's warnings, rendered.
pub(crate) struct Compiled {
    pub(crate) asm: PathBuf,
    pub(crate) name: String,
    pub(crate) sources: BTreeSet<PathBuf>,
    pub(crate) warnings: Vec<String>,
}

/// Variables the outer cargo (or the user's shell) sets that would change the nested build.
fn leaks(key: &str) -> bool {
    const EXACT: &[&str] = &[
        "CARGO",
        "RUSTC",
        "RUSTDOC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTFLAGS",
        "RUSTDOCFLAGS",
        "CLIPPY_ARGS",
        "CARGO_PRIMARY_PACKAGE",
        "RUSTUP_TOOLCHAIN",
    ];
    const PREFIXES: &[&str] = &[
        "CARGO_ENCODED_",
        "CARGO_BUILD_",
        "CARGO_TARGET_",
        "CARGO_PROFILE_",
    ];
    EXACT.contains(&key) || PREFIXES.iter().any(|p| key.starts_with(p))
}

/// Compiles the kernel crate whose manifest is `manifest` for `arch`, in `target_dir`.
pub(crate) fn compile(manifest: &Path, arch: &str, target_dir: &Path) -> Result<Compiled, Error> {
    let dir = manifest.parent().unwrap_or(Path::new("."));
    let mut cmd = rustup();
    cmd.args([
        "run",
        TOOLCHAIN,
        "cargo",
        "rustc",
        "--release",
        "--target",
        TARGET,
    ])
    .args(["-Zbuild-std=core", "--crate-type", "staticlib"])
    .args(["--message-format", "json"])
    .arg("--manifest-path")
    .arg(manifest)
    .arg("--target-dir")
    .arg(target_dir)
    .args(["--", "--emit=asm", "-Clto=fat", "-Ccodegen-units=1"])
    .arg(format!("-Ctarget-cpu={arch}"))
    .args(["--cfg", "lattice_gpu_module"])
    .current_dir(dir)
    .stdin(Stdio::null());
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(leaks) {
            cmd.env_remove(key);
        }
    }
    cmd.env("RUSTFLAGS", "-Zunstable-options -Cpanic=immediate-abort")
        // Without LTO in the profile cargo adds `-C embed-bitcode=no`, which rustc refuses next to `-Clto`.
        .env("CARGO_PROFILE_RELEASE_LTO", "fat")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1");
    let out = cmd.output().map_err(io(format!(
        "running the {TOOLCHAIN} cargo for the kernel build"
    )))?;

    let krate = dir
        .file_name()
        .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into());
    let manifest_key = std::fs::canonicalize(manifest).unwrap_or_else(|_| manifest.to_path_buf());
    let (mut name, mut errors, mut warnings, mut sources) =
        (None, Vec::new(), Vec::new(), BTreeSet::new());
    for msg in String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        let mine = msg["manifest_path"]
            .as_str()
            .and_then(|p| std::fs::canonicalize(p).ok())
            .is_some_and(|p| p == manifest_key);
        match msg["reason"].as_str() {
            Some("compiler-message") => {
                let rendered = msg["message"]["rendered"].as_str().unwrap_or_default();
                match msg["message"]["level"].as_str() {
                    Some("error" | "error: internal compiler error") => {
                        errors.push(rendered.to_string())
                    }
                    Some("warning") if mine => warnings.push(rendered.to_string()),
                    _ => {}
                }
            }
            Some("compiler-artifact") => {
                if mine {
                    name = msg["target"]["name"].as_str().map(|n| n.replace('-', "_"));
                }
                if let Some(p) = path_package(&msg) {
                    sources.insert(p);
                }
            }
            _ => {}
        }
    }
    if !out.status.success() {
        let errors = if errors.is_empty() {
            cargo_errors(&String::from_utf8_lossy(&out.stderr))
        } else {
            errors.concat()
        };
        return Err(Error::Compile { krate, errors });
    }
    let name = name.ok_or_else(|| Error::Compile {
        krate: krate.clone(),
        errors: format!(
            "cargo built no library target from {}: a kernel crate is a library ([lib]) crate",
            manifest.display()
        ),
    })?;
    let deps = target_dir.join(TARGET).join("release/deps");
    let asm = newest_asm(&deps, &name).ok_or_else(|| Error::Compile {
        krate,
        errors: format!("the build wrote no {name}-*.s file in {}", deps.display()),
    })?;
    Ok(Compiled {
        asm,
        name,
        sources,
        warnings,
    })
}

/// The directory of a local (path) package the build compiled, outside the toolchain's own sources.
fn path_package(msg: &Value) -> Option<PathBuf> {
    let id = msg["package_id"].as_str()?;
    let manifest = Path::new(msg["manifest_path"].as_str()?);
    let local = id.starts_with("path+file://") || id.starts_with("file://");
    let toolchain = manifest.components().any(|c| c.as_os_str() == "rustlib");
    (local && !toolchain).then(|| manifest.parent().map(Path::to_path_buf))?
}

/// cargo's own error lines (a bad manifest, a missing dependency), without its progress lines.
fn cargo_errors(stderr: &str) -> String {
    const PROGRESS: &[&str] = &[
        "Compiling",
        "Checking",
        "Updating",
        "Downloading",
        "Downloaded",
        "Blocking",
        "Finished",
        "Fresh",
        "Locking",
        "Adding",
    ];
    stderr
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !PROGRESS.iter().any(|p| t.starts_with(p))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The most recently written `.s` of crate `name` in `dir` (older hashes stay behind after a change).
fn newest_asm(dir: &Path, name: &str) -> Option<PathBuf> {
    let prefix = format!("{name}-");
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "s")
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix))
        })
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outer_builds_settings_do_not_leak_into_the_kernel_build() {
        for key in [
            "RUSTFLAGS",
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_TARGET",
            "CARGO_PROFILE_RELEASE_LTO",
            "RUSTC_WORKSPACE_WRAPPER",
            "RUSTUP_TOOLCHAIN",
            "CARGO",
        ] {
            assert!(leaks(key), "{key}");
        }
        for key in [
            "CARGO_HOME",
            "RUSTUP_HOME",
            "PATH",
            "CARGO_MAKEFLAGS",
            "HOME",
        ] {
            assert!(!leaks(key), "{key}");
        }
    }

    #[test]
    fn cargo_errors_drop_progress_lines() {
        let s = "   Compiling core v0.0.0\nerror: failed to parse manifest at `/x/Cargo.toml`\n\
                 \n    Finished `release` profile\n";
        assert_eq!(
            cargo_errors(s),
            "error: failed to parse manifest at `/x/Cargo.toml`\n"
        );
    }
}
