//! memplan-plan: memory planning over the simulator's lifetimes: a better order, in-place reuse and
//! one static arena, as a checked [`Plan`].
//!
//! [`optimize`] runs the passes at concrete dims and keeps the best of each:
//! 1. schedule ([`sched`]): graph order, two list schedulers, two DFS orders, and an exact search over
//!    frontier sets on windows of the best of them;
//! 2. in place ([`inplace`]): outputs written over inputs that die at their node, as the op table allows;
//! 3. placement ([`place`]): greedy best fit in three orders, the smallest arena kept.
//!
//! Every candidate schedule goes through in-place and placement; the smallest arena wins. The plan it
//! makes is verified by [`check::check`], which recomputes everything from the graph on its own.
//! [`reorder`] rewrites a graph so its node list follows a plan's schedule.
//!
//! **Invariant**: every plan [`optimize`] returns has passed [`check::check`].

pub mod body;
pub mod check;
pub mod chunk;
pub mod cost;
pub mod fit;
pub mod floor;
pub mod gen;
mod greedy;
pub mod inplace;
pub mod model;
pub mod narrow;
pub mod offload;
pub mod place;
pub mod plan;
pub mod remat;
pub mod sched;

use std::collections::BTreeMap;

use memplan_ir::graph::{Graph, NodeId, ValueKind};
use memplan_ir::infer::Facts;
use memplan_sim::timeline::{SimError, Timeline};

pub use check::{check, checked, Checked, PlanError};
pub use fit::{fit_budget, Fit, FitError, FitOptions};
pub use floor::{floor, Floor};
pub use model::Problem;
pub use plan::{Assembled, BodyPlan, Buffer, BufferKind, InPlace, Offload, Part, Plan, Step};

/// Frontier states the exact schedule search explores by default (all windows together).
pub const DEFAULT_EXACT_WORK: usize = 2_000_000;

/// Knobs of [`optimize`].
#[derive(Clone, Debug)]
pub struct Options {
    /// Work for the exact search: frontier states explored over all windows together. A bound on
    /// work, not time, so that the same input gives the same plan on any machine.
    pub exact_work: usize,
    /// Nodes per exact-search window (at most 64).
    pub exact_window: usize,
    /// Frontier states per window before the search gives up on it.
    pub exact_max_states: usize,
    /// The most lanes a `Scan` body run from a plan of its own runs in, iterations side by side
    /// ([`plan::BodyPlan::lanes`]; 1: one after the other). Each lane holds a copy of the body's
    /// memory.
    pub lanes: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            exact_work: DEFAULT_EXACT_WORK,
            exact_window: 24,
            exact_max_states: 50_000,
            lanes: 1,
        }
    }
}

/// A pass and the peak after it (resident bytes included).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Pass {
    pub name: String,
    pub peak_bytes: u64,
}

/// One candidate schedule and where it ends up.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Candidate {
    pub scheduler: String,
    /// Simulated peak of the order (resident included).
    pub peak_bytes: u64,
    /// Live peak after in-place reuse (resident included).
    pub inplace_peak_bytes: u64,
    /// Smallest arena over the placements; `None` when the order was not placed, its live peak
    /// after in-place reuse (a lower bound on any arena for it) being no lower than the smallest
    /// arena of an order placed before it.
    pub arena_bytes: Option<u64>,
    pub placement: String,
}

/// What [`optimize`] did.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Report {
    pub dims: BTreeMap<String, i64>,
    pub nodes: usize,
    /// Simulated peak in graph order: what `memplan estimate` reports.
    pub peak_bytes_before: u64,
    /// The planned arena plus the resident weights and inputs and the control-flow bodies' heap.
    pub peak_bytes_after: u64,
    pub passes: Vec<Pass>,
    pub candidates: Vec<Candidate>,
    /// The chosen candidate's placements: name and arena.
    pub placements: Vec<Pass>,
    pub scheduler: String,
    pub placement: String,
    pub arena_bytes: u64,
    /// Liveness peak of the arena's buffers after in-place: no placement does better.
    pub arena_lower_bound: u64,
    pub resident_bytes: u64,
    /// What control-flow bodies hold on the heap beside the arena ([`Plan::heap_bytes`]).
    pub heap_bytes: u64,
    /// Bodies run from plans of their own ([`Plan::bodies`]).
    pub body_plans: usize,
    pub inplace: usize,
    pub exact_windows_solved: usize,
    pub exact_windows_improved: usize,
    pub exact_windows_given_up: usize,
}

