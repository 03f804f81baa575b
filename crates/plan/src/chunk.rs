//! Chunking: compute a region of the graph slice by slice along an axis that nothing in the region
//! mixes, so only one slice of its intermediates is alive at a time.
//!
//! The rewrite is plain ONNX: for each chunk, `Slice` nodes cut the region's inputs (zero-copy views
//! when the slice is contiguous), the region's nodes are cloned over the slices, and a `Concat` per
//! region output joins the chunks under the output's original name, so consumers are untouched. The
//! rewritten graph is made for the given dims (chunk boundaries are constants).
//!
//! Exactness: every op in a region splits along its axis per [`memplan_ir::ops::axes`], so each
//! output element is computed by the same op over the same input elements; with kernels that compute
//! each element the same way whatever slice they are given, outputs are bit-identical.
//!
//! Policy ([`chunk_to_budget`]): find the step of the peak, seed a region at its node on its largest
//! splittable axis, grow it along producers and consumers that pass the axis through, and keep the
//! prefix of the growth and the chunk count with the lowest simulated peak (ties: fewer chunks);
//! repeat at the new peak until the budget is met or nothing helps.

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::graph::{AttrValue, Attribute, Graph, Model, Node, NodeId, ValueId, ValueKind};
use memplan_ir::infer::{infer_model, Facts};
use memplan_ir::ops::axes::{axis_flow, AxisFlow};
use memplan_ir::{Fact, TensorData};
use memplan_sim::{peak::concrete_peak, Timeline};

/// Why chunking could not be planned or applied.
#[derive(Debug, thiserror::Error)]
pub enum ChunkError {
    #[error("inference after chunking failed: {0}")]
    Infer(String),
    #[error("simulation failed: {0}")]
    Sim(String),
    #[error("region: {0}")]
    Region(String),
}

/// A region to chunk: its nodes, the axis each value it touches is split along (`None`: read whole),
/// and the number of chunks.
#[derive(Clone, Debug, PartialEq)]
pub struct Region {
    pub nodes: BTreeSet<NodeId>,
    pub axes: BTreeMap<ValueId, Option<usize>>,
    pub chunks: usize,
}

/// One applied chunking step, for the report.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ChunkStep {
    /// Names of the region's nodes, in graph order.
    pub nodes: Vec<String>,
    pub chunks: usize,
    /// The extent of the split axis.
    pub extent: i64,
    pub peak_before: u64,
    pub peak_after: u64,
}

fn flows(g: &Graph, f: &Facts, n: NodeId) -> Option<Vec<Vec<AxisFlow>>> {
    let node = g.node(n);
    if node.subgraphs().next().is_some() {
        return None;
    }
    let ins: Vec<Option<&Fact>> = node.inputs.iter().map(|i| i.map(|v| f.get(v))).collect();
    let outs: Vec<Option<&Fact>> = node.outputs.iter().map(|o| o.map(|v| f.get(v))).collect();
    axis_flow(node, &ins, &outs)
}

/// The peak of `model` at `dims`, with the node of the peak step.
pub fn simulate(
    model: &Model,
    dims: &BTreeMap<String, i64>,
) -> Result<(u64, Option<NodeId>, Facts), ChunkError> {
    let (score, node, facts) = score(model, dims)?;
    Ok((score.0, node, facts))
}

/// The peak and the number of steps whose live bytes are within 10% of it (which breaks ties
/// between plans with the same peak: a second region that reaches the same peak must still be
/// chunked, and chunking the first leaves fewer steps near the peak).
fn score(
    model: &Model,
    dims: &BTreeMap<String, i64>,
) -> Result<((u64, usize), Option<NodeId>, Facts), ChunkError> {
    let facts = infer_model(model).map_err(|e| ChunkError::Infer(e.to_string()))?;
    let t = Timeline::build(&model.graph, &facts, &facts.order)
        .map_err(|e| ChunkError::Sim(e.to_string()))?;
    let p = concrete_peak(&t, dims).map_err(|e| ChunkError::Sim(e.to_string()))?;
    let node = p.peak_step.map(|s| facts.order[s]);
    let near = p
        .per_step
        .iter()
        .filter(|&&b| b as f64 >= 0.9 * p.peak_bytes as f64)
        .count();
    Ok(((p.peak_bytes, near), node, facts))
}

