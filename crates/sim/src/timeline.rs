//! Buffers and their lifetimes over a schedule.
//!
//! Step `s` is the execution of `schedule[s]`. A buffer made by step `s` is live from `s` on; it is
//! freed after the last step that reads it or any view of it. Weights and graph inputs are resident for
//! the whole run; graph outputs live to the end. Views (Reshape, Squeeze, contiguous Slice, ...) share
//! their source's buffer and cost nothing. Scratch of a step lives during that step only.
//!
//! [`Timeline::build_assembled`] also assembles concatenations in place (see [`assemblable`]): the
//! output's buffer is allocated when the first input is made, each input is written into its part
//! of it, and the `Concat` itself allocates and copies nothing. Plans do this; the plain executor
//! and `estimate` do not.

use memplan_ir::graph::{Graph, NodeId, ValueId, ValueKind};
use memplan_ir::infer::Facts;
use memplan_ir::ops;
use memplan_ir::Expr;

/// Index of a buffer in [`Timeline::buffers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct BufId(pub u32);

/// What a buffer holds, for the breakdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum Category {
    Weight,
    Input,
    Activation,
    Output,
    Scratch,
}

impl Category {
    pub fn name(self) -> &'static str {
        match self {
            Category::Weight => "weights",
            Category::Input => "inputs",
            Category::Activation => "activations",
            Category::Output => "outputs",
            Category::Scratch => "scratch",
        }
    }
}

/// One allocation.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    /// The value that owns the bytes (the source of any views); `None` for scratch.
    pub value: Option<ValueId>,
    pub size: Expr,
    pub category: Category,
    /// Step that allocates it; `None` for resident buffers (weights, inputs).
    pub alloc: Option<usize>,
    /// Last step during which it is live; `None` when it lives to the end.
    pub last: Option<usize>,
    /// The node that made it (for scratch: the node that uses it).
    pub producer: Option<NodeId>,
    /// The last node to read it or one of its views.
    pub last_reader: Option<NodeId>,
}

impl Buffer {
    /// Whether the buffer is live during step `s`.
    pub fn live_at(&self, s: usize) -> bool {
        self.alloc.is_none_or(|a| a <= s) && self.last.is_none_or(|l| s <= l)
    }
}

/// An allocation event in schedule order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Alloc { step: usize, buf: BufId },
    Free { step: usize, buf: BufId },
}

/// The lifetimes of all buffers over a schedule.
#[derive(Clone, Debug)]
pub struct Timeline {
    pub schedule: Vec<NodeId>,
    pub buffers: Vec<Buffer>,
    /// For each value, the buffer holding its bytes (views map to their source's buffer).
    pub value_buf: Vec<Option<BufId>>,
    /// Whether each node's output 0 is a view of its input 0.
    pub node_is_view: Vec<bool>,
}

/// Why a timeline cannot be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error("value '{name}' has no known {what}; its size cannot be counted")]
    UnknownSize { name: String, what: &'static str },
    #[error("the schedule is not a topological order: node {node} runs before its input '{input}' is made")]
    NotTopological { node: String, input: String },
    #[error("the schedule has {got} steps but the graph has {want} nodes (or repeats a node)")]
    BadSchedule { got: usize, want: usize },
    #[error("dim '{0}' is not given a value")]
    Unbound(String),
    #[error("evaluating a size overflowed or divided by zero: {0}")]
    Eval(String),
}

/// The `Concat` nodes whose output can be assembled in place, in node order: the op allows it
/// ([`memplan_ir::ops::axes::concat_in_place`]: each input is a contiguous run of the output), and
/// each input is a distinct value made by a node that is not a view and not itself assembled, is
/// no graph output, and is an input of no earlier assembled `Concat`; the inputs' producers come in
/// the inputs' order in `facts.order` (so requiring that order of every schedule adds no cycle).
/// Input `i` then occupies the output's bytes from the sum of the sizes of inputs `0..i` on.
pub fn assemblable(graph: &Graph, facts: &Facts) -> Vec<NodeId> {
    let mut pos = vec![usize::MAX; graph.nodes.len()];
    for (s, n) in facts.order.iter().enumerate() {
        if let Some(p) = pos.get_mut(n.index()) {
            *p = s;
        }
    }
    let is_output: std::collections::BTreeSet<ValueId> = graph.outputs.iter().copied().collect();
    let concats = facts.order.iter().enumerate().filter_map(|(s, &nid)| {
        let node = graph.node(nid);
        let (ins, outs) = facts.node_io(node);
        if !ops::axes::concat_in_place(node, &ins, &outs)
            || node.outputs.first().copied().flatten().is_none()
        {
            return None;
        }
        let pieces = node.inputs.iter().map(|i| {
            let v = (*i)?;
            let ValueKind::Node { node: q, slot } = graph.value(v).kind else {
                return None;
            };
            let &maker = pos.get(q.index())?;
            if is_output.contains(&v) || facts.get(v).bytes().is_none() {
                return None;
            }
            let qn = graph.node(q);
            let view = slot == 0 && {
                let (qi, qo) = facts.node_io(qn);
                ops::is_view(qn, &qi, &qo)
            };
            Some(Piece {
                value: v.index(),
                maker,
                view,
            })
        });
        Some((s, pieces.collect()))
    });
    let chosen = choose_assembled(facts.order.len(), concats);
    facts
        .order
        .iter()
        .zip(chosen)
        .filter_map(|(&n, c)| c.then_some(n))
        .collect()
}

