//! The estimate report: peak at given dims, where it is, what is live there, the breakdown, the
//! arena size, the symbolic formula and budget answers. Library entry point of `memplan estimate`.
//!
//! [`Analysis`] holds what does not depend on the dims (the timeline and the exact peak formula), so a
//! sweep builds it once and evaluates it at many points.

use std::collections::BTreeMap;

use memplan_ir::graph::{Graph, NodeId};
use memplan_ir::infer::{fmt_shape, Facts};
use memplan_ir::Expr;

use crate::formula::{Dominant, MaxFit, PeakFormula};
use crate::peak::{concrete_peak_with_sizes, eval_sizes, Breakdown};
use crate::place::place_best_fit;
use crate::timeline::{Category, SimError, Timeline};

/// One buffer live at the peak.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LiveTensor {
    pub name: String,
    /// Concrete dims at the estimate's point; empty for scratch.
    pub shape: Vec<i64>,
    /// The symbolic shape, e.g. `[B, 4, S, S]`.
    pub symbolic_shape: String,
    pub dtype: String,
    pub bytes: u64,
    pub category: String,
    /// The node that made it (`name (Op)`), or `null` for weights and inputs.
    pub producer: Option<String>,
    /// The last node to read it; `null` when nothing reads it (or, for scratch, its own node).
    pub last_consumer: Option<String>,
}

/// The symbolic peak along one symbol.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FormulaReport {
    /// The symbol grown (the others fixed at the estimate's dims).
    pub symbol: String,
    /// `peak ≈ 772·N² + 25 KiB (for N ≥ 1)`: the dominant regime along `symbol`, readable.
    pub text: String,
    /// The dominant regime's live bytes, exact, in every symbol.
    pub dominant: String,
    /// The same with the other symbols fixed: a function of `symbol` only.
    pub along: String,
    /// The dominant regime is the peak for every `symbol >= valid_from`.
    pub valid_from: i64,
    /// True when `valid_from` was derived exactly, false when sampled (non-polynomial sizes).
    pub exact: bool,
    /// Node where the dominant regime's peak sits.
    pub node: String,
    pub step: usize,
    /// Every symbol the peak depends on.
    pub free_symbols: Vec<String>,
    /// Distinct per-step sums in the exact `peak = max(...)`.
    pub regimes: usize,
}

/// Largest value of a symbol that fits a budget.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct MaxFitting {
    pub symbol: String,
    /// `null` when even 1 does not fit, or when every value up to 2^40 fits (`unbounded`).
    pub value: Option<i64>,
    /// True when the peak stays within the budget up to 2^40.
    pub unbounded: bool,
    /// The peak at `value` (fits) and at `value + 1` (does not), as evaluated.
    pub peak_at_value: Option<u64>,
    pub peak_at_next: Option<u64>,
    /// Set when the model does not type-check at `value + 1` (the node and the rule broken): the
    /// peak formula holds only for inputs the model accepts, so the value stops there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub type_error_above: Option<String>,
}

/// The whole estimate at one point.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Estimate {
    pub dims: BTreeMap<String, i64>,
    pub peak_bytes: u64,
    /// Best-fit placed arena of the non-resident buffers (activations, outputs, scratch).
    pub arena_bytes: u64,
    /// Liveness peak of the arena's buffers: the lower bound any placement can reach.
    pub arena_lower_bound: u64,
    /// `arena_bytes / arena_lower_bound - 1`.
    pub fragmentation: f64,
    /// Weights and graph inputs, held for the whole run (outside the arena).
    pub resident_bytes: u64,
    /// `resident_bytes + arena_bytes`: the memory a run with this placement holds at its peak.
    pub placed_total_bytes: u64,
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
    /// The largest non-resident buffers live at the peak, largest first, then the largest others,
    /// with their lifetimes (for plots).
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

/// `name (Op)`, or `#index (Op)` for an unnamed node.
pub fn node_label(g: &Graph, n: NodeId) -> String {
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
    /// Symbol to grow for the formula and to solve for with a budget; defaults to the symbol the peak
    /// grows fastest with.
    pub solve_for: Option<String>,
    /// Entries of the live set to report (largest first); 0 means all.
    pub live_limit: usize,
    /// Skip the formula (sweeps evaluate it once, not per row).
    pub no_formula: bool,
}

/// The dims-independent part of an estimate: lifetimes and the exact peak formula.
#[derive(Clone, Debug)]
pub struct Analysis<'g> {
    pub graph: &'g Graph,
    pub facts: &'g Facts,
    pub timeline: Timeline,
    pub formula: PeakFormula,
}

