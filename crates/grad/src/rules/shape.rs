//! Data movement: reshapes, `Transpose`, `Expand`, `Concat`, `Split`, and the ops that select or
//! repeat elements (`Slice`, `Gather`, `GatherElements`, `GatherND`, `Tile`, `TopK` values).
//!
//! The selecting ops share one rule: the element positions of the input (`Range` over its size,
//! reshaped to its shape) go through the same op, and the incoming gradient is scatter-added into
//! zeros at those positions. Duplicated positions (a `Gather` reading a row twice, `Tile`) add up.

use memplan_ir::graph::ValueId;
use memplan_ir::AttrValue;

use super::{dtype, norm_axis, shape, Ctx, Grads, Rule};
use crate::builder::{attr, attr_int, attr_ints, Builder};

pub(crate) const RULES: &[(&str, Rule)] = &[
    ("Reshape", reshape),
    ("Flatten", reshape),
    ("Squeeze", reshape),
    ("Unsqueeze", reshape),
    ("Transpose", transpose),
    ("Expand", expand),
    ("Concat", concat),
    ("Split", split),
    ("Slice", select),
    ("Gather", select),
    ("GatherElements", select),
    ("GatherND", select),
    ("Tile", select),
    ("TopK", topk),
];

fn reshape(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    Ok(vec![Some(b.reshape_like(dy, c.x(0)?))])
}

fn transpose(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let rank = shape(b, c.x(0)?)?.len();
    let perm = c
        .ints("perm")?
        .unwrap_or_else(|| (0..rank as i64).rev().collect());
    let mut inv = vec![0i64; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        let p = norm_axis(p, rank)?;
        inv[p] = i as i64;
    }
    Ok(vec![Some(b.op(
        "Transpose",
        &[dy],
        vec![attr_ints("perm", &inv)],
    ))])
}

fn expand(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let x = c.x(0)?;
    let (sy, sx) = (shape(b, c.y(0)?)?, shape(b, x)?);
    Ok(vec![Some(b.unbroadcast(dy, &sy, x, &sx)?)])
}

fn concat(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let rank = shape(b, c.y(0)?)?.len();
    let axis = norm_axis(c.int("axis", 0)?, rank)?;
    let xs: Vec<ValueId> = (0..c.arity()).map(|i| c.x(i)).collect::<Result<_, _>>()?;
    // The parts' extents along the axis: constants where known, else read from their shapes.
    let mut consts = Vec::new();
    for &x in &xs {
        consts.push(shape(b, x)?[axis].as_const());
    }
    let sizes = if let Some(v) = consts.iter().copied().collect::<Option<Vec<i64>>>() {
        b.ints(&v)
    } else {
        let idx = b.ints(&[axis as i64]);
        let parts: Vec<ValueId> = xs
            .iter()
            .map(|&x| {
                let s = b.shape_of(x);
                b.op("Gather", &[s, idx], vec![])
            })
            .collect();
        b.op("Concat", &parts, vec![attr_int("axis", 0)])
    };
    let outs = if b.opset >= 13 {
        b.op_n(
            "Split",
            &[Some(dy), Some(sizes)],
            xs.len(),
            vec![attr_int("axis", axis as i64)],
        )
    } else {
        let v = consts
            .iter()
            .copied()
            .collect::<Option<Vec<i64>>>()
            .ok_or("Concat of symbolic extents before opset 13 has no gradient rule")?;
        b.op_n(
            "Split",
            &[Some(dy)],
            xs.len(),
            vec![attr_int("axis", axis as i64), attr_ints("split", &v)],
        )
    };
    Ok((0..xs.len())
        .map(|i| c.wants(i).then_some(outs[i]))
        .collect())
}

fn split(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let rank = shape(b, c.x(0)?)?.len();
    let axis = norm_axis(c.int("axis", 0)?, rank)?;
    let mut parts = Vec::new();
    for (i, d) in c.dy.iter().enumerate() {
        let part = match d {
            Some(d) => *d,
            None => {
                let y = c.y(i)?;
                let dt = dtype(b, y)?;
                b.zeros_like(y, dt)
            }
        };
        parts.push(part);
    }
    let cat = b.op("Concat", &parts, vec![attr_int("axis", axis as i64)]);
    Ok(vec![Some(cat)])
}

/// The gradient of input 0 for an op whose output 0 selects or repeats its elements: `positions` is
/// the op applied to the input's element positions.
fn scatter_positions(
    b: &mut Builder,
    x: ValueId,
    dy: ValueId,
    positions: ValueId,
) -> Result<ValueId, String> {
    if b.opset < 16 {
        return Err(
            "gradients of selecting ops need opset 16 (ScatterElements reduction)".to_string(),
        );
    }
    let dt = dtype(b, x)?;
    let flat = b.ints(&[-1]);
    let p = b.op("Reshape", &[positions, flat], vec![]);
    let d = b.op("Reshape", &[dy, flat], vec![]);
    let z = b.zeros_like(x, dt);
    let z = b.op("Reshape", &[z, flat], vec![]);
    let s = b.op(
        "ScatterElements",
        &[z, p, d],
        vec![
            attr_int("axis", 0),
            attr("reduction", AttrValue::String(b"add".to_vec())),
        ],
    );
    Ok(b.reshape_like(s, x))
}

/// Element positions of `x`: `Range(0, Size(x))` reshaped to `x`'s shape (int64).
fn positions_of(b: &mut Builder, x: ValueId) -> ValueId {
    let n = b.op("Size", &[x], vec![]);
    let zero = b.constant(memplan_ir::TensorData::from_i64("", vec![], &[0]));
    let one = b.constant(memplan_ir::TensorData::from_i64("", vec![], &[1]));
    let r = b.op("Range", &[zero, n, one], vec![]);
    b.reshape_like(r, x)
}

fn select(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let x = c.x(0)?;
    if !c.wants(0) {
        return Ok(vec![None; c.arity()]);
    }
    let pos = positions_of(b, x);
    let mut ins: Vec<Option<ValueId>> = c.node.inputs.clone();
    ins[0] = Some(pos);
    let p = b.op_n(&c.node.op, &ins, 1, c.node.attrs.clone())[0];
    let g = scatter_positions(b, x, dy, p)?;
    Ok(vec![Some(g)])
}

fn topk(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let x = c.x(0)?;
    let idx = c.y(1)?;
    let rank = shape(b, x)?.len();
    let axis = norm_axis(c.int("axis", -1)?, rank)?;
    let pos = positions_of(b, x);
    let p = b.op(
        "GatherElements",
        &[pos, idx],
        vec![attr_int("axis", axis as i64)],
    );
    let g = scatter_positions(b, x, dy, p)?;
    Ok(vec![Some(g), None])
}
