//! The peak as a function of the symbols: the exact max over distinct per-step sums, its dominant
//! regime along one symbol, and the largest value of that symbol that fits a budget.
//!
//! Contracts:
//! - [`PeakFormula::eval`] equals the concrete liveness peak (value and first step) at every point where
//!   no size overflows `i64`; only candidates that can never be the first step of the peak are dropped.
//! - Along one symbol with the others fixed, a candidate that is a polynomial in that symbol is analysed
//!   exactly (the dominant candidate is found by comparing coefficients, the regime bound and budget
//!   crossings from the real roots, checked in exact integer arithmetic). Non-polynomial candidates
//!   (`min`, `//`, `%` of the symbol) fall back to sampling at doublings and bisection; the result says so.
//! - Overflowing `i64` means more than 8 EiB: such points count as "does not fit" and are never
//!   sampled for the regime.

use std::collections::BTreeMap;

use memplan_ir::dim::{Atom, EvalError};
use memplan_ir::Expr;

use crate::peak::symbolic_steps;
use crate::timeline::{SimError, Timeline};

/// `peak(dims) = max_k candidates[k].expr`, exactly (ties go to the earliest step).
#[derive(Clone, Debug)]
pub struct PeakFormula {
    /// Per-step live sums that can be the peak, each with the first step where it occurs, by step.
    pub candidates: Vec<Candidate>,
}

/// One per-step live sum.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub expr: Expr,
    pub step: usize,
}

/// The regime that dominates when one symbol grows, the others fixed.
#[derive(Clone, Debug, PartialEq)]
pub struct Dominant {
    /// The dominant candidate's live bytes, in every symbol.
    pub expr: Expr,
    /// The same with the fixed symbols substituted: a function of the grown symbol only.
    pub along: Expr,
    pub step: usize,
    /// The dominant candidate is the peak for every value of the symbol from this one on.
    pub from: i64,
    /// True when `from` was derived exactly (polynomial candidates); false when sampled.
    pub exact: bool,
}

/// The answer to "largest value that fits".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MaxFit {
    /// Every value up to this one fits and the next one does not.
    Value(i64),
    /// Even 1 does not fit.
    None,
    /// Fits up to [`MAX_SOLVE`] (the peak does not grow with the symbol, or only very slowly).
    Unbounded,
}

/// Largest symbol value considered by [`PeakFormula::max_fitting`].
pub const MAX_SOLVE: i64 = 1 << 40;

/// Pairwise proof-based pruning runs only below this many shape groups (it is quadratic).
const PRUNE_LIMIT: usize = 400;

fn eval_err(e: EvalError) -> SimError {
    match e {
        EvalError::UnboundSymbol(s) => SimError::Unbound(s),
        e => SimError::Eval(e.to_string()),
    }
}

/// Splits `e` into its non-constant part and its constant term.
fn split_const(e: &Expr) -> (Expr, i64) {
    let c = e
        .terms()
        .iter()
        .find(|t| t.factors.is_empty())
        .map_or(0, |t| t.coeff);
    (e - &Expr::int(c), c)
}

impl PeakFormula {
    /// The formula of a timeline's per-step live sums.
    pub fn new(t: &Timeline) -> PeakFormula {
        PeakFormula::from_steps(&symbolic_steps(t))
    }

