//! The `lqcd` binary's mixed-precision options (`--sloppy`, `--delta`, `--solver`): what it refuses,
//! with which exit code and message, never a panic; the CPU fallback's notice; and, on a GPU, mixed
//! f32/f64 BiCGStab and CGNR solves that report their precisions and reliable updates (skipped
//! without a GPU: `SKIPPED (no GPU)`).

use lattice_gpu_testkit as common;

/// lqcd's exit code and its stdout and stderr; fails the test on a panic.
fn lqcd(args: &[&str]) -> (Option<i32>, String) {
    common::run_cli_code("LATTICE_GPU_LQCD_BIN", env!("CARGO_BIN_EXE_lqcd"), args)
}

const SMALL: [&str; 4] = ["solve", "--dims", "4x4x4x8", "--tol"];

fn solve(extra: &[&str]) -> (Option<i32>, String) {
    let mut args: Vec<&str> = SMALL.to_vec();
    args.push("1e-5");
    args.extend_from_slice(extra);
    lqcd(&args)
}

/// A sloppy precision finer than the outer one is refused before anything runs, on either engine,
/// naming the fix.
#[test]
fn a_sloppy_precision_finer_than_the_outer_one_is_refused() {
    for engine in ["host", "auto"] {
        let (code, text) = solve(&["--engine", engine, "--precision", "f32", "--sloppy", "f64"]);
        assert_eq!(code, Some(1), "{engine}: {text}");
        assert!(
            text.contains("--sloppy f64 is finer than the outer --precision f32")
                && text.contains("use --sloppy f32"),
            "{engine}: {text}"
        );
        assert!(!text.contains("converged"), "{engine}: {text}");
    }
    // The same precision is no mixed precision, and fine.
    let (code, text) = solve(&["--engine", "host", "--precision", "f32", "--sloppy", "f32"]);
    assert_eq!(code, Some(0), "{text}");
}

#[test]
fn bad_mixed_options_are_refused_with_their_fix() {
    for (args, code, want) in [
        (
            &["--delta", "0"][..],
            1,
            "--delta 0 must lie between 0 and 1",
        ),
        (
            &["--delta", "1.5"],
            1,
            "--delta 1.5 must lie between 0 and 1",
        ),
        (&["--delta", "nan"], 1, "must lie between 0 and 1"),
        (
            &["--sloppy", "f16"],
            2,
            "possible values: f64, f32, half, fixed",
        ),
        (
            &["--precision", "f32", "--sloppy", "half"],
            1,
            "--sloppy half runs under the outer --precision f64 only",
        ),
        (
            &["--precision", "f32", "--sloppy", "fixed"],
            1,
            "--sloppy fixed runs under the outer --precision f64 only",
        ),
        (&["--solver", "gmres"], 2, "use bicgstab or cgnr"),
        (
            &["--bench", "5", "--sloppy", "f32"],
            1,
            "--bench times one precision's BiCGStab variants",
        ),
    ] {
        let mut all = vec!["--engine", "host"];
        all.extend_from_slice(args);
        let (got, text) = solve(&all);
        assert_eq!(got, Some(code), "{args:?}: {text}");
        assert!(text.contains(want), "{args:?}: {text}");
    }
}

/// Without a GPU the CPU reference solves in f64 BiCGStab, and says that the options apply on a GPU:
/// on one domain and split over threads.
#[test]
fn the_cpu_engine_says_it_solves_in_f64_bicgstab() {
    for split in [&[][..], &["--gpus", "2"]] {
        let mut args = vec!["--engine", "host", "--sloppy", "f32", "--solver", "cgnr"];
        args.extend_from_slice(split);
        let (code, text) = solve(&args);
        assert_eq!(code, Some(0), "{split:?}: {text}");
        assert!(
            text.contains("notice: the CPU reference solves with BiCGStab in f64"),
            "{split:?}: {text}"
        );
    }
}

/// On a GPU, split over two ranks (threads sharing it; the lattice cut along t, ghosts exchanged
/// behind the inner sites): mixed f32/f64 and half/f64 BiCGStab, CGNR, and the clover operator in f64
/// and in half/f64 and fixed/f64, each the one-GPU solve's solution to 8 digits with a true residual of at most
/// 1e-9, the reliable updates said.
#[test]
fn split_mixed_and_clover_solves_give_the_one_gpu_solution() {
    let test = "split_mixed_and_clover_solves_give_the_one_gpu_solution";
    let Some(_gpu) = common::gpu(test) else {
        return;
    };
    let base = [
        "solve", "--engine", "device", "--dims", "8x8x8x8", "--tol", "1e-10", "--kappa",
    ];
    for extra in [
        &["0.15", "--sloppy", "f32"][..],
        &["0.15", "--sloppy", "half"],
        &["0.15", "--solver", "cgnr"],
        &["0.12", "--csw", "1.3"],
        &["0.12", "--csw", "1.3", "--sloppy", "half"],
        &["0.12", "--csw", "1.3", "--sloppy", "fixed"],
    ] {
        let mut one = base.to_vec();
        one.extend_from_slice(extra);
        let (code, text) = lqcd(&one);
        assert_eq!(code, Some(0), "{extra:?}: {text}");
        let want = common::number_after(&text, "|x| = ");
        let split = [&one[..], &["--gpus", "2"]].concat();
        let (code, text) = lqcd(&split);
        assert_eq!(code, Some(0), "{extra:?} split: {text}");
        assert!(text.contains("split over 2 GPUs"), "{extra:?}: {text}");
        let got = common::number_after(&text, "|x| = ");
        assert!(
            (got - want).abs() <= 1e-8 * want,
            "{extra:?}: split |x| = {got}, one GPU {want}\n{text}"
        );
        let res = common::number_after(&text, "|b - D x|/|b| = ");
        assert!(
            res <= 1e-9,
            "{extra:?}: split true residual {res:e}\n{text}"
        );
        let clover = extra.contains(&"--csw");
        let mixed = !clover || extra.contains(&"--sloppy");
        assert_eq!(
            text.contains("reliable updates in f64"),
            mixed,
            "{extra:?}: {text}"
        );
        if clover {
            assert!(
                text.contains("operator: Wilson-clover"),
                "{extra:?}: {text}"
            );
        }
    }
}

