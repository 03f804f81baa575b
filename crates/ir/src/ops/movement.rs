//! Op family: data movement (`Transpose`, `Slice`, `Split`, `Concat`, `Expand`, `Tile`, `Trilu`,
//! `Range`, `ReverseSequence`), folding small known tensors so shape arithmetic stays symbolic.

use crate::dim::Expr;
use crate::graph::{AttrValue, Node};
use crate::infer::{broadcast, invalid, normalize_axis, Fact, InferCtx, Known, OpError};

use super::axes::{
    self, attr_int, attr_ints, in_shape, norm, out_rank, out_shape, pass_through, passing, AxisFlow,
};
use super::basic::{known_fact, shape_operand};
use super::elementwise::broadcast_index;
use super::{Compare, Mem, Moves, Offset, OpDef, Positions, View, ONE, THREE, TWO, VARIADIC};

pub const DEFS: &[OpDef] = &[
    OpDef::new("Transpose", ONE, transpose, Mem::NEW)
        .flow(transpose_flow)
        .selects(&[0])
        .moves(Moves::Permuted),
    OpDef::new("Slice", (3, 5), slice, SLICE_MEM)
        .flow(slice_flow)
        .selects(&[0])
        .moves(Moves::Strided),
    OpDef::new("Split", (1, 2), split, Mem::NEW)
        .flow(split_flow)
        .selects(&[0]),
    OpDef::new("Concat", VARIADIC, concat, Mem::NEW)
        .flow(concat_flow)
        .selects_any(),
    OpDef::new("Expand", TWO, expand, Mem::NEW)
        .flow(axes::first_input)
        .shape_input(1)
        .selects(&[0]),
    OpDef::new("Tile", TWO, tile, Mem::NEW).selects(&[0]),
    OpDef::new("Pad", (1, 4), pad, Mem::NEW)
        .flow(pad_flow)
        .moves(Moves::Padded),
    OpDef::new("Trilu", (1, 2), same_as_input, Mem::OVERWRITE)
        .flow(trilu_flow)
        .positions(trilu_positions),
    OpDef::new("Range", THREE, range, Mem::NEW),
    // Output 0 is the input with each batch entry's first `sequence_lens` steps reversed.
    OpDef::new("ReverseSequence", TWO, same_as_input, Mem::OVERWRITE),
    OpDef::new("SpaceToDepth", ONE, space_depth, Mem::NEW)
        .flow(batch_flow)
        .selects(&[0]),
    OpDef::new("DepthToSpace", ONE, space_depth, Mem::NEW)
        .flow(batch_flow)
        .selects(&[0]),
];

/// `SpaceToDepth` `[N, C, H, W] -> [N, C*b*b, H/b, W/b]` and `DepthToSpace` back (`b` = `blocksize`).
fn space_depth(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    if x.len() != 4 {
        return invalid(format!("input has rank {}, needs 4 (N, C, H, W)", x.len()));
    }
    let b = ctx.attr_int("blocksize", 0)?;
    if b < 1 {
        return Err(OpError::BadAttr(
            "attribute 'blocksize' is required and must be >= 1".into(),
        ));
    }
    if let Some(m) = ctx.attr_string("mode")? {
        if m != "DCR" && m != "CRD" {
            return Err(OpError::BadAttr(format!("mode '{m}' is not DCR or CRD")));
        }
    }
    let Some(b2) = b.checked_mul(b) else {
        return Err(OpError::BadAttr(format!("blocksize {b} is too large")));
    };
    let (bb, be) = (Expr::int(b2), Expr::int(b));
    let divisible = |d: &Expr, by: &Expr| {
        d.as_const()
            .is_none_or(|v| v % by.as_const().unwrap_or(1) == 0)
    };
    let out = if ctx.node.op == "SpaceToDepth" {
        if !divisible(&x[2], &be) || !divisible(&x[3], &be) {
            return invalid(format!("H and W must be multiples of blocksize {b}"));
        }
        vec![
            x[0].clone(),
            &x[1] * &bb,
            x[2].floor_div(&be),
            x[3].floor_div(&be),
        ]
    } else {
        if !divisible(&x[1], &bb) {
            return invalid(format!("C must be a multiple of blocksize^2 = {b2}"));
        }
        vec![x[0].clone(), x[1].floor_div(&bb), &x[2] * &be, &x[3] * &be]
    };
    Ok(vec![Fact::new(t, out)])
}

