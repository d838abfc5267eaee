//! `advection`: cubic semi-Lagrangian advection of a 2-D field (GPU Challenge 2010) on the GPU, auto-tuned,
//! or on the CPU: translation, solid-body rotation, a steady swirl, or your own field and velocities; and
//! the benchmark of the paper's techniques against the copy bandwidth.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use lattice_gpu::advection::cases::{self, Case};
use lattice_gpu::advection::norms::{mass_drift, norms};
use lattice_gpu::advection::{Advection, Error, Halos, Kernel, Problem, Result};
use lattice_gpu::cli::{make_output_dir, parse_dims, progress, unfinished_tuning, Placement};
use lattice_gpu::host::comm::{Communicator, Solo};
use lattice_gpu::host::engine::tunecache::TuneCache;
use lattice_gpu::host::engine::Variant;
use lattice_gpu::host::io::npy::{read_npy, write_npy};
use lattice_gpu::host::io::png::{write_png_scaled, ColorMap};
use lattice_gpu::host::{
    DeviceAutoTuningLoopEngine, DeviceLoopEngine, Error as HostError, Gpu, HostLoopEngine,
    LaunchShape, LoopEngine,
};

/// Cubic semi-Lagrangian advection of a 2-D field on the GPU (or the CPU without one).
#[derive(Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A Gaussian hill carried by a constant velocity (exact answer known).
    Translation(RunArgs),
    /// A Gaussian hill in solid-body rotation about the centre (exact answer after whole revolutions).
    Rotation(RunArgs),
    /// A Gaussian hill in a steady deformational flow from a stream function.
    Swirl(RunArgs),
    /// Your own field (`--field f.npy`, shape (ny, nx)) and velocities (`--velocity uv.npy`, (ny, nx, 2)).
    File(FileArgs),
    /// Grid points per second of every kernel variant, auto-tuned, against the copy bandwidth.
    Bench(BenchArgs),
}

#[derive(Args, Clone)]
struct Common {
    /// Nodes NXxNY (or N for a square).
    #[arg(long, default_value = "1024", value_parser = parse_size2)]
    size: [usize; 2],
    /// Steps (default: one revolution for `rotation`, 1000 otherwise).
    #[arg(long)]
    steps: Option<u64>,
    /// Revolutions (rotation only; replaces --steps).
    #[arg(long, allow_hyphen_values = true)]
    revolutions: Option<f64>,
    /// CFL number of the largest velocity, which sets dt.
    #[arg(long, allow_hyphen_values = true, default_value_t = 0.5)]
    cfl: f64,
    /// Time step instead of --cfl.
    #[arg(long, allow_hyphen_values = true)]
    dt: Option<f64>,
    /// Kernel variant: plain, queue, branch-free, packed, shared (each adds one technique).
    #[arg(long, default_value = "packed", value_parser = parse_kernel)]
    kernel: Kernel,
    /// Where to run: the GPU with the launch shape (and unroll factor, unless --unroll gives one)
    /// tuned and cached, `device` with `--block` and `--unroll` as given, or the CPU.
    #[arg(long, value_enum, default_value_t = Placement::Auto)]
    engine: Placement,
    /// Block shape XxY for --engine device [default: 128x1].
    #[arg(long, value_parser = lattice_gpu::cli::parse_block)]
    block: Option<(u32, u32)>,
    /// Points per thread (the unroll factor): `auto` (tuned; 8 for --engine device) or a number.
    #[arg(long, default_value = "auto", value_parser = parse_unroll)]
    unroll: Unroll,
    /// Tune again even where the tune cache has a result.
    #[arg(long)]
    retune: bool,
    /// Output directory.
    #[arg(long, default_value = "advection-out")]
    output: PathBuf,
    /// Also write a PNG every N steps.
    #[arg(long)]
    png_every: Option<u64>,
    /// Split the grid along y over the ranks of the MPI job this process belongs to (start it with
    /// `mpirun -np N`); rank 0 prints and writes. Needs a build with `--features mpi`.
    #[arg(long)]
    mpi: bool,
    #[command(flatten)]
    split: lattice_gpu::cli::SplitArgs,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    common: Common,
    /// Velocity (translation), as UxV.
    #[arg(long, default_value = "0.3x0.2", value_parser = parse_velocity)]
    velocity: [f64; 2],
}

