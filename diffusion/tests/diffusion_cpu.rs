//! The diffusion point update through the CPU engine against an independent naive f64 loop, the scheme's
//! exact decay of the sine mode, and bad input; and every GPU kernel variant with every tuning candidate,
//! run by the launch emulator on the CPU, against the CPU engine bit for bit.

use lattice_gpu_diffusion::{relative_l2, simulate, Problem};
use lattice_gpu_host::engine::emulate::EMULATED_MAX_THREADS;
use lattice_gpu_host::engine::{emulate3d, tune_candidates, KernelInfo, TuneSpace, Variant};
use lattice_gpu_host::{Element, Field, HostLoopEngine, LaunchShape, Loop3D, LoopEngine, Shape};
use lattice_gpu_kernels::diffusion::{Diffusion3d, DiffusionReal};
use lattice_gpu_kernels::stencil::{GpuEntry, LoopRange, StencilUpdate3D, VECTOR_BYTES};
use rand::{Rng, SeedableRng};

use common::{check_written, random, Wide};
use lattice_gpu_testkit as common;

/// One explicit step written plainly in f64 on a `(nx+2) x (ny+2) x (nz+2)` array: shares no code with
/// the point update, the index type or the loops.
fn naive_step(f: &[f64], n: [usize; 3], c: [f64; 3]) -> Vec<f64> {
    let (sx, sy, sz) = (n[0] + 2, n[1] + 2, n[2] + 2);
    let at = |i: usize, j: usize, k: usize| f[i + sx * (j + sy * k)];
    let mut out = f.to_vec();
    for k in 1..sz - 1 {
        for j in 1..sy - 1 {
            for i in 1..sx - 1 {
                let lap_x = at(i + 1, j, k) - 2.0 * at(i, j, k) + at(i - 1, j, k);
                let lap_y = at(i, j + 1, k) - 2.0 * at(i, j, k) + at(i, j - 1, k);
                let lap_z = at(i, j, k + 1) - 2.0 * at(i, j, k) + at(i, j, k - 1);
                out[i + sx * (j + sy * k)] =
                    at(i, j, k) + c[0] * lap_x + c[1] * lap_y + c[2] * lap_z;
            }
        }
    }
    out
}

fn random_interior(n: [usize; 3], seed: u64) -> Vec<f64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n.iter().product())
        .map(|_| rng.random_range(-1.0..1.0))
        .collect()
}

/// The interior values placed in a compact `(nx+2) x (ny+2) x (nz+2)` array with zero walls.
fn with_walls(interior: &[f64], n: [usize; 3]) -> Vec<f64> {
    let (sx, sy) = (n[0] + 2, n[1] + 2);
    let mut f = vec![0.0; sx * sy * (n[2] + 2)];
    for (p, v) in interior.iter().enumerate() {
        let (i, j, k) = (p % n[0], (p / n[0]) % n[1], p / (n[0] * n[1]));
        f[(i + 1) + sx * ((j + 1) + sy * (k + 1))] = *v;
    }
    f
}

fn interior_of(f: &[f64], n: [usize; 3]) -> Vec<f64> {
    let (sx, sy) = (n[0] + 2, n[1] + 2);
    let mut v = Vec::new();
    for k in 1..=n[2] {
        for j in 1..=n[1] {
            for i in 1..=n[0] {
                v.push(f[i + sx * (j + sy * k)]);
            }
        }
    }
    v
}

fn max_abs_diff<T: Into<f64> + Copy>(a: &[T], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| ((*x).into() - y).abs())
        .fold(0.0, f64::max)
}

#[test]
fn host_engine_matches_naive_reference_f64_and_f32() {
    let n = [13, 9, 7];
    let problem = Problem::new(n, 0.7, Some(1.5e-3)).unwrap();
    let c = problem.h.map(|h| problem.kappa * problem.dt / (h * h));
    let f0 = random_interior(n, 1);
    let steps = 5;
    let mut reference = with_walls(&f0, n);
    for _ in 0..steps {
        reference = naive_step(&reference, n, c);
    }
    let reference = interior_of(&reference, n);
    let scale = reference.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(
        scale > 0.1,
        "the test field must not have decayed to nothing"
    );

    let out = simulate(&HostLoopEngine, &problem, || Ok(f0.clone()), steps, |_| {}).unwrap();
    let d = max_abs_diff(&out.field, &reference);
    assert!(d < 1e-13, "f64 differs from the naive loop by {d}");

    let f0_32: Vec<f32> = f0.iter().map(|&v| v as f32).collect();
    let out = simulate(
        &HostLoopEngine,
        &problem,
        || Ok(f0_32.clone()),
        steps,
        |_| {},
    )
    .unwrap();
    let d = max_abs_diff(&out.field, &reference);
    assert!(
        d < 1e-5 && d > 0.0,
        "f32 differs from the naive loop by {d}"
    );
}

