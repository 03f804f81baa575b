//! Op family: sequences and optionals (`SequenceEmpty`, `SequenceConstruct`, `SequenceAt`,
//! `SequenceInsert`, `SequenceErase`, `SequenceLength`, `ConcatFromSequence`, `SplitToSequence`,
//! `Optional`, `OptionalHasElement`, `OptionalGetElement`).
//!
//! A sequence's fact lists its elements' facts (see [`crate::infer::SeqFact`]); the executor holds a
//! sequence as one packed buffer of its elements, so its bytes are the sum of theirs and every op
//! here makes a new value (a copy), as the memory rule says. Positions must be known at inference
//! time where they decide which element is read or where one goes.

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::infer::{invalid, Fact, InferCtx, Known, OpError, SeqKind};

use super::{Mem, OpDef, ONE, TWO, VARIADIC};

pub const DEFS: &[OpDef] = &[
    OpDef::new("SequenceEmpty", (0, 0), sequence_empty, Mem::NEW),
    OpDef::new("SequenceConstruct", VARIADIC, sequence_construct, Mem::NEW),
    OpDef::new("SequenceAt", TWO, sequence_at, Mem::NEW),
    OpDef::new("SequenceInsert", (2, 3), sequence_insert, Mem::NEW),
    OpDef::new("SequenceErase", (1, 2), sequence_erase, Mem::NEW),
    OpDef::new("SequenceLength", ONE, sequence_length, Mem::NEW),
    OpDef::new("ConcatFromSequence", ONE, concat_from_sequence, Mem::NEW),
    OpDef::new("SplitToSequence", (1, 2), split_to_sequence, Mem::NEW),
    OpDef::new("Optional", (0, 1), optional, Mem::NEW),
    OpDef::new("OptionalHasElement", (0, 1), optional_has_element, Mem::NEW),
    OpDef::new("OptionalGetElement", ONE, optional_get_element, Mem::NEW),
];

/// Input `i` as a sequence (or optional): its kind and its elements when their number is known.
fn seq_input<'a>(
    ctx: &InferCtx<'a>,
    i: usize,
) -> Result<(SeqKind, Option<&'a [Fact]>, Option<DataType>), OpError> {
    let f = ctx.input(i)?;
    match &f.seq {
        Some(s) => Ok((s.kind, s.elems.as_deref(), f.dtype)),
        None if f.dtype.is_none() && f.shape.is_none() => {
            Err(OpError::Unknown(format!("type of input {i}")))
        }
        None => invalid(format!("input {i} must be a sequence, got a tensor")),
    }
}

/// Input `i` as a tensor (not a sequence).
fn tensor_input<'a>(ctx: &InferCtx<'a>, i: usize) -> Result<&'a Fact, OpError> {
    let f = ctx.input(i)?;
    if f.seq.is_some() {
        return invalid(format!("input {i} must be a tensor, got a sequence"));
    }
    Ok(f)
}

/// The elements of sequence input `i`, which must be known for the rule to place or pick one.
fn known_elems<'a>(ctx: &InferCtx<'a>, i: usize) -> Result<&'a [Fact], OpError> {
    seq_input(ctx, i)?
        .1
        .ok_or_else(|| OpError::Unknown(format!("number of elements of sequence input {i}")))
}

/// Sequence input `i`'s symbolic element count and common element fact, when it has them.
fn uniform_input<'a>(ctx: &InferCtx<'a>, i: usize) -> Option<(&'a Expr, &'a Fact)> {
    ctx.opt_input(i)?.uniform()
}

/// Whether `a` and `b` describe the same element (type and shape; contents aside).
fn same_elem(a: &Fact, b: &Fact) -> bool {
    a.dtype == b.dtype && a.shape == b.shape && a.seq == b.seq
}

