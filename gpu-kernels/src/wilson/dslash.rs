//! The hopping term `out = x + a * H_{p, 1-p} in` on the sites of one parity, one thread per site.
// Spin, colour and row indices run in lock step across several arrays: index loops read best here.
#![allow(clippy::needless_range_loop)]

use super::halo::{face_index, is_cut, Halo, INNER, OUTER, T_HIGH_EDGE, T_LOW_EDGE};
use super::store::WilsonStore;
use crate::bind::{check_len, Bound, Place, Span, SpanError, SpanMut};
use crate::complex::Complex;
use crate::device::math::Real;

/// Floating-point operations per site of one hopping-term application, as QUDA counts them (so GFLOPS
/// figures compare with QUDA's).
pub const FLOPS_PER_SITE: u64 = 1320;

/// One application of the hopping term on the sites of parity `parity`:
/// `out = x + a * sum_mu [ (1 - g_mu) U_mu(n) in(n + mu) + (1 + g_mu) U_mu(n - mu)^dag in(n - mu) ]`,
/// or `out = a * (...)` when `x` is null. `R` is the number of complex entries stored per link (9 or 6).
/// `t_boundary` (1 or -1) multiplies every hop across the `t` boundary. When `halt` is not null and the
/// `u32` it points to is non-zero, the kernel does nothing: a converged solver's queued work becomes free.
/// `T` is the fields' storage ([`WilsonStore`]): f32, f64 or half precision.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Dslash<T: WilsonStore, const R: usize, const SPLIT: bool = false> {
    /// Output spinor (parity `parity`).
    pub out: *mut T::Elem,
    /// Input spinor (the other parity).
    pub inp: *const T::Elem,
    /// Gauge field, both parities.
    pub gauge: *const T::Elem,
    /// Spinor added to the result (parity `parity`), or null.
    pub x: *const T::Elem,
    /// The factor of the hopping term.
    pub a: T::Real,
    /// Factor of hops across the `t` boundary: 1 (periodic) or -1 (antiperiodic).
    pub t_boundary: T::Real,
    /// Lattice `[X, Y, Z, T]`.
    pub dims: [u32; 4],
    /// Parity of the output sites.
    pub parity: u32,
    /// Solver status flag, or null.
    pub halt: *const u32,
    /// With `SPLIT` (a rank's block of a lattice split over GPUs, [`super::halo`]): the axes cut
    /// ([`T_CUT`](super::T_CUT), [`Z_CUT`](super::Z_CUT), [`Y_CUT`](super::Y_CUT)),
    /// [`T_LOW_EDGE`] and [`T_HIGH_EDGE`] where this rank's `t` edge is the global boundary (only hops
    /// across a global edge take `t_boundary`), and [`INNER`] or [`OUTER`] to compute only the sites
    /// that read no ghost or only those that do. Hops across a local edge of a cut axis read the ghost
    /// faces stored after the block's sites, backward ones the ghosts' links ([`Halo`]). Without
    /// `SPLIT` (a compile-time choice, so that the kernel of one lattice keeps its registers), every
    /// axis wraps on this lattice and this is ignored.
    pub cut: u32,
    /// With `SPLIT` and [`INNER`] or [`OUTER`]: the block's sites off the edges of its cut axes, then
    /// those on an edge ([`edge_order`]), so that each launch's threads take consecutive entries (a
    /// list: computed in the kernel, the order cost 40 registers). Null otherwise.
    pub sites: *const u32,
}

/// The sites `cb` of a block `dims` cut as `cut` says, those that read no ghost first (in order),
/// then those on an edge of a cut axis (in order): [`Dslash::sites`].
pub fn edge_order(dims: [u32; 4], cut: u32) -> impl Iterator<Item = u32> {
    let [nx, ny, nz, nt] = dims;
    let on_edge = move |cb: u32| {
        let r = cb / (nx / 2);
        let (y, z, t) = (r % ny, r / ny % nz, r / ny / nz);
        let edge = |a: usize, v: u32, n: u32| is_cut(cut, a) && (v == 0 || v + 1 == n);
        edge(1, y, ny) || edge(2, z, nz) || edge(3, t, nt)
    };
    let all = nx * ny * nz * nt / 2;
    (0..all)
        .filter(move |&cb| !on_edge(cb))
        .chain((0..all).filter(move |&cb| on_edge(cb)))
}

