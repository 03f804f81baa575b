//! The graph: dense typed ids for nodes and values, ONNX names kept as labels only.
//!
//! A `Graph` is a faithful image of an ONNX graph: every input, output, initializer, declared type
//! (`value_info`), attribute and subgraph is kept so that export can write it back. Identity is by
//! `ValueId`/`NodeId`; names are labels (unique within one graph, as ONNX requires).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::dtype::DataType;
use crate::tensor::TensorData;

macro_rules! id_type {
    ($name:ident, $prefix:literal) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
        pub struct $name(pub u32);
        impl $name {
            pub fn index(self) -> usize {
                self.0 as usize
            }
            pub fn from_index(i: usize) -> Self {
                $name(i as u32)
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}
id_type!(NodeId, "n");
id_type!(ValueId, "v");

/// One dim of a declared (ONNX-written) tensor type.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum DeclDim {
    Value(i64),
    Param(String),
    #[default]
    Unknown,
}

/// A declared shape dim together with its ONNX denotation.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DeclDimEntry {
    pub dim: DeclDim,
    pub denotation: String,
}

/// A type as written in the ONNX file (`TypeProto`), kept for faithful export and as inference input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TypeDecl {
    /// `elem` is `None` when the file leaves the element type undefined; `shape` is `None` when the
    /// rank is unknown.
    Tensor {
        elem: Option<DataType>,
        shape: Option<Vec<DeclDimEntry>>,
    },
    SparseTensor {
        elem: Option<DataType>,
        shape: Option<Vec<DeclDimEntry>>,
    },
    Sequence(Option<Box<DeclType>>),
    Optional(Option<Box<DeclType>>),
    Map {
        key: Option<DataType>,
        value: Option<Box<DeclType>>,
    },
    /// A TypeProto with no value set.
    Unset,
}

/// A declared type plus the `denotation` string of the TypeProto.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclType {
    pub ty: TypeDecl,
    pub denotation: String,
}

impl DeclType {
    pub fn tensor(elem: DataType, dims: Vec<DeclDim>) -> DeclType {
        DeclType {
            ty: TypeDecl::Tensor {
                elem: Some(elem),
                shape: Some(
                    dims.into_iter()
                        .map(|dim| DeclDimEntry {
                            dim,
                            denotation: String::new(),
                        })
                        .collect(),
                ),
            },
            denotation: String::new(),
        }
    }

    /// Element type and dims when this is a tensor type.
    pub fn as_tensor(&self) -> Option<(Option<DataType>, Option<&[DeclDimEntry]>)> {
        match &self.ty {
            TypeDecl::Tensor { elem, shape } => Some((*elem, shape.as_deref())),
            _ => None,
        }
    }
}

/// A sparse tensor constant (attribute or initializer).
#[derive(Clone, Debug, PartialEq)]
pub struct SparseTensorData {
    pub values: TensorData,
    pub indices: TensorData,
    pub dims: Vec<i64>,
}

/// An attribute value of any ONNX kind.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Float(f32),
    Int(i64),
    String(Vec<u8>),
    Tensor(TensorData),
    Graph(Box<Graph>),
    SparseTensor(Box<SparseTensorData>),
    Type(DeclType),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<Vec<u8>>),
    Tensors(Vec<TensorData>),
    Graphs(Vec<Graph>),
    SparseTensors(Vec<SparseTensorData>),
    Types(Vec<DeclType>),
}

impl AttrValue {
    /// The ONNX name of the attribute kind (`INT`, `FLOATS`, ...), for error messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            AttrValue::Float(_) => "FLOAT",
            AttrValue::Int(_) => "INT",
            AttrValue::String(_) => "STRING",
            AttrValue::Tensor(_) => "TENSOR",
            AttrValue::Graph(_) => "GRAPH",
            AttrValue::SparseTensor(_) => "SPARSE_TENSOR",
            AttrValue::Type(_) => "TYPE_PROTO",
            AttrValue::Floats(_) => "FLOATS",
            AttrValue::Ints(_) => "INTS",
            AttrValue::Strings(_) => "STRINGS",
            AttrValue::Tensors(_) => "TENSORS",
            AttrValue::Graphs(_) => "GRAPHS",
            AttrValue::SparseTensors(_) => "SPARSE_TENSORS",
            AttrValue::Types(_) => "TYPE_PROTOS",
        }
    }
}

