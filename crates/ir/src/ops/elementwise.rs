//! Op family: elementwise math, comparisons, logic, `Where`, `Cast`, `BitCast` (numpy broadcasting), with
//! constant folding of small known tensors so shape arithmetic stays symbolic.

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::infer::{broadcast, invalid, Fact, InferCtx, Known, OpError, Ratio};

use crate::graph::Node;

use super::axes::{self, out_rank, AxisFlow};
use super::{Mem, OpDef, ONE, THREE, TWO, VARIADIC};

pub const DEFS: &[OpDef] = &[
    // Arithmetic (same type out, foldable).
    OpDef::new("Add", TWO, arith, Mem::ELEMENTWISE)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("Sub", TWO, arith, Mem::ELEMENTWISE)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("Mul", TWO, arith, Mem::ELEMENTWISE)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("Div", TWO, arith, Mem::ELEMENTWISE)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("Mod", TWO, arith, Mem::ELEMENTWISE)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("Pow", TWO, pow, Mem::UNARY)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("BitShift", TWO, arith, Mem::ELEMENTWISE)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("BitwiseAnd", TWO, arith, Mem::ELEMENTWISE)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("BitwiseOr", TWO, arith, Mem::ELEMENTWISE)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("BitwiseXor", TWO, arith, Mem::ELEMENTWISE)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("PRelu", TWO, arith, Mem::UNARY)
        .flow(axes::broadcast)
        .pointwise(),
    // Variadic.
    OpDef::new("Max", VARIADIC, variadic, Mem::ELEMENTWISE)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("Min", VARIADIC, variadic, Mem::ELEMENTWISE)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("Sum", VARIADIC, variadic, Mem::ELEMENTWISE)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("Mean", VARIADIC, variadic, Mem::ELEMENTWISE)
        .flow(axes::broadcast)
        .pointwise(),
    // Comparisons and logic (bool out).
    OpDef::new("Equal", TWO, compare, Mem::NEW)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("Less", TWO, compare, Mem::NEW)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("LessOrEqual", TWO, compare, Mem::NEW)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("Greater", TWO, compare, Mem::NEW)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("GreaterOrEqual", TWO, compare, Mem::NEW)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("And", TWO, compare, Mem::ELEMENTWISE)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("Or", TWO, compare, Mem::ELEMENTWISE)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("Xor", TWO, compare, Mem::ELEMENTWISE)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("Not", ONE, not, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("IsNaN", ONE, is_class, Mem::NEW)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("IsInf", ONE, is_class, Mem::NEW)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Where", THREE, where_, WHERE_MEM)
        .flow(axes::broadcast)
        .pointwise(),
    OpDef::new("Cast", ONE, cast, CAST_MEM)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("CastLike", TWO, cast_like, CAST_MEM)
        .flow(cast_like_flow)
        .pointwise(),
    // The same bits read as another type of the same width.
    OpDef::new("BitCast", ONE, bitcast, Mem::NEW)
        .flow(axes::first_input)
        .pointwise(),
    // Unary, same type and shape.
    OpDef::new("Neg", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Abs", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Sign", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Floor", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Ceil", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Round", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Reciprocal", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Sqrt", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Exp", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Log", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Tanh", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Sigmoid", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("HardSigmoid", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("HardSwish", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Erf", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Relu", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("LeakyRelu", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Elu", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Selu", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Celu", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Gelu", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Mish", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Softplus", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Softsign", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("ThresholdedRelu", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Shrink", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Sin", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Cos", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Tan", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Asin", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Acos", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Atan", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Sinh", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Cosh", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Asinh", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Acosh", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("Atanh", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    OpDef::new("BitwiseNot", ONE, unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
    // Min and max (inputs 1, 2 from opset 11) are scalars, read whole.
    OpDef::new("Clip", (1, 3), unary, Mem::UNARY)
        .flow(axes::first_input)
        .pointwise(),
];

/// A cast to the type its input has is that input: output 0 shares its bytes.
const CAST_MEM: Mem = Mem {
    view: super::View::SameType,
    ..Mem::NEW
};

/// `Where` may write into either value input.
const WHERE_MEM: Mem = Mem {
    view: super::View::None,
    inplace: &[1, 2],
    inplace_elementwise: true,
    scratch: None,
};

/// CastLike: the output follows input 0; the type source (input 1) is read whole.
fn cast_like_flow(
    _node: &Node,
    _inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = out_rank(outputs, 0)?;
    Some(vec![(0..r0)
        .map(|o| AxisFlow::Split(vec![Some(o), None]))
        .collect()])
}

/// The broadcast output shape of all present inputs, and input 0's type.
fn broadcast_inputs(ctx: &InferCtx) -> Result<Vec<Expr>, OpError> {
    let mut shapes = Vec::new();
    for i in 0..ctx.num_inputs() {
        if ctx.opt_input(i).is_some() {
            shapes.push(ctx.shape(i)?);
        }
    }
    broadcast(&shapes)
}

fn same_types(ctx: &InferCtx) -> Result<DataType, OpError> {
    let t = ctx.dtype(0)?;
    for i in 1..ctx.num_inputs() {
        if let Some(f) = ctx.opt_input(i) {
            if let Some(u) = f.dtype {
                if u != t {
                    return invalid(format!("input {i} has type {u} but input 0 has {t}"));
                }
            }
        }
    }
    Ok(t)
}

/// Known contents of input `i` broadcast to `shape`, when input `i` is known and `shape` concrete.
fn known_broadcast(ctx: &InferCtx, i: usize, shape: &[usize]) -> Option<Known> {
    let f = ctx.opt_input(i)?;
    let k = f.value.as_ref()?;
    let src = f.concrete_shape()?;
    let n: usize = shape.iter().product();
    if n > crate::infer::MAX_KNOWN_ELEMS {
        return None;
    }
    let idx = broadcast_index(&src, shape);
    k.pick(&idx)
}

/// For each element of `out` (row-major), the index of the element of `src` it reads under broadcasting.
pub fn broadcast_index(src: &[usize], out: &[usize]) -> Vec<usize> {
    let n: usize = out.iter().product();
    let off = out.len() - src.len().min(out.len());
    let mut strides = vec![0usize; out.len()];
    let mut s = 1usize;
    for k in (0..src.len()).rev() {
        if off + k < out.len() {
            strides[off + k] = if src[k] == 1 { 0 } else { s };
        }
        s *= src[k];
    }
    let mut res = Vec::with_capacity(n);
    let mut coord = vec![0usize; out.len()];
    for _ in 0..n {
        res.push(coord.iter().zip(&strides).map(|(c, st)| c * st).sum());
        for k in (0..out.len()).rev() {
            coord[k] += 1;
            if coord[k] < out[k] {
                break;
            }
            coord[k] = 0;
        }
    }
    res
}

/// Folds an elementwise op over inputs whose contents are known integers, some of them symbolic,
/// with `fi` computing one output element from the inputs' elements. Inputs that are all concrete
/// are folded by the executor's kernel instead (see [`crate::fold`]), so `fi` only needs to be
/// right where a symbol flows; floats are never symbolic and are left to the kernel.
fn fold(ctx: &InferCtx, shape: &[Expr], fi: &dyn Fn(&[Expr]) -> Option<Expr>) -> Option<Known> {
    fold_elems(ctx, shape, &|k| k.as_exprs(), fi).map(Known::Int)
}

/// The elementwise fold both [`fold`] and [`fold_ratio`] run: every input broadcast to `shape`
/// (concrete), read as elements by `read`, and `f` applied per output element.
fn fold_elems<T: Clone>(
    ctx: &InferCtx,
    shape: &[Expr],
    read: &dyn Fn(Known) -> Option<Vec<T>>,
    f: &dyn Fn(&[T]) -> Option<T>,
) -> Option<Vec<T>> {
    let conc: Vec<usize> = shape
        .iter()
        .map(|d| d.as_const().and_then(|c| usize::try_from(c).ok()))
        .collect::<Option<_>>()?;
    let n: usize = conc.iter().product();
    let mut cols = Vec::new();
    for i in 0..ctx.num_inputs() {
        cols.push(read(known_broadcast(ctx, i, &conc)?)?);
    }
    let mut out = Vec::with_capacity(n);
    for j in 0..n {
        let args: Vec<T> = cols.iter().map(|c: &Vec<T>| c[j].clone()).collect();
        out.push(f(&args)?);
    }
    Some(out)
}

/// Folds a float elementwise op whose inputs hold symbols (shape arithmetic done in floats, see
/// [`Ratio`]), with `fr` computing one output element from the inputs' elements (integers and
/// bools read as ratios over 1). `None` unless some input is a [`Known::Ratio`]: constant floats
/// are the kernel's.
fn fold_ratio(
    ctx: &InferCtx,
    shape: &[Expr],
    fr: &dyn Fn(&[Ratio]) -> Option<Ratio>,
) -> Option<Known> {
    let symbolic = (0..ctx.num_inputs()).any(|i| {
        matches!(
            ctx.opt_input(i).and_then(|f| f.value.as_ref()),
            Some(Known::Ratio(_))
        )
    });
    if !symbolic {
        return None;
    }
    fold_elems(ctx, shape, &|k| k.as_ratios(), fr).and_then(Known::of_ratios)
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

/// `num / den` in lowest terms where the numerator is provably a multiple of the denominator
/// (or a constant sharing a factor with it).
fn ratio(num: Expr, den: i64, exact: bool) -> Ratio {
    let g = match num.as_const() {
        Some(c) => gcd(c, den),
        None if num.rem(&Expr::int(den)).as_const() == Some(0) => den,
        None => 1,
    };
    if g > 1 {
        Ratio {
            num: num.floor_div(&Expr::int(g)),
            den: den / g,
            exact,
        }
    } else {
        Ratio { num, den, exact }
    }
}

/// The common denominator of two ratios.
fn lcm(a: &Ratio, b: &Ratio) -> Option<i64> {
    (a.den / gcd(a.den, b.den)).checked_mul(b.den)
}

/// Float `Add`, `Sub`, `Mul`, `Div` of ratios. Sums and products of exact ratios are exact;
/// dividing by a constant gives an exact ratio when the constant is a power of two (times a
/// power-of-two fraction) and one rounding otherwise.
fn ratio_arith(op: &str, x: &Ratio, y: &Ratio) -> Option<Ratio> {
    match op {
        "Add" | "Sub" if x.exact && y.exact => {
            let l = lcm(x, y)?;
            let (a, b) = (x.num_over(l), y.num_over(l));
            Some(ratio(if op == "Add" { &a + &b } else { &a - &b }, l, true))
        }
        "Mul" if x.exact && y.exact => {
            Some(ratio(&x.num * &y.num, x.den.checked_mul(y.den)?, true))
        }
        "Div" if x.exact => {
            let c = y.num.as_const().filter(|&c| c != 0)?;
            let num = &x.num * &Expr::int(y.den * c.signum());
            let den = x.den.checked_mul(c.checked_abs()?)?;
            Some(ratio(num, den, (c.unsigned_abs()).is_power_of_two()))
        }
        _ => None,
    }
}

/// Decides `x OP y` for exact ratios, by their numerators over the common denominator.
fn ratio_decide(op: &str, x: &Ratio, y: &Ratio) -> Option<bool> {
    if !(x.exact && y.exact) {
        return None;
    }
    let l = lcm(x, y)?;
    decide(op, &x.num_over(l), &y.num_over(l))
}

/// `Ceil`, `Floor`, `Round`, `Neg` and `Abs` of a ratio; the first two are exact even after one
/// rounding (see [`Ratio`]).
fn ratio_unary(op: &str, x: &Ratio) -> Option<Ratio> {
    let d = Expr::int(x.den);
    match op {
        "Ceil" => Some(Ratio::int(x.num.ceil_div(&d))),
        "Floor" => Some(Ratio::int(x.num.floor_div(&d))),
        "Round" if x.den == 1 => Some(x.clone()),
        "Neg" => Some(Ratio {
            num: -&x.num,
            ..x.clone()
        }),
        "Abs" => Some(if sign_of(&x.num)? >= 0 {
            x.clone()
        } else {
            Ratio {
                num: -&x.num,
                ..x.clone()
            }
        }),
        _ => None,
    }
}

/// The sign of `x` (-1, 0, 1) for every value of its symbols (all >= 1), when provable.
fn sign_of(x: &Expr) -> Option<i64> {
    if let Some(c) = x.as_const() {
        return Some(c.signum());
    }
    if x.prove_positive() == Some(true) {
        Some(1)
    } else if (-x).prove_positive() == Some(true) {
        Some(-1)
    } else if x.prove_eq_const(0) == Some(true) {
        Some(0)
    } else {
        None
    }
}

/// The sign of a divisor: as [`sign_of`], and positive when proven `>= 0` (a divisor is nonzero
/// wherever the division is defined), negative when proven `<= 0`.
fn divisor_sign(y: &Expr) -> Option<i64> {
    sign_of(y).or_else(|| {
        if y.prove_nonneg() == Some(true) {
            Some(1)
        } else if (-y).prove_nonneg() == Some(true) {
            Some(-1)
        } else {
            None
        }
    })
}

/// ONNX integer `Div`: the quotient truncated toward zero. With symbols it is the floor division
/// when the operands' signs agree, its negation of `|x| // |y|` when they differ; operands of
/// unprovable sign are taken as nonnegative (shape arithmetic: sizes, counts).
fn trunc_div(x: &Expr, y: &Expr) -> Option<Expr> {
    match (x.as_const(), y.as_const()) {
        (_, Some(0)) => None,
        (Some(a), Some(b)) => a.checked_div(b).map(Expr::int),
        _ => {
            let sx = sign_of(x).unwrap_or(1);
            let sy = divisor_sign(y)?;
            Some(match (sx >= 0, sy > 0) {
                (true, true) => x.floor_div(y),
                (false, false) => (-x).floor_div(&-y),
                (true, false) => -(x.floor_div(&-y)),
                (false, true) => -((-x).floor_div(y)),
            })
        }
    }
}

/// ONNX integer `Mod`: `fmod = 0` takes the divisor's sign (Python `%`), `fmod = 1` the dividend's
/// (C `%`), which agree when both are nonnegative (assumed for operands of unprovable sign).
fn int_mod(x: &Expr, y: &Expr, fmod: bool) -> Option<Expr> {
    match (x.as_const(), y.as_const()) {
        (_, Some(0)) => None,
        (Some(a), Some(b)) if fmod => a.checked_rem(b).map(Expr::int),
        _ if !fmod => Some(x.rem(y)),
        _ => {
            let sx = sign_of(x).unwrap_or(1);
            let sy = divisor_sign(y)?;
            // C remainder: sign of x, magnitude |x| mod |y|.
            let (ax, ay) = (
                if sx >= 0 { x.clone() } else { -x },
                if sy > 0 { y.clone() } else { -y },
            );
            let r = ax.rem(&ay);
            Some(if sx >= 0 { r } else { -r })
        }
    }
}

fn arith(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = if ctx.node.op == "PRelu" || ctx.node.op == "BitShift" {
        ctx.dtype(0)?
    } else {
        same_types(ctx)?
    };
    let shape = broadcast_inputs(ctx)?;
    let op = ctx.node.op.as_str();
    let fmod = ctx.attr_int("fmod", 0)? != 0;
    let fi = |a: &[Expr]| -> Option<Expr> {
        let (x, y) = (&a[0], &a[1]);
        match op {
            "Add" => Some(x + y),
            "Sub" => Some(x - y),
            "Mul" => Some(x * y),
            "Div" => trunc_div(x, y),
            "Mod" => int_mod(x, y, fmod),
            _ => None,
        }
    };
    let value = if t.is_int() {
        fold(ctx, &shape, &fi)
    } else {
        fold_ratio(ctx, &shape, &|a| ratio_arith(op, &a[0], &a[1]))
    };
    Ok(vec![fact(t, shape, value)])
}

fn fact(t: DataType, shape: Vec<Expr>, value: Option<Known>) -> Fact {
    match value {
        Some(v) => Fact::with_value(t, shape, v),
        None => Fact::new(t, shape),
    }
}

/// Largest exponent folded symbolically (`x^p` is expanded into a polynomial).
const MAX_SYMBOLIC_POW: i64 = 16;

/// `Pow`: an integer base raised to a small constant integer exponent is the product `x * ... * x`.
fn pow(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let shape = broadcast(&[ctx.shape(0)?, ctx.shape(1)?])?;
    let fi = |a: &[Expr]| -> Option<Expr> {
        let p = a[1]
            .as_const()
            .filter(|p| (0..=MAX_SYMBOLIC_POW).contains(p))?;
        Some(a[0].pow(p as u32))
    };
    let value = if t.is_int() {
        fold(ctx, &shape, &fi)
    } else {
        None
    };
    Ok(vec![fact(t, shape, value)])
}

fn variadic(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = same_types(ctx)?;
    let shape = broadcast_inputs(ctx)?;
    let op = ctx.node.op.clone();
    let fi = |a: &[Expr]| -> Option<Expr> {
        let mut it = a.iter();
        let first = it.next()?.clone();
        match op.as_str() {
            "Max" => Some(it.fold(first, |m, x| Expr::max(&m, x))),
            "Min" => Some(it.fold(first, |m, x| Expr::min(&m, x))),
            "Sum" => Some(it.fold(first, |m, x| &m + x)),
            _ => None,
        }
    };
    let fr = |a: &[Ratio]| -> Option<Ratio> {
        let mut it = a.iter();
        let mut m = it.next()?.clone();
        for x in it {
            m = match op.as_str() {
                "Sum" => ratio_arith("Add", &m, x)?,
                "Max" | "Min" if m.exact && x.exact => {
                    let l = lcm(&m, x)?;
                    let (p, q) = (m.num_over(l), x.num_over(l));
                    let e = if op == "Max" {
                        Expr::max(&p, &q)
                    } else {
                        Expr::min(&p, &q)
                    };
                    ratio(e, l, true)
                }
                _ => return None,
            };
        }
        Some(m)
    };
    let value = if ctx.num_inputs() == 0 {
        None
    } else if t.is_int() {
        fold(ctx, &shape, &fi)
    } else {
        fold_ratio(ctx, &shape, &fr)
    };
    Ok(vec![fact(t, shape, value)])
}

/// Decides `a OP b` for integer expressions over symbols >= 1, when provable.
fn decide(op: &str, a: &Expr, b: &Expr) -> Option<bool> {
    match op {
        "Equal" => {
            if a == b {
                Some(true)
            } else if a.prove_ge(&(b + &Expr::one())) == Some(true)
                || b.prove_ge(&(a + &Expr::one())) == Some(true)
            {
                Some(false)
            } else {
                None
            }
        }
        "GreaterOrEqual" => a.prove_ge(b),
        "LessOrEqual" => b.prove_ge(a),
        "Greater" => a
            .prove_ge(&(b + &Expr::one()))
            .or_else(|| b.prove_ge(a).map(|x| !x)),
        "Less" => b
            .prove_ge(&(a + &Expr::one()))
            .or_else(|| a.prove_ge(b).map(|x| !x)),
        _ => None,
    }
}

/// Comparisons of symbolic integers, decided when provable. Logic ops (`And`, `Or`, `Xor`, `Not`)
/// read bools, which are never symbolic: the kernel folds them.
fn compare(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = same_types(ctx)?;
    let shape = broadcast_inputs(ctx)?;
    let op = ctx.node.op.clone();
    let fi =
        |a: &[Expr]| -> Option<Expr> { decide(&op, &a[0], &a[1]).map(|b| Expr::int(b as i64)) };
    let fr = |a: &[Ratio]| -> Option<Ratio> {
        ratio_decide(&op, &a[0], &a[1]).map(|b| Ratio::int(Expr::int(b as i64)))
    };
    let value = if t.is_int() {
        fold(ctx, &shape, &fi)
    } else {
        // A bool of ratios: its elements are constants, read back as integers.
        fold_ratio(ctx, &shape, &fr)
            .and_then(|k| k.as_consts())
            .map(|v| Known::Int(v.into_iter().map(Expr::int).collect()))
    };
    Ok(vec![fact(DataType::Bool, shape, value)])
}

fn not(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    Ok(vec![Fact::new(DataType::Bool, ctx.shape(0)?.to_vec())])
}

fn is_class(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    Ok(vec![Fact::new(DataType::Bool, ctx.shape(0)?.to_vec())])
}

/// `Where` picks symbolic integers by a known condition.
fn where_(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(1)?;
    if let Some(u) = ctx.input(2)?.dtype {
        if u != t {
            return invalid(format!("X has type {t} but Y has {u}"));
        }
    }
    let shape = broadcast(&[ctx.shape(0)?, ctx.shape(1)?, ctx.shape(2)?])?;
    let fi = |a: &[Expr]| -> Option<Expr> {
        let c = a[0].as_const()?;
        Some(if c != 0 { a[1].clone() } else { a[2].clone() })
    };
    let fr = |a: &[Ratio]| -> Option<Ratio> {
        let c = a[0].num.as_const()?;
        Some(if c != 0 { a[1].clone() } else { a[2].clone() })
    };
    let value = if t.is_int() {
        fold(ctx, &shape, &fi)
    } else {
        fold_ratio(ctx, &shape, &fr)
    };
    Ok(vec![fact(t, shape, value)])
}

/// Symbolic integers keep their value across integer casts (sizes fit every integer type used for
/// shapes) and become 1 when cast to bool if provably nonzero. Everything else is the kernel's.
fn cast_known(k: &Known, to: DataType) -> Option<Known> {
    if let Known::Ratio(v) = k {
        return cast_ratios(v, to);
    }
    let Known::Int(v) = k else { return None };
    if to.is_float() {
        // Symbolic integers become ratios over 1; constants are the kernel's.
        return Known::of_ratios(v.iter().cloned().map(Ratio::int).collect())
            .filter(|k| matches!(k, Known::Ratio(_)));
    }
    if to.is_int() {
        Some(Known::Int(v.clone()))
    } else if to == DataType::Bool {
        v.iter()
            .map(|e| sign_of(e).map(|s| Expr::int((s != 0) as i64)))
            .collect::<Option<Vec<_>>>()
            .map(Known::Int)
    } else {
        None
    }
}

/// Symbolic floats cast: to an integer, truncated toward zero (exact even after one rounding, see
/// [`Ratio`]); to another float, unchanged; to bool, 1 where provably nonzero.
fn cast_ratios(v: &[Ratio], to: DataType) -> Option<Known> {
    if to.is_int() {
        v.iter()
            .map(|r| trunc_div(&r.num, &Expr::int(r.den)))
            .collect::<Option<Vec<_>>>()
            .map(Known::Int)
    } else if to.is_float() {
        Some(Known::Ratio(v.to_vec()))
    } else if to == DataType::Bool {
        v.iter()
            .map(|r| sign_of(&r.num).map(|s| Expr::int((s != 0) as i64)))
            .collect::<Option<Vec<_>>>()
            .map(Known::Int)
    } else {
        None
    }
}

fn cast(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let code = ctx
        .attr_opt_int("to")?
        .ok_or_else(|| OpError::BadAttr("attribute 'to' is required".into()))?;
    let to = DataType::from_onnx(code as i32).ok_or_else(|| {
        OpError::BadAttr(format!(
            "attribute 'to' = {code} is not a tensor element type"
        ))
    })?;
    let inp = ctx.input(0)?;
    let shape = ctx.shape(0)?.to_vec();
    let value = symbolic_value(inp).and_then(|k| cast_known(k, to));
    Ok(vec![fact(to, shape, value)])
}

/// The known contents of an integer or bool tensor.
fn int_value(f: &Fact) -> Option<&Known> {
    f.dtype
        .filter(|t| t.is_int() || *t == DataType::Bool)
        .and(f.value.as_ref())
}

/// The known contents of a tensor that holds symbols: integers, or floats as ratios.
fn symbolic_value(f: &Fact) -> Option<&Known> {
    int_value(f).or(f.value.as_ref().filter(|k| matches!(k, Known::Ratio(_))))
}

fn bitcast(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let code = ctx
        .attr_opt_int("to")?
        .ok_or_else(|| OpError::BadAttr("attribute 'to' is required".into()))?;
    let to = DataType::from_onnx(code as i32).ok_or_else(|| {
        OpError::BadAttr(format!(
            "attribute 'to' = {code} is not a tensor element type"
        ))
    })?;
    let from = ctx.dtype(0)?;
    if from == DataType::String || to == DataType::String {
        return invalid("BitCast from or to string");
    }
    if from.bits() != to.bits() {
        return invalid(format!(
            "BitCast from {from} ({} bits) to {to} ({} bits): the widths differ",
            from.bits(),
            to.bits()
        ));
    }
    Ok(vec![Fact::new(to, ctx.shape(0)?.to_vec())])
}

fn cast_like(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let to = ctx.dtype(1)?;
    let shape = ctx.shape(0)?.to_vec();
    let value = symbolic_value(ctx.input(0)?).and_then(|k| cast_known(k, to));
    Ok(vec![fact(to, shape, value)])
}

/// `Neg`, `Abs` and `Sign` of symbolic integers; other unary ops are float math, which the
/// kernel folds.
fn unary(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let shape = ctx.shape(0)?.to_vec();
    if let Some(Known::Ratio(v)) = ctx.input(0)?.value.as_ref() {
        let op = ctx.node.op.as_str();
        let value = v
            .iter()
            .map(|x| ratio_unary(op, x))
            .collect::<Option<Vec<_>>>()
            .and_then(Known::of_ratios);
        return Ok(vec![fact(t, shape, value)]);
    }
    let ints = match int_value(ctx.input(0)?) {
        Some(Known::Int(v)) if t.is_int() => Some(v),
        _ => None,
    };
    let value = ints.and_then(|v| {
        let f: fn(&Expr) -> Option<Expr> = match ctx.node.op.as_str() {
            "Neg" => |e| Some(-e),
            "Abs" => |e| Some(if sign_of(e)? >= 0 { e.clone() } else { -e }),
            "Sign" => |e| sign_of(e).map(Expr::int),
            _ => return None,
        };
        v.iter().map(f).collect::<Option<Vec<_>>>().map(Known::Int)
    });
    Ok(vec![fact(t, shape, value)])
}

#[cfg(test)]
mod tests {
    use super::super::tests::{attr, fact_of, shape_of, TestGraph};
    use crate::graph::AttrValue;
    use crate::infer::Known;
    use crate::DataType;

    #[test]
    fn numpy_broadcasting_of_symbolic_shapes() {
        let mut t = TestGraph::new();
        let a = t.input("a", DataType::F32, "N, 1, 32");
        let b = t.input("b", DataType::F32, "M, 1");
        let c = t.input("c", DataType::F32, "N, N, 32");
        let ab = t.op("Add", &[a, b], &["ab"], vec![])[0];
        let ac = t.op("Mul", &[a, c], &["ac"], vec![])[0];
        let eq = t.op("Equal", &[a, c], &["eq"], vec![])[0];
        let cond = t.input("cond", DataType::Bool, "1, N, 1");
        let w = t.op("Where", &[cond, a, c], &["w"], vec![])[0];
        let f = t.run(18).unwrap();
        assert_eq!(shape_of(&f, ab), "[N, M, 32]");
        assert_eq!(shape_of(&f, ac), "[N, N, 32]");
        assert_eq!(fact_of(&f, eq), "bool [N, N, 32]");
        assert_eq!(shape_of(&f, w), "[N, N, 32]");
    }

    /// `ceil(h / p) * p` computed in floats on a symbolic size and cast back (MobileViT's patch
    /// padding as TorchScript exports it) is the integer expression; a division by 3 is rounded
    /// once, so only `Ceil`/`Floor`/a cast may read it.
    #[test]
    fn float_shape_arithmetic_on_symbols_folds_exactly() {
        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "N, 8");
        let s = t.op("Shape", &[x], &["s"], vec![])[0];
        let zero = t.ints("zero", &[], &[0]);
        let h = t.op("Gather", &[s, zero], &["h"], vec![])[0];
        let hf = t.op("Cast", &[h], &["hf"], vec![attr("to", AttrValue::Int(1))])[0];
        let two = t.floats("two", &[], &[2.0]);
        let three = t.floats("three", &[], &[3.0]);
        let d = t.op("Div", &[hf, two], &["d"], vec![])[0];
        let c = t.op("Ceil", &[d], &["c"], vec![])[0];
        let m = t.op("Mul", &[c, two], &["m"], vec![])[0];
        let back = t.op("Cast", &[m], &["back"], vec![attr("to", AttrValue::Int(7))])[0];
        // h / 2 * 2 is h again, exactly.
        let d2 = t.op("Mul", &[d, two], &["d2"], vec![])[0];
        let h2 = t.op("Cast", &[d2], &["h2"], vec![attr("to", AttrValue::Int(7))])[0];
        let q = t.op("Div", &[hf, three], &["q"], vec![])[0];
        let fq = t.op("Floor", &[q], &["fq"], vec![])[0];
        let fqi = t.op("Cast", &[fq], &["fqi"], vec![attr("to", AttrValue::Int(7))])[0];
        let q3 = t.op("Mul", &[q, three], &["q3"], vec![])[0];
        let lt = t.op("Less", &[d, hf], &["lt"], vec![])[0];
        let f = t.run(18).unwrap();
        let n: crate::Expr = "N".parse().unwrap();
        let int = |v| f.get(v).value.clone().and_then(|k| k.as_exprs());
        assert_eq!(
            int(back),
            Some(vec![&n.ceil_div(&2.into()) * &crate::Expr::int(2)])
        );
        assert_eq!(int(h2), Some(vec![n.clone()]));
        assert_eq!(int(fqi), Some(vec![n.floor_div(&3.into())]));
        // Rounded once: no exact product, and no value.
        assert_eq!(f.get(q3).value, None);
        assert_eq!(f.get(lt).value, Some(Known::Int(vec![1.into()])));
        assert_eq!(f.get(m).dtype, Some(DataType::F32));
    }

    #[test]
    fn small_integer_tensors_fold() {
        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "N, 8");
        let s = t.op("Shape", &[x], &["s"], vec![])[0];
        let two = t.ints("two", &[1], &[2]);
        let m = t.op("Mul", &[s, two], &["m"], vec![])[0];
        let d = t.op("Div", &[m, two], &["d"], vec![])[0];
        let c = t.op("Cast", &[d], &["c"], vec![attr("to", AttrValue::Int(1))])[0];
        let f = t.run(18).unwrap();
        let n: crate::Expr = "N".parse().unwrap();
        assert_eq!(
            f.get(m).value,
            Some(Known::Int(vec![&n * &crate::Expr::int(2), 16.into()]))
        );
        assert_eq!(f.get(d).value, Some(Known::Int(vec![n, 8.into()])));
        assert_eq!(f.get(c).dtype, Some(DataType::F32));
    }

    #[test]
    fn mismatched_types_and_shapes_name_the_node() {
        let mut t = TestGraph::new();
        let a = t.input("a", DataType::F32, "3, 4");
        let b = t.input("b", DataType::F32, "5, 4");
        t.op("Add", &[a, b], &["y"], vec![]);
        let e = t.run(18).unwrap_err().to_string();
        assert!(
            e.contains("'add_0' (Add)") && e.contains("cannot broadcast"),
            "{e}"
        );
        let mut t = TestGraph::new();
        let a = t.input("a", DataType::F32, "3");
        let b = t.input("b", DataType::I64, "3");
        t.op("Mul", &[a, b], &["y"], vec![]);
        let e = t.run(18).unwrap_err().to_string();
        assert!(e.contains("'mul_0' (Mul)"), "{e}");
    }
}