/// A contiguous slice is a view of its input (see [`super::is_view`]).
const SLICE_MEM: Mem = Mem {
    view: View::ContiguousSlice,
    ..Mem::NEW
};

/// A `Transpose` node's `perm` for an input of `rank` axes: output axis `o` is input axis
/// `perm[o]`; the axes reversed when the attribute is absent.
pub fn transpose_perm(node: &Node, rank: usize) -> Vec<i64> {
    attr_ints(node, "perm").unwrap_or_else(|| (0..rank as i64).rev().collect())
}

/// Output axis `o` is input axis `perm[o]`.
fn transpose_flow(
    node: &Node,
    _inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = out_rank(outputs, 0)?;
    let perm = transpose_perm(node, r0);
    Some(vec![perm
        .iter()
        .map(|&p| AxisFlow::Split(vec![Some(p as usize)]))
        .collect()])
}

/// The concatenation axis is mixed; the others pass through every input.
fn concat_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = out_rank(outputs, 0)?;
    let axis = norm(attr_int(node, "axis", 0), r0)?;
    Some(vec![(0..r0)
        .map(|o| {
            if o == axis {
                AxisFlow::Mixed
            } else {
                AxisFlow::Split(vec![Some(o); inputs.len()])
            }
        })
        .collect()])
}

/// Axes it cuts are mixed; the others pass through, and so does an axis it keeps whole (step 1,
/// the output as long as the input there: `x[:S]` of an `[S, S]` tensor, as TorchScript exports
/// write `rel_pos[:q_len]`), whose slice of any chunk is the chunk. Needs known `axes` (or none)
/// and, for a kept axis, known `steps` (or none).
fn slice_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = out_rank(outputs, 0)?;
    let a = in_shape(inputs, 0)?;
    let known = |k: usize| {
        inputs
            .get(k)
            .copied()
            .flatten()
            .and_then(|f| f.value.as_ref())
            .and_then(|v| v.as_consts())
    };
    let starts = known(1)?;
    let cut: Vec<usize> = match node.inputs.get(3).copied().flatten() {
        None => (0..starts.len()).collect(),
        Some(_) => known(3)?
            .iter()
            .map(|&x| norm(x, a.len()))
            .collect::<Option<Vec<_>>>()?,
    };
    if a.len() != r0 {
        return None;
    }
    let steps = match node.inputs.get(4).copied().flatten() {
        None => Some(vec![1; cut.len()]),
        Some(_) => known(4),
    };
    let out = out_shape(outputs, 0);
    let kept = |i: usize, ax: usize| {
        let step = steps.as_ref().and_then(|s| s.get(i).copied());
        step == Some(1) && out.and_then(|o| o.get(ax)).is_some_and(|d| *d == a[ax])
    };
    let mixed: Vec<usize> = cut
        .iter()
        .enumerate()
        .filter(|&(i, &ax)| !kept(i, ax))
        .map(|(_, &ax)| ax)
        .collect();
    Some(vec![pass_through(inputs.len(), r0, &mixed)])
}

/// Every output is a run of the `axis` attribute's axis: that axis is mixed, the others pass
/// through input 0 to every output (the split sizes are read whole).
fn split_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    passing(inputs, outputs, outputs.len(), |r| {
        Some(vec![norm(attr_int(node, "axis", 0), r)?])
    })
}

/// The triangle is over the last two axes (mixed); the leading (batch) axes pass through, `k`
/// read whole.
fn trilu_flow(
    _node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    passing(inputs, outputs, 1, |r| (r >= 2).then(|| vec![r - 2, r - 1]))
}

/// `Trilu` keeps `x[.., i, j]` where `j - i >= k` (`upper`, the default) or `j - i <= k`; `k`
/// is its optional input 1.
fn trilu_positions(node: &Node) -> Positions {
    let upper = !matches!(node.attr("upper"), Some(AttrValue::Int(0)));
    Positions {
        compare: if upper {
            Compare::AtLeast
        } else {
            Compare::AtMost
        },
        offset: Offset::Input(1),
        keeps: Some(0),
    }
}

