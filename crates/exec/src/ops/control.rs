//! Control flow (`If`, `Loop`, `Scan`): bodies run by the same interpreter, with the memory
//! behaviour `memplan_sim::control` predicts.
//!
//! A body's inputs are handed in by the node (charged where they were made: the iteration number
//! and condition of a `Loop` and a `Scan`'s slices are fresh buffers per iteration; loop-carried
//! values are the node's inputs in iteration 0 and the previous iteration's outputs after); its
//! initializers are charged while it runs; outer-scope values are read in place. Values are freed
//! after their last reader in the body's order. When the body ends, each output that does not own
//! a buffer made in the body ([`memplan_sim::control::owned_outputs`]) is copied, then the rest of
//! the body is dropped. A `Loop` keeps each iteration's scan outputs and stacks them into fresh
//! buffers at the end, all pieces alive until every output is stacked; a `Scan` makes its scan
//! outputs first (in their planned ranges in a planned run) and writes each iteration's pieces
//! into place; in a planned run, one that carries no state runs its body from the body's own plan
//! (`memplan_plan::body`): one arena, its slices and its weights made once for every iteration.
//! With no iteration the loop-carried outputs are copies of the initial values. A `Scan` before
//! opset 9 (batched) makes its outputs first and writes each batch entry's final states and scan
//! pieces into them.

use std::sync::Arc;

use memplan_ir::graph::{AttrValue, Graph, Node, ValueKind};
use memplan_ir::infer::{ControlFacts, Facts};
use memplan_ir::DataType;

use super::OpFail;
use crate::interp::ExecError;
use crate::mem::MemStats;
use crate::tensor::Tensor;

/// The values a body can read from its enclosing graphs: each graph with its current values.
pub(crate) struct Env<'a> {
    pub graph: &'a Graph,
    pub values: &'a [Option<Tensor>],
    pub parent: Option<&'a Env<'a>>,
}

impl Env<'_> {
    fn lookup(&self, name: &str) -> Option<&Tensor> {
        let own = self
            .graph
            .find_value(name)
            .filter(|v| self.graph.value(*v).kind != ValueKind::Outer)
            .and_then(|v| self.values.get(v.index()))
            .and_then(Option::as_ref);
        own.or_else(|| self.parent.and_then(|p| p.lookup(name)))
    }
}

/// What a control-flow node sees when it runs.
pub(crate) struct CtlCtx<'a> {
    pub node: &'a Node,
    pub control: Option<&'a ControlFacts>,
    pub env: &'a Env<'a>,
    pub stats: &'a Arc<MemStats>,
    pub opset: i64,
    /// The run's symbol values (for the shape of a scan output no iteration made).
    pub dims: &'a std::collections::BTreeMap<String, i64>,
    /// Sizes made from the data that the bodies met, bound by their first value (see
    /// `interp::bind_data_dependent`); the interpreter adds them to the run's dims.
    pub bound: &'a std::sync::Mutex<std::collections::BTreeMap<String, i64>>,
    /// The plan the node's body runs from in a planned run (see `memplan_plan::body`).
    pub body_plan: Option<&'a memplan_plan::BodyPlan>,
}

fn body_err(g: &Graph, e: ExecError) -> OpFail {
    OpFail::Invalid(format!("body '{}': {e}", g.name))
}

/// A body with its facts and its timeline, built once per run of its node (not per iteration).
struct Body<'a> {
    g: &'a Graph,
    f: &'a Facts,
    timeline: memplan_sim::Timeline,
    /// Per step of the timeline's schedule: the values freed after it (their last reader, or
    /// their producer when nothing reads them); the body's outputs are kept.
    frees: Vec<Vec<memplan_ir::ValueId>>,
}

impl<'a> Body<'a> {
    /// The body in its facts' order.
    fn new(g: &'a Graph, f: &'a Facts) -> Result<Body<'a>, OpFail> {
        Body::in_order(g, f, &f.order)
    }

    /// The body in `order` (a body plan's schedule).
    fn in_order(
        g: &'a Graph,
        f: &'a Facts,
        order: &[memplan_ir::NodeId],
    ) -> Result<Body<'a>, OpFail> {
        let timeline = memplan_sim::Timeline::build(g, f, order)
            .map_err(|e| OpFail::Invalid(format!("body '{}': {e}", g.name)))?;
        let mut pos = vec![0usize; g.nodes.len()];
        for (s, n) in order.iter().enumerate() {
            pos[n.index()] = s;
        }
        let consumers = g.consumers();
        let mut keep = vec![false; g.values.len()];
        for &o in &g.outputs {
            keep[o.index()] = true;
        }
        let mut frees: Vec<Vec<memplan_ir::ValueId>> = vec![Vec::new(); order.len()];
        for v in g.value_ids() {
            if keep[v.index()] || !matches!(g.value(v).kind, ValueKind::Node { .. }) {
                continue;
            }
            let last = consumers[v.index()].iter().map(|c| pos[c.index()]).max();
            let made = g.producer(v).map(|p| pos[p.index()]);
            if let Some(s) = last.or(made) {
                frees[s].push(v);
            }
        }
        Ok(Body {
            g,
            f,
            timeline,
            frees,
        })
    }
}

