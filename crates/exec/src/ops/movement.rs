//! Data-movement ops: Transpose, Slice, Split, Concat, Expand, Tile, Trilu, Range, Pad,
//! ReverseSequence. They move element
//! bits (dispatched on the element size), so every dtype the executor holds is supported.
//!
//! Scratch: none. Slice returns a view of its input when the plan marks it as one.

use memplan_ir::DataType;

use super::{
    axis, copy_then, dims_of, fail, opt, raw, raw_mut, req, scalar_i64, unsupported, OpCtx, OpFail,
    OpFn, OverwriteFn,
};
use crate::kernels::elementwise::broadcast_shapes;
use crate::kernels::movement::{self as mv, istrides};
use crate::tensor::{elem_size, Tensor};

/// Ops whose output 0 is input 0 modified (see [`super::OverwriteFn`]).
pub const OVERWRITE: &[(&str, OverwriteFn)] = &[
    ("Trilu", trilu_over),
    ("ReverseSequence", reverse_sequence_over),
];

pub const OPS: &[(&str, OpFn)] = &[
    ("Transpose", transpose),
    ("Slice", slice),
    ("Split", split),
    ("Concat", concat),
    ("Expand", expand),
    ("Tile", tile),
    ("Trilu", trilu),
    ("Range", range),
    ("Pad", pad),
    ("ReverseSequence", reverse_sequence),
    ("SpaceToDepth", space_depth),
    ("DepthToSpace", space_depth),
];

fn reverse_sequence(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    copy_then(ctx, inputs, reverse_sequence_over)
}

/// ReverseSequence over `out`, which holds the input: for batch entry `b`, time steps
/// `0..sequence_lens[b]` are reversed by swapping pairs in place.
fn reverse_sequence_over(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    out: &mut [u8],
) -> Result<(), OpFail> {
    let (x, lens) = (req(inputs, 0)?, req(inputs, 1)?);
    let (ba, ta) = (ctx.int("batch_axis", 1)?, ctx.int("time_axis", 0)?);
    if x.rank() < 2 || !matches!((ba, ta), (0, 1) | (1, 0)) {
        return fail(format!(
            "ReverseSequence needs rank >= 2 and batch/time axes 0 and 1, got {:?} with {ba}/{ta}",
            x.shape
        ));
    }
    let (nb, nt) = (x.shape[ba as usize], x.shape[ta as usize]);
    let inner: usize = x.shape[2..].iter().product();
    let lens = lens.to_i64_vec()?;
    if lens.len() != nb {
        return fail(format!(
            "sequence_lens has {} entries for a batch of {nb}",
            lens.len()
        ));
    }
    let block = |b: usize, t: usize| {
        if ta == 0 {
            (t * nb + b) * inner
        } else {
            (b * nt + t) * inner
        }
    };
    by_size!(elem_size(x.dtype)?, T => {
        let o = super::cast_mut::<T>(out)?;
        for (b, &l) in lens.iter().enumerate() {
            let Some(l) = usize::try_from(l).ok().filter(|&l| l <= nt) else {
                return fail(format!("sequence length {l} is outside 0..={nt}"));
            };
            for t in 0..l / 2 {
                let (p, q) = (block(b, t), block(b, l - 1 - t));
                for k in 0..inner {
                    o.swap(p + k, q + k);
                }
            }
        }
    });
    Ok(())
}

