//! An advection run on any loop engine: the field double-buffered with a margin of 2, the steady
//! velocities (zero on the two outermost nodes of every side, which therefore keep their values), and the
//! kernel variant that carries the step.

use lattice_gpu_host::comm::{Communicator, Solo};
use lattice_gpu_host::decomp::{Decomposition, Face};
use lattice_gpu_host::engine::autotune::TuneSpace;
use lattice_gpu_host::halo::{Halos, LayerExchange};
use lattice_gpu_host::health::Verdict;
use lattice_gpu_host::memory;
use lattice_gpu_host::overlap::{self, OverlapStep};
use lattice_gpu_host::{Field, Loop2D, LoopEngine, Shape};
use lattice_gpu_kernels::advection::{Advect, Packed, Separate, Uv, BRANCH_FREE, QUEUE, SHARED};
use lattice_gpu_kernels::bind::bits;
use rayon::prelude::*;

use crate::{Error, Result};

/// The kernel variants, each adding one of the paper's techniques to the one before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// One point per thread step, the scheme as written (the CPU engine's update too).
    Plain,
    /// Each thread marches up a column keeping 5 rows and their velocity-independent coefficients in
    /// registers (the tuner's `march` is the unroll factor).
    Queue,
    /// [`Kernel::Queue`] with branch-free upwind selection.
    QueueBranchFree,
    /// [`Kernel::QueueBranchFree`] with (u, v) packed into one 8-byte load.
    Packed,
    /// [`Kernel::Packed`] with each row staged once per block in shared memory.
    Shared,
}

impl Kernel {
    /// Every variant, in the order the techniques are added.
    pub const ALL: [Kernel; 5] = [
        Kernel::Plain,
        Kernel::Queue,
        Kernel::QueueBranchFree,
        Kernel::Packed,
        Kernel::Shared,
    ];

    /// The command-line and table name.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Plain => "plain",
            Kernel::Queue => "queue",
            Kernel::QueueBranchFree => "branch-free",
            Kernel::Packed => "packed",
            Kernel::Shared => "shared",
        }
    }

    /// The variant called `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether it reads (u, v) packed in one 8-byte value per node.
    pub fn packed(self) -> bool {
        matches!(self, Kernel::Packed | Kernel::Shared)
    }

    /// Whether its threads march with a row queue (then `march` is its unroll factor: 4 to 32 suit it).
    pub fn queued(self) -> bool {
        self != Kernel::Plain
    }

    /// Whether to run this kernel on rows padded so that each row's first node starts a 128-byte line
    /// (the `aligned` of [`Advection::new`]): padding speeds up the kernels that march columns in
    /// registers and slows the plain and shared ones (measured on an H100: docs/benchmarks/history.md,
    /// "Advection rows padded").
    pub fn pads_rows(self) -> bool {
        matches!(
            self,
            Kernel::Queue | Kernel::QueueBranchFree | Kernel::Packed
        )
    }

    /// The auto-tuner's space for this kernel: the paper's block shapes, and as `march` the points per
    /// thread (the unroll factor 4..32 for the queue kernels).
    pub fn tune_space(self) -> TuneSpace {
        let space = TuneSpace::table1();
        if self.queued() {
            space.with("march", vec![4, 8, 16, 32])
        } else {
            space
        }
    }
}

/// The set-up of a run: grid, initial field, velocities and `c = dt / h`, checked.
#[derive(Clone, Debug)]
pub struct Problem {
    /// Nodes in x and y.
    pub size: [usize; 2],
    /// Initial field, `nx * ny` values, x fastest.
    pub f0: Vec<f64>,
    /// x velocity per node.
    pub u: Vec<f64>,
    /// y velocity per node.
    pub v: Vec<f64>,
    /// `dt / h`.
    pub c: f64,
}

impl Problem {
    /// Checks sizes (at least the 5-node footprint), finite values and the CFL condition
    /// `|u| dt / h <= 1`, `|v| dt / h <= 1` at every node that moves, naming the worst node.
    pub fn check(&self) -> Result<()> {
        let [nx, ny] = self.size;
        let n = check_size(self.size)?;
        for (name, data) in [("field", &self.f0), ("u", &self.u), ("v", &self.v)] {
            if data.len() != n {
                return Err(Error::Invalid(format!(
                    "the {name} has {} values but the {nx} x {ny} grid needs {n}; give arrays of the grid's shape",
                    data.len()
                )));
            }
            if let Some(i) = data.par_iter().position_first(|x| !x.is_finite()) {
                return Err(Error::Invalid(format!(
                    "the {name} is {} at node ({}, {}); give finite values",
                    data[i],
                    i % nx,
                    i / nx
                )));
            }
        }
        // The kernels compute in f32: a value beyond its range would be infinite from the start.
        if let Some(i) = self.f0.par_iter().position_first(|x| x.abs() > F32_MAX) {
            return Err(Error::Invalid(format!(
                "the field is {:e} at node ({}, {}), beyond the range of the f32 arithmetic the kernels \
                 compute in (magnitudes up to {F32_MAX:.1e}); advection is linear in the field, so scale \
                 it down (by 1e10, say) and the result up by as much",
                self.f0[i],
                i % nx,
                i / nx
            )));
        }
        if !(self.c.is_finite() && self.c > 0.0) {
            return Err(Error::Invalid(format!(
                "dt / h = {} must be positive",
                self.c
            )));
        }
        let (cfl, at, axis) = self.max_courant();
        self.check_f32_displacement(cfl, at, axis)?;
        if cfl > 1.0 {
            return Err(Error::Invalid(format!(
                "the CFL number |{axis}| dt / h = {} at node ({}, {}) exceeds 1: the departure \
                 point would leave the 5-node footprint; lower dt (or the CFL number) by a factor \
                 {} or more",
                shown(cfl, 4),
                at % nx,
                at / nx,
                shown(cfl, 3)
            )));
        }
        Ok(())
    }

