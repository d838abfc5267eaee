//! `poisson bench`: the time to solve the manufactured problem in each precision, layout and launch
//! against the GPU's copy bandwidth, each level's time per V-cycle against its bandwidth floor, and the
//! finest smoother alone.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use lattice_gpu_cli::{parse_size3, VariantArg};
use lattice_gpu_formats::csv::{numbers, write_csv};
use lattice_gpu_formats::IoError;
use lattice_gpu_host::engine::{Cost, Rate, Variant};
use lattice_gpu_host::memory::Footprint;
use lattice_gpu_host::{
    DeviceAutoTuningLoopEngine, DeviceLoopEngine, Error as HostError, Gpu, LaunchShape, LoopEngine,
};
use lattice_gpu_poisson::multigrid::{
    max_levels, Cycle, Layout, Smoother, COARSE_SWEEPS, FUSED_CELLS,
};
use lattice_gpu_poisson::problem::{manufactured_error, manufactured_problem, Problem};
use lattice_gpu_poisson::solver::{footprint as footprint_of, Precision, Solver};
use lattice_gpu_poisson::{Error, Result};

use super::default_cache;

#[derive(Args)]
pub(super) struct BenchArgs {
    /// Grids, comma separated: N (a cube) or NXxNYxNZ.
    #[arg(long, value_delimiter = ',', value_parser = parse_size3, default_value = "128,256")]
    sizes: Vec<[usize; 3]>,
    /// Timed solves per configuration, after an untimed one; the median counts.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Sweeps of the finest smoother timed together (per configuration).
    #[arg(long, default_value_t = 20)]
    sweeps: usize,
    /// Relative residual to reach.
    #[arg(long, allow_hyphen_values = true, default_value_t = 1e-10)]
    tol: f64,
    /// CG iteration limit.
    #[arg(long, default_value_t = 500)]
    max_iter: usize,
    /// Multigrid levels, comma separated: every configuration is timed with each [default: as many as
    /// each size allows, at most 6].
    #[arg(long, value_delimiter = ',')]
    levels: Vec<usize>,
    /// Red-black sweeps on the coarsest level (its solve).
    #[arg(long, default_value_t = COARSE_SWEEPS)]
    coarse_sweeps: usize,
    /// Smoothing sweeps before and after the coarse correction, comma separated: every configuration
    /// is timed with each.
    #[arg(long, value_delimiter = ',', default_value = "2")]
    smooth: Vec<usize>,
    /// Coarse levels of at most this many cells fused into one launch in the configuration that
    /// measures the fusion (the others launch every pass).
    #[arg(long, default_value_t = FUSED_CELLS)]
    fused_cells: usize,
    /// Only these configurations, by key: f64, mixed, aos, fixed, fused, graph, shuffle, f64-colours,
    /// colours, jacobi, f64-fused-graph, fused-graph, f64-all, all, f64-all-async, all-async
    /// [default: every one].
    #[arg(long, value_delimiter = ',')]
    configs: Vec<String>,
    /// Ignore the tune cache and tune every loop again.
    #[arg(long)]
    retune: bool,
    /// Kernel variants the tuner may pick, comma separated (kernels without any of them run their
    /// plain one; the configurations with a fixed launch run the plain ones) [default: every variant].
    #[arg(long, value_enum, value_delimiter = ',')]
    variants: Vec<VariantArg>,
    /// Also write the tables as CSV: the solves to this file, the levels and the smoother beside it
    /// (NAME-levels.csv, NAME-smoother.csv).
    #[arg(long)]
    csv: Option<PathBuf>,
}

/// One configuration of the benchmark.
#[derive(Clone, Copy)]
struct Config {
    /// What `--configs` calls it.
    key: &'static str,
    name: &'static str,
    precision: Precision,
    layout: Layout,
    tuned: bool,
    /// Coarse levels fused into one launch (`--fused-cells`).
    fused: bool,
    /// Each preconditioner application replayed as a recorded graph.
    graph: bool,
    /// The smoother.
    smoother: Smoother,
    /// The finest level stored by colour.
    colours: bool,
    /// The shuffle restriction.
    shuffle: bool,
    /// CG's scalars kept on the engine, the residual read every 10 iterations (`--cg async`).
    cg_async: bool,
}

