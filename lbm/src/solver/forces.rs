//! The force of the fluid on each body of a run ([`Forces`], momentum exchange): each rank sums its
//! links plane by plane (on the GPU, a block per plane), rank 0 adds the planes in z order and every
//! rank gets the totals, so a run split over ranks reports the bits of the whole one.

use std::sync::Arc;

use lattice_gpu_host::comm::Communicator;
use lattice_gpu_host::{DeviceBuffer, Gpu};
use lattice_gpu_kernels::bind::bits;
use lattice_gpu_kernels::lbm::{link, Forces, Scheme, FORCE_BLOCK};

use super::{Lbm, LbmStorage, Memory};
use crate::geometry::Geometry;
use crate::Result;

/// One body's links on this rank, grouped by z plane.
#[derive(Debug)]
pub(super) struct BodyLinks {
    /// The links ([`link`]) of this rank's cells, sorted by cell: a plane's are consecutive.
    links: Vec<u64>,
    /// Where each plane's links start, and one past the last.
    starts: Vec<u32>,
    /// Each link's wall distance ([`Geometry::cut`]), or empty where all are halfway.
    cuts: Vec<f32>,
    /// On a GPU, the same there.
    device: Option<DeviceLinks>,
}

/// A body's links on a GPU.
#[derive(Debug)]
struct DeviceLinks {
    links: DeviceBuffer<u64>,
    starts: DeviceBuffer<u32>,
    /// Three partial sums per plane.
    partials: DeviceBuffer<f64>,
    cuts: Option<DeviceBuffer<f32>>,
}

impl BodyLinks {
    /// The planes holding links.
    fn planes(&self) -> usize {
        self.starts.len() - 1
    }
}

/// The links of every body of `global` from the cells of its planes `z0 .. z0 + planes`, indexed in a
/// lattice with `halo` planes below them, and on `gpu` a copy there. Made with the run, so that no
/// force evaluation costs more than another.
pub(super) fn body_links(
    global: &Geometry,
    [z0, planes, halo]: [usize; 3],
    gpu: Option<&Arc<Gpu>>,
) -> Result<Vec<BodyLinks>> {
    let [nx, ny, _] = global.dims();
    let plane = nx * ny;
    (0..global.bodies().len())
        .map(|b| {
            let mut links = Vec::new();
            let mut starts = Vec::new();
            let mut cuts = Vec::new();
            let mut last = None;
            for (n, q) in global.links(b) {
                let z = n / plane;
                if !(z0..z0 + planes).contains(&z) {
                    continue;
                }
                if last != Some(z) {
                    starts.push(links.len() as u32);
                    last = Some(z);
                }
                links.push(link((n % plane + plane * (z - z0 + halo)) as u32, q));
                cuts.push(global.cut(n, q) as f32);
            }
            if cuts.iter().all(|&d| d == 0.5) {
                cuts.clear();
            }
            starts.push(links.len() as u32);
            let planes = starts.len() - 1;
            let device = match gpu {
                Some(gpu) if planes > 0 => Some(DeviceLinks {
                    links: DeviceBuffer::from_host(gpu, &links)?,
                    starts: DeviceBuffer::from_host(gpu, &starts)?,
                    partials: DeviceBuffer::zeros(gpu, 3 * planes)?,
                    cuts: match cuts.is_empty() {
                        true => None,
                        false => Some(DeviceBuffer::from_host(gpu, &cuts)?),
                    },
                }),
                _ => None,
            };
            Ok(BodyLinks {
                links,
                starts,
                cuts,
                device,
            })
        })
        .collect()
}

