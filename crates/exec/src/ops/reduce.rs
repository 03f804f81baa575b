//! Reductions and normalizations: Reduce* (all ten), ArgMax/ArgMin, Softmax/LogSoftmax,
//! LayerNormalization, RMSNormalization, CumSum, CumProd.
//!
//! Every reduced sequence is folded in the canonical order of `kernels::reduce::fold_lanes`, which
//! depends only on its length. The kernels read each sequence contiguously: when the reduced axes are
//! not the trailing (non-unit) axes, the op first transposes the input so that they are, into a counted
//! scratch buffer. f16/bf16 compute in f32.
//!
//! Scratch (bytes, `e` = element size, 4 for f16/bf16):
//! - Reduce*: `e * |X|` when a reduced axis is followed by a kept axis of extent > 1 (transposed copy).
//!   f16/bf16 add `4 * (|X| + |Y|)`.
//! - ArgMax/ArgMin: `e * |X|` when the axis is followed by an axis of extent > 1. f16/bf16 add `4 * |X|`.
//! - Softmax/LogSoftmax: `2 * e * |X|` when the softmax axis is followed by an axis of extent > 1
//!   (opset >= 13; before 13 the input is coerced to 2-D and needs none). f16/bf16 add `8 * |X|`.
//! - LayerNormalization/RMSNormalization: none for f32/f64; f16/bf16 `4 * (|X| + |scale| + |B| + |Y|)`.
//! - CumSum, CumProd: none.

use half::{bf16, f16};
use memplan_ir::DataType;

use super::linalg::{narrow, widen};
use super::{
    axis, cast_mut, copy_then, fail, opt, req, scalar_i64, unsupported, OpCtx, OpFail, OpFn,
    OverwriteFn,
};
use crate::kernels::movement::{istrides, strided_copy};
use crate::kernels::norm::{layer_norm, rms_norm, softmax, NormStats};
use crate::kernels::reduce::{arg_extreme, reduce, reduce_out_shape, ReduceElem, ReduceOp};
use crate::tensor::Tensor;

/// Ops whose output 0 is input 0 modified (see [`super::OverwriteFn`]).
pub const OVERWRITE: &[(&str, OverwriteFn)] = &[("CumSum", cumsum_over), ("CumProd", cumsum_over)];

pub const OPS: &[(&str, OpFn)] = &[
    ("ReduceSum", reduce_op),
    ("ReduceMean", reduce_op),
    ("ReduceMax", reduce_op),
    ("ReduceMin", reduce_op),
    ("ReduceProd", reduce_op),
    ("ReduceL1", reduce_op),
    ("ReduceL2", reduce_op),
    ("ReduceLogSum", reduce_op),
    ("ReduceLogSumExp", reduce_op),
    ("ReduceSumSquare", reduce_op),
    ("ArgMax", arg_op),
    ("ArgMin", arg_op),
    ("Softmax", softmax_op),
    ("LogSoftmax", softmax_op),
    ("Hardmax", hardmax_op),
    ("LayerNormalization", layer_norm_op),
    ("RMSNormalization", rms_norm_op),
    ("CumSum", cumsum_op),
    ("CumProd", cumsum_op),
];

/// The permutation that moves the `red` axes (in order) after the kept ones, or `None` when the
/// reduced axes already are the trailing ones once size-1 axes are ignored.
fn trailing_perm(shape: &[usize], red: &[bool]) -> Option<Vec<usize>> {
    let mut seen_red = false;
    let mut needs = false;
    for (i, &d) in shape.iter().enumerate() {
        if d == 1 {
            continue;
        }
        if red[i] {
            seen_red = true;
        } else if seen_red {
            needs = true;
        }
    }
    if !needs {
        return None;
    }
    let mut p: Vec<usize> = (0..shape.len()).filter(|&i| !red[i]).collect();
    p.extend((0..shape.len()).filter(|&i| red[i]));
    Some(p)
}

