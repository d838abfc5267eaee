//! Communicators between the ranks of a decomposed run: halo exchange along a [`decomp`](crate::decomp)
//! plan, sums over all ranks, and gathering a field on rank 0. How a field's halos move (through host
//! memory or NCCL) is [`crate::halo`]'s, above this module and NCCL's.
//!
//! Three backends: [`Solo`] (one rank, no transport: its only "neighbour" is itself along a periodic
//! axis), the threads of one process ([`crate::threads`], one per GPU) and, with the `mpi` cargo feature, `Mpi` on the MPI library (OpenMPI: `apt install libopenmpi-dev
//! openmpi-bin`), for host buffers, one process per rank started by `mpirun`/`srun`. Device buffers
//! move between GPUs through NCCL (`crate::nccl`, the `nccl` feature), bootstrapped by these.

use crate::decomp::{Face, Region, Side};
use crate::error::{Error, Result};
pub use crate::wire::Wire;

/// The ranks of a decomposed run and the operations between them. Every rank must make the same calls in
/// the same order (they are collective).
pub trait Communicator {
    /// This rank.
    fn rank(&self) -> usize;
    /// Ranks in all.
    fn size(&self) -> usize;
    /// The ranks that share this rank's host memory (this one included): the threads of one process,
    /// or the MPI processes on one node. What a run's memory check multiplies its per-rank need by.
    fn ranks_here(&self) -> usize {
        1
    }
    /// Runs `faces` (one rank's [`halo_plan`](crate::decomp::Decomposition::halo_plan)) on `data`, whose
    /// element for local point `p` is at `index(p)`: every `send` region goes to its peer and every `recv`
    /// region is filled from it, axis by axis. Returns when this rank's margins are filled. `index` must
    /// put consecutive points along axis 0 at consecutive elements (axis 0 fastest, as every field
    /// here): faces move a row at a time.
    fn exchange<T: Wire, const D: usize, I: Fn([usize; D]) -> usize + ?Sized>(
        &self,
        faces: &[Face<D>],
        data: &mut [T],
        index: &I,
    ) -> Result<()>;
    /// The sum of `v` over all ranks, on every rank.
    fn sum(&self, v: f64) -> Result<f64>;
    /// Every rank gets rank 0's `v` (the same length on every rank).
    fn broadcast<T: Wire>(&self, v: &mut [T]) -> Result<()>;
    /// Rank 0 gets every rank's `part` in rank order (others get an empty vector).
    fn gather<T: Wire>(&self, part: &[T]) -> Result<Vec<T>>;
}

/// The values of `region`, in its point order.
pub(crate) fn pack<T: Wire, const D: usize, I: Fn([usize; D]) -> usize + ?Sized>(
    data: &[T],
    region: &Region<D>,
    index: &I,
) -> Vec<T> {
    let mut out = Vec::with_capacity(region.len());
    for p in region.rows() {
        out.extend_from_slice(&data[row(region, p, index)]);
    }
    out
}

/// The elements of the region's row that starts at `p`: consecutive, as [`Communicator::exchange`]
/// requires of `index` along axis 0. Copied a row at a time, a 512 x 512 face takes a fraction of a
/// millisecond, where point by point it took several.
fn row<const D: usize, I: Fn([usize; D]) -> usize + ?Sized>(
    region: &Region<D>,
    p: [usize; D],
    index: &I,
) -> std::ops::Range<usize> {
    let (start, n) = (index(p), region.size[0]);
    let mut last = p;
    last[0] += n.saturating_sub(1);
    assert!(
        n == 0 || index(last) == start + n - 1,
        "a halo exchange's index must be consecutive along axis 0"
    );
    start..start + n
}

pub(crate) fn unpack<T: Wire, const D: usize, I: Fn([usize; D]) -> usize + ?Sized>(
    data: &mut [T],
    region: &Region<D>,
    values: &[T],
    index: &I,
) {
    for (p, v) in region.rows().zip(values.chunks(region.size[0].max(1))) {
        let r = row(region, p, index);
        data[r.start..r.start + v.len()].copy_from_slice(v);
    }
}

