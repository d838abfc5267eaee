//! The halo exchange of a field split along one axis: through host memory and a [`Communicator`]
//! ([`FaceMirror`]), or straight between GPUs through NCCL, as [`Halos`] says ([`LayerExchange`]).
//!
//! It sits above both transports, the communicators ([`crate::comm`]) and NCCL (`crate::nccl`, the
//! `nccl` feature), since it chooses between them; they know nothing of it.

use crate::comm::Communicator;
use crate::decomp::{layers, Face, Region};
use crate::error::{Error, Result};
use crate::field::{Element, Field};

/// A host mirror of a field for halo exchanges that move only its face layers: whole array planes (or
/// rows) along the split axis, contiguous in the array. The layers a plan sends are copied out of the
/// field, exchanged on the host, and the layers it receives are copied back in; the rest of the mirror
/// is never read.
pub struct FaceMirror<T> {
    /// The array layers the faces send and receive.
    sent: Vec<usize>,
    received: Vec<usize>,
    /// Values per layer.
    layer: usize,
    host: Vec<T>,
}

impl<T: Element> FaceMirror<T> {
    /// For `plan`, split along `axis`, on a field holding `whole` (its array, margins included) in layers
    /// of `layer` values; `at` maps a plan coordinate along `axis` to its array layer. A received layer
    /// goes back whole: its points outside the plan's regions must keep the values `whole` gave them
    /// (margins no step writes).
    pub fn new<const D: usize>(
        plan: &[Face<D>],
        axis: usize,
        at: impl Fn(usize) -> usize,
        layer: usize,
        whole: Vec<T>,
    ) -> Self {
        let of = |regions: &mut dyn Iterator<Item = Region<D>>| -> Vec<usize> {
            layers(regions, axis).into_iter().map(&at).collect()
        };
        Self {
            sent: of(&mut plan.iter().map(|f| f.send)),
            received: of(&mut plan.iter().map(|f| f.recv)),
            layer,
            host: whole,
        }
    }

    /// Copies the layers the plan sends out of `f`, after all work queued on it.
    pub fn copy_out(&mut self, f: &impl Field<T>) -> Result<()> {
        let n = self.layer;
        for &l in &self.sent {
            let values = f.download_span(l * n, n)?;
            self.host[l * n..(l + 1) * n].copy_from_slice(&values);
        }
        Ok(())
    }

    /// Runs `plan` through `comm` on the mirror (`index` maps the plan's local points to array indices)
    /// and copies the layers it receives into `f`.
    pub fn exchange_into<C: Communicator, const D: usize, I: Fn([usize; D]) -> usize + ?Sized>(
        &mut self,
        comm: &C,
        plan: &[Face<D>],
        index: &I,
        f: &mut impl Field<T>,
    ) -> Result<()> {
        comm.exchange(plan, &mut self.host, index)?;
        let n = self.layer;
        for &l in &self.received {
            f.upload_span(l * n, &self.host[l * n..(l + 1) * n])?;
        }
        Ok(())
    }
}

