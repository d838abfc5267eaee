//! The geometric-multigrid V-cycle on any loop engine, in the precision `T` of its fields: levels that
//! halve every axis, the operator rediscretised on each (cell coefficients averaged over the 8 children),
//! a symmetric cycle (red-black smoothing reversed on the way up, restriction the scaled transpose of
//! prolongation) so that it can precondition conjugate gradients, and many smoothing sweeps on the
//! coarsest level.

use std::time::Instant;

use rayon::prelude::*;

use lattice_gpu_host::solvers::cg::run_until_tuned;
use lattice_gpu_host::{Element, Field, Loop3D, LoopEngine, Shape, TuningReport};
use lattice_gpu_kernels::poisson::colours::{
    ConvertByColour, FromColoursDot, Halves, ProlongAddByColour, RedBlackByColour, ResidualByColour,
};
use lattice_gpu_kernels::poisson::{
    CoarseCycle, CoarseLevel, Coeffs, CoeffsAos, Convert, Fill, Jacobi, PoissonReal, ProlongAdd,
    RedBlack, Residual, Restrict, RestrictPairs, COARSE_MAX_LEVELS,
};
use lattice_gpu_kernels::stencil::{GpuEntry, PointUpdate3D, SumUpdate3D};
use lattice_gpu_kernels::vector::ConvertDot;

use crate::memory::{self, Memory};
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
    /// Levels of at most this many cells (below the finest, at most [`COARSE_MAX_LEVELS`] of them) run
    /// their part of the cycle as one block program ([`CoarseCycle`]): one launch instead of dozens whose
    /// overhead exceeds their work. 0 turns it off; the Jacobi smoother never fuses.
    pub fused_cells: usize,
    /// Records the preconditioner's whole application (conversions and V-cycle) once, as a CUDA graph
    /// on a GPU engine, and replays it: the host queues one launch instead of every kernel. Red-black
    /// only, once every loop is tuned, and never while the levels are timed.
    pub graph: bool,
    /// Stores the finest level by colour ([`colours`](lattice_gpu_kernels::poisson::colours)), and the
    /// next unless it is fused or the coarsest ([`COLOUR_LEVELS`]): each red-black half sweep then moves
    /// its own colour's values only (11 values per cell and sweep instead of 20). The same bits;
    /// red-black smoother and SoA layout only.
    pub colours: bool,
    /// Restricts with [`RestrictPairs`]: a thread per fine column, unit-stride loads, x pairs added by
    /// a warp shuffle (the ocean model's shuffle restriction). The same bits.
    pub shuffle_restrict: bool,
}

impl Cycle {
    /// Whether the finest level of `n` cells can be stored by colour ([`Cycle::colours`]): red-black
    /// smoother, SoA layout and an even number of cells in x.
    pub fn colours_apply(&self, n: [usize; 3]) -> bool {
        self.smoother == Smoother::RedBlack && self.layout == Layout::Soa && n[0].is_multiple_of(2)
    }
}

/// The default [`Cycle::coarse_sweeps`].
pub const COARSE_SWEEPS: usize = 40;

/// A [`Cycle::fused_cells`] to fuse with: 16^3 cells (about 11 per thread of the block the SoA program's
/// registers allow). Not the default until the fused cycle has been timed on a GPU.
pub const FUSED_CELLS: usize = 4096;

impl Default for Cycle {
    fn default() -> Self {
        Self {
            levels: 4,
            smoother: Smoother::RedBlack,
            sweeps: 2,
            coarse_sweeps: COARSE_SWEEPS,
            layout: Layout::Soa,
            fused_cells: 0,
            graph: false,
            colours: false,
            shuffle_restrict: false,
        }
    }
}

/// A field of `shape` on `engine` holding `interior` (x fastest, rounded to `T`), its margins zero.
pub fn upload<E: LoopEngine, T: Element>(
    engine: &E,
    shape: Shape,
    interior: &[f64],
) -> Result<E::Field<T>> {
    let mut f = engine.alloc::<T>(shape)?;
    upload_planes(&mut f, shape, interior, T::from_f64)?;
    Ok(f)
}

/// Fails unless `values` fill the interior of `shape`.
fn check_fills(shape: Shape, values: usize) -> Result<()> {
    let [nx, ny, nz] = shape.interior();
    if values != nx * ny * nz {
        return Err(Error::Invalid(format!(
            "{values} values do not fill the {nx}x{ny}x{nz} grid"
        )));
    }
    Ok(())
}

/// Writes `interior` (x fastest, each value through `map`) into `field`, a zeroed field of `shape`,
/// one array plane at a time through a buffer of one plane: no host copy of the whole array (on the
/// CPU engine a second copy of the field, on a GPU a host copy as large) is made on the way.
pub(crate) fn upload_planes<F: Field<T>, T: Element, S: Copy + Sync>(
    field: &mut F,
    shape: Shape,
    interior: &[S],
    map: impl Fn(S) -> T + Sync,
) -> Result<()> {
    check_fills(shape, interior.len())?;
    let [nx, ny, nz] = shape.interior();
    let [sx, sy, _] = shape.size();
    let first = shape.first();
    let mut plane = vec![T::ZERO; sx * sy];
    for k in 0..nz {
        // Rows in parallel; the margins of the plane stay zero.
        plane.par_chunks_mut(sx).enumerate().for_each(|(jj, row)| {
            let Some(j) = jj.checked_sub(first[1]).filter(|&j| j < ny) else {
                return;
            };
            let from = &interior[nx * (j + ny * k)..][..nx];
            for (to, &v) in row[first[0]..first[0] + nx].iter_mut().zip(from) {
                *to = map(v);
            }
        });
        field.upload_span(sx * sy * (first[2] + k), &plane)?;
    }
    Ok(())
}

