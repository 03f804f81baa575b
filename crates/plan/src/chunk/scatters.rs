//! Reads of a region just scattered: a value read back, through movement ops, from the region a
//! `ScatterND` wrote is the update itself. torch's dynamo exporter writes an in-place op on a view
//! (Funnel's `positional_attn *= cls_mask`, where `positional_attn` is a view of a shifted score
//! tensor) as `slice_scatter`s of the updated view back into its base, then reads the view again
//! from the scattered base. Written so, the region's elements pass through two scatters and their
//! transposes, and the shift before them is no longer one chain of moves (`gathers`).
//!
//! Each element of value `f` is traced backwards at the dims, in closed form: the current value's
//! coordinates are affine functions of `f`'s index over its whole box. A slice, a transpose and a
//! gather of an arithmetic progression map coordinates to coordinates; a reshape goes through the
//! flat offset and splits it into the input's coordinates, digit by digit, each digit checked to
//! stay inside its axis over the whole box (so the split is the offset's only one); a `ScatterND`
//! without a reduction, its indices an arithmetic progression, is entered through its updates
//! where every traced element lies on a scattered tuple, and through its data where none does.
//! Where the trace reaches a value of `f`'s shape at the identity, `f` is that value element for
//! element, and `f`'s node becomes an `Identity` of it: the same bits.
//!
//! A reshape whose digits are not affine over the box (a relative shift read back: its rows are
//! `2i` or `2i + 1` by whether `j >= i`) leaves the coordinates as digits of the flat offset
//! ([`Digits`]), each moved by a constant: slices by one, gathers of a progression by one,
//! transposes and scatters of rows carry them, and a later reshape of the same digits, unmoved,
//! reads the flat offset again (the shift's reshape undone by the reshape that writes it back).

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::graph::{Graph, Model, Node, NodeId, ValueId};
use memplan_ir::infer::Facts;
use memplan_ir::ops::axes::{attr_int, norm};
use memplan_ir::ops::movement::transpose_perm;
use memplan_ir::ops::{self, Moves};

use super::gathers::{index_in_axis, out_shape, strided, strides, Affine};

/// Each coordinate of a value as an affine function of an index over `shape` (the traced value's
/// box).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Coords(Vec<Affine>);

impl Coords {
    fn identity(shape: &[u64]) -> Coords {
        Coords(
            (0..shape.len())
                .map(|k| {
                    let mut coef = vec![0; shape.len()];
                    coef[k] = 1;
                    Affine {
                        offset: 0,
                        coef,
                        shape: shape.to_vec(),
                    }
                })
                .collect(),
        )
    }

    fn is_identity(&self, shape: &[u64]) -> bool {
        self.0.len() == shape.len() && *self == Coords::identity(shape)
    }

    /// The flat offset into a value of `shape` these coordinates name.
    fn flat(&self, shape: &[u64]) -> Option<Affine> {
        let st = strides(shape);
        let first = self.0.first()?;
        let mut f = Affine {
            offset: 0,
            coef: vec![0; first.coef.len()],
            shape: first.shape.clone(),
        };
        for (c, &s) in self.0.iter().zip(&st) {
            f.offset = f.offset.checked_add(c.offset.checked_mul(s)?)?;
            for (a, &b) in f.coef.iter_mut().zip(&c.coef) {
                *a = a.checked_add(b.checked_mul(s)?)?;
            }
        }
        Some(f)
    }

