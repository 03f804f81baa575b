//! Quantization ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
//! QLinearMatMul, ConvInteger, QLinearConv, with the arithmetic of the ONNX reference
//! implementation (which produced the conformance outputs).
//!
//! - Scales and zero points apply per tensor (one element), per axis (a 1-D tensor along `axis`)
//!   or per block (`block_size` > 0: the input's shape with `ceil(d / block_size)` along `axis`).
//! - QuantizeLinear divides in the promoted float type of input and scale (f16 by f16 stays f16),
//!   rounds half to even, adds the zero point and saturates to the integer type; float8 targets
//!   round the quotient (zero point ignored, `saturate` honoured), float4 the quotient plus the zero
//!   point. The narrow types are encoded by `kernels::minifloat`.
//! - DequantizeLinear computes `(x - zero_point) * scale` in f32 (f64 for an f64 scale), float8 and
//!   float4 inputs without zero point, then rounds to the output type.
//! - The integer products accumulate `(a - a_zero) * (b - b_zero)` exactly in i32 (wrapping, as
//!   the reference's int32 arithmetic does), element by element in a fixed order, then the
//!   QLinear* ops requantize in f64 (the reference's int32-by-float promotion).
//!
//! Every output element is computed from its own inputs in a fixed order, single-threaded.
//! Scratch: none.

use half::{bf16, f16};
use memplan_ir::DataType;

use super::nn::conv_attrs;
use super::{axis, fail, opt, req, unsupported, OpCtx, OpFail, OpFn};
use crate::kernels::conv::conv_geometry;
use crate::kernels::minifloat::{self as m, MiniFloat};
use crate::tensor::Tensor;

pub const OPS: &[(&str, OpFn)] = &[
    ("QuantizeLinear", quantize_linear),
    ("DequantizeLinear", dequantize_linear),
    ("DynamicQuantizeLinear", dynamic_quantize_linear),
    ("MatMulInteger", matmul_integer),
    ("QLinearMatMul", qlinear_matmul),
    ("ConvInteger", conv_integer),
    ("QLinearConv", qlinear_conv),
];

/// Element `i` of a tensor's bytes as f64 (exact for every type listed).
pub(crate) type Read = fn(&[u8], usize) -> f64;

pub(crate) fn reader(dt: DataType) -> Result<Read, OpFail> {
    use DataType::*;
    fn le<const N: usize>(b: &[u8], i: usize) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&b[i * N..(i + 1) * N]);
        a
    }
    Ok(match dt {
        U8 | Bool => |b, i| f64::from(b[i]),
        I8 => |b, i| f64::from(b[i] as i8),
        U16 => |b, i| f64::from(u16::from_le_bytes(le(b, i))),
        I16 => |b, i| f64::from(i16::from_le_bytes(le(b, i))),
        U32 => |b, i| f64::from(u32::from_le_bytes(le(b, i))),
        I32 => |b, i| f64::from(i32::from_le_bytes(le(b, i))),
        I64 => |b, i| i64::from_le_bytes(le(b, i)) as f64,
        U64 => |b, i| u64::from_le_bytes(le(b, i)) as f64,
        F32 => |b, i| f64::from(f32::from_le_bytes(le(b, i))),
        F64 => |b, i| f64::from_le_bytes(le(b, i)),
        F16 => |b, i| f16::from_le_bytes(le(b, i)).to_f64(),
        BF16 => |b, i| bf16::from_le_bytes(le(b, i)).to_f64(),
        F8E4M3FN => |b, i| f64::from(m::E4M3FN.decode(b[i])),
        F8E4M3FNUZ => |b, i| f64::from(m::E4M3FNUZ.decode(b[i])),
        F8E5M2 => |b, i| f64::from(m::E5M2.decode(b[i])),
        F8E5M2FNUZ => |b, i| f64::from(m::E5M2FNUZ.decode(b[i])),
        F4E2M1 => |b, i| f64::from(m::E2M1.decode(m::packed_get(b, 4, i))),
        I4 => |b, i| m::INT4.value(m::packed_get(b, 4, i)) as f64,
        U4 => |b, i| m::UINT4.value(m::packed_get(b, 4, i)) as f64,
        I2 => |b, i| m::INT2.value(m::packed_get(b, 2, i)) as f64,
        U2 => |b, i| m::UINT2.value(m::packed_get(b, 2, i)) as f64,
        d => return unsupported(format!("quantization with {d} elements")),
    })
}

/// Element `i` of `t` as f64.
fn get(t: &Tensor, i: usize) -> Result<f64, OpFail> {
    Ok(reader(t.dtype)?(t.bytes(), i))
}

