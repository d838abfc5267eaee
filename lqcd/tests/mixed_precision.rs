//! Mixed-precision solves with reliable updates (issue 36 item 2): the adjoint of `M_hat` through
//! gamma_5 (checked on the CPU, then on the GPU), and f32/f64 BiCGStab and CGNR reaching a true residual
//! of 1e-10 (recomputed with the f64 CPU reference operator from the downloaded solution) on a smooth
//! and a rough configuration, for several overhead-hiding variants, in at most 20% more iterations
//! than the same method all in f64 in the same test.
//!
//! Without a GPU the GPU tests print `SKIPPED (no GPU): ...` and pass; `LATTICE_GPU_REQUIRE_GPU=1`
//! turns the skip into a failure. Run on a GPU with
//! `cargo test --release -p lattice-gpu-lqcd --test mixed_precision -- --nocapture --test-threads 1`
//! (each solve prints its iterations, reliable updates and true residual on stderr).

use std::io::Write;
use std::sync::Arc;

use lattice_gpu_host::solvers::bicgstab::{
    BiCgStab, DeviceOperator, Fusion, OverheadHiding, SolveOptions, SolveStatus,
};
use lattice_gpu_host::solvers::reliable::{Method, MixedBiCgStab, MixedOptions};
use lattice_gpu_host::split::{DeviceRanks, HostStaged};
use lattice_gpu_host::{DeviceBuffer, Gpu};
use lattice_gpu_kernels::wilson::Half;
use lattice_gpu_lqcd::gamma::gamma5;
use lattice_gpu_lqcd::gauge::{complex_gaussian, reunitarize_su3, GaugeField, Su3};
use lattice_gpu_lqcd::geometry::Lattice;
use lattice_gpu_lqcd::gpu::{
    gamma5_on_host, pack_parity, solve_mixed_with, solve_with, unpack_parity, Block, EvenOdd,
    Recon, WilsonGpu, WilsonReal,
};
use lattice_gpu_lqcd::reference;
use lattice_gpu_lqcd::spinor::{dot, SpinorField};
use lattice_gpu_testkit::gpu;
use num_complex::Complex64;
use rand::SeedableRng;

/// Links near the identity: `U = reunitarize(1 + eps G)`, `G` complex Gaussian, reproducible from `seed`.
fn smooth_gauge(dims: [usize; 4], eps: f64, seed: u64) -> GaugeField {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut u = GaugeField::unit(dims);
    for link in &mut u.links {
        let g = Su3::from_fn(|_, _| complex_gaussian(&mut rng));
        *link = reunitarize_su3(&(Su3::identity() + g * num_complex::Complex64::new(eps, 0.0)));
    }
    u
}

/// gamma_5 on the even-odd vectors of the CPU reference (12 components a site, `k = s * 3 + c`).
fn gamma5_eo(v: &[Complex64]) -> Vec<Complex64> {
    let g5 = gamma5();
    v.chunks(12)
        .flat_map(|site| {
            (0..12).map(move |k| {
                let (s, c) = (k / 3, k % 3);
                (0..4)
                    .map(|t| g5[(s, t)] * site[3 * t + c])
                    .sum::<Complex64>()
            })
        })
        .collect()
}

/// The GPU's gamma_5 body flips exactly the components the reference's gamma_5 (DeGrand-Rossi,
/// `diag(1, 1, -1, -1)`) flips, site by site in the tiled layout.
#[test]
fn the_gamma5_kernel_body_matches_the_reference_gamma5() {
    let g5 = gamma5();
    let diag: Vec<f64> = (0..4).map(|s| g5[(s, s)].re).collect();
    assert_eq!(diag, [1.0, 1.0, -1.0, -1.0], "DeGrand-Rossi gamma_5");
    let dims = [4, 2, 2, 4];
    let lat = Lattice::new(dims, false).unwrap();
    let psi = SpinorField::random(dims, 11);
    let want = psi.apply_gamma5();
    for parity in 0..2 {
        let mut data = pack_parity::<f64>(&lat, &psi.data, parity);
        gamma5_on_host::<f64>(&mut data);
        let mut got = want.data.clone();
        unpack_parity::<f64>(&lat, &data, parity, &mut got);
        assert_eq!(got, want.data, "parity {parity}");
        // 16-bit storage: the signs flip, each site's norm stays.
        let mut data = pack_parity::<Half>(&lat, &psi.data, parity);
        let stored = data.clone();
        gamma5_on_host::<Half>(&mut data);
        let (mut before, mut after) = (want.data.clone(), want.data.clone());
        unpack_parity::<Half>(&lat, &stored, parity, &mut before);
        unpack_parity::<Half>(&lat, &data, parity, &mut after);
        let flipped = SpinorField { dims, data: before }.apply_gamma5();
        for n in (0..lat.volume()).filter(|&n| lat.parity(n) == parity) {
            let site = 12 * n..12 * n + 12;
            assert_eq!(
                after[site.clone()],
                flipped.data[site],
                "half, parity {parity}, site {n}"
            );
        }
    }
}