    /// Refuses a run whose displacement per step, `u dt / h`, the kernels cannot form in f32 where the
    /// f64 value is fine: a velocity beyond f32's range is infinite there and `dt / h` below its normal
    /// range is 0 (or above it infinite), and their product is NaN, which the run would carry into
    /// every node. `cfl` is the largest `|w| c`, at node `at` of velocity `axis`.
    fn check_f32_displacement(&self, cfl: f64, at: usize, axis: &str) -> Result<()> {
        let w = if axis == "u" { self.u[at] } else { self.v[at] };
        let (w32, c32) = (w as f32, self.c as f32);
        // Within f32's normal range both roundings are relative: the displacement is the f64 one (a
        // product too large for f32 is a CFL number far above 1, which the caller refuses).
        if w32.is_finite() && c32.is_normal() {
            return Ok(());
        }
        let nx = self.size[0];
        let cause = if !w32.is_finite() {
            format!("the velocity {w:e} is beyond f32's range ({F32_MAX:.1e})")
        } else if c32.is_infinite() {
            format!(
                "dt / h = {:e} is beyond f32's range ({F32_MAX:.1e})",
                self.c
            )
        } else {
            format!(
                "dt / h = {:e} is below f32's normal range ({:.1e})",
                self.c,
                f32::MIN_POSITIVE
            )
        };
        Err(Error::Invalid(format!(
            "the displacement per step |{axis}| dt / h = {} at node ({}, {}) cannot be formed in \
             the f32 arithmetic the kernels compute in: {cause}, so the run would turn the field \
             into NaN. Only |velocity| dt / h matters to the scheme: give velocities of magnitude \
             between 1e-30 and 1e30 (e.g. --velocity 1x0.5) and as many steps as the same distance \
             needs",
            shown(cfl, 4),
            at % nx,
            at / nx
        )))
    }

    /// The largest `|u| c` or `|v| c` over the nodes that move (not the two outermost of each side):
    /// value, node index, and which velocity.
    pub fn max_courant(&self) -> (f64, usize, &'static str) {
        let [nx, ny] = self.size;
        // In parallel, keeping what a scan in node order (u before v) keeps: the first of the largest.
        let first_largest = |a: (f64, usize, &'static str), b: (f64, usize, &'static str)| {
            if b.0 > a.0 || (b.0 == a.0 && (b.1, b.2) < (a.1, a.2)) {
                b
            } else {
                a
            }
        };
        (2..ny.saturating_sub(2))
            .into_par_iter()
            .flat_map_iter(|j| (2..nx.saturating_sub(2)).map(move |i| i + nx * j))
            .flat_map_iter(|k| [(self.u[k], k, "u"), (self.v[k], k, "v")])
            .map(|(w, k, axis)| (w.abs() * self.c, k, axis))
            .filter(|best| !best.0.is_nan())
            .reduce(|| (0.0, 0, "u"), first_largest)
    }

    /// Whether node `k` is one of the two outermost of a side (those keep their values).
    pub fn is_fixed(&self, k: usize) -> bool {
        let [nx, ny] = self.size;
        let (i, j) = (k % nx, k / nx);
        i < 2 || j < 2 || i + 2 >= nx || j + 2 >= ny
    }
}

/// `x` with `digits` decimals, with an exponent where it is large (not written out in 300 digits).
fn shown(x: f64, digits: usize) -> String {
    match x.abs() < 1e6 {
        true => format!("{x:.digits$}"),
        false => format!("{x:.digits$e}"),
    }
}

/// The largest finite f32, as f64.
const F32_MAX: f64 = f32::MAX as f64;

/// Nodes of a grid of `size`, after checking that it holds the scheme's 5-node footprint along each
/// axis (before any array of it is made).
pub fn check_size(size: [usize; 2]) -> Result<usize> {
    let [nx, ny] = size;
    if nx < 5 || ny < 5 {
        return Err(Error::Invalid(format!(
            "a {nx} x {ny} grid is smaller than the scheme's 5-node footprint; use at least 5 x 5 nodes"
        )));
    }
    nx.checked_mul(ny).ok_or_else(|| {
        Error::Invalid(format!(
            "a {nx} x {ny} grid has more nodes than this machine can count; use a smaller grid"
        ))
    })
}

/// The most ranks a grid of `size` splits over along y: each needs at least the 2 rows of the halo
/// its neighbours read.
pub fn most_ranks(size: [usize; 2]) -> usize {
    (size[1] / 2).max(1)
}

