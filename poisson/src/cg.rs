//! Conjugate gradients in f64, preconditioned by a multigrid V-cycle in f32 (mixed) or f64, with every
//! vector where the engine keeps its fields (GPU memory on a GPU): only the dot products come back to the
//! host. The report's point: the f32 preconditioner costs half the bytes and needs the same iterations,
//! because CG in f64 corrects what the preconditioner leaves.
//!
//! [`Solver`] builds everything once (the operator, the multigrid levels, the CG vectors) and then
//! solves as often as asked, so the set-up, the tuning and the solve can be timed apart; [`solve`] does
//! all three in one call. CG itself is the framework's ([`lattice_gpu_host::cg`]): this crate gives it
//! the operator and the V-cycle.

use lattice_gpu_host::cg::{Cg, CgProblem, CgReport};
use lattice_gpu_host::{Field, Loop3D, LoopEngine, Shape, TuningReport};
use lattice_gpu_kernels::poisson::Apply;

use crate::multigrid::{
    check_cycle, with_operator, Cycle, Layout, LevelTraffic, Multigrid, OperatorView,
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

/// The operator and the V-cycle of a solve, as CG sees them.
struct Parts<'a, 'e, E: LoopEngine> {
    op: &'a mut Operator<'e, E>,
    mg: &'a mut Mg<'e, E>,
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
        self.op.apply(x, y, sums, slot)
    }

    fn precondition(
        &mut self,
        r: &E::Field<f64>,
        z: &mut E::Field<f64>,
        sums: &mut E::Field<f64>,
        slot: usize,
    ) -> Result<()> {
        with_mg!(&mut *self.mg, m => m.apply(r, z, sums, slot))
    }
}

/// A problem made ready to solve on an engine: the f64 operator, the multigrid hierarchy and CG's
/// vectors, all built and uploaded once by [`new`](Self::new); [`solve`](Self::solve) then runs CG alone
/// and may run as often as wanted, each time from `x = 0` with the same result.
pub struct Solver<'e, E: LoopEngine> {
    engine: &'e E,
    op: Operator<'e, E>,
    mg: Mg<'e, E>,
    cg: Cg<'e, E>,
}

impl<'e, E: LoopEngine> Solver<'e, E> {
    /// Checks `problem` and `cycle` and builds the solver on `engine`: the finest stencil once (for the
    /// operator and the multigrid's finest level), the coarser levels, and every field on the engine.
    pub fn new(
        engine: &'e E,
        problem: &Problem,
        cycle: Cycle,
        precision: Precision,
    ) -> Result<Self> {
        problem.check()?;
        check_cycle(problem.n, &cycle)?;
        engine.check_fits(
            Self::bytes(problem.n, cycle.levels, precision),
            &format!(
                "the {}x{}x{} Poisson solver ({} multigrid levels in {precision:?})",
                problem.n[0], problem.n[1], problem.n[2], cycle.levels
            ),
        )?;
        let stencil = problem.stencil();
        let op = Operator::from_stencil(engine, problem.n, &stencil, cycle.layout)?;
        let mg = match precision {
            Precision::F32 => Mg::F32(Multigrid::with_finest(engine, problem, &stencil, cycle)?),
            Precision::F64 => Mg::F64(Multigrid::with_finest(engine, problem, &stencil, cycle)?),
        };
        drop(stencil);
        let shape = op.shape();
        let mut b = engine.alloc::<f64>(shape)?;
        b.upload(&shape.embed(&problem.rhs, 0.0)?)?;
        Ok(Self {
            engine,
            op,
            mg,
            cg: Cg::new(engine, b)?,
        })
    }

    /// The bytes of the fields on the engine: CG's 6 vectors and the operator's 7 coefficients in f64,
    /// and per level 7 coefficients and 3 vectors in the multigrid's precision (margins included).
    fn bytes(n: [usize; 3], levels: usize, precision: Precision) -> u64 {
        let cells = |n: [usize; 3]| n.iter().map(|v| v + 2).product::<usize>() as u64;
        let s = match precision {
            Precision::F32 => 4,
            Precision::F64 => 8,
        };
        let mg: u64 = (0..levels).map(|l| 10 * s * cells(n.map(|v| v >> l))).sum();
        (Cg::<E>::FIELDS + 7) * 8 * cells(n) + mg
    }

    /// Runs every loop of a solve until the engine has tuned it (once each when the tune cache has it;
    /// nothing on an engine that does not tune), so that [`solve`](Self::solve) afterwards times tuned
    /// launches only. Changes only scratch state: the next solve gives the same result.
    pub fn tune(&mut self) -> Result<()> {
        if !self.engine.tunes() {
            return Ok(());
        }
        let mut parts = Parts {
            op: &mut self.op,
            mg: &mut self.mg,
        };
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
        let mut parts = Parts {
            op: &mut self.op,
            mg: &mut self.mg,
        };
        let r = self.cg.solve(&mut parts, tol, max_iter, progress)?;
        Ok(self.report(r))
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
        with_mg!(&mut self.mg, m => m.set_timed(false));
        let mut parts = Parts {
            op: &mut self.op,
            mg: &mut self.mg,
        };
        let r = self
            .cg
            .solve_async(&mut parts, tol, max_iter, check_every, progress)?;
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
        Ok(self.op.shape().extract(&self.cg.x().download()?))
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
