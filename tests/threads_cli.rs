//! The applications split over the threads of one process (`--gpus N`, no MPI): diffusion, lbm and
//! advection over 2 and 3 ranks write the bytes of the one-domain run, and lqcd's split solve takes the
//! same iterations and gives the same |x| to 10 digits; impossible splits are refused with the reason.
//! On the CPU engine always; on the GPU engine too where there is a GPU (ranks beyond the GPUs there are
//! share them, halos through host memory), which scripts/gpu-check.sh requires.

use std::io::Write;

mod common;
use common::{run_cli, temp_dir};

fn bin(app: &str) -> (&'static str, &'static str) {
    match app {
        "diffusion" => ("LATTICE_GPU_DIFFUSION_BIN", env!("CARGO_BIN_EXE_diffusion")),
        "lbm" => ("LATTICE_GPU_LBM_BIN", env!("CARGO_BIN_EXE_lbm")),
        "advection" => ("LATTICE_GPU_ADVECTION_BIN", env!("CARGO_BIN_EXE_advection")),
        _ => ("LATTICE_GPU_LQCD_BIN", env!("CARGO_BIN_EXE_lqcd")),
    }
}

fn run(app: &str, args: &[&str]) -> (bool, String) {
    let (var, built) = bin(app);
    run_cli(var, built, args)
}

/// The engines to check: the CPU, and the GPU where there is one.
fn engines(test: &str) -> Vec<&'static str> {
    let mut e = vec!["host"];
    if common::gpu(test).is_some() {
        e.push("device");
    } else {
        let _ = writeln!(std::io::stderr(), "{test}: CPU engine only");
    }
    e
}

