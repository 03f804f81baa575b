//! Op family: signal processing: the window functions `HannWindow`, `HammingWindow` and
//! `BlackmanWindow`, `MelWeightMatrix`, `DFT` and `STFT`.
//!
//! The kernels (`exec::ops::signal`) compute each element from its index alone (the transforms by
//! an FFT per line, in f64); the transforms hold a table of their length's twiddles and two lines
//! as scratch (`transform_scratch`), the windows none.

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::graph::Node;
use crate::infer::{invalid, Fact, InferCtx, Known, OpError};

use super::{Mem, OpDef};

pub const DEFS: &[OpDef] = &[
    OpDef::new("HannWindow", (1, 1), window, Mem::NEW),
    OpDef::new("HammingWindow", (1, 1), window, Mem::NEW),
    OpDef::new("BlackmanWindow", (1, 1), window, Mem::NEW),
    OpDef::new("MelWeightMatrix", (5, 5), mel_weight_matrix, Mem::NEW),
    // Inputs: input, dft_length, axis (opset 20+; an attribute before).
    OpDef::new("DFT", (1, 3), dft, TRANSFORM),
    // Inputs: signal, frame_step, window, frame_length.
    OpDef::new("STFT", (2, 4), stft, TRANSFORM),
];

const TRANSFORM: Mem = Mem {
    scratch: Some(transform_scratch),
    ..Mem::NEW
};

/// The one integer input `i` holds, when known.
fn known_input(inputs: &[Option<&Fact>], i: usize) -> Option<Expr> {
    match &inputs.get(i).copied().flatten()?.value {
        Some(Known::Int(v)) if v.len() == 1 => Some(v[0].clone()),
        _ => None,
    }
}

/// The scratch of `DFT` and `STFT`: for a transform of length `n`, the kernels' table of its
/// twiddles and two lines, `6 n` f64 (an inverse onesided DFT, summed directly: the table, `2 n`);
/// 0 where the length is not known (inference refuses the node then).
fn transform_scratch(
    node: &Node,
    opset: i64,
    inputs: &[Option<&Fact>],
    _outputs: &[Option<&Fact>],
) -> Expr {
    let shape = |i: usize| inputs.get(i).copied().flatten()?.shape.as_deref();
    let attr = |name: &str, default: i64| super::axes::attr_int(node, name, default);
    let direct = node.op == "DFT" && attr("inverse", 0) != 0 && attr("onesided", 0) != 0;
    let len = if node.op == "STFT" {
        known_input(inputs, 3).or_else(|| shape(2).and_then(|w| w.first().cloned()))
    } else {
        let axis = if opset >= 20 {
            match inputs.get(2).copied().flatten() {
                Some(_) => known_input(inputs, 2).and_then(|a| a.as_const()),
                None => Some(-2),
            }
        } else {
            Some(attr("axis", 1))
        };
        let n_in = shape(0).and_then(|x| Some(x[dft_axis(axis?, x.len())?].clone()));
        known_input(inputs, 1)
            .or_else(|| n_in.map(|n| if direct { (&n - &Expr::one()) * 2 } else { n }))
    };
    len.map_or_else(Expr::zero, |l| l * if direct { 16 } else { 48 })
}

/// A window of `size` (a scalar input) elements of `output_datatype` (default float).
fn window(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let code = ctx.attr_int("output_datatype", 1)?;
    let t = DataType::from_onnx(code as i32)
        .ok_or_else(|| OpError::BadAttr(format!("output_datatype {code} is not a data type")))?;
    if ctx.input(0)?.shape.as_ref().is_some_and(|s| !s.is_empty()) {
        return invalid("size must be a scalar");
    }
    let size = ctx
        .known_ints(0)
        .ok_or_else(|| OpError::Unknown("contents of size (input 0)".into()))?;
    let [n] = size.as_slice() else {
        return invalid("size must hold one element");
    };
    if n.as_const().is_some_and(|c| c < 0) {
        return invalid(format!("size {n} is negative"));
    }
    Ok(vec![Fact::new(t, vec![n.clone()])])
}

/// One known integer of a scalar input `i`; `Unknown` when its contents are not known.
fn known_scalar(ctx: &InferCtx, i: usize, what: &str) -> Result<Expr, OpError> {
    let v = ctx
        .known_ints(i)
        .ok_or_else(|| OpError::Unknown(format!("contents of {what} (input {i})")))?;
    match v.as_slice() {
        [x] => Ok(x.clone()),
        _ => invalid(format!("{what} must hold one element")),
    }
}

