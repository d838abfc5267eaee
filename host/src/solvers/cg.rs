//! Preconditioned conjugate gradients in f64 on any loop engine's fields (the CPU's or a GPU's), for a
//! problem that supplies `A` and `M^-1` ([`CgProblem`]). Two ways to drive it, as for BiCGStab
//! ([`crate::solvers::bicgstab`]): [`Cg::solve`] brings every dot product to the host (its `sync`), and
//! [`Cg::solve_async`] keeps the scalars on the engine, where the vector updates read them, so the host
//! queues `check_every` iterations at a time and never waits in between (its `async`); iterations
//! queued past convergence change nothing. Both stop on the same test and give the same iterations.

use std::time::Instant;

use lattice_gpu_kernels::vector::{
    CgDirection, CgFinish, CgIterate, CgScalars, CgStep, Convert, Fill,
};

use crate::engine::LoopEngine;
use crate::error::Error;
use crate::field::{Field, Shape};
use crate::lattice::Loop3D;

/// What conjugate gradients needs of a problem on engine `E`: `A` (symmetric positive definite) and a
/// preconditioner `M^-1` (likewise), on f64 fields of one shape.
pub trait CgProblem<E: LoopEngine> {
    /// The problem's error, which carries the engine's and a stalled solve's.
    type Error: From<Error> + From<Stalled>;
    /// `y = A x`, and `x.y` into value `slot` of `sums`, queued where the engine keeps its fields (as
    /// [`LoopEngine::dot_into`]; summed in the operator's own loop where the problem can:
    /// [`Loop3D::run_sum`]).
    fn apply(
        &mut self,
        x: &E::Field<f64>,
        y: &mut E::Field<f64>,
        sums: &mut E::Field<f64>,
        slot: usize,
    ) -> Result<(), Self::Error>;
    /// `z = M^-1 r`, and `r.z` into value `slot` of `sums` (as in [`apply`](Self::apply)).
    fn precondition(
        &mut self,
        r: &E::Field<f64>,
        z: &mut E::Field<f64>,
        sums: &mut E::Field<f64>,
        slot: usize,
    ) -> Result<(), Self::Error>;
}

/// A solve that stopped without converging: why, after how many iterations, and `|r| / |b|` after each
/// (starting with 1).
#[derive(Clone, Debug, PartialEq)]
pub struct Stalled {
    /// Why it stopped.
    pub what: String,
    /// Iterations run.
    pub iterations: usize,
    /// The relative residuals.
    pub history: Vec<f64>,
    /// The tolerance asked for.
    pub tolerance: f64,
}

/// What a solve did.
#[derive(Clone, Debug, PartialEq)]
pub struct CgReport {
    /// Iterations run.
    pub iterations: usize,
    /// `|r| / |b|` after each iteration, starting with 1.
    pub history: Vec<f64>,
    /// Preconditioner applications.
    pub preconditions: usize,
    /// Wall-clock seconds, the engine's work finished.
    pub seconds: f64,
}

/// What the host makes of a solve's residuals, whichever way they reach it: the history, the progress
/// report, and when to stop (converged, broken down, stalled).
struct Watch<'a> {
    tol: f64,
    b_norm: f64,
    history: Vec<f64>,
    /// The smallest relative residual so far and its iteration.
    best: (f64, usize),
    progress: &'a mut dyn FnMut(usize, f64),
}

/// Iterations without a new smallest residual after which a solve counts as stalled.
const STALL: usize = 50;

impl<'a> Watch<'a> {
    fn new(tol: f64, b_norm: f64, progress: &'a mut dyn FnMut(usize, f64)) -> Self {
        Self {
            tol,
            b_norm,
            history: vec![1.0],
            best: (1.0, 0),
            progress,
        }
    }

    /// `|r|^2` under which the solve has converged: `|r| < tol |b|`, squared, the test the engine's
    /// updates make in [`Cg::solve_async`], so that the host stops where they did.
    fn stop(&self) -> f64 {
        (self.tol * self.b_norm).powi(2)
    }

    fn stalled(&self, what: String, iterations: usize) -> Stalled {
        Stalled {
            what,
            iterations,
            history: self.history.clone(),
            tolerance: self.tol,
        }
    }

