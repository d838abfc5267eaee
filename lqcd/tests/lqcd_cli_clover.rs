//! The `lqcd` binary's `--csw` (the Wilson-clover operator) and the propagator's effective mass: a
//! clover solve on the CPU engine that is the library's own (its |x| and a small true residual);
//! `--csw 0` prints what Wilson prints; bad values and combinations not supported yet refused with
//! exit 1 and their fix, never a panic; the propagator's checkpoint of one c_sw refused by a run of
//! another; `meff.csv` holding ln(C(t)/C(t+1)) of pion.csv's C(t) and `meff.png` a PNG. On a GPU
//! (skipped without one: `SKIPPED (no GPU)`), clover solves in f32 and f64 with either link storage.

use lattice_gpu_lqcd::clover::{clover_site_matrix, solve_clover_eo, CloverField};
use lattice_gpu_lqcd::gauge::GaugeField;
use lattice_gpu_lqcd::geometry::Lattice;
use lattice_gpu_lqcd::spinor::SpinorField;
use lattice_gpu_testkit as common;

/// lqcd's exit code and its stdout and stderr; fails the test on a panic.
fn lqcd(args: &[&str]) -> (Option<i32>, String) {
    common::run_cli_code("LATTICE_GPU_LQCD_BIN", env!("CARGO_BIN_EXE_lqcd"), args)
}

const DIMS: [usize; 4] = [4, 4, 4, 8];

/// The CLI's default gauge seed and source seed, for the library's solve of the same system.
const GAUGE_SEED: u64 = 1;
const SOURCE_SEED: u64 = 7;

/// `lqcd solve --engine host` on the 4x4x4x8 lattice with `extra`.
fn cpu_solve(extra: &[&str]) -> (Option<i32>, String) {
    let mut args = vec!["solve", "--engine", "host", "--dims", "4x4x4x8"];
    args.extend_from_slice(extra);
    lqcd(&args)
}

