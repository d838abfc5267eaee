//! The advection update on the CPU engine against the independent f64 reference, the exact properties of
//! the scheme (CFL 1 shifts exactly, zero velocity changes nothing, fixed boundary nodes), convergence of
//! the rotation, the optimised kernels' column march (run here on the CPU) against the update, and the
//! decomposed step in parts on one rank against the whole grid's.

use lattice_gpu_advection::cases;
use lattice_gpu_advection::norms::norms;
use lattice_gpu_advection::reference;
use lattice_gpu_advection::{Advection, Kernel, Problem};
use lattice_gpu_host::comm::Solo;
use lattice_gpu_host::halo::Halos;
use lattice_gpu_host::{Field, HostField, HostLoopEngine, Shape};
use lattice_gpu_kernels::advection::{
    Advect, Packed, Separate, Uv, Velocity, BRANCH_FREE, QUEUE, SHARED,
};
use lattice_gpu_kernels::bind::bits;
use rand::{Rng, SeedableRng};

/// A random field and a random divergence-free velocity (from a random stream function) scaled to CFL
/// `cfl`.
fn random_problem(nx: usize, ny: usize, seed: u64, cfl: f64) -> Problem {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let f0: Vec<f64> = (0..nx * ny).map(|_| rng.random::<f64>() - 0.5).collect();
    let (kx, ky, ph) = (
        rng.random_range(1.0..3.0),
        rng.random_range(1.0..3.0),
        rng.random::<f64>(),
    );
    let psi = |x: f64, y: f64| (kx * x + ph).sin() * (ky * y).cos();
    let (mut u, mut v) = (vec![0.0; nx * ny], vec![0.0; nx * ny]);
    let h = 1.0 / nx as f64;
    for j in 0..ny {
        for i in 0..nx {
            let (x, y) = (i as f64 * h, j as f64 * h);
            u[i + nx * j] = (psi(x, y + h) - psi(x, y - h)) / (2.0 * h);
            v[i + nx * j] = -(psi(x + h, y) - psi(x - h, y)) / (2.0 * h);
        }
    }
    let max = u.iter().chain(&v).fold(0.0f64, |m, w| m.max(w.abs()));
    Problem {
        size: [nx, ny],
        f0,
        u,
        v,
        c: cfl / max,
    }
}

fn run_host(p: &Problem, kernel: Kernel, steps: usize) -> Vec<f64> {
    let engine = HostLoopEngine;
    let mut a = Advection::new(&engine, p, kernel, true).unwrap();
    for _ in 0..steps {
        a.step().unwrap();
    }
    a.field().unwrap()
}

fn run_reference(p: &Problem, steps: usize) -> Vec<f64> {
    let [nx, ny] = p.size;
    let mut f = p.f0.clone();
    for _ in 0..steps {
        f = reference::step(nx, ny, &f, &p.u, &p.v, p.c);
    }
    f
}

#[test]
fn update_matches_the_reference_on_random_flows() {
    for (nx, ny, seed) in [(37, 29, 1), (64, 33, 2)] {
        let p = random_problem(nx, ny, seed, 0.9);
        let got = run_host(&p, Kernel::Plain, 50);
        let want = run_reference(&p, 50);
        let n = norms(&got, &want);
        assert!(
            n.relative < 1e-5,
            "{nx}x{ny}: relative L2 {:e}, Linf {:e}",
            n.relative,
            n.linf
        );
        assert!(got != p.f0, "the field moved");
    }
}

#[test]
fn rows_padded_to_128_bytes_step_as_unpadded_ones() {
    // 150 nodes a row: with `aligned` each row's first node starts a 128-byte line (32 f32 in), which
    // moves every node of the arrays; 20 steps with poisoned outputs, padded against unpadded.
    let p = random_problem(150, 41, 4, 0.9);
    let engine = HostLoopEngine;
    let run = |aligned: bool| {
        let mut a = Advection::new(&engine, &p, Kernel::Packed, aligned).unwrap();
        for _ in 0..20 {
            a.poison_output().unwrap();
            a.step().unwrap();
        }
        (a.shape(), a.field().unwrap())
    };
    let (padded, got) = run(true);
    let (plain, want) = run(false);
    assert_eq!((padded.first()[0], padded.size()[0] % 32), (32, 0));
    assert_eq!(plain.first()[0], 2);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&want));
    let n = norms(&got, &run_reference(&p, 20));
    assert!(n.relative < 1e-5, "relative L2 {:e}", n.relative);
}

