//! Op family: indexing (`Gather`, `GatherElements`, `GatherND`, `ScatterND`, `ScatterElements`,
//! `Scatter`, `NonZero`, `TopK`, `OneHot`, `Compress`, `Unique`, `TensorScatter`), folding `Gather`
//! of small known tensors so shape arithmetic stays symbolic.

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::graph::Node;
use crate::infer::{invalid, normalize_axis, Fact, InferCtx, Known, OpError};

use super::axes::{attr_int, from_first, in_shape, norm, out_rank, AxisFlow};
use super::basic::known_fact;
use super::{Mem, Moves, OpDef, ONE, THREE, TWO};

pub const DEFS: &[OpDef] = &[
    OpDef::new("Gather", TWO, gather, Mem::NEW)
        .flow(gather_flow)
        .selects(&[0])
        .moves(Moves::Indexed),
    OpDef::new("GatherElements", TWO, gather_elements, Mem::NEW)
        .flow(gather_elements_flow)
        .selects(&[0]),
    OpDef::new("GatherND", TWO, gather_nd, Mem::NEW).selects(&[0]),
    OpDef::new("ScatterND", THREE, scatter, Mem::OVERWRITE)
        .flow(scatter_nd_flow)
        .moves(Moves::Scatters),
    OpDef::new("ScatterElements", THREE, scatter, Mem::OVERWRITE),
    // The deprecated name of ScatterElements (before opset 11).
    OpDef::new("Scatter", THREE, scatter, Mem::NEW),
    OpDef::new("NonZero", ONE, nonzero, Mem::NEW),
    // Input 1 (K) from opset 10; before, attribute `k`.
    OpDef::new("TopK", (1, 2), topk, TOPK_MEM).flow(topk_flow),
    // Each output element is the off or the on value of input 2.
    OpDef::new("OneHot", THREE, one_hot, Mem::NEW)
        .flow(one_hot_flow)
        .selects(&[2]),
    OpDef::new("Compress", TWO, compress, Mem::NEW),
    OpDef::new("Unique", ONE, unique, UNIQUE_MEM),
    // past_cache, update, optional write_indices; output 0 is the cache overwritten.
    OpDef::new("TensorScatter", (2, 3), scatter, Mem::OVERWRITE),
];

const UNIQUE_MEM: Mem = Mem {
    scratch: Some(unique_scratch),
    ..Mem::NEW
};

/// Unique: two `u64` arrays over the compared items (the elements, or the slices along `axis`):
/// the sorting permutation and each item's group, `16 * items`.
fn unique_scratch(
    node: &Node,
    _opset: i64,
    inputs: &[Option<&Fact>],
    _outputs: &[Option<&Fact>],
) -> Expr {
    let bytes = || -> Option<Expr> {
        let shape = inputs.first().copied().flatten()?.shape.as_ref()?;
        let items = match node.attr("axis") {
            None => Expr::product(shape.iter()),
            Some(_) => shape[norm(attr_int(node, "axis", 0), shape.len())?].clone(),
        };
        Some(items * 16)
    };
    bytes().unwrap_or_else(Expr::zero)
}

/// OneHot: the indices' shape with `depth` (input 1, a known scalar) inserted at `axis`, of the
/// values' type.
fn one_hot(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let ind = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(2)?;
    let depth = ctx
        .known_ints(1)
        .ok_or_else(|| OpError::Unknown("contents of depth (input 1)".into()))?;
    let [d] = depth.as_slice() else {
        return invalid(format!(
            "depth must hold one element, holds {}",
            depth.len()
        ));
    };
    if d.as_const().is_some_and(|c| c < 1) {
        return invalid(format!("depth {d} must be positive"));
    }
    let r = ind.len() as i64;
    let a = ctx.attr_int("axis", -1)?;
    let a = if a < 0 { a + r + 1 } else { a };
    if !(0..=r).contains(&a) {
        return invalid(format!("axis {a} is out of range for rank {}", r + 1));
    }
    let mut out = ind;
    out.insert(a as usize, d.clone());
    Ok(vec![Fact::new(t, out)])
}

/// The number of kept entries: the count of true conditions when they are known, else a fresh
/// symbol (at most the axis extent).
fn compress(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let x = ctx.shape(0)?.to_vec();
    let a = match ctx.attr_opt_int("axis")? {
        Some(a) => Some(normalize_axis(a, x.len())?),
        None => None,
    };
    let count = match ctx
        .known_ints(1)
        .and_then(|v| v.iter().map(|e| e.as_const()).collect::<Option<Vec<i64>>>())
    {
        Some(c) => Expr::int(c.iter().filter(|&&v| v != 0).count() as i64),
        None => ctx.fresh_symbol("compress_count", "Compress's count depends on the data"),
    };
    let mut out = match a {
        Some(_) => x,
        None => vec![Expr::zero()],
    };
    out[a.unwrap_or(0)] = count;
    Ok(vec![Fact::new(t, out)])
}

