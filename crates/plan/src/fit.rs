//! The budget loop: one entry, [`fit_budget`], that makes a model fit a memory budget with the
//! levers of this crate and returns the (possibly rewritten) model, its facts and a checked plan.
//!
//! 1. With [`FitOptions::narrow`] (the default), tensors proven to hold few values (0/1 masks) are
//!    stored in one byte per element while the graph-order peak exceeds the budget
//!    ([`crate::narrow`]); exact, so outputs stay bit-identical.
//! 2. With [`FitOptions::recompute`], values read again after the graph-order peak are recomputed
//!    ([`crate::remat`]) until the graph-order peak fits.
//! 3. The model is planned ([`crate::optimize`]). If the planned peak (arena plus resident weights
//!    and inputs: the peak the budget applies to) fits, that is the answer.
//! 4. Otherwise regions are chunked ([`crate::chunk`]) to a target, the result is planned, and while
//!    the planned peak still exceeds the budget the target is lowered by the excess and chunking
//!    starts again from the original model (three rounds at most). The plan kept is the one with
//!    the lowest planned peak, so a budget that cannot be met still gets the lowest plan reached.
//! 5. With [`FitOptions::scan_from`], chunked regions of enough equal chunks (whose unrolling adds
//!    enough nodes) are folded into one `Scan` each ([`crate::chunk::roll`]) and the result is
//!    planned, the bodies in [`ScanFrom::lanes`] lanes (iterations side by side, each lane with a
//!    copy of the body's memory); it is kept when its planned peak fits the budget or is no higher
//!    than the unrolled one's. Where the lanes miss a budget that one lane meets, chunking runs
//!    once more to a target lower by what the lanes add; else the bodies run in one lane.
//! 6. When chunking did not meet the budget, narrowing and recomputation (chosen on the graph-order
//!    peak, before chunking) may have stood in its way: the model is fitted again without each, and
//!    the fit that meets the budget, or else plans lower, is kept; so are the chunking fallbacks
//!    (shared light values made into trees, topological prefixes, tiles, and last, regions that
//!    also grow through reshapes that scale their axis), each on the best fit's levers.
//! 7. When the budget is still not met (`lowest` never is), the best fit's levers are fitted once
//!    more with rounds that ask for an eighth less than the lowest plan so far, while each plans
//!    lower (three at most): a greedy search that can fit its target takes the cheapest
//!    fitting region and goes on, where one that cannot takes the lowest region each time and may
//!    leave no progress after it.
//!
//! Every bound is on work (rounds, candidates, search states), never on time: the same input gives
//! the same plan on any machine.

use std::collections::BTreeMap;

use memplan_ir::graph::Model;
use memplan_ir::infer::Facts;

use crate::chunk::{chunk_to_budget_with, ChunkError, ChunkOptions, ChunkStep};
use crate::narrow::{self, NarrowError};
use crate::remat::{self, Copies, RematError};
use crate::{optimize, OptimizeError, Options, Outcome, Pass};

/// Knobs of [`fit_budget`].
#[derive(Clone, Debug)]
pub struct FitOptions {
    /// The planned peak to reach, in bytes.
    pub budget: u64,
    /// Planner options (schedule search work).
    pub plan: Options,
    /// Chunking options; its `budget` is set by the loop.
    pub chunk: ChunkOptions,
    /// Store tensors proven to hold few values narrow first (on by default).
    pub narrow: Option<narrow::Options>,
    /// Recompute values read after the peak first (training graphs).
    pub recompute: Option<remat::Options>,
    /// Which chunked regions to fold into one `Scan` each ([`crate::chunk::roll`]), when the
    /// folded plan still fits (or is no higher); `None`: never.
    pub scan_from: Option<ScanFrom>,
}

impl FitOptions {
    /// Defaults for a budget.
    pub fn new(budget: u64) -> FitOptions {
        FitOptions {
            budget,
            plan: Options::default(),
            chunk: ChunkOptions::default(),
            narrow: Some(narrow::Options::default()),
            recompute: None,
            scan_from: Some(ScanFrom::DEFAULT),
        }
    }
}

/// Which chunked regions are folded into a `Scan`: those of at least `chunks` chunks (of one width)
/// whose unrolling adds at least `nodes` nodes; their bodies run in `lanes` lanes
/// ([`crate::plan::BodyPlan::lanes`]) where that fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanFrom {
    pub chunks: usize,
    pub nodes: usize,
    pub lanes: u32,
}

