//! `lqcd bench-mixed`: time to a 1e-10 solution of the even-odd Wilson system, all-f64 BiCGStab
//! against mixed-precision BiCGStab with reliable updates, its sloppy iterations in f32 and in half
//! precision (binary16), and with `--cgnr` CGNR likewise, at a kappa where
//! f64 BiCGStab needs at least `--min-iterations` iterations. With `--csw` the Wilson-clover system
//! likewise.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, ValueEnum};
use lattice_gpu_host::comm::Solo;
use lattice_gpu_host::solvers::bicgstab::{Fusion, OverheadHiding, SolveOptions, SolveReport};
use lattice_gpu_host::solvers::reliable::{Method, MixedOptions, MixedReport, DEFAULT_DELTA};
use lattice_gpu_host::Gpu;
use lattice_gpu_kernels::wilson::{Fixed, Half};
use lattice_gpu_lqcd::clover::CloverField;
use lattice_gpu_lqcd::clover_gpu::{solve_clover_mixed_with, solve_clover_with};
use lattice_gpu_lqcd::gauge::{complex_gaussian, reunitarize_su3, GaugeField, Su3};
use lattice_gpu_lqcd::geometry::Lattice;
use lattice_gpu_lqcd::gpu::{solve_mixed_with, solve_with, Recon};
use lattice_gpu_lqcd::spinor::SpinorField;
use lattice_gpu_lqcd::{Error, Result};
use rand::SeedableRng;

use super::{
    agree_on_stop, dims_name, make, make_clover, make_clover_mixed, make_mixed,
    mixed_gpu_footprint, outcome, parse_count, parse_dims4, parse_recon, stop_at_signal, Build,
    Layout, TuningArgs,
};

/// The gauge field of the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum Links {
    /// Haar-random SU(3) links (rough; critical kappa near 0.25).
    Random,
    /// Links near the identity, `reunitarize(1 + 0.2 G)` (smooth).
    Smooth,
    /// The free field (QUDA's `invert_test` default; critical kappa 0.125).
    Unit,
}

impl Links {
    /// The kappas tried in turn, each nearer the critical one, until f64 BiCGStab needs the asked
    /// iterations: for the Wilson operator, or with a clover term (c_sw about 1), whose critical kappa
    /// on the random field is lower (8^4, c_sw 1: 190 iterations at 0.21, 1514 at 0.215, breakdowns
    /// from 0.22 on).
    fn kappas(self, clover: bool) -> &'static [f64] {
        match (self, clover) {
            (Links::Random, false) => &[0.24, 0.245, 0.248, 0.249, 0.2495],
            (Links::Random, true) => &[0.205, 0.21, 0.212, 0.214],
            (Links::Smooth, _) => &[0.13, 0.134, 0.136, 0.1365],
            (Links::Unit, _) => &[0.1245, 0.1248, 0.1249, 0.12495, 0.12498],
        }
    }
}

#[derive(Args)]
pub(super) struct BenchMixedArgs {
    /// Lattice X x Y x Z x T.
    #[arg(long, default_value = "32x32x32x64", allow_hyphen_values = true,
          value_parser = parse_dims4)]
    dims: [usize; 4],
    /// The gauge field.
    #[arg(long, value_enum, default_value_t = Links::Random)]
    links: Links,
    /// Hopping parameter; default: the first of a list approaching the critical one at which f64
    /// BiCGStab needs at least --min-iterations.
    #[arg(long, allow_hyphen_values = true)]
    kappa: Option<f64>,
    /// The f64 BiCGStab iterations the chosen kappa must need at least.
    #[arg(long, default_value_t = 300, allow_hyphen_values = true, value_parser = parse_count)]
    min_iterations: u32,
    /// Relative residual to reach (the true one, in f64).
    #[arg(long, default_value_t = 1e-10, allow_hyphen_values = true)]
    tol: f64,
    /// Reliable-update factor of the mixed solves.
    #[arg(long, default_value_t = DEFAULT_DELTA, allow_hyphen_values = true)]
    delta: f64,
    /// How the host drives the GPU.
    #[arg(long, default_value = "async")]
    variant: OverheadHiding,
    /// Iterations between residual reads.
    #[arg(long, default_value_t = 10, allow_hyphen_values = true, value_parser = parse_count)]
    check_every: u32,
    /// Fused iterations (BiCGStab): auto, on, off.
    #[arg(long, default_value = "auto")]
    fused: Fusion,
    /// Complex numbers stored per link: 12 or 18.
    #[arg(long, default_value = "12", value_parser = parse_recon)]
    recon: Recon,
    /// Timed solves of each row after an untimed one; the fastest counts.
    #[arg(long, default_value_t = 3, allow_hyphen_values = true, value_parser = parse_count)]
    repeats: u32,
    /// Also CGNR, all f64 and with each sloppy precision.
    #[arg(long)]
    cgnr: bool,
    /// Clover coefficient: above 0, the Wilson-clover system.
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    csw: f64,
    /// Seed of the gauge field and the source.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// CSV of the results.
    #[arg(long)]
    csv: Option<PathBuf>,
    #[command(flatten)]
    tuning: TuningArgs,
}