/// `app ARGS --output DIR` on one domain and over 2 and 3 threads: `file` byte for byte.
fn same_bytes(app: &str, args: &[&str], file: &str, name: &str) {
    let dir = temp_dir(name);
    let out = |tag: &str| dir.join(tag).to_string_lossy().to_string();
    let one = out("one");
    let mut a = args.to_vec();
    a.extend(["--output", &one]);
    let (ok, text) = run(app, &a);
    assert!(ok, "{app} {a:?}:\n{text}");
    let want = std::fs::read(dir.join("one").join(file)).unwrap();
    for n in ["2", "3"] {
        let split = out(n);
        let mut a = args.to_vec();
        a.extend(["--gpus", n, "--output", &split]);
        let (ok, text) = run(app, &a);
        assert!(ok, "{app} {a:?}:\n{text}");
        assert!(
            text.contains(&format!("over {n} ranks run as threads of this process")),
            "{text}"
        );
        let got = std::fs::read(dir.join(n).join(file)).unwrap();
        assert!(
            got == want,
            "{app} {args:?} over {n} threads: {file} differs"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stencils_and_lbm_over_threads_write_the_one_domain_bytes() {
    let test = "stencils_and_lbm_over_threads_write_the_one_domain_bytes";
    for engine in engines(test) {
        let e = ["--engine", engine];
        let name = |app: &str| format!("threads-{app}-{engine}");
        same_bytes(
            "diffusion",
            &[&e[..], &["--size", "21x17x23", "--steps", "40"]].concat(),
            "diffusion.npy",
            &name("diffusion"),
        );
        same_bytes(
            "lbm",
            &[
                &["cavity"][..],
                &e,
                &[
                    "--streaming",
                    "ab",
                    "--precision",
                    "f64",
                    "--size",
                    "18x18x11",
                ],
                &["--closed-z", "--re", "20", "--steps", "120"],
            ]
            .concat(),
            "velocity.npy",
            &name("lbm"),
        );
        same_bytes(
            "advection",
            &[&["swirl"][..], &e, &["--size", "41x37", "--steps", "30"]].concat(),
            "field.npy",
            &name("advection"),
        );
    }
}

/// Iterations and |x| to 10 digits of an lqcd solve's summary line.
fn solve_summary(text: &str) -> (f64, String) {
    let it = text
        .split(" iterations")
        .next()
        .and_then(|s| s.split_whitespace().last())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no iteration count in:\n{text}"));
    let x = common::number_after(text, "|x| = ");
    (it, format!("{x:.9e}"))
}

#[test]
fn lqcd_split_over_threads_solves_as_one_domain() {
    let test = "lqcd_split_over_threads_solves_as_one_domain";
    let dims = ["--dims", "4x4x8x12", "--antiperiodic-t", "--tol", "1e-10"];
    for engine in engines(test) {
        let base = [&["solve", "--engine", engine][..], &dims].concat();
        // The CPU engine's split runs the full-system reference solver; its one-domain form is one
        // thread. On a GPU the split solve must match the unsplit one.
        let want = if engine == "host" {
            [&base[..], &["--gpus", "1"]].concat()
        } else {
            [&base[..], &["--precision", "f64"]].concat()
        };
        let (ok, text) = run("lqcd", &want);
        assert!(ok, "{want:?}:\n{text}");
        let want = solve_summary(&text);
        for (n, variant) in [("2", "sync"), ("3", "async")] {
            let mut a = [&base[..], &["--gpus", n, "--variant", variant]].concat();
            if engine == "device" {
                a.extend(["--precision", "f64"]);
            }
            let (ok, text) = run("lqcd", &a);
            assert!(ok, "{a:?}:\n{text}");
            assert_eq!(solve_summary(&text), want, "{a:?}:\n{text}");
        }
    }
}

#[test]
fn impossible_thread_splits_are_refused() {
    let dir = temp_dir("threads-refused");
    let o = dir.join("out").to_string_lossy().to_string();
    let cases: [(&str, &[&str], &str); 4] = [
        (
            "diffusion",
            &[
                "--engine", "host", "--gpus", "3", "--size", "8x8x2", "--steps", "2",
            ],
            "split over at most 2 ranks; give --gpus 2 or fewer",
        ),
        (
            "diffusion",
            &[
                "--engine", "host", "--gpus", "2", "--mpi", "--size", "8", "--steps", "2",
            ],
            "give one of them",
        ),
        (
            "advection",
            &[
                "swirl", "--engine", "host", "--gpus", "3", "--size", "41x5", "--steps", "2",
            ],
            "give --gpus 2 or fewer",
        ),
        (
            "lbm",
            &[
                "taylor-green",
                "--engine",
                "host",
                "--gpus",
                "3",
                "--size",
                "16x16x2",
                "--steps",
                "20",
            ],
            "give --gpus 2 or fewer",
        ),
    ];
    for (app, args, needle) in cases {
        let a = [args, &["--output", &o]].concat();
        let (ok, text) = run(app, &a);
        assert!(!ok && text.contains(needle), "{app} {a:?}:\n{text}");
    }
    let (ok, text) = run(
        "lqcd",
        &["solve", "--engine", "host", "--gpus", "0", "--dims", "4"],
    );
    assert!(!ok && text.contains("--gpus"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_fallback_to_the_cpu_is_said_once_for_all_ranks() {
    let test = "the_fallback_to_the_cpu_is_said_once_for_all_ranks";
    let dir = temp_dir("threads-notice");
    let o = dir.join("out").to_string_lossy().to_string();
    // No `--engine`: every rank opens the GPU itself and, without one, falls back alike.
    let want = usize::from(common::gpu(test).is_none());
    let runs: [(&str, &[&str]); 2] = [
        (
            "diffusion",
            &[
                "--gpus", "3", "--size", "12", "--steps", "4", "--output", &o,
            ],
        ),
        ("lqcd", &["solve", "--gpus", "2", "--dims", "4x4x4x8"]),
    ];
    for (app, args) in runs {
        let (ok, text) = run(app, args);
        assert!(ok, "{app} {args:?}:\n{text}");
        // Other notices (the tuner's, on a GPU) are not the fallback.
        let said = text
            .lines()
            .filter(|l| l.starts_with("notice: ") && l.contains("; running "))
            .count();
        assert_eq!(said, want, "{app} {args:?}:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
