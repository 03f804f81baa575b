//! Test helpers for op implementations: run one op on tensors, build tensors, compare bits, and the
//! chunk-identity check shared by the op-family property tests.

use memplan_ir::graph::{AttrValue, Attribute, Node};
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
    let fact = |t: &Tensor| {
        memplan_ir::infer::Fact::new(
            t.dtype,
            t.shape
                .iter()
                .map(|&d| memplan_ir::Expr::from(d as i64))
                .collect(),
        )
    };
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    let whole = run_op(op, attrs, &ins, 1).ok()?;
    let in_facts: Vec<_> = inputs.iter().map(|t| fact(t)).collect();
    let out_fact = fact(&whole[0]);
    let n = node(op, attrs, inputs.len(), 1);
    let refs: Vec<Option<&memplan_ir::infer::Fact>> = in_facts.iter().map(Some).collect();
    let flow = memplan_ir::ops::axes::axis_flow(&n, &refs, &[Some(&out_fact)])?;
    match flow.first()?.get(out_axis)? {
        memplan_ir::ops::axes::AxisFlow::Split(v) => Some(v.clone()),
        memplan_ir::ops::axes::AxisFlow::Mixed => None,
    }
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
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    let whole = run_op(op, attrs, &ins, 1).map_err(|e| e.to_string())?;
    let len = whole[0].shape[out_axis];
    let mut c: Vec<usize> = cuts.iter().map(|c| c % (len + 1)).collect();
    c.extend([0, len]);
    c.sort_unstable();
    c.dedup();
    for w in c.windows(2) {
        let (lo, hi) = (w[0], w[1]);
        let parts: Vec<Tensor> = inputs
            .iter()
            .zip(in_axes)
            .map(|(t, a)| match a {
                Some(a) if t.shape[*a] != 1 => slice_axis(t, *a, lo, hi),
                _ => (*t).clone(),
            })
            .collect();
        let refs: Vec<Option<&Tensor>> = parts.iter().map(Some).collect();
        let part = run_op(op, attrs, &refs, 1).map_err(|e| e.to_string())?;
        let want = slice_axis(&whole[0], out_axis, lo, hi);
        if part[0].bytes() != want.bytes() {
            return Err(format!(
                "{op}: chunk {lo}..{hi} of axis {out_axis} differs from the whole"
            ));
        }
    }
    Ok(())
}
