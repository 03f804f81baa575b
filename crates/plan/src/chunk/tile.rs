//! Tiles: two levels of chunking, for a region whose every chunk reads one large value whole.
//!
//! The outgoing triangle product `x[i, j] = sum_k a[i, k] b[j, k]` chunked along `i` reads the whole
//! of `b` in every chunk, so `b` stays whole however many chunks there are, and no region of one axis
//! gets below it. Tiling makes that value again in each chunk: its makers are copied for the
//! region's readers of it (up to small values, inputs and weights: `b`'s projections from the pair
//! representation), the copies join the region computed whole per chunk, and the region is chunked
//! along its axis. Then each chunk's clones are chunked again, along the axis of the reader's
//! output that the value's own axis flows to (`j`), grown from that reader as any region is: each
//! tile `(I, J)` makes `b[J]` from the slices of its inputs. What stays whole is the tiles'
//! intermediates, not `b`; the price is the copied makers run once per outer chunk, which the cost
//! model counts.
//!
//! Every clone computes its output elements from the same input elements with the same op as the
//! original, so outputs are bit-identical.

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::graph::{Graph, Model, NodeId, ValueId};
use memplan_ir::infer::Facts;
use memplan_ir::ops::axes::AxisFlow;

use super::predict::{first_readers, Base};
use super::rewrite::{apply_unrolled, compact_mapped, drop_unread_initializers, set_producers};
use super::{region, rewritten_facts, ChunkError, ChunkOptions, Region};

/// At most this many nodes are copied to make a value again per chunk.
const MAX_COPIED: usize = 48;

/// A region chunked in tiles, built.
pub(crate) struct Tiled {
    pub model: Model,
    pub facts: Facts,
    /// The simulated peak of the built graph; the highest live bytes over the steps of the nodes
    /// the rewrite made and the first readers after them of their large outputs (resident bytes
    /// included), and over the new nodes' steps alone (see `Prediction`).
    pub peak: u64,
    pub local: u64,
    pub span: u64,
    /// Predicted extra seconds (the cost model over every node, new less old).
    pub seconds: f64,
    pub added: usize,
    /// Chunks within each chunk.
    pub inner: usize,
    /// Nodes copied to make the value again per chunk.
    pub copied: usize,
}

/// The largest value of at least `min_bytes` that region `r` reads whole and a node makes.
fn whole_input(base: &Base, r: &Region, min_bytes: u64) -> Option<ValueId> {
    let g = base.g;
    let inside = |v: ValueId| g.producer(v).is_some_and(|p| r.nodes.contains(&p));
    r.nodes
        .iter()
        .flat_map(|&n| g.node(n).input_ids())
        .filter(|&v| !inside(v) && g.producer(v).is_some())
        .filter(|v| r.axes.get(v).copied().flatten().is_none())
        .filter(|v| base.bytes[v.index()] >= min_bytes)
        .max_by_key(|v| (base.bytes[v.index()], std::cmp::Reverse(*v)))
}

/// Whether region `r` reads whole a value (see [`whole_input`]) that is live at the peak of
/// `base` or made from values live there: what tiling would make again per chunk holds the peak up.
pub(crate) fn whole_at_peak(base: &Base, r: &Region) -> bool {
    let g = base.g;
    let small = base.peak / 64;
    let Some(v) = whole_input(base, r, base.peak / 16) else {
        return false;
    };
    let live: BTreeSet<&str> = base.live.iter().map(|(n, _)| n.as_str()).collect();
    // Back over the values the copy would be made from.
    let mut stack = vec![v];
    let mut seen: BTreeSet<ValueId> = BTreeSet::new();
    while let Some(x) = stack.pop() {
        if seen.len() > MAX_COPIED || !seen.insert(x) {
            continue;
        }
        if live.contains(g.value(x).name.as_str()) {
            return true;
        }
        if let Some(p) = g.producer(x) {
            stack.extend(
                g.node(p)
                    .input_ids()
                    .filter(|w| g.producer(*w).is_some() && base.bytes[w.index()] >= small),
            );
        }
    }
    false
}

