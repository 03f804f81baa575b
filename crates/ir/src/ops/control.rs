//! Op family: control flow (`If`, `Loop`, `Scan`), whose bodies are graphs in attributes.
//!
//! A body is inferred with the facts its node feeds it (loop-carried values, scan slices) and
//! reads outer-scope values from the enclosing graphs' facts; its facts are kept in
//! [`crate::infer::Facts::control`] for the simulator and the executor. A loop-carried value whose
//! shape changes between iterations gets fresh symbols for the dims that change; a trip count
//! that depends on data is a fresh symbol, and so is an `If` condition not known at inference
//! time (0 or 1: the branch taken). The memory of a body (its peak while the node runs) is the
//! simulator's business (`sim::control`), since it needs the body's lifetimes.

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::graph::{AttrValue, Graph, ValueKind};
use crate::infer::{invalid, ControlFacts, Fact, Facts, InferCtx, OpError, SeqKind};

use super::{Mem, OpDef};

pub const DEFS: &[OpDef] = &[
    OpDef::new("If", (1, 1), infer_if, Mem::NEW),
    // `Loop`'s `M` and `cond`, and the `sequence_lens` that opens a `Scan` before opset 9, are
    // optional but positional: the arity check counts the inputs before the first absent one, so
    // the rules themselves require their slots.
    OpDef::new("Loop", (0, usize::MAX), infer_loop, Mem::NEW),
    OpDef::new("Scan", (0, usize::MAX), infer_scan, Mem::NEW),
];

/// Whether `op` (default domain) runs a body graph.
pub fn is_control(op: &str) -> bool {
    matches!(op, "If" | "Loop" | "Scan")
}

/// The outputs of a control-flow node that its run makes before the first iteration and fills in
/// place, one piece per iteration: a `Scan`'s scan outputs from opset 9 on. A planned run gives
/// them their arena ranges; the node's other outputs are made on the heap by its bodies and copied
/// into their ranges at the end.
pub fn outputs_made_first(node: &crate::graph::Node, opset: i64) -> std::ops::Range<usize> {
    if node.op != "Scan" || opset < 9 {
        return 0..0;
    }
    let k = match node.attr("num_scan_inputs") {
        Some(AttrValue::Int(k)) => usize::try_from(*k).unwrap_or(0),
        _ => 0,
    };
    let states = node.inputs.len().saturating_sub(k).min(node.outputs.len());
    states..node.outputs.len()
}

/// Whether every output of the node is made first ([`outputs_made_first`]): a `Scan` (opset 9
/// on) that carries no state, whose iterations share nothing but what they read from outside. A
/// planned run gives such a node's body a plan of its own (see `memplan_plan::body`).
pub fn carries_no_state(node: &crate::graph::Node, opset: i64) -> bool {
    let first = outputs_made_first(node, opset);
    !first.is_empty() && first.start == 0
}

/// The position of the graph attribute `name` among the node's bodies (the order of
/// [`crate::graph::Node::subgraphs`]).
pub fn body_index(node: &crate::graph::Node, name: &str) -> Option<usize> {
    let mut k = 0;
    for a in &node.attrs {
        match &a.value {
            AttrValue::Graph(_) if a.name == name => return Some(k),
            AttrValue::Graph(_) => k += 1,
            AttrValue::Graphs(gs) => k += gs.len(),
            _ => {}
        }
    }
    None
}

/// The graph attribute `name` of the node.
fn body<'a>(ctx: &InferCtx<'a>, name: &str) -> Result<&'a Graph, OpError> {
    match ctx.node.attr(name) {
        Some(AttrValue::Graph(g)) => Ok(g),
        Some(o) => Err(OpError::BadAttr(format!(
            "attribute '{name}' must be GRAPH, got {}",
            o.kind_name()
        ))),
        None => Err(OpError::BadAttr(format!(
            "the required graph attribute '{name}' is missing"
        ))),
    }
}

