//! The scheduling problem at concrete dims: nodes with their dependencies, the buffers each node
//! allocates and reads, and buffer sizes. Schedulers, in-place and placement work on this compact
//! form; it is derived from the simulator's [`Timeline`] so that views, scratch and graph outputs
//! follow exactly the simulator's (and executor's) rules.
//!
//! Live-bytes model, per step `s` running node `v`: the buffers live before `s`, plus `v`'s new
//! buffers and scratch; after the step, `v`'s scratch is freed, and so is every buffer whose readers
//! have all run, unless it is pinned (a graph output, live to the end). A buffer nobody reads is
//! freed right after the step that makes it. Resident bytes (weights, inputs) are a constant.
//!
//! Concatenations the simulator can assemble in place ([`memplan_sim::timeline::assemblable`])
//! are: the output's buffer is made by the producer of the first input and holds every input, and
//! the inputs' producers are ordered (each after the previous input's), so that producer runs first
//! in every schedule.

use std::collections::BTreeMap;

use memplan_ir::graph::{Graph, NodeId, ValueKind};
use memplan_ir::infer::Facts;
use memplan_sim::peak::eval_sizes;
use memplan_sim::timeline::{Category, SimError, Timeline};

/// Index of a buffer in [`Problem`].
pub type Buf = u32;

/// The scheduling problem at concrete dims.
#[derive(Clone, Debug)]
pub struct Problem {
    /// Distinct predecessor nodes of each node (producers of what it reads), ascending.
    pub preds: Vec<Vec<u32>>,
    /// Distinct successor nodes of each node, ascending.
    pub succs: Vec<Vec<u32>>,
    /// Non-resident buffers each node allocates (its outputs that are not views).
    pub allocs: Vec<Vec<Buf>>,
    /// Non-resident buffers each node reads, directly or through views, deduplicated.
    pub reads: Vec<Vec<Buf>>,
    /// Scratch bytes each node needs during its step.
    pub scratch: Vec<u64>,
    /// Bytes of each buffer.
    pub size: Vec<u64>,
    /// Node that allocates each buffer.
    pub producer: Vec<u32>,
    /// Distinct nodes that read each buffer (directly or through views), ascending.
    pub readers: Vec<Vec<u32>>,
    /// Buffers that live to the end (they hold a graph output).
    pub pinned: Vec<bool>,
    /// For each value: its buffer, `None` for resident values (weights, inputs, views of them).
    pub value_buf: Vec<Option<Buf>>,
    /// For each buffer: the value that owns its bytes.
    pub owner: Vec<memplan_ir::ValueId>,
    /// Weights and graph inputs, live at every step.
    pub resident: u64,
    /// The most a control-flow node's bodies hold on the heap beside the arena (their peak plus
    /// the node's outputs, made on the heap and then copied into the arena); see
    /// [`crate::plan::Plan::heap_bytes`]. Such a node has no arena scratch.
    pub body_heap: u64,
    /// The bodies run from plans of their own ([`crate::body`]), by node.
    pub bodies: Vec<crate::plan::BodyPlan>,
    /// Position of each node in the graph order the problem was built from (tie-breaks).
    pub graph_pos: Vec<u32>,
    /// The graph order itself.
    pub graph_order: Vec<NodeId>,
    /// Per node: the buffers its output 0 may take over, in preference order, when the node is
    /// their last reader (see [`crate::inplace::candidates`]).
    pub reuse: Vec<Vec<(usize, memplan_ir::ValueId, Buf)>>,
    /// Whether peaks count in-place reuse (a reusing step allocates nothing for output 0).
    pub inplace_aware: bool,
    /// Concatenations assembled in place: the `Concat` node, its output, and its inputs with their
    /// sizes in bytes (input `i` starts where input `i - 1` ends).
    pub assembled: Vec<(u32, memplan_ir::ValueId, Vec<(memplan_ir::ValueId, u64)>)>,
}

impl Problem {
    /// Builds the problem for `graph` at `dims`; `order` is any topological order (the graph order);
    /// `lanes`: the most lanes a body run from a plan of its own runs in
    /// ([`crate::plan::BodyPlan::lanes`]).
    pub fn build(
        graph: &Graph,
        facts: &Facts,
        order: &[NodeId],
        dims: &BTreeMap<String, i64>,
        lanes: u32,
    ) -> Result<Problem, SimError> {
        let concats = memplan_sim::timeline::assemblable(graph, facts);
        Self::build_assembling(graph, facts, order, dims, lanes, &concats)
    }