/// The faces of `axis` in `faces`.
pub(crate) fn on_axis<const D: usize>(
    faces: &[Face<D>],
    axis: usize,
) -> impl Iterator<Item = &Face<D>> {
    faces.iter().filter(move |f| f.axis == axis)
}

/// One rank alone: faces to itself (periodic axes) are copied in place.
#[derive(Clone, Copy, Debug, Default)]
pub struct Solo;

impl Communicator for Solo {
    fn rank(&self) -> usize {
        0
    }

    fn size(&self) -> usize {
        1
    }

    fn exchange<T: Wire, const D: usize, I: Fn([usize; D]) -> usize + ?Sized>(
        &self,
        faces: &[Face<D>],
        data: &mut [T],
        index: &I,
    ) -> Result<()> {
        for axis in 0..D {
            let sent: Vec<(Side, Vec<T>)> = on_axis(faces, axis)
                .map(|f| (f.side, pack(data, &f.send, index)))
                .collect();
            for f in on_axis(faces, axis) {
                if f.peer != 0 {
                    return Err(Error::InvalidSetting(format!(
                        "a one-rank run was given a halo plan with rank {} in it; decompose over 1 rank",
                        f.peer
                    )));
                }
                // What arrives on one side is what this rank sent from the other.
                if let Some((_, v)) = sent.iter().find(|(s, _)| *s != f.side) {
                    unpack(data, &f.recv, v, index);
                }
            }
        }
        Ok(())
    }

    fn sum(&self, v: f64) -> Result<f64> {
        Ok(v)
    }

    fn broadcast<T: Wire>(&self, _: &mut [T]) -> Result<()> {
        Ok(())
    }

    fn gather<T: Wire>(&self, part: &[T]) -> Result<Vec<T>> {
        Ok(part.to_vec())
    }
}

#[cfg(feature = "mpi")]
pub use self::mpi_backend::Mpi;

#[cfg(feature = "mpi")]
mod mpi_backend {
    use mpi::collective::SystemOperation;
    use mpi::point_to_point::{Destination, Source};
    use mpi::topology::{Communicator as _, SimpleCommunicator};
    use mpi::traits::{CommunicatorCollectives, Root};

    use super::*;

    /// The ranks of an MPI job (`MPI_COMM_WORLD`). MPI is finalised when this is dropped.
    pub struct Mpi {
        world: SimpleCommunicator,
        _universe: mpi::environment::Universe,
    }

