//! Reductions and normalizing maps: `Reduce*`, `Softmax`, `LogSoftmax`.

use memplan_ir::graph::ValueId;

use super::{dtype, known_ints, norm_axis, shape, Ctx, Grads, Rule};
use crate::builder::Builder;

pub(crate) const RULES: &[(&str, Rule)] = &[
    ("ReduceSum", reduce_sum),
    ("ReduceMean", reduce_mean),
    ("ReduceMax", reduce_extreme),
    ("ReduceMin", reduce_extreme),
    ("ReduceLogSumExp", reduce_logsumexp),
    ("ReduceSumSquare", reduce_sum_square),
    ("Softmax", softmax),
    ("LogSoftmax", log_softmax),
];

/// The reduced axes of a `Reduce*` node (sorted, non-negative), or `None` for a no-op reduction.
fn reduced_axes(b: &Builder, c: &Ctx, rank: usize) -> Result<Option<Vec<i64>>, String> {
    let listed = match c.ints("axes")? {
        Some(a) => Some(a),
        None => match c.opt_x(1) {
            Some(v) => Some(known_ints(b, v).ok_or("the reduced axes are not known constants")?),
            None => None,
        },
    };
    let listed = match listed {
        Some(a) if !a.is_empty() => a,
        _ => {
            if c.int("noop_with_empty_axes", 0)? != 0 {
                return Ok(None);
            }
            (0..rank as i64).collect()
        }
    };
    let mut axes: Vec<i64> = listed
        .iter()
        .map(|&a| norm_axis(a, rank).map(|x| x as i64))
        .collect::<Result<_, _>>()?;
    axes.sort_unstable();
    axes.dedup();
    Ok(Some(axes))
}

/// `v` (shaped like the reduction's output) broadcast back to the input `x`'s shape; also returns
/// the keepdims form of `v` when asked.
fn back(b: &mut Builder, c: &Ctx, v: ValueId, axes: &[i64]) -> Result<ValueId, String> {
    let x = c.x(0)?;
    let keep = c.int("keepdims", 1)? != 0;
    let vk = if keep { v } else { b.unsqueeze(v, axes) };
    let s = b.shape_of(x);
    Ok(b.op("Expand", &[vk, s], vec![]))
}

/// The keepdims form of an output-shaped value.
fn keepdims(b: &mut Builder, c: &Ctx, v: ValueId, axes: &[i64]) -> Result<ValueId, String> {
    Ok(if c.int("keepdims", 1)? != 0 {
        v
    } else {
        b.unsqueeze(v, axes)
    })
}

fn setup(b: &Builder, c: &Ctx) -> Result<(ValueId, Option<Vec<i64>>), String> {
    let dy = c.dy0()?;
    let rank = shape(b, c.x(0)?)?.len();
    Ok((dy, reduced_axes(b, c, rank)?))
}

fn reduce_sum(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let (dy, axes) = setup(b, c)?;
    let Some(axes) = axes else {
        return Ok(vec![Some(dy)]);
    };
    Ok(vec![Some(back(b, c, dy, &axes)?)])
}

fn reduce_mean(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let (dy, axes) = setup(b, c)?;
    let Some(axes) = axes else {
        return Ok(vec![Some(dy)]);
    };
    let (x, y) = (c.x(0)?, c.y(0)?);
    let dt = dtype(b, x)?;
    // The count of reduced elements: Size(x) / Size(y), as the input's type.
    let to = crate::builder::attr_int("to", dt.onnx_code() as i64);
    let nx = b.op("Size", &[x], vec![]);
    let ny = b.op("Size", &[y], vec![]);
    let nx = b.op("Cast", &[nx], vec![to.clone()]);
    let ny = b.op("Cast", &[ny], vec![to]);
    let n = b.op("Div", &[nx, ny], vec![]);
    let g = b.op("Div", &[dy, n], vec![]);
    Ok(vec![Some(back(b, c, g, &axes)?)])
}

/// `ReduceMax`/`ReduceMin`: the gradient goes to every element equal to the result.
fn reduce_extreme(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let (dy, axes) = setup(b, c)?;
    let Some(axes) = axes else {
        return Ok(vec![Some(dy)]);
    };
    let (x, y) = (c.x(0)?, c.y(0)?);
    let yk = back(b, c, y, &axes)?;
    let dyk = back(b, c, dy, &axes)?;
    let eq = b.op("Equal", &[x, yk], vec![]);
    let zero = b.scalar(dtype(b, x)?, 0.0);
    Ok(vec![Some(b.op("Where", &[eq, dyk, zero], vec![]))])
}

fn reduce_logsumexp(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let (dy, axes) = setup(b, c)?;
    let Some(axes) = axes else {
        return Ok(vec![Some(dy)]);
    };
    let (x, y) = (c.x(0)?, c.y(0)?);
    let yk = keepdims(b, c, y, &axes)?;
    let d = b.op("Sub", &[x, yk], vec![]);
    let p = b.op("Exp", &[d], vec![]);
    let dyk = back(b, c, dy, &axes)?;
    Ok(vec![Some(b.op("Mul", &[dyk, p], vec![]))])
}

fn reduce_sum_square(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let (dy, axes) = setup(b, c)?;
    let x = c.x(0)?;
    let two = b.scalar(dtype(b, x)?, 2.0);
    let x2 = b.op("Mul", &[x, two], vec![]);
    let dyk = match axes {
        Some(axes) => back(b, c, dy, &axes)?,
        None => dy,
    };
    Ok(vec![Some(b.op("Mul", &[dyk, x2], vec![]))])
}

/// The softmax axis (opset 13 semantics; older opsets only when the axis is the last one).
fn softmax_axis(b: &Builder, c: &Ctx) -> Result<i64, String> {
    let rank = shape(b, c.x(0)?)?.len();
    let default = if b.opset >= 13 { -1 } else { 1 };
    let axis = norm_axis(c.int("axis", default)?, rank)?;
    if b.opset < 13 && axis + 1 != rank {
        return Err(
            "Softmax before opset 13 over a non-last axis has no gradient rule".to_string(),
        );
    }
    Ok(axis as i64)
}

fn softmax(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let y = c.y(0)?;
    let axis = softmax_axis(b, c)?;
    // dx = y * (dy - sum(dy * y, axis)).
    let p = b.op("Mul", &[dy, y], vec![]);
    let s = b.reduce_sum(p, &[axis], true);
    let d = b.op("Sub", &[dy, s], vec![]);
    Ok(vec![Some(b.op("Mul", &[y, d], vec![]))])
}

fn log_softmax(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let y = c.y(0)?;
    let axis = softmax_axis(b, c)?;
    // dx = dy - exp(y) * sum(dy, axis).
    let s = b.reduce_sum(dy, &[axis], true);
    let e = b.op("Exp", &[y], vec![]);
    let t = b.op("Mul", &[e, s], vec![]);
    Ok(vec![Some(b.op("Sub", &[dy, t], vec![]))])
}
