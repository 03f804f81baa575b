//! Op family: linear algebra (`MatMul`, `Gemm`, `Einsum`, `Det`).
//!
//! Contracted dims must agree: two different constants are a contradiction (an error naming both
//! shapes); a symbol against a constant takes the constant; two different symbols take their `max`,
//! which is exact whenever the model is valid (they are equal, or one of them broadcasts from 1).

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::infer::{broadcast, fmt_shape, invalid, Fact, InferCtx, OpError};

use crate::graph::Node;

use super::axes::{self, in_shape, out_rank, AxisFlow};
use super::{Mem, OpDef, ONE, TWO};

pub const DEFS: &[OpDef] = &[
    OpDef::new("MatMul", TWO, matmul, MATMUL_MEM)
        .flow(matmul_flow)
        .contracted(matmul_k),
    OpDef::new("Gemm", (2, 3), gemm, MATMUL_MEM)
        .flow(gemm_flow)
        .contracted(gemm_k),
    OpDef::new("Einsum", (1, usize::MAX), einsum, EINSUM_MEM)
        .flow(axes::einsum)
        .contracted(einsum_k),
    OpDef::new("Det", ONE, det, DET_MEM).flow(det_flow),
];

/// MatMul sums over A's last axis.
fn matmul_k(_node: &Node, inputs: &[Option<&Fact>]) -> Option<Expr> {
    in_shape(inputs, 0)?.last().cloned()
}

/// Gemm sums over A's columns, or its rows with `transA`.
fn gemm_k(node: &Node, inputs: &[Option<&Fact>]) -> Option<Expr> {
    let a = in_shape(inputs, 0)?;
    let trans = matches!(node.attr("transA"), Some(crate::graph::AttrValue::Int(t)) if *t != 0);
    a.get(usize::from(!trans)).cloned()
}

/// Einsum sums over the labels the output does not name: the product of their extents.
fn einsum_k(node: &Node, inputs: &[Option<&Fact>]) -> Option<Expr> {
    let Some(crate::graph::AttrValue::String(eq)) = node.attr("equation") else {
        return None;
    };
    let (terms, output) = parse_equation(&String::from_utf8_lossy(eq)).ok()?;
    let output = output?;
    let mut summed: Vec<(char, Expr)> = Vec::new();
    for (k, term) in terms.iter().enumerate() {
        let s = in_shape(inputs, k)?;
        let named = term.iter().filter(|l| l.is_some()).count();
        let ell = s.len().checked_sub(named)?;
        let mut i = 0;
        for l in term {
            match l {
                None => i += ell,
                Some(c) => {
                    if !output.contains(&Some(*c)) && !summed.iter().any(|(d, _)| d == c) {
                        summed.push((*c, s.get(i)?.clone()));
                    }
                    i += 1;
                }
            }
        }
    }
    Some(Expr::product(summed.iter().map(|(_, e)| e)))
}

/// MatMul: batch axes broadcast; rows come from A, columns from B; K is contracted.
fn matmul_flow(
    _node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = out_rank(outputs, 0)?;
    let (a, b) = (in_shape(inputs, 0)?, in_shape(inputs, 1)?);
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let batch_rank = r0 - 2;
    let mut flows: Vec<AxisFlow> = (0..batch_rank)
        .map(|o| {
            let map = |s: &[Expr]| {
                let off = batch_rank.checked_sub(s.len() - 2)?;
                let k = o.checked_sub(off)?;
                (s[k] != Expr::one()).then_some(k)
            };
            AxisFlow::Split(vec![map(a), map(b)])
        })
        .collect();
    flows.push(AxisFlow::Split(vec![Some(a.len() - 2), None]));
    flows.push(AxisFlow::Split(vec![None, Some(b.len() - 1)]));
    Some(vec![flows])
}

/// Gemm: output rows from A's rows (its columns with `transA`), output columns from B's columns
/// (its rows with `transB`); `C` is sliced along the axis it has there and read whole where it
/// broadcasts. (The executor's product computes each element the same way whatever rows or
/// columns it is asked for, then `alpha * AB + beta * C` per element.)
fn gemm_flow(
    node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let (a, b) = (in_shape(inputs, 0)?, in_shape(inputs, 1)?);
    if a.len() != 2 || b.len() != 2 || out_rank(outputs, 0)? != 2 {
        return None;
    }
    let trans = |name: &str| axes::attr_int(node, name, 0) != 0;
    let c = in_shape(inputs, 2);
    let c_axis = |o: usize| -> Option<usize> {
        let c = c?;
        let k = o.checked_sub(2usize.checked_sub(c.len())?)?;
        (c[k] != Expr::one()).then_some(k)
    };
    let mut rows = vec![Some(usize::from(trans("transA"))), None];
    let mut cols = vec![None, Some(usize::from(!trans("transB")))];
    if inputs.len() > 2 {
        rows.push(c_axis(0));
        cols.push(c_axis(1));
    }
    Some(vec![vec![AxisFlow::Split(rows), AxisFlow::Split(cols)]])
}