/// One row of the table.
struct Row {
    method: Method,
    precision: &'static str,
    /// Whether the solve reached the tolerance (a mixed one may stall or reach the limit).
    converged: bool,
    iterations: u32,
    updates: Option<u32>,
    seconds: f64,
    residual: f64,
}

pub(super) fn bench_mixed(a: &BenchMixedArgs) -> Result<()> {
    if !(a.tol > 0.0 && a.tol < 1.0 && a.delta > 0.0 && a.delta < 1.0) {
        return Err(Error::InvalidParameter(format!(
            "--tol {} and --delta {} must lie between 0 and 1",
            a.tol, a.delta
        )));
    }
    if let Some(k) = a.kappa {
        lattice_gpu_lqcd::reference::check_kappa(k)?;
    }
    lattice_gpu_lqcd::clover::check_csw(a.csw)?;
    let g = lattice_gpu_cli::bench_gpu("lqcd", 0)?;
    let lat = Lattice::new(a.dims, true)?;
    let footprint =
        mixed_gpu_footprint::<f64, f32>(&lat, a.recon, true, "the mixed-precision benchmark")?;
    footprint.check(Some(&g))?;
    let copy = g.copy_bandwidth(1 << 30, 20)?;
    println!("GPU: {}; device-to-device copy {copy:.1} GB/s", g.name());
    let u = gauge(a.links, a.dims, a.seed);
    let b = SpinorField::random(a.dims, a.seed + 1);
    let name = dims_name(a.dims);
    let mut step = 0u64;
    let mut stop = || {
        step += 1;
        agree_on_stop(&Solo, step as usize - 1)
    };
    let opt = SolveOptions {
        tol: a.tol,
        // Far above any kappa of the lists' needs (about 1 ms an iteration at 32^3x64), yet a bound.
        max_iter: 20_000,
        variant: a.variant,
        check_every: a.check_every,
        fused: a.fused,
    };
    // The kappa: given, or the first of the list at which f64 BiCGStab needs the iterations asked.
    let kappas = match a.kappa {
        Some(k) => vec![k],
        None => a.links.kappas(a.csw > 0.0).to_vec(),
    };
    // With `--csw`, the clover field of a kappa (2304 bytes a site on the host, built once per kappa
    // and kept for the rows at the chosen one).
    let clover_at = |kappa: f64| match a.csw > 0.0 {
        true => CloverField::new(&u, a.csw, kappa).map(Some),
        false => Ok(None),
    };
    let mut chosen: Option<(f64, Option<CloverField>)> = None;
    for &kappa in &kappas {
        stop()?;
        // One clover field at a time: the previous kappa's is made again only if this one fails.
        let previous = chosen.take().map(|(k, _)| k);
        let tried = clover_at(kappa).and_then(|c| {
            let r = plain_row(&g, &lat, &u, &b, kappa, c.as_ref(), a, &opt, 0)?;
            Ok((r, c))
        });
        let (r, c) = match (tried, previous) {
            (Ok(rc), _) => rc,
            // Past the critical kappa of this field (or too near it): keep the last that converged.
            (Err(e), Some(k)) => {
                println!("kappa {kappa}: f64 BiCGStab failed ({e}); keeping the previous kappa");
                chosen = Some((k, clover_at(k)?));
                break;
            }
            (Err(e), None) => return Err(e),
        };
        println!(
            "kappa {kappa}: f64 BiCGStab {} iterations (true residual {:.2e})",
            r.iterations, r.residual
        );
        chosen = Some((kappa, c));
        if a.kappa.is_some() || r.iterations >= a.min_iterations {
            break;
        }
    }
    let Some((kappa, clover)) = chosen else {
        return Err(Error::InvalidParameter("no kappa to try".into()));
    };
    let mut rows = Vec::new();
    rows.push(plain_row(
        &g,
        &lat,
        &u,
        &b,
        kappa,
        clover.as_ref(),
        a,
        &opt,
        a.repeats,
    )?);
    if rows[0].iterations < a.min_iterations {
        println!(
            "note: f64 BiCGStab needs only {} iterations at kappa {kappa} (asked for at least {}); \
             give --kappa nearer the critical one",
            rows[0].iterations, a.min_iterations
        );
    }
    let mut check = |it: usize, _: f64| stop_at_signal(&Solo, it);
    let whole = Layout::Whole(&lat);
    let mut methods = vec![Method::BiCgStab];
    if a.cgnr {
        methods.push(Method::Cgnr);
    }
    for method in methods {
        let mut mo = MixedOptions::new(opt);
        mo.method = method;
        mo.delta = a.delta;
        // One row of the Wilson or the clover system, its sloppy iterations in `$s`.
        macro_rules! row {
            ($s:ty, $label:literal) => {{
                stop()?;
                rows.push(match &clover {
                    Some(c) => {
                        let mut s =
                            make_clover_mixed::<f64, $s, Solo>(&g, &whole, &u, c, build(a))?;
                        let mut solve =
                            |o: &MixedOptions| solve_clover_mixed_with(&mut s, &b, o, &mut check);
                        time_mixed(&mut solve, &mo, a.repeats, $label)?
                    }
                    None => {
                        let mut s = make_mixed::<f64, $s, Solo>(&g, &whole, &u, kappa, build(a))?;
                        let mut solve =
                            |o: &MixedOptions| solve_mixed_with(&mut s, &b, o, &mut check);
                        time_mixed(&mut solve, &mo, a.repeats, $label)?
                    }
                });
            }};
        }
        if method == Method::Cgnr {
            row!(f64, "f64");
        }
        row!(f32, "f32/f64");
        row!(Half, "half/f64");
        row!(Fixed, "fixed/f64");
    }
    let operator = match a.csw > 0.0 {
        true => format!("Wilson-clover c_sw {}", a.csw),
        false => "Wilson".to_string(),
    };
    println!(
        "\ntime to a {:e} solution, {operator}, {name}, {:?} links, kappa {kappa}, {} (reads every \
         {}), delta {}:",
        a.tol, a.links, a.variant, a.check_every, a.delta
    );
    println!("method    precision  iterations  updates   seconds  speed-up  true residual");
    let mut csv = String::from(
        "kind,operator,lattice,links,kappa,method,precision,variant,iterations,updates,seconds,speedup,true_residual\n",
    );
    let base = |m: Method| {
        rows.iter()
            .find(|r| r.method == m && r.precision == "f64")
            .map(|r| r.seconds)
    };
    for r in &rows {
        let speedup = match r.converged {
            true => base(r.method).map_or(f64::NAN, |s| s / r.seconds),
            false => f64::NAN,
        };
        let updates = r.updates.map_or("-".to_string(), |u| u.to_string());
        if !r.converged {
            println!(
                "{:9} {:10} {:10} {updates:>8}   not converged",
                r.method.name(),
                r.precision,
                r.iterations
            );
        } else {
            println!(
                "{:9} {:10} {:10} {updates:>8} {:9.4} {speedup:8.2}x {:14.3e}",
                r.method.name(),
                r.precision,
                r.iterations,
                r.seconds,
                r.residual
            );
        }
        csv.push_str(&format!(
            "mixed,{operator},{name},{:?},{kappa},{},{},{},{},{},{},{speedup},{}\n",
            a.links,
            r.method.name(),
            r.precision,
            a.variant,
            r.iterations,
            r.updates.map_or(String::new(), |u| u.to_string()),
            r.seconds,
            r.residual
        ));
    }
    if let Some(path) = &a.csv {
        lattice_gpu_formats::write_atomically(path, |w| w.write_all(csv.as_bytes()))?;
    }
    footprint.report(Some(&g));
    Ok(())
}

