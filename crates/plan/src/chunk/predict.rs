//! Predicting a chunking rewrite's live bytes without building it.
//!
//! [`Base`] is the current graph evaluated once at the dims: value sizes, each node's view flag and
//! scratch, the simulated live bytes per step. [`predict`] lays out the nodes the rewrite would have
//! (the untouched nodes around the [`Emitted`] list, in the order `apply` puts them), orders them
//! as the rewritten graph's topological sort does, and runs the simulator's rules over them: a
//! buffer per node output unless the node is a view of its input 0, freed after its last reader,
//! graph outputs to the end, scratch during its step, weights and inputs (now also the slice
//! bounds) resident. The clones' and slices' sizes, views and scratch come from the op table at the
//! chunk's shapes. The result is the peak the simulator gives the built graph, byte for byte
//! (tested); only building and re-inferring the graph are skipped.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Mutex;

use memplan_ir::graph::{Graph, Node, NodeId, ValueId, ValueKind};
use memplan_ir::infer::{Fact, Facts, Known};
use memplan_ir::{ops, Expr};
use memplan_sim::peak::concrete_peak;
use memplan_sim::timeline::{assemblable, choose_assembled, Category, Piece, Timeline};

use super::rewrite::{Emit, Emitted, Wire};
use super::{ChunkError, Region};
use crate::cost::CostModel;

/// The current graph at concrete dims.
pub(crate) struct Base<'a> {
    pub g: &'a Graph,
    pub facts: &'a Facts,
    pub dims: &'a BTreeMap<String, i64>,
    pub consumers: Vec<Vec<NodeId>>,
    /// Bytes of each value (0 when it is not a tensor this graph holds).
    pub bytes: Vec<u64>,
    /// Whether each node's output 0 is a view of its input 0.
    pub view: Vec<bool>,
    pub peak: u64,
    /// The step (= node index) of the peak.
    pub peak_step: Option<usize>,
    /// Live bytes during each step (resident bytes included).
    pub per_step: Vec<u64>,
    /// Buffers live at the peak: (owning value or scratch node label, bytes), largest first.
    pub live: Vec<(String, u64)>,
    /// Each node as [`predict`] simulates it, made once for every candidate of a step.
    nodes: Vec<ANode>,
    /// Memory rules evaluated at chunk shapes so far (candidates are predicted on several threads;
    /// each entry is a pure function of its key, so which thread fills it does not matter).
    cache: Mutex<Cache>,
}

/// View flags and scratch bytes of the new nodes, by what decides them.
#[derive(Default)]
struct Cache {
    /// By region node, chunk width and the split axis of each of its inputs and outputs; with
    /// whether it is a `Concat` whose inputs are contiguous runs of its output (at that width).
    clone: BTreeMap<(NodeId, i64, Vec<Option<(usize, i64)>>), (Mem, bool)>,
    /// By sliced value, axis and chunk width.
    slice: BTreeMap<(ValueId, usize, i64), Mem>,
    /// Predicted seconds of the graph's nodes, by node.
    whole: BTreeMap<NodeId, f64>,
}

/// A new node's view flag, scratch bytes and predicted seconds.
#[derive(Clone, Copy)]
struct Mem {
    view: bool,
    scratch: u64,
    seconds: f64,
}

