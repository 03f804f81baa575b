//! The executor crate's integration tests, one module per file, built as one test binary (linked once, and
//! the generic code they use compiled once, instead of once per file). Run one file's
//! tests with `cargo test --release -p memplan-exec --test exec FILE::`.

mod assembled;
mod chunk_boxes;
mod chunk_conv;
mod chunk_gathers;
mod chunk_moves;
mod chunk_positions;
mod chunk_random;
mod chunk_sink;
mod control_flow;
mod data_dependent;
mod float_shape_arithmetic;
mod graph_builder;
mod inplace_staged;
mod narrow;
mod offload;
mod same_bits;
mod sequences;
