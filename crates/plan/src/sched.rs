//! Schedulers: topological orders of a [`Problem`] chosen to lower the peak of live bytes.
//!
//! - [`list`]: a list scheduler over the ready set (as XLA's): it prefers nodes that free big
//!   buffers and allocate small ones, with two priority keys.
//! - [`dfs`]: post-order from the graph outputs, which keeps each producer next to its consumer.
//! - [`exact`]: an exact search over frontier sets (down-closed node sets, as Serenity), applied to
//!   consecutive windows of a given order: reordering a window never changes the state at its
//!   boundaries, so each window is optimized independently and the peak never gets worse.
//!
//! Every scheduler returns a permutation of `0..n` that is a topological order of the problem.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::model::Problem;

/// Priority of the list scheduler among ready nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListKey {
    /// Smallest net growth first (bytes allocated minus bytes freed), then smallest allocation.
    NetGrowth,
    /// Smallest step footprint first (bytes allocated incl. scratch), then net growth.
    StepBytes,
}

/// List scheduling: repeatedly runs the ready node with the best key; ties go to graph order.
///
/// Keys are kept in a heap and refreshed when a buffer read by a ready node drops to one remaining
/// reader (that reader would now free it), so the cost is O(E log N).
pub fn list(p: &Problem, key: ListKey) -> Vec<u32> {
    let n = p.nodes();
    let mut indeg: Vec<usize> = p.preds.iter().map(Vec::len).collect();
    let mut remaining: Vec<usize> = p.readers.iter().map(Vec::len).collect();
    let mut done = vec![false; n];
    let mut ready = vec![false; n];
    let mut version = vec![0u32; n];
    let alloc_bytes: Vec<u64> = (0..n)
        .map(|v| p.allocs[v].iter().map(|&b| p.size[b as usize]).sum::<u64>() + p.scratch[v])
        .collect();
    // Bytes of v's own outputs nobody reads: freed right after v.
    let dead_out: Vec<u64> = (0..n)
        .map(|v| {
            p.allocs[v]
                .iter()
                .filter(|&&b| p.readers[b as usize].is_empty() && !p.pinned[b as usize])
                .map(|&b| p.size[b as usize])
                .sum()
        })
        .collect();
    let score = |v: usize, remaining: &[usize]| -> (i64, i64) {
        let freed: u64 = p.reads[v]
            .iter()
            .filter(|&&b| remaining[b as usize] == 1 && !p.pinned[b as usize])
            .map(|&b| p.size[b as usize])
            .sum::<u64>()
            + dead_out[v];
        // Writing over a dying input allocates nothing for output 0.
        let saved = if p.inplace_aware {
            p.reuse[v]
                .iter()
                .find(|&&(_, _, b)| remaining[b as usize] == 1)
                .map_or(0, |&(_, _, b)| p.size[b as usize])
        } else {
            0
        };
        let net = alloc_bytes[v] as i64 - p.scratch[v] as i64 - freed as i64;
        let step = alloc_bytes[v] as i64 - saved as i64;
        match key {
            ListKey::NetGrowth => (net, step),
            ListKey::StepBytes => (step, net),
        }
    };
    type Entry = Reverse<((i64, i64), u32, u32, u32)>;
    let mut heap: BinaryHeap<Entry> = BinaryHeap::new();
    let push = |heap: &mut BinaryHeap<Entry>, v: usize, version: &[u32], remaining: &[usize]| {
        heap.push(Reverse((
            score(v, remaining),
            p.graph_pos[v],
            v as u32,
            version[v],
        )));
    };
    for v in 0..n {
        if indeg[v] == 0 {
            ready[v] = true;
            push(&mut heap, v, &version, &remaining);
        }
    }
    let mut order = Vec::with_capacity(n);
    while let Some(Reverse((_, _, v, ver))) = heap.pop() {
        let v = v as usize;
        if done[v] || ver != version[v] {
            continue;
        }
        done[v] = true;
        order.push(v as u32);
        for &b in &p.reads[v] {
            let b = b as usize;
            remaining[b] -= 1;
            if remaining[b] == 1 {
                if let Some(&u) = p.readers[b].iter().find(|&&u| !done[u as usize]) {
                    let u = u as usize;
                    if ready[u] {
                        version[u] += 1;
                        push(&mut heap, u, &version, &remaining);
                    }
                }
            }
        }
        for &s in &p.succs[v] {
            let s = s as usize;
            indeg[s] -= 1;
            if indeg[s] == 0 {
                ready[s] = true;
                push(&mut heap, s, &version, &remaining);
            }
        }
    }
    order
}

