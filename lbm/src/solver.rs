//! A lattice-Boltzmann run on the CPU or a GPU: the populations in one or two lattices, the time step
//! (the `gpu-kernels` body, as GPU kernels or over rayon), and the moments read back.

use std::path::Path;
use std::sync::Arc;

use lattice_gpu_formats::checkpoint::{Checkpoint, Stored};
use lattice_gpu_host::comm::{Communicator, Solo, Wire};
use lattice_gpu_host::decomp::{layers, Decomposition, Face, Region, Side};
use lattice_gpu_host::engine::tunecache::TuneCache;
use lattice_gpu_host::engine::tuner::{blocks, param, tune, Trials, Tunable, Tuned, BLOCK};
use lattice_gpu_host::engine::Cost;
use lattice_gpu_host::health::{self, Verdict};
use lattice_gpu_host::kernel::run_on_host;
use lattice_gpu_host::memory::{self, Footprint};
use lattice_gpu_host::overlap::{self, OverlapStep};
use lattice_gpu_host::Error as HostError;
use lattice_gpu_host::{DeviceBuffer, Element, Gpu, Plain};
use lattice_gpu_kernels::bind::{bits, bits_mut, Bits, Span, SpanMut};
use lattice_gpu_kernels::device::math::Real;
use lattice_gpu_kernels::lbm::{
    equilibrium, opposite, step_entry, tag, Cuts, Half, Lattices, Physics, Scheme, Step, Storage,
    Velocities, C, END_SHIFT, Q_MAX,
};
use rayon::prelude::*;

use crate::geometry::Geometry;
use crate::params::Params;
use crate::Result;

mod cuts;
mod forces;
mod outlets;

/// Runs `$body` with `const $q: usize` the populations of the velocity set `$v`: the steps' set is a
/// compile-time parameter, the run's a value.
macro_rules! with_q {
    ($v:expr, $q:ident => $body:expr) => {
        match $v {
            Velocities::D3Q19 => {
                const $q: usize = 19;
                $body
            }
            Velocities::D3Q27 => {
                const $q: usize = 27;
                $body
            }
        }
    };
}

/// The equilibrium of density `rho` and velocity `u` on `velocities` (deviations; the first
/// `velocities.q()` of the array).
pub fn equilibrium_of(velocities: Velocities, rho: f64, u: [f64; 3]) -> [f64; Q_MAX] {
    let mut e = [0.0; Q_MAX];
    with_q!(velocities, Q => e[..Q].copy_from_slice(&equilibrium::<f64, Q>(rho - 1.0, u)));
    e
}

use cuts::CutTable;
use outlets::outlet_owners;

/// How populations stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Streaming {
    /// Two lattices, pull: twice the populations of memory per cell.
    TwoLattice,
    /// One lattice, AA pattern: half the memory, the same results bit for bit.
    InPlace,
}

impl Streaming {
    /// `"ab"` or `"aa"`.
    pub fn name(self) -> &'static str {
        match self {
            Streaming::TwoLattice => "ab",
            Streaming::InPlace => "aa",
        }
    }

    /// The population held in `slot` at an even step count (in place, the slots are reversed then).
    fn population_in(self, slot: usize) -> usize {
        match self {
            Streaming::TwoLattice => slot,
            Streaming::InPlace => opposite(slot),
        }
    }

    /// Population lattices held.
    pub fn lattices(self) -> usize {
        match self {
            Streaming::TwoLattice => 2,
            Streaming::InPlace => 1,
        }
    }
}

/// A population storage with a host representation of its bits (so the host runtime can allocate it);
/// its step's kernel entries come with [`Storage`].
pub trait LbmStorage: Storage<Real: Plain + Element> + Bits<Self::Raw> {
    /// The plain type with the same bits (what a checkpoint stores: f64, f32, or u16 for f16).
    type Raw: Plain + Wire + Stored;
    /// A NaN, to poison what a step should overwrite.
    const NAN: Self::Raw;
}

macro_rules! lbm_storage {
    ($s:ty, $raw:ty, $nan:expr) => {
        impl LbmStorage for $s {
            type Raw = $raw;
            const NAN: $raw = $nan;
        }
    };
}
lbm_storage!(f32, f32, f32::NAN);
lbm_storage!(f64, f64, f64::NAN);
lbm_storage!(Half, u16, 0x7e00);

/// The post-collision deviations `post(cell)` of every population of `velocities` as stored
/// (`q * cells`, a slot per population; `post` gives the first `q`): the in-place lattice keeps a
/// cell's population `q` in slot `opposite(q)` between the odd and the even step. Cells go in runs,
/// each written to its range of every slot, so that `post` runs once per cell (an equilibrium for
/// each of 19 slots took most of a 384^3 run's set-up).
fn encode<S: LbmStorage>(
    cells: usize,
    streaming: Streaming,
    velocities: Velocities,
    post: impl Fn(usize) -> [f64; Q_MAX] + Sync,
) -> Vec<S::Raw> {
    const RUN: usize = 4096;
    let q = velocities.q();
    let mut raw = vec![S::Raw::default(); q * cells];
    let mut runs: Vec<Vec<&mut [S]>> = (0..cells.div_ceil(RUN))
        .map(|_| Vec::with_capacity(q))
        .collect();
    for slot in bits_mut::<S::Raw, S>(&mut raw).chunks_mut(cells.max(1)) {
        for (run, part) in runs.iter_mut().zip(slot.chunks_mut(RUN)) {
            run.push(part);
        }
    }
    let order: Vec<usize> = (0..q).map(|slot| streaming.population_in(slot)).collect();
    runs.into_par_iter().enumerate().for_each(|(r, mut slots)| {
        for i in 0..slots[0].len() {
            let values = post(r * RUN + i);
            for (part, &q) in slots.iter_mut().zip(&order) {
                part[i] = S::encode(S::Real::from_f64(values[q]));
            }
        }
    });
    raw
}

/// Where a run executes.
#[derive(Clone, Debug)]
pub enum Engine {
    /// The CPU, over rayon.
    Host,
    /// A GPU.
    Device(Arc<Gpu>),
}

/// Density and velocity of every cell at one step (walls: zero).
#[derive(Clone, Debug, PartialEq)]
pub struct Moments {
    /// Grid `[nx, ny, nz]`.
    pub dims: [usize; 3],
    /// Density per cell.
    pub rho: Vec<f64>,
    /// Velocity per cell (with the half-force correction of Guo forcing).
    pub u: Vec<[f64; 3]>,
}

impl Moments {
    /// Kinetic energy `sum rho u^2 / 2`.
    pub fn kinetic_energy(&self) -> f64 {
        self.rho
            .iter()
            .zip(&self.u)
            .map(|(r, u)| 0.5 * r * (u[0] * u[0] + u[1] * u[1] + u[2] * u[2]))
            .sum()
    }

    /// Total mass `sum rho`.
    pub fn mass(&self) -> f64 {
        self.rho.iter().sum()
    }

    /// Largest speed; NaN where any speed is NaN (a diverged flow must not look calm).
    pub fn max_speed(&self) -> f64 {
        self.u
            .iter()
            .map(|u| (u[0] * u[0] + u[1] * u[1] + u[2] * u[2]).sqrt())
            .fold(0.0, max_or_nan)
    }

    /// The cell index of `[x, y, z]`.
    pub fn index(&self, p: [usize; 3]) -> usize {
        p[0] + self.dims[0] * (p[1] + self.dims[1] * p[2])
    }
}

/// The larger of `a` and `b`, or NaN where either is: `f64::max` drops a NaN, so a maximum folded
/// with it over a diverged flow would come out finite and small.
pub fn max_or_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// What a non-finite moment found by [`Lbm::verdict`] is and where, from its index in the whole grid's
/// moments (`c * cells + cell`, `c` 0 for the density, 1 to 3 for the velocity): e.g. ("the x
/// velocity", "cell (x, y, z) = (3, 5, 1)"), cells counted from 0, walls included.
pub fn non_finite_at(dims: [usize; 3], index: u64) -> (&'static str, String) {
    let cells = dims.iter().map(|&d| d as u64).product::<u64>().max(1);
    let (c, n) = (index / cells, index % cells);
    let (nx, ny) = (dims[0].max(1) as u64, dims[1].max(1) as u64);
    let what = [
        "the density",
        "the x velocity",
        "the y velocity",
        "the z velocity",
    ];
    (
        what[(c as usize).min(3)],
        format!(
            "cell (x, y, z) = ({}, {}, {})",
            n % nx,
            n / nx % ny,
            n / (nx * ny)
        ),
    )
}

/// Refuses a run whose `footprint` does not fit, before anything of it is allocated; on a GPU its
/// GPU part first: a lattice too large for the GPU is what a GPU run must change, whatever the host
/// could hold.
pub fn check_memory(footprint: &Footprint, gpu: Option<&Gpu>) -> Result<()> {
    if let Some(gpu) = gpu.filter(|_| footprint.gpu > 0) {
        gpu.check_fits(footprint.gpu, &footprint.what)?;
    }
    Ok(footprint.check(gpu)?)
}

/// How a run is spread over ranks, for its memory ([`Lbm::footprint`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spread {
    /// Ranks in all.
    pub ranks: usize,
    /// The ranks that share this process's memory (threads of `--gpus`, or MPI processes of a node).
    pub here: usize,
    /// Whether a single rank cuts its lattice as a split run does ([`Lbm::new_on_cut`]).
    pub cut: bool,
}

impl Spread {
    /// One rank, not cut.
    pub const ONE: Self = Self {
        ranks: 1,
        here: 1,
        cut: false,
    };

    /// The spread of a run over the ranks of `comm`, cut where `cut` says so.
    pub fn of<C: Communicator>(comm: &C, cut: bool) -> Self {
        Self {
            ranks: comm.size(),
            here: comm.ranks_here(),
            cut,
        }
    }

    /// Whether each rank holds halo planes (and the host mirror of its lattice that moves them).
    fn has_halos(self) -> bool {
        self.ranks > 1 || self.cut
    }
}

enum Memory<S: LbmStorage> {
    Host {
        f: Vec<S::Raw>,
        g: Vec<S::Raw>,
        tags: Vec<u8>,
        moments: Vec<S::Real>,
    },
    Device {
        gpu: Arc<Gpu>,
        f: DeviceBuffer<S::Raw>,
        g: Option<DeviceBuffer<S::Raw>>,
        tags: DeviceBuffer<u8>,
        moments: DeviceBuffer<S::Real>,
    },
}