impl Config {
    /// Its V-cycle of `levels` levels and `smooth` sweeps each way.
    fn cycle(&self, levels: usize, smooth: usize, a: &BenchArgs) -> Cycle {
        Cycle {
            levels,
            sweeps: smooth,
            layout: self.layout,
            fused_cells: if self.fused { a.fused_cells } else { 0 },
            graph: self.graph,
            smoother: self.smoother,
            colours: self.colours,
            shuffle_restrict: self.shuffle,
            coarse_sweeps: a.coarse_sweeps,
        }
    }
}

/// The plain mixed-precision configuration, which the others vary.
const MIXED: Config = Config {
    key: "mixed",
    name: "mixed, SoA, tuned",
    precision: Precision::F32,
    layout: Layout::Soa,
    tuned: true,
    fused: false,
    graph: false,
    smoother: Smoother::RedBlack,
    colours: false,
    shuffle: false,
    cg_async: false,
};

/// Each row's speed-up is over the last f64 row above it: the plain f64 one first, then each f64 row with
/// some techniques just before the mixed row with the same ones.
const CONFIGS: [Config; 16] = [
    Config {
        key: "f64",
        name: "f64 MG, SoA, tuned",
        precision: Precision::F64,
        ..MIXED
    },
    MIXED,
    Config {
        key: "aos",
        name: "mixed, AoS, tuned",
        layout: Layout::Aos,
        ..MIXED
    },
    Config {
        key: "fixed",
        name: "mixed, SoA, fixed",
        tuned: false,
        ..MIXED
    },
    Config {
        key: "fused",
        name: "mixed, SoA, tuned, fused",
        fused: true,
        ..MIXED
    },
    Config {
        key: "graph",
        name: "mixed, SoA, tuned, graph",
        graph: true,
        ..MIXED
    },
    Config {
        key: "shuffle",
        name: "mixed, SoA, tuned, shuffle",
        shuffle: true,
        ..MIXED
    },
    Config {
        key: "f64-colours",
        name: "f64 MG, SoA, tuned, by colour",
        precision: Precision::F64,
        colours: true,
        ..MIXED
    },
    Config {
        key: "colours",
        name: "mixed, SoA, tuned, by colour",
        colours: true,
        ..MIXED
    },
    Config {
        key: "jacobi",
        name: "mixed, SoA, tuned, Jacobi",
        smoother: Smoother::Jacobi,
        ..MIXED
    },
    Config {
        key: "f64-fused-graph",
        name: "f64 MG, SoA, tuned, fused, graph",
        precision: Precision::F64,
        fused: true,
        graph: true,
        ..MIXED
    },
    Config {
        key: "fused-graph",
        name: "mixed, SoA, tuned, fused, graph",
        fused: true,
        graph: true,
        ..MIXED
    },
    Config {
        key: "f64-all",
        name: "f64 MG, everything",
        precision: Precision::F64,
        fused: true,
        graph: true,
        colours: true,
        shuffle: true,
        ..MIXED
    },
    Config {
        key: "all",
        name: "mixed, everything",
        fused: true,
        graph: true,
        colours: true,
        shuffle: true,
        ..MIXED
    },
    Config {
        key: "f64-all-async",
        name: "f64 MG, everything, async",
        precision: Precision::F64,
        fused: true,
        graph: true,
        colours: true,
        shuffle: true,
        cg_async: true,
        ..MIXED
    },
    Config {
        key: "all-async",
        name: "mixed, everything, async",
        fused: true,
        graph: true,
        colours: true,
        shuffle: true,
        cg_async: true,
        ..MIXED
    },
];

/// The configurations whose levels are timed against their bandwidth floors.
const LEVELS_OF: [&str; 3] = ["mixed", "f64-all", "all"];

/// One row of the solve table.
struct SolveRow {
    size: [usize; 3],
    config: Config,
    levels: usize,
    /// Smoothing sweeps each way.
    smooth: usize,
    iterations: usize,
    vcycles: usize,
    /// Median wall seconds of the timed solves.
    seconds: f64,
    setup: f64,
    tuning: f64,
    error: f64,
}

