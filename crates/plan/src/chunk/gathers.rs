//! Movements as gathers: a chain of movement ops ([`Moves`]: reshapes, slices, transposes,
//! gathers of arithmetic progressions) copies each output element from an element of the chain's
//! input `x` whose flat offset is, at the dims, an affine function of the output element's index.
//! Where that function keeps every axis of `x` but one, `c`, and reads along `c` at
//! `a + sum_k b_k * o_k` (always inside `c`), the chain is `GatherElements(x, index, axis = c)` of
//! that index. When the index moves with another axis than `c` (a skew), the chain mixes axes in
//! the axis flow, but the gather passes every axis but `c`.
//!
//! XLNet's and Transformer-XL's relative shift is such a chain: `[.., S, 2S]` scores reshaped to
//! `[.., 2S, S]`, the first row dropped, reshaped back to `[.., S, 2S - 1]` and cut to `S`
//! columns, which is `out[.., i, j] = x[.., i, S - i + j]`. Written as a gather, a region grows
//! along the query rows through it: the whole attention chunks along rows, where the reshapes let
//! it split only its heads.
//!
//! The index is `Add(P, Q)` of two constants: `Q` the term of one long axis, `P` the rest (of the
//! output's size over that axis's extent), so it is made per chunk from slices of light values,
//! like positions (`positions`). The same elements are copied: the bits are the same.
//!
//! The proof is exact at the dims: each step's map is composed in closed form (a reshape needs the
//! map to be proportional to the strides within each group of axes it merges or splits; a gather
//! needs its indices to be an arithmetic progression), and the gather's index range is bounded
//! over the whole output box by the signs of its coefficients.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use memplan_ir::dtype::DataType;
use memplan_ir::graph::{Graph, Model, Names, Node, NodeId, ValueId, ValueKind};
use memplan_ir::infer::Facts;
use memplan_ir::ops::axes::{attr_int, norm};
use memplan_ir::ops::movement::transpose_perm;
use memplan_ir::ops::{self, Moves};
use memplan_ir::TensorData;

use super::positions::{known_input, known_ints, slice_bounds};
use super::rewrite::NewNode;

/// A map from an element index of a value (of `shape`) to the flat offset, in the chain's input,
/// of the element it copies: `offset + sum_k coef[k] * o[k]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Affine {
    pub(super) offset: i64,
    pub(super) coef: Vec<i64>,
    pub(super) shape: Vec<u64>,
}

impl Affine {
    /// The identity of a value of `shape`: its own flat offset.
    fn identity(shape: &[u64]) -> Affine {
        Affine {
            offset: 0,
            coef: strides(shape),
            shape: shape.to_vec(),
        }
    }

    /// Its value at every index of the box, row-major.
    pub(super) fn values(&self) -> Vec<i64> {
        let mut idx = vec![0u64; self.shape.len()];
        let n: u64 = self.shape.iter().product();
        let mut out = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let at: i64 = idx
                .iter()
                .zip(&self.coef)
                .map(|(&i, &c)| i as i64 * c)
                .sum();
            out.push(self.offset + at);
            for k in (0..idx.len()).rev() {
                idx[k] += 1;
                if idx[k] < self.shape[k] {
                    break;
                }
                idx[k] = 0;
            }
        }
        out
    }

    /// The least and greatest value over the whole index box (every extent at least 1).
    pub(super) fn range(&self) -> (i64, i64) {
        let (mut lo, mut hi) = (self.offset, self.offset);
        for (&c, &d) in self.coef.iter().zip(&self.shape) {
            let far = c * (d as i64 - 1);
            lo += far.min(0);
            hi += far.max(0);
        }
        (lo, hi)
    }

    /// The same map read through a reshape to `to` (same elements, same order): within each
    /// group of axes whose extents multiply to the same on both sides, the map must be one
    /// coefficient times the offset within the group. Axes of one element take no part.
    pub(super) fn reshaped(&self, to: &[u64]) -> Option<Affine> {
        let a: Vec<usize> = (0..self.shape.len())
            .filter(|&k| self.shape[k] != 1)
            .collect();
        let b: Vec<usize> = (0..to.len()).filter(|&k| to[k] != 1).collect();
        let mut coef = vec![0i64; to.len()];
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            let (i0, j0) = (i, j);
            let (mut pa, mut pb) = (self.shape[*a.get(i)?], to[*b.get(j)?]);
            (i, j) = (i + 1, j + 1);
            while pa != pb {
                if pa < pb {
                    pa = pa.checked_mul(self.shape[*a.get(i)?])?;
                    i += 1;
                } else {
                    pb = pb.checked_mul(to[*b.get(j)?])?;
                    j += 1;
                }
            }
            // The group's coefficient: its innermost axis's; every axis of it proportional.
            let gamma = self.coef[a[i - 1]];
            let mut inner = 1i64;
            for &k in a[i0..i].iter().rev() {
                (self.coef[k] == gamma.checked_mul(inner)?).then_some(())?;
                inner = inner.checked_mul(self.shape[k] as i64)?;
            }
            let mut inner = 1i64;
            for &k in b[j0..j].iter().rev() {
                coef[k] = gamma.checked_mul(inner)?;
                inner = inner.checked_mul(to[k] as i64)?;
            }
        }
        Some(Affine {
            offset: self.offset,
            coef,
            shape: to.to_vec(),
        })
    }
}