/// One split step as the framework's schedule sees it ([`overlap::step`]): the halo planes' exchange,
/// the first and last planes that read them, the planes between that do not.
struct StepParts<'s, S: LbmStorage, C: Communicator> {
    lbm: &'s mut Lbm<S, C>,
    scheme: Scheme,
    with_moments: bool,
}

impl<S: LbmStorage, C: Communicator> OverlapStep for StepParts<'_, S, C> {
    type Error = crate::Error;

    fn runs_beside(&self) -> bool {
        self.lbm.nccl_beside()
    }

    fn start(&mut self, next: bool) -> Result<()> {
        if next {
            return self.lbm.start_next();
        }
        self.lbm.halos_current = false;
        self.lbm.start_exchange()
    }

    fn finish(&mut self, next: bool) -> Result<()> {
        self.lbm.finish_exchange()?;
        // Through NCCL beside the interior, the exchange moved the halos this step wrote: the next
        // step's boundary reads them without another.
        self.lbm.halos_current = next;
        Ok(())
    }

    fn boundary(&mut self, beside: bool) -> Result<()> {
        let (scheme, wm) = (self.scheme, self.with_moments);
        match beside {
            true => self.lbm.boundary_beside(scheme, wm),
            false => {
                let ends = self.lbm.end_planes();
                self.lbm.launch_all(scheme, wm, ends)
            }
        }
    }

    fn interior(&mut self) -> Result<()> {
        let inner = self.lbm.inner_planes();
        self.lbm.launch_all(self.scheme, self.with_moments, inner)
    }
}

/// The error of a step beside the interior where it cannot run.
fn beside_needs() -> crate::Error {
    crate::Error::InvalidParameter(
        "a step beside the interior needs two-lattice streaming on a GPU with halos through NCCL"
            .into(),
    )
}

/// The cells by which a GPU step's threads shift the rows (`shifted`) for storage of `bytes` per
/// population: [`END_SHIFT`] for f16 where most rows have a cell near a boundary next to an end (an
/// inlet and an outlet across x, walls closing x), so that both share one warp, which they hold up;
/// else 0. In f32 and f64, bound by memory, the shifted warps' accesses cost more than the warps
/// they free (at 256^3 on an H200, the sphere's channel ran at 69% of the box in f32 two-lattice
/// against 76% unshifted; f16 at 72% against 62%, docs/BENCHMARKS.md).
fn row_shift(tags: &[u8], [nx, ny, nz]: [usize; 3], bytes: usize) -> u32 {
    if nx < 2 * END_SHIFT as usize || bytes != 2 {
        return 0;
    }
    let near = |x: usize| {
        (0..ny * nz)
            .filter(|r| tags[r * nx + x] & tag::NEAR_WALL != 0)
            .count()
    };
    match near(1) + near(nx - 2) > ny * nz {
        true => END_SHIFT,
        false => 0,
    }
}

/// The threads per block [`Lbm::tune_block`] tries.
pub const TUNE_BLOCKS: [u32; 4] = [128, 256, 512, 1024];

/// The block widths tried (threads along x; 0: as wide as the block or the grid's rows): a block
/// ends when its slowest warp does, and with an inlet and an outlet across x every row has a cell
/// near a boundary at each end, whose warps take longer (`row_shift` gives f16 one such warp a row).
/// Blocks a warp wide keep them apart from the rest of the row.
pub const TUNE_WIDTHS: [u32; 2] = [0, 32];

/// The tuner's name of the block width.
const WIDTH: &str = "width";

/// How [`Lbm::tune_block`] tries each block size: two passes over them (the first block size also
/// runs while the GPU raises its clocks after the set-up), each with two steps that settle the new
/// launch (an even count keeps in-place streaming's odd and even steps in balance) and four timed.
pub const TUNE_TRIALS: Trials = Trials {
    rounds: 2,
    settle: 2,
    timed: 4,
};

/// Steps [`Lbm::tune_block`] runs at each block size.
pub const TUNE_STEPS: u64 = TUNE_TRIALS.calls_each();

/// A GPU run's step, tuned over its block size: each rank's own lattice (its planes, with the halo
/// planes), streaming and precision key the cache; every rank tries the same blocks (a split run
/// exchanges halos at each step).
impl<S: LbmStorage, C: Communicator> Tunable for Lbm<S, C> {
    fn tune_key(&self) -> (String, String, String) {
        let [x, y, z] = self.geometry.dims();
        let split = if self.split.is_some() { ",split" } else { "" };
        // Where the cells near boundaries lie decides the best launch, so lattices of one size with
        // other boundaries are tuned apart: a hash of the tags (FNV-1a, stable from run to run) tells
        // them apart.
        let tags = self.geometry.tags();
        let cells = if tags.iter().any(|&t| t != tag::FLUID) {
            let hash = tags.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &t| {
                (h ^ u64::from(t)).wrapping_mul(0x0000_0100_0000_01b3)
            });
            format!("{x}x{y}x{z},tags={hash:016x}")
        } else {
            format!("{x}x{y}x{z}")
        };
        (
            format!("lbm_step[{}{split}]", self.streaming.name()),
            cells,
            S::NAME.to_string(),
        )
    }

    fn candidates(&self) -> Vec<Vec<(String, u32)>> {
        blocks(&TUNE_BLOCKS)
            .into_iter()
            .flat_map(|b| TUNE_WIDTHS.map(|w| [b.clone(), vec![(WIDTH.to_string(), w)]].concat()))
            .collect()
    }

    fn set_params(&mut self, params: &[(String, u32)]) -> lattice_gpu_host::Result<bool> {
        if param(params, BLOCK).is_none_or(|b| self.set_block(b).is_err()) {
            return Ok(false);
        }
        // Entries cached before blocks had widths take the rows whole.
        self.width = param(params, WIDTH).unwrap_or(0);
        Ok(true)
    }

    /// This rank's cells (its halo planes too, on a split run), each population read and written once;
    /// LBM is measured in cell updates, its flops are not counted.
    fn cost(&self) -> Cost {
        let cells = self.geometry.cells() as f64;
        Cost {
            points: cells,
            flops: 0.0,
            bytes: cells * Self::traffic_per_cell(self.velocities()) as f64,
        }
    }

    fn time_ms(&mut self, calls: u64) -> lattice_gpu_host::Result<f64> {
        let gpu = self
            .gpu()
            .cloned()
            .ok_or_else(|| lattice_gpu_host::Error::Caller("tuning a run on the CPU".into()))?;
        gpu.time_ms(|| {
            for _ in 0..calls {
                self.step(false)?;
            }
            Ok(())
        })
    }

    fn on_all_ranks(&self, here: bool) -> lattice_gpu_host::Result<bool> {
        Ok(self.comm.sum(f64::from(u8::from(here)))? == self.comm.size() as f64)
    }
}

/// A run decomposed along z: this rank's planes and the halo plan of one plane per side.
struct Split {
    /// The whole grid.
    global: Geometry,
    /// First global plane this rank owns.
    z0: usize,
    /// Refreshes both halo planes from the neighbours.
    plan: Vec<Face<3>>,
    /// The in-place odd step writes the populations leaving the slab into the halo planes: these plans
    /// send them back to the plane they belong to, for populations moving down (`c_z = -1`) and up.
    back: [Vec<Face<3>>; 2],
    /// The local z planes the refresh sends: copied out before the step's inner planes run.
    sent: Vec<usize>,
    /// The planes the return plans send or receive (the received ones are read too: their wall cells
    /// keep their values).
    returned: Vec<usize>,
    /// The planes the refresh receives, and those the return plans receive: copied back in.
    received: [Vec<usize>; 2],
    /// Per population, the cells the return plans receive whose upstream cell is a wall: nothing
    /// streamed into them, they bounced the population back themselves, so their values must outlast
    /// what arrives. Found once (the tags do not change), not every step.
    walled: Vec<Vec<usize>>,
}

impl Split {
    /// The global plane that local plane `lz` holds: the first and last are halo planes.
    fn global_plane(&self, lz: usize) -> usize {
        let nz = self.global.dims()[2];
        (self.z0 + nz + lz - 1) % nz
    }
}

/// [`Split::walled`] of a rank's `local` geometry and return plans.
fn walled_cells(local: &Geometry, back: &[Vec<Face<3>>; 2]) -> Vec<Vec<usize>> {
    local
        .velocities()
        .directions()
        .iter()
        .map(|c| {
            let plan = match c[2] {
                -1 => &back[0],
                1 => &back[1],
                _ => return Vec::new(),
            };
            let upstream_wall = |p: &[usize; 3]| {
                let up = [0, 1, 2].map(|a| {
                    let n = local.dims()[a] as i64;
                    (p[a] as i64 - c[a] as i64).rem_euclid(n) as usize
                });
                !local.is_fluid(local.index(up))
            };
            plan.iter()
                .flat_map(|f| f.recv.points())
                .filter(upstream_wall)
                .map(|p| local.index(p))
                .collect()
        })
        .collect()
}

/// The plans that return what the in-place odd step wrote into the halo planes: index 0 for populations
/// moving down (the lower halo goes to the lower neighbour's top plane), 1 for those moving up.
fn return_plans(plan: &[Face<3>]) -> [Vec<Face<3>>; 2] {
    let face = |side| {
        *plan
            .iter()
            .find(|f| f.axis == 2 && f.side == side)
            .expect("a z face per side")
    };
    let (lower, upper) = (face(Side::Lower), face(Side::Upper));
    let none = |mut r: Region<3>| {
        r.size[2] = 0;
        r
    };
    // Each rank sends its halo one way and receives its boundary plane from the other side.
    let way = |out: Face<3>, back: Face<3>| {
        vec![
            Face {
                send: out.recv,
                recv: none(out.send),
                ..out
            },
            Face {
                send: none(back.recv),
                recv: back.send,
                ..back
            },
        ]
    };
    [way(lower, upper), way(upper, lower)]
}

