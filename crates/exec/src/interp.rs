//! The interpreter: runs a graph over a schedule, allocating each value when produced and freeing it
//! right after its last reader (exactly the simulator's lifetimes), with views shared, not copied.
//! [`run_planned`] does the same from one arena at the offsets of a checked plan.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use memplan_ir::graph::{DeclDim, Graph, NodeId, ValueId, ValueKind};
use memplan_ir::infer::Facts;
use memplan_ir::DataType;

use memplan_plan::{BufferKind, Plan};

use crate::arena::{self, Arena};
use crate::host::HostTier;
use crate::inplace;
use crate::mem::MemStats;
use crate::ops::{self, OpCtx, OpFail};
use crate::tensor::{Tensor, TensorError};

/// Why a run failed. Each variant names the node, input or output concerned.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("input '{name}': {msg}")]
    Input { name: String, msg: String },
    #[error("node {node}: {msg}")]
    Node { node: String, msg: String },
    #[error("node {node}: op {op} is not implemented by the executor")]
    NotImplemented { node: String, op: String },
    #[error("weight '{name}': {source}")]
    Weight { name: String, source: TensorError },
    #[error("output '{name}' was not produced")]
    MissingOutput { name: String },
    #[error("schedule: {0}")]
    Schedule(String),
    #[error("invalid plan: {0}")]
    Plan(String),
}

/// The result of a run.
#[derive(Debug)]
pub struct RunResult {
    /// Graph outputs by name, in graph order.
    pub outputs: Vec<(String, Tensor)>,
    /// Peak of all tensor memory held: weights, inputs, activations, outputs and op scratch.
    pub peak_bytes: u64,
    /// Weights and inputs (held for the whole run).
    pub resident_bytes: u64,
    /// Symbol values bound from the inputs' shapes.
    pub dims: BTreeMap<String, i64>,
    pub seconds: f64,
    /// For a planned run ([`run_planned`]): the arena and how the run kept to the plan.
    pub plan: Option<PlanReport>,
    /// Nodes whose kernel held a different amount of scratch at once than the op table's scratch
    /// rule gives at the run's dims (one line each, naming the node and both sizes). Empty when
    /// the simulator's scratch is the executor's.
    pub scratch_mismatches: Vec<String>,
    /// Wall time of each node's op call (in-place runs and planned-output copies included), by
    /// `NodeId` index; zero for nodes the schedule did not run.
    pub node_seconds: Vec<f64>,
}

/// Options of a run.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// The schedule; `None` runs the facts' topological order.
    pub schedule: Option<Vec<NodeId>>,
}

/// Binds the graph's symbolic input dims from the given tensors and checks types and fixed dims.
pub fn bind_inputs(
    graph: &Graph,
    inputs: &BTreeMap<String, Tensor>,
) -> Result<BTreeMap<String, i64>, ExecError> {
    let mut dims: BTreeMap<String, i64> = BTreeMap::new();
    // (input, dim index, declared dim_param, size) of every symbolic dim given.
    let mut declared: Vec<(String, usize, String, i64)> = Vec::new();
    for name in inputs.keys() {
        let ok = graph.inputs.iter().any(|&v| &graph.value(v).name == name);
        if !ok {
            let names: Vec<&str> = graph
                .inputs
                .iter()
                .filter(|&&v| !matches!(graph.value(v).kind, ValueKind::Initializer(_)))
                .map(|&v| graph.value(v).name.as_str())
                .collect();
            return Err(ExecError::Input {
                name: name.clone(),
                msg: format!(
                    "the model has no such input (its inputs: {})",
                    names.join(", ")
                ),
            });
        }
    }
    for &v in &graph.inputs {
        let val = graph.value(v);
        let Some(t) = inputs.get(&val.name) else {
            if matches!(val.kind, ValueKind::Initializer(_)) {
                continue;
            }
            return Err(ExecError::Input {
                name: val.name.clone(),
                msg: "is required but not given".into(),
            });
        };
        let packed_decl = val.decl.as_ref().is_some_and(|d| {
            matches!(
                d.ty,
                memplan_ir::graph::TypeDecl::Sequence(_) | memplan_ir::graph::TypeDecl::Optional(_)
            )
        });
        if packed_decl != t.seq.is_some() {
            let (want, have) = if packed_decl {
                ("a sequence or optional", "a tensor")
            } else {
                ("a tensor", "a sequence or optional")
            };
            return Err(ExecError::Input {
                name: val.name.clone(),
                msg: format!("is {have} but the model expects {want}"),
            });
        }
        let Some((elem, decl_dims)) = val.decl.as_ref().and_then(|d| d.as_tensor()) else {
            continue;
        };
        if let Some(e) = elem {
            if e != t.dtype {
                return Err(ExecError::Input {
                    name: val.name.clone(),
                    msg: format!("has type {} but the model expects {e}", t.dtype),
                });
            }
        }
        let Some(decl_dims) = decl_dims else { continue };
        if decl_dims.len() != t.rank() {
            return Err(ExecError::Input {
                name: val.name.clone(),
                msg: format!(
                    "has rank {} ({:?}) but the model expects rank {}",
                    t.rank(),
                    t.shape,
                    decl_dims.len()
                ),
            });
        }
        for (k, (d, &have)) in decl_dims.iter().zip(&t.shape).enumerate() {
            match &d.dim {
                DeclDim::Value(c) if *c != have as i64 => {
                    return Err(ExecError::Input {
                        name: val.name.clone(),
                        msg: format!("dim {k} is {have} but the model fixes it to {c}"),
                    });
                }
                DeclDim::Param(p) => declared.push((val.name.clone(), k, p.clone(), have as i64)),
                _ => {}
            }
        }
    }
    // Names first, then the exporters' expressions of them (`256*h`).
    let pairs: Vec<(&str, i64)> = declared
        .iter()
        .map(|(_, _, p, have)| (p.as_str(), *have))
        .collect();
    memplan_ir::dim::bind_declared_dims(&pairs, &mut dims).map_err(|(i, msg)| {
        let (name, k, p, _) = &declared[i];
        ExecError::Input {
            name: name.clone(),
            msg: format!("dim {k} ({p}) {msg}"),
        }
    })?;
    Ok(dims)
}

