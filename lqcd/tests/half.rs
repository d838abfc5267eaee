//! The 16-bit storages (IEEE binary16 or 16-bit fixed point, a norm per spinor site, f32 arithmetic;
//! `lattice_gpu_kernels::wilson::{Half, Fixed}`): the hopping term `x + a H psi` against the independent f64
//! reference on random fields, within the bound the crate docs state; a split lattice's blocks give
//! the whole lattice's bits; the GPU gives what the kernel body gives on the CPU, and its even-odd
//! operator stays within the bound too. Outputs are poisoned first (every site decodes to NaN).

use std::sync::Arc;

use lattice_gpu_host::{DeviceBuffer, Gpu};
use lattice_gpu_kernels::wilson::{Fixed, Half};
use lattice_gpu_lqcd::gauge::GaugeField;
use lattice_gpu_lqcd::geometry::Lattice;
use lattice_gpu_lqcd::gpu::{
    hopping_on_host, pack_gauge, pack_parity, parity_slots, unpack_parity, EvenOdd, Recon,
    WilsonGpu, WilsonStorage, FIXED_HOPPING_BOUND, HALF_HOPPING_BOUND,
};
use lattice_gpu_lqcd::reference;
use lattice_gpu_lqcd::spinor::SpinorField;
use lattice_gpu_testkit as common;
use num_complex::Complex64;

/// The relative error `|got - want| / |want|` (2-norms over the sites of `parity`) and the largest
/// error of one component against the largest component.
fn errors(lat: &Lattice, parity: usize, got: &[Complex64], want: &[Complex64]) -> (f64, f64) {
    let (mut d2, mut w2, mut dmax, mut wmax) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for n in (0..lat.volume()).filter(|&n| lat.parity(n) == parity) {
        for k in 0..12 {
            let (g, w) = (got[12 * n + k], want[12 * n + k]);
            let d = (g - w).norm();
            // A NaN (a site left poisoned) must fail the comparison.
            let d = if d.is_nan() { f64::INFINITY } else { d };
            d2 += d * d;
            w2 += w.norm_sqr();
            dmax = dmax.max(d);
            wmax = wmax.max(w.norm());
        }
    }
    ((d2 / w2).sqrt(), dmax / wmax)
}

/// `x + a H psi` on `parity`, from the f64 reference.
fn reference_hop(
    lat: &Lattice,
    u: &GaugeField,
    psi: &SpinorField,
    x: &SpinorField,
    a: f64,
) -> Vec<Complex64> {
    let h = reference::hopping(lat, u, psi);
    x.data.iter().zip(&h.data).map(|(x, h)| x + h * a).collect()
}

#[test]
fn the_16_bit_kernel_bodies_keep_their_stated_bounds() {
    body_bound::<Half>(HALF_HOPPING_BOUND);
    body_bound::<Fixed>(FIXED_HOPPING_BOUND);
}

fn body_bound<H: WilsonStorage>(bound: f64) {
    for (dims, antiperiodic) in [([4, 4, 4, 8], true), ([6, 2, 4, 4], false)] {
        let lat = Lattice::new(dims, antiperiodic).unwrap();
        let u = GaugeField::random(dims, 31);
        let psi = SpinorField::random(dims, 32);
        let x = SpinorField::random(dims, 33);
        let a = -0.37;
        let want = reference_hop(&lat, &u, &psi, &x, a);
        for recon in [Recon::R18, Recon::R12] {
            let gauge = pack_gauge::<H>(&lat, &u, recon);
            for parity in 0..2 {
                let inp = pack_parity::<H>(&lat, &psi.data, 1 - parity);
                let xp = pack_parity::<H>(&lat, &x.data, parity);
                let mut out = vec![H::POISON; 2 * parity_slots::<H>(&lat)];
                hopping_on_host::<H>(&lat, &gauge, recon, &mut out, parity, &inp, Some(&xp), a);
                let mut got = vec![Complex64::new(f64::NAN, 0.0); 12 * lat.volume()];
                unpack_parity::<H>(&lat, &out, parity, &mut got);
                let (rel, max) = errors(&lat, parity, &got, &want);
                eprintln!(
                    "{dims:?} r{} parity {parity}: relative {rel:e}, largest {max:e}",
                    recon.name()
                );
                assert!(
                    rel <= bound && max <= 4.0 * bound,
                    "{dims:?} recon {} parity {parity}: relative error {rel:e}, largest {max:e}, \
                     bound {bound:e}",
                    recon.name()
                );
                // 16 bits round: an error of zero would mean the values never went through them.
                assert!(rel > 1e-7, "no rounding at all: {rel:e}");
            }
        }
    }
}

