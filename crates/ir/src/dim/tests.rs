//! Unit and property tests for symbolic expressions.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn n() -> Expr {
    Expr::sym("N")
}
fn m() -> Expr {
    Expr::sym("M")
}
fn k() -> Expr {
    Expr::sym("K")
}
fn p(s: &str) -> Expr {
    match s.parse::<Expr>() {
        Ok(e) => e,
        Err(err) => panic!("test input `{s}` does not parse: {err}"),
    }
}
fn at(e: &Expr, nv: i64, mv: i64) -> Result<i64, EvalError> {
    e.eval(&|s: &str| match s {
        "N" => Some(nv),
        "M" => Some(mv),
        _ => None,
    })
}

#[test]
fn dim_constant_folding() {
    assert_eq!(Expr::int(3) + Expr::int(4), Expr::int(7));
    assert_eq!((Expr::int(3) * 4 - 2).as_const(), Some(10));
    assert_eq!(Expr::int(-7).floor_div(&Expr::int(2)), Expr::int(-4));
    assert_eq!(Expr::int(-7).rem(&Expr::int(2)), Expr::int(1));
    assert_eq!(Expr::int(7).rem(&Expr::int(-2)), Expr::int(-1));
    assert_eq!(Expr::int(7).ceil_div(&Expr::int(2)), Expr::int(4));
    assert_eq!(Expr::max(&Expr::int(3), &Expr::int(9)), Expr::int(9));
    assert_eq!(Expr::min(&Expr::int(3), &Expr::int(9)), Expr::int(3));
    #[allow(clippy::erasing_op)]
    let zeroed = n() * 0 + 5;
    assert_eq!(zeroed.as_const(), Some(5));
    assert!(Expr::int(5).is_const() && !n().is_const());
    assert_eq!(Expr::from(7usize), Expr::int(7));
    assert_eq!(Expr::from(7i32), Expr::int(7));
}

#[test]
fn dim_floor_div_rules() {
    assert_eq!((n() * 6 + 4).floor_div(&Expr::int(2)), n() * 3 + 2);
    assert_eq!((&n() * &k()).floor_div(&k()), n());
    assert_eq!((n() * 5).floor_div(&Expr::int(5)), n());
    assert_eq!(n().floor_div(&Expr::one()), n());
    assert_eq!(n().floor_div(&Expr::int(-1)), -n());
    let q = (n() * 4).floor_div(&Expr::int(8));
    assert!(!q.is_polynomial());
    assert_eq!(q, n().floor_div(&Expr::int(2)));
    let back = &q * 8;
    assert_ne!(back, n() * 4);
    assert_eq!(at(&back, 3, 1), Ok(8));
    assert_eq!(
        (n() - 1).floor_div(&Expr::int(2)),
        (n() + 1).floor_div(&Expr::int(2)) - 1
    );
    assert_eq!(
        n().floor_div(&Expr::int(2)).floor_div(&Expr::int(3)),
        n().floor_div(&Expr::int(6))
    );
    assert_eq!(n().floor_div(&(n() + 1)), Expr::zero());
    assert_eq!((n() * n() + n() * 2 + 1).floor_div(&(n() + 1)), n() + 1);
    assert_eq!(Expr::zero().floor_div(&n()), Expr::zero());
}

#[test]
fn dim_rem_and_ceil_rules() {
    assert_eq!((&n() * &k()).rem(&k()), Expr::zero());
    assert_eq!((n() * 6).rem(&Expr::int(3)), Expr::zero());
    assert_eq!((n() + 3).rem(&Expr::int(2)), (n() + 1).rem(&Expr::int(2)));
    assert_eq!(n().rem(&(n() + 1)), n());
    assert_eq!(
        n().ceil_div(&Expr::int(2)),
        (n() + 1).floor_div(&Expr::int(2))
    );
    assert_eq!(n().ceil_div(&Expr::int(2)).to_string(), "(N + 1)//2");
    for v in 1..20 {
        assert_eq!(at(&n().ceil_div(&Expr::int(3)), v, 1), Ok((v + 2) / 3));
        assert_eq!(
            at(&(n() * 7 + 3).rem(&Expr::int(4)), v, 1),
            Ok((7 * v + 3) % 4)
        );
    }
}

