//! The `lqcd` binary on the CPU: a small solve and bad input (odd dims, kappa out of range, a corrupt
//! gauge file, no convergence) ending in a clear message and exit code 1, never a panic.

mod common;

fn lqcd(args: &[&str]) -> (bool, String) {
    common::run_cli("LATTICE_GPU_LQCD_BIN", env!("CARGO_BIN_EXE_lqcd"), args)
}

#[test]
fn cpu_solve_converges_with_true_residual() {
    let (ok, text) = lqcd(&[
        "solve", "--engine", "host", "--dims", "4x4x4x8", "--tol", "1e-10",
    ]);
    assert!(ok, "{text}");
    let res = common::number_after(&text, "|b - D x|/|b| = ");
    assert!(res < 1e-9, "{text}");
}

#[test]
fn bad_input_is_refused_with_the_fix() {
    let cases: [(&[&str], &str); 9] = [
        (
            &["solve", "--engine", "host", "--grid", "1x2"],
            "must be YxZxT",
        ),
        (
            &["solve", "--engine", "host", "--grid", "1x1x2"],
            "add --mpi (under mpirun) or --gpus N",
        ),
        (
            &["solve", "--engine", "host", "--cut", "x"],
            "give axes y, z and t",
        ),
        (
            &["solve", "--engine", "host", "--gpus", "1", "--cut", "z"],
            "--cut is for the GPU split",
        ),
        (&["solve", "--engine", "host", "--dims", "5x4x4x4"], "odd"),
        (
            &["solve", "--engine", "host", "--kappa", "0.3"],
            "0 < kappa < 0.25",
        ),
        (
            &[
                "solve",
                "--engine",
                "host",
                "--dims",
                "4",
                "--max-iter",
                "2",
            ],
            "did not converge",
        ),
        (&["solve", "--engine", "host", "--tol", "2"], "--tol"),
        (&["solve", "--precision", "f32", "--tol", "1e-9"], "f32"),
    ];
    for (args, want) in cases {
        let (ok, text) = lqcd(args);
        assert!(!ok, "lqcd {args:?} should fail:\n{text}");
        assert!(
            text.contains(want),
            "lqcd {args:?}: expected `{want}` in:\n{text}"
        );
    }
}