// SAFETY: each site is written by exactly one thread; the pointers are shared read-only otherwise.
unsafe impl<T: WilsonStore, const R: usize, const S: bool> Send for Dslash<T, R, S> {}
// SAFETY: as above.
unsafe impl<T: WilsonStore, const R: usize, const S: bool> Sync for Dslash<T, R, S> {}

/// `sigma_mu`, the upper-right 2x2 block of `g_mu` (DeGrand-Rossi: every `g_mu` is
/// `[[0, sigma], [sigma^dag, 0]]`), as one non-zero per row: column `PERM[mu][r]` with phase `PHASE[mu][r]`.
const PERM: [[usize; 2]; 4] = [[1, 0], [1, 0], [0, 1], [0, 1]];
/// Phases coded 0: 1, 1: -1, 2: i, 3: -i.
const PHASE: [[u8; 2]; 4] = [[2, 2], [1, 0], [2, 3], [0, 0]];

#[inline(always)]
fn phase<T: Real>(code: u8, z: Complex<T>) -> Complex<T> {
    match code {
        0 => z,
        1 => -z,
        2 => z.mul_i(),
        _ => -z.mul_i(),
    }
}

/// The third row of an SU(3) matrix whose first two rows are `top`: the conjugate of their cross
/// product.
#[inline(always)]
fn third_row<T: Real>(top: [[Complex<T>; 3]; 2]) -> [Complex<T>; 3] {
    let [r0, r1] = top;
    [
        (r0[1] * r1[2] - r0[2] * r1[1]).conj(),
        (r0[2] * r1[0] - r0[0] * r1[2]).conj(),
        (r0[0] * r1[1] - r0[1] * r1[0]).conj(),
    ]
}

#[inline(always)]
fn conj_code(code: u8) -> u8 {
    match code {
        2 => 3,
        3 => 2,
        c => c,
    }
}

/// Keeps LLVM from hoisting the loads of every direction to the top of the kernel: doing so buys
/// memory-level parallelism the occupancy already gives, at the price of spilling f64 registers.
#[inline(always)]
pub(crate) fn schedule_fence() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: an empty instruction; without `nomem` LLVM may not move memory accesses across it.
    unsafe {
        core::arch::asm!("", options(nostack, preserves_flags))
    }
}

/// Sites per tile of the field layouts (a warp's worth).
pub const TILE: usize = 32;

/// Index of spin-colour component `k` of site `cb` in a tiled spinor field of storage `T` (its norm
/// is slot `k = 12` of a 16-bit field).
#[inline(always)]
pub fn component_index<T: WilsonStore>(cb: usize, k: usize) -> usize {
    tile_index(cb, T::SLOTS) + k * TILE
}

/// Index of entry 0 of site `cb` in a tiled array of `ncomp` entries per site; entry `k` is `TILE * k`
/// further on, a compile-time offset, so one address register serves all entries of a site.
#[inline(always)]
pub fn tile_index(cb: usize, ncomp: usize) -> usize {
    (cb / TILE) * ncomp * TILE + cb % TILE
}

/// Where the hops of one output site read: the checkerboard index of its forward and backward
/// neighbour in each direction, and the factors of its `t` hops (the boundary's sign where they cross it).
/// Indices and sizes are `u32`, as the coordinates they are made of: they are held through the hops,
/// and as `usize` took registers the split f64 kernels spilled for.
#[derive(Clone, Copy, Debug)]
pub struct Neighbours<T> {
    /// Forward neighbours, by direction.
    pub fwd: [u32; 4],
    /// Backward neighbours, by direction.
    pub bwd: [u32; 4],
    /// Factor of the forward `t` hop.
    pub fwd_sign: T,
    /// Factor of the backward `t` hop.
    pub bwd_sign: T,
    /// Sites each parity and direction's links take room for ([`Dslash::link_sites`]).
    pub link_sites: u32,
}
type HalfSpinor<T> = [[Complex<T>; 3]; 2];

