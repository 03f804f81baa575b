//! The estimate report: peak at given dims, where it is, what is live there, the breakdown, the
//! arena size, the symbolic formula and budget answers. Library entry point of `memplan estimate`.

use std::collections::BTreeMap;

use memplan_ir::graph::{Graph, NodeId};
use memplan_ir::infer::{fmt_shape, Facts};

use crate::formula::{MaxFit, PeakFormula};
use crate::peak::{concrete_peak, Breakdown};
use crate::place::place_best_fit;
use crate::timeline::{Category, SimError, Timeline};

/// One buffer live at the peak.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LiveTensor {
    pub name: String,
    pub shape: String,
    pub dtype: String,
    pub bytes: u64,
    pub category: String,
    /// The node that made it (`name (Op)`), or `null` for weights and inputs.
    pub producer: Option<String>,
    pub last_consumer: Option<String>,
}

/// The symbolic peak.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FormulaReport {
    /// The dominant regime's live bytes as an expression of the symbols.
    pub dominant: String,
    /// The dominant regime holds when every free symbol is at least this.
    pub valid_from: i64,
    pub free_symbols: Vec<String>,
    /// Node where the dominant regime's peak sits.
    pub node: String,
    /// Number of distinct regimes (per-step live sums not provably dominated) in the exact max.
    pub regimes: usize,
}

/// Largest value of a symbol that fits a budget.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct MaxFitting {
    pub symbol: String,
    /// `null` when even 1 does not fit.
    pub value: Option<i64>,
    /// True when the peak does not grow with the symbol (fits up to 2^40).
    pub unbounded: bool,
}

/// The whole estimate at one point.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Estimate {
    pub dims: BTreeMap<String, i64>,
    pub peak_bytes: u64,
    pub arena_bytes: u64,
    /// Arena bytes over the liveness peak of the arena's buffers, minus 1.
    pub fragmentation: f64,
    pub peak_step: Option<usize>,
    pub peak_node: Option<String>,
    pub steps: usize,
    pub live_at_peak: Vec<LiveTensor>,
    pub breakdown: Breakdown,
    pub formula: Option<FormulaReport>,
    pub budget_bytes: Option<u64>,
    pub fits: Option<bool>,
    pub max_fitting: Option<MaxFitting>,
    /// Live bytes per step (for plots).
    #[serde(skip)]
    pub per_step: Vec<u64>,
    /// The largest non-resident buffers with their lifetimes (for plots), largest first.
    #[serde(skip)]
    pub bands: Vec<Band>,
}

/// A buffer's lifetime, for plotting.
#[derive(Clone, Debug, PartialEq)]
pub struct Band {
    pub name: String,
    pub bytes: u64,
    pub from: usize,
    /// Last live step (inclusive).
    pub to: usize,
}

/// How many bands an estimate keeps.
pub const BANDS: usize = 6;

fn node_label(g: &Graph, n: NodeId) -> String {
    let node = g.node(n);
    if node.name.is_empty() {
        format!("#{} ({})", n.0, node.op)
    } else {
        format!("{} ({})", node.name, node.op)
    }
}

/// Options of an estimate.
#[derive(Clone, Debug, Default)]
pub struct EstimateOptions {
    pub budget: Option<u64>,
    /// Symbol to solve for when a budget is given; defaults to the only free symbol, or the first.
    pub solve_for: Option<String>,
    /// Entries of the live set to report (largest first); 0 means all.
    pub live_limit: usize,
}

