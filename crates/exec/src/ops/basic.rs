//! Ops without arithmetic: views (Identity, Reshape, Flatten, Squeeze, Unsqueeze), Shape, Size,
//! Constant, ConstantOfShape, EyeLike.

use memplan_ir::DataType;

use super::{axis, fail, req, OpCtx, OpFail, OpFn};
use crate::tensor::Tensor;

pub const OPS: &[(&str, OpFn)] = &[
    ("Identity", identity),
    ("Reshape", reshape),
    ("Flatten", flatten),
    ("Squeeze", squeeze),
    ("Unsqueeze", unsqueeze),
    ("Shape", shape),
    ("Size", size),
    ("Constant", constant),
    ("ConstantOfShape", constant_of_shape),
    ("EyeLike", eye_like),
];

/// EyeLike: zeros of the input's 2-D shape with ones on diagonal `k` (`dtype`, default the input's
/// type).
fn eye_like(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    if x.rank() != 2 {
        return fail(format!("EyeLike needs a 2-D input, got {:?}", x.shape));
    }
    let dt = ctx.dtype("dtype")?.unwrap_or(x.dtype);
    let mut one = [0u8; 8];
    let es = match dt {
        DataType::F32 => {
            one[..4].copy_from_slice(&1f32.to_le_bytes());
            4
        }
        DataType::F64 => {
            one.copy_from_slice(&1f64.to_le_bytes());
            8
        }
        DataType::F16 => {
            one[..2].copy_from_slice(&half::f16::ONE.to_le_bytes());
            2
        }
        DataType::BF16 => {
            one[..2].copy_from_slice(&half::bf16::ONE.to_le_bytes());
            2
        }
        d if d.is_int() && d.bits() >= 8 || d == DataType::Bool => {
            one[0] = 1;
            (d.bits() / 8) as usize
        }
        d => return fail(format!("EyeLike of {d}")),
    };
    let k = ctx.int("k", 0)?;
    let (rows, cols) = (x.shape[0], x.shape[1]);
    let mut out = ctx.alloc(dt, &x.shape)?;
    let bytes = out.bytes_mut()?;
    for i in 0..rows {
        let j = i as i64 + k;
        if j >= 0 && (j as usize) < cols {
            let at = (i * cols + j as usize) * es;
            bytes[at..at + es].copy_from_slice(&one[..es]);
        }
    }
    Ok(vec![out])
}

/// Returns `t` under `shape`: a view when the plan says so, else a counted copy.
pub fn view_or_copy(ctx: &OpCtx, t: &Tensor, shape: &[usize]) -> Result<Tensor, OpFail> {
    if ctx.view {
        return Ok(t.reshaped(shape));
    }
    let mut out = ctx.alloc(t.dtype, shape)?;
    out.bytes_mut()?.copy_from_slice(t.bytes());
    Ok(out)
}

fn identity(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let mut y = view_or_copy(ctx, x, &x.shape)?;
    // A sequence or optional stays one: the same packed bytes with the same layout.
    y.seq = x.seq.clone();
    Ok(vec![y])
}

/// Reshape's target dims from its `shape` operand (0 copies, -1 infers).
pub fn reshape_dims(
    input: &[usize],
    target: &[i64],
    allowzero: bool,
) -> Result<Vec<usize>, OpFail> {
    let total: usize = input.iter().product();
    let mut out = Vec::with_capacity(target.len());
    let mut infer = None;
    for (i, &d) in target.iter().enumerate() {
        match d {
            0 if !allowzero => match input.get(i) {
                Some(&v) => out.push(v),
                None => {
                    return fail(format!(
                        "shape dim {i} is 0 (copy) but the input has rank {}",
                        input.len()
                    ))
                }
            },
            -1 => {
                if infer.replace(i).is_some() {
                    return fail("shape has more than one -1");
                }
                out.push(1);
            }
            d if d < 0 => return fail(format!("shape dim {i} is {d}")),
            d => out.push(d as usize),
        }
    }
    let rest: usize = out.iter().product();
    if let Some(i) = infer {
        if total.checked_rem(rest) != Some(0) {
            return fail(format!("cannot reshape {input:?} to {target:?}"));
        }
        out[i] = total / rest;
    } else if rest != total {
        return fail(format!(
            "cannot reshape {input:?} ({total} elements) to {out:?} ({rest} elements)"
        ));
    }
    Ok(out)
}

fn reshape(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let target = req(inputs, 1)?.to_i64_vec()?;
    let dims = reshape_dims(&x.shape, &target, ctx.int("allowzero", 0)? != 0)?;
    Ok(vec![view_or_copy(ctx, x, &dims)?])
}

fn flatten(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let r = x.rank() as i64;
    let mut a = ctx.int("axis", 1)?;
    if a < 0 {
        a += r;
    }
    if a < 0 || a > r {
        return fail(format!("axis {a} is out of range for rank {r}"));
    }
    let a = a as usize;
    let dims = [x.shape[..a].iter().product(), x.shape[a..].iter().product()];
    Ok(vec![view_or_copy(ctx, x, &dims)?])
}

