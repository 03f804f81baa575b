//! Signal ops: the window functions `HannWindow`, `HammingWindow`, `BlackmanWindow`
//! (`periodic` default 1), `MelWeightMatrix`, `DFT` and `STFT`. Each element is computed in f64
//! from its index alone; a transform line by an FFT (radix 2 while its length is even, the odd part
//! summed directly; exact twiddles from `(k * t) mod n`, looked up in a table of the `n` twiddles
//! made once a node), one line after another: the same arithmetic for a line whichever lines a
//! chunk holds. Scratch: the table and two lines, `6 n` f64 (`ir::ops::signal::transform_scratch`).
//! An inverse onesided DFT sums the Hermitian half directly, lines in parallel (the table alone).

use half::{bf16, f16};
use memplan_ir::DataType;

use super::{fail, opt, req, scalar_i64, unsupported, OpCtx, OpFail, OpFn};
use crate::tensor::{Element, Tensor};

/// `$fill!(T, conv)` for the element type of `$dtype`, `conv` its conversion from f64 (the float
/// types, int64 and int32); `unsupported`, naming `$what`, for any other.
macro_rules! by_out_type {
    ($dtype:expr, $what:expr, $fill:ident) => {
        match $dtype {
            DataType::F32 => $fill!(f32, |v: f64| v as f32),
            DataType::F64 => $fill!(f64, |v: f64| v),
            DataType::F16 => $fill!(f16, f16::from_f64),
            DataType::BF16 => $fill!(bf16, bf16::from_f64),
            DataType::I64 => $fill!(i64, |v: f64| v as i64),
            DataType::I32 => $fill!(i32, |v: f64| v as i32),
            d => return unsupported(format!("{} of {d}", $what)),
        }
    };
}

pub const OPS: &[(&str, OpFn)] = &[
    ("HannWindow", window),
    ("HammingWindow", window),
    ("BlackmanWindow", window),
    ("MelWeightMatrix", mel_weight_matrix),
    ("DFT", dft),
    ("STFT", stft),
];

fn window(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let size = scalar_i64(req(inputs, 0)?, "size")?;
    let Ok(n) = usize::try_from(size) else {
        return fail(format!("size {size} is negative"));
    };
    let code = ctx.int("output_datatype", 1)?;
    let Some(dt) = DataType::from_onnx(code as i32) else {
        return fail(format!("output_datatype {code} is not a data type"));
    };
    let periodic = ctx.int("periodic", 1)? != 0;
    let denom = if periodic { n as f64 } else { n as f64 - 1.0 };
    let op = ctx.node.op.as_str();
    let value = |i: usize| -> f64 {
        let t = std::f64::consts::PI * i as f64 / denom;
        match op {
            "HannWindow" => t.sin() * t.sin(),
            "HammingWindow" => {
                let alpha = 25.0 / 46.0;
                alpha - (2.0 * t).cos() * (1.0 - alpha)
            }
            _ => 0.42 - 0.5 * (2.0 * t).cos() + 0.08 * (4.0 * t).cos(),
        }
    };
    let mut out = ctx.alloc_for_overwrite(dt, &[n])?;
    macro_rules! fill {
        ($t:ty, $conv:expr) => {{
            for (i, d) in out.data_mut::<$t>()?.iter_mut().enumerate() {
                *d = $conv(value(i));
            }
        }};
    }
    by_out_type!(dt, op, fill);
    Ok(vec![out])
}

/// Writes `value(i)` into every element of `out` (a float or integer tensor).
fn fill_with(out: &mut Tensor, value: impl Fn(usize) -> f64, what: &str) -> Result<(), OpFail> {
    macro_rules! fill {
        ($t:ty, $conv:expr) => {{
            for (i, d) in out.data_mut::<$t>()?.iter_mut().enumerate() {
                *d = $conv(value(i));
            }
        }};
    }
    by_out_type!(out.dtype, what, fill);
    Ok(())
}

