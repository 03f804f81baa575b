//! memplan-grad: reverse-mode differentiation on the IR, written out as one standard ONNX graph.
//!
//! [`grad`] takes a model, its facts and a [`GradSpec`] and returns a training-step model: the forward
//! outputs plus the gradient of one output with respect to each chosen value (weights, inputs, or
//! named values). The output's gradient is all ones by default ([`Seed::Ones`]) or an extra graph
//! input ([`Seed::Input`]). Every rule (in `rules/<family>.rs`, the families named as in
//! `memplan_ir::ops`) emits standard ONNX ops, so other runtimes run the training graph, and memplan's
//! simulator sees the forward values the backward reads as ordinary values whose lifetimes reach into
//! the backward pass: `estimate` of the result is the training step's peak.
//!
//! Gradient values have their primal's dtype and shape. Broadcast inputs are reduced back to their own
//! shape with `ReduceSum` + `Reshape`; ops that only select or repeat elements (`Slice`, `Gather*`,
//! `Tile`, `TopK` values) share one rule: the primal's element positions go through the same op and the
//! incoming gradient is scatter-added at them.

pub mod builder;
mod rules;

pub use rules::supported as supported_ops;

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::graph::{printable, Graph, Model, NodeId, ValueId};
use memplan_ir::{DataType, DeclDim, DeclType, Facts};

use builder::Builder;

/// Which values to differentiate with respect to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wrt {
    /// Every floating-point initializer.
    Weights,
    /// Every floating-point graph input that is not an initializer.
    Inputs,
    /// The named values (inputs, initializers or intermediate values).
    Names(Vec<String>),
}

/// How the differentiated output's gradient enters the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seed {
    /// All ones (the gradient of the sum of the output's elements).
    Ones,
    /// An extra graph input named `<output>_grad`, of the output's type and shape.
    Input,
}

/// What to differentiate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GradSpec {
    pub wrt: Wrt,
    /// The graph output to differentiate; `None` takes the first output.
    pub of: Option<String>,
    pub seed: Seed,
}

/// Why a training graph could not be built. Messages are one line naming the node or value.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GradError {
    #[error("no graph output named '{name}' (outputs: {outputs})")]
    NoOutput { name: String, outputs: String },
    #[error("no value named '{0}' in the graph")]
    NoValue(String),
    #[error("'{name}' is {dtype}, not a floating-point tensor: it has no gradient")]
    NotFloat { name: String, dtype: String },
    #[error("nothing to differentiate: {0}")]
    Empty(String),
    #[error(
        "value '{0}' has no inferred type and shape; gradients need them (see `memplan inspect`)"
    )]
    NoFact(String),
    #[error(
        "node {node}: no gradient rule for {op} (the output depends on input {input} through it)"
    )]
    NoRule {
        node: String,
        op: String,
        input: usize,
    },
    #[error("node {node}: {msg}")]
    Rule { node: String, msg: String },
}

/// One gradient output of the training graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GradOutput {
    /// The value differentiated with respect to.
    pub wrt: String,
    /// The graph output holding its gradient.
    pub output: String,
}

/// The training-step model and what it computes.
#[derive(Clone, Debug)]
pub struct GradModel {
    pub model: Model,
    /// The differentiated output.
    pub of: String,
    /// The seed input's name with [`Seed::Input`].
    pub seed_input: Option<String>,
    pub grads: Vec<GradOutput>,
    /// Forward nodes the backward pass goes through (the rest only feed the forward outputs).
    pub differentiated_nodes: usize,
}

