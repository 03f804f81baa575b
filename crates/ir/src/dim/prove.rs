//! Sign proofs over all symbol values >= 1 (symbols for sizes made from the data: >= 0).
//!
//! The core test shifts every atom with a known lower bound of 1 (every symbol, and some opaque atoms) by
//! `x = 1 + x'` with `x' >= 0`, expands in `i128`, and reads the signs of the coefficients: all `>= 0` proves
//! `>= 0`, all `<= 0` with a negative constant proves `< 0`. Atoms known `>= 0`, and even powers of any
//! atom, are kept as nonnegative variables; any other atom makes the test give up.

use std::collections::BTreeMap;

use super::{AtomRepr, Expr};

/// Known lower bound of an atom or expression.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Bound {
    Unknown,
    NonNeg,
    Pos,
}

/// Limits that keep the expansion cheap; beyond them the proof gives up.
const MAX_POWER: u32 = 62;
const MAX_TERMS: usize = 4096;

fn expr_bound(e: &Expr) -> Bound {
    if e.prove_positive() == Some(true) {
        Bound::Pos
    } else if e.prove_nonneg() == Some(true) {
        Bound::NonNeg
    } else {
        Bound::Unknown
    }
}

/// [`atom_bound`] of compound atoms, remembered per thread by the address of the atom's shared
/// arguments (the cache holds a clone, so the address is not reused while it is cached). A nested
/// `max`/`min` (a slice's clamped bounds, chunk after chunk) is otherwise bounded once per
/// enclosing proof, exponentially in its depth.
fn atom_bound(a: &AtomRepr) -> Bound {
    use std::cell::RefCell;
    use std::collections::HashMap;
    const CAPACITY: usize = 1 << 16;
    thread_local! {
        static BOUNDS: RefCell<HashMap<(u8, usize), (AtomRepr, Bound)>> =
            RefCell::new(HashMap::new());
    }
    // The kind is part of the key: a quotient and a remainder may share their arguments.
    let addr = |p: *const u8| p as usize;
    let key = match a {
        AtomRepr::FloorDiv(p) => (0, addr(std::sync::Arc::as_ptr(p).cast())),
        AtomRepr::Mod(p) => (1, addr(std::sync::Arc::as_ptr(p).cast())),
        AtomRepr::Max(xs) => (2, addr(std::sync::Arc::as_ptr(xs).cast())),
        AtomRepr::Min(xs) => (3, addr(std::sync::Arc::as_ptr(xs).cast())),
        _ => return bound_of(a),
    };
    if let Some(b) = BOUNDS.with(|m| m.borrow().get(&key).map(|(_, b)| *b)) {
        return b;
    }
    let b = bound_of(a);
    BOUNDS.with(|m| {
        let mut m = m.borrow_mut();
        if m.len() >= CAPACITY {
            m.clear();
        }
        m.insert(key, (a.clone(), b));
    });
    b
}

fn bound_of(a: &AtomRepr) -> Bound {
    match a {
        AtomRepr::Sym(_) => Bound::Pos,
        AtomRepr::Data(_) => Bound::NonNeg,
        // A divisor proven `>= 0` is `>= 1`: divisors are nonzero wherever a proof applies.
        AtomRepr::FloorDiv(p) => {
            if p.1.prove_nonneg() != Some(true) {
                Bound::Unknown
            } else if p.0.prove_ge(&p.1) == Some(true) {
                Bound::Pos
            } else if p.0.prove_nonneg() == Some(true) {
                Bound::NonNeg
            } else {
                Bound::Unknown
            }
        }
        AtomRepr::Mod(p) => {
            if p.1.prove_nonneg() == Some(true) {
                Bound::NonNeg
            } else {
                Bound::Unknown
            }
        }
        AtomRepr::Max(xs) => xs.iter().map(expr_bound).max().unwrap_or(Bound::Unknown),
        AtomRepr::Min(xs) => xs.iter().map(expr_bound).min().unwrap_or(Bound::Unknown),
        AtomRepr::Overflow => Bound::Unknown,
    }
}

/// What the shifted expansion shows about the sign of an expression.
struct Signs {
    all_ge0: bool,
    all_le0: bool,
    constant: i128,
}

type Factors = Vec<(AtomRepr, u32)>;

fn binomials(p: u32) -> Option<Vec<i128>> {
    let mut row: Vec<i128> = vec![1];
    for _ in 0..p {
        let mut next = vec![1i128; row.len() + 1];
        for k in 1..row.len() {
            next[k] = row[k - 1].checked_add(row[k])?;
        }
        row = next;
    }
    Some(row)
}