/// SpaceToDepth/DepthToSpace as one strided gather: the input viewed with 6 axes, permuted.
/// Depth channel `(c, i, j)` (`c` < C of the spatial form, `i, j` < b) is `(i*b + j)*C + c` in DCR
/// mode (the default) and `c*b*b + i*b + j` in CRD.
fn space_depth(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    if x.rank() != 4 {
        return fail(format!(
            "{} needs [N, C, H, W], got {:?}",
            ctx.node.op, x.shape
        ));
    }
    let b = usize::try_from(ctx.int("blocksize", 0)?)
        .ok()
        .filter(|&b| b >= 1)
        .ok_or_else(|| OpFail::Invalid("blocksize must be >= 1".into()))?;
    let crd = match ctx.string("mode")?.as_deref() {
        None | Some("DCR") => false,
        Some("CRD") => true,
        Some(m) => return fail(format!("mode '{m}' is not DCR or CRD")),
    };
    let [n, c, h, w] = [x.shape[0], x.shape[1], x.shape[2], x.shape[3]];
    let (view, perm, out): (Vec<usize>, [usize; 6], Vec<usize>) = if ctx.node.op == "DepthToSpace" {
        if c % (b * b) != 0 {
            return fail(format!(
                "C = {c} is not a multiple of blocksize^2 = {}",
                b * b
            ));
        }
        let cs = c / (b * b);
        let out = vec![n, cs, h * b, w * b];
        if crd {
            (vec![n, cs, b, b, h, w], [0, 1, 4, 2, 5, 3], out)
        } else {
            (vec![n, b, b, cs, h, w], [0, 3, 4, 1, 5, 2], out)
        }
    } else {
        if h % b != 0 || w % b != 0 {
            return fail(format!(
                "H = {h} and W = {w} must be multiples of blocksize {b}"
            ));
        }
        let view = vec![n, c, h / b, b, w / b, b];
        let out = vec![n, c * b * b, h / b, w / b];
        if crd {
            (view, [0, 1, 3, 5, 2, 4], out)
        } else {
            (view, [0, 3, 5, 1, 2, 4], out)
        }
    };
    let st = istrides(&view);
    let shape: Vec<usize> = perm.iter().map(|&p| view[p]).collect();
    let strides: Vec<isize> = perm.iter().map(|&p| st[p]).collect();
    Ok(vec![
        gather_strided(ctx, x, 0, &shape, &strides)?.reshaped(&out)
    ])
}

/// A new tensor of `shape` filled by `dst[i] = x[base + sum idx_k * strides_k]`.
pub(crate) fn gather_strided(
    ctx: &OpCtx,
    x: &Tensor,
    base: usize,
    shape: &[usize],
    strides: &[isize],
) -> Result<Tensor, OpFail> {
    let mut out = ctx.alloc(x.dtype, shape)?;
    by_size!(elem_size(x.dtype)?, T => mv::strided_copy(raw::<T>(x)?, base, shape, strides, raw_mut::<T>(&mut out)?)?);
    Ok(out)
}

fn transpose(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let perm: Vec<usize> = match ctx.ints("perm")? {
        Some(p) => p
            .iter()
            .map(|&a| axis(a, x.rank()))
            .collect::<Result<_, _>>()?,
        None => (0..x.rank()).rev().collect(),
    };
    if perm.len() != x.rank() {
        return fail(format!(
            "perm {perm:?} has {} entries for rank {}",
            perm.len(),
            x.rank()
        ));
    }
    let oshape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    // The strided copy writes every element.
    let mut out = ctx.alloc_for_overwrite(x.dtype, &oshape)?;
    by_size!(elem_size(x.dtype)?, T => mv::transpose(raw::<T>(x)?, &x.shape, &perm, raw_mut::<T>(&mut out)?)?);
    Ok(vec![out])
}

/// One axis of a resolved slice: first index, element count, step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliceAxis {
    pub start: usize,
    pub count: usize,
    pub step: i64,
}

/// ONNX Slice's clamping of one axis of length `dim`.
pub fn resolve_slice(dim: usize, start: i64, end: i64, step: i64) -> Result<SliceAxis, OpFail> {
    if step == 0 {
        return fail("Slice step must not be 0");
    }
    let d = dim as i128;
    let norm = |v: i64| if v < 0 { v as i128 + d } else { v as i128 };
    let (s, e) = (norm(start), norm(end));
    let (s, e) = if step > 0 {
        (s.clamp(0, d), e.clamp(0, d))
    } else {
        (s.clamp(0, d - 1), e.clamp(-1, d - 1))
    };
    let st = step as i128;
    let count = if step > 0 {
        if e > s {
            (e - s + st - 1) / st
        } else {
            0
        }
    } else if s > e {
        (s - e + (-st) - 1) / (-st)
    } else {
        0
    };
    Ok(SliceAxis {
        start: if count > 0 { s as usize } else { 0 },
        count: count as usize,
        step,
    })
}