/// The sites of a block off the edges of its cut axes: along each axis, the first coordinate and how
/// many (an uncut axis keeps all its sites).
struct Edges {
    lo: [usize; 4],
    len: [usize; 4],
}

impl Edges {
    #[inline(always)]
    fn new(dims: [u32; 4], cut: u32) -> Self {
        let lo = [0, 1, 2, 3].map(|a| usize::from(a > 0 && is_cut(cut, a)));
        // Literal axes (no loop over a runtime index: these stay in registers).
        let len = [
            dims[0] as usize / 2,
            dims[1] as usize - 2 * lo[1],
            dims[2] as usize - 2 * lo[2],
            dims[3] as usize - 2 * lo[3],
        ];
        Self { lo, len }
    }

    /// Sites off every edge.
    #[inline(always)]
    fn inner(&self) -> usize {
        self.len.iter().product()
    }

    /// Sites on an edge: all the others.
    #[inline(always)]
    fn outer(&self) -> usize {
        let all = self.len[0]
            * (self.len[1] + 2 * self.lo[1])
            * (self.len[2] + 2 * self.lo[2])
            * (self.len[3] + 2 * self.lo[3]);
        all - self.inner()
    }
}

/// The memory a hopping term addresses ([`Dslash::bind`]): reals, tiled as [`crate::wilson`] says.
#[derive(Debug)]
pub struct HopFields<'a, T> {
    /// The output parity.
    pub out: SpanMut<'a, T>,
    /// The input parity (with the ghosts, on a block of a split lattice).
    pub inp: Span<'a, T>,
    /// The gauge field, both parities (with the ghosts' links, on a block).
    pub gauge: Span<'a, T>,
    /// The spinor added to the result, if any.
    pub x: Option<Span<'a, T>>,
    /// The solver's status word, if the term stops with the solve.
    pub halt: Option<Span<'a, u32>>,
    /// A block's sites in edge order ([`edge_order`]), for [`INNER`] and [`OUTER`] launches.
    pub sites: Option<Span<'a, u32>>,
}

/// Stored numbers of a tiled spinor of `sites` sites.
pub(crate) fn spinor_elems<T: WilsonStore>(sites: usize) -> usize {
    2 * T::SLOTS * sites.div_ceil(TILE) * TILE
}

/// Checks a lattice or block `dims` (its axes cut as `cut` says): every axis at least one
/// site, `x` even, and a cut axis at least two.
pub(crate) fn check_dims(dims: [u32; 4], cut: u32) -> Result<(), SpanError> {
    let bad = dims.contains(&0)
        || !dims[0].is_multiple_of(2)
        || (1..4).any(|a| is_cut(cut, a) && dims[a] < 2);
    match bad {
        true => Err(SpanError::Dims(
            "every axis at least 1 site, x even, a cut axis at least 2",
        )),
        false => Ok(()),
    }
}

