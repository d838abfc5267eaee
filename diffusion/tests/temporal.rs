//! The temporally blocked loop (`lattice_gpu_kernels::stencil::TemporalBlock`), run by the launch
//! emulator on the CPU: `steps` steps in one pass give the bits of `steps` single steps of the CPU
//! engine, on odd sizes, in f32 and f64, for several launch shapes, with the output poisoned first;
//! and for a wider update reading diagonal neighbours in other planes, over a range short of the
//! array's interior (points between them held, as single steps hold them); and the CPU engine's blocked
//! schedule likewise. A pass that advances more points than it writes (`PassRange`: a split run's
//! halo layers) writes what single steps over its live range give, at its output's points only. On a
//! GPU, the blocked kernel against single steps of the plain one, likewise (skipped without a GPU).

use lattice_gpu_diffusion::Problem;
use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::engine::{
    column_kernel, emulate3d_columns, emulate3d_temporal, host_pass, launch_pass, PassForm,
    TuneSpace,
};
use lattice_gpu_host::{
    DeviceAutoTuningLoopEngine, DeviceLoopEngine, Element, Field, HostLoopEngine, LaunchShape,
    Loop3D, LoopEngine, Shape,
};
use lattice_gpu_kernels::diffusion::{Diffusion3d, DiffusionReal};
use lattice_gpu_kernels::stencil::{
    GpuEntry, LoopRange, PassRange, PassSignal, StencilUpdate3D, Variant,
};

use lattice_gpu_testkit as common;
use lattice_gpu_testkit::{random, Wide};

/// `f` random everywhere, and `g` equal to it outside `range` and NaN inside: both fields a single step
/// swaps between hold the same margin, the boundary condition of a blocked pass.
fn fields<T: Element>(shape: Shape, range: &LoopRange, seed: u64) -> (Vec<T>, Vec<T>) {
    let f = random::<T>(shape.len(), seed);
    let mut g = f.clone();
    let [nx, ny, _] = shape.size();
    for k in range.begin[2]..range.end[2] {
        for j in range.begin[1]..range.end[1] {
            for i in range.begin[0]..range.end[0] {
                g[i as usize + nx * (j as usize + ny * k as usize)] = T::from_f64(f64::NAN);
            }
        }
    }
    (f, g)
}

/// `steps` single steps of `update` on the CPU engine, the fields swapping after each: the field last
/// written.
fn single_steps<T: Element, F: StencilUpdate3D<Real = T> + GpuEntry, E: LoopEngine>(
    engine: &E,
    shape: Shape,
    range: LoopRange,
    (f0, g0): &(Vec<T>, Vec<T>),
    steps: u32,
    update: &impl Fn(&dyn Field<T>, &mut dyn Field<T>) -> F,
) -> Vec<T> {
    let mut f = engine.alloc::<T>(shape).unwrap();
    let mut g = engine.alloc::<T>(shape).unwrap();
    f.upload(f0).unwrap();
    g.upload(g0).unwrap();
    let mut lp = Loop3D::new(engine, range).unwrap();
    for _ in 0..steps {
        lp.run(&update(&f, &mut g)).unwrap();
        std::mem::swap(&mut f, &mut g);
    }
    f.download().unwrap()
}

/// What a pass over `pass` leaves in its output, whose first values were `g0`: `single`, the single
/// steps over its live range, at the points of its `out`; `g0` elsewhere.
fn written<T: Element>(shape: Shape, pass: &PassRange, g0: &[T], single: &[T]) -> Vec<T> {
    let [nx, ny, _] = shape.size();
    let o = &pass.out;
    let mut want = g0.to_vec();
    for k in o.begin[2]..o.end[2] {
        for j in o.begin[1]..o.end[1] {
            let at = nx * (j as usize + ny * k as usize);
            let row = at + o.begin[0] as usize..at + o.end[0] as usize;
            want[row.clone()].copy_from_slice(&single[row]);
        }
    }
    want
}