#[test]
fn host_engine_writes_exactly_the_interior_of_padded_rows() {
    let n = [40, 6, 5];
    let problem = Problem::new(n, 0.5, None).unwrap();
    // Force the 128-byte row padding that large grids get, on a small grid.
    let shape = Shape::new_3d(n, 1).unwrap().aligned_rows(4, f64::INFINITY);
    assert_eq!(shape.first()[0], 32);
    let interior: Vec<f32> = random_interior(n, 3).iter().map(|&v| v as f32).collect();
    let mut f = HostLoopEngine.alloc::<f32>(shape).unwrap();
    let mut g = HostLoopEngine.alloc::<f32>(shape).unwrap();
    f.upload(&shape.embed(&interior, 0.0).unwrap()).unwrap();
    g.upload(&vec![f32::NAN; shape.len()]).unwrap();
    Loop3D::new(&HostLoopEngine, shape.interior_range())
        .unwrap()
        .run(&problem.update(&f, &mut g))
        .unwrap();
    let out = g.download().unwrap();
    let got = shape.extract(&out);
    assert!(
        got.iter().all(|v| v.is_finite()),
        "an interior point was not written"
    );
    let written = out.iter().filter(|v| !v.is_nan()).count();
    assert_eq!(
        written,
        n.iter().product::<usize>(),
        "points outside the interior were written"
    );
    let c = problem.h.map(|h| problem.kappa * problem.dt / (h * h));
    let wide: Vec<f64> = interior.iter().map(|&v| v as f64).collect();
    let reference = interior_of(&naive_step(&with_walls(&wide, n), n, c), n);
    assert!(max_abs_diff(&got, &reference) < 1e-5);
}

#[test]
fn sine_mode_decays_exactly_as_the_scheme_says_and_near_the_analytic_rate() {
    let problem = Problem::new([24, 20, 28], 0.1, None).unwrap();
    let steps = 400;
    let f0 = problem.sine_mode::<f64>();
    let out = simulate(&HostLoopEngine, &problem, || Ok(f0.clone()), steps, |_| {}).unwrap();
    let g = problem.discrete_decay(steps);
    assert!(g < 0.9, "the run must decay noticeably (factor {g})");
    let scheme_err = relative_l2(&out.field, &f0, g);
    assert!(
        scheme_err < 1e-12,
        "sine mode is an eigenvector of the scheme: error {scheme_err}"
    );
    let analytic_err = relative_l2(&out.field, &f0, problem.analytic_decay(steps));
    let t = problem.dt * steps as f64;
    // O(h^2) in the decay rate: kappa t pi^4 h^2 / 4 per axis, summed.
    let bound: f64 = problem
        .h
        .iter()
        .map(|h| problem.kappa * t * std::f64::consts::PI.powi(4) * h * h / 12.0 * 1.5)
        .sum();
    assert!(
        analytic_err < bound && analytic_err > 1e-6,
        "error {analytic_err} vs bound {bound}"
    );
}

#[test]
fn f32_sine_decay_matches_within_single_precision() {
    let problem = Problem::new([32, 32, 32], 0.1, None).unwrap();
    let steps = 200;
    let f0 = problem.sine_mode::<f32>();
    let out = simulate(&HostLoopEngine, &problem, || Ok(f0.clone()), steps, |_| {}).unwrap();
    let exact = problem.sine_mode::<f64>();
    let err = relative_l2(&out.field, &exact, problem.discrete_decay(steps));
    assert!(err < 1e-5, "f32 error {err}");
}

