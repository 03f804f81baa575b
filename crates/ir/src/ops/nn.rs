//! Op family: neural-network layers: normalizations over channels (`BatchNormalization`,
//! `InstanceNormalization`, `GroupNormalization`), `Conv`, pooling
//! (`MaxPool`, `AveragePool`, `Global*Pool`) and `Dropout` (the identity at inference; in training
//! mode its mask is drawn by `exec`'s counter-based generator, no scratch).

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::infer::{invalid, Fact, InferCtx, OpError};

use super::axes::AxisFlow;
use super::{is_half, numel, Mem, OpDef, ONE, THREE};
use crate::graph::{AttrValue, Node};

pub const DEFS: &[OpDef] = &[
    OpDef::new(
        "BatchNormalization",
        (5, 5),
        batch_norm,
        with_scratch(batch_norm_scratch),
    )
    .flow(batch_norm_flow),
    OpDef::new(
        "InstanceNormalization",
        THREE,
        same_as_input,
        with_scratch(widened_scratch),
    )
    .flow(instance_norm_flow),
    OpDef::new("GroupNormalization", THREE, same_as_input, Mem::NEW).flow(group_norm_flow),
    OpDef::new("Conv", (2, 3), conv, with_scratch(conv_scratch))
        .flow(conv_flow)
        .contracted(conv_k),
    OpDef::new("MaxPool", ONE, pool, with_scratch(widened_scratch)).flow(pool_flow),
    OpDef::new("AveragePool", ONE, pool, with_scratch(widened_scratch)).flow(pool_flow),
    OpDef::new("LpPool", ONE, pool, with_scratch(widened_scratch)).flow(pool_flow),
    OpDef::new(
        "GlobalAveragePool",
        ONE,
        global_pool,
        with_scratch(widened_scratch),
    )
    .flow(pool_flow),
    OpDef::new(
        "GlobalMaxPool",
        ONE,
        global_pool,
        with_scratch(widened_scratch),
    )
    .flow(pool_flow),
    OpDef::new(
        "GlobalLpPool",
        ONE,
        global_pool,
        with_scratch(widened_scratch),
    )
    .flow(pool_flow),
    // Inputs: data, ratio, training_mode (opset 12+).
    OpDef::new("Dropout", (1, 3), dropout, Mem::NEW).flow(dropout_flow),
    // Computed per element in f64 (exec `kernels::scalar_norm`): no scratch.
    OpDef::new("LpNormalization", ONE, same_float, Mem::NEW).flow(lp_norm_flow),
    OpDef::new("LRN", ONE, same_as_input, Mem::NEW).flow(lrn_flow),
    OpDef::new("MeanVarianceNormalization", ONE, same_float, Mem::NEW).flow(mvn_flow),
    OpDef::new("Swish", ONE, same_float, Mem::NEW).flow(super::axes::first_input),
    // Gathers in f64 (exec `kernels::conv_transpose`): no scratch.
    OpDef::new("ConvTranspose", (2, 3), conv_transpose, Mem::NEW).flow(conv_transpose_flow),
    OpDef::new("Col2Im", THREE, col2im, Mem::NEW),
    OpDef::new("MaxUnpool", (2, 3), max_unpool, Mem::NEW),
    // Output like Conv's; computed per output in f64, no scratch.
    OpDef::new("DeformConv", (3, 5), conv, Mem::NEW),
];

/// MaxUnpool: `output_shape` (input 2, its values needed) or `[N, C, (in - 1) * stride + kernel -
/// pad_begin - pad_end]`.
fn max_unpool(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    if x.len() < 3 {
        return invalid(format!("X has rank {}, needs at least 3", x.len()));
    }
    if ctx.opt_input(2).is_some() {
        return match ctx.known_ints(2) {
            Some(s) if s.len() == x.len() => Ok(vec![Fact::new(t, s)]),
            Some(s) => invalid(format!(
                "output_shape has {} entries, needs {}",
                s.len(),
                x.len()
            )),
            None => Err(OpError::Unknown("MaxUnpool's output_shape values".into())),
        };
    }
    let nd = x.len() - 2;
    let kernel = ctx
        .attr_ints("kernel_shape")?
        .filter(|k| k.len() == nd)
        .ok_or_else(|| OpError::BadAttr(format!("kernel_shape with {nd} entries is required")))?;
    let strides = per_axis(ctx, "strides", nd, 1)?;
    let pads = match ctx.attr_ints("pads")? {
        Some(p) if p.len() == 2 * nd => p,
        Some(p) => return invalid(format!("pads has {} entries, expected {}", p.len(), 2 * nd)),
        None => vec![0; 2 * nd],
    };
    let mut out = x[..2].to_vec();
    for a in 0..nd {
        out.push(
            &(&(&x[a + 2] - &Expr::one()) * &Expr::int(strides[a]))
                + &Expr::int(kernel[a] - pads[a] - pads[a + nd]),
        );
    }
    Ok(vec![Fact::new(t, out)])
}