#[derive(Args)]
struct FileArgs {
    #[command(flatten)]
    common: Common,
    /// Initial field, .npy of shape (ny, nx).
    #[arg(long)]
    field: PathBuf,
    /// Velocities, .npy of shape (ny, nx, 2): u then v per node.
    #[arg(long)]
    velocity: PathBuf,
    /// Node spacing.
    #[arg(long, allow_hyphen_values = true, default_value_t = 1.0)]
    h: f64,
}

#[derive(Args)]
struct BenchArgs {
    /// Grids NXxNY (N for a square).
    #[arg(long, value_delimiter = ',', default_value = "1024,2048,4096,8192,3000x2000", value_parser = parse_size2)]
    sizes: Vec<[usize; 2]>,
    /// Timed steps per kernel after tuning.
    #[arg(long, default_value_t = 50)]
    steps: u64,
    /// CSV of the results.
    #[arg(long)]
    csv: Option<PathBuf>,
}

fn parse_size2(s: &str) -> std::result::Result<[usize; 2], String> {
    match parse_dims(s)?.as_slice() {
        [n] => Ok([*n, *n]),
        [x, y] => Ok([*x, *y]),
        _ => Err(format!(
            "size `{s}` must be N or NXxNY (e.g. 4096 or 3000x2000)"
        )),
    }
}

fn parse_kernel(s: &str) -> std::result::Result<Kernel, String> {
    Kernel::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Kernel::ALL.iter().map(|k| k.name()).collect();
        format!("unknown kernel `{s}`; use one of {}", names.join(", "))
    })
}

fn parse_velocity(s: &str) -> std::result::Result<[f64; 2], String> {
    let parts: Vec<&str> = s.split(['x', 'X', ',']).collect();
    match parts.as_slice() {
        [a, b] => match (a.trim().parse(), b.trim().parse()) {
            (Ok(u), Ok(v)) => Ok([u, v]),
            _ => Err(format!(
                "velocity `{s}` must be two numbers UxV (e.g. 0.3x-0.2)"
            )),
        },
        _ => Err(format!(
            "velocity `{s}` must be two numbers UxV (e.g. 0.3x-0.2)"
        )),
    }
}

/// The time step and step count a run's options give for `case`.
fn time_stepping(c: &Common, case: &Case) -> Result<(f64, u64)> {
    let (um, vm) = cases::max_speed(&case.u, &case.v);
    let speed = um.max(vm);
    let dt = match c.dt {
        Some(dt) => dt,
        None if c.cfl > 0.0 && c.cfl.is_finite() && speed > 0.0 => c.cfl * case.h / speed,
        None => {
            return Err(Error::Invalid(format!(
                "--cfl {} must be positive (and the flow must move); or give --dt",
                c.cfl
            )))
        }
    };
    let steps = match (c.revolutions, case.period) {
        (Some(r), Some(period)) if r > 0.0 => {
            // Whole steps landing exactly on the revolutions, so the exact answer applies.
            let n = (r * period / dt).ceil().max(1.0);
            return Ok((r * period / n, n as u64));
        }
        (Some(_), None) => {
            return Err(Error::Invalid(
                "--revolutions applies to the rotation case only".into(),
            ))
        }
        (Some(r), _) => {
            return Err(Error::Invalid(format!(
                "--revolutions {r} must be positive"
            )))
        }
        (None, Some(period)) if c.steps.is_none() => {
            let n = (period / dt).ceil().max(1.0);
            return Ok((period / n, n as u64));
        }
        (None, _) => c.steps.unwrap_or(1000),
    };
    Ok((dt, steps))
}

fn run_case(c: &Common, case: Case, title: &str) -> Result<()> {
    c.split.check_launch(c.mpi).map_err(Error::Invalid)?;
    if let Some(n) = c.split.halo.gpus {
        return lattice_gpu::cli::on_gpus(n as usize, usize::MAX, "TODO(issue 34 A.5)", |comm| {
            run_case_on(c, &case, title, comm)
        });
    }
    if !c.mpi {
        return run_case_on(c, &case, title, &Solo);
    }
    #[cfg(feature = "mpi")]
    {
        run_case_on(c, &case, title, &lattice_gpu::host::comm::Mpi::init()?)
    }
    #[cfg(not(feature = "mpi"))]
    Err(Error::Invalid(lattice_gpu::cli::NO_MPI.into()))
}

