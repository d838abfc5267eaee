//! `cargo bench`: one diffusion step on the CPU engine, and with a GPU present the device kernels timed by
//! CUDA events (`iter_custom`), tuned and with the paper's fixed launch. The paper's full table is
//! `diffusion bench`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use lattice_gpu_diffusion::bench::{run_until_tuned, time_steps};
use lattice_gpu_diffusion::Problem;
use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::{
    DeviceAutoTuningLoopEngine, DeviceLoopEngine, Field, Gpu, HostLoopEngine, LaunchShape, Loop3D,
    LoopEngine,
};

fn cpu(c: &mut Criterion) {
    let problem = Problem::new([64, 64, 64], 0.1, None).unwrap();
    let shape = problem.shape::<f32>().unwrap();
    let mut f = HostLoopEngine.alloc::<f32>(shape).unwrap();
    let mut g = HostLoopEngine.alloc::<f32>(shape).unwrap();
    f.upload(&shape.embed(&problem.sine_mode::<f32>(), 0.0).unwrap())
        .unwrap();
    let mut lp = Loop3D::new(&HostLoopEngine, shape.interior_range()).unwrap();
    let mut group = c.benchmark_group("diffusion_cpu");
    group.throughput(Throughput::Elements(problem.points()));
    group.bench_function("64^3 f32 step", |b| {
        b.iter(|| {
            lp.run(&problem.update(&f, &mut g)).unwrap();
            std::mem::swap(&mut f, &mut g);
        })
    });
    group.finish();
}

fn gpu(c: &mut Criterion) {
    let gpu = match Gpu::open(0) {
        Ok(g) => g,
        Err(e) => {
            println!("diffusion_gpu skipped: {e}");
            return;
        }
    };
    let problem = Problem::new([256, 256, 256], 0.1, None).unwrap();
    let shape = problem.shape::<f32>().unwrap();
    let tuner = DeviceAutoTuningLoopEngine::new(gpu.clone(), TuneCache::in_memory());
    let fixed = DeviceLoopEngine::new(gpu.clone(), LaunchShape::FIXED);
    let mut f = tuner.alloc::<f32>(shape).unwrap();
    let mut g = tuner.alloc::<f32>(shape).unwrap();
    f.upload(&shape.embed(&problem.sine_mode::<f32>(), 0.0).unwrap())
        .unwrap();
    let mut tuned = Loop3D::new(&tuner, shape.interior_range()).unwrap();
    run_until_tuned(&mut tuned, &mut f, &mut g, &problem).unwrap();
    let mut fixed = Loop3D::new(&fixed, shape.interior_range()).unwrap();
    let mut group = c.benchmark_group("diffusion_gpu");
    group.throughput(Throughput::Elements(problem.points()));
    group.bench_function("256^3 f32 step, tuned", |b| {
        b.iter_custom(|n| {
            event_timed(n, |n| {
                time_steps(&gpu, &mut tuned, &mut f, &mut g, &problem, n, 1)
            })
        })
    });
    group.bench_function("256^3 f32 step, fixed (128,1)/march=2", |b| {
        b.iter_custom(|n| {
            event_timed(n, |n| {
                time_steps(&gpu, &mut fixed, &mut f, &mut g, &problem, n, 1)
            })
        })
    });
    group.finish();
}

/// `n` steps as criterion wants them, timed by CUDA events (ms per step from `per_step`).
fn event_timed(
    n: u64,
    per_step: impl FnOnce(usize) -> lattice_gpu_diffusion::Result<f64>,
) -> Duration {
    let ms = per_step(n as usize).unwrap();
    Duration::from_secs_f64(ms * 1e-3 * n as f64)
}

criterion_group!(benches, cpu, gpu);
criterion_main!(benches);
