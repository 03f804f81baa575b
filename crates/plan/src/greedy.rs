//! The greedy loop shared by the graph rewrites under a budget ([`crate::remat`],
//! [`crate::narrow`]): while the graph-order peak exceeds the budget, keep the best rewrite a round
//! proposes; bounded by rounds, not time.

use std::collections::BTreeMap;

use memplan_ir::graph::Model;
use memplan_ir::infer::{infer_model_for, Facts};
use memplan_sim::peak::concrete_peak;
use memplan_sim::{ConcretePeak, SimError, Timeline};

/// The graph-order timeline of `model` and its peak at `dims`: what each round's candidates are
/// found in and scored by.
pub(crate) fn simulate(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> Result<(Timeline, ConcretePeak), SimError> {
    let t = Timeline::build(&model.graph, facts, &facts.order)?;
    let p = concrete_peak(&t, dims)?;
    Ok((t, p))
}

/// A round's best rewrite: the graph-order peak after it, the model and its facts (carried over by
/// hand), and what it did.
pub(crate) type Proposal<S> = (u64, Model, Facts, S);

/// The rewritten model, its facts, its graph-order peak and the rewrites kept.
pub(crate) struct Rewritten<S> {
    pub model: Model,
    pub facts: Facts,
    pub peak: u64,
    pub steps: Vec<S>,
}

/// From `model`, whose graph-order peak is `before`: while the peak exceeds `budget` and fewer
/// than `max_rounds` rewrites were kept, `propose` gives the best rewrite of the current model (at
/// its current peak), or `None` to stop. The final model's facts are inferred again at `dims`,
/// which checks those carried through the rounds.
#[allow(clippy::too_many_arguments)]
pub(crate) fn greedy<S, E>(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    before: u64,
    budget: u64,
    max_rounds: usize,
    mut propose: impl FnMut(&Model, &Facts, u64) -> Result<Option<Proposal<S>>, E>,
    infer_error: impl Fn(String) -> E,
) -> Result<Rewritten<S>, E> {
    let mut model = model.clone();
    let mut facts = facts.clone();
    let mut peak = before;
    let mut steps = Vec::new();
    for _ in 0..max_rounds {
        if peak <= budget {
            break;
        }
        let Some((p2, m2, f2, step)) = propose(&model, &facts, peak)? else {
            break;
        };
        model = m2;
        facts = f2;
        peak = p2;
        steps.push(step);
    }
    if !steps.is_empty() {
        facts = infer_model_for(&model, dims).map_err(|e| infer_error(e.to_string()))?;
    }
    Ok(Rewritten {
        model,
        facts,
        peak,
        steps,
    })
}
