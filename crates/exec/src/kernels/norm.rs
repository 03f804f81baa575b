//! Kernels: Softmax/LogSoftmax (opset 13, one axis), LayerNormalization, RMSNormalization,
//! InstanceNormalization and BatchNormalization (inference).
//!
//! Every statistic is computed from one contiguous sequence (gathered first when strided) with the
//! canonical fold of [`super::reduce::fold_lanes`], so results depend only on the normalized extent and
//! never on which rows are computed together: slicing along any other axis is bit-identical.
//! Means and variances are two-pass (`mean`, then `mean((x - mean)^2)`), which is more accurate than
//! onnxruntime's one-pass `E[x^2] - E[x]^2` and agrees with it to well within rtol 1e-4 on ordinary data.

use super::matmul::{check_len, shape_err, KResult, KernelError};
use super::reduce::{fold_lanes, max_seq, normalize_axes, sum_seq, ReduceElem};
use std::ops::{Add, Div, Mul, Sub};

/// Floating-point element types the normalizations run on (computed in the type itself).
pub trait Float:
    ReduceElem + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self>
{
    /// The maximum Softmax shifts by: [`max_seq`]'s value, NaN when any element is NaN. (Which
    /// zero a maximum of +-0 has, and which NaN, may differ from `max_seq`; no output can tell.)
    #[inline(always)]
    fn row_max(x: &[Self]) -> Self {
        max_seq(x)
    }
}
impl Float for f32 {
    /// Branch-free, so that it vectorizes: lane-wise `>` selects plus a NaN flag.
    #[inline(always)]
    fn row_max(x: &[f32]) -> f32 {
        let mut acc = [f32::NEG_INFINITY; 16];
        let mut nan = [false; 16];
        let blocks = x.chunks_exact(16);
        let tail = blocks.remainder();
        for blk in blocks {
            for l in 0..16 {
                let v = blk[l];
                acc[l] = if v > acc[l] { v } else { acc[l] };
                nan[l] |= v.is_nan();
            }
        }
        let mut m = f32::NEG_INFINITY;
        let mut any_nan = false;
        for (&a, &n) in acc.iter().zip(&nan) {
            m = if a > m { a } else { m };
            any_nan |= n;
        }
        for &v in tail {
            m = if v > m { v } else { m };
            any_nan |= v.is_nan();
        }
        if any_nan {
            f32::NAN
        } else {
            m
        }
    }
}
impl Float for f64 {}

/// Elements per parallel task, by what an element costs (a task is worth a few microseconds: a
/// chunk's slice of a large tensor often holds only a few thousand rows); below one task's worth a
/// kernel stays on the calling thread. Rows are independent, so the split never changes a bit.
/// Cheap per element (normalizations without a transcendental function per element).
const PAR_MIN_ELEMS: usize = 1 << 15;
/// LayerNormalization and RMSNormalization: two passes and a division per element.
const NORM_MIN_ELEMS: usize = 1 << 13;
/// Softmax: an exponential per element (several nanoseconds each).
const SOFTMAX_MIN_ELEMS: usize = 1 << 12;

/// Runs `f(row_index, in_row, out_row)` over rows of length `len`, in parallel for large inputs.
fn par_rows<T: Float>(
    x: &[T],
    out: &mut [T],
    len: usize,
    min: usize,
    f: impl Fn(usize, &[T], &mut [T]) + Sync,
) {
    par_row_chunks(x, out, len, min, |r0, xc, oc| {
        for (i, (xi, oi)) in xc
            .chunks_exact(len)
            .zip(oc.chunks_exact_mut(len))
            .enumerate()
        {
            f(r0 + i, xi, oi);
        }
    });
}

/// Runs `f(first_row, in_rows, out_rows)` over blocks of whole rows of length `len`, in parallel
/// from `min` elements (tasks of at least `min / 2`).
fn par_row_chunks<T: Float>(
    x: &[T],
    out: &mut [T],
    len: usize,
    min: usize,
    f: impl Fn(usize, &[T], &mut [T]) + Sync,
) {
    if len == 0 {
        return;
    }
    let rows = x.len() / len;
    let rpt = min
        .div_ceil(2 * len)
        .max(rows.div_ceil(rayon::current_num_threads() * 8));
    let rpt = (x.len() >= min).then_some(rpt);
    super::par::row_blocks(out, len, rpt, |r0, oc| {
        f(r0, &x[r0 * len..r0 * len + oc.len()], oc)
    });
}

