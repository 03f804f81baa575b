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
    average_pool, global_average_pool, global_max_pool, global_pool_out_shape, max_pool,
    pool_out_shape, PoolAttrs,
};
use crate::mem::ScratchBuf;
use crate::tensor::Tensor;

pub const OPS: &[(&str, OpFn)] = &[
    ("Conv", conv),
    ("MaxPool", pool),
    ("AveragePool", pool),
    ("GlobalAveragePool", global_pool),
    ("GlobalMaxPool", global_pool),
    ("BatchNormalization", batch_norm_op),
    ("InstanceNormalization", instance_norm_op),
    ("Dropout", dropout),
];

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
    if ctx.node.outputs.len() > 1 && ctx.node.outputs[1].is_some() {
        return unsupported("MaxPool Indices output");
    }
    let nd = x.rank() - 2;
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
    float_run!(ctx, &[x], &mut out, |T, v, o| {
        if max {
            max_pool::<T>(v[0], &x.shape, &attrs, o)?
        } else {
            average_pool::<T>(v[0], &x.shape, &attrs, o)?
        }
    });
    Ok(vec![out])
}

fn global_pool(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let mut out = ctx.alloc(x.dtype, &global_pool_out_shape(&x.shape)?)?;
    let max = ctx.node.op == "GlobalMaxPool";
    float_run!(ctx, &[x], &mut out, |T, v, o| {
        if max {
            global_max_pool::<T>(v[0], &x.shape, o)?
        } else {
            global_average_pool::<T>(v[0], &x.shape, o)?
        }
    });
    Ok(vec![out])
}

fn batch_norm_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let ins: Vec<&Tensor> = (0..5).map(|i| req(inputs, i)).collect::<Result<_, _>>()?;
    check_batch_norm_training(ctx.int("training_mode", 0)? != 0)?;
    let eps = ctx.float("epsilon", 1e-5)?;
    let x = ins[0];
    let mut out = ctx.alloc(x.dtype, &x.shape)?;
    float_run!(ctx, &ins, &mut out, |T, v, o| batch_norm::<T>(
        v[0], &x.shape, v[1], v[2], v[3], v[4], eps as T, o
    )?);
    Ok(vec![out])
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
    }
}