/// One iteration of a scan body on `inputs` (consumed, so they are freed before the outputs are
/// used): its `n` new states and its `k_out` scan pieces.
fn scan_step(
    ctx: &CtlCtx,
    body: &Body,
    inputs: Vec<Tensor>,
    n: usize,
    k_out: usize,
) -> Result<(Vec<Tensor>, Vec<Tensor>), OpFail> {
    let outs = run_body(ctx, body, &inputs)?;
    drop(inputs);
    if outs.len() != n + k_out {
        return Err(OpFail::Invalid(format!(
            "the body gave {} outputs, want {}",
            outs.len(),
            n + k_out
        )));
    }
    let mut it = outs.into_iter();
    let states = it.by_ref().take(n).collect();
    Ok((states, it.collect()))
}

/// Runs one body on `inputs` (its graph inputs, by position) and returns its outputs, each owning
/// its buffer.
fn run_body(ctx: &CtlCtx, body: &Body, inputs: &[Tensor]) -> Result<Vec<Tensor>, OpFail> {
    let (g, timeline) = (body.g, &body.timeline);
    takes(g, inputs.len())?;
    let mut values: Vec<Option<Tensor>> = vec![None; g.values.len()];
    for (&v, t) in g.inputs.iter().zip(inputs) {
        values[v.index()] = Some(t.clone());
    }
    load_outer(ctx, g, &mut values)?;
    let weights = load_weights(g, &mut values)?;
    ctx.stats.add(weights);
    let r = run_nodes(ctx, body, None, &mut values);
    let outs = r.and_then(|()| {
        let owned = memplan_sim::control::owned_outputs(g, timeline);
        g.outputs
            .iter()
            .zip(owned)
            .map(|(&o, own)| {
                let t = body_output(g, &values, o)?;
                if own {
                    Ok(t.clone())
                } else {
                    Ok(t.to_owned_buffer(Some(ctx.stats))?)
                }
            })
            .collect::<Result<Vec<Tensor>, OpFail>>()
    });
    drop(values);
    ctx.stats.sub(weights);
    outs
}

/// Runs the nodes of a body in its timeline's order, freeing each value after its last reader;
/// from the arena of `placed` when the body runs from a plan of its own.
fn run_nodes(
    ctx: &CtlCtx,
    body: &Body,
    placed: Option<&crate::interp::Placed>,
    values: &mut [Option<Tensor>],
) -> Result<(), OpFail> {
    let (g, facts, timeline) = (body.g, body.f, &body.timeline);
    let order = &timeline.schedule;
    for (s, &nid) in order.iter().enumerate() {
        let node = g.node(nid);
        let label = || node.label(nid);
        let fail = |e: OpFail| {
            body_err(
                g,
                ExecError::Node {
                    node: label(),
                    msg: e.to_string(),
                },
            )
        };
        let outs = {
            let ins: Vec<Option<&Tensor>> = node
                .inputs
                .iter()
                .map(|i| match i {
                    None => Ok(None),
                    Some(v) => values[v.index()].as_ref().map(Some).ok_or_else(|| {
                        fail(OpFail::Invalid(format!(
                            "input '{}' is not available",
                            g.value(*v).name
                        )))
                    }),
                })
                .collect::<Result<_, _>>()?;
            let f = super::lookup(node);
            if f.is_none() && !is_control(node) {
                return Err(fail(OpFail::Unsupported(format!(
                    "op {} is not implemented by the executor",
                    node.op
                ))));
            }
            let octx = super::OpCtx {
                node,
                opset: ctx.opset,
                view: timeline.node_is_view[nid.index()],
                stats: ctx.stats,
            };
            let control = || {
                let env = Env {
                    graph: g,
                    values: &*values,
                    parent: Some(ctx.env),
                };
                let sub = CtlCtx {
                    node,
                    control: facts.control.get(&nid),
                    env: &env,
                    stats: ctx.stats,
                    opset: ctx.opset,
                    dims: ctx.dims,
                    bound: ctx.bound,
                    body_plan: placed.and_then(|p| p.plan.body(nid.0)),
                };
                run(&sub, &ins)
            };
            crate::interp::run_node(placed, nid, &octx, f, &ins, &control, None, &label)
                .map_err(|e| body_err(g, e))?
        };
        for (slot, o) in node.outputs.iter().enumerate() {
            if let Some(v) = o {
                let t = outs.get(slot).cloned().ok_or_else(|| {
                    fail(OpFail::Invalid(format!(
                        "produced {} outputs, output {slot} is missing",
                        outs.len()
                    )))
                })?;
                {
                    let mut b = ctx.bound.lock().unwrap_or_else(|e| e.into_inner());
                    crate::interp::bind_data_dependent(facts, *v, &t, &mut b);
                }
                values[v.index()] = Some(t);
            }
        }
        drop(outs);
        for &v in &body.frees[s] {
            values[v.index()] = None;
        }
    }
    Ok(())
}

/// No kernels: `If`, `Loop` and `Scan` are run by the interpreter with their bodies ([`run`]).
pub const OPS: &[(&str, super::OpFn)] = &[];

/// Whether the node is a control-flow node this module runs.
pub(crate) fn is_control(node: &Node) -> bool {
    node.is_onnx_domain() && memplan_ir::ops::control::is_control(&node.op)
}

