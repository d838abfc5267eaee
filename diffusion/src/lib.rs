//! The 3-D diffusion application: `df/dt = kappa lap f` on the unit cube with `f = 0` on the walls,
//! explicit 7-point stencil, run by any loop engine.
//!
//! Grid: `nx x ny x nz` interior points at `x_i = i h_x` (`i = 1..=nx`, `h_x = 1 / (nx + 1)`), with one
//! margin point per side holding the wall value 0. The initial condition
//! `f0 = sin(pi x) sin(pi y) sin(pi z)` decays as `exp(-3 kappa pi^2 t)`; the scheme's own answer is
//! `G^n f0` with `G = 1 - 4 sum_a (kappa dt / h_a^2) sin^2(pi h_a / 2)`, which differs from the
//! continuous one by O(h^2).
//!
//! The `diffusion` binary runs it; [`bench`](mod@bench) holds the benchmark of the paper's table
//! (`diffusion bench`) and the timing the criterion benchmark shares.

use std::f64::consts::PI;
use std::time::Instant;

use lattice_gpu_formats::checkpoint::{Checkpoint, Saver, Written};
use lattice_gpu_host::comm::{Communicator, Solo};
use lattice_gpu_host::decomp::{Decomposition, Face, Side};
use lattice_gpu_host::engine::{LoopEngine, PassForm, StepsChoice, TuningReport};
use lattice_gpu_host::field::fmt_dims;
pub use lattice_gpu_host::halo::Halos;
use lattice_gpu_host::halo::LayerExchange;
use lattice_gpu_host::health::{check_interval, Verdict};
use lattice_gpu_host::overlap::{self, OverlapStep};
use lattice_gpu_host::{DeviceCounter, Element, Field, Loop3D, Shape};
use lattice_gpu_kernels::device::math::Real;
use lattice_gpu_kernels::diffusion::{Diffusion3d, DiffusionReal};
use lattice_gpu_kernels::stencil::{
    PassRange, PassSignal, PointUpdate3D, MAX_COLUMN_STEPS, MAX_TEMPORAL_STEPS,
};

pub mod bench;

/// How a decomposed run exchanges its halos.
#[derive(Clone, Copy, Debug)]
pub struct Exchange<'a> {
    /// Through what.
    pub halos: Halos<'a>,
    /// Whether the planes that read no halo run during the exchange; `false`: the exchange completes
    /// before any plane runs (the baseline that overlap is measured against).
    pub overlap: bool,
    /// Whether one rank splits its steps as several do (boundary planes apart from the interior, with
    /// an exchange that moves nothing): what the split costs on one GPU.
    pub cut: bool,
}

/// Errors of the diffusion application.
#[derive(Debug, thiserror::Error)]
pub enum DiffusionError {
    /// A parameter that cannot work, with the reason and the fix.
    #[error("{0}")]
    Invalid(String),
    /// An error of the runtime (GPU, memory, files).
    #[error(transparent)]
    Host(#[from] lattice_gpu_host::Error),
    /// A file could not be read or written.
    #[error(transparent)]
    Io(#[from] lattice_gpu_formats::IoError),
}

/// Results of the diffusion application.
pub type Result<T, E = DiffusionError> = std::result::Result<T, E>;

/// A diffusion problem: grid, diffusivity and time step, checked for stability.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Problem {
    /// Interior points (nx, ny, nz).
    pub size: [usize; 3],
    /// Grid spacing per axis.
    pub h: [f64; 3],
    /// Diffusivity.
    pub kappa: f64,
    /// Time step.
    pub dt: f64,
}

/// The largest stable `kappa dt sum_a 1/h_a^2` of the explicit scheme (1/6 per axis on a cubic grid).
pub const STABILITY_LIMIT: f64 = 0.5;

impl Problem {
    /// A problem on the unit cube with `size` interior points; `dt` defaults to `0.1 h_min^2 / kappa`.
    pub fn new(size: [usize; 3], kappa: f64, dt: Option<f64>) -> Result<Self> {
        if size.contains(&0) {
            return Err(DiffusionError::Invalid(format!(
                "grid size {} has an axis of zero points; give at least 1 point per axis (e.g. --size 128)",
                fmt_dims(&size)
            )));
        }
        if !(kappa.is_finite() && kappa > 0.0) {
            return Err(DiffusionError::Invalid(format!(
                "kappa = {kappa} is not a positive diffusivity; give --kappa > 0"
            )));
        }
        let h = size.map(|n| 1.0 / (n as f64 + 1.0));
        let hmin = h.iter().cloned().fold(f64::INFINITY, f64::min);
        let dt = dt.unwrap_or(0.1 * hmin * hmin / kappa);
        if dt.is_infinite() && kappa < 1.0 {
            return Err(DiffusionError::Invalid(format!(
                "kappa = {kappa:e} is so small that the default time step 0.1 h^2 / kappa overflows; \
                 give a larger --kappa, or a time step with --dt"
            )));
        }
        if !(dt.is_finite() && dt > 0.0) {
            return Err(DiffusionError::Invalid(format!(
                "dt = {dt} is not a positive time step"
            )));
        }
        let p = Self { size, h, kappa, dt };
        let sum = p.stability_number();
        if sum > STABILITY_LIMIT {
            let max_dt = STABILITY_LIMIT / (kappa * h.iter().map(|h| 1.0 / (h * h)).sum::<f64>());
            return Err(DiffusionError::Invalid(format!(
                "dt = {dt:e} is unstable: kappa dt sum(1/h^2) = {sum:.4} exceeds {STABILITY_LIMIT} \
                 (kappa dt / h^2 > 1/6 on a cubic grid); use dt <= {max_dt:e} or leave --dt out for a stable default"
            )));
        }
        Ok(p)
    }

    /// `kappa dt sum_a 1/h_a^2`: the scheme is stable up to 1/2.
    pub fn stability_number(&self) -> f64 {
        self.kappa * self.dt * self.h.iter().map(|h| 1.0 / (h * h)).sum::<f64>()
    }

    /// The field's shape for elements of `T`: the interior with a one-point margin holding the walls,
    /// rows aligned to 128 bytes where that costs at most a quarter more memory.
    pub fn shape<T>(&self) -> Result<Shape> {
        Self::shape_of::<T>(self.size, 1)
    }

