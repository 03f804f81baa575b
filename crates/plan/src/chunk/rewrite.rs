//! The chunking rewrite, in two halves that share one description of it.
//!
//! [`emit`] lists the nodes the rewrite adds, in the order it adds them: per chunk, a `Slice` of each
//! split region input right before its first reader, then a clone of each region node; after the
//! last chunk, one `Concat` per region output. [`apply`] turns that list into a graph;
//! `predict` simulates it without building anything. Both read the same list, so what is predicted
//! is what is built.

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::graph::{
    AttrValue, Attribute, Graph, Model, Names, Node, NodeId, ValueId, ValueKind,
};
use memplan_ir::infer::Facts;
use memplan_ir::TensorData;

use super::{ChunkError, Region};

/// A value of the rewritten graph, named by what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Wire {
    /// A value of the original graph: read whole, or a region output (the `Concat` keeps its id).
    Orig(ValueId),
    /// Chunk `c` of an original value: the slice of a region input, or a clone's output.
    Chunk(u32, ValueId),
    /// The output shape of the clone of node `n` in chunk `c` (see [`shape_input`]).
    Shape(u32, NodeId),
    /// Chunk `c`'s start (`false`) or end (`true`) along the split axis, for the slices of values
    /// of multiple `m` of the unit extent (see [`Emitted::mult`]).
    Bound(u32, bool, i64),
    /// The axis a slice cuts along.
    Axis(usize),
}

/// One node the rewrite adds.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Emit {
    /// `Chunk(chunk, value)` = `value[lo..hi]` along `axis`.
    Slice {
        chunk: u32,
        value: ValueId,
        axis: usize,
    },
    /// Region node `node` over chunk `chunk`; its outputs are `Chunk(chunk, output)`.
    Clone {
        chunk: u32,
        node: NodeId,
        inputs: Vec<Option<Wire>>,
    },
    /// `Orig(value)` = the chunks of `value` joined along `axis`.
    Concat { value: ValueId, axis: usize },
}

/// The rewrite of one region, before it is built.
#[derive(Clone, Debug)]
pub(crate) struct Emitted {
    /// The unit extent the chunks cut ([`unit_extent`](super::region::unit_extent)): the split
    /// axis's extent, unless the region passes a reshape that merges it with the axes inside it.
    pub extent: i64,
    /// `[lo, hi)` of each chunk along it.
    pub bounds: Vec<(i64, i64)>,
    /// Each split value's extent along its axis as a multiple of `extent` (1 where absent): chunk
    /// `[lo, hi)` of the unit is `[lo * m, hi * m)` of the value.
    pub mult: BTreeMap<ValueId, i64>,
    pub steps: Vec<Emit>,
    /// Region outputs (made inside, read outside or graph outputs), ascending.
    pub outputs: Vec<ValueId>,
    /// Index in the node list of the last region node: the new nodes take its place.
    pub last: usize,
    /// Region nodes in node-list order.
    pub order: Vec<NodeId>,
}

impl Emitted {
    /// Extent of chunk `c` along the split axis, in units.
    pub fn width(&self, c: u32) -> i64 {
        let (lo, hi) = self.bounds[c as usize];
        hi - lo
    }

    /// Value `v`'s multiple of the unit extent.
    pub fn mult(&self, v: ValueId) -> i64 {
        self.mult.get(&v).copied().unwrap_or(1)
    }

    /// Extent of chunk `c` of value `v` along its split axis.
    pub fn width_of(&self, c: u32, v: ValueId) -> i64 {
        self.width(c) * self.mult(v)
    }
}

/// The input of `node` that holds its output's shape (which a chunk must have its own of).
pub(crate) fn shape_input(node: &Node) -> Option<usize> {
    memplan_ir::ops::lookup(node).and_then(|d| d.shape_input)
}

