//! Rematerialization (recomputation) under a budget, as a standard-ONNX rewrite.
//!
//! A value made before the peak and read again after it (an activation the backward pass of a
//! training graph reads, a residual branch) is live across the peak only for those late readers.
//! [`rematerialize`] recomputes it instead: it clones the producing node (and, where an input would
//! otherwise be kept alive longer, that input's producer, up to [`Options::depth`] levels) right before
//! the first late reader and points the late readers at the clone, so the original dies at its last
//! early reader. Clones run the same kernels on the same inputs, so every output stays bit-identical.
//!
//! The search is greedy and bounded by work, not time: each round simulates the rewrite of the
//! largest candidates live at the graph-order peak and keeps the one that lowers the peak the most per
//! recomputed byte, until the peak fits the budget or no candidate lowers it. Each rewrite keeps the
//! node list in a topological order with every clone just before its first reader, which is the order
//! `memplan estimate` and the planner start from.

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::graph::{Graph, Model, Names, NodeId, ValueId, ValueKind};
use memplan_ir::infer::Facts;
use memplan_sim::{Category, Timeline};

use crate::greedy::{greedy, simulate, Proposal};

/// Bounds of the search.
#[derive(Clone, Debug)]
pub struct Options {
    /// Producer levels cloned per recomputed value.
    pub depth: usize,
    /// Candidates simulated per round (the largest live at the peak).
    pub candidates: usize,
    /// Rounds (values recomputed) at most.
    pub max_rounds: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            depth: 8,
            candidates: 16,
            max_rounds: 256,
        }
    }
}

/// One recomputed value.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Recomputed {
    /// The value recomputed.
    pub value: String,
    /// Its bytes at the given dims.
    pub bytes: u64,
    /// Nodes cloned to recompute it.
    pub nodes: usize,
    /// Bytes the clones write (a measure of the recomputation's cost).
    pub work_bytes: u64,
    /// The graph-order peak after this step.
    pub peak_bytes: u64,
}

/// What [`rematerialize`] did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    pub peak_bytes_before: u64,
    pub peak_bytes_after: u64,
    pub budget_bytes: u64,
    pub steps: Vec<Recomputed>,
}

