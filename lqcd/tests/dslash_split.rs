//! The hopping term on a lattice split along t (the GPU kernel's body run on the CPU): each rank's slab,
//! its ghost slices filled as the halo exchange fills them, must give the bits of the whole lattice's
//! hopping term on its sites, over 1, 2 and 4 ranks, both parities and link storages, periodic and
//! antiperiodic t (the sign belongs to the global edge only). Outputs are poisoned with NaN first.

use lattice_gpu_kernels::wilson::{T_HIGH_EDGE, T_LOW_EDGE, T_SPLIT};
use lattice_gpu_lqcd::gauge::GaugeField;
use lattice_gpu_lqcd::geometry::Lattice;
use lattice_gpu_lqcd::gpu::{
    hopping_on_host, hopping_on_slab, pack_gauge, pack_parity, parity_len, unpack_parity, Recon,
    TSlab,
};
use lattice_gpu_lqcd::spinor::SpinorField;
use num_complex::Complex64;

#[test]
fn slabs_of_a_t_split_give_the_whole_lattices_bits() {
    let dims = [4, 4, 4, 8];
    let u = GaugeField::random(dims, 21);
    let psi = SpinorField::random(dims, 22);
    let x = SpinorField::random(dims, 23);
    let a = -0.29;
    for antiperiodic in [false, true] {
        let global = Lattice::new(dims, antiperiodic).unwrap();
        for recon in [Recon::R18, Recon::R12] {
            let gauge = pack_gauge::<f64>(&global, &u, recon);
            for parity in 0..2 {
                let inp = pack_parity::<f64>(&global, &psi.data, 1 - parity);
                let xp = pack_parity::<f64>(&global, &x.data, parity);
                let mut whole = vec![f64::NAN; 2 * parity_len(&global)];
                hopping_on_host(
                    &global,
                    &gauge,
                    recon,
                    &mut whole,
                    parity,
                    &inp,
                    Some(&xp),
                    a,
                );
                let mut want = vec![Complex64::new(f64::NAN, 0.0); 12 * global.volume()];
                unpack_parity(&global, &whole, parity, &mut want);
                for ranks in [1, 2, 4] {
                    let nt = dims[3] / ranks;
                    for rank in 0..ranks {
                        let slab = TSlab::new(global, rank * nt, nt).unwrap();
                        let local = slab.local();
                        let n = 2 * parity_len(&local);
                        let inp = slab.pack_parity::<f64>(&psi.data, 1 - parity);
                        // The interior of the packed addend: the ghost slices come after it.
                        let xp = &slab.pack_parity::<f64>(&x.data, parity)[..n];
                        let gauge = slab.pack_gauge::<f64>(&u, recon);
                        let mut out = vec![f64::NAN; n];
                        hopping_on_slab(&slab, &gauge, recon, &mut out, parity, &inp, Some(xp), a);
                        let mut got = vec![Complex64::new(f64::NAN, 0.0); 12 * local.volume()];
                        unpack_parity(&local, &out, parity, &mut got);
                        for site in (0..local.volume()).filter(|&s| local.parity(s) == parity) {
                            let [sx, sy, sz, st] = local.coords(site);
                            let g = global.index([sx, sy, sz, rank * nt + st]);
                            for k in 0..12 {
                                let (w, h) = (want[12 * g + k], got[12 * site + k]);
                                assert!(
                                    w.re.to_bits() == h.re.to_bits()
                                        && w.im.to_bits() == h.im.to_bits(),
                                    "antiperiodic {antiperiodic}, recon {}, parity {parity}, rank \
                                     {rank} of {ranks}, site {site} component {k}: {h} vs {w}",
                                    recon.name()
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn slab_edges_and_bad_slabs() {
    let global = Lattice::new([4, 4, 4, 8], true).unwrap();
    let edges = |t0, nt| TSlab::new(global, t0, nt).unwrap().t_split();
    assert_eq!(edges(0, 8), T_SPLIT | T_LOW_EDGE | T_HIGH_EDGE);
    assert_eq!(edges(0, 4), T_SPLIT | T_LOW_EDGE);
    assert_eq!(edges(2, 4), T_SPLIT);
    assert_eq!(edges(4, 4), T_SPLIT | T_HIGH_EDGE);
    // Odd slices or an odd start break the even-odd order; a slice must be whole tiles.
    for (t0, nt) in [(0, 3), (1, 2), (6, 4), (0, 0)] {
        let e = TSlab::new(global, t0, nt).unwrap_err().to_string();
        assert!(e.contains("even"), "{e}");
    }
    let thin = Lattice::new([2, 2, 2, 8], false).unwrap();
    let e = TSlab::new(thin, 0, 4).unwrap_err().to_string();
    assert!(e.contains("multiple of 32"), "{e}");
}
