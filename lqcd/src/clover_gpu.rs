//! The Wilson-clover operator on the GPU: the clover field in the tiled layout of
//! `lattice_gpu_kernels::wilson::clover`, QUDA's asymmetric even-odd operator
//! `M_hat = A_ee - kappa^2 H_eo A_oo^{-1} H_oe` as two launches of the clover hopping kernel for the device
//! BiCGStab ([`CloverEvenOdd`]), the source `b_hat = b_e + kappa H_eo A_oo^{-1} b_o`, the reconstruction
//! `x_o = A_oo^{-1} (b_o + kappa H_oe x_e)`, and the full solve with its true residual
//! ([`solve_clover_with`]). A lattice split over GPUs uses [`WilsonGpu`]'s ghost exchange: the clover
//! term is per site, so each rank holds only its own sites' matrices.
//!
//! The GPU holds `A` of both parities (`M_hat` uses `A_ee`, the true residual `A_oo` too) and
//! `A^{-1}` of the odd sites (`M_hat`, the source and the reconstruction); `A_ee^{-1}` is never needed.
//! Each block is stored hermitian: the diagonal's real part and the mean of `C_ij` and `conj(C_ji)` above
//! it (the LU inverse of the CPU reference is hermitian only to rounding).

use std::sync::Arc;

use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::engine::tuner::{blocks, param, Tunable, Tuned, BLOCK};
use lattice_gpu_host::engine::Cost;
use lattice_gpu_host::kernel::run_on_host;
use lattice_gpu_host::solvers::bicgstab::{BiCgStab, DeviceOperator, SolveOptions, SolveReport};
use lattice_gpu_host::solvers::reliable::{MixedBiCgStab, MixedOptions, MixedReport};
use lattice_gpu_host::split::DeviceRanks;
use lattice_gpu_host::Error as HostError;
use lattice_gpu_host::{DeviceBuffer, Gpu};
use lattice_gpu_kernels::bind::{Span, SpanMut};
use lattice_gpu_kernels::complex::Complex;
use lattice_gpu_kernels::wilson::{
    clover_reals, edge_order, tile_index, upper_index, CloverDslash, CloverEntries, CloverFields,
    CloverMode, CloverSite, Fixed, Half, HopFields, WilsonStore, CLOVER_ENTRIES,
    CLOVER_FLOPS_PER_SITE, FLOPS_PER_SITE, INNER, OUTER, TILE,
};

use crate::clover::{CloverBlock, CloverField};
use crate::gauge::GaugeField;
use crate::geometry::Lattice;
use crate::gpu::{
    dslash_numbers, even_odd_solution, even_system_options, parity_slots, Block, Recon, WilsonGpu,
    WilsonReal, WilsonStorage, HOPPING_BLOCK, HOPPING_BLOCKS,
};
use crate::spinor::SpinorField;
use crate::{Error, Result};

/// A storage of the clover fields (f32, f64 or half precision), with its clover kernels in the
/// embedded PTX. Buffers hold its [`Elem`](lattice_gpu_kernels::solver_store::SolverStore::Elem).
pub trait CloverStorage: WilsonStorage + CloverEntries {}

impl CloverStorage for f32 {}
impl CloverStorage for f64 {}
impl CloverStorage for Half {}
impl CloverStorage for Fixed {}

/// A plain precision of the clover fields (f32 or f64, stored as it computes), which the device
/// solvers iterate in.
pub trait CloverReal: CloverStorage + WilsonReal {}

impl CloverReal for f32 {}
impl CloverReal for f64 {}

/// The bound on the rounding of QUDA's even-odd clover operator `M_hat` in half precision
/// ([`Half`]: binary16 spinors with a norm per site, binary16 links and clover entries, f32
/// arithmetic), relative to the f64 result in the 2-norm over the even sites: `2^-10`. Each of its two
/// clover hopping terms is within the hopping term's bound ([`HALF_HOPPING_BOUND`](crate::gpu::HALF_HOPPING_BOUND),
/// `2^-11`), and its clover rows add the rounding of their entries (`2^-12` of each, summed over six
/// terms near the unit diagonal) and one more rounding of the stored site. Measured on random fields
/// (`c_sw` 1.1, `kappa` 0.12): `3.5e-4` (`lqcd/tests/clover_gpu.rs`).
pub const HALF_CLOVER_BOUND: f64 = 1.0 / 1024.0;

/// [`HALF_CLOVER_BOUND`] in 16-bit fixed point ([`Fixed`]: 15-bit spinors, links and clover entries,
/// a clover site's scaled by its largest): `2^-13`, each hopping term within
/// [`FIXED_HOPPING_BOUND`](crate::gpu::FIXED_HOPPING_BOUND) and the clover rows adding their entries'
/// rounding (`2^-16` of the site's largest, six terms a row) and the stored site's. Measured on random
/// fields (`c_sw` 1.1, `kappa` 0.12): `4.3e-5` (`lqcd/tests/clover_gpu.rs`).
pub const FIXED_CLOVER_BOUND: f64 = 1.0 / 8192.0;