impl<'g> Analysis<'g> {
    pub fn new(
        graph: &'g Graph,
        facts: &'g Facts,
        schedule: &[NodeId],
    ) -> Result<Analysis<'g>, SimError> {
        let timeline = Timeline::build(graph, facts, schedule)?;
        let formula = PeakFormula::new(&timeline);
        Ok(Analysis {
            graph,
            facts,
            timeline,
            formula,
        })
    }

    /// Symbols the peak depends on, sorted.
    pub fn symbols(&self) -> Vec<String> {
        self.formula.symbols()
    }

    /// The symbol to grow/solve for: `preferred` if given, else the one the peak grows fastest with.
    pub fn primary_symbol(&self, preferred: Option<&str>) -> Option<String> {
        if let Some(p) = preferred {
            return Some(p.to_string());
        }
        self.formula.primary_symbol(&self.facts.symbols.declared)
    }

    /// The concrete peak at `dims` by simulation (independent of the formula); `None` when a size
    /// overflows `i64`.
    pub fn simulate_peak(&self, dims: &BTreeMap<String, i64>) -> Result<Option<u64>, SimError> {
        match eval_sizes(&self.timeline, dims) {
            Ok(sizes) => Ok(Some(
                concrete_peak_with_sizes(&self.timeline, sizes).peak_bytes,
            )),
            Err(SimError::Eval(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The dominant regime along `sym`, the other symbols fixed by `dims`.
    pub fn formula_report(
        &self,
        sym: &str,
        dims: &BTreeMap<String, i64>,
    ) -> Result<Option<FormulaReport>, SimError> {
        let Some(d) = self.formula.dominant(sym, dims)? else {
            return Ok(None);
        };
        Ok(Some(self.report_of(sym, &d)))
    }

    fn report_of(&self, sym: &str, d: &Dominant) -> FormulaReport {
        let text = format!(
            "peak ≈ {} (for {sym} ≥ {})",
            pretty_bytes_expr(&d.along),
            d.from
        );
        FormulaReport {
            symbol: sym.to_string(),
            text,
            dominant: d.expr.to_string(),
            along: d.along.to_string(),
            valid_from: d.from,
            exact: d.exact,
            node: node_label(self.graph, self.timeline.schedule[d.step]),
            step: d.step,
            free_symbols: self.symbols(),
            regimes: self.formula.candidates.len(),
        }
    }

    /// The largest value of `sym` whose peak fits `budget` (other symbols fixed by `dims`).
    pub fn max_fitting(
        &self,
        sym: &str,
        dims: &BTreeMap<String, i64>,
        budget: u64,
    ) -> Result<MaxFitting, SimError> {
        let confirm = |env: &BTreeMap<String, i64>| self.simulate_peak(env);
        let r = self.formula.max_fitting(sym, dims, budget, &confirm)?;
        let at = |x: i64| -> Result<Option<u64>, SimError> {
            let mut env = dims.clone();
            env.insert(sym.to_string(), x);
            self.simulate_peak(&env)
        };
        Ok(match r {
            MaxFit::Value(v) => MaxFitting {
                symbol: sym.to_string(),
                value: Some(v),
                unbounded: false,
                peak_at_value: at(v)?,
                peak_at_next: at(v + 1)?,
                type_error_above: None,
            },
            MaxFit::None => MaxFitting {
                symbol: sym.to_string(),
                value: None,
                unbounded: false,
                peak_at_value: None,
                peak_at_next: at(1)?,
                type_error_above: None,
            },
            MaxFit::Unbounded => MaxFitting {
                symbol: sym.to_string(),
                value: None,
                unbounded: true,
                peak_at_value: None,
                peak_at_next: None,
                type_error_above: None,
            },
        })
    }

    /// The estimate at `dims`.
    pub fn at(
        &self,
        dims: &BTreeMap<String, i64>,
        opts: &EstimateOptions,
    ) -> Result<Estimate, SimError> {
        let (graph, facts, t) = (self.graph, self.facts, &self.timeline);
        let sizes = eval_sizes(t, dims)?;
        let cp = concrete_peak_with_sizes(t, sizes);
        let placement = place_best_fit(t, &cp.sizes);
        let arena_live = cp
            .per_step
            .iter()
            .map(|&v| v.saturating_sub(cp.resident))
            .max()
            .unwrap_or(0);
        let fragmentation = if arena_live == 0 {
            0.0
        } else {
            placement.arena_bytes as f64 / arena_live as f64 - 1.0
        };

        let mut live: Vec<LiveTensor> = Vec::new();
        for e in &cp.live {
            let b = &t.buffers[e.buf.0 as usize];
            let (name, shape, symbolic_shape, dtype) = match b.value {
                Some(v) => {
                    let f = facts.get(v);
                    let shape = f
                        .shape
                        .as_deref()
                        .map(|s| s.iter().map(|d| d.eval_map(dims).unwrap_or(-1)).collect())
                        .unwrap_or_default();
                    (
                        graph.value(v).name.clone(),
                        shape,
                        f.shape
                            .as_deref()
                            .map(fmt_shape)
                            .unwrap_or_else(|| "?".into()),
                        f.dtype
                            .map(|d| d.onnx_name().to_string())
                            .unwrap_or_else(|| "?".into()),
                    )
                }
                None => (
                    "(scratch)".to_string(),
                    Vec::new(),
                    String::new(),
                    String::new(),
                ),
            };
            live.push(LiveTensor {
                name,
                shape,
                symbolic_shape,
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

        let primary = self.primary_symbol(opts.solve_for.as_deref());
        let formula = match (&primary, opts.no_formula) {
            (Some(sym), false) => self.formula_report(sym, dims)?,
            _ => None,
        };
        let mut fits = None;
        let mut max_fitting = None;
        if let Some(budget) = opts.budget {
            fits = Some(cp.peak_bytes <= budget);
            if let (Some(sym), false) = (&primary, opts.no_formula) {
                max_fitting = Some(self.max_fitting(sym, dims, budget)?);
            }
        }

        // Bands: the largest non-resident buffers live at the peak, then the largest others.
        let band_of = |i: usize| -> Option<Band> {
            let b = &t.buffers[i];
            let from = b.alloc?;
            let name = match b.value {
                Some(v) => graph.value(v).name.clone(),
                None => format!(
                    "scratch of {}",
                    b.producer.map(|n| node_label(graph, n)).unwrap_or_default()
                ),
            };
            Some(Band {
                name,
                bytes: cp.sizes[i],
                from,
                to: b.last.unwrap_or(t.steps().saturating_sub(1)),
            })
        };
        let mut bands: Vec<Band> = cp
            .live
            .iter()
            .filter_map(|l| band_of(l.buf.0 as usize))
            .take(BANDS)
            .collect();
        if bands.len() < BANDS {
            let at_peak: std::collections::BTreeSet<usize> =
                cp.live.iter().map(|l| l.buf.0 as usize).collect();
            let mut rest: Vec<Band> = (0..t.buffers.len())
                .filter(|i| !at_peak.contains(i))
                .filter_map(band_of)
                .collect();
            rest.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.from.cmp(&b.from)));
            bands.extend(rest.into_iter().take(BANDS - bands.len()));
        }

        Ok(Estimate {
            dims: dims.clone(),
            peak_bytes: cp.peak_bytes,
            arena_bytes: placement.arena_bytes,
            arena_lower_bound: arena_live,
            fragmentation,
            resident_bytes: cp.resident,
            placed_total_bytes: cp.resident + placement.arena_bytes,
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
}

/// Builds the estimate of `graph` over `schedule` at `dims`.
pub fn estimate(
    graph: &Graph,
    facts: &Facts,
    schedule: &[NodeId],
    dims: &BTreeMap<String, i64>,
    opts: &EstimateOptions,
) -> Result<Estimate, SimError> {
    Analysis::new(graph, facts, schedule)?.at(dims, opts)
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

/// `1.50 GiB` style rendering with binary units (exact bytes below 1 KiB).
pub fn human_bytes(bytes: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        let s = format!("{v:.2}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        format!("{s} {}", U[i])
    }
}

fn superscript(p: u32) -> String {
    const D: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];
    if p == 1 {
        return String::new();
    }
    p.to_string()
        .chars()
        .map(|c| D[c.to_digit(10).unwrap_or(0) as usize])
        .collect()
}

/// A byte-count expression for people: `772·N² + 2.5 KiB·N + 25 KiB`. Coefficients of 1 KiB or more
/// and the constant term are shown in binary units (rounded); smaller coefficients exactly.
pub fn pretty_bytes_expr(e: &Expr) -> String {
    let terms = e.terms();
    if terms.is_empty() {
        return "0 B".into();
    }
    let mut out = String::new();
    for (i, t) in terms.iter().enumerate() {
        let neg = t.coeff < 0;
        let mag = t.coeff.unsigned_abs();
        if i == 0 {
            if neg {
                out.push('-');
            }
        } else {
            out.push_str(if neg { " - " } else { " + " });
        }
        let factors: Vec<String> = t
            .factors
            .iter()
            .map(|(a, p)| match a {
                memplan_ir::dim::Atom::Sym(s) => format!("{s}{}", superscript(*p)),
                other => format!("({}){}", other.to_expr(), superscript(*p)),
            })
            .collect();
        if factors.is_empty() {
            out.push_str(&human_bytes(mag));
        } else {
            let coeff = if mag >= 1024 {
                human_bytes(mag)
            } else {
                mag.to_string()
            };
            if mag != 1 {
                out.push_str(&coeff);
                out.push('·');
            }
            out.push_str(&factors.join("·"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_expressions() {
        let n = Expr::sym("N");
        let e = &(&n * &n) * 772 + 25 * 1024;
        assert_eq!(pretty_bytes_expr(&e), "772·N² + 25 KiB");
        let s = Expr::sym("S");
        let e = &(&s * &s) * 4096 + &s * 3 + 1_500_000;
        assert_eq!(pretty_bytes_expr(&e), "4 KiB·S² + 3·S + 1.43 MiB");
        assert_eq!(pretty_bytes_expr(&Expr::int(0)), "0 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(1023), "1023 B");
    }
}
