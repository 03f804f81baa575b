//! Offload to a host tier under a device budget.
//!
//! A plan's arena is the device tier. A buffer idle across the device peak (made, or last read,
//! before it and next read after it) can wait in host memory instead: copied out after its last use
//! before the gap, copied back to a (possibly different) device range before its next use. Its
//! device lifetime becomes two pieces, which the arena placement packs like any other blocks, and
//! the host tier holds it in between. ONNX cannot say where a tensor lives, so the plan carries it
//! ([`crate::plan::Offload`]); the executor performs the copies and measures both tiers, and the
//! checker ([`crate::check`], rule 8) verifies that nothing reads an offloaded buffer while it is
//! being copied or on the host, that no buffer overlaps a range while a copy reads or writes it,
//! and that the device tier stays within the budget.
//!
//! The search is greedy and bounded by work: each round takes the step with the most device bytes
//! live, moves the largest buffer idle across it, and places the arena again, until the device peak
//! (arena + resident + control-flow heap) fits the budget or no buffer is idle across the peak.
//! Moved buffers are whole single-value buffers (no views, no in-place reuse, no assembled
//! concatenation, no graph output).
//!
//! The copies are asynchronous, beside the compute steps. Each copy takes its bytes over the
//! bandwidth (bytes per second, both directions, one copy at a time, in the order they start); each
//! step is predicted to take [`step_seconds`] (the [`CostModel`] chunking uses). A copy out starts after the buffer's last use before the gap and is given the
//! fewest following steps whose predicted time covers it (its device range stays reserved until
//! then); a copy back starts at the latest step from which the steps before the reader cover it
//! (its device range is reserved from then). The windows are widened after the moves are chosen:
//! all at once if the placement still fits (the budget, or the device peak without them when
//! nothing fits it), else one buffer at a time, each window halved until it fits, down to none (a
//! copy right after the last use, or right before the reader). The predicted exposed time is what
//! the compute waits for copies in a replay of the schedule at the predicted step times: per copy,
//! its time less the compute it overlaps (and any wait behind an earlier copy). Nothing here depends
//! on the machine: the plan is the same on any machine.

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::graph::{Graph, ValueId};
use memplan_ir::infer::Facts;

use crate::check::{check, host_peak, PlanError};
use crate::cost::CostModel;
use crate::place::{self, Block};
use crate::plan::{BufferKind, Offload, Plan};

/// Default host link bandwidth, bytes per second (16 GB/s, a PCIe 4.0 x16 link).
pub const DEFAULT_BANDWIDTH: f64 = 16e9;

/// One moved buffer.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Moved {
    pub value: String,
    pub bytes: u64,
    /// Copied out after step `out_after`, complete after step `out_done`; copied back from step
    /// `in_start`, complete before step `in_before` (see [`crate::plan::Offload`]).
    pub out_after: usize,
    pub out_done: usize,
    pub in_start: usize,
    pub in_before: usize,
    /// Predicted time of one copy (out or back) at the bandwidth.
    pub copy_seconds: f64,
    /// Predicted time the compute waits for its two copies (not overlapped).
    pub exposed_seconds: f64,
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
    /// Bytes copied both ways, and their time at `bandwidth`, overlapped with compute or not.
    pub transfer_bytes: u64,
    pub bandwidth: f64,
    pub predicted_seconds: f64,
    /// The part of `predicted_seconds` the compute waits for (not overlapped with compute steps).
    pub predicted_exposed_seconds: f64,
    /// The schedule's compute time, by [`step_seconds`].
    pub predicted_compute_seconds: f64,
}

/// An offloaded buffer's steps: last use before the gap `u`, copy out complete after `d`, copy
/// back from `p`, next use `v` (`u <= d < p <= v`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Win {
    u: usize,
    d: usize,
    p: usize,
    v: usize,
}

/// The plan with buffers moved to the host until the device tier fits `device_budget` (or no
/// buffer is idle across the peak), checked against `graph` and `facts`; the copies' windows are
/// chosen at the step times of the default [`CostModel`].
pub fn offload(
    graph: &Graph,
    facts: &Facts,
    plan: &Plan,
    device_budget: u64,
    bandwidth: f64,
) -> Result<(Plan, Report), PlanError> {
    offload_with(
        graph,
        facts,
        plan,
        device_budget,
        bandwidth,
        &CostModel::default(),
    )
}

