//! The independent plan checker. It trusts nothing the planner computed: from the graph, the facts
//! and the plan's own schedule it recomputes which values share storage (views), every buffer's size
//! at the plan's dims and its lifetime, and then verifies the plan against them. It shares no code
//! with the planner or the simulator; only the op table (`memplan_ir::ops`) tells it which nodes are
//! views, which inputs an op may overwrite and how much scratch a node needs.
//!
//! Rules, each reported by a [`PlanError`] that names the node or value:
//! 1. the schedule lists every node once, each after the producers of everything it reads;
//! 2. every non-resident value that owns storage has exactly one buffer listing it and its views,
//!    with the size the facts give at the plan's dims and the lifetime recomputed from the schedule
//!    (made at its producer's step, live through the last step reading it or any view of it, to the
//!    end when it holds a graph output); every node with scratch has one scratch buffer for its step;
//! 3. offsets are multiples of the plan's alignment;
//! 4. no two buffers live at the same step overlap in `[offset, offset + size)`, except an input and
//!    the output written over it in place, at that node's step, at the same offset with the same size;
//! 5. an in-place write goes to output 0 of an op that lists that input as overwritable, over a buffer
//!    of exactly the output's size and dtype that is not resident (graph input, weight), holds no
//!    graph output, whose every other reader (through views too) has run before, and that no other
//!    input slot of the node reads (the same value twice is allowed for elementwise ops);
//! 6. the arena is the highest `offset + size`, the resident bytes are the weights and inputs, and
//!    the heap bytes are the most any control-flow node holds on the heap (its bodies' scratch from
//!    the simulator plus its outputs, which the executor makes there and copies into the arena). A
//!    node with a body plan ([`crate::plan::Plan::bodies`], at most one per node) is a `Scan` that
//!    carries no state, the body plan passes every rule for its body at the same dims, and the node
//!    holds that plan's arena, resident and heap bytes instead of the simulator's scratch;
//! 7. an assembled `Concat` is one the op allows, over its own inputs in order at the offsets their
//!    sizes give; each input (with its views) then shares the output's buffer, which is made at the
//!    first step making any of its values;
//! 8. an offload (see [`crate::plan::Offload`]) moves a buffer of one value (no views, no in-place
//!    reuse, no graph output) over a gap between its uses: no node reads it while it is being
//!    copied out, on the host or being copied back; its device range stays reserved while its copy
//!    out reads it and is reserved from the start of its copy back, so (rule 4) no buffer live during
//!    a copy's window overlaps the range the copy reads or writes; the host tier holds what the plan
//!    says, and the device tier (arena, resident and heap bytes) is within the plan's device budget.

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::graph::{Graph, ValueKind};
use memplan_ir::infer::Facts;
use memplan_ir::{ops, ValueId};

use crate::plan::{BodyPlan, BufferKind, Plan};

/// Why a plan is invalid: the rule broken and the node or value it is broken at.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("schedule: {got} steps for a graph of {want} nodes")]
    ScheduleLength { got: usize, want: usize },
    #[error("schedule: step {step} names node #{node}, which the graph does not have")]
    UnknownNode { step: usize, node: u32 },
    #[error("schedule: node {node} runs twice (steps {first} and {second})")]
    RepeatedNode {
        node: String,
        first: usize,
        second: usize,
    },
    #[error("schedule: step {step} names node #{index} as '{plan}' but the graph's node is '{graph}' (a plan for another graph?)")]
    NodeMismatch {
        step: usize,
        index: u32,
        plan: String,
        graph: String,
    },
    #[error("schedule: node {node} runs before '{input}' is made (not a topological order)")]
    NotTopological { node: String, input: String },
    #[error("value '{value}': size unknown at the plan's dims ({why})")]
    Size { value: String, why: String },
    #[error("buffer '{value}': {why}")]
    NotOwner { value: String, why: String },
    #[error("value '{value}' owns storage but no buffer holds it")]
    MissingBuffer { value: String },
    #[error("value '{value}' is held by two buffers")]
    DuplicateBuffer { value: String },
    #[error("buffer '{value}': lists values [{plan}] but shares its bytes with [{want}]")]
    BufferValues {
        value: String,
        plan: String,
        want: String,
    },
    #[error("buffer '{value}': size {plan} B but the facts give {want} B at the plan's dims")]
    BufferSize { value: String, plan: u64, want: u64 },
    #[error("buffer '{value}': live over steps {plan_first}..{plan_last} but the schedule makes it live over {first}..{last}")]
    Lifetime {
        value: String,
        plan_first: usize,
        plan_last: usize,
        first: usize,
        last: usize,
    },
    #[error("buffer '{value}': kind {plan:?} but it {why}")]
    Kind {
        value: String,
        plan: BufferKind,
        why: &'static str,
    },
    #[error("scratch of node {node}: {why}")]
    Scratch { node: String, why: String },
    #[error("buffer '{value}': offset {offset} is not a multiple of the alignment {align}")]
    Misaligned {
        value: String,
        offset: u64,
        align: u64,
    },
    #[error("buffers '{a}' and '{b}' are both live at step {step} and overlap in the arena")]
    Overlap { a: String, b: String, step: usize },
    #[error("in-place at node {node}: '{output}' over '{input}': {rule}")]
    InPlace {
        node: String,
        input: String,
        output: String,
        rule: String,
    },
    #[error("assembled Concat {node}: {rule}")]
    Assembled { node: String, rule: String },
    #[error("arena: the plan says {plan} B but its buffers end at {want} B")]
    Arena { plan: u64, want: u64 },
    #[error("resident bytes: the plan says {plan} B but the weights and inputs take {want} B")]
    Resident { plan: u64, want: u64 },
    #[error("heap bytes: the plan says {plan} B but its control-flow bodies take {want} B")]
    Heap { plan: u64, want: u64 },
    #[error("body of node {node}: {why}")]
    Body { node: String, why: String },
    #[error("offload of '{value}': {why}")]
    Offload { value: String, why: String },
    #[error("offload of '{value}': buffer '{other}' overlaps its device range at step {step}, while its {what} is in flight (steps {from}..={to})")]
    InFlight {
        value: String,
        other: String,
        step: usize,
        what: &'static str,
        from: usize,
        to: usize,
    },
    #[error("host tier: the plan says {plan} B but its offloads hold {want} B at once")]
    Host { plan: u64, want: u64 },
    #[error(
        "device tier: arena + resident + heap = {peak} B exceeds the device budget {budget} B"
    )]
    DeviceBudget { peak: u64, budget: u64 },
}

