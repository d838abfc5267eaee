//! The `advection` binary on the CPU: a small rotation prints its error norms and writes its files; bad
//! input (CFL above 1, NaN in a field file, mismatched shapes, a grid smaller than the footprint, an
//! unknown kernel, options a case does not take) ends in a clear message and a non-zero exit code, never
//! a panic, and writes no output. A run that diverges, or that a signal stops, writes nothing; a grid too
//! large is refused before it is made, and the memory estimate covers the measured peak; the output
//! appears all or nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lattice_gpu::host::io::npy::write_npy;

mod common;

fn advection(args: &[&str]) -> (bool, String) {
    common::run_cli(
        "LATTICE_GPU_ADVECTION_BIN",
        env!("CARGO_BIN_EXE_advection"),
        args,
    )
}

fn temp_dir(name: &str) -> PathBuf {
    common::temp_dir(&format!("advection-cli-{name}"))
}

#[test]
fn rotation_reports_its_errors_and_writes_files() {
    let dir = temp_dir("rotation");
    let out = dir.join("out");
    let (ok, text) = advection(&[
        "rotation",
        "--engine",
        "host",
        "--size",
        "64",
        "--png-every",
        "100",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{text}");
    let rel = common::number_after(&text, "relative L2 ");
    assert!(rel > 0.0 && rel < 0.3, "{text}");
    assert!(
        text.contains("interpolation error") && text.contains("mass drift"),
        "{text}"
    );
    for f in ["field.npy", "field.png", "field-0000100.png"] {
        assert!(out.join(f).is_file(), "{f} missing:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_is_refused_with_the_fix() {
    let dir = temp_dir("bad");
    let out = dir.join("out");
    let o = out.to_str().unwrap();
    let field = dir.join("f.npy");
    let mut f = vec![0.5f32; 16 * 12];
    f[3 + 16 * 4] = f32::NAN;
    write_npy(&field, &[12, 16], &f).unwrap();
    let uv = dir.join("uv.npy");
    write_npy(&uv, &[12, 16, 2], &vec![0.1f32; 16 * 12 * 2]).unwrap();
    let wrong = dir.join("uv-wrong.npy");
    write_npy(&wrong, &[12, 15, 2], &vec![0.1f32; 15 * 12 * 2]).unwrap();
    // NaN everywhere: the largest speed, which sets the time step, skips NaN and sees no flow.
    let nan = dir.join("uv-nan.npy");
    write_npy(&nan, &[12, 16, 2], &vec![f32::NAN; 16 * 12 * 2]).unwrap();
    let (fs, uvs, ws, ns) = (
        field.to_str().unwrap(),
        uv.to_str().unwrap(),
        wrong.to_str().unwrap(),
        nan.to_str().unwrap(),
    );
    let cases: [(&[&str], &str); 8] = [
        (
            &[
                "file",
                "--engine",
                "host",
                "--field",
                fs,
                "--velocity",
                ns,
                "--output",
                o,
            ],
            "u at node (0, 0) is NaN; give finite velocities",
        ),
        (
            &[
                "swirl", "--engine", "host", "--block", "32x4", "--output", o,
            ],
            "--block fixes the launch shape of --engine device",
        ),
        (
            &[
                "translation",
                "--engine",
                "host",
                "--size",
                "64",
                "--cfl",
                "1.5",
                "--output",
                o,
            ],
            "exceeds 1",
        ),
        (
            &[
                "file",
                "--engine",
                "host",
                "--field",
                fs,
                "--velocity",
                uvs,
                "--steps",
                "2",
                "--output",
                o,
            ],
            "NaN at node (3, 4)",
        ),
        (
            &[
                "file",
                "--engine",
                "host",
                "--field",
                fs,
                "--velocity",
                ws,
                "--output",
                o,
            ],
            "(12, 16, 2)",
        ),
        (
            &["swirl", "--engine", "host", "--size", "4x40", "--output", o],
            "5-node footprint",
        ),
        (
            &[
                "swirl", "--engine", "host", "--kernel", "fastest", "--output", o,
            ],
            "unknown kernel",
        ),
        (
            &["swirl", "--engine", "host", "--cut", "--output", o],
            "--cut splits the steps of a decomposed run",
        ),
    ];
    for (args, want) in cases {
        let (ok, text) = advection(args);
        assert!(!ok, "advection {args:?} should fail:\n{text}");
        assert!(
            text.contains(want),
            "advection {args:?}: expected `{want}` in:\n{text}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(&out)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "failed runs left files: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn binary() -> PathBuf {
    common::binary("LATTICE_GPU_ADVECTION_BIN", env!("CARGO_BIN_EXE_advection"))
}

/// Runs the binary with `args` in `dir`: its exit code and its stdout and stderr.
fn run_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = Command::new(binary())
        .args(args)
        .current_dir(dir)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!text.contains("panicked"), "{args:?} panicked:\n{text}");
    (out.status.code(), text)
}

/// Fails unless `dir` holds no run's outputs and no temporaries (beside it either).
fn assert_nothing_written(dir: &Path, out: &str) {
    assert!(!dir.join(out).exists(), "{out} was made");
    assert!(
        common::temporaries(dir).is_empty(),
        "{:?}",
        common::temporaries(dir)
    );
}

/// A field file whose rows from y = 16 on hold +-3e38 in the pattern (-, +, +, -) along x, which
/// the cubic interpolation's half-way weights (-1/16, 9/16, 9/16, -1/16) all add up (1.25 times
/// 3e38, beyond f32), and rows below it 0.5; with u = 0.5 everywhere.
fn overflowing_files(dir: &Path) -> (PathBuf, PathBuf) {
    let (nx, ny) = (32, 24);
    let f: Vec<f32> = (0..nx * ny)
        .map(|k| match (k % nx % 4, k / nx >= 16) {
            (1 | 2, true) => 3e38,
            (_, true) => -3e38,
            _ => 0.5,
        })
        .collect();
    let (field, uv) = (dir.join("big.npy"), dir.join("uv.npy"));
    write_npy(&field, &[ny, nx], &f).unwrap();
    let w: Vec<f32> = (0..nx * ny).flat_map(|_| [0.5, 0.0]).collect();
    write_npy(&uv, &[ny, nx, 2], &w).unwrap();
    (field, uv)
}

#[test]
fn a_velocity_beyond_f32_is_refused_before_it_turns_the_field_into_nan() {
    let dir = temp_dir("f32-velocity");
    // Before: a NaN field written, exit 0.
    let cases: [(&[&str], &str); 2] = [
        (
            &["--velocity", "1e300x1e300"],
            "the velocity 1e300 is beyond f32's range",
        ),
        (&["--cfl", "1e-300"], "below f32's normal range"),
    ];
    for (extra, want) in cases {
        let mut args = vec![
            "translation",
            "--engine",
            "host",
            "--size",
            "64",
            "--steps",
            "5",
            "--output",
            "out",
        ];
        args.extend_from_slice(extra);
        let (code, text) = run_in(&dir, &args, &[]);
        assert_eq!(code, Some(1), "{text}");
        assert!(
            text.contains(want) && text.contains("give velocities of magnitude between"),
            "{text}"
        );
        assert_nothing_written(&dir, "out");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_field_that_overflows_stops_every_rank_and_names_its_node() {
    let dir = temp_dir("diverged");
    let (field, uv) = overflowing_files(&dir);
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("field.npy"), "the previous run's").unwrap();
    let (f, w, o) = (
        field.to_str().unwrap(),
        uv.to_str().unwrap(),
        out.to_str().unwrap(),
    );
    let base = [
        "file",
        "--engine",
        "host",
        "--field",
        f,
        "--velocity",
        w,
        "--steps",
        "3",
        "--output",
        o,
    ];
    // One rank, and three whose rows split where the first NaN is not on the lowest: the same node,
    // in the whole grid's coordinates. Checked after the last step, and before each picture.
    let runs: [(&[&str], &str); 4] = [
        (
            &[],
            "the field is NaN at node (x, y) = (0, 13) after step 3",
        ),
        (
            &["--gpus", "3"],
            "the field is NaN at node (x, y) = (0, 13) after step 3",
        ),
        (
            &["--gpus", "3", "--kernel", "plain"],
            "the field is NaN at node (x, y) = (0, 13) after step 3",
        ),
        (&["--png-every", "1"], "after step 1"),
    ];
    for (extra, want) in runs {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let (code, text) = run_in(&dir, &args, &[]);
        assert_eq!(code, Some(1), "{args:?}: {text}");
        assert!(
            text.contains("the run diverged") && text.contains(want),
            "{args:?}: expected `{want}` in:\n{text}"
        );
        assert!(text.contains("scale the field down"), "{text}");
        assert_eq!(
            std::fs::read_to_string(out.join("field.npy")).unwrap(),
            "the previous run's"
        );
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
        assert!(common::temporaries(&dir).is_empty());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigint_stops_at_the_next_picture_with_the_shells_status_and_leaves_nothing() {
    let dir = temp_dir("sigint");
    let (code, text) = common::signalled(
        &binary(),
        &[
            "swirl",
            "--engine",
            "host",
            "--size",
            "128",
            "--steps",
            "1000000",
            "--png-every",
            "5",
            "--output",
            "out",
        ],
        &dir,
        "engine:",
        Duration::from_millis(300),
        "INT",
    );
    assert_eq!(code, Some(130), "{text}");
    assert!(text.contains("stopped by SIGINT after step"), "{text}");
    // The pictures staged so far went with the run.
    assert_nothing_written(&dir, "out");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_stops_every_thread_rank_at_the_last_check() {
    let dir = temp_dir("sigterm");
    let (code, text) = common::signalled(
        &binary(),
        &[
            "swirl", "--engine", "host", "--size", "128", "--steps", "400", "--gpus", "2",
            "--output", "out",
        ],
        &dir,
        "split along y",
        Duration::from_millis(200),
        "TERM",
    );
    assert_eq!(code, Some(143), "{text}");
    assert!(text.contains("stopped by SIGTERM after step"), "{text}");
    assert_nothing_written(&dir, "out");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_memory_estimate_covers_the_measured_peak() {
    let dir = temp_dir("memory");
    // Split over threads, what glibc's per-thread arenas keep of the arrays freed varies from run to
    // run (the estimate allows for the most): the bound there is looser.
    let runs: [(&[&str], f64); 2] = [
        (&["translation", "--size", "1400", "--steps", "1"], 1.3),
        (
            &[
                "swirl",
                "--size",
                "1400x1000",
                "--steps",
                "2",
                "--gpus",
                "2",
                "--png-every",
                "1",
            ],
            1.5,
        ),
    ];
    for (args, slack) in runs {
        let args: Vec<&str> = args
            .iter()
            .chain(&["--engine", "host", "--output", "out"])
            .copied()
            .collect();
        let (code, text) = run_in(&dir, &args, &[("LATTICE_GPU_MEMORY_REPORT", "1")]);
        assert_eq!(code, Some(0), "{text}");
        let [est, gpu, got, _] = common::memory_report(&text);
        assert_eq!(gpu, 0);
        common::estimate_holds(est, got, slack, &format!("advection {args:?}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_grid_too_large_is_refused_before_it_is_made() {
    let dir = temp_dir("too-large");
    // Before: an abort in cases::translation (allocation failure).
    let t = std::time::Instant::now();
    let (code, text) = run_in(
        &dir,
        &[
            "translation",
            "--engine",
            "host",
            "--size",
            "100000",
            "--output",
            "out",
        ],
        &[],
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("a 100000 x 100000 advection run (translation) would take")
            && text.contains("use a smaller grid"),
        "{text}"
    );
    assert!(t.elapsed() < Duration::from_secs(2));
    assert_nothing_written(&dir, "out");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn more_gpus_than_row_pairs_are_refused_before_a_thread_starts() {
    let t = std::time::Instant::now();
    let (ok, text) = advection(&[
        "swirl", "--engine", "host", "--size", "64", "--gpus", "30000",
    ]);
    assert!(!ok);
    assert!(text.contains("give --gpus 32 or fewer"), "{text}");
    assert!(t.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_failed_commit_leaves_the_previous_outputs_whole() {
    let dir = temp_dir("all-or-nothing");
    let out = dir.join("out");
    std::fs::create_dir_all(out.join("field.png")).unwrap();
    std::fs::write(out.join("field.npy"), "the previous run's").unwrap();
    let (ok, text) = advection(&[
        "swirl",
        "--engine",
        "host",
        "--size",
        "32",
        "--steps",
        "4",
        "--png-every",
        "2",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(!ok, "{text}");
    assert!(text.contains("not a regular file"), "{text}");
    assert_eq!(
        std::fs::read_to_string(out.join("field.npy")).unwrap(),
        "the previous run's"
    );
    // Not even the pictures of the steps before came.
    assert!(!out.join("field-0000002.png").exists());
    assert!(common::temporaries(&dir).is_empty() && common::temporaries(&out).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn negative_velocities_run_and_negative_sizes_are_refused_by_name() {
    let dir = temp_dir("negative");
    // Before: clap's "unexpected argument '-0' found" for both.
    let (code, text) = run_in(
        &dir,
        &[
            "translation",
            "--engine",
            "host",
            "--size",
            "64",
            "--steps",
            "20",
            "--velocity",
            "-0.5x0.25",
            "--output",
            "out",
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{text}");
    // The hill moved left and up as the exact answer says.
    let rel = common::number_after(&text, "relative L2 ");
    assert!(rel < 0.05, "{text}");
    assert!(dir.join("out/field.npy").is_file());
    for (args, want) in [
        (&["translation", "--size", "-64"][..], "`-64` is not a size"),
        (&["swirl", "--size", "64x-8"][..], "`64x-8` is not a size"),
        (
            &["translation", "--velocity", "1x1e999"][..],
            "must be two finite numbers",
        ),
        (
            &["swirl", "--steps", "-5"][..],
            "`-5` is not a number of steps",
        ),
    ] {
        let (code, text) = run_in(&dir, args, &[]);
        assert_eq!(code, Some(2), "{args:?}: {text}");
        assert!(
            text.contains(want),
            "{args:?}: expected `{want}` in:\n{text}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn options_a_case_would_ignore_are_refused_with_the_fix() {
    let dir = temp_dir("ignored");
    let (field, uv) = overflowing_files(&dir);
    let (f, w) = (field.to_str().unwrap(), uv.to_str().unwrap());
    // Before: each ran, ignoring the option.
    let cases: [(&[&str], &str, i32); 7] = [
        (
            &["rotation", "--velocity", "1x1"],
            "rotation has a velocity of its own",
            1,
        ),
        (
            &["swirl", "--velocity", "-1x1"],
            "swirl has a velocity of its own",
            1,
        ),
        (
            &["file", "--field", f, "--velocity", w, "--size", "64"],
            "leave --size out",
            1,
        ),
        (
            &["translation", "--revolutions", "2"],
            "--revolutions counts the turns of the rotation case",
            1,
        ),
        (
            &["swirl", "--png-every", "0"],
            "0 steps between pictures would write none",
            2,
        ),
        (
            &["swirl", "--engine", "host", "--unroll", "4"],
            "--engine host runs on the CPU",
            1,
        ),
        (
            &["rotation", "--revolutions", "2", "--steps", "10"],
            "cannot be used with",
            2,
        ),
    ];
    for (args, want, status) in cases {
        let args: Vec<&str> = args.iter().chain(&["--output", "out"]).copied().collect();
        let (code, text) = run_in(&dir, &args, &[]);
        assert_eq!(code, Some(status), "{args:?}: {text}");
        assert!(
            text.contains(want),
            "{args:?}: expected `{want}` in:\n{text}"
        );
        assert_nothing_written(&dir, "out");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn each_case_lists_only_the_options_it_takes() {
    let help = |case: &str| advection(&[case, "--help"]).1;
    let options = |text: &str, name: &str| text.contains(&format!("--{name} <"));
    for (case, takes, not) in [
        (
            "translation",
            &["size", "velocity"][..],
            &["revolutions"][..],
        ),
        ("rotation", &["size", "revolutions"], &["velocity"]),
        ("swirl", &["size"], &["velocity", "revolutions"]),
        (
            "file",
            &["field", "velocity", "h"],
            &["size", "revolutions"],
        ),
    ] {
        let text = help(case);
        for name in takes {
            assert!(
                options(&text, name),
                "{case} --help lacks --{name}:\n{text}"
            );
        }
        for name in not {
            assert!(
                !options(&text, name),
                "{case} --help lists --{name}:\n{text}"
            );
        }
    }
}
