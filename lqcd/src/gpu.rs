//! The Wilson-Dirac operator on the GPU: fields in the tiled structure-of-arrays layout of
//! `lattice_gpu_kernels::wilson`, the hopping term on one parity, the even-odd operator
//! `M_hat = 1 - kappa^2 H_eo H_oe` for the device BiCGStab, and the full-system solve with its true
//! residual.

use std::sync::{Arc, OnceLock};

use lattice_gpu_host::decomp::{Decomposition, Side};
use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::engine::tuner::{blocks, param, tune, Trials, Tunable, Tuned, BLOCK};
use lattice_gpu_host::engine::Cost;
use lattice_gpu_host::kernel::run_on_host;
use lattice_gpu_host::solvers::bicgstab::{
    BiCgStab, DeviceOperator, FusedVectors, SolveOptions, SolveReport, SolverPrecision,
};
use lattice_gpu_host::solvers::reliable::{MixedBiCgStab, MixedOptions, MixedReport, Outer};
use lattice_gpu_host::split::{DeviceRanks, Neighbour, SideLayers};
use lattice_gpu_host::Error as HostError;
use lattice_gpu_host::{DeviceBuffer, Element, Gpu, Plain};
use lattice_gpu_kernels::bind::{Span, SpanMut};
use lattice_gpu_kernels::complex::Complex;
use lattice_gpu_kernels::device::grid::GridBarrier;
use lattice_gpu_kernels::device::math::Real;
use lattice_gpu_kernels::wilson::halo::{self, Halo};
use lattice_gpu_kernels::wilson::{
    edge_order, tile_index, Dslash, FusedEntries, FusedFields, FusedIteration, Gamma5, HopFields,
    PackFaces, Phase, WilsonEntries, WilsonStore, FLOPS_PER_SITE, FUSED_BLOCK, INNER, OUTER, TILE,
    T_CUT, T_HIGH_EDGE, T_LOW_EDGE, Y_CUT, Z_CUT,
};
use num_complex::Complex64;

use crate::gauge::GaugeField;
use crate::geometry::Lattice;
use crate::spinor::SpinorField;
use crate::Result;

/// How many complex numbers of each link the GPU stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Recon {
    /// All 9 entries (18 reals).
    R18,
    /// Rows 0 and 1 (12 reals); row 2 is rebuilt as `conj(row0 x row1)`, exact for SU(3).
    R12,
}

impl Recon {
    /// Complex entries stored per link.
    pub fn entries(self) -> usize {
        match self {
            Recon::R18 => 9,
            Recon::R12 => 6,
        }
    }

    /// The command-line and table name.
    pub fn name(self) -> &'static str {
        match self {
            Recon::R18 => "18",
            Recon::R12 => "12",
        }
    }
}

/// A storage of the Wilson fields on the GPU: f32, f64 or 16-bit
/// ([`Half`](lattice_gpu_kernels::wilson::Half), [`Fixed`](lattice_gpu_kernels::wilson::Fixed)), with its kernels in the embedded PTX
/// ([`WilsonEntries`]). Buffers hold its
/// [`Elem`](lattice_gpu_kernels::solver_store::SolverStore::Elem).
pub trait WilsonStorage: WilsonEntries<Elem: Plain + lattice_gpu_host::comm::Wire> + Unpin {
    /// Queues [`EvenOdd`]'s BiCGStab iteration as one kernel, where this storage has it (a plain
    /// precision: [`FusedEntries`]); `Ok(false)` otherwise.
    fn queue_fused(
        op: &EvenOdd<Self>,
        f: FusedVectors<'_, Self::Elem>,
    ) -> lattice_gpu_host::Result<bool> {
        let _ = (op, f);
        Ok(false)
    }
    /// Whether that fused iteration is the faster form for `op`.
    fn fused_pays(op: &EvenOdd<Self>) -> lattice_gpu_host::Result<bool> {
        let _ = op;
        Ok(false)
    }
}

/// A plain precision of the Wilson fields (f32 or f64, stored as it computes), which the device
/// solvers iterate in.
pub trait WilsonReal: WilsonStorage + FusedEntries + Element + Default {}

macro_rules! plain_storage {
    ($($t:ty),*) => {$(
        impl WilsonStorage for $t {
            fn queue_fused(
                op: &EvenOdd<Self>,
                f: FusedVectors<'_, Self>,
            ) -> lattice_gpu_host::Result<bool> {
                op.queue_fused(f)
            }
            fn fused_pays(op: &EvenOdd<Self>) -> lattice_gpu_host::Result<bool> {
                op.fused_pays_here()
            }
        }
        impl WilsonReal for $t {}
    )*};
}
plain_storage!(f32, f64);
impl WilsonStorage for lattice_gpu_kernels::wilson::Half {}
impl WilsonStorage for lattice_gpu_kernels::wilson::Fixed {}

/// The bound on the rounding of one hopping term `x + a H psi` in half precision
/// ([`Half`](lattice_gpu_kernels::wilson::Half)), relative to the f64 result in the 2-norm over a
/// parity: `2^-11`. Each stored value is rounded to 11 significant bits (a spinor's relative to its
/// site's largest), `2^-12` at most; the result sums eight hops of a spinor and a link each and is
/// rounded once more when stored. Measured on random fields: `3.1e-4` (`lqcd/tests/half.rs`).
pub const HALF_HOPPING_BOUND: f64 = 1.0 / 2048.0;

/// [`HALF_HOPPING_BOUND`] in 16-bit fixed point ([`Fixed`](lattice_gpu_kernels::wilson::Fixed)):
/// `2^-14`. Each stored value is kept to half a step of 32767 (a spinor's of its site's largest,
/// `2^-16`); the result sums eight hops of a spinor and a link each and is rounded once more when
/// stored. Measured on random fields: `3.3e-5` (`lqcd/tests/half.rs`), a tenth of binary16's, not a
/// sixteenth: binary16's steps shrink with the value, fixed point's do not.
pub const FIXED_HOPPING_BOUND: f64 = 1.0 / 16384.0;

/// The hopping kernel's entry of precision `T` for `recon`, on one lattice or on a rank's block.
fn dslash_entry<T: WilsonEntries>(recon: Recon, split: bool) -> &'static str {
    T::DSLASH[split as usize][(recon == Recon::R12) as usize]
}

/// Complex elements of one parity's spinor in the tiled layout (padding included), in a plain
/// precision.
pub fn parity_len(lat: &Lattice) -> usize {
    parity_slots::<f64>(lat)
}

/// Complex slots of one parity's spinor in the tiled layout of storage `T` (padding included).
pub fn parity_slots<T: WilsonStore>(lat: &Lattice) -> usize {
    lat.half_volume().div_ceil(TILE) * TILE * T::SLOTS
}

/// One parity of `psi` in the tiled layout of storage `T` (re, im interleaved).
pub fn pack_parity<T: WilsonStore>(
    lat: &Lattice,
    psi: &[Complex64],
    parity: usize,
) -> Vec<T::Elem> {
    pack_spinor::<T>(2 * parity_slots::<T>(lat), sites_of(lat, parity), psi)
}

/// The sites of `parity` as (stored site, site of the lattice).
fn sites_of(lat: &Lattice, parity: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
    (0..lat.volume())
        .filter(move |&n| lat.parity(n) == parity)
        .map(|n| (n / 2, n))
}

/// `len` numbers holding, for each (stored site, site of `psi`) of `sites`, that site's spinor.
fn pack_spinor<T: WilsonStore>(
    len: usize,
    sites: impl Iterator<Item = (usize, usize)>,
    psi: &[Complex64],
) -> Vec<T::Elem> {
    let mut out = vec![T::Elem::default(); len];
    for (cb, n) in sites {
        let site = std::array::from_fn(|k| {
            let z = psi[n * 12 + k];
            Complex::new(z.re, z.im)
        });
        let at = tile_index(cb, T::SLOTS);
        for (k, slot) in T::encode_site(&site).iter().take(T::SLOTS).enumerate() {
            out[2 * (at + k * TILE)..][..2].copy_from_slice(slot);
        }
    }
    out
}

