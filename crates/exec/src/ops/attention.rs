//! Transformer blocks: Attention, RotaryEmbedding, LinearAttention, CausalConvWithState, SwiGLU.
//!
//! These kernels read their inputs in place through index arithmetic (3-D head packing, GQA head
//! sharing, the past/current key split and mask broadcasting are strides, never copies), compute in
//! f64 (f32 for LinearAttention, as the ONNX reference does) and round to the tensor type after each
//! step where the ONNX reference rounds, so that f16/bf16 results match it bit for bit. Each output
//! element is computed by one fixed sequence of operations, independently of threads.
//!
//! Scratch (bytes):
//! - Attention: one row of scores, `8 * (past_sequence_length + kv_sequence_length)`.
//! - LinearAttention: one kv head's f32 state and a value row, `4 * (d_k * d_v + d_v)`.
//! - RotaryEmbedding, CausalConvWithState, SwiGLU: none.

use half::{bf16, f16};
use memplan_ir::DataType;

use super::{fail, opt, req, unsupported, OpCtx, OpFail, OpFn};
use crate::tensor::Tensor;

pub const OPS: &[(&str, OpFn)] = &[
    ("Attention", attention),
    ("RotaryEmbedding", rotary),
    ("LinearAttention", linear_attention),
    ("CausalConvWithState", causal_conv),
    ("SwiGLU", swiglu),
];