/// The benchmark's gauge field.
fn gauge(links: Links, dims: [usize; 4], seed: u64) -> GaugeField {
    match links {
        Links::Random => GaugeField::random(dims, seed),
        Links::Unit => GaugeField::unit(dims),
        Links::Smooth => {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut u = GaugeField::unit(dims);
            for link in &mut u.links {
                let g = Su3::from_fn(|_, _| complex_gaussian(&mut rng));
                *link =
                    reunitarize_su3(&(Su3::identity() + g * num_complex::Complex64::new(0.2, 0.0)));
            }
            u
        }
    }
}

/// The all-f64 BiCGStab row at `kappa` (Wilson, or with `clover`, built for that kappa, the clover
/// operator), timed as [`fastest`] times.
#[allow(clippy::too_many_arguments)]
fn plain_row(
    g: &Arc<Gpu>,
    lat: &Lattice,
    u: &GaugeField,
    b: &SpinorField,
    kappa: f64,
    clover: Option<&CloverField>,
    a: &BenchMixedArgs,
    opt: &SolveOptions,
    repeats: u32,
) -> Result<Row> {
    let mut check = |it: usize, _: f64| stop_at_signal(&Solo, it);
    let mut solve: Box<dyn FnMut() -> Result<(SolveReport, f64)>> = if let Some(c) = clover {
        let mut s = make_clover::<f64, Solo>(g, &Layout::Whole(lat), u, c, build(a))?;
        Box::new(move || {
            let (_, r, res) = solve_clover_with(&mut s, b, opt, &mut check)?;
            Ok((r, res))
        })
    } else {
        let mut s = make::<f64, Solo>(g, &Layout::Whole(lat), u, kappa, build(a))?;
        Box::new(move || {
            let (_, r, res) = solve_with(&mut s, b, opt, &mut check)?;
            Ok((r, res))
        })
    };
    fastest(repeats, || {
        let (r, res) = solve()?;
        outcome(&r, opt.tol)?;
        Ok(Row {
            method: Method::BiCgStab,
            precision: "f64",
            converged: true,
            iterations: r.iterations,
            updates: None,
            seconds: r.seconds,
            residual: res,
        })
    })
}

