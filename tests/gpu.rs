//! GPU tests: the device layer's kernels against its host meaning, and the device and auto-tuning engines
//! against the CPU engine for every tuning candidate (every kernel variant with every launch shape) on odd
//! sizes, outputs poisoned with NaN first.
//!
//! Without a GPU each test prints `SKIPPED (no GPU): ...` and passes, so CI (which has none) stays green;
//! `LATTICE_GPU_REQUIRE_GPU=1` (set by scripts/gpu-check.sh) turns the skip into a failure.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use lattice_gpu::diffusion::{relative_l2, simulate, Problem};
use lattice_gpu::host::engine::tunecache::TuneCache;
use lattice_gpu::host::engine::{KernelInfo, LoopEngine, TuneSpace, Variant};
use lattice_gpu::host::{
    DeviceAutoTuningLoopEngine, DeviceBuffer, DeviceField, DeviceLoopEngine, Element, Field, Gpu,
    HostLoopEngine, LaunchShape, Loop2D, Loop3D, Shape,
};
use lattice_gpu::kernels::device::math;
use lattice_gpu::kernels::diffusion::{Diffusion3d, DiffusionReal};
use lattice_gpu::kernels::selftest::Smooth2d;

use common::{check_written, gpu, poison, random};
use lattice_gpu_testkit as common;

fn diffusion_every_candidate<T: Element + DiffusionReal>(gpu: &Arc<Gpu>) {
    let problem = Problem::new([37, 29, 23], 0.3, None).unwrap();
    let compact = problem.shape::<T>().unwrap();
    // Also the 128-byte row padding that large grids get.
    let padded = compact.aligned_rows(std::mem::size_of::<T>(), f64::INFINITY);
    assert_ne!(compact, padded);
    for shape in [compact, padded] {
        every_candidate_on::<T>(gpu, &problem, shape);
    }
}

fn every_candidate_on<T: Element + DiffusionReal>(gpu: &Arc<Gpu>, problem: &Problem, shape: Shape) {
    let input = random::<T>(shape.len(), 7);

    let mut hf = HostLoopEngine.alloc::<T>(shape).unwrap();
    let mut hg = HostLoopEngine.alloc::<T>(shape).unwrap();
    hf.upload(&input).unwrap();
    hg.upload(&poison::<T>(shape.len())).unwrap();
    Loop3D::new(&HostLoopEngine, shape.interior_range())
        .unwrap()
        .run(&problem.update(&hf, &mut hg))
        .unwrap();
    let want = hg.download().unwrap();

    let tuner = DeviceAutoTuningLoopEngine::new(gpu.clone(), TuneCache::in_memory());
    let candidates = tuner.candidates(
        &shape.interior_range(),
        &KernelInfo::of3d::<Diffusion3d<T>>(),
    );
    for v in Variant::ALL {
        let n = candidates.iter().filter(|c| c.variant == v).count();
        // (The vector variant's threads take 4 points each in f32: fewer block widths fit.)
        assert!(n >= 75, "only {n} {} candidates", v.name());
    }
    let mut engine = DeviceLoopEngine::new(gpu.clone(), LaunchShape::FIXED);
    let mut f = engine.alloc::<T>(shape).unwrap();
    let mut g = engine.alloc::<T>(shape).unwrap();
    f.upload(&input).unwrap();
    for c in candidates {
        engine.set_shape(c);
        g.upload(&poison::<T>(shape.len())).unwrap();
        Loop3D::new(&engine, shape.interior_range())
            .unwrap()
            .run(&problem.update(&f, &mut g))
            .unwrap();
        check_written(
            &g.download().unwrap(),
            &want,
            &shape,
            &shape.interior_range(),
            &format!("diffusion {} {c}", T::NAME),
        );
    }
}

#[test]
fn device_engine_matches_host_for_every_candidate_f32() {
    if let Some(gpu) = gpu("device_engine_matches_host_for_every_candidate_f32") {
        diffusion_every_candidate::<f32>(&gpu);
    }
}