/// The links of `u` with `recon` entries, `tiles` tiles per parity and direction, for each (stored
/// site, site of `u`) that `sites` gives for a parity.
fn pack_links<T: WilsonStore, I: Iterator<Item = (usize, usize)>>(
    tiles: usize,
    sites: impl Fn(usize) -> I,
    u: &GaugeField,
    recon: Recon,
) -> Vec<T::Elem> {
    let r = recon.entries();
    let mut out = vec![T::Elem::default(); 2 * 8 * tiles * r * TILE];
    for p in 0..2 {
        for (cb, n) in sites(p) {
            for mu in 0..4 {
                let at = (p * 4 + mu) * tiles * r * TILE + tile_index(cb, r);
                let link = &u.links[4 * n + mu];
                for k in 0..r {
                    let z = link[(k / 3, k % 3)];
                    let e = T::encode_entry(Complex::new(z.re, z.im));
                    out[2 * (at + k * TILE)..][..2].copy_from_slice(&e);
                }
            }
        }
    }
    out
}

/// Writes one parity from the tiled layout back into `psi` (lexicographic, 12 per site).
pub fn unpack_parity<T: WilsonStore>(
    lat: &Lattice,
    data: &[T::Elem],
    parity: usize,
    psi: &mut [Complex64],
) {
    unpack_spinor::<T>(sites_of(lat, parity), data, psi)
}

/// For each (stored site, site of `psi`) of `sites`, that site's spinor from `data` into `psi`.
fn unpack_spinor<T: WilsonStore>(
    sites: impl Iterator<Item = (usize, usize)>,
    data: &[T::Elem],
    psi: &mut [Complex64],
) {
    for (cb, n) in sites {
        let at = tile_index(cb, T::SLOTS);
        let mut slots = [[T::Elem::default(); 2]; 13];
        for (k, slot) in slots.iter_mut().take(T::SLOTS).enumerate() {
            slot.copy_from_slice(&data[2 * (at + k * TILE)..][..2]);
        }
        for (k, z) in T::decode_site(&slots).into_iter().enumerate() {
            psi[n * 12 + k] = Complex64::new(z.re, z.im);
        }
    }
}

/// Reals of the gauge field in the tiled layout with `recon` entries per link ([`pack_gauge`]): on the
/// GPU, and in the host copy packed for the upload.
pub fn gauge_len(lat: &Lattice, recon: Recon) -> usize {
    2 * 8 * lat.half_volume().div_ceil(TILE) * recon.entries() * TILE
}

/// The gauge field in the tiled layout with `recon` entries per link.
pub fn pack_gauge<T: WilsonStore>(lat: &Lattice, u: &GaugeField, recon: Recon) -> Vec<T::Elem> {
    let tiles = lat.half_volume().div_ceil(TILE);
    pack_links::<T, _>(tiles, |p| sites_of(lat, p), u, recon)
}

/// The rank grid `[1, py, pz, pt]` of a GPU split of `dims` over `ranks` ranks: as
/// [`rank_grid`](crate::distributed::rank_grid) cuts it (t first, then z, then y), with at least 2
/// sites per rank along a cut axis (even-odd ordering).
pub fn gpu_grid(dims: [usize; 4], ranks: usize) -> Result<[usize; 4]> {
    crate::distributed::rank_grid(dims, ranks, 2)
}

const AXES: [&str; 4] = ["x", "y", "z", "t"];

/// One rank's block of a lattice split over GPUs along `y`, `z` and `t` (the rank grid `grid`, ranks
/// numbered `y` fastest, as [`Decomposition`] numbers them), with the ghost faces and staging regions of
/// [`Halo`] after its own sites in each stored parity. Axes are cut where the grid has more than one
/// rank, and wherever [`cutting`](Self::cutting) adds (a one-rank cut exchanges with itself).
#[derive(Clone, Debug)]
pub struct Block {
    /// The whole lattice.
    pub global: Lattice,
    /// Ranks along each axis, `[1, py, pz, pt]`.
    pub grid: [usize; 4],
    /// This rank.
    pub rank: usize,
    /// First global site along each axis.
    pub origin: [usize; 4],
    /// Sites along each axis.
    pub size: [usize; 4],
    /// The axes cut, as [`Dslash::cut`] flags.
    cut: u32,
    /// The pairs of planes, split over the grid: the ranks' boxes and neighbours.
    pairs: Decomposition<4>,
}

impl Block {
    /// Rank `rank`'s block of `global` split over `ranks` GPUs on [`gpu_grid`].
    pub fn for_rank(global: Lattice, rank: usize, ranks: usize) -> Result<Self> {
        Self::new(global, gpu_grid(global.dims, ranks)?, rank)
    }

    /// Rank `rank`'s block of `global` on the rank grid `grid`: each cut axis's pairs of planes (even-odd
    /// ordering) dealt out as evenly as they go, the first ranks taking one pair more. Fails, naming
    /// the fix, where `x` is cut, an axis has more ranks than pairs, or a `t` layer of some rank would
    /// not be whole tiles.
    pub fn new(global: Lattice, grid: [usize; 4], rank: usize) -> Result<Self> {
        let dims = global.dims;
        let bad = |m: String| Err(crate::Error::InvalidParameter(m));
        if grid[0] != 1 {
            return bad(
                "the lattice is never split along x (its sites are the tiles' lanes); \
                        split it along y, z and t"
                    .into(),
            );
        }
        for a in 1..4 {
            if grid[a] == 0 || grid[a] > dims[a] / 2 {
                return bad(format!(
                    "{} = {} split over {} GPUs along {}: each needs at least 2 sites along it \
                     (even-odd ordering); use at most {} GPUs along {} or a longer lattice",
                    AXES[a].to_uppercase(),
                    dims[a],
                    grid[a],
                    AXES[a],
                    dims[a] / 2,
                    AXES[a]
                ));
            }
        }
        let ranks: usize = grid.iter().product();
        if rank >= ranks {
            return bad(format!("rank {rank} of a rank grid of {ranks}"));
        }
        let half = [dims[0], dims[1] / 2, dims[2] / 2, dims[3] / 2];
        let pairs = Decomposition::new(half, grid, [0; 4], [true; 4])
            .map_err(|e| crate::Error::InvalidParameter(e.to_string()))?;
        let cut = (1..4)
            .filter(|&a| grid[a] > 1)
            .fold(0, |c, a| c | halo::cut_flag(a));
        let block = Self::of(global, grid, rank, cut, pairs);
        block.check_tiles()?;
        Ok(block)
    }

    fn of(
        global: Lattice,
        grid: [usize; 4],
        rank: usize,
        cut: u32,
        pairs: Decomposition<4>,
    ) -> Self {
        let own = pairs.owned(rank);
        let twice = |v: [usize; 4]| [v[0], 2 * v[1], 2 * v[2], 2 * v[3]];
        Self {
            global,
            grid,
            rank,
            origin: twice(own.begin),
            size: twice(own.size),
            cut,
            pairs,
        }
    }

    /// This block with `axes` (1: `y`, 2: `z`, 3: `t`) cut as well, however many ranks they have: with
    /// one, the ghosts come from the block's own far side (every exchange to itself).
    pub fn cutting(self, axes: &[usize]) -> Result<Self> {
        let cut = axes
            .iter()
            .filter(|&&a| (1..4).contains(&a))
            .fold(self.cut, |c, &a| c | halo::cut_flag(a));
        let block = Self { cut, ..self };
        block.check_tiles()?;
        Ok(block)
    }

    /// A `t` layer travels from where it is stored: every rank's must be whole tiles.
    fn check_tiles(&self) -> Result<()> {
        if self.cut & T_CUT == 0 {
            return Ok(());
        }
        for r in 0..self.pairs.ranks() {
            let size = Self::of(self.global, self.grid, r, self.cut, self.pairs.clone()).size;
            let layer = size[0] * size[1] * size[2] / 2;
            if !layer.is_multiple_of(TILE) {
                return Err(crate::Error::InvalidParameter(format!(
                    "a t split needs X Y Z / 2 sites per t slice and parity of each rank's block to be \
                     a multiple of {TILE}, but a block of {}x{}x{} has {layer}; split fewer ways along \
                     y and z, or use a larger lattice",
                    size[0], size[1], size[2]
                )));
            }
        }
        Ok(())
    }

