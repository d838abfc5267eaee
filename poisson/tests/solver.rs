//! The Poisson solver on the CPU engine: second-order convergence of the solution, the CG residual
//! reduction, mixed against all-f64 preconditioning, the preconditioner's symmetry and positivity, each
//! multigrid point update against a plain loop written here, and bad input.

// Indices run over several arrays at once (matrix columns, stencil rows): index loops read best.
#![allow(clippy::needless_range_loop)]

use lattice_gpu_host::{Field, HostLoopEngine, Loop3D, Shape};
use lattice_gpu_kernels::poisson::{ProlongAdd, RedBlack, Residual, Restrict};
use lattice_gpu_poisson::multigrid::{
    upload, Cycle, Layout, Multigrid, OperatorView, Smoother, StencilFields,
};
use lattice_gpu_poisson::problem::{manufactured, Problem, Stencil, Walls};
use lattice_gpu_poisson::solver::{solve, Precision, Report, Solver};
use lattice_gpu_poisson::Error;

fn rel_l2(a: &[f64], b: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den).sqrt()
}

/// `p` solved on the CPU to 1e-10 with an f32 preconditioner `c`, at most 100 iterations.
fn solve_f32(p: &Problem, c: Cycle) -> (Vec<f64>, Report) {
    solve(
        &HostLoopEngine,
        p,
        c,
        Precision::F32,
        1e-10,
        100,
        false,
        &mut |_, _| {},
    )
    .unwrap()
}

fn cycle(levels: usize, smoother: Smoother) -> Cycle {
    Cycle {
        levels,
        smoother,
        ..Cycle::default()
    }
}

#[test]
fn solution_converges_at_second_order() {
    let err = |m: usize| {
        let (p, exact) = manufactured([m; 3], 1.0, 0.5);
        let (x, rep) = solve(
            &HostLoopEngine,
            &p,
            cycle(3, Smoother::RedBlack),
            Precision::F32,
            1e-10,
            200,
            false,
            &mut |_, _| {},
        )
        .unwrap();
        assert!(rep.history.last().unwrap() < &1e-10);
        rel_l2(&x, &exact)
    };
    let (e16, e32) = (err(16), err(32));
    assert!(e16 / e32 > 3.5, "error {e16:e} at 16^3, {e32:e} at 32^3");
}

#[test]
fn mixed_precision_needs_the_same_iterations() {
    for (depth, smoother) in [
        (1.0, Smoother::RedBlack),
        (1.0, Smoother::Jacobi),
        (0.05, Smoother::RedBlack),
    ] {
        let (p, _) = manufactured([32, 32, 16], depth, 2.0);
        let c = cycle(3, smoother);
        let (x32, r32) = solve(
            &HostLoopEngine,
            &p,
            c,
            Precision::F32,
            1e-10,
            500,
            false,
            &mut |_, _| {},
        )
        .unwrap();
        let (x64, r64) = solve(
            &HostLoopEngine,
            &p,
            c,
            Precision::F64,
            1e-10,
            500,
            true,
            &mut |_, _| {},
        )
        .unwrap();
        assert!(
            r32.iterations.abs_diff(r64.iterations) <= 1,
            "depth {depth} {smoother:?}: {} iterations mixed, {} in f64",
            r32.iterations,
            r64.iterations
        );
        assert!(rel_l2(&x32, &x64) < 1e-9);
        // CG with a multigrid preconditioner: far fewer iterations than cells across.
        assert!(
            r64.iterations < 60,
            "{smoother:?} depth {depth}: {} iterations",
            r64.iterations
        );
        assert!(r64.history.windows(2).filter(|w| w[1] > w[0]).count() < r64.iterations / 3);
        assert_eq!(r64.levels.len(), 3);
        assert_eq!(r64.levels[1].0, [16, 16, 8]);
    }
}