/// `[dft_length / 2 + 1, num_mel_bins]` of `output_datatype` (default float).
fn mel_weight_matrix(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let code = ctx.attr_int("output_datatype", 1)?;
    let t = DataType::from_onnx(code as i32)
        .ok_or_else(|| OpError::BadAttr(format!("output_datatype {code} is not a data type")))?;
    let bins = known_scalar(ctx, 0, "num_mel_bins")?;
    let len = known_scalar(ctx, 1, "dft_length")?;
    if bins.as_const().is_some_and(|c| c < 1) || len.as_const().is_some_and(|c| c < 1) {
        return invalid("num_mel_bins and dft_length must be >= 1");
    }
    Ok(vec![Fact::new(
        t,
        vec![len.floor_div(&Expr::int(2)) + 1, bins],
    )])
}

/// The last dim of a DFT/STFT input: 1 (real) or 2 (complex).
fn complex_dim(x: &[Expr]) -> Result<i64, OpError> {
    match x.last().and_then(Expr::as_const) {
        Some(c @ (1 | 2)) => Ok(c),
        Some(c) => invalid(format!(
            "the last dim must be 1 (real) or 2 (complex), got {c}"
        )),
        None if x.is_empty() => invalid("the input must have rank >= 2"),
        None => Err(OpError::Unsupported(
            "a symbolic last (real/complex) dim".into(),
        )),
    }
}

/// The signal axis of a DFT: input 2 from opset 20 (default -2), else attribute `axis` (default
/// 1); negative counts from the back. Must not be the last (real/complex) axis.
pub fn dft_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    (0..r - 1).contains(&a).then_some(a as usize)
}

fn dft(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let x = ctx.shape(0)?.to_vec();
    complex_dim(&x)?;
    let axis = if ctx.opset >= 20 {
        if ctx.opt_input(2).is_some() {
            let a = known_scalar(ctx, 2, "axis")?;
            a.as_const()
                .ok_or_else(|| OpError::Unsupported("a symbolic axis".into()))?
        } else {
            -2
        }
    } else {
        ctx.attr_int("axis", 1)?
    };
    let a = dft_axis(axis, x.len()).ok_or_else(|| {
        OpError::Invalid(format!(
            "axis {axis} is out of range for an input of rank {}",
            x.len()
        ))
    })?;
    let inverse = ctx.attr_int("inverse", 0)? != 0;
    let onesided = ctx.attr_int("onesided", 0)? != 0;
    let n = if ctx.opt_input(1).is_some() {
        known_scalar(ctx, 1, "dft_length")?
    } else if inverse && onesided {
        (&x[a] - &Expr::one()) * 2
    } else {
        x[a].clone()
    };
    if n.as_const().is_some_and(|c| c < 1) {
        return invalid(format!("dft_length {n} is not >= 1"));
    }
    let mut out = x;
    let last = out.len() - 1;
    out[a] = if onesided && !inverse {
        n.floor_div(&Expr::int(2)) + 1
    } else {
        n
    };
    out[last] = Expr::int(if inverse && onesided { 1 } else { 2 });
    Ok(vec![Fact::new(t, out)])
}

/// `[batch, frames, bins, 2]`: `frames = 1 + (len - frame_length) / frame_step`, `bins` the
/// frame length, or half of it plus one when `onesided` (default 1).
fn stft(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let x = ctx.shape(0)?.to_vec();
    if x.len() != 3 {
        return invalid(format!(
            "signal must be [batch, length, 1 or 2], got rank {}",
            x.len()
        ));
    }
    let c = complex_dim(&x)?;
    let step = known_scalar(ctx, 1, "frame_step")?;
    let fl = if ctx.opt_input(3).is_some() {
        known_scalar(ctx, 3, "frame_length")?
    } else if ctx.opt_input(2).is_some() {
        let w = ctx.shape(2)?;
        match w {
            [n] => n.clone(),
            _ => return invalid("window must have rank 1"),
        }
    } else {
        return invalid("STFT needs a window or a frame_length");
    };
    if step.as_const().is_some_and(|s| s < 1) || fl.as_const().is_some_and(|s| s < 1) {
        return invalid("frame_step and frame_length must be >= 1");
    }
    let onesided = ctx.attr_int("onesided", 1)? != 0;
    if onesided && c == 2 {
        return invalid("onesided STFT needs a real signal");
    }
    let frames = (&x[1] - &fl).floor_div(&step) + 1;
    let bins = if onesided {
        fl.floor_div(&Expr::int(2)) + 1
    } else {
        fl
    };
    Ok(vec![Fact::new(
        t,
        vec![x[0].clone(), frames, bins, Expr::int(2)],
    )])
}