/// One level of the level table: time per V-cycle against the floor of [`Multigrid::traffic`]'s byte
/// model at the copy bandwidth.
///
/// [`Multigrid::traffic`]: lattice_gpu_poisson::multigrid::Multigrid::traffic
struct LevelRow {
    size: [usize; 3],
    config: Config,
    smooth: usize,
    level: usize,
    cells: [usize; 3],
    launches: usize,
    ms: f64,
    bytes: f64,
    floor_ms: f64,
}

/// The finest smoother alone: milliseconds per sweep (GPU events over `--sweeps` sweeps) and the bytes of
/// [`SweepBytes`](lattice_gpu_poisson::multigrid::SweepBytes)' two models.
struct SweepRow {
    size: [usize; 3],
    config: Config,
    launch: String,
    ms: f64,
    needed: f64,
    sectors: f64,
}

impl SweepRow {
    /// The sweep's rates against `copy` GB/s, in the model of the values it must move.
    fn rate(&self, copy: f64) -> Rate {
        let sweep = Cost {
            bytes: self.needed,
            ..Cost::UNKNOWN
        };
        sweep.rate(self.ms, copy)
    }
}

fn size_name(n: [usize; 3]) -> String {
    if n[0] == n[1] && n[1] == n[2] {
        format!("{}^3", n[0])
    } else {
        format!("{}x{}x{}", n[0], n[1], n[2])
    }
}

/// Builds, tunes and times one configuration on `engine`: set-up, tuning, an untimed solve, the median
/// of `--repeats` solves, the finest smoother alone, and (with `levels`) a level-timed solve.
#[allow(clippy::too_many_arguments)]
fn bench_config<E: LoopEngine>(
    gpu: &Arc<Gpu>,
    engine: &E,
    p: &Problem,
    config: Config,
    (levels, smooth): (usize, usize),
    a: &BenchArgs,
    copy: f64,
    timed_levels: bool,
) -> Result<(SolveRow, SweepRow, Vec<LevelRow>)> {
    let cycle = config.cycle(levels, smooth, a);
    let t = Instant::now();
    let mut solver = Solver::new(engine, p, cycle, config.precision)?;
    let setup = t.elapsed().as_secs_f64();
    let t = Instant::now();
    solver.tune()?;
    let tuning = t.elapsed().as_secs_f64();
    let quiet = &mut |_: usize, _: f64| {};
    let mut solve = |solver: &mut Solver<E>| match config.cg_async {
        true => solver.solve_async(a.tol, a.max_iter, 10, quiet),
        false => solver.solve(a.tol, a.max_iter, false, quiet),
    };
    let warm = solve(&mut solver)?;
    let mut times = Vec::with_capacity(a.repeats);
    for _ in 0..a.repeats.max(1) {
        let r = solve(&mut solver)?;
        if r.iterations != warm.iterations {
            eprintln!(
                "warning: {} at {}: {} iterations, then {}: repeated solves should agree",
                config.name,
                size_name(p.n),
                warm.iterations,
                r.iterations
            );
        }
        times.push(r.seconds);
    }
    times.sort_by(f64::total_cmp);
    let error = manufactured_error(p.n, 1.0, &solver.solution()?);
    let solve = SolveRow {
        size: p.n,
        config,
        levels,
        smooth,
        iterations: warm.iterations,
        vcycles: warm.vcycles,
        seconds: times[times.len() / 2],
        setup,
        tuning,
        error,
    };
    // The smoother on the state the last solve left (finite, not trivial), after one untimed sweep.
    solver.smooth_finest(1)?;
    let sweeps = a.sweeps.max(1);
    let ms = gpu.time_ms(|| Ok(solver.smooth_finest(sweeps)?))? / sweeps as f64;
    let bytes = solver.sweep_bytes();
    let sweep = SweepRow {
        size: p.n,
        config,
        launch: solver
            .smoother_tuning()
            .map_or(LaunchShape::FIXED, |r| r.best)
            .to_string(),
        ms,
        needed: bytes.needed,
        sectors: bytes.sectors,
    };
    let mut level_rows = Vec::new();
    if timed_levels {
        let timed = solver.solve(a.tol, a.max_iter, true, quiet)?;
        for (l, (t, (_, s))) in solver.traffic().iter().zip(&timed.levels).enumerate() {
            level_rows.push(LevelRow {
                size: p.n,
                config,
                smooth,
                level: l,
                cells: t.cells,
                launches: t.launches,
                ms: 1e3 * s / timed.vcycles.max(1) as f64,
                bytes: t.bytes,
                floor_ms: 1e3 * t.bytes / (copy * 1e9),
            });
        }
    }
    Ok((solve, sweep, level_rows))
}