#[test]
fn bad_parameters_are_clear_errors() {
    let e = Problem::new([0, 8, 8], 0.1, None).unwrap_err().to_string();
    assert!(e.contains("0x8x8") && e.contains("zero"), "{e}");
    let e = Problem::new([8, 8, 8], -1.0, None).unwrap_err().to_string();
    assert!(e.contains("kappa"), "{e}");
    let e = Problem::new([8, 8, 8], 0.1, Some(1.0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("unstable"), "{e}");
    let e = Problem::new([8, 8, 8], 0.1, Some(f64::NAN))
        .unwrap_err()
        .to_string();
    assert!(e.contains("dt"), "{e}");
}

/// Runs `update(f, g)` over `range` on the host engine and, for every candidate of the default tuning
/// space (every variant, every shape), through the launch emulator; each output starts as NaN. Returns
/// the number of candidates per variant, and whether the vector variant's threads could use vector
/// accesses (rows of whole vectors, the range's first point aligned in both fields), not just fall back.
fn every_candidate_emulated<T: Element, F: StencilUpdate3D<Real = T> + GpuEntry>(
    shape: Shape,
    range: LoopRange,
    update: impl Fn(&dyn Field<T>, &mut dyn Field<T>) -> F,
    what: &str,
) -> ([usize; 4], bool) {
    let poison = vec![T::from_f64(f64::NAN); shape.len()];
    let mut f = HostLoopEngine.alloc::<T>(shape).unwrap();
    let mut g = HostLoopEngine.alloc::<T>(shape).unwrap();
    let [i, j, k] = range.begin.map(|b| b as usize);
    let first = i + shape.size()[0] * (j + shape.size()[1] * k);
    let vectors = (shape.size()[0] * std::mem::size_of::<T>()).is_multiple_of(VECTOR_BYTES)
        && f.view().vector_aligned(first)
        && g.view_mut().as_ref().vector_aligned(first);
    f.upload(&random::<T>(shape.len(), 7)).unwrap();
    g.upload(&poison).unwrap();
    Loop3D::new(&HostLoopEngine, range)
        .unwrap()
        .run(&update(&f, &mut g))
        .unwrap();
    let want = g.download().unwrap();
    let candidates = tune_candidates(
        &TuneSpace::table1_all_variants(),
        &range,
        &KernelInfo::of3d::<F>(),
        EMULATED_MAX_THREADS,
    );
    let mut counts = [0; 4];
    for c in candidates {
        counts[c.variant as usize] += 1;
        g.upload(&poison).unwrap();
        emulate3d(&update(&f, &mut g), &range, c).unwrap();
        check_written(
            &g.download().unwrap(),
            &want,
            &shape,
            &range,
            &format!("{what} {} {c}", T::NAME),
        );
    }
    (counts, vectors)
}

fn diffusion_variants_emulated<T: Element + DiffusionReal>() {
    let problem = Problem::new([37, 29, 23], 0.3, None).unwrap();
    let compact = problem.shape::<T>().unwrap();
    let padded = compact.aligned_rows(std::mem::size_of::<T>(), f64::INFINITY);
    assert_ne!(compact, padded);
    // The compact rows are odd (vectors fall back to single columns), the padded ones are whole vectors,
    // with a partial last vector per row.
    for (shape, vectors) in [(compact, false), (padded, true)] {
        let (counts, vectorised) = every_candidate_emulated::<T, _>(
            shape,
            shape.interior_range(),
            |f, g| Diffusion3d::new(f.view(), g.view_mut(), problem.kappa, problem.dt, problem.h),
            "diffusion",
        );
        // (The vector variant's threads take 4 points each in f32: fewer block widths fit.)
        assert!(counts.iter().all(|&n| n >= 75), "candidates {counts:?}");
        assert_eq!(vectorised, vectors);
    }
}

#[test]
fn emulated_kernel_variants_match_host_engine_f32() {
    diffusion_variants_emulated::<f32>();
}

#[test]
fn emulated_kernel_variants_match_host_engine_f64() {
    diffusion_variants_emulated::<f64>();
}

#[test]
fn emulated_variants_of_a_wider_stencil_match_host_engine() {
    // Ranges that stop short of the interior on some sides, so blocks straddle their edges; rows of odd
    // length, then rows of whole vectors starting on an aligned one (the vector variant's vector path).
    for (interior, shift, vectors) in [([21, 13, 11], 1, false), ([22, 13, 11], 0, true)] {
        let shape = Shape::new_3d(interior, 2).unwrap();
        let r = shape.interior_range();
        let range = LoopRange {
            begin: [r.begin[0] + shift, r.begin[1], r.begin[2] + 2],
            end: [r.end[0], r.end[1] - 1, r.end[2] - 1],
            ..r
        };
        let (counts, vectorised) = every_candidate_emulated(
            shape,
            range,
            |f, g| Wide {
                f: f.view(),
                out: g.view_mut(),
            },
            "wide stencil",
        );
        assert!(counts.iter().all(|&n| n >= 50), "candidates {counts:?}");
        assert_eq!(vectorised, vectors, "{interior:?}");
    }
}

#[test]
fn emulator_refuses_what_a_launch_would() {
    let problem = Problem::new([9, 9, 9], 0.1, None).unwrap();
    let shape = Shape::new_3d([9, 9, 9], 1).unwrap();
    let f = HostLoopEngine.alloc::<f32>(shape).unwrap();
    let mut g = HostLoopEngine.alloc::<f32>(shape).unwrap();
    let update = problem.update(&f, &mut g);
    let too_many = LaunchShape {
        block_x: 64,
        block_y: 32,
        march: 1,
        variant: Variant::Tiled,
    };
    let e = emulate3d(&update, &shape.interior_range(), too_many)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not valid"), "{e}");
    let no_margin = LoopRange {
        begin: [0, 1, 1],
        ..shape.interior_range()
    };
    let e = emulate3d(&update, &no_margin, LaunchShape::FIXED)
        .unwrap_err()
        .to_string();
    assert!(e.contains("margin"), "{e}");
}