/// Transposes `x` by `perm` into a counted scratch buffer; returns it with its shape.
fn permuted<T: bytemuck::Pod + Send + Sync>(
    ctx: &OpCtx,
    x: &[T],
    shape: &[usize],
    perm: &[usize],
) -> Result<(crate::mem::ScratchBuf<T>, Vec<usize>), OpFail> {
    let st = istrides(shape);
    let ps: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let pst: Vec<isize> = perm.iter().map(|&p| st[p]).collect();
    let mut buf = ctx.scratch::<T>(x.len())?;
    strided_copy(x, 0, &ps, &pst, buf.as_mut_slice())?;
    Ok((buf, ps))
}

fn reduce_kind(op: &str) -> Option<ReduceOp> {
    Some(match op {
        "ReduceSum" => ReduceOp::Sum,
        "ReduceMean" => ReduceOp::Mean,
        "ReduceMax" => ReduceOp::Max,
        "ReduceMin" => ReduceOp::Min,
        "ReduceProd" => ReduceOp::Prod,
        "ReduceL1" => ReduceOp::L1,
        "ReduceL2" => ReduceOp::L2,
        "ReduceLogSum" => ReduceOp::LogSum,
        "ReduceLogSumExp" => ReduceOp::LogSumExp,
        "ReduceSumSquare" => ReduceOp::SumSquare,
        _ => return None,
    })
}

/// Reduces `x` (`shape`) over `axes` into `out`, transposing first when the axes are not trailing.
fn reduce_typed<T: ReduceElem + bytemuck::Pod>(
    ctx: &OpCtx,
    op: ReduceOp,
    x: &[T],
    shape: &[usize],
    axes: &[i64],
    noop: bool,
    out: &mut [T],
) -> Result<(), OpFail> {
    if axes.is_empty() && noop {
        if x.len() != out.len() {
            return fail("Reduce output size mismatch");
        }
        out.copy_from_slice(x);
        return Ok(());
    }
    let mut red = vec![axes.is_empty(); shape.len()];
    for &a in axes {
        red[axis(a, shape.len())?] = true;
    }
    match trailing_perm(shape, &red) {
        None => reduce(op, x, shape, axes, true, noop, out)?,
        Some(perm) => {
            let (buf, ps) = permuted(ctx, x, shape, &perm)?;
            let kept = perm.iter().filter(|&&p| !red[p]).count();
            let taxes: Vec<i64> = (kept..shape.len()).map(|i| i as i64).collect();
            reduce(op, buf.as_slice(), &ps, &taxes, true, false, out)?;
        }
    }
    Ok(())
}

fn reduce_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let Some(op) = reduce_kind(&ctx.node.op) else {
        return unsupported(ctx.node.op.clone());
    };
    let axes_from_input = ctx.opset >= 18 || (ctx.node.op == "ReduceSum" && ctx.opset >= 13);
    let axes: Vec<i64> = if axes_from_input {
        match opt(inputs, 1) {
            Some(t) => t.to_i64_vec()?,
            None => Vec::new(),
        }
    } else {
        ctx.ints("axes")?.unwrap_or_default()
    };
    let keepdims = ctx.int("keepdims", 1)? != 0;
    let noop = axes_from_input && ctx.int("noop_with_empty_axes", 0)? != 0;
    let oshape = reduce_out_shape(&x.shape, &axes, keepdims, noop)?;
    let mut out = ctx.alloc(x.dtype, &oshape)?;
    match x.dtype {
        DataType::F32 => {
            reduce_typed::<f32>(ctx, op, x.data()?, &x.shape, &axes, noop, out.data_mut()?)?
        }
        DataType::F64 => {
            reduce_typed::<f64>(ctx, op, x.data()?, &x.shape, &axes, noop, out.data_mut()?)?
        }
        DataType::I32 => {
            reduce_typed::<i32>(ctx, op, x.data()?, &x.shape, &axes, noop, out.data_mut()?)?
        }
        DataType::I64 => {
            reduce_typed::<i64>(ctx, op, x.data()?, &x.shape, &axes, noop, out.data_mut()?)?
        }
        DataType::U8 => {
            reduce_typed::<u8>(ctx, op, x.data()?, &x.shape, &axes, noop, out.data_mut()?)?
        }
        // Max is "any", Min is "all" (over bytes read as `!= 0`; the empty set gives false and
        // true), stored back as 0 or 1.
        DataType::Bool if matches!(op, ReduceOp::Max | ReduceOp::Min) => {
            let o = super::raw_mut::<u8>(&mut out)?;
            reduce_typed::<u8>(ctx, op, super::raw::<u8>(x)?, &x.shape, &axes, noop, o)?;
            o.iter_mut().for_each(|v| *v = (*v != 0) as u8);
        }
        DataType::F16 | DataType::BF16 => {
            let w = widen(ctx, x)?;
            let mut y = ctx.scratch::<f32>(out.numel())?;
            reduce_typed::<f32>(
                ctx,
                op,
                w.as_slice(),
                &x.shape,
                &axes,
                noop,
                y.as_mut_slice(),
            )?;
            narrow(y.as_slice(), &mut out)?;
        }
        d => return unsupported(format!("{} on {d}", ctx.node.op)),
    }
    Ok(vec![out])
}

