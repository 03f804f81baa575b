//! Op family: random draws (`RandomUniform`, `RandomUniformLike`, `RandomNormal`,
//! `RandomNormalLike`, `Bernoulli`, `Multinomial`). Their values come from a counter-based
//! generator in `exec` (each element a pure function of the seed and its index), so the kernels
//! hold no scratch; they have no axis flow, so chunking never splits them (a chunk would renumber
//! the elements it draws).

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::infer::{invalid, Fact, InferCtx, OpError};

use super::{Mem, OpDef};

const fn def(op: &'static str, arity: super::Arity, infer: super::InferFn) -> OpDef {
    OpDef::new(op, arity, infer, Mem::NEW)
}

pub const DEFS: &[OpDef] = &[
    def("RandomUniform", (0, 0), random_shaped),
    def("RandomNormal", (0, 0), random_shaped),
    def("RandomUniformLike", (1, 1), random_like).shapes_only(),
    def("RandomNormalLike", (1, 1), random_like).shapes_only(),
    def("Bernoulli", (1, 1), bernoulli),
    def("Multinomial", (1, 1), multinomial),
];

/// The `dtype` attribute as a type, `default` when absent.
fn dtype_attr(ctx: &InferCtx, default: DataType) -> Result<DataType, OpError> {
    Ok(ctx.attr_dtype("dtype")?.unwrap_or(default))
}

/// The float types the random kernels write.
pub fn is_random_float(d: DataType) -> bool {
    matches!(
        d,
        DataType::F32 | DataType::F64 | DataType::F16 | DataType::BF16
    )
}

fn float_out(d: DataType) -> Result<DataType, OpError> {
    if is_random_float(d) {
        Ok(d)
    } else {
        invalid(format!(
            "output type {d} is not a float type (float16, bfloat16, float, double)"
        ))
    }
}

/// `RandomUniform`/`RandomNormal`: the `shape` attribute, type `dtype` (default float).
fn random_shaped(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let Some(shape) = ctx.attr_ints("shape")? else {
        return Err(OpError::BadAttr("attribute 'shape' is required".into()));
    };
    if let Some(d) = shape.iter().find(|&&d| d < 0) {
        return Err(OpError::BadAttr(format!(
            "attribute 'shape' has a negative dim {d}"
        )));
    }
    let t = float_out(dtype_attr(ctx, DataType::F32)?)?;
    Ok(vec![Fact::new(
        t,
        shape.iter().map(|&d| Expr::int(d)).collect(),
    )])
}

/// `*Like`: the input's shape, type `dtype` (default the input's).
fn random_like(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let shape = ctx.shape(0)?.to_vec();
    let t = float_out(dtype_attr(ctx, ctx.dtype(0)?)?)?;
    Ok(vec![Fact::new(t, shape)])
}

/// `Bernoulli`: probabilities in, 0/1 out in `dtype` (default the input's type).
fn bernoulli(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let shape = ctx.shape(0)?.to_vec();
    let p = ctx.dtype(0)?;
    if !is_random_float(p) {
        return invalid(format!("probabilities of type {p} are not a float type"));
    }
    let t = dtype_attr(ctx, p)?;
    if !(is_random_float(t) || t.is_int() && t.bits() >= 8 || t == DataType::Bool) {
        return invalid(format!("output type {t} is not a numeric or bool type"));
    }
    Ok(vec![Fact::new(t, shape)])
}

/// `Multinomial`: `[batch, classes]` log-probabilities in, `[batch, sample_size]` class indices out
/// (`dtype` int32, the default, or int64).
fn multinomial(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let shape = ctx.shape(0)?.to_vec();
    if shape.len() != 2 {
        return invalid(format!(
            "input must be [batch, classes], has rank {}",
            shape.len()
        ));
    }
    let x = ctx.dtype(0)?;
    if !is_random_float(x) {
        return invalid(format!("input of type {x} is not a float type"));
    }
    let n = ctx.attr_int("sample_size", 1)?;
    if n < 1 {
        return Err(OpError::BadAttr(format!(
            "attribute 'sample_size' is {n}, must be >= 1"
        )));
    }
    let t = dtype_attr(ctx, DataType::I32)?;
    if !matches!(t, DataType::I32 | DataType::I64) {
        return invalid(format!("output type {t} is not int32 or int64"));
    }
    Ok(vec![Fact::new(t, vec![shape[0].clone(), Expr::int(n)])])
}