/// A model with a value's makers copied for a region's readers of it (see [`copy_makers`]).
struct Copied {
    model: Model,
    /// The region in the new graph, the copies included (computed whole per chunk).
    region: Region,
    /// The region's first reader of the copy, and the input slot it reads it at.
    reader: NodeId,
    slot: usize,
    /// Each old node's new id.
    new_id: BTreeMap<NodeId, NodeId>,
    /// Nodes copied.
    copied: usize,
}

/// `model` with the makers of `v` copied for the readers of `v` in region `r` (up to values under
/// `small` bytes, values read after the region, inputs and weights); the originals that nothing
/// reads any more are dropped.
fn copy_makers(base: &Base, model: &Model, r: &Region, v: ValueId, small: u64) -> Option<Copied> {
    let g = base.g;
    let readers: Vec<NodeId> = r
        .nodes
        .iter()
        .copied()
        .filter(|&n| g.node(n).input_ids().any(|x| x == v))
        .collect();
    let first = *readers.first()?;
    let slot = g.node(first).inputs.iter().position(|i| *i == Some(v))?;
    let mut c = crate::remat::Cloner::new(g, base.facts, base.dims);
    // Not copied: small values, and values live past the region anyway (a residual stream the
    // module adds its update to), which the copies read as they are.
    let last = r.nodes.last().copied()?;
    let read_after =
        |w: ValueId| g.outputs.contains(&w) || base.consumers[w.index()].iter().any(|&x| x > last);
    let keep = |w: ValueId| base.bytes[w.index()] < small || read_after(w);
    let copy = c.clone_value(v, MAX_COPIED, &keep, true)?;
    if c.new_nodes.is_empty() || c.new_nodes.len() > MAX_COPIED {
        return None;
    }
    for &n in &readers {
        for i in c.g.nodes[n.index()].inputs.iter_mut() {
            if *i == Some(v) {
                *i = Some(copy);
            }
        }
    }
    // The originals of the copies that nothing reads now, latest first.
    let originals: BTreeSet<NodeId> = c.origin.values().filter_map(|&o| g.producer(o)).collect();
    let outputs: BTreeSet<ValueId> = c.g.outputs.iter().copied().collect();
    let consumers = c.g.consumers();
    let mut dead: BTreeSet<NodeId> = BTreeSet::new();
    for &o in originals.iter().rev() {
        let unread = c.g.nodes[o.index()].output_ids().all(|y| {
            !outputs.contains(&y) && consumers[y.index()].iter().all(|x| dead.contains(x))
        });
        if unread {
            dead.insert(o);
        }
    }
    let mut schedule: Vec<NodeId> = Vec::with_capacity(c.g.nodes.len());
    for n in g.node_ids() {
        if n == first {
            schedule.extend(c.new_nodes.iter().copied());
        }
        if !dead.contains(&n) {
            schedule.push(n);
        }
    }
    let new_id: BTreeMap<NodeId, NodeId> = schedule
        .iter()
        .enumerate()
        .map(|(i, &n)| (n, NodeId::from_index(i)))
        .collect();
    let mut out = crate::reorder(&c.g, &schedule);
    set_producers(&mut out);
    // Drop the dead nodes' values, renumbering the rest.
    let (out, value_id) = compact_mapped(out);
    let mut nodes: BTreeSet<NodeId> = r.nodes.iter().map(|n| new_id[n]).collect();
    nodes.extend(c.new_nodes.iter().map(|n| new_id[n]));
    let axes = r
        .axes
        .iter()
        .filter_map(|(x, a)| value_id[x.index()].map(|y| (y, *a)))
        .collect();
    let region = Region {
        nodes,
        axes,
        chunks: r.chunks,
        keep: BTreeSet::new(),
    };
    let model = Model {
        graph: out,
        ..model.clone()
    };
    Some(Copied {
        model,
        region,
        reader: new_id[&first],
        slot,
        new_id,
        copied: c.new_nodes.len(),
    })
}