/// A fact without its contents (a value that changes from one iteration to the next).
fn shape_only(f: &Fact) -> Fact {
    Fact {
        value: None,
        ..f.clone()
    }
}

/// The facts of a body's outputs, in order.
fn outputs_of(g: &Graph, f: &Facts) -> Vec<Fact> {
    g.outputs.iter().map(|&v| f.get(v).clone()).collect()
}

/// One fact covering `a` and `b` (the two branches of an `If`, or a loop-carried value before and
/// after an iteration): dims that differ become fresh symbols. `None` when the types differ.
fn join(ctx: &mut InferCtx, a: &Fact, b: &Fact, what: &str) -> Result<Fact, OpError> {
    if let (Some(x), Some(y)) = (a.dtype, b.dtype) {
        if x != y {
            return invalid(format!(
                "{what} has type {x} in one place and {y} in another"
            ));
        }
    }
    match (&a.seq, &b.seq) {
        (None, None) => {}
        (Some(x), Some(y)) if x.kind == y.kind => return join_seq(ctx, a, b, what),
        _ => {
            return invalid(format!(
                "{what} is a tensor in one place and not in another"
            ))
        }
    }
    let shape = match (&a.shape, &b.shape) {
        (Some(x), Some(y)) if x.len() == y.len() => {
            let mut out = Vec::with_capacity(x.len());
            for (k, (p, q)) in x.iter().zip(y).enumerate() {
                out.push(if p == q {
                    p.clone()
                } else {
                    ctx.fresh_symbol("cf_dim", &format!("dim {k} of {what} differs ({p} vs {q})"))
                });
            }
            Some(out)
        }
        _ => None,
    };
    let value = if a.value == b.value {
        a.value.clone()
    } else {
        None
    };
    Ok(Fact {
        dtype: a.dtype.or(b.dtype),
        shape,
        value,
        seq: None,
    })
}

/// [`join`] of two sequences (or optionals): element by element when both have the same number of
/// elements, else a sequence of unknown length.
fn join_seq(ctx: &mut InferCtx, a: &Fact, b: &Fact, what: &str) -> Result<Fact, OpError> {
    let kind = a.seq.as_ref().map_or(SeqKind::Sequence, |s| s.kind);
    let dtype = a.dtype.or(b.dtype);
    if let (Some(x), Some(y)) = (a.elems(), b.elems()) {
        if x.len() == y.len() {
            let mut out = Vec::with_capacity(x.len());
            for (k, (p, q)) in x.iter().zip(y).enumerate() {
                out.push(join(ctx, p, q, &format!("element {k} of {what}"))?);
            }
            return Ok(Fact::sequence(kind, dtype, Some(out)));
        }
    }
    // Counts that differ (a sequence that grows each iteration): a sequence of a symbolic count
    // when every element on both sides is alike.
    let elem = match (common_elem(a), common_elem(b)) {
        (Some(Some(x)), Some(Some(y))) if same_elem(x, y) => Some(x),
        (Some(Some(x)), Some(None)) | (Some(None), Some(Some(x))) => Some(x),
        _ => None,
    };
    match (elem, seq_len(a), seq_len(b)) {
        (Some(e), Some(n), Some(m)) if kind == SeqKind::Sequence => {
            let len = if n == m {
                n
            } else {
                ctx.fresh_symbol(
                    "seq_len",
                    &format!("the element count of {what} differs ({n} vs {m})"),
                )
            };
            Ok(Fact::uniform_sequence(len, shape_only(e)))
        }
        _ => Ok(Fact::sequence(kind, dtype, None)),
    }
}

/// Whether two element facts have the same type and shape (contents aside).
fn same_elem(a: &Fact, b: &Fact) -> bool {
    a.dtype == b.dtype && a.shape == b.shape && a.seq == b.seq
}