    /// The formula of `max_s steps[s]` (first maximal step wins).
    pub fn from_steps(steps: &[Expr]) -> PeakFormula {
        // Same non-constant part: only the largest constant (earliest step among equals) can be the max.
        let mut groups: BTreeMap<Expr, (i64, usize)> = BTreeMap::new();
        let mut seen: BTreeMap<&Expr, ()> = BTreeMap::new();
        for (s, e) in steps.iter().enumerate() {
            if seen.insert(e, ()).is_some() {
                continue;
            }
            let (shape, c) = split_const(e);
            let slot = groups.entry(shape).or_insert((c, s));
            if c > slot.0 {
                *slot = (c, s);
            }
        }
        let mut cands: Vec<Candidate> = groups
            .into_iter()
            .map(|(shape, (c, step))| Candidate {
                expr: &shape + &Expr::int(c),
                step,
            })
            .collect();
        cands.sort_by_key(|c| c.step);
        if cands.len() <= PRUNE_LIMIT {
            // `a` makes `b` redundant when `a >= b` everywhere and `a` comes first, or `a > b` everywhere.
            let beats = |a: &Candidate, b: &Candidate| {
                (a.step <= b.step && a.expr.prove_ge(&b.expr) == Some(true))
                    || a.expr.prove_ge(&(&b.expr + &Expr::one())) == Some(true)
            };
            let mut kept: Vec<Candidate> = Vec::new();
            for c in cands {
                if kept.iter().any(|k| beats(k, &c)) {
                    continue;
                }
                kept.retain(|k| !beats(&c, k));
                kept.push(c);
            }
            cands = kept;
        }
        PeakFormula { candidates: cands }
    }

    /// The peak and its first step at `env`. Errors on an unbound symbol or a size past `i64`.
    pub fn eval(&self, env: &BTreeMap<String, i64>) -> Result<(i64, Option<usize>), SimError> {
        let mut best: Option<(i64, usize)> = None;
        for c in &self.candidates {
            let v = c.expr.eval_map(env).map_err(eval_err)?;
            if best.is_none_or(|(b, s)| v > b || (v == b && c.step < s)) {
                best = Some((v, c.step));
            }
        }
        Ok(match best {
            Some((v, s)) => (v, Some(s)),
            None => (0, None),
        })
    }

    /// Symbols the formula depends on, sorted.
    pub fn symbols(&self) -> Vec<String> {
        let mut s: std::collections::BTreeSet<String> = Default::default();
        for c in &self.candidates {
            s.extend(c.expr.symbols());
        }
        s.into_iter().collect()
    }

    /// The symbol the peak grows fastest with: the highest power in any candidate (a symbol inside
    /// `min`/`//`/`%` counts as power 1); ties go to the first in `order`, then by name.
    pub fn primary_symbol(&self, order: &[String]) -> Option<String> {
        let syms = self.symbols();
        let rank = |s: &String| order.iter().position(|o| o == s).unwrap_or(usize::MAX);
        syms.iter()
            .map(|s| {
                let deg = self
                    .candidates
                    .iter()
                    .map(|c| c.expr.degree_in(s).unwrap_or(1))
                    .max()
                    .unwrap_or(0);
                (deg, s)
            })
            .max_by(|a, b| {
                a.0.cmp(&b.0)
                    .then(rank(b.1).cmp(&rank(a.1)))
                    .then(b.1.cmp(a.1))
            })
            .map(|(_, s)| s.clone())
    }

    fn fixed_map(fixed: &BTreeMap<String, i64>, sym: &str) -> BTreeMap<String, Expr> {
        fixed
            .iter()
            .filter(|(k, _)| k.as_str() != sym)
            .map(|(k, v)| (k.clone(), Expr::int(*v)))
            .collect()
    }

    /// Every candidate as a piecewise polynomial in `sym` (others fixed): the range `1..` cut at the
    /// constants of `min(sym, c)`/`max(sym, c)` atoms, with one polynomial per candidate on each piece.
    /// `None` when some candidate has another kind of atom in `sym`.
    fn pieces(&self, sym: &str, fixed: &BTreeMap<String, i64>) -> Option<Vec<Piece>> {
        let map = PeakFormula::fixed_map(fixed, sym);
        let exprs: Vec<Expr> = self
            .candidates
            .iter()
            .map(|c| c.expr.substitute_map(&map))
            .collect();
        let mut cuts: Vec<i64> = Vec::new();
        for e in &exprs {
            breakpoints(e, sym, &mut cuts)?;
        }
        cuts.sort_unstable();
        cuts.dedup();
        // Pieces [1, c1], [c1 + 1, c2], ..., [ck + 1, INF]: on each, min/max(sym, c) is one branch.
        let mut bounds: Vec<(i64, i64)> = Vec::new();
        let mut lo = 1i64;
        for &c in cuts.iter().filter(|&&c| (1..INF).contains(&c)) {
            if c >= lo {
                bounds.push((lo, c));
                lo = c + 1;
            }
        }
        bounds.push((lo, INF));
        bounds
            .into_iter()
            .map(|(lo, hi)| {
                let polys = exprs
                    .iter()
                    .map(|e| Poly::on_piece(e, sym, lo, hi))
                    .collect::<Option<Vec<_>>>()?;
                Some(Piece { lo, hi, polys })
            })
            .collect()
    }