    /// Fails unless iteration `it`'s `p.Ap` is positive.
    fn check_pq(&self, it: usize, pq: f64) -> Result<(), Stalled> {
        if !pq.is_finite() {
            let what = format!(
                "p.Ap = {pq} in iteration {it}: the iteration diverged (a NaN or infinity from the \
                 operator, the preconditioner or values beyond the precision's range)"
            );
            return Err(self.stalled(what, it));
        }
        if pq <= 0.0 {
            let what =
                format!("p.Ap = {pq:e} is not positive: the operator or preconditioner is not SPD");
            return Err(self.stalled(what, it));
        }
        Ok(())
    }

    /// Records iteration `it`'s `|r|^2` and reports it; `true` once converged, an error once the
    /// residual has not fallen for [`STALL`] iterations (or is not finite).
    fn observe(&mut self, it: usize, rr: f64) -> Result<bool, Stalled> {
        let rel = rr.sqrt() / self.b_norm;
        self.history.push(rel);
        (self.progress)(it, rel);
        if rr < self.stop() {
            return Ok(true);
        }
        if !rel.is_finite() {
            let what = format!("the residual is {rel} in iteration {it}: the iteration diverged");
            return Err(self.stalled(what, it));
        }
        if rel < self.best.0 {
            self.best = (rel, it);
        } else if it - self.best.1 >= STALL {
            return Err(self.stalled("the residual stopped falling".into(), it));
        }
        Ok(false)
    }

    /// The error of a solve that ran `max_iter` iterations without converging.
    fn out_of_iterations(&self, max_iter: usize) -> Stalled {
        self.stalled("the iteration limit was reached".into(), max_iter)
    }
}

/// A step of length zero with the host's scalars: for runs that only tune.
const HOST_ZERO: (f64, CgScalars) = (0.0, CgScalars::HOST);

/// The kinds of loop CG itself runs over the vectors (each keeps its own site, tuned once).
#[derive(Clone, Copy)]
enum Site {
    Step = 0,
    Direction = 1,
    Fill = 2,
    Copy = 3,
    Finish = 4,
}

/// CG's vectors on an engine for one right-hand side: built once, then [`solve`](Self::solve) (or
/// [`solve_async`](Self::solve_async)) as often as wanted, each time from `x = 0` with the same result.
pub struct Cg<'e, E: LoopEngine> {
    engine: &'e E,
    /// The right-hand side and its norm.
    b: E::Field<f64>,
    b_norm: f64,
    /// The iterate, residual, preconditioned residual, direction and `A p`.
    x: E::Field<f64>,
    r: E::Field<f64>,
    z: E::Field<f64>,
    p: E::Field<f64>,
    q: E::Field<f64>,
    sites: [Loop3D<'e, E>; 5],
}

impl<'e, E: LoopEngine> Cg<'e, E> {
    /// CG for right-hand side `b` (its interior; margins zero) on `engine`.
    pub fn new(engine: &'e E, b: E::Field<f64>) -> crate::Result<Self> {
        let shape = b.shape();
        let b_norm = engine.dot(&b, &b)?.sqrt();
        // An infinite |b| would make every residual pass the stopping test, and a NaN none.
        if !b_norm.is_finite() {
            return Err(crate::Error::InvalidSetting(format!(
                "the right-hand side's norm |b| is {b_norm}: it holds a non-finite value, or values \
                 whose squares overflow f64; scale it towards 1"
            )));
        }
        let vector = || engine.alloc::<f64>(shape);
        let site = || Loop3D::new(engine, shape.interior_range());
        Ok(Self {
            engine,
            b,
            b_norm,
            x: vector()?,
            r: vector()?,
            z: vector()?,
            p: vector()?,
            q: vector()?,
            sites: [site()?, site()?, site()?, site()?, site()?],
        })
    }

    /// Fields CG keeps beside the problem's: 6 of f64.
    pub const FIELDS: u64 = 6;

    /// `|b|`.
    pub fn b_norm(&self) -> f64 {
        self.b_norm
    }

