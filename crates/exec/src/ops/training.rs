//! Optimizer updates of the `ai.onnx.preview.training` domain: `Adagrad`, `Adam`, `Momentum`
//! (f32, f64; computed in f64, elementwise, as onnx's reference defines them). Scratch: none.

use memplan_ir::ops::training::{kinds, tensors};
use memplan_ir::DataType;

use super::{fail, req, scalar_i64, unsupported, OpCtx, OpFail, OpFn};
use crate::tensor::Tensor;

pub const OPS: &[(&str, OpFn)] = &[
    ("ai.onnx.preview.training.Adagrad", update),
    ("ai.onnx.preview.training.Adam", update),
    ("ai.onnx.preview.training.Momentum", update),
];

/// A float operand's elements as f64 (one element read at a time).
fn get(t: &Tensor, i: usize) -> Result<f64, OpFail> {
    Ok(match t.dtype {
        DataType::F32 => f64::from(t.data::<f32>()?[i]),
        DataType::F64 => t.data::<f64>()?[i],
        d => return unsupported(format!("optimizer update of {d}")),
    })
}

fn set(t: &mut Tensor, i: usize, v: f64) -> Result<(), OpFail> {
    match t.dtype {
        DataType::F32 => t.data_mut::<f32>()?[i] = v as f32,
        DataType::F64 => t.data_mut::<f64>()?[i] = v,
        d => return unsupported(format!("optimizer update of {d}")),
    }
    Ok(())
}

fn update(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let op = ctx.node.op.as_str();
    let k = kinds(op);
    let Some(n) = tensors(op, inputs.len()) else {
        return fail(format!(
            "{op} takes R, T and {k} groups of n tensors, got {} inputs",
            inputs.len()
        ));
    };
    let rt = req(inputs, 0)?;
    if rt.shape.iter().product::<usize>() != 1 {
        return fail("R must hold one element");
    }
    let r = get(rt, 0)?;
    let t = scalar_i64(req(inputs, 1)?, "T")?;
    let norm = f64::from(ctx.float("norm_coefficient", 0.0)?);
    let groups: Vec<Vec<&Tensor>> = (0..k)
        .map(|q| (0..n).map(|i| req(inputs, 2 + q * n + i)).collect())
        .collect::<Result<_, _>>()?;
    for i in 0..n {
        for q in 1..k {
            if groups[q][i].shape != groups[0][i].shape || groups[q][i].dtype != groups[0][i].dtype
            {
                return fail(format!(
                    "input {} must have the type and shape of input {}",
                    2 + q * n + i,
                    2 + i
                ));
            }
        }
    }
    // Outputs in order: the n new X, then the n new states of each kind.
    let mut outs: Vec<Tensor> = Vec::with_capacity(n * (k - 1));
    for _ in 1..k {
        for x in &groups[0] {
            outs.push(ctx.alloc_for_overwrite(x.dtype, &x.shape)?);
        }
    }
    match op {
        "Adagrad" => {
            let decay = f64::from(ctx.float("decay_factor", 0.0)?);
            let eps = f64::from(ctx.float("epsilon", 0.0)?);
            let rate = r / (1.0 + t as f64 * decay);
            for i in 0..n {
                for e in 0..groups[0][i].shape.iter().product() {
                    let x = get(groups[0][i], e)?;
                    let g = norm * x + get(groups[1][i], e)?;
                    let h = get(groups[2][i], e)? + g * g;
                    set(&mut outs[i], e, x - rate * g / (h.sqrt() + eps))?;
                    set(&mut outs[n + i], e, h)?;
                }
            }
        }
        "Adam" => {
            let alpha = f64::from(ctx.float("alpha", 0.9)?);
            let beta = f64::from(ctx.float("beta", 0.999)?);
            let eps = f64::from(ctx.float("epsilon", 0.0)?);
            let post = f64::from(ctx.float("norm_coefficient_post", 0.0)?);
            let rate = if t > 0 {
                let t = t as i32;
                r * (1.0 - beta.powi(t)).sqrt() / (1.0 - alpha.powi(t))
            } else {
                r
            };
            for i in 0..n {
                for e in 0..groups[0][i].shape.iter().product() {
                    let x = get(groups[0][i], e)?;
                    let g = norm * x + get(groups[1][i], e)?;
                    let v = alpha * get(groups[2][i], e)? + (1.0 - alpha) * g;
                    let h = beta * get(groups[3][i], e)? + (1.0 - beta) * g * g;
                    let x_new = x - rate * (v / (h.sqrt() + eps));
                    set(&mut outs[i], e, (1.0 - post) * x_new)?;
                    set(&mut outs[n + i], e, v)?;
                    set(&mut outs[2 * n + i], e, h)?;
                }
            }
        }
        _ => {
            let alpha = f64::from(ctx.float("alpha", 0.0)?);
            let beta = f64::from(ctx.float("beta", 0.0)?);
            let nesterov = match ctx.string("mode")?.as_deref() {
                Some("standard") => false,
                Some("nesterov") => true,
                m => return fail(format!("mode {m:?} is not 'standard' or 'nesterov'")),
            };
            let beta = if t > 0 { beta } else { 1.0 };
            for i in 0..n {
                for e in 0..groups[0][i].shape.iter().product() {
                    let x = get(groups[0][i], e)?;
                    let g = norm * x + get(groups[1][i], e)?;
                    let v = alpha * get(groups[2][i], e)? + beta * g;
                    let x_new = if nesterov {
                        x - r * (g + alpha * v)
                    } else {
                        x - r * v
                    };
                    set(&mut outs[i], e, x_new)?;
                    set(&mut outs[n + i], e, v)?;
                }
            }
        }
    }
    Ok(outs)
}
