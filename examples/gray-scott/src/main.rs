//! `gray-scott`: Gray–Scott reaction–diffusion in 2-D or 3-D on the CPU or an NVIDIA GPU, writing the
//! final fields as `.npy` and the middle plane of `v` as PNG frames; with `--bench`, the GPU's
//! effective bandwidth on it against a device-to-device copy.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use gray_scott::{load_kernels, simulate, Error, Grid, Model, Problem, Result, Simulation};
use gray_scott_kernels::GrayScottReal;
use lattice_gpu::cli::{self, Chosen, EngineArgs, Launch, Placement, Precision};
use lattice_gpu::formats::{npy, png, OutputDir};
use lattice_gpu::host::engine::LoopEngine;
use lattice_gpu::host::health;
use lattice_gpu::host::{DeviceLoopEngine, Element, Gpu, HostLoopEngine};

/// Gray–Scott reaction–diffusion, du/dt = Du lap u - u v^2 + F (1 - u), dv/dt = Dv lap v + u v^2 -
/// (F + k) v, explicit Euler with the 7-point (2-D: 5-point) Laplacian, u = 1 and v = 0 on the walls.
/// Starts from u = 1, v = 0 with a noisy square (cube) of u = 0.5, v = 0.25 in the middle.
#[derive(Parser)]
#[command(version)]
struct Cli {
    /// Interior grid points: N (a cube), NXxNYxNZ, or NXxNY for a 2-D run [default: 128, or 256
    /// with --bench].
    #[arg(long, value_parser = Grid::parse)]
    size: Option<Grid>,
    /// Time steps.
    #[arg(long, default_value_t = 5000)]
    steps: usize,
    /// Feed rate F.
    #[arg(long, allow_hyphen_values = true, default_value_t = Model::default().f)]
    f: f64,
    /// Kill rate k.
    #[arg(long, allow_hyphen_values = true, default_value_t = Model::default().k)]
    k: f64,
    /// Diffusivity of u.
    #[arg(long, allow_hyphen_values = true, default_value_t = Model::default().du)]
    du: f64,
    /// Diffusivity of v.
    #[arg(long, allow_hyphen_values = true, default_value_t = Model::default().dv)]
    dv: f64,
    /// Grid spacing h.
    #[arg(long, allow_hyphen_values = true, default_value_t = Model::default().h)]
    dx: f64,
    /// Time step; stable while dt max(Du, Dv) 2d / h^2 <= 1 on a d-dimensional grid [default: 0.8 of
    /// that limit, at most 1].
    #[arg(long, allow_hyphen_values = true)]
    dt: Option<f64>,
    /// Precision of fields and arithmetic.
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    precision: Precision,
    #[command(flatten)]
    engine: EngineArgs,
    /// Directory for u.npy and v.npy (interior, shape (nz, ny, nx) or (ny, nx)), v.png (the middle
    /// z plane of the final v) and the frames.
    #[arg(long, default_value = "gray-scott-out")]
    output: PathBuf,
    /// Also write frame-00000.png, frame-00001.png, ...: the middle z plane of v every N steps.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    frames: Option<u64>,
    /// Seed of the initial noise.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Measure instead of simulating: the copy bandwidth of the GPU, then the median time of a step
    /// (once the launch is tuned) and its effective bandwidth, on --size. Writes nothing.
    #[arg(long)]
    bench: bool,
}

/// The colour range of the pictures of v: fixed, so that the frames of a run compare.
const V_RANGE: (f64, f64) = (0.0, 0.5);

/// Bytes of the device-to-device copy that measures the reference bandwidth.
const COPY_BYTES: usize = 1 << 30;

fn main() -> ExitCode {
    // Usage errors exit with 2 (clap's convention), run errors with 1, a signal with 128 + its number.
    let cli = Cli::parse();
    cli::start();
    cli::exit(run(&cli))
}

fn run(cli: &Cli) -> Result<()> {
    cli.engine.check().map_err(Error::Invalid)?;
    let model = Model {
        f: cli.f,
        k: cli.k,
        du: cli.du,
        dv: cli.dv,
        h: cli.dx,
    };
    let cube = if cli.bench { 256 } else { 128 };
    let problem = Problem::new(cli.size.unwrap_or(Grid::Volume([cube; 3])), model, cli.dt)?;
    if cli.bench {
        if cli.frames.is_some() {
            return Err(Error::Invalid(
                "--bench measures and writes nothing: leave out --frames".into(),
            ));
        }
        return match cli.precision {
            Precision::F32 => bench::<f32>(cli, &problem),
            Precision::F64 => bench::<f64>(cli, &problem),
        };
    }
    // Staged: the files appear together when the run succeeds, or not at all.
    let out = cli::output_dir(&cli.output)?;
    match cli.precision {
        Precision::F32 => run_precision::<f32>(cli, &problem, out),
        Precision::F64 => run_precision::<f64>(cli, &problem, out),
    }
}