/// Which per-site matrix of a [`CloverField`] a packed field holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloverPart {
    /// `A`.
    A,
    /// `A^{-1}`.
    Inverse,
}

/// Numbers of the clover field of one parity of `lat` in storage `T`'s tiled layout (padding
/// included).
pub fn clover_len<T: WilsonStore>(lat: &Lattice) -> usize {
    clover_reals::<T>(lat.half_volume())
}

/// One parity of `clover` (`A` or `A^{-1}`) in the tiled layout of the clover kernels.
pub fn pack_clover<T: CloverStorage>(
    lat: &Lattice,
    clover: &CloverField,
    parity: usize,
    part: CloverPart,
) -> Vec<T::Elem> {
    let sites = (0..lat.volume())
        .filter(|&n| lat.parity(n) == parity)
        .map(|n| (n / 2, n));
    pack_sites::<T>(lat.half_volume(), sites, clover, part)
}

/// One parity of `clover` on `block`'s own sites (the kernels read no ghost's clover term).
pub fn pack_clover_block<T: CloverStorage>(
    block: &Block,
    clover: &CloverField,
    parity: usize,
    part: CloverPart,
) -> Vec<T::Elem> {
    let local = block.local();
    // Blocks start at even coordinates, so a site has the same parity in the block and the lattice.
    let sites = (0..local.volume())
        .filter(|&n| local.parity(n) == parity)
        .map(|n| {
            let c = local.coords(n);
            (
                n / 2,
                block
                    .global
                    .index(std::array::from_fn(|k| block.origin[k] + c[k])),
            )
        });
    pack_sites::<T>(local.half_volume(), sites, clover, part)
}

/// The matrices of the (stored site, site of `clover`) pairs of `sites`, in a field of `own` sites.
fn pack_sites<T: CloverStorage>(
    own: usize,
    sites: impl Iterator<Item = (usize, usize)>,
    clover: &CloverField,
    part: CloverPart,
) -> Vec<T::Elem> {
    let per_site = match part {
        CloverPart::A => &clover.blocks,
        CloverPart::Inverse => &clover.inverse,
    };
    pack_with::<T>(own, sites, |n| &per_site[n])
}

/// The matrices `matrix(n)` of the (stored site, site `n`) pairs of `sites`, in a field of `own` sites.
fn pack_with<'m, T: CloverStorage>(
    own: usize,
    sites: impl Iterator<Item = (usize, usize)>,
    matrix: impl Fn(usize) -> &'m [CloverBlock; 2],
) -> Vec<T::Elem> {
    let mut out = vec![T::Elem::default(); clover_reals::<T>(own)];
    for (cb, n) in sites {
        let base = tile_index(cb, T::CLOVER_SLOTS);
        let blocks = matrix(n);
        // Fixed point: the entries scaled by the site's largest real, that factor in the last slot
        // (`lattice_gpu_kernels::wilson::clover`).
        let scale = match T::CLOVER_SLOTS > CLOVER_ENTRIES {
            true => {
                // A NaN entry makes the factor NaN (`f64::max` would drop it), so that the site's
                // products are NaN rather than its entries silently zero.
                let m = blocks
                    .iter()
                    .flat_map(|b| b.iter())
                    .flat_map(|z| [z.re.abs(), z.im.abs()])
                    .fold(
                        0.0,
                        |a: f64, v| if a.is_nan() { a } else { a.max(v) + 0.0 * v },
                    );
                let norm = (m / T::UNIT as f64) as f32;
                let at = 2 * (base + CLOVER_ENTRIES * TILE);
                [out[at], out[at + 1]] = T::encode_norm(norm);
                // The stored factor, so that the integers and it give the entries.
                if norm > 0.0 {
                    1.0 / (norm as f64 * T::UNIT as f64)
                } else {
                    0.0
                }
            }
            false => 1.0,
        };
        for (ch, b) in blocks.iter().enumerate() {
            let mut put = |k: usize, re: f64, im: f64| {
                let at = 2 * (base + (18 * ch + k) * TILE);
                [out[at], out[at + 1]] = T::encode_entry(Complex::new(re * scale, im * scale));
            };
            for p in 0..3 {
                put(p, b[(2 * p, 2 * p)].re, b[(2 * p + 1, 2 * p + 1)].re);
            }
            for i in 0..6 {
                for j in i + 1..6 {
                    let z = hermitian_entry(b, i, j);
                    put(3 + upper_index(i, j), z.re, z.im);
                }
            }
        }
    }
    out
}

/// Entry `(i, j)` of the hermitian part of `b`: exact where `b` is hermitian (`A`, and every `c_sw = 0`
/// matrix), a rounding-level correction for the LU inverse.
fn hermitian_entry(b: &CloverBlock, i: usize, j: usize) -> num_complex::Complex64 {
    let (u, l) = (b[(i, j)], b[(j, i)].conj());
    if u == l {
        u
    } else {
        (u + l) * 0.5
    }
}