#[test]
fn array_of_structures_gives_the_same_bits() {
    let (p, _) = manufactured([16, 16, 8], 0.5, 1.0);
    let run = |layout| {
        let c = Cycle {
            layout,
            ..cycle(3, Smoother::RedBlack)
        };
        solve_f32(&p, c)
    };
    let ((xs, rs), (xa, ra)) = (run(Layout::Soa), run(Layout::Aos));
    assert_eq!(rs.iterations, ra.iterations);
    assert!(xs.iter().zip(&xa).all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn fused_coarse_levels_give_the_same_bits() {
    let (p, _) = manufactured([32, 32, 16], 0.5, 1.0);
    let r: Vec<f64> = (0..p.cells())
        .map(|k| ((k * 7919) % 1000) as f64 / 500.0 - 1.0)
        .collect();
    for layout in [Layout::Soa, Layout::Aos] {
        let v = |fused_cells| {
            let c = Cycle {
                layout,
                fused_cells,
                ..cycle(4, Smoother::RedBlack)
            };
            let mut f32_mg = Multigrid::<_, f32>::new(&HostLoopEngine, &p, c).unwrap();
            let mut f64_mg = Multigrid::<_, f64>::new(&HostLoopEngine, &p, c).unwrap();
            let from = (f32_mg.fused_from(), f64_mg.fused_from());
            (
                from,
                f32_mg.precondition(&r).unwrap(),
                f64_mg.precondition(&r).unwrap(),
            )
        };
        let (fused, unfused) = (v(4096), v(0));
        // 16x16x8 and below: levels 1 to 3 in one block program.
        assert_eq!(fused.0, (Some(1), Some(1)));
        assert_eq!(unfused.0, (None, None));
        assert!(fused.1.iter().any(|&v| v != 0.0));
        for (a, b) in [(&fused.1, &unfused.1), (&fused.2, &unfused.2)] {
            assert!(
                a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{layout:?}: the fused cycle differs"
            );
        }
    }
    // Asking for graphs on the CPU, which cannot record, runs the work as before.
    let c = Cycle {
        fused_cells: 4096,
        graph: true,
        ..cycle(4, Smoother::RedBlack)
    };
    let plain = cycle(4, Smoother::RedBlack);
    let run = |c| solve_f32(&p, c);
    let ((xg, rg), (xp, rp)) = (run(c), run(plain));
    assert_eq!(rg.iterations, rp.iterations);
    assert!(xg.iter().zip(&xp).all(|(a, b)| a.to_bits() == b.to_bits()));
    // The Jacobi smoother keeps every level's own launches.
    let jacobi = Multigrid::<_, f32>::new(&HostLoopEngine, &p, cycle(4, Smoother::Jacobi)).unwrap();
    assert_eq!(jacobi.fused_from(), None);
}

#[test]
fn shuffle_restriction_gives_the_same_bits() {
    // Odd coarse rows (7 cells) so that the pairs of points end mid-row on the CPU as on the GPU.
    let (p, _) = manufactured([28, 12, 8], 0.5, 1.0);
    let r: Vec<f64> = (0..p.cells())
        .map(|k| ((k * 7919) % 1000) as f64 / 500.0 - 1.0)
        .collect();
    let v = |shuffle_restrict| {
        let c = Cycle {
            shuffle_restrict,
            ..cycle(3, Smoother::RedBlack)
        };
        Multigrid::<_, f32>::new(&HostLoopEngine, &p, c)
            .unwrap()
            .precondition(&r)
            .unwrap()
    };
    let (pairs, plain) = (v(true), v(false));
    assert!(plain.iter().any(|&x| x != 0.0));
    assert!(pairs
        .iter()
        .zip(&plain)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn finest_level_by_colour_gives_the_same_bits() {
    let (p, _) = manufactured([32, 16, 8], 0.5, 1.0);
    let r: Vec<f64> = (0..p.cells())
        .map(|k| ((k * 6007) % 1000) as f64 / 500.0 - 1.0)
        .collect();
    let c = |colours, fused_cells| Cycle {
        colours,
        fused_cells,
        ..cycle(3, Smoother::RedBlack)
    };
    // The finest level and the next are stored by colour (their sweeps move 11 values per cell, not
    // 20); the coarsest is not, nor the fused levels.
    let split = Multigrid::<_, f32>::new(&HostLoopEngine, &p, c(true, 0)).unwrap();
    for l in [0, 1] {
        let bytes = split.sweep_bytes(l);
        assert_eq!(bytes.sectors, 1.1 * bytes.needed, "level {l}");
    }
    let natural = split.sweep_bytes(2);
    assert_eq!(natural.sectors, 2.0 * natural.needed);
    let fused = Multigrid::<_, f32>::new(&HostLoopEngine, &p, c(true, 4096)).unwrap();
    let level1 = fused.sweep_bytes(1);
    assert_eq!(level1.sectors, 2.0 * level1.needed);
    // The V-cycle alone, in both precisions, with and without fused coarse levels.
    for fused in [0, 4096] {
        let v32 = |c| {
            Multigrid::<_, f32>::new(&HostLoopEngine, &p, c)
                .unwrap()
                .precondition(&r)
                .unwrap()
        };
        let v64 = |c| {
            Multigrid::<_, f64>::new(&HostLoopEngine, &p, c)
                .unwrap()
                .precondition(&r)
                .unwrap()
        };
        for (a, b) in [
            (v32(c(true, fused)), v32(c(false, fused))),
            (v64(c(true, fused)), v64(c(false, fused))),
        ] {
            assert!(a.iter().any(|&v| v != 0.0));
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "fused {fused}: the V-cycle by colour differs"
            );
        }
    }
    // An odd number of interior rows (one level only, since odd rows do not coarsen).
    let (odd, _) = manufactured([12, 7, 6], 0.5, 1.0);
    let one = |colours| {
        let c = Cycle {
            colours,
            ..cycle(1, Smoother::RedBlack)
        };
        Multigrid::<_, f32>::new(&HostLoopEngine, &odd, c)
            .unwrap()
            .precondition(&r[..odd.cells()])
            .unwrap()
    };
    let (a, b) = (one(true), one(false));
    assert!(a.iter().any(|&v| v != 0.0));
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
    // A whole solve.
    let run = |c| solve_f32(&p, c);
    let ((xc, rc), (xn, rn)) = (run(c(true, 0)), run(c(false, 0)));
    assert_eq!(rc.iterations, rn.iterations);
    assert!(xc.iter().zip(&xn).all(|(a, b)| a.to_bits() == b.to_bits()));
    // Only with what it is built for.
    for bad in [
        Cycle {
            smoother: Smoother::Jacobi,
            ..c(true, 0)
        },
        Cycle {
            layout: Layout::Aos,
            ..c(true, 0)
        },
    ] {
        let e = Multigrid::<_, f32>::new(&HostLoopEngine, &p, bad)
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("by colour") && e.contains("--colours"), "{e}");
    }
}

#[test]
fn preconditioner_is_symmetric_positive_definite() {
    for smoother in [Smoother::RedBlack, Smoother::Jacobi] {
        let (p, _) = manufactured([8, 8, 4], 1.0, 1.0);
        let mut mg = Multigrid::<_, f64>::new(&HostLoopEngine, &p, cycle(2, smoother)).unwrap();
        let n = p.cells();
        let cols: Vec<Vec<f64>> = (0..n)
            .map(|j| {
                mg.precondition(&(0..n).map(|i| f64::from(i == j)).collect::<Vec<_>>())
                    .unwrap()
            })
            .collect();
        let scale = cols.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs()));
        for i in 0..n {
            assert!(cols[i][i] > 0.0, "{smoother:?}: diagonal {i}");
            for j in 0..i {
                assert!(
                    (cols[i][j] - cols[j][i]).abs() < 1e-12 * scale,
                    "{smoother:?} ({i}, {j})"
                );
            }
        }
        // x^T M x > 0 for a few vectors with both signs.
        for seed in 1..4u64 {
            let x: Vec<f64> = (0..n)
                .map(|i| ((i as u64 * 2654435761 + seed * 97) % 1000) as f64 / 500.0 - 1.0)
                .collect();
            let mx: Vec<f64> = (0..n)
                .map(|i| (0..n).map(|j| cols[j][i] * x[j]).sum())
                .collect();
            assert!(x.iter().zip(&mx).map(|(a, b)| a * b).sum::<f64>() > 0.0);
        }
    }
}

