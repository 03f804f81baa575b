//! Op family: quantization: `QuantizeLinear`, `DequantizeLinear` (per tensor, per axis or
//! blocked), `DynamicQuantizeLinear`, and the integer products `MatMulInteger`, `QLinearMatMul`,
//! `ConvInteger`, `QLinearConv`.
//!
//! The kernels (`exec::ops::quant`) compute each output element from its own inputs with exact
//! integer accumulation, and hold no scratch. `QuantizeLinear` and `DequantizeLinear` per tensor
//! or per axis pass every axis through (see [`qdq_flow`]); nothing is split through the others.

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::infer::{invalid, Fact, InferCtx, OpError};

use super::axes::{attr_int, in_shape, norm, out_rank, AxisFlow};
use super::linalg::matmul_shape;
use super::nn::conv_shape;
use super::{Mem, OpDef, ONE};

pub const DEFS: &[OpDef] = &[
    // x, y_scale, optional y_zero_point.
    OpDef::new("QuantizeLinear", (2, 3), quantize, Mem::NEW).flow(qdq_flow),
    // x, x_scale, optional x_zero_point.
    OpDef::new("DequantizeLinear", (2, 3), dequantize, Mem::NEW).flow(qdq_flow),
    OpDef::new("DynamicQuantizeLinear", ONE, dynamic_quantize, Mem::NEW),
    // A, B and the optional zero points.
    OpDef::new("MatMulInteger", (2, 4), matmul_integer, Mem::NEW),
    // a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point.
    OpDef::new("QLinearMatMul", (8, 8), qlinear_matmul, Mem::NEW),
    // x, w and the optional zero points.
    OpDef::new("ConvInteger", (2, 4), conv_integer, Mem::NEW),
    // x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, optional B.
    OpDef::new("QLinearConv", (8, 9), qlinear_conv, Mem::NEW),
];

/// Quantize/DequantizeLinear map each element alone: every axis passes through `x`. Per tensor
/// (a scale of one element) the scale and zero point are read whole; per axis (a `[C]` scale
/// along `axis`) that axis slices them too. No flow for blocked scales or a type narrower than a
/// byte (a slice of packed 4-bit elements need not start on a byte).
fn qdq_flow(
    node: &crate::graph::Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = out_rank(outputs, 0)?;
    let byte_wide = |f: Option<&Fact>| f.and_then(|f| f.dtype).is_some_and(|t| t.bits() >= 8);
    if !inputs
        .iter()
        .chain(outputs)
        .all(|f| f.is_none() || byte_wide(*f))
        || attr_int(node, "block_size", 0) != 0
        || in_shape(inputs, 0)?.len() != r0
    {
        return None;
    }
    let scale = in_shape(inputs, 1)?;
    let per_axis = match scale {
        [] => None,
        [d] if *d == Expr::one() => None,
        [_] => Some(norm(attr_int(node, "axis", 1), r0)?),
        _ => return None,
    };
    Some(vec![(0..r0)
        .map(|o| {
            let mut v = vec![None; inputs.len()];
            v[0] = Some(o);
            if per_axis == Some(o) {
                v[1..].iter_mut().for_each(|s| *s = Some(0));
            }
            AxisFlow::Split(v)
        })
        .collect()])
}

/// Whether QuantizeLinear can produce `t`.
pub fn is_quantized_type(t: DataType) -> bool {
    use DataType::*;
    matches!(
        t,
        U8 | I8
            | U16
            | I16
            | U4
            | I4
            | U2
            | I2
            | F8E4M3FN
            | F8E4M3FNUZ
            | F8E5M2
            | F8E5M2FNUZ
            | F4E2M1
    )
}

/// The `output_dtype` attribute (0 or absent: `None`, the default).
fn output_dtype(ctx: &InferCtx) -> Result<Option<DataType>, OpError> {
    match ctx.attr_int("output_dtype", 0)? {
        0 => Ok(None),
        _ => ctx.attr_dtype("output_dtype"),
    }
}

/// The output type: the zero point's when given, else `output_dtype`, else uint8.
fn quantize(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let want = output_dtype(ctx)?;
    let t = match ctx.opt_input(2) {
        Some(_) => {
            let z = ctx.dtype(2)?;
            if let Some(w) = want.filter(|&w| w != z) {
                return invalid(format!(
                    "output_dtype {w} differs from the zero point's type {z}"
                ));
            }
            z
        }
        None => want.unwrap_or(DataType::U8),
    };
    if !is_quantized_type(t) {
        return invalid(format!("{t} is not a quantized type"));
    }
    Ok(vec![Fact::new(t, ctx.shape(0)?.to_vec())])
}

/// The output type: `output_dtype` when given, else the scale's.
fn dequantize(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = match output_dtype(ctx)? {
        Some(t) => t,
        None => ctx.dtype(1)?,
    };
    if !matches!(
        t,
        DataType::F32 | DataType::F16 | DataType::BF16 | DataType::F64
    ) {
        return invalid(format!("DequantizeLinear cannot produce {t}"));
    }
    Ok(vec![Fact::new(t, ctx.shape(0)?.to_vec())])
}

fn dynamic_quantize(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    if t != DataType::F32 {
        return invalid(format!("DynamicQuantizeLinear needs float input, got {t}"));
    }
    Ok(vec![
        Fact::new(DataType::U8, ctx.shape(0)?.to_vec()),
        Fact::new(t, Vec::<Expr>::new()),
        Fact::new(DataType::U8, Vec::<Expr>::new()),
    ])
}

fn matmul_integer(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let out = matmul_shape(ctx.shape(0)?, ctx.shape(1)?)?;
    Ok(vec![Fact::new(DataType::I32, out)])
}

fn qlinear_matmul(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let out = matmul_shape(ctx.shape(0)?, ctx.shape(3)?)?;
    Ok(vec![Fact::new(ctx.dtype(7)?, out)])
}

fn conv_integer(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    Ok(vec![Fact::new(DataType::I32, conv_shape(ctx, 0, 1)?)])
}

fn qlinear_conv(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    Ok(vec![Fact::new(ctx.dtype(7)?, conv_shape(ctx, 0, 3)?)])
}