    /// The iterate (after a solve: the solution).
    pub fn x(&self) -> &E::Field<f64> {
        &self.x
    }

    /// The residual and the preconditioned residual, as scratch fields for tuning a preconditioner
    /// (a solve overwrites both before it reads them).
    pub fn scratch(&mut self) -> (&E::Field<f64>, &mut E::Field<f64>) {
        (&self.r, &mut self.z)
    }

    /// Runs CG's own loops and `problem.apply` until the engine has tuned them (once each when the tune
    /// cache has them; nothing on an engine that does not tune). Changes only scratch state.
    pub fn tune<P: CgProblem<E>>(
        &mut self,
        problem: &mut P,
        apply_tuned: impl Fn(&P) -> bool,
    ) -> Result<(), P::Error> {
        if !self.engine.tunes() {
            return Ok(());
        }
        let tuned = |s: &Self, k: Site| E::tuning(s.sites[k as usize].info()).is_some();
        run_until_tuned(
            self,
            |s| tuned(s, Site::Fill),
            &mut Self::fill_x,
            "CG's fill",
        )?;
        run_until_tuned(
            self,
            |s| tuned(s, Site::Copy),
            &mut Self::copy_b,
            "CG's copy",
        )?;
        let mut sums = self.engine.alloc::<f64>(Shape::new_3d([1, 1, 1], 0)?)?;
        let step = &mut |s: &mut Self| s.step(0.0, CgScalars::HOST, &mut sums, 0);
        run_until_tuned(self, |s| tuned(s, Site::Step), step, "CG's step")?;
        let direction = &mut |s: &mut Self| s.direction(HOST_ZERO, 0.0, CgScalars::HOST);
        run_until_tuned(
            self,
            |s| tuned(s, Site::Direction),
            direction,
            "CG's direction",
        )?;
        let finish = &mut |s: &mut Self| s.finish(HOST_ZERO);
        run_until_tuned(self, |s| tuned(s, Site::Finish), finish, "CG's finish")?;
        let mut runs = 0;
        while !apply_tuned(problem) {
            check_runs(runs, "the operator")?;
            problem.apply(&self.p, &mut self.q, &mut sums, 0)?;
            runs += 1;
        }
        Ok(())
    }

    /// `x = 0`.
    fn fill_x(&mut self) -> crate::Result<()> {
        let x = self.x.view_mut();
        self.sites[Site::Fill as usize].run(&Fill { x, value: 0.0 })?;
        Ok(())
    }

    /// `r = b`.
    fn copy_b(&mut self) -> crate::Result<()> {
        let (from, to) = (self.b.view(), self.r.view_mut());
        self.sites[Site::Copy as usize].run(&Convert { from, to })?;
        Ok(())
    }

    /// `r -= alpha q` (`alpha` from `scalars` unless they are [`CgScalars::HOST`]), and the new `r.r`
    /// into value `slot` of `sums`. The iterate follows in [`direction`](Self::direction) or
    /// [`finish`](Self::finish), with the same `(alpha, scalars)`.
    fn step(
        &mut self,
        alpha: f64,
        scalars: CgScalars,
        sums: &mut E::Field<f64>,
        slot: usize,
    ) -> crate::Result<()> {
        let step = CgStep {
            r: self.r.view_mut(),
            q: self.q.view(),
            alpha,
            scalars,
        };
        self.sites[Site::Step as usize].run_sum(&step, sums, slot)
    }

    /// The last step's `x += alpha p` (`step`: its length and scalars, as given to
    /// [`step`](Self::step)), then `p = z + beta p` (`beta` from `scalars` unless they are
    /// [`CgScalars::HOST`]).
    fn direction(
        &mut self,
        (alpha, step): (f64, CgScalars),
        beta: f64,
        scalars: CgScalars,
    ) -> crate::Result<()> {
        let x = self.x.view_mut();
        self.sites[Site::Direction as usize].run(&CgDirection {
            step: CgIterate {
                x,
                alpha,
                scalars: step,
            },
            p: self.p.view_mut(),
            z: self.z.view(),
            beta,
            scalars,
        })?;
        Ok(())
    }

