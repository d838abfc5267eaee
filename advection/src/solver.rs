//! An advection run on any loop engine: the field double-buffered with a margin of 2, the steady
//! velocities (zero on the two outermost nodes of every side, which therefore keep their values), and the
//! kernel variant that carries the step.

use lattice_gpu_host::comm::{Communicator, Halos, LayerExchange, Solo};
use lattice_gpu_host::decomp::{Decomposition, Face};
use lattice_gpu_host::engine::autotune::TuneSpace;
use lattice_gpu_host::{Field, Loop2D, LoopEngine, Shape};
use lattice_gpu_kernels::advection::{Advect, Uv, BRANCH_FREE, PACKED, QUEUE, SHARED};
use lattice_gpu_kernels::stencil::FieldRef;
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
    /// registers and slows the plain and shared ones (measured on an H100: docs/BENCHMARKS.md).
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
        if nx < 5 || ny < 5 {
            return Err(Error::Invalid(format!(
                "a {nx} x {ny} grid is smaller than the scheme's 5-node footprint; use at least 5 x 5 nodes"
            )));
        }
        let n = nx * ny;
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
        if !(self.c.is_finite() && self.c > 0.0) {
            return Err(Error::Invalid(format!(
                "dt / h = {} must be positive",
                self.c
            )));
        }
        let (cfl, at, axis) = self.max_courant();
        if cfl > 1.0 {
            return Err(Error::Invalid(format!(
                "the CFL number |{axis}| dt / h = {cfl:.4} at node ({}, {}) exceeds 1: the departure point \
                 would leave the 5-node footprint; lower dt (or the CFL number) by a factor {:.3} or more",
                at % nx,
                at / nx,
                cfl
            )));
        }
        Ok(())
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

/// A run on engine `E`, decomposed along y over the ranks of `C` (one rank: [`Solo`]).
pub struct Advection<'e, E: LoopEngine, C: Communicator = Solo> {
    engine: &'e E,
    comm: &'e C,
    /// This rank's nodes.
    size: [usize; 2],
    shape: Shape,
    plan: Vec<Face<2>>,
    f: E::Field<f32>,
    g: E::Field<f32>,
    velocity: Velocity<E::Field<f32>>,
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

