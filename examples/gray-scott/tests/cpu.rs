//! The CPU engine, through the same `simulate` the application runs, against a naive triple loop
//! written here from the equations (not from the kernel crate); and properties the scheme must keep:
//! the walls' steady state stays exact, the reaction alone is Euler's method on the ODE, and the time
//! step is checked against the stability bound. The 3-D kernel's GPU variants, run by the launch
//! emulator, against the CPU engine bit for bit.

use gray_scott::{simulate, Fields, Grid, Model, Problem};
use gray_scott_kernels::{GrayScott3d, GrayScottReal};
use lattice_gpu::host::engine::emulate::{emulate3d_fields, EMULATED_MAX_THREADS};
use lattice_gpu::host::engine::{tune_candidates, KernelInfo, TuneSpace};
use lattice_gpu::host::{Element, Field, HostLoopEngine, Loop3D, LoopEngine, Shape};
use lattice_gpu::kernels::device::math::Real;

/// Interior values with u in [0.2, 1] and v in [0, 0.5] from a small LCG of this file's own.
fn random_state(points: usize, seed: u64) -> Fields<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    let u = (0..points).map(|_| 0.2 + 0.8 * next()).collect();
    let v = (0..points).map(|_| 0.5 * next()).collect();
    Fields { u, v }
}

fn convert<S: Real, T: Real>(f: &Fields<S>) -> Fields<T> {
    let c = |x: &Vec<S>| x.iter().map(|&v| T::from_f64(v.to_f64())).collect();
    Fields {
        u: c(&f.u),
        v: c(&f.v),
    }
}

/// The CPU engine's state after `steps` steps from `initial`.
fn host_run<T: lattice_gpu::host::Element + gray_scott_kernels::GrayScottReal>(
    problem: &Problem,
    initial: Fields<T>,
    steps: usize,
) -> Fields<T> {
    simulate(
        &HostLoopEngine,
        problem,
        || initial,
        steps,
        None,
        |_, _| Ok(()),
        |_| {},
    )
    .unwrap()
    .fields
}

/// The explicit Euler scheme as the equations read, on an array with a one-point wall (u = 1, v = 0)
/// around the interior (in z too for a 3-D grid).
fn naive(problem: &Problem, initial: &Fields<f64>, steps: usize) -> Fields<f64> {
    let [nx, ny, nz] = problem.grid.size();
    let three = problem.grid.dims() == 3;
    let (mx, my, mz) = (nx + 2, ny + 2, if three { nz + 2 } else { 1 });
    let oz = usize::from(three);
    let at = |i: usize, j: usize, k: usize| i + mx * (j + my * k);
    let (mut u, mut v) = (vec![1.0; mx * my * mz], vec![0.0; mx * my * mz]);
    for k in 0..nz {
        for j in 0..ny {
            for i in 0..nx {
                let src = i + nx * (j + ny * k);
                u[at(i + 1, j + 1, k + oz)] = initial.u[src];
                v[at(i + 1, j + 1, k + oz)] = initial.v[src];
            }
        }
    }
    let Model {
        f,
        k: kill,
        du,
        dv,
        h,
    } = problem.model;
    let dt = problem.dt;
    for _ in 0..steps {
        let (mut un, mut vn) = (u.clone(), v.clone());
        for k in oz..nz + oz {
            for j in 1..=ny {
                for i in 1..=nx {
                    let lap = |a: &[f64]| {
                        let mut s = a[at(i + 1, j, k)]
                            + a[at(i - 1, j, k)]
                            + a[at(i, j + 1, k)]
                            + a[at(i, j - 1, k)]
                            - 4.0 * a[at(i, j, k)];
                        if three {
                            s += a[at(i, j, k + 1)] + a[at(i, j, k - 1)] - 2.0 * a[at(i, j, k)];
                        }
                        s / (h * h)
                    };
                    let (a, b) = (u[at(i, j, k)], v[at(i, j, k)]);
                    un[at(i, j, k)] = a + dt * (du * lap(&u) - a * b * b + f * (1.0 - a));
                    vn[at(i, j, k)] = b + dt * (dv * lap(&v) + a * b * b - (f + kill) * b);
                }
            }
        }
        (u, v) = (un, vn);
    }
    let interior = |a: &[f64]| {
        let mut out = Vec::with_capacity(nx * ny * nz);
        for k in 0..nz {
            for j in 0..ny {
                out.extend_from_slice(&a[at(1, j + 1, k + oz)..at(nx + 1, j + 1, k + oz)]);
            }
        }
        out
    };
    Fields {
        u: interior(&u),
        v: interior(&v),
    }
}

/// `max |a - b| / max |b|`.
fn relative_error<T: Real>(a: &[T], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let diff = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x.to_f64() - y).abs())
        .fold(0.0, f64::max);
    let scale = b.iter().map(|y| y.abs()).fold(0.0, f64::max);
    assert!(diff.is_finite(), "non-finite result");
    diff / scale
}

fn grids() -> [Grid; 2] {
    [Grid::Volume([13, 11, 9]), Grid::Plane([13, 11])]
}

