//! Linear algebra: `MatMul` (with batch broadcasting and 1-D operands), `Gemm`, `Einsum`.

use memplan_ir::graph::ValueId;
use memplan_ir::{AttrValue, Expr};

use super::{dtype, shape, Ctx, Grads, Rule};
use crate::builder::{attr, attr_ints, Builder};

pub(crate) const RULES: &[(&str, Rule)] = &[("MatMul", matmul), ("Gemm", gemm), ("Einsum", einsum)];

/// Swaps the last two axes of a value of rank `rank`.
fn t_last2(b: &mut Builder, v: ValueId, rank: usize) -> ValueId {
    let mut perm: Vec<i64> = (0..rank as i64).collect();
    perm.swap(rank - 2, rank - 1);
    b.op("Transpose", &[v], vec![attr_ints("perm", &perm)])
}

fn matmul(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let (a, w) = (c.x(0)?, c.x(1)?);
    let (sa, sb, sy) = (shape(b, a)?, shape(b, w)?, shape(b, c.y(0)?)?);
    if sa.is_empty() || sb.is_empty() {
        return Err("MatMul of a scalar".to_string());
    }
    if sa.len() == 1 && sb.len() == 1 {
        let mut g = vec![None, None];
        if c.wants(0) {
            g[0] = Some(b.op("Mul", &[dy, w], vec![]));
        }
        if c.wants(1) {
            g[1] = Some(b.op("Mul", &[dy, a], vec![]));
        }
        return Ok(g);
    }
    // Promote 1-D operands to matrices, and the gradient to match.
    let (mut a2, mut sa2) = (a, sa.clone());
    if sa.len() == 1 {
        a2 = b.unsqueeze(a, &[0]);
        sa2.insert(0, Expr::one());
    }
    let (mut b2, mut sb2) = (w, sb.clone());
    if sb.len() == 1 {
        b2 = b.unsqueeze(w, &[1]);
        sb2.push(Expr::one());
    }
    let (mut dy2, mut sy2) = (dy, sy.clone());
    if sa.len() == 1 {
        dy2 = b.unsqueeze(dy2, &[-2]);
        let n = sy2.len();
        sy2.insert(n - 1, Expr::one());
    }
    if sb.len() == 1 {
        dy2 = b.unsqueeze(dy2, &[-1]);
        sy2.push(Expr::one());
    }
    let batch = &sy2[..sy2.len() - 2];
    let mut g = vec![None, None];
    if c.wants(0) {
        let bt = t_last2(b, b2, sb2.len());
        let d = b.op("MatMul", &[dy2, bt], vec![]);
        let mut out: Vec<Expr> = batch.to_vec();
        out.extend_from_slice(&sa2[sa2.len() - 2..]);
        let d = b.unbroadcast(d, &out, a2, &sa2)?;
        g[0] = Some(if sa.len() == 1 {
            b.reshape_like(d, a)
        } else {
            d
        });
    }
    if c.wants(1) {
        let at = t_last2(b, a2, sa2.len());
        let d = b.op("MatMul", &[at, dy2], vec![]);
        let mut out: Vec<Expr> = batch.to_vec();
        out.extend_from_slice(&sb2[sb2.len() - 2..]);
        let d = b.unbroadcast(d, &out, b2, &sb2)?;
        g[1] = Some(if sb.len() == 1 {
            b.reshape_like(d, w)
        } else {
            d
        });
    }
    Ok(g)
}

fn gemm(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let (a, w) = (c.x(0)?, c.x(1)?);
    let alpha = c.float("alpha", 1.0)?;
    let beta = c.float("beta", 1.0)?;
    let ta = c.int("transA", 0)? != 0;
    let tb = c.int("transB", 0)? != 0;
    let dt = dtype(b, a)?;
    let scale = |b: &mut Builder, v: ValueId, k: f32| {
        if k == 1.0 {
            v
        } else {
            let s = b.scalar(dt, f64::from(k));
            b.op("Mul", &[v, s], vec![])
        }
    };
    let t = |b: &mut Builder, v: ValueId| b.op("Transpose", &[v], vec![attr_ints("perm", &[1, 0])]);
    let mut g = vec![None, None, None];
    if c.wants(0) {
        // dA = alpha dY op(B)^T, transposed when A was.
        let d = match (ta, tb) {
            (false, false) => {
                let bt = t(b, w);
                b.op("MatMul", &[dy, bt], vec![])
            }
            (false, true) => b.op("MatMul", &[dy, w], vec![]),
            (true, false) => {
                let dyt = t(b, dy);
                b.op("MatMul", &[w, dyt], vec![])
            }
            (true, true) => {
                let bt = t(b, w);
                let dyt = t(b, dy);
                b.op("MatMul", &[bt, dyt], vec![])
            }
        };
        g[0] = Some(scale(b, d, alpha));
    }
    if c.wants(1) {
        // dB = alpha op(A)^T dY, transposed when B was.
        let d = match (ta, tb) {
            (false, false) => {
                let at = t(b, a);
                b.op("MatMul", &[at, dy], vec![])
            }
            (true, false) => b.op("MatMul", &[a, dy], vec![]),
            (false, true) => {
                let dyt = t(b, dy);
                b.op("MatMul", &[dyt, a], vec![])
            }
            (true, true) => {
                let dyt = t(b, dy);
                let at = t(b, a);
                b.op("MatMul", &[dyt, at], vec![])
            }
        };
        g[1] = Some(scale(b, d, alpha));
    }
    if c.wants(2) {
        let cv = c.x(2)?;
        let d = scale(b, dy, beta);
        let (sy, sc) = (shape(b, c.y(0)?)?, shape(b, cv)?);
        g[2] = Some(b.unbroadcast(d, &sy, cv, &sc)?);
    }
    Ok(g)
}

