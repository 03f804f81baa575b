//! Op family: shape and data movement (Shape, Reshape, Slice, Gather, Concat, Transpose, Expand, ...),
//! with constant folding so that shape arithmetic (`Shape -> Gather -> Concat -> Reshape`) stays symbolic.

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::infer::{broadcast, invalid, normalize_axis, Fact, InferCtx, Known, OpError};

use super::elementwise::broadcast_index;
use super::{Mem, OpDef, View};

const fn def(op: &'static str, infer: super::InferFn, mem: Mem) -> OpDef {
    OpDef { op, infer, mem }
}

pub const DEFS: &[OpDef] = &[
    def("Shape", shape, Mem::NEW),
    def("Size", size, Mem::NEW),
    def("Constant", constant, Mem::NEW),
    def("ConstantOfShape", constant_of_shape, Mem::NEW),
    def("Range", range, Mem::NEW),
    def("Reshape", reshape, Mem::ALIAS),
    def("Flatten", flatten, Mem::ALIAS),
    def("Squeeze", squeeze, Mem::ALIAS),
    def("Unsqueeze", unsqueeze, Mem::ALIAS),
    def("Expand", expand, Mem::NEW),
    def("Concat", concat, Mem::NEW),
    def("Split", split, Mem::NEW),
    def(
        "Slice",
        slice,
        Mem {
            view: View::ContiguousSlice,
            ..Mem::NEW
        },
    ),
    def("Gather", gather, Mem::NEW),
    def("GatherElements", gather_elements, Mem::NEW),
    def("GatherND", gather_nd, Mem::NEW),
    def("ScatterND", scatter, Mem::OVERWRITE),
    def("ScatterElements", scatter, Mem::OVERWRITE),
    def("Transpose", transpose, Mem::NEW),
    def("Tile", tile, Mem::NEW),
    def("Pad", pad, Mem::NEW),
    def("NonZero", nonzero, Mem::NEW),
    def("Trilu", same_as_input, Mem::OVERWRITE),
    def("CumSum", same_as_input, Mem::OVERWRITE),
];

fn known_fact(t: DataType, shape: Vec<Expr>, value: Option<Known>) -> Fact {
    match value {
        Some(v) => Fact::with_value(t, shape, v),
        None => Fact::new(t, shape),
    }
}

fn ints_fact(values: Vec<Expr>) -> Fact {
    let n = values.len() as i64;
    Fact::with_value(DataType::I64, vec![Expr::int(n)], Known::Int(values))
}

fn same_as_input(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    Ok(vec![Fact::new(ctx.dtype(0)?, ctx.shape(0)?.to_vec())])
}

fn shape(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let s = ctx.shape(0)?;
    let r = s.len() as i64;
    let clamp = |v: i64| -> usize { (if v < 0 { v + r } else { v }).clamp(0, r) as usize };
    let start = clamp(ctx.attr_int("start", 0)?);
    let end = clamp(ctx.attr_int("end", r)?);
    let dims = if start < end {
        s[start..end].to_vec()
    } else {
        Vec::new()
    };
    Ok(vec![ints_fact(dims)])
}

fn size(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let n = Expr::product(ctx.shape(0)?.iter());
    Ok(vec![Fact::with_value(
        DataType::I64,
        vec![],
        Known::Int(vec![n]),
    )])
}

