//! The geometric-multigrid V-cycle on any loop engine, in the precision `T` of its fields: levels that
//! halve every axis, the operator rediscretised on each (cell coefficients averaged over the 8 children),
//! a symmetric cycle (red-black smoothing reversed on the way up, restriction the scaled transpose of
//! prolongation) so that it can precondition conjugate gradients, and many smoothing sweeps on the
//! coarsest level.

use lattice_gpu_host::{Element, Field, Loop3D, LoopEngine, Shape};
use lattice_gpu_kernels::poisson::{
    Coeffs, CoeffsAos, Convert, Fill, Jacobi, ProlongAdd, RedBlack, Residual, Restrict,
};
use lattice_gpu_kernels::stencil::{GpuEntry, PointUpdate3D};

use crate::problem::{coarsen, stencil, Problem, Stencil};
use crate::{Error, Result};

/// The smoother of the V-cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Smoother {
    /// Weighted Jacobi, `omega = 2/3` (needs a second buffer; every cell independent).
    Jacobi,
    /// Red-black Gauss-Seidel, in place.
    RedBlack,
}

/// The shape of the V-cycle.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cycle {
    /// Levels, the finest included.
    pub levels: usize,
    /// The smoother.
    pub smoother: Smoother,
    /// Sweeps before and after the coarse correction.
    pub sweeps: usize,
    /// Sweeps on the coarsest level (its solve).
    pub coarse_sweeps: usize,
    /// The coefficients' layout (on every level, and in the f64 operator of CG).
    pub layout: Layout,
}

impl Default for Cycle {
    fn default() -> Self {
        Self {
            levels: 4,
            smoother: Smoother::RedBlack,
            sweeps: 2,
            coarse_sweeps: 40,
            layout: Layout::Soa,
        }
    }
}

/// A field of `shape` on `engine` holding `interior` (x fastest, rounded to `T`), its margins zero.
pub fn upload<E: LoopEngine, T: Element>(
    engine: &E,
    shape: Shape,
    interior: &[f64],
) -> Result<E::Field<T>> {
    let data: Vec<T> = interior.iter().map(|&v| T::from_f64(v)).collect();
    let mut f = engine.alloc::<T>(shape)?;
    f.upload(&shape.embed(&data, T::ZERO)?)?;
    Ok(f)
}

/// How the 7 coefficients of each cell are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// One array per coefficient (a warp's loads of one coefficient are contiguous).
    #[default]
    Soa,
    /// The 7 coefficients of a cell together, cell after cell.
    Aos,
}

/// The coefficient fields of a stencil on an engine, in either layout.
pub enum StencilFields<F> {
    /// One field per coefficient.
    Soa([F; 7]),
    /// One field of `7 * len` values.
    Aos(F),
}

/// The coefficients as the point updates take them, in either layout.
#[derive(Clone, Copy, Debug)]
pub enum OperatorView<T> {
    /// Structure of arrays.
    Soa(Coeffs<T>),
    /// Array of structures.
    Aos(CoeffsAos<T>),
}

/// Runs `$body` with `$a` bound to the concrete coefficient view of `$view` (each layout is its own
/// kernel).
macro_rules! with_operator {
    ($view:expr, $a:ident => $body:expr) => {
        match $view {
            OperatorView::Soa($a) => $body,
            OperatorView::Aos($a) => $body,
        }
    };
}
pub(crate) use with_operator;