    /// The candidate that is the peak when `sym` grows, the other symbols fixed by `fixed`.
    pub fn dominant(
        &self,
        sym: &str,
        fixed: &BTreeMap<String, i64>,
    ) -> Result<Option<Dominant>, SimError> {
        if self.candidates.is_empty() {
            return Ok(None);
        }
        let map = PeakFormula::fixed_map(fixed, sym);
        if let Some(pieces) = self.pieces(sym, fixed) {
            // On the last piece, the largest leading coefficients win; equal polynomials go to the
            // earlier step.
            let Some(last) = pieces.last() else {
                return Ok(None);
            };
            let polys = &last.polys;
            let mut d = 0;
            for i in 1..polys.len() {
                match polys[i].cmp_growth(&polys[d]) {
                    std::cmp::Ordering::Greater => d = i,
                    std::cmp::Ordering::Equal
                        if self.candidates[i].step < self.candidates[d].step =>
                    {
                        d = i
                    }
                    _ => {}
                }
            }
            // Walk the pieces down until some other candidate beats `d`.
            let mut from = 1i64;
            'pieces: for pc in pieces.iter().rev() {
                let mut worst: Option<i64> = None;
                for (i, p) in pc.polys.iter().enumerate() {
                    if i != d {
                        if let Some(x) = pc.polys[d].sub(p).last_negative_in(pc.lo, pc.hi) {
                            worst = Some(worst.map_or(x, |w| w.max(x)));
                        }
                    }
                }
                if let Some(x) = worst {
                    from = x + 1;
                    break 'pieces;
                }
            }
            let c = &self.candidates[d];
            return Ok(Some(Dominant {
                expr: c.expr.clone(),
                along: c.expr.substitute_map(&map),
                step: c.step,
                from,
                exact: true,
            }));
        }
        // Sampling fallback: the largest power of two (up to 2^20) where nothing overflows.
        let at = |x: i64| -> Result<Option<(i64, Option<usize>)>, SimError> {
            let mut env = fixed.clone();
            env.insert(sym.to_string(), x);
            match self.eval(&env) {
                Ok(r) => Ok(Some(r)),
                Err(SimError::Eval(_)) => Ok(None),
                Err(e) => Err(e),
            }
        };
        let mut top = 1i64;
        while top < 1 << 20 && at(top * 2)?.is_some() {
            top *= 2;
        }
        let Some((_, Some(step))) = at(top)? else {
            return Ok(None);
        };
        let Some(cand) = self.candidates.iter().find(|c| c.step == step) else {
            return Ok(None);
        };
        let is_step =
            |x: i64| -> Result<bool, SimError> { Ok(at(x)?.is_some_and(|(_, s)| s == Some(step))) };
        let mut from = top;
        while from > 1 && is_step(from / 2)? {
            from /= 2;
        }
        if from > 1 {
            let (mut lo, mut hi) = (from / 2, from);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if is_step(mid)? {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            from = hi;
        }
        Ok(Some(Dominant {
            expr: cand.expr.clone(),
            along: cand.expr.substitute_map(&map),
            step,
            from,
            exact: false,
        }))
    }