/// `name` with one entry per spatial axis, or `default` everywhere.
fn per_axis(ctx: &InferCtx, name: &str, nd: usize, default: i64) -> Result<Vec<i64>, OpError> {
    match ctx.attr_ints(name)? {
        None => Ok(vec![default; nd]),
        Some(v) if v.len() == nd => Ok(v),
        Some(v) => invalid(format!("'{name}' has {} entries, expected {nd}", v.len())),
    }
}

/// ConvTranspose: `[N, M, out..]`, `M = W[1] * group`; each `out` is `output_shape` when given,
/// `in * stride` with SAME_* auto_pad, else `stride * (in - 1) + output_padding + (k - 1) *
/// dilation + 1 - pad_begin - pad_end`.
fn conv_transpose(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let w = ctx.shape(1)?.to_vec();
    let t = ctx.dtype(0)?;
    if x.len() < 3 || w.len() != x.len() {
        return invalid(format!(
            "X has rank {} and W rank {}; both must be the same and >= 3",
            x.len(),
            w.len()
        ));
    }
    let nd = x.len() - 2;
    let kernel: Vec<i64> = match ctx.attr_ints("kernel_shape")? {
        Some(k) if k.len() == nd => k,
        Some(k) => return invalid(format!("kernel_shape {k:?} needs {nd} entries")),
        None => w[2..]
            .iter()
            .map(|d| {
                d.as_const()
                    .ok_or_else(|| OpError::Unsupported("symbolic kernel shape".into()))
            })
            .collect::<Result<_, _>>()?,
    };
    let group = ctx.attr_int("group", 1)?;
    if group < 1 {
        return Err(OpError::BadAttr(format!("group {group} must be >= 1")));
    }
    let strides = per_axis(ctx, "strides", nd, 1)?;
    let dil = per_axis(ctx, "dilations", nd, 1)?;
    let op = per_axis(ctx, "output_padding", nd, 0)?;
    if strides.iter().chain(&dil).chain(&kernel).any(|&v| v < 1) {
        return invalid("kernel, strides and dilations must be >= 1");
    }
    let auto_pad = ctx
        .attr_string("auto_pad")?
        .unwrap_or_else(|| "NOTSET".into());
    let out_shape = ctx.attr_ints("output_shape")?;
    let pads = match ctx.attr_ints("pads")? {
        Some(p) if p.len() == 2 * nd => p,
        Some(p) => return invalid(format!("pads has {} entries, expected {}", p.len(), 2 * nd)),
        None => vec![0; 2 * nd],
    };
    let mut out = vec![x[0].clone(), &w[1] * &Expr::int(group)];
    for a in 0..nd {
        let d = &x[a + 2];
        let e = match (&out_shape, auto_pad.as_str()) {
            (Some(o), _) if o.len() >= nd => Expr::int(o[o.len() - nd + a]),
            (Some(o), _) => {
                return invalid(format!("output_shape {o:?} has fewer than {nd} entries"))
            }
            (None, "SAME_UPPER" | "SAME_LOWER") => d * &Expr::int(strides[a]),
            (None, "VALID") => {
                &(&(d - &Expr::one()) * &Expr::int(strides[a]))
                    + &Expr::int(op[a] + (kernel[a] - 1) * dil[a] + 1)
            }
            (None, "NOTSET" | "") => {
                &(&(d - &Expr::one()) * &Expr::int(strides[a]))
                    + &Expr::int(op[a] + (kernel[a] - 1) * dil[a] + 1 - pads[a] - pads[a + nd])
            }
            (None, other) => {
                return Err(OpError::BadAttr(format!(
                    "auto_pad '{other}' is not a known mode"
                )))
            }
        };
        out.push(e);
    }
    Ok(vec![Fact::new(t, out)])
}

