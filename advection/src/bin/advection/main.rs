//! `advection`: cubic semi-Lagrangian advection of a 2-D field (GPU Challenge 2010) on the GPU, auto-tuned,
//! or on the CPU: translation, solid-body rotation, a steady swirl, or your own field and velocities; and
//! the benchmark of the paper's techniques against the copy bandwidth.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use lattice_gpu_advection::cases::{self, Case};
use lattice_gpu_advection::checkpoint;
use lattice_gpu_advection::norms::{mass_drift, norms};
use lattice_gpu_advection::{
    check_size, most_ranks, Advection, Error, Halos, Kernel, Problem, RankMemory, Result,
};
use lattice_gpu_cli::{self as cli, parse_dims, progress, unfinished_tuning, Placement};
use lattice_gpu_formats::checkpoint::{Saver, Written};
use lattice_gpu_formats::npy::{read_npy_shape, read_npy_shaped, write_npy};
use lattice_gpu_formats::png::{significant, write_field_png, Axis, Picture};
use lattice_gpu_formats::OutputDir;
use lattice_gpu_host::comm::{Communicator, Solo};
use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::engine::Variant;
use lattice_gpu_host::health::{check_interval, Verdict};
use lattice_gpu_host::memory::{self, Footprint};
use lattice_gpu_host::{
    DeviceAutoTuningLoopEngine, DeviceLoopEngine, Gpu, HostLoopEngine, LaunchShape, LoopEngine,
};

mod bench;
use bench::{bench, BenchArgs};

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
    Translation(TranslationArgs),
    /// A Gaussian hill in solid-body rotation about the centre (exact answer after whole revolutions).
    Rotation(RotationArgs),
    /// A Gaussian hill in a steady deformational flow from a stream function.
    Swirl(SwirlArgs),
    /// Your own field (`--field f.npy`, shape (ny, nx)) and velocities (`--velocity uv.npy`, (ny, nx, 2)).
    File(FileArgs),
    /// Grid points per second of every kernel variant, auto-tuned, against the copy bandwidth.
    Bench(BenchArgs),
}

/// The options every case runs with.
#[derive(Args, Clone)]
struct Common {
    /// Steps in all [default: one revolution for `rotation`, 1000 otherwise]: a run resumed from a
    /// checkpoint continues up to them.
    #[arg(long, allow_hyphen_values = true, value_parser = parse_steps)]
    steps: Option<u64>,
    /// CFL number of the largest velocity, which sets dt.
    #[arg(long, allow_hyphen_values = true, default_value_t = 0.5)]
    cfl: f64,
    /// Time step instead of --cfl.
    #[arg(long, allow_hyphen_values = true, conflicts_with = "cfl")]
    dt: Option<f64>,
    /// Kernel variant: plain, queue, branch-free, packed, shared (each adds one technique).
    #[arg(long, default_value = "packed", value_parser = parse_kernel)]
    kernel: Kernel,
    /// Where to run: auto (the GPU if there is one, else the CPU with a notice), device (the GPU; an
    /// error without one) or host (the CPU). On a GPU the launch shape (and the unroll factor, unless
    /// --unroll gives one) is tuned and cached, unless --block fixes it.
    #[arg(long, value_enum, default_value_t = Placement::Auto)]
    engine: Placement,
    /// Block shape XxY of a fixed GPU launch; given, the launch is not tuned.
    #[arg(long, value_parser = lattice_gpu_cli::parse_block)]
    block: Option<(u32, u32)>,
    /// Points per thread of the GPU kernels (the unroll factor): `auto` (tuned; 8 with --block) or a
    /// number.
    #[arg(long, default_value = "auto", value_parser = parse_unroll)]
    unroll: Unroll,
    /// Tune again even where the tune cache has a result.
    #[arg(long)]
    retune: bool,
    /// Output directory. Its files appear together when the run succeeds; a failed or stopped run
    /// leaves what it held.
    #[arg(long, default_value = "advection-out")]
    output: PathBuf,
    /// Also write a PNG of the field every N steps, field-STEP.png (none where N exceeds the steps).
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = parse_png_every)]
    png_every: Option<u64>,
    /// Write a checkpoint every N steps (e.g. 1000), or every given time (e.g. 30s, 10m, 2h, checked
    /// at the run's health checks), into --checkpoint. Without it, a checkpoint is written only when
    /// a signal (SIGINT, SIGTERM, SIGHUP, SIGUSR1) stops the run.
    #[arg(long, value_name = "N|TIME", allow_hyphen_values = true, value_parser = cli::parse_every)]
    checkpoint_every: Option<cli::Every>,
    /// Directory of the checkpoint file advection.ckpt [default: OUTPUT/checkpoint].
    #[arg(long, value_name = "DIR")]
    checkpoint: Option<PathBuf>,
    /// Continue the run of a checkpoint (its directory or the file) up to --steps in all (for
    /// rotation: --revolutions), with the same case and options: the same bytes as a run never
    /// stopped. The grid, the initial field, the velocities, h and dt must be the run's.
    #[arg(long, value_name = "DIR")]
    resume: Option<PathBuf>,
    /// Split the grid along y over the ranks of the MPI job this process belongs to (start it with
    /// `mpirun -np N`); rank 0 prints and writes. Needs a build with `--features mpi`.
    #[arg(long)]
    mpi: bool,
    #[command(flatten)]
    split: lattice_gpu_cli::SplitArgs,
}

