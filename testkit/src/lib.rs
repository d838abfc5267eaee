//! Helpers shared by the integration tests of every crate of the workspace (each test file is its own
//! crate and uses a part of them; `use lattice_gpu_testkit as common;`). A dev-dependency only: never
//! published.

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};

use lattice_gpu_host::{Element, Error, Gpu, Shape};
use lattice_gpu_kernels::device::math::Real;
use lattice_gpu_kernels::stencil::{
    ArrayIndex3D, FieldMut, FieldRef, GpuEntry, LoopRange, PointUpdate3D, Source3D, StencilUpdate3D,
};
use rand::{Rng, SeedableRng};

/// The GPU for one test, held alone: the tests of a binary that use the GPU take turns (a test's
/// wait kernel spins until its host thread releases it, and another test's host thread blocked on a
/// device-wide wait for it while the first waits for that one's work hung `cargo test` now and then).
pub struct GpuTurn {
    gpu: Arc<Gpu>,
    _turn: MutexGuard<'static, ()>,
}

impl std::ops::Deref for GpuTurn {
    type Target = Arc<Gpu>;

    fn deref(&self) -> &Arc<Gpu> {
        &self.gpu
    }
}

/// The GPU, or `None` after printing `SKIPPED (no GPU): test: why` when there is none; with
/// `LATTICE_GPU_REQUIRE_GPU=1` (set by scripts/gpu-check.sh) a missing GPU fails the test instead.
/// Held until the test drops it ([`GpuTurn`]).
pub fn gpu(test: &str) -> Option<GpuTurn> {
    static TURN: Mutex<()> = Mutex::new(());
    // A test that panicked with its turn leaves the lock poisoned; the next may still go.
    let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    match Gpu::open(0) {
        Ok(gpu) => Some(GpuTurn { gpu, _turn: turn }),
        Err(Error::NoGpu(why))
            if std::env::var("LATTICE_GPU_REQUIRE_GPU").as_deref() != Ok("1") =>
        {
            // Straight to stderr: the test harness captures `eprintln!`, and a skip must be seen.
            let _ = writeln!(std::io::stderr(), "SKIPPED (no GPU): {test}: {why}");
            None
        }
        Err(e) => panic!("{test}: GPU required but not usable: {e}"),
    }
}

/// `len` values uniform in [-1, 1) from `seed`.
pub fn random<T: Real>(len: usize, seed: u64) -> Vec<T> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len)
        .map(|_| T::from_f64(rng.random_range(-1.0..1.0)))
        .collect()
}

/// `len` NaNs: what GPU outputs hold before a kernel writes them, so an unwritten point shows.
pub fn poison<T: Real>(len: usize) -> Vec<T> {
    vec![T::from_f64(f64::NAN); len]
}

/// Checks `got` equals `want` bit for bit inside `r` and is still NaN (untouched) outside it.
pub fn check_written<T: Element>(got: &[T], want: &[T], shape: &Shape, r: &LoopRange, what: &str) {
    let s = shape.size();
    let inside_axis = |a: usize, v: usize| (r.begin[a] as usize..r.end[a] as usize).contains(&v);
    for k in 0..s[2] {
        for j in 0..s[1] {
            for i in 0..s[0] {
                let ix = shape.index(i, j, k);
                if inside_axis(0, i) && inside_axis(1, j) && inside_axis(2, k) {
                    assert!(
                        got[ix].to_f64().to_bits() == want[ix].to_f64().to_bits(),
                        "{what}: point ({i},{j},{k}) is {:?}, host engine gives {:?}",
                        got[ix],
                        want[ix]
                    );
                } else {
                    assert!(
                        got[ix].to_f64().is_nan(),
                        "{what}: point ({i},{j},{k}) outside the range was written"
                    );
                }
            }
        }
    }
}

