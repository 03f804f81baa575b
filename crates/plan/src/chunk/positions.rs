//! Positions as values: an op whose every output element is a function of that element of its
//! input and of the element's own row and column (`Trilu` keeps `x[.., i, j]` where `j - i >= k`,
//! or `<= k`; `EyeLike` is 1 where `j - i == k`) mixes its last two axes in the axis flow, since a
//! slice of rows is not the same op on the slice: its diagonal moves. Before chunking, such a node
//! is written with the positions as inputs of their own: the row index plus `k` as an `[R, 1]`
//! constant, the column index as `[1, C]`, compared elementwise (`GreaterOrEqual`, `LessOrEqual`,
//! `Equal`) into a `bool [R, C]` mask, and the mask applied by `Where(mask, x, 0)` (`Cast(mask)`
//! for `EyeLike`). Every node of that form passes both axes, so a region grows through it, and the
//! mask is made from inputs far smaller than it (a light value, made again per reader and sliced
//! per chunk). The same element is selected or set, so the bits are the same: `Where` returns
//! `x`'s element itself or the type's zero, which is what `Trilu` writes.
//!
//! TorchScript writes a causal mask as `Trilu` of a constant expanded to `[S, S]` (OPT, for one),
//! where torch's dynamo exporter writes comparisons of `Range`s that already chunk.

use std::collections::BTreeMap;

use bytes::Bytes;
use memplan_ir::dtype::DataType;
use memplan_ir::graph::{AttrValue, Attribute, Model, Names, Node, NodeId, ValueId};
use memplan_ir::infer::{Facts, Known};
use memplan_ir::ops::{self, Offset};
use memplan_ir::TensorData;

/// One node to write with its positions: the comparison of `column` with `row + k` and what the
/// mask becomes.
pub(super) struct Positional {
    /// `GreaterOrEqual`, `LessOrEqual` or `Equal` of `[1, C]` column indices with `[R, 1]` row
    /// indices plus `k`.
    compare: &'static str,
    rows: u64,
    cols: u64,
    /// The diagonal offset, clamped to `[-R, C]` (the same elements on either side).
    k: i64,
    /// `Some(x)`: `Where(mask, x, 0)` of input `x` (Trilu); `None`: `Cast(mask)` to the output's
    /// type (EyeLike).
    keep_from: Option<ValueId>,
    dtype: DataType,
}

/// The node's positional form at `dims`, when its op's record has one ([`ops::Positions`]) and
/// its offset and sizes are known, of a type with a zero (not strings).
pub(super) fn positional(
    node: &Node,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> Option<Positional> {
    let form = (ops::lookup(node)?.positions?)(node);
    let out = node.outputs.first().copied().flatten()?;
    let of = facts.get(out);
    let dtype = of.dtype.filter(|&d| d != DataType::String)?;
    let shape = of.shape_at(dims)?;
    let [.., rows, cols] = shape[..] else {
        return None;
    };
    if form.keeps.is_none() && shape.len() != 2 {
        return None;
    }
    let k = match form.offset {
        Offset::Input(i) => match node.inputs.get(i).copied().flatten() {
            None => 0,
            Some(kv) => match &facts.get(kv).value {
                Some(Known::Int(e)) if e.len() == 1 => e[0].eval_map(dims).ok()?,
                _ => return None,
            },
        },
        Offset::Attr(name) => match node.attr(name) {
            None => 0,
            Some(AttrValue::Int(v)) => *v,
            Some(_) => return None,
        },
    };
    let keep_from = match form.keeps {
        Some(i) => Some(node.inputs.get(i).copied().flatten()?),
        None => None,
    };
    Some(Positional {
        compare: form.compare.onnx_op(),
        rows,
        cols,
        k: k.clamp(-(rows as i64), cols as i64),
        keep_from,
        dtype,
    })
}

/// `model` with every node of at least `min_bytes` output that [`positional`] takes written in
/// its positional form, or `None` when there is none. The node list must be in topological order;
/// it stays so, and each rewritten node keeps its name and output value.
pub(crate) fn positions_as_values(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    min_bytes: u64,
) -> Option<Model> {
    let g = &model.graph;
    let big = |n: &Node| {
        n.outputs.first().copied().flatten().is_some_and(|v| {
            facts
                .get(v)
                .bytes()
                .and_then(|b| b.eval_map(dims).ok())
                .is_some_and(|b| b >= min_bytes as i64)
        })
    };
    let found: Vec<(usize, Positional)> = g
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| big(n))
        .filter_map(|(i, n)| positional(n, facts, dims).map(|p| (i, p)))
        .collect();
    if found.is_empty() {
        return None;
    }
    let mut out = g.clone();
    let mut names = Names::of(g);
    // The comparison of each rewritten node, to go right before it.
    let mut before: BTreeMap<usize, NodeId> = BTreeMap::new();
    for (i, p) in found {
        let base = out.nodes[i].name.clone();
        let rows: Vec<i64> = (0..p.rows as i64).map(|r| r + p.k).collect();
        let cols: Vec<i64> = (0..p.cols as i64).collect();
        let row_k = out.add_initializer(TensorData::from_i64(
            names.fresh(&format!("{base}/rows_plus_k")),
            vec![p.rows, 1],
            &rows,
        ));
        let col = out.add_initializer(TensorData::from_i64(
            names.fresh(&format!("{base}/columns")),
            vec![1, p.cols],
            &cols,
        ));
        let (compare, mask) = out.add_node(
            names.fresh(&format!("{base}/positions")),
            p.compare,
            &[Some(col), Some(row_k)],
            &[&names.fresh(&format!("{base}/mask"))],
            Vec::new(),
        );
        before.insert(i, compare);
        let (op, attrs, inputs) = match p.keep_from {
            Some(x) => {
                let zero = TensorData::from_raw(
                    names.fresh(&format!("{base}/zero")),
                    p.dtype,
                    Vec::new(),
                    Bytes::from(vec![0u8; p.dtype.bytes_for(1) as usize]),
                )
                .ok()?;
                let z = out.add_initializer(zero);
                ("Where", Vec::new(), vec![Some(mask[0]), Some(x), Some(z)])
            }
            None => {
                let to = Attribute {
                    name: "to".into(),
                    value: AttrValue::Int(p.dtype.onnx_code() as i64),
                    doc: String::new(),
                };
                ("Cast", vec![to], vec![Some(mask[0])])
            }
        };
        let node = &mut out.nodes[i];
        node.op = op.into();
        node.attrs = attrs;
        node.inputs = inputs;
    }
    let schedule: Vec<NodeId> = (0..g.nodes.len())
        .flat_map(|i| {
            before
                .get(&i)
                .copied()
                .into_iter()
                .chain([NodeId::from_index(i)])
        })
        .collect();
    Some(Model {
        graph: crate::reorder(&out, &schedule),
        ..model.clone()
    })
}