fn run_case_on<C: Communicator>(c: &Common, case: &Case, title: &str, comm: &C) -> Result<()> {
    lattice_gpu::cli::same_options(comm).map_err(Error::Invalid)?;
    let lead = comm.rank() == 0;
    let (dt, steps) = time_stepping(c, case)?;
    let p = Problem {
        size: [case.nx, case.ny],
        f0: case.f0.clone(),
        u: case.u.clone(),
        v: case.v.clone(),
        c: dt / case.h,
    };
    p.check()?;
    if c.block.is_some() && c.engine != Placement::Device {
        return Err(Error::Invalid(
            "--block fixes the launch shape of --engine device; add --engine device, or leave it \
             out for the auto-tuner to choose"
                .into(),
        ));
    }
    let gpu = c.engine.gpu("on the CPU engine")?;
    c.split.halo.check(gpu.is_some()).map_err(Error::Invalid)?;
    #[cfg(feature = "nccl")]
    let nccl = c.split.communicator(comm, gpu.as_ref())?;
    #[cfg(feature = "nccl")]
    let halos = nccl.as_ref().map_or(Halos::Host, Halos::Nccl);
    #[cfg(not(feature = "nccl"))]
    let halos = Halos::Host;
    // Only rank 0 writes; the others must not race it for the directory.
    let dir = if lead {
        make_output_dir(&c.output)?
    } else {
        c.output.clone()
    };
    let out = match (gpu, c.engine) {
        (None, _) => simulate(&HostLoopEngine, comm, halos, c, &p, steps, &dir)?,
        (Some(gpu), Placement::Device) => {
            let shape = LaunchShape {
                block_x: c.block.map_or(128, |b| b.0),
                block_y: c.block.map_or(1, |b| b.1),
                march: c.unroll.0.unwrap_or(8),
                variant: Variant::Plain,
            };
            simulate(
                &DeviceLoopEngine::new(gpu, shape),
                comm,
                halos,
                c,
                &p,
                steps,
                &dir,
            )?
        }
        (Some(gpu), _) => simulate(
            &tuner(gpu, c.kernel, c.unroll.0, c.retune),
            comm,
            halos,
            c,
            &p,
            steps,
            &dir,
        )?,
    };
    if !lead {
        return Ok(());
    }
    #[cfg(feature = "nccl")]
    lattice_gpu::cli::print_exchange_time(lattice_gpu::cli::exchange_time(nccl.as_ref())?);
    let t = dt * steps as f64;
    println!(
        "{title}: {steps} steps of dt {dt:.6e} (t = {t:.6}), CFL {:.4}",
        p.max_courant().0
    );
    if let Some(exact) = &case.exact {
        let n = norms(&out, &exact(t));
        println!(
            "error against the exact solution: L1 {:.4e}  L2 {:.4e}  Linf {:.4e}  relative L2 {:.4e}",
            n.l1, n.l2, n.linf, n.relative
        );
    }
    if let Some(scheme) = &case.scheme_exact {
        let n = norms(&out, &scheme(steps as usize, dt));
        println!(
            "interpolation error (against the scheme's straight-step departure, exactly interpolated): relative L2 {:.4e}",
            n.relative
        );
    }
    println!("mass drift {:+.4e}", mass_drift(&out, &case.f0));
    let files = write_outputs(&dir, &out, case.nx, case.ny, range_of(&case.f0), "field")?;
    println!("wrote {}", files.join(", "));
    Ok(())
}

/// The auto-tuner for `kernel`: block shapes and the unroll factor, or only the block shapes when
/// `unroll` fixes it.
fn tuner(
    gpu: Arc<Gpu>,
    kernel: Kernel,
    unroll: Option<u32>,
    retune: bool,
) -> DeviceAutoTuningLoopEngine {
    let cache = TuneCache::default_path().map_or_else(TuneCache::in_memory, TuneCache::load);
    let space = match unroll {
        Some(n) => kernel.tune_space().with("march", vec![n]),
        None => kernel.tune_space(),
    };
    DeviceAutoTuningLoopEngine::new(gpu, cache)
        .space(space)
        .retune(retune)
}

