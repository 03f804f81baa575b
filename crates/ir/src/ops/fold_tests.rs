//! Symbolic folding of shape arithmetic as exporters emit it: values that hold symbols flow through
//! `Pow`, `Div`, `Mod`, `Where`, `Max`/`Min`, `Range`, `Tile`, `ScatterND` and the sign ops. These run
//! without a registered kernel folder (ir alone), so everything checked here is the rules' own.

use super::tests::{a_int, TestGraph};
use crate::dim::Expr;
use crate::graph::ValueId;
use crate::infer::{Facts, Known};
use crate::DataType;

fn n() -> Expr {
    Expr::sym("N")
}

fn ints(f: &Facts, v: ValueId) -> Vec<Expr> {
    match &f.get(v).value {
        Some(Known::Int(v)) => v.clone(),
        other => panic!("no integer contents: {other:?}"),
    }
}

fn shape(f: &Facts, v: ValueId) -> Vec<Expr> {
    f.get(v).shape.clone().expect("shape")
}

/// `[N]` as a 1-D i64 vector: `Shape(x)[0:1]` of an `[N, 8]` input, and the `[N, 8]` shape.
fn shape_vec(t: &mut TestGraph) -> (ValueId, ValueId, ValueId) {
    let x = t.input("x", DataType::F32, "N, N, 8");
    let s = t.op("Shape", &[x], &["s"], vec![])[0];
    let zero = t.ints("zero", &[], &[0]);
    let n = t.op("Gather", &[s, zero], &["n"], vec![a_int("axis", 0)])[0];
    (x, s, n)
}

#[test]
fn pow_then_floor_div_reshapes_n_squared_over_k() {
    // einops / AlphaFold-3 pairformer (TorchScript export): `z.reshape(b, n**2 // 4, 4, c)`.
    let mut t = TestGraph::new();
    let (x, _, n_) = shape_vec(&mut t);
    let two = t.ints("two", &[], &[2]);
    let four = t.ints("four", &[], &[4]);
    let p = t.op("Pow", &[n_, two], &["p"], vec![])[0];
    let d = t.op("Div", &[p, four], &["d"], vec![])[0];
    let ax = t.ints("ax", &[1], &[0]);
    let u = t.op("Unsqueeze", &[d, ax], &["u"], vec![])[0];
    let rest = t.ints("rest", &[2], &[4, 8]);
    let target = t.op("Concat", &[u, rest], &["target"], vec![a_int("axis", 0)])[0];
    let r = t.op("Reshape", &[x, target], &["r"], vec![])[0];
    let f = t.run(18).unwrap();
    assert!(f.skipped.is_empty(), "{:?}", f.skipped);
    assert_eq!(ints(&f, p), vec![&n() * &n()]);
    let q = (&n() * &n()).floor_div(&Expr::int(4));
    assert_eq!(shape(&f, r), vec![q, 4.into(), 8.into()]);
}

#[test]
fn mod_pads_symbolic_extent_to_a_multiple_of_the_window() {
    // Swin window partition (TorchScript export): pad_h = (4 - H % 4) % 4, then
    // x.view(B, Hp // 4, 4, ...) and arange(0, Hp, 4).
    let mut t = TestGraph::new();
    let x = t.input("x", DataType::F32, "1, H, 8");
    let s = t.op("Shape", &[x], &["s"], vec![])[0];
    let one = t.ints("one", &[], &[1]);
    let h = t.op("Gather", &[s, one], &["h"], vec![a_int("axis", 0)])[0];
    let w = t.ints("w", &[], &[4]);
    let m = t.op("Mod", &[h, w], &["m"], vec![a_int("fmod", 0)])[0];
    let sub = t.op("Sub", &[w, m], &["sub"], vec![])[0];
    let pad_h = t.op("Mod", &[sub, w], &["pad_h"], vec![a_int("fmod", 0)])[0];
    let ax = t.ints("ax", &[1], &[0]);
    let pu = t.op("Unsqueeze", &[pad_h, ax], &["pu"], vec![])[0];
    // pads = [x0_begin, h_begin, c_begin, x0_end, h_end, c_end].
    let zero1 = t.ints("zero1", &[1], &[0]);
    let pads = t.op(
        "Concat",
        &[zero1, zero1, zero1, zero1, pu, zero1],
        &["pads6"],
        vec![a_int("axis", 0)],
    )[0];
    let padded = t.op("Pad", &[x, pads], &["padded"], vec![])[0];
    let hp = t.op("Add", &[h, pad_h], &["hp"], vec![])[0];
    let nwin = t.op("Div", &[hp, w], &["nwin"], vec![])[0];
    let zero = t.ints("zero", &[], &[0]);
    let idx = t.op("Range", &[zero, hp, w], &["idx"], vec![])[0];
    let f = t.run(18).unwrap();
    assert!(f.skipped.is_empty(), "{:?}", f.skipped);
    let hs = Expr::sym("H");
    let ph = (&Expr::int(4) - &hs.rem(&Expr::int(4))).rem(&Expr::int(4));
    let padded_h = &hs + &ph;
    assert_eq!(
        shape(&f, padded),
        vec![1.into(), padded_h.clone(), 8.into()]
    );
    assert_eq!(ints(&f, nwin), vec![padded_h.floor_div(&Expr::int(4))]);
    let len = &shape(&f, idx)[0];
    for (hv, want_pad, want_len) in [(7, 8, 2), (8, 8, 2), (9, 12, 3), (1, 4, 1)] {
        let env = [("H".to_string(), hv)].into_iter().collect();
        assert_eq!(padded_h.eval_map(&env), Ok(want_pad), "H={hv}");
        assert_eq!(len.eval_map(&env), Ok(want_len), "H={hv}");
    }
}