/// Runs a control-flow node.
pub(crate) fn run(ctx: &CtlCtx, ins: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let cf = ctx.control.ok_or_else(|| {
        OpFail::Invalid("its bodies have no inferred facts (inference skipped it)".into())
    })?;
    let bodies: Vec<&Graph> = ctx.node.subgraphs().collect();
    if bodies.len() != cf.bodies.len() {
        return Err(OpFail::Invalid(
            "its bodies and their facts disagree".into(),
        ));
    }
    match ctx.node.op.as_str() {
        "If" => run_if(ctx, cf, &bodies, ins),
        "Loop" => run_loop(ctx, cf, &bodies, ins),
        "Scan" if ctx.opset < 9 => run_scan8(ctx, cf, &bodies, ins),
        "Scan" => run_scan(ctx, cf, &bodies, ins),
        op => super::unsupported(format!("control-flow op {op}")),
    }
}

/// The truth of a one-element tensor.
fn truth(t: &Tensor, what: &str) -> Result<bool, OpFail> {
    if t.numel() != 1 {
        return Err(OpFail::Invalid(format!(
            "the {what} has {} elements, not 1",
            t.numel()
        )));
    }
    Ok(t.bytes().iter().any(|&b| b != 0))
}

fn run_if(
    ctx: &CtlCtx,
    cf: &ControlFacts,
    bodies: &[&Graph],
    ins: &[Option<&Tensor>],
) -> Result<Vec<Tensor>, OpFail> {
    let c = ins
        .first()
        .copied()
        .flatten()
        .ok_or_else(|| OpFail::Invalid("the condition is required".into()))?;
    let taken = truth(c, "condition")?;
    // A condition not known at inference time is a branch symbol: the run binds it.
    if let Some(sym) = cf.branch.as_ref().and_then(|b| b.as_data_sym()) {
        let mut b = ctx.bound.lock().unwrap_or_else(|e| e.into_inner());
        b.entry(sym.to_string()).or_insert(i64::from(taken));
    }
    let name = if taken { "then_branch" } else { "else_branch" };
    let k = memplan_ir::ops::control::body_index(ctx.node, name)
        .ok_or_else(|| OpFail::Invalid(format!("the '{name}' attribute is missing")))?;
    let (Some(g), Some(f)) = (bodies.get(k), cf.bodies.get(k)) else {
        return Err(OpFail::Invalid("If needs two branches".into()));
    };
    // A condition known at inference time inferred only its branch.
    if f.values.len() != g.values.len() {
        return Err(OpFail::Invalid(format!(
            "the condition chose '{name}', whose facts were not inferred (inference took the other branch)"
        )));
    }
    run_body(ctx, &Body::new(g, f)?, &[])
}

/// Stacks the pieces of each scan output along its axis (reversed when asked), all pieces kept
/// until every output is stacked. `empty` gives the shape of a piece when no iteration ran.
fn stack_all(
    ctx: &CtlCtx,
    pieces: Vec<Vec<Tensor>>,
    axes: &[usize],
    reverse: &[bool],
    empty: &dyn Fn(usize) -> Result<(DataType, Vec<usize>), OpFail>,
) -> Result<Vec<Tensor>, OpFail> {
    let mut out = Vec::with_capacity(pieces.len());
    for (k, ps) in pieces.iter().enumerate() {
        let (dtype, shape) = match ps.first() {
            Some(p) => (p.dtype, p.shape.clone()),
            None => empty(k)?,
        };
        let a = axes.get(k).copied().unwrap_or(0);
        if a > shape.len() {
            return Err(OpFail::Invalid(format!(
                "scan output {k}: axis {a} is out of range for rank {}",
                shape.len() + 1
            )));
        }
        let mut full = shape.clone();
        full.insert(a, ps.len());
        let mut t = Tensor::zeros(dtype, &full, Some(ctx.stats))?;
        if !ps.is_empty() {
            let es = crate::tensor::elem_size(dtype)?;
            let outer: usize = shape[..a].iter().product();
            let inner: usize = shape[a..].iter().product::<usize>() * es;
            let n = ps.len();
            let dst = t.bytes_mut()?;
            for (i, p) in ps.iter().enumerate() {
                if p.shape != shape || p.dtype != dtype {
                    return Err(OpFail::Invalid(format!(
                        "scan output {k} is {} {:?} in iteration {i} but {dtype} {shape:?} in iteration 0",
                        p.dtype, p.shape
                    )));
                }
                let at = if reverse.get(k).copied().unwrap_or(false) {
                    n - 1 - i
                } else {
                    i
                };
                let src = p.bytes();
                for o in 0..outer {
                    let d = (o * n + at) * inner;
                    dst[d..d + inner].copy_from_slice(&src[o * inner..(o + 1) * inner]);
                }
            }
        }
        out.push(t);
    }
    drop(pieces);
    Ok(out)
}

/// A scan output's piece shape from the body's facts at the run's dims, for a loop that ran no
/// iteration.
fn piece_of(
    ctx: &CtlCtx,
    g: &Graph,
    f: &Facts,
    slot: usize,
) -> Result<(DataType, Vec<usize>), OpFail> {
    let fact = g.outputs.get(slot).map(|&v| f.get(v));
    let shape = |x: &memplan_ir::Fact| -> Option<Vec<usize>> {
        x.shape
            .as_ref()?
            .iter()
            .map(|d| usize::try_from(d.eval_map(ctx.dims).ok()?).ok())
            .collect()
    };
    match fact.and_then(|x| Some((x.dtype?, shape(x)?))) {
        Some(p) => Ok(p),
        None => super::unsupported(
            "a scan output of a loop that ran no iteration, whose shape is not constant",
        ),
    }
}

