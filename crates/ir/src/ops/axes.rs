//! Axis flow: for each output axis of a node, whether the output can be computed slice by slice along
//! it, and which axis of each input the slice comes from. The basis of chunking: a region of nodes
//! can run in independent slices along an axis when every node in it passes that axis through.
//!
//! The rules follow the ops' definitions, not their kernels: an axis is `Split` only when every output
//! element along it depends on the inputs at the same position of the mapped input axes (or on inputs
//! read whole), never on other positions along it. Softmax's axis, reduced axes, contraction axes,
//! concatenation and slicing axes are `Mixed`.

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

fn attr_int(node: &Node, name: &str, default: i64) -> i64 {
    match node.attr(name) {
        Some(AttrValue::Int(v)) => *v,
        _ => default,
    }
}

fn attr_ints(node: &Node, name: &str) -> Option<Vec<i64>> {
    match node.attr(name) {
        Some(AttrValue::Ints(v)) => Some(v.clone()),
        _ => None,
    }
}

fn norm(axis: i64, rank: usize) -> Option<usize> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    (0..rank as i64).contains(&a).then_some(a as usize)
}

/// Numpy broadcasting: output axis `o` of rank `rank` maps to each input's aligned axis unless the
/// input is missing that axis or has extent 1 there (then it is read whole).
fn broadcast_flow(inputs: &[Option<&Fact>], rank: usize, mixed: &[usize]) -> Vec<AxisFlow> {
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

/// The axis flow of each output of `node` (indexed `[output slot][output axis]`), or `None` when the
/// op has no rule here or the facts are incomplete (then nothing may be split through it).
pub fn axis_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    if !node.is_onnx_domain() {
        return None;
    }
    let out_rank = |k: usize| outputs.get(k).copied().flatten().and_then(|f| f.rank());
    let in_shape = |k: usize| {
        inputs
            .get(k)
            .copied()
            .flatten()
            .and_then(|f| f.shape.as_deref())
    };
    let r0 = out_rank(0)?;
    let op = node.op.as_str();
    let flows = match op {
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Mod" | "Max" | "Min" | "Sum" | "Mean"
        | "Equal" | "Less" | "LessOrEqual" | "Greater" | "GreaterOrEqual" | "And" | "Or"
        | "Xor" | "Where" | "PRelu" | "BitShift" | "BitwiseAnd" | "BitwiseOr" | "BitwiseXor" => {
            vec![broadcast_flow(inputs, r0, &[])]
        }
        "Neg" | "Abs" | "Sign" | "Floor" | "Ceil" | "Round" | "Reciprocal" | "Sqrt" | "Exp"
        | "Log" | "Tanh" | "Sigmoid" | "HardSigmoid" | "HardSwish" | "Erf" | "Relu"
        | "LeakyRelu" | "Elu" | "Selu" | "Celu" | "Gelu" | "Mish" | "Softplus" | "Softsign"
        | "ThresholdedRelu" | "Shrink" | "Sin" | "Cos" | "Tan" | "Asin" | "Acos" | "Atan"
        | "Sinh" | "Cosh" | "Asinh" | "Acosh" | "Atanh" | "Not" | "IsNaN" | "IsInf" | "Cast"
        | "Identity" | "Clip" => {
            // Clip's min/max are scalars: read whole.
            vec![broadcast_flow(&inputs[..1], r0, &[])
                .into_iter()
                .map(|f| match f {
                    AxisFlow::Split(mut v) => {
                        v.resize(inputs.len(), None);
                        AxisFlow::Split(v)
                    }
                    m => m,
                })
                .collect()]
        }
        "CastLike" => vec![(0..r0)
            .map(|o| AxisFlow::Split(vec![Some(o), None]))
            .collect()],
        "Softmax" | "LogSoftmax" | "Hardmax" => {
            let axis = norm(attr_int(node, "axis", -1), r0)?;
            vec![broadcast_flow(&inputs[..1], r0, &[axis])]
        }
        "LayerNormalization" | "RMSNormalization" => {
            let axis = norm(attr_int(node, "axis", -1), r0)?;
            let one = |k: usize| -> Vec<AxisFlow> {
                (0..out_rank(k).unwrap_or(r0))
                    .map(|o| {
                        if o >= axis {
                            AxisFlow::Mixed
                        } else {
                            let mut v = vec![None; inputs.len()];
                            v[0] = Some(o);
                            AxisFlow::Split(v)
                        }
                    })
                    .collect()
            };
            (0..outputs.len()).map(one).collect()
        }
        "Resize" | "Upsample" => vec![super::image::resize_flow(node, inputs, r0)],
        "GridSample" => vec![(0..r0)
            .map(|o| match o {
                0 => AxisFlow::Split(vec![Some(0), Some(0)]),
                1 => AxisFlow::Split(vec![Some(1), None]),
                _ => AxisFlow::Split(vec![None, Some(o - 1)]),
            })
            .collect()],
        "Transpose" => {
            let perm = attr_ints(node, "perm").unwrap_or_else(|| (0..r0 as i64).rev().collect());
            vec![perm
                .iter()
                .map(|&p| AxisFlow::Split(vec![Some(p as usize)]))
                .collect()]
        }
        "Squeeze" | "Unsqueeze" | "Reshape" | "Flatten" => {
            let a = in_shape(0)?;
            let b = outputs[0]?.shape.as_deref()?;
            let mut flows = reshape_flow(a, b);
            for f in &mut flows {
                if let AxisFlow::Split(v) = f {
                    v.resize(inputs.len(), None);
                }
            }
            vec![flows]
        }
        "MatMul" => {
            let (a, b) = (in_shape(0)?, in_shape(1)?);
            if a.len() < 2 || b.len() < 2 {
                return None;
            }
            let batch_rank = r0 - 2;
            let mut flows: Vec<AxisFlow> = (0..batch_rank)
                .map(|o| {
                    let map = |s: &[Expr]| {
                        let off = batch_rank.checked_sub(s.len() - 2)?;
                        let k = o.checked_sub(off)?;
                        (s[k] != Expr::one()).then_some(k)
                    };
                    AxisFlow::Split(vec![map(a), map(b)])
                })
                .collect();
            flows.push(AxisFlow::Split(vec![Some(a.len() - 2), None]));
            flows.push(AxisFlow::Split(vec![None, Some(b.len() - 1)]));
            vec![flows]
        }
        "Einsum" => vec![einsum_flow(node, inputs, r0)?],
        "Gather" => {
            let data = in_shape(0)?;
            let idx = in_shape(1)?;
            let axis = norm(attr_int(node, "axis", 0), data.len())?;
            let q = idx.len();
            vec![(0..r0)
                .map(|o| {
                    if o < axis {
                        AxisFlow::Split(vec![Some(o), None])
                    } else if o < axis + q {
                        AxisFlow::Split(vec![None, Some(o - axis)])
                    } else {
                        AxisFlow::Split(vec![Some(o - q + 1), None])
                    }
                })
                .collect()]
        }
        "GatherElements" => {
            let axis = norm(attr_int(node, "axis", 0), r0)?;
            vec![(0..r0)
                .map(|o| {
                    if o == axis {
                        AxisFlow::Mixed
                    } else {
                        AxisFlow::Split(vec![Some(o), Some(o)])
                    }
                })
                .collect()]
        }
        "Concat" => {
            let axis = norm(attr_int(node, "axis", 0), r0)?;
            vec![(0..r0)
                .map(|o| {
                    if o == axis {
                        AxisFlow::Mixed
                    } else {
                        AxisFlow::Split(vec![Some(o); inputs.len()])
                    }
                })
                .collect()]
        }
        n if n.starts_with("Reduce") || n == "ArgMax" || n == "ArgMin" => {
            let a = in_shape(0)?;
            let b = outputs[0]?.shape.as_deref()?;
            let keep = attr_int(node, "keepdims", 1) != 0;
            // Axes from the node; with keepdims and unknown axes, those whose extent changes or
            // is 1 in the output.
            let reduced = match reduced_axes(node, inputs, a.len()) {
                Some(r) => r,
                None if keep && a.len() == b.len() => (0..a.len())
                    .filter(|&k| a[k] != b[k] || b[k] == Expr::one())
                    .collect(),
                None => return None,
            };
            // Kept input axes, in order; with keepdims every axis stays (reduced ones as 1).
            let kept: Vec<usize> = (0..a.len())
                .filter(|k| keep || !reduced.contains(k))
                .collect();
            if kept.len() != r0 {
                return None;
            }
            vec![kept
                .iter()
                .map(|&k| {
                    if reduced.contains(&k) {
                        AxisFlow::Mixed
                    } else {
                        let mut v = vec![None; inputs.len()];
                        v[0] = Some(k);
                        AxisFlow::Split(v)
                    }
                })
                .collect()]
        }
        "Slice" => {
            // Axes it cuts are mixed; the others pass through. Needs known `axes` (or none).
            let a = in_shape(0)?;
            let known = |k: usize| {
                inputs
                    .get(k)
                    .copied()
                    .flatten()
                    .and_then(|f| f.value.as_ref())
                    .and_then(|v| v.as_consts())
            };
            let starts = known(1)?;
            let cut: Vec<usize> = match node.inputs.get(3).copied().flatten() {
                None => (0..starts.len()).collect(),
                Some(_) => known(3)?
                    .iter()
                    .map(|&x| norm(x, a.len()))
                    .collect::<Option<Vec<_>>>()?,
            };
            if a.len() != r0 {
                return None;
            }
            vec![(0..r0)
                .map(|o| {
                    if cut.contains(&o) {
                        AxisFlow::Mixed
                    } else {
                        let mut v = vec![None; inputs.len()];
                        v[0] = Some(o);
                        AxisFlow::Split(v)
                    }
                })
                .collect()]
        }
        "Expand" => {
            // Broadcasting of input 0 to the output; the target shape is read whole (a chunked
            // region gives each chunk its own).
            let mut f = broadcast_flow(&inputs[..1], r0, &[]);
            for x in &mut f {
                if let AxisFlow::Split(v) = x {
                    v.resize(inputs.len(), None);
                }
            }
            vec![f]
        }
        "TopK" => {
            let axis = norm(attr_int(node, "axis", -1), r0)?;
            let f: Vec<AxisFlow> = (0..r0)
                .map(|o| {
                    if o == axis {
                        AxisFlow::Mixed
                    } else {
                        AxisFlow::Split(vec![Some(o), None])
                    }
                })
                .collect();
            vec![f.clone(), f]
        }
        _ => return None,
    };
    Some(flows)
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
    let Some(out) = outputs
        .first()
        .copied()
        .flatten()
        .and_then(|f| f.shape.as_deref())
    else {
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

/// The input axes a reduction reduces (ArgMax/ArgMin: its `axis`; Reduce*: `axes` from the attribute
/// or input 1, all of them when empty), or `None` when they are not known or it reduces nothing.
fn reduced_axes(node: &Node, inputs: &[Option<&Fact>], rank: usize) -> Option<Vec<usize>> {
    if !node.op.starts_with("Reduce") {
        return Some(vec![norm(attr_int(node, "axis", 0), rank)?]);
    }
    let listed: Vec<i64> = match attr_ints(node, "axes") {
        Some(v) => v,
        None => match node.inputs.get(1).copied().flatten() {
            Some(_) => inputs
                .get(1)
                .copied()
                .flatten()?
                .value
                .as_ref()?
                .as_consts()?,
            None => Vec::new(),
        },
    };
    if listed.is_empty() {
        if attr_int(node, "noop_with_empty_axes", 0) != 0 {
            return None;
        }
        return Some((0..rank).collect());
    }
    listed.iter().map(|&a| norm(a, rank)).collect()
}

/// Reshape-like ops: output axis `o` maps to input axis `a` when everything before them has the same
/// element count and the extents agree, so a slice along `o` is a slice along `a`.
fn reshape_flow(a: &[Expr], b: &[Expr]) -> Vec<AxisFlow> {
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

/// Einsum: an output label maps to the axis with that label in each operand that has it; `...`
/// dims align from the right as in broadcasting. Operands that repeat a label (diagonals) and
/// equations without `->` are not handled.
fn einsum_flow(node: &Node, inputs: &[Option<&Fact>], rank: usize) -> Option<Vec<AxisFlow>> {
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
        let ins: Vec<Option<&Fact>> = n.inputs.iter().map(|i| i.map(|v| f.get(v))).collect();
        let outs: Vec<Option<&Fact>> = n.outputs.iter().map(|o| o.map(|v| f.get(v))).collect();
        axis_flow(n, &ins, &outs).unwrap()
    }

    fn s(v: &[Option<usize>]) -> AxisFlow {
        AxisFlow::Split(v.to_vec())
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
}