/// One input of a `Concat` whose inputs are contiguous runs of its output, for
/// [`choose_assembled`]: the value (by index), the position of the node that makes it in the order
/// the nodes run, and whether that node makes it as a view.
#[derive(Clone, Copy, Debug)]
pub struct Piece {
    pub value: usize,
    pub maker: usize,
    pub view: bool,
}

/// The rule by which the simulator assembles `Concat`s in place, over `concats` in the order they
/// run (each its position in that order, of `len`, and its inputs in order; `None` for an input no
/// node makes, a graph output, or one of unknown size): a `Concat` is assembled where every input
/// is a distinct value made by a node that is not a view of it and not itself assembled, taken by
/// no assembled `Concat` before, and made in the inputs' order. By position, whether each is
/// assembled. [`assemblable`] decides a graph by it, and chunking's prediction the graph a rewrite
/// would make.
pub fn choose_assembled(
    len: usize,
    concats: impl IntoIterator<Item = (usize, Vec<Option<Piece>>)>,
) -> Vec<bool> {
    let mut chosen = vec![false; len];
    let mut taken: std::collections::BTreeSet<usize> = std::collections::BTreeSet::new();
    for (at, pieces) in concats {
        let mut seen: std::collections::BTreeSet<usize> = std::collections::BTreeSet::new();
        let mut prev = 0usize;
        let ok = pieces.iter().all(|p| {
            let Some(p) = p else { return false };
            let in_order = p.maker >= prev;
            prev = p.maker;
            seen.insert(p.value)
                && !p.view
                && !chosen.get(p.maker).copied().unwrap_or(false)
                && !taken.contains(&p.value)
                && in_order
        });
        if ok {
            taken.extend(seen);
            chosen[at] = true;
        }
    }
    chosen
}

impl Timeline {
    /// Builds the lifetimes of every buffer for `schedule` (a topological order of all nodes).
    pub fn build(graph: &Graph, facts: &Facts, schedule: &[NodeId]) -> Result<Timeline, SimError> {
        Self::build_with(graph, facts, schedule, &[])
    }

    /// [`Timeline::build`] with the [`assemblable`] concatenations assembled in place.
    pub fn build_assembled(
        graph: &Graph,
        facts: &Facts,
        schedule: &[NodeId],
    ) -> Result<Timeline, SimError> {
        Self::build_with(graph, facts, schedule, &assemblable(graph, facts))
    }

