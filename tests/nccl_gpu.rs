//! NCCL on the GPU (the `nccl` feature). One rank: the sum over ranks leaves every value, and a halo
//! exchange with itself (a periodic axis that is not split) copies its two face layers into the opposite
//! margins, which were poisoned, and nothing else. Several GPUs of one process (where the machine has
//! them): sums over ranks against the host's sum, and a ring exchange (each rank's first layer to the
//! next rank's margin).
//!
//! Diffusion, advection and LBM steps cut over one NCCL rank (boundary layers, and the exchange of
//! what they wrote, on the exchange's stream beside the interior) give the whole grid's, bit for bit.
//!
//! The lattice-QCD solve split along t over one NCCL rank (ghosts exchanged with itself behind the
//! inner slices, sums through NCCL, every solver variant) gives the whole lattice's solve.
//!
//! Exchanges are timed on request (the exchange bandwidth a split run reports).
//!
//! A rank whose partner never joins the communicator stops waiting after its time-out, with an error
//! that names it, instead of hanging in NCCL's set-up.
//!
//! Without a GPU, or without libnccl, each test prints `SKIPPED` and passes; `LATTICE_GPU_REQUIRE_GPU=1`
//! makes a missing GPU or library a failure.
#![cfg(feature = "nccl")]

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lattice_gpu::advection::{cases, Advection, Kernel, Problem as AdvectionProblem};
use lattice_gpu::diffusion::{simulate, simulate_on, Exchange, Problem};
use lattice_gpu::host::comm::{Communicator, Solo, Wire};
use lattice_gpu::host::decomp::Face;
use lattice_gpu::host::engine::tunecache::TuneCache;
use lattice_gpu::host::engine::{LoopEngine, TuneSpace};
use lattice_gpu::host::halo::Halos;
use lattice_gpu::host::nccl::{self, Nccl};
use lattice_gpu::host::{
    DeviceAutoTuningLoopEngine, DeviceBuffer, DeviceLoopEngine, Gpu, LaunchShape, Result,
};
use lattice_gpu::kernels::lbm::tag;
use lattice_gpu::lbm::{Collision, Engine, Geometry, Lbm, Moments, Open, Params, Streaming};

use common::{gpu, poison, random, split_solve_matches_whole};
use lattice_gpu_testkit as common;

/// Whether NCCL loads; otherwise says why the test is skipped (or fails where it is required).
fn nccl_present(test: &str) -> bool {
    match nccl::check_library() {
        Ok(()) => true,
        Err(e) if std::env::var("LATTICE_GPU_REQUIRE_GPU").as_deref() != Ok("1") => {
            let _ = writeln!(std::io::stderr(), "SKIPPED (no NCCL): {test}: {e}");
            false
        }
        Err(e) => panic!("{test}: NCCL required but not loadable: {e}"),
    }
}

/// Layers of `LAYER` values: margin, `INNER` owned layers, margin.
const LAYER: usize = 96;
const INNER: usize = 5;

#[test]
fn one_rank_sums_and_exchanges_with_itself() {
    let test = "one_rank_sums_and_exchanges_with_itself";
    let Some(g) = gpu(test) else { return };
    if !nccl_present(test) {
        return;
    }
    let mut comm = Nccl::new(&Solo, &g).unwrap();
    assert_eq!((comm.rank(), comm.size()), (0, 1));
    assert_eq!(comm.exchange_time().unwrap(), None);
    comm.time_exchanges();

    let v = random::<f64>(1000, 3);
    let sums = DeviceBuffer::from_host(&g, &v).unwrap();
    comm.sum_in_place(&sums).unwrap();
    let got = sums.download().unwrap();
    assert!(got.iter().zip(&v).all(|(a, b)| a.to_bits() == b.to_bits()));

    // Owned layers random, margins poisoned; periodic: the last owned layer fills the low margin and
    // the first the high one.
    let n = (INNER + 2) * LAYER;
    let mut host = random::<f32>(n, 4);
    host[..LAYER].copy_from_slice(&poison(LAYER));
    host[n - LAYER..].copy_from_slice(&poison(LAYER));
    let field = DeviceBuffer::from_host(&g, &host).unwrap();
    let layer = |k: usize| k * LAYER..(k + 1) * LAYER;
    comm.exchange(
        &field,
        &[(0, layer(INNER)), (0, layer(1))],
        &[(0, layer(0)), (0, layer(INNER + 1))],
    )
    .unwrap();
    let got = field.download().unwrap();
    let mut want = host.clone();
    want.copy_within(layer(INNER), 0);
    want.copy_within(layer(1), (INNER + 1) * LAYER);
    assert!(got
        .iter()
        .zip(&want)
        .all(|(a, b)| a.to_bits() == b.to_bits()));

    // Started exchanges are timed (the first left out): their count, the bytes they sent, a time.
    for _ in 0..3 {
        comm.start_ranges(&field, &[(0, layer(INNER))], &[(0, layer(0))])
            .unwrap();
        comm.finish().unwrap();
    }
    let t = comm.exchange_time().unwrap().unwrap();
    assert_eq!((t.count, t.bytes), (2, 2 * 4 * LAYER as u64), "{t:?}");
    assert!(t.seconds > 0.0 && t.seconds < 1.0, "{t:?}");

    // A range outside the buffer is an error naming it, not a fault.
    let err = comm
        .exchange(&field, &[(0, n - 10..n + 10)], &[])
        .unwrap_err();
    assert!(err.to_string().contains("elements"), "{err}");
}

