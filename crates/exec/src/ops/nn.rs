//! Neural-network ops: Conv, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool,
//! BatchNormalization (inference), InstanceNormalization, Dropout (training mode draws its mask from
//! the counter-based generator of `kernels::random`).
//!
//! Scratch (bytes, `e` = element size; f16/bf16 compute in f32 with `e = 4`):
//! - Conv: `e * C/group * prod(kernel) * prod(out spatial)` (im2col, one buffer reused by every
//!   (batch, group) pair), none for a 1x1 stride-1 unpadded kernel. f16/bf16 add `4 * (|X|+|W|+|B|+|Y|)`.
//! - Pools, BatchNormalization, InstanceNormalization: none for f32/f64; f16/bf16 add
//!   `4 * (sum of |inputs| + |Y|)`.
//! - Dropout: none.

use half::{bf16, f16};
use memplan_ir::DataType;

use super::linalg::{narrow, widen};
use super::{fail, opt, req, unsupported, OpCtx, OpFail, OpFn};
use crate::kernels::conv::{conv_col_len, conv_with_col, resolve_pads, AutoPad, ConvAttrs};
use crate::kernels::norm::{batch_norm, check_batch_norm_training, instance_norm};
use crate::kernels::pool::{
    average_pool, global_average_pool, global_lp_pool, global_max_pool, global_pool_out_shape,
    lp_pool, max_pool, max_pool_indices, pool_out_shape, PoolAttrs,
};
use crate::mem::ScratchBuf;
use crate::tensor::Tensor;

pub const OPS: &[(&str, OpFn)] = &[
    ("Conv", conv),
    ("MaxPool", pool),
    ("AveragePool", pool),
    ("GlobalAveragePool", global_pool),
    ("GlobalMaxPool", global_pool),
    ("LpPool", pool),
    ("GlobalLpPool", global_pool),
    ("BatchNormalization", batch_norm_op),
    ("InstanceNormalization", instance_norm_op),
    ("Dropout", dropout),
    ("GroupNormalization", group_norm_op),
    ("LpNormalization", scalar_norm_op),
    ("LRN", scalar_norm_op),
    ("MeanVarianceNormalization", scalar_norm_op),
    ("Swish", scalar_norm_op),
    ("ConvTranspose", conv_transpose_op),
    ("Col2Im", col2im_op),
    ("MaxUnpool", max_unpool),
    ("DeformConv", deform_conv),
];

/// DeformConv (2-D): `Y[n, m, i, j] = B[m] + sum over the input channels c of m's group and the
/// taps (a, b) of W[m, c, a, b] * mask * X[n, c] sampled bilinearly (zeros outside) at
/// `(i*s_h - pad_top + a*d_h + dy, j*s_w - pad_left + b*d_w + dx)`, with `(dy, dx)` and the mask
/// (default 1) from the tap's offset group. Per output in f64, no scratch.
fn deform_conv(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, w, off) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    let (b, mask) = (opt(inputs, 3), opt(inputs, 4));
    if x.rank() != 4 || w.rank() != 4 {
        return unsupported(format!(
            "DeformConv other than 2-D: X {:?}, W {:?}",
            x.shape, w.shape
        ));
    }
    let (n, c, ih, iw) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let (m, cg, kh, kw) = (w.shape[0], w.shape[1], w.shape[2], w.shape[3]);
    let group = usize::try_from(ctx.int("group", 1)?).unwrap_or(0);
    let og = usize::try_from(ctx.int("offset_group", 1)?).unwrap_or(0);
    if group == 0 || og == 0 || c != cg * group || m % group != 0 || c % og != 0 {
        return fail(format!(
            "group {group} / offset_group {og} do not fit C = {c}, W {:?}",
            w.shape
        ));
    }
    let strides = per_axis(ctx, "strides", 2, 1)?;
    let dil = per_axis(ctx, "dilations", 2, 1)?;
    let pads = per_axis(ctx, "pads", 4, 0)?;
    if strides.iter().chain(&dil).any(|&v| v == 0) {
        return fail("strides and dilations must be >= 1");
    }
    let out_dim = |i: usize, k: usize, a: usize| -> Result<usize, OpFail> {
        let span = i + pads[a] + pads[a + 2];
        let ek = (k - 1) * dil[a] + 1;
        span.checked_sub(ek)
            .map(|r| r / strides[a] + 1)
            .ok_or_else(|| OpFail::Invalid("the kernel does not fit the padded input".into()))
    };
    let (oh, ow) = (out_dim(ih, kh, 0)?, out_dim(iw, kw, 1)?);
    let k = kh * kw;
    if off.shape != [n, og * 2 * k, oh, ow] {
        return fail(format!(
            "offset {:?} must be [{n}, {}, {oh}, {ow}]",
            off.shape,
            og * 2 * k
        ));
    }
    if let Some(mk) = mask {
        if mk.shape != [n, og * k, oh, ow] {
            return fail(format!(
                "mask {:?} must be [{n}, {}, {oh}, {ow}]",
                mk.shape,
                og * k
            ));
        }
    }
    if b.is_some_and(|b| b.shape != [m]) {
        return fail(format!("B must be [{m}]"));
    }
    if [Some(w), Some(off), b, mask]
        .iter()
        .flatten()
        .any(|t| t.dtype != x.dtype)
    {
        return fail("all DeformConv inputs must share X's type");
    }
    let mg = m / group;
    let opl = oh * ow;
    let mut out = ctx.alloc_for_overwrite(x.dtype, &[n, m, oh, ow])?;
    crate::real_dispatch!(
        x.dtype,
        T => {
            use crate::kernels::real::Real;
            let (xs, ws, os) = (x.data::<T>()?, w.data::<T>()?, off.data::<T>()?);
            let bs = match b {
                Some(b) => Some(b.data::<T>()?),
                None => None,
            };
            let ms = match mask {
                Some(t) => Some(t.data::<T>()?),
                None => None,
            };
            let y = out.data_mut::<T>()?;
            let sample = |plane: &[T], py: f64, px: f64| -> f64 {
                if !(py > -1.0 && py < ih as f64 && px > -1.0 && px < iw as f64) {
                    return 0.0;
                }
                let (y0, x0) = (py.floor(), px.floor());
                let (ly, lx) = (py - y0, px - x0);
                let mut s = 0.0;
                for (dy, wy) in [(0.0, 1.0 - ly), (1.0, ly)] {
                    for (dx, wx) in [(0.0, 1.0 - lx), (1.0, lx)] {
                        let (yy, xx) = (y0 + dy, x0 + dx);
                        if yy >= 0.0 && yy < ih as f64 && xx >= 0.0 && xx < iw as f64 {
                            s += wy * wx * plane[yy as usize * iw + xx as usize].get();
                        }
                    }
                }
                s
            };
            for bn in 0..n {
                for mo in 0..m {
                    let g = mo / mg;
                    for i in 0..oh {
                        for j in 0..ow {
                            let mut acc = bs.map_or(0.0, |b| b[mo].get());
                            for cl in 0..cg {
                                let ci = g * cg + cl;
                                let gi = ci / (c / og);
                                let plane = &xs[(bn * c + ci) * ih * iw..(bn * c + ci + 1) * ih * iw];
                                for a in 0..kh {
                                    for bb in 0..kw {
                                        let t = a * kw + bb;
                                        let at = |ch: usize| (bn * (os.len() / n / opl) + ch) * opl + i * ow + j;
                                        let dy = os[at((gi * k + t) * 2)].get();
                                        let dx = os[at((gi * k + t) * 2 + 1)].get();
                                        let mv = ms.map_or(1.0, |ms| {
                                            ms[(bn * og * k + gi * k + t) * opl + i * ow + j].get()
                                        });
                                        let py = (i * strides[0] + a * dil[0]) as f64 - pads[0] as f64 + dy;
                                        let px = (j * strides[1] + bb * dil[1]) as f64 - pads[1] as f64 + dx;
                                        let wv = ws[((mo * cg + cl) * kh + a) * kw + bb].get();
                                        acc += wv * mv * sample(plane, py, px);
                                    }
                                }
                            }
                            y[(bn * m + mo) * opl + i * ow + j] = T::put(acc);
                        }
                    }
                }
            }
        },
        return unsupported(format!("DeformConv on {}", x.dtype))
    );
    Ok(vec![out])
}

