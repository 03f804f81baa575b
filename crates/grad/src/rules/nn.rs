//! Neural-network ops: `LayerNormalization`.

use super::{dtype, norm_axis, shape, Ctx, Grads, Rule};
use crate::builder::Builder;

pub(crate) const RULES: &[(&str, Rule)] = &[("LayerNormalization", layer_norm)];

/// Recomputes the normalized input from X (standard ops) and applies
/// `dX = rstd * (g - mean(g) - xhat * mean(g * xhat))` with `g = dY * scale`, means over the
/// normalized axes; `dScale = sum(dY * xhat)`, `dB = sum(dY)` over the other axes.
fn layer_norm(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let (x, scale) = (c.x(0)?, c.x(1)?);
    let sx = shape(b, x)?;
    let dt = dtype(b, x)?;
    let axis = norm_axis(c.int("axis", -1)?, sx.len())?;
    let eps = c.float("epsilon", 1e-5)?;
    let axes: Vec<i64> = (axis as i64..sx.len() as i64).collect();

    let mean = b.reduce("ReduceMean", x, &axes, true);
    let xc = b.op("Sub", &[x, mean], vec![]);
    let sq = b.op("Mul", &[xc, xc], vec![]);
    let var = b.reduce("ReduceMean", sq, &axes, true);
    let e = b.scalar(dt, f64::from(eps));
    let ve = b.op("Add", &[var, e], vec![]);
    let sd = b.op("Sqrt", &[ve], vec![]);
    let rstd = b.op("Reciprocal", &[sd], vec![]);
    let xhat = b.op("Mul", &[xc, rstd], vec![]);

    let mut g = vec![None; c.arity()];
    if c.wants(0) {
        let gs = b.op("Mul", &[dy, scale], vec![]);
        let m1 = b.reduce("ReduceMean", gs, &axes, true);
        let gx = b.op("Mul", &[gs, xhat], vec![]);
        let m2 = b.reduce("ReduceMean", gx, &axes, true);
        let t = b.op("Mul", &[xhat, m2], vec![]);
        let d = b.op("Sub", &[gs, m1], vec![]);
        let d = b.op("Sub", &[d, t], vec![]);
        g[0] = Some(b.op("Mul", &[d, rstd], vec![]));
    }
    if c.wants(1) {
        let p = b.op("Mul", &[dy, xhat], vec![]);
        let ss = shape(b, scale)?;
        g[1] = Some(b.unbroadcast(p, &sx, scale, &ss)?);
    }
    if c.wants(2) {
        let bias = c.x(2)?;
        let sb = shape(b, bias)?;
        g[2] = Some(b.unbroadcast(dy, &sx, bias, &sb)?);
    }
    Ok(g)
}