/// The Wilson-clover operator of one gauge field and clover field on the GPU: the whole lattice, or one
/// rank's block of a lattice split over GPUs.
pub struct CloverGpu<T: CloverStorage> {
    wilson: WilsonGpu<T>,
    /// `A` of the even and the odd sites.
    a: [DeviceBuffer<T::Elem>; 2],
    /// `A^{-1}` of the odd sites.
    a_inv_odd: DeviceBuffer<T::Elem>,
    csw: f64,
    /// Threads per block of the clover kernels.
    block: u32,
}

impl<T: CloverStorage> CloverGpu<T> {
    /// Uploads `u` and `clover` (built on `u` for its `c_sw` and `kappa`; the operator takes that
    /// `kappa`). Checks that they live on `lat` and that they fit.
    pub fn new(
        gpu: &Arc<Gpu>,
        lat: &Lattice,
        u: &GaugeField,
        clover: &CloverField,
        recon: Recon,
    ) -> Result<Self> {
        check_lattice(lat, u, clover)?;
        check_fits::<T>(gpu, lat)?;
        let w = WilsonGpu::new(gpu, lat, u, clover.kappa, recon)?;
        Self::with_wilson(w, clover.csw, |p, part| {
            pack_clover::<T>(lat, clover, p, part)
        })
    }