/// Runs an application binary with `args`: the one `$var` names where a test runs away from its build
/// tree (scripts/gpu-check.sh on the GPU machine), else `built` (cargo's `CARGO_BIN_EXE_*`). Returns
/// whether it succeeded and its stdout and stderr; a panic fails the test, since bad input must end in
/// a message, not a panic.
pub fn run_cli(var: &str, built: &str, args: &[&str]) -> (bool, String) {
    let (code, text) = run_cli_code(var, built, args);
    (code == Some(0), text)
}

/// [`run_cli`] with the exit code (`None` if a signal ended it), for tests of which error exits how.
pub fn run_cli_code(var: &str, built: &str, args: &[&str]) -> (Option<i32>, String) {
    let bin = binary(var, built);
    let out = std::process::Command::new(&bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !text.contains("panicked"),
        "{} {args:?} panicked:\n{text}",
        bin.display()
    );
    (out.status.code(), text)
}

/// A fresh, empty temporary directory for test `name` (this process's own).
pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("lattice-gpu-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("a temporary directory");
    d
}

/// The number right after `key` in `text` (up to whitespace or a comma); fails the test, showing the
/// text, where there is none.
pub fn number_after(text: &str, key: &str) -> f64 {
    text.split(key)
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.trim_end_matches(',').parse().ok())
        .unwrap_or_else(|| panic!("no number after `{key}` in:\n{text}"))
}

/// One-rank splits of a 4x4x4x8 lattice through `ranks` (each call a new one), cut along t, along z,
/// and along y, z and t (every ghost from the block's own far side: packing and exchange to itself),
/// against the whole lattice, for each of `variants`: the same iterations, the same solution to
/// round-off (the sums are only finished elsewhere), and the same true residual.
pub fn split_solve_matches_whole(
    gpu: &Arc<Gpu>,
    ranks: &dyn Fn() -> Box<dyn lattice_gpu_host::split::DeviceRanks<f64>>,
    variants: &[lattice_gpu_host::solvers::bicgstab::OverheadHiding],
    overlap: bool,
) {
    use lattice_gpu_host::solvers::bicgstab::{BiCgStab, Fusion, SolveOptions, SolveStatus};
    use lattice_gpu_lqcd::gpu::{solve_with, Block, EvenOdd, Recon, WilsonGpu};
    use lattice_gpu_lqcd::{gauge::GaugeField, geometry::Lattice, spinor::SpinorField};
    let dims = [4, 4, 4, 8];
    let lat = Lattice::new(dims, true).unwrap();
    let u = GaugeField::random(dims, 41);
    let b = SpinorField::random(dims, 42);
    let kappa = 0.12;
    for (&variant, cuts) in variants
        .iter()
        .flat_map(|v| [&[3][..], &[2], &[1, 2, 3]].map(|c| (v, c)))
    {
        let opt = SolveOptions {
            tol: 1e-10,
            max_iter: 500,
            variant,
            check_every: 4,
            fused: Fusion::Off,
        };
        let whole = WilsonGpu::<f64>::new(gpu, &lat, &u, kappa, Recon::R12).unwrap();
        let mut solver = BiCgStab::new(gpu, EvenOdd(whole)).unwrap();
        let (want, want_report, want_res) =
            solve_with(&mut solver, &b, &opt, &mut |_, _| Ok(())).unwrap();
        let block = Block::new(lat, [1; 4], 0).unwrap().cutting(cuts).unwrap();
        let split =
            WilsonGpu::<f64>::split(gpu, block, &u, kappa, Recon::R12, ranks(), overlap).unwrap();
        assert!(split.block().is_some());
        let mut solver = BiCgStab::new(gpu, EvenOdd(split)).unwrap();
        let (got, report, res) = solve_with(&mut solver, &b, &opt, &mut |_, _| Ok(())).unwrap();
        assert_eq!(report.status, SolveStatus::Converged, "{variant} {cuts:?}");
        assert_eq!(
            report.iterations, want_report.iterations,
            "{variant} cutting {cuts:?}: iterations"
        );
        let scale = want.data.iter().map(|z| z.norm()).fold(0.0, f64::max);
        let d = got
            .data
            .iter()
            .zip(&want.data)
            .map(|(a, b)| (a - b).norm())
            .fold(
                0.0,
                |m, d| if d.is_nan() { f64::INFINITY } else { m.max(d) },
            );
        assert!(
            d <= 1e-12 * scale,
            "{variant} cutting {cuts:?}: split solution differs by {d:e} of {scale:e}"
        );
        assert!(
            (res - want_res).abs() <= 1e-3 * want_res && res <= 1e-9,
            "{variant} cutting {cuts:?}: true residual {res:e}, whole lattice {want_res:e}"
        );
        let _ = writeln!(
            std::io::stderr(),
            "split {variant} cutting {cuts:?}: {} iterations, true residual {res:e}",
            report.iterations
        );
    }
}