#[test]
fn device_engine_matches_host_for_every_candidate_f64() {
    if let Some(gpu) = gpu("device_engine_matches_host_for_every_candidate_f64") {
        diffusion_every_candidate::<f64>(&gpu);
    }
}

fn autotuned_run_matches_host<T: Element + DiffusionReal>(gpu: &Arc<Gpu>) {
    let problem = Problem::new([37, 29, 23], 0.2, None).unwrap();
    let input = random::<T>(problem.points() as usize, 11);
    let tuner = DeviceAutoTuningLoopEngine::new(gpu.clone(), TuneCache::in_memory()).reps(2);
    let range = problem.shape::<T>().unwrap().interior_range();
    let tuning_steps = 2 * tuner
        .candidates(&range, &KernelInfo::of3d::<Diffusion3d<T>>())
        .len();
    let steps = tuning_steps + 9;
    let host = simulate(
        &HostLoopEngine,
        &problem,
        || Ok(input.clone()),
        steps,
        |_| {},
    )
    .unwrap();
    let dev = simulate(&tuner, &problem, || Ok(input.clone()), steps, |_| {}).unwrap();
    let report = dev.tuning.expect("the tuner finished within the run");
    assert_eq!(report.steps, tuning_steps);
    assert!(!report.from_cache && report.best_ms > 0.0);
    assert_eq!(dev.tuning_unfinished, None);
    // A run too short to time every candidate says how far the tuner got (the app's notice).
    let fresh = DeviceAutoTuningLoopEngine::new(gpu.clone(), TuneCache::in_memory()).reps(2);
    let short = simulate(&fresh, &problem, || Ok(input.clone()), 5, |_| {}).unwrap();
    assert!(short.tuning.is_none());
    assert_eq!(short.tuning_unfinished, Some((5, tuning_steps)));
    let same = host
        .field
        .iter()
        .zip(&dev.field)
        .all(|(a, b)| a.to_f64().to_bits() == b.to_f64().to_bits());
    assert!(
        same,
        "{} steps while tuning differ from the host engine",
        T::NAME
    );
}

#[test]
fn autotuned_steps_are_real_steps() {
    if let Some(gpu) = gpu("autotuned_steps_are_real_steps") {
        autotuned_run_matches_host::<f32>(&gpu);
        autotuned_run_matches_host::<f64>(&gpu);
    }
}

/// A tuner forced to one variant tunes only its shapes, picks it, and its run equals the host engine's.
fn forced_variant_runs_match_host<T: Element + DiffusionReal>(gpu: &Arc<Gpu>) {
    let problem = Problem::new([37, 29, 23], 0.2, None).unwrap();
    let input = random::<T>(problem.points() as usize, 17);
    let steps = 40;
    let host = simulate(
        &HostLoopEngine,
        &problem,
        || Ok(input.clone()),
        steps,
        |_| {},
    )
    .unwrap();
    for v in Variant::ALL {
        // Few candidates, so that the run ends tuned.
        let space = TuneSpace::table1()
            .with("block_x", vec![4, 8])
            .with("march", vec![1, 4]);
        let tuner = DeviceAutoTuningLoopEngine::new(gpu.clone(), TuneCache::in_memory())
            .reps(1)
            .space(space)
            .variants(&[v]);
        let dev = simulate(&tuner, &problem, || Ok(input.clone()), steps, |_| {}).unwrap();
        let report = dev.tuning.expect("the tuner finished within the run");
        assert_eq!(
            report.best.variant,
            v,
            "{} tuner chose {}",
            v.name(),
            report.best
        );
        assert_eq!(report.candidates, 2 * 5 * 2);
        let same = host
            .field
            .iter()
            .zip(&dev.field)
            .all(|(a, b)| a.to_f64().to_bits() == b.to_f64().to_bits());
        assert!(
            same,
            "{} {} run differs from the host engine",
            T::NAME,
            v.name()
        );
    }
}

