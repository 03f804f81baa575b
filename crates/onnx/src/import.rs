//! ONNX protobuf to memplan IR, in clear phases: decode (see [`crate::load`]), inline local functions,
//! then per graph: declare inputs and initializers, add nodes (subgraphs recursively), attach declared
//! types, and check the structure (dangling inputs, duplicate producers, cycles).
//!
//! Names are kept as labels; identity is the dense `ValueId`/`NodeId` of the IR. Tensor payloads stay
//! `Bytes` slices of the file mappings (model file or external-data side files), never copies.

use std::collections::BTreeMap;
use std::path::Path;

use memplan_ir::graph::{
    AttrValue, Attribute, DeclDim, DeclDimEntry, DeclType, Graph, Model, Node, NodeId, OpsetImport,
    SparseTensorData, TypeDecl, ValueId, ValueKind,
};
use memplan_ir::tensor::{DataOrigin, TensorData, TensorStorage as IrStorage};
use memplan_ir::DataType;

use crate::data::{external_ref, is_external, tensor_bytes, ExternalDataReader, TensorStorage};
use crate::error::OnnxError;
use crate::proto::{
    attribute_proto::AttributeType, tensor_shape_proto::dimension, type_proto, AttributeProto,
    GraphProto, ModelProto, NodeProto, SparseTensorProto, StringStringEntryProto, TensorProto,
    TypeProto, ValueInfoProto,
};

/// Loads the model at `path` into the IR: decodes it (memory-mapped), inlines local functions, and
/// resolves external data relative to the model's directory.
pub fn import(path: impl AsRef<Path>) -> Result<Model, OnnxError> {
    let path = path.as_ref();
    let proto = crate::load::load_model_proto(path)?;
    let mut reader = ExternalDataReader::new(crate::load::model_dir(path));
    import_proto(proto, &mut reader)
}

/// Imports a model from its encoded bytes; `name` only labels errors. External data cannot be read
/// (there is no directory) and is an error. This is the entry point the fuzz target drives.
pub fn import_bytes(bytes: bytes::Bytes, name: &Path) -> Result<Model, OnnxError> {
    let proto = crate::load::decode_model_proto(bytes, name)?;
    import_proto(proto, &mut ExternalDataReader::none())
}

/// Converts a decoded `ModelProto` (external data read through `reader`).
pub fn import_proto(
    mut proto: ModelProto,
    reader: &mut ExternalDataReader,
) -> Result<Model, OnnxError> {
    crate::functions::inline_functions(&mut proto)?;
    let g = proto.graph.take().unwrap_or_default();
    let graph = import_graph(&g, reader, &[])?;
    Ok(Model {
        graph,
        ir_version: proto.ir_version.unwrap_or(0),
        opsets: proto
            .opset_import
            .iter()
            .map(|o| OpsetImport {
                domain: o.domain.clone().unwrap_or_default(),
                version: o.version.unwrap_or(0),
            })
            .collect(),
        producer_name: proto.producer_name.unwrap_or_default(),
        producer_version: proto.producer_version.unwrap_or_default(),
        domain: proto.domain.unwrap_or_default(),
        model_version: proto.model_version.unwrap_or(0),
        doc: proto.doc_string.unwrap_or_default(),
        metadata: kvs(&proto.metadata_props),
    })
}

