//! Symbolic integer expressions over named dims, kept in a canonical form so that equal sizes compare equal.
//!
//! An [`Expr`] is a sum of monomials with `i64` coefficients. A monomial is a sorted product of atoms raised to
//! powers; an atom is a symbol (every symbol is assumed to take integer values >= 1) or an opaque canonical
//! sub-expression: `a//b` (floor division), `a%b` (Python remainder), `max(..)` or `min(..)`.
//!
//! Contracts:
//! - Two expressions built from the same value by the supported rewrites have the same canonical form, so
//!   `==`, `Ord` and `Hash` work on values; the rewrites are sound for every assignment of symbols >= 1 under
//!   which no divisor evaluates to zero.
//! - Construction never panics. Arithmetic whose coefficients or powers leave `i64`/`u32` yields the
//!   *overflow* expression, which absorbs every later operation, prints as `<overflow>` and evaluates to
//!   [`EvalError::Overflow`].
//! - Terms are stored largest total degree first, so printing and [`Expr::terms`] follow that order.
//! - Method resolution: on an *owned* receiver `a.max(x)` resolves to `Ord::max(self, Expr)` (overridden
//!   here to the symbolic maximum, taking `x` by value); on a reference receiver it resolves to the inherent
//!   `Expr::max(&self, &Expr)`. `Expr::max(&a, &b)` works in every case.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

mod divide;
mod eval;
mod minmax;
mod parse;
mod poly;
mod prove;
#[cfg(test)]
mod tests;

pub use parse::ParseError;

/// A canonical symbolic integer expression. Cloning is cheap (constants are inline, the rest is shared).
///
/// `Ord` is a structural total order on canonical forms (for sorted containers), not a numeric order; use
/// [`Expr::prove_ge`] for numeric comparison. `Ord::max`/`Ord::min` are overridden to the symbolic
/// [`Expr::max`]/[`Expr::min`], so `a.max(b)` means the same on owned and borrowed receivers.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Expr(Repr);

impl Ord for Expr {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.cmp(&o.0)
    }

    /// The symbolic maximum (not necessarily one of the two arguments).
    fn max(self, o: Self) -> Self {
        Expr::max(&self, &o)
    }

    /// The symbolic minimum (not necessarily one of the two arguments).
    fn min(self, o: Self) -> Self {
        Expr::min(&self, &o)
    }
}

impl PartialOrd for Expr {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// Invariant: `Poly` never holds zero terms nor a single constant term; those are `Const`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Repr {
    Const(i64),
    /// Terms sorted by [`Mono`] order, monomials unique, coefficients nonzero.
    Poly(Arc<[(Mono, i64)]>),
}

/// A product of atoms with powers >= 1, sorted by atom, atoms unique. `degree` is the saturated sum of powers.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Mono {
    degree: u32,
    factors: Vec<(AtomRepr, u32)>,
}

impl Ord for Mono {
    /// Larger total degree first, then the factor lists lexicographically.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        o.degree
            .cmp(&self.degree)
            .then_with(|| self.factors.cmp(&o.factors))
    }
}

impl PartialOrd for Mono {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// Internal atom. Arguments of opaque atoms are themselves canonical; `Max`/`Min` arguments are sorted,
/// deduplicated, at least two, and contain no nested atom of the same kind.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum AtomRepr {
    Sym(Arc<str>),
    /// A symbol for a size made from the data (a count, an iteration number, a branch taken):
    /// at least 0, where a declared symbol is at least 1.
    Data(Arc<str>),
    FloorDiv(Arc<(Expr, Expr)>),
    Mod(Arc<(Expr, Expr)>),
    Max(Arc<[Expr]>),
    Min(Arc<[Expr]>),
    Overflow,
}

impl Mono {
    fn one() -> Mono {
        Mono {
            degree: 0,
            factors: Vec::new(),
        }
    }

    fn atom(a: AtomRepr) -> Mono {
        Mono {
            degree: 1,
            factors: vec![(a, 1)],
        }
    }

    /// `factors` must be sorted by atom with unique atoms and powers >= 1.
    fn from_factors(factors: Vec<(AtomRepr, u32)>) -> Mono {
        let degree = factors.iter().fold(0u32, |d, (_, p)| d.saturating_add(*p));
        Mono { degree, factors }
    }