/// Tries to add node `n` to the region with output `slot` split along `axis`; returns the axes its
/// values need, or `None` when it cannot join consistently.
fn join(
    g: &Graph,
    f: &Facts,
    n: NodeId,
    slot: usize,
    axis: usize,
    axes: &BTreeMap<ValueId, Option<usize>>,
) -> Option<Vec<(ValueId, Option<usize>)>> {
    let fl = flows(g, f, n)?;
    let node = g.node(n);
    let AxisFlow::Split(ins) = fl.get(slot)?.get(axis)? else {
        return None;
    };
    let mut want = Vec::new();
    for (i, inp) in node.inputs.iter().enumerate() {
        let Some(v) = *inp else { continue };
        let a = ins.get(i).copied().flatten();
        // A constant operand that must be sliced cannot be: keep such nodes out.
        if a.is_some() && !matches!(g.value(v).kind, ValueKind::Node { .. } | ValueKind::Input) {
            return None;
        }
        want.push((v, a));
    }
    // Every output must split along a known axis; use the flow of each output slot that maps input
    // slot 0's axis the same way (outputs of one node share the split).
    for (k, out) in node.outputs.iter().enumerate() {
        let Some(v) = *out else { continue };
        if k == slot {
            want.push((v, Some(axis)));
            continue;
        }
        let ax = fl
            .get(k)?
            .iter()
            .position(|fa| matches!(fa, AxisFlow::Split(x) if x == ins))?;
        want.push((v, Some(ax)));
    }
    for &(v, a) in &want {
        if let Some(&have) = axes.get(&v) {
            if have != a {
                return None;
            }
        }
    }
    Some(want)
}

/// Grows a region from `seed` (output 0 split along `axis`), breadth first, returning the nodes in
/// the order they joined with the axes after each addition.
fn grow(
    g: &Graph,
    f: &Facts,
    seed: NodeId,
    axis: usize,
    max_nodes: usize,
) -> Vec<(NodeId, BTreeMap<ValueId, Option<usize>>)> {
    let consumers = g.consumers();
    let mut axes = BTreeMap::new();
    let Some(first) = join(g, f, seed, 0, axis, &axes) else {
        return Vec::new();
    };
    axes.extend(first);
    let mut nodes: BTreeSet<NodeId> = [seed].into();
    let mut steps = vec![(seed, axes.clone())];
    let mut frontier = vec![seed];
    while let Some(n) = frontier.pop() {
        if nodes.len() >= max_nodes {
            break;
        }
        let node = g.node(n);
        let mut cands: Vec<(NodeId, usize, usize)> = Vec::new();
        // Producers of split inputs.
        for v in node.input_ids() {
            if let (Some(Some(a)), Some(p)) = (axes.get(&v), g.producer(v)) {
                if let ValueKind::Node { slot, .. } = g.value(v).kind {
                    cands.push((p, slot as usize, *a));
                }
            }
        }
        // Consumers of split outputs.
        for v in node.output_ids() {
            let Some(Some(a)) = axes.get(&v).copied() else {
                continue;
            };
            for &c in &consumers[v.index()] {
                let Some(fl) = flows(g, f, c) else { continue };
                let slot_in = g.node(c).inputs.iter().position(|i| *i == Some(v));
                let Some(slot_in) = slot_in else { continue };
                if let Some(o) = fl.first().and_then(|o0| {
                    o0.iter().position(|fa| matches!(fa, AxisFlow::Split(x) if x.get(slot_in).copied().flatten() == Some(a)))
                }) {
                    cands.push((c, 0, o));
                }
            }
        }
        for (c, slot, a) in cands {
            if nodes.contains(&c) || nodes.len() >= max_nodes {
                continue;
            }
            if let Some(want) = join(g, f, c, slot, a, &axes) {
                axes.extend(want);
                nodes.insert(c);
                steps.push((c, axes.clone()));
                frontier.insert(0, c);
            }
        }
    }
    steps
}

