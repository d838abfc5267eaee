//! One BiCGStab iteration of the even-odd Wilson system `M = 1 - kappa^2 H_eo H_oe` in one kernel: the
//! four hopping terms, the vector updates and the three reductions of the iteration (two of them on
//! the output of a hopping term, in the same phase), separated by
//! grid barriers ([`GridBarrier`]) instead of kernel boundaries. At small volumes, where each of the
//! nine kernels of an iteration runs far below one wave and their launches and gaps are most of the
//! time, one launch per iteration is what overhead hiding alone cannot reach.
//!
//! The work is the separate kernels' own, in the order of the host solver's iteration: the hops of
//! [`Dslash::site`], spread a warp per hop (eight threads per site: at these volumes the latency of one
//! thread's eight hops, not bandwidth, is the time), and [`Blas::element`] in grid-stride loops. Each reduction: every block writes its partial sums,
//! a barrier, then every block adds all partials in the same order and runs [`BiCgState::finish`]
//! itself, so all blocks hold the same scalars without another barrier; block 0 stores the state at
//! the end. The reductions alternate between two halves of the partials so that a block racing ahead
//! into the next reduction cannot overwrite what a slower one is still adding.
#![allow(clippy::needless_range_loop)]

use super::dslash::check_dims;
use super::{component_index, Dslash, PlainStore, TILE};
use crate::bicgstab::{block_sum, BiCgState, Blas, Op, Stage, Sums, HOST_FINISHES, RUNNING};
use crate::bind::{check_len, Bound, Cooperative, Kernel, Place, Span, SpanError, SpanMut};
use crate::complex::{Complex, ComplexReal};
use crate::device::grid::GridBarrier;
use crate::device::thread::{self, sync_threads};

/// Threads per block of the fused kernel: a warp for each of the eight hops of a site.
pub const FUSED_BLOCK: u32 = 8 * TILE as u32;

/// The steps of one iteration, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// `tmp = H_oe p` (odd sites).
    HopP,
    /// `v = p - kappa^2 H_eo tmp` (even sites): `v = M p`; `<v, r0>`: `alpha`.
    ApplyP,
    /// `s = r - alpha v`.
    S,
    /// `tmp = H_oe s`.
    HopS,
    /// `t = s - kappa^2 H_eo tmp`: `t = M s`; `<t, s>`, `|t|^2`, `|s|^2`: `omega`.
    ApplyS,
    /// `x += alpha p + omega s`, `r = s - omega t`; `<r0, r>`, `|r|^2`: convergence and `beta`.
    Xr,
    /// `p = r + beta (p - omega v)`.
    P,
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 7] = [
        Phase::HopP,
        Phase::ApplyP,
        Phase::S,
        Phase::HopS,
        Phase::ApplyS,
        Phase::Xr,
        Phase::P,
    ];

    /// Phase `k` of [`ALL`](Self::ALL) (the last for `k` beyond it).
    #[inline(always)]
    pub const fn at(k: usize) -> Phase {
        match k {
            0 => Phase::HopP,
            1 => Phase::ApplyP,
            2 => Phase::S,
            3 => Phase::HopS,
            4 => Phase::ApplyS,
            5 => Phase::Xr,
            _ => Phase::P,
        }
    }

    /// The scalar step after this phase's reduction, and which half of the partials it uses.
    pub const fn reduction(self) -> Option<(Stage, usize)> {
        match self {
            Phase::ApplyP => Some((Stage::Alpha, 0)),
            Phase::ApplyS => Some((Stage::Omega, 1)),
            Phase::Xr => Some((Stage::Beta, 0)),
            _ => None,
        }
    }

    /// Whether the next phase reads values other threads wrote in this one (a barrier after it).
    pub const fn needs_barrier(self) -> bool {
        !matches!(self, Phase::P)
    }
}

/// What a phase runs: a hopping term, with the dot product of its output and another vector where the
/// phase reduces (each element read back by the thread that wrote it), or a vector operation.
enum Work<T: PlainStore, const R: usize> {
    Sites(Dslash<T, R>, Option<Blas<T>>),
    Elements(Op, Blas<T>),
}