fn arg_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let max = ctx.node.op == "ArgMax";
    let keepdims = ctx.int("keepdims", 1)? != 0;
    let last = ctx.int("select_last_index", 0)? != 0;
    let a = axis(ctx.int("axis", 0)?, x.rank())?;
    let mut oshape = x.shape.clone();
    oshape[a] = 1;
    let mut out = ctx.alloc(DataType::I64, &oshape)?;
    fn go<T: ReduceElem + bytemuck::Pod>(
        ctx: &OpCtx,
        max: bool,
        x: &[T],
        shape: &[usize],
        a: usize,
        last: bool,
        out: &mut [i64],
    ) -> Result<(), OpFail> {
        let mut red = vec![false; shape.len()];
        red[a] = true;
        match trailing_perm(shape, &red) {
            None => arg_extreme(max, x, shape, a as i64, true, last, out)?,
            Some(perm) => {
                let (buf, ps) = permuted(ctx, x, shape, &perm)?;
                arg_extreme(
                    max,
                    buf.as_slice(),
                    &ps,
                    ps.len() as i64 - 1,
                    true,
                    last,
                    out,
                )?;
            }
        }
        Ok(())
    }
    let o = out.data_mut::<i64>()?;
    match x.dtype {
        DataType::F32 => go::<f32>(ctx, max, x.data()?, &x.shape, a, last, o)?,
        DataType::F64 => go::<f64>(ctx, max, x.data()?, &x.shape, a, last, o)?,
        DataType::I32 => go::<i32>(ctx, max, x.data()?, &x.shape, a, last, o)?,
        DataType::I64 => go::<i64>(ctx, max, x.data()?, &x.shape, a, last, o)?,
        DataType::F16 | DataType::BF16 => {
            let w = widen(ctx, x)?;
            go::<f32>(ctx, max, w.as_slice(), &x.shape, a, last, o)?
        }
        d => return unsupported(format!("{} on {d}", ctx.node.op)),
    }
    if !keepdims {
        oshape.remove(a);
        out = out.reshaped(&oshape);
    }
    Ok(vec![out])
}