/// `M_hat^dag = gamma_5 M_hat gamma_5` on the CPU reference: `<y, M x> = <g5 M g5 y, x>`, which the
/// GPU's `apply_dagger` relies on; and not `<M y, x>` (M_hat is not hermitian, so the test can fail).
#[test]
fn m_hat_is_gamma5_hermitian_on_the_cpu() {
    let dims = [4, 4, 4, 4];
    let lat = Lattice::new(dims, true).unwrap();
    let u = GaugeField::random(dims, 3);
    let kappa = 0.13;
    let (x, _) = SpinorField::random(dims, 4).to_eo();
    let (y, _) = SpinorField::random(dims, 5).to_eo();
    let m = |v: &[Complex64]| reference::m_hat(&lat, &u, kappa, v);
    let lhs = dot(&y, &m(&x));
    let dagger_y = gamma5_eo(&m(&gamma5_eo(&y)));
    let rhs = dot(&dagger_y, &x);
    assert!((lhs - rhs).norm() <= 1e-12 * lhs.norm(), "{lhs} vs {rhs}");
    let wrong = dot(&m(&y), &x);
    assert!(
        (lhs - wrong).norm() > 1e-3 * lhs.norm(),
        "M_hat came out hermitian"
    );
}

/// The GPU's `apply_dagger` against the CPU's `gamma_5 M_hat gamma_5`, in both precisions.
#[test]
fn apply_dagger_on_the_gpu_matches_the_reference_adjoint() {
    let Some(gpu) = gpu("apply_dagger_on_the_gpu_matches_the_reference_adjoint") else {
        return;
    };
    let dims = [8, 4, 4, 8];
    let lat = Lattice::new(dims, true).unwrap();
    let u = GaugeField::random(dims, 13);
    let kappa = 0.13;
    let psi = SpinorField::random(dims, 14);
    let (y, _) = psi.to_eo();
    let want = gamma5_eo(&reference::m_hat(&lat, &u, kappa, &gamma5_eo(&y)));
    fn case<T: WilsonReal>(
        gpu: &Arc<Gpu>,
        lat: &Lattice,
        u: &GaugeField,
        kappa: f64,
        psi: &SpinorField,
        want: &[Complex64],
        tol: f64,
    ) {
        let op = EvenOdd(WilsonGpu::<T>::new(gpu, lat, u, kappa, Recon::R12).unwrap());
        let inp = op.0.upload_parity(psi, 0).unwrap();
        let nan = vec![T::from_f64(f64::NAN); inp.len()];
        let out = DeviceBuffer::from_host(gpu, &nan).unwrap();
        op.apply_dagger(&out, &inp, None).unwrap();
        let mut got = SpinorField::zeros(psi.dims);
        op.0.download_parity(&out, 0, &mut got).unwrap();
        let (got, _) = got.to_eo();
        let scale = want.iter().map(|z| z.norm()).fold(0.0, f64::max);
        let d = got
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).norm())
            .fold(
                0.0,
                |m, d| if d.is_nan() { f64::INFINITY } else { m.max(d) },
            );
        assert!(
            d <= tol * scale,
            "{}: M_hat^dag off by {d:e} of {scale:e}",
            T::NAME
        );
    }
    case::<f64>(&gpu, &lat, &u, kappa, &psi, &want, 1e-13);
    case::<f32>(&gpu, &lat, &u, kappa, &psi, &want, 2e-6);
}