/// Writes `n` elements of type `dt` whose codes (the value's low bits: an integer in two's
/// complement or a float8/float4 code) `code(i)` gives, packing sub-byte types.
fn write_codes(
    out: &mut Tensor,
    n: usize,
    code: impl Fn(usize) -> Result<u64, OpFail>,
) -> Result<(), OpFail> {
    let bits = out.dtype.bits();
    let bytes = out.bytes_mut()?;
    match bits {
        2 | 4 => {
            let per = (8 / bits) as usize;
            let mask = (1u64 << bits) - 1;
            for (j, b) in bytes.iter_mut().enumerate() {
                let mut v = 0u8;
                for (k, i) in (j * per..n.min(j * per + per)).enumerate() {
                    v |= ((code(i)? & mask) as u8) << (k as u32 * bits);
                }
                *b = v;
            }
        }
        8 | 16 | 32 | 64 => {
            let es = (bits / 8) as usize;
            for (i, e) in bytes.chunks_exact_mut(es).enumerate() {
                e.copy_from_slice(&code(i)?.to_le_bytes()[..es]);
            }
        }
        b => return unsupported(format!("{b}-bit quantized elements")),
    }
    Ok(())
}

/// Writes `n` float values `value(i)` (already rounded to the precision computed in) as `out`'s
/// float type.
fn write_floats(
    out: &mut Tensor,
    value: impl Fn(usize) -> Result<f64, OpFail>,
) -> Result<(), OpFail> {
    match out.dtype {
        DataType::F32 => fill(out.data_mut::<f32>()?, |i| Ok(value(i)? as f32)),
        DataType::F64 => fill(out.data_mut::<f64>()?, value),
        DataType::F16 => fill(out.data_mut::<f16>()?, |i| Ok(f16::from_f64(value(i)?))),
        DataType::BF16 => fill(out.data_mut::<bf16>()?, |i| Ok(bf16::from_f64(value(i)?))),
        d => unsupported(format!("quantization output of {d}")),
    }
}

fn fill<T>(o: &mut [T], f: impl Fn(usize) -> Result<T, OpFail>) -> Result<(), OpFail> {
    for (i, v) in o.iter_mut().enumerate() {
        *v = f(i)?;
    }
    Ok(())
}

/// Which scale (and zero point) element applies to element `i` of the quantized tensor.
#[derive(Clone, Copy, Debug)]
enum Params {
    /// One for the whole tensor.
    Tensor,
    /// One per index along the axis: `inner` elements follow the axis, `d` its extent.
    Axis { d: usize, inner: usize },
    /// One per block of `bs` indices along the axis, the scale having `sd` entries there.
    Block {
        d: usize,
        inner: usize,
        sd: usize,
        bs: usize,
    },
}

impl Params {
    /// How `scale` (and a zero point of the same shape) maps onto `shape`.
    fn of(ctx: &OpCtx, shape: &[usize], scale: &Tensor) -> Result<Params, OpFail> {
        if scale.numel() == 1 && scale.rank() <= 1 {
            return Ok(Params::Tensor);
        }
        let a = axis(ctx.int("axis", 1)?, shape.len())?;
        let d = shape[a];
        let inner: usize = shape[a + 1..].iter().product();
        let bs = ctx.int("block_size", 0)?;
        if bs == 0 {
            if scale.shape != [d] {
                return fail(format!(
                    "per-axis scale {:?} must be [{d}] (axis {a} of {shape:?})",
                    scale.shape
                ));
            }
            return Ok(Params::Axis { d, inner });
        }
        let Ok(bs) = usize::try_from(bs) else {
            return fail(format!("block_size {bs} is negative"));
        };
        let sd = d.div_ceil(bs);
        let mut want = shape.to_vec();
        want[a] = sd;
        if scale.shape != want {
            return fail(format!(
                "blocked scale {:?} must be {want:?} (block_size {bs} along axis {a})",
                scale.shape
            ));
        }
        Ok(Params::Block { d, inner, sd, bs })
    }

    fn index(self, i: usize) -> usize {
        match self {
            Params::Tensor => 0,
            Params::Axis { d, inner } => (i / inner) % d,
            Params::Block { d, inner, sd, bs } => {
                let (o, j, k) = (i / (d * inner), (i / inner) % d, i % inner);
                (o * sd + j / bs) * inner + k
            }
        }
    }
}

