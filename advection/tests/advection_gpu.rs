//! The advection kernels on the GPU: every variant and unroll factor against the CPU engine on an odd
//! grid (333 x 257) with the output poisoned first, many steps against the f64 reference, and the
//! auto-tuner's pick.
//!
//! Without a GPU each test prints `SKIPPED (no GPU): ...` and passes; `LATTICE_GPU_REQUIRE_GPU=1` (set by
//! scripts/gpu-check.sh) turns the skip into a failure.

use lattice_gpu_advection::norms::norms;
use lattice_gpu_advection::{cases, reference, Advection, Kernel, Problem};
use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::engine::Variant;
use lattice_gpu_host::{DeviceAutoTuningLoopEngine, DeviceLoopEngine, HostLoopEngine, LaunchShape};

use common::gpu;
use lattice_gpu_testkit as common;

/// The swirl on a 333 x 257 grid at CFL 0.9, with a little noise so that every node matters.
fn problem() -> Problem {
    let (nx, ny) = (333, 257);
    let case = cases::swirl(nx, ny);
    let (um, vm) = cases::max_speed(&case.u, &case.v);
    let noise = common::random::<f64>(nx * ny, 17);
    Problem {
        size: [nx, ny],
        f0: case
            .f0
            .iter()
            .zip(&noise)
            .map(|(f, n)| f + 0.01 * n)
            .collect(),
        u: case.u,
        v: case.v,
        c: 0.9 / um.max(vm),
    }
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            if x.is_nan() || y.is_nan() {
                f64::INFINITY
            } else {
                (x - y).abs()
            }
        })
        .fold(0.0, f64::max)
}

#[test]
fn every_variant_and_unroll_matches_the_cpu_engine() {
    let Some(gpu) = gpu("every_variant_and_unroll_matches_the_cpu_engine") else {
        return;
    };
    let p = problem();
    let host = HostLoopEngine;
    let mut want = Advection::new(&host, &p, Kernel::Plain, true).unwrap();
    want.step().unwrap();
    let want = want.field().unwrap();
    let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    for kernel in Kernel::ALL {
        let marches: &[u32] = if kernel.queued() {
            &[4, 8, 16, 32, 5]
        } else {
            &[1, 2, 8]
        };
        for &march in marches {
            for (bx, by) in [(32, 4), (128, 1), (64, 16), (4, 2)] {
                for aligned in [true, false] {
                    let shape = LaunchShape {
                        block_x: bx,
                        block_y: by,
                        march,
                        variant: Variant::Plain,
                    };
                    let engine = DeviceLoopEngine::new(gpu.clone(), shape);
                    let mut a = Advection::new(&engine, &p, kernel, aligned).unwrap();
                    a.poison_output().unwrap();
                    if let Err(e) = a.step() {
                        // A kernel with many registers takes fewer threads per block than the GPU's
                        // 1024: refused by name, never a launch failure.
                        let e = e.to_string();
                        assert!(
                            bx * by > 512 && e.contains("threads per block"),
                            "{} ({bx},{by})/march={march}: {e}",
                            kernel.name()
                        );
                        continue;
                    }
                    let got = a.field().unwrap();
                    let d = max_diff(&got, &want);
                    // The plain kernel is the CPU engine's update: the same bits. The queue kernels use
                    // the Newton form of the same cubics: f32 rounding apart.
                    let limit = if kernel.queued() { 2e-6 * scale } else { 0.0 };
                    assert!(
                        d <= limit,
                        "{} ({bx},{by})/march={march} aligned={aligned}: max difference {d:e}",
                        kernel.name()
                    );
                }
            }
        }
    }
}

#[test]
fn many_steps_agree_with_the_f64_reference() {
    let Some(gpu) = gpu("many_steps_agree_with_the_f64_reference") else {
        return;
    };
    let p = problem();
    let steps = 200;
    let [nx, ny] = p.size;
    let mut want = p.f0.iter().map(|&x| x as f32 as f64).collect::<Vec<_>>();
    for _ in 0..steps {
        want = reference::step(nx, ny, &want, &p.u, &p.v, p.c);
    }
    for kernel in Kernel::ALL {
        let tuner = DeviceAutoTuningLoopEngine::new(gpu.clone(), TuneCache::in_memory())
            .space(kernel.tune_space())
            .reps(1);
        let mut a = Advection::new(&tuner, &p, kernel, true).unwrap();
        for _ in 0..steps {
            a.step().unwrap();
        }
        let got = a.field().unwrap();
        let n = norms(&got, &want);
        assert!(
            n.relative < 1e-5,
            "{}: relative L2 {:e} after {steps} steps",
            kernel.name(),
            n.relative
        );
        let tuned = a.site().info().report().map(|r| r.best.to_string());
        assert!(
            tuned.is_some(),
            "{}: the tuner finished within {steps} steps",
            kernel.name()
        );
    }
}

/// The binary's memory estimates on the GPU engine held against the peaks it measures, on a grid of a
/// few hundred MiB (so that the fields, not the driver's share, set the host's peak). Measured on an
/// H100 (2026-11-26): host 1.14x to 1.38x of the peak (the driver's share varies), GPU 1.00x.
#[test]
fn gpu_estimates_cover_the_measured_peaks() {
    let Some(_gpu) = common::gpu("gpu_estimates_cover_the_measured_peaks") else {
        return;
    };
    common::gpu_estimates_hold(
        "LATTICE_GPU_ADVECTION_BIN",
        env!("CARGO_BIN_EXE_advection"),
        "translation --engine device --size 6000 --steps 4 --checkpoint-every 2 --output out",
        1.5,
        1.1,
    );
}
