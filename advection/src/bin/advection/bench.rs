//! `advection bench`: every kernel variant, tuned, on each grid against the device-to-device copy
//! bandwidth measured in the same run.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use lattice_gpu_advection::cases;
use lattice_gpu_advection::{check_size, Advection, Error, Kernel, Problem, RankMemory, Result};
use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::engine::{Cost, Variant};
use lattice_gpu_host::memory::{self, Footprint};
use lattice_gpu_host::{
    DeviceAutoTuningLoopEngine, DeviceLoopEngine, Error as HostError, Gpu, LaunchShape, LoopEngine,
};
use lattice_gpu_kernels::advection::BYTES_PER_POINT;

use super::parse_size2;

#[derive(Args)]
pub(super) struct BenchArgs {
    /// Grids NXxNY (N for a square).
    #[arg(long, value_delimiter = ',', default_value = "1024,2048,4096,8192,3000x2000", allow_hyphen_values = true, value_parser = parse_size2)]
    sizes: Vec<[usize; 2]>,
    /// Timed steps per kernel after tuning.
    #[arg(long, default_value_t = 50)]
    steps: u64,
    /// CSV of the results.
    #[arg(long)]
    csv: Option<PathBuf>,
}

/// One benchmark row.
struct Row {
    size: [usize; 2],
    kernel: String,
    shape: String,
    ms: f64,
    gpts: f64,
    of_copy: f64,
}

pub(super) fn bench(b: &BenchArgs) -> Result<()> {
    let gpu = lattice_gpu_cli::bench_gpu("advection", 0)?;
    let copy = gpu.copy_bandwidth(1 << 30, 20)?;
    println!("GPU: {}; device-to-device copy {copy:.1} GB/s; {BYTES_PER_POINT} bytes per point (f read and written, u and v read)", gpu.name());
    println!(
        "{:<10} {:<24} {:<22} {:>9} {:>10} {:>8}",
        "grid", "kernel", "launch", "ms/step", "Gpoints/s", "of copy"
    );
    let mut rows = Vec::new();
    for &size in &b.sizes {
        bench_footprint(size)?.check(Some(&gpu))?;
        let case = cases::swirl(size[0], size[1]);
        let (um, vm) = cases::max_speed(&case.u, &case.v);
        let p = Problem {
            size,
            f0: case.f0,
            u: case.u,
            v: case.v,
            c: 0.5 / um.max(vm),
        };
        let step = Cost::point(0, BYTES_PER_POINT) * (size[0] * size[1]) as f64;
        let mut time = |label: String, engine: &dyn Fn() -> Result<(f64, String)>| -> Result<()> {
            let (ms, shape) = engine()?;
            let rate = step.rate(ms, copy);
            let (gpts, of_copy) = (rate.gpoints, rate.of_copy);
            println!(
                "{:<10} {:<24} {:<22} {:>9.4} {:>10.2} {:>7.1}%",
                format!("{}x{}", size[0], size[1]),
                label,
                shape,
                ms,
                gpts,
                100.0 * of_copy
            );
            rows.push(Row {
                size,
                kernel: label,
                shape,
                ms,
                gpts,
                of_copy,
            });
            Ok(())
        };
        // The paper's baseline: one point per thread, (128, 1) blocks.
        time("plain, fixed".into(), &|| {
            let shape = LaunchShape {
                block_x: 128,
                block_y: 1,
                march: 1,
                variant: Variant::Plain,
            };
            let e = DeviceLoopEngine::new(gpu.clone(), shape);
            Ok((
                time_steps(&gpu, &e, &p, Kernel::Plain, true, b.steps)?.0,
                shape.to_string(),
            ))
        })?;
        // Each technique added in turn, then each again on rows without 128-byte padding.
        let runs = [true, false]
            .into_iter()
            .flat_map(|aligned| Kernel::ALL.map(|k| (k, aligned)));
        for (kernel, aligned) in runs {
            let label = format!(
                "{}{}, tuned",
                kernel.name(),
                if aligned { "" } else { " unaligned" }
            );
            time(label, &|| {
                let e = DeviceAutoTuningLoopEngine::new(gpu.clone(), TuneCache::in_memory())
                    .space(kernel.tune_space())
                    .reps(3);
                let (ms, best) = time_steps(&gpu, &e, &p, kernel, aligned, b.steps)?;
                Ok((ms, best.unwrap_or_else(|| "?".into())))
            })?;
        }
    }
    if let Some(path) = &b.csv {
        let lines: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    r.size[0].to_string(),
                    r.size[1].to_string(),
                    r.kernel.clone(),
                    r.shape.clone(),
                    format!("{:.6}", r.ms),
                    format!("{:.4}", r.gpts),
                    format!("{:.4}", r.of_copy),
                    format!("{copy:.1}"),
                ]
            })
            .collect();
        lattice_gpu_formats::csv::write_csv(
            path,
            "nx,ny,kernel,launch,ms_per_step,gpoints_per_s,of_copy,copy_gb_per_s",
            &lines,
        )?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The peak memory of the benchmark on a `size` grid: the swirl's arrays (f0, u and v in f64) on
/// the host, with the set-up of the kernel that uploads the most; the four arrays on the GPU.
fn bench_footprint(size: [usize; 2]) -> Result<Footprint> {
    check_size(size)?;
    let case = memory::bytes(&size, 8 * 3, "the benchmark's grid")?;
    let rank = RankMemory::of(size, 1, Kernel::Packed, true, false, true)?;
    Ok(Footprint::new(
        format!("the {} x {} advection benchmark", size[0], size[1]),
        case.saturating_add(rank.setup),
        rank.gpu,
        true,
    ))
}

/// Milliseconds per step of `kernel` on `engine` (GPU events over `steps` steps), after the auto-tuner
/// (if `engine` is one) has settled; with the launch shape it settled on.
fn time_steps<E: LoopEngine>(
    gpu: &Arc<Gpu>,
    engine: &E,
    p: &Problem,
    kernel: Kernel,
    aligned: bool,
    steps: u64,
) -> Result<(f64, Option<String>)> {
    let mut a = Advection::new(engine, p, kernel, aligned)?;
    a.step()?;
    // A tuner reports once every candidate is timed; other engines report nothing and need no wait.
    while engine.tunes() && E::tuning(a.site().info()).is_none() && a.steps() < 5000 {
        a.step()?;
    }
    a.step()?;
    let ms = gpu.time_ms(|| {
        for _ in 0..steps {
            a.step().map_err(|e| match e {
                Error::Host(h) => h,
                other => HostError::Caller(other.to_string()),
            })?;
        }
        Ok(())
    })?;
    let best = E::tuning(a.site().info()).map(|r| r.best.to_string());
    Ok((ms / steps as f64, best))
}