/// The binary `$var` names, else `built` (as [`run_cli`] picks it).
pub fn binary(var: &str, built: &str) -> std::path::PathBuf {
    std::env::var_os(var).map_or_else(|| std::path::PathBuf::from(built), std::path::PathBuf::from)
}

/// Runs `bin` with `args` in `dir`, sends it `signal` (e.g. "INT") once its stdout has printed a line
/// that contains `after`, plus `delay`, and returns its exit code and its stdout and stderr.
pub fn signalled(
    bin: &std::path::Path,
    args: &[&str],
    dir: &std::path::Path,
    after: &str,
    delay: std::time::Duration,
    signal: &str,
) -> (Option<i32>, String) {
    use std::io::{BufRead, Read};
    let mut child = std::process::Command::new(bin)
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut text = String::new();
    while !text.contains(after) {
        if out.read_line(&mut text).unwrap() == 0 {
            break;
        }
    }
    std::thread::sleep(delay);
    let pid = child.id().to_string();
    let sent = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{signal} {pid} failed");
    out.read_to_string(&mut text).unwrap();
    let status = child.wait().unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    assert!(
        !text.contains("panicked"),
        "{} panicked:\n{text}",
        bin.display()
    );
    (status.code(), text)
}

/// Runs `bin` with `args` in `dir`, `env` added to its environment, and fails the test unless it
/// succeeds; its stdout and stderr.
pub fn succeeds_in<S: AsRef<std::ffi::OsStr>>(
    bin: &std::path::Path,
    dir: &std::path::Path,
    args: &[S],
    env: &[(&str, &std::ffi::OsStr)],
) -> String {
    let out = std::process::Command::new(bin)
        .args(args)
        .current_dir(dir)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let shown: Vec<String> = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect();
    assert!(
        out.status.success(),
        "{} {shown:?} failed:\n{text}",
        bin.display()
    );
    text
}

/// Runs `bin` with `args` in `dir` for its memory report (on a pool of 2 threads, see
/// [`estimate_holds`]), fails the test unless the run succeeds, and returns the report
/// ([`memory_report`]).
pub fn measured<S: AsRef<std::ffi::OsStr>>(
    bin: &std::path::Path,
    args: &[S],
    dir: &std::path::Path,
) -> [u64; 4] {
    let env = [
        ("LATTICE_GPU_MEMORY_REPORT", "1".as_ref()),
        ("RAYON_NUM_THREADS", "2".as_ref()),
    ];
    memory_report(&succeeds_in(bin, dir, args, &env))
}

/// The line `LATTICE_GPU_MEMORY_REPORT` makes a binary print, as bytes: (estimated host, estimated
/// GPU, measured host, measured GPU).
pub fn memory_report(text: &str) -> [u64; 4] {
    let line = text
        .lines()
        .find(|l| l.starts_with("memory: estimated host"))
        .unwrap_or_else(|| panic!("no memory report in:\n{text}"));
    let n: Vec<u64> = line
        .split([' ', ';'])
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(n.len(), 4, "{line}");
    [n[0], n[1], n[2], n[3]]
}

/// Fails unless the estimate `est` covers the measured peak `got` and is at most `slack` times it. The
/// runs measured set `RAYON_NUM_THREADS=2`: each worker thread's allocator arena keeps freed memory
/// of its own (about 1.5 MiB a thread measured with 16), which the estimate allows for per thread but
/// which varies too much between machines to hold tightly.
pub fn estimate_holds(est: u64, got: u64, slack: f64, what: &str) {
    assert!(
        est >= got && est as f64 <= slack * got as f64,
        "{what}: estimated {} MiB, measured {} MiB",
        est >> 20,
        got >> 20
    );
}

