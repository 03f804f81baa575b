//! Offload to a host tier under a device budget.
//!
//! A plan's arena is the device tier. A buffer idle across the device peak (made, or last read,
//! before it and next read after it) can wait in host memory instead: copied out after its last use
//! before the gap, copied back to a (possibly different) device range before its next use. Its
//! device lifetime becomes two pieces, which the arena placement packs like any other blocks, and
//! the host tier holds it in between. ONNX cannot say where a tensor lives, so the plan carries it
//! ([`crate::plan::Offload`]); the executor performs the copies and measures both tiers, and the
//! checker ([`crate::check`], rule 8) verifies that nothing reads an offloaded buffer while it is on
//! the host, that the pieces never overlap, and that the device tier stays within the budget.
//!
//! The search is greedy and bounded by work: each round takes the step with the most device bytes
//! live, moves the largest buffer idle across it, and places the arena again, until the device peak
//! (arena + resident + control-flow heap) fits the budget or no buffer is idle across the peak.
//! Moved buffers are whole single-value buffers (no views, no in-place reuse, no assembled
//! concatenation, no graph output). The transfer time is predicted from a bandwidth (bytes per
//! second, both directions); this executor copies synchronously, so the copies are not overlapped
//! with compute here.

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::graph::{Graph, ValueId};
use memplan_ir::infer::Facts;

use crate::check::{check, host_peak, PlanError};
use crate::place::{self, Block};
use crate::plan::{BufferKind, Offload, Plan};

/// Default host link bandwidth, bytes per second (16 GB/s, a PCIe 4.0 x16 link).
pub const DEFAULT_BANDWIDTH: f64 = 16e9;

/// One moved buffer.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Moved {
    pub value: String,
    pub bytes: u64,
    /// Copied out after this step, back before that one.
    pub out_after: usize,
    pub in_before: usize,
}

/// What [`offload`] did.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Report {
    pub device_budget: u64,
    /// Device peak (arena + resident + heap) before and after.
    pub device_peak_before: u64,
    pub device_peak_after: u64,
    /// The most bytes live at once in the device arena after the move: no placement of it is
    /// smaller.
    pub arena_lower_bound: u64,
    pub fits: bool,
    /// The most the host tier holds at once.
    pub host_bytes: u64,
    pub moved: Vec<Moved>,
    /// Bytes copied both ways, and their time at `bandwidth` (not overlapped with compute).
    pub transfer_bytes: u64,
    pub bandwidth: f64,
    pub predicted_seconds: f64,
}

/// The plan with buffers moved to the host until the device tier fits `device_budget` (or no
/// buffer is idle across the peak), checked against `graph` and `facts`.
pub fn offload(
    graph: &Graph,
    facts: &Facts,
    plan: &Plan,
    device_budget: u64,
    bandwidth: f64,
) -> Result<(Plan, Report), PlanError> {
    let fixed = plan.resident_bytes + plan.heap_bytes;
    let before = plan.arena_bytes + fixed;
    let chains = inplace_chains(plan);
    let idle = idle_gaps(graph, plan, &chains);
    let mut chosen: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    let mut best = (plan.arena_bytes, Vec::new());
    for _ in 0..plan.buffers.len() {
        if best.0 + fixed <= device_budget {
            break;
        }
        let Some((_, step)) = place::live_peak(&blocks(plan, &chains, &chosen)) else {
            break;
        };
        // The largest buffer idle across the peak step (ties: the longer gap, then the first).
        let pick = idle
            .iter()
            .filter(|(bi, _)| !chosen.contains_key(bi))
            .filter_map(|(&bi, gaps)| {
                let &(u, v) = gaps.iter().find(|&&(u, v)| u < step && step < v)?;
                Some((plan.buffers[bi].size, v - u, std::cmp::Reverse(bi), (u, v)))
            })
            .max();
        let Some((_, _, std::cmp::Reverse(bi), gap)) = pick else {
            break;
        };
        chosen.insert(bi, gap);
        let placed = place::best(&blocks(plan, &chains, &chosen));
        best = (placed.arena, placed.offsets);
    }
    let (arena, offsets) = best;
    let arena_lower_bound = place::lower_bound(&blocks(plan, &chains, &chosen));
    let mut out = plan.clone();
    if chosen.is_empty() {
        let fits = before <= device_budget;
        out.device_budget = fits.then_some(device_budget);
        return Ok((
            out,
            Report {
                device_budget,
                device_peak_before: before,
                device_peak_after: before,
                arena_lower_bound,
                fits,
                host_bytes: 0,
                moved: Vec::new(),
                transfer_bytes: 0,
                bandwidth,
                predicted_seconds: 0.0,
            },
        ));
    }
    // Blocks: one per chain (in-place reuse), then the second piece of each moved buffer.
    let mut k = 0;
    let mut chain_off: BTreeMap<usize, u64> = BTreeMap::new();
    for c in &chains.roots {
        chain_off.insert(*c, offsets[k]);
        k += 1;
    }
    for (bi, b) in out.buffers.iter_mut().enumerate() {
        b.offset = chain_off[&chains.root[bi]];
    }
    out.offloads = chosen
        .iter()
        .map(|(&bi, &(u, v))| {
            let o = Offload {
                value: plan.buffers[bi].values[0].clone(),
                out_after: u,
                in_before: v,
                offset: offsets[k],
                size: plan.buffers[bi].size,
            };
            k += 1;
            o
        })
        .collect();
    out.arena_bytes = arena;
    out.host_bytes = host_peak(&out.offloads);
    out.device_budget = Some(device_budget);
    let after = arena + fixed;
    let fits = after <= device_budget;
    if !fits {
        // The plan still says what it was made for, but only a plan that fits claims the budget.
        out.device_budget = None;
    }
    check(graph, facts, &out)?;
    let moved: Vec<Moved> = out
        .offloads
        .iter()
        .map(|o| Moved {
            value: o.value.clone(),
            bytes: o.size,
            out_after: o.out_after,
            in_before: o.in_before,
        })
        .collect();
    let transfer_bytes = 2 * moved.iter().map(|m| m.bytes).sum::<u64>();
    let host_bytes = out.host_bytes;
    Ok((
        out,
        Report {
            device_budget,
            device_peak_before: before,
            device_peak_after: after,
            arena_lower_bound,
            fits,
            host_bytes,
            moved,
            transfer_bytes,
            bandwidth,
            predicted_seconds: transfer_bytes as f64 / bandwidth,
        },
    ))
}

