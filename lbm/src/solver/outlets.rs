//! Which fluid cell keeps its non-reflecting outlet's reference velocity in which outlet cell.

use std::collections::HashMap;

use lattice_gpu_kernels::lbm::{opposite, tag};

use crate::geometry::Geometry;
use crate::Result;

/// The fluid cell that keeps its non-reflecting outlet's reference in each outlet cell (the first face
/// of the fluid cell, in `q` order, with an outlet behind it, as the kernels choose), and that face's
/// `q`. Fails where an outlet cell would serve two fluid cells: outlets must form planes with the
/// fluid on one side.
pub(super) fn outlet_owners(g: &Geometry) -> Result<HashMap<usize, (usize, usize)>> {
    let outlet = |n: usize| g.tags()[n] & tag::OUTLET != 0;
    let mut owners = HashMap::new();
    for x in (0..g.cells()).filter(|&x| g.is_fluid(x)) {
        let Some(q) = (1..=6).find(|&q| outlet(g.neighbour(x, opposite(q)))) else {
            continue;
        };
        let o = g.neighbour(x, opposite(q));
        if owners.insert(o, (x, q)).is_some() {
            let [nx, ny, _] = g.dims();
            return Err(crate::Error::InvalidParameter(format!(
                "the outlet cell [{}, {}, {}] has fluid on two faces: a non-reflecting outlet needs \
                 its cells in planes with the fluid on one side (or give the outlet a fixed density)",
                o % nx,
                o / nx % ny,
                o / (nx * ny)
            )));
        }
    }
    Ok(owners)
}