    /// Flat offset `f` split into the coordinates of a value of `shape`: outermost first, each
    /// digit's coefficients rounded to the nearest multiple of its stride, the innermost taking
    /// the rest; `None` unless every digit stays inside its axis over the whole box (then the
    /// split is exact and the only one).
    fn split(f: &Affine, shape: &[u64]) -> Option<Coords> {
        let st = strides(shape);
        let mut rest = f.clone();
        let mut out = Vec::with_capacity(shape.len());
        for (k, &s) in st.iter().enumerate() {
            let digit = if k + 1 == shape.len() {
                rest.clone()
            } else {
                let d = Affine {
                    offset: rest.offset.div_euclid(s),
                    coef: rest
                        .coef
                        .iter()
                        .map(|&c| (c + s / 2).div_euclid(s))
                        .collect(),
                    shape: rest.shape.clone(),
                };
                rest.offset -= d.offset * s;
                for (r, &c) in rest.coef.iter_mut().zip(&d.coef) {
                    *r -= c * s;
                }
                d
            };
            let (lo, hi) = digit.range();
            (lo >= 0 && hi < shape[k] as i64).then_some(())?;
            out.push(digit);
        }
        Some(Coords(out))
    }
}

/// Coordinates that are digits of a flat offset: coordinate `k` of the traced value is digit
/// `axis[k]` of `flat` split over `shape`, plus `plus[k]`. A digit's range is taken as its whole
/// axis.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Digits {
    flat: Affine,
    shape: Vec<u64>,
    axis: Vec<usize>,
    plus: Vec<i64>,
}

impl Digits {
    fn of(flat: Affine, shape: &[u64]) -> Digits {
        Digits {
            flat,
            shape: shape.to_vec(),
            axis: (0..shape.len()).collect(),
            plus: vec![0; shape.len()],
        }
    }

    /// The least and greatest value coordinate `k` can take.
    fn range(&self, k: usize) -> (i64, i64) {
        let p = self.plus[k];
        (p, p + self.shape[self.axis[k]] as i64 - 1)
    }

    /// The flat offset into a value of `shape` these coordinates name: the split one, where they
    /// are its digits unmoved over that same shape.
    fn flat(&self, shape: &[u64]) -> Option<Affine> {
        let unmoved =
            self.axis.iter().enumerate().all(|(k, &a)| k == a) && self.plus.iter().all(|&p| p == 0);
        (unmoved && self.shape == shape).then(|| self.flat.clone())
    }
}

/// Where a trace stands: the traced value's coordinates, affine or digits.
#[derive(Clone, Debug, PartialEq, Eq)]
enum At {
    Coords(Coords),
    Digits(Digits),
}

impl At {
    /// The coordinates of a value of `shape` that a flat offset names: affine where its digits
    /// are, else the digits.
    fn split(flat: Affine, shape: &[u64]) -> At {
        match Coords::split(&flat, shape) {
            Some(c) => At::Coords(c),
            None => At::Digits(Digits::of(flat, shape)),
        }
    }
}

/// [`back`] for coordinates that are digits: a reshape of them unmoved, and the moves that carry
/// each coordinate to one of the input plus a constant.
fn back_digits(
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    node: &Node,
    d: &Digits,
) -> Option<(usize, At)> {
    let input = |k: usize| node.inputs.get(k).copied().flatten();
    let from = facts.get(input(0)?).shape_at(dims)?;
    let rank = from.len();
    let mut w = d.clone();
    match ops::lookup(node)?.moves? {
        Moves::Order => {
            let to = out_shape(node, facts, dims)?;
            Some((0, At::split(d.flat(&to)?, &from)))
        }
        Moves::Permuted => {
            let perm = transpose_perm(node, rank);
            (perm.len() == rank && d.axis.len() == rank).then_some(())?;
            for (k, &p) in perm.iter().enumerate() {
                let p = usize::try_from(p).ok().filter(|&p| p < rank)?;
                w.axis[p] = d.axis[k];
                w.plus[p] = d.plus[k];
            }
            Some((0, At::Digits(w)))
        }
        Moves::Strided => {
            (d.axis.len() == rank).then_some(())?;
            for (a, s, st) in strided(node, facts, dims, &from)? {
                (st == 1).then_some(())?;
                w.plus[a] = w.plus[a].checked_add(s)?;
            }
            Some((0, At::Digits(w)))
        }
        Moves::Indexed => {
            let a = norm(attr_int(node, "axis", 0), rank)?;
            let idx = index_in_axis(g, facts, dims, input(1)?, from[a])?;
            // A progression of step one over one axis: a move by its first index.
            (idx.shape.len() == 1 && idx.coef == [1] && d.axis.len() == rank).then_some(())?;
            w.plus[a] = w.plus[a].checked_add(idx.offset)?;
            Some((0, At::Digits(w)))
        }
        Moves::Scatters => {
            let (a, s, k) = scattered_rows(g, facts, dims, node, &from)?;
            let (lo, hi) = d.range(0);
            let (ilo, ihi) = rows_range(a, s, k);
            if hi < ilo || lo > ihi {
                return Some((0, At::Digits(w)));
            }
            // Row `first - a` of the updates, inside them for every element.
            (s == 1 && lo >= a && hi < a + k as i64 && d.axis.len() == from.len()).then_some(())?;
            w.plus[0] -= a;
            Some((2, At::Digits(w)))
        }
        // An element from the input or the constant, by where it lies.
        Moves::Padded => None,
    }
}