/// The fact of an element joining a sequence of type `seq_t`: the types must agree.
fn check_elem(seq_t: Option<DataType>, e: &Fact, what: &str) -> Result<(), OpError> {
    match (seq_t, e.dtype) {
        (Some(a), Some(b)) if a != b => {
            invalid(format!("{what} is {b} but the sequence holds {a} tensors"))
        }
        _ => Ok(()),
    }
}

/// The scalar integer at input `i` (a position), `None` when the input is absent.
fn position(ctx: &InferCtx, i: usize) -> Result<Option<i64>, OpError> {
    let Some(f) = ctx.opt_input(i) else {
        return Ok(None);
    };
    if let Some(s) = &f.shape {
        if !(s.is_empty() || s.len() == 1 && s[0].as_const() == Some(1)) {
            return invalid(format!("input {i} (a position) must be a scalar"));
        }
    }
    match f.value.as_ref().and_then(Known::as_consts).as_deref() {
        Some([p]) => Ok(Some(*p)),
        Some(_) => invalid(format!("input {i} (a position) must hold one element")),
        None => Err(OpError::Unknown(format!(
            "contents of input {i} (a position)"
        ))),
    }
}

/// `p` normalized against `n` elements, accepting `-n..=n-1` (or `..=n` when `end_ok`, for an
/// insertion point).
fn normalize_position(p: i64, n: usize, end_ok: bool) -> Result<usize, OpError> {
    let n = n as i64;
    let hi = if end_ok { n } else { n - 1 };
    if p < -n || p > hi {
        return invalid(format!(
            "position {p} is out of range for a sequence of {n} elements"
        ));
    }
    Ok((if p < 0 { p + n } else { p }) as usize)
}

fn sequence_empty(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.attr_dtype("dtype")?.unwrap_or(DataType::F32);
    Ok(vec![Fact::sequence(
        SeqKind::Sequence,
        Some(t),
        Some(vec![]),
    )])
}

fn sequence_construct(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let mut elems = Vec::with_capacity(ctx.num_inputs());
    let mut t = None;
    for i in 0..ctx.num_inputs() {
        let e = tensor_input(ctx, i)?;
        check_elem(t, e, &format!("input {i}"))?;
        t = t.or(e.dtype);
        elems.push(e.clone());
    }
    Ok(vec![Fact::sequence(SeqKind::Sequence, t, Some(elems))])
}

fn sequence_at(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    if let Some((_, e)) = uniform_input(ctx, 0) {
        return Ok(vec![e.clone()]);
    }
    let elems = known_elems(ctx, 0)?;
    match position(ctx, 1) {
        Ok(Some(p)) => Ok(vec![
            elems[normalize_position(p, elems.len(), false)?].clone()
        ]),
        // Any element will do when all are alike.
        Err(OpError::Unknown(why)) => match elems.split_first() {
            Some((first, rest)) if rest.iter().all(|e| e == first) => Ok(vec![first.clone()]),
            _ => Err(OpError::Unknown(why)),
        },
        Ok(None) => invalid("input 1 (the position) is required"),
        Err(e) => Err(e),
    }
}

fn sequence_insert(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let (_, _, t) = seq_input(ctx, 0)?;
    let e = tensor_input(ctx, 1)?;
    check_elem(t, e, "the inserted tensor")?;
    if let Some((len, u)) = uniform_input(ctx, 0) {
        if same_elem(u, e) {
            return Ok(vec![Fact::uniform_sequence(
                len.clone() + Expr::one(),
                u.clone(),
            )]);
        }
    }
    let mut elems = known_elems(ctx, 0)?.to_vec();
    let at = match position(ctx, 2)? {
        Some(p) => normalize_position(p, elems.len(), true)?,
        None => elems.len(),
    };
    elems.insert(at, e.clone());
    Ok(vec![Fact::sequence(
        SeqKind::Sequence,
        t.or(e.dtype),
        Some(elems),
    )])
}

