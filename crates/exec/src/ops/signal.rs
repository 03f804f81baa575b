//! Signal ops: the window functions `HannWindow`, `HammingWindow`, `BlackmanWindow`
//! (`periodic` default 1). Each element is computed in f64 from its index alone. Scratch: none.

use half::{bf16, f16};
use memplan_ir::DataType;

use super::{fail, req, scalar_i64, unsupported, OpCtx, OpFail, OpFn};
use crate::tensor::Tensor;

pub const OPS: &[(&str, OpFn)] = &[
    ("HannWindow", window),
    ("HammingWindow", window),
    ("BlackmanWindow", window),
];

fn window(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let size = scalar_i64(req(inputs, 0)?, "size")?;
    let Ok(n) = usize::try_from(size) else {
        return fail(format!("size {size} is negative"));
    };
    let code = ctx.int("output_datatype", 1)?;
    let Some(dt) = DataType::from_onnx(code as i32) else {
        return fail(format!("output_datatype {code} is not a data type"));
    };
    let periodic = ctx.int("periodic", 1)? != 0;
    let denom = if periodic { n as f64 } else { n as f64 - 1.0 };
    let op = ctx.node.op.as_str();
    let value = |i: usize| -> f64 {
        let t = std::f64::consts::PI * i as f64 / denom;
        match op {
            "HannWindow" => t.sin() * t.sin(),
            "HammingWindow" => {
                let alpha = 25.0 / 46.0;
                alpha - (2.0 * t).cos() * (1.0 - alpha)
            }
            _ => 0.42 - 0.5 * (2.0 * t).cos() + 0.08 * (4.0 * t).cos(),
        }
    };
    let mut out = ctx.alloc_for_overwrite(dt, &[n])?;
    macro_rules! fill {
        ($t:ty, $conv:expr) => {{
            for (i, d) in out.data_mut::<$t>()?.iter_mut().enumerate() {
                *d = $conv(value(i));
            }
        }};
    }
    match dt {
        DataType::F32 => fill!(f32, |v: f64| v as f32),
        DataType::F64 => fill!(f64, |v: f64| v),
        DataType::F16 => fill!(f16, f16::from_f64),
        DataType::BF16 => fill!(bf16, bf16::from_f64),
        DataType::I64 => fill!(i64, |v: f64| v as i64),
        DataType::I32 => fill!(i32, |v: f64| v as i32),
        d => return unsupported(format!("{op} of {d}")),
    }
    Ok(vec![out])
}