/// A new output plus the executor's scratch (see [`matmul_scratch`], [`einsum_scratch`]).
const MATMUL_MEM: Mem = Mem {
    scratch: Some(matmul_scratch),
    ..Mem::NEW
};
const EINSUM_MEM: Mem = Mem {
    scratch: Some(einsum_scratch),
    ..Mem::NEW
};

/// Unifies two dims that must be equal (or, with `allow_one`, one of them 1); `None` on a
/// contradiction between constants.
fn unify(a: &Expr, b: &Expr, allow_one: bool) -> Option<Expr> {
    if a == b {
        return Some(a.clone());
    }
    match (a.as_const(), b.as_const()) {
        (Some(1), _) if allow_one => Some(b.clone()),
        (_, Some(1)) if allow_one => Some(a.clone()),
        (Some(_), Some(_)) => None,
        (Some(_), None) => Some(a.clone()),
        (None, Some(_)) => Some(b.clone()),
        (None, None) => Some(a.max(b)),
    }
}

/// The element type shared by the present inputs `idx`; a mismatch between known types is invalid.
fn same_type(ctx: &InferCtx, idx: &[usize]) -> Result<DataType, OpError> {
    let t = ctx.dtype(idx[0])?;
    for &i in &idx[1..] {
        if let Some(u) = ctx.opt_input(i).and_then(|f| f.dtype) {
            if u != t {
                return invalid(format!(
                    "input {i} has type {u} but input {} has {t}",
                    idx[0]
                ));
            }
        }
    }
    Ok(t)
}

/// Numpy `matmul` of symbolic shapes: 1-D operands are promoted (and the added dim dropped), batch
/// dims broadcast, and the inner dims must agree.
pub fn matmul_shape(a: &[Expr], b: &[Expr]) -> Result<Vec<Expr>, OpError> {
    let both = || format!("{} and {}", fmt_shape(a), fmt_shape(b));
    if a.is_empty() || b.is_empty() {
        return invalid(format!(
            "MatMul needs operands of rank >= 1, got {}",
            both()
        ));
    }
    let mut x = a.to_vec();
    let mut y = b.to_vec();
    let (a_vec, b_vec) = (x.len() == 1, y.len() == 1);
    if a_vec {
        x.insert(0, Expr::one());
    }
    if b_vec {
        y.push(Expr::one());
    }
    let (m, k1) = (&x[x.len() - 2], &x[x.len() - 1]);
    let (k2, n) = (&y[y.len() - 2], &y[y.len() - 1]);
    if unify(k1, k2, false).is_none() {
        return invalid(format!(
            "MatMul inner dims differ: {k1} vs {k2} in shapes {}",
            both()
        ));
    }
    let mut out = broadcast(&[&x[..x.len() - 2], &y[..y.len() - 2]]).map_err(|_| {
        OpError::Invalid(format!(
            "MatMul batch dims cannot broadcast in shapes {}",
            both()
        ))
    })?;
    if !a_vec {
        out.push(m.clone());
    }
    if !b_vec {
        out.push(n.clone());
    }
    Ok(out)
}

fn matmul(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = same_type(ctx, &[0, 1])?;
    let out = matmul_shape(ctx.shape(0)?, ctx.shape(1)?)?;
    Ok(vec![Fact::new(t, out)])
}

fn gemm(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = same_type(ctx, &[0, 1, 2])?;
    let a = ctx.shape(0)?;
    let b = ctx.shape(1)?;
    if a.len() != 2 || b.len() != 2 {
        return invalid(format!(
            "Gemm needs 2-D A and B, got {} and {}",
            fmt_shape(a),
            fmt_shape(b)
        ));
    }
    let (m, ka) = if ctx.attr_int("transA", 0)? != 0 {
        (&a[1], &a[0])
    } else {
        (&a[0], &a[1])
    };
    let (kb, n) = if ctx.attr_int("transB", 0)? != 0 {
        (&b[1], &b[0])
    } else {
        (&b[0], &b[1])
    };
    if unify(ka, kb, false).is_none() {
        return invalid(format!(
            "Gemm inner dims differ: {ka} vs {kb} in A {} and B {}",
            fmt_shape(a),
            fmt_shape(b)
        ));
    }
    let out = vec![m.clone(), n.clone()];
    if ctx.opt_input(2).is_some() {
        let c = ctx.shape(2)?;
        let ok = c.len() <= 2
            && c.iter()
                .rev()
                .zip(out.iter().rev())
                .all(|(d, o)| unify(d, o, true).is_some());
        if !ok {
            return invalid(format!(
                "Gemm C {} does not broadcast to {}",
                fmt_shape(c),
                fmt_shape(&out)
            ));
        }
    }
    Ok(vec![Fact::new(t, out)])
}