/// Col2Im: `[N, C, image..]` with `C = input[1] / prod(block_shape)`; needs the values of
/// `image_shape` and `block_shape`.
fn col2im(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    if x.len() != 3 {
        return invalid(format!(
            "input has rank {}, needs 3 (N, C*prod(block), L)",
            x.len()
        ));
    }
    let (Some(image), Some(block)) = (ctx.known_ints(1), ctx.known_ints(2)) else {
        return Err(OpError::Unknown(
            "Col2Im's image_shape and block_shape values".into(),
        ));
    };
    if image.len() != block.len() {
        return invalid("image_shape and block_shape must have the same length");
    }
    let kp = Expr::product(block.iter());
    let mut out = vec![x[0].clone(), x[1].floor_div(&kp)];
    out.extend(image);
    Ok(vec![Fact::new(t, out)])
}

/// Y like X, any rank.
fn same_float(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    if !t.is_float() {
        return invalid(format!("input must be a float type, got {t}"));
    }
    Ok(vec![Fact::new(t, x)])
}

/// BatchNormalization: Y like X; in training mode also `running_mean` and `running_var` `[C]`.
fn batch_norm(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let mut out = same_as_input(ctx)?;
    let c = ctx.shape(0)?[1].clone();
    let t = ctx.dtype(0)?;
    out.push(Fact::new(t, vec![c.clone()]));
    out.push(Fact::new(t, vec![c]));
    Ok(out)
}

/// BatchNormalization: inference mode as [`widened_scratch`]; training mode runs in f64, no scratch.
fn batch_norm_scratch(
    node: &Node,
    opset: i64,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Expr {
    if matches!(node.attr("training_mode"), Some(AttrValue::Int(t)) if *t != 0) {
        return Expr::zero();
    }
    widened_scratch(node, opset, inputs, outputs)
}

const fn with_scratch(f: super::ScratchFn) -> Mem {
    Mem {
        scratch: Some(f),
        ..Mem::NEW
    }
}

// ---- Scratch: what `exec::ops::nn` and `exec::ops::reduce` (the normalizations) allocate. ----
//
// f32/f64 kernels run on the tensors directly; f16/bf16 are widened to f32 in scratch (every float
// input) and the result is computed in an f32 scratch buffer, then rounded into the output.

/// Sum of the present facts' element counts; `None` when one is unknown.
fn numel_sum<'a>(fs: impl IntoIterator<Item = &'a Option<&'a Fact>>) -> Option<Expr> {
    let mut n = Expr::zero();
    for f in fs.into_iter().flatten() {
        n += numel(Some(f))?;
    }
    Some(n)
}

fn half_input(inputs: &[Option<&Fact>]) -> bool {
    inputs
        .first()
        .copied()
        .flatten()
        .and_then(|f| f.dtype)
        .is_some_and(is_half)
}

