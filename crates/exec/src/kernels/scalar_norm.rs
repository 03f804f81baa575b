//! Kernels computed per element in f64 over [`Real`] types, with no scratch: LpNormalization, LRN,
//! MeanVarianceNormalization, GroupNormalization and Swish.
//!
//! Statistics are sums in index order over the normalized elements (read strided where needed), so
//! each output element depends only on its own group of inputs, never on how the work is split.

use super::real::Real;

/// `(outer, len, inner)` of a shape around axis `a`.
pub fn split_at_axis(shape: &[usize], a: usize) -> (usize, usize, usize) {
    (
        shape[..a].iter().product(),
        shape[a],
        shape[a + 1..].iter().product(),
    )
}

/// LpNormalization along one axis: `x / ||x||_p` (p = 1 or 2), 0 where the norm is 0.
pub fn lp_normalize<T: Real>(
    x: &[T],
    (outer, len, inner): (usize, usize, usize),
    p: i64,
    y: &mut [T],
) {
    for o in 0..outer {
        for q in 0..inner {
            let at = |k: usize| (o * len + k) * inner + q;
            let s: f64 = (0..len)
                .map(|k| {
                    let v = x[at(k)].get().abs();
                    if p == 1 {
                        v
                    } else {
                        v * v
                    }
                })
                .sum();
            let norm = if p == 1 { s } else { s.sqrt() };
            for k in 0..len {
                y[at(k)] = T::put(if norm == 0.0 {
                    0.0
                } else {
                    x[at(k)].get() / norm
                });
            }
        }
    }
}

/// LRN over `[N, C, rest..]`: `x / (bias + alpha/size * sum of x^2 over the channel window)^beta`,
/// the window `[c - floor((size-1)/2), c + ceil((size-1)/2)]` clipped to the channels.
pub fn lrn<T: Real>(
    x: &[T],
    (n, c, plane): (usize, usize, usize),
    size: usize,
    (alpha, beta, bias): (f64, f64, f64),
    y: &mut [T],
) {
    let before = (size - 1) / 2;
    let after = size - 1 - before;
    for b in 0..n {
        for ch in 0..c {
            let lo = ch.saturating_sub(before);
            let hi = (ch + after).min(c - 1);
            for i in 0..plane {
                let at = |k: usize| (b * c + k) * plane + i;
                let sq: f64 = (lo..=hi).map(|k| x[at(k)].get().powi(2)).sum();
                let v = x[at(ch)].get();
                y[at(ch)] = T::put(v / (bias + alpha / size as f64 * sq).powf(beta));
            }
        }
    }
}

/// Element offsets of the normalized group of the outer position `o`, in index order: the axes
/// marked in `red` vary, the others are fixed by `o` (row-major over the kept axes).
fn group_offsets<'a>(
    shape: &'a [usize],
    red: &'a [bool],
    o: usize,
) -> impl Iterator<Item = usize> + 'a {
    let rank = shape.len();
    let strides = super::elementwise::strides_of(shape);
    let mut base = 0;
    let mut t = o;
    for a in (0..rank).rev() {
        if !red[a] {
            base += (t % shape[a]) * strides[a];
            t /= shape[a];
        }
    }
    let m: usize = (0..rank).filter(|&a| red[a]).map(|a| shape[a]).product();
    (0..m).map(move |mut r| {
        let mut off = base;
        for a in (0..rank).rev() {
            if red[a] {
                off += (r % shape[a]) * strides[a];
                r /= shape[a];
            }
        }
        off
    })
}

/// MeanVarianceNormalization over the axes marked in `red`: `(x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9)`.
pub fn mvn<T: Real>(x: &[T], shape: &[usize], red: &[bool], y: &mut [T]) {
    let groups: usize = (0..shape.len())
        .filter(|&a| !red[a])
        .map(|a| shape[a])
        .product();
    let m: usize = (0..shape.len())
        .filter(|&a| red[a])
        .map(|a| shape[a])
        .product();
    if m == 0 {
        return;
    }
    for o in 0..groups {
        let (mut s, mut s2) = (0.0f64, 0.0f64);
        for off in group_offsets(shape, red, o) {
            let v = x[off].get();
            s += v;
            s2 += v * v;
        }
        let mean = s / m as f64;
        let std = (s2 / m as f64 - mean * mean).max(0.0).sqrt();
        for off in group_offsets(shape, red, o) {
            y[off] = T::put((x[off].get() - mean) / (std + 1e-9));
        }
    }
}

/// GroupNormalization over `[N, C, rest..]` with `g` groups of `C/g` channels:
/// `scale[c] * (x - mean) / sqrt(var + eps) + bias[c]`, the statistics two-pass per (n, group);
/// `per_group` scale/bias have one entry per group instead of per channel.
#[allow(clippy::too_many_arguments)]
pub fn group_norm<T: Real>(
    x: &[T],
    (n, c, plane): (usize, usize, usize),
    g: usize,
    scale: &[T],
    bias: &[T],
    per_group: bool,
    eps: f64,
    y: &mut [T],
) {
    let cg = c / g;
    let len = cg * plane;
    if len == 0 {
        return;
    }
    for b in 0..n {
        for gi in 0..g {
            let base = (b * c + gi * cg) * plane;
            let xs = &x[base..base + len];
            let mean = xs.iter().map(|v| v.get()).sum::<f64>() / len as f64;
            let var = xs.iter().map(|v| (v.get() - mean).powi(2)).sum::<f64>() / len as f64;
            let inv = 1.0 / (var + eps).sqrt();
            for k in 0..cg {
                let pc = if per_group { gi } else { gi * cg + k };
                let (sc, bi) = (scale[pc].get(), bias[pc].get());
                for i in 0..plane {
                    let at = base + k * plane + i;
                    y[at] = T::put(sc * (x[at].get() - mean) * inv + bi);
                }
            }
        }
    }
}

/// Swish: `x * sigmoid(alpha * x)`.
pub fn swish<T: Real>(x: &[T], alpha: f64, y: &mut [T]) {
    for (o, v) in y.iter_mut().zip(x) {
        let v = v.get();
        *o = T::put(v / (1.0 + (-alpha * v).exp()));
    }
}
