//! The `diffusion` binary on bad input: a message naming the problem, a non-zero exit, no panic, and no
//! output file left behind. Runs on the CPU engine, so it needs no GPU.
//!
//! Split over the threads of one process (`--gpus N`), on the CPU engine and, where there is one, the
//! GPU engine: the bytes of the one-domain run, impossible splits refused with the reason, and
//! the fallback to the CPU said once for all ranks.

use std::path::{Path, PathBuf};
use std::process::Command;

use lattice_gpu_testkit as common;

/// The binary under test: `$LATTICE_GPU_DIFFUSION_BIN` where the test runs away from its build tree
/// (scripts/gpu-check.sh on the GPU machine), else the one cargo built.
fn binary() -> PathBuf {
    common::binary("LATTICE_GPU_DIFFUSION_BIN", env!("CARGO_BIN_EXE_diffusion"))
}

fn run(args: &[&str]) -> (bool, String) {
    let out = Command::new(binary()).args(args).output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("panicked"), "panic on {args:?}:\n{text}");
    (out.status.success(), text)
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lattice-gpu-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn fails_with(args: &[&str], needle: &str) {
    let (ok, text) = run(args);
    assert!(!ok, "{args:?} succeeded:\n{text}");
    assert!(
        text.contains(needle),
        "{args:?}: expected `{needle}` in:\n{text}"
    );
}

/// A .npy header for a little-endian array of `descr` and `shape`, padded as numpy pads it.
fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut v = b"\x93NUMPY\x01\x00".to_vec();
    v.extend_from_slice(&(h.len() as u16).to_le_bytes());
    v.extend_from_slice(h.as_bytes());
    v.extend_from_slice(data);
    v
}

/// One bad input: its class, the arguments (after `--engine host --output OUT` where they name no engine
/// or output; `{dir}` is replaced
/// by the test's directory), the exit code (2: the parser refused it; 1: the run did) and a piece of the
/// message.
struct Bad {
    class: &'static str,
    args: &'static [&'static str],
    code: i32,
    says: &'static str,
}