#[test]
fn steps_cut_on_one_rank_equal_the_whole_grids() {
    // The decomposed step in parts (two rows at each end apart from the inner rows) on one rank, with
    // the exchange behind the inner rows and before them; 19x11 also leaves no inner rows.
    for size in [[41, 37], [19, 11]] {
        let p = random_problem(size[0], size[1], 7, 0.9);
        let whole = run_host(&p, Kernel::Packed, 12);
        assert_ne!(whole, p.f0);
        for overlap in [true, false] {
            let engine = HostLoopEngine;
            let mut a =
                Advection::new_on_cut(&engine, &Solo, Halos::Host, &p, Kernel::Packed, true, true)
                    .unwrap();
            a.set_overlap(overlap);
            for _ in 0..12 {
                // On one rank the parts at each end are the fixed rows: a part left out shows as NaN.
                a.poison_output().unwrap();
                a.step().unwrap();
            }
            let got = a.field().unwrap();
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&whole), "{size:?}, overlap {overlap}");
        }
    }
}

#[test]
fn cfl_one_shifts_exactly_and_zero_velocity_changes_nothing() {
    let (nx, ny) = (23, 19);
    let mut p = random_problem(nx, ny, 3, 0.5);
    // f32 values, so the f32 run holds them exactly.
    p.f0 = p.f0.iter().map(|&x| x as f32 as f64).collect();
    for (u, v, di, dj) in [
        (1.0, 0.0, 1, 0),
        (0.0, 1.0, 0, 1),
        (-1.0, 0.0, -1, 0),
        (0.0, -1.0, 0, -1),
    ] {
        p.u = vec![u; nx * ny];
        p.v = vec![v; nx * ny];
        p.c = 1.0;
        let got = run_host(&p, Kernel::Plain, 1);
        for j in 0..ny {
            for i in 0..nx {
                let k = i + nx * j;
                let want = if p.is_fixed(k) {
                    p.f0[k]
                } else {
                    p.f0[(i as isize - di) as usize + nx * (j as isize - dj) as usize]
                };
                assert_eq!(got[k], want, "u {u} v {v} node ({i}, {j})");
            }
        }
    }
    p.u = vec![0.0; nx * ny];
    p.v = vec![0.0; nx * ny];
    assert_eq!(run_host(&p, Kernel::Plain, 10), p.f0);
}

#[test]
fn boundary_nodes_never_change() {
    let p = random_problem(31, 27, 4, 1.0);
    let got = run_host(&p, Kernel::Plain, 20);
    for k in (0..p.f0.len()).filter(|&k| p.is_fixed(k)) {
        assert_eq!(got[k], p.f0[k] as f32 as f64, "node {k}");
    }
}

#[test]
fn rotation_converges_with_resolution() {
    // (against the exact rotation, against the scheme's own straight-step departure with exact
    // interpolation) after one revolution at CFL 0.5.
    let err = |n: usize| {
        let case = cases::rotation(n, n);
        let (umax, vmax) = cases::max_speed(&case.u, &case.v);
        let period = case.period.unwrap();
        let steps = (period / (0.5 * case.h / umax.max(vmax))).ceil() as usize;
        let dt = period / steps as f64;
        let p = Problem {
            size: [n, n],
            f0: case.f0.clone(),
            u: case.u.clone(),
            v: case.v.clone(),
            c: dt / case.h,
        };
        let got = run_host(&p, Kernel::Plain, steps);
        (
            norms(&got, &(case.exact.as_ref().unwrap())(period)).relative,
            norms(&got, &(case.scheme_exact.as_ref().unwrap())(steps, dt)).relative,
        )
    };
    let ((e64, s64), (e128, s128)) = (err(64), err(128));
    // The interpolation is third order; the scheme's departure point is first order in time, so against
    // the true rotation the error only halves.
    assert!(
        s64 / s128 >= 4.0,
        "interpolation error {s64:e} at 64^2, {s128:e} at 128^2"
    );
    assert!(
        e64 / e128 >= 1.8 && e64 < 0.3,
        "error {e64:e} at 64^2, {e128:e} at 128^2"
    );
}