/// A named attribute of a node.
#[derive(Clone, Debug, PartialEq)]
pub struct Attribute {
    pub name: String,
    pub value: AttrValue,
    pub doc: String,
}

/// An operator application.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub name: String,
    pub op: String,
    /// Operator domain; `""` is the default ONNX domain (`ai.onnx`).
    pub domain: String,
    pub overload: String,
    /// Inputs by position; `None` is an omitted optional input (empty name in ONNX).
    pub inputs: Vec<Option<ValueId>>,
    /// Outputs by position; `None` is an omitted optional output.
    pub outputs: Vec<Option<ValueId>>,
    pub attrs: Vec<Attribute>,
    pub doc: String,
    pub metadata: Vec<(String, String)>,
}

impl Node {
    /// A node of the default domain with no attributes, doc or metadata.
    pub fn new(
        name: impl Into<String>,
        op: &str,
        inputs: Vec<Option<ValueId>>,
        outputs: Vec<Option<ValueId>>,
    ) -> Node {
        Node {
            name: name.into(),
            op: op.to_string(),
            domain: String::new(),
            overload: String::new(),
            inputs,
            outputs,
            attrs: Vec::new(),
            doc: String::new(),
            metadata: Vec::new(),
        }
    }

    pub fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.attrs.iter().find(|a| a.name == name).map(|a| &a.value)
    }

    /// Whether this node is in the default ONNX domain.
    pub fn is_onnx_domain(&self) -> bool {
        self.domain.is_empty() || self.domain == "ai.onnx"
    }

    /// A label for messages: `'name' (Op)`, or `#index (Op)` when unnamed.
    pub fn label(&self, id: NodeId) -> String {
        if self.name.is_empty() {
            format!("#{} ({})", id.0, printable(&self.op))
        } else {
            format!("'{}' ({})", printable(&self.name), printable(&self.op))
        }
    }

    /// Present inputs, in order.
    pub fn input_ids(&self) -> impl Iterator<Item = ValueId> + '_ {
        self.inputs.iter().flatten().copied()
    }

    /// Present outputs, in order.
    pub fn output_ids(&self) -> impl Iterator<Item = ValueId> + '_ {
        self.outputs.iter().flatten().copied()
    }
}

/// What defines a value.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueKind {
    /// A graph input fed at run time.
    Input,
    /// A constant initializer (weight). If it is also listed in `Graph::inputs` it may be overridden.
    Initializer(TensorData),
    /// A sparse initializer.
    SparseInitializer(Box<SparseTensorData>),
    /// Output `slot` of a node.
    Node { node: NodeId, slot: u32 },
    /// A name a subgraph reads from an enclosing graph's scope.
    Outer,
}

/// A tensor-valued wire.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub name: String,
    pub kind: ValueKind,
    /// The type the file declares for it (graph input/output, value_info), if any.
    pub decl: Option<DeclType>,
    /// Doc string of its ValueInfoProto.
    pub doc: String,
    /// `metadata_props` of its ValueInfoProto, in file order.
    pub metadata: Vec<(String, String)>,
}

/// Names taken in a graph, and fresh ones made from a base for what a rewrite adds: `base` itself
/// when it is free, else `base_2`, `base_3`, ... (the first free one). Every name handed out is
/// taken from then on.
#[derive(Clone, Debug, Default)]
pub struct Names(BTreeSet<String>);

impl Names {
    /// The names of `g`'s values and nodes, taken.
    pub fn of(g: &Graph) -> Names {
        let mut taken: BTreeSet<String> = g.values.iter().map(|v| v.name.clone()).collect();
        taken.extend(g.nodes.iter().map(|n| n.name.clone()));
        Names(taken)
    }

    /// `names`, taken.
    pub fn taken<I: IntoIterator<Item = String>>(names: I) -> Names {
        Names(names.into_iter().collect())
    }