/// `range` with `lo` points more at its start and `hi` more at its end along each axis (negative:
/// fewer).
fn widen(range: LoopRange, lo: [i32; 3], hi: [i32; 3]) -> LoopRange {
    LoopRange {
        begin: [0, 1, 2].map(|a| (range.begin[a] as i32 - lo[a]) as u32),
        end: [0, 1, 2].map(|a| (range.end[a] as i32 + hi[a]) as u32),
        ..range
    }
}

/// One blocked pass of `steps` steps over each of `passes` for each shape, against the single steps,
/// bit for bit.
fn blocked_matches_single_steps<T: Element, F: StencilUpdate3D<Real = T> + GpuEntry>(
    shape: Shape,
    passes: &[PassRange],
    shapes: &[(u32, u32, u32)],
    max_steps: u32,
    update: impl Fn(&dyn Field<T>, &mut dyn Field<T>) -> F,
    what: &str,
) {
    for pass in passes {
        blocked_pass_matches(shape, pass, shapes, max_steps, &update, what);
    }
}

/// How a test names `pass`.
fn describe(pass: &PassRange) -> String {
    let (o, l) = (&pass.out, &pass.live);
    format!(
        "writing {:?}..{:?} of live {:?}..{:?}",
        o.begin, o.end, l.begin, l.end
    )
}

/// [`blocked_matches_single_steps`] for one pass.
fn blocked_pass_matches<T: Element, F: StencilUpdate3D<Real = T> + GpuEntry>(
    shape: Shape,
    pass: &PassRange,
    shapes: &[(u32, u32, u32)],
    max_steps: u32,
    update: &impl Fn(&dyn Field<T>, &mut dyn Field<T>) -> F,
    what: &str,
) {
    let init = fields::<T>(shape, &pass.live, 11);
    let what = format!("{what}, {}", describe(pass));
    for steps in 1..=max_steps {
        let single = single_steps(&HostLoopEngine, shape, pass.live, &init, steps, update);
        let want = written(shape, pass, &init.1, &single);
        for &(block_x, block_y, march) in shapes {
            let launch = LaunchShape {
                block_x,
                block_y,
                march,
                variant: Variant::Plain,
            };
            let mut f = HostLoopEngine.alloc::<T>(shape).unwrap();
            let mut g = HostLoopEngine.alloc::<T>(shape).unwrap();
            f.upload(&init.0).unwrap();
            g.upload(&init.1).unwrap();
            emulate3d_temporal(&update(&f, &mut g), pass, launch, steps).unwrap();
            same_bits(
                &g.download().unwrap(),
                &want,
                &format!("{what}: {steps} steps {launch}"),
            );
        }
        // The CPU engine's own blocked schedule (one task per tile).
        let mut f = HostLoopEngine.alloc::<T>(shape).unwrap();
        let mut g = HostLoopEngine.alloc::<T>(shape).unwrap();
        f.upload(&init.0).unwrap();
        g.upload(&init.1).unwrap();
        Loop3D::advancing(&HostLoopEngine, pass.out, pass.live)
            .unwrap()
            .run_temporal(&update(&f, &mut g), steps)
            .unwrap();
        let what = format!("{what}: {steps} steps, CPU engine");
        same_bits(&g.download().unwrap(), &want, &what);
        // Its tasks' boxes: tiles narrower than the halo, ragged ones, and slabs of one plane.
        for tile in [[3, 2, 1], [7, 5, 4], [16, 8, 9]] {
            g.upload(&init.1).unwrap();
            host_pass(&update(&f, &mut g), pass, steps, tile).unwrap();
            same_bits(
                &g.download().unwrap(),
                &want,
                &format!("{what}, tiles {tile:?}"),
            );
        }
    }
}

/// `got` and `want` bit for bit (a NaN left in `got` fails too).
fn same_bits<T: Element>(got: &[T], want: &[T], what: &str) {
    let bad = got
        .iter()
        .zip(want)
        .position(|(a, b)| a.to_f64().to_bits() != b.to_f64().to_bits());
    if let Some(p) = bad {
        panic!(
            "{what} {}: point {p} of the blocked pass is {} where single steps give {}",
            T::NAME,
            got[p].to_f64(),
            want[p].to_f64()
        );
    }
}

