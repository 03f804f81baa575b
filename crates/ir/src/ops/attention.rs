//! Op family: transformer blocks of the newest opsets: `Attention` (opset 23; window attributes
//! from 25), `RotaryEmbedding` (23), `LinearAttention` and `CausalConvWithState` (27) and
//! `SwiGLU` (28).
//!
//! Scratch (bytes; what `exec::ops::attention` allocates):
//! - Attention: one row of scores in f64, `8 * total_sequence_length` (`past + kv`), whatever the
//!   input type: each query row is scored, normalized and contracted with V on its own.
//! - LinearAttention: one head's f32 state and one corrected value row, `4 * (d_k * d_v + d_v)`.
//! - RotaryEmbedding, CausalConvWithState, SwiGLU: none.

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::graph::Node;
use crate::infer::{invalid, Fact, InferCtx, OpError};

use super::{Mem, OpDef, TWO};

pub const DEFS: &[OpDef] = &[
    // Inputs: Q, K, V, attn_mask, past_key, past_value, nonpad_kv_seqlen (opset 24).
    OpDef::new(
        "Attention",
        (3, 7),
        attention,
        with_scratch(attention_scratch),
    ),
    // Inputs: input, cos_cache, sin_cache, position_ids.
    OpDef::new("RotaryEmbedding", (3, 4), rotary, Mem::NEW),
    // Inputs: query, key, value, past_state, decay, beta.
    OpDef::new(
        "LinearAttention",
        (3, 6),
        linear_attention,
        with_scratch(linear_attention_scratch),
    ),
    // Inputs: input, weight, bias, past_state.
    OpDef::new("CausalConvWithState", (2, 4), causal_conv, Mem::NEW),
    OpDef::new("SwiGLU", TWO, swiglu, Mem::NEW),
];

const fn with_scratch(f: super::ScratchFn) -> Mem {
    Mem {
        scratch: Some(f),
        ..Mem::NEW
    }
}

fn is_float(t: DataType) -> bool {
    matches!(
        t,
        DataType::F16 | DataType::BF16 | DataType::F32 | DataType::F64
    )
}

fn rank_is(what: &str, s: &[Expr], r: usize) -> Result<(), OpError> {
    if s.len() != r {
        return invalid(format!("{what} has rank {}, expected {r}", s.len()));
    }
    Ok(())
}

/// A positive integer attribute.
fn positive(ctx: &InferCtx, name: &str) -> Result<Option<i64>, OpError> {
    match ctx.attr_opt_int(name)? {
        Some(v) if v <= 0 => Err(OpError::BadAttr(format!(
            "{name} must be positive, got {v}"
        ))),
        v => Ok(v),
    }
}

/// `h` divides `d` where `d` is known.
fn split_heads(what: &str, d: &Expr, h: i64) -> Result<Expr, OpError> {
    if let Some(c) = d.as_const() {
        if c % h != 0 {
            return invalid(format!(
                "{what} hidden size {c} is not a multiple of {h} heads"
            ));
        }
    }
    Ok(d.floor_div(&Expr::int(h)))
}

/// The sizes an `Attention` node works with, from its inputs' shapes.
struct AttnDims {
    batch: Expr,
    q_heads: Expr,
    q_len: Expr,
    kv_heads: Expr,
    kv_len: Expr,
    head: Expr,
    v_head: Expr,
    past: Expr,
    rank: usize,
}