/// Unique: `U` distinct items (a fresh symbol): Y has `U` items, `indices` and `counts` `U`
/// entries, `inverse_indices` one per input item.
fn unique(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let x = ctx.shape(0)?.to_vec();
    let u = ctx.fresh_symbol("unique_count", "Unique's count depends on the data");
    let (y, items) = match ctx.attr_opt_int("axis")? {
        Some(a) => {
            let a = normalize_axis(a, x.len())?;
            let mut y = x.clone();
            y[a] = u.clone();
            (y, x[a].clone())
        }
        None => (vec![u.clone()], Expr::product(x.iter())),
    };
    Ok(vec![
        Fact::new(t, y),
        Fact::new(DataType::I64, vec![u.clone()]),
        Fact::new(DataType::I64, vec![items]),
        Fact::new(DataType::I64, vec![u]),
    ])
}

const TOPK_MEM: Mem = Mem {
    scratch: Some(topk_scratch),
    ..Mem::NEW
};

/// Output axes before the gather axis come from the data, then the index axes, then the data's rest.
fn gather_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = out_rank(outputs, 0)?;
    let data = in_shape(inputs, 0)?;
    let idx = in_shape(inputs, 1)?;
    let axis = norm(attr_int(node, "axis", 0), data.len())?;
    let q = idx.len();
    Some(vec![(0..r0)
        .map(|o| {
            if o < axis {
                AxisFlow::Split(vec![Some(o), None])
            } else if o < axis + q {
                AxisFlow::Split(vec![None, Some(o - axis)])
            } else {
                AxisFlow::Split(vec![Some(o - q + 1), None])
            }
        })
        .collect()])
}

/// Output element `i` along the gather axis is data's element at index `i`'s value: the slices
/// along it are the indices' slices over the data read whole. The other axes pass through data and
/// indices alike.
fn gather_elements_flow(
    node: &Node,
    _inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = out_rank(outputs, 0)?;
    let axis = norm(attr_int(node, "axis", 0), r0)?;
    Some(vec![(0..r0)
        .map(|o| {
            if o == axis {
                AxisFlow::Split(vec![None, Some(o)])
            } else {
                AxisFlow::Split(vec![Some(o), Some(o)])
            }
        })
        .collect()])
}

/// ScatterND: index tuples of length `q` (the indices' last extent, known) address the first `q`
/// axes of the data, so those are mixed; along every later axis the output, the data and the
/// updates (their axis `o - q + r_i - 1`, `r_i` the indices' rank) slice alike, each element
/// updated by the same updates in the same order, and the indices are read whole. (A slice
/// assignment `x[.., a:b] = y` as torch's dynamo exporter writes it: a `ScatterND` of the rows
/// `a..b` of a transposed `x`.)
fn scatter_nd_flow(
    _node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = out_rank(outputs, 0)?;
    let idx = in_shape(inputs, 1)?;
    let q = usize::try_from(idx.last()?.as_const()?).ok()?;
    let ri = idx.len();
    Some(vec![(0..r0)
        .map(|o| {
            if o < q {
                AxisFlow::Mixed
            } else {
                AxisFlow::Split(vec![Some(o), None, Some(o - q + ri - 1)])
            }
        })
        .collect()])
}

/// Values and indices: the axis is mixed, the others pass through; K is read whole.
fn topk_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let f = super::axes::along_axis(node, inputs.len(), out_rank(outputs, 0)?)?;
    Some(vec![f.clone(), f])
}

/// OneHot: every axis of the indices passes to the output axis it becomes (an element is its own
/// index compared with its position along `depth`); the `depth` axis is mixed (a slice of it
/// compares with positions that start at the slice), and `depth` and `values` are read whole.
fn one_hot_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let rank = out_rank(outputs, 0)?;
    let at = norm(attr_int(node, "axis", -1), rank)?;
    let flows = (0..rank)
        .map(|o| {
            if o == at {
                return AxisFlow::Mixed;
            }
            from_first(inputs.len(), if o < at { o } else { o - 1 })
        })
        .collect();
    Some(vec![flows])
}