/// MaxUnpool: zeros of `output_shape` (input 2) or of the unpooled shape `[N, C, (in - 1) *
/// stride + kernel - pads]`, with `Y[I[j]] = X[j]`. The indices `I` are flat positions in the
/// unpooled shape (as MaxPool's indices are); an `output_shape` at least as large in every dim
/// holds the unpooled tensor at its origin (the ONNX reference). Moves element bits, no scratch.
fn max_unpool(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, ind) = (req(inputs, 0)?, req(inputs, 1)?);
    if x.rank() < 3 || ind.shape != x.shape {
        return fail(format!(
            "MaxUnpool needs X [N,C,D..] and I of its shape, got {:?} / {:?}",
            x.shape, ind.shape
        ));
    }
    let nd = x.rank() - 2;
    let kernel = per_axis(ctx, "kernel_shape", nd, 0)?;
    let strides = per_axis(ctx, "strides", nd, 1)?;
    let pads = per_axis(ctx, "pads", 2 * nd, 0)?;
    let mut unpooled = x.shape[..2].to_vec();
    for a in 0..nd {
        let full = (x.shape[a + 2].max(1) - 1) * strides[a] + kernel[a];
        unpooled.push(
            full.checked_sub(pads[a] + pads[a + nd])
                .ok_or_else(|| OpFail::Invalid("pads exceed the unpooled extent".into()))?,
        );
    }
    let yshape = match opt(inputs, 2) {
        Some(s) => super::dims_of(s, "output_shape")?,
        None => unpooled.clone(),
    };
    if yshape.len() != x.rank() || yshape.iter().zip(&unpooled).any(|(y, u)| y < u) {
        return fail(format!(
            "output_shape {yshape:?} must have rank {} and hold the unpooled shape {unpooled:?}",
            x.rank()
        ));
    }
    if ind.dtype != DataType::I64 {
        return fail(format!("I must be int64, got {}", ind.dtype));
    }
    let total: usize = unpooled.iter().product();
    let idx = ind.data::<i64>()?;
    let mut out = ctx.alloc(x.dtype, &yshape)?;
    by_size!(crate::tensor::elem_size(x.dtype)?, T => {
        let (src, dst) = (super::raw::<T>(x)?, super::raw_mut::<T>(&mut out)?);
        for (j, &i) in idx.iter().enumerate() {
            let Some(i) = usize::try_from(i).ok().filter(|&i| i < total) else {
                return fail(format!("index {i} is outside the unpooled {total} elements"));
            };
            dst[reindex(i, &unpooled, &yshape)] = src[j];
        }
    });
    Ok(vec![out])
}

/// The flat position in `to` of the element at flat position `i` of `from` (same rank, `to` at
/// least as large in every dim, `from` at its origin).
fn reindex(i: usize, from: &[usize], to: &[usize]) -> usize {
    if from == to {
        return i;
    }
    let (mut rest, mut at, mut stride) = (i, 0, 1);
    for (&f, &t) in from.iter().zip(to).rev() {
        at += (rest % f) * stride;
        rest /= f;
        stride *= t;
    }
    at
}

/// `name` as one non-negative entry per spatial axis, or `default` everywhere when absent.
fn per_axis(ctx: &OpCtx, name: &str, nd: usize, default: usize) -> Result<Vec<usize>, OpFail> {
    let v = usizes(ctx, name)?;
    if v.is_empty() {
        return Ok(vec![default; nd]);
    }
    if v.len() != nd {
        return fail(format!("'{name}' has {} entries, expected {nd}", v.len()));
    }
    Ok(v)
}

/// The begin pad of ConvTranspose's total padding `total` (the full extent minus the output's,
/// negative when the output is larger): `total / 2` for SAME_UPPER, else `total - total / 2`,
/// rounding down (so an output one larger than the full extent gets its extra position at the end).
fn begin_pad(total: isize, same_upper: bool) -> isize {
    let half = total.div_euclid(2);
    if same_upper {
        half
    } else {
        total - half
    }
}