fn slice(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let r = x.rank();
    let (starts, ends, axes, steps) = if ctx.opset < 10 {
        let Some(s) = ctx.ints("starts")? else {
            return fail("Slice-1 needs 'starts'");
        };
        let Some(e) = ctx.ints("ends")? else {
            return fail("Slice-1 needs 'ends'");
        };
        (s, e, ctx.ints("axes")?, None)
    } else {
        let s = req(inputs, 1)?.to_i64_vec()?;
        let e = req(inputs, 2)?.to_i64_vec()?;
        let a = opt(inputs, 3).map(|t| t.to_i64_vec()).transpose()?;
        let st = opt(inputs, 4).map(|t| t.to_i64_vec()).transpose()?;
        (s, e, a, st)
    };
    if ends.len() != starts.len() {
        return fail(format!(
            "Slice has {} starts but {} ends",
            starts.len(),
            ends.len()
        ));
    }
    let axes: Vec<i64> = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if axes.len() != starts.len() || steps.len() != starts.len() {
        return fail("Slice starts, ends, axes and steps must have equal lengths");
    }
    let mut plan: Vec<SliceAxis> = x
        .shape
        .iter()
        .map(|&d| SliceAxis {
            start: 0,
            count: d,
            step: 1,
        })
        .collect();
    let mut seen = vec![false; r];
    for i in 0..starts.len() {
        let a = axis(axes[i], r)?;
        if std::mem::replace(&mut seen[a], true) {
            return fail(format!("Slice axis {} is repeated", axes[i]));
        }
        plan[a] = resolve_slice(x.shape[a], starts[i], ends[i], steps[i])?;
    }
    let st = istrides(&x.shape);
    let oshape: Vec<usize> = plan.iter().map(|p| p.count).collect();
    let base: usize = plan
        .iter()
        .zip(&st)
        .map(|(p, &s)| p.start * s as usize)
        .sum();
    if ctx.view {
        let first_cut = (0..r).find(|&k| oshape[k] != x.shape[k]);
        let contiguous = match first_cut {
            None => true,
            Some(k) => {
                (0..k).all(|j| oshape[j] == 1) && (k + 1..r).all(|j| oshape[j] == x.shape[j])
            }
        };
        if !contiguous || plan.iter().any(|p| p.step != 1 && p.count > 1) {
            return fail(format!(
                "the plan makes this Slice a view but {:?} of {:?} is not one contiguous run",
                oshape, x.shape
            ));
        }
        return Ok(vec![
            x.view(if oshape.contains(&0) { 0 } else { base }, &oshape)?
        ]);
    }
    let ost: Vec<isize> = plan
        .iter()
        .zip(&st)
        .map(|(p, &s)| p.step as isize * s)
        .collect();
    Ok(vec![gather_strided(ctx, x, base, &oshape, &ost)?])
}

fn split(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let a = axis(ctx.int("axis", 0)?, x.rank())?;
    let d = x.shape[a];
    let n_out = ctx.node.outputs.len();
    let sizes: Vec<usize> = if let Some(s) = opt(inputs, 1) {
        dims_of(s, "split")?
    } else if let Some(s) = ctx.ints("split")? {
        s.iter()
            .map(|&v| usize::try_from(v).map_err(|_| OpFail::Invalid(format!("split size {v}"))))
            .collect::<Result<_, _>>()?
    } else {
        let parts = ctx.opt_int("num_outputs")?.map_or(n_out as i64, |v| v);
        if parts <= 0 {
            return fail(format!("num_outputs is {parts}"));
        }
        let parts = parts as usize;
        // Equal parts; with num_outputs the last one is smaller when `d` does not divide.
        let each = if ctx.has("num_outputs") {
            d.div_ceil(parts)
        } else {
            d / parts
        };
        if !ctx.has("num_outputs") && d % parts != 0 {
            return fail(format!(
                "axis of length {d} does not split into {parts} equal parts"
            ));
        }
        (0..parts)
            .map(|i| each.min(d.saturating_sub(i * each)))
            .collect()
    };
    if sizes.iter().sum::<usize>() != d {
        return fail(format!(
            "split sizes {sizes:?} do not sum to the axis length {d}"
        ));
    }
    if sizes.len() != n_out {
        return fail(format!("{} split sizes for {n_out} outputs", sizes.len()));
    }
    let st = istrides(&x.shape);
    let mut outs = Vec::with_capacity(sizes.len());
    let mut at = 0;
    for &s in &sizes {
        let mut shape = x.shape.clone();
        shape[a] = s;
        let base = if s == 0 { 0 } else { at * st[a] as usize };
        outs.push(gather_strided(ctx, x, base, &shape, &st)?);
        at += s;
    }
    Ok(outs)
}