    /// The largest value of `sym` (others fixed by `fixed`) such that every value from 1 up to it fits
    /// `budget`. Solved from the formula (real roots of `candidate - budget` for polynomial candidates,
    /// else doubling and bisection over [`PeakFormula::eval`]) and then confirmed by `confirm`, an
    /// independent evaluation of the peak: the value fits and the value + 1 does not. When the
    /// confirmation disagrees, the answer is searched with `confirm` alone.
    pub fn max_fitting(
        &self,
        sym: &str,
        fixed: &BTreeMap<String, i64>,
        budget: u64,
        confirm: &dyn Fn(&BTreeMap<String, i64>) -> Result<Option<u64>, SimError>,
    ) -> Result<MaxFit, SimError> {
        let env_at = |x: i64| {
            let mut env = fixed.clone();
            env.insert(sym.to_string(), x);
            env
        };
        // `None` from `confirm` means the peak overflows `i64`: it does not fit.
        let fits_confirmed = |x: i64| -> Result<bool, SimError> {
            Ok(confirm(&env_at(x))?.is_some_and(|p| p <= budget))
        };
        let fits_formula = |x: i64| -> Result<bool, SimError> {
            match self.eval(&env_at(x)) {
                Ok((p, _)) => Ok(p.max(0) as u64 <= budget),
                Err(SimError::Eval(_)) => Ok(false),
                Err(e) => Err(e),
            }
        };
        let solved = match self.pieces(sym, fixed) {
            Some(pieces) => {
                let b = i128::from(budget);
                // The first value where any candidate exceeds the budget.
                let first_over = pieces.iter().find_map(|pc| {
                    pc.polys
                        .iter()
                        .filter_map(|p| p.sub_const(b).first_positive_in(pc.lo, pc.hi))
                        .min()
                });
                match first_over {
                    Some(1) => MaxFit::None,
                    Some(x) if x - 1 < MAX_SOLVE => MaxFit::Value(x - 1),
                    _ => MaxFit::Unbounded,
                }
            }
            None => search(&fits_formula)?,
        };
        let ok = match solved {
            MaxFit::Value(v) => fits_confirmed(v)? && !fits_confirmed(v + 1)?,
            MaxFit::None => !fits_confirmed(1)?,
            MaxFit::Unbounded => fits_confirmed(MAX_SOLVE)?,
        };
        if ok {
            return Ok(solved);
        }
        search(&fits_confirmed)
    }
}

/// Doubling then bisection for the edge of `fits`: `lo` fits and `lo + 1` does not.
fn search(fits: &dyn Fn(i64) -> Result<bool, SimError>) -> Result<MaxFit, SimError> {
    if !fits(1)? {
        return Ok(MaxFit::None);
    }
    let mut lo = 1i64;
    let mut hi = 2i64;
    while fits(hi)? {
        lo = hi;
        if hi >= MAX_SOLVE {
            return Ok(MaxFit::Unbounded);
        }
        hi *= 2;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(MaxFit::Value(lo))
}

/// A polynomial in one symbol with integer coefficients, `c[k]` of `x^k`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Poly {
    c: Vec<i128>,
}

impl Poly {
    fn trimmed(mut self) -> Poly {
        while self.c.last() == Some(&0) {
            self.c.pop();
        }
        self
    }

    fn sub(&self, o: &Poly) -> Poly {
        let n = self.c.len().max(o.c.len());
        let c = (0..n)
            .map(|k| self.c.get(k).copied().unwrap_or(0) - o.c.get(k).copied().unwrap_or(0))
            .collect();
        Poly { c }.trimmed()
    }

    fn sub_const(&self, k: i128) -> Poly {
        let mut c = self.c.clone();
        if c.is_empty() {
            c.push(0);
        }
        c[0] -= k;
        Poly { c }.trimmed()
    }

    /// Growth order: compares coefficients from the highest power down.
    fn cmp_growth(&self, o: &Poly) -> std::cmp::Ordering {
        let n = self.c.len().max(o.c.len());
        for k in (0..n).rev() {
            let (a, b) = (
                self.c.get(k).copied().unwrap_or(0),
                o.c.get(k).copied().unwrap_or(0),
            );
            if a != b {
                return a.cmp(&b);
            }
        }
        std::cmp::Ordering::Equal
    }