/// Hardmax: 1 at the first maximum along the axis (the 2-D coercion at `axis`, default 1, before
/// opset 13; one axis, default -1, from 13), 0 elsewhere. Strided in place, no scratch.
fn hardmax_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let mut out = ctx.alloc(x.dtype, &x.shape)?;
    let (outer, len, inner) = if ctx.opset < 13 {
        let r = x.rank() as i64;
        let a = ctx.int("axis", 1)?;
        let a = if a < 0 { a + r } else { a };
        if a < 0 || a > r {
            return fail(format!("axis {a} out of range for rank {r}"));
        }
        let a = a as usize;
        (
            x.shape[..a].iter().product::<usize>(),
            x.shape[a..].iter().product::<usize>(),
            1,
        )
    } else if x.rank() == 0 {
        (1, 1, 1)
    } else {
        let a = axis(ctx.int("axis", -1)?, x.rank())?;
        (
            x.shape[..a].iter().product::<usize>(),
            x.shape[a],
            x.shape[a + 1..].iter().product::<usize>(),
        )
    };
    if x.numel() == 0 {
        return Ok(vec![out]);
    }
    crate::real_dispatch!(
        x.dtype,
        T => {
            use crate::kernels::real::Real;
            let xs = x.data::<T>()?;
            let o = out.data_mut::<T>()?;
            for p in 0..outer {
                for q in 0..inner {
                    let at = |k: usize| (p * len + k) * inner + q;
                    let mut best = 0;
                    for k in 1..len {
                        if xs[at(k)].get() > xs[at(best)].get() {
                            best = k;
                        }
                    }
                    o[at(best)] = T::put(1.0);
                }
            }
        },
        return unsupported(format!("Hardmax on {}", x.dtype))
    );
    Ok(vec![out])
}

fn softmax_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let log = ctx.node.op == "LogSoftmax";
    // Softmax writes every element (or fails).
    let mut out = ctx.alloc_for_overwrite(x.dtype, &x.shape)?;
    if x.numel() == 0 {
        return Ok(vec![out]);
    }
    // Before opset 13 the input is coerced to 2-D at `axis` (default 1); from 13 one axis (default -1).
    let (shape, a) = if ctx.opset < 13 {
        let a = ctx.int("axis", 1)?;
        let r = x.rank() as i64;
        let a = if a < 0 { a + r } else { a };
        if a < 0 || a > r {
            return fail(format!("axis {a} out of range for rank {r}"));
        }
        let a = a as usize;
        (
            vec![x.shape[..a].iter().product(), x.shape[a..].iter().product()],
            1,
        )
    } else if x.rank() == 0 {
        (vec![1], 0)
    } else {
        (x.shape.clone(), axis(ctx.int("axis", -1)?, x.rank())?)
    };
    fn go<T: crate::kernels::norm::Float + bytemuck::Pod>(
        ctx: &OpCtx,
        x: &[T],
        shape: &[usize],
        a: usize,
        log: bool,
        out: &mut [T],
    ) -> Result<(), OpFail> {
        let mut red = vec![false; shape.len()];
        red[a] = true;
        match trailing_perm(shape, &red) {
            None => softmax(x, shape, a as i64, log, out)?,
            Some(perm) => {
                let (buf, ps) = permuted(ctx, x, shape, &perm)?;
                let mut y = ctx.scratch::<T>(x.len())?;
                softmax(
                    buf.as_slice(),
                    &ps,
                    ps.len() as i64 - 1,
                    log,
                    y.as_mut_slice(),
                )?;
                drop(buf);
                // Back to the input layout: `inv[perm[i]] = i`.
                let mut inv = vec![0; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inv[p] = i;
                }
                let st = istrides(&ps);
                let ist: Vec<isize> = inv.iter().map(|&i| st[i]).collect();
                strided_copy(y.as_slice(), 0, shape, &ist, out)?;
            }
        }
        Ok(())
    }
    match x.dtype {
        DataType::F32 => go::<f32>(ctx, x.data()?, &shape, a, log, out.data_mut()?)?,
        DataType::F64 => go::<f64>(ctx, x.data()?, &shape, a, log, out.data_mut()?)?,
        DataType::F16 | DataType::BF16 => {
            let w = widen(ctx, x)?;
            let mut y = ctx.scratch::<f32>(x.numel())?;
            go::<f32>(ctx, w.as_slice(), &shape, a, log, y.as_mut_slice())?;
            narrow(y.as_slice(), &mut out)?;
        }
        d => return unsupported(format!("{} on {d}", ctx.node.op)),
    }
    Ok(vec![out])
}

