//! Value sets: for each value, the finite set of element values it can hold, when that set is small
//! and provable: a mask made by `Cast` from `bool` holds only `0` and `1`; `(1 - m) * min` of such a
//! mask holds only `min` and `-0`; a `uint8` tensor holds at most 256 values.
//!
//! A set comes from a value's type (`bool`, 8-bit integers), from its known contents (constants), or
//! from its producer: a [`Values::Pointwise`] op maps the Cartesian product of its inputs' sets
//! through the executor's own kernel (the [`crate::fold`] hook), so the set holds exactly the bits
//! the kernel computes, `-0` and rounding included; a [`Values::Selects`] op (movement, gathers,
//! views) copies elements, so its set is the union of its sources'. Each set records why it holds,
//! and [`explain`] writes that proof down to the types and constants it starts from.
//!
//! Sets are exact (element values compared by their bits) and sound for every value of the symbols:
//! no rule looks at shapes.

use crate::dtype::DataType;
use crate::fold::{const_folder, fact_tensor};
use crate::graph::{AttrValue, Graph, NodeId, ValueId, ValueKind};
use crate::infer::{Fact, Facts, Known};
use crate::ops::{lookup, Values};
use crate::Expr;

/// The most distinct values a set holds; a larger one is dropped.
pub const MAX_VALUES: usize = 256;
/// The most input combinations a pointwise op is evaluated on.
const MAX_PRODUCT: usize = 1 << 16;

/// The values a tensor's elements are proven to take, each at most once (compared by bits), in
/// increasing order of their bits.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueSet {
    pub dtype: DataType,
    pub values: Vec<f64>,
    pub why: Why,
}

/// Why a [`ValueSet`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The type has no other values (`bool`, 8-bit integers).
    Type,
    /// The contents are known.
    Contents,
    /// The producing node's rule, from its inputs' sets.
    Node(NodeId),
}

impl ValueSet {
    fn new(dtype: DataType, mut values: Vec<f64>, why: Why) -> Option<ValueSet> {
        values.sort_by_key(|v| v.to_bits());
        values.dedup_by_key(|v| v.to_bits());
        (values.len() <= MAX_VALUES).then_some(ValueSet { dtype, values, why })
    }

    /// The set a type implies, if it is small.
    fn of_type(dtype: DataType, why: Why) -> Option<ValueSet> {
        let values: Vec<f64> = match dtype {
            DataType::Bool => vec![0.0, 1.0],
            DataType::U8 => (0..=255).map(f64::from).collect(),
            DataType::I8 => (-128..=127).map(f64::from).collect(),
            _ => return None,
        };
        ValueSet::new(dtype, values, why)
    }

    /// The set of known contents.
    fn of_known(dtype: DataType, k: &Known) -> Option<ValueSet> {
        let values: Vec<f64> = match k {
            Known::Float(v) => v.clone(),
            Known::Int(v) => v
                .iter()
                .map(|e| {
                    e.as_const()
                        .filter(|c| c.unsigned_abs() < 1 << 53)
                        .map(|c| c as f64)
                })
                .collect::<Option<_>>()?,
            Known::Ratio(_) => return None,
        };
        ValueSet::new(dtype, values, Why::Contents)
    }

    /// Whether every value is one of `allowed`'s (compared by bits).
    pub fn within(&self, allowed: &[f64]) -> bool {
        self.values
            .iter()
            .all(|v| allowed.iter().any(|a| a.to_bits() == v.to_bits()))
    }

    /// The set written out: `{0, 1}`, or its first and last values and how many for a long one.
    pub fn describe(&self) -> String {
        let fmt = |v: f64| {
            if v.fract() == 0.0 && v.abs() < 1e6 {
                if v == 0.0 && v.is_sign_negative() {
                    "-0".to_string()
                } else {
                    format!("{v}")
                }
            } else {
                format!("{v:e}")
            }
        };
        if self.values.len() <= 4 {
            let v: Vec<String> = self.values.iter().map(|&v| fmt(v)).collect();
            format!("{{{}}}", v.join(", "))
        } else {
            format!(
                "{{{}, .., {}}} ({} values)",
                fmt(self.values[0]),
                fmt(self.values[self.values.len() - 1]),
                self.values.len()
            )
        }
    }
}

/// The value set of every value of `graph` (indexed by `ValueId`), from its facts. Values inside
/// subgraphs, sequences and values without a known type have none.
pub fn value_sets(graph: &Graph, facts: &Facts) -> Vec<Option<ValueSet>> {
    let mut sets: Vec<Option<ValueSet>> = vec![None; graph.values.len()];
    for (i, v) in graph.values.iter().enumerate() {
        if matches!(v.kind, ValueKind::Node { .. }) {
            continue;
        }
        sets[i] = leaf_set(facts.values.get(i));
    }
    for &n in &facts.order {
        derive_outputs(graph, &facts.values, facts.opset, &mut sets, n);
    }
    sets
}