    /// The sign of `p(x)`, exactly (in `i128`; past it the leading term decides, which holds there).
    fn sign_at(&self, x: i64) -> i32 {
        let x = i128::from(x);
        let mut acc: Option<i128> = Some(0);
        for &k in self.c.iter().rev() {
            acc = acc
                .and_then(|a| a.checked_mul(x))
                .and_then(|a| a.checked_add(k));
        }
        match acc {
            Some(v) => v.signum() as i32,
            None => self.c.last().map_or(0, |l| l.signum() as i32),
        }
    }

    fn eval_f(&self, x: f64) -> f64 {
        self.c.iter().rev().fold(0.0, |a, &k| a * x + k as f64)
    }

    /// Real roots in `[lo, hi]`, approximately, by isolating monotone pieces between the roots of the
    /// derivative.
    fn roots_in(&self, lo: f64, hi: f64) -> Vec<f64> {
        let deg = self.c.len().saturating_sub(1);
        if deg == 0 {
            return Vec::new();
        }
        if deg == 1 {
            let r = -(self.c[0] as f64) / self.c[1] as f64;
            return if (lo..=hi).contains(&r) {
                vec![r]
            } else {
                Vec::new()
            };
        }
        let d = Poly {
            c: (1..self.c.len()).map(|k| self.c[k] * k as i128).collect(),
        }
        .trimmed();
        let mut pts = vec![lo];
        pts.extend(d.roots_in(lo, hi));
        pts.push(hi);
        let mut out = Vec::new();
        for w in pts.windows(2) {
            let (mut a, mut b) = (w[0], w[1]);
            let (fa, fb) = (self.eval_f(a), self.eval_f(b));
            if fa == 0.0 {
                out.push(a);
                continue;
            }
            if fa.signum() == fb.signum() || fb == 0.0 {
                continue;
            }
            for _ in 0..200 {
                let m = 0.5 * (a + b);
                if m <= a || m >= b {
                    break;
                }
                if self.eval_f(m).signum() == fa.signum() {
                    a = m;
                } else {
                    b = m;
                }
            }
            out.push(0.5 * (a + b));
        }
        if self.eval_f(hi) == 0.0 {
            out.push(hi);
        }
        out
    }

    /// Integers to test exactly: 1 and the neighbours of every real root in `[1, bound]`.
    fn probe_points(&self) -> Vec<i64> {
        let lead = *self.c.last().unwrap_or(&1) as f64;
        let bound = 2.0
            + self
                .c
                .iter()
                .map(|&k| (k as f64 / lead).abs())
                .fold(0.0, f64::max);
        let bound = bound.min(4.0 * MAX_SOLVE as f64);
        let mut pts = vec![1i64];
        for r in self.roots_in(1.0, bound) {
            let f = r.floor() as i64;
            pts.extend((f - 2..=f + 2).filter(|&x| x >= 1));
        }
        pts.sort_unstable();
        pts.dedup();
        pts
    }

    /// The largest integer in `[lo, hi]` with `p(x) < 0`. Signs change only at real roots, so it is
    /// `hi` or sits next to a root.
    fn last_negative_in(&self, lo: i64, hi: i64) -> Option<i64> {
        if self.c.iter().all(|&k| k >= 0) {
            return None;
        }
        let mut pts = self.probe_points();
        pts.push(hi);
        let mut x = pts
            .into_iter()
            .filter(|&x| (lo..=hi).contains(&x) && self.sign_at(x) < 0)
            .max()?;
        while x < hi && self.sign_at(x + 1) < 0 {
            x += 1;
        }
        Some(x)
    }

