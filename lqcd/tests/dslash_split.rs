//! The hopping term on a lattice split over GPUs into blocks along y, z and t (the GPU kernels' bodies
//! run on the CPU): each rank's block, its ghosts filled as the halo exchange fills them, must give the
//! bits of the whole lattice's hopping term on its sites, for grids cutting one, two and three axes
//! (uneven ones too, and axes cut over one rank), both parities and link storages, periodic and
//! antiperiodic t (the sign belongs to the global edge only). Outputs are poisoned with NaN first. The
//! blocks tile the lattice, packing and the exchange plan fill exactly the ghosts, and the inner and
//! outer launches of an overlapped hopping term compute every site once.

use lattice_gpu_kernels::wilson::{
    edge_order, Dslash, Fixed, Half, INNER, OUTER, T_CUT, T_HIGH_EDGE, T_LOW_EDGE, Y_CUT, Z_CUT,
};
use lattice_gpu_lqcd::gauge::GaugeField;
use lattice_gpu_lqcd::geometry::Lattice;
use lattice_gpu_lqcd::gpu::{
    hopping_on_block, hopping_on_host, pack_faces_on_host, pack_gauge, pack_parity, parity_slots,
    unpack_parity, Block, Recon, WilsonStorage,
};
use lattice_gpu_lqcd::spinor::SpinorField;
use num_complex::Complex64;

/// Rank grids `[1, py, pz, pt]` and the axes cut besides those with more than one rank.
const GRIDS: [([usize; 4], &[usize]); 8] = [
    ([1, 1, 1, 1], &[3]),
    ([1, 1, 1, 1], &[1, 2, 3]),
    ([1, 1, 1, 2], &[]),
    ([1, 1, 2, 1], &[]),
    ([1, 2, 1, 1], &[]),
    ([1, 1, 2, 2], &[]),
    ([1, 2, 2, 2], &[]),
    ([1, 1, 3, 2], &[]),
];

fn blocks(global: Lattice, grid: [usize; 4], cuts: &[usize]) -> Vec<Block> {
    (0..grid.iter().product())
        .map(|r| Block::new(global, grid, r).unwrap().cutting(cuts).unwrap())
        .collect()
}

#[test]
fn blocks_of_a_split_give_the_whole_lattices_bits() {
    split_bits::<f64>();
    // 16-bit storage: each ghost carries its site's norm.
    split_bits::<Half>();
    split_bits::<Fixed>();
}

