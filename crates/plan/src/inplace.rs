//! In-place reuse: a node's output 0 takes over the buffer of an input that dies at that node.
//!
//! The op table says which inputs an op may overwrite (`Mem::inplace`); the executor runs every such
//! decision in place. The planner takes the first listed input whose buffer (reached directly or
//! through views) has exactly the output's byte size and dtype, whose every other reader has already
//! run, that holds no graph output, input or weight, and that no other input slot of the node reads
//! (elementwise ops may read the same value twice, see `Mem::inplace_elementwise`).

use std::collections::BTreeMap;

use memplan_ir::graph::Graph;
use memplan_ir::infer::Facts;
use memplan_ir::{ops, ValueId};

use crate::model::{Buf, Problem};

/// One in-place decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub node: u32,
    /// Input slot whose buffer output 0 overwrites.
    pub slot: usize,
    pub input: ValueId,
    pub output: ValueId,
    pub in_buf: Buf,
    pub out_buf: Buf,
}

/// Per node, in the op table's slot order, the inputs output 0 could overwrite if the node turns out
/// to be the last reader of their buffer: `(slot, input, buffer)`. Everything but "last reader" is
/// decided here, independently of the schedule.
pub fn candidates(
    graph: &Graph,
    facts: &Facts,
    p: &Problem,
    dims: &BTreeMap<String, i64>,
) -> Vec<Vec<(usize, ValueId, Buf)>> {
    let bytes = |v: ValueId| -> Option<u64> {
        facts
            .get(v)
            .bytes()
            .and_then(|e| e.eval_map(dims).ok())
            .map(|x| x.max(0) as u64)
    };
    let mut out = vec![Vec::new(); graph.nodes.len()];
    for (v, node) in graph.nodes.iter().enumerate() {
        let Some(def) = ops::lookup(node) else {
            continue;
        };
        if def.mem.inplace.is_empty() {
            continue;
        }
        let Some(Some(o)) = node.outputs.first().copied() else {
            continue;
        };
        let Some(ob) = p.value_buf[o.index()] else {
            continue;
        };
        if p.producer[ob as usize] != v as u32 || p.owner[ob as usize] != o {
            continue; // output 0 is a view
        }
        let osize = p.size[ob as usize];
        for &slot in def.mem.inplace {
            let Some(Some(x)) = node.inputs.get(slot).copied() else {
                continue;
            };
            let Some(b) = p.value_buf[x.index()] else {
                continue; // resident: a weight or graph input
            };
            let bi = b as usize;
            if p.pinned[bi]
                || p.size[bi] != osize
                || bytes(x) != Some(osize)
                || facts.get(x).dtype != facts.get(o).dtype
                || facts.get(x).dtype.is_none()
            {
                continue;
            }
            // Elementwise ops stage their reads, so the same value may come in twice; other ops
            // read their other inputs while writing, so nothing else may reach the buffer.
            let shared = node.inputs.iter().enumerate().any(|(k, y)| {
                y.is_some_and(|y| {
                    k != slot
                        && p.value_buf[y.index()] == Some(b)
                        && (y != x || !def.mem.inplace_elementwise)
                })
            });
            if !shared {
                out[v].push((slot, x, b));
            }
        }
    }
    out
}

/// In-place decisions over `order`: at each node, the first candidate (see [`candidates`]) whose
/// buffer no later node reads. Also returns, for every buffer, the buffer whose memory it ends up
/// using (itself unless it sits at the end of an in-place chain).
pub fn decide(graph: &Graph, p: &Problem, order: &[u32]) -> (Vec<Decision>, Vec<Buf>) {
    let (_, last) = p.lifetimes(order);
    let mut root: Vec<Buf> = (0..p.buffers() as Buf).collect();
    let mut out = Vec::new();
    for (s, &v) in order.iter().enumerate() {
        for &(slot, x, b) in &p.reuse[v as usize] {
            if last[b as usize] != s {
                continue;
            }
            let Some(Some(o)) = graph.nodes[v as usize].outputs.first().copied() else {
                continue;
            };
            let Some(ob) = p.value_buf[o.index()] else {
                continue;
            };
            root[ob as usize] = root[b as usize];
            out.push(Decision {
                node: v,
                slot,
                input: x,
                output: o,
                in_buf: b,
                out_buf: ob,
            });
            break;
        }
    }
    (out, root)
}
