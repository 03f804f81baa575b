//! Op family: reductions (`ReduceSum` ... `ReduceSumSquare`, `ArgMax`, `ArgMin`), the
//! normalizations along axes (`Softmax`, `LogSoftmax`, `Hardmax`, `LayerNormalization`,
//! `RMSNormalization`) and the scans `CumSum` and `CumProd`.
//!
//! Reduction axes come from the `axes` attribute or, from opset 13 for `ReduceSum` and opset 18 for
//! the others, from input 1; either form is accepted at any opset. `ReduceSum`, `ReduceProd`,
//! `ReduceMax` and `ReduceMin` of small known tensors fold, so `ReduceProd(Shape(x))` stays symbolic.

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::infer::{invalid, normalize_axis, Fact, InferCtx, Known, OpError, MAX_KNOWN_ELEMS};

use super::axes::{
    attr_int, attr_ints, broadcast_flow, in_shape, norm, out_rank, pass_through, passing, AxisFlow,
};
use super::nn::widened_scratch;
use super::{compute_size, is_half, needs_transpose, numel, Mem, OpDef, ONE, TWO};
use crate::graph::{AttrValue, Node};

pub const DEFS: &[OpDef] = &[
    reduce_def("ReduceSum"),
    reduce_def("ReduceMean"),
    reduce_def("ReduceMax"),
    reduce_def("ReduceMin"),
    reduce_def("ReduceProd"),
    reduce_def("ReduceL1"),
    reduce_def("ReduceL2"),
    reduce_def("ReduceLogSum"),
    reduce_def("ReduceLogSumExp"),
    reduce_def("ReduceSumSquare"),
    OpDef::new("ArgMax", ONE, arg_reduce, with_scratch(arg_scratch)).flow(reduce_flow),
    OpDef::new("ArgMin", ONE, arg_reduce, with_scratch(arg_scratch)).flow(reduce_flow),
    // The kernels write a new buffer; in-place variants are the executor's decision.
    OpDef::new("Softmax", ONE, along_axis, with_scratch(softmax_scratch)).flow(softmax_flow),
    OpDef::new("LogSoftmax", ONE, along_axis, with_scratch(softmax_scratch)).flow(softmax_flow),
    OpDef::new("Hardmax", ONE, along_axis, Mem::NEW).flow(softmax_flow),
    OpDef::new(
        "LayerNormalization",
        (2, 3),
        layer_norm,
        with_scratch(norm_scratch),
    )
    .flow(layer_norm_flow),
    OpDef::new(
        "RMSNormalization",
        (2, 3),
        layer_norm,
        with_scratch(norm_scratch),
    )
    .flow(layer_norm_flow),
    // A running sum along one axis; output 0 is input 0 overwritten.
    OpDef::new("CumSum", (1, 2), same_as_input, Mem::OVERWRITE).flow(cum_flow),
    // A running product along one axis, like CumSum.
    OpDef::new("CumProd", TWO, same_as_input, Mem::OVERWRITE).flow(cum_flow),
];

/// A `Reduce*` op: data and the optional `axes` input.
const fn reduce_def(op: &'static str) -> OpDef {
    OpDef::new(op, (1, 2), reduce, REDUCE_MEM).flow(reduce_flow)
}

const REDUCE_MEM: Mem = with_scratch(reduce_scratch);

const fn with_scratch(f: super::ScratchFn) -> Mem {
    Mem {
        scratch: Some(f),
        ..Mem::NEW
    }
}

// ---- Scratch: what `exec::ops::reduce` and `exec::ops::index` (TopK) allocate. ----
//
// The kernels read every reduced sequence contiguously: when a reduced axis of extent > 1 is followed
// by a kept axis of extent > 1, the input is first transposed into scratch (`e * |X|`, `e` the
// compute element size). f16/bf16 are widened to f32 in scratch first.

fn int_attr(node: &Node, name: &str, default: i64) -> i64 {
    match node.attr(name) {
        Some(AttrValue::Int(v)) => *v,
        _ => default,
    }
}

/// `a` normalized against `rank`, if in range.
fn norm_axis(a: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let x = if a < 0 { a + r } else { a };
    (0..r).contains(&x).then_some(x as usize)
}