/// The chunk boundaries for `chunks` chunks of `extent`: equal widths rounded up, the last one
/// shorter; a last chunk of width 1 after wider ones joins the previous one (extent-1 operands can
/// take other kernel paths, and broadcasting would read them differently). When every chunk has
/// width 1 (as many chunks as the extent), the last one stays as it is, like the others.
pub(crate) fn bounds(extent: i64, chunks: usize) -> Vec<(i64, i64)> {
    let k = (chunks as i64).clamp(1, extent.max(1));
    let step = (extent + k - 1) / k;
    let mut b: Vec<(i64, i64)> = (0..k)
        .map(|c| (c * step, ((c + 1) * step).min(extent)))
        .filter(|(a, b)| a < b)
        .collect();
    if step > 1 && b.len() > 1 && b[b.len() - 1].1 - b[b.len() - 1].0 == 1 {
        let last = b.pop().unwrap_or_default();
        if let Some(prev) = b.last_mut() {
            prev.1 = last.1;
        }
    }
    b
}

/// Lists the nodes that chunk `region` adds (see the module docs). The graph's node list must be
/// in topological order.
pub(crate) fn emit(
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    consumers: &[Vec<NodeId>],
    region: &Region,
) -> Result<Emitted, ChunkError> {
    let err = |m: String| ChunkError::Region(m);
    let made_inside = |v: ValueId| g.producer(v).is_some_and(|p| region.nodes.contains(&p));
    if region.axes.values().all(Option::is_none) {
        return Err(err("no value is split".into()));
    }
    let (extent, mut mult) = super::region::unit_extent(facts, dims, &region.axes)
        .ok_or_else(|| err("a split value's extent is unknown".into()))?;
    mult.retain(|_, m| *m != 1);
    let bounds = bounds(extent, region.chunks);
    if bounds.len() < 2 {
        return Err(err(format!("an extent of {extent} gives one chunk")));
    }
    let is_output: BTreeSet<ValueId> = g.outputs.iter().copied().collect();
    // A kept node's original makes its values for readers outside the region.
    let outputs: Vec<ValueId> = region
        .nodes
        .difference(&region.keep)
        .flat_map(|&n| g.node(n).output_ids())
        .filter(|&v| {
            is_output.contains(&v)
                || consumers[v.index()]
                    .iter()
                    .any(|c| !region.nodes.contains(c))
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let order: Vec<NodeId> = region.nodes.iter().copied().collect();
    let last = order.last().map_or(0, |n| n.index());
    let mut steps = Vec::new();
    for c in 0..bounds.len() as u32 {
        let mut sliced: BTreeSet<ValueId> = BTreeSet::new();
        for &n in &order {
            let node = g.node(n);
            let split_out = super::region::splits_output(g, &region.axes, n);
            let mut inputs = Vec::with_capacity(node.inputs.len());
            for (slot, inp) in node.inputs.iter().enumerate() {
                let Some(v) = *inp else {
                    inputs.push(None);
                    continue;
                };
                // A Reshape's or Expand's target is the whole shape: each chunk gets its own
                // (a node computed whole in every chunk reads the original).
                if shape_input(node) == Some(slot) && split_out {
                    inputs.push(Some(Wire::Shape(c, n)));
                    continue;
                }
                if made_inside(v) {
                    inputs.push(Some(Wire::Chunk(c, v)));
                    continue;
                }
                // A node computed whole in every chunk (see `tile`) reads its inputs whole.
                let axis = region.axes.get(&v).copied().flatten().filter(|_| split_out);
                match axis {
                    Some(axis) => {
                        if sliced.insert(v) {
                            steps.push(Emit::Slice {
                                chunk: c,
                                value: v,
                                axis,
                            });
                        }
                        inputs.push(Some(Wire::Chunk(c, v)));
                    }
                    None => inputs.push(Some(Wire::Orig(v))),
                }
            }
            steps.push(Emit::Clone {
                chunk: c,
                node: n,
                inputs,
            });
        }
    }
    for &v in &outputs {
        let axis = region.axes.get(&v).copied().flatten().ok_or_else(|| {
            err(format!(
                "region output '{}' has no split axis",
                g.value(v).name
            ))
        })?;
        steps.push(Emit::Concat { value: v, axis });
    }
    Ok(Emitted {
        extent,
        bounds,
        mult,
        steps,
        outputs,
        last,
        order,
    })
}

/// Rewrites `model` so that `region` runs in chunks (see the module docs). The node list of the
/// result is in topological order, and every value in it is read or made by a node or is a graph
/// input, output or initializer: the region's original intermediates are gone.
pub fn apply(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    region: &Region,
) -> Result<Model, ChunkError> {
    apply_unrolled(model, facts, dims, region).map(|(m, _)| m)
}

/// [`apply`], with the names of the nodes it added (what [`super::roll`] needs to fold the
/// chunks into a `Scan`).
pub(crate) fn apply_unrolled(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    region: &Region,
) -> Result<(Model, super::roll::Unrolled), ChunkError> {
    let g = &model.graph;
    let consumers = g.consumers();
    let em = emit(g, facts, dims, &consumers, region)?;
    let err = |m: String| ChunkError::Region(m);
    let mut out = g.clone();
    let mut names = Names::of(g);
    // Shared names for the chunk bounds: after the first region output.
    let tag = em
        .outputs
        .first()
        .map_or_else(|| "chunk".to_string(), |&v| g.value(v).name.clone());
    let mut wires: BTreeMap<Wire, ValueId> = BTreeMap::new();
    let mut new_nodes: Vec<Node> = Vec::new();
    let mut unrolled = super::roll::Unrolled {
        chunks: vec![Default::default(); em.bounds.len()],
        concats: Vec::new(),
        widths: em.bounds.iter().map(|&(lo, hi)| hi - lo).collect(),
    };
    let blank = |name: String, op: &str, inputs| Node::new(name, op, inputs, Vec::new());
    // A placeholder producer; value kinds are fixed once the node list is final.
    let made = ValueKind::Node {
        node: NodeId(u32::MAX),
        slot: 0,
    };
    let int_init = |out: &mut Graph, names: &mut Names, base: &str, dims_: Vec<u64>, v: &[i64]| {
        let name = names.fresh(base);
        out.add_initializer(TensorData::from_i64(name, dims_, v))
    };
    for step in &em.steps {
        match step {
            Emit::Slice { chunk, value, axis } => {
                let (c, v) = (*chunk, *value);
                let (lo, hi) = em.bounds[c as usize];
                let m = em.mult(v);
                let x = if m == 1 {
                    String::new()
                } else {
                    format!("x{m}")
                };
                let mut ins = vec![Some(v)];
                for (w, base, x) in [
                    (
                        Wire::Bound(c, false, m),
                        format!("{tag}__chunk{c}_start{x}"),
                        lo * m,
                    ),
                    (
                        Wire::Bound(c, true, m),
                        format!("{tag}__chunk{c}_end{x}"),
                        hi * m,
                    ),
                    (
                        Wire::Axis(*axis),
                        format!("{tag}__axis{axis}"),
                        *axis as i64,
                    ),
                ] {
                    let id = match wires.get(&w) {
                        Some(&id) => id,
                        None => {
                            let id = int_init(&mut out, &mut names, &base, vec![1], &[x]);
                            wires.insert(w, id);
                            id
                        }
                    };
                    ins.push(Some(id));
                }
                let vname = names.fresh(&format!("{}__chunk{c}", g.value(v).name));
                let mut node = blank(names.fresh(&format!("{vname}_slice")), "Slice", ins);
                unrolled.chunks[c as usize]
                    .slices
                    .push((node.name.clone(), *axis));
                let id = out.add_value(vname, made.clone());
                node.outputs = vec![Some(id)];
                wires.insert(Wire::Chunk(c, v), id);
                new_nodes.push(node);
            }
            Emit::Clone {
                chunk,
                node: n,
                inputs,
            } => {
                let c = *chunk;
                let orig = g.node(*n);
                let mut ins = Vec::with_capacity(inputs.len());
                for w in inputs {
                    let Some(w) = *w else {
                        ins.push(None);
                        continue;
                    };
                    let id = match w {
                        Wire::Orig(v) => v,
                        Wire::Shape(c, n) => {
                            let y = g.node(n).outputs[0]
                                .ok_or_else(|| err("a shape op without output".into()))?;
                            let ax =
                                region.axes.get(&y).copied().flatten().ok_or_else(|| {
                                    err("a shape op's output is not split".into())
                                })?;
                            let shape = facts.get(y).shape.as_ref().ok_or_else(|| {
                                err("a shape op's output shape is unknown".into())
                            })?;
                            let mut vals = Vec::with_capacity(shape.len());
                            for (i, d) in shape.iter().enumerate() {
                                vals.push(if i == ax {
                                    em.width_of(c, y)
                                } else {
                                    d.eval_map(dims).map_err(|e| err(e.to_string()))?
                                });
                            }
                            let base = format!("{}__chunk{c}_shape", g.value(y).name);
                            int_init(&mut out, &mut names, &base, vec![vals.len() as u64], &vals)
                        }
                        w => *wires
                            .get(&w)
                            .ok_or_else(|| err(format!("{w:?} is read before it is made")))?,
                    };
                    ins.push(Some(id));
                }
                let base = if orig.name.is_empty() {
                    format!("{}_{}", orig.op, n.0)
                } else {
                    orig.name.clone()
                };
                let mut node = blank(names.fresh(&format!("{base}__chunk{c}")), &orig.op, ins);
                unrolled.chunks[c as usize].clones.push(node.name.clone());
                node.domain = orig.domain.clone();
                node.attrs = orig.attrs.clone();
                for o in &orig.outputs {
                    node.outputs.push(match o {
                        Some(v) => {
                            let name = names.fresh(&format!("{}__chunk{c}", g.value(*v).name));
                            let id = out.add_value(name, made.clone());
                            wires.insert(Wire::Chunk(c, *v), id);
                            Some(id)
                        }
                        None => None,
                    });
                }
                new_nodes.push(node);
            }
            Emit::Concat { value, axis } => {
                let v = *value;
                let mut ins = Vec::with_capacity(em.bounds.len());
                for c in 0..em.bounds.len() as u32 {
                    let id = wires.get(&Wire::Chunk(c, v)).ok_or_else(|| {
                        err(format!("chunk {c} of '{}' is missing", g.value(v).name))
                    })?;
                    ins.push(Some(*id));
                }
                let mut node = blank(
                    names.fresh(&format!("{}__concat", g.value(v).name)),
                    "Concat",
                    ins,
                );
                node.attrs = vec![axis_attr(*axis)];
                unrolled.concats.push((node.name.clone(), *axis));
                node.outputs = vec![Some(v)];
                new_nodes.push(node);
            }
        }
    }
    let mut nodes: Vec<Node> = Vec::with_capacity(g.nodes.len() + new_nodes.len());
    for (i, node) in g.nodes.iter().enumerate() {
        let n = NodeId::from_index(i);
        if !region.nodes.contains(&n) || region.keep.contains(&n) {
            nodes.push(node.clone());
        }
        if i == em.last {
            nodes.append(&mut new_nodes);
        }
    }
    out.nodes = nodes;
    set_producers(&mut out);
    let order = out.topo_order().map_err(|e| err(e.to_string()))?;
    let mut out = crate::reorder(&out, &order);
    out = compact(out);
    let model = Model {
        graph: out,
        ..model.clone()
    };
    Ok((model, unrolled))
}

/// Where a rewrite adds its nodes: fresh names in `out`, each node recorded in `added` in the order
/// it is added (after what it reads). The selections' sink builds with it, and so does every
/// rewrite through [`rewrite_nodes`].
pub(super) struct Adder<'a> {
    pub out: &'a mut Graph,
    pub names: &'a mut Names,
    pub added: &'a mut Vec<NodeId>,
}

impl Adder<'_> {
    /// An int64 constant of shape `dims`, named from `base`.
    pub fn ints(&mut self, base: &str, dims: Vec<u64>, v: &[i64]) -> ValueId {
        let name = self.names.fresh(base);
        self.out
            .add_initializer(TensorData::from_i64(name, dims, v))
    }

    /// Constant `t`, named from its name.
    pub fn constant(&mut self, mut t: TensorData) -> ValueId {
        t.name = self.names.fresh(&t.name);
        self.out.add_initializer(t)
    }

    /// A node of one output, named from `base` (its output from `{base}_output`), recorded.
    pub fn node(
        &mut self,
        base: &str,
        op: &str,
        inputs: &[Option<ValueId>],
        attrs: Vec<Attribute>,
    ) -> ValueId {
        let name = self.names.fresh(base);
        let vname = self.names.fresh(&format!("{base}_output"));
        let (id, outs) = self.out.add_node(name, op, inputs, &[&vname], attrs);
        self.added.push(id);
        outs[0]
    }
}