/// Why the pass failed.
#[derive(Debug, thiserror::Error)]
pub enum RematError {
    #[error("inference failed after recomputation: {0}")]
    Infer(String),
    #[error(transparent)]
    Sim(#[from] memplan_sim::SimError),
    #[error("{0}")]
    Graph(String),
}

/// The rewritten model and its facts.
pub struct Outcome {
    pub model: Model,
    pub facts: Facts,
    pub report: Report,
}

/// Recomputes values until the graph-order peak at `dims` is at most `budget` (or nothing helps).
pub fn rematerialize(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    budget: u64,
    opts: &Options,
) -> Result<Outcome, RematError> {
    let before = simulate(model, facts, dims)?.1.peak_bytes;
    let mut tried_out: BTreeSet<String> = BTreeSet::new();
    // The facts carried through the rounds are the originals' copied to the clones.
    let r = greedy(
        model,
        facts,
        dims,
        before,
        budget,
        opts.max_rounds,
        |model, facts, peak| best_recompute(model, facts, dims, peak, opts, &mut tried_out),
        RematError::Infer,
    )?;
    Ok(Outcome {
        model: r.model,
        facts: r.facts,
        report: Report {
            peak_bytes_before: before,
            peak_bytes_after: r.peak,
            budget_bytes: budget,
            steps: r.steps,
        },
    })
}

/// The recomputation of one value live at the graph-order peak and read after it that lowers the
/// peak most per recomputed byte (the first `opts.candidates` candidates simulated), if any;
/// values in `tried_out` are skipped, and those that do not help join them.
fn best_recompute(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    peak: u64,
    opts: &Options,
    tried_out: &mut BTreeSet<String>,
) -> Result<Option<Proposal<Recomputed>>, RematError> {
    let (t, cp) = simulate(model, facts, dims)?;
    let Some(step) = cp.peak_step else {
        return Ok(None);
    };
    let order_pos: BTreeMap<NodeId, usize> = t
        .schedule
        .iter()
        .enumerate()
        .map(|(i, &n)| (n, i))
        .collect();
    // Candidates: node-made buffers live at the peak, read again after it, largest first.
    let mut cands: Vec<(u64, ValueId)> = Vec::new();
    for e in &cp.live {
        let b = &t.buffers[e.buf.0 as usize];
        let (Some(v), Some(alloc)) = (b.value, b.alloc) else {
            continue;
        };
        if b.category == Category::Scratch || alloc >= step || b.last.is_none() {
            continue;
        }
        if b.last.is_some_and(|l| l <= step) {
            continue;
        }
        let name = &model.graph.value(v).name;
        if tried_out.contains(name) {
            continue;
        }
        cands.push((e.bytes, v));
    }
    cands.truncate(opts.candidates);
    let mut best: Option<(f64, Proposal<Recomputed>)> = None;
    for &(bytes, v) in &cands {
        let Some((m2, f2, nodes, work)) =
            rewrite(model, facts, &t, &order_pos, v, step, dims, opts.depth)
        else {
            tried_out.insert(model.graph.value(v).name.clone());
            continue;
        };
        let p2 = simulate(&m2, &f2, dims)?.1.peak_bytes;
        if p2 >= peak {
            tried_out.insert(model.graph.value(v).name.clone());
            continue;
        }
        let score = (peak - p2) as f64 / (work as f64 + 1.0);
        if best.as_ref().is_none_or(|b| score > b.0) {
            let r = Recomputed {
                value: model.graph.value(v).name.clone(),
                bytes,
                nodes,
                work_bytes: work,
                peak_bytes: p2,
            };
            best = Some((score, (p2, m2, f2, r)));
        }
    }
    Ok(best.map(|(_, p)| p))
}

/// Values live at `step` (a peak of `model` in its node order, which must be topological) and
/// read again only after it, each made again right before its first reader after `step` by one
/// clone of its maker, where that costs no memory beyond the value itself: the maker costs about
/// its output's size (no contraction; it has an axis flow, so it is no random draw) and reads only
/// values live past that reader anyway (a layer norm of a residual stream read by a projection
/// before the peak and by a gate after it). `live` names the candidates, largest first; at most
/// `max` rewrites are returned, in that order. Same kernel on the same inputs: bit-identical.
pub(crate) fn remake_across(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    step: usize,
    live: &[(String, u64)],
    max: usize,
) -> Result<Vec<(Model, Recomputed)>, RematError> {
    let g = &model.graph;
    let (t, _) = simulate(model, facts, dims)?;
    let pos: BTreeMap<NodeId, usize> = t
        .schedule
        .iter()
        .enumerate()
        .map(|(i, &n)| (n, i))
        .collect();
    let by_name: BTreeMap<&str, ValueId> = g
        .value_ids()
        .map(|v| (g.value(v).name.as_str(), v))
        .collect();
    let consumers = g.consumers();
    let mut out = Vec::new();
    for (name, bytes) in live {
        let Some(&v) = by_name.get(name.as_str()) else {
            continue;
        };
        let Some(maker) = g.producer(v) else {
            continue;
        };
        let node = g.node(maker);
        let linear = memplan_ir::ops::lookup(node)
            .is_some_and(|d| d.contracted.is_none() && d.flow.is_some());
        if !linear || pos.get(&maker).is_none_or(|&p| p >= step) {
            continue;
        }
        let readers: Vec<usize> = consumers[v.index()]
            .iter()
            .filter_map(|n| pos.get(n).copied())
            .collect();
        let Some(first_late) = readers.iter().copied().filter(|&p| p > step).min() else {
            continue;
        };
        if readers.contains(&step) {
            continue;
        }
        // Every input small, resident, or live at the peak and read at or after `first_late`.
        let free = |w: ValueId| -> bool {
            let small = facts
                .get(w)
                .bytes()
                .and_then(|e| e.eval_map(dims).ok())
                .is_some_and(|b| (b.max(0) as u64).saturating_mul(16) <= *bytes);
            small
                || t.value_buf[w.index()].is_none_or(|b| {
                    let b = &t.buffers[b.0 as usize];
                    b.alloc.is_none() || (b.live_at(step) && b.last.is_none_or(|l| l >= first_late))
                })
        };
        if !node.input_ids().all(free) {
            continue;
        }
        let Some((m2, _, nodes, work)) = rewrite(model, facts, &t, &pos, v, step, dims, 1) else {
            continue;
        };
        out.push((
            m2,
            Recomputed {
                value: name.clone(),
                bytes: *bytes,
                nodes,
                work_bytes: work,
                peak_bytes: 0,
            },
        ));
        if out.len() >= max {
            break;
        }
    }
    Ok(out)
}

/// The graph with `v` (and its views) recomputed for its readers after `step`, the clones placed
/// before the first of them; `None` when there is nothing to rewrite. Also returns the number of
/// cloned nodes and the bytes they write.
#[allow(clippy::too_many_arguments)]
fn rewrite(
    model: &Model,
    facts: &Facts,
    t: &Timeline,
    pos: &BTreeMap<NodeId, usize>,
    v: ValueId,
    step: usize,
    dims: &BTreeMap<String, i64>,
    depth: usize,
) -> Option<(Model, Facts, usize, u64)> {
    let g = &model.graph;
    let buf = t.value_buf[v.index()]?;
    // Late readers: nodes after the peak reading v or a view of it.
    let mut late: Vec<(NodeId, usize, ValueId)> = Vec::new();
    for (i, node) in g.nodes.iter().enumerate() {
        let id = NodeId::from_index(i);
        let Some(&p) = pos.get(&id) else { continue };
        if p <= step {
            continue;
        }
        for (slot, inp) in node.inputs.iter().enumerate() {
            if let Some(u) = inp {
                if t.value_buf[u.index()] == Some(buf) && g.producer(*u).is_some() {
                    late.push((id, slot, *u));
                }
            }
        }
    }
    if late.is_empty() {
        return None;
    }
    if g.outputs
        .iter()
        .any(|o| t.value_buf[o.index()] == Some(buf))
    {
        return None;
    }
    let first_late = late.iter().map(|(n, _, _)| pos[n]).min()?;
    let live_at_peak = |u: ValueId| -> bool {
        match t.value_buf[u.index()] {
            Some(b) => {
                let b = &t.buffers[b.0 as usize];
                b.alloc.is_none() || (b.live_at(step) && b.last.is_none_or(|l| l >= first_late))
            }
            None => true,
        }
    };
    let mut c = Cloner::new(g, facts, dims);
    let mut replaced: BTreeMap<ValueId, ValueId> = BTreeMap::new();
    for &(_, _, u) in &late {
        if let std::collections::btree_map::Entry::Vacant(e) = replaced.entry(u) {
            let nu = c.clone_value(
                u,
                depth,
                &|w| w != u && live_at_peak(w) && t.value_buf[w.index()] != Some(buf),
                true,
            )?;
            e.insert(nu);
        }
    }
    for &(n, slot, u) in &late {
        c.g.nodes[n.index()].inputs[slot] = Some(replaced[&u]);
    }
    let nodes = c.new_nodes.len();
    let work = c.work;
    // Order: the old schedule with the clones (in creation order, which is topological) inserted
    // before the first late reader.
    let mut schedule: Vec<NodeId> = Vec::with_capacity(t.schedule.len() + nodes);
    for (i, &n) in t.schedule.iter().enumerate() {
        if i == first_late {
            schedule.extend(c.new_nodes.iter().copied());
        }
        schedule.push(n);
    }
    let mut out = model.clone();
    out.graph = crate::reorder(&c.g, &schedule);
    // A clone's outputs have its original's facts; the node list is the new order.
    let mut f2 = facts.clone();
    f2.values.resize(out.graph.values.len(), Default::default());
    for (&orig, &copy) in &c.memo {
        f2.values[copy.index()] = facts.get(orig).clone();
    }
    crate::reorder_facts(&mut f2, &schedule);
    Some((out, f2, nodes, work))
}

/// Clones makers of values over a copy of a graph (new nodes appended to its node list).
pub(crate) struct Cloner<'a> {
    pub(crate) g: Graph,
    facts: &'a Facts,
    dims: &'a BTreeMap<String, i64>,
    memo: BTreeMap<ValueId, ValueId>,
    /// The clones, in creation (topological) order.
    pub(crate) new_nodes: Vec<NodeId>,
    work: u64,
    names: Names,
    /// The value of the input graph each clone copies (clones of clones included).
    pub(crate) origin: BTreeMap<ValueId, ValueId>,
    /// Whether a value read on two paths of one clone is cloned once (a copy of the computation as
    /// it is) or once per path (a tree).
    share: bool,
}