    /// This rank's lattice (its block's sizes; `t` antiperiodic as the whole lattice's).
    pub fn local(&self) -> Lattice {
        Lattice {
            dims: self.size,
            ..self.global
        }
    }

    /// [`Dslash::cut`] of this rank: the axes cut, and which `t` edges are the global boundary.
    pub fn cut_flags(&self) -> u32 {
        let low = if self.origin[3] == 0 { T_LOW_EDGE } else { 0 };
        let high = if self.origin[3] + self.size[3] == self.global.dims[3] {
            T_HIGH_EDGE
        } else {
            0
        };
        self.cut | low | high
    }

    /// The stored layout of one parity.
    pub fn halo(&self) -> Halo {
        Halo::new(self.size.map(|d| d as u32), self.cut)
    }

    /// Whether some site reads no ghost (every cut axis has more than 2 sites): only then can a
    /// hopping term overlap its exchange.
    pub fn has_inner_sites(&self) -> bool {
        (1..4).all(|a| !halo::is_cut(self.cut, a) || self.size[a] > 2)
    }

    /// Complex elements of one stored parity (own sites, ghosts and staging) in a plain precision.
    pub fn parity_len(&self) -> usize {
        self.parity_slots::<f64>()
    }

    /// Complex slots of one stored parity (own sites, ghosts and staging) in storage `T`.
    pub fn parity_slots<T: WilsonStore>(&self) -> usize {
        self.halo().sites * T::SLOTS
    }

    /// The ghost exchange of one stored parity (element ranges in reals), one entry per cut axis (`t`,
    /// `z`, `y`): the first layer goes to the lower neighbour's upper ghost, the last to the upper
    /// neighbour's lower ghost (every axis is periodic; the sign of the global `t` boundary is the
    /// kernel's). Layers across `z` and `y` leave from their staging, which [`PackFaces`] fills.
    pub fn sides(&self) -> Vec<SideLayers> {
        self.sides_of::<f64>()
    }

    /// [`sides`](Self::sides) for a spinor in storage `T`, in its numbers.
    pub fn sides_of<T: WilsonStore>(&self) -> Vec<SideLayers> {
        let h = self.halo();
        let per_site = 2 * T::SLOTS;
        let reals = |first: usize, sites: usize| per_site * first..per_site * (first + sites);
        [3, 2, 1]
            .into_iter()
            .filter(|&a| halo::is_cut(self.cut, a))
            .map(|a| {
                let room = h.room(a);
                let (first, last) = if a == 3 {
                    let v = self.local().half_volume();
                    (0, v - room)
                } else {
                    (h.stage[a], h.stage[a] + room)
                };
                let peer = |side| {
                    self.pairs
                        .neighbour(self.rank, a, side)
                        .unwrap_or(self.rank)
                };
                SideLayers {
                    lower: Neighbour {
                        peer: peer(Side::Lower),
                        send: reals(first, room),
                        recv: reals(h.ghost[a] + room, room),
                    },
                    upper: Neighbour {
                        peer: peer(Side::Upper),
                        send: reals(last, room),
                        recv: reals(h.ghost[a], room),
                    },
                }
            })
            .collect()
    }

    /// The global site of each stored site of `parity` (own sites, then the ghosts of each cut axis).
    fn global_sites(&self, parity: usize) -> Vec<(usize, usize)> {
        let local = self.local();
        let h = self.halo();
        let dims = self.size.map(|d| d as u32);
        let global = |c: [usize; 4], axis: usize, step: isize| {
            let mut g: [usize; 4] = std::array::from_fn(|a| self.origin[a] + c[a]);
            let n = self.global.dims[axis] as isize;
            g[axis] = (g[axis] as isize + step).rem_euclid(n) as usize;
            self.global.index(g)
        };
        let mut sites = Vec::new();
        for n in (0..local.volume()).filter(|&n| local.parity(n) == parity) {
            let c = local.coords(n);
            sites.push((n / 2, global(c, 0, 0)));
            // Each ghost holds its neighbour's layer at the face index of this block's layer beside it.
            for a in (1..4).filter(|&a| halo::is_cut(self.cut, a)) {
                let f = halo::face_index(dims, c.map(|v| v as u32), a);
                if c[a] == 0 {
                    sites.push((h.ghost[a] + f, global(c, a, self.size[a] as isize)));
                }
                if c[a] + 1 == self.size[a] {
                    sites.push((
                        h.ghost[a] + h.room(a) + f,
                        global(c, a, -(self.size[a] as isize)),
                    ));
                }
            }
        }
        sites
    }

    /// One parity of the global `psi` on this rank, ghosts filled (as an exchange would), staging zero.
    pub fn pack_parity<T: WilsonStore>(&self, psi: &[Complex64], parity: usize) -> Vec<T::Elem> {
        pack_spinor::<T>(
            2 * self.parity_slots::<T>(),
            self.global_sites(parity).into_iter(),
            psi,
        )
    }

    /// Writes this rank's sites of one parity from the stored layout (`data`, ghosts after them ignored)
    /// into the global lexicographic `psi`; the other ranks' sites are left as they are.
    pub fn unpack_parity<T: WilsonStore>(
        &self,
        data: &[T::Elem],
        parity: usize,
        psi: &mut [Complex64],
    ) {
        let v = self.local().half_volume();
        let own = self
            .global_sites(parity)
            .into_iter()
            .filter(|&(cb, _)| cb < v);
        unpack_spinor::<T>(own, data, psi)
    }

    /// Reals of this rank's links with `recon` entries per link ([`pack_gauge`](Self::pack_gauge)).
    pub fn gauge_len(&self, recon: Recon) -> usize {
        2 * 8 * (self.halo().link_sites / TILE) * recon.entries() * TILE
    }

    /// This rank's links of the global field `u`, with the ghosts' after each parity and direction's
    /// own sites (the backward hops across a lower edge read the lower ghost's).
    pub fn pack_gauge<T: WilsonStore>(&self, u: &GaugeField, recon: Recon) -> Vec<T::Elem> {
        let tiles = self.halo().link_sites / TILE;
        pack_links::<T, _>(tiles, |p| self.global_sites(p).into_iter(), u, recon)
    }
}

/// The Wilson-Dirac operator of one gauge field on the GPU: the whole lattice, or one rank's block of a
/// lattice split over GPUs.
pub struct WilsonGpu<T: WilsonStorage> {
    gpu: Arc<Gpu>,
    /// The lattice this GPU holds (a rank's block).
    lat: Lattice,
    gauge: DeviceBuffer<T::Elem>,
    recon: Recon,
    kappa: f64,
    tmp: DeviceBuffer<T::Elem>,
    /// `gamma_5` of the input of the adjoint ([`EvenOdd`]'s `apply_dagger`), made at its first use.
    g5: OnceLock<DeviceBuffer<T::Elem>>,
    /// Blocks of the fused iteration's cooperative launch, found once (an occupancy query per launch
    /// would cost every iteration host time).
    fused_blocks: OnceLock<u32>,
    split: Option<Split<T>>,
    /// Threads per block of the hopping kernel ([`tune_block`](Self::tune_block)).
    block: u32,
    /// Threads per block of the face packing of a split lattice ([`tune_block`](Self::tune_block)).
    pack_block: u32,
}

/// Threads per block of the hopping kernel until [`WilsonGpu::tune_block`] picks: 128, the launch of
/// the benchmarks before the kernel was tuned.
pub const HOPPING_BLOCK: u32 = 128;

/// The threads per block [`WilsonGpu::tune_block`] tries: whole warps, since each warp holds one tile
/// of [`TILE`] sites.
pub const HOPPING_BLOCKS: [u32; 5] = [64, 128, 256, 512, 1024];

/// Threads per block of the face packing until [`WilsonGpu::tune_block`] picks.
pub const PACK_BLOCK: u32 = 128;