/// The benchmark's build: its links, its tuning, nothing said.
fn build(a: &BenchMixedArgs) -> Build {
    Build {
        recon: a.recon,
        tuning: a.tuning,
        say: false,
    }
}

/// One untimed solve (graphs, first-use allocations), then the fastest of `repeats` more (just the one
/// when 0); a row that does not converge ends it.
fn fastest(repeats: u32, mut run: impl FnMut() -> Result<Row>) -> Result<Row> {
    let mut best: Option<Row> = None;
    for k in 0..=repeats {
        let row = run()?;
        if !row.converged {
            return Ok(row);
        }
        if (k > 0 || repeats == 0) && best.as_ref().is_none_or(|b| row.seconds < b.seconds) {
            best = Some(row);
        }
    }
    best.ok_or_else(|| Error::InvalidParameter("no solve timed".into()))
}

/// One mixed-precision solve with the given options: the solution, the report and the true residual.
type MixedSolve<'a> = dyn FnMut(&MixedOptions) -> Result<(SpinorField, MixedReport, f64)> + 'a;

/// A reliable-update row (`solve` runs one solve), timed as [`fastest`] times.
fn time_mixed(
    solve: &mut MixedSolve<'_>,
    opt: &MixedOptions,
    repeats: u32,
    precision: &'static str,
) -> Result<Row> {
    fastest(repeats, || {
        // A row that does not converge is a result too: the table says so, and the others go on.
        let unconverged = |why: String, iterations: u32, seconds: f64, residual: f64| {
            println!("{} {precision}: not converged: {why}", opt.method);
            Row {
                method: opt.method,
                precision,
                converged: false,
                iterations,
                updates: None,
                seconds,
                residual,
            }
        };
        let (r, res) = match solve(opt) {
            Ok((_, r, res)) => (r, res),
            Err(Error::Host(e @ lattice_gpu_host::Error::Stalled { iterations, .. })) => {
                return Ok(unconverged(e.to_string(), iterations, f64::NAN, f64::NAN))
            }
            Err(e) => return Err(e),
        };
        if r.status != lattice_gpu_host::solvers::bicgstab::SolveStatus::Converged {
            let why = format!("{:?} after {} iterations", r.status, r.iterations);
            return Ok(unconverged(why, r.iterations, r.seconds, r.residual));
        }
        Ok(Row {
            method: opt.method,
            precision,
            converged: true,
            iterations: r.iterations,
            updates: Some(r.updates),
            seconds: r.seconds,
            residual: res,
        })
    })
}