impl<'a> Base<'a> {
    /// Evaluates `g` (whose node list is in topological order, as `facts.order`) at `dims`.
    pub fn new(
        g: &'a Graph,
        facts: &'a Facts,
        dims: &'a BTreeMap<String, i64>,
        assemble: bool,
    ) -> Result<Base<'a>, ChunkError> {
        let sim = |e: String| ChunkError::Sim(e);
        if facts.order.iter().enumerate().any(|(i, n)| n.index() != i) {
            return Err(sim("the node list is not in topological order".into()));
        }
        let mut assembled = vec![false; g.nodes.len()];
        let list = if assemble {
            assemblable(g, facts)
        } else {
            Vec::new()
        };
        for n in &list {
            assembled[n.index()] = true;
        }
        let t =
            Timeline::build_with(g, facts, &facts.order, &list).map_err(|e| sim(e.to_string()))?;
        let p = concrete_peak(&t, dims).map_err(|e| sim(e.to_string()))?;
        let mut scratch = vec![0u64; g.nodes.len()];
        for (b, &sz) in t.buffers.iter().zip(&p.sizes) {
            if let (Category::Scratch, Some(n)) = (b.category, b.producer) {
                scratch[n.index()] += sz;
            }
        }
        let bytes = g
            .value_ids()
            .map(|v| {
                facts
                    .get(v)
                    .bytes()
                    .and_then(|e| e.eval_map(dims).ok())
                    .map_or(0, |x| x.max(0) as u64)
            })
            .collect();
        // What each node reads (inputs and the outer names its subgraphs use), deduplicated.
        let reads: Vec<Vec<ValueId>> = g
            .nodes
            .iter()
            .map(|n| {
                let mut r: Vec<ValueId> = n.input_ids().collect();
                for sub in n.subgraphs() {
                    r.extend(sub.outer_reads_resolved(g));
                }
                r.sort_unstable();
                r.dedup();
                r
            })
            .collect();
        let live = p
            .live
            .iter()
            .filter(|e| e.category != Category::Weight && e.category != Category::Input)
            .map(|e| {
                let b = &t.buffers[e.buf.0 as usize];
                let what = match (b.value, b.producer) {
                    (Some(v), _) => g.value(v).name.clone(),
                    (None, Some(n)) => format!("scratch of {}", g.node(n).label(n)),
                    _ => String::new(),
                };
                (what, e.bytes)
            })
            .collect();
        let nodes = g
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| ANode {
                reads: reads[i].iter().map(|v| v.index() as u32).collect(),
                input0: node
                    .inputs
                    .first()
                    .copied()
                    .flatten()
                    .map(|v| v.index() as u32),
                outputs: node
                    .outputs
                    .iter()
                    .map(|o| o.map(|v| v.index() as u32))
                    .collect(),
                view: t.node_is_view[i],
                scratch: scratch[i],
                assembled: assembled[i],
                joins: {
                    let (ins, outs) = facts.node_io(node);
                    let all: Option<Vec<u32>> = node
                        .inputs
                        .iter()
                        .map(|v| v.map(|v| v.index() as u32))
                        .collect();
                    all.filter(|_| ops::axes::concat_in_place(node, &ins, &outs))
                },
            })
            .collect();
        Ok(Base {
            g,
            facts,
            dims,
            consumers: g.consumers(),
            bytes,
            view: t.node_is_view,
            peak: p.peak_bytes,
            peak_step: p.peak_step,
            per_step: p.per_step.clone(),
            live,
            nodes,
            cache: Mutex::default(),
        })
    }

    /// Whether node `i` is a `Concat` assembled in place.
    #[cfg(test)]
    pub fn assembled(&self, i: usize) -> bool {
        self.nodes[i].assembled
    }

    /// The entry `key` of the cache's map `pick`, made by `make` when missing. The lock is not held
    /// while `make` runs: two threads may both make an entry, to the same value.
    fn memo<K: Ord + Clone, V: Copy>(
        &self,
        pick: fn(&mut Cache) -> &mut BTreeMap<K, V>,
        key: &K,
        make: impl FnOnce() -> Result<V, ChunkError>,
    ) -> Result<V, ChunkError> {
        let lock = || self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = pick(&mut lock()).get(key) {
            return Ok(*v);
        }
        let v = make()?;
        pick(&mut lock()).insert(key.clone(), v);
        Ok(v)
    }

    fn eval(&self, e: &Expr) -> Result<u64, ChunkError> {
        e.eval_map(self.dims)
            .map(|x| x.max(0) as u64)
            .map_err(|e| ChunkError::Sim(format!("{e:?}")))
    }
}