/// What a node rewritten in place becomes (its name and outputs kept): an op of the default
/// domain over `inputs` with `attrs`.
pub(crate) struct NewNode {
    pub op: &'static str,
    pub inputs: Vec<Option<ValueId>>,
    pub attrs: Vec<Attribute>,
}

impl NewNode {
    /// Writes `node` anew as this (its name and outputs kept).
    pub fn replace(self, node: &mut Node) {
        node.op = self.op.into();
        node.domain = String::new();
        node.inputs = self.inputs;
        node.attrs = self.attrs;
    }
}

/// A rewrite before chunking that writes nodes anew in place: `each` is asked of every node, with
/// an [`Adder`] for the nodes and constants it needs (they go right before it), and gives what the
/// node becomes, or `None`, having added nothing, to leave it. The values the rewritten nodes
/// read before and no longer read, and what only they made, are dropped ([`finish`]). `None`
/// when no node is rewritten.
pub(crate) fn rewrite_nodes(
    model: &Model,
    mut each: impl FnMut(&Node, &mut Adder) -> Option<NewNode>,
) -> Option<Model> {
    let g = &model.graph;
    let mut out = g.clone();
    let mut names = Names::of(g);
    let mut before: BTreeMap<usize, Vec<NodeId>> = BTreeMap::new();
    let mut unread = Vec::new();
    let mut changed = false;
    for id in g.node_ids() {
        let node = g.node(id);
        let mut added = Vec::new();
        let mut add = Adder {
            out: &mut out,
            names: &mut names,
            added: &mut added,
        };
        let Some(new) = each(node, &mut add) else {
            continue;
        };
        changed = true;
        unread.extend(node.input_ids());
        if !added.is_empty() {
            before.insert(id.index(), added);
        }
        new.replace(&mut out.nodes[id.index()]);
    }
    changed.then(|| finish(model, &out, &before, BTreeSet::new(), unread))
}

