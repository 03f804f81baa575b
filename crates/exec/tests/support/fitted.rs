//! One property of chunked plans, shared by `chunk_random.rs` and the `plan` fuzz target (which
//! includes this file by path): a random DAG of the planner's generator (`memplan_plan::gen`),
//! fitted to half its peak by `memplan_plan::fit_budget` (chunking, then planning), runs from its
//! checked plan with the same output bits as the plain run of the original graph, and the measured
//! peak is the planned one, and not below `memplan_plan::floor`. The generator's 0/1 masks
//! (`Cast(Greater(x, 0))`) make narrowing part of the property. The fitted plan is then offloaded
//! to a device budget below it (`memplan_plan::offload`): the offloaded run's device tier is the
//! planned one, its host tier holds what the plan says, it makes every planned copy (on the copier
//! thread beside the compute, or synchronously), and its outputs are the same bits. Every chunked
//! region whose leading chunks have one width, folded into a `Scan` (`memplan_plan::chunk::roll`;
//! `N` is 50, so a shorter last chunk often stays unrolled), runs to the same bits from its own
//! plan, its Scans' bodies from plans of their own, measured peak = planned.

use std::collections::BTreeMap;

use memplan_exec::{run, run_planned, RunOptions, Tensor};
use memplan_ir::graph::{DeclDim, Model};
use memplan_plan::gen::{random_graph, Entropy};
use memplan_plan::{fit_budget, FitOptions};

/// Rows of the inputs (the symbol `N`): not a power of two, so most chunk counts leave a shorter
/// last chunk.
pub const ROWS: i64 = 50;

/// Every input (`[N or 1, C]`) filled with distinct values of both signs.
pub fn inputs(model: &Model) -> BTreeMap<String, Tensor> {
    let g = &model.graph;
    g.inputs
        .iter()
        .enumerate()
        .map(|(k, &v)| {
            let (_, dims) = g.value(v).decl.as_ref().unwrap().as_tensor().unwrap();
            let shape: Vec<usize> = dims
                .unwrap()
                .iter()
                .map(|d| match d.dim {
                    DeclDim::Value(c) => c as usize,
                    _ => ROWS as usize,
                })
                .collect();
            let vals: Vec<f32> = (0..shape.iter().product::<usize>())
                .map(|i| (((i + 31 * k) * 7919) % 201) as f32 / 50.0 - 2.0)
                .collect();
            let t = Tensor::from_vec(&shape, &vals, None).unwrap();
            (g.value(v).name.clone(), t)
        })
        .collect()
}

pub fn bits(outs: &[(String, Tensor)]) -> BTreeMap<String, Vec<u8>> {
    outs.iter()
        .map(|(n, t)| (n.clone(), t.bytes().to_vec()))
        .collect()
}

/// Which levers a fitted graph used.
#[derive(Clone, Copy, Debug, Default)]
pub struct Levers {
    pub chunked: bool,
    pub narrowed: bool,
    pub offloaded: bool,
    pub folded: bool,
    /// A region folded with a shorter last chunk left unrolled.
    pub folded_tail: bool,
}

