//! The Wilson-Dirac operator on the GPU: fields in the tiled structure-of-arrays layout of
//! `lattice_gpu_kernels::wilson`, the hopping term on one parity, the even-odd operator
//! `M_hat = 1 - kappa^2 H_eo H_oe` for the device BiCGStab, and the full-system solve with its true
//! residual.

use std::sync::{Arc, OnceLock};

use lattice_gpu_host::krylov::{BiCgStab, DeviceOperator, FusedVectors, SolveOptions, SolveReport};
use lattice_gpu_host::split::{DeviceRanks, Neighbour, SideLayers};
use lattice_gpu_host::{DeviceBuffer, Element, Gpu};
use lattice_gpu_kernels::complex::ComplexReal;
use lattice_gpu_kernels::device::grid::GridBarrier;
use lattice_gpu_kernels::stencil::GpuEntry;
use lattice_gpu_kernels::wilson::{
    tile_index, Dslash, FusedIteration, Phase, FLOPS_PER_SITE, FUSED_BLOCK, TILE, T_HIGH_EDGE,
    T_INNER, T_LOW_EDGE, T_OUTER, T_SPLIT,
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

/// A precision of the Wilson fields (f32 or f64), with its kernels in the embedded PTX.
pub trait WilsonReal:
    Element + ComplexReal + Default + Unpin + lattice_gpu_host::comm::Wire
{
    /// The hopping-term entry for each link storage, on one lattice or on a rank's slab of a `t` split.
    fn dslash_entry(recon: Recon, split: bool) -> &'static str;
    /// The fused BiCGStab iteration's entry for each link storage.
    fn fused_entry(recon: Recon) -> &'static str;
}

macro_rules! wilson_real {
    ($t:ty) => {
        impl WilsonReal for $t {
            fn dslash_entry(recon: Recon, split: bool) -> &'static str {
                match (recon, split) {
                    (Recon::R18, false) => <Dslash<$t, 9> as GpuEntry>::ENTRY,
                    (Recon::R12, false) => <Dslash<$t, 6> as GpuEntry>::ENTRY,
                    (Recon::R18, true) => <Dslash<$t, 9, true> as GpuEntry>::ENTRY,
                    (Recon::R12, true) => <Dslash<$t, 6, true> as GpuEntry>::ENTRY,
                }
            }
            fn fused_entry(recon: Recon) -> &'static str {
                match recon {
                    Recon::R18 => <FusedIteration<$t, 9> as GpuEntry>::ENTRY,
                    Recon::R12 => <FusedIteration<$t, 6> as GpuEntry>::ENTRY,
                }
            }
        }
    };
}
wilson_real!(f32);
wilson_real!(f64);

/// Complex elements of one parity's spinor in the tiled layout (padding included).
pub fn parity_len(lat: &Lattice) -> usize {
    lat.half_volume().div_ceil(TILE) * TILE * 12
}

/// One parity of `psi` in the tiled layout, as reals (re, im interleaved).
pub fn pack_parity<T: WilsonReal>(lat: &Lattice, psi: &[Complex64], parity: usize) -> Vec<T> {
    pack_spinor(2 * parity_len(lat), sites_of(lat, parity), psi)
}

/// The sites of `parity` as (stored site, site of the lattice).
fn sites_of(lat: &Lattice, parity: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
    (0..lat.volume())
        .filter(move |&n| lat.parity(n) == parity)
        .map(|n| (n / 2, n))
}

/// `len` reals holding, for each (stored site, site of `psi`) of `sites`, that site's spinor.
fn pack_spinor<T: WilsonReal>(
    len: usize,
    sites: impl Iterator<Item = (usize, usize)>,
    psi: &[Complex64],
) -> Vec<T> {
    let mut out = vec![T::ZERO; len];
    for (cb, n) in sites {
        let at = tile_index(cb, 12);
        for k in 0..12 {
            let z = psi[n * 12 + k];
            out[2 * (at + k * TILE)] = T::from_f64(z.re);
            out[2 * (at + k * TILE) + 1] = T::from_f64(z.im);
        }
    }
    out
}

