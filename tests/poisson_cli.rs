//! The `poisson` binary on the CPU: the manufactured problem converges with its error printed and files
//! written; bad input (a non-positive coefficient, sizes that do not coarsen, a right-hand side that
//! Neumann walls cannot balance, a mis-shaped file, a solve that cannot converge) ends in a clear message
//! and exit code 1, never a panic, and writes no output. `poisson bench` says it needs a GPU where there
//! is none, and writes its tables where there is one.

use std::path::PathBuf;

use lattice_gpu::host::io::npy::write_npy;

mod common;

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
