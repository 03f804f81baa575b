//! Selections sunk to what they select from. A large value read only by a selection of known
//! positions (a `Slice` of known bounds, a `Gather` of known indices) is made whole and then
//! mostly thrown away: transformers' `create_bidirectional_mask(...)[:, 0, 0, :]` builds an
//! `[B, 1, S, S]` mask to keep one row of it. Where the value's maker splits the selected axes
//! (its axis flow says [`AxisFlow::Split`]: each position along the axis needs only the same
//! position of its inputs), the maker runs on the selected positions of its inputs instead, and
//! the selection moves to them; again, through every large value only the moved selection reads.
//! Each element is computed by the same kernel from the same elements, so the bits are the same;
//! the work and the bytes shrink to the part selected.

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::graph::{Graph, Model, Names, Node, NodeId, ValueId};
use memplan_ir::infer::Facts;
use memplan_ir::ops::axes::{attr_int, norm, AxisFlow};
use memplan_ir::ops::{self, Moves};

use super::gathers::{index_in_axis, strided};
use super::rewrite::{axis_attr, holds_at_least, shape_input, Adder, NewNode};

/// The positions kept along each axis cut, ascending by axis: each inside its axis, at least one.
type Cut = BTreeMap<usize, Vec<i64>>;

/// How a selection node is rewritten once what it selected is made already selected.
enum Then {
    /// The made value is the selection's output (a slice, a gather of a list of indices).
    Identity,
    /// A gather of one index keeps its op, now at index 0 of the made axis of one element.
    FirstOf,
}

/// The selection `node` makes of its input 0, when its positions are known at `dims`, each inside
/// its axis, and it keeps fewer positions than there are along some axis.
fn selection(
    g: &Graph,
    node: &Node,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> Option<(ValueId, Cut, Then)> {
    if !node.is_onnx_domain() {
        return None;
    }
    let x = node.inputs.first().copied().flatten()?;
    let from = facts.get(x).shape_at(dims)?;
    let (cut, then) = match ops::lookup(node)?.moves? {
        Moves::Strided => {
            let y = node.outputs.first().copied().flatten()?;
            let to = facts.get(y).shape_at(dims)?;
            let cut: Cut = strided(node, facts, dims, &from)?
                .into_iter()
                .filter(|&(a, _, step)| step != 1 || to.get(a) != from.get(a))
                .map(|(a, start, step)| {
                    let n = *to.get(a)? as i64;
                    Some((a, (0..n).map(|i| start + step * i).collect()))
                })
                .collect::<Option<_>>()?;
            (cut, Then::Identity)
        }
        Moves::Indexed if node.op == "Gather" => {
            let axis = norm(attr_int(node, "axis", 0), from.len())?;
            let index = node.inputs.get(1).copied().flatten()?;
            let idx = index_in_axis(g, facts, dims, index, from[axis])?;
            let then = match idx.shape.len() {
                0 => Then::FirstOf,
                1 => Then::Identity,
                _ => return None,
            };
            (BTreeMap::from([(axis, idx.values())]), then)
        }
        _ => return None,
    };
    let inside = cut.iter().all(|(&a, p)| {
        let d = from[a] as i64;
        !p.is_empty() && p.iter().all(|i| (0..d).contains(i))
    });
    let fewer = cut.iter().any(|(&a, p)| (p.len() as u64) < from[a]);
    (inside && fewer).then_some((x, cut, then))
}

/// The rewrite in progress: the graph grown so far, and what it has taken.
struct Sinker<'a> {
    g: &'a Graph,
    facts: &'a Facts,
    dims: &'a BTreeMap<String, i64>,
    min_bytes: u64,
    /// Each value's readers (each node once).
    readers: Vec<Vec<NodeId>>,
    out: Graph,
    names: Names,
    /// New nodes, in the order they were added (each after what it reads).
    added: Vec<NodeId>,
    /// Original nodes a selection moved through: made by nothing now.
    through: BTreeSet<NodeId>,
    /// The most elements of a value cut as it is ([`Self::cut_of`]) since this was last reset.
    widest_cut: u64,
    /// The values the selection being moved moves through, with the cut each of their makers'
    /// inputs needs ([`Self::moves`]).
    moving: BTreeMap<ValueId, Vec<Cut>>,
    /// What the selection being moved has made: each cut of a value, made once.
    made: BTreeMap<(ValueId, Cut), ValueId>,
}

