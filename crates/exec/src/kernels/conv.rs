//! Kernels: conv.
