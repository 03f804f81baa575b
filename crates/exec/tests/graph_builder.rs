//! A graph built node by node for the chunking tests: each node has one output, named after it.

use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType, Graph, Model};
use memplan_ir::{DataType, TensorData, ValueId};

#[derive(Default)]
pub struct B(pub Graph);

impl B {
    /// An int64 constant.
    pub fn ints(&mut self, name: &str, dims: Vec<u64>, v: &[i64]) -> ValueId {
        self.0.add_initializer(TensorData::from_i64(name, dims, v))
    }

    /// A float scalar constant.
    pub fn float(&mut self, name: &str, v: f32) -> ValueId {
        self.0
            .add_initializer(TensorData::from_f32(name, vec![], &[v]))
    }

    /// A float input of `dims`.
    pub fn input(&mut self, name: &str, dims: Vec<DeclDim>) -> ValueId {
        self.0
            .add_input(name, DeclType::tensor(DataType::F32, dims))
    }

    pub fn op(&mut self, op: &str, ins: &[ValueId], attrs: Vec<(&str, AttrValue)>) -> ValueId {
        let name = format!("n{}", self.0.nodes.len());
        let ins: Vec<Option<ValueId>> = ins.iter().map(|&v| Some(v)).collect();
        let attrs = attrs
            .into_iter()
            .map(|(n, value)| Attribute {
                name: n.into(),
                value,
                doc: String::new(),
            })
            .collect();
        self.0.add_node(name.clone(), op, &ins, &[&name], attrs).1[0]
    }

    /// The model of this graph, its output `y`.
    pub fn model(mut self, y: ValueId) -> Model {
        self.0.outputs.push(y);
        Model {
            graph: self.0,
            ..Model::default()
        }
    }
}

/// An `axis` attribute.
pub fn axis(v: i64) -> Vec<(&'static str, AttrValue)> {
    vec![("axis", AttrValue::Int(v))]
}