/// `SpaceToDepth` and `DepthToSpace` move elements between the channels and the spatial axes of
/// one batch entry: only the batch passes through.
fn batch_flow(
    _node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    passing(inputs, outputs, 1, |r| Some((1..r).collect()))
}

/// Axes padded (or cropped) by a known non-zero amount are mixed; an axis whose two amounts are
/// both zero passes through. The pad amounts, constant value and axes are read whole.
fn pad_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = out_rank(outputs, 0)?;
    if in_shape(inputs, 0)?.len() != r0 {
        return None;
    }
    let (before, after) = pad_sides(node, inputs, r0)?;
    let mixed: Vec<usize> = (0..r0)
        .filter(|&a| before[a] != 0 || after[a] != 0)
        .collect();
    Some(vec![pass_through(inputs.len(), r0, &mixed)])
}

/// A `Pad` node's amounts before and after each of the `rank` axes (negative: cropped), from its
/// `pads` attribute (opset 2) or its known `pads` and `axes` inputs; `None` where they are not
/// known.
pub fn pad_sides(
    node: &Node,
    inputs: &[Option<&Fact>],
    rank: usize,
) -> Option<(Vec<i64>, Vec<i64>)> {
    let known = |k: usize| {
        inputs
            .get(k)
            .copied()
            .flatten()
            .and_then(|f| f.value.as_ref())
            .and_then(|v| v.as_consts())
    };
    let pads = match attr_ints(node, "pads") {
        Some(p) => p,
        None => known(1)?,
    };
    let axes: Vec<usize> = match node.inputs.get(3).copied().flatten() {
        None => (0..rank).collect(),
        Some(_) => known(3)?
            .iter()
            .map(|&x| norm(x, rank))
            .collect::<Option<Vec<_>>>()?,
    };
    pad_amounts(&pads, &axes, rank)
}

/// Pad amounts `pads` (all befores, then all afters, one pair per axis of `axes`) as the amounts
/// before and after each of the `rank` axes; `None` where there are not two per axis.
pub fn pad_amounts(pads: &[i64], axes: &[usize], rank: usize) -> Option<(Vec<i64>, Vec<i64>)> {
    if pads.len() != 2 * axes.len() {
        return None;
    }
    let (mut before, mut after) = (vec![0i64; rank], vec![0i64; rank]);
    for (k, &a) in axes.iter().enumerate() {
        before[a] += pads[k];
        after[a] += pads[k + axes.len()];
    }
    Some((before, after))
}

/// How `Pad` fills the border.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PadMode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

impl PadMode {
    /// The mode a `Pad`'s `mode` attribute names (`constant` where it is absent); `None` for a
    /// name that is not a mode.
    pub fn named(name: Option<&str>) -> Option<PadMode> {
        match name {
            None | Some("constant") => Some(PadMode::Constant),
            Some("reflect") => Some(PadMode::Reflect),
            Some("edge") => Some(PadMode::Edge),
            Some("wrap") => Some(PadMode::Wrap),
            Some(_) => None,
        }
    }
}

/// For one axis of extent `n` padded by `before` (negative: cropped) to `out` elements, the input
/// index each output index reads, `None` where it takes the constant. `None` overall where a mode
/// other than `constant` pads an empty axis (there is nothing to repeat).
pub fn pad_map(n: usize, before: i64, out: usize, mode: PadMode) -> Option<Vec<Option<usize>>> {
    let ni = n as i64;
    if n == 0 && out > 0 && mode != PadMode::Constant {
        return None;
    }
    Some(
        (0..out as i64)
            .map(|i| {
                let j = i - before;
                match mode {
                    PadMode::Constant => (0..ni).contains(&j).then_some(j as usize),
                    PadMode::Edge => Some(j.clamp(0, ni - 1) as usize),
                    PadMode::Wrap => Some(j.rem_euclid(ni) as usize),
                    PadMode::Reflect => {
                        if ni == 1 {
                            return Some(0);
                        }
                        let period = 2 * (ni - 1);
                        let m = j.rem_euclid(period);
                        Some(if m < ni { m } else { period - m } as usize)
                    }
                }
            })
            .collect(),
    )
}