/// Runs the queue kernels' column march on the CPU over every column, in chunks of `march` rows, with
/// the velocities `pick` chooses from the two layouts.
fn march_on_host<const K: u32, V: Velocity>(
    p: &Problem,
    march: u32,
    pick: fn(Separate, Packed) -> V,
) -> Vec<f64> {
    let shared = K & SHARED != 0;
    let [nx, ny] = p.size;
    let engine = HostLoopEngine;
    let reference = Advection::new(&engine, p, Kernel::Plain, true).unwrap();
    let shape: Shape = reference.shape();
    // The same arrays the run uploads: velocities zero on the fixed nodes.
    let spread = |d: &[f64], velocity: bool| {
        let mut a = vec![0.0f32; shape.len()];
        for k in 0..nx * ny {
            if !(velocity && p.is_fixed(k)) {
                a[shape.index(k % nx + 2, k / nx + 2, 0)] = d[k] as f32;
            }
        }
        let mut field = HostField::<f32>::zeros(shape);
        field.upload(&a).unwrap();
        field
    };
    let (f, u, v) = (spread(&p.f0, false), spread(&p.u, true), spread(&p.v, true));
    let (ud, vd) = (u.download().unwrap(), v.download().unwrap());
    let uv: Vec<Uv> = ud.iter().zip(&vd).map(|(&u, &v)| Uv { u, v }).collect();
    let mut pairs = HostField::<f64>::zeros(shape);
    pairs.upload(bits(&uv)).unwrap();
    let mut out = HostField::<f32>::zeros(shape);
    let vel = pick(
        Separate {
            u: u.view(),
            v: v.view(),
        },
        Packed {
            uv: pairs.view().cast(),
        },
    );
    let a = Advect::<K, V> {
        f: f.view(),
        out: out.view_mut(),
        vel,
        c: p.c as f32,
    };
    let row = shape.size()[0];
    for i in 0..nx {
        let mut j = 0;
        while j < ny {
            let n = march.min((ny - j) as u32);
            let (i0, j0) = (i as u32 + 2, j as u32 + 2);
            if shared {
                a.march_shared_alone(&shape.interior_range(), i0, j0, march);
            } else {
                a.march(shape.index(i + 2, j + 2, 0), row, n);
            }
            j += n as usize;
        }
    }
    let data = out.download().unwrap();
    (0..nx * ny)
        .map(|k| data[shape.index(k % nx + 2, k / nx + 2, 0)] as f64)
        .collect()
}

/// The separate velocity fields.
fn separate(s: Separate, _: Packed) -> Separate {
    s
}

/// The packed pairs.
fn packed(_: Separate, p: Packed) -> Packed {
    p
}

#[test]
fn column_march_matches_the_update() {
    let p = random_problem(45, 37, 5, 0.95);
    let want = run_host(&p, Kernel::Plain, 1);
    let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    for march in [1, 4, 8, 16, 32] {
        for (name, got) in [
            ("queue", march_on_host::<QUEUE, _>(&p, march, separate)),
            (
                "queue-bf",
                march_on_host::<{ QUEUE | BRANCH_FREE }, _>(&p, march, separate),
            ),
            (
                "packed",
                march_on_host::<{ QUEUE | BRANCH_FREE }, _>(&p, march, packed),
            ),
            (
                "shared",
                march_on_host::<{ QUEUE | BRANCH_FREE | SHARED }, _>(&p, march, packed),
            ),
        ] {
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(
                worst <= 2e-6 * scale,
                "{name} march {march}: max difference {worst:e}"
            );
        }
    }
}

#[test]
fn bad_input_is_refused_with_the_fix() {
    let mut p = random_problem(16, 16, 6, 0.5);
    p.c *= 3.0;
    let e = p.check().unwrap_err().to_string();
    assert!(
        e.contains("CFL") && e.contains("exceeds 1") && e.contains("node ("),
        "{e}"
    );
    let mut p = random_problem(16, 16, 6, 0.5);
    p.f0[17] = f64::NAN;
    let e = p.check().unwrap_err().to_string();
    assert!(e.contains("NaN") && e.contains("(1, 1)"), "{e}");
    let p = random_problem(4, 16, 6, 0.5);
    assert!(p
        .check()
        .unwrap_err()
        .to_string()
        .contains("5-node footprint"));
    let mut p = random_problem(8, 8, 6, 0.5);
    p.u.pop();
    assert!(p.check().unwrap_err().to_string().contains("63 values"));
}