#[test]
fn several_gpus_of_one_process_sum_and_pass_a_ring() {
    let test = "several_gpus_of_one_process_sum_and_pass_a_ring";
    let Some(first) = gpu(test) else { return };
    let count = Gpu::probe().unwrap();
    if count < 2 {
        let _ = writeln!(std::io::stderr(), "SKIPPED (one GPU): {test}");
        return;
    }
    if !nccl_present(test) {
        return;
    }
    let mut gpus = vec![first.clone()];
    for k in 1..count {
        gpus.push(Gpu::open(k).unwrap());
    }
    let comms = Nccl::for_gpus(&gpus).unwrap();
    let values: Vec<Vec<f64>> = (0..count).map(|r| random(777, 10 + r as u64)).collect();
    let sums: Vec<_> = gpus
        .iter()
        .zip(&values)
        .map(|(g, v)| DeviceBuffer::from_host(g, v).unwrap())
        .collect();
    nccl::group(|| {
        for (c, s) in comms.iter().zip(&sums) {
            c.sum_in_place(s)?;
        }
        Ok(())
    })
    .unwrap();
    for s in &sums {
        let got = s.download().unwrap();
        for (i, g) in got.iter().enumerate() {
            let want: f64 = values.iter().map(|v| v[i]).sum();
            assert!(
                (g - want).abs() <= 1e-14 * want.abs().max(1.0),
                "{g} vs {want}"
            );
        }
    }

    // Ring: rank r sends its first owned layer to rank r + 1's low margin.
    let n = (INNER + 2) * LAYER;
    let layer = |k: usize| k * LAYER..(k + 1) * LAYER;
    let hosts: Vec<Vec<f32>> = (0..count)
        .map(|r| {
            let mut h = random::<f32>(n, 20 + r as u64);
            h[..LAYER].copy_from_slice(&poison(LAYER));
            h
        })
        .collect();
    let fields: Vec<_> = gpus
        .iter()
        .zip(&hosts)
        .map(|(g, h)| DeviceBuffer::from_host(g, h).unwrap())
        .collect();
    nccl::group(|| {
        for (r, (c, f)) in comms.iter().zip(&fields).enumerate() {
            let (next, prev) = ((r + 1) % count, (r + count - 1) % count);
            c.exchange(f, &[(next, layer(1))], &[(prev, layer(0))])?;
        }
        Ok(())
    })
    .unwrap();
    for (r, f) in fields.iter().enumerate() {
        let got = f.download().unwrap();
        let prev = (r + count - 1) % count;
        let mut want = hosts[r].clone();
        want[layer(0)].copy_from_slice(&hosts[prev][layer(1)]);
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "rank {r}"
        );
    }
}

#[test]
fn lqcd_split_over_one_nccl_rank_solves_as_the_whole_lattice() {
    use lattice_gpu::host::solvers::bicgstab::OverheadHiding;
    use lattice_gpu::host::split::DeviceRanks;
    let test = "lqcd_split_over_one_nccl_rank_solves_as_the_whole_lattice";
    let Some(g) = gpu(test) else { return };
    if !nccl_present(test) {
        return;
    }
    let ranks = || Box::new(Nccl::new(&Solo, &g).unwrap()) as Box<dyn DeviceRanks<f64>>;
    split_solve_matches_whole(&g, &ranks, &OverheadHiding::ALL, true);
    split_solve_matches_whole(&g, &ranks, &[OverheadHiding::Async], false);
}

