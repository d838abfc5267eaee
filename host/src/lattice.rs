//! `Loop3D` and `Loop2D`: a range of points and an engine, run with a point update. One per call site,
//! because each keeps its engine's per-site state (the auto-tuner's [`AutoTuningInfo`](crate::AutoTuningInfo)).

use lattice_gpu_kernels::stencil::{
    GpuEntry, LoopRange, PassRange, PassSignal, PointUpdate2D, PointUpdate3D, StencilUpdate3D,
    SumUpdate3D,
};

use crate::engine::{check_pass, check_radius, check_range, LoopEngine};
use crate::error::Result;

/// Runs a 3-D point update over a range on an engine (the paper's `Loop3D<Engine>`).
///
/// ```
/// use lattice_gpu_host::{Field, HostLoopEngine, LoopEngine, Loop3D, Shape};
/// use lattice_gpu_kernels::diffusion::Diffusion3d;
///
/// let engine = HostLoopEngine; // or a GPU engine: the loop below does not change
/// let shape = Shape::new_3d([16, 16, 16], 1)?;
/// let mut f = engine.alloc::<f64>(shape)?;
/// let mut g = engine.alloc::<f64>(shape)?;
/// let mut init = vec![0.0; shape.len()];
/// init[shape.index(8, 8, 8)] = 1.0;
/// f.upload(&init)?;
/// let mut step = Loop3D::new(&engine, shape.interior_range())?;
/// for _ in 0..5 {
///     step.run(&Diffusion3d::new(f.view(), g.view_mut(), 1.0, 1e-4, [1.0 / 17.0; 3]))?;
///     std::mem::swap(&mut f, &mut g);
/// }
/// let heat: f64 = f.download()?.iter().sum();
/// assert!((heat - 1.0).abs() < 1e-12); // no heat has reached the walls yet
/// # Ok::<(), lattice_gpu_host::Error>(())
/// ```
pub struct Loop3D<'e, E: LoopEngine> {
    engine: &'e E,
    /// The range (`out`) and the points its passes advance (the range itself unless
    /// [`advancing`](Self::advancing)).
    pass: PassRange,
    site: E::Site,
}

impl<'e, E: LoopEngine> Loop3D<'e, E> {
    /// A loop over `range` (array size, begin and end per axis) on `engine`.
    pub fn new(engine: &'e E, range: LoopRange) -> Result<Self> {
        Self::advancing(engine, range, range)
    }

    /// A loop over `range` whose temporally blocked passes also advance the points of `live` around
    /// it, without writing them ([`PassRange`]): a split run's halo layers, received `steps` radii
    /// deep before each pass, so that no exchange is needed between its steps. Single steps write and
    /// read as [`new`](Self::new)'s.
    pub fn advancing(engine: &'e E, range: LoopRange, live: LoopRange) -> Result<Self> {
        let pass = PassRange::new(live, range);
        check_pass(&pass, &[0; 3], "a pass")?;
        Ok(Self {
            engine,
            pass,
            site: E::Site::default(),
        })
    }

    /// The same loop, its passes counting on the GPU the points they have written near its ends in z
    /// ([`PassSignal`]): passes of the column form on the GPU only, which a split run's halo
    /// exchange waits for ([`LayerExchange::start_when`](crate::halo::LayerExchange::start_when)).
    /// Its single steps, and passes the engine cannot count, fail rather than leave the count short.
    pub fn signalling(mut self, signal: PassSignal) -> Self {
        self.pass.signal = signal;
        self
    }

    /// Fails where the loop is [`signalling`](Self::signalling): single steps count nothing.
    fn check_unsignalled(&self, what: &str) -> Result<()> {
        match self.pass.signal.counter {
            0 => Ok(()),
            _ => Err(crate::Error::InvalidSetting(format!(
                "{what} of a loop whose passes count their end planes for an exchange: the count \
                 would fall short; run passes (Loop3D::run_temporal), or a loop without the signal"
            ))),
        }
    }

    /// Runs `update` at every point of the range. Fails before launching if the range leaves less margin
    /// than the update's radius needs.
    pub fn run<F: PointUpdate3D + GpuEntry>(&mut self, update: &F) -> Result<()> {
        self.check_unsignalled("a single step")?;
        check_radius(&self.pass.out, &F::RADIUS, F::ENTRY)?;
        self.engine.run3d(&self.pass.out, update, &mut self.site)
    }

    /// Runs `steps` steps of `update` over the range in one temporally blocked pass
    /// ([`LoopEngine::run3d_temporal`]): the last step lands in `update`'s output, whichever the
    /// parity of `steps`.
    pub fn run_temporal<F: StencilUpdate3D + GpuEntry>(
        &mut self,
        update: &F,
        steps: u32,
    ) -> Result<()> {
        check_pass(&self.pass, &F::RADIUS, F::ENTRY)?;
        self.engine
            .run3d_temporal(&self.pass, update, steps, &mut self.site)
    }