/// Row-major strides of `shape`, in elements.
pub(super) fn strides(shape: &[u64]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * shape[k + 1] as i64;
    }
    s
}

/// The output shape of `node` at `dims`, every extent at least 1.
pub(super) fn out_shape(
    node: &Node,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> Option<Vec<u64>> {
    let v = node.outputs.first().copied().flatten()?;
    let s = facts.get(v).shape_at(dims)?;
    s.iter().all(|&d| d > 0).then_some(s)
}

/// Integer value `v`'s contents as an affine map of its element index: known at `dims` (checked
/// element by element), or made by `Range` of known scalars, through reshapes, slices and
/// `Expand`s.
pub(super) fn progression(
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    v: ValueId,
) -> Option<Affine> {
    let shape = facts.get(v).shape_at(dims)?;
    if let Some(vals) = known_ints(facts, dims, v).or_else(|| stored_ints(g, v)) {
        return fit(&shape, &vals);
    }
    let node = g.node(g.producer(v)?);
    if !node.is_onnx_domain() {
        return None;
    }
    let x = node.inputs.first().copied().flatten()?;
    match ops::lookup(node)?.moves {
        Some(Moves::Order) => progression(g, facts, dims, x)?.reshaped(&shape),
        // Element `start + step * i` along each axis cut.
        Some(Moves::Strided) => {
            let mut m = progression(g, facts, dims, x)?;
            for (a, start, step) in strided(node, facts, dims, &m.shape.clone())? {
                m.offset = m.offset.checked_add(m.coef[a].checked_mul(start)?)?;
                m.coef[a] = m.coef[a].checked_mul(step)?;
            }
            m.shape = shape;
            Some(m)
        }
        // Broadcast, aligned at the last axis: an axis of one element repeats.
        _ if node.op == "Expand" => {
            let m = progression(g, facts, dims, x)?;
            let lead = shape.len().checked_sub(m.shape.len())?;
            let mut coef = vec![0; shape.len()];
            for (k, (&d, &c)) in m.shape.iter().zip(&m.coef).enumerate() {
                if d == shape[lead + k] {
                    coef[lead + k] = c;
                } else if d != 1 {
                    return None;
                }
            }
            Some(Affine {
                offset: m.offset,
                coef,
                shape,
            })
        }
        // `Range(start, limit, delta)` is the progression `start + delta * i`.
        _ if node.op == "Range" && shape.len() == 1 => {
            let scalar = |k| match known_input(node, k, facts, dims)?.as_deref() {
                Some(&[x]) => Some(x),
                _ => None,
            };
            Some(Affine {
                offset: scalar(0)?,
                coef: vec![scalar(2)?],
                shape,
            })
        }
        _ => None,
    }
}

/// The affine map that `vals` (row-major over `shape`) is, when it is one.
pub(super) fn fit(shape: &[u64], vals: &[i64]) -> Option<Affine> {
    let n: u64 = shape.iter().product();
    if n == 0 || vals.len() as u64 != n {
        return None;
    }
    let st = strides(shape);
    let offset = vals[0];
    let coef: Vec<i64> = (0..shape.len())
        .map(|k| {
            if shape[k] > 1 {
                vals[st[k] as usize] - offset
            } else {
                0
            }
        })
        .collect();
    let m = Affine {
        offset,
        coef,
        shape: shape.to_vec(),
    };
    (m.values() == vals).then_some(m)
}

/// A `Slice` node's cuts of an input of shape `from`: `(axis, start, step)`, the start resolved
/// and clamped as ONNX says (to `[0, d]` for a positive step, `[-1, d - 1]` for a negative one).
pub(super) fn strided(
    node: &Node,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    from: &[u64],
) -> Option<Vec<(usize, i64, i64)>> {
    slice_bounds(node, facts, dims)?
        .into_iter()
        .map(|(a, s, _, st)| {
            let a = norm(a, from.len())?;
            let d = from[a] as i64;
            let s = if s < 0 { s.saturating_add(d) } else { s };
            let s = if st > 0 {
                s.clamp(0, d)
            } else {
                s.clamp(-1, d - 1)
            };
            Some((a, s, st))
        })
        .collect()
}

/// The indices `v` of a gather along an axis of extent `d` as a progression counted from the
/// axis's start: all inside it, all counted from its start or all from its end.
pub(super) fn index_in_axis(
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    v: ValueId,
    d: u64,
) -> Option<Affine> {
    let mut idx = progression(g, facts, dims, v)?;
    let d = d as i64;
    let (lo, hi) = idx.range();
    if lo >= -d && hi < 0 {
        idx.offset += d;
    } else if lo < 0 || hi >= d {
        return None;
    }
    Some(idx)
}

/// The contents of an integer weight, however large: the facts carry contents of at most
/// `MAX_KNOWN_ELEMS` elements, and a scatter's rows (8191 of them for Funnel's shifted scores at
/// S=4096) may be more.
fn stored_ints(g: &Graph, v: ValueId) -> Option<Vec<i64>> {
    match &g.value(v).kind {
        ValueKind::Initializer(t) if matches!(t.dtype, DataType::I64 | DataType::I32) => {
            t.to_i64_vec()
        }
        _ => None,
    }
}

/// `m` (the map of `node`'s input 0) composed with `node`'s own move, at its output shape.
fn step(
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    node: &Node,
    m: &Affine,
) -> Option<Affine> {
    let to = out_shape(node, facts, dims)?;
    let rank = m.shape.len();
    match ops::lookup(node)?.moves? {
        Moves::Order => m.reshaped(&to),
        Moves::Permuted => {
            let coef = transpose_perm(node, rank)
                .iter()
                .map(|&p| m.coef.get(usize::try_from(p).ok()?).copied())
                .collect::<Option<Vec<i64>>>()?;
            (coef.len() == to.len()).then_some(Affine {
                offset: m.offset,
                coef,
                shape: to,
            })
        }
        Moves::Strided => {
            if to.len() != rank {
                return None;
            }
            let mut out = Affine {
                shape: to,
                ..m.clone()
            };
            for (a, s, st) in strided(node, facts, dims, &m.shape)? {
                out.offset = out.offset.checked_add(m.coef[a].checked_mul(s)?)?;
                out.coef[a] = m.coef[a].checked_mul(st)?;
            }
            Some(out)
        }
        // An element of a scatter's output comes from one input or another by where it lies,
        // and a pad's from its input or the constant: not one map (`scatters` reads through
        // scatters backwards, over a known output box; `pads` writes a pad as a gather).
        Moves::Scatters | Moves::Padded => None,
        Moves::Indexed => {
            let a = norm(attr_int(node, "axis", 0), rank)?;
            let idx = index_in_axis(
                g,
                facts,
                dims,
                node.inputs.get(1).copied().flatten()?,
                m.shape[a],
            )?;
            let mut coef = m.coef[..a].to_vec();
            coef.extend(idx.coef.iter().map(|&c| m.coef[a] * c));
            coef.extend(&m.coef[a + 1..]);
            (coef.len() == to.len()).then_some(Affine {
                offset: m.offset + m.coef[a] * idx.offset,
                coef,
                shape: to,
            })
        }
    }
}

/// A chain proved a gather: `GatherElements(x, a + sum_k b[k] * o[k], axis)`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Gather {
    /// The chain's nodes, first to last; the last one's output is the gather's.
    pub(crate) nodes: Vec<NodeId>,
    x: ValueId,
    axis: usize,
    offset: i64,
    coef: Vec<i64>,
    shape: Vec<u64>,
    /// `x`'s extent along `axis`.
    extent: u64,
}

