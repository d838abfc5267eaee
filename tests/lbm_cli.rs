//! The `lbm` binary on the CPU: a small run of each case leaves its files and its measurement; bad input
//! (tau at 1/2, a lid above Mach 0.3 or moving backwards, an unknown case, a grid too large) ends in a
//! clear message and exit code 1, never a panic, and leaves no output file behind. A diverging run stops
//! at a check naming the step and the cell, SIGINT and SIGTERM stop a run at a check with the shell's
//! status, and neither writes anything; a failed write leaves the previous run's files whole. The memory
//! estimate covers the measured peak, --gpus is bounded by the z layers, and messages name the option
//! that fixes them.

use std::path::{Path, PathBuf};

mod common;

fn lbm(args: &[&str]) -> (bool, String) {
    common::run_cli("LATTICE_GPU_LBM_BIN", env!("CARGO_BIN_EXE_lbm"), args)
}

fn temp_dir(name: &str) -> PathBuf {
    common::temp_dir(&format!("lbm-cli-{name}"))
}

#[test]
fn cases_run_and_write_their_files() {
    let dir = temp_dir("cases");
    let out = dir.to_str().unwrap();
    let (ok, text) = lbm(&[
        "taylor-green",
        "--engine",
        "host",
        "--size",
        "32x32x1",
        "--steps",
        "400",
        "--output",
        out,
    ]);
    assert!(ok, "{text}");
    let line = text
        .lines()
        .find(|l| l.contains("decay rate"))
        .unwrap_or_else(|| panic!("{text}"));
    let pct = line
        .rsplit('(')
        .next()
        .and_then(|s| s.split('%').next())
        .unwrap();
    assert!(pct.trim().parse::<f64>().unwrap().abs() < 2.0, "{text}");
    let (ok, text) = lbm(&[
        "poiseuille",
        "--engine",
        "host",
        "--width",
        "16",
        "--extent",
        "1x1",
        "--tau",
        "1.0",
        "--force",
        "1e-5",
        "--collision",
        "trt",
        "--magic",
        "0.1875",
        "--steady",
        "1e-7",
        "--output",
        out,
    ]);
    assert!(ok, "{text}");
    assert!(common::number_after(&text, "parabola:") < 1e-4, "{text}");
    let (ok, text) = lbm(&[
        "cavity", "--engine", "host", "--size", "18x18x1", "--re", "10", "--steps", "500",
        "--output", out,
    ]);
    assert!(ok, "{text}");
    for f in [
        "velocity.npy",
        "density.npy",
        "fields.vtk",
        "speed.png",
        "centreline_u.csv",
        "centreline_v.csv",
        "profile.csv",
        "energy.csv",
    ] {
        let len = std::fs::metadata(dir.join(f)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "{f} missing or empty:\n{text}");
    }
    let csv = std::fs::read_to_string(dir.join("centreline_u.csv")).unwrap();
    assert_eq!(
        csv.lines().count(),
        1 + 18,
        "header, two wall points and 16 cells"
    );
    let vtk = std::fs::read(dir.join("fields.vtk")).unwrap();
    assert!(vtk.starts_with(b"# vtk DataFile Version 3.0"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_is_refused_with_the_fix() {
    let dir = temp_dir("bad");
    let out = dir.to_str().unwrap();
    let cases: [(&[&str], &str); 9] = [
        (
            &[
                "taylor-green",
                "--engine",
                "host",
                "--tau",
                "0.5",
                "--output",
                out,
            ],
            "above 0.5",
        ),
        (
            &[
                "taylor-green",
                "--engine",
                "host",
                "--tau",
                "0.4",
                "--steps",
                "20",
                "--output",
                out,
            ],
            "above 0.5",
        ),
        (
            &[
                "cavity", "--engine", "host", "--lid", "0.3", "--output", out,
            ],
            "Mach 0.3",
        ),
        (
            &[
                "cavity", "--engine", "host", "--lid", "-1e-1", "--output", out,
            ],
            "lid speed -0.1 must be positive",
        ),
        (
            &[
                "cavity",
                "--engine",
                "host",
                "--max-steps",
                "0",
                "--output",
                out,
            ],
            "--max-steps and --check-every must be at least 1",
        ),
        (
            &[
                "cavity", "--engine", "host", "--size", "2x40x1", "--output", out,
            ],
            "at least 3x3x1",
        ),
        (
            &[
                "taylor-green",
                "--engine",
                "host",
                "--size",
                "100000x100000x1000",
                "--output",
                out,
            ],
            "memory",
        ),
        (&["vortex-street"], "unrecognized subcommand"),
        (
            &["taylor-green", "--engine", "host", "--cut", "--output", out],
            "--cut splits the steps of a decomposed run",
        ),
    ];
    for (args, want) in cases {
        let (ok, text) = lbm(args);
        assert!(!ok, "lbm {args:?} should fail:\n{text}");
        assert!(
            text.contains(want),
            "lbm {args:?}: expected `{want}` in:\n{text}"
        );
        // Refused before the run's header or a warning the refusal would contradict.
        assert!(
            !text.contains(" cells, ") && !text.contains("warning:"),
            "lbm {args:?} started before refusing:\n{text}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "failed runs left files: {left:?}");
    let _ = std::fs::remove_dir_all(Path::new(out));
}

/// The words of `line`: a command line without quoting.
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// Fails unless `lbm args` fails with every one of `want` in its output; the output.
fn refused(args: &[&str], want: &[&str]) -> String {
    let (ok, text) = lbm(args);
    assert!(!ok, "lbm {args:?} should fail:\n{text}");
    for w in want {
        assert!(text.contains(w), "lbm {args:?}: expected `{w}` in:\n{text}");
    }
    text
}

/// A directory `out` (in a fresh `dir`) holding a previous run's files: `(dir, out)`.
fn previous_run(name: &str) -> (PathBuf, PathBuf) {
    let dir = temp_dir(name);
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("velocity.npy"), "the previous run's").unwrap();
    std::fs::write(out.join("centreline_u.csv"), "the previous run's").unwrap();
    (dir, out)
}

/// Fails unless `out` holds the files [`previous_run`] left, untouched, and `extra`, and nothing
/// temporary is left beside or in it.
fn previous_run_kept(dir: &Path, out: &Path, extra: &[&str]) {
    let mut names: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut want: Vec<String> = ["centreline_u.csv", "velocity.npy"]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect();
    want.sort();
    assert_eq!(names, want);
    for f in ["velocity.npy", "centreline_u.csv"] {
        assert_eq!(
            std::fs::read_to_string(out.join(f)).unwrap(),
            "the previous run's"
        );
    }
    assert!(common::temporaries(dir).is_empty() && common::temporaries(out).is_empty());
}

#[test]
fn a_diverging_run_stops_at_a_check_names_step_and_cell_and_writes_nothing() {
    let (dir, out) = previous_run("diverged");
    let o = out.to_str().unwrap();
    // Re 10^6 on 16 fluid cells puts tau at 1/2 + 5e-6: NaN within a few hundred steps.
    let cavity = "cavity --engine host --re 1e6 --check-every 20";
    for extra in [
        "--size 18x18x1 --steps 2000",
        // Run to steady state: a NaN flow must not pass for a steady one.
        "--size 18x18x1",
        "--size 18x18x1 --steps 2000 --precision f64 --streaming ab",
        // Split over threads, the ranks stop together at the same check.
        "--size 18x18x2 --steps 2000 --gpus 2",
    ] {
        let mut args = words(cavity);
        args.extend(words(extra));
        args.extend(["--output", o]);
        let text = refused(
            &args,
            &[
                "the run diverged: the density is NaN at cell (x, y, z) = (",
                "wrote no results",
                "lower --re",
            ],
        );
        let step = common::number_after(&text, "after step");
        assert!(
            step > 0.0 && step % 20.0 == 0.0 && step < 2000.0,
            "{extra}: not at a check:\n{text}"
        );
        assert!(
            !text.contains("steady after") && !text.contains(".npy"),
            "{extra}: {text}"
        );
        previous_run_kept(&dir, &out, &[]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigint_and_sigterm_stop_the_run_at_a_check_and_leave_nothing() {
    let dir = temp_dir("signals");
    let bin = common::binary("LATTICE_GPU_LBM_BIN", env!("CARGO_BIN_EXE_lbm"));
    for (line, signal, code) in [
        (
            "cavity --engine host --size 34x34x4 --steps 100000000 --check-every 10",
            "INT",
            130,
        ),
        // A check at each of the 20 samples of the energy, 1000 steps apart.
        (
            "taylor-green --engine host --size 16x16x2 --steps 20000",
            "TERM",
            143,
        ),
    ] {
        let mut args = words(line);
        args.extend(["--output", "out"]);
        let (got, text) = common::signalled(
            &bin,
            &args,
            &dir,
            " cells, ",
            std::time::Duration::from_millis(300),
            signal,
        );
        assert_eq!(got, Some(code), "{line}:\n{text}");
        assert!(
            text.contains(&format!("stopped by SIG{signal} after step")),
            "{line}:\n{text}"
        );
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert!(left.is_empty(), "{line} left {left:?}:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_memory_estimate_covers_the_measured_peak() {
    let bin = common::binary("LATTICE_GPU_LBM_BIN", env!("CARGO_BIN_EXE_lbm"));
    // Two f64 lattices for a fixed number of steps; one in-place f32 lattice run to steady state,
    // which keeps the moments of the check before beside the new ones.
    for line in [
        "--precision f64 --streaming ab --size 100x100x30 --steps 1",
        "--precision f32 --streaming aa --size 100x100x60 --max-steps 2 --check-every 1",
    ] {
        let dir = temp_dir("memory");
        let out = std::process::Command::new(&bin)
            .args(words("cavity --engine host --output out"))
            .args(words(line))
            .current_dir(&dir)
            .env("LATTICE_GPU_MEMORY_REPORT", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{line}: {text}");
        let [est, _, got, _] = common::memory_report(&text);
        common::estimate_holds(est, got, 1.3, &format!("lbm cavity {line}"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn more_gpus_than_z_layers_are_refused_before_a_thread_starts() {
    let t = std::time::Instant::now();
    refused(
        &words("taylor-green --engine host --size 8x8x2 --gpus 30000"),
        &["--size 8x8x2", "give --gpus 2 or fewer"],
    );
    refused(
        &words("poiseuille --engine host --extent 4x3 --gpus 4"),
        &["--extent 4x3", "give --gpus 3 or fewer"],
    );
    assert!(t.elapsed().as_secs_f64() < 2.0);
}

#[test]
fn a_failed_write_leaves_the_previous_outputs_whole() {
    let (dir, out) = previous_run("all-or-nothing");
    // A directory where the picture goes: the commit fails, and must move nothing.
    std::fs::create_dir(out.join("speed.png")).unwrap();
    let mut args = words("cavity --engine host --size 10x10x1 --steps 20 --output");
    args.push(out.to_str().unwrap());
    refused(&args, &["speed.png", "not a regular file"]);
    previous_run_kept(&dir, &out, &["speed.png"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn messages_name_the_option_that_fixes_it() {
    // The channel's width is --width; poiseuille has no --size.
    let text = refused(
        &words("poiseuille --engine host --width 1000000"),
        &["--width", "give --width 65533 or less"],
    );
    assert!(!text.contains("--size"), "{text}");
    refused(
        &words("poiseuille --engine host --extent 100000x1"),
        &["100000x34x1", "lower --width or --extent"],
    );
    // A vortex at rest has no decay rate to measure: refused, never a NaN result.
    for u0 in ["0", "-0.01", "nan"] {
        let text = refused(
            &["taylor-green", "--engine", "host", &format!("--u0={u0}")],
            &["amplitude", "give --u0 0.02"],
        );
        assert!(!text.contains(" cells, "), "{text}");
    }
    // Nor on a grid that cannot hold the vortex (its energy is zero at every cell).
    refused(
        &words("taylor-green --engine host --size 2x8x1"),
        &["cannot resolve it", "at least 4 cells"],
    );
    refused(&words("bench --sizes 2"), &["--sizes 2", "4 to 65535"]);
    // lbm has no --gpu: the refusal says how to choose the GPU, and so does --help.
    refused(
        &words("cavity --engine host --gpu 1"),
        &["lbm has no --gpu", "CUDA_VISIBLE_DEVICES"],
    );
    let (ok, help) = lbm(&["cavity", "--help"]);
    assert!(ok && help.contains("CUDA_VISIBLE_DEVICES"), "{help}");
    // Options the run would ignore are refused.
    refused(
        &words("cavity --engine host --collision bgk --magic 0.1"),
        &["--collision bgk has none"],
    );
    refused(
        &words("cavity --engine host --steps 10 --steady 1e-3"),
        &["cannot be used with"],
    );
    refused(
        &words("poiseuille --engine host --steps 10 --max-steps 100"),
        &["cannot be used with"],
    );
    // The halo options of a split run change nothing on one rank: said, not refused, since scripts
    // give one command line to a run and to its split twin.
    let dir = temp_dir("unsplit");
    let mut args = words("cavity --engine host --size 10x10x1 --steps 20 --no-overlap --output");
    args.push(dir.to_str().unwrap());
    let (ok, text) = lbm(&args);
    assert!(
        ok && text.contains("notice: --no-overlap sets how a split run exchanges its halos"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
