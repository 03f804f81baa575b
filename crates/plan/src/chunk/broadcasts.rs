//! Tiles that broadcast: a `Tile` whose repeated axes all hold one element copies its input as
//! `Expand` to its output shape does, element for element (LongT5's global keys and values, tiled
//! once per block: `[1, 1, G, H, D]` repeated `[1, B, 1, 1, 1]`). `Tile`'s repeats are counts, not
//! a shape, so a chunk's clone could not take its own; written as `Expand`, every axis splits (the
//! repeated ones reading the input whole) and each chunk's clone reads a target shape of its own.
//! The same elements are copied, so the bits are the same.

use std::collections::BTreeMap;

use memplan_ir::graph::{Model, Node, ValueId};
use memplan_ir::infer::Facts;

use super::positions::known_input;
use super::rewrite::{holds_at_least, rewrite_nodes, NewNode};

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
        let model = Model {
            graph: g,
            ..Model::default()
        };
        let dims = BTreeMap::new();
        let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
        let m = tiles_as_expands(&model, &facts, &dims, 0)?;
        let f2 = memplan_ir::infer_model_for(&m, &dims).unwrap();
        // The same output shape.
        assert_eq!(
            f2.get(m.graph.outputs[0]).shape_at(&dims),
            facts.get(model.graph.outputs[0]).shape_at(&dims)
        );
        Some(m.graph.nodes.iter().map(|n| n.op.clone()).collect())
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
}
