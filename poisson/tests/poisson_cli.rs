//! The `poisson` binary on the CPU: the manufactured problem converges with its error printed and files
//! written; bad input (a non-positive coefficient, sizes that do not coarsen, a right-hand side that
//! Neumann walls cannot balance, a mis-shaped file, a solve that cannot converge) ends in a clear message
//! and exit code 1, never a panic, and writes no output. `poisson bench` says it needs a GPU where there
//! is none, and writes its tables where there is one.

use std::path::PathBuf;

use lattice_gpu_formats::npy::write_npy;

use lattice_gpu_testkit as common;

fn poisson(args: &[&str]) -> (bool, String) {
    common::run_cli(
        "LATTICE_GPU_POISSON_BIN",
        env!("CARGO_BIN_EXE_poisson"),
        args,
    )
}

fn temp_dir(name: &str) -> PathBuf {
    common::temp_dir(&format!("poisson-cli-{name}"))
}

#[test]
fn manufactured_problem_converges_and_writes_files() {
    let dir = temp_dir("ok");
    let out = dir.join("out");
    let (ok, text) = poisson(&[
        "--engine",
        "host",
        "--size",
        "32x32x16",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{text}");
    let err = common::number_after(&text, "relative L2 ");
    assert!(err < 5e-3, "{text}");
    assert!(text.contains("level 1: 16x16x8 cells"), "{text}");
    // By default every technique that applies is on; the Jacobi smoother runs without the red-black
    // ones, and each can be turned off.
    assert!(
        text.contains("RedBlack, finest level by colour, fused coarse levels, graph replay"),
        "{text}"
    );
    let run = |extra: &[&str]| {
        let mut args = vec!["--engine", "host", "--size", "16x16x8"];
        args.extend(extra);
        args.extend(["--no-level-times", "--output", out.to_str().unwrap()]);
        let (ok, text) = poisson(&args);
        assert!(ok, "{extra:?}: {text}");
        text
    };
    // More smoothing makes a stronger preconditioner: no more iterations, and never none.
    let smoothed = run(&["--smooth", "4"]);
    assert!(smoothed.contains("4 sweeps each way"), "{smoothed}");
    let text = run(&["--smoother", "jacobi"]);
    assert!(text.contains("Jacobi)"), "{text}");
    let text = run(&["--colours", "off", "--fused-cells", "0", "--graph", "off"]);
    assert!(text.contains("RedBlack)"), "{text}");
    // CG's scalars on the engine: the same iterations as with the host's.
    let iterations = |text: &str| common::number_after(text, "converged: ");
    let text = run(&["--cg", "async", "--check-every", "3"]);
    assert!(text.contains("CG scalars on the engine"), "{text}");
    let default = run(&[]);
    assert_eq!(iterations(&text), iterations(&default), "{text}");
    assert!(default.contains("2 sweeps each way"), "{default}");
    assert!(iterations(&smoothed) <= iterations(&default), "{smoothed}");
    // Set-up and solve are timed apart.
    assert!(common::number_after(&text, "set-up: ") >= 0.0, "{text}");
    assert!(
        common::number_after(&text, "CG iterations in ") > 0.0,
        "{text}"
    );
    for f in ["pressure.npy", "pressure_midz.png", "residuals.csv"] {
        assert!(out.join(f).is_file(), "{f} missing:\n{text}");
    }
    let (ok, text) = poisson(&[
        "--engine",
        "host",
        "--size",
        "16",
        "--no-level-times",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(ok && !text.contains("level 0:"), "{text}");
    // The coarse levels fused into one launch: the same iterations, reported as one level.
    let fused = |cells: &str| {
        let (ok, text) = poisson(&[
            "--engine",
            "host",
            "--size",
            "32x32x16",
            "--fused-cells",
            cells,
            "--output",
            out.to_str().unwrap(),
        ]);
        assert!(ok, "{text}");
        (common::number_after(&text, "converged: "), text)
    };
    let ((plain, _), (joined, text)) = (fused("0"), fused("4096"));
    assert_eq!(plain, joined, "{text}");
    assert!(
        text.contains("levels 1 to 3 fused into one launch"),
        "{text}"
    );
    assert!(
        text.contains("level 2: 8x8x4 cells, in level 1's launch"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_needs_a_gpu_or_writes_its_tables() {
    let dir = temp_dir("bench");
    let csv = dir.join("b.csv");
    let Some(gpu) = common::gpu("bench_needs_a_gpu_or_writes_its_tables") else {
        let (ok, text) = poisson(&["bench"]);
        assert!(
            !ok && text.contains("`poisson bench` measures the GPU") && !text.contains("--engine"),
            "{text}"
        );
        return;
    };
    drop(gpu);
    let (ok, text) = poisson(&[
        "bench",
        "--sizes",
        "32",
        "--repeats",
        "1",
        "--sweeps",
        "2",
        "--smooth",
        "1,3",
        "--csv",
        csv.to_str().unwrap(),
    ]);
    assert!(ok, "{text}");
    assert!(
        text.contains("mixed, SoA, fixed") && text.contains("of floor"),
        "{text}"
    );
    for f in ["b.csv", "b-levels.csv", "b-smoother.csv"] {
        assert!(dir.join(f).is_file(), "{f} missing:\n{text}");
    }
    // Every configuration with each smoothing count (the CSV's 9th column).
    let solves = std::fs::read_to_string(&csv).unwrap();
    let smooth: Vec<&str> = solves
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(8).unwrap())
        .collect();
    assert!(smooth.contains(&"1") && smooth.contains(&"3"), "{solves}");
    assert_eq!(smooth.len() % 2, 0, "{solves}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_is_refused_with_the_fix() {
    let dir = temp_dir("bad");
    let out = dir.join("out");
    let o = out.to_str().unwrap();
    let (c, f, g) = (dir.join("c.npy"), dir.join("f.npy"), dir.join("g.npy"));
    let mut coeff = vec![1.0f64; 8 * 8 * 8];
    coeff[3] = 0.0;
    write_npy(&c, &[8, 8, 8], &coeff).unwrap();
    write_npy(&f, &[8, 8, 8], &vec![1.0f64; 512]).unwrap();
    write_npy(&g, &[8, 8, 4], &vec![1.0f64; 256]).unwrap();
    let ones = dir.join("ones.npy");
    write_npy(&ones, &[8, 8, 8], &vec![1.0f64; 512]).unwrap();
    let (c, f, g, ones) = (
        c.to_str().unwrap(),
        f.to_str().unwrap(),
        g.to_str().unwrap(),
        ones.to_str().unwrap(),
    );
    let cases: [(&[&str], &str); 10] = [
        (
            &[
                "--engine", "host", "--size", "8", "--smooth", "0", "--output", o,
            ],
            "use --smooth 1 or more",
        ),
        (
            &["bench", "--configs", "mixed,nope"],
            "no configuration `nope`",
        ),
        (
            &[
                "--engine",
                "host",
                "--size",
                "8",
                "--colours",
                "--layout",
                "aos",
                "--output",
                o,
            ],
            "needs the red-black smoother, the SoA layout",
        ),
        (
            &[
                "--engine", "host", "--size", "8", "--coeffs", c, "--rhs", f, "--output", o,
            ],
            "positive and finite",
        ),
        (
            &[
                "--engine", "host", "--size", "12", "--levels", "4", "--output", o,
            ],
            "halves only to 3 levels",
        ),
        (
            &[
                "--engine", "host", "--size", "8", "--coeffs", ones, "--rhs", f, "--walls",
                "neumann", "--output", o,
            ],
            "sum to zero",
        ),
        (
            &[
                "--engine", "host", "--size", "8", "--coeffs", ones, "--rhs", g, "--output", o,
            ],
            "does not match --size",
        ),
        (
            &[
                "--engine", "host", "--size", "8", "--walls", "neumann", "--output", o,
            ],
            "required arguments were not provided",
        ),
        (
            &[
                "--engine", "host", "--size", "8", "--coeffs", ones, "--rhs", f, "--depth", "0.5",
                "--output", o,
            ],
            "'--coeffs <COEFFS>' cannot be used with '--depth <DEPTH>'",
        ),
        (
            &[
                "--engine",
                "host",
                "--size",
                "16",
                "--tol",
                "1e-14",
                "--max-iter",
                "3",
                "--output",
                o,
            ],
            "residual history",
        ),
    ];
    for (args, want) in cases {
        let (ok, text) = poisson(args);
        assert!(!ok, "poisson {args:?} should fail:\n{text}");
        assert!(
            text.contains(want),
            "poisson {args:?}: expected `{want}` in:\n{text}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(&out)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "failed runs left files: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `poisson` with `args` and fails the test unless it fails with `needle` in its output; the
/// output.
fn fails_with(args: &[&str], needle: &str) -> String {
    let (ok, text) = poisson(args);
    assert!(!ok, "poisson {args:?} succeeded:\n{text}");
    assert!(
        text.contains(needle),
        "poisson {args:?}: expected `{needle}` in:\n{text}"
    );
    text
}

/// The files and directories in `dir` (names, sorted); none where it does not exist.
fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn grids_beyond_memory_or_64_bits_are_refused_before_allocating() {
    // `--size 2000` aborted in the allocator while making the manufactured problem, and a 2^20 cube
    // panicked with "capacity overflow": now both end in a message at once, before anything is made.
    let t = std::time::Instant::now();
    let text = fails_with(
        &["--engine", "host", "--size", "20000x20000x2000"],
        "the 20000x20000x2000 Poisson solve (5 multigrid levels in f32) would take",
    );
    assert!(text.contains("GiB of memory but only"), "{text}");
    fails_with(
        &["--engine", "host", "--size", "1048576"],
        "1048576 x 1048576 x 1048576 values of 8 bytes do not fit in 64 bits; use a smaller grid",
    );
    assert!(t.elapsed().as_secs_f64() < 2.0, "{:?}", t.elapsed());
}

#[test]
fn the_memory_estimate_covers_the_measured_peak() {
    // About 120 and 150 MB of arrays: they dominate the runtime's own 10 MB.
    for extra in [&[][..], &["--precision", "f64", "--layout", "aos"]] {
        let dir = temp_dir(&format!("memory-{}", extra.len()));
        let bin = common::binary("LATTICE_GPU_POISSON_BIN", env!("CARGO_BIN_EXE_poisson"));
        let base = [
            "--engine",
            "host",
            "--size",
            "96x96x64",
            "--tol",
            "0.9",
            "--no-level-times",
            "--output",
            "out",
        ];
        let [est, gpu, got, _] = common::measured(&bin, &[&base[..], extra].concat(), &dir);
        assert_eq!(gpu, 0, "{extra:?}");
        common::estimate_holds(est, got, 1.3, &format!("poisson {extra:?} host"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_solve_that_overflows_stops_with_its_iteration_and_cell_and_writes_nothing() {
    let dir = temp_dir("diverged");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("pressure.npy"), "the previous run's").unwrap();
    let file = |name: &str, value: f64| {
        let path = dir.join(name);
        write_npy(&path, &[8, 8, 8], &vec![value; 512]).unwrap();
        path.to_str().unwrap().to_string()
    };
    // p ~ f / c = 1e310: beyond f64, the V-cycle's first smoothing sweep overflows.
    let (c, f, ones, huge) = (
        file("c.npy", 1e-300),
        file("f.npy", 1e10),
        file("ones.npy", 1.0),
        file("huge.npy", 1e39),
    );
    let o = out.to_str().unwrap();
    let base = ["--engine", "host", "--size", "8", "--output", o];
    for cg in ["sync", "async"] {
        let text = fails_with(
            &[
                &base[..],
                &[
                    "--coeffs",
                    &c,
                    "--rhs",
                    &f,
                    "--precision",
                    "f64",
                    "--cg",
                    cg,
                ],
            ]
            .concat(),
            "the run diverged: the preconditioned residual z = M^-1 r is NaN at cell (x, y, z) = \
             (0, 0, 0) in CG iteration 1",
        );
        assert!(
            text.contains("scale the right-hand side and the coefficients"),
            "{text}"
        );
        // Before the fix CG's own test read the NaN as an operator that is not positive definite.
        assert!(!text.contains("not SPD"), "{text}");
    }
    // Values that the f32 multigrid cannot hold are refused before the solve, with the fix.
    fails_with(
        &[&base[..], &["--coeffs", &c, "--rhs", &f]].concat(),
        "is 6e-300 at cell (0, 0, 0), outside the range of f32 (1.2e-38 to 3.4e38) that the \
         multigrid works in: use --precision f64",
    );
    fails_with(
        &[&base[..], &["--coeffs", &ones, "--rhs", &huge]].concat(),
        "the right-hand side is 1e39 at cell (0, 0, 0), beyond the range of f32",
    );
    assert_eq!(entries(&out), ["pressure.npy"]);
    assert_eq!(
        std::fs::read(out.join("pressure.npy")).unwrap(),
        b"the previous run's"
    );
    assert!(common::temporaries(&dir).is_empty(), "{:?}", entries(&dir));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_signal_stops_the_solve_between_iterations_and_writes_nothing() {
    let dir = temp_dir("signal");
    let bin = common::binary("LATTICE_GPU_POISSON_BIN", env!("CARGO_BIN_EXE_poisson"));
    // A tolerance below reach keeps CG iterating for seconds (until its residual stops falling:
    // 266 iterations at 96^3, 3.8 s on 2 cores; 48^3 broke down after 104 in 0.3 s, before the
    // signal).
    let args = [
        "--engine",
        "host",
        "--size",
        "96",
        "--tol",
        "1e-300",
        "--max-iter",
        "100000",
        "--output",
        "out",
    ];
    for (signal, code) in [("INT", 130), ("TERM", 143)] {
        let (got, text) = common::signalled(
            &bin,
            &args,
            &dir,
            "set-up:",
            std::time::Duration::from_millis(300),
            signal,
        );
        assert_eq!(got, Some(code), "{text}");
        let step: u64 = text
            .split(&format!("stopped by SIG{signal} after step "))
            .nth(1)
            .and_then(|s| s.split(';').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no step in:\n{text}"));
        // The solve was under way (the signal came after the set-up): it stopped between two of its
        // iterations, its steps.
        assert!(step >= 1, "{text}");
        assert!(
            text.contains("the run's results were not written"),
            "{text}"
        );
        assert!(entries(&dir).is_empty(), "{:?}:\n{text}", entries(&dir));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_commit_leaves_the_previous_outputs_whole() {
    let dir = temp_dir("all-or-nothing");
    let out = dir.join("out");
    std::fs::create_dir_all(out.join("pressure_midz.png")).unwrap();
    std::fs::write(out.join("pressure.npy"), "the previous run's").unwrap();
    let o = out.to_str().unwrap();
    fails_with(
        &["--engine", "host", "--size", "8", "--output", o],
        "not a regular file",
    );
    assert_eq!(entries(&out), ["pressure.npy", "pressure_midz.png"]);
    assert_eq!(
        std::fs::read(out.join("pressure.npy")).unwrap(),
        b"the previous run's"
    );
    assert!(common::temporaries(&dir).is_empty(), "{:?}", entries(&dir));
    // Once the squatter is gone, all three files appear together.
    std::fs::remove_dir(out.join("pressure_midz.png")).unwrap();
    let (ok, text) = poisson(&["--engine", "host", "--size", "8", "--output", o]);
    assert!(ok, "{text}");
    assert!(
        text.contains("wrote pressure.npy, pressure_midz.png, residuals.csv in"),
        "{text}"
    );
    assert_eq!(
        entries(&out),
        ["pressure.npy", "pressure_midz.png", "residuals.csv"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn messages_name_the_option_to_change() {
    let dir = temp_dir("messages");
    let out = dir.join("out");
    let base = [
        "--engine",
        "host",
        "--size",
        "8",
        "--output",
        out.to_str().unwrap(),
    ];
    // `--coarse-sweeps 0` advised `--smooth`.
    let text = fails_with(
        &[&base[..], &["--coarse-sweeps", "0"]].concat(),
        "use --coarse-sweeps 1 or more",
    );
    assert!(!text.contains("--smooth"), "{text}");
    fails_with(
        &[&base[..], &["--smooth", "0"]].concat(),
        "use --smooth 1 or more",
    );
    // Options that would be ignored are refused.
    fails_with(
        &[&base[..], &["--check-every", "3"]].concat(),
        "--check-every 3 applies to --cg async only",
    );
    fails_with(
        &[&base[..], &["--cg", "async", "--check-every", "0"]].concat(),
        "give --check-every 1 or more",
    );
    fails_with(
        &[&base[..], &["--vertical", "-2"]].concat(),
        "give a finite value above -1",
    );
    fails_with(&["--engine", "host", "--size", "-8"], "`-8` is not a size");
    let (ok, help) = poisson(&["--help"]);
    assert!(ok, "{help}");
    // The default shows the syntax --spacing takes; `--graph auto` says what it does.
    assert!(
        help.contains("[default: 1,1,1]") && !help.contains("[default: 1 1 1]"),
        "{help}"
    );
    assert!(
        help.contains("`auto` alike record wherever it applies"),
        "{help}"
    );
    assert!(help.contains("host (the CPU)"), "{help}");
    fails_with(
        &[&base[..], &["--march", "4"]].concat(),
        "--block and --march with --engine host",
    );
    // Refused before anything was made.
    assert!(entries(&dir).is_empty(), "{:?}", entries(&dir));
    let _ = std::fs::remove_dir_all(&dir);
}