/// One operand of an Einsum equation: labels, with `None` marking where `...` stands.
type Term = Vec<Option<char>>;

fn parse_term(s: &str) -> Result<Term, OpError> {
    let mut out = Vec::new();
    let mut rest = s;
    let mut ellipsis = false;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("...") {
            if ellipsis {
                return Err(OpError::BadAttr(format!(
                    "Einsum term '{s}' has more than one '...'"
                )));
            }
            ellipsis = true;
            out.push(None);
            rest = &rest[3..];
        } else if c.is_ascii_alphabetic() {
            out.push(Some(c));
            rest = &rest[1..];
        } else {
            return Err(OpError::BadAttr(format!(
                "Einsum term '{s}' has an invalid character '{c}'"
            )));
        }
    }
    Ok(out)
}

/// Parses `"bij,bjk->bik"` into input terms and the output term (`None` in implicit mode).
fn parse_equation(eq: &str) -> Result<(Vec<Term>, Option<Term>), OpError> {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let inputs = lhs
        .split(',')
        .map(parse_term)
        .collect::<Result<Vec<_>, _>>()?;
    let output = rhs.map(parse_term).transpose()?;
    Ok((inputs, output))
}

/// The output shape of an Einsum `equation` over operands of the given shapes.
pub fn einsum_shape(equation: &str, shapes: &[&[Expr]]) -> Result<Vec<Expr>, OpError> {
    let (terms, output) = parse_equation(equation)?;
    if terms.len() != shapes.len() {
        return invalid(format!(
            "Einsum equation '{equation}' names {} operands but the node has {}",
            terms.len(),
            shapes.len()
        ));
    }
    // Label -> (dim, number of occurrences), in order of first appearance.
    let mut labels: Vec<(char, Expr, usize)> = Vec::new();
    let mut ell_parts: Vec<&[Expr]> = Vec::new();
    for (i, (term, s)) in terms.iter().zip(shapes).enumerate() {
        let named = term.iter().filter(|l| l.is_some()).count();
        let has_ell = named < term.len();
        if (has_ell && s.len() < named) || (!has_ell && s.len() != named) {
            return invalid(format!(
                "Einsum operand {i} has shape {} but its term has {named} labels{}",
                fmt_shape(s),
                if has_ell { " and '...'" } else { "" }
            ));
        }
        let ell_len = s.len() - named;
        let mut k = 0;
        for l in term {
            match l {
                None => {
                    ell_parts.push(&s[k..k + ell_len]);
                    k += ell_len;
                }
                Some(c) => {
                    let d = &s[k];
                    k += 1;
                    match labels.iter_mut().find(|(x, _, _)| x == c) {
                        None => labels.push((*c, d.clone(), 1)),
                        Some(entry) => {
                            entry.1 = unify(&entry.1, d, true).ok_or_else(|| {
                                OpError::Invalid(format!(
                                    "Einsum label '{c}' is {} and {d} (operand {i} has shape {})",
                                    entry.1,
                                    fmt_shape(s)
                                ))
                            })?;
                            entry.2 += 1;
                        }
                    }
                }
            }
        }
    }
    let ell = broadcast(&ell_parts)
        .map_err(|e| OpError::Invalid(format!("Einsum '...' dims do not broadcast: {e}")))?;
    let output = match output {
        Some(o) => o,
        None => {
            // Implicit mode: broadcast dims first, then labels seen once, alphabetically.
            let mut once: Vec<char> = labels
                .iter()
                .filter(|(_, _, n)| *n == 1)
                .map(|(c, _, _)| *c)
                .collect();
            once.sort_unstable();
            let mut o: Term = if ell_parts.is_empty() {
                Vec::new()
            } else {
                vec![None]
            };
            o.extend(once.into_iter().map(Some));
            o
        }
    };
    let mut out = Vec::new();
    let mut seen: Vec<char> = Vec::new();
    for l in &output {
        match l {
            None => out.extend(ell.iter().cloned()),
            Some(c) => {
                if seen.contains(c) {
                    return Err(OpError::BadAttr(format!(
                        "Einsum output repeats label '{c}'"
                    )));
                }
                seen.push(*c);
                match labels.iter().find(|(x, _, _)| x == c) {
                    Some((_, d, _)) => out.push(d.clone()),
                    None => {
                        return Err(OpError::BadAttr(format!(
                            "Einsum output label '{c}' is in no input"
                        )));
                    }
                }
            }
        }
    }
    Ok(out)
}

fn einsum(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let eq = ctx
        .attr_string("equation")?
        .ok_or_else(|| OpError::BadAttr("attribute 'equation' is required".into()))?;
    let idx: Vec<usize> = (0..ctx.num_inputs()).collect();
    if idx.is_empty() {
        return invalid("Einsum needs at least one input");
    }
    let t = same_type(ctx, &idx)?;
    let shapes = idx
        .iter()
        .map(|&i| ctx.shape(i))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(vec![Fact::new(t, einsum_shape(&eq, &shapes)?)])
}

