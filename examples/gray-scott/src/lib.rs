//! Gray–Scott reaction–diffusion on lattice-gpu: the problem (grid, model, time step checked for
//! stability, initial state) and the simulation that runs the point updates of `gray-scott-kernels`
//! on any loop engine (the CPU, or the GPU with a fixed or an auto-tuned launch).
//!
//! The grid has `nx x ny (x nz)` interior points with spacing `h` and a one-point margin on every side
//! that holds the fixed boundary state `u = 1, v = 0`: the reaction's trivial steady state, as if the
//! grid sat in a reservoir of fresh `u`.

use std::time::Instant;

use gray_scott_kernels::{Coefficients, GrayScott2d, GrayScott3d, GrayScottReal};
use lattice_gpu::host::engine::{LoopEngine, TuningReport};
use lattice_gpu::host::field::fmt_dims;
use lattice_gpu::host::{Element, Field, Gpu, HostLoopEngine, Loop2D, Loop3D, Shape};
use lattice_gpu::kernels::device::math::Real;

/// Errors of the Gray–Scott application.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A parameter that cannot work, with the reason and the fix.
    #[error("{0}")]
    Invalid(String),
    /// An error of the runtime (GPU, memory).
    #[error(transparent)]
    Host(#[from] lattice_gpu::host::Error),
    /// A file could not be written.
    #[error(transparent)]
    Io(#[from] lattice_gpu::formats::IoError),
}

/// Results of the Gray–Scott application.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Loads this crate's GPU kernels (built by `build.rs`) on `gpu`; needed once before a GPU engine
/// runs a [`Simulation`].
pub fn load_kernels(gpu: &Gpu) -> Result<()> {
    Ok(gpu.load(&lattice_gpu::host::ptx_module!("gray_scott_kernels"))?)
}

/// Interior grid points: a 2-D or a 3-D grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grid {
    /// `[nx, ny]`.
    Plane([usize; 2]),
    /// `[nx, ny, nz]`.
    Volume([usize; 3]),
}

impl Grid {
    /// Parses `N` (a cube), `NXxNY` (2-D) or `NXxNYxNZ`.
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        match lattice_gpu::cli::parse_dims(s)?.as_slice() {
            [n] => Ok(Grid::Volume([*n; 3])),
            [x, y] => Ok(Grid::Plane([*x, *y])),
            [x, y, z] => Ok(Grid::Volume([*x, *y, *z])),
            _ => Err(format!(
                "size `{s}` must be N, NXxNY or NXxNYxNZ (e.g. 128, 512x512 or 64x64x128)"
            )),
        }
    }

    /// 2 or 3.
    pub fn dims(&self) -> usize {
        match self {
            Grid::Plane(_) => 2,
            Grid::Volume(_) => 3,
        }
    }

    /// `[nx, ny, nz]`, with `nz = 1` for a 2-D grid.
    pub fn size(&self) -> [usize; 3] {
        match *self {
            Grid::Plane([x, y]) => [x, y, 1],
            Grid::Volume(s) => s,
        }
    }

    /// The array shape numpy gives the interior: `(nz, ny, nx)` or `(ny, nx)` (x fastest, C order).
    pub fn npy_shape(&self) -> Vec<usize> {
        match *self {
            Grid::Plane([x, y]) => vec![y, x],
            Grid::Volume([x, y, z]) => vec![z, y, x],
        }
    }

    /// Interior points.
    pub fn points(&self) -> usize {
        self.size().iter().product()
    }
}

impl std::fmt::Display for Grid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Grid::Plane(s) => f.write_str(&fmt_dims(s)),
            Grid::Volume(s) => f.write_str(&fmt_dims(s)),
        }
    }
}

/// The model's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    /// Feed rate F.
    pub f: f64,
    /// Kill rate k.
    pub k: f64,
    /// Diffusivity of u.
    pub du: f64,
    /// Diffusivity of v.
    pub dv: f64,
    /// Grid spacing h.
    pub h: f64,
}

impl Default for Model {
    /// Pearson's (1993) spots-and-stripes regime in lattice units: `F = 0.04, k = 0.06, Du = 0.2,
    /// Dv = 0.1, h = 1`.
    fn default() -> Self {
        Self {
            f: 0.04,
            k: 0.06,
            du: 0.2,
            dv: 0.1,
            h: 1.0,
        }
    }
}

/// A Gray–Scott problem: grid, model and a time step the explicit scheme is stable with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Problem {
    /// The grid.
    pub grid: Grid,
    /// The model.
    pub model: Model,
    /// The time step.
    pub dt: f64,
}

/// The default time step as a fraction of the largest stable one ([`Problem::max_dt`]).
pub const DEFAULT_DT_FRACTION: f64 = 0.8;

