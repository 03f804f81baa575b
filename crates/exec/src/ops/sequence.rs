//! Sequence and optional ops (the `sequence` family of `memplan_ir::ops`): a sequence or optional
//! is one packed tensor of its elements (see [`Tensor::elements`]); every op here writes a new
//! packed value or a new tensor (a copy), as the memory rule says.
//!
//! Scratch: none.

use memplan_ir::graph::AttrValue;
use memplan_ir::{DataType, SeqKind};

use super::{axis, fail, raw, raw_mut, req, scalar_i64, OpCtx, OpFail, OpFn};
use crate::kernels::movement as mv;
use crate::tensor::{elem_size, SeqElem, SeqLayout, Tensor};
use std::sync::Arc;

pub const OPS: &[(&str, OpFn)] = &[
    ("SequenceEmpty", sequence_empty),
    ("SequenceConstruct", sequence_construct),
    ("SequenceAt", sequence_at),
    ("SequenceInsert", sequence_insert),
    ("SequenceErase", sequence_erase),
    ("SequenceLength", sequence_length),
    ("ConcatFromSequence", concat_from_sequence),
    ("SplitToSequence", split_to_sequence),
    ("Optional", optional),
    ("OptionalHasElement", optional_has_element),
    ("OptionalGetElement", optional_get_element),
];

/// A new packed value of `kind` holding copies of `elems`, in order.
pub(crate) fn pack(
    ctx: &OpCtx,
    dtype: DataType,
    kind: SeqKind,
    elems: &[&Tensor],
) -> Result<Tensor, OpFail> {
    if let Some(e) = elems.iter().find(|e| e.dtype != dtype) {
        return fail(format!(
            "a sequence of {dtype} cannot hold a {} tensor",
            e.dtype
        ));
    }
    let (layout, total) = Tensor::seq_layout(kind, elems);
    let mut out = ctx.alloc_for_overwrite(dtype, &[total])?;
    out.fill_packed(elems, layout)?;
    Ok(out)
}

/// A new tensor (or packed value) holding a copy of `x`.
fn copy_of(ctx: &OpCtx, x: &Tensor) -> Result<Tensor, OpFail> {
    let mut out = ctx.alloc_for_overwrite(x.dtype, &x.shape)?;
    out.bytes_mut()?.copy_from_slice(x.bytes());
    out.seq = x.seq.clone();
    Ok(out)
}

/// Input `i` as a sequence (or optional): the packed tensor and its elements.
fn seq_input<'t>(
    inputs: &[Option<&'t Tensor>],
    i: usize,
) -> Result<(&'t Tensor, Vec<Tensor>), OpFail> {
    let s = req(inputs, i)?;
    match s.elements() {
        Some(e) => Ok((s, e?)),
        None => fail(format!("input {i} must be a sequence, got a tensor")),
    }
}

/// Position input `i` normalized against `n` elements (`..=n` allowed when `end_ok`).
fn position(
    inputs: &[Option<&Tensor>],
    i: usize,
    n: usize,
    end_ok: bool,
) -> Result<Option<usize>, OpFail> {
    let Some(t) = inputs.get(i).copied().flatten() else {
        return Ok(None);
    };
    let p = scalar_i64(t, "the position")?;
    let n = n as i64;
    let hi = if end_ok { n } else { n - 1 };
    if p < -n || p > hi {
        return fail(format!(
            "position {p} is out of range for a sequence of {n} elements"
        ));
    }
    Ok(Some((if p < 0 { p + n } else { p }) as usize))
}

/// An empty sequence of the `dtype` attribute's type (default float).
fn sequence_empty(ctx: &OpCtx, _: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let t = ctx.dtype("dtype")?.unwrap_or(DataType::F32);
    Ok(vec![pack(ctx, t, SeqKind::Sequence, &[])?])
}

