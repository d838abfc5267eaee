//! Conjugate gradients in f64, preconditioned by a multigrid V-cycle in f32 (mixed) or f64, with every
//! vector where the engine keeps its fields (GPU memory on a GPU): only the dot products come back to the
//! host. The report's point: the f32 preconditioner costs half the bytes and needs the same iterations,
//! because CG in f64 corrects what the preconditioner leaves.
//!
//! [`Solver`] builds everything once (the operator, the multigrid levels, the CG vectors) and then
//! solves as often as asked, so the set-up, the tuning and the solve can be timed apart; [`solve`] does
//! all three in one call. CG itself is the framework's ([`lattice_gpu_host::solvers::cg`]): this crate gives it
//! the operator and the V-cycle.

use lattice_gpu_host::comm::Solo;
use lattice_gpu_host::health::{self, NonFinite, Verdict};
use lattice_gpu_host::solvers::cg::{Cg, CgProblem, CgReport};
use lattice_gpu_host::{
    Error as HostError, Field, HostLoopEngine, Loop3D, LoopEngine, Shape, TuningReport,
};
use lattice_gpu_kernels::poisson::Apply;
use rayon::prelude::*;

use crate::memory::{self, Memory};
use crate::multigrid::{
    self, check_cycle, with_operator, Cycle, Layout, LevelTraffic, Multigrid, OperatorView,
    Preconditioner, StencilFields, SweepBytes,
};
use crate::problem::{Problem, Stencil};
use crate::{Error, Result};

/// The f64 operator `A` of a problem on an engine.
pub struct Operator<'e, E: LoopEngine> {
    site: Loop3D<'e, E>,
    shape: Shape,
    a: StencilFields<E::Field<f64>>,
}

impl<'e, E: LoopEngine> Operator<'e, E> {
    /// The problem's operator (checked) on `engine`, its coefficients in `layout`.
    pub fn new(engine: &'e E, problem: &Problem, layout: Layout) -> Result<Self> {
        problem.check()?;
        Self::from_stencil(engine, problem.n, &problem.stencil(), layout)
    }

    /// The operator of stencil `s` on `n` cells.
    fn from_stencil(engine: &'e E, n: [usize; 3], s: &Stencil, layout: Layout) -> Result<Self> {
        let shape = Shape::new_3d(n, 1)?;
        Ok(Self {
            site: Loop3D::new(engine, shape.interior_range())?,
            shape,
            a: StencilFields::new(engine, shape, s, layout)?,
        })
    }

    /// The fields' shape (margin 1).
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// `y = A x` on the engine, and `x.y` into value `slot` of `sums` (summed in the same loop).
    pub fn apply(
        &mut self,
        x: &E::Field<f64>,
        y: &mut E::Field<f64>,
        sums: &mut E::Field<f64>,
        slot: usize,
    ) -> Result<()> {
        let (x, y) = (x.view(), y.view_mut());
        with_operator!(self.a.view(), a => self.site.run_sum(&Apply { a, x, y }, sums, slot))?;
        Ok(())
    }
}

/// What a solve did.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Iterations run.
    pub iterations: usize,
    /// `|r| / |b|` after each iteration, starting with 1.
    pub history: Vec<f64>,
    /// Cells and seconds of each multigrid level over the whole solve (zero unless timed).
    pub levels: Vec<([usize; 3], f64)>,
    /// Preconditioner applications (V-cycles).
    pub vcycles: usize,
    /// Wall-clock seconds of the solve, the engine's work finished (timed levels' waits included).
    pub seconds: f64,
}

/// The precision of the multigrid preconditioner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// V-cycle in f32 (mixed precision).
    F32,
    /// V-cycle in f64.
    F64,
}