/// The one fact every element of sequence `f` has: `Some(None)` for an empty sequence, `None`
/// when its elements differ or are not known.
fn common_elem(f: &Fact) -> Option<Option<&Fact>> {
    if let Some((_, e)) = f.uniform() {
        return Some(Some(e));
    }
    let elems = f.elems()?;
    match elems.split_first() {
        None => Some(None),
        Some((first, rest)) => rest
            .iter()
            .all(|e| same_elem(e, first))
            .then_some(Some(first)),
    }
}

/// A sequence's element count, when known or symbolic.
fn seq_len(f: &Fact) -> Option<Expr> {
    match (f.elems(), f.uniform()) {
        (Some(e), _) => Some(Expr::int(e.len() as i64)),
        (None, Some((len, _))) => Some(len.clone()),
        (None, None) => None,
    }
}

/// `If`: a known condition infers its branch only and takes its facts (the untaken branch's facts
/// in [`ControlFacts::bodies`] are empty); otherwise both branches are inferred and the outputs
/// join their facts.
fn infer_if(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let then_g = body(ctx, "then_branch")?;
    let else_g = body(ctx, "else_branch")?;
    if ctx.num_inputs() != 1 || ctx.opt_input(0).is_none() {
        return invalid(format!(
            "If takes 1 input (the condition), got {}",
            ctx.num_inputs()
        ));
    }
    let n = ctx.node.outputs.len();
    if then_g.outputs.len() != else_g.outputs.len() {
        return invalid(format!(
            "the branches have different output counts (then {}, else {})",
            then_g.outputs.len(),
            else_g.outputs.len()
        ));
    }
    if then_g.outputs.len() != n {
        return invalid(format!(
            "the branches have {} outputs but the node has {n}",
            then_g.outputs.len()
        ));
    }
    for g in [then_g, else_g] {
        if !g.inputs.is_empty() {
            return invalid(format!(
                "branch '{}' declares {} inputs; If branches take none",
                g.name,
                g.inputs.len()
            ));
        }
    }
    let cond = ctx.input(0)?;
    if let Some(s) = &cond.shape {
        if Expr::product(s.iter()).as_const().is_some_and(|c| c != 1) {
            return invalid("the condition must hold one element");
        }
    }
    let known = cond
        .value
        .as_ref()
        .and_then(|k| k.as_consts())
        .and_then(|v| v.first().copied());
    // A known condition infers only its branch: the other one never runs, and may be invalid for
    // these inputs (a function expanded for several ranks). Its facts stay empty.
    let (tf, ef, outs, branch) = match known {
        Some(c) if c != 0 => {
            let tf = ctx.infer_body(then_g, &[])?;
            let to = outputs_of(then_g, &tf);
            (tf, Facts::default(), to, Expr::one())
        }
        Some(_) => {
            let ef = ctx.infer_body(else_g, &[])?;
            let eo = outputs_of(else_g, &ef);
            (Facts::default(), ef, eo, Expr::zero())
        }
        None => {
            let tf = ctx.infer_body(then_g, &[])?;
            let ef = ctx.infer_body(else_g, &[])?;
            let (to, eo) = (outputs_of(then_g, &tf), outputs_of(else_g, &ef));
            let mut outs = Vec::with_capacity(n);
            for (k, (a, b)) in to.iter().zip(&eo).enumerate() {
                outs.push(join(ctx, a, b, &format!("output {k}"))?);
            }
            let c = ctx.fresh_symbol("if_cond", "1 if the If condition holds, else 0");
            (tf, ef, outs, c)
        }
    };
    let then_first = body_index(ctx.node, "then_branch") < body_index(ctx.node, "else_branch");
    ctx.set_control(ControlFacts {
        bodies: if then_first {
            vec![tf, ef]
        } else {
            vec![ef, tf]
        },
        trips: None,
        branch: Some(branch),
    });
    Ok(outs)
}