/// Why no plan could be made.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum OptimizeError {
    #[error(transparent)]
    Sim(#[from] SimError),
    /// The planner made a plan its checker rejects: a planner bug, never silently ignored.
    #[error("internal error: the planner made an invalid plan: {0}")]
    Check(#[from] PlanError),
}

/// A plan and its report.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub plan: Plan,
    pub report: Report,
}

/// Evaluated result of one schedule through in-place and placement.
struct Evaluated {
    order: Vec<u32>,
    decisions: Vec<inplace::Decision>,
    blocks: Vec<place::Block>,
    /// Block of each problem buffer; scratch blocks follow, one per node with scratch, in `scratch_of`.
    block_of: Vec<usize>,
    scratch_of: Vec<u32>,
    offsets: Vec<u64>,
    placements: Vec<Pass>,
    placement: &'static str,
    arena: u64,
    lower: u64,
    inplace_peak: u64,
}

/// Takes `order` through in-place reuse and placement. With `placed`, the smallest arena of an
/// order evaluated before, an order whose live peak after in-place reuse (a lower bound on any
/// arena for it) is no lower cannot be better: it is not placed (its arena is `u64::MAX`, its
/// placement says so), which saves the placers' work on large graphs.
fn evaluate(graph: &Graph, p: &Problem, order: Vec<u32>, placed: Option<u64>) -> Evaluated {
    let (decisions, root) = inplace::decide(graph, p, &order);
    let (first, last) = p.lifetimes(&order);
    let mut blocks: Vec<place::Block> = Vec::new();
    let mut block_of = vec![usize::MAX; p.buffers()];
    for b in 0..p.buffers() {
        let r = root[b] as usize;
        if block_of[r] == usize::MAX {
            block_of[r] = blocks.len();
            blocks.push(place::Block {
                first: first[r],
                last: last[r],
                size: p.size[r],
            });
        }
        let k = block_of[r];
        block_of[b] = k;
        blocks[k].first = blocks[k].first.min(first[b]);
        blocks[k].last = blocks[k].last.max(last[b]);
    }
    let mut scratch_of = Vec::new();
    for (s, &v) in order.iter().enumerate() {
        if p.scratch[v as usize] > 0 {
            scratch_of.push(v);
            blocks.push(place::Block {
                first: s,
                last: s,
                size: p.scratch[v as usize],
            });
        }
    }
    let lower = place::lower_bound(&blocks);
    let (arena, offsets, placement, placements) = if placed.is_some_and(|a| lower >= a) {
        let not = "not placed: cannot beat the best arena";
        (u64::MAX, Vec::new(), not, Vec::new())
    } else {
        let best = place::best(&blocks);
        let placements = best
            .tried
            .iter()
            .map(|&(name, a)| Pass {
                name: name.to_string(),
                peak_bytes: a,
            })
            .collect();
        (best.arena, best.offsets, best.placer, placements)
    };
    Evaluated {
        order,
        decisions,
        blocks,
        block_of,
        scratch_of,
        offsets,
        placements,
        placement,
        arena,
        lower,
        inplace_peak: lower,
    }
}

