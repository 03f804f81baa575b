//! Op family: text features: `TfIdfVectorizer` over integer tokens (`pool_int64s`).
//!
//! The kernel (`exec::ops::text`) counts into its f32 output directly and holds no scratch.

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::infer::{invalid, Fact, InferCtx, OpError};

use super::{Mem, OpDef, ONE};

pub const DEFS: &[OpDef] = &[OpDef::new("TfIdfVectorizer", ONE, tfidf, Mem::NEW)];

/// `[C]` to `[out]`, `[B, C]` to `[B, out]`, `out = max(ngram_indexes) + 1`; f32.
fn tfidf(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?;
    let idx = ctx.attr_ints("ngram_indexes")?.unwrap_or_default();
    let Some(&m) = idx.iter().max() else {
        return Err(OpError::BadAttr(
            "attribute 'ngram_indexes' is required".into(),
        ));
    };
    if idx.iter().any(|&i| i < 0) {
        return Err(OpError::BadAttr("ngram_indexes must be >= 0".into()));
    }
    let out = Expr::int(m + 1);
    let shape = match x {
        [_] => vec![out],
        [b, _] => vec![b.clone(), out],
        _ => return invalid(format!("X must have rank 1 or 2, got {}", x.len())),
    };
    Ok(vec![Fact::new(DataType::F32, shape)])
}