/// A scalar operand as f64.
fn scalar_f64(t: &Tensor, what: &str) -> Result<f64, OpFail> {
    if t.shape.iter().product::<usize>() != 1 {
        return fail(format!("{what} must hold one element"));
    }
    Ok(match t.dtype {
        DataType::F64 => t.data::<f64>()?[0],
        DataType::F32 | DataType::F16 | DataType::BF16 => t.to_f32_vec()?[0] as f64,
        _ => t.to_i64_vec()?[0] as f64,
    })
}

/// Triangular mel filters, `[dft_length / 2 + 1, num_mel_bins]`: filter `i` rises from bin
/// `f[i]` to `f[i + 1]` and falls to `f[i + 2]`, `f` the `num_mel_bins + 2` points equally spaced
/// on the mel scale between the edges, mapped to DFT bins (as onnx's reference computes them).
fn mel_weight_matrix(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let bins = scalar_i64(req(inputs, 0)?, "num_mel_bins")?;
    let len = scalar_i64(req(inputs, 1)?, "dft_length")?;
    let rate = scalar_i64(req(inputs, 2)?, "sample_rate")?;
    let lo = scalar_f64(req(inputs, 3)?, "lower_edge_hertz")?;
    let hi = scalar_f64(req(inputs, 4)?, "upper_edge_hertz")?;
    if bins < 1 || len < 1 || rate < 1 {
        return fail("num_mel_bins, dft_length and sample_rate must be >= 1");
    }
    let code = ctx.int("output_datatype", 1)?;
    let Some(dt) = DataType::from_onnx(code as i32) else {
        return fail(format!("output_datatype {code} is not a data type"));
    };
    let (nb, spec) = (bins as usize, (len / 2 + 1) as usize);
    let mel = |hz: f64| 2595.0 * (hz / 700.0).ln_1p() / std::f64::consts::LN_10;
    let (lo_mel, hi_mel) = (mel(lo), mel(hi));
    let step = (hi_mel - lo_mel) / (nb + 2) as f64;
    let point = |i: usize| -> i64 {
        let m = i as f64 * step + lo_mel;
        let hz = 700.0 * (m / 2595.0 * std::f64::consts::LN_10).exp_m1();
        (((len + 1) as f64 * hz) / rate as f64).floor() as i64
    };
    let value = |idx: usize| -> f64 {
        let (j, i) = ((idx / nb) as i64, idx % nb);
        let (l, c, h) = (point(i), point(i + 1), point(i + 2));
        // The falling edge is written after the rising one (it wins at the centre).
        if h > c && (c..h).contains(&j) {
            return (h - j) as f64 / (h - c) as f64;
        }
        if c == l {
            return if j == c { 1.0 } else { 0.0 };
        }
        if (l..=c).contains(&j) {
            return (j - l) as f64 / (c - l) as f64;
        }
        0.0
    };
    let mut out = ctx.alloc_for_overwrite(dt, &[spec, nb])?;
    fill_with(&mut out, value, "MelWeightMatrix")?;
    Ok(vec![out])
}

/// `e^{sign * 2 pi i * m / n}` with `m` reduced mod `n` (exact for every `k * t`).
fn twiddle(m: usize, n: usize, sign: f64) -> (f64, f64) {
    let a = 2.0 * std::f64::consts::PI * (m % n) as f64 / n as f64;
    (a.cos(), sign * a.sin())
}

/// Reads element `i` of a float tensor's data as f64.
fn reader<T: Element + Copy + Into<f64>>(d: &[T]) -> impl Fn(usize) -> f64 + '_ {
    move |i| d[i].into()
}

/// [`twiddle`]`(m, n, sign)` for every `m` in `0..n`, made once for a transform's lines, in counted
/// scratch (`2 n` f64).
fn twiddles(ctx: &OpCtx, n: usize, sign: f64) -> Result<crate::mem::ScratchBuf<f64>, OpFail> {
    let mut tw = ctx.scratch::<f64>(2 * n)?;
    for (m, w) in tw.as_mut_slice().chunks_exact_mut(2).enumerate() {
        (w[0], w[1]) = twiddle(m, n, sign);
    }
    Ok(tw)
}