/// One configuration of the solve tests.
struct Case {
    name: &'static str,
    u: GaugeField,
    kappa: f64,
}

/// 8^4, antiperiodic in t. The random field at kappa 0.24 takes 138 iterations of the CPU reference
/// BiCGStab to 1e-10 (2026-11-26). The smooth field (eps 0.2, plaquette 0.81) stays below its critical
/// kappa, about 1 / (8 u0) = 0.132 with u0 the plaquette's fourth root: at 0.134, past it, BiCGStab's
/// iteration count followed its rounding (94 iterations in the CPU reference, 82 on the GPU in f64, 117
/// in mixed precision on the H100), which no precision can be held to.
const DIMS: [usize; 4] = [8, 8, 8, 8];
const TOL: f64 = 1e-10;

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "smooth",
            u: smooth_gauge(DIMS, 0.2, 5),
            kappa: 0.128,
        },
        Case {
            name: "rough",
            u: GaugeField::random(DIMS, 7),
            kappa: 0.24,
        },
    ]
}

/// The variants each mixed solve runs with: sync, async, graph, wait kernel, stream wait, and async
/// fused (BiCGStab only; CG has no one-kernel form and runs its kernels).
fn variants() -> Vec<(OverheadHiding, Fusion)> {
    let mut v: Vec<_> = OverheadHiding::ALL.map(|v| (v, Fusion::Off)).to_vec();
    v.push((OverheadHiding::Async, Fusion::On));
    v.push((OverheadHiding::Graph, Fusion::On));
    v
}

fn options(variant: OverheadHiding, fused: Fusion, method: Method) -> MixedOptions {
    let mut o = MixedOptions::new(SolveOptions {
        tol: TOL,
        max_iter: 5000,
        variant,
        check_every: 8,
        fused,
    });
    o.method = method;
    o
}