fn sequence_erase(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let (_, _, t) = seq_input(ctx, 0)?;
    if let Some((len, u)) = uniform_input(ctx, 0) {
        return Ok(vec![Fact::uniform_sequence(
            len.clone() - Expr::one(),
            u.clone(),
        )]);
    }
    let mut elems = known_elems(ctx, 0)?.to_vec();
    if elems.is_empty() {
        return invalid("cannot erase from an empty sequence");
    }
    let at = match position(ctx, 1)? {
        Some(p) => normalize_position(p, elems.len(), false)?,
        None => elems.len() - 1,
    };
    elems.remove(at);
    Ok(vec![Fact::sequence(SeqKind::Sequence, t, Some(elems))])
}

fn sequence_length(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let (_, elems, _) = seq_input(ctx, 0)?;
    let len = match (elems, uniform_input(ctx, 0)) {
        (Some(e), _) => Some(Expr::int(e.len() as i64)),
        (None, Some((len, _))) => Some(len.clone()),
        (None, None) => None,
    };
    Ok(vec![match len {
        Some(n) => Fact::with_value(DataType::I64, vec![], Known::Int(vec![n])),
        None => Fact::new(DataType::I64, vec![]),
    }])
}

/// The concrete shapes of known elements (the concatenation and split rules need them exactly).
fn elem_shape(e: &Fact, k: usize) -> Result<&[Expr], OpError> {
    e.shape
        .as_deref()
        .ok_or_else(|| OpError::Unknown(format!("shape of element {k}")))
}

fn concat_from_sequence(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let (_, _, t) = seq_input(ctx, 0)?;
    let new_axis = ctx.attr_int("new_axis", 0)? != 0;
    if let Some((len, e)) = uniform_input(ctx, 0) {
        let mut shape = elem_shape(e, 0)?.to_vec();
        let axis = ctx.axis(
            ctx.attr_int("axis", 0)?,
            shape.len() + usize::from(new_axis),
        )?;
        if new_axis {
            shape.insert(axis, len.clone());
        } else {
            shape[axis] = len.clone() * shape[axis].clone();
        }
        let t = t.ok_or_else(|| OpError::Unknown("element type".into()))?;
        return Ok(vec![Fact::new(t, shape)]);
    }
    let elems = known_elems(ctx, 0)?;
    let Some(first) = elems.first() else {
        return invalid("ConcatFromSequence of an empty sequence");
    };
    let s0 = elem_shape(first, 0)?;
    let rank = s0.len() + usize::from(new_axis);
    let axis = ctx.axis(ctx.attr_int("axis", 0)?, rank)?;
    let mut total = Expr::zero();
    for (k, e) in elems.iter().enumerate() {
        let s = elem_shape(e, k)?;
        if s.len() != s0.len() {
            return invalid(format!(
                "element {k} has rank {} but element 0 has rank {}",
                s.len(),
                s0.len()
            ));
        }
        for (d, (a, b)) in s.iter().zip(s0).enumerate() {
            if (new_axis || d != axis) && a != b {
                return invalid(format!(
                    "element {k} has dim {d} = {a} but element 0 has {b}"
                ));
            }
        }
        if !new_axis {
            total += s[axis].clone();
        }
    }
    let mut shape = s0.to_vec();
    if new_axis {
        shape.insert(axis, Expr::int(elems.len() as i64));
    } else {
        shape[axis] = total;
    }
    let t = t.ok_or_else(|| OpError::Unknown("element type".into()))?;
    Ok(vec![Fact::new(t, shape)])
}