/// What chunking a region would give.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Prediction {
    /// The simulated peak of the rewritten graph (resident bytes included).
    pub peak: u64,
    /// The highest live bytes over the steps of the nodes that ran from the first region node to
    /// the last and at the old peak (the new nodes, and the untouched nodes in that span; resident
    /// bytes included), and at the first reader of each region output after it (where the output
    /// is whole). It was the old peak; the rewrite is progress where it drops.
    pub local: u64,
    /// The same over the span and the old peak only, without the readers after: how low the
    /// rewrite takes the steps it runs.
    pub span: u64,
    /// Bytes the rewrite copies that the original did not: slices that are not views, and the
    /// concatenations unless they are assembled in place.
    pub copied: u64,
    /// Nodes added.
    pub added: usize,
    /// Predicted extra seconds per the cost model: the new nodes' less the removed ones' (the
    /// region's nodes that are not kept).
    pub seconds: f64,
    /// Live bytes during each step of the rewritten graph's order (resident bytes included).
    pub per_step: Vec<u64>,
}

/// A node of the rewritten graph, for simulation.
#[derive(Clone)]
struct ANode {
    /// Values read (indices into the value table), deduplicated.
    reads: Vec<u32>,
    input0: Option<u32>,
    outputs: Vec<Option<u32>>,
    view: bool,
    /// Scratch bytes when not assembled in place (an assembled node has none).
    scratch: u64,
    /// A `Concat` whose output is assembled in place from its inputs.
    assembled: bool,
    /// For a `Concat` whose inputs are contiguous runs of its output: its inputs in order (what
    /// [`assemble_in`] decides it on).
    joins: Option<Vec<u32>>,
}

const NONE: u32 = u32::MAX;
const RESIDENT: u32 = u32::MAX - 1;

/// The rewritten graph's values: the original ones, then the new ones as they are made.
struct Table {
    bytes: Vec<u64>,
    resident: Vec<bool>,
    wires: BTreeMap<Wire, u32>,
}

impl Table {
    /// The index of `w`, added with `bytes` (and resident or not) on first use.
    fn wire(&mut self, w: Wire, bytes: u64, resident: bool) -> u32 {
        *self.wires.entry(w).or_insert_with(|| {
            self.bytes.push(bytes);
            self.resident.push(resident);
            (self.bytes.len() - 1) as u32
        })
    }

    fn get(&self, w: Wire) -> u32 {
        self.wires.get(&w).copied().unwrap_or(NONE)
    }
}

/// A value's fact over chunk width `w`: a split value (`axis` given) gets `w` at its axis and loses
/// its known contents, its other dims stay as inference gives them to a slice of it.
fn chunk_fact(f: &Fact, axis: Option<usize>, w: i64) -> Fact {
    let mut f = f.clone();
    if let (Some(a), Some(s)) = (axis, f.shape.as_mut()) {
        if let Some(d) = s.get_mut(a) {
            *d = Expr::from(w);
        }
        f.value = None;
    }
    f
}

/// View flag, scratch bytes and predicted seconds of an op over the given facts.
fn mem_of(
    base: &Base,
    cost: &CostModel,
    node: &Node,
    ins: &[Option<&Fact>],
    outs: &[Option<&Fact>],
) -> Result<Mem, ChunkError> {
    let view = ops::is_view(node, ins, outs);
    let scratch = match ops::lookup(node).and_then(|d| d.mem.scratch) {
        Some(f) => base.eval(&f(node, base.facts.opset, ins, outs))?,
        None => 0,
    };
    let seconds = cost.node_seconds(node, ins, outs, view, base.dims);
    Ok(Mem {
        view,
        scratch,
        seconds,
    })
}

