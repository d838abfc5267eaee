//! Conjugate gradients in f64, preconditioned by a multigrid V-cycle in f32 (mixed) or f64, and the
//! f64 operator they iterate with. The report's point: the f32 preconditioner costs half the bytes and
//! needs the same iterations, because CG in f64 corrects what the preconditioner leaves.

use lattice_gpu_host::{Field, Loop3D, LoopEngine, Shape};
use lattice_gpu_kernels::poisson::Apply;

use crate::multigrid::{
    upload, with_operator, Cycle, Layout, Multigrid, OperatorView, StencilFields,
};
use crate::problem::Problem;
use crate::{Error, Result};

/// The f64 operator `A` of a problem on an engine.
pub struct Operator<'e, E: LoopEngine> {
    site: Loop3D<'e, E>,
    shape: Shape,
    a: StencilFields<E::Field<f64>>,
    x: E::Field<f64>,
    y: E::Field<f64>,
}

impl<'e, E: LoopEngine> Operator<'e, E> {
    /// The problem's operator (checked) on `engine`, its coefficients in `layout`.
    pub fn new(engine: &'e E, problem: &Problem, layout: Layout) -> Result<Self> {
        problem.check()?;
        let shape = Shape::new_3d(problem.n, 1)?;
        let zeros = vec![0.0; problem.cells()];
        Ok(Self {
            site: Loop3D::new(engine, shape.interior_range())?,
            shape,
            a: StencilFields::new(engine, shape, &problem.stencil(), layout)?,
            x: upload::<E, f64>(engine, shape, &zeros)?,
            y: upload::<E, f64>(engine, shape, &zeros)?,
        })
    }

    /// `A v` (interior cells, x fastest).
    pub fn apply(&mut self, v: &[f64]) -> Result<Vec<f64>> {
        self.x.upload(&self.shape.embed(v, 0.0)?)?;
        let (x, y) = (self.x.view(), self.y.view_mut());
        with_operator!(self.a.view(), a => self.site.run(&Apply { a, x, y }))?;
        Ok(self.shape.extract(&self.y.download()?))
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

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Preconditioned conjugate gradients for `A x = b` from `x = 0`, to `|r| / |b| < tol`, calling
/// `progress(iteration, |r| / |b|)` after each iteration. Fails with the residual history when
/// `max_iter` runs out or the residual has not fallen for 50 iterations.
pub fn pcg(
    mut apply: impl FnMut(&[f64]) -> Result<Vec<f64>>,
    mut precondition: impl FnMut(&[f64]) -> Result<Vec<f64>>,
    b: &[f64],
    tol: f64,
    max_iter: usize,
    progress: &mut dyn FnMut(usize, f64),
) -> Result<(Vec<f64>, Report)> {
    if tol.is_nan() || tol <= 0.0 || tol >= 1.0 || max_iter == 0 {
        return Err(Error::Invalid(format!(
            "tolerance {tol} must be in (0, 1) and the iteration limit ({max_iter}) at least 1"
        )));
    }
    let b_norm = dot(b, b).sqrt();
    let mut x = vec![0.0; b.len()];
    let mut history = vec![1.0];
    if b_norm == 0.0 {
        return Ok((
            x,
            Report {
                iterations: 0,
                history,
                levels: Vec::new(),
            },
        ));
    }
    let mut r = b.to_vec();
    let mut z = precondition(&r)?;
    let mut p = z.clone();
    let mut rz = dot(&r, &z);
    let (mut best, mut best_at) = (1.0, 0);
    for it in 1..=max_iter {
        let q = apply(&p)?;
        let pq = dot(&p, &q);
        if pq.is_nan() || pq <= 0.0 {
            return Err(stalled(
                format!("p.Ap = {pq:e} is not positive: the operator or preconditioner is not SPD"),
                it,
                &history,
                tol,
            ));
        }
        let alpha = rz / pq;
        for k in 0..x.len() {
            x[k] += alpha * p[k];
            r[k] -= alpha * q[k];
        }
        let rel = dot(&r, &r).sqrt() / b_norm;
        history.push(rel);
        progress(it, rel);
        if rel < tol {
            return Ok((
                x,
                Report {
                    iterations: it,
                    history,
                    levels: Vec::new(),
                },
            ));
        }
        if rel < best {
            (best, best_at) = (rel, it);
        } else if it - best_at >= 50 || !rel.is_finite() {
            return Err(stalled(
                "the residual stopped falling".into(),
                it,
                &history,
                tol,
            ));
        }
        z = precondition(&r)?;
        let rz_new = dot(&r, &z);
        let beta = rz_new / rz;
        rz = rz_new;
        for k in 0..p.len() {
            p[k] = z[k] + beta * p[k];
        }
    }
    Err(stalled(
        "the iteration limit was reached".into(),
        max_iter,
        &history,
        tol,
    ))
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

/// Solves `problem` by CG in f64 preconditioned with `cycle` in `precision`, on `engine`, reporting each
/// iteration to `progress`; with `timed`, the report has the time spent on each multigrid level.
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
    let mut op = Operator::new(engine, problem, cycle.layout)?;
    let apply = |v: &[f64]| op.apply(v);
    macro_rules! with {
        ($t:ty) => {{
            let mut mg = Multigrid::<E, $t>::new(engine, problem, cycle)?.timed(timed);
            let (x, mut report) = pcg(
                apply,
                |r| mg.precondition(r),
                &problem.rhs,
                tol,
                max_iter,
                progress,
            )?;
            if timed {
                report.levels = mg
                    .level_sizes()
                    .into_iter()
                    .zip(mg.level_seconds().iter().copied())
                    .collect();
            }
            Ok((x, report))
        }};
    }
    match precision {
        Precision::F32 => with!(f32),
        Precision::F64 => with!(f64),
    }
}