/// The links of `u` with `recon` entries, `tiles` tiles per parity and direction, for each (stored
/// site, site of `u`) that `sites` gives for a parity.
fn pack_links<T: WilsonReal, I: Iterator<Item = (usize, usize)>>(
    tiles: usize,
    sites: impl Fn(usize) -> I,
    u: &GaugeField,
    recon: Recon,
) -> Vec<T> {
    let r = recon.entries();
    let mut out = vec![T::ZERO; 2 * 8 * tiles * r * TILE];
    for p in 0..2 {
        for (cb, n) in sites(p) {
            for mu in 0..4 {
                let at = (p * 4 + mu) * tiles * r * TILE + tile_index(cb, r);
                let link = &u.links[4 * n + mu];
                for k in 0..r {
                    let z = link[(k / 3, k % 3)];
                    out[2 * (at + k * TILE)] = T::from_f64(z.re);
                    out[2 * (at + k * TILE) + 1] = T::from_f64(z.im);
                }
            }
        }
    }
    out
}

/// Writes one parity from the tiled layout back into `psi` (lexicographic, 12 per site).
pub fn unpack_parity<T: WilsonReal>(
    lat: &Lattice,
    data: &[T],
    parity: usize,
    psi: &mut [Complex64],
) {
    unpack_spinor(sites_of(lat, parity), data, psi)
}

/// For each (stored site, site of `psi`) of `sites`, that site's spinor from `data` into `psi`.
fn unpack_spinor<T: WilsonReal>(
    sites: impl Iterator<Item = (usize, usize)>,
    data: &[T],
    psi: &mut [Complex64],
) {
    for (cb, n) in sites {
        let at = tile_index(cb, 12);
        for k in 0..12 {
            let i = 2 * (at + k * TILE);
            psi[n * 12 + k] = Complex64::new(data[i].to_f64(), data[i + 1].to_f64());
        }
    }
}

/// The gauge field in the tiled layout with `recon` entries per link.
pub fn pack_gauge<T: WilsonReal>(lat: &Lattice, u: &GaugeField, recon: Recon) -> Vec<T> {
    let tiles = lat.half_volume().div_ceil(TILE);
    pack_links(tiles, |p| sites_of(lat, p), u, recon)
}

/// One rank's share of a lattice split along `t`: slices `t0..t0 + nt` of `global`, with a ghost slice
/// on each side for the hops that cross its `t` edges ([`Dslash::t_split`]). In the tiled layout a
/// slice of one parity is a whole number of tiles (its `X Y Z / 2` sites a multiple of [`TILE`]), so
/// each ghost slice is one contiguous range: the upper neighbour's first slice `[0, S)` lands at
/// `[V, V + S)` after this rank's `V` sites, the lower neighbour's last slice `[V - S, V)` at
/// `[V + S, V + 2 S)`.
#[derive(Clone, Copy, Debug)]
pub struct TSlab {
    /// The whole lattice.
    pub global: Lattice,
    /// First global slice of this rank.
    pub t0: usize,
    /// Slices of this rank.
    pub nt: usize,
}

impl TSlab {
    /// `global`'s slices `t0..t0 + nt`; both even (so that local and global parities agree), and a
    /// slice of one parity a whole number of tiles.
    pub fn new(global: Lattice, t0: usize, nt: usize) -> Result<Self> {
        let [x, y, z, t] = global.dims;
        if nt == 0 || !t0.is_multiple_of(2) || !nt.is_multiple_of(2) || t0 + nt > t {
            return Err(crate::Error::InvalidParameter(format!(
                "t slices {t0}..{} of a lattice of {t}: a rank needs an even number of slices \
                 starting at an even one (even-odd ordering)",
                t0 + nt
            )));
        }
        if !(x * y * z / 2).is_multiple_of(TILE) {
            return Err(crate::Error::InvalidParameter(format!(
                "a t split needs X Y Z / 2 = {} sites per slice and parity to be a multiple of {TILE}",
                x * y * z / 2
            )));
        }
        Ok(Self { global, t0, nt })
    }