    /// As [`new`](Self::new), with the chiral blocks of `A` and `A^{-1}` of site `n` (lexicographic)
    /// given by `a(n)` and `a_inv(n)` instead of a whole [`CloverField`] on the host (which takes 2304
    /// bytes a site): for benchmarks on large lattices. `csw` and `kappa` are the matrices' own.
    #[allow(clippy::too_many_arguments)]
    pub fn from_sites<'m>(
        gpu: &Arc<Gpu>,
        lat: &Lattice,
        u: &GaugeField,
        csw: f64,
        kappa: f64,
        recon: Recon,
        a: impl Fn(usize) -> &'m [CloverBlock; 2],
        a_inv: impl Fn(usize) -> &'m [CloverBlock; 2],
    ) -> Result<Self> {
        crate::clover::check_csw(csw)?;
        check_fits::<T>(gpu, lat)?;
        let w = WilsonGpu::new(gpu, lat, u, kappa, recon)?;
        Self::with_wilson(w, csw, |p, part| {
            let sites = (0..lat.volume())
                .filter(|&n| lat.parity(n) == p)
                .map(|n| (n / 2, n));
            match part {
                CloverPart::A => pack_with::<T>(lat.half_volume(), sites, &a),
                CloverPart::Inverse => pack_with::<T>(lat.half_volume(), sites, &a_inv),
            }
        })
    }

    /// This rank's `block` of a lattice split over the GPUs of `ranks`, as [`WilsonGpu::split`]
    /// builds it, with the clover field of the block's own sites.
    pub fn split(
        gpu: &Arc<Gpu>,
        block: Block,
        u: &GaugeField,
        clover: &CloverField,
        recon: Recon,
        ranks: Box<dyn DeviceRanks<T::Elem>>,
        overlap: bool,
    ) -> Result<Self> {
        check_lattice(&block.global, u, clover)?;
        check_fits::<T>(gpu, &block.local())?;
        let packing = block.clone();
        let w = WilsonGpu::split(gpu, block, u, clover.kappa, recon, ranks, overlap)?;
        Self::with_wilson(w, clover.csw, |p, part| {
            pack_clover_block::<T>(&packing, clover, p, part)
        })
    }

    fn with_wilson(
        wilson: WilsonGpu<T>,
        csw: f64,
        pack: impl Fn(usize, CloverPart) -> Vec<T::Elem>,
    ) -> Result<Self> {
        let gpu = wilson.gpu().clone();
        let up = |p, part| -> Result<DeviceBuffer<T::Elem>> {
            Ok(DeviceBuffer::from_host(&gpu, &pack(p, part))?)
        };
        let a = [up(0, CloverPart::A)?, up(1, CloverPart::A)?];
        let a_inv_odd = up(1, CloverPart::Inverse)?;
        let mut c = Self {
            wilson,
            a,
            a_inv_odd,
            csw,
            block: HOPPING_BLOCK,
        };
        // Whole warps, as many as both kernels take.
        c.block = HOPPING_BLOCK.min(c.max_block()? / 32 * 32).max(32);
        Ok(c)
    }

    /// The Wilson operator underneath (gauge field, lattice, buffers, exchange).
    pub fn wilson(&self) -> &WilsonGpu<T> {
        &self.wilson
    }

    /// The hopping parameter (the clover field's).
    pub fn kappa(&self) -> f64 {
        self.wilson.kappa()
    }

    /// The clover coefficient.
    pub fn csw(&self) -> f64 {
        self.csw
    }

    /// Threads per block of the clover kernels.
    pub fn clover_block(&self) -> u32 {
        self.block
    }

    /// Sets the clover kernels' threads per block: whole warps, at most what both kernels take.
    pub fn set_clover_block(&mut self, block: u32) -> Result<()> {
        let max = self.max_block()?;
        if block == 0 || !block.is_multiple_of(32) || block > max {
            return Err(Error::InvalidParameter(format!(
                "{block} threads per block for the clover kernels: use a multiple of 32 up to {max}"
            )));
        }
        self.block = block;
        Ok(())
    }

    /// The most threads a block of the clover kernels may have on this GPU (their registers bound it).
    fn max_block(&self) -> Result<u32> {
        let gpu = self.wilson.gpu();
        let split = self.wilson.block().is_some() as usize;
        let r12 = (self.wilson.recon() == Recon::R12) as usize;
        Ok(gpu
            .max_block_of(T::CLOVER[split][r12])?
            .min(gpu.max_block_of(T::CLOVER_SITE)?))
    }

    /// Sets the clover kernels' threads per block: the tune cache's for this lattice (a rank's block and
    /// its cuts), precision and reconstruction on this GPU, else the fastest of [`HOPPING_BLOCKS`] timed
    /// on `M_hat` (about 2 ms of calls each), stored in `cache`. On a split lattice every rank calls this
    /// together (the timings include the exchange, and the ranks take the same decisions).
    pub fn tune_block(&mut self, cache: &mut TuneCache, retune: bool) -> Result<Option<Tuned>> {
        let mut inp = self.wilson.parity_buffer()?;
        inp.upload(&self.wilson.filled(0.5))?;
        let out = self.wilson.parity_buffer()?;
        let gpu = self.wilson.gpu().clone();
        let mut launch = CloverLaunch {
            c: self,
            out: &out,
            inp: &inp,
        };
        crate::gpu::tune_calibrated(
            &mut launch,
            |l, t| l.c.wilson.rank_mean(t),
            &gpu,
            cache,
            retune,
        )
    }

    /// Queues the hopping term of `inp` (the other parity) on the sites of `parity` followed by the clover
    /// term: [`CloverMode::Diagonal`] `out = A x + a H inp` (`x` required), [`CloverMode::Inverse`]
    /// `out = A^{-1} (x + a H inp)` (odd sites only: the GPU holds no `A_ee^{-1}`). On a split lattice
    /// the ghosts of `inp` are exchanged first.
    #[allow(clippy::too_many_arguments)]
    pub fn clover_hopping(
        &self,
        out: &DeviceBuffer<T::Elem>,
        parity: usize,
        inp: &DeviceBuffer<T::Elem>,
        x: Option<&DeviceBuffer<T::Elem>>,
        a: f64,
        mode: CloverMode,
        halt: Option<Span<'_, u32>>,
    ) -> Result<()> {
        let field = self.field(parity, mode)?;
        let w = &self.wilson;
        w.launch_after_exchange(inp, |cut| {
            macro_rules! go {
                ($r:literal, $split:literal) => {{
                    let mem = CloverFields {
                        hop: HopFields {
                            out: out.span_mut(),
                            inp: inp.span(),
                            gauge: w.gauge_buffer().span(),
                            x: x.map(|b| b.span()),
                            halt,
                            sites: w.edge_sites().map(|s| s.span()),
                        },
                        clover: field.span(),
                    };
                    let hop = dslash_numbers::<T, $r, $split>(
                        w.lattice(),
                        a,
                        parity as u32,
                        cut.unwrap_or(0),
                    );
                    let d = CloverDslash {
                        hop,
                        clover: std::ptr::null(),
                        mode,
                    }
                    .bind(mem)
                    .map_err(HostError::from)?;
                    w.gpu().launch_items(w.gpu().stream(), &d, self.block)
                }};
            }
            Ok(match (w.recon(), cut.is_some()) {
                (Recon::R18, false) => go!(9, false),
                (Recon::R12, false) => go!(6, false),
                (Recon::R18, true) => go!(9, true),
                (Recon::R12, true) => go!(6, true),
            }?)
        })
    }

    /// The clover field a [`CloverMode`] applies on `parity`.
    fn field(&self, parity: usize, mode: CloverMode) -> Result<&DeviceBuffer<T::Elem>> {
        match (mode, parity) {
            (CloverMode::Diagonal, 0 | 1) => Ok(&self.a[parity]),
            (CloverMode::Inverse, 1) => Ok(&self.a_inv_odd),
            _ => Err(Error::InvalidParameter(format!(
                "the clover term {mode:?} on parity {parity}: the GPU holds A on parities 0 and 1 \
                 and A^-1 on the odd sites (parity 1) only; apply the inverse on the odd sites"
            ))),
        }
    }

    /// Queues `out = C x` on this GPU's own sites of `parity`, `C` being `A` ([`CloverPart::A`]) or
    /// `A^{-1}` (odd sites only); no hopping term, no exchange.
    pub fn apply_clover(
        &self,
        out: &DeviceBuffer<T::Elem>,
        parity: usize,
        x: &DeviceBuffer<T::Elem>,
        part: CloverPart,
    ) -> Result<()> {
        let mode = match part {
            CloverPart::A => CloverMode::Diagonal,
            CloverPart::Inverse => CloverMode::Inverse,
        };
        let field = self.field(parity, mode)?;
        let gpu = self.wilson.gpu();
        let c = CloverSite::<T> {
            out: std::ptr::null_mut(),
            x: std::ptr::null(),
            clover: std::ptr::null(),
            sites: self.wilson.lattice().half_volume() as u32,
        }
        .bind(out.span_mut(), x.span(), field.span())
        .map_err(HostError::from)?;
        Ok(gpu.launch_items(gpu.stream(), &c, self.block)?)
    }

    /// The even-odd source `b_hat = b_e + kappa H_eo A_oo^{-1} b_o`, from the uploaded parities of `b`.
    pub fn source(
        &self,
        b_e: &DeviceBuffer<T::Elem>,
        b_o: &DeviceBuffer<T::Elem>,
    ) -> Result<DeviceBuffer<T::Elem>> {
        let t = self.wilson.parity_buffer()?;
        self.apply_clover(&t, 1, b_o, CloverPart::Inverse)?;
        let src = self.wilson.parity_buffer()?;
        self.wilson
            .hopping(&src, 0, &t, Some(b_e), self.kappa(), None)?;
        Ok(src)
    }

    /// The odd sites of the solution, `x_o = A_oo^{-1} (b_o + kappa H_oe x_e)`.
    pub fn reconstruct(
        &self,
        x_e: &DeviceBuffer<T::Elem>,
        b_o: &DeviceBuffer<T::Elem>,
    ) -> Result<DeviceBuffer<T::Elem>> {
        let x_o = self.wilson.parity_buffer()?;
        let kappa = self.kappa();
        self.clover_hopping(&x_o, 1, x_e, Some(b_o), kappa, CloverMode::Inverse, None)?;
        Ok(x_o)
    }

    /// `(D x)_p = A_pp x_p - kappa H_{p, 1-p} x_{1-p}` on the sites of `parity`.
    pub fn dirac_parity(
        &self,
        out: &DeviceBuffer<T::Elem>,
        parity: usize,
        x_p: &DeviceBuffer<T::Elem>,
        x_other: &DeviceBuffer<T::Elem>,
    ) -> Result<()> {
        let kappa = self.kappa();
        self.clover_hopping(
            out,
            parity,
            x_other,
            Some(x_p),
            -kappa,
            CloverMode::Diagonal,
            None,
        )
    }

    /// The odd sites `x_o` of the solution whose even ones are `x_e` ([`reconstruct`](Self::reconstruct)),
    /// and `D x` on both parities for the true residual: `[x_o, (D x)_e, (D x)_o]`.
    pub fn odd_sites_and_dirac(
        &self,
        x_e: &DeviceBuffer<T::Elem>,
        b_o: &DeviceBuffer<T::Elem>,
    ) -> Result<[DeviceBuffer<T::Elem>; 3]> {
        let x_o = self.reconstruct(x_e, b_o)?;
        let dx_e = self.wilson().parity_buffer()?;
        let dx_o = self.wilson().parity_buffer()?;
        self.dirac_parity(&dx_e, 0, x_e, &x_o)?;
        self.dirac_parity(&dx_o, 1, &x_o, x_e)?;
        Ok([x_o, dx_e, dx_o])
    }

    /// Floating-point operations of one clover hopping term on one parity: QUDA's 1320 a site for the
    /// hopping term and 504 for the clover matrix (the `x + a h` update not counted, as for the Wilson
    /// term).
    pub fn clover_flops(&self) -> u64 {
        (FLOPS_PER_SITE + CLOVER_FLOPS_PER_SITE) * self.wilson.lattice().half_volume() as u64
    }

    /// Bytes one clover hopping term on one parity must move through DRAM at the least: the hopping
    /// term's ([`WilsonGpu::hopping_min_bytes`]) and each site's 72 clover reals once.
    pub fn clover_min_bytes(&self, with_x: bool) -> u64 {
        let clover = (2 * T::CLOVER_SLOTS * std::mem::size_of::<T::Elem>()) as u64;
        self.wilson.hopping_min_bytes(with_x) + clover * self.wilson.lattice().half_volume() as u64
    }

    /// One clover hopping term on one parity as a [`Cost`]: its sites, flops and least DRAM traffic,
    /// whose rate against the copy bandwidth is the roofline fraction.
    pub fn clover_cost(&self, with_x: bool) -> Cost {
        Cost {
            points: self.wilson.lattice().half_volume() as f64,
            flops: self.clover_flops() as f64,
            bytes: self.clover_min_bytes(with_x) as f64,
        }
    }
}