fn run_loop(
    ctx: &CtlCtx,
    cf: &ControlFacts,
    bodies: &[&Graph],
    ins: &[Option<&Tensor>],
) -> Result<Vec<Tensor>, OpFail> {
    let (Some(g), Some(f)) = (bodies.first(), cf.bodies.first()) else {
        return Err(OpFail::Invalid("Loop needs a body".into()));
    };
    let max_trips = match ins.first().copied().flatten() {
        Some(m) => {
            let v = m.to_i64_vec()?;
            match v.as_slice() {
                [x] => Some(*x),
                _ => {
                    return Err(OpFail::Invalid(
                        "the trip count must hold one element".into(),
                    ))
                }
            }
        }
        None => None,
    };
    let mut cond = match ins.get(1).copied().flatten() {
        Some(c) => truth(c, "condition")?,
        None => true,
    };
    let n = ins.len().saturating_sub(2);
    let mut carried: Vec<Tensor> = Vec::with_capacity(n);
    for (j, t) in ins.iter().skip(2).enumerate() {
        carried.push(
            t.cloned()
                .ok_or_else(|| OpFail::Invalid(format!("loop-carried input {j} is missing")))?,
        );
    }
    let k_out = ctx.node.outputs.len().saturating_sub(n);
    let mut pieces: Vec<Vec<Tensor>> = vec![Vec::new(); k_out];
    let mut trips = 0i64;
    let body = Body::new(g, f)?;
    while cond && max_trips.is_none_or(|m| trips < m) {
        let mut inputs = vec![
            Tensor::from_vec::<i64>(&[], &[trips], Some(ctx.stats))?,
            Tensor::from_vec::<u8>(&[], &[1], Some(ctx.stats))?,
        ];
        inputs[1].dtype = DataType::Bool;
        inputs.append(&mut carried);
        let outs = run_body(ctx, &body, &inputs)?;
        drop(inputs);
        if outs.len() != 1 + n + k_out {
            return Err(OpFail::Invalid(format!(
                "the body gave {} outputs, want {}",
                outs.len(),
                1 + n + k_out
            )));
        }
        let mut it = outs.into_iter();
        let c = it
            .next()
            .ok_or_else(|| OpFail::Invalid("the body gave no condition output".into()))?;
        cond = truth(&c, "body's condition output")?;
        drop(c);
        carried.extend(it.by_ref().take(n));
        for (k, t) in it.enumerate() {
            pieces[k].push(t);
        }
        trips += 1;
    }
    if trips == 0 {
        for t in carried.iter_mut() {
            *t = t.to_owned_buffer(Some(ctx.stats))?;
        }
    }
    let empty_piece = |k: usize| piece_of(ctx, g, f, 1 + n + k);
    let stacked = stack_all(
        ctx,
        pieces,
        &vec![0; k_out],
        &vec![false; k_out],
        &empty_piece,
    )?;
    carried.extend(stacked);
    Ok(carried)
}

fn ints_attr(node: &Node, name: &str, k: usize) -> Result<Vec<i64>, OpFail> {
    match node.attr(name) {
        None => Ok(vec![0; k]),
        Some(AttrValue::Ints(v)) if v.len() == k => Ok(v.clone()),
        Some(_) => Err(OpFail::Invalid(format!(
            "attribute '{name}' must be {k} integers"
        ))),
    }
}

fn norm_axis(a: i64, rank: usize) -> Result<usize, OpFail> {
    let r = rank as i64;
    let x = if a < 0 { a + r } else { a };
    if x < 0 || x >= r {
        return Err(OpFail::Invalid(format!(
            "axis {a} is out of range for rank {rank}"
        )));
    }
    Ok(x as usize)
}

/// Slice `idx` of `t` along axis `a`, in a fresh buffer.
fn slice_at(ctx: &CtlCtx, t: &Tensor, a: usize, idx: usize) -> Result<Tensor, OpFail> {
    let mut out = slice_buffer(ctx, t, a)?;
    slice_into(&mut out, t, a, idx)?;
    Ok(out)
}

/// A buffer of the shape of one slice of `t` along axis `a`, its contents left to be overwritten.
fn slice_buffer(ctx: &CtlCtx, t: &Tensor, a: usize) -> Result<Tensor, OpFail> {
    let mut shape = t.shape.clone();
    shape.remove(a);
    Ok(Tensor::for_overwrite_planned(t.dtype, &shape, ctx.stats)?)
}

/// Writes slice `idx` of `t` along axis `a` over `dst` (of the slice's shape).
fn slice_into(dst: &mut Tensor, t: &Tensor, a: usize, idx: usize) -> Result<(), OpFail> {
    let es = crate::tensor::elem_size(t.dtype)?;
    let len = t.shape[a];
    let outer: usize = t.shape[..a].iter().product();
    let inner: usize = t.shape[a + 1..].iter().product::<usize>() * es;
    let src = t.bytes();
    let out = dst.bytes_mut()?;
    for o in 0..outer {
        let s = (o * len + idx) * inner;
        out[o * inner..(o + 1) * inner].copy_from_slice(&src[s..s + inner]);
    }
    Ok(())
}

