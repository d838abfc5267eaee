//! The lattice-Boltzmann solver on the CPU engine: conservation, the two streaming schemes against each
//! other, the shared collide-and-stream body against the independent f64 reference (walls, inlets and
//! outlets), and the analytic flows (Poiseuille, Taylor-Green, the Re = 100 cavity of Ghia et al.); the
//! split path on one rank against the whole lattice; the force on a body against the force driving the
//! flow, split over ranks against whole, and Schäfer and Turek's steady cylinder; the open ends'
//! reflection of sound.

use lattice_gpu_host::comm::Solo;
use lattice_gpu_kernels::lbm::{tag, Half, Velocities, C};
use lattice_gpu_lbm::cases::{self, GHIA_RE100_U, GHIA_RE100_V};
use lattice_gpu_lbm::geometry::{BounceBack, Obstacle};
use lattice_gpu_lbm::reference::{RefLattice, RefParams, Reference};
use lattice_gpu_lbm::solver::mass_momentum;
use lattice_gpu_lbm::{Collision, Engine, Geometry, Lbm, LbmStorage, Open, Params, Streaming};
use rand::{Rng, SeedableRng};

const TRT: Collision = Collision::Trt { magic: 0.25 };

/// A state of `g` near rest with random perturbations (post-collision deviations).
fn random_post(g: &Geometry, seed: u64, amp: f64) -> Vec<f64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..g.velocities().q() * g.cells())
        .map(|_| amp * (rng.random::<f64>() - 0.5))
        .collect()
}

/// A box with every kind of cell: a moving lid on top, resting walls at the bottom and an obstacle, an
/// inlet and an outlet closing x in the lower half of z, a free-slip plane at the outlet's x in the
/// upper half; periodic in z, and in x at the inlet's side above.
fn mixed_geometry(dims: [usize; 3]) -> Geometry {
    let mut g = Geometry::channel(dims).unwrap();
    for x in 0..dims[0] {
        for z in 0..dims[2] {
            g.set([x, dims[1] - 1, z], tag::MOVING_WALL);
        }
    }
    g.set([dims[0] / 2, dims[1] / 2, dims[2] / 2], tag::WALL);
    g.set([dims[0] / 2 + 1, dims[1] / 2, dims[2] / 2], tag::WALL);
    for (y, z) in (1..dims[1] - 1).flat_map(|y| (0..dims[2] / 2).map(move |z| (y, z))) {
        g.set([0, y, z], tag::INLET);
        g.set([dims[0] - 1, y, z], tag::OUTLET);
    }
    // A free-slip plane above the outlet: its mirrored links cross z planes, and so the cuts.
    for (y, z) in (1..dims[1] - 1).flat_map(|y| (dims[2] / 2..dims[2]).map(move |z| (y, z))) {
        g.set([dims[0] - 1, y, z], tag::SLIP_X);
    }
    g.mark_near_walls();
    g
}

fn mixed_params(collision: Collision) -> Params {
    Params {
        tau: 0.7,
        collision,
        force: [2e-5, -1e-5, 3e-5],
        wall_velocity: [0.05, 0.0, 0.02],
        open: Open {
            velocity: [0.04, -0.01, 0.02],
            parabola: [None, Some([0.5, 6.5]), Some([-0.5, 2.5])],
            ramp: 3,
            outlet_density: 1.01,
            // Non-reflecting, its reference velocity moving visibly each step.
            outlet_memory: 7,
        },
    }
}

/// `g` on the velocity set `v`.
fn on(mut g: Geometry, v: Velocities) -> Geometry {
    g.set_velocities(v);
    g
}

#[test]
fn mass_and_momentum_are_conserved_over_1000_periodic_steps() {
    let dims = [12, 10, 8];
    for (streaming, v) in [Streaming::TwoLattice, Streaming::InPlace]
        .into_iter()
        .flat_map(|s| Velocities::ALL.map(|v| (s, v)))
    {
        let g = on(Geometry::periodic(dims).unwrap(), v);
        let mut lbm = Lbm::<f64>::new(
            &Engine::Host,
            g.clone(),
            Params::bgk(0.6),
            streaming,
            |_| (1.0, [0.0; 3]),
        )
        .unwrap();
        lbm.set_populations(&random_post(&g, 3, 1e-3)).unwrap();
        let (m0, p0) = mass_momentum(&g, &lbm.populations().unwrap());
        lbm.run(1000).unwrap();
        let (m1, p1) = mass_momentum(&g, &lbm.populations().unwrap());
        assert!(
            (m1 - m0).abs() < 1e-11 * m0,
            "{streaming:?} {v:?}: mass {m0} -> {m1}"
        );
        for a in 0..3 {
            assert!(
                (p1[a] - p0[a]).abs() < 1e-12 * m0,
                "{streaming:?} {v:?}: momentum {p0:?} -> {p1:?}"
            );
        }
        // The state did change: conservation is not a frozen lattice.
        assert_ne!(lbm.populations().unwrap(), random_post(&g, 3, 1e-3));
    }
}