/// Solves `problem` by CG in f64 from `x = 0` to `|r| / |b| < tol`, preconditioned with `cycle` in
/// `precision`, on `engine`, reporting each iteration to `progress`; with `timed`, the report has the
/// time spent on each multigrid level. Fails with the residual history when `max_iter` runs out or the
/// residual has not fallen for 50 iterations. One [`Solver`], built, solved once and dropped.
#[allow(clippy::too_many_arguments)]
pub fn solve<E: LoopEngine>(
    engine: &E,
    problem: &Problem,
    cycle: Cycle,
    precision: Precision,
    tol: f64,
    max_iter: usize,
    timed: bool,
    progress: &mut dyn FnMut(usize, f64),
) -> Result<(Vec<f64>, Report)> {
    check_stop(tol, max_iter)?;
    let mut solver = Solver::new(engine, problem, cycle, precision)?;
    let report = solver.solve(tol, max_iter, timed, progress)?;
    Ok((solver.solution()?, report))
}

/// Fails, naming both limits, unless `tol` lies in (0, 1) and `max_iter` is at least 1.
pub fn check_stop(tol: f64, max_iter: usize) -> Result<()> {
    if tol.is_nan() || tol <= 0.0 || tol >= 1.0 || max_iter == 0 {
        return Err(Error::Invalid(format!(
            "tolerance {tol} must be in (0, 1) and the iteration limit ({max_iter}) at least 1"
        )));
    }
    Ok(())
}