pub(super) fn same_as_input(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    Ok(vec![Fact::new(ctx.dtype(0)?, ctx.shape(0)?.to_vec())])
}

fn range(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    if t.is_float() {
        // The length from concrete float operands; the contents are the kernel's.
        let get = |i: usize| -> Option<f64> {
            match ctx.opt_input(i)?.value.as_ref()? {
                Known::Float(v) => v.first().copied(),
                Known::Int(v) => v.first()?.as_const().map(|c| c as f64),
                Known::Ratio(_) => None,
            }
        };
        let n = match (get(0), get(1), get(2)) {
            (Some(s), Some(l), Some(d)) if d != 0.0 => {
                Expr::int(((l - s) / d).ceil().max(0.0) as i64)
            }
            _ => ctx.fresh_symbol("range_len", "Range length from float operands"),
        };
        return Ok(vec![Fact::new(t, vec![n])]);
    }
    let get = |i: usize| -> Option<Expr> { ctx.known_ints(i)?.first().cloned() };
    let (s, l, d) = match (get(0), get(1), get(2)) {
        (Some(s), Some(l), Some(d)) => (s, l, d),
        _ => return Err(OpError::Unknown("Range operands".into())),
    };
    let Some(dc) = d.as_const() else {
        return Err(OpError::Unsupported("Range with a symbolic delta".into()));
    };
    if dc == 0 {
        return invalid("Range delta is 0");
    }
    // n = max(ceil((limit - start) / delta), 0)
    let n = Expr::max(&(&l - &s).ceil_div(&d), &Expr::zero());
    let value = n
        .as_const()
        .filter(|&c| c as usize <= crate::infer::MAX_KNOWN_ELEMS)
        .map(|c| Known::Int((0..c).map(|i| &s + &Expr::int(i * dc)).collect()));
    Ok(vec![known_fact(t, vec![n], value)])
}

fn expand(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let s = ctx.shape(0)?;
    let target = shape_operand(ctx, 1, "shape")?;
    let out = broadcast(&[s, &target])?;
    let value = fold_broadcast(ctx.input(0)?, &out);
    Ok(vec![known_fact(ctx.dtype(0)?, out, value)])
}

fn fold_broadcast(f: &Fact, out: &[Expr]) -> Option<Known> {
    let k = f.value.as_ref()?;
    let src = f.concrete_shape()?;
    let dst: Vec<usize> = out
        .iter()
        .map(|d| d.as_const().and_then(|c| usize::try_from(c).ok()))
        .collect::<Option<_>>()?;
    if dst.iter().product::<usize>() > crate::infer::MAX_KNOWN_ELEMS {
        return None;
    }
    let idx = broadcast_index(&src, &dst);
    k.pick(&idx)
}

fn concat(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let first = ctx.shape(0)?;
    let r = first.len();
    let axis = normalize_axis(
        ctx.attr_opt_int("axis")?
            .ok_or_else(|| OpError::BadAttr("attribute 'axis' is required".into()))?,
        r,
    )?;
    let mut out = first.to_vec();
    let mut total = Expr::zero();
    let mut parts: Option<Vec<&Known>> = (r == 1).then(Vec::new);
    for i in 0..ctx.num_inputs() {
        let Some(f) = ctx.opt_input(i) else { continue };
        let s = ctx.shape(i)?;
        if s.len() != r {
            return invalid(format!(
                "input {i} has rank {} but input 0 has rank {r}",
                s.len()
            ));
        }
        for (k, d) in s.iter().enumerate() {
            if k == axis {
                continue;
            }
            if let (Some(a), Some(b)) = (d.as_const(), out[k].as_const()) {
                if a != b {
                    return invalid(format!("input {i} dim {k} is {a} but input 0 has {b}"));
                }
            } else if out[k].as_const().is_none() && d.as_const().is_some() {
                out[k] = d.clone();
            }
        }
        total = &total + &s[axis];
        match (&f.value, parts.as_mut()) {
            (Some(k), Some(p)) => p.push(k),
            _ => parts = None,
        }
    }
    out[axis] = total;
    let value = parts.and_then(|p| Known::concat(&p));
    Ok(vec![known_fact(t, out, value)])
}