/// Stats outputs' shape: `shape[..axis]` then ones.
fn stats_shape(shape: &[usize], a: usize) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if i < a { d } else { 1 })
        .collect()
}

fn layer_norm_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, scale, bias) = (req(inputs, 0)?, req(inputs, 1)?, opt(inputs, 2));
    if scale.dtype != x.dtype || bias.is_some_and(|b| b.dtype != x.dtype) {
        return fail("LayerNormalization X, Scale and B must share one type");
    }
    let a = axis(ctx.int("axis", -1)?, x.rank())?;
    let eps = ctx.float("epsilon", 1e-5)?;
    let n: usize = x.shape[a..].iter().product();
    for (name, t) in [("Scale", Some(scale)), ("B", bias)] {
        if let Some(t) = t {
            if t.numel() != n && t.numel() != 1 {
                return fail(format!(
                    "LayerNormalization {name} {:?} does not match X {:?} from axis {a}",
                    t.shape, x.shape
                ));
            }
        }
    }
    let n_out = ctx.node.outputs.len();
    let want = |i: usize| ctx.node.outputs.get(i).is_some_and(|o| o.is_some());
    let ss = stats_shape(&x.shape, a);
    let stat_type = if x.dtype == DataType::F64 {
        DataType::F64
    } else {
        DataType::F32
    };
    // Every row of Y is written (the statistics are not when the normalized size is 0).
    let mut out = ctx.alloc_for_overwrite(x.dtype, &x.shape)?;
    let mut mean = if want(1) {
        Some(ctx.alloc(stat_type, &ss)?)
    } else {
        None
    };
    let mut inv = if want(2) {
        Some(ctx.alloc(stat_type, &ss)?)
    } else {
        None
    };
    match x.dtype {
        DataType::F32 | DataType::F16 | DataType::BF16 => {
            let half = x.dtype != DataType::F32;
            let wx = if half { Some(widen(ctx, x)?) } else { None };
            let ws = if half { Some(widen(ctx, scale)?) } else { None };
            let wb = if half {
                bias.map(|b| widen(ctx, b)).transpose()?
            } else {
                None
            };
            let xs = match &wx {
                Some(w) => w.as_slice(),
                None => x.data::<f32>()?,
            };
            let sc = match &ws {
                Some(w) => w.as_slice(),
                None => scale.data::<f32>()?,
            };
            let bs = match (&wb, bias) {
                (Some(w), _) => Some(w.as_slice()),
                (None, Some(b)) if !half => Some(b.data::<f32>()?),
                _ => None,
            };
            let stats = NormStats {
                mean: mean.as_mut().map(|m| m.data_mut::<f32>()).transpose()?,
                inv_std: inv.as_mut().map(|m| m.data_mut::<f32>()).transpose()?,
            };
            if half {
                let mut y = ctx.scratch::<f32>(x.numel())?;
                layer_norm(xs, &x.shape, a as i64, eps, sc, bs, y.as_mut_slice(), stats)?;
                narrow(y.as_slice(), &mut out)?;
            } else {
                layer_norm(
                    xs,
                    &x.shape,
                    a as i64,
                    eps,
                    sc,
                    bs,
                    out.data_mut::<f32>()?,
                    stats,
                )?;
            }
        }
        DataType::F64 => {
            let stats = NormStats {
                mean: mean.as_mut().map(|m| m.data_mut::<f64>()).transpose()?,
                inv_std: inv.as_mut().map(|m| m.data_mut::<f64>()).transpose()?,
            };
            let b = bias.map(|b| b.data::<f64>()).transpose()?;
            layer_norm(
                x.data::<f64>()?,
                &x.shape,
                a as i64,
                eps as f64,
                scale.data()?,
                b,
                out.data_mut()?,
                stats,
            )?;
        }
        d => return unsupported(format!("LayerNormalization on {d}")),
    }
    let mut outs = vec![out];
    let empty = || Tensor::zeros(stat_type, &[0], None);
    if n_out > 1 {
        outs.push(match mean {
            Some(m) => m,
            None => empty()?,
        });
    }
    if n_out > 2 {
        outs.push(match inv {
            Some(m) => m,
            None => empty()?,
        });
    }
    Ok(outs)
}