impl<'a> Cloner<'a> {
    /// A cloner over a copy of `g`, with no clone made yet.
    pub(crate) fn new(g: &Graph, facts: &'a Facts, dims: &'a BTreeMap<String, i64>) -> Cloner<'a> {
        Cloner {
            g: g.clone(),
            facts,
            dims,
            memo: BTreeMap::new(),
            new_nodes: Vec::new(),
            work: 0,
            names: Names::of(g),
            origin: BTreeMap::new(),
            share: true,
        }
    }

    fn fresh_name(&mut self, base: &str) -> String {
        self.names.fresh(&format!("{base}/recompute"))
    }

    /// The value of the input graph that `v` is (or copies).
    fn original(&self, v: ValueId) -> ValueId {
        self.origin.get(&v).copied().unwrap_or(v)
    }

    fn bytes_of(&self, v: ValueId) -> u64 {
        self.facts
            .get(self.original(v))
            .bytes()
            .and_then(|e| e.eval_map(self.dims).ok())
            .map_or(0, |b| b.max(0) as u64)
    }

    /// A value equal to `u` computed again: `u` itself when `keep(u)` (and not `force`d), a resident
    /// value or `depth` exhausted; otherwise a clone of its producer over recomputed inputs.
    pub(crate) fn clone_value(
        &mut self,
        u: ValueId,
        depth: usize,
        keep: &dyn Fn(ValueId) -> bool,
        force: bool,
    ) -> Option<ValueId> {
        if let Some(&m) = self.memo.get(&u).filter(|_| self.share) {
            return Some(m);
        }
        let ValueKind::Node { node, .. } = self.g.value(u).kind.clone() else {
            return if force { None } else { Some(u) };
        };
        if !force && (depth == 0 || keep(u)) {
            return Some(u);
        }
        if depth == 0 {
            return None;
        }
        let orig = self.g.nodes[node.index()].clone();
        if orig.subgraphs().next().is_some() {
            return None;
        }
        let mut inputs = Vec::with_capacity(orig.inputs.len());
        for i in &orig.inputs {
            inputs.push(match i {
                Some(w) => Some(self.clone_value(*w, depth - 1, keep, false)?),
                None => None,
            });
        }
        let mut outputs = Vec::with_capacity(orig.outputs.len());
        let mut made = Vec::with_capacity(orig.outputs.len());
        let nid = NodeId::from_index(self.g.nodes.len());
        for (k, o) in orig.outputs.iter().enumerate() {
            match o {
                Some(o) => {
                    let base = self.g.value(self.original(*o)).name.clone();
                    let name = self.fresh_name(&base);
                    let nv = self.g.add_value(
                        name,
                        ValueKind::Node {
                            node: nid,
                            slot: k as u32,
                        },
                    );
                    outputs.push(Some(nv));
                    made.push((*o, nv));
                    let from = self.original(*o);
                    self.origin.insert(nv, from);
                }
                None => outputs.push(None),
            }
        }
        // Named after the node of the input graph it copies: the maker of the value `u` copies.
        let from = match self.g.value(self.original(u)).kind {
            ValueKind::Node { node: from, .. } => from,
            _ => node,
        };
        let name = self.fresh_name(&self.g.nodes[from.index()].name.clone());
        self.g.nodes.push(memplan_ir::graph::Node {
            name,
            inputs,
            outputs,
            ..orig.clone()
        });
        self.new_nodes.push(nid);
        let copy = made.iter().find(|(o, _)| *o == u).map(|(_, nv)| *nv);
        for (o, nv) in made {
            self.memo.insert(o, nv);
            self.work += self.bytes_of(o);
        }
        copy
    }
}