fn split_to_sequence(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    tensor_input(ctx, 0)?;
    let t = ctx.dtype(0)?;
    let s = ctx.shape(0)?.to_vec();
    let axis = ctx.axis(ctx.attr_int("axis", 0)?, s.len())?;
    let keepdims = ctx.attr_int("keepdims", 1)? != 0;
    let piece = |len: Expr| {
        let mut p = s.clone();
        p[axis] = len;
        Fact::new(t, p)
    };
    // Pieces of length 1 (no `split`, or a scalar 1) lose the axis with keepdims = 0. ONNX says
    // keepdims applies only without `split`; onnxruntime (which the TorchScript exporter's
    // `unbind` relies on) also applies it to a scalar `split`, and so does memplan.
    let ones = |keep: bool| {
        let mut p = s.clone();
        if keep {
            p[axis] = Expr::one();
        } else {
            p.remove(axis);
        }
        Fact::uniform_sequence(s[axis].clone(), Fact::new(t, p))
    };
    let elems = match ctx.opt_input(1) {
        None => return Ok(vec![ones(keepdims)]),
        Some(f) => {
            let sizes = f
                .value
                .as_ref()
                .and_then(Known::as_exprs)
                .ok_or_else(|| OpError::Unknown("contents of input 1 (split)".into()))?;
            match f.rank() {
                Some(0) if sizes[0].as_const() == Some(1) => return Ok(vec![ones(keepdims)]),
                Some(0) if !keepdims => {
                    return invalid(format!(
                        "keepdims = 0 drops the split axis, so a scalar split must be 1, got {}",
                        sizes[0]
                    ))
                }
                Some(0) => {
                    let (Some(c), Some(n)) = (sizes[0].as_const(), s[axis].as_const()) else {
                        return Err(OpError::Unknown(
                            "a chunk size or split axis that is not a constant".into(),
                        ));
                    };
                    if c <= 0 {
                        return invalid(format!("split size {c} must be positive"));
                    }
                    (0..n)
                        .step_by(c as usize)
                        .map(|start| piece(Expr::int(c.min(n - start))))
                        .collect()
                }
                _ => {
                    let total = Expr::sum(sizes.iter());
                    if total.as_const().is_some()
                        && s[axis].as_const().is_some()
                        && total != s[axis]
                    {
                        return invalid(format!(
                            "the split sizes add up to {total} but the axis has {}",
                            s[axis]
                        ));
                    }
                    if sizes.iter().any(|e| e.as_const().is_some_and(|c| c < 0)) {
                        return invalid("split sizes must not be negative");
                    }
                    sizes.into_iter().map(piece).collect()
                }
            }
        }
    };
    Ok(vec![Fact::sequence(
        SeqKind::Sequence,
        Some(t),
        Some(elems),
    )])
}

/// `Optional(x)`: an optional holding `x`; without an input, an empty optional of the type the
/// `type` attribute gives.
fn optional(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    match ctx.opt_input(0) {
        Some(x) => Ok(vec![Fact::sequence(
            SeqKind::Optional,
            x.dtype,
            Some(vec![x.clone()]),
        )]),
        None => {
            let ty = ctx
                .attr_type("type")?
                .ok_or_else(|| OpError::BadAttr("an Optional without input needs 'type'".into()))?;
            let t = match ty.as_tensor() {
                Some((t, _)) => t,
                None => crate::infer::declared_seq_fact(ty).and_then(|f| f.dtype),
            };
            Ok(vec![Fact::sequence(SeqKind::Optional, t, Some(vec![]))])
        }
    }
}

fn bool_scalar(b: Option<bool>) -> Fact {
    match b {
        Some(b) => Fact::with_value(
            DataType::Bool,
            vec![],
            Known::Int(vec![Expr::int(i64::from(b))]),
        ),
        None => Fact::new(DataType::Bool, vec![]),
    }
}

/// True when the input is a present tensor or sequence, or an optional holding an element.
fn optional_has_element(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let has = match ctx.opt_input(0) {
        None => Some(false),
        Some(f) => match &f.seq {
            Some(s) if s.kind == SeqKind::Optional => s.elems.as_ref().map(|e| !e.is_empty()),
            _ => Some(true),
        },
    };
    Ok(vec![bool_scalar(has)])
}