#[test]
fn dim_division_by_zero_is_an_atom() {
    let e = n().floor_div(&Expr::zero());
    assert_eq!(at(&e, 3, 1), Err(EvalError::DivByZero));
    assert_eq!(at(&n().rem(&Expr::zero()), 3, 1), Err(EvalError::DivByZero));
    assert_eq!(
        at(&Expr::int(4).floor_div(&Expr::zero()), 3, 1),
        Err(EvalError::DivByZero)
    );
}

fn mx(a: &Expr, b: &Expr) -> Expr {
    Expr::max(a, b)
}
fn mn(a: &Expr, b: &Expr) -> Expr {
    Expr::min(a, b)
}

#[test]
fn dim_max_min_rules() {
    assert_eq!(mx(&n(), &Expr::one()), n());
    assert_eq!(mn(&n(), &Expr::one()), Expr::one());
    assert_eq!(mx(&n(), &(n() + 1)), n() + 1);
    assert_eq!(mx(&(&n() * &m()), &n()), &n() * &m());
    let a = mx(&n(), &mx(&m(), &k()));
    let b = Expr::max_of([&n(), &m(), &k()]).unwrap_or_default();
    assert_eq!(a, b);
    assert_eq!(a, mx(&mx(&k(), &m()), &n()));
    assert_eq!(mx(&n(), &m()), mx(&m(), &n()));
    assert_eq!(
        mn(&n(), &mn(&m(), &k())),
        Expr::min_of([&k(), &m(), &n()]).unwrap_or_default()
    );
    assert_eq!(mx(&n(), &m()).to_string(), "max(M, N)");
    assert_eq!(mx(&n(), &Expr::int(3)).to_string(), "max(N, 3)");
    assert_eq!(Expr::max_of([]), None);
    assert_eq!(mx(&mx(&n(), &m()), &n()), mx(&n(), &m()));
    assert_eq!(
        mx(&Expr::int(2), &mx(&n(), &Expr::int(5))),
        mx(&n(), &Expr::int(5))
    );
    assert_eq!(at(&mx(&n(), &m()), 3, 8), Ok(8));
    assert_eq!(at(&mn(&n(), &m()), 3, 8), Ok(3));
    let r = &n();
    assert_eq!(r.max(&m()), mx(&n(), &m()));
    assert_eq!(n().max(m()), mx(&n(), &m()));
    assert_eq!(n().min(Expr::one()), Expr::one());
    assert_eq!(std::cmp::max(n(), m()), mx(&n(), &m()));
}

#[test]
fn dim_polynomial_canonical_form() {
    assert_eq!(&n() * &m(), &m() * &n());
    assert_eq!(n() + n(), n() * 2);
    assert_eq!((n() + 1) * (n() + 1), &n() * &n() + n() * 2 + 1);
    assert_eq!(n() - n(), Expr::zero());
    assert_eq!((n() + m()) - m(), n());
    assert_eq!(Expr::sum([&n(), &m(), &n()]), n() * 2 + m());
    assert_eq!(Expr::product([&n(), &Expr::int(3), &n()]), n().pow(2) * 3);
    assert_eq!(Expr::product([]), Expr::one());
    assert_eq!(Expr::sum([]), Expr::zero());
    let mut acc = Expr::zero();
    acc += n();
    acc *= 3;
    acc -= &m();
    assert_eq!(acc, n() * 3 - m());
    assert_eq!(2 * n(), n() * 2);
}

#[test]
fn dim_accessors() {
    assert_eq!(n().as_sym(), Some("N"));
    assert_eq!((n() * 2).as_sym(), None);
    assert_eq!(Expr::int(4).as_sym(), None);
    let e = n().pow(2) * 3 + &n() * &m() + n().floor_div(&Expr::int(2)) + 7;
    let syms: Vec<String> = e.symbols().into_iter().collect();
    assert_eq!(syms, vec!["M".to_string(), "N".to_string()]);
    assert!(!e.is_polynomial());
    assert!((n().pow(2) + 1).is_polynomial());
    assert_eq!(e.degree_in("N"), None);
    assert_eq!(e.degree_in("M"), Some(1));
    assert_eq!((n().pow(3) + m()).degree_in("N"), Some(3));
    assert_eq!(m().degree_in("N"), Some(0));
    let ts = (n().pow(2) * 3 + n() - 4).terms();
    assert_eq!(ts.len(), 3);
    assert_eq!(
        ts[0],
        Term {
            coeff: 3,
            factors: vec![(Atom::Sym("N".into()), 2)]
        }
    );
    assert_eq!(
        ts[2],
        Term {
            coeff: -4,
            factors: vec![]
        }
    );
    let rebuilt = Expr::sum(&e.terms().iter().map(Term::to_expr).collect::<Vec<_>>());
    assert_eq!(rebuilt, e);
}