/// ConvTranspose (any float type, f64 accumulation, no scratch): the output extent per axis is
/// `output_shape` when given, `in * stride` with SAME_* auto_pad, else
/// `stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - pads`; with `output_shape` or
/// SAME_*, the begin pad is [`begin_pad`] of the total padding (full extent minus output extent,
/// which may be negative: the output then extends past the positions the inputs reach, with zeros
/// there, plus the bias).
fn conv_transpose_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    use crate::kernels::conv_transpose::{conv_transpose, Geometry};
    let (x, w, b) = (req(inputs, 0)?, req(inputs, 1)?, opt(inputs, 2));
    if x.rank() < 3 || w.rank() != x.rank() {
        return fail(format!(
            "ConvTranspose needs X [N,C,D..] and W of the same rank, got {:?} / {:?}",
            x.shape, w.shape
        ));
    }
    let nd = x.rank() - 2;
    let (n, c) = (x.shape[0], x.shape[1]);
    let kernel = w.shape[2..].to_vec();
    if let Some(k) = ctx.ints("kernel_shape")? {
        if k.iter().map(|&v| v as usize).ne(kernel.iter().copied()) {
            return fail(format!("kernel_shape {k:?} differs from W {:?}", w.shape));
        }
    }
    let group =
        usize::try_from(ctx.int("group", 1)?).map_err(|_| OpFail::Invalid("group < 0".into()))?;
    if w.shape[0] != c || group == 0 || c % group != 0 {
        return fail(format!(
            "W {:?} must be [C = {c}, M/group, ..] with group {group} dividing C",
            w.shape
        ));
    }
    let mg = w.shape[1];
    if let Some(b) = b {
        if b.shape != [mg * group] {
            return fail(format!("B {:?} must be [{}]", b.shape, mg * group));
        }
    }
    if w.dtype != x.dtype || b.is_some_and(|b| b.dtype != x.dtype) {
        return fail("X, W and B must share one type");
    }
    let strides = per_axis(ctx, "strides", nd, 1)?;
    let dilations = per_axis(ctx, "dilations", nd, 1)?;
    let out_pad = per_axis(ctx, "output_padding", nd, 0)?;
    if strides.iter().chain(&dilations).any(|&v| v == 0) {
        return fail("strides and dilations must be >= 1");
    }
    let ap = auto_pad(ctx)?;
    let out_shape = match ctx.ints("output_shape")? {
        Some(v) if v.len() >= nd => Some(
            v[v.len() - nd..]
                .iter()
                .map(|&d| d as usize)
                .collect::<Vec<_>>(),
        ),
        Some(v) => return fail(format!("output_shape {v:?} has fewer than {nd} entries")),
        None => None,
    };
    let pads = usizes(ctx, "pads")?;
    if !pads.is_empty() && pads.len() != 2 * nd {
        return fail(format!(
            "pads has {} entries, expected {}",
            pads.len(),
            2 * nd
        ));
    }
    let mut out_sp = Vec::with_capacity(nd);
    let mut pad_begin = Vec::with_capacity(nd);
    for a in 0..nd {
        let full = strides[a] * (x.shape[a + 2].max(1) - 1)
            + out_pad[a]
            + (kernel[a].max(1) - 1) * dilations[a]
            + 1;
        let same = matches!(ap, AutoPad::SameUpper | AutoPad::SameLower);
        let target = match (&out_shape, same) {
            (Some(o), _) => Some(o[a]),
            (None, true) => Some(x.shape[a + 2] * strides[a]),
            (None, false) => None,
        };
        match target {
            Some(o) => {
                out_sp.push(o);
                pad_begin.push(begin_pad(
                    full as isize - o as isize,
                    ap == AutoPad::SameUpper,
                ));
            }
            None => {
                let (pb, pe) = if pads.is_empty() || ap == AutoPad::Valid {
                    (0, 0)
                } else {
                    (pads[a], pads[a + nd])
                };
                out_sp.push(full.checked_sub(pb + pe).ok_or_else(|| {
                    OpFail::Invalid(format!("pads {pb} + {pe} exceed the output extent {full}"))
                })?);
                pad_begin.push(pb as isize);
            }
        }
    }
    let mut yshape = vec![n, mg * group];
    yshape.extend(&out_sp);
    let geo = Geometry {
        in_sp: x.shape[2..].to_vec(),
        kernel,
        out_sp,
        strides,
        dilations,
        pad_begin,
    };
    let mut out = ctx.alloc_for_overwrite(x.dtype, &yshape)?;
    crate::real_dispatch!(
        x.dtype,
        T => {
            let bias = match b {
                Some(b) => Some(b.data::<T>()?),
                None => None,
            };
            conv_transpose::<T>(
                x.data::<T>()?,
                (n, c),
                w.data::<T>()?,
                mg,
                bias,
                group,
                &geo,
                out.data_mut::<T>()?,
            )?
        },
        return unsupported(format!("ConvTranspose on {}", x.dtype))
    );
    Ok(vec![out])
}

/// Col2Im: `input [N, C * prod(block), L]`, `image_shape`, `block_shape` into `[N, C, image..]`.
fn col2im_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    use crate::kernels::conv_transpose::{col2im, Geometry};
    let x = req(inputs, 0)?;
    let image = super::dims_of(req(inputs, 1)?, "image_shape")?;
    let block = super::dims_of(req(inputs, 2)?, "block_shape")?;
    let nd = image.len();
    if x.rank() != 3 || block.len() != nd || nd == 0 {
        return fail(format!(
            "Col2Im needs input [N, C*prod(block), L] and image/block shapes of one length, got {:?}, {image:?}, {block:?}",
            x.shape
        ));
    }
    let strides = per_axis(ctx, "strides", nd, 1)?;
    let dilations = per_axis(ctx, "dilations", nd, 1)?;
    let pads = per_axis(ctx, "pads", 2 * nd, 0)?;
    let kp: usize = block.iter().product();
    if kp == 0 || x.shape[1] % kp != 0 || strides.iter().chain(&dilations).any(|&v| v == 0) {
        return fail(format!(
            "input channels {} must be a multiple of prod(block) = {kp}; strides, dilations >= 1",
            x.shape[1]
        ));
    }
    let c = x.shape[1] / kp;
    let mut in_sp = Vec::with_capacity(nd);
    for a in 0..nd {
        let span = image[a] + pads[a] + pads[a + nd];
        let ek = (block[a] - 1) * dilations[a] + 1;
        let Some(r) = span.checked_sub(ek) else {
            return fail(format!(
                "block {} does not fit the padded image {span}",
                block[a]
            ));
        };
        in_sp.push(r / strides[a] + 1);
    }
    if in_sp.iter().product::<usize>() != x.shape[2] {
        return fail(format!(
            "L = {} differs from the {} block positions {in_sp:?}",
            x.shape[2],
            in_sp.iter().product::<usize>()
        ));
    }
    let mut yshape = vec![x.shape[0], c];
    yshape.extend(&image);
    let geo = Geometry {
        in_sp,
        kernel: block,
        out_sp: image,
        strides,
        dilations,
        pad_begin: pads[..nd].iter().map(|&p| p as isize).collect(),
    };
    let mut out = ctx.alloc_for_overwrite(x.dtype, &yshape)?;
    crate::real_dispatch!(
        x.dtype,
        T => col2im::<T>(x.data::<T>()?, (x.shape[0], c), &geo, out.data_mut::<T>()?),
        return unsupported(format!("Col2Im on {}", x.dtype))
    );
    Ok(vec![out])
}