/// The grid of a built-in case.
#[derive(Args, Clone)]
struct Grid {
    /// Nodes NXxNY (or N for a square).
    #[arg(long, default_value = "1024", allow_hyphen_values = true, value_parser = parse_size2)]
    size: [usize; 2],
}

/// Options of the cases whose velocity is their own: `--velocity` is refused by name.
#[derive(Args)]
struct OwnVelocity {
    #[arg(long, hide = true, allow_hyphen_values = true)]
    velocity: Option<String>,
}

/// Options of the cases without a period: `--revolutions` is refused by name.
#[derive(Args)]
struct NoPeriod {
    #[arg(long, hide = true, allow_hyphen_values = true)]
    revolutions: Option<String>,
}

#[derive(Args)]
struct TranslationArgs {
    #[command(flatten)]
    grid: Grid,
    /// Velocity as UxV, in domain lengths (of the short side) per unit time; either may be
    /// negative, e.g. -0.5x0.25.
    #[arg(long, default_value = "0.3x0.2", allow_hyphen_values = true, value_parser = parse_velocity)]
    velocity: [f64; 2],
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    no_period: NoPeriod,
}

#[derive(Args)]
struct RotationArgs {
    #[command(flatten)]
    grid: Grid,
    /// Revolutions, in whole steps that land on them (instead of --steps) [default: 1].
    #[arg(long, allow_hyphen_values = true, conflicts_with = "steps")]
    revolutions: Option<f64>,
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    own: OwnVelocity,
}

#[derive(Args)]
struct SwirlArgs {
    #[command(flatten)]
    grid: Grid,
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    own: OwnVelocity,
    #[command(flatten)]
    no_period: NoPeriod,
}

#[derive(Args)]
struct FileArgs {
    /// Initial field, .npy of shape (ny, nx): it sets the grid.
    #[arg(long)]
    field: PathBuf,
    /// Velocities, .npy of shape (ny, nx, 2): u then v per node.
    #[arg(long)]
    velocity: PathBuf,
    /// Node spacing.
    #[arg(long, allow_hyphen_values = true, default_value_t = 1.0)]
    h: f64,
    #[command(flatten)]
    common: Common,
    #[arg(long, hide = true, allow_hyphen_values = true)]
    size: Option<String>,
    #[command(flatten)]
    no_period: NoPeriod,
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
    let bad = || format!("velocity `{s}` must be two finite numbers UxV (e.g. 0.3x-0.2)");
    let parts: Vec<&str> = s.split(['x', 'X', ',']).collect();
    match parts.as_slice() {
        [a, b] => match (a.trim().parse::<f64>(), b.trim().parse::<f64>()) {
            (Ok(u), Ok(v)) if u.is_finite() && v.is_finite() => Ok([u, v]),
            _ => Err(bad()),
        },
        _ => Err(bad()),
    }
}

fn parse_steps(s: &str) -> std::result::Result<u64, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of steps: give a whole number such as 1000"))
}

fn parse_png_every(s: &str) -> std::result::Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err(
            "0 steps between pictures would write none: give 1 or more, or leave --png-every out"
                .into(),
        ),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "`{s}` is not a number of steps between pictures: give a whole number such as 100"
        )),
    }
}

/// The time step and step count a run's options give for `case`.
fn time_stepping(c: &Common, revolutions: Option<f64>, case: &Case) -> Result<(f64, u64)> {
    let (um, vm) = cases::max_speed(&case.u, &case.v);
    let speed = um.max(vm);
    let dt = match c.dt {
        Some(dt) if dt > 0.0 && dt.is_finite() => dt,
        Some(dt) => return Err(Error::Invalid(not_a_time_step(dt))),
        None if !(c.cfl > 0.0 && c.cfl.is_finite()) => {
            return Err(Error::Invalid(format!(
                "--cfl {} must be a positive Courant number such as 0.5 (at most 1); or give --dt",
                num(c.cfl)
            )))
        }
        None if speed > 0.0 => c.cfl * case.h / speed,
        None => {
            return Err(Error::Invalid(
                "the flow does not move (every velocity is 0), so --cfl cannot set the time \
                 step: give velocities that move, or the time step with --dt"
                    .into(),
            ))
        }
    };
    let steps = match (revolutions, case.period) {
        (Some(r), Some(period)) if r > 0.0 && r.is_finite() => {
            // Whole steps landing exactly on the revolutions, so the exact answer applies.
            let n = (r * period / dt).ceil().max(1.0);
            if !n.is_finite() || n >= 1e15 {
                return Err(Error::Invalid(format!(
                    "{} revolutions at dt {dt:e} take {n:.3e} steps; give fewer revolutions or a \
                     larger --dt",
                    num(r)
                )));
            }
            return Ok((r * period / n, n as u64));
        }
        (Some(_), None) => {
            return Err(Error::Invalid(
                "--revolutions applies to the rotation case only".into(),
            ))
        }
        (Some(r), _) => {
            return Err(Error::Invalid(format!(
                "--revolutions {} must be a positive number of turns, e.g. 1 or 0.5",
                num(r)
            )))
        }
        (None, Some(period)) if c.steps.is_none() => {
            let n = (period / dt).ceil().max(1.0);
            if !n.is_finite() || n >= 1e15 {
                return Err(Error::Invalid(format!(
                    "one revolution at dt {dt:e} takes {n:e} steps; give a larger --dt (or --cfl), or --steps"
                )));
            }
            return Ok((period / n, n as u64));
        }
        (None, _) => c.steps.unwrap_or(1000),
    };
    Ok((dt, steps))
}

