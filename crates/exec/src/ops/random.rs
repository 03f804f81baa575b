//! Random generators (`RandomUniform`, `RandomNormal`, `*Like`, `Bernoulli`, `Multinomial`) over one
//! counter-based generator: element `i` of a draw is a pure function of `(seed, i)`, so a run, a
//! re-run, any slice of the output and any thread count agree bit for bit. The `seed` attribute's
//! bits seed it (0 when absent: runs are deterministic). Values differ from other runtimes' draws.

use half::{bf16, f16};
use memplan_ir::DataType;

use super::{fail, req, unsupported, OpCtx, OpFail, OpFn};
use crate::tensor::Tensor;

pub const OPS: &[(&str, OpFn)] = &[
    ("RandomUniform", random),
    ("RandomNormal", random),
    ("RandomUniformLike", random),
    ("RandomNormalLike", random),
    ("Bernoulli", bernoulli),
    ("Multinomial", multinomial),
];

/// splitmix64 finalizer.
fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Uniform in [0, 1) with 53 random bits: draw `i` of stream `stream` under `seed`.
pub(crate) fn unit(seed: u64, i: u64, stream: u64) -> f64 {
    (splitmix(seed ^ splitmix(i.wrapping_mul(2).wrapping_add(stream))) >> 11) as f64
        / (1u64 << 53) as f64
}

/// The generator seed: the bits of the float `seed` attribute, 0 when absent.
fn seed_of(ctx: &OpCtx) -> Result<u64, OpFail> {
    Ok(ctx.opt_float("seed")?.map_or(0, |s| u64::from(s.to_bits())))
}

/// Fills a float tensor with `value(i)` per element.
fn fill(out: &mut Tensor, op: &str, value: impl Fn(usize) -> f64) -> Result<(), OpFail> {
    match out.dtype {
        DataType::F32 => out
            .data_mut::<f32>()?
            .iter_mut()
            .enumerate()
            .for_each(|(i, o)| *o = value(i) as f32),
        DataType::F64 => out
            .data_mut::<f64>()?
            .iter_mut()
            .enumerate()
            .for_each(|(i, o)| *o = value(i)),
        DataType::F16 => out
            .data_mut::<f16>()?
            .iter_mut()
            .enumerate()
            .for_each(|(i, o)| *o = f16::from_f64(value(i))),
        DataType::BF16 => out
            .data_mut::<bf16>()?
            .iter_mut()
            .enumerate()
            .for_each(|(i, o)| *o = bf16::from_f64(value(i))),
        d => return unsupported(format!("{op} of {d}")),
    }
    Ok(())
}

fn dtype_attr(ctx: &OpCtx, default: DataType) -> Result<DataType, OpFail> {
    match ctx.opt_int("dtype")? {
        Some(c) => DataType::from_onnx(c as i32)
            .ok_or_else(|| OpFail::Invalid(format!("unknown dtype {c}"))),
        None => Ok(default),
    }
}