/// The zero point, when given, must match the scale's shape.
fn check_zero_point(scale: &Tensor, zp: Option<&Tensor>) -> Result<(), OpFail> {
    if let Some(z) = zp {
        if z.numel() != scale.numel() {
            return fail(format!(
                "zero point {:?} and scale {:?} differ in size",
                z.shape, scale.shape
            ));
        }
    }
    Ok(())
}

/// The float8 format of `dt`, if it is one.
fn float8(dt: DataType) -> Option<MiniFloat> {
    match dt {
        DataType::F8E4M3FN => Some(m::E4M3FN),
        DataType::F8E4M3FNUZ => Some(m::E4M3FNUZ),
        DataType::F8E5M2 => Some(m::E5M2),
        DataType::F8E5M2FNUZ => Some(m::E5M2FNUZ),
        _ => None,
    }
}

/// The representable range of an integer quantized type.
fn int_range(dt: DataType) -> Option<(i64, i64)> {
    use DataType::*;
    Some(match dt {
        U8 => (0, 255),
        I8 => (-128, 127),
        U16 => (0, 65535),
        I16 => (-32768, 32767),
        U4 => (0, 15),
        I4 => (-8, 7),
        U2 => (0, 3),
        I2 => (-2, 1),
        _ => return None,
    })
}

/// `x / s` rounded as numpy computes it in the type `t` (f16 and bf16 through f32, one rounding
/// each).
fn divide(t: DataType, x: f64, s: f64) -> f64 {
    match t {
        DataType::F64 => x / s,
        DataType::F16 => f16::from_f32(x as f32 / s as f32).to_f64(),
        DataType::BF16 => bf16::from_f32(x as f32 / s as f32).to_f64(),
        _ => f64::from(x as f32 / s as f32),
    }
}

/// numpy's result type of two float types.
fn promote(a: DataType, b: DataType) -> DataType {
    use DataType::*;
    match (a, b) {
        (F64, _) | (_, F64) => F64,
        (F16, F16) => F16,
        (BF16, BF16) => BF16,
        _ => F32,
    }
}

/// An integer quantization of the real value `q` (already divided by the scale): round half to
/// even, through int32 as the reference does, plus `zp`, saturated to `(lo, hi)`.
fn requantize(q: f64, zp: i64, (lo, hi): (i64, i64)) -> i64 {
    let r = q.round_ties_even();
    let r = if r.is_nan() {
        0
    } else {
        r.clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i64
    };
    (r + zp).clamp(lo, hi)
}

fn quantize_linear(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, s, zp) = (req(inputs, 0)?, req(inputs, 1)?, opt(inputs, 2));
    let want = match ctx.int("output_dtype", 0)? {
        0 => None,
        c => Some(
            DataType::from_onnx(c as i32)
                .ok_or_else(|| OpFail::Invalid(format!("output_dtype {c} is not a type")))?,
        ),
    };
    let to = match zp {
        Some(z) if want.is_some_and(|w| w != z.dtype) => {
            return fail(format!(
                "output_dtype differs from the zero point's type {}",
                z.dtype
            ))
        }
        Some(z) => z.dtype,
        None => want.unwrap_or(DataType::U8),
    };
    for t in [x.dtype, s.dtype] {
        if !matches!(
            t,
            DataType::F32 | DataType::F64 | DataType::F16 | DataType::BF16 | DataType::I32
        ) {
            return fail(format!("QuantizeLinear input or scale of type {t}"));
        }
    }
    let p = Params::of(ctx, &x.shape, s)?;
    check_zero_point(s, zp)?;
    let ct = match ctx.int("precision", 0)? {
        0 => promote(x.dtype, s.dtype),
        c => DataType::from_onnx(c as i32)
            .ok_or_else(|| OpFail::Invalid(format!("precision {c} is not a type")))?,
    };
    let saturate = ctx.int("saturate", 1)? != 0;
    let (rx, rs) = (reader(x.dtype)?, reader(s.dtype)?);
    let rz = zp.map(|z| reader(z.dtype)).transpose()?;
    let zero = |j: usize| match (zp, rz) {
        (Some(z), Some(r)) => r(z.bytes(), j),
        _ => 0.0,
    };
    let quot = |i: usize| {
        let j = p.index(i);
        (divide(ct, rx(x.bytes(), i), rs(s.bytes(), j)), j)
    };
    let n = x.numel();
    let mut out = ctx.alloc_for_overwrite(to, &x.shape)?;
    if let Some(range) = int_range(to) {
        write_codes(&mut out, n, |i| {
            let (q, j) = quot(i);
            Ok(requantize(q, zero(j) as i64, range) as u64)
        })?;
    } else if let Some(f) = float8(to) {
        write_codes(&mut out, n, |i| {
            Ok(u64::from(f.encode(quot(i).0, saturate)))
        })?;
    } else if to == DataType::F4E2M1 {
        write_codes(&mut out, n, |i| {
            let (q, j) = quot(i);
            // The reference adds the zero point in the quotient's type.
            let v = divide(ct, q + zero(j), 1.0);
            Ok(u64::from(m::E2M1.encode(v, true)))
        })?;
    } else {
        return fail(format!("{to} is not a quantized type"));
    }
    Ok(vec![out])
}