/// Predicts the rewrite `em` of `region` over `base`. With `assemble`, a `Concat` the simulator
/// would assemble in place over the rewritten order ([`assemble_in`]) is counted so: its buffer is
/// taken when its first input is made, and its inputs are written into it.
pub(crate) fn predict(
    base: &Base,
    region: &Region,
    em: &Emitted,
    assemble: bool,
    cost: &CostModel,
) -> Result<Prediction, ChunkError> {
    let g = base.g;
    // The value table: original values first, then the new ones in the order they are made.
    let mut t = Table {
        bytes: base.bytes.clone(),
        resident: g
            .values
            .iter()
            .map(|v| {
                matches!(
                    v.kind,
                    ValueKind::Input | ValueKind::Initializer(_) | ValueKind::SparseInitializer(_)
                )
            })
            .collect(),
        wires: BTreeMap::new(),
    };
    let split = |v: ValueId| region.axes.get(&v).copied().flatten();
    // Chunk `c` of `v`: its share of `v`'s bytes.
    let scaled = |v: ValueId, c: u32| {
        base.bytes[v.index()] / (em.extent * em.mult(v)).max(1) as u64 * em.width_of(c, v) as u64
    };

    let mut new_nodes: Vec<ANode> = Vec::with_capacity(em.steps.len());
    let mut copied = 0u64;
    let mut seconds = 0.0f64;
    // The new `Concat`s whose inputs are contiguous runs of their output, by their index among the
    // new nodes: seconds and bytes copied when not assembled in place, seconds when assembled
    // (decided once the order is known, see `assemble_in`).
    let mut joins: Vec<(usize, f64, u64, f64)> = Vec::new();
    for step in &em.steps {
        match step {
            Emit::Slice { chunk, value, axis } => {
                let (c, v) = (*chunk, *value);
                let (w, m) = (em.width_of(c, v), em.mult(v));
                let key = (v, *axis, w);
                let Mem {
                    view,
                    scratch,
                    seconds: s,
                } = base.memo(
                    |c| &mut c.slice,
                    &key,
                    || {
                        let f = base.facts.get(v);
                        let out = chunk_fact(f, Some(*axis), w);
                        let k = |x: i64| {
                            Fact::with_value(
                                memplan_ir::DataType::I64,
                                vec![Expr::one()],
                                Known::Int(vec![Expr::from(x)]),
                            )
                        };
                        let (lo, hi) = em.bounds[c as usize];
                        let (s, e, a) = (k(lo * m), k(hi * m), k(*axis as i64));
                        let node = synthetic("Slice", 4);
                        mem_of(
                            base,
                            cost,
                            &node,
                            &[Some(f), Some(&s), Some(&e), Some(&a)],
                            &[Some(&out)],
                        )
                    },
                )?;
                for b in [
                    Wire::Bound(c, false, m),
                    Wire::Bound(c, true, m),
                    Wire::Axis(*axis),
                ] {
                    t.wire(b, 8, true);
                }
                let out = t.wire(Wire::Chunk(c, v), scaled(v, c), false);
                if !view {
                    copied += scaled(v, c);
                }
                seconds += s;
                new_nodes.push(ANode {
                    reads: vec![
                        v.index() as u32,
                        t.get(Wire::Bound(c, false, m)),
                        t.get(Wire::Bound(c, true, m)),
                        t.get(Wire::Axis(*axis)),
                    ],
                    input0: Some(v.index() as u32),
                    outputs: vec![Some(out)],
                    view,
                    scratch,
                    assembled: false,
                    joins: None,
                });
            }
            Emit::Clone {
                chunk,
                node: n,
                inputs,
            } => {
                let (c, w) = (*chunk, em.width(*chunk));
                let node = g.node(*n);
                let axes: Vec<Option<(usize, i64)>> = node
                    .inputs
                    .iter()
                    .chain(&node.outputs)
                    .map(|v| v.and_then(|v| split(v).map(|a| (a, em.mult(v)))))
                    .collect();
                // Value `v`'s extent in this chunk.
                let w_of = |v: ValueId| w * em.mult(v);
                let key = (*n, w, axes);
                let (
                    Mem {
                        view,
                        scratch,
                        seconds: s,
                    },
                    in_place,
                ) = base.memo(
                    |c| &mut c.clone,
                    &key,
                    || {
                        let shape_fact = |y: ValueId| -> Result<Fact, ChunkError> {
                            let f = chunk_fact(base.facts.get(y), split(y), w_of(y));
                            let s = f.shape.clone().unwrap_or_default();
                            let vals = s
                                .iter()
                                .map(|d| base.eval(d).map(|x| Expr::from(x as i64)))
                                .collect::<Result<Vec<_>, _>>()?;
                            Ok(Fact::with_value(
                                memplan_ir::DataType::I64,
                                vec![Expr::from(vals.len() as i64)],
                                Known::Int(vals),
                            ))
                        };
                        let mut owned: Vec<Option<Fact>> = Vec::with_capacity(node.inputs.len());
                        for (slot, inp) in node.inputs.iter().enumerate() {
                            owned.push(match inp {
                                None => None,
                                Some(_) if super::rewrite::shape_input(node) == Some(slot) => {
                                    match node.outputs[0] {
                                        Some(y) => Some(shape_fact(y)?),
                                        None => None,
                                    }
                                }
                                Some(v) => {
                                    Some(chunk_fact(base.facts.get(*v), split(*v), w_of(*v)))
                                }
                            });
                        }
                        let outs: Vec<Option<Fact>> = node
                            .outputs
                            .iter()
                            .map(|o| o.map(|v| chunk_fact(base.facts.get(v), split(v), w_of(v))))
                            .collect();
                        let ins: Vec<Option<&Fact>> = owned.iter().map(Option::as_ref).collect();
                        let outs: Vec<Option<&Fact>> = outs.iter().map(Option::as_ref).collect();
                        let in_place = ops::axes::concat_in_place(node, &ins, &outs);
                        Ok((mem_of(base, cost, node, &ins, &outs)?, in_place))
                    },
                )?;
                let mut reads = Vec::with_capacity(inputs.len());
                let mut input0 = None;
                for (slot, w) in inputs.iter().enumerate() {
                    let Some(w) = *w else { continue };
                    let id = match w {
                        Wire::Orig(v) => v.index() as u32,
                        Wire::Shape(_, y) => {
                            let rank = g.node(y).outputs[0]
                                .and_then(|o| base.facts.get(o).rank())
                                .unwrap_or(0);
                            t.wire(w, 8 * rank as u64, true)
                        }
                        w => t.wires.get(&w).copied().ok_or_else(|| {
                            ChunkError::Region(format!("{w:?} is read before it is made"))
                        })?,
                    };
                    if slot == 0 {
                        input0 = Some(id);
                    }
                    reads.push(id);
                }
                // A clone of a `Concat` whose inputs are contiguous runs of its output may be
                // assembled in place (see `assemble_in`).
                let joined = (in_place && reads.len() == inputs.len()).then(|| reads.clone());
                if joined.is_some() {
                    joins.push((new_nodes.len(), s, 0, cost.view_seconds));
                } else {
                    seconds += s;
                }
                reads.sort_unstable();
                reads.dedup();
                let outputs: Vec<Option<u32>> = node
                    .outputs
                    .iter()
                    .map(|o| o.map(|v| t.wire(Wire::Chunk(c, v), scaled(v, c), false)))
                    .collect();
                new_nodes.push(ANode {
                    reads,
                    input0,
                    outputs,
                    view,
                    scratch,
                    assembled: false,
                    joins: joined,
                });
            }
            Emit::Concat { value, axis } => {
                let v = *value;
                let pieces_of_v: Vec<u32> = (0..em.bounds.len() as u32)
                    .map(|c| t.get(Wire::Chunk(c, v)))
                    .collect();
                let f = base.facts.get(v);
                let piece_facts: Vec<Fact> = (0..em.bounds.len() as u32)
                    .map(|c| chunk_fact(f, Some(*axis), em.width_of(c, v)))
                    .collect();
                let node = concat_node(*axis, pieces_of_v.len());
                let ins: Vec<Option<&Fact>> = piece_facts.iter().map(Some).collect();
                let in_place = ops::axes::concat_in_place(&node, &ins, &[Some(f)]);
                let m = mem_of(base, cost, &node, &ins, &[Some(f)])?;
                let bytes = base.bytes[v.index()];
                if in_place {
                    joins.push((new_nodes.len(), m.seconds, bytes, cost.view_seconds));
                } else {
                    seconds += m.seconds;
                    copied += bytes;
                }
                new_nodes.push(ANode {
                    reads: pieces_of_v.clone(),
                    input0: None,
                    outputs: vec![Some(v.index() as u32)],
                    view: false,
                    scratch: m.scratch,
                    assembled: false,
                    joins: in_place.then_some(pieces_of_v),
                });
            }
        }
    }
    for &n in region.nodes.difference(&region.keep) {
        seconds -= base.memo(
            |c| &mut c.whole,
            &n,
            || {
                let node = g.node(n);
                let (ins, outs) = base.facts.node_io(node);
                Ok(cost.node_seconds(node, &ins, &outs, base.view[n.index()], base.dims))
            },
        )?;
    }
    let added = new_nodes.len();
    let Table {
        bytes, resident, ..
    } = t;

    // All nodes, in the order `apply` lists them: the untouched ones as the base has them.
    let mut list: Vec<Cow<ANode>> = Vec::with_capacity(g.nodes.len() + added);
    // The original position of each listed node; the new ones take the last region node's.
    let mut origin: Vec<usize> = Vec::with_capacity(g.nodes.len() + added);
    let mut new_nodes = Some(new_nodes);
    // Where the new nodes start in the list.
    let mut new_at = 0;
    for (i, _) in g.nodes.iter().enumerate() {
        let id = NodeId::from_index(i);
        if !region.nodes.contains(&id) || region.keep.contains(&id) {
            origin.push(i);
            list.push(Cow::Borrowed(&base.nodes[i]));
        }
        if i == em.last {
            new_at = list.len();
            list.extend(
                new_nodes
                    .take()
                    .unwrap_or_default()
                    .into_iter()
                    .map(Cow::Owned),
            );
            origin.resize(list.len(), i);
        }
    }
    // The window the live bytes are compared over: the region's original span and the old peak.
    let first_region = em.order.first().map_or(0, |n| n.index());
    let peak_step = base.peak_step.unwrap_or(first_region);
    let window = first_region.min(peak_step)..=em.last.max(peak_step);
    // And the step where each large output (1/64 of the peak or more) is first read after it:
    // there the output is whole (a region that ends before a large reader moves the peak to that
    // reader, not below it). A small output (a mask's indices) read layers later is not the
    // region's doing there.
    let inside = |n: usize| region.nodes.contains(&NodeId::from_index(n));
    let first_readers = first_readers(base, &bytes, &em.outputs, em.last, inside, base.peak / 64);

    // The topological sort of the rewritten graph: a min-heap on list position.
    let nvals = bytes.len();
    let mut producer = vec![NONE; nvals];
    for (a, n) in list.iter().enumerate() {
        for o in n.outputs.iter().flatten() {
            producer[*o as usize] = a as u32;
        }
    }
    // Already in topological order where every read is made before its reader (no node of the
    // region is kept whole for a reader before it); else sorted.
    let listed = list.iter().enumerate().all(|(a, n)| {
        n.reads
            .iter()
            .all(|&r| producer[r as usize] == NONE || (producer[r as usize] as usize) < a)
    });
    let order: Vec<u32> = if listed {
        (0..list.len() as u32).collect()
    } else {
        topological(&list, &producer)?
    };
    // Which `Concat`s are assembled in place, by the simulator's rule over this order; what the new
    // ones cost follows.
    let outputs: BTreeSet<u32> = g.outputs.iter().map(|v| v.index() as u32).collect();
    let chosen = assemble_in(&list, &order, &producer, &outputs, assemble);
    for (a, n) in list.iter_mut().enumerate() {
        if n.assembled != chosen[a] {
            n.to_mut().assembled = chosen[a];
        }
    }
    for &(k, whole, bytes, view) in &joins {
        if chosen[new_at + k] {
            seconds += view;
        } else {
            seconds += whole;
            copied += bytes;
        }
    }
    // The simulator's rules over that order.
    let steps = order.len();
    let mut buf = vec![NONE; nvals];
    for (i, r) in resident.iter().enumerate() {
        if *r {
            buf[i] = RESIDENT;
        }
    }
    // Buffers: (bytes, first step, last step).
    let mut bufs: Vec<(u64, usize, usize)> = Vec::new();
    let mut scratch = vec![0u64; steps];
    let mut pending: BTreeMap<u32, u32> = BTreeMap::new();
    // Pieces of assembled concats: piece value -> output value.
    let mut piece_of: BTreeMap<u32, u32> = BTreeMap::new();
    for n in &list {
        if n.assembled {
            if let Some(Some(out)) = n.outputs.first() {
                for &p in &n.reads {
                    piece_of.insert(p, *out);
                }
            }
        }
    }
    // Per step: in the span (`Some(true)`), at a first reader after it (`Some(false)`), or neither.
    let mut in_window = vec![None; steps];
    for (s, &a) in order.iter().enumerate() {
        let n = &list[a as usize];
        let o = origin[a as usize];
        in_window[s] = match (window.contains(&o), first_readers.contains(&o)) {
            (true, _) => Some(true),
            (false, true) => Some(false),
            (false, false) => None,
        };
        scratch[s] = if n.assembled { 0 } else { n.scratch };
        for (slot, o) in n.outputs.iter().enumerate() {
            let Some(o) = *o else { continue };
            let src = n.input0.map_or(NONE, |i| buf[i as usize]);
            if slot == 0 && n.view && src != NONE {
                buf[o as usize] = src;
            } else if n.assembled {
                buf[o as usize] = *pending.get(&o).unwrap_or(&NONE);
            } else if let Some(&out) = piece_of.get(&o) {
                let b = *pending.entry(out).or_insert_with(|| {
                    bufs.push((bytes[out as usize], s, s));
                    (bufs.len() - 1) as u32
                });
                buf[o as usize] = b;
            } else {
                bufs.push((bytes[o as usize], s, s));
                buf[o as usize] = (bufs.len() - 1) as u32;
            }
        }
    }
    let mut pinned = vec![false; bufs.len()];
    for (s, &a) in order.iter().enumerate() {
        for &r in &list[a as usize].reads {
            let b = buf[r as usize];
            if b < RESIDENT {
                let e = &mut bufs[b as usize];
                e.2 = e.2.max(s);
            }
        }
    }
    for &o in &g.outputs {
        let b = buf[o.index()];
        if b < RESIDENT {
            pinned[b as usize] = true;
        }
    }
    let mut diff = vec![0i128; steps + 1];
    for (b, &(sz, f, l)) in bufs.iter().enumerate() {
        diff[f] += sz as i128;
        if !pinned[b] {
            diff[l + 1] -= sz as i128;
        }
    }
    let res: u64 = bytes
        .iter()
        .zip(&resident)
        .filter(|(_, r)| **r)
        .map(|(b, _)| *b)
        .sum();
    let (mut peak, mut local, mut span) = (res, 0u64, 0u64);
    let mut live: i128 = 0;
    let mut per_step = Vec::with_capacity(steps);
    for s in 0..steps {
        live += diff[s];
        let here = res + live.max(0) as u64 + scratch[s];
        per_step.push(here);
        peak = peak.max(here);
        if let Some(in_span) = in_window[s] {
            local = local.max(here);
            if in_span {
                span = span.max(here);
            }
        }
    }
    Ok(Prediction {
        peak,
        local,
        span,
        copied,
        added,
        seconds,
        per_step,
    })
}

