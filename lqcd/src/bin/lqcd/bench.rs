//! `lqcd bench`: the hopping term's GFLOPS and bandwidth in each precision and link storage, the same for
//! the Wilson-clover kernels and their even-odd operator, and every solver variant's time per iteration,
//! against the device-to-device copy bandwidth.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use lattice_gpu_host::comm::Solo;
use lattice_gpu_host::engine::Cost;
use lattice_gpu_host::engine::Rate;
use lattice_gpu_host::memory::Footprint;
use lattice_gpu_host::solvers::bicgstab::{
    grid_barrier_cost, launch_overhead, BiCgStab, DeviceOperator, Fusion, OverheadHiding,
    SolveOptions,
};
use lattice_gpu_host::{DeviceBuffer, Error as HostError, Gpu};
use lattice_gpu_kernels::wilson::{CloverMode, Fixed, Half, FUSED_BLOCK};
use lattice_gpu_lqcd::clover::{CloverBlock, CloverField};
use lattice_gpu_lqcd::clover_gpu::{clover_len, CloverEvenOdd, CloverGpu, CloverStorage};
use lattice_gpu_lqcd::gauge::GaugeField;
use lattice_gpu_lqcd::geometry::Lattice;
use lattice_gpu_lqcd::gpu::{gauge_len, parity_len, EvenOdd, Recon, WilsonGpu, WilsonStorage};
use lattice_gpu_lqcd::spinor::SpinorField;
use lattice_gpu_lqcd::Result;

use super::{
    agree_on_stop, dims_name, parse_count, parse_dims4, reals, volume_bytes, with_slack,
    TuningArgs, GAUGE_SITE, GPU_SMALL, SPINOR_SITE,
};

#[derive(Args)]
pub(super) struct BenchArgs {
    /// Dslash lattices.
    #[arg(long, value_delimiter = ',', default_value = "16,24,32x32x32x64,48x48x48x96",
          allow_hyphen_values = true, value_parser = parse_dims4)]
    dslash: Vec<[usize; 4]>,
    /// Solver lattices.
    #[arg(long, value_delimiter = ',', default_value = "4,8,16,32x32x32x64,48x48x48x96",
          allow_hyphen_values = true, value_parser = parse_dims4)]
    solver: Vec<[usize; 4]>,
    /// Solver iterations timed per variant (fixed count: the tolerance is set unreachable).
    #[arg(long, default_value_t = 200, allow_hyphen_values = true, value_parser = parse_count)]
    iterations: u32,
    /// Iterations per residual read for the pipelined variants.
    #[arg(long, default_value_t = 20, allow_hyphen_values = true, value_parser = parse_count)]
    check_every: u32,
    /// CSV of the results.
    #[arg(long)]
    csv: Option<PathBuf>,
    #[command(flatten)]
    tuning: TuningArgs,
}