/// The threads per block [`WilsonGpu::tune_block`] tries for the face packing (one thread a site of a
/// face).
pub const PACK_BLOCKS: [u32; 4] = [64, 128, 256, 512];

/// The tuner's name of the face packing's threads per block.
const PACK: &str = "pack";

/// A rank's part of a split operator.
struct Split<T: WilsonStorage> {
    block: Block,
    /// One parity's ghost exchange, per cut axis.
    sides: Vec<SideLayers>,
    ranks: Box<dyn DeviceRanks<T::Elem>>,
    /// Whether the sites that read no ghost run while the ghosts travel.
    overlap: bool,
    /// The block's sites, those that read no ghost first ([`Dslash::sites`]).
    sites: DeviceBuffer<u32>,
}

impl<T: WilsonStorage> WilsonGpu<T> {
    /// Uploads `u` for the operator with hopping parameter `kappa`. Checks the memory first.
    pub fn new(
        gpu: &Arc<Gpu>,
        lat: &Lattice,
        u: &GaugeField,
        kappa: f64,
        recon: Recon,
    ) -> Result<Self> {
        let links = pack_gauge::<T>(lat, u, recon);
        Self::with_links(
            gpu,
            *lat,
            &links,
            parity_slots::<T>(lat),
            kappa,
            recon,
            None,
        )
    }

    /// This rank's `block` of a lattice split over the GPUs of `ranks` (its rank `block.rank`, of as
    /// many as the block's grid has), from the whole field `u`: each hopping term first fills its
    /// input's ghosts through `ranks`, with the sites that read none running meanwhile if `overlap`
    /// (and `ranks` does not wait for the GPU).
    pub fn split(
        gpu: &Arc<Gpu>,
        block: Block,
        u: &GaugeField,
        kappa: f64,
        recon: Recon,
        ranks: Box<dyn DeviceRanks<T::Elem>>,
        overlap: bool,
    ) -> Result<Self> {
        let grid: usize = block.grid.iter().product();
        if ranks.rank() != block.rank || ranks.size() != grid {
            return Err(crate::Error::InvalidParameter(format!(
                "the block of rank {} of {grid} on rank {} of {}: build each rank's block with its \
                 own rank and a grid of as many ranks",
                block.rank,
                ranks.rank(),
                ranks.size()
            )));
        }
        let links = block.pack_gauge::<T>(u, recon);
        let (local, storage) = (block.local(), block.parity_slots::<T>());
        let dims = local.dims.map(|d| d as u32);
        let order: Vec<u32> = edge_order(dims, block.cut_flags()).collect();
        let split = Split {
            sides: block.sides_of::<T>(),
            block,
            ranks,
            overlap,
            sites: DeviceBuffer::from_host(gpu, &order)?,
        };
        let w = Self::with_links(gpu, local, &links, storage, kappa, recon, Some(split))?;
        // NCCL connects to its peers at their first exchange and first sum: once here, so that no
        // solver block held behind a wait for the host (waitkernel, streamwait) waits on a connection.
        if let Some(s) = &w.split {
            if !s.sides.is_empty() {
                s.ranks.start_layers(&w.tmp, &s.sides)?;
                s.ranks.finish_layers()?;
            }
            s.ranks.sum_in_place(&DeviceBuffer::zeros(gpu, 4)?)?;
            gpu.synchronize()?;
        }
        Ok(w)
    }

    fn with_links(
        gpu: &Arc<Gpu>,
        lat: Lattice,
        links: &[T::Elem],
        storage: usize,
        kappa: f64,
        recon: Recon,
        split: Option<Split<T>>,
    ) -> Result<Self> {
        let bytes = (links.len() + 2 * storage) as u64 * std::mem::size_of::<T::Elem>() as u64;
        gpu.check_fits(bytes, "the gauge field")?;
        Ok(Self {
            gpu: gpu.clone(),
            lat,
            gauge: DeviceBuffer::from_host(gpu, links)?,
            recon,
            kappa,
            tmp: DeviceBuffer::zeros(gpu, 2 * storage)?,
            g5: OnceLock::new(),
            fused_blocks: OnceLock::new(),
            split,
            block: HOPPING_BLOCK,
            pack_block: PACK_BLOCK,
        })
    }

    /// Threads per block of the hopping kernel.
    pub fn hopping_block(&self) -> u32 {
        self.block
    }

    /// Threads per block of the face packing (which runs on a lattice split across z or y).
    pub fn pack_block(&self) -> u32 {
        self.pack_block
    }

    /// Sets the hopping kernel's threads per block, and on a lattice split across z or y the face
    /// packing's: the tune cache's for this lattice (a rank's block and its cuts), precision and
    /// reconstruction on this GPU, else the fastest of [`HOPPING_BLOCKS`] (and [`PACK_BLOCKS`]) timed
    /// on the hopping term (about 2 ms of calls each), stored in `cache`. On a split lattice each
    /// call times the exchange with it: every rank calls this together, and they run the same calls.
    pub fn tune_block(&mut self, cache: &mut TuneCache, retune: bool) -> Result<Option<Tuned>> {
        let mut inp = self.parity_buffer()?;
        inp.upload(&self.filled(0.5))?;
        let out = self.parity_buffer()?;
        let gpu = self.gpu.clone();
        let mut launch = HoppingLaunch {
            w: self,
            out: &out,
            inp: &inp,
        };
        tune_calibrated(&mut launch, |l, t| l.w.rank_mean(t), &gpu, cache, retune)
    }

    /// The mean of `x` over the ranks of a split lattice (collective); `x` on a whole one.
    pub(crate) fn rank_mean(&self, x: f64) -> lattice_gpu_host::Result<f64> {
        let Some(s) = &self.split else {
            return Ok(x);
        };
        let buf = DeviceBuffer::from_host(&self.gpu, &[x])?;
        s.ranks.sum_in_place(&buf)?;
        Ok(buf.download()?[0] / s.ranks.size() as f64)
    }

    /// Whether this lattice packs faces before its exchange (it is split across z or y).
    fn packs_faces(&self) -> bool {
        self.split
            .as_ref()
            .is_some_and(|s| !s.sides.is_empty() && s.block.cut_flags() & (Z_CUT | Y_CUT) != 0)
    }

    /// This rank's block, on a split lattice.
    pub fn block(&self) -> Option<&Block> {
        self.split.as_ref().map(|s| &s.block)
    }

    /// Complex slots a spinor of one parity is stored in (with ghosts and staging on a split
    /// lattice): its complex elements in a plain precision.
    pub fn storage_len(&self) -> usize {
        match &self.split {
            Some(s) => s.block.parity_slots::<T>(),
            None => parity_slots::<T>(&self.lat),
        }
    }

    /// A stored parity whose every site (ghosts and staging too) holds `v` in each component.
    pub(crate) fn filled(&self, v: f64) -> Vec<T::Elem> {
        // Every stored site takes the spinor of site 0 of a one-site field.
        let sites = (0..self.storage_len() / T::SLOTS).map(|cb| (cb, 0));
        pack_spinor::<T>(2 * self.storage_len(), sites, &[Complex64::new(v, v); 12])
    }

    /// The lattice this GPU holds (a rank's block on a split lattice).
    pub fn lattice(&self) -> &Lattice {
        &self.lat
    }

    /// The hopping parameter.
    pub fn kappa(&self) -> f64 {
        self.kappa
    }

    /// A zeroed spinor of one parity.
    pub fn parity_buffer(&self) -> Result<DeviceBuffer<T::Elem>> {
        Ok(DeviceBuffer::zeros(&self.gpu, 2 * self.storage_len())?)
    }

    /// Uploads one parity of a lexicographic spinor of the whole lattice (this rank's block of it, on a
    /// split lattice).
    pub fn upload_parity(&self, psi: &SpinorField, parity: usize) -> Result<DeviceBuffer<T::Elem>> {
        let data = match &self.split {
            Some(s) => s.block.pack_parity::<T>(&psi.data, parity),
            None => pack_parity::<T>(&self.lat, &psi.data, parity),
        };
        Ok(DeviceBuffer::from_host(&self.gpu, &data)?)
    }