/// An attribute `name` of `value`.
pub(crate) fn attr(name: &str, value: AttrValue) -> Attribute {
    Attribute {
        name: name.into(),
        value,
        doc: String::new(),
    }
}

/// An `axis` attribute (a `Concat`'s, a `Gather`'s, the slices' and gathers' rewrites write).
pub(crate) fn axis_attr(axis: usize) -> Attribute {
    attr("axis", AttrValue::Int(axis as i64))
}

/// How many times each value of `g` is read: by each node input that names it, each subgraph that
/// reads it, and as a graph output.
pub(crate) fn read_counts(g: &Graph) -> Vec<usize> {
    let mut reads = vec![0usize; g.values.len()];
    for n in &g.nodes {
        for v in n.input_ids() {
            reads[v.index()] += 1;
        }
        for sub in n.subgraphs() {
            for v in sub.outer_reads_resolved(g) {
                reads[v.index()] += 1;
            }
        }
    }
    for v in &g.outputs {
        reads[v.index()] += 1;
    }
    reads
}

/// A test graph's node `op` over `ins` (with a `perm`, when given), named and its output named
/// `n{index}`: its output.
#[cfg(test)]
pub(crate) fn test_node(
    g: &mut Graph,
    op: &str,
    ins: &[ValueId],
    perm: Option<Vec<i64>>,
) -> ValueId {
    let name = format!("n{}", g.nodes.len());
    let ins: Vec<Option<ValueId>> = ins.iter().map(|&v| Some(v)).collect();
    let attrs = perm
        .map(|p| attr("perm", AttrValue::Ints(p)))
        .into_iter()
        .collect();
    g.add_node(name.clone(), op, &ins, &[&name], attrs).1[0]
}

