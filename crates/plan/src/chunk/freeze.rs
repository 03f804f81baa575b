//! Shape values as constants: before chunking, every node whose outputs are all int64 tensors with
//! contents known at the given dims (`Shape`, `Size` and the shape arithmetic computed from them, as
//! exporters write it for reshape targets, slice bounds and pad amounts) is replaced by constant
//! initializers holding those contents.
//!
//! Why: a `Shape` node reads only its input's shape, which the facts know, but as a graph edge it
//! reads the whole tensor. Chunking a region whose values feed `Shape` nodes would keep those values
//! whole (they are read outside the region) and a path region -> `Shape` -> ... -> region makes the
//! region non-convex. With the shape values frozen, nothing outside reads the region's tensors for
//! their shape. The chunked model is made for the given dims anyway (its slice bounds and per-chunk
//! reshape targets are constants), so freezing loses no generality that chunking had kept.

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::dtype::DataType;
use memplan_ir::graph::{Model, NodeId, ValueId, ValueKind};
use memplan_ir::infer::{Facts, Known};
use memplan_ir::TensorData;

/// The model with its known int64 values at `dims` frozen as initializers, or `None` when no node
/// qualifies. The node list must be in topological order; it stays so.
pub(crate) fn freeze_shape_values(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> Option<Model> {
    let g = &model.graph;
    let outputs: BTreeSet<ValueId> = g.outputs.iter().copied().collect();
    // Names read by subgraphs from this scope keep their producers (a subgraph reads by name).
    let mut outer: BTreeSet<String> = BTreeSet::new();
    for n in &g.nodes {
        for sub in n.subgraphs() {
            outer.extend(sub.outer_reads());
        }
    }
    let known = |v: ValueId| -> Option<(Vec<u64>, Vec<i64>)> {
        let f = facts.get(v);
        if f.dtype != Some(DataType::I64)
            || outputs.contains(&v)
            || outer.contains(&g.value(v).name)
        {
            return None;
        }
        let Some(Known::Int(exprs)) = &f.value else {
            return None;
        };
        let shape = f.shape_at(dims)?;
        let vals = exprs
            .iter()
            .map(|e| e.eval_map(dims).ok())
            .collect::<Option<Vec<i64>>>()?;
        (shape.iter().product::<u64>() == vals.len() as u64).then_some((shape, vals))
    };
    let mut frozen: Vec<(ValueId, TensorData)> = Vec::new();
    let mut drop = vec![false; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        if n.outputs.is_empty() || n.outputs.iter().any(Option::is_none) {
            continue;
        }
        let vals: Option<Vec<(ValueId, Vec<u64>, Vec<i64>)>> = n
            .output_ids()
            .map(|v| known(v).map(|(s, x)| (v, s, x)))
            .collect();
        let Some(vals) = vals else { continue };
        drop[i] = true;
        for (v, shape, x) in vals {
            frozen.push((v, TensorData::from_i64(g.value(v).name.clone(), shape, &x)));
        }
    }
    if frozen.is_empty() {
        return None;
    }
    // What only the frozen nodes read goes with them: a view TorchScript made of a large value
    // only to read its shape would otherwise be computed, and held, for nothing.
    let mut gone: BTreeSet<NodeId> = (0..g.nodes.len())
        .filter(|&i| drop[i])
        .map(NodeId::from_index)
        .collect();
    let read_before: Vec<ValueId> = gone.iter().flat_map(|&n| g.node(n).input_ids()).collect();
    super::rewrite::drop_made_dead(g, &mut gone, read_before);
    let mut out = g.clone();
    let mut keep = vec![true; g.values.len()];
    for &n in &gone {
        for v in g.node(n).output_ids() {
            keep[v.index()] = false;
        }
    }
    for (v, t) in frozen {
        keep[v.index()] = true;
        out.values[v.index()].kind = ValueKind::Initializer(t);
        out.initializers.push(v);
    }
    out.nodes = out
        .nodes
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !gone.contains(&NodeId::from_index(*i)))
        .map(|(_, n)| n)
        .collect();
    super::rewrite::set_producers(&mut out);
    let out = super::rewrite::retain_values(out, &keep);
    Some(Model {
        graph: out,
        ..model.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use memplan_ir::graph::{DeclDim, DeclType, Graph};

    /// `y = Reshape(x, Shape(t))` with `t = Transpose(x)` (`x` of `[4, 8]`), `t` also an output
    /// when `t_out`: frozen, the names of the nodes left.
    fn frozen_nodes(t_out: bool) -> Vec<String> {
        let mut g = Graph::default();
        let dims = vec![DeclDim::Value(4), DeclDim::Value(8)];
        let x = g.add_input("x", DeclType::tensor(DataType::F32, dims));
        let t = g.add_node("t", "Transpose", &[Some(x)], &["tv"], vec![]).1[0];
        let s = g.add_node("s", "Shape", &[Some(t)], &["sv"], vec![]).1[0];
        let y = g
            .add_node("r", "Reshape", &[Some(x), Some(s)], &["y"], vec![])
            .1[0];
        g.outputs = if t_out { vec![y, t] } else { vec![y] };
        let model = Model {
            graph: g,
            ..Model::default()
        };
        let facts = memplan_ir::infer_graph(&model.graph, 18).unwrap();
        let m = freeze_shape_values(&model, &facts, &BTreeMap::new()).unwrap();
        assert!(memplan_ir::infer_graph(&m.graph, 18).is_ok());
        m.graph.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// A value made only for its shape (TorchScript reads a view's `Shape` for a reshape target)
    /// goes with the `Shape` frozen into a constant; one read otherwise stays.
    #[test]
    fn what_only_frozen_shapes_read_is_dropped() {
        assert_eq!(frozen_nodes(false), ["r"]);
        assert_eq!(frozen_nodes(true), ["t", "r"]);
    }
}