#[test]
fn where_max_min_on_shape_vectors() {
    let mut t = TestGraph::new();
    let x = t.input("x", DataType::F32, "N, 8");
    let s = t.op("Shape", &[x], &["s"], vec![])[0];
    let probe = t.ints("probe", &[2], &[0, 8]);
    let cond = t.op("Equal", &[s, probe], &["cond"], vec![])[0];
    let minus = t.ints("minus", &[2], &[-1, -1]);
    let w = t.op("Where", &[cond, minus, s], &["w"], vec![])[0];
    let four = t.ints("four", &[2], &[4, 4]);
    let mx = t.op("Max", &[s, four], &["mx"], vec![])[0];
    let mn = t.op("Min", &[s, four], &["mn"], vec![])[0];
    let gt = t.op("Greater", &[s, four], &["gt"], vec![])[0];
    let f = t.run(18).unwrap();
    // N == 0 is false for every N >= 1; 8 == 8.
    assert_eq!(ints(&f, cond), vec![0.into(), 1.into()]);
    assert_eq!(ints(&f, w), vec![n(), Expr::int(-1)]);
    assert_eq!(ints(&f, mx), vec![Expr::max(&n(), &Expr::int(4)), 8.into()]);
    assert_eq!(ints(&f, mn), vec![Expr::min(&n(), &Expr::int(4)), 4.into()]);
    // N > 4 is undecided: the comparison's contents stay unknown.
    assert_eq!(f.get(gt).value, None);
}

#[test]
fn range_with_symbolic_limit_has_a_symbolic_length() {
    let mut t = TestGraph::new();
    let (_, _, n_) = shape_vec(&mut t);
    let zero = t.ints("start0", &[], &[0]);
    let one = t.ints("one", &[], &[1]);
    let three = t.ints("three", &[], &[3]);
    let two = t.ints("two", &[], &[2]);
    let five = t.ints("five", &[], &[5]);
    let r1 = t.op("Range", &[zero, n_, one], &["r1"], vec![])[0];
    let r3 = t.op("Range", &[two, n_, three], &["r3"], vec![])[0];
    let rc = t.op("Range", &[zero, five, two], &["rc"], vec![])[0];
    let f = t.run(18).unwrap();
    assert_eq!(shape(&f, r1), vec![n()]);
    let env = |v: i64| [("N".to_string(), v)].into_iter().collect();
    let len3 = &shape(&f, r3)[0];
    for (nv, want) in [(1, 0), (2, 0), (3, 1), (5, 1), (6, 2)] {
        assert_eq!(len3.eval_map(&env(nv)), Ok(want), "N={nv}");
    }
    assert_eq!(ints(&f, rc), vec![0.into(), 2.into(), 4.into()]);
}