fn int_init(g: &mut Graph, name: String, v: i64) -> ValueId {
    g.add_initializer(TensorData::from_i64(name, vec![1], &[v]))
}

fn fresh(_g: &Graph, taken: &mut BTreeSet<String>, base: &str) -> String {
    let mut name = base.to_string();
    let mut k = 1;
    while taken.contains(&name) {
        k += 1;
        name = format!("{base}_{k}");
    }
    taken.insert(name.clone());
    name
}

/// Rewrites `model` so that `region` runs in `region.chunks` slices (see the module docs).
pub fn apply(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    region: &Region,
) -> Result<Model, ChunkError> {
    let g = &model.graph;
    let err = |m: String| ChunkError::Region(m);
    let consumers = g.consumers();
    let is_output: BTreeSet<ValueId> = g.outputs.iter().copied().collect();
    let made_inside = |v: ValueId| g.producer(v).is_some_and(|p| region.nodes.contains(&p));
    // The split extent, from any split value.
    let (&sv, &sa) = region
        .axes
        .iter()
        .find_map(|(v, a)| a.as_ref().map(|a| (v, a)))
        .ok_or_else(|| err("no split value".into()))?;
    let extent = facts
        .get(sv)
        .shape
        .as_ref()
        .and_then(|s| s.get(sa))
        .ok_or_else(|| err("split value has no shape".into()))?;
    let extent = extent
        .eval_map(dims)
        .map_err(|e| err(format!("extent: {e}")))?;
    let k = region.chunks.clamp(1, extent.max(1) as usize) as i64;
    let step = (extent + k - 1) / k;
    let mut bounds: Vec<(i64, i64)> = (0..k)
        .map(|c| (c * step, ((c + 1) * step).min(extent)))
        .filter(|(a, b)| a < b)
        .collect();
    // A last chunk of extent 1 joins the previous one: extent-1 operands can take other kernel paths.
    if bounds.len() > 1 && bounds[bounds.len() - 1].1 - bounds[bounds.len() - 1].0 == 1 {
        let last = bounds.pop().unwrap_or_default();
        if let Some(prev) = bounds.last_mut() {
            prev.1 = last.1;
        }
    }

    let mut out = g.clone();
    let mut taken: BTreeSet<String> = g.values.iter().map(|v| v.name.clone()).collect();
    // Region outputs: made inside, read outside or graph outputs.
    let region_outputs: Vec<ValueId> = g
        .value_ids()
        .filter(|&v| made_inside(v))
        .filter(|&v| {
            is_output.contains(&v)
                || consumers[v.index()]
                    .iter()
                    .any(|c| !region.nodes.contains(c))
        })
        .collect();
    let order: Vec<NodeId> = facts
        .order
        .iter()
        .copied()
        .filter(|n| region.nodes.contains(n))
        .collect();
    let mut pieces: BTreeMap<ValueId, Vec<ValueId>> = BTreeMap::new();
    let mut new_nodes: Vec<Node> = Vec::new();
    let first_new = g.nodes.len();
    let push_node = |out: &mut Graph,
                     new_nodes: &mut Vec<Node>,
                     mut node: Node,
                     outs: &[String]|
     -> Vec<ValueId> {
        let nid = NodeId::from_index(first_new + new_nodes.len());
        let ids: Vec<ValueId> = outs
            .iter()
            .enumerate()
            .map(|(slot, name)| {
                out.add_value(
                    name.clone(),
                    ValueKind::Node {
                        node: nid,
                        slot: slot as u32,
                    },
                )
            })
            .collect();
        node.outputs = ids.iter().map(|&v| Some(v)).collect();
        new_nodes.push(node);
        ids
    };
    let blank =
        |name: String, op: &str, inputs: Vec<Option<ValueId>>, attrs: Vec<Attribute>| Node {
            name,
            op: op.into(),
            domain: String::new(),
            overload: String::new(),
            inputs,
            outputs: Vec::new(),
            attrs,
            doc: String::new(),
            metadata: Vec::new(),
        };
    for (c, &(lo, hi)) in bounds.iter().enumerate() {
        let mut map: BTreeMap<ValueId, ValueId> = BTreeMap::new();
        for &n in &order {
            let node = g.node(n);
            let mut inputs = Vec::with_capacity(node.inputs.len());
            for (slot, inp) in node.inputs.iter().enumerate() {
                let Some(v) = *inp else {
                    inputs.push(None);
                    continue;
                };
                if let Some(&m) = map.get(&v) {
                    inputs.push(Some(m));
                    continue;
                }
                let a = region.axes.get(&v).copied().flatten();
                let mapped = match a {
                    None => v,
                    Some(ax) => {
                        let base = format!("{}__chunk{c}", g.value(v).name);
                        let s =
                            int_init(&mut out, fresh(g, &mut taken, &format!("{base}_start")), lo);
                        let e =
                            int_init(&mut out, fresh(g, &mut taken, &format!("{base}_end")), hi);
                        let x = int_init(
                            &mut out,
                            fresh(g, &mut taken, &format!("{base}_axis")),
                            ax as i64,
                        );
                        let name = fresh(g, &mut taken, &base);
                        let sl = blank(
                            format!("{name}_slice"),
                            "Slice",
                            vec![Some(v), Some(s), Some(e), Some(x)],
                            Vec::new(),
                        );
                        push_node(&mut out, &mut new_nodes, sl, &[name])[0]
                    }
                };
                // Reshape's target is a constant of the whole shape: give each chunk its own.
                let mapped = if node.op == "Reshape" && slot == 1 {
                    let shape = facts
                        .get(node.outputs[0].ok_or_else(|| err("Reshape without output".into()))?)
                        .shape
                        .clone()
                        .ok_or_else(|| err("Reshape output shape unknown".into()))?;
                    let ax = region
                        .axes
                        .get(&node.outputs[0].unwrap_or(v))
                        .copied()
                        .flatten()
                        .ok_or_else(|| err("Reshape output not split".into()))?;
                    let mut vals = Vec::new();
                    for (i, d) in shape.iter().enumerate() {
                        vals.push(if i == ax {
                            hi - lo
                        } else {
                            d.eval_map(dims).map_err(|e| err(e.to_string()))?
                        });
                    }
                    let name = fresh(g, &mut taken, &format!("{}__chunk{c}_shape", node.name));
                    out.add_initializer(TensorData::from_i64(name, vec![vals.len() as u64], &vals))
                } else {
                    mapped
                };
                map.insert(v, mapped);
                inputs.push(Some(mapped));
            }
            let outs: Vec<String> = node
                .outputs
                .iter()
                .map(|o| {
                    o.map(|v| fresh(g, &mut taken, &format!("{}__chunk{c}", g.value(v).name)))
                        .unwrap_or_default()
                })
                .collect();
            let mut clone = blank(
                format!("{}__chunk{c}", node.name),
                &node.op,
                inputs,
                node.attrs.clone(),
            );
            clone.domain = node.domain.clone();
            let ids = push_node(&mut out, &mut new_nodes, clone, &outs);
            for (o, id) in node.outputs.iter().zip(ids) {
                if let Some(v) = o {
                    map.insert(*v, id);
                    if region_outputs.contains(v) {
                        pieces.entry(*v).or_default().push(id);
                    }
                }
            }
            // Reshape's shape operand was replaced per chunk; forget it so the next node maps afresh.
            if node.op == "Reshape" {
                if let Some(Some(s)) = node.inputs.get(1) {
                    map.remove(s);
                }
            }
        }
    }
    // Concat each region output under its original value id: consumers stay as they are.
    let mut concat_of: BTreeMap<ValueId, Node> = BTreeMap::new();
    for &v in &region_outputs {
        let ax = region
            .axes
            .get(&v)
            .copied()
            .flatten()
            .ok_or_else(|| err(format!("region output '{}' is not split", g.value(v).name)))?;
        let ins = pieces
            .get(&v)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(Some)
            .collect();
        let attrs = vec![Attribute {
            name: "axis".into(),
            value: AttrValue::Int(ax as i64),
            doc: String::new(),
        }];
        let mut node = blank(format!("{}__concat", g.value(v).name), "Concat", ins, attrs);
        node.outputs = vec![Some(v)];
        concat_of.insert(v, node);
    }
    // Assemble: old nodes outside the region keep their ids' order; the chunk nodes and concats follow
    // the last region node; a topological sort that keeps file order where valid fixes the rest.
    let mut nodes: Vec<Node> = Vec::new();
    let mut value_owner: Vec<(ValueId, usize, u32)> = Vec::new();
    let last_region = order.iter().map(|n| n.index()).max().unwrap_or(0);
    for (i, node) in g.nodes.iter().enumerate() {
        if !region.nodes.contains(&NodeId::from_index(i)) {
            nodes.push(node.clone());
        }
        if i == last_region {
            nodes.extend(new_nodes.iter().cloned());
            nodes.extend(concat_of.values().cloned());
        }
    }
    for (i, n) in nodes.iter().enumerate() {
        for (slot, o) in n.outputs.iter().enumerate() {
            if let Some(v) = o {
                value_owner.push((*v, i, slot as u32));
            }
        }
    }
    out.nodes = nodes;
    for (v, i, slot) in value_owner {
        out.values[v.index()].kind = ValueKind::Node {
            node: NodeId::from_index(i),
            slot,
        };
    }
    // Values only the region read or made inside it are gone: drop their value_info entries.
    let live: BTreeSet<ValueId> = out
        .nodes
        .iter()
        .flat_map(|n| n.input_ids().chain(n.output_ids()))
        .chain(out.inputs.iter().copied())
        .chain(out.outputs.iter().copied())
        .collect();
    out.value_info.retain(|v| live.contains(v));
    let order = out.topo_order().map_err(|e| err(e.to_string()))?;
    let out = reorder(&out, &order);
    Ok(Model {
        graph: out,
        ..model.clone()
    })
}

