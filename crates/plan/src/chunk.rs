//! Chunking: compute a region of the graph slice by slice along an axis that nothing in the region
//! mixes, so only one slice of its intermediates is alive at a time.
//!
//! The rewrite is plain ONNX, unrolled ([`rewrite`]): for each chunk, `Slice` nodes cut the region's
//! inputs (zero-copy views when the slice is contiguous), the region's nodes are cloned over the
//! slices, and a `Concat` per region output joins the chunks under the output's original name, so
//! consumers are untouched. Unrolled rather than a `Loop`: every runtime runs it without
//! control flow, each chunk's nodes are ordinary nodes that memplan plans (in place, arena offsets)
//! like any other, and a `Concat` along a leading axis is assembled in place by the planner, so
//! the chunks write straight into the output. The cost is a graph that grows with the chunk count
//! (a few dozen chunks of a few hundred nodes at most), and constants made for the given dims.
//!
//! Exactness: every op in a region splits along its axis per [`memplan_ir::ops::axes`], so each
//! output element is computed by the same op over the same input elements; with kernels that compute
//! each element the same way whatever slice they are given, outputs are bit-identical.
//!
//! Policy ([`chunk_to_budget`]): at the step of the simulated peak, seed regions at the running
//! node and at the producers of the largest live buffers, on their largest axes; grow each breadth
//! first along nodes that pass the axis through (never into nodes an earlier step made: chunking
//! a chunk again only nibbles at the peak one chunk at a time); take prefixes of the growth, each
//! cut down to its largest convex part, and predict each rewrite's peak ([`predict`]: exact, the
//! simulator's peak of the built graph, without building it) and its cost (nodes added, bytes
//! copied; [`CostModel`]): every prefix at a middle chunk count, then every count for the two best
//! prefixes. Keep the cheapest candidate that brings the live bytes around the region under the
//! budget, or else the one that brings them lowest; apply it and repeat at the new peak until the
//! budget is met or nothing helps. "Around the region" (over the steps of the nodes from its first
//! node to its last, the old peak's, and the first reader's of each region output, where that
//! output is whole) and not the global peak: when two regions tie at the peak, chunking either one
//! leaves the global peak where it is, but is still progress. Among candidates near the lowest,
//! those that take their own steps lowest come first (where a reader after the region holds the
//! local peak, it does so whatever the region), then the cheapest.

mod boxes;
mod broadcasts;
mod freeze;
mod gathers;
mod heads;
mod pads;
mod positions;
mod predict;
mod region;
mod rewrite;
pub mod roll;
mod scatters;
mod siblings;
mod sink;
mod tile;

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::graph::{Model, NodeId, ValueId};
use memplan_ir::infer::{infer_model_for, Facts};
use memplan_ir::infer_model_at;

use predict::{predict, Base, Prediction};
pub use rewrite::apply;

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

/// A region to chunk: its nodes, the axis each value it touches is split along (`None`: read
/// whole), and the number of chunks. The nodes of `keep` (a subset of `nodes`, closed over their
/// producers in the region) also stay in the graph as they are, computed whole for their readers
/// outside the region, while the region recomputes its slices of them.
#[derive(Clone, Debug, PartialEq)]
pub struct Region {
    pub nodes: BTreeSet<NodeId>,
    pub axes: BTreeMap<ValueId, Option<usize>>,
    pub chunks: usize,
    pub keep: BTreeSet<NodeId>,
}

pub use crate::cost::CostModel;

/// One applied chunking step, for the report.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ChunkStep {
    /// Number of nodes in the region, and the first and last of them (names, node order).
    pub nodes: usize,
    pub first: String,
    pub last: String,
    /// The region's outputs (names).
    pub outputs: Vec<String>,
    pub chunks: usize,
    /// The extent of the split axis.
    pub extent: i64,
    /// Simulated peak before and after the step (graph order).
    pub peak_before: u64,
    pub peak_after: u64,
    /// Bytes copied by slices that are not views and by concatenations not assembled in place.
    pub copied_bytes: u64,
    pub added_nodes: usize,
    /// Predicted extra run time, per the cost model.
    pub predicted_seconds: f64,
    /// Region nodes also kept whole for their readers outside the region (recomputed per chunk).
    pub recomputed_nodes: usize,
    /// Folded into one `Scan` ([`roll`]) instead of unrolled.
    pub scan: bool,
    /// The lanes the `Scan`'s body runs in ([`crate::plan::BodyPlan::lanes`]); 0 when unrolled.
    #[serde(skip_serializing_if = "crate::plan::is_zero")]
    pub lanes: u32,
    /// Chunks within each chunk when the region was chunked in tiles ([`tile`]); 0 otherwise.
    #[serde(skip_serializing_if = "crate::plan::is_zero")]
    pub tiles: usize,
    /// The other chunks of an earlier step that the region, grown in one of them, was applied to
    /// alike ([`siblings`]); 0 otherwise.
    #[serde(skip_serializing_if = "crate::plan::is_zero")]
    pub siblings: usize,
    /// The nodes the step added, by name (what folding needs).
    #[serde(skip)]
    pub unrolled: Option<roll::Unrolled>,
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
    /// Count a `Concat` along a leading axis as assembled in place (what planned runs do).
    pub assemble: bool,
    pub cost: CostModel,
    /// How shared light values are made again per reader before chunking (see
    /// [`Copies`](crate::remat::Copies)).
    pub copies: crate::remat::Copies,
    /// Also try each growth's prefixes in topological order, besides those in the order its nodes
    /// joined (see `prefix_shapes`): more candidates, and a different greedy path, so a fallback.
    pub topological: bool,
    /// Also grow regions through reshapes that change the split axis's extent by a whole factor
    /// (`region::grow_flows`): more regions, and a different greedy path, so a fallback.
    pub scaled: bool,
    /// Join to each chosen region the producers that only it reads (`with_producers`): other
    /// regions after it, and a different greedy path, so a fallback.
    pub absorb: bool,
    /// Also try the best regions in tiles ([`tile`]): a large value every chunk reads whole made
    /// again per chunk and chunked with it. Its makers run once per chunk, so a fallback.
    pub tiles: bool,
    /// Also grow regions in the chunks earlier steps made, and apply one chosen there to every
    /// chunk of its step alike ([`siblings`]: chunking twice). More regions, and a different
    /// greedy path, so a fallback.
    pub nested: bool,
}

impl Default for ChunkOptions {
    fn default() -> Self {
        ChunkOptions {
            budget: None,
            chunk_counts: vec![2, 4, 8, 16, 32, 64, 128, 256, 512],
            max_region: 400,
            max_steps: 16,
            assemble: true,
            cost: CostModel::default(),
            copies: crate::remat::Copies::Heavy,
            topological: false,
            scaled: false,
            absorb: false,
            tiles: false,
            nested: false,
        }
    }
}

/// What [`chunk_to_budget`] did.
#[derive(Clone, Debug)]
pub struct Chunked {
    /// The rewritten model, nodes in topological order; pinned at the dims
    /// ([`Model::pin_dims`]) when anything was rewritten, since its constants were made there.
    pub model: Model,
    /// Light values made again for each of their readers before chunking (see
    /// [`recompute_per_reader`](crate::remat::recompute_per_reader)).
    pub per_reader: Vec<crate::remat::PerReader>,
    pub steps: Vec<ChunkStep>,
    /// Simulated peak before and after (graph order).
    pub peak_before: u64,
    pub peak_after: u64,
    /// Buffers live at the final peak (owning value, or scratch), largest first.
    pub live: Vec<(String, u64)>,
    /// Candidates predicted.
    pub evaluated: usize,
}

/// The peak of `model` at `dims`, simulated in its topological order (with concatenations
/// assembled in place when `assemble`).
pub fn simulate(
    model: &Model,
    dims: &BTreeMap<String, i64>,
    assemble: bool,
) -> Result<u64, ChunkError> {
    let (m, facts) = sorted(model, dims)?;
    Ok(Base::new(&m.graph, &facts, dims, assemble)?.peak)
}

/// The model with its node list in topological order, and its facts at `dims`.
fn sorted(model: &Model, dims: &BTreeMap<String, i64>) -> Result<(Model, Facts), ChunkError> {
    let infer = |m: &Model| infer_model_for(m, dims).map_err(|e| ChunkError::Infer(e.to_string()));
    let facts = infer(model)?;
    if facts.order.iter().enumerate().all(|(i, n)| n.index() == i) {
        return Ok((model.clone(), facts));
    }
    let m = Model {
        graph: crate::reorder(&model.graph, &facts.order),
        ..model.clone()
    };
    let facts = infer(&m)?;
    Ok((m, facts))
}