/// Whether the body's condition output is always true given a true input condition: a known
/// nonzero constant, the condition input itself, or an `Identity` of it.
fn cond_stays_true(g: &Graph, f: &Facts) -> bool {
    let Some(&out) = g.outputs.first() else {
        return false;
    };
    if let Some(v) = f.get(out).value.as_ref().and_then(|k| k.as_consts()) {
        return v.len() == 1 && v[0] != 0;
    }
    let cond_in = g.inputs.get(1).copied();
    let mut v = out;
    for _ in 0..16 {
        if Some(v) == cond_in {
            return true;
        }
        match g.value(v).kind {
            ValueKind::Node { node, slot: 0 } if g.node(node).op == "Identity" => {
                match g.node(node).inputs.first().copied().flatten() {
                    Some(i) => v = i,
                    None => return false,
                }
            }
            _ => return false,
        }
    }
    false
}

/// Infers a body that carries `carried` facts from one iteration to the next (their positions
/// among the body's inputs start at `first`, and among its outputs at `out_first`): when an
/// iteration changes a carried value's shape, the changing dims get fresh symbols and the body is
/// inferred again from those.
fn infer_carried(
    ctx: &mut InferCtx,
    g: &Graph,
    mut ins: Vec<Fact>,
    first: usize,
    out_first: usize,
    n: usize,
) -> Result<Facts, OpError> {
    let snap = ctx.symbols_snapshot();
    let f = ctx.infer_body(g, &ins)?;
    let outs = outputs_of(g, &f);
    let same = (0..n).all(|j| {
        let (a, b) = (&outs[out_first + j], &ins[first + j]);
        a.shape == b.shape && a.seq == b.seq
    });
    for j in 0..n {
        let (a, b) = (&ins[first + j], &outs[out_first + j]);
        if let (Some(x), Some(y)) = (a.dtype, b.dtype) {
            if x != y {
                return invalid(format!(
                    "loop-carried value {j} enters the body as {x} and leaves it as {y}"
                ));
            }
        }
    }
    if same {
        return Ok(f);
    }
    ctx.symbols_restore(snap);
    for j in 0..n {
        let joined = join(
            ctx,
            &ins[first + j],
            &outs[out_first + j],
            &format!("loop-carried value {j}"),
        )?;
        ins[first + j] = shape_only(&joined);
    }
    ctx.infer_body(g, &ins)
}

/// Whether a node of the body reads its input `k`.
fn body_reads(g: &Graph, k: usize) -> bool {
    let Some(&v) = g.inputs.get(k) else {
        return false;
    };
    g.outputs.contains(&v) || g.nodes.iter().any(|n| n.input_ids().any(|i| i == v))
}