/// Reduce*: the transposed copy when needed; f16/bf16 add `4 * (|X| + |Y|)` (widened input and the
/// f32 result). The axes are read as the executor reads them: from input 1 from opset 18 (13 for
/// `ReduceSum`), else from the attribute.
fn reduce_scratch(
    node: &Node,
    opset: i64,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Expr {
    reduce_scratch_bytes(node, opset, inputs, outputs).unwrap_or_else(Expr::zero)
}

fn reduce_scratch_bytes(
    node: &Node,
    opset: i64,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Expr> {
    let x = inputs.first().copied().flatten()?;
    let (dt, shape) = (x.dtype?, x.shape.as_ref()?);
    let e = compute_size(dt)?;
    let nx = numel(Some(x))?;
    let from_input = opset >= 18 || (node.op == "ReduceSum" && opset >= 13);
    let axes: Vec<i64> = if from_input {
        match inputs.get(1).copied().flatten() {
            Some(f) => f.value.as_ref()?.as_consts()?,
            None => Vec::new(),
        }
    } else {
        match node.attr("axes") {
            Some(AttrValue::Ints(v)) => v.clone(),
            _ => Vec::new(),
        }
    };
    let transpose = if axes.is_empty() {
        Expr::zero()
    } else {
        let mut red = vec![false; shape.len()];
        for &a in &axes {
            red[norm_axis(a, shape.len())?] = true;
        }
        needs_transpose(shape, &red)
    };
    let mut bytes = transpose * e * &nx;
    if is_half(dt) {
        bytes += (nx + numel(outputs.first().copied().flatten())?) * 4;
    }
    Some(bytes)
}

/// ArgMax/ArgMin: the transposed copy when needed; f16/bf16 add `4 * |X|` (the widened input).
fn arg_scratch(
    node: &Node,
    _opset: i64,
    inputs: &[Option<&Fact>],
    _outputs: &[Option<&Fact>],
) -> Expr {
    let bytes = || -> Option<Expr> {
        let x = inputs.first().copied().flatten()?;
        let (dt, shape) = (x.dtype?, x.shape.as_ref()?);
        let e = compute_size(dt)?;
        let nx = numel(Some(x))?;
        let mut red = vec![false; shape.len()];
        red[norm_axis(int_attr(node, "axis", 0), shape.len())?] = true;
        let mut b = needs_transpose(shape, &red) * e * &nx;
        if is_half(dt) {
            b += nx * 4;
        }
        Some(b)
    };
    bytes().unwrap_or_else(Expr::zero)
}

/// Softmax/LogSoftmax (opset >= 13): the transposed input and the transposed result when the axis is
/// followed by an axis of extent > 1, `2 * e * |X|`; before opset 13 the input is coerced to 2-D
/// and needs none. f16/bf16 add `8 * |X|` (the widened input and the f32 result).
fn softmax_scratch(
    node: &Node,
    opset: i64,
    inputs: &[Option<&Fact>],
    _outputs: &[Option<&Fact>],
) -> Expr {
    let bytes = || -> Option<Expr> {
        let x = inputs.first().copied().flatten()?;
        let (dt, shape) = (x.dtype?, x.shape.as_ref()?);
        if !matches!(
            dt,
            DataType::F32 | DataType::F64 | DataType::F16 | DataType::BF16
        ) {
            return None;
        }
        let e = compute_size(dt)?;
        let nx = numel(Some(x))?;
        let transpose = if opset < 13 || shape.is_empty() {
            Expr::zero()
        } else {
            let mut red = vec![false; shape.len()];
            red[norm_axis(int_attr(node, "axis", -1), shape.len())?] = true;
            needs_transpose(shape, &red)
        };
        let mut b = transpose * (2 * e) * &nx;
        if is_half(dt) {
            b += nx * 8;
        }
        Some(b)
    };
    bytes().unwrap_or_else(Expr::zero)
}

/// What a reduction does to the input's axes.
enum Axes {
    /// `noop_with_empty_axes` with no axes: the output is the input.
    Identity,
    /// Sorted, distinct axes to reduce.
    Reduce(Vec<usize>),
}

fn reduce_axes(ctx: &InferCtx, rank: usize) -> Result<Axes, OpError> {
    let listed: Vec<i64> = if let Some(v) = ctx.attr_ints("axes")? {
        v
    } else if ctx.opt_input(1).is_some() {
        let known = ctx
            .known_ints(1)
            .ok_or_else(|| OpError::Unknown("contents of axes (input 1)".into()))?;
        known
            .iter()
            .map(|e| e.as_const())
            .collect::<Option<Vec<i64>>>()
            .ok_or_else(|| OpError::Unsupported("symbolic reduction axes".into()))?
    } else {
        Vec::new()
    };
    if listed.is_empty() {
        if ctx.attr_int("noop_with_empty_axes", 0)? != 0 {
            return Ok(Axes::Identity);
        }
        return Ok(Axes::Reduce((0..rank).collect()));
    }
    let mut axes = Vec::with_capacity(listed.len());
    for &a in &listed {
        let k = normalize_axis(a, rank)?;
        if axes.contains(&k) {
            return invalid(format!("axes {listed:?} repeat axis {a}"));
        }
        axes.push(k);
    }
    axes.sort_unstable();
    Ok(Axes::Reduce(axes))
}

/// The shape after reducing `axes` of `s`, keeping them as 1s when `keep`.
fn reduced_shape(s: &[Expr], axes: &[usize], keep: bool) -> Vec<Expr> {
    s.iter()
        .enumerate()
        .filter_map(|(k, d)| match (axes.contains(&k), keep) {
            (false, _) => Some(d.clone()),
            (true, true) => Some(Expr::one()),
            (true, false) => None,
        })
        .collect()
}

fn reduce(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let s = ctx.shape(0)?;
    let keep = ctx.attr_int("keepdims", 1)? != 0;
    let axes = match reduce_axes(ctx, s.len())? {
        Axes::Identity => return Ok(vec![ctx.input(0)?.clone()]),
        Axes::Reduce(a) => a,
    };
    let out = reduced_shape(s, &axes, keep);
    let value = fold_reduce(ctx.node.op.as_str(), ctx.input(0)?, &axes);
    Ok(vec![match value {
        Some(v) => Fact::with_value(t, out, v),
        None => Fact::new(t, out),
    }])
}

/// For each element of a row-major tensor of `dims`, the flat index of its slot after reducing `axes`.
fn reduce_slots(dims: &[usize], axes: &[usize]) -> (Vec<usize>, usize) {
    let out_dims: Vec<usize> = dims
        .iter()
        .enumerate()
        .map(|(k, &d)| if axes.contains(&k) { 1 } else { d })
        .collect();
    let n_out: usize = out_dims.iter().product();
    let n: usize = dims.iter().product();
    let mut slots = Vec::with_capacity(n);
    let mut coord = vec![0usize; dims.len()];
    for _ in 0..n {
        let mut off = 0usize;
        for (k, &c) in coord.iter().enumerate() {
            off = off * out_dims[k] + if axes.contains(&k) { 0 } else { c };
        }
        slots.push(off);
        for k in (0..dims.len()).rev() {
            coord[k] += 1;
            if coord[k] < dims[k] {
                break;
            }
            coord[k] = 0;
        }
    }
    (slots, n_out)
}

/// Folds Sum/Prod/Max/Min of known integer contents, symbolic ones included (concrete ones are
/// the kernel's); `None` for other ops, unknown contents, or an empty
/// Max/Min group.
fn fold_reduce(op: &str, f: &Fact, axes: &[usize]) -> Option<Known> {
    if !matches!(op, "ReduceSum" | "ReduceProd" | "ReduceMax" | "ReduceMin") {
        return None;
    }
    let k = f.value.as_ref()?;
    let dims = f.concrete_shape()?;
    if dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))? > MAX_KNOWN_ELEMS {
        return None;
    }
    let (slots, n_out) = reduce_slots(&dims, axes);
    match k {
        Known::Int(v) => {
            let mut acc: Vec<Option<Expr>> = vec![None; n_out];
            for (x, &j) in v.iter().zip(&slots) {
                acc[j] = Some(match acc[j].take() {
                    None => x.clone(),
                    Some(a) => match op {
                        "ReduceSum" => &a + x,
                        "ReduceProd" => &a * x,
                        "ReduceMax" => Expr::max(&a, x),
                        _ => Expr::min(&a, x),
                    },
                });
            }
            let empty = match op {
                "ReduceSum" => Some(Expr::zero()),
                "ReduceProd" => Some(Expr::one()),
                _ => None,
            };
            acc.into_iter()
                .map(|a| a.or_else(|| empty.clone()))
                .collect::<Option<Vec<_>>>()
                .map(Known::Int)
        }
        // Floats are the kernel's to fold.
        Known::Float(_) | Known::Ratio(_) => None,
    }
}