/// Builds the estimate of `graph` over `schedule` at `dims`.
pub fn estimate(
    graph: &Graph,
    facts: &Facts,
    schedule: &[NodeId],
    dims: &BTreeMap<String, i64>,
    opts: &EstimateOptions,
) -> Result<Estimate, SimError> {
    let t = Timeline::build(graph, facts, schedule)?;
    let cp = concrete_peak(&t, dims)?;
    let placement = place_best_fit(&t, &cp.sizes);
    let arena_live: u64 = {
        let mut per = vec![0u64; t.steps()];
        for (b, &sz) in t.buffers.iter().zip(&cp.sizes) {
            if let Some(a) = b.alloc {
                for x in per.iter_mut().take(b.last.map_or(t.steps(), |l| l + 1)).skip(a) {
                    *x += sz;
                }
            }
        }
        per.into_iter().max().unwrap_or(0)
    };
    let fragmentation =
        if arena_live == 0 { 0.0 } else { placement.arena_bytes as f64 / arena_live as f64 - 1.0 };

    let mut live: Vec<LiveTensor> = Vec::new();
    for e in &cp.live {
        let b = &t.buffers[e.buf.0 as usize];
        let (name, shape, dtype) = match b.value {
            Some(v) => {
                let f = facts.get(v);
                (
                    graph.value(v).name.clone(),
                    f.shape.as_deref().map(fmt_shape).unwrap_or_else(|| "?".into()),
                    f.dtype.map(|d| d.onnx_name().to_string()).unwrap_or_else(|| "?".into()),
                )
            }
            None => ("(scratch)".to_string(), String::new(), String::new()),
        };
        live.push(LiveTensor {
            name,
            shape,
            dtype,
            bytes: e.bytes,
            category: b.category.name().to_string(),
            producer: b.producer.map(|n| node_label(graph, n)),
            last_consumer: b.last_reader.map(|n| node_label(graph, n)),
        });
    }
    if opts.live_limit > 0 {
        live.truncate(opts.live_limit);
    }

    let pf = PeakFormula::new(&t);
    let free: Vec<String> = pf.symbols();
    let formula = if free.is_empty() {
        None
    } else {
        // The dominant regime as every symbol grows together from the given point.
        let fixed: BTreeMap<String, i64> = BTreeMap::new();
        pf.dominant(&free, &fixed)?.map(|d| FormulaReport {
            dominant: d.expr.to_string(),
            valid_from: d.from,
            free_symbols: free.clone(),
            node: node_label(graph, t.schedule[d.step]),
            regimes: pf.candidates.len(),
        })
    };

    let mut fits = None;
    let mut max_fitting = None;
    if let Some(budget) = opts.budget {
        fits = Some(cp.peak_bytes <= budget);
        let sym = opts.solve_for.clone().or_else(|| free.first().cloned());
        if let Some(sym) = sym {
            let mut fixed = dims.clone();
            fixed.remove(&sym);
            let peak_at = |env: &BTreeMap<String, i64>| -> Result<u64, SimError> {
                Ok(pf.eval(env)?.0.max(0) as u64)
            };
            let r = pf.max_fitting(&sym, &fixed, budget, &peak_at)?;
            max_fitting = Some(match r {
                MaxFit::Value(v) => MaxFitting { symbol: sym, value: Some(v), unbounded: false },
                MaxFit::None => MaxFitting { symbol: sym, value: None, unbounded: false },
                MaxFit::Unbounded => MaxFitting { symbol: sym, value: None, unbounded: true },
            });
        }
    }

    let mut bands: Vec<Band> = t
        .buffers
        .iter()
        .zip(&cp.sizes)
        .filter_map(|(b, &sz)| {
            let from = b.alloc?;
            let name = match b.value {
                Some(v) => graph.value(v).name.clone(),
                None => format!("scratch of {}", b.producer.map(|n| node_label(graph, n)).unwrap_or_default()),
            };
            Some(Band { name, bytes: sz, from, to: b.last.unwrap_or(t.steps().saturating_sub(1)) })
        })
        .collect();
    bands.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.from.cmp(&b.from)));
    bands.truncate(BANDS);

    Ok(Estimate {
        dims: dims.clone(),
        peak_bytes: cp.peak_bytes,
        arena_bytes: placement.arena_bytes,
        fragmentation,
        peak_step: cp.peak_step,
        peak_node: cp.peak_step.map(|s| node_label(graph, t.schedule[s])),
        steps: t.steps(),
        live_at_peak: live,
        breakdown: cp.breakdown,
        formula,
        budget_bytes: opts.budget,
        fits,
        max_fitting,
        per_step: cp.per_step,
        bands,
    })
}

/// Category of a live tensor, for callers that group by it.
pub fn category_names() -> [&'static str; 5] {
    [
        Category::Weight.name(),
        Category::Input.name(),
        Category::Activation.name(),
        Category::Output.name(),
        Category::Scratch.name(),
    ]
}
