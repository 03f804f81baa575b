//! The ONNX crate's integration tests, one module per file, built as one test binary (linked once, and
//! the generic code they use compiled once, instead of once per file). Run one file's
//! tests with `cargo test --release -p memplan-onnx --test onnx FILE::`.

mod corpus;
mod node_tests;
mod shapes;
