//! memplan-ir: value types and op semantics of the graph IR. No I/O.
//!
//! - [`dim::Expr`]: symbolic integer expressions (dims, sizes), canonical so equal sizes compare equal.
//! - [`dtype::DataType`]: every ONNX element type.
//! - [`tensor::TensorData`]: constant tensors held as shared `Bytes` (no copies of mmapped weights).
//! - [`graph`]: `Graph`/`Node`/`Value` with dense `NodeId`/`ValueId`, `Model`, structural validation.
//! - [`infer`]: symbolic shape/type inference with constant folding of small integer tensors.
//! - [`fold`]: constant folding through the executor's kernels, registered as a [`fold::ConstFolder`].
//! - [`ops`]: the op table: per op, its shape rule and memory behaviour (view, in-place, scratch).

pub mod dim;
pub mod dtype;
pub mod fold;
pub mod graph;
pub mod infer;
pub mod ops;
pub mod summary;
pub mod tensor;
pub mod value_set;

pub use dim::Expr;
pub use dtype::DataType;
pub use graph::{
    AttrValue, Attribute, DeclDim, DeclDimEntry, DeclType, Graph, GraphError, Model, Node, NodeId,
    OpsetImport, SparseTensorData, TypeDecl, Value, ValueId, ValueKind, PINNED_DIMS_KEY,
};
pub use infer::{
    infer_graph, infer_graph_with, infer_model, infer_model_at, infer_model_for, infer_model_with,
    wants_point, Fact, Facts, Known, SeqFact, SeqKind,
};
pub use tensor::{DataOrigin, TensorData, TensorStorage};