fn split(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let s = ctx.shape(0)?;
    let axis = normalize_axis(ctx.attr_int("axis", 0)?, s.len())?;
    let n_out = ctx.node.outputs.len();
    let sizes: Vec<Expr> = if let Some(v) = ctx.attr_ints("split")? {
        v.into_iter().map(Expr::int).collect()
    } else if ctx.opt_input(1).is_some() {
        shape_operand(ctx, 1, "split")?
    } else {
        let parts = ctx
            .attr_opt_int("num_outputs")?
            .unwrap_or(n_out as i64)
            .max(1);
        if parts != n_out as i64 {
            return invalid(format!(
                "split gives {parts} parts but the node has {n_out} outputs"
            ));
        }
        let d = &s[axis];
        let chunk = d.ceil_div(&Expr::int(parts));
        // The last chunk takes the remainder (opset 18 semantics); equal chunks when divisible.
        (0..parts)
            .map(|i| {
                if i + 1 < parts {
                    chunk.clone()
                } else {
                    d - &(&chunk * &Expr::int(parts - 1))
                }
            })
            .collect()
    };
    if sizes.len() != n_out {
        return invalid(format!(
            "split gives {} parts but the node has {n_out} outputs",
            sizes.len()
        ));
    }
    // A known vector (shape values) splits into known parts.
    let parts: Option<Vec<Known>> = (|| {
        let k = ctx.input(0).ok()?.value.as_ref()?;
        if s.len() != 1 {
            return None;
        }
        let mut at = 0usize;
        let mut parts = Vec::new();
        for sz in &sizes {
            let n = usize::try_from(sz.as_const()?).ok()?;
            parts.push(k.pick(&(at..at + n).collect::<Vec<_>>())?);
            at += n;
        }
        (at == k.len()).then_some(parts)
    })();
    Ok(sizes
        .into_iter()
        .enumerate()
        .map(|(j, sz)| {
            let mut o = s.to_vec();
            o[axis] = sz;
            known_fact(t, o, parts.as_ref().map(|p| p[j].clone()))
        })
        .collect())
}

/// Resolves a slice bound against a dim: negative counts from the end, then clamps to [lo, dim+hi].
fn slice_bound(v: &Expr, dim: &Expr, step_pos: bool) -> Expr {
    const BIG: i64 = 1 << 30;
    if let Some(c) = v.as_const() {
        if step_pos {
            if c >= BIG {
                return dim.clone();
            }
            if c <= -BIG {
                return Expr::zero();
            }
            if c < 0 {
                return Expr::max(&(dim + &Expr::int(c)), &Expr::zero());
            }
            return Expr::min(&Expr::int(c), dim);
        }
        // Negative step: bounds clamp to [-1, dim-1].
        if c >= BIG {
            return dim - &Expr::one();
        }
        if c <= -BIG {
            return Expr::int(-1);
        }
        if c < 0 {
            return Expr::max(&(dim + &Expr::int(c)), &Expr::int(-1));
        }
        return Expr::min(&Expr::int(c), &(dim - &Expr::one()));
    }
    if step_pos {
        v.min(dim)
    } else {
        v.min(&(dim - &Expr::one()))
    }
}