/// Checks one random graph drawn from `e`, and says which levers the fit used.
pub fn check_fitted(e: &mut impl Entropy, max_nodes: usize) -> Result<Levers, String> {
    let dims = BTreeMap::from([("N".to_string(), ROWS)]);
    let model = Model {
        graph: random_graph(e, max_nodes).graph,
        ..Model::default()
    };
    let facts = memplan_ir::infer_graph(&model.graph, 18).map_err(|e| format!("infer: {e}"))?;
    let plain = run(&model.graph, &facts, inputs(&model), &RunOptions::default())
        .map_err(|e| format!("plain run: {e}"))?;
    let budget = plain.resident_bytes + (plain.peak_bytes - plain.resident_bytes) / 2;
    let fit = fit_budget(&model, &facts, &dims, &FitOptions::new(budget))
        .map_err(|e| format!("fit_budget: {e}"))?;
    let planned = run_planned(
        &fit.model.graph,
        &fit.facts,
        inputs(&model),
        &fit.outcome.plan,
        18,
    )
    .map_err(|e| format!("planned run: {e}"))?;
    if bits(&planned.outputs) != bits(&plain.outputs) {
        return Err("the fitted graph's outputs differ from the original's".into());
    }
    if planned.peak_bytes != fit.outcome.report.peak_bytes_after {
        return Err(format!(
            "measured peak {} != planned peak {}",
            planned.peak_bytes, fit.outcome.report.peak_bytes_after
        ));
    }
    // The floor is a lower bound on every plan, the fitted one included.
    let floor = memplan_plan::floor(&model.graph, &facts, &dims)
        .map_err(|e| format!("floor: {e}"))?
        .bytes;
    if floor > planned.peak_bytes {
        return Err(format!(
            "the floor {floor} is above the planned peak {}",
            planned.peak_bytes
        ));
    }
    // Offload to a device budget below the fitted plan: the device tier measured is the planned
    // one, the host tier holds what the plan says, outputs unchanged.
    let device_budget = planned.resident_bytes
        + (fit.outcome.report.peak_bytes_after - planned.resident_bytes) * 3 / 4;
    let (plan, rep) = memplan_plan::offload::offload(
        &fit.model.graph,
        &fit.facts,
        &fit.outcome.plan,
        device_budget,
        memplan_plan::offload::DEFAULT_BANDWIDTH,
    )
    .map_err(|e| format!("offload: {e}"))?;
    let moved = !rep.moved.is_empty();
    if moved {
        let off = run_planned(&fit.model.graph, &fit.facts, inputs(&model), &plan, 18)
            .map_err(|e| format!("offloaded run: {e}"))?;
        if bits(&off.outputs) != bits(&plain.outputs) {
            return Err("the offloaded plan's outputs differ from the original's".into());
        }
        let r = off
            .plan
            .as_ref()
            .ok_or("an offloaded run reports its plan")?;
        if off.peak_bytes != rep.device_peak_after || r.host_peak_bytes != plan.host_bytes {
            return Err(format!(
                "device tier measured {} planned {}, host tier measured {} planned {}",
                off.peak_bytes, rep.device_peak_after, r.host_peak_bytes, plan.host_bytes
            ));
        }
        if rep.fits != (rep.device_peak_after <= device_budget) {
            return Err("offload says it fits when it does not, or the reverse".into());
        }
        // Every copy made, out and back, on whichever thread; the exposed time is part of the
        // transfer time.
        if (r.transfers, r.transfer_bytes) != (2 * rep.moved.len(), rep.transfer_bytes) {
            return Err(format!(
                "{} copies of {} B made, {} of {} B planned",
                r.transfers,
                r.transfer_bytes,
                2 * rep.moved.len(),
                rep.transfer_bytes
            ));
        }
        if !(0.0..=rep.predicted_seconds * (1.0 + 1e-9)).contains(&rep.predicted_exposed_seconds) {
            return Err(format!(
                "{} s of {} s of transfers predicted exposed",
                rep.predicted_exposed_seconds, rep.predicted_seconds
            ));
        }
    }
    let (folded, folded_tail) = check_folded(&model, &fit, &dims, &plain.outputs)?;
    Ok(Levers {
        chunked: fit.chunking.is_some_and(|c| !c.steps.is_empty()),
        narrowed: fit.narrowing.is_some(),
        offloaded: moved,
        folded,
        folded_tail,
    })
}

/// Folds every chunked region of the fit that can be folded into a `Scan`, plans the result and
/// runs it: same bits as `want`, measured peak = planned. Says whether anything was folded, and
/// whether a region was folded with chunks left unrolled after the folded ones.
fn check_folded(
    model: &Model,
    fit: &memplan_plan::Fit,
    dims: &BTreeMap<String, i64>,
    want: &[(String, Tensor)],
) -> Result<(bool, bool), String> {
    let Some(c) = &fit.chunking else {
        return Ok((false, false));
    };
    let (mut m, mut f) = (fit.model.clone(), fit.facts.clone());
    let (mut folded, mut tail) = (false, false);
    for s in &c.steps {
        let Some(u) = s.unrolled.as_ref().filter(|u| u.foldable() && !s.scan) else {
            continue;
        };
        let Some(next) =
            memplan_plan::chunk::roll::roll(&m, &f, dims, u).map_err(|e| format!("fold: {e}"))?
        else {
            continue;
        };
        m = next;
        f = memplan_ir::infer_model_for(&m, dims).map_err(|e| format!("folded infer: {e}"))?;
        folded = true;
        tail |= u.trips() < u.chunks.len();
    }
    if !folded {
        return Ok((false, false));
    }
    let out = memplan_plan::optimize(&m.graph, &f, dims, &memplan_plan::Options::default())
        .map_err(|e| format!("folded plan: {e}"))?;
    // A fold's Scan carries no state: its body runs from a plan of its own.
    let scans = m.graph.nodes.iter().filter(|n| n.op == "Scan").count();
    if out.plan.bodies.len() != scans {
        return Err(format!(
            "folded: {} of {scans} Scans run their body from a plan",
            out.plan.bodies.len()
        ));
    }
    let run = run_planned(&m.graph, &f, inputs(model), &out.plan, 18)
        .map_err(|e| format!("folded run: {e}"))?;
    let misses = run.plan.as_ref().map_or(0, |r| r.misses.len());
    if misses > 0 {
        return Err(format!("folded: {misses} allocations missed the plan"));
    }
    if bits(&run.outputs) != bits(want) {
        return Err("the folded graph's outputs differ from the original's".into());
    }
    if run.peak_bytes != out.report.peak_bytes_after {
        return Err(format!(
            "folded: measured peak {} != planned peak {}",
            run.peak_bytes, out.report.peak_bytes_after
        ));
    }
    Ok((true, tail))
}