/// The ops of [`crate::kernels::scalar_norm`] that read one input: computed in f64, any float type,
/// no scratch.
fn scalar_norm_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    use crate::kernels::scalar_norm as sn;
    let x = req(inputs, 0)?;
    let mut out = ctx.alloc_for_overwrite(x.dtype, &x.shape)?;
    let shape = &x.shape;
    enum Job {
        Lp((usize, usize, usize), i64),
        Lrn((usize, usize, usize), usize, (f64, f64, f64)),
        Mvn(Vec<bool>),
        Swish(f64),
    }
    let job = match ctx.node.op.as_str() {
        "LpNormalization" => {
            if x.rank() == 0 {
                return fail("LpNormalization needs rank >= 1");
            }
            let a = super::axis(ctx.int("axis", -1)?, x.rank())?;
            let p = ctx.int("p", 2)?;
            if p != 1 && p != 2 {
                return fail(format!("p = {p} must be 1 or 2"));
            }
            Job::Lp(crate::kernels::scalar_norm::split_at_axis(shape, a), p)
        }
        "LRN" => {
            if x.rank() < 2 {
                return fail(format!("LRN needs [N, C, ...], got {shape:?}"));
            }
            let size = usize::try_from(ctx.int("size", 0)?)
                .ok()
                .filter(|&s| s >= 1)
                .ok_or_else(|| OpFail::Invalid("attribute 'size' must be >= 1".into()))?;
            let coef = (
                f64::from(ctx.float("alpha", 1e-4)?),
                f64::from(ctx.float("beta", 0.75)?),
                f64::from(ctx.float("bias", 1.0)?),
            );
            Job::Lrn(
                crate::kernels::scalar_norm::split_at_axis(shape, 1),
                size,
                coef,
            )
        }
        "MeanVarianceNormalization" => {
            let axes = ctx.ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]);
            let mut red = vec![false; x.rank()];
            for a in axes {
                red[super::axis(a, x.rank())?] = true;
            }
            Job::Mvn(red)
        }
        _ => Job::Swish(f64::from(ctx.float("alpha", 1.0)?)),
    };
    crate::real_dispatch!(
        x.dtype,
        T => {
            let (xs, o) = (x.data::<T>()?, out.data_mut::<T>()?);
            match &job {
                Job::Lp(dims, p) => sn::lp_normalize::<T>(xs, *dims, *p, o),
                Job::Lrn(dims, size, coef) => sn::lrn::<T>(xs, *dims, *size, *coef, o),
                Job::Mvn(red) => sn::mvn::<T>(xs, shape, red, o),
                Job::Swish(alpha) => sn::swish::<T>(xs, *alpha, o),
            }
        },
        return unsupported(format!("{} on {}", ctx.node.op, x.dtype))
    );
    Ok(vec![out])
}

/// GroupNormalization: scale/bias per channel (opset 21), or per group (opset 18, `[num_groups]`).
fn group_norm_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, scale, bias) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    if x.rank() < 2 {
        return fail(format!(
            "GroupNormalization needs [N, C, ...], got {:?}",
            x.shape
        ));
    }
    let g = usize::try_from(ctx.int("num_groups", 0)?)
        .ok()
        .filter(|&g| g >= 1 && x.shape[1] % g == 0)
        .ok_or_else(|| {
            OpFail::Invalid(format!(
                "num_groups must be >= 1 and divide C = {}",
                x.shape[1]
            ))
        })?;
    let c = x.shape[1];
    let per_group = if scale.shape == [c] && bias.shape == [c] {
        false
    } else if scale.shape == [g] && bias.shape == [g] {
        true
    } else {
        return fail(format!(
            "scale {:?} and bias {:?} must be [C] = [{c}] (or [num_groups])",
            scale.shape, bias.shape
        ));
    };
    if scale.dtype != x.dtype || bias.dtype != x.dtype {
        return fail("scale and bias must have X's type");
    }
    let eps = f64::from(ctx.float("epsilon", 1e-5)?);
    let dims = (x.shape[0], c, x.shape[2..].iter().product::<usize>());
    let mut out = ctx.alloc_for_overwrite(x.dtype, &x.shape)?;
    crate::real_dispatch!(
        x.dtype,
        T => crate::kernels::scalar_norm::group_norm::<T>(
            x.data::<T>()?,
            dims,
            g,
            scale.data::<T>()?,
            bias.data::<T>()?,
            per_group,
            eps,
            out.data_mut::<T>()?,
        ),
        return unsupported(format!("GroupNormalization on {}", x.dtype))
    );
    Ok(vec![out])
}

fn usizes(ctx: &OpCtx, name: &str) -> Result<Vec<usize>, OpFail> {
    ctx.ints(name)?
        .unwrap_or_default()
        .into_iter()
        .map(|v| {
            usize::try_from(v)
                .map_err(|_| OpFail::Invalid(format!("'{name}' has a negative entry {v}")))
        })
        .collect()
}

fn auto_pad(ctx: &OpCtx) -> Result<AutoPad, OpFail> {
    Ok(match ctx.string("auto_pad")?.as_deref() {
        None | Some("NOTSET") => AutoPad::NotSet,
        Some("SAME_UPPER") => AutoPad::SameUpper,
        Some("SAME_LOWER") => AutoPad::SameLower,
        Some("VALID") => AutoPad::Valid,
        Some(a) => return fail(format!("unknown auto_pad '{a}'")),
    })
}

/// Float inputs as f32/f64 slices: f32/f64 directly, f16/bf16 widened into counted scratch.
enum Floats<'a> {
    F32(Vec<&'a [f32]>),
    F64(Vec<&'a [f64]>),
    Wide(Vec<ScratchBuf<f32>>),
}

fn floats<'a>(ctx: &OpCtx, ts: &[&'a Tensor]) -> Result<Floats<'a>, OpFail> {
    let Some(first) = ts.first() else {
        return fail("no inputs");
    };
    if ts.iter().any(|t| t.dtype != first.dtype) {
        return fail(format!("{} inputs must share one type", ctx.node.op));
    }
    Ok(match first.dtype {
        DataType::F32 => Floats::F32(
            ts.iter()
                .map(|t| t.data::<f32>())
                .collect::<Result<_, _>>()?,
        ),
        DataType::F64 => Floats::F64(
            ts.iter()
                .map(|t| t.data::<f64>())
                .collect::<Result<_, _>>()?,
        ),
        DataType::F16 | DataType::BF16 => {
            Floats::Wide(ts.iter().map(|t| widen(ctx, t)).collect::<Result<_, _>>()?)
        }
        d => return unsupported(format!("{} on {d}", ctx.node.op)),
    })
}

/// Runs `$body` with `$T` the compute type and `$ins` the input slices, writing `$out` (a `&mut [$T]`).
macro_rules! float_run {
    ($ctx:expr, $ins:expr, $outt:expr, |$T:ident, $x:ident, $o:ident| $body:expr) => {{
        let out_t: &mut Tensor = $outt;
        match floats($ctx, $ins)? {
            Floats::F32(v) => {
                type $T = f32;
                let $x: Vec<&[f32]> = v;
                let $o = out_t.data_mut::<f32>()?;
                $body
            }
            Floats::F64(v) => {
                type $T = f64;
                let $x: Vec<&[f64]> = v;
                let $o = out_t.data_mut::<f64>()?;
                $body
            }
            Floats::Wide(w) => {
                type $T = f32;
                let $x: Vec<&[f32]> = w.iter().map(|b| b.as_slice()).collect();
                let mut y = $ctx.scratch::<f32>(out_t.numel())?;
                {
                    let $o = y.as_mut_slice();
                    $body
                }
                narrow(y.as_slice(), out_t)?;
            }
        }
    }};
}