fn run_scan(
    ctx: &CtlCtx,
    cf: &ControlFacts,
    bodies: &[&Graph],
    ins: &[Option<&Tensor>],
) -> Result<Vec<Tensor>, OpFail> {
    let (Some(g), Some(f)) = (bodies.first(), cf.bodies.first()) else {
        return Err(OpFail::Invalid("Scan needs a body".into()));
    };
    let k = match ctx.node.attr("num_scan_inputs") {
        Some(AttrValue::Int(k)) => usize::try_from(*k).unwrap_or(usize::MAX),
        _ => usize::MAX,
    };
    if k == 0 || k > ins.len() {
        return Err(OpFail::Invalid("num_scan_inputs is out of range".into()));
    }
    let n = ins.len() - k;
    let k_out = ctx.node.outputs.len().saturating_sub(n);
    let in_axes = ints_attr(ctx.node, "scan_input_axes", k)?;
    let in_dirs = ints_attr(ctx.node, "scan_input_directions", k)?;
    let out_axes = ints_attr(ctx.node, "scan_output_axes", k_out)?;
    let out_dirs = ints_attr(ctx.node, "scan_output_directions", k_out)?;
    let mut scan_in: Vec<(&Tensor, usize, bool)> = Vec::with_capacity(k);
    for i in 0..k {
        let t = ins[n + i].ok_or_else(|| OpFail::Invalid(format!("scan input {i} is missing")))?;
        let a = norm_axis(in_axes[i], t.rank())?;
        scan_in.push((t, a, in_dirs[i] != 0));
    }
    let trips = scan_in[0].0.shape[scan_in[0].1];
    if let Some(i) = scan_in.iter().position(|(t, a, _)| t.shape[*a] != trips) {
        return Err(OpFail::Invalid(format!(
            "scan input {i} has {} elements along its axis, scan input 0 has {trips}",
            scan_in[i].0.shape[scan_in[i].1]
        )));
    }
    let mut carried: Vec<Tensor> = Vec::with_capacity(n);
    for (j, t) in ins.iter().take(n).enumerate() {
        carried.push(
            t.cloned()
                .ok_or_else(|| OpFail::Invalid(format!("state input {j} is missing")))?,
        );
    }
    let rev: Vec<bool> = out_dirs.iter().map(|&d| d != 0).collect();
    let made = scan_outputs_first(ctx, g, f, n, &out_axes, trips)?;
    // The planned ranges of the outputs made first are taken; the bodies allocate on the heap.
    {
        let mut c = crate::arena::lock(&ctx.stats.cursor);
        c.arena = None;
        c.outputs.clear();
    }
    if let Some(bp) = ctx.body_plan {
        let (Some(made), 0) = (made, n) else {
            return Err(OpFail::Invalid(
                "a body plan is for a Scan that carries no state and knows its outputs' shapes"
                    .into(),
            ));
        };
        return scan_planned(ctx, g, f, bp, &scan_in, made, &rev);
    }
    let body = Body::new(g, f)?;
    // Each iteration's pieces go into the outputs made first, or are kept for stacking.
    let mut placed = made;
    let mut pieces: Vec<Vec<Tensor>> = vec![Vec::new(); k_out];
    for t in 0..trips {
        let mut inputs: Vec<Tensor> = std::mem::take(&mut carried);
        for &(x, a, rev) in &scan_in {
            inputs.push(slice_at(ctx, x, a, step_index(t, trips, rev))?);
        }
        let (states, got) = scan_step(ctx, &body, inputs, n, k_out)?;
        carried = states;
        match placed.as_mut() {
            Some(outs) => {
                for (k, (p, (dst, a))) in got.iter().zip(outs.iter_mut()).enumerate() {
                    let at = step_index(t, trips, rev.get(k).copied().unwrap_or(false));
                    put_piece(dst, *a, at, p, &format!("scan output {k} of iteration {t}"))?;
                }
            }
            None => {
                for (k, p) in got.into_iter().enumerate() {
                    pieces[k].push(p);
                }
            }
        }
    }
    if trips == 0 {
        for t in carried.iter_mut() {
            *t = t.to_owned_buffer(Some(ctx.stats))?;
        }
    }
    if let Some(outs) = placed {
        carried.extend(outs.into_iter().map(|(t, _)| t));
        return Ok(carried);
    }
    let mut axes = Vec::with_capacity(k_out);
    for (i, &a) in out_axes.iter().enumerate() {
        let rank = match pieces[i].first() {
            Some(p) => p.rank(),
            None => piece_of(ctx, g, f, n + i)?.1.len(),
        };
        axes.push(norm_axis(a, rank + 1)?);
    }
    let empty_piece = |i: usize| piece_of(ctx, g, f, n + i);
    let stacked = stack_all(ctx, pieces, &axes, &rev, &empty_piece)?;
    carried.extend(stacked);
    Ok(carried)
}

