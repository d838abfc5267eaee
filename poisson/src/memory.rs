//! The memory a solve takes at its peak, found by replaying its allocations in the order the code makes
//! them ([`footprint`](crate::solver::footprint)): the set-up holds the finest stencil, the
//! operator, the levels and their temporaries at once, and the solution's download comes on top of
//! every field, so a sum of the arrays would say neither when nor how much. Byte counts are
//! overflow-checked ([`lattice_gpu_host::memory::bytes`]); sums saturate, and a saturated peak is
//! refused as too large.

use lattice_gpu_host::memory::bytes;
use lattice_gpu_host::Shape;

use crate::Result;

/// Bytes held at once, followed through allocations and frees: the most at any moment is the peak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    now: u64,
    peak: u64,
}

impl Tally {
    /// `bytes` more are held.
    pub fn take(&mut self, bytes: u64) {
        self.now = self.now.saturating_add(bytes);
        self.peak = self.peak.max(self.now);
    }

    /// `bytes` held are freed.
    pub fn give(&mut self, bytes: u64) {
        self.now = self.now.saturating_sub(bytes);
    }

    /// `bytes` held for a moment: taken and freed again.
    pub fn passing(&mut self, bytes: u64) {
        self.take(bytes);
        self.give(bytes);
    }

    /// Bytes held now.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The most bytes held at once so far.
    pub fn peak(&self) -> u64 {
        self.peak
    }
}

/// Host memory and the engine's (GPU memory on a GPU engine; host memory too on the CPU engine).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// Host memory.
    pub host: Tally,
    /// GPU memory (nothing on the CPU engine).
    pub gpu: Tally,
    /// Whether the engine's fields are in GPU memory.
    pub on_gpu: bool,
}

impl Memory {
    /// Nothing held yet, the engine's fields on a GPU when `on_gpu`.
    pub fn new(on_gpu: bool) -> Self {
        Self {
            on_gpu,
            ..Self::default()
        }
    }

    /// Where the engine's fields are.
    pub fn engine(&mut self) -> &mut Tally {
        match self.on_gpu {
            true => &mut self.gpu,
            false => &mut self.host,
        }
    }
}

/// Bytes of `count` values of `elem` bytes on the `n` cells of a grid (`count` times the cells), or an
/// error naming `what` where that overflows.
pub fn cells(n: [usize; 3], count: usize, elem: usize, what: &str) -> Result<u64> {
    Ok(bytes(&[count, n[0], n[1], n[2]], elem, what)?)
}

/// Bytes of `count` engine fields of `elem` bytes for `n` cells with a margin of 1 (as
/// [`Shape::new_3d`]`(n, 1)` lays them out), or an error naming `what` where that overflows.
pub fn fields(n: [usize; 3], count: usize, elem: usize, what: &str) -> Result<u64> {
    let size = Shape::new_3d(n, 1)?.size();
    Ok(bytes(&[count, size[0], size[1], size[2]], elem, what)?)
}

/// Bytes of `count` array planes of `elem` bytes of such fields: the buffer a field is uploaded or
/// downloaded through.
pub fn plane(n: [usize; 3], count: usize, elem: usize, what: &str) -> Result<u64> {
    let size = Shape::new_3d(n, 1)?.size();
    Ok(bytes(&[count, size[0], size[1]], elem, what)?)
}