/// Whether `node` moves elements of its input 0 ([`Moves`]) in a form [`step`] can read.
fn moves(node: &Node) -> bool {
    node.is_onnx_domain()
        && ops::lookup(node).is_some_and(|d| {
            d.moves
                .is_some_and(|m| !matches!(m, Moves::Scatters | Moves::Padded))
        })
}

/// The gather that map `m` (over the chain's output) of input `x` (of `xs` at `dims`) is, when
/// it keeps every axis but one and moves along that one with another axis (a skew).
fn as_gather(m: &Affine, xs: &[u64]) -> Option<(usize, i64, Vec<i64>)> {
    let r = xs.len();
    if m.shape.len() != r {
        return None;
    }
    let st = strides(xs);
    'axis: for c in 0..r {
        let mut coef = vec![0i64; r];
        for k in 0..r {
            if k != c && m.shape[k] > xs[k] {
                continue 'axis;
            }
            if m.shape[k] == 1 {
                continue;
            }
            let own = if k == c { 0 } else { st[k] };
            let rest = m.coef[k] - own;
            if rest % st[c] != 0 {
                continue 'axis;
            }
            coef[k] = rest / st[c];
        }
        if m.offset % st[c] != 0 {
            continue;
        }
        let g = Affine {
            offset: m.offset / st[c],
            coef,
            shape: m.shape.clone(),
        };
        let (lo, hi) = g.range();
        let skew = (0..r).any(|k| k != c && g.coef[k] != 0);
        if lo >= 0 && hi < xs[c] as i64 && skew {
            return Some((c, g.offset, g.coef));
        }
    }
    None
}