/// Runs `graph` on `inputs` (by graph input name).
pub fn run(
    graph: &Graph,
    facts: &Facts,
    inputs: BTreeMap<String, Tensor>,
    opts: &RunOptions,
) -> Result<RunResult, ExecError> {
    let opset = 18;
    run_with_opset(graph, facts, inputs, opts, opset)
}

/// [`run`] at an explicit default-domain opset.
pub fn run_with_opset(
    graph: &Graph,
    facts: &Facts,
    inputs: BTreeMap<String, Tensor>,
    opts: &RunOptions,
    opset: i64,
) -> Result<RunResult, ExecError> {
    crate::fold::install_const_folder();
    let schedule = opts.schedule.clone().unwrap_or_else(|| facts.order.clone());
    execute(graph, facts, inputs, &schedule, None, opset)
}

/// Runs `graph` from one arena at the offsets of `plan`, in the plan's schedule.
///
/// The plan is first verified by `memplan_plan::check` (an invalid plan is refused with the rule it
/// breaks) and must have been made for the dims the inputs bind. The arena (`plan.arena_bytes`) is
/// allocated once and charged once, so the measured peak is the planned arena plus the resident
/// weights and inputs, unless an op allocates outside the plan: such cases are listed in
/// [`PlanReport`] and the output is copied into its planned range (results stay bit-identical).
/// Graph outputs are returned where the plan put them, in the arena, which is freed when the last
/// of them is dropped: nothing is copied, so the process heap holds the arena and nothing that grows
/// with the dims.
pub fn run_planned(
    graph: &Graph,
    facts: &Facts,
    inputs: BTreeMap<String, Tensor>,
    plan: &Plan,
    opset: i64,
) -> Result<RunResult, ExecError> {
    let checked =
        memplan_plan::checked(graph, facts, plan).map_err(|e| ExecError::Plan(e.to_string()))?;
    run_checked(&checked, inputs, opset)
}

/// [`run_planned`] with a plan already checked for this graph and these facts.
pub fn run_checked(
    checked: &memplan_plan::Checked<'_>,
    inputs: BTreeMap<String, Tensor>,
    opset: i64,
) -> Result<RunResult, ExecError> {
    crate::fold::install_const_folder();
    let plan = checked.plan();
    let schedule = plan.node_order();
    execute(
        checked.graph(),
        checked.facts(),
        inputs,
        &schedule,
        Some(plan),
        opset,
    )
}

/// How a planned run went against its plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanReport {
    pub arena_bytes: u64,
    /// The arena plus the resident weights and inputs: what `peak_bytes` should equal.
    pub planned_peak_bytes: u64,
    /// In-place decisions run without a copy (staged or element by element, see [`crate::inplace`]).
    pub inplace_done: usize,
    /// In-place decisions the executor cannot run in place: computed on the heap, then copied over
    /// the dead input (node labels).
    pub inplace_copied: Vec<String>,
    /// Allocations that did not fit the plan (went to the counted heap), one line each, naming the node.
    pub misses: Vec<String>,
    /// The host tier: the most bytes its copies held at once (the plan's `host_bytes`), the
    /// copies made (out and back) and the bytes they moved.
    pub host_peak_bytes: u64,
    pub transfers: usize,
    pub transfer_bytes: u64,
    /// The copies' own time, in nanoseconds: on the copier thread, beside the compute, or on the
    /// compute thread for a synchronous copy (see [`memplan_plan::Offload`]).
    pub transfer_nanos: u64,
    /// The time the compute thread waited for copies to finish (not overlapped), in nanoseconds.
    pub transfer_wait_nanos: u64,
}

/// Where a planned run puts things.
pub(crate) struct Placed<'p> {
    pub(crate) plan: &'p Plan,
    arena: Arc<Arena>,
    /// The planned byte range of each value that owns a buffer.
    range: Vec<Option<(usize, usize)>>,
    /// The scratch range of each node.
    scratch: Vec<Option<(usize, usize)>>,
    /// Per node: the in-place decision as (input slot, range).
    inplace: Vec<Option<(usize, (usize, usize))>>,
    /// Per node: a `Concat` assembled in place (its inputs already fill its output's range).
    assembled: Vec<bool>,
    /// The offloaded values (see [`memplan_plan::Offload`]), in plan order, with their device
    /// range `(offset, len)` after the gap, and whether the copy out and the copy back are
    /// synchronous (waited for as soon as they start).
    moved: Vec<(ValueId, (usize, usize), [bool; 2])>,
    /// Per step, indices into `moved`: copies back started before the step, copies back waited
    /// for before it, copies out started after it, copies out waited for after it.
    copies: Vec<[Vec<usize>; 4]>,
}

