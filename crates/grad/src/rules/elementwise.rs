//! Elementwise ops: arithmetic with broadcasting, unary math, activations, `Where`, `Cast`.

use memplan_ir::graph::ValueId;
use memplan_ir::{AttrValue, DataType};

use super::{dtype, shape, Ctx, Grads, Rule};
use crate::builder::{attr, Builder};

pub(crate) const RULES: &[(&str, Rule)] = &[
    ("Add", add),
    ("Sub", sub),
    ("Mul", mul),
    ("Div", div),
    ("Pow", pow),
    ("Max", select),
    ("Min", select),
    ("Sum", sum),
    ("Mean", mean),
    ("Neg", neg),
    ("Exp", exp),
    ("Log", log),
    ("Sqrt", sqrt),
    ("Reciprocal", reciprocal),
    ("Sigmoid", sigmoid),
    ("Tanh", tanh),
    ("Relu", relu),
    ("Erf", erf),
    ("Gelu", gelu),
    ("Softplus", softplus),
    ("Sin", sin),
    ("Cos", cos),
    ("Abs", abs),
    ("Clip", clip),
    ("Where", where_),
    ("Identity", identity),
    ("Dropout", dropout),
    ("Cast", cast),
    ("CastLike", cast),
];

/// `dy` (at the output's shape) reduced to input `i`'s shape.
fn to_input(b: &mut Builder, c: &Ctx, g: ValueId, i: usize) -> Result<ValueId, String> {
    let x = c.x(i)?;
    let out = shape(b, c.y(0)?)?;
    let inp = shape(b, x)?;
    b.unbroadcast(g, &out, x, &inp)
}

fn grads_of(n: usize, list: Vec<(usize, ValueId)>) -> Grads {
    let mut g = vec![None; n];
    for (i, v) in list {
        g[i] = Some(v);
    }
    g
}

fn add(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let mut out = Vec::new();
    for i in 0..2 {
        if c.wants(i) {
            out.push((i, to_input(b, c, dy, i)?));
        }
    }
    Ok(grads_of(2, out))
}

fn sub(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let mut out = Vec::new();
    if c.wants(0) {
        out.push((0, to_input(b, c, dy, 0)?));
    }
    if c.wants(1) {
        let n = b.op("Neg", &[dy], vec![]);
        out.push((1, to_input(b, c, n, 1)?));
    }
    Ok(grads_of(2, out))
}

fn mul(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let (x0, x1) = (c.x(0)?, c.x(1)?);
    let mut out = Vec::new();
    if c.wants(0) {
        let g = b.op("Mul", &[dy, x1], vec![]);
        out.push((0, to_input(b, c, g, 0)?));
    }
    if c.wants(1) {
        let g = b.op("Mul", &[dy, x0], vec![]);
        out.push((1, to_input(b, c, g, 1)?));
    }
    Ok(grads_of(2, out))
}

fn div(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let (den, y) = (c.x(1)?, c.y(0)?);
    let mut out = Vec::new();
    if c.wants(0) {
        let g = b.op("Div", &[dy, den], vec![]);
        out.push((0, to_input(b, c, g, 0)?));
    }
    if c.wants(1) {
        // d(a/b)/db = -(a/b)/b = -y/b.
        let t = b.op("Mul", &[dy, y], vec![]);
        let t = b.op("Div", &[t, den], vec![]);
        let t = b.op("Neg", &[t], vec![]);
        out.push((1, to_input(b, c, t, 1)?));
    }
    Ok(grads_of(2, out))
}

fn pow(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let (a, e, y) = (c.x(0)?, c.x(1)?, c.y(0)?);
    let dt = dtype(b, a)?;
    let mut out = Vec::new();
    if c.wants(0) {
        // d(a^e)/da = e * a^(e-1).
        let ef = if dtype(b, e)? == dt {
            e
        } else {
            b.op(
                "Cast",
                &[e],
                vec![attr("to", AttrValue::Int(dt.onnx_code() as i64))],
            )
        };
        let one = b.scalar(dt, 1.0);
        let em1 = b.op("Sub", &[ef, one], vec![]);
        let p = b.op("Pow", &[a, em1], vec![]);
        let t = b.op("Mul", &[ef, p], vec![]);
        let g = b.op("Mul", &[dy, t], vec![]);
        out.push((0, to_input(b, c, g, 0)?));
    }
    if c.wants(1) {
        // d(a^e)/de = a^e * ln(a).
        let l = b.op("Log", &[a], vec![]);
        let t = b.op("Mul", &[y, l], vec![]);
        let g = b.op("Mul", &[dy, t], vec![]);
        out.push((1, to_input(b, c, g, 1)?));
    }
    Ok(grads_of(2, out))
}

