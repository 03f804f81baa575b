//! Kernels: index.