/// Slots of [`Placed::copies`].
const BACK_START: usize = 0;
const BACK_DUE: usize = 1;
const OUT_START: usize = 2;
const OUT_DUE: usize = 3;

impl<'p> Placed<'p> {
    /// Reads `plan` for `graph` and allocates its arena, charged to `stats`.
    pub(crate) fn new(
        graph: &Graph,
        plan: &'p Plan,
        dims: &BTreeMap<String, i64>,
        stats: &Arc<MemStats>,
    ) -> Result<Self, ExecError> {
        for (k, &v) in &plan.dims {
            if let Some(&have) = dims.get(k) {
                if have != v {
                    return Err(ExecError::Plan(format!(
                        "the plan was made for {k}={v} but the inputs give {k}={have}"
                    )));
                }
            }
        }
        let usize_of = |x: u64| {
            usize::try_from(x).map_err(|_| ExecError::Plan(format!("{x} B does not fit in memory")))
        };
        let arena = Arena::new(usize_of(plan.arena_bytes)?, Some(stats))
            .map_err(|e| ExecError::Plan(format!("cannot allocate the arena: {e}")))?;
        let by_name: BTreeMap<&str, ValueId> = graph
            .value_ids()
            .map(|v| (graph.value(v).name.as_str(), v))
            .filter(|(n, _)| !n.is_empty())
            .collect();
        let mut range = vec![None; graph.values.len()];
        let mut scratch = vec![None; graph.nodes.len()];
        for b in &plan.buffers {
            let r = (usize_of(b.offset)?, usize_of(b.size)?);
            match b.kind {
                BufferKind::Scratch => {
                    if let Some(n) = b.node {
                        scratch[n as usize] = Some(r);
                    }
                }
                _ => {
                    if let Some(&v) = b.values.first().and_then(|n| by_name.get(n.as_str())) {
                        range[v.index()] = Some(r);
                    }
                }
            }
        }
        // The inputs of an assembled Concat sit in their parts of the output's range.
        let mut assembled = vec![false; graph.nodes.len()];
        for a in &plan.assembled {
            let whole = by_name
                .get(a.output.as_str())
                .and_then(|y| range[y.index()]);
            let Some((off, len)) = whole else {
                return Err(ExecError::Plan(format!(
                    "assembled Concat output '{}' has no buffer",
                    a.output
                )));
            };
            for p in &a.parts {
                let (po, ps) = (usize_of(p.offset)?, usize_of(p.size)?);
                let v = by_name.get(p.value.as_str()).copied();
                match v {
                    Some(v) if po.checked_add(ps).is_some_and(|e| e <= len) => {
                        range[v.index()] = Some((off + po, ps));
                    }
                    _ => {
                        return Err(ExecError::Plan(format!(
                            "assembled part '{}' does not fit its output '{}'",
                            p.value, a.output
                        )))
                    }
                }
            }
            if let Some(x) = assembled.get_mut(a.node as usize) {
                *x = true;
            }
        }
        let mut inplace = vec![None; graph.nodes.len()];
        for ip in &plan.inplace {
            let node = graph.node(NodeId(ip.node));
            let input = by_name.get(ip.input.as_str()).copied();
            let output = by_name.get(ip.output.as_str()).copied();
            let slot = node.inputs.iter().position(|i| *i == input && i.is_some());
            match (slot, output.and_then(|o| range[o.index()])) {
                (Some(slot), Some(r)) if node.outputs.first().copied().flatten() == output => {
                    inplace[ip.node as usize] = Some((slot, r));
                }
                _ => {
                    return Err(ExecError::Plan(format!(
                        "in-place at node {}: '{}' over '{}' names no input and output 0 of it",
                        node.label(NodeId(ip.node)),
                        ip.output,
                        ip.input
                    )))
                }
            }
        }
        let steps = plan.schedule.len();
        let mut moved = Vec::with_capacity(plan.offloads.len());
        let mut copies: Vec<[Vec<usize>; 4]> = vec![Default::default(); steps];
        for (i, o) in plan.offloads.iter().enumerate() {
            let v = by_name.get(o.value.as_str()).copied();
            let at = [o.in_start, o.in_before, o.out_after, o.out_done];
            match v {
                Some(v) if at.iter().all(|&s| s < steps) => {
                    let sync = [o.out_done == o.out_after, o.in_start == o.in_before];
                    moved.push((v, (usize_of(o.offset)?, usize_of(o.size)?), sync));
                    for (slot, s) in at.into_iter().enumerate() {
                        copies[s][slot].push(i);
                    }
                }
                _ => {
                    return Err(ExecError::Plan(format!(
                        "offload of '{}' names no value or step of the graph",
                        o.value
                    )))
                }
            }
        }
        Ok(Placed {
            plan,
            arena,
            range,
            scratch,
            inplace,
            assembled,
            moved,
            copies,
        })
    }
}

/// The output of an assembled `Concat` (see [`memplan_plan::Assembled`]): its inputs were written
/// into their parts of its planned range, so it is that range, read as the joined shape.
fn assembled_output(
    node: &memplan_ir::graph::Node,
    ins: &[Option<&Tensor>],
    arena: &Arc<Arena>,
    range: Option<(usize, usize)>,
) -> Result<Tensor, String> {
    let (off, len) = range.ok_or("the output has no planned range")?;
    let first = ins
        .first()
        .copied()
        .flatten()
        .ok_or("an assembled Concat has inputs")?;
    let rank = first.shape.len();
    let axis = match node.attr("axis") {
        Some(memplan_ir::graph::AttrValue::Int(a)) => *a,
        _ => 0,
    };
    let axis = if axis < 0 { axis + rank as i64 } else { axis };
    let axis = usize::try_from(axis)
        .ok()
        .filter(|&a| a < rank)
        .ok_or("axis out of range")?;
    let mut shape = first.shape.clone();
    shape[axis] = ins.iter().flatten().map(|t| t.shape[axis]).sum();
    let bytes = first
        .dtype
        .bytes_for(shape.iter().product::<usize>() as u64);
    if bytes != len as u64 {
        return Err(format!(
            "the joined inputs take {bytes} B but the plan reserves {len} B"
        ));
    }
    Ok(Tensor::arena_range(
        first.dtype,
        &shape,
        arena.clone(),
        off,
        len,
        false,
    ))
}