/// TopK: the indices of one row along the axis, `8 * shape[axis]`.
fn topk_scratch(
    node: &Node,
    _opset: i64,
    inputs: &[Option<&Fact>],
    _outputs: &[Option<&Fact>],
) -> Expr {
    let bytes = || -> Option<Expr> {
        let shape = inputs.first().copied().flatten()?.shape.as_ref()?;
        let a = norm(attr_int(node, "axis", -1), shape.len())?;
        Some(&shape[a] * 8)
    };
    bytes().unwrap_or_else(Expr::zero)
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
    k.pick(&res)
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
    let t = ctx.dtype(0)?;
    let out = ctx.shape(0)?.to_vec();
    let value = if ctx.node.op == "ScatterND" {
        fold_scatter_nd(ctx)
    } else {
        None
    };
    Ok(vec![known_fact(t, out, value)])
}

/// `ScatterND` (no reduction) of known contents at constant indices: each index tuple of depth `k`
/// replaces the block of `data` it addresses by the matching block of `updates`.
fn fold_scatter_nd(ctx: &InferCtx) -> Option<Known> {
    if ctx
        .attr_string("reduction")
        .ok()?
        .is_some_and(|r| r != "none")
    {
        return None;
    }
    let data = ctx.input(0).ok()?;
    let dims = data.concrete_shape()?;
    let mut out = data.value.clone()?;
    let ind = ctx.input(1).ok()?;
    let ishape = ind.concrete_shape()?;
    let idx = ind.value.as_ref()?.as_consts()?;
    let upd = ctx.input(2).ok()?.value.clone()?;
    let k = *ishape.last()?;
    if k == 0 || k > dims.len() {
        return None;
    }
    let block: usize = dims[k..].iter().product();
    for (j, tuple) in idx.chunks(k).enumerate() {
        let mut off = 0usize;
        for (q, &i) in tuple.iter().enumerate() {
            let n = dims[q] as i64;
            let i = if i < 0 { i + n } else { i };
            if !(0..n).contains(&i) {
                return None;
            }
            off = off * dims[q] + i as usize;
        }
        let (dst, src) = (off * block, j * block);
        match (&mut out, &upd) {
            (Known::Int(o), Known::Int(u)) => {
                o.get_mut(dst..dst + block)?
                    .clone_from_slice(u.get(src..src + block)?);
            }
            (Known::Float(o), Known::Float(u)) => {
                o.get_mut(dst..dst + block)?
                    .copy_from_slice(u.get(src..src + block)?);
            }
            _ => return None,
        }
    }
    Some(out)
}

/// `NonZero`: its count depends on the data, except where the input's value set proves it: every
/// element when no value is zero (the index grid TorchScript writes as `NonZero` of a
/// `ConstantOfShape` of ones), none when every value is.
fn nonzero(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let shape = ctx.shape(0)?;
    let r = shape.len();
    let zeros = ctx.input_value_set(0).map(|s| {
        (
            s.values.iter().filter(|&&v| v == 0.0).count(),
            s.values.len(),
        )
    });
    let n = match zeros {
        Some((0, _)) => Expr::product(shape),
        Some((z, all)) if z == all => Expr::int(0),
        _ => ctx.fresh_symbol("nonzero_count", "NonZero's count depends on the data"),
    };
    Ok(vec![Fact::new(DataType::I64, vec![Expr::int(r as i64), n])])
}

fn topk(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let s = ctx.shape(0)?;
    if s.is_empty() {
        return invalid("TopK needs an input of rank >= 1");
    }
    let axis = normalize_axis(ctx.attr_int("axis", -1)?, s.len())?;
    let k = if let Some(k) = ctx.attr_opt_int("k")? {
        Some(Expr::int(k))
    } else if ctx.opt_input(1).is_some() {
        match ctx.known_ints(1) {
            Some(v) if v.len() == 1 => Some(v[0].clone()),
            Some(v) => return invalid(format!("K must hold one element, holds {}", v.len())),
            None => None,
        }
    } else {
        return invalid("TopK needs K (input 1, or attribute 'k' before opset 10)");
    };
    let k = match k {
        Some(k) => {
            if let Some(c) = k.as_const() {
                if c < 0 {
                    return invalid(format!("K = {c} is negative"));
                }
                if let Some(d) = s[axis].as_const() {
                    if c > d {
                        return invalid(format!("K = {c} exceeds dim {axis} of size {d}"));
                    }
                }
            }
            k
        }
        None => ctx.fresh_symbol("topk_k", "TopK's K is not known before run time"),
    };
    let mut out = s.to_vec();
    out[axis] = k;
    Ok(vec![
        Fact::new(t, out.clone()),
        Fact::new(DataType::I64, out),
    ])
}
