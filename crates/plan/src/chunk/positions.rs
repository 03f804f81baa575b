//! Positions as values: an op whose every output element is a function of that element of its
//! input and of the element's own row and column (`Trilu` keeps `x[.., i, j]` where `j - i >= k`,
//! or `<= k`; `EyeLike` is 1 where `j - i == k`) mixes its last two axes in the axis flow, since a
//! slice of rows is not the same op on the slice: its diagonal moves. Before chunking, such a node
//! is written with the positions as inputs of their own: the row index plus `k` as an `[R, 1]`
//! constant, the column index as `[1, C]`, compared elementwise (`GreaterOrEqual`, `LessOrEqual`,
//! `Equal`) into a `bool [R, C]` mask, and the mask applied by `Where(mask, x, 0)` (`Cast(mask)`
//! for `EyeLike`). Every node of that form passes both axes, so a region grows through it, and the
//! mask is made from inputs far smaller than it (a light value, made again per reader and sliced
//! per chunk). The same element is selected or set, so the bits are the same: `Where` returns
//! `x`'s element itself or the type's zero, which is what `Trilu` writes.
//!
//! TorchScript writes a causal mask as `Trilu` of a constant expanded to `[S, S]` (OPT, for one),
//! where torch's dynamo exporter writes comparisons of `Range`s that already chunk.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use memplan_ir::dtype::DataType;
use memplan_ir::graph::{
    AttrValue, Attribute, Graph, Model, Names, Node, NodeId, ValueId, ValueKind,
};
use memplan_ir::infer::{Facts, Known};
use memplan_ir::ops::{self, Offset};
use memplan_ir::TensorData;

/// One node to write with its positions: the comparison of `column` with `row + k` and what the
/// mask becomes.
pub(super) struct Positional {
    /// `GreaterOrEqual`, `LessOrEqual` or `Equal` of `[1, C]` column indices with `[R, 1]` row
    /// indices plus `k`.
    compare: &'static str,
    rows: u64,
    cols: u64,
    /// The diagonal offset, clamped to `[-R, C]` (the same elements on either side).
    k: i64,
    /// `Some(x)`: `Where(mask, x, 0)` of input `x` (Trilu); `None`: `Cast(mask)` to the output's
    /// type (EyeLike).
    keep_from: Option<ValueId>,
    dtype: DataType,
}