/// The axis of node `n`'s output 0 that its input `slot` flows to (the largest such extent above
/// 1), at the facts of `g`.
fn reader_axis(
    g: &Graph,
    f: &Facts,
    dims: &BTreeMap<String, i64>,
    n: NodeId,
    slot: usize,
) -> Option<usize> {
    let fl = region::flows(g, f, dims, n)?;
    let out = g.node(n).outputs.first().copied().flatten()?;
    let shape = f.get(out).shape.as_ref()?;
    fl.first()?
        .iter()
        .enumerate()
        .filter(|(_, a)| matches!(a, AxisFlow::Split(ins) if ins.get(slot).copied().flatten().is_some()))
        .filter_map(|(o, _)| {
            let e = shape.get(o)?.eval_map(dims).ok()?;
            (e > 1).then_some((e, o))
        })
        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
        .map(|(_, o)| o)
}

/// A region made ready for tiles: the value it reads whole made again by copies of its makers,
/// which join the region (see [`prepare`]); the same for every chunk count.
pub(crate) struct Prepared {
    model: Model,
    facts: Facts,
    /// The region in the new graph: its nodes, the copies and the producers only it reads now.
    region: Region,
    /// The position of the copy's first reader among the region's nodes, and the input slot it
    /// reads the copy at.
    reader: usize,
    slot: usize,
    copied: usize,
}

/// Region `r` of `model` (evaluated as `base`) made ready for tiles; `None` when `r` keeps nodes
/// whole or reads no value whole of at least 1/16 of the peak that a few nodes make. `frozen`:
/// the nodes chunking made, by node of `base` (not chunked again).
pub(crate) fn prepare(
    base: &Base,
    model: &Model,
    frozen: &[bool],
    r: &Region,
    scaled: bool,
) -> Result<Option<Prepared>, ChunkError> {
    let dims = base.dims;
    if !r.keep.is_empty() {
        return Ok(None);
    }
    let Some(v) = whole_input(base, r, base.peak / 16) else {
        return Ok(None);
    };
    let Some(Copied {
        model,
        region: mut outer,
        reader,
        slot,
        new_id,
        copied,
    }) = copy_makers(base, model, r, v, base.peak / 64)
    else {
        return Ok(None);
    };
    let facts = rewritten_facts(&model, dims)?;
    // What only the region reads now (the makers the copies replaced shared with it) joins it.
    let g = &model.graph;
    let mut frozen1 = vec![false; g.nodes.len()];
    for (old, new) in &new_id {
        frozen1[new.index()] = frozen.get(old.index()).copied().unwrap_or(true);
    }
    region::absorb_producers(
        g,
        &facts,
        dims,
        &g.consumers(),
        &mut outer.nodes,
        &mut outer.axes,
        &frozen1,
        scaled,
    );
    let reader = outer.nodes.iter().position(|&n| n == reader).unwrap_or(0);
    Ok(Some(Prepared {
        model,
        facts,
        region: outer,
        reader,
        slot,
        copied,
    }))
}

