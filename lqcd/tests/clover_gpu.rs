//! The Wilson-clover kernels against the CPU reference (`lattice_gpu_lqcd::clover`, f64): `M_hat`, the
//! source and reconstruction of the even-odd solve, `D x`, `c_sw = 0` against the Wilson kernels bit for
//! bit, a lattice split into blocks against the whole one bit for bit, and the bounds checks. The kernel
//! bodies run on the CPU first (no GPU needed), then the same checks and a full solve on the GPU.
//!
//! Lattices are not powers of two, so tiles are partly padding. Outputs are poisoned with NaN first.
//!
//! Tolerances (max difference over the largest reference entry): each output of `M_hat` is a sum along
//! about 50 rounded operations (two hopping terms of 8 hops of 3-term link products, two 6-term clover
//! rows) of terms up to a few times the output, every input rounded once to the precision; with the unit
//! roundoff `u` that bounds the difference near `50 * 3 * u`: 9e-6 in f32 (`u = 6e-8`), 2e-14 in f64
//! (`u = 1.1e-16`). The tests allow 1e-5 and 1e-12 (f64 also rounds the LU inverse's hermitian part). A
//! wrong sign, block or conjugation moves entries by `kappa c_sw |F|`, about 0.1.
//!
//! Without a GPU each GPU test prints `SKIPPED (no GPU): ...` and passes; `LATTICE_GPU_REQUIRE_GPU=1`
//! turns the skip into a failure.

use std::io::Write;
use std::sync::Arc;

use lattice_gpu_host::comm::Solo;
use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::solvers::bicgstab::{
    BiCgStab, DeviceOperator, Fusion, OverheadHiding, SolveOptions, SolveStatus,
};
use lattice_gpu_host::solvers::reliable::{Method, MixedBiCgStab, MixedOptions};
use lattice_gpu_host::split::{DeviceRanks, HostStaged};
use lattice_gpu_host::{DeviceBuffer, Gpu};
use lattice_gpu_kernels::bind::SpanError;
use lattice_gpu_kernels::wilson::{CloverMode, Fixed, Half};
use lattice_gpu_lqcd::clover::{
    apply_clover_inverse_parity, clover_dirac, clover_m_hat, clover_true_residual, solve_clover_eo,
    CloverField,
};
use lattice_gpu_lqcd::clover_gpu::{
    apply_clover_on_host, clover_hopping_on_block, clover_hopping_on_host, pack_clover,
    pack_clover_block, solve_clover_mixed_with, solve_clover_with, CloverEvenOdd, CloverGpu,
    CloverPart, CloverReal, CloverStorage, FIXED_CLOVER_BOUND, HALF_CLOVER_BOUND,
};
use lattice_gpu_lqcd::gauge::GaugeField;
use lattice_gpu_lqcd::geometry::Lattice;
use lattice_gpu_lqcd::gpu::{
    hopping_on_host, pack_gauge, pack_parity, parity_len, parity_slots, unpack_parity, Block,
    EvenOdd, Recon, WilsonGpu, HOPPING_BLOCK, HOPPING_BLOCKS,
};
use lattice_gpu_lqcd::reference::{hopping_eo, m_hat};
use lattice_gpu_lqcd::spinor::{axpy, SpinorField};
use lattice_gpu_lqcd::Error;
use num_complex::Complex64;

use lattice_gpu_testkit::gpu;

const KAPPA: f64 = 0.12;
const CSW: f64 = 1.1;
/// Not powers of two, half volumes not whole tiles (360 and 240 sites a parity).
const CASES: [([usize; 4], bool); 2] = [([6, 2, 10, 6], true), ([10, 6, 2, 4], false)];

fn tolerance<T: CloverReal>() -> f64 {
    if T::NAME == "f32" {
        1e-5
    } else {
        1e-12
    }
}

fn max_rel_diff(a: &[Complex64], b: &[Complex64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().map(|z| z.norm()).fold(0.0, f64::max);
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).norm())
        .fold(
            0.0,
            |m, d| if d.is_nan() { f64::INFINITY } else { m.max(d) },
        )
        / scale
}

struct Case {
    lat: Lattice,
    u: GaugeField,
    clover: CloverField,
    psi: SpinorField,
}

fn case(dims: [usize; 4], antiperiodic: bool, csw: f64, seed: u64) -> Case {
    let lat = Lattice::new(dims, antiperiodic).unwrap();
    let u = GaugeField::random(dims, seed);
    let clover = CloverField::new(&u, csw, KAPPA).unwrap();
    let psi = SpinorField::random(dims, seed + 1);
    Case {
        lat,
        u,
        clover,
        psi,
    }
}

/// The checkerboard-ordered parity `parity` of a tiled field.
fn parity_of<T: CloverStorage>(lat: &Lattice, data: &[T::Elem], parity: usize) -> Vec<Complex64> {
    let mut full = SpinorField::zeros(lat.dims);
    unpack_parity::<T>(lat, data, parity, &mut full.data);
    let (e, o) = full.to_eo();
    if parity == 0 {
        e
    } else {
        o
    }
}

fn poisoned<T: CloverStorage>(lat: &Lattice) -> Vec<T::Elem> {
    vec![T::POISON; 2 * parity_slots::<T>(lat)]
}