#[test]
fn dim_substitute_and_eval() {
    let e = (n() * 6 + m()).floor_div(&Expr::int(4)) + mx(&n(), &m());
    let s = e.substitute("M", &(n() * 2));
    assert_eq!(s, n() * 2 + n() * 2);
    assert_eq!(s.symbols().len(), 1);
    let same = e.substitute("Z", &Expr::int(3));
    assert_eq!(same, e);
    let mut env = BTreeMap::new();
    env.insert("N".to_string(), 5);
    env.insert("M".to_string(), 3);
    assert_eq!(e.eval_map(&env), Ok((30 + 3) / 4 + 5));
    assert_eq!(
        n().eval_map(&BTreeMap::new()),
        Err(EvalError::UnboundSymbol("N".into()))
    );
    let c = n().substitute("N", &Expr::int(4)).floor_div(&Expr::int(3));
    assert_eq!(c, Expr::int(1));
}

#[test]
fn dim_overflow_is_absorbing_and_never_panics() {
    let big = Expr::int(i64::MAX);
    assert!((&big + 1).is_overflow());
    assert!((&big * 2).is_overflow());
    assert!((-Expr::int(i64::MIN)).is_overflow());
    assert!(Expr::int(i64::MIN).floor_div(&Expr::int(-1)).is_overflow());
    let o = &n() * &big + n() * big.clone();
    assert!(o.is_overflow());
    assert!((&o - &o).is_overflow());
    assert_eq!(at(&o, 1, 1), Err(EvalError::Overflow));
    assert_eq!(o.to_string(), "<overflow>");
    assert_eq!(o.prove_ge(&Expr::zero()), None);
    assert!(n().pow(u32::MAX).pow(2).is_overflow());
    assert_eq!(at(&n().pow(40), 50, 1), Err(EvalError::Overflow));
    assert!(Expr::from(u64::MAX).is_overflow());
    assert_eq!(Expr::int(i64::MIN).rem(&Expr::int(-1)), Expr::zero());
}

#[test]
fn dim_prove_ge() {
    assert_eq!(n().prove_ge(&Expr::one()), Some(true));
    assert_eq!(n().prove_ge(&Expr::int(2)), None);
    assert_eq!(n().prove_ge(&(n() + 1)), Some(false));
    assert_eq!((&n() * &m()).prove_ge(&n()), Some(true));
    assert_eq!((n().pow(2) - n() * 2 + 1).prove_nonneg(), Some(true));
    assert_eq!((n().pow(2) - n() * 3 + 2).prove_nonneg(), None);
    assert_eq!((n().pow(2) * 3 - n() * 2).prove_positive(), Some(true));
    assert_eq!(mx(&n(), &m()).prove_ge(&m()), Some(true));
    assert_eq!(mn(&n(), &m()).prove_ge(&n()), None);
    assert_eq!(n().prove_ge(&mn(&n(), &m())), Some(true));
    assert_eq!(n().floor_div(&Expr::int(2)).prove_nonneg(), Some(true));
    assert_eq!(n().rem(&Expr::int(3)).prove_nonneg(), Some(true));
    assert_eq!((Expr::zero() - n()).prove_ge(&Expr::zero()), Some(false));
    assert_eq!((n() + 1).prove_gt(&n()), Some(true));
    assert_eq!(n().prove_eq(&(n() + 1)), Some(false));
    assert_eq!((n() - n()).prove_eq_const(0), Some(true));
    assert_eq!(m().prove_eq(&n()), None);
}

#[test]
fn dim_nonnegative_divisors_are_positive() {
    // A divisor proven `>= 0` is nonzero, hence positive: the quotient and remainder of
    // nonnegative operands are nonnegative.
    let q = n().floor_div(&Expr::int(4));
    assert_eq!(m().floor_div(&q).prove_nonneg(), Some(true));
    assert_eq!(m().rem(&q).prove_nonneg(), Some(true));
    assert_eq!((-m()).floor_div(&q).prove_nonneg(), None);
}