/// The velocities in the layout the kernel reads, and only that one.
enum Velocity<F> {
    /// u and v, one field each.
    Separate { u: F, v: F },
    /// (u, v) pairs, two f32 per node of the array shape.
    Packed(F),
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
        let [nx, ny] = problem.size;
        let split = Decomposition::new([nx, ny], [1, comm.size()], [2, 2], [false, false])?;
        let own = split.owned(comm.rank());
        let (y0, rows) = (own.begin[1], own.size[1]);
        let mut shape = Shape::new_2d([nx, rows], 2)?;
        if aligned {
            shape = shape.aligned_rows(4, 1.25);
        }
        let packed = Shape::new_2d([2 * shape.size()[0], shape.size()[1]], 0)?;
        // f, its double buffer and the two velocity components.
        engine.check_fits(
            (4 * shape.len() * 4) as u64,
            &format!("the {nx} x {rows} advection fields"),
        )?;
        // Into the array's interior; velocities zero on the fixed nodes (of the whole grid), so that the
        // kernels keep those nodes' values without a branch (s = 0 gives the node's own value exactly).
        let spread = |data: &[f64], velocity: bool| {
            let mut a = vec![0.0f32; shape.len()];
            let [x0, y_first, _] = shape.first();
            a.par_chunks_mut(shape.size()[0])
                .skip(y_first)
                .take(rows)
                .enumerate()
                .for_each(|(j, row)| {
                    for i in 0..nx {
                        let k = i + nx * (y0 + j);
                        if !(velocity && problem.is_fixed(k)) {
                            row[x0 + i] = data[k] as f32;
                        }
                    }
                });
            a
        };
        let (f0, u, v) = (
            spread(&problem.f0, false),
            spread(&problem.u, true),
            spread(&problem.v, true),
        );
        let field = |data: &[f32], s: Shape| -> Result<E::Field<f32>> {
            let mut f = engine.alloc::<f32>(s)?;
            f.upload(data)?;
            Ok(f)
        };
        let velocity = if kernel.packed() {
            let uv: Vec<f32> = u.iter().zip(&v).flat_map(|(&a, &b)| [a, b]).collect();
            Velocity::Packed(field(&uv, packed)?)
        } else {
            Velocity::Separate {
                u: field(&u, shape)?,
                v: field(&v, shape)?,
            }
        };
        Self {
            engine,
            comm,
            size: [nx, rows],
            shape,
            plan: split.halo_plan(comm.rank()),
            f: field(&f0, shape)?,
            g: field(&f0, shape)?,
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

    /// The kernel's arguments; the velocity layout it does not read points at `f` (never read).
    fn args<const K: u32>(&mut self) -> Advect<K> {
        let f = self.f.view();
        let (u, v, uv) = match &self.velocity {
            Velocity::Separate { u, v } => (u.view(), v.view(), f.as_ptr() as *const Uv),
            Velocity::Packed(uv) => (f, f, uv.view().as_ptr() as *const Uv),
        };
        debug_assert_eq!(
            K & PACKED != 0,
            matches!(self.velocity, Velocity::Packed(_))
        );
        Advect {
            f,
            out: self.g.view_mut(),
            u,
            v,
            // SAFETY: a packed field holds two f32 per array point, so it covers every index of `shape`;
            // otherwise the kernel does not read it.
            uv: unsafe { FieldRef::from_raw(uv) },
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

    /// A decomposed step over `p`'s rows. Through NCCL, overlapped: the two rows at each end on the
    /// exchange's stream, then the exchange of what they wrote, both beside the inner rows (`f`'s halo
    /// rows came with the step before). Otherwise the exchange of `f`'s rows starts first (through the
    /// host: the rows this rank sends are copied out), the inner rows are queued (on a GPU they run
    /// meanwhile), then the received rows are in and the rows at each end run.
    fn step_in(&mut self, p: &mut Parts<'e, E>) -> Result<()> {
        if self.overlap && p.transport.runs_beside() {
            let ends = &mut p.ends;
            p.transport.beside(|| self.run_each(ends))?;
            p.transport.start(&self.g)?;
            self.run_each(&mut p.inner)?;
            return self.finish_exchange(p, true);
        }
        p.transport.start(&self.f)?;
        if !self.overlap {
            self.finish_exchange(p, false)?;
        }
        self.run_each(&mut p.inner)?;
        if self.overlap {
            self.finish_exchange(p, false)?;
        }
        self.run_each(&mut p.ends)
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
            ($k:expr) => {{
                let a = self.args::<{ $k }>();
                match site {
                    Some(site) => site.run(&a)?,
                    None => self.site.run(&a)?,
                }
            }};
        }
        match self.kernel {
            Kernel::Plain => go!(0),
            Kernel::Queue => go!(QUEUE),
            Kernel::QueueBranchFree => go!(QUEUE | BRANCH_FREE),
            Kernel::Packed => go!(QUEUE | BRANCH_FREE | PACKED),
            Kernel::Shared => go!(QUEUE | BRANCH_FREE | PACKED | SHARED),
        }
        Ok(())
    }

    /// Waits for the queued steps.
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.engine.synchronize()?)
    }

    /// The field now (nx * ny values, x fastest), on rank 0 (other ranks get an empty vector).
    pub fn field(&self) -> Result<Vec<f64>> {
        let data = self.f.download()?;
        let [nx, rows] = self.size;
        let mine: Vec<f32> = (0..nx * rows)
            .map(|k| data[self.node(k % nx, k / nx)])
            .collect();
        Ok(self
            .comm
            .gather(&mine)?
            .into_iter()
            .map(f64::from)
            .collect())
    }
}