/// Depth-first post-order from the graph outputs (in output order, then nodes nothing depends
/// on, in graph order); predecessors are visited in input order, or reversed with `reverse`.
pub fn dfs(p: &Problem, sinks: &[u32], reverse: bool) -> Vec<u32> {
    let n = p.nodes();
    let mut state = vec![0u8; n]; // 0 new, 1 on stack, 2 done
    let mut order = Vec::with_capacity(n);
    let mut roots: Vec<u32> = sinks.to_vec();
    roots.extend(
        p.graph_order
            .iter()
            .map(|id| id.0)
            .filter(|&v| p.succs[v as usize].is_empty()),
    );
    roots.extend(p.graph_order.iter().map(|id| id.0));
    let mut stack: Vec<(u32, usize)> = Vec::new();
    for r in roots {
        if state[r as usize] != 0 {
            continue;
        }
        state[r as usize] = 1;
        stack.push((r, 0));
        while let Some(&mut (v, ref mut i)) = stack.last_mut() {
            let preds = &p.preds[v as usize];
            if *i < preds.len() {
                let k = if reverse { preds.len() - 1 - *i } else { *i };
                *i += 1;
                let u = preds[k];
                if state[u as usize] == 0 {
                    state[u as usize] = 1;
                    stack.push((u, 0));
                }
            } else {
                state[v as usize] = 2;
                order.push(v);
                stack.pop();
            }
        }
    }
    order
}

/// Limits of the exact search.
#[derive(Clone, Copy, Debug)]
pub struct ExactLimits {
    /// Nodes per window (at most 64).
    pub window: usize,
    /// Frontier states explored per window before giving up on it.
    pub max_states: usize,
    /// Frontier states explored by the whole search (all windows together) before it stops: a
    /// bound on work, not time, so the same problem gets the same order on any machine.
    pub total_states: usize,
}

impl Default for ExactLimits {
    fn default() -> Self {
        ExactLimits {
            window: 24,
            max_states: 50_000,
            total_states: usize::MAX,
        }
    }
}

/// What the exact search did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExactStats {
    /// Windows searched to the end (optimal within their boundaries).
    pub solved: usize,
    /// Windows whose order got strictly better.
    pub improved: usize,
    /// Windows abandoned at the per-window or the total state limit.
    pub gave_up: usize,
}

/// Improves `order` window by window with an exact search over frontier sets; two sweeps, the second
/// shifted by half a window. When the whole graph fits one window, the result is an optimal order.
pub fn exact(p: &Problem, order: &[u32], lim: &ExactLimits) -> (Vec<u32>, ExactStats) {
    let n = order.len();
    let w = lim.window.clamp(1, 64);
    let mut cur = order.to_vec();
    let mut pos = vec![0usize; n];
    for (s, &v) in cur.iter().enumerate() {
        pos[v as usize] = s;
    }
    let mut stats = ExactStats::default();
    let mut budget = lim.total_states;
    let offsets: &[usize] = if n <= w { &[0] } else { &[0, w / 2] };
    for &off in offsets {
        // Live bytes entering each step: unchanged at window boundaries by reordering inside windows.
        let entering = live_entering(p, &cur);
        let mut start = 0;
        let mut end = if off == 0 { w.min(n) } else { off.min(n) };
        while start < n {
            if budget == 0 {
                stats.gave_up += 1;
                return (cur, stats);
            }
            if end - start >= 2 {
                match window_search(p, &cur, &pos, start, end, entering[start], lim, &mut budget) {
                    Some(Some(better)) => {
                        cur[start..end].copy_from_slice(&better);
                        for s in start..end {
                            pos[cur[s] as usize] = s;
                        }
                        stats.solved += 1;
                        stats.improved += 1;
                    }
                    Some(None) => stats.solved += 1,
                    None => stats.gave_up += 1,
                }
            }
            start = end;
            end = (end + w).min(n);
        }
    }
    (cur, stats)
}