/// The interior values of `u` and `v`, x fastest (numpy's C order of shape [`Grid::npy_shape`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Fields<T> {
    /// `u`.
    pub u: Vec<T>,
    /// `v`.
    pub v: Vec<T>,
}

impl Problem {
    /// A problem on `grid` with `model`; `dt` defaults to [`DEFAULT_DT_FRACTION`] of
    /// [`max_dt`](Self::max_dt), at most 1. Refuses empty grids, negative or non-finite parameters
    /// and unstable time steps, saying what to change.
    pub fn new(grid: Grid, model: Model, dt: Option<f64>) -> Result<Self> {
        let invalid = |msg: String| Err(Error::Invalid(msg));
        if grid.size().contains(&0) {
            return invalid(format!(
                "grid {grid} has an axis of zero points; give at least 1 point per axis (e.g. --size 128)"
            ));
        }
        let Model { f, k, du, dv, h } = model;
        for (name, value) in [("--f", f), ("--k", k), ("--du", du), ("--dv", dv)] {
            if !(value.is_finite() && value >= 0.0) {
                return invalid(format!(
                    "{name} {value} is not a rate: give a finite value >= 0"
                ));
            }
        }
        if !(h.is_finite() && h > 0.0) {
            return invalid(format!(
                "--dx {h} is not a grid spacing: give a finite value > 0"
            ));
        }
        let max_dt = Self::max_dt(grid, &model);
        let dt = dt.unwrap_or((DEFAULT_DT_FRACTION * max_dt).min(1.0));
        if !(dt.is_finite() && dt > 0.0) {
            return invalid(format!(
                "--dt {dt} is not a time step: give a finite value > 0"
            ));
        }
        let p = Self { grid, model, dt };
        if p.stability_number() > 1.0 {
            return invalid(format!(
                "--dt {dt} is unstable: explicit Euler with the {}-point Laplacian needs \
                 dt max(Du, Dv) {}/h^2 <= 1, and here it is {:.4}; use --dt <= {max_dt:.6} or leave \
                 --dt out for a stable default",
                2 * grid.dims() + 1,
                2 * grid.dims(),
                p.stability_number()
            ));
        }
        Ok(p)
    }

    /// The largest stable time step of the diffusion terms, `h^2 / (2 d max(Du, Dv))` on a
    /// `d`-dimensional grid (infinite without diffusion).
    ///
    /// A Fourier mode `exp(i theta . x / h)` is an eigenvector of the `(2d+1)`-point Laplacian with
    /// eigenvalue `-(4/h^2) sum_a sin^2(theta_a / 2)`, which lies in `[-4d/h^2, 0]`. One Euler step
    /// multiplies it by `1 - 4 D dt / h^2 sum_a sin^2(theta_a / 2)`, whose modulus stays at most 1 for
    /// every mode exactly when `4 d D dt / h^2 <= 2`, i.e. `dt D 2d / h^2 <= 1`: `dt <= h^2 / (6 D)`
    /// in 3-D, `h^2 / (4 D)` in 2-D. The reaction terms, linearised about the walls' state `(1, 0)`,
    /// add the decay rates `F` (to u) and `F + k` (to v), which exactly at the bound tip the fastest
    /// mode just over 1 (`dt (4 d D / h^2 + F + k) <= 2` is the linearised condition); they are small
    /// (below 0.2) where patterns form, and the default `dt` keeps a margin of a fifth for them.
    pub fn max_dt(grid: Grid, model: &Model) -> f64 {
        let d = model.du.max(model.dv);
        model.h * model.h / (2.0 * grid.dims() as f64 * d)
    }

    /// `dt max(Du, Dv) 2d / h^2`: the scheme is stable up to 1.
    pub fn stability_number(&self) -> f64 {
        let m = &self.model;
        self.dt * m.du.max(m.dv) * 2.0 * self.grid.dims() as f64 / (m.h * m.h)
    }

    /// The constants of the point update.
    pub fn coefficients<T: Real>(&self) -> Coefficients<T> {
        let m = &self.model;
        Coefficients::new(m.f, m.k, m.du, m.dv, m.h, self.dt)
    }

    /// The fields' shape for elements of `T`: the interior with a one-point margin holding the
    /// boundary state, rows aligned to 128 bytes where that costs at most a quarter more memory
    /// (a warp's loads of a row then touch one cache sector fewer).
    pub fn shape<T>(&self) -> Result<Shape> {
        let shape = match self.grid {
            Grid::Plane(s) => Shape::new_2d(s, 1)?,
            Grid::Volume(s) => Shape::new_3d(s, 1)?,
        };
        Ok(shape.aligned_rows(std::mem::size_of::<T>(), 1.25))
    }