    /// The shape of a field of `size` interior points (one rank's part of a decomposed run), with
    /// `depth` planes of margin in z (the halo layers of a split run's passes of `depth` steps).
    pub fn shape_of<T>(size: [usize; 3], depth: usize) -> Result<Shape> {
        Ok(
            Shape::new_3d_margins(size, [1, 1, depth])?
                .aligned_rows(std::mem::size_of::<T>(), 1.25),
        )
    }

    /// The point update from `f` to `fnew`.
    pub fn update<T: Element>(
        &self,
        f: &impl Field<T>,
        fnew: &mut impl Field<T>,
    ) -> Diffusion3d<T> {
        Diffusion3d::new(f.view(), fnew.view_mut(), self.kappa, self.dt, self.h)
    }

    /// `sin(pi x) sin(pi y) sin(pi z)` at the interior points, x fastest.
    pub fn sine_mode<T: Real>(&self) -> Vec<T> {
        self.sine_mode_values().map(T::from_f64).collect()
    }

    /// The values of [`sine_mode`](Self::sine_mode) in f64, computed as they are taken.
    fn sine_mode_values(&self) -> impl Iterator<Item = f64> {
        let s = std::rc::Rc::new([0, 1, 2].map(|a| {
            (1..=self.size[a])
                .map(|i| (PI * i as f64 * self.h[a]).sin())
                .collect::<Vec<f64>>()
        }));
        let [nx, ny, nz] = self.size;
        (0..nz).flat_map(move |k| {
            let s = s.clone();
            (0..ny).flat_map(move |j| {
                let s = s.clone();
                (0..nx).map(move |i| s[0][i] * s[1][j] * s[2][k])
            })
        })
    }

    /// The continuous solution's decay factor after `steps` steps: `exp(-3 kappa pi^2 t)`.
    pub fn analytic_decay(&self, steps: usize) -> f64 {
        (-3.0 * self.kappa * PI * PI * self.dt * steps as f64).exp()
    }

    /// The scheme's own decay factor of the sine mode after `steps` steps, `G^steps`.
    pub fn discrete_decay(&self, steps: usize) -> f64 {
        let g = 1.0
            - 4.0
                * self
                    .h
                    .iter()
                    .map(|h| self.kappa * self.dt / (h * h) * (PI * h / 2.0).sin().powi(2))
                    .sum::<f64>();
        g.powi(steps as i32)
    }

    /// Bytes one step moves at least, as the update states them per point
    /// ([`PointUpdate3D::BYTES`]: each point read once and written once).
    pub fn bytes_per_step<T: Real>(&self) -> f64 {
        f64::from(<Diffusion3d<T> as PointUpdate3D>::BYTES) * self.points() as f64
    }

    /// The peak memory of a run split over `ranks` ranks, `in_process` of them threads of this
    /// process, on a GPU or not, as [`simulate_on`] and the `diffusion` binary hold it. Per rank (`S`
    /// its array, `L` its interior, `P` the whole grid's points, in elements): the whole initial
    /// field and this rank's array while it is set up (`P + S`); on the CPU the two fields (`2S`) all
    /// along, and at the end a downloaded copy and its interior (`+ S + L`); then, the fields freed,
    /// the interiors and the gathered result (`P`) on rank 0, which the binary keeps while it writes.
    /// On a GPU its two fields (`2S`) and the halo layers, `depth` planes on each side of a rank's
    /// slab ([`halo_depth`]).
    pub fn footprint<T>(
        &self,
        ranks: usize,
        in_process: usize,
        on_gpu: bool,
        depth: usize,
    ) -> Result<lattice_gpu_host::memory::Footprint> {
        let el = std::mem::size_of::<T>() as u64;
        let nz = self.size[2].div_ceil(ranks.max(1));
        let depth = depth.max(1);
        let shape = Self::shape_of::<T>([self.size[0], self.size[1], nz], depth)?;
        let p = lattice_gpu_host::memory::bytes(&self.size, 1, "the grid")?;
        let [s, l] = [shape.len() as u64, p / self.size[2] as u64 * nz as u64];
        let fields = if on_gpu { 0 } else { 2 * s };
        let rank = [p + s, fields + s + l].into_iter().max().unwrap_or(0);
        let k = in_process as u64;
        let host = (k * rank).max(k * l + p);
        let layers = 4 * depth as u64 * (shape.size()[0] * shape.size()[1]) as u64;
        let gpu = if on_gpu { 2 * s + layers } else { 0 };
        Ok(lattice_gpu_host::memory::Footprint::new(
            format!(
                "a {} {} diffusion run{}",
                fmt_dims(&self.size),
                std::any::type_name::<T>(),
                if ranks > 1 {
                    format!(" split over {ranks} ranks")
                } else {
                    String::new()
                }
            ),
            host.saturating_mul(el),
            gpu.saturating_mul(el),
            on_gpu,
        ))
    }

    /// Interior points.
    pub fn points(&self) -> u64 {
        self.size.iter().map(|&v| v as u64).product()
    }
}

/// Relative L2 difference `|a - factor * m| / |factor * m|` of `a` (interior points, x fastest) from the
/// sine mode `m` ([`Problem::sine_mode`]), for each factor of `factors`; the mode is computed point by
/// point rather than stored, which would double a run's peak memory in f32.
pub fn sine_mode_errors<A: Real, const N: usize>(
    problem: &Problem,
    a: &[A],
    factors: [f64; N],
) -> [f64; N] {
    let (mut num, mut den) = ([0.0; N], 0.0);
    let mut at = a.iter();
    for m in problem.sine_mode_values() {
        let v = at.next().map_or(f64::NAN, |v| v.to_f64());
        for (n, f) in num.iter_mut().zip(factors) {
            *n += (v - f * m).powi(2);
        }
        den += m * m;
    }
    let mut out = [0.0; N];
    for ((o, n), f) in out.iter_mut().zip(num).zip(factors) {
        *o = (n / (f * f * den)).sqrt();
    }
    out
}

/// Relative L2 difference `|a - factor * b| / |factor * b|`.
pub fn relative_l2<A: Real, B: Real>(a: &[A], b: &[B], factor: f64) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        let y = factor * y.to_f64();
        num += (x.to_f64() - y).powi(2);
        den += y * y;
    }
    (num / den).sqrt()
}

