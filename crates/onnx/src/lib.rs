//! memplan-onnx: the only crate that knows protobuf. Reads ONNX models (memory-mapped, external data,
//! local functions inlined), and writes them back (atomically, inline or with external data).
//!
//! Entry points:
//! - [`import()`] / [`save()`]: an ONNX file to the memplan IR (`memplan_ir::Model`) and back.
//! - [`load_model_proto`] / [`save_model_proto`]: `ModelProto` from and to disk.
//! - [`data::tensor_bytes`]: a tensor's payload from `raw_data`, typed fields or external data.
//! - [`inline_functions`]: replaces calls of model-local functions by their bodies.
//!
//! *Invariant*: tensor payloads read from disk are `Bytes` slices of a file mapping, never copies.
//! *Boundary*: no other crate sees [`proto`] types.

pub mod data;
pub mod error;
pub mod export;
pub mod functions;
pub mod fuzzgen;
pub mod import;
pub mod load;
pub mod proto;
pub mod save;
#[cfg(test)]
mod testutil;
pub mod values;

pub use data::{load_external_data, tensor_bytes, ExternalDataReader, TensorStorage};
pub use error::OnnxError;
pub use export::{default_mode, export, save};
pub use functions::inline_functions;
pub use import::{import, import_bytes, import_proto};
pub use load::{decode_model_proto, load_model_proto};
pub use save::{
    save_model_proto, save_model_proto_with, write_atomic, ExternalData, DEFAULT_THRESHOLD,
};