/// Points every node output's value at its producer.
pub(crate) fn set_producers(g: &mut Graph) {
    let mut owner = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for (slot, o) in n.outputs.iter().enumerate() {
            if let Some(v) = o {
                owner.push((*v, i, slot as u32));
            }
        }
    }
    for (v, i, slot) in owner {
        g.values[v.index()].kind = ValueKind::Node {
            node: NodeId::from_index(i),
            slot,
        };
    }
}

/// Drops node-made values no node makes any more (a chunked region's original intermediates) and
/// renumbers the rest, keeping their order.
pub(crate) fn compact(g: Graph) -> Graph {
    compact_mapped(g).0
}

/// [`compact`], with each old value's new id (`None`: dropped).
pub(crate) fn compact_mapped(g: Graph) -> (Graph, Vec<Option<ValueId>>) {
    let mut made = vec![false; g.values.len()];
    for n in &g.nodes {
        for v in n.output_ids() {
            made[v.index()] = true;
        }
    }
    let keep: Vec<bool> = g
        .values
        .iter()
        .enumerate()
        .map(|(i, v)| made[i] || !matches!(v.kind, ValueKind::Node { .. }))
        .collect();
    let mut map = vec![None; keep.len()];
    let mut k = 0;
    for (i, &kept) in keep.iter().enumerate() {
        if kept {
            map[i] = Some(ValueId::from_index(k));
            k += 1;
        }
    }
    (retain_values(g, &keep), map)
}