impl<F> StencilFields<F> {
    /// Uploads `s` to fields of `shape` on `engine` in `layout`.
    pub fn new<E: LoopEngine<Field<T> = F>, T: Element>(
        engine: &E,
        shape: Shape,
        s: &Stencil,
        layout: Layout,
    ) -> Result<Self>
    where
        F: Field<T>,
    {
        let f = |i: usize| upload::<E, T>(engine, shape, &s[i]);
        Ok(match layout {
            Layout::Soa => Self::Soa([f(0)?, f(1)?, f(2)?, f(3)?, f(4)?, f(5)?, f(6)?]),
            Layout::Aos => {
                // Array index i of `shape` holds its cell's coefficients at 7 i .. 7 i + 7 (margins 0).
                let whole: Vec<Vec<f64>> = s
                    .iter()
                    .map(|c| shape.embed(c, 0.0))
                    .collect::<std::result::Result<_, _>>()?;
                let data: Vec<T> = (0..7 * shape.len())
                    .map(|k| T::from_f64(whole[k % 7][k / 7]))
                    .collect();
                let wide =
                    Shape::new_3d([7 * shape.size()[0], shape.size()[1], shape.size()[2]], 0)?;
                let mut field = engine.alloc::<T>(wide)?;
                field.upload(&data)?;
                Self::Aos(field)
            }
        })
    }

    /// The coefficients as the point updates take them.
    pub fn view<T: Element>(&self) -> OperatorView<T>
    where
        F: Field<T>,
    {
        match self {
            Self::Soa(a) => OperatorView::Soa(Coeffs {
                diag: a[0].view(),
                xm: a[1].view(),
                xp: a[2].view(),
                ym: a[3].view(),
                yp: a[4].view(),
                zm: a[5].view(),
                zp: a[6].view(),
            }),
            Self::Aos(c) => OperatorView::Aos(CoeffsAos { c: c.view() }),
        }
    }
}

struct Level<F> {
    shape: Shape,
    a: StencilFields<F>,
    x: F,
    b: F,
    r: F,
}

/// The kinds of loop a level runs (each keeps its own site, so an auto-tuning engine tunes each once).
#[derive(Clone, Copy)]
enum Kind {
    Fill = 0,
    Smooth = 1,
    Residual = 2,
    Restrict = 3,
    Prolong = 4,
    ConvertIn = 5,
    ConvertOut = 6,
}

/// The multigrid hierarchy of a problem on an engine, in precision `T`.
pub struct Multigrid<'e, E: LoopEngine, T: Element> {
    engine: &'e E,
    levels: Vec<Level<E::Field<T>>>,
    sites: Vec<[Loop3D<'e, E>; 7]>,
    cycle: Cycle,
    /// Seconds spent on each level (kept when `timed`).
    seconds: Vec<f64>,
    timed: bool,
}

/// What conjugate gradients needs of a preconditioner on engine `E`.
pub trait Preconditioner<E: LoopEngine> {
    /// `z = M^-1 r`, with `r` and `z` f64 fields of the problem's shape (margin 1) on the engine.
    fn apply(&mut self, r: &E::Field<f64>, z: &mut E::Field<f64>) -> Result<()>;
    /// The cells of each level and the seconds spent on it (zero unless timed).
    fn level_times(&self) -> Vec<([usize; 3], f64)>;
}

/// The number of levels `n` allows: halving while every axis stays even and at least 2.
pub fn max_levels(n: [usize; 3]) -> usize {
    let mut m = n;
    let mut levels = 1;
    while m.iter().all(|&v| v % 2 == 0 && v >= 4) {
        m = m.map(|v| v / 2);
        levels += 1;
    }
    levels
}