/// A lattice-Boltzmann run in storage precision `S`, on one domain or split along z over the ranks of
/// `C`.
pub struct Lbm<S: LbmStorage, C: Communicator = Solo> {
    /// The lattice this rank holds (with a halo plane on each side of a split run).
    geometry: Geometry,
    params: Params,
    streaming: Streaming,
    steps: u64,
    moments_step: Option<u64>,
    block: u32,
    /// Threads along x of a block (0: as many as the block and the rows allow).
    width: u32,
    mem: Memory<S>,
    comm: C,
    split: Option<Split>,
    /// A split run's host copy of `f` that the halo plans run on: only the planes they touch are ever
    /// copied in or out (empty until the first exchange).
    mirror: Vec<S::Raw>,
    /// Whether a split run's planes that read no halo run during the exchange ([`set_overlap`](Self::set_overlap)).
    overlap: bool,
    /// Whether the rank's cells include free-slip ones: its GPU steps run the entries that mirror off
    /// them (`Bound::set_slip`).
    slips: bool,
    /// The cells by which the GPU's threads shift the rows ([`row_shift`]).
    shift: u32,
    /// Whether the GPU's steps push what enters a boundary cell into its slots (`Step::cell`): where
    /// the whole grid has no free-slip cell, no interpolated link and no outlet that lets sound out
    /// (the same on every rank, so that a checkpoint does not depend on the split). Elsewhere the
    /// ranks without either run the entries with the mirrors, which do not push.
    plain: bool,
    /// Whether the boundary cells' slots hold what the last step that pushes stored there: not where
    /// the state was set since.
    pushed: bool,
    /// Whether the halo planes of `f` hold the neighbours' planes of the step before (an overlapped
    /// NCCL step exchanges what it wrote; the others exchange what they read, first).
    halos_current: bool,
    /// A split run's halo planes of every population straight between the GPUs instead
    /// ([`exchange_through`](Self::exchange_through)).
    #[cfg(feature = "nccl")]
    nccl: Option<(
        lattice_gpu_host::nccl::Nccl,
        lattice_gpu_host::nccl::LayerHalo,
    )>,
    /// The links of each body on this rank ([`forces`](Self::forces)).
    bodies: Vec<forces::BodyLinks>,
    /// The rank's interpolated links, if any.
    cuts: Option<CutTable>,
}

impl<S: LbmStorage> Lbm<S> {
    /// A run at step 0 whose cells start at the equilibrium of `init(cell) = (rho, u)`. Checks the
    /// parameters, then that the run fits the host and GPU memory
    /// ([`footprint`](Lbm::footprint)), before allocating.
    pub fn new(
        engine: &Engine,
        geometry: Geometry,
        params: Params,
        streaming: Streaming,
        init: impl Fn(usize) -> (f64, [f64; 3]) + Sync,
    ) -> Result<Self> {
        Self::new_on(Solo, engine, geometry, params, streaming, init)
    }
}

impl<S: LbmStorage, C: Communicator> Lbm<S, C> {
    /// Bytes per cell this storage, scheme and velocity set hold (populations and the tag; the moments
    /// buffer apart).
    pub fn bytes_per_cell(streaming: Streaming, velocities: Velocities) -> usize {
        streaming.lattices() * velocities.q() * size_of::<S::Raw>() + 1
    }

    /// Bytes moved per cell and time step at best: every population read once and written once.
    pub fn traffic_per_cell(velocities: Velocities) -> usize {
        2 * velocities.q() * size_of::<S::Raw>()
    }

    /// The velocity set.
    pub fn velocities(&self) -> Velocities {
        self.geometry.velocities()
    }

    /// Populations per cell.
    fn q(&self) -> usize {
        self.velocities().q()
    }

