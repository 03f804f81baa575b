//! Narrowing: a tensor proven to hold few values is stored in one byte per element and widened,
//! exactly, where it is read, as a standard-ONNX rewrite.
//!
//! A float mask made from a comparison (`Cast(bool)`, `Where(c, 1, 0)`, products of masks) holds
//! only `0` and `1`; an additive mask `(1 - m) * min` holds only `-0` and `min`. Such a tensor, made
//! early and read late (a mask every layer adds to its scores), holds four or eight bytes an element
//! across the peak for one bit of information. [`narrow`] stores it narrow right after it is made and
//! widens it again just before each reader:
//!
//! - values that are all integers in `0..=255` (no `-0`): `Cast` to `bool` (only `0` and `1`) or
//!   `uint8`, and `Cast` back;
//! - exactly two values `a` and `b` (any two that `==` tells apart, neither NaN): `Equal(x, b)`,
//!   and `Where(code, b, a)` back.
//!
//! Both round trips give back every bit (`-0` and the exact constants included), so outputs are
//! bit-identical. The proof that the tensor holds only those values is its value set
//! ([`memplan_ir::value_set`]), which each step records. Like [`crate::remat`], the search is greedy
//! and bounded by work: each round simulates the largest candidates live at the graph-order peak and
//! keeps the one that lowers the peak most, until the peak fits the budget or nothing lowers it.

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::dtype::DataType;
use memplan_ir::fold::fact_tensor;
use memplan_ir::graph::{AttrValue, Attribute, Graph, Model, Names, NodeId, ValueId};
use memplan_ir::infer::{Fact, Facts, Known};
use memplan_ir::value_set::{explain, value_sets, ValueSet};
use memplan_ir::Expr;
use memplan_sim::{Category, Timeline};

use crate::greedy::{greedy, simulate, Proposal};

/// Bounds of the search.
#[derive(Clone, Debug)]
pub struct Options {
    /// Candidates simulated per round (the largest live at the peak).
    pub candidates: usize,
    /// Values narrowed at most.
    pub max_rounds: usize,
    /// The least saving worth narrowing for, as a fraction of the graph-order peak.
    pub min_saving: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            candidates: 16,
            max_rounds: 64,
            min_saving: 1e-3,
        }
    }
}

/// One narrowed value.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Narrowed {
    /// The value stored narrow.
    pub value: String,
    /// Its type, and the type it is stored in.
    pub dtype: String,
    pub stored_as: String,
    /// Its bytes at the given dims, and the bytes of its narrow copy.
    pub bytes: u64,
    pub narrow_bytes: u64,
    /// Readers it is widened for.
    pub readers: usize,
    /// The graph-order peak after this step.
    pub peak_bytes: u64,
    /// Why it holds only the values it is stored as: one line per value, down to types and
    /// constants.
    pub proof: Vec<String>,
}

/// What [`narrow`] did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    pub peak_bytes_before: u64,
    pub peak_bytes_after: u64,
    pub steps: Vec<Narrowed>,
}

/// Why the pass failed.
#[derive(Debug, thiserror::Error)]
pub enum NarrowError {
    #[error("inference failed after narrowing: {0}")]
    Infer(String),
    #[error(transparent)]
    Sim(#[from] memplan_sim::SimError),
}

/// The rewritten model and its facts.
pub struct Outcome {
    pub model: Model,
    pub facts: Facts,
    pub report: Report,
}

/// How a value is stored narrow.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Encoding {
    /// `Cast` to `to` and back: every value an integer in `0..=255`.
    Cast { to: DataType },
    /// `Equal(x, b)`, and `Where(code, b, a)` back: exactly the values `a` and `b`.
    Two { a: f64, b: f64 },
}

/// The encoding of a value of type `dtype` holding `set`, if one saves memory.
fn encoding(dtype: DataType, set: &ValueSet) -> Option<Encoding> {
    if dtype.bits() <= 8 || !(dtype.is_float() || dtype.is_int()) || set.values.is_empty() {
        return None;
    }
    // Narrow float types (float8) are excluded above; Cast is exact on these for integers to 255.
    let small_int =
        |v: f64| v.fract() == 0.0 && (0.0..=255.0).contains(&v) && !v.is_sign_negative();
    if set.values.iter().all(|&v| small_int(v)) {
        let to = if set.within(&[0.0, 1.0]) {
            DataType::Bool
        } else {
            DataType::U8
        };
        return Some(Encoding::Cast { to });
    }
    match set.values[..] {
        [a, b] if !a.is_nan() && !b.is_nan() && a != b => Some(Encoding::Two { a, b }),
        _ => None,
    }
}

