//! Heads as an axis of the product that makes them. Attention splits a projection's columns into
//! heads with a reshape, `q = (x @ W + b).view(..., S, H, D)`: heads are the outer part of the
//! reshape's group, and no axis of the product `[..., S, H*D]` is the heads axis, so no region
//! splits heads at the product (a chunk of heads is a range of columns `H*D / H` times as wide).
//! Regions began after the reshape, with every projection held whole.
//!
//! The product is the batched product over the weight's heads it is: `W` `[E, H*D]` stored as
//! `W'` `[H, E, D]` (`W'[h, e, d] = W[e, h*D + d]`), `x` unsqueezed before its rows, and
//! `[..., 1, S, E] @ [H, E, D]` is `[..., H, S, D]`; heads and rows swapped back by a `Transpose`
//! give the reshape's output. Each element is the same dot product of the same elements, and the
//! executor's product computes an element the same way whatever columns it is asked for, so the
//! bits are the same. Elementwise ops with a constant between the product and the reshape (a
//! bias, a scale) move with it, a constant along the columns split as `[H, 1, D]`.
//!
//! The swap back meets the model's own move of heads before rows (`.transpose(1, 2)`): two
//! transposes in a row are one ([`transposes_composed`]), none where they undo each other.

use std::collections::BTreeMap;

use memplan_ir::graph::{AttrValue, Graph, Model, Node, ValueId};
use memplan_ir::infer::Facts;
use memplan_ir::ops::movement::transpose_perm;
use memplan_ir::TensorData;

use super::positions::constant_tensor;
use super::rewrite::{attr, drop_unread_initializers, holds_at_least, read_counts};
use super::rewrite::{rewrite_nodes, Adder, NewNode};

/// Elementwise ops with a constant that move with the product.
const ELEMENTWISE: [&str; 4] = ["Add", "Sub", "Mul", "Div"];

/// The data of constant `v` (a weight, a `Constant` node's output), also through `Identity` nodes
/// (TorchScript names a weight it shares by an `Identity` of it).
fn constant_data(g: &Graph, mut v: ValueId) -> Option<&TensorData> {
    loop {
        if let Some((t, _)) = constant_tensor(g, v) {
            return Some(t);
        }
        let n = g.node(g.producer(v)?);
        if n.op != "Identity" || !n.is_onnx_domain() {
            return None;
        }
        v = n.inputs.first().copied().flatten()?;
    }
}

/// The data of a weight `v`: a constant ([`constant_data`]), or the `Transpose` of a 2-D one
/// (dynamo writes `x @ W.T` so, the transpose computed each run), then `true`.
fn weight_data(g: &Graph, v: ValueId) -> Option<(&TensorData, bool)> {
    if let Some(t) = constant_data(g, v) {
        return Some((t, false));
    }
    let n = g.node(g.producer(v)?);
    let t = constant_data(g, n.inputs.first().copied().flatten()?)?;
    let swaps = t.dims.len() == 2 && transpose_perm(n, 2) == [1, 0];
    (n.op == "Transpose" && n.is_onnx_domain() && swaps).then_some((t, true))
}

/// An elementwise op between the product and the reshape: the node, whether the chain is its first
/// input, and its constant.
struct Step<'a> {
    node: &'a Node,
    chain_first: bool,
    constant: ValueId,
    tensor: &'a TensorData,
}

/// A product whose columns a reshape splits into heads.
struct Projection<'a> {
    /// The product's left operand, `[..., S, E]`.
    x: ValueId,
    /// Its weight, `[E, H*D]`: this data, or its transpose where `transposed`.
    weight: &'a TensorData,
    transposed: bool,
    /// The elementwise ops from the product to the reshape, in order.
    steps: Vec<Step<'a>>,
    /// The rank of the product.
    rank: usize,
    heads: u64,
    width: u64,
}