/// Mixed f32/f64 BiCGStab and CGNR on the smooth and the rough field, every variant: the true
/// residual, recomputed on the CPU in f64 from the downloaded solution, at most 1e-10 (and agreeing
/// with the GPU's); iterations at most 20% above the same method all in f64 (BiCGStab: the plain
/// solver; CGNR: the same driver with f64 iterations); reliable updates made; every variant within two
/// iterations of the others.
#[test]
fn mixed_f32_f64_solves_reach_1e_10_within_20_percent_of_f64_iterations() {
    let Some(gpu) = gpu("mixed_f32_f64_solves_reach_1e_10_within_20_percent_of_f64_iterations")
    else {
        return;
    };
    let lat = Lattice::new(DIMS, true).unwrap();
    let b = SpinorField::random(DIMS, 3);
    for case in cases() {
        let hi = || WilsonGpu::<f64>::new(&gpu, &lat, &case.u, case.kappa, Recon::R12).unwrap();
        let lo = || WilsonGpu::<f32>::new(&gpu, &lat, &case.u, case.kappa, Recon::R12).unwrap();
        // All f64: BiCGStab (the plain solver), and CGNR (the mixed driver iterating in f64).
        let mut plain = BiCgStab::new(&gpu, EvenOdd(hi())).unwrap();
        let opt = options(OverheadHiding::Async, Fusion::Off, Method::BiCgStab).solve;
        let (x, r, _) = solve_with(&mut plain, &b, &opt, &mut |_, _| Ok(())).unwrap();
        assert_eq!(
            r.status,
            SolveStatus::Converged,
            "{}: f64 BiCGStab",
            case.name
        );
        let res = reference::true_residual(&lat, &case.u, case.kappa, &b, &x);
        let f64_bicg = r.iterations;
        let mut all64 = MixedBiCgStab::new(&gpu, EvenOdd(hi()), EvenOdd(hi())).unwrap();
        let opt = options(OverheadHiding::Async, Fusion::Off, Method::Cgnr);
        let (x, r, _) = solve_mixed_with(&mut all64, &b, &opt, &mut |_, _| Ok(())).unwrap();
        assert_eq!(r.status, SolveStatus::Converged, "{}: f64 CGNR", case.name);
        let f64_cgnr = r.iterations;
        let res_cgnr = reference::true_residual(&lat, &case.u, case.kappa, &b, &x);
        let _ = writeln!(
            std::io::stderr(),
            "{}: all f64: BiCGStab {f64_bicg} iterations (true residual {res:.2e}), CGNR {f64_cgnr} \
             ({} updates, {res_cgnr:.2e})",
            case.name,
            r.updates
        );
        assert!(
            f64_bicg >= 40,
            "{}: f64 BiCGStab took only {f64_bicg}",
            case.name
        );
        let mut mixed = MixedBiCgStab::new(&gpu, EvenOdd(hi()), EvenOdd(lo())).unwrap();
        for method in [Method::BiCgStab, Method::Cgnr] {
            let baseline = match method {
                Method::BiCgStab => f64_bicg,
                Method::Cgnr => f64_cgnr,
            };
            // Iterations of each variant: the device decides every update, so they agree (within
            // the rounding of sums finished on the host or the device, and of the fused kernel).
            let mut counts: Vec<(String, u32)> = Vec::new();
            for (variant, fused) in variants() {
                if method == Method::Cgnr && fused == Fusion::On {
                    continue;
                }
                let opt = options(variant, fused, method);
                let label = format!("{} {method} {variant} fused {fused:?}", case.name);
                let mut checks = 0;
                let (x, r, gpu_res) = solve_mixed_with(&mut mixed, &b, &opt, &mut |_, _| {
                    checks += 1;
                    Ok(())
                })
                .unwrap_or_else(|e| panic!("{label}: {e}"));
                let cpu_res = reference::true_residual(&lat, &case.u, case.kappa, &b, &x);
                let _ = writeln!(
                    std::io::stderr(),
                    "{label}: {} iterations, {} reliable updates, true residual {cpu_res:.3e} (GPU \
                     {gpu_res:.3e}, even system {:.3e}), {:.2} ms",
                    r.iterations,
                    r.updates,
                    r.residual,
                    r.seconds * 1e3
                );
                assert_eq!(r.status, SolveStatus::Converged, "{label}");
                assert!(checks > 0, "{label}: no progress reported");
                assert!(cpu_res <= TOL, "{label}: true residual {cpu_res:e}");
                assert!(
                    (gpu_res - cpu_res).abs() <= 0.05 * cpu_res + 1e-13,
                    "{label}: GPU true residual {gpu_res:e}, CPU {cpu_res:e}"
                );
                assert!(r.updates >= 2, "{label}: {} reliable updates", r.updates);
                assert!(
                    r.iterations as f64 <= 1.2 * baseline as f64,
                    "{label}: {} iterations, all-f64 {baseline}",
                    r.iterations
                );
                assert_eq!(r.fused, fused == Fusion::On, "{label}: fused as asked");
                counts.push((label, r.iterations));
            }
            let first = counts[0].1;
            for (label, it) in &counts {
                assert!(
                    it.abs_diff(first) <= 2,
                    "{label}: {it} iterations, {} {first}",
                    counts[0].0
                );
            }
        }
    }
}