#[test]
fn corrupt_and_missing_gauge_files_are_refused() {
    let dir = std::env::temp_dir().join(format!("lqcd-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("cfg.lime");
    let (ok, text) = lqcd(&[
        "plaquette",
        "--dims",
        "4",
        "--write-gauge",
        good.to_str().unwrap(),
    ]);
    assert!(ok, "{text}");
    let (ok, text) = lqcd(&["plaquette", "--gauge", good.to_str().unwrap()]);
    assert!(ok && text.contains("checksum suma"), "{text}");
    let mut bytes = std::fs::read(&good).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0x40;
    let bad = dir.join("flipped.lime");
    std::fs::write(&bad, &bytes).unwrap();
    let (ok, text) = lqcd(&["plaquette", "--gauge", bad.to_str().unwrap()]);
    assert!(!ok && text.contains("checksum"), "{text}");
    let (ok, text) = lqcd(&[
        "plaquette",
        "--gauge",
        dir.join("missing.lime").to_str().unwrap(),
    ]);
    assert!(!ok && text.contains("missing.lime"), "{text}");
    // The file sets the lattice: a --dims beside it would be overridden, so it is refused.
    let (ok, text) = lqcd(&[
        "plaquette",
        "--gauge",
        good.to_str().unwrap(),
        "--dims",
        "4x4x4x8",
    ]);
    assert!(!ok && text.contains("cannot be used with"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn bin() -> std::path::PathBuf {
    common::binary("LATTICE_GPU_LQCD_BIN", env!("CARGO_BIN_EXE_lqcd"))
}

/// Runs lqcd with `args` in `dir` (the environment's `LATTICE_GPU_MEMORY_REPORT` set where `report`),
/// killing it after `limit`: its exit code (`None` if killed) and its stdout and stderr.
fn lqcd_in(
    dir: &std::path::Path,
    args: &[&str],
    report: bool,
    limit: std::time::Duration,
) -> (Option<i32>, String) {
    use std::io::Read;
    let mut cmd = std::process::Command::new(bin());
    cmd.args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if report {
        cmd.env("LATTICE_GPU_MEMORY_REPORT", "1");
    }
    let mut child = cmd.spawn().expect("lqcd runs");
    let start = std::time::Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut text = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    assert!(
        !text.contains("panicked"),
        "lqcd {args:?} panicked:\n{text}"
    );
    (code, text)
}

/// Writes an ILDG file of unit links on `dims` without a checksum record (as some writers make
/// them), entry (1, 1) of link `mu` at lexicographic site `n` set to `value` where `bad` says.
fn unit_gauge_file(path: &std::path::Path, dims: [usize; 4], bad: Option<(usize, usize, f64)>) {
    use lattice_gpu::lqcd::ildg::{ildg_format_xml, write_lime_file, LimeRecord, Precision};
    let volume: usize = dims.iter().product();
    let mut data = Vec::with_capacity(volume * 36 * 16);
    for n in 0..volume {
        for mu in 0..4 {
            for a in 0..3 {
                for b in 0..3 {
                    let mut re = if a == b { 1.0f64 } else { 0.0 };
                    if let Some((site, dir, value)) = bad {
                        if (n, mu, a, b) == (site, dir, 1, 1) {
                            re = value;
                        }
                    }
                    data.extend_from_slice(&re.to_be_bytes());
                    data.extend_from_slice(&0.0f64.to_be_bytes());
                }
            }
        }
    }
    let records = [
        LimeRecord {
            kind: "ildg-format".into(),
            data: ildg_format_xml(dims, Precision::F64).into_bytes(),
        },
        LimeRecord {
            kind: "ildg-binary-data".into(),
            data,
        },
    ];
    write_lime_file(path, &records).unwrap();
}

const SECOND: std::time::Duration = std::time::Duration::from_secs(1);

#[test]
fn a_gauge_file_with_a_nan_link_is_refused_naming_the_link() {
    let dir = common::temp_dir("lqcd-nan-link");
    // Site (x, y, z, t) = (1, 1, 0, 2) of 4^4 is n = 1 + 4 (1 + 4 (0 + 4 * 2)) = 133.
    unit_gauge_file(&dir.join("nan.lime"), [4; 4], Some((133, 2, f64::NAN)));
    unit_gauge_file(&dir.join("inf.lime"), [4; 4], Some((133, 2, f64::INFINITY)));
    unit_gauge_file(&dir.join("huge.lime"), [4; 4], Some((133, 2, 1e200)));
    let runs: [&[&str]; 5] = [
        &[
            "plaquette",
            "--gauge",
            "nan.lime",
            "--write-gauge",
            "out.lime",
        ],
        &["plaquette", "--gauge", "nan.lime", "--reunitarize"],
        &["plaquette", "--gauge", "inf.lime"],
        &["solve", "--engine", "host", "--gauge", "nan.lime"],
        &[
            "propagator",
            "--engine",
            "host",
            "--gauge",
            "nan.lime",
            "--output",
            "out",
        ],
    ];
    for args in runs {
        let (code, text) = lqcd_in(&dir, args, false, 30 * SECOND);
        assert_eq!(code, Some(1), "lqcd {args:?}:\n{text}");
        assert!(
            text.contains("site (x, y, z, t) = (1, 1, 0, 2), direction mu = 2 (z)")
                && text.contains("not a finite number"),
            "lqcd {args:?}:\n{text}"
        );
        assert!(!text.contains("plaquette "), "lqcd {args:?}:\n{text}");
    }
    // A link too large to project is no SU(3) matrix after --reunitarize either.
    let (code, text) = lqcd_in(
        &dir,
        &["plaquette", "--gauge", "huge.lime", "--reunitarize"],
        false,
        30 * SECOND,
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("(1, 1, 0, 2), direction mu = 2") && text.contains("cannot be projected"),
        "{text}"
    );
    assert!(!dir.join("out.lime").exists() && !dir.join("out").exists());
    assert!(common::temporaries(&dir).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigint_stops_the_propagator_between_sources_and_writes_nothing() {
    let dir = common::temp_dir("lqcd-sigint-propagator");
    let (code, text) = common::signalled(
        &bin(),
        &[
            "propagator",
            "--engine",
            "host",
            "--dims",
            "4x4x4x8",
            "--output",
            "out",
            "--write-gauge",
            "cfg.lime",
        ],
        &dir,
        "source s=0 c=0:",
        std::time::Duration::ZERO,
        "INT",
    );
    assert_eq!(code, Some(130), "{text}");
    assert!(text.contains("stopped by SIGINT after step"), "{text}");
    assert!(!text.contains("12 solves"), "{text}");
    assert!(!dir.join("out").exists(), "{text}");
    assert!(!dir.join("cfg.lime").exists(), "{text}");
    assert!(common::temporaries(&dir).is_empty(), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigint_stops_a_solve_at_its_next_check() {
    let dir = common::temp_dir("lqcd-sigint-solve");
    let solve = [
        "solve",
        "--engine",
        "host",
        "--dims",
        "4x4x4x8",
        "--tol",
        "1e-12",
        "--check-every",
        "1",
        "--write-gauge",
        "cfg.lime",
    ];
    // One rank looks for a signal after every iteration.
    let (code, text) = common::signalled(
        &bin(),
        &solve,
        &dir,
        "solve iteration     1",
        std::time::Duration::ZERO,
        "INT",
    );
    assert_eq!(code, Some(130), "{text}");
    assert!(text.contains("stopped by SIGINT after step"), "{text}");
    assert!(!text.contains("converged"), "{text}");
    // Split ranks agree on it, at the latest when they check the solution together.
    let split = [&solve[..], &["--gpus", "2"]].concat();
    let (code, text) = common::signalled(
        &bin(),
        &split,
        &dir,
        "plaquette",
        std::time::Duration::ZERO,
        "INT",
    );
    assert_eq!(code, Some(130), "{text}");
    assert!(text.contains("stopped by SIGINT after step"), "{text}");
    assert!(!text.contains("converged"), "{text}");
    assert!(!dir.join("cfg.lime").exists());
    assert!(common::temporaries(&dir).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_memory_estimate_covers_the_measured_peak() {
    let dir = common::temp_dir("lqcd-memory");
    // The gauge field alone: a 16^4 file of 36 MiB of links, loaded and measured.
    unit_gauge_file(&dir.join("unit.lime"), [16; 4], None);
    let (code, text) = lqcd_in(
        &dir,
        &["plaquette", "--gauge", "unit.lime"],
        true,
        120 * SECOND,
    );
    assert_eq!(code, Some(0), "{text}");
    let [est, _, got, _] = common::memory_report(&text);
    common::estimate_holds(est, got, 1.3, "lqcd plaquette, 16^4 file");
    // The CPU solves: too slow here at a size where their fields outweigh the runtime, so each is
    // measured at two sizes, and the estimate must cover each peak and hold the growth between them
    // (the runtime's own memory drops out of it).
    for extra in [&[][..], &["--gpus", "2"]] {
        let mut runs = Vec::new();
        for dims in ["4x4x4x8", "8x8x8x8"] {
            let args = [
                &["solve", "--engine", "host", "--dims", dims, "--tol", "0.1"][..],
                extra,
            ]
            .concat();
            let (code, text) = lqcd_in(&dir, &args, true, 120 * SECOND);
            assert_eq!(code, Some(0), "{args:?}:\n{text}");
            let [est, _, got, _] = common::memory_report(&text);
            assert!(est >= got, "{args:?}: estimated {est} < measured {got}");
            runs.push((est, got));
        }
        common::estimate_holds(
            runs[1].0 - runs[0].0,
            runs[1].1 - runs[0].1,
            1.3,
            &format!("lqcd solve {extra:?}, from 4x4x4x8 to 8^4"),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn too_many_gpus_are_refused_before_a_thread_starts() {
    let t = std::time::Instant::now();
    for (args, want) in [
        (
            &["solve", "--engine", "host", "--gpus", "30000"][..],
            "give --gpus 1024 or fewer",
        ),
        (
            &["solve", "--engine", "host", "--gpus", "65", "--dims", "4"],
            "the lattice's 4x4x4 sites along y, z and t split over at most 64 ranks",
        ),
    ] {
        let (ok, text) = lqcd(args);
        assert!(!ok && text.contains(want), "lqcd {args:?}:\n{text}");
    }
    assert!(t.elapsed() < 2 * SECOND, "{:?}", t.elapsed());
}

#[test]
fn a_failed_commit_leaves_the_previous_outputs_whole() {
    let dir = common::temp_dir("lqcd-all-or-nothing");
    let out = dir.join("out");
    std::fs::create_dir_all(out.join("pion.csv")).unwrap();
    std::fs::write(out.join("notes.txt"), "the previous run's").unwrap();
    let (code, text) = lqcd_in(
        &dir,
        &[
            "propagator",
            "--engine",
            "host",
            "--dims",
            "2x2x2x4",
            "--output",
            "out",
            "--write-gauge",
            "cfg.lime",
        ],
        false,
        60 * SECOND,
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("not a regular file"), "{text}");
    assert!(out.join("pion.csv").is_dir());
    assert_eq!(
        std::fs::read_to_string(out.join("notes.txt")).unwrap(),
        "the previous run's"
    );
    assert!(!dir.join("cfg.lime").exists(), "{text}");
    assert!(common::temporaries(&dir).is_empty());
    // Without the squatter, the run writes its file.
    std::fs::remove_dir(out.join("pion.csv")).unwrap();
    let (code, text) = lqcd_in(
        &dir,
        &[
            "propagator",
            "--engine",
            "host",
            "--dims",
            "2x2x2x4",
            "--output",
            "out",
        ],
        false,
        60 * SECOND,
    );
    assert_eq!(code, Some(0), "{text}");
    let csv = std::fs::read_to_string(out.join("pion.csv")).unwrap();
    assert!(
        csv.starts_with("t,C,m_eff\n") && csv.lines().count() == 5,
        "{csv}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn files_that_are_no_regular_files_are_named_as_such() {
    let dir = common::temp_dir("lqcd-not-regular");
    let fifo = dir.join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let fifo = fifo.to_str().unwrap();
    let d = dir.to_str().unwrap();
    for (path, what) in [
        ("/dev/zero", "is a device, not a regular file"),
        (d, "is a directory, not a regular file"),
        (fifo, "is a pipe (FIFO), not a regular file"),
    ] {
        for args in [
            &["plaquette", "--gauge", path][..],
            &["solve", "--engine", "host", "--gauge", path],
        ] {
            // A pipe must not be opened: that would wait for a writer for ever.
            let (code, text) = lqcd_in(&dir, args, false, 10 * SECOND);
            assert_eq!(code, Some(1), "lqcd {args:?}:\n{text}");
            assert!(
                text.contains(what) && !text.contains("empty"),
                "lqcd {args:?}:\n{text}"
            );
        }
    }
    // --write-gauge onto a directory, or into one that does not exist, is refused before the run.
    for (target, want) in [
        (d, "not a regular file"),
        ("missing/cfg.lime", "does not exist"),
    ] {
        let (code, text) = lqcd_in(
            &dir,
            &[
                "solve",
                "--engine",
                "host",
                "--dims",
                "4",
                "--write-gauge",
                target,
            ],
            false,
            10 * SECOND,
        );
        assert_eq!(code, Some(1), "{text}");
        assert!(text.contains(want) && !text.contains("converged"), "{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn negative_numbers_are_named_not_taken_for_options() {
    for (args, want) in [
        (&["plaquette", "--seed", "-1"][..], "`-1` is not a seed"),
        (&["solve", "--source-seed", "-7"], "`-7` is not a seed"),
        (&["solve", "--max-iter", "-3"], "`-3` is not a count"),
        (&["solve", "--check-every", "-0"], "`-0` is not a count"),
        (&["solve", "--bench", "-5"], "`-5` is not a count"),
        (&["plaquette", "--dims", "-4"], "`-4` is not a size"),
        (&["solve", "--grid", "-1x2x2"], "`-1x2x2` is not a size"),
        (&["bench", "--iterations", "-1"], "`-1` is not a count"),
        (&["bench", "--solver", "-8"], "`-8` is not a size"),
    ] {
        let (code, text) = lqcd_in(&std::env::temp_dir(), args, false, 10 * SECOND);
        assert_eq!(code, Some(2), "lqcd {args:?}:\n{text}");
        assert!(
            text.contains(want) && !text.contains("unexpected argument"),
            "lqcd {args:?}:\n{text}"
        );
    }
}
