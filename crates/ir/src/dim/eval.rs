//! Concrete evaluation with checked `i64` arithmetic and Python floor semantics.

use std::collections::BTreeMap;

use super::{AtomRepr, EvalError, Expr, Repr};

/// Python `a // b`: the quotient rounded toward negative infinity.
pub(super) fn py_floor_div(a: i64, b: i64) -> Result<i64, EvalError> {
    if b == 0 {
        return Err(EvalError::DivByZero);
    }
    let q = a.checked_div(b).ok_or(EvalError::Overflow)?;
    let r = a.checked_rem(b).ok_or(EvalError::Overflow)?;
    if r != 0 && ((r < 0) != (b < 0)) {
        q.checked_sub(1).ok_or(EvalError::Overflow)
    } else {
        Ok(q)
    }
}

/// Python `a % b`: zero or the sign of `b`, with `a == b * (a // b) + a % b`.
pub(super) fn py_mod(a: i64, b: i64) -> Result<i64, EvalError> {
    if b == 0 {
        return Err(EvalError::DivByZero);
    }
    if b == -1 {
        return Ok(0);
    }
    let r = a.checked_rem(b).ok_or(EvalError::Overflow)?;
    if r != 0 && ((r < 0) != (b < 0)) {
        // r and b have opposite signs, so the sum cannot overflow.
        r.checked_add(b).ok_or(EvalError::Overflow)
    } else {
        Ok(r)
    }
}

impl Expr {
    /// Evaluates with symbol values from `env`. Values are used as given (the >= 1 assumption that the
    /// canonical form relies on is not checked). Errors: an unbound symbol, a zero divisor, or `i64` overflow
    /// anywhere, including the overflow expression itself.
    pub fn eval(&self, env: &dyn Fn(&str) -> Option<i64>) -> Result<i64, EvalError> {
        let ts = match &self.0 {
            Repr::Const(c) => return Ok(*c),
            Repr::Poly(ts) => ts,
        };
        let mut total: i64 = 0;
        for (m, c) in ts.iter() {
            let mut t = *c;
            for (a, p) in &m.factors {
                let v = eval_atom(a, env)?;
                let vp = v.checked_pow(*p).ok_or(EvalError::Overflow)?;
                t = t.checked_mul(vp).ok_or(EvalError::Overflow)?;
            }
            total = total.checked_add(t).ok_or(EvalError::Overflow)?;
        }
        Ok(total)
    }

    /// [`Expr::eval`] with symbol values from a map.
    pub fn eval_map(&self, env: &BTreeMap<String, i64>) -> Result<i64, EvalError> {
        self.eval(&|s: &str| env.get(s).copied())
    }
}

fn eval_atom(a: &AtomRepr, env: &dyn Fn(&str) -> Option<i64>) -> Result<i64, EvalError> {
    match a {
        AtomRepr::Sym(s) | AtomRepr::Data(s) => {
            env(s).ok_or_else(|| EvalError::UnboundSymbol(s.to_string()))
        }
        AtomRepr::FloorDiv(p) => py_floor_div(p.0.eval(env)?, p.1.eval(env)?),
        AtomRepr::Mod(p) => py_mod(p.0.eval(env)?, p.1.eval(env)?),
        AtomRepr::Max(xs) | AtomRepr::Min(xs) => {
            let is_max = matches!(a, AtomRepr::Max(_));
            let mut best: Option<i64> = None;
            for x in xs.iter() {
                let v = x.eval(env)?;
                best = Some(match best {
                    None => v,
                    Some(b) if is_max => b.max(v),
                    Some(b) => b.min(v),
                });
            }
            best.ok_or(EvalError::Overflow)
        }
        AtomRepr::Overflow => Err(EvalError::Overflow),
    }
}