/// The multigrid in either precision.
enum Mg<'e, E: LoopEngine> {
    F32(Multigrid<'e, E, f32>),
    F64(Multigrid<'e, E, f64>),
}

/// Runs `$body` with `$m` bound to the multigrid of either precision.
macro_rules! with_mg {
    ($mg:expr, $m:ident => $body:expr) => {
        match $mg {
            Mg::F32($m) => $body,
            Mg::F64($m) => $body,
        }
    };
}

/// The operator and the V-cycle of a solve, as CG sees them, and the solve's checks: CG calls the
/// preconditioner once before its first iteration and once after each, so those calls are where a solve
/// stops for a signal, and where its residual is scanned for NaN and infinity every `every` iterations.
struct Parts<'a, 'e, E: LoopEngine> {
    engine: &'e E,
    op: &'a mut Operator<'e, E>,
    mg: &'a mut Mg<'e, E>,
    /// Preconditioner applications so far: the iterations done before the next.
    applied: u64,
    /// Iterations between scans of the residual; 0: none (tuning).
    every: u64,
    /// What to change should a value turn non-finite.
    fix: &'static str,
}

impl<'a, 'e, E: LoopEngine> Parts<'a, 'e, E> {
    fn new(
        engine: &'e E,
        op: &'a mut Operator<'e, E>,
        mg: &'a mut Mg<'e, E>,
        every: u64,
        fix: &'static str,
    ) -> Self {
        Self {
            engine,
            op,
            mg,
            applied: 0,
            every,
            fix,
        }
    }

    /// The check after `done` iterations: stops for a signal, and, where `scan` gives a field, for a
    /// NaN or infinity in it (named `what`).
    fn check(&self, done: u64, scan: Option<(&E::Field<f64>, &str)>) -> Result<()> {
        let found = match scan {
            Some((f, _)) => first_non_finite(self.engine, f)?,
            None => None,
        };
        let what = scan.map_or("", |(_, what)| what);
        let shape = self.op.shape();
        Verdict::agree(&Solo, found)?.into_result(
            done,
            what,
            |nf| format!("{} in CG iteration {done}", cell(shape, nf)),
            self.fix,
        )?;
        Ok(())
    }
}

/// Stops with [`Error::Interrupted`](lattice_gpu_host::Error::Interrupted) after `step` CG iterations
/// where a signal asked the run to stop ([`interrupt`](lattice_gpu_host::interrupt)): the check of the
/// loops outside CG's iterations (tuning) and of a caller between its phases. A solve checks on its own
/// before every preconditioner application.
pub fn stop_for_signal(step: u64) -> Result<()> {
    Verdict::agree(&Solo, None)?.into_result(step, "", |_| String::new(), "")?;
    Ok(())
}

/// The index and value of the first NaN or infinity in `f`, if there is one.
fn first_non_finite<E: LoopEngine>(engine: &E, f: &E::Field<f64>) -> Result<Option<(u64, f64)>> {
    Ok(match engine.first_non_finite(f)? {
        Some(i) => Some((i as u64, f.download_span(i, 1)?[0])),
        None => None,
    })
}

/// The cell of array index `nf.index` of a field of `shape` (margin 1), x fastest from 0, as
/// [`Problem::check`] names cells.
fn cell(shape: Shape, nf: &NonFinite) -> String {
    let [sx, sy, _] = shape.size();
    let i = nf.index as usize;
    let p = [i % sx, i / sx % sy, i / (sx * sy)];
    let first = shape.first();
    let [nx, ny, nz] = shape.interior();
    match [0, 1, 2].map(|a| p[a].checked_sub(first[a])) {
        [Some(x), Some(y), Some(z)] if x < nx && y < ny && z < nz => {
            format!("cell (x, y, z) = ({x}, {y}, {z})")
        }
        _ => format!("array index {i} (a margin, outside the cells)"),
    }
}

impl<E: LoopEngine> CgProblem<E> for Parts<'_, '_, E> {
    type Error = Error;

    fn apply(
        &mut self,
        x: &E::Field<f64>,
        y: &mut E::Field<f64>,
        sums: &mut E::Field<f64>,
        slot: usize,
    ) -> Result<()> {
        // Tuning runs the operator alone, many times: a signal stops it here.
        if self.every == 0 {
            stop_for_signal(0)?;
        }
        self.op.apply(x, y, sums, slot)
    }

    fn precondition(
        &mut self,
        r: &E::Field<f64>,
        z: &mut E::Field<f64>,
        sums: &mut E::Field<f64>,
        slot: usize,
    ) -> Result<()> {
        let done = self.applied;
        self.applied += 1;
        let due = self.every > 0 && done > 0 && done.is_multiple_of(self.every);
        self.check(done, due.then_some((r, "the residual r")))?;
        with_mg!(&mut *self.mg, m => m.apply(r, z, sums, slot))
    }
}

/// Fails, naming the cell and the fix, where the finest stencil of `problem` (`stencil`) is not finite
/// in f64 (a coefficient over a squared spacing that overflows), or, for a multigrid in f32, where a
/// coefficient or the right-hand side lies beyond f32's range or a diagonal below its smallest normal
/// value: the V-cycle would turn them into infinities or divide by zero.
fn check_range(problem: &Problem, stencil: &Stencil, precision: Precision) -> Result<()> {
    let [nx, ny, _] = problem.n;
    let at = |k: usize| format!("({}, {}, {})", k % nx, k / nx % ny, k / (nx * ny));
    let big = f64::from(f32::MAX);
    for (slot, values) in stencil.iter().enumerate() {
        let bad = |v: f64| match precision {
            _ if !v.is_finite() => true,
            Precision::F64 => false,
            Precision::F32 => v.abs() > big || (slot == 0 && v < f64::from(f32::MIN_POSITIVE)),
        };
        if let Some(k) = values.par_iter().position_first(|&v| bad(v)) {
            let v = values[k];
            return Err(Error::Invalid(match v.is_finite() {
                false => format!(
                    "the operator's coefficient c / h^2 overflows f64 at cell {}: scale the \
                     coefficients or the spacing towards 1",
                    at(k)
                ),
                true => format!(
                    "the operator's coefficient c / h^2 is {v:e} at cell {}, outside the range of \
                     f32 (1.2e-38 to 3.4e38) that the multigrid works in: use --precision f64, or \
                     scale the coefficients or the spacing towards 1",
                    at(k)
                ),
            }));
        }
    }
    if precision == Precision::F32 {
        if let Some(k) = problem.rhs.par_iter().position_first(|f| f.abs() > big) {
            return Err(Error::Invalid(format!(
                "the right-hand side is {:e} at cell {}, beyond the range of f32 (3.4e38) that the \
                 multigrid works in: use --precision f64, or scale f towards 1 (p scales with it)",
                problem.rhs[k],
                at(k)
            )));
        }
    }
    Ok(())
}

/// What to change when a solve in `precision` finds a NaN or infinity.
fn fix(precision: Precision) -> &'static str {
    match precision {
        Precision::F32 => {
            "the values outgrew the range of f32 (3.4e38), which the multigrid works in, or of f64: \
             use --precision f64, or scale the right-hand side and the coefficients towards 1 (p \
             scales with f / c)"
        }
        Precision::F64 => {
            "the values outgrew the range of f64 (1.8e308): scale the right-hand side and the \
             coefficients towards 1 (p scales with f / c)"
        }
    }
}