/// The most producers [`set_of`] follows back.
const MAX_TRACE: usize = 256;

/// The value set of value `v` of `graph` from the facts inferred so far (`values`, indexed by
/// `ValueId`): what an inference rule may ask of an input (`NonZero`'s count, when no element or
/// every element is zero). The producers are followed back from `v`, at most [`MAX_TRACE`] of
/// them, and not past a value of known contents; beyond that a value has its type's set.
pub fn set_of(graph: &Graph, values: &[Fact], opset: i64, v: ValueId) -> Option<ValueSet> {
    enum Step {
        Value(ValueId),
        Node(NodeId),
    }
    let mut sets: Vec<Option<ValueSet>> = vec![None; graph.values.len()];
    let mut seen = vec![false; graph.values.len()];
    let mut started = vec![false; graph.nodes.len()];
    let mut traced = 0;
    let mut stack = vec![Step::Value(v)];
    while let Some(step) = stack.pop() {
        let u = match step {
            Step::Node(n) => {
                derive_outputs(graph, values, opset, &mut sets, n);
                continue;
            }
            Step::Value(u) => u,
        };
        if std::mem::replace(&mut seen[u.index()], true) {
            continue;
        }
        let leaf = leaf_set(values.get(u.index()));
        match graph.producer(u) {
            // The node's other output, already being traced: its sets come with the node's.
            Some(n) if started[n.index()] => {}
            Some(n)
                if traced < MAX_TRACE && leaf.as_ref().is_none_or(|s| s.why != Why::Contents) =>
            {
                traced += 1;
                started[n.index()] = true;
                stack.push(Step::Node(n));
                stack.extend(
                    graph
                        .node(n)
                        .inputs
                        .iter()
                        .flatten()
                        .map(|&i| Step::Value(i)),
                );
            }
            _ => sets[u.index()] = leaf,
        }
    }
    sets[v.index()].take()
}

/// Sets the sets of node `n`'s outputs from its inputs' (`sets`): known contents first, then what
/// its rule gives, then the output's type.
fn derive_outputs(
    graph: &Graph,
    values: &[Fact],
    opset: i64,
    sets: &mut [Option<ValueSet>],
    n: NodeId,
) {
    let node = graph.node(n);
    let derived = node_sets(graph, values, opset, sets, n);
    for (slot, o) in node.outputs.iter().enumerate() {
        let Some(o) = *o else { continue };
        let fact = values.get(o.index());
        let from_node = derived.get(slot).cloned().flatten();
        sets[o.index()] = leaf_set(fact)
            .filter(|s| s.why == Why::Contents)
            .or(from_node)
            .or_else(|| leaf_set(fact));
    }
}

/// The set a value's own fact gives: its contents, else its type's.
fn leaf_set(fact: Option<&Fact>) -> Option<ValueSet> {
    let f = fact?;
    if f.seq.is_some() {
        return None;
    }
    let dtype = f.dtype?;
    f.value
        .as_ref()
        .and_then(|k| ValueSet::of_known(dtype, k))
        .or_else(|| ValueSet::of_type(dtype, Why::Type))
}

/// The sets a node's rule gives its outputs (by slot).
fn node_sets(
    graph: &Graph,
    values: &[Fact],
    opset: i64,
    sets: &[Option<ValueSet>],
    n: NodeId,
) -> Vec<Option<ValueSet>> {
    let node = graph.node(n);
    let Some(def) = lookup(node) else {
        return Vec::new();
    };
    let input_set = |i: usize| -> Option<&ValueSet> {
        node.inputs
            .get(i)
            .copied()
            .flatten()
            .and_then(|v| sets[v.index()].as_ref())
    };
    let out_dtype = |slot: usize| {
        node.outputs
            .get(slot)
            .copied()
            .flatten()
            .and_then(|o| values.get(o.index())?.dtype)
    };
    let union = |srcs: &[usize]| -> Vec<Option<ValueSet>> {
        let mut all = Vec::new();
        for &i in srcs {
            match input_set(i) {
                Some(s) => all.extend_from_slice(&s.values),
                None => return Vec::new(),
            }
        }
        (0..node.outputs.len())
            .map(|slot| ValueSet::new(out_dtype(slot)?, all.clone(), Why::Node(n)))
            .collect()
    };
    match def.values {
        Values::Opaque | Values::Shapes => Vec::new(),
        Values::Fills => {
            let Some(dtype) = out_dtype(0) else {
                return Vec::new();
            };
            let fill = match node.attr("value") {
                Some(AttrValue::Tensor(t)) => Fact::of_tensor(t).value,
                Some(_) => None,
                None => Some(Known::Float(vec![0.0])),
            };
            let set = fill
                .and_then(|k| ValueSet::of_known(dtype, &k))
                .filter(|s| s.values.len() == 1);
            vec![set.map(|s| ValueSet {
                why: Why::Node(n),
                ..s
            })]
        }
        Values::Selects(srcs) => union(srcs),
        Values::SelectsAny => {
            let srcs: Vec<usize> = (0..node.inputs.len())
                .filter(|&i| node.inputs[i].is_some())
                .collect();
            union(&srcs)
        }
        Values::Pointwise => pointwise(node, opset, &input_set, n),
    }
}

