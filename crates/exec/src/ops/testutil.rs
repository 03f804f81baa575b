//! Test helpers for op implementations: run one op on tensors, build tensors, compare bits, and the
//! chunk-identity check shared by the op-family property tests.

use memplan_ir::graph::{AttrValue, Attribute, Node};
use memplan_ir::ops::axes::AxisFlow;
use memplan_ir::DataType;

use super::{lookup, OpCtx, OpFail};
use crate::mem::MemStats;
use crate::tensor::{elem_size, Element, Tensor};

/// A node of `op` with the given attributes, `n_in` inputs and `n_out` outputs (ids are dummies).
pub fn node(op: &str, attrs: &[(&str, AttrValue)], n_in: usize, n_out: usize) -> Node {
    Node {
        name: format!("{op}_test"),
        op: op.to_string(),
        domain: String::new(),
        overload: String::new(),
        inputs: (0..n_in)
            .map(|i| Some(memplan_ir::graph::ValueId(i as u32)))
            .collect(),
        outputs: (0..n_out)
            .map(|i| Some(memplan_ir::graph::ValueId((n_in + i) as u32)))
            .collect(),
        attrs: attrs
            .iter()
            .map(|(n, v)| Attribute {
                name: n.to_string(),
                value: v.clone(),
                doc: String::new(),
            })
            .collect(),
        doc: String::new(),
        metadata: Vec::new(),
    }
}

/// The input axes the op record's axis flow slices for output axis `out_axis` of `op` over these
/// inputs (`None`: read whole); `None` when the flow says the axis is mixed or gives no flow.
pub fn flow_axes(
    op: &str,
    attrs: &[(&str, AttrValue)],
    inputs: &[&Tensor],
    out_axis: usize,
) -> Option<Vec<Option<usize>>> {
    let flow = flows(op, attrs, inputs, 1)?;
    match flow.first()?.get(out_axis)? {
        AxisFlow::Split(v) => Some(v.clone()),
        AxisFlow::Mixed => None,
    }
}

/// The op record's axis flow of `op` (with `n_out` outputs) over these inputs, on the facts of a
/// whole run; `None` when it gives none.
pub fn flows(
    op: &str,
    attrs: &[(&str, AttrValue)],
    inputs: &[&Tensor],
    n_out: usize,
) -> Option<Vec<Vec<AxisFlow>>> {
    // Small int64 and f32 inputs (an axis, sizes, scales) are known, as inference knows constants.
    let fact = |t: &Tensor| {
        let shape = t
            .shape
            .iter()
            .map(|&d| memplan_ir::Expr::from(d as i64))
            .collect();
        let known = match t.dtype {
            DataType::I64 => t.data::<i64>().ok().filter(|v| v.len() <= 8).map(|v| {
                memplan_ir::Known::Int(v.iter().map(|&x| memplan_ir::Expr::int(x)).collect())
            }),
            DataType::F32 => t
                .data::<f32>()
                .ok()
                .filter(|v| v.len() <= 8)
                .map(|v| memplan_ir::Known::Float(v.iter().map(|&x| f64::from(x)).collect())),
            _ => None,
        };
        match known {
            Some(k) => memplan_ir::infer::Fact::with_value(t.dtype, shape, k),
            None => memplan_ir::infer::Fact::new(t.dtype, shape),
        }
    };
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    let whole = run_op(op, attrs, &ins, n_out).ok()?;
    let in_facts: Vec<_> = inputs.iter().map(|t| fact(t)).collect();
    let out_facts: Vec<_> = whole.iter().map(fact).collect();
    let n = node(op, attrs, inputs.len(), n_out);
    let refs: Vec<Option<&memplan_ir::infer::Fact>> = in_facts.iter().map(Some).collect();
    let outs: Vec<Option<&memplan_ir::infer::Fact>> = out_facts.iter().map(Some).collect();
    memplan_ir::ops::axes::axis_flow(&n, &refs, &outs)
}

/// Checks the flow of a record over `inputs` for every axis of output 0 of `op` (`n_out`
/// outputs): it splits exactly the axes in `split`, and along each of them, every output the
/// flow splits the same way (as the chunker does) is the exact slice of the whole run on each
/// chunk of the inputs (cut at `cuts`).
pub fn check_flow(
    op: &str,
    attrs: &[(&str, AttrValue)],
    inputs: &[&Tensor],
    n_out: usize,
    split: &[usize],
    cuts: &[usize],
) -> Result<(), String> {
    let fl = flows(op, attrs, inputs, n_out).ok_or_else(|| format!("{op}: no flow"))?;
    for (o, f) in fl[0].iter().enumerate() {
        let AxisFlow::Split(ins) = f else {
            if split.contains(&o) {
                return Err(format!("{op}: axis {o} is mixed"));
            }
            continue;
        };
        if !split.contains(&o) {
            return Err(format!("{op}: axis {o} splits"));
        }
        let out_axes: Vec<usize> = fl
            .iter()
            .map(|k| {
                k.iter()
                    .position(|x| matches!(x, AxisFlow::Split(v) if v == ins))
                    .ok_or_else(|| format!("{op}: an output does not follow axis {o}"))
            })
            .collect::<Result<_, _>>()?;
        check_chunks_n(op, attrs, inputs, ins, &out_axes, cuts)?;
    }
    Ok(())
}