fn diffusion_blocked<T: Element + DiffusionReal>() {
    let problem = Problem::new([37, 29, 23], 0.3, None).unwrap();
    let shape = problem.shape::<T>().unwrap();
    let r = shape.interior_range();
    // Also as a split run's pass: its halo planes in z live, not written.
    let split = PassRange::new(r, widen(r, [0, 0, -2], [0, 0, -3]));
    blocked_matches_single_steps::<T, _>(
        shape,
        &[PassRange::whole(r), split],
        // Blocks narrower than the halo of four steps, wide ones, and z slabs of 1, 5 and all planes.
        &[(4, 2, 1), (8, 4, 5), (16, 8, 23), (32, 2, 7)],
        4,
        |f, g| Diffusion3d::new(f.view(), g.view_mut(), problem.kappa, problem.dt, problem.h),
        "diffusion",
    );
}

#[test]
fn blocked_diffusion_steps_equal_single_steps_f32() {
    diffusion_blocked::<f32>();
}

#[test]
fn blocked_diffusion_steps_equal_single_steps_f64() {
    diffusion_blocked::<f64>();
}

#[test]
fn blocked_steps_of_a_wider_stencil_over_a_short_range_equal_single_steps() {
    let shape = Shape::new_3d([21, 13, 11], 2).unwrap();
    let r = shape.interior_range();
    let range = LoopRange {
        begin: [r.begin[0] + 1, r.begin[1], r.begin[2] + 2],
        end: [r.end[0] - 1, r.end[1] - 1, r.end[2] - 1],
        ..r
    };
    // Also advancing the points beyond it on five sides of three axes, without writing them.
    let beyond = PassRange::new(widen(range, [1, 0, 2], [1, 1, 1]), range);
    blocked_matches_single_steps::<f64, _>(
        shape,
        &[PassRange::whole(range), beyond],
        &[(4, 2, 3), (8, 4, 8), (16, 4, 1)],
        3,
        |f, g| Wide {
            f: f.view(),
            out: g.view_mut(),
        },
        "wide stencil",
    );
}

/// The column form (`ColumnThread`) of `T` steps for each block, against `T` single steps, bit for bit,
/// over the interior, over a range short of it on some sides (its margin points held), and writing
/// that range while advancing the interior.
fn columns_match<T: Element + DiffusionReal, const S: usize>(blocks: &[([u32; 2], u32)]) {
    let problem = Problem::new([37, 29, 23], 0.3, None).unwrap();
    let shape = problem.shape::<T>().unwrap();
    let r = shape.interior_range();
    let short = LoopRange {
        begin: [r.begin[0] + 2, r.begin[1], r.begin[2] + 1],
        end: [r.end[0], r.end[1] - 3, r.end[2]],
        ..r
    };
    let update = |f: &dyn Field<T>, g: &mut dyn Field<T>| {
        Diffusion3d::new(f.view(), g.view_mut(), problem.kappa, problem.dt, problem.h)
    };
    let beyond = PassRange::new(r, short);
    // Output planes farther inside than a pass reaches: the live range beyond is cut, the same bits.
    let deep = PassRange::new(r, widen(r, [0, 0, -6], [0, 0, -7]));
    for pass in [PassRange::whole(r), PassRange::whole(short), beyond, deep] {
        let init = fields::<T>(shape, &pass.live, 17);
        let single = single_steps(&HostLoopEngine, shape, pass.live, &init, S as u32, &update);
        let want = written(shape, &pass, &init.1, &single);
        // Unsignalled, and signalled with ends of 1 and S planes: the blocks then march their slabs
        // from both ends inwards, and together count the points of the ends they wrote.
        let launches = blocks
            .iter()
            .flat_map(|&l| [(l, None), (l, Some(1)), (l, Some(S as u32))]);
        for ((block, march), depth) in launches {
            let mut f = HostLoopEngine.alloc::<T>(shape).unwrap();
            let mut g = HostLoopEngine.alloc::<T>(shape).unwrap();
            f.upload(&init.0).unwrap();
            g.upload(&init.1).unwrap();
            let counter = std::sync::atomic::AtomicU32::new(7);
            let mut signalled = pass;
            if let Some(depth) = depth {
                signalled.signal = PassSignal {
                    counter: counter.as_ptr() as u64,
                    depth,
                    pad: 0,
                };
            }
            emulate3d_columns::<_, S>(&update(&f, &mut g), &signalled, block, march).unwrap();
            let what = format!(
                "column form, {S} steps, block {block:?}, march {march}, signal depth {depth:?}, {}",
                describe(&pass)
            );
            same_bits(&g.download().unwrap(), &want, &what);
            let ends = depth.map_or(0, |d| pass.end_points(d));
            assert_eq!(counter.into_inner() as u64, 7 + ends, "{what}");
        }
    }
}

