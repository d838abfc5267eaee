//! One rank's part of a solve split over GPUs (the lattice-QCD blocks): the sums of its reductions over
//! the ranks, and the one-layer halos of its device vectors along each cut axis ("ghosts", stored after
//! the rank's own elements). Two transports behind one trait: NCCL on the GPU's stream (nothing waits
//! for the host, so every solver variant keeps its queue), or staged through host memory and the run's
//! host [`Communicator`] (MPI), which waits for the GPU at each call.

use std::ops::Range;
use std::rc::Rc;

use crate::buffer::{DeviceBuffer, Plain};
use crate::comm::{Communicator, Wire};
use crate::decomp::{Face, Region, Side};
use crate::error::Result;

/// One neighbour's share of a halo exchange: `send` (elements of the vector) goes to `peer`, which
/// sends back what `recv` is filled with (its layer on the opposite side; the same length).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Neighbour {
    /// The neighbour's rank.
    pub peer: usize,
    /// This rank's layer it receives.
    pub send: Range<usize>,
    /// The ghost layer it fills.
    pub recv: Range<usize>,
}

/// The halo exchange of a vector along one periodic axis it is split along, one layer deep on each side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SideLayers {
    /// Towards lower coordinates: this rank's first layer goes there, its lower ghost comes from there.
    pub lower: Neighbour,
    /// Towards higher coordinates: this rank's last layer goes there, its upper ghost comes from there.
    pub upper: Neighbour,
}

/// The ranks of a split device solve, as the solver and the operator need them. Collective: every rank
/// must make the same calls in the same order.
pub trait DeviceRanks<T> {
    /// This rank.
    fn rank(&self) -> usize;
    /// Ranks in all.
    fn size(&self) -> usize;
    /// Whether each call waits for the GPU (host staging): the solver variants that queue iterations
    /// ahead of the GPU cannot use it.
    fn waits_for_gpu(&self) -> bool;
    /// Queues the sum over the ranks of `buf` into `buf` on every rank.
    fn sum_in_place(&self, buf: &DeviceBuffer<f64>) -> Result<()>;
    /// Starts filling `buf`'s ghost layers on every axis of `axes`, after the work queued on it; work
    /// queued next that reads no ghost may run meanwhile. [`finish_layers`](Self::finish_layers)
    /// completes it.
    fn start_layers(&self, buf: &DeviceBuffer<T>, axes: &[SideLayers]) -> Result<()>;
    /// Orders the work queued next after the exchange [`start_layers`](Self::start_layers) began.
    fn finish_layers(&self) -> Result<()>;
}

/// [`DeviceRanks`] through host memory and a host communicator: layers are downloaded, exchanged and
/// uploaded, sums added on the host. Any GPU, any build; the GPU waits while the host communicates.
pub struct HostStaged<C>(pub Rc<C>);

impl<C> HostStaged<C> {
    /// The plan of one exchange: a mirror of four layers (lower ghost, first, last, upper ghost), split
    /// along its second axis with one layer of halo on each side.
    fn plan(&self, sides: &SideLayers, layer: usize) -> Vec<Face<2>> {
        let region = |at: usize| Region {
            begin: [0, at],
            size: [layer, 1],
        };
        vec![
            Face {
                axis: 1,
                side: Side::Lower,
                peer: sides.lower.peer,
                send: region(1),
                recv: region(0),
            },
            Face {
                axis: 1,
                side: Side::Upper,
                peer: sides.upper.peer,
                send: region(2),
                recv: region(3),
            },
        ]
    }
}

impl<C: Communicator, T: Wire + Plain> DeviceRanks<T> for HostStaged<C> {
    fn rank(&self) -> usize {
        self.0.rank()
    }

    fn size(&self) -> usize {
        self.0.size()
    }

    fn waits_for_gpu(&self) -> bool {
        true
    }

    fn sum_in_place(&self, buf: &DeviceBuffer<f64>) -> Result<()> {
        let sums = buf
            .download()?
            .into_iter()
            .map(|v| self.0.sum(v))
            .collect::<Result<Vec<f64>>>()?;
        buf.write_span(0, &sums)
    }

    fn start_layers(&self, buf: &DeviceBuffer<T>, axes: &[SideLayers]) -> Result<()> {
        // Axis by axis: every rank lists its axes in the same order.
        for sides in axes {
            let layer = sides.lower.send.len();
            let mut mirror = vec![T::default(); 4 * layer];
            for (row, r) in [(1, &sides.lower.send), (2, &sides.upper.send)] {
                mirror[row * layer..(row + 1) * layer]
                    .copy_from_slice(&buf.download_span(r.start, r.len())?);
            }
            let index = |p: [usize; 2]| p[0] + layer * p[1];
            self.0
                .exchange(&self.plan(sides, layer), &mut mirror, &index)?;
            buf.write_span(sides.lower.recv.start, &mirror[..layer])?;
            buf.write_span(sides.upper.recv.start, &mirror[3 * layer..])?;
        }
        Ok(())
    }

    fn finish_layers(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(feature = "nccl")]
impl<T: Wire + Plain> DeviceRanks<T> for crate::nccl::Nccl {
    fn rank(&self) -> usize {
        crate::nccl::Nccl::rank(self)
    }

    fn size(&self) -> usize {
        crate::nccl::Nccl::size(self)
    }

    fn waits_for_gpu(&self) -> bool {
        false
    }

    fn sum_in_place(&self, buf: &DeviceBuffer<f64>) -> Result<()> {
        crate::nccl::Nccl::sum_in_place(self, buf)
    }

    fn start_layers(&self, buf: &DeviceBuffer<T>, axes: &[SideLayers]) -> Result<()> {
        // NCCL pairs the k-th send to a peer with that peer's k-th receive from this rank: on each
        // axis sends lower side first, receives upper side first, so that two ranks (each the other's
        // neighbour on both sides) match; axes in the same order on every rank, and a neighbour on one
        // axis is no other axis's (or is this rank itself, on an axis of one rank).
        let sends: Vec<_> = axes
            .iter()
            .flat_map(|s| {
                [
                    (s.lower.peer, s.lower.send.clone()),
                    (s.upper.peer, s.upper.send.clone()),
                ]
            })
            .collect();
        let recvs: Vec<_> = axes
            .iter()
            .flat_map(|s| {
                [
                    (s.upper.peer, s.upper.recv.clone()),
                    (s.lower.peer, s.lower.recv.clone()),
                ]
            })
            .collect();
        self.start_ranges(buf, &sends, &recvs)
    }

    fn finish_layers(&self) -> Result<()> {
        self.finish()
    }
}