fn attention_dims(
    node: &Node,
    q: &[Expr],
    k: &[Expr],
    v: &[Expr],
    past: Option<&[Expr]>,
) -> Result<AttnDims, OpError> {
    let rank = q.len();
    if rank != 3 && rank != 4 {
        return invalid(format!("Q has rank {rank}, expected 3 or 4"));
    }
    rank_is("K", k, rank)?;
    rank_is("V", v, rank)?;
    let int_attr = |name: &str| match node.attr(name) {
        Some(crate::graph::AttrValue::Int(x)) => Ok(Some(*x)),
        None => Ok(None),
        Some(o) => Err(OpError::BadAttr(format!(
            "attribute '{name}' must be INT, got {}",
            o.kind_name()
        ))),
    };
    let past_len = match past {
        Some(p) => {
            rank_is("past_key", p, 4)?;
            p[2].clone()
        }
        None => Expr::zero(),
    };
    // 4-D inputs carry their head counts; the head attributes are not read for them.
    if rank == 4 {
        return Ok(AttnDims {
            batch: q[0].clone(),
            q_heads: q[1].clone(),
            q_len: q[2].clone(),
            kv_heads: k[1].clone(),
            kv_len: k[2].clone(),
            head: q[3].clone(),
            v_head: v[3].clone(),
            past: past_len,
            rank,
        });
    }
    let (Some(hq), Some(hkv)) = (int_attr("q_num_heads")?, int_attr("kv_num_heads")?) else {
        return Err(OpError::BadAttr(
            "3-D inputs need the q_num_heads and kv_num_heads attributes".into(),
        ));
    };
    if hq <= 0 || hkv <= 0 {
        return Err(OpError::BadAttr(format!(
            "q_num_heads ({hq}) and kv_num_heads ({hkv}) must be positive"
        )));
    }
    Ok(AttnDims {
        batch: q[0].clone(),
        q_heads: Expr::int(hq),
        q_len: q[1].clone(),
        kv_heads: Expr::int(hkv),
        kv_len: k[1].clone(),
        head: split_heads("Q", &q[2], hq)?,
        v_head: split_heads("V", &v[2], hkv)?,
        past: past_len,
        rank,
    })
}

fn attention(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    if !is_float(t) {
        return invalid(format!("Q must be a float tensor, got {t}"));
    }
    for i in [1, 2, 4, 5] {
        if let Some(f) = ctx.opt_input(i) {
            if f.dtype.is_some_and(|d| d != t) {
                return Err(OpError::Unsupported(format!(
                    "input {i} of another type than Q ({t})"
                )));
            }
        }
    }
    if ctx.opt_input(4).is_some() != ctx.opt_input(5).is_some() {
        return invalid("past_key and past_value must be given together");
    }
    if ctx.opt_input(6).is_some() && ctx.opt_input(4).is_some() {
        return invalid("nonpad_kv_seqlen cannot be combined with past_key/past_value");
    }
    for name in ["left_window_size", "right_window_size"] {
        let w = ctx.attr_int(name, -1)?;
        if w < -1 {
            return Err(OpError::BadAttr(format!(
                "{name} must be -1 or nonnegative, got {w}"
            )));
        }
    }
    let mode = ctx.attr_int("qk_matmul_output_mode", 0)?;
    if !(0..=3).contains(&mode) {
        return Err(OpError::BadAttr(format!(
            "qk_matmul_output_mode must be 0..3, got {mode}"
        )));
    }
    let q = ctx.shape(0)?;
    let k = ctx.shape(1)?;
    let v = ctx.shape(2)?;
    let past = match ctx.opt_input(4) {
        Some(_) => Some(ctx.shape(4)?),
        None => None,
    };
    let d = attention_dims(ctx.node, q, k, v, past)?;
    let total = &d.past + &d.kv_len;
    let y = if d.rank == 4 {
        vec![
            d.batch.clone(),
            d.q_heads.clone(),
            d.q_len.clone(),
            d.v_head.clone(),
        ]
    } else {
        vec![d.batch.clone(), d.q_len.clone(), &d.q_heads * &d.v_head]
    };
    let present_k = vec![
        d.batch.clone(),
        d.kv_heads.clone(),
        total.clone(),
        d.head.clone(),
    ];
    let present_v = vec![d.batch.clone(), d.kv_heads.clone(), total.clone(), d.v_head];
    let qk = vec![d.batch, d.q_heads, d.q_len, total];
    Ok(vec![
        Fact::new(t, y),
        Fact::new(t, present_k),
        Fact::new(t, present_v),
        Fact::new(t, qk),
    ])
}

/// Attention: `8 * (past + kv)`, one f64 row of scores.
fn attention_scratch(
    node: &Node,
    _opset: i64,
    inputs: &[Option<&Fact>],
    _outputs: &[Option<&Fact>],
) -> Expr {
    let total = || -> Option<Expr> {
        let shape = |i: usize| inputs.get(i).copied().flatten()?.shape.as_deref();
        let (q, k, v) = (shape(0)?, shape(1)?, shape(2)?);
        let past = match inputs.get(4).copied().flatten() {
            Some(p) => Some(p.shape.as_deref()?),
            None => None,
        };
        let d = attention_dims(node, q, k, v, past).ok()?;
        Some(d.past + d.kv_len)
    };
    total().map(|n| n * 8).unwrap_or_else(Expr::zero)
}