/// The interior values (x fastest) of `field`, a field of `shape`, fetched one array plane at a time:
/// no copy of the whole array with its margins is made on the way.
pub(crate) fn download_interior<F: Field<T>, T: Element>(
    field: &F,
    shape: Shape,
) -> Result<Vec<T>> {
    let [nx, ny, nz] = shape.interior();
    let [sx, sy, _] = shape.size();
    let first = shape.first();
    let mut out = Vec::with_capacity(nx * ny * nz);
    for k in 0..nz {
        let plane = field.download_span(sx * sy * (first[2] + k), sx * sy)?;
        for j in 0..ny {
            let at = first[0] + sx * (first[1] + j);
            out.extend_from_slice(&plane[at..at + nx]);
        }
    }
    Ok(out)
}

/// Writes the stencil `s` into `field`, the zeroed AoS field of `shape` (margin 1, no padding; 7 values
/// per array index: array index `i`'s coefficients at `7 i .. 7 i + 7`, rounded to `T`, zero in the
/// margins), one array plane at a time through a buffer of one plane.
fn upload_interleaved<F: Field<T>, T: Element>(
    field: &mut F,
    shape: Shape,
    s: &Stencil,
) -> Result<()> {
    for c in s {
        check_fills(shape, c.len())?;
    }
    let [nx, ny, nz] = shape.interior();
    let [sx, sy, _] = shape.size();
    let first = shape.first();
    let mut plane = vec![T::ZERO; 7 * sx * sy];
    for k in 0..nz {
        plane
            .par_chunks_mut(7 * sx)
            .enumerate()
            .for_each(|(jj, row)| {
                let Some(j) = jj.checked_sub(first[1]).filter(|&j| j < ny) else {
                    return;
                };
                for i in 0..nx {
                    let cell = i + nx * (j + ny * k);
                    for (c, coeff) in s.iter().enumerate() {
                        row[7 * (first[0] + i) + c] = T::from_f64(coeff[cell]);
                    }
                }
            });
        field.upload_span(7 * sx * sy * (first[2] + k), &plane)?;
    }
    Ok(())
}

/// Writes `interior` (x fastest, rounded to `T`) into `field`, the zeroed two-half field of `halves`
/// for the natural array `shape` (as [`by_colour`] lays it out), one plane of each half at a time.
fn upload_by_colour<F: Field<T>, T: Element>(
    field: &mut F,
    shape: Shape,
    halves: Halves,
    interior: &[f64],
) -> Result<()> {
    check_fills(shape, interior.len())?;
    let [nx, ny, nz] = shape.interior();
    let first = shape.first();
    let pitch = halves.pitch as usize;
    let run = pitch * halves.n[1] as usize;
    let (mut red, mut black) = (vec![T::ZERO; run], vec![T::ZERO; run]);
    for k in 0..nz {
        let kk = first[2] + k;
        // Rows in parallel: row jj of the plane is slots jj pitch .. (jj + 1) pitch of each half.
        let rows = red.par_chunks_mut(pitch).zip(black.par_chunks_mut(pitch));
        rows.enumerate().for_each(|(jj, (red, black))| {
            let Some(j) = jj.checked_sub(first[1]).filter(|&j| j < ny) else {
                return;
            };
            for i in 0..nx {
                let ii = first[0] + i;
                let (c, at) = halves.place(ii as u32, jj as u32, kk as u32);
                let local = at - c as usize * halves.half() - run * kk - pitch * jj;
                let v = T::from_f64(interior[i + nx * (j + ny * k)]);
                match c {
                    0 => red[local] = v,
                    _ => black[local] = v,
                }
            }
        });
        field.upload_span(run * kk, &red)?;
        field.upload_span(halves.half() + run * kk, &black)?;
    }
    Ok(())
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
                let wide =
                    Shape::new_3d([7 * shape.size()[0], shape.size()[1], shape.size()[2]], 0)?;
                let mut field = engine.alloc::<T>(wide)?;
                upload_interleaved(&mut field, shape, s)?;
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
    /// For a level stored by colour: the natural array its two-half `a`, `x` and `b` stand for (`r`
    /// stays natural, for the restriction).
    halves: Option<Halves>,
}

/// The two-half array of `halves` ([`Halves::size`], no margin).
fn halves_shape(halves: Halves) -> Result<Shape> {
    Ok(Shape::new_3d(halves.size().map(|v| v as usize), 0)?)
}

/// `interior` (x fastest, rounded to `T`) in `shape`'s natural array with zero margins, moved into the
/// two halves of `halves` (a field of [`halves_shape`]).
fn by_colour<T: Element>(shape: Shape, halves: Halves, interior: &[f64]) -> Result<Vec<T>> {
    let natural = shape.embed_map(interior, T::ZERO, T::from_f64)?;
    let mut out = vec![T::ZERO; 2 * halves.half()];
    let [nx, ny, _] = halves.n;
    // Plane k of each colour is one contiguous run of its half: the planes fill in parallel.
    let run = halves.pitch as usize * ny as usize;
    let (red, black) = out.split_at_mut(halves.half());
    red.par_chunks_mut(run)
        .zip(black.par_chunks_mut(run))
        .enumerate()
        .for_each(|(k, (red, black))| {
            for j in 0..ny {
                // The x margins have no slots (zero, as the natural array's are).
                for i in 1..nx - 1 {
                    let (c, at) = halves.place(i, j, k as u32);
                    let v = natural[shape.index(i as usize, j as usize, k)];
                    let local = at - c as usize * halves.half() - run * k;
                    match c {
                        0 => red[local] = v,
                        _ => black[local] = v,
                    }
                }
            }
        });
    Ok(out)
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
    /// The level whose work is in flight and when it began (while timed).
    mark: Option<(usize, Instant)>,
    /// The recorded application up to the finest iterate ([`Cycle::graph`]) and the address of the `r`
    /// it reads.
    recording: Option<(usize, E::Recording)>,
}

/// What conjugate gradients needs of a preconditioner on engine `E`.
pub trait Preconditioner<E: LoopEngine> {
    /// `z = M^-1 r`, with `r` and `z` f64 fields of the problem's shape (margin 1) on the engine, and
    /// `r.z` into value `slot` of `sums` (queued there, as `LoopEngine::dot_into`).
    fn apply(
        &mut self,
        r: &E::Field<f64>,
        z: &mut E::Field<f64>,
        sums: &mut E::Field<f64>,
        slot: usize,
    ) -> Result<()>;
    /// The cells of each level and the seconds spent on it (zero unless timed).
    fn level_times(&self) -> Vec<([usize; 3], f64)>;
}

