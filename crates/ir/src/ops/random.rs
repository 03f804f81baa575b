//! Op family: random generators: `RandomUniform`, `RandomNormal`, `RandomUniformLike`,
//! `RandomNormalLike`, `Bernoulli`, `Multinomial`.
//!
//! Values come from a counter-based generator in `exec` (each element a pure function of the seed and
//! its index), so they do not depend on thread count, chunking or schedule; they differ from other
//! runtimes' draws, as the spec allows. Outputs are new buffers; kernels hold no counted scratch.

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::infer::{invalid, Fact, InferCtx, OpError};

use super::{Mem, OpDef};

const fn def(op: &'static str, infer: super::InferFn, mem: Mem) -> OpDef {
    OpDef { op, infer, mem }
}

pub const DEFS: &[OpDef] = &[
    def("RandomUniform", random, Mem::NEW),
    def("RandomNormal", random, Mem::NEW),
    def("RandomUniformLike", random_like, Mem::NEW),
    def("RandomNormalLike", random_like, Mem::NEW),
    def("Bernoulli", random_like, Mem::NEW),
    def("Multinomial", multinomial, Mem::NEW),
];

/// The `dtype` attribute, or `default` when absent.
fn dtype_attr(ctx: &InferCtx, default: DataType) -> Result<DataType, OpError> {
    match ctx.attr_opt_int("dtype")? {
        None => Ok(default),
        Some(c) => DataType::from_onnx(c as i32)
            .ok_or_else(|| OpError::Invalid(format!("unknown dtype {c}"))),
    }
}

/// `RandomUniform`/`RandomNormal`: the `shape` attribute, `dtype` (default float).
fn random(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let shape = ctx
        .attr_ints("shape")?
        .ok_or_else(|| OpError::Invalid("needs a 'shape' attribute".into()))?;
    if let Some(d) = shape.iter().find(|&&d| d < 0) {
        return invalid(format!("shape has a negative dim {d}"));
    }
    let t = dtype_attr(ctx, DataType::F32)?;
    if !t.is_float() {
        return invalid(format!("dtype must be a float type, got {t}"));
    }
    Ok(vec![Fact::new(
        t,
        shape.into_iter().map(Expr::int).collect(),
    )])
}

/// `Random*Like` and `Bernoulli`: the input's shape, `dtype` (default the input's type).
fn random_like(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = dtype_attr(ctx, ctx.dtype(0)?)?;
    Ok(vec![Fact::new(t, x)])
}

/// `Multinomial`: `[batch, sample_size]` indices (`dtype` int32 or int64, default int32).
fn multinomial(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    if x.len() != 2 {
        return invalid(format!(
            "input must be [batch, classes], has rank {}",
            x.len()
        ));
    }
    let n = ctx.attr_int("sample_size", 1)?;
    if n < 1 {
        return invalid(format!("sample_size must be >= 1, got {n}"));
    }
    let t = dtype_attr(ctx, DataType::I32)?;
    if !matches!(t, DataType::I32 | DataType::I64) {
        return invalid(format!("dtype must be int32 or int64, got {t}"));
    }
    Ok(vec![Fact::new(t, vec![x[0].clone(), Expr::int(n)])])
}
