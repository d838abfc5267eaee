//! `diffusion`: the 3-D heat equation on the CPU or GPU, and the benchmark of the paper's table.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use lattice_gpu_cli::{self as cli, Chosen, EngineArgs, Launch, Precision};
use lattice_gpu_diffusion::bench::{bench_temporal, bench_variants, BenchRow, VariantSet};
use lattice_gpu_diffusion::{
    check_temporal, simulate_scheduled, sine_mode_errors, Checkpoints, DiffusionError, Every,
    Exchange, Halos, Problem, Result, Schedule, Temporal,
};
use lattice_gpu_formats::{npy, png, OutputDir};
use lattice_gpu_host::comm::{Communicator, Solo};
use lattice_gpu_host::engine::LoopEngine;
use lattice_gpu_host::field::fmt_dims;
use lattice_gpu_host::{DeviceLoopEngine, Element, HostLoopEngine};
use lattice_gpu_kernels::diffusion::{DiffusionReal, FLOPS_PER_POINT};

/// 3-D heat equation df/dt = kappa lap f on the unit cube (f = 0 on the walls), explicit 7-point
/// stencil, on the CPU or an NVIDIA GPU. Starts from sin(pi x) sin(pi y) sin(pi z), whose exact decay
/// exp(-3 kappa pi^2 t) it compares against, or from --input.
#[derive(Parser)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum Command {
    /// The paper's benchmark table on the GPU: tuned (per kernel variant) vs fixed launch, against the
    /// copy bandwidth.
    Bench(BenchArgs),
}

#[derive(Args)]
struct RunArgs {
    /// Interior grid points: N (a cube) or NXxNYxNZ.
    #[arg(long, default_value = "128", allow_hyphen_values = true, value_parser = cli::parse_size3)]
    size: [usize; 3],
    /// Time steps. The default leaves most of them to the tuned launch on a first run: the auto-tuner
    /// times each of its launch shapes (535 at 128^3 on an H100) 3 times on the run's own steps.
    #[arg(long, default_value_t = 5000, allow_hyphen_values = true)]
    steps: usize,
    /// Steps per temporally blocked pass: auto (the auto-tuner weighs passes of 2 to 4 steps against
    /// single steps on the run's own steps, and keeps the fastest; on the CPU passes of 3 where the
    /// fields exceed half its last-level cache; single steps with a fixed launch), or 1 to 8. Each
    /// pass reads and writes the field once for that many steps, with the same bits as single
    /// steps. Split (--gpus, --mpi, --cut), halos that many planes deep are exchanged once a pass;
    /// auto chooses before the run there, on rank 0's slab as one domain.
    #[arg(long, default_value = "auto", allow_hyphen_values = true)]
    temporal: Temporal,
    /// Diffusivity.
    #[arg(long, allow_hyphen_values = true, default_value_t = 0.1)]
    kappa: f64,
    /// Time step [default: 0.1 h^2 / kappa; must satisfy kappa dt / h^2 <= 1/6].
    #[arg(long, allow_hyphen_values = true)]
    dt: Option<f64>,
    /// Precision of fields and arithmetic.
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    precision: Precision,
    #[command(flatten)]
    engine: EngineArgs,
    /// Directory for diffusion.npy (interior, shape (nz, ny, nx)) and diffusion_midz.png.
    #[arg(long, default_value = "diffusion-out")]
    output: PathBuf,
    /// Initial field from a .npy file of shape (nz, ny, nx), f32 or f64, instead of the sine mode.
    #[arg(long, conflicts_with = "resume")]
    input: Option<PathBuf>,
    /// Write a checkpoint every N steps (e.g. 1000), or every given time (e.g. 30s, 10m, 2h, checked
    /// at the run's health checks), into --checkpoint. Without it, a checkpoint is written only when
    /// a signal (SIGINT, SIGTERM, SIGHUP, SIGUSR1) stops the run.
    #[arg(long, value_name = "N|TIME", allow_hyphen_values = true, value_parser = cli::parse_every)]
    checkpoint_every: Option<cli::Every>,
    /// Directory of the checkpoint file diffusion.ckpt [default: OUTPUT/checkpoint].
    #[arg(long, value_name = "DIR")]
    checkpoint: Option<PathBuf>,
    /// Continue the run of a checkpoint (its directory or the file) up to --steps in all: the same
    /// bytes as a run never stopped. The grid, precision, kappa and dt must be the run's.
    #[arg(long, value_name = "DIR")]
    resume: Option<PathBuf>,
    /// Decompose along z over the ranks of the MPI job this process belongs to (start it with
    /// `mpirun -np N`); rank 0 prints and writes. Needs a build with `--features mpi`.
    #[arg(long)]
    mpi: bool,
    #[command(flatten)]
    split: cli::SplitArgs,
}