/// The facts of a model rewritten at `dims`. Its rewrites hold constants made there (chunk bounds,
/// frozen shape values), so it holds only at that point, and its facts are inferred at it
/// ([`infer_model_at`]), where every size is a constant: inferred symbolically, a value
/// assembled from 512 chunks is a sum of 512 clamped widths (`max(min(N, 3) - min(N, 2), 0) +
/// ...`), carried by every value after it and evaluated again at each step of the search.
pub(crate) fn rewritten_facts(
    m: &Model,
    dims: &BTreeMap<String, i64>,
) -> Result<Facts, ChunkError> {
    infer_model_at(m, dims).map_err(|e| ChunkError::Infer(e.to_string()))
}

/// A rewrite before chunking: `model` with its values of at least `min_bytes` that it knows
/// written in the form regions split, or `None` where there is none.
type Rewrite = fn(&Model, &Facts, &BTreeMap<String, i64>, u64) -> Option<Model>;

/// What applying a rewrite before chunking does besides giving regions another form.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Effect {
    /// Only the form: the peak is the same until a region is chunked.
    Form,
    /// It lowers the peak on its own: a change even when no region is chunked.
    Lowers,
    /// Only where chunking trades it: tried with and without, the lower plan kept.
    Traded,
}

/// One rewrite before chunking, and the one applied after it where it applied.
struct Before {
    rewrite: Rewrite,
    effect: Effect,
    then: Option<Rewrite>,
}

/// The rewrites before chunking, in the order they are applied, each to the values of at least
/// 1/64 of the peak.
const BEFORE_CHUNKING: [Before; 11] = [
    // A large constant of one repeated element (a `full_like` the exporter folded) as `Expand`
    // of that element: not resident, and regions split it.
    Before {
        rewrite: broadcasts::splats_as_expands,
        effect: Effect::Lowers,
        then: None,
    },
    // A large `Tile` of axes of one element as the `Expand` it is, so regions split it.
    Before {
        rewrite: broadcasts::tiles_as_expands,
        effect: Effect::Form,
        then: None,
    },
    // A large reshape of a product's columns into heads as the product over heads it is, so
    // regions split heads from the product on; the transposes it meets composed.
    Before {
        rewrite: heads::heads_as_axes,
        effect: Effect::Form,
        then: Some(heads::transposes_composed),
    },
    // A large value made to keep a small selection of it (a mask built `[B, 1, S, S]` to read
    // one row) made already selected, where its makers split the axes selected.
    Before {
        rewrite: sink::selections_sunk,
        effect: Effect::Lowers,
        then: None,
    },
    // A large mask made by an op of positions (`Trilu`) as elementwise comparisons of index
    // constants, so regions grow through it and it is light.
    Before {
        rewrite: positions::positions_as_values,
        effect: Effect::Form,
        then: None,
    },
    // The same for a large mask kept as a weight (a causal mask `tril` of ones): made from index
    // constants, it is no longer resident, and light.
    Before {
        rewrite: positions::constants_as_positions,
        effect: Effect::Lowers,
        then: None,
    },
    // A large value read back, through moves, from the region a scatter wrote (an in-place op on
    // a view, as dynamo writes it) is the update itself.
    Before {
        rewrite: scatters::forward_scattered_reads,
        effect: Effect::Form,
        then: None,
    },
    // A large chain of movements that is a gather along one axis (a relative shift), as
    // `GatherElements`, so regions grow through it along every other axis.
    Before {
        rewrite: gathers::movements_as_gathers,
        effect: Effect::Form,
        then: None,
    },
    // A large pad of one axis, and each slice of it along that axis, as a gather of the
    // positions it reads (and the constant where it reads none), so regions split the axis it
    // pads and its output is never made whole.
    Before {
        rewrite: pads::pads_as_gathers,
        effect: Effect::Traded,
        then: None,
    },
    // A large slice that copies and cuts one axis, as a gather of the positions it keeps, so
    // regions split the axis it cuts (a band of blocks at offsets along it).
    Before {
        rewrite: gathers::slices_as_gathers,
        effect: Effect::Traded,
        then: None,
    },
    // A scatter of a box (a slice assignment, its index grid as large as the box, or larger) as
    // slices of its data around the box joined with its update, so regions split the axes the
    // box spans whole, and no index grid is made.
    Before {
        rewrite: boxes::scatters_as_boxes,
        effect: Effect::Traded,
        then: None,
    },
];

/// A candidate rewrite and what it is predicted to give.
struct Candidate {
    region: Region,
    pred: Prediction,
    extent: i64,
    seconds: f64,
    /// The rewrite already built, when it is not one region's ([`tile`]).
    built: Option<Box<tile::Tiled>>,
}

/// Prefix lengths of a growth of `n` nodes to try: all of it, then shrinking by a quarter.
fn prefix_lengths(n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut l = n;
    while l > 0 {
        if out.last() != Some(&l) {
            out.push(l);
        }
        l = l * 3 / 4;
    }
    out
}