fn concat(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let ins: Vec<&Tensor> = inputs.iter().flatten().copied().collect();
    let Some(first) = ins.first() else {
        return fail("Concat needs at least one input");
    };
    let Some(ax) = ctx.opt_int("axis")? else {
        return fail("Concat needs 'axis'");
    };
    let a = axis(ax, first.rank())?;
    if let Some(t) = ins.iter().find(|t| t.dtype != first.dtype) {
        return fail(format!("Concat inputs mix {} and {}", first.dtype, t.dtype));
    }
    let mut oshape = first.shape.clone();
    oshape[a] = ins
        .iter()
        .map(|t| t.shape.get(a).copied().unwrap_or(0))
        .sum();
    let mut out = ctx.alloc(first.dtype, &oshape)?;
    by_size!(elem_size(first.dtype)?, T => {
        let parts: Vec<(&[T], &[usize])> =
            ins.iter().map(|t| Ok((raw::<T>(t)?, t.shape.as_slice()))).collect::<Result<_, OpFail>>()?;
        mv::concat(&parts, a, raw_mut::<T>(&mut out)?)?
    });
    Ok(vec![out])
}

fn expand(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let target = dims_of(req(inputs, 1)?, "Expand shape")?;
    let oshape = broadcast_shapes(&[&x.shape, &target])?;
    let mut out = ctx.alloc(x.dtype, &oshape)?;
    by_size!(elem_size(x.dtype)?, T => mv::expand(raw::<T>(x)?, &x.shape, &oshape, raw_mut::<T>(&mut out)?)?);
    Ok(vec![out])
}

fn tile(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let reps = dims_of(req(inputs, 1)?, "Tile repeats")?;
    if reps.len() != x.rank() {
        return fail(format!(
            "Tile repeats has {} entries for rank {}",
            reps.len(),
            x.rank()
        ));
    }
    let oshape: Vec<usize> = x.shape.iter().zip(&reps).map(|(a, b)| a * b).collect();
    let mut out = ctx.alloc(x.dtype, &oshape)?;
    by_size!(elem_size(x.dtype)?, T => mv::tile(raw::<T>(x)?, &x.shape, &reps, raw_mut::<T>(&mut out)?)?);
    Ok(vec![out])
}

fn trilu(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    copy_then(ctx, inputs, trilu_over)
}

/// Trilu over `out`, which holds the input: the elements outside the kept triangle become zero.
fn trilu_over(ctx: &OpCtx, inputs: &[Option<&Tensor>], out: &mut [u8]) -> Result<(), OpFail> {
    let x = req(inputs, 0)?;
    let k = match opt(inputs, 1) {
        Some(t) => scalar_i64(t, "Trilu k")?,
        None => 0,
    };
    let upper = ctx.int("upper", 1)? != 0;
    let r = x.rank();
    if r < 2 {
        return fail(format!("Trilu needs rank >= 2, got {:?}", x.shape));
    }
    let (m, n) = (x.shape[r - 2], x.shape[r - 1]);
    let es = elem_size(x.dtype)?;
    if n == 0 || out.len() != x.numel() * es {
        return if out.len() == x.numel() * es {
            Ok(())
        } else {
            fail("Trilu output size mismatch")
        };
    }
    for (row_i, row) in out.chunks_mut(n * es).enumerate() {
        let i = (row_i % m.max(1)) as i64;
        for (j, e) in row.chunks_mut(es).enumerate() {
            let d = j as i64 - i;
            if !(if upper { d >= k } else { d <= k }) {
                e.fill(0);
            }
        }
    }
    Ok(())
}

