//! Every binary's memory estimate on the GPU engine, held against the peaks it measures: the host's
//! (VmHWM, the CUDA driver's share included) and the GPU's (what the run's own allocations held at
//! once). The CPU engine's estimates are held in each binary's own CLI tests.

mod common;

/// Runs `bin` with `args` on the GPU and holds its estimates: the host's within `host_slack` of the
/// measured peak, the GPU's within `gpu_slack`.
fn holds(var: &str, built: &str, args: &str, host_slack: f64, gpu_slack: f64) {
    let dir = common::temp_dir(&format!("memory-gpu-{}", var.to_lowercase()));
    let bin = common::binary(var, built);
    let words: Vec<&str> = args.split_whitespace().collect();
    let [est_host, est_gpu, got_host, got_gpu] = common::measured(&bin, &words, &dir);
    eprintln!(
        "{args}: host estimated {} MiB, measured {} MiB ({:.2}x); GPU estimated {} MiB, measured {} MiB ({:.2}x)",
        est_host >> 20,
        got_host >> 20,
        est_host as f64 / got_host as f64,
        est_gpu >> 20,
        got_gpu >> 20,
        est_gpu as f64 / got_gpu.max(1) as f64,
    );
    common::estimate_holds(est_host, got_host, host_slack, &format!("{args}: host"));
    common::estimate_holds(est_gpu, got_gpu, gpu_slack, &format!("{args}: GPU"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_binarys_gpu_estimates_cover_the_measured_peaks() {
    let Some(_gpu) = common::gpu("every_binarys_gpu_estimates_cover_the_measured_peaks") else {
        return;
    };
    // Grids of a few hundred MiB, so that the fields, not the driver's share, set the host's peak.
    let runs = [
        (
            "LATTICE_GPU_DIFFUSION_BIN",
            env!("CARGO_BIN_EXE_diffusion"),
            "--engine device --size 384 --steps 2 --output out",
        ),
        (
            "LATTICE_GPU_LBM_BIN",
            env!("CARGO_BIN_EXE_lbm"),
            "cavity --engine device --size 160x160x160 --steps 20 --checkpoint-every 10 --output out",
        ),
        (
            "LATTICE_GPU_ADVECTION_BIN",
            env!("CARGO_BIN_EXE_advection"),
            "translation --engine device --size 6000 --steps 4 --checkpoint-every 2 --output out",
        ),
        (
            "LATTICE_GPU_POISSON_BIN",
            env!("CARGO_BIN_EXE_poisson"),
            "--engine device --size 256 --tol 0.9 --no-level-times --output out",
        ),
        (
            "LATTICE_GPU_LQCD_BIN",
            env!("CARGO_BIN_EXE_lqcd"),
            "solve --engine device --dims 24x24x24x24 --tol 1e-5",
        ),
    ];
    // Measured on an H100 (2026-11-26): host 1.14x to 1.38x (the driver's share varies), GPU 1.00x.
    for (var, built, args) in runs {
        holds(var, built, args, 1.5, 1.1);
    }
}