fn not_a_time_step(dt: f64) -> String {
    format!(
        "--dt {} is not a positive time step; give one such as 1e-3, or leave --dt out for --cfl \
         to set it",
        num(dt)
    )
}

/// `x` as a message shows it: plainly where that is short, else with an exponent (1e300 is not
/// written out in 301 digits).
fn num(x: f64) -> String {
    match x.abs() {
        a if a == 0.0 || !a.is_finite() || (1e-4..1e6).contains(&a) => x.to_string(),
        _ => format!("{x:e}"),
    }
}

/// Where a run's initial field and velocities come from.
enum Source<'a> {
    Translation([f64; 2]),
    Rotation,
    Swirl,
    File(&'a FileArgs),
}

impl Source<'_> {
    fn title(&self) -> &'static str {
        match self {
            Source::Translation(_) => "translation",
            Source::Rotation => "rotation",
            Source::Swirl => "swirl",
            Source::File(_) => "file",
        }
    }

    /// Host bytes while the case is made, before its arrays pass to the run: the initial field and
    /// the two velocities (f64, `nodes` bytes apiece); from files also the interleaved velocities read.
    fn making(&self, nodes: u64) -> u64 {
        let arrays = match self {
            Source::File(_) => 5,
            _ => 3,
        };
        nodes.saturating_mul(arrays)
    }

    /// The case, on a grid of `size` (for files, the one their headers gave).
    fn build(&self, size: [usize; 2]) -> Result<Case> {
        let [nx, ny] = size;
        Ok(match *self {
            Source::Translation(velocity) => cases::translation(nx, ny, velocity),
            Source::Rotation => cases::rotation(nx, ny),
            Source::Swirl => cases::swirl(nx, ny),
            Source::File(a) => read_case(a, size)?,
        })
    }
}

/// The grid of `a`'s files, from their headers, checked against each other before anything is read.
fn file_size(a: &FileArgs) -> Result<[usize; 2]> {
    let shape = read_npy_shape(&a.field)?;
    let [ny, nx] = match shape.as_slice() {
        [ny, nx] => [*ny, *nx],
        _ => {
            return Err(Error::Invalid(format!(
                "{}: the field must be a 2-D array (ny, nx); it has shape {shape:?}",
                a.field.display()
            )))
        }
    };
    let vshape = read_npy_shape(&a.velocity)?;
    if vshape != [ny, nx, 2] {
        return Err(Error::Invalid(format!(
            "{}: the velocities must have shape ({ny}, {nx}, 2) to match the field; they have {vshape:?}",
            a.velocity.display()
        )));
    }
    if !(a.h.is_finite() && a.h > 0.0) {
        return Err(Error::Invalid(format!(
            "--h {} must be a positive spacing",
            a.h
        )));
    }
    Ok([nx, ny])
}

/// The file case: `a`'s field and velocities, on the grid `file_size` found.
fn read_case(a: &FileArgs, [nx, ny]: [usize; 2]) -> Result<Case> {
    let f0 = read_npy_shaped::<f64>(&a.field, &[ny, nx])?;
    let uv = read_npy_shaped::<f64>(&a.velocity, &[ny, nx, 2])?;
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
    let (u, v) = (
        uv.iter().step_by(2).copied().collect(),
        uv.iter().skip(1).step_by(2).copied().collect(),
    );
    drop(uv);
    Ok(Case {
        nx,
        ny,
        h: a.h,
        f0,
        u,
        v,
        exact: None,
        period: None,
        scheme_exact: None,
    })
}

/// Refuses, naming the fix, options that the run would ignore; before anything is made.
fn check_options(c: &Common) -> Result<()> {
    c.split.check_launch(c.mpi).map_err(Error::Invalid)?;
    c.engine
        .check_launch(c.block.is_some(), "--block")
        .map_err(Error::Invalid)?;
    if c.unroll.0.is_some() && c.engine == Placement::Host {
        return Err(Error::Invalid(
            "--unroll sets the points per thread of the GPU kernels, and --engine host runs on the \
             CPU: leave one of them out"
                .into(),
        ));
    }
    check_checkpoint_dir(c)
}