fn arg_reduce(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let s = ctx.shape(0)?;
    let axis = normalize_axis(ctx.attr_int("axis", 0)?, s.len())?;
    let keep = ctx.attr_int("keepdims", 1)? != 0;
    Ok(vec![Fact::new(
        DataType::I64,
        reduced_shape(s, &[axis], keep),
    )])
}

fn along_axis(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let s = ctx.shape(0)?;
    let default = if ctx.opset >= 13 { -1 } else { 1 };
    normalize_axis(ctx.attr_int("axis", default)?, s.len())?;
    Ok(vec![Fact::new(t, s.to_vec())])
}

/// Layer/RMSNormalization: f16/bf16 `4 * (|X| + |Scale| + |B| + |Y|)` (the mean and inverse std
/// outputs are outputs), else none.
fn norm_scratch(
    node: &Node,
    opset: i64,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Expr {
    let n = if node.op == "RMSNormalization" {
        &inputs[..inputs.len().min(2)]
    } else {
        inputs
    };
    widened_scratch(node, opset, n, outputs)
}

/// `LayerNormalization`/`RMSNormalization`: `Y` like `X`; the optional `Mean` and `InvStdDev` keep
/// the leading `axis` dims and have 1 for the normalized ones, in `stash_type` (default float).
fn layer_norm(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    let axis = normalize_axis(ctx.attr_int("axis", -1)?, x.len())?;
    let stash_code = ctx.attr_int("stash_type", 1)?;
    let stash = DataType::from_onnx(stash_code as i32)
        .ok_or_else(|| OpError::BadAttr(format!("stash_type {stash_code} is not a data type")))?;
    let mut stat = x[..axis].to_vec();
    stat.extend(std::iter::repeat_n(Expr::one(), x.len() - axis));
    Ok(vec![
        Fact::new(t, x),
        Fact::new(stash, stat.clone()),
        Fact::new(stash, stat),
    ])
}

fn same_as_input(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    Ok(vec![Fact::new(ctx.dtype(0)?, ctx.shape(0)?.to_vec())])
}

/// Softmax/LogSoftmax/Hardmax: the axis is mixed, the others pass through.
fn softmax_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = out_rank(outputs, 0)?;
    let axis = norm(attr_int(node, "axis", -1), r0)?;
    Some(vec![broadcast_flow(&inputs[..1], r0, &[axis])])
}