fn rms_norm_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, scale) = (req(inputs, 0)?, req(inputs, 1)?);
    if scale.dtype != x.dtype {
        return fail("RMSNormalization X and scale must share one type");
    }
    let a = axis(ctx.int("axis", -1)?, x.rank())?;
    let eps = ctx.float("epsilon", 1e-5)?;
    let mut out = ctx.alloc(x.dtype, &x.shape)?;
    match x.dtype {
        DataType::F32 => rms_norm::<f32>(
            x.data()?,
            &x.shape,
            a as i64,
            eps,
            scale.data()?,
            out.data_mut()?,
        )?,
        DataType::F64 => rms_norm::<f64>(
            x.data()?,
            &x.shape,
            a as i64,
            eps as f64,
            scale.data()?,
            out.data_mut()?,
        )?,
        DataType::F16 | DataType::BF16 => {
            let (wx, ws) = (widen(ctx, x)?, widen(ctx, scale)?);
            let mut y = ctx.scratch::<f32>(x.numel())?;
            rms_norm::<f32>(
                wx.as_slice(),
                &x.shape,
                a as i64,
                eps,
                ws.as_slice(),
                y.as_mut_slice(),
            )?;
            narrow(y.as_slice(), &mut out)?;
        }
        d => return unsupported(format!("RMSNormalization on {d}")),
    }
    Ok(vec![out])
}

fn cumsum_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    copy_then(ctx, inputs, cumsum_over)
}