fn sequence_construct(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let elems: Vec<&Tensor> = inputs.iter().flatten().copied().collect();
    let first = req(inputs, 0)?;
    Ok(vec![pack(ctx, first.dtype, SeqKind::Sequence, &elems)?])
}

fn sequence_at(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (_, elems) = seq_input(inputs, 0)?;
    let Some(p) = position(inputs, 1, elems.len(), false)? else {
        return fail("input 1 (the position) is required");
    };
    Ok(vec![copy_of(ctx, &elems[p])?])
}

fn sequence_insert(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (s, elems) = seq_input(inputs, 0)?;
    let x = req(inputs, 1)?;
    let at = position(inputs, 2, elems.len(), true)?.unwrap_or(elems.len());
    let mut refs: Vec<&Tensor> = elems.iter().collect();
    refs.insert(at, x);
    Ok(vec![pack(ctx, s.dtype, SeqKind::Sequence, &refs)?])
}

fn sequence_erase(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (s, elems) = seq_input(inputs, 0)?;
    if elems.is_empty() {
        return fail("cannot erase from an empty sequence");
    }
    let at = position(inputs, 1, elems.len(), false)?.unwrap_or(elems.len() - 1);
    let refs: Vec<&Tensor> = (0..elems.len())
        .filter(|&k| k != at)
        .map(|k| &elems[k])
        .collect();
    Ok(vec![pack(ctx, s.dtype, SeqKind::Sequence, &refs)?])
}

fn sequence_length(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (_, elems) = seq_input(inputs, 0)?;
    Ok(vec![ctx.from_vec::<i64>(&[], &[elems.len() as i64])?])
}

fn concat_from_sequence(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (s, elems) = seq_input(inputs, 0)?;
    let Some(first) = elems.first() else {
        return fail("ConcatFromSequence of an empty sequence");
    };
    let new_axis = ctx.int("new_axis", 0)? != 0;
    let rank = first.rank() + usize::from(new_axis);
    let a = axis(ctx.int("axis", 0)?, rank)?;
    // Stacking is concatenation of the elements with a new axis of size 1 inserted.
    let parts: Vec<Tensor> = elems
        .iter()
        .map(|e| {
            let mut shape = e.shape.clone();
            if new_axis {
                shape.insert(a, 1);
            }
            e.reshaped(&shape)
        })
        .collect();
    let mut oshape = parts[0].shape.clone();
    for (k, p) in parts.iter().enumerate() {
        let same = p.rank() == oshape.len()
            && (0..oshape.len()).all(|d| d == a || p.shape[d] == oshape[d]);
        if !same {
            return fail(format!(
                "element {k} has shape {:?}, which does not join {:?} on axis {a}",
                p.shape, parts[0].shape
            ));
        }
    }
    oshape[a] = parts.iter().map(|p| p.shape[a]).sum();
    let mut out = ctx.alloc_for_overwrite(s.dtype, &oshape)?;
    by_size!(elem_size(s.dtype)?, T => {
        let views: Vec<(&[T], &[usize])> = parts
            .iter()
            .map(|p| Ok((raw::<T>(p)?, p.shape.as_slice())))
            .collect::<Result<_, OpFail>>()?;
        mv::concat(&views, a, raw_mut::<T>(&mut out)?)?
    });
    Ok(vec![out])
}

/// The lengths of the pieces SplitToSequence cuts an axis of `n` into.
fn split_lengths(split: Option<&Tensor>, n: usize) -> Result<Vec<usize>, OpFail> {
    let Some(t) = split else {
        return Ok(vec![1; n]);
    };
    let v = t.to_i64_vec()?;
    if t.rank() == 0 {
        let c = v[0];
        if c <= 0 {
            return fail(format!("split size {c} must be positive"));
        }
        let c = c as usize;
        return Ok((0..n).step_by(c).map(|s| c.min(n - s)).collect());
    }
    if v.iter().any(|&x| x < 0) || v.iter().sum::<i64>() != n as i64 {
        return fail(format!(
            "split sizes {v:?} must be non-negative and add up to the axis length {n}"
        ));
    }
    Ok(v.into_iter().map(|x| x as usize).collect())
}