    /// The usual start: `u = 1, v = 0`, except a centred square (cube) about a fifth of the grid wide
    /// where `u = 0.5, v = 0.25`, each perturbed by up to ±0.01 of noise from `seed` so that the
    /// pattern breaks the grid's symmetry. The same seed gives the same state on every machine.
    pub fn initial<T: Real>(&self, seed: u64) -> Fields<T> {
        let n = self.grid.size();
        let patch = n.map(|n| {
            let side = n.div_ceil(5);
            let lo = (n - side) / 2;
            lo..lo + side
        });
        let mut rng = SplitMix64(seed);
        let mut noise = || 0.01 * (2.0 * rng.uniform() - 1.0);
        let (mut u, mut v) = (
            Vec::with_capacity(self.grid.points()),
            Vec::with_capacity(self.grid.points()),
        );
        for k in 0..n[2] {
            for j in 0..n[1] {
                for i in 0..n[0] {
                    let inside =
                        patch[0].contains(&i) && patch[1].contains(&j) && patch[2].contains(&k);
                    let (a, b) = if inside {
                        (0.5 + noise(), 0.25 + noise())
                    } else {
                        (1.0, 0.0)
                    };
                    u.push(T::from_f64(a));
                    v.push(T::from_f64(b));
                }
            }
        }
        Fields { u, v }
    }

    /// Bytes a step moves at least: `u` and `v` read and written once per point.
    pub fn bytes_per_step<T>(&self) -> f64 {
        4.0 * std::mem::size_of::<T>() as f64 * self.grid.points() as f64
    }
}

/// SplitMix64 (Steele, Lea and Flood): a tiny generator that is the same everywhere, so that a seed
/// names one initial state.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The loop of a 2-D or a 3-D grid.
enum Stepper<'e, E: LoopEngine> {
    Plane(Loop2D<'e, E>),
    Volume(Loop3D<'e, E>),
}

/// A running simulation on an engine: the fields `u`, `v` and the next step's, and the loop (with
/// the auto-tuner's state, on that engine).
pub struct Simulation<'e, E: LoopEngine, T: Element> {
    grid: Grid,
    shape: Shape,
    c: Coefficients<T>,
    stepper: Stepper<'e, E>,
    now: [E::Field<T>; 2],
    next: [E::Field<T>; 2],
    steps: usize,
}

impl<'e, E: LoopEngine, T: Element + GrayScottReal> Simulation<'e, E, T> {
    /// Sets up `problem` on `engine` from the state `initial` makes. Memory is checked first, so a
    /// grid too large fails with a clear error before anything big is allocated.
    pub fn new(
        engine: &'e E,
        problem: &Problem,
        initial: impl FnOnce() -> Fields<T>,
    ) -> Result<Self> {
        let shape = problem.shape::<T>()?;
        let what = |n| format!("{n} {} {} fields", fmt_dims(&shape.size()), T::NAME);
        engine.check_fits(4 * shape.bytes::<T>(), &what(4))?;
        // The initial state and one whole array at a time live in host memory whatever the engine.
        HostLoopEngine.check_fits(3 * shape.bytes::<T>(), &what(3))?;
        let initial = initial();
        let points = problem.grid.points();
        if initial.u.len() != points || initial.v.len() != points {
            return Err(Error::Invalid(format!(
                "the initial state has {} values of u and {} of v; the {} grid needs {points} of each",
                initial.u.len(),
                initial.v.len(),
                problem.grid
            )));
        }
        let field = |interior: &[T], wall: T| -> Result<E::Field<T>> {
            let mut f = engine.alloc::<T>(shape)?;
            f.upload(&shape.embed(interior, wall)?)?;
            Ok(f)
        };
        let now = [field(&initial.u, T::ONE)?, field(&initial.v, T::ZERO)?];
        drop(initial);
        // The next step's interior starts as NaN: a point the kernel fails to write then shows up
        // in the result (NaN spreads through the stencil) instead of passing as a stale value.
        let nan = vec![T::from_f64(f64::NAN); points];
        let next = [field(&nan, T::ONE)?, field(&nan, T::ZERO)?];
        let range = shape.interior_range();
        let stepper = match problem.grid {
            Grid::Plane(_) => Stepper::Plane(Loop2D::new(engine, range)?),
            Grid::Volume(_) => Stepper::Volume(Loop3D::new(engine, range)?),
        };
        Ok(Self {
            grid: problem.grid,
            shape,
            c: problem.coefficients(),
            stepper,
            now,
            next,
            steps: 0,
        })
    }