/// Every chain of movement ops of `g` that is a gather ([`as_gather`]) whose output is of at
/// least `min_bytes`: the longest such chain ending at each node whose output no movement op
/// alone reads. Chains are disjoint: each value inside one has its next node as its one reader.
pub(crate) fn gather_chains(
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    min_bytes: u64,
) -> Vec<Gather> {
    let consumers = g.consumers();
    let only_reader = |v: ValueId| match consumers[v.index()][..] {
        [r] if !g.outputs.contains(&v) => Some(r),
        _ => None,
    };
    let mut found = Vec::new();
    for (i, node) in g.nodes.iter().enumerate() {
        let end = NodeId::from_index(i);
        let Some(out) = node.outputs.first().copied().flatten() else {
            continue;
        };
        if !moves(node) || only_reader(out).is_some_and(|r| moves(g.node(r))) {
            continue;
        }
        if !super::rewrite::holds_at_least(facts, dims, out, min_bytes) {
            continue;
        }
        // The chain back from `end`: each node's input 0 read by it alone, made by a move.
        let mut chain = vec![end];
        loop {
            let first = g.node(chain[0]);
            let Some(x) = first.inputs.first().copied().flatten() else {
                break;
            };
            match g.producer(x) {
                Some(p) if moves(g.node(p)) && only_reader(x) == Some(chain[0]) => {
                    chain.insert(0, p)
                }
                _ => break,
            }
        }
        // The longest suffix that is a gather.
        for s in 0..chain.len() {
            if let Some(found_one) = prove(g, facts, dims, &chain[s..]) {
                found.push(found_one);
                break;
            }
        }
    }
    found
}