/// What a run produced.
pub struct RunOutput<T> {
    /// The final field at the interior points, x fastest.
    pub field: Vec<T>,
    /// Wall-clock seconds of all steps (queued and finished).
    pub seconds: f64,
    /// The auto-tuner's result, when the engine tunes.
    pub tuning: Option<TuningReport>,
    /// (steps timed, steps needed) when the run ended before the tuner had timed every candidate.
    pub tuning_unfinished: Option<(usize, usize)>,
    /// The steps per pass the auto-tuner chose ([`Temporal::Auto`] on an engine that tunes).
    pub steps_choice: Option<StepsChoice>,
    /// Steps run in temporally blocked passes (the rest ran singly).
    pub blocked_steps: usize,
    /// The most steps a pass advanced (1: single steps only).
    pub pass_steps: u32,
    /// The halo planes on each side of a rank's slab ([`halo_depth`]; 1 on one domain).
    pub halo_depth: usize,
    /// The checkpoints written (rank 0).
    pub checkpoints: Vec<Written>,
    /// Seconds the run waited for checkpoint writes: what checkpointing cost it.
    pub checkpoint_wait: f64,
}

/// Runs `steps` steps from the interior field `initial` makes (x fastest; the walls are 0) on `engine`.
/// Memory is checked before `initial` is called, so a grid too large fails with a clear error before
/// anything big is allocated. `progress` is called with the number of finished steps now and then.
pub fn simulate<E: LoopEngine, T: Element + DiffusionReal>(
    engine: &E,
    problem: &Problem,
    initial: impl FnOnce() -> Result<Vec<T>>,
    steps: usize,
    progress: impl FnMut(usize),
) -> Result<RunOutput<T>> {
    simulate_on(
        engine,
        &Solo,
        Exchange {
            halos: Halos::Host,
            overlap: true,
            cut: false,
        },
        problem,
        initial,
        steps,
        progress,
    )
}

/// Queues `n` steps, `f` and `g` swapping after each: in passes of `temporal` steps
/// ([`Loop3D::run_temporal`]) while `temporal` fit, the rest single (`f` and `g` swap once a pass).
pub fn queue_steps<E: LoopEngine, T: Element + DiffusionReal>(
    lp: &mut Loop3D<'_, E>,
    f: &mut E::Field<T>,
    g: &mut E::Field<T>,
    problem: &Problem,
    n: usize,
    temporal: u32,
) -> lattice_gpu_host::Result<()> {
    let t = temporal.max(1) as usize;
    for _ in 0..n / t {
        advance(lp, problem, f, g, t as u32)?;
        std::mem::swap(f, g);
    }
    for _ in 0..n % t {
        lp.run(&problem.update(f, g))?;
        std::mem::swap(f, g);
    }
    Ok(())
}

/// Checks the steps of a temporally blocked pass for a run: 1 to [`MAX_TEMPORAL_STEPS`].
pub fn check_temporal(temporal: Temporal) -> Result<()> {
    let Temporal::Steps(temporal) = temporal else {
        return Ok(());
    };
    if !(1..=MAX_TEMPORAL_STEPS).contains(&temporal) {
        return Err(DiffusionError::Invalid(format!(
            "--temporal {temporal}: a temporally blocked pass advances 1 to {MAX_TEMPORAL_STEPS} \
             steps (1: single steps)"
        )));
    }
    Ok(())
}

/// The halo planes on each side of a rank's slab in a run of `temporal` steps per pass over `ranks`
/// ranks, `cut` when one rank's domain is cut all the same: where the run is split, as many as a pass
/// has steps, since the stencil reads one plane beyond each point a step. They are exchanged once a
/// pass, and the pass advances all but the outermost with the rank's own planes (communication
/// avoidance). One for single steps; for [`Temporal::Auto`] on a split run, what
/// [`split_steps`] chose (one until then: the least a run may hold).
pub fn halo_depth(temporal: Temporal, ranks: usize, cut: bool) -> usize {
    match temporal {
        Temporal::Steps(t) if ranks > 1 || cut => t.max(1) as usize,
        _ => 1,
    }
}

/// The least common multiple of `a` and `b`.
fn lcm(a: usize, b: usize) -> usize {
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    a / gcd(a, b) * b
}

/// How often `f` and `g` swap in [`queue_steps`] of `n` steps in passes of `temporal`.
fn swaps(n: usize, temporal: u32) -> usize {
    let t = temporal.max(1) as usize;
    n / t + n % t
}

/// A decomposed step's parts: the loops over the planes that read no halo and over the boundary
/// planes, and the exchange of the face planes (only those move, not the whole array). The framework
/// orders them ([`overlap::step`]). With halos `depth` planes deep, a step is a pass of up to `depth`
/// steps: its loops advance the received planes but the outermost with the rank's own
/// ([`Loop3D::advancing`]), and the boundary is the `depth` planes at each end that read them.
struct Overlap<'e, E: LoopEngine, T: Element> {
    /// Loops over the planes that read no halo, and over the first `depth` planes and the last (one
    /// loop for all the planes where the slab has no more than `2 depth`, without overlap, or where
    /// the passes signal).
    inner: Option<Loop3D<'e, E>>,
    ends: Vec<Loop3D<'e, E>>,
    /// Passes of `depth` steps over the whole slab that count their end planes, for an exchange
    /// through NCCL that waits for the count: on a GPU, in the column form, overlapped.
    signalled: Option<Signalled<'e, E>>,
    transport: LayerExchange<'e, T>,
    /// Whether the interior runs during the exchange; `false`: the exchange completes first (the
    /// baseline overlap is measured against).
    overlap: bool,
}

/// A split run's passes of `depth` steps that count the points they write in the `depth` planes at
/// each end of the slab ([`PassSignal`]), and where the count stands: one pass over the slab, its
/// exchange beside the rest of it. Overlapped with boundary passes of their own instead, each of
/// those computes the lead of its steps again (on one H200, 8% of the rate of passes of three steps
/// at 512^3; docs/benchmarks/history.md).
struct Signalled<'e, E: LoopEngine> {
    pass: Loop3D<'e, E>,
    depth: u32,
    counter: DeviceCounter,
    /// The count the passes queued so far reach, and what each adds (a cyclic count: it may wrap).
    target: u32,
    per_pass: u32,
}