/// Whether each value of `g` is read: by a node, a subgraph (by name) or as a graph output or input.
/// A `value_info` entry is a declaration, not a read.
fn read_values(g: &Graph) -> Vec<bool> {
    let mut read: Vec<bool> = read_counts(g).iter().map(|&n| n > 0).collect();
    for v in &g.inputs {
        read[v.index()] = true;
    }
    read
}

/// Drops the initializers that chunking left unread: those no node, subgraph or graph output reads
/// any more, because the readers they were frozen or kept for were rewritten (shape values frozen
/// into constants, per-chunk bounds, the bounds of a slice of a weight made from positions). An
/// initializer of `original` that `original` did not read either stays as the model had it. A
/// written file would carry the others as dead weight (and onnxruntime warns about each).
pub(crate) fn drop_unread_initializers(g: Graph, original: &Graph) -> Graph {
    let read = read_values(&g);
    let read_before = read_values(original);
    let keep: Vec<bool> = g
        .values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            read[i]
                || !matches!(v.kind, ValueKind::Initializer(_))
                || original.find_value(&v.name).is_some_and(|o| {
                    matches!(original.value(o).kind, ValueKind::Initializer(_))
                        && !read_before[o.index()]
                })
        })
        .collect();
    retain_values(g, &keep)
}

/// Keeps the values marked in `keep` (no node may read or make another) and renumbers them,
/// keeping their order.
pub(crate) fn retain_values(g: Graph, keep: &[bool]) -> Graph {
    if keep.iter().all(|&k| k) {
        return g;
    }
    let mut map: Vec<Option<ValueId>> = vec![None; g.values.len()];
    let mut values = Vec::with_capacity(g.values.len());
    for (i, v) in g.values.into_iter().enumerate() {
        if keep[i] {
            map[i] = Some(ValueId::from_index(values.len()));
            values.push(v);
        }
    }
    let m = |v: ValueId| map[v.index()];
    let list = |l: Vec<ValueId>| -> Vec<ValueId> { l.into_iter().filter_map(m).collect() };
    let mut nodes = g.nodes;
    for n in &mut nodes {
        for i in n.inputs.iter_mut().chain(n.outputs.iter_mut()) {
            *i = i.and_then(m);
        }
    }
    Graph {
        nodes,
        values,
        inputs: list(g.inputs),
        outputs: list(g.outputs),
        value_info: list(g.value_info),
        initializers: list(g.initializers),
        sparse_initializers: list(g.sparse_initializers),
        ..g
    }
}