#[test]
fn forced_variant_tuning_runs_that_variant() {
    if let Some(gpu) = gpu("forced_variant_tuning_runs_that_variant") {
        forced_variant_runs_match_host::<f32>(&gpu);
        forced_variant_runs_match_host::<f64>(&gpu);
    }
}

/// A run long enough to replay its steps from recorded graphs (batches of 4 between progress reports,
/// the last step alone, tuning steps before the first batch) ends bit for bit where the host engine's does.
#[test]
fn replayed_steps_match_host() {
    let Some(gpu) = gpu("replayed_steps_match_host") else {
        return;
    };
    let problem = Problem::new([37, 29, 23], 0.2, None).unwrap();
    let input = random::<f32>(problem.points() as usize, 23);
    let steps = 301;
    let host = simulate(
        &HostLoopEngine,
        &problem,
        || Ok(input.clone()),
        steps,
        |_| {},
    )
    .unwrap();
    let fixed = DeviceLoopEngine::new(gpu.clone(), LaunchShape::FIXED);
    let tuned = DeviceAutoTuningLoopEngine::new(gpu.clone(), TuneCache::in_memory())
        .reps(1)
        .space(
            TuneSpace::table1()
                .with("block_x", vec![4, 8])
                .with("march", vec![1, 4]),
        );
    let mut reports = Vec::new();
    let runs = [
        simulate(
            &fixed,
            &problem,
            || Ok(input.clone()),
            steps,
            |s| reports.push(s),
        )
        .unwrap(),
        simulate(&tuned, &problem, || Ok(input.clone()), steps, |_| {}).unwrap(),
    ];
    assert_eq!(reports, (4..=300).step_by(4).collect::<Vec<_>>());
    assert!(
        runs[1].tuning.is_some(),
        "the tuner finished before the end"
    );
    for run in runs {
        assert!(host
            .field
            .iter()
            .zip(&run.field)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

#[test]
fn block_limits_follow_each_kernels_registers() {
    let Some(gpu) = gpu("block_limits_follow_each_kernels_registers") else {
        return;
    };
    let device = gpu.max_threads_per_block();
    let framework = lattice_gpu::host::Module::framework();
    let limits: Vec<(&str, u32)> = framework
        .entries()
        .map(|e| (e, gpu.max_block_of(e).unwrap()))
        .collect();
    for (entry, limit) in &limits {
        assert!(
            (32..=device).contains(limit) && limit % 32 == 0,
            "{entry}: {limit} threads per block (device {device})"
        );
    }
    // Over 200 registers a thread: 65536 registers take at most 256 such threads.
    let dslash = limits
        .iter()
        .find(|(e, _)| *e == "dslash_f64_r12")
        .unwrap()
        .1;
    assert!(dslash <= 256 && dslash < device, "dslash_f64_r12: {dslash}");
}

#[test]
fn device_field_spans_copy_part_of_the_array() {
    let Some(gpu) = gpu("device_field_spans_copy_part_of_the_array") else {
        return;
    };
    let shape = Shape::new_3d([6, 5, 4], 1).unwrap();
    let engine = DeviceLoopEngine::new(gpu.clone(), LaunchShape::FIXED);
    let mut f = engine.alloc::<f64>(shape).unwrap();
    let all = random::<f64>(shape.len(), 7);
    f.upload(&all).unwrap();
    // One whole array plane, as a decomposed run moves its faces.
    let plane = shape.size()[0] * shape.size()[1];
    let (start, fresh) = (2 * plane, random::<f64>(plane, 8));
    f.upload_span(start, &fresh).unwrap();
    assert_eq!(f.download_span(start, plane).unwrap(), fresh);
    let mut want = all;
    want[start..start + plane].copy_from_slice(&fresh);
    assert_eq!(f.download().unwrap(), want, "the span spilled over");
    assert!(f.download_span(shape.len() - 1, 2).is_err());
    // The same for a plain device array (a decomposed lattice-Boltzmann run moves its planes so).
    let all = random::<f64>(97, 9);
    let mut b = DeviceBuffer::from_host(&gpu, &all).unwrap();
    let fresh = random::<f64>(13, 10);
    b.upload_span(40, &fresh).unwrap();
    assert_eq!(b.download_span(40, 13).unwrap(), fresh);
    let mut want = all;
    want[40..53].copy_from_slice(&fresh);
    assert_eq!(b.download().unwrap(), want, "the buffer span spilled over");
    let e = b.upload_span(90, &fresh).unwrap_err().to_string();
    assert!(e.contains("outside a GPU array of 97"), "{e}");
    // Runs of 5 values 20 apart, 4 of them (one plane of every population of a lattice).
    let rows = b.download_rows(3, 5, 20, 4).unwrap();
    let want_rows: Vec<f64> = (0..4)
        .flat_map(|r| want[3 + 20 * r..8 + 20 * r].to_vec())
        .collect();
    assert_eq!(rows, want_rows);
    let fresh = random::<f64>(20, 11);
    b.upload_rows(3, 20, &fresh, 5).unwrap();
    for r in 0..4 {
        want[3 + 20 * r..8 + 20 * r].copy_from_slice(&fresh[5 * r..5 * r + 5]);
    }
    assert_eq!(
        b.download().unwrap(),
        want,
        "the strided copy touched other values"
    );
    let e = b.download_rows(3, 5, 20, 6).unwrap_err().to_string();
    assert!(e.contains("outside a GPU array of 97"), "{e}");
    assert!(b.download_rows(0, 21, 20, 2).is_err(), "overlapping runs");
}

#[test]
fn dot_into_leaves_the_sum_on_the_device() {
    let Some(gpu) = gpu("dot_into_leaves_the_sum_on_the_device") else {
        return;
    };
    let shape = Shape::new_3d([40, 30, 20], 1).unwrap();
    let engine = DeviceLoopEngine::new(gpu.clone(), LaunchShape::FIXED);
    let mut a = engine.alloc::<f64>(shape).unwrap();
    let mut b = engine.alloc::<f64>(shape).unwrap();
    let (va, vb) = (
        random::<f64>(shape.len(), 21),
        random::<f64>(shape.len(), 22),
    );
    a.upload(&va).unwrap();
    b.upload(&vb).unwrap();
    let want: f64 = va.iter().zip(&vb).map(|(x, y)| x * y).sum();
    let slots = Shape::new_3d([8, 1, 1], 0).unwrap();
    let mut out = engine.alloc::<f64>(slots).unwrap();
    out.upload(&[f64::NAN; 8]).unwrap();
    // Twice: the kernel's block counter must be back at zero for the second call.
    engine.dot_into(&a, &b, &mut out, 3).unwrap();
    engine.dot_into(&a, &a, &mut out, 5).unwrap();
    let got = out.download().unwrap();
    let aa: f64 = va.iter().map(|x| x * x).sum();
    assert!(
        (got[3] - want).abs() <= 1e-12 * want.abs().max(1.0),
        "{} vs {want}",
        got[3]
    );
    assert!((got[5] - aa).abs() <= 1e-12 * aa, "{} vs {aa}", got[5]);
    for k in [0, 1, 2, 4, 6, 7] {
        assert!(got[k].is_nan(), "slot {k} was written");
    }
    assert!(engine.dot_into(&a, &b, &mut out, 8).is_err());
}

#[test]
fn missing_variant_is_a_clear_error() {
    let Some(gpu) = gpu("missing_variant_is_a_clear_error") else {
        return;
    };
    let shape = Shape::new_2d([64, 64], 1).unwrap();
    let engine =
        DeviceLoopEngine::new(gpu.clone(), LaunchShape::FIXED.with_variant(Variant::Tiled));
    let f = engine.alloc::<f32>(shape).unwrap();
    let mut g = engine.alloc::<f32>(shape).unwrap();
    let err = Loop2D::new(&engine, shape.interior_range())
        .unwrap()
        .run(&Smooth2d {
            f: f.view(),
            out: g.view_mut(),
        })
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("smooth2d_f32") && err.contains("no tiled variant"),
        "{err}"
    );
}

#[test]
fn loop2d_matches_host_for_every_candidate() {
    let Some(gpu) = gpu("loop2d_matches_host_for_every_candidate") else {
        return;
    };
    let shape = Shape::new_2d([333, 257], 1).unwrap();
    let input = random::<f32>(shape.len(), 5);
    let mut hf = HostLoopEngine.alloc::<f32>(shape).unwrap();
    let mut hg = HostLoopEngine.alloc::<f32>(shape).unwrap();
    hf.upload(&input).unwrap();
    hg.upload(&poison::<f32>(shape.len())).unwrap();
    let update = |f: &dyn Field<f32>, g: &mut dyn Field<f32>| Smooth2d {
        f: f.view(),
        out: g.view_mut(),
    };
    Loop2D::new(&HostLoopEngine, shape.interior_range())
        .unwrap()
        .run(&update(&hf, &mut hg))
        .unwrap();
    let want = hg.download().unwrap();

    let tuner = DeviceAutoTuningLoopEngine::new(gpu.clone(), TuneCache::in_memory());
    let candidates = tuner.candidates(&shape.interior_range(), &KernelInfo::of2d::<Smooth2d>());
    assert!(candidates.len() >= 100);
    assert!(candidates.iter().all(|c| c.variant == Variant::Plain));
    let mut engine = DeviceLoopEngine::new(gpu.clone(), LaunchShape::FIXED);
    let mut f = engine.alloc::<f32>(shape).unwrap();
    let mut g = engine.alloc::<f32>(shape).unwrap();
    f.upload(&input).unwrap();
    for c in candidates {
        engine.set_shape(c);
        g.upload(&poison::<f32>(shape.len())).unwrap();
        Loop2D::new(&engine, shape.interior_range())
            .unwrap()
            .run(&update(&f, &mut g))
            .unwrap();
        check_written(
            &g.download().unwrap(),
            &want,
            &shape,
            &shape.interior_range(),
            &format!("smooth2d {c}"),
        );
    }
}

#[test]
fn device_sine_decay_matches_the_scheme() {
    let Some(gpu) = gpu("device_sine_decay_matches_the_scheme") else {
        return;
    };
    let problem = Problem::new([64, 48, 40], 0.1, None).unwrap();
    let steps = 300;
    let tuner = DeviceAutoTuningLoopEngine::new(gpu.clone(), TuneCache::in_memory()).reps(1);
    let out = simulate(
        &tuner,
        &problem,
        || Ok(problem.sine_mode::<f32>()),
        steps,
        |_| {},
    )
    .unwrap();
    let err = relative_l2(
        &out.field,
        &problem.sine_mode::<f64>(),
        problem.discrete_decay(steps),
    );
    assert!(err < 1e-5, "relative error {err}");
}

#[test]
fn tune_cache_makes_the_second_run_start_tuned() {
    let Some(gpu) = gpu("tune_cache_makes_the_second_run_start_tuned") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("lattice-gpu-tune-{}", std::process::id()));
    let path = dir.join("tunecache.tsv");
    let problem = Problem::new([40, 24, 16], 0.1, None).unwrap();
    let init = problem.sine_mode::<f32>();
    let engine =
        || DeviceAutoTuningLoopEngine::new(gpu.clone(), TuneCache::load(path.clone())).reps(1);
    // 4 variants x 125 shapes, 1 step each: runs of this many steps finish tuning.
    let tuning_run = 600;
    let first = simulate(&engine(), &problem, || Ok(init.clone()), tuning_run, |_| {})
        .unwrap()
        .tuning
        .unwrap();
    assert!(!first.from_cache && first.steps > 0);
    let second = simulate(&engine(), &problem, || Ok(init.clone()), 3, |_| {})
        .unwrap()
        .tuning
        .unwrap();
    assert!(second.from_cache && second.steps == 0);
    assert_eq!(second.best, first.best);
    let retuned = simulate(
        &engine().retune(true),
        &problem,
        || Ok(init.clone()),
        tuning_run,
        |_| {},
    )
    .unwrap()
    .tuning
    .unwrap();
    assert!(!retuned.from_cache);
    // The variants tuned over are part of the key: a run forced to one variant does not take the result
    // of the run over all of them, and finds its own the next time.
    let forced = || engine().variants(&[Variant::Tiled]);
    let tiled = simulate(&forced(), &problem, || Ok(init.clone()), 200, |_| {})
        .unwrap()
        .tuning
        .unwrap();
    assert!(!tiled.from_cache && tiled.best.variant == Variant::Tiled);
    let tiled_again = simulate(&forced(), &problem, || Ok(init.clone()), 3, |_| {})
        .unwrap()
        .tuning
        .unwrap();
    assert!(tiled_again.from_cache);
    assert_eq!(tiled_again.best, tiled.best);
    let all_again = simulate(&engine(), &problem, || Ok(init.clone()), 3, |_| {})
        .unwrap()
        .tuning
        .unwrap();
    assert!(all_again.from_cache);
    assert_eq!(all_again.best, retuned.best);
    // A corrupt cache is ignored with a warning, not an error.
    std::fs::write(&path, "garbage\x00\n").unwrap();
    let again = simulate(&engine(), &problem, || Ok(init.clone()), tuning_run, |_| {})
        .unwrap()
        .tuning
        .unwrap();
    assert!(!again.from_cache);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn too_large_grid_is_refused_before_allocating() {
    let Some(gpu) = gpu("too_large_grid_is_refused_before_allocating") else {
        return;
    };
    let shape = Shape::new_3d([4096, 4096, 4096], 1).unwrap();
    let err = DeviceField::<f64>::zeros(&gpu, shape)
        .err()
        .expect("512 GiB cannot fit")
        .to_string();
    assert!(
        err.contains("GiB") && err.contains("free") && err.contains(gpu.name()),
        "{err}"
    );
}

fn launch_1d(
    gpu: &Gpu,
    name: &str,
    blocks: u32,
    threads: u32,
    shared: u32,
) -> (cudarc::driver::CudaFunction, LaunchConfig) {
    let f = gpu.function(name).unwrap();
    (
        f,
        LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: shared,
        },
    )
}

fn upload<T: cudarc::driver::DeviceRepr>(gpu: &Gpu, v: &[T]) -> CudaSlice<T> {
    gpu.stream().clone_htod(v).unwrap()
}

#[test]
fn device_layer_thread_indices() {
    let Some(gpu) = gpu("device_layer_thread_indices") else {
        return;
    };
    let f = gpu.function("selftest_thread_index").unwrap();
    let (grid, block) = ((3u32, 2u32, 2u32), (8u32, 4u32, 2u32));
    let n = (grid.0 * block.0 * grid.1 * block.1 * grid.2 * block.2) as usize;
    let mut out = upload(&gpu, &vec![u32::MAX; 4 * n]);
    let cfg = LaunchConfig {
        grid_dim: grid,
        block_dim: block,
        shared_mem_bytes: 0,
    };
    unsafe { gpu.stream().launch_builder(&f).arg(&mut out).launch(cfg) }.unwrap();
    let v = gpu.stream().clone_dtoh(&out).unwrap();
    let (nx, ny) = ((grid.0 * block.0) as usize, (grid.1 * block.1) as usize);
    for g in 0..n {
        let (x, y, z) = (g % nx, (g / nx) % ny, g / (nx * ny));
        let (tx, ty, tz) = (x % 8, y % 4, z % 2);
        assert_eq!(
            &v[4 * g..4 * g + 4],
            &[
                x as u32,
                y as u32,
                z as u32,
                (tx + 8 * (ty + 4 * tz)) as u32
            ]
        );
    }
}

#[test]
fn device_layer_warp_primitives() {
    let Some(gpu) = gpu("device_layer_warp_primitives") else {
        return;
    };
    let n = 128;
    let x: Vec<f32> = random::<f32>(n, 3);
    let y: Vec<f64> = random::<f64>(n, 4);
    let (dx, dy) = (upload(&gpu, &x), upload(&gpu, &y));
    let mut of = upload(&gpu, &poison::<f32>(4 * n));
    let mut od = upload(&gpu, &poison::<f64>(2 * n));
    let mut ou = upload(&gpu, &vec![u32::MAX; 4 * n]);
    let (f, cfg) = launch_1d(&gpu, "selftest_warp", 2, 64, 0);
    unsafe {
        gpu.stream()
            .launch_builder(&f)
            .arg(&dx)
            .arg(&dy)
            .arg(&mut of)
            .arg(&mut od)
            .arg(&mut ou)
            .launch(cfg)
    }
    .unwrap();
    let (of, od, ou) = (
        gpu.stream().clone_dtoh(&of).unwrap(),
        gpu.stream().clone_dtoh(&od).unwrap(),
        gpu.stream().clone_dtoh(&ou).unwrap(),
    );
    for w in 0..n / 32 {
        let lanes = w * 32..w * 32 + 32;
        let sum32: f64 = x[lanes.clone()].iter().map(|&v| v as f64).sum();
        let sum64: f64 = y[lanes.clone()].iter().sum();
        let ballot = lanes
            .clone()
            .fold(0u32, |b, i| b | ((x[i] > 0.0) as u32) << (i - w * 32));
        for i in lanes {
            let l = i - w * 32;
            assert!((of[4 * i] as f64 - sum32).abs() < 1e-5, "warp sum f32");
            assert_eq!(
                of[4 * i + 1],
                x[if l < 31 { i + 1 } else { i }],
                "shfl_down f32 lane {l}"
            );
            assert_eq!(of[4 * i + 2], x[i ^ 1], "shfl_xor f32");
            assert_eq!(of[4 * i + 3], x[w * 32 + 3], "shfl_idx f32");
            assert!((od[2 * i] - sum64).abs() < 1e-12, "warp sum f64");
            assert_eq!(
                od[2 * i + 1],
                y[if l < 30 { i + 2 } else { i }],
                "shfl_down f64 lane {l}"
            );
            assert_eq!(ou[4 * i], ballot, "ballot");
            assert_eq!(ou[4 * i + 1], (ballot == u32::MAX) as u32, "all");
            assert_eq!(ou[4 * i + 2], (ballot != 0) as u32, "any");
            assert_eq!(ou[4 * i + 3], l as u32, "lane id");
        }
    }
}

#[test]
fn device_layer_shared_memory() {
    let Some(gpu) = gpu("device_layer_shared_memory") else {
        return;
    };
    let blocks = 5;
    let x = random::<f32>(256 * blocks, 9);
    let dx = upload(&gpu, &x);
    let mut o1 = upload(&gpu, &poison::<f32>(x.len()));
    let mut o2 = upload(&gpu, &poison::<f32>(x.len()));
    let (f, cfg) = launch_1d(&gpu, "selftest_shared", blocks as u32, 256, 256 * 4);
    unsafe {
        gpu.stream()
            .launch_builder(&f)
            .arg(&dx)
            .arg(&mut o1)
            .arg(&mut o2)
            .launch(cfg)
    }
    .unwrap();
    let (o1, o2) = (
        gpu.stream().clone_dtoh(&o1).unwrap(),
        gpu.stream().clone_dtoh(&o2).unwrap(),
    );
    for b in 0..blocks {
        for t in 0..256 {
            assert_eq!(
                o1[b * 256 + t],
                x[b * 256 + 255 - t],
                "static shared reverse"
            );
            assert_eq!(
                o2[b * 256 + t],
                2.0 * x[b * 256 + 255 - t],
                "dynamic shared reverse"
            );
        }
    }
}

#[test]
fn device_layer_atomics() {
    let Some(gpu) = gpu("device_layer_atomics") else {
        return;
    };
    let n = 100_000u32;
    let x = random::<f32>(n as usize, 13);
    let dx = upload(&gpu, &x);
    let mut s32 = upload(&gpu, &[0.0f32]);
    let mut s64 = upload(&gpu, &[0.0f64]);
    let mut blocks = upload(&gpu, &[0.0f64]);
    let mut count = upload(&gpu, &[0u32; 3]);
    let (f, cfg) = launch_1d(&gpu, "selftest_atomic", n.div_ceil(256), 256, 0);
    unsafe {
        gpu.stream()
            .launch_builder(&f)
            .arg(&dx)
            .arg(&n)
            .arg(&mut s32)
            .arg(&mut s64)
            .arg(&mut blocks)
            .arg(&mut count)
            .launch(cfg)
    }
    .unwrap();
    let exact: f64 = x.iter().map(|&v| v as f64).sum();
    let s32 = gpu.stream().clone_dtoh(&s32).unwrap()[0] as f64;
    let s64 = gpu.stream().clone_dtoh(&s64).unwrap()[0];
    let blocks = gpu.stream().clone_dtoh(&blocks).unwrap()[0];
    let count = gpu.stream().clone_dtoh(&count).unwrap();
    assert!(
        (s64 - exact).abs() < 1e-9,
        "f64 atomic sum {s64} vs {exact}"
    );
    assert!(
        (blocks - exact).abs() < 1e-9,
        "block-scope sums {blocks} vs {exact}"
    );
    assert!(
        (s32 - exact).abs() < 0.05,
        "f32 atomic sum {s32} vs {exact}"
    );
    assert_eq!(count[0], x.iter().filter(|&&v| v > 0.0).count() as u32);
    let max_bits = x
        .iter()
        .filter(|&&v| v > 0.0)
        .map(|v| v.to_bits())
        .max()
        .unwrap();
    assert_eq!(count[1], max_bits);
    assert_eq!(count[2], 1);
}

#[test]
fn device_layer_math_matches_host() {
    let Some(gpu) = gpu("device_layer_math_matches_host") else {
        return;
    };
    let n = 1000usize;
    let mut a = random::<f64>(n, 21);
    a.iter_mut().for_each(|v| *v *= 100.0);
    let (b, c) = (random::<f64>(n, 22), random::<f64>(n, 23));
    let (da, db, dc) = (upload(&gpu, &a), upload(&gpu, &b), upload(&gpu, &c));
    let mut o32 = upload(&gpu, &poison::<f32>(5 * n));
    let mut o64 = upload(&gpu, &poison::<f64>(5 * n));
    let (f, cfg) = launch_1d(&gpu, "selftest_math", (n as u32).div_ceil(128), 128, 0);
    let n32 = n as u32;
    unsafe {
        gpu.stream()
            .launch_builder(&f)
            .arg(&da)
            .arg(&db)
            .arg(&dc)
            .arg(&n32)
            .arg(&mut o32)
            .arg(&mut o64)
            .launch(cfg)
    }
    .unwrap();
    let (o32, o64) = (
        gpu.stream().clone_dtoh(&o32).unwrap(),
        gpu.stream().clone_dtoh(&o64).unwrap(),
    );
    for i in 0..n {
        let (x, y, z) = (a[i], b[i], c[i]);
        let want64 = [
            math::fma(x, y, z),
            math::sqrt(x.abs()),
            math::floor(x),
            math::min(x, y),
            math::max(x, y),
        ];
        let (xf, yf, zf) = (x as f32, y as f32, z as f32);
        let want32 = [
            math::fma(xf, yf, zf),
            math::sqrt(xf.abs()),
            math::floor(xf),
            math::min(xf, yf),
            math::max(xf, yf),
        ];
        assert_eq!(&o64[5 * i..5 * i + 5], &want64, "f64 math at {i}");
        assert_eq!(&o32[5 * i..5 * i + 5], &want32, "f32 math at {i}");
    }
}