/// CumSum and CumProd run along the axis input 1 holds (known; mixed); the others pass through.
fn cum_flow(
    _node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let axis = inputs
        .get(1)
        .copied()
        .flatten()?
        .value
        .as_ref()?
        .as_consts()?;
    passing(inputs, outputs, 1, |r| Some(vec![norm(*axis.first()?, r)?]))
}

/// Layer/RMSNormalization: axes from `axis` on are mixed (in every output), the others pass
/// through input 0; scale and bias are read whole.
fn layer_norm_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = out_rank(outputs, 0)?;
    let axis = norm(attr_int(node, "axis", -1), r0)?;
    let one = |k: usize| {
        let rk = out_rank(outputs, k).unwrap_or(r0);
        pass_through(inputs.len(), rk, &(axis..rk).collect::<Vec<_>>())
    };
    Some((0..outputs.len()).map(one).collect())
}

/// Reduce*/ArgMax/ArgMin: reduced axes (kept as 1 with `keepdims`) are mixed, the others pass
/// through input 0.
fn reduce_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = out_rank(outputs, 0)?;
    let a = in_shape(inputs, 0)?;
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
    Some(vec![kept
        .iter()
        .map(|&k| {
            if reduced.contains(&k) {
                AxisFlow::Mixed
            } else {
                super::axes::from_first(inputs.len(), k)
            }
        })
        .collect()])
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