/// The graph with its nodes in `order`; values no node produces any more (the region's
/// intermediates) are left unreferenced, without a name, as outer-scope placeholders.
fn reorder(g: &Graph, order: &[NodeId]) -> Graph {
    let mut out = crate::reorder(g, order);
    let produced: BTreeSet<ValueId> = out.nodes.iter().flat_map(|n| n.output_ids()).collect();
    for v in out.value_ids() {
        if matches!(out.value(v).kind, ValueKind::Node { .. }) && !produced.contains(&v) {
            out.values[v.index()].kind = ValueKind::Outer;
            out.values[v.index()].name = String::new();
        }
    }
    out
}

/// Whether score `a` beats `b`: a peak lower by more than 0.1%, or a peak within 0.1% (chunking adds
/// a few bytes of slice bounds) with fewer steps near it.
fn better(a: (u64, usize), b: (u64, usize)) -> bool {
    let tol = b.0 / 1000;
    a.0 + tol < b.0 || (a.0 <= b.0 + tol && a.1 < b.1)
}

/// Options of [`chunk_to_budget`].
#[derive(Clone, Debug)]
pub struct ChunkOptions {
    /// Stop when the simulated peak is at most this; `None`: as low as chunking gets it.
    pub budget: Option<u64>,
    /// Chunk counts to try.
    pub chunk_counts: Vec<usize>,
    /// Largest region, in nodes.
    pub max_region: usize,
    /// At most this many chunking steps.
    pub max_steps: usize,
}

