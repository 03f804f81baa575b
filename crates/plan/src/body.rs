//! Bodies run from plans of their own.
//!
//! A `Scan` (opset 9 on) that carries no state makes all its outputs first and fills them piece
//! by piece ([`memplan_ir::ops::control::outputs_made_first`]); its iterations share nothing but
//! what they read from outside. In a planned run its body runs from a plan of its own
//! ([`crate::Plan::bodies`], made by [`plan_body`]): one arena, allocated once for the node's run
//! and reused by every iteration, with the body's own in-place reuse and placement; the slices it
//! scans (the body's inputs) are allocated once and overwritten by each iteration, and the body's
//! weights are loaded once. So beside the outer arena the node holds exactly [`heap_of`] its body
//! plan for the whole run, whatever its trip count.
//!
//! Such a body may also run in lanes ([`crate::plan::BodyPlan::lanes`], [`crate::Options::lanes`]):
//! each lane holds its own copy of what the body's plan holds and runs the next iteration not yet
//! taken, so iterations of a body too small to keep the threads busy (a region chunked hundreds of
//! times, folded into a `Scan`) run side by side. The node then holds `lanes` times [`heap_of`]
//! the body plan, whatever the thread count.
//!
//! Other control-flow nodes (and a body whose sizes are not known at the plan's dims) run their
//! bodies unplanned on the heap, as `memplan_sim::control` predicts.

use std::collections::BTreeMap;

use memplan_ir::graph::{Graph, NodeId};
use memplan_ir::infer::Facts;

use crate::plan::Plan;

/// The body node `nid` runs from a plan of its own in a planned run, with its facts: a `Scan`
/// whose outputs are all made first (it carries no state). `None` for other nodes.
pub fn planned_body<'a>(
    graph: &'a Graph,
    facts: &'a Facts,
    nid: NodeId,
) -> Option<(&'a Graph, &'a Facts)> {
    let node = graph.nodes.get(nid.index())?;
    if !node.is_onnx_domain() || !memplan_ir::ops::control::carries_no_state(node, facts.opset) {
        return None;
    }
    let body = node.subgraphs().next()?;
    let bf = facts.control.get(&nid)?.bodies.first()?;
    Some((body, bf))
}

/// The plan of node `nid`'s body at `dims` (in the body's own order, with in-place reuse and the
/// best placement, checked), when the node runs its body from one ([`planned_body`]) and the
/// body's sizes are known at `dims`.
pub fn plan_body(
    graph: &Graph,
    facts: &Facts,
    nid: NodeId,
    dims: &BTreeMap<String, i64>,
) -> Option<Plan> {
    let (body, bf) = planned_body(graph, facts, nid)?;
    crate::plan_for_schedule(body, bf, dims, &bf.order).ok()
}

/// The lanes node `nid` runs its planned body in: `lanes`, but no more than its iterations at `dims`
/// (at least one).
pub fn lanes_for(facts: &Facts, nid: NodeId, dims: &BTreeMap<String, i64>, lanes: u32) -> u32 {
    let trips = facts
        .control
        .get(&nid)
        .and_then(|c| c.trips.as_ref())
        .and_then(|t| t.eval_map(dims).ok())
        .unwrap_or(1);
    lanes.min(u32::try_from(trips).unwrap_or(u32::MAX)).max(1)
}

/// What a body run from `plan` holds beside the enclosing arena for its node's whole run: its
/// arena, its resident bytes (the scanned slices and its weights) and its own bodies' heap.
pub fn heap_of(plan: &Plan) -> u64 {
    plan.arena_bytes + plan.resident_bytes + plan.heap_bytes
}
