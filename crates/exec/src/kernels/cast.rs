//! Kernels: cast.