/// Mixed half/f64 (binary16) BiCGStab on the smooth and the rough field, and CGNR on the smooth one:
/// the true residual recomputed on the CPU in f64 at most 1e-10, in at most 20% more iterations than
/// the same method all in f64, for the sync, async and graph variants, which agree within two
/// iterations. CGNR in half on the rough field near its critical kappa does not converge: its
/// directions stay conjugate only to 11 bits, and the normal equations square a large condition
/// number (H100, 2026-11-26: the true residual stuck at 1.5e-3 after 5000 iterations, where f64 CGNR
/// converges in 1292; QUDA's 15-bit fixed point, built here too, converged in 2341). The solve must
/// end without claiming convergence, and when it stalls, advise an f32 inner precision.
#[test]
fn mixed_half_f64_solves_reach_1e_10() {
    let Some(gpu) = gpu("mixed_half_f64_solves_reach_1e_10") else {
        return;
    };
    let lat = Lattice::new(DIMS, true).unwrap();
    let b = SpinorField::random(DIMS, 3);
    for case in cases() {
        let hi = || WilsonGpu::<f64>::new(&gpu, &lat, &case.u, case.kappa, Recon::R12).unwrap();
        let opt = options(OverheadHiding::Async, Fusion::Off, Method::BiCgStab);
        let mut plain = BiCgStab::new(&gpu, EvenOdd(hi())).unwrap();
        let f64_bicg = solve_with(&mut plain, &b, &opt.solve, &mut |_, _| Ok(()))
            .unwrap()
            .1
            .iterations;
        let mut all64 = MixedBiCgStab::new(&gpu, EvenOdd(hi()), EvenOdd(hi())).unwrap();
        let opt = options(OverheadHiding::Async, Fusion::Off, Method::Cgnr);
        let f64_cgnr = solve_mixed_with(&mut all64, &b, &opt, &mut |_, _| Ok(()))
            .unwrap()
            .1
            .iterations;
        let lo =
            EvenOdd(WilsonGpu::<Half>::new(&gpu, &lat, &case.u, case.kappa, Recon::R12).unwrap());
        let mut mixed = MixedBiCgStab::new(&gpu, EvenOdd(hi()), lo).unwrap();
        for (method, baseline) in [(Method::BiCgStab, f64_bicg), (Method::Cgnr, f64_cgnr)] {
            if method == Method::Cgnr && case.name == "rough" {
                let mut opt = options(OverheadHiding::Async, Fusion::Off, method);
                opt.stall_updates = 3;
                match solve_mixed_with(&mut mixed, &b, &opt, &mut |_, _| Ok(())) {
                    Ok((_, r, res)) => assert!(
                        r.status != SolveStatus::Converged && res > TOL,
                        "rough half CGNR: {:?} at {res:e}",
                        r.status
                    ),
                    Err(e) => {
                        let e = e.to_string();
                        assert!(
                            e.contains("stalled") && e.contains("f32 inner precision"),
                            "{e}"
                        );
                    }
                }
                continue;
            }
            let mut counts: Vec<(String, u32)> = Vec::new();
            for variant in [
                OverheadHiding::Sync,
                OverheadHiding::Async,
                OverheadHiding::Graph,
            ] {
                let opt = options(variant, Fusion::Off, method);
                let label = format!("{} half/f64 {method} {variant}", case.name);
                let (x, r, gpu_res) = solve_mixed_with(&mut mixed, &b, &opt, &mut |_, _| Ok(()))
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                let cpu_res = reference::true_residual(&lat, &case.u, case.kappa, &b, &x);
                let _ = writeln!(
                    std::io::stderr(),
                    "{label}: {} iterations (all f64 {baseline}), {} reliable updates, true \
                     residual {cpu_res:.3e} (GPU {gpu_res:.3e})",
                    r.iterations,
                    r.updates
                );
                assert_eq!(r.status, SolveStatus::Converged, "{label}");
                assert!(cpu_res <= TOL, "{label}: true residual {cpu_res:e}");
                assert!(
                    (gpu_res - cpu_res).abs() <= 0.05 * cpu_res + 1e-13,
                    "{label}: GPU true residual {gpu_res:e}, CPU {cpu_res:e}"
                );
                assert!(
                    r.iterations as f64 <= 1.2 * baseline as f64,
                    "{label}: {} iterations, all-f64 {baseline}",
                    r.iterations
                );
                counts.push((label, r.iterations));
            }
            let first = counts[0].1;
            for (label, it) in &counts {
                assert!(
                    it.abs_diff(first) <= 2,
                    "{label}: {it}, {} {first}",
                    counts[0].0
                );
            }
        }
    }
}