/// The projection the reshape `node` splits into heads: its input `[..., S, H*D]` is made by a
/// product with a constant `[E, H*D]` weight, through elementwise ops with constants that are
/// scalars or run along the columns, each value read once; its output is `[..., S, H, D]`, `H`
/// above one.
fn projection<'a>(
    g: &'a Graph,
    node: &Node,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    reads: &[usize],
) -> Option<Projection<'a>> {
    if node.op != "Reshape" || !node.is_onnx_domain() {
        return None;
    }
    let x = node.inputs.first().copied().flatten()?;
    let y = node.outputs.first().copied().flatten()?;
    let (xs, ys) = (facts.get(x).shape_at(dims)?, facts.get(y).shape_at(dims)?);
    let r = xs.len();
    if r < 2 || ys.len() != r + 1 || xs[..r - 1] != ys[..r - 1] {
        return None;
    }
    let (heads, width, cols) = (ys[r - 1], ys[r], xs[r - 1]);
    if heads < 2 || heads.checked_mul(width)? != cols {
        return None;
    }
    let mut steps = Vec::new();
    let mut v = x;
    loop {
        // Read once (a graph output counts as a read).
        if reads[v.index()] != 1 {
            return None;
        }
        let p = g.node(g.producer(v)?);
        let ins = p.inputs.iter().copied().collect::<Option<Vec<ValueId>>>()?;
        if !p.is_onnx_domain() || ins.len() != 2 || p.outputs.len() != 1 {
            return None;
        }
        if p.op == "MatMul" {
            let (w, transposed) = weight_data(g, ins[1])?;
            let a = facts.get(ins[0]).shape_at(dims)?;
            let whole_bytes = w.dtype.bits() % 8 == 0 && w.raw().is_some();
            let out_cols = w.dims.get(usize::from(!transposed)).copied();
            if w.dims.len() != 2 || out_cols != Some(cols) || a.len() != r || !whole_bytes {
                return None;
            }
            steps.reverse();
            return Some(Projection {
                x: ins[0],
                weight: w,
                transposed,
                steps,
                rank: r,
                heads,
                width,
            });
        }
        if !ELEMENTWISE.contains(&p.op.as_str()) || steps.len() >= 8 {
            return None;
        }
        let (chain_first, constant) = match constant_data(g, ins[1]) {
            Some(_) => (true, ins[1]),
            None => (false, ins[0]),
        };
        let tensor = constant_data(g, constant)?;
        let chain = if chain_first { ins[0] } else { ins[1] };
        let last = tensor.dims.last().copied().unwrap_or(1);
        let ones = tensor.dims.iter().rev().skip(1).all(|&d| d == 1);
        let same = facts.get(chain).shape_at(dims)? == xs;
        if !same || !ones || tensor.dims.len() > r || (last != 1 && last != cols) {
            return None;
        }
        steps.push(Step {
            node: p,
            chain_first,
            constant,
            tensor,
        });
        v = chain;
    }
}

/// The weight `t` (`[rows, heads * width]`, or its transpose where `transposed`) as
/// `[heads, rows, width]`, its element `[h, e, d]` the weight's element `[e, h * width + d]`,
/// named `name`.
fn per_head(
    t: &TensorData,
    transposed: bool,
    heads: u64,
    width: u64,
    name: String,
) -> Option<TensorData> {
    let size = (t.dtype.bits() / 8) as usize;
    let raw = t.raw()?;
    let (h, w) = (heads as usize, width as usize);
    let rows = if transposed { t.dims[1] } else { t.dims[0] };
    // Where the weight's element `[e, c]` is in `raw`.
    let at = |e: usize, c: usize| {
        if transposed {
            c * rows as usize + e
        } else {
            e * h * w + c
        }
    };
    let mut out = Vec::with_capacity(raw.len());
    for head in 0..h {
        for e in 0..rows as usize {
            for d in 0..w {
                let i = at(e, head * w + d) * size;
                out.extend_from_slice(&raw[i..i + size]);
            }
        }
    }
    TensorData::from_raw(name, t.dtype, vec![heads, rows, width], out.into()).ok()
}

/// A perm attribute.
fn perm_attr(perm: Vec<i64>) -> memplan_ir::graph::Attribute {
    attr("perm", AttrValue::Ints(perm))
}