/// How `rank` of `ranks` splitting a grid of `size` along y lays out its rows: its first global row,
/// its rows, and its array shape (margin 2, rows padded to 128-byte lines where `aligned`).
fn rank_layout(
    size: [usize; 2],
    ranks: usize,
    rank: usize,
    aligned: bool,
) -> Result<(Decomposition<2>, usize, usize, Shape)> {
    let split = Decomposition::new(size, [1, ranks], [2, 2], [false, false])?;
    let own = split.owned(rank);
    let (y0, rows) = (own.begin[1], own.size[1]);
    let mut shape = Shape::new_2d([size[0], rows], 2)?;
    if aligned {
        shape = shape.aligned_rows(4, 1.25);
    }
    Ok((split, y0, rows, shape))
}

/// An array of `shape` (this rank's `[nx, rows]` nodes from the whole grid's row `y0`) holding
/// `width` values per node from `at(k, values)` (`k`: the node of the whole grid, x fastest), except
/// where `skip(k)`; those nodes, the margins and the padding stay 0.
fn spread_rows<T: Copy + Default + Send + Sync>(
    shape: Shape,
    [nx, rows]: [usize; 2],
    y0: usize,
    width: usize,
    skip: &(dyn Fn(usize) -> bool + Sync),
    at: &(dyn Fn(usize, &mut [T]) + Sync),
) -> Vec<T> {
    let mut a = vec![T::default(); width * shape.len()];
    let [x0, y_first, _] = shape.first();
    a.par_chunks_mut(width * shape.size()[0])
        .skip(y_first)
        .take(rows)
        .enumerate()
        .for_each(|(j, row)| {
            for i in 0..nx {
                let k = i + nx * (y0 + j);
                if !skip(k) {
                    at(k, &mut row[width * (x0 + i)..width * (x0 + i + 1)]);
                }
            }
        });
    a
}

/// What one rank of an advection run holds, in bytes: the largest rank's (rank 0's: it has the most
/// rows) of a grid split along y ([`Advection::new_on_cut`], its steps and [`Advection::field`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankMemory {
    /// Host memory at the set-up's peak. The velocities go up one array at a time, each freed once
    /// uploaded; then the initial field in the array's shape is uploaded into the field and its
    /// double buffer, and copied into the halo exchange's mirror: on the CPU engine, with the four
    /// engine arrays (f, g, u and v, or the packed pairs: as many bytes) all there, the peak.
    pub setup: u64,
    /// Host memory all along the steps: the engine's arrays on the CPU engine, and a split run's
    /// mirror of the array for its halo exchange through the host.
    pub run: u64,
    /// GPU memory (on a GPU engine): the four arrays, a split run's rows staged for NCCL, and the
    /// health check's partial counts.
    pub gpu: u64,
    /// Host memory of a download of the rank's array ([`Advection::field`]), freed once its nodes
    /// are picked out.
    pub download: u64,
    /// Host memory of the rank's nodes in f32, which go to the gather.
    pub nodes: u64,
}

impl RankMemory {
    /// The memory of the largest rank of `ranks` splitting a `size` grid along y, run with `kernel`
    /// on rows padded where `aligned`, on a GPU engine where `on_gpu`; `split` where its steps are cut
    /// (more than one rank, or `cut`). Counts are checked for overflow; nothing is allocated.
    pub fn of(
        size: [usize; 2],
        ranks: usize,
        kernel: Kernel,
        aligned: bool,
        split: bool,
        on_gpu: bool,
    ) -> Result<Self> {
        check_size(size)?;
        let (_, _, rows, shape) = rank_layout(size, ranks, 0, aligned)?;
        let what = format!("a {} x {rows} advection rank", size[0]);
        let array = memory::bytes(&[shape.len()], 4, &what)?;
        let nodes = memory::bytes(&[size[0], rows], 4, &what)?;
        let row = memory::bytes(&[shape.size()[0]], 4, &what)?;
        let fields = array.saturating_mul(4);
        let upload = array.saturating_mul(if kernel.packed() { 2 } else { 1 });
        let mirror = if split { array } else { 0 };
        let (setup, run, gpu) = if on_gpu {
            let setup = upload.max(array.saturating_add(mirror));
            let layers = if split { row.saturating_mul(8) } else { 0 };
            // The health check counts on the GPU into a partial count per block (4 blocks of 8
            // bytes per multiprocessor): 64 KiB covers 2048 multiprocessors.
            let check = 64 << 10;
            (
                setup,
                mirror,
                fields.saturating_add(layers).saturating_add(check),
            )
        } else {
            let setup = fields.saturating_add(array).saturating_add(mirror);
            (setup, fields.saturating_add(mirror), 0)
        };
        Ok(Self {
            setup,
            run,
            gpu,
            download: array,
            nodes,
        })
    }
}

/// A run on engine `E`, decomposed along y over the ranks of `C` (one rank: [`Solo`]).
pub struct Advection<'e, E: LoopEngine, C: Communicator = Solo> {
    engine: &'e E,
    comm: &'e C,
    /// This rank's nodes.
    size: [usize; 2],
    shape: Shape,
    /// The split along y, and whether rows are padded: every rank's layout, to name a node found on
    /// any rank in the whole grid's coordinates.
    split: Decomposition<2>,
    aligned: bool,
    plan: Vec<Face<2>>,
    f: E::Field<f32>,
    g: E::Field<f32>,
    velocity: Velocity<E>,
    c: f32,
    kernel: Kernel,
    site: Loop2D<'e, E>,
    /// A decomposed run's step in parts (its halo exchange hidden behind the inner rows).
    parts: Option<Parts<'e, E>>,
    /// Whether the inner rows run during the exchange ([`set_overlap`](Self::set_overlap)).
    overlap: bool,
    steps: u64,
}

