//! Op family: image resampling: `Resize` (every mode, coordinate transformation, `axes`,
//! `keep_aspect_ratio_policy`, antialias), `Upsample` (Resize's predecessor: asymmetric
//! coordinates, nearest rounds down) and `GridSample` (2-D and volumetric).
//!
//! The kernels (`exec::ops::image`) compute each output element from its own taps and hold no
//! scratch.

use crate::dim::Expr;
use crate::infer::{invalid, Fact, InferCtx, Known, OpError};

use super::axes::AxisFlow;
use super::{Mem, OpDef};
use crate::graph::{AttrValue, Node};

pub const DEFS: &[OpDef] = &[
    // A chunk of an output sized by `sizes` reads sizes of its own (the chunk's shape).
    OpDef::new("Resize", (1, 4), resize, Mem::NEW)
        .flow(resize_axes)
        .shape_input(3),
    OpDef::new("Upsample", (1, 2), resize, Mem::NEW).flow(resize_axes),
    OpDef::new("GridSample", (2, 2), grid_sample, Mem::NEW).flow(grid_sample_axes),
];

/// Axis flow of `Resize`/`Upsample` (see [`resize_flow`]).
fn resize_axes(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = super::axes::out_rank(outputs, 0)?;
    Some(vec![resize_flow(node, inputs, r0)?])
}

/// Axis flow of `GridSample`: batch from both inputs, channels from `X`, output points from the
/// grid.
fn grid_sample_axes(
    _node: &Node,
    _inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = super::axes::out_rank(outputs, 0)?;
    Some(vec![(0..r0)
        .map(|o| match o {
            0 => AxisFlow::Split(vec![Some(0), Some(0)]),
            1 => AxisFlow::Split(vec![Some(1), None]),
            _ => AxisFlow::Split(vec![None, Some(o - 1)]),
        })
        .collect()])
}

/// `GridSample`: `X` is `(N, C, D1..Dk)`, `grid` is `(N, O1..Ok, k)`; `Y` is `(N, C, O1..Ok)` in
/// `X`'s type.
fn grid_sample(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let g = ctx.shape(1)?.to_vec();
    let t = ctx.dtype(0)?;
    if x.len() < 3 || g.len() != x.len() {
        return invalid(format!(
            "X has rank {} and grid rank {}: needs (N, C, spatial...) and (N, spatial..., {})",
            x.len(),
            g.len(),
            x.len().saturating_sub(2)
        ));
    }
    let k = x.len() - 2;
    if let Some(c) = g[k + 1].as_const() {
        if c != k as i64 {
            return invalid(format!("grid's last dim is {c}, X has {k} spatial dims"));
        }
    }
    let mut out = vec![x[0].clone(), x[1].clone()];
    out.extend_from_slice(&g[1..=k]);
    Ok(vec![Fact::new(t, out)])
}

/// Whether an optional input is given: present and not an empty tensor.
fn given(f: Option<&Fact>) -> bool {
    match f {
        None => false,
        Some(f) => !matches!(f.shape.as_deref(), Some([d]) if d.as_const() == Some(0)),
    }
}

/// Where a node's scale factors and output sizes come from: `(scales input, sizes input)`; `None`
/// for an input the op version does not have (opset-7 `Upsample` takes `scales` as an attribute).
pub fn operand_slots(op: &str, opset: i64) -> (Option<usize>, Option<usize>) {
    if op == "Upsample" {
        (if opset >= 9 { Some(1) } else { None }, None)
    } else if opset < 11 {
        (Some(1), None)
    } else {
        (Some(2), Some(3))
    }
}