/// Batch/InstanceNormalization and the pools: f16/bf16 `4 * (sum of |inputs| + |Y|)`, else none.
pub(super) fn widened_scratch(
    _node: &Node,
    _opset: i64,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Expr {
    if !half_input(inputs) {
        return Expr::zero();
    }
    numel_sum(inputs.iter().chain(outputs.first()))
        .map(|n| n * 4)
        .unwrap_or_else(Expr::zero)
}

/// Elements of one im2col tile of `Conv` (the executor's `COL_TILE_ELEMS`).
pub const CONV_COL_TILE_ELEMS: i64 = 1 << 20;

/// Conv: one tile of the im2col buffer, `e * C/group * prod(kernel)` rows of whole lines of Y's last
/// spatial axis (as many as keep it within [`CONV_COL_TILE_ELEMS`], all of Y's at most), or where
/// one line is over it, of as many positions of a line as keep it within (one at least); none for a
/// 1x1 stride-1 unpadded kernel; f16/bf16 add `4 * (|X| + |W| + |B| + |Y|)`.
fn conv_scratch(
    node: &Node,
    opset: i64,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Expr {
    let col = || -> Option<Expr> {
        let x = inputs.first().copied().flatten()?;
        let w = inputs.get(1).copied().flatten()?.shape.as_ref()?;
        let y = outputs.first().copied().flatten()?.shape.as_ref()?;
        let e = super::compute_size(x.dtype?)?;
        let c = x.shape.as_ref()?.get(1)?;
        let ints = |name: &str| match node.attr(name) {
            Some(AttrValue::Ints(v)) => v.clone(),
            _ => Vec::new(),
        };
        let kernel: Vec<Expr> = match node.attr("kernel_shape") {
            Some(AttrValue::Ints(v)) => v.iter().map(|&k| Expr::int(k)).collect(),
            _ => w.get(2..)?.to_vec(),
        };
        let explicit = !matches!(
            node.attr("auto_pad"),
            Some(AttrValue::String(a)) if a.as_slice() != b"NOTSET"
        );
        let direct = kernel.iter().all(|k| k.as_const() == Some(1))
            && ints("strides").iter().all(|&s| s == 1)
            && (!explicit || ints("pads").iter().all(|&p| p == 0));
        if direct {
            return Some(Expr::zero());
        }
        let group = match node.attr("group") {
            Some(AttrValue::Int(g)) if *g >= 1 => *g,
            _ => 1,
        };
        // `C/group * prod(kernel)` rows of one tile of whole output lines: as many lines of `ol`
        // as keep the tile within `CONV_COL_TILE_ELEMS` elements, no more than the output has; where
        // none does (`lines` 0), `min(max(CAP / kdim, 1), ol)` positions of a line, which is then
        // below `ol` (the executor's `col_tile`).
        let kdim = c.floor_div(&Expr::int(group)) * Expr::product(kernel.iter());
        let out_sp = y.get(2..)?;
        let ol = out_sp.last()?;
        let cap = Expr::int(CONV_COL_TILE_ELEMS);
        let lines = cap.floor_div(&(&kdim * ol));
        let part = Expr::min(&Expr::max(&cap.floor_div(&kdim), &Expr::int(1)), ol);
        let cols = Expr::min(
            &Expr::max(&(lines * ol), &part),
            &Expr::product(out_sp.iter()),
        );
        Some(kdim * cols * e)
    };
    col().unwrap_or_else(Expr::zero) + widened_scratch(node, opset, inputs, outputs)
}

fn same_as_input(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    if x.len() < 2 {
        return invalid(format!(
            "input has rank {}, needs at least 2 (N, C, ...)",
            x.len()
        ));
    }
    Ok(vec![Fact::new(t, x)])
}

fn dropout(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    // The mask is bool from opset 10 on, of the data's type before.
    let mask = if ctx.opset >= 10 { DataType::Bool } else { t };
    Ok(vec![Fact::new(t, x.clone()), Fact::new(mask, x)])
}

/// Spatial output extents of a sliding window: per spatial axis `i`, input `d`, kernel `k`.
fn window_out(
    ctx: &InferCtx,
    spatial: &[Expr],
    kernel: &[i64],
    ceil_mode: bool,
) -> Result<Vec<Expr>, OpError> {
    let n = spatial.len();
    if kernel.len() != n {
        return invalid(format!(
            "kernel has {} dims, the input has {n} spatial dims",
            kernel.len()
        ));
    }
    let strides = ctx.attr_ints("strides")?.unwrap_or_else(|| vec![1; n]);
    let dil = ctx.attr_ints("dilations")?.unwrap_or_else(|| vec![1; n]);
    if strides.len() != n || dil.len() != n {
        return invalid(format!("strides/dilations must have {n} entries"));
    }
    if strides.iter().chain(&dil).chain(kernel).any(|&v| v < 1) {
        return invalid("kernel, strides and dilations must be >= 1");
    }
    let auto_pad = ctx
        .attr_string("auto_pad")?
        .unwrap_or_else(|| "NOTSET".into());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let d = &spatial[i];
        let ek = Expr::int(dil[i] * (kernel[i] - 1) + 1);
        let s = Expr::int(strides[i]);
        let o = match auto_pad.as_str() {
            "SAME_UPPER" | "SAME_LOWER" => d.ceil_div(&s),
            "VALID" => (&(d - &ek) + &Expr::one()).ceil_div(&s),
            "NOTSET" | "" => {
                let pads = ctx.attr_ints("pads")?.unwrap_or_else(|| vec![0; 2 * n]);
                if pads.len() != 2 * n {
                    return invalid(format!("pads must have {} entries", 2 * n));
                }
                let span = &(d + &Expr::int(pads[i] + pads[i + n])) - &ek;
                let q = if ceil_mode {
                    span.ceil_div(&s)
                } else {
                    span.floor_div(&s)
                };
                &q + &Expr::one()
            }
            other => {
                return Err(OpError::BadAttr(format!(
                    "auto_pad '{other}' is not a known mode"
                )))
            }
        };
        out.push(o);
    }
    Ok(out)
}

/// Conv sums over a filter: W's input channels (per group) and kernel window.
fn conv_k(_node: &Node, inputs: &[Option<&Fact>]) -> Option<Expr> {
    let w = super::axes::in_shape(inputs, 1)?;
    Some(Expr::product(w.get(1..)?))
}

/// Conv: batch entries are independent; with one group, output channel `m` reads filter `m` (and
/// bias `m`) and every input channel; a 1x1 kernel with unit strides and no padding makes each
/// output position from the input position under it. (The executor's product computes each output
/// element the same way whatever rows or columns it is asked for, so any of these slices is
/// bit-identical.)
fn conv_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<super::axes::AxisFlow>>> {
    use super::axes::{attr_int, attr_ints, in_shape, out_rank, AxisFlow};
    let r0 = out_rank(outputs, 0)?;
    let (x, w) = (in_shape(inputs, 0)?, in_shape(inputs, 1)?);
    if r0 < 3 || x.len() != r0 || w.len() != r0 {
        return None;
    }
    let split = |xa: Option<usize>, wa: Option<usize>| {
        let mut v = vec![xa, wa];
        if inputs.len() > 2 {
            v.push(wa);
        }
        AxisFlow::Split(v)
    };
    let ones = |v: Option<Vec<i64>>| v.is_none_or(|v| v.iter().all(|&k| k == 1));
    let kernel_one =
        w[2..].iter().all(|d| *d == Expr::one()) && ones(attr_ints(node, "kernel_shape"));
    let unpadded = match node.attr("auto_pad") {
        Some(AttrValue::String(p)) if p.as_slice() != b"NOTSET" => true,
        _ => attr_ints(node, "pads").is_none_or(|p| p.iter().all(|&q| q == 0)),
    };
    let pointwise = kernel_one && ones(attr_ints(node, "strides")) && unpadded;
    let mut flows = vec![split(Some(0), None)];
    flows.push(if attr_int(node, "group", 1) == 1 {
        split(None, Some(0))
    } else {
        AxisFlow::Mixed
    });
    flows.extend((2..r0).map(|d| {
        if pointwise {
            split(Some(d), None)
        } else {
            AxisFlow::Mixed
        }
    }));
    Some(vec![flows])
}

/// Output axis `o` of a layer over `[N, C, spatial...]`: input 0's axis `o`, and each other input
/// `k` (a `[C]` scale, bias, mean or variance) its axis 0 when `o` is the channel axis and
/// `per_channel` says so (read whole where its extent is 1), whole otherwise.
fn layer_axis(inputs: &[Option<&Fact>], o: usize, per_channel: bool) -> AxisFlow {
    let mut v = vec![None; inputs.len().max(1)];
    v[0] = Some(o);
    if o == 1 && per_channel {
        for (k, slot) in v.iter_mut().enumerate().skip(1) {
            let s = super::axes::in_shape(inputs, k);
            *slot = s.filter(|s| s.len() == 1 && s[0] != Expr::one()).map(|_| 0);
        }
    }
    AxisFlow::Split(v)
}

/// The flow of a layer over `[N, C, spatial...]` (rank 2 or more): the batch always splits, the
/// channels where `channels` (with the per-channel inputs as `per_channel` says), the spatial axes
/// where `spatial`; the others are mixed.
fn layer_flow(
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
    channels: bool,
    per_channel: bool,
    spatial: bool,
) -> Option<Vec<AxisFlow>> {
    let r0 = super::axes::out_rank(outputs, 0)?;
    if r0 < 2 || super::axes::in_shape(inputs, 0)?.len() != r0 {
        return None;
    }
    Some(
        (0..r0)
            .map(|o| match o {
                0 => layer_axis(inputs, 0, false),
                1 if channels => layer_axis(inputs, 1, per_channel),
                d if d >= 2 && spatial => layer_axis(inputs, d, false),
                _ => AxisFlow::Mixed,
            })
            .collect(),
    )
}

/// ConvTranspose: each output element gathers from its own batch entry, and (one group) output
/// channel `o` reads `W[:, o]` and `B[o]` alone: the batch and, with `group` 1, the channels pass
/// through; the spatial axes are mixed.
fn conv_transpose_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = super::axes::out_rank(outputs, 0)?;
    if r0 < 3 || super::axes::in_shape(inputs, 0)?.len() != r0 {
        return None;
    }
    let channels = super::axes::attr_int(node, "group", 1) == 1;
    let flows = (0..r0)
        .map(|o| match o {
            0 => AxisFlow::Split([Some(0), None, None][..inputs.len()].to_vec()),
            1 if channels => AxisFlow::Split([None, Some(1), Some(0)][..inputs.len()].to_vec()),
            _ => AxisFlow::Mixed,
        })
        .collect();
    Some(vec![flows])
}