const BAD: &[Bad] = &[
    // Temporal blocking.
    Bad {
        class: "temporal",
        args: &["--temporal", "9"],
        code: 1,
        says: "--temporal 9: a temporally blocked pass advances 1 to 8 steps",
    },
    Bad {
        class: "temporal",
        args: &["--temporal", "0"],
        code: 1,
        says: "--temporal 0: a temporally blocked pass advances 1 to 8 steps",
    },
    Bad {
        class: "temporal",
        args: &["--size", "8x8x9", "--temporal", "4", "--gpus", "3"],
        code: 1,
        says:
            "or give fewer steps per pass (--temporal): a pass of 4 steps exchanges halos 4 planes",
    },
    // Sizes.
    Bad {
        class: "sizes",
        args: &["--size", "0x8x8"],
        code: 2,
        says: "is not a size",
    },
    Bad {
        class: "sizes",
        args: &["--size", "-8"],
        code: 2,
        says: "`-8` is not a size",
    },
    Bad {
        class: "sizes",
        args: &["--size", "8x8"],
        code: 2,
        says: "NXxNYxNZ",
    },
    Bad {
        class: "sizes",
        args: &["--size", "eight"],
        code: 2,
        says: "is not a size",
    },
    Bad {
        class: "sizes",
        args: &["--size", "2000000"],
        code: 2,
        says: "below 2^20",
    },
    Bad {
        class: "sizes",
        args: &["--size", "100000"],
        code: 1,
        says: "memory",
    },
    Bad {
        class: "sizes",
        args: &["--size", "1048575"],
        code: 1,
        says: "memory",
    },
    Bad {
        class: "sizes",
        args: &["--size", "8", "--gpus", "9"],
        code: 1,
        says: "give --gpus 8 or fewer",
    },
    Bad {
        class: "sizes",
        args: &["--size", "8", "--gpus", "0"],
        code: 2,
        says: "--gpus",
    },
    // Numbers.
    Bad {
        class: "numbers",
        args: &["--size", "8", "--kappa", "-1"],
        code: 1,
        says: "kappa = -1 is not a positive diffusivity",
    },
    Bad {
        class: "numbers",
        args: &["--size", "8", "--kappa", "NaN"],
        code: 1,
        says: "not a positive diffusivity",
    },
    Bad {
        class: "numbers",
        args: &["--size", "8", "--kappa", "inf"],
        code: 1,
        says: "not a positive diffusivity",
    },
    Bad {
        class: "numbers",
        args: &["--size", "8", "--kappa", "1e-320"],
        code: 1,
        says: "give a larger --kappa, or a time step with --dt",
    },
    Bad {
        class: "numbers",
        args: &["--size", "8", "--dt", "1"],
        code: 1,
        says: "unstable",
    },
    Bad {
        class: "numbers",
        args: &["--size", "8", "--dt", "0"],
        code: 1,
        says: "not a positive time step",
    },
    Bad {
        class: "numbers",
        args: &["--size", "8", "--dt", "-1e-3"],
        code: 1,
        says: "not a positive time step",
    },
    Bad {
        class: "numbers",
        args: &["--size", "8", "--steps", "-3"],
        code: 2,
        says: "--steps",
    },
    Bad {
        class: "numbers",
        args: &["--size", "8", "--steps", "many"],
        code: 2,
        says: "invalid value 'many'",
    },
    Bad {
        class: "numbers",
        args: &["--size", "8", "--checkpoint-every", "0"],
        code: 2,
        says: "neither a number of steps nor a time",
    },
    Bad {
        class: "numbers",
        args: &["--size", "8", "--checkpoint-every", "5y"],
        code: 2,
        says: "neither a number of steps nor a time",
    },
    // Files.
    Bad {
        class: "files",
        args: &["--size", "4", "--input", "{dir}/shape.npy"],
        code: 1,
        says: "(4, 4, 5)",
    },
    Bad {
        class: "files",
        args: &["--size", "4", "--input", "{dir}/ints.npy"],
        code: 1,
        says: "integer",
    },
    Bad {
        class: "files",
        args: &["--size", "4", "--input", "{dir}/short.npy"],
        code: 1,
        says: "truncated",
    },
    Bad {
        class: "files",
        args: &["--size", "4", "--input", "{dir}/junk.npy"],
        code: 1,
        says: "not a valid .npy",
    },
    Bad {
        class: "files",
        args: &["--size", "4", "--input", "{dir}/nan.npy"],
        code: 1,
        says: "NaN at point (x, y, z) = (1, 2, 3)",
    },
    Bad {
        class: "files",
        args: &["--size", "4", "--input", "{dir}/missing.npy"],
        code: 1,
        says: "cannot read",
    },
    Bad {
        class: "files",
        args: &["--size", "4", "--input", "{dir}"],
        code: 1,
        says: "a directory, not a regular file",
    },
    Bad {
        class: "files",
        args: &["--size", "4", "--input", "/dev/zero"],
        code: 1,
        says: "a device, not a regular file",
    },
    Bad {
        class: "files",
        args: &["--size", "4", "--resume", "{dir}/junk.npy", "--steps", "9"],
        code: 1,
        says: "not a lattice-gpu checkpoint",
    },
    Bad {
        class: "files",
        args: &["--size", "4", "--resume", "{dir}/missing", "--steps", "9"],
        code: 1,
        says: "cannot read",
    },
    Bad {
        class: "files",
        args: &["--size", "4", "--output", "{dir}/shape.npy/out"],
        code: 1,
        says: "cannot create the output directory",
    },
    Bad {
        class: "files",
        args: &["--size", "4", "--output", "{dir}/shape.npy"],
        code: 1,
        says: "not a directory",
    },
    // Options that do not go together.
    Bad {
        class: "options",
        args: &["--engine", "host", "--size", "8", "--march", "4"],
        code: 1,
        says: "--block and --march with --engine host: the launch shape is the GPU's",
    },
    Bad {
        class: "options",
        args: &["--size", "8", "--gpu", "1"],
        code: 1,
        says: "--engine host runs on the CPU",
    },
    Bad {
        class: "options",
        args: &["--size", "8", "--cut"],
        code: 1,
        says: "--cut splits the steps of a decomposed run",
    },
    Bad {
        class: "options",
        args: &["--size", "8", "--gpus", "2", "--mpi"],
        code: 1,
        says: "give one of them",
    },
    Bad {
        class: "options",
        args: &[
            "--size",
            "4",
            "--input",
            "{dir}/nan.npy",
            "--resume",
            "{dir}",
        ],
        code: 2,
        says: "cannot be used with",
    },
    Bad {
        class: "options",
        args: &["--engine", "gpu"],
        code: 2,
        says: "invalid value 'gpu'",
    },
];