fn dequantize_linear(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, s, zp) = (req(inputs, 0)?, req(inputs, 1)?, opt(inputs, 2));
    let to = match ctx.int("output_dtype", 0)? {
        0 => s.dtype,
        c => DataType::from_onnx(c as i32)
            .ok_or_else(|| OpFail::Invalid(format!("output_dtype {c} is not a type")))?,
    };
    let p = Params::of(ctx, &x.shape, s)?;
    check_zero_point(s, zp)?;
    let minifloat = float8(x.dtype).is_some() || x.dtype == DataType::F4E2M1;
    if let Some(z) = zp {
        if minifloat {
            if (0..z.numel()).any(|j| get(z, j).is_ok_and(|v| v != 0.0)) {
                return fail("a float8 zero point must be zero");
            }
        } else if z.dtype != x.dtype {
            return fail(format!(
                "zero point is {} but the input is {}",
                z.dtype, x.dtype
            ));
        }
    }
    let wide = s.dtype == DataType::F64;
    let (rx, rs) = (reader(x.dtype)?, reader(s.dtype)?);
    let rz = match zp {
        Some(z) if !minifloat => Some((z, reader(z.dtype)?)),
        _ => None,
    };
    let mut out = ctx.alloc_for_overwrite(to, &x.shape)?;
    write_floats(&mut out, |i| {
        let j = p.index(i);
        let xv = rx(x.bytes(), i);
        let zv = rz.map_or(0.0, |(z, r)| r(z.bytes(), j));
        let sv = rs(s.bytes(), j);
        Ok(if wide {
            (xv - zv) * sv
        } else {
            let dx = xv as f32 - zv as f32;
            f64::from(dx * sv as f32)
        })
    })?;
    Ok(vec![out])
}

fn dynamic_quantize_linear(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    if x.dtype != DataType::F32 {
        return fail(format!(
            "DynamicQuantizeLinear needs float input, got {}",
            x.dtype
        ));
    }
    let v = x.data::<f32>()?;
    // The range always includes 0; NaN propagates as numpy's max/min do.
    let fold = |init: f32, pick: fn(f32, f32) -> f32| {
        v.iter().fold(init, |a, &b| {
            if a.is_nan() || b.is_nan() {
                f32::NAN
            } else {
                pick(a, b)
            }
        })
    };
    let hi = fold(0.0, f32::max);
    let lo = fold(0.0, f32::min);
    let scale = if hi == lo { 1.0f32 } else { hi - lo } / 255.0;
    let zp = (0.0 - lo / scale).clamp(0.0, 255.0).round_ties_even();
    let mut y = ctx.alloc_for_overwrite(DataType::U8, &x.shape)?;
    for (o, &e) in y.data_mut::<u8>()?.iter_mut().zip(v) {
        *o = ((e / scale).round_ties_even() + zp).clamp(0.0, 255.0) as u8;
    }
    let s = ctx.from_vec::<f32>(&[], &[scale])?;
    let z = ctx.from_vec::<u8>(&[], &[zp as u8])?;
    Ok(vec![y, s, z])
}

/// Shapes of a batched matrix product (numpy `matmul` rules, 1-D operands promoted).
struct MatMulDims {
    /// The output's shape.
    out: Vec<usize>,
    /// Output batch shape and each operand's batch shape, right-aligned to it.
    batch: Vec<usize>,
    a_batch: Vec<usize>,
    b_batch: Vec<usize>,
    m: usize,
    k: usize,
    n: usize,
}