fn split_to_sequence(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let a = axis(ctx.int("axis", 0)?, x.rank())?;
    let split = inputs.get(1).copied().flatten();
    // keepdims = 0 drops the axis when the pieces have length 1: without `split`, or with a
    // scalar one (onnxruntime's reading, see the rule in `memplan_ir::ops::sequence`).
    let squeeze = split.is_none_or(|t| t.rank() == 0) && ctx.int("keepdims", 1)? == 0;
    let lens = split_lengths(split, x.shape[a])?;
    if squeeze && lens.iter().any(|&l| l != 1) {
        return fail("keepdims = 0 drops the split axis, so a scalar split must be 1");
    }
    let es = elem_size(x.dtype)?;
    let outer: usize = x.shape[..a].iter().product();
    let inner: usize = x.shape[a + 1..].iter().product::<usize>() * es;
    let row = x.shape[a] * inner;
    // The pieces, packed in order: each piece is `outer` runs of `len * inner` bytes.
    let mut out = ctx.alloc_for_overwrite(x.dtype, &[x.numel()])?;
    let (src, dst) = (x.bytes(), out.bytes_mut()?);
    let (mut at, mut start) = (0, 0);
    let mut shapes = Vec::with_capacity(lens.len());
    for &len in &lens {
        let run = len * inner;
        for o in 0..outer {
            let from = o * row + start * inner;
            dst[at..at + run].copy_from_slice(&src[from..from + run]);
            at += run;
        }
        start += len;
        let mut shape = x.shape.clone();
        if squeeze {
            shape.remove(a);
        } else {
            shape[a] = len;
        }
        shapes.push(shape);
    }
    let elems = shapes
        .into_iter()
        .map(|shape| SeqElem { shape, seq: None })
        .collect();
    out.seq = Some(Arc::new(SeqLayout {
        kind: SeqKind::Sequence,
        elems,
    }));
    Ok(vec![out])
}

/// The element type an empty `Optional` declares in its `type` attribute.
fn declared_elem_type(ctx: &OpCtx) -> Result<DataType, OpFail> {
    fn elem(t: &memplan_ir::graph::DeclType) -> Option<DataType> {
        use memplan_ir::graph::TypeDecl;
        match &t.ty {
            TypeDecl::Tensor { elem, .. } => *elem,
            TypeDecl::Sequence(e) | TypeDecl::Optional(e) => e.as_deref().and_then(elem),
            _ => None,
        }
    }
    match ctx.node.attr("type") {
        Some(AttrValue::Type(t)) => {
            elem(t).ok_or_else(|| OpFail::Invalid("attribute 'type' names no element type".into()))
        }
        _ => fail("an Optional without input needs the attribute 'type'"),
    }
}

fn optional(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    Ok(vec![match inputs.first().copied().flatten() {
        Some(x) => pack(ctx, x.dtype, SeqKind::Optional, &[x])?,
        None => pack(ctx, declared_elem_type(ctx)?, SeqKind::Optional, &[])?,
    }])
}

fn optional_has_element(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let has = match inputs.first().copied().flatten() {
        None => false,
        Some(t) => match &t.seq {
            Some(l) if l.kind == SeqKind::Optional => !l.elems.is_empty(),
            _ => true,
        },
    };
    let mut out = ctx.alloc(DataType::Bool, &[])?;
    out.bytes_mut()?[0] = u8::from(has);
    Ok(vec![out])
}

fn optional_get_element(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let optional = x.seq.as_ref().is_some_and(|l| l.kind == SeqKind::Optional);
    match x.elements() {
        Some(elems) if optional => match elems?.first() {
            Some(e) => Ok(vec![copy_of(ctx, e)?]),
            None => fail("the optional input holds no element"),
        },
        _ => Ok(vec![copy_of(ctx, x)?]),
    }
}