/// `RandomUniform`/`RandomNormal` (shape from the attribute) and their `*Like` forms (shape of the
/// input). Normal draws use Box-Muller over two independent uniforms of the element.
fn random(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let like = ctx.node.op.ends_with("Like");
    let (shape, default) = if like {
        let x = req(inputs, 0)?;
        (x.shape.clone(), x.dtype)
    } else {
        let s = ctx.ints("shape")?.unwrap_or_default();
        let dims = s
            .iter()
            .map(|&d| usize::try_from(d).map_err(|_| OpFail::Invalid(format!("negative dim {d}"))))
            .collect::<Result<Vec<_>, _>>()?;
        (dims, DataType::F32)
    };
    let dtype = dtype_attr(ctx, default)?;
    let seed = seed_of(ctx)?;
    let normal = ctx.node.op.starts_with("RandomNormal");
    let (p0, p1) = if normal {
        (
            f64::from(ctx.float("mean", 0.0)?),
            f64::from(ctx.float("scale", 1.0)?),
        )
    } else {
        (
            f64::from(ctx.float("low", 0.0)?),
            f64::from(ctx.float("high", 1.0)?),
        )
    };
    let mut out = ctx.alloc_for_overwrite(dtype, &shape)?;
    fill(&mut out, &ctx.node.op, |i| {
        let u = unit(seed, i as u64, 0);
        if normal {
            let v = unit(seed, i as u64, 1);
            p0 + p1 * (-2.0 * (1.0 - u).ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
        } else {
            p0 + (p1 - p0) * u
        }
    })?;
    Ok(vec![out])
}

/// `Bernoulli`: element `i` is 1 when its uniform draw is below the probability `x[i]`.
fn bernoulli(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let p: Vec<f32> = x.to_f32_vec()?;
    let dtype = dtype_attr(ctx, x.dtype)?;
    let seed = seed_of(ctx)?;
    let mut out = ctx.alloc_for_overwrite(dtype, &x.shape)?;
    let bit = |i: usize| unit(seed, i as u64, 0) < f64::from(p[i]);
    match dtype {
        DataType::Bool | DataType::U8 | DataType::I8 => {
            for (i, o) in out.bytes_mut()?.iter_mut().enumerate() {
                *o = u8::from(bit(i));
            }
        }
        DataType::I32 => out
            .data_mut::<i32>()?
            .iter_mut()
            .enumerate()
            .for_each(|(i, o)| *o = i32::from(bit(i))),
        DataType::I64 => out
            .data_mut::<i64>()?
            .iter_mut()
            .enumerate()
            .for_each(|(i, o)| *o = i64::from(bit(i))),
        _ => fill(&mut out, "Bernoulli", |i| if bit(i) { 1.0 } else { 0.0 })?,
    }
    Ok(vec![out])
}

/// `Multinomial`: `sample_size` class indices per batch row, drawn from the softmax of the row's
/// unnormalized log-probabilities by inverting its cumulative distribution.
fn multinomial(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    if x.rank() != 2 {
        return fail(format!(
            "Multinomial input must be [batch, classes], got {:?}",
            x.shape
        ));
    }
    let (b, k) = (x.shape[0], x.shape[1]);
    let n = usize::try_from(ctx.int("sample_size", 1)?)
        .map_err(|_| OpFail::Invalid("sample_size must be >= 1".into()))?;
    let dtype = dtype_attr(ctx, DataType::I32)?;
    let seed = seed_of(ctx)?;
    let logits = x.to_f32_vec()?;
    let mut idx = vec![0i64; b * n];
    for r in 0..b {
        let row = &logits[r * k..(r + 1) * k];
        let m = row
            .iter()
            .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
        let mut cdf = Vec::with_capacity(k);
        let mut acc = 0.0;
        for &v in row {
            acc += (f64::from(v) - m).exp();
            cdf.push(acc);
        }
        for s in 0..n {
            let u = unit(seed, (r * n + s) as u64, 0) * acc;
            let c = cdf.partition_point(|&c| c <= u).min(k.saturating_sub(1));
            idx[r * n + s] = c as i64;
        }
    }
    let out = match dtype {
        DataType::I64 => ctx.from_vec(&[b, n], &idx)?,
        DataType::I32 => {
            let v: Vec<i32> = idx.iter().map(|&i| i as i32).collect();
            ctx.from_vec(&[b, n], &v)?
        }
        d => return fail(format!("Multinomial dtype must be int32 or int64, got {d}")),
    };
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::unit;

    #[test]
    fn uniform_draws_are_uniform_and_independent_of_order() {
        let n = 200_000u64;
        let draws: Vec<f64> = (0..n).map(|i| unit(7, i, 0)).collect();
        let mean = draws.iter().sum::<f64>() / n as f64;
        let var = draws.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!((mean - 0.5).abs() < 0.005, "mean {mean}");
        assert!((var - 1.0 / 12.0).abs() < 0.002, "variance {var}");
        // Kolmogorov-Smirnov distance against U(0, 1).
        let mut s = draws.clone();
        s.sort_by(f64::total_cmp);
        let d = s
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                ((i + 1) as f64 / n as f64 - x)
                    .abs()
                    .max((x - i as f64 / n as f64).abs())
            })
            .fold(0.0, f64::max);
        assert!(d < 1.63 / (n as f64).sqrt(), "KS distance {d}");
        // A draw is a function of (seed, index) only: computing a slice alone gives the same bits.
        let slice: Vec<f64> = (1000..1010).map(|i| unit(7, i, 0)).collect();
        assert_eq!(&draws[1000..1010], slice.as_slice());
        assert_ne!(unit(7, 5, 0), unit(8, 5, 0));
    }
}