impl<T: WilsonStore, const R: usize, const SPLIT: bool> Dslash<T, R, SPLIT> {
    /// These numbers (`a`, `t_boundary`, `dims`, `parity`, `cut`) with `mem`'s addresses, checked:
    /// `out` and `x` hold the output parity, `inp` the input parity and its ghosts, `gauge` the links
    /// of both parities (and the ghosts'), `halt` one word, and an [`INNER`] or [`OUTER`] launch has
    /// the block's `sites`.
    pub fn bind<'a>(self, mem: HopFields<'a, T::Elem>) -> Result<Bound<'a, Self>, SpanError> {
        check_dims(self.dims, if SPLIT { self.cut } else { 0 })?;
        let (own, links) = (self.half_volume(), self.link_sites());
        let mut places = [mem.out.place(); 6];
        places[1] = mem.inp.place();
        places[2] = mem.gauge.place();
        check_len("out", mem.out.len(), spinor_elems::<T>(own))?;
        check_len("inp", mem.inp.len(), spinor_elems::<T>(links))?;
        check_len(
            "gauge",
            mem.gauge.len(),
            2 * 8 * links.div_ceil(TILE) * R * TILE,
        )?;
        if let Some(x) = &mem.x {
            check_len("x", x.len(), spinor_elems::<T>(own))?;
            places[3] = x.place();
        }
        if let Some(h) = &mem.halt {
            check_len("halt", h.len(), 1)?;
            places[4] = h.place();
        }
        let listed = SPLIT && self.cut & (INNER | OUTER) != 0;
        let sites = match (&mem.sites, listed) {
            (Some(l), true) => {
                check_len("sites", l.len(), own)?;
                places[5] = l.place();
                l.ptr()
            }
            (None, true) => check_len("sites", 0, own).map(|_| core::ptr::null())?,
            (_, false) => core::ptr::null(),
        };
        let place = Place::common(&places)?;
        let d = Self {
            out: mem.out.ptr(),
            inp: mem.inp.ptr(),
            gauge: mem.gauge.ptr(),
            x: mem.x.map_or(core::ptr::null(), |x| x.ptr()),
            halt: mem.halt.map_or(core::ptr::null(), |h| h.ptr()),
            sites,
            ..self
        };
        // SAFETY: every span was checked above against the sites, ghosts and links the hops address.
        Ok(unsafe { Bound::new_unchecked(d, place) })
    }

    /// Sites of one parity.
    #[inline(always)]
    pub fn half_volume(&self) -> usize {
        let [x, y, z, t] = self.dims;
        x as usize * y as usize * z as usize * t as usize / 2
    }

    /// Computes site `cb` of the output parity.
    ///
    /// # Safety
    /// The pointers must address fields of this lattice in the layouts of [`crate::wilson`], and
    /// `cb < half_volume()`.
    #[inline(always)]
    pub unsafe fn site(&self, cb: usize) {
        if !self.halt.is_null() && unsafe { *self.halt } != 0 {
            return;
        }
        let nb = self.neighbours(cb);
        let mut acc = [Complex::<T::Real>::ZERO; 12];
        // Literal directions: each call folds to one hop, and the fences keep one direction's loads live
        // at a time.
        unsafe {
            self.hop_at(&mut acc, cb, &nb, 0, true);
            self.hop_at(&mut acc, cb, &nb, 0, false);
            schedule_fence();
            self.hop_at(&mut acc, cb, &nb, 1, true);
            self.hop_at(&mut acc, cb, &nb, 1, false);
            schedule_fence();
            self.hop_at(&mut acc, cb, &nb, 2, true);
            self.hop_at(&mut acc, cb, &nb, 2, false);
            schedule_fence();
            self.hop_at(&mut acc, cb, &nb, 3, true);
            self.hop_at(&mut acc, cb, &nb, 3, false);
            schedule_fence();
        }
        if T::NORMED {
            unsafe { self.store_fixed(cb, &acc) };
            return;
        }
        // Written out: a loop over `acc` that LLVM unrolls only in part puts `acc` in local memory.
        macro_rules! stores {
            ($($k:literal)*) => {$({
                let at = component_index::<T>(cb, $k);
                unsafe { self.store(at, acc[$k], || self.addend(at)) };
            })*};
        }
        // A split block's kernels test `x` once, outside the stores: tested at each store, it kept
        // the f64 18-number kernel at 255 registers with 8 bytes spilled. Once outside, ptxas gives
        // the split kernels fewer registers and no spill (H100, 2026-11-26, 32^3x64 cut along y, z
        // and t on one GPU, NCCL, M_hat: f32 r18 827 to 772 us, f64 r12 1251 to 1255, f64 r18 1510
        // to 1620). The whole lattice's keep the test at each store: once outside, f32 r18 ran 3%
        // and f64 r18 4% slower, f64 r12 3% faster (`lqcd bench --dslash 32x32x32x64`).
        macro_rules! split_stores {
            ($with_x:literal, $($k:literal)*) => {$({
                let at = component_index::<T>(cb, $k);
                let v = acc[$k].scale(self.a);
                let v = if $with_x { v + unsafe { T::load(self.x, at) } } else { v };
                unsafe { T::store(self.out, at, v) };
            })*};
        }
        match (SPLIT, self.x.is_null()) {
            (false, _) => {
                stores!(0 1 2 3 4 5 6 7 8 9 10 11);
            }
            (true, true) => {
                split_stores!(false, 0 1 2 3 4 5 6 7 8 9 10 11);
            }
            (true, false) => {
                split_stores!(true, 0 1 2 3 4 5 6 7 8 9 10 11);
            }
        }
    }

    /// Stores site `cb` of a 16-bit output: `x + a h` scaled so that its largest real is
    /// 1, and that largest magnitude in the norm slot.
    ///
    /// # Safety
    /// As [`site`](Self::site).
    #[inline(always)]
    unsafe fn store_fixed(&self, cb: usize, acc: &[Complex<T::Real>; 12]) {
        let at = tile_index(cb, T::SLOTS);
        // Short loops, the branch outside them: LLVM unrolls these fully and keeps `v` in registers.
        let mut v = acc.map(|h| h.scale(self.a));
        if !self.x.is_null() {
            let x = unsafe { super::load_site::<T>(self.x, at, TILE) };
            for k in 0..12 {
                v[k] += x[k];
            }
        }
        unsafe { super::store_site::<T>(self.out, at, TILE, &v) };
    }

    /// Threads a launch needs: one per site of the output parity, or on a split lattice one per site
    /// that [`INNER`] or [`OUTER`] selects.
    #[inline(always)]
    pub fn threads(&self) -> usize {
        if !SPLIT || self.cut & (INNER | OUTER) == 0 {
            return self.half_volume();
        }
        let e = Edges::new(self.dims, self.cut);
        if self.cut & INNER != 0 {
            e.inner()
        } else {
            e.outer()
        }
    }

    /// The site thread `i < threads()` computes: with [`INNER`] or [`OUTER`], from the block's list
    /// of sites ([`Dslash::sites`]).
    #[inline(always)]
    pub fn site_of(&self, i: usize) -> usize {
        if !SPLIT || self.cut & (INNER | OUTER) == 0 {
            return i;
        }
        let first = if self.cut & OUTER != 0 {
            Edges::new(self.dims, self.cut).inner()
        } else {
            0
        };
        // SAFETY: with INNER or OUTER, `sites` lists every site of the block (the field's contract).
        unsafe { *self.sites.add(first + i) as usize }
    }

    /// Sites each parity and direction's links take room for: the half volume, and on a split lattice
    /// the ghosts after it ([`Halo::link_sites`]).
    #[inline(always)]
    pub fn link_sites(&self) -> usize {
        if SPLIT {
            Halo::new(self.dims, self.cut).link_sites
        } else {
            self.half_volume()
        }
    }

    /// The coordinates `[x, y, z, t]` of output site `cb`.
    #[inline(always)]
    fn coords(&self, cb: usize) -> [u32; 4] {
        let [nx, ny, nz, _] = self.dims;
        let xh = nx / 2;
        let c = cb as u32;
        let (x2, rest) = (c % xh, c / xh);
        let (y, rest) = (rest % ny, rest / ny);
        let (z, t) = (rest % nz, rest / nz);
        [2 * x2 + ((self.parity ^ (y + z + t)) & 1), y, z, t]
    }

    /// The neighbours of output site `cb`, for [`hop_at`](Self::hop_at).
    #[inline(always)]
    pub fn neighbours(&self, cb: usize) -> Neighbours<T::Real> {
        let [nx, ny, nz, nt] = self.dims;
        let xh = nx / 2;
        let c = self.coords(cb);
        let [x, y, z, t] = c;
        let cb_of = |x: u32, y: u32, z: u32, t: u32| ((t * nz + z) * ny + y) * xh + x / 2;
        let up = |v: u32, n: u32| if v + 1 == n { 0 } else { v + 1 };
        let down = |v: u32, n: u32| if v == 0 { n - 1 } else { v - 1 };
        let halo = if SPLIT {
            Some(Halo::new(self.dims, self.cut))
        } else {
            None
        };
        // Across a local edge of a cut axis: that axis's upper or lower ghost face.
        let ghost = |axis: usize, lower: bool| {
            halo.and_then(|h| {
                let (at, n) = (c[axis], self.dims[axis]);
                let edge = if lower { at == 0 } else { at + 1 == n };
                (edge && is_cut(self.cut, axis)).then(|| {
                    let room = if lower { h.room(axis) } else { 0 };
                    (h.ghost[axis] + room + face_index(self.dims, c, axis)) as u32
                })
            })
        };
        let sign = |edge: bool, global: u32| {
            if edge && (!SPLIT || self.cut & global != 0) {
                self.t_boundary
            } else {
                T::Real::ONE
            }
        };
        Neighbours {
            fwd: [
                cb_of(up(x, nx), y, z, t),
                ghost(1, false).unwrap_or_else(|| cb_of(x, up(y, ny), z, t)),
                ghost(2, false).unwrap_or_else(|| cb_of(x, y, up(z, nz), t)),
                ghost(3, false).unwrap_or_else(|| cb_of(x, y, z, up(t, nt))),
            ],
            bwd: [
                cb_of(down(x, nx), y, z, t),
                ghost(1, true).unwrap_or_else(|| cb_of(x, down(y, ny), z, t)),
                ghost(2, true).unwrap_or_else(|| cb_of(x, y, down(z, nz), t)),
                ghost(3, true).unwrap_or_else(|| cb_of(x, y, z, down(t, nt))),
            ],
            fwd_sign: sign(t + 1 == nt, T_HIGH_EDGE),
            bwd_sign: sign(t == 0, T_LOW_EDGE),
            link_sites: halo.map_or(self.half_volume(), |h| h.link_sites) as u32,
        }
    }

    /// Adds the hop of site `cb` in direction `mu` (0..4), forward or backward, to `acc`. With a literal
    /// direction the match folds away; with a varying one (a warp per direction) it is warp-uniform.
    ///
    /// # Safety
    /// As [`site`](Self::site); `nb` is `neighbours(cb)`.
    #[inline(always)]
    pub unsafe fn hop_at(
        &self,
        acc: &mut [Complex<T::Real>; 12],
        cb: usize,
        nb: &Neighbours<T::Real>,
        mu: usize,
        fwd: bool,
    ) {
        let sites = nb.link_sites as usize;
        let (p, other) = (self.parity, self.parity ^ 1);
        let one = T::Real::ONE;
        let (f, b) = (nb.fwd.map(|n| n as usize), nb.bwd.map(|n| n as usize));
        unsafe {
            match (mu, fwd) {
                (0, true) => self.hop::<0, true>(acc, sites, p, cb, f[0], one),
                (0, false) => self.hop::<0, false>(acc, sites, other, b[0], b[0], one),
                (1, true) => self.hop::<1, true>(acc, sites, p, cb, f[1], one),
                (1, false) => self.hop::<1, false>(acc, sites, other, b[1], b[1], one),
                (2, true) => self.hop::<2, true>(acc, sites, p, cb, f[2], one),
                (2, false) => self.hop::<2, false>(acc, sites, other, b[2], b[2], one),
                (_, true) => self.hop::<3, true>(acc, sites, p, cb, f[3], nb.fwd_sign),
                (_, false) => self.hop::<3, false>(acc, sites, other, b[3], b[3], nb.bwd_sign),
            }
        }
    }

    /// The spinor added to the hopping term at element `at` of the output: `x`, or zero (plain storage:
    /// a 16-bit site's values need its norm).
    ///
    /// # Safety
    /// As [`site`](Self::site), `at` inside the output parity.
    #[inline(always)]
    pub unsafe fn addend(&self, at: usize) -> Complex<T::Real> {
        if self.x.is_null() {
            Complex::ZERO
        } else {
            unsafe { T::load(self.x, at) }
        }
    }

    /// Stores `x + a h` (or `a h`) at element `at` of the output, `x` there being what `addend` returns
    /// ([`addend`](Self::addend), or a value loaded ahead); returns what it stored. Plain storage only
    /// (a 16-bit site is stored whole).
    ///
    /// # Safety
    /// As [`addend`](Self::addend).
    #[inline(always)]
    pub unsafe fn store(
        &self,
        at: usize,
        h: Complex<T::Real>,
        addend: impl FnOnce() -> Complex<T::Real>,
    ) -> Complex<T::Real> {
        let mut v = h.scale(self.a);
        // The addend after the scaling: that order keeps the one-thread-per-site kernel's schedule
        // (loading it first cut a third of its registers and made it 40-75% slower on the H100).
        if !self.x.is_null() {
            v += addend();
        }
        unsafe { T::store(self.out, at, v) };
        v
    }

    /// Adds one hop in direction `MU` (forward: `(1 - g) U psi(n + mu)`, backward:
    /// `(1 + g) U^dag psi(n - mu)`), the link being that of site `link_cb` of parity `link_parity`.
    #[inline(always)]
    unsafe fn hop<const MU: usize, const FWD: bool>(
        &self,
        acc: &mut [Complex<T::Real>; 12],
        link_sites: usize,
        link_parity: u32,
        link_cb: usize,
        nb_cb: usize,
        sign: T::Real,
    ) {
        let at = tile_index(nb_cb, T::SLOTS);
        let psi = |s: usize, c: usize| unsafe { T::load(self.inp, at + (s * 3 + c) * TILE) };
        // 16-bit storage: the site's norm, applied once to the projected half spinor rather than to
        // each of the values it is made of.
        let factor = match (T::NORMED, MU == 3) {
            (false, false) => None,
            (false, true) => Some(sign),
            (true, _) => {
                let n = unsafe { T::norm(self.inp, at + 12 * TILE) };
                // Fixed point: the links' integers carry the unit too.
                match T::UNIT == 1.0 {
                    true => Some(sign * n),
                    false => Some(sign * n * T::Real::from_f64(1.0 / T::UNIT as f64)),
                }
            }
        };
        // Project onto the two independent spin components: h_r = psi_r -+ sigma psi_lower.
        let mut h: HalfSpinor<T::Real> = [[Complex::ZERO; 3]; 2];
        for r in 0..2 {
            for c in 0..3 {
                let low = phase(PHASE[MU][r], psi(2 + PERM[MU][r], c));
                let up = psi(r, c);
                h[r][c] = if FWD { up - low } else { up + low };
                if let Some(f) = factor {
                    h[r][c] = h[r][c].scale(f);
                }
            }
        }
        // Row by row, so that only one row of the link is live at a time (f64 registers are scarce).
        let at = self.link_at(link_parity, MU, link_cb, link_sites);
        // 18-number links in f32 and f64: each row loaded just before its use (the whole matrix
        // loaded ahead spilled the f64 kernels; H100, 2026-11-26: f32 r18 4121 to 4451 GFLOPS at
        // 48^3x96 with the u32 neighbours). 16-bit ones keep the whole matrix ahead (3% faster), and
        // 12-number links their first two rows, the third being made of them.
        let ahead = R == 6 || T::NORMED;
        let top = match ahead {
            true => unsafe { [self.link_row(at, 0), self.link_row(at, 1)] },
            false => [[Complex::ZERO; 3]; 2],
        };
        let last = match (R, ahead) {
            (9, true) => unsafe { self.link_row(at, 2) },
            _ => [Complex::ZERO; 3],
        };
        let mut w: HalfSpinor<T::Real> = [[Complex::ZERO; 3]; 2];
        for a in 0..3 {
            let row = match (R, a, ahead) {
                (9, _, false) => unsafe { self.link_row(at, a) },
                (9, 2, true) => last,
                (_, 2, _) if T::UNIT == 1.0 => third_row(top),
                // The product of two stored rows carries the unit twice.
                (_, 2, _) => {
                    third_row(top).map(|z| z.scale(T::Real::from_f64(1.0 / T::UNIT as f64)))
                }
                _ => top[a],
            };
            for r in 0..2 {
                for b in 0..3 {
                    match (FWD, T::FMA) {
                        (true, true) => w[r][a] = row[b].mul_add(h[r][b], w[r][a]),
                        (true, false) => w[r][a] += row[b] * h[r][b],
                        (false, true) => w[r][b] = row[b].conj_mul_add(h[r][a], w[r][b]),
                        (false, false) => w[r][b] += row[b].conj() * h[r][a],
                    }
                }
            }
        }
        // Reconstruct: the lower components are -+ sigma^dag times the upper ones.
        for r in 0..2 {
            let pr = PERM[MU][r];
            let code = conj_code(PHASE[MU][pr]);
            for c in 0..3 {
                acc[r * 3 + c] += w[r][c];
                let low = phase(code, w[pr][c]);
                acc[(2 + r) * 3 + c] += if FWD { -low } else { low };
            }
        }
    }

    /// Index of entry 0 of the link of site `cb` of parity `parity` in direction `mu`.
    #[inline(always)]
    fn link_at(&self, parity: u32, mu: usize, cb: usize, sites: usize) -> usize {
        let tiles = sites.div_ceil(TILE);
        (parity as usize * 4 + mu) * tiles * R * TILE + tile_index(cb, R)
    }

    /// Row `a` (0 or 1, or 2 with 18-number links) of the link whose entry 0 is at `at`
    /// ([`link_at`](Self::link_at)).
    #[inline(always)]
    unsafe fn link_row(&self, at: usize, a: usize) -> [Complex<T::Real>; 3] {
        [0, 1, 2].map(|b| unsafe { T::load(self.gauge, at + (a * 3 + b) * TILE) })
    }
}

