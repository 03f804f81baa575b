//! Elementwise ops: unary math and activations, binary arithmetic with broadcasting, variadic
//! Max/Min/Sum/Mean, comparisons, logic, bit ops, Where, Clip, PRelu, IsNaN/IsInf, Cast, CastLike.
//!
//! Every output element is one scalar function of the elements it broadcasts from (see
//! `kernels::elementwise`), so any slice of the output is bit-identical to the whole. f16/bf16 values
//! are widened to f32 per element, computed in f32 and rounded back; bool is stored as one byte and read
//! as `byte != 0`.
//!
//! Scratch: none.

use half::{bf16, f16};
use memplan_ir::DataType;

use super::basic::view_or_copy;
use super::{fail, opt, raw, raw_mut, req, unsupported, OpCtx, OpFail, OpFn};
use crate::kernels::cast::{CastElem, CastValue};
use crate::kernels::elementwise::{
    assign_broadcast, binary, binary_op, broadcast_shapes, ternary, unary, unary_costly, Arith,
    BinaryOp, Shift,
};
use crate::kernels::minifloat::RoundMode;
use crate::tensor::{elem_size, Tensor};

pub const OPS: &[(&str, OpFn)] = &[
    ("Abs", un),
    ("Neg", un),
    ("Sign", un),
    ("Relu", un),
    ("Sqrt", un),
    ("Exp", un),
    ("Log", un),
    ("Tanh", un),
    ("Sigmoid", un),
    ("Erf", un),
    ("Reciprocal", un),
    ("Floor", un),
    ("Ceil", un),
    ("Round", un),
    ("Sin", un),
    ("Cos", un),
    ("Tan", un),
    ("Asin", un),
    ("Acos", un),
    ("Atan", un),
    ("Sinh", un),
    ("Cosh", un),
    ("Asinh", un),
    ("Acosh", un),
    ("Atanh", un),
    ("Softsign", un),
    ("Softplus", un),
    ("Elu", un),
    ("Selu", un),
    ("Celu", un),
    ("LeakyRelu", un),
    ("ThresholdedRelu", un),
    ("HardSigmoid", un),
    ("HardSwish", un),
    ("Gelu", un),
    ("Mish", un),
    ("Shrink", un),
    ("Add", arith),
    ("Sub", arith),
    ("Mul", arith),
    ("Div", arith),
    ("Mod", arith),
    ("Pow", pow),
    ("Max", variadic),
    ("Min", variadic),
    ("Sum", variadic),
    ("Mean", variadic),
    ("Equal", compare),
    ("Less", compare),
    ("Greater", compare),
    ("LessOrEqual", compare),
    ("GreaterOrEqual", compare),
    ("And", logic),
    ("Or", logic),
    ("Xor", logic),
    ("Not", not),
    ("BitShift", bitshift),
    ("BitwiseAnd", bitwise),
    ("BitwiseOr", bitwise),
    ("BitwiseXor", bitwise),
    ("BitwiseNot", bitwise_not),
    ("Where", where_),
    ("Clip", clip),
    ("PRelu", prelu),
    ("IsNaN", is_nan),
    ("IsInf", is_inf),
    ("Cast", cast),
    ("CastLike", cast_like),
    ("BitCast", bitcast),
];