impl MatMulDims {
    fn new(a: &[usize], b: &[usize]) -> Result<MatMulDims, OpFail> {
        if a.is_empty() || b.is_empty() {
            return fail("MatMul operands must have rank >= 1");
        }
        let a2: Vec<usize> = if a.len() == 1 {
            vec![1, a[0]]
        } else {
            a.to_vec()
        };
        let b2: Vec<usize> = if b.len() == 1 {
            vec![b[0], 1]
        } else {
            b.to_vec()
        };
        let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
        let (kb, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
        if k != kb {
            return fail(format!("MatMul of {a:?} and {b:?}: inner dims differ"));
        }
        let (ab, bb) = (&a2[..a2.len() - 2], &b2[..b2.len() - 2]);
        let r = ab.len().max(bb.len());
        let pad = |s: &[usize]| -> Vec<usize> {
            let mut v = vec![1; r - s.len()];
            v.extend_from_slice(s);
            v
        };
        let (a_batch, b_batch) = (pad(ab), pad(bb));
        let mut batch = Vec::with_capacity(r);
        for (&p, &q) in a_batch.iter().zip(&b_batch) {
            if p != q && p != 1 && q != 1 {
                return fail(format!(
                    "MatMul of {a:?} and {b:?}: batch dims do not broadcast"
                ));
            }
            batch.push(if p == 1 { q } else { p });
        }
        let mut out = batch.clone();
        if a.len() > 1 {
            out.push(m);
        }
        if b.len() > 1 {
            out.push(n);
        }
        Ok(MatMulDims {
            out,
            batch,
            a_batch,
            b_batch,
            m,
            k,
            n,
        })
    }

    /// The first elements of A's and B's matrices for output batch `bi`.
    fn offsets(&self, bi: usize) -> (usize, usize) {
        let (mut rest, mut ao, mut bo) = (bi, 0, 0);
        let (mut astride, mut bstride) = (self.m * self.k, self.k * self.n);
        for d in (0..self.batch.len()).rev() {
            let c = rest % self.batch[d];
            rest /= self.batch[d];
            if self.a_batch[d] != 1 {
                ao += c * astride;
            }
            if self.b_batch[d] != 1 {
                bo += c * bstride;
            }
            astride *= self.a_batch[d];
            bstride *= self.b_batch[d];
        }
        (ao, bo)
    }

    /// Calls `f(output index, row, column, accumulator)` for every output element, the
    /// accumulator being `sum_k (a - za(row)) * (b - zb(col))` in wrapping i32, k ascending.
    fn run(
        &self,
        a: (&Tensor, &dyn Fn(usize) -> i32),
        b: (&Tensor, &dyn Fn(usize) -> i32),
        mut f: impl FnMut(usize, usize, usize, i32) -> Result<(), OpFail>,
    ) -> Result<(), OpFail> {
        let (ra, rb) = (int_reader(a.0.dtype)?, int_reader(b.0.dtype)?);
        let (ab, bb) = (a.0.bytes(), b.0.bytes());
        let nb: usize = self.batch.iter().product();
        let mut idx = 0;
        for bi in 0..nb {
            let (ao, bo) = self.offsets(bi);
            for r in 0..self.m {
                let za = (a.1)(r);
                for c in 0..self.n {
                    let zb = (b.1)(c);
                    let mut acc = 0i32;
                    for q in 0..self.k {
                        let x = ra(ab, ao + r * self.k + q).wrapping_sub(za);
                        let y = rb(bb, bo + q * self.n + c).wrapping_sub(zb);
                        acc = acc.wrapping_add(x.wrapping_mul(y));
                    }
                    f(idx, r, c, acc)?;
                    idx += 1;
                }
            }
        }
        Ok(())
    }
}

/// Element `i` of an 8-bit integer tensor's bytes as i32.
fn int_reader(dt: DataType) -> Result<fn(&[u8], usize) -> i32, OpFail> {
    Ok(match dt {
        DataType::U8 => |b, i| i32::from(b[i]),
        DataType::I8 => |b, i| i32::from(b[i] as i8),
        d => return unsupported(format!("integer products of {d}")),
    })
}

/// A zero point as a function of the row (or column, or channel) index: one element for all, or
/// one per index (`len` of them); absent is 0.
fn zero_points<'t>(
    z: Option<&'t Tensor>,
    len: usize,
    what: &str,
    of: DataType,
) -> Result<Box<dyn Fn(usize) -> i32 + 't>, OpFail> {
    let Some(z) = z else {
        return Ok(Box::new(|_| 0));
    };
    if z.dtype != of {
        return fail(format!("{what} is {} but its operand is {of}", z.dtype));
    }
    let r = int_reader(z.dtype)?;
    let b = z.bytes();
    match z.numel() {
        1 => {
            let v = r(b, 0);
            Ok(Box::new(move |_| v))
        }
        n if n == len => Ok(Box::new(move |i| r(b, i))),
        n => fail(format!("{what} has {n} elements, wants 1 or {len}")),
    }
}