/// Narrows values until the graph-order peak at `dims` is at most `budget` (or nothing helps).
pub fn narrow(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    budget: u64,
    opts: &Options,
) -> Result<Outcome, NarrowError> {
    let before = simulate(model, facts, dims)?.1.peak_bytes;
    let mut done: BTreeSet<String> = BTreeSet::new();
    let r = greedy(
        model,
        facts,
        dims,
        before,
        budget,
        opts.max_rounds,
        |model, facts, peak| {
            let best = best_narrowing(model, facts, dims, peak, opts, &mut done)?;
            if let Some((_, _, _, step)) = &best {
                done.insert(step.value.clone());
            }
            Ok(best)
        },
        NarrowError::Infer,
    )?;
    Ok(Outcome {
        model: r.model,
        facts: r.facts,
        report: Report {
            peak_bytes_before: before,
            peak_bytes_after: r.peak,
            steps: r.steps,
        },
    })
}

/// The narrowing of one value live at the graph-order peak that lowers it most (the largest
/// `opts.candidates` candidates simulated), if any; values in `done` are skipped, and those that
/// cannot be rewritten join them.
fn best_narrowing(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    peak: u64,
    opts: &Options,
    done: &mut BTreeSet<String>,
) -> Result<Option<Proposal<Narrowed>>, NarrowError> {
    let (t, cp) = simulate(model, facts, dims)?;
    let sets = value_sets(&model.graph, facts);
    let subgraph_reads = subgraph_reads(&model.graph);
    // Candidates: values made by a node whose buffer is live at the peak, largest first.
    let mut cands: Vec<(u64, ValueId, Encoding)> = Vec::new();
    for e in &cp.live {
        let b = &t.buffers[e.buf.0 as usize];
        if b.category == Category::Scratch {
            continue;
        }
        let Some(owner) = b.value else { continue };
        for v in std::iter::once(owner).chain(views_of(&t, owner)) {
            let name = &model.graph.value(v).name;
            if done.contains(name)
                || model.graph.producer(v).is_none()
                || model.graph.outputs.contains(&v)
                || subgraph_reads.contains(&v)
            {
                continue;
            }
            let (Some(set), Some(dtype)) = (&sets[v.index()], facts.get(v).dtype) else {
                continue;
            };
            if let Some(enc) = encoding(dtype, set) {
                cands.push((e.bytes, v, enc));
            }
        }
    }
    cands.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    cands.truncate(opts.candidates);
    let mut best: Option<Proposal<Narrowed>> = None;
    for &(bytes, v, enc) in &cands {
        let dtype = facts.get(v).dtype.expect("a candidate has a type");
        let to = match enc {
            Encoding::Cast { to } => to,
            Encoding::Two { .. } => DataType::Bool,
        };
        let narrow_bytes = to.bytes_for(bytes / (dtype.bits() as u64 / 8).max(1));
        // Two casts per reader are not worth a saving too small to matter.
        if (bytes - narrow_bytes) as f64 <= peak as f64 * opts.min_saving {
            continue;
        }
        let name = model.graph.value(v).name.clone();
        let Some((m2, f2, readers)) = rewrite(model, facts, v, enc) else {
            done.insert(name);
            continue;
        };
        let (_, p2) = simulate(&m2, &f2, dims)?;
        if p2.peak_bytes >= peak || best.as_ref().is_some_and(|b| p2.peak_bytes >= b.0) {
            continue;
        }
        let step = Narrowed {
            value: name,
            dtype: dtype.onnx_name().to_string(),
            stored_as: to.onnx_name().to_string(),
            bytes,
            narrow_bytes,
            readers,
            peak_bytes: p2.peak_bytes,
            proof: explain(&model.graph, &sets, v, 12),
        };
        best = Some((p2.peak_bytes, m2, f2, step));
    }
    Ok(best)
}

/// Values that share `owner`'s buffer (its views), in value order.
fn views_of(t: &Timeline, owner: ValueId) -> Vec<ValueId> {
    let Some(buf) = t.value_buf.get(owner.index()).copied().flatten() else {
        return Vec::new();
    };
    t.value_buf
        .iter()
        .enumerate()
        .filter(|&(i, b)| *b == Some(buf) && i != owner.index())
        .map(|(i, _)| ValueId::from_index(i))
        .collect()
}

