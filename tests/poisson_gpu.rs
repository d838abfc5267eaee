//! The Poisson solver's point updates on the GPU against the CPU engine (the same code: the same bits),
//! outputs poisoned with NaN first, a whole mixed-precision solve on the GPU against the CPU's, the
//! coarse levels fused into one block program, the finest level stored by colour and the shuffle
//! restriction against the CPU's V-cycle, and a tuned solver solving twice with the bits of the fixed
//! launch, also with all of those and recorded graphs.
//!
//! Without a GPU each test prints `SKIPPED (no GPU): ...` and passes; `LATTICE_GPU_REQUIRE_GPU=1` (set by
//! scripts/gpu-check.sh) turns the skip into a failure.

use lattice_gpu::host::engine::tunecache::TuneCache;
use lattice_gpu::host::engine::{TuneSpace, Variant};
use lattice_gpu::host::{
    DeviceAutoTuningLoopEngine, DeviceLoopEngine, Field, HostLoopEngine, LaunchShape, Loop3D,
    LoopEngine, Shape,
};
use lattice_gpu::kernels::poisson::{
    Jacobi, ProlongAdd, RedBlack, Residual, Restrict, RestrictPairs,
};
use lattice_gpu::kernels::stencil::{GpuEntry, PointUpdate3D};
use lattice_gpu::poisson::cg::{solve, Precision, Report, Solver};
use lattice_gpu::poisson::multigrid::{
    upload, Cycle, Layout, Multigrid, OperatorView, Smoother, StencilFields,
};
use lattice_gpu::poisson::problem::{manufactured, Problem};

mod common;
use common::{gpu, poison};

/// `p` solved on `engine` to 1e-10 with an f32 preconditioner `c`, at most 300 iterations.
fn solve_f32<E: LoopEngine>(engine: &E, p: &Problem, c: Cycle) -> (Vec<f64>, Report) {
    solve(
        engine,
        p,
        c,
        Precision::F32,
        1e-10,
        300,
        false,
        &mut |_, _| {},
    )
    .unwrap()
}

fn go<E: LoopEngine, U: PointUpdate3D + GpuEntry>(engine: &E, shape: Shape, update: &U) {
    Loop3D::new(engine, shape.interior_range())
        .unwrap()
        .run(update)
        .unwrap();
    engine.synchronize().unwrap();
}

/// Runs every point update once on `engine` from the same inputs and returns the outputs (whole arrays).
fn components<E: LoopEngine>(engine: &E) -> Vec<Vec<f32>> {
    let n = [14, 10, 6];
    let (p, _) = manufactured(n, 0.5, 1.0);
    let s = p.stencil();
    let shape = Shape::new_3d(n, 1).unwrap();
    let coarse = Shape::new_3d(n.map(|v| v / 2), 1).unwrap();
    let field = |sh: Shape, interior: &[f64]| upload::<E, f32>(engine, sh, interior).unwrap();
    let poisoned = |sh: Shape| {
        let mut f = engine.alloc::<f32>(sh).unwrap();
        f.upload(&poison::<f32>(sh.len())).unwrap();
        f
    };
    let a = StencilFields::new::<E, f32>(engine, shape, &s, Layout::Soa).unwrap();
    let OperatorView::Soa(c) = a.view::<f32>() else {
        unreachable!("asked for structure of arrays")
    };
    let x0: Vec<f64> = common::random::<f64>(p.cells(), 3);
    let (x, b) = (field(shape, &x0), field(shape, &p.rhs));
    let mut r = poisoned(shape);
    go(
        engine,
        shape,
        &Residual {
            a: c,
            x: x.view(),
            b: b.view(),
            r: r.view_mut(),
        },
    );
    let mut j = poisoned(shape);
    go(
        engine,
        shape,
        &Jacobi {
            a: c,
            x: x.view(),
            b: b.view(),
            out: j.view_mut(),
            omega: 2.0 / 3.0,
        },
    );
    let mut rb = field(shape, &x0);
    for parity in [0, 1] {
        go(
            engine,
            shape,
            &RedBlack {
                a: c,
                x: rb.view_mut(),
                b: b.view(),
                parity,
                omega: 1.0,
            },
        );
    }
    let mut cb = poisoned(coarse);
    go(
        engine,
        coarse,
        &Restrict {
            r: r.view(),
            b: cb.view_mut(),
            fine: shape.size().map(|v| v as u32),
        },
    );
    // The shuffle restriction runs over two points per coarse cell; a row of 7 cells leaves whole
    // pairs of threads idle at the end of a block 8 wide.
    let mut pairs = poisoned(coarse);
    let pair_range = RestrictPairs::<f32>::range(coarse.size().map(|v| v as u32));
    Loop3D::new(engine, pair_range)
        .unwrap()
        .run(&RestrictPairs {
            r: r.view(),
            b: pairs.view_mut(),
            fine: shape.size().map(|v| v as u32),
            coarse: coarse.size().map(|v| v as u32),
        })
        .unwrap();
    engine.synchronize().unwrap();
    let mut xf = field(shape, &x0);
    go(
        engine,
        shape,
        &ProlongAdd {
            e: cb.view(),
            x: xf.view_mut(),
            coarse: coarse.size().map(|v| v as u32),
        },
    );
    vec![
        shape.extract(&r.download().unwrap()),
        shape.extract(&j.download().unwrap()),
        shape.extract(&rb.download().unwrap()),
        coarse.extract(&cb.download().unwrap()),
        shape.extract(&xf.download().unwrap()),
        coarse.extract(&pairs.download().unwrap()),
    ]
}

