//! Regions: growing a set of nodes from a seed along one split axis, and the convexity a region
//! needs to be rewritten (no path may leave it and come back, or the chunks would wait on
//! themselves). Two ways to restore convexity: drop the region nodes where such a path starts
//! ([`convex_part`]), or keep them, and the region nodes they depend on, whole for their outside
//! readers while the region recomputes its own slices of them ([`recompute_part`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use memplan_ir::graph::{Graph, NodeId, ValueId, ValueKind};
use memplan_ir::infer::Facts;
use memplan_ir::ops::axes::{axis_flow, scaled_axis_flow, AxisFlow, FlowFn};
use memplan_ir::{Expr, Fact};

/// One node joining a growing region and the split axes of the values it touches (`None`: read
/// whole).
pub(crate) type Joined = (NodeId, Vec<(ValueId, Option<usize>)>);

/// The axis flow of node `n` over its facts at `dims`. A region is chunked at given dims, so its
/// flows are decided on the shapes there: a `Reshape` whose target was frozen to a constant
/// (`freeze`) has a concrete output and a symbolic input, equal only once the input is evaluated.
pub(crate) fn flows(
    g: &Graph,
    f: &Facts,
    dims: &BTreeMap<String, i64>,
    n: NodeId,
) -> Option<Vec<Vec<AxisFlow>>> {
    flows_by(g, f, dims, n, axis_flow)
}

/// What regions grow along: [`flows`], and with `scaled`, a reshape's axes whose extents differ by
/// a whole factor split too ([`scaled_axis_flow`]), each value sliced in proportion to its extent
/// (see [`unit_extent`]).
pub(crate) fn grow_flows(
    g: &Graph,
    f: &Facts,
    dims: &BTreeMap<String, i64>,
    n: NodeId,
    scaled: bool,
) -> Option<Vec<Vec<AxisFlow>>> {
    let mut fl = flows(g, f, dims, n)?;
    if !scaled {
        return Some(fl);
    }
    if let Some(scaled) = flows_by(g, f, dims, n, scaled_axis_flow) {
        for (o, s) in fl.iter_mut().zip(scaled) {
            for (a, s) in o.iter_mut().zip(s) {
                if *a == AxisFlow::Mixed {
                    *a = s;
                }
            }
        }
    }
    Some(fl)
}

fn flows_by(
    g: &Graph,
    f: &Facts,
    dims: &BTreeMap<String, i64>,
    n: NodeId,
    rule: FlowFn,
) -> Option<Vec<Vec<AxisFlow>>> {
    let node = g.node(n);
    if node.subgraphs().next().is_some() {
        return None;
    }
    let at = |v: ValueId| -> Fact {
        let mut x = f.get(v).clone();
        if let Some(s) = x.shape.as_mut() {
            for d in s.iter_mut() {
                if let Ok(e) = d.eval_map(dims) {
                    *d = Expr::from(e);
                }
            }
        }
        x
    };
    let ins: Vec<Option<Fact>> = node.inputs.iter().map(|i| i.map(at)).collect();
    let outs: Vec<Option<Fact>> = node.outputs.iter().map(|o| o.map(at)).collect();
    let ins: Vec<Option<&Fact>> = ins.iter().map(Option::as_ref).collect();
    let outs: Vec<Option<&Fact>> = outs.iter().map(Option::as_ref).collect();
    rule(node, &ins, &outs)
}

/// The extent a region's chunks are cut along, and each split value's multiple of it: every
/// split value's extent along its axis at `dims` is a whole multiple of the unit (their greatest
/// common divisor), and chunk `[lo, hi)` of the unit is `[lo * m, hi * m)` of a value of multiple
/// `m`. Values of a region grown through [`scaled_axis_flow`] differ so; the rest have one extent
/// (multiple 1). `None` when a split value's extent is unknown.
pub(crate) fn unit_extent(
    f: &Facts,
    dims: &BTreeMap<String, i64>,
    axes: &BTreeMap<ValueId, Option<usize>>,
) -> Option<(i64, BTreeMap<ValueId, i64>)> {
    let mut extents = BTreeMap::new();
    for (&v, a) in axes {
        let Some(a) = *a else { continue };
        let e = f.get(v).shape.as_ref()?.get(a)?.eval_map(dims).ok()?;
        (e > 0).then_some(())?;
        extents.insert(v, e);
    }
    let gcd = |mut x: i64, mut y: i64| {
        while y != 0 {
            (x, y) = (y, x % y);
        }
        x
    };
    let unit = extents.values().fold(0, |u, &e| gcd(u, e));
    (unit > 0).then_some(())?;
    Some((
        unit,
        extents.into_iter().map(|(v, e)| (v, e / unit)).collect(),
    ))
}