/// `Max`/`Min`: each input gets the gradient where it equals the result.
fn select(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let y = c.y(0)?;
    let zero = b.scalar(dtype(b, y)?, 0.0);
    let mut out = Vec::new();
    for i in 0..c.arity() {
        if !c.wants(i) {
            continue;
        }
        let x = c.x(i)?;
        let eq = b.op("Equal", &[x, y], vec![]);
        let g = b.op("Where", &[eq, dy, zero], vec![]);
        out.push((i, to_input(b, c, g, i)?));
    }
    Ok(grads_of(c.arity(), out))
}

fn sum(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let mut out = Vec::new();
    for i in 0..c.arity() {
        if c.wants(i) {
            out.push((i, to_input(b, c, dy, i)?));
        }
    }
    Ok(grads_of(c.arity(), out))
}

fn mean(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let n = b.scalar(dtype(b, c.y(0)?)?, c.arity() as f64);
    let g = b.op("Div", &[dy, n], vec![]);
    let mut out = Vec::new();
    for i in 0..c.arity() {
        if c.wants(i) {
            out.push((i, to_input(b, c, g, i)?));
        }
    }
    Ok(grads_of(c.arity(), out))
}

/// A unary rule: `dx = dy * f'(x, y)` with `f'` built by `deriv`.
fn unary(
    b: &mut Builder,
    c: &Ctx,
    deriv: impl FnOnce(&mut Builder, ValueId, ValueId, DataType) -> ValueId,
) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let (x, y) = (c.x(0)?, c.y(0)?);
    let dt = dtype(b, x)?;
    let d = deriv(b, x, y, dt);
    Ok(vec![Some(b.op("Mul", &[dy, d], vec![]))])
}

fn neg(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    Ok(vec![Some(b.op("Neg", &[dy], vec![]))])
}

fn exp(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    unary(b, c, |_, _, y, _| y)
}

fn log(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    Ok(vec![Some(b.op("Div", &[dy, c.x(0)?], vec![]))])
}

fn sqrt(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    // d sqrt(x) = 1 / (2 sqrt(x)).
    let dy = c.dy0()?;
    let y = c.y(0)?;
    let two = b.scalar(dtype(b, y)?, 2.0);
    let d = b.op("Mul", &[y, two], vec![]);
    Ok(vec![Some(b.op("Div", &[dy, d], vec![]))])
}

fn reciprocal(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    unary(b, c, |b, _, y, _| {
        let yy = b.op("Mul", &[y, y], vec![]);
        b.op("Neg", &[yy], vec![])
    })
}

fn sigmoid(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    unary(b, c, |b, _, y, dt| {
        let one = b.scalar(dt, 1.0);
        let om = b.op("Sub", &[one, y], vec![]);
        b.op("Mul", &[y, om], vec![])
    })
}

fn tanh(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    unary(b, c, |b, _, y, dt| {
        let one = b.scalar(dt, 1.0);
        let yy = b.op("Mul", &[y, y], vec![]);
        b.op("Sub", &[one, yy], vec![])
    })
}

fn relu(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let x = c.x(0)?;
    let zero = b.scalar(dtype(b, x)?, 0.0);
    let pos = b.op("Greater", &[x, zero], vec![]);
    Ok(vec![Some(b.op("Where", &[pos, dy, zero], vec![]))])
}

/// 2/sqrt(pi) * exp(-x^2).
fn erf_deriv(b: &mut Builder, x: ValueId, dt: DataType) -> ValueId {
    let xx = b.op("Mul", &[x, x], vec![]);
    let n = b.op("Neg", &[xx], vec![]);
    let e = b.op("Exp", &[n], vec![]);
    let k = b.scalar(dt, std::f64::consts::FRAC_2_SQRT_PI);
    b.op("Mul", &[e, k], vec![])
}