/// The first level of the fused coarse end of a cycle whose levels have `sizes` cells
/// ([`Multigrid::fused_from`]).
fn fused_from(sizes: &[[usize; 3]], cycle: &Cycle) -> Option<usize> {
    if cycle.smoother != Smoother::RedBlack || cycle.fused_cells == 0 {
        return None;
    }
    let last = sizes.len() - 1;
    let small = sizes
        .iter()
        .position(|n| n.iter().product::<usize>() <= cycle.fused_cells)?;
    Some(
        small
            .max(1)
            .max((last + 1).saturating_sub(COARSE_MAX_LEVELS)),
    )
    .filter(|&from| from <= last)
}

/// The most levels stored by colour ([`Cycle::colours`]): the finest and the next. (The next level,
/// an eighth of the finest, was latency-bound in the natural layout, its f32 sweeps at 40% of their
/// floor; the levels below are launch-bound or fused.)
pub const COLOUR_LEVELS: usize = 2;

/// How many of the finest levels of a cycle whose levels have `sizes` cells are stored by colour: with
/// [`Cycle::colours`], up to [`COLOUR_LEVELS`] of them, each with an even number of cells in x, and
/// below the finest, neither the coarsest nor fused.
fn colour_levels(sizes: &[[usize; 3]], cycle: &Cycle) -> usize {
    if !cycle.colours {
        return 0;
    }
    let unfused = fused_from(sizes, cycle).unwrap_or(sizes.len());
    let below = unfused.min(sizes.len() - 1).max(1);
    (0..COLOUR_LEVELS.min(below))
        .take_while(|&l| sizes[l][0].is_multiple_of(2))
        .count()
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

/// Fails unless `cycle` smooths at all, `n` halves `cycle.levels - 1` times (saying how many levels
/// the sizes allow), and the finest level can be stored by colour where [`Cycle::colours`] asks for it:
/// the checks of [`Multigrid::new`], for a caller that wants them before it builds anything.
pub fn check_cycle(n: [usize; 3], cycle: &Cycle) -> Result<()> {
    // A smoother that never runs leaves the error the coarse grid cannot see untouched: the
    // preconditioner is singular and CG breaks down.
    if cycle.sweeps == 0 {
        return Err(Error::Invalid(
            "0 smoothing sweeps before and after the coarse correction leave the error the coarse \
             grid cannot see untouched (the preconditioner is singular): use --smooth 1 or more"
                .into(),
        ));
    }
    if cycle.coarse_sweeps == 0 {
        return Err(Error::Invalid(
            "0 sweeps on the coarsest level leave its error untouched (the preconditioner is \
             singular): use --coarse-sweeps 1 or more"
                .into(),
        ));
    }
    let (most, levels) = (max_levels(n), cycle.levels);
    if levels == 0 || levels > most {
        return Err(Error::Invalid(format!(
            "{levels} levels asked for, but the {}x{}x{} grid halves only to {most} levels (every axis must \
             stay even and at least 2 cells); use --levels {most} or sizes with more factors of 2",
            n[0], n[1], n[2]
        )));
    }
    if cycle.colours && !cycle.colours_apply(n) {
        return Err(Error::Invalid(format!(
            "storing the finest level by colour needs the red-black smoother, the SoA layout and an \
             even number of cells in x (asked: {:?} smoother, {:?} layout, {} cells); drop --colours or \
             change those",
            cycle.smoother, cycle.layout, n[0]
        )));
    }
    Ok(())
}

/// Replays into `m` the allocations of [`StencilFields::new`] for `n` cells in values of `elem` bytes:
/// one field after another (SoA) or the interleaved one (AoS), each written through a buffer of one
/// array plane. Returns the engine bytes kept.
pub(crate) fn stencil_fields(
    m: &mut Memory,
    n: [usize; 3],
    elem: usize,
    layout: Layout,
) -> Result<u64> {
    let one = memory::fields(n, 1, elem, "a coefficient field")?;
    let all = memory::fields(n, 7, elem, "the coefficient fields")?;
    match layout {
        Layout::Soa => {
            let plane = memory::plane(n, 1, elem, "a coefficient plane")?;
            for _ in 0..7 {
                m.engine().take(one);
                m.host.passing(plane);
            }
        }
        Layout::Aos => {
            m.engine().take(all);
            m.host
                .passing(memory::plane(n, 7, elem, "a coefficient plane")?);
        }
    }
    Ok(all)
}

/// Replays into `m` the allocations [`Multigrid::with_finest`] makes for `n` cells in values of `elem`
/// bytes: level by level, the coarse coefficient (made while the finer one is alive) and stencil on the
/// host, and the level's fields on the engine, each written through a buffer of one plane (by colour:
/// one plane of each half). Returns the engine bytes the levels keep.
pub(crate) fn footprint(m: &mut Memory, n: [usize; 3], cycle: &Cycle, elem: usize) -> Result<u64> {
    let sizes: Vec<[usize; 3]> = (0..cycle.levels).map(|l| n.map(|v| v >> l)).collect();
    let by_colour = colour_levels(&sizes, cycle);
    let (mut kept, mut coarse_c) = (0u64, 0u64);
    for (l, &nl) in sizes.iter().enumerate() {
        let mut stencil = 0;
        if l > 0 {
            let c = memory::cells(nl, 1, 8, "a coarse level's coefficient")?;
            m.host.take(c);
            m.host.give(coarse_c);
            coarse_c = c;
            stencil = memory::cells(nl, 7, 8, "a coarse level's stencil")?;
            m.host.take(stencil);
        }
        let level = if l < by_colour {
            let halves = Halves::new(Shape::new_3d(nl, 1)?.size().map(|v| v as u32));
            let [px, py, pz] = halves.size().map(|v| v as usize);
            let what = "a multigrid level by colour";
            let two = lattice_gpu_host::memory::bytes(&[px, py, pz], elem, what)?;
            // A plane of each half: pitch x ny values.
            let planes = lattice_gpu_host::memory::bytes(&[2, px, py], elem, what)?;
            for _ in 0..7 {
                m.engine().take(two);
                m.host.passing(planes);
            }
            // x and b by colour, r natural.
            let natural = memory::fields(nl, 1, elem, what)?;
            m.engine().take(two);
            m.engine().take(two);
            m.engine().take(natural);
            lattice_gpu_host::memory::bytes(&[9, px, py, pz], elem, what)?.saturating_add(natural)
        } else {
            let a = stencil_fields(m, nl, elem, cycle.layout)?;
            let xbr = memory::fields(nl, 3, elem, "a multigrid level")?;
            m.engine().take(xbr);
            a.saturating_add(xbr)
        };
        kept = kept.saturating_add(level);
        m.host.give(stencil);
    }
    m.host.give(coarse_c);
    Ok(kept)
}

/// What one V-cycle asks of one level: the basis of its bandwidth floor ([`Multigrid::traffic`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LevelTraffic {
    /// Cells of the level.
    pub cells: [usize; 3],
    /// Kernel launches on the level per V-cycle.
    pub launches: usize,
    /// Bytes the level's kernels must move to or from memory per V-cycle.
    pub bytes: f64,
}

