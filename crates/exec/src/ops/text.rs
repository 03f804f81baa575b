//! Text features: `TfIdfVectorizer` over int32/int64 tokens and `pool_int64s`.
//!
//! The pool holds the n-grams of each size `s` (`ngram_counts[s-1]` is where they start), the
//! `k`-th n-gram overall being output column `ngram_indexes[k]`. For each row, each skip distance
//! `d` in `1..=max_skip_count+1` and each start `i`, the tokens `i, i+d, ...` of each length in
//! `min_gram_length..=max_gram_length` that is a pool n-gram count once (unigrams only at `d = 1`,
//! as onnxruntime and onnx's reference count them). Counts go into the f32 output directly, then
//! are weighted per `mode` (TF, IDF, TFIDF). Scratch: none.

use std::collections::BTreeMap;

use memplan_ir::DataType;

use super::{fail, raw, req, OpCtx, OpFail, OpFn};
use crate::tensor::Tensor;

pub const OPS: &[(&str, OpFn)] = &[("TfIdfVectorizer", tfidf)];

fn tfidf(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    // Tokens are read in place (no copy of X).
    let (t32, t64): (&[i32], &[i64]) = match x.dtype {
        DataType::I32 => (raw(x)?, &[]),
        DataType::I64 => (&[], raw(x)?),
        d => return fail(format!("TfIdfVectorizer of {d} (int32/int64 tokens only)")),
    };
    let token = |i: usize| -> i64 {
        if t64.is_empty() {
            i64::from(t32[i])
        } else {
            t64[i]
        }
    };
    let (rows, cols) = match x.shape[..] {
        [c] => (1, c),
        [b, c] => (b, c),
        _ => return fail(format!("X must have rank 1 or 2, got {:?}", x.shape)),
    };
    let int = |name: &str| -> Result<i64, OpFail> {
        ctx.opt_int(name)?
            .ok_or_else(|| OpFail::Invalid(format!("attribute '{name}' is required")))
    };
    let (min_n, max_n, skip) = (
        int("min_gram_length")?,
        int("max_gram_length")?,
        int("max_skip_count")?,
    );
    if min_n < 1 || max_n < min_n || skip < 0 {
        return fail("needs 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0");
    }
    // An n-gram longer than a row, or a skip wider than one, never occurs: the bounds keep the
    // loops below within the row whatever the attributes say.
    let (min_n, max_n, skip) = (
        usize::try_from(min_n).unwrap_or(usize::MAX),
        usize::try_from(max_n).unwrap_or(usize::MAX).min(cols),
        usize::try_from(skip).unwrap_or(usize::MAX).min(cols),
    );
    let mode = ctx.string("mode")?.unwrap_or_default();
    let counts = ctx.ints("ngram_counts")?.unwrap_or_default();
    let indexes = ctx.ints("ngram_indexes")?.unwrap_or_default();
    let Some(pool) = ctx.ints("pool_int64s")? else {
        return fail("TfIdfVectorizer needs pool_int64s (string pools are not supported)");
    };
    let weights = ctx.floats("weights")?.unwrap_or_default();
    let Some(&top) = indexes.iter().max() else {
        return fail("attribute 'ngram_indexes' is required");
    };
    if indexes.iter().any(|&i| i < 0) {
        return fail("ngram_indexes must be >= 0");
    }
    let width = top as usize + 1;
    // Each pool n-gram of a counted size, to its output column.
    let mut grams: BTreeMap<&[i64], usize> = BTreeMap::new();
    let mut id = 0usize;
    for (s, &start) in counts.iter().enumerate() {
        let size = s + 1;
        let end = counts.get(s + 1).copied().unwrap_or(pool.len() as i64);
        let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) else {
            return fail("ngram_counts must be >= 0");
        };
        if start > end || end > pool.len() {
            return fail("ngram_counts must be increasing and within the pool");
        }
        for g in pool[start..end].chunks_exact(size) {
            if (min_n..=max_n).contains(&size) {
                let Some(&col) = indexes.get(id) else {
                    return fail("ngram_indexes has fewer entries than the pool has n-grams");
                };
                grams.insert(g, col as usize);
            }
            id += 1;
        }
    }
    let shape: Vec<usize> = if x.shape.len() == 1 {
        vec![width]
    } else {
        vec![rows, width]
    };
    let mut out = ctx.alloc(DataType::F32, &shape)?;
    let y = out.data_mut::<f32>()?;
    let mut gram = Vec::with_capacity(max_n);
    for r in 0..rows {
        let acc = &mut y[r * width..(r + 1) * width];
        for d in 1..=skip + 1 {
            let lo = if d == 1 { min_n } else { min_n.max(2) };
            if lo > max_n {
                break;
            }
            for i in 0..cols {
                for n in lo..=max_n {
                    if i + (n - 1) * d >= cols {
                        break;
                    }
                    gram.clear();
                    gram.extend((0..n).map(|k| token(r * cols + i + k * d)));
                    if let Some(&col) = grams.get(gram.as_slice()) {
                        acc[col] += 1.0;
                    }
                }
            }
        }
        for (c, v) in acc.iter_mut().enumerate() {
            let w = weights.get(c).copied();
            *v = match mode.as_str() {
                "TF" => *v,
                "IDF" if *v > 0.0 => w.unwrap_or(1.0),
                "IDF" => 0.0,
                "TFIDF" => w.map_or(*v, |w| w * *v),
                m => return fail(format!("mode '{m}' is not TF, IDF or TFIDF")),
            };
        }
    }
    Ok(vec![out])
}