/// The nodes that compute `p` with heads as an axis of its product, added through `add` (named
/// from `base`); the value they end with, `[..., H, S, D]`. `None` (having added nothing) when a
/// constant cannot be split.
fn per_head_product(p: &Projection, base: &str, opset: i64, add: &mut Adder) -> Option<ValueId> {
    let (r, heads, width) = (p.rank, p.heads, p.width);
    let name = add.names.fresh(&format!("{base}/weight"));
    let weight = per_head(p.weight, p.transposed, heads, width, name)?;
    // Constants along the columns, as `[H, 1, D]`: their bytes in the same order.
    let mut constants = Vec::with_capacity(p.steps.len());
    for s in &p.steps {
        if s.tensor.dims.last().is_some_and(|&d| d != 1) {
            let name = add.names.fresh(&format!("{base}/constant"));
            let raw = s.tensor.raw()?.clone();
            let t = TensorData::from_raw(name, s.tensor.dtype, vec![heads, 1, width], raw).ok()?;
            constants.push(Some(t));
        } else {
            constants.push(None);
        }
    }
    let weight = add.out.add_initializer(weight);
    let axis = (r - 2) as i64;
    let unsqueezed = if opset >= 13 {
        let axes = add.ints(&format!("{base}/axes"), vec![1], &[axis]);
        add.node(base, "Unsqueeze", &[Some(p.x), Some(axes)], Vec::new())
    } else {
        let axes = vec![attr("axes", AttrValue::Ints(vec![axis]))];
        add.node(base, "Unsqueeze", &[Some(p.x)], axes)
    };
    let mut cur = add.node(
        base,
        "MatMul",
        &[Some(unsqueezed), Some(weight)],
        Vec::new(),
    );
    for (s, c) in p.steps.iter().zip(constants) {
        let c = c.map_or(s.constant, |t| add.out.add_initializer(t));
        let ins = if s.chain_first { [cur, c] } else { [c, cur] };
        let ins = ins.map(Some);
        cur = add.node(&s.node.name, &s.node.op, &ins, s.node.attrs.clone());
    }
    Some(cur)
}

/// `model` with every reshape of at least `min_bytes` that splits a product's columns into heads
/// ([`projection`]) made from the batched product over heads, heads and rows swapped back (see the
/// module's comment); the weights only the old products read are dropped. `None` when there is
/// none.
pub(crate) fn heads_as_axes(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    min_bytes: u64,
) -> Option<Model> {
    let g = &model.graph;
    let reads = read_counts(g);
    let opset = model.onnx_opset().unwrap_or(13);
    let m = rewrite_nodes(model, |node, add| {
        let y = node.outputs.first().copied().flatten()?;
        if !holds_at_least(facts, dims, y, min_bytes) {
            return None;
        }
        let p = projection(g, node, facts, dims, &reads)?;
        let base = format!("{}/heads", node.name);
        let made = per_head_product(&p, &base, opset, add)?;
        let r = p.rank as i64;
        let mut perm: Vec<i64> = (0..=r).collect();
        perm.swap((r - 2) as usize, (r - 1) as usize);
        Some(NewNode {
            op: "Transpose",
            inputs: vec![Some(made)],
            attrs: vec![perm_attr(perm)],
        })
    })?;
    Some(Model {
        graph: drop_unread_initializers(m.graph, g),
        ..m
    })
}