impl ScanFrom {
    /// Hundreds of chunks of a region of dozens of nodes: unrolled, thousands of nodes in the file.
    /// Smaller regions stay unrolled unless asked. Two lanes: a chunk that small does not keep two
    /// threads busy on its own.
    pub const DEFAULT: ScanFrom = ScanFrom {
        chunks: 100,
        nodes: 2048,
        lanes: 2,
    };

    /// Whether a step of `chunks` chunks that added `nodes` nodes is folded.
    pub fn folds(&self, chunks: usize, nodes: usize) -> bool {
        chunks >= self.chunks && nodes >= self.nodes
    }
}

/// What chunking did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ChunkSummary {
    /// Light values (a position bias, a mask) made again for each reader before chunking.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_reader: Vec<remat::PerReader>,
    pub steps: Vec<ChunkStep>,
    /// Simulated peak (graph order) before and after chunking.
    pub simulated_peak_before: u64,
    pub simulated_peak_after: u64,
    /// Candidates predicted, over all rounds.
    pub candidates: usize,
    /// Chunk-then-plan rounds run.
    pub rounds: usize,
    /// Predicted extra run time of the rewrite, in seconds: the chunked model's run under its plan
    /// less the unchunked model's under its own
    /// ([`CostModel::plan_seconds`](crate::cost::CostModel::plan_seconds), before any fold into a
    /// `Scan`). It counts every node the rewrite added, the per-reader copies too, and the first
    /// touches of the planned arenas. Each step's `predicted_seconds` is the search's estimate of
    /// that step alone, on the simulated peak.
    pub predicted_seconds: f64,
    /// When the budget is not met: the largest tensors live at the (simulated) peak.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub live_at_peak: Vec<LiveTensor>,
}

/// A tensor live at the peak.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LiveTensor {
    pub name: String,
    pub bytes: u64,
}

/// The result of [`fit_budget`]: the model to run (rewritten when a lever was used), its facts, and
/// its checked plan, with the report's passes covering every lever.
#[derive(Clone, Debug)]
pub struct Fit {
    pub model: Model,
    pub facts: Facts,
    pub outcome: Outcome,
    /// Whether the planned peak is within the budget.
    pub fits: bool,
    pub chunking: Option<ChunkSummary>,
    /// Present when a value was narrowed.
    pub narrowing: Option<narrow::Report>,
    pub recompute: Option<remat::Report>,
}