/// The memory a solver for `n` cells takes at its peak, host and engine apart (the engine's fields
/// in host memory unless `on_gpu`), replayed from [`Solver::new`], a solve (with
/// [`Solver::solve_async`] over at most `async_iterations`, whose scalars are kept per
/// iteration) and [`Solver::solution`]; with the caller's problem (its coefficient and
/// right-hand side) held throughout, and the solution it keeps afterwards. The set-up holds the
/// finest stencil beside the operator and the levels (and the coarse levels' stencils); the
/// solution comes on top of every field.
pub fn footprint(
    n: [usize; 3],
    cycle: &Cycle,
    precision: Precision,
    on_gpu: bool,
    async_iterations: Option<usize>,
) -> Result<Memory> {
    let mut m = Memory::new(on_gpu);
    let what = "the coefficient and right-hand side";
    m.host.take(memory::cells(n, 2, 8, what)?);
    let stencil = memory::cells(n, 7, 8, "the finest stencil")?;
    m.host.take(stencil);
    let mut kept = multigrid::stencil_fields(&mut m, n, 8, cycle.layout)?;
    let elem = match precision {
        Precision::F32 => 4,
        Precision::F64 => 8,
    };
    kept = kept.saturating_add(multigrid::footprint(&mut m, n, cycle, elem)?);
    m.host.give(stencil);
    // b, written through a buffer of one plane; then CG's other vectors.
    let vector = memory::fields(n, 1, 8, "a CG vector")?;
    let plane = memory::plane(n, 1, 8, "a plane of a CG vector")?;
    m.engine().take(vector);
    m.host.passing(plane);
    let vectors = memory::fields(
        n,
        Cg::<HostLoopEngine>::FIELDS as usize - 1,
        8,
        "CG's vectors",
    )?;
    m.engine().take(vectors);
    kept = kept.saturating_add(vector).saturating_add(vectors);
    if on_gpu {
        let scratch = reduction_scratch(n)?;
        m.gpu.take(scratch);
        kept = kept.saturating_add(scratch);
    }
    if let Some(iterations) = async_iterations {
        // Three scalars per iteration on the engine, downloaded whole at each read.
        let what = "CG's scalars";
        let count = [3, iterations.saturating_add(1)];
        let scalars = lattice_gpu_host::memory::bytes(&count, 8, what)?;
        m.engine().take(scalars);
        m.host.passing(scalars);
        kept = kept.saturating_add(scalars);
    }
    // The solution, fetched one plane at a time.
    m.host.take(memory::cells(n, 1, 8, "the solution")?);
    m.host.passing(plane);
    m.engine().give(kept);
    Ok(m)
}

/// A problem made ready to solve on an engine: the f64 operator, the multigrid hierarchy and CG's
/// vectors, all built and uploaded once by [`new`](Self::new); [`solve`](Self::solve) then runs CG alone
/// and may run as often as wanted, each time from `x = 0` with the same result.
pub struct Solver<'e, E: LoopEngine> {
    engine: &'e E,
    op: Operator<'e, E>,
    mg: Mg<'e, E>,
    cg: Cg<'e, E>,
    precision: Precision,
}

/// Bytes of the reductions' scratch on a GPU for `n` cells: a summing loop's partial per block (blocks
/// of 32 threads or more over the finest fields), and the smaller buffers it outgrew, which the engine
/// keeps.
fn reduction_scratch(n: [usize; 3]) -> Result<u64> {
    Ok(memory::fields(n, 1, 8, "the reductions' scratch")? / 16 + (1 << 20))
}