/// A float scale as a function of the row (or column, or channel) index, like [`zero_points`].
fn scales<'t>(
    s: &'t Tensor,
    len: usize,
    what: &str,
) -> Result<Box<dyn Fn(usize) -> f64 + 't>, OpFail> {
    let r = reader(s.dtype)?;
    let b = s.bytes();
    match s.numel() {
        1 => {
            let v = r(b, 0);
            Ok(Box::new(move |_| v))
        }
        n if n == len => Ok(Box::new(move |i| r(b, i))),
        n => fail(format!("{what} has {n} elements, wants 1 or {len}")),
    }
}

/// `a * b / y` in the scales' type, one rounding per operation as numpy does (f32 for f32 scales,
/// f16 or bf16 through f32 for those).
fn multiplier(t: DataType, a: f64, b: f64, y: f64) -> f64 {
    match t {
        DataType::F64 => a * b / y,
        DataType::F16 => {
            let p = f16::from_f32(a as f32 * b as f32).to_f32();
            f16::from_f32(p / y as f32).to_f64()
        }
        DataType::BF16 => {
            let p = bf16::from_f32(a as f32 * b as f32).to_f32();
            bf16::from_f32(p / y as f32).to_f64()
        }
        _ => f64::from(a as f32 * b as f32 / y as f32),
    }
}

fn matmul_integer(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (a, b) = (req(inputs, 0)?, req(inputs, 1)?);
    let d = MatMulDims::new(&a.shape, &b.shape)?;
    let za = zero_points(opt(inputs, 2), d.m, "a_zero_point", a.dtype)?;
    let zb = zero_points(opt(inputs, 3), d.n, "b_zero_point", b.dtype)?;
    let mut out = ctx.alloc_for_overwrite(DataType::I32, &d.out)?;
    let o = out.data_mut::<i32>()?;
    d.run((a, &*za), (b, &*zb), |i, _, _, acc| {
        o[i] = acc;
        Ok(())
    })?;
    Ok(vec![out])
}

fn qlinear_matmul(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (a, a_s, a_z) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    let (b, b_s, b_z) = (req(inputs, 3)?, req(inputs, 4)?, req(inputs, 5)?);
    let (y_s, y_z) = (req(inputs, 6)?, req(inputs, 7)?);
    let d = MatMulDims::new(&a.shape, &b.shape)?;
    let za = zero_points(Some(a_z), d.m, "a_zero_point", a.dtype)?;
    let zb = zero_points(Some(b_z), d.n, "b_zero_point", b.dtype)?;
    let (sa, sb) = (scales(a_s, d.m, "a_scale")?, scales(b_s, d.n, "b_scale")?);
    let sy = scales(y_s, 1, "y_scale")?(0);
    let zy = zero_points(Some(y_z), 1, "y_zero_point", y_z.dtype)?(0);
    let Some(range) = int_range(y_z.dtype) else {
        return fail(format!("QLinearMatMul output of {}", y_z.dtype));
    };
    let st = a_s.dtype;
    let mut out = ctx.alloc_for_overwrite(y_z.dtype, &d.out)?;
    let o = out.bytes_mut()?;
    d.run((a, &*za), (b, &*zb), |i, r, c, acc| {
        let v = f64::from(acc) * multiplier(st, sa(r), sb(c), sy) + f64::from(zy);
        o[i] = requantize(v, 0, range) as u8;
        Ok(())
    })?;
    Ok(vec![out])
}