#[test]
fn closed_box_with_moving_lid_leaks_no_mass() {
    let g = Geometry::cavity([10, 9, 8], true).unwrap();
    let (_, p) = cases::cavity([10, 9, 8], true, 10.0, 0.1, TRT).unwrap();
    let mut lbm = Lbm::<f64>::new(&Engine::Host, g.clone(), p, Streaming::InPlace, |_| {
        (1.0, [0.0; 3])
    })
    .unwrap();
    let (m0, _) = mass_momentum(&g, &lbm.populations().unwrap());
    lbm.run(1000).unwrap();
    let (m1, _) = mass_momentum(&g, &lbm.populations().unwrap());
    assert!((m1 - m0).abs() < 1e-11 * m0, "mass {m0} -> {m1}");
    assert!(
        lbm.moments().unwrap().max_speed() > 0.01,
        "the lid drives the flow"
    );
}

fn schemes_agree<S: LbmStorage>() {
    for v in Velocities::ALL {
        schemes_agree_on::<S>(on(mixed_geometry([9, 8, 7]), v));
        schemes_agree_on::<S>(on(curved_geometry([9, 10, 7]).0, v));
    }
}

/// [`schemes_agree`] on `g`, the forces on its bodies too.
fn schemes_agree_on<S: LbmStorage>(g: Geometry) {
    let p = mixed_params(TRT);
    let post = random_post(&g, 5, 2e-3);
    let make = |s| {
        let mut l = Lbm::<S>::new(&Engine::Host, g.clone(), p, s, |_| (1.0, [0.0; 3])).unwrap();
        l.set_populations(&post).unwrap();
        l
    };
    let (mut ab, mut aa) = (make(Streaming::TwoLattice), make(Streaming::InPlace));
    for step in 1..=20 {
        ab.step(true).unwrap();
        aa.step(true).unwrap();
        let forces = |l: &mut Lbm<S>| {
            let f = l.forces().unwrap();
            f.iter().flatten().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        assert_eq!(forces(&mut ab), forces(&mut aa), "{} step {step}", S::NAME);
        let (ma, mb) = (ab.moments().unwrap(), aa.moments().unwrap());
        assert!(ma.u.iter().any(|u| u[0] != 0.0));
        for n in 0..g.cells() {
            assert_eq!(
                ma.rho[n].to_bits(),
                mb.rho[n].to_bits(),
                "{} step {step} cell {n}",
                S::NAME
            );
            for a in 0..3 {
                assert_eq!(
                    ma.u[n][a].to_bits(),
                    mb.u[n][a].to_bits(),
                    "{} step {step} cell {n}",
                    S::NAME
                );
            }
        }
        if step % 2 == 0 {
            let (pa, pb) = (ab.populations().unwrap(), aa.populations().unwrap());
            for q in 0..g.velocities().q() {
                for n in (0..g.cells()).filter(|&n| g.is_fluid(n)) {
                    let i = q * g.cells() + n;
                    assert_eq!(
                        pa[i].to_bits(),
                        pb[i].to_bits(),
                        "{} step {step} q {q} cell {n}",
                        S::NAME
                    );
                }
            }
        } else {
            assert!(
                aa.populations().is_err(),
                "odd in-place steps hold streamed populations"
            );
        }
    }
}

#[test]
fn in_place_equals_two_lattice_bit_for_bit() {
    schemes_agree::<f64>();
    schemes_agree::<f32>();
    schemes_agree::<Half>();
}

/// A start with density and every velocity component varying from cell to cell.
fn varied(n: usize) -> (f64, [f64; 3]) {
    let (s, c) = ((n as f64 * 0.37).sin(), (n as f64 * 0.11).cos());
    (1.0 + 0.01 * s, [0.02 * s, -0.01 * c, 0.015 * s * c])
}

#[test]
fn a_lattice_cut_on_one_rank_steps_as_the_whole_bit_for_bit() {
    // The split path (halo planes exchanged, here with itself as z wraps; boundary planes apart from
    // the inner ones) on one rank: both schemes, the exchange behind the inner planes and before them;
    // with interpolated links too, whose in-place copies lie in halo planes.
    let p = mixed_params(TRT);
    let geometries = [
        mixed_geometry([9, 8, 7]),
        curved_geometry([9, 10, 7]).0,
        on(curved_geometry([9, 10, 7]).0, Velocities::D3Q27),
    ];
    for (g, streaming) in geometries
        .iter()
        .flat_map(|g| [Streaming::TwoLattice, Streaming::InPlace].map(|s| (g, s)))
    {
        let forces = |l: &mut Lbm<f32>| {
            let f = l.forces().unwrap();
            f.iter().flatten().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        let mut whole = Lbm::<f32>::new(&Engine::Host, g.clone(), p, streaming, varied).unwrap();
        whole.run(7).unwrap();
        let want = whole.moments().unwrap();
        // After an odd and an even step (the in-place scheme's interpolation reads other cells).
        let mut want_forces = forces(&mut whole);
        whole.step(false).unwrap();
        want_forces.extend(forces(&mut whole));
        assert!(want.u.iter().any(|u| u[2] != 0.0));
        for overlap in [true, false] {
            let mut cut =
                Lbm::<f32>::new_on_cut(Solo, true, &Engine::Host, g.clone(), p, streaming, varied)
                    .unwrap();
            cut.set_overlap(overlap);
            cut.run(7).unwrap();
            let mut got_forces = forces(&mut cut);
            let got = cut.moments().unwrap();
            cut.step(false).unwrap();
            got_forces.extend(forces(&mut cut));
            let v = g.velocities();
            assert_eq!(
                got_forces, want_forces,
                "{streaming:?} {v:?}, overlap {overlap}"
            );
            assert_eq!(got.dims, want.dims);
            for n in 0..g.cells() {
                let bits = |rho: f64, u: [f64; 3]| (rho.to_bits(), u.map(f64::to_bits));
                assert_eq!(
                    bits(got.rho[n], got.u[n]),
                    bits(want.rho[n], want.u[n]),
                    "{streaming:?}, overlap {overlap}: cell {n}"
                );
            }
        }
    }
}

#[test]
fn shared_body_matches_the_independent_reference() {
    agrees_with_the_reference(&mixed_geometry([7, 9, 5]), None, 11, 4);
}

#[test]
fn poiseuille_profile_within_2_percent_at_32_cells() {
    for (collision, limit) in [
        (Collision::Bgk, 0.02),
        (Collision::Trt { magic: 3.0 / 16.0 }, 1e-6),
    ] {
        let (g, p) = cases::poiseuille(32, 1, 1, 0.8, 1e-6, collision).unwrap();
        let mut lbm =
            Lbm::<f64>::new(&Engine::Host, g, p, Streaming::InPlace, |_| (1.0, [0.0; 3])).unwrap();
        // About five viscous times H^2 / nu.
        lbm.run(5 * (34 * 34 * 10) as u64).unwrap();
        let err = cases::poiseuille_error(&lbm.moments().unwrap(), &p);
        assert!(err < limit, "{collision:?}: L2 error {err}");
    }
}

#[test]
fn taylor_green_energy_decays_at_the_analytic_rate() {
    let dims = [48, 48, 2];
    let p = Params::bgk(0.8);
    for v in Velocities::ALL {
        let mut lbm = Lbm::<f64>::new(
            &Engine::Host,
            on(Geometry::periodic(dims).unwrap(), v),
            p,
            Streaming::TwoLattice,
            cases::taylor_green(dims, 0.02).unwrap(),
        )
        .unwrap();
        lbm.run(100).unwrap();
        let e0 = lbm.moments().unwrap().kinetic_energy();
        lbm.run(1000).unwrap();
        let e1 = lbm.moments().unwrap().kinetic_energy();
        let rate = (e0 / e1).ln() / 1000.0;
        let want = cases::taylor_green_rate(dims, &p);
        assert!(
            (rate / want - 1.0).abs() < 0.02,
            "{v:?}: rate {rate} vs {want}"
        );
    }
}

#[test]
fn cavity_re100_matches_ghia() {
    let dims = [66, 66, 1];
    let (g, p) = cases::cavity(dims, false, 100.0, 0.1, TRT).unwrap();
    let mut lbm =
        Lbm::<f32>::new(&Engine::Host, g, p, Streaming::InPlace, |_| (1.0, [0.0; 3])).unwrap();
    let mut before = None;
    for _ in 0..60 {
        lbm.run(1000).unwrap();
        let m = lbm.moments().unwrap();
        if before
            .as_ref()
            .is_some_and(|b| cases::is_steady(b, &m, 1e-4))
        {
            break;
        }
        before = Some(m);
    }
    let (u, v) = cases::centrelines(&lbm.moments().unwrap(), 0.1);
    let (eu, ev) = (
        cases::profile_error(&u, &GHIA_RE100_U),
        cases::profile_error(&v, &GHIA_RE100_V),
    );
    assert!(
        eu < 0.02 && ev < 0.02,
        "max deviation from Ghia: u {eu}, v {ev}"
    );
}

#[test]
fn bad_parameters_are_refused() {
    let g = Geometry::periodic([4, 4, 4]).unwrap();
    let e = Lbm::<f32>::new(
        &Engine::Host,
        g.clone(),
        Params::bgk(0.5),
        Streaming::InPlace,
        |_| (1.0, [0.0; 3]),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("tau"), "{e}");
    let e = cases::cavity([34, 34, 1], false, 100.0, 0.2, TRT)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("Mach 0.3"), "{e}");
    let mut lbm = Lbm::<f32>::new(
        &Engine::Host,
        g,
        Params::bgk(0.7),
        Streaming::InPlace,
        |_| (1.0, [0.0; 3]),
    )
    .unwrap();
    assert!(lbm.moments().is_err(), "no step has computed moments yet");
    assert!(lbm.set_populations(&[0.0; 5]).is_err());
}

/// A sphere in a periodic box driven by a body force: at steady state the momentum exchange on the
/// sphere carries away exactly what the force puts into the fluid (nothing else holds the flow back).
#[test]
fn the_drag_on_a_body_balances_the_driving_force() {
    let dims = [14, 12, 12];
    let mut g = Geometry::periodic(dims).unwrap();
    g.add_obstacle(&lattice_gpu_lbm::geometry::Obstacle::Sphere {
        centre: [6.0, 5.5, 5.5],
        radius: 3.0,
    })
    .unwrap();
    let force = [2e-5, 5e-6, -4e-6];
    for streaming in [Streaming::TwoLattice, Streaming::InPlace] {
        let p = Params {
            force,
            collision: TRT,
            ..Params::bgk(0.9)
        };
        let mut lbm =
            Lbm::<f64>::new(&Engine::Host, g.clone(), p, streaming, |_| (1.0, [0.0; 3])).unwrap();
        lbm.run(3000).unwrap();
        let drag = lbm.forces().unwrap();
        assert_eq!(drag.len(), 1);
        let fluid = g.fluid_cells() as f64;
        for a in 0..3 {
            let want = force[a] * fluid;
            assert!(
                (drag[0][a] - want).abs() < 1e-4 * want.abs(),
                "{streaming:?}: drag {:?}, body force {want} along {a}",
                drag[0]
            );
        }
    }
}

/// Forces split over ranks (threads) are the whole lattice's, bit for bit, in both schemes.
#[test]
fn forces_split_over_ranks_are_the_whole_ones() {
    let dims = [10, 9, 11];
    let mut g = mixed_geometry(dims);
    let shapes = [
        lattice_gpu_lbm::geometry::Obstacle::Sphere {
            centre: [4.0, 4.0, 5.0],
            radius: 2.2,
        },
        lattice_gpu_lbm::geometry::Obstacle::Cuboid {
            lo: [2.0, 2.0, 8.0],
            hi: [6.0, 3.0, 10.0],
        },
    ];
    for s in &shapes {
        g.add_obstacle(s).unwrap();
    }
    let p = mixed_params(TRT);
    let rules = [BounceBack::Halfway, BounceBack::Interpolated];
    for (rule, streaming) in rules
        .iter()
        .flat_map(|&r| [Streaming::TwoLattice, Streaming::InPlace].map(|s| (r, s)))
    {
        g.set_bounce_back(rule);
        let run = |comm: &lattice_gpu_host::threads::Threads| {
            let mut lbm = Lbm::<f32, _>::new_on(
                comm.clone(),
                &Engine::Host,
                g.clone(),
                p,
                streaming,
                varied,
            )?;
            let mut seen = Vec::new();
            for _ in 0..5 {
                lbm.step(false)?;
                seen.push(lbm.forces()?);
            }
            Ok::<_, lattice_gpu_lbm::Error>(seen)
        };
        let whole = lattice_gpu_host::threads::run(1, run)
            .unwrap()
            .swap_remove(0);
        assert!(whole
            .iter()
            .all(|f| f.len() == 2 && f[0][0] != 0.0 && f[1][1] != 0.0));
        for ranks in [2, 3] {
            for (rank, got) in lattice_gpu_host::threads::run(ranks, run)
                .unwrap()
                .into_iter()
                .enumerate()
            {
                let bits = |v: &Vec<Vec<[f64; 3]>>| {
                    v.iter()
                        .flatten()
                        .flatten()
                        .map(|x| x.to_bits())
                        .collect::<Vec<_>>()
                };
                assert_eq!(
                    bits(&got),
                    bits(&whole),
                    "{rule:?} {streaming:?}, {ranks} ranks, rank {rank}"
                );
            }
        }
    }
}

/// Schäfer and Turek's steady case 2D-1 at 10 cells per diameter: with halfway bounce-back the drag
/// within 1.5% of the paper's interval and the pressure difference within 6% (the staircase cylinder's
/// error at this resolution; 80 cells per diameter land inside, docs/BENCHMARKS.md); with the links
/// interpolated at the circle and the non-reflecting outlet the drag within 0.5%, nearer than halfway's.
#[test]
fn the_steady_cylinder_drag_is_near_schaefer_turek_at_10_cells_per_diameter() {
    use lattice_gpu_lbm::schaefer_turek::{Case, Cylinder};
    let cyl = Cylinder::new(Case::Steady, 10, 0.1).unwrap();
    let unit = cyl.steps_per_time_unit();
    let mut drags = Vec::new();
    for (rule, memory) in [(BounceBack::Halfway, 0), (BounceBack::Interpolated, 10)] {
        let mut p = cyl.params(TRT, (2.0 * unit) as u64).unwrap();
        p.open.outlet_memory = (memory as f64 * unit) as u64;
        let mut g = cyl.geometry().unwrap();
        g.set_bounce_back(rule);
        let mut lbm = Lbm::<f32>::new(&Engine::Host, g.clone(), p, Streaming::InPlace, |_| {
            (1.0, [0.0; 3])
        })
        .unwrap();
        // Steady by 40 D/U (docs/BENCHMARKS.md).
        lbm.run((60.0 * unit) as u64).unwrap();
        let [cd, cl] = cyl.coefficients(lbm.forces().unwrap()[0]);
        let dp = cyl.pressure_drop(&g, &lbm.moments().unwrap()).unwrap();
        let slack = if memory == 0 { 1.015 } else { 1.005 };
        assert!(
            (5.57 / slack..5.59 * slack).contains(&cd),
            "{rule:?}: c_D {cd}"
        );
        // Read at the nodes nearest the cylinder's front and back.
        assert!(
            (0.1172 / 1.06..0.1176 * 1.06).contains(&dp),
            "{rule:?}: delta p {dp}"
        );
        // The lift is small and of the paper's sign: the cylinder sits 0.005 below the channel's
        // middle.
        assert!((0.005..0.02).contains(&cl), "{rule:?}: c_L {cl}");
        drags.push((cd - 5.58).abs());
    }
    assert!(drags[1] < drags[0], "{drags:?}");
}

/// The outlet's pressure reflection: a sound pulse running down a 1-D channel (periodic in y and z)
/// comes back from the anti-bounce-back outlet inverted and almost whole, as from any fixed-pressure
/// end, and from the inlet (velocity 0) upright; from the non-reflecting outlet (its reference velocity
/// following the outflow over 2000 steps) hardly at all. The ratios are what docs/BENCHMARKS.md
/// records.
#[test]
fn the_open_ends_reflect_a_sound_pulse_as_fixed_pressure_and_fixed_velocity_ends() {
    let nx = 400;
    let mut g = Geometry::periodic([nx, 1, 1]).unwrap();
    g.set([0, 0, 0], tag::INLET);
    g.set([nx - 1, 0, 0], tag::OUTLET);
    g.mark_near_walls();
    let pulse = |n: usize| {
        let d = (n as f64 - 200.0) / 8.0;
        (1.0 + 1e-3 * (-d * d).exp(), [0.0; 3])
    };
    // The signed extremum of the density in cells `range`, once the pulses are there.
    let peak = |lbm: &mut Lbm<f64>, steps: u64, range: std::ops::Range<usize>| {
        lbm.run(steps).unwrap();
        let m = lbm.moments().unwrap();
        range
            .map(|x| m.rho[x] - 1.0)
            .fold(0.0f64, |a, v| if v.abs() > a.abs() { v } else { a })
    };
    let mut reflected = Vec::new();
    for memory in [0, 2000] {
        let mut p = Params::bgk(0.505);
        p.open.outlet_memory = memory;
        let mut lbm =
            Lbm::<f64>::new(&Engine::Host, g.clone(), p, Streaming::TwoLattice, pulse).unwrap();
        // c_s = 1/sqrt(3): the pulses are 100 cells out after 173 steps, back 100 cells from the
        // ends after 520.
        let incident = peak(&mut lbm, 173, 250..350);
        let from_outlet = peak(&mut lbm, 520 - 173, 250..399);
        let from_inlet = peak(&mut lbm, 0, 1..150);
        let (r_out, r_in) = (from_outlet / incident, from_inlet / incident);
        println!(
            "outlet memory {memory}: reflection: outlet {r_out:.4}, inlet {r_in:.4} (incident \
             {incident:.3e})"
        );
        assert!(incident > 4e-4, "{incident}");
        assert!((0.9..1.0).contains(&r_in), "inlet {r_in}");
        reflected.push(r_out);
    }
    assert!((-1.0..-0.9).contains(&reflected[0]), "outlet {reflected:?}");
    assert!(
        reflected[1].abs() < 0.06,
        "non-reflecting outlet {reflected:?}"
    );
}

#[test]
fn a_free_slip_wall_is_a_mirror_plane() {
    let (nx, w, nz) = (8, 6, 5);
    let full = Geometry::channel([nx, 2 * w + 2, nz]).unwrap();
    let mut half = Geometry::periodic([nx, w + 2, nz]).unwrap();
    for (x, z) in (0..nx).flat_map(|x| (0..nz).map(move |z| (x, z))) {
        half.set([x, 0, z], tag::WALL);
        half.set([x, w + 1, z], tag::SLIP_Y);
    }
    half.mark_near_walls();
    let p = Params {
        force: [1e-5, 0.0, 3e-6],
        collision: TRT,
        ..Params::bgk(0.8)
    };
    // Mirror-symmetric about y = w + 1/2 in the full channel: u_y reverses.
    let start = |dims: [usize; 3]| {
        move |n: usize| {
            let [x, y, z] = [n % dims[0], n / dims[0] % dims[1], n / (dims[0] * dims[1])];
            let (yy, sign) = if y <= w {
                (y, 1.0)
            } else {
                (2 * w + 1 - y, -1.0)
            };
            let (sx, sz) = (
                (x as f64 * 0.7 + yy as f64 * 0.3).sin(),
                (z as f64 * 1.3 - yy as f64 * 0.5).cos(),
            );
            (
                1.0 + 0.01 * sx * sz,
                [
                    0.02 * sx,
                    sign * 0.01 * sz * yy as f64 / w as f64,
                    0.015 * sx * sz,
                ],
            )
        }
    };
    for streaming in [Streaming::TwoLattice, Streaming::InPlace] {
        let run = |g: &Geometry| {
            let mut lbm =
                Lbm::<f64>::new(&Engine::Host, g.clone(), p, streaming, start(g.dims())).unwrap();
            lbm.run(301).unwrap();
            lbm.moments().unwrap()
        };
        let (a, b) = (run(&full), run(&half));
        let mut worst: f64 = 0.0;
        for (x, y, z) in
            (0..nx).flat_map(|x| (1..=w).flat_map(move |y| (0..nz).map(move |z| (x, y, z))))
        {
            let (i, j) = (a.index([x, y, z]), b.index([x, y, z]));
            // The mirror image in the full channel's other half.
            let k = a.index([x, 2 * w + 1 - y, z]);
            let mirror = [a.u[k][0], -a.u[k][1], a.u[k][2]];
            for (c, m) in mirror.iter().enumerate() {
                worst = worst
                    .max((a.u[i][c] - b.u[j][c]).abs())
                    .max((m - b.u[j][c]).abs());
            }
            worst = worst.max((a.rho[i] - b.rho[j]).abs());
        }
        let scale = a.max_speed();
        assert!(scale > 1e-3, "{streaming:?}: the flow moves ({scale})");
        assert!(
            worst < 1e-12,
            "{streaming:?}: off by {worst:e} (speeds to {scale:e})"
        );
    }
}

/// [`mixed_geometry`] with a sphere whose links are interpolated (`BounceBack::Interpolated`): it
/// reaches down next to the resting bottom wall, so that some links nearer than halfway have a wall
/// upstream and fall back to halfway, and across the middle z planes, where a split cuts.
fn curved_geometry(dims: [usize; 3]) -> (Geometry, Sphere) {
    let mut g = mixed_geometry(dims);
    let sphere = Sphere {
        centre: [4.3, 3.2, 3.6],
        radius: 1.9,
    };
    g.add_obstacle(&Obstacle::Sphere {
        centre: sphere.centre,
        radius: sphere.radius,
    })
    .unwrap();
    g.set_bounce_back(BounceBack::Interpolated);
    (g, sphere)
}

/// A sphere for the tests' own wall distances.
struct Sphere {
    centre: [f64; 3],
    radius: f64,
}

impl Sphere {
    /// Where the link from node `p` along `c` (its end inside) crosses the surface, by bisection:
    /// written apart from the geometry's quadratic; rounded to f32, as the kernels hold it.
    fn crossing(&self, p: [f64; 3], c: [i32; 3]) -> f64 {
        let inside = |t: f64| {
            (0..3)
                .map(|a| (p[a] + t * c[a] as f64 - self.centre[a]).powi(2))
                .sum::<f64>()
                <= self.radius * self.radius
        };
        let (mut lo, mut hi) = (0.0, 1.0);
        assert!(!inside(lo) && inside(hi));
        for _ in 0..60 {
            let mid = 0.5 * (lo + hi);
            if inside(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi as f32 as f64
    }
}

/// The reference with `g`'s tags, `p`'s parameters, the state `post` and the sphere's surface on
/// every link into it.
fn reference_of(g: &Geometry, p: &Params, post: &[f64], sphere: Option<&Sphere>) -> Reference {
    let cells = g.cells();
    let lattice = match g.velocities() {
        Velocities::D3Q19 => RefLattice::D3Q19,
        Velocities::D3Q27 => RefLattice::D3Q27,
    };
    let mut r = Reference::with_lattice(
        g.dims(),
        g.tags().to_vec(),
        RefParams {
            tau: p.tau,
            magic: match p.collision {
                Collision::Bgk => None,
                Collision::Trt { magic } => Some(magic),
            },
            force: p.force,
            wall_velocity: p.wall_velocity,
            inflow: p.open.velocity,
            parabola: p.open.parabola,
            ramp: p.open.ramp,
            outlet_density: p.open.outlet_density,
            outlet_memory: p.open.outlet_memory,
        },
        lattice,
    );
    let v = g.velocities();
    for n in 0..cells {
        let f: Vec<f64> = (0..v.q())
            .map(|q| v.weight(q) + post[q * cells + n])
            .collect();
        r.set_populations(n, &f);
    }
    if let Some(s) = sphere {
        let [nx, ny, _] = g.dims();
        for (n, k) in g.links(0) {
            let p = [n % nx, n / nx % ny, n / (nx * ny)].map(|v| v as f64);
            r.set_wall_distance(n, k, s.crossing(p, C[k]));
        }
    }
    r
}

/// Interpolated bounce-back on a sphere (its links' surface found here by bisection) against the
/// reference's own rule, in both schemes and both parities of the in-place one: the moments, the
/// populations and the force by momentum exchange, to rounding.
#[test]
fn interpolated_links_match_the_independent_reference() {
    let dims = [9, 10, 7];
    let (g, sphere) = curved_geometry(dims);
    let links = g.links(0);
    // Both branches of the rule, and the fallback: a link nearer than halfway with a wall upstream.
    let cuts: Vec<f64> = links.iter().map(|&(n, k)| g.cut(n, k)).collect();
    assert!(cuts.iter().any(|&d| d < 0.45) && cuts.iter().any(|&d| d > 0.55));
    let fallback = links.iter().any(|&(n, k)| {
        let [nx, ny, _] = dims;
        let p = [n % nx, n / nx % ny, n / (nx * ny)].map(|v| v as f64);
        sphere.crossing(p, C[k]) < 0.5 && g.cut(n, k) == 0.5
    });
    assert!(fallback, "a link falls back to halfway");
    agrees_with_the_reference(&g, Some(&sphere), 17, 6);
}

/// `g` (its first body's links' surface that of `sphere`, if given) on the shared body against the
/// reference from a random state (`seed`), on both velocity sets, BGK and TRT, both schemes, `steps`
/// steps: the moments, the populations at even steps and the force on the first body, to rounding.
fn agrees_with_the_reference(g: &Geometry, sphere: Option<&Sphere>, seed: u64, steps: u64) {
    for v in Velocities::ALL {
        agrees_on(&on(g.clone(), v), sphere, seed, steps);
    }
}

/// [`agrees_with_the_reference`] on `g`'s velocity set.
fn agrees_on(g: &Geometry, sphere: Option<&Sphere>, seed: u64, steps: u64) {
    let (cells, v) = (g.cells(), g.velocities());
    let links = if g.bodies().is_empty() {
        Vec::new()
    } else {
        g.links(0)
    };
    for collision in [Collision::Bgk, TRT] {
        let p = mixed_params(collision);
        let post = random_post(g, seed, 0.02);
        let reference = reference_of(g, &p, &post, sphere);
        for streaming in [Streaming::TwoLattice, Streaming::InPlace] {
            let mut lbm =
                Lbm::<f64>::new(&Engine::Host, g.clone(), p, streaming, |_| (1.0, [0.0; 3]))
                    .unwrap();
            lbm.set_populations(&post).unwrap();
            let mut r = reference.clone();
            for step in 1..=steps {
                lbm.step(true).unwrap();
                r.step();
                let m = lbm.moments().unwrap();
                for n in (0..cells).filter(|&n| g.is_fluid(n)) {
                    let (rho, u) = r.moments(n);
                    let off = (0..3).fold((m.rho[n] - rho).abs(), |w, a| {
                        w.max((m.u[n][a] - u[a]).abs())
                    });
                    assert!(
                        off < 1e-13,
                        "{v:?} {collision:?} {streaming:?} step {step} cell {n}: off by {off:e}"
                    );
                }
                let forces = lbm.forces().unwrap();
                let (got, want) = match forces.first() {
                    Some(&f) => (f, r.momentum_into(&links)),
                    None => ([0.0; 3], [0.0; 3]),
                };
                for a in 0..3 {
                    assert!(
                        (got[a] - want[a]).abs() < 1e-12,
                        "{v:?} {collision:?} {streaming:?} step {step}: force {got:?} vs {want:?}"
                    );
                }
                if step % 2 == 0 {
                    let got = lbm.populations().unwrap();
                    for n in (0..cells).filter(|&n| g.is_fluid(n)) {
                        let want = r.populations(n);
                        for q in 0..v.q() {
                            let f = v.weight(q) + got[q * cells + n];
                            assert!(
                                (f - want[q]).abs() < 1e-13,
                                "{v:?} {collision:?} {streaming:?} step {step} cell {n} q {q}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Poiseuille flow between two plates whose faces lie a third of the way between nodes: interpolated
/// bounce-back holds the walls where they are (the analytic profile within 0.1% of its peak),
/// halfway bounce-back moves them to the midpoints between nodes (off by more than 2%).
#[test]
fn interpolated_walls_sit_where_the_surface_is() {
    let (nx, ny, nz) = (2, 24, 1);
    let (lo, hi) = (2.0 + 1.0 / 3.0, ny as f64 - 3.0 - 1.0 / 3.0);
    let plate = |from: f64, to: f64| Obstacle::Cuboid {
        lo: [0.0, from, 0.0],
        hi: [(nx - 1) as f64, to, (nz - 1) as f64],
    };
    let force = 1e-6;
    let p = Params {
        force: [force, 0.0, 0.0],
        collision: TRT,
        ..Params::bgk(0.8)
    };
    let nu = p.viscosity();
    let mut errors = Vec::new();
    for rule in [BounceBack::Interpolated, BounceBack::Halfway] {
        let mut g = Geometry::periodic([nx, ny, nz]).unwrap();
        g.add_obstacle(&plate(0.0, lo)).unwrap();
        g.add_obstacle(&plate(hi, (ny - 1) as f64)).unwrap();
        g.set_bounce_back(rule);
        let mut lbm = Lbm::<f64>::new(&Engine::Host, g.clone(), p, Streaming::InPlace, |_| {
            (1.0, [0.0; 3])
        })
        .unwrap();
        lbm.run(20000).unwrap();
        let m = lbm.moments().unwrap();
        let peak = force / (8.0 * nu) * (hi - lo) * (hi - lo);
        let worst = (0..ny)
            .filter(|&y| g.is_fluid(g.index([0, y, 0])))
            .map(|y| {
                let want = force / (2.0 * nu) * (y as f64 - lo) * (hi - y as f64);
                (m.u[m.index([0, y, 0])][0] - want).abs() / peak
            })
            .fold(0.0, f64::max);
        errors.push(worst);
    }
    assert!(errors[0] < 1e-3, "interpolated: {:?}", errors);
    assert!(errors[1] > 2e-2, "halfway: {:?}", errors);
}