impl<'e, E: LoopEngine, T: Element + DiffusionReal> Overlap<'e, E, T> {
    fn new(
        engine: &'e E,
        shape: Shape,
        plan: &[Face<3>],
        initial: &[T],
        exchange: Exchange<'e>,
    ) -> Result<Self> {
        let r = shape.interior_range();
        let depth = shape.margin()[2];
        let d = depth as u32;
        // Every received plane but the outermost, which the pass holds at what came.
        let mut live = r;
        for f in plan {
            match f.side {
                Side::Lower => live.begin[2] -= d - 1,
                Side::Upper => live.end[2] += d - 1,
            }
        }
        let at = |z0: u32, z1: u32| {
            let mut q = r;
            (q.begin[2], q.end[2]) = (z0, z1);
            Loop3D::advancing(engine, q, live)
        };
        let (z0, z1) = (r.begin[2], r.end[2]);
        let [nx, ny, _] = shape.size();
        // Local z (margin at 0) to the array's plane.
        let plane = |z: usize| shape.first()[2] + z - depth;
        // Without overlap nothing runs beside the exchange: the slab is one loop (a pass's planes next
        // to the boundary's would each recompute `depth` planes before and after them).
        let transport = LayerExchange::new(exchange.halos, plan, 2, plane, nx * ny, initial)?;
        let overlapped = exchange.overlap && z1 - z0 > 2 * d;
        // The count is cyclic in 32 bits: a pass must add less than half of them.
        let per_pass = PassRange::new(live, r).end_points(d);
        let signalled = match engine.device() {
            Some(gpu)
                if overlapped
                    && d > 1
                    && per_pass < 1 << 31
                    && transport.runs_beside()
                    && PassForm::of::<Diffusion3d<T>>(d) == PassForm::Columns =>
            {
                let counter = DeviceCounter::new(gpu)?;
                let signal = PassSignal {
                    counter: counter.addr(),
                    depth: d,
                    pad: 0,
                };
                Some(Signalled {
                    pass: at(z0, z1)?.signalling(signal),
                    depth: d,
                    target: 0,
                    per_pass: per_pass as u32,
                    counter,
                })
            }
            _ => None,
        };
        let (ends, inner) = match overlapped && signalled.is_none() {
            true => (
                vec![at(z0, z0 + d)?, at(z1 - d, z1)?],
                Some(at(z0 + d, z1 - d)?),
            ),
            false => (vec![at(z0, z1)?], None),
        };
        Ok(Self {
            inner,
            ends,
            signalled,
            transport,
            overlap: exchange.overlap,
        })
    }

    /// `g` from `f` in a pass of `steps` steps (at most the halos' depth), its halos exchanged
    /// through `comm` (`index` maps the plan's local points), in the framework's order
    /// ([`overlap::step`]).
    #[allow(clippy::too_many_arguments)]
    fn step<C: Communicator, I: Fn([usize; 3]) -> usize>(
        &mut self,
        comm: &C,
        plan: &[Face<3>],
        index: &I,
        problem: &Problem,
        f: &mut E::Field<T>,
        g: &mut E::Field<T>,
        steps: u32,
    ) -> Result<()> {
        let overlap = self.overlap;
        let mut parts = StepParts {
            o: self,
            comm,
            plan,
            index,
            problem,
            f,
            g,
            steps,
        };
        Ok(overlap::step(&mut parts, overlap)?)
    }
}

/// One decomposed step (a pass of `steps`) as the framework's schedule sees it: `f`'s halos and
/// `g`'s, the planes that read them and those that do not.
struct StepParts<'s, 'e, E: LoopEngine, T: Element, C, I> {
    o: &'s mut Overlap<'e, E, T>,
    comm: &'s C,
    plan: &'s [Face<3>],
    index: &'s I,
    problem: &'s Problem,
    f: &'s mut E::Field<T>,
    g: &'s mut E::Field<T>,
    steps: u32,
}

/// `steps` steps of `problem`'s update from `f` into `g` over `lp`: a pass, or a single step.
fn advance<E: LoopEngine, T: Element + DiffusionReal>(
    lp: &mut Loop3D<'_, E>,
    problem: &Problem,
    f: &E::Field<T>,
    g: &mut E::Field<T>,
    steps: u32,
) -> lattice_gpu_host::Result<()> {
    match steps {
        1 => lp.run(&problem.update(f, g)),
        t => lp.run_temporal(&problem.update(f, g), t),
    }
}

impl<E: LoopEngine, T: Element + DiffusionReal, C: Communicator, I: Fn([usize; 3]) -> usize>
    OverlapStep for StepParts<'_, '_, E, T, C, I>
{
    type Error = lattice_gpu_host::Error;

    fn runs_beside(&self) -> bool {
        self.o.transport.runs_beside()
    }

    fn signals(&self) -> bool {
        // Whole passes only: a run's remainder runs single steps, which count nothing.
        self.o
            .signalled
            .as_ref()
            .is_some_and(|s| self.steps == s.depth)
    }

    fn start(&mut self, next: bool) -> lattice_gpu_host::Result<()> {
        let signals = self.signals();
        let field = if next { &*self.g } else { &*self.f };
        match &mut self.o.signalled {
            Some(s) if next && signals => {
                s.target = s.target.wrapping_add(s.per_pass);
                self.o
                    .transport
                    .start_when(field, s.counter.addr(), s.target)
            }
            _ => self.o.transport.start(field),
        }
    }

    fn finish(&mut self, next: bool) -> lattice_gpu_host::Result<()> {
        let field = if next { &mut *self.g } else { &mut *self.f };
        self.o
            .transport
            .finish(self.comm, self.plan, self.index, field)
    }

    fn boundary(&mut self, beside: bool) -> lattice_gpu_host::Result<()> {
        let (ends, transport) = (&mut self.o.ends, &self.o.transport);
        let (f, g, problem, steps) = (&*self.f, &mut *self.g, self.problem, self.steps);
        let mut run = || {
            ends.iter_mut()
                .try_for_each(|e| advance(e, problem, f, g, steps))
        };
        match beside {
            true => transport.beside(run),
            false => run(),
        }
    }

    fn interior(&mut self) -> lattice_gpu_host::Result<()> {
        let signals = self.signals();
        match (&mut self.o.signalled, &mut self.o.inner) {
            (Some(s), _) if signals => {
                let update = self.problem.update(&*self.f, &mut *self.g);
                s.pass.run_temporal(&update, self.steps)
            }
            (_, Some(inner)) => advance(inner, self.problem, &*self.f, &mut *self.g, self.steps),
            _ => Ok(()),
        }
    }
}