#[test]
fn host_engine_matches_the_naive_loop_in_f64() {
    for grid in grids() {
        let problem = Problem::new(grid, Model::default(), None).unwrap();
        let n = grid.points();
        for (what, initial) in [
            ("random state", random_state(n, 3)),
            ("the application's start", problem.initial(7)),
        ] {
            let want = naive(&problem, &initial, 25);
            let got = host_run(&problem, initial, 25);
            for (name, a, b) in [("u", &got.u, &want.u), ("v", &got.v, &want.v)] {
                let e = relative_error(a, b);
                assert!(e < 1e-12, "{grid} {what}: {name} off by {e:e}");
            }
        }
    }
}

#[test]
fn host_engine_matches_the_naive_loop_in_f32() {
    for grid in grids() {
        let problem = Problem::new(grid, Model::default(), None).unwrap();
        let initial: Fields<f32> = convert(&random_state(grid.points(), 5));
        // The reference starts from the same (rounded) values, so only the arithmetic differs.
        let want = naive(&problem, &convert(&initial), 25);
        let got = host_run(&problem, initial, 25);
        for (name, a, b) in [("u", &got.u, &want.u), ("v", &got.v, &want.v)] {
            let e = relative_error(a, b);
            assert!(e < 1e-5, "{grid}: {name} off by {e:e} in f32");
        }
    }
}

#[test]
fn the_walls_steady_state_stays_exact() {
    // u = 1, v = 0 is a fixed point of the reaction for any F and k, and of the discrete Laplacian.
    for grid in grids() {
        for model in [
            Model {
                f: 0.0,
                k: 0.0,
                ..Model::default()
            },
            Model::default(),
        ] {
            let problem = Problem::new(grid, model, None).unwrap();
            let n = grid.points();
            let rest = || Fields {
                u: vec![1.0; n],
                v: vec![0.0; n],
            };
            let got = host_run::<f64>(&problem, rest(), 40);
            assert_eq!(got, rest(), "{grid} {model:?} f64");
            let got = host_run::<f32>(&problem, convert(&rest()), 40);
            assert!(
                got.u.iter().all(|&x| x == 1.0) && got.v.iter().all(|&x| x == 0.0),
                "{grid} {model:?} f32"
            );
        }
    }
}

#[test]
fn without_diffusion_each_point_follows_the_reaction_ode() {
    let model = Model {
        du: 0.0,
        dv: 0.0,
        ..Model::default()
    };
    for grid in grids() {
        let problem = Problem::new(grid, model, Some(0.5)).unwrap();
        let initial = random_state(grid.points(), 11);
        let steps = 200;
        let got = host_run(&problem, initial.clone(), steps);
        let (f, k, dt) = (model.f, model.k, problem.dt);
        for p in 0..grid.points() {
            let (mut u, mut v) = (initial.u[p], initial.v[p]);
            for _ in 0..steps {
                let uvv = u * v * v;
                (u, v) = (
                    u + dt * (-uvv + f * (1.0 - u)),
                    v + dt * (uvv - (f + k) * v),
                );
            }
            let e =
                ((got.u[p] - u).abs() / u.abs()).max((got.v[p] - v).abs() / v.abs().max(1e-300));
            assert!(
                e < 1e-12,
                "{grid} point {p}: ({}, {}) vs ODE ({u}, {v})",
                got.u[p],
                got.v[p]
            );
        }
    }
}

#[test]
fn time_steps_beyond_the_stability_bound_are_refused() {
    let model = Model::default(); // max(Du, Dv) = 0.2, h = 1
    for (grid, bound) in [
        (Grid::Volume([8; 3]), 1.0 / (6.0 * 0.2)),
        (Grid::Plane([8, 8]), 1.0 / (4.0 * 0.2)),
    ] {
        assert_eq!(Problem::max_dt(grid, &model), bound);
        let ok = Problem::new(grid, model, Some(bound)).unwrap();
        assert!(ok.stability_number() <= 1.0);
        let e = Problem::new(grid, model, Some(bound * 1.001))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unstable") && e.contains("--dt <="), "{e}");
        let default = Problem::new(grid, model, None).unwrap();
        assert!(
            default.dt <= bound && default.dt > 0.5 * bound,
            "{default:?}"
        );
    }
}

#[test]
fn bad_parameters_are_refused_with_the_flag_named() {
    let bad = |grid, model, dt| Problem::new(grid, model, dt).unwrap_err().to_string();
    let g = Grid::Volume([8; 3]);
    let m = Model::default();
    assert!(bad(Grid::Plane([0, 8]), m, None).contains("zero points"));
    assert!(bad(g, Model { f: -0.1, ..m }, None).contains("--f -0.1"));
    assert!(bad(g, Model { k: f64::NAN, ..m }, None).contains("--k NaN"));
    assert!(bad(g, Model { dv: -1.0, ..m }, None).contains("--dv"));
    assert!(bad(g, Model { h: 0.0, ..m }, None).contains("--dx"));
    assert!(bad(g, m, Some(-1.0)).contains("--dt -1"));
}

