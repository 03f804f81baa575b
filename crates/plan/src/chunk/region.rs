//! Regions: growing a set of nodes from a seed along one split axis, and the convexity a region
//! needs to be rewritten (no path may leave it and come back, or the chunks would wait on
//! themselves).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use memplan_ir::graph::{Graph, NodeId, ValueId, ValueKind};
use memplan_ir::infer::Facts;
use memplan_ir::ops::axes::{axis_flow, AxisFlow};
use memplan_ir::Fact;

/// One node joining a growing region and the split axes of the values it touches (`None`: read
/// whole).
pub(crate) type Joined = (NodeId, Vec<(ValueId, Option<usize>)>);

fn flows(g: &Graph, f: &Facts, n: NodeId) -> Option<Vec<Vec<AxisFlow>>> {
    let node = g.node(n);
    if node.subgraphs().next().is_some() {
        return None;
    }
    let ins: Vec<Option<&Fact>> = node.inputs.iter().map(|i| i.map(|v| f.get(v))).collect();
    let outs: Vec<Option<&Fact>> = node.outputs.iter().map(|o| o.map(|v| f.get(v))).collect();
    axis_flow(node, &ins, &outs)
}

/// The axes node `n`'s values need when its output `slot` is split along `axis`, or `None` when it
/// cannot join a region with the axes chosen so far.
fn join(
    g: &Graph,
    f: &Facts,
    n: NodeId,
    slot: usize,
    axis: usize,
    axes: &BTreeMap<ValueId, Option<usize>>,
    frozen: &[bool],
) -> Option<Vec<(ValueId, Option<usize>)>> {
    let node = g.node(n);
    // Nodes an earlier chunking made stay as they are: chunking a chunk again only nibbles at the
    // peak one chunk at a time.
    if frozen.get(n.index()).copied().unwrap_or(true) {
        return None;
    }
    let fl = flows(g, f, n)?;
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
/// and consumers that pass the axis through, up to `max_nodes`, never into `frozen` nodes. Returns the nodes in the order they
/// joined, each with the axes it added; any prefix is a region (convex or not, see [`convex`]).
pub(crate) fn grow(
    g: &Graph,
    f: &Facts,
    consumers: &[Vec<NodeId>],
    seed: NodeId,
    axis: usize,
    max_nodes: usize,
    frozen: &[bool],
) -> Vec<Joined> {
    let mut axes: BTreeMap<ValueId, Option<usize>> = BTreeMap::new();
    let Some(first) = join(g, f, seed, 0, axis, &axes, frozen) else {
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
                let Some(fl) = flows(g, f, c) else { continue };
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
            if let Some(want) = join(g, f, c, slot, a, &axes, frozen) {
                axes.extend(want.iter().copied());
                nodes.insert(c);
                joined.push((c, want));
                queue.push_back(c);
            }
        }
    }
    joined
}

/// The outside nodes on a path that leaves `nodes` and comes back (the node list must be in
/// topological order): reachable from the region and reaching it. Empty when the region is convex.
fn escapes(g: &Graph, consumers: &[Vec<NodeId>], nodes: &BTreeSet<NodeId>) -> BTreeSet<NodeId> {
    let (Some(&first), Some(&last)) = (nodes.first(), nodes.last()) else {
        return BTreeSet::new();
    };
    // Forward from the region, over outside nodes up to its last node.
    let mut fwd: BTreeSet<NodeId> = BTreeSet::new();
    let mut stack: Vec<NodeId> = Vec::new();
    let succ = |n: NodeId| {
        g.node(n)
            .output_ids()
            .flat_map(|v| consumers[v.index()].iter().copied())
            .collect::<Vec<_>>()
    };
    for &n in nodes {
        stack.extend(succ(n));
    }
    while let Some(c) = stack.pop() {
        if c > last || nodes.contains(&c) || !fwd.insert(c) {
            continue;
        }
        stack.extend(succ(c));
    }
    // Of those, the ones that reach the region, latest first so successors are decided before.
    let mut back: BTreeSet<NodeId> = BTreeSet::new();
    for &c in fwd.iter().rev() {
        if c < first {
            continue;
        }
        if succ(c)
            .iter()
            .any(|x| nodes.contains(x) || back.contains(x))
        {
            back.insert(c);
        }
    }
    back
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
        let x = escapes(g, consumers, &r);
        if x.is_empty() {
            return r;
        }
        let drop: Vec<NodeId> = r
            .iter()
            .copied()
            .filter(|&n| {
                g.node(n)
                    .output_ids()
                    .any(|v| consumers[v.index()].iter().any(|c| x.contains(c)))
            })
            .collect();
        if drop.is_empty() {
            return BTreeSet::new();
        }
        for n in drop {
            r.remove(&n);
        }
    }
}