pub(super) fn bench(a: &BenchArgs) -> Result<()> {
    let g = lattice_gpu_cli::bench_gpu("lqcd", 0)?;
    let copy = g.copy_bandwidth(1 << 30, 20)?;
    println!("GPU: {}; device-to-device copy {copy:.1} GB/s", g.name());
    let mut csv = String::from("kind,lattice,precision,variant,ms,gflops,gbs,of_copy,iterations\n");
    println!("\ndslash (one hopping term on one parity): GFLOPS at QUDA's 1320 flops/site; GB/s in QUDA's");
    println!("byte model (8 spinors + 8 links per site, no cache reuse); DRAM GB/s counts the least traffic");
    println!("(links, input and output once each), and its ratio to the copy bandwidth is the roofline fraction;");
    println!("half: IEEE binary16 with a norm per spinor site, f32 arithmetic; fixed: QUDA's 16-bit fixed point");
    println!(
        "lattice       prec  recon  us/call   GFLOPS  QUDA GB/s  DRAM GB/s  of copy  block (tuned)"
    );
    // A signal stops the benchmark between its measurements; the CSV is written only at its end.
    let mut step = 0u64;
    let mut stop = || {
        step += 1;
        agree_on_stop(&Solo, step as usize - 1)
    };
    let mut largest = Footprint::default();
    // The clover rows, printed after the Wilson table. Their matrices are one random site's, repeated:
    // the kernels' time does not depend on the values, and a whole clover field on the host would take
    // 2304 bytes a site.
    let site = clover_site()?;
    let mut clover_rows = Vec::new();
    for &dims in &a.dslash {
        let lat = Lattice::new(dims, false)?;
        let footprint = bench_footprint(&lat, true)?;
        footprint.check(Some(&g))?;
        largest = larger(largest, footprint);
        let u = GaugeField::random(dims, 3);
        let psi = SpinorField::random(dims, 4);
        for prec in ["f32", "f64", "half", "fixed"] {
            for recon in [Recon::R18, Recon::R12] {
                stop()?;
                let (g, args) = (&g, (&lat, &u, &psi, recon, a.tuning, copy));
                let row = match prec {
                    "f32" => bench_dslash::<f32>(g, args)?,
                    "f64" => bench_dslash::<f64>(g, args)?,
                    "half" => bench_dslash::<Half>(g, args)?,
                    _ => bench_dslash::<Fixed>(g, args)?,
                };
                let (ms, rate, quda_gbs, block) = row;
                let name = dims_name(dims);
                println!(
                    "{name:12} {prec:5} {:>5} {:8.1} {:8.0} {quda_gbs:10.0} {:10.0} {:7.1}% {block:6}",
                    recon.name(),
                    ms * 1e3,
                    rate.gflops,
                    rate.gbs,
                    100.0 * rate.of_copy
                );
                csv.push_str(&format!(
                    "dslash,{name},{prec},r{},{ms},{},{},{},\n",
                    recon.name(),
                    rate.gflops,
                    rate.gbs,
                    rate.of_copy
                ));
                stop()?;
                let args = (&lat, &u, &psi, recon, &site, a.tuning, copy);
                let (rows, block) = match prec {
                    "f32" => bench_clover::<f32>(g, args)?,
                    "f64" => bench_clover::<f64>(g, args)?,
                    "half" => bench_clover::<Half>(g, args)?,
                    _ => bench_clover::<Fixed>(g, args)?,
                };
                for (what, ms, rate) in rows {
                    clover_rows.push(format!(
                        "{name:12} {prec:5} {:>5} {what:9} {:8.1} {:8.0} {:10.0} {:7.1}% {block:6}",
                        recon.name(),
                        ms * 1e3,
                        rate.gflops,
                        rate.gbs,
                        100.0 * rate.of_copy
                    ));
                    csv.push_str(&format!(
                        "clover_{what},{name},{prec},r{},{ms},{},{},{},\n",
                        recon.name(),
                        rate.gflops,
                        rate.gbs,
                        rate.of_copy
                    ));
                }
            }
        }
    }
    println!("\nWilson-clover (c_sw {CLOVER_CSW}, kappa {CLOVER_KAPPA}): inverse = A_oo^-1 H_oe x on the odd sites,");
    println!("diagonal = A_ee x - kappa^2 H_eo t on the even sites, M_hat = both (QUDA's asymmetric even-odd operator);");
    println!("GFLOPS at 1320 + 504 flops a site per kernel; DRAM GB/s counts the least traffic (the hopping term's");
    println!("and 72 clover reals a site once), and its ratio to the copy bandwidth is the roofline fraction");
    println!(
        "lattice       prec  recon kernel     us/call   GFLOPS  DRAM GB/s  of copy  block (tuned)"
    );
    for row in &clover_rows {
        println!("{row}");
    }
    let (host_us, gpu_us) = launch_overhead(&g)?;
    println!(
        "\nlaunch overhead: {host_us:.2} us of host time per kernel launch, {gpu_us:.2} us of GPU time per empty kernel queued ahead"
    );
    csv.push_str(&format!(
        "launch,host,,,{},,,,\nlaunch,gpu,,,{},,,,\n",
        host_us / 1e3,
        gpu_us / 1e3
    ));
    // What the fused iteration is made of: a cooperative launch and grid barriers (7 per iteration).
    for blocks in [8, g.sm_count()] {
        let (launch_us, barrier_us) = grid_barrier_cost(&g, blocks, FUSED_BLOCK)?;
        println!(
            "grid of {blocks} blocks of {FUSED_BLOCK}: {launch_us:.2} us of GPU time per empty cooperative launch queued ahead, {barrier_us:.2} us per grid barrier"
        );
        csv.push_str(&format!(
            "cooperative_launch,{blocks} blocks,,,{},,,,\ngrid_barrier,{blocks} blocks,,,{},,,,\n",
            launch_us / 1e3,
            barrier_us / 1e3
        ));
    }
    println!(
        "\nsolver (f32, recon 12, {} iterations, reads every {}): time per iteration",
        a.iterations, a.check_every
    );
    println!("lattice       variant            us/iter  kernels us/iter  vs sync");
    for &dims in &a.solver {
        let lat = Lattice::new(dims, false)?;
        let footprint = bench_footprint(&lat, false)?;
        footprint.check(Some(&g))?;
        largest = larger(largest, footprint);
        let u = GaugeField::random(dims, 1);
        let b = SpinorField::random(dims, 2);
        let mut w = WilsonGpu::<f32>::new(&g, &lat, &u, 0.12, Recon::R12)?;
        a.tuning.apply(&mut w, false)?;
        let mut solver = BiCgStab::new(&g, EvenOdd(w))?;
        a.tuning.apply_vectors(&mut solver, false)?;
        let b_e = solver.operator().0.upload_parity(&b, 0)?;
        let mut x_e = solver.operator().0.parity_buffer()?;
        let mut sync_us = 0.0;
        // GPU time per iteration as nine kernels, and as one fused kernel.
        let kernel_us = [
            solver.kernel_ms_per_iteration(&b_e, 32, false)? * 1e3,
            solver.kernel_ms_per_iteration(&b_e, 32, true)? * 1e3,
        ];
        // Each variant as nine kernels per iteration, then (all but sync) as one fused kernel.
        let runs = OverheadHiding::ALL
            .map(|v| (v, false))
            .into_iter()
            .chain(OverheadHiding::ALL.into_iter().skip(1).map(|v| (v, true)));
        for (variant, fused) in runs {
            stop()?;
            let kernels = kernel_us[fused as usize];
            let opt = SolveOptions {
                // Unreachable: every variant runs exactly `iterations`.
                tol: f64::MIN_POSITIVE,
                max_iter: a.iterations,
                variant,
                check_every: a.check_every,
                fused: if fused { Fusion::On } else { Fusion::Off },
            };
            // Once to capture graphs and warm up, once timed; straight on M_hat with the even half of
            // `b`, so no host packing is timed or repeated.
            solver.solve(&b_e, &mut x_e, &opt, &mut |_, _| Ok(()))?;
            let r = solver.solve(&b_e, &mut x_e, &opt, &mut |_, _| Ok(()))?;
            let us = r.seconds / r.iterations.max(1) as f64 * 1e6;
            if variant == OverheadHiding::Sync {
                sync_us = us;
            }
            let name = dims_name(dims);
            let label = match fused {
                true => format!("{}+fused", variant.name()),
                false => variant.name().to_string(),
            };
            println!(
                "{name:12} {label:16} {us:9.1} {:16.1} {:7.2}x",
                kernels,
                sync_us / us
            );
            csv.push_str(&format!(
                "solver,{name},f32,{label},{},,,,{}\n",
                us / 1e3,
                r.iterations
            ));
        }
    }
    if let Some(path) = &a.csv {
        lattice_gpu_formats::write_atomically(path, |w| w.write_all(csv.as_bytes()))?;
    }
    largest.report(Some(&g));
    Ok(())
}