#[derive(Args)]
struct BenchArgs {
    /// Grids, comma separated (N or NXxNYxNZ).
    #[arg(long, value_delimiter = ',', value_parser = cli::parse_size3,
          default_value = "32,64,128,256,512,8x512x512,512x512x8")]
    sizes: Vec<[usize; 3]>,
    /// Precisions, comma separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "f32,f64")]
    precision: Vec<Precision>,
    /// Kernel variants to tune over, one row each, comma separated: auto (the tuner picks among all),
    /// plain, zqueue, tiled, vector (each forced), e.g. `--variants plain,zqueue,vector,auto`.
    #[arg(long, value_delimiter = ',', value_parser = VariantSet::parse, default_value = "auto")]
    variants: Vec<VariantSet>,
    /// GPU ordinal.
    #[arg(long, default_value_t = 0)]
    gpu: usize,
    /// Bytes of the device-to-device copy that measures the reference bandwidth.
    #[arg(long, default_value_t = 1 << 30)]
    copy_bytes: usize,
    /// Also write the table as CSV here.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Temporal blocking (issue 37, not yet tuned): also time passes of these many steps each
    /// (1 to 8, comma separated), the fastest of a sweep of launches, against the tuned single step.
    #[arg(long, value_delimiter = ',')]
    temporal: Vec<u32>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli::start();
    let result = match cli.command {
        Some(Command::Bench(b)) => bench(&b),
        None => run(&cli.run),
    };
    cli::exit(result)
}

fn invalid(msg: String) -> DiffusionError {
    DiffusionError::Invalid(msg)
}

fn run(args: &RunArgs) -> Result<()> {
    args.split.check_launch(args.mpi).map_err(invalid)?;
    check_temporal(args.temporal)?;
    if let Some(n) = args.split.halo.gpus {
        let nz = args.size[2];
        let over = format!("the grid's {nz} z layers");
        return cli::on_gpus(n as usize, nz, &over, |comm| run_with(args, comm));
    }
    if !args.mpi {
        return run_with(args, &Solo);
    }
    #[cfg(feature = "mpi")]
    {
        run_with(args, &lattice_gpu_host::comm::Mpi::init()?)
    }
    #[cfg(not(feature = "mpi"))]
    Err(invalid(cli::NO_MPI.into()))
}

fn run_with<C: Communicator>(args: &RunArgs, comm: &C) -> Result<()> {
    cli::same_options(comm).map_err(invalid)?;
    args.engine.check().map_err(invalid)?;
    let problem = Problem::new(args.size, args.kappa, args.dt)?;
    // Only rank 0 writes; the others must not race it for the directory.
    let out = (comm.rank() == 0)
        .then(|| cli::output_dir(&args.output))
        .transpose()?;
    match args.precision {
        Precision::F32 => run_precision::<f32, C>(args, comm, &problem, out),
        Precision::F64 => run_precision::<f64, C>(args, comm, &problem, out),
    }
}

fn run_precision<T: Element + DiffusionReal + npy::NpyElement, C: Communicator>(
    args: &RunArgs,
    comm: &C,
    problem: &Problem,
    out: Option<OutputDir>,
) -> Result<()> {
    let chosen = args.engine.choose()?;
    let gpu = match &chosen {
        Chosen::Host => None,
        Chosen::Gpu(_, gpu) => Some(gpu),
    };
    args.split.halo.check(gpu.is_some()).map_err(invalid)?;
    #[cfg(feature = "nccl")]
    let nccl = args.split.communicator(comm, gpu)?;
    #[cfg(feature = "nccl")]
    let halos = nccl.as_ref().map_or(Halos::Host, Halos::Nccl);
    #[cfg(not(feature = "nccl"))]
    let halos = Halos::Host;
    match chosen {
        Chosen::Host => run_on::<_, T, _>(&HostLoopEngine, comm, halos, args, problem, out),
        Chosen::Gpu(Launch::Fixed, gpu) => run_on::<_, T, _>(
            &DeviceLoopEngine::new(gpu, args.engine.shape()),
            comm,
            halos,
            args,
            problem,
            out,
        ),
        Chosen::Gpu(_, gpu) => {
            run_on::<_, T, _>(&args.engine.autotuner(gpu), comm, halos, args, problem, out)
        }
    }?;
    #[cfg(feature = "nccl")]
    if comm.rank() == 0 {
        cli::print_exchange_time(cli::exchange_time(nccl.as_ref())?);
    }
    Ok(())
}