impl<'e, E: LoopEngine, T: Element> Multigrid<'e, E, T>
where
    Fill<T>: GpuEntry,
    Jacobi<T>: GpuEntry,
    RedBlack<T>: GpuEntry,
    Residual<T>: GpuEntry,
    Jacobi<T, CoeffsAos<T>>: GpuEntry,
    RedBlack<T, CoeffsAos<T>>: GpuEntry,
    Residual<T, CoeffsAos<T>>: GpuEntry,
    Restrict<T>: GpuEntry,
    ProlongAdd<T>: GpuEntry,
    Convert<f64, T>: GpuEntry,
    Convert<T, f64>: GpuEntry,
{
    /// Builds the levels of `problem` (checked) on `engine`. Fails, saying how many levels the sizes
    /// allow, when they do not halve `cycle.levels - 1` times.
    pub fn new(engine: &'e E, problem: &Problem, cycle: Cycle) -> Result<Self> {
        problem.check()?;
        let most = max_levels(problem.n);
        if cycle.levels == 0 || cycle.levels > most {
            return Err(Error::Invalid(format!(
                "{} levels asked for, but the {}x{}x{} grid halves only to {most} levels (every axis must \
                 stay even and at least 2 cells); use --levels {most} or sizes with more factors of 2",
                cycle.levels, problem.n[0], problem.n[1], problem.n[2]
            )));
        }
        let (mut n, mut h, mut c) = (problem.n, problem.h, problem.c.clone());
        let mut levels = Vec::with_capacity(cycle.levels);
        for l in 0..cycle.levels {
            if l > 0 {
                c = coarsen(n, &c);
                n = n.map(|v| v / 2);
                h = h.map(|v| 2.0 * v);
            }
            let shape = Shape::new_3d(n, 1)?;
            let zeros = vec![0.0; n.iter().product()];
            let field = || upload::<E, T>(engine, shape, &zeros);
            levels.push(Level {
                shape,
                a: StencilFields::new(
                    engine,
                    shape,
                    &stencil(n, h, &c, problem.walls),
                    cycle.layout,
                )?,
                x: field()?,
                b: field()?,
                r: field()?,
            });
        }
        let sites = levels
            .iter()
            .map(|lv| {
                let range = lv.shape.interior_range();
                let site = || Loop3D::new(engine, range);
                Ok([
                    site()?,
                    site()?,
                    site()?,
                    site()?,
                    site()?,
                    site()?,
                    site()?,
                ])
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            engine,
            seconds: vec![0.0; levels.len()],
            levels,
            sites,
            cycle,
            timed: false,
        })
    }

    /// Keeps the time spent on each level ([`Preconditioner::level_times`]), waiting for the engine after
    /// each level's work, which costs some overlap on a GPU.
    pub fn timed(mut self, timed: bool) -> Self {
        self.timed = timed;
        self
    }

    /// The cells of each level.
    fn level_sizes(&self) -> Vec<[usize; 3]> {
        self.levels
            .iter()
            .map(|l| {
                let r = l.shape.interior_range();
                [0, 1, 2].map(|a| (r.end[a] - r.begin[a]) as usize)
            })
            .collect()
    }

    fn run<U: PointUpdate3D + GpuEntry>(&mut self, l: usize, kind: Kind, update: &U) -> Result<()> {
        let start = self.timed.then(std::time::Instant::now);
        self.sites[l][kind as usize].run(update)?;
        if let Some(t) = start {
            self.engine.synchronize()?;
            self.seconds[l] += t.elapsed().as_secs_f64();
        }
        Ok(())
    }

    fn operator(&self, l: usize) -> OperatorView<T> {
        self.levels[l].a.view()
    }

    /// `sweeps` smoothing sweeps on level `l`; `up` reverses the colour order (symmetric cycle).
    fn smooth(&mut self, l: usize, sweeps: usize, up: bool) -> Result<()> {
        let op = self.operator(l);
        for _ in 0..sweeps {
            match self.cycle.smoother {
                Smoother::RedBlack => {
                    let order = if up { [1, 0] } else { [0, 1] };
                    for parity in order {
                        let lv = &mut self.levels[l];
                        let (x, b) = (lv.x.view_mut(), lv.b.view());
                        with_operator!(op, a => self.run(l, Kind::Smooth, &RedBlack { a, x, b, parity, omega: T::ONE }))?;
                    }
                }
                Smoother::Jacobi => {
                    let lv = &mut self.levels[l];
                    let (x, b, out) = (lv.x.view(), lv.b.view(), lv.r.view_mut());
                    let omega = T::from_f64(2.0 / 3.0);
                    with_operator!(op, a => self.run(l, Kind::Smooth, &Jacobi { a, x, b, out, omega }))?;
                    let lv = &mut self.levels[l];
                    std::mem::swap(&mut lv.x, &mut lv.r);
                }
            }
        }
        Ok(())
    }

    /// One V-cycle from `x = 0` on the finest level for the right-hand side set with
    /// [`set_rhs`](Self::set_rhs): an approximate solve, symmetric and positive definite as an operator.
    pub fn vcycle(&mut self) -> Result<()> {
        let last = self.levels.len() - 1;
        for l in 0..=last {
            let fill = Fill {
                x: self.levels[l].x.view_mut(),
                value: T::ZERO,
            };
            self.run(l, Kind::Fill, &fill)?;
            if l == last {
                self.smooth(l, self.cycle.coarse_sweeps, false)?;
                break;
            }
            self.smooth(l, self.cycle.sweeps, false)?;
            let op = self.operator(l);
            let lv = &mut self.levels[l];
            let (x, b, r) = (lv.x.view(), lv.b.view(), lv.r.view_mut());
            with_operator!(op, a => self.run(l, Kind::Residual, &Residual { a, x, b, r }))?;
            let fine = self.levels[l].shape.size().map(|v| v as u32);
            let (fine_levels, coarse_levels) = self.levels.split_at_mut(l + 1);
            let restrict = Restrict {
                r: fine_levels[l].r.view(),
                b: coarse_levels[0].b.view_mut(),
                fine,
            };
            self.run(l + 1, Kind::Restrict, &restrict)?;
        }
        for l in (0..last).rev() {
            let coarse = self.levels[l + 1].shape.size().map(|v| v as u32);
            let (fine_levels, coarse_levels) = self.levels.split_at_mut(l + 1);
            let prolong = ProlongAdd {
                e: coarse_levels[0].x.view(),
                x: fine_levels[l].x.view_mut(),
                coarse,
            };
            self.run(l, Kind::Prolong, &prolong)?;
            self.smooth(l, self.cycle.sweeps, true)?;
        }
        Ok(())
    }

    /// Sets the finest level's right-hand side (interior cells, x fastest).
    pub fn set_rhs(&mut self, b: &[f64]) -> Result<()> {
        let lv = &mut self.levels[0];
        let data: Vec<T> = b.iter().map(|&v| T::from_f64(v)).collect();
        lv.b.upload(&lv.shape.embed(&data, T::ZERO)?)?;
        Ok(())
    }

    /// The finest level's iterate (interior cells, x fastest).
    pub fn solution(&self) -> Result<Vec<f64>> {
        let lv = &self.levels[0];
        Ok(lv
            .shape
            .extract(&lv.x.download()?)
            .iter()
            .map(|v| v.to_f64())
            .collect())
    }

    /// `M^-1 r`: one V-cycle for right-hand side `r`.
    pub fn precondition(&mut self, r: &[f64]) -> Result<Vec<f64>> {
        self.set_rhs(r)?;
        self.vcycle()?;
        self.solution()
    }
}