/// `M_hat` of the even part of `c.psi` by the kernel bodies on the CPU: the tiled output.
fn m_hat_on_host<T: CloverStorage>(c: &Case, recon: Recon) -> Vec<T::Elem> {
    let lat = &c.lat;
    let gauge = pack_gauge::<T>(lat, &c.u, recon);
    let x_e = pack_parity::<T>(lat, &c.psi.data, 0);
    let a_even = pack_clover::<T>(lat, &c.clover, 0, CloverPart::A);
    let inv_odd = pack_clover::<T>(lat, &c.clover, 1, CloverPart::Inverse);
    let mut tmp = poisoned::<T>(lat);
    let inverse = CloverMode::Inverse;
    clover_hopping_on_host::<T>(
        lat, &gauge, recon, &inv_odd, &mut tmp, 1, &x_e, None, 1.0, inverse,
    )
    .unwrap();
    let mut out = poisoned::<T>(lat);
    let k2 = KAPPA * KAPPA;
    let diagonal = CloverMode::Diagonal;
    clover_hopping_on_host::<T>(
        lat,
        &gauge,
        recon,
        &a_even,
        &mut out,
        0,
        &tmp,
        Some(&x_e),
        -k2,
        diagonal,
    )
    .unwrap();
    out
}

fn host_m_hat_case<T: CloverReal>() {
    for (dims, antiperiodic) in CASES {
        let c = case(dims, antiperiodic, CSW, 11);
        let (x_e, _) = c.psi.to_eo();
        let want = clover_m_hat(&c.lat, &c.u, &c.clover, &x_e);
        // The clover term must matter here, or agreeing with the reference would say nothing about it.
        let wilson = m_hat(&c.lat, &c.u, KAPPA, &x_e);
        let clover_part = max_rel_diff(&wilson, &want);
        assert!(
            clover_part > 1e-2,
            "{dims:?}: clover term only {clover_part:e}"
        );
        for recon in [Recon::R18, Recon::R12] {
            let got = parity_of::<T>(&c.lat, &m_hat_on_host::<T>(&c, recon), 0);
            let d = max_rel_diff(&got, &want);
            assert!(
                d <= tolerance::<T>(),
                "{dims:?} {} r{}: M_hat off by {d:e}",
                T::NAME,
                recon.name()
            );
        }
    }
}

#[test]
fn kernel_bodies_give_the_clover_m_hat_of_the_reference() {
    host_m_hat_case::<f64>();
    host_m_hat_case::<f32>();
}

fn bits<T: CloverReal>(v: &[T]) -> Vec<u64> {
    v.iter().map(|x| x.to_f64().to_bits()).collect()
}

fn host_csw_zero_case<T: CloverReal>() {
    for (dims, antiperiodic) in CASES {
        let c = case(dims, antiperiodic, 0.0, 13);
        let lat = &c.lat;
        for recon in [Recon::R18, Recon::R12] {
            let gauge = pack_gauge::<T>(lat, &c.u, recon);
            let x_e = pack_parity::<T>(lat, &c.psi.data, 0);
            let mut tmp = poisoned::<T>(lat);
            hopping_on_host::<T>(lat, &gauge, recon, &mut tmp, 1, &x_e, None, 1.0);
            let mut want = poisoned::<T>(lat);
            let k2 = KAPPA * KAPPA;
            hopping_on_host::<T>(lat, &gauge, recon, &mut want, 0, &tmp, Some(&x_e), -k2);
            let got = m_hat_on_host::<T>(&c, recon);
            assert!(
                bits(&got) == bits(&want),
                "{dims:?} {} r{}: c_sw = 0 is not the Wilson M_hat bit for bit",
                T::NAME,
                recon.name()
            );
        }
    }
}

#[test]
fn csw_zero_kernel_bodies_give_the_wilson_m_hat_bit_for_bit() {
    host_csw_zero_case::<f64>();
    host_csw_zero_case::<f32>();
}

/// `|got - want| / |want|` in the 2-norm, and the largest component's error over the largest
/// component: a NaN (a site left poisoned) counts as infinite.
fn half_errors(got: &[Complex64], want: &[Complex64]) -> (f64, f64) {
    assert_eq!(got.len(), want.len());
    let (mut d2, mut w2) = (0.0f64, 0.0f64);
    for (g, w) in got.iter().zip(want) {
        let d = (g - w).norm();
        d2 += if d.is_nan() { f64::INFINITY } else { d * d };
        w2 += w.norm_sqr();
    }
    ((d2 / w2).sqrt(), max_rel_diff(got, want))
}

/// The 16-bit storages' `M_hat` (both clover modes) and the source's `A_oo^{-1} b_o` (the clover term
/// alone) by the kernel bodies on the CPU, against the f64 reference: within [`HALF_CLOVER_BOUND`] in
/// binary16 and [`FIXED_CLOVER_BOUND`] in fixed point, and rounded at all.
#[test]
fn sixteen_bit_clover_kernel_bodies_keep_their_stated_bounds() {
    body_bound::<Half>(HALF_CLOVER_BOUND);
    body_bound::<Fixed>(FIXED_CLOVER_BOUND);
}

/// A NaN in one site's clover entries reaches that site's output in fixed point (where the site's
/// entries are scaled by their largest, which must not drop it) and in binary16, and no other site's.
#[test]
fn a_nan_clover_entry_reaches_its_sites_output_in_16_bits() {
    nan_entry_case::<Half>();
    nan_entry_case::<Fixed>();
}

fn nan_entry_case<H: CloverStorage>() {
    let (dims, antiperiodic) = CASES[0];
    let mut c = case(dims, antiperiodic, CSW, 17);
    let bad = c.lat.site_of_eo(c.lat.half_volume() + 5);
    c.clover.inverse[bad][1][(2, 4)].im = f64::NAN;
    let inv_odd = pack_clover::<H>(&c.lat, &c.clover, 1, CloverPart::Inverse);
    let x = pack_parity::<H>(&c.lat, &c.psi.data, 1);
    let mut out = poisoned::<H>(&c.lat);
    apply_clover_on_host::<H>(c.lat.half_volume(), &inv_odd, &mut out, &x).unwrap();
    let got = parity_of::<H>(&c.lat, &out, 1);
    for (e, site) in got.chunks(12).enumerate() {
        let nan = site.iter().any(|z| z.re.is_nan() || z.im.is_nan());
        assert_eq!(nan, e == 5, "{}: site {e} NaN {nan}", H::PRECISION);
    }
}