    /// The peak memory of a run of the whole grid `dims` spread as `spread`, on a GPU or not, as
    /// [`new_on_cut`](Self::new_on_cut), [`run`](Self::run), [`verdict`](Self::verdict) and
    /// [`moments`](Self::moments) hold it, with `snapshots` earlier [`Moments`] of the whole grid kept
    /// on rank 0 meanwhile (a steadiness check compares one), and then [`Moments`] written out as
    /// [`write_fields`](crate::output::write_fields) does; with `restart`, also the checkpoints it may
    /// write or resume from ([`save_state`](Self::save_state), [`restore_state`](Self::restore_state)).
    /// Checked before anything of that size is allocated, it turns a grid too large into a message
    /// instead of an abort.
    ///
    /// With `P` the grid's cells and, per rank, `L` its cells with halo planes and `O` those it owns:
    /// every rank builds the whole grid's tags (`P` bytes, twice while near-wall cells are marked) and,
    /// split, its own (`L`); the populations (`Q L` values, `Q` the velocity set's, twice for
    /// two-lattice streaming, and once more on the host for a GPU's upload or for a split run's halo
    /// planes), the tags (`L`) and the
    /// moments (4 `L` reals, downloaded from a GPU to be read). Reading the moments takes a copy of
    /// the rank's part of each (`8 O` bytes, and the copy posted to rank 0 by a thread), and on rank 0
    /// the whole grid's density and velocity (32 `P`) plus one component being gathered (8 `P`).
    /// Writing takes the moments (32 `P`) and their f32 copies (16 `P`).
    ///
    /// A checkpoint is rank 0's host copy of the whole grid's populations (`Q P` values) and of the
    /// kept moments (32 `P` each). It is written in the background while the run goes on, so it is
    /// counted beside the next check's moments; a resumed run holds the one it read while its
    /// lattice is built, and while each slot of it goes to the ranks (a whole slot, `P` values, on
    /// every rank, and its copy posted by a thread, and the rank's part of it, `L` values).
    pub fn footprint(
        dims: [usize; 3],
        streaming: Streaming,
        velocities: Velocities,
        spread: Spread,
        on_gpu: bool,
        snapshots: u64,
        restart: bool,
    ) -> Result<Footprint> {
        let what = format!(
            "a {} {} lattice ({} storage, {} streaming, {} B per cell{})",
            dims.map(|d| d.to_string()).join("x"),
            velocities.name(),
            S::NAME,
            streaming.name(),
            Self::bytes_per_cell(streaming, velocities) + 4 * size_of::<S::Real>(),
            if spread.ranks > 1 {
                format!(", split over {} ranks", spread.ranks)
            } else {
                String::new()
            }
        );
        let p = memory::bytes(&dims, 1, &what)?;
        let plane = memory::bytes(&dims[..2], 1, &what)?;
        let ranks = spread.ranks.max(1) as u64;
        let (local, own) = match spread.has_halos() {
            true => {
                let planes = (dims[2] as u64).div_ceil(ranks);
                (plane * (planes + 2), plane * planes)
            }
            false => (p, p),
        };
        let sum = |v: &[u64]| v.iter().fold(0u64, |a, &b| a.saturating_add(b));
        let times = |n: u64, b: u64| n.saturating_mul(b);
        let raw = size_of::<S::Raw>() as u64;
        let q = velocities.q() as u64;
        let lattice = times(local, q * raw);
        let lattices = times(streaming.lattices() as u64, lattice);
        let moments = times(local, 4 * size_of::<S::Real>() as u64);
        let halos = spread.has_halos();
        let tags = sum(&[p, if halos { local } else { 0 }]);
        let mirror = if halos { lattice } else { 0 };
        // Per rank: while it is built, and while it runs and reads its moments.
        let (built, running) = match on_gpu {
            true => (sum(&[tags, lattice, local]), sum(&[tags, mirror])),
            false => {
                let held = sum(&[tags, lattices, local, moments]);
                (held, sum(&[held, mirror]))
            }
        };
        let download = if on_gpu { moments } else { 0 };
        let posted = if spread.ranks > 1 { 2 } else { 1 };
        let reading = sum(&[running, download, times(own, 8 * posted)]);
        let here = spread.here.max(1) as u64;
        let gathered = times(p, 40 + 32 * snapshots);
        let writing = sum(&[times(p, 48), times(plane, 8)]);
        let (checkpoint, restoring) = match restart {
            true => (
                sum(&[times(p, q * raw), times(p, 32 * snapshots)]),
                sum(&[running, times(p, 2 * raw), times(local, raw)]),
            ),
            false => (0, 0),
        };
        let host = [
            sum(&[times(here, built.max(2 * p)), checkpoint]),
            sum(&[times(here, reading), gathered, checkpoint]),
            sum(&[times(here, restoring), checkpoint]),
            writing,
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        // The check's partial sums (one f64 per block) beside the lattices.
        let gpu = match on_gpu {
            true => sum(&[lattices, local, moments, 64 << 10]),
            false => 0,
        };
        Ok(Footprint::new(what, host, gpu, on_gpu))
    }

    /// [`Lbm::new`] split along z over the ranks of `comm` (the whole `geometry` and `init`, on every
    /// rank): each rank holds its planes and one halo plane per side, refreshed from the neighbours
    /// before every step that reads them (and, in place, returned after the odd step, which writes the
    /// populations leaving the slab into them). The result does not depend on the split.
    pub fn new_on(
        comm: C,
        engine: &Engine,
        geometry: Geometry,
        params: Params,
        streaming: Streaming,
        init: impl Fn(usize) -> (f64, [f64; 3]) + Sync,
    ) -> Result<Self> {
        Self::new_on_cut(comm, false, engine, geometry, params, streaming, init)
    }

    /// [`new_on`](Self::new_on), splitting even one rank's lattice where `cut` says so (its halo
    /// planes then come from itself, z wrapping): what the split costs on one GPU, and the split path
    /// where there is one GPU to run it.
    pub fn new_on_cut(
        comm: C,
        cut: bool,
        engine: &Engine,
        geometry: Geometry,
        params: Params,
        streaming: Streaming,
        init: impl Fn(usize) -> (f64, [f64; 3]) + Sync,
    ) -> Result<Self> {
        params.check()?;
        let [nx, ny, nz] = geometry.dims();
        let (local, split) = if comm.size() == 1 && !cut {
            (geometry, None)
        } else {
            // z wraps in the kernels, so the split is periodic along z.
            let d = Decomposition::new([nx, ny, nz], [1, 1, comm.size()], [0, 0, 1], [true; 3])?;
            let own = d.owned(comm.rank());
            let (z0, planes) = (own.begin[2], own.size[2]);
            let mut local = Geometry::periodic([nx, ny, planes + 2])?;
            local.set_velocities(geometry.velocities());
            // Tags with their near-wall marks as in the whole grid; halo planes copy the neighbours'.
            for lz in 0..planes + 2 {
                let gz = (z0 + nz + lz - 1) % nz;
                for y in 0..ny {
                    for x in 0..nx {
                        let t = geometry.tags()[geometry.index([x, y, gz])];
                        local.set_raw([x, y, lz], t);
                    }
                }
            }
            let plan = d.halo_plan(comm.rank());
            let back = return_plans(&plan);
            let planes = |faces: &mut dyn Iterator<Item = &Face<3>>, sent: bool| {
                layers(faces.map(|f| if sent { f.send } else { f.recv }), 2)
            };
            let returns = || back.iter().flatten();
            let received = [
                planes(&mut plan.iter(), false),
                planes(&mut returns(), false),
            ];
            let sent = planes(&mut plan.iter(), true);
            let mut returned = planes(&mut returns(), true);
            returned.extend(&received[1]);
            returned.sort_unstable();
            returned.dedup();
            let walled = walled_cells(&local, &back);
            (
                local,
                Some(Split {
                    global: geometry,
                    z0,
                    plan,
                    back,
                    sent,
                    returned,
                    received,
                    walled,
                }),
            )
        };
        let gpu = match engine {
            Engine::Host => None,
            Engine::Device(gpu) => Some(gpu),
        };
        let whole = split.as_ref().map_or(local.dims(), |sp| sp.global.dims());
        let velocities = local.velocities();
        let footprint = Self::footprint(
            whole,
            streaming,
            velocities,
            Spread::of(&comm, cut),
            gpu.is_some(),
            0,
            false,
        )?;
        check_memory(&footprint, gpu.map(|g| &**g))?;
        let cells = local.cells();
        // The global cell each local one stands for.
        let global_cell = |n: usize| match &split {
            None => n,
            Some(sp) => {
                let plane = nx * ny;
                n % plane + plane * sp.global_plane(n / plane)
            }
        };
        let owners = match params.open.outlet_memory {
            0 => std::collections::HashMap::new(),
            _ => outlet_owners(&local)?,
        };
        let mut raw = encode::<S>(cells, streaming, velocities, |n| {
            let (rho, u) = init(global_cell(n));
            let mut post = equilibrium_of(velocities, rho, u);
            // A non-reflecting outlet's reference starts at its fluid cell's normal velocity.
            if let Some(&(x, q)) = owners.get(&n) {
                let u = init(global_cell(x)).1;
                post[0] = -(0..3).map(|a| C[q][a] as f64 * u[a]).sum::<f64>();
            }
            post
        });
        let global = split.as_ref().map_or(&local, |sp| &sp.global);
        let cuts = CutTable::new(
            global,
            &local,
            streaming,
            split.is_some(),
            |lz| split.as_ref().map_or(lz, |sp| sp.global_plane(lz)),
            gpu,
        )?;
        if let Some(c) = &cuts {
            c.prime(&mut raw, cells);
        }
        // The table is the whole grid's (`None` on every rank where it has no interpolated link).
        let plain = cuts.is_none()
            && params.open.outlet_memory == 0
            && !global.tags().iter().any(|t| t & tag::SLIP != 0);
        let mut lbm = Self {
            mem: Memory::Host {
                f: Vec::new(),
                g: Vec::new(),
                tags: Vec::new(),
                moments: Vec::new(),
            },
            slips: local.tags().iter().any(|t| t & tag::SLIP != 0),
            shift: row_shift(local.tags(), local.dims(), std::mem::size_of::<S>()),
            plain,
            pushed: false,
            geometry: local,
            params,
            streaming,
            steps: 0,
            moments_step: None,
            block: 256,
            width: 0,
            comm,
            split,
            mirror: Vec::new(),
            overlap: true,
            #[cfg(feature = "nccl")]
            nccl: None,
            halos_current: false,
            bodies: Vec::new(),
            cuts,
        };
        let tags = lbm.geometry.tags().to_vec();
        lbm.mem = match engine {
            Engine::Host => Memory::Host {
                g: if streaming == Streaming::TwoLattice {
                    raw.clone()
                } else {
                    Vec::new()
                },
                f: raw,
                tags,
                moments: vec![S::Real::ZERO; 4 * cells],
            },
            Engine::Device(gpu) => Memory::Device {
                f: DeviceBuffer::from_host(gpu, &raw)?,
                g: match streaming {
                    Streaming::TwoLattice => Some(DeviceBuffer::from_host(gpu, &raw)?),
                    Streaming::InPlace => None,
                },
                tags: DeviceBuffer::from_host(gpu, &tags)?,
                moments: DeviceBuffer::zeros(gpu, 4 * cells)?,
                gpu: gpu.clone(),
            },
        };
        let (global, planes) = match &lbm.split {
            Some(sp) => (&sp.global, [sp.z0, lbm.geometry.dims()[2] - 2, 1]),
            None => (&lbm.geometry, [0, nz, 0]),
        };
        lbm.bodies = forces::body_links(global, planes, gpu)?;
        Ok(lbm)
    }

    /// The communicator of the run.
    pub fn comm(&self) -> &C {
        &self.comm
    }

    /// With `false`, a split run's exchange completes before any plane runs instead of behind the planes
    /// that read no halo: the baseline that shows what overlap gains (the same results).
    pub fn set_overlap(&mut self, overlap: bool) {
        self.overlap = overlap;
    }

    /// Moves a split run's halo planes through `nccl` (this rank's communicator among the same ranks)
    /// straight between the GPUs' lattices, on a stream beside the planes that read no halo, instead of
    /// through host memory. Two-lattice streaming only: the in-place scheme's odd step also returns
    /// what it wrote into the halo planes, keeping the cells behind walls, which only the host path
    /// does. One exchange runs at once: it writes only what the next step's exchange writes again, and
    /// takes NCCL's connection set-up out of the timed steps.
    #[cfg(feature = "nccl")]
    pub fn exchange_through(&mut self, nccl: lattice_gpu_host::nccl::Nccl) -> Result<()> {
        use lattice_gpu_host::nccl::LayerHalo;
        if self.streaming != Streaming::TwoLattice {
            return Err(crate::Error::InvalidParameter(
                "halos through NCCL need two-lattice streaming (--streaming ab); the in-place scheme \
                 exchanges through host memory"
                    .into(),
            ));
        }
        let Memory::Device { f, .. } = &self.mem else {
            return Err(crate::Error::InvalidParameter(
                "halos through NCCL move GPU memory: run on a GPU engine".into(),
            ));
        };
        let Some(sp) = &self.split else {
            return Ok(());
        };
        let [nx, ny, _] = self.geometry.dims();
        let cells = self.geometry.cells();
        let halo = LayerHalo::new(&sp.plan, 2, |z| z, nx * ny)?.repeated(self.q(), cells);
        nccl.start_on(&halo, f)?;
        nccl.finish()?;
        self.nccl = Some((nccl, halo));
        self.halos_current = true;
        self.synchronize()
    }

    /// What the halo exchanges through NCCL achieved, where [`exchange_through`](Self::exchange_through)
    /// was given a communicator that times them ([`Nccl::time_exchanges`]).
    ///
    /// [`Nccl::time_exchanges`]: lattice_gpu_host::nccl::Nccl::time_exchanges
    #[cfg(feature = "nccl")]
    pub fn exchange_time(&self) -> Result<Option<lattice_gpu_host::nccl::ExchangeTime>> {
        match &self.nccl {
            Some((n, _)) => Ok(n.exchange_time()?),
            None => Ok(None),
        }
    }

    /// Starts the refresh of a split run's halo planes before the planes that read none are queued:
    /// through NCCL on its own stream, or by copying out the planes the neighbours need.
    fn start_exchange(&mut self) -> Result<()> {
        #[cfg(feature = "nccl")]
        if let (Some((n, halo)), Memory::Device { f, .. }) = (&self.nccl, &self.mem) {
            return Ok(n.start_on(halo, f)?);
        }
        self.copy_planes(|sp| &sp.sent, true)
    }

    /// Completes the refresh: the halo planes are in the lattice for the work queued next.
    fn finish_exchange(&mut self) -> Result<()> {
        #[cfg(feature = "nccl")]
        if let Some((n, _)) = &self.nccl {
            return Ok(n.finish()?);
        }
        self.exchange(false)?;
        self.copy_planes(|sp| &sp.received[0], false)
    }

    /// The z planes this rank updates: all of them on one domain, all but the halo planes when split.
    fn planes(&self) -> [u32; 2] {
        let nz = self.geometry.dims()[2] as u32;
        match self.split {
            None => [0, nz],
            Some(_) => [1, nz - 2],
        }
    }

    /// Split runs: runs the refresh of the halo planes (`back` false), or the return of what the
    /// in-place odd step wrote into them to the planes they belong to (`back` true), on the mirror.
    fn exchange(&mut self, back: bool) -> Result<()> {
        let Some(sp) = &self.split else {
            return Ok(());
        };
        let cells = self.geometry.cells();
        let geometry = &self.geometry;
        let index = |p: [usize; 3]| geometry.index(p);
        for (q, c) in self.geometry.velocities().directions().iter().enumerate() {
            let slot = &mut self.mirror[q * cells..(q + 1) * cells];
            let plan = match (back, c[2]) {
                (false, _) => {
                    self.comm.exchange(&sp.plan, slot, &index)?;
                    // A refresh comes before an odd step, from a state stored as the even step
                    // stores it: the halo planes' copies come from their fluid cells again.
                    if let Some(cuts) = &self.cuts {
                        cuts.prime_halo_slot(q, slot);
                    }
                    continue;
                }
                (true, -1) => &sp.back[0],
                (true, 1) => &sp.back[1],
                (true, _) => continue,
            };
            let kept: Vec<(usize, S::Raw)> = sp.walled[q].iter().map(|&i| (i, slot[i])).collect();
            self.comm.exchange(plan, slot, &index)?;
            for (i, v) in kept {
                slot[i] = v;
            }
        }
        Ok(())
    }

    /// Copies the z planes `planes` picks from a split run's plans, of every population, between the
    /// lattice the next step reads and the mirror: out of the lattice (`out`, on a GPU after the work
    /// queued before) or back into it.
    fn copy_planes(&mut self, planes: fn(&Split) -> &[usize], out: bool) -> Result<()> {
        let Some(sp) = &self.split else {
            return Ok(());
        };
        let cells = self.geometry.cells();
        let plane = self.geometry.dims()[0] * self.geometry.dims()[1];
        let q_count = self.q();
        self.mirror.resize(q_count * cells, S::Raw::default());
        let at = |q: usize, z: usize| q * cells + z * plane;
        for &z in planes(sp) {
            match (&mut self.mem, out) {
                (Memory::Host { f, .. }, true) => {
                    for q in 0..q_count {
                        let p = at(q, z)..at(q, z) + plane;
                        self.mirror[p.clone()].copy_from_slice(&f[p]);
                    }
                }
                (Memory::Host { f, .. }, false) => {
                    for q in 0..q_count {
                        let p = at(q, z)..at(q, z) + plane;
                        f[p.clone()].copy_from_slice(&self.mirror[p]);
                    }
                }
                // A GPU moves plane `z` of all populations (`cells` apart) in one strided copy.
                (Memory::Device { f, .. }, true) => {
                    let rows = f.download_rows(at(0, z), plane, cells, q_count)?;
                    for (q, row) in rows.chunks_exact(plane).enumerate() {
                        self.mirror[at(q, z)..at(q, z) + plane].copy_from_slice(row);
                    }
                }
                (Memory::Device { f, .. }, false) => {
                    let rows: Vec<S::Raw> = (0..q_count)
                        .flat_map(|q| self.mirror[at(q, z)..at(q, z) + plane].iter().copied())
                        .collect();
                    f.upload_rows(at(0, z), cells, &rows, plane)?;
                }
            }
        }
        Ok(())
    }

    /// Fills what the next step must write (the second lattice of two-lattice streaming, the moments)
    /// with NaN, so that a tested step that misses a cell cannot pass on stale or zero values.
    pub fn poison_outputs(&mut self) -> Result<()> {
        let (cells, q) = (self.geometry.cells(), self.q());
        let nan = S::Real::from_f64(f64::NAN);
        match &mut self.mem {
            Memory::Host { g, moments, .. } => {
                g.fill(S::NAN);
                moments.fill(nan);
            }
            Memory::Device { g, moments, .. } => {
                if let Some(g) = g {
                    g.upload(&vec![S::NAN; q * cells])?;
                }
                moments.upload(&vec![nan; 4 * cells])?;
            }
        }
        Ok(())
    }

    /// Sets the threads per block of the GPU kernels (default 256); fails with the limit when a kernel
    /// cannot run blocks that large (too many registers).
    pub fn set_block(&mut self, block: u32) -> Result<()> {
        if let Memory::Device { gpu, .. } = &self.mem {
            for entry in self.entries() {
                let max = gpu.max_block_of(entry)?;
                if block == 0 || block > max {
                    return Err(crate::Error::InvalidParameter(format!(
                        "blocks of {block} threads: kernel {entry} takes 1 to {max} on {}",
                        gpu.name()
                    )));
                }
            }
        }
        self.block = block;
        Ok(())
    }

    /// The step entries this run launches ([`step_entry`]): its streaming's, with free-slip cells, or
    /// interpolated links and non-reflecting outlets, if it has them.
    fn entries(&self) -> Vec<&'static str> {
        let full = self.full();
        let schemes: &[Scheme] = match self.streaming {
            Streaming::TwoLattice => &[Scheme::Ab],
            Streaming::InPlace => &[Scheme::AaEven, Scheme::AaOdd],
        };
        schemes
            .iter()
            .map(|&s| step_entry::<S>(self.velocities(), s, self.slip_entries(), full))
            .collect()
    }

