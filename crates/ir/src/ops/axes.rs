//! Axis flow: for each output axis of a node, whether the output can be computed slice by slice along
//! it, and which axis of each input the slice comes from. The basis of chunking: a region of nodes
//! can run in independent slices along an axis when every node in it passes that axis through.
//!
//! The rules follow the ops' definitions, not their kernels: an axis is `Split` only when every output
//! element along it depends on the inputs at the same position of the mapped input axes (or on inputs
//! read whole), never on other positions along it. Softmax's axis, reduced axes, contraction axes,
//! concatenation and slicing axes are `Mixed`.
//!
//! Each op's flow is a [`FlowFn`] named in its [`OpDef`](super::OpDef), written in its family file;
//! this module holds [`axis_flow`] (the entry point) and the helpers several families share
//! (broadcasting, reshapes, einsum).

use crate::dim::Expr;
use crate::graph::{AttrValue, Node};
use crate::infer::Fact;

/// How one output axis relates to the inputs when the output is computed in slices along it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AxisFlow {
    /// Slices along this axis are independent: input `i` is sliced along axis `Some(a)` (same extent
    /// as the output axis) or read whole (`None`: it does not vary along this axis).
    Split(Vec<Option<usize>>),
    /// Part of the output along this axis needs more than the matching part of the inputs.
    Mixed,
}

/// An op's axis flow: for each output slot, for each output axis, how it relates to the inputs;
/// `None` when the facts are incomplete. Called only when output 0's rank is known.
pub type FlowFn = fn(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>>;

/// Integer attribute `name`, or `default`.
pub fn attr_int(node: &Node, name: &str, default: i64) -> i64 {
    match node.attr(name) {
        Some(AttrValue::Int(v)) => *v,
        _ => default,
    }
}

/// Integer-list attribute `name`.
pub fn attr_ints(node: &Node, name: &str) -> Option<Vec<i64>> {
    match node.attr(name) {
        Some(AttrValue::Ints(v)) => Some(v.clone()),
        _ => None,
    }
}

/// A possibly negative axis normalized for `rank`, `None` when out of range.
pub fn norm(axis: i64, rank: usize) -> Option<usize> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    (0..rank as i64).contains(&a).then_some(a as usize)
}

/// The rank of output `k`, when known.
pub fn out_rank(outputs: &[Option<&Fact>], k: usize) -> Option<usize> {
    outputs.get(k).copied().flatten().and_then(|f| f.rank())
}

/// The shape of output `k`, when known.
pub fn out_shape<'a>(outputs: &[Option<&'a Fact>], k: usize) -> Option<&'a [Expr]> {
    in_shape(outputs, k)
}

/// The shape of input `k`, when known.
pub fn in_shape<'a>(inputs: &[Option<&'a Fact>], k: usize) -> Option<&'a [Expr]> {
    inputs
        .get(k)
        .copied()
        .flatten()
        .and_then(|f| f.shape.as_deref())
}

/// Numpy broadcasting: output axis `o` of rank `rank` maps to each input's aligned axis unless the
/// input is missing that axis or has extent 1 there (then it is read whole).
pub fn broadcast_flow(inputs: &[Option<&Fact>], rank: usize, mixed: &[usize]) -> Vec<AxisFlow> {
    (0..rank)
        .map(|o| {
            if mixed.contains(&o) {
                return AxisFlow::Mixed;
            }
            AxisFlow::Split(
                inputs
                    .iter()
                    .map(|f| {
                        let s = f.and_then(|f| f.shape.as_ref())?;
                        let off = rank.checked_sub(s.len())?;
                        let a = o.checked_sub(off)?;
                        (s[a] != Expr::one()).then_some(a)
                    })
                    .collect(),
            )
        })
        .collect()
}

/// An output axis sliced along axis `a` of input 0, the other inputs (of `n_inputs`) read whole.
pub fn from_first(n_inputs: usize, a: usize) -> AxisFlow {
    let mut v = vec![None; n_inputs.max(1)];
    v[0] = Some(a);
    AxisFlow::Split(v)
}

/// Each output axis `o` is axis `o` of input 0, except the `mixed` ones; other inputs are read whole.
pub fn pass_through(n_inputs: usize, rank: usize, mixed: &[usize]) -> Vec<AxisFlow> {
    (0..rank)
        .map(|o| {
            if mixed.contains(&o) {
                AxisFlow::Mixed
            } else {
                from_first(n_inputs, o)
            }
        })
        .collect()
}

