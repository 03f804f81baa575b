//! Indexing ops: Gather, GatherElements, GatherND, ScatterND, ScatterElements, TopK, NonZero,
//! OneHot, Compress, Unique, TensorScatter.
//!
//! Scratch (bytes): TopK `8 * shape[axis]` (one row's index permutation, counted). Unique
//! `16 * items` (the elements, or the slices along `axis`: a sorting permutation and group
//! labels, counted). Int64 indices are read in place; int32 ones are converted into `8 * |indices|` bytes, and GatherND/ScatterND/
//! ScatterElements hold `8 * (number of index tuples)` offsets, on the ordinary heap (not charged to
//! the run's tensor memory). Others: none.
//!
//! ScatterND and ScatterElements modify a copy of their data ([`OVERWRITE`]), so a plan may run them
//! over the data's own buffer.

use std::cmp::Ordering;

use half::{bf16, f16};
use memplan_ir::DataType;

use super::{
    axis, cast_mut, copy_then, fail, opt, raw, raw_mut, req, scalar_i64, unsupported, OpCtx,
    OpFail, OpFn, OverwriteFn,
};
use crate::kernels::index as ix;
use crate::kernels::topk::topk;
use crate::tensor::{elem_size, Tensor};

/// Ops whose output 0 is input 0 modified (see [`super::OverwriteFn`]).
pub const OVERWRITE: &[(&str, OverwriteFn)] = &[
    ("ScatterND", scatter_nd_over),
    ("ScatterElements", scatter_elements_over),
    ("TensorScatter", tensor_scatter_over),
];

pub const OPS: &[(&str, OpFn)] = &[
    ("Gather", gather),
    ("GatherElements", gather_elements),
    ("GatherND", gather_nd),
    ("ScatterND", scatter_nd),
    ("ScatterElements", scatter_elements),
    ("Scatter", scatter_elements),
    ("TopK", topk_op),
    ("NonZero", nonzero),
    ("OneHot", one_hot),
    ("Compress", compress),
    ("Unique", unique),
    ("TensorScatter", tensor_scatter),
];

/// Index values as i64: borrowed for i64 tensors (no copy that grows with the indices), converted
/// for i32.
fn indices(t: &Tensor) -> Result<std::borrow::Cow<'_, [i64]>, OpFail> {
    match t.dtype {
        DataType::I64 => Ok(std::borrow::Cow::Borrowed(t.data::<i64>()?)),
        DataType::I32 => Ok(std::borrow::Cow::Owned(t.to_i64_vec()?)),
        d => fail(format!("indices must be int32 or int64, got {d}")),
    }
}

fn gather(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, it) = (req(inputs, 0)?, req(inputs, 1)?);
    let a = axis(ctx.int("axis", 0)?, x.rank())?;
    let idx = indices(it)?;
    let mut oshape = x.shape[..a].to_vec();
    oshape.extend(&it.shape);
    oshape.extend(&x.shape[a + 1..]);
    // Every element is written (or the kernel fails before writing any).
    let mut out = ctx.alloc_for_overwrite(x.dtype, &oshape)?;
    by_size!(elem_size(x.dtype)?, T => ix::gather(raw::<T>(x)?, &x.shape, a, &idx, raw_mut::<T>(&mut out)?)?);
    Ok(vec![out])
}

fn gather_elements(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, it) = (req(inputs, 0)?, req(inputs, 1)?);
    let a = axis(ctx.int("axis", 0)?, x.rank())?;
    // Every element is written (or the kernel fails before writing any).
    let mut out = ctx.alloc_for_overwrite(x.dtype, &it.shape)?;
    match it.dtype {
        DataType::I64 => {
            let idx = it.data::<i64>()?;
            by_size!(elem_size(x.dtype)?, T => ix::gather_elements(raw::<T>(x)?, &x.shape, a, idx, &it.shape, raw_mut::<T>(&mut out)?)?);
        }
        DataType::I32 => {
            let idx = it.data::<i32>()?;
            by_size!(elem_size(x.dtype)?, T => ix::gather_elements(raw::<T>(x)?, &x.shape, a, idx, &it.shape, raw_mut::<T>(&mut out)?)?);
        }
        d => return fail(format!("indices must be int32 or int64, got {d}")),
    }
    Ok(vec![out])
}