/// The peak of one lattice of `lqcd bench`: on the host the gauge field, a spinor and the packed links
/// being uploaded (f64 with 18 reals per link at most); on the GPU, for the dslash the links, the
/// operator's temporary, input and output (f64, 18), for the solver (f32, 12) the links, the
/// temporary, BiCGStab's seven vectors, and the source and solution.
fn bench_footprint(lat: &Lattice, dslash: bool) -> Result<Footprint> {
    let dims = lat.dims;
    let fields = volume_bytes(
        dims,
        GAUGE_SITE + SPINOR_SITE,
        "the gauge field and a spinor",
    )?;
    let (links, parity, count) = match dslash {
        true => (
            reals::<f64>(gauge_len(lat, Recon::R18), "the packed gauge field")?,
            reals::<f64>(2 * parity_len(lat), "a spinor parity")?,
            3,
        ),
        false => (
            reals::<f32>(gauge_len(lat, Recon::R12), "the packed gauge field")?,
            reals::<f32>(2 * parity_len(lat), "a spinor parity")?,
            10,
        ),
    };
    // The clover rows (f64): A of both parities and A_oo^-1 on the GPU, packed one at a time on the host.
    let clover = match dslash {
        true => reals::<f64>(clover_len::<f64>(lat), "a packed clover parity")?,
        false => 0,
    };
    let links = links.saturating_add(clover);
    Ok(Footprint::new(
        format!(
            "the {} benchmark on a {} lattice",
            if dslash { "dslash" } else { "solver" },
            dims_name(dims)
        ),
        with_slack(fields.saturating_add(links)),
        links
            .saturating_add(clover.saturating_mul(2))
            .saturating_add(parity.saturating_mul(count))
            .saturating_add(GPU_SMALL),
        true,
    ))
}