fn shifted_signs(d: &Expr) -> Option<Signs> {
    let mut bounds: BTreeMap<&AtomRepr, Bound> = BTreeMap::new();
    let mut out: BTreeMap<Factors, i128> = BTreeMap::new();
    let terms = d.terms_cow();
    for (m, c) in terms.iter() {
        let mut partial: Vec<(Factors, i128)> = vec![(Vec::new(), i128::from(*c))];
        for (a, p) in &m.factors {
            let b = *bounds.entry(a).or_insert_with(|| atom_bound(a));
            match b {
                Bound::Pos => {
                    if *p > MAX_POWER {
                        return None;
                    }
                    let row = binomials(*p)?;
                    let mut next = Vec::with_capacity(partial.len() * row.len());
                    for (f, v) in &partial {
                        for (j, bc) in row.iter().enumerate() {
                            let mut g = f.clone();
                            if j > 0 {
                                g.push((a.clone(), u32::try_from(j).ok()?));
                            }
                            next.push((g, v.checked_mul(*bc)?));
                        }
                    }
                    partial = next;
                }
                Bound::NonNeg => partial
                    .iter_mut()
                    .for_each(|(f, _)| f.push((a.clone(), *p))),
                Bound::Unknown if p % 2 == 0 => partial
                    .iter_mut()
                    .for_each(|(f, _)| f.push((a.clone(), *p))),
                Bound::Unknown => return None,
            }
            if partial.len() > MAX_TERMS {
                return None;
            }
        }
        for (f, v) in partial {
            let slot = out.entry(f).or_insert(0);
            *slot = slot.checked_add(v)?;
        }
        if out.len() > MAX_TERMS {
            return None;
        }
    }
    let constant = out.get(&Vec::new()).copied().unwrap_or(0);
    Some(Signs {
        all_ge0: out.values().all(|v| *v >= 0),
        all_le0: out.values().all(|v| *v <= 0),
        constant,
    })
}

/// `Some(true)` when `d >= 0` is proven, `Some(false)` when `d < 0` is proven.
fn sign_test(d: &Expr) -> Option<bool> {
    if let Some(c) = d.as_const() {
        return Some(c >= 0);
    }
    let s = shifted_signs(d)?;
    if s.all_ge0 {
        Some(true)
    } else if s.all_le0 && s.constant < 0 {
        Some(false)
    } else {
        None
    }
}

/// Whether some claim holds, from each claim's proof: `Some(true)` at the first proven, `Some(false)`
/// when every one is disproven (and there is one), else `None`.
fn some_of(claims: impl Iterator<Item = Option<bool>>) -> Option<bool> {
    let (mut any, mut all_false) = (false, true);
    for c in claims {
        any = true;
        match c {
            Some(true) => return Some(true),
            Some(false) => {}
            None => all_false = false,
        }
    }
    (any && all_false).then_some(false)
}

/// Whether every claim holds: `Some(false)` at the first disproven, `Some(true)` when every one is
/// proven (and there is one), else `None`.
fn every_of(claims: impl Iterator<Item = Option<bool>>) -> Option<bool> {
    some_of(claims.map(|c| c.map(|v| !v))).map(|v| !v)
}

impl Expr {
    /// `Some(true)`: `self >= other` for all symbol values >= 1. `Some(false)`: `self < other` for all.
    /// `None`: not decided. Never wrong when divisors in the expressions are nonzero.
    pub fn prove_ge(&self, other: &Expr) -> Option<bool> {
        if self.is_overflow() || other.is_overflow() {
            return None;
        }
        if self == other {
            return Some(true);
        }
        if let Some(v) = sign_test(&(self - other)) {
            return Some(v);
        }
        // Structural rules: max(xs) >= b iff some x >= b; min(xs) >= b iff every x >= b, and duals.
        // Each argument's proof is asked once: asking twice at every level of a nested max/min
        // takes time exponential in its depth.
        let left = match self.single_atom() {
            Some(AtomRepr::Max(xs)) => some_of(xs.iter().map(|x| x.prove_ge(other))),
            Some(AtomRepr::Min(xs)) => every_of(xs.iter().map(|x| x.prove_ge(other))),
            _ => None,
        };
        if left.is_some() {
            return left;
        }
        match other.single_atom() {
            Some(AtomRepr::Max(ys)) => every_of(ys.iter().map(|y| self.prove_ge(y))),
            Some(AtomRepr::Min(ys)) => some_of(ys.iter().map(|y| self.prove_ge(y))),
            _ => None,
        }
    }

    /// `Some(true)`: `self > other` for all symbol values >= 1; `Some(false)`: `self <= other` for all.
    pub fn prove_gt(&self, other: &Expr) -> Option<bool> {
        self.prove_ge(&(other + 1))
    }

    /// `Some(true)`: `self <= other` for all symbol values >= 1; `Some(false)`: `self > other` for all.
    pub fn prove_le(&self, other: &Expr) -> Option<bool> {
        other.prove_ge(self)
    }

    /// `Some(true)`: `self < other` for all symbol values >= 1; `Some(false)`: `self >= other` for all.
    pub fn prove_lt(&self, other: &Expr) -> Option<bool> {
        other.prove_gt(self)
    }

    /// `Some(true)`: equal for all symbol values >= 1; `Some(false)`: different for all; `None`: unknown.
    pub fn prove_eq(&self, other: &Expr) -> Option<bool> {
        if self.is_overflow() || other.is_overflow() {
            return None;
        }
        if self == other {
            return Some(true);
        }
        let d = self - other;
        if let Some(c) = d.as_const() {
            return Some(c == 0);
        }
        if d.prove_gt(&Expr::zero()) == Some(true) || d.prove_lt(&Expr::zero()) == Some(true) {
            return Some(false);
        }
        None
    }

    /// [`Expr::prove_eq`] against a constant.
    pub fn prove_eq_const(&self, c: i64) -> Option<bool> {
        self.prove_eq(&Expr::int(c))
    }

    /// `Some(true)`: `self >= 0` for all symbol values >= 1; `Some(false)`: `self < 0` for all.
    pub fn prove_nonneg(&self) -> Option<bool> {
        self.prove_ge(&Expr::zero())
    }

    /// `Some(true)`: `self >= 1` for all symbol values >= 1; `Some(false)`: `self < 1` for all.
    pub fn prove_positive(&self) -> Option<bool> {
        self.prove_ge(&Expr::one())
    }
}