fn erf(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    unary(b, c, |b, x, _, dt| erf_deriv(b, x, dt))
}

fn gelu(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    if c.string("approximate")?.is_some_and(|a| a != "none") {
        return Err("Gelu with approximate='tanh' has no gradient rule".to_string());
    }
    // gelu(x) = x/2 (1 + erf(x/sqrt2)); gelu'(x) = (1 + erf(x/sqrt2))/2 + x exp(-x^2/2)/sqrt(2 pi).
    unary(b, c, |b, x, _, dt| {
        let r2 = b.scalar(dt, std::f64::consts::FRAC_1_SQRT_2);
        let xs = b.op("Mul", &[x, r2], vec![]);
        let e = b.op("Erf", &[xs], vec![]);
        let one = b.scalar(dt, 1.0);
        let half = b.scalar(dt, 0.5);
        let t1 = b.op("Add", &[e, one], vec![]);
        let t1 = b.op("Mul", &[t1, half], vec![]);
        let xx = b.op("Mul", &[x, x], vec![]);
        let xx = b.op("Mul", &[xx, half], vec![]);
        let n = b.op("Neg", &[xx], vec![]);
        let ex = b.op("Exp", &[n], vec![]);
        let k = b.scalar(dt, 1.0 / (2.0 * std::f64::consts::PI).sqrt());
        let t2 = b.op("Mul", &[x, ex], vec![]);
        let t2 = b.op("Mul", &[t2, k], vec![]);
        b.op("Add", &[t1, t2], vec![])
    })
}

fn softplus(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    unary(b, c, |b, x, _, _| b.op("Sigmoid", &[x], vec![]))
}

fn sin(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    unary(b, c, |b, x, _, _| b.op("Cos", &[x], vec![]))
}

fn cos(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    unary(b, c, |b, x, _, _| {
        let s = b.op("Sin", &[x], vec![]);
        b.op("Neg", &[s], vec![])
    })
}

fn abs(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    unary(b, c, |b, x, _, _| b.op("Sign", &[x], vec![]))
}

/// `Clip`: the gradient passes where `min <= x <= max`.
fn clip(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let x = c.x(0)?;
    let zero = b.scalar(dtype(b, x)?, 0.0);
    let mut g = dy;
    if let Some(lo) = c.opt_x(1) {
        let below = b.op("Less", &[x, lo], vec![]);
        g = b.op("Where", &[below, zero, g], vec![]);
    }
    if let Some(hi) = c.opt_x(2) {
        let above = b.op("Greater", &[x, hi], vec![]);
        g = b.op("Where", &[above, zero, g], vec![]);
    }
    if c.node.attr("min").is_some() || c.node.attr("max").is_some() {
        return Err("Clip with min/max attributes (opset < 11) has no gradient rule".to_string());
    }
    Ok(vec![Some(g)])
}

fn where_(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let cond = c.x(0)?;
    let zero = b.scalar(dtype(b, c.y(0)?)?, 0.0);
    let mut out = Vec::new();
    if c.wants(1) {
        let g = b.op("Where", &[cond, dy, zero], vec![]);
        out.push((1, to_input(b, c, g, 1)?));
    }
    if c.wants(2) {
        let g = b.op("Where", &[cond, zero, dy], vec![]);
        out.push((2, to_input(b, c, g, 2)?));
    }
    Ok(grads_of(3, out))
}

fn identity(_: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    Ok(vec![Some(c.dy0()?)])
}

fn dropout(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    if let Some(t) = c.opt_x(2) {
        if super::known_ints(b, t) != Some(vec![0]) {
            return Err("Dropout in training mode has no gradient rule".to_string());
        }
    }
    Ok(vec![Some(c.dy0()?)])
}

fn cast(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let dt = dtype(b, c.x(0)?)?;
    let to = attr("to", AttrValue::Int(dt.onnx_code() as i64));
    Ok(vec![Some(b.op("Cast", &[dy], vec![to]))])
}