/// `name` with `suffix` before its extension: `bench.csv` -> `bench-levels.csv`.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let stem = path
        .file_stem()
        .map_or_else(|| "poisson-bench".into(), |s| s.to_string_lossy());
    let ext = path
        .extension()
        .map_or_else(|| "csv".into(), |e| e.to_string_lossy());
    path.with_file_name(format!("{stem}-{suffix}.{ext}"))
}

pub(super) fn bench(a: &BenchArgs) -> Result<()> {
    if a.repeats == 0 || a.sweeps == 0 {
        return Err(Error::Invalid(
            "--repeats and --sweeps must be at least 1".into(),
        ));
    }
    if let Some(bad) = a
        .configs
        .iter()
        .find(|c| !CONFIGS.iter().any(|k| k.key == c.as_str()))
    {
        let keys: Vec<&str> = CONFIGS.iter().map(|k| k.key).collect();
        return Err(Error::Invalid(format!(
            "--configs: no configuration `{bad}`; the keys are {}",
            keys.join(", ")
        )));
    }
    if a.smooth.contains(&0) || a.coarse_sweeps == 0 {
        return Err(Error::Invalid(
            "--smooth and --coarse-sweeps: every count of smoothing sweeps must be at least 1"
                .into(),
        ));
    }
    let gpu = lattice_gpu_cli::bench_gpu("poisson", 0)?;
    let copy = gpu.copy_bandwidth(1 << 30, 20)?;
    println!(
        "GPU: {}; device-to-device copy {copy:.1} GB/s; CG in f64 from x = 0 to a relative residual of {:.0e}",
        gpu.name(),
        a.tol
    );
    let mut tuner = DeviceAutoTuningLoopEngine::new(gpu.clone(), default_cache()).retune(a.retune);
    if !a.variants.is_empty() {
        let only: Vec<Variant> = a.variants.iter().map(|&v| v.into()).collect();
        tuner = tuner.variants(&only);
    }
    let fixed = DeviceLoopEngine::new(gpu.clone(), LaunchShape::FIXED);
    let (mut solves, mut sweeps, mut levels) = (Vec::new(), Vec::new(), Vec::new());
    println!(
        "{:<8} {:<28} {:>6} {:>6} {:>6} {:>8} {:>10} {:>8} {:>7} {:>8} {:>8} {:>9}",
        "size",
        "preconditioner",
        "levels",
        "smooth",
        "iters",
        "V-cycles",
        "solve ms",
        "ms/iter",
        "vs f64",
        "set-up s",
        "tuning s",
        "L2 error"
    );
    let runs = a.sizes.iter().flat_map(|&n| {
        let depths = match a.levels.is_empty() {
            true => vec![max_levels(n).min(6)],
            false => a.levels.clone(),
        };
        depths
            .into_iter()
            .flat_map(move |d| a.smooth.iter().map(move |&s| (n, d, s)))
    });
    for (n, depth, smooth) in runs {
        let chosen = CONFIGS
            .iter()
            .filter(|c| a.configs.is_empty() || a.configs.iter().any(|k| k == c.key));
        // The host holds the problem and one configuration's set-up at a time: the largest must fit
        // before the problem is made (each configuration's GPU memory is checked as it is built, and
        // one that does not fit is skipped).
        let mut host = 0u64;
        for config in chosen.clone() {
            let cycle = config.cycle(depth, smooth, a);
            let iterations = config.cg_async.then_some(a.max_iter);
            let m = footprint_of(n, &cycle, config.precision, true, iterations)?;
            host = host.max(m.host.peak());
        }
        let what = format!(
            "the {} Poisson benchmark's problem and set-up",
            size_name(n)
        );
        Footprint::new(what, host, 0, true).check(None)?;
        let p = manufactured_problem(n, 1.0, 1.0);
        let mut f64_seconds = None;
        for &config in chosen {
            macro_rules! on {
                ($engine:expr) => {
                    bench_config(
                        &gpu,
                        $engine,
                        &p,
                        config,
                        (depth, smooth),
                        a,
                        copy,
                        LEVELS_OF.contains(&config.key),
                    )
                };
            }
            // Two engine types: the call is spelled once, for each.
            let run = if config.tuned {
                on!(&tuner)
            } else {
                on!(&fixed)
            };
            let (solve, sweep, rows) = match run {
                Ok(r) => r,
                Err(Error::Host(e @ HostError::OutOfDeviceMemory { .. })) => {
                    println!("{:<8} {:<28} skipped: {e}", size_name(n), config.name);
                    continue;
                }
                Err(e) => return Err(e),
            };
            if config.precision == Precision::F64 {
                f64_seconds = Some(solve.seconds);
            }
            println!(
                "{:<8} {:<28} {:>6} {:>6} {:>6} {:>8} {:>10.2} {:>8.3} {:>7} {:>8.2} {:>8.2} {:>9.2e}",
                size_name(n),
                config.name,
                solve.levels,
                solve.smooth,
                solve.iterations,
                solve.vcycles,
                1e3 * solve.seconds,
                1e3 * solve.seconds / solve.iterations.max(1) as f64,
                f64_seconds.map_or("-".into(), |f| format!("{:.2}x", f / solve.seconds)),
                solve.setup,
                solve.tuning,
                solve.error
            );
            solves.push((solve, f64_seconds));
            sweeps.push(sweep);
            levels.extend(rows);
        }
    }
    println!();
    println!(
        "time per V-cycle on each level (a level-timed solve that waits at each change of level, so never a \
         graph; fused levels timed as their first) against its floor: the bytes its kernels must move at the \
         copy bandwidth"
    );
    println!(
        "{:<8} {:<28} {:>6} {:>5} {:>12} {:>8} {:>11} {:>11} {:>9} {:>8}",
        "size",
        "preconditioner",
        "smooth",
        "level",
        "cells",
        "launches",
        "ms/V-cycle",
        "MB/V-cycle",
        "floor ms",
        "of floor"
    );
    for r in &levels {
        println!(
            "{:<8} {:<28} {:>6} {:>5} {:>12} {:>8} {:>11.4} {:>11.2} {:>9.4} {:>8}",
            size_name(r.size),
            r.config.name,
            r.smooth,
            r.level,
            format!("{}x{}x{}", r.cells[0], r.cells[1], r.cells[2]),
            r.launches,
            r.ms,
            r.bytes / 1e6,
            r.floor_ms,
            // A fused level's time is its first level's.
            match r.ms > 0.0 {
                true => format!("{:.1}%", 100.0 * r.floor_ms / r.ms),
                false => "fused".into(),
            }
        );
    }
    println!();
    println!(
        "finest smoother alone, {} sweeps: GB/s of the values per cell a sweep must move (the coefficients: \
         4 of the symmetric operator's 7 arrays in the natural SoA layout, all 7 by colour or in AoS; b and x \
         read, x written); red-black's two half sweeps each stream whole sectors (by colour: 1.1x)",
        a.sweeps
    );
    println!(
        "{:<8} {:<28} {:<18} {:>9} {:>8} {:>8} {:>11}",
        "size", "preconditioner", "launch", "ms/sweep", "GB/s", "of copy", "sector GB/s"
    );
    for r in &sweeps {
        let rate = r.rate(copy);
        println!(
            "{:<8} {:<28} {:<18} {:>9.4} {:>8.1} {:>7.1}% {:>11.1}",
            size_name(r.size),
            r.config.name,
            r.launch,
            r.ms,
            rate.gbs,
            100.0 * rate.of_copy,
            r.sectors / (r.ms * 1e-3) / 1e9
        );
    }
    if let Some(path) = &a.csv {
        write_bench_csv(path, copy, &solves, &levels, &sweeps)?;
    }
    Ok(())
}

