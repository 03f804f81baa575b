//! Op family: boxes and sampling grids: `NonMaxSuppression`, `AffineGrid`, `CenterCropPad`.
//!
//! `NonMaxSuppression`'s output count depends on the data (a fresh symbol); its kernel keeps one
//! class's selected box indices in scratch, `8 * num_boxes` bytes. The others hold no scratch.

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::graph::Node;
use crate::infer::{invalid, normalize_axis, Fact, InferCtx, OpError};

use super::{Mem, OpDef, THREE, TWO};

pub const DEFS: &[OpDef] = &[
    OpDef::new(
        "NonMaxSuppression",
        (2, 5),
        nms,
        Mem {
            scratch: Some(nms_scratch),
            ..Mem::NEW
        },
    ),
    OpDef::new("AffineGrid", TWO, affine_grid, Mem::NEW),
    OpDef::new("CenterCropPad", TWO, center_crop_pad, Mem::NEW),
    OpDef::new("RoiAlign", THREE, roi_align, Mem::NEW),
];

/// RoiAlign: `[R, C, output_height, output_width]` (defaults 1).
fn roi_align(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let rois = ctx.shape(1)?.to_vec();
    let t = ctx.dtype(0)?;
    if x.len() != 4 || rois.len() != 2 {
        return invalid("RoiAlign needs X [N, C, H, W] and rois [R, 4]");
    }
    let (oh, ow) = (
        ctx.attr_int("output_height", 1)?,
        ctx.attr_int("output_width", 1)?,
    );
    if oh < 1 || ow < 1 {
        return Err(OpError::BadAttr(
            "output_height and output_width must be >= 1".into(),
        ));
    }
    Ok(vec![Fact::new(
        t,
        vec![rois[0].clone(), x[1].clone(), Expr::int(oh), Expr::int(ow)],
    )])
}

/// `selected_indices` `[k, 3]` int64, `k` known only after the run.
fn nms(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let b = ctx.shape(0)?.to_vec();
    let s = ctx.shape(1)?.to_vec();
    if b.len() != 3 || s.len() != 3 || b[2].as_const().is_some_and(|v| v != 4) {
        return invalid(format!(
            "boxes {} must be [B, N, 4] and scores {} [B, C, N]",
            crate::infer::fmt_shape(&b),
            crate::infer::fmt_shape(&s)
        ));
    }
    if b[0] != s[0] || b[1] != s[2] {
        return invalid("boxes [B, N, 4] and scores [B, C, N] disagree on B or N");
    }
    let k = ctx.fresh_symbol(
        "nms_selected",
        "NonMaxSuppression's count depends on the data",
    );
    Ok(vec![Fact::new(DataType::I64, vec![k, Expr::int(3)])])
}

/// NonMaxSuppression: one class's selected box indices, `8 * N` bytes.
fn nms_scratch(
    _node: &Node,
    _opset: i64,
    inputs: &[Option<&Fact>],
    _outputs: &[Option<&Fact>],
) -> Expr {
    inputs
        .first()
        .copied()
        .flatten()
        .and_then(|f| f.shape.as_ref())
        .and_then(|s| s.get(1))
        .map(|n| n * &Expr::int(8))
        .unwrap_or_else(Expr::zero)
}

/// AffineGrid: theta `[N, 2, 3]` with size `[N, C, H, W]` gives `[N, H, W, 2]`; theta `[N, 3, 4]`
/// with `[N, C, D, H, W]` gives `[N, D, H, W, 3]`. Needs the value of `size`.
fn affine_grid(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let th = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    let Some(size) = ctx.known_ints(1) else {
        return Err(OpError::Unknown("AffineGrid's size values".into()));
    };
    let nd = match size.len() {
        4 => 2,
        5 => 3,
        n => return invalid(format!("size has {n} entries, needs 4 (2-D) or 5 (3-D)")),
    };
    if th.len() != 3
        || th[1].as_const().is_some_and(|v| v != nd)
        || th[2].as_const().is_some_and(|v| v != nd + 1)
    {
        return invalid(format!(
            "theta {} must be [N, {nd}, {}]",
            crate::infer::fmt_shape(&th),
            nd + 1
        ));
    }
    let mut out = vec![th[0].clone()];
    out.extend_from_slice(&size[2..]);
    out.push(Expr::int(nd));
    Ok(vec![Fact::new(t, out)])
}

/// CenterCropPad: each axis in `axes` (default all) takes its extent from `shape`; needs its values.
fn center_crop_pad(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    let Some(shape) = ctx.known_ints(1) else {
        return Err(OpError::Unknown("CenterCropPad's shape values".into()));
    };
    let axes: Vec<usize> = match ctx.attr_ints("axes")? {
        Some(a) => a
            .iter()
            .map(|&a| normalize_axis(a, x.len()))
            .collect::<Result<_, _>>()?,
        None => (0..x.len()).collect(),
    };
    if axes.len() != shape.len() {
        return invalid(format!(
            "shape has {} entries for {} axes",
            shape.len(),
            axes.len()
        ));
    }
    let mut out = x;
    for (a, s) in axes.into_iter().zip(shape) {
        out[a] = s;
    }
    Ok(vec![Fact::new(t, out)])
}
