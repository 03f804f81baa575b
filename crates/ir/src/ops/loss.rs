//! Op family: losses over class scores, `NegativeLogLikelihoodLoss` and `SoftmaxCrossEntropyLoss`.
//!
//! Scores are `[N, C, D1, .., Dk]`, labels `[N, D1, .., Dk]` (int32/int64), optional class weights
//! `[C]`. The loss is `[N, D1, .., Dk]` with `reduction = "none"` and a scalar with `"sum"` or
//! `"mean"` (the default); `SoftmaxCrossEntropyLoss`'s optional second output is the log-softmax of
//! the scores over C, shaped like them. The kernels accumulate in f64 and hold no scratch.

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::infer::{invalid, Fact, InferCtx, OpError};

use super::{Mem, OpDef};

pub const DEFS: &[OpDef] = &[
    OpDef::new("NegativeLogLikelihoodLoss", (2, 3), loss, Mem::NEW),
    OpDef::new("SoftmaxCrossEntropyLoss", (2, 3), loss, Mem::NEW),
];

/// The `reduction` attribute: `"none"`, `"sum"` or `"mean"` (the default).
pub fn reduction(ctx: &InferCtx) -> Result<String, OpError> {
    let r = ctx
        .attr_string("reduction")?
        .unwrap_or_else(|| "mean".into());
    match r.as_str() {
        "none" | "sum" | "mean" => Ok(r),
        other => Err(OpError::BadAttr(format!(
            "reduction '{other}' is not one of none, sum, mean"
        ))),
    }
}

fn loss(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    let labels = ctx.shape(1)?.to_vec();
    let lt = ctx.dtype(1)?;
    if !t.is_float() {
        return invalid(format!("scores must be a float type, got {t}"));
    }
    if !matches!(lt, DataType::I32 | DataType::I64) {
        return invalid(format!("labels must be int32 or int64, got {lt}"));
    }
    if x.len() < 2 {
        return invalid(format!(
            "scores have rank {}, need at least 2 (N, C, ...)",
            x.len()
        ));
    }
    let mut want = vec![x[0].clone()];
    want.extend_from_slice(&x[2..]);
    if labels != want {
        return invalid(format!(
            "labels {} do not match scores {} without the class axis",
            crate::infer::fmt_shape(&labels),
            crate::infer::fmt_shape(&x)
        ));
    }
    if let Some(w) = ctx.opt_input(2) {
        if let Some(ws) = &w.shape {
            if ws.len() != 1 || ws[0] != x[1] {
                return invalid(format!(
                    "weights {} must be [C] with C = {}",
                    crate::infer::fmt_shape(ws),
                    x[1]
                ));
            }
        }
        if w.dtype.is_some_and(|d| d != t) {
            return invalid("weights must have the scores' type");
        }
    }
    let out: Vec<Expr> = if reduction(ctx)? == "none" {
        want
    } else {
        Vec::new()
    };
    Ok(vec![Fact::new(t, out), Fact::new(t, x)])
}