/// The GPU's half-precision hopping term on one parity of `w`'s lattice, its output poisoned first.
fn gpu_hop<H: WilsonStorage>(
    gpu: &Arc<Gpu>,
    w: &WilsonGpu<H>,
    psi: &SpinorField,
    x: &SpinorField,
    a: f64,
    parity: usize,
) -> Vec<Complex64> {
    let inp = w.upload_parity(psi, 1 - parity).unwrap();
    let xp = w.upload_parity(x, parity).unwrap();
    let out = DeviceBuffer::from_host(gpu, &vec![H::POISON; 2 * w.storage_len()]).unwrap();
    w.hopping(&out, parity, &inp, Some(&xp), a, None).unwrap();
    let mut got = SpinorField::zeros(psi.dims);
    got.data.fill(Complex64::new(f64::NAN, 0.0));
    w.download_parity(&out, parity, &mut got).unwrap();
    got.data
}

#[test]
fn the_16_bit_hopping_terms_on_the_gpu_keep_their_bounds_and_follow_their_cpu_bodies() {
    let test = "the_16_bit_hopping_terms_on_the_gpu_keep_their_bounds_and_follow_their_cpu_bodies";
    let Some(gpu) = common::gpu(test) else { return };
    gpu_bound::<Half>(&gpu, HALF_HOPPING_BOUND);
    gpu_bound::<Fixed>(&gpu, FIXED_HOPPING_BOUND);
}

fn gpu_bound<H: WilsonStorage>(gpu: &Arc<Gpu>, bound: f64) {
    for (dims, antiperiodic) in [
        ([4, 4, 4, 8], true),
        ([6, 2, 4, 4], false),
        ([8, 8, 8, 8], false),
    ] {
        let lat = Lattice::new(dims, antiperiodic).unwrap();
        let u = GaugeField::random(dims, 41);
        let psi = SpinorField::random(dims, 42);
        let x = SpinorField::random(dims, 43);
        let a = 0.61;
        let want = reference_hop(&lat, &u, &psi, &x, a);
        for recon in [Recon::R18, Recon::R12] {
            let w = WilsonGpu::<H>::new(gpu, &lat, &u, 0.1, recon).unwrap();
            let gauge = pack_gauge::<H>(&lat, &u, recon);
            for parity in 0..2 {
                let got = gpu_hop(gpu, &w, &psi, &x, a, parity);
                let (rel, max) = errors(&lat, parity, &got, &want);
                assert!(
                    rel <= bound && max <= 4.0 * bound,
                    "{dims:?} recon {} parity {parity}: relative error {rel:e}, largest {max:e}",
                    recon.name()
                );
                // The CPU runs the same body, its multiply-adds fused as the GPU's (`mul_add`): they
                // agree far below a binary16 step (2^-11 of a site's largest).
                let inp = pack_parity::<H>(&lat, &psi.data, 1 - parity);
                let xp = pack_parity::<H>(&lat, &x.data, parity);
                let mut out = vec![H::POISON; 2 * parity_slots::<H>(&lat)];
                hopping_on_host::<H>(&lat, &gauge, recon, &mut out, parity, &inp, Some(&xp), a);
                let mut host = vec![Complex64::new(f64::NAN, 0.0); 12 * lat.volume()];
                unpack_parity::<H>(&lat, &out, parity, &mut host);
                let (rel, max) = errors(&lat, parity, &got, &host);
                assert!(
                    rel <= 1e-5 && max <= 2.0 / 32767.0,
                    "{dims:?} recon {} parity {parity}: GPU against its CPU body {rel:e}, largest {max:e}",
                    recon.name()
                );
            }
        }
    }
}

#[test]
fn a_split_16_bit_lattice_exchanges_norms_with_its_ghosts() {
    let Some(gpu) = common::gpu("a_split_16_bit_lattice_exchanges_norms_with_its_ghosts") else {
        return;
    };
    split_case::<Half>(&gpu);
    split_case::<Fixed>(&gpu);
}