    fn is_one(&self) -> bool {
        self.factors.is_empty()
    }

    /// The product of two monomials, or `None` when a power overflows `u32`.
    fn mul(&self, o: &Mono) -> Option<Mono> {
        if self.is_one() {
            return Some(o.clone());
        }
        if o.is_one() {
            return Some(self.clone());
        }
        let mut out = Vec::with_capacity(self.factors.len() + o.factors.len());
        let (mut i, mut j) = (0, 0);
        while i < self.factors.len() && j < o.factors.len() {
            let (a, p) = &self.factors[i];
            let (b, q) = &o.factors[j];
            match a.cmp(b) {
                std::cmp::Ordering::Less => {
                    out.push((a.clone(), *p));
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    out.push((b.clone(), *q));
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    out.push((a.clone(), p.checked_add(*q)?));
                    i += 1;
                    j += 1;
                }
            }
        }
        out.extend(self.factors[i..].iter().cloned());
        out.extend(o.factors[j..].iter().cloned());
        Some(Mono::from_factors(out))
    }

    /// `self / o` when `o` divides `self` (every atom of `o` appears in `self` with at least its power).
    fn div(&self, o: &Mono) -> Option<Mono> {
        if o.is_one() {
            return Some(self.clone());
        }
        let mut out = Vec::with_capacity(self.factors.len());
        let mut j = 0;
        for (a, p) in &self.factors {
            if j < o.factors.len() && o.factors[j].0 == *a {
                let q = o.factors[j].1;
                if q > *p {
                    return None;
                }
                if q < *p {
                    out.push((a.clone(), p - q));
                }
                j += 1;
            } else if j < o.factors.len() && o.factors[j].0 < *a {
                return None;
            } else {
                out.push((a.clone(), *p));
            }
        }
        if j < o.factors.len() {
            return None;
        }
        Some(Mono::from_factors(out))
    }
}

/// Why [`Expr::eval`] could not produce a value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    #[error("unbound symbol `{0}`")]
    UnboundSymbol(String),
    #[error("division by zero")]
    DivByZero,
    #[error("integer overflow")]
    Overflow,
}

/// Public view of one factor of a monomial: a symbol or an opaque non-polynomial sub-expression.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Atom {
    Sym(String),
    /// `a // b` with Python floor semantics.
    FloorDiv(Expr, Expr),
    /// `a % b` with Python semantics (the result has the sign of `b`).
    Mod(Expr, Expr),
    /// Maximum of at least two canonical arguments, sorted.
    Max(Vec<Expr>),
    /// Minimum of at least two canonical arguments, sorted.
    Min(Vec<Expr>),
    /// The absorbing result of arithmetic that left `i64`.
    Overflow,
}

/// Public view of one monomial: `coeff * prod(atom^power)`. An empty `factors` is the constant term.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Term {
    pub coeff: i64,
    pub factors: Vec<(Atom, u32)>,
}

impl Atom {
    fn from_repr(a: &AtomRepr) -> Atom {
        match a {
            AtomRepr::Sym(s) | AtomRepr::Data(s) => Atom::Sym(s.to_string()),
            AtomRepr::FloorDiv(p) => Atom::FloorDiv(p.0.clone(), p.1.clone()),
            AtomRepr::Mod(p) => Atom::Mod(p.0.clone(), p.1.clone()),
            AtomRepr::Max(xs) => Atom::Max(xs.to_vec()),
            AtomRepr::Min(xs) => Atom::Min(xs.to_vec()),
            AtomRepr::Overflow => Atom::Overflow,
        }
    }

    /// The atom as an expression, re-canonicalized.
    pub fn to_expr(&self) -> Expr {
        match self {
            Atom::Sym(s) => Expr::sym(s),
            Atom::FloorDiv(a, b) => a.floor_div(b),
            Atom::Mod(a, b) => a.rem(b),
            Atom::Max(xs) => Expr::max_of(xs).unwrap_or_else(Expr::zero),
            Atom::Min(xs) => Expr::min_of(xs).unwrap_or_else(Expr::zero),
            Atom::Overflow => Expr::overflow(),
        }
    }
}