#[test]
fn point_updates_match_the_cpu_engine_bit_for_bit() {
    let Some(gpu) = gpu("point_updates_match_the_cpu_engine_bit_for_bit") else {
        return;
    };
    let want = components(&HostLoopEngine);
    assert_eq!(
        want[5], want[3],
        "the shuffle restriction differs on the CPU"
    );
    for (bx, by, march) in [(32, 4, 2), (128, 1, 1), (8, 8, 4)] {
        let shape = LaunchShape {
            block_x: bx,
            block_y: by,
            march,
            variant: lattice_gpu::host::engine::Variant::Plain,
        };
        let got = components(&DeviceLoopEngine::new(gpu.clone(), shape));
        let names = [
            "residual",
            "jacobi",
            "red-black",
            "restrict",
            "prolong",
            "shuffle restrict",
        ];
        for (k, name) in names.iter().enumerate() {
            for (i, (g, w)) in got[k].iter().zip(&want[k]).enumerate() {
                assert!(
                    g.to_bits() == w.to_bits(),
                    "{name} {shape}: point {i} is {g}, CPU {w}"
                );
            }
        }
    }
}

#[test]
fn mixed_solve_on_the_gpu_matches_the_cpu() {
    let Some(gpu) = gpu("mixed_solve_on_the_gpu_matches_the_cpu") else {
        return;
    };
    let (p, exact) = manufactured([32, 32, 16], 0.5, 1.0);
    let cycle = Cycle {
        levels: 4,
        smoother: Smoother::RedBlack,
        ..Cycle::default()
    };
    let (xc, rc) = solve_f32(&HostLoopEngine, &p, cycle);
    let engine = DeviceLoopEngine::new(gpu, LaunchShape::FIXED);
    let (xg, rg) = solve_f32(&engine, &p, cycle);
    // The dot products are summed in another order on the GPU: the same iterations within 1.
    assert!(
        rg.iterations.abs_diff(rc.iterations) <= 1,
        "{} iterations on the GPU, {} on the CPU",
        rg.iterations,
        rc.iterations
    );
    let diff = xg
        .iter()
        .zip(&xc)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(diff < 1e-9, "{diff:e}");
    // The coefficients together per cell: other kernels, the same arithmetic, the same bits.
    let aos = Cycle {
        layout: Layout::Aos,
        ..cycle
    };
    let (xa, ra) = solve_f32(&engine, &p, aos);
    assert_eq!(ra.iterations, rg.iterations);
    assert!(
        xa.iter().zip(&xg).all(|(a, b)| a.to_bits() == b.to_bits()),
        "AoS and SoA differ"
    );
    let err: f64 = xg
        .iter()
        .zip(&exact)
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f64>()
        .sqrt()
        / exact.iter().map(|b| b * b).sum::<f64>().sqrt();
    assert!(err < 5e-3, "{err}");
}