/// Writes every line of `c_out` (1 or 2) elements of `out` from `line(i)` (real, imaginary; the
/// real part alone when `c_out` is 1), lines in parallel where `terms` per line make it worth it.
fn fill_lines(
    out: &mut Tensor,
    c_out: usize,
    terms: usize,
    line: impl Fn(usize) -> (f64, f64) + Sync,
    what: &str,
) -> Result<(), OpFail> {
    // About 64 Ki terms a task.
    let per_task = (1usize << 16).div_ceil(terms.max(1));
    macro_rules! fill {
        ($t:ty, $conv:expr) => {{
            let data = out.data_mut::<$t>()?;
            let lines = data.len() / c_out.max(1);
            let par = (lines.saturating_mul(terms) >= 1 << 16).then_some(per_task);
            crate::kernels::par::row_blocks(data, c_out, par, |l0, chunk| {
                for (j, row) in chunk.chunks_mut(c_out).enumerate() {
                    let (re, im) = line(l0 + j);
                    row[0] = $conv(re);
                    if let Some(d) = row.get_mut(1) {
                        *d = $conv(im);
                    }
                }
            });
        }};
    }
    by_out_type!(out.dtype, what, fill);
    Ok(())
}

/// The DFT of the `n = out.len() / 2` complex samples `x[0], x[s], x[2s], ..` (interleaved f64)
/// into `out`, with `w_n^j = tw[j * ts]` (`tw` the table of `n * ts` twiddles): split into even and
/// odd samples while `n` is even (radix 2, decimation in time), an odd length summed directly
/// (`(t * k) mod n` in index order). The same arithmetic for a line wherever it is.
fn fft(x: &[f64], s: usize, out: &mut [f64], tw: &[f64], ts: usize) {
    let n = out.len() / 2;
    if n % 2 == 1 || n == 0 {
        for k in 0..n {
            let (mut re, mut im, mut m) = (0.0, 0.0, 0);
            for t in 0..n {
                let (xr, xi) = (x[2 * t * s], x[2 * t * s + 1]);
                let (wr, wi) = (tw[2 * m * ts], tw[2 * m * ts + 1]);
                re += xr * wr - xi * wi;
                im += xr * wi + xi * wr;
                m += k;
                if m >= n {
                    m -= n;
                }
            }
            (out[2 * k], out[2 * k + 1]) = (re, im);
        }
        return;
    }
    let h = n / 2;
    let (e, o) = out.split_at_mut(2 * h);
    fft(x, 2 * s, e, tw, 2 * ts);
    fft(&x[2 * s..], 2 * s, o, tw, 2 * ts);
    for k in 0..h {
        let (wr, wi) = (tw[2 * k * ts], tw[2 * k * ts + 1]);
        let (er, ei) = (e[2 * k], e[2 * k + 1]);
        let (or, oi) = (o[2 * k], o[2 * k + 1]);
        let (br, bi) = (or * wr - oi * wi, or * wi + oi * wr);
        (e[2 * k], e[2 * k + 1]) = (er + br, ei + bi);
        (o[2 * k], o[2 * k + 1]) = (er - br, ei - bi);
    }
}

/// A batch of transforms for [`fill_transforms`]: `count` transforms of `len` points, of which
/// the first `used` samples are read (zero from there on), their first `bins` bins kept, times
/// `scale`; `sign` is the exponent's (-1 forward, 1 inverse); `c_out` is 2 where a bin is written
/// as (real, imaginary), 1 for the real part alone; `what` names the op in errors.
struct Transforms<'a> {
    len: usize,
    used: usize,
    bins: usize,
    sign: f64,
    scale: f64,
    count: usize,
    c_out: usize,
    what: &'a str,
}