impl Sinker<'_> {
    /// Where the nodes of the selection being moved are added.
    fn add(&mut self) -> Adder<'_> {
        Adder {
            out: &mut self.out,
            names: &mut self.names,
            added: &mut self.added,
        }
    }

    /// The maker of `v` when a selection of it could move into its inputs: `v` large, not a
    /// graph output, the maker's only output, and every axis of `cut` split by the maker's flow.
    /// With, per input slot, the cut that input needs (none: read whole).
    fn movable(&self, v: ValueId, cut: &Cut) -> Option<(NodeId, Vec<Cut>)> {
        if !holds_at_least(self.facts, self.dims, v, self.min_bytes) || self.g.outputs.contains(&v)
        {
            return None;
        }
        let p = self.g.producer(v)?;
        let node = self.g.node(p);
        if !node.is_onnx_domain() || node.output_ids().count() != 1 || node.outputs[0] != Some(v) {
            return None;
        }
        let shape = self.facts.get(v).shape_at(self.dims)?;
        if cut.keys().any(|&a| a >= shape.len()) {
            return None;
        }
        let flows = super::region::flows(self.g, self.facts, self.dims, p)?;
        let mut cuts: Vec<Cut> = vec![Cut::new(); node.inputs.len()];
        for (&a, positions) in cut {
            let AxisFlow::Split(per_input) = flows.first()?.get(a)? else {
                return None;
            };
            for (slot, axis) in per_input.iter().enumerate() {
                if let Some(b) = axis {
                    cuts.get_mut(slot)?.insert(*b, positions.clone());
                }
            }
        }
        Some((p, cuts))
    }

    /// The values selection `sel` of `x` (its positions `cut`) moves through, each with the cuts
    /// its maker's inputs need: from `x` up, the makers that could move it ([`Self::movable`]),
    /// less those whose output is asked whole or in two different cuts, or read by a node that
    /// stays (the selection aside); a maker it moves through is made by nothing after. A value
    /// read several times on the way (`mask * x + (1 - mask) * y`) is moved through once.
    fn moves(&self, sel: NodeId, x: ValueId, cut: &Cut) -> BTreeMap<ValueId, Vec<Cut>> {
        let mut asked: BTreeMap<ValueId, Cut> = BTreeMap::from([(x, cut.clone())]);
        let mut twice: BTreeSet<ValueId> = BTreeSet::new();
        let mut moving: BTreeMap<ValueId, Vec<Cut>> = BTreeMap::new();
        let mut work = vec![(x, cut.clone())];
        while let Some((v, c)) = work.pop() {
            let Some((p, cuts)) = self.movable(v, &c) else {
                continue;
            };
            let node = self.g.node(p);
            for (slot, u) in node.inputs.iter().enumerate() {
                let Some(u) = *u else { continue };
                if shape_input(node) == Some(slot) {
                    continue;
                }
                let want = &cuts[slot];
                match asked.get(&u) {
                    Some(prev) if prev != want => {
                        twice.insert(u);
                    }
                    Some(_) => {}
                    None => {
                        asked.insert(u, want.clone());
                        if !want.is_empty() {
                            work.push((u, want.clone()));
                        }
                    }
                }
            }
            moving.insert(v, cuts);
        }
        for v in &twice {
            moving.remove(v);
        }
        // A maker whose output a staying node reads stays; then so may the makers it reads.
        loop {
            let makers: BTreeSet<NodeId> =
                moving.keys().filter_map(|&v| self.g.producer(v)).collect();
            let stays = |v: &ValueId| {
                self.readers[v.index()]
                    .iter()
                    .any(|r| *r != sel && !makers.contains(r))
            };
            let staying: Vec<ValueId> = moving.keys().copied().filter(stays).collect();
            if staying.is_empty() {
                return moving;
            }
            for v in staying {
                moving.remove(&v);
            }
        }
    }

    /// A value holding `cut` of original value `v`: made by `v`'s maker on its inputs' cuts where
    /// the selection moves through `v` ([`Self::moves`]), else a slice (or gathers) of `v`; each
    /// once.
    fn select(&mut self, v: ValueId, cut: &Cut) -> Option<ValueId> {
        let key = (v, cut.clone());
        if let Some(&id) = self.made.get(&key) {
            return Some(id);
        }
        let id = match self.moving.get(&v).cloned() {
            Some(cuts) => self.remake(self.g.producer(v)?, &cuts, cut)?,
            None => self.cut_of(v, cut),
        };
        self.made.insert(key, id);
        Some(id)
    }

    /// Node `p` made again on the cuts `cuts` of its inputs, its output the cut `cut` of its own.
    fn remake(&mut self, p: NodeId, cuts: &[Cut], cut: &Cut) -> Option<ValueId> {
        let node = self.g.node(p).clone();
        let y = node.outputs[0]?;
        let mut shape = self.facts.get(y).shape_at(self.dims)?;
        for (&a, positions) in cut {
            *shape.get_mut(a)? = positions.len() as u64;
        }
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for (slot, inp) in node.inputs.iter().enumerate() {
            let Some(x) = *inp else {
                inputs.push(None);
                continue;
            };
            // A Reshape's or Expand's target: the output's own shape, now the cut one.
            if shape_input(&node) == Some(slot) {
                let s: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
                let base = format!("{}_selected_shape", self.g.value(y).name);
                inputs.push(Some(self.add().ints(&base, vec![s.len() as u64], &s)));
                continue;
            }
            let c = &cuts[slot];
            if c.is_empty() {
                inputs.push(Some(x));
                continue;
            }
            let id = self.select(x, c)?;
            inputs.push(Some(id));
        }
        self.through.insert(p);
        let base = format!("{}_selected", node.name);
        let out = self
            .add()
            .node(&base, &node.op, &inputs, node.attrs.clone());
        if let Some(&id) = self.added.last() {
            self.out.nodes[id.index()].domain = node.domain.clone();
        }
        Some(out)
    }

    /// `cut` of `v` taken as it is: one `Slice` of the axes whose positions step forward evenly,
    /// a `Gather` along each other axis.
    fn cut_of(&mut self, v: ValueId, cut: &Cut) -> ValueId {
        let elements = self
            .facts
            .get(v)
            .shape_at(self.dims)
            .map_or(u64::MAX, |sh| {
                let kept = |(a, &d): (usize, &u64)| cut.get(&a).map_or(d, |p| p.len() as u64);
                sh.iter().enumerate().map(kept).product()
            });
        self.widest_cut = self.widest_cut.max(elements);
        let base = self.g.value(v).name.clone();
        let mut cur = v;
        let mut slice: Vec<[i64; 4]> = Vec::new();
        for (&a, p) in cut {
            let step = if p.len() > 1 { p[1] - p[0] } else { 1 };
            let even = step >= 1 && p.windows(2).all(|w| w[1] - w[0] == step);
            if even {
                let end = p[p.len() - 1] + 1;
                slice.push([p[0], end, a as i64, step]);
            } else {
                let idx = self
                    .add()
                    .ints(&format!("{base}_positions"), vec![p.len() as u64], p);
                let attrs = vec![axis_attr(a)];
                cur = self.add().node(
                    &format!("{base}_gathered"),
                    "Gather",
                    &[Some(cur), Some(idx)],
                    attrs,
                );
            }
        }
        if slice.is_empty() {
            return cur;
        }
        let n = slice.len() as u64;
        let mut ins = vec![Some(cur)];
        for (k, what) in ["starts", "ends", "axes", "steps"].iter().enumerate() {
            let vals: Vec<i64> = slice.iter().map(|s| s[k]).collect();
            ins.push(Some(self.add().ints(
                &format!("{base}_selected_{what}"),
                vec![n],
                &vals,
            )));
        }
        self.add()
            .node(&format!("{base}_selected"), "Slice", &ins, Vec::new())
    }
}