/// Runs `graph` over `schedule`, from the arena of `plan` when given, on a worker thread of
/// rayon's current pool (see [`on_worker`]).
fn execute(
    graph: &Graph,
    facts: &Facts,
    inputs: BTreeMap<String, Tensor>,
    schedule: &[NodeId],
    plan: Option<&Plan>,
    opset: i64,
) -> Result<RunResult, ExecError> {
    on_worker(|| execute_here(graph, facts, inputs, schedule, plan, opset))
}

/// Runs `f` on a worker thread of rayon's current pool, so the kernels' parallel loops inside it
/// split their work with the other workers by stealing. Called from a thread outside the pool,
/// every parallel loop would instead be handed to the pool and the calling thread put to sleep
/// until it is done: two thread switches per loop, which a run of thousands of small nodes (a
/// chunked graph) pays thousands of times. Inside the pool already, `f` runs where it is.
pub(crate) fn on_worker<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        return f();
    }
    rayon::scope(|_| f())
}

/// [`execute`] on the calling thread.
fn execute_here(
    graph: &Graph,
    facts: &Facts,
    mut inputs: BTreeMap<String, Tensor>,
    schedule: &[NodeId],
    plan: Option<&Plan>,
    opset: i64,
) -> Result<RunResult, ExecError> {
    let mut dims = bind_inputs(graph, &inputs)?;
    // Input dims the file leaves unnamed have fresh symbols: bound by the tensors given.
    for &v in &graph.inputs {
        if let Some(t) = inputs.get(&graph.value(v).name) {
            bind_data_dependent(facts, v, t, &mut dims);
        }
    }
    let timeline = memplan_sim::Timeline::build(graph, facts, schedule)
        .map_err(|e| ExecError::Schedule(e.to_string()))?;
    let stats = MemStats::new();
    let start = Instant::now();

    let mut values: Vec<Option<Tensor>> = vec![None; graph.values.len()];
    // Resident: weights then inputs, charged for the whole run.
    let mut resident = 0u64;
    for v in graph.value_ids() {
        let val = graph.value(v);
        match &val.kind {
            ValueKind::Initializer(t) => {
                let t = match inputs.remove(&val.name) {
                    Some(given) => given,
                    None => weight_tensor(t).map_err(|source| ExecError::Weight {
                        name: val.name.clone(),
                        source,
                    })?,
                };
                resident += t.bytes().len() as u64;
                values[v.index()] = Some(t);
            }
            ValueKind::Input => {
                if let Some(t) = inputs.remove(&val.name) {
                    resident += t.bytes().len() as u64;
                    values[v.index()] = Some(t);
                }
            }
            _ => {}
        }
    }
    stats.add(resident);
    let placed = match plan {
        Some(p) => Some(Placed::new(graph, p, &dims, &stats)?),
        None => None,
    };
    let mut report = placed.as_ref().map(|p| PlanReport {
        arena_bytes: p.plan.arena_bytes,
        planned_peak_bytes: p.plan.arena_bytes + resident + p.plan.heap_bytes,
        ..PlanReport::default()
    });

    // Last step reading each value; graph outputs are never freed.
    let mut last_read: Vec<Option<usize>> = vec![None; graph.values.len()];
    let consumers = graph.consumers();
    let mut pos = vec![0usize; graph.nodes.len()];
    for (s, n) in schedule.iter().enumerate() {
        pos[n.index()] = s;
    }
    for v in graph.value_ids() {
        last_read[v.index()] = consumers[v.index()].iter().map(|c| pos[c.index()]).max();
    }
    let mut keep = vec![false; graph.values.len()];
    for &o in &graph.outputs {
        keep[o.index()] = true;
    }
    // The op table's scratch per node, in bytes at the run's dims (`None`: none declared, or the
    // size depends on symbols the inputs do not bind).
    let mut declared_scratch: Vec<Option<u64>> = vec![Some(0); graph.nodes.len()];
    for b in &timeline.buffers {
        if let (memplan_sim::Category::Scratch, Some(n)) = (b.category, b.producer) {
            declared_scratch[n.index()] = b.size.eval_map(&dims).ok().map(|x| x.max(0) as u64);
        }
    }
    let mut scratch_mismatches = Vec::new();
    let mut node_seconds = vec![0.0f64; graph.nodes.len()];
    let mut frees: Vec<Vec<ValueId>> = vec![Vec::new(); schedule.len()];
    for v in graph.value_ids() {
        if keep[v.index()] || !matches!(graph.value(v).kind, ValueKind::Node { .. }) {
            continue;
        }
        let made = graph.producer(v).map(|p| pos[p.index()]);
        if let Some(s) = last_read[v.index()].or(made) {
            frees[s].push(v);
        }
    }

    // Sizes made from the data that control-flow bodies meet (see `bind_data_dependent`).
    let bound = std::sync::Mutex::new(BTreeMap::new());
    let mut host = HostTier::default();
    let moved_err =
        |v: ValueId, msg: String| ExecError::Plan(format!("'{}': {msg}", graph.value(v).name));
    if placed
        .as_ref()
        .is_some_and(|p| p.moved.iter().any(|m| m.2 != [true, true]))
    {
        host.start().map_err(ExecError::Plan)?;
    }
    for (s, &nid) in schedule.iter().enumerate() {
        let node = graph.node(nid);
        let label = || node.label(nid);
        if let Some(p) = &placed {
            for &i in &p.copies[s][BACK_START] {
                let (v, range, [_, inline]) = p.moved[i];
                host.back_start(v, &p.arena, range, inline)
                    .map_err(|msg| moved_err(v, msg))?;
            }
            for &i in &p.copies[s][BACK_DUE] {
                let v = p.moved[i].0;
                values[v.index()] = Some(
                    host.back_join(v, &p.arena)
                        .map_err(|msg| moved_err(v, msg))?,
                );
            }
        }
        let is_cf = ops::control::is_control(node);
        let f = match ops::lookup(node) {
            Some(f) => Some(f),
            None if is_cf => None,
            None => {
                return Err(ExecError::NotImplemented {
                    node: label(),
                    op: node.op.clone(),
                })
            }
        };
        let ins: Vec<Option<&Tensor>> = node
            .inputs
            .iter()
            .map(|i| match i {
                None => Ok(None),
                Some(v) => values[v.index()]
                    .as_ref()
                    .map(Some)
                    .ok_or_else(|| ExecError::Node {
                        node: label(),
                        msg: format!("input '{}' is not available", graph.value(*v).name),
                    }),
            })
            .collect::<Result<_, _>>()?;
        let view = timeline.node_is_view[nid.index()];
        let ctx = OpCtx {
            node,
            opset,
            view,
            stats: &stats,
        };
        stats.take_scratch_high();
        let node_start = Instant::now();
        let control = || {
            let env = ops::control::Env {
                graph,
                values: &values,
                parent: None,
            };
            let cctx = ops::control::CtlCtx {
                node,
                control: facts.control.get(&nid),
                env: &env,
                stats: &stats,
                opset,
                dims: &dims,
                bound: &bound,
                body_plan: placed.as_ref().and_then(|p| p.plan.body(nid.0)),
            };
            ops::control::run(&cctx, &ins)
        };
        let outs = run_node(
            placed.as_ref(),
            nid,
            &ctx,
            f,
            &ins,
            &control,
            report.as_mut(),
            &label,
        )?;
        // What a control-flow node's bodies made (and the branch an `If` took) binds theirs.
        if is_cf {
            for (k, v) in std::mem::take(&mut *bound.lock().unwrap_or_else(|e| e.into_inner())) {
                dims.entry(k).or_insert(v);
            }
        }
        drop(ins);
        let held = stats.take_scratch_high();
        // A control-flow node's scratch is its bodies' memory, not kernel scratch.
        if let Some(want) = declared_scratch[nid.index()].filter(|_| !is_cf) {
            if held != want {
                scratch_mismatches.push(format!(
                    "node {}: the kernel held {held} B of scratch at once, the op table declares {want} B",
                    label()
                ));
            }
        }
        for (slot, o) in node.outputs.iter().enumerate() {
            if let Some(v) = o {
                let mut t = outs.get(slot).cloned().ok_or_else(|| ExecError::Node {
                    node: label(),
                    msg: format!("produced {} outputs, output {slot} is missing", outs.len()),
                })?;
                t.freeze();
                bind_data_dependent(facts, *v, &t, &mut dims);
                values[v.index()] = Some(t);
            }
        }
        drop(outs);
        node_seconds[nid.index()] = node_start.elapsed().as_secs_f64();
        for &v in &frees[s] {
            values[v.index()] = None;
        }
        if let Some(p) = &placed {
            for &i in &p.copies[s][BACK_DUE] {
                host.release(p.moved[i].0);
            }
            for &i in &p.copies[s][OUT_START] {
                let (v, _, [inline, _]) = p.moved[i];
                let t = values[v.index()].take().ok_or_else(|| {
                    moved_err(v, format!("not live after step {s} to move to the host"))
                })?;
                host.out_start(v, t, inline)
                    .map_err(|msg| moved_err(v, msg))?;
            }
            for &i in &p.copies[s][OUT_DUE] {
                let v = p.moved[i].0;
                host.out_join(v).map_err(|msg| moved_err(v, msg))?;
            }
        }
    }
    if let Some(r) = report.as_mut() {
        r.host_peak_bytes = host.peak;
        r.transfers = host.transfers;
        r.transfer_bytes = host.bytes;
        r.transfer_nanos = host.copy_nanos;
        r.transfer_wait_nanos = host.wait_nanos;
    }
    // Every copy has been waited for: the copier thread ends here.
    drop(host);
    // A size made from the data that this run never made (a count inside the branch not
    // taken) is 0: nothing it sizes was allocated.
    for sym in &facts.symbols.introduced {
        dims.entry(sym.name.clone()).or_insert(0);
    }
    let seconds = start.elapsed().as_secs_f64();
    let peak_bytes = stats.peak();

    let mut outputs = Vec::new();
    for &o in &graph.outputs {
        let name = graph.value(o).name.clone();
        let t = values[o.index()]
            .clone()
            .ok_or_else(|| ExecError::MissingOutput { name: name.clone() })?;
        outputs.push((name, t));
    }
    Ok(RunResult {
        outputs,
        peak_bytes,
        resident_bytes: resident,
        dims,
        seconds,
        plan: report,
        scratch_mismatches,
        node_seconds,
    })
}