/// A pointwise node's output sets: the kernel run on every combination of its inputs' values (input
/// `k` laid along axis `k`, so broadcasting forms the product).
fn pointwise<'a>(
    node: &crate::graph::Node,
    opset: i64,
    input_set: &dyn Fn(usize) -> Option<&'a ValueSet>,
    n: NodeId,
) -> Vec<Option<ValueSet>> {
    let Some(folder) = const_folder() else {
        return Vec::new();
    };
    let rank = node.inputs.len();
    let mut product = 1usize;
    let mut tensors = Vec::with_capacity(rank);
    for (k, inp) in node.inputs.iter().enumerate() {
        if inp.is_none() {
            tensors.push(None);
            continue;
        }
        let Some(s) = input_set(k) else {
            return Vec::new();
        };
        product = product.saturating_mul(s.values.len());
        if product > MAX_PRODUCT {
            return Vec::new();
        }
        let mut shape = vec![Expr::int(1); rank];
        shape[k] = Expr::int(s.values.len() as i64);
        let known = if s.dtype.is_float() {
            Known::Float(s.values.clone())
        } else {
            Known::Int(s.values.iter().map(|&v| Expr::int(v as i64)).collect())
        };
        let Some(t) = fact_tensor(&Fact::with_value(s.dtype, shape, known)) else {
            return Vec::new();
        };
        tensors.push(Some(t));
    }
    let refs: Vec<Option<&crate::tensor::TensorData>> =
        tensors.iter().map(|t| t.as_ref()).collect();
    let Some(outs) = folder.fold(node, opset, &refs) else {
        return Vec::new();
    };
    outs.iter()
        .map(|t| {
            let values = if t.dtype.is_float() {
                t.to_f64_vec()?
            } else {
                let v = t.to_i64_vec()?;
                if v.iter().any(|c| c.unsigned_abs() >= 1 << 53) {
                    return None;
                }
                v.into_iter().map(|c| c as f64).collect()
            };
            ValueSet::new(t.dtype, values, Why::Node(n))
        })
        .collect()
}

/// The proof of `v`'s set, one line per value from `v` back to the types and constants it rests on
/// (each value once, at most `max_lines`).
pub fn explain(
    graph: &Graph,
    sets: &[Option<ValueSet>],
    v: ValueId,
    max_lines: usize,
) -> Vec<String> {
    let mut lines = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut stack = vec![v];
    while let Some(u) = stack.pop() {
        if !seen.insert(u) || lines.len() >= max_lines {
            continue;
        }
        let Some(s) = &sets[u.index()] else { continue };
        let name = crate::graph::printable(&graph.value(u).name).into_owned();
        let reason = match s.why {
            Why::Type => format!("its type is {}", s.dtype),
            Why::Contents => "its contents are known".to_string(),
            Why::Node(n) => {
                let node = graph.node(n);
                let (how, from): (&str, Vec<ValueId>) = match lookup(node).map(|d| d.values) {
                    Some(Values::Pointwise) => ("pointwise", node.input_ids().collect()),
                    Some(Values::Selects(srcs)) => (
                        "copies elements",
                        srcs.iter()
                            .filter_map(|&i| node.inputs.get(i).copied().flatten())
                            .collect(),
                    ),
                    _ => ("copies elements", node.input_ids().collect()),
                };
                let ins: Vec<String> = from
                    .iter()
                    .map(|&i| format!("'{}'", crate::graph::printable(&graph.value(i).name)))
                    .collect();
                stack.extend(from.iter().rev());
                format!("{} ({how}) of {}", node.op, ins.join(", "))
            }
        };
        lines.push(format!("'{name}' in {}: {reason}", s.describe()));
    }
    lines
}