    /// Rank `rank`'s slab of `global` split over `ranks` ranks: the `T / 2` pairs of slices dealt out
    /// as evenly as they go (the first ranks take one pair more).
    pub fn for_rank(global: Lattice, rank: usize, ranks: usize) -> Result<Self> {
        let pairs = global.dims[3] / 2;
        if ranks == 0 || ranks > pairs {
            return Err(crate::Error::InvalidParameter(format!(
                "a lattice of T = {} split over {ranks} GPUs: each needs at least 2 t slices (even-odd \
                 ordering); use at most {pairs} GPUs or a longer lattice",
                global.dims[3]
            )));
        }
        let (base, extra) = (pairs / ranks, pairs % ranks);
        let first = rank * base + rank.min(extra);
        Self::new(global, 2 * first, 2 * (base + usize::from(rank < extra)))
    }

    /// The ghost exchange of one parity's spinor of rank `rank` of `ranks` (element ranges in reals):
    /// the first slice goes to the lower neighbour's upper ghost, the last to the upper neighbour's
    /// lower ghost (`t` is periodic; the sign of the global boundary is the kernel's).
    pub fn sides(&self, rank: usize, ranks: usize) -> SideLayers {
        let slice = 24 * self.slice_sites();
        let v = 24 * self.local().half_volume();
        SideLayers {
            lower: Neighbour {
                peer: (rank + ranks - 1) % ranks,
                send: 0..slice,
                recv: v + slice..v + 2 * slice,
            },
            upper: Neighbour {
                peer: (rank + 1) % ranks,
                send: v - slice..v,
                recv: v..v + slice,
            },
        }
    }

    /// This rank's lattice (`nt` slices).
    pub fn local(&self) -> Lattice {
        let [x, y, z, _] = self.global.dims;
        Lattice {
            dims: [x, y, z, self.nt],
            ..self.global
        }
    }

    /// [`Dslash::t_split`] of this rank.
    pub fn t_split(&self) -> u32 {
        let low = if self.t0 == 0 { T_LOW_EDGE } else { 0 };
        let high = if self.t0 + self.nt == self.global.dims[3] {
            T_HIGH_EDGE
        } else {
            0
        };
        T_SPLIT | low | high
    }

    /// Sites of one parity in one slice.
    pub fn slice_sites(&self) -> usize {
        let [x, y, z, _] = self.global.dims;
        x * y * z / 2
    }

    /// Sites of one parity with the two ghost slices.
    fn sites(&self) -> usize {
        self.local().half_volume() + 2 * self.slice_sites()
    }

    /// Complex elements of one parity's spinor with its ghost slices.
    pub fn parity_len(&self) -> usize {
        self.sites().div_ceil(TILE) * TILE * 12
    }

    /// The global site of each stored site `cb` of `parity` (interior, upper ghost, lower ghost).
    fn global_sites(&self, parity: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let local = self.local();
        let (v, s) = (local.half_volume(), self.slice_sites());
        let t_all = self.global.dims[3];
        (0..local.volume())
            .filter(move |&n| local.parity(n) == parity)
            .flat_map(move |n| {
                let [x, y, z, t] = local.coords(n);
                let at = |gt: usize| self.global.index([x, y, z, gt % t_all]);
                let mut sites = vec![(n / 2, at(self.t0 + t))];
                // Each ghost slice holds its rank's sites at the same place as this rank's own slice
                // on that side: the upper neighbour's first slice, the lower one's last.
                if t == 0 {
                    sites.push((v + n / 2, at(self.t0 + self.nt)));
                }
                if t + 1 == self.nt {
                    sites.push((n / 2 + 2 * s, at(self.t0 + t_all - 1)));
                }
                sites
            })
    }

    /// One parity of the global `psi` on this rank, ghost slices filled (as an exchange would).
    pub fn pack_parity<T: WilsonReal>(&self, psi: &[Complex64], parity: usize) -> Vec<T> {
        pack_spinor(2 * self.parity_len(), self.global_sites(parity), psi)
    }