/// Det: one determinant per matrix of the last two axes; the batch axes pass through.
fn det_flow(
    _node: &Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Vec<Vec<AxisFlow>>> {
    let r0 = out_rank(outputs, 0)?;
    (in_shape(inputs, 0)?.len() == r0 + 2).then(|| vec![axes::pass_through(1, r0, &[])])
}

fn det(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let s = ctx.shape(0)?;
    let r = s.len();
    if r < 2 || unify(&s[r - 2], &s[r - 1], false).is_none() {
        return invalid(format!("Det needs square matrices, got {}", fmt_shape(s)));
    }
    Ok(vec![Fact::new(t, s[..r - 2].to_vec())])
}

// ---- Scratch: what `exec::ops::linalg` allocates through `mem::scratch`, mirrored exactly. ----

const DET_MEM: Mem = Mem {
    scratch: Some(det_scratch),
    ..Mem::NEW
};

/// Det: one matrix in f64 (the LU factorization's working copy), `8 * M * M`.
fn det_scratch(
    _node: &crate::graph::Node,
    _opset: i64,
    inputs: &[Option<&Fact>],
    _outputs: &[Option<&Fact>],
) -> Expr {
    let bytes = || -> Option<Expr> {
        let s = inputs.first().copied().flatten()?.shape.as_ref()?;
        let m = s.last()?;
        Some(m * m * 8)
    };
    bytes().unwrap_or_else(Expr::zero)
}

fn numel_of(f: Option<&Fact>) -> Option<Expr> {
    Some(Expr::product(f?.shape.as_ref()?.iter()))
}

fn is_half(d: Option<DataType>) -> bool {
    matches!(d, Some(DataType::F16 | DataType::BF16))
}

/// MatMul/Gemm: none for f32/f64/integers; f16/bf16 widen every input and compute the result in f32:
/// `4 * (sum of input elements + output elements)`.
fn matmul_scratch(
    _node: &crate::graph::Node,
    _opset: i64,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Expr {
    let first = inputs.first().copied().flatten();
    if !is_half(first.and_then(|f| f.dtype)) {
        return Expr::zero();
    }
    let mut elems = Vec::new();
    for f in inputs.iter().chain(outputs.first()) {
        if f.is_some() {
            match numel_of(*f) {
                Some(n) => elems.push(n),
                None => return Expr::zero(),
            }
        }
    }
    Expr::sum(&elems) * 4
}

/// Labels of ellipsis dims start here (as in the executor).
const ELL: u32 = 1000;

/// The executor's equation labels: per input one label per dim (ellipsis dims right-aligned as
/// `ELL + j`), and the output's.
fn einsum_labels(eq: &str, ranks: &[usize]) -> Option<(Vec<Vec<u32>>, Vec<u32>)> {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ranks.len() {
        return None;
    }
    let letters = |t: &str| -> Vec<u32> {
        t.chars()
            .filter(|c| c.is_ascii_alphabetic())
            .map(|c| c as u32)
            .collect()
    };
    let mut ell_rank = 0;
    for (t, &r) in terms.iter().zip(ranks) {
        if t.contains("...") {
            ell_rank = ell_rank.max(r.saturating_sub(letters(t).len()));
        }
    }
    let term = |t: &str, rank: Option<usize>| -> Option<Vec<u32>> {
        let parts: Vec<&str> = t.split("...").collect();
        let mut out = letters(parts[0]);
        if parts.len() == 2 {
            let after = letters(parts[1]);
            let n_ell = match rank {
                Some(r) => r.checked_sub(out.len() + after.len())?,
                None => ell_rank,
            };
            out.extend((ell_rank - n_ell..ell_rank).map(|j| ELL + j as u32));
            out.extend(after);
        }
        Some(out)
    };
    let inputs: Vec<Vec<u32>> = terms
        .iter()
        .zip(ranks)
        .map(|(t, &r)| term(t, Some(r)))
        .collect::<Option<_>>()?;
    let output = match rhs {
        Some(r) => term(r, None)?,
        None => {
            let mut out: Vec<u32> = (0..ell_rank as u32).map(|j| ELL + j).collect();
            let mut ls: Vec<u32> = inputs
                .iter()
                .flatten()
                .copied()
                .filter(|&l| l < ELL)
                .collect();
            ls.sort_unstable();
            out.extend(
                ls.iter()
                    .copied()
                    .filter(|l| ls.iter().filter(|m| *m == l).count() == 1),
            );
            out
        }
    };
    Some((inputs, output))
}

/// A symbolic Einsum operand: one distinct label per dim, row-major unless a diagonal merged strides.
#[derive(Clone)]
struct SymOperand {
    labels: Vec<u32>,
    dims: Vec<Expr>,
    strides: Vec<Expr>,
}

fn row_major(dims: &[Expr]) -> Vec<Expr> {
    let mut st = vec![Expr::one(); dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        st[i] = &st[i + 1] * &dims[i + 1];
    }
    st
}

fn is_one(d: &Expr) -> bool {
    d.as_const() == Some(1)
}

impl SymOperand {
    fn new(shape: &[Expr], labels: &[u32]) -> SymOperand {
        let st = row_major(shape);
        let mut op = SymOperand {
            labels: Vec::new(),
            dims: Vec::new(),
            strides: Vec::new(),
        };
        for (i, &l) in labels.iter().enumerate() {
            match op.labels.iter().position(|&m| m == l) {
                Some(j) => op.strides[j] = &op.strides[j] + &st[i],
                None => {
                    op.labels.push(l);
                    op.dims.push(shape[i].clone());
                    op.strides.push(st[i].clone());
                }
            }
        }
        op
    }

    fn contiguous(dims: Vec<Expr>, labels: Vec<u32>) -> SymOperand {
        SymOperand {
            strides: row_major(&dims),
            labels,
            dims,
        }
    }

    fn dim(&self, l: u32) -> Option<&Expr> {
        self.labels
            .iter()
            .position(|&m| m == l)
            .map(|i| &self.dims[i])
    }

    fn stride(&self, l: u32) -> Expr {
        match self.labels.iter().position(|&m| m == l) {
            Some(i) if !is_one(&self.dims[i]) => self.strides[i].clone(),
            _ => Expr::zero(),
        }
    }

    fn numel(&self) -> Expr {
        Expr::product(&self.dims)
    }

    fn is_contiguous(&self) -> bool {
        self.strides == row_major(&self.dims)
    }

    /// Whether the labels of `group`, read in that order, form one strided run.
    fn group_is_run(&self, group: &[u32]) -> bool {
        let mut acc: Option<(Expr, Expr)> = None;
        for &l in group.iter().rev() {
            let d = self.dim(l).cloned().unwrap_or_else(Expr::one);
            if is_one(&d) {
                continue;
            }
            let s = self.stride(l);
            acc = match acc {
                None => Some((s, d)),
                Some((inner, ext)) if s == &inner * &ext => Some((inner, &ext * &d)),
                Some(_) => return false,
            };
        }
        true
    }
}

/// Einsum: the executor's pairwise lowering (see the module note of `exec::ops::linalg`): per step,
/// summed-out copies of operands with labels nobody needs later (plus a contiguous copy of a strided
/// one), a transposed copy of an operand whose `[m, k]`/`[k, n]` groups are not single runs, and the
/// step's result unless it is the final output in `[batch, m, n]` order. All of it lives until the op
/// returns, together with the output. Elements are of the input type (f32 for f16/bf16, which also
/// widen every input and compute the result in f32). Symbolic dims are taken to be > 1.
fn einsum_scratch(
    node: &crate::graph::Node,
    _opset: i64,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Expr {
    einsum_scratch_bytes(node, inputs, outputs).unwrap_or_else(Expr::zero)
}

fn einsum_scratch_bytes(
    node: &crate::graph::Node,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Option<Expr> {
    let eq = match node.attr("equation")? {
        crate::graph::AttrValue::String(b) => String::from_utf8_lossy(b).into_owned(),
        _ => return None,
    };
    let facts: Vec<&Fact> = inputs.iter().flatten().copied().collect();
    let shapes: Vec<&[Expr]> = facts
        .iter()
        .map(|f| f.shape.as_deref())
        .collect::<Option<_>>()?;
    let dtype = facts.first()?.dtype;
    let half = is_half(dtype);
    let e: i64 = match dtype?.bits() {
        _ if half => 4,
        b if b % 8 == 0 => i64::from(b / 8),
        _ => return None,
    };
    let ranks: Vec<usize> = shapes.iter().map(|s| s.len()).collect();
    let (in_labels, out_labels) = einsum_labels(&eq, &ranks)?;
    // f16/bf16 widen every input and compute the result in f32.
    let half_extra = if half {
        let mut wide: Vec<Expr> = facts
            .iter()
            .map(|f| numel_of(Some(f)))
            .collect::<Option<_>>()?;
        wide.push(numel_of(outputs.first().copied().flatten())?);
        Expr::sum(&wide) * 4
    } else {
        Expr::zero()
    };
    let mut elems: Vec<Expr> = Vec::new();
    let ops: Vec<SymOperand> = shapes
        .iter()
        .zip(&in_labels)
        .map(|(s, l)| SymOperand::new(s, l))
        .collect();
    let sum_out = |op: SymOperand, keep: &[u32], elems: &mut Vec<Expr>| -> SymOperand {
        if op.labels.iter().all(|l| keep.contains(l)) {
            return op;
        }
        if !op.is_contiguous() {
            elems.push(op.numel());
        }
        let (labels, dims): (Vec<u32>, Vec<Expr>) = op
            .labels
            .iter()
            .zip(&op.dims)
            .filter(|(l, _)| keep.contains(l))
            .map(|(&l, d)| (l, d.clone()))
            .unzip();
        let r = SymOperand::contiguous(dims, labels);
        elems.push(r.numel());
        r
    };
    let mut it = ops.into_iter();
    let mut acc = it.next()?;
    let rest: Vec<SymOperand> = it.collect();
    let n_rest = rest.len();
    for (i, b) in rest.into_iter().enumerate() {
        let mut needed = out_labels.clone();
        for later in in_labels.iter().skip(i + 2) {
            needed.extend(later);
        }
        let keep_a: Vec<u32> = needed.iter().chain(&b.labels).copied().collect();
        let keep_b: Vec<u32> = needed.iter().chain(&acc.labels).copied().collect();
        let a2 = sum_out(acc, &keep_a, &mut elems);
        let b2 = sum_out(b, &keep_b, &mut elems);
        let pos = |l: &u32| out_labels.iter().position(|m| m == l).unwrap_or(usize::MAX);
        let mut batch: Vec<u32> = a2
            .labels
            .iter()
            .copied()
            .filter(|l| b2.labels.contains(l) && needed.contains(l))
            .collect();
        let contracted: Vec<u32> = a2
            .labels
            .iter()
            .copied()
            .filter(|l| b2.labels.contains(l) && !needed.contains(l))
            .collect();
        let mut m_l: Vec<u32> = a2
            .labels
            .iter()
            .copied()
            .filter(|l| !b2.labels.contains(l))
            .collect();
        let mut n_l: Vec<u32> = b2
            .labels
            .iter()
            .copied()
            .filter(|l| !a2.labels.contains(l))
            .collect();
        batch.sort_by_key(pos);
        m_l.sort_by_key(pos);
        n_l.sort_by_key(pos);
        if !(a2.group_is_run(&m_l) && a2.group_is_run(&contracted)) {
            elems.push(a2.numel());
        }
        if !(b2.group_is_run(&contracted) && b2.group_is_run(&n_l)) {
            elems.push(b2.numel());
        }
        let bdims: Vec<Expr> = batch
            .iter()
            .map(|&l| {
                let x = a2.dim(l).cloned().unwrap_or_else(Expr::one);
                let y = b2.dim(l).cloned().unwrap_or_else(Expr::one);
                if x == y || is_one(&y) {
                    x
                } else {
                    y
                }
            })
            .collect();
        let last = i + 1 == n_rest;
        let direct = last && {
            let bo: Vec<u32> = out_labels
                .iter()
                .copied()
                .filter(|l| a2.labels.contains(l) && b2.labels.contains(l))
                .collect();
            let mo: Vec<u32> = out_labels
                .iter()
                .copied()
                .filter(|l| a2.labels.contains(l) && !b2.labels.contains(l))
                .collect();
            let no: Vec<u32> = out_labels
                .iter()
                .copied()
                .filter(|l| !a2.labels.contains(l) && b2.labels.contains(l))
                .collect();
            let order: Vec<u32> = bo.into_iter().chain(mo).chain(no).collect();
            order == out_labels
        };
        if direct {
            return Some(Expr::sum(&elems) * e + half_extra);
        }
        let labels: Vec<u32> = batch.iter().chain(&m_l).chain(&n_l).copied().collect();
        let mut dims = bdims;
        dims.extend(
            m_l.iter()
                .map(|&l| a2.dim(l).cloned().unwrap_or_else(Expr::one)),
        );
        dims.extend(
            n_l.iter()
                .map(|&l| b2.dim(l).cloned().unwrap_or_else(Expr::one)),
        );
        let r = SymOperand::contiguous(dims, labels);
        elems.push(r.numel());
        acc = r;
    }
    let _ = sum_out(acc, &out_labels, &mut elems);
    Some(Expr::sum(&elems) * e + half_extra)
}

#[cfg(test)]
mod scratch_tests {
    use super::*;
    use crate::graph::{AttrValue, Attribute, Node};

    fn einsum(eq: &str, shapes: &[Vec<Expr>]) -> String {
        let node = Node {
            name: "e".into(),
            op: "Einsum".into(),
            domain: String::new(),
            overload: String::new(),
            inputs: vec![],
            outputs: vec![],
            attrs: vec![Attribute {
                name: "equation".into(),
                value: AttrValue::String(eq.as_bytes().to_vec()),
                doc: String::new(),
            }],
            doc: String::new(),
            metadata: vec![],
        };
        let facts: Vec<Fact> = shapes
            .iter()
            .map(|s| Fact::new(DataType::F32, s.clone()))
            .collect();
        let ins: Vec<Option<&Fact>> = facts.iter().map(Some).collect();
        einsum_scratch(&node, 18, &ins, &[]).to_string()
    }

    #[test]
    fn einsum_scratch_follows_the_lowering() {
        let n = Expr::sym("N");
        let c = Expr::int(32);
        let one = Expr::one();
        let z = vec![one.clone(), n.clone(), n.clone(), c.clone()];
        // q·kᵀ: both operands are read through strides, the result goes straight to the output.
        assert_eq!(einsum("...qc, ...kc->...qk", &[z.clone(), z.clone()]), "0");
        // p·v: also strided.
        let p = vec![one.clone(), n.clone(), n.clone(), n.clone()];
        assert_eq!(einsum("...qk, ...kc->...qc", &[p, z.clone()]), "0");
        // Matrix product over the leading pair dims.
        let zt = vec![one.clone(), c.clone(), n.clone(), n.clone()];
        assert_eq!(einsum("...ij,...jk->...ik", &[zt.clone(), zt]), "0");
        // Output not in [batch, m, n] order: the result is a scratch copy, then transposed.
        assert_eq!(
            einsum(
                "ij,jk->ki",
                &[vec![n.clone(), c.clone()], vec![c.clone(), n.clone()]]
            ),
            "4*N^2"
        );
        // A label summed out of one operand (copy of the reduced operand), and a diagonal.
        assert_eq!(
            einsum("ij,j->i", &[vec![n.clone(), c.clone()], vec![c.clone()]]),
            "0"
        );
        assert_eq!(
            einsum(
                "ijk,j->i",
                &[vec![n.clone(), c.clone(), n.clone()], vec![c.clone()]]
            ),
            "128*N"
        );
        // A diagonal alone is read through strides straight into the output.
        assert_eq!(einsum("ii->i", &[vec![n.clone(), n.clone()]]), "0");
        // Aᵀ·B reads A through strides; contracting [j, k] against B laid out [k, j] copies B.
        assert_eq!(
            einsum(
                "ji,jk->ik",
                &[vec![c.clone(), n.clone()], vec![c.clone(), n.clone()]]
            ),
            "0"
        );
        let (a, b) = (
            vec![n.clone(), c.clone(), n.clone()],
            vec![n.clone(), n.clone(), c.clone()],
        );
        assert_eq!(einsum("ijk,ikj->i", &[a, b]), "128*N^2");
    }
}

#[cfg(test)]
mod tests {
    use super::einsum_shape;
    use crate::dtype::DataType::{F32, F64, I8, U8};
    use crate::infer::fmt_shape;
    use crate::ops::tests::{a_int, a_str, fact_of, shape_of, TestGraph};
    use crate::Expr;

    fn dims(s: &str) -> Vec<Expr> {
        s.split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(|x| {
                x.parse::<i64>()
                    .map(Expr::int)
                    .unwrap_or_else(|_| Expr::sym(x))
            })
            .collect()
    }

    fn es(eq: &str, shapes: &[&str]) -> String {
        let owned: Vec<Vec<Expr>> = shapes.iter().map(|s| dims(s)).collect();
        let refs: Vec<&[Expr]> = owned.iter().map(|v| v.as_slice()).collect();
        match einsum_shape(eq, &refs) {
            Ok(s) => fmt_shape(&s),
            Err(e) => format!("error: {e}"),
        }
    }

    #[test]
    fn matmul_shapes() {
        let mut t = TestGraph::new();
        let a = t.input("a", F32, "N, 32, 64");
        let w = t.input("w", F32, "64, 16");
        let v = t.input("v", F32, "64");
        let b = t.input("b", F32, "B, 1, K, 64");
        let c = t.input("c", F32, "H, 64, S");
        let y0 = t.op("MatMul", &[a, w], &["y0"], vec![]);
        let y1 = t.op("MatMul", &[a, v], &["y1"], vec![]);
        let y2 = t.op("MatMul", &[v, w], &["y2"], vec![]);
        let y3 = t.op("MatMul", &[b, c], &["y3"], vec![]);
        let y4 = t.op("MatMul", &[v, v], &["y4"], vec![]);
        let f = t.run(18).unwrap();
        assert_eq!(fact_of(&f, y0[0]), "float [N, 32, 16]");
        assert_eq!(shape_of(&f, y1[0]), "[N, 32]");
        assert_eq!(shape_of(&f, y2[0]), "[16]");
        assert_eq!(shape_of(&f, y3[0]), "[B, H, K, S]");
        assert_eq!(shape_of(&f, y4[0]), "[]");
    }

    #[test]
    fn matmul_contradiction_names_node_and_shapes() {
        let mut t = TestGraph::new();
        let a = t.input("a", F32, "N, 32, 64");
        let w = t.input("w", F32, "63, 16");
        t.node("proj", "MatMul", &[Some(a), Some(w)], &["y"], vec![]);
        let e = t.run(18).unwrap_err().to_string();
        assert!(
            e.contains("'proj' (MatMul)") && e.contains("[N, 32, 64]") && e.contains("[63, 16]"),
            "{e}"
        );
        let mut t = TestGraph::new();
        let a = t.input("a", F32, "N, 4");
        let w = t.input("w", F64, "4, 2");
        t.node("mixed", "MatMul", &[Some(a), Some(w)], &["y"], vec![]);
        assert!(t.run(18).unwrap_err().to_string().contains("type"));
    }

    #[test]
    fn matmul_integer_and_gemm() {
        let mut t = TestGraph::new();
        let a = t.input("a", U8, "N, 64");
        let b = t.input("b", I8, "64, 10");
        let q = t.op("MatMulInteger", &[a, b], &["q"], vec![]);
        let x = t.input("x", F32, "64, N");
        let w = t.input("w", F32, "10, 64");
        let c = t.input("c", F32, "10");
        let g = t.op(
            "Gemm",
            &[x, w, c],
            &["g"],
            vec![a_int("transA", 1), a_int("transB", 1)],
        );
        let f = t.run(18).unwrap();
        assert_eq!(fact_of(&f, q[0]), "int32 [N, 10]");
        assert_eq!(fact_of(&f, g[0]), "float [N, 10]");

        let mut t = TestGraph::new();
        let x = t.input("x", F32, "N, 64");
        let w = t.input("w", F32, "10, 64");
        let c = t.input("c", F32, "7");
        t.node(
            "fc",
            "Gemm",
            &[Some(x), Some(w), Some(c)],
            &["y"],
            vec![a_int("transB", 1)],
        );
        let e = t.run(18).unwrap_err().to_string();
        assert!(e.contains("'fc' (Gemm)") && e.contains("[7]"), "{e}");
    }

    #[test]
    fn einsum_forms() {
        assert_eq!(es("bij,bjk->bik", &["B, N, 32", "B, 32, M"]), "[B, N, M]");
        assert_eq!(
            es("...ij,...jk->...ik", &["B, H, S, 64", "H, 64, S"]),
            "[B, H, S, S]"
        );
        assert_eq!(
            es("bhqd,bhkd->bhqk", &["B, 8, S, 64", "B, 8, T, 64"]),
            "[B, 8, S, T]"
        );
        assert_eq!(es("ij->ji", &["N, 3"]), "[3, N]");
        assert_eq!(es("ii->i", &["N, N"]), "[N]");
        assert_eq!(es("ii", &["4, 4"]), "[]");
        assert_eq!(es("abc,cd->abd", &["B, S, 64", "64, 10"]), "[B, S, 10]");
        assert_eq!(es("ij,jk", &["N, 5", "5, M"]), "[N, M]");
        assert_eq!(es("...i,i", &["B, S, 4", "4"]), "[B, S]");
        assert_eq!(es(" b i , b i -> b ", &["B, N", "B, N"]), "[B]");
    }

    #[test]
    fn einsum_errors() {
        assert!(es("bij,bjk->bik", &["B, N, 32", "B, 31, M"]).contains("label 'j' is 32 and 31"));
        assert!(es("ij->ji", &["N"]).starts_with("error"));
        assert!(es("ij,jk->ik", &["N, 3"]).contains("operands"));
        assert!(es("ij->ix", &["N, 3"]).contains("in no input"));
        assert!(es("ij->ii", &["N, 3"]).contains("repeats"));
        assert!(es("i1->i", &["N, 3"]).contains("invalid character"));
        assert!(es("......i->i", &["N, 3"]).contains("more than one"));

        let mut t = TestGraph::new();
        let a = t.input("a", F32, "B, S, 64");
        let w = t.input("w", F32, "32, 10");
        t.node(
            "ein",
            "Einsum",
            &[Some(a), Some(w)],
            &["y"],
            vec![a_str("equation", "abc,cd->abd")],
        );
        let e = t.run(18).unwrap_err().to_string();
        assert!(
            e.contains("'ein' (Einsum)") && e.contains("64 and 32"),
            "{e}"
        );
    }

    #[test]
    fn einsum_and_det_in_graph() {
        let mut t = TestGraph::new();
        let q = t.input("q", F32, "B, H, S, 64");
        let k = t.input("k", F32, "B, H, T, 64");
        let y = t.op(
            "Einsum",
            &[q, k],
            &["y"],
            vec![a_str("equation", "bhqd,bhkd->bhqk")],
        );
        let m = t.input("m", F32, "B, 3, 3");
        let d = t.op("Det", &[m], &["d"], vec![]);
        let f = t.run(18).unwrap();
        assert_eq!(fact_of(&f, y[0]), "float [B, H, S, T]");
        assert_eq!(fact_of(&f, d[0]), "float [B]");
    }
}