/// [`simulate`] decomposed along z over the ranks of `comm`: each rank runs its slab of planes on its
/// `engine` and exchanges one plane with each neighbour before every step, as `exchange` says; rank 0
/// gathers the final field (the others return an empty one). The result is bit-identical to one rank's:
/// every point sees the same values. Every rank calls `initial` (the whole field) and keeps its slab.
pub fn simulate_on<'e, E: LoopEngine, T: Element + DiffusionReal, C: Communicator>(
    engine: &'e E,
    comm: &C,
    exchange: Exchange<'e>,
    problem: &Problem,
    initial: impl FnOnce() -> Result<Vec<T>>,
    steps: usize,
    progress: impl FnMut(usize),
) -> Result<RunOutput<T>> {
    let schedule = Schedule {
        first: 0,
        last: steps,
        checkpoints: None,
        temporal: Temporal::Auto,
    };
    simulate_scheduled(
        engine, comm, exchange, problem, initial, &schedule, progress,
    )
}

/// The steps a run does and the checkpoints it writes.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// The step it starts from: 0, or a resumed checkpoint's step (the initial field is then that
    /// checkpoint's).
    pub first: usize,
    /// The step it ends at.
    pub last: usize,
    /// Where and when it writes checkpoints; `None`: never, not even when a signal stops it.
    pub checkpoints: Option<Checkpoints>,
    /// Steps per temporally blocked pass: the same bits either way.
    pub temporal: Temporal,
}

/// Steps per temporally blocked pass ([`Loop3D::run_temporal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Temporal {
    /// As the engine finds fastest: the auto-tuner's choice ([`Loop3D::run_steps`]), the CPU
    /// engine's passes where the fields leave its cache ([`Loop3D::untuned_steps`]), single steps
    /// with a fixed launch. On several ranks (or `cut`) chosen once, before the run, on rank 0's
    /// slab ([`split_steps`]): the halos are as deep as a pass, fixed at set-up.
    Auto,
    /// This many (1: single steps); a split run exchanges halos as deep once a pass
    /// ([`halo_depth`]).
    Steps(u32),
}

impl std::str::FromStr for Temporal {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            n => n.parse().map(Self::Steps).map_err(|_| {
                format!("{s:?} is neither auto nor a number of steps per pass (1 to {MAX_TEMPORAL_STEPS})")
            }),
        }
    }
}

/// Where and how often a run writes checkpoints (rank 0, from a gathered host copy, in the background).
#[derive(Clone, Debug)]
pub struct Checkpoints {
    /// The checkpoint file.
    pub path: std::path::PathBuf,
    /// How often; a signal writes one whatever this says.
    pub every: Every,
    /// Options shown in the messages (e.g. `--resume out/checkpoint`).
    pub resume_hint: String,
}

/// How often checkpoints are written.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Every {
    /// Only when a signal stops the run.
    Signal,
    /// Every this many steps (counted from step 0, so a resumed run writes at the same steps).
    Steps(usize),
    /// At the first health check after this many seconds since the last (rank 0's clock).
    Seconds(f64),
}

/// The program's `--checkpoint-every` as the run takes it (here, not in the program: neither type is the
/// program's own).
#[cfg(feature = "cli")]
impl From<lattice_gpu_cli::Every> for Every {
    fn from(e: lattice_gpu_cli::Every) -> Self {
        match e {
            lattice_gpu_cli::Every::Steps(n) => Every::Steps(n),
            lattice_gpu_cli::Every::Seconds(t) => Every::Seconds(t),
        }
    }
}

/// The parameters a resumed diffusion run must share with the run that wrote the checkpoint.
pub fn checkpoint_params<T: Element>(problem: &Problem) -> Vec<(String, String)> {
    vec![
        ("size".into(), fmt_dims(&problem.size)),
        ("precision".into(), T::NAME.into()),
        ("kappa".into(), problem.kappa.to_string()),
        ("dt".into(), problem.dt.to_string()),
    ]
}

/// The checkpoint of a diffusion run at `step`, from the gathered interior field.
pub fn checkpoint<T: Element>(problem: &Problem, step: usize, field: &[T]) -> Checkpoint {
    let mut ck = Checkpoint::new("diffusion", step as u64);
    ck.params = checkpoint_params::<T>(problem);
    ck.array("field", field)
}

/// The step and the interior field of a diffusion checkpoint at `path`, after checking that it is one
/// of this problem.
pub fn resume<T: Element>(problem: &Problem, path: &std::path::Path) -> Result<(usize, Vec<T>)> {
    let mut ck = Checkpoint::read(path)?;
    ck.check_resume("diffusion", &checkpoint_params::<T>(problem), path)?;
    let field = ck.take::<T>("field", path)?;
    if field.len() as u64 != problem.points() {
        return Err(lattice_gpu_formats::IoError::Checkpoint {
            path: path.to_path_buf(),
            problem: format!(
                "its field holds {} values, and the grid {} has {}",
                field.len(),
                fmt_dims(&problem.size),
                problem.points()
            ),
        }
        .into());
    }
    Ok((ck.step as usize, field))
}