/// `n` outputs of input 0's rank that pass its axes but the `mixed(rank)` ones (`None`: no flow),
/// the other inputs read whole.
pub fn passing(
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
    n: usize,
    mixed: impl FnOnce(usize) -> Option<Vec<usize>>,
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = out_rank(outputs, 0)?;
    if in_shape(inputs, 0)?.len() != r0 {
        return None;
    }
    Some(vec![pass_through(inputs.len(), r0, &mixed(r0)?); n])
}

/// Flow of ops that compute along the one axis their `axis` attribute names (default -1: TopK,
/// LpNormalization): that axis is mixed, the others pass through input 0 (of `n_inputs`, the
/// others read whole).
pub fn along_axis(node: &Node, n_inputs: usize, rank: usize) -> Option<Vec<AxisFlow>> {
    let axis = norm(attr_int(node, "axis", -1), rank)?;
    Some(pass_through(n_inputs, rank, &[axis]))
}

/// Flow of ops that broadcast all their inputs together (binary and variadic elementwise ops).
pub fn broadcast(
    _node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    Some(vec![broadcast_flow(inputs, out_rank(outputs, 0)?, &[])])
}

/// Flow of ops whose output follows input 0 (broadcast to the output, as in `Expand`); other inputs
/// (Clip's bounds, Expand's target shape) are read whole.
pub fn first_input(
    _node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let mut f = broadcast_flow(&inputs[..1], out_rank(outputs, 0)?, &[]);
    for x in &mut f {
        if let AxisFlow::Split(v) = x {
            v.resize(inputs.len(), None);
        }
    }
    Some(vec![f])
}

/// Flow of ops that make their output from its shape alone (`ConstantOfShape`): every output axis
/// splits with the inputs read whole; a chunk's clone reads a shape of its own
/// ([`OpDef::shape_input`](super::OpDef::shape_input)).
pub fn generated(
    _node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let rank = out_rank(outputs, 0)?;
    Some(vec![vec![AxisFlow::Split(vec![None; inputs.len()]); rank]])
}

/// Flow of reshape-like ops (Reshape, Flatten, Squeeze, Unsqueeze): see [`reshape_flow`].
pub fn reshape(
    _node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let a = in_shape(inputs, 0)?;
    let b = outputs.first().copied().flatten()?.shape.as_deref()?;
    let mut flows = reshape_flow(a, b);
    for f in &mut flows {
        if let AxisFlow::Split(v) = f {
            v.resize(inputs.len(), None);
        }
    }
    Some(vec![flows])
}

/// Flow of `Einsum`: see [`einsum_flow`].
pub fn einsum(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    Some(vec![einsum_flow(node, inputs, out_rank(outputs, 0)?)?])
}

/// The axis flow of each output of `node` (indexed `[output slot][output axis]`), or `None` when the
/// op has no flow in its [`OpDef`](super::OpDef) or the facts are incomplete (then nothing may be
/// split through it).
pub fn axis_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let f = super::lookup(node)?.flow?;
    out_rank(outputs, 0)?;
    f(node, inputs, outputs)
}

/// Whether a `Concat` node's output can be assembled in place: each input written straight into
/// its part of the output buffer, so the node itself copies nothing. True when every output dim
/// before the axis is 1 (each input is then one contiguous run of the output, input `i` at byte
/// offset `sum of the sizes of inputs 0..i`), there are at least two inputs, all present, and every
/// shape is known.
pub fn concat_in_place(node: &Node, inputs: &[Option<&Fact>], outputs: &[Option<&Fact>]) -> bool {
    if !node.is_onnx_domain() || node.op != "Concat" || inputs.len() < 2 {
        return false;
    }
    let Some(out) = out_shape(outputs, 0) else {
        return false;
    };
    let Some(axis) = norm(attr_int(node, "axis", 0), out.len()) else {
        return false;
    };
    inputs
        .iter()
        .all(|f| f.is_some_and(|f| f.rank() == Some(out.len())))
        && out[..axis].iter().all(|d| d.as_const() == Some(1))
}

