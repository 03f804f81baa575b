//! Kernels: pool.