/// Values of `g` read by a subgraph (by name, from an enclosing scope).
fn subgraph_reads(g: &Graph) -> BTreeSet<ValueId> {
    g.nodes
        .iter()
        .flat_map(|n| n.subgraphs().flat_map(|s| s.outer_reads_resolved(g)))
        .collect()
}

/// `model` with `v` stored narrow right after it is made and widened before each reader, with facts
/// for the new values; also the number of readers. `None` when `v` has no reader.
fn rewrite(
    model: &Model,
    facts: &Facts,
    v: ValueId,
    enc: Encoding,
) -> Option<(Model, Facts, usize)> {
    let g0 = &model.graph;
    let producer = g0.producer(v)?;
    let fact = facts.get(v).clone();
    let dtype = fact.dtype?;
    let shape = fact.shape.clone()?;
    let readers: Vec<NodeId> = g0.consumers()[v.index()].clone();
    if readers.is_empty() {
        return None;
    }
    let mut g = g0.clone();
    let mut f = facts.clone();
    let mut names = Names::of(g0);
    let base = g.value(v).name.clone();
    let constant = |g: &mut Graph, f: &mut Facts, name: String, x: f64| -> Option<ValueId> {
        let known = if dtype.is_float() {
            Known::Float(vec![x])
        } else {
            Known::Int(vec![Expr::int(x as i64)])
        };
        let cf = Fact::with_value(dtype, Vec::new(), known);
        let mut t = fact_tensor(&cf)?;
        t.name = name;
        let id = g.add_initializer(t);
        set_fact(f, id, cf);
        Some(id)
    };
    let cast_to = |to: DataType| Attribute {
        name: "to".into(),
        value: AttrValue::Int(to.onnx_code() as i64),
        doc: String::new(),
    };
    // Encode right after the producer.
    let code_name = names.fresh(&format!("{base}/narrow"));
    let (encode, code, code_dtype, consts) = match enc {
        Encoding::Cast { to } => {
            let (n, o) = g.add_node(
                names.fresh(&format!("{base}/narrow_cast")),
                "Cast",
                &[Some(v)],
                &[&code_name],
                vec![cast_to(to)],
            );
            (n, o[0], to, None)
        }
        Encoding::Two { a, b } => {
            let ca = constant(&mut g, &mut f, names.fresh(&format!("{base}/narrow_a")), a)?;
            let cb = constant(&mut g, &mut f, names.fresh(&format!("{base}/narrow_b")), b)?;
            let (n, o) = g.add_node(
                names.fresh(&format!("{base}/narrow_equal")),
                "Equal",
                &[Some(v), Some(cb)],
                &[&code_name],
                Vec::new(),
            );
            (n, o[0], DataType::Bool, Some((ca, cb)))
        }
    };
    set_fact(&mut f, code, Fact::new(code_dtype, shape.clone()));
    // Widen before each reader.
    let mut before: BTreeMap<NodeId, NodeId> = BTreeMap::new();
    for &r in &readers {
        let wide_name = names.fresh(&format!("{base}/widen"));
        let node_name = names.fresh(&format!("{base}/widen_node"));
        let (n, o) = match consts {
            None => g.add_node(
                node_name,
                "Cast",
                &[Some(code)],
                &[&wide_name],
                vec![cast_to(dtype)],
            ),
            Some((ca, cb)) => g.add_node(
                node_name,
                "Where",
                &[Some(code), Some(cb), Some(ca)],
                &[&wide_name],
                Vec::new(),
            ),
        };
        set_fact(&mut f, o[0], Fact::new(dtype, shape.clone()));
        for inp in g.nodes[r.index()].inputs.iter_mut() {
            if *inp == Some(v) {
                *inp = Some(o[0]);
            }
        }
        before.insert(r, n);
    }
    let mut schedule = Vec::with_capacity(facts.order.len() + readers.len() + 1);
    for &n in &facts.order {
        if let Some(&w) = before.get(&n) {
            schedule.push(w);
        }
        schedule.push(n);
        if n == producer {
            schedule.push(encode);
        }
    }
    let mut out = model.clone();
    out.graph = crate::reorder(&g, &schedule);
    crate::reorder_facts(&mut f, &schedule);
    Some((out, f, readers.len()))
}

fn set_fact(f: &mut Facts, v: ValueId, fact: Fact) {
    if f.values.len() <= v.index() {
        f.values.resize(v.index() + 1, Fact::default());
    }
    f.values[v.index()] = fact;
}