/// Reshape-like ops: output axis `o` maps to input axis `a` when everything before them has the same
/// element count and the extents agree, so a slice along `o` is a slice along `a`.
pub fn reshape_flow(a: &[Expr], b: &[Expr]) -> Vec<AxisFlow> {
    let prefix = |s: &[Expr], k: usize| Expr::product(s[..k].iter());
    (0..b.len())
        .map(|o| {
            let before = prefix(b, o);
            (0..a.len())
                .find(|&k| a[k] == b[o] && prefix(a, k) == before && b[o] != Expr::one())
                .map_or(AxisFlow::Mixed, |k| AxisFlow::Split(vec![Some(k)]))
        })
        .collect()
}

/// Reshape-like ops where an axis's extent changes by a whole factor (`[S, 64, 9] -> [2S, 32, 9]`,
/// `[S, 2, 32] -> [2S, 32]`): output axis `o` maps to input axis `a` when everything before them
/// has the same element count and one extent is a whole multiple `k` of the other, both known.
/// Elements keep their row-major order, so under each prefix, row `r` of the smaller axis (with
/// everything inside it) is rows `[r * k, (r + 1) * k)` of the larger: a slice along one is a
/// slice along the other, scaled by `k`. Axes of equal extents map as in [`reshape_flow`]; an axis
/// neither maps is `None`.
pub fn reshape_scaled_flow(a: &[Expr], b: &[Expr]) -> Vec<Option<usize>> {
    let product = |s: &[Expr]| Expr::product(s.iter());
    let whole = |x: &Expr, y: &Expr| match (x.as_const(), y.as_const()) {
        (Some(x), Some(y)) if x > 1 && y > 1 => x % y == 0 || y % x == 0,
        _ => x == y && *x != Expr::one(),
    };
    (0..b.len())
        .map(|o| {
            let before = product(&b[..o]);
            (0..a.len()).find(|&k| whole(&a[k], &b[o]) && product(&a[..k]) == before)
        })
        .collect()
}

/// The flow of an op that keeps its elements in order ([`Moves::Order`](super::Moves::Order):
/// reshapes) with the scaled axes of [`reshape_scaled_flow`] split too: output axis `o` split
/// from input 0's axis `a` whose extent may differ by a whole factor. `None` for other ops, or
/// when the facts are incomplete. Only a chunker that scales each value's slices by its extent
/// may read it (`axis_flow` keeps extents equal).
pub fn scaled_axis_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    (super::lookup(node)?.moves? == super::Moves::Order).then_some(())?;
    let a = in_shape(inputs, 0)?;
    let b = out_shape(outputs, 0)?;
    let flows = reshape_scaled_flow(a, b)
        .into_iter()
        .map(|k| k.map_or(AxisFlow::Mixed, |k| from_first(inputs.len(), k)))
        .collect();
    Some(vec![flows])
}