    /// A name not taken yet, made from `base`; taken from now on.
    pub fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut k = 1;
        while self.0.contains(&name) {
            k += 1;
            name = format!("{base}_{k}");
        }
        self.0.insert(name.clone());
        name
    }
}

/// A graph (the main graph or a control-flow body).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Graph {
    pub name: String,
    pub doc: String,
    pub nodes: Vec<Node>,
    pub values: Vec<Value>,
    /// Graph inputs in file order (may include initializers in old-style models).
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Values that carry a `value_info` entry, in file order.
    pub value_info: Vec<ValueId>,
    /// Initializers in file order.
    pub initializers: Vec<ValueId>,
    pub sparse_initializers: Vec<ValueId>,
    pub metadata: Vec<(String, String)>,
}

impl Graph {
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.index()]
    }

    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> {
        (0..self.nodes.len()).map(NodeId::from_index)
    }

    pub fn value_ids(&self) -> impl Iterator<Item = ValueId> {
        (0..self.values.len()).map(ValueId::from_index)
    }

    /// Adds a value and returns its id.
    pub fn add_value(&mut self, name: impl Into<String>, kind: ValueKind) -> ValueId {
        let id = ValueId::from_index(self.values.len());
        self.values.push(Value {
            name: name.into(),
            kind,
            decl: None,
            doc: String::new(),
            metadata: Vec::new(),
        });
        id
    }

    /// Adds a graph input with a declared type.
    pub fn add_input(&mut self, name: impl Into<String>, decl: DeclType) -> ValueId {
        let id = self.add_value(name, ValueKind::Input);
        self.values[id.index()].decl = Some(decl);
        self.inputs.push(id);
        id
    }

    /// Adds an initializer.
    pub fn add_initializer(&mut self, t: TensorData) -> ValueId {
        let id = self.add_value(t.name.clone(), ValueKind::Initializer(t));
        self.initializers.push(id);
        id
    }

    /// Adds a node in the default domain whose outputs are new values with the given names.
    pub fn add_node(
        &mut self,
        name: impl Into<String>,
        op: &str,
        inputs: &[Option<ValueId>],
        outputs: &[&str],
        attrs: Vec<Attribute>,
    ) -> (NodeId, Vec<ValueId>) {
        let nid = NodeId::from_index(self.nodes.len());
        let outs: Vec<ValueId> = outputs
            .iter()
            .enumerate()
            .map(|(slot, n)| {
                self.add_value(
                    *n,
                    ValueKind::Node {
                        node: nid,
                        slot: slot as u32,
                    },
                )
            })
            .collect();
        let mut node = Node::new(
            name,
            op,
            inputs.to_vec(),
            outs.iter().map(|v| Some(*v)).collect(),
        );
        node.attrs = attrs;
        self.nodes.push(node);
        (nid, outs)
    }

    /// The producing node of a value, if a node makes it.
    pub fn producer(&self, v: ValueId) -> Option<NodeId> {
        match self.values[v.index()].kind {
            ValueKind::Node { node, .. } => Some(node),
            _ => None,
        }
    }

    /// Consumers of each value, by node, in node order (a node reading a value twice appears once).
    pub fn consumers(&self) -> Vec<Vec<NodeId>> {
        let mut c: Vec<Vec<NodeId>> = vec![Vec::new(); self.values.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            let id = NodeId::from_index(i);
            for v in n.input_ids() {
                let list = &mut c[v.index()];
                if list.last() != Some(&id) {
                    list.push(id);
                }
            }
            for sub in n.subgraphs() {
                for v in sub.outer_reads_resolved(self) {
                    let list = &mut c[v.index()];
                    if list.last() != Some(&id) {
                        list.push(id);
                    }
                }
            }
        }
        c
    }

    /// A value id by name, if any value has that name.
    pub fn find_value(&self, name: &str) -> Option<ValueId> {
        self.values
            .iter()
            .position(|v| v.name == name)
            .map(ValueId::from_index)
    }

    /// Names this graph (and its nested subgraphs) read from enclosing scopes.
    pub fn outer_reads(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for v in &self.values {
            if v.kind == ValueKind::Outer && !out.contains(&v.name) {
                out.push(v.name.clone());
            }
        }
        for n in &self.nodes {
            for sub in n.subgraphs() {
                for name in sub.outer_reads() {
                    let defined = self
                        .find_value(&name)
                        .is_some_and(|v| self.values[v.index()].kind != ValueKind::Outer);
                    if !defined && !out.contains(&name) {
                        out.push(name);
                    }
                }
            }
        }
        out
    }

    /// The values of `parent` that this subgraph reads from the enclosing scope (names that resolve in
    /// `parent`; the rest belong to scopes further out).
    pub fn outer_reads_resolved(&self, parent: &Graph) -> Vec<ValueId> {
        let mut out = Vec::new();
        for name in self.outer_reads() {
            if let Some(v) = parent.find_value(&name) {
                if parent.values[v.index()].kind != ValueKind::Outer {
                    out.push(v);
                }
            }
        }
        out
    }

    /// A topological order of the nodes that keeps file order where the file order is valid.
    /// Errors name a node that sits on a cycle.
    pub fn topo_order(&self) -> Result<Vec<NodeId>, GraphError> {
        let consumers = self.consumers();
        let mut indeg = vec![0usize; self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            let mut deps: Vec<NodeId> = n.input_ids().filter_map(|v| self.producer(v)).collect();
            for sub in n.subgraphs() {
                deps.extend(
                    sub.outer_reads_resolved(self)
                        .into_iter()
                        .filter_map(|v| self.producer(v)),
                );
            }
            deps.sort();
            deps.dedup();
            indeg[i] = deps.len();
        }
        // A min-heap on node index keeps the original order whenever it is already topological.
        let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> =
            (0..self.nodes.len())
                .filter(|&i| indeg[i] == 0)
                .map(std::cmp::Reverse)
                .collect();
        let mut order = Vec::with_capacity(self.nodes.len());
        while let Some(std::cmp::Reverse(i)) = ready.pop() {
            order.push(NodeId::from_index(i));
            let mut succ: Vec<usize> = Vec::new();
            for v in self.nodes[i].output_ids() {
                succ.extend(consumers[v.index()].iter().map(|n| n.index()));
            }
            succ.sort();
            succ.dedup();
            for s in succ {
                indeg[s] -= 1;
                if indeg[s] == 0 {
                    ready.push(std::cmp::Reverse(s));
                }
            }
        }
        if order.len() != self.nodes.len() {
            let stuck = (0..self.nodes.len()).find(|&i| indeg[i] > 0).unwrap_or(0);
            let id = NodeId::from_index(stuck);
            return Err(GraphError::Cycle {
                node: self.nodes[stuck].label(id),
            });
        }
        Ok(order)
    }

    /// Checks structural rules: ids in range, each node output produced by that node, unique names,
    /// no cycles. Returns the topological order on success.
    pub fn validate(&self) -> Result<Vec<NodeId>, GraphError> {
        let mut names: BTreeMap<&str, ValueId> = BTreeMap::new();
        for (i, v) in self.values.iter().enumerate() {
            if v.name.is_empty() {
                continue;
            }
            if let Some(prev) = names.insert(&v.name, ValueId::from_index(i)) {
                let _ = prev;
                return Err(GraphError::DuplicateName {
                    name: printable(&v.name).into_owned(),
                });
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let id = NodeId::from_index(i);
            for v in n.input_ids() {
                if v.index() >= self.values.len() {
                    return Err(GraphError::BadId { node: n.label(id) });
                }
            }
            for (slot, v) in n.outputs.iter().enumerate() {
                if let Some(v) = v {
                    match self.values.get(v.index()).map(|x| &x.kind) {
                        Some(ValueKind::Node { node, slot: s })
                            if *node == id && *s as usize == slot => {}
                        _ => {
                            return Err(GraphError::BadId { node: n.label(id) });
                        }
                    }
                }
            }
        }
        for &o in &self.outputs {
            if o.index() >= self.values.len() {
                return Err(GraphError::BadId {
                    node: "graph outputs".into(),
                });
            }
        }
        self.topo_order()
    }
}