#[test]
fn fused_coarse_cycle_matches_the_cpu_bit_for_bit() {
    let Some(gpu) = gpu("fused_coarse_cycle_matches_the_cpu_bit_for_bit") else {
        return;
    };
    let (p, _) = manufactured([32, 32, 16], 0.5, 1.0);
    let r: Vec<f64> = common::random(p.cells(), 41);
    let engine = DeviceLoopEngine::new(gpu, LaunchShape::FIXED);
    for layout in [Layout::Soa, Layout::Aos] {
        let c = |fused_cells| Cycle {
            levels: 4,
            layout,
            fused_cells,
            ..Cycle::default()
        };
        // f32 and f64 preconditioners, each on the CPU fused, the GPU fused and the GPU unfused.
        macro_rules! check {
            ($t:ty) => {{
                let mut cpu = Multigrid::<_, $t>::new(&HostLoopEngine, &p, c(4096)).unwrap();
                let mut fused = Multigrid::<_, $t>::new(&engine, &p, c(4096)).unwrap();
                let mut plain = Multigrid::<_, $t>::new(&engine, &p, c(0)).unwrap();
                assert_eq!(fused.fused_from(), Some(1));
                let want = cpu.precondition(&r).unwrap();
                assert!(want.iter().any(|&v| v != 0.0));
                let mut runs = vec![
                    ("fused", fused.precondition(&r).unwrap()),
                    ("not fused", plain.precondition(&r).unwrap()),
                ];
                if layout == Layout::Soa {
                    // The finest level stored by colour, on its own and with the fused levels.
                    // The shuffle restriction on the unfused levels.
                    for (name, cells, shuffle_restrict) in [
                        ("by colour", 0, false),
                        ("by colour, fused", 4096, false),
                        ("by colour, shuffle restriction", 0, true),
                    ] {
                        let split = Cycle {
                            colours: true,
                            shuffle_restrict,
                            ..c(cells)
                        };
                        let mut mg = Multigrid::<_, $t>::new(&engine, &p, split).unwrap();
                        runs.push((name, mg.precondition(&r).unwrap()));
                    }
                }
                for (name, got) in runs {
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same,
                        "{layout:?} {}: {name} on the GPU differs",
                        stringify!($t)
                    );
                }
            }};
        }
        check!(f32);
        check!(f64);
    }
}