    /// The last step's `x += alpha p` where no direction follows it (the solve ends).
    fn finish(&mut self, (alpha, scalars): (f64, CgScalars)) -> crate::Result<()> {
        let x = self.x.view_mut();
        self.sites[Site::Finish as usize].run(&CgFinish {
            step: CgIterate { x, alpha, scalars },
            p: self.p.view(),
        })?;
        Ok(())
    }

    /// `p = z`, a copy rather than `z + 0 p`, so that nothing `p` held (a failed solve's NaN) survives.
    fn first_direction(&mut self) -> crate::Result<()> {
        let (from, to) = (self.z.view(), self.p.view_mut());
        self.sites[Site::Copy as usize].run(&Convert { from, to })?;
        Ok(())
    }

    /// Solves `A x = b` by CG from `x = 0` to `|r| / |b| < tol`, every dot product brought to the host,
    /// reporting each iteration to `progress`. Fails with the residual history ([`Stalled`]) when
    /// `max_iter` runs out, `p.Ap` is not positive, or the residual has not fallen for 50 iterations.
    pub fn solve<P: CgProblem<E>>(
        &mut self,
        problem: &mut P,
        tol: f64,
        max_iter: usize,
        progress: &mut dyn FnMut(usize, f64),
    ) -> Result<CgReport, P::Error> {
        let (start, mut watch) = match self.begin(tol, max_iter, progress)? {
            Begun::Zero(report) => return Ok(report),
            Begun::Running(start, watch) => (start, watch),
        };
        // p.Ap, r.r and r.z, where the loops that sum them leave them.
        let mut sums = self.engine.alloc::<f64>(Shape::new_3d([3, 1, 1], 0)?)?;
        let value = |sums: &E::Field<f64>, slot| -> crate::Result<f64> {
            Ok(sums.download_span(slot, 1)?[0])
        };
        let mut preconditions = 0;
        problem.precondition(&self.r, &mut self.z, &mut sums, 2)?;
        preconditions += 1;
        self.first_direction()?;
        let mut rz = value(&sums, 2)?;
        let mut step = HOST_ZERO;
        for it in 1..=max_iter {
            problem.apply(&self.p, &mut self.q, &mut sums, 0)?;
            let pq = value(&sums, 0)?;
            watch.check_pq(it, pq)?;
            step = (rz / pq, CgScalars::HOST);
            self.step(step.0, step.1, &mut sums, 1)?;
            if self.ends::<P::Error>(&mut watch, it, value(&sums, 1)?, step)? {
                return Ok(self.report(it, watch.history, preconditions, start)?);
            }
            if it == max_iter {
                break;
            }
            problem.precondition(&self.r, &mut self.z, &mut sums, 2)?;
            preconditions += 1;
            let rz_new = value(&sums, 2)?;
            let beta = rz_new / rz;
            rz = rz_new;
            self.direction(step, beta, CgScalars::HOST)?;
        }
        self.finish(step)?;
        Err(watch.out_of_iterations(max_iter).into())
    }

