//! Tiles that broadcast: a `Tile` whose repeated axes all hold one element copies its input as
//! `Expand` to its output shape does, element for element (LongT5's global keys and values, tiled
//! once per block: `[1, 1, G, H, D]` repeated `[1, B, 1, 1, 1]`). `Tile`'s repeats are counts, not
//! a shape, so a chunk's clone could not take its own; written as `Expand`, every axis splits (the
//! repeated ones reading the input whole) and each chunk's clone reads a target shape of its own.
//! The same elements are copied, so the bits are the same.
//!
//! Constants that broadcast: a constant whose elements are all equal (a `full_like` the exporter
//! folded: LongT5's bucket cap, `[1, S, 256]` of 15s, 8 MiB) is `Expand` of its one element, so
//! it is neither resident nor made whole, and every axis of it splits.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use memplan_ir::graph::{Model, Names, Node, NodeId, ValueId, ValueKind};
use memplan_ir::infer::Facts;
use memplan_ir::TensorData;

use super::positions::{known_input, large_constants};
use super::rewrite::{added_first, holds_at_least, rewrite_nodes, NewNode};

/// For a `Tile` whose repeats are known at `dims` and repeat only axes of one element: its input
/// and its output shape there.
pub(super) fn tile_as_expand(
    node: &Node,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> Option<(ValueId, Vec<u64>)> {
    if node.op != "Tile" || !node.is_onnx_domain() {
        return None;
    }
    let x = node.inputs.first().copied().flatten()?;
    let shape = facts.get(x).shape_at(dims)?;
    let reps = known_input(node, 1, facts, dims)??;
    if reps.len() != shape.len() {
        return None;
    }
    let mut out = Vec::with_capacity(shape.len());
    for (&d, &r) in shape.iter().zip(&reps) {
        let r = u64::try_from(r).ok()?;
        if r != 1 && d != 1 {
            return None;
        }
        out.push(d.checked_mul(r)?);
    }
    Some((x, out))
}

/// `model` with every `Tile` of at least `min_bytes` that broadcasts ([`tile_as_expand`]) written
/// as `Expand` to its output shape (its name and output kept); `None` when there is none.
pub(crate) fn tiles_as_expands(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    min_bytes: u64,
) -> Option<Model> {
    rewrite_nodes(model, |node, add| {
        let y = node.outputs.first().copied().flatten()?;
        if !holds_at_least(facts, dims, y, min_bytes) {
            return None;
        }
        let (x, shape) = tile_as_expand(node, facts, dims)?;
        let to: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let base = format!("{}/shape", node.name);
        let target = add.ints(&base, vec![to.len() as u64], &to);
        Some(NewNode {
            op: "Expand",
            inputs: vec![Some(x), Some(target)],
            attrs: Vec::new(),
        })
    })
}

/// The one element of constant `t` when every element equals it (and there are at least two):
/// its bytes.
pub(crate) fn splat_element(t: &TensorData) -> Option<&[u8]> {
    let e = t.dtype.bytes_for(1) as usize;
    let raw = t.raw()?;
    let n = t.numel() as usize;
    if e == 0 || n < 2 || raw.len() != n * e {
        return None;
    }
    let first = &raw[..e];
    raw.chunks_exact(e).all(|x| x == first).then_some(first)
}

/// `model` with every constant ([`constant_tensor`]: a weight or a `Constant` node) of at least
/// `min_bytes` whose elements are all equal made by `Expand` of that element (a scalar) to its
/// shape; the value keeps its name and id, the `Expand` goes first, a `Constant` node goes.
/// `None` when there is none.
pub(crate) fn splats_as_expands(
    model: &Model,
    _facts: &Facts,
    _dims: &BTreeMap<String, i64>,
    min_bytes: u64,
) -> Option<Model> {
    let g = &model.graph;
    let found = large_constants(g, min_bytes, splat_element);
    if found.is_empty() {
        return None;
    }
    let mut out = g.clone();
    let mut names = Names::of(g);
    let first_new = out.nodes.len();
    let mut replaced: BTreeSet<NodeId> = BTreeSet::new();
    for (v, t, constant_node, element) in found {
        let base = g.value(v).name.clone();
        let one = TensorData::from_raw(
            names.fresh(&format!("{base}/element")),
            t.dtype,
            Vec::new(),
            Bytes::copy_from_slice(element),
        )
        .ok()?;
        let one = out.add_initializer(one);
        let to: Vec<i64> = t.dims.iter().map(|&d| d as i64).collect();
        let shape = TensorData::from_i64(
            names.fresh(&format!("{base}/shape")),
            vec![to.len() as u64],
            &to,
        );
        let shape = out.add_initializer(shape);
        let nid = NodeId::from_index(out.nodes.len());
        out.nodes.push(Node::new(
            names.fresh(&format!("{base}/expand")),
            "Expand",
            vec![Some(one), Some(shape)],
            vec![Some(v)],
        ));
        out.values[v.index()].kind = ValueKind::Node { node: nid, slot: 0 };
        out.initializers.retain(|&x| x != v);
        replaced.extend(constant_node);
    }
    let schedule = added_first(&out, first_new, &replaced);
    Some(Model {
        graph: crate::reorder(&out, &schedule),
        ..model.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use memplan_ir::graph::{DeclDim, DeclType, Graph};
    use memplan_ir::{DataType, TensorData};

    /// `Tile(x, reps)` of `x` of `shape`: its nodes' ops after the rewrite (`None`: not rewritten).
    fn rewritten(shape: &[i64], reps: &[i64]) -> Option<Vec<String>> {
        let mut g = Graph::default();
        let dims = shape.iter().map(|&d| DeclDim::Value(d)).collect();
        let x = g.add_input("x", DeclType::tensor(DataType::F32, dims));
        let r = g.add_initializer(TensorData::from_i64("reps", vec![reps.len() as u64], reps));
        let y = g
            .add_node("t", "Tile", &[Some(x), Some(r)], &["y"], vec![])
            .1[0];
        g.outputs = vec![y];
        let (m, _) = rewritten_keeping_shape(g, |m, f, d| tiles_as_expands(m, f, d, 0))?;
        Some(m.graph.nodes.iter().map(|n| n.op.clone()).collect())
    }

    /// Graph `g` (one output, no symbols) as a model rewritten by `rewrite`, with its facts;
    /// asserts that the output keeps its shape. `None`: not rewritten.
    fn rewritten_keeping_shape(
        g: Graph,
        rewrite: impl Fn(&Model, &Facts, &BTreeMap<String, i64>) -> Option<Model>,
    ) -> Option<(Model, Facts)> {
        let model = Model {
            graph: g,
            ..Model::default()
        };
        let dims = BTreeMap::new();
        let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
        let m = rewrite(&model, &facts, &dims)?;
        let f2 = memplan_ir::infer_model_for(&m, &dims).unwrap();
        assert_eq!(
            f2.get(m.graph.outputs[0]).shape_at(&dims),
            facts.get(model.graph.outputs[0]).shape_at(&dims)
        );
        Some((m, f2))
    }

    /// A tile of axes of one element is an `Expand`; one that repeats a longer axis is not.
    #[test]
    fn tiles_of_single_elements_are_expands() {
        assert_eq!(
            rewritten(&[1, 1, 3, 2], &[1, 4, 1, 1]),
            Some(vec!["Expand".to_string()])
        );
        assert_eq!(rewritten(&[2, 3], &[2, 1]), None);
        assert_eq!(rewritten(&[1, 3], &[1, 1]).map(|v| v.len()), Some(1));
    }

    /// `Min(x, c)` of `x` `[1, 64, 32]` and `c` a `Constant` node of `shape` holding `values`
    /// (row-major, cycled), rewritten at `min_bytes`: its nodes' ops and the model (`None`: not
    /// rewritten).
    fn splat(values: &[f32], shape: &[u64], min_bytes: u64) -> Option<(Vec<String>, Model)> {
        let mut g = Graph::default();
        let dims = vec![DeclDim::Value(1), DeclDim::Value(64), DeclDim::Value(32)];
        let x = g.add_input("x", DeclType::tensor(DataType::F32, dims));
        let n: u64 = shape.iter().product();
        let data: Vec<f32> = values.iter().copied().cycle().take(n as usize).collect();
        let t = TensorData::from_f32("c", shape.to_vec(), &data);
        let value = memplan_ir::graph::AttrValue::Tensor(t);
        let c = g
            .add_node(
                "k",
                "Constant",
                &[],
                &["c"],
                vec![super::super::rewrite::attr("value", value)],
            )
            .1[0];
        let y = g
            .add_node("m", "Min", &[Some(x), Some(c)], &["y"], vec![])
            .1[0];
        g.outputs = vec![y];
        let (m, f2) = rewritten_keeping_shape(g, |m, f, d| splats_as_expands(m, f, d, min_bytes))?;
        // The constant keeps its name and shape.
        let c2 = m
            .graph
            .find_value("c")
            .expect("the constant's value is kept");
        assert_eq!(f2.get(c2).shape_at(&BTreeMap::new()), Some(shape.to_vec()));
        Some((m.graph.nodes.iter().map(|n| n.op.clone()).collect(), m))
    }

    /// A constant of one repeated element is `Expand` of that element (a scalar: nothing of its
    /// size is held); one of two elements, or under `min_bytes`, is left.
    #[test]
    fn a_constant_of_one_repeated_element_is_its_expand() {
        let (ops, m) = splat(&[15.0], &[1, 64, 32], 0).expect("a splat is rewritten");
        assert_eq!(ops, vec!["Expand".to_string(), "Min".to_string()]);
        let expand = &m.graph.nodes[0];
        let one = match &m.graph.value(expand.inputs[0].unwrap()).kind {
            ValueKind::Initializer(t) => t.clone(),
            k => panic!("the element is not a weight: {k:?}"),
        };
        assert!(one.dims.is_empty(), "a scalar: {:?}", one.dims);
        assert_eq!(one.to_f64_vec(), Some(vec![15.0]));
        let to = match &m.graph.value(expand.inputs[1].unwrap()).kind {
            ValueKind::Initializer(t) => t.to_i64_vec(),
            k => panic!("the shape is not a weight: {k:?}"),
        };
        assert_eq!(to, Some(vec![1, 64, 32]));
        // A smaller constant that broadcasts is one too.
        assert!(splat(&[-0.5], &[1, 1, 32], 0).is_some());
        assert!(splat(&[15.0, 14.0], &[1, 64, 32], 0).is_none());
        assert!(splat(&[15.0], &[1, 64, 32], 64 * 32 * 4 + 1).is_none());
        assert!(splat(&[15.0], &[1], 0).is_none());
    }
}