impl<S: LbmStorage, C: Communicator> Lbm<S, C> {
    /// The force of the fluid on each body of the geometry ([`Geometry::bodies`]), in lattice units,
    /// by momentum exchange over the links of the last step. Every rank must call it after the same
    /// step. Where links are interpolated, a split run first refreshes its halo planes, unless the
    /// step left them current: the interpolation reads the cells upstream of the links.
    pub fn forces(&mut self) -> Result<Vec<[f64; 3]>> {
        // The layout the last step left, the other of the next one's in place (the initial state is
        // stored as the even step stores its).
        let scheme = match self.scheme() {
            Scheme::AaOdd => Scheme::AaEven,
            Scheme::AaEven => Scheme::AaOdd,
            Scheme::Ab => Scheme::Ab,
        };
        // Every rank decides alike: the refresh is collective.
        let cut = self.cuts.is_some();
        if cut && self.split.is_some() && !self.halos_current && scheme != Scheme::AaOdd {
            self.start_exchange()?;
            self.finish_exchange()?;
        }
        let cells = self.geometry.cells() as u64;
        let dims = self.geometry.dims().map(|d| d as u32);
        let q = self.velocities().q() as u32;
        let scheme = scheme as u32;
        let mut parts = Vec::new();
        for body in &self.bodies {
            let cuts = |device: Option<&DeviceBuffer<f32>>| match (body.cuts.is_empty(), device) {
                (true, _) => std::ptr::null(),
                (false, Some(d)) => d.ptr() as *const f32,
                (false, None) => body.cuts.as_ptr(),
            };
            match (&self.mem, &body.device) {
                (Memory::Host { f, .. }, _) => {
                    let args = Forces::<S> {
                        f: bits::<S::Raw, S>(f).as_ptr(),
                        q,
                        cells,
                        links: body.links.as_ptr(),
                        starts: body.starts.as_ptr(),
                        scheme,
                        cuts: cuts(None),
                        dims,
                        partials: std::ptr::null_mut(),
                    };
                    for plane in 0..body.planes() {
                        // SAFETY: the links were made for this lattice, whose `f` holds every population.
                        parts.extend(unsafe { args.group(plane as u32, 0, 1) });
                    }
                }
                (Memory::Device { gpu, f, .. }, Some(d)) => {
                    let args = Forces::<S> {
                        f: f.ptr(),
                        q,
                        cells,
                        links: d.links.ptr(),
                        starts: d.starts.ptr(),
                        scheme,
                        cuts: cuts(d.cuts.as_ref()),
                        dims,
                        partials: d.partials.ptr(),
                    };
                    let planes = body.planes();
                    // SAFETY: the entry takes one `Forces<S>`; the links and starts were made for this
                    // lattice, and `partials` holds three values per plane, one block each.
                    unsafe {
                        gpu.launch_on(
                            &gpu.launch_stream(),
                            S::FORCE_ENTRY,
                            &args,
                            planes as u32,
                            FORCE_BLOCK,
                        )?
                    };
                    parts.extend(d.partials.download_span(0, 3 * planes)?);
                }
                // No link on this rank.
                (Memory::Device { .. }, None) => {}
            }
        }
        self.total_forces(&parts)
    }

    /// Every rank's plane sums `parts` (body by body, three per plane) added in z order on rank 0,
    /// the totals of each body sent to all.
    fn total_forces(&self, parts: &[f64]) -> Result<Vec<[f64; 3]>> {
        let mine: Vec<f64> = self
            .bodies
            .iter()
            .map(|b| b.planes() as f64)
            .chain(parts.iter().copied())
            .collect();
        let all = self.comm.gather(&mine)?;
        let count = self.bodies.len();
        let mut totals = vec![0.0; 3 * count];
        if self.comm.rank() == 0 {
            // Each rank's part: its plane count per body, then the bodies' plane sums.
            let mut at = 0;
            let mut sums: Vec<Vec<[f64; 3]>> = vec![Vec::new(); count];
            while at < all.len() {
                let groups: Vec<usize> = all[at..at + count].iter().map(|&g| g as usize).collect();
                at += count;
                for (b, g) in groups.into_iter().enumerate() {
                    for p in 0..g {
                        let s = &all[at + 3 * p..at + 3 * p + 3];
                        sums[b].push([s[0], s[1], s[2]]);
                    }
                    at += 3 * g;
                }
            }
            for (b, planes) in sums.iter().enumerate() {
                for s in planes {
                    for a in 0..3 {
                        totals[3 * b + a] += s[a];
                    }
                }
            }
        }
        self.comm.broadcast(&mut totals)?;
        Ok(totals.chunks(3).map(|c| [c[0], c[1], c[2]]).collect())
    }
}
