//! The `advection` binary on the CPU: a small rotation prints its error norms and writes its files;
//! every bad input (sizes, numbers, files, checkpoints, options that do not go together) ends in a
//! message naming it, the exit code of its kind (2: the parser refused it, 1: the run did), never a
//! panic, and writes nothing. A run that diverges writes nothing; one that a signal stops writes only
//! its checkpoint; a grid too large is refused before it is made, and the memory estimate covers the
//! measured peak; the output appears all or nothing. A run resumed from a checkpoint gives the bytes
//! of a run never stopped, over any number of thread ranks; a checkpoint of another run, or damaged,
//! is refused by name and overwrites nothing.
//!
//! Split over the threads of one process (`--gpus N`), on the CPU engine and, where there is one, the
//! GPU engine: the bytes of the one-domain run; impossible splits refused with the reason.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lattice_gpu_formats::checkpoint::Checkpoint;
use lattice_gpu_formats::npy::write_npy;

use lattice_gpu_testkit as common;

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

/// One bad input: its class, the arguments (the case first; `--engine host` and `--output OUT` are
/// added unless they name them; `{dir}` is the test's directory), the exit code (2: the parser
/// refused it; 1: the run did) and a piece of the message.
struct Bad {
    class: &'static str,
    args: &'static [&'static str],
    code: i32,
    says: &'static str,
}

const fn bad(
    class: &'static str,
    args: &'static [&'static str],
    code: i32,
    says: &'static str,
) -> Bad {
    Bad {
        class,
        args,
        code,
        says,
    }
}

/// The checkpoint the table's resumes read: a 32 x 24 swirl after 10 steps.
const MADE: &[&str] = &[
    "swirl",
    "--engine",
    "host",
    "--size",
    "32x24",
    "--steps",
    "10",
    "--checkpoint-every",
    "10",
    "--output",
    "made",
];

/// A rotation of 24 x 24 nodes, a quarter turn, with a checkpoint at every step: the last at its end.
const TURNED: &[&str] = &[
    "rotation",
    "--engine",
    "host",
    "--size",
    "24",
    "--revolutions",
    "0.25",
    "--checkpoint-every",
    "1",
    "--output",
    "turned",
];