/// Makes one hopping-kernel entry ([`wilson_entries!`](super) names them for the precision).
macro_rules! dslash_entry {
    ($name:ident => $t:ty, $r:literal, $split:literal) => {
        crate::kernel! {
            /// Generated kernel entry: one thread per site of the output parity (or of the slices
            /// selected).
            pub unsafe fn $name(d: crate::wilson::Dslash<$t, $r, $split>) {
                let i = crate::device::thread::index_1d();
                if i < d.threads() {
                    <crate::wilson::Dslash<$t, $r, $split> as crate::bind::Kernel>::item(&d, i)
                }
            }
        }
    };
}

// SAFETY: the entries (`dslash_entry!`) take one `Dslash<T, R, SPLIT>` and run `item` for their thread;
// a bound value's spans cover the sites, links and ghosts the hops read (`Dslash::bind`), an item
// skips a listed site outside the parity, and each item writes only its own site of `out`.
unsafe impl<T: super::WilsonEntries, const R: usize, const SPLIT: bool> crate::bind::Kernel
    for Dslash<T, R, SPLIT>
{
    const MODULE: &'static str = env!("CARGO_CRATE_NAME");

    fn entry(&self) -> &'static str {
        T::DSLASH[SPLIT as usize][(R == 6) as usize]
    }

    fn items(&self) -> usize {
        self.threads()
    }

    #[inline(always)]
    unsafe fn item(&self, i: usize) {
        let cb = self.site_of(i);
        if cb < self.half_volume() {
            // SAFETY: bound, and `cb` a site of the output parity.
            unsafe { self.site(cb) }
        }
    }
}