/// The steps per pass of a split run of [`Temporal::Auto`] (over `comm`'s ranks, or cut on one),
/// with the auto-tuner's choice where it made one: what the engine runs on rank 0's slab as one
/// domain ([`Loop3D::run_steps`] on scratch fields, tuned before the run and cached like any
/// launch; an engine that does not tune: [`Loop3D::untuned_steps`]), at most the thinnest slab's
/// planes; every rank takes rank 0's. The slab alone weighs what differs between the steps per pass
/// on one GPU; the exchange, once a pass and hidden behind its interior, does not decide it.
pub fn split_steps<E: LoopEngine, T: Element + DiffusionReal, C: Communicator>(
    engine: &E,
    comm: &C,
    problem: &Problem,
) -> Result<(u32, Option<StepsChoice>)> {
    let split = Decomposition::new(problem.size, [1, 1, comm.size()], [1; 3], [false; 3])?;
    let thinnest = (0..comm.size())
        .map(|r| split.owned(r).size[2])
        .min()
        .unwrap_or(1);
    let mine = match comm.rank() {
        0 => Some(slab_steps::<E, T, C>(
            engine,
            comm,
            problem,
            split.owned(0).size,
        )),
        _ => None,
    };
    // 0: rank 0 could not choose (its error is its own; the others say where to look).
    let mut word = [match &mine {
        Some(Ok((t, _))) => (*t as usize).clamp(1, thinnest) as u32,
        _ => 0,
    }];
    comm.broadcast(&mut word)?;
    match (mine, word[0]) {
        (Some(Err(e)), _) => Err(e),
        (Some(Ok((_, choice))), t) => Ok((t, choice.filter(|c| c.steps == t))),
        (None, 0) => Err(DiffusionError::Invalid(
            "rank 0 could not choose the steps per pass of --temporal auto (its message says \
             why); give them with --temporal"
                .into(),
        )),
        (None, t) => Ok((t, None)),
    }
}

/// What the engine runs on a domain of `slab` interior points ([`split_steps`]): rank 0's choice.
fn slab_steps<E: LoopEngine, T: Element + DiffusionReal, C: Communicator>(
    engine: &E,
    comm: &C,
    problem: &Problem,
    slab: [usize; 3],
) -> Result<(u32, Option<StepsChoice>)> {
    let shape = Problem::shape_of::<T>(slab, 1)?;
    let mut lp = Loop3D::new(engine, shape.interior_range())?;
    if !engine.tunes() {
        return Ok((lp.untuned_steps::<Diffusion3d<T>>(), None));
    }
    // The run's own fields come after these are freed: at most as much memory as the run holds.
    let on_gpu = engine.device().is_some();
    let need = problem.footprint::<T>(comm.size(), comm.ranks_here(), on_gpu, 1)?;
    need.check(engine.device().map(|g| &**g))?;
    let (mut f, mut g) = (engine.alloc::<T>(shape)?, engine.alloc::<T>(shape)?);
    // Far more steps than the tuner times (its candidates, a few runs each).
    for _ in 0..1_000_000 {
        if let Some(c) = E::steps_choice(lp.info()) {
            return Ok((c.steps, Some(c.clone())));
        }
        lp.run_steps(&problem.update(&f, &mut g), MAX_COLUMN_STEPS as u32)?;
        std::mem::swap(&mut f, &mut g);
    }
    Err(DiffusionError::Invalid(
        "the auto-tuner chose no steps per pass in a million steps: give them with --temporal"
            .into(),
    ))
}