fn gather_nd(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, it) = (req(inputs, 0)?, req(inputs, 1)?);
    let b = usize::try_from(ctx.int("batch_dims", 0)?)
        .map_err(|_| OpFail::Invalid("batch_dims < 0".into()))?;
    let idx = indices(it)?;
    let (offs, block) = ix::nd_offsets(&x.shape, &idx, &it.shape, b)?;
    let q = it.shape[it.rank() - 1];
    let mut oshape = it.shape[..it.rank() - 1].to_vec();
    oshape.extend(&x.shape[b + q..]);
    let mut out = ctx.alloc(x.dtype, &oshape)?;
    by_size!(elem_size(x.dtype)?, T => ix::gather_blocks(raw::<T>(x)?, &offs, block, raw_mut::<T>(&mut out)?)?);
    Ok(vec![out])
}

fn reduction(ctx: &OpCtx) -> Result<ix::ScatterReduce, OpFail> {
    Ok(match ctx.string("reduction")?.as_deref() {
        None | Some("none") => ix::ScatterReduce::None,
        Some("add") => ix::ScatterReduce::Add,
        Some("mul") => ix::ScatterReduce::Mul,
        Some("max") => ix::ScatterReduce::Max,
        Some("min") => ix::ScatterReduce::Min,
        Some(r) => return fail(format!("unknown reduction '{r}'")),
    })
}

/// Applies updates at element offsets with a reduction, over `out` (which holds the data).
fn scatter_apply(
    ctx: &OpCtx,
    x: &Tensor,
    upd: &Tensor,
    offs: &[usize],
    block: usize,
    out: &mut [u8],
) -> Result<(), OpFail> {
    if upd.dtype != x.dtype {
        return fail(format!("updates are {} but data is {}", upd.dtype, x.dtype));
    }
    let red = reduction(ctx)?;
    if red == ix::ScatterReduce::None {
        by_size!(elem_size(x.dtype)?, T => ix::scatter_blocks(cast_mut::<T>(out)?, offs, block, raw::<T>(upd)?, |_, v| v)?);
        return Ok(());
    }
    macro_rules! go {
        ($T:ty, $add:expr, $mul:expr) => {{
            let f: fn($T, $T) -> $T = match red {
                ix::ScatterReduce::Add => $add,
                ix::ScatterReduce::Mul => $mul,
                ix::ScatterReduce::Max => |a, b| if b > a { b } else { a },
                _ => |a, b| if b < a { b } else { a },
            };
            ix::scatter_blocks(cast_mut::<$T>(out)?, offs, block, upd.data::<$T>()?, f)?
        }};
    }
    match x.dtype {
        DataType::F32 => go!(f32, |a, b| a + b, |a, b| a * b),
        DataType::F64 => go!(f64, |a, b| a + b, |a, b| a * b),
        DataType::I32 => go!(i32, i32::wrapping_add, i32::wrapping_mul),
        DataType::I64 => go!(i64, i64::wrapping_add, i64::wrapping_mul),
        DataType::F16 => go!(
            f16,
            |a, b| f16::from_f32(a.to_f32() + b.to_f32()),
            |a, b| f16::from_f32(a.to_f32() * b.to_f32())
        ),
        DataType::BF16 => go!(
            bf16,
            |a, b| bf16::from_f32(a.to_f32() + b.to_f32()),
            |a, b| bf16::from_f32(a.to_f32() * b.to_f32())
        ),
        d => return unsupported(format!("scatter reduction on {d}")),
    }
    Ok(())
}