    /// Whether the run has interpolated links or outlets that let sound out: the GPU runs the entries
    /// with both.
    fn full(&self) -> bool {
        self.cuts.is_some() || self.params.open.outlet_memory > 0
    }

    /// Whether the GPU runs the entries with free-slip mirrors: where the rank has free-slip cells,
    /// and where the run does not push ([`plain`](Self::plain)).
    fn slip_entries(&self) -> bool {
        self.slips || !self.plain
    }

    /// The cells by which the GPU's threads shift the rows (`shifted`); the CPU runs every cell in
    /// its place whatever it says.
    pub fn row_shift(&self) -> u32 {
        self.shift
    }

    /// Threads per block of the GPU kernels.
    pub fn block(&self) -> u32 {
        self.block
    }

    /// The block's threads along x and y on this lattice ([`TUNE_WIDTHS`]).
    pub fn block_shape(&self) -> [u32; 2] {
        let [nx, ny, _] = self.dims_u32();
        let row = nx.div_ceil(32) * 32;
        let bx = match self.width {
            0 => self.block.min(row),
            w => w.min(self.block).min(row),
        };
        [bx, (self.block / bx).min(ny).max(1)]
    }

    /// Sets the fastest of [`TUNE_BLOCKS`] the kernels allow (nothing on the CPU: `None`): the tune
    /// cache's where it has this lattice's (this rank's planes, streaming and precision on this GPU),
    /// else the fastest of [`TUNE_STEPS`] real steps of the run at each, stored in `cache`; where the
    /// cache has none and `may_time` is off, none. The best size depends on the precision, the
    /// streaming and the lattice (128 to 1024 threads from 128^3 to 384^3 on an H100), and the results
    /// do not: each cell's update is the same whatever the launch.
    pub fn tune_block(
        &mut self,
        cache: &mut TuneCache,
        retune: bool,
        may_time: bool,
    ) -> Result<Option<Tuned>> {
        let Some(gpu) = self.gpu().cloned() else {
            return Ok(None);
        };
        let build = (gpu.name(), gpu.module_hash(lattice_gpu_kernels::MODULE)?);
        Ok(tune(self, cache, build, retune, may_time, TUNE_TRIALS)?)
    }

    /// The geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The parameters.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Steps done.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The GPU, if the run is on one.
    pub fn gpu(&self) -> Option<&Arc<Gpu>> {
        match &self.mem {
            Memory::Device { gpu, .. } => Some(gpu),
            Memory::Host { .. } => None,
        }
    }

    /// Replaces the state by the post-collision deviations `f_q - w_q` in `post` (`Q * cells`, structure
    /// of arrays), as if a step had just ended. Only at an even step count in place (where the lattice
    /// holds exactly that).
    pub fn set_populations(&mut self, post: &[f64]) -> Result<()> {
        self.need_whole("set the populations")?;
        self.check_len(post.len())?;
        self.need_even("set the populations")?;
        let cells = self.geometry.cells();
        let q_count = self.q();
        let mut raw = encode::<S>(cells, self.streaming, self.velocities(), |n| {
            core::array::from_fn(|q| {
                if q < q_count {
                    post[q * cells + n]
                } else {
                    0.0
                }
            })
        });
        if let Some(c) = &self.cuts {
            c.prime(&mut raw, cells);
        }
        match &mut self.mem {
            Memory::Host { f, .. } => *f = raw,
            Memory::Device { f, .. } => f.upload(&raw)?,
        }
        self.pushed = false;
        Ok(())
    }

    /// The post-collision deviations `f_q - w_q` of the last step (`Q * cells`, structure of arrays;
    /// wall cells hold whatever they were given). In place only at an even step count.
    pub fn populations(&self) -> Result<Vec<f64>> {
        self.need_whole("read the populations")?;
        self.need_even("read the populations")?;
        let cells = self.geometry.cells();
        let raw = match &self.mem {
            Memory::Host { f, .. } => f.clone(),
            Memory::Device { f, .. } => f.download()?,
        };
        let mut post = vec![0.0; self.q() * cells];
        for (slot, chunk) in bits::<S::Raw, S>(&raw).chunks(cells).enumerate() {
            let q = self.streaming.population_in(slot);
            for (n, v) in chunk.iter().enumerate() {
                post[q * cells + n] = v.decode().to_f64();
            }
        }
        Ok(post)
    }

    fn check_len(&self, len: usize) -> Result<()> {
        let want = self.q() * self.geometry.cells();
        if len == want {
            Ok(())
        } else {
            Err(crate::Error::InvalidParameter(format!(
                "{len} populations given for a {} grid that needs {} x {} = {want}",
                self.velocities().name(),
                self.q(),
                self.geometry.cells()
            )))
        }
    }

    fn need_whole(&self, what: &str) -> Result<()> {
        match self.split {
            None => Ok(()),
            Some(_) => Err(crate::Error::InvalidParameter(format!(
                "cannot {what} of a run split over ranks; use its moments"
            ))),
        }
    }

    fn need_even(&self, what: &str) -> Result<()> {
        if self.streaming == Streaming::InPlace && self.steps % 2 == 1 {
            Err(crate::Error::InvalidParameter(format!(
                "cannot {what} of an in-place (AA) lattice after an odd number of steps ({}): \
                 its populations are then stored streamed; step once more",
                self.steps
            )))
        } else {
            Ok(())
        }
    }

    /// The relaxation rates, body force and wall velocity of a step, in the storage's arithmetic.
    fn physics(&self) -> Physics<S::Real> {
        let real = S::Real::from_f64;
        let p = &self.params;
        let (inflow, mut profile) = p.open.profile_at(self.steps + 1);
        if let Some(sp) = &self.split {
            // The kernels see local z: the rank's first plane is 1, after the halo.
            profile[2][0] += 1.0 - sp.z0 as f64;
        }
        Physics {
            omega: real(p.omega()),
            omega_minus: real(p.omega_minus()),
            force: p.force.map(real),
            wall: p.wall_velocity.map(real),
            inflow: inflow.map(real),
            profile: profile.map(|a| a.map(real)),
            outlet: real(p.open.outlet_density - 1.0),
            outlet_follow: real(match p.open.outlet_memory {
                0 => 0.0,
                m => 1.0 / m as f64,
            }),
        }
    }

    /// The scheme of the next step: the in-place lattice alternates, starting with the odd
    /// (neighbour) step because the initial state is stored as a post-collision one.
    fn scheme(&self) -> Scheme {
        match (self.streaming, self.steps % 2) {
            (Streaming::TwoLattice, _) => Scheme::Ab,
            (Streaming::InPlace, 0) => Scheme::AaOdd,
            (Streaming::InPlace, _) => Scheme::AaEven,
        }
    }