/// `model` with every `Transpose` of at least `min_bytes` whose input is a `Transpose`'s output
/// read by it alone written as the one transpose of the first's input they make together, or as
/// `Identity` where they undo each other. Only elements move, so the bits are the same. `None`
/// when there is none.
pub(crate) fn transposes_composed(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    min_bytes: u64,
) -> Option<Model> {
    let g = &model.graph;
    let reads = read_counts(g);
    rewrite_nodes(model, |node, _| {
        let y = node.outputs.first().copied().flatten()?;
        if node.op != "Transpose" || !node.is_onnx_domain() {
            return None;
        }
        if !holds_at_least(facts, dims, y, min_bytes) {
            return None;
        }
        let u = node.inputs.first().copied().flatten()?;
        let first = g.node(g.producer(u)?);
        if first.op != "Transpose" || !first.is_onnx_domain() {
            return None;
        }
        if reads[u.index()] != 1 {
            return None;
        }
        let a = first.inputs.first().copied().flatten()?;
        let rank = facts.get(u).rank()?;
        let perm_of = |n: &Node| -> Option<Vec<usize>> {
            let p = transpose_perm(n, rank);
            p.iter()
                .map(|&a| usize::try_from(a).ok().filter(|&a| a < rank))
                .collect()
        };
        let (p1, p2) = (perm_of(first)?, perm_of(node)?);
        if p1.len() != rank || p2.len() != rank {
            return None;
        }
        // Output axis `i` is `u`'s axis `p2[i]`, which is `a`'s axis `p1[p2[i]]`.
        let perm: Vec<usize> = p2.iter().map(|&i| p1[i]).collect();
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Some(NewNode {
                op: "Identity",
                inputs: vec![Some(a)],
                attrs: Vec::new(),
            });
        }
        Some(NewNode {
            op: "Transpose",
            inputs: vec![Some(a)],
            attrs: vec![perm_attr(perm.iter().map(|&i| i as i64).collect())],
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::rewrite::test_node;
    use memplan_ir::graph::{DeclDim, DeclType};
    use memplan_ir::DataType;

    /// `x` `[1, 3, 4]` times a weight `[4, 4]` (`transposed`: the `Transpose` of one, as dynamo
    /// writes it), plus a bias named through an `Identity`, times a scalar, reshaped into 2 heads
    /// of 2 and moved heads before rows.
    fn attention_input(transposed: bool) -> Model {
        let mut g = Graph::default();
        let dims = [1, 3, 4].iter().map(|&d| DeclDim::Value(d)).collect();
        let x = g.add_input("x", DeclType::tensor(DataType::F32, dims));
        let w: Vec<f32> = (0..16).map(|i| i as f32).collect();
        let w = g.add_initializer(TensorData::from_f32("w", vec![4, 4], &w));
        let w = if transposed {
            let perm = vec![attr("perm", AttrValue::Ints(vec![1, 0]))];
            g.add_node("wt", "Transpose", &[Some(w)], &["wt"], perm).1[0]
        } else {
            w
        };
        let b = g.add_initializer(TensorData::from_f32("b", vec![4], &[0.5, 1.5, 2.5, 3.5]));
        let b = g.add_node("bi", "Identity", &[Some(b)], &["bi"], vec![]).1[0];
        let s = g.add_initializer(TensorData::from_f32("s", vec![], &[0.25]));
        let to = g.add_initializer(TensorData::from_i64("to", vec![4], &[1, 3, 2, 2]));
        let mut node = |op: &str, ins: &[ValueId], perm| test_node(&mut g, op, ins, perm);
        let p = node("MatMul", &[x, w], None);
        let p = node("Add", &[b, p], None);
        let p = node("Mul", &[p, s], None);
        let p = node("Reshape", &[p, to], None);
        let y = node("Transpose", &[p], Some(vec![0, 2, 1, 3]));
        g.outputs = vec![y];
        Model {
            graph: g,
            ..Model::default()
        }
    }

    /// The model rewritten with heads as an axis and its transposes composed, checked to keep
    /// its output's shape.
    fn rewritten(model: &Model) -> Option<Model> {
        let dims = BTreeMap::new();
        let facts = memplan_ir::infer_model_for(model, &dims).unwrap();
        let m = heads_as_axes(model, &facts, &dims, 0)?;
        let f2 = memplan_ir::infer_model_for(&m, &dims).unwrap();
        let m = transposes_composed(&m, &f2, &dims, 0).unwrap_or(m);
        let f3 = memplan_ir::infer_model_for(&m, &dims).unwrap();
        assert_eq!(
            f3.get(m.graph.outputs[0]).shape_at(&dims),
            facts.get(model.graph.outputs[0]).shape_at(&dims)
        );
        Some(m)
    }

    fn initializer<'a>(m: &'a Model, dims: &[u64]) -> &'a TensorData {
        m.graph
            .initializers
            .iter()
            .map(|&v| match &m.graph.value(v).kind {
                memplan_ir::graph::ValueKind::Initializer(t) => t,
                _ => unreachable!(),
            })
            .find(|t| t.dims == dims)
            .unwrap()
    }

    /// The product over heads reads the weight `[H, E, D]` and the bias `[H, 1, D]`; the swap back
    /// and the model's own transpose undo each other; the old weight and bias are gone.
    #[test]
    fn a_projection_split_into_heads_is_a_product_over_heads() {
        for transposed in [false, true] {
            let m = rewritten(&attention_input(transposed)).unwrap();
            let ops: Vec<&str> = m.graph.nodes.iter().map(|n| n.op.as_str()).collect();
            assert_eq!(ops, ["Unsqueeze", "MatMul", "Add", "Mul", "Identity"]);
            let w = initializer(&m, &[2, 4, 2]).to_f64_vec().unwrap();
            // W'[h, e, d] = W[e, 2h + d] (of the matrix the product reads: W, or W's transpose).
            for (h, e, d) in [(0, 0, 0), (0, 3, 1), (1, 0, 0), (1, 2, 1)] {
                let (r, c) = (e, 2 * h + d);
                let want = if transposed { c * 4 + r } else { r * 4 + c };
                assert_eq!(w[h * 8 + e * 2 + d], want as f64, "[{h}, {e}, {d}]");
            }
            let b = initializer(&m, &[2, 1, 2]).to_f64_vec().unwrap();
            assert_eq!(b, [0.5, 1.5, 2.5, 3.5]);
            assert!(m.graph.initializers.iter().all(|&v| {
                let n = &m.graph.value(v).name;
                n != "w" && n != "b"
            }));
        }
    }

    /// A reshape that does not split the product's columns alone is left (one that moves its rows
    /// too), and so is a product whose weight is not a constant matrix (an input, a vector).
    #[test]
    fn other_reshapes_of_a_product_are_left() {
        let mut m = attention_input(false);
        let to = *m
            .graph
            .initializers
            .iter()
            .find(|&&v| m.graph.value(v).name == "to")
            .unwrap();
        if let memplan_ir::graph::ValueKind::Initializer(t) = &mut m.graph.values[to.index()].kind {
            *t = TensorData::from_i64("to", vec![4], &[3, 1, 2, 2]);
        }
        assert!(rewritten(&m).is_none());
        let mut m = attention_input(false);
        let dims = vec![DeclDim::Value(4), DeclDim::Value(4)];
        let w = m
            .graph
            .add_input("wi", DeclType::tensor(DataType::F32, dims));
        let product = m.graph.nodes.iter_mut().find(|n| n.op == "MatMul").unwrap();
        product.inputs[1] = Some(w);
        assert!(rewritten(&m).is_none());
        // A product with a vector, `[1, 3, 4] @ [4]`, its `[1, 3]` reshaped to `[1, 3, 1]`.
        let mut g = Graph::default();
        let dims = [1, 3, 4].iter().map(|&d| DeclDim::Value(d)).collect();
        let x = g.add_input("x", DeclType::tensor(DataType::F32, dims));
        let v = g.add_initializer(TensorData::from_f32("v", vec![4], &[1.0; 4]));
        let to = g.add_initializer(TensorData::from_i64("to", vec![3], &[1, 3, 1]));
        let p = test_node(&mut g, "MatMul", &[x, v], None);
        let y = test_node(&mut g, "Reshape", &[p, to], None);
        g.outputs = vec![y];
        let m = Model {
            graph: g,
            ..Model::default()
        };
        assert!(rewritten(&m).is_none());
    }

    /// Two transposes in a row are the one they make together.
    #[test]
    fn transposes_in_a_row_compose() {
        let mut g = Graph::default();
        let dims = [2, 3, 4].iter().map(|&d| DeclDim::Value(d)).collect();
        let x = g.add_input("x", DeclType::tensor(DataType::F32, dims));
        let a = vec![attr("perm", AttrValue::Ints(vec![1, 0, 2]))];
        let u = g.add_node("a", "Transpose", &[Some(x)], &["u"], a).1[0];
        let b = vec![attr("perm", AttrValue::Ints(vec![2, 0, 1]))];
        let y = g.add_node("b", "Transpose", &[Some(u)], &["y"], b).1[0];
        g.outputs = vec![y];
        let model = Model {
            graph: g,
            ..Model::default()
        };
        let dims = BTreeMap::new();
        let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
        let m = transposes_composed(&model, &facts, &dims, 0).unwrap();
        assert_eq!(m.graph.nodes.len(), 1);
        // y[i, j, k] = u[j, k, i] = x[k, j, i]: axes (2, 1, 0) of x.
        let perm = memplan_ir::ops::axes::attr_ints(&m.graph.nodes[0], "perm");
        assert_eq!(perm, Some(vec![2, 1, 0]));
        let f2 = memplan_ir::infer_model_for(&m, &dims).unwrap();
        let shape = |f: &Facts, m: &Model| f.get(m.graph.outputs[0]).shape_at(&dims);
        assert_eq!(shape(&f2, &m), shape(&facts, &model));
    }
}