const BAD: &[Bad] = &[
    // Sizes. Before issue 34: --size 100000 aborted in an allocation, --gpus 30000 started its threads.
    bad(
        "sizes",
        &["swirl", "--size", "4x40"],
        1,
        "smaller than the scheme's 5-node footprint",
    ),
    bad(
        "sizes",
        &["translation", "--size", "-64"],
        2,
        "`-64` is not a size",
    ),
    bad(
        "sizes",
        &["swirl", "--size", "64x-8"],
        2,
        "`64x-8` is not a size",
    ),
    bad(
        "sizes",
        &["swirl", "--size", "eight"],
        2,
        "`eight` is not a size",
    ),
    bad(
        "sizes",
        &["swirl", "--size", "1x2x3"],
        2,
        "must be N or NXxNY",
    ),
    bad("sizes", &["swirl", "--size", "2000000"], 2, "below 2^20"),
    bad(
        "sizes",
        &["translation", "--size", "100000"],
        1,
        "a 100000 x 100000 advection run (translation) would take",
    ),
    bad(
        "sizes",
        &["swirl", "--size", "64", "--gpus", "30000"],
        1,
        "give --gpus 32 or fewer",
    ),
    bad(
        "sizes",
        &["swirl", "--size", "64", "--gpus", "0"],
        2,
        "--gpus",
    ),
    bad(
        "sizes",
        &[
            "file",
            "--field",
            "{dir}/g.npy",
            "--velocity",
            "{dir}/uv.npy",
            "--size",
            "64",
        ],
        1,
        "leave --size out",
    ),
    // Numbers. Before: a velocity or dt / h beyond f32 wrote a NaN field with exit 0; --dt -1 was
    // called "dt / h = -1023", no velocity "--cfl 0.5 must be positive", and 1e300 revolutions
    // were written out in 301 digits.
    bad(
        "numbers",
        &["translation", "--size", "64", "--cfl", "1.5"],
        1,
        "= 1.5000 at node (2, 2) exceeds 1",
    ),
    bad(
        "numbers",
        &["translation", "--size", "64", "--cfl", "-1"],
        1,
        "--cfl -1 must be a positive Courant number",
    ),
    bad(
        "numbers",
        &["translation", "--size", "64", "--cfl", "NaN"],
        1,
        "--cfl NaN must be a positive",
    ),
    bad(
        "numbers",
        &["translation", "--size", "64", "--dt", "0"],
        1,
        "--dt 0 is not a positive time step",
    ),
    bad(
        "numbers",
        &["translation", "--size", "64", "--dt", "-1e-3"],
        1,
        "--dt -0.001 is not a positive",
    ),
    bad(
        "numbers",
        &["translation", "--size", "64", "--dt", "1e300"],
        1,
        "dt / h = 1.8900e301 at node (2, 2) cannot be formed",
    ),
    bad(
        "numbers",
        &["translation", "--size", "64", "--velocity", "1e300x1e300"],
        1,
        "the velocity 1e300 is beyond f32's range",
    ),
    bad(
        "numbers",
        &["translation", "--size", "64", "--cfl", "1e-300"],
        1,
        "below f32's normal range",
    ),
    bad(
        "numbers",
        &["translation", "--velocity", "1x1e999"],
        2,
        "must be two finite numbers",
    ),
    bad(
        "numbers",
        &["translation", "--size", "64", "--velocity", "0x0"],
        1,
        "the flow does not move",
    ),
    bad(
        "numbers",
        &["rotation", "--size", "64", "--revolutions", "-1"],
        1,
        "--revolutions -1 must be a positive number",
    ),
    bad(
        "numbers",
        &["rotation", "--size", "64", "--revolutions", "1e300"],
        1,
        "1e300 revolutions at dt",
    ),
    bad(
        "numbers",
        &["swirl", "--steps", "-5"],
        2,
        "`-5` is not a number of steps",
    ),
    bad(
        "numbers",
        &["swirl", "--steps", "many"],
        2,
        "`many` is not a number of steps",
    ),
    bad(
        "numbers",
        &["swirl", "--png-every", "0"],
        2,
        "0 steps between pictures would write none",
    ),
    bad(
        "numbers",
        &["swirl", "--unroll", "0"],
        2,
        "--unroll `0` must be `auto` or a number",
    ),
    bad(
        "numbers",
        &["swirl", "--checkpoint-every", "0"],
        2,
        "neither a number of steps nor a time",
    ),
    bad(
        "numbers",
        &["swirl", "--checkpoint-every", "5y"],
        2,
        "neither a number of steps nor a time",
    ),
    bad(
        "numbers",
        &["swirl", "--checkpoint-every", "-3"],
        2,
        "neither a number of steps nor a time",
    ),
    bad(
        "numbers",
        &[
            "file",
            "--field",
            "{dir}/g.npy",
            "--velocity",
            "{dir}/uv.npy",
            "--h",
            "0",
        ],
        1,
        "--h 0 must be a positive spacing",
    ),
    // Files.
    bad(
        "files",
        &[
            "file",
            "--field",
            "{dir}/nan.npy",
            "--velocity",
            "{dir}/uv.npy",
            "--steps",
            "2",
        ],
        1,
        "the field is NaN at node (3, 4)",
    ),
    // NaN everywhere: the largest speed, which sets the time step, would skip NaN and see no flow.
    bad(
        "files",
        &[
            "file",
            "--field",
            "{dir}/g.npy",
            "--velocity",
            "{dir}/uv-nan.npy",
        ],
        1,
        "u at node (0, 0) is NaN; give finite velocities",
    ),
    bad(
        "files",
        &[
            "file",
            "--field",
            "{dir}/g.npy",
            "--velocity",
            "{dir}/uv-wrong.npy",
        ],
        1,
        "must have shape (12, 16, 2) to match the field",
    ),
    bad(
        "files",
        &[
            "file",
            "--field",
            "{dir}/cube.npy",
            "--velocity",
            "{dir}/uv.npy",
        ],
        1,
        "the field must be a 2-D array (ny, nx)",
    ),
    bad(
        "files",
        &[
            "file",
            "--field",
            "{dir}/huge.npy",
            "--velocity",
            "{dir}/uv.npy",
        ],
        1,
        "the field is 1e39 at node (2, 1), beyond the range of the f32 arithmetic",
    ),
    bad(
        "files",
        &[
            "file",
            "--field",
            "{dir}/missing.npy",
            "--velocity",
            "{dir}/uv.npy",
        ],
        1,
        "cannot read",
    ),
    bad(
        "files",
        &["file", "--field", "{dir}", "--velocity", "{dir}/uv.npy"],
        1,
        "a directory, not a regular file",
    ),
    bad(
        "files",
        &["file", "--field", "/dev/zero", "--velocity", "{dir}/uv.npy"],
        1,
        "a device, not a regular file",
    ),
    bad(
        "files",
        &[
            "file",
            "--field",
            "{dir}/junk.npy",
            "--velocity",
            "{dir}/uv.npy",
        ],
        1,
        "not a valid .npy",
    ),
    bad(
        "files",
        &["swirl", "--output", "{dir}/junk.npy"],
        1,
        "it exists and is not a directory",
    ),
    bad(
        "files",
        &["swirl", "--output", "{dir}/junk.npy/out"],
        1,
        "cannot create the output directory",
    ),
    // Before phase B these options did not exist; a checkpoint place that cannot take the file is
    // refused before the run, not at its first checkpoint or at the signal that needed one.
    bad(
        "files",
        &["swirl", "--size", "32", "--checkpoint", "{dir}/junk.npy"],
        1,
        "junk.npy is not a directory, so the checkpoints cannot go into",
    ),
    bad(
        "files",
        &["swirl", "--size", "32", "--checkpoint", "{dir}/taken"],
        1,
        "advection.ckpt is not a file, and the checkpoints are written there",
    ),
    bad(
        "files",
        &["swirl", "--size", "32", "--resume", "{dir}/missing"],
        1,
        "cannot read",
    ),
    bad(
        "files",
        &["swirl", "--size", "32", "--resume", "{dir}/junk.npy"],
        1,
        "not a lattice-gpu checkpoint",
    ),
    bad(
        "files",
        &[
            "swirl",
            "--size",
            "32x24",
            "--steps",
            "20",
            "--resume",
            "{dir}/corrupt.ckpt",
        ],
        1,
        "its array `field` fails its checksum: the file is corrupt",
    ),
    bad(
        "files",
        &[
            "swirl",
            "--size",
            "32x24",
            "--steps",
            "20",
            "--resume",
            "{dir}/short.ckpt",
        ],
        1,
        "it is truncated",
    ),
    bad(
        "files",
        &[
            "swirl",
            "--size",
            "32x24",
            "--steps",
            "20",
            "--resume",
            "{dir}/diffusion.ckpt",
        ],
        1,
        "it is a checkpoint of `diffusion`, not of `advection`",
    ),
    bad(
        "files",
        &[
            "swirl",
            "--size",
            "32x24",
            "--steps",
            "20",
            "--resume",
            "{dir}/nan.ckpt",
        ],
        1,
        "its field is NaN at node (x, y) = (5, 6), which no healthy run writes",
    ),
    bad(
        "files",
        &[
            "swirl",
            "--size",
            "32x24",
            "--steps",
            "20",
            "--cfl",
            "0.4",
            "--resume",
            "{dir}/made/checkpoint",
        ],
        1,
        "the run cannot resume from it: dt is",
    ),
    bad(
        "files",
        &[
            "swirl",
            "--size",
            "32x26",
            "--steps",
            "20",
            "--resume",
            "{dir}/made/checkpoint",
        ],
        1,
        "size is 32x26 here and 32x24 there",
    ),
    bad(
        "files",
        &[
            "translation",
            "--size",
            "32x24",
            "--steps",
            "20",
            "--resume",
            "{dir}/made/checkpoint",
        ],
        1,
        "case is translation here and swirl there",
    ),
    bad(
        "files",
        &[
            "swirl",
            "--size",
            "32x24",
            "--steps",
            "10",
            "--resume",
            "{dir}/made/checkpoint",
        ],
        1,
        "is at step 10, and this run ends at step 10: give --steps above 10 to continue it",
    ),
    bad(
        "files",
        &[
            "rotation",
            "--size",
            "24",
            "--revolutions",
            "0.25",
            "--resume",
            "{dir}/turned/checkpoint",
        ],
        1,
        "(its revolutions' time step) to continue it",
    ),
    // Options that do not go together, or that the case would ignore (before: each ran, ignoring it).
    bad(
        "options",
        &["swirl", "--engine", "host", "--block", "32x4"],
        1,
        "--block with --engine host: the launch shape is the GPU's",
    ),
    bad(
        "options",
        &["swirl", "--kernel", "fastest"],
        2,
        "unknown kernel `fastest`",
    ),
    bad(
        "options",
        &["swirl", "--cut"],
        1,
        "--cut splits the steps of a decomposed run",
    ),
    bad(
        "options",
        &["swirl", "--unroll", "4"],
        1,
        "--engine host runs on the CPU",
    ),
    bad(
        "options",
        &["swirl", "--size", "32", "--halos", "nccl"],
        1,
        "--halos nccl moves GPU memory",
    ),
    bad(
        "options",
        &["rotation", "--velocity", "1x1"],
        1,
        "rotation has a velocity of its own",
    ),
    bad(
        "options",
        &["swirl", "--velocity", "-1x1"],
        1,
        "swirl has a velocity of its own",
    ),
    bad(
        "options",
        &["translation", "--revolutions", "2"],
        1,
        "--revolutions counts the turns of the rotation case",
    ),
    bad(
        "options",
        &["rotation", "--revolutions", "2", "--steps", "10"],
        2,
        "cannot be used with",
    ),
    bad(
        "options",
        &["swirl", "--dt", "0.1", "--cfl", "0.3"],
        2,
        "cannot be used with",
    ),
    bad(
        "options",
        &["swirl", "--gpus", "2", "--mpi"],
        1,
        "give one of them",
    ),
    bad(
        "options",
        &["swirl", "--engine", "gpu"],
        2,
        "invalid value 'gpu'",
    ),
];