    /// Queues one time step (on a GPU it runs asynchronously); with `with_moments` it also writes the
    /// density and velocity that [`moments`](Self::moments) reads. A split run's step hides its halo
    /// exchange behind the planes that read no halo, in the framework's order ([`overlap::step`]).
    pub fn step(&mut self, with_moments: bool) -> Result<()> {
        let scheme = self.scheme();
        // The even in-place step reads only its own cells; the others read the neighbours'.
        match &self.split {
            Some(_) if scheme != Scheme::AaEven => {
                let overlap = self.overlap;
                let mut parts = StepParts {
                    lbm: self,
                    scheme,
                    with_moments,
                };
                overlap::step(&mut parts, overlap)?;
            }
            _ => self.launch(scheme, with_moments, self.planes())?,
        }
        if scheme == Scheme::Ab {
            match &mut self.mem {
                Memory::Host { f, g, .. } => std::mem::swap(f, g),
                Memory::Device { f, g: Some(g), .. } => std::mem::swap(f, g),
                Memory::Device { g: None, .. } => {}
            }
        }
        if scheme == Scheme::AaOdd && self.split.is_some() {
            self.copy_planes(|sp| &sp.returned, true)?;
            self.exchange(true)?;
            self.copy_planes(|sp| &sp.received[1], false)?;
        }
        self.steps += 1;
        // The in-place odd step reads the pushes of the even one before it.
        self.pushed |= scheme != Scheme::AaOdd;
        if with_moments {
            self.moments_step = Some(self.steps);
        }
        Ok(())
    }

    /// Whether a split step can run its boundary beside its interior: halos through NCCL.
    fn nccl_beside(&self) -> bool {
        #[cfg(feature = "nccl")]
        return self.nccl.is_some();
        #[cfg(not(feature = "nccl"))]
        false
    }

    /// Starts the exchange of what this step writes, on the exchange's stream, after the boundary
    /// planes queued there (through NCCL, two-lattice: [`overlap::step`] beside the interior).
    fn start_next(&mut self) -> Result<()> {
        #[cfg(feature = "nccl")]
        if let (Some((n, halo)), Memory::Device { g: Some(g), .. }) = (&self.nccl, &self.mem) {
            return Ok(n.start_on(halo, g)?);
        }
        Err(beside_needs())
    }

    /// Queues the boundary planes on the exchange's stream: after the exchange of the lattice they
    /// read where the step before did not leave it current (the first split step).
    fn boundary_beside(&self, scheme: Scheme, with_moments: bool) -> Result<()> {
        #[cfg(feature = "nccl")]
        if let (Some((n, halo)), Memory::Device { f, g: Some(_), .. }) = (&self.nccl, &self.mem) {
            if !self.halos_current {
                n.start_on(halo, f)?;
            }
            return n.beside(|| {
                self.end_planes()
                    .into_iter()
                    .try_for_each(|p| self.launch_device(scheme, with_moments, p))
            });
        }
        let _ = (scheme, with_moments);
        Err(beside_needs())
    }

    /// The first and the last of the step's planes (its one plane, where it has one), as `[first, 1]`.
    fn end_planes(&self) -> Vec<[u32; 2]> {
        let [first, count] = self.planes();
        match count {
            0 => vec![],
            1 => vec![[first, 1]],
            _ => vec![[first, 1], [first + count - 1, 1]],
        }
    }

    /// The step's planes between its first and its last, where there are any.
    fn inner_planes(&self) -> Option<[u32; 2]> {
        let [first, count] = self.planes();
        (count > 2).then_some([first + 1, count - 2])
    }

    /// [`launch`](Self::launch) for each of `planes`.
    fn launch_all(
        &mut self,
        scheme: Scheme,
        with_moments: bool,
        planes: impl IntoIterator<Item = [u32; 2]>,
    ) -> Result<()> {
        planes
            .into_iter()
            .try_for_each(|p| self.launch(scheme, with_moments, p))
    }

    /// Runs `scheme`'s step over `planes` (`[first, count]`) on the CPU, or queues it on the GPU; with
    /// `with_moments` it writes the density and velocity too.
    fn launch(&mut self, scheme: Scheme, with_moments: bool, planes: [u32; 2]) -> Result<()> {
        let (dims, physics) = (self.dims_u32(), self.physics());
        let Memory::Host {
            f,
            g,
            tags,
            moments,
        } = &mut self.mem
        else {
            return self.launch_device(scheme, with_moments, planes);
        };
        let mem = Lattices::<S> {
            f: SpanMut::of(bits_mut(f)),
            g: (scheme == Scheme::Ab).then(|| SpanMut::of(bits_mut(g))),
            tags: Span::of(tags),
            moments: with_moments.then(|| SpanMut::of(&mut moments[..])),
            cuts: self.cuts.as_ref().map(|c| Cuts {
                rows: Span::of(&c.rows),
                distances: Span::of(&c.distances),
            }),
        };
        with_q!(self.geometry.velocities(), Q => {
            let mut step =
                Step::<S, Q>::bind(scheme, mem, dims, planes, physics).map_err(HostError::from)?;
            // Rows of cells at least, so that small grids do not drown in scheduling.
            run_on_host(&mut step, 4096)?;
        });
        Ok(())
    }

    /// Queues `scheme`'s step over `planes` on the GPU's launch stream (2-D blocks of whole warps along
    /// x, one z plane per grid layer).
    fn launch_device(&self, scheme: Scheme, with_moments: bool, planes: [u32; 2]) -> Result<()> {
        let Memory::Device {
            gpu,
            f,
            g,
            tags,
            moments,
        } = &self.mem
        else {
            return Err(crate::Error::InvalidParameter(
                "a GPU launch of a lattice held in host memory".into(),
            ));
        };
        let mem = Lattices::<S> {
            f: f.span_mut().cast(),
            g: g.as_ref()
                .filter(|_| scheme == Scheme::Ab)
                .map(|g| g.span_mut().cast()),
            tags: tags.span(),
            moments: with_moments.then(|| moments.span_mut()),
            cuts: self
                .cuts
                .as_ref()
                .and_then(|c| c.device.as_ref())
                .map(|(r, d)| Cuts {
                    rows: r.span(),
                    distances: d.span(),
                }),
        };
        let [nx, ny, _] = self.dims_u32();
        let [bx, by] = self.block_shape();
        let grid = [nx.div_ceil(bx), ny.div_ceil(by), planes[1]];
        with_q!(self.velocities(), Q => {
            let mut step = Step::<S, Q>::bind(scheme, mem, self.dims_u32(), planes, self.physics())
                .map_err(HostError::from)?;
            step.set_slip(self.slip_entries());
            step.set_shift(self.shift).map_err(HostError::from)?;
            step.set_pushed(self.pushed, self.split.is_some());
            gpu.launch_kernel(&gpu.launch_stream(), &step, grid, [bx, by, 1])?;
        });
        Ok(())
    }

    /// The grid `[nx, ny, nz]`.
    fn dims_u32(&self) -> [u32; 3] {
        self.geometry.dims().map(|d| d as u32)
    }

    /// `n` steps; the last one writes the moments.
    pub fn run(&mut self, n: u64) -> Result<()> {
        for i in 0..n {
            self.step(i + 1 == n)?;
        }
        Ok(())
    }

    /// Waits for the queued steps (GPU), turning a kernel failure into an error.
    pub fn synchronize(&self) -> Result<()> {
        if let Memory::Device { gpu, .. } = &self.mem {
            gpu.synchronize()?;
        }
        Ok(())
    }

    /// The density and velocity of the last step, which must have written them
    /// ([`step`](Self::step) with `with_moments`, or [`run`](Self::run)).
    pub fn moments(&self) -> Result<Moments> {
        if self.moments_step != Some(self.steps) || self.steps == 0 {
            return Err(crate::Error::InvalidParameter(
                "the last step did not compute the moments: step with moments (or use run) first"
                    .into(),
            ));
        }
        let cells = self.geometry.cells();
        let m: std::borrow::Cow<[S::Real]> = match &self.mem {
            Memory::Host { moments, .. } => moments.into(),
            Memory::Device { moments, .. } => moments.download()?.into(),
        };
        // This rank's planes (no halo), walls zero; then, split, all ranks' on rank 0 (z order).
        let [z0, planes] = self.planes().map(|v| v as usize);
        let plane = self.geometry.dims()[0] * self.geometry.dims()[1];
        let mine = z0 * plane..(z0 + planes) * plane;
        let geometry = &self.geometry;
        // In parallel: at 384^3 these are 226 M values, read back at every check.
        let pick = |c: usize| -> Vec<f64> {
            mine.clone()
                .into_par_iter()
                .map(|n| {
                    if geometry.is_fluid(n) {
                        m[c * cells + n].to_f64()
                    } else {
                        0.0
                    }
                })
                .collect()
        };
        // One component at a time: rank 0 holds the density and velocity it builds and one gathered
        // component, not all four beside the velocity.
        let rho = self.comm.gather(&pick(0))?;
        let mut u = vec![[0.0; 3]; rho.len()];
        for a in 0..3 {
            let part = self.comm.gather(&pick(a + 1))?;
            u.par_iter_mut().zip(&part).for_each(|(u, v)| u[a] = *v);
        }
        Ok(Moments {
            dims: self.global_dims(),
            rho,
            u,
        })
    }

    /// The name of the checkpoint array of lattice slot `slot`.
    fn slot_name(slot: usize) -> String {
        format!("slot{slot}")
    }

    /// `ck` with this run's state at its step (rank 0's; on the other ranks `ck` comes back as it
    /// was): the step, and each of the `Q` lattice slots as the array `slotN` of the whole grid's
    /// cells in their storage type ([`LbmStorage::Raw`], cell `x + nx (y + ny z)`), each rank's own
    /// planes gathered to rank 0. The lattice a step reads is all there is to a run's state (the
    /// tags follow from the geometry, the second lattice of two-lattice streaming and the moments
    /// are written before they are read), and its owned planes are all of it: a split run's halo
    /// planes are refreshed before a step reads them. So the arrays are those of one rank holding
    /// the whole grid, whatever the split. Collective.
    pub fn save_state(&self, mut ck: Checkpoint) -> Result<Checkpoint> {
        self.synchronize()?;
        ck.step = self.steps;
        let cells = self.geometry.cells();
        let [z0, planes] = self.planes().map(|v| v as usize);
        let plane = self.geometry.dims()[0] * self.geometry.dims()[1];
        let own = z0 * plane..(z0 + planes) * plane;
        for slot in 0..self.q() {
            let at = slot * cells + own.start;
            let part: std::borrow::Cow<[S::Raw]> = match &self.mem {
                Memory::Host { f, .. } => f[at..at + own.len()].into(),
                Memory::Device { f, .. } => f.download_span(at, own.len())?.into(),
            };
            let mut whole = self.comm.gather(&part)?;
            drop(part);
            if self.comm.rank() == 0 {
                // A split's even step leaves the copies of links into another rank's planes in its
                // halo planes; the fluid cells' slots hold them too (see `CutTable::prime`).
                if let (Some(c), 0) = (&self.cuts, self.steps % 2) {
                    c.prime_global_slot(slot, &mut whole);
                }
                // What the steps pushed into boundary cells depends on the split (a neighbour's
                // cells push into halo planes), and a restored state reads none of it: left out.
                if self.plain {
                    let global = self.split.as_ref().map_or(&self.geometry, |sp| &sp.global);
                    for (v, _) in whole
                        .iter_mut()
                        .zip(global.tags())
                        .filter(|(_, &t)| tag::is_boundary(t))
                    {
                        *v = S::Raw::default();
                    }
                }
                ck = ck.array(&Self::slot_name(slot), &whole);
            }
        }
        Ok(ck)
    }