/// Which nodes of `list`, run in `order`, are `Concat`s assembled in place: the simulator's rule
/// ([`choose_assembled`]) over the same order, the pieces read from the list.
fn assemble_in(
    list: &[Cow<ANode>],
    order: &[u32],
    producer: &[u32],
    outputs: &BTreeSet<u32>,
    assemble: bool,
) -> Vec<bool> {
    let mut chosen = vec![false; list.len()];
    if !assemble {
        return chosen;
    }
    let mut step = vec![0usize; list.len()];
    for (s, &a) in order.iter().enumerate() {
        step[a as usize] = s;
    }
    let concats = order.iter().enumerate().filter_map(|(s, &a)| {
        let n = &list[a as usize];
        let (Some(joins), Some(Some(_))) = (&n.joins, n.outputs.first()) else {
            return None;
        };
        let pieces = joins.iter().map(|&v| {
            let &q = producer.get(v as usize).filter(|&&q| q != NONE)?;
            if outputs.contains(&v) {
                return None;
            }
            let made = &list[q as usize];
            Some(Piece {
                value: v as usize,
                maker: step[q as usize],
                view: made.view && made.outputs.first() == Some(&Some(v)),
            })
        });
        Some((s, pieces.collect()))
    });
    let by_step = choose_assembled(order.len(), concats);
    for (&a, c) in order.iter().zip(by_step) {
        chosen[a as usize] = c;
    }
    chosen
}