/// Values cheap to make again from small tensors, at a cost of the order of their own size: made
/// by a node that copies or maps its inputs elementwise (its [`Values`](memplan_ir::ops::Values)
/// rule is pointwise or selects) from inputs that are each small (at most 1/16 of the value's bytes at
/// `dims`) or light themselves, by one that makes its output from its shape
/// ([`shape_input`](memplan_ir::ops::OpDef::shape_input)) and small inputs, or by a function of
/// scalars (`Range`: a bounded amount of work per output element): a position bias built
/// by index arithmetic, a mask expanded from a [B, S] input. A product of two small tensors is not
/// light: it costs more than its size. Indexed by value; the node list must be in topological
/// order.
pub(crate) fn light_values(g: &Graph, facts: &Facts, dims: &BTreeMap<String, i64>) -> Vec<bool> {
    let bytes = |v: ValueId| -> Option<u64> {
        let e = facts.get(v).bytes()?.eval_map(dims).ok()?;
        u64::try_from(e).ok()
    };
    let scalar = |v: ValueId| {
        facts
            .get(v)
            .numel()
            .is_some_and(|e| e.eval_map(dims).is_ok_and(|n| n == 1))
    };
    let mut light = vec![false; g.values.len()];
    for n in &g.nodes {
        let Some(def) = memplan_ir::ops::lookup(n) else {
            continue;
        };
        use memplan_ir::ops::Values;
        let copies = matches!(
            def.values,
            Values::Pointwise | Values::Selects(_) | Values::SelectsAny
        );
        // A function of scalars (`Range`) does a bounded amount of work per output element.
        let of_scalars = n.input_ids().all(&scalar);
        if n.subgraphs().next().is_some() || !(copies || of_scalars || def.shape_input.is_some()) {
            continue;
        }
        for y in n.output_ids() {
            let Some(b) = bytes(y).filter(|&b| b > 0) else {
                continue;
            };
            light[y.index()] = n.input_ids().all(|u| {
                bytes(u).is_some_and(|bu| bu.saturating_mul(16) <= b)
                    || (copies && light[u.index()])
            });
        }
    }
    light
}