/// A `Scan` that carries no state, its body run from `bp` (see `memplan_plan::body`) in
/// `bp.lanes` lanes: each lane makes the body's arena, its weights and one buffer per scanned slice
/// once, then runs the next iteration not yet taken until none is left, copying each iteration's
/// pieces into the outputs made first (`made`, each with its axis). The lanes run on rayon's pool
/// side by side, as many at once as there are threads; each holds its memory from start to end
/// either way, so the peak is the plan's at any thread count. An iteration computes the same
/// whichever lane runs it: the outputs do not depend on the lanes either.
fn scan_planned(
    ctx: &CtlCtx,
    g: &Graph,
    f: &Facts,
    bp: &memplan_plan::BodyPlan,
    scan_in: &[(&Tensor, usize, bool)],
    made: Vec<(Tensor, usize)>,
    rev: &[bool],
) -> Result<Vec<Tensor>, OpFail> {
    use rayon::prelude::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    takes(g, scan_in.len())?;
    let trips = scan_in.first().map_or(0, |(t, a, _)| t.shape[*a]);
    let body = Body::in_order(g, f, &bp.plan.node_order())?;
    let lanes = bp.lanes.max(1) as usize;
    // Each lane's memory, allocated before any lane runs: the node holds all of it at once.
    let mut own = Vec::with_capacity(lanes);
    for _ in 0..lanes {
        own.push(Lane::new(ctx, g, &bp.plan, scan_in)?);
    }
    let run = ScanRun {
        ctx,
        body: &body,
        scan_in,
        trips,
        made: std::sync::Mutex::new(made),
        rev,
    };
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let step = |lane: &mut Lane| -> Result<(), OpFail> {
        loop {
            let t = next.fetch_add(1, Ordering::Relaxed);
            if t >= trips || failed.load(Ordering::Relaxed) {
                return Ok(());
            }
            let r = lane.iteration(&run, t);
            if r.is_err() {
                failed.store(true, Ordering::Relaxed);
                return r;
            }
        }
    };
    // One lane is one task, run where it is (rayon does not split a single item).
    let r = own.par_iter_mut().map(step).collect::<Result<(), OpFail>>();
    drop(own);
    r?;
    let made = run.made.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(made.into_iter().map(|(t, _)| t).collect())
}

/// What one lane of a planned `Scan` body holds for the node's whole run: the body's arena (and
/// stats of its own, so its ops take their planned ranges through a cursor of the lane's, charged
/// to the run), its values with the weights loaded, and a buffer per scanned slice.
struct Lane<'p> {
    stats: Arc<MemStats>,
    placed: crate::interp::Placed<'p>,
    values: Vec<Option<Tensor>>,
    weights: u64,
    slices: Vec<Tensor>,
}

impl<'p> Lane<'p> {
    fn new(
        ctx: &CtlCtx,
        g: &Graph,
        plan: &'p memplan_plan::Plan,
        scan_in: &[(&Tensor, usize, bool)],
    ) -> Result<Lane<'p>, OpFail> {
        let stats = MemStats::child(ctx.stats);
        let placed =
            crate::interp::Placed::new(g, plan, ctx.dims, &stats).map_err(|e| body_err(g, e))?;
        let mut values: Vec<Option<Tensor>> = vec![None; g.values.len()];
        load_outer(ctx, g, &mut values)?;
        let weights = load_weights(g, &mut values)?;
        stats.add(weights);
        // The lane exists before its slices are made, so that a failure there still credits its
        // weights back (its `Drop`).
        let mut lane = Lane {
            stats,
            placed,
            values,
            weights,
            slices: Vec::with_capacity(scan_in.len()),
        };
        for &(x, a, _) in scan_in {
            let s = slice_buffer(ctx, x, a)?;
            lane.slices.push(s);
        }
        Ok(lane)
    }

    /// Iteration `t` of `run`: its slices, the body, its pieces into the outputs.
    fn iteration(&mut self, run: &ScanRun, t: usize) -> Result<(), OpFail> {
        let (g, trips) = (run.body.g, run.trips);
        for (s, &(x, a, back)) in self.slices.iter_mut().zip(run.scan_in) {
            slice_into(s, x, a, step_index(t, trips, back))?;
        }
        let mut vals = self.values.clone();
        for (&v, s) in g.inputs.iter().zip(&self.slices) {
            vals[v.index()] = Some(s.clone());
        }
        let lctx = CtlCtx {
            stats: &self.stats,
            ..*run.ctx
        };
        run_nodes(&lctx, run.body, Some(&self.placed), &mut vals)?;
        let mut made = run.made.lock().unwrap_or_else(|e| e.into_inner());
        for (k, (&o, (dst, a))) in g.outputs.iter().zip(made.iter_mut()).enumerate() {
            let piece = body_output(g, &vals, o)?;
            let at = step_index(t, trips, run.rev.get(k).copied().unwrap_or(false));
            put_piece(
                dst,
                *a,
                at,
                piece,
                &format!("scan output {k} of iteration {t}"),
            )?;
        }
        Ok(())
    }
}

/// What every lane of a planned `Scan` shares: the node's context, its body, the tensors it scans
/// (each with its axis and direction), its trip count, the outputs made first that the pieces go
/// into (each with its axis) and their directions.
struct ScanRun<'r, 'c> {
    ctx: &'r CtlCtx<'c>,
    body: &'r Body<'r>,
    scan_in: &'r [(&'r Tensor, usize, bool)],
    trips: usize,
    made: std::sync::Mutex<Vec<(Tensor, usize)>>,
    rev: &'r [bool],
}