/// Where a value's bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Storage {
    /// Not a tensor this graph holds (read from an enclosing scope, or an unknown id).
    None,
    /// A weight or graph input (or a view of one): outside the arena.
    Resident,
    /// The storage owned by this value (itself, or the source of the view chain).
    Owned(ValueId),
}

/// A plan that [`check`] accepted for this graph and these facts: what a run from one arena at the
/// plan's offsets relies on, made only by [`checked`], so that a run given one need not check again
/// (a run repeated, or a plan checked once where it was read).
#[derive(Clone, Copy, Debug)]
pub struct Checked<'a> {
    graph: &'a Graph,
    facts: &'a Facts,
    plan: &'a Plan,
}

impl<'a> Checked<'a> {
    pub fn graph(&self) -> &'a Graph {
        self.graph
    }
    pub fn facts(&self) -> &'a Facts {
        self.facts
    }
    pub fn plan(&self) -> &'a Plan {
        self.plan
    }
}

/// [`check`], and the proof that it passed.
pub fn checked<'a>(
    graph: &'a Graph,
    facts: &'a Facts,
    plan: &'a Plan,
) -> Result<Checked<'a>, PlanError> {
    check(graph, facts, plan)?;
    Ok(Checked { graph, facts, plan })
}

/// Verifies `plan` for `graph` (see the module docs for the rules).
pub fn check(graph: &Graph, facts: &Facts, plan: &Plan) -> Result<(), PlanError> {
    let n = graph.nodes.len();
    let vname = |v: ValueId| graph.values[v.index()].name.clone();

    // Rule 1: the schedule.
    if plan.schedule.len() != n {
        return Err(PlanError::ScheduleLength {
            got: plan.schedule.len(),
            want: n,
        });
    }
    let mut pos = vec![usize::MAX; n];
    for (s, st) in plan.schedule.iter().enumerate() {
        let i = st.node as usize;
        if i >= n {
            return Err(PlanError::UnknownNode {
                step: s,
                node: st.node,
            });
        }
        let node = &graph.nodes[i];
        if node.name != st.name || node.op != st.op {
            return Err(PlanError::NodeMismatch {
                step: s,
                index: st.node,
                plan: format!("{} ({})", st.name, st.op),
                graph: format!("{} ({})", node.name, node.op),
            });
        }
        if pos[i] != usize::MAX {
            return Err(PlanError::RepeatedNode {
                node: node.label(memplan_ir::NodeId(st.node)),
                first: pos[i],
                second: s,
            });
        }
        pos[i] = s;
    }
    let label = |i: usize| graph.nodes[i].label(memplan_ir::NodeId(i as u32));
    // What each node reads: its inputs and the outer names its subgraphs use.
    let reads: Vec<Vec<ValueId>> = graph
        .nodes
        .iter()
        .map(|node| {
            let mut r: Vec<ValueId> = node.input_ids().collect();
            for sub in node.subgraphs() {
                r.extend(sub.outer_reads_resolved(graph));
            }
            r
        })
        .collect();
    for st in &plan.schedule {
        let i = st.node as usize;
        for &v in &reads[i] {
            if let ValueKind::Node { node: p, .. } = graph.values[v.index()].kind {
                if pos[p.index()] >= pos[i] {
                    return Err(PlanError::NotTopological {
                        node: label(i),
                        input: vname(v),
                    });
                }
            }
        }
    }

    // Sizes at the plan's dims.
    let size_of = |v: ValueId| -> Result<u64, PlanError> {
        let f = facts.values.get(v.index()).ok_or_else(|| PlanError::Size {
            value: vname(v),
            why: "no facts".into(),
        })?;
        let e = f.bytes().ok_or_else(|| PlanError::Size {
            value: vname(v),
            why: "no dtype or shape".into(),
        })?;
        e.eval_map(&plan.dims)
            .map(|x| x.max(0) as u64)
            .map_err(|e| PlanError::Size {
                value: vname(v),
                why: format!("{e:?}"),
            })
    };

    // Storage of every value, in schedule order so view sources are resolved first.
    let mut storage: Vec<Storage> = graph
        .values
        .iter()
        .map(|v| match v.kind {
            ValueKind::Input | ValueKind::Initializer(_) | ValueKind::SparseInitializer(_) => {
                Storage::Resident
            }
            _ => Storage::None,
        })
        .collect();
    for st in &plan.schedule {
        let node = &graph.nodes[st.node as usize];
        let (ins, outs) = facts.node_io(node);
        let src = node
            .inputs
            .first()
            .copied()
            .flatten()
            .map(|v| storage[v.index()])
            .filter(|s| *s != Storage::None);
        let view = src.is_some() && ops::is_view(node, &ins, &outs);
        for (slot, o) in node.outputs.iter().enumerate() {
            if let Some(o) = *o {
                storage[o.index()] = match (slot, view, src) {
                    (0, true, Some(s)) => s,
                    _ => Storage::Owned(o),
                };
            }
        }
    }
    let is_output: BTreeSet<ValueId> = graph.outputs.iter().copied().collect();
    // Rule 7: assembled concatenations; their inputs (and views of them) join the output's storage.
    assembled(graph, facts, plan, &is_output, &mut storage)?;
    // Per owner: members (owner first), whether it holds a graph output, first and last step.
    let mut members: BTreeMap<ValueId, Vec<ValueId>> = BTreeMap::new();
    for st in &plan.schedule {
        for o in graph.nodes[st.node as usize].output_ids() {
            if let Storage::Owned(own) = storage[o.index()] {
                members.entry(own).or_default().push(o);
            }
        }
    }
    let end = n.saturating_sub(1);
    let mut life: BTreeMap<ValueId, (usize, usize)> = BTreeMap::new();
    let mut pinned: BTreeSet<ValueId> = BTreeSet::new();
    for (&own, ms) in &members {
        // Made at the first step making any of its values (an assembled input comes before the
        // output it is part of).
        let made = ms
            .iter()
            .filter_map(|m| match graph.values[m.index()].kind {
                ValueKind::Node { node: p, .. } => Some(pos[p.index()]),
                _ => None,
            });
        let Some(f) = made.min() else {
            continue;
        };
        life.insert(own, (f, f));
        if ms.iter().any(|m| is_output.contains(m)) {
            pinned.insert(own);
        }
    }
    for (s, st) in plan.schedule.iter().enumerate() {
        for &v in &reads[st.node as usize] {
            if let Storage::Owned(own) = storage[v.index()] {
                if let Some(l) = life.get_mut(&own) {
                    l.1 = l.1.max(s);
                }
            }
        }
    }
    for own in &pinned {
        if let Some(l) = life.get_mut(own) {
            l.1 = end.max(l.0);
        }
    }

    // Rule 2: buffers.
    let by_name: BTreeMap<&str, ValueId> = graph
        .values
        .iter()
        .enumerate()
        .filter(|(_, v)| !v.name.is_empty())
        .map(|(i, v)| (v.name.as_str(), ValueId::from_index(i)))
        .collect();
    let buf_label = |i: usize| -> String {
        let b = &plan.buffers[i];
        match (b.kind, b.values.first(), b.node) {
            (BufferKind::Scratch, _, Some(nd)) if (nd as usize) < n => {
                format!("scratch of {}", label(nd as usize))
            }
            (_, Some(v), _) => v.clone(),
            _ => format!("#{i}"),
        }
    };
    let mut owner_buf: BTreeMap<ValueId, usize> = BTreeMap::new();
    let mut scratch_buf: BTreeMap<usize, usize> = BTreeMap::new();
    // Recomputed lifetime of every plan buffer.
    let mut span: Vec<(usize, usize)> = Vec::with_capacity(plan.buffers.len());
    for (bi, b) in plan.buffers.iter().enumerate() {
        if b.kind == BufferKind::Scratch {
            let nd = b.node.map(|x| x as usize).filter(|&x| x < n);
            let Some(nd) = nd else {
                return Err(PlanError::Scratch {
                    node: format!("{:?}", b.node),
                    why: "names no node of the graph".into(),
                });
            };
            let want =
                scratch_bytes(graph, facts, nd, &plan.dims).map_err(|why| PlanError::Scratch {
                    node: label(nd),
                    why,
                })?;
            if want != b.size {
                return Err(PlanError::Scratch {
                    node: label(nd),
                    why: format!("size {} B but the op needs {want} B", b.size),
                });
            }
            if scratch_buf.insert(nd, bi).is_some() {
                return Err(PlanError::Scratch {
                    node: label(nd),
                    why: "two scratch buffers".into(),
                });
            }
            let s = pos[nd];
            if (b.first, b.last) != (s, s) {
                return Err(PlanError::Lifetime {
                    value: buf_label(bi),
                    plan_first: b.first,
                    plan_last: b.last,
                    first: s,
                    last: s,
                });
            }
            span.push((s, s));
            continue;
        }
        let Some(first) = b.values.first() else {
            return Err(PlanError::NotOwner {
                value: format!("#{bi}"),
                why: "lists no value".into(),
            });
        };
        let Some(&own) = by_name.get(first.as_str()) else {
            return Err(PlanError::NotOwner {
                value: first.clone(),
                why: "no value of the graph has this name".into(),
            });
        };
        match storage[own.index()] {
            Storage::Owned(o) if o == own => {}
            Storage::Owned(o) => {
                return Err(PlanError::NotOwner {
                    value: first.clone(),
                    why: format!("it is a view of '{}', which owns the bytes", vname(o)),
                })
            }
            Storage::Resident => {
                return Err(PlanError::NotOwner {
                    value: first.clone(),
                    why: "it is a weight or graph input (or a view of one), held outside the arena"
                        .into(),
                })
            }
            Storage::None => {
                return Err(PlanError::NotOwner {
                    value: first.clone(),
                    why: "the graph holds no storage for it".into(),
                })
            }
        }
        if owner_buf.insert(own, bi).is_some() {
            return Err(PlanError::DuplicateBuffer {
                value: first.clone(),
            });
        }
        let want_members = &members[&own];
        let mut got: Vec<&str> = b.values.iter().map(String::as_str).collect();
        let mut want: Vec<&str> = want_members
            .iter()
            .map(|v| graph.values[v.index()].name.as_str())
            .collect();
        got.sort_unstable();
        want.sort_unstable();
        if got != want {
            return Err(PlanError::BufferValues {
                value: first.clone(),
                plan: b.values.join(", "),
                want: want.join(", "),
            });
        }
        let size = size_of(own)?;
        if size != b.size {
            return Err(PlanError::BufferSize {
                value: first.clone(),
                plan: b.size,
                want: size,
            });
        }
        let (f, l) = life[&own];
        if (b.first, b.last) != (f, l) {
            return Err(PlanError::Lifetime {
                value: first.clone(),
                plan_first: b.first,
                plan_last: b.last,
                first: f,
                last: l,
            });
        }
        let is_pinned = pinned.contains(&own);
        if is_pinned != (b.kind == BufferKind::Output) {
            return Err(PlanError::Kind {
                value: first.clone(),
                plan: b.kind,
                why: if is_pinned {
                    "holds a graph output"
                } else {
                    "holds no graph output"
                },
            });
        }
        span.push((f, l));
    }
    for &own in members.keys() {
        if !owner_buf.contains_key(&own) {
            return Err(PlanError::MissingBuffer { value: vname(own) });
        }
    }
    for st in &plan.schedule {
        let nd = st.node as usize;
        let want =
            scratch_bytes(graph, facts, nd, &plan.dims).map_err(|why| PlanError::Scratch {
                node: label(nd),
                why,
            })?;
        if want > 0 && !scratch_buf.contains_key(&nd) {
            return Err(PlanError::Scratch {
                node: label(nd),
                why: format!("needs {want} B but the plan gives it no buffer"),
            });
        }
    }

    // Rule 3: alignment.
    let align = plan.align.max(1);
    for (bi, b) in plan.buffers.iter().enumerate() {
        if b.offset % align != 0 || b.offset.checked_add(b.size).is_none() {
            return Err(PlanError::Misaligned {
                value: buf_label(bi),
                offset: b.offset,
                align,
            });
        }
    }

    // Rule 5: in-place decisions (checked before overlaps, which they exempt).
    let mut exempt: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut used_in: BTreeSet<ValueId> = BTreeSet::new();
    let mut used_out: BTreeSet<ValueId> = BTreeSet::new();
    for ip in &plan.inplace {
        let nd = ip.node as usize;
        let bad = |rule: String| PlanError::InPlace {
            node: if nd < n {
                label(nd)
            } else {
                format!("#{}", ip.node)
            },
            input: ip.input.clone(),
            output: ip.output.clone(),
            rule,
        };
        if nd >= n {
            return Err(bad("no such node".into()));
        }
        let node = &graph.nodes[nd];
        let out0 = node.outputs.first().copied().flatten();
        let Some(out) = out0.filter(|o| graph.values[o.index()].name == ip.output) else {
            return Err(bad("only output 0 of a node may be written in place".into()));
        };
        let overwritable = ops::lookup(node).map(|d| d.mem.inplace).unwrap_or(&[]);
        let slot = node.inputs.iter().enumerate().find(|(slot, x)| {
            x.is_some_and(|x| graph.values[x.index()].name == ip.input)
                && overwritable.contains(slot)
        });
        let Some((slot, Some(input))) = slot else {
            return Err(bad(format!(
                "{} may not overwrite that input (overwritable slots: {overwritable:?})",
                node.op
            )));
        };
        let input = *input;
        let elementwise = ops::lookup(node).is_some_and(|d| d.mem.inplace_elementwise);
        if storage[out.index()] != Storage::Owned(out) {
            return Err(bad("the output is a view, it owns no buffer".into()));
        }
        let Storage::Owned(src) = storage[input.index()] else {
            return Err(bad(
                "the input is a graph input or weight (or a view of one)".into(),
            ));
        };
        if pinned.contains(&src) {
            return Err(bad("the input's buffer holds a graph output".into()));
        }
        let shared = node.inputs.iter().enumerate().any(|(k, y)| {
            y.is_some_and(|y| {
                k != slot
                    && storage[y.index()] == Storage::Owned(src)
                    && (y != input || !elementwise)
            })
        });
        if shared {
            return Err(bad(
                "another input of the node reads the overwritten buffer".into(),
            ));
        }
        let s = pos[nd];
        if life[&src].1 != s {
            let later = plan.schedule[life[&src].1].node as usize;
            return Err(bad(format!(
                "node {} still reads the input's buffer after this node",
                label(later)
            )));
        }
        let (sin, ssrc, sout) = (size_of(input)?, size_of(src)?, size_of(out)?);
        if sin != sout || ssrc != sout {
            return Err(bad(format!(
                "sizes differ: input {sin} B, its buffer {ssrc} B, output {sout} B"
            )));
        }
        let (di, d_o) = (facts.get(input).dtype, facts.get(out).dtype);
        if di != d_o || di.is_none() {
            return Err(bad(format!("dtypes differ: {di:?} vs {d_o:?}")));
        }
        if !used_in.insert(src) || !used_out.insert(out) {
            return Err(bad("a buffer is taken over twice".into()));
        }
        let (bi, bo) = (owner_buf[&src], owner_buf[&out]);
        if plan.buffers[bi].offset != plan.buffers[bo].offset {
            return Err(bad(format!(
                "the output is at offset {} but the input's buffer at {}",
                plan.buffers[bo].offset, plan.buffers[bi].offset
            )));
        }
        exempt.insert((bi.min(bo), bi.max(bo)));
    }

    // Rule 8 first: an offloaded buffer is two device pieces, before and after its time on the
    // host, each reserved while its copy is in flight.
    let pieces = offloads(graph, plan, &span, &reads, &pos, &exempt, &by_name)?;
    // Rule 4 over the pieces.
    overlaps(&pieces, &exempt, n, &buf_label)?;

    // Rule 6: arena and resident bytes.
    let want = pieces.iter().map(|p| p.offset + p.size).max().unwrap_or(0);
    if want != plan.arena_bytes {
        return Err(PlanError::Arena {
            plan: plan.arena_bytes,
            want,
        });
    }
    let mut resident = 0u64;
    for (i, v) in graph.values.iter().enumerate() {
        if matches!(
            v.kind,
            ValueKind::Input | ValueKind::Initializer(_) | ValueKind::SparseInitializer(_)
        ) {
            resident += size_of(ValueId::from_index(i))?;
        }
    }
    if resident != plan.resident_bytes {
        return Err(PlanError::Resident {
            plan: plan.resident_bytes,
            want: resident,
        });
    }
    for b in &plan.bodies {
        let nd = b.node as usize;
        let listed = plan.bodies.iter().filter(|o| o.node == b.node).count();
        let why = if nd >= n || !ops::control::is_control(&graph.nodes[nd].op) {
            "the node runs no body"
        } else if listed > 1 {
            "the node has two body plans"
        } else {
            continue;
        };
        return Err(PlanError::Body {
            node: if nd < n { label(nd) } else { format!("#{nd}") },
            why: why.into(),
        });
    }
    let mut heap = 0u64;
    for (nd, node) in graph.nodes.iter().enumerate() {
        if !ops::control::is_control(&node.op) {
            continue;
        }
        let first = ops::control::outputs_made_first(node, facts.opset);
        let mut outs = 0u64;
        for (slot, o) in node.outputs.iter().enumerate() {
            let Some(o) = *o else { continue };
            if storage[o.index()] == Storage::Owned(o) && !first.contains(&slot) {
                outs += size_of(o)?;
            }
        }
        let body = match plan.body(nd as u32) {
            Some(bp) => {
                body_plan(graph, facts, nd, bp, &plan.dims).map_err(|why| PlanError::Body {
                    node: label(nd),
                    why,
                })?
            }
            None => body_scratch_bytes(graph, facts, nd, &plan.dims).map_err(|why| {
                PlanError::Scratch {
                    node: label(nd),
                    why,
                }
            })?,
        };
        heap = heap.max(body + outs);
    }
    if heap != plan.heap_bytes {
        return Err(PlanError::Heap {
            plan: plan.heap_bytes,
            want: heap,
        });
    }
    tiers(plan)
}