fn body_bound<H: CloverStorage>(bound: f64) {
    for (dims, antiperiodic) in CASES {
        let c = case(dims, antiperiodic, CSW, 11);
        let (x_e, x_o) = c.psi.to_eo();
        let want = clover_m_hat(&c.lat, &c.u, &c.clover, &x_e);
        for recon in [Recon::R18, Recon::R12] {
            let got = parity_of::<H>(&c.lat, &m_hat_on_host::<H>(&c, recon), 0);
            let (rel, max) = half_errors(&got, &want);
            let name = H::PRECISION;
            eprintln!(
                "{dims:?} r{}: {name} M_hat relative {rel:e}, largest {max:e}",
                recon.name()
            );
            assert!(
                rel <= bound && max <= 4.0 * bound && rel > 1e-7,
                "{dims:?} r{}: {name} M_hat relative error {rel:e}, largest {max:e}, bound {bound:e}",
                recon.name()
            );
        }
        let inv_odd = pack_clover::<H>(&c.lat, &c.clover, 1, CloverPart::Inverse);
        let x = pack_parity::<H>(&c.lat, &c.psi.data, 1);
        let mut out = poisoned::<H>(&c.lat);
        apply_clover_on_host::<H>(c.lat.half_volume(), &inv_odd, &mut out, &x).unwrap();
        let got = parity_of::<H>(&c.lat, &out, 1);
        let (rel, max) = half_errors(&got, &apply_clover_inverse_parity(&c.clover, 1, &x_o));
        let name = H::PRECISION;
        eprintln!("{dims:?}: {name} A_oo^-1 relative {rel:e}, largest {max:e}");
        assert!(
            rel <= bound && max <= 4.0 * bound && rel > 1e-7,
            "{dims:?}: {name} A_oo^-1 x relative error {rel:e}, largest {max:e}"
        );
    }
}

/// The source, the reconstruction and `D x` of the even-odd solve by the kernel bodies, against the CPU
/// solve's: `b_hat`, its odd sites and the true residual.
#[test]
fn kernel_bodies_prepare_the_source_and_reconstruct_the_cpu_solution() {
    let (dims, antiperiodic) = CASES[0];
    let c = case(dims, antiperiodic, CSW, 17);
    let (lat, b) = (&c.lat, &c.psi);
    let (x, _, res) = solve_clover_eo(lat, &c.u, &c.clover, b, 1e-12, 1000).unwrap();
    assert!(res <= 1e-11, "CPU solve residual {res:e}");
    let recon = Recon::R12;
    let gauge = pack_gauge::<f64>(lat, &c.u, recon);
    let (b_e, b_o) = (
        pack_parity::<f64>(lat, &b.data, 0),
        pack_parity::<f64>(lat, &b.data, 1),
    );
    let (x_e, x_o) = (
        pack_parity::<f64>(lat, &x.data, 0),
        pack_parity::<f64>(lat, &x.data, 1),
    );
    let a = [0, 1].map(|p| pack_clover::<f64>(lat, &c.clover, p, CloverPart::A));
    let inv_odd = pack_clover::<f64>(lat, &c.clover, 1, CloverPart::Inverse);
    // b_hat = b_e + kappa H_eo A_oo^{-1} b_o
    let mut t = poisoned::<f64>(lat);
    apply_clover_on_host::<f64>(lat.half_volume(), &inv_odd, &mut t, &b_o).unwrap();
    let mut src = poisoned::<f64>(lat);
    hopping_on_host::<f64>(lat, &gauge, recon, &mut src, 0, &t, Some(&b_e), KAPPA);
    let (mut want, b_odd) = b.to_eo();
    let a_inv_b_o = apply_clover_inverse_parity(&c.clover, 1, &b_odd);
    let kappa = Complex64::new(KAPPA, 0.0);
    axpy(kappa, &hopping_eo(lat, &c.u, &a_inv_b_o), &mut want);
    let d = max_rel_diff(&parity_of::<f64>(lat, &src, 0), &want);
    assert!(d <= 1e-12, "b_hat off by {d:e}");
    // x_o = A_oo^{-1} (b_o + kappa H_oe x_e)
    let mut got_o = poisoned::<f64>(lat);
    let inverse = CloverMode::Inverse;
    clover_hopping_on_host::<f64>(
        lat,
        &gauge,
        recon,
        &inv_odd,
        &mut got_o,
        1,
        &x_e,
        Some(&b_o),
        KAPPA,
        inverse,
    )
    .unwrap();
    let d = max_rel_diff(&parity_of::<f64>(lat, &got_o, 1), &x.to_eo().1);
    assert!(d <= 1e-12, "x_o off by {d:e}");
    // D x = A x - kappa H x, parity by parity.
    let dx = clover_dirac(lat, &c.u, &c.clover, &x);
    let (dx_e, dx_o) = dx.to_eo();
    for (p, want, x_p, x_other) in [(0, &dx_e, &x_e, &x_o), (1, &dx_o, &x_o, &x_e)] {
        let mut out = poisoned::<f64>(lat);
        let diagonal = CloverMode::Diagonal;
        clover_hopping_on_host::<f64>(
            lat,
            &gauge,
            recon,
            &a[p],
            &mut out,
            p,
            x_other,
            Some(x_p),
            -KAPPA,
            diagonal,
        )
        .unwrap();
        let d = max_rel_diff(&parity_of::<f64>(lat, &out, p), want);
        assert!(d <= 1e-12, "D x on parity {p} off by {d:e}");
    }
}