/// The element of an optional (which must hold one); a tensor or sequence input is itself.
fn optional_get_element(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let f = ctx.input(0)?;
    match &f.seq {
        Some(s) if s.kind == SeqKind::Optional => match s.elems.as_deref() {
            Some([e]) => Ok(vec![e.clone()]),
            Some(_) => invalid("the optional input holds no element"),
            None => Err(OpError::Unknown(
                "whether the optional holds an element".into(),
            )),
        },
        _ => Ok(vec![f.clone()]),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{a_int, shape_of, TestGraph};
    use crate::dtype::DataType;
    use crate::graph::ValueId;
    use crate::infer::{Facts, InferError};

    /// The element shapes of sequence `v`, `?` when unknown.
    fn elems_of(f: &Facts, v: ValueId) -> Vec<String> {
        let Some(es) = f.get(v).elems() else {
            return vec!["?".into()];
        };
        es.iter()
            .map(|e| {
                e.shape
                    .as_deref()
                    .map(crate::infer::fmt_shape)
                    .unwrap_or_default()
            })
            .collect()
    }

    fn err(t: &TestGraph) -> String {
        match t.run(18) {
            Err(InferError::Node { msg, .. }) => msg,
            other => panic!("expected a node error, got {other:?}"),
        }
    }

    #[test]
    fn split_insert_at_erase_and_concat_track_every_element() {
        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "N, 5");
        let split = t.ints("split", &[2], &[2, 3]);
        let s = t.op(
            "SplitToSequence",
            &[x, split],
            &["s"],
            vec![a_int("axis", 1)],
        )[0];
        let y = t.input("y", DataType::F32, "N, 4");
        let front = t.ints("front", &[], &[0]);
        let s2 = t.op("SequenceInsert", &[s, y, front], &["s2"], vec![])[0];
        let last = t.ints("last", &[], &[-1]);
        let e = t.op("SequenceAt", &[s2, last], &["e"], vec![])[0];
        let s3 = t.op("SequenceErase", &[s2, front], &["s3"], vec![])[0];
        let c = t.op("ConcatFromSequence", &[s2], &["c"], vec![a_int("axis", 1)])[0];
        let n = t.op("SequenceLength", &[s2], &["n"], vec![])[0];
        let f = t.run(18).unwrap();
        assert_eq!(elems_of(&f, s), ["[N, 2]", "[N, 3]"]);
        assert_eq!(elems_of(&f, s2), ["[N, 4]", "[N, 2]", "[N, 3]"]);
        assert_eq!(elems_of(&f, s3), ["[N, 2]", "[N, 3]"]);
        assert_eq!(shape_of(&f, e), "[N, 3]");
        assert_eq!(shape_of(&f, c), "[N, 9]");
        assert_eq!(f.get(n).value.as_ref().unwrap().as_consts(), Some(vec![3]));
        // A sequence's bytes are its elements': 9 floats a row.
        assert_eq!(f.get(s2).bytes().unwrap().to_string(), "36*N");
    }

    #[test]
    fn split_without_sizes_cuts_ones_and_can_drop_the_axis() {
        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "3, N");
        let a = t.op("SplitToSequence", &[x], &["a"], vec![])[0];
        let b = t.op("SplitToSequence", &[x], &["b"], vec![a_int("keepdims", 0)])[0];
        let two = t.ints("two", &[], &[2]);
        let c = t.op("SplitToSequence", &[x, two], &["c"], vec![])[0];
        let f = t.run(18).unwrap();
        assert_eq!(elems_of(&f, a), ["[1, N]"; 3]);
        assert_eq!(elems_of(&f, b), ["[N]"; 3]);
        assert_eq!(elems_of(&f, c), ["[2, N]", "[1, N]"]);
    }

    #[test]
    fn optionals_know_whether_they_hold_an_element() {
        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "N");
        let o = t.op("Optional", &[x], &["o"], vec![])[0];
        let h = t.op("OptionalHasElement", &[o], &["h"], vec![])[0];
        let g = t.op("OptionalGetElement", &[o], &["g"], vec![])[0];
        let none = t.node("none", "OptionalHasElement", &[], &["none"], vec![])[0];
        let f = t.run(18).unwrap();
        assert_eq!(f.get(h).value.as_ref().unwrap().as_consts(), Some(vec![1]));
        assert_eq!(
            f.get(none).value.as_ref().unwrap().as_consts(),
            Some(vec![0])
        );
        assert_eq!(shape_of(&f, g), "[N]");
        assert_eq!(f.get(o).bytes().unwrap().to_string(), "4*N");
    }

    #[test]
    fn bad_positions_types_and_sizes_name_the_rule() {
        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "2");
        let s = t.op("SequenceConstruct", &[x, x], &["s"], vec![])[0];
        let p = t.ints("p", &[], &[2]);
        t.op("SequenceAt", &[s, p], &["e"], vec![]);
        assert_eq!(
            err(&t),
            "position 2 is out of range for a sequence of 2 elements"
        );

        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "2");
        let y = t.input("y", DataType::I64, "2");
        t.op("SequenceConstruct", &[x, y], &["s"], vec![]);
        assert_eq!(
            err(&t),
            "input 1 is int64 but the sequence holds float tensors"
        );

        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "2");
        t.op("SequenceLength", &[x], &["n"], vec![]);
        assert_eq!(err(&t), "input 0 must be a sequence, got a tensor");

        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "5");
        let split = t.ints("split", &[2], &[2, 2]);
        t.op("SplitToSequence", &[x, split], &["s"], vec![]);
        assert_eq!(err(&t), "the split sizes add up to 4 but the axis has 5");
    }
}

