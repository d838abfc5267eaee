//! The builder as a user's build script runs it: a throwaway crate whose `build.rs` builds one of several
//! kernel crates (good, broken, missing) for an architecture, each case a real `cargo build`.
//!
//! Cases: a kernel crate that builds (its PTX has its own entry and not the framework's, for the
//! architecture asked for); a path that does not exist; a crate with a type error (rustc's error is
//! shown, nested cargo's progress is not, and no module is left behind); architectures below sm_70 from
//! `Builder::arch` and from `LATTICE_GPU_ARCH`; and no rustup on the PATH (the message names the
//! command that installs the toolchain).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The throwaway crate, kept between runs (in cargo's test scratch directory) so that its
/// dependencies and `core` are built once.
fn cases_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("builder-cases");
    let builder = Path::new(env!("CARGO_MANIFEST_DIR"));
    let kernels = builder.parent().unwrap().join("gpu-kernels");
    let files = [
        (
            "Cargo.toml",
            format!(
                "[package]\nname = \"cases\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
                 [workspace]\nmembers = [\"good\", \"broken\"]\n\n[build-dependencies]\nlattice-gpu-builder = {{ path = {:?} }}\n",
                builder
            ),
        ),
        ("src/lib.rs", String::new()),
        (
            "build.rs",
            "fn main() -> Result<(), lattice_gpu_builder::Error> {\n\
             \x20   println!(\"cargo:rerun-if-env-changed=CASE_PATH\");\n\
             \x20   println!(\"cargo:rerun-if-env-changed=CASE_ARCH\");\n\
             \x20   let path = std::env::var(\"CASE_PATH\").unwrap();\n\
             \x20   let arch = std::env::var(\"CASE_ARCH\").unwrap();\n\
             \x20   let m = lattice_gpu_builder::Builder::new(path).arch(arch).build()?;\n\
             \x20   std::fs::copy(&m.ptx, std::env::var(\"CASE_COPY_TO\").unwrap()).unwrap();\n\
             \x20   Ok(())\n}\n"
                .to_string(),
        ),
        (
            "good/Cargo.toml",
            format!(
                "[package]\nname = \"good-kernels\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
                 [dependencies]\nlattice-gpu-kernels = {{ path = {kernels:?} }}\n"
            ),
        ),
        (
            "good/src/lib.rs",
            "#![no_std]\n\
             use lattice_gpu_kernels::stencil::{ArrayIndex3D, FieldMut, PointUpdate3D};\n\
             #[repr(C)]\n#[derive(Clone, Copy)]\npub struct Probe { pub out: FieldMut<f32> }\n\
             impl PointUpdate3D for Probe {\n\
             \x20   type Real = f32;\n\
             \x20   fn update(&self, idx: &ArrayIndex3D) { self.out.set(idx.ix(), 1.0) }\n}\n\
             lattice_gpu_kernels::kernel3d!(probe_f32 => Probe);\n"
                .to_string(),
        ),
        (
            "broken/Cargo.toml",
            "[package]\nname = \"broken-kernels\"\nversion = \"0.0.0\"\nedition = \"2021\"\n"
                .to_string(),
        ),
        (
            "broken/src/lib.rs",
            "#![no_std]\npub fn wrong() -> u32 { \"not a number\" }\n".to_string(),
        ),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            std::fs::write(&path, text).unwrap();
        }
    }
    dir
}

/// `cargo build` of the cases crate building kernel crate `path` for `arch`, its module copied to
/// `copy_to`; `env` adds to (or, with `None`, removes from) the environment.
fn build(dir: &Path, path: &str, arch: &str, env: &[(&str, Option<&str>)]) -> Output {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.arg("build")
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env("CASE_PATH", path)
        .env("CASE_ARCH", arch)
        .env("CASE_COPY_TO", dir.join("module.ptx"))
        .env_remove("LATTICE_GPU_ARCH")
        .env_remove("PTXAS");
    for (k, v) in env {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_build_script_gets_a_module_or_an_error_naming_the_problem_and_the_fix() {
    let dir = cases_dir();
    let _ = std::fs::remove_file(dir.join("module.ptx"));

    let o = build(&dir, "missing", "sm_70", &[]);
    let e = stderr(&o);
    assert!(!o.status.success());
    assert!(
        e.contains("no kernel crate at") && e.contains("missing"),
        "{e}"
    );

    let o = build(&dir, "good", "sm_60", &[]);
    let e = stderr(&o);
    assert!(!o.status.success());
    assert!(
        e.contains("Builder::arch = \"sm_60\"") && e.contains("sm_70 or newer"),
        "{e}"
    );
    let o = build(
        &dir,
        "good",
        "sm_90",
        &[("LATTICE_GPU_ARCH", Some("sm_52"))],
    );
    let e = stderr(&o);
    assert!(!o.status.success());
    assert!(e.contains("LATTICE_GPU_ARCH = \"sm_52\""), "{e}");

    let o = build(&dir, "broken", "sm_70", &[]);
    let e = stderr(&o);
    assert!(!o.status.success());
    assert!(
        e.contains("kernel crate `broken` does not compile for the GPU")
            && e.contains("error[E0308]: mismatched types")
            && e.contains("src/lib.rs:2"),
        "{e}"
    );
    assert!(
        !e.contains("Compiling core"),
        "nested cargo's progress shown:\n{e}"
    );
    assert!(!dir.join("module.ptx").exists());
    let partial = std::fs::read_dir(dir.join("target/debug/build"))
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.path().join("out/broken_kernels.ptx").exists());
    assert!(!partial, "a module was left behind by the failed build");

    let o = build(&dir, "good", "sm_80", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let ptx = std::fs::read_to_string(dir.join("module.ptx")).unwrap();
    assert!(ptx.contains(".target sm_80"), "{ptx:.300}");
    assert!(ptx.contains(".visible .entry probe_f32("));
    // The framework's kernels belong to the framework's module, not to every module built on it.
    assert!(!ptx.contains("diffusion3d_f32"));

    // Without rustup the build stops with the command that installs the kernel toolchain. The outer
    // cargo and rustc are the toolchain's own binaries, reached without rustup's proxies.
    let cargo = PathBuf::from(std::env::var("CARGO").unwrap());
    let rustc = cargo.with_file_name("rustc");
    if rustc.exists() {
        let o = build(
            &dir,
            "good",
            "sm_75",
            &[
                ("PATH", Some("/usr/bin:/bin")),
                ("RUSTC", rustc.to_str()),
                ("RUSTUP_TOOLCHAIN", None),
            ],
        );
        let e = stderr(&o);
        assert!(!o.status.success());
        assert!(
            e.contains("rustup was not found")
                && e.contains(&lattice_gpu_builder::install_command()),
            "{e}"
        );
    }
}