/// Conv's attributes (`kernel_shape`, `strides`, `dilations`, `pads`/`auto_pad`, `group`) for input
/// `x` and weights `w`, checked against their shapes (shared with ConvInteger and QLinearConv).
pub(crate) fn conv_attrs(ctx: &OpCtx, x: &Tensor, w: &Tensor) -> Result<ConvAttrs, OpFail> {
    if x.rank() < 3 || w.rank() != x.rank() {
        return fail(format!(
            "Conv needs X [N,C,D..] and W of the same rank, got {:?} / {:?}",
            x.shape, w.shape
        ));
    }
    let nd = x.rank() - 2;
    let kernel = match ctx.ints("kernel_shape")? {
        Some(_) => usizes(ctx, "kernel_shape")?,
        None => w.shape[2..].to_vec(),
    };
    if kernel != w.shape[2..] {
        return fail(format!(
            "kernel_shape {kernel:?} differs from W {:?}",
            w.shape
        ));
    }
    let strides = {
        let s = usizes(ctx, "strides")?;
        if s.is_empty() {
            vec![1; nd]
        } else {
            s
        }
    };
    let dilations = {
        let d = usizes(ctx, "dilations")?;
        if d.is_empty() {
            vec![1; nd]
        } else {
            d
        }
    };
    let pads = resolve_pads(
        auto_pad(ctx)?,
        &usizes(ctx, "pads")?,
        &x.shape[2..],
        &kernel,
        &strides,
        &dilations,
    )?;
    let group =
        usize::try_from(ctx.int("group", 1)?).map_err(|_| OpFail::Invalid("group < 0".into()))?;
    Ok(ConvAttrs {
        group,
        strides,
        pads,
        dilations,
    })
}

fn conv(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, w, b) = (req(inputs, 0)?, req(inputs, 1)?, opt(inputs, 2));
    let attrs = conv_attrs(ctx, x, w)?;
    let oshape = crate::kernels::conv::conv_out_shape(&x.shape, &w.shape, &attrs)?;
    let col_len = conv_col_len(&x.shape, &w.shape, &attrs)?;
    let mut out = ctx.alloc(x.dtype, &oshape)?;
    let mut ins = vec![x, w];
    ins.extend(b);
    float_run!(ctx, &ins, &mut out, |T, v, o| {
        let mut col = ctx.scratch::<T>(col_len)?;
        conv_with_col::<T>(
            v[0],
            &x.shape,
            v[1],
            &w.shape,
            v.get(2).copied(),
            &attrs,
            o,
            col.as_mut_slice(),
        )?
    });
    Ok(vec![out])
}

fn pool(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    if x.rank() < 3 {
        return fail(format!(
            "{} needs X [N,C,D..], got {:?}",
            ctx.node.op, x.shape
        ));
    }
    let nd = x.rank() - 2;
    if nd > 8 {
        return unsupported(format!("{} over {nd} spatial axes", ctx.node.op));
    }
    let kernel = usizes(ctx, "kernel_shape")?;
    if kernel.len() != nd {
        return fail(format!(
            "kernel_shape {kernel:?} does not match {nd} spatial dims"
        ));
    }
    let or1 = |v: Vec<usize>| if v.is_empty() { vec![1; nd] } else { v };
    let strides = or1(usizes(ctx, "strides")?);
    let dilations = or1(usizes(ctx, "dilations")?);
    let ceil_mode = ctx.int("ceil_mode", 0)? != 0;
    if ceil_mode && auto_pad(ctx)? != AutoPad::NotSet {
        return unsupported("ceil_mode with auto_pad");
    }
    let pads = resolve_pads(
        auto_pad(ctx)?,
        &usizes(ctx, "pads")?,
        &x.shape[2..],
        &kernel,
        &strides,
        &dilations,
    )?;
    let attrs = PoolAttrs {
        kernel,
        strides,
        pads,
        dilations,
        ceil_mode,
        count_include_pad: ctx.int("count_include_pad", 0)? != 0,
    };
    let oshape = pool_out_shape(&x.shape, &attrs)?;
    let mut out = ctx.alloc(x.dtype, &oshape)?;
    let max = ctx.node.op == "MaxPool";
    let indices = max && ctx.node.outputs.get(1).is_some_and(|o| o.is_some());
    let int = matches!(x.dtype, DataType::U8 | DataType::I32 | DataType::I64);
    if max && (int || indices) {
        // Integer MaxPool and the Indices output run on the values directly, no scratch.
        let column_major = match ctx.int("storage_order", 0)? {
            0 => false,
            1 => true,
            v => return fail(format!("storage_order {v} must be 0 or 1")),
        };
        let mut idx = if indices {
            Some(ctx.alloc(DataType::I64, &oshape)?)
        } else {
            None
        };
        macro_rules! direct {
            ($t:ty) => {{
                let xs = x.data::<$t>()?;
                max_pool::<$t>(xs, &x.shape, &attrs, out.data_mut::<$t>()?)?;
                if let Some(i) = idx.as_mut() {
                    max_pool_indices::<$t>(
                        xs,
                        &x.shape,
                        &attrs,
                        column_major,
                        i.data_mut::<i64>()?,
                    )?;
                }
            }};
        }
        match x.dtype {
            DataType::U8 => direct!(u8),
            DataType::I32 => direct!(i32),
            DataType::I64 => direct!(i64),
            DataType::F32 => direct!(f32),
            DataType::F64 => direct!(f64),
            d => return unsupported(format!("MaxPool with Indices on {d}")),
        }
        let mut outs = vec![out];
        outs.extend(idx);
        return Ok(outs);
    }
    let p = lp_p(ctx)?;
    float_run!(ctx, &[x], &mut out, |T, v, o| {
        match ctx.node.op.as_str() {
            "MaxPool" => max_pool::<T>(v[0], &x.shape, &attrs, o)?,
            "LpPool" => lp_pool::<T>(v[0], &x.shape, &attrs, p, o)?,
            _ => average_pool::<T>(v[0], &x.shape, &attrs, o)?,
        }
    });
    Ok(vec![out])
}

fn global_pool(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let mut out = ctx.alloc(x.dtype, &global_pool_out_shape(&x.shape)?)?;
    let p = lp_p(ctx)?;
    float_run!(ctx, &[x], &mut out, |T, v, o| {
        match ctx.node.op.as_str() {
            "GlobalMaxPool" => global_max_pool::<T>(v[0], &x.shape, o)?,
            "GlobalLpPool" => global_lp_pool::<T>(v[0], &x.shape, p, o)?,
            _ => global_average_pool::<T>(v[0], &x.shape, o)?,
        }
    });
    Ok(vec![out])
}

/// LpPool/GlobalLpPool's `p` (default 2, at least 1).
fn lp_p(ctx: &OpCtx) -> Result<i32, OpFail> {
    match i32::try_from(ctx.int("p", 2)?) {
        Ok(p) if p >= 1 => Ok(p),
        _ => fail(format!(
            "p = {} must be a positive integer",
            ctx.int("p", 2)?
        )),
    }
}

fn batch_norm_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let ins: Vec<&Tensor> = (0..5).map(|i| req(inputs, i)).collect::<Result<_, _>>()?;
    if ctx.int("training_mode", 0)? != 0 {
        return batch_norm_training(ctx, &ins);
    }
    check_batch_norm_training(false)?;
    let eps = ctx.float("epsilon", 1e-5)?;
    let x = ins[0];
    let mut out = ctx.alloc(x.dtype, &x.shape)?;
    float_run!(ctx, &ins, &mut out, |T, v, o| batch_norm::<T>(
        v[0], &x.shape, v[1], v[2], v[3], v[4], eps as T, o
    )?);
    Ok(vec![out])
}