/// Why no plan could be made.
#[derive(Debug, thiserror::Error)]
pub enum FitError {
    #[error(transparent)]
    Plan(#[from] OptimizeError),
    #[error("recomputation: {0}")]
    Remat(#[from] RematError),
    #[error("narrowing: {0}")]
    Narrow(#[from] NarrowError),
    #[error("chunking: {0}")]
    Chunk(#[from] ChunkError),
    #[error("the chunked model: {0}")]
    Infer(String),
}

/// Makes `model` fit `opts.budget` at `dims` (every symbol given): see the module docs.
///
/// Narrowing and recomputation are chosen on the graph-order peak, before chunking. Where chunking
/// is needed they can stand in its way (a narrowed mask is widened whole for each reader, where
/// chunking would have made each chunk's slice of it), so when the budget is still not met the
/// model is also fitted without each of them, and the better fit is kept ([`better`]). When the
/// better one still misses the budget, it is fitted once more with the shared light computations
/// made into trees ([`Copies::Trees`]: more copies, paid per chunk, which let one region split
/// each reader's copy along its own axis), and the better fit is kept. When that still misses, it is
/// fitted once more with regions also cut at topological prefixes of their growth
/// ([`ChunkOptions::topological`]), and the better fit is kept; when that still misses, once more
/// with regions also chunked in tiles ([`ChunkOptions::tiles`]: a value every chunk reads whole made
/// again per chunk, its makers paid once per chunk); when that still misses, once more with
/// regions also grown through reshapes that scale their axis ([`ChunkOptions::scaled`]); when that
/// still misses, once more with each chosen region joined by the producers only it reads
/// ([`ChunkOptions::absorb`]); when that still misses, once more with regions also grown in the
/// chunks of an earlier step, each applied alike to every chunk of that step
/// ([`ChunkOptions::nested`]). When the best
/// fit still misses (as every fit to `lowest`, a budget of 0, does), its levers are fitted once more
/// with chunking targets a little below its plan ([`next_target`]), and so are the levers the last
/// fallback to win replaced, below their own plan; the better fit is kept.
pub fn fit_budget(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    opts: &FitOptions,
) -> Result<Fit, FitError> {
    let mut cache = PreparedCache::default();
    let mut best = fit_with(model, facts, dims, opts, None, &mut cache)?;
    if best.fits || best.chunking.is_none() {
        return Ok(best);
    }
    let mut variants = Vec::new();
    if best.narrowing.is_some() {
        variants.push(FitOptions {
            narrow: None,
            ..opts.clone()
        });
    }
    if best.recompute.as_ref().is_some_and(|r| !r.steps.is_empty()) {
        variants.push(FitOptions {
            recompute: None,
            ..opts.clone()
        });
    }
    let mut levers = opts.clone();
    for v in variants {
        let other = fit_with(model, facts, dims, &v, None, &mut cache)?;
        if better(&other, &best) {
            (best, levers) = (other, v);
        }
    }
    // The chunking fallbacks, in turn, each on the levers of the best fit so far: a chunk option
    // set that the levers do not have yet.
    // Last of them, regions that also grow through reshapes that scale their axis: more regions,
    // which can send the greedy steps another way and end higher (DeBERTa's heads, Bloom's MLP),
    // so a fallback too.
    // Then regions that take in the producers only they read (a query's rotary mix).
    // Then regions grown again in the chunks of an earlier step (chunking twice).
    let fallbacks: [fn(&mut ChunkOptions) -> bool; 6] = [
        |c| std::mem::replace(&mut c.copies, Copies::Trees) != Copies::Trees,
        |c| !std::mem::replace(&mut c.topological, true),
        |c| !std::mem::replace(&mut c.tiles, true),
        |c| !std::mem::replace(&mut c.scaled, true),
        |c| !std::mem::replace(&mut c.absorb, true),
        |c| !std::mem::replace(&mut c.nested, true),
    ];
    // The levers the last fallback to plan lower replaced, and their planned peak.
    let mut replaced: Option<(u64, FitOptions)> = None;
    for set in fallbacks {
        let mut next = levers.clone();
        if best.fits || !set(&mut next.chunk) {
            continue;
        }
        let other = fit_with(model, facts, dims, &next, None, &mut cache)?;
        if better(&other, &best) {
            replaced = Some((best.outcome.report.peak_bytes_after, levers));
            (best, levers) = (other, next);
        }
    }
    // Last, rounds that ask for less than a plan (see `next_target`): on the levers of the best
    // fit, and on those the last fallback to win replaced, each from its own plan. A fallback
    // changes the candidates, and with them the greedy steps, so the descent from the plan it
    // beat can still end lower (ConvBERT's dynamo file: 10.75 MiB from the levers before the
    // scaled regions, 10.92 from theirs). Not on every variant: that would multiply the work. The
    // report counts their rounds and candidates whichever fit is kept.
    if let (false, Some(c)) = (best.fits, &best.chunking) {
        let (mut rounds, mut candidates) = (c.rounds, c.candidates);
        let from = best.outcome.report.peak_bytes_after;
        for (from, levers) in std::iter::once((from, levers)).chain(replaced) {
            let other = fit_with(model, facts, dims, &levers, Some(from), &mut cache)?;
            if let Some(c) = &other.chunking {
                (rounds, candidates) = (rounds + c.rounds, candidates + c.candidates);
            }
            if better(&other, &best) {
                best = other;
            }
            if best.fits {
                break;
            }
        }
        if let Some(c) = &mut best.chunking {
            (c.rounds, c.candidates) = (rounds, candidates);
        }
    }
    Ok(best)
}

/// Whether fit `a` is better than fit `b`: it fits where `b` does not, or its planned peak is lower.
fn better(a: &Fit, b: &Fit) -> bool {
    (a.fits && !b.fits)
        || (a.fits == b.fits
            && a.outcome.report.peak_bytes_after < b.outcome.report.peak_bytes_after)
}

/// The model as narrowing and recomputation leave it, planned unchunked: the first half of
/// [`fit_with`], which depends on the levers' `narrow` and `recompute` (and the budget and planner
/// options, the same in every fit of one [`fit_budget`]) and not on the chunk options.
#[derive(Clone)]
struct Prepared {
    model: Model,
    facts: Facts,
    narrowing: Option<narrow::Report>,
    recompute: Option<remat::Report>,
    /// The unchunked plan, its passes covering narrowing and recomputation.
    out: Outcome,
}

/// The [`Prepared`] models of one [`fit_budget`], by whether narrowing and recomputation are on:
/// the fallbacks and descents refit the same levers with other chunk options, and each would
/// otherwise narrow, recompute and search the schedule again to the same result.
#[derive(Default)]
struct PreparedCache(Vec<((bool, bool), Prepared)>);

impl PreparedCache {
    fn get(
        &mut self,
        model: &Model,
        facts: &Facts,
        dims: &BTreeMap<String, i64>,
        opts: &FitOptions,
    ) -> Result<Prepared, FitError> {
        let key = (opts.narrow.is_some(), opts.recompute.is_some());
        if let Some((_, p)) = self.0.iter().find(|(k, _)| *k == key) {
            return Ok(p.clone());
        }
        let p = prepare(model, facts, dims, opts)?;
        self.0.push((key, p.clone()));
        Ok(p)
    }
}

/// Narrowing, then recomputation, as `opts` asks, then the unchunked plan: see [`Prepared`].
fn prepare(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    opts: &FitOptions,
) -> Result<Prepared, FitError> {
    let budget = opts.budget;
    let mut model = model.clone();
    let mut facts = facts.clone();
    let mut recompute = None;
    let mut rewrite_passes = Vec::new();
    let mut narrowing = None;
    let mut graph_order_peak = None;
    if let Some(no) = &opts.narrow {
        let n = narrow::narrow(&model, &facts, dims, budget, no)?;
        graph_order_peak = Some(n.report.peak_bytes_before);
        for s in &n.report.steps {
            rewrite_passes.push(Pass {
                name: format!(
                    "narrow '{}': {} stored as {} ({} -> {} bytes, widened for {} reader(s))",
                    s.value, s.dtype, s.stored_as, s.bytes, s.narrow_bytes, s.readers
                ),
                peak_bytes: s.peak_bytes,
            });
        }
        if !n.report.steps.is_empty() {
            model = n.model;
            facts = n.facts;
            narrowing = Some(n.report);
        }
    }
    if let Some(ro) = &opts.recompute {
        let r = remat::rematerialize(&model, &facts, dims, budget, ro)?;
        for (i, s) in r.report.steps.iter().enumerate() {
            rewrite_passes.push(Pass {
                name: format!(
                    "recompute {}: '{}' ({} bytes, {} node(s))",
                    i + 1,
                    s.value,
                    s.bytes,
                    s.nodes
                ),
                peak_bytes: s.peak_bytes,
            });
        }
        graph_order_peak.get_or_insert(r.report.peak_bytes_before);
        model = r.model;
        facts = r.facts;
        recompute = Some(r.report);
    }
    let mut out = optimize(&model.graph, &facts, dims, &opts.plan)?;
    if !rewrite_passes.is_empty() {
        // The passes start from the graph order of the model as given, then each rewrite.
        let before = graph_order_peak.unwrap_or(out.report.peak_bytes_before);
        let mut passes = vec![Pass {
            name: "graph order".into(),
            peak_bytes: before,
        }];
        passes.extend(rewrite_passes);
        passes.extend(out.report.passes.iter().skip(1).cloned());
        out.report.passes = passes;
        out.report.peak_bytes_before = before;
    }
    Ok(Prepared {
        model,
        facts,
        narrowing,
        recompute,
        out,
    })
}

/// [`fit_budget`] with the levers of `opts` as given; `descend`: see [`chunk_and_plan`]. The
/// narrowed and recomputed model and its unchunked plan come from `cache`.
fn fit_with(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    opts: &FitOptions,
    descend: Option<u64>,
    cache: &mut PreparedCache,
) -> Result<Fit, FitError> {
    let budget = opts.budget;
    let Prepared {
        model,
        facts,
        narrowing,
        recompute,
        out,
    } = cache.get(model, facts, dims, opts)?;
    if out.report.peak_bytes_after <= budget {
        return Ok(Fit {
            model,
            facts,
            outcome: out,
            fits: true,
            chunking: None,
            narrowing,
            recompute,
        });
    }
    let unchunked_seconds = opts
        .chunk
        .cost
        .plan_seconds(&model.graph, &facts, &out.plan);
    let (chunked, chunked_facts, o, summary) =
        chunk_and_fold(&model, dims, opts, unchunked_seconds, descend)?;
    // Passes: the original graph order (and recomputation), each chunking step, then the planner's
    // passes over the chunked graph (after its own graph order).
    let mut passes: Vec<Pass> = out
        .report
        .passes
        .iter()
        .take_while(|p| !p.name.starts_with("schedule"))
        .cloned()
        .collect();
    for (i, s) in summary.steps.iter().enumerate() {
        passes.push(Pass {
            name: format!(
                "chunk {}: {} nodes ({} .. {}) in {} chunks{}{}{}",
                i + 1,
                s.nodes,
                s.first,
                s.last,
                s.chunks,
                match s.siblings {
                    0 => String::new(),
                    n => format!(", and alike in {n} sibling chunks"),
                },
                match s.tiles {
                    0 => String::new(),
                    t => format!(
                        " of {t} tiles ({} nodes made again per chunk)",
                        s.recomputed_nodes
                    ),
                },
                match (s.scan, s.lanes) {
                    (false, _) => String::new(),
                    (true, 0 | 1) => ", as one Scan".into(),
                    (true, l) => format!(", as one Scan in {l} lanes"),
                }
            ),
            peak_bytes: s.peak_after,
        });
    }
    // Chunking that does not beat the unchunked plan is not kept.
    if o.report.peak_bytes_after >= out.report.peak_bytes_after {
        return Ok(Fit {
            model,
            facts,
            outcome: out,
            fits: false,
            chunking: Some(ChunkSummary {
                steps: Vec::new(),
                predicted_seconds: 0.0,
                ..summary
            }),
            narrowing,
            recompute,
        });
    }
    passes.extend(o.report.passes.iter().skip(1).cloned());
    let before = out.report.peak_bytes_before;
    let mut o = o;
    o.report.passes = passes;
    o.report.peak_bytes_before = before;
    Ok(Fit {
        fits: o.report.peak_bytes_after <= budget,
        model: chunked,
        facts: chunked_facts,
        outcome: o,
        chunking: Some(summary),
        narrowing,
        recompute,
    })
}

/// [`chunk_and_plan`], then [`fold_into_scans`] with `opts.scan_from`. When the folded bodies' lanes
/// missed the budget that one lane met, chunking runs once more to a target lower by what the lanes
/// add (more, smaller chunks, whose lanes then fit), and that fit is kept when it meets the budget
/// with its lanes.
fn chunk_and_fold(
    model: &Model,
    dims: &BTreeMap<String, i64>,
    opts: &FitOptions,
    unchunked_seconds: f64,
    descend: Option<u64>,
) -> Result<(Model, Facts, Outcome, ChunkSummary), FitError> {
    let (m, f, o, mut s) = chunk_and_plan(model, dims, opts, unchunked_seconds, descend)?;
    let Some(from) = opts.scan_from else {
        return Ok((m, f, o, s));
    };
    let (m, f, o, short) = fold_into_scans(m, f, o, &mut s, dims, opts, from)?;
    let Some(short) = short else {
        return Ok((m, f, o, s));
    };
    let lower = FitOptions {
        budget: opts.budget.saturating_sub(short),
        ..opts.clone()
    };
    let (m2, f2, o2, mut s2) = chunk_and_plan(model, dims, &lower, unchunked_seconds, descend)?;
    let (m2, f2, o2, _) = fold_into_scans(m2, f2, o2, &mut s2, dims, opts, from)?;
    let laned = s2.steps.iter().any(|st| st.lanes > 1);
    if laned && o2.report.peak_bytes_after <= opts.budget {
        s2.candidates += s.candidates;
        s2.rounds += s.rounds;
        return Ok((m2, f2, o2, s2));
    }
    Ok((m, f, o, s))
}

/// Folds every chunked region `from` selects into a `Scan` and plans the result, the bodies in
/// `from.lanes` lanes, or in one where that is what fits the budget or plans lower; keeps it when
/// its planned peak fits the budget or is no higher than the unrolled one's. Also returns, when
/// the lanes missed the budget that one lane met, the bytes they add to the peak.
fn fold_into_scans(
    model: Model,
    facts: Facts,
    outcome: Outcome,
    summary: &mut ChunkSummary,
    dims: &BTreeMap<String, i64>,
    opts: &FitOptions,
    from: ScanFrom,
) -> Result<(Model, Facts, Outcome, Option<u64>), FitError> {
    let fold: Vec<usize> = (0..summary.steps.len())
        .filter(|&i| {
            let s = &summary.steps[i];
            from.folds(s.chunks, s.added_nodes) && s.unrolled.as_ref().is_some_and(|u| u.foldable())
        })
        .collect();
    if fold.is_empty() {
        return Ok((model, facts, outcome, None));
    }
    let (mut m, mut f) = (model.clone(), facts.clone());
    let mut folded = Vec::new();
    for &i in &fold {
        let Some(u) = &summary.steps[i].unrolled else {
            continue;
        };
        if let Some(next) = crate::chunk::roll::roll(&m, &f, dims, u)? {
            m = next;
            f = memplan_ir::infer_model_for(&m, dims)
                .map_err(|e| FitError::Infer(e.to_string()))?;
            folded.push(i);
        }
    }
    if folded.is_empty() {
        return Ok((model, facts, outcome, None));
    }
    let laned = Options {
        lanes: from.lanes,
        ..opts.plan.clone()
    };
    let mut o = optimize(&m.graph, &f, dims, &laned)?;
    let (mut lanes, mut short) = (from.lanes, None);
    if lanes > 1 && o.report.peak_bytes_after > opts.budget {
        let one = optimize(&m.graph, &f, dims, &opts.plan)?;
        let (many, single) = (o.report.peak_bytes_after, one.report.peak_bytes_after);
        if single < many {
            if single <= opts.budget {
                short = Some(many - single);
            }
            (o, lanes) = (one, 1);
        }
    }
    let (was, now) = (outcome.report.peak_bytes_after, o.report.peak_bytes_after);
    if now <= opts.budget || now <= was {
        for &i in &folded {
            summary.steps[i].scan = true;
            summary.steps[i].lanes = lanes;
        }
        return Ok((m, f, o, short));
    }
    Ok((model, facts, outcome, None))
}

/// `model` chunked to `copts.budget` ([`chunk_to_budget_with`]), its facts and its plan. Where
/// a rewrite traded a copy for a split axis first (large slices as gathers, scatters of a box as
/// concatenations), the chunking without them is planned too, and the lower planned peak kept
/// (the faster by the cost model on a tie): the greedy steps after those rewrites do not always
/// end lower, and the simulated peaks chunking compares are not the planned
/// ones. `candidates` counts the candidates predicted.
fn chunked_and_planned(
    model: &Model,
    dims: &BTreeMap<String, i64>,
    copts: &ChunkOptions,
    opts: &FitOptions,
    candidates: &mut usize,
) -> Result<(crate::chunk::Chunked, Facts, Outcome), FitError> {
    let mut best: Option<(crate::chunk::Chunked, Facts, Outcome, f64)> = None;
    for trade in [true, false] {
        let (c, traded) = chunk_to_budget_with(model, dims, copts, trade)?;
        *candidates += c.evaluated;
        // The chunked model is pinned at `dims` (its declared dims are constants there), so these
        // are the facts a run of the written file infers: every size a constant, every `Concat`
        // the point proves assembled in place.
        let facts = memplan_ir::infer_model_for(&c.model, dims)
            .map_err(|e| FitError::Infer(e.to_string()))?;
        let out = optimize(&c.model.graph, &facts, dims, &opts.plan)?;
        let seconds = copts.cost.plan_seconds(&c.model.graph, &facts, &out.plan);
        let key = (out.report.peak_bytes_after, seconds);
        let lower = best.as_ref().is_none_or(|b| {
            key.0 < b.2.report.peak_bytes_after
                || (key.0 == b.2.report.peak_bytes_after && key.1 < b.3)
        });
        if lower {
            best = Some((c, facts, out, seconds));
        }
        if trade && !traded {
            break;
        }
    }
    let (c, facts, out, _) =
        best.ok_or_else(|| FitError::Infer("chunking made no attempt".into()))?;
    Ok((c, facts, out))
}

/// Chunk-then-plan rounds at most ([`chunk_and_plan`]), in a descent too.
const ROUNDS: usize = 3;

/// Chunks to a target and plans, then again to other targets ([`next_target`]) while the plan does
/// not fit ([`ROUNDS`] rounds at most); keeps the round with the lowest planned peak. With
/// `descend`, the lowest planned peak of a fit whose chunking stopped above its target: the rounds
/// ask for less than the lowest plan, from the first.
/// `unchunked_seconds`: the predicted run of `model` under its own plan
/// ([`CostModel::plan_seconds`](crate::cost::CostModel::plan_seconds)).
fn chunk_and_plan(
    model: &Model,
    dims: &BTreeMap<String, i64>,
    opts: &FitOptions,
    unchunked_seconds: f64,
    descend: Option<u64>,
) -> Result<(Model, Facts, Outcome, ChunkSummary), FitError> {
    let budget = opts.budget;
    let mut target = budget;
    let mut copts = opts.chunk.clone();
    let mut candidates = 0;
    let mut best: Option<(Model, Facts, Outcome, ChunkSummary)> = None;
    if let Some(lowest) = descend {
        // As after a round that stopped above the budget and planned `lowest`.
        let first = (budget, false, lowest, true);
        target = next_target(budget, first, lowest, true).unwrap_or(budget);
    }
    for round in 1..=ROUNDS {
        copts.budget = Some(target);
        let (c, facts, out) = chunked_and_planned(model, dims, &copts, opts, &mut candidates)?;
        let planned = out.report.peak_bytes_after;
        let summary = ChunkSummary {
            predicted_seconds: opts
                .chunk
                .cost
                .plan_seconds(&c.model.graph, &facts, &out.plan)
                - unchunked_seconds,
            simulated_peak_before: c.peak_before,
            simulated_peak_after: c.peak_after,
            candidates,
            rounds: round,
            live_at_peak: if planned > budget {
                c.live
                    .iter()
                    .take(8)
                    .map(|(name, bytes)| LiveTensor {
                        name: name.clone(),
                        bytes: *bytes,
                    })
                    .collect()
            } else {
                Vec::new()
            },
            steps: c.steps,
            per_reader: c.per_reader,
        };
        let reached = c.peak_after <= target;
        let lower_here = best
            .as_ref()
            .is_none_or(|b| planned < b.2.report.peak_bytes_after);
        // Lower than every round before, the plan a descent starts from included.
        let lower = lower_here && descend.is_none_or(|l| planned < l);
        if lower_here {
            best = Some((c.model, facts, out, summary));
        } else if let Some(b) = &mut best {
            b.3.candidates = candidates;
            b.3.rounds = round;
        }
        if planned <= budget {
            break;
        }
        let kept = best
            .as_ref()
            .map_or(planned, |b| b.2.report.peak_bytes_after);
        let lowest = descend.map_or(kept, |l| l.min(kept));
        let round = (target, reached, planned, lower);
        let Some(next) = next_target(budget, round, lowest, descend.is_some()) else {
            break;
        };
        target = next;
    }
    best.ok_or_else(|| FitError::Infer("chunking made no attempt".into()))
}

/// The chunking target of the next round, after a round to `target` that `reached` it (the
/// simulated peak within it) or not, planned `planned` bytes and planned `lower` than every round
/// before it or not; `lowest`: the lowest planned peak of the rounds so far (this one included);
/// `descend`: whether the rounds descend (second case below). `None`: no round is worth running.
///
/// - Chunking reached its target and the plan still misses the budget: the target is lowered by
///   the excess (the planner's peak and the simulated one differ by about that much).
/// - Chunking stopped above its target (every `lowest` round does): a lower target does not give
///   the greedy search another route, but a higher one does. Where candidates fit the target,
///   chunking takes the cheapest of them and stops when the peak fits; where none does, it takes
///   the lowest each time, and a region of many narrow chunks taken early can leave no progress
///   after it. So a descent asks for an eighth less than the lowest plan so far (halfway to the
///   budget where that is at or below it: the budget was tried), while each round plans lower.
fn next_target(
    budget: u64,
    (target, reached, planned, lower): (u64, bool, u64, bool),
    lowest: u64,
    descend: bool,
) -> Option<u64> {
    if reached && budget > 0 {
        let excess = planned - budget;
        return (excess < target).then(|| target - excess);
    }
    if !descend || !lower {
        return None;
    }
    let next = lowest - lowest / 8;
    let next = if next <= budget {
        budget + (lowest - budget) / 2
    } else {
        next
    };
    (next > budget && next != target).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen;

    /// The targets of the rounds: lowered by the excess while chunking reaches them; where it stops
    /// above them, only in a descent, an eighth below the lowest plan while rounds plan lower,
    /// never at or below the budget, and never the target just tried.
    #[test]
    fn rounds_ask_for_less_than_the_lowest_plan_where_chunking_stops_above_its_target() {
        // In MiB: the budget, the round (target, reached, planned, lower), the lowest plan.
        const MIB: u64 = 1 << 20;
        type Round = (u64, bool, u64, bool);
        fn next(budget: u64, (t, r, p, l): Round, low: u64, descend: bool) -> Option<u64> {
            next_target(budget * MIB, (t * MIB, r, p * MIB, l), low * MIB, descend).map(|x| x / MIB)
        }
        // Chunking reached 100, the plan is 10 over a budget of 100: ask for 90, descent or not.
        assert_eq!(next(100, (100, true, 110, true), 110, true), Some(90));
        assert_eq!(next(100, (100, true, 110, true), 110, false), Some(90));
        // Stopped above the target: nothing more without a descent.
        assert_eq!(next(100, (100, false, 128, true), 128, false), None);
        // `lowest` (budget 0): an eighth below the lowest plan, again after a lower round, and
        // no more after a round that plans no lower.
        assert_eq!(next(0, (0, false, 128, true), 128, true), Some(112));
        assert_eq!(next(0, (112, true, 96, true), 96, true), Some(84));
        assert_eq!(next(0, (84, false, 99, false), 96, true), None);
        // A budget less than an eighth below the lowest plan: halfway to it instead, not twice.
        assert_eq!(next(120, (120, false, 128, true), 128, true), Some(124));
        assert_eq!(next(120, (124, false, 126, true), 126, true), Some(123));
        assert_eq!(next(120, (123, false, 127, false), 126, true), None);
    }

    /// On random graphs: a plan fits exactly when its planned peak is within the budget, the plan
    /// has passed the checker against the returned model's facts, and a rerun gives the same plan.
    #[test]
    fn fit_is_checked_deterministic_and_says_whether_it_fits() {
        let (mut tested, mut chunked, mut descended) = (0, 0, 0);
        for seed in 0..40u64 {
            let rg = gen::random_graph(&mut gen::SplitMix(seed), 24);
            let dims = rg.dims;
            let model = Model {
                graph: rg.graph,
                ..Model::default()
            };
            let Ok(facts) = memplan_ir::infer_model(&model) else {
                continue;
            };
            let plain = optimize(&model.graph, &facts, &dims, &Options::default()).unwrap();
            let budget = plain.report.peak_bytes_after * 3 / 4;
            let opts = FitOptions::new(budget);
            let a = fit_budget(&model, &facts, &dims, &opts).unwrap();
            let b = fit_budget(&model, &facts, &dims, &opts).unwrap();
            assert_eq!(
                a.outcome.plan.to_json(),
                b.outcome.plan.to_json(),
                "seed {seed}"
            );
            assert_eq!(a.fits, a.outcome.report.peak_bytes_after <= budget);
            assert!(a.outcome.report.peak_bytes_after <= plain.report.peak_bytes_after);
            // The predicted extra time is the returned plan's run less the unchunked plan's
            // (zero when nothing was kept).
            if let Some(c) = a.chunking.as_ref().filter(|_| a.narrowing.is_none()) {
                let cost = &opts.chunk.cost;
                let want = cost.plan_seconds(&a.model.graph, &a.facts, &a.outcome.plan)
                    - cost.plan_seconds(&model.graph, &facts, &plain.plan);
                assert!(
                    (c.predicted_seconds - want).abs() <= 1e-9,
                    "seed {seed}: {} vs {want}",
                    c.predicted_seconds
                );
                chunked += usize::from(!c.steps.is_empty());
            }
            crate::check(&a.model.graph, &a.facts, &a.outcome.plan).unwrap();
            // `lowest` (a budget of 0) is never met: after the fits of every lever, a descent
            // runs rounds below the best plan, and its report counts them.
            let low = fit_budget(&model, &facts, &dims, &FitOptions::new(0)).unwrap();
            if let Some(c) = low.chunking.as_ref().filter(|c| !c.steps.is_empty()) {
                assert!(c.rounds >= 2, "seed {seed}: {} round(s)", c.rounds);
                descended += 1;
            }
            crate::check(&low.model.graph, &low.facts, &low.outcome.plan).unwrap();
            tested += 1;
        }
        assert!(tested >= 20, "only {tested} random models");
        assert!(chunked > 0, "no random model was chunked");
        assert!(descended > 0, "no random model was chunked to `lowest`");
    }
}