/// The entries of `dir` whose names mark a temporary: `.name.tmp` files and `.name.staging`
/// directories.
pub fn temporaries(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .filter(|n| n.ends_with(".tmp") || n.ends_with(".staging"))
                .collect()
        })
        .unwrap_or_default()
}

/// The ranks of the resume tests: the same count, more, and fewer after the checkpoint (`--gpus`
/// thread ranks, which split the run as MPI ranks do).
pub const RESUME_RANKS: [(&[&str], &[&str]); 3] = [
    (&[], &[]),
    (&["--gpus", "2"], &["--gpus", "3"]),
    (&["--gpus", "3"], &[]),
];

/// For each pair of [`RESUME_RANKS`]: `run` to step 30 with a checkpoint every 10 steps into
/// `dir/half`, then `run` resumed from it to step 60 into `dir/whole`; `check` gets the ranks and
/// both runs' output, to hold the resumed run against a straight one.
pub fn half_then_whole(
    dir: &std::path::Path,
    run: impl Fn(&[&str]) -> String,
    mut check: impl FnMut(&[&str], &[&str], &str, &str),
) {
    for (first, then) in RESUME_RANKS {
        let _ = std::fs::remove_dir_all(dir.join("half"));
        let _ = std::fs::remove_dir_all(dir.join("whole"));
        let half = [
            "--steps",
            "30",
            "--checkpoint-every",
            "10",
            "--output",
            "half",
        ];
        let first_text = run(&[&half[..], first].concat());
        let whole = [
            "--steps",
            "60",
            "--resume",
            "half/checkpoint",
            "--output",
            "whole",
        ];
        let then_text = run(&[&whole[..], then].concat());
        assert!(then_text.contains("resuming from step 30"), "{then_text}");
        check(first, then, &first_text, &then_text);
    }
}

/// The engines a test of a binary runs on: the CPU always, and the GPU where there is one.
pub fn engines(test: &str) -> Vec<&'static str> {
    let mut e = vec!["host"];
    if gpu(test).is_some() {
        e.push("device");
    } else {
        let _ = writeln!(std::io::stderr(), "{test}: CPU engine only");
    }
    e
}