    /// [`Problem::build`] assembling only the concatenations `concats` (a subset of
    /// [`memplan_sim::timeline::assemblable`]'s; none: every `Concat` copies its inputs).
    pub fn build_assembling(
        graph: &Graph,
        facts: &Facts,
        order: &[NodeId],
        dims: &BTreeMap<String, i64>,
        lanes: u32,
        concats: &[NodeId],
    ) -> Result<Problem, SimError> {
        let t = Timeline::build_with(graph, facts, order, concats)?;
        let sizes = eval_sizes(&t, dims)?;
        let mut assembled = Vec::with_capacity(concats.len());
        for &c in concats {
            let node = graph.node(c);
            let Some(Some(y)) = node.outputs.first().copied() else {
                continue;
            };
            let mut parts = Vec::with_capacity(node.inputs.len());
            for v in node.input_ids() {
                let b = facts.get(v).bytes().ok_or_else(|| SimError::UnknownSize {
                    name: graph.value(v).name.clone(),
                    what: "shape",
                })?;
                let b = b
                    .eval_map(dims)
                    .map_err(|e| SimError::Eval(format!("{e:?}")))?;
                parts.push((v, b.max(0) as u64));
            }
            assembled.push((c.0, y, parts));
        }
        let n = graph.nodes.len();
        // Timeline buffer id -> problem buffer id.
        let mut map: Vec<Option<Buf>> = vec![None; t.buffers.len()];
        let mut size = Vec::new();
        let mut producer = Vec::new();
        let mut pinned = Vec::new();
        let mut owner = Vec::new();
        let mut allocs: Vec<Vec<Buf>> = vec![Vec::new(); n];
        let mut scratch = vec![0u64; n];
        let mut resident = 0u64;
        let mut body_scratch = vec![0u64; n];
        for (i, b) in t.buffers.iter().enumerate() {
            match (b.alloc, b.category, b.value, b.producer) {
                (None, ..) => resident += sizes[i],
                (Some(_), Category::Scratch, _, Some(p))
                    if memplan_ir::ops::control::is_control(&graph.node(p).op) =>
                {
                    body_scratch[p.index()] += sizes[i]
                }
                (Some(_), Category::Scratch, _, Some(p)) => scratch[p.index()] += sizes[i],
                (Some(_), _, Some(v), Some(p)) => {
                    let id = size.len() as Buf;
                    map[i] = Some(id);
                    size.push(sizes[i]);
                    producer.push(p.0);
                    pinned.push(b.last.is_none());
                    owner.push(v);
                    allocs[p.index()].push(id);
                }
                _ => {}
            }
        }
        // A body runs on the heap and makes the node's outputs there too, except those the node
        // makes first and fills in place (they get their arena ranges). A body run from a plan of
        // its own holds, per lane, that plan's arena, resident bytes and heap instead of its
        // simulated peak.
        let bodies: Vec<crate::plan::BodyPlan> = (0..n)
            .filter_map(|k| {
                let node = NodeId::from_index(k);
                let plan = crate::body::plan_body(graph, facts, node, dims)?;
                Some(crate::plan::BodyPlan {
                    node: k as u32,
                    plan,
                    lanes: crate::body::lanes_for(facts, node, dims, lanes),
                })
            })
            .collect();
        for b in &bodies {
            body_scratch[b.node as usize] = b.heap();
        }
        let body_heap = (0..n)
            .filter(|&k| memplan_ir::ops::control::is_control(&graph.nodes[k].op))
            .map(|k| {
                let first =
                    memplan_ir::ops::control::outputs_made_first(&graph.nodes[k], facts.opset);
                let on_heap = allocs[k]
                    .iter()
                    .filter(|&&b| match graph.value(owner[b as usize]).kind {
                        ValueKind::Node { slot, .. } => !first.contains(&(slot as usize)),
                        _ => true,
                    })
                    .map(|&b| size[b as usize])
                    .sum::<u64>();
                body_scratch[k] + on_heap
            })
            .max()
            .unwrap_or(0);
        let value_buf: Vec<Option<Buf>> = t
            .value_buf
            .iter()
            .map(|b| b.and_then(|b| map[b.0 as usize]))
            .collect();

        let consumers = graph.consumers();
        let mut reads: Vec<Vec<Buf>> = vec![Vec::new(); n];
        let mut readers: Vec<Vec<u32>> = vec![Vec::new(); size.len()];
        let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
        for v in graph.value_ids() {
            let p = graph.producer(v);
            for &c in &consumers[v.index()] {
                if let Some(b) = value_buf[v.index()] {
                    reads[c.index()].push(b);
                    readers[b as usize].push(c.0);
                }
                if let Some(p) = p {
                    preds[c.index()].push(p.0);
                }
            }
        }
        // Each assembled input's producer runs after the previous input's.
        for (_, _, parts) in &assembled {
            for w in parts.windows(2) {
                if let (Some(a), Some(b)) = (graph.producer(w[0].0), graph.producer(w[1].0)) {
                    if a != b {
                        preds[b.index()].push(a.0);
                    }
                }
            }
        }
        let mut succs: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (c, ps) in preds.iter_mut().enumerate() {
            ps.sort_unstable();
            ps.dedup();
            for &p in ps.iter() {
                succs[p as usize].push(c as u32);
            }
        }
        for r in reads.iter_mut().chain(readers.iter_mut()) {
            r.sort_unstable();
            r.dedup();
        }
        let mut graph_pos = vec![0u32; n];
        for (s, id) in order.iter().enumerate() {
            graph_pos[id.index()] = s as u32;
        }
        let mut p = Problem {
            preds,
            succs,
            allocs,
            reads,
            scratch,
            size,
            producer,
            readers,
            pinned,
            value_buf,
            owner,
            resident,
            body_heap,
            bodies,
            graph_pos,
            graph_order: order.to_vec(),
            reuse: Vec::new(),
            inplace_aware: true,
            assembled,
        };
        p.reuse = crate::inplace::candidates(graph, facts, &p, dims);
        Ok(p)
    }