/// Softmax (or LogSoftmax) of one contiguous sequence.
#[inline(always)]
pub fn softmax_seq<T: Float>(x: &[T], out: &mut [T], log: bool) {
    let m = T::row_max(x);
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (v - m).exp();
    }
    let s = sum_seq(out);
    if log {
        let ls = s.ln();
        for (o, &v) in out.iter_mut().zip(x) {
            *o = (v - m) - ls;
        }
    } else {
        for o in out.iter_mut() {
            *o = *o / s;
        }
    }
}

/// Softmax (or LogSoftmax) of consecutive rows of length `d`, compiled for AVX2 where the CPU has
/// it (the same operations, so the same bits, as the baseline version).
fn softmax_block<T: Float>(x: &[T], out: &mut [T], d: usize, log: bool) {
    #[inline(always)]
    fn body<T: Float>(x: &[T], out: &mut [T], d: usize, log: bool) {
        for (xi, oi) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
            softmax_seq(xi, oi, log);
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        unsafe fn wide<T: Float>(x: &[T], out: &mut [T], d: usize, log: bool) {
            body(x, out, d, log)
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { wide(x, out, d, log) };
        }
    }
    body(x, out, d, log)
}

/// One LayerNormalization row; returns its mean and inverse standard deviation.
#[inline(always)]
fn layer_norm_row<T: Float>(
    xi: &[T],
    oi: &mut [T],
    eps: T,
    scale: &[T],
    bias: Option<&[T]>,
) -> (T, T) {
    let (mean, inv) = mean_inv_std(xi, eps);
    let n = xi.len();
    // Per-element scale and bias (the common case) as straight zipped loops the compiler
    // vectorizes; a broadcast single element falls back to indexing. Same formula either way.
    match bias {
        Some(b) if scale.len() == n && b.len() == n => {
            for (((o, &v), &s), &c) in oi.iter_mut().zip(xi).zip(scale).zip(b) {
                *o = (v - mean) * inv * s + c;
            }
        }
        None if scale.len() == n => {
            for ((o, &v), &s) in oi.iter_mut().zip(xi).zip(scale) {
                *o = (v - mean) * inv * s;
            }
        }
        _ => {
            for (j, (o, &v)) in oi.iter_mut().zip(xi).enumerate() {
                let y = (v - mean) * inv * param(scale, j);
                *o = match bias {
                    Some(b) => y + param(b, j),
                    None => y,
                };
            }
        }
    }
    (mean, inv)
}

/// LayerNormalization of consecutive rows of length `n`, multiversioned like [`softmax_block`].
fn layer_norm_block<T: Float>(
    x: &[T],
    out: &mut [T],
    n: usize,
    eps: T,
    scale: &[T],
    bias: Option<&[T]>,
) {
    #[inline(always)]
    fn body<T: Float>(x: &[T], out: &mut [T], n: usize, eps: T, scale: &[T], bias: Option<&[T]>) {
        for (xi, oi) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
            layer_norm_row(xi, oi, eps, scale, bias);
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        unsafe fn wide<T: Float>(
            x: &[T],
            out: &mut [T],
            n: usize,
            eps: T,
            scale: &[T],
            bias: Option<&[T]>,
        ) {
            body(x, out, n, eps, scale, bias)
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { wide(x, out, n, eps, scale, bias) };
        }
    }
    body(x, out, n, eps, scale, bias)
}