/// `M_hat` with the clover kernels' block under trial, for [`CloverGpu::tune_block`]: the lattice (a
/// rank's block and its cuts), precision and reconstruction key the cache.
struct CloverLaunch<'a, T: CloverStorage> {
    c: &'a mut CloverGpu<T>,
    out: &'a DeviceBuffer<T::Elem>,
    inp: &'a DeviceBuffer<T::Elem>,
}

impl<T: CloverStorage> CloverLaunch<'_, T> {
    fn m_hat(&self) -> Result<()> {
        let c = &*self.c;
        let (tmp, k2) = (c.wilson.tmp_buffer(), c.kappa() * c.kappa());
        c.clover_hopping(tmp, 1, self.inp, None, 1.0, CloverMode::Inverse, None)?;
        let x = Some(self.inp);
        c.clover_hopping(self.out, 0, tmp, x, -k2, CloverMode::Diagonal, None)
    }
}

impl<T: CloverStorage> Tunable for CloverLaunch<'_, T> {
    fn tune_key(&self) -> (String, String, String) {
        let w = &self.c.wilson;
        let d = w.lattice().dims;
        let cut = match w.block() {
            Some(b) => format!("/cut{}", b.cut_flags()),
            None => String::new(),
        };
        let split = w.block().is_some() as usize;
        let r12 = w.recon() == Recon::R12;
        (
            format!("{}[m_hat]", T::CLOVER[split][r12 as usize]),
            format!("{}x{}x{}x{}{cut}", d[0], d[1], d[2], d[3]),
            T::PRECISION.to_string(),
        )
    }

    fn candidates(&self) -> Vec<Vec<(String, u32)>> {
        blocks(&HOPPING_BLOCKS)
    }

    fn set_params(&mut self, params: &[(String, u32)]) -> lattice_gpu_host::Result<bool> {
        match param(params, BLOCK) {
            Some(b) => Ok(self.c.set_clover_block(b).is_ok()),
            None => Ok(false),
        }
    }

    fn on_all_ranks(&self, here: bool) -> lattice_gpu_host::Result<bool> {
        Ok(self.c.wilson.rank_mean(f64::from(u8::from(here)))? == 1.0)
    }

    fn cost(&self) -> Cost {
        let c = &*self.c;
        Cost {
            points: c.wilson.lattice().half_volume() as f64,
            flops: 2.0 * c.clover_flops() as f64,
            bytes: (c.clover_min_bytes(false) + c.clover_min_bytes(true)) as f64,
        }
    }

    fn time_ms(&mut self, calls: u64) -> lattice_gpu_host::Result<f64> {
        let gpu = self.c.wilson.gpu().clone();
        gpu.time_ms(|| {
            for _ in 0..calls {
                self.m_hat()?;
            }
            Ok(())
        })
    }
}