/// The rows a `ScatterND` without a reduction writes, when its index tuples are one coordinate
/// each, an arithmetic progression `a + s r` (`r < k`) counted from the data's first axis (a
/// negative index counts from its end): `(a, s, k)`.
fn scattered_rows(
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    node: &Node,
    from: &[u64],
) -> Option<(i64, i64, u64)> {
    if node
        .attr("reduction")
        .is_some_and(|r| !matches!(r, memplan_ir::graph::AttrValue::String(s) if s == b"none"))
    {
        return None;
    }
    let idx = index_in_axis(
        g,
        facts,
        dims,
        node.inputs.get(1).copied().flatten()?,
        *from.first()?,
    )?;
    // Index tuples of one coordinate: indices `[K, 1]`.
    let [k, 1] = idx.shape[..] else {
        return None;
    };
    Some((idx.offset, idx.coef[0], k))
}

/// The least and greatest of the `k` rows `a + s r` ([`scattered_rows`]).
fn rows_range(a: i64, s: i64, k: u64) -> (i64, i64) {
    let last = a + s * (k as i64 - 1);
    (a.min(last), a.max(last))
}

/// The coordinates in the input that `node` (making a value of `to`, these coordinates `c` in
/// it) reads each traced element from, with that input's slot: one of its inputs alone.
fn back(
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    node: &Node,
    c: &Coords,
) -> Option<(usize, At)> {
    let input = |k: usize| node.inputs.get(k).copied().flatten();
    let shape_of = |k: usize| facts.get(input(k)?).shape_at(dims);
    let from = shape_of(0)?;
    let rank = from.len();
    match ops::lookup(node)?.moves? {
        Moves::Order => {
            let to = out_shape(node, facts, dims)?;
            Some((0, At::split(c.flat(&to)?, &from)))
        }
        Moves::Permuted => {
            let perm = transpose_perm(node, rank);
            let mut w = c.0.clone();
            for (k, &p) in perm.iter().enumerate() {
                w[usize::try_from(p).ok().filter(|&p| p < rank)?] = c.0.get(k)?.clone();
            }
            (perm.len() == rank).then_some((0, At::Coords(Coords(w))))
        }
        Moves::Strided => {
            if c.0.len() != rank {
                return None;
            }
            let mut w = c.clone();
            for (a, s, st) in strided(node, facts, dims, &from)? {
                let x = &mut w.0[a];
                x.offset = x.offset.checked_mul(st)?.checked_add(s)?;
                for v in x.coef.iter_mut() {
                    *v = v.checked_mul(st)?;
                }
            }
            Some((0, At::Coords(w)))
        }
        Moves::Indexed => {
            let a = norm(attr_int(node, "axis", 0), rank)?;
            let idx = index_in_axis(g, facts, dims, input(1)?, from[a])?;
            let q = idx.shape.len();
            let mut w: Vec<Affine> = c.0[..a].to_vec();
            // The index's value at the traced coordinates a..a+q of the output.
            let mut at = Affine {
                offset: idx.offset,
                coef: vec![0; c.0.first()?.coef.len()],
                shape: c.0.first()?.shape.clone(),
            };
            for (t, &ic) in idx.coef.iter().enumerate() {
                let x = c.0.get(a + t)?;
                at.offset += ic * x.offset;
                for (v, &xc) in at.coef.iter_mut().zip(&x.coef) {
                    *v += ic * xc;
                }
            }
            w.push(at);
            w.extend_from_slice(c.0.get(a + q..)?);
            (w.len() == rank).then_some((0, At::Coords(Coords(w))))
        }
        Moves::Scatters => {
            scatter_back(g, facts, dims, node, c, &from).map(|(slot, c)| (slot, At::Coords(c)))
        }
        Moves::Padded => None,
    }
}