/// A decomposed step in parts ([`Advection::step_in`]): the rows that read no halo, and the two rows
/// at each end that do, with the exchange hidden behind the former. Only the face rows move, not the
/// whole array.
struct Parts<'e, E: LoopEngine> {
    inner: Option<Loop2D<'e, E>>,
    /// The rows at the low end and, where any are left, those at the high end.
    ends: Vec<Loop2D<'e, E>>,
    /// Only the field has halos: a node reads its own velocities only.
    transport: LayerExchange<'e, f32>,
}

/// A fault of this crate's own state (a kernel given the other velocity layout).
fn internal(what: &str) -> crate::Error {
    lattice_gpu_host::Error::Internal(what.into()).into()
}

/// One decomposed step as the framework's schedule sees it ([`overlap::step`]).
struct StepParts<'s, 'e, E: LoopEngine, C: Communicator> {
    a: &'s mut Advection<'e, E, C>,
    p: &'s mut Parts<'e, E>,
}

impl<'e, E: LoopEngine, C: Communicator> OverlapStep for StepParts<'_, 'e, E, C> {
    type Error = crate::Error;

    fn runs_beside(&self) -> bool {
        self.p.transport.runs_beside()
    }

    fn start(&mut self, next: bool) -> Result<()> {
        let field = if next { &self.a.g } else { &self.a.f };
        Ok(self.p.transport.start(field)?)
    }

    fn finish(&mut self, next: bool) -> Result<()> {
        self.a.finish_exchange(self.p, next)
    }

    fn boundary(&mut self, beside: bool) -> Result<()> {
        let (a, ends) = (&mut *self.a, &mut self.p.ends);
        match beside {
            true => self.p.transport.beside(|| a.run_each(ends)),
            false => a.run_each(ends),
        }
    }

    fn interior(&mut self) -> Result<()> {
        self.a.run_each(&mut self.p.inner)
    }
}

/// The velocities in the layout the kernel reads, and only that one.
enum Velocity<E: LoopEngine> {
    /// u and v, one field each.
    Separate { u: E::Field<f32>, v: E::Field<f32> },
    /// (u, v) pairs, each held as the f64 of the same bits ([`Uv`]).
    Packed(E::Field<f64>),
}

static SOLO: Solo = Solo;

impl<'e, E: LoopEngine> Advection<'e, E> {
    /// Checks `problem`, then that it fits the engine's memory, then uploads it. `aligned` pads rows so
    /// that each row's first node starts a 128-byte line ([`Kernel::pads_rows`]: where that pays).
    pub fn new(engine: &'e E, problem: &Problem, kernel: Kernel, aligned: bool) -> Result<Self> {
        Self::new_on(engine, &SOLO, Halos::Host, problem, kernel, aligned)
    }
}

impl<'e, E: LoopEngine, C: Communicator> Advection<'e, E, C> {
    /// [`Advection::new`] on this rank's rows of `problem` (the whole problem, on every rank) split along
    /// y over the ranks of `comm`, which exchange two rows with each neighbour before every step, the way
    /// `halos` says. The result does not depend on the split: every node sees the same values.
    pub fn new_on(
        engine: &'e E,
        comm: &'e C,
        halos: Halos<'e>,
        problem: &Problem,
        kernel: Kernel,
        aligned: bool,
    ) -> Result<Self> {
        Self::new_on_cut(engine, comm, halos, problem, kernel, aligned, false)
    }