/// The arguments of the fused iteration kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FusedIteration<T: PlainStore, const R: usize> {
    /// The lattice, gauge field and boundary of the hopping term (its `out`, `inp`, `x`, `a` and
    /// `parity` are set per phase; `halt` is unused).
    pub hop: Dslash<T, R>,
    /// `kappa^2`.
    pub kappa2: T,
    /// `x, r, r0, p, v, s, t` (even sites) and `tmp` (odd sites), `n` complex elements each.
    pub vec: [*mut T; 8],
    /// Complex elements per vector.
    pub n: u32,
    /// The solver state.
    pub state: *mut BiCgState,
    /// Partial sums: two halves of `4 * blocks`.
    pub partials: *mut f64,
    /// The grid barrier.
    pub barrier: GridBarrier,
    /// `Phase::ALL.len()`, passed in so that the kernel's phase loop stays a loop: one copy of the
    /// hopping term and of the vector code instead of one per phase (which took 255 registers and
    /// spilled).
    pub phases: u32,
    /// The most blocks `partials` serves (set by [`bind`](Self::bind); the launch's grid, not the
    /// kernel, reads it).
    pub blocks: u32,
}

/// The memory of a fused iteration ([`FusedIteration::bind`]).
#[derive(Debug)]
pub struct FusedFields<'a, T> {
    /// The gauge field, both parities.
    pub gauge: Span<'a, T>,
    /// `x, r, r0, p, v, s, t` (even sites) and `tmp` (odd sites).
    pub vec: [SpanMut<'a, T>; 8],
    /// The solver state.
    pub state: SpanMut<'a, BiCgState>,
    /// Partial sums: 8 per block.
    pub partials: SpanMut<'a, f64>,
    /// The grid barrier's word.
    pub barrier: SpanMut<'a, u32>,
}

// SAFETY: every element is written by exactly one thread per phase.
unsafe impl<T: PlainStore, const R: usize> Send for FusedIteration<T, R> {}
// SAFETY: as above.
unsafe impl<T: PlainStore, const R: usize> Sync for FusedIteration<T, R> {}

const X: usize = 0;
const RES: usize = 1;
const R0: usize = 2;
const PV: usize = 3;
const V: usize = 4;
const S: usize = 5;
const TV: usize = 6;
const TMP: usize = 7;