/// How a decomposed run moves its halo layers.
#[derive(Clone, Copy, Debug, Default)]
pub enum Halos<'a> {
    /// Face layers through host memory and the run's host communicator (any engine).
    #[default]
    Host,
    /// Straight between the GPUs' arrays through NCCL, on a stream beside the work that reads no halo
    /// (GPU engines; one NCCL rank per host rank).
    #[cfg(feature = "nccl")]
    Nccl(&'a crate::nccl::Nccl),
    #[doc(hidden)]
    #[cfg(not(feature = "nccl"))]
    _Unused(std::marker::PhantomData<&'a ()>, std::convert::Infallible),
}

/// The halo exchange of a field split along one axis, as whole array layers, the way [`Halos`] says, in
/// two halves: [`start`](Self::start) before the work that reads no halo is queued (on a GPU it runs
/// meanwhile), [`finish`](Self::finish) before the work that does.
pub enum LayerExchange<'a, T> {
    /// Through host memory: the sent layers copied out, exchanged, the received ones copied in.
    Host(FaceMirror<T>),
    /// Through NCCL, on the communicator's side stream.
    #[cfg(feature = "nccl")]
    Nccl(&'a crate::nccl::Nccl, crate::nccl::LayerHalo),
    #[doc(hidden)]
    #[cfg(not(feature = "nccl"))]
    _Unused(std::marker::PhantomData<&'a ()>, std::convert::Infallible),
}

impl<'a, T: Element> LayerExchange<'a, T> {
    /// For `plan`, split along `axis`, on a field holding `whole` (its array, margins included) in layers
    /// of `layer` values; `at` maps a plan coordinate along `axis` to its array layer (as
    /// [`FaceMirror::new`]).
    pub fn new<const D: usize>(
        halos: Halos<'a>,
        plan: &[Face<D>],
        axis: usize,
        at: impl Fn(usize) -> usize,
        layer: usize,
        whole: &[T],
    ) -> Result<Self> {
        Ok(match halos {
            Halos::Host => Self::Host(FaceMirror::new(plan, axis, at, layer, whole.to_vec())),
            #[cfg(feature = "nccl")]
            Halos::Nccl(n) => Self::Nccl(n, crate::nccl::LayerHalo::new(plan, axis, at, layer)?),
            #[cfg(not(feature = "nccl"))]
            Halos::_Unused(_, never) => match never {},
        })
    }

    /// Whether [`beside`](Self::beside) runs work beside the GPU's stream (NCCL, which has a stream
    /// of its own) rather than in order (host memory).
    pub fn runs_beside(&self) -> bool {
        !matches!(self, Self::Host(_))
    }

    /// Runs `work`, whose kernels go beside the GPU's stream where the exchange has a stream of its
    /// own (`Nccl::beside`, with the `nccl` feature): a step's boundary, ahead of the exchange
    /// of what it writes, both during the interior.
    pub fn beside<R, E: From<Error>>(
        &self,
        work: impl FnOnce() -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        match self {
            Self::Host(_) => work(),
            #[cfg(feature = "nccl")]
            Self::Nccl(n, _) => n.beside(work),
            #[cfg(not(feature = "nccl"))]
            Self::_Unused(_, never) => match *never {},
        }
    }

    /// Starts the exchange of `f`'s halos, after the work queued on it (a download waits for it; the
    /// NCCL exchange is ordered after it).
    pub fn start(&mut self, f: &impl Field<T>) -> Result<()> {
        match self {
            Self::Host(faces) => faces.copy_out(f),
            #[cfg(feature = "nccl")]
            Self::Nccl(n, layers) => n.start(layers, f),
            #[cfg(not(feature = "nccl"))]
            Self::_Unused(_, never) => match *never {},
        }
    }

    /// Starts the exchange of `f`'s halos once the `u32` at `counter` reaches `target` on the GPU
    /// (NCCL's `start_when`, with the `nccl` feature: a pass still running counts its end layers);
    /// through host memory there is nothing to wait on the GPU with, and it fails.
    pub fn start_when(&mut self, f: &impl Field<T>, counter: u64, target: u32) -> Result<()> {
        match self {
            Self::Host(_) => {
                let _ = (f, counter, target);
                Err(Error::InvalidSetting(
                    "a halo exchange through host memory cannot wait for a count on the GPU: use \
                     NCCL halos"
                        .into(),
                ))
            }
            #[cfg(feature = "nccl")]
            Self::Nccl(n, layers) => n.start_when(layers, f, counter, target),
            #[cfg(not(feature = "nccl"))]
            Self::_Unused(_, never) => match *never {},
        }
    }

    /// Completes the exchange through `comm` (the host path runs `plan`, `index` mapping its local
    /// points): the halos are in `f` for the work queued next.
    pub fn finish<C: Communicator, const D: usize, I: Fn([usize; D]) -> usize + ?Sized>(
        &mut self,
        comm: &C,
        plan: &[Face<D>],
        index: &I,
        f: &mut impl Field<T>,
    ) -> Result<()> {
        match self {
            Self::Host(faces) => faces.exchange_into(comm, plan, index, f),
            #[cfg(feature = "nccl")]
            Self::Nccl(n, _) => n.finish(),
            #[cfg(not(feature = "nccl"))]
            Self::_Unused(_, never) => match *never {},
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::Solo;
    use crate::decomp::Decomposition;

    #[test]
    fn face_mirror_moves_only_the_face_planes() {
        use crate::field::{HostField, Shape};
        // One rank, periodic in z: its last plane arrives in the lower margin, its first in the upper.
        let d = Decomposition::new([2, 2, 4], [1, 1, 1], [1, 1, 1], [false, false, true]).unwrap();
        let plan = d.halo_plan(0);
        let shape = Shape::new_3d([2, 2, 4], 1).unwrap();
        let plane = 16;
        let values: Vec<f64> = (0..shape.len()).map(|k| k as f64).collect();
        let mut f = HostField::<f64>::zeros(shape);
        f.upload(&values).unwrap();
        let z = |zz: usize| zz; // this shape has no padding: local z is the array plane
        let mut mirror = FaceMirror::new(&plan, 2, z, plane, vec![f64::NAN; shape.len()]);
        mirror.copy_out(&f).unwrap();
        let size = d.local_size(0);
        let index = |p: [usize; 3]| p[0] + size[0] * (p[1] + size[1] * p[2]);
        mirror.exchange_into(&Solo, &plan, &index, &mut f).unwrap();
        let got = f.download().unwrap();
        let at = |x: usize, y: usize, z: usize| x + 4 * (y + 4 * z);
        for (x, y) in [(1, 1), (2, 1), (1, 2), (2, 2)] {
            assert_eq!(got[at(x, y, 0)], values[at(x, y, 4)]);
            assert_eq!(got[at(x, y, 5)], values[at(x, y, 1)]);
        }
        // Interior planes and the margins' untouched points keep their values; nothing NaN came in.
        for z in 1..5 {
            assert_eq!(
                got[z * plane..(z + 1) * plane],
                values[z * plane..(z + 1) * plane]
            );
        }
        assert!(got.iter().all(|v| !v.is_nan()));
    }
}
