//! `max`/`min` atoms: flattened, constant-folded, deduplicated, pruned by proof, sorted.

use std::sync::Arc;

use super::{AtomRepr, Expr};

/// `a` makes `b` redundant: `a >= b` for max, `a <= b` for min, proven for all symbol values >= 1.
fn dominates(a: &Expr, b: &Expr, is_max: bool) -> bool {
    if is_max {
        a.prove_ge(b) == Some(true)
    } else {
        b.prove_ge(a) == Some(true)
    }
}

/// Canonical `max`/`min` of `args`; `None` when `args` is empty.
fn build<'a>(args: impl IntoIterator<Item = &'a Expr>, is_max: bool) -> Option<Expr> {
    let mut flat: Vec<Expr> = Vec::new();
    let mut konst: Option<i64> = None;
    let mut push = |x: &Expr, flat: &mut Vec<Expr>| match x.as_const() {
        Some(c) => konst = Some(konst.map_or(c, |k| if is_max { k.max(c) } else { k.min(c) })),
        None => flat.push(x.clone()),
    };
    let mut any = false;
    for a in args {
        any = true;
        if a.is_overflow() {
            return Some(Expr::overflow());
        }
        match a.single_atom() {
            Some(AtomRepr::Max(xs)) if is_max => xs.iter().for_each(|x| push(x, &mut flat)),
            Some(AtomRepr::Min(xs)) if !is_max => xs.iter().for_each(|x| push(x, &mut flat)),
            _ => push(a, &mut flat),
        }
    }
    if !any {
        return None;
    }
    if let Some(c) = konst {
        flat.push(Expr::int(c));
    }
    flat.sort();
    flat.dedup();
    let mut kept: Vec<Expr> = Vec::with_capacity(flat.len());
    for x in flat {
        if kept.iter().any(|k| dominates(k, &x, is_max)) {
            continue;
        }
        kept.retain(|k| !dominates(&x, k, is_max));
        kept.push(x);
    }
    kept.sort();
    if kept.len() <= 1 {
        return kept.pop();
    }
    let atom = if is_max {
        AtomRepr::Max(Arc::from(kept))
    } else {
        AtomRepr::Min(Arc::from(kept))
    };
    Some(Expr::from_atom(atom))
}

impl Expr {
    /// Symbolic maximum. Collapses to one argument when a proof decides; see the module note on `Ord::max`.
    pub fn max(&self, o: &Expr) -> Expr {
        build([self, o], true).unwrap_or_else(|| self.clone())
    }

    /// Symbolic minimum. Collapses to one argument when a proof decides.
    pub fn min(&self, o: &Expr) -> Expr {
        build([self, o], false).unwrap_or_else(|| self.clone())
    }

    /// Maximum of all items; `None` when empty. Cost is quadratic in the number of distinct arguments.
    pub fn max_of<'a>(it: impl IntoIterator<Item = &'a Expr>) -> Option<Expr> {
        build(it, true)
    }

    /// Minimum of all items; `None` when empty.
    pub fn min_of<'a>(it: impl IntoIterator<Item = &'a Expr>) -> Option<Expr> {
        build(it, false)
    }
}