/// Float math for f32 and f64, one scalar libm call or IEEE operation per function.
pub trait Fl:
    Copy
    + Send
    + Sync
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
    + 'static
{
    fn c(v: f64) -> Self;
    fn abs(self) -> Self;
    fn sqrt(self) -> Self;
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn tanh(self) -> Self;
    fn erf(self) -> Self;
    fn floor(self) -> Self;
    fn ceil(self) -> Self;
    fn round_even(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn tan(self) -> Self;
    fn asin(self) -> Self;
    fn acos(self) -> Self;
    fn atan(self) -> Self;
    fn sinh(self) -> Self;
    fn cosh(self) -> Self;
    fn asinh(self) -> Self;
    fn acosh(self) -> Self;
    fn atanh(self) -> Self;
    fn powf(self, e: Self) -> Self;
    fn is_nan(self) -> bool;
    fn is_infinite(self) -> bool;
    fn is_sign_negative(self) -> bool;
}

macro_rules! impl_fl {
    ($t:ty, $erf:path, $exp:path, $ln:path, $tanh:path) => {
        impl Fl for $t {
            #[inline(always)]
            fn c(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn exp(self) -> Self {
                $exp(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                $ln(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                $tanh(self)
            }
            #[inline(always)]
            fn erf(self) -> Self {
                $erf(self)
            }
            #[inline(always)]
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            #[inline(always)]
            fn ceil(self) -> Self {
                <$t>::ceil(self)
            }
            #[inline(always)]
            fn round_even(self) -> Self {
                <$t>::round_ties_even(self)
            }
            #[inline(always)]
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            #[inline(always)]
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            #[inline(always)]
            fn tan(self) -> Self {
                <$t>::tan(self)
            }
            #[inline(always)]
            fn asin(self) -> Self {
                <$t>::asin(self)
            }
            #[inline(always)]
            fn acos(self) -> Self {
                <$t>::acos(self)
            }
            #[inline(always)]
            fn atan(self) -> Self {
                <$t>::atan(self)
            }
            #[inline(always)]
            fn sinh(self) -> Self {
                <$t>::sinh(self)
            }
            #[inline(always)]
            fn cosh(self) -> Self {
                <$t>::cosh(self)
            }
            #[inline(always)]
            fn asinh(self) -> Self {
                <$t>::asinh(self)
            }
            #[inline(always)]
            fn acosh(self) -> Self {
                <$t>::acosh(self)
            }
            #[inline(always)]
            fn atanh(self) -> Self {
                <$t>::atanh(self)
            }
            #[inline(always)]
            fn powf(self, e: Self) -> Self {
                <$t>::powf(self, e)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline(always)]
            fn is_infinite(self) -> bool {
                <$t>::is_infinite(self)
            }
            #[inline(always)]
            fn is_sign_negative(self) -> bool {
                <$t>::is_sign_negative(self)
            }
        }
    };
}
// f32 exp, ln, erf and tanh are `fastmath`'s, as in `kernels::elementwise` (the same function
// wherever an f32 op computes one: `Erf` and `Gelu`, `Tanh` and `Mish`, `Log` and `Softplus`).
impl_fl!(
    f32,
    crate::kernels::fastmath::erf_f32,
    crate::kernels::fastmath::exp_f32,
    crate::kernels::fastmath::ln_f32,
    crate::kernels::fastmath::tanh_f32
);
impl_fl!(f64, libm::erf, f64::exp, f64::ln, f64::tanh);

#[inline(always)]
fn maxf<T: Fl>(a: T, b: T) -> T {
    if b > a {
        b
    } else {
        a
    }
}

#[inline(always)]
fn minf<T: Fl>(a: T, b: T) -> T {
    if b < a {
        b
    } else {
        a
    }
}

/// `ln(1 + e^v)` as `v + ln(e^-v + 1)` above zero and `0 + ln(e^v + 1)` elsewhere: one path of
/// selects (no branch, so that its loop vectorizes), exact where it adds 0.
#[inline(always)]
fn softplus<T: Fl>(v: T) -> T {
    let one = T::c(1.0);
    let pos = v > T::c(0.0);
    let (m, a) = if pos { (v, -v) } else { (T::c(0.0), v) };
    m + (a.exp() + one).ln()
}

#[inline(always)]
fn sign<T: Fl>(v: T) -> T {
    if v > T::c(0.0) {
        T::c(1.0)
    } else if v < T::c(0.0) {
        T::c(-1.0)
    } else {
        v
    }
}

#[inline(always)]
fn relu<T: Fl>(v: T) -> T {
    if v < T::c(0.0) {
        T::c(0.0)
    } else {
        v
    }
}

#[inline(always)]
fn softsign<T: Fl>(v: T) -> T {
    v / (T::c(1.0) + v.abs())
}

#[inline(always)]
fn hard_swish<T: Fl>(v: T) -> T {
    v * maxf(T::c(0.0), minf(T::c(1.0), v / T::c(6.0) + T::c(0.5)))
}

#[inline(always)]
fn mish<T: Fl>(v: T) -> T {
    v * softplus(v).tanh()
}

#[inline(always)]
fn elu<T: Fl>(v: T, p: &[T; 2]) -> T {
    if v < T::c(0.0) {
        p[0] * (v.exp() - T::c(1.0))
    } else {
        v
    }
}

#[inline(always)]
fn selu<T: Fl>(v: T, p: &[T; 2]) -> T {
    if v > T::c(0.0) {
        p[1] * v
    } else {
        p[1] * (p[0] * v.exp() - p[0])
    }
}

#[inline(always)]
fn celu<T: Fl>(v: T, p: &[T; 2]) -> T {
    maxf(T::c(0.0), v) + minf(T::c(0.0), p[0] * ((v / p[0]).exp() - T::c(1.0)))
}

#[inline(always)]
fn hard_sigmoid<T: Fl>(v: T, p: &[T; 2]) -> T {
    maxf(T::c(0.0), minf(T::c(1.0), p[0] * v + p[1]))
}

#[inline(always)]
fn leaky_relu<T: Fl>(v: T, p: &[T; 2]) -> T {
    if v < T::c(0.0) {
        p[0] * v
    } else {
        v
    }
}

/// A unary scalar function with its two float attributes (`p[0]`, `p[1]`; meaning per op).
type UnFn<T> = fn(T, &[T; 2]) -> T;

/// The scalar function of float unary op `op` (`gelu_tanh` selects Gelu's tanh approximation) and the
/// defaults of its attributes `(name, default)`. One function pointer per op keeps one instantiation
/// of the driver per type.
fn unary_fn<T: Fl>(op: &str, gelu_tanh: bool) -> Option<(UnFn<T>, [(&'static str, f32); 2])> {
    let c = T::c;
    let none = [("", 0.0), ("", 0.0)];
    let f: UnFn<T> = match op {
        "Abs" => |v, _| v.abs(),
        "Neg" => |v, _| -v,
        "Sign" => |v, _| sign(v),
        "Relu" => |v, _| relu(v),
        "Sqrt" => |v, _| v.sqrt(),
        "Exp" => |v, _| v.exp(),
        "Log" => |v, _| v.ln(),
        "Tanh" => |v, _| v.tanh(),
        "Sigmoid" => |v, _| T::c(1.0) / (T::c(1.0) + (-v).exp()),
        "Erf" => |v, _| Fl::erf(v),
        "Reciprocal" => |v, _| T::c(1.0) / v,
        "Floor" => |v, _| v.floor(),
        "Ceil" => |v, _| v.ceil(),
        "Round" => |v, _| v.round_even(),
        "Sin" => |v, _| v.sin(),
        "Cos" => |v, _| v.cos(),
        "Tan" => |v, _| v.tan(),
        "Asin" => |v, _| v.asin(),
        "Acos" => |v, _| v.acos(),
        "Atan" => |v, _| v.atan(),
        "Sinh" => |v, _| v.sinh(),
        "Cosh" => |v, _| v.cosh(),
        "Asinh" => |v, _| v.asinh(),
        "Acosh" => |v, _| v.acosh(),
        "Atanh" => |v, _| v.atanh(),
        "Softsign" => |v, _| softsign(v),
        "Softplus" => |v, _| softplus(v),
        "Mish" => |v, _| mish(v),
        "HardSwish" => |v, _| hard_swish(v),
        "Gelu" if gelu_tanh => |v, _| {
            let k0 = (T::c(2.0) / T::c(std::f64::consts::PI)).sqrt();
            T::c(0.5) * v * (T::c(1.0) + (k0 * (v + T::c(0.044715) * v * v * v)).tanh())
        },
        "Gelu" => |v, _| T::c(0.5) * v * (T::c(1.0) + Fl::erf(v * (T::c(1.0) / T::c(2.0).sqrt()))),
        _ => {
            let (f, attrs): (UnFn<T>, _) = match op {
                "Elu" => (elu, [("alpha", 1.0), ("", 0.0)]),
                "Selu" => (selu, [("alpha", 1.673_263_2), ("gamma", 1.050_701)]),
                "Celu" => (celu, [("alpha", 1.0), ("", 0.0)]),
                "LeakyRelu" => (leaky_relu, [("alpha", 0.01), ("", 0.0)]),
                "ThresholdedRelu" => (
                    |v, p| if v > p[0] { v } else { T::c(0.0) },
                    [("alpha", 1.0), ("", 0.0)],
                ),
                "HardSigmoid" => (hard_sigmoid, [("alpha", 0.2), ("beta", 0.5)]),
                "Shrink" => (
                    |v, p| {
                        if v < -p[1] {
                            v + p[0]
                        } else if v > p[1] {
                            v - p[0]
                        } else {
                            T::c(0.0)
                        }
                    },
                    [("bias", 0.0), ("lambd", 0.5)],
                ),
                _ => return None,
            };
            return Some((f, attrs));
        }
    };
    let _ = c;
    Some((f, none))
}

/// Runs float unary op `ctx.node.op` over `x` into `out`, loading/storing through `T` (f32 or f64).
fn run_unary<S: crate::kernels::elementwise::Elem, T: Fl>(
    ctx: &OpCtx,
    x: &[S],
    out: &mut [S],
    load: fn(S) -> T,
    store: fn(T) -> S,
) -> Result<(), OpFail> {
    let tanh = match ctx.string("approximate")?.as_deref() {
        None | Some("none") => false,
        Some("tanh") => true,
        Some(a) => return fail(format!("Gelu approximate='{a}' is not 'none' or 'tanh'")),
    };
    let Some((f, attrs)) = unary_fn::<T>(&ctx.node.op, tanh) else {
        return unsupported(format!("unary op {}", ctx.node.op));
    };
    let p = unary_params(ctx, attrs)?;
    // The scalar function is called through a pointer, most of them libm calls: costly enough
    // per element to spread over threads from a few thousand elements.
    unary_costly(x, out, move |v| store(f(load(v), &p)))?;
    Ok(())
}

/// The values of a table entry's two float attributes (`unary_fn`'s names and defaults; an unnamed
/// slot is 0).
fn unary_params<T: Fl>(ctx: &OpCtx, attrs: [(&str, f32); 2]) -> Result<[T; 2], OpFail> {
    let mut p = [T::c(0.0); 2];
    for (slot, (name, default)) in p.iter_mut().zip(attrs) {
        if !name.is_empty() {
            *slot = T::c(ctx.float(name, default)? as f64);
        }
    }
    Ok(p)
}

/// Common f32 unary ops with the scalar function inlined into the loop, so that it vectorizes:
/// `fastmath`'s functions as they are, the others as `#[inline(always)]` closures, since the
/// compiler's own choice left a large body (`Softplus`: an exp and a log) outside the AVX2 loop,
/// called per element (20 ns an element).
/// The same per-element function as [`unary_fn`], so the same bits. `false` when `op` is not one
/// of them.
fn unary_f32_inline(ctx: &OpCtx, x: &[f32], out: &mut [f32]) -> Result<bool, OpFail> {
    use crate::kernels::fastmath::{erf_f32, exp_f32, ln_f32, sigmoid_f32, tanh_f32};
    let op = ctx.node.op.as_str();
    // The attributes of the ops that have some, as the table reads them.
    let p = || match unary_fn::<f32>(op, false) {
        Some((_, attrs)) => unary_params::<f32>(ctx, attrs),
        None => Ok([0.0; 2]),
    };
    // `f(v)` (or a body of `v`), inlined into the loop.
    macro_rules! inlined {
        (|$v:ident| $body:expr) => {
            unary(
                x,
                out,
                #[inline(always)]
                |$v: f32| $body,
            )?
        };
        ($f:ident) => {
            inlined!(|v| $f(v))
        };
    }
    // `f(v, &p)` with the op's attributes `p`, inlined into the loop.
    macro_rules! with_params {
        ($f:ident) => {{
            let p = p()?;
            unary(
                x,
                out,
                #[inline(always)]
                move |v: f32| $f(v, &p),
            )?
        }};
    }
    match op {
        "Floor" => inlined!(|v| v.floor()),
        "Ceil" => inlined!(|v| v.ceil()),
        "Sign" => inlined!(sign),
        "Softsign" => inlined!(softsign),
        "HardSwish" => inlined!(hard_swish),
        "HardSigmoid" => with_params!(hard_sigmoid),
        "LeakyRelu" => with_params!(leaky_relu),
        "Elu" => with_params!(elu),
        "Selu" => with_params!(selu),
        "Celu" => with_params!(celu),
        "Sigmoid" => unary(x, out, sigmoid_f32)?,
        "Exp" => unary(x, out, exp_f32)?,
        "Log" => unary(x, out, ln_f32)?,
        "Softplus" => inlined!(softplus),
        "Mish" => inlined!(mish),
        "Erf" => unary(x, out, erf_f32)?,
        "Tanh" => unary(x, out, tanh_f32)?,
        "Relu" => inlined!(relu),
        "Neg" => inlined!(|v| -v),
        "Abs" => inlined!(|v| v.abs()),
        "Sqrt" => inlined!(|v| v.sqrt()),
        "Reciprocal" => inlined!(|v| 1.0 / v),
        _ => return Ok(false),
    }
    Ok(true)
}

fn un(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    // Every path below writes every element (or fails).
    let mut out = ctx.alloc_for_overwrite(x.dtype, &x.shape)?;
    let op = ctx.node.op.as_str();
    if x.dtype == DataType::F32 && unary_f32_inline(ctx, x.data()?, out.data_mut()?)? {
        return Ok(vec![out]);
    }
    match x.dtype {
        DataType::F32 => run_unary::<f32, f32>(ctx, x.data()?, out.data_mut()?, |v| v, |v| v)?,
        DataType::F64 => run_unary::<f64, f64>(ctx, x.data()?, out.data_mut()?, |v| v, |v| v)?,
        DataType::F16 => {
            run_unary::<f16, f32>(ctx, x.data()?, out.data_mut()?, f16::to_f32, f16::from_f32)?
        }
        DataType::BF16 => run_unary::<bf16, f32>(
            ctx,
            x.data()?,
            out.data_mut()?,
            bf16::to_f32,
            bf16::from_f32,
        )?,
        dt if matches!(op, "Abs" | "Neg" | "Sign" | "Relu") => {
            // Each op its own function, inlined into the loop (not through a pointer).
            dispatch!(dt, T => {
                let (x, o) = (x.data::<T>()?, out.data_mut::<T>()?);
                match op {
                    "Abs" => unary(x, o, <T as Arith>::abs)?,
                    "Neg" => unary(x, o, <T as Arith>::neg)?,
                    "Sign" => unary(x, o, <T as Arith>::sign)?,
                    _ => unary(x, o, |v: T| if v < <T as Arith>::ZERO { <T as Arith>::ZERO } else { v })?,
                }
            }, [I8 => i8, I16 => i16, I32 => i32, I64 => i64],
            return unsupported(format!("{op} on {dt}")))
        }
        dt => return unsupported(format!("{op} on {dt}")),
    }
    Ok(vec![out])
}

/// The output of a broadcasting op with inputs `ins`, not zeroed: every caller writes all of it
/// (`binary`, `ternary` and the first `assign_broadcast` of a variadic op cover every element).
fn bcast_out(
    ctx: &OpCtx,
    dtype: DataType,
    ins: &[&Tensor],
) -> Result<(Tensor, Vec<usize>), OpFail> {
    let shapes: Vec<&[usize]> = ins.iter().map(|t| t.shape.as_slice()).collect();
    let oshape = broadcast_shapes(&shapes)?;
    Ok((ctx.alloc_for_overwrite(dtype, &oshape)?, oshape))
}

fn same_type(ctx: &OpCtx, ins: &[&Tensor]) -> Result<DataType, OpFail> {
    let Some(first) = ins.first() else {
        return fail("needs at least one input");
    };
    if let Some(t) = ins.iter().find(|t| t.dtype != first.dtype) {
        return fail(format!(
            "{} inputs mix {} and {}",
            ctx.node.op, first.dtype, t.dtype
        ));
    }
    Ok(first.dtype)
}

/// `f32` arithmetic of a binary op, for f16/bf16 (computed in f32, rounded back).
fn f32_binary(op: BinaryOp) -> fn(f32, f32) -> f32 {
    match op {
        BinaryOp::Add => |x, y| x + y,
        BinaryOp::Sub => |x, y| x - y,
        BinaryOp::Mul => |x, y| x * y,
        BinaryOp::Div => |x, y| x / y,
        BinaryOp::Pow => f32::powf,
        BinaryOp::Mod { fmod: true } => |x, y| x % y,
        BinaryOp::Mod { fmod: false } => <f32 as Arith>::floor_mod,
        BinaryOp::Max => |x, y| {
            if x.is_nan() || y > x || y.is_nan() {
                if x.is_nan() {
                    x
                } else {
                    y
                }
            } else {
                x
            }
        },
        BinaryOp::Min => |x, y| {
            if x.is_nan() || y < x || y.is_nan() {
                if x.is_nan() {
                    x
                } else {
                    y
                }
            } else {
                x
            }
        },
    }
}

fn arith(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (a, b) = (req(inputs, 0)?, req(inputs, 1)?);
    let dt = same_type(ctx, &[a, b])?;
    let op = match ctx.node.op.as_str() {
        "Add" => BinaryOp::Add,
        "Sub" => BinaryOp::Sub,
        "Mul" => BinaryOp::Mul,
        "Div" => BinaryOp::Div,
        "Mod" => BinaryOp::Mod {
            fmod: ctx.int("fmod", 0)? != 0,
        },
        o => return unsupported(format!("binary op {o}")),
    };
    let (mut out, os) = bcast_out(ctx, dt, &[a, b])?;
    macro_rules! half_bin {
        ($h:ty) => {{
            let f = f32_binary(op);
            binary(
                a.data::<$h>()?,
                &a.shape,
                b.data::<$h>()?,
                &b.shape,
                out.data_mut::<$h>()?,
                &os,
                |x, y| <$h>::from_f32(f(x.to_f32(), y.to_f32())),
            )?
        }};
    }
    match dt {
        DataType::F16 => half_bin!(f16),
        DataType::BF16 => half_bin!(bf16),
        _ => {
            dispatch!(dt, T => binary_op::<T>(op, a.data()?, &a.shape, b.data()?, &b.shape, out.data_mut()?, &os)?,
            [F32 => f32, F64 => f64, I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8, U16 => u16, U32 => u32, U64 => u64],
            return unsupported(format!("{op:?} on {dt}")))
        }
    }
    Ok(vec![out])
}

/// Pow of an f32 base by a one-element exponent of 2, 3, 1 or 0.5, without `powf`: `x * x` (the
/// correctly rounded square, which `powf` also returns), `x * x * x` (as onnxruntime computes a
/// cube: within 1 ulp of `powf`), `x`, and `sqrt(x)` with `pow`'s values at -0 (+0) and -inf
/// (+inf); `sqrt` is correctly rounded where `powf` may be 1 ulp off. `false` for any other
/// exponent.
fn pow_f32_special(a: &Tensor, b: &Tensor, out: &mut Tensor) -> Result<bool, OpFail> {
    if b.numel() != 1 {
        return Ok(false);
    }
    let e = match b.dtype {
        DataType::F32 => b.data::<f32>()?[0] as f64,
        DataType::F64 => b.data::<f64>()?[0],
        DataType::I32 => b.data::<i32>()?[0] as f64,
        DataType::I64 => b.data::<i64>()?[0] as f64,
        _ => return Ok(false),
    };
    let (x, o) = (a.data::<f32>()?, out.data_mut::<f32>()?);
    if e == 2.0 {
        unary(x, o, |v: f32| v * v)?;
    } else if e == 3.0 {
        unary(x, o, |v: f32| v * v * v)?;
    } else if e == 1.0 {
        unary(x, o, |v: f32| v)?;
    } else if e == 0.5 {
        unary(x, o, |v: f32| {
            if v == 0.0 {
                0.0
            } else if v == f32::NEG_INFINITY {
                f32::INFINITY
            } else {
                v.sqrt()
            }
        })?;
    } else {
        return Ok(false);
    }
    Ok(true)
}

/// Pow: the exponent may have another numeric type than the base; the output has the base's type.
fn pow(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (a, b) = (req(inputs, 0)?, req(inputs, 1)?);
    let (mut out, os) = bcast_out(ctx, a.dtype, &[a, b])?;
    if a.dtype == DataType::F32 && out.numel() == a.numel() && pow_f32_special(a, b, &mut out)? {
        return Ok(vec![out]);
    }
    if a.dtype == b.dtype && !matches!(a.dtype, DataType::F16 | DataType::BF16) {
        dispatch!(a.dtype, T => binary_op::<T>(BinaryOp::Pow, a.data()?, &a.shape, b.data()?, &b.shape, out.data_mut()?, &os)?,
            [F32 => f32, F64 => f64, I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8, U16 => u16, U32 => u32, U64 => u64],
            return unsupported(format!("Pow on {}", a.dtype)));
        return Ok(vec![out]);
    }
    // Mixed types: the exponent is converted to the base's float type (as onnxruntime does).
    macro_rules! exp_as {
        ($B:ty, $conv:expr) => {
            dispatch!(b.dtype, E => {
                let conv = $conv;
                binary(a.data::<$B>()?, &a.shape, b.data::<E>()?, &b.shape, out.data_mut::<$B>()?, &os, |x, y| conv(x, y as f64))?
            }, [F32 => f32, F64 => f64, I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8, U16 => u16, U32 => u32, U64 => u64],
            return unsupported(format!("Pow with a {} exponent", b.dtype)))
        };
    }
    macro_rules! exp_half {
        ($B:ty, $H:ty) => {{
            let bv = b.data::<$H>()?;
            binary(
                a.data::<$B>()?,
                &a.shape,
                bv,
                &b.shape,
                out.data_mut::<$B>()?,
                &os,
                |x, y| <$B>::from_f32(x.to_f32().powf(y.to_f32())),
            )?
        }};
    }
    match (a.dtype, b.dtype) {
        (DataType::F32, DataType::F16 | DataType::BF16)
        | (DataType::F64, DataType::F16 | DataType::BF16) => {
            return unsupported(format!("Pow of {} by {}", a.dtype, b.dtype))
        }
        (DataType::F16, DataType::F16) => exp_half!(f16, f16),
        (DataType::BF16, DataType::BF16) => exp_half!(bf16, bf16),
        (DataType::F32, _) => exp_as!(f32, |x: f32, y: f64| x.powf(y as f32)),
        (DataType::F64, _) => exp_as!(f64, |x: f64, y: f64| x.powf(y)),
        (DataType::F16, _) => exp_as!(f16, |x: f16, y: f64| f16::from_f32(
            x.to_f32().powf(y as f32)
        )),
        (DataType::BF16, _) => exp_as!(bf16, |x: bf16, y: f64| bf16::from_f32(
            x.to_f32().powf(y as f32)
        )),
        (DataType::I64, _) | (DataType::I32, _) => {
            // Integer base, other exponent type: exponent truncated to the base type.
            dispatch!(a.dtype, B => dispatch!(b.dtype, E => {
                binary(a.data::<B>()?, &a.shape, b.data::<E>()?, &b.shape, out.data_mut::<B>()?, &os, |x, y| Arith::pow(x, y as B))?
            }, [F32 => f32, F64 => f64, I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8, U16 => u16, U32 => u32, U64 => u64], return unsupported(format!("Pow with a {} exponent", b.dtype))),
            [I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8, U16 => u16, U32 => u32, U64 => u64], return unsupported(format!("Pow of {}", a.dtype)))
        }
        (d, e) => return unsupported(format!("Pow of {d} by {e}")),
    }
    Ok(vec![out])
}

fn variadic(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let ins: Vec<&Tensor> = inputs.iter().flatten().copied().collect();
    let dt = same_type(ctx, &ins)?;
    let (mut out, os) = bcast_out(ctx, dt, &ins)?;
    let op = ctx.node.op.as_str();
    macro_rules! fold {
        ($T:ty, $f:expr, $div:expr) => {{
            let o = out.data_mut::<$T>()?;
            let first = ins[0];
            if let [_, second] = ins[..] {
                // Two inputs: `f(a, b)` in the broadcast binary loop, the value the fold gives.
                let (x, y) = (first.data::<$T>()?, second.data::<$T>()?);
                binary(x, &first.shape, y, &second.shape, o, &os, $f)?;
            } else {
                assign_broadcast(o, &os, first.data::<$T>()?, &first.shape, |_, v| v)?;
                for t in &ins[1..] {
                    assign_broadcast(o, &os, t.data::<$T>()?, &t.shape, $f)?;
                }
            }
            if op == "Mean" {
                let n = ins.len();
                unary_in_place(o, |v| $div(v, n));
            }
        }};
    }
    macro_rules! typed {
        ($T:ty) => {
            match op {
                "Sum" | "Mean" => fold!($T, <$T as Arith>::add, |v: $T, n| <$T as Arith>::div(
                    v,
                    <$T as Arith>::from_usize(n)
                )),
                "Max" => fold!($T, <$T as Arith>::max_nan, |v: $T, _| v),
                _ => fold!($T, <$T as Arith>::min_nan, |v: $T, _| v),
            }
        };
    }
    macro_rules! half {
        ($H:ty) => {{
            let f = f32_binary(match op {
                "Sum" | "Mean" => BinaryOp::Add,
                "Max" => BinaryOp::Max,
                _ => BinaryOp::Min,
            });
            fold!(
                $H,
                |x: $H, y: $H| <$H>::from_f32(f(x.to_f32(), y.to_f32())),
                |v: $H, n: usize| <$H>::from_f32(v.to_f32() / n as f32)
            )
        }};
    }
    match dt {
        DataType::F16 => half!(f16),
        DataType::BF16 => half!(bf16),
        _ => dispatch!(dt, T => typed!(T),
            [F32 => f32, F64 => f64, I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8, U16 => u16, U32 => u32, U64 => u64],
            return unsupported(format!("{op} on {dt}"))),
    }
    Ok(vec![out])
}

fn unary_in_place<T: Copy>(o: &mut [T], f: impl Fn(T) -> T) {
    for v in o.iter_mut() {
        *v = f(*v);
    }
}

fn compare(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (a, b) = (req(inputs, 0)?, req(inputs, 1)?);
    let dt = same_type(ctx, &[a, b])?;
    let (mut out, os) = bcast_out(ctx, DataType::Bool, &[a, b])?;
    let op = ctx.node.op.as_str();
    // Each comparison a closure of its own, inlined into the broadcast loop (through a function
    // pointer it was a call per element: 1 ns an element on int64).
    macro_rules! cmp {
        ($T:ty) => {{
            let (x, y, o) = (a.data::<$T>()?, b.data::<$T>()?, out.data_mut::<u8>()?);
            macro_rules! go {
                ($f:expr) => {
                    binary(x, &a.shape, y, &b.shape, o, &os, $f)?
                };
            }
            match op {
                "Equal" => go!(|p: $T, q: $T| (p == q) as u8),
                "Less" => go!(|p: $T, q: $T| (p < q) as u8),
                "Greater" => go!(|p: $T, q: $T| (p > q) as u8),
                "LessOrEqual" => go!(|p: $T, q: $T| (p <= q) as u8),
                _ => go!(|p: $T, q: $T| (p >= q) as u8),
            }
        }};
    }
    if dt == DataType::Bool {
        let (x, y, o) = (a.data::<u8>()?, b.data::<u8>()?, out.data_mut::<u8>()?);
        match op {
            "Equal" => binary(x, &a.shape, y, &b.shape, o, &os, |p, q| {
                ((p != 0) == (q != 0)) as u8
            })?,
            _ => return unsupported(format!("{op} on bool")),
        }
        return Ok(vec![out]);
    }
    dispatch!(dt, T => cmp!(T),
        [F32 => f32, F64 => f64, F16 => f16, BF16 => bf16, I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8, U16 => u16, U32 => u32, U64 => u64],
        return unsupported(format!("{op} on {dt}")));
    Ok(vec![out])
}

fn logic(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (a, b) = (req(inputs, 0)?, req(inputs, 1)?);
    if a.dtype != DataType::Bool || b.dtype != DataType::Bool {
        return fail(format!(
            "{} needs bool inputs, got {} and {}",
            ctx.node.op, a.dtype, b.dtype
        ));
    }
    let (mut out, os) = bcast_out(ctx, DataType::Bool, &[a, b])?;
    let (x, y, o) = (a.data::<u8>()?, b.data::<u8>()?, out.data_mut::<u8>()?);
    match ctx.node.op.as_str() {
        "And" => binary(x, &a.shape, y, &b.shape, o, &os, |p, q| {
            (p != 0 && q != 0) as u8
        })?,
        "Or" => binary(x, &a.shape, y, &b.shape, o, &os, |p, q| {
            (p != 0 || q != 0) as u8
        })?,
        _ => binary(x, &a.shape, y, &b.shape, o, &os, |p, q| {
            ((p != 0) != (q != 0)) as u8
        })?,
    }
    Ok(vec![out])
}

fn not(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    if x.dtype != DataType::Bool {
        return fail(format!("Not needs a bool input, got {}", x.dtype));
    }
    let mut out = ctx.alloc(DataType::Bool, &x.shape)?;
    unary(x.data::<u8>()?, out.data_mut::<u8>()?, |v| (v == 0) as u8)?;
    Ok(vec![out])
}

fn bitshift(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (a, b) = (req(inputs, 0)?, req(inputs, 1)?);
    let dt = same_type(ctx, &[a, b])?;
    let left = match ctx.string("direction")?.as_deref() {
        Some("LEFT") => true,
        Some("RIGHT") => false,
        d => return fail(format!("BitShift direction {d:?} is not LEFT or RIGHT")),
    };
    let (mut out, os) = bcast_out(ctx, dt, &[a, b])?;
    dispatch!(dt, T => {
        let f = if left { <T as Shift>::shl } else { <T as Shift>::shr };
        binary(a.data::<T>()?, &a.shape, b.data::<T>()?, &b.shape, out.data_mut::<T>()?, &os, f)?
    }, [U8 => u8, U16 => u16, U32 => u32, U64 => u64, I8 => i8, I16 => i16, I32 => i32, I64 => i64],
    return unsupported(format!("BitShift on {dt}")));
    Ok(vec![out])
}

fn bitwise(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (a, b) = (req(inputs, 0)?, req(inputs, 1)?);
    let dt = same_type(ctx, &[a, b])?;
    if !dt.is_int() {
        return unsupported(format!("{} on {dt}", ctx.node.op));
    }
    let (mut out, os) = bcast_out(ctx, dt, &[a, b])?;
    let op = ctx.node.op.clone();
    by_size!(elem_size(dt)?, T => {
        let (x, y, o) = (raw::<T>(a)?, raw::<T>(b)?, raw_mut::<T>(&mut out)?);
        match op.as_str() {
            "BitwiseAnd" => binary(x, &a.shape, y, &b.shape, o, &os, |p, q| p & q)?,
            "BitwiseOr" => binary(x, &a.shape, y, &b.shape, o, &os, |p, q| p | q)?,
            _ => binary(x, &a.shape, y, &b.shape, o, &os, |p, q| p ^ q)?,
        }
    });
    Ok(vec![out])
}

fn bitwise_not(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    if !x.dtype.is_int() {
        return unsupported(format!("BitwiseNot on {}", x.dtype));
    }
    let mut out = ctx.alloc(x.dtype, &x.shape)?;
    by_size!(elem_size(x.dtype)?, T => unary(raw::<T>(x)?, raw_mut::<T>(&mut out)?, |v| !v)?);
    Ok(vec![out])
}

fn where_(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (c, x, y) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    if c.dtype != DataType::Bool {
        return fail(format!("Where condition must be bool, got {}", c.dtype));
    }
    let dt = same_type(ctx, &[x, y])?;
    let (mut out, os) = bcast_out(ctx, dt, &[c, x, y])?;
    by_size!(elem_size(dt)?, T => ternary(
        (c.data::<u8>()?, &c.shape),
        (raw::<T>(x)?, &x.shape),
        (raw::<T>(y)?, &y.shape),
        raw_mut::<T>(&mut out)?,
        &os,
        |k, p, q| if k != 0 { p } else { q },
    )?);
    Ok(vec![out])
}

fn clip(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let mut out = ctx.alloc(x.dtype, &x.shape)?;
    let bound = |i: usize, name: &str| -> Result<Option<Tensor>, OpFail> {
        if ctx.opset < 11 {
            return Ok(ctx
                .opt_float(name)?
                .map(|v| Tensor::from_vec::<f32>(&[], &[v], None))
                .transpose()?);
        }
        match opt(inputs, i) {
            Some(t) if t.numel() != 1 => fail(format!("Clip {name} must be a scalar")),
            Some(t) if t.dtype != x.dtype => fail(format!(
                "Clip {name} is {} but the input is {}",
                t.dtype, x.dtype
            )),
            Some(t) => Ok(Some(t.clone())),
            None => Ok(None),
        }
    };
    let (lo, hi) = (bound(1, "min")?, bound(2, "max")?);
    macro_rules! go {
        ($T:ty, $load:expr, $store:expr) => {{
            let get = |t: &Option<Tensor>| -> Result<Option<_>, OpFail> {
                Ok(match t {
                    Some(t) => Some($load(t.data::<$T>()?[0])),
                    None => None,
                })
            };
            let (l, h) = (get(&lo)?, get(&hi)?);
            unary(x.data::<$T>()?, out.data_mut::<$T>()?, |v| {
                let mut w = $load(v);
                if let Some(l) = l {
                    if w < l {
                        w = l;
                    }
                }
                if let Some(h) = h {
                    if w > h {
                        w = h;
                    }
                }
                $store(w)
            })?
        }};
    }
    match x.dtype {
        DataType::F16 => go!(f16, |v: f16| v.to_f32(), f16::from_f32),
        DataType::BF16 => go!(bf16, |v: bf16| v.to_f32(), bf16::from_f32),
        DataType::F32 if ctx.opset < 11 => go!(f32, |v: f32| v, |v| v),
        dt => dispatch!(dt, T => go!(T, |v: T| v, |v| v),
            [F32 => f32, F64 => f64, I8 => i8, I16 => i16, I32 => i32, I64 => i64,
             U8 => u8, U16 => u16, U32 => u32, U64 => u64],
            return unsupported(format!("Clip on {dt}"))),
    }
    Ok(vec![out])
}

fn prelu(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, s) = (req(inputs, 0)?, req(inputs, 1)?);
    let dt = same_type(ctx, &[x, s])?;
    let (mut out, os) = bcast_out(ctx, dt, &[x, s])?;
    if os != x.shape {
        return fail(format!(
            "PRelu slope {:?} does not broadcast to X {:?}",
            s.shape, x.shape
        ));
    }
    macro_rules! go {
        ($T:ty, $f:expr) => {
            binary(
                x.data::<$T>()?,
                &x.shape,
                s.data::<$T>()?,
                &s.shape,
                out.data_mut::<$T>()?,
                &os,
                $f,
            )?
        };
    }
    match dt {
        DataType::F32 => go!(f32, |v, a| if v < 0.0 { a * v } else { v }),
        DataType::F64 => go!(f64, |v, a| if v < 0.0 { a * v } else { v }),
        DataType::F16 => go!(f16, |v: f16, a: f16| if v.to_f32() < 0.0 {
            f16::from_f32(a.to_f32() * v.to_f32())
        } else {
            v
        }),
        DataType::BF16 => go!(bf16, |v: bf16, a: bf16| if v.to_f32() < 0.0 {
            bf16::from_f32(a.to_f32() * v.to_f32())
        } else {
            v
        }),
        DataType::I32 => go!(i32, |v, a| if v < 0 { a.wrapping_mul(v) } else { v }),
        DataType::I64 => go!(i64, |v, a| if v < 0 { a.wrapping_mul(v) } else { v }),
        d => return unsupported(format!("PRelu on {d}")),
    }
    Ok(vec![out])
}

fn is_nan(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let mut out = ctx.alloc(DataType::Bool, &x.shape)?;
    let o = out.data_mut::<u8>()?;
    match x.dtype {
        DataType::F32 => unary(x.data::<f32>()?, o, |v| v.is_nan() as u8)?,
        DataType::F64 => unary(x.data::<f64>()?, o, |v| v.is_nan() as u8)?,
        DataType::F16 => unary(x.data::<f16>()?, o, |v| v.is_nan() as u8)?,
        DataType::BF16 => unary(x.data::<bf16>()?, o, |v| v.is_nan() as u8)?,
        d => return unsupported(format!("IsNaN on {d}")),
    }
    Ok(vec![out])
}

fn is_inf(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let (pos, neg) = (
        ctx.int("detect_positive", 1)? != 0,
        ctx.int("detect_negative", 1)? != 0,
    );
    let mut out = ctx.alloc(DataType::Bool, &x.shape)?;
    let o = out.data_mut::<u8>()?;
    let f = move |v: f64| (v.is_infinite() && if v < 0.0 { neg } else { pos }) as u8;
    match x.dtype {
        DataType::F32 => unary(x.data::<f32>()?, o, |v| f(v as f64))?,
        DataType::F64 => unary(x.data::<f64>()?, o, f)?,
        DataType::F16 => unary(x.data::<f16>()?, o, |v| f(v.to_f64()))?,
        DataType::BF16 => unary(x.data::<bf16>()?, o, |v| f(v.to_f64()))?,
        d => return unsupported(format!("IsInf on {d}")),
    }
    Ok(vec![out])
}

/// Reads element `i` of a byte slice as a [`CastValue`].
type Load = fn(&[u8]) -> CastValue;
/// Writes a [`CastValue`] converted to the element type into the bytes of one element.
type Store = fn(CastValue, &mut [u8]);

fn load_of<S: CastElem + bytemuck::Pod>() -> Load {
    |b| bytemuck::pod_read_unaligned::<S>(b).to_value()
}

fn store_of<D: CastElem + bytemuck::Pod>() -> Store {
    |v, b| b.copy_from_slice(bytemuck::bytes_of(&D::from_value(v)))
}

/// The element reader and writer of a dtype for Cast (bool is one byte read as `!= 0`).
fn cast_io(dt: DataType) -> Option<(Load, Store)> {
    Some(match dt {
        DataType::Bool => (
            |b| CastValue::Bool(b[0] != 0),
            |v, b| b[0] = bool::from_value(v) as u8,
        ),
        _ => dispatch!(dt, T => (load_of::<T>(), store_of::<T>()),
            [F32 => f32, F64 => f64, F16 => f16, BF16 => bf16, I8 => i8, I16 => i16, I32 => i32, I64 => i64,
             U8 => u8, U16 => u16, U32 => u32, U64 => u64],
            return None),
    })
}

/// Common casts with the conversion inlined into the loop (the same [`CastElem`] conversions as
/// the generic path, bool read as `byte != 0` and written as 0/1); `false` for other pairs.
fn cast_typed(x: &Tensor, to: DataType, out: &mut Tensor) -> Result<bool, OpFail> {
    use crate::kernels::cast::cast as c;
    use DataType::*;
    match (x.dtype, to) {
        (F32, I64) => c::<f32, i64>(x.data()?, out.data_mut()?)?,
        (I64, F32) => c::<i64, f32>(x.data()?, out.data_mut()?)?,
        (I32, I64) => c::<i32, i64>(x.data()?, out.data_mut()?)?,
        (I64, I32) => c::<i64, i32>(x.data()?, out.data_mut()?)?,
        (I32, F32) => c::<i32, f32>(x.data()?, out.data_mut()?)?,
        (F32, I32) => c::<f32, i32>(x.data()?, out.data_mut()?)?,
        (F32, F64) => c::<f32, f64>(x.data()?, out.data_mut()?)?,
        (F64, F32) => c::<f64, f32>(x.data()?, out.data_mut()?)?,
        (Bool, F32) => unary(raw::<u8>(x)?, out.data_mut::<f32>()?, |b| {
            if b != 0 {
                1.0
            } else {
                0.0
            }
        })?,
        (Bool, I64) => unary(raw::<u8>(x)?, out.data_mut::<i64>()?, |b| (b != 0) as i64)?,
        (F32, Bool) => unary(x.data::<f32>()?, raw_mut::<u8>(out)?, |v| (v != 0.0) as u8)?,
        (I64, Bool) => unary(x.data::<i64>()?, raw_mut::<u8>(out)?, |v| (v != 0) as u8)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// How Cast converts to the float8 types: its `saturate` (default 1) and `round_mode` (default
/// "up", float8e8m0 only) attributes. Other target types ignore them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CastMode {
    pub saturate: bool,
    pub round: RoundMode,
}

impl Default for CastMode {
    fn default() -> Self {
        CastMode {
            saturate: true,
            round: RoundMode::Up,
        }
    }
}

impl CastMode {
    /// The mode given by a Cast or CastLike node's attributes.
    fn of(ctx: &OpCtx) -> Result<CastMode, OpFail> {
        let round = match ctx.string("round_mode")? {
            None => RoundMode::Up,
            Some(s) => match RoundMode::parse(&s) {
                Some(r) => r,
                None => return fail(format!("Cast round_mode '{s}' is not up, down or nearest")),
            },
        };
        Ok(CastMode {
            saturate: ctx.int("saturate", 1)? != 0,
            round,
        })
    }
}

/// Casts `x` into a new tensor of type `to` (semantics in `kernels::cast`: each element goes through
/// its exact [`CastValue`], so the result does not depend on how the tensor is split; the narrow
/// types follow `kernels::minifloat`). To the type `x` has, `x` itself: a view where the plan says
/// so (`View::SameType`), else a copy.
pub fn cast_tensor(
    ctx: &OpCtx,
    x: &Tensor,
    to: DataType,
    mode: CastMode,
) -> Result<Tensor, OpFail> {
    if x.dtype == to {
        return view_or_copy(ctx, x, &x.shape);
    }
    // Every path below writes every element (or fails); packed outputs write whole bytes.
    let mut out = ctx.alloc_for_overwrite(to, &x.shape)?;
    if cast_typed(x, to, &mut out)? {
        return Ok(out);
    }
    let (Some((load, _)), Some((_, store))) = (cast_io(x.dtype), cast_io(to)) else {
        if cast_narrow(x, to, mode, &mut out)? {
            return Ok(out);
        }
        return unsupported(format!("Cast from {} to {to}", x.dtype));
    };
    let (ss, ds) = (elem_size(x.dtype)?, elem_size(to)?);
    let run = |src: &[u8], dst: &mut [u8]| {
        for (s, d) in src.chunks_exact(ss).zip(dst.chunks_exact_mut(ds)) {
            store(load(s), d);
        }
    };
    let (src, dst) = (x.bytes(), out.bytes_mut()?);
    if x.numel() < 2 * CAST_TASK {
        run(src, dst);
    } else {
        use rayon::prelude::*;
        dst.par_chunks_mut(CAST_TASK * ds)
            .zip(src.par_chunks(CAST_TASK * ss))
            .for_each(|(d, s)| run(s, d));
    }
    Ok(out)
}

/// Output units (elements, or bytes of packed outputs) per parallel task of Cast.
const CAST_TASK: usize = 1 << 14;

/// Element `i` of a tensor's bytes as a [`CastValue`].
type Get = Box<dyn Fn(&[u8], usize) -> CastValue + Send + Sync>;
/// A [`CastValue`] as the code of a narrow type (the low `bits` bits of a byte).
type Encode = Box<dyn Fn(CastValue) -> u8 + Send + Sync>;

/// The reader of element `i` for any type Cast handles (byte-sized through [`cast_io`], narrow
/// through `kernels::minifloat`).
fn cast_get(dt: DataType) -> Result<Option<Get>, OpFail> {
    use crate::kernels::minifloat as m;
    use DataType::*;
    if let Some((load, _)) = cast_io(dt) {
        let es = elem_size(dt)?;
        return Ok(Some(Box::new(move |b, i| load(&b[i * es..(i + 1) * es]))));
    }
    let f = |v: f32| CastValue::F32(v);
    let int = |v: i128| CastValue::Int(v);
    Ok(Some(match dt {
        F8E4M3FN => Box::new(move |b, i| f(m::E4M3FN.decode(b[i]))),
        F8E4M3FNUZ => Box::new(move |b, i| f(m::E4M3FNUZ.decode(b[i]))),
        F8E5M2 => Box::new(move |b, i| f(m::E5M2.decode(b[i]))),
        F8E5M2FNUZ => Box::new(move |b, i| f(m::E5M2FNUZ.decode(b[i]))),
        F8E8M0 => Box::new(move |b, i| f(m::e8m0_decode(b[i]))),
        F4E2M1 => Box::new(move |b, i| f(m::E2M1.decode(m::packed_get(b, 4, i)))),
        I4 => Box::new(move |b, i| int(m::INT4.value(m::packed_get(b, 4, i)))),
        U4 => Box::new(move |b, i| int(m::UINT4.value(m::packed_get(b, 4, i)))),
        I2 => Box::new(move |b, i| int(m::INT2.value(m::packed_get(b, 2, i)))),
        U2 => Box::new(move |b, i| int(m::UINT2.value(m::packed_get(b, 2, i)))),
        _ => return Ok(None),
    }))
}

/// The encoder of a narrow type and its width in bits; `None` for other types.
fn cast_encode(dt: DataType, mode: CastMode) -> Option<(u32, Encode)> {
    use crate::kernels::minifloat::{self as m, MiniFloat, SubInt};
    use DataType::*;
    // Float sources convert in one rounding from their exact value.
    let wide = <f64 as CastElem>::from_value;
    let sat = mode.saturate;
    let float = |f: MiniFloat| -> Encode { Box::new(move |v| f.encode(wide(v), sat)) };
    let int = |s: SubInt| -> Encode {
        Box::new(move |v| match v {
            CastValue::F32(x) => s.wrap_float(x as f64),
            CastValue::F64(x) => s.wrap_float(x),
            CastValue::Int(i) => s.wrap_int(i),
            CastValue::Bool(b) => b as u8,
        })
    };
    Some(match dt {
        F8E4M3FN => (8, float(m::E4M3FN)),
        F8E4M3FNUZ => (8, float(m::E4M3FNUZ)),
        F8E5M2 => (8, float(m::E5M2)),
        F8E5M2FNUZ => (8, float(m::E5M2FNUZ)),
        F4E2M1 => (4, float(m::E2M1)),
        // The reference converts to f32 first, then rounds the exponent.
        F8E8M0 => (
            8,
            Box::new(move |v| m::e8m0_encode(f32::from_value(v), sat, mode.round)),
        ),
        I4 => (4, int(m::INT4)),
        U4 => (4, int(m::UINT4)),
        I2 => (2, int(m::INT2)),
        U2 => (2, int(m::UINT2)),
        _ => return None,
    })
}

/// Cast where either side is a narrow type (float8, float4, packed integers); `false` for pairs it
/// does not handle. Each output byte is computed from its own elements, so any split of the output
/// into tasks gives identical bytes, and packed padding bits are zero.
fn cast_narrow(x: &Tensor, to: DataType, mode: CastMode, out: &mut Tensor) -> Result<bool, OpFail> {
    use crate::kernels::minifloat::pack_byte;
    use rayon::prelude::*;
    let Some(get) = cast_get(x.dtype)? else {
        return Ok(false);
    };
    let n = x.numel();
    let src = x.bytes();
    // `fill(u, bytes)` writes output unit `u` (an element, or a packed byte).
    let run = |unit: usize, dst: &mut [u8], fill: &(dyn Fn(usize, &mut [u8]) + Sync)| {
        let task = |(c, d): (usize, &mut [u8])| {
            for (k, e) in d.chunks_mut(unit).enumerate() {
                fill(c * CAST_TASK + k, e);
            }
        };
        if dst.len() < 2 * CAST_TASK * unit {
            dst.chunks_mut(CAST_TASK * unit).enumerate().for_each(task);
        } else {
            dst.par_chunks_mut(CAST_TASK * unit)
                .enumerate()
                .for_each(task);
        }
    };
    if let Some((_, store)) = cast_io(to) {
        let ds = elem_size(to)?;
        run(ds, out.bytes_mut()?, &|i, d| store(get(src, i), d));
    } else if let Some((bits, enc)) = cast_encode(to, mode) {
        let per = (8 / bits) as usize;
        run(1, out.bytes_mut()?, &|j, d| {
            let lo = j * per;
            d[0] = pack_byte((lo..n.min(lo + per)).map(|i| enc(get(src, i))), bits);
        });
    } else {
        return Ok(false);
    }
    Ok(true)
}

fn cast(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let Some(to) = ctx.opt_int("to")? else {
        return fail("Cast needs 'to'");
    };
    let Some(to) = DataType::from_onnx(to as i32) else {
        return fail(format!("Cast to unknown type code {to}"));
    };
    Ok(vec![cast_tensor(ctx, x, to, CastMode::of(ctx)?)?])
}

/// BitCast: the input's bytes unchanged under another type of the same width.
fn bitcast(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let Some(code) = ctx.opt_int("to")? else {
        return fail("BitCast needs 'to'");
    };
    let Some(to) = DataType::from_onnx(code as i32) else {
        return fail(format!("BitCast to unknown type code {code}"));
    };
    if x.dtype == DataType::String || to == DataType::String || x.dtype.bits() != to.bits() {
        return fail(format!(
            "BitCast from {} to {to}: types must be non-string and of equal width",
            x.dtype
        ));
    }
    let mut out = ctx.alloc_for_overwrite(to, &x.shape)?;
    out.bytes_mut()?.copy_from_slice(x.bytes());
    Ok(vec![out])
}

fn cast_like(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, like) = (req(inputs, 0)?, req(inputs, 1)?);
    Ok(vec![cast_tensor(ctx, x, like.dtype, CastMode::of(ctx)?)?])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::*;
    use memplan_ir::graph::AttrValue;
    use proptest::prelude::*;

    fn f32s(t: &Tensor) -> Vec<f32> {
        t.data::<f32>().unwrap().to_vec()
    }

    #[test]
    fn unary_hand_values() {
        let x = t_f32(&[4], &[-1.0, 0.0, 0.5, 2.0]);
        let r = |op: &str| f32s(&run_op(op, &[], &[Some(&x)], 1).unwrap()[0]);
        assert_eq!(r("Relu"), [0.0, 0.0, 0.5, 2.0]);
        assert_eq!(r("Neg"), [1.0, -0.0, -0.5, -2.0]);
        assert_eq!(r("Sigmoid")[1], 0.5);
        assert_eq!(r("Exp")[1], 1.0);
        assert_eq!(r("Erf")[1], 0.0);
        assert!((r("Erf")[2] - 0.520_499_9).abs() < 1e-6);
        assert!((r("Tanh")[3] - 0.964_027_6).abs() < 1e-6);
        assert_eq!(r("Softsign"), [-0.5, 0.0, 0.5 / 1.5, 2.0 / 3.0]);
        let lr = run_op(
            "LeakyRelu",
            &[("alpha", AttrValue::Float(0.5))],
            &[Some(&x)],
            1,
        )
        .unwrap();
        assert_eq!(f32s(&lr[0]), [-0.5, 0.0, 0.5, 2.0]);
        let i = t_i64(&[3], &[-3, 0, 4]);
        let o = run_op("Abs", &[], &[Some(&i)], 1).unwrap();
        assert_eq!(o[0].data::<i64>().unwrap(), &[3, 0, 4]);
        assert!(run_op("Exp", &[], &[Some(&i)], 1).is_err());
        let h = t_of::<f16>(&[2], &[f16::from_f32(1.0), f16::from_f32(-2.0)]);
        let o = run_op("Relu", &[], &[Some(&h)], 1).unwrap();
        assert_eq!(
            o[0].data::<f16>().unwrap(),
            &[f16::from_f32(1.0), f16::from_f32(0.0)]
        );
    }

    /// The f32 ops inlined into the vectorized loop compute the bits of their `unary_fn` entry
    /// (the function every other float type runs), attributes included.
    #[test]
    fn inlined_f32_unary_ops_give_the_bits_of_their_table_entry() {
        let xs: Vec<f32> = (-400..=400)
            .map(|i| i as f32 * 0.037)
            .chain([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, 1e-30, -1e-30])
            .collect();
        let x = t_f32(&[xs.len()], &xs);
        let alpha = [
            ("alpha", AttrValue::Float(0.3)),
            ("beta", AttrValue::Float(0.6)),
        ];
        let selu = [
            ("alpha", AttrValue::Float(1.2)),
            ("gamma", AttrValue::Float(0.9)),
        ];
        for op in [
            "Floor",
            "Ceil",
            "Sign",
            "Softsign",
            "HardSwish",
            "HardSigmoid",
            "LeakyRelu",
            "Relu",
            "Neg",
            "Abs",
            "Sqrt",
            "Reciprocal",
            "Exp",
            "Erf",
            "Tanh",
            "Log",
            "Softplus",
            "Mish",
            "Elu",
            "Selu",
            "Celu",
        ] {
            let attrs: &[(&str, AttrValue)] = match op {
                "HardSigmoid" => &alpha,
                "LeakyRelu" | "Elu" | "Celu" => &alpha[..1],
                "Selu" => &selu,
                _ => &[],
            };
            let got = run_op(op, attrs, &[Some(&x)], 1).unwrap();
            let (f, names) = unary_fn::<f32>(op, false).unwrap();
            let mut p = [0f32; 2];
            for (slot, (name, default)) in p.iter_mut().zip(names) {
                if let Some((_, AttrValue::Float(v))) = attrs.iter().find(|(n, _)| *n == name) {
                    *slot = *v;
                } else if !name.is_empty() {
                    *slot = default;
                }
            }
            for (g, &v) in f32s(&got[0]).iter().zip(&xs) {
                let want = f(v, &p);
                assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "{op}({v}) = {g}, table {want}"
                );
            }
        }
    }

    #[test]
    fn binary_broadcast_and_types() {
        let a = t_f32(&[2, 1], &[1.0, 2.0]);
        let b = t_f32(&[3], &[10.0, 20.0, 30.0]);
        let o = run_op("Sub", &[], &[Some(&a), Some(&b)], 1).unwrap();
        assert_eq!(o[0].shape, [2, 3]);
        assert_eq!(f32s(&o[0]), [-9., -19., -29., -8., -18., -28.]);
        let o = run_op("Pow", &[], &[Some(&b), Some(&t_i64(&[], &[2]))], 1).unwrap();
        assert_eq!(f32s(&o[0]), [100., 400., 900.]);
        // A cube is two products, as onnxruntime computes it (within 1 ulp of `powf`).
        let x = t_f32(&[3], &[1.1, -2.5, 1e13]);
        let o = run_op("Pow", &[], &[Some(&x), Some(&t_f32(&[], &[3.0]))], 1).unwrap();
        let cube: Vec<f32> = f32s(&x).iter().map(|v| v * v * v).collect();
        assert_eq!(f32s(&o[0]), cube);
        assert_eq!(f32s(&o[0])[2], f32::INFINITY);
        let i = t_i64(&[2], &[7, -7]);
        let o = run_op("Div", &[], &[Some(&i), Some(&t_i64(&[1], &[2]))], 1).unwrap();
        assert_eq!(o[0].data::<i64>().unwrap(), &[3, -3]);
        assert!(run_op("Div", &[], &[Some(&i), Some(&t_i64(&[1], &[0]))], 1).is_err());
        assert!(run_op("Add", &[], &[Some(&a), Some(&i)], 1).is_err());
        assert!(run_op("Add", &[], &[Some(&t_f32(&[2], &[1., 2.])), Some(&b)], 1).is_err());
        let o = run_op(
            "Max",
            &[],
            &[Some(&a), Some(&b), Some(&t_f32(&[], &[15.]))],
            1,
        )
        .unwrap();
        assert_eq!(f32s(&o[0]), [15., 20., 30., 15., 20., 30.]);
        let o = run_op(
            "Mean",
            &[],
            &[Some(&t_f32(&[2], &[1., 2.])), Some(&t_f32(&[2], &[3., 5.]))],
            1,
        )
        .unwrap();
        assert_eq!(f32s(&o[0]), [2., 3.5]);
    }

    #[test]
    fn compare_logic_where_clip() {
        let a = t_f32(&[3], &[1.0, f32::NAN, 3.0]);
        let b = t_f32(&[], &[2.0]);
        let o = run_op("GreaterOrEqual", &[], &[Some(&a), Some(&b)], 1).unwrap();
        assert_eq!(o[0].dtype, DataType::Bool);
        assert_eq!(o[0].data::<u8>().unwrap(), &[0, 0, 1]);
        let o = run_op("IsNaN", &[], &[Some(&a)], 1).unwrap();
        assert_eq!(o[0].data::<u8>().unwrap(), &[0, 1, 0]);
        let t = t_bool(&[2], &[true, false]);
        let f = t_bool(&[2], &[true, true]);
        let o = run_op("Xor", &[], &[Some(&t), Some(&f)], 1).unwrap();
        assert_eq!(o[0].data::<u8>().unwrap(), &[0, 1]);
        let o = run_op(
            "Where",
            &[],
            &[
                Some(&t),
                Some(&t_i64(&[2], &[1, 2])),
                Some(&t_i64(&[], &[-1])),
            ],
            1,
        )
        .unwrap();
        assert_eq!(o[0].data::<i64>().unwrap(), &[1, -1]);
        let o = run_op("Clip", &[], &[Some(&a), Some(&t_f32(&[], &[1.5])), None], 1).unwrap();
        let v = f32s(&o[0]);
        assert_eq!((v[0], v[2]), (1.5, 3.0));
        assert!(v[1].is_nan());
        let o = run_op("Not", &[], &[Some(&t)], 1).unwrap();
        assert_eq!(o[0].data::<u8>().unwrap(), &[0, 1]);
    }

    #[test]
    fn cast_rules() {
        let x = t_f32(&[4], &[-1.7, 0.0, 2.5, f32::NAN]);
        let to = |d: DataType| {
            run_op(
                "Cast",
                &[("to", AttrValue::Int(d.onnx_code() as i64))],
                &[Some(&x)],
                1,
            )
            .unwrap()
        };
        assert_eq!(to(DataType::I64)[0].data::<i64>().unwrap(), &[-1, 0, 2, 0]);
        assert_eq!(to(DataType::Bool)[0].data::<u8>().unwrap(), &[1, 0, 1, 1]);
        assert_eq!(
            to(DataType::F16)[0].data::<f16>().unwrap()[2],
            f16::from_f32(2.5)
        );
        let b = t_bool(&[2], &[true, false]);
        let o = run_op("CastLike", &[], &[Some(&b), Some(&x)], 1).unwrap();
        assert_eq!(f32s(&o[0]), [1.0, 0.0]);
    }

    #[test]
    fn cast_narrow_types() {
        use crate::kernels::minifloat::{packed_get, INT2};
        let cast = |x: &Tensor, d: DataType, extra: &[(&str, AttrValue)]| {
            let mut attrs = vec![("to", AttrValue::Int(d.onnx_code() as i64))];
            attrs.extend(extra.iter().cloned());
            run_op("Cast", &attrs, &[Some(x)], 1).unwrap().remove(0)
        };
        let x = t_f32(&[5], &[1e6, 464.0, -0.0, f32::NAN, 1.0625]);
        let sat = cast(&x, DataType::F8E4M3FN, &[]);
        assert_eq!(sat.bytes(), &[0x7E, 0x7E, 0x80, 0x7F, 0x38]);
        let no = cast(&x, DataType::F8E4M3FN, &[("saturate", AttrValue::Int(0))]);
        assert_eq!(no.bytes(), &[0x7F, 0x7E, 0x80, 0x7F, 0x38]);
        let back = cast(&no, DataType::F32, &[]);
        let v = f32s(&back);
        assert!(v[0].is_nan() && v[3].is_nan());
        assert_eq!((v[1], v[4]), (448.0, 1.0));
        let down = cast(
            &t_f32(&[1], &[1.75]),
            DataType::F8E8M0,
            &[("round_mode", AttrValue::String(b"down".to_vec()))],
        );
        assert_eq!(down.bytes(), &[127]);
        // int4 packs two to a byte, low nibble first; the padding nibble is zero.
        let i = t_f32(&[5], &[-9.0, 15.0, 1.5, -1.0, 7.0]);
        let p = cast(&i, DataType::I4, &[]);
        assert_eq!(p.bytes(), &[0xF7, 0xF1, 0x07]);
        let like = t_of::<i8>(&[1], &[0]);
        let o = run_op("CastLike", &[], &[Some(&p), Some(&like)], 1).unwrap();
        assert_eq!(o[0].data::<i8>().unwrap(), &[7, -1, 1, -1, 7]);
        // A packed output large enough to be split into parallel tasks matches the scalar rule.
        let n = 4 * 2 * CAST_TASK + 3;
        let big: Vec<f32> = (0..n).map(|k| (k % 11) as f32 - 5.5).collect();
        let q = cast(&t_f32(&[n], &big), DataType::I2, &[]);
        assert_eq!(q.bytes().len(), n.div_ceil(4));
        for (k, &v) in big.iter().enumerate() {
            assert_eq!(
                packed_get(q.bytes(), 2, k),
                INT2.wrap_float(v as f64),
                "element {k}"
            );
        }
        assert_eq!(q.bytes()[n / 4] >> 6, 0);
    }

    proptest! {
        #[test]
        fn elementwise_chunk_identity(
            rows in 1usize..6, cols in 1usize..40, bcast in any::<bool>(), cuts in prop::collection::vec(any::<usize>(), 0..4),
            op_pick in 0usize..8, seed in any::<u64>(),
        ) {
            let ops = ["Add", "Mul", "Div", "Pow", "Sub", "Max", "Less", "Where"];
            let op = ops[op_pick];
            let a = t_f32(&[rows, cols], &rand_f32(rows * cols, seed));
            let bs = if bcast { vec![1, cols] } else { vec![rows, cols] };
            let b = t_f32(&bs, &rand_f32(bs.iter().product(), seed + 1));
            if op == "Where" {
                let c = t_bool(&[rows, 1], &(0..rows).map(|i| i % 2 == 0).collect::<Vec<_>>());
                for ax in 0..2 {
                    check_chunks(op, &[], &[&c, &a, &b], &[Some(ax), Some(ax), Some(ax)], ax, &cuts).unwrap();
                }
            } else {
                for ax in 0..2 {
                    check_chunks(op, &[], &[&a, &b], &[Some(ax), Some(ax)], ax, &cuts).unwrap();
                }
            }
            for u in ["Gelu", "Sigmoid", "Erf", "Tanh", "Softplus"] {
                check_chunks(u, &[], &[&a], &[Some(1)], 1, &cuts).unwrap();
            }
        }
    }

    /// BitwiseNot passes every axis.
    #[test]
    fn bitwise_not_flow_matches_its_kernel() {
        let x = t_of(&[3, 4], &[1i32, -2, 3, 7, 0, 9, -5, 4, 2, 2, 8, -1]);
        crate::ops::testutil::check_flow("BitwiseNot", &[], &[&x], 1, &[0, 1], &[1, 2]).unwrap();
    }
}