/// The output extent of an axis of extent `d` scaled by `s`: `floor(d * s)` (computed in f64 as
/// the reference does), kept symbolic when `s` is an integer or the reciprocal of one.
pub fn scaled_dim(d: &Expr, s: f64) -> Result<Expr, OpError> {
    if !(s > 0.0 && s.is_finite()) {
        return invalid(format!("scale {s} must be positive"));
    }
    if let Some(c) = d.as_const() {
        return Ok(Expr::int((c as f64 * s).floor() as i64));
    }
    if s.fract() == 0.0 {
        return Ok(d * Expr::int(s as i64));
    }
    let k = (1.0 / s).round();
    if k >= 1.0 && 1.0 / k == s {
        return Ok(d.floor_div(&Expr::int(k as i64)));
    }
    Err(OpError::Unsupported(format!(
        "scale {s} of a symbolic extent {d} (only integer scales and their reciprocals stay symbolic)"
    )))
}

/// `Resize`/`Upsample`: the input's type; resized extents from `sizes` (with the aspect-ratio
/// policy) or `floor(extent * scale)`; axes not in `axes` keep their extent.
fn resize(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    let r = x.len();
    let axes: Vec<usize> = match ctx.attr_ints("axes")? {
        None => (0..r).collect(),
        Some(a) => {
            let mut out = Vec::new();
            for v in a {
                let ax = ctx.axis(v, r)?;
                if out.contains(&ax) {
                    return invalid(format!("axis {v} appears twice in 'axes'"));
                }
                out.push(ax);
            }
            out
        }
    };
    let (scales_at, sizes_at) = operand_slots(&ctx.node.op, ctx.opset);
    let mut out = x.clone();
    if let Some(i) = sizes_at.filter(|&i| given(ctx.opt_input(i))) {
        if scales_at.is_some_and(|s| given(ctx.opt_input(s))) {
            return invalid("only one of 'scales' and 'sizes' may be given");
        }
        let sizes = ctx
            .known_ints(i)
            .ok_or_else(|| OpError::Unknown(format!("contents of sizes (input {i})")))?;
        if sizes.len() != axes.len() {
            return invalid(format!(
                "sizes has {} entries for {} resized axes",
                sizes.len(),
                axes.len()
            ));
        }
        let policy = ctx
            .attr_string("keep_aspect_ratio_policy")?
            .unwrap_or_else(|| "stretch".into());
        match policy.as_str() {
            "stretch" => {
                for (k, &a) in axes.iter().enumerate() {
                    out[a] = sizes[k].clone();
                }
            }
            "not_larger" | "not_smaller" => {
                let consts = |v: &[Expr]| v.iter().map(Expr::as_const).collect::<Option<Vec<_>>>();
                let want = consts(&sizes).ok_or_else(|| {
                    OpError::Unsupported("keep_aspect_ratio_policy with symbolic sizes".into())
                })?;
                let have: Vec<Expr> = axes.iter().map(|&a| x[a].clone()).collect();
                let have = consts(&have).ok_or_else(|| {
                    OpError::Unsupported("keep_aspect_ratio_policy with symbolic extents".into())
                })?;
                let s = aspect_scale(&policy, &want, &have);
                for (k, &a) in axes.iter().enumerate() {
                    out[a] = Expr::int((s * have[k] as f64 + 0.5) as i64);
                }
            }
            p => {
                return Err(OpError::BadAttr(format!(
                    "unknown keep_aspect_ratio_policy '{p}'"
                )))
            }
        }
    } else {
        let scales: Vec<f64> = match scales_at {
            Some(i) => match ctx.opt_input(i).and_then(|f| f.value.as_ref()) {
                Some(Known::Float(v)) => v.clone(),
                Some(Known::Int(_)) => return invalid(format!("scales (input {i}) must be float")),
                Some(Known::Ratio(_)) => {
                    return Err(OpError::Unknown(format!(
                        "contents of scales (input {i}): symbolic scales"
                    )))
                }
                None if ctx.opt_input(i).is_none() => {
                    return invalid("one of 'scales' and 'sizes' must be given")
                }
                None => return Err(OpError::Unknown(format!("contents of scales (input {i})"))),
            },
            None => match ctx.attr_floats("scales")? {
                Some(v) => v.into_iter().map(f64::from).collect(),
                None => return invalid("attribute 'scales' is required"),
            },
        };
        if scales.len() != axes.len() {
            return invalid(format!(
                "scales has {} entries for {} resized axes",
                scales.len(),
                axes.len()
            ));
        }
        for (k, &a) in axes.iter().enumerate() {
            out[a] = scaled_dim(&x[a], scales[k])?;
        }
    }
    Ok(vec![Fact::new(t, out)])
}