impl Term {
    /// The term as an expression, re-canonicalized.
    pub fn to_expr(&self) -> Expr {
        let mut e = Expr::int(self.coeff);
        for (a, p) in &self.factors {
            e = &e * &a.to_expr().pow(*p);
        }
        e
    }
}

/// What a declared `dim_param` stands for. A name is a symbol of its own; an expression of other
/// symbols (torch's dynamo exporter names a dim it derived `256*h`, `s0 + 1` or `Max(1, s0)`) is
/// that expression, so `--dim h=4` sizes the input `[.., 256*h]`. A spelling made only of name
/// characters (letters, digits, `_ - . :`) is a name, whatever it would parse to (`batch-size`).
pub fn declared_dim(name: &str) -> Expr {
    let plain = name
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
    if plain {
        return Expr::sym(name);
    }
    name.replace("Max(", "max(")
        .replace("Min(", "min(")
        .parse::<Expr>()
        .unwrap_or_else(|_| Expr::sym(name))
}

/// Binds the symbols of a declared dim from a size an input has. A name takes the size (or must
/// agree with what another dim bound it to); an expression whose symbols are all bound must equal
/// the size, and one with a single unbound symbol in which it is affine (`256*h`, `s0 + 1`) is
/// solved for it. Declared names are best bound first (see [`bind_declared_dims`]).
pub fn bind_declared_dim(
    name: &str,
    size: i64,
    dims: &mut BTreeMap<String, i64>,
) -> Result<(), String> {
    let e = declared_dim(name);
    let unbound: Vec<String> = e
        .symbols()
        .into_iter()
        .filter(|s| !dims.contains_key(s))
        .collect();
    let at = |v: Option<(&str, i64)>| {
        e.eval(&|s: &str| match v {
            Some((n, x)) if n == s => Some(x),
            _ => dims.get(s).copied(),
        })
    };
    match unbound.as_slice() {
        [] => match at(None) {
            Ok(v) if v == size => Ok(()),
            Ok(v) => Err(format!(
                "is {size} but {name} = {v} at the other inputs' sizes"
            )),
            Err(err) => Err(format!("{name}: {err}")),
        },
        [s] => {
            let (f0, f1) = (at(Some((s, 0))), at(Some((s, 1))));
            let solved = match (f0, f1) {
                (Ok(b), Ok(ab)) if ab != b && (size - b) % (ab - b) == 0 => {
                    Some((size - b) / (ab - b))
                }
                _ => None,
            };
            match solved {
                Some(x) if x >= 1 && at(Some((s, x))) == Ok(size) => {
                    dims.insert(s.clone(), x);
                    Ok(())
                }
                _ => Err(format!("is {size}, which no {s} >= 1 gives as {name}")),
            }
        }
        _ => Err(format!(
            "is {size}, but {name} has several symbols no other input sizes"
        )),
    }
}

/// Whether a declared `dim_param` is a plain name (a symbol of its own), not an exporter's
/// expression of names (see [`declared_dim`]).
pub fn is_declared_name(p: &str) -> bool {
    declared_dim(p).as_sym() == Some(p)
}

/// [`bind_declared_dim`] over `(declared name, size)` pairs: the names first, then the
/// expressions (which may read them). Every pair that can be bound is; the first failure is
/// returned with its pair's index.
pub fn bind_declared_dims(
    pairs: &[(&str, i64)],
    dims: &mut BTreeMap<String, i64>,
) -> Result<(), (usize, String)> {
    let mut first = None;
    for pass_names in [true, false] {
        for (i, &(p, size)) in pairs.iter().enumerate() {
            if is_declared_name(p) == pass_names {
                if let Err(e) = bind_declared_dim(p, size, dims) {
                    first.get_or_insert((i, e));
                }
            }
        }
    }
    first.map_or(Ok(()), Err)
}

impl Expr {
    /// The integer constant `v`.
    pub fn int(v: i64) -> Expr {
        Expr(Repr::Const(v))
    }

    /// The symbol `name`, assumed to take values >= 1.
    pub fn sym(name: &str) -> Expr {
        Expr::from_atom(AtomRepr::Sym(Arc::from(name)))
    }