#[cfg(test)]
mod tests {
    use crate::dtype::DataType::{F32, I64};
    use crate::infer::Known;
    use crate::ops::tests::{a_int, a_ints, fact_of, shape_of, TestGraph};
    use crate::Expr;

    #[test]
    fn reduce_sum_axes_from_input_and_attr() {
        let mut t = TestGraph::new();
        let x = t.input("x", F32, "N, S, 64");
        let axes = t.ints("axes", &[1], &[-1]);
        let a = t.op("ReduceSum", &[x, axes], &["a"], vec![]);
        let b = t.op("ReduceSum", &[x, axes], &["b"], vec![a_int("keepdims", 0)]);
        let c = t.op("ReduceMean", &[x], &["c"], vec![a_ints("axes", &[0, 1])]);
        let d = t.op("ReduceMax", &[x], &["d"], vec![a_int("keepdims", 0)]);
        let e = t.op(
            "ReduceL2",
            &[x],
            &["e"],
            vec![a_int("noop_with_empty_axes", 1)],
        );
        let f = t.run(13).unwrap();
        assert_eq!(shape_of(&f, a[0]), "[N, S, 1]");
        assert_eq!(shape_of(&f, b[0]), "[N, S]");
        assert_eq!(shape_of(&f, c[0]), "[1, 1, 64]");
        assert_eq!(shape_of(&f, d[0]), "[]");
        assert_eq!(shape_of(&f, e[0]), "[N, S, 64]");
    }

    #[test]
    fn reduce_prod_folds_symbolic_shape() {
        let mut t = TestGraph::new();
        let x = t.input("x", F32, "N, S, 4");
        let sh = t.op("Shape", &[x], &["sh"], vec![]);
        let p = t.op("ReduceProd", &[sh[0]], &["p"], vec![a_int("keepdims", 0)]);
        let m = t.op("ReduceMax", &[sh[0]], &["m"], vec![]);
        let f = t.run(18).unwrap();
        assert_eq!(fact_of(&f, p[0]), "int64 []");
        assert_eq!(
            f.get(p[0]).value,
            Some(Known::Int(vec![
                Expr::sym("N") * Expr::sym("S") * Expr::int(4)
            ]))
        );
        assert_eq!(shape_of(&f, m[0]), "[1]");
        assert!(f.get(m[0]).value.is_some());
    }

    #[test]
    fn reduce_rejects_bad_axes() {
        let mut t = TestGraph::new();
        let x = t.input("x", F32, "N, 3");
        t.node(
            "r",
            "ReduceSum",
            &[Some(x)],
            &["y"],
            vec![a_ints("axes", &[2])],
        );
        let e = t.run(11).unwrap_err().to_string();
        assert!(
            e.contains("'r' (ReduceSum)") && e.contains("out of range"),
            "{e}"
        );
        let mut t = TestGraph::new();
        let x = t.input("x", F32, "N, 3");
        t.node(
            "r",
            "ReduceMin",
            &[Some(x)],
            &["y"],
            vec![a_ints("axes", &[1, -1])],
        );
        assert!(t.run(11).unwrap_err().to_string().contains("repeat"));
    }

    #[test]
    fn argmax_and_softmax() {
        let mut t = TestGraph::new();
        let x = t.input("x", F32, "B, S, 100");
        let a = t.op("ArgMax", &[x], &["a"], vec![a_int("axis", -1)]);
        let b = t.op(
            "ArgMin",
            &[x],
            &["b"],
            vec![a_int("axis", 1), a_int("keepdims", 0)],
        );
        let s = t.op("Softmax", &[x], &["s"], vec![]);
        let l = t.op("LogSoftmax", &[x], &["l"], vec![a_int("axis", 0)]);
        let f = t.run(18).unwrap();
        assert_eq!(fact_of(&f, a[0]), "int64 [B, S, 1]");
        assert_eq!(fact_of(&f, b[0]), "int64 [B, 100]");
        assert_eq!(fact_of(&f, s[0]), "float [B, S, 100]");
        assert_eq!(fact_of(&f, l[0]), "float [B, S, 100]");
        let mut t = TestGraph::new();
        let x = t.input("x", F32, "B, S");
        t.node("sm", "Softmax", &[Some(x)], &["y"], vec![a_int("axis", 3)]);
        assert!(t
            .run(18)
            .unwrap_err()
            .to_string()
            .contains("'sm' (Softmax)"));
    }

