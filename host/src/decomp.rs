//! Domain decomposition: a global grid of `D` axes split into one box per rank on a Cartesian grid of
//! ranks, each box with margins, and the halo plan (which regions go to which neighbour) computed once.
//!
//! Axes are numbered as the fields' (axis 0 fastest in memory). Ranks are numbered with the rank grid's
//! axis 0 fastest too. A split axis with `p` ranks and `n` planes gives the first `n % p` ranks
//! `n / p + 1` planes and the others `n / p`. Each box's local array is its interior plus `halo[a]`
//! margin planes on both sides of every axis `a` (split or not).
//!
//! The halo plan exchanges faces axis by axis, in axis order: the faces of a later axis span the margins
//! of the earlier ones, so edge and corner margins (diagonal stencils, D3Q19) arrive with no extra
//! messages. Along an axis that is not split but periodic, a rank is its own neighbour; along a walled
//! axis the outer faces have no neighbour and are left to the boundary condition.

// Per-axis arrays run in lock step: index loops over the axes read best here.
#![allow(clippy::needless_range_loop)]

use crate::error::{Error, Result};

/// A box of array points: `begin[a]..begin[a] + size[a]` on every axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Region<const D: usize> {
    /// First point per axis.
    pub begin: [usize; D],
    /// Points per axis.
    pub size: [usize; D],
}

impl<const D: usize> Region<D> {
    /// Points in the region.
    pub fn len(&self) -> usize {
        self.size.iter().product()
    }

    /// Whether the region has no points.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every point of the region, axis 0 fastest.
    pub fn points(&self) -> Points<D> {
        Points {
            region: *self,
            next: self.begin,
            left: self.len(),
        }
    }

    /// The first point of every row of the region (axis 0 at `begin[0]`), in [`points`](Self::points)
    /// order: a row's points follow it along axis 0.
    pub fn rows(&self) -> Points<D> {
        let mut first = *self;
        if D > 0 && first.size[0] > 0 {
            first.size[0] = 1;
        }
        first.points()
    }
}

/// The points of a [`Region`], axis 0 fastest, stepped like an odometer (no division per axis per
/// point).
#[derive(Clone, Debug)]
pub struct Points<const D: usize> {
    region: Region<D>,
    next: [usize; D],
    left: usize,
}

impl<const D: usize> Iterator for Points<D> {
    type Item = [usize; D];

    #[inline]
    fn next(&mut self) -> Option<[usize; D]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let p = self.next;
        for a in 0..D {
            self.next[a] += 1;
            if self.next[a] < self.region.begin[a] + self.region.size[a] {
                break;
            }
            self.next[a] = self.region.begin[a];
        }
        Some(p)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<const D: usize> ExactSizeIterator for Points<D> {}

/// The distinct coordinates along `axis` that `regions` cover, in order: the planes (or rows) a halo
/// plan's faces send or receive.
pub fn layers<const D: usize>(regions: impl Iterator<Item = Region<D>>, axis: usize) -> Vec<usize> {
    let mut at: Vec<usize> = regions
        .flat_map(|r| r.begin[axis]..r.begin[axis] + r.size[axis])
        .collect();
    at.sort_unstable();
    at.dedup();
    at
}

/// Which side of a box along an axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// Towards lower coordinates.
    Lower,
    /// Towards higher coordinates.
    Upper,
}

impl Side {
    /// The other side: where what leaves from this side arrives at the neighbour.
    pub fn opposite(self) -> Self {
        match self {
            Side::Lower => Side::Upper,
            Side::Upper => Side::Lower,
        }
    }
}

/// One message of a halo exchange, seen from one rank: its interior region `send` goes to `peer`, and
/// `recv` (a margin region of the same shape) is filled from `peer`'s face on the opposite side (a
/// communicator matches the two by axis and side).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Face<const D: usize> {
    /// The axis exchanged.
    pub axis: usize,
    /// The side of this rank's box the face is on.
    pub side: Side,
    /// The neighbour.
    pub peer: usize,
    /// The interior points sent (local array coordinates).
    pub send: Region<D>,
    /// The margin points received (local array coordinates).
    pub recv: Region<D>,
}

/// A global grid split over a Cartesian grid of ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decomposition<const D: usize> {
    global: [usize; D],
    procs: [usize; D],
    periodic: [bool; D],
    halo: [usize; D],
}