/// CumSum or CumProd over `out`, which holds the input: each element is read before it is written.
/// The running value starts at 0 (sum) or 1 (product) and follows the axis in order (reversed with
/// `reverse`), so every element is computed the same way whatever else is in the tensor.
fn cumsum_over(ctx: &OpCtx, inputs: &[Option<&Tensor>], out: &mut [u8]) -> Result<(), OpFail> {
    let x = req(inputs, 0)?;
    let op = ctx.node.op.as_str();
    let a = axis(
        scalar_i64(req(inputs, 1)?, &format!("{op} axis"))?,
        x.rank(),
    )?;
    let (excl, rev) = (ctx.int("exclusive", 0)? != 0, ctx.int("reverse", 0)? != 0);
    let outer: usize = x.shape[..a].iter().product();
    let d = x.shape[a];
    let inner: usize = x.shape[a + 1..].iter().product();
    let prod = op == "CumProd";
    macro_rules! go {
        ($T:ty, $add:expr, $mul:expr, $zero:expr, $one:expr) => {{
            let o = cast_mut::<$T>(out)?;
            let f: fn($T, $T) -> $T = if prod { $mul } else { $add };
            let start: $T = if prod { $one } else { $zero };
            for b in 0..outer {
                for i in 0..inner {
                    let mut acc: $T = start;
                    for s in 0..d {
                        let j = if rev { d - 1 - s } else { s };
                        let at = (b * d + j) * inner + i;
                        let v = o[at];
                        if excl {
                            o[at] = acc;
                            acc = f(acc, v);
                        } else {
                            acc = f(acc, v);
                            o[at] = acc;
                        }
                    }
                }
            }
        }};
    }
    match x.dtype {
        DataType::F32 => go!(f32, |p, q| p + q, |p, q| p * q, 0.0, 1.0),
        DataType::F64 => go!(f64, |p, q| p + q, |p, q| p * q, 0.0, 1.0),
        DataType::I32 => go!(i32, i32::wrapping_add, i32::wrapping_mul, 0, 1),
        DataType::I64 => go!(i64, i64::wrapping_add, i64::wrapping_mul, 0, 1),
        DataType::U32 => go!(u32, u32::wrapping_add, u32::wrapping_mul, 0, 1),
        DataType::U64 => go!(u64, u64::wrapping_add, u64::wrapping_mul, 0, 1),
        DataType::F16 => go!(
            f16,
            |p, q| f16::from_f32(p.to_f32() + q.to_f32()),
            |p, q| f16::from_f32(p.to_f32() * q.to_f32()),
            f16::ZERO,
            f16::ONE
        ),
        DataType::BF16 => go!(
            bf16,
            |p, q| bf16::from_f32(p.to_f32() + q.to_f32()),
            |p, q| bf16::from_f32(p.to_f32() * q.to_f32()),
            bf16::ZERO,
            bf16::ONE
        ),
        dt => return unsupported(format!("{op} on {dt}")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::*;
    use memplan_ir::graph::AttrValue;
    use proptest::prelude::*;

    fn f32s(t: &Tensor) -> Vec<f32> {
        t.data::<f32>().unwrap().to_vec()
    }

    #[test]
    fn reduce_forms() {
        let x = t_f32(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let ax = |v: &[i64]| t_i64(&[v.len()], v);
        let o = run_op("ReduceSum", &[], &[Some(&x), Some(&ax(&[0]))], 1).unwrap();
        assert_eq!(o[0].shape, [1, 3]);
        assert_eq!(f32s(&o[0]), [5., 7., 9.]);
        let o = run_op(
            "ReduceMax",
            &[("keepdims", AttrValue::Int(0))],
            &[Some(&x), Some(&ax(&[-1]))],
            1,
        )
        .unwrap();
        assert_eq!(o[0].shape, [2]);
        assert_eq!(f32s(&o[0]), [3., 6.]);
        let o = run_op("ReduceMean", &[], &[Some(&x)], 1).unwrap();
        assert_eq!(f32s(&o[0]), [3.5]);
        let o = run_op(
            "ReduceSum",
            &[("noop_with_empty_axes", AttrValue::Int(1))],
            &[Some(&x)],
            1,
        )
        .unwrap();
        assert_eq!(f32s(&o[0]), f32s(&x));
        let o = run_op(
            "ReduceLogSumExp",
            &[("keepdims", AttrValue::Int(0))],
            &[Some(&x), Some(&ax(&[1]))],
            1,
        )
        .unwrap();
        let want = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln() as f32;
        assert!((f32s(&o[0])[0] - want).abs() < 1e-6);
        // Opset 13: ReduceMax axes come from the attribute.
        let o = run_op_at(
            "ReduceMax",
            &[("axes", AttrValue::Ints(vec![0]))],
            &[Some(&x)],
            1,
            13,
            false,
        )
        .unwrap();
        assert_eq!(f32s(&o[0]), [4., 5., 6.]);
        assert!(run_op("ReduceSum", &[], &[Some(&x), Some(&ax(&[2]))], 1).is_err());
        let i = t_i64(&[3], &[3, -1, 9]);
        let o = run_op("ArgMax", &[("keepdims", AttrValue::Int(0))], &[Some(&i)], 1).unwrap();
        assert_eq!(o[0].data::<i64>().unwrap(), &[2]);
        let o = run_op("ArgMin", &[], &[Some(&x)], 1).unwrap();
        assert_eq!(o[0].data::<i64>().unwrap(), &[0, 0, 0]);
    }

    #[test]
    fn softmax_layernorm_cumsum() {
        let x = t_f32(&[2, 2], &[0., 0., 1., 1.]);
        let o = run_op("Softmax", &[("axis", AttrValue::Int(0))], &[Some(&x)], 1).unwrap();
        let e = 1.0 / (1.0 + 1f32.exp());
        assert_eq!(f32s(&o[0]), [e, e, 1.0 - e, 1.0 - e]);
        let o = run_op("Softmax", &[], &[Some(&x)], 1).unwrap();
        assert_eq!(f32s(&o[0]), [0.5; 4]);
        let o = run_op_at(
            "Softmax",
            &[("axis", AttrValue::Int(0))],
            &[Some(&x)],
            1,
            11,
            false,
        )
        .unwrap();
        assert_eq!(f32s(&o[0]).iter().sum::<f32>(), 1.0);
        let ln = run_op(
            "LayerNormalization",
            &[],
            &[
                Some(&t_f32(&[2, 2], &[1., 3., 5., 5.])),
                Some(&t_f32(&[2], &[1., 2.])),
                Some(&t_f32(&[2], &[0., 1.])),
            ],
            3,
        )
        .unwrap();
        let y = f32s(&ln[0]);
        assert!(
            (y[0] + 1.0).abs() < 1e-4 && (y[1] - 3.0).abs() < 1e-4,
            "{y:?}"
        );
        assert_eq!(y[2..], [0., 1.]);
        assert_eq!(ln[1].shape, [2, 1]);
        assert_eq!(f32s(&ln[1]), [2., 5.]);
        let c = run_op(
            "CumSum",
            &[("exclusive", AttrValue::Int(1))],
            &[Some(&t_i64(&[3], &[1, 2, 3])), Some(&t_i64(&[], &[0]))],
            1,
        )
        .unwrap();
        assert_eq!(c[0].data::<i64>().unwrap(), &[0, 1, 3]);
        let c = run_op(
            "CumSum",
            &[("reverse", AttrValue::Int(1))],
            &[Some(&t_i64(&[3], &[1, 2, 3])), Some(&t_i64(&[], &[0]))],
            1,
        )
        .unwrap();
        assert_eq!(c[0].data::<i64>().unwrap(), &[6, 5, 3]);
    }

    proptest! {
        #[test]
        fn reduce_chunk_identity(
            d0 in 1usize..5, d1 in 1usize..40, d2 in 1usize..6, red in 0usize..3,
            cuts in prop::collection::vec(any::<usize>(), 0..4), seed in any::<u64>(), op_pick in 0usize..4,
        ) {
            let x = t_f32(&[d0, d1, d2], &rand_f32(d0 * d1 * d2, seed));
            let ops = ["ReduceSum", "ReduceLogSumExp", "ReduceMax", "ReduceL2"];
            let axes = t_i64(&[1], &[red as i64]);
            for keep in 0..3 {
                if keep == red { continue; }
                check_chunks(ops[op_pick], &[], &[&x, &axes], &[Some(keep), None], keep, &cuts).unwrap();
            }
            let attrs = [("axis", AttrValue::Int(red as i64))];
            for keep in 0..3 {
                if keep == red { continue; }
                check_chunks("Softmax", &attrs, &[&x], &[Some(keep)], keep, &cuts).unwrap();
                check_chunks("ArgMax", &attrs, &[&x], &[Some(keep)], keep, &cuts).unwrap();
            }
            let scale = t_f32(&[d2], &rand_f32(d2, seed + 3));
            check_chunks("LayerNormalization", &[], &[&x, &scale], &[Some(0), None], 0, &cuts).unwrap();
            check_chunks("LayerNormalization", &[], &[&x, &scale], &[Some(1), None], 1, &cuts).unwrap();
        }
    }

    /// CumSum and CumProd pass every axis but their own, in either direction, exclusive or not.
    #[test]
    fn cumulative_flows_match_their_kernels() {
        use crate::ops::testutil::check_flow;
        let x = t_f32(&[3, 5, 4], &rand_f32(60, 3));
        let axis = t_i64(&[], &[1]);
        for rev in 0..2 {
            for excl in 0..2 {
                let attrs = [
                    ("reverse", AttrValue::Int(rev)),
                    ("exclusive", AttrValue::Int(excl)),
                ];
                check_flow("CumSum", &attrs, &[&x, &axis], 1, &[0, 2], &[1, 2]).unwrap();
            }
        }
        check_flow("CumProd", &[], &[&x, &axis], 1, &[0, 2], &[2]).unwrap();
    }
}