impl Node {
    /// Subgraphs held in attributes (If/Loop/Scan bodies), in attribute order.
    pub fn subgraphs(&self) -> impl Iterator<Item = &Graph> + '_ {
        self.attrs.iter().flat_map(|a| match &a.value {
            AttrValue::Graph(g) => std::slice::from_ref(g.as_ref()).iter().collect::<Vec<_>>(),
            AttrValue::Graphs(gs) => gs.iter().collect(),
            _ => Vec::new(),
        })
    }
}

/// Structural errors in a graph.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    #[error("cycle in the graph through node {}", printable(.node))]
    Cycle { node: String },
    #[error("value name '{}' is defined twice", printable(.name))]
    DuplicateName { name: String },
    #[error(
        "node {} refers to a value id out of range or to an output it does not produce",
        printable(.node)
    )]
    BadId { node: String },
}

/// An operator-set import.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpsetImport {
    pub domain: String,
    pub version: i64,
}

/// A whole model: the main graph plus the file-level fields kept for export.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Model {
    pub graph: Graph,
    pub ir_version: i64,
    pub opsets: Vec<OpsetImport>,
    pub producer_name: String,
    pub producer_version: String,
    pub domain: String,
    pub model_version: i64,
    pub doc: String,
    pub metadata: Vec<(String, String)>,
}

