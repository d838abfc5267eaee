//! The `advection` binary on the CPU: a small rotation prints its error norms and writes its files; bad
//! input (CFL above 1, NaN in a field file, mismatched shapes, a grid smaller than the footprint, an
//! unknown kernel) ends in a clear message and exit code 1, never a panic, and writes no output.

use std::path::PathBuf;

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
