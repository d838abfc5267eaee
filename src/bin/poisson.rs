//! `poisson`: the variable-coefficient pressure Poisson equation `-div(c grad p) = f` solved by CG in f64
//! preconditioned with a multigrid V-cycle in f32 (or f64), on the CPU or a GPU: a manufactured solution
//! (optionally with the thin vertical cells of an ocean grid) or your own coefficients and right-hand side.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use lattice_gpu::cli::{output_dir, parse_size3, progress, Placement};
use lattice_gpu::host::engine::tunecache::TuneCache;
use lattice_gpu::host::io::npy::{read_npy, write_npy};
use lattice_gpu::host::io::png::{write_png_scaled, ColorMap};
use lattice_gpu::host::{
    DeviceAutoTuningLoopEngine, DeviceLoopEngine, HostLoopEngine, LaunchShape, LoopEngine,
};
use lattice_gpu::lbm::output::{numbers, write_csv};
use lattice_gpu::poisson::cg::{solve, Precision, Report};
use lattice_gpu::poisson::multigrid::{max_levels, Cycle, Layout, Smoother};
use lattice_gpu::poisson::problem::{manufactured, Problem, Walls};
use lattice_gpu::poisson::{Error, Result};

/// Variable-coefficient Poisson solver: CG (f64) with a geometric-multigrid preconditioner (f32 or f64).
/// Without --coeffs/--rhs it solves a manufactured problem with a known solution and reports the error.
#[derive(Parser)]
#[command(version)]
struct Cli {
    /// Cells: N (a cube) or NXxNYxNZ; every axis even enough to halve --levels - 1 times.
    #[arg(long, default_value = "64", value_parser = parse_size3)]
    size: [usize; 3],
    /// Depth of the manufactured domain [0,1]x[0,1]x[0,depth]: below 1, thin vertical cells (anisotropy).
    #[arg(long, default_value_t = 1.0)]
    depth: f64,
    /// Vertical variation of the manufactured coefficient: c grows by this factor from bottom to top.
    #[arg(long, default_value_t = 1.0)]
    vertical: f64,
    /// Coefficient c per cell, .npy of shape (nz, ny, nx) (with --rhs; replaces the manufactured case).
    #[arg(long, requires = "rhs")]
    coeffs: Option<PathBuf>,
    /// Right-hand side f per cell, .npy of shape (nz, ny, nx).
    #[arg(long, requires = "coeffs")]
    rhs: Option<PathBuf>,
    /// Cell size hx,hy,hz for --coeffs/--rhs.
    #[arg(long, value_delimiter = ',', default_values_t = [1.0, 1.0, 1.0])]
    spacing: Vec<f64>,
    /// Boundary condition on the walls (--coeffs/--rhs).
    #[arg(long, value_enum, default_value_t = WallsArg::Dirichlet)]
    walls: WallsArg,
    /// Relative residual to reach.
    #[arg(long, default_value_t = 1e-10)]
    tol: f64,
    /// CG iteration limit.
    #[arg(long, default_value_t = 500)]
    max_iter: usize,
    /// Precision of the multigrid preconditioner (CG is always f64).
    #[arg(long, value_enum, default_value_t = PrecisionArg::F32)]
    precision: PrecisionArg,
    /// Smoother.
    #[arg(long, value_enum, default_value_t = SmootherArg::Rb)]
    smoother: SmootherArg,
    /// Layout of the 7 coefficients per cell: one array each (soa) or together per cell (aos).
    #[arg(long, value_enum, default_value_t = LayoutArg::Soa)]
    layout: LayoutArg,
    /// Multigrid levels [default: as many as the size allows, at most 6].
    #[arg(long)]
    levels: Option<usize>,
    /// Where to run: `auto` tunes every level's launch shapes on the GPU (and caches them), `device` uses
    /// the fixed (128,1)/march 2 shape.
    #[arg(long, value_enum, default_value_t = Placement::Auto)]
    engine: Placement,
    /// Output directory for pressure.npy, pressure_midz.png and residuals.csv.
    #[arg(long, default_value = "poisson-out")]
    output: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LayoutArg {
    Soa,
    Aos,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum WallsArg {
    Dirichlet,
    Neumann,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PrecisionArg {
    F32,
    F64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SmootherArg {
    /// Red-black Gauss-Seidel.
    Rb,
    /// Weighted Jacobi.
    Jacobi,
}

/// The problem and, for the manufactured case, its exact solution.
fn problem(a: &Cli) -> Result<(Problem, Option<Vec<f64>>)> {
    let [nx, ny, nz] = a.size;
    match (&a.coeffs, &a.rhs) {
        (Some(c), Some(f)) => {
            let read = |path: &PathBuf| -> Result<Vec<f64>> {
                let (shape, data) =
                    read_npy::<f64>(path).map_err(|e| Error::Invalid(e.to_string()))?;
                let [nz2, ny2, nx2] = match shape.as_slice() {
                    [z, y, x] => [*z, *y, *x],
                    _ => {
                        return Err(Error::Invalid(format!(
                            "{}: expected a 3-D array (nz, ny, nx), got {shape:?}",
                            path.display()
                        )))
                    }
                };
                if [nx2, ny2, nz2] != a.size {
                    return Err(Error::Invalid(format!(
                        "{}: shape ({nz2}, {ny2}, {nx2}) does not match --size {nx}x{ny}x{nz}",
                        path.display()
                    )));
                }
                Ok(data)
            };
            let h: [f64; 3] = a.spacing.clone().try_into().map_err(|_| {
                Error::Invalid(format!(
                    "--spacing needs three values hx,hy,hz; got {:?}",
                    a.spacing
                ))
            })?;
            let p = Problem {
                n: a.size,
                h,
                c: read(c)?,
                rhs: read(f)?,
                walls: match a.walls {
                    WallsArg::Dirichlet => Walls::Dirichlet,
                    WallsArg::Neumann => Walls::Neumann,
                },
            };
            p.check()?;
            Ok((p, None))
        }
        _ => {
            if !(a.depth.is_finite() && a.depth > 0.0) {
                return Err(Error::Invalid(format!(
                    "--depth {} must be positive",
                    a.depth
                )));
            }
            let (p, exact) = manufactured(a.size, a.depth, a.vertical);
            p.check()?;
            Ok((p, Some(exact)))
        }
    }
}

fn run(a: &Cli) -> Result<()> {
    let (p, exact) = problem(a)?;
    let levels = a.levels.unwrap_or(max_levels(p.n).min(6));
    let cycle = Cycle {
        levels,
        smoother: match a.smoother {
            SmootherArg::Rb => Smoother::RedBlack,
            SmootherArg::Jacobi => Smoother::Jacobi,
        },
        layout: match a.layout {
            LayoutArg::Soa => Layout::Soa,
            LayoutArg::Aos => Layout::Aos,
        },
        ..Cycle::default()
    };
    let precision = match a.precision {
        PrecisionArg::F32 => Precision::F32,
        PrecisionArg::F64 => Precision::F64,
    };
    let dir = output_dir(&a.output).map_err(Error::Invalid)?;
    let (x, report, secs) = match (a.engine.gpu("on the CPU engine")?, a.engine) {
        (None, _) => timed(&HostLoopEngine, &p, cycle, precision, a)?,
        (Some(gpu), Placement::Device) => timed(
            &DeviceLoopEngine::new(gpu, LaunchShape::FIXED),
            &p,
            cycle,
            precision,
            a,
        )?,
        // Every level and kind of loop keeps its site, so each is tuned once (and cached).
        (Some(gpu), _) => {
            let cache =
                TuneCache::default_path().map_or_else(TuneCache::in_memory, TuneCache::load);
            timed(
                &DeviceAutoTuningLoopEngine::new(gpu, cache),
                &p,
                cycle,
                precision,
                a,
            )?
        }
    };
    println!(
        "converged: {} CG iterations in {secs:.3} s, relative residual {:.3e} (f64 CG, {} preconditioner, {levels} levels, {:?})",
        report.iterations,
        report.history.last().unwrap_or(&1.0),
        match precision {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
        },
        cycle.smoother
    );
    let shown: Vec<String> = report
        .history
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 5 == 0 || *i + 1 == report.history.len())
        .map(|(i, r)| format!("{i}: {r:.2e}"))
        .collect();
    println!("residual history: {}", shown.join(", "));
    for (l, (n, s)) in report.levels.iter().enumerate() {
        println!("level {l}: {}x{}x{} cells, {s:.4} s", n[0], n[1], n[2]);
    }
    if let Some(exact) = &exact {
        let num: f64 = x.iter().zip(exact).map(|(a, b)| (a - b).powi(2)).sum();
        let den: f64 = exact.iter().map(|b| b * b).sum();
        println!(
            "error against the manufactured solution: relative L2 {:.3e}",
            (num / den).sqrt()
        );
    }
    let [nx, ny, nz] = p.n;
    let npy = dir.join("pressure.npy");
    write_npy(&npy, &[nz, ny, nx], &x).map_err(|e| Error::Invalid(e.to_string()))?;
    let mid = nz / 2;
    let png = dir.join("pressure_midz.png");
    write_png_scaled(
        &png,
        nx,
        ny,
        &x[nx * ny * mid..nx * ny * (mid + 1)],
        None,
        ColorMap::Viridis,
        256,
    )
    .map_err(|e| Error::Invalid(e.to_string()))?;
    let csv = dir.join("residuals.csv");
    let rows: Vec<Vec<String>> = report
        .history
        .iter()
        .enumerate()
        .map(|(i, r)| numbers(&[i as f64, *r]))
        .collect();
    write_csv(&csv, "iteration,relative_residual", &rows)
        .map_err(|e| Error::Invalid(e.to_string()))?;
    println!(
        "wrote {}, {} (z = {mid}) and {}",
        npy.display(),
        png.display(),
        csv.display()
    );
    Ok(())
}

fn timed<E: LoopEngine>(
    engine: &E,
    p: &Problem,
    cycle: Cycle,
    precision: Precision,
    a: &Cli,
) -> Result<(Vec<f64>, Report, f64)> {
    println!(
        "{}x{}x{} cells, spacing {:?}, engine: {}",
        p.n[0],
        p.n[1],
        p.n[2],
        p.h,
        engine.describe()
    );
    let bar = progress(a.max_iter as u64, "CG iterations");
    let t = Instant::now();
    let mut show = |it: usize, r: f64| {
        bar.set_position(it as u64);
        bar.set_message(format!("residual {r:.2e}"));
    };
    let result = solve(
        engine, p, cycle, precision, a.tol, a.max_iter, true, &mut show,
    );
    bar.finish_and_clear();
    let (x, report) = result?;
    Ok((x, report, t.elapsed().as_secs_f64()))
}

fn main() -> ExitCode {
    lattice_gpu::cli::exit(run(&Cli::parse()))
}