/// Whether the node writes an output past its first (`MaxPool`'s `Indices`, a training
/// `BatchNormalization`'s running statistics).
fn more_outputs(node: &Node) -> bool {
    node.outputs.iter().skip(1).any(Option::is_some)
}

/// BatchNormalization at inference: element `x` of channel `c` becomes
/// `(x - mean[c]) / sqrt(var[c] + eps) * scale[c] + bias[c]`, so every axis splits, the channels
/// with their slices of the four `[C]` inputs. In training mode the statistics are over the batch
/// and spatial axes: no flow.
fn batch_norm_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let training = matches!(node.attr("training_mode"), Some(AttrValue::Int(t)) if *t != 0);
    if training || more_outputs(node) {
        return None;
    }
    Some(vec![layer_flow(inputs, outputs, true, true, true)?])
}

/// InstanceNormalization: statistics per batch entry and channel over the spatial axes.
fn instance_norm_flow(
    _node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    Some(vec![layer_flow(inputs, outputs, true, true, false)?])
}

/// GroupNormalization: statistics per batch entry over groups of channels and the spatial axes.
fn group_norm_flow(
    _node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    Some(vec![layer_flow(inputs, outputs, false, false, false)?])
}

/// Pools: each output channel of each batch entry pools its own input plane; a window mixes the
/// spatial axes. A `MaxPool` that writes `Indices` (flat positions in the whole input) has no flow.
fn pool_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    if more_outputs(node) {
        return None;
    }
    Some(vec![layer_flow(inputs, outputs, true, false, false)?])
}

