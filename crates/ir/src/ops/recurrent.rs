//! Op family: recurrent layers `RNN`, `GRU` and `LSTM` (ONNX opsets 7 to 22).
//!
//! Shapes, with `D` directions (2 when `direction` is `bidirectional`, else 1), `H` the hidden
//! size (attribute `hidden_size`, else `R`'s last dim), `X` of `[seq, batch, input]` (`layout` 0)
//! or `[batch, seq, input]` (`layout` 1): `Y` is `[seq, D, batch, H]` (`[batch, seq, D, H]`) and
//! `Y_h`, `Y_c` are `[D, batch, H]` (`[batch, D, H]`).
//!
//! Scratch: the kernels (`exec::ops::recurrent`) run one batch row at a time (rows do not
//! interact) in f64, holding one buffer of `8 * k * H` bytes for the whole node: the row's hidden
//! state and gate pre-activations, `k` = 2 for RNN (state, gate), 5 for GRU (state, 3 gates,
//! `r ⊙ H`), 6 for LSTM (hidden and cell states, 4 gates).

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::graph::Node;
use crate::infer::{invalid, Fact, InferCtx, OpError};

use super::axes::AxisFlow;
use super::{Mem, OpDef};

const MEM: Mem = Mem {
    scratch: Some(scratch),
    ..Mem::NEW
};

pub const DEFS: &[OpDef] = &[
    // Inputs: X, W, R, B, sequence_lens, initial_h.
    OpDef::new("RNN", (3, 6), recurrent, MEM).flow(batch_flow),
    OpDef::new("GRU", (3, 6), recurrent, MEM).flow(batch_flow),
    // Inputs: X, W, R, B, sequence_lens, initial_h, initial_c, P.
    OpDef::new("LSTM", (3, 8), recurrent, MEM).flow(batch_flow),
];

/// Batch rows do not interact (see the module doc): the batch axis of every output passes through
/// `X`, `sequence_lens`, `initial_h` and `initial_c`; the weights are read whole and every other
/// axis is mixed.
fn batch_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let layout1 = super::axes::attr_int(node, "layout", 0) != 0;
    // The batch axis of X / Y / the states, by layout.
    let (x, y, state) = if layout1 { (0, 0, 0) } else { (1, 2, 1) };
    let mut ins = vec![None; inputs.len()];
    for (k, slot) in ins.iter_mut().enumerate() {
        *slot = match k {
            0 => Some(x),
            4 => Some(0),
            5 | 6 => Some(state),
            _ => None,
        };
    }
    super::axes::out_rank(outputs, 0)?;
    Some(
        (0..outputs.len())
            .map(|k| {
                let rank = super::axes::out_rank(outputs, k).unwrap_or(0);
                let batch = if k == 0 { y } else { state };
                (0..rank)
                    .map(|a| {
                        if a == batch {
                            AxisFlow::Split(ins.clone())
                        } else {
                            AxisFlow::Mixed
                        }
                    })
                    .collect()
            })
            .collect(),
    )
}

/// Gates per op (the blocks of `W`'s and `R`'s second dim).
pub fn gates(op: &str) -> usize {
    match op {
        "LSTM" => 4,
        "GRU" => 3,
        _ => 1,
    }
}

/// f64 values per hidden unit the kernel holds in scratch (see the module doc).
pub fn scratch_per_hidden(op: &str) -> usize {
    match op {
        "LSTM" => 6,
        "GRU" => 5,
        _ => 2,
    }
}

/// Directions named by the `direction` attribute.
pub fn directions(dir: &str) -> Option<usize> {
    match dir {
        "forward" | "reverse" => Some(1),
        "bidirectional" => Some(2),
        _ => None,
    }
}

fn scratch(node: &Node, _opset: i64, inputs: &[Option<&Fact>], _outputs: &[Option<&Fact>]) -> Expr {
    let hidden = match node.attr("hidden_size") {
        Some(crate::graph::AttrValue::Int(h)) => Some(Expr::int(*h)),
        _ => inputs
            .get(2)
            .copied()
            .flatten()
            .and_then(|r| r.shape.as_ref())
            .and_then(|s| s.get(2).cloned()),
    };
    hidden
        .map(|h| h * (8 * scratch_per_hidden(&node.op) as i64))
        .unwrap_or_else(Expr::zero)
}

fn recurrent(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    if !matches!(
        t,
        DataType::F32 | DataType::F64 | DataType::F16 | DataType::BF16
    ) {
        return invalid(format!("X must be a float tensor, got {t}"));
    }
    let x = ctx.shape(0)?.to_vec();
    let w = ctx.shape(1)?.to_vec();
    let r = ctx.shape(2)?.to_vec();
    if x.len() != 3 || w.len() != 3 || r.len() != 3 {
        return invalid(format!(
            "X, W and R must have rank 3, got {}, {} and {}",
            x.len(),
            w.len(),
            r.len()
        ));
    }
    let dir = ctx
        .attr_string("direction")?
        .unwrap_or_else(|| "forward".into());
    let d = directions(&dir)
        .ok_or_else(|| OpError::BadAttr(format!("direction '{dir}' is not a known direction")))?;
    let hidden = match ctx.attr_opt_int("hidden_size")? {
        Some(h) if h < 1 => return Err(OpError::BadAttr(format!("hidden_size {h} is not >= 1"))),
        Some(h) => Expr::int(h),
        None => r[2].clone(),
    };
    let layout = ctx.attr_int("layout", 0)?;
    let (seq, batch) = match layout {
        0 => (x[0].clone(), x[1].clone()),
        1 => (x[1].clone(), x[0].clone()),
        l => return Err(OpError::BadAttr(format!("layout {l} is not 0 or 1"))),
    };
    if let Some(wd) = w[0].as_const() {
        if wd != d as i64 {
            return invalid(format!(
                "W has {wd} directions, direction '{dir}' needs {d}"
            ));
        }
    }
    let g = Expr::int(gates(&ctx.node.op) as i64);
    if let (Some(a), Some(b)) = (w[1].as_const(), (&hidden * &g).as_const()) {
        if a != b {
            return invalid(format!(
                "W's dim 1 is {a}, expected {b} (gates * hidden_size)"
            ));
        }
    }
    let d = Expr::int(d as i64);
    let (y, state) = if layout == 0 {
        (
            vec![seq, d.clone(), batch.clone(), hidden.clone()],
            vec![d, batch, hidden],
        )
    } else {
        (
            vec![batch.clone(), seq, d.clone(), hidden.clone()],
            vec![batch, d, hidden],
        )
    };
    let mut out = vec![Fact::new(t, y), Fact::new(t, state.clone())];
    if ctx.node.op == "LSTM" {
        out.push(Fact::new(t, state));
    }
    Ok(out)
}