/// Fills `out` transform by transform, one after another: `samples(j, t)` is the (real,
/// imaginary) sample `t < used` of transform `j`, and its bin `k < bins` goes to element
/// `at(j, k)` (and the next, the imaginary part, where `c_out` is 2). Scratch: the twiddles and
/// two lines, `6 len` f64, whatever the count.
fn fill_transforms(
    ctx: &OpCtx,
    out: &mut Tensor,
    t: &Transforms,
    samples: impl Fn(usize, usize) -> (f64, f64),
    at: impl Fn(usize, usize) -> usize,
) -> Result<(), OpFail> {
    let Transforms {
        len,
        used,
        bins,
        sign,
        scale,
        count,
        c_out,
        what,
    } = *t;
    let tw = twiddles(ctx, len, sign)?;
    let mut lines = ctx.scratch::<f64>(4 * len)?;
    let (a, b) = lines.as_mut_slice().split_at_mut(2 * len);
    macro_rules! fill {
        ($t:ty, $conv:expr) => {{
            let data = out.data_mut::<$t>()?;
            for j in 0..count {
                for t in 0..len {
                    (a[2 * t], a[2 * t + 1]) = if t < used { samples(j, t) } else { (0.0, 0.0) };
                }
                fft(a, 1, b, tw.as_slice(), 1);
                for k in 0..bins {
                    let e = at(j, k);
                    data[e] = $conv(b[2 * k] * scale);
                    if c_out == 2 {
                        data[e + 1] = $conv(b[2 * k + 1] * scale);
                    }
                }
            }
        }};
    }
    by_out_type!(out.dtype, what, fill);
    Ok(())
}

/// Runs `$body` with `$get` reading `$t`'s elements as f64 (f32, f64, f16, bf16).
macro_rules! with_reader {
    ($t:expr, $get:ident => $body:expr) => {
        match $t.dtype {
            DataType::F32 => {
                let $get = reader($t.data::<f32>()?);
                $body
            }
            DataType::F64 => {
                let $get = reader($t.data::<f64>()?);
                $body
            }
            DataType::F16 => {
                let $get = reader($t.data::<f16>()?);
                $body
            }
            DataType::BF16 => {
                let $get = reader($t.data::<bf16>()?);
                $body
            }
            d => return unsupported(format!("{} of {d}", stringify!($t))),
        }
    };
}