/// Calls `f(output index, output channel, accumulator)` for every element of an integer
/// convolution, the accumulator being the sum over the window of `(x - zx) * (w - zw(channel))` in
/// wrapping i32 (padding contributes nothing), channels then taps in ascending order.
fn conv_int(
    ctx: &OpCtx,
    x: &Tensor,
    w: &Tensor,
    zx: &dyn Fn(usize) -> i32,
    zw: &dyn Fn(usize) -> i32,
    mut f: impl FnMut(usize, usize, i32) -> Result<(), OpFail>,
) -> Result<Vec<usize>, OpFail> {
    let attrs = conv_attrs(ctx, x, w)?;
    let (win, group, oshape) = conv_geometry(&x.shape, &w.shape, &attrs)?;
    let (rx, rw) = (int_reader(x.dtype)?, int_reader(w.dtype)?);
    let (xb, wb) = (x.bytes(), w.bytes());
    let zx = zx(0);
    let nd = x.rank() - 2;
    let (c_in, m_out) = (x.shape[1], w.shape[0]);
    let (cg, mg) = (c_in / group, m_out / group);
    let in_sp = &x.shape[2..];
    let out_sp = &oshape[2..];
    let in_size: usize = in_sp.iter().product();
    let out_size: usize = out_sp.iter().product();
    let k_size: usize = win.kernel.iter().product();
    let mut oc = vec![0usize; nd];
    let mut kc = vec![0usize; nd];
    let mut idx = 0;
    for n in 0..x.shape[0] {
        for mo in 0..m_out {
            let g = mo / mg;
            let zwm = zw(mo);
            for op in 0..out_size {
                unravel(op, out_sp, &mut oc);
                let mut acc = 0i32;
                for c in 0..cg {
                    let xc = ((n * c_in) + g * cg + c) * in_size;
                    let wc = (mo * cg + c) * k_size;
                    for kp in 0..k_size {
                        unravel(kp, &win.kernel, &mut kc);
                        let mut at = 0usize;
                        let mut inside = true;
                        for i in 0..nd {
                            let p = win.coord(i, oc[i], kc[i]);
                            if p < 0 || p as usize >= in_sp[i] {
                                inside = false;
                                break;
                            }
                            at = at * in_sp[i] + p as usize;
                        }
                        if inside {
                            let xv = rx(xb, xc + at).wrapping_sub(zx);
                            let wv = rw(wb, wc + kp).wrapping_sub(zwm);
                            acc = acc.wrapping_add(xv.wrapping_mul(wv));
                        }
                    }
                }
                f(idx, mo, acc)?;
                idx += 1;
            }
        }
    }
    Ok(oshape)
}

/// The row-major coordinates of flat index `i` in `dims`.
fn unravel(mut i: usize, dims: &[usize], out: &mut [usize]) {
    for d in (0..dims.len()).rev() {
        out[d] = i % dims[d];
        i /= dims[d];
    }
}

/// The output shape of a convolution, checked.
fn conv_shape(ctx: &OpCtx, x: &Tensor, w: &Tensor) -> Result<Vec<usize>, OpFail> {
    let attrs = conv_attrs(ctx, x, w)?;
    Ok(conv_geometry(&x.shape, &w.shape, &attrs)?.2)
}

fn conv_integer(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, w) = (req(inputs, 0)?, req(inputs, 1)?);
    let zx = zero_points(opt(inputs, 2), 1, "x_zero_point", x.dtype)?;
    let zw = zero_points(opt(inputs, 3), w.shape[0], "w_zero_point", w.dtype)?;
    let mut out = ctx.alloc_for_overwrite(DataType::I32, &conv_shape(ctx, x, w)?)?;
    let o = out.data_mut::<i32>()?;
    conv_int(ctx, x, w, &*zx, &*zw, |i, _, acc| {
        o[i] = acc;
        Ok(())
    })?;
    Ok(vec![out])
}