/// Einsum: an output label maps to the axis with that label in each operand that has it; `...`
/// dims align from the right as in broadcasting. Operands that repeat a label (diagonals) and
/// equations without `->` are not handled.
pub fn einsum_flow(node: &Node, inputs: &[Option<&Fact>], rank: usize) -> Option<Vec<AxisFlow>> {
    let eq = match node.attr("equation") {
        Some(AttrValue::String(s)) => String::from_utf8_lossy(s).replace(' ', ""),
        _ => return None,
    };
    let (lhs, out) = eq.split_once("->")?;
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != inputs.len() {
        return None;
    }
    // Expand `...` into private labels: the output's ellipsis has `rank - named` dims; an operand's
    // ellipsis takes the last of those labels, as broadcasting aligns them.
    let ell = |named: usize, r: usize| r.checked_sub(named);
    let out_named = out.replace("...", "").chars().count();
    let e_out = if out.contains("...") {
        ell(out_named, rank)?
    } else {
        0
    };
    let private = |j: usize| char::from_u32(0x100 + j as u32).unwrap_or('?');
    let expand = |t: &str, e: usize| -> String {
        let labels: String = (e_out - e..e_out).map(private).collect();
        t.replace("...", &labels)
    };
    let out = expand(out, e_out);
    let mut expanded = Vec::with_capacity(terms.len());
    for (t, f) in terms.iter().zip(inputs) {
        let r = f.and_then(|f| f.rank())?;
        let named = t.replace("...", "").chars().count();
        let e = if t.contains("...") { ell(named, r)? } else { 0 };
        if e > e_out {
            return None;
        }
        expanded.push(expand(t, e));
    }
    if out.chars().count() != rank {
        return None;
    }
    for t in &expanded {
        let mut seen: Vec<char> = t.chars().collect();
        seen.sort();
        seen.dedup();
        if seen.len() != t.chars().count() {
            return None;
        }
    }
    Some(
        out.chars()
            .map(|l| {
                AxisFlow::Split(
                    expanded
                        .iter()
                        .zip(inputs)
                        .map(|(t, f)| {
                            let k = t.chars().position(|c| c == l)?;
                            let s = f.and_then(|f| f.shape.as_ref())?;
                            (s.get(k)? != &Expr::one()).then_some(k)
                        })
                        .collect(),
                )
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Attribute;
    use crate::ops::tests::{attr, TestGraph};
    use crate::DataType;

    fn flow_of(t: &TestGraph, f: &crate::Facts, node: usize) -> Vec<Vec<AxisFlow>> {
        let n = &t.g.nodes[node];
        let (ins, outs) = f.node_io(n);
        axis_flow(n, &ins, &outs).unwrap()
    }

    fn s(v: &[Option<usize>]) -> AxisFlow {
        AxisFlow::Split(v.to_vec())
    }

    #[test]
    fn a_reshape_scales_an_axis_whose_extent_changes_by_a_whole_factor() {
        let c = |v: &[i64]| -> Vec<Expr> { v.iter().map(|&x| Expr::from(x)).collect() };
        // ConvBERT: [1, S, 64, 9] -> [2S, 32, 9]: S rows are pairs of output rows.
        let (a, b) = (c(&[1, 6, 64, 9]), c(&[12, 32, 9]));
        assert_eq!(reshape_scaled_flow(&a, &b), [Some(1), None, Some(3)]);
        assert_eq!(reshape_scaled_flow(&b, &a), [None, Some(0), None, Some(2)]);
        // Equal extents map as `reshape_flow` maps them; an axis with a different prefix does not.
        let (a, b) = (c(&[4, 6, 8]), c(&[4, 48]));
        assert_eq!(reshape_scaled_flow(&a, &b), [Some(0), Some(1)]);
        let (a, b) = (c(&[6, 4]), c(&[4, 6]));
        assert_eq!(reshape_scaled_flow(&a, &b), [None, None]);
        // A symbolic extent maps only to itself.
        let n = Expr::sym("N");
        let (a, b) = (
            vec![n.clone(), Expr::from(2)],
            vec![n.clone() * Expr::from(2)],
        );
        assert_eq!(reshape_scaled_flow(&a, &b), [None]);
        assert_eq!(reshape_scaled_flow(&a, &a), [Some(0), Some(1)]);
    }

    #[test]
    fn attention_pieces() {
        let mut t = TestGraph::new();
        let q = t.input("q", DataType::F32, "1, N, 4, N, 8");
        let k = t.input("k", DataType::F32, "1, N, 4, 8, N");
        let bias = t.input("bias", DataType::F32, "1, 1, 4, N, N");
        let a = t.op("MatMul", &[q, k], &["a"], vec![])[0];
        let b = t.op("Add", &[a, bias], &["b"], vec![])[0];
        t.op(
            "Softmax",
            &[b],
            &["p"],
            vec![attr("axis", AttrValue::Int(-1))],
        );
        let tr: Vec<Attribute> = vec![attr("perm", AttrValue::Ints(vec![0, 2, 1, 3, 4]))];
        t.op("Transpose", &[q], &["qt"], tr);
        let f = t.run(18).unwrap();
        let mm = flow_of(&t, &f, 0);
        assert_eq!(
            mm[0],
            vec![
                AxisFlow::Split(vec![None, None]),
                s(&[Some(1), Some(1)]),
                s(&[Some(2), Some(2)]),
                s(&[Some(3), None]),
                s(&[None, Some(4)])
            ]
        );
        let add = flow_of(&t, &f, 1);
        assert_eq!(add[0][1], s(&[Some(1), None]));
        assert_eq!(add[0][3], s(&[Some(3), Some(3)]));
        let sm = flow_of(&t, &f, 2);
        assert_eq!(sm[0][4], AxisFlow::Mixed);
        assert_eq!(sm[0][1], s(&[Some(1)]));
        let tp = flow_of(&t, &f, 3);
        assert_eq!(tp[0][1], s(&[Some(2)]));
    }

    #[test]
    fn reshape_einsum_and_layer_norm() {
        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "N, N, 32");
        let shp = t.ints("shp", &[4], &[0, 0, 4, 8]);
        t.op("Reshape", &[x, shp], &["r"], vec![]);
        let a = t.input("a", DataType::F32, "M, N, 32");
        let eq: Vec<Attribute> = vec![attr(
            "equation",
            AttrValue::String(b"ikc,jkc->ijc".to_vec()),
        )];
        t.op("Einsum", &[x, a], &["e"], eq);
        let sc = t.input("sc", DataType::F32, "32");
        t.op("LayerNormalization", &[x, sc], &["ln"], vec![]);
        let f = t.run(18).unwrap();
        let r = flow_of(&t, &f, 0);
        assert_eq!(
            r[0],
            vec![
                s(&[Some(0), None]),
                s(&[Some(1), None]),
                AxisFlow::Mixed,
                AxisFlow::Mixed
            ]
        );
        let e = flow_of(&t, &f, 1);
        assert_eq!(
            e[0],
            vec![
                s(&[Some(0), None]),
                s(&[None, Some(0)]),
                s(&[Some(2), Some(2)])
            ]
        );
        let ln = flow_of(&t, &f, 2);
        assert_eq!(
            ln[0],
            vec![s(&[Some(0), None]), s(&[Some(1), None]), AxisFlow::Mixed]
        );
        let mut t = TestGraph::new();
        let q = t.input("q", DataType::F32, "1, N, 4, N, 8");
        let k = t.input("k", DataType::F32, "N, 4, N, 8");
        let eq: Vec<Attribute> = vec![attr(
            "equation",
            AttrValue::String(b"...qc, ...kc->...qk".to_vec()),
        )];
        t.op("Einsum", &[q, k], &["e"], eq);
        let f = t.run(18).unwrap();
        let e = flow_of(&t, &f, 0);
        assert_eq!(
            e[0],
            vec![
                s(&[None, None]),
                s(&[Some(1), Some(0)]),
                s(&[Some(2), Some(1)]),
                s(&[Some(3), None]),
                s(&[None, Some(2)])
            ]
        );
    }

    /// A slice passes the axes it does not cut and an axis it keeps whole (step 1, output as long
    /// as the input: `x[:8]` of an `[8, 8]` tensor, with or without steps); an axis it shortens
    /// or reverses (step -1 over the whole axis) is mixed.
    #[test]
    fn slices_pass_an_axis_they_keep_whole() {
        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "8, 8");
        let z = t.ints("z", &[1], &[0]);
        let e8 = t.ints("e8", &[1], &[8]);
        let e4 = t.ints("e4", &[1], &[4]);
        let big = t.ints("big", &[1], &[i64::MAX]);
        let one = t.ints("one", &[1], &[1]);
        let m1 = t.ints("m1", &[1], &[-1]);
        let m9 = t.ints("m9", &[1], &[-9]);
        t.op("Slice", &[x, z, e8, z, one], &["whole"], vec![]);
        t.op("Slice", &[x, z, big, z], &["whole_no_steps"], vec![]);
        t.op("Slice", &[x, z, e4, z, one], &["half"], vec![]);
        t.op("Slice", &[x, m1, m9, z, m1], &["reversed"], vec![]);
        let f = t.run(18).unwrap();
        let pass = vec![
            s(&[Some(0), None, None, None, None]),
            s(&[Some(1), None, None, None, None]),
        ];
        assert_eq!(flow_of(&t, &f, 0)[0], pass);
        assert_eq!(
            flow_of(&t, &f, 1)[0],
            vec![
                s(&[Some(0), None, None, None]),
                s(&[Some(1), None, None, None])
            ]
        );
        let cut = vec![AxisFlow::Mixed, s(&[Some(1), None, None, None, None])];
        assert_eq!(flow_of(&t, &f, 2)[0], cut);
        assert_eq!(flow_of(&t, &f, 3)[0], cut);
    }
}