/// The axes node `n`'s values need when its output `slot` is split along `axis`, or `None` when it
/// cannot join a region with the axes chosen so far.
#[allow(clippy::too_many_arguments)]
fn join(
    g: &Graph,
    f: &Facts,
    dims: &BTreeMap<String, i64>,
    n: NodeId,
    slot: usize,
    axis: usize,
    axes: &BTreeMap<ValueId, Option<usize>>,
    frozen: &[bool],
    scaled: bool,
) -> Option<Vec<(ValueId, Option<usize>)>> {
    let node = g.node(n);
    // Nodes an earlier chunking made stay as they are: chunking a chunk again only nibbles at the
    // peak one chunk at a time.
    if frozen.get(n.index()).copied().unwrap_or(true) {
        return None;
    }
    let fl = grow_flows(g, f, dims, n, scaled)?;
    let AxisFlow::Split(ins) = fl.get(slot)?.get(axis)? else {
        return None;
    };
    let mut want = Vec::new();
    for (i, inp) in node.inputs.iter().enumerate() {
        let Some(v) = *inp else { continue };
        let a = ins.get(i).copied().flatten();
        // Sliceable: node outputs, graph inputs and dense weights.
        let sliceable = matches!(
            g.value(v).kind,
            ValueKind::Node { .. } | ValueKind::Input | ValueKind::Initializer(_)
        );
        if a.is_some() && !sliceable {
            return None;
        }
        want.push((v, a));
    }
    // Every other output splits along the axis that maps the inputs the same way.
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

/// Grows a region from `seed` with its output 0 split along `axis`, breadth first over producers
/// and consumers that pass the axis through (the makers of `light` values, see
/// [`light_values`](crate::remat::light_values), ahead of the rest, and only as producers), up to
/// `max_nodes`, never into `frozen` nodes; with `scaled`, also through reshapes that scale the
/// axis ([`grow_flows`]). Returns the nodes in the order they
/// joined, each with the axes it added; any prefix is a region (convex or not, see [`convex`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn grow(
    g: &Graph,
    f: &Facts,
    dims: &BTreeMap<String, i64>,
    consumers: &[Vec<NodeId>],
    light: &[bool],
    seed: NodeId,
    axis: usize,
    max_nodes: usize,
    frozen: &[bool],
    scaled: bool,
) -> Vec<Joined> {
    let mut axes: BTreeMap<ValueId, Option<usize>> = BTreeMap::new();
    let Some(first) = join(g, f, dims, seed, 0, axis, &axes, frozen, scaled) else {
        return Vec::new();
    };
    axes.extend(first.iter().copied());
    let mut nodes: BTreeSet<NodeId> = [seed].into();
    let mut joined = vec![(seed, first)];
    let mut queue = VecDeque::from([seed]);
    while let Some(n) = queue.pop_front() {
        if nodes.len() >= max_nodes {
            break;
        }
        let node = g.node(n);
        let mut cands: Vec<(NodeId, usize, usize)> = Vec::new();
        for v in node.input_ids() {
            if let (Some(Some(a)), ValueKind::Node { node: p, slot }) =
                (axes.get(&v), &g.value(v).kind)
            {
                cands.push((*p, *slot as usize, *a));
            }
        }
        for v in node.output_ids() {
            let Some(Some(a)) = axes.get(&v).copied() else {
                continue;
            };
            for &c in &consumers[v.index()] {
                // The maker of a light value joins from the value's reader (backward), never from
                // its small inputs: another reader's copy of a position bias belongs to that
                // reader's region.
                if g.node(c).output_ids().all(|y| light[y.index()]) {
                    continue;
                }
                let Some(fl) = grow_flows(g, f, dims, c, scaled) else {
                    continue;
                };
                let Some(slot_in) = g.node(c).inputs.iter().position(|i| *i == Some(v)) else {
                    continue;
                };
                let found = fl.first().and_then(|o0| {
                    o0.iter().position(|fa| {
                        matches!(fa, AxisFlow::Split(x) if x.get(slot_in).copied().flatten() == Some(a))
                    })
                });
                if let Some(o) = found {
                    cands.push((c, 0, o));
                }
            }
        }
        for (c, slot, a) in cands {
            if nodes.contains(&c) || nodes.len() >= max_nodes {
                continue;
            }
            if let Some(want) = join(g, f, dims, c, slot, a, &axes, frozen, scaled) {
                axes.extend(want.iter().copied());
                nodes.insert(c);
                joined.push((c, want));
                // The makers of light values first: a position bias or mask joins whole, from
                // its small inputs, before the region spreads elsewhere.
                if g.node(c).output_ids().any(|v| light[v.index()]) {
                    queue.push_front(c);
                } else {
                    queue.push_back(c);
                }
            }
        }
    }
    joined
}

