//! Op family: linear algebra (`MatMul`, `MatMulInteger`, `Gemm`, `Einsum`, `Det`).
//!
//! Contracted dims must agree: two different constants are a contradiction (an error naming both
//! shapes); a symbol against a constant takes the constant; two different symbols take their `max`,
//! which is exact whenever the model is valid (they are equal, or one of them broadcasts from 1).

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::infer::{broadcast, fmt_shape, invalid, Fact, InferCtx, OpError};

use super::{Mem, OpDef};

const fn def(op: &'static str, infer: super::InferFn, mem: Mem) -> OpDef {
    OpDef { op, infer, mem }
}

pub const DEFS: &[OpDef] = &[
    def("MatMul", matmul, Mem::NEW),
    def("MatMulInteger", matmul, Mem::NEW),
    def("Gemm", gemm, Mem::NEW),
    def("Einsum", einsum, Mem::NEW),
    def("Det", det, Mem::NEW),
];

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
    let t = if ctx.node.op == "MatMulInteger" {
        DataType::I32
    } else {
        same_type(ctx, &[0, 1])?
    };
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

fn det(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    let s = ctx.shape(0)?;
    let r = s.len();
    if r < 2 || unify(&s[r - 2], &s[r - 1], false).is_none() {
        return invalid(format!("Det needs square matrices, got {}", fmt_shape(s)));
    }
    Ok(vec![Fact::new(t, s[..r - 2].to_vec())])
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