fn check_lattice(lat: &Lattice, u: &GaugeField, clover: &CloverField) -> Result<()> {
    if u.dims != lat.dims || clover.dims != lat.dims || clover.blocks.len() != lat.volume() {
        return Err(Error::InvalidParameter(format!(
            "the gauge field ({:?}) and clover field ({:?}, {} sites) must live on the lattice {:?}: \
             build the clover field from this gauge field",
            u.dims,
            clover.dims,
            clover.blocks.len(),
            lat.dims
        )));
    }
    Ok(())
}

/// The clover fields (three parities' worth) must fit beside the Wilson operator's own memory, which
/// [`WilsonGpu`] checks.
fn check_fits<T: CloverStorage>(gpu: &Arc<Gpu>, local: &Lattice) -> Result<()> {
    let bytes = 3 * clover_len::<T>(local) as u64 * std::mem::size_of::<T::Elem>() as u64;
    Ok(gpu.check_fits(bytes, "the clover field")?)
}

/// `M_hat = A_ee - kappa^2 H_eo A_oo^{-1} H_oe` on even sites, for [`BiCgStab`]: two launches,
/// `t = A_oo^{-1} H_oe x` ([`CloverMode::Inverse`]) and `A_ee x - kappa^2 H_eo t`
/// ([`CloverMode::Diagonal`]). [`flops`](DeviceOperator::flops) counts QUDA's way:
/// `2 (1320 + 504)` per even site.
pub struct CloverEvenOdd<T: CloverStorage>(pub CloverGpu<T>);

impl<T: CloverStorage> CloverEvenOdd<T> {
    /// GPU milliseconds of one application of `M_hat` to the even part of `psi`: the mean of `reps`
    /// after an untimed one.
    pub fn time_apply(&self, psi: &SpinorField, reps: u32) -> Result<f64> {
        let w = self.0.wilson();
        let inp = w.upload_parity(psi, 0)?;
        let out = w.parity_buffer()?;
        self.apply(&out, &inp, None)?;
        let reps = reps.max(1);
        let ms = w.gpu().time_ms(|| {
            for _ in 0..reps {
                self.apply(&out, &inp, None)?;
            }
            Ok(())
        })?;
        Ok(ms / reps as f64)
    }
}