impl<'e, E: LoopEngine> Solver<'e, E> {
    /// Checks `problem` and `cycle` and builds the solver on `engine`: the finest stencil once (for the
    /// operator and the multigrid's finest level), the coarser levels, and every field on the engine.
    /// Refuses, before building anything large, a solver whose fields do not fit on the engine, and
    /// coefficients or a right-hand side that would overflow the multigrid's precision.
    pub fn new(
        engine: &'e E,
        problem: &Problem,
        cycle: Cycle,
        precision: Precision,
    ) -> Result<Self> {
        problem.check()?;
        check_cycle(problem.n, &cycle)?;
        let need = footprint(
            problem.n,
            &cycle,
            precision,
            engine.device().is_some(),
            None,
        )?;
        // The caller holds the problem already: what is available excludes it.
        let held = memory::cells(problem.n, 2, 8, "the coefficient and right-hand side")?;
        engine.check_fits(
            match need.on_gpu {
                true => need.gpu.peak(),
                false => need.host.peak().saturating_sub(held),
            },
            &format!(
                "the {}x{}x{} Poisson solver ({} multigrid levels in {precision:?})",
                problem.n[0], problem.n[1], problem.n[2], cycle.levels
            ),
        )?;
        // The set-up of a large grid takes seconds per phase: a signal stops it between them.
        let stencil = problem.stencil();
        check_range(problem, &stencil, precision)?;
        stop_for_signal(0)?;
        let op = Operator::from_stencil(engine, problem.n, &stencil, cycle.layout)?;
        stop_for_signal(0)?;
        let mg = match precision {
            Precision::F32 => Mg::F32(Multigrid::with_finest(engine, problem, &stencil, cycle)?),
            Precision::F64 => Mg::F64(Multigrid::with_finest(engine, problem, &stencil, cycle)?),
        };
        drop(stencil);
        stop_for_signal(0)?;
        let shape = op.shape();
        let mut b = engine.alloc::<f64>(shape)?;
        multigrid::upload_planes(&mut b, shape, &problem.rhs, |f| f)?;
        let cg = Cg::new(engine, b)?;
        if !cg.b_norm().is_finite() {
            return Err(Error::Invalid(format!(
                "the right-hand side's norm overflows f64 (its largest value is {:e}): scale f towards \
                 1 (p scales with it)",
                problem.rhs.iter().fold(0.0f64, |m, f| m.max(f.abs()))
            )));
        }
        Ok(Self {
            engine,
            op,
            mg,
            cg,
            precision,
        })
    }

    /// Runs every loop of a solve until the engine has tuned it (once each when the tune cache has it;
    /// nothing on an engine that does not tune), so that [`solve`](Self::solve) afterwards times tuned
    /// launches only. Changes only scratch state: the next solve gives the same result.
    pub fn tune(&mut self) -> Result<()> {
        if !self.engine.tunes() {
            return Ok(());
        }
        let mut parts = Parts::new(self.engine, &mut self.op, &mut self.mg, 0, "");
        self.cg
            .tune(&mut parts, |p| E::tuning(p.op.site.info()).is_some())?;
        let (r, z) = self.cg.scratch();
        with_mg!(&mut self.mg, m => m.tune(r, z))?;
        self.engine.synchronize()?;
        Ok(())
    }

    /// Solves by CG from `x = 0` to `|r| / |b| < tol`, reporting each iteration to `progress`; with
    /// `timed`, the report has the time spent on each multigrid level (the engine is waited for at every
    /// change of level, which slows the solve: time the solve untimed). Fails with the residual history
    /// when `max_iter` runs out or the residual has not fallen for 50 iterations. The iterate stays on the
    /// engine: [`solution`](Self::solution) fetches it.
    pub fn solve(
        &mut self,
        tol: f64,
        max_iter: usize,
        timed: bool,
        progress: &mut dyn FnMut(usize, f64),
    ) -> Result<Report> {
        check_stop(tol, max_iter)?;
        with_mg!(&mut self.mg, m => m.set_timed(timed));
        let every = self.scan_every(max_iter);
        let fix = fix(self.precision);
        let mut parts = Parts::new(self.engine, &mut self.op, &mut self.mg, every, fix);
        let r = self.cg.solve(&mut parts, tol, max_iter, progress);
        let r = self.diagnose(r)?;
        Ok(self.report(r))
    }