fn columns_all<T: Element + DiffusionReal>() {
    // Blocks just wider than the halo (one point of output tile), odd ones, and wide ones; z slabs of
    // 1, 4 and all planes.
    columns_match::<T, 1>(&[([3, 3], 1), ([12, 5], 4), ([32, 8], 23)]);
    columns_match::<T, 2>(&[([5, 5], 3), ([13, 7], 1), ([32, 8], 23)]);
    columns_match::<T, 3>(&[([7, 7], 2), ([16, 9], 5), ([32, 16], 23)]);
    columns_match::<T, 4>(&[([9, 9], 4), ([20, 11], 1), ([32, 16], 23)]);
}

#[test]
fn column_form_steps_equal_single_steps_f32() {
    columns_all::<f32>();
}

#[test]
fn column_form_steps_equal_single_steps_f64() {
    columns_all::<f64>();
}

#[test]
fn the_column_form_refuses_a_block_without_an_output_tile() {
    let shape = Shape::new_3d([9, 9, 9], 1).unwrap();
    let problem = Problem::new([9, 9, 9], 0.1, None).unwrap();
    let f = HostLoopEngine.alloc::<f64>(shape).unwrap();
    let mut g = HostLoopEngine.alloc::<f64>(shape).unwrap();
    let update = Diffusion3d::new(f.view(), g.view_mut(), problem.kappa, problem.dt, problem.h);
    let whole = PassRange::whole(shape.interior_range());
    let e = emulate3d_columns::<_, 2>(&update, &whole, [4, 16], 9)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no output tile") && e.contains("more than 4 x 4"),
        "{e}"
    );
}

/// A loop whose passes count their end planes for an exchange refuses what would leave the count
/// short: single steps, steps the engine chooses, and the CPU engine's passes.
#[test]
fn a_signalling_loop_refuses_work_that_counts_nothing() {
    let problem = Problem::new([9, 9, 9], 0.1, None).unwrap();
    let shape = problem.shape::<f64>().unwrap();
    let f = HostLoopEngine.alloc::<f64>(shape).unwrap();
    let mut g = HostLoopEngine.alloc::<f64>(shape).unwrap();
    let update = Diffusion3d::new(f.view(), g.view_mut(), problem.kappa, problem.dt, problem.h);
    let mut counter = 0u32;
    let signal = PassSignal {
        counter: &mut counter as *mut u32 as u64,
        depth: 2,
        pad: 0,
    };
    let mut lp = Loop3D::new(&HostLoopEngine, shape.interior_range())
        .unwrap()
        .signalling(signal);
    let single = lp.run(&update).unwrap_err().to_string();
    assert!(
        single.contains("a single step") && single.contains("count"),
        "{single}"
    );
    let chosen = lp.run_steps(&update, 3).unwrap_err().to_string();
    assert!(chosen.contains("count"), "{chosen}");
    let pass = lp.run_temporal(&update, 2).unwrap_err().to_string();
    assert!(pass.contains("run on the GPU"), "{pass}");
    assert_eq!(counter, 0);
}