/// Runs one node: its op, or `control` for a control-flow node (no op function). In a planned run
/// (`placed`) its outputs go to their planned ranges: output 0 over the dead input the plan names
/// (run in place when the executor can, else computed on the heap and copied over it), an
/// assembled `Concat`'s output is the range its inputs already fill, and what the op made
/// elsewhere is copied into its range. `report` takes the in-place tallies and the cursor's
/// misses; without one (a body's node) the misses stay for the enclosing node to report.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_node(
    placed: Option<&Placed>,
    nid: NodeId,
    ctx: &OpCtx,
    f: Option<ops::OpFn>,
    ins: &[Option<&Tensor>],
    control: &dyn Fn() -> Result<Vec<Tensor>, OpFail>,
    mut report: Option<&mut PlanReport>,
    label: &dyn Fn() -> String,
) -> Result<Vec<Tensor>, ExecError> {
    let (node, opset, view, stats) = (ctx.node, ctx.opset, ctx.view, ctx.stats);
    let is_cf = f.is_none();
    let node_err = |e: OpFail| match e {
        OpFail::Unsupported(m) => ExecError::Node {
            node: label(),
            msg: format!("unsupported: {m}"),
        },
        e => ExecError::Node {
            node: label(),
            msg: e.to_string(),
        },
    };
    // The planned range of each output slot (in-place output 0: the dead input's).
    let mut want: Vec<Option<(usize, usize)>> = vec![None; node.outputs.len()];
    let mut done_in_place = None;
    if let Some(p) = placed {
        let ip = p.inplace[nid.index()];
        let mut queue = std::collections::VecDeque::new();
        for (slot, o) in node.outputs.iter().enumerate() {
            let Some(v) = o else { continue };
            match (p.range[v.index()], ip) {
                (Some(r), Some(_)) if slot == 0 => {
                    want[0] = Some(r);
                    queue.push_back(None);
                }
                (Some(r), _) => {
                    want[slot] = Some(r);
                    queue.push_back(Some(r));
                }
                (None, _) if slot == 0 && view => {}
                (None, _) => queue.push_back(None),
            }
        }
        // A body's allocations go to the heap, as the plan's `heap_bytes` counts; the node's
        // outputs are then copied into their planned ranges, except those it makes first and
        // fills in place, which take their ranges before the first body runs.
        if is_cf {
            let first = memplan_ir::ops::control::outputs_made_first(node, opset);
            if !first.is_empty() {
                let mut c = arena::lock(&stats.cursor);
                c.arena = Some(p.arena.clone());
                c.outputs = first
                    .map(|slot| want.get(slot).copied().flatten())
                    .collect();
            }
        } else {
            let mut c = arena::lock(&stats.cursor);
            c.arena = Some(p.arena.clone());
            c.outputs = queue;
            c.scratch = p.scratch[nid.index()];
            c.scratch_top = 0;
        }
        if let (Some((slot, (off, len))), Some(f)) = (ip, f) {
            done_in_place =
                inplace::run(ctx, f, ins, slot, &p.arena, off, len).map_err(node_err)?;
            if done_in_place.is_none() {
                // The queue made above sends output 0 to the heap; it is copied over the dead
                // input once the op has returned.
                if let Some(r) = report.as_deref_mut() {
                    r.inplace_copied.push(label());
                }
            }
        }
    }
    let assembled = placed
        .filter(|p| p.assembled[nid.index()])
        .map(|p| {
            let y = node.outputs.first().copied().flatten();
            assembled_output(node, ins, &p.arena, y.and_then(|y| p.range[y.index()]))
                .map_err(|msg| ExecError::Node { node: label(), msg })
        })
        .transpose()?;
    let mut outs = match (assembled, done_in_place) {
        (Some(t), _) => vec![t],
        (None, Some(t)) => {
            if let Some(r) = report.as_deref_mut() {
                r.inplace_done += 1;
            }
            vec![t]
        }
        (None, None) => match f {
            Some(f) => f(ctx, ins).map_err(node_err)?,
            None => control().map_err(node_err)?,
        },
    };
    if let Some(p) = placed {
        {
            let mut c = arena::lock(&stats.cursor);
            c.arena = None;
            c.outputs.clear();
            c.scratch = None;
            if let Some(r) = report {
                r.misses
                    .extend(c.misses.drain(..).map(|m| format!("node {}: {m}", label())));
            }
        }
        place_outputs(&p.arena, &want, &mut outs, stats)
            .map_err(|msg| ExecError::Node { node: label(), msg })?;
    }
    Ok(outs)
}