fn axes_of(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Option<Vec<i64>>, OpFail> {
    if let Some(a) = ctx.ints("axes")? {
        return Ok(Some(a));
    }
    match inputs.get(1).copied().flatten() {
        Some(t) => Ok(Some(t.to_i64_vec()?)),
        None => Ok(None),
    }
}

fn squeeze(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let dims: Vec<usize> = match axes_of(ctx, inputs)? {
        None => x.shape.iter().copied().filter(|&d| d != 1).collect(),
        Some(axes) => {
            let mut drop = vec![false; x.rank()];
            for a in axes {
                let k = axis(a, x.rank())?;
                if x.shape[k] != 1 {
                    return fail(format!("cannot squeeze axis {a} of size {}", x.shape[k]));
                }
                drop[k] = true;
            }
            x.shape
                .iter()
                .zip(drop)
                .filter(|(_, d)| !d)
                .map(|(&s, _)| s)
                .collect()
        }
    };
    Ok(vec![view_or_copy(ctx, x, &dims)?])
}

fn unsqueeze(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let Some(axes) = axes_of(ctx, inputs)? else {
        return fail("Unsqueeze needs axes");
    };
    let r = x.rank() + axes.len();
    let mut ins = vec![false; r];
    for a in axes {
        let k = axis(a, r)?;
        if ins[k] {
            return fail(format!("axis {a} repeated"));
        }
        ins[k] = true;
    }
    let mut it = x.shape.iter();
    let dims: Vec<usize> = ins
        .iter()
        .map(|&one| {
            if one {
                1
            } else {
                it.next().copied().unwrap_or(1)
            }
        })
        .collect();
    Ok(vec![view_or_copy(ctx, x, &dims)?])
}

fn shape(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let r = x.rank() as i64;
    let clamp = |v: i64| -> usize { (if v < 0 { v + r } else { v }).clamp(0, r) as usize };
    let s = clamp(ctx.int("start", 0)?);
    let e = clamp(ctx.int("end", r)?);
    let dims: Vec<i64> = if s < e {
        x.shape[s..e].iter().map(|&d| d as i64).collect()
    } else {
        Vec::new()
    };
    Ok(vec![ctx.from_vec(&[dims.len()], &dims)?])
}

fn size(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    Ok(vec![ctx.from_vec::<i64>(&[], &[x.numel() as i64])?])
}

/// Copies a constant tensor attribute into a counted tensor.
pub fn from_tensor_data(ctx: &OpCtx, t: &memplan_ir::TensorData) -> Result<Tensor, OpFail> {
    let Some(raw) = t.raw() else {
        return Err(OpFail::Unsupported(format!("{} tensors", t.dtype)));
    };
    let dims: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
    let mut out = ctx.alloc(t.dtype, &dims)?;
    let dst = out.bytes_mut()?;
    if dst.len() != raw.len() {
        return fail(format!(
            "tensor '{}' has {} bytes for {} {:?}",
            t.name,
            raw.len(),
            t.dtype,
            t.dims
        ));
    }
    dst.copy_from_slice(raw);
    Ok(out)
}

fn constant(ctx: &OpCtx, _inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    if let Some(t) = ctx.tensor_attr("value")? {
        return Ok(vec![from_tensor_data(ctx, t)?]);
    }
    if let Some(memplan_ir::AttrValue::Float(v)) = ctx.node.attr("value_float") {
        return Ok(vec![ctx.from_vec::<f32>(&[], &[*v])?]);
    }
    if let Some(v) = ctx.opt_int("value_int")? {
        return Ok(vec![ctx.from_vec::<i64>(&[], &[v])?]);
    }
    if let Some(v) = ctx.floats("value_floats")? {
        return Ok(vec![ctx.from_vec::<f32>(&[v.len()], &v)?]);
    }
    if let Some(v) = ctx.ints("value_ints")? {
        return Ok(vec![ctx.from_vec::<i64>(&[v.len()], &v)?]);
    }
    Err(OpFail::Unsupported(
        "Constant without a numeric value".into(),
    ))
}

fn constant_of_shape(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let dims: Vec<usize> = req(inputs, 0)?
        .to_i64_vec()?
        .into_iter()
        .map(|d| usize::try_from(d).map_err(|_| OpFail::Invalid(format!("negative dim {d}"))))
        .collect::<Result<_, _>>()?;
    let (dtype, fill) = match ctx.tensor_attr("value")? {
        Some(v) => (v.dtype, v.raw().cloned().unwrap_or_default()),
        None => (DataType::F32, bytes::Bytes::from_static(&[0, 0, 0, 0])),
    };
    let es = crate::tensor::elem_size(dtype)?;
    if fill.len() != es {
        return fail("value must hold exactly one element");
    }
    if fill.iter().all(|&b| b == 0) {
        return Ok(vec![ctx.alloc(dtype, &dims)?]);
    }
    let mut out = ctx.alloc_for_overwrite(dtype, &dims)?;
    by_size!(es, T => {
        let v: T = bytemuck::pod_read_unaligned(&fill);
        super::raw_mut::<T>(&mut out)?.fill(v);
    });
    Ok(vec![out])
}