/// A float tensor's elements read as f64.
#[derive(Clone, Copy)]
enum In<'a> {
    F16(&'a [f16]),
    BF16(&'a [bf16]),
    F32(&'a [f32]),
    F64(&'a [f64]),
}

impl<'a> In<'a> {
    fn of(t: &'a Tensor, what: &str) -> Result<In<'a>, OpFail> {
        Ok(match t.dtype {
            DataType::F16 => In::F16(t.data()?),
            DataType::BF16 => In::BF16(t.data()?),
            DataType::F32 => In::F32(t.data()?),
            DataType::F64 => In::F64(t.data()?),
            d => return unsupported(format!("{what} of type {d}")),
        })
    }

    #[inline]
    fn get(&self, i: usize) -> f64 {
        match self {
            In::F16(s) => s[i].to_f64(),
            In::BF16(s) => s[i].to_f64(),
            In::F32(s) => s[i] as f64,
            In::F64(s) => s[i],
        }
    }
}

/// A float output tensor written from f64 (rounded to its type).
enum Out<'a> {
    F16(&'a mut [f16]),
    BF16(&'a mut [bf16]),
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
}

impl<'a> Out<'a> {
    fn of(t: &'a mut Tensor) -> Result<Out<'a>, OpFail> {
        Ok(match t.dtype {
            DataType::F16 => Out::F16(t.data_mut()?),
            DataType::BF16 => Out::BF16(t.data_mut()?),
            DataType::F32 => Out::F32(t.data_mut()?),
            DataType::F64 => Out::F64(t.data_mut()?),
            d => return unsupported(format!("output of type {d}")),
        })
    }

    #[inline]
    fn set(&mut self, i: usize, v: f64) {
        match self {
            Out::F16(s) => s[i] = f16::from_f64(v),
            Out::BF16(s) => s[i] = bf16::from_f64(v),
            Out::F32(s) => s[i] = v as f32,
            Out::F64(s) => s[i] = v,
        }
    }
}

/// Rounds `v` to the nearest value of float type `t` (f64 unchanged).
#[inline]
fn round_to(t: DataType, v: f64) -> f64 {
    match t {
        DataType::F16 => f16::from_f64(v).to_f64(),
        DataType::BF16 => bf16::from_f64(v).to_f64(),
        DataType::F32 => v as f32 as f64,
        _ => v,
    }
}

fn is_float(t: DataType) -> bool {
    matches!(
        t,
        DataType::F16 | DataType::BF16 | DataType::F32 | DataType::F64
    )
}

fn want(ctx: &OpCtx, slot: usize) -> bool {
    ctx.node.outputs.get(slot).is_some_and(|o| o.is_some())
}

/// An output slot the node leaves empty: no memory.
fn absent(t: DataType) -> Result<Tensor, OpFail> {
    Ok(Tensor::zeros(t, &[0], None)?)
}

fn heads_attr(ctx: &OpCtx, name: &str) -> Result<usize, OpFail> {
    match ctx.opt_int(name)? {
        Some(h) if h > 0 => Ok(h as usize),
        Some(h) => fail(format!("{name} must be positive, got {h}")),
        None => fail(format!("attribute '{name}' is required")),
    }
}

fn split(what: &str, hidden: usize, heads: usize) -> Result<usize, OpFail> {
    if !hidden.is_multiple_of(heads) {
        return fail(format!(
            "{what} hidden size {hidden} is not a multiple of {heads} heads"
        ));
    }
    Ok(hidden / heads)
}

// ---- Attention ----

/// Where the elements of a (batch, head, position, feature) tensor are: 4-D `(B, H, L, D)`, or
/// 3-D `(B, L, H * D)` with the heads packed in the last axis.
#[derive(Clone, Copy)]
struct Layout {
    heads: usize,
    len: usize,
    dim: usize,
    packed: bool,
}

impl Layout {
    #[inline]
    fn at(&self, b: usize, h: usize, j: usize, x: usize) -> usize {
        if self.packed {
            (b * self.len + j) * (self.heads * self.dim) + h * self.dim + x
        } else {
            ((b * self.heads + h) * self.len + j) * self.dim + x
        }
    }
}

/// The mask's contribution to the bias at `(b, h, i, j)`: right-aligned broadcasting to
/// `(B, H, S, T)`, keys past its last axis masked.
struct Mask<'a> {
    data: MaskData<'a>,
    strides: [usize; 4],
    len: usize,
}

enum MaskData<'a> {
    /// One byte per element, nonzero for true.
    Bool(&'a [u8]),
    Float(In<'a>),
}

impl Mask<'_> {
    #[inline]
    fn bias(&self, b: usize, h: usize, i: usize, j: usize) -> f64 {
        if j >= self.len {
            return f64::NEG_INFINITY;
        }
        let k =
            b * self.strides[0] + h * self.strides[1] + i * self.strides[2] + j * self.strides[3];
        match &self.data {
            MaskData::Bool(m) => {
                if m[k] != 0 {
                    0.0
                } else {
                    f64::NEG_INFINITY
                }
            }
            MaskData::Float(m) => m.get(k),
        }
    }
}

fn mask_of<'a>(m: &'a Tensor, t: DataType, target: [usize; 4]) -> Result<Mask<'a>, OpFail> {
    let r = m.rank();
    if r == 0 || r > 4 {
        return fail(format!("attn_mask has rank {r}, expected 1 to 4"));
    }
    let mut shape = [1usize; 4];
    shape[4 - r..].copy_from_slice(&m.shape);
    if shape[3] > target[3] {
        return fail(format!(
            "attn_mask has {} keys, more than the {} of K (past included)",
            shape[3], target[3]
        ));
    }
    let mut strides = [0usize; 4];
    let mut acc = 1;
    for a in (0..4).rev() {
        if a < 3 && shape[a] != 1 && shape[a] != target[a] {
            return fail(format!(
                "attn_mask shape {:?} does not broadcast to {target:?}",
                m.shape
            ));
        }
        strides[a] = if shape[a] == 1 { 0 } else { acc };
        acc *= shape[a];
    }
    let data = match m.dtype {
        DataType::Bool => MaskData::Bool(m.bytes()),
        d if d == t => MaskData::Float(In::of(m, "attn_mask")?),
        d => return unsupported(format!("attn_mask of type {d} with Q of type {t}")),
    };
    Ok(Mask {
        data,
        strides,
        len: shape[3],
    })
}

fn attention(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (q, k, v) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    let (mask, pk, pv, nonpad) = (
        opt(inputs, 3),
        opt(inputs, 4),
        opt(inputs, 5),
        opt(inputs, 6),
    );
    let t = q.dtype;
    if !is_float(t) {
        return fail(format!("Q must be a float tensor, got {t}"));
    }
    for (what, x) in [
        ("K", Some(k)),
        ("V", Some(v)),
        ("past_key", pk),
        ("past_value", pv),
    ] {
        if let Some(x) = x {
            if x.dtype != t {
                return unsupported(format!("{what} of type {} with Q of type {t}", x.dtype));
            }
        }
    }
    if pk.is_some() != pv.is_some() {
        return fail("past_key and past_value must be given together");
    }
    if nonpad.is_some() && pk.is_some() {
        return fail("nonpad_kv_seqlen cannot be combined with past_key/past_value");
    }
    let rank = q.rank();
    if (rank != 3 && rank != 4) || k.rank() != rank || v.rank() != rank {
        return fail(format!(
            "Q, K, V have ranks {}, {}, {}; expected all 3 or all 4",
            rank,
            k.rank(),
            v.rank()
        ));
    }
    let batch = q.shape[0];
    let (ql, kl, vl) = if rank == 4 {
        let lay = |s: &[usize]| Layout {
            heads: s[1],
            len: s[2],
            dim: s[3],
            packed: false,
        };
        (lay(&q.shape), lay(&k.shape), lay(&v.shape))
    } else {
        let hq = heads_attr(ctx, "q_num_heads")?;
        let hkv = heads_attr(ctx, "kv_num_heads")?;
        let lay = |what: &str, s: &[usize], h: usize| -> Result<Layout, OpFail> {
            Ok(Layout {
                heads: h,
                len: s[1],
                dim: split(what, s[2], h)?,
                packed: true,
            })
        };
        (
            lay("Q", &q.shape, hq)?,
            lay("K", &k.shape, hkv)?,
            lay("V", &v.shape, hkv)?,
        )
    };
    let (hq, s, d) = (ql.heads, ql.len, ql.dim);
    let (hkv, l, dv) = (kl.heads, kl.len, vl.dim);
    if k.shape[0] != batch || v.shape[0] != batch || kl.dim != d || vl.heads != hkv || vl.len != l {
        return fail(format!(
            "K {:?} and V {:?} do not match Q {:?}",
            k.shape, v.shape, q.shape
        ));
    }
    if hkv == 0 || hq % hkv != 0 {
        return fail(format!(
            "{hq} query heads are not a multiple of {hkv} key/value heads"
        ));
    }
    let group = hq / hkv;
    let p = match (pk, pv) {
        (Some(a), Some(b)) => {
            let pl = a.shape.get(2).copied().unwrap_or(0);
            if a.shape != [batch, hkv, pl, d] || b.shape != [batch, hkv, pl, dv] {
                return fail(format!(
                    "past_key {:?} / past_value {:?} do not match ({batch}, {hkv}, P, {d}/{dv})",
                    a.shape, b.shape
                ));
            }
            pl
        }
        _ => 0,
    };
    let total = p + l;
    let lens: Option<Vec<i64>> = match nonpad {
        Some(n) => {
            let v = n.to_i64_vec()?;
            if v.len() != batch {
                return fail(format!(
                    "nonpad_kv_seqlen has {} entries, batch is {batch}",
                    v.len()
                ));
            }
            Some(v)
        }
        None => None,
    };

    let causal = ctx.int("is_causal", 0)? != 0;
    let softcap = ctx.float("softcap", 0.0)? as f64;
    let mode = ctx.int("qk_matmul_output_mode", 0)?;
    if !(0..=3).contains(&mode) {
        return fail(format!("qk_matmul_output_mode must be 0..3, got {mode}"));
    }
    let left = ctx.int("left_window_size", -1)?;
    let right = ctx.int("right_window_size", -1)?;
    if left < -1 || right < -1 {
        return fail("left_window_size and right_window_size must be -1 or nonnegative");
    }
    let sp = match ctx.opt_int("softmax_precision")? {
        None => t,
        Some(c) => match DataType::from_onnx(c as i32) {
            Some(x) if is_float(x) => x,
            _ => return fail(format!("softmax_precision {c} is not a float type")),
        },
    };
    let scale = match ctx.opt_float("scale")? {
        Some(x) => x as f64,
        None => 1.0 / (d as f64).sqrt(),
    };
    let scale = round_to(t, scale.sqrt());
    let mask = match mask {
        Some(m) => Some(mask_of(m, t, [batch, hq, s, total])?),
        None => None,
    };

    // Outputs. Y is written row by row; the caches are the concatenation of past and current.
    let y_shape = if rank == 4 {
        vec![batch, hq, s, dv]
    } else {
        vec![batch, s, hq * dv]
    };
    let mut y = ctx.alloc_for_overwrite(t, &y_shape)?;
    let mut pres_k = if want(ctx, 1) {
        Some(ctx.alloc_for_overwrite(t, &[batch, hkv, total, d])?)
    } else {
        None
    };
    let mut pres_v = if want(ctx, 2) {
        Some(ctx.alloc_for_overwrite(t, &[batch, hkv, total, dv])?)
    } else {
        None
    };
    let mut qk_out = if want(ctx, 3) {
        Some(ctx.alloc_for_overwrite(t, &[batch, hq, s, total])?)
    } else {
        None
    };
    let mut row = ctx.scratch::<f64>(total)?;
    let row = row.as_mut_slice();

    let (qd, kd, vd) = (In::of(q, "Q")?, In::of(k, "K")?, In::of(v, "V")?);
    let pkd = pk.map(|x| In::of(x, "past_key")).transpose()?;
    let pvd = pv.map(|x| In::of(x, "past_value")).transpose()?;
    let past_k = Layout {
        heads: hkv,
        len: p,
        dim: d,
        packed: false,
    };
    let past_v = Layout { dim: dv, ..past_k };
    // Key/value element `x` of position `j` of the concatenated cache.
    let key = |b: usize, g: usize, j: usize, x: usize| -> f64 {
        match &pkd {
            Some(pd) if j < p => pd.get(past_k.at(b, g, j, x)),
            _ => kd.get(kl.at(b, g, j - p, x)),
        }
    };
    let value = |b: usize, g: usize, j: usize, x: usize| -> f64 {
        match &pvd {
            Some(pd) if j < p => pd.get(past_v.at(b, g, j, x)),
            _ => vd.get(vl.at(b, g, j - p, x)),
        }
    };
    for (pres, dim, get) in [
        (
            &mut pres_k,
            d,
            &key as &dyn Fn(usize, usize, usize, usize) -> f64,
        ),
        (&mut pres_v, dv, &value),
    ] {
        if let Some(out) = pres {
            let mut o = Out::of(out)?;
            let mut n = 0;
            for b in 0..batch {
                for g in 0..hkv {
                    for j in 0..total {
                        for x in 0..dim {
                            o.set(n, get(b, g, j, x));
                            n += 1;
                        }
                    }
                }
            }
        }
    }

    let r = |x: f64| round_to(t, x);
    let rs = |x: f64| round_to(sp, x);
    let mut yo = Out::of(&mut y)?;
    let mut qo = qk_out.as_mut().map(Out::of).transpose()?;
    let y_lay = Layout {
        heads: hq,
        len: s,
        dim: dv,
        packed: rank == 3,
    };
    for b in 0..batch {
        // Causal and window frontier: query `i` sits at absolute position `i + offset`.
        let offset: i64 = match &lens {
            Some(n) if pk.is_none() => n[b] - s as i64,
            _ => p as i64,
        };
        for h in 0..hq {
            let g = h / group;
            for i in 0..s {
                let mut all_masked = true;
                for (j, slot) in row.iter_mut().enumerate() {
                    let mut dot = 0.0;
                    for x in 0..d {
                        let qx = r(qd.get(ql.at(b, h, i, x)) * scale);
                        let kx = r(key(b, g, j, x) * scale);
                        dot += qx * kx;
                    }
                    let raw = r(dot);
                    let capped = if softcap > 0.0 {
                        r(r(r(raw / softcap).tanh()) * softcap)
                    } else {
                        raw
                    };
                    // The additive bias, composed in the reference's order.
                    let mut bias = 0.0;
                    if let Some(m) = &mask {
                        bias = r(bias + m.bias(b, h, i, j));
                    }
                    let pos = i as i64 + offset;
                    let jj = j as i64;
                    if causal && jj > pos {
                        bias = r(bias + f64::NEG_INFINITY);
                    }
                    let diff = pos - jj;
                    if (left >= 0 && diff > left) || (right >= 0 && -diff > right) {
                        bias = r(bias + f64::NEG_INFINITY);
                    }
                    if let Some(n) = &lens {
                        if jj >= n[b] {
                            bias = r(bias + f64::NEG_INFINITY);
                        }
                    }
                    if bias != f64::NEG_INFINITY {
                        all_masked = false;
                    }
                    let biased = r(capped + bias);
                    if let Some(o) = &mut qo {
                        let at = ((b * hq + h) * s + i) * total + j;
                        match mode {
                            0 => o.set(at, raw),
                            1 => o.set(at, capped),
                            2 => o.set(at, biased),
                            _ => {}
                        }
                    }
                    *slot = rs(biased);
                }
                softmax_row(row, sp, all_masked);
                let base = ((b * hq + h) * s + i) * total;
                for (j, pr) in row.iter_mut().enumerate() {
                    *pr = r(*pr);
                    if mode == 3 {
                        if let Some(o) = &mut qo {
                            o.set(base + j, *pr);
                        }
                    }
                }
                for x in 0..dv {
                    let mut acc = 0.0;
                    for (j, pr) in row.iter().enumerate() {
                        acc += pr * value(b, g, j, x);
                    }
                    yo.set(y_lay.at(b, h, i, x), acc);
                }
            }
        }
    }
    Ok(vec![
        y,
        pres_k.map(Ok).unwrap_or_else(|| absent(t))?,
        pres_v.map(Ok).unwrap_or_else(|| absent(t))?,
        qk_out.map(Ok).unwrap_or_else(|| absent(t))?,
    ])
}

/// The reference's softmax of one row in type `sp` (`exp(x - max) / sum`, a row of `-inf` giving
/// zeros), then zeroed when every key of the row is masked.
fn softmax_row(row: &mut [f64], sp: DataType, all_masked: bool) {
    if all_masked {
        row.iter_mut().for_each(|x| *x = 0.0);
        return;
    }
    let rs = |x: f64| round_to(sp, x);
    let mut mx = f64::NEG_INFINITY;
    for &x in row.iter() {
        if x.is_nan() || mx.is_nan() {
            mx = f64::NAN;
        } else if x > mx {
            mx = x;
        }
    }
    let safe = if mx == f64::NEG_INFINITY { 0.0 } else { mx };
    let mut sum = 0.0;
    for x in row.iter_mut() {
        *x = rs(rs(*x - safe).exp());
        // bf16 sums accumulate in bf16 (ml_dtypes' add loop); the others in a wider type.
        sum = if sp == DataType::BF16 {
            rs(sum + *x)
        } else {
            sum + *x
        };
    }
    let sum = rs(sum);
    let sum = if sum == 0.0 { 1.0 } else { sum };
    for x in row.iter_mut() {
        *x = rs(*x / sum);
    }
}

// ---- RotaryEmbedding ----

fn rotary(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, cos, sin) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    let pos = opt(inputs, 3);
    let t = x.dtype;
    if cos.dtype != t || sin.dtype != t {
        return unsupported(format!(
            "caches of type {}/{} with input of type {t}",
            cos.dtype, sin.dtype
        ));
    }
    // (batch, seq, heads, head) and where element (b, s, h, e) is.
    let (batch, seq, heads, head, packed) = match x.rank() {
        4 => (x.shape[0], x.shape[2], x.shape[1], x.shape[3], false),
        3 => {
            let h = heads_attr(ctx, "num_heads")?;
            (
                x.shape[0],
                x.shape[1],
                h,
                split("input", x.shape[2], h)?,
                true,
            )
        }
        r => return fail(format!("input has rank {r}, expected 3 or 4")),
    };
    let at = |b: usize, si: usize, h: usize, e: usize| {
        if packed {
            (b * seq + si) * heads * head + h * head + e
        } else {
            ((b * heads + h) * seq + si) * head + e
        }
    };
    let rot = match ctx.int("rotary_embedding_dim", 0)? {
        0 => head,
        r if r > 0 && (r as usize) <= head && r % 2 == 0 => r as usize,
        r => {
            return fail(format!(
                "rotary_embedding_dim {r} must be even and at most the head size {head}"
            ))
        }
    };
    let half = rot / 2;
    let interleaved = ctx.int("interleaved", 0)? != 0;
    if cos.shape != sin.shape || cos.shape.last() != Some(&half) {
        return fail(format!(
            "cos_cache {:?} and sin_cache {:?} must end in rotary_embedding_dim / 2 = {half}",
            cos.shape, sin.shape
        ));
    }
    // Row of the caches for (batch, position).
    let ids = match pos {
        Some(pt) => {
            if pt.shape != [batch, seq] || cos.rank() != 2 {
                return fail(format!(
                    "position_ids {:?} must be ({batch}, {seq}) with 2-D caches, caches are {:?}",
                    pt.shape, cos.shape
                ));
            }
            let v = pt.to_i64_vec()?;
            let rows = cos.shape[0];
            for &i in &v {
                if i < 0 || i as usize >= rows {
                    return fail(format!(
                        "position id {i} is out of range for {rows} cache rows"
                    ));
                }
            }
            Some(v)
        }
        None => {
            if cos.shape != [batch, seq, half] {
                return fail(format!(
                    "without position_ids the caches must be ({batch}, {seq}, {half}), are {:?}",
                    cos.shape
                ));
            }
            None
        }
    };
    let (xd, cd, sd) = (
        In::of(x, "input")?,
        In::of(cos, "cos_cache")?,
        In::of(sin, "sin_cache")?,
    );
    let mut out = ctx.alloc_for_overwrite(t, &x.shape)?;
    let mut o = Out::of(&mut out)?;
    let r = |v: f64| round_to(t, v);
    for b in 0..batch {
        for si in 0..seq {
            let crow = match &ids {
                Some(v) => v[b * seq + si] as usize * half,
                None => (b * seq + si) * half,
            };
            for h in 0..heads {
                for e in 0..half {
                    let (i1, i2) = if interleaved {
                        (2 * e, 2 * e + 1)
                    } else {
                        (e, e + half)
                    };
                    let (x1, x2) = (xd.get(at(b, si, h, i1)), xd.get(at(b, si, h, i2)));
                    let (c, sn) = (cd.get(crow + e), sd.get(crow + e));
                    o.set(at(b, si, h, i1), r(c * x1) - r(sn * x2));
                    o.set(at(b, si, h, i2), r(sn * x1) + r(c * x2));
                }
                for e in rot..head {
                    o.set(at(b, si, h, e), xd.get(at(b, si, h, e)));
                }
            }
        }
    }
    Ok(vec![out])
}

// ---- LinearAttention ----

fn linear_attention(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (q, k, v) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    let (past, decay, beta) = (opt(inputs, 3), opt(inputs, 4), opt(inputs, 5));
    let t = q.dtype;
    let hq = heads_attr(ctx, "q_num_heads")?;
    let hkv = heads_attr(ctx, "kv_num_heads")?;
    if !hq.is_multiple_of(hkv) {
        return fail(format!(
            "q_num_heads ({hq}) must be a multiple of kv_num_heads ({hkv})"
        ));
    }
    let rule = ctx
        .string("update_rule")?
        .unwrap_or_else(|| "gated_delta".into());
    let (gated, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        r => return fail(format!("update_rule '{r}' is not known")),
    };
    if gated != decay.is_some() || delta != beta.is_some() {
        return fail(format!(
            "update_rule '{rule}' needs {} decay and {} beta",
            if gated { "a" } else { "no" },
            if delta { "a" } else { "no" }
        ));
    }
    for (what, x) in [("query", q), ("key", k), ("value", v)] {
        if x.rank() != 3 {
            return fail(format!("{what} has rank {}, expected 3", x.rank()));
        }
    }
    let (batch, steps) = (q.shape[0], q.shape[1]);
    let dk = split("query", q.shape[2], hq)?;
    let dv = split("value", v.shape[2], hkv)?;
    if k.shape != [batch, steps, hkv * dk] || v.shape[..2] != [batch, steps] {
        return fail(format!(
            "key {:?} / value {:?} do not match query {:?}",
            k.shape, v.shape, q.shape
        ));
    }
    // Decay per (b, t, kv head, key dim): per head or per key dim.
    let decay_dim = match decay {
        Some(g) => {
            if g.rank() != 3 || g.shape[..2] != [batch, steps] {
                return fail(format!("decay {:?} must be ({batch}, {steps}, H)", g.shape));
            }
            match g.shape[2] {
                x if x == hkv => 1,
                x if x == hkv * dk => dk,
                x => {
                    return fail(format!(
                    "decay last dim {x} must be kv_num_heads ({hkv}) or kv_num_heads * d_k ({})",
                    hkv * dk
                ))
                }
            }
        }
        None => 0,
    };
    let beta_heads = match beta {
        Some(bt) => {
            if bt.rank() != 3 || bt.shape[..2] != [batch, steps] {
                return fail(format!("beta {:?} must be ({batch}, {steps}, H)", bt.shape));
            }
            match bt.shape[2] {
                x if x == hkv || x == 1 => x,
                x => {
                    return fail(format!(
                        "beta last dim {x} must be kv_num_heads ({hkv}) or 1"
                    ))
                }
            }
        }
        None => 0,
    };
    if let Some(ps) = past {
        if ps.shape != [batch, hkv, dk, dv] {
            return fail(format!(
                "past_state {:?} must be ({batch}, {hkv}, {dk}, {dv})",
                ps.shape
            ));
        }
    }
    let scale = match ctx.opt_float("scale")? {
        Some(s) if s != 0.0 => s,
        _ => (1.0 / (dk as f64).sqrt()) as f32,
    };
    let state_t = past.map_or(t, |p| p.dtype);
    let mut y = ctx.alloc_for_overwrite(t, &[batch, steps, hq * dv])?;
    let mut present = if want(ctx, 1) {
        Some(ctx.alloc_for_overwrite(state_t, &[batch, hkv, dk, dv])?)
    } else {
        None
    };
    let mut scratch = ctx.scratch::<f32>(dk * dv + dv)?;
    let (state, vt) = scratch.as_mut_slice().split_at_mut(dk * dv);
    let (qd, kd, vd) = (In::of(q, "query")?, In::of(k, "key")?, In::of(v, "value")?);
    let pd = past.map(|p| In::of(p, "past_state")).transpose()?;
    let gd = decay.map(|g| In::of(g, "decay")).transpose()?;
    let bd = beta.map(|x| In::of(x, "beta")).transpose()?;
    let group = hq / hkv;
    let mut yo = Out::of(&mut y)?;
    let mut so = present.as_mut().map(Out::of).transpose()?;
    let f = |x: &In, i: usize| x.get(i) as f32;
    for b in 0..batch {
        for g in 0..hkv {
            let sbase = (b * hkv + g) * dk * dv;
            match &pd {
                Some(p) => state
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, s)| *s = f(p, sbase + i)),
                None => state.fill(0.0),
            }
            for ti in 0..steps {
                let row = b * steps + ti;
                let kat = |x: usize| row * hkv * dk + g * dk + x;
                if let Some(gd) = &gd {
                    for x in 0..dk {
                        let e = (if decay_dim == 1 {
                            f(gd, row * hkv + g)
                        } else {
                            f(gd, row * hkv * dk + g * dk + x)
                        })
                        .exp();
                        state[x * dv..(x + 1) * dv].iter_mut().for_each(|s| *s *= e);
                    }
                }
                for (m, o) in vt.iter_mut().enumerate() {
                    *o = f(&vd, row * hkv * dv + g * dv + m);
                }
                if let Some(bd) = &bd {
                    let bt = f(bd, row * beta_heads + if beta_heads == 1 { 0 } else { g });
                    for (m, o) in vt.iter_mut().enumerate() {
                        let mut got = 0.0f32;
                        for x in 0..dk {
                            got += state[x * dv + m] * f(&kd, kat(x));
                        }
                        *o = bt * (*o - got);
                    }
                }
                for x in 0..dk {
                    let kx = f(&kd, kat(x));
                    for m in 0..dv {
                        state[x * dv + m] += kx * vt[m];
                    }
                }
                for h in g * group..(g + 1) * group {
                    for m in 0..dv {
                        let mut acc = 0.0f32;
                        for x in 0..dk {
                            acc += f(&qd, row * hq * dk + h * dk + x) * state[x * dv + m];
                        }
                        yo.set(row * hq * dv + h * dv + m, (scale * acc) as f64);
                    }
                }
            }
            if let Some(so) = &mut so {
                for (i, s) in state.iter().enumerate() {
                    so.set(sbase + i, *s as f64);
                }
            }
        }
    }
    Ok(vec![y, present.map(Ok).unwrap_or_else(|| absent(state_t))?])
}