/// DFT along one axis of `[..., n, ..., 1 or 2]` (real or interleaved complex). Forward:
/// `y[k] = sum_t x[t] e^{-2 pi i k t / L}` over the first `L = dft_length` samples (zero-padded);
/// `onesided` keeps bins `0..=L/2`. Inverse: `x[t] = 1/L sum_k y[k] e^{2 pi i k t / L}`; inverse
/// `onesided` reads bins `0..=L/2` of a Hermitian spectrum and gives the real signal (last dim 1).
fn dft(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let r = x.shape.len();
    let c = match x.shape.last() {
        Some(&c @ (1 | 2)) if r >= 2 => c,
        _ => return fail(format!("input must be [..., 1 or 2], got {:?}", x.shape)),
    };
    let axis = if ctx.opset >= 20 {
        match opt(inputs, 2) {
            Some(a) => scalar_i64(a, "axis")?,
            None => -2,
        }
    } else {
        ctx.int("axis", 1)?
    };
    let Some(a) = memplan_ir::ops::signal::dft_axis(axis, r) else {
        return fail(format!("axis {axis} is out of range for rank {r}"));
    };
    let inverse = ctx.int("inverse", 0)? != 0;
    let onesided = ctx.int("onesided", 0)? != 0;
    let n_in = x.shape[a];
    let len = match opt(inputs, 1) {
        Some(t) => {
            let l = scalar_i64(t, "dft_length")?;
            match usize::try_from(l) {
                Ok(l) if l >= 1 => l,
                _ => return fail(format!("dft_length {l} is not >= 1")),
            }
        }
        None if inverse && onesided => {
            if n_in < 2 {
                return fail("an inverse onesided DFT needs at least 2 bins");
            }
            2 * (n_in - 1)
        }
        None => n_in,
    };
    let mut shape = x.shape.clone();
    shape[a] = if onesided && !inverse {
        len / 2 + 1
    } else {
        len
    };
    shape[r - 1] = if inverse && onesided { 1 } else { 2 };
    let (n_out, c_out) = (shape[a], shape[r - 1]);
    let inner: usize = x.shape[a + 1..r - 1].iter().product();
    let mut out = ctx.alloc_for_overwrite(x.dtype, &shape)?;
    let sign = if inverse { 1.0 } else { -1.0 };
    if !(inverse && onesided) {
        // Transform `j` = o * inner + i; its bin `k` is line (o * n_out + k) * inner + i.
        let scale = if inverse { 1.0 / len as f64 } else { 1.0 };
        let (count, used) = (
            x.shape[..a].iter().product::<usize>() * inner,
            n_in.min(len),
        );
        let at = |j: usize, k: usize| ((j / inner * n_out + k) * inner + j % inner) * c_out;
        with_reader!(x, get => fill_transforms(
            ctx,
            &mut out,
            &Transforms {
                len,
                used,
                bins: n_out,
                sign,
                scale,
                count,
                c_out,
                what: "DFT",
            },
            |j, t| {
                let e = ((j / inner * n_in + t) * inner + j % inner) * c;
                (get(e), if c == 2 { get(e + 1) } else { 0.0 })
            },
            at,
        )?);
        return Ok(vec![out]);
    }
    // Inverse onesided: the real signal from bins `0..=L/2` of a Hermitian spectrum, summed
    // directly, lines in parallel. Output line `l` = (o * n_out + k) * inner + i.
    let tw = twiddles(ctx, len, sign)?;
    let tw = tw.as_slice();
    let line = |get: &(dyn Fn(usize) -> f64 + Sync), l: usize| -> (f64, f64) {
        let i = l % inner;
        let k = l / inner % n_out;
        let o = l / inner / n_out;
        let m = (len / 2 + 1).min(n_in);
        let mut re = 0.0;
        let mut tk = 0;
        for q in 0..m {
            let at = ((o * n_in + q) * inner + i) * c;
            let (xr, xi) = (get(at), if c == 2 { get(at + 1) } else { 0.0 });
            let (wr, wi) = (tw[2 * tk], tw[2 * tk + 1]);
            let w = if q == 0 || 2 * q == len { 1.0 } else { 2.0 };
            re += w * (xr * wr - xi * wi);
            tk = (tk + k) % len;
        }
        (re / len as f64, 0.0)
    };
    let terms = (len / 2 + 1).min(n_in);
    with_reader!(x, get => fill_lines(&mut out, c_out, terms, |l| line(&get, l), "DFT")?);
    Ok(vec![out])
}