impl Model {
    /// The opset version imported for the default domain, if any.
    pub fn onnx_opset(&self) -> Option<i64> {
        self.opsets
            .iter()
            .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
            .map(|o| o.version)
    }

    /// Fixes the symbolic dims that `dims` names at their values, in every type the main graph
    /// declares (inputs, outputs, `value_info`), and records them under [`PINNED_DIMS_KEY`]. A
    /// rewrite that holds constants made at `dims` (chunk bounds, shape values frozen there)
    /// computes the model there only: the file then says so, a runtime refuses other shapes, and
    /// its facts are constants. Symbols the inputs do not declare are left alone.
    pub fn pin_dims(&mut self, dims: &BTreeMap<String, i64>) {
        let mut pinned = self.pinned_dims().unwrap_or_default();
        for v in &mut self.graph.values {
            let Some(DeclType {
                ty: TypeDecl::Tensor {
                    shape: Some(shape), ..
                },
                ..
            }) = &mut v.decl
            else {
                continue;
            };
            for e in shape {
                if let DeclDim::Param(p) = &e.dim {
                    // A name, or an exporter's expression of names (`256*h`) all of which `dims` gives.
                    let d = crate::dim::declared_dim(p);
                    if let Ok(x) = d.eval_map(dims) {
                        for s in d.symbols() {
                            pinned.insert(s.clone(), dims[&s]);
                        }
                        e.dim = DeclDim::Value(x);
                    }
                }
            }
        }
        if pinned.is_empty() {
            return;
        }
        let text = pinned
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        self.metadata.retain(|(k, _)| k != PINNED_DIMS_KEY);
        self.metadata.push((PINNED_DIMS_KEY.to_string(), text));
    }

    /// The dims the model was pinned at ([`Model::pin_dims`]): none when it records none, or an
    /// error naming the entry that is not `NAME=VALUE`.
    pub fn pinned_dims(&self) -> Result<BTreeMap<String, i64>, String> {
        let mut out = BTreeMap::new();
        let Some((_, text)) = self.metadata.iter().find(|(k, _)| k == PINNED_DIMS_KEY) else {
            return Ok(out);
        };
        for item in text.split(',').filter(|s| !s.trim().is_empty()) {
            let parsed = item
                .split_once('=')
                .and_then(|(k, v)| Some((k.trim(), v.trim().parse::<i64>().ok()?)))
                .filter(|(k, _)| !k.is_empty());
            let Some((k, v)) = parsed else {
                return Err(format!(
                    "metadata '{PINNED_DIMS_KEY}': '{}' is not NAME=VALUE",
                    printable(item)
                ));
            };
            out.insert(k.to_string(), v);
        }
        Ok(out)
    }
}

/// The `metadata_props` key under which a model records the dims it was pinned at
/// ([`Model::pin_dims`]), as `NAME=VALUE` entries joined by commas.
pub const PINNED_DIMS_KEY: &str = "memplan.pinned_dims";

