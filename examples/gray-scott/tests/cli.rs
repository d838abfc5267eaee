//! The `gray-scott` binary: bad input ends with a message naming the problem, never a panic, and leaves
//! no files: exit code 2 for what the command line's parser rejects (clap's convention for usage
//! errors), 1 for values it takes but the run refuses. A good run writes readable outputs. Runs on the
//! CPU engine.

use std::path::{Path, PathBuf};
use std::process::Command;

use lattice_gpu::formats::npy;

/// The binary under test: `$GRAY_SCOTT_BIN` where the test runs away from its build tree (the GPU
/// machine's scripts/gpu-check.sh), else the one cargo built.
fn binary() -> PathBuf {
    std::env::var_os("GRAY_SCOTT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_gray-scott")))
}

/// The binary's exit code and its output, stderr then stdout.
fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(binary()).args(args).output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("panicked"), "panic on {args:?}:\n{text}");
    (out.status.code(), text)
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gray-scott-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A usage error: the parser rejects `args`, naming `needle`, with exit code 2.
fn misused(args: &[&str], needle: &str) {
    let (code, text) = run(args);
    assert_eq!(code, Some(2), "{args:?} exited with {code:?}:\n{text}");
    assert!(
        text.contains(needle),
        "{args:?}: expected `{needle}` in:\n{text}"
    );
}

/// A run error: the run refuses `args`, naming `needle`, with exit code 1.
fn fails_with(args: &[&str], needle: &str) {
    let (code, text) = run(args);
    assert_eq!(code, Some(1), "{args:?} exited with {code:?}:\n{text}");
    assert!(
        text.contains(needle),
        "{args:?}: expected `{needle}` in:\n{text}"
    );
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn bad_input_is_named_and_exits_1_or_2_for_usage() {
    let dir = scratch("bad");
    let out = dir.join("out");
    let o = out.to_str().unwrap();
    let host = ["--engine", "host", "--output", o];
    let with =
        |extra: &[&'static str]| -> Vec<&str> { host.iter().chain(extra).copied().collect() };
    misused(&with(&["--size", "0x8x8"]), "is not a size");
    misused(
        &with(&["--size", "8x8x8x8"]),
        "must be N, NXxNY or NXxNYxNZ",
    );
    fails_with(
        &with(&["--size", "8", "--dt", "0.9"]),
        "--dt 0.9 is unstable",
    );
    fails_with(
        &with(&["--size", "8x8", "--dt", "1.3"]),
        "5-point Laplacian",
    );
    fails_with(&with(&["--size", "8", "--f", "-1"]), "--f -1 is not a rate");
    fails_with(
        &with(&["--size", "8", "--du", "-0.1"]),
        "--du -0.1 is not a rate",
    );
    fails_with(
        &with(&["--size", "8", "--dx", "0"]),
        "--dx 0 is not a grid spacing",
    );
    misused(&with(&["--size", "8", "--frames", "0"]), "--frames");
    misused(&with(&["--steps", "many"]), "invalid value 'many'");
    fails_with(
        &with(&["--bench", "--size", "8"]),
        "--bench measures the GPU",
    );
    fails_with(
        &["--bench", "--size", "8", "--frames", "2"],
        "leave out --frames",
    );
    misused(&["--engine", "gpu"], "invalid value 'gpu'");
    fails_with(
        &[
            "--engine", "host", "--size", "8", "--march", "4", "--output", o,
        ],
        "--engine host runs on the CPU",
    );
    assert!(!out.exists(), "a failed run made {}", out.display());
    // A directory under a file cannot be made, even by root.
    let file = dir.join("file");
    std::fs::write(&file, b"x").unwrap();
    let under = file.join("out");
    fails_with(
        &[
            "--engine",
            "host",
            "--size",
            "8",
            "--output",
            under.to_str().unwrap(),
        ],
        "cannot create the output directory",
    );
    assert_eq!(files_in(&dir), ["file"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_without_a_gpu_says_it_needs_one() {
    if lattice_gpu::host::Gpu::probe().is_ok() {
        return;
    }
    fails_with(
        &["--bench", "--size", "8"],
        "--bench measures the GPU, so run it on a machine with one",
    );
}

#[test]
fn help_exits_0() {
    let (code, text) = run(&["--help"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("--frames") && text.contains("--bench"),
        "{text}"
    );
}

#[test]
fn runs_write_fields_and_frames() {
    for (size, shape) in [("24x20x16", vec![16, 20, 24]), ("32x24", vec![24, 32])] {
        let dir = scratch(&format!("good-{size}"));
        let o = dir.to_str().unwrap();
        let args = [
            "--engine", "host", "--size", size, "--steps", "20", "--frames", "10", "--output", o,
        ];
        let (code, text) = run(&args);
        assert_eq!(code, Some(0), "{text}");
        assert!(
            text.contains("MLUPS") && text.contains("GB/s effective"),
            "{text}"
        );
        assert_eq!(
            files_in(&dir),
            [
                "frame-00000.png",
                "frame-00001.png",
                "frame-00002.png",
                "u.npy",
                "v.npy",
                "v.png"
            ]
        );
        let (got, u) = npy::read_npy::<f32>(&dir.join("u.npy")).unwrap();
        assert_eq!(got, shape);
        let (_, v) = npy::read_npy::<f32>(&dir.join("v.npy")).unwrap();
        assert!(u.iter().chain(&v).all(|x| x.is_finite()));
        // The pattern has started: some v, and u eaten where it is.
        assert!(v.iter().any(|&x| x > 0.1) && u.iter().any(|&x| x < 0.9));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn f64_runs_write_f64_files() {
    let dir = scratch("f64");
    let o = dir.to_str().unwrap();
    let (code, text) = run(&[
        "--engine",
        "host",
        "--size",
        "6x5x4",
        "--steps",
        "3",
        "--precision",
        "f64",
        "--output",
        o,
    ]);
    assert_eq!(code, Some(0), "{text}");
    let (shape, _) = npy::read_npy::<f64>(&dir.join("v.npy")).unwrap();
    assert_eq!(shape, [4, 5, 6]);
    let header = std::fs::read(dir.join("v.npy")).unwrap();
    assert!(String::from_utf8_lossy(&header[..64]).contains("'<f8'"));
    let _ = std::fs::remove_dir_all(&dir);
}