/// Bytes live when each step starts, before its allocations (made earlier, still read or pinned).
fn live_entering(p: &Problem, order: &[u32]) -> Vec<u64> {
    let n = order.len();
    let (first, last) = p.lifetimes(order);
    let mut diff = vec![0i128; n + 2];
    for b in 0..p.buffers() {
        if last[b] > first[b] {
            diff[first[b] + 1] += p.size[b] as i128;
            diff[last[b] + 1] -= p.size[b] as i128;
        }
    }
    let mut live = 0i128;
    (0..=n)
        .map(|s| {
            live += diff[s];
            live as u64
        })
        .collect()
}

/// Exact search on `order[start..end]` with the rest fixed. `Some(Some(o))`: a strictly better
/// window order; `Some(None)`: the current order is optimal; `None`: limits hit.
fn window_search(
    p: &Problem,
    order: &[u32],
    pos: &[usize],
    start: usize,
    end: usize,
    live0: u64,
    lim: &ExactLimits,
    budget: &mut usize,
) -> Option<Option<Vec<u32>>> {
    let k = end - start;
    let nodes: &[u32] = &order[start..end];
    let local = |v: u32| -> Option<usize> {
        let s = pos[v as usize];
        (start..end).contains(&s).then(|| s - start)
    };
    // Per local node: predecessor mask, allocated bytes, scratch.
    let mut pred_mask = vec![0u64; k];
    let mut alloc = vec![0u64; k];
    for (i, &v) in nodes.iter().enumerate() {
        for &u in &p.preds[v as usize] {
            if let Some(j) = local(u) {
                pred_mask[i] |= 1 << j;
            }
        }
        alloc[i] = p.allocs[v as usize]
            .iter()
            .map(|&b| p.size[b as usize])
            .sum();
    }
    // Buffers that can be freed inside the window: not pinned, no reader after the window, made at
    // or before the window's end. Each gets the mask of its readers inside the window (and its
    // producer, when the producer is in the window: an unread buffer is freed after its step).
    let mut free_rules: Vec<Vec<(u64, u64)>> = vec![Vec::new(); k]; // per local node: (mask, size)
    let mut seen: Vec<u32> = Vec::new();
    for &v in nodes {
        seen.extend(p.reads[v as usize].iter().copied());
        seen.extend(p.allocs[v as usize].iter().copied());
    }
    seen.sort_unstable();
    seen.dedup();
    for &b in &seen {
        let bi = b as usize;
        let prod_local = local(p.producer[bi]);
        let mut mask = 0u64;
        let mut after = false;
        for &r in &p.readers[bi] {
            match local(r) {
                Some(j) => mask |= 1 << j,
                None => after |= pos[r as usize] >= end,
            }
        }
        if p.pinned[bi] || after {
            continue;
        }
        if let Some(j) = prod_local {
            mask |= 1 << j;
        }
        // Freed by whichever node of `mask` runs last: attach the rule to every member.
        for j in 0..k {
            if mask & (1 << j) != 0 {
                free_rules[j].push((mask, p.size[bi]));
            }
        }
    }
    // In-place reuse per local node, in preference order: (readers mask, bytes saved) of each
    // candidate buffer that can die inside the window.
    let mut reuse_rules: Vec<Vec<(u64, u64)>> = vec![Vec::new(); k];
    if p.inplace_aware {
        for (i, &v) in nodes.iter().enumerate() {
            for &(_, _, b) in &p.reuse[v as usize] {
                let bi = b as usize;
                let mut mask = 0u64;
                let mut after = false;
                for &r in &p.readers[bi] {
                    match local(r) {
                        Some(j) => mask |= 1 << j,
                        None => after |= pos[r as usize] >= end,
                    }
                }
                if !after && !p.pinned[bi] {
                    reuse_rules[i].push((mask, p.size[bi]));
                }
            }
        }
    }
    let step_peak = |i: usize, mem: u64, set: u64| {
        let run = set | (1 << i);
        let saved = reuse_rules[i]
            .iter()
            .find(|&&(mask, _)| mask & !run == 0)
            .map_or(0, |&(_, size)| size);
        mem + alloc[i] + p.scratch[nodes[i] as usize] - saved
    };
    // The current window's peak is the bound to beat.
    let mut ub = 0u64;
    {
        let mut mem = live0;
        let mut done = 0u64;
        for i in 0..k {
            ub = ub.max(step_peak(i, mem, done));
            let (m, d) = advance(i, mem, done, &alloc, &free_rules);
            mem = m;
            done = d;
        }
    }
    // Frontier DP by layers: state = set of window nodes run; value = least peak reaching it.
    #[derive(Clone, Copy)]
    struct St {
        set: u64,
        mem: u64,
        peak: u64,
        parent: u32,
        node: u8,
    }
    let mut layers: Vec<Vec<St>> = vec![vec![St {
        set: 0,
        mem: live0,
        peak: 0,
        parent: u32::MAX,
        node: 0,
    }]];
    let mut explored = 0usize;
    for _ in 0..k {
        let prev = &layers[layers.len() - 1];
        let mut next: Vec<St> = Vec::new();
        let mut index: HashMap<u64, usize> = HashMap::new();
        for (pi, st) in prev.iter().enumerate() {
            for i in 0..k {
                let bit = 1u64 << i;
                if st.set & bit != 0 || pred_mask[i] & !st.set != 0 {
                    continue;
                }
                let peak = st.peak.max(step_peak(i, st.mem, st.set));
                if peak >= ub {
                    continue;
                }
                explored += 1;
                if explored > lim.max_states || *budget == 0 {
                    return None;
                }
                *budget -= 1;
                let (mem, set) = advance(i, st.mem, st.set, &alloc, &free_rules);
                let cand = St {
                    set,
                    mem,
                    peak,
                    parent: pi as u32,
                    node: i as u8,
                };
                match index.get(&set) {
                    Some(&j) => {
                        if peak < next[j].peak {
                            next[j] = cand;
                        }
                    }
                    None => {
                        index.insert(set, next.len());
                        next.push(cand);
                    }
                }
            }
        }
        if next.is_empty() {
            return Some(None);
        }
        layers.push(next);
    }
    // Walk back from the full set.
    let full = layers.last()?;
    let mut idx = (0..full.len()).min_by_key(|&i| (full[i].peak, i))?;
    let mut out = vec![0u32; k];
    for l in (1..layers.len()).rev() {
        let st = layers[l][idx];
        out[l - 1] = nodes[st.node as usize];
        idx = st.parent as usize;
    }
    Some(Some(out))
}