impl<const D: usize> Decomposition<D> {
    /// Splits `global` over `procs[a]` ranks along each axis `a` (1 where an axis is not split), with
    /// `halo[a]` margin planes per side, periodic where `periodic[a]`. Fails, naming the axis and the fix,
    /// where an axis has more ranks than planes or a box would be thinner than its halo (a margin must
    /// come from the next box only).
    pub fn new(
        global: [usize; D],
        procs: [usize; D],
        halo: [usize; D],
        periodic: [bool; D],
    ) -> Result<Self> {
        for a in 0..D {
            if procs[a] == 0 || global[a] == 0 {
                return Err(Error::InvalidSize(format!(
                    "axis {a}: {} points over {} ranks; both must be at least 1",
                    global[a], procs[a]
                )));
            }
            if procs[a] > global[a] {
                return Err(Error::InvalidSize(format!(
                    "axis {a} has {} planes but {} ranks along it: every rank needs at least one plane; \
                     use at most {} ranks along axis {a} or a larger grid",
                    global[a], procs[a], global[a]
                )));
            }
            let thinnest = global[a] / procs[a];
            if procs[a] > 1 && thinnest < halo[a] {
                return Err(Error::InvalidSize(format!(
                    "axis {a}: boxes of {thinnest} planes are thinner than the halo of {} planes the stencil \
                     needs; use at most {} ranks along axis {a}",
                    halo[a],
                    global[a] / halo[a].max(1)
                )));
            }
        }
        Ok(Self {
            global,
            procs,
            periodic,
            halo,
        })
    }

    /// Ranks in all.
    pub fn ranks(&self) -> usize {
        self.procs.iter().product()
    }

    /// The global grid.
    pub fn global(&self) -> [usize; D] {
        self.global
    }

    /// Margin planes per side along each axis.
    pub fn halo(&self) -> [usize; D] {
        self.halo
    }

    /// The position of `rank` on the rank grid.
    pub fn coords(&self, rank: usize) -> [usize; D] {
        let mut r = rank;
        let mut c = [0; D];
        for a in 0..D {
            c[a] = r % self.procs[a];
            r /= self.procs[a];
        }
        c
    }

    /// The rank at position `c` on the rank grid.
    pub fn rank_at(&self, c: [usize; D]) -> usize {
        (0..D).rev().fold(0, |r, a| r * self.procs[a] + c[a])
    }

    /// The part of the global grid that `rank` owns (global coordinates).
    pub fn owned(&self, rank: usize) -> Region<D> {
        let c = self.coords(rank);
        let mut begin = [0; D];
        let mut size = [0; D];
        for a in 0..D {
            let (n, p, i) = (self.global[a], self.procs[a], c[a]);
            let (base, extra) = (n / p, n % p);
            begin[a] = i * base + i.min(extra);
            size[a] = base + usize::from(i < extra);
        }
        Region { begin, size }
    }

    /// The local array of `rank`: its owned points plus the margins.
    pub fn local_size(&self, rank: usize) -> [usize; D] {
        let own = self.owned(rank).size;
        std::array::from_fn(|a| own[a] + 2 * self.halo[a])
    }

    /// The neighbour of `rank` on `side` along `axis`, or `None` at a walled end.
    pub fn neighbour(&self, rank: usize, axis: usize, side: Side) -> Option<usize> {
        let mut c = self.coords(rank);
        let p = self.procs[axis];
        let at_end = match side {
            Side::Lower => c[axis] == 0,
            Side::Upper => c[axis] + 1 == p,
        };
        if at_end && !self.periodic[axis] {
            return None;
        }
        c[axis] = match side {
            Side::Lower => (c[axis] + p - 1) % p,
            Side::Upper => (c[axis] + 1) % p,
        };
        Some(self.rank_at(c))
    }