/// Diffusion cut over one NCCL rank on `engine`: its field after `steps` from `input`.
fn diffusion_cut<E: LoopEngine>(
    engine: &E,
    g: &Arc<Gpu>,
    problem: &Problem,
    input: &[f32],
    steps: usize,
    overlap: bool,
) -> Vec<f32> {
    let n = Nccl::new(&Solo, g).unwrap();
    let exchange = Exchange {
        halos: Halos::Nccl(&n),
        overlap,
        cut: true,
    };
    simulate_on(
        engine,
        &Solo,
        exchange,
        problem,
        || Ok(input.to_vec()),
        steps,
        |_| {},
    )
    .unwrap()
    .field
}

#[test]
fn steps_cut_over_one_nccl_rank_equal_the_whole_grids() {
    let test = "steps_cut_over_one_nccl_rank_equal_the_whole_grids";
    let Some(g) = gpu(test) else { return };
    if !nccl_present(test) {
        return;
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    // Diffusion: the boundary planes on the exchange's stream beside the interior, with a fixed
    // launch and under the tuner (whose candidates are timed on that stream too).
    let problem = Problem::new([37, 29, 23], 0.2, None).unwrap();
    let input = random::<f32>(problem.points() as usize, 21);
    let steps = 40;
    let fixed = DeviceLoopEngine::new(g.clone(), LaunchShape::FIXED);
    let want = simulate(&fixed, &problem, || Ok(input.clone()), steps, |_| {})
        .unwrap()
        .field;
    let space = TuneSpace::table1()
        .with("block_x", vec![4, 8])
        .with("march", vec![1, 4]);
    let tuner = DeviceAutoTuningLoopEngine::new(g.clone(), TuneCache::in_memory())
        .reps(1)
        .space(space);
    for overlap in [true, false] {
        let got = diffusion_cut(&fixed, &g, &problem, &input, steps, overlap);
        assert_eq!(bits(&got), bits(&want), "diffusion, overlap {overlap}");
    }
    let got = diffusion_cut(&tuner, &g, &problem, &input, steps, true);
    assert_eq!(bits(&got), bits(&want), "diffusion under the tuner");

    // Advection (y has walls: the exchange moves nothing), every output poisoned before its step.
    let case = cases::swirl(61, 45);
    let p = AdvectionProblem {
        size: [61, 45],
        f0: case
            .f0
            .iter()
            .zip(random::<f64>(61 * 45, 5))
            .map(|(f, n)| f + 0.01 * n)
            .collect(),
        c: 0.9
            / case
                .u
                .iter()
                .chain(&case.v)
                .fold(0.0f64, |m, w| m.max(w.abs())),
        u: case.u,
        v: case.v,
    };
    let mut whole = Advection::new(&fixed, &p, Kernel::Packed, true).unwrap();
    let n = Nccl::new(&Solo, &g).unwrap();
    for _ in 0..12 {
        whole.step().unwrap();
    }
    let want = whole.field().unwrap();
    for overlap in [true, false] {
        let mut cut = Advection::new_on_cut(
            &fixed,
            &Solo,
            Halos::Nccl(&n),
            &p,
            Kernel::Packed,
            true,
            true,
        )
        .unwrap();
        cut.set_overlap(overlap);
        for _ in 0..12 {
            cut.poison_output().unwrap();
            cut.step().unwrap();
        }
        let got = cut.field().unwrap();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "advection, overlap {overlap}");
    }

    // LBM, periodic along z: the halo planes go through NCCL to the rank itself. An inlet and an outlet
    // close x below z = 5, the inflow's profile a parabola in z too (the ranks see it shifted).
    let mut geometry = Geometry::channel([13, 11, 9]).unwrap();
    geometry.set([6, 5, 4], tag::WALL);
    for (y, z) in (1..10).flat_map(|y| (0..5).map(move |z| (y, z))) {
        geometry.set([0, y, z], tag::INLET);
        geometry.set([12, y, z], tag::OUTLET);
    }
    geometry.mark_near_walls();
    let p = Params {
        tau: 0.62,
        collision: Collision::Trt { magic: 0.25 },
        force: [3e-5, -1e-5, 2e-5],
        wall_velocity: [0.0; 3],
        open: Open {
            velocity: [0.04, 0.01, 0.0],
            parabola: [None, Some([0.5, 9.5]), Some([-0.5, 4.5])],
            ramp: 5,
            outlet_density: 0.99,
            outlet_memory: 0,
        },
    };
    let init = |n: usize| {
        let s = (n as f64 * 0.37).sin();
        (1.0 + 0.01 * s, [0.02 * s, -0.01 * s, 0.015 * s])
    };
    let e = Engine::Device(g.clone());
    let ab = Streaming::TwoLattice;
    for overlap in [true, false] {
        let mut whole = Lbm::<f32>::new(&e, geometry.clone(), p, ab, init).unwrap();
        let mut cut =
            Lbm::<f32>::new_on_cut(Solo, true, &e, geometry.clone(), p, ab, init).unwrap();
        cut.exchange_through(Nccl::new(&Solo, &g).unwrap()).unwrap();
        cut.set_overlap(overlap);
        for step in 1..=6 {
            whole.poison_outputs().unwrap();
            cut.poison_outputs().unwrap();
            whole.step(true).unwrap();
            cut.step(true).unwrap();
            let (got, want) = (cut.moments().unwrap(), whole.moments().unwrap());
            assert!(want.rho.iter().all(|r| r.is_finite()));
            let moments = |m: &Moments| {
                let u = m.u.iter().flatten().copied();
                m.rho
                    .iter()
                    .copied()
                    .chain(u)
                    .map(f64::to_bits)
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                moments(&got),
                moments(&want),
                "LBM, overlap {overlap}, step {step}"
            );
        }
    }
}

