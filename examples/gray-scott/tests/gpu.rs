//! The GPU engines against the CPU engine. Both run the same point update with the same arithmetic
//! (no fused multiply-adds on either side), so the results must agree bit for bit. `simulate` starts
//! the next step's fields as NaN, so a kernel that leaves points unwritten fails here too.
//!
//! Without a GPU each test prints `SKIPPED (no GPU): ...` and passes; with
//! `LATTICE_GPU_REQUIRE_GPU=1` a missing GPU fails instead.

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};

use gray_scott::{load_kernels, simulate, Fields, Grid, Model, Problem};
use gray_scott_kernels::GrayScottReal;
use lattice_gpu::host::engine::tunecache::TuneCache;
use lattice_gpu::host::engine::LoopEngine;
use lattice_gpu::host::{
    DeviceAutoTuningLoopEngine, DeviceLoopEngine, Element, Gpu, HostLoopEngine, LaunchShape,
};

/// The GPU with this crate's kernels loaded, held by one test at a time; `None` after printing why
/// the test is skipped.
fn gpu(test: &str) -> Option<(Arc<Gpu>, MutexGuard<'static, ()>)> {
    static TURN: Mutex<()> = Mutex::new(());
    let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(why) = Gpu::probe() {
        if std::env::var("LATTICE_GPU_REQUIRE_GPU").as_deref() == Ok("1") {
            panic!("{test}: GPU required but not usable: {why}");
        }
        // Straight to stderr: the test harness captures `eprintln!`, and a skip must be seen.
        let _ = writeln!(std::io::stderr(), "SKIPPED (no GPU): {test}: {why}");
        return None;
    }
    let gpu = Gpu::open(0).expect("opening GPU 0");
    load_kernels(&gpu).expect("loading the gray_scott_kernels module");
    Some((gpu, turn))
}

fn run<E: LoopEngine, T: Element + GrayScottReal>(
    engine: &E,
    problem: &Problem,
    steps: usize,
) -> gray_scott::Run<T> {
    simulate(
        engine,
        problem,
        || problem.initial(42),
        steps,
        None,
        |_, _| Ok(()),
        |_| {},
    )
    .unwrap_or_else(|e| panic!("{} on {}: {e}", problem.grid, engine.describe()))
}

/// Fails unless `got` equals `want` bit for bit, naming the first point that differs.
fn assert_same<T: Element>(got: &Fields<T>, want: &Fields<T>, what: &str) {
    for (name, a, b) in [("u", &got.u, &want.u), ("v", &got.v, &want.v)] {
        assert_eq!(a.len(), b.len(), "{what}: {name} length");
        if let Some(p) = (0..a.len()).find(|&p| a[p].to_f64().to_bits() != b[p].to_f64().to_bits())
        {
            let worst = a
                .iter()
                .zip(b.iter())
                .map(|(x, y)| (x.to_f64() - y.to_f64()).abs() / y.to_f64().abs().max(1e-30))
                .fold(0.0, f64::max);
            panic!(
                "{what}: {name}[{p}] is {:?} on the GPU, {:?} on the CPU (largest relative \
                 difference {worst:e}; NaN means a point was never written)",
                a[p], b[p]
            );
        }
    }
}

fn problems() -> Vec<Problem> {
    // Odd sizes, so that blocks and marches overhang the grid.
    [
        Grid::Volume([37, 29, 23]),
        Grid::Volume([13, 11, 9]),
        Grid::Plane([61, 47]),
    ]
    .into_iter()
    .map(|g| Problem::new(g, Model::default(), None).unwrap())
    .collect()
}

fn fixed_launches_match_the_cpu<T: Element + GrayScottReal>(test: &str) {
    let Some((gpu, _turn)) = gpu(test) else {
        return;
    };
    let odd = LaunchShape {
        block_x: 32,
        block_y: 4,
        march: 3,
        ..LaunchShape::FIXED
    };
    for problem in problems() {
        for steps in [1, 60] {
            let want = run::<_, T>(&HostLoopEngine, &problem, steps).fields;
            for shape in [LaunchShape::FIXED, odd] {
                let engine = DeviceLoopEngine::new(gpu.clone(), shape);
                let got = run::<_, T>(&engine, &problem, steps).fields;
                let what = format!("{} {} {steps} steps, launch {shape}", problem.grid, T::NAME);
                assert_same(&got, &want, &what);
            }
        }
    }
}

fn tuned_launches_match_the_cpu<T: Element + GrayScottReal>(test: &str) {
    let Some((gpu, _turn)) = gpu(test) else {
        return;
    };
    for problem in problems() {
        // Enough for the tuner to time every candidate and go on with the best.
        let steps = 800;
        let want = run::<_, T>(&HostLoopEngine, &problem, steps).fields;
        let tuner = DeviceAutoTuningLoopEngine::new(gpu.clone(), TuneCache::in_memory());
        let got = run::<_, T>(&tuner, &problem, steps);
        let what = format!("{} {} {steps} steps, auto-tuned", problem.grid, T::NAME);
        assert!(
            got.tuning.is_some(),
            "{what}: still tuning ({:?} steps of the needed timed)",
            got.tuning_unfinished
        );
        assert_same(&got.fields, &want, &what);
    }
}

#[test]
fn fixed_launches_match_the_cpu_bit_for_bit_f32() {
    fixed_launches_match_the_cpu::<f32>("fixed_launches_match_the_cpu_bit_for_bit_f32");
}

#[test]
fn fixed_launches_match_the_cpu_bit_for_bit_f64() {
    fixed_launches_match_the_cpu::<f64>("fixed_launches_match_the_cpu_bit_for_bit_f64");
}

#[test]
fn tuned_launches_match_the_cpu_bit_for_bit_f32() {
    tuned_launches_match_the_cpu::<f32>("tuned_launches_match_the_cpu_bit_for_bit_f32");
}

#[test]
fn tuned_launches_match_the_cpu_bit_for_bit_f64() {
    tuned_launches_match_the_cpu::<f64>("tuned_launches_match_the_cpu_bit_for_bit_f64");
}
