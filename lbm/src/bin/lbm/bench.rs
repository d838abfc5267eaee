//! `lbm bench`: MLUPs/s of every storage precision and streaming scheme on periodic cubes, and on cubes
//! holding a flow around a sphere between an inlet and an outlet (its force taken every 100 steps by
//! default, in the timing), against the device-to-device copy bandwidth measured in the same run.

use std::path::PathBuf;

use clap::Args;
use lattice_gpu_formats::csv::{numbers, write_csv};
use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::engine::Tunable;
use lattice_gpu_host::{Error as HostError, Gpu};
use lattice_gpu_kernels::lbm::{Half, Velocities};
use lattice_gpu_lbm::cases;
use lattice_gpu_lbm::geometry::{BounceBack, Obstacle, MAX_SIDE};
use lattice_gpu_lbm::solver::{check_memory, Spread};
use lattice_gpu_lbm::{Engine, Error, Geometry, Lbm, LbmStorage, Params, Result, Streaming};

use super::{Storage, VelocitiesArg};

/// `bench` runs on GPU 0; to time another, make it the visible one (CUDA_VISIBLE_DEVICES=2 lbm
/// bench).
#[derive(Args)]
pub(super) struct BenchArgs {
    /// Cubes to time.
    #[arg(long, value_delimiter = ',', default_value = "128,256,384")]
    sizes: Vec<usize>,
    /// What the cubes hold: box (periodic, a Taylor-Green flow), sphere (an open channel with a
    /// sphere, its force taken every --force-every steps), curved (the sphere, its links
    /// interpolated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "box,sphere")]
    cases: Vec<Case>,
    /// Velocity sets to time.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "d3q19")]
    velocities: Vec<VelocitiesArg>,
    /// Steps between the body's force evaluations, which the timing includes (0: none).
    #[arg(long, default_value_t = 100)]
    force_every: u64,
    /// Steps timed per configuration (after a warm-up and a block-size sweep).
    #[arg(long, default_value_t = 100)]
    steps: u64,
    /// CSV of the results.
    #[arg(long)]
    csv: Option<PathBuf>,
}

/// What a benchmark cube holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Case {
    /// Periodic on every side, a Taylor-Green flow: every cell is fluid.
    Box,
    /// An open channel along x (walls in y, periodic in z) with a sphere a quarter along it.
    Sphere,
    /// The sphere with its links interpolated (Bouzidi) instead of bounced back halfway.
    Curved,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Self::Box => "box",
            Self::Sphere => "sphere",
            Self::Curved => "curved",
        }
    }
}

/// One benchmark row: median MLUPs/s over the block sizes' best.
struct Row {
    case: Case,
    velocities: Velocities,
    size: usize,
    storage: &'static str,
    streaming: &'static str,
    /// Threads along x and y.
    block: String,
    mlups: f64,
    bytes: usize,
    gbs: f64,
    of_copy: f64,
    mem_per_cell: usize,
}

fn bench_one<S: LbmStorage>(
    gpu: &std::sync::Arc<Gpu>,
    (case, velocities): (Case, Velocities),
    n: usize,
    streaming: Streaming,
    [steps, force_every]: [u64; 2],
    copy: f64,
) -> Result<Row> {
    let dims = [n; 3];
    let engine = Engine::Device(gpu.clone());
    check_memory(
        &Lbm::<S>::footprint(dims, streaming, velocities, Spread::ONE, true, 0, false)?,
        Some(gpu),
    )?;
    let mut lbm = match case {
        // Every cell fluid, and populations that are not trivial.
        Case::Box => Lbm::<S>::new(
            &engine,
            {
                let mut g = Geometry::periodic(dims)?;
                g.set_velocities(velocities);
                g
            },
            Params::bgk(0.8),
            streaming,
            cases::taylor_green(dims, 0.02)?,
        )?,
        Case::Sphere | Case::Curved => {
            let mut g = Geometry::open_channel(dims)?;
            g.set_velocities(velocities);
            if case == Case::Curved {
                g.set_bounce_back(BounceBack::Interpolated);
            }
            let mid = n as f64 / 2.0 - 0.5;
            g.add_obstacle(&Obstacle::Sphere {
                centre: [n as f64 / 4.0, mid, mid],
                radius: n as f64 / 8.0,
            })?;
            let mut p = Params::bgk(0.8);
            p.open.velocity = [0.05, 0.0, 0.0];
            Lbm::<S>::new(&engine, g, p, streaming, |_| (1.0, [0.05, 0.0, 0.0]))?
        }
    };
    lbm.tune_block(&mut TuneCache::per_user(), false, true)?;
    // Even step counts keep the in-place lattice in the same phase.
    let timed = steps + steps % 2;
    let ms = gpu.time_ms(|| {
        for i in 1..=timed {
            lbm.step(false)?;
            if case != Case::Box && force_every > 0 && i % force_every == 0 {
                lbm.forces()?;
            }
        }
        Ok(())
    })? / timed as f64;
    lbm.run(2)?;
    // A signal ends the table here; a NaN names the configuration that produced it.
    let fix = format!(
        "the {n}^3 {} {} {} {} benchmark's flow is stable, so this is a fault of the GPU or of \
         lattice-gpu: please report it",
        case.name(),
        velocities.name(),
        S::NAME,
        streaming.name()
    );
    lbm.stop_on(lbm.verdict()?, &fix)?;
    let rate = lbm.cost().rate(ms, copy);
    Ok(Row {
        case,
        velocities,
        size: n,
        storage: S::NAME,
        streaming: streaming.name(),
        block: {
            let [bx, by] = lbm.block_shape();
            format!("{bx}x{by}")
        },
        mlups: 1e3 * rate.gpoints,
        bytes: Lbm::<S>::traffic_per_cell(velocities),
        gbs: rate.gbs,
        of_copy: rate.of_copy,
        mem_per_cell: Lbm::<S>::bytes_per_cell(streaming, velocities),
    })
}