/// Splits `shape` at `axis` into `(outer, d, inner)`.
fn split3(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

/// ONNX Softmax / LogSoftmax (opset 13: along the single axis `axis`). `out` has the input's shape.
pub fn softmax<T: Float>(
    x: &[T],
    shape: &[usize],
    axis: i64,
    log: bool,
    out: &mut [T],
) -> KResult<()> {
    check_len("Softmax input", x.len(), shape)?;
    check_len("Softmax output", out.len(), shape)?;
    if shape.is_empty() {
        // A scalar is a sequence of one element.
        softmax_seq(x, out, log);
        return Ok(());
    }
    let axis = normalize_axes(shape.len(), &[axis])?[0];
    let (_, d, inner) = split3(shape, axis);
    if inner == 1 {
        par_row_chunks(x, out, d, SOFTMAX_MIN_ELEMS, |_, xc, oc| {
            softmax_block(xc, oc, d, log)
        });
        return Ok(());
    }
    // Strided axis: gather each sequence, run the same routine, scatter back.
    par_rows(x, out, d * inner, SOFTMAX_MIN_ELEMS, |_, xi, oi| {
        let mut sx = vec![T::ZERO; d];
        let mut so = vec![T::ZERO; d];
        for i in 0..inner {
            for (j, v) in sx.iter_mut().enumerate() {
                *v = xi[j * inner + i];
            }
            softmax_seq(&sx, &mut so, log);
            for (j, v) in so.iter().enumerate() {
                oi[j * inner + i] = *v;
            }
        }
    });
    Ok(())
}

/// Softmax on f32.
pub fn softmax_f32(x: &[f32], shape: &[usize], axis: i64, out: &mut [f32]) -> KResult<()> {
    softmax(x, shape, axis, false, out)
}

/// LogSoftmax on f32.
pub fn log_softmax_f32(x: &[f32], shape: &[usize], axis: i64, out: &mut [f32]) -> KResult<()> {
    softmax(x, shape, axis, true, out)
}

/// Mean and `1 / sqrt(var + eps)` of a sequence (two-pass, canonical fold order).
#[inline(always)]
pub fn mean_inv_std<T: Float>(x: &[T], eps: T) -> (T, T) {
    let mean = sum_seq(x).div_count(x.len());
    let var = fold_lanes(
        x,
        |v| (v - mean) * (v - mean),
        <T as ReduceElem>::add,
        T::ZERO,
    )
    .div_count(x.len());
    (mean, T::ONE / (var + eps).sqrt())
}

/// Checks a per-normalized-element parameter: `n` elements or a single broadcast one.
fn check_param(what: &str, p: &[impl Copy], n: usize) -> KResult<()> {
    if p.len() == n || p.len() == 1 {
        Ok(())
    } else {
        Err(shape_err(format!(
            "{what} has {} elements, expected {n} or 1",
            p.len()
        )))
    }
}

#[inline(always)]
fn param<T: Copy>(p: &[T], i: usize) -> T {
    if p.len() == 1 {
        p[0]
    } else {
        p[i]
    }
}

/// Optional statistics outputs of LayerNormalization, one value per normalized row.
#[derive(Debug, Default)]
pub struct NormStats<'a, T> {
    /// Mean output (shape `x.shape[..axis] + [1; rank - axis]`).
    pub mean: Option<&'a mut [T]>,
    /// InvStdDev output (same shape as `mean`).
    pub inv_std: Option<&'a mut [T]>,
}

/// ONNX LayerNormalization over axes `axis..rank`: `y = (x - mean) * inv_std * scale + bias`.
/// `scale`/`bias` hold the normalized size or one element; `stats` receives Mean/InvStdDev.
pub fn layer_norm<T: Float>(
    x: &[T],
    shape: &[usize],
    axis: i64,
    epsilon: T,
    scale: &[T],
    bias: Option<&[T]>,
    out: &mut [T],
    stats: NormStats<'_, T>,
) -> KResult<()> {
    check_len("LayerNormalization input", x.len(), shape)?;
    check_len("LayerNormalization output", out.len(), shape)?;
    if shape.is_empty() {
        return Err(shape_err("LayerNormalization needs rank >= 1"));
    }
    let axis = normalize_axes(shape.len(), &[axis])?[0];
    let n: usize = shape[axis..].iter().product();
    let rows: usize = shape[..axis].iter().product();
    check_param("LayerNormalization scale", scale, n)?;
    if let Some(b) = bias {
        check_param("LayerNormalization bias", b, n)?;
    }
    for s in [&stats.mean, &stats.inv_std].into_iter().flatten() {
        if s.len() != rows {
            return Err(shape_err(format!(
                "LayerNormalization stats output needs {rows} elements"
            )));
        }
    }
    if n == 0 {
        return Ok(());
    }
    let row = |xi: &[T], oi: &mut [T]| layer_norm_row(xi, oi, epsilon, scale, bias);
    if stats.mean.is_none() && stats.inv_std.is_none() {
        par_row_chunks(x, out, n, NORM_MIN_ELEMS, |_, xc, oc| {
            layer_norm_block(xc, oc, n, epsilon, scale, bias)
        });
    } else {
        // Sequential, writing each row's statistics straight into the stats outputs (no buffer).
        let (mut mean, mut inv) = (stats.mean, stats.inv_std);
        for (r, (xi, oi)) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)).enumerate() {
            let (m, v) = row(xi, oi);
            if let Some(s) = mean.as_deref_mut() {
                s[r] = m;
            }
            if let Some(s) = inv.as_deref_mut() {
                s[r] = v;
            }
        }
    }
    Ok(())
}

