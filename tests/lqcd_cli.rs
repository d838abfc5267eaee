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