    /// [`new_on`](Self::new_on), stepping even one rank in parts where `cut` says so (halo rows
    /// exchanged with nothing: y has walls): what the split costs on one GPU, and the split path where
    /// there is one GPU to run it.
    pub fn new_on_cut(
        engine: &'e E,
        comm: &'e C,
        halos: Halos<'e>,
        problem: &Problem,
        kernel: Kernel,
        aligned: bool,
        cut: bool,
    ) -> Result<Self> {
        problem.check()?;
        let nx = problem.size[0];
        let (split, y0, rows, shape) =
            rank_layout(problem.size, comm.size(), comm.rank(), aligned)?;
        let fields = memory::bytes(&[shape.len(), 4], 4, "the advection fields")?;
        engine.check_fits(fields, &format!("the {nx} x {rows} advection fields"))?;
        // Velocities zero on the fixed nodes, so that the kernels keep those nodes' values without a
        // branch (s = 0 gives the node's own value exactly).
        let spread = |velocity: bool, at: &(dyn Fn(usize, &mut [f32]) + Sync)| {
            let skip = |k: usize| velocity && problem.is_fixed(k);
            spread_rows(shape, [nx, rows], y0, 1, &skip, at)
        };
        let field = |data: Vec<f32>| -> Result<E::Field<f32>> {
            let mut f = engine.alloc::<f32>(shape)?;
            f.upload(&data)?;
            Ok(f)
        };
        // One velocity array on the host at a time, each freed once uploaded: the set-up's peak.
        let velocity = if kernel.packed() {
            let skip = |k: usize| problem.is_fixed(k);
            let uv = spread_rows(shape, [nx, rows], y0, 1, &skip, &|k, w: &mut [Uv]| {
                w[0] = Uv {
                    u: problem.u[k] as f32,
                    v: problem.v[k] as f32,
                }
            });
            // The runtime's fields hold numbers: the pairs go up as the f64s of the same bits.
            let mut pairs = engine.alloc::<f64>(shape)?;
            pairs.upload(bits(&uv))?;
            Velocity::Packed(pairs)
        } else {
            let u = field(spread(true, &|k, w| w[0] = problem.u[k] as f32))?;
            let v = field(spread(true, &|k, w| w[0] = problem.v[k] as f32))?;
            Velocity::Separate { u, v }
        };
        let f0 = spread(false, &|k, w| w[0] = problem.f0[k] as f32);
        let mut f = engine.alloc::<f32>(shape)?;
        f.upload(&f0)?;
        let mut g = engine.alloc::<f32>(shape)?;
        g.upload(&f0)?;
        Self {
            engine,
            comm,
            size: [nx, rows],
            shape,
            plan: split.halo_plan(comm.rank()),
            split,
            aligned,
            f,
            g,
            velocity,
            c: problem.c as f32,
            kernel,
            site: Loop2D::new(engine, shape.interior_range())?,
            parts: None,
            overlap: true,
            steps: 0,
        }
        .in_parts(&f0, halos, cut)
    }

    /// Splits a decomposed run's step into parts ([`Parts`]) with its halos moved the way `halos` says;
    /// one rank keeps the whole loop unless `cut`.
    fn in_parts(mut self, initial: &[f32], halos: Halos<'e>, cut: bool) -> Result<Self> {
        if self.plan.is_empty() && !cut {
            return Ok(self);
        }
        let r = self.shape.interior_range();
        let at = |y0: u32, y1: u32| {
            let mut q = r;
            (q.begin[1], q.end[1]) = (y0, y1);
            Loop2D::new(self.engine, q)
        };
        // An output reads the rows up to 2 away: the first and last two read the halo.
        let (y0, y1) = (r.begin[1], r.end[1]);
        let low_end = (y0 + 2).min(y1);
        let high_start = y1.saturating_sub(2).max(low_end);
        let first = self.shape.first()[1];
        // Local y (margins at 0 and 1) to the array's row.
        let row = |y: usize| first + y - 2;
        let layer = self.shape.size()[0];
        let transport = LayerExchange::new(halos, &self.plan, 1, row, layer, initial)?;
        let mut ends = vec![at(y0, low_end)?];
        if y1 > high_start {
            ends.push(at(high_start, y1)?);
        }
        let mut parts = Parts {
            inner: (high_start > low_end)
                .then(|| at(low_end, high_start))
                .transpose()?,
            ends,
            transport,
        };
        // One exchange before the first step: it only writes what the first step's exchange writes
        // again (and the halos an overlapped NCCL step reads), and it takes the transports' connection
        // set-up (NCCL connects peers on first use) out of the steps a caller times.
        parts.transport.start(&self.f)?;
        self.finish_exchange(&mut parts, false)?;
        self.parts = Some(parts);
        self.synchronize()?;
        Ok(self)
    }