fn run_precision<T: Element + GrayScottReal + npy::NpyElement>(
    cli: &Cli,
    problem: &Problem,
    out: OutputDir,
) -> Result<()> {
    match cli.engine.choose()? {
        Chosen::Host => run_on::<_, T>(&HostLoopEngine, cli, problem, out),
        Chosen::Gpu(kind, gpu) => {
            load_kernels(&gpu)?;
            match kind {
                Launch::Fixed => {
                    let engine = DeviceLoopEngine::new(gpu, cli.engine.shape());
                    run_on::<_, T>(&engine, cli, problem, out)
                }
                _ => run_on::<_, T>(&cli.engine.autotuner(gpu), cli, problem, out),
            }
        }
    }
}

fn run_on<E: LoopEngine, T: Element + GrayScottReal + npy::NpyElement>(
    engine: &E,
    cli: &Cli,
    problem: &Problem,
    out: OutputDir,
) -> Result<()> {
    let m = &problem.model;
    println!(
        "gray-scott {} {}, {} steps, F {} k {} Du {} Dv {} h {} dt {} (dt max(Du, Dv) {}/h^2 = {:.3}), \
         engine: {}",
        problem.grid,
        T::NAME,
        cli.steps,
        m.f,
        m.k,
        m.du,
        m.dv,
        m.h,
        short(problem.dt),
        2 * problem.grid.dims(),
        problem.stability_number(),
        engine.describe()
    );
    let [nx, ny, _] = problem.grid.size();
    let every = cli.frames.map(|n| n as usize);
    let mut frames = 0;
    let bar = cli::progress(cli.steps as u64, "steps");
    let run = simulate(
        engine,
        problem,
        || problem.initial::<T>(cli.seed),
        cli.steps,
        every,
        |step, v| {
            let path = out.file(&format!("frame-{:05}.png", step / every.unwrap_or(1)));
            picture(&path, problem, step, v)?;
            frames += 1;
            Ok(())
        },
        |s| bar.set_position(s as u64),
    )?;
    bar.finish_and_clear();

    if cli.steps > 0 && run.seconds > 0.0 {
        let updates = problem.grid.points() as f64 * cli.steps as f64;
        println!(
            "time {:.3} s: {:.1} MLUPS, {:.1} GB/s effective ({} bytes/point: u and v read and written once)",
            run.seconds,
            updates / run.seconds / 1e6,
            problem.bytes_per_step::<T>() * cli.steps as f64 / run.seconds / 1e9,
            4 * std::mem::size_of::<T>()
        );
    }
    if let Some((done, needed)) = run.tuning_unfinished {
        println!("{}", cli::unfinished_tuning(done, needed));
    }
    if let Some(t) = &run.tuning {
        println!("{t}");
    }
    // NaN written as a result would look like one.
    for (name, field) in [("u", &run.fields.u), ("v", &run.fields.v)] {
        if let Some(i) = health::first_non_finite(field) {
            return Err(Error::Invalid(format!(
                "the run diverged: {name} is {:?} at point {i} (x fastest) after {} steps, so nothing \
                 was written; lower --dt",
                field[i], cli.steps
            )));
        }
    }
    let shape = problem.grid.npy_shape();
    npy::write_npy(&out.file("u.npy"), &shape, &run.fields.u)?;
    npy::write_npy(&out.file("v.npy"), &shape, &run.fields.v)?;
    let [_, _, nz] = problem.grid.size();
    let mid = &run.fields.v[nx * ny * (nz / 2)..nx * ny * (nz / 2 + 1)];
    picture(&out.file("v.png"), problem, cli.steps, mid)?;
    if frames > 0 {
        println!("{frames} frames (frame-00000.png ...)");
    }
    cli::commit(out)?;
    Ok(())
}