/// Whether region node `n` splits its output 0 (per `axes`); one that does not is computed whole in
/// every chunk and reads its inputs whole (see `tile`).
pub(crate) fn splits_output(g: &Graph, axes: &BTreeMap<ValueId, Option<usize>>, n: NodeId) -> bool {
    g.node(n)
        .outputs
        .first()
        .copied()
        .flatten()
        .is_some_and(|y| axes.get(&y).copied().flatten().is_some())
}

/// Adds to a region (`nodes`, `axes`) the producers of its split inputs whose outputs only the
/// region reads, where they pass the axis (repeatedly, so a chain joins): a value read only by the
/// region need not be made whole before it, and such a producer keeps the region convex. `None`
/// axes are read whole and left alone, and so is a value that a region node computed whole per
/// chunk (one whose output is not split) reads. `scaled`: as in [`grow`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn absorb_producers(
    g: &Graph,
    f: &Facts,
    dims: &BTreeMap<String, i64>,
    consumers: &[Vec<NodeId>],
    nodes: &mut BTreeSet<NodeId>,
    axes: &mut BTreeMap<ValueId, Option<usize>>,
    frozen: &[bool],
    scaled: bool,
) {
    let outputs: BTreeSet<ValueId> = g.outputs.iter().copied().collect();
    loop {
        let mut joined = false;
        let inputs: Vec<(ValueId, usize)> = nodes
            .iter()
            .flat_map(|&n| g.node(n).input_ids())
            .filter_map(|v| axes.get(&v).copied().flatten().map(|a| (v, a)))
            .collect();
        for (v, a) in inputs {
            let ValueKind::Node { node: p, slot } = g.value(v).kind else {
                continue;
            };
            if nodes.contains(&p) {
                continue;
            }
            // Read by region nodes that split their outputs (not by one computed whole per chunk,
            // which reads its inputs whole).
            let split = |c: &NodeId| nodes.contains(c) && splits_output(g, axes, *c);
            let only_region = g
                .node(p)
                .output_ids()
                .all(|y| !outputs.contains(&y) && consumers[y.index()].iter().all(split));
            if !only_region {
                continue;
            }
            if let Some(want) = join(g, f, dims, p, slot as usize, a, axes, frozen, scaled) {
                axes.extend(want);
                nodes.insert(p);
                joined = true;
            }
        }
        if !joined {
            return;
        }
    }
}

/// Whether no path leaves `nodes` and comes back, but from a node of `keep` (see [`escapes`]).
pub(crate) fn is_convex(
    g: &Graph,
    consumers: &[Vec<NodeId>],
    nodes: &BTreeSet<NodeId>,
    keep: &BTreeSet<NodeId>,
) -> bool {
    escapes(g, consumers, nodes, keep).is_empty()
}