    #[test]
    fn topk_known_and_unknown_k() {
        let mut t = TestGraph::new();
        let x = t.input("x", F32, "N, 1000");
        let k = t.ints("k", &[1], &[5]);
        let kk = t.input("kk", I64, "1");
        let a = t.op("TopK", &[x, k], &["v", "i"], vec![]);
        let b = t.op("TopK", &[x, kk], &["v2", "i2"], vec![a_int("axis", 0)]);
        let f = t.run(18).unwrap();
        assert_eq!(fact_of(&f, a[0]), "float [N, 5]");
        assert_eq!(fact_of(&f, a[1]), "int64 [N, 5]");
        assert_eq!(fact_of(&f, b[0]), "float [topk_k_v2, 1000]");
        assert_eq!(fact_of(&f, b[1]), "int64 [topk_k_v2, 1000]");
        assert_eq!(f.symbols.introduced.len(), 1);
        assert!(f.symbols.introduced[0].reason.contains("TopK"));

        let mut t = TestGraph::new();
        let x = t.input("x", F32, "N, 4");
        let k = t.ints("k", &[1], &[5]);
        t.node("tk", "TopK", &[Some(x), Some(k)], &["v", "i"], vec![]);
        let e = t.run(18).unwrap_err().to_string();
        assert!(e.contains("'tk' (TopK)") && e.contains("exceeds"), "{e}");
    }

    /// The scratch rules evaluated at `env`, per node in graph order.
    fn scratch_at(t: &TestGraph, opset: i64, env: &[(&str, i64)]) -> Vec<i64> {
        let f = t.run(opset).unwrap();
        let env: std::collections::BTreeMap<String, i64> =
            env.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        t.g.nodes
            .iter()
            .map(|n| {
                let rule = crate::ops::lookup(n).unwrap().mem.scratch.unwrap();
                let (ins, outs) = f.node_io(n);
                rule(n, opset, &ins, &outs).eval_map(&env).unwrap()
            })
            .collect()
    }

    /// The transposed copy is counted exactly when a reduced axis of extent > 1 precedes a kept
    /// axis of extent > 1, also when the extents are symbols that may be 1.
    #[test]
    fn reduction_scratch_follows_the_transpose_rule() {
        let mut t = TestGraph::new();
        let x = t.input("x", F32, "B, S, 8");
        let mid = t.ints("mid", &[1], &[1]);
        let last = t.ints("last", &[1], &[-1]);
        t.op("ReduceMax", &[x, mid], &["a"], vec![]);
        t.op("ReduceMax", &[x, last], &["b"], vec![]);
        t.op("ArgMax", &[x], &["c"], vec![a_int("axis", 0)]);
        t.op("Softmax", &[x], &["d"], vec![a_int("axis", 1)]);
        t.op("Softmax", &[x], &["e"], vec![]);
        let k = t.ints("k", &[1], &[2]);
        t.node("tk", "TopK", &[Some(x), Some(k)], &["v", "i"], vec![]);
        // [B, S, 8] f32: |X| = 32 B S.
        assert_eq!(
            scratch_at(&t, 18, &[("B", 2), ("S", 3)]),
            [192, 0, 192, 384, 0, 64]
        );
        // S = 1: nothing to transpose for axis 1; B = 1: nothing for axis 0.
        assert_eq!(
            scratch_at(&t, 18, &[("B", 2), ("S", 1)]),
            [0, 0, 64, 0, 0, 64]
        );
        assert_eq!(
            scratch_at(&t, 18, &[("B", 1), ("S", 5)]),
            [160, 0, 0, 320, 0, 64]
        );
        // Before opset 13 Softmax coerces to 2-D and needs no transpose; before 18 ReduceMax takes
        // its axes from the attribute (none here: every axis is reduced).
        assert_eq!(
            scratch_at(&t, 11, &[("B", 2), ("S", 3)]),
            [0, 0, 192, 0, 0, 64]
        );
    }
}