/// The table's files in `dir`: a 16 x 12 field (`g`), one with a NaN at (3, 4), one beyond f32, one
/// of three axes, velocities (0.1 everywhere, of the wrong shape, NaN), a file that is no .npy, a
/// directory where a checkpoint file would go; a swirl's checkpoint after 10 steps (`made`), and its
/// damaged copies; a quarter-turn rotation's checkpoint at its end (`turned`).
fn bad_inputs(dir: &Path) {
    let (nx, ny) = (16, 12);
    write_npy(&dir.join("g.npy"), &[ny, nx], &vec![0.5f32; nx * ny]).unwrap();
    let mut f = vec![0.5f32; nx * ny];
    f[3 + nx * 4] = f32::NAN;
    write_npy(&dir.join("nan.npy"), &[ny, nx], &f).unwrap();
    let mut huge = vec![0.5f64; nx * ny];
    huge[2 + nx] = 1e39;
    write_npy(&dir.join("huge.npy"), &[ny, nx], &huge).unwrap();
    write_npy(
        &dir.join("cube.npy"),
        &[2, ny, nx],
        &vec![0.5f32; 2 * nx * ny],
    )
    .unwrap();
    write_npy(
        &dir.join("uv.npy"),
        &[ny, nx, 2],
        &vec![0.1f32; nx * ny * 2],
    )
    .unwrap();
    let wrong = vec![0.1f32; (nx - 1) * ny * 2];
    write_npy(&dir.join("uv-wrong.npy"), &[ny, nx - 1, 2], &wrong).unwrap();
    let nan = vec![f32::NAN; nx * ny * 2];
    write_npy(&dir.join("uv-nan.npy"), &[ny, nx, 2], &nan).unwrap();
    std::fs::write(dir.join("junk.npy"), "not a numpy file at all").unwrap();
    std::fs::create_dir_all(dir.join("taken/advection.ckpt")).unwrap();
    succeeds_in(dir, MADE);
    succeeds_in(dir, TURNED);
    let good = std::fs::read(dir.join("made/checkpoint/advection.ckpt")).unwrap();
    let mut corrupt = good.clone();
    *corrupt.last_mut().unwrap() ^= 0x40;
    std::fs::write(dir.join("corrupt.ckpt"), corrupt).unwrap();
    std::fs::write(dir.join("short.ckpt"), &good[..good.len() - 100]).unwrap();
    Checkpoint::new("diffusion", 10)
        .param("size", "32x24x8")
        .array("field", &[0.5f32; 32 * 24 * 8])
        .write(&dir.join("diffusion.ckpt"))
        .unwrap();
    // The made checkpoint with a NaN (and a checksum that fits it).
    let mut ck = Checkpoint::read(&dir.join("made/checkpoint/advection.ckpt")).unwrap();
    let mut field = ck.take::<f32>("field", Path::new("made")).unwrap();
    field[5 + 32 * 6] = f32::NAN;
    let ck = ck.array("field", &field);
    ck.write(&dir.join("nan.ckpt")).unwrap();
}