    impl std::fmt::Debug for Mpi {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Mpi")
                .field("rank", &self.rank())
                .field("size", &self.size())
                .finish()
        }
    }

    /// `values` as bytes (MPI moves bytes).
    fn bytes<T: Wire>(values: &[T]) -> &[u8] {
        bytemuck::cast_slice(values)
    }

    fn bytes_mut<T: Wire>(values: &mut [T]) -> &mut [u8] {
        bytemuck::cast_slice_mut(values)
    }

    impl Mpi {
        /// Starts MPI. Fails if it was started already in this process.
        pub fn init() -> Result<Self> {
            let universe = mpi::initialize().ok_or_else(|| {
                Error::InvalidSetting(
                    "MPI was initialised twice in this process; open one Mpi communicator".into(),
                )
            })?;
            Ok(Self {
                world: universe.world(),
                _universe: universe,
            })
        }
    }

    impl Communicator for Mpi {
        fn rank(&self) -> usize {
            self.world.rank() as usize
        }

        fn size(&self) -> usize {
            self.world.size() as usize
        }

        fn ranks_here(&self) -> usize {
            // What OpenMPI, MPICH/Intel MPI and Slurm set to the processes of this node.
            [
                "OMPI_COMM_WORLD_LOCAL_SIZE",
                "MPI_LOCALNRANKS",
                "SLURM_NTASKS_PER_NODE",
            ]
            .iter()
            .find_map(|v| std::env::var(v).ok()?.trim().parse::<usize>().ok())
            .unwrap_or(1)
            .max(1)
        }

        fn exchange<T: Wire, const D: usize, I: Fn([usize; D]) -> usize + ?Sized>(
            &self,
            faces: &[Face<D>],
            data: &mut [T],
            index: &I,
        ) -> Result<()> {
            let me = self.rank();
            for axis in 0..D {
                let out: Vec<(&Face<D>, Vec<T>)> = on_axis(faces, axis)
                    .map(|f| (f, pack(data, &f.send, index)))
                    .collect();
                let mut inbox: Vec<Vec<T>> = on_axis(faces, axis)
                    .map(|f| vec![T::default(); f.recv.len()])
                    .collect();
                // A face's message is tagged with the side it arrives on: 2 axis + (0 lower, 1 upper).
                let tag = |side: Side| 2 * axis as i32 + i32::from(side == Side::Upper);
                mpi::request::scope(|scope| {
                    let mut pending = Vec::new();
                    for ((f, _), buf) in out.iter().zip(inbox.iter_mut()) {
                        if f.peer != me {
                            let p = self.world.process_at_rank(f.peer as i32);
                            pending.push(p.immediate_receive_into_with_tag(
                                scope,
                                bytes_mut(buf),
                                tag(f.side),
                            ));
                        }
                    }
                    for (f, values) in &out {
                        if f.peer != me {
                            let p = self.world.process_at_rank(f.peer as i32);
                            pending.push(p.immediate_send_with_tag(
                                scope,
                                bytes(values),
                                tag(f.side.opposite()),
                            ));
                        }
                    }
                    for r in pending {
                        r.wait();
                    }
                });
                for (k, f) in on_axis(faces, axis).enumerate() {
                    if f.peer == me {
                        // A periodic axis this rank spans alone: what arrives is its own other side.
                        if let Some((_, v)) =
                            out.iter().find(|(g, _)| g.side != f.side && g.peer == me)
                        {
                            unpack(data, &f.recv, v, index);
                        }
                    } else {
                        unpack(data, &f.recv, &inbox[k], index);
                    }
                }
            }
            Ok(())
        }

        fn sum(&self, v: f64) -> Result<f64> {
            let mut total = 0.0;
            self.world
                .all_reduce_into(&v, &mut total, SystemOperation::sum());
            Ok(total)
        }

        fn broadcast<T: Wire>(&self, v: &mut [T]) -> Result<()> {
            self.world.process_at_rank(0).broadcast_into(bytes_mut(v));
            Ok(())
        }

        fn gather<T: Wire>(&self, part: &[T]) -> Result<Vec<T>> {
            let root = self.world.process_at_rank(0);
            let n = part.len() as u64;
            if self.rank() == 0 {
                let mut counts = vec![0u64; self.size()];
                root.gather_into_root(&n, &mut counts[..]);
                let mut all = vec![T::default(); counts.iter().sum::<u64>() as usize];
                let mut at = part.len();
                all[..at].copy_from_slice(part);
                for (r, &c) in counts.iter().enumerate().skip(1) {
                    let c = c as usize;
                    self.world
                        .process_at_rank(r as i32)
                        .receive_into(bytes_mut(&mut all[at..at + c]));
                    at += c;
                }
                Ok(all)
            } else {
                root.gather_into(&n);
                root.send(bytes(part));
                Ok(Vec::new())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decomp::Decomposition;

    #[test]
    fn solo_wraps_periodic_axes_and_leaves_walls() {
        let d = Decomposition::new([4, 3], [1, 1], [1, 1], [true, false]).unwrap();
        let size = d.local_size(0);
        let index = |p: [usize; 2]| p[0] + size[0] * p[1];
        let mut data = vec![-1.0f64; size[0] * size[1]];
        for y in 0..3 {
            for x in 0..4 {
                data[index([x + 1, y + 1])] = (10 * y + x) as f64;
            }
        }
        Solo.exchange(&d.halo_plan(0), &mut data, &index).unwrap();
        for y in 0..3 {
            assert_eq!(data[index([0, y + 1])], (10 * y + 3) as f64, "x wraps");
            assert_eq!(data[index([5, y + 1])], (10 * y) as f64, "x wraps");
        }
        assert_eq!(data[index([2, 0])], -1.0, "walled y is left alone");
        assert_eq!(Solo.sum(2.5).unwrap(), 2.5);
        assert_eq!(Solo.gather(&[1.0f32, 2.0]).unwrap(), vec![1.0, 2.0]);
    }
}