/// The prepared region `p` chunked in tiles: `outer` chunks of `inner` chunks each (see the module
/// docs); `None` when its reader passes no axis of the copy. `original`: the graph before
/// chunking, whose initializers stay (see [`drop_unread_initializers`]); `base_seconds`: the cost
/// model's time of `base`'s nodes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn tile(
    base: &Base,
    p: &Prepared,
    original: &Graph,
    opts: &ChunkOptions,
    base_seconds: f64,
    outer: usize,
    inner: usize,
) -> Result<Option<Tiled>, ChunkError> {
    let dims = base.dims;
    let (k, slot) = (p.reader, p.slot);
    let region = Region {
        chunks: outer,
        ..p.region.clone()
    };
    let (mut m, unrolled) = apply_unrolled(&p.model, &p.facts, dims, &region)?;
    m.graph = drop_unread_initializers(m.graph, original);
    for chunk in &unrolled.chunks {
        let f = rewritten_facts(&m, dims)?;
        let g = &m.graph;
        let index: BTreeMap<&str, NodeId> =
            g.node_ids().map(|n| (g.node(n).name.as_str(), n)).collect();
        let Some(&seed) = chunk.clones.get(k).and_then(|s| index.get(s.as_str())) else {
            return Ok(None);
        };
        let Some(axis) = reader_axis(g, &f, dims, seed, slot) else {
            return Ok(None);
        };
        let mut frozen = vec![true; g.nodes.len()];
        for s in &chunk.clones {
            if let Some(&n) = index.get(s.as_str()) {
                frozen[n.index()] = false;
            }
        }
        let consumers = g.consumers();
        let light = crate::remat::light_values(g, &f, dims);
        let growth = region::grow(
            g,
            &f,
            dims,
            &consumers,
            &light,
            seed,
            axis,
            opts.max_region,
            &frozen,
            opts.scaled,
        );
        let all: BTreeSet<NodeId> = growth.iter().map(|(n, _)| *n).collect();
        let nodes = region::convex_part(g, &consumers, &all);
        if nodes.is_empty() {
            return Ok(None);
        }
        let axes = growth
            .iter()
            .filter(|(n, _)| nodes.contains(n))
            .flat_map(|(_, a)| a.iter().copied())
            .collect();
        let tile = Region {
            nodes,
            axes,
            chunks: inner,
            keep: BTreeSet::new(),
        };
        let (next, _) = apply_unrolled(&m, &f, dims, &tile)?;
        m = next;
        m.graph = drop_unread_initializers(m.graph, original);
    }
    let facts = rewritten_facts(&m, dims)?;
    let b = Base::new(&m.graph, &facts, dims, opts.assemble)?;
    let old: BTreeSet<&str> = base.g.nodes.iter().map(|n| n.name.as_str()).collect();
    let new_steps: Vec<usize> = (0..m.graph.nodes.len())
        .filter(|&i| !old.contains(m.graph.nodes[i].name.as_str()))
        .collect();
    let (local, span) = match (new_steps.first(), new_steps.last()) {
        (Some(&lo), Some(&hi)) => {
            let span = b.per_step[lo..=hi].iter().copied().max().unwrap_or(0);
            // As a region is judged (`Prediction::local`): also where each large output of the
            // new nodes is first read after them, whole.
            let new: BTreeSet<usize> = new_steps.iter().copied().collect();
            let outputs: Vec<ValueId> = new
                .iter()
                .flat_map(|&i| m.graph.nodes[i].output_ids())
                .collect();
            let inside = |n: usize| new.contains(&n);
            let readers = first_readers(&b, &b.bytes, &outputs, hi, inside, base.peak / 64);
            let at_readers = readers.iter().map(|&s| b.per_step[s]).max().unwrap_or(0);
            (span.max(at_readers), span)
        }
        _ => (b.peak, b.peak),
    };
    let seconds = graph_seconds(opts, &m.graph, &facts, dims) - base_seconds;
    let (peak, added) = (
        b.peak,
        m.graph.nodes.len().saturating_sub(base.g.nodes.len()),
    );
    drop(b);
    Ok(Some(Tiled {
        model: m,
        facts,
        peak,
        local,
        span,
        seconds,
        added,
        inner,
        copied: p.copied,
    }))
}

/// The cost model's time of `g`'s nodes at `dims`.
pub(crate) fn graph_seconds(
    opts: &ChunkOptions,
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> f64 {
    opts.cost
        .node_costs(g, facts, dims, None)
        .iter()
        .map(|c| c.seconds)
        .sum()
}
