//! `lbm`: D3Q19 lattice Boltzmann on the GPU (or the CPU): the lid-driven cavity, the Poiseuille
//! channel, the decaying Taylor-Green vortex, and the MLUPs/s benchmark against the copy bandwidth.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand, ValueEnum};
use lattice_gpu::cli::{make_output_dir, parse_size3, progress, Placement};
#[cfg(feature = "mpi")]
use lattice_gpu::host::comm::Mpi;
use lattice_gpu::host::comm::{Communicator, Solo};
use lattice_gpu::host::threads::Threads;
use lattice_gpu::host::{Error as HostError, Gpu};
use lattice_gpu::kernels::lbm::Half;
use lattice_gpu::lbm::cases::{self, GHIA_RE100_U, GHIA_RE100_V};
use lattice_gpu::lbm::output::{numbers, write_csv, write_fields};
use lattice_gpu::lbm::solver::{TUNE_BLOCKS, TUNE_STEPS};
use lattice_gpu::lbm::{
    Collision, Engine, Error, Geometry, Lbm, LbmStorage, Moments, Params, Result, Streaming,
};

/// Lattice Boltzmann (D3Q19) on the GPU, or on the CPU without one.
#[derive(Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Lid-driven cavity at a Reynolds number: centreline profiles (CSV), compared with Ghia et al. at Re 100.
    Cavity(CavityArgs),
    /// Body-force-driven channel: L2 error of the steady profile against the parabola.
    Poiseuille(PoiseuilleArgs),
    /// Decaying 2-D Taylor-Green vortex: measured kinetic-energy decay rate against 2 nu k^2.
    TaylorGreen(TaylorGreenArgs),
    /// MLUPs/s for every storage and streaming scheme, against the copy bandwidth.
    Bench(BenchArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Storage {
    F64,
    F32,
    /// Half-precision storage, f32 arithmetic.
    F16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum StreamingArg {
    /// Two lattices (A/B), pull.
    Ab,
    /// One lattice, in place (AA pattern).
    Aa,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CollisionArg {
    Bgk,
    Trt,
}

#[derive(Args, Clone)]
struct Common {
    /// Storage precision of the populations (f16: half the bytes, f32 arithmetic).
    #[arg(long, value_enum, default_value_t = Storage::F32)]
    precision: Storage,
    /// Streaming scheme.
    #[arg(long, value_enum, default_value_t = StreamingArg::Aa)]
    streaming: StreamingArg,
    /// Collision operator.
    #[arg(long, value_enum, default_value_t = CollisionArg::Trt)]
    collision: CollisionArg,
    /// TRT magic parameter (3/16: exact halfway walls for Poiseuille flow; 1/4: most stable).
    #[arg(long, allow_hyphen_values = true, default_value_t = 0.25)]
    magic: f64,
    /// Where to run.
    #[arg(long, value_enum, default_value_t = Placement::Auto)]
    engine: Placement,
    /// Output directory.
    #[arg(long, default_value = "lbm-out")]
    output: PathBuf,
    /// Split the lattice along z over the ranks of the MPI job this process belongs to (start it with
    /// `mpirun -np N`); rank 0 prints and writes. Needs `--features mpi`.
    #[arg(long)]
    mpi: bool,
    #[command(flatten)]
    split: lattice_gpu::cli::SplitArgs,
}

impl Common {
    fn collision(&self) -> Collision {
        match self.collision {
            CollisionArg::Bgk => Collision::Bgk,
            CollisionArg::Trt => Collision::Trt { magic: self.magic },
        }
    }

    fn streaming(&self) -> Streaming {
        match self.streaming {
            StreamingArg::Ab => Streaming::TwoLattice,
            StreamingArg::Aa => Streaming::InPlace,
        }
    }
}

#[derive(Args, Clone)]
struct Stop {
    /// Steps to run; without it, run until steady (see --steady).
    #[arg(long)]
    steps: Option<u64>,
    /// Stop when no velocity changes by more than this fraction of the largest speed between checks.
    #[arg(long, allow_hyphen_values = true, default_value_t = 1e-5)]
    steady: f64,
    /// Steps between steadiness checks (and progress updates).
    #[arg(long, default_value_t = 1000)]
    check_every: u64,
    /// Most steps when running to steady state.
    #[arg(long, default_value_t = 1_000_000)]
    max_steps: u64,
}

impl Stop {
    /// The most steps the run takes, or the error naming the option that cannot work.
    fn total(&self) -> Result<u64> {
        let total = self.steps.unwrap_or(self.max_steps);
        if total == 0 || self.check_every == 0 || self.steady.is_nan() || self.steady <= 0.0 {
            return Err(Error::InvalidParameter(
                "--steps, --max-steps and --check-every must be at least 1 and --steady positive"
                    .into(),
            ));
        }
        Ok(total)
    }
}

#[derive(Args)]
struct CavityArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    stop: Stop,
    /// Grid NXxNYxNZ with the walls (or N for a cube); quasi-2-D unless --closed-z.
    #[arg(long, default_value = "130x130x4", value_parser = parse_size3)]
    size: [usize; 3],
    /// Close the cavity in z too (3-D cavity); otherwise z is periodic.
    #[arg(long)]
    closed_z: bool,
    /// Reynolds number U L / nu (L: fluid cells across in x).
    #[arg(
        long,
        allow_hyphen_values = true,
        default_value_t = 100.0,
        conflicts_with = "tau"
    )]
    re: f64,
    /// Relaxation time instead of --re (the Reynolds number then follows from it).
    #[arg(long, allow_hyphen_values = true)]
    tau: Option<f64>,
    /// Lid speed in lattice units (at most 0.17, Mach 0.3).
    #[arg(long, allow_hyphen_values = true, default_value_t = 0.1)]
    lid: f64,
}

