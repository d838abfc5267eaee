//! `lbm bench`: MLUPs/s of every storage precision and streaming scheme on periodic cubes, against the
//! device-to-device copy bandwidth measured in the same run.

use std::path::PathBuf;

use clap::Args;
use lattice_gpu_formats::csv::{numbers, write_csv};
use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::engine::Tunable;
use lattice_gpu_host::{Error as HostError, Gpu};
use lattice_gpu_kernels::lbm::Half;
use lattice_gpu_lbm::cases;
use lattice_gpu_lbm::geometry::MAX_SIDE;
use lattice_gpu_lbm::solver::{check_memory, Spread};
use lattice_gpu_lbm::{Engine, Error, Geometry, Lbm, LbmStorage, Params, Result, Streaming};

use super::Storage;

/// `bench` runs on GPU 0; to time another, make it the visible one (CUDA_VISIBLE_DEVICES=2 lbm
/// bench).
#[derive(Args)]
pub(super) struct BenchArgs {
    /// Cubes to time.
    #[arg(long, value_delimiter = ',', default_value = "128,256,384")]
    sizes: Vec<usize>,
    /// Steps timed per configuration (after a warm-up and a block-size sweep).
    #[arg(long, default_value_t = 100)]
    steps: u64,
    /// CSV of the results.
    #[arg(long)]
    csv: Option<PathBuf>,
}

/// One benchmark row: median MLUPs/s over the block sizes' best.
struct Row {
    size: usize,
    storage: &'static str,
    streaming: &'static str,
    block: u32,
    mlups: f64,
    bytes: usize,
    gbs: f64,
    of_copy: f64,
    mem_per_cell: usize,
}

fn bench_one<S: LbmStorage>(
    gpu: &std::sync::Arc<Gpu>,
    n: usize,
    streaming: Streaming,
    steps: u64,
    copy: f64,
) -> Result<Row> {
    let dims = [n; 3];
    let engine = Engine::Device(gpu.clone());
    check_memory(
        &Lbm::<S>::footprint(dims, streaming, Spread::ONE, true, 0, false)?,
        Some(gpu),
    )?;
    // A periodic box with a Taylor-Green flow: every cell is fluid and the populations are not trivial.
    let mut lbm = Lbm::<S>::new(
        &engine,
        Geometry::periodic(dims)?,
        Params::bgk(0.8),
        streaming,
        cases::taylor_green(dims, 0.02)?,
    )?;
    lbm.tune_block(&mut TuneCache::per_user(), false, true)?;
    // Even step counts keep the in-place lattice in the same phase.
    let timed = steps + steps % 2;
    let ms = gpu.time_ms(|| {
        for _ in 0..timed {
            lbm.step(false)?;
        }
        Ok(())
    })? / timed as f64;
    lbm.run(2)?;
    // A signal ends the table here; a NaN names the configuration that produced it.
    let fix = format!(
        "the {n}^3 {} {} benchmark's Taylor-Green flow is stable, so this is a fault of the GPU or of \
         lattice-gpu: please report it",
        S::NAME,
        streaming.name()
    );
    lbm.stop_on(lbm.verdict()?, &fix)?;
    let rate = lbm.cost().rate(ms, copy);
    Ok(Row {
        size: n,
        storage: S::NAME,
        streaming: streaming.name(),
        block: lbm.block(),
        mlups: 1e3 * rate.gpoints,
        bytes: Lbm::<S>::traffic_per_cell(),
        gbs: rate.gbs,
        of_copy: rate.of_copy,
        mem_per_cell: Lbm::<S>::bytes_per_cell(streaming),
    })
}

pub(super) fn bench(a: &BenchArgs) -> Result<()> {
    // Each cube holds a Taylor-Green vortex, which needs 4 cells a side to be resolved.
    if let Some(n) = a.sizes.iter().find(|&&n| !(4..=MAX_SIDE).contains(&n)) {
        return Err(Error::InvalidParameter(format!(
            "--sizes {n}: the benchmark's cubes take 4 to {MAX_SIDE} cells a side; give e.g. \
             --sizes 128,256"
        )));
    }
    let gpu = lattice_gpu_cli::bench_gpu("lbm", 0)?;
    let copy = gpu.copy_bandwidth(1 << 30, 20)?;
    println!("GPU: {}; device-to-device copy {copy:.1} GB/s", gpu.name());
    println!("size  storage streaming block   MLUPs/s  B/cell    GB/s  of copy  B/cell held");
    let mut rows = Vec::new();
    for &n in &a.sizes {
        for streaming in [Streaming::TwoLattice, Streaming::InPlace] {
            for storage in [Storage::F32, Storage::F64, Storage::F16] {
                let r = match storage {
                    Storage::F32 => bench_one::<f32>(&gpu, n, streaming, a.steps, copy),
                    Storage::F64 => bench_one::<f64>(&gpu, n, streaming, a.steps, copy),
                    Storage::F16 => bench_one::<Half>(&gpu, n, streaming, a.steps, copy),
                };
                match r {
                    Ok(r) => {
                        println!(
                            "{:<5} {:<7} {:<9} {:>5} {:>9.0} {:>7} {:>7.1} {:>7.1}% {:>12}",
                            r.size,
                            r.storage,
                            r.streaming,
                            r.block,
                            r.mlups,
                            r.bytes,
                            r.gbs,
                            100.0 * r.of_copy,
                            r.mem_per_cell
                        );
                        rows.push(r);
                    }
                    Err(Error::Host(
                        e @ (HostError::OutOfDeviceMemory { .. }
                        | HostError::OutOfHostMemory { .. }),
                    )) => {
                        println!("{n:<5} skipped: {e}")
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
    if let Some(path) = &a.csv {
        let data: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                let mut line = vec![
                    r.size.to_string(),
                    r.storage.into(),
                    r.streaming.into(),
                    r.block.to_string(),
                ];
                line.extend(numbers(&[
                    r.mlups,
                    r.bytes as f64,
                    r.gbs,
                    r.of_copy,
                    r.mem_per_cell as f64,
                    copy,
                ]));
                line
            })
            .collect();
        let header = "size,storage,streaming,block,mlups,bytes_per_cell,gb_per_s,of_copy,bytes_held_per_cell,copy_gb_per_s";
        write_csv(path, header, &data)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
