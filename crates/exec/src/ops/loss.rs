//! Losses: `NegativeLogLikelihoodLoss` and `SoftmaxCrossEntropyLoss` (scores `[N, C, D..]`, labels
//! `[N, D..]`, optional weights `[C]`).
//!
//! Per position `(n, d)` with label `c`: the loss is `-w[c] * x[n, c, d]` (NLL) or `-w[c] *
//! log_softmax(x[n, :, d])[c]` (SCE), 0 where `c == ignore_index`; `w` is 1 without weights.
//! `"sum"` adds them in position order, `"mean"` divides that sum by the sum of the applied weights.
//! Everything is computed in f64 and rounded once into the scores' type; no scratch.

use memplan_ir::DataType;

use super::{fail, opt, req, unsupported, OpCtx, OpFail, OpFn};
use crate::kernels::real::Real;
use crate::tensor::Tensor;

pub const OPS: &[(&str, OpFn)] = &[
    ("NegativeLogLikelihoodLoss", loss),
    ("SoftmaxCrossEntropyLoss", loss),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Reduction {
    None,
    Sum,
    Mean,
}

/// Labels as i64, read element by element.
enum Labels<'a> {
    I32(&'a [i32]),
    I64(&'a [i64]),
}

impl Labels<'_> {
    fn get(&self, i: usize) -> i64 {
        match self {
            Labels::I32(v) => i64::from(v[i]),
            Labels::I64(v) => v[i],
        }
    }
}

fn loss(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, t, w) = (req(inputs, 0)?, req(inputs, 1)?, opt(inputs, 2));
    let sce = ctx.node.op == "SoftmaxCrossEntropyLoss";
    let reduction = match ctx.string("reduction")?.as_deref() {
        None | Some("mean") => Reduction::Mean,
        Some("sum") => Reduction::Sum,
        Some("none") => Reduction::None,
        Some(r) => return fail(format!("reduction '{r}' is not one of none, sum, mean")),
    };
    let ignore = ctx.opt_int("ignore_index")?;
    if x.rank() < 2 {
        return fail(format!("scores must be [N, C, ...], got {:?}", x.shape));
    }
    let (n, c) = (x.shape[0], x.shape[1]);
    let d: usize = x.shape[2..].iter().product();
    let mut lshape = vec![n];
    lshape.extend_from_slice(&x.shape[2..]);
    if t.shape != lshape {
        return fail(format!(
            "labels {:?} do not match scores {:?} without the class axis",
            t.shape, x.shape
        ));
    }
    let labels = match t.dtype {
        DataType::I32 => Labels::I32(t.data::<i32>()?),
        DataType::I64 => Labels::I64(t.data::<i64>()?),
        dt => return fail(format!("labels must be int32 or int64, got {dt}")),
    };
    if let Some(w) = w {
        if w.shape != [c] || w.dtype != x.dtype {
            return fail(format!(
                "weights must be [{c}] of the scores' type, got {} {:?}",
                w.dtype, w.shape
            ));
        }
    }
    let out_shape: Vec<usize> = if reduction == Reduction::None {
        lshape
    } else {
        Vec::new()
    };
    let mut out = ctx.alloc_for_overwrite(x.dtype, &out_shape)?;
    let want_logp = sce && ctx.node.outputs.get(1).is_some_and(|o| o.is_some());
    let mut logp = if want_logp {
        Some(ctx.alloc_for_overwrite(x.dtype, &x.shape)?)
    } else {
        None
    };
    crate::real_dispatch!(
        x.dtype,
        T => {
            let xs = x.data::<T>()?;
            let ws = match w {
                Some(w) => Some(w.data::<T>()?),
                None => None,
            };
            let lp = match logp.as_mut() {
                Some(l) => Some(l.data_mut::<T>()?),
                None => None,
            };
            let o = out.data_mut::<T>()?;
            run::<T>(xs, &labels, ws, (n, c, d), ignore, sce, reduction, o, lp)?
        },
        return unsupported(format!("{} on {}", ctx.node.op, x.dtype))
    );
    let mut outs = vec![out];
    outs.extend(logp);
    Ok(outs)
}