#[derive(Args)]
struct PoiseuilleArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    stop: Stop,
    /// Fluid cells across the channel.
    #[arg(long, default_value_t = 32)]
    width: usize,
    /// Cells along the flow (x) and in z (periodic).
    #[arg(long, default_value = "4x4", value_parser = parse_pair)]
    extent: (usize, usize),
    /// Relaxation time.
    #[arg(long, allow_hyphen_values = true, default_value_t = 0.8)]
    tau: f64,
    /// Body force along x.
    #[arg(long, allow_hyphen_values = true, default_value_t = 1e-6)]
    force: f64,
}

#[derive(Args)]
struct TaylorGreenArgs {
    #[command(flatten)]
    common: Common,
    /// Grid NXxNYxNZ (one period in x and y).
    #[arg(long, default_value = "128x128x2", value_parser = parse_size3)]
    size: [usize; 3],
    /// Relaxation time.
    #[arg(long, allow_hyphen_values = true, default_value_t = 0.8)]
    tau: f64,
    /// Initial velocity amplitude.
    #[arg(long, allow_hyphen_values = true, default_value_t = 0.02)]
    u0: f64,
    /// Steps.
    #[arg(long, default_value_t = 4000)]
    steps: u64,
}

#[derive(Args)]
struct BenchArgs {
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

fn parse_pair(s: &str) -> std::result::Result<(usize, usize), String> {
    match lattice_gpu::cli::parse_dims(s)?.as_slice() {
        [a, b] => Ok((*a, *b)),
        _ => Err(format!("`{s}` must be two sizes, AxB (e.g. 4x4)")),
    }
}

fn engine(arg: Placement) -> Result<Engine> {
    Ok(arg.gpu("on the CPU")?.map_or(Engine::Host, Engine::Device))
}

fn describe(e: &Engine) -> String {
    match e {
        Engine::Host => format!("CPU ({} threads)", rayon::current_num_threads()),
        Engine::Device(g) => g.name().to_string(),
    }
}

/// The output directory, made by rank 0 only (the other ranks write nothing).
fn out_dir(c: &Common, lead: bool) -> Result<PathBuf> {
    if lead {
        Ok(make_output_dir(&c.output)?)
    } else {
        Ok(c.output.clone())
    }
}

/// The fewest steps a run must have for [`advance`] to tune its block size on the first ones.
const TUNE_AT_LEAST: u64 = 10 * TUNE_BLOCKS.len() as u64 * TUNE_STEPS;

/// Runs `lbm` for `--steps`, or until steady, with a progress bar showing MLUPs/s; returns the last
/// moments.
fn advance<S: LbmStorage, C: Communicator>(lbm: &mut Lbm<S, C>, stop: &Stop) -> Result<Moments> {
    let total = stop.total()?;
    let lead = lbm.comm().rank() == 0;
    let bar = progress(total, "steps");
    if !lead {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let cells = lbm.geometry().cells() as f64 * lbm.comm().size() as f64;
    // Only the steps are timed: each check brings every cell's moments to rank 0's host (0.9 GB at
    // 384^3), which took five times as long as 300 steps.
    let mut stepping = Duration::ZERO;
    let mut before: Option<Moments> = None;
    let mut done = 0;
    // The block size is tuned on the run's first steps where they are few against the whole run.
    if total >= TUNE_AT_LEAST {
        let start = Instant::now();
        if let Some(t) = lbm.tune_block()? {
            done = t.steps;
            if lead {
                println!(
                    "blocks of {} threads ({:.3} ms per step; tuned on the first {} steps)",
                    t.block, t.ms_per_step, t.steps
                );
            }
        }
        stepping += start.elapsed();
    }
    while done < total {
        let n = stop.check_every.min(total - done);
        let start = Instant::now();
        lbm.run(n)?;
        lbm.synchronize()?;
        stepping += start.elapsed();
        let m = lbm.moments()?;
        done += n;
        let mlups = cells * done as f64 / stepping.as_secs_f64() / 1e6;
        bar.set_position(done);
        bar.set_message(format!("{mlups:.0} MLUPs/s, max |u| {:.3e}", m.max_speed()));
        // Rank 0 holds the moments; its verdict (1 unstable, 2 steady) reaches every rank.
        let verdict = if !lead {
            0.0
        } else if !m.max_speed().is_finite() {
            1.0
        } else if stop.steps.is_none()
            && before
                .as_ref()
                .is_some_and(|b| cases::is_steady(b, &m, stop.steady))
        {
            2.0
        } else {
            0.0
        };
        let verdict = lbm.comm().sum(verdict)?;
        if verdict == 1.0 {
            bar.abandon();
            return Err(Error::InvalidParameter(format!(
                "the flow became unstable (non-finite velocity) after {done} steps; raise tau \
                 (lower the Reynolds number or raise the resolution) or lower the speeds"
            )));
        }
        if verdict == 2.0 {
            bar.finish_and_clear();
            if lead {
                println!(
                    "steady after {done} steps (changes below {:e} of the largest speed)",
                    stop.steady
                );
            }
            return Ok(m);
        }
        before = Some(m);
    }
    bar.finish_and_clear();
    let secs = stepping.as_secs_f64();
    if lead {
        println!(
            "{done} steps in {secs:.2} s: {:.0} MLUPs/s (the steps alone, without the checks' moments)",
            cells * done as f64 / secs / 1e6
        );
        #[cfg(feature = "nccl")]
        lattice_gpu::cli::print_exchange_time(lbm.exchange_time()?);
    }
    if lead && stop.steps.is_none() {
        eprintln!("warning: not steady after --max-steps {}", stop.max_steps);
    }
    Ok(before.expect("at least one check ran"))
}

/// The engine, after checking that a run of `dims` fits it (before the case allocates anything).
fn engine_for<S: LbmStorage>(c: &Common, dims: [usize; 3]) -> Result<Engine> {
    let e = engine(c.engine)?;
    Lbm::<S>::check_fits(&e, dims, c.streaming())?;
    Ok(e)
}

fn make<S: LbmStorage, C: Communicator>(
    comm: C,
    c: &Common,
    e: Engine,
    geometry: Geometry,
    params: Params,
    init: impl Fn(usize) -> (f64, [f64; 3]) + Sync,
) -> Result<Lbm<S, C>> {
    lattice_gpu::cli::same_options(&comm).map_err(Error::InvalidParameter)?;
    // Before the header and the near-1/2 warning, which an unusable tau would contradict.
    params.check()?;
    let d = geometry.dims();
    let lead = comm.rank() == 0;
    let gpu = match &e {
        Engine::Host => None,
        Engine::Device(gpu) => Some(gpu),
    };
    c.split
        .halo
        .check(gpu.is_some())
        .map_err(Error::InvalidParameter)?;
    if let Some(line) = c.split.describe('z', comm.size()).filter(|_| lead) {
        println!("{line}");
    }
    lead.then(|| {
        println!(
            "{}: {}x{}x{} cells, {} storage, {} streaming, tau {:.6}, {:?}",
            describe(&e),
            d[0],
            d[1],
            d[2],
            S::NAME,
            c.streaming().name(),
            params.tau,
            params.collision
        )
    });
    if lead && params.tau < 0.51 {
        eprintln!(
            "warning: tau {:.5} is close to 1/2; the run may become unstable (raise the resolution or lower the Reynolds number)",
            params.tau
        );
    }
    #[cfg(feature = "nccl")]
    let nccl = c.split.communicator(&comm, gpu)?;
    let mut lbm = Lbm::new_on_cut(comm, c.split.cut, &e, geometry, params, c.streaming(), init)?;
    lbm.set_overlap(!c.split.halo.no_overlap);
    #[cfg(feature = "nccl")]
    if let Some(n) = nccl {
        lbm.exchange_through(n)?;
    }
    Ok(lbm)
}

fn cavity<S: LbmStorage, C: Communicator>(a: &CavityArgs, comm: C) -> Result<()> {
    let lead = comm.rank() == 0;
    a.stop.total()?;
    let e = engine_for::<S>(&a.common, a.size)?;
    // --tau sets the viscosity, and so the Reynolds number U L / nu.
    let re = match a.tau {
        Some(tau) => {
            Params::bgk(tau).check()?;
            a.lid * (a.size[0] as f64 - 2.0) / Params::bgk(tau).viscosity()
        }
        None => a.re,
    };
    let (g, p) = cases::cavity(a.size, a.closed_z, re, a.lid, a.common.collision())?;
    if lead && a.tau.is_some() {
        println!("Reynolds number {re:.3} (from --tau)");
    }
    let dir = out_dir(&a.common, lead)?;
    let mut lbm = make::<S, C>(comm, &a.common, e, g, p, |_| (1.0, [0.0; 3]))?;
    let m = advance(&mut lbm, &a.stop)?;
    if !lead {
        return Ok(());
    }
    let (u, v) = cases::centrelines(&m, a.lid);
    let rows = |p: &[(f64, f64)]| p.iter().map(|&(s, v)| numbers(&[s, v])).collect::<Vec<_>>();
    write_csv(&dir.join("centreline_u.csv"), "y,u_over_U", &rows(&u))?;
    write_csv(&dir.join("centreline_v.csv"), "x,v_over_U", &rows(&v))?;
    if (re - 100.0).abs() < 1e-9 && !a.closed_z {
        println!(
            "against Ghia et al. (Re 100): max |u - u_Ghia| = {:.4}, max |v - v_Ghia| = {:.4} (of U)",
            cases::profile_error(&u, &GHIA_RE100_U),
            cases::profile_error(&v, &GHIA_RE100_V)
        );
    }
    finish(
        &dir,
        &m,
        &format!("lid-driven cavity Re {re}"),
        &["centreline_u.csv", "centreline_v.csv"],
    )
}

fn poiseuille<S: LbmStorage, C: Communicator>(a: &PoiseuilleArgs, comm: C) -> Result<()> {
    let lead = comm.rank() == 0;
    a.stop.total()?;
    let e = engine_for::<S>(&a.common, [a.extent.0, a.width + 2, a.extent.1])?;
    let (g, p) = cases::poiseuille(
        a.width,
        a.extent.0,
        a.extent.1,
        a.tau,
        a.force,
        a.common.collision(),
    )?;
    let dir = out_dir(&a.common, lead)?;
    let mut lbm = make::<S, C>(comm, &a.common, e, g, p, |_| (1.0, [0.0; 3]))?;
    let m = advance(&mut lbm, &a.stop)?;
    if !lead {
        return Ok(());
    }
    let ny = a.width + 2;
    let rows: Vec<Vec<String>> = (1..ny - 1)
        .map(|y| {
            numbers(&[
                y as f64 - 0.5,
                m.u[m.index([0, y, 0])][0],
                cases::poiseuille_profile(&p, ny, y),
            ])
        })
        .collect();
    write_csv(&dir.join("profile.csv"), "y,u,u_analytic", &rows)?;
    println!(
        "L2 error of the profile against the parabola: {:.3e}",
        cases::poiseuille_error(&m, &p)
    );
    finish(&dir, &m, "Poiseuille channel", &["profile.csv"])
}

fn taylor_green<S: LbmStorage, C: Communicator>(a: &TaylorGreenArgs, comm: C) -> Result<()> {
    let lead = comm.rank() == 0;
    if a.steps < 20 {
        return Err(Error::InvalidParameter(
            "--steps must be at least 20".into(),
        ));
    }
    let e = engine_for::<S>(&a.common, a.size)?;
    let g = Geometry::periodic(a.size)?;
    let mut p = Params::bgk(a.tau);
    p.collision = a.common.collision();
    let dir = out_dir(&a.common, lead)?;
    let mut lbm = make::<S, C>(comm, &a.common, e, g, p, cases::taylor_green(a.size, a.u0)?)?;
    let every = (a.steps / 20).max(1);
    let bar = progress(a.steps, "steps");
    if !lead {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let mut rows = Vec::new();
    while lbm.steps() < a.steps {
        lbm.run(every.min(a.steps - lbm.steps()))?;
        let e = lbm.moments()?.kinetic_energy();
        rows.push((lbm.steps() as f64, e));
        bar.set_position(lbm.steps());
    }
    bar.finish_and_clear();
    let m = lbm.moments()?;
    if !lead {
        return Ok(());
    }
    // Skip the first interval: the initial equilibrium lacks the non-equilibrium part of the flow.
    let (t0, e0) = rows[1];
    let (t1, e1) = rows[rows.len() - 1];
    let rate = (e0 / e1).ln() / (t1 - t0);
    let want = cases::taylor_green_rate(a.size, &p);
    println!(
        "kinetic energy decay rate {rate:.6e} per step, analytic 2 nu k^2 = {want:.6e} ({:+.3}%)",
        100.0 * (rate / want - 1.0)
    );
    let lines: Vec<Vec<String>> = rows.iter().map(|&(t, e)| numbers(&[t, e])).collect();
    write_csv(&dir.join("energy.csv"), "step,kinetic_energy", &lines)?;
    finish(&dir, &m, "Taylor-Green vortex", &["energy.csv"])
}

fn finish(dir: &Path, m: &Moments, title: &str, extra: &[&str]) -> Result<()> {
    let mut paths = write_fields(dir, m, title)?;
    paths.extend(extra.iter().map(|f| dir.join(f)));
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    println!("wrote {}", names.join(", "));
    Ok(())
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
    Lbm::<S>::check_fits(&engine, dims, streaming)?;
    // A periodic box with a Taylor-Green flow: every cell is fluid and the populations are not trivial.
    let mut lbm = Lbm::<S>::new(
        &engine,
        Geometry::periodic(dims)?,
        Params::bgk(0.8),
        streaming,
        cases::taylor_green(dims, 0.02)?,
    )?;
    let cells = (n * n * n) as f64;
    lbm.tune_block()?;
    // Even step counts keep the in-place lattice in the same phase.
    let timed = steps + steps % 2;
    let ms = gpu.time_ms(|| {
        for _ in 0..timed {
            lbm.step(false)?;
        }
        Ok(())
    })? / timed as f64;
    lbm.run(2)?;
    if !lbm.moments()?.max_speed().is_finite() {
        return Err(Error::InvalidParameter(format!(
            "the {n}^3 {} {} run went non-finite",
            S::NAME,
            streaming.name()
        )));
    }
    let mlups = cells / (ms * 1e-3) / 1e6;
    let bytes = Lbm::<S>::traffic_per_cell();
    let gbs = mlups * 1e6 * bytes as f64 / 1e9;
    Ok(Row {
        size: n,
        storage: S::NAME,
        streaming: streaming.name(),
        block: lbm.block(),
        mlups,
        bytes,
        gbs,
        of_copy: gbs / copy,
        mem_per_cell: Lbm::<S>::bytes_per_cell(streaming),
    })
}

fn bench(a: &BenchArgs) -> Result<()> {
    let gpu = lattice_gpu::cli::bench_gpu("lbm", 0)?;
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
                    Err(Error::Host(e @ HostError::OutOfDeviceMemory { .. })) => {
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

fn dispatch(cli: Cli) -> Result<()> {
    // Each case on one domain or, with --mpi, split over the ranks of the MPI job.
    macro_rules! by_storage {
        ($f:ident, $a:expr) => {{
            let split = &$a.common.split;
            split
                .check_launch($a.common.mpi)
                .map_err(Error::InvalidParameter)?;
            if let Some(n) = split.halo.gpus {
                return lattice_gpu::cli::on_gpus(
                    n as usize,
                    usize::MAX,
                    "TODO(issue 34 A.5)",
                    |c| match $a.common.precision {
                        Storage::F64 => $f::<f64, Threads>($a, c.clone()),
                        Storage::F32 => $f::<f32, Threads>($a, c.clone()),
                        Storage::F16 => $f::<Half, Threads>($a, c.clone()),
                    },
                );
            }
            match ($a.common.precision, $a.common.mpi) {
                (Storage::F64, false) => $f::<f64, Solo>($a, Solo),
                (Storage::F32, false) => $f::<f32, Solo>($a, Solo),
                (Storage::F16, false) => $f::<Half, Solo>($a, Solo),
                #[cfg(feature = "mpi")]
                (Storage::F64, true) => $f::<f64, Mpi>($a, Mpi::init()?),
                #[cfg(feature = "mpi")]
                (Storage::F32, true) => $f::<f32, Mpi>($a, Mpi::init()?),
                #[cfg(feature = "mpi")]
                (Storage::F16, true) => $f::<Half, Mpi>($a, Mpi::init()?),
                #[cfg(not(feature = "mpi"))]
                (_, true) => Err(Error::InvalidParameter(lattice_gpu::cli::NO_MPI.into())),
            }
        }};
    }
    match &cli.command {
        Command::Cavity(a) => by_storage!(cavity, a),
        Command::Poiseuille(a) => by_storage!(poiseuille, a),
        Command::TaylorGreen(a) => by_storage!(taylor_green, a),
        Command::Bench(a) => bench(a),
    }
}

fn main() -> ExitCode {
    lattice_gpu::cli::exit(dispatch(Cli::parse()))
}