    /// [`solve`](Self::solve) with the scalars kept on the engine: each dot product lands in an array
    /// there ([`LoopEngine::dot_into`]) and the vector updates read their factors from it, so the host
    /// queues `check_every` iterations at a time and reads the array only then (on a GPU it never
    /// waits in between). Iterations queued past convergence change nothing (the updates stop once
    /// `|r|^2` is below `tol^2 |b|^2`), so the iterations, the residuals and, on the CPU, the bits are
    /// those of `solve`.
    pub fn solve_async<P: CgProblem<E>>(
        &mut self,
        problem: &mut P,
        tol: f64,
        max_iter: usize,
        check_every: usize,
        progress: &mut dyn FnMut(usize, f64),
    ) -> Result<CgReport, P::Error> {
        if check_every == 0 {
            return Err(Error::InvalidSetting(
                "the residual must be read every 1 or more iterations".into(),
            )
            .into());
        }
        let (start, mut watch) = match self.begin(tol, max_iter, progress)? {
            Begun::Zero(report) => return Ok(report),
            Begun::Running(start, watch) => (start, watch),
        };
        // Iteration k's |r|^2, p.Ap and r.z, in that order.
        let (rr, pq, rz) = (|k: usize| 3 * k, |k: usize| 3 * k + 1, |k: usize| 3 * k + 2);
        let mut values = self
            .engine
            .alloc::<f64>(Shape::new_3d([3 * (max_iter + 1), 1, 1], 0)?)?;
        let stop = watch.stop();
        let scalars = |v: &E::Field<f64>, num: usize, den: usize, rr: usize| CgScalars {
            values: v.view(),
            num: num as u32,
            den: den as u32,
            rr: rr as u32,
            stop,
        };
        self.engine.dot_into(&self.r, &self.r, &mut values, rr(0))?;
        problem.precondition(&self.r, &mut self.z, &mut values, rz(0))?;
        self.first_direction()?;
        let mut read = 0;
        for it in 1..=max_iter {
            problem.apply(&self.p, &mut self.q, &mut values, pq(it))?;
            let step = (0.0, scalars(&values, rz(it - 1), pq(it), rr(it - 1)));
            self.step(step.0, step.1, &mut values, rr(it))?;
            if it % check_every == 0 || it == max_iter {
                let v = values.download()?;
                for k in read + 1..=it {
                    watch.check_pq(k, v[pq(k)])?;
                    // Steps before `it` have had their directions, which updated the iterate.
                    let ended = if k == it {
                        self.ends::<P::Error>(&mut watch, k, v[rr(k)], step)?
                    } else {
                        watch.observe(k, v[rr(k)])?
                    };
                    if ended {
                        return Ok(self.report(k, watch.history, k, start)?);
                    }
                }
                read = it;
            }
            if it == max_iter {
                self.finish(step)?;
                break;
            }
            problem.precondition(&self.r, &mut self.z, &mut values, rz(it))?;
            self.direction(step, 0.0, scalars(&values, rz(it), rz(it - 1), rr(it)))?;
        }
        Err(watch.out_of_iterations(max_iter).into())
    }

    /// Records step `it`'s `|r|^2` ([`Watch::observe`]); when that ends the solve (converged, or
    /// stalled), first adds the step to the iterate, since no direction will.
    fn ends<R: From<Error> + From<Stalled>>(
        &mut self,
        watch: &mut Watch,
        it: usize,
        rr: f64,
        step: (f64, CgScalars),
    ) -> Result<bool, R> {
        let seen = watch.observe(it, rr);
        if !matches!(seen, Ok(false)) {
            self.finish(step)?;
        }
        Ok(seen?)
    }

    /// What both drivers do first: check the stop, start the clock, `x = 0`, and `r = b` unless `b` is
    /// zero (then `x = 0` is the answer, after no iteration).
    fn begin<'p>(
        &mut self,
        tol: f64,
        max_iter: usize,
        progress: &'p mut dyn FnMut(usize, f64),
    ) -> crate::Result<Begun<'p>> {
        check_stop(tol, max_iter)?;
        let start = Instant::now();
        let watch = Watch::new(tol, self.b_norm, progress);
        self.fill_x()?;
        if self.b_norm == 0.0 {
            return Ok(Begun::Zero(self.report(0, watch.history, 0, start)?));
        }
        self.copy_b()?;
        Ok(Begun::Running(start, watch))
    }

    fn report(
        &self,
        iterations: usize,
        history: Vec<f64>,
        preconditions: usize,
        start: Instant,
    ) -> crate::Result<CgReport> {
        self.engine.synchronize()?;
        Ok(CgReport {
            iterations,
            history,
            preconditions,
            seconds: start.elapsed().as_secs_f64(),
        })
    }
}

/// How a solve starts: already answered (a zero right-hand side), or running since an instant.
enum Begun<'p> {
    Zero(CgReport),
    Running(Instant, Watch<'p>),
}

fn check_stop(tol: f64, max_iter: usize) -> crate::Result<()> {
    if tol.is_nan() || tol <= 0.0 || tol >= 1.0 || max_iter == 0 {
        return Err(Error::InvalidSetting(format!(
            "tolerance {tol} must be in (0, 1) and the iteration limit ({max_iter}) at least 1"
        )));
    }
    Ok(())
}

