//! The fused BiCGStab iteration (one cooperative kernel per iteration on the GPU), emulated on the CPU
//! phase by phase with the kernel's own work, solves the even-odd Wilson system: the reconstructed
//! solution's true residual `|b - D x| / |b|`, measured with the independent nalgebra operator, meets
//! the tolerance, in f64 and f32, with 18- and 12-number links.

use lattice_gpu_host::kernel::run_on_host;
use lattice_gpu_host::Element;
use lattice_gpu_kernels::bicgstab::{BiCgState, Stage, CONVERGED, RUNNING};
use lattice_gpu_kernels::bind::{Span, SpanMut};
use lattice_gpu_kernels::device::grid::GridBarrier;
use lattice_gpu_kernels::wilson::{Dslash, FusedFields, FusedIteration, Phase};
use lattice_gpu_lqcd::gauge::GaugeField;
use lattice_gpu_lqcd::geometry::Lattice;
use lattice_gpu_lqcd::gpu::{
    hopping_on_host, pack_gauge, pack_parity, parity_len, unpack_parity, Recon, WilsonReal,
};
use lattice_gpu_lqcd::reference;
use lattice_gpu_lqcd::spinor::{norm2, SpinorField};
use num_complex::Complex64;

fn solve<T: WilsonReal + Element>(recon: Recon, tol: f64) -> (u32, f64) {
    let dims = [4, 4, 4, 8];
    let lat = Lattice::new(dims, true).unwrap();
    let u = GaugeField::random(dims, 5);
    let b = SpinorField::random(dims, 6);
    let kappa = 0.12;
    let gauge = pack_gauge::<T>(&lat, &u, recon);
    let len = 2 * parity_len(&lat);
    let (b_e, b_o) = (
        pack_parity::<T>(&lat, &b.data, 0),
        pack_parity::<T>(&lat, &b.data, 1),
    );
    // The even-odd right-hand side b_e + kappa H_eo b_o, as the GPU solver makes it.
    let mut src = vec![T::ZERO; len];
    hopping_on_host::<T>(&lat, &gauge, recon, &mut src, 0, &b_o, Some(&b_e), kappa);
    // x, r, r0, p, v, s, t, tmp.
    let mut vec: Vec<Vec<T>> = (0..8).map(|_| vec![T::ZERO; len]).collect();
    for k in [1, 2, 3] {
        vec[k].copy_from_slice(&src);
    }
    let bb: f64 = src.iter().map(|v| v.to_f64() * v.to_f64()).sum();
    let mut st = BiCgState::new(tol, 500);
    st.finish(Stage::Init, [0.0, 0.0, bb, 0.0]);
    let mut count = 0u32;
    let mut partials = vec![0.0f64; 8];
    let dims_u32 = dims.map(|d| d as u32);
    macro_rules! run {
        ($r:literal) => {{
            let null = std::ptr::null();
            let template = FusedIteration::<T, $r> {
                hop: Dslash {
                    out: std::ptr::null_mut(),
                    inp: null,
                    gauge: null,
                    x: null,
                    a: T::ONE,
                    t_boundary: T::from_f64(-1.0),
                    dims: dims_u32,
                    parity: 0,
                    halt: std::ptr::null(),
                    cut: 0,
                    sites: std::ptr::null(),
                },
                kappa2: T::from_f64(kappa * kappa),
                vec: [std::ptr::null_mut(); 8],
                n: (len / 2) as u32,
                state: std::ptr::null_mut(),
                partials: std::ptr::null_mut(),
                barrier: GridBarrier {
                    count: std::ptr::null_mut(),
                },
                phases: Phase::ALL.len() as u32,
                blocks: 0,
            };
            for _ in 0..500 {
                let mut vectors = vec.iter_mut();
                let mut f = template
                    .bind(FusedFields {
                        gauge: Span::of(&gauge),
                        vec: std::array::from_fn(|_| SpanMut::of(vectors.next().unwrap())),
                        state: SpanMut::of(std::slice::from_mut(&mut st)),
                        partials: SpanMut::of(&mut partials),
                        barrier: SpanMut::of(std::slice::from_mut(&mut count)),
                    })
                    .unwrap();
                run_on_host(&mut f, 1).unwrap();
                if st.status != RUNNING {
                    break;
                }
            }
        }};
    }
    match recon {
        Recon::R18 => run!(9),
        Recon::R12 => run!(6),
    }
    assert_eq!(st.status, CONVERGED, "{} {}: {st:?}", T::NAME, recon.name());
    // x_o = b_o + kappa H_oe x_e, then |b - D x| / |b| with the reference operator.
    let mut x_o = vec![T::ZERO; len];
    hopping_on_host::<T>(&lat, &gauge, recon, &mut x_o, 1, &vec[0], Some(&b_o), kappa);
    let mut x = SpinorField::random(dims, 0);
    x.data.fill(Complex64::new(f64::NAN, 0.0));
    unpack_parity::<T>(&lat, &vec[0], 0, &mut x.data);
    unpack_parity::<T>(&lat, &x_o, 1, &mut x.data);
    let dx = reference::wilson_dirac(&lat, &u, kappa, &x);
    let diff: Vec<Complex64> = b.data.iter().zip(&dx.data).map(|(a, c)| a - c).collect();
    (st.iterations, (norm2(&diff) / norm2(&b.data)).sqrt())
}

#[test]
fn emulated_fused_iterations_solve_the_wilson_system_f64() {
    for recon in [Recon::R18, Recon::R12] {
        let (iterations, res) = solve::<f64>(recon, 1e-10);
        assert!(
            iterations > 5,
            "{iterations} iterations: a test that cannot fail"
        );
        assert!(res < 1e-9, "{}: true residual {res:e}", recon.name());
    }
}

#[test]
fn emulated_fused_iterations_solve_the_wilson_system_f32() {
    for recon in [Recon::R18, Recon::R12] {
        let (_, res) = solve::<f32>(recon, 1e-5);
        assert!(res < 1e-4, "{}: true residual {res:e}", recon.name());
    }
}
