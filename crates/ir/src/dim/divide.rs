//! Floor division, ceiling division and remainder with canonicalizing rewrites.
//!
//! Every rewrite rests on `floor((d*q + r) / d) == q + floor(r / d)` for integer-valued `q` and nonzero
//! integer `d`, on `floor(g*r / (g*d)) == floor(r / d)` for nonzero `g` (a constant times atoms),
//! and on `floor(floor(x/b)/c) == floor(x/(b*c))` for `b, c > 0`.

use std::sync::Arc;

use super::eval::{py_floor_div, py_mod};
use super::{AtomRepr, Expr, Mono, Repr};

/// `a = d*quot + scale*rem` and `d = scale*div`, with `scale` nonzero wherever `d` is.
struct Split {
    quot: Expr,
    rem: Expr,
    div: Expr,
    scale: Expr,
}

/// The sign of the leading (first stored) coefficient.
fn leading_negative(e: &Expr) -> bool {
    e.terms_cow().first().is_some_and(|(_, c)| *c < 0)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

/// Splits `a` by a single-term divisor `k*m`: each term `c*x*m` goes to the quotient as
/// `sign(k) * c.div_euclid(|k|) * x` and leaves `c.rem_euclid(|k|) * x*m` in the remainder.
fn split_by_monomial(a: &Expr, m: &Mono, k: i64) -> Option<(Expr, Expr)> {
    let kk = k.checked_abs()?;
    let sign = k.signum();
    let mut quot = Vec::new();
    let mut rem = Vec::new();
    for (mono, c) in a.terms_cow().iter() {
        match mono.div(m) {
            Some(rest) => {
                let qc = c.div_euclid(kk).checked_mul(sign)?;
                let rc = c.rem_euclid(kk);
                if qc != 0 {
                    quot.push((rest, qc));
                }
                if rc != 0 {
                    rem.push((mono.clone(), rc));
                }
            }
            None => rem.push((mono.clone(), *c)),
        }
    }
    Some((Expr::from_unsorted(quot), Expr::from_sorted(rem)))
}

/// Exact division by a multi-term divisor, by repeated leading-term elimination (bounded).
fn exact_div(a: &Expr, d: &Expr) -> Option<Expr> {
    let dt = d.terms_cow();
    let (lm, lc) = dt.first()?;
    let mut rest = a.clone();
    let mut quot = Vec::new();
    for _ in 0..64 {
        if rest.is_zero() {
            return Some(Expr::from_unsorted(quot));
        }
        let rt = rest.terms_cow();
        let (m, c) = rt.first()?;
        let qm = m.div(lm)?;
        if c.checked_rem(*lc)? != 0 {
            return None;
        }
        let qc = c.checked_div(*lc)?;
        let t = Expr::from_sorted(vec![(qm.clone(), qc)]);
        let next = &rest - &(&t * d);
        if next.is_overflow() {
            return None;
        }
        quot.push((qm, qc));
        rest = next;
    }
    None
}

/// Cancels the common factor (gcd of coefficients times shared atoms) of `r` and `d`. Any common
/// factor `g` cancels: `g*r / (g*d)` and `r / d` are the same rational wherever the divisor is
/// nonzero, so their floors agree, and `(g*r) % (g*d) == g * (r % d)`.
fn cancel_common(r: &Expr, d: &Expr) -> (Expr, Expr, Expr) {
    let rt = r.terms_cow();
    let dt = d.terms_cow();
    let all = || rt.iter().chain(dt.iter());
    let g = all().fold(0u64, |g, (_, c)| gcd(g, c.unsigned_abs()));
    let mut common: Vec<(AtomRepr, u32)> = match dt.first() {
        Some((m, _)) => m
            .factors
            .iter()
            .filter(|(a, _)| !matches!(a, AtomRepr::Overflow))
            .cloned()
            .collect(),
        None => Vec::new(),
    };
    for (m, _) in all() {
        common.retain_mut(|(a, p)| match m.factors.iter().find(|(b, _)| b == a) {
            Some((_, q)) => {
                *p = (*p).min(*q);
                true
            }
            None => false,
        });
    }
    let g = match i64::try_from(g) {
        Ok(g) if g > 0 => g,
        _ => 1,
    };
    if g == 1 && common.is_empty() {
        return (Expr::one(), r.clone(), d.clone());
    }
    let cm = Mono::from_factors(common);
    let divide = |ts: &[(Mono, i64)]| -> Option<Expr> {
        let mut out = Vec::with_capacity(ts.len());
        for (m, c) in ts {
            out.push((m.div(&cm)?, c.checked_div(g)?));
        }
        Some(Expr::from_unsorted(out))
    };
    match (divide(&rt), divide(&dt)) {
        (Some(r1), Some(d1)) => (Expr::from_sorted(vec![(cm, g)]), r1, d1),
        _ => (Expr::one(), r.clone(), d.clone()),
    }
}

/// `d` must be nonzero with a positive leading coefficient.
fn split(a: &Expr, d: &Expr) -> Split {
    let dt = d.terms_cow();
    let (quot, rem) = match dt.as_ref() {
        [(m, k)] => split_by_monomial(a, m, *k).unwrap_or_else(|| (Expr::zero(), a.clone())),
        _ => match exact_div(a, d) {
            Some(q) => (q, Expr::zero()),
            None => (Expr::zero(), a.clone()),
        },
    };
    if rem.is_zero() {
        return Split {
            quot,
            rem,
            div: d.clone(),
            scale: Expr::one(),
        };
    }
    let (scale, rem, div) = cancel_common(&rem, d);
    Split {
        quot,
        rem,
        div,
        scale,
    }
}

fn atom2(kind: fn(Arc<(Expr, Expr)>) -> AtomRepr, a: &Expr, b: &Expr) -> Expr {
    Expr::from_atom(kind(Arc::new((a.clone(), b.clone()))))
}

/// `floor(r / d)` for a reduced pair (`d` has a positive leading coefficient and no common factor with `r`).
fn floor_reduced(r: &Expr, d: &Expr) -> Expr {
    if r.is_zero() {
        return Expr::zero();
    }
    if d.as_const() == Some(1) {
        return r.clone();
    }
    if let (Some(x), Some(y)) = (r.as_const(), d.as_const()) {
        return py_floor_div(x, y).map_or_else(|_| Expr::overflow(), Expr::int);
    }
    if r.prove_nonneg() == Some(true) && d.prove_gt(r) == Some(true) {
        return Expr::zero();
    }
    if let Some(AtomRepr::FloorDiv(p)) = r.single_atom() {
        let (x, b) = (&p.0, &p.1);
        if b.prove_positive() == Some(true) && d.prove_positive() == Some(true) {
            return x.floor_div(&(b * d));
        }
    }
    atom2(AtomRepr::FloorDiv, r, d)
}

/// `r % d` for a reduced pair.
fn mod_reduced(r: &Expr, d: &Expr) -> Expr {
    if r.is_zero() || d.as_const() == Some(1) {
        return Expr::zero();
    }
    if let (Some(x), Some(y)) = (r.as_const(), d.as_const()) {
        return py_mod(x, y).map_or_else(|_| Expr::overflow(), Expr::int);
    }
    if r.prove_nonneg() == Some(true) && d.prove_gt(r) == Some(true) {
        return r.clone();
    }
    atom2(AtomRepr::Mod, r, d)
}

impl Expr {
    /// Python `self // d` (floor). Simplifications assume `d` is nonzero at evaluation; a divisor that is the
    /// constant 0 is kept as an atom that evaluates to `EvalError::DivByZero`.
    pub fn floor_div(&self, d: &Expr) -> Expr {
        if self.is_overflow() || d.is_overflow() {
            return Expr::overflow();
        }
        if let (Repr::Const(x), Repr::Const(y)) = (&self.0, &d.0) {
            if *y != 0 {
                return py_floor_div(*x, *y).map_or_else(|_| Expr::overflow(), Expr::int);
            }
        }
        if d.is_zero() {
            return atom2(AtomRepr::FloorDiv, self, d);
        }
        if self.is_zero() {
            return Expr::zero();
        }
        if leading_negative(d) {
            return (-self).floor_div(&-d);
        }
        let s = split(self, d);
        // Cancelling a common factor can leave a divisor whose leading coefficient is negative
        // (`M // (M*(M//2) - M^2)` is `1 // (M//2 - M)`): the same sign rule as above, so that one
        // value has one form (the display of one form parses back to it).
        if leading_negative(&s.div) {
            return &s.quot + &floor_reduced(&-&s.rem, &-&s.div);
        }
        &s.quot + &floor_reduced(&s.rem, &s.div)
    }

    /// Ceiling division `ceil(self / d)`. For a divisor proven positive this is `(self + d - 1) // d`,
    /// otherwise `-((-self) // d)`.
    pub fn ceil_div(&self, d: &Expr) -> Expr {
        if d.prove_positive() == Some(true) {
            (&(self + d) - 1).floor_div(d)
        } else {
            -((-self).floor_div(d))
        }
    }

    /// Python `self % d`: zero or the sign of `d`, with `self == d * (self // d) + self % d`.
    pub fn rem(&self, d: &Expr) -> Expr {
        if self.is_overflow() || d.is_overflow() {
            return Expr::overflow();
        }
        if let (Repr::Const(x), Repr::Const(y)) = (&self.0, &d.0) {
            if *y != 0 {
                return py_mod(*x, *y).map_or_else(|_| Expr::overflow(), Expr::int);
            }
        }
        if d.is_zero() {
            return atom2(AtomRepr::Mod, self, d);
        }
        if self.is_zero() {
            return Expr::zero();
        }
        if leading_negative(d) {
            // Python: a % d == -((-a) % (-d)).
            return -((-self).rem(&-d));
        }
        let s = split(self, d);
        if s.rem.is_zero() {
            return Expr::zero();
        }
        &s.scale * &mod_reduced(&s.rem, &s.div)
    }
}