    /// Queues one step (on a GPU the host does not wait for it).
    pub fn step(&mut self) -> lattice_gpu::host::Result<()> {
        let [u, v] = &self.now;
        let [unew, vnew] = &mut self.next;
        let (u, v, unew, vnew, c) = (u.view(), v.view(), unew.view_mut(), vnew.view_mut(), self.c);
        match &mut self.stepper {
            Stepper::Plane(lp) => lp.run(&GrayScott2d::new(u, v, unew, vnew, c))?,
            Stepper::Volume(lp) => lp.run(&GrayScott3d::new(u, v, unew, vnew, c))?,
        }
        std::mem::swap(&mut self.now, &mut self.next);
        self.steps += 1;
        Ok(())
    }

    /// Queues `n` steps.
    pub fn advance(&mut self, n: usize) -> lattice_gpu::host::Result<()> {
        (0..n).try_for_each(|_| self.step())
    }

    /// Steps taken so far.
    pub fn steps_done(&self) -> usize {
        self.steps
    }

    /// The current `u` and `v` at the interior points, once the queued steps have finished.
    pub fn fields(&self) -> Result<Fields<T>> {
        let [u, v] = &self.now;
        Ok(Fields {
            u: self.shape.extract(&u.download()?),
            v: self.shape.extract(&v.download()?),
        })
    }

    /// The current `v` in the interior of the middle z plane (the grid itself in 2-D), x fastest:
    /// one plane is copied, not the whole field.
    pub fn v_mid_plane(&self) -> Result<Vec<T>> {
        let ([nx, ny, nz], first, size) = (self.grid.size(), self.shape.first(), self.shape.size());
        let plane = self.now[1]
            .download_span(self.shape.index(0, 0, first[2] + nz / 2), size[0] * size[1])?;
        let mut out = Vec::with_capacity(nx * ny);
        for j in 0..ny {
            let row = first[0] + size[0] * (first[1] + j);
            out.extend_from_slice(&plane[row..row + nx]);
        }
        Ok(out)
    }

    /// The auto-tuner's result, once it has one (engines that do not tune have none).
    pub fn tuning(&self) -> Option<&TuningReport> {
        match &self.stepper {
            Stepper::Plane(lp) => E::tuning(lp.info()),
            Stepper::Volume(lp) => E::tuning(lp.info()),
        }
    }

    /// (steps timed, steps needed) while the auto-tuner is still timing launch shapes.
    pub fn tuning_progress(&self) -> Option<(usize, usize)> {
        match &self.stepper {
            Stepper::Plane(lp) => E::tuning_progress(lp.info()),
            Stepper::Volume(lp) => E::tuning_progress(lp.info()),
        }
    }
}

/// What [`simulate`] produced.
#[derive(Clone, Debug)]
pub struct Run<T> {
    /// The final state.
    pub fields: Fields<T>,
    /// Seconds the steps took (frames excluded).
    pub seconds: f64,
    /// The auto-tuner's result, when the engine tunes.
    pub tuning: Option<TuningReport>,
    /// (steps timed, steps needed) when the run ended before the tuner had timed every candidate.
    pub tuning_unfinished: Option<(usize, usize)>,
}

/// Runs `steps` steps of `problem` on `engine` from the state `initial` makes. With `frame_every =
/// Some(n)`, `on_frame(step, v)` gets the middle z plane of `v` ([`Simulation::v_mid_plane`]) at steps
/// 0, n, 2n, ...; `progress(step)` is called now and then. Both run outside the timed steps.
pub fn simulate<E: LoopEngine, T: Element + GrayScottReal>(
    engine: &E,
    problem: &Problem,
    initial: impl FnOnce() -> Fields<T>,
    steps: usize,
    frame_every: Option<usize>,
    mut on_frame: impl FnMut(usize, &[T]) -> Result<()>,
    mut progress: impl FnMut(usize),
) -> Result<Run<T>> {
    let mut sim = Simulation::new(engine, problem, initial)?;
    let report_every = (steps / 100).max(1);
    let mut seconds = 0.0;
    loop {
        let s = sim.steps_done();
        if frame_every.is_some_and(|n| s % n == 0) {
            on_frame(s, &sim.v_mid_plane()?)?;
        }
        if s == steps {
            break;
        }
        // Up to the next frame or report, timed as a whole: on a GPU the steps run back to back.
        let mut until = (s / report_every + 1) * report_every;
        if let Some(n) = frame_every {
            until = until.min((s / n + 1) * n);
        }
        let start = Instant::now();
        sim.advance(until.min(steps) - s)?;
        engine.synchronize()?;
        seconds += start.elapsed().as_secs_f64();
        progress(sim.steps_done());
    }
    Ok(Run {
        fields: sim.fields()?,
        seconds,
        tuning: sim.tuning().cloned(),
        tuning_unfinished: sim.tuning_progress(),
    })
}