/// RMSNormalization over axes `axis..rank`: `y = x / sqrt(mean(x^2) + eps) * scale`.
pub fn rms_norm<T: Float>(
    x: &[T],
    shape: &[usize],
    axis: i64,
    epsilon: T,
    scale: &[T],
    out: &mut [T],
) -> KResult<()> {
    check_len("RMSNormalization input", x.len(), shape)?;
    check_len("RMSNormalization output", out.len(), shape)?;
    if shape.is_empty() {
        return Err(shape_err("RMSNormalization needs rank >= 1"));
    }
    let axis = normalize_axes(shape.len(), &[axis])?[0];
    let n: usize = shape[axis..].iter().product();
    check_param("RMSNormalization scale", scale, n)?;
    par_rows(x, out, n, NORM_MIN_ELEMS, |_, xi, oi| {
        let ms = fold_lanes(xi, |v| v * v, <T as ReduceElem>::add, T::ZERO).div_count(n);
        let inv = T::ONE / (ms + epsilon).sqrt();
        for (j, (o, &v)) in oi.iter_mut().zip(xi).enumerate() {
            *o = v * inv * param(scale, j);
        }
    });
    Ok(())
}

fn check_nc(what: &str, shape: &[usize], params: &[(&str, usize)]) -> KResult<(usize, usize)> {
    if shape.len() < 2 {
        return Err(shape_err(format!(
            "{what} needs an input of rank >= 2, got {shape:?}"
        )));
    }
    for &(name, len) in params {
        if len != shape[1] {
            return Err(shape_err(format!(
                "{what}: {name} has {len} elements, channels are {}",
                shape[1]
            )));
        }
    }
    Ok((shape[1], shape[2..].iter().product()))
}

/// InstanceNormalization: per (n, c) over the spatial axes, `y = (x - mean) * inv_std * scale[c] + b[c]`.
pub fn instance_norm<T: Float>(
    x: &[T],
    shape: &[usize],
    scale: &[T],
    b: &[T],
    epsilon: T,
    out: &mut [T],
) -> KResult<()> {
    check_len("InstanceNormalization input", x.len(), shape)?;
    check_len("InstanceNormalization output", out.len(), shape)?;
    let (c, sp) = check_nc(
        "InstanceNormalization",
        shape,
        &[("scale", scale.len()), ("B", b.len())],
    )?;
    par_rows(x, out, sp, PAR_MIN_ELEMS, |r, xi, oi| {
        let ch = r % c;
        let (mean, inv) = mean_inv_std(xi, epsilon);
        for (o, &v) in oi.iter_mut().zip(xi) {
            *o = (v - mean) * inv * scale[ch] + b[ch];
        }
    });
    Ok(())
}

/// BatchNormalization in inference mode: `y = (x - mean[c]) * (scale[c] / sqrt(var[c] + eps)) + b[c]`.
pub fn batch_norm<T: Float>(
    x: &[T],
    shape: &[usize],
    scale: &[T],
    b: &[T],
    mean: &[T],
    var: &[T],
    epsilon: T,
    out: &mut [T],
) -> KResult<()> {
    check_len("BatchNormalization input", x.len(), shape)?;
    check_len("BatchNormalization output", out.len(), shape)?;
    let (c, sp) = check_nc(
        "BatchNormalization",
        shape,
        &[
            ("scale", scale.len()),
            ("B", b.len()),
            ("mean", mean.len()),
            ("var", var.len()),
        ],
    )?;
    par_rows(x, out, sp, PAR_MIN_ELEMS, |r, xi, oi| {
        let ch = r % c;
        let k = scale[ch] / (var[ch] + epsilon).sqrt();
        let (m, bb) = (mean[ch], b[ch]);
        for (o, &v) in oi.iter_mut().zip(xi) {
            *o = (v - m) * k + bb;
        }
    });
    Ok(())
}