    /// Writes one parity from the GPU into the whole lattice's `psi` (this rank's sites, on a split
    /// lattice).
    pub fn download_parity(
        &self,
        buf: &DeviceBuffer<T::Elem>,
        parity: usize,
        psi: &mut SpinorField,
    ) -> Result<()> {
        let data = buf.download()?;
        match &self.split {
            Some(s) => s.block.unpack_parity::<T>(&data, parity, &mut psi.data),
            None => unpack_parity::<T>(&self.lat, &data, parity, &mut psi.data),
        }
        Ok(())
    }

    /// Queues `out = x + a H inp` (or `a H inp` without `x`) on the sites of `parity`; `inp` holds the
    /// other parity. On a split lattice the ghosts of `inp` are exchanged first.
    pub fn hopping(
        &self,
        out: &DeviceBuffer<T::Elem>,
        parity: usize,
        inp: &DeviceBuffer<T::Elem>,
        x: Option<&DeviceBuffer<T::Elem>>,
        a: f64,
        halt: Option<Span<'_, u32>>,
    ) -> Result<()> {
        self.launch_after_exchange(inp, |cut| {
            self.launch_hopping(out, parity, inp, x, a, halt, cut)
        })
    }

    /// Queues the packing of `buf`'s layers across `z` and `y` into their staging ([`PackFaces`]).
    fn pack_faces(&self, buf: &DeviceBuffer<T::Elem>, cut: u32) -> Result<()> {
        let p = PackFaces::<T> {
            spinor: std::ptr::null_mut(),
            dims: self.lat.dims.map(|d| d as u32),
            cut,
        }
        .bind(buf.span_mut())
        .map_err(HostError::from)?;
        Ok(self
            .gpu
            .launch_items(self.gpu.stream(), &p, self.pack_block)?)
    }

    /// Queues the hopping kernel: on the whole lattice (`cut` none), or with the split kernel's
    /// [`Dslash::cut`] word (its sites and edges).
    #[allow(clippy::too_many_arguments)]
    fn launch_hopping(
        &self,
        out: &DeviceBuffer<T::Elem>,
        parity: usize,
        inp: &DeviceBuffer<T::Elem>,
        x: Option<&DeviceBuffer<T::Elem>>,
        a: f64,
        halt: Option<Span<'_, u32>>,
        cut: Option<u32>,
    ) -> Result<()> {
        let word = cut.unwrap_or(0);
        macro_rules! go {
            ($r:literal, $split:literal) => {{
                let mem = HopFields {
                    out: out.span_mut(),
                    inp: inp.span(),
                    gauge: self.gauge.span(),
                    x: x.map(|b| b.span()),
                    halt,
                    sites: self.split.as_ref().map(|s| s.sites.span()),
                };
                let d = dslash_numbers::<T, $r, $split>(&self.lat, a, parity as u32, word)
                    .bind(mem)
                    .map_err(HostError::from)?;
                self.gpu.launch_items(self.gpu.stream(), &d, self.block)
            }};
        }
        Ok(match (self.recon, cut.is_some()) {
            (Recon::R18, false) => go!(9, false),
            (Recon::R12, false) => go!(6, false),
            (Recon::R18, true) => go!(9, true),
            (Recon::R12, true) => go!(6, true),
        }?)
    }

    /// One hopping term on one parity as a [`Cost`]: its sites, [`hopping_flops`](Self::hopping_flops)
    /// and its least DRAM traffic ([`hopping_min_bytes`](Self::hopping_min_bytes)), whose rate against
    /// the copy bandwidth is the roofline fraction.
    pub fn hopping_cost(&self, with_x: bool) -> Cost {
        Cost {
            points: self.lat.half_volume() as f64,
            flops: self.hopping_flops() as f64,
            bytes: self.hopping_min_bytes(with_x) as f64,
        }
    }

    /// Floating-point operations of one hopping term on one parity.
    pub fn hopping_flops(&self) -> u64 {
        FLOPS_PER_SITE * self.lat.half_volume() as u64
    }

    /// Bytes of one hopping term on one parity in QUDA's model: per site, 8 neighbour spinors and 8
    /// links as stored (no cache reuse, output not counted). The figure QUDA's GB/s are quoted in.
    pub fn hopping_bytes(&self) -> u64 {
        let per_site = 8 * (self.spinor_bytes() + self.link_bytes());
        per_site as u64 * self.lat.half_volume() as u64
    }

    /// Bytes of one stored spinor site (a fixed-point site's norm included).
    fn spinor_bytes(&self) -> usize {
        2 * T::SLOTS * std::mem::size_of::<T::Elem>()
    }

    /// Bytes of one stored link.
    fn link_bytes(&self) -> usize {
        2 * self.recon.entries() * std::mem::size_of::<T::Elem>()
    }

    /// Bytes one hopping term on one parity must move through DRAM at the least: every link of the
    /// lattice once (8 per output site), each input spinor once (the caches serve its other 7 reads), the
    /// output once, and `x` once if added. Against the copy bandwidth this is the roofline fraction.
    pub fn hopping_min_bytes(&self, with_x: bool) -> u64 {
        let spinors = 2 + usize::from(with_x);
        let per_site = 8 * self.link_bytes() + spinors * self.spinor_bytes();
        per_site as u64 * self.lat.half_volume() as u64
    }
}

/// `M_hat = 1 - kappa^2 H_eo H_oe` on even sites, for [`BiCgStab`].
pub struct EvenOdd<T: WilsonStorage>(pub WilsonGpu<T>);

impl<T: WilsonStorage> EvenOdd<T> {
    /// GPU milliseconds of one application of `M_hat` to the even part of `psi` (two hopping terms, on
    /// a split lattice each with its ghost exchange): the mean of `reps` after an untimed one.
    pub fn time_apply(&self, psi: &SpinorField, reps: u32) -> Result<f64> {
        let w = &self.0;
        let inp = w.upload_parity(psi, 0)?;
        let out = w.parity_buffer()?;
        self.apply(&out, &inp, None)?;
        let reps = reps.max(1);
        let ms = w.gpu.time_ms(|| {
            for _ in 0..reps {
                self.apply(&out, &inp, None)?;
            }
            Ok(())
        })?;
        Ok(ms / reps as f64)
    }
}

impl<T: WilsonStorage> DeviceOperator<T> for EvenOdd<T> {
    fn len(&self) -> usize {
        parity_slots::<T>(&self.0.lat)
    }

    fn storage_len(&self) -> usize {
        self.0.storage_len()
    }

    fn ranks(&self) -> Option<&dyn DeviceRanks<T::Elem>> {
        self.0.split.as_ref().map(|s| &*s.ranks)
    }

    fn apply(
        &self,
        out: &DeviceBuffer<T::Elem>,
        inp: &DeviceBuffer<T::Elem>,
        halt: Option<Span<'_, u32>>,
    ) -> lattice_gpu_host::Result<()> {
        let w = &self.0;
        let k2 = w.kappa * w.kappa;
        w.hopping(&w.tmp, 1, inp, None, 1.0, halt)?;
        Ok(w.hopping(out, 0, &w.tmp, Some(inp), -k2, halt)?)
    }

    /// `M_hat^dag = gamma_5 M_hat gamma_5`: `M_hat` is gamma_5-hermitian as `D` is, for
    /// `H_eo^dag = gamma_5 H_oe gamma_5`, so `(H_eo H_oe)^dag = gamma_5 H_eo H_oe gamma_5`.
    fn apply_dagger(
        &self,
        out: &DeviceBuffer<T::Elem>,
        inp: &DeviceBuffer<T::Elem>,
        halt: Option<Span<'_, u32>>,
    ) -> lattice_gpu_host::Result<()> {
        self.0
            .gamma5_conjugated(out, inp, halt, |o, i| self.apply(o, i, halt))
    }

    fn flops(&self) -> u64 {
        2 * self.0.hopping_flops()
    }

    fn queue_fused_iteration(
        &self,
        f: FusedVectors<'_, T::Elem>,
    ) -> lattice_gpu_host::Result<bool> {
        T::queue_fused(self, f)
    }

    fn fused_pays(&self) -> lattice_gpu_host::Result<bool> {
        T::fused_pays(self)
    }
}

