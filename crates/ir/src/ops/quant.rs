//! Op family: quantization: `QuantizeLinear`, `DequantizeLinear` (per tensor, per axis or
//! blocked), `DynamicQuantizeLinear`, and the integer products `MatMulInteger`, `QLinearMatMul`,
//! `ConvInteger`, `QLinearConv`.
//!
//! The kernels (`exec::ops::quant`) compute each output element from its own inputs with exact
//! integer accumulation, and hold no scratch; nothing is split through these ops (no axis flow).

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::infer::{invalid, Fact, InferCtx, OpError};

use super::linalg::matmul_shape;
use super::nn::conv_shape;
use super::{Mem, OpDef, ONE};

pub const DEFS: &[OpDef] = &[
    // x, y_scale, optional y_zero_point.
    OpDef::new("QuantizeLinear", (2, 3), quantize, Mem::NEW),
    // x, x_scale, optional x_zero_point.
    OpDef::new("DequantizeLinear", (2, 3), dequantize, Mem::NEW),
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