    /// The array shape (margins and padding included).
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Steps done.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The loop site (its tuning result, with the auto-tuner); for a decomposed run, its inner rows'.
    pub fn site(&self) -> &Loop2D<'e, E> {
        // A decomposed run's largest loop: its inner rows.
        match &self.parts {
            Some(p) => p.inner.as_ref().unwrap_or(&p.ends[0]),
            None => &self.site,
        }
    }

    /// The array index of this rank's node (i, j): rows may be padded in front (`aligned`).
    fn node(&self, i: usize, j: usize) -> usize {
        let [x0, y0, _] = self.shape.first();
        self.shape.index(x0 + i, y0 + j, 0)
    }

    /// Overwrites the output buffer's interior with NaN (tests: a missed point cannot pass).
    pub fn poison_output(&mut self) -> Result<()> {
        let mut data = self.g.download()?;
        let [nx, ny] = self.size;
        for j in 0..ny {
            for i in 0..nx {
                data[self.node(i, j)] = f32::NAN;
            }
        }
        self.g.upload(&data)?;
        Ok(())
    }

    /// The kernel's arguments with separate velocity fields.
    fn separate<const K: u32>(&mut self) -> Result<Advect<K, Separate>> {
        let Velocity::Separate { u, v } = &self.velocity else {
            return Err(internal(
                "the separate-velocity kernel on packed velocities",
            ));
        };
        let vel = Separate {
            u: u.view(),
            v: v.view(),
        };
        Ok(self.args(vel))
    }

    /// The kernel's arguments with packed velocities.
    fn packed<const K: u32>(&mut self) -> Result<Advect<K, Packed>> {
        let Velocity::Packed(uv) = &self.velocity else {
            return Err(internal(
                "the packed-velocity kernel on separate velocities",
            ));
        };
        let vel = Packed {
            uv: uv.view().cast(),
        };
        Ok(self.args(vel))
    }

    /// The kernel's arguments: `g` from `f` with the velocities `vel`.
    fn args<const K: u32, V>(&mut self, vel: V) -> Advect<K, V> {
        Advect {
            f: self.f.view(),
            out: self.g.view_mut(),
            vel,
            c: self.c,
        }
    }

    /// With `false`, a decomposed run's exchange completes before any row runs instead of behind the
    /// inner rows: the baseline that shows what overlap gains (the same results).
    pub fn set_overlap(&mut self, overlap: bool) {
        self.overlap = overlap;
    }

    /// One time step (queued on a GPU; decomposed runs exchange rows with the neighbours).
    pub fn step(&mut self) -> Result<()> {
        match self.parts.take() {
            None => self.run(None)?,
            Some(mut parts) => {
                let stepped = self.step_in(&mut parts);
                self.parts = Some(parts);
                stepped?;
            }
        }
        std::mem::swap(&mut self.f, &mut self.g);
        self.steps += 1;
        Ok(())
    }

    /// A decomposed step over `p`'s rows, in the framework's order ([`overlap::step`]): the two rows at
    /// each end read the halo rows, the inner rows do not.
    fn step_in(&mut self, p: &mut Parts<'e, E>) -> Result<()> {
        let overlap = self.overlap;
        overlap::step(&mut StepParts { a: self, p }, overlap)
    }

    /// Completes the exchange `p` started: the halo rows are in `f` (`into_g`: in `g`; on a GPU: for
    /// the work queued next).
    fn finish_exchange(&mut self, p: &mut Parts<'e, E>, into_g: bool) -> Result<()> {
        let (shape, first) = (self.shape, self.shape.first());
        // The plan's local coordinates count the margin of 2.
        let index = |p: [usize; 2]| shape.index(first[0] + p[0] - 2, first[1] + p[1] - 2, 0);
        let f = if into_g { &mut self.g } else { &mut self.f };
        Ok(p.transport.finish(self.comm, &self.plan, &index, f)?)
    }

    /// Queues the kernel over the rows of each of `loops`.
    fn run_each<'l>(&mut self, loops: impl IntoIterator<Item = &'l mut Loop2D<'e, E>>) -> Result<()>
    where
        'e: 'l,
    {
        loops.into_iter().try_for_each(|l| self.run(Some(l)))
    }

    /// Queues the kernel over `site`'s rows (`None`: the whole grid, one rank's loop).
    fn run(&mut self, site: Option<&mut Loop2D<'e, E>>) -> Result<()> {
        macro_rules! go {
            ($args:ident, $k:expr) => {{
                let a = self.$args::<{ $k }>()?;
                match site {
                    Some(site) => site.run(&a)?,
                    None => self.site.run(&a)?,
                }
            }};
        }
        match self.kernel {
            Kernel::Plain => go!(separate, 0),
            Kernel::Queue => go!(separate, QUEUE),
            Kernel::QueueBranchFree => go!(separate, QUEUE | BRANCH_FREE),
            Kernel::Packed => go!(packed, QUEUE | BRANCH_FREE),
            Kernel::Shared => go!(packed, QUEUE | BRANCH_FREE | SHARED),
        }
        Ok(())
    }

    /// Waits for the queued steps.
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.engine.synchronize()?)
    }

    /// The field now (nx * ny values, x fastest), on rank 0 (other ranks get an empty vector).
    pub fn field(&self) -> Result<Vec<f64>> {
        gathered(self.comm, self.nodes()?)
    }

    /// [`field`](Self::field) at the end of a run: the engine's arrays are freed before the gather,
    /// which holds the whole grid on rank 0.
    pub fn into_field(self) -> Result<Vec<f64>> {
        let (comm, mine) = (self.comm, self.nodes()?);
        drop(self);
        gathered(comm, mine)
    }

    /// The field now as the run holds it, in f32 (nx * ny values, x fastest), on rank 0 (other ranks
    /// get an empty vector): the state a checkpoint keeps, whatever the split. Collective.
    pub fn state(&self) -> Result<Vec<f32>> {
        let mine = self.nodes()?;
        let all = self.comm.gather(&mine)?;
        drop(mine);
        Ok(all)
    }

    /// The rows of the whole grid this rank holds.
    pub fn rows(&self) -> std::ops::Range<usize> {
        let y0 = self.split.owned(self.comm.rank()).begin[1];
        y0..y0 + self.size[1]
    }

    /// Continues from a checkpoint's state: `field` (the whole grid's, as [`state`](Self::state)
    /// gives it, whatever the split that wrote it) after `step` steps. Every rank calls it (a split
    /// run exchanges its halo rows); then the run is where the one that wrote the checkpoint was,
    /// and its steps give the same bytes.
    pub fn restore(&mut self, step: u64, field: &[f32]) -> Result<()> {
        let [nx, ny] = self.split.global();
        if field.len() != nx * ny {
            return Err(Error::Invalid(format!(
                "a field of {} values cannot continue a {nx} x {ny} run, which needs {}; resume \
                 from a checkpoint of this grid",
                field.len(),
                nx * ny
            )));
        }
        let y0 = self.rows().start;
        let data = spread_rows(self.shape, self.size, y0, 1, &|_| false, &|k, w| {
            w[0] = field[k]
        });
        // The double buffer too: both hold what the constructor's upload would have put there.
        self.f.upload(&data)?;
        self.g.upload(&data)?;
        drop(data);
        // The halo rows of the neighbours' restored nodes, as after any step.
        if let Some(mut parts) = self.parts.take() {
            let done = parts
                .transport
                .start(&self.f)
                .map_err(Error::from)
                .and_then(|()| self.finish_exchange(&mut parts, false));
            self.parts = Some(parts);
            done?;
        }
        self.steps = step;
        self.synchronize()
    }

    /// This rank's nodes of the field now, x fastest (the download freed before it returns).
    fn nodes(&self) -> Result<Vec<f32>> {
        let data = self.f.download()?;
        let [nx, rows] = self.size;
        Ok((0..nx * rows)
            .map(|k| data[self.node(k % nx, k / nx)])
            .collect())
    }

    /// Whether the run may go on, decided by every rank together (each must call it after the same
    /// step): `Ok` while every rank's field is finite and no signal asked the run to stop; otherwise
    /// the error that ends it, [`Interrupted`](lattice_gpu_host::Error::Interrupted) or
    /// [`Diverged`](lattice_gpu_host::Error::Diverged) naming the first non-finite node in the whole
    /// grid's (x, y).
    pub fn check_health(&self) -> Result<()> {
        self.conclude(self.verdict()?)
    }

    /// The ranks' collective decision after this step (each must call it after the same step):
    /// healthy, stopped by a signal, or diverged. [`check_health`](Self::check_health) in two
    /// halves, for a caller that acts on a verdict (e.g. writes a checkpoint before a signal ends
    /// the run) before [`conclude`](Self::conclude) turns it into the result.
    pub fn verdict(&self) -> Result<Verdict> {
        let found = match self.engine.first_non_finite(&self.f)? {
            Some(i) => Some((i as u64, f64::from(self.f.download_span(i, 1)?[0]))),
            None => None,
        };
        Ok(Verdict::agree(self.comm, found)?)
    }

    /// `Ok` for [`Verdict::Healthy`], else the error that ends the run (see
    /// [`check_health`](Self::check_health)).
    pub fn conclude(&self, verdict: Verdict) -> Result<()> {
        Ok(verdict.into_result(
            self.steps,
            "the field",
            |nf| self.global_node(nf.rank, nf.index as usize),
            "the cubic interpolation can exceed the field's largest magnitude by up to 56 %, and the \
             kernels' f32 arithmetic ends at 3.4e38 (their intermediate sums near 5e37): scale the \
             field down (advection is linear in it). With smaller values this is a fault of the GPU, \
             the memory or lattice-gpu: please report it with the command line",
        )?)
    }

    /// Array index `i` of `rank`'s array as the node (x, y) of the whole grid. A halo row's index
    /// names the neighbour's node it holds.
    fn global_node(&self, rank: usize, i: usize) -> String {
        let layout = rank_layout(self.split.global(), self.split.ranks(), rank, self.aligned);
        match layout {
            Ok((_, y0, _, shape)) => {
                let [x0, y_first, _] = shape.first();
                let sx = shape.size()[0];
                let (x, y) = (i % sx, i / sx);
                format!(
                    "node (x, y) = ({}, {})",
                    x as i64 - x0 as i64,
                    (y + y0) as i64 - y_first as i64
                )
            }
            Err(_) => format!("array index {i} of rank {rank}"),
        }
    }
}

