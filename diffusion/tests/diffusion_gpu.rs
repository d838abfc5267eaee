//! The `diffusion` binary on the GPU. (The framework's GPU tests, which run the diffusion update on
//! every engine and kernel variant, are the facade's `tests/gpu.rs`.)
//!
//! Without a GPU each test prints `SKIPPED (no GPU): ...` and passes; `LATTICE_GPU_REQUIRE_GPU=1` (set by
//! scripts/gpu-check.sh) turns the skip into a failure.

use lattice_gpu_testkit as common;

/// The binary's memory estimates on the GPU engine held against the peaks it measures, on a grid of a
/// few hundred MiB (so that the fields, not the driver's share, set the host's peak). Measured on an
/// H100 (2026-11-26): host 1.14x to 1.38x of the peak (the driver's share varies), GPU 1.00x.
#[test]
fn gpu_estimates_cover_the_measured_peaks() {
    let Some(_gpu) = common::gpu("gpu_estimates_cover_the_measured_peaks") else {
        return;
    };
    common::gpu_estimates_hold(
        "LATTICE_GPU_DIFFUSION_BIN",
        env!("CARGO_BIN_EXE_diffusion"),
        "--engine device --size 384 --steps 2 --output out",
        1.5,
        1.1,
    );
}