/// The fused iteration, in a plain precision.
impl<T: WilsonReal> EvenOdd<T> {
    /// Blocks of the fused iteration's cooperative launch: as many as the GPU runs at once, at most one
    /// per [`FUSED_BLOCK`] elements (found once).
    fn fused_blocks(&self) -> lattice_gpu_host::Result<u32> {
        let w = &self.0;
        if let Some(&b) = w.fused_blocks.get() {
            return Ok(b);
        }
        let b = w
            .gpu
            .cooperative_blocks(T::FUSED[(w.recon == Recon::R12) as usize], FUSED_BLOCK)?
            .min(Gpu::blocks_for(parity_len(&w.lat), FUSED_BLOCK));
        Ok(*w.fused_blocks.get_or_init(|| b))
    }

    /// The iteration as one cooperative kernel ([`FusedIteration`]): as many blocks of
    /// [`FUSED_BLOCK`] threads as the GPU runs at once, at most one per `FUSED_BLOCK` elements.
    fn queue_fused(&self, f: FusedVectors<'_, T>) -> lattice_gpu_host::Result<bool> {
        let w = &self.0;
        if w.split.is_some() {
            return Ok(false);
        }
        let blocks = self.fused_blocks()?.min((f.partials.len() / 8) as u32);
        let [x, r, r0, p, v, s, t] = f.vectors.map(|b| b.span_mut());
        macro_rules! go {
            ($r:literal) => {{
                let args = FusedIteration::<T, $r> {
                    // The phases set the vectors, factor and parity.
                    hop: dslash_numbers(&w.lat, 1.0, 0, 0),
                    kappa2: T::from_f64(w.kappa * w.kappa),
                    vec: [std::ptr::null_mut(); 8],
                    n: parity_len(&w.lat) as u32,
                    state: std::ptr::null_mut(),
                    partials: std::ptr::null_mut(),
                    barrier: GridBarrier {
                        count: std::ptr::null_mut(),
                    },
                    phases: Phase::ALL.len() as u32,
                    blocks: 0,
                }
                .bind(FusedFields {
                    gauge: w.gauge.span(),
                    vec: [x, r, r0, p, v, s, t, w.tmp.span_mut()],
                    state: f.state,
                    // Only as many partials as the blocks this GPU runs at once use.
                    partials: f.partials.span_mut().prefix(8 * blocks as usize),
                    barrier: f.barrier.span_mut(),
                })
                .map_err(HostError::from)?;
                w.gpu.launch_cooperative_kernel(&args)
            }};
        }
        match w.recon {
            Recon::R18 => go!(9),
            Recon::R12 => go!(6),
        }?;
        Ok(true)
    }

    /// When the cooperative grid holds every site's tile at once, so that each hopping phase is one
    /// pass: measured 3.4x faster than nine kernels at 8^4 (one pass), 1.25x slower at 16^4 (eight).
    fn fused_pays_here(&self) -> lattice_gpu_host::Result<bool> {
        if self.0.split.is_some() {
            return Ok(false);
        }
        let tiles = self.0.lat.half_volume().div_ceil(TILE);
        Ok(tiles <= self.fused_blocks()? as usize)
    }
}

/// The hopping term `out = 0.5 H inp` on the even sites (on a split lattice with its exchange), tuned
/// over its threads per block (and the face packing's): the lattice (a rank's block and its cuts),
/// precision and reconstruction key the cache.
struct HoppingLaunch<'a, T: WilsonStorage> {
    w: &'a mut WilsonGpu<T>,
    out: &'a DeviceBuffer<T::Elem>,
    inp: &'a DeviceBuffer<T::Elem>,
}

