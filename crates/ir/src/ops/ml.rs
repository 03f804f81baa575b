//! Op family: the `ai.onnx.ml` domain: `Binarizer` (elementwise `x > threshold`),
//! `ArrayFeatureExtractor` (a gather on the last axis) and `TreeEnsemble` (opset 5).
//!
//! The kernels (`exec::ops::ml`) hold no scratch.

use crate::dim::Expr;
use crate::infer::{invalid, Fact, InferCtx, OpError};

use super::{Mem, OpDef, ONE, TWO};

pub const DEFS: &[OpDef] = &[
    OpDef::new("ai.onnx.ml.Binarizer", ONE, same, Mem::NEW),
    OpDef::new(
        "ai.onnx.ml.ArrayFeatureExtractor",
        TWO,
        feature_extractor,
        Mem::NEW,
    ),
    OpDef::new("ai.onnx.ml.TreeEnsemble", ONE, tree_ensemble, Mem::NEW),
];

fn same(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    Ok(vec![Fact::new(ctx.dtype(0)?, ctx.shape(0)?.to_vec())])
}

/// `[x[..-1], |indices|]`, or `[1, |indices|]` for a vector `x` (as onnxruntime does).
fn feature_extractor(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?;
    let n = Expr::product(ctx.shape(1)?.iter());
    let out = match x {
        [] => return invalid("X must have rank >= 1"),
        [_] => vec![Expr::one(), n],
        [lead @ .., _] => lead.iter().cloned().chain([n]).collect(),
    };
    Ok(vec![Fact::new(ctx.dtype(0)?, out)])
}

/// `TreeEnsemble` (ai.onnx.ml opset 5): `[N, F]` to `[N, n_targets]` of X's type.
fn tree_ensemble(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?;
    let [n, _] = x else {
        return invalid(format!("X must have rank 2, got {}", x.len()));
    };
    let targets = ctx
        .attr_opt_int("n_targets")?
        .ok_or_else(|| OpError::BadAttr("attribute 'n_targets' is required".into()))?;
    if targets < 1 {
        return Err(OpError::BadAttr(format!("n_targets {targets} is not >= 1")));
    }
    Ok(vec![Fact::new(
        ctx.dtype(0)?,
        vec![n.clone(), Expr::int(targets)],
    )])
}
