//! Cubic semi-Lagrangian advection on lattice-gpu: skeleton, filled by the advection issue.