impl<'e, E: LoopEngine, T: Element> Preconditioner<E> for Multigrid<'e, E, T>
where
    Fill<T>: GpuEntry,
    Jacobi<T>: GpuEntry,
    RedBlack<T>: GpuEntry,
    Residual<T>: GpuEntry,
    Jacobi<T, CoeffsAos<T>>: GpuEntry,
    RedBlack<T, CoeffsAos<T>>: GpuEntry,
    Residual<T, CoeffsAos<T>>: GpuEntry,
    Restrict<T>: GpuEntry,
    ProlongAdd<T>: GpuEntry,
    Convert<f64, T>: GpuEntry,
    Convert<T, f64>: GpuEntry,
{
    /// `r` converted into the finest right-hand side, one V-cycle, the result converted back: nothing
    /// leaves the engine.
    fn apply(&mut self, r: &E::Field<f64>, z: &mut E::Field<f64>) -> Result<()> {
        let to = self.levels[0].b.view_mut();
        self.run(0, Kind::ConvertIn, &Convert { from: r.view(), to })?;
        self.vcycle()?;
        let from = self.levels[0].x.view();
        self.run(
            0,
            Kind::ConvertOut,
            &Convert {
                from,
                to: z.view_mut(),
            },
        )
    }

    fn level_times(&self) -> Vec<([usize; 3], f64)> {
        self.level_sizes()
            .into_iter()
            .zip(self.seconds.iter().copied())
            .collect()
    }
}