fn kvs(props: &[StringStringEntryProto]) -> Vec<(String, String)> {
    props
        .iter()
        .map(|p| {
            (
                p.key.clone().unwrap_or_default(),
                p.value.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn graph_err(g: &GraphProto, reason: impl Into<String>) -> OnnxError {
    OnnxError::Graph {
        graph: g.name.clone().unwrap_or_default(),
        reason: reason.into(),
    }
}

fn node_err(n: &NodeProto, index: usize, reason: impl Into<String>) -> OnnxError {
    let name = match &n.name {
        Some(s) if !s.is_empty() => s.clone(),
        _ => format!("#{index}"),
    };
    OnnxError::Node {
        node: name,
        op_type: n.op_type.clone().unwrap_or_default(),
        reason: reason.into(),
    }
}

/// Imports one graph. `outer` lists the names visible from enclosing graphs (for subgraphs); a name
/// read here but defined nowhere in this graph becomes an `Outer` value when `outer` has it.
fn import_graph(
    g: &GraphProto,
    reader: &mut ExternalDataReader,
    outer: &[&BTreeMap<String, ValueId>],
) -> Result<Graph, OnnxError> {
    let mut graph = Graph {
        name: g.name.clone().unwrap_or_default(),
        doc: g.doc_string.clone().unwrap_or_default(),
        metadata: kvs(&g.metadata_props),
        ..Graph::default()
    };
    let mut names: BTreeMap<String, ValueId> = BTreeMap::new();

    for t in &g.initializer {
        let data = import_tensor(t, reader)?;
        if data.name.is_empty() {
            return Err(graph_err(g, "an initializer has no name"));
        }
        if names.contains_key(&data.name) {
            return Err(graph_err(
                g,
                format!("initializer '{}' is defined twice", data.name),
            ));
        }
        let id = graph.add_initializer(data);
        names.insert(graph.value(id).name.clone(), id);
    }
    for s in &g.sparse_initializer {
        let data = import_sparse(s, reader)?;
        let name = data.values.name.clone();
        if name.is_empty() || names.contains_key(&name) {
            return Err(graph_err(
                g,
                format!("sparse initializer '{name}' has no name or is defined twice"),
            ));
        }
        let id = graph.add_value(name.clone(), ValueKind::SparseInitializer(Box::new(data)));
        graph.sparse_initializers.push(id);
        names.insert(name, id);
    }
    for vi in &g.input {
        let name = vi.name.clone().unwrap_or_default();
        if name.is_empty() {
            return Err(graph_err(g, "a graph input has no name"));
        }
        let decl = vi.r#type.as_ref().map(import_type);
        let id = match names.get(&name) {
            // An initializer listed as an input: a default value the caller may override.
            Some(&id) if graph.inputs.contains(&id) => {
                return Err(graph_err(g, format!("input '{name}' is listed twice")));
            }
            Some(&id) => id,
            None => {
                let id = graph.add_value(name.clone(), ValueKind::Input);
                names.insert(name, id);
                id
            }
        };
        let v = &mut graph.values[id.index()];
        v.decl = decl;
        v.doc = vi.doc_string.clone().unwrap_or_default();
        v.metadata = kvs(&vi.metadata_props);
        graph.inputs.push(id);
    }

    // Node outputs first, so that inputs can refer to values produced later in the file (the file
    // order need not be topological; cycles are reported below).
    for (i, n) in g.node.iter().enumerate() {
        let nid = NodeId::from_index(i);
        for (slot, o) in n.output.iter().enumerate() {
            if o.is_empty() {
                continue;
            }
            if names.contains_key(o) {
                return Err(node_err(
                    n,
                    i,
                    format!("output '{o}' is already defined (by an input, initializer or another node)"),
                ));
            }
            let id = graph.add_value(
                o.clone(),
                ValueKind::Node {
                    node: nid,
                    slot: slot as u32,
                },
            );
            names.insert(o.clone(), id);
        }
    }
    let mut node_outputs: Vec<Vec<Option<ValueId>>> = g
        .node
        .iter()
        .map(|n| {
            n.output
                .iter()
                .map(|o| (!o.is_empty()).then(|| names[o]))
                .collect()
        })
        .collect();

    for (i, n) in g.node.iter().enumerate() {
        let op = n.op_type.clone().unwrap_or_default();
        if op.is_empty() {
            return Err(node_err(n, i, "has no op_type"));
        }
        let mut inputs = Vec::with_capacity(n.input.len());
        for name in &n.input {
            if name.is_empty() {
                inputs.push(None);
                continue;
            }
            let id = resolve(&mut graph, &mut names, outer, name).ok_or_else(|| {
                node_err(n, i, format!("input '{name}' is not defined in the graph"))
            })?;
            inputs.push(Some(id));
        }
        let mut attrs = Vec::with_capacity(n.attribute.len());
        {
            let scope: Vec<&BTreeMap<String, ValueId>> = std::iter::once(&names)
                .chain(outer.iter().copied())
                .collect();
            for a in &n.attribute {
                attrs.push(import_attr(a, reader, &scope).map_err(|e| match e {
                    OnnxError::Graph { .. } | OnnxError::Node { .. } => e,
                    other => node_err(n, i, other.to_string()),
                })?);
            }
        }
        // Names a subgraph reads from this graph's scope become consumers here; make sure they exist
        // as values of this graph (or of the scopes further out) so liveness sees the dependency.
        for a in &attrs {
            for sub in attr_graphs(&a.value) {
                for name in sub.outer_reads() {
                    if !names.contains_key(&name) {
                        resolve(&mut graph, &mut names, outer, &name);
                    }
                }
            }
        }
        graph.nodes.push(Node {
            name: n.name.clone().unwrap_or_default(),
            op,
            domain: n.domain.clone().unwrap_or_default(),
            overload: n.overload.clone().unwrap_or_default(),
            inputs,
            outputs: std::mem::take(&mut node_outputs[i]),
            attrs,
            doc: n.doc_string.clone().unwrap_or_default(),
            metadata: kvs(&n.metadata_props),
        });
    }

    for vi in &g.output {
        let name = vi.name.clone().unwrap_or_default();
        let id = resolve(&mut graph, &mut names, outer, &name).ok_or_else(|| {
            graph_err(
                g,
                format!("output '{name}' is not produced by any node, input or initializer"),
            )
        })?;
        attach_decl(&mut graph, id, vi);
        graph.outputs.push(id);
    }
    for vi in &g.value_info {
        let name = vi.name.clone().unwrap_or_default();
        // value_info for a name nothing defines is legal ONNX and carries no information: drop it.
        let Some(&id) = names.get(&name) else {
            continue;
        };
        if graph.value_info.contains(&id) {
            continue;
        }
        attach_decl(&mut graph, id, vi);
        graph.value_info.push(id);
    }

    graph.validate().map_err(|e| graph_err(g, e.to_string()))?;
    Ok(graph)
}

/// The value a name refers to in this graph, adding an `Outer` value when an enclosing scope defines
/// it; `None` when no scope does.
fn resolve(
    graph: &mut Graph,
    names: &mut BTreeMap<String, ValueId>,
    outer: &[&BTreeMap<String, ValueId>],
    name: &str,
) -> Option<ValueId> {
    if let Some(&id) = names.get(name) {
        return Some(id);
    }
    if outer.iter().any(|scope| scope.contains_key(name)) {
        let id = graph.add_value(name, ValueKind::Outer);
        names.insert(name.to_string(), id);
        return Some(id);
    }
    None
}

fn attach_decl(graph: &mut Graph, id: ValueId, vi: &ValueInfoProto) {
    let v = &mut graph.values[id.index()];
    if v.decl.is_none() {
        v.decl = vi.r#type.as_ref().map(import_type);
    }
    if v.doc.is_empty() {
        v.doc = vi.doc_string.clone().unwrap_or_default();
    }
    if v.metadata.is_empty() {
        v.metadata = kvs(&vi.metadata_props);
    }
}

fn attr_graphs(v: &AttrValue) -> Vec<&Graph> {
    match v {
        AttrValue::Graph(g) => vec![g.as_ref()],
        AttrValue::Graphs(gs) => gs.iter().collect(),
        _ => Vec::new(),
    }
}

/// A constant tensor from its proto: payload from raw, typed or external data, origin recorded.
pub fn import_tensor(
    t: &TensorProto,
    reader: &mut ExternalDataReader,
) -> Result<TensorData, OnnxError> {
    let name = t.name.clone().unwrap_or_default();
    let code = t.data_type.unwrap_or(0);
    let dtype = DataType::from_onnx(code).ok_or_else(|| {
        OnnxError::tensor(&name, format!("unknown or undefined data_type {code}"))
    })?;
    let mut dims = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        dims.push(
            u64::try_from(d).map_err(|_| OnnxError::tensor(&name, format!("negative dim {d}")))?,
        );
    }
    let storage = match tensor_bytes(t, reader)? {
        TensorStorage::Raw(b) => IrStorage::Raw(b),
        TensorStorage::Strings(s) => IrStorage::Strings(s),
    };
    let origin = if is_external(t) {
        let r = external_ref(t)?;
        let length = match &storage {
            IrStorage::Raw(b) => b.len() as u64,
            IrStorage::Strings(_) => 0,
        };
        DataOrigin::External {
            location: r.location,
            offset: r.offset,
            length,
        }
    } else {
        DataOrigin::Inline
    };
    Ok(TensorData {
        name,
        dtype,
        dims,
        storage,
        origin,
        doc: t.doc_string.clone().unwrap_or_default(),
        metadata: kvs(&t.metadata_props),
    })
}

fn import_sparse(
    s: &SparseTensorProto,
    reader: &mut ExternalDataReader,
) -> Result<SparseTensorData, OnnxError> {
    let values = s
        .values
        .as_ref()
        .ok_or_else(|| OnnxError::tensor("<sparse>", "sparse tensor has no values"))?;
    let values = import_tensor(values, reader)?;
    let indices = match &s.indices {
        Some(i) => import_tensor(i, reader)?,
        None => {
            return Err(OnnxError::tensor(
                &values.name,
                "sparse tensor has no indices",
            ))
        }
    };
    Ok(SparseTensorData {
        values,
        indices,
        dims: s.dims.clone(),
    })
}

/// A `TypeProto` as a declared type.
pub fn import_type(t: &TypeProto) -> DeclType {
    let shape = |s: &Option<crate::proto::TensorShapeProto>| -> Option<Vec<DeclDimEntry>> {
        s.as_ref().map(|s| {
            s.dim
                .iter()
                .map(|d| DeclDimEntry {
                    dim: match &d.value {
                        Some(dimension::Value::DimValue(v)) => DeclDim::Value(*v),
                        Some(dimension::Value::DimParam(p)) if !p.is_empty() => {
                            DeclDim::Param(p.clone())
                        }
                        _ => DeclDim::Unknown,
                    },
                    denotation: d.denotation.clone().unwrap_or_default(),
                })
                .collect()
        })
    };
    let elem = |c: Option<i32>| c.and_then(DataType::from_onnx);
    let boxed = |b: &Option<Box<TypeProto>>| b.as_ref().map(|t| Box::new(import_type(t)));
    let ty = match &t.value {
        Some(type_proto::Value::TensorType(x)) => TypeDecl::Tensor {
            elem: elem(x.elem_type),
            shape: shape(&x.shape),
        },
        Some(type_proto::Value::SparseTensorType(x)) => TypeDecl::SparseTensor {
            elem: elem(x.elem_type),
            shape: shape(&x.shape),
        },
        Some(type_proto::Value::SequenceType(x)) => TypeDecl::Sequence(boxed(&x.elem_type)),
        Some(type_proto::Value::OptionalType(x)) => TypeDecl::Optional(boxed(&x.elem_type)),
        Some(type_proto::Value::MapType(x)) => TypeDecl::Map {
            key: elem(x.key_type),
            value: boxed(&x.value_type),
        },
        Some(type_proto::Value::OpaqueType(_)) | None => TypeDecl::Unset,
    };
    DeclType {
        ty,
        denotation: t.denotation.clone().unwrap_or_default(),
    }
}

fn import_attr(
    a: &AttributeProto,
    reader: &mut ExternalDataReader,
    scope: &[&BTreeMap<String, ValueId>],
) -> Result<Attribute, OnnxError> {
    let name = a.name.clone().unwrap_or_default();
    if a.ref_attr_name.is_some() {
        return Err(OnnxError::Graph {
            graph: String::new(),
            reason: format!("attribute '{name}' refers to a function attribute outside a function"),
        });
    }
    let ty = a
        .r#type
        .and_then(|t| AttributeType::try_from(t).ok())
        .filter(|t| *t != AttributeType::Undefined)
        .or_else(|| guess_attr_type(a))
        .ok_or_else(|| OnnxError::tensor(&name, "attribute has no type and no value"))?;
    let graph = |g: &GraphProto, reader: &mut ExternalDataReader| import_graph(g, reader, scope);
    let missing = || OnnxError::Graph {
        graph: String::new(),
        reason: format!("attribute '{name}' is declared {ty:?} but holds no such value"),
    };
    let value = match ty {
        AttributeType::Float => AttrValue::Float(a.f.ok_or_else(missing)?),
        AttributeType::Int => AttrValue::Int(a.i.ok_or_else(missing)?),
        AttributeType::String => AttrValue::String(a.s.clone().ok_or_else(missing)?.to_vec()),
        AttributeType::Tensor => {
            AttrValue::Tensor(import_tensor(a.t.as_ref().ok_or_else(missing)?, reader)?)
        }
        AttributeType::Graph => {
            AttrValue::Graph(Box::new(graph(a.g.as_ref().ok_or_else(missing)?, reader)?))
        }
        AttributeType::SparseTensor => AttrValue::SparseTensor(Box::new(import_sparse(
            a.sparse_tensor.as_ref().ok_or_else(missing)?,
            reader,
        )?)),
        AttributeType::TypeProto => {
            AttrValue::Type(import_type(a.tp.as_ref().ok_or_else(missing)?))
        }
        AttributeType::Floats => AttrValue::Floats(a.floats.clone()),
        AttributeType::Ints => AttrValue::Ints(a.ints.clone()),
        AttributeType::Strings => {
            AttrValue::Strings(a.strings.iter().map(|s| s.to_vec()).collect())
        }
        AttributeType::Tensors => AttrValue::Tensors(
            a.tensors
                .iter()
                .map(|t| import_tensor(t, reader))
                .collect::<Result<_, _>>()?,
        ),
        AttributeType::Graphs => AttrValue::Graphs(
            a.graphs
                .iter()
                .map(|g| graph(g, reader))
                .collect::<Result<_, _>>()?,
        ),
        AttributeType::SparseTensors => AttrValue::SparseTensors(
            a.sparse_tensors
                .iter()
                .map(|s| import_sparse(s, reader))
                .collect::<Result<_, _>>()?,
        ),
        AttributeType::TypeProtos => {
            AttrValue::Types(a.type_protos.iter().map(import_type).collect())
        }
        AttributeType::Undefined => return Err(missing()),
    };
    Ok(Attribute {
        name,
        value,
        doc: a.doc_string.clone().unwrap_or_default(),
    })
}

/// Old files may omit `AttributeProto.type`; the one field that is set tells it.
fn guess_attr_type(a: &AttributeProto) -> Option<AttributeType> {
    Some(if a.f.is_some() {
        AttributeType::Float
    } else if a.i.is_some() {
        AttributeType::Int
    } else if a.s.is_some() {
        AttributeType::String
    } else if a.t.is_some() {
        AttributeType::Tensor
    } else if a.g.is_some() {
        AttributeType::Graph
    } else if a.sparse_tensor.is_some() {
        AttributeType::SparseTensor
    } else if a.tp.is_some() {
        AttributeType::TypeProto
    } else if !a.floats.is_empty() {
        AttributeType::Floats
    } else if !a.ints.is_empty() {
        AttributeType::Ints
    } else if !a.strings.is_empty() {
        AttributeType::Strings
    } else if !a.tensors.is_empty() {
        AttributeType::Tensors
    } else if !a.graphs.is_empty() {
        AttributeType::Graphs
    } else if !a.sparse_tensors.is_empty() {
        AttributeType::SparseTensors
    } else if !a.type_protos.is_empty() {
        AttributeType::TypeProtos
    } else {
        return None;
    })
}