/// The length of a float Range from `limit - start` and `delta` (both widened to f64), as
/// onnxruntime counts it: `ceil((limit - start) / delta)` in double, at least 0; the values then
/// accumulate `delta`.
fn float_range_len(span: f64, delta: f64) -> Result<usize, OpFail> {
    if delta == 0.0 {
        return fail("Range delta must not be 0");
    }
    let n = (span / delta).ceil();
    if !n.is_finite() || n > 1e12 {
        return fail(format!("Range length {n} is not a usable count"));
    }
    Ok(n.max(0.0) as usize)
}
fn range(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (s, l, d) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    if s.dtype != l.dtype || s.dtype != d.dtype {
        return fail("Range start, limit and delta must have one type");
    }
    if [s, l, d].iter().any(|t| t.numel() != 1) {
        return fail("Range start, limit and delta must be scalars");
    }
    macro_rules! int_range {
        ($t:ty) => {{
            let (a, b, c) = (
                s.data::<$t>()?[0] as i128,
                l.data::<$t>()?[0] as i128,
                d.data::<$t>()?[0] as i128,
            );
            if c == 0 {
                return fail("Range delta must not be 0");
            }
            let n = ((b - a) + c - c.signum()) / c;
            let n = usize::try_from(n.max(0))
                .map_err(|_| OpFail::Invalid("Range is too long".into()))?;
            let mut out = ctx.alloc(<$t as crate::tensor::Element>::DTYPE, &[n])?;
            for (i, o) in out.data_mut::<$t>()?.iter_mut().enumerate() {
                *o = (a + i as i128 * c) as $t;
            }
            Ok(vec![out])
        }};
    }
    macro_rules! float_range {
        ($t:ty) => {{
            let (a, b, c) = (s.data::<$t>()?[0], l.data::<$t>()?[0], d.data::<$t>()?[0]);
            let n = float_range_len((b - a) as f64, c as f64)?;
            let mut out = ctx.alloc(<$t as crate::tensor::Element>::DTYPE, &[n])?;
            let mut v = a;
            for o in out.data_mut::<$t>()? {
                *o = v;
                v += c;
            }
            Ok(vec![out])
        }};
    }
    // f16/bf16: the f32 range of the widened operands, each value rounded to the type.
    macro_rules! half_range {
        ($t:ty) => {{
            let w = |t: &Tensor| -> Result<f32, OpFail> { Ok(t.data::<$t>()?[0].to_f32()) };
            let (a, b, c) = (w(s)?, w(l)?, w(d)?);
            let n = float_range_len((b - a) as f64, c as f64)?;
            let mut out = ctx.alloc(<$t as crate::tensor::Element>::DTYPE, &[n])?;
            let mut v = a;
            for o in out.data_mut::<$t>()? {
                *o = <$t>::from_f32(v);
                v += c;
            }
            Ok(vec![out])
        }};
    }
    match s.dtype {
        DataType::I64 => int_range!(i64),
        DataType::I32 => int_range!(i32),
        DataType::I16 => int_range!(i16),
        DataType::F32 => float_range!(f32),
        DataType::F64 => float_range!(f64),
        DataType::F16 => half_range!(half::f16),
        DataType::BF16 => half_range!(half::bf16),
        t => unsupported(format!("Range on {t}")),
    }
}