/// `model` with each selection of known positions whose input can be made already selected (see
/// the module docs) rewritten so: its input's maker, and each large maker up that only the moved
/// selection reads, made again on the selected positions. `None` when there is none. Values of
/// fewer than `min_bytes` are not moved through (a selection of them stays a slice).
pub(crate) fn selections_sunk(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    min_bytes: u64,
) -> Option<Model> {
    let s = sink(&model.graph, facts, dims, min_bytes);
    if s.before.is_empty() {
        return None;
    }
    let (out, gone) = (s.sinker.out, s.sinker.through);
    Some(super::rewrite::finish(
        model, &out, &s.before, gone, s.unread,
    ))
}

/// The nodes of `g` whose outputs a selection would be moved through at any size: made only in
/// part after [`selections_sunk`] (the floor takes them as split as finely as it likes).
pub(crate) fn moved_through(
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> BTreeSet<NodeId> {
    sink(g, facts, dims, 0).sinker.through
}

/// What [`sink`] made: the graph grown, each moved selection's new nodes keyed by the node they
/// go before, and the values the selections no longer read.
struct Sunk<'a> {
    sinker: Sinker<'a>,
    before: BTreeMap<usize, Vec<NodeId>>,
    unread: Vec<ValueId>,
}

/// Every selection of `g` moved where it can be (see [`selections_sunk`]).
fn sink<'a>(
    g: &'a Graph,
    facts: &'a Facts,
    dims: &'a BTreeMap<String, i64>,
    min_bytes: u64,
) -> Sunk<'a> {
    let mut readers = vec![Vec::new(); g.values.len()];
    for id in g.node_ids() {
        for v in g.node(id).input_ids().collect::<BTreeSet<_>>() {
            readers[v.index()].push(id);
        }
    }
    let mut s = Sinker {
        g,
        facts,
        dims,
        min_bytes,
        readers,
        out: g.clone(),
        names: Names::of(g),
        added: Vec::new(),
        through: BTreeSet::new(),
        widest_cut: 0,
        moving: BTreeMap::new(),
        made: BTreeMap::new(),
    };
    let mut before: BTreeMap<usize, Vec<NodeId>> = BTreeMap::new();
    let mut unread = Vec::new();
    // Last first: a selection of a selection moves through it, which is then made by nothing.
    for id in (0..g.nodes.len()).rev().map(NodeId::from_index) {
        if s.through.contains(&id) {
            continue;
        }
        let node = g.node(id);
        let Some((x, cut, then)) = selection(g, node, facts, dims) else {
            continue;
        };
        s.moving = s.moves(id, x, &cut);
        let Some(p) = g.producer(x).filter(|_| s.moving.contains_key(&x)) else {
            continue;
        };
        let mark = s.added.len();
        let undo = (s.out.clone(), s.names.clone(), s.through.clone());
        s.widest_cut = 0;
        s.made.clear();
        // A value cut as it is, where the moved selection stops, is a new copy: none may hold
        // more than the selection did (a row of a weight read as a view is not cut into a
        // column of it). Else, or where a shape is not known at `dims`, nothing is moved.
        let kept = node.outputs[0].and_then(|y| facts.get(y).shape_at(dims));
        let made = s
            .select(x, &cut)
            .filter(|_| kept.is_some_and(|sh| s.widest_cut <= sh.iter().product::<u64>()));
        let Some(made) = made else {
            (s.out, s.names, s.through) = undo;
            s.added.truncate(mark);
            continue;
        };
        let zero = matches!(then, Then::FirstOf)
            .then(|| s.add().ints(&format!("{}_first", node.name), vec![], &[0]));
        let new = &mut s.out.nodes[id.index()];
        unread.extend(new.input_ids());
        match zero {
            Some(z) => new.inputs = vec![Some(made), Some(z)],
            None => NewNode {
                op: "Identity",
                inputs: vec![Some(made)],
                attrs: Vec::new(),
            }
            .replace(new),
        }
        before.insert(p.index(), s.added[mark..].to_vec());
    }
    Sunk {
        sinker: s,
        before,
        unread,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memplan_ir::graph::{Attribute, DeclDim, DeclType};
    use memplan_ir::{DataType, TensorData};

    /// A graph of input `a [1, 1, S, S]`, with `a`.
    fn square() -> (Graph, ValueId) {
        let mut g = Graph::default();
        let p = |s: &str| DeclDim::Param(s.into());
        let dims = vec![DeclDim::Value(1), DeclDim::Value(1), p("S"), p("S")];
        let a = g.add_input("a", DeclType::tensor(DataType::F32, dims));
        (g, a)
    }

    fn axis(v: usize) -> Vec<Attribute> {
        vec![axis_attr(v)]
    }

    /// `g`, its output row 3 of `u` along axis 2 (a gather of one index) first, sunk at `S = 8`
    /// for values of at least `min_bytes`: the ops of the rewrite, in order, or `None`.
    fn sunk_row(mut g: Graph, u: ValueId, min_bytes: u64) -> Option<Vec<String>> {
        let i = g.add_initializer(TensorData::from_i64("three", vec![], &[3]));
        let y = g
            .add_node("row", "Gather", &[Some(u), Some(i)], &["y"], axis(2))
            .1[0];
        g.outputs.insert(0, y);
        let model = Model {
            graph: g,
            ..Model::default()
        };
        let dims = BTreeMap::from([("S".to_string(), 8)]);
        let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
        let m = selections_sunk(&model, &facts, &dims, min_bytes)?;
        Some(m.graph.nodes.iter().map(|n| n.op.clone()).collect())
    }

    /// `a [1, 1, S, S]`, `maker(a)`, its row 3 (see [`sunk_row`]), and `extra(maker output)` as a
    /// second output when given.
    fn sunk(maker: (&str, usize), extra: Option<&str>, min_bytes: u64) -> Option<Vec<String>> {
        let (mut g, a) = square();
        let (op, ax) = maker;
        let attrs = if op == "Softmax" {
            axis(ax)
        } else {
            Vec::new()
        };
        let v = g.add_node("maker", op, &[Some(a)], &["v"], attrs).1[0];
        if let Some(op) = extra {
            let z = g.add_node("extra", op, &[Some(v)], &["z"], Vec::new()).1[0];
            g.outputs.push(z);
        }
        sunk_row(g, v, min_bytes)
    }

    #[test]
    fn a_selection_moves_into_its_input_only_where_nothing_else_needs_the_whole() {
        // The row of `Exp(a)` is `Exp` of the row of `a`: a slice, then the maker, then the
        // gather (of index 0 of the one row made).
        let ops = ["Slice", "Exp", "Gather"].map(String::from).to_vec();
        assert_eq!(sunk(("Exp", 0), None, 0), Some(ops.clone()));
        // A softmax along the columns splits the rows: its rows are those of its input's.
        let softmax = ["Slice", "Softmax", "Gather"].map(String::from).to_vec();
        assert_eq!(sunk(("Softmax", 3), None, 0), Some(softmax));
        // Left alone: a softmax along the rows needs every row for one; another node reads
        // the whole value; a value smaller than what the rewrite takes.
        assert_eq!(sunk(("Softmax", 2), None, 0), None);
        assert_eq!(sunk(("Exp", 0), Some("Neg"), 0), None);
        assert_eq!(sunk(("Exp", 0), None, 257), None);
        assert_eq!(sunk(("Exp", 0), None, 256), Some(ops));
    }

    /// LED's mask: `v` read by two nodes on the way to the row (`Neg(v) + v`), both moved, so `v`
    /// is made one row too, once; read also by a node that stays, it is cut as it is.
    #[test]
    fn a_value_read_twice_on_the_way_is_moved_through_once() {
        let ops = |stay: bool| -> Vec<String> {
            let (mut g, a) = square();
            let v = g.add_node("exp", "Exp", &[Some(a)], &["v"], Vec::new()).1[0];
            let w = g.add_node("neg", "Neg", &[Some(v)], &["w"], Vec::new()).1[0];
            let u = g
                .add_node("add", "Add", &[Some(v), Some(w)], &["u"], Vec::new())
                .1[0];
            if stay {
                let z = g
                    .add_node("sum", "ReduceSum", &[Some(v)], &["z"], Vec::new())
                    .1[0];
                g.outputs.push(z);
            }
            sunk_row(g, u, 0).unwrap()
        };
        let moved = ["Slice", "Exp", "Neg", "Add", "Gather"]
            .map(String::from)
            .to_vec();
        assert_eq!(ops(false), moved);
        let cut = ["Exp", "Slice", "Neg", "Add", "ReduceSum", "Gather"]
            .map(String::from)
            .to_vec();
        assert_eq!(ops(true), cut);
    }

    /// GPT's causal mask: a weight `[1, 1, 32, 32]`, its first 8 rows (a view), their first 8
    /// columns. Moved into the weight, the columns would be cut from all 32 rows, a copy larger
    /// than the selection: left alone.
    #[test]
    fn a_selection_is_not_moved_where_it_would_copy_more_than_it_keeps() {
        let mut g = Graph::default();
        let w = g.add_initializer(TensorData::from_f32("w", vec![1, 1, 32, 32], &[1.0; 1024]));
        let ints = |g: &mut Graph, name: &str, v: i64| {
            g.add_initializer(TensorData::from_i64(name, vec![1], &[v]))
        };
        let (zero, eight, two, three) = (
            ints(&mut g, "zero", 0),
            ints(&mut g, "eight", 8),
            ints(&mut g, "two", 2),
            ints(&mut g, "three", 3),
        );
        let rows = g
            .add_node(
                "rows",
                "Slice",
                &[Some(w), Some(zero), Some(eight), Some(two)],
                &["r"],
                Vec::new(),
            )
            .1[0];
        let cols = g
            .add_node(
                "cols",
                "Slice",
                &[Some(rows), Some(zero), Some(eight), Some(three)],
                &["c"],
                Vec::new(),
            )
            .1[0];
        g.outputs = vec![cols];
        let model = Model {
            graph: g,
            ..Model::default()
        };
        let dims = BTreeMap::new();
        let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
        assert!(selections_sunk(&model, &facts, &dims, 0).is_none());
    }
}