fn rotary(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    if !is_float(t) {
        return invalid(format!("input must be a float tensor, got {t}"));
    }
    let x = ctx.shape(0)?.to_vec();
    match x.len() {
        4 => {}
        3 => {
            if positive(ctx, "num_heads")?.is_none() {
                return Err(OpError::BadAttr(
                    "a 3-D input needs the num_heads attribute".into(),
                ));
            }
        }
        r => return invalid(format!("input has rank {r}, expected 3 or 4")),
    }
    let has_pos = ctx.opt_input(3).is_some();
    let want = if has_pos { 2 } else { 3 };
    for i in [1, 2] {
        let s = ctx.shape(i)?;
        if s.len() != want {
            return invalid(format!(
                "cache input {i} has rank {}, expected {want} ({} position_ids)",
                s.len(),
                if has_pos { "with" } else { "without" }
            ));
        }
    }
    Ok(vec![Fact::new(t, x)])
}

fn linear_attention(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    if !is_float(t) {
        return invalid(format!("query must be a float tensor, got {t}"));
    }
    let hq = positive(ctx, "q_num_heads")?
        .ok_or_else(|| OpError::BadAttr("attribute 'q_num_heads' is required".into()))?;
    let hkv = positive(ctx, "kv_num_heads")?
        .ok_or_else(|| OpError::BadAttr("attribute 'kv_num_heads' is required".into()))?;
    if hq % hkv != 0 {
        return Err(OpError::BadAttr(format!(
            "q_num_heads ({hq}) must be a multiple of kv_num_heads ({hkv})"
        )));
    }
    let rule = ctx
        .attr_string("update_rule")?
        .unwrap_or_else(|| "gated_delta".into());
    let (gated, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        r => return Err(OpError::BadAttr(format!("update_rule '{r}' is not known"))),
    };
    if gated != ctx.opt_input(4).is_some() {
        return invalid(format!(
            "update_rule '{rule}' {} the decay input",
            if gated { "needs" } else { "forbids" }
        ));
    }
    if delta != ctx.opt_input(5).is_some() {
        return invalid(format!(
            "update_rule '{rule}' {} the beta input",
            if delta { "needs" } else { "forbids" }
        ));
    }
    let q = ctx.shape(0)?.to_vec();
    let k = ctx.shape(1)?.to_vec();
    let v = ctx.shape(2)?.to_vec();
    rank_is("query", &q, 3)?;
    rank_is("key", &k, 3)?;
    rank_is("value", &v, 3)?;
    let dk = split_heads("query", &q[2], hq)?;
    let dv = split_heads("value", &v[2], hkv)?;
    let state_t = match ctx.opt_input(3) {
        Some(_) => ctx.dtype(3)?,
        None => t,
    };
    let y = vec![q[0].clone(), q[1].clone(), Expr::int(hq) * &dv];
    let state = vec![q[0].clone(), Expr::int(hkv), dk, dv];
    Ok(vec![Fact::new(t, y), Fact::new(state_t, state)])
}

/// LinearAttention: `4 * (d_k * d_v + d_v)`, one kv head's state and a value row, in f32.
fn linear_attention_scratch(
    node: &Node,
    _opset: i64,
    inputs: &[Option<&Fact>],
    _outputs: &[Option<&Fact>],
) -> Expr {
    let s = || -> Option<Expr> {
        let heads = |name: &str| match node.attr(name) {
            Some(crate::graph::AttrValue::Int(h)) if *h > 0 => Some(Expr::int(*h)),
            _ => None,
        };
        let last = |i: usize| {
            inputs
                .get(i)
                .copied()
                .flatten()?
                .shape
                .as_deref()?
                .get(2)
                .cloned()
        };
        let dk = last(0)?.floor_div(&heads("q_num_heads")?);
        let dv = last(2)?.floor_div(&heads("kv_num_heads")?);
        Some((&dk * &dv + &dv) * 4)
    };
    s().unwrap_or_else(Expr::zero)
}