/// Adds to `gone` every node of `g` that only nodes in `gone` read (its outputs no graph output,
/// none read by a subgraph), from the makers of `read_before` up: a `Range` of the gathered
/// columns, the shape arithmetic of a reshape target, a view made only for its shape. Nodes that
/// nothing read before stay as they were.
pub(crate) fn drop_made_dead(
    g: &Graph,
    gone: &mut BTreeSet<NodeId>,
    mut read_before: Vec<ValueId>,
) {
    let mut readers = vec![0usize; g.values.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        if !gone.contains(&NodeId::from_index(i)) {
            for v in n.input_ids() {
                readers[v.index()] += 1;
            }
            for sub in n.subgraphs() {
                for v in sub.outer_reads_resolved(g) {
                    readers[v.index()] += 1;
                }
            }
        }
    }
    while let Some(v) = read_before.pop() {
        let Some(p) = g.producer(v) else { continue };
        let node = g.node(p);
        let dead = !gone.contains(&p)
            && node.subgraphs().next().is_none()
            && node
                .output_ids()
                .all(|o| readers[o.index()] == 0 && !g.outputs.contains(&o));
        if dead {
            gone.insert(p);
            for i in node.input_ids() {
                readers[i.index()] -= 1;
                read_before.push(i);
            }
        }
    }
}

/// The model of `out`, a rewrite of `model`'s graph (its first nodes the model's own, in order),
/// with the new nodes in `before` right before the node each list is keyed by, and the nodes in `gone` and
/// every node only they read (from the makers of `read_before` up, see [`drop_made_dead`])
/// dropped with their outputs.
pub(crate) fn finish(
    model: &Model,
    out: &Graph,
    before: &BTreeMap<usize, Vec<NodeId>>,
    mut gone: BTreeSet<NodeId>,
    read_before: Vec<ValueId>,
) -> Model {
    drop_made_dead(out, &mut gone, read_before);
    let schedule = order_with_before(model.graph.nodes.len(), before, &gone);
    let mut keep = vec![true; out.values.len()];
    for &n in &gone {
        for v in out.node(n).output_ids() {
            keep[v.index()] = false;
        }
    }
    Model {
        graph: retain_values(crate::reorder(out, &schedule), &keep),
        ..model.clone()
    }
}

/// The nodes of `out` in the order a rewrite that added nodes at the end wants them: those from
/// `first_new` on first (what they make is read by the others), then the others, but `replaced`.
pub(crate) fn added_first(
    out: &Graph,
    first_new: usize,
    replaced: &BTreeSet<NodeId>,
) -> Vec<NodeId> {
    (first_new..out.nodes.len())
        .chain(0..first_new)
        .map(NodeId::from_index)
        .filter(|n| !replaced.contains(n))
        .collect()
}

/// Whether value `v` holds at least `min_bytes` at `dims` (what a rewrite before chunking takes:
/// the values large enough to matter to the peak).
pub(crate) fn holds_at_least(
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    v: ValueId,
    min_bytes: u64,
) -> bool {
    facts
        .get(v)
        .bytes()
        .and_then(|b| b.eval_map(dims).ok())
        .is_some_and(|b| b >= min_bytes as i64)
}

/// The order of a graph's first `n` nodes with each node's new nodes in `before` right before it
/// (in their order; also where the node itself is in `gone`, as a replaced node's are) and the
/// nodes in `gone` left out: a schedule for `crate::reorder` after a
/// rewrite that replaces a node by new nodes feeding it.
pub(crate) fn order_with_before(
    n: usize,
    before: &BTreeMap<usize, Vec<NodeId>>,
    gone: &BTreeSet<NodeId>,
) -> Vec<NodeId> {
    (0..n)
        .map(NodeId::from_index)
        .flat_map(|i| {
            let kept = (!gone.contains(&i)).then_some(i);
            before
                .get(&i.index())
                .into_iter()
                .flatten()
                .copied()
                .chain(kept)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::bounds;

    #[test]
    fn chunk_bounds_cover_the_extent_and_keep_a_lone_width_one_chunk_out() {
        assert_eq!(bounds(10, 3), vec![(0, 4), (4, 8), (8, 10)]);
        // 7 = 3 + 3 + 1: the last row joins the chunk before.
        assert_eq!(bounds(7, 3), vec![(0, 3), (3, 7)]);
        // As many chunks as rows: every chunk one row wide, the last too.
        let rows = bounds(256, 256);
        assert_eq!(rows.len(), 256);
        assert!(rows
            .iter()
            .enumerate()
            .all(|(i, &(a, b))| (a, b) == (i as i64, i as i64 + 1)));
        assert_eq!(bounds(256, 512).len(), 256);
        assert_eq!(bounds(5, 1), vec![(0, 5)]);
    }
}
