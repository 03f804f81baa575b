//! Test support for the op families: a small graph builder and fact renderers.
//!
//! Family files build a graph with [`TestGraph`], run inference at an opset and compare the
//! inferred shapes as text (`[N, 32, 16]`), so expectations read like the symbolic dims they check.

use crate::dtype::DataType;
use crate::graph::{AttrValue, Attribute, DeclDim, DeclType, Graph, ValueId};
use crate::infer::{fmt_shape, infer_graph, Facts, InferError};
use crate::tensor::TensorData;

/// A graph under construction plus helpers to run inference on it.
#[derive(Default)]
pub struct TestGraph {
    pub g: Graph,
}

/// Parses `"N, 32, 64"` into declared dims: integers become values, other words symbols, `?` unknown.
fn decl_dims(dims: &str) -> Vec<DeclDim> {
    dims.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s.parse::<i64>() {
            Ok(v) => DeclDim::Value(v),
            Err(_) if s == "?" => DeclDim::Unknown,
            Err(_) => DeclDim::Param(s.to_string()),
        })
        .collect()
}

impl TestGraph {
    pub fn new() -> TestGraph {
        TestGraph::default()
    }

    /// A graph input of type `dt` and dims written as `"N, 32, 64"` (`""` for a scalar).
    pub fn input(&mut self, name: &str, dt: DataType, dims: &str) -> ValueId {
        self.g
            .add_input(name, DeclType::tensor(dt, decl_dims(dims)))
    }

    /// An i64 initializer.
    pub fn ints(&mut self, name: &str, dims: &[u64], values: &[i64]) -> ValueId {
        self.g
            .add_initializer(TensorData::from_i64(name, dims.to_vec(), values))
    }

    /// An f32 initializer.
    pub fn floats(&mut self, name: &str, dims: &[u64], values: &[f32]) -> ValueId {
        self.g
            .add_initializer(TensorData::from_f32(name, dims.to_vec(), values))
    }

    /// Adds a node named `name`; `None` inputs are omitted optional inputs.
    pub fn node(
        &mut self,
        name: &str,
        op: &str,
        inputs: &[Option<ValueId>],
        outputs: &[&str],
        attrs: Vec<Attribute>,
    ) -> Vec<ValueId> {
        self.g.add_node(name, op, inputs, outputs, attrs).1
    }

    /// Adds a node whose inputs are all present.
    pub fn op(
        &mut self,
        op: &str,
        inputs: &[ValueId],
        outputs: &[&str],
        attrs: Vec<Attribute>,
    ) -> Vec<ValueId> {
        let ins: Vec<Option<ValueId>> = inputs.iter().map(|v| Some(*v)).collect();
        let name = format!("{}_{}", op.to_lowercase(), self.g.nodes.len());
        self.node(&name, op, &ins, outputs, attrs)
    }

    pub fn run(&self, opset: i64) -> Result<Facts, InferError> {
        infer_graph(&self.g, opset)
    }
}

/// The inferred shape of `v` as text, `"?"` when unknown.
pub fn shape_of(f: &Facts, v: ValueId) -> String {
    f.get(v)
        .shape
        .as_deref()
        .map(fmt_shape)
        .unwrap_or_else(|| "?".into())
}

/// The inferred type and shape of `v`, e.g. `"i64 [N, 1]"`.
pub fn fact_of(f: &Facts, v: ValueId) -> String {
    let t = f
        .get(v)
        .dtype
        .map(|t| t.to_string())
        .unwrap_or_else(|| "?".into());
    format!("{t} {}", shape_of(f, v))
}

pub fn attr(name: &str, value: AttrValue) -> Attribute {
    Attribute {
        name: name.into(),
        value,
        doc: String::new(),
    }
}

pub fn a_int(name: &str, v: i64) -> Attribute {
    attr(name, AttrValue::Int(v))
}

pub fn a_ints(name: &str, v: &[i64]) -> Attribute {
    attr(name, AttrValue::Ints(v.to_vec()))
}

pub fn a_str(name: &str, v: &str) -> Attribute {
    attr(name, AttrValue::String(v.as_bytes().to_vec()))
}

/// Every op is defined once, in one family, with a sensible arity; [`super::arity`] and
/// [`super::lookup_op`] read the same records.
#[test]
fn one_record_per_op() {
    let mut seen = std::collections::BTreeMap::new();
    for (fam, defs) in super::FAMILIES {
        for d in *defs {
            if let Some(other) = seen.insert(d.op, *fam) {
                panic!("{} is defined in both {other} and {fam}", d.op);
            }
            assert!(d.arity.0 <= d.arity.1, "{}: arity {:?}", d.op, d.arity);
            assert_eq!(super::arity(d.op), Some(d.arity));
            assert_eq!(super::lookup_op(d.op).map(|x| x.op), Some(d.op));
        }
    }
    assert_eq!(seen.len(), super::supported_ops().len());
    assert_eq!(super::arity("NoSuchOp"), None);
}