#[allow(clippy::too_many_arguments)]
fn run<T: Real>(
    x: &[T],
    labels: &Labels,
    w: Option<&[T]>,
    (n, c, d): (usize, usize, usize),
    ignore: Option<i64>,
    sce: bool,
    reduction: Reduction,
    out: &mut [T],
    mut logp: Option<&mut [T]>,
) -> Result<(), OpFail> {
    let (mut sum, mut wsum) = (0.0f64, 0.0f64);
    for i in 0..n {
        for j in 0..d {
            let at = |k: usize| x[(i * c + k) * d + j].get();
            // log-sum-exp over the classes, with the maximum shifted out.
            let lse = if sce {
                let m = (0..c).map(at).fold(f64::NEG_INFINITY, f64::max);
                let s: f64 = (0..c).map(|k| (at(k) - m).exp()).sum();
                let lse = m + s.ln();
                if let Some(lp) = logp.as_deref_mut() {
                    for k in 0..c {
                        lp[(i * c + k) * d + j] = T::put(at(k) - lse);
                    }
                }
                lse
            } else {
                0.0
            };
            let pos = i * d + j;
            let label = labels.get(pos);
            let (l, wt) = if Some(label) == ignore {
                (0.0, 0.0)
            } else {
                let k = usize::try_from(label)
                    .ok()
                    .filter(|&k| k < c)
                    .ok_or_else(|| {
                        OpFail::Invalid(format!(
                            "label {label} at position {pos} is outside [0, {c})"
                        ))
                    })?;
                let wt = w.map_or(1.0, |w| w[k].get());
                (-wt * (at(k) - lse), wt)
            };
            if reduction == Reduction::None {
                out[pos] = T::put(l);
            }
            sum += l;
            wsum += wt;
        }
    }
    match reduction {
        Reduction::None => {}
        Reduction::Sum => out[0] = T::put(sum),
        Reduction::Mean => out[0] = T::put(sum / wsum),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::ops::testutil::*;
    use memplan_ir::graph::AttrValue;

    #[test]
    fn nll_and_sce_by_hand() {
        // N = 2, C = 3: labels 2 and 0, weights 1, 2, 3.
        let x = t_f32(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let t = t_i64(&[2], &[2, 0]);
        let w = t_f32(&[3], &[1., 2., 3.]);
        let o = run_op(
            "NegativeLogLikelihoodLoss",
            &[],
            &[Some(&x), Some(&t), Some(&w)],
            1,
        )
        .unwrap();
        // (-3 * 3 - 1 * 4) / (3 + 1)
        assert_eq!(o[0].data::<f32>().unwrap(), &[-13.0 / 4.0]);
        let none = [("reduction", AttrValue::String(b"none".to_vec()))];
        let o = run_op("SoftmaxCrossEntropyLoss", &none, &[Some(&x), Some(&t)], 2).unwrap();
        let lse = |a: f64, b: f64, c: f64| (a.exp() + b.exp() + c.exp()).ln();
        let want = [lse(1., 2., 3.) - 3., lse(4., 5., 6.) - 4.];
        for (g, w) in o[0].data::<f32>().unwrap().iter().zip(want) {
            assert!((f64::from(*g) - w).abs() < 1e-6);
        }
        assert_eq!(o[1].shape, [2, 3]);
        let ii = [("ignore_index", AttrValue::Int(0))];
        let o = run_op("NegativeLogLikelihoodLoss", &ii, &[Some(&x), Some(&t)], 1).unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[-3.0]);
        let bad = t_i64(&[2], &[3, 0]);
        assert!(run_op("NegativeLogLikelihoodLoss", &[], &[Some(&x), Some(&bad)], 1).is_err());
    }
}
