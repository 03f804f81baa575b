//! memplan IR to ONNX protobuf: the inverse of [`crate::import`]. Every payload is written as
//! `raw_data` (or `string_data`); where the bytes go on disk is decided when saving
//! ([`crate::save::ExternalData`]).

use std::path::Path;

use memplan_ir::graph::{
    AttrValue, DeclDim, DeclDimEntry, DeclType, Graph, Model, SparseTensorData, TypeDecl, ValueId,
    ValueKind,
};
use memplan_ir::tensor::{DataOrigin, TensorData, TensorStorage};

use crate::error::OnnxError;
use crate::proto::{
    attribute_proto::AttributeType, tensor_shape_proto, type_proto, AttributeProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, SparseTensorProto, StringStringEntryProto,
    TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use crate::save::ExternalData;

/// Saves `model` to `path` (atomically: complete or not at all), placing payloads as `mode` says.
pub fn save(model: &Model, path: impl AsRef<Path>, mode: ExternalData) -> Result<(), OnnxError> {
    crate::save::save_model_proto(&export(model), path, mode)
}

/// Where a model's payloads go by default: inline, unless the model read any from external data or
/// its weights would not fit protobuf's 2 GiB limit inline; then in `<model file>.data`.
pub fn default_mode(model: &Model) -> ExternalData {
    let mut external = false;
    let mut bytes = 0u64;
    for v in &model.graph.values {
        if let ValueKind::Initializer(t) = &v.kind {
            external |= matches!(t.origin, DataOrigin::External { .. });
            bytes += t.byte_len();
        }
    }
    if external || bytes > (1 << 30) {
        ExternalData::Auto {
            threshold: crate::save::DEFAULT_THRESHOLD,
        }
    } else {
        ExternalData::Inline
    }
}

/// The `ModelProto` of a model.
pub fn export(model: &Model) -> ModelProto {
    ModelProto {
        ir_version: Some(model.ir_version),
        opset_import: model
            .opsets
            .iter()
            .map(|o| OperatorSetIdProto {
                domain: opt(&o.domain),
                version: Some(o.version),
            })
            .collect(),
        producer_name: opt(&model.producer_name),
        producer_version: opt(&model.producer_version),
        domain: opt(&model.domain),
        model_version: (model.model_version != 0).then_some(model.model_version),
        doc_string: opt(&model.doc),
        graph: Some(export_graph(&model.graph)),
        metadata_props: kvs(&model.metadata),
        ..Default::default()
    }
}

fn opt(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn kvs(props: &[(String, String)]) -> Vec<StringStringEntryProto> {
    props
        .iter()
        .map(|(k, v)| StringStringEntryProto {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

fn name_of(g: &Graph, v: Option<ValueId>) -> String {
    v.map(|v| g.value(v).name.clone()).unwrap_or_default()
}

/// The `GraphProto` of a graph.
pub fn export_graph(g: &Graph) -> GraphProto {
    let value_info = |v: ValueId| {
        let val = g.value(v);
        ValueInfoProto {
            name: Some(val.name.clone()),
            r#type: val.decl.as_ref().map(export_type),
            doc_string: opt(&val.doc),
            metadata_props: kvs(&val.metadata),
        }
    };
    let mut initializer = Vec::new();
    let mut sparse_initializer = Vec::new();
    for &v in &g.initializers {
        if let ValueKind::Initializer(t) = &g.value(v).kind {
            initializer.push(export_tensor(t));
        }
    }
    for &v in &g.sparse_initializers {
        if let ValueKind::SparseInitializer(s) = &g.value(v).kind {
            sparse_initializer.push(export_sparse(s));
        }
    }
    GraphProto {
        node: g
            .nodes
            .iter()
            .map(|n| NodeProto {
                input: n.inputs.iter().map(|&v| name_of(g, v)).collect(),
                output: n.outputs.iter().map(|&v| name_of(g, v)).collect(),
                name: opt(&n.name),
                op_type: Some(n.op.clone()),
                domain: opt(&n.domain),
                overload: opt(&n.overload),
                attribute: n
                    .attrs
                    .iter()
                    .map(|a| export_attr(&a.name, &a.value, &a.doc))
                    .collect(),
                doc_string: opt(&n.doc),
                metadata_props: kvs(&n.metadata),
                ..Default::default()
            })
            .collect(),
        name: Some(g.name.clone()),
        initializer,
        sparse_initializer,
        doc_string: opt(&g.doc),
        input: g.inputs.iter().map(|&v| value_info(v)).collect(),
        output: g.outputs.iter().map(|&v| value_info(v)).collect(),
        value_info: g.value_info.iter().map(|&v| value_info(v)).collect(),
        metadata_props: kvs(&g.metadata),
        ..Default::default()
    }
}

/// The `TensorProto` of a constant, payload in `raw_data` (`string_data` for strings).
pub fn export_tensor(t: &TensorData) -> TensorProto {
    let mut p = TensorProto {
        dims: t.dims.iter().map(|&d| d as i64).collect(),
        data_type: Some(t.dtype.onnx_code()),
        name: opt(&t.name),
        doc_string: opt(&t.doc),
        metadata_props: kvs(&t.metadata),
        ..Default::default()
    };
    match &t.storage {
        TensorStorage::Raw(b) => p.raw_data = Some(b.clone()),
        TensorStorage::Strings(s) => p.string_data = s.clone(),
    }
    p
}

fn export_sparse(s: &SparseTensorData) -> SparseTensorProto {
    SparseTensorProto {
        values: Some(export_tensor(&s.values)),
        indices: Some(export_tensor(&s.indices)),
        dims: s.dims.clone(),
    }
}

/// The `TypeProto` of a declared type.
pub fn export_type(d: &DeclType) -> TypeProto {
    let shape = |s: &Option<Vec<DeclDimEntry>>| {
        s.as_ref().map(|dims| TensorShapeProto {
            dim: dims
                .iter()
                .map(|e| tensor_shape_proto::Dimension {
                    denotation: opt(&e.denotation),
                    value: match &e.dim {
                        DeclDim::Value(v) => {
                            Some(tensor_shape_proto::dimension::Value::DimValue(*v))
                        }
                        DeclDim::Param(p) => {
                            Some(tensor_shape_proto::dimension::Value::DimParam(p.clone()))
                        }
                        DeclDim::Unknown => None,
                    },
                })
                .collect(),
        })
    };
    let boxed = |t: &Option<Box<DeclType>>| t.as_ref().map(|t| Box::new(export_type(t)));
    let value = match &d.ty {
        TypeDecl::Tensor { elem, shape: s } => {
            Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem.map(|e| e.onnx_code()).unwrap_or(0)),
                shape: shape(s),
            }))
        }
        TypeDecl::SparseTensor { elem, shape: s } => Some(type_proto::Value::SparseTensorType(
            type_proto::SparseTensor {
                elem_type: Some(elem.map(|e| e.onnx_code()).unwrap_or(0)),
                shape: shape(s),
            },
        )),
        TypeDecl::Sequence(e) => Some(type_proto::Value::SequenceType(Box::new(
            type_proto::Sequence {
                elem_type: boxed(e),
            },
        ))),
        TypeDecl::Optional(e) => Some(type_proto::Value::OptionalType(Box::new(
            type_proto::Optional {
                elem_type: boxed(e),
            },
        ))),
        TypeDecl::Map { key, value } => {
            Some(type_proto::Value::MapType(Box::new(type_proto::Map {
                key_type: key.map(|k| k.onnx_code()),
                value_type: boxed(value),
            })))
        }
        TypeDecl::Unset => None,
    };
    TypeProto {
        denotation: opt(&d.denotation),
        value,
    }
}

fn export_attr(name: &str, v: &AttrValue, doc: &str) -> AttributeProto {
    let mut a = AttributeProto {
        name: Some(name.to_string()),
        doc_string: opt(doc),
        ..Default::default()
    };
    let ty = match v {
        AttrValue::Float(x) => {
            a.f = Some(*x);
            AttributeType::Float
        }
        AttrValue::Int(x) => {
            a.i = Some(*x);
            AttributeType::Int
        }
        AttrValue::String(x) => {
            a.s = Some(x.clone().into());
            AttributeType::String
        }
        AttrValue::Tensor(t) => {
            a.t = Some(export_tensor(t));
            AttributeType::Tensor
        }
        AttrValue::Graph(g) => {
            a.g = Some(export_graph(g));
            AttributeType::Graph
        }
        AttrValue::SparseTensor(s) => {
            a.sparse_tensor = Some(export_sparse(s));
            AttributeType::SparseTensor
        }
        AttrValue::Type(t) => {
            a.tp = Some(export_type(t));
            AttributeType::TypeProto
        }
        AttrValue::Floats(x) => {
            a.floats = x.clone();
            AttributeType::Floats
        }
        AttrValue::Ints(x) => {
            a.ints = x.clone();
            AttributeType::Ints
        }
        AttrValue::Strings(x) => {
            a.strings = x.iter().map(|s| s.clone().into()).collect();
            AttributeType::Strings
        }
        AttrValue::Tensors(x) => {
            a.tensors = x.iter().map(export_tensor).collect();
            AttributeType::Tensors
        }
        AttrValue::Graphs(x) => {
            a.graphs = x.iter().map(export_graph).collect();
            AttributeType::Graphs
        }
        AttrValue::SparseTensors(x) => {
            a.sparse_tensors = x.iter().map(export_sparse).collect();
            AttributeType::SparseTensors
        }
        AttrValue::Types(x) => {
            a.type_protos = x.iter().map(export_type).collect();
            AttributeType::TypeProtos
        }
    };
    a.r#type = Some(ty as i32);
    a
}
