//! A model summary for `memplan inspect`: interface with symbolic shapes, op histogram, weights,
//! opsets, unsupported ops and symbols.

use std::collections::BTreeMap;

use crate::graph::{Model, ValueId, ValueKind};
use crate::infer::{fmt_shape, Alias, Facts, NewSymbol};

/// One graph input or output.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Port {
    pub name: String,
    /// ONNX element type name, or `null` when unknown.
    pub dtype: Option<String>,
    /// Symbolic dims as strings, or `null` when the rank is unknown.
    pub shape: Option<Vec<String>>,
}

/// A node inference could not cover.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Unsupported {
    pub node: String,
    pub op: String,
    pub reason: String,
}

/// Everything `inspect` reports.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Summary {
    pub ir_version: i64,
    pub opsets: BTreeMap<String, i64>,
    pub producer: String,
    pub nodes: usize,
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
    /// Op type -> count, in the default domain; other domains as `domain.Op`.
    pub op_histogram: BTreeMap<String, usize>,
    pub weight_count: usize,
    pub weight_bytes: u64,
    /// Symbols named by the graph inputs.
    pub symbols: Vec<String>,
    /// Dims the model was pinned at ([`Model::pin_dims`]): an optimized file's symbols, now
    /// constants. Empty when it records none or the record is malformed.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub pinned_dims: BTreeMap<String, i64>,
    /// Symbols inference introduced (data-dependent sizes, unnamed input dims).
    pub symbols_introduced: Vec<NewSymbol>,
    /// Output dim names of the file proved equal to expressions of the input symbols.
    pub aliases: Vec<Alias>,
    pub unsupported: Vec<Unsupported>,
}

fn port(model: &Model, facts: &Facts, v: ValueId) -> Port {
    let f = facts.get(v);
    Port {
        name: model.graph.value(v).name.clone(),
        dtype: f.dtype.map(|d| d.onnx_name().to_string()),
        shape: f
            .shape
            .as_ref()
            .map(|s| s.iter().map(|d| d.to_string()).collect()),
    }
}

/// Summarizes a model with its inferred facts.
pub fn summarize(model: &Model, facts: &Facts) -> Summary {
    let g = &model.graph;
    let mut hist: BTreeMap<String, usize> = BTreeMap::new();
    for n in &g.nodes {
        let key = if n.is_onnx_domain() {
            n.op.clone()
        } else {
            format!("{}.{}", n.domain, n.op)
        };
        *hist.entry(key).or_default() += 1;
    }
    let (mut wc, mut wb) = (0usize, 0u64);
    for v in &g.values {
        if let ValueKind::Initializer(t) = &v.kind {
            wc += 1;
            wb += t.byte_len();
        }
    }
    let unsupported = facts
        .skipped
        .iter()
        .map(|s| {
            let n = g.node(s.node);
            Unsupported {
                node: n.name.clone(),
                op: n.op.clone(),
                reason: s.reason.clone(),
            }
        })
        .collect();
    Summary {
        ir_version: model.ir_version,
        opsets: model
            .opsets
            .iter()
            .map(|o| {
                (
                    if o.domain.is_empty() {
                        "ai.onnx".to_string()
                    } else {
                        o.domain.clone()
                    },
                    o.version,
                )
            })
            .collect(),
        producer: format!("{} {}", model.producer_name, model.producer_version)
            .trim()
            .to_string(),
        nodes: g.nodes.len(),
        inputs: g
            .inputs
            .iter()
            .filter(|&&v| !matches!(g.value(v).kind, ValueKind::Initializer(_)))
            .map(|&v| port(model, facts, v))
            .collect(),
        outputs: g.outputs.iter().map(|&v| port(model, facts, v)).collect(),
        op_histogram: hist,
        weight_count: wc,
        weight_bytes: wb,
        symbols: facts.symbols.declared.clone(),
        pinned_dims: model.pinned_dims().unwrap_or_default(),
        symbols_introduced: facts.symbols.introduced.clone(),
        aliases: facts.aliases.clone(),
        unsupported,
    }
}

/// `[N, 32]` for a port, `?` when unknown.
pub fn port_shape(p: &Port) -> String {
    match &p.shape {
        Some(s) => format!("[{}]", s.join(", ")),
        None => "?".into(),
    }
}

/// Renders a shape of a value in the facts.
pub fn value_shape(facts: &Facts, v: ValueId) -> String {
    facts
        .get(v)
        .shape
        .as_deref()
        .map(fmt_shape)
        .unwrap_or_else(|| "?".into())
}