fn scatter_nd(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    copy_then(ctx, inputs, scatter_nd_over)
}

fn scatter_nd_over(ctx: &OpCtx, inputs: &[Option<&Tensor>], out: &mut [u8]) -> Result<(), OpFail> {
    let (x, it, upd) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    let idx = indices(it)?;
    let (offs, block) = ix::nd_offsets(&x.shape, &idx, &it.shape, 0)?;
    let q = it.shape[it.rank() - 1];
    let mut want = it.shape[..it.rank() - 1].to_vec();
    want.extend(&x.shape[q..]);
    if upd.shape != want {
        return fail(format!(
            "ScatterND updates {:?} should be {want:?}",
            upd.shape
        ));
    }
    scatter_apply(ctx, x, upd, &offs, block, out)
}

fn scatter_elements(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    copy_then(ctx, inputs, scatter_elements_over)
}

fn scatter_elements_over(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    out: &mut [u8],
) -> Result<(), OpFail> {
    let (x, it, upd) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    if upd.shape != it.shape {
        return fail(format!(
            "ScatterElements updates {:?} differ from indices {:?}",
            upd.shape, it.shape
        ));
    }
    let a = axis(ctx.int("axis", 0)?, x.rank())?;
    let offs = ix::elements_offsets(&x.shape, a, &indices(it)?, &it.shape)?;
    scatter_apply(ctx, x, upd, &offs, 1, out)
}

fn topk_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let k = if ctx.opset < 10 {
        ctx.int("k", 0)?
    } else {
        scalar_i64(req(inputs, 1)?, "TopK K")?
    };
    let k = usize::try_from(k).map_err(|_| OpFail::Invalid(format!("TopK k = {k} is negative")))?;
    let a = axis(ctx.int("axis", -1)?, x.rank())?;
    let largest = ctx.int("largest", 1)? != 0;
    if k > x.shape[a] {
        return fail(format!(
            "TopK k = {k} exceeds the axis length {}",
            x.shape[a]
        ));
    }
    let mut oshape = x.shape.clone();
    oshape[a] = k;
    let mut vals = ctx.alloc(x.dtype, &oshape)?;
    let mut idx = ctx.alloc(DataType::I64, &oshape)?;
    let mut scratch = ctx.scratch::<u64>(x.shape[a])?;
    let s: &mut [usize] = bytemuck::cast_slice_mut(scratch.as_mut_slice());
    macro_rules! go {
        ($T:ty, $nan:expr) => {
            topk::<$T>(
                x.data()?,
                &x.shape,
                a,
                k,
                largest,
                $nan,
                vals.data_mut()?,
                idx.data_mut()?,
                s,
            )?
        };
    }
    match x.dtype {
        DataType::F32 => go!(f32, |v: &f32| v.is_nan()),
        DataType::F64 => go!(f64, |v: &f64| v.is_nan()),
        DataType::F16 => go!(f16, |v: &f16| v.is_nan()),
        DataType::BF16 => go!(bf16, |v: &bf16| v.is_nan()),
        DataType::I32 => go!(i32, |_: &i32| false),
        DataType::I64 => go!(i64, |_: &i64| false),
        DataType::U8 => go!(u8, |_: &u8| false),
        DataType::I8 => go!(i8, |_: &i8| false),
        DataType::I16 => go!(i16, |_: &i16| false),
        DataType::U16 => go!(u16, |_: &u16| false),
        DataType::U32 => go!(u32, |_: &u32| false),
        DataType::U64 => go!(u64, |_: &u64| false),
        d => return unsupported(format!("TopK on {d}")),
    }
    Ok(vec![vals, idx])
}