/// Buffers grouped by in-place reuse: a chain shares one offset.
struct Chains {
    /// The chain (its root buffer) of each buffer.
    root: Vec<usize>,
    /// Roots, in buffer order.
    roots: Vec<usize>,
    /// Buffers that take part in a reuse.
    reused: BTreeSet<usize>,
}

fn inplace_chains(plan: &Plan) -> Chains {
    let mut root: Vec<usize> = (0..plan.buffers.len()).collect();
    fn find(r: &mut [usize], x: usize) -> usize {
        let mut x = x;
        while r[x] != x {
            r[x] = r[r[x]];
            x = r[x];
        }
        x
    }
    let by_value: BTreeMap<&str, usize> = plan
        .buffers
        .iter()
        .enumerate()
        .filter(|(_, b)| b.kind != BufferKind::Scratch)
        .flat_map(|(i, b)| b.values.iter().map(move |v| (v.as_str(), i)))
        .collect();
    let mut reused = BTreeSet::new();
    for ip in &plan.inplace {
        if let (Some(&a), Some(&b)) = (
            by_value.get(ip.input.as_str()),
            by_value.get(ip.output.as_str()),
        ) {
            reused.insert(a);
            reused.insert(b);
            let (ra, rb) = (find(&mut root, a), find(&mut root, b));
            let (lo, hi) = (ra.min(rb), ra.max(rb));
            root[hi] = lo;
        }
    }
    let root: Vec<usize> = (0..root.len()).map(|i| find(&mut root, i)).collect();
    let roots: Vec<usize> = (0..root.len()).filter(|&i| root[i] == i).collect();
    Chains {
        root,
        roots,
        reused,
    }
}

/// Per movable buffer: its idle gaps `(u, v)`, consecutive uses with at least one step between.
fn idle_gaps(graph: &Graph, plan: &Plan, chains: &Chains) -> BTreeMap<usize, Vec<(usize, usize)>> {
    let mut pos = vec![usize::MAX; graph.nodes.len()];
    for (s, st) in plan.schedule.iter().enumerate() {
        if let Some(p) = pos.get_mut(st.node as usize) {
            *p = s;
        }
    }
    let by_name: BTreeMap<&str, ValueId> = graph
        .value_ids()
        .map(|v| (graph.value(v).name.as_str(), v))
        .collect();
    // Readers through inputs and through subgraphs' outer-scope reads alike.
    let readers = graph.consumers();
    let mut out = BTreeMap::new();
    for (bi, b) in plan.buffers.iter().enumerate() {
        if b.kind != BufferKind::Activation || b.values.len() != 1 || chains.reused.contains(&bi) {
            continue;
        }
        let Some(&v) = by_name.get(b.values[0].as_str()) else {
            continue;
        };
        let mut steps: Vec<usize> = vec![b.first];
        steps.extend(readers[v.index()].iter().map(|r| pos[r.index()]));
        steps.sort_unstable();
        steps.dedup();
        let gaps: Vec<(usize, usize)> = steps
            .windows(2)
            .filter(|w| w[1] >= w[0] + 2 && w[1] <= b.last)
            .map(|w| (w[0], w[1]))
            .collect();
        if !gaps.is_empty() {
            out.insert(bi, gaps);
        }
    }
    out
}

/// The placement blocks: one per chain (its moved buffer's first piece), then each moved
/// buffer's second piece.
fn blocks(plan: &Plan, chains: &Chains, chosen: &BTreeMap<usize, (usize, usize)>) -> Vec<Block> {
    let mut idx: BTreeMap<usize, usize> = BTreeMap::new();
    let mut blocks: Vec<Block> = Vec::with_capacity(chains.roots.len() + chosen.len());
    for &r in &chains.roots {
        idx.insert(r, blocks.len());
        blocks.push(Block {
            first: usize::MAX,
            last: 0,
            size: 0,
        });
    }
    for (bi, b) in plan.buffers.iter().enumerate() {
        let k = idx[&chains.root[bi]];
        let last = chosen.get(&bi).map_or(b.last, |&(u, _)| u);
        let blk = &mut blocks[k];
        blk.first = blk.first.min(b.first);
        blk.last = blk.last.max(last);
        blk.size = blk.size.max(b.size);
    }
    for (&bi, &(_, v)) in chosen {
        let b = &plan.buffers[bi];
        blocks.push(Block {
            first: v,
            last: b.last,
            size: b.size,
        });
    }
    blocks
}