/// Points per thread: tuned (`None`) or given.
#[derive(Clone, Copy, Debug)]
struct Unroll(Option<u32>);

fn parse_unroll(s: &str) -> std::result::Result<Unroll, String> {
    match s {
        "auto" => Ok(Unroll(None)),
        _ => match s.parse::<u32>() {
            Ok(n) if (1..=64).contains(&n) => Ok(Unroll(Some(n))),
            _ => Err(format!("--unroll `{s}` must be `auto` or a number of points from 1 to 64 (4 to 32 suit the queue kernels)")),
        },
    }
}

fn range_of(f: &[f64]) -> (f64, f64) {
    let lo = f.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = f.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if lo < hi {
        (lo, hi)
    } else {
        (lo - 1.0, hi + 1.0)
    }
}

fn write_outputs(
    dir: &Path,
    f: &[f64],
    nx: usize,
    ny: usize,
    range: (f64, f64),
    stem: &str,
) -> Result<Vec<String>> {
    let npy = dir.join(format!("{stem}.npy"));
    let png = dir.join(format!("{stem}.png"));
    let data: Vec<f32> = f.iter().map(|&x| x as f32).collect();
    write_npy(&npy, &[ny, nx], &data)?;
    write_png_scaled(&png, nx, ny, f, Some(range), ColorMap::Viridis, 256)?;
    Ok(vec![npy.display().to_string(), png.display().to_string()])
}

