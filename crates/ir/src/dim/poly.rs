//! Ring operations on canonical expressions: sum, difference, negation, product. All are overflow-checked.

use super::{Expr, Mono, Repr};

/// `a + b`.
pub(super) fn add(a: &Expr, b: &Expr) -> Expr {
    if let (Repr::Const(x), Repr::Const(y)) = (&a.0, &b.0) {
        return x.checked_add(*y).map_or_else(Expr::overflow, Expr::int);
    }
    if a.is_overflow() || b.is_overflow() {
        return Expr::overflow();
    }
    if a.is_zero() {
        return b.clone();
    }
    if b.is_zero() {
        return a.clone();
    }
    merge(&a.terms_cow(), &b.terms_cow(), false)
}

/// `a - b`.
pub(super) fn sub(a: &Expr, b: &Expr) -> Expr {
    if let (Repr::Const(x), Repr::Const(y)) = (&a.0, &b.0) {
        return x.checked_sub(*y).map_or_else(Expr::overflow, Expr::int);
    }
    if a.is_overflow() || b.is_overflow() {
        return Expr::overflow();
    }
    if b.is_zero() {
        return a.clone();
    }
    if a == b {
        return Expr::zero();
    }
    merge(&a.terms_cow(), &b.terms_cow(), true)
}

/// Merges two sorted term lists, subtracting the second when `negate_b`.
fn merge(x: &[(Mono, i64)], y: &[(Mono, i64)], negate_b: bool) -> Expr {
    let mut out = Vec::with_capacity(x.len() + y.len());
    let (mut i, mut j) = (0, 0);
    let yc = |c: i64| if negate_b { c.checked_neg() } else { Some(c) };
    while i < x.len() || j < y.len() {
        let ord = match (x.get(i), y.get(j)) {
            (Some(a), Some(b)) => a.0.cmp(&b.0),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        match ord {
            std::cmp::Ordering::Less => {
                out.push(x[i].clone());
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                let Some(c) = yc(y[j].1) else {
                    return Expr::overflow();
                };
                out.push((y[j].0.clone(), c));
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                let s = if negate_b {
                    x[i].1.checked_sub(y[j].1)
                } else {
                    x[i].1.checked_add(y[j].1)
                };
                let Some(s) = s else { return Expr::overflow() };
                if s != 0 {
                    out.push((x[i].0.clone(), s));
                }
                i += 1;
                j += 1;
            }
        }
    }
    Expr::from_sorted(out)
}

/// `-a`.
pub(super) fn neg(a: &Expr) -> Expr {
    scale(a, -1)
}

/// `k * a`.
pub(super) fn scale(a: &Expr, k: i64) -> Expr {
    match &a.0 {
        Repr::Const(c) => c.checked_mul(k).map_or_else(Expr::overflow, Expr::int),
        Repr::Poly(ts) => {
            if a.is_overflow() {
                return Expr::overflow();
            }
            match k {
                0 => Expr::zero(),
                1 => a.clone(),
                _ => {
                    let mut out = Vec::with_capacity(ts.len());
                    for (m, c) in ts.iter() {
                        let Some(v) = c.checked_mul(k) else {
                            return Expr::overflow();
                        };
                        out.push((m.clone(), v));
                    }
                    Expr::from_sorted(out)
                }
            }
        }
    }
}

/// `a * b`, expanding products of sums.
pub(super) fn mul(a: &Expr, b: &Expr) -> Expr {
    match (&a.0, &b.0) {
        (Repr::Const(x), Repr::Const(y)) => {
            x.checked_mul(*y).map_or_else(Expr::overflow, Expr::int)
        }
        (Repr::Const(k), _) => scale(b, *k),
        (_, Repr::Const(k)) => scale(a, *k),
        (Repr::Poly(xs), Repr::Poly(ys)) => {
            if a.is_overflow() || b.is_overflow() {
                return Expr::overflow();
            }
            let mut out = Vec::with_capacity(xs.len() * ys.len());
            for (m, c) in xs.iter() {
                for (n, d) in ys.iter() {
                    let (Some(mn), Some(cd)) = (m.mul(n), c.checked_mul(*d)) else {
                        return Expr::overflow();
                    };
                    out.push((mn, cd));
                }
            }
            if xs.len() == 1 && ys.len() == 1 {
                return Expr::from_sorted(out);
            }
            Expr::from_unsorted(out)
        }
    }
}

/// The sum of all items, merged in one sort.
pub(super) fn sum<'a>(it: impl Iterator<Item = &'a Expr>) -> Expr {
    let mut all = Vec::new();
    let mut konst: i64 = 0;
    for e in it {
        if e.is_overflow() {
            return Expr::overflow();
        }
        match &e.0 {
            Repr::Const(c) => match konst.checked_add(*c) {
                Some(s) => konst = s,
                None => return Expr::overflow(),
            },
            Repr::Poly(ts) => all.extend(ts.iter().cloned()),
        }
    }
    if konst != 0 {
        all.push((Mono::one(), konst));
    }
    Expr::from_unsorted(all)
}