#[test]
fn every_bad_input_is_named_with_its_exit_code_and_writes_nothing() {
    let dir = scratch("bad");
    std::fs::write(
        dir.join("shape.npy"),
        npy("<f4", "(4, 4, 5)", &[0u8; 4 * 80]),
    )
    .unwrap();
    std::fs::write(
        dir.join("ints.npy"),
        npy("<i4", "(4, 4, 4)", &[0u8; 4 * 64]),
    )
    .unwrap();
    std::fs::write(dir.join("short.npy"), npy("<f8", "(4, 4, 4)", &[0u8; 100])).unwrap();
    std::fs::write(dir.join("junk.npy"), b"not a numpy file at all").unwrap();
    let mut values = vec![0.5f64; 64];
    values[3 * 16 + 2 * 4 + 1] = f64::NAN;
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.join("nan.npy"), npy("<f8", "(4, 4, 4)", &bytes)).unwrap();
    let before = entries(&dir);
    let d = dir.to_str().unwrap();
    let out = dir.join("out");
    for bad in BAD {
        let mut args: Vec<String> = Vec::new();
        for (opt, value) in [("--engine", "host"), ("--output", out.to_str().unwrap())] {
            if !bad.args.contains(&opt) {
                args.extend([opt.to_string(), value.to_string()]);
            }
        }
        args.extend(bad.args.iter().map(|a| a.replace("{dir}", d)));
        let output = Command::new(binary()).args(&args).output().unwrap();
        let text = String::from_utf8_lossy(&output.stderr).to_string()
            + &String::from_utf8_lossy(&output.stdout);
        assert!(
            !text.contains("panicked"),
            "{}: panic on {args:?}:\n{text}",
            bad.class
        );
        assert_eq!(
            output.status.code(),
            Some(bad.code),
            "{}: {args:?}:\n{text}",
            bad.class
        );
        assert!(
            text.contains(bad.says),
            "{}: {args:?}: expected `{}` in:\n{text}",
            bad.class,
            bad.says
        );
        assert!(
            !out.exists(),
            "{}: {args:?} made the output directory",
            bad.class
        );
        assert_eq!(entries(&dir), before, "{}: {args:?} left files", bad.class);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The sorted names in `dir`.
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn missing_gpu_names_the_fix_that_fits() {
    if lattice_gpu_host::Gpu::probe().is_ok() {
        eprintln!("missing_gpu_names_the_fix_that_fits: SKIPPED (a GPU is present)");
        return;
    }
    // A GPU engine the user asked for has the CPU engine as its alternative; a benchmark has none.
    fails_with(
        &["--engine", "device", "--size", "8", "--steps", "1"],
        "or run on the CPU with --engine host",
    );
    let (ok, text) = run(&["bench"]);
    assert!(
        !ok && text.contains("`diffusion bench` measures the GPU") && !text.contains("--engine"),
        "{text}"
    );
}

#[test]
fn good_run_writes_readable_outputs() {
    let dir = scratch("good");
    let o = dir.to_str().unwrap();
    let (ok, text) = run(&[
        "--engine", "host", "--size", "12x10x8", "--steps", "20", "--output", o,
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("relative L2 error"), "{text}");
    let npy = std::fs::read(dir.join("diffusion.npy")).unwrap();
    assert!(npy.starts_with(b"\x93NUMPY"));
    assert!(String::from_utf8_lossy(&npy[..128]).contains("'shape': (8, 10, 12)"));
    assert_eq!(npy.len(), 128 + 4 * 12 * 10 * 8);
    assert!(std::fs::read(dir.join("diffusion_midz.png"))
        .unwrap()
        .starts_with(b"\x89PNG"));
    // The output can be fed back in.
    let input = dir.join("diffusion.npy");
    let (ok, text) = run(&[
        "--engine",
        "host",
        "--size",
        "12x10x8",
        "--steps",
        "1",
        "--precision",
        "f64",
        "--output",
        o,
        "--input",
        input.to_str().unwrap(),
    ]);
    assert!(ok, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigint_stops_at_a_step_boundary_with_the_shells_status_and_leaves_nothing() {
    let dir = scratch("sigint");
    let bin = binary();
    let (code, text) = common::signalled(
        &bin,
        &[
            "--engine", "host", "--size", "96", "--steps", "200000", "--output", "out",
        ],
        &dir,
        "diffusion 96x96x96",
        std::time::Duration::from_millis(300),
        "INT",
    );
    assert_eq!(code, Some(130), "{text}");
    assert!(text.contains("stopped by SIGINT after step"), "{text}");
    // The checkpoint of the step it stopped at, and nothing else: no results, no temporaries.
    let mut left = Vec::new();
    for e in walk(&dir) {
        left.push(e.strip_prefix(&dir).unwrap().to_string_lossy().into_owned());
    }
    assert_eq!(left, ["out/checkpoint/diffusion.ckpt"]);
}

#[test]
fn the_memory_estimate_covers_the_measured_peak() {
    for precision in ["f32", "f64"] {
        let dir = scratch(&format!("memory-{precision}"));
        let args = [
            "--engine",
            "host",
            "--size",
            "200x200x160",
            "--steps",
            "2",
            "--precision",
            precision,
            "--output",
            "out",
        ];
        let [est, _, got, _] = common::measured(&binary(), &args, &dir);
        common::estimate_holds(est, got, 1.3, &format!("diffusion {precision} host"));
    }
}

#[test]
fn more_gpus_than_layers_are_refused_before_a_thread_starts() {
    let t = std::time::Instant::now();
    fails_with(
        &["--engine", "host", "--size", "8", "--gpus", "30000"],
        "give --gpus 8 or fewer",
    );
    assert!(t.elapsed().as_secs_f64() < 2.0);
}

#[test]
fn a_failed_write_leaves_the_previous_outputs_whole() {
    let dir = scratch("all-or-nothing");
    let out = dir.join("out");
    std::fs::create_dir_all(out.join("diffusion_midz.png")).unwrap();
    std::fs::write(out.join("diffusion.npy"), "the previous run's").unwrap();
    fails_with(
        &[
            "--engine",
            "host",
            "--size",
            "8",
            "--steps",
            "2",
            "--output",
            out.to_str().unwrap(),
        ],
        "not a regular file",
    );
    assert_eq!(
        std::fs::read_to_string(out.join("diffusion.npy")).unwrap(),
        "the previous run's"
    );
    assert!(common::temporaries(&dir).is_empty() && common::temporaries(&out).is_empty());
}

/// Every file under `dir`, sorted.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        match p.is_dir() {
            true => files.extend(walk(&p)),
            false => files.push(p),
        }
    }
    files.sort();
    files
}

/// Runs the binary in `dir` with `args` and fails the test unless it succeeds; its output.
fn succeeds_in(dir: &Path, args: &[&str]) -> String {
    common::succeeds_in(&binary(), dir, args, &[])
}

/// The field a run wrote into `dir/out`.
fn field(dir: &Path, out: &str) -> Vec<u8> {
    std::fs::read(dir.join(out).join("diffusion.npy")).unwrap()
}

/// N steps, then N more from the checkpoint, give the bytes of 2N straight: on one rank, split over
/// threads, and across a change of the rank count (the checkpoint holds the whole grid).
fn resumes_bit_for_bit(engine: &[&str], dir: &Path) {
    let run = |extra: &[&str]| {
        let mut args = engine.to_vec();
        args.extend_from_slice(&["--size", "20x18x17"]);
        args.extend_from_slice(extra);
        succeeds_in(dir, &args)
    };
    run(&["--steps", "60", "--output", "straight"]);
    let straight = field(dir, "straight");
    common::half_then_whole(dir, run, |first, then, half, _| {
        assert!(half.contains("3 checkpoints written"), "{half}");
        assert!(
            field(dir, "whole") == straight,
            "{first:?} then {then:?}: the resumed run differs from the straight one"
        );
    });
}

/// Passes of 2, 3 and 4 steps (61 steps: a remainder of single steps after the passes, and graph
/// batches where the engine records them) give the bytes of single steps on one domain; and split
/// over 2 and 3 ranks (threads of the process, with overlap and without) and cut on one, halos as
/// deep as a pass exchanged once a pass.
fn temporal_runs_give_single_steps_bytes(engine: &[&str], dir: &Path) {
    let run = |t: &str, split: &[&str]| {
        let mut args = engine.to_vec();
        let out = format!("t{t}{}", split.concat());
        args.extend_from_slice(&["--size", "37x29x23", "--steps", "61", "--temporal", t]);
        args.extend_from_slice(split);
        args.extend_from_slice(&["--output", &out]);
        let text = succeeds_in(dir, &args);
        assert_eq!(
            text.contains(&format!("temporal blocking: {t} steps per pass")),
            t != "1",
            "{text}"
        );
        // Passes ran (the checks come at least a pass apart), the remainder singly.
        let t: usize = t.parse().unwrap();
        if t > 1 {
            let blocked = format!(", {} of the 61 steps", 61 / t * t);
            assert!(text.contains(&blocked), "{text}");
        }
        field(dir, &out)
    };
    let single = run("1", &[]);
    for split in [
        &[][..],
        &["--gpus", "1", "--cut"],
        &["--gpus", "2"],
        &["--gpus", "3"],
        &["--gpus", "2", "--no-overlap"],
    ] {
        for t in ["2", "3", "4"] {
            assert!(
                run(t, split) == single,
                "--temporal {t} {split:?} differs from single steps on one domain"
            );
        }
    }
}

#[test]
fn temporal_passes_give_the_bytes_of_single_steps() {
    let dir = scratch("temporal");
    temporal_runs_give_single_steps_bytes(&["--engine", "host"], &dir);
    // The default, `--temporal auto`: fields this small stay in the CPU's cache, where the CPU
    // engine runs single steps (passes where they leave it: `HOST_PASS_STEPS`).
    let text = succeeds_in(
        &dir,
        &[
            "--engine", "host", "--size", "37x29x23", "--steps", "61", "--output", "auto",
        ],
    );
    assert!(!text.contains("temporal blocking"), "{text}");
    assert!(
        field(&dir, "auto") == field(&dir, "t1"),
        "--temporal auto on the CPU differs from single steps"
    );
}

/// `--temporal auto` on a split run (over 2 ranks, and cut on one) takes what the engine runs on
/// rank 0's slab as one domain, its halos as deep: on the CPU passes of 3 where the slab's two
/// fields exceed half the last-level cache (f64 at 128^3: 18 MB a slab of 2 ranks, 36 MB cut; more
/// than half of a 32 MB cache), else single steps. The bytes of single steps either way.
#[test]
fn auto_temporal_on_a_split_run_takes_its_slabs_choice() {
    let dir = scratch("temporal-auto-split");
    let run = |t: &str, split: &[&str]| {
        let out = format!("{t}{}", split.concat());
        let mut args = vec!["--engine", "host", "--size", "128", "--precision", "f64"];
        args.extend_from_slice(&["--steps", "13", "--temporal", t, "--output", &out]);
        args.extend_from_slice(split);
        (succeeds_in(&dir, &args), field(&dir, &out))
    };
    let single = run("1", &[]).1;
    for (split, planes) in [(&["--gpus", "2"][..], 64), (&["--gpus", "1", "--cut"], 128)] {
        let shape = lattice_gpu_diffusion::Problem::shape_of::<f64>([128, 128, planes], 1).unwrap();
        let fields = 2 * 8 * shape.len() as u64;
        let passes = lattice_gpu_host::memory::last_level_cache().is_none_or(|c| fields > c / 2);
        let (text, bytes) = run("auto", split);
        assert_eq!(
            text.contains("temporal blocking: 3 steps per pass (the engine's choice"),
            passes,
            "{split:?}, {fields} bytes of fields: {text}"
        );
        assert!(
            bytes == single,
            "--temporal auto {split:?} differs from single steps"
        );
    }
}

#[test]
fn gpu_temporal_passes_give_the_bytes_of_single_steps() {
    let Some(_gpu) = common::gpu("gpu_temporal_passes_give_the_bytes_of_single_steps") else {
        return;
    };
    temporal_runs_give_single_steps_bytes(
        &["--engine", "device", "--no-tune-cache"],
        &scratch("temporal-gpu"),
    );
}

/// `--temporal auto` (the default) on the auto-tuning GPU engine: long enough for the tuner to weigh
/// passes of 2 to 4 steps against single steps, it names its choice, and the field has the bytes of
/// single steps (skipped without a GPU).
#[test]
fn gpu_auto_temporal_names_its_choice_and_gives_single_steps_bytes() {
    let Some(_gpu) = common::gpu("gpu_auto_temporal_names_its_choice_and_gives_single_steps_bytes")
    else {
        return;
    };
    let dir = scratch("temporal-auto");
    let run = |t: &str, split: &[&str]| {
        let out = format!("{t}{}", split.concat());
        let mut args = vec![
            "--engine",
            "device",
            "--no-tune-cache",
            "--size",
            "37x29x23",
        ];
        args.extend_from_slice(&["--steps", "6001", "--temporal", t, "--output", &out]);
        args.extend_from_slice(split);
        (succeeds_in(&dir, &args), field(&dir, &out))
    };
    let single = run("1", &[]).1;
    // Split, the choice is made on rank 0's slab before the run, and the halos are as deep.
    for split in [&[][..], &["--gpus", "2"], &["--gpus", "1", "--cut"]] {
        let (text, auto) = run("auto", split);
        let passes = text
            .contains("temporal blocking: ")
            .then(|| common::number_after(&text, "temporal blocking: "));
        assert!(
            passes.is_some() || text.contains("single steps ("),
            "{text}"
        );
        if let (Some(t), false) = (passes, split.is_empty()) {
            assert!(text.contains(&format!("halos {t} planes deep")), "{text}");
        }
        assert!(
            auto == single,
            "--temporal auto {split:?} differs from single steps"
        );
    }
}

#[test]
fn a_resumed_run_gives_the_bytes_of_a_straight_one() {
    resumes_bit_for_bit(&["--engine", "host"], &scratch("resume"));
}

#[test]
fn a_resumed_gpu_run_gives_the_bytes_of_a_straight_one() {
    let Some(_gpu) = common::gpu("a_resumed_gpu_run_gives_the_bytes_of_a_straight_one") else {
        return;
    };
    resumes_bit_for_bit(
        &["--engine", "device", "--no-tune-cache"],
        &scratch("resume-gpu"),
    );
}

#[test]
fn sigint_writes_a_checkpoint_that_resumes_to_the_straight_runs_bytes() {
    let dir = scratch("sigint-resume");
    // Far more steps than run before the signal; checks (and so the stop) come every 8192 steps at
    // 32^3 on the CPU.
    let base = ["--engine", "host", "--size", "32"];
    let (code, text) = common::signalled(
        &binary(),
        &[&base[..], &["--steps", "100000000", "--output", "stopped"]].concat(),
        &dir,
        "diffusion 32x32x32",
        std::time::Duration::from_millis(300),
        "TERM",
    );
    assert_eq!(code, Some(143), "{text}");
    assert!(text.contains("stopped by SIGTERM after step"), "{text}");
    let step = common::number_after(&text, "checkpoint of step") as usize;
    // The run's results were not written, only the checkpoint.
    assert_eq!(
        std::fs::read_dir(dir.join("stopped"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect::<Vec<_>>(),
        ["checkpoint"]
    );
    let steps = (step + 500).to_string();
    let resumed = [
        "--steps",
        &steps,
        "--output",
        "resumed",
        "--resume",
        "stopped/checkpoint",
    ];
    let text = succeeds_in(&dir, &[&base[..], &resumed].concat());
    assert!(
        text.contains(&format!("resuming from step {step}")),
        "{text}"
    );
    succeeds_in(
        &dir,
        &[&base[..], &["--steps", &steps, "--output", "straight"]].concat(),
    );
    assert!(field(&dir, "resumed") == field(&dir, "straight"));
}

#[test]
fn corrupt_foreign_or_other_runs_checkpoints_are_refused_and_nothing_is_overwritten() {
    let dir = scratch("resume-refused");
    let base = ["--engine", "host", "--size", "12x10x8"];
    succeeds_in(
        &dir,
        &[
            &base[..],
            &["--steps", "10", "--checkpoint-every", "10", "--output", "a"],
        ]
        .concat(),
    );
    let ck = dir.join("a/checkpoint/diffusion.ckpt");
    let good = std::fs::read(&ck).unwrap();
    let before = field(&dir, "a");
    let resume = |extra: &[&str], needle: &str| {
        let mut args = base.to_vec();
        args.extend_from_slice(&["--steps", "20", "--resume", "a/checkpoint", "--output", "a"]);
        args.extend_from_slice(extra);
        let out = Command::new(binary())
            .args(&args)
            .current_dir(&dir)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(1), "{args:?}:\n{text}");
        assert!(
            text.contains(needle),
            "{args:?}: expected `{needle}` in:\n{text}"
        );
        assert!(
            field(&dir, "a") == before,
            "a refused resume overwrote the output"
        );
    };
    resume(&["--kappa", "0.2"], "kappa is 0.2 here and 0.1 there");
    resume(
        &["--precision", "f64"],
        "precision is f64 here and f32 there",
    );
    let mut corrupt = good.clone();
    *corrupt.last_mut().unwrap() ^= 0x40;
    std::fs::write(&ck, &corrupt).unwrap();
    resume(&[], "fails its checksum");
    std::fs::write(&ck, &good[..good.len() / 2]).unwrap();
    resume(&[], "truncated");
    std::fs::write(&ck, npy("<f4", "(1,)", &[0; 4])).unwrap();
    resume(&[], "not a lattice-gpu checkpoint");
    std::fs::write(&ck, &good).unwrap();
    fails_with(
        &[
            &base[..],
            &["--steps", "10", "--resume", ck.to_str().unwrap()],
        ]
        .concat(),
        "give --steps above 10",
    );
    fails_with(
        &[&base[..], &["--checkpoint-every", "0"]].concat(),
        "neither a number of steps nor a time",
    );
}

/// Over 2 and 3 ranks run as threads of this process (`--gpus N`, no MPI), the bytes of the one-domain
/// run; on the CPU engine always, on the GPU engine too where there is a GPU (ranks beyond the GPUs
/// there are share them, halos through host memory).
#[test]
fn over_threads_writes_the_one_domain_bytes() {
    for engine in common::engines("over_threads_writes_the_one_domain_bytes") {
        common::same_bytes_over_threads(
            "LATTICE_GPU_DIFFUSION_BIN",
            env!("CARGO_BIN_EXE_diffusion"),
            &["--engine", engine, "--size", "21x17x23", "--steps", "40"],
            "diffusion.npy",
            &format!("threads-diffusion-{engine}"),
        );
    }
}

/// Splits over more threads than the grid has planes, and `--gpus` with `--mpi`, are refused with the
/// reason.
#[test]
fn impossible_thread_splits_are_refused() {
    let dir = common::temp_dir("threads-refused-diffusion");
    let o = dir.join("out").to_string_lossy().to_string();
    let cases: [(&[&str], &str); 2] = [
        (
            &[
                "--engine", "host", "--gpus", "3", "--size", "8x8x2", "--steps", "2",
            ],
            "split over at most 2 ranks; give --gpus 2 or fewer",
        ),
        (
            &[
                "--engine", "host", "--gpus", "2", "--mpi", "--size", "8", "--steps", "2",
            ],
            "give one of them",
        ),
    ];
    for (args, needle) in cases {
        let a = [args, &["--output", &o]].concat();
        let (ok, text) = run(&a);
        assert!(!ok && text.contains(needle), "{a:?}:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ranks run as threads that open the GPU themselves (no `--engine`) fall back to the CPU alike
/// without one, and one line says so.
#[test]
fn the_fallback_to_the_cpu_is_said_once_for_all_ranks() {
    let test = "the_fallback_to_the_cpu_is_said_once_for_all_ranks";
    let dir = common::temp_dir("threads-notice-diffusion");
    let o = dir.join("out").to_string_lossy().to_string();
    common::fallback_said_once(
        "LATTICE_GPU_DIFFUSION_BIN",
        env!("CARGO_BIN_EXE_diffusion"),
        &[
            "--gpus", "3", "--size", "12", "--steps", "4", "--output", &o,
        ],
        test,
    );
    let _ = std::fs::remove_dir_all(&dir);
}