impl Default for ChunkOptions {
    fn default() -> Self {
        ChunkOptions {
            budget: None,
            chunk_counts: vec![2, 4, 8, 16, 32, 64],
            max_region: 400,
            max_steps: 8,
        }
    }
}

/// Chunks `model` at `dims` until the peak fits `opts.budget` or no region lowers it further.
pub fn chunk_to_budget(
    model: &Model,
    dims: &BTreeMap<String, i64>,
    opts: &ChunkOptions,
) -> Result<(Model, Vec<ChunkStep>), ChunkError> {
    let mut cur = model.clone();
    let mut steps = Vec::new();
    for _ in 0..opts.max_steps {
        let (cur_score, node, facts) = score(&cur, dims)?;
        let peak = cur_score.0;
        if opts.budget.is_some_and(|b| peak <= b) {
            break;
        }
        let Some(seed) = node else { break };
        let g = &cur.graph;
        // Axes of the seed's output 0, largest extent first.
        let Some(out0) = g.node(seed).outputs.first().copied().flatten() else {
            break;
        };
        let Some(shape) = facts.get(out0).shape.clone() else {
            break;
        };
        let mut seed_axes: Vec<(i64, usize)> = shape
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.eval_map(dims).ok().filter(|&e| e > 1).map(|e| (e, i)))
            .collect();
        // Largest extent first; among equal extents the outer axis, whose slices are contiguous.
        seed_axes.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut best: Option<((u64, usize), Model, ChunkStep)> = None;
        for &(extent, axis) in seed_axes.iter().take(3) {
            let growth = grow(g, &facts, seed, axis, opts.max_region);
            if std::env::var_os("MEMPLAN_DEBUG_CHUNK").is_some() {
                eprintln!(
                    "seed {} axis {axis} (extent {extent}): region grows to {} nodes",
                    g.node(seed).name,
                    growth.len()
                );
            }
            // Evaluate a few prefixes of the growth, from the largest down.
            let n = growth.len();
            let mut prefixes: Vec<usize> = vec![n];
            let mut p = n;
            while p > 1 {
                p /= 2;
                prefixes.push(p);
            }
            // Pick the growth prefix at a middle chunk count, then the count for that prefix.
            let mid = opts.chunk_counts[opts.chunk_counts.len() / 2];
            let mut best_len: Option<((u64, usize), usize)> = None;
            for phase in 0..2 {
                let tries: Vec<(usize, usize)> = match (phase, best_len) {
                    (0, _) => prefixes.iter().map(|&l| (l, mid)).collect(),
                    (_, Some((_, l))) => opts
                        .chunk_counts
                        .iter()
                        .filter(|&&c| c != mid)
                        .map(|&c| (l, c))
                        .collect(),
                    _ => Vec::new(),
                };
                for (len, chunks) in tries {
                    if len == 0 || chunks as i64 > extent {
                        continue;
                    }
                    let nodes: BTreeSet<NodeId> = growth[..len].iter().map(|(n, _)| *n).collect();
                    let region = Region {
                        nodes: nodes.clone(),
                        axes: growth[len - 1].1.clone(),
                        chunks,
                    };
                    let debug = std::env::var_os("MEMPLAN_DEBUG_CHUNK").is_some();
                    let evaluated = apply(&cur, &facts, dims, &region)
                        .and_then(|m| score(&m, dims).map(|(p, _, _)| (p, m)));
                    let (p, m) = match evaluated {
                        Ok(x) => x,
                        Err(e) => {
                            if debug {
                                eprintln!("  len {len} x{chunks}: {e}");
                            }
                            continue;
                        }
                    };
                    if debug {
                        eprintln!("  len {len} x{chunks}: {p:?} vs {cur_score:?}");
                    }
                    if phase == 0 && best_len.is_none_or(|(bp, _)| better(p, bp)) {
                        best_len = Some((p, len));
                    }
                    if better(p, cur_score) && best.as_ref().is_none_or(|(bp, _, _)| better(p, *bp))
                    {
                        let mut names: Vec<String> =
                            nodes.iter().map(|n| g.node(*n).name.clone()).collect();
                        names.sort();
                        best = Some((
                            p,
                            m,
                            ChunkStep {
                                nodes: names,
                                chunks,
                                extent,
                                peak_before: peak,
                                peak_after: p.0,
                            },
                        ));
                    }
                }
            }
        }
        match best {
            Some((_, m, s)) => {
                cur = m;
                steps.push(s);
            }
            None => break,
        }
    }
    Ok((cur, steps))
}