#[test]
fn tuned_solver_repeats_with_the_bits_of_the_fixed_launch() {
    let Some(gpu) = gpu("tuned_solver_repeats_with_the_bits_of_the_fixed_launch") else {
        return;
    };
    let (p, _) = manufactured([32, 32, 16], 0.5, 1.0);
    let cycle = Cycle {
        levels: 4,
        ..Cycle::default()
    };
    let fixed = DeviceLoopEngine::new(gpu.clone(), LaunchShape::FIXED);
    let (want, rep) = solve_f32(&fixed, &p, cycle);
    // A small space keeps the tuning short; every point update gives the same bits in any launch.
    let space = TuneSpace::table1()
        .with("block_x", vec![32, 64])
        .with("block_y", vec![1, 4])
        .with("march", vec![1, 2]);
    let tuner =
        DeviceAutoTuningLoopEngine::new(gpu.clone(), TuneCache::in_memory()).space(space.clone());
    let mut solver = Solver::new(&tuner, &p, cycle, Precision::F32).unwrap();
    solver.tune().unwrap();
    assert!(
        solver.smoother_tuning().is_some(),
        "the smoother was not tuned"
    );
    for timed in [false, true] {
        let got = solver.solve(1e-10, 300, timed, &mut |_, _| {}).unwrap();
        assert_eq!(got.iterations, rep.iterations, "timed: {timed}");
        let x = solver.solution().unwrap();
        assert!(
            x.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
            "timed: {timed}: the tuned solve differs from the fixed launch's"
        );
    }
    // The smoother alone runs (and leaves the next solve unchanged).
    solver.smooth_finest(3).unwrap();
    let again = solver.solve(1e-10, 300, false, &mut |_, _| {}).unwrap();
    assert_eq!(again.iterations, rep.iterations);
    // The finest level by colour, fused coarse levels and each application replayed as a recorded graph,
    // on the tuned and the fixed engine: solved twice (the second time from the graph recorded in the
    // first), the same bits.
    let fast = Cycle {
        fused_cells: 4096,
        graph: true,
        colours: true,
        shuffle_restrict: true,
        ..cycle
    };
    fn twice<E: LoopEngine>(mut solver: Solver<E>, want: &[f64], iterations: usize) {
        for round in 0..2 {
            let got = solver.solve(1e-10, 300, false, &mut |_, _| {}).unwrap();
            assert_eq!(got.iterations, iterations, "round {round}");
            let x = solver.solution().unwrap();
            assert!(
                x.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                "round {round}: the fused, recorded solve differs"
            );
        }
    }
    let mut on_tuner = Solver::new(&tuner, &p, fast, Precision::F32).unwrap();
    on_tuner.tune().unwrap();
    twice(on_tuner, &want, rep.iterations);
    let on_fixed = Solver::new(&fixed, &p, fast, Precision::F32).unwrap();
    twice(on_fixed, &want, rep.iterations);
    // The by-colour sweep's vector variant, forced (kernels without one run their plain variant), with
    // f32 and f64 preconditioners: the bits of the fixed plain launch.
    // (Narrow blocks: a vector thread takes 4 of a half row's 17 cells.)
    let vector = DeviceAutoTuningLoopEngine::new(gpu.clone(), TuneCache::in_memory())
        .space(space.with("block_x", vec![4, 8]))
        .variants(&[Variant::Vector]);
    for precision in [Precision::F32, Precision::F64] {
        let mut plain = Solver::new(&fixed, &p, fast, precision).unwrap();
        let iterations = plain
            .solve(1e-10, 300, false, &mut |_, _| {})
            .unwrap()
            .iterations;
        let want = plain.solution().unwrap();
        let mut on_vector = Solver::new(&vector, &p, fast, precision).unwrap();
        on_vector.tune().unwrap();
        let best = on_vector.smoother_tuning().map(|t| t.best);
        assert_eq!(best.map(|b| b.variant), Some(Variant::Vector), "{best:?}");
        twice(on_vector, &want, iterations);
    }
    // CG's scalars kept on the GPU (read every iteration, and every 4): the same iterations, and the
    // iterate to the rounding of the dot products' other order.
    let mut solver = Solver::new(&tuner, &p, fast, Precision::F32).unwrap();
    solver.tune().unwrap();
    for every in [1, 4] {
        let got = solver
            .solve_async(1e-10, 300, every, &mut |_, _| {})
            .unwrap();
        assert!(
            got.iterations.abs_diff(rep.iterations) <= 1,
            "every {every}: {} iterations, {} with the host's scalars",
            got.iterations,
            rep.iterations
        );
        let x = solver.solution().unwrap();
        let diff = x
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(diff <= 1e-8 * scale, "every {every}: {diff:e}");
    }
}

#[test]
fn device_dot_matches_the_host() {
    let Some(gpu) = gpu("device_dot_matches_the_host") else {
        return;
    };
    // Odd sizes, more blocks' worth than one wave, margins included.
    let shape = Shape::new_3d([131, 67, 45], 1).unwrap();
    let (a, b) = (
        common::random::<f64>(shape.len(), 8),
        common::random::<f64>(shape.len(), 9),
    );
    let want: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
    let engine = DeviceLoopEngine::new(gpu, LaunchShape::FIXED);
    let (mut fa, mut fb) = (
        engine.alloc::<f64>(shape).unwrap(),
        engine.alloc::<f64>(shape).unwrap(),
    );
    fa.upload(&a).unwrap();
    fb.upload(&b).unwrap();
    let got = engine.dot(&fa, &fb).unwrap();
    assert!(
        (got - want).abs() < 1e-10 * want.abs().max(1.0),
        "{got} vs {want}"
    );
    let host = HostLoopEngine
        .dot(&upload_host(shape, &a), &upload_host(shape, &b))
        .unwrap();
    assert!(
        (host - want).abs() < 1e-10 * want.abs().max(1.0),
        "{host} vs {want}"
    );
}

fn upload_host(shape: Shape, data: &[f64]) -> lattice_gpu::host::HostField<f64> {
    let mut f = HostLoopEngine.alloc::<f64>(shape).unwrap();
    f.upload(data).unwrap();
    f
}