/// LRN: a window across the channels of one position.
fn lrn_flow(
    _node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    Some(vec![layer_flow(inputs, outputs, false, false, true)?])
}

/// LpNormalization: the norm along `axis`.
fn lp_norm_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = super::axes::out_rank(outputs, 0)?;
    Some(vec![super::axes::along_axis(node, inputs.len(), r0)?])
}

/// MeanVarianceNormalization: statistics over `axes` (`[0, 2, 3]` by default).
fn mvn_flow(
    node: &Node,
    _inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    use super::axes::{attr_ints, norm, out_rank, pass_through};
    let r0 = out_rank(outputs, 0)?;
    let axes = attr_ints(node, "axes").unwrap_or_else(|| vec![0, 2, 3]);
    let mixed = axes
        .iter()
        .map(|&a| norm(a, r0))
        .collect::<Option<Vec<usize>>>()?;
    Some(vec![pass_through(1, r0, &mixed)])
}

/// Dropout without `training_mode` is the identity (its mask all true): every output follows the
/// data, the ratio read whole. With `training_mode` its mask may be drawn: no flow.
fn dropout_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    use super::axes::{out_rank, pass_through};
    if node.inputs.get(2).is_some_and(Option::is_some) {
        return None;
    }
    let r0 = out_rank(outputs, 0)?;
    Some(
        (0..outputs.len())
            .map(|_| pass_through(inputs.len(), r0, &[]))
            .collect(),
    )
}

fn conv(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    Ok(vec![Fact::new(t, conv_shape(ctx, 0, 1)?)])
}

/// The output shape of a convolution of input `xi` by the weights `wi` (Conv, ConvInteger,
/// QLinearConv), from the attributes `kernel_shape`, `strides`, `dilations`, `pads`, `auto_pad`.
pub(super) fn conv_shape(ctx: &InferCtx, xi: usize, wi: usize) -> Result<Vec<Expr>, OpError> {
    let x = ctx.shape(xi)?.to_vec();
    let w = ctx.shape(wi)?.to_vec();
    if x.len() < 3 || w.len() != x.len() {
        return invalid(format!(
            "X has rank {} and W rank {}; both must be the same and >= 3",
            x.len(),
            w.len()
        ));
    }
    let kernel = match ctx.attr_ints("kernel_shape")? {
        Some(k) => k,
        None => w[2..]
            .iter()
            .map(|d| {
                d.as_const()
                    .ok_or_else(|| OpError::Unsupported("symbolic kernel shape".into()))
            })
            .collect::<Result<_, _>>()?,
    };
    let mut out = vec![x[0].clone(), w[0].clone()];
    out.extend(window_out(ctx, &x[2..], &kernel, false)?);
    Ok(out)
}