/// [`back`] through a `ScatterND` without a reduction whose index tuples are one coordinate each,
/// an arithmetic progression `a + s r`: its updates where every traced element's first
/// coordinate is `a + s r` for a row `r` inside the indices (row `r` of the updates), its data
/// where none is.
fn scatter_back(
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    node: &Node,
    c: &Coords,
    from: &[u64],
) -> Option<(usize, Coords)> {
    let (a, s, k) = scattered_rows(g, facts, dims, node, from)?;
    let first = c.0.first()?;
    let (lo, hi) = first.range();
    let (ilo, ihi) = rows_range(a, s, k);
    if hi < ilo || lo > ihi {
        return Some((0, c.clone()));
    }
    if s == 0 || c.0.len() != from.len() {
        return None;
    }
    // r = (first - a) / s, exact for every element and inside the rows.
    let exact = (first.offset - a) % s == 0 && first.coef.iter().all(|&x| x % s == 0);
    exact.then_some(())?;
    let r = Affine {
        offset: (first.offset - a) / s,
        coef: first.coef.iter().map(|&x| x / s).collect(),
        shape: first.shape.clone(),
    };
    let (rlo, rhi) = r.range();
    (rlo >= 0 && rhi < k as i64).then_some(())?;
    let mut w = vec![r];
    w.extend_from_slice(&c.0[1..]);
    Some((2, Coords(w)))
}

/// For value `f` (made by a movement op), the value it equals element for element, traced
/// backwards through movement ops and scatters ([`back`]), when there is one other than `f`'s
/// own input chain of plain moves (only a trace through a scatter is worth the rewrite).
fn read_back(
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    f: ValueId,
) -> Option<ValueId> {
    let shape = facts.get(f).shape_at(dims)?;
    if shape.contains(&0) {
        return None;
    }
    let mut at = At::Coords(Coords::identity(&shape));
    let mut v = f;
    let mut scattered = false;
    // At most as many steps as nodes: each step goes to an earlier node.
    for _ in 0..g.nodes.len() {
        let node = g.node(g.producer(v)?);
        if !node.is_onnx_domain() || node.subgraphs().next().is_some() {
            return None;
        }
        let (slot, w) = match &at {
            At::Coords(c) => back(g, facts, dims, node, c)?,
            At::Digits(d) => back_digits(g, facts, dims, node, d)?,
        };
        scattered |= slot == 2;
        v = node.inputs.get(slot).copied().flatten()?;
        at = w;
        let vs = facts.get(v).shape_at(dims)?;
        if scattered && vs == shape && matches!(&at, At::Coords(c) if c.is_identity(&shape)) {
            return Some(v);
        }
    }
    None
}

