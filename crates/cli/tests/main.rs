//! The CLI crate's integration tests, one module per file, built as one test binary (linked once, and
//! the generic code they use compiled once, instead of once per file). Run one file's
//! tests with `cargo test --release -p memplan --test cli FILE::`.

mod bad_input;
mod chunk_corpus;
mod common;
mod conformance;
mod estimate_corpus;
mod grad_corpus;
mod narrow;
mod node_mutations;
#[path = "../src/npz.rs"]
#[allow(dead_code)]
mod npz;
mod offload;
mod plan_determinism;
mod random_ops;
mod run_corpus;
mod run_planned;
mod shape_folding;
mod wide_corpus;