/// Runs `steps` steps on `engine` with a progress bar (points per second), PNGs every `--png-every`.
fn simulate<E: LoopEngine, C: Communicator>(
    engine: &E,
    comm: &C,
    halos: Halos<'_>,
    c: &Common,
    p: &Problem,
    steps: u64,
    dir: &Path,
) -> Result<Vec<f64>> {
    let lead = comm.rank() == 0;
    if lead {
        println!("engine: {}, kernel {}", engine.describe(), c.kernel.name());
        if let Some(line) = c.split.describe('y', comm.size()) {
            println!("{line}");
        }
    }
    let mut a = Advection::new_on_cut(
        engine,
        comm,
        halos,
        p,
        c.kernel,
        c.kernel.pads_rows(),
        c.split.cut,
    )?;
    a.set_overlap(!c.split.halo.no_overlap);
    let bar = progress(steps, "steps");
    if !lead {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let points = (p.size[0] * p.size[1]) as f64;
    let range = range_of(&p.f0);
    // The fields' uploads may still be on their way: not part of the steps' time.
    a.synchronize()?;
    let start = Instant::now();
    // Time spent downloading and writing PNGs, left out of the points per second.
    let mut writing = 0.0;
    let chunk = (steps / 100).max(1);
    while a.steps() < steps {
        for _ in 0..chunk.min(steps - a.steps()) {
            a.step()?;
            if c.png_every.is_some_and(|e| e > 0 && a.steps() % e == 0) {
                let t = Instant::now();
                let f = a.field()?;
                if !lead {
                    continue;
                }
                let png = dir.join(format!("field-{:07}.png", a.steps()));
                write_png_scaled(
                    &png,
                    p.size[0],
                    p.size[1],
                    &f,
                    Some(range),
                    ColorMap::Viridis,
                    256,
                )?;
                writing += t.elapsed().as_secs_f64();
            }
        }
        a.synchronize()?;
        let rate = points * a.steps() as f64 / (start.elapsed().as_secs_f64() - writing);
        bar.set_position(a.steps());
        bar.set_message(format!("{:.2} G points/s", rate / 1e9));
    }
    bar.finish_and_clear();
    // Before the field comes to the host (1.1 s at 8192^2, as long as 2500 steps).
    let secs = start.elapsed().as_secs_f64() - writing;
    let field = a.field()?;
    if !lead {
        return Ok(field);
    }
    if let Some(r) = E::tuning(a.site().info()) {
        println!(
            "launch shape {} ({}; {:.4} ms per step)",
            r.best,
            if r.from_cache {
                "from the tune cache".to_string()
            } else {
                format!("tuned over {} candidates", r.candidates)
            },
            r.best_ms
        );
    }
    println!(
        "{} steps in {secs:.3} s{}: {:.3} G points/s",
        a.steps(),
        if writing > 0.0 {
            format!(" (and {writing:.3} s writing PNGs)")
        } else {
            String::new()
        },
        points * a.steps() as f64 / secs / 1e9
    );
    if let Some((done, needed)) = E::tuning_progress(a.site().info()) {
        println!("{}", unfinished_tuning(done, needed));
    }
    Ok(field)
}

fn run_file(a: &FileArgs) -> Result<()> {
    let (shape, f0) = read_npy::<f64>(&a.field)?;
    let [ny, nx] = match shape.as_slice() {
        [ny, nx] => [*ny, *nx],
        _ => {
            return Err(Error::Invalid(format!(
                "{}: the field must be a 2-D array (ny, nx); it has shape {shape:?}",
                a.field.display()
            )))
        }
    };
    let (vshape, uv) = read_npy::<f64>(&a.velocity)?;
    if vshape != [ny, nx, 2] {
        return Err(Error::Invalid(format!(
            "{}: the velocities must have shape ({ny}, {nx}, 2) to match the field; they have {vshape:?}",
            a.velocity.display()
        )));
    }
    // Before the time step is taken from the largest speed, which would pass over NaN.
    if let Some(i) = uv.iter().position(|x| !x.is_finite()) {
        return Err(Error::Invalid(format!(
            "{}: {} at node ({}, {}) is {}; give finite velocities",
            a.velocity.display(),
            ["u", "v"][i % 2],
            i / 2 % nx,
            i / 2 / nx,
            uv[i]
        )));
    }
    if !(a.h.is_finite() && a.h > 0.0) {
        return Err(Error::Invalid(format!(
            "--h {} must be a positive spacing",
            a.h
        )));
    }
    let case = Case {
        nx,
        ny,
        h: a.h,
        f0,
        u: uv.iter().step_by(2).copied().collect(),
        v: uv.iter().skip(1).step_by(2).copied().collect(),
        exact: None,
        period: None,
        scheme_exact: None,
    };
    run_case(&a.common, case, "file")
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

fn bench(b: &BenchArgs) -> Result<()> {
    let gpu = lattice_gpu::cli::bench_gpu("advection", 0)?;
    let copy = gpu.copy_bandwidth(1 << 30, 20)?;
    println!("GPU: {}; device-to-device copy {copy:.1} GB/s; 16 bytes per point (f read and written, u and v read)", gpu.name());
    println!(
        "{:<10} {:<24} {:<22} {:>9} {:>10} {:>8}",
        "grid", "kernel", "launch", "ms/step", "Gpoints/s", "of copy"
    );
    let mut rows = Vec::new();
    for &size in &b.sizes {
        let case = cases::swirl(size[0], size[1]);
        let (um, vm) = cases::max_speed(&case.u, &case.v);
        let p = Problem {
            size,
            f0: case.f0,
            u: case.u,
            v: case.v,
            c: 0.5 / um.max(vm),
        };
        let points = (size[0] * size[1]) as f64;
        let mut time = |label: String, engine: &dyn Fn() -> Result<(f64, String)>| -> Result<()> {
            let (ms, shape) = engine()?;
            let gpts = points / (ms * 1e-3) / 1e9;
            let of_copy = gpts * 16.0 / copy;
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
        lattice_gpu::lbm::output::write_csv(
            path,
            "nx,ny,kernel,launch,ms_per_step,gpoints_per_s,of_copy,copy_gb_per_s",
            &lines,
        )?;
        println!("wrote {}", path.display());
    }
    Ok(())
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

fn dispatch(cli: Cli) -> Result<()> {
    match &cli.command {
        Command::Translation(a) => {
            let c = &a.common;
            run_case(
                c,
                cases::translation(c.size[0], c.size[1], a.velocity),
                "translation",
            )
        }
        Command::Rotation(a) => run_case(
            &a.common,
            cases::rotation(a.common.size[0], a.common.size[1]),
            "rotation",
        ),
        Command::Swirl(a) => run_case(
            &a.common,
            cases::swirl(a.common.size[0], a.common.size[1]),
            "swirl",
        ),
        Command::File(a) => run_file(a),
        Command::Bench(b) => bench(b),
    }
}

fn main() -> ExitCode {
    lattice_gpu::cli::exit(dispatch(Cli::parse()))
}