/// Rejects attribute values these kernels do not implement (e.g. BatchNormalization training mode).
pub fn check_batch_norm_training(training_mode: bool) -> KResult<()> {
    if training_mode {
        Err(KernelError::Unsupported(
            "BatchNormalization training_mode=1".into(),
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::matmul::testutil::*;
    use super::*;
    use proptest::prelude::*;

    fn close(a: f32, b: f64, tol: f64) -> bool {
        (a as f64 - b).abs() <= tol * b.abs().max(1.0)
    }

    #[test]
    fn softmax_hand_and_naive() {
        let x = [1.0f32, 2.0, 3.0];
        let mut y = [0.0f32; 3];
        softmax_f32(&x, &[3], 0, &mut y).unwrap();
        let e: Vec<f64> = x.iter().map(|&v| (v as f64).exp()).collect();
        let s: f64 = e.iter().sum();
        for i in 0..3 {
            assert!(close(y[i], e[i] / s, 1e-6));
        }
        log_softmax_f32(&x, &[3], -1, &mut y).unwrap();
        for i in 0..3 {
            assert!(close(y[i], (e[i] / s).ln(), 1e-6));
        }
        // Axis 0 of a [2, 2]: columns.
        let mut y4 = [0.0f32; 4];
        softmax_f32(&[0.0, 5.0, 0.0, 5.0], &[2, 2], 0, &mut y4).unwrap();
        assert_eq!(y4, [0.5, 0.5, 0.5, 0.5]);
        assert!(softmax_f32(&x, &[3], 1, &mut y).is_err());
        assert!(softmax_f32(&x, &[2], 0, &mut y).is_err());
    }

    #[test]
    fn layer_norm_hand_and_stats() {
        let x = [1.0f32, 2.0, 3.0, 4.0, 10.0, 10.0, 10.0, 10.0];
        let mut y = [0.0f32; 8];
        let mut mean = [0.0f32; 2];
        let mut inv = [0.0f32; 2];
        let scale = [1.0f32, 1.0, 2.0, 2.0];
        let bias = [0.0f32, 0.0, 0.0, 1.0];
        let stats = NormStats {
            mean: Some(&mut mean),
            inv_std: Some(&mut inv),
        };
        layer_norm(&x, &[2, 4], -1, 0.0, &scale, Some(&bias), &mut y, stats).unwrap();
        assert_eq!(mean, [2.5, 10.0]);
        let inv0 = 1.0 / 1.25f64.sqrt();
        assert!(close(inv[0], inv0, 1e-6));
        assert!(close(y[0], -1.5 * inv0, 1e-6));
        assert!(close(y[3], 1.5 * inv0 * 2.0 + 1.0, 1e-6));
        let mut y2 = [0.0f32; 8];
        layer_norm(
            &x,
            &[2, 4],
            1,
            0.0,
            &scale,
            Some(&bias),
            &mut y2,
            NormStats::default(),
        )
        .unwrap();
        assert!(same_bits(&y[..4], &y2[..4]));
        assert!(layer_norm(
            &x,
            &[2, 4],
            1,
            0.0,
            &scale[..3],
            None,
            &mut y2,
            NormStats::default()
        )
        .is_err());
    }

    #[test]
    fn rms_instance_batch() {
        let x = [3.0f32, 4.0];
        let mut y = [0.0f32; 2];
        rms_norm(&x, &[1, 2], -1, 0.0, &[1.0], &mut y).unwrap();
        let r = (12.5f64).sqrt();
        assert!(close(y[0], 3.0 / r, 1e-6) && close(y[1], 4.0 / r, 1e-6));
        let xi = [1.0f32, 3.0, 10.0, 20.0];
        let mut yi = [0.0f32; 4];
        instance_norm(&xi, &[1, 2, 2], &[1.0, 2.0], &[0.0, 1.0], 0.0, &mut yi).unwrap();
        assert_eq!(yi, [-1.0, 1.0, -1.0, 3.0]);
        let mut yb = [0.0f32; 4];
        batch_norm(
            &xi,
            &[2, 2],
            &[1.0, 2.0],
            &[0.5, 0.0],
            &[1.0, 2.0],
            &[4.0, 1.0],
            0.0,
            &mut yb,
        )
        .unwrap();
        assert_eq!(yb, [0.5, 2.0, 5.0, 36.0]);
        assert!(batch_norm(&xi, &[2, 2], &[1.0], &[0.5], &[1.0], &[4.0], 0.0, &mut yb).is_err());
        assert!(check_batch_norm_training(true).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn softmax_layernorm_chunk_identity(d0 in 1usize..4, d1 in 1usize..20, d2 in 1usize..40, axis in 0usize..3,
                                            cut in 0usize..1000, seed in 0u64..1000, log in any::<bool>()) {
            let shape = [d0, d1, d2];
            let x: Vec<f32> = rand_vec(d0 * d1 * d2, seed).iter().map(|v| v * 8.0).collect();
            let mut full = vec![0.0f32; x.len()];
            softmax(&x, &shape, axis as i64, log, &mut full).unwrap();
            let scale = rand_vec(shape[axis..].iter().product(), seed + 1);
            let bias = rand_vec(scale.len(), seed + 2);
            let mut lfull = vec![0.0f32; x.len()];
            layer_norm(&x, &shape, axis as i64, 1e-5, &scale, Some(&bias), &mut lfull, NormStats::default()).unwrap();
            for ax in 0..3usize {
                let d = shape[ax];
                let s0 = cut % d;
                let s1 = s0 + (cut / 7) % (d - s0) + 1;
                let xs = slice_axis(&x, &shape, ax, s0, s1);
                let ss = with_dim(&shape, ax, s1 - s0);
                if ax != axis {
                    let mut part = vec![0.0f32; xs.len()];
                    softmax(&xs, &ss, axis as i64, log, &mut part).unwrap();
                    prop_assert!(same_bits(&part, &slice_axis(&full, &shape, ax, s0, s1)));
                }
                if ax < axis {
                    let mut part = vec![0.0f32; xs.len()];
                    layer_norm(&xs, &ss, axis as i64, 1e-5, &scale, Some(&bias), &mut part, NormStats::default()).unwrap();
                    prop_assert!(same_bits(&part, &slice_axis(&lfull, &shape, ax, s0, s1)));
                }
            }
            // Instance/batch norm along N and C (axis 0 and 1), with sliced per-channel parameters.
            let sc = rand_vec(d1, seed + 3);
            let bb = rand_vec(d1, seed + 4);
            let var: Vec<f32> = rand_vec(d1, seed + 5).iter().map(|v| v.abs() + 0.1).collect();
            let mut ifull = vec![0.0f32; x.len()];
            instance_norm(&x, &shape, &sc, &bb, 1e-5, &mut ifull).unwrap();
            let mut bfull = vec![0.0f32; x.len()];
            batch_norm(&x, &shape, &sc, &bb, &bb, &var, 1e-5, &mut bfull).unwrap();
            for ax in 0..2usize {
                let d = shape[ax];
                let s0 = cut % d;
                let s1 = s0 + (cut / 7) % (d - s0) + 1;
                let xs = slice_axis(&x, &shape, ax, s0, s1);
                let ss = with_dim(&shape, ax, s1 - s0);
                let p = |v: &[f32]| if ax == 1 { v[s0..s1].to_vec() } else { v.to_vec() };
                let mut part = vec![0.0f32; xs.len()];
                instance_norm(&xs, &ss, &p(&sc), &p(&bb), 1e-5, &mut part).unwrap();
                prop_assert!(same_bits(&part, &slice_axis(&ifull, &shape, ax, s0, s1)));
                batch_norm(&xs, &ss, &p(&sc), &p(&bb), &p(&bb), &p(&var), 1e-5, &mut part).unwrap();
                prop_assert!(same_bits(&part, &slice_axis(&bfull, &shape, ax, s0, s1)));
            }
        }
    }

    #[test]
    fn layer_norm_matches_f64_reference() {
        let (rows, n) = (7, 300);
        let x: Vec<f32> = rand_vec(rows * n, 9)
            .iter()
            .map(|v| v * 3.0 + 1.0)
            .collect();
        let scale = rand_vec(n, 10);
        let mut y = vec![0.0f32; rows * n];
        layer_norm(
            &x,
            &[rows, n],
            1,
            1e-5,
            &scale,
            None,
            &mut y,
            NormStats::default(),
        )
        .unwrap();
        for r in 0..rows {
            let xr: Vec<f64> = x[r * n..(r + 1) * n].iter().map(|&v| v as f64).collect();
            let m = xr.iter().sum::<f64>() / n as f64;
            let v = xr.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / n as f64;
            for j in 0..n {
                let want = (xr[j] - m) / (v + 1e-5).sqrt() * scale[j] as f64;
                assert!(
                    close(y[r * n + j], want, 1e-4),
                    "{} vs {want}",
                    y[r * n + j]
                );
            }
        }
    }
}
