//! The memory of control-flow nodes (`If`, `Loop`, `Scan`): the peak while a body runs, as the
//! node's scratch.
//!
//! The executor runs a body like a graph: its inputs (the iteration number and condition of a
//! `Loop`, the loop-carried values, a `Scan`'s slices) and its initializers are resident while it
//! runs, its other values are freed after their last reader, outer-scope values are read in place
//! (they are live outside, as inputs of the node). When a body finishes, each output that does
//! not own a buffer made in the body (a view, an input or initializer of the body, an outer value,
//! or a buffer an earlier output already holds) is copied into a fresh buffer; then everything
//! but the outputs is dropped. So one iteration holds, above what is live outside, the body's own
//! peak `P` (its resident inputs included) and, at its end, the body's resident bytes, its outputs'
//! buffers and those copies (`E`); afterwards it holds exactly its outputs' bytes.
//!
//! A `Loop` with trip count `T`, loop-carried bytes `C` and scan-output bytes `S` per
//! iteration: iteration 0 reads the node's own inputs as carried values, so it holds
//! `max(P, E) - C` above the outside; iteration `t >= 1` holds `max(P, E) + S*t` (the previous
//! iterations' scan pieces); at the end the scan outputs are stacked into fresh buffers while the
//! pieces are alive, `C + 2*S*T`. With no iteration the outputs are copies of the initial values.
//! The node's outputs (`C + S*T`) are the simulator's output buffers, so the scratch is the rest:
//! `max([T>=1](max(P,E) - C), [T>=2](max(P,E) + S*(T-1)), C + 2*S*T) - C - S*T`.
//!
//! A `Scan` (opset 9 on) knows its trip count before it starts, so it makes its scan outputs
//! (`S*T`) first and writes each iteration's pieces into their places, dropping them
//! ([`memplan_ir::ops::control::outputs_made_first`]): `max([T>=1](max(P,E) - C) + S*T,
//! [T>=2](max(P,E) + S*T), C + S*T) - C - S*T`. Both are exact when the loop-carried shapes do not
//! change between iterations (inference gives changing dims fresh symbols; the estimate then holds
//! for the body's facts, not per iteration).
//!
//! A `Scan` before opset 9 is batched: its outputs (final states `[B, ...]`, scan outputs
//! `[B, T, ...]`) are made first, zero-filled; each batch entry copies its slice of the initial
//! states (`C` bytes), runs the body on it once per step of its sequence, writing each scan piece
//! into its place and dropping it, and writes its final states into theirs. So with `R` body runs
//! over all entries the scratch is `max([B>=1] C, [R>=1] max(P, E))` (`P` counts the body's inputs,
//! states included).
//!
//! An `If` runs one branch: `max(P, E) - O` with `O` its outputs' bytes; for a condition known only
//! at run time the branch is a 0/1 symbol `c` and the scratch is `c*then + (1-c)*else`.

use memplan_ir::graph::{Graph, NodeId};
use memplan_ir::infer::{ControlFacts, Facts};
use memplan_ir::Expr;

use crate::timeline::{SimError, Timeline};

/// Which outputs of a body own their buffer when it finishes; the others are copied (see the
/// module docs). `t` is the body's timeline.
pub fn owned_outputs(body: &Graph, t: &Timeline) -> Vec<bool> {
    let mut claimed: Vec<crate::BufId> = Vec::new();
    body.outputs
        .iter()
        .map(|&v| {
            let Some(b) = t.value_buf.get(v.index()).copied().flatten() else {
                return false;
            };
            let buf = &t.buffers[b.0 as usize];
            let own = buf.alloc.is_some() && buf.value == Some(v) && !claimed.contains(&b);
            if own {
                claimed.push(b);
            }
            own
        })
        .collect()
}

/// `(max(P, E), resident)` of one body run: its peak with its end (outputs plus copies), and its
/// resident bytes (inputs and initializers).
fn body_peak(body: &Graph, facts: &Facts) -> Result<(Expr, Expr), SimError> {
    let t = Timeline::build(body, facts, &facts.order)?;
    let mut resident = Expr::zero();
    let mut held = Expr::zero();
    for b in &t.buffers {
        match (b.alloc, b.last) {
            (None, _) => resident = &resident + &b.size,
            (Some(_), None) => held = &held + &b.size,
            _ => {}
        }
    }
    let owned = owned_outputs(body, &t);
    let mut copies = Expr::zero();
    for (&v, own) in body.outputs.iter().zip(owned) {
        if !own {
            copies = &copies + &bytes(body, facts, v)?;
        }
    }
    let end = &(&resident + &held) + &copies;
    let steps = crate::peak::symbolic_steps(&t);
    let mut all = vec![end, resident.clone()];
    all.extend(steps);
    Ok((max_of(all), resident))
}

fn max_of(v: Vec<Expr>) -> Expr {
    let mut uniq: Vec<Expr> = Vec::new();
    for e in v {
        if !uniq.contains(&e) {
            uniq.push(e);
        }
    }
    Expr::max_of(uniq.iter()).unwrap_or_else(Expr::zero)
}

fn bytes(g: &Graph, facts: &Facts, v: memplan_ir::ValueId) -> Result<Expr, SimError> {
    let f = facts.get(v);
    f.bytes().ok_or_else(|| SimError::UnknownSize {
        name: g.value(v).name.clone(),
        what: if f.dtype.is_none() { "type" } else { "shape" },
    })
}