/// `x` to 6 decimals without trailing zeros (small values in exponent form): the default time step
/// is a fraction of a bound, whose full digits say nothing.
fn short(x: f64) -> String {
    if x.abs() < 1e-3 {
        return format!("{x:e}");
    }
    let s = format!("{x:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A PNG of the `nx x ny` plane `v` of `problem` after `step` steps: axes in the grid's units
/// (points `h` apart), colours over [`V_RANGE`] so that frames compare.
fn picture<T: Element>(path: &Path, problem: &Problem, step: usize, v: &[T]) -> Result<()> {
    let [nx, ny, nz] = problem.grid.size();
    let h = problem.model.h;
    let v: Vec<f64> = v.iter().map(|x| x.to_f64()).collect();
    let plane = match nz {
        1 => String::new(),
        _ => format!(" at z = {}", png::significant((nz / 2) as f64 * h)),
    };
    let picture = png::Picture::new(
        format!(
            "gray-scott {}: v{plane}, t = {} (step {step})",
            problem.grid,
            png::significant(step as f64 * problem.dt)
        ),
        "v",
        png::Axis::cells("x", 0.0, h, nx),
        png::Axis::cells("y", 0.0, h, ny),
    )
    .range(V_RANGE.0, V_RANGE.1);
    png::write_field_png(path, nx, ny, &v, &picture)?;
    Ok(())
}

fn bench<T: Element + GrayScottReal>(cli: &Cli, problem: &Problem) -> Result<()> {
    if cli.engine.engine == Placement::Host {
        return Err(Error::Invalid(
            "--bench measures the GPU: leave out --engine host".into(),
        ));
    }
    let gpu = Gpu::open(cli.engine.gpu()).map_err(|e| match e {
        lattice_gpu::host::Error::NoGpu(why) => lattice_gpu::host::Error::NoGpu(format!(
            "{why}; --bench measures the GPU, so run it on a machine with one"
        )),
        e => e,
    })?;
    load_kernels(&gpu)?;
    println!("device: {} ({} SMs)", gpu.name(), gpu.sm_count());
    let copy = gpu.copy_bandwidth(COPY_BYTES, 20)?;
    let ms = match cli.engine.launch() {
        Launch::Fixed => {
            let engine = DeviceLoopEngine::new(gpu.clone(), cli.engine.shape());
            time_step::<_, T>(&gpu, &engine, cli, problem)?
        }
        _ => time_step::<_, T>(&gpu, &cli.engine.autotuner(gpu.clone()), cli, problem)?,
    };
    let copy_after = gpu.copy_bandwidth(COPY_BYTES, 20)?;
    let gbs = problem.bytes_per_step::<T>() / ms / 1e6;
    println!(
        "gray-scott {} {}: {ms:.4} ms/step, {:.1} MLUPS, {gbs:.1} GB/s effective ({} bytes/point)",
        problem.grid,
        T::NAME,
        problem.grid.points() as f64 / ms / 1e3,
        4 * std::mem::size_of::<T>()
    );
    println!(
        "device-to-device copy: {copy:.1} GB/s before, {copy_after:.1} GB/s after (read + write, {} MiB); \
         the step reaches {:.0}% of the first",
        COPY_BYTES >> 20,
        100.0 * gbs / copy
    );
    Ok(())
}

/// The median GPU time of a step, ms: 7 event-timed batches of about 20 ms each, after the launch
/// has been tuned (the tuner times its candidates on real steps, which must not count).
fn time_step<E: LoopEngine, T: Element + GrayScottReal>(
    gpu: &Gpu,
    engine: &E,
    cli: &Cli,
    problem: &Problem,
) -> Result<f64> {
    println!(
        "bench {} {}, engine: {}",
        problem.grid,
        T::NAME,
        engine.describe()
    );
    let mut sim = Simulation::new(engine, problem, || problem.initial::<T>(cli.seed))?;
    while engine.tunes() && sim.tuning().is_none() {
        sim.step()?;
    }
    if let Some(t) = sim.tuning() {
        println!("{t}");
    }
    let probe = gpu.time_ms(|| sim.advance(3))? / 3.0;
    let per_batch = ((20.0 / probe.max(1e-3)) as usize).clamp(5, 2000);
    let mut ms = (0..7)
        .map(|_| Ok(gpu.time_ms(|| sim.advance(per_batch))? / per_batch as f64))
        .collect::<Result<Vec<f64>>>()?;
    ms.sort_by(f64::total_cmp);
    // A step that blew up would time arithmetic on NaNs, not the simulation.
    if sim.v_mid_plane()?.iter().any(|v| !v.to_f64().is_finite()) {
        return Err(Error::Invalid(format!(
            "the fields are no longer finite after {} steps; choose a smaller --dt",
            sim.steps_done()
        )));
    }
    Ok(ms[ms.len() / 2])
}