/// Builds the training-step model of `model` for `spec`. `facts` must be the facts of `model`'s graph.
pub fn grad(model: &Model, facts: &Facts, spec: &GradSpec) -> Result<GradModel, GradError> {
    let graph = &model.graph;
    let of = output_of(graph, spec.of.as_deref())?;
    let wrt = wrt_values(graph, facts, &spec.wrt)?;
    let opset = model.onnx_opset().unwrap_or(memplan_ir::ops::DEFAULT_OPSET);

    let mut g = graph.clone();
    let of_name = graph.value(of).name.clone();
    let depends = forward_reach(graph, facts, &wrt);
    let mut b = Builder::new(&mut g, facts, opset);

    let (seed, seed_input) = seed_value(&mut b, of, &of_name, spec.seed)?;
    let mut grads: BTreeMap<ValueId, ValueId> = BTreeMap::new();
    if depends[of.index()] {
        grads.insert(of, seed);
    }
    let mut differentiated = 0;
    for &nid in facts.order.iter().rev() {
        let node = graph.node(nid);
        let dys: Vec<Option<ValueId>> = node
            .outputs
            .iter()
            .map(|o| o.and_then(|v| grads.get(&v).copied()))
            .collect();
        if dys.iter().all(Option::is_none) {
            continue;
        }
        let want: Vec<bool> = node
            .inputs
            .iter()
            .map(|i| i.is_some_and(|v| depends[v.index()]))
            .collect();
        if !want.iter().any(|&w| w) {
            continue;
        }
        differentiated += 1;
        let dxs = rules::apply(&mut b, nid, node, &dys, &want)?;
        for (i, (&w, dx)) in want.iter().zip(dxs).enumerate() {
            let Some(v) = node.inputs[i] else { continue };
            if !w {
                continue;
            }
            let Some(dx) = dx else {
                return Err(GradError::NoRule {
                    node: node.label(nid),
                    op: node.op.clone(),
                    input: i,
                });
            };
            let acc = match grads.get(&v) {
                Some(&prev) => b.op("Add", &[prev, dx], vec![]),
                None => dx,
            };
            grads.insert(v, acc);
        }
    }

    let mut outs = Vec::new();
    for &w in &wrt {
        let gv = match grads.get(&w) {
            Some(&gv) => gv,
            None => {
                let dt = dtype_of(facts, graph, w)?;
                b.zeros_like(w, dt)
            }
        };
        let name = b.unique_name(&format!("{}_grad", graph.value(w).name));
        let out = b.op_named("Identity", &[gv], &name, vec![]);
        let decl = decl_of(facts, graph, w)?;
        b.g.values[out.index()].decl = Some(decl);
        b.g.outputs.push(out);
        outs.push(GradOutput {
            wrt: graph.value(w).name.clone(),
            output: name,
        });
    }
    drop(b);
    let mut model = model.clone();
    model.graph = g;
    Ok(GradModel {
        model,
        of: of_name,
        seed_input,
        grads: outs,
        differentiated_nodes: differentiated,
    })
}

