//! Helpers shared by the integration tests (each test file is its own crate and uses a part of them).
#![allow(dead_code)]

use std::io::Write;
use std::sync::Arc;

use lattice_gpu::host::{Element, Error, Gpu, Shape};
use lattice_gpu::kernels::device::math::Real;
use lattice_gpu::kernels::stencil::LoopRange;
use rand::{Rng, SeedableRng};

/// The GPU, or `None` after printing `SKIPPED (no GPU): test: why` when there is none; with
/// `LATTICE_GPU_REQUIRE_GPU=1` (set by scripts/gpu-check.sh) a missing GPU fails the test instead.
pub fn gpu(test: &str) -> Option<Arc<Gpu>> {
    match Gpu::open(0, lattice_gpu::PTX) {
        Ok(g) => Some(g),
        Err(Error::NoGpu(why))
            if std::env::var("LATTICE_GPU_REQUIRE_GPU").as_deref() != Ok("1") =>
        {
            // Straight to stderr: the test harness captures `eprintln!`, and a skip must be seen.
            let _ = writeln!(std::io::stderr(), "SKIPPED (no GPU): {test}: {why}");
            None
        }
        Err(e) => panic!("{test}: GPU required but not usable: {e}"),
    }
}

/// `len` values uniform in [-1, 1) from `seed`.
pub fn random<T: Real>(len: usize, seed: u64) -> Vec<T> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len)
        .map(|_| T::from_f64(rng.random_range(-1.0..1.0)))
        .collect()
}

/// `len` NaNs: what GPU outputs hold before a kernel writes them, so an unwritten point shows.
pub fn poison<T: Real>(len: usize) -> Vec<T> {
    vec![T::from_f64(f64::NAN); len]
}

/// Checks `got` equals `want` bit for bit inside `r` and is still NaN (untouched) outside it.
pub fn check_written<T: Element>(got: &[T], want: &[T], shape: &Shape, r: &LoopRange, what: &str) {
    let s = shape.size();
    let inside_axis = |a: usize, v: usize| (r.begin[a] as usize..r.end[a] as usize).contains(&v);
    for k in 0..s[2] {
        for j in 0..s[1] {
            for i in 0..s[0] {
                let ix = shape.index(i, j, k);
                if inside_axis(0, i) && inside_axis(1, j) && inside_axis(2, k) {
                    assert!(
                        got[ix].to_f64().to_bits() == want[ix].to_f64().to_bits(),
                        "{what}: point ({i},{j},{k}) is {:?}, host engine gives {:?}",
                        got[ix],
                        want[ix]
                    );
                } else {
                    assert!(
                        got[ix].to_f64().is_nan(),
                        "{what}: point ({i},{j},{k}) outside the range was written"
                    );
                }
            }
        }
    }
}

/// Runs an application binary with `args`: the one `$var` names where a test runs away from its build
/// tree (scripts/gpu-check.sh on the GPU machine), else `built` (cargo's `CARGO_BIN_EXE_*`). Returns
/// whether it succeeded and its stdout and stderr; a panic fails the test, since bad input must end in
/// a message, not a panic.
pub fn run_cli(var: &str, built: &str, args: &[&str]) -> (bool, String) {
    let bin = std::env::var_os(var)
        .map_or_else(|| std::path::PathBuf::from(built), std::path::PathBuf::from);
    let out = std::process::Command::new(&bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !text.contains("panicked"),
        "{} {args:?} panicked:\n{text}",
        bin.display()
    );
    (out.status.success(), text)
}

/// A fresh, empty temporary directory for test `name` (this process's own).
pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("lattice-gpu-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("a temporary directory");
    d
}

/// The number right after `key` in `text` (up to whitespace or a comma); fails the test, showing the
/// text, where there is none.
pub fn number_after(text: &str, key: &str) -> f64 {
    text.split(key)
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.trim_end_matches(',').parse().ok())
        .unwrap_or_else(|| panic!("no number after `{key}` in:\n{text}"))
}
