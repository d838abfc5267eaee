//! The `lbm` binary on the CPU: a small run of each case leaves its files and its measurement; every
//! bad input (sizes, numbers, files, option combinations, checkpoints of another run) ends in a
//! message naming the fix and exit code 2 (the parser) or 1 (the run), never a panic, and writes
//! nothing. A diverging run stops at a check naming the step and the cell and writes nothing; SIGINT
//! and SIGTERM stop a run at a check with the shell's status, writing only a checkpoint; a failed
//! write leaves the previous run's files whole. Checkpoints: N steps then the rest resumed give the
//! bytes of a straight run in every precision and streaming scheme, at odd and even steps, on one rank,
//! over threads and across a change of the rank count, for runs of a fixed number of steps, runs to
//! steady state (which stop where the straight one does) and the Taylor-Green vortex (whose energy
//! samples the checkpoint carries). The memory estimate covers the measured peak, --gpus is bounded by
//! the z layers, and messages name the option that fixes them.
//!
//! Split over the threads of one process (`--gpus N`), on the CPU engine and, where there is one, the
//! GPU engine: the bytes of the one-domain run; impossible splits refused with the reason.

use std::path::{Path, PathBuf};

use lattice_gpu_testkit as common;

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
    // D3Q27 under the same rules: TRT at magic 3/16 puts halfway walls exactly where they are on both
    // sets.
    for set in ["d3q19", "d3q27"] {
        let (ok, text) = lbm(&[
            "poiseuille",
            "--engine",
            "host",
            "--velocities",
            set,
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
        assert!(ok && text.contains(&set.to_uppercase()), "{text}");
        assert!(common::number_after(&text, "parabola:") < 1e-4, "{text}");
    }
    let (ok, text) = lbm(&[
        "cavity", "--engine", "host", "--size", "18x18x1", "--re", "10", "--steps", "500",
        "--output", out,
    ]);
    assert!(ok, "{text}");
    // Schäfer and Turek's cylinder, coarse and short: the forces are sampled and reported.
    let (ok, text) = lbm(&[
        "cylinder",
        "--engine",
        "host",
        "--resolution",
        "10",
        "--u-max",
        "0.1",
        "--time",
        "5",
        "--output",
        out,
    ]);
    assert!(ok, "{text}");
    assert!(
        (4.0..9.0).contains(&common::number_after(&text, "c_D =")),
        "{text}"
    );
    let forces = std::fs::read_to_string(dir.join("forces.csv")).unwrap();
    assert_eq!(forces.lines().next(), Some("step,time,c_d,c_l"));
    assert_eq!(forces.lines().count(), 1 + 5 * 25, "{forces}");
    for f in [
        "velocity.npy",
        "density.npy",
        "fields.vtk",
        "speed.png",
        "centreline_u.csv",
        "centreline_v.csv",
        "profile.csv",
        "energy.csv",
        "forces.csv",
        "forces.png",
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

/// One bad input: its class, the command line (`{dir}` stands for the test's directory, which holds
/// the checkpoints it resumes from; `--engine host --output {dir}/out` is added after the case where
/// the line names neither), the exit code (2: the parser refused it; 1: the run did) and a piece of the
/// message.
struct Bad {
    class: &'static str,
    line: &'static str,
    code: i32,
    says: &'static str,
}

const fn bad(class: &'static str, line: &'static str, code: i32, says: &'static str) -> Bad {
    Bad {
        class,
        line,
        code,
        says,
    }
}

/// The resumes refused below continue these runs' checkpoints: `{dir}/c` a cavity of a fixed number
/// of steps at step 20, `{dir}/p` a channel run to steady state at step 20 (between two of its checks
/// 15 steps apart), `{dir}/tg` a Taylor-Green vortex of 60 steps (energy every 3 steps) at step 60,
/// `{dir}/c27` the cavity on D3Q27.
const CAVITY: &str = "cavity --size 12x10x4 --steps 20 --checkpoint-every 20";
const CAVITY27: &str = "cavity --size 12x10x4 --steps 20 --checkpoint-every 20 --velocities d3q27";
const CHANNEL: &str =
    "poiseuille --width 6 --extent 2x3 --check-every 15 --steady 1e-3 --max-steps 20 --checkpoint-every 20";
const VORTEX: &str = "taylor-green --size 8x8x2 --steps 60 --checkpoint-every 30";

const BAD: &[Bad] = &[
    // Sizes.
    bad("sizes", "cavity --size 2x40x1", 1, "at least 3x3x1"),
    bad("sizes", "cavity --size 0x8x8", 2, "is not a size"),
    bad("sizes", "taylor-green --size 100000x100000x1000", 1, "memory"),
    bad("sizes", "taylor-green --size 2x8x1", 1, "at least 4 cells"),
    bad("sizes", "poiseuille --width 1000000", 2, "give --width 65533 or less"),
    bad("sizes", "poiseuille --width 0", 2, "at least 1 fluid cell"),
    bad("sizes", "poiseuille --extent 100000x1", 1, "lower --width or --extent"),
    bad("sizes", "poiseuille --extent 4x3 --gpus 4", 1, "give --gpus 3 or fewer"),
    bad("sizes", "taylor-green --size 8x8x2 --gpus 30000", 1, "give --gpus 2 or fewer"),
    bad("sizes", "bench --sizes 2", 1, "16 to 65535"),
    bad("sizes", "cylinder --resolution 25", 1, "multiple of 10"),
    // Numbers.
    bad("numbers", "taylor-green --tau 0.5", 1, "above 0.5"),
    bad("numbers", "cylinder --u-max 0.3", 1, "must lie in (0, 0.15]"),
    bad("numbers", "cylinder --case 2d-2 --resolution 10 --u-max 0.01", 1, "use --resolution 60"),
    bad("numbers", "cylinder --time 1", 1, "outlast the inflow's ramp"),
    bad("numbers", "cylinder --case 2d-3", 2, "possible values: 2d-1, 2d-2"),
    bad("numbers", "taylor-green --tau 0.4 --steps 20", 1, "above 0.5"),
    bad("numbers", "taylor-green --steps 10", 1, "at least 20"),
    bad("numbers", "taylor-green --u0=0", 1, "give --u0 0.02"),
    bad("numbers", "taylor-green --u0=-0.01", 1, "give --u0 0.02"),
    bad("numbers", "taylor-green --u0=nan", 1, "give --u0 0.02"),
    bad("numbers", "cavity --lid 0.3", 1, "Mach 0.3"),
    bad("numbers", "cavity --lid -1e-1", 1, "lid speed -0.1 must be positive"),
    bad("numbers", "cavity --max-steps 0", 1, "--max-steps and --check-every must be at least 1"),
    bad("numbers", "cavity --steady=-1", 1, "--steady positive"),
    bad("numbers", "cavity --checkpoint-every 0", 2, "neither a number of steps nor a time"),
    bad("numbers", "cavity --checkpoint-every -3", 2, "neither a number of steps nor a time"),
    bad("numbers", "cavity --checkpoint-every 5x", 2, "give e.g. 1000 (steps), 30s"),
    // Files: checkpoints to resume from, and where checkpoints go.
    bad("files", "cavity --steps 40 --resume {dir}/none", 1, "there is no checkpoint there"),
    bad("files", "cavity --steps 40 --resume {dir}", 1, "give the directory a run wrote"),
    bad("files", "cavity --steps 40 --resume {dir}/c", 1, "{dir}/c/checkpoint holds one"),
    bad("files", "cavity --steps 40 --resume {dir}/corrupt.ckpt", 1, "fails its checksum"),
    bad("files", "cavity --steps 40 --resume {dir}/short.ckpt", 1, "it is truncated"),
    bad("files", "cavity --steps 40 --resume {dir}/foreign.npy", 1, "not a lattice-gpu checkpoint"),
    bad("files", "cavity --steps 40 --resume {dir}/diffusion.ckpt", 1, "not of `lbm`"),
    bad("files", "cavity --size 12x10x4 --steps 40 --resume {dir}/hollow.ckpt", 1, "no array `slot0`"),
    bad("files", "cavity --checkpoint {dir}/corrupt.ckpt", 1, "give --checkpoint another directory"),
    bad("files", "cavity --checkpoint {dir}/squat", 1, "is there and not a file"),
    // Resumes of another run, or to no more steps.
    bad("resume", "cavity --size 12x10x4 --steps 40 --re 50 --resume {dir}/c/checkpoint", 1,
        "re is 50 here and 100 there"),
    bad("resume", "cavity --size 12x10x4 --steps 40 --precision f64 --resume {dir}/c/checkpoint", 1,
        "precision is f64 here and f32 there"),
    bad("resume", "cavity --size 12x10x4 --steps 40 --streaming ab --resume {dir}/c/checkpoint", 1,
        "streaming is ab here and aa there"),
    bad("resume", "cavity --size 12x10x4 --steps 40 --velocities d3q27 --resume {dir}/c/checkpoint",
        1, "velocities is D3Q27 here and missing there"),
    bad("resume", "cavity --size 12x10x4 --steps 40 --resume {dir}/c27/checkpoint", 1,
        "its lattice is D3Q27 (resume with --velocities d3q27), and this run is D3Q19"),
    bad("resume", "cavity --size 12x10x6 --steps 40 --resume {dir}/c/checkpoint", 1,
        "size is 12x10x6 here and 12x10x4 there"),
    bad("resume", "cavity --size 12x10x4 --steps 40 --collision bgk --resume {dir}/c/checkpoint", 1,
        "collision is bgk here and trt there"),
    bad("resume", "cavity --size 12x10x4 --steps 40 --magic 0.1875 --resume {dir}/c/checkpoint", 1,
        "magic is 0.1875 here and 0.25 there"),
    bad("resume", "cavity --size 12x10x4 --steps 40 --lid 0.05 --resume {dir}/c/checkpoint", 1,
        "lid is 0.05 here and 0.1 there"),
    bad("resume", "cavity --size 12x10x4 --steps 40 --closed-z --resume {dir}/c/checkpoint", 1,
        "closed-z is true here and false there"),
    bad("resume", "cavity --size 12x10x4 --steps 20 --resume {dir}/c/checkpoint", 1,
        "give --steps above 20"),
    bad("resume", "cavity --size 12x10x4 --resume {dir}/c/checkpoint", 1,
        "until is steady here and steps there"),
    bad("resume", "poiseuille --width 6 --extent 2x3 --steps 40 --resume {dir}/c/checkpoint", 1,
        "case is poiseuille here and cavity there"),
    bad("resume", "poiseuille --width 6 --extent 2x3 --check-every 15 --steady 1e-3 --force 2e-6 \
        --resume {dir}/p/checkpoint", 1, "force is 0.000002,0,0 here and 0.000001,0,0 there"),
    bad("resume", "poiseuille --width 6 --extent 2x3 --check-every 15 --steady 1e-4 \
        --resume {dir}/p/checkpoint", 1, "steady is 0.0001 here and 0.001 there"),
    bad("resume", "poiseuille --width 6 --extent 2x3 --check-every 10 --steady 1e-3 \
        --resume {dir}/p/checkpoint", 1, "check-every is 10 here and 15 there"),
    bad("resume", "poiseuille --width 6 --extent 2x3 --check-every 15 --steady 1e-3 --max-steps 20 \
        --resume {dir}/p/checkpoint", 1, "give --max-steps above 20"),
    bad("resume", "poiseuille --width 7 --extent 2x3 --check-every 15 --steady 1e-3 \
        --resume {dir}/p/checkpoint", 1, "width is 7 here and 6 there"),
    bad("resume", "taylor-green --size 8x8x2 --steps 100 --u0 0.03 --resume {dir}/tg/checkpoint", 1,
        "u0 is 0.03 here and 0.02 there"),
    bad("resume", "taylor-green --size 8x8x2 --steps 100 --tau 0.9 --resume {dir}/tg/checkpoint", 1,
        "tau is 0.9 here and 0.8 there"),
    bad("resume", "taylor-green --size 8x8x2 --steps 80 --resume {dir}/tg/checkpoint", 1,
        "every 4 steps, which it lacks; give --steps whose twentieth is a multiple of 3, e.g. --steps 120"),
    // Options.
    bad("options", "vortex-street", 2, "unrecognized subcommand"),
    bad("options", "taylor-green --cut", 1, "--cut splits the steps of a decomposed run"),
    bad("options", "cavity --gpus 2 --mpi", 1, "give one of them"),
    bad("options", "cavity --gpu 1", 2, "lbm has no --gpu"),
    bad("options", "cavity --collision bgk --magic 0.1", 1, "--collision bgk has none"),
    bad("options", "cavity --steps 10 --steady 1e-3", 2, "cannot be used with"),
    bad("options", "poiseuille --steps 10 --max-steps 100", 2, "cannot be used with"),
];

/// Every file under `dir` with its bytes, sorted by path.
fn tree(dir: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        match p.is_dir() {
            true => {
                all.push((p.clone(), None));
                all.extend(tree(&p));
            }
            false => all.push((p.clone(), Some(std::fs::read(&p).unwrap()))),
        }
    }
    all.sort();
    all
}

/// Runs the binary with `args` in `dir`, failing the test unless it succeeds; its output.
fn succeeds_in(dir: &Path, args: &[&str]) -> String {
    let bin = common::binary("LATTICE_GPU_LBM_BIN", env!("CARGO_BIN_EXE_lbm"));
    common::succeeds_in(&bin, dir, args, &[])
}

#[test]
fn every_bad_input_is_named_with_its_exit_code_and_writes_nothing() {
    let dir = temp_dir("bad");
    let d = dir.to_str().unwrap();
    for (line, out) in [
        (CAVITY, "c"),
        (CHANNEL, "p"),
        (VORTEX, "tg"),
        (CAVITY27, "c27"),
    ] {
        let mut args = words(line);
        args.extend(["--engine", "host", "--output", out]);
        succeeds_in(&dir, &args);
    }
    let good = std::fs::read(dir.join("c/checkpoint/lbm.ckpt")).unwrap();
    let mut corrupt = good.clone();
    *corrupt.last_mut().unwrap() ^= 0x40;
    std::fs::write(dir.join("corrupt.ckpt"), &corrupt).unwrap();
    std::fs::write(dir.join("short.ckpt"), &good[..good.len() - 100]).unwrap();
    std::fs::write(
        dir.join("foreign.npy"),
        b"\x93NUMPY\x01\x00 not a checkpoint",
    )
    .unwrap();
    std::fs::write(
        dir.join("diffusion.ckpt"),
        "lattice-gpu checkpoint 1\napplication diffusion\nstep 3\nend\n",
    )
    .unwrap();
    // The cavity's parameters without its lattice.
    let text = String::from_utf8_lossy(&good);
    let header: String = text
        .lines()
        .take_while(|l| !l.starts_with("array"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.join("hollow.ckpt"), header + "end\n").unwrap();
    std::fs::create_dir_all(dir.join("squat/lbm.ckpt")).unwrap();
    let before = tree(&dir);
    let bin = common::binary("LATTICE_GPU_LBM_BIN", env!("CARGO_BIN_EXE_lbm"));
    for b in BAD {
        let line = b.line.replace("{dir}", d);
        let mut args: Vec<String> = line.split_whitespace().map(String::from).collect();
        let out = dir.join("out");
        if ["cavity", "poiseuille", "taylor-green"].contains(&args[0].as_str()) {
            for (opt, value) in [("--engine", "host"), ("--output", out.to_str().unwrap())] {
                if !args.iter().any(|a| a == opt) {
                    args.splice(1..1, [opt.to_string(), value.to_string()]);
                }
            }
        }
        let output = std::process::Command::new(&bin)
            .args(&args)
            .current_dir(&dir)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stderr).to_string()
            + &String::from_utf8_lossy(&output.stdout);
        let what = format!("{}: lbm {}", b.class, args.join(" "));
        assert!(!text.contains("panicked"), "{what}: panic:\n{text}");
        assert_eq!(output.status.code(), Some(b.code), "{what}:\n{text}");
        let says = b.says.replace("{dir}", d);
        assert!(
            text.contains(&says),
            "{what}: expected `{says}` in:\n{text}"
        );
        // Refused before the run's header, or a warning the refusal would contradict.
        assert!(
            !text.contains(" cells, ") && !text.contains("warning:"),
            "{what}: started before refusing:\n{text}"
        );
        assert!(!out.exists(), "{what}: made the output directory");
        assert!(tree(&dir) == before, "{what}: changed or left files");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The words of `line`: a command line without quoting.
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// Fails unless `lbm args` fails with every one of `want` in its output; the output.
fn refused(args: &[&str], want: &[&str]) -> String {
    let (ok, text) = lbm(args);
    assert!(!ok, "lbm {args:?} should fail:\n{text}");
    for w in want {
        assert!(text.contains(w), "lbm {args:?}: expected `{w}` in:\n{text}");
    }
    text
}

/// A directory `out` (in a fresh `dir`) holding a previous run's files: `(dir, out)`.
fn previous_run(name: &str) -> (PathBuf, PathBuf) {
    let dir = temp_dir(name);
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("velocity.npy"), "the previous run's").unwrap();
    std::fs::write(out.join("centreline_u.csv"), "the previous run's").unwrap();
    (dir, out)
}

/// Fails unless `out` holds the files [`previous_run`] left, untouched, and `extra`, and nothing
/// temporary is left beside or in it.
fn previous_run_kept(dir: &Path, out: &Path, extra: &[&str]) {
    let mut names: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut want: Vec<String> = ["centreline_u.csv", "velocity.npy"]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect();
    want.sort();
    assert_eq!(names, want);
    for f in ["velocity.npy", "centreline_u.csv"] {
        assert_eq!(
            std::fs::read_to_string(out.join(f)).unwrap(),
            "the previous run's"
        );
    }
    assert!(common::temporaries(dir).is_empty() && common::temporaries(out).is_empty());
}

#[test]
fn a_diverging_run_stops_at_a_check_names_step_and_cell_and_writes_nothing() {
    let (dir, out) = previous_run("diverged");
    let o = out.to_str().unwrap();
    // Re 10^6 on 16 fluid cells puts tau at 1/2 + 5e-6: NaN within a few hundred steps.
    let cavity = "cavity --engine host --re 1e6 --check-every 20";
    for extra in [
        "--size 18x18x1 --steps 2000",
        // Run to steady state: a NaN flow must not pass for a steady one.
        "--size 18x18x1",
        "--size 18x18x1 --steps 2000 --precision f64 --streaming ab",
        // Split over threads, the ranks stop together at the same check.
        "--size 18x18x2 --steps 2000 --gpus 2",
    ] {
        let mut args = words(cavity);
        args.extend(words(extra));
        args.extend(["--output", o]);
        let text = refused(
            &args,
            &[
                "the run diverged: the density is NaN at cell (x, y, z) = (",
                "wrote no results",
                "lower --re",
            ],
        );
        let step = common::number_after(&text, "after step");
        assert!(
            step > 0.0 && step % 20.0 == 0.0 && step < 2000.0,
            "{extra}: not at a check:\n{text}"
        );
        assert!(
            !text.contains("steady after") && !text.contains(".npy"),
            "{extra}: {text}"
        );
        previous_run_kept(&dir, &out, &[]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The files a run wrote into `dir/out` (its checkpoints apart), by name, with their bytes.
fn results(dir: &Path, out: &str) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir.join(out))
        .unwrap_or_else(|e| panic!("{out}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{out} holds {} files", files.len());
    files
}

/// Fails unless the runs into `dir/a` and `dir/b` wrote the same files with the same bytes.
fn same_results(dir: &Path, a: &str, b: &str, what: &str) {
    let (x, y) = (results(dir, a), results(dir, b));
    let names = |v: &[(String, Vec<u8>)]| v.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(&x), names(&y), "{what}");
    for ((name, p), (_, q)) in x.iter().zip(&y) {
        assert!(p == q, "{what}: {name} of {b} differs from {a}'s");
    }
}

#[test]
fn sigint_and_sigterm_write_a_checkpoint_that_resumes_to_the_straight_runs_bytes() {
    let dir = temp_dir("signals");
    let bin = common::binary("LATTICE_GPU_LBM_BIN", env!("CARGO_BIN_EXE_lbm"));
    // The runs must outlast the signal's 300 ms: an optimised build steps some 30 times faster, so it
    // gets larger ones (about 2 and 4 s).
    let release = !cfg!(debug_assertions);
    let (width, vortex) = match release {
        true => ("64", "--size 32x32x2 --steps 20000"),
        false => ("16", "--size 8x8x2 --steps 4000"),
    };
    let steady = format!(
        "poiseuille --engine host --width {width} --extent 2x4 --check-every 10 --steady 1e-6"
    );
    let decaying = format!("taylor-green --engine host {vortex}");
    for (line, signal, code) in [
        // Far more steps than run before the signal, checked every 10.
        (
            "cavity --engine host --size 20x20x4 --steps 100000000 --check-every 10",
            "INT",
            130,
        ),
        // To steady state (2760 steps at width 16): the resumed run must stop where the straight one
        // does.
        (steady.as_str(), "TERM", 143),
        // A check at each of the 20 samples of the energy, whose first ones the checkpoint carries.
        (decaying.as_str(), "TERM", 143),
    ] {
        let _ = std::fs::remove_dir_all(dir.join("out"));
        let mut args = words(line);
        args.extend(["--output", "out"]);
        let (got, text) = common::signalled(
            &bin,
            &args,
            &dir,
            " cells, ",
            std::time::Duration::from_millis(300),
            signal,
        );
        assert_eq!(got, Some(code), "{line}:\n{text}");
        assert!(
            text.contains(&format!("stopped by SIG{signal} after step")),
            "{line}:\n{text}"
        );
        let step = common::number_after(&text, "checkpoint of step") as u64;
        assert!(
            text.contains("continue the run with the same options and --resume out/checkpoint"),
            "{line}:\n{text}"
        );
        // Only the checkpoint: the run's results were not written.
        let left: Vec<String> = std::fs::read_dir(dir.join("out"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["checkpoint"], "{line}:\n{text}");
        assert!(common::temporaries(&dir.join("out")).is_empty());
        // A fixed number of steps continues to a total of the step plus an odd number, over threads,
        // which the stopped run was not split over; the others to the end they had, on one rank (on
        // the CPU a thread split's exchanges cost more than these small grids' steps).
        let total = (step + 11).to_string();
        let end: Vec<&str> = words(line)
            .into_iter()
            .map(|w| if w == "100000000" { total.as_str() } else { w })
            .collect();
        let mut resumed = end.clone();
        resumed.extend(["--resume", "out/checkpoint", "--output", "resumed"]);
        if line.starts_with("cavity") {
            resumed.extend(["--gpus", "2"]);
        }
        let text = succeeds_in(&dir, &resumed);
        assert!(
            text.contains(&format!(
                "resuming from step {step} of out/checkpoint/lbm.ckpt"
            )),
            "{text}"
        );
        let mut straight = end.clone();
        straight.extend(["--output", "straight"]);
        let first = succeeds_in(&dir, &straight);
        same_results(&dir, "straight", "resumed", line);
        if line.starts_with("poiseuille") {
            let at = |t: &str| common::number_after(t, "steady after");
            assert_eq!(at(&text), at(&first), "{text}\n{first}");
        }
        for out in ["straight", "resumed"] {
            let _ = std::fs::remove_dir_all(dir.join(out));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `run` (a command line with `{out}` for the output) straight to its end (`end`: the options that
/// set it), and stopped where it writes its checkpoint (`half`: the options that stop it there) on
/// one rank and on 2 threads, then resumed to its end on one rank and on 3 threads: the resumed runs'
/// files must be those of the straight run, and the checkpoints the same bytes whatever the ranks
/// that wrote them. The straight run's output.
fn resumes_bit_for_bit(dir: &Path, run: &str, end: &str, half: &str, what: &str) -> String {
    let line = |out: &str, extra: &str| -> Vec<String> {
        format!("{} {extra}", run.replace("{out}", out))
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    let go = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        succeeds_in(dir, &args)
    };
    let straight = go(line("straight", end));
    go(line("one", half));
    go(line("two", &format!("{half} --gpus 2")));
    let ck = |out: &str| std::fs::read(dir.join(out).join("checkpoint/lbm.ckpt")).unwrap();
    assert!(
        ck("one") == ck("two"),
        "{what}: the checkpoints of 1 and 2 ranks differ"
    );
    for (from, ranks) in [("one", "1"), ("two", "3")] {
        let text = go(line(
            "resumed",
            &format!("{end} --resume {from}/checkpoint --gpus {ranks}"),
        ));
        assert!(text.contains("resuming from step"), "{text}");
        same_results(dir, "straight", "resumed", &format!("{what} from {from}"));
        let _ = std::fs::remove_dir_all(dir.join("resumed"));
    }
    for out in ["straight", "one", "two"] {
        let _ = std::fs::remove_dir_all(dir.join(out));
    }
    straight
}

#[test]
fn a_resumed_run_gives_the_bytes_of_a_straight_one() {
    let dir = temp_dir("resume");
    // Closed in z, so that the split planes hold walls; a checkpoint at an odd step (the in-place
    // lattice holds its populations streamed then) and at an even one.
    for precision in ["f64", "f32", "f16"] {
        for streaming in ["ab", "aa"] {
            for half in [11, 12] {
                let run = format!(
                    "cavity --engine host --size 10x9x7 --closed-z --re 20 --precision {precision} \
                     --streaming {streaming} --output {{out}}"
                );
                let stop = format!("--steps {half} --checkpoint-every {half}");
                let what = format!("{precision} {streaming} from step {half}");
                resumes_bit_for_bit(&dir, &run, "--steps 24", &stop, &what);
            }
        }
    }
    // A body between an inlet and an outlet with free-slip sides: after an odd step the slip cells hold
    // the mirrored populations the next step reads; the checkpoint keeps the force samples. Its links
    // interpolated, the wall cells hold copies for the in-place scheme, some in a split's halo planes;
    // a non-reflecting outlet keeps its reference velocities in the outlet cells.
    let rules = [
        "halfway",
        "interpolated --outlet non-reflecting --outlet-memory 0.5",
        "interpolated --outlet non-reflecting --outlet-memory 0.5 --velocities d3q27",
    ];
    for (half, rule) in [11, 12].into_iter().flat_map(|h| rules.map(|r| (h, r))) {
        let run = format!(
            "obstacle --engine host --size 16x9x7 --sides slip --sphere 6,4,3,1.5 --re 10 \
             --force-every 3 --bounce-back {rule} --output {{out}}"
        );
        let stop = format!("--steps {half} --checkpoint-every {half}");
        resumes_bit_for_bit(
            &dir,
            &run,
            "--steps 24",
            &stop,
            &format!("obstacle {rule} from {half}"),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_resumed_run_to_steady_state_stops_where_the_straight_one_does() {
    let dir = temp_dir("resume-steady");
    let run = "poiseuille --engine host --width 8 --extent 2x4 --check-every 10 --steady 1e-4 \
               --output {out}";
    // Between the last two checks (the checkpoint keeps the moments of the one before, which the
    // last compares with; the run it stops does not call itself steady on the 5 steps since), and
    // at the one before the last.
    for at in [485, 480] {
        let stop = format!("--max-steps {at} --checkpoint-every {at}");
        let text = resumes_bit_for_bit(&dir, run, "", &stop, &format!("steady from {at}"));
        assert!(text.contains("steady after 490 steps"), "{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_resumed_taylor_green_run_keeps_its_energy_samples() {
    let dir = temp_dir("resume-vortex");
    for precision in ["f32", "f16"] {
        // Straight: the energy every 3 steps; the first half every step, of which those go on.
        let run = format!(
            "taylor-green --engine host --size 8x8x4 --precision {precision} --output {{out}}"
        );
        let half = "--steps 30 --checkpoint-every 30";
        resumes_bit_for_bit(&dir, &run, "--steps 60", half, precision);
        // Time-driven checkpoints come at checks; the last of them continues to the straight run.
        let base = format!("taylor-green --engine host --size 8x8x4 --precision {precision}");
        let text = succeeds_in(
            &dir,
            &words(&format!(
                "{base} --steps 30 --checkpoint-every 0.001s --output t"
            )),
        );
        assert!(
            text.contains("checkpoints written, the last checkpoint of step"),
            "{text}"
        );
        let text = succeeds_in(
            &dir,
            &words(&format!(
                "{base} --steps 60 --resume t/checkpoint --output r"
            )),
        );
        assert!(text.contains("resuming from step"), "{text}");
        succeeds_in(&dir, &words(&format!("{base} --steps 60 --output s")));
        same_results(&dir, "s", "r", &format!("{precision} by time"));
        for out in ["t", "r", "s"] {
            let _ = std::fs::remove_dir_all(dir.join(out));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_memory_estimate_covers_the_measured_peak() {
    let bin = common::binary("LATTICE_GPU_LBM_BIN", env!("CARGO_BIN_EXE_lbm"));
    // Two f64 lattices for a fixed number of steps; one in-place f32 lattice run to steady state,
    // which keeps the moments of the check before beside the new ones. Each writes a checkpoint (as
    // a signal makes every run write one), which the estimate counts beside the moments read after.
    for line in [
        "--precision f64 --streaming ab --size 100x100x30 --steps 1 --checkpoint-every 1",
        "--precision f32 --streaming aa --size 100x100x60 --max-steps 2 --check-every 1 \
         --checkpoint-every 1",
    ] {
        let dir = temp_dir("memory");
        let command = format!("cavity --engine host --output out {line}");
        let [est, _, got, _] = common::measured(&bin, &words(&command), &dir);
        // The checkpoint's copy is freed by its writer thread, which may finish before the moments
        // are read or after: the measured peak holds it or not, so the estimate may be 1.4x.
        common::estimate_holds(est, got, 1.5, &format!("lbm cavity {line}"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn more_gpus_than_z_layers_are_refused_before_a_thread_starts() {
    let t = std::time::Instant::now();
    refused(
        &words("taylor-green --engine host --size 8x8x2 --gpus 30000"),
        &["--size 8x8x2", "give --gpus 2 or fewer"],
    );
    refused(
        &words("poiseuille --engine host --extent 4x3 --gpus 4"),
        &["--extent 4x3", "give --gpus 3 or fewer"],
    );
    assert!(t.elapsed().as_secs_f64() < 2.0);
}

#[test]
fn a_failed_write_leaves_the_previous_outputs_whole() {
    let (dir, out) = previous_run("all-or-nothing");
    // A directory where the picture goes: the commit fails, and must move nothing.
    std::fs::create_dir(out.join("speed.png")).unwrap();
    let mut args = words("cavity --engine host --size 10x10x1 --steps 20 --output");
    args.push(out.to_str().unwrap());
    refused(&args, &["speed.png", "not a regular file"]);
    previous_run_kept(&dir, &out, &["speed.png"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn messages_name_the_option_that_fixes_it() {
    // The channel's width is --width; poiseuille has no --size.
    let text = refused(
        &words("poiseuille --engine host --width 1000000"),
        &["--width", "give --width 65533 or less"],
    );
    assert!(!text.contains("--size"), "{text}");
    // A vortex at rest has no decay rate to measure: refused before the run, never a NaN result.
    let text = refused(
        &words("taylor-green --engine host --u0=0"),
        &["amplitude", "give --u0 0.02"],
    );
    assert!(!text.contains(" cells, "), "{text}");
    // lbm has no --gpu: the refusal says how to choose the GPU, and so does --help.
    refused(
        &words("cavity --engine host --gpu 1"),
        &["lbm has no --gpu", "CUDA_VISIBLE_DEVICES"],
    );
    let (ok, help) = lbm(&["cavity", "--help"]);
    assert!(ok && help.contains("CUDA_VISIBLE_DEVICES"), "{help}");
    // The checkpoint options are documented where they are.
    for case in ["cavity", "poiseuille", "taylor-green"] {
        let (ok, help) = lbm(&[case, "--help"]);
        for option in [
            "--checkpoint-every <N|TIME>",
            "--checkpoint <DIR>",
            "--resume <DIR>",
        ] {
            assert!(
                ok && help.contains(option),
                "{case} --help lacks {option}:\n{help}"
            );
        }
    }
    // The halo options of a split run change nothing on one rank: said, not refused, since scripts
    // give one command line to a run and to its split twin.
    let dir = temp_dir("unsplit");
    let mut args = words("cavity --engine host --size 10x10x1 --steps 20 --no-overlap --output");
    args.push(dir.to_str().unwrap());
    let (ok, text) = lbm(&args);
    assert!(
        ok && text.contains("notice: --no-overlap sets how a split run exchanges its halos"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_gpu_run_tunes_its_block_once_then_takes_it_from_the_tune_cache() {
    let Some(_gpu) =
        common::gpu("a_gpu_run_tunes_its_block_once_then_takes_it_from_the_tune_cache")
    else {
        return;
    };
    let dir = temp_dir("tune-cache");
    let cache = dir.join("tunecache.tsv");
    let bin = common::binary("LATTICE_GPU_LBM_BIN", env!("CARGO_BIN_EXE_lbm"));
    let run = |extra: &[&str]| {
        let args = [
            &words("cavity --engine device --size 32x32x32 --steps 400 --output out")[..],
            extra,
        ]
        .concat();
        common::succeeds_in(
            &bin,
            &dir,
            &args,
            &[("LATTICE_GPU_TUNE_CACHE", cache.as_os_str())],
        )
    };
    let first = run(&[]);
    assert!(first.contains("tuned on the run's first"), "{first}");
    let text = std::fs::read_to_string(&cache).unwrap();
    // The cavity's walls: its tags' hash keys it apart from other lattices of its size.
    assert!(text.contains("lbm_step[aa]\t32x32x32,tags="), "{text}");
    assert!(text.contains("\tf32\t"), "{text}");
    assert!(run(&[]).contains("from the tune cache"));
    assert!(run(&["--retune"]).contains("tuned on the run's first"));
    // Without the file, the run tunes and leaves the cache as it was.
    let before = std::fs::read_to_string(&cache).unwrap();
    assert!(run(&["--no-tune-cache"]).contains("tuned on the run's first"));
    assert_eq!(std::fs::read_to_string(&cache).unwrap(), before);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Over 2 and 3 ranks run as threads of this process (`--gpus N`, no MPI), the bytes of the one-domain
/// run; on the CPU engine always, on the GPU engine too where there is a GPU (ranks beyond the GPUs
/// there are share them, halos through host memory).
#[test]
fn over_threads_writes_the_one_domain_bytes() {
    for engine in common::engines("over_threads_writes_the_one_domain_bytes") {
        common::same_bytes_over_threads(
            "LATTICE_GPU_LBM_BIN",
            env!("CARGO_BIN_EXE_lbm"),
            &[
                "cavity",
                "--engine",
                engine,
                "--streaming",
                "ab",
                "--precision",
                "f64",
                "--size",
                "18x18x11",
                "--closed-z",
                "--re",
                "20",
                "--steps",
                "120",
            ],
            "velocity.npy",
            &format!("threads-lbm-{engine}"),
        );
    }
}

/// A split over more threads than the grid has planes is refused with the reason.
#[test]
fn impossible_thread_splits_are_refused() {
    let dir = temp_dir("threads-refused");
    let o = dir.join("out").to_string_lossy().to_string();
    let a = [
        "taylor-green",
        "--engine",
        "host",
        "--gpus",
        "3",
        "--size",
        "16x16x2",
        "--steps",
        "20",
        "--output",
        &o,
    ];
    let (ok, text) = lbm(&a);
    assert!(
        !ok && text.contains("give --gpus 2 or fewer"),
        "{a:?}:\n{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes a `.npy` mask of uint8 (`'|u1'`) of `shape`, as `numpy.save` does.
fn write_mask(path: &Path, shape: &[usize], data: &[u8]) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let tuple = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '|u1', 'fortran_order': False, 'shape': {tuple}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    bytes.extend(data);
    std::fs::write(path, bytes).unwrap();
}

/// A closed UV sphere of `rings` x `2 rings` quads (the poles as fans) as ASCII STL.
fn sphere_stl(centre: [f64; 3], radius: f64, rings: usize) -> String {
    let point = |i: usize, j: usize| {
        // The poles exactly: sin(pi) is not 0 in floating point, and the fan would not close.
        if i == 0 || i == rings {
            return [
                centre[0],
                centre[1],
                centre[2] + if i == 0 { radius } else { -radius },
            ];
        }
        let (th, ph) = (
            std::f64::consts::PI * i as f64 / rings as f64,
            std::f64::consts::PI * j as f64 / rings as f64,
        );
        [
            centre[0] + radius * th.sin() * ph.cos(),
            centre[1] + radius * th.sin() * ph.sin(),
            centre[2] + radius * th.cos(),
        ]
    };
    let mut facets = Vec::new();
    let mut facet = |a: [f64; 3], b: [f64; 3], c: [f64; 3]| facets.push([a, b, c]);
    for i in 0..rings {
        for j in 0..2 * rings {
            let k = (j + 1) % (2 * rings);
            let (a, b, c, d) = (point(i, j), point(i + 1, j), point(i + 1, k), point(i, k));
            if i > 0 {
                facet(a, b, d);
            }
            if i + 1 < rings {
                facet(b, c, d);
            }
        }
    }
    ascii_stl("sphere", &facets)
}

/// An ASCII STL of `facets` (their normals left to the reader).
fn ascii_stl(name: &str, facets: &[[[f64; 3]; 3]]) -> String {
    let mut s = format!("solid {name}\n");
    for f in facets {
        s += "facet normal 0 0 0\nouter loop\n";
        for v in f {
            s += &format!("vertex {} {} {}\n", v[0], v[1], v[2]);
        }
        s += "endloop\nendfacet\n";
    }
    s + &format!("endsolid {name}\n")
}

/// A sphere in a wind tunnel from its shape, from a voxel mask of the same nodes and from an STL
/// surface: the shape and the mask give the same bytes (forces and fields); the STL the drag within
/// what its voxelisation changes; the forces over 2 and 3 thread ranks are the one domain's bytes.
#[test]
fn a_body_from_a_shape_a_mask_or_an_stl_gives_the_same_flow() {
    let dir = temp_dir("obstacle");
    let d = |s: &str| dir.join(s).to_string_lossy().to_string();
    let [nx, ny, nz] = [40usize, 20, 20];
    let (centre, radius) = ([12.0, 9.5, 9.5], 4.0);
    let common = [
        "obstacle",
        "--engine",
        "host",
        "--u-in",
        "0.05",
        "--re",
        "20",
        "--steps",
        "600",
        "--force-every",
        "50",
    ];
    let run = |body: &[&str], out: &str| {
        let mut a = common.to_vec();
        a.extend(body);
        let o = d(out);
        a.extend(["--output", &o]);
        let (ok, text) = lbm(&a);
        assert!(ok, "lbm {a:?}:\n{text}");
        text
    };
    let text = run(&["--size", "40x20x20", "--sphere", "12,9.5,9.5,4"], "shape");
    // 4 x 4 x 4 nodes around the centre (half coordinates) in reach of radius 4: 257 cells.
    assert!(text.contains("Sphere"), "{text}");
    let cd = common::number_after(&text, "c_D =");
    assert!((1.0..20.0).contains(&cd), "{text}");
    let forces = std::fs::read_to_string(dir.join("shape/forces.csv")).unwrap();
    assert_eq!(
        forces.lines().next(),
        Some("step,time,f_x,f_y,f_z,c_d,c_l_y,c_l_z")
    );
    assert_eq!(forces.lines().count(), 1 + 600 / 50, "{forces}");
    for f in ["forces.png", "fields.vtk", "speed.png", "velocity.npy"] {
        assert!(dir.join("shape").join(f).is_file(), "{f}");
    }
    let vtk =
        String::from_utf8_lossy(&std::fs::read(dir.join("shape/fields.vtk")).unwrap()).to_string();
    assert!(
        vtk.contains("cell_type"),
        "the VTK file carries the cells' kinds"
    );

    let mask: Vec<u8> = (0..nx * ny * nz)
        .map(|n| {
            let p = [n % nx, n / nx % ny, n / (nx * ny)];
            let r2: f64 = (0..3).map(|a| (p[a] as f64 - centre[a]).powi(2)).sum();
            u8::from(r2 <= radius * radius)
        })
        .collect();
    write_mask(&dir.join("sphere.npy"), &[nz, ny, nx], &mask);
    let m = d("sphere.npy");
    run(&["--mask", &m], "mask");
    for f in ["forces.csv", "velocity.npy", "density.npy"] {
        let a = std::fs::read(dir.join("shape").join(f)).unwrap();
        let b = std::fs::read(dir.join("mask").join(f)).unwrap();
        assert!(a == b, "{f}: the mask's run differs from the shape's");
    }

    // The surface of the same sphere: its nodes differ only within the facets' distance from the
    // sphere, a few percent of the drag at 8 cells across.
    std::fs::write(dir.join("sphere.stl"), sphere_stl([0.0; 3], 1.0, 48)).unwrap();
    let s = d("sphere.stl");
    let text = run(
        &[
            "--size",
            "40x20x20",
            "--stl",
            &s,
            "--body-size",
            "8",
            "--centre",
            "12,9.5,9.5",
        ],
        "stl",
    );
    assert!(!text.contains("not closed"), "{text}");
    let stl_cd = common::number_after(&text, "c_D =");
    assert!((stl_cd / cd - 1.0).abs() < 0.05, "shape {cd}, STL {stl_cd}");

    // Free-slip sides (mirrored links across the cuts) and a parabolic inflow in a duct.
    let sides = [["slip", "uniform"], ["walls", "parabolic"]];
    for (engine, [side, profile]) in
        common::engines("a_body_from_a_shape_a_mask_or_an_stl_gives_the_same_flow")
            .into_iter()
            .flat_map(|e| sides.map(|s| (e, s)))
    {
        let mut a = common.to_vec();
        a[2] = engine;
        a.extend([
            "--size",
            "40x20x20",
            "--sides",
            side,
            "--profile",
            profile,
            "--sphere",
            "12,9.5,9.5,4",
        ]);
        common::same_bytes_over_threads(
            "LATTICE_GPU_LBM_BIN",
            env!("CARGO_BIN_EXE_lbm"),
            &a,
            "forces.csv",
            &format!("threads-obstacle-{engine}-{side}"),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A closed cylinder along z as an ASCII STL: `segments` sides around, its caps fans from their
/// centres.
fn cylinder_stl(radius: f64, [z0, z1]: [f64; 2], segments: usize) -> String {
    let at = |j: usize, z: f64| {
        let t = 2.0 * std::f64::consts::PI * j as f64 / segments as f64;
        [radius * t.cos(), radius * t.sin(), z]
    };
    let facets: Vec<[[f64; 3]; 3]> = (0..segments)
        .flat_map(|j| {
            let k = (j + 1) % segments;
            [
                [at(j, z0), at(k, z0), at(k, z1)],
                [at(j, z0), at(k, z1), at(j, z1)],
                [[0.0, 0.0, z0], at(k, z0), at(j, z0)],
                [[0.0, 0.0, z1], at(j, z1), at(k, z1)],
            ]
        })
        .collect();
    ascii_stl("cylinder", &facets)
}

/// A cylinder of finite length across a duct from a voxel mask of its nodes and from an STL surface:
/// the same drag within what the facets change at 8 cells across (halfway bounce-back on both; here
/// the STL's voxels are the mask's, c_D 11.170 both), and with the STL's links interpolated, within
/// what the staircase changes (11.299).
#[test]
fn a_cylinder_from_a_mask_or_an_stl_gives_the_same_drag() {
    let dir = temp_dir("cylinder-stl");
    let d = |s: &str| dir.join(s).to_string_lossy().to_string();
    let [nx, ny, nz] = [40usize, 20, 20];
    let (axis, radius, ends) = ([12.0, 9.5], 4.0, [4.5, 14.5]);
    let mask: Vec<u8> = (0..nx * ny * nz)
        .map(|n| {
            let p = [n % nx, n / nx % ny, n / (nx * ny)].map(|v| v as f64);
            let r2 = (p[0] - axis[0]).powi(2) + (p[1] - axis[1]).powi(2);
            u8::from(r2 <= radius * radius && (ends[0]..=ends[1]).contains(&p[2]))
        })
        .collect();
    write_mask(&dir.join("cylinder.npy"), &[nz, ny, nx], &mask);
    // Unit length: --body-size 10 makes it 10 cells long and 4 in radius.
    std::fs::write(dir.join("cylinder.stl"), cylinder_stl(0.4, [-0.5, 0.5], 96)).unwrap();
    let (m, stl) = (d("cylinder.npy"), d("cylinder.stl"));
    let drag = |body: &[&str], out: &str| {
        let o = d(out);
        let mut a = vec![
            "obstacle",
            "--engine",
            "host",
            "--sides",
            "walls",
            "--u-in",
            "0.05",
            "--re",
            "20",
            "--steps",
            "600",
            "--force-every",
            "50",
            "--output",
            &o,
        ];
        a.extend(body);
        let (ok, text) = lbm(&a);
        assert!(ok && !text.contains("not closed"), "lbm {a:?}:\n{text}");
        common::number_after(&text, "c_D =")
    };
    let placed = ["--body-size", "10", "--centre", "12,9.5,9.5"];
    let masked = drag(&["--mask", &m], "mask");
    let mut args = vec!["--size", "40x20x20", "--stl", &stl];
    args.extend(placed);
    let halfway = drag(&args, "stl");
    args.extend(["--bounce-back", "interpolated"]);
    let interpolated = drag(&args, "stl-interpolated");
    assert!((1.0..20.0).contains(&masked), "{masked}");
    assert!(
        (halfway / masked - 1.0).abs() < 0.01,
        "mask {masked}, STL {halfway}"
    );
    assert!(
        (interpolated / masked - 1.0).abs() < 0.03 && interpolated != halfway,
        "mask {masked}, STL interpolated {interpolated}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Bodies that cannot be: refused with the reason and the fix, nothing written.
#[test]
fn bad_bodies_are_refused_with_the_fix() {
    let dir = temp_dir("obstacle-bad");
    let d = |s: &str| dir.join(s).to_string_lossy().to_string();
    write_mask(&dir.join("flat.npy"), &[20, 40], &[0; 800]);
    write_mask(&dir.join("empty.npy"), &[4, 8, 10], &[0; 320]);
    std::fs::write(
        dir.join("garbage.stl"),
        b"solid x\nfacet normal 0 0 nonsense\n",
    )
    .unwrap();
    // A tetrahedron without one of its faces.
    std::fs::write(
        dir.join("open.stl"),
        "solid t\nfacet normal 0 0 0\nouter loop\nvertex 0 0 0\nvertex 1 0 0\nvertex 0 1 0\nendloop\nendfacet\n\
         facet normal 0 0 0\nouter loop\nvertex 0 0 0\nvertex 0 0 1\nvertex 1 0 0\nendloop\nendfacet\n\
         facet normal 0 0 0\nouter loop\nvertex 0 0 0\nvertex 0 1 0\nvertex 0 0 1\nendloop\nendfacet\n\
         endsolid t\n",
    )
    .unwrap();
    let o = d("out");
    let base = [
        "obstacle", "--engine", "host", "--size", "40x20x20", "--output", &o,
    ];
    let cases: &[(&[&str], &str)] = &[
        (&[], "--sphere <SPHERE>|--cylinder"),
        (&["--sphere", "3,9,9,2"], "inlet or outlet"),
        (&["--sphere", "12,9,9"], "must be 4 comma-separated numbers"),
        (
            &["--sphere", "12,9,9,3", "--profile", "parabolic"],
            "give --sides walls",
        ),
        (&["--sphere", "12,9,9,3", "--re", "5000"], "cells across"),
        (&["--sphere", "12,9,9,3", "--u-in", "0.3"], "(0, 0.15]"),
        (&["--sphere", "12,9,9,30"], "beyond the grid"),
        (&["--stl", "nothing.stl"], "nothing.stl"),
        (&["--stl", &d("garbage.stl")], "garbage.stl"),
        (
            &[
                "--stl",
                &d("open.stl"),
                "--body-size",
                "6",
                "--centre",
                "12,9,9",
            ],
            "open edges",
        ),
        (&["--stl", &d("open.stl"), "--body-size", "60"], "beyond"),
        (&["--sphere", "12,9,9,3", "--body-size", "4"], "--stl"),
        (
            &[
                "--sphere",
                "12,9,9,3",
                "--outlet",
                "non-reflecting",
                "--outlet-memory",
                "-1",
            ],
            "--outlet-memory -1",
        ),
    ];
    for (extra, says) in cases {
        let mut a = base.to_vec();
        a.extend(*extra);
        refused(&a, &[says]);
        assert!(!dir.join("out").exists(), "{a:?} wrote its output");
    }
    let masks: &[(&str, &str)] = &[
        ("flat.npy", "shape (nz, ny, nx)"),
        ("empty.npy", "holds no cell"),
        ("none.npy", "none.npy"),
    ];
    for (file, says) in masks {
        let m = d(file);
        refused(
            &["obstacle", "--engine", "host", "--mask", &m, "--output", &o],
            &[says],
        );
        assert!(!dir.join("out").exists(), "{file} wrote its output");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