impl<T: PlainStore, const R: usize> FusedIteration<T, R> {
    /// These numbers (`hop`'s lattice and boundary, `kappa2`, `n`, `phases`) with `mem`'s addresses,
    /// checked: every vector holds `n` complex elements and at least a parity of the lattice, the gauge
    /// field both parities' links, the state and the barrier one each, and `partials` 8 per block (the
    /// blocks it serves bound the launch: [`Cooperative::blocks`]).
    pub fn bind<'a>(self, mem: FusedFields<'a, T>) -> Result<Bound<'a, Self>, SpanError> {
        check_dims(self.hop.dims, 0)?;
        let own = self.hop.half_volume();
        let reals = (2 * self.n as usize).max(2 * 12 * own.div_ceil(TILE) * TILE);
        let mut places = [mem.gauge.place(); 12];
        for (k, v) in mem.vec.iter().enumerate() {
            check_len("vec", v.len(), reals)?;
            places[k + 1] = v.place();
        }
        check_len(
            "gauge",
            mem.gauge.len(),
            2 * 8 * own.div_ceil(TILE) * R * TILE,
        )?;
        check_len("state", mem.state.len(), 1)?;
        check_len("partials", mem.partials.len(), 8)?;
        check_len("barrier", mem.barrier.len(), 1)?;
        places[9] = mem.state.place();
        places[10] = mem.partials.place();
        places[11] = mem.barrier.place();
        let place = Place::common(&places)?;
        let null = core::ptr::null();
        let f = Self {
            hop: Dslash {
                out: core::ptr::null_mut(),
                inp: null,
                gauge: mem.gauge.ptr(),
                x: null,
                halt: core::ptr::null(),
                sites: core::ptr::null(),
                ..self.hop
            },
            vec: mem.vec.map(|v| v.ptr()),
            state: mem.state.ptr(),
            partials: mem.partials.ptr(),
            barrier: GridBarrier {
                count: mem.barrier.ptr(),
            },
            blocks: (mem.partials.len() / 8).min(u32::MAX as usize) as u32,
            ..self
        };
        // SAFETY: every span was checked above against what the phases address.
        Ok(unsafe { Bound::new_unchecked(f, place) })
    }

    /// The hopping term `out = x + a H inp` on `parity`.
    fn hop(&self, out: usize, inp: usize, x: Option<usize>, a: T, parity: u32) -> Dslash<T, R> {
        Dslash {
            out: self.vec[out],
            inp: self.vec[inp],
            x: x.map_or(core::ptr::null(), |x| self.vec[x] as *const T),
            a,
            parity,
            halt: core::ptr::null(),
            ..self.hop
        }
    }

    /// The vector operation `op` on vectors `v`.
    fn blas(&self, v: &[usize]) -> Blas<T> {
        let mut ptrs = [core::ptr::null_mut(); 6];
        for (p, &k) in ptrs.iter_mut().zip(v) {
            *p = self.vec[k];
        }
        Blas {
            n: self.n,
            stage: HOST_FINISHES,
            v: ptrs,
            state: self.state,
            partials: self.partials,
            done: core::ptr::null_mut(),
            sums: core::ptr::null_mut(),
        }
    }

    /// What `phase` runs: a hopping term over the sites, or a vector operation over the elements.
    #[inline(always)]
    fn plan(&self, phase: Phase) -> Work<T, R> {
        let mk2 = -self.kappa2;
        match phase {
            Phase::HopP => Work::Sites(self.hop(TMP, PV, None, T::ONE, 1), None),
            Phase::ApplyP => Work::Sites(
                self.hop(V, TMP, Some(PV), mk2, 0),
                Some(self.blas(&[V, R0])),
            ),
            Phase::S => Work::Elements(Op::S, self.blas(&[S, RES, V])),
            Phase::HopS => Work::Sites(self.hop(TMP, S, None, T::ONE, 1), None),
            Phase::ApplyS => Work::Sites(
                self.hop(TV, TMP, Some(S), mk2, 0),
                Some(self.blas(&[TV, S])),
            ),
            Phase::Xr => Work::Elements(Op::Xr, self.blas(&[X, PV, S, TV, RES, R0])),
            Phase::P => Work::Elements(Op::P, self.blas(&[PV, RES, V])),
        }
    }

    /// The work of `phase`: a hopping term (`hop_by_warps` on the GPU, the same
    /// sums in the same order site by site on the host), or a vector operation on the elements `first,
    /// first + stride, ...` with the scalars `st`; returns the thread's share of the phase's sums.
    ///
    /// # Safety
    /// The fields must have the layouts of [`crate::wilson`] for this lattice, each `n` elements; on the
    /// GPU, blocks of [`FUSED_BLOCK`] threads, every thread of which calls it.
    #[inline(always)]
    pub unsafe fn work(&self, phase: Phase, st: &BiCgState, first: usize, stride: usize) -> Sums {
        let mut acc = [0.0f64; 4];
        match self.plan(phase) {
            #[cfg(target_arch = "nvptx64")]
            // SAFETY: the caller's layouts and block shape.
            Work::Sites(d, dot) => acc = unsafe { Self::hop_by_warps(&d, dot) },
            #[cfg(not(target_arch = "nvptx64"))]
            Work::Sites(d, dot) => {
                let mut cb = first;
                while cb < d.half_volume() {
                    let nb = d.neighbours(cb);
                    let mut by_mu = [[Complex::<T>::ZERO; 12]; 4];
                    for (mu, s) in by_mu.iter_mut().enumerate() {
                        let (mut f, mut b) = ([Complex::ZERO; 12], [Complex::ZERO; 12]);
                        // SAFETY: the caller's layouts; `cb` is inside the half volume.
                        unsafe {
                            d.hop_at(&mut f, cb, &nb, mu, true);
                            d.hop_at(&mut b, cb, &nb, mu, false);
                        }
                        *s = core::array::from_fn(|k| f[k] + b[k]);
                    }
                    for k in 0..12 {
                        let h = by_mu[0][k] + by_mu[1][k] + by_mu[2][k] + by_mu[3][k];
                        let at = component_index::<T>(cb, k);
                        // SAFETY: as above.
                        let v = unsafe { d.store(at, h, || d.addend(at)) };
                        if let Some(b) = &dot {
                            // SAFETY: as above.
                            let s = Blas::<T>::dot_terms(v, unsafe {
                                <T as ComplexReal>::load(b.v[1], at)
                            });
                            for q in 0..4 {
                                acc[q] += s[q];
                            }
                        }
                    }
                    cb += stride;
                }
            }
            Work::Elements(op, b) => {
                let mut i = first;
                while i < self.n as usize {
                    // SAFETY: the caller's lengths; `i < n`.
                    let s = unsafe { b.element(op, st, i) };
                    for q in 0..4 {
                        acc[q] += s[q];
                    }
                    i += stride;
                }
            }
        }
        acc
    }

    /// The hopping term `d` with a warp per hop of a tile of [`TILE`] sites (forward and backward in
    /// each direction: eight warps, one block), the eight partial sums then added through shared memory,
    /// forward and backward first, then the directions in order; `dot`, if any, is then reduced over
    /// the output (the thread's share returned). At the small volumes this kernel is for, a thread per
    /// site ([`Dslash::site`]) leaves most of the GPU idle and runs eight hops one after another; here
    /// each thread runs one.
    ///
    /// # Safety
    /// As [`work`](Self::work).
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    unsafe fn hop_by_warps(d: &Dslash<T, R>, dot: Option<Blas<T>>) -> Sums {
        let mut acc = [0.0f64; 4];
        // [direction][component][site of the tile], complex; sized for f64.
        let parts = crate::shared_array![f64; 4 * 12 * TILE * 2] as *mut T;
        let tid = thread::thread_idx_x() as usize;
        let (warp, lane) = (tid / 32, tid % 32);
        let (mu, fwd) = (warp / 2, warp % 2 == 0);
        // The output components this thread stores (of its own site): `warp`, and `warp + 8` for
        // the first four warps; coalesced, as the lanes are consecutive sites.
        let ks = [warp, warp + 8];
        let nk = if warp < 4 { 2 } else { 1 };
        let at = |mu: usize, k: usize| (mu * 12 + k) * TILE + lane;
        let vh = d.half_volume();
        let mut tile = thread::block_idx_x() as usize;
        while tile * TILE < vh {
            let cb = tile * TILE + lane;
            let live = cb < vh;
            let mut h = [Complex::<T>::ZERO; 12];
            if live {
                // SAFETY: the caller's layouts; `cb` is inside the half volume.
                unsafe { d.hop_at(&mut h, cb, &d.neighbours(cb), mu, fwd) };
            }
            if !fwd {
                for k in 0..12 {
                    // SAFETY: inside `parts`; this warp's own entries.
                    unsafe { <T as ComplexReal>::store(parts, at(mu, k), h[k]) };
                }
            }
            sync_threads();
            if fwd {
                for k in 0..12 {
                    // SAFETY: as above; the backward warp wrote them before the barrier.
                    unsafe {
                        <T as ComplexReal>::store(
                            parts,
                            at(mu, k),
                            h[k] + <T as ComplexReal>::load(parts, at(mu, k)),
                        )
                    };
                }
            }
            sync_threads();
            if live {
                for i in 0..nk {
                    let k = ks[i];
                    let e = component_index::<T>(cb, k);
                    // SAFETY: inside `parts`, complete after the barrier; `cb` in the half volume.
                    let v = unsafe {
                        let s = |mu| <T as ComplexReal>::load(parts, at(mu, k));
                        d.store(e, s(0) + s(1) + s(2) + s(3), || d.addend(e))
                    };
                    if let Some(b) = &dot {
                        // SAFETY: `e` is inside the vectors.
                        let s =
                            Blas::<T>::dot_terms(v, unsafe { <T as ComplexReal>::load(b.v[1], e) });
                        for q in 0..4 {
                            acc[q] += s[q];
                        }
                    }
                }
            }
            // The next tile reuses `parts`.
            sync_threads();
            tile += thread::grid_dim_x() as usize;
        }
        acc
    }

    /// One iteration on the GPU: every phase in grid-stride loops, grid barriers between them.
    ///
    /// # Safety
    /// As [`work`](Self::work); launched cooperatively (every block resident) in blocks of
    /// [`FUSED_BLOCK`] threads, `partials` holding `8 * blocks` values and the barrier's word this
    /// grid's alone.
    #[inline(always)]
    pub unsafe fn run(&self) {
        let mut st = unsafe { *self.state };
        if st.status != RUNNING {
            return;
        }
        let blocks = thread::grid_dim_x() as usize;
        let stride = blocks * thread::block_dim_x() as usize;
        let first = thread::index_1d();
        let shared = crate::shared_array![f64; 4];
        for k in 0..self.phases as usize {
            let phase = Phase::at(k);
            let sums = unsafe { self.work(phase, &st, first, stride) };
            if let Some((stage, half)) = phase.reduction() {
                let part = self.partials.wrapping_add(half * 4 * blocks);
                let mine = block_sum(sums);
                if thread::thread_idx_x() == 0 {
                    let b = thread::block_idx_x() as usize;
                    for q in 0..4 {
                        unsafe { *part.add(q * blocks + b) = mine[q] };
                    }
                }
                unsafe { self.barrier.sync() };
                // Every block adds the partials in the same order: the same scalars everywhere.
                let mut acc = [0.0f64; 4];
                let mut b = thread::thread_idx_x() as usize;
                while b < blocks {
                    for q in 0..4 {
                        // Volatile: written by other blocks in this kernel, never through this L1.
                        acc[q] += unsafe { part.add(q * blocks + b).read_volatile() };
                    }
                    b += thread::block_dim_x() as usize;
                }
                let all = block_sum(acc);
                if thread::thread_idx_x() == 0 {
                    for q in 0..4 {
                        unsafe { *shared.add(q) = all[q] };
                    }
                }
                sync_threads();
                let sums = core::array::from_fn(|q| unsafe { *shared.add(q) });
                sync_threads();
                st.finish(stage, sums);
                if st.status != RUNNING {
                    break;
                }
            } else if phase.needs_barrier() {
                unsafe { self.barrier.sync() };
            }
        }
        if thread::block_idx_x() == 0 && thread::thread_idx_x() == 0 {
            unsafe { *self.state = st };
        }
    }

    /// One iteration on the host, phase after phase over every site and element (one thread): the
    /// kernel's work and scalar steps in its order, for tests without a GPU.
    ///
    /// # Safety
    /// As [`work`](Self::work).
    pub unsafe fn emulate(&self) {
        let mut st = unsafe { *self.state };
        if st.status != RUNNING {
            return;
        }
        for phase in Phase::ALL {
            let sums = unsafe { self.work(phase, &st, 0, 1) };
            if let Some((stage, _)) = phase.reduction() {
                st.finish(stage, sums);
                if st.status != RUNNING {
                    break;
                }
            }
        }
        unsafe { *self.state = st };
    }
}

