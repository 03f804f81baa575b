//! Scatters of a box. TorchScript writes a slice assignment `x[:, a:b, :, c:] = y` as a
//! `ScatterND` of every element's index tuple: a grid of `int64` coordinates, each a `Range`
//! broadcast along its own axis, concatenated along a last axis as long as the rank. The grid
//! holds `8 * rank` bytes per element written (Longformer's diagonal scores: 32 MiB of indices
//! for 8 MiB of scores), and a `ScatterND`'s flow mixes every axis its tuples address, so no
//! region splits the batch axis the grid spans whole.
//!
//! Where each coordinate of the tuples is, over the grid's box, `start + i` along its own axis
//! and constant along the others (read in closed form at the dims, as `gathers` reads a gather's
//! indices), the scatter writes the box `[start, start + len)` of each addressed axis, and is
//! written as slices of the data around the box concatenated with the update, axis by axis: the
//! same elements copied, so the same bits, no index grid, and every axis the box spans whole
//! split by the slices' and concatenations' flows.

use std::collections::BTreeMap;

use memplan_ir::graph::{AttrValue, Attribute, Graph, Model, Node, ValueId};
use memplan_ir::infer::Facts;
use memplan_ir::ops::axes::{attr_int, norm};
use memplan_ir::ops::{self, Moves};

use super::gathers::{fit, progression, Affine};
use super::positions::known_ints;
use super::rewrite::{axis_attr, Adder, NewNode};

/// Coordinate `k` of index tuples `v` (shape `[i_0, .., i_(m-1), q]`) as an affine map over the
/// tuples' box `[i_0, .., i_(m-1)]`: known at `dims`, or one of the parts a `Concat` along the
/// last axis joins, or (for tuples of one coordinate) the value's own progression.
fn coordinate(
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    v: ValueId,
    k: usize,
) -> Option<Affine> {
    let shape = facts.get(v).shape_at(dims)?;
    let (&q, lead) = shape.split_last()?;
    if let Some(vals) = known_ints(facts, dims, v) {
        let vals: Vec<i64> = vals.into_iter().skip(k).step_by(q as usize).collect();
        return fit(lead, &vals);
    }
    let node = g.node(g.producer(v)?);
    if node.op == "Concat" && node.is_onnx_domain() {
        (norm(attr_int(node, "axis", 0), shape.len())? + 1 == shape.len()).then_some(())?;
        let mut at = 0;
        for x in node.input_ids() {
            let e = *facts.get(x).shape_at(dims)?.last()? as usize;
            if k < at + e {
                return coordinate(g, facts, dims, x, k - at);
            }
            at += e;
        }
        return None;
    }
    (q == 1 && k == 0).then_some(())?;
    progression(g, facts, dims, v)?.reshaped(lead)
}

/// The box a `ScatterND` (no reduction) writes, when its tuples are a grid of one coordinate per
/// addressed axis, each `start + i` along its own axis: `(data, update, cuts)`, `cuts` the
/// `(axis, start, len)` of each addressed axis the box does not span whole.
fn scattered_box(
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    node: &Node,
) -> Option<(ValueId, ValueId, Vec<(usize, i64, i64)>)> {
    let plain = match node.attr("reduction") {
        None => true,
        Some(AttrValue::String(r)) => r == b"none",
        Some(_) => false,
    };
    let is_scatter = ops::lookup(node).and_then(|d| d.moves) == Some(Moves::Scatters);
    if !plain || !is_scatter || !node.is_onnx_domain() {
        return None;
    }
    let [Some(data), Some(idx), Some(upd)] = node.inputs[..] else {
        return None;
    };
    let dshape = facts.get(data).shape_at(dims)?;
    let ishape = facts.get(idx).shape_at(dims)?;
    let (&q, lead) = ishape.split_last()?;
    let q = q as usize;
    let mut want = lead.to_vec();
    want.extend(dshape.get(q..)?);
    if lead.len() != q || facts.get(upd).shape_at(dims)? != want {
        return None;
    }
    let mut cuts = Vec::new();
    for (k, (&len, &d)) in lead.iter().zip(&dshape).enumerate() {
        let c = coordinate(g, facts, dims, idx, k)?;
        let own = |j: usize| if j == k { 1 } else { 0 };
        let along = (0..q).all(|j| c.coef[j] == own(j) || lead[j] == 1);
        let (len, d) = (len as i64, d as i64);
        // Tuples count from the end where negative.
        let start = if c.offset < 0 { c.offset + d } else { c.offset };
        if !along || start < 0 || start + len > d {
            return None;
        }
        if len < d {
            cuts.push((k, start, len));
        }
    }
    Some((data, upd, cuts))
}

/// Whether `node` scatters a box: chunking writes it as slices and concatenations, which split
/// every axis the box spans whole (the floor takes it as split as finely as it likes).
pub(crate) fn scatters_a_box(
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    node: &Node,
) -> bool {
    scattered_box(g, facts, dims, node).is_some()
}

/// The nodes a box scatter becomes, built before it, named from the scatter's `base`.
struct Builder<'b, 'a> {
    add: &'b mut Adder<'a>,
    base: String,
}

impl Builder<'_, '_> {
    fn ints(&mut self, what: &str, v: i64) -> ValueId {
        let name = format!("{}/box_{what}", self.base);
        self.add.ints(&name, vec![1], &[v])
    }

    fn node(&mut self, op: &str, inputs: &[Option<ValueId>], attrs: Vec<Attribute>) -> ValueId {
        let name = format!("{}/box_{}", self.base, op.to_lowercase());
        self.add.node(&name, op, inputs, attrs)
    }

