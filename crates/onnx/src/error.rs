//! The one error type of this crate: every variant names the file, node or tensor and the rule broken.

use std::path::PathBuf;

use memplan_ir::graph::printable;

/// An error while reading, converting or writing an ONNX model.
///
/// `Display` is one line that names where the problem is (file, node, tensor, function) and what rule
/// was broken, suitable for a CLI to print as is.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    /// The file could not be opened, mapped, read or written.
    #[error("{}: {op}: {source}", path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        source: std::io::Error,
    },

    /// The bytes are not a protobuf `ModelProto`.
    #[error("{}: not an ONNX model: {source}", path.display())]
    Decode {
        path: PathBuf,
        source: prost::DecodeError,
    },

    /// The `ModelProto` decoded but has no `graph`.
    #[error("{}: not an ONNX model: ModelProto has no graph", path.display())]
    NoGraph { path: PathBuf },

    /// A tensor's external-data reference is malformed or points outside the model's directory or file.
    #[error(
        "tensor '{}': external data '{}': {}",
        printable(.tensor),
        printable(.location),
        printable(.reason)
    )]
    ExternalData {
        tensor: String,
        location: String,
        reason: String,
    },

    /// A tensor's stored data disagree with its type or dims (wrong field, wrong length, unknown type).
    #[error("tensor '{}': {}", printable(.tensor), printable(.reason))]
    TensorData { tensor: String, reason: String },

    /// A model-local function could not be inlined (recursion, undefined value, opset conflict).
    #[error("function '{}': {}", printable(.function), printable(.reason))]
    Function { function: String, reason: String },

    /// A node violates the ONNX rules on import (bad attribute, unknown value, unsupported construct).
    #[error(
        "node '{}' ({}): {}",
        printable(.node),
        printable(.op_type),
        printable(.reason)
    )]
    Node {
        node: String,
        op_type: String,
        reason: String,
    },

    /// The graph as a whole is malformed (dangling input, duplicate producer, cycle, bad declaration).
    #[error("graph '{}': {}", printable(.graph), printable(.reason))]
    Graph { graph: String, reason: String },

    /// The model cannot be written in the requested form (e.g. over 2 GiB inline).
    #[error("{}: cannot save: {}", path.display(), printable(.reason))]
    Save { path: PathBuf, reason: String },
}

impl OnnxError {
    pub(crate) fn io(
        path: impl Into<PathBuf>,
        op: &'static str,
        source: std::io::Error,
    ) -> OnnxError {
        OnnxError::Io {
            path: path.into(),
            op,
            source,
        }
    }

    pub(crate) fn tensor(tensor: &str, reason: impl Into<String>) -> OnnxError {
        OnnxError::TensorData {
            tensor: tensor.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn external(tensor: &str, location: &str, reason: impl Into<String>) -> OnnxError {
        OnnxError::ExternalData {
            tensor: tensor.to_string(),
            location: location.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn function(function: &str, reason: impl Into<String>) -> OnnxError {
        OnnxError::Function {
            function: function.to_string(),
            reason: reason.into(),
        }
    }
}