fn split_bits<T: WilsonStorage>() {
    let dims = [8, 4, 8, 8];
    let u = GaugeField::random(dims, 21);
    let psi = SpinorField::random(dims, 22);
    let x = SpinorField::random(dims, 23);
    let a = -0.29;
    for antiperiodic in [false, true] {
        let global = Lattice::new(dims, antiperiodic).unwrap();
        for recon in [Recon::R18, Recon::R12] {
            let gauge = pack_gauge::<T>(&global, &u, recon);
            for parity in 0..2 {
                let inp = pack_parity::<T>(&global, &psi.data, 1 - parity);
                let xp = pack_parity::<T>(&global, &x.data, parity);
                let mut whole = vec![T::POISON; 2 * parity_slots::<T>(&global)];
                let (g, i, xs) = (&gauge, &inp, Some(&xp[..]));
                hopping_on_host::<T>(&global, g, recon, &mut whole, parity, i, xs, a);
                let mut want = vec![Complex64::new(f64::NAN, 0.0); 12 * global.volume()];
                unpack_parity::<T>(&global, &whole, parity, &mut want);
                for (grid, cuts) in GRIDS {
                    for block in blocks(global, grid, cuts) {
                        let local = block.local();
                        let n = 2 * parity_slots::<T>(&local);
                        let inp = block.pack_parity::<T>(&psi.data, 1 - parity);
                        // The own sites of the packed addend: the ghosts come after them.
                        let xp = &block.pack_parity::<T>(&x.data, parity)[..n];
                        let gauge = block.pack_gauge::<T>(&u, recon);
                        let mut out = vec![T::POISON; n];
                        let (g, i) = (&gauge, &inp);
                        hopping_on_block::<T>(&block, g, recon, &mut out, parity, i, Some(xp), a);
                        let mut got = vec![Complex64::new(f64::NAN, 0.0); 12 * global.volume()];
                        block.unpack_parity::<T>(&out, parity, &mut got);
                        for site in (0..local.volume()).filter(|&s| local.parity(s) == parity) {
                            let c = local.coords(site);
                            let g = global.index(std::array::from_fn(|k| block.origin[k] + c[k]));
                            for k in 0..12 {
                                let (w, h) = (want[12 * g + k], got[12 * g + k]);
                                assert!(
                                    w.re.to_bits() == h.re.to_bits()
                                        && w.im.to_bits() == h.im.to_bits(),
                                    "antiperiodic {antiperiodic}, recon {}, parity {parity}, grid \
                                     {grid:?} cutting {cuts:?}, rank {}, site {site} component {k}: \
                                     {h} vs {w}",
                                    recon.name(),
                                    block.rank
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
fn block_edges_and_bad_blocks() {
    let global = Lattice::new([8, 4, 8, 8], true).unwrap();
    let cut_flags = |grid, rank| Block::new(global, grid, rank).unwrap().cut_flags();
    // One rank: nothing cut, and both t edges are the global boundary.
    assert_eq!(cut_flags([1, 1, 1, 1], 0), T_LOW_EDGE | T_HIGH_EDGE);
    assert_eq!(cut_flags([1, 1, 1, 2], 0), T_CUT | T_LOW_EDGE);
    assert_eq!(cut_flags([1, 1, 1, 2], 1), T_CUT | T_HIGH_EDGE);
    assert_eq!(cut_flags([1, 1, 1, 4], 1), T_CUT);
    // Ranks y fastest: rank 5 of 2x2x2 is at y 1, z 0, t 1.
    assert_eq!(
        cut_flags([1, 2, 2, 2], 5),
        T_CUT | Z_CUT | Y_CUT | T_HIGH_EDGE
    );
    let b = Block::new(global, [1, 2, 2, 2], 5).unwrap();
    assert_eq!((b.origin, b.size), ([0, 2, 0, 4], [8, 2, 4, 4]));
    assert_eq!(cut_flags([1, 1, 2, 1], 1), Z_CUT | T_LOW_EDGE | T_HIGH_EDGE);
    let err = |dims, grid| {
        let lat = Lattice::new(dims, false).unwrap();
        Block::new(lat, grid, 0).unwrap_err().to_string()
    };
    let e = err([8, 4, 8, 8], [2, 1, 1, 1]);
    assert!(e.contains("never split along x"), "{e}");
    let e = err([8, 4, 8, 8], [1, 1, 1, 8]);
    assert!(e.contains("at most 4 GPUs along t"), "{e}");
    let e = err([8, 4, 8, 6], [1, 4, 1, 1]);
    assert!(e.contains("at most 2 GPUs along y"), "{e}");
    // A t layer of 4x2x4 sites is 16 of one parity: not whole tiles.
    let e = err([4, 4, 8, 8], [1, 2, 2, 2]);
    assert!(e.contains("multiple of 32"), "{e}");
    let e = Block::new(global, [1, 1, 1, 1], 0)
        .unwrap()
        .cutting(&[3])
        .map(|b| b.cut_flags());
    assert_eq!(e.unwrap(), T_CUT | T_LOW_EDGE | T_HIGH_EDGE);
    let thin = Lattice::new([2, 2, 2, 8], false).unwrap();
    let e = Block::new(thin, [1, 1, 1, 1], 0)
        .unwrap()
        .cutting(&[3])
        .unwrap_err()
        .to_string();
    assert!(e.contains("multiple of 32"), "{e}");
}

#[test]
fn blocks_tile_the_lattice_and_packing_and_the_exchange_fill_the_ghosts() {
    // Pairs of planes dealt out unevenly: y 4 over 3 ranks, z 5 over 2 and 3, t 6 over 4.
    let dims = [8, 8, 10, 12];
    let global = Lattice::new(dims, true).unwrap();
    let psi = SpinorField::random(dims, 31);
    for (grid, cuts) in [
        ([1, 1, 1, 3], &[][..]),
        ([1, 1, 1, 4], &[]),
        ([1, 1, 5, 1], &[]),
        ([1, 3, 1, 1], &[]),
        ([1, 3, 2, 1], &[]),
        ([1, 1, 3, 2], &[]),
        ([1, 2, 2, 3], &[]),
        ([1, 1, 1, 1], &[1, 2]),
        ([1, 1, 2, 1], &[1]),
    ] {
        let blocks = blocks(global, grid, cuts);
        // Every site of the lattice in exactly one block, each block even along every axis.
        let mut owner = vec![0usize; global.volume()];
        for b in &blocks {
            assert!(
                b.origin.iter().chain(&b.size).all(|v| v % 2 == 0),
                "{grid:?}"
            );
            let local = b.local();
            for n in 0..local.volume() {
                let c = local.coords(n);
                owner[global.index(std::array::from_fn(|k| b.origin[k] + c[k]))] += 1;
            }
        }
        assert!(
            owner.iter().all(|&o| o == 1),
            "{grid:?}: blocks overlap or leave gaps"
        );
        for parity in 0..2 {
            // What every rank must end with: its own sites and ghosts (staging aside).
            let full: Vec<Vec<f64>> = blocks
                .iter()
                .map(|b| b.pack_parity::<f64>(&psi.data, parity))
                .collect();
            // Own sites only, everything else poisoned; then pack, then every send lands in the
            // peer's ghost.
            let mut got: Vec<Vec<f64>> = full
                .iter()
                .zip(&blocks)
                .map(|(f, b)| {
                    let mut g = f.clone();
                    g[24 * b.local().half_volume()..].fill(f64::NAN);
                    pack_faces_on_host::<f64>(b, &mut g);
                    g
                })
                .collect();
            let sent = got.clone();
            for (r, b) in blocks.iter().enumerate() {
                for (axis, sides) in b.sides().iter().enumerate() {
                    for (me, theirs) in [(&sides.lower, true), (&sides.upper, false)] {
                        let peer_sides = &blocks[me.peer].sides()[axis];
                        // The lower neighbour sends its last layer up, the upper one its first down.
                        let other = if theirs {
                            &peer_sides.upper
                        } else {
                            &peer_sides.lower
                        };
                        assert_eq!(other.peer, r, "{grid:?}: rank {r} axis entry {axis}");
                        assert_eq!(other.send.len(), me.recv.len());
                        let data = sent[me.peer][other.send.clone()].to_vec();
                        got[r][me.recv.clone()].copy_from_slice(&data);
                    }
                }
            }
            for (r, (g, (f, b))) in got.iter().zip(full.iter().zip(&blocks)).enumerate() {
                let upto = 24 * b.halo().link_sites;
                let same = g[..upto]
                    .iter()
                    .zip(&f[..upto])
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{grid:?} cutting {cuts:?}, rank {r}, parity {parity}: ghosts differ"
                );
            }
        }
    }
    // 12 ranks: t takes 6, z 2; 7 fit no axis with 2 sites each.
    let b = Block::for_rank(global, 11, 12).unwrap();
    assert_eq!(
        (b.grid, b.origin, b.size),
        ([1, 1, 2, 6], [0, 0, 6, 10], [8, 8, 4, 2])
    );
    let e = Block::for_rank(global, 0, 7).unwrap_err().to_string();
    assert!(e.contains("at least 2 sites per rank"), "{e}");
}

#[test]
fn inner_and_outer_launches_compute_each_site_once() {
    let launch = |dims: [u32; 4], word: u32, order: &[u32]| Dslash::<f64, 6, true> {
        out: std::ptr::null_mut(),
        inp: std::ptr::null(),
        gauge: std::ptr::null(),
        x: std::ptr::null(),
        a: 1.0,
        t_boundary: 1.0,
        dims,
        parity: 0,
        halt: std::ptr::null(),
        cut: word,
        sites: order.as_ptr(),
    };
    let sites = |d: &Dslash<f64, 6, true>| -> Vec<usize> {
        (0..d.threads()).map(|i| d.site_of(i)).collect()
    };
    for (dims, cut) in [
        ([4, 4, 4, 2], T_CUT),
        ([4, 4, 4, 4], T_CUT),
        ([4, 4, 4, 6], T_CUT),
        ([4, 4, 6, 4], Z_CUT),
        ([4, 6, 4, 4], Y_CUT | T_CUT),
        ([4, 4, 4, 4], Y_CUT | Z_CUT | T_CUT),
        ([4, 2, 4, 4], Y_CUT | Z_CUT),
        ([6, 6, 8, 6], Y_CUT | T_CUT),
        ([4, 4, 2, 6], Z_CUT | T_CUT),
    ] {
        let order: Vec<u32> = edge_order(dims, cut).collect();
        let launch = |word| launch(dims, word, &order);
        let all = sites(&launch(cut));
        let whole = launch(cut);
        assert_eq!(all, (0..whole.half_volume()).collect::<Vec<_>>());
        let outer = sites(&launch(cut | OUTER));
        // Every outer site on an edge of a cut axis, every inner one off them.
        let [nx, ny, nz, _] = dims;
        let on_edge = |cb: usize| {
            let c = cb as u32 / (nx / 2);
            let (y, z, t) = (c % ny, c / ny % nz, c / ny / nz);
            let edge = |v: u32, n: u32, flag: u32| cut & flag != 0 && (v == 0 || v + 1 == n);
            edge(y, ny, Y_CUT) || edge(z, nz, Z_CUT) || edge(t, dims[3], T_CUT)
        };
        assert!(outer.iter().all(|&cb| on_edge(cb)), "{dims:?} {cut}");
        assert!(sites(&launch(cut | INNER)).iter().all(|&cb| !on_edge(cb)));
        let mut parts = sites(&launch(cut | INNER));
        // The outer launch takes the sites on an edge of a cut axis: as many as the inner leaves.
        let [x, y, z, t] = dims.map(|d| d as usize);
        let inner_len = |n: usize, axis_cut: bool| if axis_cut { n - 2 } else { n };
        let inner = x
            * inner_len(y, cut & Y_CUT != 0)
            * inner_len(z, cut & Z_CUT != 0)
            * inner_len(t, cut & T_CUT != 0)
            / 2;
        assert_eq!(parts.len(), inner, "{dims:?} {cut}");
        parts.extend(outer);
        parts.sort_unstable();
        assert_eq!(parts, all, "{dims:?} {cut}");
    }
}