    /// Writes this rank's sites of one parity from the tiled layout (`data`, ghosts after them ignored)
    /// into the global lexicographic `psi`; the other ranks' sites are left as they are.
    pub fn unpack_parity<T: WilsonReal>(&self, data: &[T], parity: usize, psi: &mut [Complex64]) {
        let v = self.local().half_volume();
        let own = self.global_sites(parity).filter(|&(cb, _)| cb < v);
        unpack_spinor(own, data, psi)
    }

    /// This rank's links of the global field `u`, with the ghost slices' after each parity and
    /// direction (the backward `t` hops of the first slice read the lower ghost's).
    pub fn pack_gauge<T: WilsonReal>(&self, u: &GaugeField, recon: Recon) -> Vec<T> {
        let tiles = self.sites().div_ceil(TILE);
        pack_links(tiles, |p| self.global_sites(p), u, recon)
    }
}

/// The Wilson-Dirac operator of one gauge field on the GPU: the whole lattice, or one rank's slab of a
/// lattice split along `t` over GPUs.
pub struct WilsonGpu<T> {
    gpu: Arc<Gpu>,
    /// The lattice this GPU holds (a rank's slab).
    lat: Lattice,
    gauge: DeviceBuffer<T>,
    recon: Recon,
    kappa: f64,
    tmp: DeviceBuffer<T>,
    /// Blocks of the fused iteration's cooperative launch, found once (an occupancy query per launch
    /// would cost every iteration host time).
    fused_blocks: OnceLock<u32>,
    split: Option<Split<T>>,
}

/// A rank's part of an operator split along `t`.
struct Split<T> {
    slab: TSlab,
    /// One parity's ghost exchange.
    sides: SideLayers,
    ranks: Box<dyn DeviceRanks<T>>,
    /// Whether the inner slices run while the ghosts travel.
    overlap: bool,
}

impl<T: WilsonReal> WilsonGpu<T> {
    /// Uploads `u` for the operator with hopping parameter `kappa`. Checks the memory first.
    pub fn new(
        gpu: &Arc<Gpu>,
        lat: &Lattice,
        u: &GaugeField,
        kappa: f64,
        recon: Recon,
    ) -> Result<Self> {
        let links = pack_gauge::<T>(lat, u, recon);
        Self::with_links(gpu, *lat, &links, parity_len(lat), kappa, recon, None)
    }

    /// Rank `ranks.rank()`'s slab of `global` split along `t` over the GPUs of `ranks`
    /// ([`TSlab::for_rank`]), from the whole field `u`: each hopping term first fills its input's
    /// ghost slices through `ranks`, with the inner slices running meanwhile if `overlap` (and `ranks`
    /// does not wait for the GPU).
    pub fn split(
        gpu: &Arc<Gpu>,
        global: &Lattice,
        u: &GaugeField,
        kappa: f64,
        recon: Recon,
        ranks: Box<dyn DeviceRanks<T>>,
        overlap: bool,
    ) -> Result<Self> {
        let slab = TSlab::for_rank(*global, ranks.rank(), ranks.size())?;
        let links = slab.pack_gauge::<T>(u, recon);
        let split = Split {
            slab,
            sides: slab.sides(ranks.rank(), ranks.size()),
            ranks,
            overlap,
        };
        let local = slab.local();
        let storage = slab.parity_len();
        let w = Self::with_links(gpu, local, &links, storage, kappa, recon, Some(split))?;
        // NCCL connects to its peers at their first exchange and first sum: once here, so that no
        // solver block held behind a wait for the host (waitkernel, streamwait) waits on a connection.
        if let Some(s) = &w.split {
            s.ranks.start_layers(&w.tmp, &s.sides)?;
            s.ranks.finish_layers()?;
            s.ranks.sum_in_place(&DeviceBuffer::zeros(gpu, 4)?)?;
            gpu.synchronize()?;
        }
        Ok(w)
    }

    fn with_links(
        gpu: &Arc<Gpu>,
        lat: Lattice,
        links: &[T],
        storage: usize,
        kappa: f64,
        recon: Recon,
        split: Option<Split<T>>,
    ) -> Result<Self> {
        let bytes = (links.len() + 2 * storage) as u64 * std::mem::size_of::<T>() as u64;
        gpu.check_fits(bytes, "the gauge field")?;
        Ok(Self {
            gpu: gpu.clone(),
            lat,
            gauge: DeviceBuffer::from_host(gpu, links)?,
            recon,
            kappa,
            tmp: DeviceBuffer::zeros(gpu, 2 * storage)?,
            fused_blocks: OnceLock::new(),
            split,
        })
    }