/// The topological sort of `list` that takes the first ready node in list order (a min-heap on
/// list position); `producer`: the list position making each value.
fn topological(list: &[Cow<ANode>], producer: &[u32]) -> Result<Vec<u32>, ChunkError> {
    let mut indeg = vec![0usize; list.len()];
    let mut succ: Vec<Vec<u32>> = vec![Vec::new(); list.len()];
    for (a, n) in list.iter().enumerate() {
        let mut deps: Vec<u32> = n
            .reads
            .iter()
            .map(|&r| producer[r as usize])
            .filter(|&p| p != NONE)
            .collect();
        deps.sort_unstable();
        deps.dedup();
        indeg[a] = deps.len();
        for p in deps {
            succ[p as usize].push(a as u32);
        }
    }
    let mut ready: BinaryHeap<Reverse<u32>> = (0..list.len() as u32)
        .filter(|&a| indeg[a as usize] == 0)
        .map(Reverse)
        .collect();
    let mut order = Vec::with_capacity(list.len());
    while let Some(Reverse(a)) = ready.pop() {
        order.push(a);
        for &s in &succ[a as usize] {
            indeg[s as usize] -= 1;
            if indeg[s as usize] == 0 {
                ready.push(Reverse(s));
            }
        }
    }
    if order.len() != list.len() {
        return Err(ChunkError::Region(
            "the region is not convex: a path leaves it and comes back".into(),
        ));
    }
    Ok(order)
}