/// The bytes one smoothing sweep of a level moves ([`Multigrid::sweep_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SweepBytes {
    /// What a sweep must move: every cell's coefficients (4 arrays of the symmetric operator's 7 in the
    /// natural SoA layout, all 7 by colour or in AoS), right-hand side and iterate read and the iterate
    /// written once, `7` or `10 size_of::<T>()` per cell (neighbours from cache).
    pub needed: f64,
    /// What the kernels stream from DRAM: a red-black sweep is two kernels that each update one colour,
    /// but both colours share every 32-byte sector, so each kernel moves the whole arrays (twice
    /// `needed`); a Jacobi sweep is one kernel (`needed`).
    pub sectors: f64,
}

impl<'e, E: LoopEngine, T: Element + PoissonReal> Multigrid<'e, E, T> {
    /// Builds the levels of `problem` (checked) on `engine`. Fails, saying how many levels the sizes
    /// allow, when they do not halve `cycle.levels - 1` times.
    pub fn new(engine: &'e E, problem: &Problem, cycle: Cycle) -> Result<Self> {
        problem.check()?;
        check_cycle(problem.n, &cycle)?;
        Self::with_finest(engine, problem, &problem.stencil(), cycle)
    }

    /// [`new`](Self::new) for a problem already checked (with [`check_cycle`] too) whose finest
    /// stencil, `finest`, is already built: the solver shares it with the f64 operator.
    pub(crate) fn with_finest(
        engine: &'e E,
        problem: &Problem,
        finest: &Stencil,
        cycle: Cycle,
    ) -> Result<Self> {
        let (mut n, mut h) = (problem.n, problem.h);
        let sizes: Vec<[usize; 3]> = (0..cycle.levels).map(|l| n.map(|v| v >> l)).collect();
        let by_colour_levels = colour_levels(&sizes, &cycle);
        // The coarse levels' coefficients (the finest level's are the problem's: no copy).
        let mut c = Vec::new();
        let mut levels = Vec::with_capacity(cycle.levels);
        for l in 0..cycle.levels {
            if l > 0 {
                c = coarsen(n, if l == 1 { &problem.c } else { &c });
                n = n.map(|v| v / 2);
                h = h.map(|v| 2.0 * v);
            }
            let shape = Shape::new_3d(n, 1)?;
            // Engines hand out zeroed fields: nothing to upload.
            let field = || engine.alloc::<T>(shape);
            let coarse;
            let st = match l {
                0 => finest,
                _ => {
                    coarse = stencil(n, h, &c, problem.walls);
                    &coarse
                }
            };
            if l < by_colour_levels {
                let halves = Halves::new(shape.size().map(|v| v as u32));
                let two = halves_shape(halves)?;
                let coeff = |i: usize| -> Result<E::Field<T>> {
                    let mut f = engine.alloc::<T>(two)?;
                    upload_by_colour(&mut f, shape, halves, &st[i])?;
                    Ok(f)
                };
                let a = StencilFields::Soa([
                    coeff(0)?,
                    coeff(1)?,
                    coeff(2)?,
                    coeff(3)?,
                    coeff(4)?,
                    coeff(5)?,
                    coeff(6)?,
                ]);
                levels.push(Level {
                    shape,
                    a,
                    x: engine.alloc::<T>(two)?,
                    b: engine.alloc::<T>(two)?,
                    r: field()?,
                    halves: Some(halves),
                });
                continue;
            }
            levels.push(Level {
                shape,
                a: StencilFields::new(engine, shape, st, cycle.layout)?,
                x: field()?,
                b: field()?,
                r: field()?,
                halves: None,
            });
        }
        let sites = levels
            .iter()
            .map(|lv| {
                let range = lv.shape.interior_range();
                let site = |range| Loop3D::new(engine, range);
                // By colour, x is zeroed whole and the smoother runs over one half's interior rows and
                // planes; the rest runs over the natural range.
                let (fill, smooth) = match lv.halves {
                    Some(h) => (halves_shape(h)?.interior_range(), h.sweep_range()),
                    None => (range, range),
                };
                // Into a level by colour the restriction is the plain one (the shuffle one writes
                // natural arrays).
                let restrict = match (cycle.shuffle_restrict, lv.halves) {
                    (true, None) => RestrictPairs::<T>::range(range.n),
                    _ => range,
                };
                Ok([
                    site(fill)?,
                    site(smooth)?,
                    site(range)?,
                    site(restrict)?,
                    site(range)?,
                    site(range)?,
                    site(range)?,
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
            mark: None,
            recording: None,
        })
    }

    /// Keeps the time spent on each level ([`Preconditioner::level_times`]), waiting for the engine
    /// whenever the work moves to another level, which costs some overlap on a GPU.
    pub fn timed(mut self, timed: bool) -> Self {
        self.set_timed(timed);
        self
    }

    /// Starts (`true`) or stops keeping the time spent on each level; either way the times start again
    /// from zero.
    pub fn set_timed(&mut self, timed: bool) {
        self.timed = timed;
        self.seconds.iter_mut().for_each(|s| *s = 0.0);
        self.mark = None;
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

    /// While timed: charges the work in flight to its level once the work moves to level `l` (or, with
    /// `None`, ends). Waiting at level changes rather than after every kernel keeps a level's launches
    /// queued back to back, as in an untimed cycle.
    fn switch_to(&mut self, l: Option<usize>) -> Result<()> {
        if !self.timed || self.mark.map(|m| m.0) == l {
            return Ok(());
        }
        // Also keeps work queued before the cycle (the CG vectors' updates) out of the first level.
        self.engine.synchronize()?;
        let now = Instant::now();
        if let Some((prev, since)) = self.mark {
            self.seconds[prev] += (now - since).as_secs_f64();
        }
        self.mark = l.map(|l| (l, now));
        Ok(())
    }

    fn run<U: PointUpdate3D + GpuEntry>(&mut self, l: usize, kind: Kind, update: &U) -> Result<()> {
        self.switch_to(Some(l))?;
        Ok(self.sites[l][kind as usize].run(update)?)
    }

    /// [`run`](Self::run) for a summing update, its sum into value `slot` of `sums`.
    fn run_sum<U: SumUpdate3D + GpuEntry>(
        &mut self,
        l: usize,
        kind: Kind,
        update: &U,
        sums: &mut E::Field<f64>,
        slot: usize,
    ) -> Result<()> {
        self.switch_to(Some(l))?;
        Ok(self.sites[l][kind as usize].run_sum(update, sums, slot)?)
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
                        let (x, b, halves) = (lv.x.view_mut(), lv.b.view(), lv.halves);
                        if let (Some(halves), OperatorView::Soa(a)) = (halves, op) {
                            let omega = T::ONE;
                            let rb = RedBlackByColour {
                                a,
                                x,
                                b,
                                halves,
                                parity,
                                omega,
                            };
                            self.run(l, Kind::Smooth, &rb)?;
                            continue;
                        }
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

    /// `x = 0` on level `l`.
    fn zero(&mut self, l: usize) -> Result<()> {
        let fill = Fill {
            x: self.levels[l].x.view_mut(),
            value: T::ZERO,
        };
        self.run(l, Kind::Fill, &fill)
    }

    /// `r = b - A x` on level `l`.
    fn residual(&mut self, l: usize) -> Result<()> {
        let op = self.operator(l);
        let lv = &mut self.levels[l];
        let (x, b, r) = (lv.x.view(), lv.b.view(), lv.r.view_mut());
        if let (Some(halves), OperatorView::Soa(a)) = (lv.halves, op) {
            return self.run(l, Kind::Residual, &ResidualByColour { a, x, b, r, halves });
        }
        with_operator!(op, a => self.run(l, Kind::Residual, &Residual { a, x, b, r }))
    }

    /// Level `l`'s residual restricted to level `l + 1`'s right-hand side.
    fn restrict(&mut self, l: usize) -> Result<()> {
        let fine = self.levels[l].shape.size().map(|v| v as u32);
        let coarse = self.levels[l + 1].shape.size().map(|v| v as u32);
        let (fine_levels, coarse_levels) = self.levels.split_at_mut(l + 1);
        let (r, b) = (fine_levels[l].r.view(), coarse_levels[0].b.view_mut());
        if let Some(halves) = coarse_levels[0].halves {
            let restrict = Restrict {
                r,
                b,
                fine,
                coarse: halves,
            };
            return self.run(l + 1, Kind::Restrict, &restrict);
        }
        if self.cycle.shuffle_restrict {
            let pairs = RestrictPairs { r, b, fine, coarse };
            return self.run(l + 1, Kind::Restrict, &pairs);
        }
        self.run(l + 1, Kind::Restrict, &Restrict { r, b, fine, coarse })
    }

    /// Level `l + 1`'s iterate added to level `l`'s.
    fn prolong(&mut self, l: usize) -> Result<()> {
        let coarse = self.levels[l + 1].shape.size().map(|v| v as u32);
        let (fine_levels, coarse_levels) = self.levels.split_at_mut(l + 1);
        let (e, x) = (coarse_levels[0].x.view(), fine_levels[l].x.view_mut());
        match (fine_levels[l].halves, coarse_levels[0].halves) {
            (Some(halves), Some(by_colour)) => {
                let from_colours = ProlongAddByColour {
                    e,
                    x,
                    halves,
                    coarse: by_colour,
                };
                self.run(l, Kind::Prolong, &from_colours)
            }
            (Some(halves), None) => {
                let prolong = ProlongAddByColour {
                    e,
                    x,
                    halves,
                    coarse,
                };
                self.run(l, Kind::Prolong, &prolong)
            }
            _ => self.run(l, Kind::Prolong, &ProlongAdd { e, x, coarse }),
        }
    }

    /// CG's f64 residual `r` into the finest right-hand side (into its colour halves when it is stored
    /// by colour).
    fn convert_in(&mut self, r: &E::Field<f64>) -> Result<()> {
        let (from, to) = (r.view(), self.levels[0].b.view_mut());
        let kind = Kind::ConvertIn;
        if let Some(halves) = self.levels[0].halves {
            return self.run(0, kind, &ConvertByColour { from, to, halves });
        }
        self.run(0, kind, &Convert { from, to })
    }

    /// The finest iterate into CG's f64 vector `z` (out of its colour halves when it is stored by
    /// colour), with `r.z` into value `slot` of `sums`: CG's next dot product, summed as `z` is written.
    fn convert_out(
        &mut self,
        r: &E::Field<f64>,
        z: &mut E::Field<f64>,
        sums: &mut E::Field<f64>,
        slot: usize,
    ) -> Result<()> {
        let (from, to, with) = (self.levels[0].x.view(), z.view_mut(), r.view());
        let kind = Kind::ConvertOut;
        if let Some(halves) = self.levels[0].halves {
            let convert = FromColoursDot {
                from,
                to,
                with,
                halves,
            };
            return self.run_sum(0, kind, &convert, sums, slot);
        }
        self.run_sum(0, kind, &ConvertDot { from, to, with }, sums, slot)
    }

    /// `M^-1 r`'s kernels up to the finest iterate, queued.
    fn queue_apply(&mut self, r: &E::Field<f64>) -> Result<()> {
        self.convert_in(r)?;
        self.cycle_kernels()
    }

    /// The loops an application runs: per level and kind, the fused levels' block program aside.
    fn sites_in_use(&self) -> Vec<(usize, Kind)> {
        let last = self.levels.len() - 1;
        let fused = self.fused_from().unwrap_or(last + 1);
        let mut sites = vec![(0, Kind::ConvertIn), (0, Kind::ConvertOut)];
        for l in 0..fused.min(last + 1) {
            sites.extend([(l, Kind::Fill), (l, Kind::Smooth)]);
            if l < last {
                sites.extend([(l, Kind::Residual), (l, Kind::Prolong)]);
            }
        }
        sites.extend((1..=fused.min(last)).map(|l| (l, Kind::Restrict)));
        sites
    }

    /// Whether [`Cycle::graph`] applies now: asked for, red-black, not timed, every loop in use tuned.
    fn recordable(&self) -> bool {
        self.cycle.graph
            && self.cycle.smoother == Smoother::RedBlack
            && !self.timed
            && (!self.engine.tunes()
                || self
                    .sites_in_use()
                    .iter()
                    .all(|&(l, k)| E::tuning(self.sites[l][k as usize].info()).is_some()))
    }

    /// The first level of the fused coarse end of the cycle ([`Cycle::fused_cells`]), if any.
    pub fn fused_from(&self) -> Option<usize> {
        fused_from(&self.level_sizes(), &self.cycle)
    }

    /// Levels `from..` of the cycle as one block program.
    fn coarse_cycle(&mut self, from: usize) -> Result<()> {
        self.switch_to(Some(from))?;
        let (sweeps, coarse_sweeps) = (self.cycle.sweeps as u32, self.cycle.coarse_sweeps as u32);
        let count = (self.levels.len() - from) as u32;
        let mut fields = Vec::with_capacity(count as usize);
        for lv in &mut self.levels[from..] {
            let range = lv.shape.interior_range();
            fields.push((
                lv.a.view::<T>(),
                lv.x.view_mut(),
                lv.b.view_mut(),
                lv.r.view_mut(),
                range,
            ));
        }
        // Unused slots repeat the last level; the program never reads them.
        let level = |k: usize| fields[k.min(fields.len() - 1)];
        macro_rules! program {
            ($layout:ident) => {{
                let levels = std::array::from_fn(|k| {
                    let (a, x, b, r, range) = level(k);
                    let OperatorView::$layout(a) = a else {
                        unreachable!("every level has the cycle's layout")
                    };
                    CoarseLevel { a, x, b, r, range }
                });
                let program = CoarseCycle {
                    levels,
                    count,
                    sweeps,
                    coarse_sweeps,
                };
                self.engine.run_block(&program)
            }};
        }
        match self.cycle.layout {
            Layout::Soa => program!(Soa),
            Layout::Aos => program!(Aos),
        }?;
        Ok(())
    }

    /// The V-cycle's kernels, queued (timed levels wait at level changes).
    fn cycle_kernels(&mut self) -> Result<()> {
        let last = self.levels.len() - 1;
        let fused = self.fused_from().unwrap_or(last + 1);
        for l in 0..fused.min(last + 1) {
            self.zero(l)?;
            if l == last {
                self.smooth(l, self.cycle.coarse_sweeps, false)?;
                break;
            }
            self.smooth(l, self.cycle.sweeps, false)?;
            self.residual(l)?;
            self.restrict(l)?;
        }
        if fused <= last {
            self.coarse_cycle(fused)?;
        }
        for l in (0..last.min(fused)).rev() {
            self.prolong(l)?;
            self.smooth(l, self.cycle.sweeps, true)?;
        }
        Ok(())
    }

    /// One V-cycle from `x = 0` on the finest level for the right-hand side set with
    /// [`set_rhs`](Self::set_rhs): an approximate solve, symmetric and positive definite as an operator.
    pub fn vcycle(&mut self) -> Result<()> {
        self.cycle_kernels()?;
        self.switch_to(None)
    }

    /// Sets the finest level's right-hand side (interior cells, x fastest).
    pub fn set_rhs(&mut self, b: &[f64]) -> Result<()> {
        let lv = &mut self.levels[0];
        let data = match lv.halves {
            Some(halves) => by_colour::<T>(lv.shape, halves, b)?,
            None => lv.shape.embed_map(b, T::ZERO, T::from_f64)?,
        };
        lv.b.upload(&data)?;
        Ok(())
    }

    /// The finest level's iterate (interior cells, x fastest).
    pub fn solution(&self) -> Result<Vec<f64>> {
        let lv = &self.levels[0];
        let x = lv.x.download()?;
        let natural = match lv.halves {
            Some(halves) => {
                let [nx, ny, nz] = lv.shape.size();
                let mut natural = vec![T::ZERO; nx * ny * nz];
                natural
                    .par_chunks_mut(nx * ny)
                    .enumerate()
                    .for_each(|(k, plane)| {
                        for j in 0..ny {
                            for i in 1..nx - 1 {
                                let (_, at) = halves.place(i as u32, j as u32, k as u32);
                                plane[i + nx * j] = x[at];
                            }
                        }
                    });
                natural
            }
            None => x,
        };
        Ok(lv
            .shape
            .extract(&natural)
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

    /// Runs each loop of the V-cycle until the engine has tuned it (once each from the tune cache;
    /// nothing on an engine that does not tune), with `r` and `z` as the conversions' f64 vectors (of the
    /// finest shape): so that a timed solve afterwards times tuned launches only. Leaves the levels'
    /// scratch fields changed, which a V-cycle never reads before writing.
    pub fn tune(&mut self, r: &E::Field<f64>, z: &mut E::Field<f64>) -> Result<()> {
        let last = self.levels.len() - 1;
        // The fused levels' block program is not tuned; the restriction into its first level is.
        let fused = self.fused_from().unwrap_or(last + 1);
        for l in 0..=last {
            if l < fused {
                self.until_tuned(l, Kind::Fill, |m| m.zero(l))?;
                self.until_tuned(l, Kind::Smooth, |m| m.smooth(l, 1, false))?;
                if l < last {
                    self.until_tuned(l, Kind::Residual, |m| m.residual(l))?;
                    self.until_tuned(l, Kind::Prolong, |m| m.prolong(l))?;
                }
            }
            if l > 0 && l <= fused {
                self.until_tuned(l, Kind::Restrict, |m| m.restrict(l - 1))?;
            }
        }
        self.until_tuned(0, Kind::ConvertIn, |m| m.convert_in(r))?;
        let mut sums = self.engine.alloc::<f64>(Shape::new_3d([1, 1, 1], 0)?)?;
        self.until_tuned(0, Kind::ConvertOut, |m| m.convert_out(r, z, &mut sums, 0))?;
        self.switch_to(None)
    }

    fn until_tuned(
        &mut self,
        l: usize,
        kind: Kind,
        mut work: impl FnMut(&mut Self) -> Result<()>,
    ) -> Result<()> {
        let tuned =
            |m: &Self| !m.engine.tunes() || E::tuning(m.sites[l][kind as usize].info()).is_some();
        // Tuning a loop takes hundreds of runs: a signal stops it between two.
        let mut work = |m: &mut Self| {
            crate::solver::stop_for_signal(0)?;
            work(m)
        };
        run_until_tuned(
            self,
            tuned,
            &mut work,
            format!("multigrid level {l}: a loop"),
        )
    }

    /// `sweeps` smoothing sweeps on the finest level with its current iterate and right-hand side, queued
    /// on the engine without waiting: for timing the smoother alone. The next V-cycle starts from
    /// `x = 0` again, so this changes no later result.
    pub fn smooth_finest(&mut self, sweeps: usize) -> Result<()> {
        self.smooth(0, sweeps, false)?;
        self.switch_to(None)
    }

    /// The finest smoother's tuning result (`None` on an engine that does not tune, or before it has).
    pub fn smoother_tuning(&self) -> Option<&TuningReport> {
        E::tuning(self.sites[0][Kind::Smooth as usize].info())
    }

    /// The bytes one smoothing sweep of level `l` moves, for `N` cells of `size_of::<T>()` bytes (the
    /// model is [`SweepBytes`]'s).
    pub fn sweep_bytes(&self, l: usize) -> SweepBytes {
        let [nx, ny, nz] = self.level_sizes()[l];
        let needed = self.values(l) * (size_of::<T>() * nx * ny * nz) as f64;
        let sectors = match (self.cycle.smoother, self.levels[l].halves) {
            // By colour a half sweep reads its colour's 7 coefficients, b and x, the other colour's x
            // (the neighbours) and writes its x: 5.5 values per cell, 11 a sweep.
            (Smoother::RedBlack, Some(_)) => 1.1 * needed,
            (Smoother::RedBlack, None) => 2.0 * needed,
            (Smoother::Jacobi, _) => needed,
        };
        SweepBytes { needed, sectors }
    }

    /// The values per cell a sweep or residual of level `l` must move: the coefficients it reads, `b`
    /// and `x` read, one value written. In the natural SoA layout the kernels read 4 of the 7
    /// coefficient arrays (a symmetric operator's `-1` coefficients are its neighbours' `+1` ones); by
    /// colour and in AoS they read all 7.
    fn values(&self, l: usize) -> f64 {
        match (&self.levels[l].a, self.levels[l].halves) {
            (StencilFields::Soa(_), None) => 7.0,
            _ => 10.0,
        }
    }

    /// Each level's launches and bytes per V-cycle. With `s = size_of::<T>()` and `N` the level's cells
    /// (`N_f` the finer level's, `N_c` the coarser one's), each datum counted once per kernel that needs it
    /// (stencil neighbours come from cache):
    ///
    /// - zeroing the iterate: `s N` written, 1 launch;
    /// - each smoothing sweep (`2 sweeps` on all but the coarsest, `coarse_sweeps` there): `v s N`
    ///   ([`SweepBytes::needed`]; `v` = 7 in the natural SoA layout, 10 by colour or in AoS: see
    ///   `values`), 2 launches red-black, 1 Jacobi;
    /// - the residual (all but the coarsest): the coefficients, `x` and `b` read, `r` written: `v s N`,
    ///   1 launch;
    /// - restriction into the level (all but the finest): `s (N_f + N)`, 1 launch;
    /// - prolongation into the level (all but the coarsest): the coarse iterate read, the level's read
    ///   and written: `s (N_c + 2 N)`, 1 launch;
    /// - on the finest, the conversions from and to CG's f64 vectors, the way out reading CG's `r` for
    ///   `r.z`: `(24 + 2 s) N`, 2 launches.
    ///
    /// The levels' time is charged the same way ([`timed`](Self::timed)): restriction to the coarse
    /// level, prolongation to the fine one.
    pub fn traffic(&self) -> Vec<LevelTraffic> {
        let s = size_of::<T>() as f64;
        let sizes = self.level_sizes();
        let cells: Vec<f64> = sizes
            .iter()
            .map(|n| n.iter().product::<usize>() as f64)
            .collect();
        let last = sizes.len() - 1;
        let fused = self.fused_from().unwrap_or(last + 1);
        let per_sweep = match self.cycle.smoother {
            Smoother::RedBlack => 2,
            Smoother::Jacobi => 1,
        };
        (0..=last)
            .map(|l| {
                let n = cells[l];
                let sweeps = if l == last {
                    self.cycle.coarse_sweeps
                } else {
                    2 * self.cycle.sweeps
                };
                let mut launches = 1 + per_sweep * sweeps;
                let v = self.values(l);
                let mut bytes = s * n + sweeps as f64 * v * s * n;
                if l < last {
                    launches += 2;
                    bytes += v * s * n + s * (cells[l + 1] + 2.0 * n);
                }
                if l > 0 {
                    launches += 1;
                    bytes += s * (cells[l - 1] + n);
                }
                if l == 0 {
                    launches += 2;
                    bytes += (24.0 + 2.0 * s) * n;
                }
                // The fused levels' passes are one launch, counted on the first of them.
                if l > fused {
                    launches = 0;
                } else if l == fused {
                    launches = 2;
                }
                LevelTraffic {
                    cells: sizes[l],
                    launches,
                    bytes,
                }
            })
            .collect()
    }
}

impl<'e, E: LoopEngine, T: Element + PoissonReal> Preconditioner<E> for Multigrid<'e, E, T> {
    /// `r` converted into the finest right-hand side, one V-cycle, the result converted back with
    /// `r.z`: nothing leaves the engine. A recorded graph holds all but the last conversion, whose sum
    /// goes to a new place each time.
    fn apply(
        &mut self,
        r: &E::Field<f64>,
        z: &mut E::Field<f64>,
        sums: &mut E::Field<f64>,
        slot: usize,
    ) -> Result<()> {
        let mut replayed = false;
        if self.recordable() {
            let key = r.view().as_ptr() as usize;
            if self.recording.as_ref().map(|(k, _)| *k) != Some(key) {
                let engine = self.engine;
                // Queueing fails only where the engine does.
                let recorded = engine.record(&mut || Ok(self.queue_apply(r)?))?;
                self.recording = recorded.map(|g| (key, g));
            }
            if let Some((_, graph)) = &self.recording {
                self.engine.replay(graph)?;
                replayed = true;
            }
        }
        if !replayed {
            self.queue_apply(r)?;
        }
        self.convert_out(r, z, sums, slot)?;
        self.switch_to(None)
    }

    fn level_times(&self) -> Vec<([usize; 3], f64)> {
        self.level_sizes()
            .into_iter()
            .zip(self.seconds.iter().copied())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use lattice_gpu_host::HostLoopEngine;

    use super::*;
    use crate::problem::manufactured;

    #[test]
    fn plane_by_plane_uploads_lay_out_what_whole_copies_did() {
        let n = [6, 4, 3];
        let shape = Shape::new_3d(n, 1).unwrap();
        let cells = 72;
        let values: Vec<f64> = (0..cells).map(|k| 1.0 + k as f64).collect();
        let mut f = HostLoopEngine.alloc::<f64>(shape).unwrap();
        upload_planes(&mut f, shape, &values, |v| v).unwrap();
        assert_eq!(f.download().unwrap(), shape.embed(&values, 0.0).unwrap());
        assert_eq!(download_interior(&f, shape).unwrap(), values);
        // By colour: the halves `by_colour` makes.
        let halves = Halves::new(shape.size().map(|v| v as u32));
        let two = halves_shape(halves).unwrap();
        let mut h = HostLoopEngine.alloc::<f32>(two).unwrap();
        upload_by_colour(&mut h, shape, halves, &values).unwrap();
        assert_eq!(
            h.download().unwrap(),
            by_colour::<f32>(shape, halves, &values).unwrap()
        );
        // Interleaved: array index i's 7 coefficients at 7 i .. 7 i + 7, zero in the margins.
        let s: Stencil =
            std::array::from_fn(|c| values.iter().map(|v| v + 0.1 * c as f64).collect());
        let wide =
            Shape::new_3d([7 * shape.size()[0], shape.size()[1], shape.size()[2]], 0).unwrap();
        let mut a = HostLoopEngine.alloc::<f64>(wide).unwrap();
        upload_interleaved(&mut a, shape, &s).unwrap();
        let natural: Vec<Vec<f64>> = s.iter().map(|c| shape.embed(c, 0.0).unwrap()).collect();
        let want: Vec<f64> = (0..7 * shape.len())
            .map(|k| natural[k % 7][k / 7])
            .collect();
        assert_eq!(a.download().unwrap(), want);
        assert!(upload_planes(&mut f, shape, &values[1..], |v| v).is_err());
    }

    #[test]
    fn traffic_follows_the_byte_model() {
        let (p, _) = manufactured([8, 8, 8], 1.0, 1.0);
        let cycle = Cycle {
            levels: 2,
            ..Cycle::default()
        };
        let mg = Multigrid::<_, f32>::new(&HostLoopEngine, &p, cycle).unwrap();
        let t = mg.traffic();
        // Finest, 512 cells of 4 bytes: zeroing 1, 4 sweeps of 7 (4 of the 7 coefficient arrays, b, x
        // and x written), residual 7, prolongation 2 (+ the 64 coarse values), conversions 8 + 4 in,
        // 4 + 8 + 8 out (with r.z) per cell; fill + 8 half sweeps + 4 launches.
        assert_eq!(t[0].launches, 13);
        assert_eq!(t[0].bytes, 4.0 * 512.0 * 38.0 + 4.0 * 64.0 + 32.0 * 512.0);
        // Coarsest, 64 cells: zeroing, 40 sweeps, the restriction from 512 cells; 1 + 80 + 1 launches.
        assert_eq!(t[1].launches, 82);
        assert_eq!(t[1].bytes, 4.0 * 64.0 * 281.0 + 4.0 * (512.0 + 64.0));
        let s = mg.sweep_bytes(0);
        assert_eq!((s.needed, s.sectors), (28.0 * 512.0, 56.0 * 512.0));
        // In AoS a cell's 7 coefficients are one record, read whole: 10 values a sweep.
        let aos = Cycle {
            layout: Layout::Aos,
            ..cycle
        };
        let aos = Multigrid::<_, f32>::new(&HostLoopEngine, &p, aos).unwrap();
        assert_eq!(aos.sweep_bytes(0).needed, 40.0 * 512.0);
        // Fused, the coarsest level's passes are one launch after its restriction; the bytes stay.
        let cycle = Cycle {
            levels: 2,
            fused_cells: FUSED_CELLS,
            ..Cycle::default()
        };
        let fused = Multigrid::<_, f32>::new(&HostLoopEngine, &p, cycle).unwrap();
        assert_eq!(fused.fused_from(), Some(1));
        let f = fused.traffic();
        assert_eq!((f[0].launches, f[1].launches), (13, 2));
        assert_eq!((f[0].bytes, f[1].bytes), (t[0].bytes, t[1].bytes));
    }
}