    /// `x[lo..hi]` along `axis`.
    fn slice(&mut self, x: ValueId, axis: usize, lo: i64, hi: i64) -> ValueId {
        let (lo, hi, ax) = (
            self.ints("start", lo),
            self.ints("end", hi),
            self.ints("axis", axis as i64),
        );
        self.node(
            "Slice",
            &[Some(x), Some(lo), Some(hi), Some(ax)],
            Vec::new(),
        )
    }

    /// The parts, along the first cut's axis, of `data` (of `shape`) with box `cuts` replaced by
    /// `u`: the data before the box, the box (itself such parts joined, where more axes are cut),
    /// the data after it.
    fn parts(
        &mut self,
        data: ValueId,
        shape: &[u64],
        cuts: &[(usize, i64, i64)],
        u: ValueId,
    ) -> (Vec<ValueId>, usize) {
        let (k, start, len) = cuts[0];
        let d = shape[k] as i64;
        let inner = if cuts.len() == 1 {
            u
        } else {
            let sub = self.slice(data, k, start, start + len);
            let mut sub_shape = shape.to_vec();
            sub_shape[k] = len as u64;
            let (ps, axis) = self.parts(sub, &sub_shape, &cuts[1..], u);
            let ins: Vec<Option<ValueId>> = ps.into_iter().map(Some).collect();
            self.node("Concat", &ins, vec![axis_attr(axis)])
        };
        let mut ps = Vec::with_capacity(3);
        if start > 0 {
            ps.push(self.slice(data, k, 0, start));
        }
        ps.push(inner);
        if start + len < d {
            ps.push(self.slice(data, k, start + len, d));
        }
        (ps, k)
    }
}

/// `model` with every `ScatterND` of at least `min_bytes` (its output or its index tuples) that
/// writes a box ([`scattered_box`])
/// written as slices of its data around the box concatenated with its update (its name and output
/// kept; an `Identity` of the update where the box is the whole data), and the index grid, read
/// by nothing now, dropped. `None` when there is none.
pub(crate) fn scatters_as_boxes(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    min_bytes: u64,
) -> Option<Model> {
    let g = &model.graph;
    super::rewrite::rewrite_nodes(model, |node, add| {
        let y = node.outputs.first().copied().flatten()?;
        // The grid is the larger: 8 bytes per coordinate.
        let big = |v: Option<ValueId>| {
            v.is_some_and(|v| super::rewrite::holds_at_least(facts, dims, v, min_bytes))
        };
        if !big(Some(y)) && !big(node.inputs.get(1).copied().flatten()) {
            return None;
        }
        let (data, u, cuts) = scattered_box(g, facts, dims, node)?;
        let shape = facts.get(data).shape_at(dims)?;
        if cuts.is_empty() {
            return Some(NewNode {
                op: "Identity",
                inputs: vec![Some(u)],
                attrs: Vec::new(),
            });
        }
        let mut b = Builder {
            add,
            base: node.name.clone(),
        };
        let (ps, axis) = b.parts(data, &shape, &cuts, u);
        Some(NewNode {
            op: "Concat",
            inputs: ps.into_iter().map(Some).collect(),
            attrs: vec![axis_attr(axis)],
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use memplan_ir::graph::{DeclDim, DeclType};
    use memplan_ir::{DataType, TensorData};

    /// The box a `ScatterND` of `data [4, 5]` writes with index tuples `tuples` (`[2, 3, 2]`,
    /// row-major) and an update `[2, 3]`.
    fn box_of(tuples: &[[i64; 2]]) -> Option<Vec<(usize, i64, i64)>> {
        let mut g = Graph::default();
        let t = |d: Vec<i64>| {
            DeclType::tensor(DataType::F32, d.into_iter().map(DeclDim::Value).collect())
        };
        let data = g.add_input("data", t(vec![4, 5]));
        let upd = g.add_input("upd", t(vec![2, 3]));
        let flat: Vec<i64> = tuples.iter().flatten().copied().collect();
        let idx = g.add_initializer(TensorData::from_i64("idx", vec![2, 3, 2], &flat));
        let ins = [Some(data), Some(idx), Some(upd)];
        let (n, y) = g.add_node("s", "ScatterND", &ins, &["y"], Vec::new());
        g.outputs = y;
        let dims = BTreeMap::new();
        let facts = memplan_ir::infer_graph(&g, 18).unwrap();
        scattered_box(&g, &facts, &dims, g.node(n)).map(|(_, _, cuts)| cuts)
    }

    #[test]
    fn a_grid_of_tuples_along_their_own_axes_is_a_box() {
        let grid = |rows: [i64; 2], cols: [i64; 3]| -> Vec<[i64; 2]> {
            rows.iter().flat_map(|&r| cols.map(|c| [r, c])).collect()
        };
        // Rows 1..3, columns 2..5 (written counted from the end).
        assert_eq!(
            box_of(&grid([1, 2], [-3, -2, -1])),
            Some(vec![(0, 1, 2), (1, 2, 3)])
        );
        assert_eq!(
            box_of(&grid([2, 3], [0, 1, 2])),
            Some(vec![(0, 2, 2), (1, 0, 3)])
        );
        // Not a box: columns two apart; rows reversed; each row's columns shifted by the row.
        assert_eq!(box_of(&grid([1, 2], [0, 2, 4])), None);
        assert_eq!(box_of(&grid([2, 1], [0, 1, 2])), None);
        let skew: Vec<[i64; 2]> = grid([0, 1], [0, 1, 2])
            .into_iter()
            .map(|[r, c]| [r, c + r])
            .collect();
        assert_eq!(box_of(&skew), None);
    }
}