/// `model` with every value of at least `min_bytes` that reads back a region a scatter wrote
/// ([`read_back`]) made an `Identity` of the update (its name and value kept), and the nodes only
/// the old reads needed dropped; `None` when there is none.
pub(crate) fn forward_scattered_reads(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    min_bytes: u64,
) -> Option<Model> {
    let g = &model.graph;
    let mut found: Vec<(NodeId, ValueId)> = Vec::new();
    for (i, node) in g.nodes.iter().enumerate() {
        let is_move = ops::lookup(node).is_some_and(|d| d.moves.is_some());
        let Some(f) = node.outputs.first().copied().flatten() else {
            continue;
        };
        let big = super::rewrite::holds_at_least(facts, dims, f, min_bytes);
        if is_move && big && node.is_onnx_domain() {
            if let Some(u) = read_back(g, facts, dims, f) {
                found.push((NodeId::from_index(i), u));
            }
        }
    }
    if found.is_empty() {
        return None;
    }
    let mut out = g.clone();
    let mut unread = Vec::new();
    for &(n, u) in &found {
        let node = &mut out.nodes[n.index()];
        unread.extend(node.input_ids());
        node.op = "Identity".into();
        node.attrs.clear();
        node.inputs = vec![Some(u)];
    }
    Some(super::rewrite::finish(
        model,
        &out,
        &BTreeMap::new(),
        BTreeSet::new(),
        unread,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::rewrite::test_node as op;
    use memplan_ir::graph::{DeclDim, DeclType};
    use memplan_ir::{DataType, TensorData};

    fn ints(g: &mut Graph, name: &str, dims: Vec<u64>, v: &[i64]) -> ValueId {
        g.add_initializer(TensorData::from_i64(name, dims, v))
    }

    /// `x[:, a:b] *= 2` as dynamo writes it: the view `v = x[:, a:b]` updated to `u = 2 v`, put
    /// back by a `ScatterND` of rows `a..b` of `x` transposed (the rows written as they are, or
    /// counted from the end), then read again: `y = x'[:, a:b]` (and `z = x'[:, a-1:b]`, which
    /// straddles the scattered rows). `y` is `u` itself, `z` is neither the update nor the data
    /// alone.
    #[test]
    fn a_region_read_back_from_its_scatter_is_the_update() {
        for negative in [false, true] {
            let (r, c, a, b) = (6i64, 10i64, 3i64, 7i64);
            let mut g = Graph::default();
            let dims = vec![DeclDim::Value(r), DeclDim::Value(c)];
            let x = g.add_input("x", DeclType::tensor(DataType::F32, dims));
            let (sa, sb, one) = (
                ints(&mut g, "a", vec![1], &[a]),
                ints(&mut g, "b", vec![1], &[b]),
                ints(&mut g, "one", vec![1], &[1]),
            );
            let am1 = ints(&mut g, "am1", vec![1], &[a - 1]);
            let v = op(&mut g, "Slice", &[x, sa, sb, one], None);
            let u = op(&mut g, "Add", &[v, v], None);
            let xt = op(&mut g, "Transpose", &[x], Some(vec![1, 0]));
            let ut = op(&mut g, "Transpose", &[u], Some(vec![1, 0]));
            let rows: Vec<i64> = (a..b).map(|i| i - c * negative as i64).collect();
            let idx = ints(&mut g, "rows", vec![(b - a) as u64, 1], &rows);
            let s = op(&mut g, "ScatterND", &[xt, idx, ut], None);
            let back = op(&mut g, "Transpose", &[s], Some(vec![1, 0]));
            let y = op(&mut g, "Slice", &[back, sa, sb, one], None);
            let z = op(&mut g, "Slice", &[back, am1, sb, one], None);
            let (model, facts, reads) = read_backs(g, y, z);
            assert_eq!(reads, [Some(u), None], "negative {negative}");
            let (g, dims) = (&model.graph, BTreeMap::new());
            // Written: `y` an `Identity` of `u`; the scatter stays, `z` reads it.
            let m = forward_scattered_reads(&model, &facts, &dims, 0).unwrap();
            let yn = m.graph.producer(m.graph.outputs[0]).unwrap();
            let node = m.graph.node(yn);
            assert_eq!(node.op, "Identity");
            assert_eq!(m.graph.value(node.inputs[0].unwrap()).name, g.value(u).name);
            assert!(m.graph.nodes.iter().any(|n| n.op == "ScatterND"));
        }
    }

    /// A relative shift read back, as dynamo writes Funnel's `positional_attn *= cls_mask`:
    /// scores `e [S, 2S]` as a base `b [2S, S]`, its shifted view `v = b[1:]` read as `[S, 2S - 1]`,
    /// whose first `S` columns are doubled (`u`) and written back into the view (a scatter of
    /// rows of it transposed), the view written back into the base's rows `1..`, and the shifted
    /// view read again from the base: `y`, its first `S` columns, is `u`; `z`, columns `1..S + 1`,
    /// straddles what was written. The rows of the shifted view are not affine in `y`'s index
    /// (`2i` or `2i + 1` by whether `j >= i`), so the trace goes through them as digits.
    #[test]
    fn a_shifted_view_read_back_through_its_reshape_is_the_update() {
        let s = 4i64;
        let mut g = Graph::default();
        let dims = vec![DeclDim::Value(s), DeclDim::Value(2 * s)];
        let e = g.add_input("e", DeclType::tensor(DataType::F32, dims));
        let c = |g: &mut Graph, name: &str, v: &[i64]| ints(g, name, vec![v.len() as u64], v);
        let (base_shape, view_shape) = (
            c(&mut g, "bs", &[2 * s, s]),
            c(&mut g, "vs", &[s, 2 * s - 1]),
        );
        let (zero, one, big) = (
            c(&mut g, "zero", &[0]),
            c(&mut g, "one", &[1]),
            c(&mut g, "big", &[i64::MAX]),
        );
        let (cols, cols1, sp1) = (
            c(&mut g, "cols", &[s]),
            c(&mut g, "axis1", &[1]),
            c(&mut g, "sp1", &[s + 1]),
        );
        let shifted = |g: &mut Graph, base: ValueId| {
            let rows = op(g, "Slice", &[base, one, big, zero], None);
            op(g, "Reshape", &[rows, view_shape], None)
        };
        let b = op(&mut g, "Reshape", &[e, base_shape], None);
        let v = shifted(&mut g, b);
        let first = op(&mut g, "Slice", &[v, zero, cols, cols1], None);
        let u = op(&mut g, "Add", &[first, first], None);
        // u written into v's first S columns: rows of v transposed.
        let (vt, ut) = (
            op(&mut g, "Transpose", &[v], Some(vec![1, 0])),
            op(&mut g, "Transpose", &[u], Some(vec![1, 0])),
        );
        let col_idx: Vec<i64> = (0..s).collect();
        let ci = ints(&mut g, "ci", vec![s as u64, 1], &col_idx);
        let v2t = op(&mut g, "ScatterND", &[vt, ci, ut], None);
        let v2 = op(&mut g, "Transpose", &[v2t], Some(vec![1, 0]));
        // The view written back into the base's rows 1...
        let rows_shape = c(&mut g, "rs", &[2 * s - 1, s]);
        let v2_rows = op(&mut g, "Reshape", &[v2, rows_shape], None);
        let row_idx: Vec<i64> = (1..2 * s).collect();
        let ri = ints(&mut g, "ri", vec![(2 * s - 1) as u64, 1], &row_idx);
        let b2 = op(&mut g, "ScatterND", &[b, ri, v2_rows], None);
        let again = shifted(&mut g, b2);
        let y = op(&mut g, "Slice", &[again, zero, cols, cols1], None);
        let z = op(&mut g, "Slice", &[again, one, sp1, cols1], None);
        assert_eq!(read_backs(g, y, z).2, [Some(u), None]);
    }

    /// The model of `g` with outputs `y` and `z`, its facts at no dims, and what each reads back.
    fn read_backs(mut g: Graph, y: ValueId, z: ValueId) -> (Model, Facts, [Option<ValueId>; 2]) {
        g.outputs = vec![y, z];
        let model = Model {
            graph: g,
            ..Model::default()
        };
        let dims = BTreeMap::new();
        let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
        let g = &model.graph;
        let reads = [y, z].map(|v| read_back(g, &facts, &dims, v));
        (model, facts, reads)
    }
}
