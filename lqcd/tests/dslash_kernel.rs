//! The GPU hopping-term kernel body, run on the CPU (the very code the GPU executes), against the
//! independent nalgebra reference: both parities, both link storages, f64 and f32, periodic and
//! antiperiodic t, a lattice whose half volume is not a whole number of tiles. Outputs are poisoned with
//! NaN first, and the padding must stay untouched.

use lattice_gpu_host::Element;
use lattice_gpu_kernels::complex::ComplexReal;
use lattice_gpu_kernels::wilson::{tile_index, TILE};
use lattice_gpu_lqcd::gauge::GaugeField;
use lattice_gpu_lqcd::geometry::Lattice;
use lattice_gpu_lqcd::gpu::{
    hopping_on_host, pack_gauge, pack_parity, parity_len, unpack_parity, Recon,
};
use lattice_gpu_lqcd::reference;
use lattice_gpu_lqcd::spinor::SpinorField;
use num_complex::Complex64;

fn check<T: Element + ComplexReal + Default + Unpin + lattice_gpu_lqcd::gpu::WilsonReal>(
    dims: [usize; 4],
    antiperiodic_t: bool,
    tol: f64,
) {
    let lat = Lattice::new(dims, antiperiodic_t).unwrap();
    let u = GaugeField::random(dims, 11);
    let psi = SpinorField::random(dims, 12);
    let x = SpinorField::random(dims, 13);
    let h = reference::hopping(&lat, &u, &psi);
    let a = -0.37;
    for recon in [Recon::R18, Recon::R12] {
        let gauge = pack_gauge::<T>(&lat, &u, recon);
        for parity in 0..2 {
            let inp = pack_parity::<T>(&lat, &psi.data, 1 - parity);
            let xp = pack_parity::<T>(&lat, &x.data, parity);
            let mut out = vec![T::from_f64(f64::NAN); 2 * parity_len(&lat)];
            hopping_on_host::<T>(&lat, &gauge, recon, &mut out, parity, &inp, Some(&xp), a);
            // Padding sites (beyond the half volume) are never written.
            for cb in lat.half_volume()..parity_len(&lat) / 12 {
                let at = tile_index(cb, 12);
                assert!(
                    out[2 * at].to_f64().is_nan(),
                    "padding site {cb} was written"
                );
            }
            let mut got = vec![Complex64::new(f64::NAN, 0.0); 12 * lat.volume()];
            unpack_parity::<T>(&lat, &out, parity, &mut got);
            let mut err: f64 = 0.0;
            let mut norm: f64 = 0.0;
            for n in (0..lat.volume()).filter(|&n| lat.parity(n) == parity) {
                for k in 0..12 {
                    let want = x.data[12 * n + k] + h.data[12 * n + k] * a;
                    err = err.max((got[12 * n + k] - want).norm());
                    norm = norm.max(want.norm());
                }
            }
            assert!(
                err <= tol * norm,
                "{dims:?} antiperiodic={antiperiodic_t} {} recon {} parity {parity}: max error {err:e} (scale {norm:e})",
                T::NAME,
                recon.name()
            );
        }
    }
}

#[test]
fn f64_kernel_body_matches_reference() {
    check::<f64>([4, 4, 4, 8], false, 1e-13);
    check::<f64>([4, 6, 2, 4], true, 1e-13);
}

#[test]
fn f32_kernel_body_matches_reference() {
    check::<f32>([4, 4, 4, 8], true, 1e-5);
}

#[test]
fn odd_tiling_is_padded() {
    // 2x2x2x4: 16 sites per parity, half a tile.
    let lat = Lattice::new([2, 2, 2, 4], false).unwrap();
    assert_eq!(parity_len(&lat), TILE * 12);
    check::<f64>([2, 2, 2, 4], true, 1e-13);
}