    /// Iterations between the scans of the residual for NaN and infinity in a solve of at most
    /// `max_iter` ([`health::check_interval`]). CG reads `|r|^2` after every iteration besides, which a
    /// NaN or infinity anywhere in `r` turns non-finite, and [`diagnose`](Self::diagnose) then finds
    /// the cell.
    fn scan_every(&self, max_iter: usize) -> u64 {
        let cells = self.op.shape().interior().iter().product::<usize>() as u64;
        let on_gpu = self.engine.device().is_some();
        health::check_interval(cells, max_iter as u64, on_gpu)
    }

    /// A solve's result, where CG stopped without converging because a value turned NaN or infinite
    /// (its residual, or `p.Ap`, which it names as diverged without a cell), made the divergence it
    /// is: the first non-finite value of the residual, the preconditioned residual or the iterate,
    /// with its cell and iteration.
    fn diagnose(&mut self, r: Result<CgReport>) -> Result<CgReport> {
        let (iterations, residual) = match &r {
            Err(Error::NotConverged {
                iterations,
                residual,
                ..
            }) => (*iterations as u64, *residual),
            _ => return r,
        };
        let (engine, shape, fix) = (self.engine, self.op.shape(), fix(self.precision));
        let mut found = None;
        let (cg_r, cg_z) = self.cg.scratch();
        for (f, what) in [
            (cg_r, "the residual r"),
            (&*cg_z, "the preconditioned residual z = M^-1 r"),
        ] {
            if found.is_none() {
                found = first_non_finite(engine, f)?.map(|v| (v, what));
            }
        }
        if found.is_none() {
            found = first_non_finite(engine, self.cg.x())?.map(|v| (v, "the iterate x"));
        }
        if let Some(((index, value), what)) = found {
            let nf = NonFinite {
                rank: 0,
                index,
                value,
            };
            return Err(HostError::Diverged {
                step: iterations,
                what: what.into(),
                value,
                at: format!("{} in CG iteration {iterations}", cell(shape, &nf)),
                fix: fix.into(),
            }
            .into());
        }
        if !residual.is_finite() {
            return Err(HostError::Diverged {
                step: iterations,
                what: "the relative residual |r| / |b|".into(),
                value: residual,
                at: format!("CG iteration {iterations} (every value finite, their squares not)"),
                fix: fix.into(),
            }
            .into());
        }
        r
    }

    /// [`solve`](Self::solve) with CG's scalars kept on the engine ([`Cg::solve_async`]): the host queues
    /// `check_every` iterations at a time and reads the residuals only then (on a GPU it never waits in
    /// between), with the iterations, the residuals and, on the CPU, the bits of `solve`.
    pub fn solve_async(
        &mut self,
        tol: f64,
        max_iter: usize,
        check_every: usize,
        progress: &mut dyn FnMut(usize, f64),
    ) -> Result<Report> {
        check_stop(tol, max_iter)?;
        if check_every == 0 {
            return Err(Error::Invalid(
                "the residual must be read every 1 or more iterations".into(),
            ));
        }
        let what = "CG's scalars kept on the engine";
        let scalars = lattice_gpu_host::memory::bytes(&[3, max_iter.saturating_add(1)], 8, what)?;
        // On the CPU the engine's array and each read's copy are both host memory.
        let copies = if self.engine.device().is_some() { 1 } else { 2 };
        self.engine.check_fits(
            scalars.saturating_mul(copies),
            &format!("{what} for --max-iter {max_iter} iterations"),
        )?;
        with_mg!(&mut self.mg, m => m.set_timed(false));
        let every = self.scan_every(max_iter);
        let fix = fix(self.precision);
        let mut parts = Parts::new(self.engine, &mut self.op, &mut self.mg, every, fix);
        let r = self
            .cg
            .solve_async(&mut parts, tol, max_iter, check_every, progress);
        let r = self.diagnose(r)?;
        Ok(self.report(r))
    }

    fn report(&self, r: CgReport) -> Report {
        Report {
            iterations: r.iterations,
            history: r.history,
            levels: with_mg!(&self.mg, m => m.level_times()),
            vcycles: r.preconditions,
            seconds: r.seconds,
        }
    }

    /// The last solve's iterate (interior cells, x fastest), fetched from the engine.
    pub fn solution(&self) -> Result<Vec<f64>> {
        multigrid::download_interior(self.cg.x(), self.op.shape())
    }