impl Drop for Lane<'_> {
    fn drop(&mut self) {
        self.values.clear();
        self.stats.sub(self.weights);
    }
}

/// Whether body `g` takes `given` inputs.
fn takes(g: &Graph, given: usize) -> Result<(), OpFail> {
    if given == g.inputs.len() {
        return Ok(());
    }
    Err(OpFail::Invalid(format!(
        "body '{}' takes {} inputs, given {given}",
        g.name,
        g.inputs.len()
    )))
}

/// Body `g`'s output `o` among its `values`.
fn body_output<'v>(
    g: &Graph,
    values: &'v [Option<Tensor>],
    o: memplan_ir::ValueId,
) -> Result<&'v Tensor, OpFail> {
    values[o.index()].as_ref().ok_or_else(|| {
        OpFail::Invalid(format!(
            "body '{}' did not produce its output '{}'",
            g.name,
            g.value(o).name
        ))
    })
}

/// The index iteration `t` of `trips` reads or writes along a scan axis, backwards when `back`.
fn step_index(t: usize, trips: usize, back: bool) -> usize {
    if back {
        trips - 1 - t
    } else {
        t
    }
}

/// Loads body `g`'s weights into `values` (where no input gives them), returning their bytes,
/// which the caller charges while the body runs.
fn load_weights(g: &Graph, values: &mut [Option<Tensor>]) -> Result<u64, OpFail> {
    let mut weights = 0u64;
    for v in g.value_ids() {
        let val = g.value(v);
        if let ValueKind::Initializer(t) = &val.kind {
            if values[v.index()].is_none() {
                let t = crate::interp::weight_tensor(t)
                    .map_err(|e| OpFail::Invalid(format!("weight '{}': {e}", val.name)))?;
                weights += t.bytes().len() as u64;
                values[v.index()] = Some(t);
            }
        }
    }
    Ok(weights)
}

/// Puts the values body `g` reads from enclosing graphs into `values`.
fn load_outer(ctx: &CtlCtx, g: &Graph, values: &mut [Option<Tensor>]) -> Result<(), OpFail> {
    for v in g.value_ids() {
        let val = g.value(v);
        if val.kind == ValueKind::Outer {
            let t = ctx.env.lookup(&val.name).ok_or_else(|| {
                OpFail::Invalid(format!(
                    "body '{}' reads '{}', which no enclosing graph holds",
                    g.name, val.name
                ))
            })?;
            values[v.index()] = Some(t.clone());
        }
    }
    Ok(())
}

/// A `Scan`'s scan outputs, made before its first iteration (in their planned ranges when the run
/// is planned), each with its axis; `None` when a piece's shape is not known from the body's facts
/// at the run's dims (the pieces are then stacked at the end).
fn scan_outputs_first(
    ctx: &CtlCtx,
    g: &Graph,
    f: &Facts,
    n: usize,
    out_axes: &[i64],
    trips: usize,
) -> Result<Option<Vec<(Tensor, usize)>>, OpFail> {
    let mut shapes = Vec::with_capacity(out_axes.len());
    for (i, &a) in out_axes.iter().enumerate() {
        let Ok((dtype, piece)) = piece_of(ctx, g, f, n + i) else {
            return Ok(None);
        };
        let a = norm_axis(a, piece.len() + 1)?;
        let mut full = piece;
        full.insert(a, trips);
        shapes.push((dtype, full, a));
    }
    let mut outs = Vec::with_capacity(shapes.len());
    for (dtype, full, a) in shapes {
        outs.push((Tensor::for_overwrite_planned(dtype, &full, ctx.stats)?, a));
    }
    Ok(Some(outs))
}

/// Writes `piece` over index `idx` of `dst` along axis `a` (`dst`'s shape is the piece's with that
/// axis inserted).
fn put_piece(
    dst: &mut Tensor,
    a: usize,
    idx: usize,
    piece: &Tensor,
    what: &str,
) -> Result<(), OpFail> {
    let mut want = dst.shape.clone();
    let len = want.remove(a);
    if piece.dtype != dst.dtype || piece.shape != want {
        return Err(OpFail::Invalid(format!(
            "{what} is {} {:?}, want {} {want:?}",
            piece.dtype, piece.shape, dst.dtype
        )));
    }
    let es = crate::tensor::elem_size(dst.dtype)?;
    let outer: usize = want[..a].iter().product();
    let inner: usize = want[a..].iter().product::<usize>() * es;
    let src = piece.bytes();
    let out = dst.bytes_mut()?;
    for o in 0..outer {
        let d = (o * len + idx) * inner;
        out[d..d + inner].copy_from_slice(&src[o * inner..(o + 1) * inner]);
    }
    Ok(())
}

/// Block `idx` of `t` seen as `[t.shape[..lead] flattened, rest]`, in a fresh buffer of shape
/// `t.shape[lead..]`.
fn block_at(ctx: &CtlCtx, t: &Tensor, lead: usize, idx: usize) -> Result<Tensor, OpFail> {
    let shape = t.shape[lead..].to_vec();
    let inner = shape.iter().product::<usize>() * crate::tensor::elem_size(t.dtype)?;
    let mut out = Tensor::for_overwrite_planned(t.dtype, &shape, ctx.stats)?;
    out.bytes_mut()?
        .copy_from_slice(&t.bytes()[idx * inner..(idx + 1) * inner]);
    Ok(out)
}