#[cfg(test)]
mod uniform_tests {
    use super::super::tests::{a_int, shape_of, TestGraph};
    use crate::dtype::DataType;

    /// `unbind` of a symbolic axis (what the TorchScript exporter writes for `torch.unbind` and
    /// `torch.stack`): a sequence of `B` alike elements, stacked back on a new axis.
    #[test]
    fn a_split_of_a_symbolic_axis_is_a_sequence_of_symbolic_length() {
        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "B, S, 4");
        let one = t.ints("one", &[], &[1]);
        let s = t.op(
            "SplitToSequence",
            &[x, one],
            &["s"],
            vec![a_int("keepdims", 0)],
        )[0];
        let y = t.op(
            "ConcatFromSequence",
            &[s],
            &["y"],
            vec![a_int("axis", 1), a_int("new_axis", 1)],
        )[0];
        let z = t.op("ConcatFromSequence", &[s], &["z"], vec![a_int("axis", 0)])[0];
        let n = t.op("SequenceLength", &[s], &["n"], vec![])[0];
        let p = t.ints("p", &[], &[-1]);
        let e = t.op("SequenceAt", &[s, p], &["e"], vec![])[0];
        let x2 = t.input("x2", DataType::F32, "S, 4");
        let s2 = t.op("SequenceInsert", &[s, x2], &["s2"], vec![])[0];
        let f = t.run(18).unwrap();
        let (len, elem) = f.get(s).uniform().unwrap();
        assert_eq!(len.to_string(), "B");
        assert_eq!(
            elem.shape.as_deref().map(crate::infer::fmt_shape).unwrap(),
            "[S, 4]"
        );
        assert_eq!(f.get(s).bytes().unwrap().to_string(), "16*B*S");
        assert_eq!(shape_of(&f, y), "[S, B, 4]");
        assert_eq!(shape_of(&f, z), "[B*S, 4]");
        assert_eq!(shape_of(&f, e), "[S, 4]");
        assert_eq!(
            f.get(n).value.as_ref().unwrap().as_exprs().unwrap()[0].to_string(),
            "B"
        );
        assert_eq!(f.get(s2).uniform().unwrap().0.to_string(), "B + 1");
    }
}
