//! Op family: ops without arithmetic: `Identity`, the views (`Reshape`, `Flatten`, `Squeeze`,
//! `Unsqueeze`), `Shape`, `Size`, `Constant`, `ConstantOfShape`, `EyeLike`, with constant folding so that shape
//! arithmetic (`Shape -> Gather -> Concat -> Reshape`) stays symbolic.

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::graph::Node;
use crate::infer::{invalid, normalize_axis, Fact, InferCtx, Known, OpError};

use super::axes;
use super::{Compare, Mem, Moves, Offset, OpDef, Positions, ONE, TWO};

pub const DEFS: &[OpDef] = &[
    OpDef::new("Identity", ONE, identity, Mem::ALIAS)
        .flow(axes::first_input)
        .selects(&[0])
        .moves(Moves::Order),
    OpDef::new("Shape", ONE, shape, Mem::NEW).shapes_only(),
    OpDef::new("Size", ONE, size, Mem::NEW).shapes_only(),
    OpDef::new("Constant", (0, 0), constant, Mem::NEW),
    OpDef::new("ConstantOfShape", ONE, constant_of_shape, Mem::NEW)
        .fills()
        .flow(axes::generated)
        .shape_input(0),
    OpDef::new("Reshape", TWO, reshape, Mem::ALIAS)
        .flow(axes::reshape)
        .shape_input(1)
        .selects(&[0])
        .moves(Moves::Order),
    OpDef::new("Flatten", ONE, flatten, Mem::ALIAS)
        .flow(axes::reshape)
        .selects(&[0])
        .moves(Moves::Order),
    OpDef::new("Squeeze", (1, 2), squeeze, Mem::ALIAS)
        .flow(axes::reshape)
        .selects(&[0])
        .moves(Moves::Order),
    OpDef::new("Unsqueeze", (1, 2), unsqueeze, Mem::ALIAS)
        .flow(axes::reshape)
        .selects(&[0])
        .moves(Moves::Order),
    OpDef::new("EyeLike", ONE, eye_like, Mem::NEW)
        .shapes_only()
        .positions(eye_like_positions),
];

/// EyeLike: a 2-D input's shape, of type `dtype` (default: the input's).
/// `EyeLike` is one where `j - i == k` (attribute `k`), of a rank-2 shape.
fn eye_like_positions(_node: &Node) -> Positions {
    Positions {
        compare: Compare::Equal,
        offset: Offset::Attr("k"),
        keeps: None,
    }
}

fn eye_like(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let s = ctx.shape(0)?.to_vec();
    if s.len() != 2 {
        return invalid(format!("EyeLike needs a 2-D input, got rank {}", s.len()));
    }
    let t = match ctx.attr_dtype("dtype")? {
        Some(t) => t,
        None => ctx.dtype(0)?,
    };
    Ok(vec![Fact::new(t, s)])
}

fn identity(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    Ok(vec![ctx.input(0)?.clone()])
}

pub(super) fn known_fact(t: DataType, shape: Vec<Expr>, value: Option<Known>) -> Fact {
    match value {
        Some(v) => Fact::with_value(t, shape, v),
        None => Fact::new(t, shape),
    }
}

pub(super) fn ints_fact(values: Vec<Expr>) -> Fact {
    let n = values.len() as i64;
    Fact::with_value(DataType::I64, vec![Expr::int(n)], Known::Int(values))
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
pub(super) fn shape_operand(ctx: &InferCtx, i: usize, what: &str) -> Result<Vec<Expr>, OpError> {
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
pub(super) fn axes_operand(ctx: &InferCtx, input: usize) -> Result<Option<Vec<i64>>, OpError> {
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

    /// A data-dependent symbol is named after the value it sizes, not after the node's place in the
    /// file: two `NonZero`s listed in either order get the same symbols (a model written in its
    /// planned order takes the dims given for the original).
    #[test]
    fn data_dependent_symbols_do_not_depend_on_node_order() {
        let symbols = |a_first: bool| {
            let mut t = TestGraph::new();
            let x = t.input("x", DataType::F32, "N");
            let y = t.input("y", DataType::F32, "M");
            let (first, second) = if a_first { (x, y) } else { (y, x) };
            let (n1, n2) = if a_first { ("a", "b") } else { ("b", "a") };
            let o1 = t.op("NonZero", &[first], &[n1], vec![])[0];
            let o2 = t.op("NonZero", &[second], &[n2], vec![])[0];
            let f = t.run(18).unwrap();
            let (a, b) = if a_first { (o1, o2) } else { (o2, o1) };
            (shape_of(&f, a), shape_of(&f, b))
        };
        assert_eq!(symbols(true), symbols(false));
        assert_eq!(
            symbols(true),
            ("[1, nonzero_count_a]".into(), "[1, nonzero_count_b]".into())
        );
    }

    #[test]
    fn nonzero_introduces_a_named_symbol() {
        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "N");
        let nz = t.op("NonZero", &[x], &["nz"], vec![])[0];
        let f = t.run(18).unwrap();
        assert_eq!(shape_of(&f, nz), "[1, nonzero_count_nz]");
        assert_eq!(f.symbols.introduced.len(), 1);
        assert!(
            f.symbols.introduced[0].reason.contains("NonZero"),
            "{:?}",
            f.symbols.introduced
        );
    }

    /// A `NonZero` whose input's value set proves its count: of ones made by `ConstantOfShape`
    /// over a `Shape` (TorchScript's index grid), every element, also through a `Transpose`; of
    /// zeros (the default fill), none; of a bool input (0 or 1), a fresh symbol as before.
    #[test]
    fn nonzero_counts_what_its_input_value_set_proves() {
        let mut t = TestGraph::new();
        let x = t.input("x", DataType::F32, "N, M");
        let b = t.input("b", DataType::Bool, "N");
        let s = t.op("Shape", &[x], &["s"], vec![])[0];
        let one = crate::tensor::TensorData::from_i64("one", vec![1], &[1]);
        let ones = t.op(
            "ConstantOfShape",
            &[s],
            &["ones"],
            vec![attr("value", AttrValue::Tensor(one))],
        )[0];
        let moved = t.op("Transpose", &[ones], &["moved"], vec![])[0];
        let all = t.op("NonZero", &[moved], &["all"], vec![])[0];
        let zeros = t.op("ConstantOfShape", &[s], &["zeros"], vec![])[0];
        let none = t.op("NonZero", &[zeros], &["none"], vec![])[0];
        let some = t.op("NonZero", &[b], &["some"], vec![])[0];
        let f = t.run(18).unwrap();
        assert_eq!(shape_of(&f, all), "[2, M*N]");
        assert_eq!(shape_of(&f, none), "[2, 0]");
        assert_eq!(shape_of(&f, some), "[1, nonzero_count_some]");
        assert_eq!(f.symbols.introduced.len(), 1, "{:?}", f.symbols.introduced);
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