/// On a GPU: mixed f32/f64 and half/f64 BiCGStab, f32/f64 CGNR, and CGNR in f64, to 1e-10, each
/// naming its method, precisions and reliable updates, with a true residual of at most 1e-10 (on the full system; the
/// even-odd one converged to 1e-10, so allow the reconstruction's factor of a few).
#[test]
fn mixed_solves_on_the_gpu_report_precisions_and_reliable_updates() {
    let Some(_gpu) = common::gpu("mixed_solves_on_the_gpu_report_precisions_and_reliable_updates")
    else {
        return;
    };
    for (extra, line) in [
        (
            &["--sloppy", "f32"][..],
            "solver: BiCGStab, outer precision f64, sloppy f32",
        ),
        (
            &["--sloppy", "f32", "--solver", "cgnr"],
            "solver: CGNR, outer precision f64, sloppy f32",
        ),
        (
            &["--solver", "cgnr"],
            "solver: CGNR, outer precision f64, sloppy f64",
        ),
        (
            &["--sloppy", "half"],
            "solver: BiCGStab, outer precision f64, sloppy half",
        ),
        (&["--sloppy", "f32", "--variant", "sync"], "sloppy f32"),
        (&["--sloppy", "f32", "--variant", "graph"], "sloppy f32"),
        (
            &["--sloppy", "f32", "--variant", "waitkernel"],
            "sloppy f32",
        ),
        (
            &[
                "--sloppy",
                "f32",
                "--variant",
                "streamwait",
                "--fused",
                "on",
            ],
            "sloppy f32",
        ),
    ] {
        let mut args = vec![
            "solve", "--engine", "device", "--dims", "8x8x8x8", "--kappa", "0.15", "--tol", "1e-10",
        ];
        args.extend_from_slice(extra);
        let (code, text) = lqcd(&args);
        assert_eq!(code, Some(0), "{extra:?}: {text}");
        assert!(text.contains(line), "{extra:?}: {text}");
        assert!(
            text.contains("reliable updates in f64"),
            "{extra:?}: {text}"
        );
        // "... N bicgstab iterations in f32 with U reliable updates in f64; ..."
        let text_ = ["f64", "half"].iter().fold(text.clone(), |t, p| {
            t.replace(&format!("in {p} with"), "in f32 with")
        });
        let updates = common::number_after(&text_, "in f32 with ");
        assert!(
            updates >= 1.0,
            "{extra:?}: {updates} reliable updates\n{text}"
        );
        let res = common::number_after(&text, "|b - D x|/|b| = ");
        assert!(res <= 1e-9, "{extra:?}: true residual {res:e}\n{text}");
    }
    // An f32 outer precision cannot reach 1e-10: refused before the solve.
    let (code, text) = lqcd(&[
        "solve",
        "--engine",
        "device",
        "--dims",
        "8x8x8x8",
        "--precision",
        "f32",
        "--solver",
        "cgnr",
        "--tol",
        "1e-10",
    ]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("below what f32 can reach"), "{text}");
}

/// `bench-mixed` needs a GPU: without one it says so and fails cleanly.
#[test]
fn bench_mixed_without_a_gpu_fails_cleanly() {
    if lattice_gpu_host::Gpu::probe().is_ok_and(|n| n > 0) {
        eprintln!("SKIPPED (a GPU is present): bench_mixed_without_a_gpu_fails_cleanly");
        return;
    }
    let (code, text) = lqcd(&["bench-mixed", "--dims", "4x4x4x8"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.to_lowercase().contains("gpu"), "{text}");
}

/// The mixed-precision solve's memory estimate held against the peaks it measures (as
/// `lqcd_gpu.rs`'s `gpu_estimates_cover_the_measured_peaks` for the one-precision solve), for
/// BiCGStab and CGNR.
#[test]
fn mixed_gpu_estimates_cover_the_measured_peaks() {
    let Some(_gpu) = common::gpu("mixed_gpu_estimates_cover_the_measured_peaks") else {
        return;
    };
    for solver in ["bicgstab", "cgnr"] {
        common::gpu_estimates_hold(
            "LATTICE_GPU_LQCD_BIN",
            env!("CARGO_BIN_EXE_lqcd"),
            &format!(
                "solve --engine device --dims 24x24x24x24 --tol 1e-5 --sloppy f32 --solver {solver}"
            ),
            1.5,
            1.1,
        );
    }
}