    /// `sweeps` smoothing sweeps of the multigrid's finest level, queued without waiting: for timing the
    /// smoother alone ([`Multigrid::smooth_finest`]).
    pub fn smooth_finest(&mut self, sweeps: usize) -> Result<()> {
        with_mg!(&mut self.mg, m => m.smooth_finest(sweeps))
    }

    /// The bytes a smoothing sweep of the finest level moves ([`Multigrid::sweep_bytes`]).
    pub fn sweep_bytes(&self) -> SweepBytes {
        with_mg!(&self.mg, m => m.sweep_bytes(0))
    }

    /// Each multigrid level's launches and bytes per V-cycle ([`Multigrid::traffic`]).
    pub fn traffic(&self) -> Vec<LevelTraffic> {
        with_mg!(&self.mg, m => m.traffic())
    }

    /// The first level of the fused coarse end of the V-cycle ([`Multigrid::fused_from`]), if any.
    pub fn fused_from(&self) -> Option<usize> {
        with_mg!(&self.mg, m => m.fused_from())
    }

    /// The finest smoother's tuning result, once tuned ([`Multigrid::smoother_tuning`]).
    pub fn smoother_tuning(&self) -> Option<&TuningReport> {
        with_mg!(&self.mg, m => m.smoother_tuning())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use lattice_gpu_host::{
        Element, HostField, HostLoopEngine, LaunchShape, LoopRange, PointUpdate2D, PointUpdate3D,
        TuningReport,
    };
    use lattice_gpu_kernels::stencil::{BlockProgram, GpuEntry, SumUpdate3D};

    use super::*;
    use crate::multigrid::Smoother;
    use crate::problem::manufactured;

    /// The CPU engine posing as a tuner: a loop counts as tuned after 3 runs, and runs of loops not yet
    /// tuned are counted, so a test sees whether [`Solver::tune`] left any loop of a solve untuned.
    #[derive(Default)]
    struct FakeTuner {
        untuned_runs: Cell<usize>,
    }

    #[derive(Default)]
    struct FakeSite {
        runs: usize,
        report: Option<TuningReport>,
    }

    impl FakeTuner {
        fn count(&self, site: &mut FakeSite) {
            if site.report.is_some() {
                return;
            }
            self.untuned_runs.set(self.untuned_runs.get() + 1);
            site.runs += 1;
            if site.runs == 3 {
                site.report = Some(TuningReport {
                    best: LaunchShape::FIXED,
                    best_ms: 0.0,
                    candidates: 1,
                    steps: 3,
                    tuning_ms: 0.0,
                    from_cache: false,
                    cost: lattice_gpu_host::engine::Cost::UNKNOWN,
                });
            }
        }
    }

    impl LoopEngine for FakeTuner {
        type Field<T: Element> = HostField<T>;
        type Site = FakeSite;

        fn describe(&self) -> String {
            "a CPU engine posing as a tuner".into()
        }
        fn check_fits(&self, bytes: u64, what: &str) -> lattice_gpu_host::Result<()> {
            HostLoopEngine.check_fits(bytes, what)
        }
        fn alloc<T: Element>(&self, shape: Shape) -> lattice_gpu_host::Result<HostField<T>> {
            HostLoopEngine.alloc(shape)
        }
        fn run3d<F: PointUpdate3D + GpuEntry>(
            &self,
            range: &LoopRange,
            f: &F,
            site: &mut FakeSite,
        ) -> lattice_gpu_host::Result<()> {
            self.count(site);
            HostLoopEngine.run3d(range, f, &mut ())
        }
        fn run3d_sum<F: SumUpdate3D + GpuEntry>(
            &self,
            range: &LoopRange,
            f: &F,
            site: &mut FakeSite,
            out: &mut HostField<f64>,
            slot: usize,
        ) -> lattice_gpu_host::Result<()> {
            self.count(site);
            HostLoopEngine.run3d_sum(range, f, &mut (), out, slot)
        }
        fn run2d<F: PointUpdate2D + GpuEntry>(
            &self,
            range: &LoopRange,
            f: &F,
            site: &mut FakeSite,
        ) -> lattice_gpu_host::Result<()> {
            self.count(site);
            HostLoopEngine.run2d(range, f, &mut ())
        }
        type Recording = ();
        fn record(
            &self,
            work: &mut dyn FnMut() -> lattice_gpu_host::Result<()>,
        ) -> lattice_gpu_host::Result<Option<()>> {
            HostLoopEngine.record(work)
        }
        fn replay(&self, _: &()) -> lattice_gpu_host::Result<()> {
            Ok(())
        }
        fn run_block<P: BlockProgram + GpuEntry>(&self, p: &P) -> lattice_gpu_host::Result<()> {
            HostLoopEngine.run_block(p)
        }
        fn synchronize(&self) -> lattice_gpu_host::Result<()> {
            Ok(())
        }
        fn dot(&self, a: &HostField<f64>, b: &HostField<f64>) -> lattice_gpu_host::Result<f64> {
            HostLoopEngine.dot(a, b)
        }
        fn tuning(site: &FakeSite) -> Option<&TuningReport> {
            site.report.as_ref()
        }
        fn tunes(&self) -> bool {
            true
        }
    }

    fn bits(x: &[f64]) -> Vec<u64> {
        x.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn a_solver_solves_again_with_the_same_bits() {
        let (p, _) = manufactured([16, 16, 8], 0.5, 1.0);
        let cycle = Cycle {
            levels: 3,
            ..Cycle::default()
        };
        let mut solver = Solver::new(&HostLoopEngine, &p, cycle, Precision::F32).unwrap();
        let first = solver.solve(1e-10, 200, false, &mut |_, _| {}).unwrap();
        let x1 = solver.solution().unwrap();
        // Timing the levels waits at level changes but changes no arithmetic.
        let second = solver.solve(1e-10, 200, true, &mut |_, _| {}).unwrap();
        let x2 = solver.solution().unwrap();
        assert_eq!(first.iterations, second.iterations);
        assert_eq!(bits(&first.history), bits(&second.history));
        assert_eq!(bits(&x1), bits(&x2));
        // One V-cycle before the first iteration and one after each but the last.
        assert_eq!(first.vcycles, first.iterations);
        assert!(first.levels.iter().all(|l| l.1 == 0.0));
        // Fused coarse levels are timed as one, on the first of them.
        let shown = solver.fused_from().map_or(second.levels.len(), |f| f + 1);
        assert!(second.levels[..shown].iter().all(|l| l.1 > 0.0));
        assert!(second.levels[shown..].iter().all(|l| l.1 == 0.0));
        // The one-call solve builds the same solver.
        let (x3, third) = solve(
            &HostLoopEngine,
            &p,
            cycle,
            Precision::F32,
            1e-10,
            200,
            false,
            &mut |_, _| {},
        )
        .unwrap();
        assert_eq!(third.iterations, first.iterations);
        assert_eq!(bits(&x3), bits(&x1));
    }

    #[test]
    fn tuning_covers_every_loop_of_a_solve_and_changes_nothing() {
        let (p, _) = manufactured([16, 8, 8], 1.0, 1.0);
        for (smoother, precision, layout) in [
            (Smoother::RedBlack, Precision::F32, Layout::Soa),
            (Smoother::Jacobi, Precision::F64, Layout::Aos),
        ] {
            let cycle = Cycle {
                levels: 3,
                smoother,
                layout,
                ..Cycle::default()
            };
            let (want, _) = solve(
                &HostLoopEngine,
                &p,
                cycle,
                precision,
                1e-10,
                200,
                false,
                &mut |_, _| {},
            )
            .unwrap();
            let engine = FakeTuner::default();
            let mut solver = Solver::new(&engine, &p, cycle, precision).unwrap();
            solver.tune().unwrap();
            assert!(engine.untuned_runs.get() > 0);
            engine.untuned_runs.set(0);
            solver.solve(1e-10, 200, false, &mut |_, _| {}).unwrap();
            assert_eq!(
                engine.untuned_runs.get(),
                0,
                "{smoother:?}: a loop of the solve was not tuned"
            );
            assert!(solver.smoother_tuning().is_some());
            assert_eq!(bits(&solver.solution().unwrap()), bits(&want));
        }
    }
}