/// The footprint with the larger total of `a` and `b`.
fn larger(a: Footprint, b: Footprint) -> Footprint {
    match a.host.saturating_add(a.gpu) >= b.host.saturating_add(b.gpu) {
        true => a,
        false => b,
    }
}

/// What one dslash row measures: the lattice, gauge field and input, the link storage, the tuning
/// options and the copy bandwidth.
type DslashCase<'a> = (
    &'a Lattice,
    &'a GaugeField,
    &'a SpinorField,
    Recon,
    TuningArgs,
    f64,
);

/// (ms per call, its rates against `copy` GB/s, GB/s in QUDA's model, threads per block) of one hopping
/// term on one parity in storage `T` with the tuned block, event-timed over a batch.
fn bench_dslash<T: WilsonStorage>(
    g: &Arc<Gpu>,
    (lat, u, psi, recon, tuning, copy): DslashCase<'_>,
) -> Result<(f64, Rate, f64, u32)> {
    let mut w = WilsonGpu::<T>::new(g, lat, u, 0.12, recon)?;
    tuning.apply(&mut w, false)?;
    let inp = w.upload_parity(psi, 1)?;
    let out: DeviceBuffer<T::Elem> = w.parity_buffer()?;
    let call = || w.hopping(&out, 0, &inp, None, 1.0, None);
    call()?;
    let once = g.time_ms(|| call().map_err(HostError::from))?;
    let reps = ((20.0 / once.max(1e-3)) as usize).clamp(10, 2000);
    let mut times = (0..5)
        .map(|_| {
            g.time_ms(|| {
                for _ in 0..reps {
                    call().map_err(HostError::from)?;
                }
                Ok(())
            })
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    times.sort_by(f64::total_cmp);
    let ms = times[2] / reps as f64;
    let quda_gbs = w.hopping_bytes() as f64 / (ms * 1e6);
    Ok((
        ms,
        w.hopping_cost(false).rate(ms, copy),
        quda_gbs,
        w.hopping_block(),
    ))
}

/// The clover coefficient of the benchmark's clover matrices.
const CLOVER_CSW: f64 = 1.0;
/// The hopping parameter of the benchmark's clover operator.
const CLOVER_KAPPA: f64 = 0.12;

/// The chiral blocks of `A` and `A^{-1}` of one site of a small random gauge field, which the clover
/// benchmark repeats at every site.
fn clover_site() -> Result<([CloverBlock; 2], [CloverBlock; 2])> {
    let u = GaugeField::random([4; 4], 5);
    let c = CloverField::new(&u, CLOVER_CSW, CLOVER_KAPPA)?;
    Ok((c.blocks[0], c.inverse[0]))
}

/// The median of 5 event-timed batches of `call`, in ms per call (batches of about 20 ms).
fn ms_per_call(g: &Arc<Gpu>, call: &dyn Fn() -> Result<()>) -> Result<f64> {
    call()?;
    let once = g.time_ms(|| call().map_err(HostError::from))?;
    let reps = ((20.0 / once.max(1e-3)) as usize).clamp(10, 2000);
    let mut times = (0..5)
        .map(|_| {
            g.time_ms(|| {
                for _ in 0..reps {
                    call().map_err(HostError::from)?;
                }
                Ok(())
            })
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    times.sort_by(f64::total_cmp);
    Ok(times[2] / reps as f64)
}

/// One clover row: the kernel's name, ms per call and rates.
type CloverRow = (&'static str, f64, Rate);

/// What [`bench_clover`] runs on: the lattice, gauge field, spinor, links, one site's `A` and
/// `A^{-1}`, the tuning, and the copy bandwidth (GB/s).
type CloverBench<'a> = (
    &'a Lattice,
    &'a GaugeField,
    &'a SpinorField,
    Recon,
    &'a ([CloverBlock; 2], [CloverBlock; 2]),
    TuningArgs,
    f64,
);

/// The clover kernels on `lat`: (name, ms per call, rates against `copy` GB/s) of the inverse kernel,
/// the diagonal kernel and `M_hat`, at the block tuned on `M_hat` ([`CloverGpu::tune_block`]), and that
/// block.
fn bench_clover<T: CloverStorage>(
    g: &Arc<Gpu>,
    (lat, u, psi, recon, site, tuning, copy): CloverBench<'_>,
) -> Result<(Vec<CloverRow>, u32)> {
    let (a, a_inv) = (&site.0, &site.1);
    let c =
        CloverGpu::<T>::from_sites(g, lat, u, CLOVER_CSW, CLOVER_KAPPA, recon, |_| a, |_| a_inv)?;
    let mut op = CloverEvenOdd(c);
    let w = op.0.wilson();
    let x_e = w.upload_parity(psi, 0)?;
    let x_o = w.upload_parity(psi, 1)?;
    let (out_e, out_o) = (w.parity_buffer()?, w.parity_buffer()?);
    let k2 = CLOVER_KAPPA * CLOVER_KAPPA;
    // The clover kernels' block, tuned on M_hat through the tune cache as the hopping kernel's is.
    let mut cache = tuning.cache();
    op.0.tune_block(&mut cache, tuning.retune)?;
    super::warn_of(&mut cache);
    let c = &op.0;
    let inverse = || c.clover_hopping(&out_o, 1, &x_e, None, 1.0, CloverMode::Inverse, None);
    let diagonal =
        || c.clover_hopping(&out_e, 0, &x_o, Some(&x_e), -k2, CloverMode::Diagonal, None);
    let ms = [
        ms_per_call(g, &inverse)?,
        ms_per_call(g, &diagonal)?,
        ms_per_call(g, &|| Ok(op.apply(&out_e, &x_e, None)?))?,
    ];
    let both = Cost {
        points: lat.half_volume() as f64,
        flops: 2.0 * c.clover_flops() as f64,
        bytes: (c.clover_min_bytes(false) + c.clover_min_bytes(true)) as f64,
    };
    Ok((
        vec![
            ("inverse", ms[0], c.clover_cost(false).rate(ms[0], copy)),
            ("diagonal", ms[1], c.clover_cost(true).rate(ms[1], copy)),
            ("m_hat", ms[2], both.rate(ms[2], copy)),
        ],
        c.clover_block(),
    ))
}