#[test]
fn every_bad_input_is_named_with_its_exit_code_and_writes_nothing() {
    let dir = temp_dir("bad");
    bad_inputs(&dir);
    let before = entries(&dir);
    let made = std::fs::read(dir.join("made/checkpoint/advection.ckpt")).unwrap();
    let d = dir.to_str().unwrap();
    let out = dir.join("out");
    for bad in BAD {
        let mut args: Vec<String> = bad.args.iter().map(|a| a.replace("{dir}", d)).collect();
        if !bad.args.contains(&"--engine") {
            args.extend(["--engine".into(), "host".into()]);
        }
        if !bad.args.contains(&"--output") {
            args.extend(["--output".into(), out.to_str().unwrap().into()]);
        }
        let t = Instant::now();
        let output = Command::new(binary()).args(&args).output().unwrap();
        let text = String::from_utf8_lossy(&output.stderr).to_string()
            + &String::from_utf8_lossy(&output.stdout);
        let what = format!("{}: advection {}", bad.class, args.join(" "));
        assert!(!text.contains("panicked"), "{what}: panicked:\n{text}");
        assert_eq!(output.status.code(), Some(bad.code), "{what}:\n{text}");
        assert!(
            text.contains(bad.says),
            "{what}: expected `{}` in:\n{text}",
            bad.says
        );
        // Refused before the work: no grid too large is made, no thread of too many started.
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{what}: took {:?}",
            t.elapsed()
        );
        assert!(!out.exists(), "{what}: made the output directory");
        assert_eq!(entries(&dir), before, "{what}: left files");
    }
    assert!(std::fs::read(dir.join("made/checkpoint/advection.ckpt")).unwrap() == made);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The sorted names in `dir` and its subdirectories.
