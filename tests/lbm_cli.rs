//! The `lbm` binary on the CPU: a small run of each case leaves its files and its measurement; bad input
//! (tau at 1/2, a lid above Mach 0.3 or moving backwards, an unknown case, a grid too large) ends in a
//! clear message and exit code 1, never a panic, and leaves no output file behind.

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
