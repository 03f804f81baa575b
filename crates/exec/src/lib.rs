//! memplan-exec: the CPU executor.

pub mod kernels;