/// Runs `op` at opset 18 (no view) on `inputs`.
pub fn run_op(
    op: &str,
    attrs: &[(&str, AttrValue)],
    inputs: &[Option<&Tensor>],
    n_out: usize,
) -> Result<Vec<Tensor>, OpFail> {
    run_op_at(op, attrs, inputs, n_out, 18, false)
}

/// Runs `op` at an explicit opset and view flag.
pub fn run_op_at(
    op: &str,
    attrs: &[(&str, AttrValue)],
    inputs: &[Option<&Tensor>],
    n_out: usize,
    opset: i64,
    view: bool,
) -> Result<Vec<Tensor>, OpFail> {
    crate::fold::install_const_folder();
    let n = node(op, attrs, inputs.len(), n_out);
    let stats = MemStats::new();
    let ctx = OpCtx {
        node: &n,
        opset,
        view,
        stats: &stats,
    };
    let f = lookup(&n).ok_or_else(|| OpFail::Unsupported(format!("no op {op}")))?;
    f(&ctx, inputs)
}

pub fn t_f32(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_vec(shape, v, None).unwrap()
}

pub fn t_i64(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(shape, v, None).unwrap()
}

pub fn t_of<T: Element>(shape: &[usize], v: &[T]) -> Tensor {
    Tensor::from_vec(shape, v, None).unwrap()
}

pub fn t_bool(shape: &[usize], v: &[bool]) -> Tensor {
    let mut t = Tensor::zeros(DataType::Bool, shape, None).unwrap();
    for (o, &b) in t.data_mut::<u8>().unwrap().iter_mut().zip(v) {
        *o = b as u8;
    }
    t
}

/// Deterministic pseudo-random f32 values in [-2, 2).
pub fn rand_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

/// Elements `lo..hi` along `axis` of a tensor, as a new tensor (naive byte copy).
pub fn slice_axis(t: &Tensor, axis: usize, lo: usize, hi: usize) -> Tensor {
    let es = elem_size(t.dtype).unwrap();
    let outer: usize = t.shape[..axis].iter().product();
    let inner: usize = t.shape[axis + 1..].iter().product::<usize>() * es;
    let d = t.shape[axis];
    let mut shape = t.shape.clone();
    shape[axis] = hi - lo;
    let mut out = Tensor::zeros(t.dtype, &shape, None).unwrap();
    let src = t.bytes();
    let dst = out.bytes_mut().unwrap();
    let w = (hi - lo) * inner;
    for o in 0..outer {
        dst[o * w..(o + 1) * w].copy_from_slice(&src[(o * d + lo) * inner..(o * d + hi) * inner]);
    }
    out
}

/// Checks that running `op` on slices `lo..hi` of every input along its axis `in_axes[i]` (`None`:
/// passed whole) gives exactly the bytes of slicing output 0 of the whole run along `out_axis`.
pub fn check_chunks(
    op: &str,
    attrs: &[(&str, AttrValue)],
    inputs: &[&Tensor],
    in_axes: &[Option<usize>],
    out_axis: usize,
    cuts: &[usize],
) -> Result<(), String> {
    check_chunks_n(op, attrs, inputs, in_axes, &[out_axis], cuts)
}

/// [`check_chunks`] for an op with `out_axes.len()` outputs, output `k` sliced along
/// `out_axes[k]`. The input the op's record names its shape input (`OpDef::shape_input`) is the
/// chunk's shape.
pub fn check_chunks_n(
    op: &str,
    attrs: &[(&str, AttrValue)],
    inputs: &[&Tensor],
    in_axes: &[Option<usize>],
    out_axes: &[usize],
    cuts: &[usize],
) -> Result<(), String> {
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    let n_out = out_axes.len();
    let whole = run_op(op, attrs, &ins, n_out).map_err(|e| e.to_string())?;
    let len = whole[0].shape[out_axes[0]];
    let mut c: Vec<usize> = cuts.iter().map(|c| c % (len + 1)).collect();
    c.extend([0, len]);
    c.sort_unstable();
    c.dedup();
    for w in c.windows(2) {
        let (lo, hi) = (w[0], w[1]);
        // The input holding the output's shape is the chunk's shape, as a chunk's clone reads.
        let shape_input = memplan_ir::ops::lookup(&node(op, attrs, inputs.len(), n_out))
            .and_then(|d| d.shape_input);
        let mut chunk_shape: Vec<i64> = whole[0].shape.iter().map(|&d| d as i64).collect();
        chunk_shape[out_axes[0]] = (hi - lo) as i64;
        let parts: Vec<Tensor> = inputs
            .iter()
            .zip(in_axes)
            .enumerate()
            .map(|(k, (t, a))| match a {
                _ if shape_input == Some(k) => t_i64(&[chunk_shape.len()], &chunk_shape),
                Some(a) if t.shape[*a] != 1 => slice_axis(t, *a, lo, hi),
                _ => (*t).clone(),
            })
            .collect();
        let refs: Vec<Option<&Tensor>> = parts.iter().map(Some).collect();
        let part = run_op(op, attrs, &refs, n_out).map_err(|e| e.to_string())?;
        for (k, &axis) in out_axes.iter().enumerate() {
            let want = slice_axis(&whole[k], axis, lo, hi);
            if part[k].bytes() != want.bytes() {
                return Err(format!(
                    "{op}: chunk {lo}..{hi} of output {k}'s axis {axis} differs from the whole"
                ));
            }
        }
    }
    Ok(())
}