/// Binds the symbols for sizes made from the data (a `NonZero` count, a branch taken) that value
/// `v`'s inferred shape has as whole dims to the sizes the run made, so that the run's dims say
/// what it did (the estimate at those dims is then exact). The first binding stands.
pub(crate) fn bind_data_dependent(
    facts: &Facts,
    v: ValueId,
    t: &Tensor,
    dims: &mut BTreeMap<String, i64>,
) {
    let Some(shape) = facts.values.get(v.index()).and_then(|f| f.shape.as_ref()) else {
        return;
    };
    if t.seq.is_some() || shape.len() != t.shape.len() {
        return;
    }
    for (d, &have) in shape.iter().zip(&t.shape) {
        if let Some(name) = d.as_data_sym() {
            dims.entry(name.to_string()).or_insert(have as i64);
        }
    }
}

/// Puts every output with a planned range (`want[slot]`) at that range: an output the op made
/// elsewhere (a heap buffer, another range) is copied there. Outputs sitting in another planned
/// range are first moved to the heap, so no copy overwrites an output not yet copied.
fn place_outputs(
    arena: &Arc<Arena>,
    want: &[Option<(usize, usize)>],
    outs: &mut [Tensor],
    stats: &Arc<MemStats>,
) -> Result<(), String> {
    let at = |t: &Tensor, r: (usize, usize)| {
        t.arena_place()
            .is_some_and(|(a, o, l)| Arc::ptr_eq(a, arena) && (o, l) == r)
    };
    let misplaced: Vec<usize> = want
        .iter()
        .enumerate()
        .filter(|(k, w)| w.is_some_and(|r| outs.get(*k).is_some_and(|t| !at(t, r))))
        .map(|(k, _)| k)
        .collect();
    for &k in &misplaced {
        if outs[k].arena_place().is_some() {
            outs[k] = outs[k]
                .to_owned_buffer(Some(stats))
                .map_err(|e| e.to_string())?;
        }
    }
    for &k in &misplaced {
        let Some((off, len)) = want[k] else { continue };
        let t = &outs[k];
        if t.bytes().len() != len {
            return Err(format!(
                "output {k} has {} B but the plan reserves {len} B (a plan for other dims?)",
                t.bytes().len()
            ));
        }
        // SAFETY: `(off, len)` is output k's planned range, live from this step on; nothing else
        // reaches it now (arena invariant: the node's inputs, dead or not, are not borrowed, and
        // the only other tensors over it are dead inputs written over in place, never read again).
        unsafe { arena.range_mut(off, len) }.copy_from_slice(t.bytes());
        let seq = t.seq.clone();
        outs[k] = Tensor::arena_range(t.dtype, &t.shape.clone(), arena.clone(), off, len, false);
        outs[k].seq = seq;
    }
    Ok(())
}