    /// This rank's slab, on a split lattice.
    pub fn slab(&self) -> Option<&TSlab> {
        self.split.as_ref().map(|s| &s.slab)
    }

    /// Complex elements a spinor of one parity is stored in (with ghost slices on a split lattice).
    pub fn storage_len(&self) -> usize {
        match &self.split {
            Some(s) => s.slab.parity_len(),
            None => parity_len(&self.lat),
        }
    }

    /// The lattice this GPU holds (a rank's slab on a split lattice).
    pub fn lattice(&self) -> &Lattice {
        &self.lat
    }

    /// The hopping parameter.
    pub fn kappa(&self) -> f64 {
        self.kappa
    }

    /// A zeroed spinor of one parity.
    pub fn parity_buffer(&self) -> Result<DeviceBuffer<T>> {
        Ok(DeviceBuffer::zeros(&self.gpu, 2 * self.storage_len())?)
    }

    /// Uploads one parity of a lexicographic spinor of the whole lattice (this rank's slab of it, on a
    /// split lattice).
    pub fn upload_parity(&self, psi: &SpinorField, parity: usize) -> Result<DeviceBuffer<T>> {
        let data = match &self.split {
            Some(s) => s.slab.pack_parity::<T>(&psi.data, parity),
            None => pack_parity::<T>(&self.lat, &psi.data, parity),
        };
        Ok(DeviceBuffer::from_host(&self.gpu, &data)?)
    }

    /// Writes one parity from the GPU into the whole lattice's `psi` (this rank's sites, on a split
    /// lattice).
    pub fn download_parity(
        &self,
        buf: &DeviceBuffer<T>,
        parity: usize,
        psi: &mut SpinorField,
    ) -> Result<()> {
        let data = buf.download()?;
        match &self.split {
            Some(s) => s.slab.unpack_parity(&data, parity, &mut psi.data),
            None => unpack_parity(&self.lat, &data, parity, &mut psi.data),
        }
        Ok(())
    }

    /// Queues `out = x + a H inp` (or `a H inp` without `x`) on the sites of `parity`; `inp` holds the
    /// other parity. On a split lattice the ghost slices of `inp` are exchanged first.
    pub fn hopping(
        &self,
        out: &DeviceBuffer<T>,
        parity: usize,
        inp: &DeviceBuffer<T>,
        x: Option<&DeviceBuffer<T>>,
        a: f64,
        halt: *const u32,
    ) -> Result<()> {
        let hop = |t_split| self.launch_hopping(out, parity, inp, x, a, halt, t_split);
        let Some(s) = &self.split else {
            return hop(None);
        };
        let word = s.slab.t_split();
        s.ranks.start_layers(inp, &s.sides)?;
        if s.overlap && !s.ranks.waits_for_gpu() && s.slab.nt > 2 {
            hop(Some(word | T_INNER))?;
            s.ranks.finish_layers()?;
            hop(Some(word | T_OUTER))
        } else {
            s.ranks.finish_layers()?;
            hop(Some(word))
        }
    }

    /// Queues the hopping kernel: on the whole lattice (`t_split` none), or with the split kernel's
    /// [`Dslash::t_split`] word (its sites and edges).
    #[allow(clippy::too_many_arguments)]
    fn launch_hopping(
        &self,
        out: &DeviceBuffer<T>,
        parity: usize,
        inp: &DeviceBuffer<T>,
        x: Option<&DeviceBuffer<T>>,
        a: f64,
        halt: *const u32,
        t_split: Option<u32>,
    ) -> Result<()> {
        let x = x.map_or(std::ptr::null(), |b| b.ptr::<T>() as *const T);
        let word = t_split.unwrap_or(0);
        macro_rules! go {
            ($r:literal, $split:literal) => {{
                let d = self.dslash::<$r, $split>(out.ptr(), inp.ptr(), x, a, parity as u32, halt, word);
                // SAFETY: the entry takes one `Dslash<T, R, SPLIT>`; the buffers have this lattice's
                // tiled layouts (built by this type, with ghost slices when split) and the grid covers
                // exactly the sites the word selects.
                unsafe {
                    self.gpu.launch(
                        T::dslash_entry(self.recon, $split),
                        &d,
                        Gpu::blocks_for(d.threads(), 128),
                        128,
                    )
                }
            }};
        }
        Ok(match (self.recon, t_split.is_some()) {
            (Recon::R18, false) => go!(9, false),
            (Recon::R12, false) => go!(6, false),
            (Recon::R18, true) => go!(9, true),
            (Recon::R12, true) => go!(6, true),
        }?)
    }