/// The node's positional form at `dims`, when its op's record has one ([`ops::Positions`]) and
/// its offset and sizes are known, of a type with a zero (not strings).
pub(super) fn positional(
    node: &Node,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> Option<Positional> {
    let form = (ops::lookup(node)?.positions?)(node);
    let out = node.outputs.first().copied().flatten()?;
    let of = facts.get(out);
    let dtype = of.dtype.filter(|&d| d != DataType::String)?;
    let shape = of.shape_at(dims)?;
    let [.., rows, cols] = shape[..] else {
        return None;
    };
    if form.keeps.is_none() && shape.len() != 2 {
        return None;
    }
    let k = match form.offset {
        Offset::Input(i) => match known_input(node, i, facts, dims)?.as_deref() {
            None => 0,
            Some(&[k]) => k,
            Some(_) => return None,
        },
        Offset::Attr(name) => match node.attr(name) {
            None => 0,
            Some(AttrValue::Int(v)) => *v,
            Some(_) => return None,
        },
    };
    let keep_from = match form.keeps {
        Some(i) => Some(node.inputs.get(i).copied().flatten()?),
        None => None,
    };
    Some(Positional {
        compare: form.compare.onnx_op(),
        rows,
        cols,
        k: k.clamp(-(rows as i64), cols as i64),
        keep_from,
        dtype,
    })
}

/// `model` with every node of at least `min_bytes` output that [`positional`] takes written in
/// its positional form, or `None` when there is none. The node list must be in topological order;
/// it stays so, and each rewritten node keeps its name and output value.
pub(crate) fn positions_as_values(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    min_bytes: u64,
) -> Option<Model> {
    let g = &model.graph;
    let big = |n: &Node| {
        n.outputs
            .first()
            .copied()
            .flatten()
            .is_some_and(|v| super::rewrite::holds_at_least(facts, dims, v, min_bytes))
    };
    let found: Vec<(usize, Positional)> = g
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| big(n))
        .filter_map(|(i, n)| positional(n, facts, dims).map(|p| (i, p)))
        .collect();
    if found.is_empty() {
        return None;
    }
    let mut out = g.clone();
    let mut names = Names::of(g);
    // The comparison of each rewritten node, to go right before it.
    let mut before: BTreeMap<usize, Vec<NodeId>> = BTreeMap::new();
    for (i, p) in found {
        let base = out.nodes[i].name.clone();
        let mut e = Emitter {
            out: &mut out,
            names: &mut names,
            base: &base,
            rank: 2,
        };
        let col = e.index("columns", 1, (0..p.cols as i64).collect());
        let row_k = e.index(
            "rows_plus_k",
            0,
            (0..p.rows as i64).map(|r| r + p.k).collect(),
        );
        let mask = e.op(p.compare, &[Some(col), Some(row_k)]);
        let (op, attrs, inputs) = match p.keep_from {
            Some(x) => {
                let zero = vec![0u8; p.dtype.bytes_for(1) as usize];
                let z = e.scalar("zero", p.dtype, &zero)?;
                ("Where", Vec::new(), vec![Some(mask), Some(x), Some(z)])
            }
            None => {
                let to = Attribute {
                    name: "to".into(),
                    value: AttrValue::Int(p.dtype.onnx_code() as i64),
                    doc: String::new(),
                };
                ("Cast", vec![to], vec![Some(mask)])
            }
        };
        before.insert(i, vec![out.producer(mask)?]);
        let node = &mut out.nodes[i];
        node.op = op.into();
        node.attrs = attrs;
        node.inputs = inputs;
    }
    let schedule = super::rewrite::order_with_before(g.nodes.len(), &before, &BTreeSet::new());
    Some(Model {
        graph: crate::reorder(&out, &schedule),
        ..model.clone()
    })
}

/// A constant of positions: a tensor `[1, .., 1, R, C]` whose element `[i, j]` is `inside` where
/// `lo <= j - i <= hi` (a band of diagonals; either bound may be absent) and `outside` elsewhere,
/// both of one element's bytes. A causal mask kept as a weight (`tril` of ones: GPT-Neo's
/// `attention.bias`), a local-attention window, an identity.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Band {
    lo: Option<i64>,
    hi: Option<i64>,
    inside: Vec<u8>,
    outside: Vec<u8>,
}

/// `t`'s band (see [`Band`]), when it is one: of rank 2 or more with every leading dim 1, of a
/// type of whole bytes, of two values (one alone is not positional) that change along rows and
/// columns only at a band's edges. For a `bool` tensor `inside` is `true` where the band's two
/// ends allow it (no `Not` needed).
pub(crate) fn band_of(t: &TensorData) -> Option<Band> {
    let [lead @ .., rows, cols] = &t.dims[..] else {
        return None;
    };
    let (rows, cols) = (*rows, *cols);
    if lead.iter().any(|&d| d != 1) || rows == 0 || cols == 0 || t.dtype == DataType::String {
        return None;
    }
    let e = t.dtype.bytes_for(1) as usize;
    let raw = t.raw()?;
    let (r, c) = (rows as usize, cols as usize);
    if e == 0 || raw.len() != r * c * e {
        return None;
    }
    let at = |i: usize, j: usize| &raw[(i * c + j) * e..(i * c + j + 1) * e];
    // The element of diagonal d = j - i, from the first row or the first column.
    let diag = |d: i64| {
        if d >= 0 {
            at(0, d as usize)
        } else {
            at((-d) as usize, 0)
        }
    };
    for i in 1..r {
        for j in 1..c {
            if at(i, j) != at(i - 1, j - 1) {
                return None;
            }
        }
    }
    // Runs of equal diagonals, from d = -(R-1) to C-1: (first d, value).
    let mut runs: Vec<(i64, &[u8])> = Vec::new();
    for d in -(r as i64 - 1)..c as i64 {
        if runs.last().is_none_or(|&(_, v)| v != diag(d)) {
            runs.push((d, diag(d)));
        }
    }
    let end = |k: usize| runs.get(k + 1).map(|&(d, _)| d - 1);
    let (lo, hi, inside, outside) = match runs[..] {
        [(_, a), (_, b)] => {
            // `a` up to the cut, `b` after it: for a bool, the band is the `true` run.
            if t.dtype == DataType::Bool && a == [0] {
                (Some(runs[1].0), None, b, a)
            } else {
                (None, end(0), a, b)
            }
        }
        [(_, b), (lo, a), (_, b2)] if b == b2 => (Some(lo), end(1), a, b),
        _ => return None,
    };
    let clamp = |d: i64| d.clamp(-(rows as i64), cols as i64);
    Some(Band {
        lo: lo.map(clamp),
        hi: hi.map(clamp),
        inside: inside.to_vec(),
        outside: outside.to_vec(),
    })
}