/// The one scale of `keep_aspect_ratio_policy` `not_larger` (the smallest ratio) or `not_smaller`
/// (the largest), over the resized axes.
pub fn aspect_scale(policy: &str, want: &[i64], have: &[i64]) -> f64 {
    let ratios = want.iter().zip(have).map(|(&w, &h)| w as f64 / h as f64);
    if policy == "not_larger" {
        ratios.fold(f64::INFINITY, f64::min)
    } else {
        ratios.fold(f64::NEG_INFINITY, f64::max)
    }
}

/// Axis flow of `Resize`/`Upsample`: an axis passes through when it is not resized (not in `axes`,
/// or scaled by exactly 1 outside `tf_crop_and_resize`), or when `sizes` (one per axis: no `axes`
/// attribute, the `stretch` policy) keeps its input extent, as an exported upsampling writes the
/// batch and channels of `[B, C, H', W']`; a chunk's clone then reads the chunk's shape as its
/// `sizes` ([`OpDef::shape_input`](super::OpDef::shape_input)). With `sizes` and an `axes`
/// attribute there is no flow: a chunk's shape would not be its `sizes`.
pub fn resize_flow(node: &Node, inputs: &[Option<&Fact>], rank: usize) -> Option<Vec<AxisFlow>> {
    let opset_hint = if node.inputs.len() >= 3 { 11 } else { 10 };
    let (scales_at, sizes_at) = operand_slots(&node.op, opset_hint);
    let at = |i: Option<usize>| i.and_then(|i| inputs.get(i).copied().flatten());
    let axes: Vec<usize> = match node.attr("axes") {
        Some(AttrValue::Ints(v)) => v
            .iter()
            .filter_map(|&a| {
                let a = if a < 0 { a + rank as i64 } else { a };
                usize::try_from(a).ok()
            })
            .collect(),
        _ => (0..rank).collect(),
    };
    let crop = matches!(
        node.attr("coordinate_transformation_mode"),
        Some(AttrValue::String(m)) if m.as_slice() == b"tf_crop_and_resize"
    );
    let stretch = match node.attr("keep_aspect_ratio_policy") {
        Some(AttrValue::String(p)) => p.as_slice() == b"stretch",
        _ => true,
    };
    let sized = given(at(sizes_at));
    if sized && node.attr("axes").is_some() {
        return None;
    }
    // Axes whose `sizes` entry is the input's extent.
    let x = inputs
        .first()
        .copied()
        .flatten()
        .and_then(|f| f.shape.as_ref());
    let kept: Vec<bool> = match (at(sizes_at).and_then(|f| f.value.as_ref()), x) {
        (Some(Known::Int(v)), Some(x)) if sized && stretch && v.len() == rank => {
            v.iter().zip(x).map(|(s, d)| s == d).collect()
        }
        _ => vec![false; rank],
    };
    let scales: Option<Vec<f64>> = if sized {
        None
    } else {
        match at(scales_at).and_then(|f| f.value.as_ref()) {
            Some(Known::Float(v)) => Some(v.clone()),
            _ => match node.attr("scales") {
                Some(AttrValue::Floats(v)) => Some(v.iter().map(|&s| f64::from(s)).collect()),
                _ => None,
            },
        }
    };
    let flow = (0..rank)
        .map(|o| {
            let through = match axes.iter().position(|&a| a == o) {
                None => true,
                Some(k) => {
                    !crop
                        && (kept[o]
                            || scales
                                .as_ref()
                                .and_then(|s| s.get(k))
                                .is_some_and(|&s| s == 1.0))
                }
            };
            if through {
                super::axes::from_first(inputs.len(), o)
            } else {
                AxisFlow::Mixed
            }
        })
        .collect();
    Some(flow)
}