fn qlinear_conv(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, x_s, x_z) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    let (w, w_s, w_z) = (req(inputs, 3)?, req(inputs, 4)?, req(inputs, 5)?);
    let (y_s, y_z, bias) = (req(inputs, 6)?, req(inputs, 7)?, opt(inputs, 8));
    if w.rank() < 3 {
        return fail(format!("QLinearConv weights {:?} need rank >= 3", w.shape));
    }
    let m_out = w.shape[0];
    let zx = zero_points(Some(x_z), 1, "x_zero_point", x.dtype)?;
    let zw = zero_points(Some(w_z), m_out, "w_zero_point", w.dtype)?;
    let sx = scales(x_s, 1, "x_scale")?(0);
    let sw = scales(w_s, m_out, "w_scale")?;
    let sy = scales(y_s, 1, "y_scale")?(0);
    let zy = zero_points(Some(y_z), 1, "y_zero_point", y_z.dtype)?(0);
    let Some(range) = int_range(y_z.dtype) else {
        return fail(format!("QLinearConv output of {}", y_z.dtype));
    };
    let bias = match bias {
        Some(b) if b.dtype != DataType::I32 || b.numel() != m_out => {
            return fail(format!(
                "bias must be int32 [{m_out}], got {} {:?}",
                b.dtype, b.shape
            ))
        }
        Some(b) => Some(b.data::<i32>()?),
        None => None,
    };
    let st = x_s.dtype;
    let mut out = ctx.alloc_for_overwrite(y_z.dtype, &conv_shape(ctx, x, w)?)?;
    let o = out.bytes_mut()?;
    conv_int(ctx, x, w, &*zx, &*zw, |i, mo, acc| {
        let acc = acc.wrapping_add(bias.map_or(0, |b| b[mo]));
        let v = f64::from(acc) * multiplier(st, sx, sw(mo), sy) + f64::from(zy);
        o[i] = requantize(v, 0, range) as u8;
        Ok(())
    })?;
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use crate::ops::testutil::*;
    use memplan_ir::graph::AttrValue;

    #[test]
    fn quantize_and_dequantize_per_axis_and_blocked() {
        let x = t_f32(&[2, 2], &[0.0, 2.5, -3.0, 300.0]);
        let s = t_f32(&[2], &[1.0, 2.0]);
        let o = run_op(
            "QuantizeLinear",
            &[("axis", AttrValue::Int(1))],
            &[Some(&x), Some(&s), None],
            1,
        )
        .unwrap();
        // 2.5 / 2 = 1.25 -> 1; -3 saturates to 0; 300 / 2 = 150.
        assert_eq!(o[0].data::<u8>().unwrap(), &[0, 1, 0, 150]);
        let o = run_op(
            "DequantizeLinear",
            &[("axis", AttrValue::Int(1))],
            &[Some(&o[0]), Some(&s), None],
            1,
        )
        .unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[0.0, 2.0, 0.0, 300.0]);
        let bs = t_f32(&[2, 1], &[1.0, 4.0]);
        let o = run_op(
            "QuantizeLinear",
            &[
                ("axis", AttrValue::Int(1)),
                ("block_size", AttrValue::Int(2)),
            ],
            &[Some(&x), Some(&bs), None],
            1,
        )
        .unwrap();
        assert_eq!(o[0].data::<u8>().unwrap(), &[0, 2, 0, 75]);
    }

    #[test]
    fn integer_matmul_subtracts_zero_points_exactly() {
        let a = t_of::<u8>(&[2, 2], &[1, 2, 3, 4]);
        let b = t_of::<u8>(&[2, 1], &[5, 6]);
        let za = t_of::<u8>(&[], &[1]);
        let o = run_op(
            "MatMulInteger",
            &[],
            &[Some(&a), Some(&b), Some(&za), None],
            1,
        )
        .unwrap();
        assert_eq!(o[0].data::<i32>().unwrap(), &[6, 28]);
    }

    /// Quantize/DequantizeLinear pass every axis, per tensor and per axis (the scale and zero point
    /// sliced along theirs); blocked scales and 4-bit types have no flow.
    #[test]
    fn qdq_flows_match_their_kernels() {
        let x = t_f32(
            &[3, 4, 5],
            &rand_f32(60, 5).iter().map(|v| v * 60.0).collect::<Vec<_>>(),
        );
        let s1 = t_f32(&[], &[0.5]);
        let z1 = t_of(&[], &[7u8]);
        check_flow(
            "QuantizeLinear",
            &[],
            &[&x, &s1, &z1],
            1,
            &[0, 1, 2],
            &[1, 2],
        )
        .unwrap();
        let s4 = t_f32(&[4], &[0.5, 1.0, 2.0, 0.25]);
        let z4 = t_of(&[4], &[1u8, 2, 3, 4]);
        let axis1 = [("axis", AttrValue::Int(1))];
        check_flow(
            "QuantizeLinear",
            &axis1,
            &[&x, &s4, &z4],
            1,
            &[0, 1, 2],
            &[1, 3],
        )
        .unwrap();
        let q = run_op(
            "QuantizeLinear",
            &axis1,
            &[Some(&x), Some(&s4), Some(&z4)],
            1,
        )
        .unwrap();
        check_flow(
            "DequantizeLinear",
            &axis1,
            &[&q[0], &s4, &z4],
            1,
            &[0, 1, 2],
            &[2],
        )
        .unwrap();
        check_flow(
            "DequantizeLinear",
            &[],
            &[&q[0], &s1, &z1],
            1,
            &[0, 1, 2],
            &[2],
        )
        .unwrap();
        let blocked = [
            ("axis", AttrValue::Int(2)),
            ("block_size", AttrValue::Int(5)),
        ];
        let sb = t_f32(&[3, 4, 1], &[0.5; 12]);
        assert!(flows("QuantizeLinear", &blocked, &[&x, &sb], 1).is_none());
        // A 4-bit zero point makes a 4-bit output: it runs, and has no flow.
        let z4 = crate::tensor::Tensor::zeros(memplan_ir::DataType::U4, &[], None).unwrap();
        run_op("QuantizeLinear", &[], &[Some(&x), Some(&s1), Some(&z4)], 1).unwrap();
        assert!(flows("QuantizeLinear", &[], &[&x, &s1, &z4], 1).is_none());
    }
}