/// [`simulate_on`] over the steps of `schedule`, writing its checkpoints: at the steps or times it
/// asks for, and when a signal stops the run (then the error is [`Error::Interrupted`] after the
/// checkpoint is on disk).
///
/// [`Error::Interrupted`]: lattice_gpu_host::Error::Interrupted
pub fn simulate_scheduled<'e, E: LoopEngine, T: Element + DiffusionReal, C: Communicator>(
    engine: &'e E,
    comm: &C,
    exchange: Exchange<'e>,
    problem: &Problem,
    initial: impl FnOnce() -> Result<Vec<T>>,
    schedule: &Schedule,
    mut progress: impl FnMut(usize),
) -> Result<RunOutput<T>> {
    let (first_step, steps) = (schedule.first, schedule.last);
    check_temporal(schedule.temporal)?;
    let rank = comm.rank();
    // A split run's halos are as deep as its passes, fixed at set-up: `auto` chooses first.
    let (set_up, chosen) = match schedule.temporal {
        Temporal::Auto if comm.size() > 1 || exchange.cut => {
            let (t, choice) = split_steps::<E, T, C>(engine, comm, problem)?;
            (Temporal::Steps(t), choice)
        }
        t => (t, None),
    };
    let depth = halo_depth(set_up, comm.size(), exchange.cut);
    let split = Decomposition::new(problem.size, [1, 1, comm.size()], [1, 1, depth], [false; 3])
        .map_err(|e| match depth {
            1 => DiffusionError::from(e),
            _ => DiffusionError::Invalid(format!(
                "{e}, or give fewer steps per pass (--temporal): a pass of {depth} steps \
                 exchanges halos {depth} planes deep"
            )),
        })?;
    let own = split.owned(rank);
    // Where each rank's slab starts in z, to name the global point of a value found on any rank.
    let z_begin: Vec<usize> = (0..comm.size()).map(|r| split.owned(r).begin[2]).collect();
    let shape = Problem::shape_of::<T>(own.size, depth)?;
    let on_gpu = engine.device().is_some();
    let need = problem.footprint::<T>(comm.size(), comm.ranks_here(), on_gpu, depth)?;
    need.check(engine.device().map(|g| &**g))?;
    let global = initial()?;
    let plane = problem.size[0] * problem.size[1];
    // A NaN or infinity would run every step and be written out as the result.
    if let Some(i) = global.iter().position(|v| !v.to_f64().is_finite()) {
        let nx = problem.size[0];
        return Err(DiffusionError::Invalid(format!(
            "the initial field is {} at point (x, y, z) = ({}, {}, {}); give finite values",
            global[i].to_f64(),
            i % nx,
            i % plane / nx,
            i / plane
        )));
    }
    let slab = &global[plane * own.begin[2]..plane * (own.begin[2] + own.size[2])];
    let initial = shape.embed(slab, T::ZERO)?;
    drop(global);
    let mut f = engine.alloc::<T>(shape)?;
    let mut g = engine.alloc::<T>(shape)?;
    f.upload(&initial)?;
    // The margins of both buffers are the walls; copying the initial field into both keeps them equal.
    g.upload(&initial)?;
    let plan = split.halo_plan(rank);
    let first = shape.first();
    // Local point p of the plan (margins at 0) in the array (which may pad rows before the margin).
    let index = |p: [usize; 3]| {
        shape.index(
            first[0] + p[0] - 1,
            first[1] + p[1] - 1,
            first[2] + p[2] - depth,
        )
    };
    let mut step = Loop3D::new(engine, shape.interior_range())?;
    let mut split = if plan.is_empty() && !exchange.cut {
        None
    } else {
        Some(Overlap::new(engine, shape, &plan, &initial, exchange)?)
    };
    drop(initial);
    // Steps per pass; `None` while the auto-tuner is still choosing.
    let mut temporal = match set_up {
        Temporal::Steps(t) => Some(t),
        // What an engine that does not tune runs (the CPU engine's passes), or the tuner's choice.
        Temporal::Auto if !engine.tunes() => Some(step.untuned_steps::<Diffusion3d<T>>()),
        Temporal::Auto => None,
    };
    // Local array index to the global interior point (x, y, z), counted from 1, on rank `r`.
    let cell = |r: usize, i: u64| {
        let [sx, sy, _] = shape.size();
        let i = i as usize;
        let p = [i % sx, i / sx % sy, i / (sx * sy)];
        let begin = z_begin[r];
        format!(
            "point (x, y, z) = ({}, {}, {})",
            p[0] as i64 - first[0] as i64 + 1,
            p[1] as i64 - first[1] as i64 + 1,
            p[2] as i64 - first[2] as i64 + 1 + begin as i64
        )
    };
    // Every rank checks its field, and all decide together: go on, or stop for NaN or a signal.
    let verdict = |f: &E::Field<T>| -> Result<Verdict> {
        let found = match engine.first_non_finite(f)? {
            Some(i) => Some((i as u64, f.download_span(i, 1)?[0].to_f64())),
            None => None,
        };
        Ok(Verdict::agree(comm, found)?)
    };
    let end = |v: Verdict, s: usize| -> Result<()> {
        Ok(v.into_result(
            s as u64,
            "the temperature",
            |nf| cell(nf.rank, nf.index),
            "under its stability limit the scheme keeps every value between the initial field's \
             extremes (a maximum principle), so this is a fault of the GPU, the memory or \
             lattice-gpu: please report it with the command line",
        )?)
    };
    let plan_ck = schedule.checkpoints.as_ref();
    let mut saver = plan_ck.filter(|_| rank == 0).map(|c| Saver::new(&c.path));
    let mut written = Vec::new();
    // Gathers the field on rank 0, which starts writing its checkpoint (collective).
    // The previous checkpoint's record comes back, once that write has finished: it is on disk
    // before this one is copied, so one copy of the field is held at a time (as the estimate counts).
    let save = |f: &E::Field<T>, s: usize, saver: &mut Option<Saver>| -> Result<Option<Written>> {
        let before = match saver {
            Some(sv) => sv.wait()?,
            None => None,
        };
        let global = comm.gather(&shape.extract(&f.download()?))?;
        Ok(match saver {
            Some(sv) => before.or(sv.save(checkpoint(problem, s, &global))?),
            None => None,
        })
    };
    let every_steps = match plan_ck.map(|c| c.every) {
        Some(Every::Steps(n)) => Some(n.max(1)),
        _ => None,
    };
    let every_seconds = match plan_ck.map(|c| c.every) {
        Some(Every::Seconds(t)) => Some(t),
        _ => None,
    };
    let check_every = check_interval(problem.points(), steps as u64, engine.device().is_some());
    // Even, so that a recorded batch of steps leaves the fields where it found them; and a divisor of
    // the checkpoint interval, so that the batches stop at every checkpoint's step.
    // Whole passes between reports (a pass runs only where it fits before the next), an even number
    // of them: auto rounds for every pass it may choose.
    let whole = match temporal {
        Some(t) if t > 1 => lcm(2, t as usize),
        Some(_) => 1,
        None => (2..=MAX_COLUMN_STEPS).fold(2, lcm),
    };
    let mut report_every = match (steps / 100).clamp(1, check_every as usize) {
        1 if whole == 1 => 1,
        n => n.next_multiple_of(whole.max(2)),
    };
    if let Some(n) = every_steps {
        report_every = (1..=report_every.min(n))
            .rev()
            .find(|d| n % d == 0 && (d % 2 == 0 || *d == 1))
            .unwrap_or(1);
    }
    // Once the launch is final (tuned, or never tuned), whole batches between reports are replayed
    // from a recorded graph: the host no longer queues each step and the GPU's gaps between kernels
    // shrink (3 to 5% of a step at 256^3). `None` after a try: the engine cannot record.
    let mut batch: Option<Option<E::Recording>> = None;
    // One exchange before the clock starts: it only writes what the first step's exchange writes
    // again, and it takes the transports' connection set-up (NCCL connects peers on first use) out of
    // the timed steps.
    if let Some(o) = &mut split {
        o.transport.start(&f)?;
        o.transport.finish(comm, &plan, &index, &mut f)?;
    }
    engine.synchronize()?;
    let start = Instant::now();
    let mut last_save = Instant::now();
    let mut s = first_step;
    let mut checked = first_step;
    // Steps run in temporally blocked passes.
    let (mut blocked, mut pass_steps) = (0, 1);
    while s < steps {
        let settled = !engine.tunes() || (E::tuning(step.info()).is_some() && temporal.is_some());
        if split.is_none()
            && report_every > 1
            && settled
            && s % report_every == 0
            && batch.is_none()
        {
            let temporal = temporal.unwrap_or(1);
            batch = match swaps(report_every, temporal) % 2 {
                // A batch that leaves the fields swapped cannot be replayed: steps as they come.
                1 => Some(None),
                _ => Some(engine.record(&mut || {
                    queue_steps(&mut step, &mut f, &mut g, problem, report_every, temporal)
                })?),
            };
        }
        // A pass of `temporal` steps where it fits before the next report, else one step (a split
        // run's halos, as deep as a pass, serve a step too).
        let room = (report_every - s % report_every).min(steps - s);
        let fitting = |t: u32| if room >= t as usize { t } else { 1 };
        // `Some(t)`: a pass or step of `t` steps ran (not a replay) into `g`.
        let ran = match (&batch, &mut split) {
            (Some(Some(graph)), None) if s % report_every == 0 && s + report_every <= steps => {
                engine.replay(graph)?;
                s += report_every;
                let t = temporal.unwrap_or(1) as usize;
                blocked += if t > 1 { report_every / t * t } else { 0 };
                pass_steps = pass_steps.max(t as u32);
                None
            }
            (_, Some(o)) => {
                let t = fitting(temporal.unwrap_or(1));
                o.step(comm, &plan, &index, problem, &mut f, &mut g, t)?;
                Some(t)
            }
            (_, None) => Some(match temporal {
                // What the tuner runs while it chooses.
                None => {
                    let room = room.min(MAX_TEMPORAL_STEPS as usize) as u32;
                    let t = step.run_steps(&problem.update(&f, &mut g), room)?;
                    temporal = E::steps_choice(step.info()).map(|c| c.steps);
                    t
                }
                Some(t) => {
                    let t = fitting(t);
                    advance(&mut step, problem, &f, &mut g, t)?;
                    t
                }
            }),
        };
        if let Some(t) = ran {
            s += t as usize;
            blocked += if t > 1 { t as usize } else { 0 };
            pass_steps = pass_steps.max(t);
            std::mem::swap(&mut f, &mut g);
        }
        if s % report_every != 0 {
            continue;
        }
        engine.synchronize()?;
        progress(s);
        let step_due = every_steps.is_some_and(|n| s % n == 0);
        if (s - checked) as u64 >= check_every || step_due {
            checked = s;
            // A signal at the last step stops nothing: the run's results are complete.
            let v = match verdict(&f)? {
                Verdict::Stop(_) if s == steps => Verdict::Healthy,
                v => v,
            };
            let time_due = match every_seconds {
                // Rank 0's clock decides for all.
                Some(t) => {
                    let mine = rank == 0 && last_save.elapsed().as_secs_f64() >= t;
                    comm.sum(f64::from(u8::from(mine)))? > 0.0
                }
                None => false,
            };
            match v {
                Verdict::Healthy if step_due || time_due => {
                    written.extend(save(&f, s, &mut saver)?);
                    last_save = Instant::now();
                }
                Verdict::Stop(_) if plan_ck.is_some() => {
                    written.extend(save(&f, s, &mut saver)?);
                    if let (Some(sv), Some(c)) = (&mut saver, plan_ck) {
                        written.extend(sv.wait()?);
                        eprintln!(
                            "checkpoint of step {s} written to {}; continue the run with {}",
                            sv.path().display(),
                            c.resume_hint
                        );
                    }
                }
                _ => {}
            }
            end(v, s)?;
        }
    }
    engine.synchronize()?;
    let seconds = start.elapsed().as_secs_f64();
    // Nothing non-finite is handed on to be written.
    if checked < steps {
        match verdict(&f)? {
            Verdict::Stop(_) => {}
            v => end(v, steps)?,
        }
    }
    if let Some(sv) = &mut saver {
        written.extend(sv.wait()?);
    }
    let checkpoint_wait = saver.as_ref().map_or(0.0, Saver::waited);
    // A decomposed run reports the interior's tuning (its largest loop).
    let site = match &split {
        Some(o) => match &o.signalled {
            Some(s) => s.pass.info(),
            None => o.inner.as_ref().unwrap_or(&o.ends[0]).info(),
        },
        None => step.info(),
    };
    let (tuning, tuning_unfinished) = (E::tuning(site).cloned(), E::tuning_progress(site));
    let steps_choice = chosen.or_else(|| E::steps_choice(site).cloned());
    let local = shape.extract(&f.download()?);
    // The fields go before the gather, which holds the whole grid on rank 0.
    drop((f, g, split));
    Ok(RunOutput {
        field: comm.gather(&local)?,
        seconds,
        tuning,
        tuning_unfinished,
        steps_choice,
        blocked_steps: blocked,
        pass_steps,
        halo_depth: depth,
        checkpoints: written,
        checkpoint_wait,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stability_limit_is_one_sixth_per_axis_on_cubic_grids() {
        let h = 1.0 / 33.0;
        let ok = Problem::new([32; 3], 1.0, Some(h * h / 6.0 * 0.999)).unwrap();
        assert!(ok.stability_number() < 0.5);
        let e = Problem::new([32; 3], 1.0, Some(h * h / 6.0 * 1.01))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unstable") && e.contains("1/6") && e.contains("dt <="),
            "{e}"
        );
    }

    #[test]
    fn discrete_decay_approaches_analytic_as_h_shrinks() {
        // Same end time on both grids, dt ~ h^2: both the space and the time error fall as h^2.
        let err = |n: usize| {
            let h = 1.0 / (n as f64 + 1.0);
            let steps = (0.01 / (0.1 * h * h / 0.1)).ceil() as usize;
            let p = Problem::new([n; 3], 0.1, Some(0.01 / steps as f64)).unwrap();
            (p.discrete_decay(steps) / p.analytic_decay(steps) - 1.0).abs()
        };
        let (e16, e32) = (err(16), err(32));
        // (33/17)^2 = 3.8
        assert!(e32 < e16 / 3.5 && e32 > e16 / 4.2, "{e16} {e32}");
    }

    #[test]
    fn steps_cut_on_one_rank_equal_the_whole_grids() {
        let problem = Problem::new([9, 7, 6], 0.2, None).unwrap();
        let input: Vec<f64> = (0..problem.points())
            .map(|i| (i as f64 * 0.7).sin())
            .collect();
        let run = |cut: Option<bool>| {
            let exchange = Exchange {
                halos: Halos::Host,
                overlap: cut.unwrap_or(true),
                cut: cut.is_some(),
            };
            let e = &lattice_gpu_host::HostLoopEngine;
            let out = simulate_on(
                e,
                &Solo,
                exchange,
                &problem,
                || Ok(input.clone()),
                9,
                |_| {},
            );
            out.unwrap()
                .field
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>()
        };
        let whole = run(None);
        assert_ne!(whole, input.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        assert_eq!(run(Some(true)), whole);
        assert_eq!(run(Some(false)), whole);
    }
}