pub(super) fn bench(a: &BenchArgs) -> Result<()> {
    // A cube's sphere, an eighth of its side in radius, needs 16 cells a side to hold a node.
    if let Some(n) = a.sizes.iter().find(|&&n| !(16..=MAX_SIDE).contains(&n)) {
        return Err(Error::InvalidParameter(format!(
            "--sizes {n}: the benchmark's cubes take 16 to {MAX_SIDE} cells a side; give e.g. \
             --sizes 128,256"
        )));
    }
    let gpu = lattice_gpu_cli::bench_gpu("lbm", 0)?;
    let copy = gpu.copy_bandwidth(1 << 30, 20)?;
    println!("GPU: {}; device-to-device copy {copy:.1} GB/s", gpu.name());
    println!(
        "case   set    size  storage streaming   block   MLUPs/s  B/cell    GB/s  of copy  B/cell held  of box"
    );
    let mut rows: Vec<Row> = Vec::new();
    for &n in &a.sizes {
        for (streaming, storage, (case, set)) in [Streaming::TwoLattice, Streaming::InPlace]
            .into_iter()
            .flat_map(|s| [Storage::F32, Storage::F64, Storage::F16].map(|p| (s, p)))
            .flat_map(|(s, p)| {
                a.velocities
                    .iter()
                    .flat_map(|v| a.cases.iter().map(move |&c| (c, v.set())))
                    .map(move |cv| (s, p, cv))
            })
        {
            let what = (case, set);
            let steps = [a.steps, a.force_every];
            let r = match storage {
                Storage::F32 => bench_one::<f32>(&gpu, what, n, streaming, steps, copy),
                Storage::F64 => bench_one::<f64>(&gpu, what, n, streaming, steps, copy),
                Storage::F16 => bench_one::<Half>(&gpu, what, n, streaming, steps, copy),
            };
            match r {
                Ok(r) => {
                    // A body against the box of the same set, size, storage and streaming.
                    let of_box = rows
                        .iter()
                        .rev()
                        .find(|b| {
                            (b.case, b.velocities, b.size, b.storage, b.streaming)
                                == (Case::Box, r.velocities, r.size, r.storage, r.streaming)
                        })
                        .filter(|_| case != Case::Box)
                        .map_or(String::new(), |b| {
                            format!("{:.1}%", 100.0 * r.mlups / b.mlups)
                        });
                    println!(
                        "{:<6} {:<6} {:<5} {:<7} {:<9} {:>7} {:>9.0} {:>7} {:>7.1} {:>7.1}% {:>12} {:>7}",
                        r.case.name(),
                        r.velocities.name(),
                        r.size,
                        r.storage,
                        r.streaming,
                        r.block,
                        r.mlups,
                        r.bytes,
                        r.gbs,
                        100.0 * r.of_copy,
                        r.mem_per_cell,
                        of_box
                    );
                    rows.push(r);
                }
                Err(Error::Host(
                    e @ (HostError::OutOfDeviceMemory { .. } | HostError::OutOfHostMemory { .. }),
                )) => {
                    println!("{n:<5} skipped: {e}")
                }
                Err(e) => return Err(e),
            }
        }
    }
    if let Some(path) = &a.csv {
        let data: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                let mut line = vec![
                    r.case.name().to_string(),
                    r.size.to_string(),
                    r.storage.into(),
                    r.streaming.into(),
                    r.block.clone(),
                ];
                line.extend(numbers(&[
                    r.mlups,
                    r.bytes as f64,
                    r.gbs,
                    r.of_copy,
                    r.mem_per_cell as f64,
                    copy,
                ]));
                line.push(r.velocities.name().into());
                line
            })
            .collect();
        let header = "case,size,storage,streaming,block,mlups,bytes_per_cell,gb_per_s,of_copy,bytes_held_per_cell,copy_gb_per_s,velocities";
        write_csv(path, header, &data)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