/// Writes `piece` over block `idx` of `dst` (the blocks of `dst`'s trailing dims after `lead`).
fn put_block(
    dst: &mut Tensor,
    lead: usize,
    idx: usize,
    piece: &Tensor,
    what: &str,
) -> Result<(), OpFail> {
    if piece.dtype != dst.dtype || piece.shape[..] != dst.shape[lead..] {
        return Err(OpFail::Invalid(format!(
            "{what} is {} {:?}, want {} {:?}",
            piece.dtype,
            piece.shape,
            dst.dtype,
            &dst.shape[lead..]
        )));
    }
    let src = piece.bytes();
    let n = src.len();
    dst.bytes_mut()?[idx * n..(idx + 1) * n].copy_from_slice(src);
    Ok(())
}

/// `Scan` before opset 9 (see `memplan_ir::ops::control`): the outputs are made first, then each
/// batch entry runs the body over its sequence from its slice of the initial states, its scan
/// pieces written into place as they come and its final states at the end (the memory
/// `memplan_sim::control` predicts).
fn run_scan8(
    ctx: &CtlCtx,
    cf: &ControlFacts,
    bodies: &[&Graph],
    ins: &[Option<&Tensor>],
) -> Result<Vec<Tensor>, OpFail> {
    let (Some(g), Some(f)) = (bodies.first(), cf.bodies.first()) else {
        return Err(OpFail::Invalid("Scan needs a body".into()));
    };
    let total = ins.len().saturating_sub(1);
    let k = match ctx.node.attr("num_scan_inputs") {
        Some(AttrValue::Int(k)) => usize::try_from(*k).unwrap_or(usize::MAX),
        _ => usize::MAX,
    };
    if k == 0 || k > total {
        return Err(OpFail::Invalid("num_scan_inputs is out of range".into()));
    }
    let n = total - k;
    let k_out = ctx.node.outputs.len().saturating_sub(n);
    let dirs = ints_attr(ctx.node, "directions", k)?;
    let mut xs: Vec<&Tensor> = Vec::with_capacity(total);
    for j in 0..total {
        let t = ins[1 + j].ok_or_else(|| OpFail::Invalid(format!("input {} is missing", 1 + j)))?;
        let lead = if j < n { 1 } else { 2 };
        if t.rank() < lead {
            return Err(OpFail::Invalid(format!(
                "input {} has rank {}, below {lead}",
                1 + j,
                t.rank()
            )));
        }
        xs.push(t);
    }
    let batch = xs[n].shape[0];
    let steps = xs[n].shape[1];
    if let Some(j) = xs.iter().position(|t| t.shape[0] != batch) {
        return Err(OpFail::Invalid(format!(
            "input {} has batch size {}, the first scan input {batch}",
            1 + j,
            xs[j].shape[0]
        )));
    }
    if let Some(j) = (n..total).find(|&j| xs[j].shape[1] != steps) {
        return Err(OpFail::Invalid(format!(
            "scan input {} has sequence length {}, scan input 0 {steps}",
            j - n,
            xs[j].shape[1]
        )));
    }
    let lens: Vec<usize> = match ins.first().copied().flatten() {
        None => vec![steps; batch],
        Some(l) => {
            let v = l.to_i64_vec()?;
            if v.len() != batch {
                return Err(OpFail::Invalid(format!(
                    "sequence_lens has {} entries for a batch of {batch}",
                    v.len()
                )));
            }
            v.iter()
                .map(|&x| {
                    usize::try_from(x)
                        .ok()
                        .filter(|&x| x <= steps)
                        .ok_or_else(|| {
                            OpFail::Invalid(format!("sequence length {x} is outside 0..={steps}"))
                        })
                })
                .collect::<Result<_, _>>()?
        }
    };
    let mut outs: Vec<Tensor> = Vec::with_capacity(n + k_out);
    for x in &xs[..n] {
        outs.push(Tensor::zeros(x.dtype, &x.shape, Some(ctx.stats))?);
    }
    for i in 0..k_out {
        let (dtype, piece) = piece_of(ctx, g, f, n + i)?;
        let shape: Vec<usize> = [batch, steps].into_iter().chain(piece).collect();
        outs.push(Tensor::zeros(dtype, &shape, Some(ctx.stats))?);
    }
    let body = Body::new(g, f)?;
    for (b, &len) in lens.iter().enumerate() {
        let mut states: Vec<Tensor> = Vec::with_capacity(n);
        for x in &xs[..n] {
            states.push(block_at(ctx, x, 1, b)?);
        }
        for t in 0..len {
            let mut inputs = std::mem::take(&mut states);
            for (x, &d) in xs[n..].iter().zip(&dirs) {
                let step = if d != 0 { len - 1 - t } else { t };
                inputs.push(block_at(ctx, x, 2, b * steps + step)?);
            }
            let (next, got) = scan_step(ctx, &body, inputs, n, k_out)?;
            states = next;
            for (i, p) in got.into_iter().enumerate() {
                let what = format!("scan output {i} of step {t}");
                put_block(&mut outs[n + i], 2, b * steps + t, &p, &what)?;
            }
        }
        for (j, st) in states.iter().enumerate() {
            put_block(&mut outs[j], 1, b, st, &format!("final state {j}"))?;
        }
    }
    Ok(outs)
}