#[test]
fn dim_floor_div_cancels_common_atoms() {
    // `(m * (n//4)) // (n//4) == m` wherever the divisor is nonzero; likewise the remainder.
    let q = n().floor_div(&Expr::int(4));
    let r = m().rem(&Expr::int(3));
    assert_eq!((&m() * &q).floor_div(&q), m());
    assert_eq!((&(&m() * &q) * &r).floor_div(&(&q * &r)), m());
    assert_eq!(
        (&(&m() * &q) + &q).rem(&(&q * &Expr::int(2))),
        q.clone() * (m() + 1).rem(&Expr::int(2))
    );
    for (nv, mv) in [(4, 1), (9, 5), (17, 8)] {
        let e = (&(&m() * &q) + 1).floor_div(&q);
        assert_eq!(
            at(&e, nv, mv),
            Ok(mv + 1 / (nv / 4)),
            "at N={nv} M={mv}: {e}"
        );
    }
}

#[test]
fn dim_display() {
    assert_eq!(
        (n().pow(2) * 2176 + n() * 64 + 12).to_string(),
        "2176*N^2 + 64*N + 12"
    );
    assert_eq!((&n() * &Expr::sym("S")).to_string(), "N*S");
    assert_eq!((Expr::int(5) - n() * 3).to_string(), "-3*N + 5");
    assert_eq!((n() - 3).to_string(), "N - 3");
    assert_eq!((m() - n()).to_string(), "M - N");
    assert_eq!((-n().floor_div(&Expr::int(3))).to_string(), "-(N//3)");
    assert_eq!((n().floor_div(&Expr::int(3)) * 2).to_string(), "2*(N//3)");
    assert_eq!(n().floor_div(&(m() * 2)).to_string(), "N//(2*M)");
    assert_eq!(n().rem(&m()).to_string(), "N%M");
    assert_eq!(Expr::int(-4).to_string(), "-4");
    assert_eq!(format!("{:?}", n() + 1), "Expr(N + 1)");
}

#[test]
fn dim_parse_roundtrip_examples() {
    for s in [
        "2176*N^2 + 64*N + 12",
        "(N + 1)//2",
        "max(M, N) - min(N, 4)",
        "-(N//3) + N%M",
        "N//(2*M)",
    ] {
        let e = p(s);
        assert_eq!(e.to_string(), s);
        assert_eq!(p(&e.to_string()), e);
    }
    assert_eq!(p("(N+1)*(N+1)"), n().pow(2) + n() * 2 + 1);
    assert_eq!(p("-N^2"), -n().pow(2));
    assert!("N +".parse::<Expr>().is_err());
    assert!("99999999999999999999".parse::<Expr>().is_err());
    assert!("(".repeat(10_000).parse::<Expr>().is_err());
    assert!("(N+1)^100000".parse::<Expr>().is_err());
}

#[test]
fn dim_serialize_as_string() {
    let mut out = Vec::new();
    let r = serde::Serialize::serialize(&(n() * 2 + 1), &mut TestSer(&mut out));
    assert!(r.is_ok());
    assert_eq!(String::from_utf8_lossy(&out), "2*N + 1");
}

/// A minimal serializer that only accepts `collect_str`, enough to observe what `Expr` writes.
struct TestSer<'a>(&'a mut Vec<u8>);

#[derive(Debug)]
struct TestSerError;
impl std::fmt::Display for TestSerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("unsupported")
    }
}
impl std::error::Error for TestSerError {}
impl serde::ser::Error for TestSerError {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        TestSerError
    }
}