/// The mixed solve on a split operator (one rank through host memory, cut along t: every sum over
/// the ranks, every ghost exchanged): the same iterations as the whole lattice's and a true residual
/// of 1e-10, for sync and async, BiCGStab and CGNR.
#[test]
fn a_split_mixed_solve_matches_the_whole_lattice() {
    use lattice_gpu_host::comm::Solo;
    let Some(gpu) = gpu("a_split_mixed_solve_matches_the_whole_lattice") else {
        return;
    };
    let case = &cases()[1];
    let lat = Lattice::new(DIMS, true).unwrap();
    let b = SpinorField::random(DIMS, 3);
    let whole = |g: &Arc<Gpu>| {
        MixedBiCgStab::new(
            g,
            EvenOdd(WilsonGpu::<f64>::new(g, &lat, &case.u, case.kappa, Recon::R12).unwrap()),
            EvenOdd(WilsonGpu::<f32>::new(g, &lat, &case.u, case.kappa, Recon::R12).unwrap()),
        )
        .unwrap()
    };
    let block = || Block::new(lat, [1; 4], 0).unwrap().cutting(&[3]).unwrap();
    let hi_ranks = || Box::new(HostStaged(std::rc::Rc::new(Solo))) as Box<dyn DeviceRanks<f64>>;
    let lo_ranks = || Box::new(HostStaged(std::rc::Rc::new(Solo))) as Box<dyn DeviceRanks<f32>>;
    let split = |g: &Arc<Gpu>| {
        let hi = WilsonGpu::<f64>::split(
            g,
            block(),
            &case.u,
            case.kappa,
            Recon::R12,
            hi_ranks(),
            true,
        );
        let lo = WilsonGpu::<f32>::split(
            g,
            block(),
            &case.u,
            case.kappa,
            Recon::R12,
            lo_ranks(),
            true,
        );
        MixedBiCgStab::new(g, EvenOdd(hi.unwrap()), EvenOdd(lo.unwrap())).unwrap()
    };
    for method in [Method::BiCgStab, Method::Cgnr] {
        for variant in [OverheadHiding::Sync, OverheadHiding::Async] {
            let opt = options(variant, Fusion::Off, method);
            let label = format!("split {method} {variant}");
            let (_, want, _) =
                solve_mixed_with(&mut whole(&gpu), &b, &opt, &mut |_, _| Ok(())).unwrap();
            let (x, got, _) = solve_mixed_with(&mut split(&gpu), &b, &opt, &mut |_, _| Ok(()))
                .unwrap_or_else(|e| panic!("{label}: {e}"));
            let res = reference::true_residual(&lat, &case.u, case.kappa, &b, &x);
            let _ = writeln!(
                std::io::stderr(),
                "{label}: {} iterations ({} whole), {} updates, true residual {res:.3e}",
                got.iterations,
                want.iterations,
                got.updates
            );
            assert_eq!(got.status, SolveStatus::Converged, "{label}");
            assert!(res <= TOL, "{label}: true residual {res:e}");
            assert!(
                got.iterations.abs_diff(want.iterations) <= 2,
                "{label}: {} iterations, whole lattice {}",
                got.iterations,
                want.iterations
            );
        }
    }
}

/// A stall is an error that carries the true residuals and names the fix: an outer tolerance below
/// what the outer precision resolves (f32 outer and sloppy, 1e-12) can never be reached.
#[test]
fn an_unreachable_tolerance_stalls_with_the_history_and_the_fix() {
    let Some(gpu) = gpu("an_unreachable_tolerance_stalls_with_the_history_and_the_fix") else {
        return;
    };
    let case = &cases()[0];
    let lat = Lattice::new(DIMS, true).unwrap();
    let b = SpinorField::random(DIMS, 3);
    let w = || WilsonGpu::<f32>::new(&gpu, &lat, &case.u, case.kappa, Recon::R12).unwrap();
    let mut s = MixedBiCgStab::new(&gpu, EvenOdd(w()), EvenOdd(w())).unwrap();
    let mut opt = options(OverheadHiding::Async, Fusion::Off, Method::BiCgStab);
    opt.solve.tol = 1e-12;
    opt.stall_updates = 4;
    let e = solve_mixed_with(&mut s, &b, &opt, &mut |_, _| Ok(()))
        .map(|r| r.1)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("stalled") && e.contains("reliable updates"),
        "{e}"
    );
    assert!(
        e.contains("--delta") && e.contains("true relative residual at each update"),
        "{e}"
    );
    // A sloppy precision finer than the outer one is refused.
    let hi = EvenOdd(WilsonGpu::<f32>::new(&gpu, &lat, &case.u, case.kappa, Recon::R12).unwrap());
    let lo = EvenOdd(WilsonGpu::<f64>::new(&gpu, &lat, &case.u, case.kappa, Recon::R12).unwrap());
    let e = MixedBiCgStab::new(&gpu, hi, lo)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("finer than the outer"), "{e}");
}