    /// Advances `update` by up to `max_steps` steps (at least one) as the engine finds fastest, and
    /// returns how many it ran ([`LoopEngine::run3d_steps`]): on the auto-tuning engine, temporally
    /// blocked passes where they beat single steps. The last step lands in `update`'s output.
    pub fn run_steps<F: StencilUpdate3D + GpuEntry>(
        &mut self,
        update: &F,
        max_steps: u32,
    ) -> Result<u32> {
        self.check_unsignalled("steps the engine chooses")?;
        check_pass(&self.pass, &F::RADIUS, F::ENTRY)?;
        self.engine
            .run3d_steps(&self.pass, update, max_steps.max(1), &mut self.site)
    }

    /// The steps per pass [`run_steps`](Self::run_steps) takes for `F` on an engine that does not
    /// tune ([`LoopEngine::untuned_steps`]).
    pub fn untuned_steps<F: StencilUpdate3D + GpuEntry>(&self) -> u32 {
        self.engine.untuned_steps::<F>(&self.pass)
    }

    /// Runs `update` over the range and writes the sum of its terms into value `slot` of `out`, queued
    /// (a dot product fused into the loop: [`SumUpdate3D`]).
    pub fn run_sum<F: SumUpdate3D + GpuEntry>(
        &mut self,
        update: &F,
        out: &mut E::Field<f64>,
        slot: usize,
    ) -> Result<()> {
        check_radius(&self.pass.out, &F::RADIUS, F::ENTRY)?;
        self.engine
            .run3d_sum(&self.pass.out, update, &mut self.site, out, slot)
    }

    /// The range.
    pub fn range(&self) -> &LoopRange {
        &self.pass.out
    }

    /// The engine's state for this call site (the tuning result, for the auto-tuner).
    pub fn info(&self) -> &E::Site {
        &self.site
    }
}

/// Runs a 2-D point update over a range on an engine (the paper's `Loop2D<Engine>`).
pub struct Loop2D<'e, E: LoopEngine> {
    engine: &'e E,
    range: LoopRange,
    site: E::Site,
}

impl<'e, E: LoopEngine> Loop2D<'e, E> {
    /// A loop over the 2-D `range` (`n[2] == 1`, z range `0..1`) on `engine`.
    pub fn new(engine: &'e E, range: LoopRange) -> Result<Self> {
        check_range(&range, 2)?;
        Ok(Self {
            engine,
            range,
            site: E::Site::default(),
        })
    }

    /// Runs `update` at every point of the range.
    pub fn run<F: PointUpdate2D + GpuEntry>(&mut self, update: &F) -> Result<()> {
        check_radius(&self.range, &F::RADIUS, F::ENTRY)?;
        self.engine.run2d(&self.range, update, &mut self.site)
    }

    /// The range.
    pub fn range(&self) -> &LoopRange {
        &self.range
    }

    /// The engine's state for this call site.
    pub fn info(&self) -> &E::Site {
        &self.site
    }
}

impl<E: LoopEngine> std::fmt::Debug for Loop3D<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loop3D")
            .field("pass", &self.pass)
            .finish_non_exhaustive()
    }
}

impl<E: LoopEngine> std::fmt::Debug for Loop2D<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loop2D")
            .field("range", &self.range)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::HostLoopEngine;
    use lattice_gpu_kernels::selftest::Smooth2d;
    use lattice_gpu_kernels::stencil::{FieldMut, FieldRef};

    #[test]
    fn ranges_are_checked() {
        let e = HostLoopEngine;
        let bad = LoopRange {
            n: [4, 4, 4],
            begin: [1, 1, 1],
            end: [5, 3, 3],
        };
        assert!(Loop3D::new(&e, bad)
            .unwrap_err()
            .to_string()
            .contains("axis 0"));
        let empty = LoopRange {
            n: [4, 4, 4],
            begin: [1, 2, 1],
            end: [3, 2, 3],
        };
        assert!(Loop3D::new(&e, empty).is_err());
        let not2d = LoopRange {
            n: [4, 4, 2],
            begin: [1, 1, 0],
            end: [3, 3, 1],
        };
        assert!(Loop2D::new(&e, not2d)
            .unwrap_err()
            .to_string()
            .contains("2-D"));
    }

    #[test]
    fn radius_beyond_margin_is_refused_before_running() {
        let e = HostLoopEngine;
        // No margin in x: the 5-point update would read outside the array.
        let r = LoopRange {
            n: [4, 4, 1],
            begin: [0, 1, 0],
            end: [4, 3, 1],
        };
        let mut l = Loop2D::new(&e, r).unwrap();
        let (a, mut b) = (vec![1.0f32; 16], vec![0.0f32; 16]);
        // SAFETY: the run is refused before any pointer is used.
        let u = unsafe {
            Smooth2d {
                f: FieldRef::from_raw(a.as_ptr()),
                out: FieldMut::from_raw(b.as_mut_ptr()),
            }
        };
        let err = l.run(&u).unwrap_err().to_string();
        assert!(
            err.contains("smooth2d_f32") && err.contains("margin"),
            "{err}"
        );
    }
}