/// The binary (`var`, `built`: as [`run_cli`]) with `args --output DIR` on one domain and over 2 and
/// 3 ranks run as threads of one process (`--gpus N`): `file` byte for byte. `name` names the
/// temporary directory.
pub fn same_bytes_over_threads(var: &str, built: &str, args: &[&str], file: &str, name: &str) {
    let dir = temp_dir(name);
    let out = |tag: &str| dir.join(tag).to_string_lossy().to_string();
    let one = out("one");
    let mut a = args.to_vec();
    a.extend(["--output", &one]);
    let (ok, text) = run_cli(var, built, &a);
    assert!(ok, "{built} {a:?}:\n{text}");
    let want = std::fs::read(dir.join("one").join(file)).unwrap();
    for n in ["2", "3"] {
        let split = out(n);
        let mut a = args.to_vec();
        a.extend(["--gpus", n, "--output", &split]);
        let (ok, text) = run_cli(var, built, &a);
        assert!(ok, "{built} {a:?}:\n{text}");
        assert!(
            text.contains(&format!("over {n} ranks run as threads of this process")),
            "{text}"
        );
        let got = std::fs::read(dir.join(n).join(file)).unwrap();
        assert!(
            got == want,
            "{built} {args:?} over {n} threads: {file} differs"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs the binary (`var`, `built`) with `args`, ranks that open the GPU themselves (no `--engine`):
/// without a GPU they fall back to the CPU alike, and one line says so, not one per rank.
pub fn fallback_said_once(var: &str, built: &str, args: &[&str], test: &str) {
    let want = usize::from(gpu(test).is_none());
    let (ok, text) = run_cli(var, built, args);
    assert!(ok, "{built} {args:?}:\n{text}");
    // Other notices (the tuner's, on a GPU) are not the fallback.
    let said = text
        .lines()
        .filter(|l| l.starts_with("notice: ") && l.contains("; running "))
        .count();
    assert_eq!(said, want, "{built} {args:?}:\n{text}");
}

/// Runs the binary (`var`, `built`) with `args` on the GPU and holds its memory estimates against the
/// peaks it measures: the host's (VmHWM, the CUDA driver's share included) within `host_slack` of the
/// measured peak, the GPU's (what the run's own allocations held at once) within `gpu_slack`. The
/// CPU engine's estimates are held in each binary's own CLI tests.
pub fn gpu_estimates_hold(var: &str, built: &str, args: &str, host_slack: f64, gpu_slack: f64) {
    let dir = temp_dir(&format!("memory-gpu-{}", var.to_lowercase()));
    let bin = binary(var, built);
    let words: Vec<&str> = args.split_whitespace().collect();
    let [est_host, est_gpu, got_host, got_gpu] = measured(&bin, &words, &dir);
    eprintln!(
        "{args}: host estimated {} MiB, measured {} MiB ({:.2}x); GPU estimated {} MiB, measured {} MiB ({:.2}x)",
        est_host >> 20,
        got_host >> 20,
        est_host as f64 / got_host as f64,
        est_gpu >> 20,
        got_gpu >> 20,
        est_gpu as f64 / got_gpu.max(1) as f64,
    );
    estimate_holds(est_host, got_host, host_slack, &format!("{args}: host"));
    estimate_holds(est_gpu, got_gpu, gpu_slack, &format!("{args}: GPU"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stencil wider than diffusion's, reading tile corners and points off the z column in other planes:
/// radius (2, 1, 2), 13 reads. Not a physical update, a test of the staged and blocked loops' reach;
/// its entries exist only for the launch emulator (no module holds them).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Wide {
    /// The input.
    pub f: FieldRef<f64>,
    /// The output.
    pub out: FieldMut<f64>,
}

impl PointUpdate3D for Wide {
    type Real = f64;
    const RADIUS: [u32; 3] = [2, 1, 2];
    fn update(&self, idx: &ArrayIndex3D) {
        self.update_with(idx, &self.f)
    }
}

impl StencilUpdate3D for Wide {
    fn input(&self) -> FieldRef<f64> {
        self.f
    }
    fn output(&self) -> FieldMut<f64> {
        self.out
    }
    fn value_with<S: Source3D<f64>>(&self, idx: &ArrayIndex3D, f: &S) -> f64 {
        0.5 * f.at::<0, 0, 0>(idx)
            + 0.25 * f.at::<2, 0, 0>(idx)
            + 0.125 * f.at::<-2, 0, 0>(idx)
            + 0.0625 * f.at::<-1, 1, 0>(idx)
            + 0.03125 * f.at::<1, -1, 0>(idx)
            + 0.75 * f.at::<0, 1, 0>(idx)
            + 0.375 * f.at::<-2, -1, 0>(idx)
            + 1.5 * f.at::<0, 0, 2>(idx)
            + 1.25 * f.at::<0, 0, -2>(idx)
            + 1.125 * f.at::<0, 0, 1>(idx)
            + 1.0625 * f.at::<0, 0, -1>(idx)
            + 0.875 * f.at::<1, 0, 1>(idx)
            + 0.625 * f.at::<0, -1, -2>(idx)
    }
}

impl GpuEntry for Wide {
    const MODULE: &'static str = "tests";
    const ENTRY: &'static str = "wide";
    const ZQUEUE_ENTRY: Option<&'static str> = Some("wide_zqueue");
    const TILED_ENTRY: Option<&'static str> = Some("wide_tiled");
    const VECTOR_ENTRY: Option<&'static str> = Some("wide_vector");
    const TEMPORAL_ENTRY: Option<&'static str> = Some("wide_temporal");
}