#[test]
fn sizes_parse_into_2d_and_3d_grids() {
    assert_eq!(Grid::parse("64"), Ok(Grid::Volume([64; 3])));
    assert_eq!(Grid::parse("64x32"), Ok(Grid::Plane([64, 32])));
    assert_eq!(Grid::parse("4x5x6"), Ok(Grid::Volume([4, 5, 6])));
    assert_eq!(Grid::Volume([4, 5, 6]).npy_shape(), [6, 5, 4]);
    assert_eq!(Grid::Plane([4, 5]).npy_shape(), [5, 4]);
    for bad in ["0", "4x0", "1x2x3x4", "abc", ""] {
        assert!(Grid::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn the_initial_state_is_a_noisy_centred_patch_fixed_by_the_seed() {
    let problem = Problem::new(Grid::Volume([20, 10, 5]), Model::default(), None).unwrap();
    let a = problem.initial::<f64>(1);
    assert_eq!(a, problem.initial(1));
    assert_ne!(a, problem.initial(2));
    let inside: Vec<usize> = (0..a.v.len()).filter(|&p| a.v[p] != 0.0).collect();
    // ceil(n / 5) points per axis: 4 x 2 x 1.
    assert_eq!(inside.len(), 8);
    for &p in &inside {
        assert!((a.u[p] - 0.5).abs() <= 0.01 && (a.v[p] - 0.25).abs() <= 0.01);
    }
    assert!((0..a.u.len())
        .filter(|p| !inside.contains(p))
        .all(|p| a.u[p] == 1.0));
}

/// Every launch the auto-tuner would try (plain and vector variants), emulated on the CPU: each thread
/// of each launch computes the same bits as the CPU engine and writes nothing outside the interior.
/// Rows of odd length (the vector variant falls back to columns) and rows padded to whole vectors,
/// with a partial vector at the end of each row.
fn emulated_launches_match_the_cpu<T: Element + GrayScottReal>() {
    let grid = Grid::Volume([37, 9, 7]);
    let problem = Problem::new(grid, Model::default(), None).unwrap();
    let compact = Shape::new_3d(grid.size(), 1).unwrap();
    for shape in [compact, compact.aligned_rows(size_of::<T>(), f64::INFINITY)] {
        let len = shape.len();
        let state: Fields<T> = convert(&random_state(len, 5));
        let [mut u, mut v, mut un, mut vn] =
            [(); 4].map(|_| HostLoopEngine.alloc::<T>(shape).unwrap());
        u.upload(&state.u).unwrap();
        v.upload(&state.v).unwrap();
        let range = shape.interior_range();
        let mut run = |launch| {
            for f in [&mut un, &mut vn] {
                f.upload(&vec![T::from_f64(f64::NAN); len]).unwrap();
            }
            let c = problem.coefficients::<T>();
            let step = GrayScott3d::new(u.view(), v.view(), un.view_mut(), vn.view_mut(), c);
            match launch {
                None => Loop3D::new(&HostLoopEngine, range)
                    .unwrap()
                    .run(&step)
                    .unwrap(),
                Some(launch) => emulate3d_fields(&step, &range, launch).unwrap(),
            }
            [un.download().unwrap(), vn.download().unwrap()]
        };
        let want = run(None);
        let inside = |p: usize| {
            let [sx, sy, _] = shape.size();
            let at = [p % sx, p / sx % sy, p / (sx * sy)];
            (0..3).all(|a| (range.begin[a] as usize..range.end[a] as usize).contains(&at[a]))
        };
        for (name, w) in ["unew", "vnew"].iter().zip(&want) {
            assert_eq!(
                w.iter().filter(|x| !x.to_f64().is_nan()).count(),
                grid.points(),
                "{name}: the CPU engine writes the interior"
            );
        }
        let launches = tune_candidates(
            &TuneSpace::table1_all_variants(),
            &range,
            &KernelInfo::of3d::<GrayScott3d<T>>(),
            EMULATED_MAX_THREADS,
        );
        assert!(launches.len() >= 50, "{} launches", launches.len());
        for launch in launches {
            let got = run(Some(launch));
            for (name, (g, w)) in ["unew", "vnew"].iter().zip(got.iter().zip(&want)) {
                for p in 0..len {
                    assert!(
                        g[p].to_f64().to_bits() == w[p].to_f64().to_bits()
                            || (!inside(p) && g[p].to_f64().is_nan()),
                        "{} {launch} {name}: point {p} is {:?}, the CPU engine gives {:?}",
                        T::NAME,
                        g[p],
                        w[p]
                    );
                }
            }
        }
    }
}

#[test]
fn emulated_gpu_launches_match_the_cpu_bit_for_bit_f32() {
    emulated_launches_match_the_cpu::<f32>();
}

#[test]
fn emulated_gpu_launches_match_the_cpu_bit_for_bit_f64() {
    emulated_launches_match_the_cpu::<f64>();
}