/// The gather that `chain` is, when it is one.
fn prove(
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    chain: &[NodeId],
) -> Option<Gather> {
    let x = g.node(chain[0]).inputs.first().copied().flatten()?;
    let xs = facts.get(x).shape_at(dims)?;
    if xs.contains(&0) {
        return None;
    }
    let mut m = Affine::identity(&xs);
    for &n in chain {
        m = step(g, facts, dims, g.node(n), &m)?;
    }
    let (axis, offset, coef) = as_gather(&m, &xs)?;
    Some(Gather {
        nodes: chain.to_vec(),
        x,
        axis,
        offset,
        coef,
        shape: m.shape,
        extent: xs[axis],
    })
}

/// The nodes of every chain [`gather_chains`] finds (of any size): chunking writes them as a
/// gather that every axis but one splits.
pub(crate) fn gather_chain_nodes(
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> BTreeSet<NodeId> {
    gather_chains(g, facts, dims, 0)
        .into_iter()
        .flat_map(|c| c.nodes)
        .collect()
}

/// `model` with every chain of [`gather_chains`] of at least `min_bytes` written as its
/// `GatherElements`, or `None` when there is none. The last node of a chain becomes the gather
/// (its name and output kept), the others go; the index is `Add(P, Q)` of two constants (see the
/// module docs), placed right before it.
pub(crate) fn movements_as_gathers(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    min_bytes: u64,
) -> Option<Model> {
    let g = &model.graph;
    let chains: Vec<(Gather, (Affine, Affine))> = gather_chains(g, facts, dims, min_bytes)
        .into_iter()
        .filter_map(|c| light_terms(&c).map(|t| (c, t)))
        .collect();
    if chains.is_empty() {
        return None;
    }
    let mut out = g.clone();
    let mut names = Names::of(g);
    let mut before: BTreeMap<usize, Vec<NodeId>> = BTreeMap::new();
    let mut gone: BTreeSet<NodeId> = BTreeSet::new();
    // Values the chains' nodes read before: their makers may be read by nothing now.
    let mut unread: Vec<ValueId> = Vec::new();
    for (c, (p, q)) in chains {
        let end = *c.nodes.last()?;
        let base = out.node(end).name.clone();
        let dtype = if c.extent <= i32::MAX as u64 {
            DataType::I32
        } else {
            DataType::I64
        };
        // A term's values over its own box, as a constant of the index's type.
        let mut constant = |what: &str, term: Affine| {
            let name = names.fresh(&format!("{base}/{what}"));
            let vals = term.values();
            let t = match dtype {
                DataType::I32 => {
                    let raw: Vec<u8> = vals
                        .iter()
                        .flat_map(|&x| (x as i32).to_le_bytes())
                        .collect();
                    TensorData::from_raw(name, dtype, term.shape, Bytes::from(raw)).ok()
                }
                _ => Some(TensorData::from_i64(name, term.shape, &vals)),
            };
            t.map(|t| out.add_initializer(t))
        };
        let pv = constant("gather_rest", p)?;
        let qv = constant("gather_along", q)?;
        let (add, idx) = (
            names.fresh(&format!("{base}/gather_index_add")),
            names.fresh(&format!("{base}/gather_index")),
        );
        let (add_id, outs) = out.add_node(add, "Add", &[Some(pv), Some(qv)], &[&idx], Vec::new());
        before.insert(end.index(), vec![add_id]);
        let node = &mut out.nodes[end.index()];
        unread.extend(node.input_ids());
        gather("GatherElements", c.x, outs[0], c.axis).replace(node);
        for &n in &c.nodes[..c.nodes.len() - 1] {
            unread.extend(g.node(n).input_ids());
            gone.insert(n);
        }
    }
    // The chain's inner values are read by nothing now: they go with their nodes.
    Some(super::rewrite::finish(model, &out, &before, gone, unread))
}

/// `model` with every slice of at least `min_bytes` that copies (not a view, [`ops::is_view`]) and
/// cuts one axis written as a `Gather` along it of the positions it keeps (an int64 constant,
/// `start + step * i`): the same elements, so the same bits, and a copy either way. A slice's
/// axis flow mixes the axis it cuts, but a gather's positions are sliced per chunk over its input
/// read whole, so a region splits that axis (BigBird's band of key blocks `l - 1, l, l + 1` for
/// query block `l`: three slices of the blocks at offsets 1, 2 and 3, concatenated). `None` when
/// there is none. A slice is the op whose record says [`Moves::Strided`].
pub(crate) fn slices_as_gathers(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    min_bytes: u64,
) -> Option<Model> {
    super::rewrite::rewrite_nodes(model, |node, add| {
        let (x, axis, positions) = cut_positions(node, facts, dims, min_bytes)?;
        let base = format!("{}/positions", node.name);
        let idx = add.ints(&base, vec![positions.len() as u64], &positions);
        Some(gather("Gather", x, idx, axis))
    })
}

/// Gather op `op` (`Gather` or `GatherElements`) of `x` at `index` along `axis`, as a node
/// rewritten in place becomes.
pub(super) fn gather(op: &'static str, x: ValueId, index: ValueId, axis: usize) -> NewNode {
    NewNode {
        op,
        inputs: vec![Some(x), Some(index)],
        attrs: vec![super::rewrite::axis_attr(axis)],
    }
}

/// For a slice ([`Moves::Strided`]) of at least `min_bytes` that copies and cuts one axis of its
/// input: see [`slice_cut`].
fn cut_positions(
    node: &Node,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    min_bytes: u64,
) -> Option<(ValueId, usize, Vec<i64>)> {
    let y = node.outputs.first().copied().flatten()?;
    if !super::rewrite::holds_at_least(facts, dims, y, min_bytes) {
        return None;
    }
    let (ins, outs) = facts.node_io(node);
    if ops::is_view(node, &ins, &outs) {
        return None;
    }
    slice_cut(node, facts, dims)
}

/// For a slice ([`Moves::Strided`]) that cuts one axis of its input (every other axis kept whole,
/// step 1): its input, that axis and the positions it keeps along it, all inside the axis.
pub(super) fn slice_cut(
    node: &Node,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> Option<(ValueId, usize, Vec<i64>)> {
    if ops::lookup(node).and_then(|d| d.moves) != Some(Moves::Strided) {
        return None;
    }
    let x = node.inputs.first().copied().flatten()?;
    let y = node.outputs.first().copied().flatten()?;
    let from = facts.get(x).shape_at(dims)?;
    let to = facts.get(y).shape_at(dims)?;
    if from.len() != to.len() {
        return None;
    }
    let cut: Vec<(usize, i64, i64)> = strided(node, facts, dims, &from)?
        .into_iter()
        .filter(|&(a, _, st)| st != 1 || to[a] != from[a])
        .collect();
    let [(axis, start, step)] = cut[..] else {
        return None;
    };
    let d = from[axis] as i64;
    let positions: Vec<i64> = (0..to[axis] as i64).map(|i| start + step * i).collect();
    positions
        .iter()
        .all(|&p| (0..d).contains(&p))
        .then_some((x, axis, positions))
}

/// The index's two terms `(P, Q)`, each over its own box: with `long` the axis of the most
/// elements among those the index moves with, `Q` its term (`b[long] * o`, extent 1 elsewhere),
/// `P` the rest (`a + sum_k b[k] * o[k]` over the other axes, extent 1 along `long`); their sum
/// broadcasts to the output. `None` when `P` would not be at most a sixteenth of the output's
/// elements.
fn light_terms(c: &Gather) -> Option<(Affine, Affine)> {
    let r = c.shape.len();
    let long = (0..r)
        .filter(|&k| c.coef[k] != 0)
        .max_by_key(|&k| (c.shape[k], k))?;
    let total: u64 = c.shape.iter().product();
    let rest = total / c.shape[long];
    (rest.checked_mul(16)? <= total).then_some(())?;
    let mut q_coef = vec![0; r];
    q_coef[long] = c.coef[long];
    let mut q_shape = vec![1u64; r];
    q_shape[long] = c.shape[long];
    let q = Affine {
        offset: 0,
        coef: q_coef,
        shape: q_shape,
    };
    let mut p_coef = c.coef.clone();
    p_coef[long] = 0;
    let mut p_shape = c.shape.clone();
    p_shape[long] = 1;
    let p = Affine {
        offset: c.offset,
        coef: p_coef,
        shape: p_shape,
    };
    Some((p, q))
}

#[cfg(test)]
mod tests {
    use super::*;
    use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType, ValueKind};

    /// Builds a graph node by node: each node has one output, named after it.
    struct B(Graph);

    impl B {
        fn ints(&mut self, name: &str, dims: Vec<u64>, v: &[i64]) -> ValueId {
            self.0.add_initializer(TensorData::from_i64(name, dims, v))
        }

        fn op(&mut self, op: &str, ins: &[ValueId], attrs: &[(&str, i64)]) -> ValueId {
            let name = format!("n{}", self.0.nodes.len());
            let ins: Vec<Option<ValueId>> = ins.iter().map(|&v| Some(v)).collect();
            let attrs = attrs
                .iter()
                .map(|&(n, v)| Attribute {
                    name: n.into(),
                    value: AttrValue::Int(v),
                    doc: String::new(),
                })
                .collect();
            self.0.add_node(name.clone(), op, &ins, &[&name], attrs).1[0]
        }

        /// Dim `k` of `x`'s shape, as a `[1]` tensor.
        fn dim(&mut self, x: ValueId, k: i64) -> ValueId {
            let s = self.op("Shape", &[x], &[]);
            let i = self.ints(&format!("dim{}", self.0.values.len()), vec![1], &[k]);
            self.op("Gather", &[s, i], &[])
        }
    }

    /// `x [1, H, S, T]` with `T = 2S`, and the graph builder holding it.
    fn scores() -> (B, ValueId) {
        let mut b = B(Graph::default());
        let p = |s: &str| DeclDim::Param(s.into());
        let dims = vec![DeclDim::Value(1), DeclDim::Value(3), p("S"), p("T")];
        let x = b.0.add_input("x", DeclType::tensor(DataType::F32, dims));
        (b, x)
    }

    fn chains(b: B, y: ValueId, s: i64) -> Vec<Gather> {
        let mut g = b.0;
        g.outputs = vec![y];
        let model = Model {
            graph: g,
            ..Model::default()
        };
        let dims = BTreeMap::from([("S".to_string(), s), ("T".to_string(), 2 * s)]);
        let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
        gather_chains(&model.graph, &facts, &dims, 0)
    }

    /// XLNet's relative shift, its reshape targets and the index range computed from `Shape`
    /// (as TorchScript writes them): `out[0, h, i, j] = x[0, h, i, S - i + j]`.
    #[test]
    fn a_relative_shift_is_a_gather_along_its_last_axis() {
        let (mut b, x) = scores();
        let d: Vec<ValueId> = (0..4).map(|k| b.dim(x, k)).collect();
        let swapped = b.op("Concat", &[d[0], d[1], d[3], d[2]], &[("axis", 0)]);
        let r1 = b.op("Reshape", &[x, swapped], &[]);
        let (one, big, two) = (
            b.ints("one", vec![1], &[1]),
            b.ints("big", vec![1], &[i64::MAX]),
            b.ints("two", vec![1], &[2]),
        );
        let cut = b.op("Slice", &[r1, one, big, two], &[]);
        let t1 = b.op("Sub", &[d[3], one], &[]);
        let back = b.op("Concat", &[d[0], d[1], d[2], t1], &[("axis", 0)]);
        let r2 = b.op("Reshape", &[cut, back], &[]);
        let (zero, step) = (b.ints("zero", vec![], &[0]), b.ints("step", vec![], &[1]));
        let axes0 = b.ints("axes0", vec![1], &[0]);
        let s = b.op("Squeeze", &[d[2], axes0], &[]);
        let range = b.op("Range", &[zero, s, step], &[]);
        let y = b.op("Gather", &[r2, range], &[("axis", 3)]);
        for s in [2, 5, 16] {
            let found = chains(B(b.0.clone()), y, s);
            assert_eq!(found.len(), 1, "S={s}");
            let c = &found[0];
            assert_eq!(
                c.nodes.len(),
                4,
                "S={s}: the reshapes, the slice and the gather"
            );
            assert_eq!(
                (c.axis, c.offset, &c.coef[..], &c.shape[..], c.extent),
                (
                    3,
                    s,
                    &[0, 0, -1, 1][..],
                    &[1, 3, s as u64, s as u64][..],
                    2 * s as u64
                ),
                "S={s}"
            );
        }
    }

    /// Not gathers: a reshape that reads a row's elements from two rows of its input (rows mix,
    /// the map is not affine in the row), and a slice (no skew: the chunker splits it already).
    #[test]
    fn maps_that_mix_rows_or_do_not_skew_are_not_gathers() {
        let (mut b, x) = scores();
        let shape = b.ints("halves", vec![4], &[1, 3, 32, 8]);
        let r = b.op("Reshape", &[x, shape], &[]);
        let (zero, sixteen, two) = (
            b.ints("zero", vec![1], &[0]),
            b.ints("sixteen", vec![1], &[16]),
            b.ints("two", vec![1], &[2]),
        );
        let y = b.op("Slice", &[r, zero, sixteen, two], &[]);
        assert_eq!(chains(b, y, 8), vec![]);
        let (mut b, x) = scores();
        let (one, four, three) = (
            b.ints("one", vec![1], &[1]),
            b.ints("four", vec![1], &[4]),
            b.ints("three", vec![1], &[3]),
        );
        let y = b.op("Slice", &[x, one, four, three], &[]);
        assert_eq!(chains(b, y, 8), vec![]);
    }

    /// A slice that copies and cuts one axis is a gather of the positions it keeps (a start
    /// counted from the end, a step of 2); a slice that is a view (only extent-1 axes before the
    /// cut one, every later one whole) and one that cuts two axes stay slices.
    #[test]
    fn a_slice_that_copies_along_one_axis_is_a_gather_of_its_positions() {
        let gathers = |b: B, y: ValueId| -> Vec<(i64, Vec<i64>)> {
            let mut g = b.0;
            g.outputs = vec![y];
            let model = Model {
                graph: g,
                ..Model::default()
            };
            let dims = BTreeMap::from([("S".to_string(), 8), ("T".to_string(), 16)]);
            let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
            let Some(m) = slices_as_gathers(&model, &facts, &dims, 0) else {
                return Vec::new();
            };
            let g = &m.graph;
            g.nodes
                .iter()
                .filter(|n| n.op == "Gather")
                .map(|n| {
                    let axis = attr_int(n, "axis", 0);
                    let idx = n.inputs[1].unwrap();
                    let ValueKind::Initializer(t) = &g.value(idx).kind else {
                        panic!("positions are a constant");
                    };
                    (axis, t.to_i64_vec().unwrap())
                })
                .collect()
        };
        let (mut b, x) = scores();
        let (from_end, end, axis, two) = (
            b.ints("from_end", vec![1], &[-6]),
            b.ints("end", vec![1], &[8]),
            b.ints("axis", vec![1], &[2]),
            b.ints("two", vec![1], &[2]),
        );
        let y = b.op("Slice", &[x, from_end, end, axis, two], &[]);
        assert_eq!(gathers(b, y), vec![(2, vec![2, 4, 6])]);
        let (mut b, x) = scores();
        let (one, two, axis1) = (
            b.ints("one", vec![1], &[1]),
            b.ints("two", vec![1], &[2]),
            b.ints("axis1", vec![1], &[1]),
        );
        let view = b.op("Slice", &[x, one, two, axis1], &[]);
        assert_eq!(gathers(b, view), vec![]);
        let (mut b, x) = scores();
        let (starts, ends, axes) = (
            b.ints("starts", vec![2], &[1, 1]),
            b.ints("ends", vec![2], &[4, 4]),
            b.ints("axes", vec![2], &[2, 3]),
        );
        let both = b.op("Slice", &[x, starts, ends, axes], &[]);
        assert_eq!(gathers(b, both), vec![]);
    }
}