// ---- CausalConvWithState ----

fn causal_conv(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, w) = (req(inputs, 0)?, req(inputs, 1)?);
    let (bias, past) = (opt(inputs, 2), opt(inputs, 3));
    let t = x.dtype;
    let act = ctx.string("activation")?.unwrap_or_else(|| "none".into());
    let silu = match act.as_str() {
        "none" => false,
        "silu" | "swish" => true,
        a => return fail(format!("activation '{a}' is not one of none, silu, swish")),
    };
    if x.rank() != 3 || w.rank() != 3 {
        return fail(format!(
            "input {:?} and weight {:?} must be rank 3",
            x.shape, w.shape
        ));
    }
    let (batch, ch, len) = (x.shape[0], x.shape[1], x.shape[2]);
    let kw = w.shape[2];
    if w.shape[..2] != [ch, 1] || kw == 0 {
        return fail(format!(
            "weight {:?} must be ({ch}, 1, k) with k >= 1",
            w.shape
        ));
    }
    let pad = kw - 1;
    if let Some(b) = bias {
        if b.shape != [ch] {
            return fail(format!("bias {:?} must be ({ch})", b.shape));
        }
    }
    if let Some(p) = past {
        if p.shape != [batch, ch, pad] {
            return fail(format!(
                "past_state {:?} must be ({batch}, {ch}, {pad})",
                p.shape
            ));
        }
    }
    for (what, o) in [("weight", Some(w)), ("bias", bias), ("past_state", past)] {
        if let Some(o) = o {
            if o.dtype != t {
                return unsupported(format!("{what} of type {} with input of type {t}", o.dtype));
            }
        }
    }
    let (xd, wd) = (In::of(x, "input")?, In::of(w, "weight")?);
    let bd = bias.map(|b| In::of(b, "bias")).transpose()?;
    let pd = past.map(|p| In::of(p, "past_state")).transpose()?;
    // Element `j` of the padded row (past state, then input).
    let padded = |b: usize, c: usize, j: usize| -> f64 {
        if j >= pad {
            xd.get((b * ch + c) * len + j - pad)
        } else {
            pd.as_ref().map_or(0.0, |p| p.get((b * ch + c) * pad + j))
        }
    };
    let mut out = ctx.alloc_for_overwrite(t, &x.shape)?;
    let mut state = if want(ctx, 1) {
        Some(ctx.alloc_for_overwrite(t, &[batch, ch, pad])?)
    } else {
        None
    };
    let r = |v: f64| round_to(t, v);
    {
        let mut o = Out::of(&mut out)?;
        for b in 0..batch {
            for c in 0..ch {
                for i in 0..len {
                    let mut acc = 0.0;
                    for j in 0..kw {
                        acc += padded(b, c, i + j) * wd.get(c * kw + j);
                    }
                    if let Some(bd) = &bd {
                        acc += bd.get(c);
                    }
                    let mut y = r(acc);
                    if silu {
                        let yf = y as f32;
                        y = (yf * (1.0 / (1.0 + (-yf).exp()))) as f64;
                    }
                    o.set((b * ch + c) * len + i, y);
                }
            }
        }
    }
    if let Some(st) = &mut state {
        let mut o = Out::of(st)?;
        for b in 0..batch {
            for c in 0..ch {
                for j in 0..pad {
                    o.set((b * ch + c) * pad + j, padded(b, c, len + j));
                }
            }
        }
    }
    Ok(vec![out, state.map(Ok).unwrap_or_else(|| absent(t))?])
}