/// Runs of one loop after which tuning counts as stuck (the tuner needs candidates x repetitions, a few
/// hundred).
pub const TUNE_RUN_LIMIT: usize = 100_000;

fn check_runs(runs: usize, what: &str) -> crate::Result<()> {
    if runs == TUNE_RUN_LIMIT {
        return Err(Error::Internal(format!(
            "{what} was still tuning after {runs} runs"
        )));
    }
    Ok(())
}

/// Runs `work` on `state` until `tuned(state)`: an auto-tuning engine tunes a loop on the real work, a
/// few hundred runs. Fails, naming `what` (the loop), after [`TUNE_RUN_LIMIT`] runs.
pub fn run_until_tuned<S, R: From<Error>>(
    state: &mut S,
    tuned: impl Fn(&S) -> bool,
    work: &mut impl FnMut(&mut S) -> Result<(), R>,
    what: impl std::fmt::Display,
) -> Result<(), R> {
    let mut runs = 0;
    while !tuned(state) {
        check_runs(runs, &what.to_string())?;
        work(state)?;
        runs += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::HostLoopEngine;
    use crate::field::HostField;

    /// `A = tridiag(-1, d, -1)` along x on `n` cells (zero beyond the ends), applied on the host; the
    /// preconditioner divides by the diagonal.
    struct Tridiagonal {
        shape: Shape,
        d: f64,
    }

    impl CgProblem<HostLoopEngine> for Tridiagonal {
        type Error = TestError;

        fn apply(
            &mut self,
            x: &HostField<f64>,
            y: &mut HostField<f64>,
            sums: &mut HostField<f64>,
            slot: usize,
        ) -> Result<(), TestError> {
            let v = self.shape.extract(&x.download()?);
            let n = v.len();
            let at = |i: isize| {
                if i < 0 || i as usize >= n {
                    0.0
                } else {
                    v[i as usize]
                }
            };
            let out: Vec<f64> = (0..n as isize)
                .map(|i| self.d * at(i) - at(i - 1) - at(i + 1))
                .collect();
            y.upload(&self.shape.embed(&out, 0.0)?)?;
            let xy = v.iter().zip(&out).map(|(a, b)| a * b).sum();
            Ok(sums.upload_span(slot, &[xy])?)
        }

        fn precondition(
            &mut self,
            r: &HostField<f64>,
            z: &mut HostField<f64>,
            sums: &mut HostField<f64>,
            slot: usize,
        ) -> Result<(), TestError> {
            let r = r.download()?;
            let v: Vec<f64> = r.iter().map(|x| x / self.d).collect();
            z.upload(&v)?;
            let rz = r.iter().zip(&v).map(|(a, b)| a * b).sum();
            Ok(sums.upload_span(slot, &[rz])?)
        }
    }

    #[derive(Debug)]
    enum TestError {
        Host(Error),
        Stalled(Stalled),
    }
    impl From<Error> for TestError {
        fn from(e: Error) -> Self {
            TestError::Host(e)
        }
    }
    impl From<Stalled> for TestError {
        fn from(s: Stalled) -> Self {
            TestError::Stalled(s)
        }
    }

    /// The solution by the Thomas algorithm, in f64.
    fn thomas(d: f64, b: &[f64]) -> Vec<f64> {
        let n = b.len();
        let (mut c, mut g) = (vec![0.0; n], vec![0.0; n]);
        for i in 0..n {
            let m = d + if i > 0 { c[i - 1] } else { 0.0 };
            c[i] = -1.0 / m;
            g[i] = (b[i] + if i > 0 { g[i - 1] } else { 0.0 }) / m;
        }
        let mut x = vec![0.0; n];
        for i in (0..n).rev() {
            x[i] = g[i] - c[i] * if i + 1 < n { x[i + 1] } else { 0.0 };
        }
        x
    }

    fn setup(n: usize) -> (Shape, Vec<f64>, HostField<f64>) {
        let shape = Shape::new_3d([n, 1, 1], 1).unwrap();
        let rhs: Vec<f64> = (0..n).map(|i| ((i * 7 % 11) as f64 - 5.0) / 3.0).collect();
        let mut b = HostLoopEngine.alloc::<f64>(shape).unwrap();
        b.upload(&shape.embed(&rhs, 0.0).unwrap()).unwrap();
        (shape, rhs, b)
    }

    #[test]
    fn both_drivers_solve_a_tridiagonal_system_as_the_thomas_algorithm_does() {
        let n = 200;
        let (shape, rhs, b) = setup(n);
        let want = thomas(2.5, &rhs);
        let mut cg = Cg::new(&HostLoopEngine, b).unwrap();
        let mut problem = Tridiagonal { shape, d: 2.5 };
        let mut seen = 0;
        let sync = cg
            .solve(&mut problem, 1e-12, 300, &mut |_, _| seen += 1)
            .unwrap();
        let x_sync = shape.extract(&cg.x().download().unwrap());
        let err = x_sync
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(err < 1e-10, "max error {err:e}");
        assert!(*sync.history.last().unwrap() < 1e-12);
        assert_eq!(seen, sync.iterations);
        // Condition number 9: the residual falls about 2x per iteration, far fewer than n iterations.
        assert!(sync.iterations < n / 2, "{} iterations", sync.iterations);
        for check_every in [1, 3, 100] {
            let r = cg
                .solve_async(&mut problem, 1e-12, 300, check_every, &mut |_, _| {})
                .unwrap();
            assert_eq!(r.iterations, sync.iterations);
            assert_eq!(r.history, sync.history);
            let x = shape.extract(&cg.x().download().unwrap());
            assert!(x
                .iter()
                .zip(&x_sync)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }

    #[test]
    fn a_nan_operator_is_a_divergence_and_an_infinite_rhs_is_refused() {
        let (shape, _, b) = setup(16);
        let mut cg = Cg::new(&HostLoopEngine, b).unwrap();
        let mut problem = Tridiagonal { shape, d: f64::NAN };
        match cg.solve(&mut problem, 1e-10, 50, &mut |_, _| {}) {
            Err(TestError::Stalled(s)) => {
                assert!(
                    s.what.contains("diverged") && !s.what.contains("SPD"),
                    "{s:?}"
                )
            }
            other => panic!("{other:?}"),
        }
        let mut b = HostLoopEngine.alloc::<f64>(shape).unwrap();
        let mut huge = vec![0.0; shape.len()];
        huge[shape.index(3, 1, 1)] = 1e200;
        b.upload(&huge).unwrap();
        let e = Cg::new(&HostLoopEngine, b).err().unwrap().to_string();
        assert!(e.contains("|b| is inf") && e.contains("scale it"), "{e}");
    }

    #[test]
    fn an_indefinite_operator_and_a_short_limit_stop_with_the_history() {
        let (shape, _, b) = setup(16);
        let mut cg = Cg::new(&HostLoopEngine, b).unwrap();
        // d = -2.5: A is negative definite, so p.Ap < 0 at once.
        let mut problem = Tridiagonal { shape, d: -2.5 };
        match cg.solve(&mut problem, 1e-10, 50, &mut |_, _| {}) {
            Err(TestError::Stalled(s)) => assert!(s.what.contains("not SPD"), "{s:?}"),
            other => panic!("{other:?}"),
        }
        let mut problem = Tridiagonal { shape, d: 2.01 };
        match cg.solve_async(&mut problem, 1e-14, 2, 1, &mut |_, _| {}) {
            Err(TestError::Stalled(s)) => {
                assert_eq!((s.iterations, s.history.len()), (2, 3), "{s:?}");
                assert!(s.what.contains("iteration limit"));
            }
            other => panic!("{other:?}"),
        }
        match cg.solve(&mut problem, 0.0, 5, &mut |_, _| {}) {
            Err(TestError::Host(e)) => {
                assert!(
                    e.to_string().starts_with("invalid setting: tolerance 0"),
                    "{e}"
                )
            }
            other => panic!("{other:?}"),
        }
        match cg.solve_async(&mut problem, 1e-10, 5, 0, &mut |_, _| {}) {
            Err(TestError::Host(e @ Error::InvalidSetting(_))) => {
                assert!(e.to_string().contains("every 1 or more"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }
}