/// Rank grids `[1, py, pz, pt]` and the axes cut besides those with more than one rank.
const GRIDS: [([usize; 4], &[usize]); 6] = [
    ([1, 1, 1, 1], &[1, 2, 3]),
    ([1, 1, 1, 2], &[]),
    ([1, 1, 3, 1], &[]),
    ([1, 2, 1, 1], &[2]),
    ([1, 2, 3, 1], &[]),
    ([1, 1, 3, 2], &[]),
];

#[test]
fn blocks_of_a_split_give_the_whole_lattices_clover_bits() {
    // t 10 over 2 ranks is 6 + 4; z 6 over 3 is 2 each; a t layer of a block is 96 or 32 sites.
    let dims = [8, 4, 6, 10];
    let c = case(dims, true, CSW, 23);
    let x = SpinorField::random(dims, 24);
    let global = c.lat;
    let a = -0.37;
    for recon in [Recon::R18, Recon::R12] {
        let gauge = pack_gauge::<f64>(&global, &c.u, recon);
        for (parity, mode) in [
            (1, CloverMode::Inverse),
            (0, CloverMode::Diagonal),
            (1, CloverMode::Diagonal),
        ] {
            let part = match mode {
                CloverMode::Inverse => CloverPart::Inverse,
                CloverMode::Diagonal => CloverPart::A,
            };
            let field = pack_clover::<f64>(&global, &c.clover, parity, part);
            let inp = pack_parity::<f64>(&global, &c.psi.data, 1 - parity);
            let xp = pack_parity::<f64>(&global, &x.data, parity);
            let mut whole = poisoned::<f64>(&global);
            clover_hopping_on_host::<f64>(
                &global,
                &gauge,
                recon,
                &field,
                &mut whole,
                parity,
                &inp,
                Some(&xp),
                a,
                mode,
            )
            .unwrap();
            let mut want = vec![Complex64::new(f64::NAN, 0.0); 12 * global.volume()];
            unpack_parity::<f64>(&global, &whole, parity, &mut want);
            for (grid, cuts) in GRIDS {
                let ranks: usize = grid.iter().product();
                // Each block in one launch, and overlapped: the inner then the outer sites.
                let runs = (0..ranks).flat_map(|r| [(r, false), (r, true)]);
                for (r, overlap) in runs {
                    let block = Block::new(global, grid, r).unwrap().cutting(cuts).unwrap();
                    let local = block.local();
                    let n = 2 * parity_len(&local);
                    let inp = block.pack_parity::<f64>(&c.psi.data, 1 - parity);
                    let xp = &block.pack_parity::<f64>(&x.data, parity)[..n];
                    let gauge = block.pack_gauge::<f64>(&c.u, recon);
                    let field = pack_clover_block::<f64>(&block, &c.clover, parity, part);
                    let mut out = vec![f64::NAN; n];
                    clover_hopping_on_block::<f64>(
                        &block,
                        &gauge,
                        recon,
                        &field,
                        &mut out,
                        parity,
                        &inp,
                        Some(xp),
                        a,
                        mode,
                        overlap,
                    )
                    .unwrap();
                    let mut got = vec![Complex64::new(f64::NAN, 0.0); 12 * global.volume()];
                    block.unpack_parity::<f64>(&out, parity, &mut got);
                    for site in (0..local.volume()).filter(|&s| local.parity(s) == parity) {
                        let lc = local.coords(site);
                        let g = global.index(std::array::from_fn(|k| block.origin[k] + lc[k]));
                        for k in 0..12 {
                            let (w, h) = (want[12 * g + k], got[12 * g + k]);
                            assert!(
                                w.re.to_bits() == h.re.to_bits()
                                    && w.im.to_bits() == h.im.to_bits(),
                                "recon {}, {mode:?} on parity {parity}, grid {grid:?} cutting \
                                 {cuts:?}, rank {r} (overlap {overlap}), site {site} component \
                                 {k}: {h} vs {w}",
                                recon.name(),
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Short fields and a missing `x` are errors naming the argument, never a panic or a wild read.
#[test]
fn binding_refuses_short_clover_fields_and_a_missing_addend() {
    let c = case([6, 2, 10, 6], false, CSW, 29);
    let lat = &c.lat;
    let recon = Recon::R18;
    let gauge = pack_gauge::<f64>(lat, &c.u, recon);
    let inp = pack_parity::<f64>(lat, &c.psi.data, 1);
    let field = pack_clover::<f64>(lat, &c.clover, 0, CloverPart::A);
    let mut out = poisoned::<f64>(lat);
    let short = &field[..field.len() - 2];
    let diagonal = CloverMode::Diagonal;
    let x = inp.clone();
    let e = clover_hopping_on_host::<f64>(
        lat,
        &gauge,
        recon,
        short,
        &mut out,
        0,
        &inp,
        Some(&x),
        1.0,
        diagonal,
    )
    .unwrap_err();
    let short_clover = |e: &Error| {
        matches!(e, Error::Host(h) if h.to_string().contains("`clover`")
            && h.to_string().contains("allocate it"))
    };
    assert!(short_clover(&e), "{e}");
    let e = clover_hopping_on_host::<f64>(
        lat, &gauge, recon, &field, &mut out, 0, &inp, None, 1.0, diagonal,
    )
    .unwrap_err();
    assert!(e.to_string().contains("`x`"), "{e}");
    let e = apply_clover_on_host::<f64>(lat.half_volume(), short, &mut out, &x).unwrap_err();
    assert!(short_clover(&e), "{e}");
    // Nothing was written by the refused calls.
    assert!(out.iter().all(|v| v.is_nan()));
    let missing = SpanError::Short {
        argument: "x",
        needs: 1,
        has: 0,
    };
    assert!(missing.to_string().contains("allocate it"));
}

// ---------------------------------------------------------------------------------------------------
// On the GPU.

fn gpu_m_hat_case<T: CloverReal>(gpu: &Arc<Gpu>) {
    for (dims, antiperiodic) in CASES {
        let c = case(dims, antiperiodic, CSW, 31);
        let (x_e, _) = c.psi.to_eo();
        let want = clover_m_hat(&c.lat, &c.u, &c.clover, &x_e);
        for recon in [Recon::R18, Recon::R12] {
            let op =
                CloverEvenOdd(CloverGpu::<T>::new(gpu, &c.lat, &c.u, &c.clover, recon).unwrap());
            let w = op.0.wilson();
            let inp = w.upload_parity(&c.psi, 0).unwrap();
            let out = DeviceBuffer::from_host(gpu, &poisoned::<T>(&c.lat)).unwrap();
            op.apply(&out, &inp, None).unwrap();
            let data = out.download().unwrap();
            // The same operations in the same order as the kernel bodies on the CPU. The PTX rounds every
            // product and sum (`mul.rn`, `add.rn`: nothing to fuse), so the bits should agree; the
            // check allows rounding (as the Wilson kernel's does) and says whether they did.
            let host = m_hat_on_host::<T>(&c, recon);
            let same = bits(&data) == bits(&host);
            let scale = host.iter().fold(0.0f64, |m, v| m.max(v.to_f64().abs()));
            let off = data
                .iter()
                .zip(&host)
                .map(|(g, h)| (g.to_f64() - h.to_f64()).abs())
                .fold(0.0f64, |m, d| if d.is_nan() { m } else { m.max(d) });
            assert!(
                off <= tolerance::<T>() * scale,
                "{dims:?} {} r{}: GPU M_hat off the kernel bodies' CPU run by {off:e}",
                T::NAME,
                recon.name()
            );
            let _ = writeln!(
                std::io::stderr(),
                "{dims:?} {} r{}: GPU M_hat {} the CPU run of the kernel bodies",
                T::NAME,
                recon.name(),
                if same {
                    "has the bits of"
                } else {
                    "differs in rounding from"
                }
            );
            let got = parity_of::<T>(&c.lat, &data, 0);
            let d = max_rel_diff(&got, &want);
            assert!(
                d <= tolerance::<T>(),
                "{dims:?} {} r{}: GPU M_hat off by {d:e}",
                T::NAME,
                recon.name()
            );
            let per_site = 2 * (1320 + 504);
            assert_eq!(op.flops(), per_site * c.lat.half_volume() as u64);
        }
    }
}

#[test]
fn gpu_clover_m_hat_matches_the_cpu_reference() {
    let Some(gpu) = gpu("gpu_clover_m_hat_matches_the_cpu_reference") else {
        return;
    };
    gpu_m_hat_case::<f64>(&gpu);
    gpu_m_hat_case::<f32>(&gpu);
}

/// The 16-bit storages' `M_hat` on the GPU, its output poisoned first: within its bound
/// ([`HALF_CLOVER_BOUND`], [`FIXED_CLOVER_BOUND`]) of the f64 reference and far below a 16-bit step
/// off its kernel bodies' CPU run; one rank cutting its own axes (exchanges through the host, the norms
/// with the ghosts) gives the whole lattice's bits.
#[test]
fn gpu_16_bit_clover_keeps_the_bound_follows_its_cpu_body_and_splits() {
    let test = "gpu_16_bit_clover_keeps_the_bound_follows_its_cpu_body_and_splits";
    let Some(gpu) = gpu(test) else {
        return;
    };
    gpu_16_bit_case::<Half>(&gpu, HALF_CLOVER_BOUND);
    gpu_16_bit_case::<Fixed>(&gpu, FIXED_CLOVER_BOUND);
}

fn gpu_16_bit_case<H: CloverStorage<Elem: PartialEq>>(gpu: &Arc<Gpu>, bound: f64) {
    let m_hat_of = |op: &CloverEvenOdd<H>, psi: &SpinorField| {
        let w = op.0.wilson();
        let inp = w.upload_parity(psi, 0).unwrap();
        let out = DeviceBuffer::from_host(gpu, &vec![H::POISON; 2 * w.storage_len()]).unwrap();
        op.apply(&out, &inp, None).unwrap();
        out.download().unwrap()
    };
    for (dims, antiperiodic) in CASES {
        let c = case(dims, antiperiodic, CSW, 31);
        let want = clover_m_hat(&c.lat, &c.u, &c.clover, &c.psi.to_eo().0);
        for recon in [Recon::R18, Recon::R12] {
            let op = CloverGpu::<H>::new(gpu, &c.lat, &c.u, &c.clover, recon).unwrap();
            let data = m_hat_of(&CloverEvenOdd(op), &c.psi);
            let got = parity_of::<H>(&c.lat, &data, 0);
            let (rel, max) = half_errors(&got, &want);
            assert!(
                rel <= bound && max <= 4.0 * bound,
                "{dims:?} r{}: GPU {} M_hat relative error {rel:e}, largest {max:e}",
                recon.name(),
                H::PRECISION
            );
            let host = parity_of::<H>(&c.lat, &m_hat_on_host::<H>(&c, recon), 0);
            let (rel, max) = half_errors(&got, &host);
            assert!(
                rel <= 1e-5 && max <= 2.0 / 32767.0,
                "{dims:?} r{}: GPU {} M_hat against its CPU body {rel:e}, largest {max:e}",
                recon.name(),
                H::PRECISION
            );
        }
    }
    let c = case(SPLIT_DIMS, true, CSW, 43);
    for recon in [Recon::R18, Recon::R12] {
        let whole = CloverGpu::<H>::new(gpu, &c.lat, &c.u, &c.clover, recon).unwrap();
        let n = 2 * parity_slots::<H>(&c.lat);
        let want = m_hat_of(&CloverEvenOdd(whole), &c.psi);
        for cuts in SPLIT_CUTS {
            let block = Block::new(c.lat, [1; 4], 0).unwrap().cutting(cuts).unwrap();
            let split =
                CloverGpu::<H>::split(gpu, block, &c.u, &c.clover, recon, host_ranks(), true)
                    .unwrap();
            let got = m_hat_of(&CloverEvenOdd(split), &c.psi);
            assert!(
                got[..n] == want[..n],
                "r{} cutting {cuts:?}: the split {} M_hat differs from the whole lattice's",
                recon.name(),
                H::PRECISION
            );
        }
    }
}

fn gpu_csw_zero_case<T: CloverReal>(gpu: &Arc<Gpu>) {
    for (dims, antiperiodic) in CASES {
        let c = case(dims, antiperiodic, 0.0, 37);
        for recon in [Recon::R18, Recon::R12] {
            let clover =
                CloverEvenOdd(CloverGpu::<T>::new(gpu, &c.lat, &c.u, &c.clover, recon).unwrap());
            let wilson = EvenOdd(WilsonGpu::<T>::new(gpu, &c.lat, &c.u, KAPPA, recon).unwrap());
            let run = |op: &dyn DeviceOperator<T>| {
                let inp = clover.0.wilson().upload_parity(&c.psi, 0).unwrap();
                let out = DeviceBuffer::from_host(gpu, &poisoned::<T>(&c.lat)).unwrap();
                op.apply(&out, &inp, None).unwrap();
                bits(&out.download().unwrap())
            };
            assert!(
                run(&clover) == run(&wilson),
                "{dims:?} {} r{}: c_sw = 0 is not the Wilson M_hat bit for bit",
                T::NAME,
                recon.name()
            );
        }
    }
}

#[test]
fn gpu_csw_zero_is_the_wilson_even_odd_operator_bit_for_bit() {
    let Some(gpu) = gpu("gpu_csw_zero_is_the_wilson_even_odd_operator_bit_for_bit") else {
        return;
    };
    gpu_csw_zero_case::<f64>(&gpu);
    gpu_csw_zero_case::<f32>(&gpu);
    // The GPU holds no A_ee^{-1}: asking for it is an error naming the fix.
    let c = case([6, 2, 10, 6], false, CSW, 41);
    let op = CloverGpu::<f64>::new(&gpu, &c.lat, &c.u, &c.clover, Recon::R12).unwrap();
    let buf = op.wilson().parity_buffer().unwrap();
    let out = op.wilson().parity_buffer().unwrap();
    let e = op
        .clover_hopping(&out, 0, &buf, None, 1.0, CloverMode::Inverse, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("odd sites"), "{e}");
}

/// The clover kernels' block, tuned through the one tuner: one of the sizes it tries, from the cache the
/// second time, and `M_hat` the same bits as with the fixed launch.
#[test]
fn gpu_tuned_clover_block_changes_no_bit() {
    let Some(gpu) = gpu("gpu_tuned_clover_block_changes_no_bit") else {
        return;
    };
    let c = case([8, 8, 8, 16], true, CSW, 59);
    let mut op =
        CloverEvenOdd(CloverGpu::<f32>::new(&gpu, &c.lat, &c.u, &c.clover, Recon::R12).unwrap());
    let inp = op.0.wilson().upload_parity(&c.psi, 0).unwrap();
    let m_hat = |op: &CloverEvenOdd<f32>| {
        let out = DeviceBuffer::from_host(&gpu, &poisoned::<f32>(&c.lat)).unwrap();
        op.apply(&out, &inp, None).unwrap();
        bits(&out.download().unwrap())
    };
    assert_eq!(op.0.clover_block(), HOPPING_BLOCK);
    let fixed = m_hat(&op);
    let mut cache = TuneCache::in_memory();
    let t = op.0.tune_block(&mut cache, false).unwrap().unwrap();
    assert!(
        !t.cached && t.calls > 0 && HOPPING_BLOCKS.contains(&op.0.clover_block()),
        "{t:?}"
    );
    assert!(
        m_hat(&op) == fixed,
        "blocks of {} threads changed M_hat",
        op.0.clover_block()
    );
    let again = op.0.tune_block(&mut cache, false).unwrap().unwrap();
    assert!(again.cached && again.calls == 0, "{again:?}");
    let e = op.0.set_clover_block(48).unwrap_err().to_string();
    assert!(e.contains("multiple of 32"), "{e}");
}

/// The lattice of the GPU split tests: a t layer of 64 sites (whole tiles), every axis at least 4.
const SPLIT_DIMS: [usize; 4] = [8, 4, 4, 6];
/// The axes the GPU split tests cut over one rank.
const SPLIT_CUTS: [&[usize]; 3] = [&[3], &[2], &[1, 2, 3]];

/// The GPU split tests' blocks can be built (checked without a GPU too, so that the GPU run cannot fail
/// on its setup).
#[test]
fn the_gpu_split_tests_blocks_can_be_built() {
    let lat = Lattice::new(SPLIT_DIMS, true).unwrap();
    for cuts in SPLIT_CUTS {
        let block = Block::new(lat, [1; 4], 0).unwrap().cutting(cuts).unwrap();
        assert_eq!(block.size, SPLIT_DIMS);
    }
}

fn host_ranks<E: lattice_gpu_host::comm::Wire + lattice_gpu_host::Plain>() -> Box<dyn DeviceRanks<E>>
{
    Box::new(HostStaged(std::rc::Rc::new(Solo)))
}

/// One rank cutting its own axes (every exchange to itself, through host memory): `M_hat`, the
/// reconstruction and `D x` give the unsplit operator's bits.
#[test]
fn gpu_split_clover_gives_the_whole_lattices_bits() {
    let Some(gpu) = gpu("gpu_split_clover_gives_the_whole_lattices_bits") else {
        return;
    };
    let dims = SPLIT_DIMS;
    let c = case(dims, true, CSW, 43);
    let x = SpinorField::random(dims, 44);
    for recon in [Recon::R18, Recon::R12] {
        let whole = CloverGpu::<f64>::new(&gpu, &c.lat, &c.u, &c.clover, recon).unwrap();
        let outputs = |op: &CloverGpu<f64>| {
            let w = op.wilson();
            let (p0, p1) = (
                w.upload_parity(&c.psi, 0).unwrap(),
                w.upload_parity(&c.psi, 1),
            );
            let (x0, p1) = (w.upload_parity(&x, 0).unwrap(), p1.unwrap());
            let m = w.parity_buffer().unwrap();
            let n = parity_len(w.lattice());
            // M_hat, as `CloverEvenOdd::apply` queues it.
            let tmp = w.parity_buffer().unwrap();
            let k2 = KAPPA * KAPPA;
            op.clover_hopping(&tmp, 1, &p0, None, 1.0, CloverMode::Inverse, None)
                .unwrap();
            op.clover_hopping(&m, 0, &tmp, Some(&p0), -k2, CloverMode::Diagonal, None)
                .unwrap();
            let r = op.reconstruct(&x0, &p1).unwrap();
            let d = w.parity_buffer().unwrap();
            op.dirac_parity(&d, 1, &p1, &x0).unwrap();
            [m, r, d].map(|b| bits(&b.download().unwrap()[..2 * n]))
        };
        let want = outputs(&whole);
        for cuts in SPLIT_CUTS {
            let block = Block::new(c.lat, [1; 4], 0).unwrap().cutting(cuts).unwrap();
            let split =
                CloverGpu::<f64>::split(&gpu, block, &c.u, &c.clover, recon, host_ranks(), true)
                    .unwrap();
            let got = outputs(&split);
            for (what, (g, w)) in ["M_hat", "x_o", "D x"].iter().zip(got.iter().zip(&want)) {
                assert!(
                    g == w,
                    "r{} cutting {cuts:?}: the split {what} differs from the whole lattice's",
                    recon.name()
                );
            }
        }
    }
}

fn gpu_solve_case<T: CloverReal>(gpu: &Arc<Gpu>, tol: f64, agree: f64) {
    let (dims, antiperiodic) = CASES[0];
    let c = case(dims, antiperiodic, CSW, 47);
    let b = &c.psi;
    let (x_ref, _, ref_res) = solve_clover_eo(&c.lat, &c.u, &c.clover, b, 1e-12, 1000).unwrap();
    assert!(ref_res <= 1e-11, "CPU solve residual {ref_res:e}");
    for variant in [OverheadHiding::Sync, OverheadHiding::Async] {
        let op = CloverGpu::<T>::new(gpu, &c.lat, &c.u, &c.clover, Recon::R12).unwrap();
        let mut solver = BiCgStab::new(gpu, CloverEvenOdd(op)).unwrap();
        let opt = SolveOptions {
            tol,
            max_iter: 1000,
            variant,
            check_every: 4,
            fused: Fusion::Auto,
        };
        let (x, report, gpu_res) =
            solve_clover_with(&mut solver, b, &opt, &mut |_, _| Ok(())).unwrap();
        assert_eq!(
            report.status,
            SolveStatus::Converged,
            "{} {variant}",
            T::NAME
        );
        let res = clover_true_residual(&c.lat, &c.u, &c.clover, b, &x);
        assert!(
            res <= 20.0 * tol,
            "{} {variant}: true residual {res:e} (CPU f64) at tolerance {tol:e}",
            T::NAME
        );
        assert!(
            (gpu_res - res).abs() <= 0.1 * res + 1e-6 * tol,
            "{} {variant}: GPU residual {gpu_res:e}, CPU {res:e}",
            T::NAME
        );
        let d = max_rel_diff(&x.data, &x_ref.data);
        assert!(
            d <= agree,
            "{} {variant}: solution off the CPU solve by {d:e}",
            T::NAME
        );
        let _ = writeln!(
            std::io::stderr(),
            "clover solve {} {variant}: {} iterations, true residual {res:e}",
            T::NAME,
            report.iterations
        );
    }
}

/// Mixed f32/f64, half/f64 and fixed/f64 BiCGStab and CGNR on the clover operator, and CGNR in f64 (the adjoint through
/// gamma_5, [`DeviceOperator::apply_dagger`]), with reliable updates: the true residual recomputed on
/// the CPU in f64 at most 1e-10, and the iterations at most 20% above the same method all in f64.
#[test]
fn gpu_mixed_clover_solves_reach_1e_10() {
    let Some(gpu) = gpu("gpu_mixed_clover_solves_reach_1e_10") else {
        return;
    };
    let (dims, antiperiodic) = CASES[0];
    let c = case(dims, antiperiodic, CSW, 47);
    let op = || CloverGpu::<f64>::new(&gpu, &c.lat, &c.u, &c.clover, Recon::R12).unwrap();
    let lo = || CloverGpu::<f32>::new(&gpu, &c.lat, &c.u, &c.clover, Recon::R12).unwrap();
    let half = || CloverGpu::<Half>::new(&gpu, &c.lat, &c.u, &c.clover, Recon::R12).unwrap();
    let fixed = || CloverGpu::<Fixed>::new(&gpu, &c.lat, &c.u, &c.clover, Recon::R12).unwrap();
    let options = |method| {
        let mut o = MixedOptions::new(SolveOptions {
            tol: 1e-10,
            max_iter: 5000,
            variant: OverheadHiding::Async,
            check_every: 4,
            fused: Fusion::Off,
        });
        o.method = method;
        o
    };
    let mut plain = BiCgStab::new(&gpu, CloverEvenOdd(op())).unwrap();
    let (_, r, _) = solve_clover_with(
        &mut plain,
        &c.psi,
        &options(Method::BiCgStab).solve,
        &mut |_, _| Ok(()),
    )
    .unwrap();
    let mut all64 = MixedBiCgStab::new(&gpu, CloverEvenOdd(op()), CloverEvenOdd(op())).unwrap();
    let mut mixed = MixedBiCgStab::new(&gpu, CloverEvenOdd(op()), CloverEvenOdd(lo())).unwrap();
    let mut in_half = MixedBiCgStab::new(&gpu, CloverEvenOdd(op()), CloverEvenOdd(half())).unwrap();
    let mut in_fixed =
        MixedBiCgStab::new(&gpu, CloverEvenOdd(op()), CloverEvenOdd(fixed())).unwrap();
    let mut cgnr64 = 0;
    for (method, name) in [
        (Method::Cgnr, "f64 CGNR"),
        (Method::BiCgStab, "f32/f64 BiCGStab"),
        (Method::Cgnr, "f32/f64 CGNR"),
        (Method::BiCgStab, "half/f64 BiCGStab"),
        (Method::Cgnr, "half/f64 CGNR"),
        (Method::BiCgStab, "fixed/f64 BiCGStab"),
    ] {
        let (opt, none) = (options(method), &mut |_, _| Ok(()));
        let run = match &name[..3] {
            "f64" => solve_clover_mixed_with(&mut all64, &c.psi, &opt, none),
            "f32" => solve_clover_mixed_with(&mut mixed, &c.psi, &opt, none),
            "hal" => solve_clover_mixed_with(&mut in_half, &c.psi, &opt, none),
            _ => solve_clover_mixed_with(&mut in_fixed, &c.psi, &opt, none),
        };
        let (x, report, gpu_res) = run.unwrap_or_else(|e| panic!("{name}: {e}"));
        let res = clover_true_residual(&c.lat, &c.u, &c.clover, &c.psi, &x);
        let _ = writeln!(
            std::io::stderr(),
            "clover {name}: {} iterations, {} reliable updates, true residual {res:e} (GPU \
             {gpu_res:e}); f64 BiCGStab {} iterations",
            report.iterations,
            report.updates,
            r.iterations
        );
        assert_eq!(report.status, SolveStatus::Converged, "{name}");
        assert!(res <= 1e-10, "{name}: true residual {res:e}");
        assert!(
            (gpu_res - res).abs() <= 0.05 * res + 1e-13,
            "{name}: GPU {gpu_res:e}, CPU {res:e}"
        );
        let baseline = match name {
            "f64 CGNR" => {
                cgnr64 = report.iterations;
                continue;
            }
            "f32/f64 BiCGStab" | "half/f64 BiCGStab" | "fixed/f64 BiCGStab" => r.iterations,
            _ => cgnr64,
        };
        assert!(
            report.iterations as f64 <= 1.2 * baseline as f64,
            "{name}: {} iterations, all-f64 {baseline}",
            report.iterations
        );
    }
}

#[test]
fn gpu_clover_solve_has_a_small_true_residual_and_agrees_with_the_cpu_solve() {
    let Some(gpu) = gpu("gpu_clover_solve_has_a_small_true_residual_and_agrees_with_the_cpu_solve")
    else {
        return;
    };
    gpu_solve_case::<f64>(&gpu, 1e-10, 1e-8);
    gpu_solve_case::<f32>(&gpu, 1e-5, 1e-3);
    // Split over one rank cutting every axis (a t layer of 64 sites, whole tiles): the same solution.
    let c = case(SPLIT_DIMS, true, CSW, 53);
    let opt = SolveOptions {
        tol: 1e-10,
        max_iter: 1000,
        variant: OverheadHiding::Sync,
        check_every: 4,
        fused: Fusion::Off,
    };
    let whole = CloverGpu::<f64>::new(&gpu, &c.lat, &c.u, &c.clover, Recon::R18).unwrap();
    let mut solver = BiCgStab::new(&gpu, CloverEvenOdd(whole)).unwrap();
    let (want, want_report, _) =
        solve_clover_with(&mut solver, &c.psi, &opt, &mut |_, _| Ok(())).unwrap();
    let block = Block::new(c.lat, [1; 4], 0)
        .unwrap()
        .cutting(SPLIT_CUTS[2])
        .unwrap();
    let split =
        CloverGpu::<f64>::split(&gpu, block, &c.u, &c.clover, Recon::R18, host_ranks(), true)
            .unwrap();
    let mut solver = BiCgStab::new(&gpu, CloverEvenOdd(split)).unwrap();
    let (got, report, res) =
        solve_clover_with(&mut solver, &c.psi, &opt, &mut |_, _| Ok(())).unwrap();
    assert_eq!(report.iterations, want_report.iterations);
    let d = max_rel_diff(&got.data, &want.data);
    assert!(
        d <= 1e-12 && res <= 2e-9,
        "split solve: {d:e} off, residual {res:e}"
    );
}