/// One light value made again for each of its readers.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PerReader {
    /// The value.
    pub value: String,
    /// Its bytes at the given dims.
    pub bytes: u64,
    /// Readers that now read a copy of their own (all but the first).
    pub copies: usize,
    /// Nodes cloned for each copy.
    pub nodes: usize,
}

/// How [`recompute_per_reader`] makes shared light values again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Copies {
    /// Every large light value (at least `min_bytes`) that several heavy nodes (nodes with an
    /// output that is not light) read is made again before each of them after the first, as a
    /// copy of its light computation (a relative position bias every layer of a T5 encoder reads).
    #[default]
    Heavy,
    /// The light computations of large light values made into trees: every such value, and every
    /// light value it is computed from, that several nodes read is made again before each reader
    /// after the first, each copy itself a tree (a value read on two of its paths made once per
    /// path). No light value is then read twice, so each reader's copy may be split along its own
    /// axis: DeBERTa's relative positions `q - k` are read by the content-to-position term along
    /// the query axis and, negated, by the transposed position-to-content term along the key axis,
    /// in one region. More copies than [`Copies::Heavy`], each paid per chunk.
    Trees,
}

/// The model with the shared light values of at least `min_bytes` ([`light_values`]) made again
/// per reader as `copies` says, from their small inputs, right before each reader: the value is
/// then never held whole from one reader to the next, and a region chunked at each reader computes
/// its slices of it from those inputs. Same kernels on the same inputs: bit-identical. `None` when
/// there is no such value. The copies are bounded by work (they write at most twice the bytes the
/// model's nodes write), so the same model gives the same result anywhere. The node list must be
/// in topological order; it stays so.
pub(crate) fn recompute_per_reader(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    min_bytes: u64,
    copies: Copies,
) -> Option<(Model, Vec<PerReader>)> {
    let g = &model.graph;
    let light = light_values(g, facts, dims);
    let heavy = |r: &NodeId| g.node(*r).output_ids().any(|y| !light[y.index()]);
    let consumers: Vec<Vec<NodeId>> = g
        .consumers()
        .into_iter()
        .map(|mut r| {
            if copies == Copies::Heavy {
                r.retain(heavy);
            }
            r.sort();
            r.dedup();
            r
        })
        .collect();
    let outputs: BTreeSet<ValueId> = g.outputs.iter().copied().collect();
    let mut c = Cloner::new(g, facts, dims);
    c.share = copies == Copies::Heavy;
    let large = |v: ValueId| c.bytes_of(v) >= min_bytes;
    let mut shared = shared_light(g, &light, &consumers, &outputs, large, copies);
    // Trees: readers first, so that the originals a copy was made from, copied later for their
    // other readers, are read by one node each in the end.
    if copies == Copies::Trees {
        shared.reverse();
    }
    // The copies write at most twice what the model's nodes write.
    let max_work: u64 = g
        .nodes
        .iter()
        .flat_map(|n| n.output_ids())
        .map(|v| c.bytes_of(v))
        .sum::<u64>()
        .saturating_mul(2);
    // Clones to run right before each reader, in creation (topological) order.
    let mut before: BTreeMap<NodeId, Vec<NodeId>> = BTreeMap::new();
    let mut report = Vec::new();
    for v in shared {
        let readers = &consumers[v.index()];
        let mut nodes = 0;
        let mut copies = 0;
        for &r in &readers[1..] {
            c.memo.clear();
            let (start, work) = (c.new_nodes.len(), c.work);
            // Values a copy made are light too.
            let keep = |w: ValueId| !light.get(w.index()).copied().unwrap_or(true);
            let copy = c.clone_value(v, usize::MAX, &keep, true);
            let Some(copy) = copy.filter(|_| c.work <= max_work) else {
                c.new_nodes.truncate(start);
                c.work = work;
                break;
            };
            nodes = c.new_nodes.len() - start;
            copies += 1;
            before
                .entry(r)
                .or_default()
                .extend(c.new_nodes[start..].iter().copied());
            for i in c.g.nodes[r.index()].inputs.iter_mut() {
                if *i == Some(v) {
                    *i = Some(copy);
                }
            }
        }
        let bytes = c.bytes_of(v);
        if copies > 0 && bytes >= min_bytes {
            report.push(PerReader {
                value: g.value(v).name.clone(),
                bytes,
                copies,
                nodes,
            });
        }
    }
    if c.new_nodes.is_empty() {
        return None;
    }
    let mut schedule: Vec<NodeId> = Vec::with_capacity(c.g.nodes.len());
    for n in g.node_ids() {
        if let Some(clones) = before.get(&n) {
            schedule.extend(clones.iter().copied());
        }
        schedule.push(n);
    }
    let mut out = model.clone();
    out.graph = crate::reorder(&c.g, &schedule);
    Some((out, report))
}