    /// Replaces the state by the one [`save_state`](Self::save_state) put into `ck` (rank 0's, read
    /// from `path`, for the messages; `None` on the other ranks), whatever the number of ranks that
    /// wrote it: the step (and with it the in-place scheme's parity) and every slot of the lattice,
    /// halo planes included, taken out of `ck`. Every array is checked on rank 0 before any is
    /// taken, and what is wrong stops every rank ([`agree`](crate::restart::agree)). Collective; the
    /// run must have the checkpoint's geometry and storage, which its parameters fix.
    pub fn restore_state(&mut self, mut ck: Option<&mut Checkpoint>, path: &Path) -> Result<()> {
        let [nx, ny, nz] = self.global_dims();
        let plane = nx * ny;
        let whole = plane * nz;
        let checked = match (&ck, self.comm.rank()) {
            (Some(ck), _) => Self::check_checkpoint(ck, self.velocities(), whole, path),
            (None, 0) => Err(crate::Error::InvalidParameter(
                "rank 0 restores a run from a checkpoint it has read: give it one".into(),
            )),
            (None, _) => Ok(()),
        };
        crate::restart::agree(&self.comm, checked)?;
        let mut step = [ck.as_ref().map_or(0, |ck| ck.step)];
        self.comm.broadcast(&mut step)?;
        let cells = self.geometry.cells();
        // The global plane of each local one: a split run's first and last are halo planes.
        let local_planes = self.geometry.dims()[2];
        let global_plane = |lz: usize| self.split.as_ref().map_or(lz, |sp| sp.global_plane(lz));
        let globals: Vec<usize> = (0..local_planes).map(global_plane).collect();
        let mut buffer = Vec::new();
        for slot in 0..self.q() {
            let mut values = match ck.as_deref_mut() {
                Some(ck) => ck.take::<S::Raw>(&Self::slot_name(slot), path)?,
                None => std::mem::take(&mut buffer),
            };
            values.resize(whole, S::Raw::default());
            self.comm.broadcast(&mut values)?;
            let mut local: Vec<S::Raw> = globals
                .iter()
                .flat_map(|&gz| values[gz * plane..(gz + 1) * plane].iter().copied())
                .collect();
            // After an odd step the copies are in the lattice already (a split's returns bring those
            // in halo planes home).
            if let (Some(c), 0) = (&self.cuts, step[0] % 2) {
                c.prime_slot(slot, &mut local);
            }
            match &mut self.mem {
                Memory::Host { f, .. } => {
                    f[slot * cells..(slot + 1) * cells].copy_from_slice(&local)
                }
                Memory::Device { f, .. } => f.upload_span(slot * cells, &local)?,
            }
            // Rank 0's slot goes with the checkpoint's; the others' buffer serves the next.
            if ck.is_none() {
                buffer = values;
            }
        }
        self.steps = step[0];
        self.moments_step = None;
        self.halos_current = false;
        self.pushed = false;
        self.synchronize()
    }

    /// Refuses a checkpoint (read from `path`, for the messages) whose lattice slots are missing or
    /// more than `velocities` has, of another storage type, or of another number of cells than
    /// `cells`: what [`restore_state`](Self::restore_state) checks first, to be checked before a
    /// lattice is built.
    pub fn check_checkpoint(
        ck: &Checkpoint,
        velocities: Velocities,
        cells: usize,
        path: &Path,
    ) -> Result<()> {
        let bad = |problem: String| -> crate::Error {
            lattice_gpu_formats::IoError::Checkpoint {
                path: path.to_path_buf(),
                problem,
            }
            .into()
        };
        let slots = (0..)
            .take_while(|&s| ck.arrays.iter().any(|a| a.name == Self::slot_name(s)))
            .count();
        if slots > velocities.q() {
            let held = Velocities::of(slots).map_or(format!("{slots} populations"), |v| {
                format!(
                    "{} (resume with --velocities {})",
                    v.name(),
                    v.name().to_lowercase()
                )
            });
            return Err(bad(format!(
                "its lattice is {held}, and this run is {}",
                velocities.name()
            )));
        }
        for slot in 0..velocities.q() {
            let name = Self::slot_name(slot);
            let Some(a) = ck.arrays.iter().find(|a| a.name == name) else {
                return Err(bad(format!(
                    "it holds no array `{name}` of the lattice: it is not a checkpoint of this run"
                )));
            };
            if a.dtype != <S::Raw as Stored>::DTYPE {
                return Err(bad(format!(
                    "its lattice is stored as {}, and {} storage needs {}; resume with the precision \
                     it was written in",
                    a.dtype,
                    S::NAME,
                    <S::Raw as Stored>::DTYPE
                )));
            }
            let held = a.bytes.len() / size_of::<S::Raw>();
            if held != cells {
                return Err(bad(format!(
                    "its array `{name}` holds {held} cells, and the grid has {cells}"
                )));
            }
        }
        Ok(())
    }

    /// The whole grid `[nx, ny, nz]` (of all ranks).
    pub fn global_dims(&self) -> [usize; 3] {
        match &self.split {
            None => self.geometry.dims(),
            Some(sp) => sp.global.dims(),
        }
    }

    /// How many steps apart [`verdict`](Self::verdict) is due in a run of `steps` steps, the same on
    /// every rank (collective: the ranks agree whether they all run on GPUs). The budget of
    /// [`health::check_interval`] counts points of a stencil that reads and writes one value each;
    /// on the CPU, where it keeps the time between checks (and the answer to Ctrl-C) near a second, a
    /// cell counts as its populations. On a GPU a check reads 4 moments per cell against a step's
    /// 38 populations, so the plain cell count keeps its cost well under 1%.
    pub fn check_interval(&self, steps: u64) -> Result<u64> {
        let on_gpu = self.gpu().is_some();
        let all = self.comm.sum(f64::from(u8::from(on_gpu)))? == self.comm.size() as f64;
        let cells = self
            .global_dims()
            .iter()
            .map(|&d| d as u64)
            .product::<u64>();
        let work = if all {
            cells
        } else {
            cells.saturating_mul(self.q() as u64)
        };
        Ok(health::check_interval(work, steps, all))
    }

    /// The collective check of the state after the last step, which must have written the moments
    /// (a step with moments, or [`run`](Self::run)): every rank looks for NaN or infinity in its
    /// moments (on a GPU, counted there), and all decide together ([`Verdict::agree`]) to go on, to
    /// stop for a signal, or to stop for the first non-finite value (its index in the whole grid's
    /// moments, which [`non_finite_at`] names). Every rank must call it after the same step.
    pub fn verdict(&self) -> Result<Verdict> {
        if self.moments_step != Some(self.steps) || self.steps == 0 {
            return Err(crate::Error::InvalidParameter(
                "the last step did not compute the moments that the check reads: step with moments \
                 (or use run) first"
                    .into(),
            ));
        }
        self.synchronize()?;
        let found = match &self.mem {
            Memory::Host { moments, .. } => {
                health::first_non_finite(moments).map(|i| (i, moments[i].to_f64()))
            }
            Memory::Device { moments, .. } => match moments.first_non_finite()? {
                Some(i) => Some((i, moments.download_span(i, 1)?[0].to_f64())),
                None => None,
            },
        };
        let found = found.map(|(i, v)| (self.global_moment(i), v));
        Ok(Verdict::agree(&self.comm, found)?)
    }

    /// `Ok` for a healthy `verdict` of the last step, else the error that ends the run:
    /// [`Error::Interrupted`](lattice_gpu_host::Error::Interrupted), or
    /// [`Error::Diverged`](lattice_gpu_host::Error::Diverged) naming the moment, its cell and `fix`.
    pub fn stop_on(&self, verdict: Verdict, fix: &str) -> Result<()> {
        let dims = self.global_dims();
        let what = match verdict {
            Verdict::Diverged(found) => non_finite_at(dims, found.index).0,
            _ => "the state",
        };
        Ok(verdict.into_result(self.steps, what, |f| non_finite_at(dims, f.index).1, fix)?)
    }

    /// Index `i` of this rank's moments (`c * cells + cell`, halo planes included) in the whole
    /// grid's.
    fn global_moment(&self, i: usize) -> u64 {
        let cells = self.geometry.cells();
        let (c, n) = (i / cells, i % cells);
        let [nx, ny, _] = self.geometry.dims();
        let plane = nx * ny;
        let (whole, z) = match &self.split {
            None => (cells, n / plane),
            Some(sp) => (sp.global.cells(), sp.global_plane(n / plane)),
        };
        (c * whole + n % plane + plane * z) as u64
    }
}