fn dims(n: [usize; 3]) -> Vec<String> {
    n.iter().map(|v| v.to_string()).collect()
}

fn write_bench_csv(
    path: &Path,
    copy: f64,
    solves: &[(SolveRow, Option<f64>)],
    levels: &[LevelRow],
    sweeps: &[SweepRow],
) -> Result<()> {
    let io = |e: IoError| Error::Invalid(e.to_string());
    // Each row starts with the grid and the configuration as four columns, its key first (its display
    // name has commas).
    let head = |size: [usize; 3], c: &Config| {
        let mut line = dims(size);
        line.extend([
            c.key.into(),
            match c.precision {
                Precision::F32 => "f32".into(),
                Precision::F64 => "f64".into(),
            },
            match c.layout {
                Layout::Soa => "soa".into(),
                Layout::Aos => "aos".into(),
            },
            if c.tuned { "tuned" } else { "fixed" }.into(),
        ]);
        line
    };
    let rows: Vec<Vec<String>> = solves
        .iter()
        .map(|(r, f64_seconds)| {
            let mut line = head(r.size, &r.config);
            line.extend([
                r.levels.to_string(),
                r.smooth.to_string(),
                r.iterations.to_string(),
                r.vcycles.to_string(),
            ]);
            line.extend(numbers(&[
                r.seconds,
                r.seconds / r.iterations.max(1) as f64,
                f64_seconds.map_or(f64::NAN, |f| f / r.seconds),
                r.setup,
                r.tuning,
                r.error,
                copy,
            ]));
            line
        })
        .collect();
    write_csv(
        path,
        "nx,ny,nz,config,multigrid_precision,layout,launch,levels,smooth,iterations,vcycles,solve_s,s_per_iteration,speedup_over_f64,setup_s,tuning_s,rel_l2_error,copy_gb_per_s",
        &rows,
    )
    .map_err(io)?;
    let rows: Vec<Vec<String>> = levels
        .iter()
        .map(|r| {
            let mut line = head(r.size, &r.config);
            line.push(r.smooth.to_string());
            line.push(r.level.to_string());
            line.extend(dims(r.cells));
            line.push(r.launches.to_string());
            line.extend(numbers(&[
                r.ms,
                r.bytes,
                r.floor_ms,
                r.floor_ms / r.ms,
                copy,
            ]));
            line
        })
        .collect();
    let level_path = beside(path, "levels");
    write_csv(
        &level_path,
        "nx,ny,nz,config,multigrid_precision,layout,launch,smooth,level,level_nx,level_ny,level_nz,launches_per_vcycle,ms_per_vcycle,bytes_per_vcycle,floor_ms,of_floor,copy_gb_per_s",
        &rows,
    )
    .map_err(io)?;
    let rows: Vec<Vec<String>> = sweeps
        .iter()
        .map(|r| {
            let mut line = head(r.size, &r.config);
            line.push(format!("\"{}\"", r.launch));
            let rate = r.rate(copy);
            line.extend(numbers(&[
                r.ms,
                r.needed,
                rate.gbs,
                rate.of_copy,
                r.sectors / (r.ms * 1e-3) / 1e9,
                copy,
            ]));
            line
        })
        .collect();
    let sweep_path = beside(path, "smoother");
    write_csv(
        &sweep_path,
        "nx,ny,nz,config,multigrid_precision,layout,launch,launch_shape,ms_per_sweep,bytes_needed_per_sweep,gb_per_s,of_copy,sector_gb_per_s,copy_gb_per_s",
        &rows,
    )
    .map_err(io)?;
    println!(
        "wrote {}, {} and {}",
        path.display(),
        level_path.display(),
        sweep_path.display()
    );
    Ok(())
}
