//! memplan-exec: the CPU executor.
//!
//! - [`interp::run`]: runs a graph over a schedule with the simulator's lifetimes and views;
//!   [`interp::run_planned`] runs it from one arena at a checked plan's offsets ([`arena`], [`inplace`]),
//!   with offloaded values copied to and from a host tier by a copier thread beside the compute (`host`).
//! - [`tensor::Tensor`]: dense tensors over counted buffers or zero-copy model bytes.
//! - [`mem`]: per-run tensor-memory accounting and a process-wide counting allocator.
//! - [`ops`]: op implementations over [`kernels`].
//! - [`fold`]: the kernels as inference's constant folder ([`install_const_folder`]).

pub mod arena;
pub mod fold;
mod host;
pub mod inplace;
pub mod interp;
pub mod kernels;
pub mod mem;
pub mod ops;
pub mod tensor;

pub use fold::install_const_folder;
pub use inplace::supports_inplace;
pub use interp::{run, run_checked, run_planned, ExecError, PlanReport, RunOptions, RunResult};
pub use tensor::Tensor;