    /// The same problem with peaks counted without in-place reuse (what the simulator reports).
    pub fn without_reuse(&self) -> Problem {
        Problem {
            inplace_aware: false,
            ..self.clone()
        }
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.preds.len()
    }

    /// Number of buffers.
    pub fn buffers(&self) -> usize {
        self.size.len()
    }

    /// Whether `order` lists every node once, each after its predecessors.
    pub fn is_topological(&self, order: &[u32]) -> bool {
        let n = self.nodes();
        if order.len() != n {
            return false;
        }
        let mut pos = vec![usize::MAX; n];
        for (s, &v) in order.iter().enumerate() {
            if v as usize >= n || pos[v as usize] != usize::MAX {
                return false;
            }
            pos[v as usize] = s;
        }
        order
            .iter()
            .enumerate()
            .all(|(s, &v)| self.preds[v as usize].iter().all(|&p| pos[p as usize] < s))
    }

    /// Bytes node `v` saves at step `s` by writing its output over a dying input: the first of its
    /// candidates whose last step is `s`. Zero unless the problem is in-place aware.
    pub fn saving(&self, v: usize, s: usize, last: &[usize]) -> u64 {
        if !self.inplace_aware {
            return 0;
        }
        self.reuse[v]
            .iter()
            .find(|&&(_, _, b)| last[b as usize] == s)
            .map_or(0, |&(_, _, b)| self.size[b as usize])
    }

    /// Live bytes during each step of `order` (resident bytes excluded).
    pub fn live_per_step(&self, order: &[u32]) -> Vec<u64> {
        let (first, last) = self.lifetimes(order);
        let n = order.len();
        let mut diff = vec![0i128; n + 1];
        for b in 0..self.buffers() {
            diff[first[b]] += self.size[b] as i128;
            diff[last[b] + 1] -= self.size[b] as i128;
        }
        let mut live = 0i128;
        (0..n)
            .map(|s| {
                live += diff[s];
                let v = order[s] as usize;
                live as u64 + self.scratch[v] - self.saving(v, s, &last)
            })
            .collect()
    }

    /// Peak live bytes over `order` (resident bytes excluded).
    pub fn peak(&self, order: &[u32]) -> u64 {
        self.live_per_step(order).into_iter().max().unwrap_or(0)
    }

    /// First and last step of every buffer over `order`: made at its producer's step, live through
    /// its last reader's step, or to the end when pinned.
    pub fn lifetimes(&self, order: &[u32]) -> (Vec<usize>, Vec<usize>) {
        let n = order.len();
        let mut pos = vec![0usize; n];
        for (s, &v) in order.iter().enumerate() {
            pos[v as usize] = s;
        }
        let mut first = Vec::with_capacity(self.buffers());
        let mut last = Vec::with_capacity(self.buffers());
        for b in 0..self.buffers() {
            let f = pos[self.producer[b] as usize];
            let l = if self.pinned[b] {
                n.saturating_sub(1).max(f)
            } else {
                self.readers[b]
                    .iter()
                    .map(|&r| pos[r as usize])
                    .max()
                    .unwrap_or(f)
                    .max(f)
            };
            first.push(f);
            last.push(l);
        }
        (first, last)
    }

    /// The graph order as problem node indices.
    pub fn graph_order_u32(&self) -> Vec<u32> {
        self.graph_order.iter().map(|n| n.0).collect()
    }
}