/// BatchNormalization in training mode: Y normalized with the batch's mean and (population)
/// variance per channel, plus `running_mean = mean * momentum + batch_mean * (1 - momentum)` and the
/// same for the variance, when those outputs are asked for. Two passes per channel in f64, no scratch.
fn batch_norm_training(ctx: &OpCtx, ins: &[&Tensor]) -> Result<Vec<Tensor>, OpFail> {
    let x = ins[0];
    if x.rank() < 2 {
        return fail(format!(
            "BatchNormalization needs [N, C, ...], got {:?}",
            x.shape
        ));
    }
    let (n, c) = (x.shape[0], x.shape[1]);
    let plane: usize = x.shape[2..].iter().product();
    if ins[1..]
        .iter()
        .any(|t| t.shape != [c] || t.dtype != x.dtype)
    {
        return fail(format!("scale, B, mean and var must be [{c}] of X's type"));
    }
    let eps = f64::from(ctx.float("epsilon", 1e-5)?);
    let momentum = f64::from(ctx.float("momentum", 0.9)?);
    let mut y = ctx.alloc_for_overwrite(x.dtype, &x.shape)?;
    let wants = |i: usize| ctx.node.outputs.get(i).is_some_and(|o| o.is_some());
    if wants(2) && !wants(1) {
        return unsupported("BatchNormalization running_var without running_mean");
    }
    let mut rm = if wants(1) {
        Some(ctx.alloc_for_overwrite(x.dtype, &[c])?)
    } else {
        None
    };
    let mut rv = if wants(2) {
        Some(ctx.alloc_for_overwrite(x.dtype, &[c])?)
    } else {
        None
    };
    crate::real_dispatch!(
        x.dtype,
        T => {
            use crate::kernels::real::Real;
            let xs = x.data::<T>()?;
            let [sc, bi, mu, va] = [1, 2, 3, 4].map(|i| ins[i].data::<T>());
            let (sc, bi, mu, va) = (sc?, bi?, mu?, va?);
            let ys = y.data_mut::<T>()?;
            let mut rm = match rm.as_mut() {
                Some(t) => Some(t.data_mut::<T>()?),
                None => None,
            };
            let mut rv = match rv.as_mut() {
                Some(t) => Some(t.data_mut::<T>()?),
                None => None,
            };
            let cnt = (n * plane) as f64;
            for ch in 0..c {
                let idx = (0..n).flat_map(|b| {
                    let base = (b * c + ch) * plane;
                    base..base + plane
                });
                let mean = idx.clone().map(|i| xs[i].get()).sum::<f64>() / cnt;
                let var = idx.clone().map(|i| (xs[i].get() - mean).powi(2)).sum::<f64>() / cnt;
                let inv = 1.0 / (var + eps).sqrt();
                for i in idx {
                    ys[i] = T::put(sc[ch].get() * (xs[i].get() - mean) * inv + bi[ch].get());
                }
                if let Some(o) = rm.as_deref_mut() {
                    o[ch] = T::put(mu[ch].get() * momentum + mean * (1.0 - momentum));
                }
                if let Some(o) = rv.as_deref_mut() {
                    o[ch] = T::put(va[ch].get() * momentum + var * (1.0 - momentum));
                }
            }
        },
        return unsupported(format!("BatchNormalization on {}", x.dtype))
    );
    let mut outs = vec![y];
    outs.extend(rm);
    outs.extend(rv);
    Ok(outs)
}

fn instance_norm_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let ins: Vec<&Tensor> = (0..3).map(|i| req(inputs, i)).collect::<Result<_, _>>()?;
    let eps = ctx.float("epsilon", 1e-5)?;
    let x = ins[0];
    let mut out = ctx.alloc(x.dtype, &x.shape)?;
    float_run!(ctx, &ins, &mut out, |T, v, o| instance_norm::<T>(
        v[0], &x.shape, v[1], v[2], eps as T, o
    )?);
    Ok(vec![out])
}