/// Mass and momentum of post-collision deviations (`Q * cells`) over the fluid cells of `geometry`.
pub fn mass_momentum(geometry: &Geometry, post: &[f64]) -> (f64, [f64; 3]) {
    let cells = geometry.cells();
    let v = geometry.velocities();
    let mut mass = 0.0;
    let mut mom = [0.0; 3];
    for n in (0..cells).filter(|&n| geometry.is_fluid(n)) {
        for q in 0..v.q() {
            // The stored deviation plus the weight it is measured from.
            let f = v.weight(q) + post[q * cells + n];
            mass += f;
            for a in 0..3 {
                mom[a] += f * C[q][a] as f64;
            }
        }
    }
    (mass, mom)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Collision;
    use lattice_gpu_host::health::NonFinite;

    /// A periodic box whose cell `bad` starts with a NaN density, one step on: the verdict of the
    /// whole lattice, and of the lattice split over 2 ranks (threads), which must name the same cell.
    fn verdicts(streaming: Streaming, dims: [usize; 3], bad: usize) -> Vec<Verdict> {
        fn run<C: Communicator>(
            comm: C,
            streaming: Streaming,
            dims: [usize; 3],
            bad: usize,
        ) -> Result<Verdict> {
            let init = move |n: usize| match n == bad {
                true => (f64::NAN, [0.0; 3]),
                false => (1.0, [0.01, 0.0, 0.0]),
            };
            let g = Geometry::periodic(dims)?;
            let p = Params::bgk(0.8);
            let mut lbm = Lbm::<f64, C>::new_on(comm, &Engine::Host, g, p, streaming, init)?;
            lbm.run(1)?;
            lbm.verdict()
        }
        let mut all = vec![run(Solo, streaming, dims, bad).unwrap()];
        let split = lattice_gpu_host::threads::run(2, |c| run(c.clone(), streaming, dims, bad));
        all.extend(split.unwrap());
        all
    }

    #[test]
    fn a_nan_is_named_by_its_cell_in_the_whole_grid_on_every_rank() {
        let dims = [5, 4, 6];
        // In rank 1's half of z (planes 3 to 5), away from its halo planes.
        let bad = 2 + 5 * (2 + 4 * 4);
        for streaming in [Streaming::TwoLattice, Streaming::InPlace] {
            let v = verdicts(streaming, dims, bad);
            let Verdict::Diverged(NonFinite {
                rank: 0,
                index,
                value,
            }) = v[0]
            else {
                panic!("{streaming:?}: {v:?}")
            };
            assert!(value.is_nan());
            let (what, at) = non_finite_at(dims, index);
            assert_eq!(what, "the density", "{streaming:?}");
            // Streamed one step from (2, 2, 4), the first cell it reached is (2, 1, 3).
            assert_eq!(at, "cell (x, y, z) = (2, 1, 3)", "{streaming:?}");
            for split in &v[1..] {
                let Verdict::Diverged(found) = split else {
                    panic!("{streaming:?} split: {v:?}")
                };
                assert_eq!((found.rank, found.index), (1, index), "{streaming:?}");
            }
        }
    }

    #[test]
    fn a_healthy_run_goes_on_and_a_diverged_one_names_step_and_cell() {
        let dims = [4, 4, 2];
        let g = Geometry::periodic(dims).unwrap();
        let mut lbm = Lbm::<f32>::new(
            &Engine::Host,
            g,
            Params::bgk(0.8),
            Streaming::InPlace,
            |_| (1.0, [0.01, 0.0, 0.0]),
        )
        .unwrap();
        // No moments yet: nothing to check, and the error says what to do.
        let e = lbm.verdict().unwrap_err().to_string();
        assert!(e.contains("step with moments"), "{e}");
        lbm.run(3).unwrap();
        assert_eq!(lbm.verdict().unwrap(), Verdict::Healthy);
        lbm.stop_on(Verdict::Healthy, "lower it").unwrap();
        let found = Verdict::Diverged(NonFinite {
            rank: 0,
            index: 2 * 32 + 5,
            value: f64::INFINITY,
        });
        let e = lbm.stop_on(found, "lower it").unwrap_err().to_string();
        assert!(
            e.contains("the y velocity is inf at cell (x, y, z) = (1, 1, 0) after step 3")
                && e.contains("lower it"),
            "{e}"
        );
    }

    /// A closed cavity with a moving lid and a body force on `ranks` threads, from step 0 or from
    /// `from` (a checkpoint, with its file's name for messages), run `steps` steps; rank 0's moments
    /// and checkpoint at the end.
    fn cavity_run<S: LbmStorage>(
        streaming: Streaming,
        ranks: usize,
        from: Option<&Checkpoint>,
        steps: u64,
    ) -> (Moments, Checkpoint) {
        let dims = [6, 5, 7];
        let run = |comm: &lattice_gpu_host::threads::Threads| -> Result<(Moments, Checkpoint)> {
            let (g, mut p) =
                crate::cases::cavity(dims, true, 50.0, 0.1, Collision::Trt { magic: 0.25 })?;
            p.force = [1e-4, -2e-5, 3e-5];
            let init = |n: usize| (1.0 + 1e-3 * (n % 7) as f64, [0.01, 0.0, -0.005]);
            let mut lbm = Lbm::<S, _>::new_on(comm.clone(), &Engine::Host, g, p, streaming, init)?;
            let mut ck = from.cloned();
            let path = Path::new("test.ckpt");
            if from.is_some() {
                let mine = ck.as_mut().filter(|_| comm.rank() == 0);
                lbm.restore_state(mine, path)?;
            }
            lbm.run(steps)?;
            let state = lbm.save_state(Checkpoint::new("lbm", 0))?;
            Ok((lbm.moments()?, state))
        };
        lattice_gpu_host::threads::run(ranks, run)
            .unwrap()
            .swap_remove(0)
    }

    fn resumes_bit_for_bit<S: LbmStorage>() {
        for streaming in [Streaming::TwoLattice, Streaming::InPlace] {
            // An odd step leaves the in-place lattice streamed, an even one not.
            for first in [5, 4] {
                let what = format!("{} {streaming:?} from step {first}", S::NAME);
                let (straight, _) = cavity_run::<S>(streaming, 1, None, first + 6);
                let (_, ck) = cavity_run::<S>(streaming, 1, None, first);
                assert_eq!(ck.step, first, "{what}");
                // The same bytes whatever the ranks that wrote them.
                for ranks in [2, 3] {
                    let (_, split) = cavity_run::<S>(streaming, ranks, None, first);
                    assert!(
                        split == ck,
                        "{what}: the checkpoint of {ranks} ranks differs"
                    );
                }
                for ranks in [1, 3] {
                    let (m, _) = cavity_run::<S>(streaming, ranks, Some(&ck), 6);
                    assert!(
                        m == straight,
                        "{what}: resumed on {ranks} ranks, it differs"
                    );
                }
            }
        }
    }

    #[test]
    fn a_restored_run_continues_bit_for_bit_on_any_number_of_ranks() {
        resumes_bit_for_bit::<f64>();
        resumes_bit_for_bit::<f32>();
        resumes_bit_for_bit::<Half>();
    }

    #[test]
    fn a_checkpoint_of_another_grid_or_storage_is_refused_on_every_rank() {
        let (_, ck) = cavity_run::<f32>(Streaming::InPlace, 1, None, 2);
        let refused = |ck: &Checkpoint, want: &str| {
            let run = |comm: &lattice_gpu_host::threads::Threads| -> Result<()> {
                let g = Geometry::periodic([6, 5, 7])?;
                let mut lbm = Lbm::<Half, _>::new_on(
                    comm.clone(),
                    &Engine::Host,
                    g,
                    Params::bgk(0.8),
                    Streaming::InPlace,
                    |_| (1.0, [0.0; 3]),
                )?;
                let mut mine = ck.clone();
                lbm.restore_state(Some(&mut mine).filter(|_| comm.rank() == 0), Path::new("c"))
            };
            for ranks in [1, 2] {
                let e = lattice_gpu_host::threads::run(ranks, run)
                    .unwrap_err()
                    .to_string();
                assert!(e.contains(want), "{ranks} ranks: {e}");
            }
        };
        refused(&ck, "stored as f32, and f16 storage needs u16");
        let (_, mut short) = cavity_run::<Half>(Streaming::InPlace, 1, None, 2);
        short.arrays.retain(|a| a.name != "slot7");
        refused(&short, "no array `slot7`");
    }

    #[test]
    fn maxima_keep_a_nan() {
        let m = Moments {
            dims: [3, 1, 1],
            rho: vec![1.0; 3],
            u: vec![[0.1, 0.0, 0.0], [f64::NAN, 0.0, 0.0], [0.2, 0.0, 0.0]],
        };
        assert!(m.max_speed().is_nan());
        assert!(!crate::cases::is_steady(&m, &m, 1e-5));
        assert_eq!([1.0, 3.0, 2.0].into_iter().fold(0.0, max_or_nan), 3.0);
    }

    #[test]
    fn the_footprint_grows_with_what_a_run_holds() {
        let fp = |streaming, spread, gpu, kept| {
            let v = Velocities::D3Q19;
            Lbm::<f32>::footprint([64, 64, 64], streaming, v, spread, gpu, kept, false).unwrap()
        };
        let one = fp(Streaming::InPlace, Spread::ONE, false, 0);
        // A checkpoint: rank 0's copy of the whole grid's populations at least.
        let restart = Lbm::<f32>::footprint(
            [64, 64, 64],
            Streaming::InPlace,
            Velocities::D3Q19,
            Spread::ONE,
            false,
            0,
            true,
        )
        .unwrap();
        assert!(
            restart.host >= one.host + 64 * 64 * 64 * 19 * 4,
            "{restart:?}"
        );
        assert!(one.what.contains("64x64x64") && one.gpu == 0, "{one:?}");
        assert!(fp(Streaming::TwoLattice, Spread::ONE, false, 0).host > one.host);
        assert!(fp(Streaming::InPlace, Spread::ONE, false, 1).host > one.host);
        // D3Q27: 27 populations a cell instead of 19.
        let q27 = Lbm::<f32>::footprint(
            [64, 64, 64],
            Streaming::InPlace,
            Velocities::D3Q27,
            Spread::ONE,
            true,
            0,
            false,
        )
        .unwrap();
        let q19 = fp(Streaming::InPlace, Spread::ONE, true, 0);
        assert_eq!(q27.gpu - q19.gpu, 64 * 64 * 64 * 8 * 4, "{q27:?}");
        assert!(q27.what.contains("D3Q27"), "{q27:?}");
        let two = Spread {
            ranks: 2,
            here: 2,
            cut: false,
        };
        // Split: each rank's halo planes and the host mirror of its lattice.
        assert!(fp(Streaming::InPlace, two, false, 0).host > one.host);
        let gpu = fp(Streaming::InPlace, Spread::ONE, true, 0);
        assert!(gpu.gpu >= 64 * 64 * 64 * (19 * 4 + 1 + 16) && gpu.host < one.host + (320 << 20));
        // More than 64 bits of cells is refused by name, not wrapped.
        let e = Lbm::<f64>::footprint(
            [1 << 30; 3],
            Streaming::TwoLattice,
            Velocities::D3Q19,
            Spread::ONE,
            false,
            0,
            true,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("64 bits"), "{e}");
    }
}