/// The constant that value `v` of `g` is: an initializer that is not also a graph input (a
/// default a caller may override), or the output of a `Constant` node with a tensor `value`, with
/// that node.
pub(crate) fn constant_tensor(g: &Graph, v: ValueId) -> Option<(&TensorData, Option<NodeId>)> {
    match &g.value(v).kind {
        ValueKind::Initializer(t) if !g.inputs.contains(&v) => Some((t, None)),
        ValueKind::Node { node, slot: 0 } => {
            let n = g.node(*node);
            match n.attr("value") {
                Some(AttrValue::Tensor(t)) if n.op == "Constant" && n.is_onnx_domain() => {
                    Some((t, Some(*node)))
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// Every constant of `g` ([`constant_tensor`]) of at least `min_bytes` that `kind` recognizes:
/// its value, contents, `Constant` node (if any) and what `kind` made of it.
pub(crate) fn large_constants<'a, K>(
    g: &'a Graph,
    min_bytes: u64,
    kind: impl Fn(&'a TensorData) -> Option<K>,
) -> Vec<(ValueId, &'a TensorData, Option<NodeId>, K)> {
    g.value_ids()
        .filter_map(|v| {
            let (t, node) = constant_tensor(g, v)?;
            (t.byte_len() >= min_bytes).then_some(())?;
            Some((v, t, node, kind(t)?))
        })
        .collect()
}

/// Value `v`'s integer contents at `dims`, when the facts know them.
pub(super) fn known_ints(
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    v: ValueId,
) -> Option<Vec<i64>> {
    match &facts.get(v).value {
        Some(Known::Int(e)) => e.iter().map(|e| e.eval_map(dims).ok()).collect(),
        _ => None,
    }
}

/// Input `k` of `node` as integers known at `dims`: `Some(None)` when the input is absent, `None`
/// when its contents are not known there.
pub(super) fn known_input(
    node: &Node,
    k: usize,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> Option<Option<Vec<i64>>> {
    match node.inputs.get(k).copied().flatten() {
        None => Some(None),
        Some(x) => known_ints(facts, dims, x).map(Some),
    }
}

/// A `Slice` node's bounds known at `dims`: `(axis, start, end, step)` per axis it cuts, as
/// written (an axis or a bound may be negative; absent axes and steps filled in).
pub(super) fn slice_bounds(
    node: &Node,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> Option<Vec<(i64, i64, i64, i64)>> {
    let known = |k: usize| known_input(node, k, facts, dims);
    let starts = known(1)??;
    let ends = known(2)??;
    let n = starts.len();
    let axes = known(3)?.unwrap_or_else(|| (0..n as i64).collect());
    let steps = known(4)?.unwrap_or_else(|| vec![1; n]);
    if ends.len() != n || axes.len() != n || steps.len() != n {
        return None;
    }
    Some(
        (0..n)
            .map(|i| (axes[i], starts[i], ends[i], steps[i]))
            .collect(),
    )
}

/// A `Slice` of a constant of positions, its bounds known: `(axis, start, end, step)` per axis it
/// cuts, `None` when it is not one this rewrite folds (bounds unknown at `dims`, or a cut of a
/// leading axis that does not keep its one element).
fn known_slice(
    node: &Node,
    v: ValueId,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    rank: usize,
) -> Option<Vec<(usize, i64, i64, i64)>> {
    if node.op != "Slice" || !node.is_onnx_domain() || node.inputs.first() != Some(&Some(v)) {
        return None;
    }
    if node.inputs.iter().skip(1).any(|&i| i == Some(v)) {
        return None;
    }
    let out = node.outputs.first().copied().flatten()?;
    let out_shape = facts.get(out).shape_at(dims)?;
    let mut cuts = Vec::new();
    for (axis, start, end, step) in slice_bounds(node, facts, dims)? {
        let a = if axis < 0 { axis + rank as i64 } else { axis };
        let a = usize::try_from(a).ok().filter(|&a| a < rank)?;
        if a + 2 < rank {
            // A leading axis of one element: kept or the fold does not apply.
            (out_shape.get(a) == Some(&1)).then_some(())?;
            continue;
        }
        cuts.push((a, start, end, step));
    }
    Some(cuts)
}

/// `model` with every constant ([`constant_tensor`]: a weight or a `Constant` node) of at least
/// `min_bytes` that is a constant of positions ([`band_of`]) made by nodes instead, from row and
/// column index constants: `lo <= j - i` as `GreaterOrEqual(columns, rows + lo)`, `j - i <= hi`
/// as `LessOrEqual(columns, rows + hi)`, both by `And`, then `Where(band, inside, outside)` of
/// scalars (a `bool` tensor: the band itself, or its `Not`). Where every reader is a `Slice` with
/// bounds known at `dims`, each slice is made so instead, from the slices of the index constants
/// (a pointwise op of a slice is the slice of the pointwise op), and neither the constant nor the
/// whole band is made. A value made keeps its name and id; the nodes go first (a `Constant` node
/// and a folded `Slice` are replaced). `None` when there is none.
pub(crate) fn constants_as_positions(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    min_bytes: u64,
) -> Option<Model> {
    let g = &model.graph;
    let found = large_constants(g, min_bytes, band_of);
    if found.is_empty() {
        return None;
    }
    let consumers = g.consumers();
    let mut out = g.clone();
    let mut names = Names::of(g);
    let first_new = out.nodes.len();
    let mut replaced: BTreeSet<NodeId> = BTreeSet::new();
    let mut gone = vec![false; g.values.len()];
    for (v, t, constant_node, band) in found {
        let base = g.value(v).name.clone();
        let (dtype, rank) = (t.dtype, t.dims.len());
        let (rows, cols) = (t.dims[rank - 2], t.dims[rank - 1]);
        // Each reader a slice with known bounds (and `v` no graph output): fold them.
        let readers = &consumers[v.index()];
        let slices: Option<Vec<(NodeId, Vec<(usize, i64, i64, i64)>)>> = (!g.outputs.contains(&v)
            && !readers.is_empty())
        .then(|| {
            readers
                .iter()
                .map(|&r| Some((r, known_slice(g.node(r), v, facts, dims, rank)?)))
                .collect()
        })
        .flatten();
        let mut e = Emitter {
            out: &mut out,
            names: &mut names,
            base: &base,
            rank,
        };
        let col = e.index("columns", 1, (0..cols as i64).collect());
        let row_lo = band
            .lo
            .map(|k| e.index("rows_plus_lo", 0, (0..rows as i64).map(|i| i + k).collect()));
        let row_hi = band
            .hi
            .map(|k| e.index("rows_plus_hi", 0, (0..rows as i64).map(|i| i + k).collect()));
        let folded = slices.is_some();
        match slices {
            Some(slices) => {
                for (r, cuts) in slices {
                    let y = g.node(r).outputs[0]?;
                    let cut = |e: &mut Emitter, x: ValueId, axis: usize| match cuts
                        .iter()
                        .find(|c| c.0 + 2 - rank == axis)
                    {
                        Some(&(a, s0, e0, st)) => e.slice(x, a, s0, e0, st),
                        None => x,
                    };
                    let c = cut(&mut e, col, 1);
                    let lo = row_lo.map(|x| cut(&mut e, x, 0));
                    let hi = row_hi.map(|x| cut(&mut e, x, 0));
                    e.band_into(&band, dtype, (c, lo, hi), y)?;
                    replaced.insert(r);
                }
            }
            None => e.band_into(&band, dtype, (col, row_lo, row_hi), v)?,
        }
        out.initializers.retain(|&x| x != v);
        if folded {
            gone[v.index()] = true;
        }
        replaced.extend(constant_node);
    }
    let schedule = super::rewrite::added_first(&out, first_new, &replaced);
    // A constant whose slices were folded is read by nothing: it goes (a `Constant` node's
    // output with its node).
    gone.resize(out.values.len(), false);
    let keep: Vec<bool> = gone.iter().map(|&x| !x).collect();
    let graph = super::rewrite::retain_values(crate::reorder(&out, &schedule), &keep);
    Some(Model {
        graph,
        ..model.clone()
    })
}

/// Writes the nodes of positions as values: index constants, slices of them, comparisons, for
/// one rewritten node or constant (`base` names them).
struct Emitter<'a> {
    out: &'a mut Graph,
    names: &'a mut Names,
    base: &'a str,
    rank: usize,
}

impl Emitter<'_> {
    fn name(&mut self, what: &str) -> String {
        self.names.fresh(&format!("{}/{what}", self.base))
    }

    /// An int64 constant of `values` along the row (`last` 0) or column (`last` 1) axis of the
    /// last two, ones elsewhere.
    fn index(&mut self, what: &str, last: usize, values: Vec<i64>) -> ValueId {
        let mut shape = vec![1u64; self.rank];
        shape[self.rank - 2 + last] = values.len() as u64;
        let name = self.name(what);
        self.out
            .add_initializer(TensorData::from_i64(name, shape, &values))
    }

    /// A scalar constant of `dtype` from one element's bytes.
    fn scalar(&mut self, what: &str, dtype: DataType, bytes: &[u8]) -> Option<ValueId> {
        let name = self.name(what);
        let t = TensorData::from_raw(name, dtype, Vec::new(), Bytes::copy_from_slice(bytes));
        Some(self.out.add_initializer(t.ok()?))
    }

    fn int1(&mut self, what: &str, x: i64) -> Option<ValueId> {
        let name = self.name(what);
        Some(
            self.out
                .add_initializer(TensorData::from_i64(name, vec![1], &[x])),
        )
    }

    /// `Slice(x, [start], [end], [axis], [step])`.
    fn slice(&mut self, x: ValueId, axis: usize, start: i64, end: i64, step: i64) -> ValueId {
        let ins: Vec<Option<ValueId>> = vec![
            Some(x),
            self.int1("slice_start", start),
            self.int1("slice_end", end),
            self.int1("slice_axis", axis as i64),
            self.int1("slice_step", step),
        ];
        let (node, out) = (self.name("slice"), self.name("sliced"));
        self.out
            .add_node(node, "Slice", &ins, &[&out], Vec::new())
            .1[0]
    }

    /// A node of `op` with one new output.
    fn op(&mut self, op: &str, inputs: &[Option<ValueId>]) -> ValueId {
        let lower = op.to_lowercase();
        let (node, out) = (self.name(&lower), self.name(&format!("{lower}_out")));
        self.out.add_node(node, op, inputs, &[&out], Vec::new()).1[0]
    }

    /// `band` of `dtype` from columns `col` against rows plus `lo` and plus `hi`, its last node
    /// writing value `y` (which becomes that node's output).
    fn band_into(
        &mut self,
        band: &Band,
        dtype: DataType,
        (col, lo, hi): (ValueId, Option<ValueId>, Option<ValueId>),
        y: ValueId,
    ) -> Option<()> {
        let mut conds = Vec::new();
        if let Some(lo) = lo {
            conds.push(self.op("GreaterOrEqual", &[Some(col), Some(lo)]));
        }
        if let Some(hi) = hi {
            conds.push(self.op("LessOrEqual", &[Some(col), Some(hi)]));
        }
        let cond = match conds[..] {
            [m] => m,
            [a, b] => self.op("And", &[Some(a), Some(b)]),
            _ => return None,
        };
        let (op, inputs) = if dtype == DataType::Bool {
            let op = if band.inside == [1] {
                "Identity"
            } else {
                "Not"
            };
            (op, vec![Some(cond)])
        } else {
            let a = self.scalar("inside", dtype, &band.inside)?;
            let b = self.scalar("outside", dtype, &band.outside)?;
            ("Where", vec![Some(cond), Some(a), Some(b)])
        };
        let nid = NodeId::from_index(self.out.nodes.len());
        let name = self.name("band");
        self.out
            .nodes
            .push(Node::new(name, op, inputs, vec![Some(y)]));
        self.out.values[y.index()].kind = ValueKind::Node { node: nid, slot: 0 };
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(dtype: DataType, dims: Vec<u64>, f: impl Fn(i64, i64) -> Vec<u8>) -> TensorData {
        let (r, c) = (dims[dims.len() - 2] as i64, dims[dims.len() - 1] as i64);
        let lead: u64 = dims[..dims.len() - 2].iter().product();
        let mut b = Vec::new();
        for _ in 0..lead {
            for i in 0..r {
                for j in 0..c {
                    b.extend(f(i, j));
                }
            }
        }
        TensorData::from_raw("t", dtype, dims, Bytes::from(b)).unwrap()
    }

    fn band(lo: Option<i64>, hi: Option<i64>, inside: &[u8], outside: &[u8]) -> Option<Band> {
        Some(Band {
            lo,
            hi,
            inside: inside.to_vec(),
            outside: outside.to_vec(),
        })
    }

    #[test]
    fn bands_of_diagonals_are_found_with_their_bounds_and_values() {
        let b = |x: bool| vec![x as u8];
        let (t, f) = (&[1u8][..], &[0u8][..]);
        // tril: true where j - i <= 0; a bool band is always the `true` run.
        let tril = tensor(DataType::Bool, vec![1, 1, 5, 7], |i, j| b(j <= i));
        assert_eq!(band_of(&tril), band(None, Some(0), t, f));
        let triu = tensor(DataType::Bool, vec![5, 7], |i, j| b(j - i >= 2));
        assert_eq!(band_of(&triu), band(Some(2), None, t, f));
        let window = tensor(DataType::Bool, vec![6, 6], |i, j| {
            b((-2..=0).contains(&(j - i)))
        });
        assert_eq!(band_of(&window), band(Some(-2), Some(0), t, f));
        let outside = tensor(DataType::Bool, vec![6, 6], |i, j| {
            b(!(-2..=0).contains(&(j - i)))
        });
        assert_eq!(band_of(&outside), band(Some(-2), Some(0), f, t));
        // Two float values: the first run is the band.
        let (z, n) = (0f32.to_le_bytes(), f32::NEG_INFINITY.to_le_bytes());
        let additive = tensor(DataType::F32, vec![4, 4], |i, j| {
            (if j <= i { z } else { n }).to_vec()
        });
        assert_eq!(band_of(&additive), band(None, Some(0), &z, &n));
        // An identity of int64: a band of one diagonal.
        let eye = tensor(DataType::I64, vec![3, 3], |i, j| {
            ((i == j) as i64).to_le_bytes().to_vec()
        });
        let one = 1i64.to_le_bytes();
        assert_eq!(
            band_of(&eye),
            band(Some(0), Some(0), &one, &0i64.to_le_bytes())
        );
        // Not bands: one value, a value off its diagonal, two bands, a leading dim over 1.
        assert_eq!(
            band_of(&tensor(DataType::Bool, vec![4, 4], |_, _| b(true))),
            None
        );
        let off = tensor(DataType::Bool, vec![4, 4], |i, j| {
            b(j <= i && (i, j) != (3, 1))
        });
        assert_eq!(band_of(&off), None);
        let two = tensor(DataType::Bool, vec![6, 6], |i, j| b((j - i).abs() == 2));
        assert_eq!(band_of(&two), None);
        assert_eq!(
            band_of(&tensor(DataType::Bool, vec![2, 4, 4], |i, j| b(j <= i))),
            None
        );
    }
}