fn nonzero(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    // Floats compare as numbers (-0.0 is zero); everything else by its bits.
    let (n, coords) = match x.dtype {
        DataType::F32 => ix::nonzero(x.data::<f32>()?, &x.shape)?,
        DataType::F64 => ix::nonzero(x.data::<f64>()?, &x.shape)?,
        DataType::F16 => ix::nonzero(x.data::<f16>()?, &x.shape)?,
        DataType::BF16 => ix::nonzero(x.data::<bf16>()?, &x.shape)?,
        d => by_size!(elem_size(d)?, T => ix::nonzero(raw::<T>(x)?, &x.shape)?),
    };
    Ok(vec![ctx.from_vec::<i64>(&[x.rank().max(1), n], &coords)?])
}

/// OneHot: `values[1]` where the index (negative ones counted from `depth`) equals the position
/// along the new axis, `values[0]` elsewhere; indices may be of any numeric type.
fn one_hot(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (ind, dt, vals) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    let read = super::quant::reader(ind.dtype)?;
    if dt.numel() != 1 {
        return fail(format!("depth must hold one element, has {}", dt.numel()));
    }
    let depth = super::quant::reader(dt.dtype)?(dt.bytes(), 0).trunc();
    if !(depth >= 1.0 && depth <= (1u64 << 40) as f64) {
        return fail(format!("depth {depth} must be positive"));
    }
    let depth = depth as usize;
    if vals.numel() != 2 {
        return fail(format!(
            "values must hold [off, on], has {} elements",
            vals.numel()
        ));
    }
    let r = ind.rank() as i64;
    let a = ctx.int("axis", -1)?;
    let a = if a < 0 { a + r + 1 } else { a };
    if !(0..=r).contains(&a) {
        return fail(format!("axis {a} is out of range for rank {}", r + 1));
    }
    let a = a as usize;
    let mut oshape = ind.shape.clone();
    oshape.insert(a, depth);
    let inner: usize = ind.shape[a..].iter().product();
    let mut out = ctx.alloc_for_overwrite(vals.dtype, &oshape)?;
    let ib = ind.bytes();
    // Every element is `off` but the one per index whose position along the new axis equals it:
    // filled with `off`, then `on` written where an index points (an index that is not a whole
    // number in range points nowhere). The same elements hold the same values in any order.
    by_size!(elem_size(vals.dtype)?, T => {
        let v = raw::<T>(vals)?;
        let (off, on) = (v[0], v[1]);
        let o = raw_mut::<T>(&mut out)?;
        o.fill(off);
        for k in 0..ind.numel() {
            let mut x = read(ib, k);
            if x < 0.0 {
                x += depth as f64;
            }
            if x >= 0.0 && x < depth as f64 && x.fract() == 0.0 {
                let (outer, i) = (k / inner, k % inner);
                o[(outer * depth + x as usize) * inner + i] = on;
            }
        }
    });
    Ok(vec![out])
}

/// Compress: the entries along `axis` (of the flattened input without one) whose condition is
/// true; a condition shorter than the axis drops the rest.
fn compress(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, c) = (req(inputs, 0)?, req(inputs, 1)?);
    if c.dtype != DataType::Bool || c.rank() != 1 {
        return fail(format!(
            "condition must be a 1-D bool tensor, got {} {:?}",
            c.dtype, c.shape
        ));
    }
    let cond = c.data::<u8>()?;
    let (a, outer, d, inner) = match ctx.opt_int("axis")? {
        Some(a) => {
            let a = axis(a, x.rank())?;
            let outer: usize = x.shape[..a].iter().product();
            (
                Some(a),
                outer,
                x.shape[a],
                x.shape[a + 1..].iter().product(),
            )
        }
        None => (None, 1, x.numel(), 1),
    };
    if cond.iter().skip(d).any(|&v| v != 0) {
        return fail(format!(
            "condition selects entry beyond the axis extent {d}"
        ));
    }
    let kept = cond.iter().take(d).filter(|&&v| v != 0).count();
    let oshape = match a {
        Some(a) => {
            let mut s = x.shape.clone();
            s[a] = kept;
            s
        }
        None => vec![kept],
    };
    let mut out = ctx.alloc_for_overwrite(x.dtype, &oshape)?;
    by_size!(elem_size(x.dtype)?, T => {
        let (src, o) = (raw::<T>(x)?, raw_mut::<T>(&mut out)?);
        let mut at = 0;
        for b in 0..outer {
            for (j, _) in cond.iter().take(d).enumerate().filter(|&(_, &v)| v != 0) {
                let from = (b * d + j) * inner;
                o[at..at + inner].copy_from_slice(&src[from..from + inner]);
                at += inner;
            }
        }
    });
    Ok(vec![out])
}