impl serde::Serializer for &mut TestSer<'_> {
    type Ok = ();
    type Error = TestSerError;
    type SerializeSeq = serde::ser::Impossible<(), TestSerError>;
    type SerializeTuple = serde::ser::Impossible<(), TestSerError>;
    type SerializeTupleStruct = serde::ser::Impossible<(), TestSerError>;
    type SerializeTupleVariant = serde::ser::Impossible<(), TestSerError>;
    type SerializeMap = serde::ser::Impossible<(), TestSerError>;
    type SerializeStruct = serde::ser::Impossible<(), TestSerError>;
    type SerializeStructVariant = serde::ser::Impossible<(), TestSerError>;
    fn serialize_str(self, v: &str) -> Result<(), TestSerError> {
        self.0.extend_from_slice(v.as_bytes());
        Ok(())
    }
    fn serialize_bool(self, _: bool) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_i8(self, _: i8) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_i16(self, _: i16) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_i32(self, _: i32) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_i64(self, _: i64) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_u8(self, _: u8) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_u16(self, _: u16) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_u32(self, _: u32) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_u64(self, _: u64) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_f32(self, _: f32) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_f64(self, _: f64) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_char(self, _: char) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_none(self) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_some<T: ?Sized + serde::Serialize>(self, _: &T) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_unit(self) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_newtype_struct<T: ?Sized + serde::Serialize>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_newtype_variant<T: ?Sized + serde::Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), TestSerError> {
        Err(TestSerError)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, TestSerError> {
        Err(TestSerError)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, TestSerError> {
        Err(TestSerError)
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, TestSerError> {
        Err(TestSerError)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, TestSerError> {
        Err(TestSerError)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, TestSerError> {
        Err(TestSerError)
    }
    fn serialize_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStruct, TestSerError> {
        Err(TestSerError)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, TestSerError> {
        Err(TestSerError)
    }
}

#[test]
fn dim_build_many_small_exprs() {
    let syms = [n(), m(), k()];
    let mut distinct = std::collections::BTreeSet::new();
    for i in 0..100_000i64 {
        let s = &syms[(i % 3) as usize];
        let e = s * s * 32 * 4 + (i % 7);
        if i < 21 {
            distinct.insert(e.clone());
        }
        assert!(!e.is_const());
    }
    assert_eq!(distinct.len(), 21);
}

/// A random expression tree, evaluated both directly (Python semantics) and through the canonical form.
#[derive(Clone, Debug)]
enum Tree {
    C(i64),
    N,
    M,
    Add(Box<Tree>, Box<Tree>),
    Sub(Box<Tree>, Box<Tree>),
    Mul(Box<Tree>, Box<Tree>),
    Neg(Box<Tree>),
    FloorDiv(Box<Tree>, Box<Tree>),
    CeilDiv(Box<Tree>, Box<Tree>),
    Mod(Box<Tree>, Box<Tree>),
    Max(Box<Tree>, Box<Tree>),
    Min(Box<Tree>, Box<Tree>),
}

fn tree() -> impl Strategy<Value = Tree> {
    let leaf = prop_oneof![(-6i64..8).prop_map(Tree::C), Just(Tree::N), Just(Tree::M)];
    leaf.prop_recursive(4, 24, 2, |inner| {
        let b = |t: Tree| Box::new(t);
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(move |(x, y)| Tree::Add(b(x), b(y))),
            (inner.clone(), inner.clone()).prop_map(move |(x, y)| Tree::Sub(b(x), b(y))),
            (inner.clone(), inner.clone()).prop_map(move |(x, y)| Tree::Mul(b(x), b(y))),
            inner.clone().prop_map(move |x| Tree::Neg(b(x))),
            (inner.clone(), inner.clone()).prop_map(move |(x, y)| Tree::FloorDiv(b(x), b(y))),
            (inner.clone(), inner.clone()).prop_map(move |(x, y)| Tree::CeilDiv(b(x), b(y))),
            (inner.clone(), inner.clone()).prop_map(move |(x, y)| Tree::Mod(b(x), b(y))),
            (inner.clone(), inner.clone()).prop_map(move |(x, y)| Tree::Max(b(x), b(y))),
            (inner.clone(), inner).prop_map(move |(x, y)| Tree::Min(b(x), b(y))),
        ]
    })
}

fn build(t: &Tree) -> Expr {
    match t {
        Tree::C(c) => Expr::int(*c),
        Tree::N => n(),
        Tree::M => m(),
        Tree::Add(x, y) => build(x) + build(y),
        Tree::Sub(x, y) => build(x) - build(y),
        Tree::Mul(x, y) => build(x) * build(y),
        Tree::Neg(x) => -build(x),
        Tree::FloorDiv(x, y) => build(x).floor_div(&build(y)),
        Tree::CeilDiv(x, y) => build(x).ceil_div(&build(y)),
        Tree::Mod(x, y) => build(x).rem(&build(y)),
        Tree::Max(x, y) => Expr::max(&build(x), &build(y)),
        Tree::Min(x, y) => Expr::min(&build(x), &build(y)),
    }
}

/// Direct evaluation; `None` on a zero divisor or overflow.
fn direct(t: &Tree, nv: i64, mv: i64) -> Option<i64> {
    let d = |x: &Tree| direct(x, nv, mv);
    match t {
        Tree::C(c) => Some(*c),
        Tree::N => Some(nv),
        Tree::M => Some(mv),
        Tree::Add(x, y) => d(x)?.checked_add(d(y)?),
        Tree::Sub(x, y) => d(x)?.checked_sub(d(y)?),
        Tree::Mul(x, y) => d(x)?.checked_mul(d(y)?),
        Tree::Neg(x) => d(x)?.checked_neg(),
        Tree::FloorDiv(x, y) => eval::py_floor_div(d(x)?, d(y)?).ok(),
        Tree::CeilDiv(x, y) => eval::py_floor_div(d(x)?.checked_neg()?, d(y)?)
            .ok()?
            .checked_neg(),
        Tree::Mod(x, y) => eval::py_mod(d(x)?, d(y)?).ok(),
        Tree::Max(x, y) => Some(d(x)?.max(d(y)?)),
        Tree::Min(x, y) => Some(d(x)?.min(d(y)?)),
    }
}

/// True when the tree has a divisor that evaluates to zero somewhere in `1..=8`^2; the canonical
/// rewrites assume nonzero divisors, so such trees are excluded from value comparisons.
fn has_zero_divisor_somewhere(t: &Tree) -> bool {
    (1..=8).any(|a| (1..=8).any(|b| direct(t, a, b).is_none()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn dim_prop_canonical_eval_matches_direct(t in tree(), nv in 1i64..50, mv in 1i64..50) {
        let e = build(&t);
        if let Some(v) = direct(&t, nv, mv) {
            match at(&e, nv, mv) {
                Ok(w) => prop_assert_eq!(w, v, "tree {:?} canon {}", t, e),
                Err(EvalError::Overflow) => {}
                Err(err) => prop_assert!(false, "tree {:?} canon {} failed: {}", t, e, err),
            }
        }
    }

    #[test]
    fn dim_prop_equal_forms_evaluate_equal(a in tree(), b in tree(), nv in 1i64..50, mv in 1i64..50) {
        let (ea, eb) = (build(&a), build(&b));
        if ea == eb {
            prop_assert_eq!(at(&ea, nv, mv), at(&eb, nv, mv));
            if let (Some(x), Some(y)) = (direct(&a, nv, mv), direct(&b, nv, mv)) {
                prop_assert_eq!(x, y, "{:?} and {:?} share form {}", a, b, ea);
            }
        }
        // Ring identities must produce identical canonical forms.
        prop_assert_eq!(&ea + &eb, &eb + &ea);
        prop_assert_eq!(&ea * &eb, &eb * &ea);
        prop_assert_eq!(&(&ea - &eb) + &eb, ea.clone());
        prop_assert_eq!(Expr::max(&ea, &eb), Expr::max(&eb, &ea));
        prop_assert_eq!(Expr::min(&ea, &eb), Expr::min(&eb, &ea));
    }

    #[test]
    fn dim_prop_prove_ge_never_lies(a in tree(), b in tree(), pts in proptest::collection::vec((1i64..50, 1i64..50), 6)) {
        let (ea, eb) = (build(&a), build(&b));
        prop_assume!(!has_zero_divisor_somewhere(&a) && !has_zero_divisor_somewhere(&b));
        let verdict = ea.prove_ge(&eb);
        let mut pts = pts;
        pts.push((1, 1));
        for (nv, mv) in pts {
            if let (Some(x), Some(y)) = (direct(&a, nv, mv), direct(&b, nv, mv)) {
                match verdict {
                    Some(true) => prop_assert!(x >= y, "claimed {} >= {} but {} < {} at N={} M={}", ea, eb, x, y, nv, mv),
                    Some(false) => prop_assert!(x < y, "claimed {} < {} but {} >= {} at N={} M={}", ea, eb, x, y, nv, mv),
                    None => {}
                }
            }
        }
    }

    #[test]
    fn dim_prop_display_parses_back(t in tree()) {
        // Division by a literal zero is left unsimplified and has no canonical form to round-trip.
        prop_assume!(!has_zero_divisor_somewhere(&t));
        let e = build(&t);
        let back = e.to_string().parse::<Expr>();
        prop_assert_eq!(back, Ok(e.clone()), "display {}", e);
    }
}

/// Bounds of nested `max`/`min` are remembered per atom: a clamp of a clamp of ... (a slice's
/// bounds, chunk after chunk) 40 deep is decided, where bounding each level afresh inside every
/// enclosing proof takes time exponential in the depth.
#[test]
fn deeply_nested_max_min_are_bounded_once_per_atom() {
    // Sizes made from the data are >= 0, not >= 1: every level's "positive?" fails and "nonneg?"
    // is asked next, so without the memo each level bounds the one inside it twice.
    let mut e = Expr::data_sym("D");
    for i in 0..40 {
        let (s, d) = (
            Expr::sym(&format!("S{i}")),
            Expr::data_sym(&format!("D{i}")),
        );
        e = Expr::max(&Expr::min(&e, &s), &d);
    }
    assert!(e.single_atom().is_some(), "not a max: {e}");
    assert_eq!(e.prove_nonneg(), Some(true));
    assert_eq!(e.prove_positive(), None);
    assert_eq!((e + 1).prove_positive(), Some(true));
    // A quotient and a remainder of the same arguments: `M mod N` may be 0.
    let (q, r) = (m().floor_div(&n()), m().rem(&n()));
    assert_eq!(q.prove_nonneg(), Some(true));
    assert_eq!(r.prove_nonneg(), Some(true));
    assert_ne!(r.prove_positive(), Some(true));
}

/// A declared dim spelled as an expression (torch's dynamo exporter: `256*h`, `s0 + 1`,
/// `Max(1, s0)`) is that expression of its names; a name (hyphens and dots included) is a symbol.
#[test]
fn declared_dims_are_names_or_exporters_expressions() {
    let h = Expr::sym("h");
    assert_eq!(super::declared_dim("256*h"), &Expr::int(256) * &h);
    assert_eq!(super::declared_dim("s0 + 1"), Expr::sym("s0") + 1);
    assert_eq!(
        super::declared_dim("Max(1, s0)"),
        Expr::max(&Expr::int(1), &Expr::sym("s0"))
    );
    for name in ["N", "batch-size", "input.1_dim0", "N_token", "seq:len"] {
        assert_eq!(super::declared_dim(name), Expr::sym(name), "{name}");
    }
    // Not an expression: kept as a name.
    assert_eq!(super::declared_dim("a b"), Expr::sym("a b"));
}

/// Binding a declared dim from an input's size: names take it, an affine expression of one
/// unbound name is solved, a bound one is checked; what no value gives is an error naming it.
#[test]
fn declared_expressions_bind_their_name_from_a_size() {
    use super::{bind_declared_dim, bind_declared_dims};
    let mut dims = BTreeMap::new();
    bind_declared_dims(&[("256*h", 512), ("W", 7), ("s0 + 1", 9)], &mut dims).unwrap();
    assert_eq!(dims.get("h"), Some(&2));
    assert_eq!(dims.get("W"), Some(&7));
    assert_eq!(dims.get("s0"), Some(&8));
    // Checked once bound.
    assert!(bind_declared_dim("256*h", 512, &mut dims).is_ok());
    let e = bind_declared_dim("256*h", 768, &mut dims).unwrap_err();
    assert!(e.contains("256*h = 512"), "{e}");
    // No h >= 1 gives 100 or 0.
    let mut fresh = BTreeMap::new();
    assert!(bind_declared_dim("256*h", 100, &mut fresh).is_err());
    assert!(bind_declared_dim("256*h", 0, &mut fresh).is_err());
    assert!(fresh.is_empty());
    // Two unbound names in one dim.
    assert!(bind_declared_dim("a*b", 6, &mut fresh).is_err());
    // A name after an expression that reads it: names are bound first.
    let mut d2 = BTreeMap::new();
    bind_declared_dims(&[("2*T", 10), ("T", 5)], &mut d2).unwrap();
    assert_eq!(d2.get("T"), Some(&5));
    assert!(bind_declared_dims(&[("2*T", 12), ("T", 5)], &mut BTreeMap::new()).is_err());
}
