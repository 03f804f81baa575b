//! memplan-exec: the CPU executor.
//!
//! - [`interp::run`]: runs a graph over a schedule with the simulator's lifetimes and views.
//! - [`tensor::Tensor`]: dense tensors over counted buffers or zero-copy model bytes.
//! - [`mem`]: per-run tensor-memory accounting and a process-wide counting allocator.
//! - [`ops`]: op implementations over [`kernels`].

pub mod interp;
pub mod kernels;
pub mod mem;
pub mod ops;
pub mod tensor;

pub use interp::{run, ExecError, RunOptions, RunResult};
pub use tensor::Tensor;