/// numpy's axis order for an (nx, ny, nz) grid stored x fastest.
fn zyx(s: [usize; 3]) -> [usize; 3] {
    [s[2], s[1], s[0]]
}

fn run_on<E: LoopEngine, T: Element + DiffusionReal + npy::NpyElement, C: Communicator>(
    engine: &E,
    comm: &C,
    halos: Halos<'_>,
    args: &RunArgs,
    problem: &Problem,
    out: Option<OutputDir>,
) -> Result<()> {
    let lead = comm.rank() == 0;
    if let Some(line) = args.split.describe('z', comm.size()).filter(|_| lead) {
        println!("{line}");
    }
    lead.then(|| {
        println!(
            "diffusion {} {}, {} steps, kappa {}, dt {:e} (kappa dt sum 1/h^2 = {:.3}), engine: {}",
            fmt_dims(&problem.size),
            T::NAME,
            args.steps,
            problem.kappa,
            problem.dt,
            problem.stability_number(),
            engine.describe()
        )
    });
    // The steps already done by the run a checkpoint continues, and its field.
    let resumed = match &args.resume {
        Some(path) => {
            let file = cli::checkpoint_file(path, "diffusion.ckpt");
            let (step, field) = lattice_gpu_diffusion::resume::<T>(problem, &file)?;
            if step >= args.steps {
                return Err(invalid(format!(
                    "{} is at step {step}, and --steps {} asks for no more; give --steps above {step} \
                     to continue it",
                    file.display(),
                    args.steps
                )));
            }
            lead.then(|| println!("resuming from step {step} of {}", file.display()));
            Some((step, field))
        }
        None => None,
    };
    let first = resumed.as_ref().map_or(0, |r| r.0);
    let ck_dir = args
        .checkpoint
        .clone()
        .unwrap_or_else(|| args.output.join("checkpoint"));
    let schedule = Schedule {
        first,
        last: args.steps,
        checkpoints: Some(Checkpoints {
            path: ck_dir.join("diffusion.ckpt"),
            every: args.checkpoint_every.map_or(Every::Signal, Every::from),
            resume_hint: format!("--resume {} --steps N", ck_dir.display()),
        }),
        temporal: args.temporal,
    };
    let bar = cli::progress(if lead { args.steps as u64 } else { 0 }, "steps");
    bar.set_position(first as u64);
    if !lead {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    // Built only after the memory check inside `simulate`.
    let initial = || match (&args.input, resumed) {
        (_, Some((_, field))) => Ok(field),
        (Some(path), None) => Ok(npy::read_npy_shaped::<T>(path, &zyx(problem.size))?),
        (None, None) => Ok(problem.sine_mode::<T>()),
    };
    let exchange = Exchange {
        halos,
        overlap: !args.split.halo.no_overlap,
        cut: args.split.cut,
    };
    let result = simulate_scheduled(engine, comm, exchange, problem, initial, &schedule, |s| {
        bar.set_position(s as u64)
    })?;
    bar.finish_and_clear();
    let Some(out) = out else {
        return Ok(());
    };

    let run_steps = (args.steps - first) as f64;
    let points = problem.points() as f64 * run_steps;
    let glups = points / result.seconds / 1e9;
    match (&result.steps_choice, args.temporal) {
        (Some(c), _) if result.halo_depth > 1 => println!(
            "{c}; chosen before the run on rank 0's slab as one domain: halos {} planes deep, \
             exchanged once a pass",
            result.halo_depth
        ),
        (Some(c), _) => println!("{c}"),
        (None, Temporal::Steps(t)) if t > 1 => println!(
            "temporal blocking: {t} steps per pass (each pass reads and writes the field once), {} \
             of the {} steps",
            result.blocked_steps,
            args.steps - first
        ),
        (None, Temporal::Auto) if result.pass_steps > 1 => println!(
            "temporal blocking: {} steps per pass (the engine's choice; each pass reads and writes the \
             field once), {} of the {} steps",
            result.pass_steps,
            result.blocked_steps,
            args.steps - first
        ),
        _ => {}
    }
    println!(
        "time {:.3} s: {:.2} GLUPS, {:.1} GFLOPS ({FLOPS_PER_POINT} flops/point), {:.1} GB/s effective ({} bytes/point)",
        result.seconds,
        glups,
        glups * FLOPS_PER_POINT as f64,
        problem.bytes_per_step::<T>() * run_steps / result.seconds / 1e9,
        2 * std::mem::size_of::<T>()
    );
    if let Some((done, needed)) = result.tuning_unfinished {
        println!("{}", cli::unfinished_tuning(done, needed));
    }
    if let Some(t) = &result.tuning {
        println!("{t}");
    }
    if let Some(last) = result.checkpoints.last() {
        println!(
            "{} checkpoints written, the last {last}; the run waited {:.3} s for them",
            result.checkpoints.len(),
            result.checkpoint_wait
        );
    }
    if args.input.is_none() {
        let decay = problem.analytic_decay(args.steps);
        let [err, scheme] = sine_mode_errors(
            problem,
            &result.field,
            [decay, problem.discrete_decay(args.steps)],
        );
        println!(
            "t = {:.4e}: relative L2 error {err:.3e} against exp(-3 kappa pi^2 t) = {decay:.6} (O(h^2) discretisation), {scheme:.3e} against the scheme's exact decay",
            problem.dt * args.steps as f64
        );
    }
    let field = result.field;
    npy::write_npy(&out.file("diffusion.npy"), &zyx(problem.size), &field)?;
    let [nx, ny, nz] = problem.size;
    let mid = nz / 2;
    let slice: Vec<f64> = field[nx * ny * mid..nx * ny * (mid + 1)]
        .iter()
        .map(|v| v.to_f64())
        .collect();
    let png_path = out.file("diffusion_midz.png");
    let [hx, hy, hz] = problem.h;
    let picture = png::Picture::new(
        format!(
            "diffusion {nx}×{ny}×{nz}: f at z = {}, t = {} (step {})",
            png::significant((mid + 1) as f64 * hz),
            png::significant(problem.dt * args.steps as f64),
            args.steps
        ),
        "f",
        png::Axis::cells("x", hx, hx, nx),
        png::Axis::cells("y", hy, hy, ny),
    );
    png::write_field_png(&png_path, nx, ny, &slice, &picture)?;
    drop((field, slice));
    cli::commit(out)?;
    problem
        .footprint::<T>(
            comm.size(),
            comm.ranks_here(),
            engine.device().is_some(),
            result.halo_depth,
        )?
        .report(engine.device().map(|g| &**g));
    Ok(())
}

fn bench(args: &BenchArgs) -> Result<()> {
    for &t in &args.temporal {
        check_temporal(Temporal::Steps(t))?;
    }
    let gpu = lattice_gpu_cli::bench_gpu("diffusion", args.gpu)?;
    println!(
        "device: {} ({} SMs), PTX {}",
        gpu.name(),
        gpu.sm_count(),
        lattice_gpu_host::module::FRAMEWORK_ARCH
    );
    let copy = gpu.copy_bandwidth(args.copy_bytes, 20)?;
    println!(
        "device-to-device copy: {copy:.1} GB/s (read + write, {} MiB)",
        args.copy_bytes >> 20
    );
    let mut rows: Vec<BenchRow> = Vec::new();
    for &size in &args.sizes {
        for p in &args.precision {
            let measured = match p {
                Precision::F32 => bench_variants::<f32>(&gpu, size, &args.variants),
                Precision::F64 => bench_variants::<f64>(&gpu, size, &args.variants),
            };
            match measured {
                Ok(measured) => {
                    for r in measured {
                        println!(
                            "  {} {} {}: tuned {} {:.1} GLUPS, fixed {:.1} GLUPS",
                            fmt_dims(&size),
                            r.precision,
                            r.variants.label(),
                            r.tuning.best,
                            r.glups(),
                            r.fixed_glups()
                        );
                        rows.push(r)
                    }
                }
                Err(e) => println!("  {} {:?}: skipped: {e}", fmt_dims(&size), p),
            }
        }
    }
    let copy_after = gpu.copy_bandwidth(args.copy_bytes, 20)?;
    let header = "| grid | prec | variants | tuned shape | ms/step | GLUPS | GFLOPS | GB/s | of copy | fixed GLUPS | tuned/fixed | tuning steps | overhead ms | graph GLUPS | graph of copy | graph tuned/fixed |";
    let mut table = vec![
        header.to_string(),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|".into(),
    ];
    let mut csv = vec!["grid,precision,variants,block_x,block_y,march,variant,ms_per_step,glups,gflops,gbs,copy_gbs,ratio,fixed_glups,speedup,tuning_steps,overhead_ms,graph_ms_per_step,graph_glups,graph_fixed_ms_per_step,graph_speedup".to_string()];
    for r in &rows {
        let s = r.tuning.best;
        table.push(format!(
            "| {} | {} | {} | {} | {:.4} | {:.1} | {:.0} | {:.0} | {:.0}% | {:.1} | {:.1}x | {} | {:.1} | {:.1} | {:.0}% | {:.1}x |",
            fmt_dims(&r.size), r.precision, r.variants.label(), s, r.tuned_ms, r.glups(), r.gflops(), r.gbs(),
            100.0 * r.rate(r.tuned_ms, copy).of_copy, r.fixed_glups(), r.fixed_ms / r.tuned_ms, r.tuning.steps, r.tuning.overhead_ms(),
            r.graph_glups(), 100.0 * r.rate(r.tuned_graph_ms, copy).of_copy, r.fixed_graph_ms / r.tuned_graph_ms
        ));
        csv.push(format!(
            "{},{},{},{},{},{},{},{:.6},{:.3},{:.1},{:.1},{:.1},{:.4},{:.3},{:.3},{},{:.3},{:.6},{:.3},{:.6},{:.3}",
            fmt_dims(&r.size),
            r.precision,
            r.variants.label(),
            s.block_x,
            s.block_y,
            s.march,
            s.variant.name(),
            r.tuned_ms,
            r.glups(),
            r.gflops(),
            r.gbs(),
            copy,
            r.rate(r.tuned_ms, copy).of_copy,
            r.fixed_glups(),
            r.fixed_ms / r.tuned_ms,
            r.tuning.steps,
            r.tuning.overhead_ms(),
            r.tuned_graph_ms,
            r.graph_glups(),
            r.fixed_graph_ms,
            r.fixed_graph_ms / r.tuned_graph_ms
        ));
    }
    println!("\ncopy bandwidth {copy:.1} GB/s before, {copy_after:.1} GB/s after; ratios use the first\n");
    println!("{}", table.join("\n"));
    if !args.temporal.is_empty() {
        temporal_table(&gpu, args, &rows, copy)?;
    }
    if let Some(path) = &args.csv {
        let text = csv.join("\n") + "\n";
        lattice_gpu_formats::write_atomically(path, |w| w.write_all(text.as_bytes()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The temporally blocked rows of `diffusion bench --temporal`: per grid, precision and steps per pass,
/// the fastest launch of the sweep, its GLUPS, the bandwidth single steps would need for them, and its
/// ratio to the tuned single step of `rows` (the `auto` row of that grid and precision).
fn temporal_table(
    gpu: &std::sync::Arc<lattice_gpu_host::Gpu>,
    args: &BenchArgs,
    rows: &[BenchRow],
    copy: f64,
) -> Result<()> {
    println!(
        "\ntemporal blocking (steps per pass; equivalent GB/s = GLUPS x a single step's bytes per point):\n"
    );
    println!("| grid | prec | steps/pass | launch | ms/step | GLUPS | equivalent GB/s | of copy | vs tuned single step |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for &size in &args.sizes {
        for p in &args.precision {
            let measured = match p {
                Precision::F32 => bench_temporal::<f32>(gpu, size, &args.temporal),
                Precision::F64 => bench_temporal::<f64>(gpu, size, &args.temporal),
            };
            let measured = match measured {
                Ok(m) => m,
                Err(e) => {
                    println!("| {} | {p:?} | skipped: {e} |", fmt_dims(&size));
                    continue;
                }
            };
            for t in measured {
                let single = rows
                    .iter()
                    .find(|r| {
                        r.size == size
                            && r.precision == t.precision
                            && r.variants == VariantSet::Auto
                    })
                    .map(|r| format!("{:.2}x", t.glups() / r.glups()))
                    .unwrap_or_else(|| "-".into());
                println!(
                    "| {} | {} | {} | {} | {:.4} | {:.1} | {:.0} | {:.0}% | {single} |",
                    fmt_dims(&size),
                    t.precision,
                    t.steps,
                    t.launch,
                    t.ms_per_step,
                    t.glups(),
                    t.equivalent_gbs(),
                    100.0 * t.equivalent_gbs() / copy
                );
            }
        }
    }
    Ok(())
}