fn pool(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    if x.len() < 3 {
        return invalid(format!(
            "input has rank {}, needs at least 3 (N, C, spatial...)",
            x.len()
        ));
    }
    let kernel = ctx
        .attr_ints("kernel_shape")?
        .ok_or_else(|| OpError::BadAttr("attribute 'kernel_shape' is required".into()))?;
    let ceil = ctx.attr_int("ceil_mode", 0)? != 0;
    let mut out = x[..2].to_vec();
    out.extend(window_out(ctx, &x[2..], &kernel, ceil)?);
    let mut facts = vec![Fact::new(t, out.clone())];
    if ctx.node.op == "MaxPool" {
        facts.push(Fact::new(DataType::I64, out));
    }
    Ok(facts)
}

fn global_pool(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    if x.len() < 3 {
        return invalid(format!(
            "input has rank {}, needs at least 3 (N, C, spatial...)",
            x.len()
        ));
    }
    let mut out = x[..2].to_vec();
    out.extend(std::iter::repeat_n(Expr::one(), x.len() - 2));
    Ok(vec![Fact::new(t, out)])
}

#[cfg(test)]
mod tests {
    use crate::graph::{AttrValue, Attribute, DeclDim, DeclType, Graph};
    use crate::infer::{fmt_shape, infer_graph};
    use crate::DataType;

    fn attr(name: &str, value: AttrValue) -> Attribute {
        Attribute {
            name: name.into(),
            value,
            doc: String::new(),
        }
    }

    #[test]
    fn layer_norm_and_conv_shapes() {
        let mut g = Graph::default();
        let n = DeclDim::Param("N".into());
        let x = g.add_input(
            "x",
            DeclType::tensor(
                DataType::F32,
                vec![n.clone(), DeclDim::Value(3), n.clone(), n],
            ),
        );
        let w = g.add_input(
            "w",
            DeclType::tensor(
                DataType::F32,
                vec![
                    DeclDim::Value(8),
                    DeclDim::Value(3),
                    DeclDim::Value(3),
                    DeclDim::Value(3),
                ],
            ),
        );
        let scale = g.add_input(
            "scale",
            DeclType::tensor(
                DataType::F32,
                vec![DeclDim::Param("N".into()), DeclDim::Param("N".into())],
            ),
        );
        let (_, ln) = g.add_node(
            "ln",
            "LayerNormalization",
            &[Some(x), Some(scale)],
            &["y", "mean", "inv"],
            vec![attr("axis", AttrValue::Int(2))],
        );
        let (_, cv) = g.add_node(
            "cv",
            "Conv",
            &[Some(ln[0]), Some(w)],
            &["c"],
            vec![
                attr("strides", AttrValue::Ints(vec![2, 2])),
                attr("pads", AttrValue::Ints(vec![1, 1, 1, 1])),
            ],
        );
        let (_, mp) = g.add_node(
            "mp",
            "MaxPool",
            &[Some(cv[0])],
            &["p"],
            vec![
                attr("kernel_shape", AttrValue::Ints(vec![2, 2])),
                attr("ceil_mode", AttrValue::Int(1)),
            ],
        );
        let f = infer_graph(&g, 18).unwrap();
        let shape = |v| fmt_shape(f.get(v).shape.as_ref().unwrap());
        assert_eq!(shape(ln[0]), "[N, 3, N, N]");
        assert_eq!(shape(ln[1]), "[N, 3, 1, 1]");
        // floor((N + 2 - 3) / 2) + 1, canonically (N + 1)//2
        assert_eq!(shape(cv[0]), "[N, 8, (N + 1)//2, (N + 1)//2]");
        let env = |s: &str| (s == "N").then_some(7);
        let p = f.get(mp[0]).shape.as_ref().unwrap();
        // Conv: 7 -> 4; ceil pool 2: ceil((4 - 2) / 1) + 1 = 3.
        assert_eq!(p[2].eval(&env).unwrap(), 3);
    }
}