/// Plans `graph` at `dims`: every symbol of the facts must be given.
pub fn optimize(
    graph: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    opts: &Options,
) -> Result<Outcome, OptimizeError> {
    let p = Problem::build(graph, facts, &facts.order, dims, opts.lanes)?;
    let sim_peak = |order: &[u32]| -> Result<u64, SimError> {
        let ids: Vec<NodeId> = order.iter().map(|&v| NodeId(v)).collect();
        let t = Timeline::build(graph, facts, &ids)?;
        Ok(memplan_sim::peak::concrete_peak(&t, dims)?.peak_bytes)
    };
    let mut sinks: Vec<u32> = graph
        .outputs
        .iter()
        .filter_map(|&v| graph.producer(v))
        .map(|n| n.0)
        .collect();
    sinks.dedup();
    let mut orders: Vec<(String, Vec<u32>)> = vec![
        ("graph order".into(), p.graph_order_u32()),
        (
            "list (net growth)".into(),
            sched::list(&p, sched::ListKey::NetGrowth),
        ),
        (
            "list (step bytes)".into(),
            sched::list(&p, sched::ListKey::StepBytes),
        ),
        ("dfs".into(), sched::dfs(&p, &sinks, false)),
        ("dfs (inputs reversed)".into(), sched::dfs(&p, &sinks, true)),
    ];
    let best_heur = (0..orders.len())
        .min_by_key(|&i| (p.peak(&orders[i].1), i))
        .unwrap_or(0);
    let lim = sched::ExactLimits {
        window: opts.exact_window,
        max_states: opts.exact_max_states,
        total_states: opts.exact_work,
    };
    let (ex, stats) = sched::exact(&p, &orders[best_heur].1, &lim);
    if stats.improved > 0 {
        orders.push((format!("exact search over {}", orders[best_heur].0), ex));
    }

    let mut candidates = Vec::new();
    let mut best: Option<(usize, Evaluated, u64)> = None;
    for (i, (name, order)) in orders.into_iter().enumerate() {
        debug_assert!(p.is_topological(&order), "{name}");
        let peak = sim_peak(&order)?;
        let ev = evaluate(graph, &p, order, best.as_ref().map(|(_, b, _)| b.arena));
        candidates.push(Candidate {
            scheduler: name,
            peak_bytes: peak,
            inplace_peak_bytes: ev.inplace_peak + p.resident + p.body_heap,
            arena_bytes: (ev.arena != u64::MAX).then_some(ev.arena),
            placement: ev.placement.to_string(),
        });
        let better = best
            .as_ref()
            .is_none_or(|(_, b, _)| (ev.arena, ev.inplace_peak) < (b.arena, b.inplace_peak));
        if better {
            best = Some((i, ev, peak));
        }
    }
    let Some((bi, ev, sched_peak)) = best else {
        unreachable!("graph order is always a candidate")
    };
    let (p, ev) = unassembled_if_lower(graph, facts, dims, opts.lanes, p, ev)?;
    let plan = build_plan(graph, &p, &ev, dims);
    check::check(graph, facts, &plan)?;
    let before = candidates[0].peak_bytes;
    let after = ev.arena + p.resident + p.body_heap;
    let report = Report {
        dims: dims.clone(),
        nodes: graph.nodes.len(),
        peak_bytes_before: before,
        peak_bytes_after: after,
        passes: vec![
            Pass {
                name: "graph order".into(),
                peak_bytes: before,
            },
            Pass {
                name: format!("schedule: {}", candidates[bi].scheduler),
                peak_bytes: sched_peak,
            },
            Pass {
                // The schedule's peak is the simulator's, where a Concat copies its inputs; from
                // here on a Concat the plan assembles holds its output from its first part on.
                name: if p.assembled.is_empty() {
                    format!("in place ({} reuses)", ev.decisions.len())
                } else {
                    format!(
                        "in place ({} reuses), {} concat(s) assembled",
                        ev.decisions.len(),
                        p.assembled.len()
                    )
                },
                peak_bytes: ev.inplace_peak + p.resident + p.body_heap,
            },
            Pass {
                name: format!("placement: {}", ev.placement),
                peak_bytes: after,
            },
        ],
        scheduler: candidates[bi].scheduler.clone(),
        placement: ev.placement.to_string(),
        candidates,
        placements: ev.placements.clone(),
        arena_bytes: ev.arena,
        arena_lower_bound: ev.lower,
        resident_bytes: p.resident,
        heap_bytes: p.body_heap,
        body_plans: p.bodies.len(),
        inplace: ev.decisions.len(),
        exact_windows_solved: stats.solved,
        exact_windows_improved: stats.improved,
        exact_windows_given_up: stats.gave_up,
    };
    Ok(Outcome { plan, report })
}