impl<T: WilsonStorage> Tunable for HoppingLaunch<'_, T> {
    fn tune_key(&self) -> (String, String, String) {
        let w = &*self.w;
        let d = w.lat.dims;
        let cut = match &w.split {
            Some(s) => format!("/cut{}", s.block.cut_flags()),
            None => String::new(),
        };
        (
            format!(
                "{}[r{}]",
                dslash_entry::<T>(w.recon, w.split.is_some()),
                w.recon.name()
            ),
            format!("{}x{}x{}x{}{cut}", d[0], d[1], d[2], d[3]),
            T::PRECISION.to_string(),
        )
    }

    fn candidates(&self) -> Vec<Vec<(String, u32)>> {
        let hopping = blocks(&HOPPING_BLOCKS);
        if !self.w.packs_faces() {
            return hopping;
        }
        hopping
            .iter()
            .flat_map(|h| {
                PACK_BLOCKS.map(|p| {
                    let mut c = h.clone();
                    c.push((PACK.to_string(), p));
                    c
                })
            })
            .collect()
    }

    fn set_params(&mut self, params: &[(String, u32)]) -> lattice_gpu_host::Result<bool> {
        let w = &mut *self.w;
        let max = w
            .gpu
            .max_block_of(dslash_entry::<T>(w.recon, w.split.is_some()))?;
        let whole_warps = |b: u32| b > 0 && b.is_multiple_of(32);
        let pack = match (param(params, PACK), w.packs_faces()) {
            (Some(p), true) if whole_warps(p) && PACK_BLOCKS.contains(&p) => p,
            (None, false) => w.pack_block,
            _ => return Ok(false),
        };
        match param(params, BLOCK) {
            Some(b) if whole_warps(b) && b <= max => {
                w.block = b;
                w.pack_block = pack;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn on_all_ranks(&self, here: bool) -> lattice_gpu_host::Result<bool> {
        Ok(self.w.rank_mean(f64::from(u8::from(here)))? == 1.0)
    }

    fn cost(&self) -> Cost {
        self.w.hopping_cost(false)
    }

    fn time_ms(&mut self, calls: u64) -> lattice_gpu_host::Result<f64> {
        let w = &*self.w;
        w.gpu.time_ms(|| {
            for _ in 0..calls {
                w.hopping(self.out, 0, self.inp, None, 0.5, None)?;
            }
            Ok(())
        })
    }
}

/// Solves `D x = b` on the full lattice by even-odd preconditioning: BiCGStab on
/// `M_hat x_e = b_e + kappa H_eo b_o`, then `x_o = b_o + kappa H_oe x_e`. Returns `x`, the solver's report
/// and the true relative residual `|b - D x| / |b|`, computed on the GPU. The solver is reused across
/// solves (its work space and captured graphs). On a split lattice every rank passes the whole `b` and
/// gets its own sites of `x` (the others zero); the residual is the whole lattice's.
pub fn solve_with<T: WilsonReal>(
    solver: &mut BiCgStab<T, EvenOdd<T>>,
    b: &SpinorField,
    opt: &SolveOptions,
    on_check: &mut dyn FnMut(usize, f64) -> lattice_gpu_host::Result<()>,
) -> Result<(SpinorField, SolveReport, f64)> {
    let w = &solver.operator().0;
    let kappa = w.kappa;
    let b_e = w.upload_parity(b, 0)?;
    let b_o = w.upload_parity(b, 1)?;
    let src = w.parity_buffer()?;
    w.hopping(&src, 0, &b_o, Some(&b_e), kappa, None)?;
    let mut x_e = w.parity_buffer()?;
    let report = solver.solve(&src, &mut x_e, opt, on_check)?;
    let w = &solver.operator().0;
    let odd = w.odd_sites_and_dirac(&x_e, &b_o)?;
    let (x, true_res) = even_odd_solution(w, b.dims, &x_e, odd, [&b_e, &b_o], |a, b| {
        solver.diff_norms(a, b)
    })?;
    Ok((x, report, true_res))
}

/// [`solve_with`] in mixed precision: the even-odd system solved by `solver` (BiCGStab or CGNR with
/// reliable updates, [`MixedOptions`]), sloppy iterations in `S`, the true residual and the odd
/// sites in the outer precision `H`. Returns `x`, the report (its residual the even system's,
/// relative to its source) and the true relative residual `|b - D x| / |b|` of the full system,
/// computed on the GPU in `H`.
///
/// The tolerance is the full system's: with `x_o` rebuilt from `x_e`, `b - D x` is the even system's
/// residual on the even sites and zero on the odd ones, so the even system is solved to
/// `tol |b| / |b_e + kappa H_eo b_o|`, and `|b - D x| <= tol |b|` follows.
pub fn solve_mixed_with<H: WilsonReal, S: WilsonStorage>(
    solver: &mut MixedBiCgStab<H, S, EvenOdd<H>, EvenOdd<S>>,
    b: &SpinorField,
    opt: &MixedOptions,
    on_check: &mut dyn FnMut(usize, f64) -> lattice_gpu_host::Result<()>,
) -> Result<(SpinorField, MixedReport, f64)> {
    let w = &solver.operator().0;
    let kappa = w.kappa;
    let b_e = w.upload_parity(b, 0)?;
    let b_o = w.upload_parity(b, 1)?;
    let src = w.parity_buffer()?;
    w.hopping(&src, 0, &b_o, Some(&b_e), kappa, None)?;
    let mut x_e = w.parity_buffer()?;
    let opt = even_system_options(solver, opt, [&b_e, &b_o], &src)?;
    let report = solver.solve(&src, &mut x_e, &opt, on_check)?;
    let w = &solver.operator().0;
    let odd = w.odd_sites_and_dirac(&x_e, &b_o)?;
    let (x, true_res) = even_odd_solution(w, b.dims, &x_e, odd, [&b_e, &b_o], |a, b| {
        solver.diff_norms(a, b)
    })?;
    Ok((x, report, true_res))
}

/// The end of every even-odd solve (Wilson or clover, one precision or mixed): from the solution's
/// even sites `x_e` and `[x_o, (D x)_e, (D x)_o]`, the full solution downloaded and the true relative
/// residual `|b - D x| / |b|` for the source parities `b`, each parity's `(|D x - b|^2, |b|^2)` from
/// the solver's `diff_norms` (summed over the ranks of a split lattice).
pub(crate) fn even_odd_solution<T: WilsonStorage>(
    w: &WilsonGpu<T>,
    dims: [usize; 4],
    x_e: &DeviceBuffer<T::Elem>,
    [x_o, dx_e, dx_o]: [DeviceBuffer<T::Elem>; 3],
    [b_e, b_o]: [&DeviceBuffer<T::Elem>; 2],
    diff_norms: impl Fn(
        &DeviceBuffer<T::Elem>,
        &DeviceBuffer<T::Elem>,
    ) -> lattice_gpu_host::Result<(f64, f64)>,
) -> Result<(SpinorField, f64)> {
    let true_res = relative_residual([diff_norms(&dx_e, b_e)?, diff_norms(&dx_o, b_o)?]);
    Ok((w.download_full(dims, x_e, &x_o)?, true_res))
}

/// `opt` with the tolerance of the even-site system whose source is `src`, for a full system whose
/// source has the parities `b`: with `x_o` rebuilt from `x_e`, `b - D x` is the even system's residual
/// on the even sites and zero on the odd ones (Wilson and clover alike), so reaching
/// `tol |b| / |src|` there gives `|b - D x| <= tol |b|`.
pub(crate) fn even_system_options<H, S, OH, OS>(
    solver: &mut MixedBiCgStab<H, S, OH, OS>,
    opt: &MixedOptions,
    b: [&DeviceBuffer<H>; 2],
    src: &DeviceBuffer<H>,
) -> Result<MixedOptions>
where
    H: Outer,
    S: SolverPrecision,
    OH: DeviceOperator<H>,
    OS: DeviceOperator<S>,
{
    let b_norm2 = solver.norm2(b[0])? + solver.norm2(b[1])?;
    let src_norm2 = solver.norm2(src)?;
    let mut opt = *opt;
    if src_norm2 > 0.0 {
        opt.solve.tol = (opt.solve.tol * (b_norm2 / src_norm2).sqrt()).min(opt.solve.tol.max(0.5));
    }
    Ok(opt)
}

/// Tunes a hopping launch through the one tuner with calls enough for about 2 ms a candidate and pass
/// (one call is 5 us at 8^4, 1 ms at 48^3x96). The ranks of a split lattice take the mean of the
/// calibrating time (`rank_mean`, collective), so that they run the same number of calls.
pub(crate) fn tune_calibrated<L: Tunable>(
    launch: &mut L,
    rank_mean: impl Fn(&L, f64) -> lattice_gpu_host::Result<f64>,
    gpu: &Gpu,
    cache: &mut TuneCache,
    retune: bool,
) -> Result<Option<Tuned>> {
    let build = (gpu.name(), gpu.module_hash(lattice_gpu_kernels::MODULE)?);
    launch.time_ms(1)?;
    let once = launch.time_ms(1)?;
    let once = rank_mean(launch, once)?.max(1e-3);
    let trials = Trials {
        rounds: 2,
        settle: 2,
        timed: ((2.0 / once) as u64).clamp(5, 1000),
    };
    Ok(tune(launch, cache, build, retune, true, trials)?)
}

/// `|b - D x| / |b|` from each parity's `(|D x - b|^2, |b|^2)`: 0 for `b = 0`.
pub(crate) fn relative_residual(parities: [(f64, f64); 2]) -> f64 {
    let [(re, be), (ro, bo)] = parities;
    if be + bo > 0.0 {
        ((re + ro) / (be + bo)).sqrt()
    } else {
        0.0
    }
}

/// `gamma_5` on one parity in the tiled layout ([`pack_parity`]) on the CPU, with the GPU kernel's own
/// element body ([`Gamma5`]).
pub fn gamma5_on_host<T: WilsonStorage>(data: &mut [T::Elem]) {
    let n = data.len() / 2;
    let p = data.as_mut_ptr();
    let g = Gamma5::<T> {
        n: n as u32,
        out: p,
        inp: p,
        halt: std::ptr::null(),
    };
    for i in 0..n {
        // SAFETY: `i < n`, the slice's complex elements; in place, one element at a time.
        unsafe { g.element(i) };
    }
}

/// The hopping term on the CPU, running the GPU kernel's own site body over the sites with rayon:
/// `out = x + a H inp` on `parity`, all fields in the tiled layout (as [`pack_parity`], [`pack_gauge`]).
#[allow(clippy::too_many_arguments)]
pub fn hopping_on_host<T: WilsonStorage>(
    lat: &Lattice,
    gauge: &[T::Elem],
    recon: Recon,
    out: &mut [T::Elem],
    parity: usize,
    inp: &[T::Elem],
    x: Option<&[T::Elem]>,
    a: f64,
) {
    hopping_with::<T, false>(lat, 0, gauge, recon, out, parity, inp, x, a)
}

/// [`hopping_on_host`] on one rank's block of a split: `inp` and `gauge` with their ghosts
/// ([`Block::pack_parity`], [`Block::pack_gauge`]), `out` and `x` this rank's sites.
#[allow(clippy::too_many_arguments)]
pub fn hopping_on_block<T: WilsonStorage>(
    block: &Block,
    gauge: &[T::Elem],
    recon: Recon,
    out: &mut [T::Elem],
    parity: usize,
    inp: &[T::Elem],
    x: Option<&[T::Elem]>,
    a: f64,
) {
    assert_eq!(inp.len(), 2 * block.parity_slots::<T>());
    hopping_with::<T, true>(
        &block.local(),
        block.cut_flags(),
        gauge,
        recon,
        out,
        parity,
        inp,
        x,
        a,
    )
}

/// [`PackFaces`] on the CPU (the GPU kernel's own body): `data` is one stored parity of `block`.
pub fn pack_faces_on_host<T: WilsonStorage>(block: &Block, data: &mut [T::Elem]) {
    assert_eq!(data.len(), 2 * block.parity_slots::<T>());
    let mut p = PackFaces::<T> {
        spinor: std::ptr::null_mut(),
        dims: block.size.map(|d| d as u32),
        cut: block.cut_flags(),
    }
    .bind(SpanMut::of(data))
    .expect("a stored parity of the block (checked length)");
    run_on_host(&mut p, 1).expect("bound to host memory");
}

#[allow(clippy::too_many_arguments)]
fn hopping_with<T: WilsonStorage, const SPLIT: bool>(
    lat: &Lattice,
    cut: u32,
    gauge: &[T::Elem],
    recon: Recon,
    out: &mut [T::Elem],
    parity: usize,
    inp: &[T::Elem],
    x: Option<&[T::Elem]>,
    a: f64,
) {
    // The tiled layouts must match exactly: a longer slice means the caller packed another lattice.
    let len = 2 * parity_slots::<T>(lat);
    assert!(out.len() == len && x.is_none_or(|x| x.len() == len));
    macro_rules! go {
        ($r:literal) => {{
            let mem = HopFields {
                out: SpanMut::of(out),
                inp: Span::of(inp),
                gauge: Span::of(gauge),
                x: x.map(Span::of),
                halt: None,
                // Every site, in order: no INNER or OUTER selection here.
                sites: None,
            };
            let mut d = dslash_numbers::<T, $r, SPLIT>(lat, a, parity as u32, cut)
                .bind(mem)
                .expect("fields in this lattice's tiled layouts");
            run_on_host(&mut d, 64).expect("bound to host memory");
        }};
    }
    match recon {
        Recon::R18 => go!(9),
        Recon::R12 => go!(6),
    }
}

/// The numbers of `out = x + a H inp` on the sites of `parity` of `lat` (a rank's block cut as `cut`
/// says), to bind to the fields ([`Dslash::bind`]): one definition for the GPU and the CPU.
pub(crate) fn dslash_numbers<T: WilsonStorage, const R: usize, const SPLIT: bool>(
    lat: &Lattice,
    a: f64,
    parity: u32,
    cut: u32,
) -> Dslash<T, R, SPLIT> {
    let null = std::ptr::null();
    Dslash {
        out: std::ptr::null_mut(),
        inp: null,
        gauge: null,
        x: null,
        a: T::Real::from_f64(a),
        t_boundary: T::Real::from_f64(if lat.antiperiodic_t { -1.0 } else { 1.0 }),
        dims: lat.dims.map(|d| d as u32),
        parity,
        halt: std::ptr::null(),
        cut,
        sites: std::ptr::null(),
    }
}

/// Hooks for operators built on this one's gauge field and ghost exchange (the clover operator,
/// [`crate::clover_gpu`]), and the steps every even-odd solve ends with.
impl<T: WilsonStorage> WilsonGpu<T> {
    /// After an even-odd solve for `x_e`: `x_o = b_o + kappa H_oe x_e`, then `D x` parity by parity
    /// (for the true residual), as `[x_o, (D x)_e, (D x)_o]`.
    pub(crate) fn odd_sites_and_dirac(
        &self,
        x_e: &DeviceBuffer<T::Elem>,
        b_o: &DeviceBuffer<T::Elem>,
    ) -> Result<[DeviceBuffer<T::Elem>; 3]> {
        let kappa = self.kappa;
        let (x_o, dx_e, dx_o) = (
            self.parity_buffer()?,
            self.parity_buffer()?,
            self.parity_buffer()?,
        );
        self.hopping(&x_o, 1, x_e, Some(b_o), kappa, None)?;
        self.hopping(&dx_e, 0, &x_o, Some(x_e), -kappa, None)?;
        self.hopping(&dx_o, 1, x_e, Some(&x_o), -kappa, None)?;
        Ok([x_o, dx_e, dx_o])
    }

    /// The whole lattice's spinor from its two parities on the GPU (this rank's sites, on a split
    /// lattice; the others zero).
    pub fn download_full(
        &self,
        dims: [usize; 4],
        even: &DeviceBuffer<T::Elem>,
        odd: &DeviceBuffer<T::Elem>,
    ) -> Result<SpinorField> {
        let mut x = SpinorField::zeros(dims);
        self.download_parity(even, 0, &mut x)?;
        self.download_parity(odd, 1, &mut x)?;
        Ok(x)
    }

    /// The GPU.
    pub(crate) fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The links, in the layout of [`pack_gauge`] (or [`Block::pack_gauge`]).
    pub(crate) fn gauge_buffer(&self) -> &DeviceBuffer<T::Elem> {
        &self.gauge
    }

    /// How many numbers of each link are stored.
    pub(crate) fn recon(&self) -> Recon {
        self.recon
    }

    /// The operator's temporary parity (ghosts included).
    pub(crate) fn tmp_buffer(&self) -> &DeviceBuffer<T::Elem> {
        &self.tmp
    }

    /// Queues `out = gamma_5 A gamma_5 inp` for the even-odd operator `A` that `apply(out, inp)`
    /// queues: its adjoint, where `A` is gamma_5-hermitian (the Wilson and the clover `M_hat`). The
    /// scratch parity is made at the first call. Nothing runs when `halt` is given and set.
    pub(crate) fn gamma5_conjugated(
        &self,
        out: &DeviceBuffer<T::Elem>,
        inp: &DeviceBuffer<T::Elem>,
        halt: Option<Span<'_, u32>>,
        apply: impl FnOnce(
            &DeviceBuffer<T::Elem>,
            &DeviceBuffer<T::Elem>,
        ) -> lattice_gpu_host::Result<()>,
    ) -> lattice_gpu_host::Result<()> {
        let g5 = match self.g5.get() {
            Some(b) => b,
            None => {
                let b = DeviceBuffer::zeros(&self.gpu, 2 * self.storage_len())?;
                self.g5.get_or_init(|| b)
            }
        };
        self.gamma5(g5, inp, halt)?;
        apply(out, g5)?;
        self.gamma5(out, out, halt)
    }

    /// Queues `out = gamma_5 inp` on one parity (`out` may be `inp`); nothing when `halt` is given and
    /// set.
    fn gamma5(
        &self,
        out: &DeviceBuffer<T::Elem>,
        inp: &DeviceBuffer<T::Elem>,
        halt: Option<Span<'_, u32>>,
    ) -> lattice_gpu_host::Result<()> {
        let n = parity_slots::<T>(&self.lat);
        let args = Gamma5::<T> {
            n: n as u32,
            out: out.ptr(),
            inp: inp.ptr(),
            halt: halt.map_or(std::ptr::null(), |h| h.ptr()),
        };
        let block = 256;
        let blocks = Gpu::blocks_for(n, block).min(8 * self.gpu.sm_count());
        // SAFETY: the entry takes one `Gamma5<T>`; both buffers hold a parity's `n` slots.
        unsafe { self.gpu.launch(T::GAMMA5, &args, blocks, block) }
    }

    /// On a split lattice, the block's sites in edge order ([`Dslash::sites`]).
    pub(crate) fn edge_sites(&self) -> Option<&DeviceBuffer<u32>> {
        self.split.as_ref().map(|s| &s.sites)
    }

    /// The ranks of a split lattice.
    pub(crate) fn device_ranks(&self) -> Option<&dyn DeviceRanks<T::Elem>> {
        self.split.as_ref().map(|s| &*s.ranks)
    }

    /// Queues `launch(cut)`, a kernel computing whole sites of one parity from the hops into `inp`, as
    /// [`hopping`](Self::hopping) queues the hopping kernel: `cut` none on a whole lattice; on a split
    /// one the [`Dslash::cut`] word after `inp`'s ghosts are exchanged, or with [`INNER`] while they
    /// travel and [`OUTER`] after.
    pub(crate) fn launch_after_exchange(
        &self,
        inp: &DeviceBuffer<T::Elem>,
        launch: impl Fn(Option<u32>) -> Result<()>,
    ) -> Result<()> {
        let Some(s) = &self.split else {
            return launch(None);
        };
        let word = s.block.cut_flags();
        if s.sides.is_empty() {
            return launch(Some(word));
        }
        if word & (Z_CUT | Y_CUT) != 0 {
            self.pack_faces(inp, word)?;
        }
        s.ranks.start_layers(inp, &s.sides)?;
        if s.overlap && !s.ranks.waits_for_gpu() && s.block.has_inner_sites() {
            launch(Some(word | INNER))?;
            s.ranks.finish_layers()?;
            launch(Some(word | OUTER))
        } else {
            s.ranks.finish_layers()?;
            launch(Some(word))
        }
    }
}