    /// The kernel arguments of `out = x + a H inp` on the sites of `parity`, for this lattice and gauge
    /// field.
    #[allow(clippy::too_many_arguments)]
    fn dslash<const R: usize, const SPLIT: bool>(
        &self,
        out: *mut T,
        inp: *const T,
        x: *const T,
        a: f64,
        parity: u32,
        halt: *const u32,
        t_split: u32,
    ) -> Dslash<T, R, SPLIT> {
        Dslash {
            out,
            inp,
            gauge: self.gauge.ptr::<T>(),
            x,
            a: T::from_f64(a),
            t_boundary: T::from_f64(if self.lat.antiperiodic_t { -1.0 } else { 1.0 }),
            dims: self.lat.dims.map(|d| d as u32),
            parity,
            halt,
            t_split,
        }
    }

    /// Floating-point operations of one hopping term on one parity.
    pub fn hopping_flops(&self) -> u64 {
        FLOPS_PER_SITE * self.lat.half_volume() as u64
    }

    /// Bytes of one hopping term on one parity in QUDA's model: per site, 8 neighbour spinors and 8
    /// links as stored (no cache reuse, output not counted). The figure QUDA's GB/s are quoted in.
    pub fn hopping_bytes(&self) -> u64 {
        let per_site = 8 * (24 + 2 * self.recon.entries()) * std::mem::size_of::<T>();
        per_site as u64 * self.lat.half_volume() as u64
    }

    /// Bytes one hopping term on one parity must move through DRAM at the least: every link of the
    /// lattice once (8 per output site), each input spinor once (the caches serve its other 7 reads), the
    /// output once, and `x` once if added. Against the copy bandwidth this is the roofline fraction.
    pub fn hopping_min_bytes(&self, with_x: bool) -> u64 {
        let reals = 8 * 2 * self.recon.entries() + 24 + 24 + if with_x { 24 } else { 0 };
        (reals * std::mem::size_of::<T>()) as u64 * self.lat.half_volume() as u64
    }
}

/// `M_hat = 1 - kappa^2 H_eo H_oe` on even sites, for [`BiCgStab`].
pub struct EvenOdd<T>(pub WilsonGpu<T>);

impl<T: WilsonReal> EvenOdd<T> {
    /// GPU milliseconds of one application of `M_hat` to the even part of `psi` (two hopping terms, on
    /// a split lattice each with its ghost exchange): the mean of `reps` after an untimed one.
    pub fn time_apply(&self, psi: &SpinorField, reps: u32) -> Result<f64> {
        let w = &self.0;
        let inp = w.upload_parity(psi, 0)?;
        let out = w.parity_buffer()?;
        let null = std::ptr::null();
        self.apply(&out, &inp, null)?;
        let reps = reps.max(1);
        let ms = w.gpu.time_ms(|| {
            for _ in 0..reps {
                self.apply(&out, &inp, null)?;
            }
            Ok(())
        })?;
        Ok(ms / reps as f64)
    }

    /// Blocks of the fused iteration's cooperative launch: as many as the GPU runs at once, at most one
    /// per [`FUSED_BLOCK`] elements (found once).
    fn fused_blocks(&self) -> lattice_gpu_host::Result<u32> {
        let w = &self.0;
        if let Some(&b) = w.fused_blocks.get() {
            return Ok(b);
        }
        let b = w
            .gpu
            .cooperative_blocks(T::fused_entry(w.recon), FUSED_BLOCK)?
            .min(Gpu::blocks_for(parity_len(&w.lat), FUSED_BLOCK));
        Ok(*w.fused_blocks.get_or_init(|| b))
    }
}