fn constant(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    if let Some(t) = ctx.attr_tensor("value")? {
        return Ok(vec![Fact::of_tensor(t)]);
    }
    if let Some(AttrFloat(f)) = attr_float_opt(ctx)? {
        return Ok(vec![Fact::with_value(
            DataType::F32,
            vec![],
            Known::Float(vec![f as f64]),
        )]);
    }
    if let Some(v) = ctx.attr_opt_int("value_int")? {
        return Ok(vec![Fact::with_value(
            DataType::I64,
            vec![],
            Known::Int(vec![Expr::int(v)]),
        )]);
    }
    if let Some(v) = ctx.attr_floats("value_floats")? {
        let n = v.len() as i64;
        return Ok(vec![Fact::with_value(
            DataType::F32,
            vec![Expr::int(n)],
            Known::Float(v.into_iter().map(|x| x as f64).collect()),
        )]);
    }
    if let Some(v) = ctx.attr_ints("value_ints")? {
        return Ok(vec![ints_fact(v.into_iter().map(Expr::int).collect())]);
    }
    if ctx.attr_string("value_string")?.is_some() {
        return Ok(vec![Fact::new(DataType::String, vec![])]);
    }
    if let Some(crate::graph::AttrValue::Strings(v)) = ctx.node.attr("value_strings") {
        return Ok(vec![Fact::new(
            DataType::String,
            vec![Expr::int(v.len() as i64)],
        )]);
    }
    if ctx.node.attr("sparse_value").is_some() {
        return Err(OpError::Unsupported("Constant with sparse_value".into()));
    }
    invalid("Constant has no value attribute")
}

struct AttrFloat(f32);

fn attr_float_opt(ctx: &InferCtx) -> Result<Option<AttrFloat>, OpError> {
    match ctx.node.attr("value_float") {
        None => Ok(None),
        Some(_) => Ok(Some(AttrFloat(ctx.attr_float("value_float", 0.0)?))),
    }
}

/// The contents of a 1-D shape-like input (e.g. Reshape's `shape`), as expressions.
fn shape_operand(ctx: &InferCtx, i: usize, what: &str) -> Result<Vec<Expr>, OpError> {
    ctx.known_ints(i)
        .ok_or_else(|| OpError::Unknown(format!("contents of {what} (input {i})")))
}

fn constant_of_shape(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let dims = shape_operand(ctx, 0, "shape")?;
    let (t, fill) = match ctx.attr_tensor("value")? {
        Some(v) => {
            let f = Fact::of_tensor(v);
            (v.dtype, f.value)
        }
        None => (DataType::F32, Some(Known::Float(vec![0.0]))),
    };
    let n = dims
        .iter()
        .map(|d| d.as_const())
        .collect::<Option<Vec<i64>>>()
        .map(|v| v.iter().product::<i64>());
    let value = match (n, fill) {
        (Some(n), Some(Known::Int(v)))
            if (0..=crate::infer::MAX_KNOWN_ELEMS as i64).contains(&n) && v.len() == 1 =>
        {
            Some(Known::Int(vec![v[0].clone(); n as usize]))
        }
        (Some(n), Some(Known::Float(v)))
            if (0..=crate::infer::MAX_KNOWN_ELEMS as i64).contains(&n) && v.len() == 1 =>
        {
            Some(Known::Float(vec![v[0]; n as usize]))
        }
        _ => None,
    };
    Ok(vec![known_fact(t, dims, value)])
}