/// `Pad` (opset 2 attributes or opset 11+ inputs, with `axes` from opset 18): constant, reflect,
/// edge and wrap modes; negative pads crop.
fn pad(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let r = x.rank();
    let pads: Vec<i64> = match (ctx.ints("pads")?, opt(inputs, 1)) {
        (Some(p), _) => p,
        (None, Some(t)) => t.to_i64_vec()?,
        (None, None) => return fail("Pad needs pads"),
    };
    let axes: Vec<usize> = match opt(inputs, 3) {
        Some(t) => t
            .to_i64_vec()?
            .iter()
            .map(|&a| axis(a, r))
            .collect::<Result<_, _>>()?,
        None => (0..r).collect(),
    };
    let Some((before, after)) = memplan_ir::ops::movement::pad_amounts(&pads, &axes, r) else {
        return fail(format!(
            "Pad has {} pads for {} axes (needs two per axis)",
            pads.len(),
            axes.len()
        ));
    };
    let name = ctx.string("mode")?;
    let Some(mode) = mv::PadMode::named(name.as_deref()) else {
        return fail(format!("unknown Pad mode '{}'", name.unwrap_or_default()));
    };
    let mut maps = Vec::with_capacity(r);
    for a in 0..r {
        let n = x.shape[a] as i64 + before[a] + after[a];
        if n < 0 {
            return fail(format!("Pad makes axis {a} negative ({n})"));
        }
        maps.push(mv::pad_map(x.shape[a], before[a], n as usize, mode)?);
    }
    let oshape: Vec<usize> = maps.iter().map(Vec::len).collect();
    let mut out = ctx.alloc_for_overwrite(x.dtype, &oshape)?;
    let es = elem_size(x.dtype)?;
    let value_attr = f64::from(ctx.float("value", 0.0)?);
    let attr_bytes = scalar_bytes(x.dtype, value_attr);
    by_size!(es, T => {
        let value: T = match opt(inputs, 2) {
            Some(v) if v.numel() > 0 => raw::<T>(v)?[0],
            _ => match &attr_bytes {
                Some(b) if b.len() == es => bytemuck::pod_read_unaligned(b),
                _ => bytemuck::Zeroable::zeroed(),
            },
        };
        mv::pad(raw::<T>(x)?, &x.shape, &maps, value, raw_mut::<T>(&mut out)?)?
    });
    Ok(vec![out])
}