/// A `Scan`'s `num_scan_inputs` (0 when absent or negative; inference has checked it).
fn num_scan_inputs(node: &memplan_ir::graph::Node) -> usize {
    match node.attr("num_scan_inputs") {
        Some(memplan_ir::graph::AttrValue::Int(k)) => usize::try_from(*k).unwrap_or(0),
        _ => 0,
    }
}

/// 1 when `t >= k` (k = 1 or 2), else 0, for `t >= 0`.
fn at_least(t: &Expr, k: i64) -> Expr {
    if let Some(c) = t.as_const() {
        return Expr::int(i64::from(c >= k));
    }
    Expr::max(&(t.min(&Expr::int(k)) - (k - 1)), &Expr::zero())
}

/// The scratch of a control-flow node: the bytes its body holds beyond the node's outputs while
/// it runs (see the module docs). `None` for other nodes.
pub fn scratch(graph: &Graph, facts: &Facts, nid: NodeId) -> Result<Option<Expr>, SimError> {
    let Some(cf) = facts.control.get(&nid) else {
        return Ok(None);
    };
    let node = graph.node(nid);
    let bodies: Vec<&Graph> = node.subgraphs().collect();
    let out_bytes = |body: &Graph, f: &Facts, range: std::ops::Range<usize>| {
        let mut s = Expr::zero();
        for k in range {
            s = &s + &bytes(body, f, body.outputs[k])?;
        }
        Ok::<Expr, SimError>(s)
    };
    match node.op.as_str() {
        "If" => {
            let ControlFacts {
                bodies: bf,
                branch: Some(c),
                ..
            } = cf
            else {
                return Ok(None);
            };
            let idx = |name| memplan_ir::ops::control::body_index(node, name);
            let (Some(ti), Some(ei)) = (idx("then_branch"), idx("else_branch")) else {
                return Ok(None);
            };
            // A known condition runs one branch; the other has no facts.
            let taken: &[usize] = match c.as_const() {
                Some(0) => &[ei],
                Some(_) => &[ti],
                None => &[ti, ei],
            };
            let mut per: Vec<Option<Expr>> = vec![None; bodies.len()];
            for &k in taken {
                let (Some(g), Some(f)) = (bodies.get(k), bf.get(k)) else {
                    return Ok(None);
                };
                let (pk, _) = body_peak(g, f)?;
                per[k] = Some(pk - out_bytes(g, f, 0..g.outputs.len())?);
            }
            let (t, e) = (
                per.get(ti).cloned().flatten(),
                per.get(ei).cloned().flatten(),
            );
            Ok(match (c.as_const(), t, e) {
                (Some(0), _, e) => e,
                (Some(_), t, _) => t,
                (None, Some(t), Some(e)) => Some(c * &t + (Expr::one() - c) * e),
                _ => None,
            })
        }
        "Scan" if facts.opset < 9 => {
            let (Some(g), Some(f), Some(runs)) = (bodies.first(), cf.bodies.first(), &cf.trips)
            else {
                return Ok(None);
            };
            let n = node.inputs.len().saturating_sub(1 + num_scan_inputs(node));
            let Some(batch) = node
                .inputs
                .iter()
                .skip(1)
                .flatten()
                .find_map(|&v| facts.get(v).shape.as_ref()?.first().cloned())
            else {
                return Ok(None);
            };
            let mut states = Expr::zero();
            for &v in g.inputs.iter().take(n) {
                states = &states + &bytes(g, f, v)?;
            }
            let (pk, _) = body_peak(g, f)?;
            Ok(Some(max_of(vec![
                at_least(&batch, 1) * states,
                at_least(runs, 1) * pk,
            ])))
        }
        "Loop" | "Scan" => {
            let (Some(g), Some(f), Some(trips)) = (bodies.first(), cf.bodies.first(), &cf.trips)
            else {
                return Ok(None);
            };
            let (first_in, first_out) = if node.op == "Loop" { (2, 1) } else { (0, 0) };
            let n = if node.op == "Loop" {
                node.inputs.len().saturating_sub(2)
            } else {
                node.inputs.len().saturating_sub(num_scan_inputs(node))
            };
            if g.inputs.len() < first_in + n || g.outputs.len() < first_out + n {
                return Ok(None);
            }
            let mut carried = Expr::zero();
            for j in 0..n {
                carried = &carried + &bytes(g, f, g.inputs[first_in + j])?;
            }
            let scans = out_bytes(g, f, first_out + n..g.outputs.len())?;
            let (pk, _) = body_peak(g, f)?;
            let t = trips;
            let held = &carried + &(&scans * t);
            if node.op == "Scan" {
                // The scan outputs are made first and filled piece by piece.
                let all = &scans * t;
                let first = at_least(t, 1) * (&pk - &carried) + &all;
                let later = at_least(t, 2) * (&pk + &all);
                return Ok(Some(max_of(vec![first, later, held.clone()]) - held));
            }
            let first = at_least(t, 1) * (&pk - &carried);
            let later = at_least(t, 2) * (&pk + &(&scans * &(t - &Expr::one())));
            let end = &carried + &(&scans * &(t * &Expr::int(2)));
            Ok(Some(max_of(vec![first, later, end]) - held))
        }
        _ => Ok(None),
    }
}