impl<T: WilsonReal> DeviceOperator<T> for EvenOdd<T> {
    fn len(&self) -> usize {
        parity_len(&self.0.lat)
    }

    fn storage_len(&self) -> usize {
        self.0.storage_len()
    }

    fn ranks(&self) -> Option<&dyn DeviceRanks<T>> {
        self.0.split.as_ref().map(|s| &*s.ranks)
    }

    fn apply(
        &self,
        out: &DeviceBuffer<T>,
        inp: &DeviceBuffer<T>,
        halt: *const u32,
    ) -> lattice_gpu_host::Result<()> {
        let w = &self.0;
        let k2 = w.kappa * w.kappa;
        w.hopping(&w.tmp, 1, inp, None, 1.0, halt)?;
        Ok(w.hopping(out, 0, &w.tmp, Some(inp), -k2, halt)?)
    }

    fn flops(&self) -> u64 {
        2 * self.0.hopping_flops()
    }

    /// The iteration as one cooperative kernel ([`FusedIteration`]): as many blocks of
    /// [`FUSED_BLOCK`] threads as the GPU runs at once, at most one per `FUSED_BLOCK` elements.
    fn queue_fused_iteration(&self, f: &FusedVectors<'_, T>) -> lattice_gpu_host::Result<bool> {
        let w = &self.0;
        if w.split.is_some() {
            return Ok(false);
        }
        let n = parity_len(&w.lat);
        let entry = T::fused_entry(w.recon);
        let blocks = self.fused_blocks()?.min((f.partials.len() / 8) as u32);
        let [x, r, r0, p, v, s, t] = f.vectors.map(|b| b.ptr::<T>());
        let barrier: *mut u32 = f.barrier.ptr();
        macro_rules! go {
            ($r:literal) => {{
                let null = std::ptr::null();
                let args = FusedIteration::<T, $r> {
                    // The phases set the vectors, factor and parity.
                    hop: w.dslash(std::ptr::null_mut(), null, null, 1.0, 0, std::ptr::null(), 0),
                    kappa2: T::from_f64(w.kappa * w.kappa),
                    vec: [x, r, r0, p, v, s, t, w.tmp.ptr::<T>()],
                    n: n as u32,
                    state: f.state,
                    partials: f.partials.ptr(),
                    barrier: GridBarrier { count: barrier },
                    phases: Phase::ALL.len() as u32,
                };
                // SAFETY: the entry takes one `FusedIteration<T, R>`; the vectors and the gauge field
                // have this lattice's layouts, `partials` room for 8 per block, the barrier's word is
                // this solver's alone (one launch at a time on its stream), and `blocks` is within
                // what the GPU runs at once.
                unsafe { w.gpu.launch_cooperative(entry, &args, blocks, FUSED_BLOCK) }
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
    fn fused_pays(&self) -> lattice_gpu_host::Result<bool> {
        if self.0.split.is_some() {
            return Ok(false);
        }
        let tiles = self.0.lat.half_volume().div_ceil(TILE);
        Ok(tiles <= self.fused_blocks()? as usize)
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
    on_check: &mut dyn FnMut(usize, f64),
) -> Result<(SpinorField, SolveReport, f64)> {
    let w = &solver.operator().0;
    let kappa = w.kappa;
    let b_e = w.upload_parity(b, 0)?;
    let b_o = w.upload_parity(b, 1)?;
    let src = w.parity_buffer()?;
    w.hopping(&src, 0, &b_o, Some(&b_e), kappa, std::ptr::null())?;
    let mut x_e = w.parity_buffer()?;
    let report = solver.solve(&src, &mut x_e, opt, on_check)?;
    let w = &solver.operator().0;
    let x_o = w.parity_buffer()?;
    w.hopping(&x_o, 1, &x_e, Some(&b_o), kappa, std::ptr::null())?;
    // D x, parity by parity, for the true residual.
    let dx_e = w.parity_buffer()?;
    let dx_o = w.parity_buffer()?;
    w.hopping(&dx_e, 0, &x_o, Some(&x_e), -kappa, std::ptr::null())?;
    w.hopping(&dx_o, 1, &x_e, Some(&x_o), -kappa, std::ptr::null())?;
    let (re, be) = solver.diff_norms(&dx_e, &b_e)?;
    let (ro, bo) = solver.diff_norms(&dx_o, &b_o)?;
    let true_res = if be + bo > 0.0 {
        ((re + ro) / (be + bo)).sqrt()
    } else {
        0.0
    };
    let mut x = SpinorField::zeros(b.dims);
    let w = &solver.operator().0;
    w.download_parity(&x_e, 0, &mut x)?;
    w.download_parity(&x_o, 1, &mut x)?;
    Ok((x, report, true_res))
}

/// The hopping term on the CPU, running the GPU kernel's own site body over the sites with rayon:
/// `out = x + a H inp` on `parity`, all fields in the tiled layout (as [`pack_parity`], [`pack_gauge`]).
#[allow(clippy::too_many_arguments)]
pub fn hopping_on_host<T: WilsonReal>(
    lat: &Lattice,
    gauge: &[T],
    recon: Recon,
    out: &mut [T],
    parity: usize,
    inp: &[T],
    x: Option<&[T]>,
    a: f64,
) {
    hopping_with::<T, false>(lat, 0, gauge, recon, out, parity, inp, x, a)
}

/// [`hopping_on_host`] on one rank's slab of a `t` split: `inp` and `gauge` with their ghost slices
/// ([`TSlab::pack_parity`], [`TSlab::pack_gauge`]), `out` and `x` this rank's sites.
#[allow(clippy::too_many_arguments)]
pub fn hopping_on_slab<T: WilsonReal>(
    slab: &TSlab,
    gauge: &[T],
    recon: Recon,
    out: &mut [T],
    parity: usize,
    inp: &[T],
    x: Option<&[T]>,
    a: f64,
) {
    hopping_with::<T, true>(
        &slab.local(),
        slab.t_split(),
        gauge,
        recon,
        out,
        parity,
        inp,
        x,
        a,
    )
}

#[allow(clippy::too_many_arguments)]
fn hopping_with<T: WilsonReal, const SPLIT: bool>(
    lat: &Lattice,
    t_split: u32,
    gauge: &[T],
    recon: Recon,
    out: &mut [T],
    parity: usize,
    inp: &[T],
    x: Option<&[T]>,
    a: f64,
) {
    use rayon::prelude::*;
    let dims = lat.dims.map(|d| d as u32);
    let t_boundary = T::from_f64(if lat.antiperiodic_t { -1.0 } else { 1.0 });
    let x_ptr = x.map_or(std::ptr::null(), |x| x.as_ptr());
    let out_ptr = out.as_mut_ptr();
    macro_rules! go {
        ($r:literal) => {{
            let d = Dslash::<T, $r, SPLIT> {
                out: out_ptr,
                inp: inp.as_ptr(),
                gauge: gauge.as_ptr(),
                x: x_ptr,
                a: T::from_f64(a),
                t_boundary,
                dims,
                parity: parity as u32,
                halt: std::ptr::null(),
                t_split,
            };
            // Reals of the arrays a site may read: the interior (out, x), and with the ghost slices
            // (inp, and each parity and direction's links).
            let len = 2 * parity_len(lat);
            let tiles = d.link_sites().div_ceil(TILE);
            assert!(out.len() == len && x.is_none_or(|x| x.len() == len));
            assert_eq!(inp.len(), 2 * tiles * TILE * 12);
            assert_eq!(gauge.len(), 2 * 8 * tiles * $r * TILE);
            // SAFETY: the slices have the tiled layouts of this lattice (checked lengths), and each site
            // writes only its own 12 entries of `out`.
            (0..lat.half_volume())
                .into_par_iter()
                .for_each(|cb| unsafe { d.site(cb) });
        }};
    }
    match recon {
        Recon::R18 => go!(9),
        Recon::R12 => go!(6),
    }
}
