//! Lattice QCD on lattice-gpu (Wilson-Dirac, BiCGStab): skeleton, filled by the lattice-QCD issue.