/// Dropout: the identity (a copy; the mask all true) unless `training_mode` is true and the ratio is
/// above 0; then element `i` is kept when the uniform draw `i` of the node's stream
/// ([`super::random::node_stream`]) is at least the ratio, and scaled by `1 / (1 - ratio)`.
fn dropout(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let ratio = match opt(inputs, 1) {
        Some(r) if r.numel() == 1 => super::random::Floats::of(r)?.get(0),
        Some(r) => return fail(format!("ratio must hold one element, has {}", r.numel())),
        None => ctx.float("ratio", 0.5)? as f64,
    };
    let training = match opt(inputs, 2) {
        Some(t) => super::scalar_i64(t, "training_mode")? != 0,
        None => false,
    };
    if training && !(0.0..1.0).contains(&ratio) {
        return fail(format!("ratio {ratio} is not in [0, 1)"));
    }
    let drop = training && ratio > 0.0;
    let stream = super::random::node_stream(ctx)?;
    let keep = |i: u64| !drop || stream.uniform(i, 53) >= ratio;
    let scale = if drop { 1.0 / (1.0 - ratio) } else { 1.0 };
    let mut out = ctx.alloc_for_overwrite(x.dtype, &x.shape)?;
    if !drop {
        out.bytes_mut()?.copy_from_slice(x.bytes());
    } else {
        macro_rules! scaled {
            ($t:ty, $to:expr, $from:expr) => {{
                let v = x.data::<$t>()?;
                super::random::fill(out.data_mut::<$t>()?, |i| {
                    if keep(i) {
                        $from($to(v[i as usize]) * scale)
                    } else {
                        $from(0.0)
                    }
                })
            }};
        }
        match x.dtype {
            DataType::F32 => scaled!(f32, f64::from, |v: f64| v as f32),
            DataType::F64 => scaled!(f64, f64::from, |v: f64| v),
            DataType::F16 => scaled!(f16, f16::to_f64, f16::from_f64),
            DataType::BF16 => scaled!(bf16, bf16::to_f64, bf16::from_f64),
            d => return unsupported(format!("Dropout in training mode on {d}")),
        }
    }
    let mut outs = vec![out];
    if ctx.node.outputs.get(1).is_some_and(|o| o.is_some()) {
        let mask_type = if ctx.opset >= 10 {
            DataType::Bool
        } else {
            x.dtype
        };
        let mut mask = ctx.alloc_for_overwrite(mask_type, &x.shape)?;
        match mask_type {
            DataType::Bool => {
                super::random::fill(super::raw_mut::<u8>(&mut mask)?, |i| keep(i) as u8)
            }
            DataType::F32 => super::random::fill(mask.data_mut::<f32>()?, |i| keep(i) as u8 as f32),
            DataType::F64 => super::random::fill(mask.data_mut::<f64>()?, |i| keep(i) as u8 as f64),
            DataType::F16 => super::random::fill(mask.data_mut::<f16>()?, |i| {
                f16::from_f32(keep(i) as u8 as f32)
            }),
            d => return unsupported(format!("Dropout mask of type {d}")),
        }
        outs.push(mask);
    }
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use crate::ops::testutil::*;
    use memplan_ir::graph::AttrValue;
    use proptest::prelude::*;

    #[test]
    fn conv_pool_bn_hand() {
        // 1x1x3x3 input, 2x2 kernel of ones, stride 1: sums of each 2x2 window.
        let x = t_f32(&[1, 1, 3, 3], &[1., 2., 3., 4., 5., 6., 7., 8., 9.]);
        let w = t_f32(&[1, 1, 2, 2], &[1.; 4]);
        let o = run_op(
            "Conv",
            &[],
            &[Some(&x), Some(&w), Some(&t_f32(&[1], &[0.5]))],
            1,
        )
        .unwrap();
        assert_eq!(o[0].shape, [1, 1, 2, 2]);
        assert_eq!(o[0].data::<f32>().unwrap(), &[12.5, 16.5, 24.5, 28.5]);
        let k = [("kernel_shape", AttrValue::Ints(vec![2, 2]))];
        let o = run_op("MaxPool", &k, &[Some(&x)], 1).unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[5., 6., 8., 9.]);
        let o = run_op("AveragePool", &k, &[Some(&x)], 1).unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[3., 4., 6., 7.]);
        let o = run_op("GlobalAveragePool", &[], &[Some(&x)], 1).unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[5.]);
        let one = t_f32(&[1], &[1.]);
        let zero = t_f32(&[1], &[0.]);
        let o = run_op(
            "BatchNormalization",
            &[("epsilon", AttrValue::Float(0.0))],
            &[Some(&x), Some(&one), Some(&zero), Some(&zero), Some(&one)],
            1,
        )
        .unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), x.data::<f32>().unwrap());
        let r1 = run_op(
            "RandomUniformLike",
            &[("seed", AttrValue::Float(3.0))],
            &[Some(&x)],
            1,
        )
        .unwrap();
        let r2 = run_op(
            "RandomUniformLike",
            &[("seed", AttrValue::Float(3.0))],
            &[Some(&x)],
            1,
        )
        .unwrap();
        assert_eq!(r1[0].bytes(), r2[0].bytes());
        assert!(r1[0]
            .data::<f32>()
            .unwrap()
            .iter()
            .all(|&v| (0.0..1.0).contains(&v)));
    }

    #[test]
    fn dropout_training_keeps_one_minus_ratio_and_scales() {
        let n = 50_000;
        let x = t_f32(&[n], &rand_f32(n, 3));
        let ratio = t_f32(&[], &[0.3]);
        let on = t_bool(&[], &[true]);
        let o = run_op(
            "Dropout",
            &[("seed", AttrValue::Int(4))],
            &[Some(&x), Some(&ratio), Some(&on)],
            2,
        )
        .unwrap();
        let (y, mask) = (o[0].data::<f32>().unwrap(), o[1].data::<u8>().unwrap());
        let xs = x.data::<f32>().unwrap();
        let mut kept = 0;
        for i in 0..n {
            if mask[i] == 1 {
                kept += 1;
                assert_eq!(y[i], (xs[i] as f64 / 0.7f32 as f64) as f32);
            } else {
                assert_eq!((mask[i], y[i]), (0, 0.0));
            }
        }
        // Standard error of the keep rate sqrt(0.21 / 5e4) ~ 0.002.
        let rate = kept as f64 / n as f64;
        assert!((rate - 0.7).abs() < 0.01, "keep rate {rate}");
        // Same seed, same mask; inference mode and ratio 0 are the identity with an all-true mask.
        let again = run_op(
            "Dropout",
            &[("seed", AttrValue::Int(4))],
            &[Some(&x), Some(&ratio), Some(&on)],
            2,
        )
        .unwrap();
        assert_eq!(again[1].bytes(), o[1].bytes());
        let zero = t_f32(&[], &[0.0]);
        let off = t_bool(&[], &[false]);
        for ins in [
            [Some(&x), Some(&ratio), Some(&off)],
            [Some(&x), Some(&zero), Some(&on)],
        ] {
            let o = run_op("Dropout", &[], &ins, 2).unwrap();
            assert_eq!(o[0].bytes(), x.bytes());
            assert!(o[1].data::<u8>().unwrap().iter().all(|&m| m == 1));
        }
        let bad = t_f32(&[], &[1.0]);
        assert!(run_op("Dropout", &[], &[Some(&x), Some(&bad), Some(&on)], 2).is_err());
    }

    #[test]
    fn max_unpool_places_the_unpooled_tensor_at_the_origin_of_output_shape() {
        // Indices are positions in the unpooled 4x4; output_shape 5x5 holds it top-left.
        let x = t_f32(&[1, 1, 2, 2], &[5., 6., 7., 8.]);
        let i = t_i64(&[1, 1, 2, 2], &[5, 7, 13, 15]);
        let k = [
            ("kernel_shape", AttrValue::Ints(vec![2, 2])),
            ("strides", AttrValue::Ints(vec![2, 2])),
        ];
        let shape = t_i64(&[4], &[1, 1, 5, 5]);
        let o = run_op("MaxUnpool", &k, &[Some(&x), Some(&i), Some(&shape)], 1).unwrap();
        assert_eq!(o[0].shape, [1, 1, 5, 5]);
        let y = o[0].data::<f32>().unwrap();
        let mut want = [0f32; 25];
        for (p, v) in [(6, 5.), (8, 6.), (16, 7.), (18, 8.)] {
            want[p] = v;
        }
        assert_eq!(y, want);
        // Without output_shape the indices are the output's own positions.
        let o = run_op("MaxUnpool", &k, &[Some(&x), Some(&i)], 1).unwrap();
        assert_eq!(o[0].shape, [1, 1, 4, 4]);
        let y = o[0].data::<f32>().unwrap();
        assert_eq!((y[5], y[7], y[13], y[15]), (5., 6., 7., 8.));
        // An output_shape smaller than the unpooled shape is an error.
        let small = t_i64(&[4], &[1, 1, 3, 5]);
        assert!(run_op("MaxUnpool", &k, &[Some(&x), Some(&i), Some(&small)], 1).is_err());
    }

    #[test]
    fn new_nn_ops_by_hand() {
        // ConvTranspose of a 1x1x2 input with a [1, 1, 2] kernel: [1, 1+2, 2].
        let x = t_f32(&[1, 1, 2], &[1., 2.]);
        let w = t_f32(&[1, 1, 2], &[1., 1.]);
        let o = run_op("ConvTranspose", &[], &[Some(&x), Some(&w)], 1).unwrap();
        assert_eq!(o[0].shape, [1, 1, 3]);
        assert_eq!(o[0].data::<f32>().unwrap(), &[1., 3., 2.]);
        // An output_shape above the full extent 3 (negative total padding): one more position
        // goes at the end, two more split one before and one after (begin pad -1).
        let at = |n: i64| [("output_shape", AttrValue::Ints(vec![n]))];
        let o = run_op("ConvTranspose", &at(4), &[Some(&x), Some(&w)], 1).unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[1., 3., 2., 0.]);
        let o = run_op("ConvTranspose", &at(5), &[Some(&x), Some(&w)], 1).unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[0., 1., 3., 2., 0.]);
        // Below it the output is cropped: begin pad 1 of a total 1 for NOTSET.
        let o = run_op("ConvTranspose", &at(2), &[Some(&x), Some(&w)], 1).unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[3., 2.]);
        // LpPool p = 1 over windows of 2: sums of |x|.
        let x = t_f32(&[1, 1, 3], &[1., -2., 3.]);
        let k = [
            ("kernel_shape", AttrValue::Ints(vec![2])),
            ("p", AttrValue::Int(1)),
        ];
        let o = run_op("LpPool", &k, &[Some(&x)], 1).unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[3., 5.]);
        let o = run_op("GlobalLpPool", &[("p", AttrValue::Int(1))], &[Some(&x)], 1).unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[6.]);
        // MaxPool with Indices, and MaxUnpool putting the maxima back.
        let x = t_f32(&[1, 1, 2, 2], &[1., 4., 3., 2.]);
        let k = [("kernel_shape", AttrValue::Ints(vec![2, 2]))];
        let o = run_op("MaxPool", &k, &[Some(&x)], 2).unwrap();
        assert_eq!(o[1].data::<i64>().unwrap(), &[1]);
        let o = run_op("MaxUnpool", &k, &[Some(&o[0]), Some(&o[1])], 1).unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[0., 4., 0., 0.]);
        // LpNormalization (L1) along the last axis; zero rows stay zero.
        let x = t_f32(&[2, 2], &[1., 3., 0., 0.]);
        let o = run_op(
            "LpNormalization",
            &[("p", AttrValue::Int(1))],
            &[Some(&x)],
            1,
        )
        .unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[0.25, 0.75, 0., 0.]);
    }

    proptest! {
        #[test]
        fn nn_chunk_identity(
            n in 1usize..3, c in 1usize..4, h in 3usize..9, wd in 3usize..9, m in 1usize..4,
            cuts in prop::collection::vec(any::<usize>(), 0..3), seed in any::<u64>(),
        ) {
            let x = t_f32(&[n, c, h, wd], &rand_f32(n * c * h * wd, seed));
            let w = t_f32(&[m, c, 3, 3], &rand_f32(m * c * 9, seed + 1));
            let attrs = [("pads", AttrValue::Ints(vec![1, 1, 1, 1]))];
            check_chunks("Conv", &attrs, &[&x, &w], &[Some(0), None], 0, &cuts).unwrap();
            check_chunks("Conv", &attrs, &[&x, &w], &[None, Some(0)], 1, &cuts).unwrap();
            let k = [("kernel_shape", AttrValue::Ints(vec![2, 2]))];
            check_chunks("AveragePool", &k, &[&x], &[Some(1)], 1, &cuts).unwrap();
            check_chunks("GlobalAveragePool", &[], &[&x], &[Some(1)], 1, &cuts).unwrap();
        }

        /// Each layer's record splits the axes it says (batch, channels, spatial) and no other,
        /// and running the kernel on the slices its flow gives is exactly the slice of the whole.
        #[test]
        fn layer_flows_match_their_kernels(
            n in 1usize..3, c in 2usize..5, h in 2usize..6, wd in 2usize..6,
            cuts in prop::collection::vec(any::<usize>(), 0..3), seed in any::<u64>(),
        ) {
            let x = t_f32(&[n, c, h, wd], &rand_f32(n * c * h * wd, seed));
            let per_c = |k: u64, lo: f32| {
                let v: Vec<f32> = rand_f32(c, seed + k).iter().map(|v| v.abs() + lo).collect();
                t_f32(&[c], &v)
            };
            let (scale, bias, mean, var) = (per_c(1, 0.5), per_c(2, 0.0), per_c(3, 0.0), per_c(4, 0.1));
            let group = t_f32(&[c], &[1.0; 8][..c]);
            let k2 = || ("kernel_shape", AttrValue::Ints(vec![2, 2]));
            // (op, attrs, inputs, the output axes its flow splits)
            let cases: Vec<(&str, Vec<(&str, AttrValue)>, Vec<&crate::tensor::Tensor>, Vec<usize>)> = vec![
                ("BatchNormalization", vec![], vec![&x, &scale, &bias, &mean, &var], vec![0, 1, 2, 3]),
                ("InstanceNormalization", vec![], vec![&x, &scale, &bias], vec![0, 1]),
                ("GroupNormalization", vec![("num_groups", AttrValue::Int(1))], vec![&x, &group, &group], vec![0]),
                ("MaxPool", vec![k2()], vec![&x], vec![0, 1]),
                ("AveragePool", vec![k2(), ("ceil_mode", AttrValue::Int(1))], vec![&x], vec![0, 1]),
                ("LpPool", vec![k2()], vec![&x], vec![0, 1]),
                ("GlobalAveragePool", vec![], vec![&x], vec![0, 1]),
                ("GlobalMaxPool", vec![], vec![&x], vec![0, 1]),
                ("GlobalLpPool", vec![], vec![&x], vec![0, 1]),
                ("LRN", vec![("size", AttrValue::Int(3))], vec![&x], vec![0, 2, 3]),
                ("LpNormalization", vec![("axis", AttrValue::Int(1))], vec![&x], vec![0, 2, 3]),
                ("MeanVarianceNormalization", vec![], vec![&x], vec![1]),
                ("Swish", vec![], vec![&x], vec![0, 1, 2, 3]),
                ("Dropout", vec![], vec![&x], vec![0, 1, 2, 3]),
            ];
            for (op, attrs, ins, split) in &cases {
                for out_axis in 0..4 {
                    let axes = flow_axes(op, attrs, ins, out_axis);
                    prop_assert_eq!(axes.is_some(), split.contains(&out_axis), "{} axis {}", op, out_axis);
                    if let Some(axes) = axes {
                        check_chunks(op, attrs, ins, &axes, out_axis, &cuts).unwrap();
                    }
                }
            }
        }
    }

    /// ConvTranspose splits the batch and, with one group, the output channels (slicing `W`'s
    /// axis 1 and `B`); never its spatial axes.
    #[test]
    fn conv_transpose_flow_matches_its_kernel() {
        let x = t_f32(&[3, 4, 3, 5], &rand_f32(180, 1));
        let w = t_f32(&[4, 5, 3, 2], &rand_f32(120, 2));
        let b = t_f32(&[5], &rand_f32(5, 3));
        let s2 = [("strides", AttrValue::Ints(vec![2, 1]))];
        crate::ops::testutil::check_flow("ConvTranspose", &s2, &[&x, &w, &b], 1, &[0, 1], &[1, 3])
            .unwrap();
        crate::ops::testutil::check_flow("ConvTranspose", &[], &[&x, &w], 1, &[0, 1], &[2])
            .unwrap();
        let w2 = t_f32(&[4, 2, 3, 2], &rand_f32(48, 4));
        let g2 = [("group", AttrValue::Int(2))];
        crate::ops::testutil::check_flow("ConvTranspose", &g2, &[&x, &w2], 1, &[0], &[1]).unwrap();
    }
}