/// Rule 4: no overlap among the device pieces live at the same step, except in-place pairs. The
/// steps are swept keeping the live pieces ordered by offset; the live set is disjoint except for
/// exempt in-place pairs, so only the neighbours of a new piece can collide with it. A collision
/// inside an offload's copy window (rule 8: the range a copy reads or writes) is reported as such.
fn overlaps(
    pieces: &[Piece],
    exempt: &BTreeSet<(usize, usize)>,
    n: usize,
    buf_label: &dyn Fn(usize) -> String,
) -> Result<(), PlanError> {
    let mut starts: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut ends: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (pi, pc) in pieces.iter().enumerate() {
        if pc.size == 0 {
            continue;
        }
        starts[pc.first].push(pi);
        ends[pc.last].push(pi);
    }
    let mut live: BTreeSet<(u64, usize)> = BTreeSet::new();
    for s in 0..n {
        for &pi in &starts[s] {
            let (bi, lo) = (pieces[pi].buf, pieces[pi].offset);
            let hi = lo + pieces[pi].size;
            let collide = |pj: usize| -> Result<(), PlanError> {
                let (c, bj) = (&pieces[pj], pieces[pj].buf);
                let overlap = c.offset < hi && lo < c.offset + c.size;
                if !overlap || exempt.contains(&(bi.min(bj), bi.max(bj))) {
                    return Ok(());
                }
                for (mine, other) in [(&pieces[pi], bj), (c, bi)] {
                    if let Some((from, to, what)) = mine.copy.filter(|w| w.0 <= s && s <= w.1) {
                        return Err(PlanError::InFlight {
                            value: buf_label(mine.buf),
                            other: buf_label(other),
                            step: s,
                            what,
                            from,
                            to,
                        });
                    }
                }
                Err(PlanError::Overlap {
                    a: buf_label(bj),
                    b: buf_label(bi),
                    step: s,
                })
            };
            for &(_, pj) in live.range(..(lo, usize::MAX)).rev() {
                let c = &pieces[pj];
                if c.offset + c.size <= lo {
                    break;
                }
                collide(pj)?;
            }
            for &(off, pj) in live.range((lo, 0)..) {
                if off >= hi {
                    break;
                }
                collide(pj)?;
            }
            live.insert((lo, pi));
        }
        for &pi in &ends[s] {
            live.remove(&(pieces[pi].offset, pi));
        }
    }
    Ok(())
}