/// An einsum equation with every `...` spelled out as explicit labels.
struct Equation {
    inputs: Vec<Vec<char>>,
    output: Vec<char>,
}

fn parse_equation(eq: &str, ranks: &[usize]) -> Result<Equation, String> {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, out) = match eq.split_once("->") {
        Some((l, o)) => (l.to_string(), Some(o.to_string())),
        None => (eq.clone(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ranks.len() {
        return Err(format!(
            "equation has {} operands, node has {}",
            terms.len(),
            ranks.len()
        ));
    }
    // Ellipsis dims get labels from a range no equation uses.
    let mut ell = 0usize;
    for (t, &r) in terms.iter().zip(ranks) {
        if t.contains("...") {
            let named = t.replace("...", "").chars().count();
            ell = ell.max(r.saturating_sub(named));
        }
    }
    let used: std::collections::BTreeSet<char> =
        eq.chars().filter(|c| c.is_ascii_alphabetic()).collect();
    let ell_labels: Vec<char> = ('A'..='Z')
        .chain('a'..='z')
        .filter(|c| !used.contains(c))
        .take(ell)
        .collect();
    if ell_labels.len() < ell {
        return Err("equation uses too many labels to spell out its ellipsis".to_string());
    }
    let expand = |t: &str, r: usize| -> Vec<char> {
        if let Some((pre, post)) = t.split_once("...") {
            let named = pre.chars().count() + post.chars().count();
            let k = r.saturating_sub(named);
            let mut v: Vec<char> = pre.chars().collect();
            v.extend_from_slice(&ell_labels[ell - k..]);
            v.extend(post.chars());
            v
        } else {
            t.chars().collect()
        }
    };
    let inputs: Vec<Vec<char>> = terms
        .iter()
        .zip(ranks)
        .map(|(t, &r)| expand(t, r))
        .collect();
    let output = match out {
        Some(o) => {
            if o.contains("...") {
                expand(&o, ell + o.replace("...", "").chars().count())
            } else {
                o.chars().collect()
            }
        }
        None => {
            // Implicit output: ellipsis labels, then labels used once, alphabetically.
            let mut counts = std::collections::BTreeMap::new();
            for t in &inputs {
                for &ch in t {
                    *counts.entry(ch).or_insert(0) += 1;
                }
            }
            let mut o: Vec<char> = ell_labels.clone();
            o.extend(
                counts
                    .iter()
                    .filter(|(ch, &n)| n == 1 && !ell_labels.contains(ch))
                    .map(|(&ch, _)| ch),
            );
            o
        }
    };
    Ok(Equation { inputs, output })
}

fn einsum(b: &mut Builder, c: &Ctx) -> Result<Grads, String> {
    let dy = c.dy0()?;
    let eq = match c.node.attr("equation") {
        Some(AttrValue::String(s)) => String::from_utf8_lossy(s).into_owned(),
        _ => return Err("Einsum needs an 'equation' attribute".to_string()),
    };
    let xs: Vec<ValueId> = (0..c.arity()).map(|i| c.x(i)).collect::<Result<_, _>>()?;
    let ranks: Vec<usize> = xs
        .iter()
        .map(|&x| shape(b, x).map(|s| s.len()))
        .collect::<Result<_, _>>()?;
    let e = parse_equation(&eq, &ranks)?;
    let mut g = vec![None; xs.len()];
    for (i, labels) in e.inputs.iter().enumerate() {
        if !c.wants(i) {
            continue;
        }
        let mut seen = std::collections::BTreeSet::new();
        if labels.iter().any(|ch| !seen.insert(*ch)) {
            return Err(format!(
                "operand {i} repeats a label (a diagonal), which has no gradient rule"
            ));
        }
        // Labels of operand i that the other operands or the output carry; the rest were summed
        // away and come back by broadcasting.
        let elsewhere = |ch: &char| {
            e.output.contains(ch)
                || e.inputs
                    .iter()
                    .enumerate()
                    .any(|(j, t)| j != i && t.contains(ch))
        };
        let kept: Vec<char> = labels.iter().copied().filter(|ch| elsewhere(ch)).collect();
        let mut terms: Vec<String> = Vec::new();
        let mut ins: Vec<ValueId> = Vec::new();
        for (j, t) in e.inputs.iter().enumerate() {
            if j != i {
                terms.push(t.iter().collect());
                ins.push(xs[j]);
            }
        }
        terms.push(e.output.iter().collect());
        ins.push(dy);
        let geq = format!("{}->{}", terms.join(","), kept.iter().collect::<String>());
        let eqattr = attr("equation", AttrValue::String(geq.into_bytes()));
        let mut d = b.op("Einsum", &ins, vec![eqattr]);
        if kept.len() != labels.len() {
            let missing: Vec<i64> = labels
                .iter()
                .enumerate()
                .filter(|(_, ch)| !kept.contains(ch))
                .map(|(k, _)| k as i64)
                .collect();
            d = b.unsqueeze(d, &missing);
            let s = b.shape_of(xs[i]);
            d = b.op("Expand", &[d, s], vec![]);
        }
        g[i] = Some(d);
    }
    Ok(g)
}