fn causal_conv(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    if !is_float(t) {
        return invalid(format!("input must be a float tensor, got {t}"));
    }
    let act = ctx
        .attr_string("activation")?
        .unwrap_or_else(|| "none".into());
    if !matches!(act.as_str(), "none" | "silu" | "swish") {
        return Err(OpError::BadAttr(format!(
            "activation '{act}' is not one of none, silu, swish"
        )));
    }
    let x = ctx.shape(0)?.to_vec();
    let w = ctx.shape(1)?.to_vec();
    rank_is("input", &x, 3)?;
    rank_is("weight", &w, 3)?;
    let k = &w[2];
    if k.as_const() == Some(0) {
        return invalid("weight has kernel size 0");
    }
    let state = vec![x[0].clone(), x[1].clone(), k - &Expr::one()];
    Ok(vec![Fact::new(t, x), Fact::new(t, state)])
}

fn swiglu(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    if !is_float(t) {
        return invalid(format!("A must be a float tensor, got {t}"));
    }
    if ctx.dtype(1)? != t {
        return invalid("A and B must have the same type");
    }
    let a = ctx.shape(0)?.to_vec();
    let b = ctx.shape(1)?;
    if a.len() != b.len()
        || a.iter()
            .zip(b)
            .any(|(x, y)| x.as_const().zip(y.as_const()).is_some_and(|(x, y)| x != y))
    {
        return invalid(format!(
            "A {} and B {} must have the same shape",
            crate::infer::fmt_shape(&a),
            crate::infer::fmt_shape(b)
        ));
    }
    Ok(vec![Fact::new(t, a)])
}

#[cfg(test)]
mod tests {
    use super::super::tests::{a_int, fact_of, TestGraph};
    use crate::dtype::DataType;

    #[test]
    fn attention_shapes_3d_gqa_with_cache() {
        let mut g = TestGraph::new();
        let q = g.input("q", DataType::F32, "B, S, 72");
        let k = g.input("k", DataType::F32, "B, L, 24");
        let v = g.input("v", DataType::F32, "B, L, 30");
        let pk = g.input("pk", DataType::F32, "B, 3, P, 8");
        let pv = g.input("pv", DataType::F32, "B, 3, P, 10");
        let outs = g.node(
            "att",
            "Attention",
            &[Some(q), Some(k), Some(v), None, Some(pk), Some(pv)],
            &["y", "pk_out", "pv_out", "qk"],
            vec![a_int("q_num_heads", 9), a_int("kv_num_heads", 3)],
        );
        let f = g.run(23).unwrap();
        assert_eq!(fact_of(&f, outs[0]), "float [B, S, 90]");
        assert_eq!(fact_of(&f, outs[1]), "float [B, 3, L + P, 8]");
        assert_eq!(fact_of(&f, outs[2]), "float [B, 3, L + P, 10]");
        assert_eq!(fact_of(&f, outs[3]), "float [B, 9, S, L + P]");
    }

    #[test]
    fn attention_3d_without_heads_is_an_error() {
        let mut g = TestGraph::new();
        let q = g.input("q", DataType::F32, "2, 4, 24");
        g.op("Attention", &[q, q, q], &["y"], vec![]);
        assert!(g.run(23).is_err());
    }

    #[test]
    fn linear_attention_and_conv_shapes() {
        let mut g = TestGraph::new();
        let q = g.input("q", DataType::F16, "B, T, 64");
        let k = g.input("k", DataType::F16, "B, T, 32");
        let outs = g.op(
            "LinearAttention",
            &[q, k, k],
            &["y", "state"],
            vec![
                a_int("q_num_heads", 8),
                a_int("kv_num_heads", 4),
                super::super::tests::a_str("update_rule", "linear"),
            ],
        );
        let x = g.input("x", DataType::F32, "B, 4, L");
        let w = g.input("w", DataType::F32, "4, 1, 3");
        let conv = g.op("CausalConvWithState", &[x, w], &["o", "s"], vec![]);
        let f = g.run(27).unwrap();
        assert_eq!(fact_of(&f, outs[0]), "float16 [B, T, 64]");
        assert_eq!(fact_of(&f, outs[1]), "float16 [B, 4, 8, 8]");
        assert_eq!(fact_of(&f, conv[0]), "float [B, 4, L]");
        assert_eq!(fact_of(&f, conv[1]), "float [B, 4, 2]");
    }
}
