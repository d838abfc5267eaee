//! The diffusion point update through the CPU engine against an independent naive f64 loop, the scheme's
//! exact decay of the sine mode, and bad input.

use lattice_gpu::diffusion::{relative_l2, simulate, Problem};
use lattice_gpu::host::{Field, HostLoopEngine, Loop3D, LoopEngine, Shape};
use rand::{Rng, SeedableRng};

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