/// A host field of `shape` holding `interior`.
fn field(shape: Shape, interior: &[f64]) -> lattice_gpu_host::HostField<f64> {
    upload::<_, f64>(&HostLoopEngine, shape, interior).unwrap()
}

/// `(A x)_k` from the stencil rows, by explicit neighbour coordinates.
fn apply_at(n: [usize; 3], s: &Stencil, x: &[f64], k: usize) -> f64 {
    let p = [k % n[0], (k / n[0]) % n[1], k / (n[0] * n[1])];
    let mut y = s[0][k] * x[k];
    for axis in 0..3 {
        for (side, slot) in [(-1i64, 1 + 2 * axis), (1, 2 + 2 * axis)] {
            let q = p[axis] as i64 + side;
            if q >= 0 && q < n[axis] as i64 {
                let mut nb = p;
                nb[axis] = q as usize;
                y += s[slot][k] * x[nb[0] + n[0] * (nb[1] + n[1] * nb[2])];
            }
        }
    }
    y
}

#[test]
fn point_updates_match_plain_loops() {
    let n = [6, 4, 8];
    let (p, _) = manufactured(n, 1.0, 1.0);
    let s = p.stencil();
    let shape = Shape::new_3d(n, 1).unwrap();
    let cells = p.cells();
    let x0: Vec<f64> = (0..cells).map(|k| ((k * 37) % 11) as f64 - 5.0).collect();
    let a = StencilFields::new::<_, f64>(&HostLoopEngine, shape, &s, Layout::Soa).unwrap();
    let OperatorView::Soa(c) = a.view::<f64>() else {
        unreachable!("asked for structure of arrays")
    };
    let range = shape.interior_range();

    // Residual.
    let (x, b) = (field(shape, &x0), field(shape, &p.rhs));
    let mut r = field(shape, &vec![f64::NAN; cells]);
    Loop3D::new(&HostLoopEngine, range)
        .unwrap()
        .run(&Residual {
            a: c,
            x: x.view(),
            b: b.view(),
            r: r.view_mut(),
        })
        .unwrap();
    let got = shape.extract(&r.download().unwrap());
    for k in 0..cells {
        assert!(
            (got[k] - (p.rhs[k] - apply_at(n, &s, &x0, k))).abs() < 1e-9,
            "residual {k}"
        );
    }

    // One red half sweep: red cells move, black ones do not.
    let mut xs = field(shape, &x0);
    Loop3D::new(&HostLoopEngine, range)
        .unwrap()
        .run(&RedBlack {
            a: c,
            x: xs.view_mut(),
            b: b.view(),
            parity: 0,
            omega: 1.0,
        })
        .unwrap();
    let got = shape.extract(&xs.download().unwrap());
    for k in 0..cells {
        let q = [k % n[0], (k / n[0]) % n[1], k / (n[0] * n[1])];
        // Array coordinates are interior + 1 on every axis: the sum gains 3, so parity 0 is the odd sum.
        let red = (q[0] + q[1] + q[2]) % 2 == 1;
        let want = if red {
            x0[k] + (p.rhs[k] - apply_at(n, &s, &x0, k)) / s[0][k]
        } else {
            x0[k]
        };
        assert!((got[k] - want).abs() < 1e-9, "red-black {k}");
    }

    // Restriction: each coarse cell the mean of its 8 children; prolongation adds the parent's value.
    let m = n.map(|v| v / 2);
    let coarse_shape = Shape::new_3d(m, 1).unwrap();
    let fine = field(shape, &x0);
    let mut cb = field(coarse_shape, &vec![f64::NAN; m.iter().product()]);
    Loop3D::new(&HostLoopEngine, coarse_shape.interior_range())
        .unwrap()
        .run(&Restrict {
            r: fine.view(),
            b: cb.view_mut(),
            fine: shape.size().map(|v| v as u32),
            coarse: coarse_shape.size().map(|v| v as u32),
        })
        .unwrap();
    let got = coarse_shape.extract(&cb.download().unwrap());
    for (c, g) in got.iter().enumerate() {
        let q = [c % m[0], (c / m[0]) % m[1], c / (m[0] * m[1])];
        let mut sum = 0.0;
        for d in 0..8 {
            let f = [
                2 * q[0] + (d & 1),
                2 * q[1] + ((d >> 1) & 1),
                2 * q[2] + (d >> 2),
            ];
            sum += x0[f[0] + n[0] * (f[1] + n[1] * f[2])];
        }
        assert!((g - sum / 8.0).abs() < 1e-12, "restrict {c}");
    }
    let mut xf = field(shape, &x0);
    Loop3D::new(&HostLoopEngine, range)
        .unwrap()
        .run(&ProlongAdd {
            e: cb.view(),
            x: xf.view_mut(),
            coarse: coarse_shape.size().map(|v| v as u32),
        })
        .unwrap();
    let got = shape.extract(&xf.download().unwrap());
    for k in 0..cells {
        let q = [k % n[0], (k / n[0]) % n[1], k / (n[0] * n[1])];
        let parent = q[0] / 2 + m[0] * (q[1] / 2 + m[1] * (q[2] / 2));
        let coarse = coarse_shape.extract(&cb.download().unwrap());
        assert!(
            (got[k] - (x0[k] + coarse[parent])).abs() < 1e-12,
            "prolong {k}"
        );
    }
}