    /// The messages `rank` sends and receives in one halo exchange, axis by axis (exchange them in this
    /// order, each axis after the previous one has arrived). Axes with no halo are skipped.
    pub fn halo_plan(&self, rank: usize) -> Vec<Face<D>> {
        let own = self.owned(rank).size;
        let h = self.halo;
        let mut faces = Vec::new();
        for axis in 0..D {
            if h[axis] == 0 {
                continue;
            }
            // Axes before this one span their margins too; later ones only their interior.
            let mut begin = [0; D];
            let mut size = [0; D];
            for a in 0..D {
                (begin[a], size[a]) = if a < axis {
                    (0, own[a] + 2 * h[a])
                } else {
                    (h[a], own[a])
                };
            }
            for side in [Side::Lower, Side::Upper] {
                let Some(peer) = self.neighbour(rank, axis, side) else {
                    continue;
                };
                let (mut send, mut recv) = (Region { begin, size }, Region { begin, size });
                send.size[axis] = h[axis];
                recv.size[axis] = h[axis];
                (send.begin[axis], recv.begin[axis]) = match side {
                    Side::Lower => (h[axis], 0),
                    Side::Upper => (own[axis], own[axis] + h[axis]),
                };
                faces.push(Face {
                    axis,
                    side,
                    peer,
                    send,
                    recv,
                });
            }
        }
        faces
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Global point `g` (wrapped where periodic), or `None` outside a walled end.
    fn wrap<const D: usize>(d: &Decomposition<D>, g: [isize; D]) -> Option<[usize; D]> {
        let mut out = [0; D];
        for a in 0..D {
            let n = d.global[a] as isize;
            if (0..n).contains(&g[a]) {
                out[a] = g[a] as usize;
            } else if d.periodic[a] {
                out[a] = g[a].rem_euclid(n) as usize;
            } else {
                return None;
            }
        }
        Some(out)
    }

    fn flat<const D: usize>(size: [usize; D], p: [usize; D]) -> usize {
        (0..D).rev().fold(0, |k, a| k * size[a] + p[a])
    }

    /// Splits a global array (value = global flat index + 1) over the ranks, runs every rank's halo plan
    /// by copying between the local arrays axis by axis, and checks that every margin point holds the
    /// value of the global point it stands for (wrapped), edges and corners included; margins beyond a
    /// walled end stay untouched.
    fn exchange_fills_every_margin<const D: usize>(d: &Decomposition<D>) {
        let ranks = d.ranks();
        let mut local: Vec<Vec<f64>> = (0..ranks)
            .map(|r| {
                let ls = d.local_size(r);
                let own = d.owned(r);
                let mut v = vec![-1.0; ls.iter().product()];
                for p in own.points() {
                    let l: [usize; D] = std::array::from_fn(|a| p[a] - own.begin[a] + d.halo[a]);
                    v[flat(ls, l)] = flat(d.global, p) as f64 + 1.0;
                }
                v
            })
            .collect();
        let plans: Vec<_> = (0..ranks).map(|r| d.halo_plan(r)).collect();
        for axis in 0..D {
            // Every rank sends its faces of this axis; then every receive is matched with its sender.
            let mut out = Vec::new();
            for r in 0..ranks {
                for f in plans[r].iter().filter(|f| f.axis == axis) {
                    let ls = d.local_size(r);
                    let data: Vec<f64> = f.send.points().map(|p| local[r][flat(ls, p)]).collect();
                    out.push((r, *f, data));
                }
            }
            for r in 0..ranks {
                for f in plans[r].iter().filter(|f| f.axis == axis) {
                    // The peer's face on the opposite side, towards this rank.
                    let (_, sf, data) = out
                        .iter()
                        .find(|(s, sf, _)| *s == f.peer && sf.peer == r && sf.side != f.side)
                        .expect("a matching send");
                    assert_eq!(sf.send.size, f.recv.size, "face shapes match");
                    let ls = d.local_size(r);
                    for (p, v) in f.recv.points().zip(data) {
                        local[r][flat(ls, p)] = *v;
                    }
                }
            }
        }
        for r in 0..ranks {
            let ls = d.local_size(r);
            let own = d.owned(r);
            for l in (Region {
                begin: [0; D],
                size: ls,
            })
            .points()
            {
                let g: [isize; D] = std::array::from_fn(|a| {
                    own.begin[a] as isize + l[a] as isize - d.halo[a] as isize
                });
                let got = local[r][flat(ls, l)];
                match wrap(d, g) {
                    Some(g) => assert_eq!(
                        got,
                        flat(d.global, g) as f64 + 1.0,
                        "rank {r} local {l:?} global {g:?}"
                    ),
                    None => assert_eq!(got, -1.0, "rank {r} local {l:?} beyond a wall was written"),
                }
            }
        }
    }

    #[test]
    fn boxes_tile_the_grid_evenly() {
        for ranks in 1..=8 {
            for n in [ranks, 7, 13, 64, 101].into_iter().filter(|&n| n >= ranks) {
                let d =
                    Decomposition::new([5, 3, n], [1, 1, ranks], [1, 1, 1], [false, false, true])
                        .unwrap();
                let mut covered = vec![0; n];
                let sizes: Vec<usize> = (0..ranks).map(|r| d.owned(r).size[2]).collect();
                for r in 0..ranks {
                    let o = d.owned(r);
                    assert_eq!((o.begin[0], o.size[0], o.begin[1], o.size[1]), (0, 5, 0, 3));
                    for z in o.begin[2]..o.begin[2] + o.size[2] {
                        covered[z] += 1;
                    }
                }
                assert!(
                    covered.iter().all(|&c| c == 1),
                    "{n} planes over {ranks}: {covered:?}"
                );
                let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(hi - lo <= 1, "{sizes:?}");
            }
        }
    }

    #[test]
    fn neighbours_are_mutual() {
        for periodic in [false, true] {
            let d = Decomposition::new([9, 8, 7], [3, 2, 1], [1, 1, 1], [periodic; 3]).unwrap();
            for r in 0..d.ranks() {
                for axis in 0..3 {
                    if let Some(up) = d.neighbour(r, axis, Side::Upper) {
                        assert_eq!(d.neighbour(up, axis, Side::Lower), Some(r));
                    }
                }
                assert_eq!(
                    d.neighbour(r, 2, Side::Upper),
                    periodic.then_some(r),
                    "unsplit axis"
                );
            }
            assert_eq!(d.neighbour(0, 0, Side::Lower), periodic.then_some(2));
        }
    }

    #[test]
    fn layers_are_the_distinct_planes_of_the_faces() {
        // z split over 3 ranks, the middle one: it sends its first and last plane and receives the
        // margin planes on both sides.
        let d = Decomposition::new([4, 3, 9], [1, 1, 3], [1, 1, 1], [false; 3]).unwrap();
        let plan = d.halo_plan(1);
        assert_eq!(layers(plan.iter().map(|f| f.send), 2), [1, 3]);
        assert_eq!(layers(plan.iter().map(|f| f.recv), 2), [0, 4]);
        assert!(layers(std::iter::empty::<Region<3>>(), 2).is_empty());
    }

    #[test]
    fn exchange_fills_margins_edges_and_corners() {
        for ranks in 1..=8 {
            for periodic in [
                [true, true, true],
                [false, false, false],
                [true, false, true],
            ] {
                // z split (the 3-D stencils and LBM), odd sizes, halo 1 and 2.
                for halo in [1, 2] {
                    let n = 3 * ranks + 2;
                    let d = Decomposition::new([5, 4, n], [1, 1, ranks], [halo, 1, halo], periodic)
                        .unwrap();
                    exchange_fills_every_margin(&d);
                }
            }
        }
        // Several split axes (the 4-D lattice splits t, z, y), uneven.
        let d = Decomposition::new([4, 5, 7, 6], [1, 2, 3, 2], [1, 1, 1, 1], [true; 4]).unwrap();
        exchange_fills_every_margin(&d);
        let d = Decomposition::new([6, 7, 5], [2, 3, 1], [1, 2, 1], [false, true, false]).unwrap();
        exchange_fills_every_margin(&d);
        // 2-D, y split (advection), halo 2.
        let d = Decomposition::new([9, 11], [1, 3], [2, 2], [false, false]).unwrap();
        exchange_fills_every_margin(&d);
    }

    #[test]
    fn impossible_splits_say_why() {
        let e = Decomposition::new([8, 8, 3], [1, 1, 4], [1, 1, 1], [false; 3])
            .unwrap_err()
            .to_string();
        assert!(e.contains("3 planes but 4 ranks"), "{e}");
        let e = Decomposition::new([8, 8, 6], [1, 1, 4], [1, 1, 2], [false; 3])
            .unwrap_err()
            .to_string();
        assert!(e.contains("thinner than the halo"), "{e}");
        assert!(Decomposition::new([8, 8, 6], [1, 1, 0], [1; 3], [false; 3]).is_err());
    }
}