    /// [`Timeline::build`] with the `Concat` nodes `assembled` (which must be [`assemblable`])
    /// assembled in place.
    pub fn build_with(
        graph: &Graph,
        facts: &Facts,
        schedule: &[NodeId],
        assembled: &[NodeId],
    ) -> Result<Timeline, SimError> {
        let n = graph.nodes.len();
        let mut pos = vec![usize::MAX; n];
        for (s, id) in schedule.iter().enumerate() {
            if id.index() >= n || pos[id.index()] != usize::MAX {
                return Err(SimError::BadSchedule {
                    got: schedule.len(),
                    want: n,
                });
            }
            pos[id.index()] = s;
        }
        if schedule.len() != n {
            return Err(SimError::BadSchedule {
                got: schedule.len(),
                want: n,
            });
        }

        let size_of = |v: ValueId| -> Result<Expr, SimError> {
            facts.get(v).bytes().ok_or_else(|| SimError::UnknownSize {
                name: graph.value(v).name.clone(),
                what: if facts.get(v).dtype.is_none() {
                    "type"
                } else {
                    "shape"
                },
            })
        };

        let mut buffers: Vec<Buffer> = Vec::new();
        let mut value_buf: Vec<Option<BufId>> = vec![None; graph.values.len()];
        let mut node_is_view = vec![false; n];
        let is_output: Vec<bool> = {
            let mut o = vec![false; graph.values.len()];
            for &v in &graph.outputs {
                o[v.index()] = true;
            }
            o
        };

        // The output each assembled part is written into.
        let mut part_of: Vec<Option<ValueId>> = vec![None; graph.values.len()];
        let mut is_assembled = vec![false; n];
        for &c in assembled {
            let Some(node) = graph.nodes.get(c.index()) else {
                continue;
            };
            if let Some(Some(y)) = node.outputs.first() {
                is_assembled[c.index()] = true;
                for v in node.input_ids() {
                    part_of[v.index()] = Some(*y);
                }
            }
        }

        // Resident buffers, in value order.
        let consumers = graph.consumers();
        for v in graph.value_ids() {
            let cat = match graph.value(v).kind {
                ValueKind::Initializer(_) | ValueKind::SparseInitializer(_) => Category::Weight,
                ValueKind::Input => Category::Input,
                _ => continue,
            };
            // Weights nobody reads still occupy memory once loaded.
            let id = BufId(buffers.len() as u32);
            buffers.push(Buffer {
                value: Some(v),
                size: size_of(v)?,
                category: cat,
                alloc: None,
                last: None,
                producer: None,
                last_reader: None,
            });
            value_buf[v.index()] = Some(id);
        }

        for (s, &nid) in schedule.iter().enumerate() {
            let node = graph.node(nid);
            for v in node.input_ids() {
                if let Some(p) = graph.producer(v) {
                    if pos[p.index()] >= s {
                        return Err(SimError::NotTopological {
                            node: node.label(nid),
                            input: graph.value(v).name.clone(),
                        });
                    }
                }
            }
            let (in_facts, out_facts) = facts.node_io(node);
            let view = ops::is_view(node, &in_facts, &out_facts)
                && node
                    .inputs
                    .first()
                    .copied()
                    .flatten()
                    .and_then(|v| value_buf[v.index()])
                    .is_some();
            node_is_view[nid.index()] = view;
            for (slot, o) in node.outputs.iter().enumerate() {
                let Some(v) = *o else { continue };
                if slot == 0 && view {
                    let src = node.inputs[0].and_then(|i| value_buf[i.index()]);
                    value_buf[v.index()] = src;
                    continue;
                }
                if is_assembled[nid.index()] && value_buf[v.index()].is_some() {
                    continue; // made by its inputs
                }
                // A part of an assembled output: the output's buffer, taken by the first part.
                let whole = part_of[v.index()];
                if let Some(y) = whole {
                    if let Some(b) = value_buf[y.index()] {
                        value_buf[v.index()] = Some(b);
                        continue;
                    }
                }
                let owner = whole.unwrap_or(v);
                let id = BufId(buffers.len() as u32);
                buffers.push(Buffer {
                    value: Some(owner),
                    size: size_of(owner)?,
                    category: if is_output[owner.index()] {
                        Category::Output
                    } else {
                        Category::Activation
                    },
                    alloc: Some(s),
                    last: Some(s),
                    producer: Some(nid),
                    last_reader: None,
                });
                value_buf[v.index()] = Some(id);
                value_buf[owner.index()] = Some(id);
            }
            let scratch = match crate::control::scratch(graph, facts, nid)? {
                Some(s) => Some(s),
                None => ops::lookup(node)
                    .and_then(|d| d.mem.scratch)
                    .filter(|_| !is_assembled[nid.index()])
                    .map(|f| f(node, facts.opset, &in_facts, &out_facts)),
            };
            if let Some(size) = scratch {
                if size != Expr::zero() {
                    buffers.push(Buffer {
                        value: None,
                        size,
                        category: Category::Scratch,
                        alloc: Some(s),
                        last: Some(s),
                        producer: Some(nid),
                        last_reader: Some(nid),
                    });
                }
            }
        }

        // Extend each buffer to the last step that reads any value it holds.
        for v in graph.value_ids() {
            let Some(b) = value_buf[v.index()] else {
                continue;
            };
            let buf = &mut buffers[b.0 as usize];
            for &c in &consumers[v.index()] {
                let s = pos[c.index()];
                if buf.last.is_some_and(|l| l < s) {
                    buf.last = Some(s);
                }
                if buf.last_reader.is_none_or(|r| pos[r.index()] < s) {
                    buf.last_reader = Some(c);
                }
            }
            if is_output[v.index()] {
                buf.last = None;
                if buf.category == Category::Activation {
                    buf.category = Category::Output;
                }
            }
        }
        Ok(Timeline {
            schedule: schedule.to_vec(),
            buffers,
            value_buf,
            node_is_view,
        })
    }

    /// Number of steps.
    pub fn steps(&self) -> usize {
        self.schedule.len()
    }

    /// Alloc/free events in step order: at each step, its allocations, then the frees after it.
    pub fn events(&self) -> Vec<Event> {
        let n = self.steps();
        let mut allocs: Vec<Vec<BufId>> = vec![Vec::new(); n];
        let mut frees: Vec<Vec<BufId>> = vec![Vec::new(); n];
        for (i, b) in self.buffers.iter().enumerate() {
            if let Some(a) = b.alloc {
                allocs[a].push(BufId(i as u32));
                if let Some(l) = b.last {
                    frees[l].push(BufId(i as u32));
                }
            }
        }
        let mut ev = Vec::new();
        for s in 0..n {
            ev.extend(allocs[s].iter().map(|&buf| Event::Alloc { step: s, buf }));
            ev.extend(frees[s].iter().map(|&buf| Event::Free { step: s, buf }));
        }
        ev
    }
}