impl<T: CloverStorage> DeviceOperator<T> for CloverEvenOdd<T> {
    fn len(&self) -> usize {
        parity_slots::<T>(self.0.wilson.lattice())
    }

    fn storage_len(&self) -> usize {
        self.0.wilson.storage_len()
    }

    fn ranks(&self) -> Option<&dyn DeviceRanks<T::Elem>> {
        self.0.wilson.device_ranks()
    }

    fn apply(
        &self,
        out: &DeviceBuffer<T::Elem>,
        inp: &DeviceBuffer<T::Elem>,
        halt: Option<Span<'_, u32>>,
    ) -> lattice_gpu_host::Result<()> {
        let c = &self.0;
        let tmp = c.wilson.tmp_buffer();
        let k2 = c.kappa() * c.kappa();
        let go = || -> Result<()> {
            c.clover_hopping(tmp, 1, inp, None, 1.0, CloverMode::Inverse, halt)?;
            c.clover_hopping(out, 0, tmp, Some(inp), -k2, CloverMode::Diagonal, halt)
        };
        Ok(go()?)
    }

    /// `M_hat^dag = gamma_5 M_hat gamma_5`: `A` commutes with gamma_5 (it is block-diagonal in
    /// chirality) and `H_eo^dag = gamma_5 H_oe gamma_5`, so `M_hat` is gamma_5-hermitian as the Wilson
    /// one is.
    fn apply_dagger(
        &self,
        out: &DeviceBuffer<T::Elem>,
        inp: &DeviceBuffer<T::Elem>,
        halt: Option<Span<'_, u32>>,
    ) -> lattice_gpu_host::Result<()> {
        self.0
            .wilson
            .gamma5_conjugated(out, inp, halt, |o, i| self.apply(o, i, halt))
    }

    fn flops(&self) -> u64 {
        2 * self.0.clover_flops()
    }
}

/// Solves `D x = b` for the clover operator on the full lattice by even-odd preconditioning: BiCGStab on
/// `M_hat x_e = b_hat` ([`CloverGpu::source`]), then `x_o` ([`CloverGpu::reconstruct`]). Returns `x`,
/// the solver's report and the true relative residual `|b - D x| / |b|`, computed on the GPU. On a split
/// lattice every rank passes the whole `b` and gets its own sites of `x` (the others zero); the residual
/// is the whole lattice's.
pub fn solve_clover_with<T: CloverReal>(
    solver: &mut BiCgStab<T, CloverEvenOdd<T>>,
    b: &SpinorField,
    opt: &SolveOptions,
    on_check: &mut dyn FnMut(usize, f64) -> lattice_gpu_host::Result<()>,
) -> Result<(SpinorField, SolveReport, f64)> {
    let c = &solver.operator().0;
    let b_e = c.wilson().upload_parity(b, 0)?;
    let b_o = c.wilson().upload_parity(b, 1)?;
    let src = c.source(&b_e, &b_o)?;
    let mut x_e = c.wilson().parity_buffer()?;
    let report = solver.solve(&src, &mut x_e, opt, on_check)?;
    let c = &solver.operator().0;
    let odd = c.odd_sites_and_dirac(&x_e, &b_o)?;
    let (x, true_res) = even_odd_solution(c.wilson(), b.dims, &x_e, odd, [&b_e, &b_o], |a, b| {
        solver.diff_norms(a, b)
    })?;
    Ok((x, report, true_res))
}

/// [`solve_clover_with`] in mixed precision ([`MixedBiCgStab`]: BiCGStab or CGNR with reliable
/// updates, sloppy iterations in `S`), as [`crate::gpu::solve_mixed_with`] solves the Wilson operator:
/// the source, the odd sites and the true residual in the outer precision `H`.
pub fn solve_clover_mixed_with<H: CloverReal, S: CloverStorage>(
    solver: &mut MixedBiCgStab<H, S, CloverEvenOdd<H>, CloverEvenOdd<S>>,
    b: &SpinorField,
    opt: &MixedOptions,
    on_check: &mut dyn FnMut(usize, f64) -> lattice_gpu_host::Result<()>,
) -> Result<(SpinorField, MixedReport, f64)> {
    let c = &solver.operator().0;
    let b_e = c.wilson().upload_parity(b, 0)?;
    let b_o = c.wilson().upload_parity(b, 1)?;
    let src = c.source(&b_e, &b_o)?;
    let mut x_e = c.wilson().parity_buffer()?;
    let opt = even_system_options(solver, opt, [&b_e, &b_o], &src)?;
    let report = solver.solve(&src, &mut x_e, &opt, on_check)?;
    let c = &solver.operator().0;
    let odd = c.odd_sites_and_dirac(&x_e, &b_o)?;
    let (x, true_res) = even_odd_solution(c.wilson(), b.dims, &x_e, odd, [&b_e, &b_o], |a, b| {
        solver.diff_norms(a, b)
    })?;
    Ok((x, report, true_res))
}

