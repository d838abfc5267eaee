//! The `lqcd` binary on the CPU: a small solve; bad input of every kind in one table (sizes, numbers,
//! files, option combinations, checkpoints), each with its exit code (2 where the parser refuses, 1
//! where the run does), its message and nothing written, never a panic; signals, memory, outputs all
//! or nothing; and the propagator's checkpoints: a stopped or failed propagator resumed from its
//! checkpoint gives the bytes of one never stopped.
//!
//! Split over the threads of one process (`--gpus N`), on the CPU engine and, where there is one, the
//! GPU engine: the iterations and |x| of the one-domain solve; `--gpus 0` refused; the fallback
//! to the CPU said once for all ranks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lattice_gpu_formats::checkpoint::Checkpoint;

use lattice_gpu_testkit as common;

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
        cmd.env("RAYON_NUM_THREADS", "2");
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
    use lattice_gpu_lqcd::ildg::{ildg_format_xml, write_lime_file, LimeRecord, Precision};
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
fn sigint_stops_a_gpu_solve_at_its_next_residual_read() {
    let Some(_gpu) = common::gpu("sigint_stops_a_gpu_solve_at_its_next_residual_read") else {
        return;
    };
    let dir = common::temp_dir("lqcd-sigint-gpu-solve");
    // A tolerance below f64's reach: the solve runs to --max-iter (tens of seconds) unless stopped.
    for variant in ["sync", "graph", "waitkernel"] {
        let solve = [
            "solve",
            "--engine",
            "device",
            "--dims",
            "8x8x8x8",
            "--precision",
            "f64",
            "--tol",
            "1e-30",
            "--max-iter",
            "500000",
            "--check-every",
            "1",
            "--variant",
            variant,
        ];
        let start = std::time::Instant::now();
        let (code, text) = common::signalled(
            &bin(),
            &solve,
            &dir,
            "solve iteration     2",
            std::time::Duration::ZERO,
            "INT",
        );
        assert_eq!(code, Some(130), "{variant}: {text}");
        assert!(text.contains("stopped by SIGINT after step"), "{text}");
        assert!(start.elapsed() < 20 * SECOND, "{variant}: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_memory_estimate_covers_the_measured_peak() {
    let dir = common::temp_dir("lqcd-memory");
    // The gauge field alone, loaded and measured: 16^4 (36 MiB of links) where the test binary is not
    // optimised, 24^4 (182 MiB) where it is, since an optimised process's own memory is smaller
    // beside the runtime's fixed allowance.
    let n = if cfg!(debug_assertions) { 16 } else { 24 };
    unit_gauge_file(&dir.join("unit.lime"), [n; 4], None);
    let (code, text) = lqcd_in(
        &dir,
        &["plaquette", "--gauge", "unit.lime"],
        true,
        120 * SECOND,
    );
    assert_eq!(code, Some(0), "{text}");
    let [est, _, got, _] = common::memory_report(&text);
    common::estimate_holds(est, got, 1.3, &format!("lqcd plaquette, {n}^4 file"));
    // The CPU solves: too slow here at a size where their fields outweigh the runtime, so each is
    // measured at two sizes, and the estimate must cover each peak and hold the growth between them
    // (the runtime's own memory drops out of it). The larger is 12^4 where optimised: a growth of
    // some 28 MiB, which the allocator's granularity moves by a few percent (at 8^4 the growth was
    // 5 MiB, and one run in a few on the GPU machine's 16 cores fell outside the bound).
    let large = if cfg!(debug_assertions) {
        "8x8x8x8"
    } else {
        "12x12x12x12"
    };
    for extra in [&[][..], &["--gpus", "2"]] {
        let mut runs = Vec::new();
        for dims in ["4x4x4x8", large] {
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
        // The growth is measured to the allocator's granularity (its thresholds for mapping large
        // arrays move with what was freed before): 1 MiB of it is allowed.
        common::estimate_holds(
            runs[1].0 - runs[0].0 + (1 << 20),
            runs[1].1 - runs[0].1,
            1.3,
            &format!("lqcd solve {extra:?}, from 4x4x4x8 to {large}"),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
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

/// One bad input: its class, the arguments (`{dir}` is the test's directory, where the run starts;
/// `solve` and `propagator` get `--engine host` and `propagator` `--output out` unless they name
/// them), the exit code (2: the parser refused it; 1: the run did) and the pieces of its message.
struct Bad {
    class: &'static str,
    args: &'static [&'static str],
    code: i32,
    says: &'static [&'static str],
}

/// The link of `unit_gauge_file`'s bad entry named as the messages name it.
const NAN_LINK: &str = "site (x, y, z, t) = (1, 1, 0, 2), direction mu = 2 (z)";

const BAD: &[Bad] = &[
    // Sizes.
    Bad {
        class: "sizes",
        args: &["plaquette", "--dims", "5x4x4x4"],
        code: 1,
        says: &["odd"],
    },
    Bad {
        class: "sizes",
        args: &["propagator", "--dims", "4x4x4x6x2"],
        code: 2,
        says: &["must be N or XxYxZxT"],
    },
    Bad {
        class: "sizes",
        args: &["plaquette", "--dims", "0"],
        code: 2,
        says: &["`0` is not a size"],
    },
    Bad {
        class: "sizes",
        args: &["plaquette", "--dims", "-4"],
        code: 2,
        says: &["`-4` is not a size"],
    },
    Bad {
        class: "sizes",
        args: &["plaquette", "--dims", "1000000"],
        code: 1,
        says: &["must fit in a u32"],
    },
    Bad {
        class: "sizes",
        args: &["solve", "--dims", "128"],
        code: 1,
        says: &["128x128x128x128 lattice on the CPU would take", "memory"],
    },
    Bad {
        class: "sizes",
        args: &["propagator", "--dims", "128"],
        code: 1,
        says: &["a propagator on a 128x128x128x128 lattice", "memory"],
    },
    Bad {
        class: "sizes",
        args: &["solve", "--gpus", "30000"],
        code: 1,
        says: &["give --gpus 1024 or fewer"],
    },
    Bad {
        class: "sizes",
        args: &["solve", "--gpus", "65", "--dims", "4"],
        code: 1,
        says: &["the lattice's 4x4x4 sites along y, z and t split over at most 64 ranks"],
    },
    Bad {
        class: "sizes",
        args: &["solve", "--gpus", "0"],
        code: 2,
        says: &["--gpus"],
    },
    Bad {
        class: "sizes",
        args: &["solve", "--grid", "1x2"],
        code: 2,
        says: &["must be YxZxT"],
    },
    Bad {
        class: "sizes",
        args: &["solve", "--grid", "-1x2x2"],
        code: 2,
        says: &["`-1x2x2` is not a size"],
    },
    Bad {
        class: "sizes",
        args: &["solve", "--gpus", "2", "--grid", "1x1x3"],
        code: 1,
        says: &["--grid 1x1x3 places 3 ranks, but the run has 2"],
    },
    Bad {
        class: "sizes",
        args: &["bench", "--solver", "-8"],
        code: 2,
        says: &["`-8` is not a size"],
    },
    // Numbers.
    Bad {
        class: "numbers",
        args: &["solve", "--kappa", "0.3"],
        code: 1,
        says: &["0 < kappa < 0.25"],
    },
    Bad {
        class: "numbers",
        args: &["propagator", "--kappa", "nan"],
        code: 1,
        says: &["kappa = NaN", "0 < kappa < 0.25"],
    },
    Bad {
        class: "numbers",
        args: &["solve", "--tol", "2"],
        code: 1,
        says: &["--tol 2 must be between 0 and 1"],
    },
    Bad {
        class: "numbers",
        args: &["propagator", "--tol", "0"],
        code: 1,
        says: &["--tol 0 must be between 0 and 1"],
    },
    Bad {
        class: "numbers",
        args: &["solve", "--precision", "f32", "--tol", "1e-9"],
        code: 1,
        says: &["below what f32 can reach"],
    },
    Bad {
        class: "numbers",
        args: &["propagator", "--check-every", "0"],
        code: 1,
        says: &["--max-iter and --check-every must be at least 1"],
    },
    Bad {
        class: "numbers",
        args: &["solve", "--max-iter", "-3"],
        code: 2,
        says: &["`-3` is not a count"],
    },
    Bad {
        class: "numbers",
        args: &["solve", "--check-every", "-0"],
        code: 2,
        says: &["`-0` is not a count"],
    },
    Bad {
        class: "numbers",
        args: &["solve", "--bench", "-5"],
        code: 2,
        says: &["`-5` is not a count"],
    },
    Bad {
        class: "numbers",
        args: &["bench", "--iterations", "-1"],
        code: 2,
        says: &["`-1` is not a count"],
    },
    Bad {
        class: "numbers",
        args: &["plaquette", "--seed", "-1"],
        code: 2,
        says: &["`-1` is not a seed"],
    },
    Bad {
        class: "numbers",
        args: &["solve", "--source-seed", "-7"],
        code: 2,
        says: &["`-7` is not a seed"],
    },
    Bad {
        class: "numbers",
        args: &["solve", "--recon", "10"],
        code: 2,
        says: &["--recon `10`: use 12 or 18"],
    },
    Bad {
        class: "numbers",
        args: &["solve", "--dims", "4", "--max-iter", "2"],
        code: 1,
        says: &["did not converge in 2 iterations", "raise --max-iter"],
    },
    // The first source fails: no source finished, so no checkpoint either.
    Bad {
        class: "numbers",
        args: &["propagator", "--dims", "2x2x2x4", "--max-iter", "1"],
        code: 1,
        says: &["did not converge in 1 iterations"],
    },
    // Files.
    Bad {
        class: "files",
        args: &["plaquette", "--gauge", "missing.lime"],
        code: 1,
        says: &["missing.lime"],
    },
    Bad {
        class: "files",
        args: &["plaquette", "--gauge", "flipped.lime"],
        code: 1,
        says: &["checksum"],
    },
    Bad {
        class: "files",
        args: &["plaquette", "--gauge", "/dev/zero"],
        code: 1,
        says: &["is a device, not a regular file"],
    },
    Bad {
        class: "files",
        args: &["solve", "--gauge", "/dev/zero"],
        code: 1,
        says: &["is a device, not a regular file"],
    },
    Bad {
        class: "files",
        args: &["plaquette", "--gauge", "{dir}"],
        code: 1,
        says: &["is a directory, not a regular file"],
    },
    Bad {
        class: "files",
        args: &["solve", "--gauge", "{dir}"],
        code: 1,
        says: &["is a directory, not a regular file"],
    },
    // A pipe must not be opened: that would wait for a writer for ever.
    Bad {
        class: "files",
        args: &["plaquette", "--gauge", "fifo"],
        code: 1,
        says: &["is a pipe (FIFO), not a regular file"],
    },
    Bad {
        class: "files",
        args: &["solve", "--gauge", "fifo"],
        code: 1,
        says: &["is a pipe (FIFO), not a regular file"],
    },
    Bad {
        class: "files",
        args: &[
            "plaquette",
            "--gauge",
            "nan.lime",
            "--write-gauge",
            "out.lime",
        ],
        code: 1,
        says: &[NAN_LINK, "not a finite number"],
    },
    Bad {
        class: "files",
        args: &["plaquette", "--gauge", "nan.lime", "--reunitarize"],
        code: 1,
        says: &[NAN_LINK, "not a finite number"],
    },
    Bad {
        class: "files",
        args: &["plaquette", "--gauge", "inf.lime"],
        code: 1,
        says: &[NAN_LINK, "not a finite number"],
    },
    Bad {
        class: "files",
        args: &["solve", "--gauge", "nan.lime"],
        code: 1,
        says: &[NAN_LINK, "not a finite number"],
    },
    Bad {
        class: "files",
        args: &["propagator", "--gauge", "nan.lime"],
        code: 1,
        says: &[NAN_LINK, "not a finite number"],
    },
    // A link too large to project is no SU(3) matrix after --reunitarize either.
    Bad {
        class: "files",
        args: &["plaquette", "--gauge", "huge.lime", "--reunitarize"],
        code: 1,
        says: &["(1, 1, 0, 2), direction mu = 2", "cannot be projected"],
    },
    Bad {
        class: "files",
        args: &["solve", "--dims", "4", "--write-gauge", "{dir}"],
        code: 1,
        says: &["--write-gauge", "not a regular file"],
    },
    Bad {
        class: "files",
        args: &["propagator", "--write-gauge", "missing/cfg.lime"],
        code: 1,
        says: &["the directory missing does not exist"],
    },
    Bad {
        class: "files",
        args: &["propagator", "--output", "good.lime"],
        code: 1,
        says: &["good.lime", "not a directory"],
    },
    Bad {
        class: "files",
        args: &["propagator", "--output", "good.lime/out"],
        code: 1,
        says: &["cannot create the output directory good.lime/out"],
    },
    Bad {
        class: "files",
        args: &["propagator", "--checkpoint", "good.lime"],
        code: 1,
        says: &["--checkpoint good.lime: it is a file, not a directory"],
    },
    Bad {
        class: "files",
        args: &["propagator", "--checkpoint", "squatted"],
        code: 1,
        says: &["its propagator.ckpt is a directory, not a regular file"],
    },
    Bad {
        class: "files",
        args: &["propagator", "--output", "squatted/.."],
        code: 1,
        says: &["the path names no directory"],
    },
    // Checkpoints that are none, damaged ones, and other runs'.
    Bad {
        class: "checkpoints",
        args: &["propagator", "--resume", "missing"],
        code: 1,
        says: &["cannot read missing"],
    },
    Bad {
        class: "checkpoints",
        args: &["propagator", "--resume", "fifo"],
        code: 1,
        says: &["it is a pipe (FIFO), not a checkpoint file"],
    },
    Bad {
        class: "checkpoints",
        args: &["propagator", "--resume", "good.lime"],
        code: 1,
        says: &["not a lattice-gpu checkpoint"],
    },
    Bad {
        class: "checkpoints",
        args: &["propagator", "--resume", "empty"],
        code: 1,
        says: &["empty/propagator.ckpt", "cannot read"],
    },
    Bad {
        class: "checkpoints",
        args: &[
            "propagator",
            "--dims",
            "2x2x2x4",
            "--resume",
            "corrupt.ckpt",
        ],
        code: 1,
        says: &["fails its checksum: the file is corrupt"],
    },
    Bad {
        class: "checkpoints",
        args: &[
            "propagator",
            "--dims",
            "2x2x2x4",
            "--resume",
            "truncated.ckpt",
        ],
        code: 1,
        says: &["it is truncated"],
    },
    Bad {
        class: "checkpoints",
        args: &[
            "propagator",
            "--dims",
            "2x2x2x4",
            "--resume",
            "diffusion.ckpt",
        ],
        code: 1,
        says: &["it is a checkpoint of `diffusion`, not of `lqcd-propagator`"],
    },
    Bad {
        class: "checkpoints",
        args: &[
            "propagator",
            "--dims",
            "2x2x2x4",
            "--resume",
            "thirteen.ckpt",
        ],
        code: 1,
        says: &["it holds 13 finished sources of 12", "damaged"],
    },
    Bad {
        class: "checkpoints",
        args: &["propagator", "--dims", "2x2x2x4", "--resume", "nan.ckpt"],
        code: 1,
        says: &["its C(t) is NaN at t = 1", "damaged"],
    },
    Bad {
        class: "checkpoints",
        args: &["propagator", "--dims", "2x2x2x4", "--resume", "gpu.ckpt"],
        code: 1,
        says: &[
            "its sources were solved on the gpu and this run solves on the cpu",
            "resume with --engine device",
        ],
    },
    Bad {
        class: "checkpoints",
        args: &[
            "propagator",
            "--dims",
            "2x2x2x4",
            "--resume",
            "ck/checkpoint",
            "--kappa",
            "0.13",
        ],
        code: 1,
        says: &["cannot resume from it: kappa is 0.13 here and 0.12 there"],
    },
    Bad {
        class: "checkpoints",
        args: &[
            "propagator",
            "--dims",
            "2x2x2x8",
            "--resume",
            "ck/checkpoint",
        ],
        code: 1,
        says: &[
            "lattice is 2x2x2x8 here and 2x2x2x4 there",
            "gauge-checksum is",
        ],
    },
    Bad {
        class: "checkpoints",
        args: &[
            "propagator",
            "--dims",
            "2x2x2x4",
            "--seed",
            "2",
            "--resume",
            "ck/checkpoint",
        ],
        code: 1,
        says: &["gauge-checksum is suma-"],
    },
    Bad {
        class: "checkpoints",
        args: &[
            "propagator",
            "--gauge",
            "good.lime",
            "--resume",
            "ck/checkpoint",
        ],
        code: 1,
        says: &[
            "lattice is 4x4x4x4 here and 2x2x2x4 there",
            "gauge-checksum is",
        ],
    },
    Bad {
        class: "checkpoints",
        args: &[
            "propagator",
            "--dims",
            "2x2x2x4",
            "--antiperiodic-t",
            "--resume",
            "ck/checkpoint",
        ],
        code: 1,
        says: &["boundary-t is antiperiodic here and periodic there"],
    },
    Bad {
        class: "checkpoints",
        args: &[
            "propagator",
            "--dims",
            "2x2x2x4",
            "--tol",
            "1e-8",
            "--kappa",
            "0.11",
            "--resume",
            "ck/checkpoint",
        ],
        code: 1,
        says: &[
            "kappa is 0.11 here and 0.12 there",
            "tol is 1e-8 here and 1e-10 there",
        ],
    },
    // Option combinations.
    Bad {
        class: "options",
        args: &["plaquette", "--gauge", "good.lime", "--dims", "4x4x4x8"],
        code: 2,
        says: &["cannot be used with"],
    },
    Bad {
        class: "options",
        args: &["solve", "--grid", "1x1x2"],
        code: 1,
        says: &["add --mpi (under mpirun) or --gpus N"],
    },
    Bad {
        class: "options",
        args: &["solve", "--cut", "x"],
        code: 2,
        says: &["give axes y, z and t"],
    },
    Bad {
        class: "options",
        args: &["solve", "--gpus", "1", "--cut", "z"],
        code: 1,
        says: &["--cut is for the GPU split"],
    },
    Bad {
        class: "options",
        args: &["solve", "--gpus", "2", "--mpi"],
        code: 1,
        says: &["give one of them"],
    },
    Bad {
        class: "options",
        args: &["solve", "--dims", "4", "--bench", "5"],
        code: 1,
        says: &["--bench times the GPU solver"],
    },
    Bad {
        class: "options",
        args: &["solve", "--engine", "gpu"],
        code: 2,
        says: &["invalid value 'gpu'"],
    },
    Bad {
        class: "options",
        args: &["propagator", "--gpus", "2"],
        code: 2,
        says: &["not split over ranks", "lqcd solve --gpus N"],
    },
    Bad {
        class: "options",
        args: &["propagator", "--checkpoint-every", "10"],
        code: 2,
        says: &[
            "a checkpoint after every finished source",
            "leave the option out",
        ],
    },
];

/// Every path under `dir` with its bytes (`None` where it is no regular file: a pipe is not read).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut all = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            all.extend(snapshot(&p));
            all.insert(p, None);
        } else {
            let bytes = meta.is_file().then(|| std::fs::read(&p).unwrap());
            all.insert(p, bytes);
        }
    }
    all
}

/// The files the table's cases name, in `dir`: gauge files (good, one bit flipped, a NaN, an
/// infinite and a huge link), a pipe, the checkpoint of a finished 2x2x2x4 propagator in
/// `ck/checkpoint` and damaged copies of it, a diffusion checkpoint, an empty directory and one
/// whose propagator.ckpt is a directory.
fn bad_input_files(dir: &Path) {
    let run = |args: &[&str]| {
        let (code, text) = lqcd_in(dir, args, false, 60 * SECOND);
        assert_eq!(code, Some(0), "lqcd {args:?}:\n{text}");
        text
    };
    run(&["plaquette", "--dims", "4", "--write-gauge", "good.lime"]);
    let text = run(&["plaquette", "--gauge", "good.lime"]);
    assert!(text.contains("checksum suma"), "{text}");
    let mut bytes = std::fs::read(dir.join("good.lime")).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0x40;
    std::fs::write(dir.join("flipped.lime"), &bytes).unwrap();
    // Site (x, y, z, t) = (1, 1, 0, 2) of 4^4 is n = 1 + 4 (1 + 4 (0 + 4 * 2)) = 133.
    for (name, value) in [
        ("nan.lime", f64::NAN),
        ("inf.lime", f64::INFINITY),
        ("huge.lime", 1e200),
    ] {
        unit_gauge_file(&dir.join(name), [4; 4], Some((133, 2, value)));
    }
    assert!(std::process::Command::new("mkfifo")
        .arg(dir.join("fifo"))
        .status()
        .unwrap()
        .success());
    run(&[
        "propagator",
        "--engine",
        "host",
        "--dims",
        "2x2x2x4",
        "--output",
        "ck",
    ]);
    let good = dir.join("ck/checkpoint/propagator.ckpt");
    let bytes = std::fs::read(&good).unwrap();
    let mut corrupt = bytes.clone();
    *corrupt.last_mut().unwrap() ^= 0x40;
    std::fs::write(dir.join("corrupt.ckpt"), corrupt).unwrap();
    std::fs::write(dir.join("truncated.ckpt"), &bytes[..bytes.len() - 9]).unwrap();
    Checkpoint::new("diffusion", 3)
        .param("size", "4x4x4")
        .array("field", &[0.5f32; 64])
        .write(&dir.join("diffusion.ckpt"))
        .unwrap();
    // Well-formed files of the right run holding what no run writes, and one of a GPU run.
    let ck = Checkpoint::read(&good).unwrap();
    let with = |name: &str, change: &dyn Fn(&mut Checkpoint)| {
        let mut c = ck.clone();
        change(&mut c);
        c.write(&dir.join(name)).unwrap();
    };
    with("thirteen.ckpt", &|c| c.step = 13);
    with("nan.ckpt", &|c| {
        let a = c
            .arrays
            .iter_mut()
            .find(|a| a.name == "correlator")
            .unwrap();
        a.bytes[8..16].copy_from_slice(&f64::NAN.to_le_bytes());
    });
    with("gpu.ckpt", &|c| {
        for (k, v) in &mut c.params {
            if k == "engine" {
                *v = "gpu".into();
            }
        }
        c.params.push(("precision".into(), "f64".into()));
    });
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    std::fs::create_dir_all(dir.join("squatted/propagator.ckpt")).unwrap();
}

#[test]
fn every_bad_input_is_named_with_its_exit_code_and_writes_nothing() {
    let dir = common::temp_dir("lqcd-bad-input");
    bad_input_files(&dir);
    let d = dir.to_str().unwrap();
    let before = snapshot(&dir);
    for bad in BAD {
        let mut args: Vec<String> = bad.args.iter().map(|a| a.replace("{dir}", d)).collect();
        let named = |opt: &str| bad.args.contains(&opt);
        if matches!(bad.args[0], "solve" | "propagator") && !named("--engine") {
            args.extend(["--engine".into(), "host".into()]);
        }
        if bad.args[0] == "propagator" && !named("--output") {
            args.extend(["--output".into(), "out".into()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, text) = lqcd_in(&dir, &args, false, 30 * SECOND);
        assert_eq!(
            code,
            Some(bad.code),
            "{}: lqcd {args:?}:\n{text}",
            bad.class
        );
        for piece in bad.says {
            assert!(
                text.contains(piece),
                "{}: lqcd {args:?}: expected `{piece}` in:\n{text}",
                bad.class
            );
        }
        // A refused run prints no result.
        assert!(
            !text.contains("converged") && !text.contains("solves,"),
            "{}: lqcd {args:?}:\n{text}",
            bad.class
        );
        assert!(
            snapshot(&dir) == before,
            "{}: lqcd {args:?} wrote, removed or changed a file:\n{text}",
            bad.class
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The results a propagator printed: the plaquette, each source's iterations and true residual,
/// the iterations in all, and the table of C(t) and m_eff(t) (not the times).
fn results(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut table = false;
    for l in text.lines() {
        if l.starts_with("wrote ") {
            table = false;
        }
        if table || l.starts_with("plaquette ") || l.starts_with("source s=") {
            lines.push(l.to_string());
        }
        if l.starts_with("12 solves, ") {
            lines.push(l.split(", in ").next().unwrap().to_string());
        }
        if l.starts_with(" t  C(t)") {
            table = true;
        }
    }
    assert!(
        lines.iter().any(|l| l.contains("iterations in all")),
        "{text}"
    );
    lines
}

/// The iterations of each source a propagator printed.
fn iterations(text: &str) -> Vec<u32> {
    text.lines()
        .filter(|l| l.starts_with("source s="))
        .map(|l| common::number_after(l, ": ") as u32)
        .collect()
}

/// The finished sources of the checkpoint at `path`.
fn sources_in(path: &Path) -> u64 {
    Checkpoint::read(path).unwrap().step
}

/// A propagator that failed on a source (its --max-iter set just below what that source needs) and
/// was resumed from its checkpoint with the default --max-iter gives the bytes and the printed
/// results of a run never stopped; so does one resumed from a finished run's checkpoint, without a
/// solve. `engine` and `dims` choose the run.
fn resumes_bit_for_bit(engine: &[&str], dims: &str, dir: &Path) {
    let run = |extra: &[&str]| -> (Option<i32>, String) {
        let args = [engine, &["--dims", dims, "--kappa", "0.124"], extra].concat();
        let args = [&["propagator"][..], &args].concat();
        lqcd_in(dir, &args, false, 120 * SECOND)
    };
    let (code, straight) = run(&["--output", "straight"]);
    assert_eq!(code, Some(0), "{straight}");
    let csv = std::fs::read(dir.join("straight/pion.csv")).unwrap();
    assert_eq!(
        sources_in(&dir.join("straight/checkpoint/propagator.ckpt")),
        12
    );
    // The first source that needs more iterations than every one before it fails below that.
    let its = iterations(&straight);
    assert_eq!(its.len(), 12, "{straight}");
    let k = (1..12)
        .find(|&k| its[k] > its[..k].iter().copied().max().unwrap())
        .unwrap_or_else(|| {
            panic!("no source needs more iterations than those before:\n{straight}")
        });
    let most = its[..k].iter().max().unwrap().to_string();
    let (code, text) = run(&[
        "--output",
        "half",
        "--checkpoint",
        "ck",
        "--max-iter",
        &most,
    ]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("did not converge")
            && text.contains(&format!(
                "the checkpoint of the {k} finished sources of 12 is ck/propagator.ckpt; continue \
                 the run with --resume ck"
            )),
        "{text}"
    );
    assert_eq!(sources_in(&dir.join("ck/propagator.ckpt")), k as u64);
    assert!(!dir.join("half").exists(), "{text}");
    // --max-iter may differ: a converged source's iterations do not depend on it.
    let (code, resumed) = run(&["--output", "whole", "--resume", "ck"]);
    assert_eq!(code, Some(0), "{resumed}");
    assert!(
        resumed.contains(&format!("resuming after {k} of 12 sources")),
        "{resumed}"
    );
    assert_eq!(results(&resumed), results(&straight), "{resumed}");
    assert!(std::fs::read(dir.join("whole/pion.csv")).unwrap() == csv);
    assert_eq!(
        sources_in(&dir.join("whole/checkpoint/propagator.ckpt")),
        12
    );
    // A finished run's checkpoint makes its results again without a solve.
    let (code, again) = run(&["--output", "again", "--resume", "straight/checkpoint"]);
    assert_eq!(code, Some(0), "{again}");
    assert!(
        again.contains("every source is finished") && !again.contains(" iteration "),
        "{again}"
    );
    assert_eq!(results(&again), results(&straight), "{again}");
    assert!(std::fs::read(dir.join("again/pion.csv")).unwrap() == csv);
    // A fresh run that will replace an unfinished checkpoint says so first.
    let (code, fresh) = run(&["--output", "fresh", "--checkpoint", "ck"]);
    assert_eq!(code, Some(0), "{fresh}");
    assert!(
        fresh.contains(&format!(
            "notice: ck/propagator.ckpt holds {k} finished sources of a propagator that did not finish"
        )),
        "{fresh}"
    );
    assert!(std::fs::read(dir.join("fresh/pion.csv")).unwrap() == csv);
    for d in ["", "ck", "whole", "whole/checkpoint", "straight/checkpoint"] {
        assert!(common::temporaries(&dir.join(d)).is_empty(), "{d}");
    }
}

#[test]
fn a_resumed_propagator_gives_the_bytes_of_a_straight_one() {
    let dir = common::temp_dir("lqcd-resume");
    resumes_bit_for_bit(&["--engine", "host"], "2x2x2x4", &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_resumed_gpu_propagator_gives_the_bytes_of_a_straight_one() {
    let Some(_gpu) = common::gpu("a_resumed_gpu_propagator_gives_the_bytes_of_a_straight_one")
    else {
        return;
    };
    let dir = common::temp_dir("lqcd-resume-gpu");
    // The residual read after every iteration, so that --max-iter stops exactly where it says.
    resumes_bit_for_bit(
        &["--engine", "device", "--check-every", "1"],
        "4x4x4x8",
        &dir,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_signal_leaves_the_finished_sources_in_a_checkpoint_that_resumes_to_the_straight_runs_bytes() {
    let dir = common::temp_dir("lqcd-signal-resume");
    let base = ["propagator", "--engine", "host", "--dims", "2x2x2x8"];
    let (code, straight) = lqcd_in(
        &dir,
        &[&base[..], &["--output", "straight"]].concat(),
        false,
        60 * SECOND,
    );
    assert_eq!(code, Some(0), "{straight}");
    for (signal, status) in [("INT", 130), ("TERM", 143)] {
        let out = format!("stopped-{signal}");
        let (code, text) = common::signalled(
            &bin(),
            &[&base[..], &["--output", &out, "--write-gauge", "cfg.lime"]].concat(),
            &dir,
            "source s=0 c=2:",
            std::time::Duration::ZERO,
            signal,
        );
        assert_eq!(code, Some(status), "{text}");
        assert!(
            text.contains(&format!("stopped by SIG{signal} after step")),
            "{text}"
        );
        assert!(!text.contains("12 solves"), "{text}");
        // The sources finished before the signal, and only those, are in the checkpoint.
        let done = iterations(&text).len();
        let ck = dir.join(&out).join("checkpoint/propagator.ckpt");
        assert!((3..12).contains(&done), "{text}");
        assert_eq!(sources_in(&ck), done as u64, "{text}");
        assert!(
            text.contains(&format!(
                "the checkpoint of the {done} finished sources of 12 is {}",
                ck.strip_prefix(&dir).unwrap().display()
            )),
            "{text}"
        );
        // The run's results were not written, only the checkpoint.
        assert_eq!(
            snapshot(&dir.join(&out)).into_keys().collect::<Vec<_>>(),
            [dir.join(&out).join("checkpoint"), ck.clone()]
        );
        assert!(!dir.join("cfg.lime").exists(), "{text}");
        assert!(common::temporaries(&dir).is_empty(), "{text}");
        let from = format!("{out}/checkpoint");
        let resumed = [&base[..], &["--output", &out, "--resume", &from]].concat();
        let (code, text) = lqcd_in(&dir, &resumed, false, 60 * SECOND);
        assert_eq!(code, Some(0), "{text}");
        assert!(
            text.contains(&format!("resuming after {done} of 12 sources")),
            "{text}"
        );
        assert_eq!(results(&text), results(&straight), "{text}");
        assert!(
            std::fs::read(dir.join(&out).join("pion.csv")).unwrap()
                == std::fs::read(dir.join("straight/pion.csv")).unwrap()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Iterations and |x| to 10 digits of an lqcd solve's summary line.
fn solve_summary(text: &str) -> (f64, String) {
    let it = text
        .split(" iterations")
        .next()
        .and_then(|s| s.split_whitespace().last())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no iteration count in:\n{text}"));
    let x = common::number_after(text, "|x| = ");
    (it, format!("{x:.9e}"))
}

/// The solve split over the threads of one process (`--gpus N`, no MPI) takes the same iterations and
/// gives the same |x| to 10 digits as one domain; on the CPU engine always, on the GPU engine too where
/// there is a GPU.
#[test]
fn lqcd_split_over_threads_solves_as_one_domain() {
    let test = "lqcd_split_over_threads_solves_as_one_domain";
    let dims = ["--dims", "4x4x8x12", "--antiperiodic-t", "--tol", "1e-10"];
    for engine in common::engines(test) {
        let base = [&["solve", "--engine", engine][..], &dims].concat();
        // The CPU engine's split runs the full-system reference solver; its one-domain form is one
        // thread. On a GPU the split solve must match the unsplit one.
        let want = if engine == "host" {
            [&base[..], &["--gpus", "1"]].concat()
        } else {
            [&base[..], &["--precision", "f64"]].concat()
        };
        let (ok, text) = lqcd(&want);
        assert!(ok, "{want:?}:\n{text}");
        let want = solve_summary(&text);
        for (n, variant) in [("2", "sync"), ("3", "async")] {
            let mut a = [&base[..], &["--gpus", n, "--variant", variant]].concat();
            if engine == "device" {
                a.extend(["--precision", "f64"]);
            }
            let (ok, text) = lqcd(&a);
            assert!(ok, "{a:?}:\n{text}");
            assert_eq!(solve_summary(&text), want, "{a:?}:\n{text}");
        }
    }
}

/// `--gpus 0` is refused by the parser.
#[test]
fn impossible_thread_splits_are_refused() {
    let (ok, text) = lqcd(&["solve", "--engine", "host", "--gpus", "0", "--dims", "4"]);
    assert!(!ok && text.contains("--gpus"), "{text}");
}

/// Ranks run as threads that open the GPU themselves (no `--engine`) fall back to the CPU alike
/// without one, and one line says so.
#[test]
fn the_fallback_to_the_cpu_is_said_once_for_all_ranks() {
    common::fallback_said_once(
        "LATTICE_GPU_LQCD_BIN",
        env!("CARGO_BIN_EXE_lqcd"),
        &["solve", "--gpus", "2", "--dims", "4x4x4x8"],
        "the_fallback_to_the_cpu_is_said_once_for_all_ranks",
    );
}