    /// The name, when this is a lone symbol for a size made from the data.
    pub fn as_data_sym(&self) -> Option<&str> {
        match self.single_atom() {
            Some(AtomRepr::Data(s)) => Some(s),
            _ => None,
        }
    }

    /// A symbol for a size made from the data (see `AtomRepr::Data`): at least 0, so no proof
    /// takes it to be positive (a count of zero, an empty selection).
    pub fn data_sym(name: &str) -> Expr {
        Expr::from_atom(AtomRepr::Data(Arc::from(name)))
    }

    pub fn zero() -> Expr {
        Expr::int(0)
    }

    pub fn one() -> Expr {
        Expr::int(1)
    }

    /// The absorbing expression produced when arithmetic leaves `i64`; it evaluates to `EvalError::Overflow`.
    pub fn overflow() -> Expr {
        Expr::from_atom(AtomRepr::Overflow)
    }

    /// True for the absorbing overflow expression.
    pub fn is_overflow(&self) -> bool {
        matches!(self.single_atom(), Some(AtomRepr::Overflow))
    }

    pub fn as_const(&self) -> Option<i64> {
        match self.0 {
            Repr::Const(c) => Some(c),
            Repr::Poly(_) => None,
        }
    }

    pub fn is_const(&self) -> bool {
        matches!(self.0, Repr::Const(_))
    }

    pub fn is_zero(&self) -> bool {
        matches!(self.0, Repr::Const(0))
    }

    /// `Some(name)` when the expression is exactly one symbol (coefficient 1, power 1).
    pub fn as_sym(&self) -> Option<&str> {
        match self.single_atom() {
            Some(AtomRepr::Sym(s) | AtomRepr::Data(s)) => Some(s),
            _ => None,
        }
    }

    /// True when no atom is a floor division, remainder, max, min or overflow.
    pub fn is_polynomial(&self) -> bool {
        self.terms_cow().iter().all(|(m, _)| {
            m.factors
                .iter()
                .all(|(a, _)| matches!(a, AtomRepr::Sym(_) | AtomRepr::Data(_)))
        })
    }

    /// The polynomial view, largest total degree first; the constant term, if nonzero, comes last.
    pub fn terms(&self) -> Vec<Term> {
        self.terms_cow()
            .iter()
            .map(|(m, c)| Term {
                coeff: *c,
                factors: m
                    .factors
                    .iter()
                    .map(|(a, p)| (Atom::from_repr(a), *p))
                    .collect(),
            })
            .collect()
    }

    /// The highest power of `sym` over all terms (0 when absent), or `None` when `sym` occurs inside an
    /// opaque atom.
    pub fn degree_in(&self, sym: &str) -> Option<u32> {
        let mut deg = 0;
        for (m, _) in self.terms_cow().iter() {
            for (a, p) in &m.factors {
                match a {
                    AtomRepr::Sym(s) | AtomRepr::Data(s) if &**s == sym => deg = deg.max(*p),
                    AtomRepr::Sym(_) | AtomRepr::Data(_) | AtomRepr::Overflow => {}
                    _ => {
                        if Expr::from_atom(a.clone()).symbols().contains(sym) {
                            return None;
                        }
                    }
                }
            }
        }
        Some(deg)
    }

    /// `self` raised to the power `p` (`x^0 == 1`).
    pub fn pow(&self, p: u32) -> Expr {
        let mut result = Expr::one();
        let mut base = self.clone();
        let mut e = p;
        while e > 0 {
            if e & 1 == 1 {
                result = &result * &base;
            }
            e >>= 1;
            if e > 0 {
                base = &base * &base;
            }
        }
        result
    }

    fn from_atom(a: AtomRepr) -> Expr {
        Expr(Repr::Poly(Arc::from(vec![(Mono::atom(a), 1)])))
    }

    /// Builds from terms that are sorted, unique and nonzero.
    fn from_sorted(terms: Vec<(Mono, i64)>) -> Expr {
        match terms.len() {
            0 => Expr::zero(),
            1 if terms[0].0.is_one() => Expr::int(terms[0].1),
            _ => Expr(Repr::Poly(Arc::from(terms))),
        }
    }