#[test]
fn integer_division_truncates_and_sign_ops_keep_symbols() {
    let mut t = TestGraph::new();
    let (_, _, n_) = shape_vec(&mut t);
    let two = t.ints("two", &[], &[2]);
    let neg = t.op("Neg", &[n_], &["neg"], vec![])[0];
    let q = t.op("Div", &[neg, two], &["q"], vec![])[0];
    let abs = t.op("Abs", &[neg], &["abs"], vec![])[0];
    let sign = t.op("Sign", &[neg], &["sign"], vec![])[0];
    let fm = t.op("Mod", &[neg, two], &["fm"], vec![a_int("fmod", 1)])[0];
    let pm = t.op("Mod", &[neg, two], &["pm"], vec![a_int("fmod", 0)])[0];
    let f = t.run(18).unwrap();
    let two_e = Expr::int(2);
    assert_eq!(ints(&f, neg), vec![-n()]);
    // -N / 2 truncates toward zero: -(N // 2), not (-N) // 2.
    assert_eq!(ints(&f, q), vec![-(n().floor_div(&two_e))]);
    assert_eq!(ints(&f, abs), vec![n()]);
    assert_eq!(ints(&f, sign), vec![Expr::int(-1)]);
    assert_eq!(ints(&f, fm), vec![-(n().rem(&two_e))]);
    assert_eq!(ints(&f, pm), vec![(-n()).rem(&two_e)]);
}

#[test]
fn tile_scatter_split_and_expand_of_shape_vectors() {
    let mut t = TestGraph::new();
    let x = t.input("x", DataType::F32, "N, 8");
    let s = t.op("Shape", &[x], &["s"], vec![])[0];
    let reps = t.ints("reps", &[1], &[2]);
    let tiled = t.op("Tile", &[s, reps], &["tiled"], vec![])[0];
    let idx = t.ints("idx", &[1, 1], &[1]);
    let three = t.ints("three", &[1], &[3]);
    let n3 = t.op("Mul", &[s, three], &["n3"], vec![])[0];
    let one = t.ints("one", &[1], &[1]);
    let z0 = t.ints("z0", &[1], &[0]);
    let first = t.op("Slice", &[n3, z0, one], &["first"], vec![])[0];
    let sc = t.op("ScatterND", &[s, idx, first], &["sc"], vec![])[0];
    let sizes = t.ints("sizes", &[2], &[1, 1]);
    let parts = t.op("Split", &[s, sizes], &["p0", "p1"], vec![a_int("axis", 0)]);
    let shp = t.ints("shp", &[2], &[2, 2]);
    let col = t.ints("col", &[2], &[2, 1]);
    let sr = t.op("Reshape", &[s, col], &["sr"], vec![])[0];
    let ex = t.op("Expand", &[sr, shp], &["ex"], vec![])[0];
    let pr = t.op("ReduceProd", &[s], &["pr"], vec![a_int("keepdims", 0)])[0];
    let f = t.run(18).unwrap();
    assert!(f.skipped.is_empty(), "{:?}", f.skipped);
    let eight = Expr::int(8);
    assert_eq!(
        ints(&f, tiled),
        vec![n(), eight.clone(), n(), eight.clone()]
    );
    assert_eq!(ints(&f, sc), vec![n(), &n() * &Expr::int(3)]);
    assert_eq!(ints(&f, parts[0]), vec![n()]);
    assert_eq!(ints(&f, parts[1]), vec![eight.clone()]);
    assert_eq!(ints(&f, ex), vec![n(), n(), eight.clone(), eight.clone()]);
    assert_eq!(ints(&f, pr), vec![&n() * &eight]);
}

/// Swin's attention mask, as the TorchScript exporter writes it: the batch of windows
/// `B * nw` (nw = windows of a padded grid, a product of floor divisions that may be 0 for
/// some sizes) divided by `nw`, then compared with -1 before an `Expand`. A divisor proven
/// `>= 0` is positive, so the division folds and the comparison is decided.
#[test]
fn division_by_a_window_count_folds_and_its_guard_is_decided() {
    let mut t = TestGraph::new();
    let x = t.input("x", DataType::F32, "B, H");
    let s = t.op("Shape", &[x], &["s"], vec![])[0];
    let (i0, i1) = (t.ints("i0", &[], &[0]), t.ints("i1", &[], &[1]));
    let b = t.op("Gather", &[s, i0], &["b"], vec![a_int("axis", 0)])[0];
    let h = t.op("Gather", &[s, i1], &["h"], vec![a_int("axis", 0)])[0];
    let four = t.ints("four", &[], &[4]);
    let nw = t.op("Div", &[h, four], &["nw"], vec![])[0];
    let bnw = t.op("Mul", &[b, nw], &["bnw"], vec![])[0];
    let q = t.op("Div", &[bnw, nw], &["q"], vec![])[0];
    let minus = t.ints("minus", &[], &[-1]);
    let guard = t.op("Equal", &[q, minus], &["guard"], vec![])[0];
    let f = t.run(18).unwrap();
    assert!(f.skipped.is_empty(), "{:?}", f.skipped);
    assert_eq!(ints(&f, q), vec![Expr::sym("B")]);
    assert_eq!(ints(&f, guard), vec![Expr::int(0)]);
}