/// The little-endian bytes of `v` as one element of `dtype` (numeric types only).
fn scalar_bytes(dtype: DataType, v: f64) -> Option<Vec<u8>> {
    use DataType as D;
    Some(match dtype {
        D::F32 => (v as f32).to_le_bytes().to_vec(),
        D::F64 => v.to_le_bytes().to_vec(),
        D::F16 => half::f16::from_f64(v).to_le_bytes().to_vec(),
        D::BF16 => half::bf16::from_f64(v).to_le_bytes().to_vec(),
        D::I8 | D::U8 | D::Bool => vec![v as i64 as u8],
        D::I16 | D::U16 => (v as i64 as u16).to_le_bytes().to_vec(),
        D::I32 | D::U32 => (v as i64 as u32).to_le_bytes().to_vec(),
        D::I64 | D::U64 => (v as i64 as u64).to_le_bytes().to_vec(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::{run_op, t_f32, t_i64};
    use memplan_ir::graph::AttrValue;

    #[test]
    fn slice_clamps_and_steps_backwards() {
        assert_eq!(
            resolve_slice(5, 1, 100, 1).unwrap(),
            SliceAxis {
                start: 1,
                count: 4,
                step: 1
            }
        );
        assert_eq!(
            resolve_slice(5, -1, i64::MIN, -1).unwrap(),
            SliceAxis {
                start: 4,
                count: 5,
                step: -1
            }
        );
        assert_eq!(
            resolve_slice(5, i64::MAX, 0, -2).unwrap(),
            SliceAxis {
                start: 4,
                count: 2,
                step: -2
            }
        );
        assert_eq!(resolve_slice(5, 3, 1, 1).unwrap().count, 0);
        assert_eq!(
            resolve_slice(5, -100, 2, 1).unwrap(),
            SliceAxis {
                start: 0,
                count: 2,
                step: 1
            }
        );
        assert!(resolve_slice(5, 0, 1, 0).is_err());
        let x = t_f32(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let out = run_op(
            "Slice",
            &[],
            &[
                Some(&x),
                Some(&t_i64(&[2], &[0, -1])),
                Some(&t_i64(&[2], &[2, -10])),
                None,
                Some(&t_i64(&[2], &[1, -2])),
            ],
            1,
        )
        .unwrap();
        assert_eq!(out[0].shape, [2, 2]);
        assert_eq!(out[0].data::<f32>().unwrap(), &[3., 1., 6., 4.]);
    }

    #[test]
    fn split_forms() {
        let x = t_f32(&[5], &[1., 2., 3., 4., 5.]);
        let o = run_op("Split", &[], &[Some(&x), Some(&t_i64(&[2], &[2, 3]))], 2).unwrap();
        assert_eq!(o[1].data::<f32>().unwrap(), &[3., 4., 5.]);
        let o = run_op(
            "Split",
            &[("num_outputs", AttrValue::Int(2))],
            &[Some(&x)],
            2,
        )
        .unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[1., 2., 3.]);
        assert_eq!(o[1].data::<f32>().unwrap(), &[4., 5.]);
        assert!(run_op("Split", &[], &[Some(&x)], 2).is_err());
        assert!(run_op("Split", &[], &[Some(&x), Some(&t_i64(&[2], &[2, 2]))], 2).is_err());
    }

    #[test]
    fn concat_expand_tile_range_trilu() {
        let a = t_f32(&[1, 2], &[1., 2.]);
        let b = t_f32(&[2, 2], &[3., 4., 5., 6.]);
        let o = run_op(
            "Concat",
            &[("axis", AttrValue::Int(0))],
            &[Some(&a), Some(&b)],
            1,
        )
        .unwrap();
        assert_eq!(o[0].shape, [3, 2]);
        assert_eq!(o[0].data::<f32>().unwrap(), &[1., 2., 3., 4., 5., 6.]);
        let o = run_op(
            "Expand",
            &[],
            &[Some(&a), Some(&t_i64(&[3], &[2, 1, 1]))],
            1,
        )
        .unwrap();
        assert_eq!(o[0].shape, [2, 1, 2]);
        let o = run_op("Tile", &[], &[Some(&a), Some(&t_i64(&[2], &[2, 1]))], 1).unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[1., 2., 1., 2.]);
        let r = |s: i64, l: i64, d: i64| {
            run_op(
                "Range",
                &[],
                &[
                    Some(&t_i64(&[], &[s])),
                    Some(&t_i64(&[], &[l])),
                    Some(&t_i64(&[], &[d])),
                ],
                1,
            )
        };
        assert_eq!(r(1, 10, 3).unwrap()[0].data::<i64>().unwrap(), &[1, 4, 7]);
        assert_eq!(r(10, 4, -3).unwrap()[0].data::<i64>().unwrap(), &[10, 7]);
        assert_eq!(r(10, 4, 3).unwrap()[0].numel(), 0);
        assert!(r(1, 2, 0).is_err());
        let f = run_op(
            "Range",
            &[],
            &[
                Some(&t_f32(&[], &[0.])),
                Some(&t_f32(&[], &[1.])),
                Some(&t_f32(&[], &[0.25])),
            ],
            1,
        )
        .unwrap();
        assert_eq!(f[0].data::<f32>().unwrap(), &[0., 0.25, 0.5, 0.75]);
        let o = run_op("Trilu", &[("upper", AttrValue::Int(0))], &[Some(&b)], 1).unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[3., 0., 5., 6.]);
    }

    #[test]
    fn transpose_default_reverses() {
        let x = t_f32(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let o = run_op("Transpose", &[], &[Some(&x)], 1).unwrap();
        assert_eq!(o[0].shape, [3, 2]);
        assert_eq!(o[0].data::<f32>().unwrap(), &[1., 4., 2., 5., 3., 6.]);
    }

    /// Split, Trilu and the space/depth moves split the axes their records say and no
    /// other, and each kernel run on the slices its flow gives is exactly the slice of the whole.
    #[test]
    fn movement_flows_match_their_kernels() {
        use crate::ops::testutil::{check_flow, rand_f32};
        for seed in 0..4u64 {
            let x = t_f32(&[3, 4, 4, 6], &rand_f32(288, seed));
            let cuts = [seed as usize * 7 + 1, 2];
            let axis1 = [("axis", AttrValue::Int(1))];
            let sizes = t_i64(&[2], &[1, 3]);
            check_flow("Split", &axis1, &[&x, &sizes], 2, &[0, 2, 3], &cuts).unwrap();
            let k = t_i64(&[], &[seed as i64 - 1]);
            check_flow("Trilu", &[], &[&x, &k], 1, &[0, 1], &cuts).unwrap();
            let b2 = [("blocksize", AttrValue::Int(2))];
            check_flow("SpaceToDepth", &b2, &[&x], 1, &[0], &cuts).unwrap();
            check_flow("DepthToSpace", &b2, &[&x], 1, &[0], &cuts).unwrap();
        }
    }
}