    /// Builds from arbitrary terms: sorts, merges equal monomials and drops zero coefficients.
    fn from_unsorted(mut terms: Vec<(Mono, i64)>) -> Expr {
        terms.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(Mono, i64)> = Vec::with_capacity(terms.len());
        for (m, c) in terms {
            match out.last_mut() {
                Some(last) if last.0 == m => match last.1.checked_add(c) {
                    Some(s) => last.1 = s,
                    None => return Expr::overflow(),
                },
                _ => out.push((m, c)),
            }
        }
        out.retain(|(_, c)| *c != 0);
        Expr::from_sorted(out)
    }

    /// The terms as a slice; a nonzero constant becomes one term with the empty monomial.
    fn terms_cow(&self) -> Cow<'_, [(Mono, i64)]> {
        match &self.0 {
            Repr::Const(0) => Cow::Borrowed(&[]),
            Repr::Const(c) => Cow::Owned(vec![(Mono::one(), *c)]),
            Repr::Poly(ts) => Cow::Borrowed(ts),
        }
    }

    /// The atom when the expression is exactly `1 * atom^1`.
    fn single_atom(&self) -> Option<&AtomRepr> {
        match &self.0 {
            Repr::Poly(ts) if ts.len() == 1 && ts[0].1 == 1 => match ts[0].0.factors.as_slice() {
                [(a, 1)] => Some(a),
                _ => None,
            },
            _ => None,
        }
    }
}

impl Default for Expr {
    fn default() -> Self {
        Expr::zero()
    }
}

impl From<i64> for Expr {
    fn from(v: i64) -> Self {
        Expr::int(v)
    }
}

impl From<i32> for Expr {
    fn from(v: i32) -> Self {
        Expr::int(i64::from(v))
    }
}

impl From<u32> for Expr {
    fn from(v: u32) -> Self {
        Expr::int(i64::from(v))
    }
}

/// Values above `i64::MAX` become the overflow expression.
impl From<usize> for Expr {
    fn from(v: usize) -> Self {
        i64::try_from(v).map_or_else(|_| Expr::overflow(), Expr::int)
    }
}

/// Values above `i64::MAX` become the overflow expression.
impl From<u64> for Expr {
    fn from(v: u64) -> Self {
        i64::try_from(v).map_or_else(|_| Expr::overflow(), Expr::int)
    }
}

impl From<&Atom> for Expr {
    fn from(a: &Atom) -> Self {
        a.to_expr()
    }
}

/// True when `e` prints without parentheses as an operand of `//` or `%`.
fn is_simple_operand(e: &Expr) -> bool {
    match &e.0 {
        Repr::Const(c) => *c >= 0,
        Repr::Poly(_) => matches!(
            e.single_atom(),
            Some(
                AtomRepr::Sym(_)
                    | AtomRepr::Data(_)
                    | AtomRepr::Max(_)
                    | AtomRepr::Min(_)
                    | AtomRepr::Overflow
            )
        ),
    }
}

fn fmt_operand(f: &mut fmt::Formatter<'_>, e: &Expr) -> fmt::Result {
    if is_simple_operand(e) {
        write!(f, "{e}")
    } else {
        write!(f, "({e})")
    }
}

/// Writes an atom; floor divisions and remainders get parentheses unless `bare`.
fn fmt_atom(f: &mut fmt::Formatter<'_>, a: &AtomRepr, bare: bool) -> fmt::Result {
    match a {
        AtomRepr::Sym(s) | AtomRepr::Data(s) => f.write_str(s),
        AtomRepr::Overflow => f.write_str("<overflow>"),
        AtomRepr::FloorDiv(p) | AtomRepr::Mod(p) => {
            let op = if matches!(a, AtomRepr::FloorDiv(_)) {
                "//"
            } else {
                "%"
            };
            if !bare {
                f.write_str("(")?;
            }
            fmt_operand(f, &p.0)?;
            f.write_str(op)?;
            fmt_operand(f, &p.1)?;
            if !bare {
                f.write_str(")")?;
            }
            Ok(())
        }
        AtomRepr::Max(xs) | AtomRepr::Min(xs) => {
            f.write_str(if matches!(a, AtomRepr::Max(_)) {
                "max("
            } else {
                "min("
            })?;
            // Constants are printed last for readability; the stored order is unchanged.
            let ordered = xs
                .iter()
                .filter(|x| !x.is_const())
                .chain(xs.iter().filter(|x| x.is_const()));
            for (i, x) in ordered.enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{x}")?;
            }
            f.write_str(")")
        }
    }
}