/// Rank 0 of two whose rank 1 met it in the host's collectives (a GPU of its own) but never joins NCCL.
struct Deserted;

impl Communicator for Deserted {
    fn rank(&self) -> usize {
        0
    }

    fn size(&self) -> usize {
        2
    }

    fn exchange<T: Wire, const D: usize, I: Fn([usize; D]) -> usize + ?Sized>(
        &self,
        _: &[Face<D>],
        _: &mut [T],
        _: &I,
    ) -> Result<()> {
        unreachable!("NCCL's set-up exchanges nothing through the host")
    }

    fn sum(&self, v: f64) -> Result<f64> {
        Ok(2.0 * v)
    }

    fn broadcast<T: Wire>(&self, _: &mut [T]) -> Result<()> {
        Ok(())
    }

    /// Rank 1's part is this rank's with every byte flipped: another GPU's UUID.
    fn gather<T: Wire>(&self, part: &[T]) -> Result<Vec<T>> {
        let mut all = part.to_vec();
        all.extend_from_slice(part);
        // SAFETY: `Wire` values are plain bytes, any pattern of which is a value.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                all[part.len()..].as_mut_ptr() as *mut u8,
                std::mem::size_of_val(part),
            )
        };
        bytes.iter_mut().for_each(|b| *b = !*b);
        Ok(all)
    }
}

#[test]
fn a_rank_left_alone_in_the_setup_stops_waiting_with_an_error() {
    let test = "a_rank_left_alone_in_the_setup_stops_waiting_with_an_error";
    let Some(g) = gpu(test) else { return };
    if !nccl_present(test) {
        return;
    }
    let start = Instant::now();
    let err = Nccl::new_within(&Deserted, &g, Duration::from_secs(3)).unwrap_err();
    let waited = start.elapsed();
    let msg = err.to_string();
    assert!(msg.contains("rank 0 of 2 waited 3 s"), "{msg}");
    assert!(msg.contains(nccl::SETUP_TIMEOUT_VAR), "{msg}");
    assert!(
        waited >= Duration::from_secs(3) && waited < Duration::from_secs(30),
        "{waited:?}"
    );
    // The GPU and NCCL still serve a communicator of their own.
    let solo = Nccl::new(&Solo, &g).unwrap();
    let sums = DeviceBuffer::from_host(&g, &[1.5f64, -2.0]).unwrap();
    solo.sum_in_place(&sums).unwrap();
    assert_eq!(sums.download().unwrap(), vec![1.5, -2.0]);
}
