//! The hopping term on a lattice split along t (the GPU kernel's body run on the CPU): each rank's slab,
//! its ghost slices filled as the halo exchange fills them, must give the bits of the whole lattice's
//! hopping term on its sites, over 1, 2 and 4 ranks, both parities and link storages, periodic and
//! antiperiodic t (the sign belongs to the global edge only). Outputs are poisoned with NaN first. The
//! ranks' slabs tile the lattice, the exchange plan moves exactly the ghost slices, and the inner and
//! outer launches of an overlapped hopping term compute every site once.

use lattice_gpu_kernels::wilson::{Dslash, T_HIGH_EDGE, T_INNER, T_LOW_EDGE, T_OUTER, T_SPLIT};
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

#[test]
fn ranks_slabs_tile_the_lattice_and_their_exchange_fills_the_ghosts() {
    let dims = [4, 4, 4, 14];
    let global = Lattice::new(dims, true).unwrap();
    let psi = SpinorField::random(dims, 31);
    for ranks in 1..=7 {
        let slabs: Vec<TSlab> = (0..ranks)
            .map(|r| TSlab::for_rank(global, r, ranks).unwrap())
            .collect();
        // Consecutive, even, as even as pairs of slices go (7 pairs over 3 ranks: 3, 2, 2 pairs).
        let mut t = 0;
        for s in &slabs {
            assert_eq!(s.t0, t);
            assert!(s.nt >= 2 && s.nt.is_multiple_of(2));
            assert!(s.nt <= 2 * 7usize.div_ceil(ranks) && s.nt >= 2 * (7 / ranks));
            t += s.nt;
        }
        assert_eq!(t, dims[3]);
        for parity in 0..2 {
            // Every rank's own sites, ghosts poisoned; then each send lands in the peer's ghost.
            let full: Vec<Vec<f64>> = slabs
                .iter()
                .map(|s| s.pack_parity::<f64>(&psi.data, parity))
                .collect();
            let mut got: Vec<Vec<f64>> = full
                .iter()
                .zip(&slabs)
                .map(|(f, s)| {
                    let mut g = f.clone();
                    let own = 24 * s.local().half_volume();
                    g[own..].fill(f64::NAN);
                    g
                })
                .collect();
            for (r, s) in slabs.iter().enumerate() {
                let sides = s.sides(r, ranks);
                for (me, other) in [
                    (
                        &sides.lower,
                        slabs[sides.lower.peer].sides(sides.lower.peer, ranks).upper,
                    ),
                    (
                        &sides.upper,
                        slabs[sides.upper.peer].sides(sides.upper.peer, ranks).lower,
                    ),
                ] {
                    // What the peer sends towards this rank fills this rank's ghost on that side.
                    assert_eq!(other.peer, r);
                    let sent = full[me.peer][other.send.clone()].to_vec();
                    got[r][me.recv.clone()].copy_from_slice(&sent);
                }
            }
            for (r, (g, f)) in got.iter().zip(&full).enumerate() {
                let same = g.iter().zip(f).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{ranks} ranks, rank {r}, parity {parity}: ghosts differ"
                );
            }
        }
    }
    let e = TSlab::for_rank(global, 0, 8).unwrap_err().to_string();
    assert!(e.contains("at most 7 GPUs"), "{e}");
}

#[test]
fn inner_and_outer_launches_compute_each_site_once() {
    for nt in [2u32, 4, 6] {
        let d = |word: u32| Dslash::<f64, 6, true> {
            out: std::ptr::null_mut(),
            inp: std::ptr::null(),
            gauge: std::ptr::null(),
            x: std::ptr::null(),
            a: 1.0,
            t_boundary: 1.0,
            dims: [4, 4, 4, nt],
            parity: 0,
            halt: std::ptr::null(),
            t_split: T_SPLIT | word,
        };
        let all: Vec<usize> = (0..d(0).threads()).map(|i| d(0).site_of(i)).collect();
        assert_eq!(all, (0..d(0).half_volume()).collect::<Vec<_>>());
        let mut parts: Vec<usize> = [T_INNER, T_OUTER]
            .into_iter()
            .flat_map(|w| (0..d(w).threads()).map(move |i| d(w).site_of(i)))
            .collect();
        // Only the first and last slices' sites in the outer launch.
        let s = d(0).slice_sites();
        assert!((0..d(T_OUTER).threads())
            .map(|i| d(T_OUTER).site_of(i))
            .all(|c| c < s || c >= d(0).half_volume() - s));
        parts.sort_unstable();
        assert_eq!(parts, all, "nt = {nt}");
    }
}