fn slice(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let s = ctx.shape(0)?;
    let (starts, ends, axes, steps) = if ctx.opset < 10 {
        let st = ctx
            .attr_ints("starts")?
            .ok_or_else(|| OpError::BadAttr("attribute 'starts' is required".into()))?;
        let en = ctx
            .attr_ints("ends")?
            .ok_or_else(|| OpError::BadAttr("attribute 'ends' is required".into()))?;
        let ax = ctx.attr_ints("axes")?;
        let e = |v: Vec<i64>| v.into_iter().map(Expr::int).collect::<Vec<_>>();
        (e(st), e(en), ax, None)
    } else {
        let st = shape_operand(ctx, 1, "starts")?;
        let en = shape_operand(ctx, 2, "ends")?;
        let ax = if ctx.opt_input(3).is_some() {
            Some(
                shape_operand(ctx, 3, "axes")?
                    .iter()
                    .map(|e| e.as_const())
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| OpError::Unsupported("symbolic axes".into()))?,
            )
        } else {
            None
        };
        let sp = if ctx.opt_input(4).is_some() {
            Some(
                shape_operand(ctx, 4, "steps")?
                    .iter()
                    .map(|e| e.as_const())
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| OpError::Unsupported("symbolic steps".into()))?,
            )
        } else {
            None
        };
        (st, en, ax, sp)
    };
    if starts.len() != ends.len() {
        return invalid(format!(
            "starts has {} entries but ends has {}",
            starts.len(),
            ends.len()
        ));
    }
    let axes: Vec<i64> = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if axes.len() != starts.len() || steps.len() != starts.len() {
        return invalid("starts, ends, axes and steps differ in length");
    }
    let mut out = s.to_vec();
    // Per output axis: (start, step) for folding.
    let mut plan: Vec<(usize, Expr, i64)> = Vec::new();
    for k in 0..starts.len() {
        let ax = normalize_axis(axes[k], s.len())?;
        let step = steps[k];
        if step == 0 {
            return invalid("slice step is 0");
        }
        let dim = &s[ax];
        let b = slice_bound(&starts[k], dim, step > 0);
        let e = slice_bound(&ends[k], dim, step > 0);
        let len = if step > 0 {
            Expr::max(&(&e - &b).ceil_div(&Expr::int(step)), &Expr::zero())
        } else {
            Expr::max(&(&b - &e).ceil_div(&Expr::int(-step)), &Expr::zero())
        };
        out[ax] = len;
        plan.push((ax, b, step));
    }
    let value = fold_slice(ctx.input(0)?, &out, &plan);
    Ok(vec![known_fact(t, out, value)])
}

fn fold_slice(f: &Fact, out: &[Expr], plan: &[(usize, Expr, i64)]) -> Option<Known> {
    let k = f.value.as_ref()?;
    let src = f.concrete_shape()?;
    let dst: Vec<usize> = out
        .iter()
        .map(|d| d.as_const().and_then(|c| usize::try_from(c).ok()))
        .collect::<Option<_>>()?;
    let mut start = vec![0i64; src.len()];
    let mut step = vec![1i64; src.len()];
    for (ax, b, st) in plan {
        start[*ax] = b.as_const()?;
        step[*ax] = *st;
    }
    let idx = strided_index(&src, &dst, |axis, i| start[axis] + i as i64 * step[axis])?;
    k.pick(&idx)
}

/// Row-major source indices for each destination coordinate mapped through `map(axis, i)`.
pub(super) fn strided_index(
    src: &[usize],
    dst: &[usize],
    map: impl Fn(usize, usize) -> i64,
) -> Option<Vec<usize>> {
    let n: usize = dst.iter().product();
    let mut strides = vec![1usize; src.len()];
    for k in (0..src.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * src[k + 1];
    }
    let mut res = Vec::with_capacity(n);
    let mut coord = vec![0usize; dst.len()];
    for _ in 0..n {
        let mut off = 0usize;
        for (axis, &c) in coord.iter().enumerate() {
            let j = map(axis, c);
            if j < 0 || j as usize >= src[axis] {
                return None;
            }
            off += j as usize * strides[axis];
        }
        res.push(off);
        for k in (0..dst.len()).rev() {
            coord[k] += 1;
            if coord[k] < dst[k] {
                break;
            }
            coord[k] = 0;
        }
    }
    Some(res)
}

fn transpose(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let s = ctx.shape(0)?;
    let r = s.len();
    let perm: Vec<i64> = ctx
        .attr_ints("perm")?
        .unwrap_or_else(|| (0..r as i64).rev().collect());
    if perm.len() != r {
        return invalid(format!("perm has {} entries for rank {r}", perm.len()));
    }
    let mut seen = vec![false; r];
    let mut out = Vec::with_capacity(r);
    for &p in &perm {
        let k = normalize_axis(p, r)?;
        if seen[k] {
            return invalid(format!("perm {perm:?} repeats axis {p}"));
        }
        seen[k] = true;
        out.push(s[k].clone());
    }
    let f = ctx.input(0)?;
    let value = (|| {
        let k = f.value.as_ref()?;
        let src = f.concrete_shape()?;
        let dst: Vec<usize> = perm.iter().map(|&p| src[p as usize]).collect();
        let mut strides = vec![1usize; r];
        for q in (0..r.saturating_sub(1)).rev() {
            strides[q] = strides[q + 1] * src[q + 1];
        }
        let n: usize = dst.iter().product();
        let mut idx = Vec::with_capacity(n);
        let mut coord = vec![0usize; r];
        for _ in 0..n {
            idx.push(
                coord
                    .iter()
                    .enumerate()
                    .map(|(q, c)| c * strides[perm[q] as usize])
                    .sum(),
            );
            for q in (0..r).rev() {
                coord[q] += 1;
                if coord[q] < dst[q] {
                    break;
                }
                coord[q] = 0;
            }
        }
        k.pick(&idx)
    })();
    Ok(vec![known_fact(ctx.dtype(0)?, out, value)])
}