/// `ev` (an order of `p`) or, when its arena is smaller, the same order planned with every
/// `Concat` copying its inputs. A concatenation assembled in place holds its whole output from its
/// first part on; where other values peak between its parts' makers, that costs more than the
/// copy it saves, and the plan would be above the graph order's own peak.
fn unassembled_if_lower(
    graph: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    lanes: u32,
    p: Problem,
    ev: Evaluated,
) -> Result<(Problem, Evaluated), SimError> {
    if p.assembled.is_empty() {
        return Ok((p, ev));
    }
    let q = Problem::build_assembling(graph, facts, &facts.order, dims, lanes, &[])?;
    let eq = evaluate(graph, &q, ev.order.clone(), Some(ev.arena));
    let lower = eq.arena != u64::MAX
        && eq.arena + q.resident + q.body_heap < ev.arena + p.resident + p.body_heap;
    Ok(if lower { (q, eq) } else { (p, ev) })
}

/// The plan for a fixed `schedule` (a topological order of all nodes): in-place reuse and the best
/// placement, checked.
pub fn plan_for_schedule(
    graph: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    schedule: &[NodeId],
) -> Result<Plan, OptimizeError> {
    let p = Problem::build(graph, facts, schedule, dims, 1)?;
    let order: Vec<u32> = schedule.iter().map(|n| n.0).collect();
    let ev = evaluate(graph, &p, order, None);
    let plan = build_plan(graph, &p, &ev, dims);
    check::check(graph, facts, &plan)?;
    Ok(plan)
}

/// Assembles the [`Plan`] value of an evaluated candidate.
fn build_plan(graph: &Graph, p: &Problem, ev: &Evaluated, dims: &BTreeMap<String, i64>) -> Plan {
    let (first, last) = p.lifetimes(&ev.order);
    let mut views: Vec<Vec<String>> = vec![Vec::new(); p.buffers()];
    for (v, b) in p.value_buf.iter().enumerate() {
        if let Some(b) = *b {
            if p.owner[b as usize].index() != v {
                views[b as usize].push(graph.values[v].name.clone());
            }
        }
    }
    let mut buffers: Vec<(usize, u32, Buffer)> = Vec::new();
    for (b, vs) in views.into_iter().enumerate() {
        let owner = p.owner[b];
        let mut values = vec![graph.values[owner.index()].name.clone()];
        values.extend(vs);
        buffers.push((
            first[b],
            owner.0,
            Buffer {
                kind: if p.pinned[b] {
                    BufferKind::Output
                } else {
                    BufferKind::Activation
                },
                values,
                node: None,
                offset: ev.offsets[ev.block_of[b]],
                size: p.size[b],
                first: first[b],
                last: last[b],
            },
        ));
    }
    for (k, &v) in ev.scratch_of.iter().enumerate() {
        let bi = ev.blocks.len() - ev.scratch_of.len() + k;
        let b = ev.blocks[bi];
        buffers.push((
            b.first,
            u32::MAX,
            Buffer {
                kind: BufferKind::Scratch,
                values: Vec::new(),
                node: Some(v),
                offset: ev.offsets[bi],
                size: b.size,
                first: b.first,
                last: b.last,
            },
        ));
    }
    buffers.sort_by_key(|(f, o, _)| (*f, *o));
    let buffers: Vec<Buffer> = buffers.into_iter().map(|(_, _, b)| b).collect();
    let arena_bytes = buffers.iter().map(|b| b.offset + b.size).max().unwrap_or(0);
    Plan {
        dims: dims.clone(),
        schedule: ev
            .order
            .iter()
            .map(|&v| {
                let n = &graph.nodes[v as usize];
                Step {
                    node: v,
                    name: n.name.clone(),
                    op: n.op.clone(),
                }
            })
            .collect(),
        buffers,
        inplace: ev
            .decisions
            .iter()
            .map(|d| InPlace {
                node: d.node,
                input: graph.values[d.input.index()].name.clone(),
                output: graph.values[d.output.index()].name.clone(),
            })
            .collect(),
        assembled: p
            .assembled
            .iter()
            .map(|(node, y, parts)| {
                let mut offset = 0;
                Assembled {
                    node: *node,
                    output: graph.values[y.index()].name.clone(),
                    parts: parts
                        .iter()
                        .map(|&(v, size)| {
                            let part = Part {
                                value: graph.values[v.index()].name.clone(),
                                offset,
                                size,
                            };
                            offset += size;
                            part
                        })
                        .collect(),
                }
            })
            .collect(),
        align: place::ALIGN,
        arena_bytes,
        resident_bytes: p.resident,
        heap_bytes: p.body_heap,
        bodies: p.bodies.clone(),
        offloads: Vec::new(),
        host_bytes: 0,
        device_budget: None,
    }
}