/// The outside nodes on a path that leaves `nodes` and comes back (the node list must be in
/// topological order): reachable from the region and reaching it. Empty when the region is convex.
/// Paths that leave from a node of `keep` do not count: its outside readers read its original,
/// computed whole before the region.
fn escapes(
    g: &Graph,
    consumers: &[Vec<NodeId>],
    nodes: &BTreeSet<NodeId>,
    keep: &BTreeSet<NodeId>,
) -> BTreeSet<NodeId> {
    let (Some(&first), Some(&last)) = (nodes.first(), nodes.last()) else {
        return BTreeSet::new();
    };
    // Forward from the region, over outside nodes up to its last node (flags by node: a region
    // grown over an unrolled one meets thousands of them, once per prefix tried).
    let mut fwd = vec![false; last.index() + 1];
    let mut reached: Vec<NodeId> = Vec::new();
    let mut stack: Vec<NodeId> = Vec::new();
    let succ = |n: NodeId| {
        g.node(n)
            .output_ids()
            .flat_map(|v| consumers[v.index()].iter().copied())
    };
    for &n in nodes.difference(keep) {
        stack.extend(succ(n));
    }
    while let Some(c) = stack.pop() {
        if c > last || nodes.contains(&c) || fwd[c.index()] {
            continue;
        }
        fwd[c.index()] = true;
        reached.push(c);
        stack.extend(succ(c));
    }
    // Of those, the ones that reach the region, latest first so successors are decided before.
    reached.sort_unstable();
    let mut back = vec![false; last.index() + 1];
    let mut out: BTreeSet<NodeId> = BTreeSet::new();
    for &c in reached.iter().rev() {
        if c < first {
            break;
        }
        if succ(c).any(|x| nodes.contains(&x) || (x <= last && back[x.index()])) {
            back[c.index()] = true;
            out.insert(c);
        }
    }
    out
}

/// The largest convex part of `nodes` found by dropping region nodes that feed a path leaving the
/// region and coming back (the path's start), repeatedly.
pub(crate) fn convex_part(
    g: &Graph,
    consumers: &[Vec<NodeId>],
    nodes: &BTreeSet<NodeId>,
) -> BTreeSet<NodeId> {
    let mut r = nodes.clone();
    loop {
        let x = escapes(g, consumers, &r, &BTreeSet::new());
        if x.is_empty() {
            return r;
        }
        let drop: Vec<NodeId> = r
            .iter()
            .copied()
            .filter(|&n| feeds(g, consumers, n, &x))
            .collect();
        if drop.is_empty() {
            return BTreeSet::new();
        }
        for n in drop {
            r.remove(&n);
        }
    }
}

/// Whether an output of node `n` is read by a node of `readers`.
fn feeds(g: &Graph, consumers: &[Vec<NodeId>], n: NodeId, readers: &BTreeSet<NodeId>) -> bool {
    g.node(n)
        .output_ids()
        .any(|v| consumers[v.index()].iter().any(|c| readers.contains(c)))
}

/// The region `nodes` made convex by keeping some of its nodes whole, besides their per-chunk
/// clones: the region nodes where a path leaving the region and coming back starts, and every
/// region node they depend on (their originals must not read the region's chunks). Their outside
/// readers read the originals, computed whole before the region; the region recomputes its own
/// slices of them. A kept node that no other region node reads (directly or through kept nodes)
/// leaves the region: nothing in it needs its slices. Returns the region's nodes and the kept ones;
/// `None` when the region is convex as it is, or when more than `max_keep` nodes (or all of them)
/// would be kept.
pub(crate) fn recompute_part(
    g: &Graph,
    consumers: &[Vec<NodeId>],
    nodes: &BTreeSet<NodeId>,
    max_keep: usize,
) -> Option<(BTreeSet<NodeId>, BTreeSet<NodeId>)> {
    let mut keep: BTreeSet<NodeId> = BTreeSet::new();
    loop {
        let x = escapes(g, consumers, nodes, &keep);
        if x.is_empty() {
            break;
        }
        let mut stack: Vec<NodeId> = nodes
            .difference(&keep)
            .copied()
            .filter(|&n| feeds(g, consumers, n, &x))
            .collect();
        if stack.is_empty() {
            return None;
        }
        while let Some(n) = stack.pop() {
            if !keep.insert(n) {
                continue;
            }
            for v in g.node(n).input_ids() {
                if let Some(p) = g.producer(v).filter(|p| nodes.contains(p)) {
                    stack.push(p);
                }
            }
        }
        if keep.len() > max_keep || keep.len() == nodes.len() {
            return None;
        }
    }
    // Latest first (node ids are in topological order), so a kept node's readers are decided
    // before it.
    let mut region = nodes.clone();
    for &n in keep.iter().rev() {
        let read = g
            .node(n)
            .output_ids()
            .any(|v| consumers[v.index()].iter().any(|c| region.contains(c)));
        if !read {
            region.remove(&n);
        }
    }
    let keep: BTreeSet<NodeId> = keep.intersection(&region).copied().collect();
    (!keep.is_empty()).then_some((region, keep))
}
