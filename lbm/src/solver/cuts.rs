//! The rank's interpolated links ([`Cuts`](lattice_gpu_kernels::lbm::Cuts)): a row of wall
//! distances per fluid cell that has any, and the in-place scheme's copies in the wall cells, which
//! the host primes and a split keeps.

use std::sync::Arc;

use lattice_gpu_host::{DeviceBuffer, Gpu};
use lattice_gpu_kernels::lbm::Q_MAX;

use super::Streaming;
use crate::geometry::Geometry;
use crate::Result;

/// The rows of wall distances of a rank's cells with interpolated links.
pub(super) struct CutTable {
    /// Per local cell, its row or `u32::MAX`.
    pub(super) rows: Vec<u32>,
    /// A distance per population of the velocity set per row.
    pub(super) distances: Vec<f32>,
    /// On a GPU, both there.
    pub(super) device: Option<(DeviceBuffer<u32>, DeviceBuffer<f32>)>,
    /// In place, per direction `k`, the links along it with the wall further than halfway, as
    /// `(fluid cell, wall cell)`: the wall cell's slot `k` holds a copy of the fluid cell's (see
    /// [`prime`](Self::prime)).
    copies: Vec<Vec<(usize, usize)>>,
    /// Of those, the links into a split run's halo planes, whose copies a refresh of the halos must
    /// not lose.
    halo_copies: Vec<Vec<(usize, usize)>>,
    /// [`copies`](Self::copies) of the whole grid, by its cells, for a checkpoint.
    global_copies: Vec<Vec<(usize, usize)>>,
}

impl CutTable {
    /// The table of the links of `global` that are not halfway ([`Geometry::cut_links`]), for the
    /// rank's lattice `local` (with a halo plane at each end where `halos`), whose plane `lz` holds
    /// global plane `global_plane(lz)`; `None` where there are none.
    pub(super) fn new(
        global: &Geometry,
        local: &Geometry,
        streaming: Streaming,
        halos: bool,
        global_plane: impl Fn(usize) -> usize,
        gpu: Option<&Arc<Gpu>>,
    ) -> Result<Option<Self>> {
        let links = global.cut_links();
        if links.is_empty() {
            return Ok(None);
        }
        let [nx, ny, nz] = global.dims();
        let (plane, cells, local_planes) = (nx * ny, local.cells(), local.dims()[2]);
        let mut locals = vec![Vec::new(); nz];
        for lz in 0..local_planes {
            locals[global_plane(lz)].push(lz);
        }
        let q_count = local.velocities().q();
        let mut global_copies = vec![Vec::new(); q_count];
        if streaming == Streaming::InPlace {
            for &(n, k, _) in links.iter().filter(|l| l.2 > 0.5) {
                global_copies[k].push((n, global.neighbour(n, k)));
            }
        }
        let mut by_cell = std::collections::BTreeMap::<usize, [f32; Q_MAX]>::new();
        for (n, q, d) in links {
            for &lz in &locals[n / plane] {
                by_cell
                    .entry(n % plane + plane * lz)
                    .or_insert([0.5; Q_MAX])[q] = d as f32;
            }
        }
        let mut rows = vec![u32::MAX; cells];
        let mut copies = vec![Vec::new(); q_count];
        let mut halo_copies = vec![Vec::new(); q_count];
        let halo = |n: usize| halos && (n / plane == 0 || n / plane == local_planes - 1);
        for (i, (&n, row)) in by_cell.iter().enumerate() {
            rows[n] = i as u32;
            if streaming == Streaming::InPlace && !halo(n) {
                for k in (1..q_count).filter(|&k| row[k] > 0.5) {
                    let w = local.neighbour(n, k);
                    copies[k].push((n, w));
                    if halo(w) {
                        halo_copies[k].push((n, w));
                    }
                }
            }
        }
        let distances: Vec<f32> = by_cell
            .values()
            .flat_map(|row| &row[..q_count])
            .copied()
            .collect();
        let device = match gpu {
            Some(gpu) => Some((
                DeviceBuffer::from_host(gpu, &rows)?,
                DeviceBuffer::from_host(gpu, &distances)?,
            )),
            None => None,
        };
        Ok(Some(Self {
            rows,
            distances,
            device,
            copies,
            halo_copies,
            global_copies,
        }))
    }

    /// Puts the in-place copies into the wall cells' slots of the lattice `raw` (a slot of `cells`
    /// values per population) in a state stored as the even step stores it, where the fluid cell's own
    /// slot `k` holds what it sent away from the wall.
    pub(super) fn prime<T: Copy>(&self, raw: &mut [T], cells: usize) {
        for k in 0..self.copies.len() {
            self.prime_slot(k, &mut raw[k * cells..(k + 1) * cells]);
        }
    }

    /// [`prime`](Self::prime) of slot `k`'s values.
    pub(super) fn prime_slot<T: Copy>(&self, k: usize, values: &mut [T]) {
        copy_pairs(&self.copies[k], values);
    }

    /// [`prime`](Self::prime) of slot `k`'s values in the halo planes only, after a refresh of them.
    pub(super) fn prime_halo_slot<T: Copy>(&self, k: usize, values: &mut [T]) {
        copy_pairs(&self.halo_copies[k], values);
    }

    /// [`prime`](Self::prime) of slot `k`'s values of the whole grid, by its cells (a checkpoint's).
    pub(super) fn prime_global_slot<T: Copy>(&self, k: usize, values: &mut [T]) {
        copy_pairs(&self.global_copies[k], values);
    }
}

/// Each fluid cell's value into its wall cell's, for the pairs `(fluid cell, wall cell)`.
fn copy_pairs<T: Copy>(pairs: &[(usize, usize)], values: &mut [T]) {
    for &(x, w) in pairs {
        values[w] = values[x];
    }
}