/// Facts of a graph whose nodes were put in `schedule` order by [`reorder`]: the order is the node
/// list, and control-flow facts follow their nodes to their new ids.
pub fn reorder_facts(facts: &mut Facts, schedule: &[NodeId]) {
    let new_id: std::collections::BTreeMap<NodeId, NodeId> = schedule
        .iter()
        .enumerate()
        .map(|(i, &n)| (n, NodeId::from_index(i)))
        .collect();
    facts.control = std::mem::take(&mut facts.control)
        .into_iter()
        .filter_map(|(n, c)| Some((*new_id.get(&n)?, c)))
        .collect();
    facts.order = (0..schedule.len()).map(NodeId::from_index).collect();
}

/// `graph` with its node list in `schedule` order (value producers renumbered to match).
pub fn reorder(graph: &Graph, schedule: &[NodeId]) -> Graph {
    let mut g = graph.clone();
    g.nodes = schedule
        .iter()
        .map(|&n| graph.nodes[n.index()].clone())
        .collect();
    for (i, node) in g.nodes.iter().enumerate() {
        for (slot, o) in node.outputs.iter().enumerate() {
            if let Some(o) = *o {
                g.values[o.index()].kind = ValueKind::Node {
                    node: NodeId::from_index(i),
                    slot: slot as u32,
                };
            }
        }
    }
    g
}

#[cfg(test)]
mod tests {
    use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType, Model};

    use super::*;

    fn int(name: &str, v: i64) -> Attribute {
        Attribute {
            name: name.into(),
            value: AttrValue::Int(v),
            doc: String::new(),
        }
    }

    /// `cat = Concat(a, b)` where `a` is read by a large transient `u` made before `b`: assembled
    /// in place, `cat`'s whole buffer would be live beside `u` (6 rows of N); copied, only `a` is
    /// (5 rows). The plan keeps the copy, and no plan is above the graph order's peak.
    #[test]
    fn a_concatenation_is_not_assembled_where_that_raises_the_peak() {
        let mut g = Graph::default();
        let row = |rows: i64| {
            DeclType::tensor(
                memplan_ir::DataType::F32,
                vec![DeclDim::Value(rows), DeclDim::Param("N".into())],
            )
        };
        let x = g.add_input("x", row(1));
        let y = g.add_input("y", row(4));
        let a = g.add_node("a", "Neg", &[Some(x)], &["a"], vec![]).1[0];
        let u = g
            .add_node("u", "Mul", &[Some(y), Some(a)], &["u"], vec![])
            .1[0];
        let v = g
            .add_node(
                "v",
                "ReduceSum",
                &[Some(u)],
                &["v"],
                vec![int("keepdims", 0)],
            )
            .1[0];
        let b = g
            .add_node("b", "Add", &[Some(x), Some(v)], &["b"], vec![])
            .1[0];
        let cat = g
            .add_node(
                "cat",
                "Concat",
                &[Some(a), Some(b)],
                &["cat"],
                vec![int("axis", 0)],
            )
            .1[0];
        g.outputs = vec![cat];
        let model = Model {
            graph: g,
            ..Model::default()
        };
        let facts = memplan_ir::infer_model(&model).unwrap();
        let n = 1024i64;
        let dims = BTreeMap::from([("N".to_string(), n)]);
        let g = &model.graph;
        assert_eq!(memplan_sim::timeline::assemblable(g, &facts).len(), 1);
        let out = optimize(g, &facts, &dims, &Options::default()).unwrap();
        let row_bytes = 4 * n as u64;
        assert!(out.plan.assembled.is_empty(), "{:?}", out.plan.assembled);
        // `a`, `u` and the sum `v` that `u` makes.
        assert_eq!(
            out.plan.arena_bytes,
            5 * row_bytes + 4,
            "{}",
            out.plan.render()
        );
        assert!(out.report.peak_bytes_after <= out.report.peak_bytes_before);
    }
}