/// The light values, not graph outputs, that several of `consumers` (deduplicated) read and that
/// are `large` or, for [`Copies::Trees`], that a large light value is computed from through light
/// values only; in topological order.
fn shared_light(
    g: &Graph,
    light: &[bool],
    consumers: &[Vec<NodeId>],
    outputs: &BTreeSet<ValueId>,
    large: impl Fn(ValueId) -> bool,
    copies: Copies,
) -> Vec<ValueId> {
    let mut cone = vec![false; g.values.len()];
    for node in g.nodes.iter().rev() {
        for y in node.output_ids() {
            cone[y.index()] |= light[y.index()] && large(y);
        }
        if copies == Copies::Trees && node.output_ids().any(|y| cone[y.index()]) {
            for u in node.input_ids().filter(|u| light[u.index()]) {
                cone[u.index()] = true;
            }
        }
    }
    g.node_ids()
        .flat_map(|n| g.node(n).output_ids())
        .filter(|&v| cone[v.index()] && !outputs.contains(&v) && consumers[v.index()].len() > 1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use memplan_ir::graph::{DeclDim, DeclType};
    use memplan_ir::DataType;

    /// `r = Relu(x)` (`x` of `[N, 64]`), `v = maker(r, w)`, read by `a` before the peak (`c`) and by the gate `g`
    /// after it; `y = g + r`, so `r` is live through `g` anyway.
    fn gate_graph(maker: &str, w: &[i64]) -> Model {
        let mut g = Graph::default();
        let t = |d: Vec<DeclDim>| DeclType::tensor(DataType::F32, d);
        let n = || DeclDim::Param("N".into());
        let x = g.add_input("x", t(vec![n(), DeclDim::Value(64)]));
        let w = g.add_input("w", t(w.iter().map(|&k| DeclDim::Value(k)).collect()));
        let mut op = |op: &str, ins: &[ValueId], out: &str| -> ValueId {
            let ins: Vec<Option<ValueId>> = ins.iter().map(|&v| Some(v)).collect();
            g.add_node(format!("{out}_node"), op, &ins, &[out], vec![])
                .1[0]
        };
        let r = op("Relu", &[x], "r");
        let v = op(maker, &[r, w], "v");
        let a = op("Tanh", &[v], "a");
        let b = op("Sigmoid", &[a], "b");
        let c = op("Mul", &[a, b], "c");
        let d = op("Neg", &[c], "d");
        let gate = op("Mul", &[v, d], "g");
        let y = op("Add", &[gate, r], "y");
        g.outputs = vec![y];
        Model {
            graph: g,
            ..Model::default()
        }
    }

    /// The remakes of `v` offered at the graph-order peak, and the peak before.
    fn remakes_of_v(
        model: &Model,
        dims: &BTreeMap<String, i64>,
    ) -> (Vec<(Model, Recomputed)>, u64) {
        let facts = memplan_ir::infer_graph(&model.graph, 18).unwrap();
        let (_, before) = simulate(model, &facts, dims).unwrap();
        let step = before.peak_step.unwrap();
        assert_eq!(model.graph.nodes[step].name, "c_node");
        let live = [("v".to_string(), 1024 * 64 * 4)];
        let tries = remake_across(model, &facts, dims, step, &live, 4).unwrap();
        (tries, before.peak_bytes)
    }

    #[test]
    fn a_layer_norm_read_across_the_peak_is_made_again_for_its_late_reader() {
        let dims = BTreeMap::from([("N".to_string(), 1024i64)]);
        let tensor = 1024 * 64 * 4;
        let model = gate_graph("LayerNormalization", &[64]);
        let (tries, before) = remakes_of_v(&model, &dims);
        let [(m2, rec)] = &tries[..] else {
            panic!("one remake of v: {}", tries.len())
        };
        assert_eq!((rec.value.as_str(), rec.nodes, rec.bytes), ("v", 1, tensor));
        let g2 = &m2.graph;
        let gate = g2.nodes.iter().position(|n| n.name == "g_node").unwrap();
        let remade = g2.producer(g2.nodes[gate].inputs[0].unwrap()).unwrap();
        assert_eq!(g2.node(remade).op, "LayerNormalization");
        assert_eq!(
            remade.index() + 1,
            gate,
            "made right before its late reader"
        );
        let f2 = memplan_ir::infer_graph(g2, 18).unwrap();
        let (_, after) = simulate(m2, &f2, &dims).unwrap();
        assert_eq!(
            before - after.peak_bytes,
            tensor,
            "v is no longer held at the peak"
        );

        // A product (a contraction: it costs more than its size) is not made again.
        let model = gate_graph("MatMul", &[64, 64]);
        assert!(remakes_of_v(&model, &dims).0.is_empty());
    }

    /// LongT5's block ids one-hot, cast to floats (`[S, 256]` from `[S]`): each element a copy of
    /// the off or the on value, so light; a product of the one-hot with a small weight is not.
    #[test]
    fn a_one_hot_of_small_indices_is_light() {
        use memplan_ir::graph::{AttrValue, Attribute};
        use memplan_ir::tensor::TensorData;
        let mut g = Graph::default();
        let s = DeclDim::Param("S".into());
        let ids = g.add_input("ids", DeclType::tensor(DataType::I64, vec![s]));
        let depth = g.add_initializer(TensorData::from_i64("depth", vec![], &[256]));
        let values = g.add_initializer(TensorData::from_i64("values", vec![2], &[0, 1]));
        let w = g.add_initializer(TensorData::from_f32("w", vec![256, 4], &[0.5; 1024]));
        let mut op = |op: &str, ins: &[ValueId], out: &str, attrs: Vec<Attribute>| -> ValueId {
            let ins: Vec<Option<ValueId>> = ins.iter().map(|&v| Some(v)).collect();
            g.add_node(format!("{out}_node"), op, &ins, &[out], attrs).1[0]
        };
        let hot = op("OneHot", &[ids, depth, values], "hot", vec![]);
        let to = Attribute {
            name: "to".into(),
            value: AttrValue::Int(1),
            doc: String::new(),
        };
        let f = op("Cast", &[hot], "f", vec![to]);
        let y = op("MatMul", &[f, w], "y", vec![]);
        g.outputs = vec![y];
        let model = Model {
            graph: g,
            ..Model::default()
        };
        let dims = BTreeMap::from([("S".to_string(), 4096i64)]);
        let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
        let light = light_values(&model.graph, &facts, &dims);
        let lit: Vec<&str> = model
            .graph
            .value_ids()
            .filter(|v| light[v.index()])
            .map(|v| model.graph.value(v).name.as_str())
            .collect();
        assert_eq!(lit, ["hot", "f"]);
    }

    /// DeBERTa's relative positions in miniature: `p = Cast(Unsqueeze(i, 1) - Unsqueeze(i, 0))`
    /// with `i = Range(0, N, 1)` (`[N, N]` from scalars), read by a query-axis term `s + p` and,
    /// negated and transposed, by a key-axis term, in each of two layers. Every light value of
    /// that computation that several nodes read is made again for each reader after the first,
    /// right before it, down to the scalars: no light value is read twice, so each term's region
    /// can split its own copy along its own axis.
    #[test]
    fn shared_light_computations_become_one_tree_per_reader() {
        use memplan_ir::graph::{AttrValue, Attribute};
        use memplan_ir::tensor::TensorData;
        let mut g = Graph::default();
        let n = || DeclDim::Param("N".into());
        let f32t = |d: Vec<DeclDim>| DeclType::tensor(DataType::F32, d);
        let s = g.add_input("s", f32t(vec![n(), n()]));
        let s2 = g.add_input("s2", f32t(vec![n(), n()]));
        let int = |g: &mut Graph, name: &str, dims: Vec<u64>, v: i64| {
            g.add_initializer(TensorData::from_i64(name, dims, &[v]))
        };
        let zero = int(&mut g, "zero", vec![], 0);
        let one = int(&mut g, "one", vec![], 1);
        let (a0, a1) = (int(&mut g, "a0", vec![1], 0), int(&mut g, "a1", vec![1], 1));
        let mut op = |op: &str, ins: &[ValueId], out: &str, attrs: Vec<Attribute>| -> ValueId {
            let ins: Vec<Option<ValueId>> = ins.iter().map(|&v| Some(v)).collect();
            g.add_node(format!("{out}_node"), op, &ins, &[out], attrs).1[0]
        };
        let sh = op("Shape", &[s], "sh", vec![]);
        let len = op("Gather", &[sh, zero], "len", vec![]);
        let i = op("Range", &[zero, len, one], "i", vec![]);
        let q = op("Unsqueeze", &[i, a1], "q", vec![]);
        let k = op("Unsqueeze", &[i, a0], "k", vec![]);
        let d = op("Sub", &[q, k], "d", vec![]);
        let to = Attribute {
            name: "to".into(),
            value: AttrValue::Int(1),
            doc: String::new(),
        };
        let p = op("Cast", &[d], "p", vec![to]);
        let np = op("Neg", &[p], "np", vec![]);
        let t = op("Transpose", &[np], "t", vec![]);
        let y1 = op("Add", &[s, p], "y1", vec![]);
        let z1 = op("Add", &[y1, t], "z1", vec![]);
        let y2 = op("Add", &[s2, p], "y2", vec![]);
        let z2 = op("Add", &[y2, t], "z2", vec![]);
        g.outputs = vec![z1, z2];
        let model = Model {
            graph: g,
            ..Model::default()
        };
        let dims = BTreeMap::from([("N".to_string(), 256i64)]);
        let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
        let light = light_values(&model.graph, &facts, &dims);
        let name = |v: ValueId| model.graph.value(v).name.clone();
        let lit: Vec<String> = model
            .graph
            .value_ids()
            .filter(|v| light[v.index()])
            .map(name)
            .collect();
        // Range of scalars is light; so is everything made from it by copies and maps.
        assert_eq!(lit, ["i", "q", "k", "d", "p", "np", "t"]);

        let (m2, report) =
            recompute_per_reader(&model, &facts, &dims, 64 * 1024, Copies::Trees).unwrap();
        let g2 = &m2.graph;
        let f2 = memplan_ir::infer_model_for(&m2, &dims).unwrap();
        let light2 = light_values(g2, &f2, &dims);
        let consumers = g2.consumers();
        for v in g2.value_ids().filter(|v| light2[v.index()]) {
            let mut r = consumers[v.index()].clone();
            r.dedup();
            assert_eq!(r.len(), 1, "'{}' is read by {r:?}", g2.value(v).name);
        }
        // The [N, N] values copied, for the readers after the first: p for the second layer's
        // query term and for Neg, t for the second layer's key term.
        let copied: Vec<(&str, usize)> = report
            .iter()
            .map(|r| (r.value.as_str(), r.copies))
            .collect();
        assert_eq!(copied, [("t", 1), ("p", 2)]);
        // One Range per path from the scalars to a reader: y1 (through p), y2, and z1 and z2
        // through t; q and k each read their own.
        let ranges = g2.nodes.iter().filter(|n| n.op == "Range").count();
        assert_eq!(ranges, 8);
        // Still in topological order, and every copy made before its reader.
        let pos: BTreeMap<NodeId, usize> = g2.node_ids().enumerate().map(|(i, n)| (n, i)).collect();
        for n in g2.node_ids() {
            for v in g2.node(n).input_ids() {
                if let Some(p) = g2.producer(v) {
                    assert!(pos[&p] < pos[&n]);
                }
            }
        }
    }
}