/// Prints `2176*N^2 + 64*N + 12`, `N*S`, `(N + 1)//2`, `max(N, S)`, `N - 3`. The output parses back
/// (via `str::parse`) to the same expression whenever every symbol name is an identifier.
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ts = match &self.0 {
            Repr::Const(c) => return write!(f, "{c}"),
            Repr::Poly(ts) => ts,
        };
        for (i, (m, c)) in ts.iter().enumerate() {
            let neg = *c < 0;
            let mag = c.unsigned_abs();
            if i == 0 {
                if neg {
                    f.write_str("-")?;
                }
            } else {
                f.write_str(if neg { " - " } else { " + " })?;
            }
            if m.is_one() {
                write!(f, "{mag}")?;
                continue;
            }
            let lone = mag == 1 && m.factors.len() == 1 && !(i == 0 && neg);
            if mag != 1 {
                write!(f, "{mag}*")?;
            }
            for (j, (a, p)) in m.factors.iter().enumerate() {
                if j > 0 {
                    f.write_str("*")?;
                }
                fmt_atom(f, a, lone && *p == 1)?;
                if *p > 1 {
                    write!(f, "^{p}")?;
                }
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Expr({self})")
    }
}

/// Serializes as the display string.
impl serde::Serialize for Expr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

macro_rules! binop {
    ($Tr:ident, $m:ident, $ATr:ident, $am:ident, $f:path) => {
        impl std::ops::$Tr<Expr> for Expr {
            type Output = Expr;
            fn $m(self, o: Expr) -> Expr {
                $f(&self, &o)
            }
        }
        impl std::ops::$Tr<&Expr> for Expr {
            type Output = Expr;
            fn $m(self, o: &Expr) -> Expr {
                $f(&self, o)
            }
        }
        impl std::ops::$Tr<Expr> for &Expr {
            type Output = Expr;
            fn $m(self, o: Expr) -> Expr {
                $f(self, &o)
            }
        }
        impl std::ops::$Tr<&Expr> for &Expr {
            type Output = Expr;
            fn $m(self, o: &Expr) -> Expr {
                $f(self, o)
            }
        }
        impl std::ops::$Tr<i64> for Expr {
            type Output = Expr;
            fn $m(self, o: i64) -> Expr {
                $f(&self, &Expr::int(o))
            }
        }
        impl std::ops::$Tr<i64> for &Expr {
            type Output = Expr;
            fn $m(self, o: i64) -> Expr {
                $f(self, &Expr::int(o))
            }
        }
        impl std::ops::$Tr<Expr> for i64 {
            type Output = Expr;
            fn $m(self, o: Expr) -> Expr {
                $f(&Expr::int(self), &o)
            }
        }
        impl std::ops::$Tr<&Expr> for i64 {
            type Output = Expr;
            fn $m(self, o: &Expr) -> Expr {
                $f(&Expr::int(self), o)
            }
        }
        impl std::ops::$ATr<Expr> for Expr {
            fn $am(&mut self, o: Expr) {
                *self = $f(self, &o);
            }
        }
        impl std::ops::$ATr<&Expr> for Expr {
            fn $am(&mut self, o: &Expr) {
                *self = $f(self, o);
            }
        }
        impl std::ops::$ATr<i64> for Expr {
            fn $am(&mut self, o: i64) {
                *self = $f(self, &Expr::int(o));
            }
        }
    };
}

binop!(Add, add, AddAssign, add_assign, poly::add);
binop!(Sub, sub, SubAssign, sub_assign, poly::sub);
binop!(Mul, mul, MulAssign, mul_assign, poly::mul);

impl std::ops::Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        poly::neg(&self)
    }
}

impl std::ops::Neg for &Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        poly::neg(self)
    }
}

impl std::iter::Sum<Expr> for Expr {
    fn sum<I: Iterator<Item = Expr>>(it: I) -> Expr {
        let v: Vec<Expr> = it.collect();
        poly::sum(v.iter())
    }
}