    /// The smallest integer in `[lo, hi]` with `p(x) > 0`: `lo` or next to a root.
    fn first_positive_in(&self, lo: i64, hi: i64) -> Option<i64> {
        if self.c.iter().all(|&k| k <= 0) {
            return None;
        }
        let mut pts = self.probe_points();
        pts.push(lo);
        pts.push(hi);
        let mut x = pts
            .into_iter()
            .filter(|&x| (lo..=hi).contains(&x) && self.sign_at(x) > 0)
            .min()?;
        while x > lo && self.sign_at(x - 1) > 0 {
            x -= 1;
        }
        Some(x)
    }

    fn mul(&self, o: &Poly) -> Poly {
        if self.c.is_empty() || o.c.is_empty() {
            return Poly { c: Vec::new() };
        }
        let mut c = vec![0i128; self.c.len() + o.c.len() - 1];
        for (i, &a) in self.c.iter().enumerate() {
            for (j, &b) in o.c.iter().enumerate() {
                c[i + j] = c[i + j].saturating_add(a.saturating_mul(b));
            }
        }
        Poly { c }.trimmed()
    }

    /// `e` on the piece `[lo, hi]` of `sym`, where every `min/max(sym, c)` is one of its branches.
    fn on_piece(e: &Expr, sym: &str, lo: i64, hi: i64) -> Option<Poly> {
        let x = Poly { c: vec![0, 1] };
        let mut total = Poly { c: Vec::new() };
        for t in e.terms() {
            let mut p = Poly {
                c: vec![i128::from(t.coeff)],
            };
            for (a, pow) in &t.factors {
                let base = match a {
                    Atom::Sym(s) if s == sym => x.clone(),
                    Atom::Min(args) | Atom::Max(args) => {
                        let (c, is_min) = (sym_const_pair(args, sym)?, matches!(a, Atom::Min(_)));
                        // min(x, c) is x up to c, c from c on; max the other way round.
                        let below = hi <= c;
                        let above = lo >= c;
                        match (is_min, below, above) {
                            (true, true, _) | (false, _, true) => x.clone(),
                            (true, _, true) | (false, true, _) => Poly {
                                c: vec![i128::from(c)],
                            },
                            _ => return None,
                        }
                    }
                    _ => return None,
                };
                for _ in 0..*pow {
                    p = p.mul(&base);
                }
            }
            total = total.add(&p);
        }
        Some(total)
    }

    fn add(&self, o: &Poly) -> Poly {
        let n = self.c.len().max(o.c.len());
        let c = (0..n)
            .map(|k| self.c.get(k).copied().unwrap_or(0) + o.c.get(k).copied().unwrap_or(0))
            .collect();
        Poly { c }.trimmed()
    }
}

/// Upper end of the last piece (beyond every value the analysis asks about).
const INF: i64 = 4 * MAX_SOLVE;

/// One piece of the symbol's range with every candidate's polynomial there.
#[derive(Clone, Debug)]
struct Piece {
    lo: i64,
    hi: i64,
    polys: Vec<Poly>,
}

/// `c` when `args` is exactly `{sym, c}`.
fn sym_const_pair(args: &[Expr], sym: &str) -> Option<i64> {
    match args {
        [a, b] if a.as_sym() == Some(sym) => b.as_const(),
        [a, b] if b.as_sym() == Some(sym) => a.as_const(),
        _ => None,
    }
}