/// `Loop(M, cond, v_initial...)`: body `(iteration, cond, v...) -> (cond, v..., scan...)`.
fn infer_loop(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let g = body(ctx, "body")?;
    if ctx.num_inputs() < 2 {
        return invalid(format!(
            "Loop takes at least 2 inputs (trip count and condition, each may be empty), got {}",
            ctx.num_inputs()
        ));
    }
    let n = ctx.num_inputs() - 2;
    if g.inputs.len() != n + 2 {
        return invalid(format!(
            "the body takes {} inputs but the Loop passes {} (iteration, condition and {n} loop-carried)",
            g.inputs.len(),
            n + 2
        ));
    }
    let k_out = ctx.node.outputs.len().checked_sub(n).ok_or_else(|| {
        OpError::Invalid(format!(
            "the Loop has {} outputs, fewer than its {n} loop-carried values",
            ctx.node.outputs.len()
        ))
    })?;
    if g.outputs.len() != 1 + n + k_out {
        return invalid(format!(
            "the body has {} outputs but the Loop needs {} (condition, {n} loop-carried, {k_out} scan)",
            g.outputs.len(),
            1 + n + k_out
        ));
    }
    for (i, what) in [(0, "trip count"), (1, "condition")] {
        if let Some(f) = ctx.opt_input(i) {
            if let Some(s) = &f.shape {
                if Expr::product(s.iter()).as_const().is_some_and(|c| c != 1) {
                    return invalid(format!("the {what} must hold one element"));
                }
            }
        }
    }
    // The iteration number is a symbol, so that shape arithmetic on it (slicing the i-th row)
    // stays symbolic; sizes that depend on it differ between iterations, and an estimate that
    // needs it is refused as unbound.
    let iter = if body_reads(g, 0) {
        let i = ctx.fresh_symbol("loop_iter", "the iteration number inside a Loop body");
        Fact::with_value(DataType::I64, vec![], crate::infer::Known::Int(vec![i]))
    } else {
        Fact::new(DataType::I64, vec![])
    };
    let mut ins = vec![iter, Fact::new(DataType::Bool, vec![])];
    for j in 0..n {
        let f = ctx.input(2 + j)?;
        ins.push(shape_only(f));
    }
    let f = infer_carried(ctx, g, ins.clone(), 2, 1, n)?;
    let outs = outputs_of(g, &f);
    let m = ctx
        .opt_input(0)
        .and_then(|x| x.value.as_ref()?.as_exprs()?.first().cloned());
    let cond_true = match ctx.opt_input(1) {
        None => true,
        Some(c) => c
            .value
            .as_ref()
            .and_then(|k| k.as_consts())
            .is_some_and(|v| v.first().is_some_and(|&x| x != 0)),
    };
    let trips = match m {
        Some(m) if cond_true && cond_stays_true(g, &f) => {
            if m.as_const().is_some_and(|c| c < 0) {
                Expr::zero()
            } else {
                m
            }
        }
        _ => ctx.fresh_symbol("loop_trips", "the number of iterations of a Loop"),
    };
    let mut res = Vec::with_capacity(n + k_out);
    for j in 0..n {
        // The outputs are the carried values after the last iteration (the initial ones when the
        // loop runs no iteration): the body's facts, which cover both.
        let carried = f.get(g.inputs[2 + j]);
        let mut out = shape_only(carried);
        out.dtype = outs[1 + j].dtype.or(carried.dtype);
        res.push(out);
    }
    for k in 0..k_out {
        let o = &outs[1 + n + k];
        let shape = o.shape.as_ref().map(|s| {
            let mut v = vec![trips.clone()];
            v.extend(s.iter().cloned());
            v
        });
        res.push(Fact {
            dtype: o.dtype,
            shape,
            value: None,
            seq: None,
        });
    }
    ctx.set_control(ControlFacts {
        bodies: vec![f],
        trips: Some(trips),
        branch: None,
    });
    Ok(res)
}

/// The `INTS` attribute `name`, or `k` zeros.
fn ints_or_zeros(ctx: &InferCtx, name: &str, k: usize) -> Result<Vec<i64>, OpError> {
    let v = ctx.attr_ints(name)?.unwrap_or_else(|| vec![0; k]);
    if v.len() != k {
        return invalid(format!(
            "attribute '{name}' has {} entries, want {k}",
            v.len()
        ));
    }
    Ok(v)
}

/// The number of scan inputs (`num_scan_inputs`) among `total` inputs: between 1 and `total`.
fn num_scan_inputs(ctx: &InferCtx, total: usize) -> Result<usize, OpError> {
    let k = ctx.attr_opt_int("num_scan_inputs")?.ok_or_else(|| {
        OpError::BadAttr("the required attribute 'num_scan_inputs' is missing".into())
    })?;
    usize::try_from(k)
        .ok()
        .filter(|&k| k >= 1 && k <= total)
        .ok_or_else(|| {
            OpError::BadAttr(format!(
                "num_scan_inputs is {k}, not between 1 and the {total} state and scan inputs"
            ))
        })
}