fn range(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let scalar = |i: usize| -> Option<Known> { ctx.opt_input(i)?.value.clone() };
    let (s, l, d) = (scalar(0), scalar(1), scalar(2));
    if t.is_float() {
        let get = |k: &Option<Known>| -> Option<f64> {
            match k.as_ref()? {
                Known::Float(v) => v.first().copied(),
                Known::Int(v) => v.first()?.as_const().map(|c| c as f64),
            }
        };
        return match (get(&s), get(&l), get(&d)) {
            (Some(s), Some(l), Some(d)) if d != 0.0 => {
                let n = ((l - s) / d).ceil().max(0.0) as i64;
                let vals: Vec<f64> = (0..n).map(|i| s + i as f64 * d).collect();
                Ok(vec![Fact::with_value(
                    t,
                    vec![Expr::int(n)],
                    Known::Float(vals),
                )])
            }
            _ => {
                let n = ctx.fresh_symbol("range_len", "Range length from float operands");
                Ok(vec![Fact::new(t, vec![n])])
            }
        };
    }
    let get = |k: &Option<Known>| -> Option<Expr> { k.as_ref()?.as_exprs()?.first().cloned() };
    let (s, l, d) = match (get(&s), get(&l), get(&d)) {
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

fn reshape(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let inp = ctx.input(0)?;
    let t = ctx.dtype(0)?;
    let in_shape = ctx.shape(0)?;
    let target = shape_operand(ctx, 1, "shape")?;
    let allowzero = ctx.attr_int("allowzero", 0)? != 0;
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, d) in target.iter().enumerate() {
        match d.as_const() {
            Some(0) if !allowzero => {
                let Some(src) = in_shape.get(i) else {
                    return invalid(format!(
                        "shape dim {i} is 0 (copy) but the input has rank {}",
                        in_shape.len()
                    ));
                };
                out.push(src.clone());
            }
            Some(-1) => {
                if infer_at.is_some() {
                    return invalid("shape has more than one -1");
                }
                infer_at = Some(i);
                out.push(Expr::one());
            }
            Some(c) if c < -1 => return invalid(format!("shape dim {i} is {c}")),
            _ => out.push(d.clone()),
        }
    }
    let total = Expr::product(in_shape.iter());
    if let Some(i) = infer_at {
        let rest = Expr::product(out.iter());
        if rest.as_const() == Some(0) {
            return invalid("shape has -1 and a 0 dim");
        }
        out[i] = total.floor_div(&rest);
    } else if let (Some(a), Some(b)) = (total.as_const(), Expr::product(out.iter()).as_const()) {
        if a != b {
            return invalid(format!(
                "cannot reshape {} ({a} elements) to {} ({b} elements)",
                crate::infer::fmt_shape(in_shape),
                crate::infer::fmt_shape(&out)
            ));
        }
    }
    Ok(vec![known_fact(t, out, inp.value.clone())])
}

fn flatten(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let s = ctx.shape(0)?;
    let r = s.len();
    let a = ctx.attr_int("axis", 1)?;
    let a = if a < 0 { a + r as i64 } else { a };
    if a < 0 || a > r as i64 {
        return invalid(format!("axis {a} is out of range for rank {r}"));
    }
    let a = a as usize;
    let out = vec![Expr::product(s[..a].iter()), Expr::product(s[a..].iter())];
    Ok(vec![known_fact(
        ctx.dtype(0)?,
        out,
        ctx.input(0)?.value.clone(),
    )])
}

/// Axes from the `axes` input (opset >= 13) or attribute.
fn axes_operand(ctx: &InferCtx, input: usize) -> Result<Option<Vec<i64>>, OpError> {
    if let Some(a) = ctx.attr_ints("axes")? {
        return Ok(Some(a));
    }
    if ctx.opt_input(input).is_none() {
        return Ok(None);
    }
    let v = ctx
        .known_ints(input)
        .ok_or_else(|| OpError::Unknown("contents of axes".into()))?;
    let c = v.iter().map(|e| e.as_const()).collect::<Option<Vec<_>>>();
    c.map(Some)
        .ok_or_else(|| OpError::Unsupported("symbolic axes".into()))
}

fn squeeze(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let s = ctx.shape(0)?;
    let axes = axes_operand(ctx, 1)?;
    let out: Vec<Expr> = match axes {
        None => s
            .iter()
            .filter(|d| d.as_const() != Some(1))
            .cloned()
            .collect(),
        Some(axes) => {
            let mut drop = vec![false; s.len()];
            for a in axes {
                let k = normalize_axis(a, s.len())?;
                if let Some(c) = s[k].as_const() {
                    if c != 1 {
                        return invalid(format!("cannot squeeze axis {a} of size {c}"));
                    }
                }
                drop[k] = true;
            }
            s.iter()
                .zip(drop)
                .filter(|(_, d)| !d)
                .map(|(e, _)| e.clone())
                .collect()
        }
    };
    Ok(vec![known_fact(
        ctx.dtype(0)?,
        out,
        ctx.input(0)?.value.clone(),
    )])
}

fn unsqueeze(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let s = ctx.shape(0)?;
    let axes =
        axes_operand(ctx, 1)?.ok_or_else(|| OpError::Invalid("Unsqueeze needs axes".into()))?;
    let r = s.len() + axes.len();
    let mut ins = vec![false; r];
    for a in &axes {
        let k = normalize_axis(*a, r)?;
        if ins[k] {
            return invalid(format!("axis {a} repeated"));
        }
        ins[k] = true;
    }
    let mut it = s.iter();
    let out: Vec<Expr> = ins
        .iter()
        .map(|&one| {
            if one {
                Expr::one()
            } else {
                it.next().cloned().unwrap_or_else(Expr::one)
            }
        })
        .collect();
    Ok(vec![known_fact(
        ctx.dtype(0)?,
        out,
        ctx.input(0)?.value.clone(),
    )])
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
    Some(match k {
        Known::Int(v) => Known::Int(idx.iter().map(|&j| v[j].clone()).collect()),
        Known::Float(v) => Known::Float(idx.iter().map(|&j| v[j]).collect()),
    })
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
    let mut ints: Option<Vec<Expr>> = (r == 1).then(Vec::new);
    let mut floats: Option<Vec<f64>> = (r == 1).then(Vec::new);
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
        match &f.value {
            Some(Known::Int(v)) => {
                if let Some(x) = ints.as_mut() {
                    x.extend(v.iter().cloned())
                }
                floats = None;
            }
            Some(Known::Float(v)) => {
                if let Some(x) = floats.as_mut() {
                    x.extend(v.iter().copied())
                }
                ints = None;
            }
            None => {
                ints = None;
                floats = None;
            }
        }
    }
    out[axis] = total;
    let value = ints.map(Known::Int).or(floats.map(Known::Float));
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
    Ok(sizes
        .into_iter()
        .map(|sz| {
            let mut o = s.to_vec();
            o[axis] = sz;
            Fact::new(t, o)
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
    Some(pick(k, &idx))
}

/// Row-major source indices for each destination coordinate mapped through `map(axis, i)`.
fn strided_index(
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

fn pick(k: &Known, idx: &[usize]) -> Known {
    match k {
        Known::Int(v) => Known::Int(idx.iter().map(|&j| v[j].clone()).collect()),
        Known::Float(v) => Known::Float(idx.iter().map(|&j| v[j]).collect()),
    }
}

fn gather(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let data = ctx.shape(0)?;
    let ind = ctx.shape(1)?;
    let axis = normalize_axis(ctx.attr_int("axis", 0)?, data.len())?;
    let mut out = data[..axis].to_vec();
    out.extend(ind.iter().cloned());
    out.extend(data[axis + 1..].iter().cloned());
    let value = fold_gather(ctx, axis, &out);
    Ok(vec![known_fact(t, out, value)])
}

fn fold_gather(ctx: &InferCtx, axis: usize, out: &[Expr]) -> Option<Known> {
    let d = ctx.input(0).ok()?;
    let k = d.value.as_ref()?;
    let src = d.concrete_shape()?;
    let idx = ctx.input(1).ok()?.value.as_ref()?.as_consts()?;
    let ishape = ctx.input(1).ok()?.concrete_shape()?;
    let dst: Vec<usize> = out
        .iter()
        .map(|d| d.as_const().and_then(|c| usize::try_from(c).ok()))
        .collect::<Option<_>>()?;
    let ir = ishape.len();
    let n_axis = src[axis] as i64;
    let mut ishape_strides = vec![1usize; ir];
    for q in (0..ir.saturating_sub(1)).rev() {
        ishape_strides[q] = ishape_strides[q + 1] * ishape[q + 1];
    }
    // Destination coordinate -> source coordinate: axes before `axis` pass, then ir index axes, then the rest.
    let mut strides = vec![1usize; src.len()];
    for q in (0..src.len().saturating_sub(1)).rev() {
        strides[q] = strides[q + 1] * src[q + 1];
    }
    let n: usize = dst.iter().product();
    let mut res = Vec::with_capacity(n);
    let mut coord = vec![0usize; dst.len()];
    for _ in 0..n {
        let mut off = 0usize;
        for q in 0..axis {
            off += coord[q] * strides[q];
        }
        let flat: usize = (0..ir).map(|q| coord[axis + q] * ishape_strides[q]).sum();
        let mut j = *idx.get(flat)?;
        if j < 0 {
            j += n_axis;
        }
        if j < 0 || j >= n_axis {
            return None;
        }
        off += j as usize * strides[axis];
        for q in axis + 1..src.len() {
            off += coord[q - 1 + ir] * strides[q];
        }
        res.push(off);
        for q in (0..dst.len()).rev() {
            coord[q] += 1;
            if coord[q] < dst[q] {
                break;
            }
            coord[q] = 0;
        }
    }
    Some(pick(k, &res))
}

fn gather_elements(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let data = ctx.shape(0)?;
    let ind = ctx.shape(1)?;
    if data.len() != ind.len() {
        return invalid(format!(
            "data has rank {} but indices has rank {}",
            data.len(),
            ind.len()
        ));
    }
    normalize_axis(ctx.attr_int("axis", 0)?, data.len())?;
    Ok(vec![Fact::new(t, ind.to_vec())])
}

fn gather_nd(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let data = ctx.shape(0)?;
    let ind = ctx.shape(1)?;
    let b = ctx.attr_int("batch_dims", 0)?.max(0) as usize;
    let Some(last) = ind.last() else {
        return invalid("indices must have rank >= 1");
    };
    let Some(k) = last.as_const() else {
        return Err(OpError::Unsupported(
            "GatherND with a symbolic last indices dim".into(),
        ));
    };
    let k = k as usize;
    if b + k > data.len() {
        return invalid(format!(
            "batch_dims {b} + index depth {k} exceeds data rank {}",
            data.len()
        ));
    }
    let mut out = ind[..ind.len() - 1].to_vec();
    out.extend(data[b + k..].iter().cloned());
    Ok(vec![Fact::new(t, out)])
}

fn scatter(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    Ok(vec![Fact::new(ctx.dtype(0)?, ctx.shape(0)?.to_vec())])
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
        Some(pick(k, &idx))
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
    let out = s.iter().zip(&reps).map(|(d, r)| d * r).collect();
    Ok(vec![Fact::new(ctx.dtype(0)?, out)])
}

fn nonzero(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let r = ctx.shape(0)?.len();
    let n = ctx.fresh_symbol("nonzero_count", "NonZero's count depends on the data");
    Ok(vec![Fact::new(DataType::I64, vec![Expr::int(r as i64), n])])
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

#[cfg(test)]
mod tests {
    use super::super::tests::{attr, shape_of, TestGraph};
    use crate::graph::AttrValue;
    use crate::infer::Known;
    use crate::DataType;

    /// The legacy exporter's reshape idiom: `Shape -> Gather -> Unsqueeze -> Concat -> Reshape`
    /// folds to symbolic dims, and the reshape's output is in the input symbols.
    #[test]
    fn shape_arithmetic_stays_symbolic() {
        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "B, S, 256");
        let s = t.op("Shape", &[x], &["s"], vec![])[0];
        let i0 = t.ints("i0", &[], &[0]);
        let i1 = t.ints("i1", &[], &[1]);
        let b = t.op(
            "Gather",
            &[s, i0],
            &["b"],
            vec![attr("axis", AttrValue::Int(0))],
        )[0];
        let sq = t.op("Gather", &[s, i1], &["sq"], vec![])[0];
        let ax = t.ints("ax", &[1], &[0]);
        let b1 = t.op("Unsqueeze", &[b, ax], &["b1"], vec![])[0];
        let s1 = t.op("Unsqueeze", &[sq, ax], &["s1"], vec![])[0];
        let h = t.ints("h", &[2], &[4, 64]);
        let shp = t.op(
            "Concat",
            &[b1, s1, h],
            &["shp"],
            vec![attr("axis", AttrValue::Int(0))],
        )[0];
        let y = t.op("Reshape", &[x, shp], &["y"], vec![])[0];
        let f = t.run(18).unwrap();
        assert_eq!(shape_of(&f, s), "[3]");
        assert_eq!(
            f.get(shp).value,
            Some(Known::Int(vec![
                "B".parse().unwrap(),
                "S".parse().unwrap(),
                4.into(),
                64.into()
            ]))
        );
        assert_eq!(shape_of(&f, y), "[B, S, 4, 64]");
    }

    #[test]
    fn reshape_infers_minus_one_and_copies_zero() {
        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "N, N, 32");
        let shp = t.ints("shp", &[3], &[0, -1, 8]);
        let y = t.op("Reshape", &[x, shp], &["y"], vec![])[0];
        let f = t.run(18).unwrap();
        assert_eq!(shape_of(&f, y), "[N, 4*N, 8]");
    }

    #[test]
    fn expand_range_constant_of_shape_and_slice() {
        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "N, 1, 3");
        let shp = t.ints("shp", &[3], &[1, 7, 1]);
        let e = t.op("Expand", &[x, shp], &["e"], vec![])[0];
        let s = t.op("Shape", &[x], &["s"], vec![])[0];
        let c = t.op("ConstantOfShape", &[s], &["c"], vec![])[0];
        let zero = t.ints("zero", &[], &[0]);
        let i0 = t.ints("i0", &[], &[0]);
        let n = t.op("Gather", &[s, i0], &["n"], vec![])[0];
        let one = t.ints("one", &[], &[1]);
        let r = t.op("Range", &[zero, n, one], &["r"], vec![])[0];
        let starts = t.ints("starts", &[1], &[1]);
        let ends = t.ints("ends", &[1], &[i64::MAX]);
        let axes = t.ints("axes", &[1], &[0]);
        let sl = t.node(
            "sl",
            "Slice",
            &[Some(x), Some(starts), Some(ends), Some(axes)],
            &["sl"],
            vec![],
        )[0];
        let f = t.run(18).unwrap();
        assert_eq!(shape_of(&f, e), "[N, 7, 3]");
        assert_eq!(shape_of(&f, c), "[N, 1, 3]");
        assert_eq!(f.get(c).dtype, Some(DataType::F32));
        assert_eq!(shape_of(&f, r), "[N]");
        assert_eq!(shape_of(&f, sl), "[N - 1, 1, 3]");
    }

    #[test]
    fn nonzero_introduces_a_named_symbol() {
        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "N");
        let nz = t.op("NonZero", &[x], &["nz"], vec![])[0];
        let f = t.run(18).unwrap();
        assert_eq!(shape_of(&f, nz), "[1, nonzero_count]");
        assert_eq!(f.symbols.introduced.len(), 1);
        assert!(
            f.symbols.introduced[0].reason.contains("NonZero"),
            "{:?}",
            f.symbols.introduced
        );
    }

    #[test]
    fn transpose_concat_and_gather_shapes() {
        let mut t = TestGraph::new();
        let a = t.input("a", DataType::F32, "N, M, 4");
        let b = t.input("b", DataType::F32, "N, M, 2");
        let tr = t.op(
            "Transpose",
            &[a],
            &["tr"],
            vec![attr("perm", AttrValue::Ints(vec![2, 0, 1]))],
        )[0];
        let cat = t.op(
            "Concat",
            &[a, b],
            &["cat"],
            vec![attr("axis", AttrValue::Int(-1))],
        )[0];
        let idx = t.input("idx", DataType::I64, "K, 5");
        let g = t.op(
            "Gather",
            &[a, idx],
            &["g"],
            vec![attr("axis", AttrValue::Int(1))],
        )[0];
        let f = t.run(18).unwrap();
        assert_eq!(shape_of(&f, tr), "[4, N, M]");
        assert_eq!(shape_of(&f, cat), "[N, M, 6]");
        assert_eq!(shape_of(&f, g), "[N, K, 5, 4]");
        let mut bad = TestGraph::new();
        let a = bad.input("a", DataType::F32, "N, 3");
        let b = bad.input("b", DataType::F32, "N, 4, 1");
        bad.op(
            "Concat",
            &[a, b],
            &["c"],
            vec![attr("axis", AttrValue::Int(0))],
        );
        let e = bad.run(18).unwrap_err().to_string();
        assert!(e.contains("'concat_0' (Concat)"), "{e}");
    }
}