/// A weight as a tensor: zero-copy over the model bytes when aligned.
pub fn weight_tensor(t: &memplan_ir::TensorData) -> Result<Tensor, TensorError> {
    let Some(raw) = t.raw() else {
        return Err(TensorError::Unsupported(DataType::String));
    };
    let dims: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
    // Weights are charged as resident by the caller, so the copy (if any) is not charged again.
    Tensor::from_bytes(t.dtype, &dims, raw.clone(), None)
}

/// Shared handle to a run's stats, for callers that run several graphs.
pub type Stats = Arc<MemStats>;

#[cfg(test)]
mod tests {
    use super::*;
    use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType};
    use memplan_ir::TensorData;

    fn attr(name: &str, value: AttrValue) -> Attribute {
        Attribute {
            name: name.into(),
            value,
            doc: String::new(),
        }
    }

    #[test]
    fn a_run_executes_on_a_worker_of_the_pool() {
        // From a thread outside any pool: moved onto one of the global pool's workers.
        let outside = std::thread::spawn(|| {
            let before = rayon::current_thread_index();
            (before, on_worker(rayon::current_thread_index))
        })
        .join()
        .unwrap();
        assert_eq!(outside.0, None);
        assert!(outside.1.is_some());
        // On a worker already: run where it is.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let (at, inside) = pool.install(|| {
            let at = std::thread::current().id();
            (at, on_worker(|| std::thread::current().id()))
        });
        assert_eq!(at, inside);
    }

    /// A `Cast` to the type its input has is a view of the input: `x -> Cast(float) -> Neg` peaks
    /// where `x -> Neg` does, and a cast to another type (double) is a new buffer; a same-type cast
    /// that is a graph output is the input's values.
    #[test]
    fn a_cast_to_its_own_type_is_a_view() {
        let peak_and_out = |casts: &[i64], output_is_cast: bool| {
            let mut g = Graph::default();
            let x = g.add_input(
                "x",
                DeclType::tensor(DataType::F32, vec![DeclDim::Value(256)]),
            );
            let mut v = x;
            for (i, &to) in casts.iter().enumerate() {
                let name = format!("c{i}");
                let attrs = vec![attr("to", AttrValue::Int(to))];
                v = g.add_node(&name, "Cast", &[Some(v)], &[&name], attrs).1[0];
            }
            if !output_is_cast {
                v = g.add_node("neg", "Neg", &[Some(v)], &["y"], vec![]).1[0];
            }
            g.outputs.push(v);
            let facts = memplan_ir::infer_graph(&g, 18).unwrap();
            let values: Vec<f32> = (0..256).map(|i| i as f32 - 100.5).collect();
            let mut inputs = BTreeMap::new();
            inputs.insert(
                "x".to_string(),
                Tensor::from_vec::<f32>(&[256], &values, None).unwrap(),
            );
            let r = run(&g, &facts, inputs, &RunOptions::default()).unwrap();
            let t = memplan_sim::Timeline::build(&g, &facts, &facts.order).unwrap();
            let est = memplan_sim::peak::concrete_peak(&t, &BTreeMap::new())
                .unwrap()
                .peak_bytes;
            assert_eq!(r.peak_bytes, est, "{casts:?}");
            let out = r.outputs[0].1.clone();
            (r.peak_bytes, out, values)
        };
        let (plain, want, _) = peak_and_out(&[], false);
        let (same, got, _) = peak_and_out(&[1, 1], false);
        assert_eq!(same, plain);
        assert_eq!(got.bytes(), want.bytes());
        // To double and back: two new buffers on the way, so the peak is higher.
        let (other, got, _) = peak_and_out(&[11, 1], false);
        assert!(other > plain, "{other} <= {plain}");
        assert_eq!(got.bytes(), want.bytes());
        let (_, got, values) = peak_and_out(&[1], true);
        assert_eq!(got.data::<f32>().unwrap(), values.as_slice());
    }

    /// x [B, 3] -> MatMul W [3, 4] -> Add b -> Softmax -> Reshape [-1] (a view) -> Slice [2..6)
    /// and ReduceSum over the rows of the softmax; every value checked by hand.
    #[test]
    fn small_graph_runs_end_to_end() {
        let mut g = Graph::default();
        let x = g.add_input(
            "x",
            DeclType::tensor(
                DataType::F32,
                vec![DeclDim::Param("B".into()), DeclDim::Value(3)],
            ),
        );
        let w = g.add_initializer(TensorData::from_f32(
            "W",
            vec![3, 4],
            &[1., 0., 0., 0., 0., 1., 0., 0., 0., 0., 1., 1.],
        ));
        let b = g.add_initializer(TensorData::from_f32("b", vec![4], &[0., 0., 0., 0.]));
        let flat = g.add_initializer(TensorData::from_i64("flat", vec![1], &[-1]));
        let (st, en) = (
            g.add_initializer(TensorData::from_i64("st", vec![1], &[2])),
            g.add_initializer(TensorData::from_i64("en", vec![1], &[6])),
        );
        let axes = g.add_initializer(TensorData::from_i64("ax", vec![1], &[1]));
        let (_, mm) = g.add_node("mm", "MatMul", &[Some(x), Some(w)], &["mm"], vec![]);
        let (_, ad) = g.add_node("add", "Add", &[Some(mm[0]), Some(b)], &["ad"], vec![]);
        let (_, sm) = g.add_node(
            "sm",
            "Softmax",
            &[Some(ad[0])],
            &["sm"],
            vec![attr("axis", AttrValue::Int(-1))],
        );
        let (_, fl) = g.add_node(
            "flat",
            "Reshape",
            &[Some(sm[0]), Some(flat)],
            &["fl"],
            vec![],
        );
        let (_, sl) = g.add_node(
            "slice",
            "Slice",
            &[Some(fl[0]), Some(st), Some(en)],
            &["sl"],
            vec![],
        );
        let (_, rs) = g.add_node(
            "rsum",
            "ReduceSum",
            &[Some(sm[0]), Some(axes)],
            &["rs"],
            vec![],
        );
        g.outputs.extend([sl[0], rs[0]]);
        let facts = memplan_ir::infer_graph(&g, 18).unwrap();
        let mut inputs = BTreeMap::new();
        // Row 0 gives logits [0, 0, ln 2, ln 2]; row 1 gives all-equal logits.
        let l2 = std::f32::consts::LN_2;
        inputs.insert(
            "x".to_string(),
            Tensor::from_vec::<f32>(&[2, 3], &[0., 0., l2, 1., 1., 1.], None).unwrap(),
        );
        let r = run(&g, &facts, inputs, &RunOptions::default()).unwrap();
        assert_eq!(r.dims.get("B"), Some(&2));
        let (name, sl) = &r.outputs[0];
        assert_eq!(name, "sl");
        assert_eq!(sl.shape, [4]);
        let v = sl.data::<f32>().unwrap();
        let want = [1. / 3., 1. / 3., 0.25, 0.25];
        for (a, b) in v.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{v:?}");
        }
        let rs = r.outputs[1].1.data::<f32>().unwrap();
        assert_eq!(r.outputs[1].1.shape, [2, 1]);
        assert!(rs.iter().all(|s| (s - 1.0).abs() < 1e-6));
        // Weights and the input are resident; the run's peak covers at least them plus one activation.
        assert!(r.peak_bytes >= r.resident_bytes + 32);
        // Running again gives the same bits.
        let mut again = BTreeMap::new();
        again.insert(
            "x".to_string(),
            Tensor::from_vec::<f32>(&[2, 3], &[0., 0., l2, 1., 1., 1.], None).unwrap(),
        );
        let r2 = run(&g, &facts, again, &RunOptions::default()).unwrap();
        assert_eq!(r2.outputs[0].1.bytes(), r.outputs[0].1.bytes());
        assert_eq!(r2.peak_bytes, r.peak_bytes);
    }

    #[test]
    fn unknown_op_is_an_error_naming_the_node() {
        let mut g = Graph::default();
        let x = g.add_input(
            "x",
            DeclType::tensor(DataType::F32, vec![DeclDim::Value(2)]),
        );
        let (_, y) = g.add_node("weird", "NoSuchOp", &[Some(x)], &["y"], vec![]);
        g.outputs.push(y[0]);
        let Ok(facts) = memplan_ir::infer_graph(&g, 18) else {
            return;
        };
        let mut inputs = BTreeMap::new();
        inputs.insert(
            "x".to_string(),
            Tensor::from_vec::<f32>(&[2], &[1., 2.], None).unwrap(),
        );
        // Without a rule the value has no type, so the schedule is refused before any kernel runs.
        let e = run(&g, &facts, inputs, &RunOptions::default()).unwrap_err();
        assert!(
            matches!(e, ExecError::NotImplemented { .. } | ExecError::Schedule(_)),
            "{e}"
        );
    }
}