/// Refuses a checkpoint directory that cannot take the checkpoint file (something else in its
/// place, or a file on its path) before the run, not at its first checkpoint or at the signal that
/// needed one. Below the default place, OUTPUT/checkpoint, the output directory checks itself.
fn check_checkpoint_dir(c: &Common) -> Result<()> {
    let (dir, given) = match &c.checkpoint {
        Some(d) => (d.clone(), true),
        None => (c.output.join("checkpoint"), false),
    };
    let file = dir.join(checkpoint::FILE);
    if let Ok(m) = std::fs::metadata(&file) {
        if !m.is_file() {
            return Err(Error::Invalid(format!(
                "{} is not a file, and the checkpoints are written there; remove it or give \
                 --checkpoint another directory",
                file.display()
            )));
        }
    }
    // The nearest place on its path that exists must be a directory.
    let blocked = dir
        .ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && (given || *p != c.output.as_path()))
        .find_map(|p| std::fs::metadata(p).ok().map(|m| (p, m.is_dir())));
    if let Some((place, false)) = blocked {
        return Err(Error::Invalid(format!(
            "{} is not a directory, so the checkpoints cannot go into {}; give --checkpoint a \
             directory",
            place.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// A run ready to start, shared by the ranks of this process: the case's exact answers, the problem
/// (which holds the case's arrays) and its steps, the memory it was checked to fit, and its
/// checkpoints: those it writes, and the one it continues.
struct Prepared {
    title: &'static str,
    case: Case,
    problem: Problem,
    dt: f64,
    steps: u64,
    /// The largest Courant number, before the run.
    courant: f64,
    footprint: Footprint,
    /// What its checkpoints hold to be resumed by this run only ([`checkpoint::params`]), and what
    /// they say of how it computed (not compared on resuming).
    params: Vec<(String, String)>,
    informed: Vec<(String, String)>,
    checkpoints: Checkpoints,
    resumed: Option<Resumed>,
}

/// Where and how often a run writes its checkpoints (rank 0, from a gathered host copy, in the
/// background).
struct Checkpoints {
    /// The checkpoint file.
    path: PathBuf,
    /// How often; `None`: only when a signal stops the run.
    every: Option<cli::Every>,
    /// The `--resume` that continues the run, for the messages.
    hint: String,
}

/// The checkpoint a run continues: read once by the process, its field shared by the process's
/// ranks until the last of them has restored its rows from it (then it is freed).
struct Resumed {
    step: u64,
    file: PathBuf,
    /// Where it was computed otherwise than this run will (not the same bytes), the notice.
    note: Option<String>,
    field: RwLock<Option<Vec<f32>>>,
    /// Ranks of this process that have yet to restore.
    pending: AtomicUsize,
}

/// How a run computes the cubics: the Lagrange weights (the CPU engine, and the plain kernel on the
/// GPU: the same bits) or the Newton form (the queue kernels), which round differently in f32.
fn arithmetic(kernel: Kernel, on_gpu: bool) -> &'static str {
    match on_gpu && kernel.queued() {
        true => "newton",
        false => "lagrange",
    }
}

/// The peak memory of a run of `source` on a `size` grid split over `ranks` ranks, `threads` of them
/// in this process and `processes` such processes on this machine (MPI's), on a GPU where `on_gpu`.
/// A process holds the problem (f0, u and v in f64: `3P`, with `P` the bytes of one f64 per node) all
/// along, after making the case (`3P`, or `5P` from files). Each of its ranks holds its
/// [`RankMemory`] on top: at the set-up, and during the steps, with a download of its field for a
/// picture or the result. The gather of the field on rank 0 (`P/2` per f32 copy) ends in the field
/// in f64 (`P`): while the engine's arrays are there for a picture, after they are freed for the
/// result. Rank 0 then holds the result and an exact answer (`P` each), or the f32 copy it writes.
///
/// Checkpoints: a save gathers the field in f32 on rank 0 (between threads, with the copies as
/// above), then copies it into the checkpoint (`P/2` each, beside the ranks' arrays), which stays
/// while it is written, over the next steps and pictures (with --checkpoint-every; a signal's
/// checkpoint ends the run). A resumed run reads its checkpoint after the problem is made (the
/// file's bytes and the field taken from them: `P/2` each), and holds the field until its ranks
/// are set up.
fn footprint(
    c: &Common,
    source: &Source,
    size: [usize; 2],
    ranks: usize,
    [threads, processes]: [usize; 2],
    on_gpu: bool,
) -> Result<Footprint> {
    let what = format!("a {} x {} advection grid", size[0], size[1]);
    let p8 = memory::bytes(&size, 8, &what)?;
    let p4 = memory::bytes(&size, 4, &what)?;
    let split = ranks > 1 || c.split.cut;
    let aligned = c.kernel.pads_rows();
    let rank = RankMemory::of(size, ranks, c.kernel, aligned, split, on_gpu)?;
    let k = threads as u64;
    let each = |n: u64| n.saturating_mul(k);
    let problem = p8.saturating_mul(3);
    // The gather: each rank's nodes and, between threads, the copies they post, the whole field in
    // f32, then in f64.
    let gather = match threads {
        1 => p4.saturating_add(p8),
        _ => p4.saturating_mul(3).saturating_add(p8),
    };
    let download = each(rank.download.saturating_add(rank.nodes));
    let frames = if c.png_every.is_some() {
        download.max(gather)
    } else {
        0
    };
    let gather32 = match threads {
        1 => p4,
        _ => p4.saturating_mul(3),
    };
    // Every run may save one: a signal writes it. The checkpoint's copy is made once the gather's
    // own copies are freed: the gathered field and it, or the gather itself, whichever is more.
    let saving = download.max(gather32).max(p4.saturating_mul(2));
    let writing = if c.checkpoint_every.is_some() { p4 } else { 0 };
    let (reading, resumed) = match c.resume {
        Some(_) => (p4.saturating_mul(2), p4),
        None => (0, 0),
    };
    let exact = matches!(source, Source::Translation(_) | Source::Rotation);
    let after = p8.saturating_add(if exact { p8 } else { p4 });
    // glibc gives each thread an arena of its own, which keeps arrays freed there (the set-up's
    // temporaries, downloads) for reuse instead of handing them back: measured, up to two of a rank's
    // arrays per thread; three are allowed for.
    let arenas = match threads {
        1 => 0,
        _ => each(rank.download.saturating_mul(3)),
    };
    let held = [
        each(rank.setup).saturating_add(resumed),
        each(rank.run)
            .saturating_add(frames)
            .saturating_add(writing),
        each(rank.run).saturating_add(saving),
        gather,
        after,
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    let host = source
        .making(p8)
        .max(problem.saturating_add(reading))
        .max(problem.saturating_add(held).saturating_add(arenas))
        .saturating_mul(processes as u64);
    // Ranks beyond the GPUs there are share them.
    let gpus = if on_gpu {
        Gpu::probe().unwrap_or(1).max(1) as u64
    } else {
        1
    };
    let gpu = rank.gpu.saturating_mul(k.div_ceil(gpus));
    Ok(Footprint::new(
        format!(
            "a {} x {} advection run ({}){}",
            size[0],
            size[1],
            source.title(),
            if ranks > 1 {
                format!(" split over {ranks} ranks")
            } else {
                String::new()
            }
        ),
        host,
        gpu,
        on_gpu,
    ))
}

/// Checks the run's memory, then makes its case and problem: every big array of the process comes
/// after the check.
fn prepare(
    c: &Common,
    source: &Source,
    revolutions: Option<f64>,
    size: [usize; 2],
    ranks: usize,
    here: [usize; 2],
    gpu: Option<&Gpu>,
) -> Result<Prepared> {
    let footprint = footprint(c, source, size, ranks, here, gpu.is_some())?;
    footprint.check(gpu)?;
    let mut case = source.build(size)?;
    let (dt, steps) = time_stepping(c, revolutions, &case)?;
    // The case's arrays move into the problem: no copy of them is made.
    let problem = Problem {
        size,
        f0: std::mem::take(&mut case.f0),
        u: std::mem::take(&mut case.u),
        v: std::mem::take(&mut case.v),
        c: dt / case.h,
    };
    problem.check()?;
    let mut named = vec![("case", source.title().to_string())];
    if let Source::Translation([u, v]) = source {
        named.push(("velocity", format!("{u}x{v}")));
    }
    named.extend([("h", case.h.to_string()), ("dt", dt.to_string())]);
    let params = checkpoint::params(&problem, &named);
    let on_gpu = gpu.is_some();
    let informed = vec![
        ("kernel".to_string(), c.kernel.name().to_string()),
        ("arithmetic".into(), arithmetic(c.kernel, on_gpu).into()),
    ];
    let dir = c
        .checkpoint
        .clone()
        .unwrap_or_else(|| c.output.join("checkpoint"));
    let checkpoints = Checkpoints {
        path: dir.join(checkpoint::FILE),
        every: c.checkpoint_every,
        hint: format!("--resume {}", dir.display()),
    };
    let resumed = match &c.resume {
        Some(path) => {
            let file = cli::checkpoint_file(path, checkpoint::FILE);
            let read = checkpoint::read(&file, &params, size)?;
            if read.step >= steps {
                // The rotation's revolutions give the time step: the same one with --steps is --dt.
                let dt_too = match (source, c.steps) {
                    (Source::Rotation, None) => {
                        format!(" and --dt {dt} (its revolutions' time step)")
                    }
                    _ => String::new(),
                };
                return Err(Error::Invalid(format!(
                    "{} is at step {}, and this run ends at step {steps}: give --steps above \
                     {}{dt_too} to continue it",
                    file.display(),
                    read.step,
                    read.step
                )));
            }
            let theirs = checkpoint::param(&read.params, "arithmetic");
            let ours = arithmetic(c.kernel, on_gpu);
            let note = match theirs {
                Some(t) if t != ours => Some(format!(
                    "note: the checkpoint's run computed the cubics in {t} form ({} kernel), and \
                     this one computes them in {ours} form: the same scheme rounded otherwise in \
                     f32, so the result is not bit for bit that of a run never stopped",
                    checkpoint::param(&read.params, "kernel").unwrap_or("another")
                )),
                _ => None,
            };
            Some(Resumed {
                step: read.step,
                file,
                note,
                field: RwLock::new(Some(read.field)),
                pending: AtomicUsize::new(here[0]),
            })
        }
        None => None,
    };
    Ok(Prepared {
        title: source.title(),
        courant: problem.max_courant().0,
        case,
        problem,
        dt,
        steps,
        footprint,
        params,
        informed,
        checkpoints,
        resumed,
    })
}

/// Runs the case `source` with the options `c`: on this process, on the threads of `--gpus`, or on
/// the processes of `--mpi`.
fn run_case(c: &Common, source: Source, size: [usize; 2], revolutions: Option<f64>) -> Result<()> {
    check_options(c)?;
    check_size(size)?;
    let gpu = || c.engine.gpu("on the CPU engine");
    if let Some(n) = c.split.halo.gpus {
        let n = n as usize;
        let most = most_ranks(size);
        let over = format!(
            "the grid's {} rows (at least 2 per rank: the halo its neighbours read) are",
            size[1]
        );
        // Before `prepare` makes the shared arrays, not only before the threads start.
        cli::check_gpus(n, most, &over)?;
        let main = gpu()?;
        c.split.halo.check(main.is_some()).map_err(Error::Invalid)?;
        let run = prepare(c, &source, revolutions, size, n, [n, 1], main.as_deref())?;
        return cli::on_gpus(n, most, &over, |comm| run_on(c, &run, comm));
    }
    if !c.mpi {
        let main = gpu()?;
        c.split.halo.check(main.is_some()).map_err(Error::Invalid)?;
        let run = prepare(c, &source, revolutions, size, 1, [1, 1], main.as_deref())?;
        return run_on(c, &run, &Solo);
    }
    #[cfg(feature = "mpi")]
    {
        let comm = lattice_gpu_host::comm::Mpi::init()?;
        cli::same_options(&comm).map_err(Error::Invalid)?;
        let main = gpu()?;
        c.split.halo.check(main.is_some()).map_err(Error::Invalid)?;
        let here = [1, comm.ranks_here()];
        let run = prepare(
            c,
            &source,
            revolutions,
            size,
            comm.size(),
            here,
            main.as_deref(),
        )?;
        run_on(c, &run, &comm)
    }
    #[cfg(not(feature = "mpi"))]
    Err(Error::Invalid(lattice_gpu_cli::NO_MPI.into()))
}

/// This rank's part of the run `r`; rank 0 reports it and writes its files, all or nothing.
fn run_on<C: Communicator>(c: &Common, r: &Prepared, comm: &C) -> Result<()> {
    cli::same_options(comm).map_err(Error::Invalid)?;
    let gpu = c.engine.gpu("on the CPU engine")?;
    #[cfg(feature = "nccl")]
    let nccl = c.split.communicator(comm, gpu.as_ref())?;
    #[cfg(feature = "nccl")]
    let halos = nccl.as_ref().map_or(Halos::Host, Halos::Nccl);
    #[cfg(not(feature = "nccl"))]
    let halos = Halos::Host;
    // Only rank 0 writes; its files are staged until the run has succeeded.
    let out = (comm.rank() == 0)
        .then(|| cli::output_dir(&c.output))
        .transpose()?;
    let field = match (gpu.clone(), c.block) {
        (None, _) => simulate(&HostLoopEngine, comm, halos, c, r, out.as_ref())?,
        (Some(gpu), Some((block_x, block_y))) => {
            let shape = LaunchShape {
                block_x,
                block_y,
                march: c.unroll.0.unwrap_or(8),
                variant: Variant::Plain,
            };
            let engine = DeviceLoopEngine::new(gpu, shape);
            simulate(&engine, comm, halos, c, r, out.as_ref())?
        }
        (Some(gpu), _) => {
            let engine = tuner(gpu, c.kernel, c.unroll.0, c.retune);
            simulate(&engine, comm, halos, c, r, out.as_ref())?
        }
    };
    let Some(out) = out else {
        return Ok(());
    };
    #[cfg(feature = "nccl")]
    lattice_gpu_cli::print_exchange_time(lattice_gpu_cli::exchange_time(nccl.as_ref())?);
    let (p, case, steps, dt) = (&r.problem, &r.case, r.steps, r.dt);
    let t = dt * steps as f64;
    println!(
        "{}: {steps} steps of dt {dt:.6e} (t = {t:.6}), CFL {:.4}",
        r.title, r.courant
    );
    if let Some(exact) = &case.exact {
        let n = norms(&field, &exact(t));
        println!(
            "error against the exact solution: L1 {:.4e}  L2 {:.4e}  Linf {:.4e}  relative L2 {:.4e}",
            n.l1, n.l2, n.linf, n.relative
        );
    }
    if let Some(scheme) = &case.scheme_exact {
        let n = norms(&field, &scheme(steps as usize, dt));
        println!(
            "interpolation error (against the scheme's straight-step departure, exactly interpolated): relative L2 {:.4e}",
            n.relative
        );
    }
    println!("mass drift {:+.4e}", mass_drift(&field, &p.f0));
    let picture = picture(r, steps, range_of(&p.f0));
    write_outputs(&out, &field, p.size, &picture, "field")?;
    drop(field);
    cli::commit(out)?;
    r.footprint.report(gpu.as_deref());
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

/// Stages `f` on a `size` grid as `stem.npy` (f32) and `stem.png` (drawn as `picture` says).
fn write_outputs(
    out: &OutputDir,
    f: &[f64],
    [nx, ny]: [usize; 2],
    picture: &Picture,
    stem: &str,
) -> Result<()> {
    let data: Vec<f32> = f.iter().map(|&x| x as f32).collect();
    write_npy(&out.file(&format!("{stem}.npy")), &[ny, nx], &data)?;
    drop(data);
    write_field_png(&out.file(&format!("{stem}.png")), nx, ny, f, picture)?;
    Ok(())
}

/// What the picture of run `r`'s field after `step` steps shows: the case, the field, the step and
/// time, the domain's axes (nodes `h` apart from 0), colours over `range` (the initial field's, so
/// that the pictures of one run compare).
fn picture(r: &Prepared, step: u64, (lo, hi): (f64, f64)) -> Picture {
    let ([nx, ny], h) = (r.problem.size, r.case.h);
    Picture::new(
        format!(
            "{} {nx}×{ny}: f at step {step}, t = {}",
            r.title,
            significant(r.dt * step as f64)
        ),
        "f",
        Axis::cells("x", 0.0, h, nx),
        Axis::cells("y", 0.0, h, ny),
    )
    .range(lo, hi)
}

/// Runs the steps of `r` on `engine` (from its checkpoint's state where it resumes one) with a
/// progress bar (points per second), a PNG every `--png-every` steps staged in `out` (rank 0), its
/// checkpoints, and the health checks: every rank checks its field at the same steps (every
/// [`check_interval`] steps, before each picture and checkpoint, and after the last step), and all
/// stop together on a non-finite value or a signal (which first writes a checkpoint). Returns the
/// field (rank 0; empty on the others).
fn simulate<E: LoopEngine, C: Communicator>(
    engine: &E,
    comm: &C,
    halos: Halos<'_>,
    c: &Common,
    r: &Prepared,
    out: Option<&OutputDir>,
) -> Result<Vec<f64>> {
    let (p, steps) = (&r.problem, r.steps);
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
    if let Some(res) = &r.resumed {
        restore(&mut a, res)?;
        if lead {
            println!("resuming from step {} of {}", res.step, res.file.display());
            if let Some(note) = &res.note {
                println!("{note}");
            }
        }
    }
    let first = a.steps();
    let bar = progress(steps, "steps");
    bar.set_position(first);
    if !lead {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let points = (p.size[0] * p.size[1]) as f64;
    let range = range_of(&p.f0);
    let check_every = check_interval(points as u64, steps, engine.device().is_some());
    let report_every = (steps / 100).max(1);
    let ck = &r.checkpoints;
    let every_steps = match ck.every {
        Some(cli::Every::Steps(n)) => Some(n as u64),
        _ => None,
    };
    let every_seconds = match ck.every {
        Some(cli::Every::Seconds(t)) => Some(t),
        _ => None,
    };
    let mut saver = Writer(lead.then(|| Saver::new(&ck.path)));
    let mut written = Vec::new();
    // The fields' uploads may still be on their way: not part of the steps' time.
    a.synchronize()?;
    let start = Instant::now();
    let mut last_save = Instant::now();
    // Time spent writing PNGs and handing checkpoints over, left out of the points per second.
    let (mut writing, mut saving) = (0.0, 0.0);
    let mut checked = first;
    while a.steps() < steps {
        a.step()?;
        let s = a.steps();
        let png_due = c.png_every.is_some_and(|e| s % e == 0);
        // Counted from step 0: a resumed run writes at the same steps.
        let ck_due = every_steps.is_some_and(|n| s % n == 0);
        // A picture or a checkpoint shows a healthy field only; each check also answers a signal.
        if png_due || ck_due || s - checked >= check_every {
            checked = s;
            // A signal at the last step stops nothing: the run's results are complete.
            let verdict = match a.verdict()? {
                Verdict::Stop(_) if s == steps => Verdict::Healthy,
                v => v,
            };
            let time_due = match every_seconds {
                // Rank 0's clock decides for all.
                Some(t) => {
                    let mine = lead && last_save.elapsed().as_secs_f64() >= t;
                    comm.sum(f64::from(u8::from(mine)))? > 0.0
                }
                None => false,
            };
            let t = Instant::now();
            match verdict {
                Verdict::Healthy if ck_due || time_due => {
                    written.extend(save(&a, &mut saver.0, r, s)?);
                    saving += t.elapsed().as_secs_f64();
                    last_save = Instant::now();
                }
                Verdict::Stop(_) => {
                    written.extend(save(&a, &mut saver.0, r, s)?);
                    if let Some(sv) = &mut saver.0 {
                        written.extend(sv.wait()?);
                        eprintln!(
                            "checkpoint of step {s} written to {}; continue the run with the same \
                             options and {}",
                            sv.path().display(),
                            ck.hint
                        );
                    }
                }
                _ => {}
            }
            a.conclude(verdict)?;
            if png_due {
                let t = Instant::now();
                let f = a.field()?;
                if let Some(out) = out {
                    let png = out.file(&format!("field-{s:07}.png"));
                    write_field_png(&png, p.size[0], p.size[1], &f, &picture(r, s, range))?;
                }
                writing += t.elapsed().as_secs_f64();
            }
        }
        if s % report_every == 0 || s == steps {
            a.synchronize()?;
            let busy = start.elapsed().as_secs_f64() - writing - saving;
            let rate = points * (s - first) as f64 / busy;
            bar.set_position(s);
            bar.set_message(format!("{:.2} G points/s", rate / 1e9));
        }
    }
    bar.finish_and_clear();
    // Before the field comes to the host (1.1 s at 8192^2, as long as 2500 steps).
    let secs = start.elapsed().as_secs_f64() - writing - saving;
    // Nothing non-finite is written; a signal now stops nothing.
    if checked < steps {
        match a.verdict()? {
            Verdict::Stop(_) => {}
            v => a.conclude(v)?,
        }
    }
    // The last checkpoint is on disk before the field is gathered: one copy of it at a time.
    if let Some(sv) = &mut saver.0 {
        written.extend(sv.wait()?);
    }
    if lead {
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
        let aside: Vec<String> = [(writing, "writing PNGs"), (saving, "saving checkpoints")]
            .into_iter()
            .filter(|(t, _)| *t > 0.0)
            .map(|(t, what)| format!("{t:.3} s {what}"))
            .collect();
        println!(
            "{} steps in {secs:.3} s{}: {:.3} G points/s",
            steps - first,
            match aside.is_empty() {
                true => String::new(),
                false => format!(" (and {})", aside.join(", ")),
            },
            points * (steps - first) as f64 / secs / 1e9
        );
        if let Some((done, needed)) = E::tuning_progress(a.site().info()) {
            println!("{}", unfinished_tuning(done, needed));
        }
        if let (Some(last), Some(sv)) = (written.last(), &saver.0) {
            println!(
                "{} checkpoints written, the last {last}; the run waited {:.3} s for them",
                written.len(),
                sv.waited()
            );
        }
    }
    a.into_field()
}

/// A checkpoint writer (rank 0's) that, dropped with a write under way (the run failed), waits for
/// it: the process never ends with a checkpoint half-written or its temporary left.
struct Writer(Option<Saver>);

impl Drop for Writer {
    fn drop(&mut self) {
        if let Some(sv) = &mut self.0 {
            // The run's own error is the one reported.
            let _ = sv.wait();
        }
    }
}

/// Gathers the field of `a` after step `s` on rank 0, which starts writing the checkpoint of the
/// run `r` through `saver` (collective); returns the record of the write before, which has ended.
fn save<E: LoopEngine, C: Communicator>(
    a: &Advection<'_, E, C>,
    saver: &mut Option<Saver>,
    r: &Prepared,
    s: u64,
) -> Result<Option<Written>> {
    // The previous checkpoint is on disk before this one is made: one copy of the field at a time.
    let before = match saver {
        Some(sv) => sv.wait()?,
        None => None,
    };
    let field = a.state()?;
    let Some(sv) = saver else {
        return Ok(before);
    };
    let params: Vec<(String, String)> = r.params.iter().chain(&r.informed).cloned().collect();
    let ck = checkpoint::checkpoint(&params, s, &field);
    drop(field);
    Ok(before.or(sv.save(ck)?))
}

/// Puts the checkpoint's state `res` into `a` (collective: every rank of the process restores its
/// rows from the one copy), and frees that copy once the last of them has.
fn restore<E: LoopEngine, C: Communicator>(
    a: &mut Advection<'_, E, C>,
    res: &Resumed,
) -> Result<()> {
    let restored = {
        let field = res.field.read().unwrap_or_else(PoisonError::into_inner);
        match field.as_deref() {
            Some(f) => a.restore(res.step, f),
            None => Err(Error::Invalid(
                "the checkpoint's field was freed before every rank had restored it: a fault of \
                 lattice-gpu; please report it with the command line"
                    .into(),
            )),
        }
    };
    if res.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
        *res.field.write().unwrap_or_else(PoisonError::into_inner) = None;
    }
    restored
}

/// Refuses an option that `case` does not take, naming why and the fix (they are hidden from its
/// --help).
fn refuse(given: bool, msg: &str) -> Result<()> {
    if given {
        Err(Error::Invalid(msg.into()))
    } else {
        Ok(())
    }
}

const ONLY_ROTATION_TURNS: &str =
    "--revolutions counts the turns of the rotation case, the only one \
     with a period; give the number of steps with --steps";

fn own_velocity(case: &str, flow: &str) -> String {
    format!(
        "{case} has a velocity of its own ({flow}): leave --velocity out; the translation case takes \
         --velocity UxV, and `advection file --field f.npy --velocity uv.npy` your own velocities"
    )
}

fn dispatch(cli: Cli) -> Result<()> {
    match &cli.command {
        Command::Translation(a) => {
            refuse(a.no_period.revolutions.is_some(), ONLY_ROTATION_TURNS)?;
            let source = Source::Translation(a.velocity);
            run_case(&a.common, source, a.grid.size, None)
        }
        Command::Rotation(a) => {
            let flow = "solid-body rotation about the centre, one turn per unit time";
            refuse(a.own.velocity.is_some(), &own_velocity("rotation", flow))?;
            run_case(&a.common, Source::Rotation, a.grid.size, a.revolutions)
        }
        Command::Swirl(a) => {
            let flow = "a steady swirl from a stream function";
            refuse(a.own.velocity.is_some(), &own_velocity("swirl", flow))?;
            refuse(a.no_period.revolutions.is_some(), ONLY_ROTATION_TURNS)?;
            run_case(&a.common, Source::Swirl, a.grid.size, None)
        }
        Command::File(a) => {
            refuse(
                a.size.is_some(),
                "the file case's grid is the shape (ny, nx) of --field: leave --size out",
            )?;
            refuse(a.no_period.revolutions.is_some(), ONLY_ROTATION_TURNS)?;
            check_options(&a.common)?;
            let size = file_size(a)?;
            run_case(&a.common, Source::File(a), size, None)
        }
        Command::Bench(b) => bench(b),
    }
}

fn main() -> ExitCode {
    let parsed = Cli::parse();
    cli::start();
    cli::exit(dispatch(parsed))
}