/// Short-time Fourier transform of `[batch, length, 1 or 2]`: frame `f` is the `frame_length`
/// samples from `f * frame_step`, times the window (ones without one), transformed like `DFT`
/// (`onesided`, default 1, keeps bins `0..=frame_length/2`). Output `[batch, frames, bins, 2]`.
fn stft(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let c = match x.shape.as_slice() {
        [_, _, c @ (1 | 2)] => *c,
        s => return fail(format!("signal must be [batch, length, 1 or 2], got {s:?}")),
    };
    let step = scalar_i64(req(inputs, 1)?, "frame_step")?;
    let window = opt(inputs, 2);
    if let Some(w) = window {
        if w.shape.len() != 1 {
            return fail(format!("window must have rank 1, got {:?}", w.shape));
        }
    }
    let fl = match (opt(inputs, 3), window) {
        (Some(t), w) => {
            let l = scalar_i64(t, "frame_length")?;
            if w.is_some_and(|w| w.shape[0] as i64 != l) {
                return fail(format!("frame_length {l} differs from the window's length"));
            }
            l
        }
        (None, Some(w)) => w.shape[0] as i64,
        (None, None) => return fail("STFT needs a window or a frame_length"),
    };
    let (batch, n) = (x.shape[0], x.shape[1]);
    if step < 1 || fl < 1 || fl as usize > n {
        return fail(format!(
            "frame_step {step} and frame_length {fl} must be >= 1, the frame at most {n} long"
        ));
    }
    let (step, fl) = (step as usize, fl as usize);
    let onesided = ctx.int("onesided", 1)? != 0;
    if onesided && c == 2 {
        return fail("onesided STFT needs a real signal");
    }
    let frames = 1 + (n - fl) / step;
    let bins = if onesided { fl / 2 + 1 } else { fl };
    let mut out = ctx.alloc_for_overwrite(x.dtype, &[batch, frames, bins, 2])?;
    // Transform `j` = b * frames + f; its bin `k` is element (j * bins + k) * 2.
    let fill = |get: &dyn Fn(usize) -> f64, win: &dyn Fn(usize) -> f64, out: &mut Tensor| {
        fill_transforms(
            ctx,
            out,
            &Transforms {
                len: fl,
                used: fl,
                bins,
                sign: -1.0,
                scale: 1.0,
                count: batch * frames,
                c_out: 2,
                what: "STFT",
            },
            |j, t| {
                let e = ((j / frames) * n + (j % frames) * step + t) * c;
                let w = win(t);
                (w * get(e), if c == 2 { w * get(e + 1) } else { 0.0 })
            },
            |j, k| (j * bins + k) * 2,
        )
    };
    match window {
        Some(w) => with_reader!(w, win => with_reader!(x, get => fill(&get, &win, &mut out)?)),
        None => with_reader!(x, get => fill(&get, &|_| 1.0, &mut out)?),
    }
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::{fft, twiddle};

    /// The FFT of every length kind (one point, powers of two, odd lengths summed directly, even
    /// lengths with an odd part, a prime) against the direct f64 sum with exact twiddles, in both
    /// directions; and a line's result is the same wherever the line sits in a longer signal.
    #[test]
    fn fft_matches_the_direct_sum() {
        for n in [1usize, 2, 3, 4, 6, 12, 15, 16, 40, 64, 97, 200, 400] {
            for sign in [-1.0, 1.0] {
                let tw: Vec<f64> = (0..n)
                    .flat_map(|m| {
                        let (a, b) = twiddle(m, n, sign);
                        [a, b]
                    })
                    .collect();
                let x: Vec<f64> = (0..2 * n)
                    .map(|i| ((i * 37 % 101) as f64 - 50.0) / 17.0)
                    .collect();
                let mut got = vec![0.0; 2 * n];
                fft(&x, 1, &mut got, &tw, 1);
                for k in 0..n {
                    let (mut re, mut im) = (0.0, 0.0);
                    for t in 0..n {
                        let (wr, wi) = twiddle(t * k, n, sign);
                        re += x[2 * t] * wr - x[2 * t + 1] * wi;
                        im += x[2 * t] * wi + x[2 * t + 1] * wr;
                    }
                    let tol = 1e-12 * n as f64 * 50.0;
                    assert!(
                        (got[2 * k] - re).abs() < tol && (got[2 * k + 1] - im).abs() < tol,
                        "n={n} sign={sign} bin {k}: ({}, {}) vs ({re}, {im})",
                        got[2 * k],
                        got[2 * k + 1]
                    );
                }
                // The same line inside a longer buffer, read with its offset: the same bits.
                let mut padded = vec![9.0; 6];
                padded.extend(&x);
                let mut again = vec![0.0; 2 * n];
                fft(&padded[6..], 1, &mut again, &tw, 1);
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    again.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                );
            }
        }
    }
}