/// A name as messages show it: control characters (a newline in a name from a malformed model)
/// escaped, so that every message stays one line.
pub fn printable(name: &str) -> std::borrow::Cow<'_, str> {
    if name.chars().any(char::is_control) {
        std::borrow::Cow::Owned(name.escape_debug().to_string())
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Graph {
        let mut g = Graph::default();
        let x = g.add_input(
            "x",
            DeclType::tensor(DataType::F32, vec![DeclDim::Param("N".into())]),
        );
        let (_, a) = g.add_node("a", "Relu", &[Some(x)], &["a_out"], vec![]);
        let (_, b) = g.add_node("b", "Neg", &[Some(a[0])], &["b_out"], vec![]);
        g.outputs.push(b[0]);
        g
    }

    #[test]
    fn topo_order_keeps_file_order() {
        let g = tiny();
        assert_eq!(g.validate().unwrap(), vec![NodeId(0), NodeId(1)]);
    }

    #[test]
    fn topo_order_sorts_out_of_order_files() {
        let mut g = tiny();
        g.nodes.swap(0, 1);
        // Repair the producer links after the swap.
        for (i, n) in g.nodes.iter().enumerate() {
            for (slot, v) in n.outputs.iter().enumerate() {
                let v = v.unwrap();
                g.values[v.index()].kind = ValueKind::Node {
                    node: NodeId::from_index(i),
                    slot: slot as u32,
                };
            }
        }
        assert_eq!(g.validate().unwrap(), vec![NodeId(1), NodeId(0)]);
    }

    #[test]
    fn cycle_names_a_node() {
        let mut g = tiny();
        // Make node a read node b's output.
        let b_out = g.nodes[1].outputs[0];
        g.nodes[0].inputs[0] = b_out;
        let e = g.validate().unwrap_err();
        assert_eq!(
            e,
            GraphError::Cycle {
                node: "'a' (Relu)".into()
            }
        );
    }

    #[test]
    fn duplicate_names_are_rejected() {
        let mut g = tiny();
        g.values[1].name = "x".into();
        assert_eq!(
            g.validate().unwrap_err(),
            GraphError::DuplicateName { name: "x".into() }
        );
    }

    #[test]
    fn pinned_dims_replace_the_symbols_and_read_back() {
        let mut g = tiny();
        let out = g.outputs[0];
        g.values[out.index()].decl = Some(DeclType::tensor(
            DataType::F32,
            vec![DeclDim::Param("N".into()), DeclDim::Param("M".into())],
        ));
        let mut m = Model {
            graph: g,
            ..Model::default()
        };
        assert_eq!(m.pinned_dims().unwrap(), BTreeMap::new());
        let dims = BTreeMap::from([("N".to_string(), 7), ("K".to_string(), 3)]);
        m.pin_dims(&dims);
        let dims_of = |v: ValueId| -> Vec<DeclDim> {
            let (_, d) = m.graph.value(v).decl.as_ref().unwrap().as_tensor().unwrap();
            d.unwrap().iter().map(|e| e.dim.clone()).collect()
        };
        assert_eq!(dims_of(m.graph.inputs[0]), vec![DeclDim::Value(7)]);
        // A symbol `dims` does not name stays; one the model does not have is not recorded.
        assert_eq!(
            dims_of(out),
            vec![DeclDim::Value(7), DeclDim::Param("M".into())]
        );
        assert_eq!(
            m.pinned_dims().unwrap(),
            BTreeMap::from([("N".to_string(), 7)])
        );
        // Pinning again keeps what was pinned before and records the key once.
        m.pin_dims(&BTreeMap::from([("M".to_string(), 2)]));
        assert_eq!(
            m.pinned_dims().unwrap(),
            BTreeMap::from([("M".to_string(), 2), ("N".to_string(), 7)])
        );
        assert_eq!(
            m.metadata
                .iter()
                .filter(|(k, _)| k == PINNED_DIMS_KEY)
                .count(),
            1
        );
        m.metadata = vec![(PINNED_DIMS_KEY.into(), "N=7,M".into())];
        assert!(m
            .pinned_dims()
            .unwrap_err()
            .contains("'M' is not NAME=VALUE"));
    }
}