#[test]
fn bad_input_is_refused_with_the_history() {
    let (p, _) = manufactured([12, 12, 12], 1.0, 0.0);
    let e = Multigrid::<_, f32>::new(&HostLoopEngine, &p, cycle(4, Smoother::RedBlack))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("halves only to 3 levels"), "{e}");
    let e = solve(
        &HostLoopEngine,
        &p,
        cycle(2, Smoother::Jacobi),
        Precision::F32,
        1e-12,
        2,
        false,
        &mut |_, _| {},
    )
    .unwrap_err();
    assert!(matches!(e, Error::NotConverged { .. }), "{e}");
    assert!(e.to_string().contains("residual history: 0: 1.00e0"), "{e}");
    let neumann = Problem {
        walls: Walls::Neumann,
        ..p.clone()
    };
    let e = solve(
        &HostLoopEngine,
        &neumann,
        cycle(2, Smoother::RedBlack),
        Precision::F32,
        1e-8,
        10,
        false,
        &mut |_, _| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("sum to zero"), "{e}");
}

#[test]
fn scalars_on_the_engine_give_the_iterations_and_bits_of_the_host_ones() {
    let (p, _) = manufactured([24, 16, 8], 0.5, 1.0);
    for precision in [Precision::F32, Precision::F64] {
        let mut solver =
            Solver::new(&HostLoopEngine, &p, cycle(3, Smoother::RedBlack), precision).unwrap();
        let want = solver.solve(1e-10, 100, false, &mut |_, _| {}).unwrap();
        let x_want = solver.solution().unwrap();
        assert!(want.iterations > 3, "{want:?}");
        // Reading the residual every iteration, and every 7 (iterations queued past convergence must
        // change nothing).
        for every in [1, 7] {
            let mut seen = Vec::new();
            let got = solver
                .solve_async(1e-10, 100, every, &mut |k, r| seen.push((k, r)))
                .unwrap();
            assert_eq!(
                got.iterations, want.iterations,
                "{precision:?} every {every}"
            );
            assert_eq!(got.vcycles, want.vcycles);
            assert_eq!(got.history, want.history, "{precision:?} every {every}");
            assert_eq!(seen.len(), want.iterations);
            let x = solver.solution().unwrap();
            assert!(
                x.iter()
                    .zip(&x_want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{precision:?} every {every}: the iterate differs"
            );
        }
        // The limit, with the history, and a bad reading interval.
        let e = solver
            .solve_async(1e-10, 2, 7, &mut |_, _| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("iteration limit") && e.contains("0: 1.00e0, 2: "),
            "{e}"
        );
        let e = solver
            .solve_async(1e-10, 10, 0, &mut |_, _| {})
            .unwrap_err();
        assert!(e.to_string().contains("every 1 or more"), "{e}");
    }
}