fn entries(dir: &Path) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        v.push(p.display().to_string());
        if p.is_dir() {
            v.extend(entries(&p));
        }
    }
    v.sort();
    v
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
fn the_memory_estimate_covers_the_measured_peak() {
    let dir = temp_dir("memory");
    // Split over threads, what glibc's per-thread arenas keep of the arrays freed varies from run to
    // run (the estimate allows for the most): the bound there is looser. The runs write checkpoints
    // (the field gathered and copied while the arrays are there), and resume from them (the
    // checkpoint read after the problem is made, its field held until the ranks have it).
    let runs: [(&[&str], f64); 4] = [
        (
            &[
                "translation",
                "--size",
                "1400",
                "--steps",
                "1",
                "--checkpoint-every",
                "1",
                "--output",
                "t",
            ],
            1.3,
        ),
        (
            &[
                "translation",
                "--size",
                "1400",
                "--steps",
                "2",
                "--resume",
                "t/checkpoint",
                "--output",
                "t2",
            ],
            1.3,
        ),
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
                "--checkpoint-every",
                "1",
                "--output",
                "s",
            ],
            1.5,
        ),
        (
            &[
                "swirl",
                "--size",
                "1400x1000",
                "--steps",
                "3",
                "--gpus",
                "3",
                "--resume",
                "s/checkpoint",
                "--output",
                "s2",
            ],
            1.5,
        ),
    ];
    for (args, slack) in runs {
        let args: Vec<&str> = args.iter().chain(&["--engine", "host"]).copied().collect();
        let (code, text) = run_in(
            &dir,
            &args,
            &[
                ("LATTICE_GPU_MEMORY_REPORT", "1"),
                ("RAYON_NUM_THREADS", "2"),
            ],
        );
        assert_eq!(code, Some(0), "{text}");
        let [est, gpu, got, _] = common::memory_report(&text);
        assert_eq!(gpu, 0);
        common::estimate_holds(est, got, slack, &format!("advection {args:?}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn negative_velocities_carry_the_hill_left_and_up() {
    let dir = temp_dir("negative");
    // Before: clap's "unexpected argument '-0' found".
    let text = succeeds_in(
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
    );
    // The hill moved left and up as the exact answer says.
    let rel = common::number_after(&text, "relative L2 ");
    assert!(rel < 0.05, "{text}");
    assert!(dir.join("out/field.npy").is_file());
    let _ = std::fs::remove_dir_all(&dir);
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

/// Runs the binary in `dir` with `args` and fails the test unless it succeeds; its output.
fn succeeds_in(dir: &Path, args: &[&str]) -> String {
    let (code, text) = run_in(dir, args, &[]);
    assert_eq!(code, Some(0), "{args:?} failed:\n{text}");
    text
}

/// The bytes of every file a run wrote into `dir/out` (not its checkpoints), by name.
fn outputs(dir: &Path, out: &str) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir.join(out))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    v.sort();
    v
}

/// The lines of a run's report that depend on its field: the error norms and the mass drift.
fn report(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with("error against") || l.starts_with("mass drift"))
        .collect()
}