fn output_of(graph: &Graph, of: Option<&str>) -> Result<ValueId, GradError> {
    let names = || {
        graph
            .outputs
            .iter()
            .map(|&v| printable(&graph.value(v).name).into_owned())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match of {
        None => graph
            .outputs
            .first()
            .copied()
            .ok_or(GradError::Empty("the graph has no outputs".to_string())),
        Some(name) => graph
            .outputs
            .iter()
            .copied()
            .find(|&v| graph.value(v).name == name)
            .ok_or_else(|| GradError::NoOutput {
                name: printable(name).into_owned(),
                outputs: names(),
            }),
    }
}

fn dtype_of(facts: &Facts, graph: &Graph, v: ValueId) -> Result<DataType, GradError> {
    facts
        .get(v)
        .dtype
        .ok_or_else(|| GradError::NoFact(printable(&graph.value(v).name).into_owned()))
}

/// The declared type of a gradient or seed: the primal's dtype, its dims as symbols where a dim is one
/// symbol, numbers where constant, unnamed otherwise.
fn decl_of(facts: &Facts, graph: &Graph, v: ValueId) -> Result<DeclType, GradError> {
    let f = facts.get(v);
    let no_fact = || GradError::NoFact(printable(&graph.value(v).name).into_owned());
    let dt = f.dtype.ok_or_else(no_fact)?;
    let shape = f.shape.as_ref().ok_or_else(no_fact)?;
    let dims = shape
        .iter()
        .map(|d| match (d.as_const(), d.as_sym()) {
            (Some(c), _) => DeclDim::Value(c),
            (None, Some(s)) => DeclDim::Param(s.to_string()),
            _ => DeclDim::Unknown,
        })
        .collect();
    Ok(DeclType::tensor(dt, dims))
}

fn wrt_values(graph: &Graph, facts: &Facts, wrt: &Wrt) -> Result<Vec<ValueId>, GradError> {
    let is_float = |v: ValueId| facts.get(v).dtype.is_some_and(|d| d.is_float());
    let initializers: BTreeSet<ValueId> = graph.initializers.iter().copied().collect();
    let picked: Vec<ValueId> = match wrt {
        Wrt::Weights => graph
            .initializers
            .iter()
            .copied()
            .filter(|&v| is_float(v))
            .collect(),
        Wrt::Inputs => graph
            .inputs
            .iter()
            .copied()
            .filter(|v| !initializers.contains(v) && is_float(*v))
            .collect(),
        Wrt::Names(names) => {
            let mut out = Vec::new();
            for n in names {
                let v = graph
                    .find_value(n)
                    .ok_or_else(|| GradError::NoValue(printable(n).into_owned()))?;
                let dt = dtype_of(facts, graph, v)?;
                if !dt.is_float() {
                    return Err(GradError::NotFloat {
                        name: printable(n).into_owned(),
                        dtype: dt.to_string(),
                    });
                }
                if !out.contains(&v) {
                    out.push(v);
                }
            }
            out
        }
    };
    if picked.is_empty() {
        let what = match wrt {
            Wrt::Weights => "the model has no floating-point initializers",
            Wrt::Inputs => "the model has no floating-point inputs",
            Wrt::Names(_) => "no names given",
        };
        return Err(GradError::Empty(what.to_string()));
    }
    Ok(picked)
}

/// Per value: whether it is floating point and depends on one of `wrt` (so it carries a gradient).
fn forward_reach(graph: &Graph, facts: &Facts, wrt: &[ValueId]) -> Vec<bool> {
    let mut dep = vec![false; graph.values.len()];
    for &w in wrt {
        dep[w.index()] = true;
    }
    for &nid in &facts.order {
        let node = graph.node(nid);
        if !node.input_ids().any(|v| dep[v.index()]) {
            continue;
        }
        for o in node.output_ids() {
            if facts.get(o).dtype.is_some_and(|d| d.is_float()) {
                dep[o.index()] = true;
            }
        }
    }
    dep
}

/// The seed gradient of the differentiated output.
fn seed_value(
    b: &mut Builder,
    of: ValueId,
    of_name: &str,
    seed: Seed,
) -> Result<(ValueId, Option<String>), GradError> {
    let graph_name = printable(of_name).into_owned();
    let dt = b
        .facts
        .get(of)
        .dtype
        .ok_or_else(|| GradError::NoFact(graph_name.clone()))?;
    if !dt.is_float() {
        return Err(GradError::NotFloat {
            name: graph_name,
            dtype: dt.to_string(),
        });
    }
    match seed {
        Seed::Ones => Ok((b.fill_like(of, dt, 1.0), None)),
        Seed::Input => {
            let name = b.unique_name(&format!("{of_name}_grad"));
            let decl = {
                let facts = b.facts;
                decl_of(facts, &*b.g, of)?
            };
            let v = b.g.add_input(name.clone(), decl);
            Ok((v, Some(name)))
        }
    }
}

/// Node ids of the forward graph in `facts.order` that lie on a path from `wrt` to `of`; exposed for
/// reports.
pub fn on_path(graph: &Graph, facts: &Facts, wrt: &[ValueId]) -> Vec<NodeId> {
    let dep = forward_reach(graph, facts, wrt);
    facts
        .order
        .iter()
        .copied()
        .filter(|&n| graph.node(n).input_ids().any(|v| dep[v.index()]))
        .collect()
}