impl<'a> std::iter::Sum<&'a Expr> for Expr {
    fn sum<I: Iterator<Item = &'a Expr>>(it: I) -> Expr {
        poly::sum(it)
    }
}

impl std::iter::Product<Expr> for Expr {
    fn product<I: Iterator<Item = Expr>>(it: I) -> Expr {
        it.fold(Expr::one(), |acc, x| poly::mul(&acc, &x))
    }
}

impl<'a> std::iter::Product<&'a Expr> for Expr {
    fn product<I: Iterator<Item = &'a Expr>>(it: I) -> Expr {
        it.fold(Expr::one(), |acc, x| poly::mul(&acc, x))
    }
}

impl Expr {
    /// The sum of all items (0 when empty), merged in one pass.
    pub fn sum<'a>(it: impl IntoIterator<Item = &'a Expr>) -> Expr {
        poly::sum(it.into_iter())
    }

    /// The product of all items (1 when empty).
    pub fn product<'a>(it: impl IntoIterator<Item = &'a Expr>) -> Expr {
        it.into_iter()
            .fold(Expr::one(), |acc, x| poly::mul(&acc, x))
    }

    /// All symbol names, including those inside opaque atoms.
    pub fn symbols(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        self.collect_symbols(&mut out);
        out
    }

    fn collect_symbols(&self, out: &mut BTreeSet<String>) {
        for (m, _) in self.terms_cow().iter() {
            for (a, _) in &m.factors {
                match a {
                    AtomRepr::Sym(s) | AtomRepr::Data(s) => {
                        if !out.contains(&**s) {
                            out.insert(s.to_string());
                        }
                    }
                    AtomRepr::FloorDiv(p) | AtomRepr::Mod(p) => {
                        p.0.collect_symbols(out);
                        p.1.collect_symbols(out);
                    }
                    AtomRepr::Max(xs) | AtomRepr::Min(xs) => {
                        xs.iter().for_each(|x| x.collect_symbols(out))
                    }
                    AtomRepr::Overflow => {}
                }
            }
        }
    }

    /// Replaces the symbol `name` by `by` everywhere (inside opaque atoms too) and re-canonicalizes.
    pub fn substitute(&self, name: &str, by: &Expr) -> Expr {
        self.substitute_with(&|s: &str| if s == name { Some(by.clone()) } else { None })
    }

    /// Simultaneous substitution of every symbol that appears as a key of `map`.
    pub fn substitute_map(&self, map: &BTreeMap<String, Expr>) -> Expr {
        self.substitute_with(&|s: &str| map.get(s).cloned())
    }

    /// Simultaneous substitution: every symbol `s` with `f(s) == Some(e)` is replaced by `e`.
    pub fn substitute_with(&self, f: &dyn Fn(&str) -> Option<Expr>) -> Expr {
        if self.is_const() || self.is_overflow() {
            return self.clone();
        }
        if self.symbols().iter().all(|s| f(s).is_none()) {
            return self.clone();
        }
        let mut parts = Vec::new();
        for (m, c) in self.terms_cow().iter() {
            let mut t = Expr::int(*c);
            for (a, p) in &m.factors {
                let ae = match a {
                    AtomRepr::Sym(s) | AtomRepr::Data(s) => {
                        f(s).unwrap_or_else(|| Expr::from_atom(a.clone()))
                    }
                    AtomRepr::FloorDiv(q) => {
                        q.0.substitute_with(f).floor_div(&q.1.substitute_with(f))
                    }
                    AtomRepr::Mod(q) => q.0.substitute_with(f).rem(&q.1.substitute_with(f)),
                    AtomRepr::Max(xs) => {
                        let v: Vec<Expr> = xs.iter().map(|x| x.substitute_with(f)).collect();
                        Expr::max_of(&v).unwrap_or_else(Expr::zero)
                    }
                    AtomRepr::Min(xs) => {
                        let v: Vec<Expr> = xs.iter().map(|x| x.substitute_with(f)).collect();
                        Expr::min_of(&v).unwrap_or_else(Expr::zero)
                    }
                    AtomRepr::Overflow => Expr::overflow(),
                };
                t = &t * &ae.pow(*p);
            }
            parts.push(t);
        }
        Expr::sum(&parts)
    }
}
