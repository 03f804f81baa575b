//! Op family: optimizer updates of the `ai.onnx.preview.training` domain: `Adagrad`, `Adam`,
//! `Momentum`. Inputs: the learning rate `R` and step count `T` (scalars), then `n` tensors of
//! each kind (`X`, `G`, and the states: `H` for Adagrad, `V` for Momentum, `V` and `H` for Adam);
//! outputs: the `n` new `X`, then the `n` new states of each kind, each shaped like its `X`.
//!
//! The kernels (`exec::ops::training`) are elementwise and hold no scratch.

use crate::infer::{invalid, Fact, InferCtx, OpError};

use super::{Mem, OpDef};

/// The domain of these ops (their [`OpDef::op`] is `<DOMAIN>.<name>`, see `ops::op_key`).
pub const DOMAIN: &str = "ai.onnx.preview.training";

pub const DEFS: &[OpDef] = &[
    OpDef::new(
        "ai.onnx.preview.training.Adagrad",
        (5, usize::MAX),
        update,
        Mem::NEW,
    ),
    OpDef::new(
        "ai.onnx.preview.training.Adam",
        (6, usize::MAX),
        update,
        Mem::NEW,
    ),
    OpDef::new(
        "ai.onnx.preview.training.Momentum",
        (5, usize::MAX),
        update,
        Mem::NEW,
    ),
];

/// Tensor kinds per updated tensor (`X`, `G` and the states) for an op name.
pub fn kinds(op: &str) -> usize {
    if op == "Adam" {
        4
    } else {
        3
    }
}

/// The number of tensors `n` updated by a node with `inputs` inputs.
pub fn tensors(op: &str, inputs: usize) -> Option<usize> {
    let k = kinds(op);
    let rest = inputs.checked_sub(2)?;
    (rest > 0 && rest % k == 0).then_some(rest / k)
}

fn update(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let op = ctx.node.op.as_str();
    let Some(n) = tensors(op, ctx.num_inputs()) else {
        return invalid(format!(
            "{op} takes R, T and {} groups of n tensors, got {} inputs",
            kinds(op),
            ctx.num_inputs()
        ));
    };
    for i in 0..2 {
        if ctx.shape(i)?.iter().any(|d| d.as_const() != Some(1)) {
            return invalid(format!("input {i} (R, T) must hold one element"));
        }
    }
    let mut xs = Vec::with_capacity(n);
    for i in 0..n {
        let x = ctx.input(2 + i)?;
        for q in 1..kinds(op) {
            let other = ctx.input(2 + q * n + i)?;
            if let (Some(a), Some(b)) = (&x.shape, &other.shape) {
                if a != b {
                    return invalid(format!(
                        "input {} must have the shape of input {}",
                        2 + q * n + i,
                        2 + i
                    ));
                }
            }
        }
        xs.push(Fact::new(ctx.dtype(2 + i)?, ctx.shape(2 + i)?.to_vec()));
    }
    let mut out = Vec::with_capacity(n * (kinds(op) - 1));
    for _ in 1..kinds(op) {
        out.extend(xs.iter().cloned());
    }
    Ok(out)
}