fn synthetic(op: &str, inputs: usize) -> Node {
    Node {
        name: String::new(),
        op: op.into(),
        domain: String::new(),
        overload: String::new(),
        inputs: vec![Some(ValueId(0)); inputs],
        outputs: vec![Some(ValueId(0))],
        attrs: Vec::new(),
        doc: String::new(),
        metadata: Vec::new(),
    }
}

/// The steps after `last` where each of `outputs` of at least `least` bytes (by `bytes`) is first
/// read by a node that is not `inside` (the region or the new nodes that made it): there it is
/// whole, whatever the region.
pub(crate) fn first_readers(
    base: &Base,
    bytes: &[u64],
    outputs: &[ValueId],
    last: usize,
    inside: impl Fn(usize) -> bool,
    least: u64,
) -> BTreeSet<usize> {
    outputs
        .iter()
        .filter(|v| bytes.get(v.index()).is_some_and(|&b| b >= least))
        .filter_map(|v| {
            base.consumers[v.index()]
                .iter()
                .map(|n| n.index())
                .filter(|&n| n > last && !inside(n))
                .min()
        })
        .collect()
}

/// A `Concat` of `inputs` values along `axis`, for the op table's rules.
pub(crate) fn concat_node(axis: usize, inputs: usize) -> Node {
    let mut n = synthetic("Concat", inputs);
    n.attrs = vec![super::rewrite::axis_attr(axis)];
    n
}