/// Checks that a body takes `n` states and `k` scan elements and returns the `n` states and the
/// node's remaining outputs; returns the number of scan outputs.
fn scan_body_counts(ctx: &InferCtx, g: &Graph, n: usize, k: usize) -> Result<usize, OpError> {
    if g.inputs.len() != n + k {
        return invalid(format!(
            "the body takes {} inputs but the Scan passes {} ({n} states, {k} scan inputs)",
            g.inputs.len(),
            n + k
        ));
    }
    let k_out = ctx.node.outputs.len().checked_sub(n).ok_or_else(|| {
        OpError::Invalid(format!(
            "the Scan has {} outputs, fewer than its {n} states",
            ctx.node.outputs.len()
        ))
    })?;
    if g.outputs.len() != n + k_out {
        return invalid(format!(
            "the body has {} outputs but the Scan has {}",
            g.outputs.len(),
            n + k_out
        ));
    }
    Ok(k_out)
}

/// `Scan`: from opset 9 `N` states then `K` scan inputs; body `(state..., slice...) -> (state...,
/// scan_out...)`. Before opset 9 see [`infer_scan8`].
fn infer_scan(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    if ctx.opset < 9 {
        return infer_scan8(ctx);
    }
    let g = body(ctx, "body")?;
    let total = ctx.num_inputs();
    let k = num_scan_inputs(ctx, total)?;
    let n = total - k;
    let k_out = scan_body_counts(ctx, g, n, k)?;
    let in_axes = ints_or_zeros(ctx, "scan_input_axes", k)?;
    let out_axes = ints_or_zeros(ctx, "scan_output_axes", k_out)?;
    let mut ins = Vec::with_capacity(total);
    for j in 0..n {
        ins.push(shape_only(ctx.input(j)?));
    }
    let mut trips: Option<Expr> = None;
    for (i, &ax) in in_axes.iter().enumerate() {
        let f = ctx.input(n + i)?;
        let s = ctx.shape(n + i)?;
        let a = ctx.axis(ax, s.len())?;
        match &trips {
            None => trips = Some(s[a].clone()),
            Some(t) => {
                if let (Some(x), Some(y)) = (t.as_const(), s[a].as_const()) {
                    if x != y {
                        return invalid(format!(
                            "scan input {i} has {y} elements along its scan axis, scan input 0 has {x}"
                        ));
                    }
                }
            }
        }
        let mut rest = s.to_vec();
        rest.remove(a);
        ins.push(Fact {
            dtype: f.dtype,
            shape: Some(rest),
            value: None,
            seq: None,
        });
    }
    let trips = trips.unwrap_or_else(Expr::zero);
    let f = infer_carried(ctx, g, ins, 0, 0, n)?;
    let outs = outputs_of(g, &f);
    let mut res = Vec::with_capacity(n + k_out);
    for j in 0..n {
        res.push(shape_only(f.get(g.inputs[j])));
    }
    for (i, &ax) in out_axes.iter().enumerate() {
        let o = &outs[n + i];
        let shape = match &o.shape {
            Some(s) => {
                let a = ctx.axis(ax, s.len() + 1)?;
                let mut v = s.clone();
                v.insert(a, trips.clone());
                Some(v)
            }
            None => None,
        };
        res.push(Fact {
            dtype: o.dtype,
            shape,
            value: None,
            seq: None,
        });
    }
    ctx.set_control(ControlFacts {
        bodies: vec![f],
        trips: Some(trips),
        branch: None,
    });
    Ok(res)
}