/// The clover hopping term on the CPU, running the GPU kernel's own site body over the sites with rayon:
/// as [`CloverGpu::clover_hopping`] on `parity`, all fields in the tiled layouts ([`crate::gpu::pack_parity`],
/// [`crate::gpu::pack_gauge`], [`pack_clover`] of `parity`).
#[allow(clippy::too_many_arguments)]
pub fn clover_hopping_on_host<T: CloverStorage>(
    lat: &Lattice,
    gauge: &[T::Elem],
    recon: Recon,
    clover: &[T::Elem],
    out: &mut [T::Elem],
    parity: usize,
    inp: &[T::Elem],
    x: Option<&[T::Elem]>,
    a: f64,
    mode: CloverMode,
) -> Result<()> {
    clover_with::<T, false>(
        lat, 0, None, gauge, recon, clover, out, parity, inp, x, a, mode,
    )
}

/// [`clover_hopping_on_host`] on one rank's block of a split: `inp` and `gauge` with their ghosts
/// ([`Block::pack_parity`], [`Block::pack_gauge`]), `clover` ([`pack_clover_block`]), `out` and `x` this
/// rank's sites. With `overlap` (and sites that read no ghost) as two launches, as the GPU overlaps the
/// exchange: the sites off the edges of the cut axes ([`INNER`]), then those on them ([`OUTER`]).
#[allow(clippy::too_many_arguments)]
pub fn clover_hopping_on_block<T: CloverStorage>(
    block: &Block,
    gauge: &[T::Elem],
    recon: Recon,
    clover: &[T::Elem],
    out: &mut [T::Elem],
    parity: usize,
    inp: &[T::Elem],
    x: Option<&[T::Elem]>,
    a: f64,
    mode: CloverMode,
    overlap: bool,
) -> Result<()> {
    let (local, cut) = (block.local(), block.cut_flags());
    let order: Vec<u32> = edge_order(local.dims.map(|d| d as u32), cut).collect();
    let launches: &[(u32, Option<&[u32]>)] = match overlap && block.has_inner_sites() {
        true => &[(cut | INNER, Some(&order)), (cut | OUTER, Some(&order))],
        false => &[(cut, None)],
    };
    for &(word, sites) in launches {
        clover_with::<T, true>(
            &local, word, sites, gauge, recon, clover, out, parity, inp, x, a, mode,
        )?;
    }
    Ok(())
}

/// `out = C x` on the CPU with the GPU kernel's body, on the first `sites` sites of a parity.
pub fn apply_clover_on_host<T: CloverStorage>(
    sites: usize,
    clover: &[T::Elem],
    out: &mut [T::Elem],
    x: &[T::Elem],
) -> Result<()> {
    let mut c = CloverSite::<T> {
        out: std::ptr::null_mut(),
        x: std::ptr::null(),
        clover: std::ptr::null(),
        sites: u32::try_from(sites).map_err(|_| {
            Error::InvalidParameter(format!("{sites} sites do not fit a kernel's u32 count"))
        })?,
    }
    .bind(SpanMut::of(out), Span::of(x), Span::of(clover))
    .map_err(HostError::from)?;
    Ok(run_on_host(&mut c, 64)?)
}

#[allow(clippy::too_many_arguments)]
fn clover_with<T: CloverStorage, const SPLIT: bool>(
    lat: &Lattice,
    cut: u32,
    sites: Option<&[u32]>,
    gauge: &[T::Elem],
    recon: Recon,
    clover: &[T::Elem],
    out: &mut [T::Elem],
    parity: usize,
    inp: &[T::Elem],
    x: Option<&[T::Elem]>,
    a: f64,
    mode: CloverMode,
) -> Result<()> {
    macro_rules! go {
        ($r:literal) => {{
            let mem = CloverFields {
                hop: HopFields {
                    out: SpanMut::of(out),
                    inp: Span::of(inp),
                    gauge: Span::of(gauge),
                    x: x.map(Span::of),
                    halt: None,
                    // With INNER or OUTER, the block's sites in edge order.
                    sites: sites.map(Span::of),
                },
                clover: Span::of(clover),
            };
            let hop = dslash_numbers::<T, $r, SPLIT>(lat, a, parity as u32, cut);
            let mut d = CloverDslash {
                hop,
                clover: std::ptr::null(),
                mode,
            }
            .bind(mem)
            .map_err(HostError::from)?;
            run_on_host(&mut d, 64)?;
        }};
    }
    match recon {
        Recon::R18 => go!(9),
        Recon::R12 => go!(6),
    }
    Ok(())
}