// SAFETY: the entries (`fused_entry!`) take one `FusedIteration<T, R>`; a bound value's spans cover
// every phase's sites and elements, and on the CPU the one item is the whole iteration, phase after
// phase ([`FusedIteration::emulate`]).
unsafe impl<T: super::FusedEntries, const R: usize> Kernel for FusedIteration<T, R> {
    const MODULE: &'static str = env!("CARGO_CRATE_NAME");

    fn entry(&self) -> &'static str {
        T::FUSED[(R == 6) as usize]
    }

    fn items(&self) -> usize {
        1
    }

    unsafe fn item(&self, _: usize) {
        // SAFETY: bound; one item, so one thread.
        unsafe { self.emulate() }
    }
}

// SAFETY: with at most `blocks` blocks of `FUSED_BLOCK` threads, all resident, the partials hold 8 per
// block and every thread reaches every grid barrier.
unsafe impl<T: super::FusedEntries, const R: usize> Cooperative for FusedIteration<T, R> {
    const BLOCK: u32 = FUSED_BLOCK;

    fn blocks(&self) -> u32 {
        self.blocks
    }
}

/// Makes one fused-iteration entry ([`wilson_entries!`](super) names them for the precision).
macro_rules! fused_entry {
    ($name:ident => $t:ty, $r:literal) => {
        crate::kernel! {
            /// Generated kernel entry: one BiCGStab iteration, launched cooperatively.
            pub unsafe fn $name(f: crate::wilson::FusedIteration<$t, $r>) {
                f.run()
            }
        }
    };
}
