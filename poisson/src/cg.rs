//! Conjugate gradients in f64, preconditioned by a multigrid V-cycle in f32 (mixed) or f64, with every
//! vector where the engine keeps its fields (GPU memory on a GPU): only the dot products come back to the
//! host. The report's point: the f32 preconditioner costs half the bytes and needs the same iterations,
//! because CG in f64 corrects what the preconditioner leaves.

use lattice_gpu_host::{Field, Loop3D, LoopEngine, Shape};
use lattice_gpu_kernels::poisson::{Apply, CgDirection, CgStep};

use crate::multigrid::{
    upload, with_operator, Cycle, Layout, Multigrid, OperatorView, Preconditioner, StencilFields,
};
use crate::problem::Problem;
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
        let shape = Shape::new_3d(problem.n, 1)?;
        Ok(Self {
            site: Loop3D::new(engine, shape.interior_range())?,
            shape,
            a: StencilFields::new(engine, shape, &problem.stencil(), layout)?,
        })
    }

    /// The fields' shape (margin 1).
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// `y = A x` on the engine.
    pub fn apply(&mut self, x: &E::Field<f64>, y: &mut E::Field<f64>) -> Result<()> {
        let (x, y) = (x.view(), y.view_mut());
        with_operator!(self.a.view(), a => self.site.run(&Apply { a, x, y }))?;
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
    /// Cells and seconds of each multigrid level over the whole solve (empty unless timed).
    pub levels: Vec<([usize; 3], f64)>,
}

fn stalled(what: String, iterations: usize, history: &[f64], tolerance: f64) -> Error {
    let shown: Vec<String> = history
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 10 == 0 || *i + 1 == history.len())
        .map(|(i, r)| format!("{i}: {r:.2e}"))
        .collect();
    Error::NotConverged {
        what,
        iterations,
        residual: history.last().copied().unwrap_or(1.0),
        tolerance,
        history: shown.join(", "),
    }
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
/// residual has not fallen for 50 iterations.
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
    if tol.is_nan() || tol <= 0.0 || tol >= 1.0 || max_iter == 0 {
        return Err(Error::Invalid(format!(
            "tolerance {tol} must be in (0, 1) and the iteration limit ({max_iter}) at least 1"
        )));
    }
    let mut op = Operator::new(engine, problem, cycle.layout)?;
    let stop = Stop { tol, max_iter };
    match precision {
        Precision::F32 => {
            let mut mg = Multigrid::<E, f32>::new(engine, problem, cycle)?.timed(timed);
            pcg(engine, &mut op, &mut mg, &problem.rhs, stop, progress)
        }
        Precision::F64 => {
            let mut mg = Multigrid::<E, f64>::new(engine, problem, cycle)?.timed(timed);
            pcg(engine, &mut op, &mut mg, &problem.rhs, stop, progress)
        }
    }
}

#[derive(Clone, Copy)]
struct Stop {
    tol: f64,
    max_iter: usize,
}

fn pcg<'e, E: LoopEngine>(
    engine: &'e E,
    op: &mut Operator<'e, E>,
    mg: &mut impl Preconditioner<E>,
    rhs: &[f64],
    stop: Stop,
    progress: &mut dyn FnMut(usize, f64),
) -> Result<(Vec<f64>, Report)> {
    let shape = op.shape();
    let zeros = vec![0.0; rhs.len()];
    let field = |data: &[f64]| upload::<E, f64>(engine, shape, data);
    let (mut x, mut r, mut z, mut p, mut q) = (
        field(&zeros)?,
        field(rhs)?,
        field(&zeros)?,
        field(&zeros)?,
        field(&zeros)?,
    );
    let mut step_site = Loop3D::new(engine, shape.interior_range())?;
    let mut direction_site = Loop3D::new(engine, shape.interior_range())?;
    let report = |iterations, history, mg: &dyn Preconditioner<E>| Report {
        iterations,
        history,
        levels: mg.level_times(),
    };
    let b_norm = engine.dot(&r, &r)?.sqrt();
    let mut history = vec![1.0];
    if b_norm == 0.0 {
        return Ok((zeros, report(0, history, mg)));
    }
    mg.apply(&r, &mut z)?;
    // p = z (beta = 0).
    direction_site.run(&CgDirection {
        p: p.view_mut(),
        z: z.view(),
        beta: 0.0,
    })?;
    let mut rz = engine.dot(&r, &z)?;
    let (mut best, mut best_at) = (1.0, 0);
    for it in 1..=stop.max_iter {
        op.apply(&p, &mut q)?;
        let pq = engine.dot(&p, &q)?;
        if pq.is_nan() || pq <= 0.0 {
            let what =
                format!("p.Ap = {pq:e} is not positive: the operator or preconditioner is not SPD");
            return Err(stalled(what, it, &history, stop.tol));
        }
        let alpha = rz / pq;
        step_site.run(&CgStep {
            x: x.view_mut(),
            r: r.view_mut(),
            p: p.view(),
            q: q.view(),
            alpha,
        })?;
        let rel = engine.dot(&r, &r)?.sqrt() / b_norm;
        history.push(rel);
        progress(it, rel);
        if rel < stop.tol {
            let x = shape.extract(&x.download()?);
            return Ok((x, report(it, history, mg)));
        }
        if rel < best {
            (best, best_at) = (rel, it);
        } else if it - best_at >= 50 || !rel.is_finite() {
            return Err(stalled(
                "the residual stopped falling".into(),
                it,
                &history,
                stop.tol,
            ));
        }
        mg.apply(&r, &mut z)?;
        let rz_new = engine.dot(&r, &z)?;
        let beta = rz_new / rz;
        rz = rz_new;
        direction_site.run(&CgDirection {
            p: p.view_mut(),
            z: z.view(),
            beta,
        })?;
    }
    Err(stalled(
        "the iteration limit was reached".into(),
        stop.max_iter,
        &history,
        stop.tol,
    ))
}