/// N steps, then N more from the checkpoint, give the bytes of 2N straight (the field, its picture,
/// the pictures of the steps after the checkpoint, the errors reported): on one rank, split over
/// threads, and across a change of the rank count (the checkpoint holds the whole grid).
fn resumes_bit_for_bit(engine: &[&str], dir: &Path) {
    for case in [
        &["swirl", "--size", "40x30", "--png-every", "20"][..],
        &["translation", "--size", "36", "--velocity", "-0.3x0.2"],
    ] {
        let run = |extra: &[&str]| {
            let args: Vec<&str> = case.iter().chain(engine).chain(extra).copied().collect();
            succeeds_in(dir, &args)
        };
        let _ = std::fs::remove_dir_all(dir.join("straight"));
        let text = run(&["--steps", "60", "--output", "straight"]);
        let (straight, said) = (outputs(dir, "straight"), report(&text));
        common::half_then_whole(dir, run, |first, then, half, text| {
            assert!(
                half.contains("3 checkpoints written, the last checkpoint of step 30"),
                "{half}"
            );
            assert!(
                text.contains("resuming from step 30 of half/checkpoint/advection.ckpt")
                    && text.contains("30 steps in"),
                "{text}"
            );
            assert!(!text.contains("note:"), "{text}");
            assert_eq!(report(text), said, "{case:?} {first:?} then {then:?}");
            let mut whole = outputs(dir, "whole");
            // The pictures before the checkpoint are the first run's.
            let mut halfway = outputs(dir, "half");
            halfway.retain(|(n, _)| n.starts_with("field-"));
            whole.extend(halfway);
            whole.sort();
            assert!(
                whole == straight,
                "{case:?} {first:?} then {then:?}: the resumed run's files differ from the straight \
                 one's: {:?} against {:?}",
                whole.iter().map(|f| &f.0).collect::<Vec<_>>(),
                straight.iter().map(|f| &f.0).collect::<Vec<_>>()
            );
        });
    }
}