/// Rank 0's whole field from every rank's nodes, in f64 (each rank's f32 freed before the conversion).
fn gathered<C: Communicator>(comm: &C, mine: Vec<f32>) -> Result<Vec<f64>> {
    let all = comm.gather(&mine)?;
    drop(mine);
    Ok(all.into_iter().map(f64::from).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lattice_gpu_host::HostLoopEngine;

    fn uniform(n: usize, f: f64, u: f64, c: f64) -> Problem {
        Problem {
            size: [n, n],
            f0: vec![f; n * n],
            u: vec![u; n * n],
            v: vec![0.0; n * n],
            c,
        }
    }

    #[test]
    fn values_beyond_f32_are_refused_before_the_run() {
        // The CFL number is 0.5 in f64 every time; in f32 the displacement would be inf * 0 or 0 * inf.
        let e = uniform(16, 0.5, 1e300, 0.5e-300)
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the velocity 1e300 is beyond f32's range") && e.contains("node (2, 2)"),
            "{e}"
        );
        let e = uniform(16, 0.5, 1e-300, 0.5e300)
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("dt / h = 5e299 is beyond f32's range"), "{e}");
        let e = uniform(16, 0.5, 1.0, 1e-40)
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("below f32's normal range"), "{e}");
        let mut p = uniform(16, 0.5, 1.0, 0.5);
        p.f0[5 + 16 * 7] = -1e39;
        let e = p.check().unwrap_err().to_string();
        assert!(e.contains("the field is -1e39 at node (5, 7)"), "{e}");
        // Large is not too large: f32's own range passes.
        uniform(16, 3e38, 1e30, 0.5e-30).check().unwrap();
    }

    /// Rows from y = 16 on hold +-3e38 as (-, +, +, -) along x, which the half-way cubic weights all
    /// add up beyond f32; the rows below hold 0.5. u = 0.5 everywhere, at a Courant number of 1/2.
    fn overflowing() -> Problem {
        let (nx, ny) = (32, 24);
        let mut p = uniform(nx, 0.5, 0.5, 1.0);
        p.size = [nx, ny];
        p.f0 = (0..nx * ny)
            .map(|k| match (k % nx % 4, k / nx >= 16) {
                (1 | 2, true) => 3e38,
                (_, true) => -3e38,
                _ => 0.5,
            })
            .collect();
        p.u.truncate(nx * ny);
        p.v.truncate(nx * ny);
        p
    }

    #[test]
    fn a_split_run_names_the_first_non_finite_node_in_the_whole_grid() {
        fn after<C: Communicator>(a: &mut Advection<'_, HostLoopEngine, C>) -> String {
            a.check_health().unwrap();
            for _ in 0..3 {
                a.step().unwrap();
            }
            a.check_health().unwrap_err().to_string()
        }
        let p = overflowing();
        let whole = after(&mut Advection::new(&HostLoopEngine, &p, Kernel::Plain, true).unwrap());
        assert!(
            whole.contains("NaN at node (x, y) = (0, 13) after step 3"),
            "{whole}"
        );
        // Three ranks of 8 rows: the first NaN is rank 1's, and every rank ends with the same error.
        let split = lattice_gpu_host::threads::run(3, |comm| {
            let engine = HostLoopEngine;
            let mut a = Advection::new_on(&engine, comm, Halos::Host, &p, Kernel::Packed, true)?;
            Ok::<_, Error>(after(&mut a))
        })
        .unwrap();
        assert_eq!(split, vec![whole; 3]);
    }

    #[test]
    fn a_restored_run_continues_with_the_bytes_of_a_straight_one() {
        let case = crate::cases::swirl(40, 30);
        let (um, vm) = crate::cases::max_speed(&case.u, &case.v);
        let p = Problem {
            size: [40, 30],
            f0: case.f0,
            u: case.u,
            v: case.v,
            c: 0.8 / um.max(vm),
        };
        let n = 7;
        // `ranks` threads (cut steps where `cut`) from `from` (a state after `n` steps) for `steps`.
        let run = |ranks: usize, kernel: Kernel, cut: bool, from: Option<&[f32]>, steps: u64| {
            let states = lattice_gpu_host::threads::run(ranks, |comm| {
                let engine = HostLoopEngine;
                let mut a =
                    Advection::new_on_cut(&engine, comm, Halos::Host, &p, kernel, true, cut)?;
                if let Some(field) = from {
                    a.restore(n, field)?;
                }
                while a.steps() < steps {
                    a.step()?;
                }
                a.state()
            })
            .unwrap();
            states.into_iter().next().unwrap()
        };
        let straight = run(1, Kernel::Plain, false, None, 2 * n);
        for (first, then, kernel, cut) in [
            (1, 1, Kernel::Plain, false),
            (2, 3, Kernel::Packed, false),
            (3, 1, Kernel::Queue, true),
            (1, 2, Kernel::Shared, false),
        ] {
            let half = run(first, kernel, cut, None, n);
            assert_ne!(half, straight);
            let whole = run(then, kernel, cut, Some(&half), 2 * n);
            assert!(
                whole
                    .iter()
                    .map(|x| x.to_bits())
                    .eq(straight.iter().map(|x| x.to_bits())),
                "{first} ranks then {then} ({kernel:?}, cut {cut}): not the straight run's bytes"
            );
        }
        let mut a = Advection::new(&HostLoopEngine, &p, Kernel::Plain, true).unwrap();
        let e = a.restore(3, &straight[..100]).unwrap_err().to_string();
        assert!(
            e.contains("a field of 100 values cannot continue a 40 x 30 run"),
            "{e}"
        );
    }

    #[test]
    fn rank_memory_counts_the_arrays_of_the_largest_rank() {
        // Rank 0 of 2 holds 25 of the 50 rows: a (100 + 4) x (25 + 4) array of f32.
        let array = 104 * 29 * 4;
        let cpu = RankMemory::of([100, 50], 2, Kernel::Plain, false, true, false).unwrap();
        assert_eq!(
            cpu,
            RankMemory {
                setup: 6 * array,
                run: 5 * array,
                gpu: 0,
                download: array,
                nodes: 100 * 25 * 4,
            }
        );
        // One rank on a GPU: the packed velocities are the largest upload; nothing stays on the host.
        let array = 104 * 54 * 4;
        let gpu = RankMemory::of([100, 50], 1, Kernel::Packed, false, false, true).unwrap();
        assert_eq!(
            (gpu.setup, gpu.run, gpu.gpu),
            (2 * array, 0, 4 * array + (64 << 10))
        );
        let e = RankMemory::of([4, 50], 1, Kernel::Plain, false, false, false).unwrap_err();
        assert!(e.to_string().contains("5-node footprint"), "{e}");
        assert_eq!(most_ranks([64, 9]), 4);
        assert!(RankMemory::of([64, 9], 5, Kernel::Plain, false, true, false).is_err());
    }
}