/// The output without what differs between two runs of one solve: its times and rates.
fn without_timings(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("|x| =") {
            Some(k) if l.starts_with("converged") => &l[k..],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The CPU engine's clover solve is the library's `solve_clover_eo` of the same field, source and
/// c_sw (the same |x|, which the Wilson operator's differs from), its summary names the operator,
/// and its true residual, of the clover system, is small.
#[test]
fn a_clover_solve_on_the_cpu_is_the_librarys_with_a_small_true_residual() {
    let (code, text) = cpu_solve(&["--csw", "1.5", "--kappa", "0.12", "--tol", "1e-10"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("operator: Wilson-clover, c_sw = 1.5, kappa = 0.12"),
        "{text}"
    );
    assert!(
        text.contains("true residual of the clover system |b - D x|/|b| = "),
        "{text}"
    );
    let res = common::number_after(&text, "|b - D x|/|b| = ");
    assert!(res < 1e-9, "true residual {res:e}\n{text}");
    let x_norm = common::number_after(&text, "|x| = ");

    let lat = Lattice::new(DIMS, false).unwrap();
    let u = GaugeField::random(DIMS, GAUGE_SEED);
    let b = SpinorField::random(DIMS, SOURCE_SEED);
    let clover = CloverField::new(&u, 1.5, 0.12).unwrap();
    let (x, _, lib_res) = solve_clover_eo(&lat, &u, &clover, &b, 1e-10, 2000).unwrap();
    let want = x.norm2().sqrt();
    assert!(
        (x_norm - want).abs() <= 1e-10 * want,
        "|x| = {x_norm} from the CLI, {want} from solve_clover_eo"
    );
    assert!(
        (res - lib_res).abs() <= 1e-3 * lib_res,
        "{res} vs {lib_res}"
    );

    let (code, wilson) = cpu_solve(&["--kappa", "0.12", "--tol", "1e-10"]);
    assert_eq!(code, Some(0), "{wilson}");
    let wilson_norm = common::number_after(&wilson, "|x| = ");
    assert!(
        (wilson_norm - x_norm).abs() > 1e-6 * x_norm,
        "the clover term changed nothing: |x| = {x_norm} both ways"
    );
}

/// `--csw 0` is the Wilson operator, on the path of a run without the option: the same output.
#[test]
fn csw_zero_prints_what_the_wilson_run_prints() {
    let (code, plain) = cpu_solve(&["--tol", "1e-10"]);
    assert_eq!(code, Some(0), "{plain}");
    assert!(plain.contains("operator: Wilson, kappa = 0.12"), "{plain}");
    for zero in ["0", "0.0", "-0"] {
        let (code, text) = cpu_solve(&["--tol", "1e-10", "--csw", zero]);
        assert_eq!(code, Some(0), "--csw {zero}: {text}");
        assert_eq!(
            without_timings(&text),
            without_timings(&plain),
            "--csw {zero}"
        );
    }
}

/// Bad coefficients (`check_csw`'s message) and the combinations the clover solve lacks yet end
/// with exit 1, the problem and what works instead, before any solve.
#[test]
fn bad_csw_and_unsupported_combinations_are_refused_with_their_fix() {
    for bad in ["-1", "-1e-300", "nan", "inf", "-inf"] {
        let (code, text) = cpu_solve(&["--csw", bad]);
        assert_eq!(code, Some(1), "--csw {bad}: {text}");
        assert!(
            text.contains("must be a finite number >= 0")
                && text.contains("--csw 0 for plain Wilson"),
            "--csw {bad}: {text}"
        );
        assert!(!text.contains("converged"), "--csw {bad}: {text}");
    }
    let (code, text) = cpu_solve(&["--csw", "one"]);
    assert_eq!(code, Some(2), "{text}");
    for (extra, says) in [
        (&["--fused", "on"][..], "--fused on"),
        (&["--gpus", "2"], "--csw 1 with --gpus/--mpi"),
        (&["--bench", "5"], "solve --bench with --csw 1"),
    ] {
        let mut args = vec!["--csw", "1"];
        args.extend_from_slice(extra);
        let (code, text) = cpu_solve(&args);
        assert_eq!(code, Some(1), "{extra:?}: {text}");
        assert!(
            text.contains(says) && text.contains("not supported yet"),
            "{extra:?}: {text}"
        );
        assert!(
            text.contains("leave") && text.contains("--csw 0"),
            "{extra:?}: no fix named: {text}"
        );
        assert!(!text.contains("converged"), "{extra:?}: {text}");
    }
    // The propagator takes the same refusals.
    let dir = common::temp_dir("lqcd-clover-refused");
    let out = dir.join("out");
    let (code, text) = lqcd(&[
        "propagator",
        "--engine",
        "host",
        "--dims",
        "2x2x2x4",
        "--csw",
        "-2",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("--csw = -2 must be a finite number"),
        "{text}"
    );
    assert!(!out.join("pion.csv").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A clover block that cannot be inverted ends the run with the error `CloverField::new` gives, naming
/// the site. `A(n) = 1 + c_sw S(n)` is linear in c_sw, so with `mu` the most negative eigenvalue of
/// the hermitian `S(0)` of the random field, `A(0)` is singular at `c_sw = -1 / mu`.
#[test]
fn a_singular_clover_block_is_refused_naming_its_site() {
    let kappa = 0.12;
    let u = GaugeField::random(DIMS, GAUGE_SEED);
    let s = clover_site_matrix(&u, 0, 1.0, kappa) - nalgebra::SMatrix::identity();
    let mu = nalgebra::SymmetricEigen::new(s)
        .eigenvalues
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min);
    assert!(mu < 0.0, "S(0) has no negative eigenvalue: {mu}");
    let csw = format!("{}", -1.0 / mu);
    let (code, text) = cpu_solve(&["--kappa", "0.12", "--csw", &csw]);
    assert_eq!(code, Some(1), "--csw {csw}: {text}");
    assert!(
        text.contains("is singular")
            && text.contains("site (x, y, z, t) = (0, 0, 0, 0)")
            && text.contains("lower --csw or kappa"),
        "--csw {csw}: {text}"
    );
    assert!(!text.contains("converged"), "{text}");
}

/// The clover solve's memory estimate covers its measured peak on the CPU and holds its growth from
/// 4x4x4x8 to 12^4 (as `lqcd_cli.rs` checks the Wilson solve's: the runtime's own memory drops out).
#[test]
fn the_cpu_clover_estimate_covers_its_peak() {
    let dir = common::temp_dir("lqcd-clover-memory");
    let bin = common::binary("LATTICE_GPU_LQCD_BIN", env!("CARGO_BIN_EXE_lqcd"));
    let large = if cfg!(debug_assertions) {
        "8x8x8x8"
    } else {
        "12x12x12x12"
    };
    let mut runs = Vec::new();
    for dims in ["4x4x4x8", large] {
        let args = [
            "solve", "--engine", "host", "--dims", dims, "--csw", "1", "--tol", "1e-6",
        ];
        let [est, _, got, _] = common::measured(&bin, &args, &dir);
        assert!(est >= got, "{dims}: estimated {est} < measured {got}");
        runs.push((est, got));
    }
    common::estimate_holds(
        runs[1].0 - runs[0].0 + (1 << 20),
        runs[1].1 - runs[0].1,
        1.3,
        &format!("lqcd solve --csw 1, from 4x4x4x8 to {large}"),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A value of meff.csv: `None` where the file leaves it empty.
fn meff_rows(csv: &str) -> Vec<(usize, Option<f64>)> {
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("t,m_eff"), "{csv}");
    lines
        .map(|l| {
            let (t, m) = l.split_once(',').unwrap_or_else(|| panic!("row `{l}`"));
            (
                t.parse().unwrap(),
                (!m.is_empty()).then(|| m.parse().unwrap()),
            )
        })
        .collect()
}

/// C(t) of pion.csv (`t,C,m_eff`).
fn correlator(csv: &str) -> Vec<f64> {
    csv.lines()
        .skip(1)
        .map(|l| l.split(',').nth(1).unwrap().parse().unwrap())
        .collect()
}

/// The propagator writes, beside pion.csv, meff.csv with ln(C(t)/C(t+1)) of pion.csv's C(t) for
/// t = 0..T-2, and meff.png: for the Wilson operator and for clover.
#[test]
fn the_propagator_writes_the_effective_mass_beside_pion_csv() {
    let dir = common::temp_dir("lqcd-meff");
    for csw in ["0", "1.2"] {
        let out = dir.join(format!("csw-{csw}"));
        let (code, text) = lqcd(&[
            "propagator",
            "--engine",
            "host",
            "--dims",
            "4x4x4x8",
            "--csw",
            csw,
            "--output",
            out.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(0), "--csw {csw}: {text}");
        assert!(
            text.contains("meff.csv") && text.contains("meff.png"),
            "{text}"
        );
        let c = correlator(&std::fs::read_to_string(out.join("pion.csv")).unwrap());
        assert_eq!(c.len(), 8);
        let rows = meff_rows(&std::fs::read_to_string(out.join("meff.csv")).unwrap());
        assert_eq!(rows.len(), 7, "--csw {csw}: {rows:?}");
        for (t, m) in rows {
            let want = (c[t] / c[t + 1]).ln();
            let m = m.unwrap_or_else(|| panic!("--csw {csw}: m_eff({t}) empty, C = {c:?}"));
            assert!(
                (m - want).abs() <= 1e-12 * want.abs().max(1.0),
                "--csw {csw}: m_eff({t}) = {m}, ln(C(t)/C(t+1)) = {want}"
            );
        }
        let png = std::fs::read(out.join("meff.png")).unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "--csw {csw}");
        assert!(png.len() > 1000, "--csw {csw}: {} bytes", png.len());
        assert!(common::temporaries(&out).is_empty());
    }
    // The clover term changes the correlator.
    let c0 = std::fs::read_to_string(dir.join("csw-0/pion.csv")).unwrap();
    let c1 = std::fs::read_to_string(dir.join("csw-1.2/pion.csv")).unwrap();
    assert_ne!(c0, c1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A loose tolerance leaves C(t) zero far from the source: those m_eff are left empty, said once.
#[test]
fn undefined_effective_masses_are_left_empty_and_said_once() {
    let dir = common::temp_dir("lqcd-meff-gaps");
    let out = dir.join("out");
    let (code, text) = lqcd(&[
        "propagator",
        "--engine",
        "host",
        "--dims",
        "2x2x2x16",
        "--kappa",
        "0.01",
        "--tol",
        "0.5",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{text}");
    let c = correlator(&std::fs::read_to_string(out.join("pion.csv")).unwrap());
    let rows = meff_rows(&std::fs::read_to_string(out.join("meff.csv")).unwrap());
    let gaps: Vec<usize> = (0..c.len() - 1)
        .filter(|&t| !(c[t] > 0.0 && c[t + 1] > 0.0))
        .collect();
    for (t, m) in &rows {
        assert_eq!(m.is_none(), gaps.contains(t), "t = {t}: {m:?}, C = {c:?}");
    }
    if gaps.is_empty() {
        eprintln!("no zero C(t) at this tolerance: C = {c:?}");
    } else {
        assert_eq!(
            text.matches("left empty in pion.csv and meff.csv").count(),
            1,
            "{text}"
        );
    }
    assert!(out.join("meff.png").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The propagator's checkpoint records c_sw: a run of another c_sw (Wilson included) is refused,
/// naming both values, and a Wilson checkpoint refuses a clover run; the same c_sw resumes to the
/// bytes of the straight run.
#[test]
fn a_checkpoint_of_another_csw_is_refused() {
    let dir = common::temp_dir("lqcd-clover-resume");
    let run = |out: &str, extra: &[&str]| {
        let out = dir.join(out);
        let mut args = vec![
            "propagator",
            "--engine",
            "host",
            "--dims",
            "2x2x2x4",
            "--output",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        lqcd(&args)
    };
    let (code, text) = run("clover", &["--csw", "1.1"]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = run("wilson", &[]);
    assert_eq!(code, Some(0), "{text}");
    let clover_ck = dir.join("clover/checkpoint");
    let wilson_ck = dir.join("wilson/checkpoint");
    let ck = String::from_utf8_lossy(&std::fs::read(clover_ck.join("propagator.ckpt")).unwrap())
        .into_owned();
    assert!(ck.contains("param csw 1.1"), "{ck}");
    for (ck, extra, says) in [
        (
            &clover_ck,
            &["--csw", "0"][..],
            "csw is 0 here and 1.1 there",
        ),
        (&clover_ck, &[][..], "csw is 0 here and 1.1 there"),
        (
            &clover_ck,
            &["--csw", "1.2"][..],
            "csw is 1.2 here and 1.1 there",
        ),
        (
            &wilson_ck,
            &["--csw", "1.1"][..],
            "csw is 1.1 here and 0 there",
        ),
    ] {
        let mut args = vec!["--resume", ck.to_str().unwrap()];
        args.extend_from_slice(extra);
        let (code, text) = run("again", &args);
        assert_eq!(code, Some(1), "{extra:?}: {text}");
        assert!(text.contains(says), "{extra:?}: {text}");
        assert!(!dir.join("again/pion.csv").exists());
    }
    let (code, text) = run(
        "again",
        &["--csw", "1.1", "--resume", clover_ck.to_str().unwrap()],
    );
    assert_eq!(code, Some(0), "{text}");
    for file in ["pion.csv", "meff.csv"] {
        assert_eq!(
            std::fs::read(dir.join("again").join(file)).unwrap(),
            std::fs::read(dir.join("clover").join(file)).unwrap(),
            "{file}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// On a GPU: clover solves in f32 and f64, 12- and 18-number links, mixed f32/f64 and half/f64
/// BiCGStab and CGNR,
/// and in f64 under every `--variant`, each naming the operator and reaching a small true residual of the clover system; in
/// f64 the solution's norm is the CPU engine's.
#[test]
fn clover_solves_on_the_gpu_in_f32_and_f64() {
    let Some(_gpu) = common::gpu("clover_solves_on_the_gpu_in_f32_and_f64") else {
        return;
    };
    let base = [
        "solve", "--dims", "8x8x8x8", "--kappa", "0.12", "--csw", "1.3",
    ];
    let mut cpu = base.to_vec();
    cpu.extend_from_slice(&["--engine", "host", "--tol", "1e-10"]);
    let (code, text) = lqcd(&cpu);
    assert_eq!(code, Some(0), "{text}");
    let cpu_norm = common::number_after(&text, "|x| = ");
    for (precision, tol, bound) in [("f32", "1e-5", 1e-4), ("f64", "1e-10", 1e-9)] {
        for recon in ["12", "18"] {
            let mut args = base.to_vec();
            args.extend_from_slice(&[
                "--engine",
                "device",
                "--precision",
                precision,
                "--tol",
                tol,
                "--recon",
                recon,
            ]);
            let (code, text) = lqcd(&args);
            let what = format!("{precision} recon {recon}");
            assert_eq!(code, Some(0), "{what}: {text}");
            assert!(
                text.contains("operator: Wilson-clover, c_sw = 1.3, kappa = 0.12"),
                "{what}: {text}"
            );
            let res = common::number_after(&text, "|b - D x|/|b| = ");
            assert!(res <= bound, "{what}: true residual {res:e}\n{text}");
            assert!(text.contains("operator M_hat = A_ee"), "{what}: {text}");
            if precision == "f64" {
                let x_norm = common::number_after(&text, "|x| = ");
                assert!(
                    (x_norm - cpu_norm).abs() <= 1e-8 * cpu_norm,
                    "{what}: |x| = {x_norm}, the CPU's {cpu_norm}"
                );
            }
        }
    }
    // Mixed f32/f64 and half/f64 BiCGStab, and CGNR (f64 and f32/f64), with reliable updates: the
    // CPU's solution.
    for extra in [
        &["--sloppy", "f32"][..],
        &["--sloppy", "half"],
        &["--solver", "cgnr"],
        &["--sloppy", "f32", "--solver", "cgnr"],
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(&["--engine", "device", "--tol", "1e-10"]);
        args.extend_from_slice(extra);
        let (code, text) = lqcd(&args);
        assert_eq!(code, Some(0), "{extra:?}: {text}");
        assert!(
            text.contains("operator: Wilson-clover") && text.contains("reliable updates in f64"),
            "{extra:?}: {text}"
        );
        let res = common::number_after(&text, "|b - D x|/|b| = ");
        assert!(res <= 1e-9, "{extra:?}: true residual {res:e}\n{text}");
        let x_norm = common::number_after(&text, "|x| = ");
        assert!(
            (x_norm - cpu_norm).abs() <= 1e-8 * cpu_norm,
            "{extra:?}: |x| = {x_norm}, the CPU's {cpu_norm}"
        );
    }
    // The propagator on the GPU: its effective mass is that of its own C(t).
    let dir = common::temp_dir("lqcd-clover-gpu-propagator");
    let out = dir.join("out");
    let (code, text) = lqcd(&[
        "propagator",
        "--engine",
        "device",
        "--dims",
        "8x8x8x8",
        "--csw",
        "1.3",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{text}");
    let c = correlator(&std::fs::read_to_string(out.join("pion.csv")).unwrap());
    let rows = meff_rows(&std::fs::read_to_string(out.join("meff.csv")).unwrap());
    assert_eq!(rows.len(), 7, "{rows:?}");
    for (t, m) in rows {
        let want = (c[t] / c[t + 1]).ln();
        let m = m.unwrap_or_else(|| panic!("m_eff({t}) empty, C = {c:?}"));
        assert!((m - want).abs() <= 1e-12 * want.abs().max(1.0), "t = {t}");
    }
    assert!(std::fs::read(out.join("meff.png"))
        .unwrap()
        .starts_with(b"\x89PNG\r\n\x1a\n"));
    let _ = std::fs::remove_dir_all(&dir);
    // The memory estimate, clover field included, against the measured peaks.
    common::gpu_estimates_hold(
        "LATTICE_GPU_LQCD_BIN",
        env!("CARGO_BIN_EXE_lqcd"),
        "solve --engine device --dims 24x24x24x24 --tol 1e-5 --csw 1",
        1.5,
        1.1,
    );
    // The ways of driving the GPU (the library's tests run sync and async): the same solution.
    for variant in ["sync", "graph", "waitkernel", "streamwait"] {
        let mut args = base.to_vec();
        args.extend_from_slice(&["--engine", "device", "--tol", "1e-10", "--variant", variant]);
        let (code, text) = lqcd(&args);
        assert_eq!(code, Some(0), "{variant}: {text}");
        let res = common::number_after(&text, "|b - D x|/|b| = ");
        assert!(res <= 1e-9, "{variant}: true residual {res:e}\n{text}");
        let x_norm = common::number_after(&text, "|x| = ");
        assert!(
            (x_norm - cpu_norm).abs() <= 1e-8 * cpu_norm,
            "{variant}: |x| = {x_norm}, the CPU's {cpu_norm}"
        );
    }
}
