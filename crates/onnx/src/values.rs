//! Serialized values beyond tensors: the `SequenceProto` and `OptionalProto` messages of ONNX's
//! `onnx-data.proto` (the files ONNX's test cases store sequence and optional inputs and outputs
//! in), and their import as [`DataValue`]s.

use memplan_ir::graph::{DeclType, TypeDecl};
use memplan_ir::{DataType, Expr, Fact, SeqKind, TensorData};

use crate::data::ExternalDataReader;
use crate::error::OnnxError;
use crate::proto::TensorProto;

/// `SequenceProto` (onnx-data.proto, onnx 1.23.2). Maps are not read.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct SequenceProto {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// `SequenceProto.DataType`: 1 tensor, 3 sequence, 5 optional.
    #[prost(int32, optional, tag = "2")]
    pub elem_type: Option<i32>,
    #[prost(message, repeated, tag = "3")]
    pub tensor_values: Vec<TensorProto>,
    #[prost(message, repeated, tag = "5")]
    pub sequence_values: Vec<SequenceProto>,
    #[prost(message, repeated, tag = "7")]
    pub optional_values: Vec<OptionalProto>,
}

/// `OptionalProto` (onnx-data.proto, onnx 1.23.2). Maps are not read.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct OptionalProto {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// `OptionalProto.DataType`: 0 undefined (empty), 1 tensor, 3 sequence, 5 optional.
    #[prost(int32, optional, tag = "2")]
    pub elem_type: Option<i32>,
    #[prost(message, optional, tag = "3")]
    pub tensor_value: Option<TensorProto>,
    #[prost(message, optional, boxed, tag = "5")]
    pub sequence_value: Option<Box<SequenceProto>>,
    #[prost(message, optional, boxed, tag = "7")]
    pub optional_value: Option<Box<OptionalProto>>,
}

/// A value as a file stores it: a tensor, or a sequence or optional of values.
#[derive(Clone, Debug, PartialEq)]
pub enum DataValue {
    Tensor(TensorData),
    Packed {
        kind: SeqKind,
        /// The elements' type when the file or the elements say it.
        dtype: Option<DataType>,
        elems: Vec<DataValue>,
    },
}

impl DataValue {
    /// The element type of a tensor, or of the tensors a sequence or optional holds.
    pub fn dtype(&self) -> Option<DataType> {
        match self {
            DataValue::Tensor(t) => Some(t.dtype),
            DataValue::Packed { dtype, elems, .. } => {
                dtype.or_else(|| elems.iter().find_map(DataValue::dtype))
            }
        }
    }
}

impl DataValue {
    /// What inference knows of this value: exact shapes and element counts, no contents (a value
    /// fed at run time).
    pub fn fact(&self) -> Fact {
        match self {
            DataValue::Tensor(t) => Fact::new(
                t.dtype,
                t.dims.iter().map(|&d| Expr::int(d as i64)).collect(),
            ),
            DataValue::Packed { kind, elems, .. } => Fact::sequence(
                *kind,
                self.dtype(),
                Some(elems.iter().map(DataValue::fact).collect()),
            ),
        }
    }

    /// The value a file holds for a graph input or output declared as `decl`: a `SequenceProto`
    /// or `OptionalProto` for those types, else a `TensorProto`. An empty sequence or optional
    /// takes its element type from the declaration.
    /// `name` labels errors.
    pub fn decode(
        bytes: &[u8],
        decl: Option<&DeclType>,
        name: &str,
    ) -> Result<DataValue, OnnxError> {
        use prost::Message;
        let bad = |what: &str, e: prost::DecodeError| OnnxError::TensorData {
            tensor: name.to_string(),
            reason: format!("not a {what}: {e}"),
        };
        let mut v = match decl.map(|d| &d.ty) {
            Some(TypeDecl::Sequence(_)) => import_sequence(
                &SequenceProto::decode(bytes).map_err(|e| bad("SequenceProto", e))?,
            )?,
            Some(TypeDecl::Optional(_)) => import_optional(
                &OptionalProto::decode(bytes).map_err(|e| bad("OptionalProto", e))?,
            )?,
            _ => tensor(&TensorProto::decode(bytes).map_err(|e| bad("TensorProto", e))?)?,
        };
        if let (DataValue::Packed { dtype, .. }, Some(d)) = (&mut v, decl) {
            *dtype = dtype.or_else(|| decl_elem(d));
        }
        Ok(v)
    }
}

/// The tensor element type a (possibly nested) declared type ends in.
fn decl_elem(d: &DeclType) -> Option<DataType> {
    match &d.ty {
        TypeDecl::Tensor { elem, .. } => *elem,
        TypeDecl::Sequence(e) | TypeDecl::Optional(e) => e.as_deref().and_then(decl_elem),
        _ => None,
    }
}

fn tensor(t: &TensorProto) -> Result<DataValue, OnnxError> {
    crate::import::import_tensor(t, &mut ExternalDataReader::none()).map(DataValue::Tensor)
}

/// Imports a `SequenceProto`.
pub fn import_sequence(s: &SequenceProto) -> Result<DataValue, OnnxError> {
    let mut elems = Vec::new();
    for t in &s.tensor_values {
        elems.push(tensor(t)?);
    }
    for q in &s.sequence_values {
        elems.push(import_sequence(q)?);
    }
    for o in &s.optional_values {
        elems.push(import_optional(o)?);
    }
    Ok(DataValue::Packed {
        kind: SeqKind::Sequence,
        dtype: None,
        elems,
    })
}

/// Imports an `OptionalProto` (empty when it holds no value).
pub fn import_optional(o: &OptionalProto) -> Result<DataValue, OnnxError> {
    let elem = match (&o.tensor_value, &o.sequence_value, &o.optional_value) {
        (Some(t), _, _) => Some(tensor(t)?),
        (_, Some(s), _) => Some(import_sequence(s)?),
        (_, _, Some(q)) => Some(import_optional(q)?),
        _ => None,
    };
    Ok(DataValue::Packed {
        kind: SeqKind::Optional,
        dtype: None,
        elems: elem.into_iter().collect(),
    })
}