/// `Scan` before opset 9: `(sequence_lens?, state..., scan...)`, every input batched on axis 0
/// and every scan input scanned on axis 1 (`directions` per scan input). Each batch entry runs
/// the body over its own sequence (`sequence_lens[b]` steps, else the whole axis) from its own
/// slice of the initial states; outputs are the final states `[B, ...]` and the scan outputs
/// `[B, T, ...]`, zero past an entry's length. The trip count kept in [`ControlFacts`] is the
/// number of body runs over all entries.
fn infer_scan8(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let g = body(ctx, "body")?;
    let total = ctx.num_inputs().saturating_sub(1);
    let k = num_scan_inputs(ctx, total)?;
    let n = total - k;
    let k_out = scan_body_counts(ctx, g, n, k)?;
    let dirs = ints_or_zeros(ctx, "directions", k)?;
    if let Some(d) = dirs.iter().find(|&&d| d != 0 && d != 1) {
        return Err(OpError::BadAttr(format!(
            "directions holds {d}; each entry is 0 (forward) or 1 (reverse)"
        )));
    }
    let (mut batch, mut steps): (Option<Expr>, Option<Expr>) = (None, None);
    let mut ins = Vec::with_capacity(total);
    for j in 0..total {
        let f = ctx.input(1 + j)?;
        let s = ctx.shape(1 + j)?;
        let lead = if j < n { 1 } else { 2 };
        if s.len() < lead {
            return invalid(format!(
                "input {} must have rank >= {lead} (batch{} axes first), got {}",
                1 + j,
                if lead == 2 { " and sequence" } else { "" },
                s.len()
            ));
        }
        same_dim(&mut batch, &s[0], "the batch size", 1 + j)?;
        if j >= n {
            same_dim(&mut steps, &s[1], "the sequence length", 1 + j)?;
        }
        let piece = Fact {
            dtype: f.dtype,
            shape: Some(s[lead..].to_vec()),
            value: None,
            seq: None,
        };
        ins.push(piece);
    }
    let (batch, steps) = (
        batch.unwrap_or_else(Expr::zero),
        steps.unwrap_or_else(Expr::zero),
    );
    let runs = match ctx.opt_input(0) {
        None => &batch * &steps,
        Some(lens) => {
            if let Some(s) = &lens.shape {
                if s.len() != 1
                    || s[0]
                        .as_const()
                        .zip(batch.as_const())
                        .is_some_and(|(a, b)| a != b)
                {
                    return invalid(format!(
                        "sequence_lens must be a vector of the batch size {batch}"
                    ));
                }
            }
            match lens.value.as_ref().and_then(|v| v.as_consts()) {
                Some(v) => Expr::int(v.iter().map(|&x| x.max(0)).sum()),
                None => ctx.fresh_symbol("scan_runs", "the number of body runs of a batched Scan"),
            }
        }
    };
    let f = infer_carried(ctx, g, ins, 0, 0, n)?;
    let outs = outputs_of(g, &f);
    let mut res = Vec::with_capacity(n + k_out);
    for j in 0..n {
        let st = f.get(g.inputs[j]);
        res.push(Fact {
            dtype: st.dtype,
            shape: st
                .shape
                .as_ref()
                .map(|s| prepend(std::slice::from_ref(&batch), s)),
            value: None,
            seq: None,
        });
    }
    for o in &outs[n..] {
        res.push(Fact {
            dtype: o.dtype,
            shape: o
                .shape
                .as_ref()
                .map(|s| prepend(&[batch.clone(), steps.clone()], s)),
            value: None,
            seq: None,
        });
    }
    ctx.set_control(ControlFacts {
        bodies: vec![f],
        trips: Some(runs),
        branch: None,
    });
    Ok(res)
}

/// `lead` followed by `rest`.
fn prepend(lead: &[Expr], rest: &[Expr]) -> Vec<Expr> {
    lead.iter().chain(rest).cloned().collect()
}

/// Records `d` as `what` (the first input that gives it), or checks it against the one recorded
/// when both are constants.
fn same_dim(seen: &mut Option<Expr>, d: &Expr, what: &str, input: usize) -> Result<(), OpError> {
    match seen {
        None => *seen = Some(d.clone()),
        Some(t) => {
            if let (Some(x), Some(y)) = (t.as_const(), d.as_const()) {
                if x != y {
                    return invalid(format!(
                        "input {input} has {what} {y}, an earlier input {x}"
                    ));
                }
            }
        }
    }
    Ok(())
}