#[test]
fn a_resumed_run_gives_the_bytes_of_a_straight_one() {
    let dir = temp_dir("resume");
    resumes_bit_for_bit(&["--engine", "host"], &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_resumed_gpu_run_gives_the_bytes_of_a_straight_one() {
    let Some(_gpu) = common::gpu("a_resumed_gpu_run_gives_the_bytes_of_a_straight_one") else {
        return;
    };
    let dir = temp_dir("resume-gpu");
    // A fixed launch shape: the queue kernels' bytes do not depend on it, but the tuner's timing
    // runs would make the test slow.
    resumes_bit_for_bit(
        &[
            "--engine", "device", "--block", "128x1", "--kernel", "packed",
        ],
        &dir,
    );
    resumes_bit_for_bit(
        &[
            "--engine", "device", "--block", "128x1", "--kernel", "plain",
        ],
        &dir,
    );
    // Through NCCL a step reads the halo rows the step before sent: a restore sends them too.
    if cfg!(feature = "nccl") {
        resumes_bit_for_bit(&["--engine", "device", "--halos", "nccl"], &dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_checkpoint_in_time_comes_at_the_first_check_after_it() {
    let dir = temp_dir("every-time");
    // Checks come with the pictures, every 10 steps here; each is 1 ms or more after the last save.
    let text = succeeds_in(
        &dir,
        &[
            "swirl",
            "--engine",
            "host",
            "--size",
            "32",
            "--steps",
            "50",
            "--png-every",
            "10",
            "--checkpoint-every",
            "0.001s",
            "--checkpoint",
            "saved",
            "--output",
            "out",
        ],
    );
    // How many checks find the millisecond passed depends on the machine's speed; each is at a
    // check's step (a multiple of 10), and the first check after a save's time comes can only be
    // later than it.
    let count: usize = text
        .lines()
        .find_map(|l| l.split_once(" checkpoints written"))
        .map_or(0, |(n, _)| n.trim().parse().unwrap_or(0));
    let last: usize = text
        .split("the last checkpoint of step ")
        .nth(1)
        .and_then(|t| t.split(':').next()?.parse().ok())
        .unwrap_or(1);
    assert!(
        (1..=5).contains(&count) && last.is_multiple_of(10),
        "{text}"
    );
    assert!(text.contains("s saving checkpoints)"), "{text}");
    assert!(dir.join("saved/advection.ckpt").is_file());
    assert!(!dir.join("out/checkpoint").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Stops `args` with `stopped_on` (a run to 10^6 steps, writing into `stopped`) with `signal` once
/// its stdout shows `after`: the exit `code`, the message, and nothing in `stopped` but the
/// checkpoint; then resumes it with `resumed_on` 20 steps on, and compares with a straight run of
/// `args` alone to the same step.
fn stops_and_resumes(
    name: &str,
    args: &[&str],
    (stopped_on, resumed_on): (&[&str], &[&str]),
    after: &str,
    signal: &str,
    code: i32,
) {
    let dir = temp_dir(name);
    let run: Vec<&str> = args
        .iter()
        .chain(stopped_on)
        .chain(&["--steps", "1000000", "--output", "stopped"])
        .copied()
        .collect();
    let (got, text) = common::signalled(
        &binary(),
        &run,
        &dir,
        after,
        Duration::from_millis(300),
        signal,
    );
    assert_eq!(got, Some(code), "{text}");
    assert!(
        text.contains(&format!("stopped by SIG{signal} after step")),
        "{text}"
    );
    let step = common::number_after(&text, "checkpoint of step") as u64;
    assert!(
        text.contains("continue the run with the same options and --resume stopped/checkpoint"),
        "{text}"
    );
    // The pictures staged so far and the results went with the run: only the checkpoint stays.
    assert_eq!(
        std::fs::read_dir(dir.join("stopped"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect::<Vec<_>>(),
        ["checkpoint"]
    );
    assert!(
        common::temporaries(&dir).is_empty()
            && common::temporaries(&dir.join("stopped")).is_empty()
    );
    assert!(common::temporaries(&dir.join("stopped/checkpoint")).is_empty());
    let steps = (step + 20).to_string();
    let total = ["--steps", steps.as_str()];
    let resumed: Vec<&str> = args
        .iter()
        .chain(&total)
        .chain(&["--resume", "stopped/checkpoint", "--output", "resumed"])
        .chain(resumed_on)
        .copied()
        .collect();
    let text = succeeds_in(&dir, &resumed);
    assert!(
        text.contains(&format!("resuming from step {step}")),
        "{text}"
    );
    let straight: Vec<&str> = args
        .iter()
        .chain(&total)
        .chain(&["--output", "straight"])
        .copied()
        .collect();
    succeeds_in(&dir, &straight);
    let field = |out: &str| std::fs::read(dir.join(out).join("field.npy")).unwrap();
    assert!(
        field("resumed") == field("straight"),
        "the resumed run differs from the straight one"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigint_writes_a_checkpoint_that_resumes_to_the_straight_runs_bytes() {
    // Checks come with the pictures, every 5 steps. Before: the run's steps were lost.
    stops_and_resumes(
        "sigint",
        &[
            "swirl",
            "--engine",
            "host",
            "--size",
            "64",
            "--png-every",
            "5",
        ],
        (&[], &[]),
        "engine:",
        "INT",
        130,
    );
}

#[test]
fn sigterm_stops_every_thread_rank_and_their_checkpoint_resumes_on_three() {
    stops_and_resumes(
        "sigterm",
        &[
            "swirl",
            "--engine",
            "host",
            "--size",
            "64",
            "--checkpoint-every",
            "7",
        ],
        (&["--gpus", "2"], &["--gpus", "3"]),
        "split along y",
        "TERM",
        143,
    );
}

#[test]
fn corrupt_foreign_or_other_runs_checkpoints_are_refused_and_nothing_is_overwritten() {
    let dir = temp_dir("resume-refused");
    let (nx, ny) = (20, 16);
    write_npy(&dir.join("f.npy"), &[ny, nx], &vec![0.5f32; nx * ny]).unwrap();
    let uv: Vec<f32> = (0..nx * ny)
        .flat_map(|k| [0.2, 0.1 * (k % 3) as f32])
        .collect();
    write_npy(&dir.join("uv.npy"), &[ny, nx, 2], &uv).unwrap();
    let base = [
        "file",
        "--engine",
        "host",
        "--field",
        "f.npy",
        "--velocity",
        "uv.npy",
    ];
    let first = [
        &base[..],
        &["--steps", "10", "--checkpoint-every", "10", "--output", "a"],
    ]
    .concat();
    succeeds_in(&dir, &first);
    let ck = dir.join("a/checkpoint/advection.ckpt");
    let good = std::fs::read(&ck).unwrap();
    let before = outputs(&dir, "a");
    let refused_at = |steps: &str, extra: &[&str], says: &str| {
        let args = [
            &base[..],
            &[
                "--steps",
                steps,
                "--resume",
                "a/checkpoint",
                "--output",
                "a",
            ],
            extra,
        ]
        .concat();
        let (code, text) = run_in(&dir, &args, &[]);
        assert_eq!(code, Some(1), "{args:?}:\n{text}");
        assert!(
            text.contains(says),
            "{args:?}: expected `{says}` in:\n{text}"
        );
        assert!(
            outputs(&dir, "a") == before,
            "{args:?} overwrote the output"
        );
        assert!(common::temporaries(&dir).is_empty());
    };
    let refused = |extra: &[&str], says: &str| refused_at("20", extra, says);
    refused(&["--h", "0.5"], "h is 0.5 here and 1 there");
    refused(&["--cfl", "0.25"], "the run cannot resume from it: dt is");
    // Files of the same shapes with other values.
    let mut other = uv.clone();
    other[7] = 0.3;
    write_npy(&dir.join("uv.npy"), &[ny, nx, 2], &other).unwrap();
    refused(&[], "velocities-checksum is");
    write_npy(&dir.join("uv.npy"), &[ny, nx, 2], &uv).unwrap();
    write_npy(&dir.join("f.npy"), &[ny, nx], &vec![0.25f32; nx * ny]).unwrap();
    refused(&[], "initial-field-checksum is");
    write_npy(&dir.join("f.npy"), &[ny, nx], &vec![0.5f32; nx * ny]).unwrap();
    let damaged = |bytes: &[u8], says: &str| {
        std::fs::write(&ck, bytes).unwrap();
        refused(&[], says);
        assert!(
            std::fs::read(&ck).unwrap() == bytes,
            "the refused checkpoint was changed"
        );
    };
    let mut corrupt = good.clone();
    corrupt[good.len() - 7] ^= 0x01;
    damaged(&corrupt, "fails its checksum");
    damaged(&good[..good.len() / 2], "truncated");
    damaged(
        b"\x93NUMPY not a checkpoint",
        "not a lattice-gpu checkpoint",
    );
    std::fs::write(&ck, &good).unwrap();
    refused_at("10", &[], "give --steps above 10");
    // The same files resume; a checkpoint of the GPU's Newton-form kernels too, with a notice that
    // the bytes will not be those of a run never stopped.
    let mut ck_newton = Checkpoint::read(&ck).unwrap();
    for (k, v) in &mut ck_newton.params {
        match k.as_str() {
            "arithmetic" => *v = "newton".into(),
            "kernel" => *v = "shared".into(),
            _ => {}
        }
    }
    ck_newton.write(&ck).unwrap();
    let args = [
        &base[..],
        &["--steps", "20", "--resume", "a/checkpoint", "--output", "a"],
    ]
    .concat();
    let text = succeeds_in(&dir, &args);
    assert!(text.contains("resuming from step 10"), "{text}");
    assert!(
        text.contains(
            "note: the checkpoint's run computed the cubics in newton form (shared kernel)"
        ),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_help_documents_the_checkpoint_options() {
    let (ok, text) = advection(&["swirl", "--help"]);
    assert!(ok, "{text}");
    for piece in [
        "--checkpoint-every <N|TIME>",
        "Without it, a checkpoint is written only when a signal (SIGINT, SIGTERM, SIGHUP, SIGUSR1) stops the run",
        "--checkpoint <DIR>",
        "[default: OUTPUT/checkpoint]",
        "--resume <DIR>",
        "the same bytes as a run never stopped",
        "Steps in all",
    ] {
        assert!(text.contains(piece), "`{piece}` is not in:\n{text}");
    }
}

/// Over 2 and 3 ranks run as threads of this process (`--gpus N`, no MPI), the bytes of the one-domain
/// run; on the CPU engine always, on the GPU engine too where there is a GPU (ranks beyond the GPUs
/// there are share them, halos through host memory).
#[test]
fn over_threads_writes_the_one_domain_bytes() {
    for engine in common::engines("over_threads_writes_the_one_domain_bytes") {
        common::same_bytes_over_threads(
            "LATTICE_GPU_ADVECTION_BIN",
            env!("CARGO_BIN_EXE_advection"),
            &[
                "swirl", "--engine", engine, "--size", "41x37", "--steps", "30",
            ],
            "field.npy",
            &format!("threads-advection-{engine}"),
        );
    }
}

/// A split over more threads than the grid has rows for its halo is refused with the reason.
#[test]
fn impossible_thread_splits_are_refused() {
    let dir = temp_dir("threads-refused");
    let o = dir.join("out").to_string_lossy().to_string();
    let a = [
        "swirl", "--engine", "host", "--gpus", "3", "--size", "41x5", "--steps", "2", "--output",
        &o,
    ];
    let (ok, text) = advection(&a);
    assert!(
        !ok && text.contains("give --gpus 2 or fewer"),
        "{a:?}:\n{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
