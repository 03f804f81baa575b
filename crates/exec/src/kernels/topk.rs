//! Kernels: topk.