/// The seeds at the peak: the node running there, then the producers of the largest buffers live
/// there.
fn seeds(base: &Base) -> Vec<NodeId> {
    let mut out = Vec::new();
    if let Some(s) = base.peak_step {
        out.push(NodeId::from_index(s));
    }
    for (name, _) in base.live.iter().take(3) {
        if let Some(p) = base.g.find_value(name).and_then(|v| base.g.producer(v)) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// A region's nodes, split axes and kept nodes, before a chunk count is chosen.
type Shape = (
    BTreeSet<NodeId>,
    BTreeMap<ValueId, Option<usize>>,
    BTreeSet<NodeId>,
);

/// A region's shape as a set key (its axes as a list).
type ShapeKey = (
    BTreeSet<NodeId>,
    Vec<(ValueId, Option<usize>)>,
    BTreeSet<NodeId>,
);

/// Predicts chunking `nodes` into `chunks` chunks.
fn evaluate(
    base: &Base,
    opts: &ChunkOptions,
    (nodes, axes, keep): &Shape,
    extent: i64,
    chunks: usize,
    evaluated: &mut usize,
) -> Option<Candidate> {
    if rewrite::bounds(extent, chunks).len() < 2 {
        return None;
    }
    let region = Region {
        nodes: nodes.clone(),
        axes: axes.clone(),
        chunks,
        keep: keep.clone(),
    };
    let em = rewrite::emit(base.g, base.facts, base.dims, &base.consumers, &region).ok()?;
    *evaluated += 1;
    let pred = predict(base, &region, &em, opts.assemble, &opts.cost).ok()?;
    let seconds = pred.seconds + opts.cost.fault_seconds(pred.peak as f64 - base.peak as f64);
    Some(Candidate {
        region,
        pred,
        extent: em.extent,
        seconds,
        built: None,
    })
}

/// `chosen` with the producers of its split inputs that only it reads joined to it, where they pass
/// its axis ([`region::absorb_producers`]), when that is predicted no higher (within a 1/1024): a
/// value read only by the region then need not be made whole before it (ModernBERT's TorchScript
/// file: the query's rotary embedding, made whole before the attention region that alone reads
/// it). Done for the chosen region only: as candidates, such regions sent the greedy steps
/// elsewhere. With [`ChunkOptions::absorb`] only: by default it ends higher on the pairformer
/// (`lowest` at N=256: 36.8 -> 40.9 MiB).
fn with_producers(
    base: &Base,
    opts: &ChunkOptions,
    frozen: &[bool],
    chosen: Candidate,
    evaluated: &mut usize,
) -> Candidate {
    // A region that keeps nodes whole (`region::recompute_part`) computes their originals before
    // it from values it would now make only in chunks.
    if !opts.absorb || chosen.built.is_some() || !chosen.region.keep.is_empty() {
        return chosen;
    }
    let (mut nodes, mut axes) = (chosen.region.nodes.clone(), chosen.region.axes.clone());
    let g = base.g;
    region::absorb_producers(
        g,
        base.facts,
        base.dims,
        &base.consumers,
        &mut nodes,
        &mut axes,
        frozen,
        opts.scaled,
    );
    if nodes.len() == chosen.region.nodes.len()
        || !region::is_convex(g, &base.consumers, &nodes, &BTreeSet::new())
    {
        return chosen;
    }
    let shape = (nodes, axes, chosen.region.keep.clone());
    let (extent, chunks) = (chosen.extent, chosen.region.chunks);
    // The joined producers free their outputs before the region runs, which the simulated peak
    // of this step (in graph order, elsewhere) need not show, while each chunk's clones add a few
    // shape constants: within a 1/1024 of the peak is no higher.
    let slack = chosen.pred.peak / 1024;
    match evaluate(base, opts, &shape, extent, chunks, evaluated) {
        Some(c) if c.pred.peak <= chosen.pred.peak + slack => c,
        _ => chosen,
    }
}

/// The best rewrite at the current peak, if any lowers the live bytes there.
fn search(
    base: &Base,
    opts: &ChunkOptions,
    frozen: &[bool],
    evaluated: &mut usize,
) -> Option<Candidate> {
    choose(base, opts, candidates(base, opts, frozen, evaluated))
}

/// The rewrites predicted at the current peak: per seed and axis, every convex prefix of the
/// growth at a middle chunk count, then every count for the two best prefixes. A region already
/// offered by an earlier seed or axis is not predicted again.
///
/// The growths, and then the predictions, run on the thread pool; the candidates, their order and
/// the count in `evaluated` are those of working through the seeds and axes one by one.
fn candidates(
    base: &Base,
    opts: &ChunkOptions,
    frozen: &[bool],
    evaluated: &mut usize,
) -> Vec<Candidate> {
    use rayon::prelude::*;
    let Some(&mid) = opts.chunk_counts.get(opts.chunk_counts.len() / 2) else {
        return Vec::new();
    };
    let light = crate::remat::light_values(base.g, base.facts, base.dims);
    let groups: Vec<(NodeId, i64, usize)> = seeds(base)
        .into_iter()
        .flat_map(|seed| {
            seed_axes(base, seed)
                .into_iter()
                .map(move |(e, a)| (seed, e, a))
        })
        .collect();
    // Per seed and axis, the regions its growth offers.
    let offered: Vec<Vec<Shape>> = groups
        .par_iter()
        .map(|&(seed, _, axis)| {
            let growth = region::grow(
                base.g,
                base.facts,
                base.dims,
                &base.consumers,
                &light,
                seed,
                axis,
                opts.max_region,
                frozen,
                opts.scaled,
            );
            prefix_shapes(base, &growth, opts.topological)
        })
        .collect();
    // Each region once, for the first seed and axis that offers it.
    let mut tried: BTreeSet<ShapeKey> = BTreeSet::new();
    let prefixes: Vec<Vec<Shape>> = offered
        .into_iter()
        .map(|shapes| {
            shapes
                .into_iter()
                .filter(|(nodes, axes, keep)| {
                    tried.insert((
                        nodes.clone(),
                        axes.iter().map(|(v, a)| (*v, *a)).collect(),
                        keep.clone(),
                    ))
                })
                .collect()
        })
        .collect();
    // Phase one: every region at the middle count.
    let jobs: Vec<(usize, usize)> = prefixes
        .iter()
        .enumerate()
        .flat_map(|(g, shapes)| (0..shapes.len()).map(move |i| (g, i)))
        .collect();
    let first: Vec<(Option<Candidate>, usize)> = jobs
        .par_iter()
        .map(|&(g, i)| {
            let mut n = 0;
            let c = evaluate(base, opts, &prefixes[g][i], groups[g].1, mid, &mut n);
            (c, n)
        })
        .collect();
    // Phase two: every count for the two best regions of each seed and axis.
    let mut per_group: Vec<(Vec<Candidate>, Vec<(u64, usize)>)> =
        (0..groups.len()).map(|_| Default::default()).collect();
    for (&(g, i), (c, n)) in jobs.iter().zip(first) {
        *evaluated += n;
        if let Some(c) = c {
            let (cands, scored) = &mut per_group[g];
            scored.push((c.pred.local, i));
            cands.push(c);
        }
    }
    let second: Vec<Vec<(Vec<Candidate>, usize)>> = per_group
        .par_iter_mut()
        .enumerate()
        .map(|(g, (_, scored))| {
            scored.sort();
            scored
                .iter()
                .take(2)
                .map(|&(_, i)| counts(base, opts, &prefixes[g][i], groups[g].1, mid))
                .collect()
        })
        .collect();
    let mut cands = Vec::new();
    for ((first, _), second) in per_group.into_iter().zip(second) {
        cands.extend(first);
        for (got, n) in second {
            *evaluated += n;
            cands.extend(got);
        }
    }
    cands
}

/// The axes of `seed`'s output a region may grow along, with their extents, in the order tried.
fn seed_axes(base: &Base, seed: NodeId) -> Vec<(i64, usize)> {
    let g = base.g;
    let Some(out0) = g.node(seed).outputs.first().copied().flatten() else {
        return Vec::new();
    };
    let Some(shape) = base.facts.get(out0).shape.as_ref() else {
        return Vec::new();
    };
    // The axes the seed passes: one it mixes (a 3x3 convolution's rows) grows no region, and
    // would take the place of one that does (its batch, smaller than its rows and channels).
    let seed_flow = region::flows(g, base.facts, base.dims, seed);
    let out_flow = seed_flow.as_ref().and_then(|f| f.first());
    let mixed = |i: usize| {
        matches!(
            out_flow.and_then(|o| o.get(i)),
            Some(memplan_ir::ops::axes::AxisFlow::Mixed)
        )
    };
    let mut seed_axes: Vec<(i64, usize)> = shape
        .iter()
        .enumerate()
        .filter(|&(i, _)| !mixed(i))
        .filter_map(|(i, d)| {
            d.eval_map(base.dims)
                .ok()
                .filter(|&e| e > 1)
                .map(|e| (e, i))
        })
        .collect();
    // Largest extent first; among equal extents the outer axis, whose slices are contiguous.
    // Every axis the seed passes is tried: the smallest may be the only one the nodes after
    // it pass (a batch through a depthwise convolution, which mixes its channels and rows).
    seed_axes.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    seed_axes
}

/// The regions a growth offers: its prefixes in the order the nodes joined, and
/// with `topological`, in topological order too (a region grown through one layer's attention and
/// on into the next layer's is not convex, since the next layer's keys and values are made outside
/// it from the first layer's output, and the first layer alone is a topological prefix, not a
/// joining one); per prefix, its largest convex part, and the whole prefix with the nodes that
/// make it non-convex kept whole and recomputed per chunk.
fn prefix_shapes(base: &Base, growth: &[region::Joined], topological: bool) -> Vec<Shape> {
    let g = base.g;
    let joined: Vec<NodeId> = growth.iter().map(|(n, _)| *n).collect();
    let mut orders = vec![joined.clone()];
    if topological {
        let mut sorted = joined;
        sorted.sort();
        orders.push(sorted);
    }
    let mut prefixes: Vec<Shape> = Vec::new();
    for order in &orders {
        for len in prefix_lengths(order.len()) {
            let all: BTreeSet<NodeId> = order[..len].iter().copied().collect();
            let mut shapes = vec![(
                region::convex_part(g, &base.consumers, &all),
                BTreeSet::new(),
            )];
            let max_keep = (all.len() / 4).max(2);
            if let Some(r) = region::recompute_part(g, &base.consumers, &all, max_keep) {
                shapes.push(r);
            }
            for (nodes, keep) in shapes {
                if nodes.is_empty() {
                    continue;
                }
                let axes: BTreeMap<ValueId, Option<usize>> = growth
                    .iter()
                    .filter(|(n, _)| nodes.contains(n))
                    .flat_map(|(_, a)| a.iter().copied())
                    .collect();
                prefixes.push((nodes, axes, keep));
            }
        }
    }
    prefixes
}

/// Phase two of [`candidates`] for one region: each chunk count in turn (but `mid`, predicted
/// already, and counts that cut the extent alike), until one fits the budget; with the number
/// predicted.
fn counts(
    base: &Base,
    opts: &ChunkOptions,
    shape: &Shape,
    extent: i64,
    mid: usize,
) -> (Vec<Candidate>, usize) {
    let (mut got, mut evaluated) = (Vec::new(), 0);
    let mut seen_bounds = BTreeSet::from([rewrite::bounds(extent, mid)]);
    for &chunks in &opts.chunk_counts {
        if !seen_bounds.insert(rewrite::bounds(extent, chunks)) {
            continue;
        }
        if let Some(c) = evaluate(base, opts, shape, extent, chunks, &mut evaluated) {
            // More chunks only cost more once the region fits.
            let fits = opts.budget.is_some_and(|b| c.pred.local <= b);
            got.push(c);
            if fits {
                break;
            }
        }
    }
    (got, evaluated)
}

/// Outer and inner chunk counts tried for tiles, the first a probe: few outer chunks, since the
/// value made again per chunk costs its makers once per outer chunk.
const TILE_COUNTS: [(usize, usize); 4] = [(4, 8), (2, 8), (4, 16), (8, 16)];

/// The largest regions among `cands` that read whole a value made from values live at the peak
/// (at most two tried), chunked in tiles ([`tile`]), as candidates.
#[allow(clippy::too_many_arguments)]
fn tiled(
    base: &Base,
    model: &Model,
    original: &memplan_ir::graph::Graph,
    opts: &ChunkOptions,
    frozen: &[bool],
    cands: &[Candidate],
    evaluated: &mut usize,
) -> Result<Vec<Candidate>, ChunkError> {
    let whole_at_peak = |c: &Candidate| tile::whole_at_peak(base, &c.region);
    // The largest regions first: the growths that take in the most of a module, whose one-axis
    // rewrite is held up by the value they read whole.
    let mut order: Vec<&Candidate> = cands.iter().filter(|c| whole_at_peak(c)).collect();
    order.sort_by_key(|c| (std::cmp::Reverse(c.region.nodes.len()), c.pred.local));
    let mut seen: BTreeSet<&BTreeSet<NodeId>> = BTreeSet::new();
    let mut out = Vec::new();
    let mut tried = 0;
    let mut base_seconds = None;
    let best_1d = cands
        .iter()
        .map(|c| c.pred.local)
        .min()
        .unwrap_or(base.peak);
    for c in order {
        if tried >= 2 || !seen.insert(&c.region.nodes) {
            continue;
        }
        tried += 1;
        let Some(prep) = tile::prepare(base, model, frozen, &c.region, opts.scaled)? else {
            continue;
        };
        let base_seconds = *base_seconds
            .get_or_insert_with(|| tile::graph_seconds(opts, base.g, base.facts, base.dims));
        let mut any = false;
        for (outer, inner) in TILE_COUNTS {
            let tiled = tile::tile(base, &prep, original, opts, base_seconds, outer, inner)?;
            let Some(t) = tiled else {
                break;
            };
            *evaluated += 1;
            // The first count probes: tiles that do not beat every one-axis rewrite by 1% of the
            // peak there are not tried at other counts.
            if !any && t.local + base.peak / 100 >= best_1d {
                break;
            }
            any = true;
            let pred = Prediction {
                peak: t.peak,
                local: t.local,
                span: t.span,
                copied: 0,
                added: t.added,
                seconds: t.seconds,
                per_step: Vec::new(),
            };
            let seconds = t.seconds + opts.cost.fault_seconds(t.peak as f64 - base.peak as f64);
            out.push(Candidate {
                region: Region {
                    chunks: outer,
                    ..c.region.clone()
                },
                pred,
                extent: c.extent,
                seconds,
                built: Some(Box::new(t)),
            });
        }
    }
    Ok(out)
}

/// The candidate to apply (see the module docs), if any makes progress: the global peak does not
/// grow (beyond the slice bounds' bytes) and the live bytes around the region drop by at least 1%.
fn choose(base: &Base, opts: &ChunkOptions, mut cands: Vec<Candidate>) -> Option<Candidate> {
    let p = base.peak;
    let tol = p / 1000;
    cands.retain(|c| c.pred.peak <= p + tol && c.pred.local + p / 100 < p);
    let cheapest = |v: Vec<Candidate>| {
        v.into_iter().min_by(|a, b| {
            a.seconds
                .total_cmp(&b.seconds)
                .then(a.pred.local.cmp(&b.pred.local))
        })
    };
    if let Some(b) = opts.budget {
        let (fit, rest): (Vec<Candidate>, Vec<Candidate>) =
            cands.into_iter().partition(|c| c.pred.local <= b);
        if !fit.is_empty() {
            return cheapest(fit);
        }
        cands = rest;
    }
    // As low as possible: the lowest local peak, and within 2% of it, the cheapest (2% of the
    // lowest, not of the current peak: before a large step that would be a wide margin). Where
    // the local peaks are a reader's after the region (its output whole there, whatever the
    // region), those that take their own span lowest, within 2%: the reader is chunked later.
    let low = cands.iter().map(|c| c.pred.local).min()?;
    let near: Vec<Candidate> = cands
        .into_iter()
        .filter(|c| c.pred.local <= low + low / 50)
        .collect();
    let low_span = near.iter().map(|c| c.pred.span).min()?;
    let near = near
        .into_iter()
        .filter(|c| c.pred.span <= low_span + low_span / 50)
        .collect();
    cheapest(near)
}

/// Per node of `model`: whether chunking made it (its name is in `made`) and it is not in a chunk
/// regions may grow in (`open`, see [`siblings`]), so it is not chunked again.
fn frozen(model: &Model, made: &BTreeSet<String>, open: &BTreeSet<String>) -> Vec<bool> {
    model
        .graph
        .nodes
        .iter()
        .map(|n| made.contains(&n.name) && !open.contains(&n.name))
        .collect()
}

/// When no region lowers the peak: a value live at the peak step and read only after it, made
/// again for its later readers at no cost in memory ([`remake_across`](crate::remat::remake_across)),
/// kept when that lowers the peak or lets a region lower it below `peak` (a layer norm of the
/// residual stream that a gate reads after the peak, remade there and chunked with the gate). The
/// model, its facts and the report line (as a value made again for one more reader). `peak`: the
/// step, the buffers live there and its bytes; `made`: the nodes chunking made (not chunked again).
fn remake(
    cur: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    opts: &ChunkOptions,
    (step, live, peak): (Option<usize>, &[(String, u64)], u64),
    (made, open): (&BTreeSet<String>, &BTreeSet<String>),
) -> Result<Option<(Model, Facts, crate::remat::PerReader)>, ChunkError> {
    let Some(step) = step else {
        return Ok(None);
    };
    let tries = crate::remat::remake_across(cur, facts, dims, step, live, 4)
        .map_err(|e| ChunkError::Infer(e.to_string()))?;
    for (m, r) in tries {
        let f = rewritten_facts(&m, dims)?;
        let base = Base::new(&m.graph, &f, dims, opts.assemble)?;
        let frozen = frozen(&m, made, open);
        let lower = base.peak < peak
            || search(&base, opts, &frozen, &mut 0).is_some_and(|c| c.pred.peak < peak);
        drop(base);
        if lower {
            let line = crate::remat::PerReader {
                value: r.value,
                bytes: r.bytes,
                copies: 1,
                nodes: r.nodes,
            };
            return Ok(Some((m, f, line)));
        }
    }
    Ok(None)
}

/// Adds one value made again to the report's lines: a value made again before (with as many nodes)
/// counts one more reader's copy on its line rather than a line of its own.
fn add_reader(lines: &mut Vec<crate::remat::PerReader>, r: crate::remat::PerReader) {
    match lines
        .iter_mut()
        .find(|l| l.value == r.value && l.nodes == r.nodes)
    {
        Some(l) => l.copies += r.copies,
        None => lines.push(r),
    }
}

/// Whether chunking writes `node` as comparisons of positions (`positions`), a form every axis of
/// which it can split.
pub(crate) fn splits_as_positions(
    node: &memplan_ir::graph::Node,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> bool {
    positions::positional(node, facts, dims).is_some()
}

/// The nodes that chunking writes as one `GatherElements` (a chain of movements that is a gather
/// along one axis, see `gathers`), which every other axis splits.
pub(crate) fn nodes_as_gathers(
    g: &memplan_ir::graph::Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> BTreeSet<NodeId> {
    gathers::gather_chain_nodes(g, facts, dims)
}

/// Nodes that the rewrites before chunking make only in part or write anew: the makers a
/// selection is moved through (`sink`), the scatters of a box (`boxes`), the tiles that
/// broadcast (`broadcasts`) and the pads of one axis (`pads`). The floor takes them as split as
/// finely as it likes.
pub(crate) fn nodes_rewritten_split(
    g: &memplan_ir::graph::Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> BTreeSet<NodeId> {
    let mut out = sink::moved_through(g, facts, dims);
    out.extend(g.node_ids().filter(|&n| {
        let node = g.node(n);
        boxes::scatters_a_box(g, facts, dims, node)
            || broadcasts::tile_as_expand(node, facts, dims).is_some()
            || pads::pad_along(node, facts, dims).is_some()
    }));
    out
}

/// The axis flow regions grow along at `dims` (a reshape's scaled axes split too, see
/// `region::grow_flows`): what the floor takes as split.
pub(crate) fn growth_flows(
    g: &memplan_ir::graph::Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    n: NodeId,
) -> Option<Vec<Vec<memplan_ir::ops::axes::AxisFlow>>> {
    region::grow_flows(g, facts, dims, n, true)
}

/// Whether chunking makes constant `v` (a weight, or a `Constant` node's output) from small
/// constants rather than holding it: a constant of positions, from index constants
/// (`positions::constants_as_positions`), or one of a single repeated element, as its `Expand`
/// (`broadcasts::splats_as_expands`).
pub(crate) fn is_constant_made_anew(g: &memplan_ir::graph::Graph, v: ValueId) -> bool {
    positions::constant_tensor(g, v).is_some_and(|(t, _)| {
        positions::band_of(t).is_some() || broadcasts::splat_element(t).is_some()
    })
}

/// Chunks `model` at `dims` until its simulated peak fits `opts.budget` or no region lowers it
/// further. Where a rewrite could trade a copy for an axis regions split (large slices that copy
/// written as gathers of their positions, [`gathers::slices_as_gathers`]; scatters of a box as
/// slices and concatenations, [`boxes::scatters_as_boxes`]), it chunks both ways and keeps the
/// better ([`better`]): the greedy steps after those rewrites do not always end lower.
pub fn chunk_to_budget(
    model: &Model,
    dims: &BTreeMap<String, i64>,
    opts: &ChunkOptions,
) -> Result<Chunked, ChunkError> {
    let (with, traded) = chunk_to_budget_with(model, dims, opts, true)?;
    if !traded {
        return Ok(with);
    }
    let (without, _) = chunk_to_budget_with(model, dims, opts, false)?;
    Ok(better(opts.budget, with, without))
}

/// Of two chunkings of one model, the one that meets `budget` (the faster by its steps' predicted
/// time when both do), else the one whose peak is lower (the faster when they tie); `a` on a tie.
fn better(budget: Option<u64>, a: Chunked, b: Chunked) -> Chunked {
    let key = |c: &Chunked| {
        let fits = budget.is_some_and(|b| c.peak_after <= b);
        let seconds: f64 = c.steps.iter().map(|s| s.predicted_seconds).sum();
        (!fits, if fits { 0 } else { c.peak_after }, seconds)
    };
    let (ka, kb) = (key(&a), key(&b));
    if (kb.0, kb.1) < (ka.0, ka.1) || ((kb.0, kb.1) == (ka.0, ka.1) && kb.2 < ka.2) {
        b
    } else {
        a
    }
}

/// [`chunk_to_budget`], with the rewrites that trade a copy for a split axis (see
/// [`chunk_to_budget`]) applied first when `trade`; and whether any applied (then the chunking
/// without them may end lower: `plan::fit` plans both and keeps the lower planned peak).
pub fn chunk_to_budget_with(
    model: &Model,
    dims: &BTreeMap<String, i64>,
    opts: &ChunkOptions,
    trade: bool,
) -> Result<(Chunked, bool), ChunkError> {
    let mut traded = false;
    let (mut cur, mut facts) = sorted(model, dims)?;
    let unfrozen = cur.clone();
    if let Some(m) = freeze::freeze_shape_values(&cur, &facts, dims) {
        facts = rewritten_facts(&m, dims)?;
        cur = m;
    }
    let mut per_reader = Vec::new();
    let peak = Base::new(&cur.graph, &facts, dims, opts.assemble)?.peak;
    // Whether a rewrite before chunking lowered the peak on its own (weights made from
    // positions, values made already selected): a change even when no region is chunked.
    let mut lowered = false;
    // What the rewrites before chunking and the values made again per reader take: at least
    // 1/64 of the peak.
    let min_bytes = peak / 64;
    if opts.budget.is_none_or(|b| peak > b) {
        for before in BEFORE_CHUNKING {
            if before.effect == Effect::Traded && !trade {
                continue;
            }
            let Some(m) = (before.rewrite)(&cur, &facts, dims, min_bytes) else {
                continue;
            };
            facts = rewritten_facts(&m, dims)?;
            cur = m;
            lowered |= before.effect == Effect::Lowers;
            traded |= before.effect == Effect::Traded;
            if let Some(m) = before.then.and_then(|t| t(&cur, &facts, dims, min_bytes)) {
                facts = rewritten_facts(&m, dims)?;
                cur = m;
            }
        }
    }
    if opts.budget.is_some_and(|b| peak > b) {
        // Light values several regions read (a position bias every layer reads) are made again
        // for each reader, so each reader's region computes its slices of them and none is held
        // whole.
        if let Some((m, r)) =
            crate::remat::recompute_per_reader(&cur, &facts, dims, min_bytes, opts.copies)
        {
            facts = rewritten_facts(&m, dims)?;
            cur = m;
            per_reader = r;
        }
    }
    let mut steps: Vec<ChunkStep> = Vec::new();
    let mut peak_before = lowered.then_some(peak);
    let mut evaluated = 0;
    let mut remakes = 0;
    // Names of the nodes chunking made, and the chunks regions may grow in again.
    let mut made: BTreeSet<String> = BTreeSet::new();
    let mut sets = siblings::Sets::default();
    let mut open: BTreeSet<String> = BTreeSet::new();
    loop {
        let base = Base::new(&cur.graph, &facts, dims, opts.assemble)?;
        peak_before.get_or_insert(base.peak);
        if let Some(s) = steps.last_mut() {
            s.peak_after = base.peak;
        }
        let done = opts.budget.is_some_and(|b| base.peak <= b) || steps.len() >= opts.max_steps;
        let best = if done {
            None
        } else {
            let frozen = frozen(&cur, &made, &open);
            let mut cands = candidates(&base, opts, &frozen, &mut evaluated);
            if opts.tiles {
                let t = tiled(
                    &base,
                    &cur,
                    &unfrozen.graph,
                    opts,
                    &frozen,
                    &cands,
                    &mut evaluated,
                )?;
                cands.extend(t);
            }
            choose(&base, opts, cands)
                .map(|c| with_producers(&base, opts, &frozen, c, &mut evaluated))
        };
        let Some(best) = best else {
            let (peak_after, live, step) = (base.peak, base.live.clone(), base.peak_step);
            drop(base);
            if !done && remakes < opts.max_steps {
                let peak = (step, live.as_slice(), peak_after);
                if let Some(next) = remake(&cur, &facts, dims, opts, peak, (&made, &open))? {
                    (cur, facts) = (next.0, next.1);
                    add_reader(&mut per_reader, next.2);
                    remakes += 1;
                    continue;
                }
            }
            let changed = !steps.is_empty() || remakes > 0 || lowered;
            if changed {
                // What it holds was made at `dims`: it is pinned there. Shape values frozen for
                // readers that are gone (the slices of a weight made from positions, with no
                // chunk step after) are dropped, as after each step.
                cur.graph = rewrite::drop_unread_initializers(cur.graph, &unfrozen.graph);
                cur.pin_dims(dims);
            }
            let chunked = Chunked {
                // Shape values stay symbolic when nothing was chunked.
                model: if changed { cur } else { unfrozen },
                per_reader: if changed { per_reader } else { Vec::new() },
                steps,
                peak_before: peak_before.unwrap_or(peak_after),
                peak_after,
                live,
                evaluated,
            };
            return Ok((chunked, traded));
        };
        let g = &cur.graph;
        let name = |n: Option<&NodeId>| n.map(|&n| g.node(n).name.clone()).unwrap_or_default();
        let region = &best.region;
        let em = rewrite::emit(g, &facts, dims, &base.consumers, region)?;
        let mut step = ChunkStep {
            nodes: region.nodes.len(),
            first: name(region.nodes.first()),
            last: name(region.nodes.last()),
            outputs: em
                .outputs
                .iter()
                .map(|&v| g.value(v).name.clone())
                .collect(),
            chunks: em.bounds.len(),
            extent: best.extent,
            peak_before: base.peak,
            peak_after: best.pred.peak,
            copied_bytes: best.pred.copied,
            added_nodes: best.pred.added,
            predicted_seconds: best.seconds,
            recomputed_nodes: region.keep.len(),
            scan: false,
            lanes: 0,
            tiles: best.built.as_ref().map_or(0, |t| t.inner),
            siblings: 0,
            unrolled: None,
        };
        // The same region in the other chunks of the step it was grown in (see `siblings`).
        let alike = if opts.nested && best.built.is_none() {
            sets.siblings(g, region)
        } else {
            Vec::new()
        };
        drop(base);
        let (next, next_facts) = match best.built {
            Some(t) => {
                step.recomputed_nodes = t.copied;
                (t.model, Some(t.facts))
            }
            None => {
                let (mut next, unrolled) = rewrite::apply_unrolled(&cur, &facts, dims, region)?;
                // The shape values frozen for the region's nodes are read by none now: each
                // chunk's clone reads constants of its own. Dropped before the facts, so the next
                // step's simulated peak no longer holds them resident.
                next.graph = rewrite::drop_unread_initializers(next.graph, &unfrozen.graph);
                if opts.nested {
                    sets.add(&unrolled);
                }
                step.unrolled = Some(unrolled);
                (next, None)
            }
        };
        made.extend(new_names(&cur, &next));
        facts = match next_facts {
            Some(f) => f,
            None => rewritten_facts(&next, dims)?,
        };
        cur = next;
        if !alike.is_empty() {
            let mut ctx = Alike {
                dims,
                original: &unfrozen.graph,
                made: &mut made,
                sets: &mut sets,
            };
            (cur, facts) = ctx.apply(cur, facts, alike, &mut step);
        }
        if opts.nested {
            open = sets.open();
        }
        steps.push(step);
    }
}

/// What applying a region alike to the sibling chunks of its step updates (see [`siblings`]).
struct Alike<'a> {
    dims: &'a BTreeMap<String, i64>,
    /// The graph before chunking: its initializers stay when nothing reads them.
    original: &'a memplan_ir::graph::Graph,
    made: &'a mut BTreeSet<String>,
    sets: &'a mut siblings::Sets,
}

impl Alike<'_> {
    /// `cur` with each region of `alike` found again and applied, its facts, and `step` counting
    /// the siblings and what they add (as much again per sibling). A region not found, or whose
    /// rewrite or facts fail (a chunk it does not map onto), is left out.
    fn apply(
        &mut self,
        mut cur: Model,
        mut facts: Facts,
        alike: Vec<siblings::Named>,
        step: &mut ChunkStep,
    ) -> (Model, Facts) {
        for named in alike {
            let Some(r) = named.resolve(&cur.graph) else {
                continue;
            };
            let Ok((mut next, unrolled)) = rewrite::apply_unrolled(&cur, &facts, self.dims, &r)
            else {
                continue;
            };
            next.graph = rewrite::drop_unread_initializers(next.graph, self.original);
            let Ok(f) = rewritten_facts(&next, self.dims) else {
                continue;
            };
            self.made.extend(new_names(&cur, &next));
            self.sets.add(&unrolled);
            (cur, facts) = (next, f);
            step.siblings += 1;
        }
        let times = 1 + step.siblings;
        step.predicted_seconds *= times as f64;
        step.added_nodes *= times;
        step.copied_bytes *= times as u64;
        (cur, facts)
    }
}

/// The names of the nodes of `next` that `cur` does not have.
fn new_names(cur: &Model, next: &Model) -> Vec<String> {
    let old: BTreeSet<&str> = cur.graph.nodes.iter().map(|n| n.name.as_str()).collect();
    next.graph
        .nodes
        .iter()
        .filter(|n| !old.contains(n.name.as_str()))
        .map(|n| n.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use memplan_ir::Expr;
    use std::path::{Path, PathBuf};

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    /// Every corpus model (both exporters) with the dims of its smallest fixture.
    fn corpus() -> Vec<(String, Model, BTreeMap<String, i64>)> {
        let dir = repo().join("tests/fixtures/ort_shapes");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        let mut out: Vec<(String, Model, BTreeMap<String, i64>)> = Vec::new();
        for f in files {
            let stem = f.file_stem().unwrap().to_str().unwrap().to_string();
            let (model, _) = stem.rsplit_once('.').unwrap();
            let j: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
            let dims: BTreeMap<String, i64> = j["dims"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_i64().unwrap()))
                .collect();
            if let Some(prev) = out.iter_mut().find(|(m, _, _)| m == model) {
                if dims.values().sum::<i64>() < prev.2.values().sum::<i64>() {
                    prev.2 = dims;
                }
                continue;
            }
            let path = repo().join(format!("tests/corpus/models/{model}.onnx"));
            let m = memplan_onnx::import(&path).unwrap();
            out.push((model.to_string(), m, dims));
        }
        out
    }

    /// The prediction is the simulator's live bytes at every step of the rewrite once built and
    /// re-inferred, for every candidate of the first search step on every corpus model, with and
    /// without concatenations assembled in place (with them, regions also grow through reshapes
    /// that scale their axis).
    #[test]
    fn predictions_are_the_simulated_peak_of_the_rewrite() {
        let mut checked = 0;
        for (name, model, dims) in corpus() {
            let (m, facts) = sorted(&model, &dims).unwrap();
            for assemble in [false, true] {
                let opts = ChunkOptions {
                    assemble,
                    scaled: assemble,
                    ..ChunkOptions::default()
                };
                let base = Base::new(&m.graph, &facts, &dims, assemble).unwrap();
                let frozen = vec![false; m.graph.nodes.len()];
                let cands = candidates(&base, &opts, &frozen, &mut 0);
                for c in &cands {
                    let out = apply(&m, &facts, &dims, &c.region).unwrap();
                    let f2 = memplan_ir::infer_model(&out).unwrap();
                    let b2 = Base::new(&out.graph, &f2, &dims, assemble).unwrap();
                    let first_diff = (0..b2.per_step.len())
                        .find(|&s| c.pred.per_step.get(s) != Some(&b2.per_step[s]));
                    assert_eq!(
                        (c.pred.peak, &c.pred.per_step),
                        (b2.peak, &b2.per_step),
                        "{name} (assemble {assemble}): {} nodes in {} chunks; steps first differ at {:?}",
                        c.region.nodes.len(),
                        c.region.chunks,
                        first_diff.map(|s| (
                            s,
                            out.graph.nodes[s].label(NodeId::from_index(s)),
                            c.pred.per_step.get(s),
                            b2.per_step[s]
                        ))
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 100, "only {checked} candidates");
    }

    /// A model of `g` at opset 18.
    fn model_of(g: memplan_ir::graph::Graph) -> Model {
        Model {
            graph: g,
            opsets: vec![memplan_ir::graph::OpsetImport {
                domain: String::new(),
                version: 18,
            }],
            ..Model::default()
        }
    }

    /// `model` in topological order, its facts (at no dims), and the growth from node `seed` along
    /// axis 0, up to 100 nodes.
    fn grown(model: &Model, seed: &str) -> (Model, Facts, Vec<region::Joined>) {
        let dims = BTreeMap::new();
        let (m, facts) = sorted(model, &dims).unwrap();
        let seed = m.graph.nodes.iter().position(|n| n.name == seed).unwrap();
        let light = crate::remat::light_values(&m.graph, &facts, &dims);
        let frozen = vec![false; m.graph.nodes.len()];
        let growth = region::grow(
            &m.graph,
            &facts,
            &dims,
            &m.graph.consumers(),
            &light,
            NodeId::from_index(seed),
            0,
            100,
            &frozen,
            true,
        );
        (m, facts, growth)
    }

    /// `model` with the region grown from node `seed` along axis 0 (of `extent`) in `chunks`
    /// chunks, as predicted and as simulated once built: the region's node count, the prediction,
    /// whether the node named `cat` was assembled in place before, and the built model's simulated
    /// peak, live bytes per step and `Concat`s assembled in place that are named from `cat`.
    fn chunked_concat(
        model: &Model,
        seed: &str,
        extent: i64,
        chunks: usize,
    ) -> (usize, Prediction, bool, (u64, Vec<u64>, usize)) {
        let dims = BTreeMap::new();
        let (m, facts, growth) = grown(model, seed);
        let base = Base::new(&m.graph, &facts, &dims, true).unwrap();
        let at = |g: &memplan_ir::graph::Graph, name: &str| {
            g.nodes.iter().position(|n| n.name == name).unwrap()
        };
        let nodes: BTreeSet<NodeId> = growth.iter().map(|(n, _)| *n).collect();
        let count = nodes.len();
        let axes = growth.into_iter().flat_map(|(_, a)| a).collect();
        let shape = (nodes, axes, BTreeSet::new());
        let opts = ChunkOptions::default();
        let c = evaluate(&base, &opts, &shape, extent, chunks, &mut 0).expect(seed);
        let out = apply(&m, &facts, &dims, &c.region).unwrap();
        let f2 = memplan_ir::infer_model(&out).unwrap();
        let b2 = Base::new(&out.graph, &f2, &dims, true).unwrap();
        let cats = (0..out.graph.nodes.len())
            .filter(|&i| out.graph.nodes[i].name.starts_with("cat") && b2.assembled(i))
            .count();
        let before = base.assembled(at(&m.graph, "cat"));
        (count, c.pred, before, (b2.peak, b2.per_step.clone(), cats))
    }

    /// `y = Sigmoid(Concat(p, q, axis 1))` of `x [4, 8, 16]`, its pieces made by `makers` from `x`
    /// (in that order) and joined as `order` lists them.
    fn concat_graph(makers: [&str; 2], order: [usize; 2]) -> Model {
        use memplan_ir::graph::{DeclDim, DeclType, Graph};
        let mut g = Graph::default();
        let dims = [4, 8, 16].map(DeclDim::Value).to_vec();
        let x = g.add_input("x", DeclType::tensor(memplan_ir::DataType::F32, dims));
        let shape = g.add_initializer(memplan_ir::TensorData::from_i64(
            "shape",
            vec![3],
            &[4, 8, 16],
        ));
        let mut piece = |i: usize, op: &str| -> ValueId {
            let ins = if op == "Reshape" {
                vec![Some(x), Some(shape)]
            } else {
                vec![Some(x)]
            };
            g.add_node(format!("p{i}"), op, &ins, &[&format!("v{i}")], vec![])
                .1[0]
        };
        let v = [piece(0, makers[0]), piece(1, makers[1])];
        let ins = order.map(|i| Some(v[i]));
        let axis = vec![rewrite::axis_attr(1)];
        let c = g.add_node("cat", "Concat", &ins, &["c"], axis).1[0];
        let y = g.add_node("out", "Sigmoid", &[Some(c)], &["y"], vec![]).1[0];
        g.outputs = vec![y];
        model_of(g)
    }

    /// A `Concat` chunked along the axis before the one it joins, one row per chunk, is assembled
    /// in place in each chunk where the simulator assembles it (its pieces made by nodes that are
    /// not views, in order), and the prediction is the simulated peak of the rewrite in each case.
    #[test]
    fn a_concat_assembled_in_place_per_chunk_is_predicted() {
        for (makers, order, assembled) in [
            (["Relu", "Neg"], [0, 1], true),
            // A view's output is not written into another buffer.
            (["Reshape", "Neg"], [0, 1], false),
            // The pieces are made in the other order.
            (["Relu", "Neg"], [1, 0], false),
        ] {
            let what = format!("{makers:?} joined as {order:?}");
            let (nodes, pred, _, (peak, per_step, cats)) =
                chunked_concat(&concat_graph(makers, order), "cat", 4, 4);
            assert_eq!(nodes, 4, "{what}");
            assert_eq!((pred.peak, &pred.per_step), (peak, &per_step), "{what}");
            assert_eq!(cats, if assembled { 4 } else { 0 }, "{what}");
        }
    }

    /// `y = Concat(Reshape(Relu(x)), Neg(z), axis 0)`: the reshape is a view, so the `Concat` is not
    /// assembled in place; once the relu and the reshape are chunked, the reshape's output is made
    /// by the rewrite's `Concat` of its chunks, and `y` is assembled. The prediction follows.
    #[test]
    fn a_concat_after_the_region_assembled_once_its_piece_is_no_view_is_predicted() {
        use memplan_ir::graph::{DeclDim, DeclType, Graph};
        let mut g = Graph::default();
        let t = |d: &[i64]| {
            let dims = d.iter().map(|&k| DeclDim::Value(k)).collect();
            DeclType::tensor(memplan_ir::DataType::F32, dims)
        };
        let x = g.add_input("x", t(&[4, 8]));
        let z = g.add_input("z", t(&[4, 2, 4]));
        let shape = g.add_initializer(memplan_ir::TensorData::from_i64(
            "shape",
            vec![3],
            &[4, 2, 4],
        ));
        let r = g.add_node("relu", "Relu", &[Some(x)], &["r"], vec![]).1[0];
        let v = g
            .add_node("view", "Reshape", &[Some(r), Some(shape)], &["v"], vec![])
            .1[0];
        let w = g.add_node("neg", "Neg", &[Some(z)], &["w"], vec![]).1[0];
        let axis = vec![rewrite::axis_attr(0)];
        let y = g
            .add_node("cat", "Concat", &[Some(v), Some(w)], &["y"], axis)
            .1[0];
        g.outputs = vec![y];
        let (nodes, pred, before, (peak, per_step, cats)) =
            chunked_concat(&model_of(g), "view", 4, 2);
        assert_eq!(nodes, 2);
        assert!(!before);
        assert_eq!(cats, 1);
        assert_eq!((pred.peak, &pred.per_step), (peak, &per_step));
    }

    /// A region that ends where its output is read by a node as large (an up-projection and its
    /// bias, read by the activation) is judged at that reader too: there its output is whole, so
    /// the rewrite does not lower the live bytes there, however low it takes them in its own span.
    #[test]
    fn a_region_is_judged_at_the_first_reader_of_its_output() {
        use memplan_ir::graph::{DeclDim, DeclType, Graph};
        let mut g = Graph::default();
        let dims = [256, 32].map(DeclDim::Value).to_vec();
        let x = g.add_input("x", DeclType::tensor(memplan_ir::DataType::F32, dims));
        let weight = |g: &mut Graph, name: &str, d: [u64; 2]| {
            let n = (d[0] * d[1]) as usize;
            g.add_initializer(memplan_ir::TensorData::from_f32(
                name,
                d.to_vec(),
                &vec![0.5; n],
            ))
        };
        let (w1, b1) = (
            weight(&mut g, "w1", [32, 128]),
            weight(&mut g, "b1", [1, 128]),
        );
        let w2 = weight(&mut g, "w2", [128, 32]);
        let a = g.add_node("a", "Relu", &[Some(x)], &["a"], vec![]).1[0];
        let up0 = g
            .add_node("up0", "MatMul", &[Some(a), Some(w1)], &["up0"], vec![])
            .1[0];
        let up = g
            .add_node("up", "Add", &[Some(up0), Some(b1)], &["up"], vec![])
            .1[0];
        let act = g
            .add_node("act", "Sigmoid", &[Some(up)], &["act"], vec![])
            .1[0];
        let d = g
            .add_node("down", "MatMul", &[Some(act), Some(w2)], &["d"], vec![])
            .1[0];
        g.outputs = vec![d];
        let model = model_of(g);
        let dims = BTreeMap::new();
        let (m, facts, growth) = grown(&model, "up");
        let base = Base::new(&m.graph, &facts, &dims, true).unwrap();
        let id = |name: &str| {
            NodeId::from_index(m.graph.nodes.iter().position(|n| n.name == name).unwrap())
        };
        let region = [id("a"), id("up0"), id("up")];
        let growth: Vec<_> = growth
            .into_iter()
            .filter(|(n, _)| region.contains(n))
            .collect();
        assert_eq!(growth.len(), 3);
        let nodes: BTreeSet<NodeId> = growth.iter().map(|(n, _)| *n).collect();
        let axes = growth.into_iter().flat_map(|(_, a)| a).collect();
        let shape = (nodes, axes, BTreeSet::new());
        let c = evaluate(&base, &ChunkOptions::default(), &shape, 256, 8, &mut 0).unwrap();
        // At the activation: `up` whole and the activation's output, 128 KiB each.
        let at_reader = 2 * 256 * 128 * 4;
        assert!(c.pred.peak >= at_reader, "{}", c.pred.peak);
        assert!(
            c.pred.local >= at_reader,
            "local {} below {at_reader}",
            c.pred.local
        );
    }

    /// The first readers of new steps' outputs (`predict::first_readers`, as tiles use it): of the
    /// large ones only, the first step after the new steps that is not new, where the output is
    /// whole.
    #[test]
    fn the_first_readers_are_those_of_large_outputs_after_the_new_steps() {
        use memplan_ir::graph::{DeclDim, DeclType, Graph};
        let mut g = Graph::default();
        let decl = |d: [i64; 2]| {
            DeclType::tensor(memplan_ir::DataType::F32, d.map(DeclDim::Value).to_vec())
        };
        let x = g.add_input("x", decl([256, 32]));
        let y = g.add_input("y", decl([1, 32]));
        let op = |g: &mut Graph, name: &str, op: &str, ins: &[ValueId]| {
            let ins: Vec<Option<ValueId>> = ins.iter().copied().map(Some).collect();
            g.add_node(name, op, &ins, &[name], vec![]).1[0]
        };
        let a = op(&mut g, "a", "Relu", &[x]);
        let b = op(&mut g, "b", "Relu", &[a]); // new, large
        let m = op(&mut g, "m", "Relu", &[y]); // new, small
        let r1 = op(&mut g, "r1", "Sigmoid", &[b]); // b's first reader after the new steps
        let r2 = op(&mut g, "r2", "Tanh", &[b]);
        let r3 = op(&mut g, "r3", "Add", &[r1, m]); // m's first reader
        let out = op(&mut g, "out", "Add", &[r2, r3]);
        g.outputs = vec![out];
        let model = model_of(g);
        let facts = memplan_ir::infer_model(&model).unwrap();
        let dims = BTreeMap::new();
        let base = Base::new(&model.graph, &facts, &dims, true).unwrap();
        let outputs = [b, m];
        let new = |n: usize| (1..=2).contains(&n);
        let at = |least| predict::first_readers(&base, &base.bytes, &outputs, 2, new, least);
        assert_eq!(at(base.peak / 64), BTreeSet::from([3]));
        assert_eq!(at(0), BTreeSet::from([3, 5]));
    }

    /// The corpus's tri_att_start chunked with the default options (at least one step).
    fn chunked_tri_att_start() -> (String, Chunked, BTreeMap<String, i64>) {
        let (name, _, out, dims) = chunked("of3_tri_att_start", &ChunkOptions::default());
        (name, out, dims)
    }

    /// A corpus model, and it chunked with `opts` (at least one step).
    fn chunked(
        model: &str,
        opts: &ChunkOptions,
    ) -> (String, Model, Chunked, BTreeMap<String, i64>) {
        let (name, model, dims) = corpus().into_iter().find(|(n, _, _)| n == model).unwrap();
        let out = chunk_to_budget(&model, &dims, opts).unwrap();
        assert!(!out.steps.is_empty(), "{name}");
        (name, model, out, dims)
    }

    /// Chunking leaves no initializer of its own unread: the shape values frozen for readers it
    /// then rewrote per chunk are dropped (the legacy export computes every reshape from `Shape`;
    /// its chunked file carried about 90 such constants).
    #[test]
    fn chunking_leaves_no_initializer_of_its_own_unread() {
        // As low as it goes: regions that take in the shape arithmetic's readers.
        let opts = ChunkOptions {
            budget: Some(0),
            ..ChunkOptions::default()
        };
        for model in ["of3_tri_att_start.legacy", "of3_tri_att_start"] {
            let (name, original, out, _) = chunked(model, &opts);
            let g = &out.model.graph;
            let read: BTreeSet<ValueId> = g.nodes.iter().flat_map(|n| n.input_ids()).collect();
            let unread: Vec<&str> = g
                .initializers
                .iter()
                .filter(|v| !read.contains(v))
                .map(|&v| g.value(v).name.as_str())
                .filter(|n| {
                    let o = &original.graph;
                    !o.initializers.iter().any(|&v| o.value(v).name == *n)
                })
                .collect();
            assert!(
                unread.is_empty(),
                "{name}: {} unread: {unread:?}",
                unread.len()
            );
            // Chunking's constants that are read (slice bounds, per-chunk shapes) stay.
            assert!(
                g.initializers.len() > original.graph.initializers.len(),
                "{name}"
            );
        }
    }

    /// The outgoing triangle product, tiled: every chunk of rows reads the whole right operand,
    /// which tiles make again per chunk of rows and chunk along its own rows, so the lowest peak
    /// drops below what one axis reaches, toward the floor (the resident input and the output).
    #[test]
    fn tiles_lower_the_triangle_product_below_one_axis() {
        for name in ["of3_tri_mul_out", "of3_tri_mul_out.legacy"] {
            let (_, model, _) = corpus().into_iter().find(|(n, _, _)| n == name).unwrap();
            let dims = BTreeMap::from([("N".to_string(), 256)]);
            let lowest = |tiles| {
                let opts = ChunkOptions {
                    budget: Some(0),
                    tiles,
                    ..ChunkOptions::default()
                };
                chunk_to_budget(&model, &dims, &opts).unwrap()
            };
            let (plain, tiled) = (lowest(false), lowest(true));
            assert!(plain.steps.iter().all(|s| s.tiles == 0), "{name}");
            let step = tiled.steps.iter().find(|s| s.tiles > 0);
            assert!(step.is_some_and(|s| s.recomputed_nodes > 0), "{name}");
            // 28.3 MiB on one axis; the floor is 16.3 MiB.
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            assert!(
                mib(plain.peak_after) > 28.0,
                "{name}: {}",
                mib(plain.peak_after)
            );
            assert!(
                mib(tiled.peak_after) < 21.0,
                "{name}: {}",
                mib(tiled.peak_after)
            );
            assert_eq!(
                simulate(&tiled.model, &dims, true).unwrap(),
                tiled.peak_after
            );
        }
    }

    /// Candidates are predicted on the thread pool, but the search is that of predicting them one by
    /// one: on one thread and on three, the same steps, the same candidates counted and the same
    /// rewritten graph (both exports of triangle attention, chunked to the lowest plan).
    #[test]
    fn the_search_does_not_depend_on_the_thread_count() {
        for name in ["of3_tri_att_start", "of3_tri_att_start.legacy"] {
            let (_, model, _) = corpus().into_iter().find(|(n, _, _)| n == name).unwrap();
            let dims = BTreeMap::from([("N".to_string(), 64)]);
            let opts = ChunkOptions {
                budget: Some(0),
                ..ChunkOptions::default()
            };
            let on = |threads| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let c = pool.install(|| chunk_to_budget(&model, &dims, &opts).unwrap());
                let nodes: Vec<(String, String)> = c
                    .model
                    .graph
                    .nodes
                    .iter()
                    .map(|n| (n.name.clone(), n.op.clone()))
                    .collect();
                (c.steps, c.evaluated, c.peak_after, nodes)
            };
            let (one, three) = (on(1), on(3));
            assert!(!one.0.is_empty(), "{name}: not chunked");
            assert!(one.1 > one.0.len(), "{name}: {} candidates", one.1);
            assert!(one == three, "{name}: one thread and three differ");
        }
    }

    /// A value made again for one more reader several times is one report line counting them.
    #[test]
    fn a_value_made_again_repeatedly_is_one_line() {
        let line = |value: &str, nodes| crate::remat::PerReader {
            value: value.into(),
            bytes: 64,
            copies: 1,
            nodes,
        };
        let mut lines = Vec::new();
        for r in [
            line("ln", 2),
            line("ln", 2),
            line("bias", 3),
            line("ln", 2),
            line("ln", 5),
        ] {
            add_reader(&mut lines, r);
        }
        let got: Vec<(&str, usize, usize)> = lines
            .iter()
            .map(|l| (l.value.as_str(), l.nodes, l.copies))
            .collect();
        assert_eq!(got, [("ln", 2, 3), ("bias", 3, 1), ("ln", 5, 1)]);
    }

    /// A rewritten model is pinned at its dims: it declares no symbol, records the dims, and
    /// every size is a constant whether it is inferred at the dims or as a file is; unpinned, the
    /// values assembled from slices of a symbolic axis are sums of clamped widths.
    #[test]
    fn a_rewritten_model_is_pinned_at_its_dims() {
        let (name, out, dims) = chunked_tri_att_start();
        let sizes = |m: &Model, f: &Facts| -> Vec<Expr> {
            m.graph
                .value_ids()
                .filter_map(|v| f.get(v).bytes())
                .collect()
        };
        assert_eq!(out.model.pinned_dims().unwrap(), dims, "{name}");
        let at = sizes(&out.model, &rewritten_facts(&out.model, &dims).unwrap());
        assert!(at.len() > out.model.graph.nodes.len() / 2);
        assert!(at.iter().all(Expr::is_const), "{name}");
        let as_file = memplan_ir::infer_model(&out.model).unwrap();
        assert!(as_file.symbols.declared.is_empty(), "{name}");
        assert_eq!(sizes(&out.model, &as_file), at, "{name}");
        // The same graph with its inputs declared as the original's.
        let (_, original, _) = corpus().into_iter().find(|(n, _, _)| *n == name).unwrap();
        let mut unpinned = out.model.clone();
        for &w in &original.graph.inputs {
            let w = original.graph.value(w);
            if let Some(v) = unpinned.graph.values.iter_mut().find(|v| v.name == w.name) {
                v.decl = w.decl.clone();
            }
        }
        let symbolic = memplan_ir::infer_model(&unpinned).unwrap();
        assert!(
            sizes(&unpinned, &symbolic).iter().any(|e| !e.is_const()),
            "{name}"
        );
    }

    /// The rewrite keeps names unique and leaves no value without a producer or a role.
    #[test]
    fn the_rewrite_is_a_clean_graph() {
        let (_, out, dims) = chunked_tri_att_start();
        assert!(out.peak_after < out.peak_before);
        let g = &out.model.graph;
        let mut names = BTreeSet::new();
        for v in &g.values {
            assert!(!v.name.is_empty(), "an unnamed value");
            assert!(names.insert(v.name.clone()), "'{}' twice", v.name);
        }
        let facts = memplan_ir::infer_model(&out.model).unwrap();
        assert!(facts.skipped.is_empty());
        assert_eq!(simulate(&out.model, &dims, true).unwrap(), out.peak_after);
    }
}