/// Compares elements `i` and `j` of `x` as numbers (floats: -0 equals 0, NaN after everything and
/// equal to NaN).
fn element_order(x: &Tensor) -> Result<Box<dyn Fn(usize, usize) -> Ordering + '_>, OpFail> {
    let b = x.bytes();
    Ok(match x.dtype {
        DataType::I64 => {
            let v = x.data::<i64>()?;
            Box::new(move |i, j| v[i].cmp(&v[j]))
        }
        DataType::U64 => {
            let v = x.data::<u64>()?;
            Box::new(move |i, j| v[i].cmp(&v[j]))
        }
        d => {
            let read = super::quant::reader(d)?;
            Box::new(move |i, j| {
                let (p, q) = (read(b, i), read(b, j));
                p.partial_cmp(&q)
                    .unwrap_or_else(|| p.is_nan().cmp(&q.is_nan()))
            })
        }
    })
}

/// Unique: the distinct elements (or slices along `axis`), sorted (`sorted = 1`, the default) or
/// in order of first occurrence, with the first occurrence of each, each input item's unique
/// index and the counts. Items are sorted by an index permutation (ties by position) and labelled
/// by group in two counted `u64` arrays of one entry per item.
fn unique(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let (a, outer, d, inner) = match ctx.opt_int("axis")? {
        Some(a) => {
            let a = axis(a, x.rank())?;
            let outer: usize = x.shape[..a].iter().product();
            (
                Some(a),
                outer,
                x.shape[a],
                x.shape[a + 1..].iter().product(),
            )
        }
        None => (None, 1, x.numel(), 1),
    };
    let sorted = ctx.int("sorted", 1)? != 0;
    let ecmp = element_order(x)?;
    // Items compare lexicographically over their elements in row-major order.
    let icmp = |p: usize, q: usize| -> Ordering {
        for b in 0..outer {
            for k in 0..inner {
                let o = ecmp((b * d + p) * inner + k, (b * d + q) * inner + k);
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
        Ordering::Equal
    };
    let mut perm = ctx.scratch::<u64>(d)?;
    let mut group = ctx.scratch::<u64>(d)?;
    let (perm, group) = (perm.as_mut_slice(), group.as_mut_slice());
    for (i, p) in perm.iter_mut().enumerate() {
        *p = i as u64;
    }
    perm.sort_unstable_by(|&p, &q| icmp(p as usize, q as usize).then(p.cmp(&q)));
    // perm[..u] becomes the first occurrence of each distinct item, in sorted order (each run's
    // first entry has the smallest position); writes stay at or before the entry being read.
    let mut u = 0usize;
    let mut prev: Option<usize> = None;
    for j in 0..d {
        let it = perm[j] as usize;
        if prev.is_none_or(|p| icmp(p, it) != Ordering::Equal) {
            perm[u] = it as u64;
            u += 1;
        }
        group[it] = (u - 1) as u64;
        prev = Some(it);
    }
    let mut yshape = match a {
        Some(_) => x.shape.clone(),
        None => vec![0],
    };
    yshape[a.unwrap_or(0)] = u;
    let mut y = ctx.alloc_for_overwrite(x.dtype, &yshape)?;
    let mut first = ctx.alloc_for_overwrite(DataType::I64, &[u])?;
    let mut inverse = ctx.alloc_for_overwrite(DataType::I64, &[d])?;
    let mut counts = ctx.alloc(DataType::I64, &[u])?;
    {
        let (f, inv, cnt) = (
            first.data_mut::<i64>()?,
            inverse.data_mut::<i64>()?,
            counts.data_mut::<i64>()?,
        );
        // Unsorted: labels in order of first occurrence, marked in perm by the high bit.
        const MARK: u64 = 1 << 63;
        let mut next = 0usize;
        for i in 0..d {
            let g = group[i] as usize;
            let label = if sorted {
                f[g] = perm[g] as i64;
                g
            } else {
                if perm[g] & MARK == 0 {
                    perm[g] = MARK | next as u64;
                    f[next] = i as i64;
                    next += 1;
                }
                (perm[g] & !MARK) as usize
            };
            inv[i] = label as i64;
            cnt[label] += 1;
        }
    }
    let f = first.data::<i64>()?;
    by_size!(elem_size(x.dtype)?, T => {
        let (src, o) = (raw::<T>(x)?, raw_mut::<T>(&mut y)?);
        for b in 0..outer {
            for (l, &s) in f.iter().enumerate() {
                let (to, from) = ((b * u + l) * inner, (b * d + s as usize) * inner);
                o[to..to + inner].copy_from_slice(&src[from..from + inner]);
            }
        }
    });
    Ok(vec![y, first, inverse, counts])
}

fn tensor_scatter(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    copy_then(ctx, inputs, tensor_scatter_over)
}

/// TensorScatter over `out`, which holds the cache: batch entry `b`'s update steps are written
/// along `axis` from `write_indices[b]` (default 0), wrapping around with `mode = circular`.
fn tensor_scatter_over(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    out: &mut [u8],
) -> Result<(), OpFail> {
    let (cache, upd) = (req(inputs, 0)?, req(inputs, 1)?);
    let r = cache.rank();
    let a = axis(ctx.int("axis", -2)?, r)?;
    if a == 0 {
        return fail("TensorScatter's axis must not be the batch axis 0");
    }
    let circular = match ctx.string("mode")?.as_deref() {
        None | Some("linear") => false,
        Some("circular") => true,
        Some(m) => return fail(format!("unknown mode '{m}'")),
    };
    if upd.dtype != cache.dtype
        || upd.rank() != r
        || (0..r).any(|i| i != a && upd.shape[i] != cache.shape[i])
        || upd.shape[a] > cache.shape[a]
    {
        return fail(format!(
            "update {} {:?} does not fit the cache {} {:?} along axis {a}",
            upd.dtype, upd.shape, cache.dtype, cache.shape
        ));
    }
    let nb = cache.shape[0];
    let starts = match opt(inputs, 2) {
        Some(t) => indices(t)?.into_owned(),
        None => vec![0; nb],
    };
    if starts.len() != nb {
        return fail(format!(
            "write_indices has {} entries for a batch of {nb}",
            starts.len()
        ));
    }
    let (len, steps) = (cache.shape[a] as i64, upd.shape[a]);
    let outer: usize = cache.shape[..a].iter().product();
    let per_batch = outer / nb.max(1);
    let inner: usize = cache.shape[a + 1..].iter().product();
    by_size!(elem_size(cache.dtype)?, T => {
        let (u, o) = (raw::<T>(upd)?, cast_mut::<T>(out)?);
        for b in 0..outer {
            let w = starts[b / per_batch.max(1)];
            for s in 0..steps {
                let mut t = w + s as i64;
                if circular {
                    t = t.rem_euclid(len);
                }
                if t < 0 || t >= len {
                    return fail(format!("write position {t} is outside 0..{len}"));
                }
                let (to, from) = ((b * len as usize + t as usize) * inner, (b * steps + s) * inner);
                o[to..to + inner].copy_from_slice(&u[from..from + inner]);
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::ops::testutil::*;
    use memplan_ir::graph::AttrValue;
    use proptest::prelude::*;

    #[test]
    fn one_hot_passes_the_axes_of_its_indices() {
        let idx = t_i64(&[4, 3], &[0, 2, -1, 1, 3, 0, 2, 2, 1, -4, 0, 3]);
        let (depth, vals) = (t_i64(&[1], &[4]), t_f32(&[2], &[0.5, 2.0]));
        let ins = [&idx, &depth, &vals];
        // The new axis last: the indices' two axes split, the depth axis is mixed.
        check_flow("OneHot", &[], &ins, 1, &[0, 1], &[1, 2]).unwrap();
        // The new axis first: the indices' axes are the output's axes 1 and 2.
        let first = [("axis", AttrValue::Int(0))];
        check_flow("OneHot", &first, &ins, 1, &[1, 2], &[1, 2]).unwrap();
    }

    /// Float indices along a middle axis: a whole number in range (negative ones counted from the
    /// depth) puts `on` at its position; a fraction, one out of range or NaN puts it nowhere.
    #[test]
    fn one_hot_of_float_indices_along_a_middle_axis() {
        let idx = t_f32(&[2, 3], &[0.0, 2.0, -1.0, 1.5, 3.0, f32::NAN]);
        let (depth, vals) = (t_i64(&[1], &[3]), t_f32(&[2], &[0.5, 2.0]));
        let o = run_op(
            "OneHot",
            &[("axis", AttrValue::Int(1))],
            &[Some(&idx), Some(&depth), Some(&vals)],
            1,
        )
        .unwrap();
        assert_eq!(o[0].shape, [2, 3, 3]);
        #[rustfmt::skip]
        let want = [
            2.0, 0.5, 0.5, // depth 0: index 0
            0.5, 0.5, 0.5,
            0.5, 2.0, 2.0, // depth 2: indices 2 and -1
            0.5, 0.5, 0.5, // 1.5, 3 and NaN: nowhere
            0.5, 0.5, 0.5,
            0.5, 0.5, 0.5,
        ];
        assert_eq!(o[0].data::<f32>().unwrap(), &want);
    }

    #[test]
    fn gather_and_topk_ops() {
        let x = t_f32(&[3, 2], &[1., 2., 3., 4., 5., 6.]);
        let o = run_op(
            "Gather",
            &[],
            &[Some(&x), Some(&t_i64(&[2, 1], &[-1, 0]))],
            1,
        )
        .unwrap();
        assert_eq!(o[0].shape, [2, 1, 2]);
        assert_eq!(o[0].data::<f32>().unwrap(), &[5., 6., 1., 2.]);
        assert!(run_op("Gather", &[], &[Some(&x), Some(&t_i64(&[1], &[3]))], 1).is_err());
        let o = run_op(
            "TopK",
            &[],
            &[
                Some(&t_f32(&[4], &[1., 4., 4., 2.])),
                Some(&t_i64(&[1], &[2])),
            ],
            2,
        )
        .unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[4., 4.]);
        assert_eq!(o[1].data::<i64>().unwrap(), &[1, 2]);
        let o = run_op(
            "TopK",
            &[("axis", AttrValue::Int(0)), ("largest", AttrValue::Int(0))],
            &[Some(&x), Some(&t_i64(&[1], &[1]))],
            2,
        )
        .unwrap();
        assert_eq!(o[1].data::<i64>().unwrap(), &[0, 0]);
        let o = run_op(
            "GatherND",
            &[],
            &[Some(&x), Some(&t_i64(&[2, 2], &[2, 1, 0, 0]))],
            1,
        )
        .unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[6., 1.]);
        let o = run_op(
            "GatherElements",
            &[("axis", AttrValue::Int(1))],
            &[Some(&x), Some(&t_i64(&[3, 1], &[1, 0, 1]))],
            1,
        )
        .unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[2., 3., 6.]);
        let o = run_op(
            "ScatterND",
            &[("reduction", AttrValue::String(b"add".to_vec()))],
            &[
                Some(&x),
                Some(&t_i64(&[2, 1], &[0, 0])),
                Some(&t_f32(&[2, 2], &[1., 1., 1., 1.])),
            ],
            1,
        )
        .unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[3., 4., 3., 4., 5., 6.]);
        let o = run_op(
            "ScatterElements",
            &[("axis", AttrValue::Int(1))],
            &[
                Some(&x),
                Some(&t_i64(&[1, 1], &[1])),
                Some(&t_f32(&[1, 1], &[9.])),
            ],
            1,
        )
        .unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[1., 9., 3., 4., 5., 6.]);
        let o = run_op("NonZero", &[], &[Some(&t_f32(&[3], &[0., -0., 2.]))], 1).unwrap();
        assert_eq!(o[0].data::<i64>().unwrap(), &[2]);
    }

    proptest! {
        #[test]
        fn index_chunk_identity(
            rows in 1usize..6, n in 1usize..30, k_pick in any::<usize>(), seed in any::<u64>(),
            cuts in prop::collection::vec(any::<usize>(), 0..4),
        ) {
            // Few distinct values so that ties are common.
            let v: Vec<f32> = rand_f32(rows * n, seed).iter().map(|x| (x * 2.0).round()).collect();
            let x = t_f32(&[rows, n], &v);
            let k = t_i64(&[1], &[(k_pick % n + 1) as i64]);
            check_chunks("TopK", &[], &[&x, &k], &[Some(0), None], 0, &cuts).unwrap();
            let idx = t_i64(&[3], &[0, (n - 1) as i64, -1]);
            check_chunks("Gather", &[("axis", AttrValue::Int(1))], &[&x, &idx], &[Some(0), None], 0, &cuts).unwrap();
            // GatherElements along either axis, chunked along each output axis as its record's
            // flow says: along the gather axis, the indices' slices over the data read whole.
            let m = (k_pick % n + 1).min(n);
            let picks: Vec<i64> = (0..rows * m).map(|i| ((i * 7).wrapping_add(seed as usize) % n) as i64).collect();
            let along_cols = t_i64(&[rows, m], &picks);
            let picks: Vec<i64> = (0..rows * n).map(|i| ((i * 5).wrapping_add(seed as usize) % rows) as i64).collect();
            let along_rows = t_i64(&[rows, n], &picks);
            for (axis, idx) in [(1, &along_cols), (0, &along_rows)] {
                let attrs = [("axis", AttrValue::Int(axis))];
                for out_axis in 0..2 {
                    let axes = flow_axes("GatherElements", &attrs, &[&x, idx], out_axis).unwrap();
                    if out_axis == axis as usize {
                        prop_assert_eq!(&axes, &vec![None, Some(out_axis)]);
                    }
                    check_chunks("GatherElements", &attrs, &[&x, idx], &axes, out_axis, &cuts).unwrap();
                }
            }
            // ScatterND of whole rows (repeated rows among them, so the order of updates shows),
            // chunked along the columns as its record's flow says; the rows are mixed.
            let k = k_pick % 4 + 1;
            let at: Vec<i64> = (0..k).map(|i| ((i * 3).wrapping_add(seed as usize) % rows) as i64).collect();
            let at = t_i64(&[k, 1], &at);
            let upd = t_f32(&[k, n], &rand_f32(k * n, seed ^ 7));
            for red in ["none", "add", "max"] {
                let attrs = [("reduction", AttrValue::String(red.as_bytes().to_vec()))];
                prop_assert!(flow_axes("ScatterND", &attrs, &[&x, &at, &upd], 0).is_none());
                let axes = flow_axes("ScatterND", &attrs, &[&x, &at, &upd], 1).unwrap();
                prop_assert_eq!(&axes, &vec![Some(1), None, Some(1)]);
                check_chunks("ScatterND", &attrs, &[&x, &at, &upd], &axes, 1, &cuts).unwrap();
            }
        }
    }
}