/// Collects the constants `c` of `min/max(sym, c)` atoms in `e`; `None` if `sym` occurs in any other
/// atom (or a symbol other than `sym` remains).
fn breakpoints(e: &Expr, sym: &str, out: &mut Vec<i64>) -> Option<()> {
    for t in e.terms() {
        for (a, _) in &t.factors {
            match a {
                Atom::Sym(s) if s == sym => {}
                Atom::Min(args) | Atom::Max(args) => out.push(sym_const_pair(args, sym)?),
                _ => return None,
            }
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(c: &[i128]) -> Poly {
        Poly { c: c.to_vec() }.trimmed()
    }

    #[test]
    fn poly_roots_match_brute_force() {
        let cases: &[&[i128]] = &[
            &[-100, 1],
            &[-10_000, 0, 1],
            &[600, -50, 1],        // roots 20, 30: negative strictly between
            &[-1000, 300, -30, 1], // cubic with one real root near 4.9
            &[5, -3],
            &[0],
            &[7],
            &[-7],
            &[-2_000_000, 3, 2],
            &[2400, -70, 1], // roots 30, 40 (exact integers)
        ];
        for c in cases {
            let q = p(c);
            for (lo, hi) in [(1, 4999), (3, 25), (21, 35), (31, 4999)] {
                let want = (lo..=hi).filter(|&x| q.sign_at(x) < 0).max();
                assert_eq!(q.last_negative_in(lo, hi), want, "{c:?} on [{lo}, {hi}]");
                let want = (lo..=hi).find(|&x| q.sign_at(x) > 0);
                assert_eq!(q.first_positive_in(lo, hi), want, "{c:?} on [{lo}, {hi}]");
            }
        }
    }

    #[test]
    fn steps_group_by_shape() {
        let n = Expr::sym("N");
        let steps = vec![
            &n * 4 + 10,
            &n * 4 + 30,
            &n * 4 + 20,
            &n * &n + 1,
            Expr::int(5000),
        ];
        let f = PeakFormula::from_steps(&steps);
        let got: Vec<String> = f
            .candidates
            .iter()
            .map(|c| format!("{}@{}", c.expr, c.step))
            .collect();
        assert_eq!(got, vec!["4*N + 30@1", "N^2 + 1@3", "5000@4"]);
        let env = |v: i64| {
            [("N".to_string(), v)]
                .into_iter()
                .collect::<BTreeMap<_, _>>()
        };
        for v in [1, 10, 70, 71, 100] {
            let want = steps
                .iter()
                .map(|e| e.eval_map(&env(v)).unwrap())
                .max()
                .unwrap();
            let step = steps
                .iter()
                .position(|e| e.eval_map(&env(v)).unwrap() == want);
            assert_eq!(f.eval(&env(v)).unwrap(), (want, step), "N={v}");
        }
        let d = f.dominant("N", &BTreeMap::new()).unwrap().unwrap();
        assert_eq!(
            (d.expr.to_string(), d.from, d.exact),
            ("N^2 + 1".to_string(), 71, true)
        );
    }

    #[test]
    fn min_atoms_are_analysed_piecewise() {
        // 1000*min(N, 50) + 10*N vs 30*N + 400: the first wins up to N = 50 (and grows no more), the
        // second from then on: 30*N + 400 >= 50000 + 10*N  <=>  N >= 2480.
        let n = Expr::sym("N");
        let a = &(Expr::min(&n, &Expr::int(50)) * 1000) + &(&n * 10);
        let b = &(&n * 30) + 400;
        let steps = vec![a.clone(), b.clone()];
        let f = PeakFormula::from_steps(&steps);
        let d = f.dominant("N", &BTreeMap::new()).unwrap().unwrap();
        assert_eq!((d.step, d.from, d.exact), (1, 2480, true));
        let env = |v: i64| -> BTreeMap<String, i64> { [("N".to_string(), v)].into() };
        let peak = |v: i64| {
            steps
                .iter()
                .map(|e| e.eval_map(&env(v)).unwrap())
                .max()
                .unwrap() as u64
        };
        for budget in [900u64, 1010, 20_000, 49_999, 50_500, 60_000, 80_000] {
            let confirm = |e: &BTreeMap<String, i64>| Ok(Some(peak(e["N"])));
            match f
                .max_fitting("N", &BTreeMap::new(), budget, &confirm)
                .unwrap()
            {
                MaxFit::Value(v) => {
                    assert!(
                        (1..=v).all(|x| peak(x) <= budget) && peak(v + 1) > budget,
                        "budget {budget}: {v}"
                    )
                }
                MaxFit::None => assert!(peak(1) > budget, "budget {budget}"),
                MaxFit::Unbounded => unreachable!("budget {budget}"),
            }
        }
    }
}