/// Runs local node `i`: adds its allocations, then frees every buffer whose freeing set is now run.
fn advance(
    i: usize,
    mem: u64,
    set: u64,
    alloc: &[u64],
    free_rules: &[Vec<(u64, u64)>],
) -> (u64, u64) {
    let set = set | (1 << i);
    let mut mem = mem + alloc[i];
    for &(mask, size) in &free_rules[i] {
        if mask & !set == 0 {
            mem -= size;
        }
    }
    (mem, set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::{random_graph, SplitMix};
    use std::collections::BTreeMap;

    type Fixture = (
        Problem,
        memplan_ir::Graph,
        memplan_ir::Facts,
        BTreeMap<String, i64>,
    );

    fn problem(seed: u64, max_nodes: usize) -> Fixture {
        let rg = random_graph(&mut SplitMix(seed), max_nodes);
        let facts = memplan_ir::infer_graph(&rg.graph, 18).unwrap();
        let p = Problem::build(&rg.graph, &facts, &facts.order, &rg.dims, 1).unwrap();
        (p, rg.graph, facts, rg.dims)
    }

    /// The simulator's peak (resident excluded) for an order, as an independent measure, with the
    /// concatenations the problem assembles in place assembled (their output taken when the first
    /// part is made).
    fn sim_peak(
        g: &memplan_ir::Graph,
        facts: &memplan_ir::Facts,
        dims: &BTreeMap<String, i64>,
        order: &[u32],
    ) -> u64 {
        let ids: Vec<memplan_ir::NodeId> = order.iter().map(|&v| memplan_ir::NodeId(v)).collect();
        let t = memplan_sim::Timeline::build_assembled(g, facts, &ids).unwrap();
        let cp = memplan_sim::peak::concrete_peak(&t, dims).unwrap();
        cp.peak_bytes - cp.resident
    }

    /// Every topological order, by backtracking; `None` past `cap` orders.
    fn all_orders(p: &Problem, cap: usize) -> Option<Vec<Vec<u32>>> {
        fn rec(
            p: &Problem,
            indeg: &mut Vec<usize>,
            cur: &mut Vec<u32>,
            out: &mut Vec<Vec<u32>>,
            cap: usize,
        ) -> bool {
            if cur.len() == p.nodes() {
                out.push(cur.clone());
                return out.len() <= cap;
            }
            for v in 0..p.nodes() {
                if indeg[v] != 0 || cur.contains(&(v as u32)) {
                    continue;
                }
                cur.push(v as u32);
                for &s in &p.succs[v] {
                    indeg[s as usize] -= 1;
                }
                let ok = rec(p, indeg, cur, out, cap);
                for &s in &p.succs[v] {
                    indeg[s as usize] += 1;
                }
                cur.pop();
                if !ok {
                    return false;
                }
            }
            true
        }
        let mut indeg: Vec<usize> = p.preds.iter().map(Vec::len).collect();
        let mut out = Vec::new();
        rec(p, &mut indeg, &mut Vec::new(), &mut out, cap).then_some(out)
    }

    #[test]
    fn schedulers_return_topological_orders_with_the_simulators_peak() {
        for seed in 0..200 {
            let (p, g, facts, rg_dims) = problem(seed, 40);
            let orders = [
                p.graph_order_u32(),
                list(&p, ListKey::NetGrowth),
                list(&p, ListKey::StepBytes),
                dfs(&p, &[], false),
                dfs(&p, &[], true),
            ];
            let plain = p.without_reuse();
            for o in &orders {
                assert!(p.is_topological(o), "seed {seed}: {o:?}");
                assert_eq!(
                    plain.peak(o),
                    sim_peak(&g, &facts, &rg_dims, o),
                    "seed {seed}"
                );
                assert!(p.peak(o) <= plain.peak(o));
            }
            let (e, _) = exact(&p, &orders[1], &ExactLimits::default());
            assert!(p.is_topological(&e));
            assert!(p.peak(&e) <= p.peak(&orders[1]), "seed {seed}");
        }
    }

    #[test]
    fn exact_search_equals_brute_force_on_small_graphs() {
        let mut tested = 0;
        let mut differ = 0;
        for seed in 0..300u64 {
            let (p, g, facts, dims) = problem(1000 + seed, 12);
            let Some(orders) = all_orders(&p, 20_000) else {
                continue;
            };
            let lim = ExactLimits {
                window: 64,
                max_states: usize::MAX,
                total_states: usize::MAX,
            };
            let start = p.graph_order_u32();
            // Without in-place reuse, measured by the simulator.
            let plain = p.without_reuse();
            let best = orders
                .iter()
                .map(|o| sim_peak(&g, &facts, &dims, o))
                .min()
                .unwrap();
            let (e, stats) = exact(&plain, &start, &lim);
            assert!(p.is_topological(&e));
            assert_eq!(stats.gave_up, 0);
            assert_eq!(sim_peak(&g, &facts, &dims, &e), best, "seed {seed}");
            // With in-place reuse, measured by the model.
            let best_aware = orders.iter().map(|o| p.peak(o)).min().unwrap();
            let (e, _) = exact(&p, &start, &lim);
            assert_eq!(p.peak(&e), best_aware, "seed {seed}");
            differ += usize::from(best_aware < best);
            tested += 1;
        }
        assert!(tested >= 250, "only {tested} graphs were small enough");
        assert!(
            differ >= 15,
            "in-place reuse lowered the optimum on only {differ} graphs"
        );
    }
}
