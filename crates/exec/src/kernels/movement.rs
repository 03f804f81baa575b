//! Kernels: movement.