#[test]
fn a_pass_writing_outside_the_points_it_advances_is_refused() {
    let shape = Shape::new_3d([9, 9, 9], 1).unwrap();
    let r = shape.interior_range();
    let e = Loop3D::advancing(&HostLoopEngine, r, widen(r, [0, 0, -1], [0, 0, 0]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("within its live range"), "{e}");
}

#[test]
fn the_emulator_refuses_steps_a_pass_cannot_take() {
    let shape = Shape::new_3d([9, 9, 9], 1).unwrap();
    let problem = Problem::new([9, 9, 9], 0.1, None).unwrap();
    let f = HostLoopEngine.alloc::<f64>(shape).unwrap();
    let mut g = HostLoopEngine.alloc::<f64>(shape).unwrap();
    let update = Diffusion3d::new(f.view(), g.view_mut(), problem.kappa, problem.dt, problem.h);
    let launch = LaunchShape {
        block_x: 32,
        block_y: 32,
        march: 9,
        variant: Variant::Plain,
    };
    for (steps, want) in [
        (0, "advances 1 to 8"),
        (9, "advances 1 to 8"),
        (8, "bytes of shared memory"),
    ] {
        let whole = PassRange::whole(shape.interior_range());
        let e = emulate3d_temporal(&update, &whole, launch, steps)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{steps} steps: {e}");
    }
}

/// One pass of 1 to 4 steps in `form` with each block and march, on the GPU, against single steps of
/// the plain kernel, bit for bit: over the interior, and writing a range short of it on four sides
/// while advancing the interior.
fn gpu_passes<T: Element + DiffusionReal>(
    gpu: &std::sync::Arc<lattice_gpu_host::Gpu>,
    form: PassForm,
    launches: &[([u32; 2], u32)],
    seed: u64,
) {
    let problem = Problem::new([37, 29, 23], 0.3, None).unwrap();
    let shape = problem.shape::<T>().unwrap();
    let range = shape.interior_range();
    let update = |f: &dyn Field<T>, g: &mut dyn Field<T>| {
        Diffusion3d::new(f.view(), g.view_mut(), problem.kappa, problem.dt, problem.h)
    };
    let beyond = PassRange::new(range, widen(range, [-2, 0, -3], [0, -1, -2]));
    let single = DeviceLoopEngine::new(gpu.clone(), LaunchShape::FIXED);
    for (pass, steps) in [PassRange::whole(range), beyond]
        .into_iter()
        .flat_map(|p| (1..=4).map(move |s| (p, s)))
    {
        let init = fields::<T>(shape, &pass.live, seed);
        let ones = single_steps(&single, shape, pass.live, &init, steps, &update);
        let want = written(shape, &pass, &init.1, &ones);
        for &([block_x, block_y], march) in launches {
            let launch = LaunchShape {
                block_x,
                block_y,
                march,
                variant: Variant::Plain,
            };
            let mut f = single.alloc::<T>(shape).unwrap();
            let mut g = single.alloc::<T>(shape).unwrap();
            f.upload(&init.0).unwrap();
            g.upload(&init.1).unwrap();
            launch_pass(gpu, &update(&f, &mut g), &pass, form, launch, steps).unwrap();
            same_bits(
                &g.download().unwrap(),
                &want,
                &format!(
                    "GPU, {} form: {steps} steps {launch}, {}",
                    form.name(),
                    describe(&pass)
                ),
            );
        }
    }
}

#[test]
fn gpu_blocked_diffusion_steps_equal_single_steps() {
    let Some(gpu) = common::gpu("gpu_blocked_diffusion_steps_equal_single_steps") else {
        return;
    };
    let launches = [([32, 4], 23), ([16, 8], 5), ([8, 2], 1)];
    gpu_passes::<f32>(&gpu, PassForm::General, &launches, 13);
    gpu_passes::<f64>(&gpu, PassForm::General, &launches, 13);
}

/// On a GPU, the column form's entries for 1 to 4 steps against single steps of the plain kernel, bit
/// for bit (skipped without a GPU).
#[test]
fn gpu_column_form_equals_single_steps() {
    let Some(gpu) = common::gpu("gpu_column_form_equals_single_steps") else {
        return;
    };
    let launches = [([24, 10], 23), ([16, 16], 5), ([12, 10], 1)];
    // Blocks of 1024 threads run the f32 pass of four steps in its 32-register twin (f64 passes
    // have too many registers for them).
    let f32_launches = [launches.as_slice(), &[([32, 32], 7)]].concat();
    gpu_passes::<f32>(&gpu, PassForm::Columns, &f32_launches, 19);
    gpu_passes::<f64>(&gpu, PassForm::Columns, &launches, 19);
}

/// On a GPU, a column-form launch runs the entry's 32-register twin where that holds two blocks of
/// 1024 threads on an SM instead of one (f32, four steps: 40 registers without the cap), and the
/// entry itself where the cap buys nothing (small blocks, which the shared planes limit, or
/// registers already within the cap: three steps take 32) or would spill (f64); skipped without a
/// GPU.
#[test]
fn gpu_column_launches_take_the_register_capped_twin_where_it_holds_more_blocks() {
    let Some(gpu) = common::gpu("gpu_column_launches_take_the_register_capped_twin") else {
        return;
    };
    let kernel = |block, steps| column_kernel::<Diffusion3d<f32>>(&gpu, block, steps).unwrap();
    assert_eq!(kernel([32, 32], 4), "diffusion3d_columns4_f32__maxnreg32");
    assert_eq!(kernel([16, 8], 4), "diffusion3d_columns4_f32");
    assert_eq!(kernel([32, 32], 3), "diffusion3d_columns3_f32");
    assert_eq!(kernel([32, 32], 1), "diffusion3d_columns1_f32");
    let f64_kernel = column_kernel::<Diffusion3d<f64>>(&gpu, [32, 32], 2).unwrap();
    assert_eq!(f64_kernel, "diffusion3d_columns2_f64");
}

fn gpu_tuned<T: Element + DiffusionReal>(gpu: &std::sync::Arc<lattice_gpu_host::Gpu>) {
    let problem = Problem::new([37, 29, 23], 0.3, None).unwrap();
    let shape = problem.shape::<T>().unwrap();
    let range = shape.interior_range();
    let update = |f: &dyn Field<T>, g: &mut dyn Field<T>| {
        Diffusion3d::new(f.view(), g.view_mut(), problem.kappa, problem.dt, problem.h)
    };
    let init = fields::<T>(shape, &range, 29);
    // A small single-step space, timed once each: the passes' own candidates are the tuner's.
    let space = TuneSpace::table1()
        .with("block_x", vec![32])
        .with("block_y", vec![4])
        .with("march", vec![4, 8]);
    let tuner = DeviceAutoTuningLoopEngine::new(gpu.clone(), TuneCache::in_memory())
        .space(space)
        .reps(1);
    let mut f = tuner.alloc::<T>(shape).unwrap();
    let mut g = tuner.alloc::<T>(shape).unwrap();
    f.upload(&init.0).unwrap();
    g.upload(&init.1).unwrap();
    let mut lp = Loop3D::new(&tuner, range).unwrap();
    let (mut done, mut counts) = (0, [0; 5]);
    // Until it has chosen, then a few of its choice; room for a pass of 3 only now and then.
    while lp.info().choice().is_none() || done < 400 {
        let room = [4, 4, 2, 3][done % 4];
        let t = lp.run_steps(&update(&f, &mut g), room).unwrap();
        assert!((1..=room).contains(&t), "{t} steps in room for {room}");
        counts[t as usize] += 1;
        done += t as usize;
        std::mem::swap(&mut f, &mut g);
        assert!(done < 5000, "no choice after {done} steps");
    }
    let choice = lp.info().choice().unwrap().clone();
    assert!(
        counts[2] > 0 && counts[3] > 0 && counts[4] > 0,
        "{counts:?}"
    );
    let want = single_steps(
        &DeviceLoopEngine::new(gpu.clone(), LaunchShape::FIXED),
        shape,
        range,
        &init,
        done as u32,
        &update,
    );
    same_bits(
        &f.download().unwrap(),
        &want,
        &format!("auto-tuned steps ({counts:?} of 1 to 4 steps, then {choice})"),
    );
}

/// On a GPU, the auto-tuner's steps (`Loop3D::run_steps`: single steps and passes of 2 to 4 steps
/// in the column form while it tunes, then its choice) give the bits of as many single steps, and it
/// chooses (skipped without a GPU).
#[test]
fn gpu_tuned_steps_equal_single_steps() {
    let Some(gpu) = common::gpu("gpu_tuned_steps_equal_single_steps") else {
        return;
    };
    gpu_tuned::<f32>(&gpu);
    gpu_tuned::<f64>(&gpu);
}