fn tile(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let s = ctx.shape(0)?;
    let reps = shape_operand(ctx, 1, "repeats")?;
    if reps.len() != s.len() {
        return invalid(format!(
            "repeats has {} entries for rank {}",
            reps.len(),
            s.len()
        ));
    }
    let out: Vec<Expr> = s.iter().zip(&reps).map(|(d, r)| d * r).collect();
    let value = fold_tile(ctx.input(0)?, &out);
    Ok(vec![known_fact(ctx.dtype(0)?, out, value)])
}

/// Tiles known contents: output element `i` reads input element `i mod dims` on every axis.
fn fold_tile(f: &Fact, out: &[Expr]) -> Option<Known> {
    let k = f.value.as_ref()?;
    let src = f.concrete_shape()?;
    let dst: Vec<usize> = out
        .iter()
        .map(|d| d.as_const().and_then(|c| usize::try_from(c).ok()))
        .collect::<Option<_>>()?;
    let n: usize = dst.iter().product();
    if n > crate::infer::MAX_KNOWN_ELEMS || src.contains(&0) {
        return None;
    }
    let mut idx = Vec::with_capacity(n);
    let mut coord = vec![0usize; dst.len()];
    for _ in 0..n {
        idx.push(
            coord
                .iter()
                .zip(&src)
                .fold(0usize, |off, (c, d)| off * d + c % d),
        );
        for q in (0..dst.len()).rev() {
            coord[q] += 1;
            if coord[q] < dst[q] {
                break;
            }
            coord[q] = 0;
        }
    }
    k.pick(&idx)
}
/// `Pad`: each padded axis grows by its two amounts (negative amounts crop). Amounts from the
/// `pads` attribute (opset 2) or the `pads` input, known symbolically when computed from shapes; an
/// unknown amount gives the axis a fresh data-dependent extent.
fn pad(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    let r = x.len();
    let axes: Vec<usize> = match ctx.opt_input(3) {
        None => (0..r).collect(),
        Some(_) => match ctx.known_ints(3) {
            Some(a) => a
                .iter()
                .map(|e| {
                    let v = e
                        .as_const()
                        .ok_or_else(|| OpError::Invalid("Pad axes must be constants".into()))?;
                    ctx.axis(v, r)
                })
                .collect::<Result<_, _>>()?,
            None => {
                let dims = (0..r)
                    .map(|_| ctx.fresh_symbol("pad", "Pad over axes not known before running"))
                    .collect();
                return Ok(vec![Fact::new(t, dims)]);
            }
        },
    };
    let pads: Option<Vec<Expr>> = match ctx.attr_ints("pads")? {
        Some(p) => Some(p.into_iter().map(Expr::int).collect()),
        None => ctx.known_ints(1),
    };
    let mut out = x.clone();
    match pads {
        Some(p) => {
            if p.len() != 2 * axes.len() {
                return invalid(format!(
                    "Pad has {} pads for {} axes (needs two per axis)",
                    p.len(),
                    axes.len()
                ));
            }
            for (k, &a) in axes.iter().enumerate() {
                out[a] = &out[a] + &p[k] + &p[k + axes.len()];
                if out[a].as_const().is_some_and(|c| c < 0) {
                    return invalid(format!("Pad makes axis {a} negative"));
                }
            }
        }
        None => {
            for &a in &axes {
                out[a] = ctx.fresh_symbol("pad", "Pad amounts not known before running");
            }
        }
    }
    Ok(vec![Fact::new(t, out)])
}