fn split_case<H: WilsonStorage>(gpu: &Arc<Gpu>) {
    use lattice_gpu_host::comm::Solo;
    use lattice_gpu_host::split::{DeviceRanks, HostStaged};
    use lattice_gpu_lqcd::gpu::Block;
    // One rank cut along every axis it may be: each hop across an edge reads a ghost (its own far
    // layer, exchanged through the host), packed across z and y.
    let lat = Lattice::new([8, 4, 4, 8], true).unwrap();
    let u = GaugeField::random(lat.dims, 51);
    let psi = SpinorField::random(lat.dims, 52);
    let x = SpinorField::random(lat.dims, 53);
    for recon in [Recon::R18, Recon::R12] {
        let whole = WilsonGpu::<H>::new(gpu, &lat, &u, 0.1, recon).unwrap();
        for overlap in [false, true] {
            let ranks =
                Box::new(HostStaged(std::rc::Rc::new(Solo))) as Box<dyn DeviceRanks<H::Elem>>;
            let block = Block::new(lat, [1; 4], 0)
                .unwrap()
                .cutting(&[1, 2, 3])
                .unwrap();
            let split = WilsonGpu::<H>::split(gpu, block, &u, 0.1, recon, ranks, overlap).unwrap();
            for parity in 0..2 {
                let want = gpu_hop(gpu, &whole, &psi, &x, -0.4, parity);
                let got = gpu_hop(gpu, &split, &psi, &x, -0.4, parity);
                let (rel, max) = errors(&lat, parity, &got, &want);
                assert!(
                    rel <= 1e-5 && max <= 2.0 / 32767.0,
                    "recon {} overlap {overlap} parity {parity}: split against whole {rel:e}, \
                     largest {max:e}",
                    recon.name()
                );
            }
        }
    }
}

#[test]
fn the_16_bit_even_odd_operators_keep_their_bounds() {
    let Some(gpu) = common::gpu("the_16_bit_even_odd_operators_keep_their_bounds") else {
        return;
    };
    even_odd_case::<Half>(&gpu, HALF_HOPPING_BOUND);
    even_odd_case::<Fixed>(&gpu, FIXED_HOPPING_BOUND);
}

fn even_odd_case<H: WilsonStorage>(gpu: &Arc<Gpu>, bound: f64) {
    use lattice_gpu_host::solvers::bicgstab::DeviceOperator;
    let dims = [6, 4, 4, 8];
    let lat = Lattice::new(dims, true).unwrap();
    let u = GaugeField::random(dims, 61);
    let psi = SpinorField::random(dims, 62);
    let kappa = 0.12;
    let x_e: Vec<Complex64> = (0..lat.volume())
        .filter(|&n| lat.parity(n) == 0)
        .flat_map(|n| psi.data[12 * n..12 * n + 12].to_vec())
        .collect();
    let want_e = reference::m_hat(&lat, &u, kappa, &x_e);
    let mut want = vec![Complex64::new(0.0, 0.0); 12 * lat.volume()];
    for (e, n) in (0..lat.volume())
        .filter(|&n| lat.parity(n) == 0)
        .enumerate()
    {
        want[12 * n..12 * n + 12].copy_from_slice(&want_e[12 * e..12 * e + 12]);
    }
    for recon in [Recon::R18, Recon::R12] {
        let op = EvenOdd(WilsonGpu::<H>::new(gpu, &lat, &u, kappa, recon).unwrap());
        let inp = op.0.upload_parity(&psi, 0).unwrap();
        let out = DeviceBuffer::from_host(gpu, &vec![H::POISON; 2 * op.0.storage_len()]).unwrap();
        op.apply(&out, &inp, None).unwrap();
        let mut got = SpinorField::zeros(dims);
        got.data.fill(Complex64::new(f64::NAN, 0.0));
        op.0.download_parity(&out, 0, &mut got).unwrap();
        let (rel, max) = errors(&lat, 0, &got.data, &want);
        assert!(
            rel <= bound && max <= 4.0 * bound,
            "recon {}: M_hat in half precision, relative error {rel:e}, largest {max:e}",
            recon.name()
        );
    }
}