// ---- SwiGLU ----

fn swiglu(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (a, b) = (req(inputs, 0)?, req(inputs, 1)?);
    let t = a.dtype;
    if b.dtype != t || a.shape != b.shape {
        return fail(format!(
            "A ({t} {:?}) and B ({} {:?}) must have the same type and shape",
            a.shape, b.dtype, b.shape
        ));
    }
    let alpha = ctx.float("alpha", 1.0)? as f64;
    let (ad, bd) = (In::of(a, "A")?, In::of(b, "B")?);
    let mut out = ctx.alloc_for_overwrite(t, &a.shape)?;
    let r = |v: f64| round_to(t, v);
    {
        let mut o = Out::of(&mut out)?;
        for i in 0..a.numel() {
            let x = ad.get(i);
            let sig = r(1.0 / r(1.0 + r(r(-alpha * x).exp())));
            o.set(i, r(r(x * sig) * bd.get(i)));
        }
    }
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::*;

    #[test]
    fn swiglu_is_swish_times_gate() {
        let a = Tensor::from_vec(&[2], &[0.0f32, 2.0], None).unwrap();
        let b = Tensor::from_vec(&[2], &[3.0f32, 0.5], None).unwrap();
        let out = run_op("SwiGLU", &[], &[Some(&a), Some(&b)], 1).unwrap();
        let y = out[0].data::<f32>().unwrap();
        assert_eq!(y[0], 0.0);
        let want = 2.0 / (1.0 + (-2.0f64).exp()) * 0.5;
        assert!((y[1] as f64 - want).abs() < 1e-6);
    }
}