/// Rule 8's totals: the host tier holds what the plan says, and the device tier (arena, resident
/// and heap bytes) is within the plan's device budget.
fn tiers(plan: &Plan) -> Result<(), PlanError> {
    let host = host_peak(&plan.offloads);
    if host != plan.host_bytes {
        return Err(PlanError::Host {
            plan: plan.host_bytes,
            want: host,
        });
    }
    if let Some(budget) = plan.device_budget {
        let peak = plan.arena_bytes + plan.resident_bytes + plan.heap_bytes;
        if peak > budget {
            return Err(PlanError::DeviceBudget { peak, budget });
        }
    }
    Ok(())
}

/// A buffer's stretch of device memory: live over steps `first..=last` at `offset`.
#[derive(Clone, Copy, Debug)]
struct Piece {
    buf: usize,
    first: usize,
    last: usize,
    offset: u64,
    size: u64,
    /// The steps `from..=to` during which an offload's copy reads (copy out) or writes (copy back)
    /// this piece, and which copy.
    copy: Option<(usize, usize, &'static str)>,
}

/// Rule 8: each offload names a buffer that holds one value (no views, no assembled parts), takes
/// part in no in-place reuse, and is offloaded once; its steps are ordered
/// `first <= out_after <= out_done < in_start <= in_before <= last` within the buffer's lifetime,
/// with at least one step between `out_after` and `in_before`; no node reads it between
/// `out_after` and `in_before` (strictly): it is then being copied out, on the host, or being
/// copied back; its device range after the gap has the buffer's size and alignment. Returns every
/// buffer's device pieces: an offloaded one has two, the first reserved through `out_done` (the
/// copy out reads it until then), the second from `in_start` (the copy back writes it from then),
/// which rule 4 keeps apart from every other piece live at the same steps.
fn offloads(
    graph: &Graph,
    plan: &Plan,
    span: &[(usize, usize)],
    reads: &[Vec<ValueId>],
    pos: &[usize],
    exempt: &BTreeSet<(usize, usize)>,
    by_name: &BTreeMap<&str, ValueId>,
) -> Result<Vec<Piece>, PlanError> {
    let mut off_of: BTreeMap<usize, &crate::plan::Offload> = BTreeMap::new();
    for o in &plan.offloads {
        let bad = |why: String| PlanError::Offload {
            value: o.value.clone(),
            why,
        };
        let bi = plan
            .buffers
            .iter()
            .position(|b| b.kind != BufferKind::Scratch && b.values.first() == Some(&o.value))
            .ok_or_else(|| bad("no buffer holds it".into()))?;
        let b = &plan.buffers[bi];
        if b.kind != BufferKind::Activation || b.values.len() != 1 {
            return Err(bad(
                "only a buffer that holds one value and no graph output may move".into(),
            ));
        }
        if exempt.iter().any(|&(x, y)| x == bi || y == bi) {
            return Err(bad("its buffer takes part in an in-place reuse".into()));
        }
        let (f, l) = span[bi];
        if !(f <= o.out_after && o.out_after + 1 < o.in_before && o.in_before <= l) {
            return Err(bad(format!(
                "steps {}..{} are not a gap within its lifetime {f}..{l}",
                o.out_after, o.in_before
            )));
        }
        if !(o.out_after <= o.out_done && o.out_done < o.in_start && o.in_start <= o.in_before) {
            return Err(bad(format!(
                "its copies are not in order: out after step {}, done after step {}, back from step {}, done before step {}",
                o.out_after, o.out_done, o.in_start, o.in_before
            )));
        }
        if o.size != b.size || o.offset % plan.align.max(1) != 0 {
            return Err(bad("its device range after the gap does not fit it".into()));
        }
        let v = by_name
            .get(o.value.as_str())
            .copied()
            .ok_or_else(|| bad("no such value".into()))?;
        for (nd, r) in reads.iter().enumerate() {
            let s = pos[nd];
            if s > o.out_after && s < o.in_before && r.contains(&v) {
                let when = if s <= o.out_done {
                    "while it is being copied out"
                } else if s >= o.in_start {
                    "while it is being copied back"
                } else {
                    "while it is on the host"
                };
                return Err(bad(format!(
                    "node {} reads it at step {s}, {when} (out after step {}, back before step {})",
                    graph.nodes[nd].label(memplan_ir::NodeId(nd as u32)),
                    o.out_after,
                    o.in_before
                )));
            }
        }
        if off_of.insert(bi, o).is_some() {
            return Err(bad("it is offloaded twice".into()));
        }
    }
    let mut pieces = Vec::with_capacity(plan.buffers.len() + off_of.len());
    for (bi, b) in plan.buffers.iter().enumerate() {
        let (first, last) = span[bi];
        match off_of.get(&bi) {
            None => pieces.push(Piece {
                buf: bi,
                first,
                last,
                offset: b.offset,
                size: b.size,
                copy: None,
            }),
            Some(o) => {
                pieces.push(Piece {
                    buf: bi,
                    first,
                    last: o.out_done,
                    offset: b.offset,
                    size: b.size,
                    copy: (o.out_done > o.out_after).then_some((
                        o.out_after + 1,
                        o.out_done,
                        "copy out",
                    )),
                });
                pieces.push(Piece {
                    buf: bi,
                    first: o.in_start,
                    last,
                    offset: o.offset,
                    size: b.size,
                    copy: (o.in_start < o.in_before).then_some((
                        o.in_start,
                        o.in_before - 1,
                        "copy back",
                    )),
                });
            }
        }
    }
    Ok(pieces)
}

/// The most the host tier holds at once: an offloaded buffer's copy is made after step `out_after`
/// and released after step `in_before` (it is copied back before that step runs), so it counts over
/// steps `out_after + 1..=in_before`.
pub fn host_peak(offloads: &[crate::plan::Offload]) -> u64 {
    let held: Vec<crate::place::Block> = offloads
        .iter()
        .filter(|o| o.out_after < o.in_before)
        .map(|o| crate::place::Block {
            first: o.out_after + 1,
            last: o.in_before,
            size: o.size,
        })
        .collect();
    crate::place::lower_bound(&held)
}

/// Rule 7: every assembled `Concat` is one the op allows (each input a contiguous run of the
/// output), its parts are its inputs in order, each a distinct value that owns its storage (made by
/// a node, not a view, not resident), is no graph output, is made by no assembled `Concat` and
/// belongs to no other one, at offsets that are the running sum of the parts' sizes, which add up
/// to the output's. Then each part, and every view of it, shares the output's storage.
fn assembled(
    graph: &Graph,
    facts: &Facts,
    plan: &Plan,
    is_output: &BTreeSet<ValueId>,
    storage: &mut [Storage],
) -> Result<(), PlanError> {
    if plan.assembled.is_empty() {
        return Ok(());
    }
    let n = graph.nodes.len();
    let size_of = |v: ValueId| -> Option<u64> {
        let e = facts.values.get(v.index())?.bytes()?;
        e.eval_map(&plan.dims).ok().map(|x| x.max(0) as u64)
    };
    let nodes: BTreeSet<usize> = plan.assembled.iter().map(|a| a.node as usize).collect();
    let mut part_of: BTreeMap<ValueId, ValueId> = BTreeMap::new();
    for a in &plan.assembled {
        let nd = a.node as usize;
        let bad = |rule: String| PlanError::Assembled {
            node: if nd < n {
                graph.nodes[nd].label(memplan_ir::NodeId(a.node))
            } else {
                format!("#{}", a.node)
            },
            rule,
        };
        if nd >= n {
            return Err(bad("no such node".into()));
        }
        let node = &graph.nodes[nd];
        let (ins, outs) = facts.node_io(node);
        if !ops::axes::concat_in_place(node, &ins, &outs) {
            return Err(bad(
                "not a Concat whose inputs are contiguous runs of its output".into(),
            ));
        }
        let Some(y) = node.outputs.first().copied().flatten() else {
            return Err(bad("no output".into()));
        };
        if graph.values[y.index()].name != a.output {
            return Err(bad(format!("its output is not '{}'", a.output)));
        }
        let names: Vec<&str> = node
            .inputs
            .iter()
            .map(|i| i.map_or("", |v| graph.values[v.index()].name.as_str()))
            .collect();
        let listed: Vec<&str> = a.parts.iter().map(|p| p.value.as_str()).collect();
        if names != listed {
            return Err(bad(format!(
                "parts [{}] are not its inputs [{}]",
                listed.join(", "),
                names.join(", ")
            )));
        }
        let mut offset = 0u64;
        for (p, v) in a.parts.iter().zip(node.input_ids()) {
            if storage[v.index()] != Storage::Owned(v) {
                return Err(bad(format!(
                    "part '{}' is a view, a weight or a graph input",
                    p.value
                )));
            }
            let made_by_assembled = match graph.values[v.index()].kind {
                ValueKind::Node { node: q, .. } => nodes.contains(&q.index()),
                _ => true,
            };
            if made_by_assembled || is_output.contains(&v) {
                return Err(bad(format!(
                    "part '{}' is a graph output or made by an assembled Concat",
                    p.value
                )));
            }
            if part_of.insert(v, y).is_some() {
                return Err(bad(format!("part '{}' is assembled twice", p.value)));
            }
            if size_of(v) != Some(p.size) || p.offset != offset {
                return Err(bad(format!(
                    "part '{}' at offset {} with {} B, but the parts before it end at {offset} and it has {:?} B",
                    p.value,
                    p.offset,
                    p.size,
                    size_of(v)
                )));
            }
            offset += p.size;
        }
        if size_of(y) != Some(offset) {
            return Err(bad(format!(
                "the parts take {offset} B but the output {:?} B",
                size_of(y)
            )));
        }
    }
    for s in storage.iter_mut() {
        if let Storage::Owned(o) = *s {
            if let Some(&y) = part_of.get(&o) {
                *s = Storage::Owned(y);
            }
        }
    }
    Ok(())
}

/// Heap bytes a control-flow node's bodies hold beyond its outputs (0 for other nodes).
fn body_scratch_bytes(
    graph: &Graph,
    facts: &Facts,
    nd: usize,
    dims: &BTreeMap<String, i64>,
) -> Result<u64, String> {
    let nid = memplan_ir::NodeId::from_index(nd);
    match memplan_sim::control::scratch(graph, facts, nid).map_err(|e| e.to_string())? {
        Some(e) => e
            .eval_map(dims)
            .map(|x| x.max(0) as u64)
            .map_err(|e| format!("scratch size unknown at the plan's dims ({e:?})")),
        None => Ok(0),
    }
}

/// What node `nd` holds on the heap while it runs its body from `bp` ([`BodyPlan::heap`]: each
/// of its lanes holds what the body's plan does), once `bp.plan` is shown to be a valid plan of
/// that body at `dims` and `bp` to run at least one lane.
fn body_plan(
    graph: &Graph,
    facts: &Facts,
    nd: usize,
    bp: &BodyPlan,
    dims: &BTreeMap<String, i64>,
) -> Result<u64, String> {
    let node = &graph.nodes[nd];
    let nid = memplan_ir::NodeId::from_index(nd);
    let body = node.subgraphs().next();
    let bf = facts.control.get(&nid).and_then(|c| c.bodies.first());
    let (true, Some(body), Some(bf)) =
        (ops::control::carries_no_state(node, facts.opset), body, bf)
    else {
        return Err("only a Scan that carries no state runs its body from a plan".into());
    };
    if &bp.plan.dims != dims {
        return Err("its body plan was made for other dims".into());
    }
    if bp.lanes == 0 {
        return Err("its body plan runs no lane".into());
    }
    check(body, bf, &bp.plan).map_err(|e| format!("body plan: {e}"))?;
    Ok(bp.heap())
}

/// Arena scratch bytes node `nd` needs at `dims`, from the op table (a control-flow node's bodies
/// run on the heap: see [`body_scratch_bytes`]).
fn scratch_bytes(
    graph: &Graph,
    facts: &Facts,
    nd: usize,
    dims: &BTreeMap<String, i64>,
) -> Result<u64, String> {
    let node = &graph.nodes[nd];
    if ops::control::is_control(&node.op) {
        return Ok(0);
    }
    let Some(f) = ops::lookup(node).and_then(|d| d.mem.scratch) else {
        return Ok(0);
    };
    let (ins, outs) = facts.node_io(node);
    f(node, facts.opset, &ins, &outs)
        .eval_map(dims)
        .map(|x| x.max(0) as u64)
        .map_err(|e| format!("scratch size unknown at the plan's dims ({e:?})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::InPlace;
    use expect_test::expect;
    use memplan_ir::graph::{DeclDim, DeclType};
    use memplan_ir::{DataType, Facts, NodeId, TensorData};

    /// x[N,4] -> mm = x·w -> relu -> view (Reshape of relu) ; neg(relu) ; add(view, neg) -> output.
    fn fixture() -> (Graph, Facts, Plan) {
        let mut g = Graph::default();
        let x = g.add_input(
            "x",
            DeclType::tensor(
                DataType::F32,
                vec![DeclDim::Param("N".into()), DeclDim::Value(4)],
            ),
        );
        let w = g.add_initializer(TensorData::from_f32("w", vec![4, 4], &[0.5; 16]));
        let shape = g.add_initializer(TensorData::from_i64("shape", vec![2], &[-1, 4]));
        let (_, a) = g.add_node("mm", "MatMul", &[Some(x), Some(w)], &["a"], vec![]);
        let (_, b) = g.add_node("relu", "Relu", &[Some(a[0])], &["b"], vec![]);
        let (_, c) = g.add_node(
            "view",
            "Reshape",
            &[Some(b[0]), Some(shape)],
            &["c"],
            vec![],
        );
        let (_, d) = g.add_node("neg", "Neg", &[Some(b[0])], &["d"], vec![]);
        let (_, e) = g.add_node("add", "Add", &[Some(c[0]), Some(d[0])], &["e"], vec![]);
        g.outputs.push(e[0]);
        let facts = memplan_ir::infer_graph(&g, 18).unwrap();
        let dims = [("N".to_string(), 3)].into();
        let order: Vec<NodeId> = (0..5).map(NodeId).collect();
        let plan = crate::plan_for_schedule(&g, &facts, &dims, &order).unwrap();
        (g, facts, plan)
    }

    fn err(f: impl FnOnce(&mut Plan)) -> String {
        let (g, facts, mut plan) = fixture();
        f(&mut plan);
        check(&g, &facts, &plan).unwrap_err().to_string()
    }

    fn buf<'a>(p: &'a mut Plan, value: &str) -> &'a mut crate::plan::Buffer {
        p.buffers
            .iter_mut()
            .find(|b| b.values.first().is_some_and(|v| v == value))
            .unwrap()
    }

    #[test]
    fn the_planned_fixture_is_valid() {
        let (g, facts, plan) = fixture();
        assert_eq!(check(&g, &facts, &plan), Ok(()));
        expect![[r#"
            plan at N=3: 5 steps, 4 buffers, arena 112 B, resident 128 B, align 64
            schedule
                 0  mm (MatMul)
                 1  relu (Relu)
                 2  view (Reshape)
                 3  neg (Neg)
                 4  add (Add)
            buffers (offset, size, steps, values)
                       0         48     0..1     a
                       0         48     1..4     b = c
                      64         48     3..4     d
                       0         48     4..4     e [output]
            in place
              relu (Relu): b over a
              add (Add): e over c
        "#]]
        .assert_eq(&plan.render());
        let back = Plan::from_json(&plan.to_json()).unwrap();
        assert_eq!(back, plan);
    }

    #[test]
    fn schedule_rules() {
        expect!["schedule: node 'relu' (Relu) runs before 'a' is made (not a topological order)"]
            .assert_eq(&err(|p| p.schedule.swap(0, 1)));
        expect!["schedule: node 'mm' (MatMul) runs twice (steps 0 and 1)"]
            .assert_eq(&err(|p| p.schedule[1] = p.schedule[0].clone()));
        expect!["schedule: 4 steps for a graph of 5 nodes"].assert_eq(&err(|p| {
            p.schedule.pop();
        }));
        expect!["schedule: step 2 names node #9, which the graph does not have"]
            .assert_eq(&err(|p| p.schedule[2].node = 9));
        expect!["schedule: step 2 names node #2 as 'other (Reshape)' but the graph's node is 'view (Reshape)' (a plan for another graph?)"]
            .assert_eq(&err(|p| p.schedule[2].name = "other".into()));
    }

    #[test]
    fn buffer_rules() {
        expect!["buffer 'b': size 44 B but the facts give 48 B at the plan's dims"]
            .assert_eq(&err(|p| buf(p, "b").size = 44));
        expect!["buffer 'b': live over steps 1..3 but the schedule makes it live over 1..4"]
            .assert_eq(&err(|p| buf(p, "b").last = 3));
        expect!["buffer 'b': lists values [b] but shares its bytes with [b, c]"]
            .assert_eq(&err(|p| buf(p, "b").values.truncate(1)));
        expect!["buffer 'c': it is a view of 'b', which owns the bytes"]
            .assert_eq(&err(|p| buf(p, "b").values.reverse()));
        expect!["value 'd' owns storage but no buffer holds it"].assert_eq(&err(|p| {
            p.buffers
                .retain(|b| b.values.first().is_none_or(|v| v != "d"))
        }));
        expect![
            "buffer 'x': it is a weight or graph input (or a view of one), held outside the arena"
        ]
        .assert_eq(&err(|p| buf(p, "d").values = vec!["x".into()]));
        expect!["buffer 'e': kind Activation but it holds a graph output"]
            .assert_eq(&err(|p| buf(p, "e").kind = BufferKind::Activation));
        expect!["buffer 'd': offset 65 is not a multiple of the alignment 64"]
            .assert_eq(&err(|p| buf(p, "d").offset = 65));
        expect!["arena: the plan says 1000 B but its buffers end at 112 B"]
            .assert_eq(&err(|p| p.arena_bytes = 1000));
        expect!["resident bytes: the plan says 0 B but the weights and inputs take 128 B"]
            .assert_eq(&err(|p| p.resident_bytes = 0));
        expect!["heap bytes: the plan says 8 B but its control-flow bodies take 0 B"]
            .assert_eq(&err(|p| p.heap_bytes = 8));
        expect![[r#"value 'a': size unknown at the plan's dims (UnboundSymbol("N"))"#]]
            .assert_eq(&err(|p| p.dims.clear()));
    }

    #[test]
    fn overlap_rule() {
        // d (steps 3..4) moved onto b (1..4).
        expect!["buffers 'b' and 'd' are both live at step 3 and overlap in the arena"]
            .assert_eq(&err(|p| buf(p, "d").offset = 0));
        // Without its in-place decision, e over c is an overlap.
        expect!["buffers 'b' and 'e' are both live at step 4 and overlap in the arena"].assert_eq(
            &err(|p| {
                p.inplace.pop();
            }),
        );
    }

    /// An op that modifies a copy of its input (not elementwise) may not write over a buffer that
    /// another of its inputs also reads, even as the same value: the planner does not, and a plan
    /// that does is refused.
    #[test]
    fn an_overwrite_op_may_not_take_a_buffer_another_input_reads() {
        let mut g = Graph::default();
        let x = g.add_input(
            "x",
            DeclType::tensor(DataType::F32, vec![DeclDim::Value(2), DeclDim::Value(4)]),
        );
        let idx = g.add_initializer(TensorData::from_i64("idx", vec![2, 4], &[0; 8]));
        let (_, r) = g.add_node("relu", "Relu", &[Some(x)], &["r"], vec![]);
        let (_, s) = g.add_node(
            "scatter",
            "ScatterElements",
            &[Some(r[0]), Some(idx), Some(r[0])],
            &["s"],
            vec![],
        );
        g.outputs.push(s[0]);
        let facts = memplan_ir::infer_graph(&g, 18).unwrap();
        let order: Vec<NodeId> = (0..2).map(NodeId).collect();
        let mut plan = crate::plan_for_schedule(&g, &facts, &BTreeMap::new(), &order).unwrap();
        assert!(plan.inplace.is_empty(), "{}", plan.render());
        assert_eq!(check(&g, &facts, &plan), Ok(()));
        let at = buf(&mut plan, "r").offset;
        buf(&mut plan, "s").offset = at;
        plan.inplace.push(InPlace {
            node: 1,
            input: "r".into(),
            output: "s".into(),
        });
        expect!["in-place at node 'scatter' (ScatterElements): 's' over 'r': another input of the node reads the overwritten buffer"]
            .assert_eq(&check(&g, &facts, &plan).unwrap_err().to_string());
    }

    #[test]
    fn inplace_rules() {
        let ip = |node: u32, input: &str, output: &str| InPlace {
            node,
            input: input.into(),
            output: output.into(),
        };
        // b is still read (through its view c) by `add` after `neg`.
        expect!["in-place at node 'neg' (Neg): 'd' over 'b': node 'add' (Add) still reads the input's buffer after this node"]
            .assert_eq(&err(|p| {
                p.inplace.push(ip(3, "b", "d"));
            }));
        expect!["in-place at node 'mm' (MatMul): 'a' over 'x': MatMul may not overwrite that input (overwritable slots: [])"]
            .assert_eq(&err(|p| p.inplace.push(ip(0, "x", "a"))));
        expect!["in-place at node 'view' (Reshape): 'c' over 'b': Reshape may not overwrite that input (overwritable slots: [])"]
            .assert_eq(&err(|p| p.inplace.push(ip(2, "b", "c"))));
        expect!["in-place at node 'relu' (Relu): 'b' over 'a': the output is at offset 64 but the input's buffer at 0"]
            .assert_eq(&err(|p| {
                buf(p, "b").offset = 64;
                buf(p, "d").offset = 128;
                p.arena_bytes = 176;
            }));
        expect!["in-place at node 'add' (Add): 'x' over 'c': only output 0 of a node may be written in place"]
            .assert_eq(&err(|p| p.inplace[1].output = "x".into()));
        expect!["in-place at node 'relu' (Relu): 'b' over 'a': a buffer is taken over twice"]
            .assert_eq(&err(|p| p.inplace.push(p.inplace[0].clone())));
    }

    /// x[2,4] and w[2,4] (a weight) -> s = Add(w, x) -> t = Relu(s) -> u = Neg(t); s and u outputs.
    #[test]
    fn inplace_never_takes_inputs_weights_or_outputs() {
        let mut g = Graph::default();
        let x = g.add_input(
            "x",
            DeclType::tensor(DataType::F32, vec![DeclDim::Value(2), DeclDim::Value(4)]),
        );
        let w = g.add_initializer(TensorData::from_f32("w", vec![2, 4], &[1.0; 8]));
        let (_, s) = g.add_node("add", "Add", &[Some(w), Some(x)], &["s"], vec![]);
        let (_, t) = g.add_node("relu", "Relu", &[Some(s[0])], &["t"], vec![]);
        let (_, u) = g.add_node("neg", "Neg", &[Some(t[0])], &["u"], vec![]);
        g.outputs.extend([s[0], u[0]]);
        let facts = memplan_ir::infer_graph(&g, 18).unwrap();
        let order: Vec<NodeId> = (0..3).map(NodeId).collect();
        let plan = crate::plan_for_schedule(&g, &facts, &BTreeMap::new(), &order).unwrap();
        // The planner itself reuses only t (for u).
        assert_eq!(plan.inplace.len(), 1);
        assert_eq!(plan.inplace[0].input, "t");
        let bad = |node: u32, input: &str, output: &str| {
            let mut p = plan.clone();
            p.inplace.push(InPlace {
                node,
                input: input.into(),
                output: output.into(),
            });
            check(&g, &facts, &p).unwrap_err().to_string()
        };
        expect!["in-place at node 'add' (Add): 's' over 'w': the input is a graph input or weight (or a view of one)"]
            .assert_eq(&bad(0, "w", "s"));
        expect!["in-place at node 'add' (Add): 's' over 'x': the input is a graph input or weight (or a view of one)"]
            .assert_eq(&bad(0, "x", "s"));
        expect![
            "in-place at node 'relu' (Relu): 't' over 's': the input's buffer holds a graph output"
        ]
        .assert_eq(&bad(1, "s", "t"));
    }
}