/// [`offload`] with the step times of `model` (the cost model chunking uses).
pub fn offload_with(
    graph: &Graph,
    facts: &Facts,
    plan: &Plan,
    device_budget: u64,
    bandwidth: f64,
    model: &CostModel,
) -> Result<(Plan, Report), PlanError> {
    let fixed = plan.resident_bytes + plan.heap_bytes;
    let before = plan.arena_bytes + fixed;
    let chains = inplace_chains(plan);
    let idle = idle_gaps(graph, plan, &chains);
    let secs = step_seconds(graph, facts, plan, model);
    let compute: f64 = secs.iter().sum();
    let mut chosen: BTreeMap<usize, Win> = BTreeMap::new();
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
        let Some((_, _, std::cmp::Reverse(bi), (u, v))) = pick else {
            break;
        };
        chosen.insert(bi, Win { u, d: u, p: v, v });
        let placed = place::best(&blocks(plan, &chains, &chosen));
        best = (placed.arena, placed.offsets);
    }
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
                arena_lower_bound: place::lower_bound(&blocks(plan, &chains, &chosen)),
                fits,
                host_bytes: 0,
                moved: Vec::new(),
                transfer_bytes: 0,
                bandwidth,
                predicted_seconds: 0.0,
                predicted_exposed_seconds: 0.0,
                predicted_compute_seconds: compute,
            },
        ));
    }
    // Widen the copy windows as far as the placement allows: within the budget, or no higher than
    // the synchronous copies' arena when nothing fits it.
    let limit = if best.0 + fixed <= device_budget {
        device_budget - fixed
    } else {
        best.0
    };
    let copy = |bi: usize| plan.buffers[bi].size as f64 / bandwidth;
    let wanted: BTreeMap<usize, Win> = chosen
        .iter()
        .map(|(&bi, &w)| (bi, widest(w, copy(bi), &secs)))
        .collect();
    let placed = place::best(&blocks(plan, &chains, &wanted));
    if placed.arena <= limit {
        chosen = wanted;
        best = (placed.arena, placed.offsets);
    } else {
        // One buffer at a time, the longest copies first; each window halved until it fits.
        let mut order: Vec<usize> = chosen.keys().copied().collect();
        order.sort_by_key(|&bi| (std::cmp::Reverse(plan.buffers[bi].size), bi));
        for bi in order {
            let want = wanted[&bi];
            for back in [false, true] {
                let mut k = if back {
                    want.v - want.p
                } else {
                    want.d - want.u
                };
                while k > 0 {
                    let mut trial = chosen.clone();
                    let w = trial.entry(bi).or_insert(want);
                    if back {
                        w.p = w.v - k;
                    } else {
                        w.d = w.u + k;
                    }
                    let placed = place::best(&blocks(plan, &chains, &trial));
                    if placed.arena <= limit {
                        chosen = trial;
                        best = (placed.arena, placed.offsets);
                        break;
                    }
                    k /= 2;
                }
            }
        }
    }
    let (arena, offsets) = best;
    let arena_lower_bound = place::lower_bound(&blocks(plan, &chains, &chosen));
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
        .map(|(&bi, w)| {
            let o = Offload {
                value: plan.buffers[bi].values[0].clone(),
                out_after: w.u,
                out_done: w.d,
                in_start: w.p,
                in_before: w.v,
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
    let exposed = exposed_seconds(&secs, &out.offloads, bandwidth);
    let moved: Vec<Moved> = out
        .offloads
        .iter()
        .zip(&exposed)
        .map(|(o, e)| Moved {
            value: o.value.clone(),
            bytes: o.size,
            out_after: o.out_after,
            out_done: o.out_done,
            in_start: o.in_start,
            in_before: o.in_before,
            copy_seconds: o.size as f64 / bandwidth,
            exposed_seconds: *e,
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
            predicted_exposed_seconds: moved.iter().map(|m| m.exposed_seconds).sum(),
            moved,
            transfer_bytes,
            bandwidth,
            predicted_seconds: transfer_bytes as f64 / bandwidth,
            predicted_compute_seconds: compute,
        },
    ))
}

/// Predicted compute seconds of each step of `plan`, by [`CostModel::node_costs`] at the plan's
/// dims (a control-flow node counts its own inputs and outputs, not its bodies; a concatenation
/// is priced as its copy, whether or not the plan assembles it).
pub fn step_seconds(graph: &Graph, facts: &Facts, plan: &Plan, model: &CostModel) -> Vec<f64> {
    let costs = model.node_costs(graph, facts, &plan.dims, None);
    plan.schedule
        .iter()
        .map(|st| {
            costs
                .get(st.node as usize)
                .map_or(model.view_seconds, |c| c.seconds)
        })
        .collect()
}

/// The predicted time the compute waits for each offload's two copies, replaying the schedule at
/// `secs` per step: before step `s`, copies back starting at `s` are queued, then those due at `s`
/// are waited for; after it, copies out of buffers last used at `s` are queued, then those due are
/// waited for. One copy runs at a time, in queue order (as the executor's copier thread does).
pub fn exposed_seconds(secs: &[f64], offloads: &[Offload], bandwidth: f64) -> Vec<f64> {
    let n = secs.len();
    let mut at: Vec<[Vec<usize>; 4]> = vec![Default::default(); n + 1];
    for (i, o) in offloads.iter().enumerate() {
        for (slot, s) in [o.in_start, o.in_before, o.out_after, o.out_done]
            .into_iter()
            .enumerate()
        {
            if let Some(a) = at.get_mut(s) {
                a[slot].push(i);
            }
        }
    }
    let dur = |i: usize| offloads[i].size as f64 / bandwidth;
    let (mut now, mut link) = (0.0f64, 0.0f64);
    let mut done = vec![0.0f64; offloads.len()];
    let mut exposed = vec![0.0f64; offloads.len()];
    let wait = |now: &mut f64, i: usize, done: &[f64], exposed: &mut [f64]| {
        if done[i] > *now {
            exposed[i] += done[i] - *now;
            *now = done[i];
        }
    };
    for s in 0..n {
        let [back_start, back_due, out_start, out_due] = &at[s];
        for &i in back_start {
            link = link.max(now) + dur(i);
            done[i] = link;
        }
        for &i in back_due {
            wait(&mut now, i, &done, &mut exposed);
        }
        now += secs[s];
        for &i in out_start {
            link = link.max(now) + dur(i);
            done[i] = link;
        }
        for &i in out_due {
            wait(&mut now, i, &done, &mut exposed);
        }
    }
    exposed
}

/// The widest windows of `w`'s synchronous copies (`d = u`, `p = v`) wanted for copies of `copy`
/// seconds: the copy out over the fewest steps after `u` whose time covers it, the copy back over
/// the fewest steps before `v`; when the two meet, the gap is split at its middle.
fn widest(w: Win, copy: f64, secs: &[f64]) -> Win {
    let (u, v) = (w.u, w.v);
    let (mut d, mut acc) = (u, 0.0);
    while acc < copy && d + 1 < v {
        d += 1;
        acc += secs.get(d).copied().unwrap_or(0.0);
    }
    let (mut p, mut acc) = (v, 0.0);
    while acc < copy && p > u + 1 {
        p -= 1;
        acc += secs.get(p).copied().unwrap_or(0.0);
    }
    if d >= p {
        let mid = (u + v) / 2;
        d = d.min(mid);
        p = p.max(mid + 1);
    }
    Win { u, d, p, v }
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

/// The placement blocks: one per chain (its moved buffer's first piece, through the end of its
/// copy out), then each moved buffer's second piece (from the start of its copy back).
fn blocks(plan: &Plan, chains: &Chains, chosen: &BTreeMap<usize, Win>) -> Vec<Block> {
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
        let last = chosen.get(&bi).map_or(b.last, |w| w.d);
        let blk = &mut blocks[k];
        blk.first = blk.first.min(b.first);
        blk.last = blk.last.max(last);
        blk.size = blk.size.max(b.size);
    }
    for (&bi, w) in chosen {
        let b = &plan.buffers[bi];
        blocks.push(Block {
            first: w.p,
            last: b.last,
            size: b.size,
        });
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use memplan_ir::graph::{DeclDim, DeclType};
    use memplan_ir::DataType;

    fn off(out_after: usize, out_done: usize, in_start: usize, in_before: usize) -> Offload {
        Offload {
            value: "v".into(),
            out_after,
            out_done,
            in_start,
            in_before,
            offset: 0,
            size: 16,
        }
    }

    #[test]
    fn exposed_time_is_the_copy_less_the_compute_beside_it() {
        // Steps of 1 s; copies of 2.5 s (16 B at 6.4 B/s).
        let secs = [1.0; 10];
        let bw = 6.4;
        // Synchronous: the compute waits for both copies whole.
        assert_eq!(exposed_seconds(&secs, &[off(1, 1, 8, 8)], bw), [5.0]);
        // Out beside steps 2..=4, back beside steps 5..=7: hidden.
        assert_eq!(exposed_seconds(&secs, &[off(1, 4, 5, 8)], bw), [0.0]);
        // Out beside two steps (0.5 s exposed), back beside one (1.5 s exposed).
        assert_eq!(exposed_seconds(&secs, &[off(1, 3, 7, 8)], bw), [2.0]);
        // Two copies started together run one after the other. Out after step 1 (at 2 s): done at
        // 4.5 s and 7 s, due after step 4 (at 5 s): the second waits 2 s. Back before step 8 (at
        // 10 s): done at 12.5 s and 15 s, due before step 9 (at 11 s): 1.5 s, then 2.5 s more.
        let two = [off(1, 4, 8, 9), off(1, 4, 8, 9)];
        assert_eq!(exposed_seconds(&secs, &two, bw), [1.5, 2.0 + 2.5]);
    }

    #[test]
    fn windows_cover_the_copy_and_no_more() {
        let secs = [1.0; 20];
        let w = Win {
            u: 2,
            d: 2,
            p: 15,
            v: 15,
        };
        // 2.5 s: three steps each way.
        assert_eq!(
            widest(w, 2.5, &secs),
            Win {
                u: 2,
                d: 5,
                p: 12,
                v: 15
            }
        );
        // Too long for the gap: split at its middle, in order.
        let got = widest(w, 100.0, &secs);
        assert_eq!((got.d, got.p), (8, 9));
        // Nothing to hide: one step each way still (a copy takes some time).
        let got = widest(w, 0.0, &secs);
        assert_eq!((got.d, got.p), (2, 15));
    }

    /// `skip = Relu(x)`, read by `a`; a chain from `a` whose peak holds two `[N, N]` tensors
    /// besides `skip` (one at its first and last steps); then `y = h + skip`.
    fn skip_graph() -> Graph {
        let mut g = Graph::default();
        let n = || DeclDim::Param("N".into());
        let x = g.add_input("x", DeclType::tensor(DataType::F32, vec![n(), n()]));
        let mut op = |op: &str, ins: &[ValueId], out: &str| -> ValueId {
            let ins: Vec<Option<ValueId>> = ins.iter().map(|&v| Some(v)).collect();
            g.add_node(format!("{out}_node"), op, &ins, &[out], vec![])
                .1[0]
        };
        let skip = op("Relu", &[x], "skip");
        let a = op("Tanh", &[skip], "a");
        let a2 = op("Neg", &[a], "a2");
        let t = op("Transpose", &[a2], "t");
        let b = op("Sigmoid", &[t], "b");
        let c = op("Mul", &[t, b], "c");
        let d = op("Add", &[c, b], "d");
        let h = op("Neg", &[d], "h");
        let y = op("Add", &[h, skip], "y");
        g.outputs = vec![y];
        g
    }

    #[test]
    fn a_copy_back_is_prefetched_and_the_checker_guards_its_window() {
        let g = skip_graph();
        let facts = memplan_ir::infer_graph(&g, 18).unwrap();
        let n = 64u64;
        let dims = BTreeMap::from([("N".to_string(), n as i64)]);
        let out = crate::optimize(&g, &facts, &dims, &crate::Options::default()).unwrap();
        let tensor = 4 * n * n;
        let budget = out.report.peak_bytes_after - tensor / 2;
        let (plan, rep) = offload(&g, &facts, &out.plan, budget, DEFAULT_BANDWIDTH).unwrap();
        assert!(rep.fits && rep.device_peak_after <= budget, "{rep:?}");
        let o = plan.offloads[0].clone();
        assert_eq!(o.value, "skip");
        let step = |name: &str| plan.schedule.iter().position(|s| s.name == name).unwrap();
        let (a, y) = (step("a_node"), step("y_node"));
        assert_eq!((o.out_after, o.in_before), (a, y), "{}", plan.render());
        // A 16 KiB copy (1 µs at 16 GB/s) hides behind one step each way: the copy out runs
        // beside the step after its last use, the copy back beside the step before its reader.
        assert_eq!(
            (o.out_done, o.in_start),
            (a + 1, y - 1),
            "{}",
            plan.render()
        );
        assert_eq!(rep.moved[0].exposed_seconds, 0.0);
        assert_eq!(rep.predicted_exposed_seconds, 0.0);
        assert_eq!(
            rep.predicted_seconds,
            (2 * tensor) as f64 / DEFAULT_BANDWIDTH
        );
        assert!(rep.predicted_compute_seconds > 0.0);
        // The same moves copied synchronously: all of the transfer time is exposed.
        let sync = [Offload {
            out_done: o.out_after,
            in_start: o.in_before,
            ..o.clone()
        }];
        let secs = step_seconds(&g, &facts, &plan, &CostModel::default());
        let whole = exposed_seconds(&secs, &sync, DEFAULT_BANDWIDTH)[0];
        assert!(
            (whole - rep.predicted_seconds).abs() < 1e-9 * rep.predicted_seconds,
            "{whole} s exposed of {} s",
            rep.predicted_seconds
        );

        // A reader inside the copy back's window (the reader `a` of `skip`, here made part of
        // the window) or the copy out's is refused.
        let mut bad = plan.clone();
        (bad.offloads[0].out_after, bad.offloads[0].out_done) = (a - 1, a - 1);
        bad.offloads[0].in_start = a;
        let e = check(&g, &facts, &bad).unwrap_err().to_string();
        assert!(e.contains("while it is being copied back"), "{e}");
        let mut bad = plan.clone();
        (bad.offloads[0].out_after, bad.offloads[0].out_done) = (a - 1, a);
        let e = check(&g, &facts, &bad).unwrap_err().to_string();
        assert!(e.contains("while it is being copied out"), "{e}");
        // Copies out of order.
        let mut bad = plan.clone();
        bad.offloads[0].in_start = o.out_done;
        assert!(matches!(
            check(&g, &facts, &bad),
            Err(PlanError::Offload { .. })
        ));
        // A copy window stretched over a step where another buffer uses the device range: the
        // copy out's over the next buffer made at the buffer's first offset, the copy back's
        // over the last step of a buffer before it at its second.
        let skip_at = plan.buffers.iter().find(|b| b.values == ["skip"]).unwrap();
        let next = plan
            .buffers
            .iter()
            .filter(|b| b.offset == skip_at.offset && b.first > o.out_done && b.first < o.in_start)
            .map(|b| b.first)
            .min()
            .unwrap();
        let in_flight = |set: &dyn Fn(&mut Offload), want: (&str, usize)| {
            let mut bad = plan.clone();
            set(&mut bad.offloads[0]);
            match check(&g, &facts, &bad) {
                Err(PlanError::InFlight { what, step, .. }) => assert_eq!((what, step), want),
                other => panic!("{other:?}"),
            }
        };
        in_flight(&|o| o.out_done = next, ("copy out", next));
        let before = plan
            .buffers
            .iter()
            .filter(|b| b.offset == o.offset && b.last > o.out_done && b.last < o.in_start)
            .map(|b| b.last)
            .max()
            .unwrap();
        in_flight(&|o| o.in_start = before, ("copy back", before));
    }
}
