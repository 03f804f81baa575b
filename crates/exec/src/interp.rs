//! The interpreter: runs a graph over a schedule, allocating each value when produced and freeing it
//! right after its last reader (exactly the simulator's lifetimes), with views shared, not copied.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use memplan_ir::graph::{DeclDim, Graph, NodeId, ValueId, ValueKind};
use memplan_ir::infer::Facts;
use memplan_ir::DataType;

use crate::mem::MemStats;
use crate::ops::{self, OpCtx, OpFail};
use crate::tensor::{Tensor, TensorError};

/// Why a run failed. Each variant names the node, input or output concerned.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("input '{name}': {msg}")]
    Input { name: String, msg: String },
    #[error("node {node}: {msg}")]
    Node { node: String, msg: String },
    #[error("node {node}: op {op} is not implemented by the executor")]
    NotImplemented { node: String, op: String },
    #[error("weight '{name}': {source}")]
    Weight { name: String, source: TensorError },
    #[error("output '{name}' was not produced")]
    MissingOutput { name: String },
    #[error("schedule: {0}")]
    Schedule(String),
}

/// The result of a run.
#[derive(Debug)]
pub struct RunResult {
    /// Graph outputs by name, in graph order.
    pub outputs: Vec<(String, Tensor)>,
    /// Peak of all tensor memory held: weights, inputs, activations, outputs and op scratch.
    pub peak_bytes: u64,
    /// Weights and inputs (held for the whole run).
    pub resident_bytes: u64,
    /// Symbol values bound from the inputs' shapes.
    pub dims: BTreeMap<String, i64>,
    pub seconds: f64,
}

/// Options of a run.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// The schedule; `None` runs the facts' topological order.
    pub schedule: Option<Vec<NodeId>>,
}

/// Binds the graph's symbolic input dims from the given tensors and checks types and fixed dims.
pub fn bind_inputs(
    graph: &Graph,
    inputs: &BTreeMap<String, Tensor>,
) -> Result<BTreeMap<String, i64>, ExecError> {
    let mut dims: BTreeMap<String, i64> = BTreeMap::new();
    for name in inputs.keys() {
        let ok = graph.inputs.iter().any(|&v| &graph.value(v).name == name);
        if !ok {
            let names: Vec<&str> = graph
                .inputs
                .iter()
                .filter(|&&v| !matches!(graph.value(v).kind, ValueKind::Initializer(_)))
                .map(|&v| graph.value(v).name.as_str())
                .collect();
            return Err(ExecError::Input {
                name: name.clone(),
                msg: format!(
                    "the model has no such input (its inputs: {})",
                    names.join(", ")
                ),
            });
        }
    }
    for &v in &graph.inputs {
        let val = graph.value(v);
        let Some(t) = inputs.get(&val.name) else {
            if matches!(val.kind, ValueKind::Initializer(_)) {
                continue;
            }
            return Err(ExecError::Input {
                name: val.name.clone(),
                msg: "is required but not given".into(),
            });
        };
        let Some((elem, decl_dims)) = val.decl.as_ref().and_then(|d| d.as_tensor()) else {
            continue;
        };
        if let Some(e) = elem {
            if e != t.dtype {
                return Err(ExecError::Input {
                    name: val.name.clone(),
                    msg: format!("has type {} but the model expects {e}", t.dtype),
                });
            }
        }
        let Some(decl_dims) = decl_dims else { continue };
        if decl_dims.len() != t.rank() {
            return Err(ExecError::Input {
                name: val.name.clone(),
                msg: format!(
                    "has rank {} ({:?}) but the model expects rank {}",
                    t.rank(),
                    t.shape,
                    decl_dims.len()
                ),
            });
        }
        for (k, (d, &have)) in decl_dims.iter().zip(&t.shape).enumerate() {
            match &d.dim {
                DeclDim::Value(c) if *c != have as i64 => {
                    return Err(ExecError::Input {
                        name: val.name.clone(),
                        msg: format!("dim {k} is {have} but the model fixes it to {c}"),
                    });
                }
                DeclDim::Param(p) => {
                    if let Some(&prev) = dims.get(p) {
                        if prev != have as i64 {
                            return Err(ExecError::Input {
                                name: val.name.clone(),
                                msg: format!(
                                    "dim {k} ({p}) is {have} but another input sets {p}={prev}"
                                ),
                            });
                        }
                    } else {
                        dims.insert(p.clone(), have as i64);
                    }
                }
                _ => {}
            }
        }
    }
    Ok(dims)
}

/// Runs `graph` on `inputs` (by graph input name).
pub fn run(
    graph: &Graph,
    facts: &Facts,
    inputs: BTreeMap<String, Tensor>,
    opts: &RunOptions,
) -> Result<RunResult, ExecError> {
    let opset = 18;
    run_with_opset(graph, facts, inputs, opts, opset)
}

/// [`run`] at an explicit default-domain opset.
pub fn run_with_opset(
    graph: &Graph,
    facts: &Facts,
    mut inputs: BTreeMap<String, Tensor>,
    opts: &RunOptions,
    opset: i64,
) -> Result<RunResult, ExecError> {
    let dims = bind_inputs(graph, &inputs)?;
    let schedule = opts.schedule.clone().unwrap_or_else(|| facts.order.clone());
    let timeline = memplan_sim::Timeline::build(graph, facts, &schedule)
        .map_err(|e| ExecError::Schedule(e.to_string()))?;
    let stats = MemStats::new();
    let start = Instant::now();

    let mut values: Vec<Option<Tensor>> = vec![None; graph.values.len()];
    // Resident: weights then inputs, charged for the whole run.
    let mut resident = 0u64;
    for v in graph.value_ids() {
        let val = graph.value(v);
        match &val.kind {
            ValueKind::Initializer(t) => {
                let t = match inputs.remove(&val.name) {
                    Some(given) => given,
                    None => weight_tensor(t).map_err(|source| ExecError::Weight {
                        name: val.name.clone(),
                        source,
                    })?,
                };
                resident += t.bytes().len() as u64;
                values[v.index()] = Some(t);
            }
            ValueKind::Input => {
                if let Some(t) = inputs.remove(&val.name) {
                    resident += t.bytes().len() as u64;
                    values[v.index()] = Some(t);
                }
            }
            _ => {}
        }
    }
    stats.add(resident);

    // Last step reading each value; graph outputs are never freed.
    let mut last_read: Vec<Option<usize>> = vec![None; graph.values.len()];
    let consumers = graph.consumers();
    let mut pos = vec![0usize; graph.nodes.len()];
    for (s, n) in schedule.iter().enumerate() {
        pos[n.index()] = s;
    }
    for v in graph.value_ids() {
        last_read[v.index()] = consumers[v.index()].iter().map(|c| pos[c.index()]).max();
    }
    let mut keep = vec![false; graph.values.len()];
    for &o in &graph.outputs {
        keep[o.index()] = true;
    }
    let mut frees: Vec<Vec<ValueId>> = vec![Vec::new(); schedule.len()];
    for v in graph.value_ids() {
        if keep[v.index()] || !matches!(graph.value(v).kind, ValueKind::Node { .. }) {
            continue;
        }
        let made = graph.producer(v).map(|p| pos[p.index()]);
        if let Some(s) = last_read[v.index()].or(made) {
            frees[s].push(v);
        }
    }

    for (s, &nid) in schedule.iter().enumerate() {
        let node = graph.node(nid);
        let label = || node.label(nid);
        let Some(f) = ops::lookup(node) else {
            return Err(ExecError::NotImplemented {
                node: label(),
                op: node.op.clone(),
            });
        };
        let ins: Vec<Option<&Tensor>> = node
            .inputs
            .iter()
            .map(|i| match i {
                None => Ok(None),
                Some(v) => values[v.index()]
                    .as_ref()
                    .map(Some)
                    .ok_or_else(|| ExecError::Node {
                        node: label(),
                        msg: format!("input '{}' is not available", graph.value(*v).name),
                    }),
            })
            .collect::<Result<_, _>>()?;
        let ctx = OpCtx {
            node,
            opset,
            view: timeline.node_is_view[nid.index()],
            stats: &stats,
        };
        let outs = f(&ctx, &ins).map_err(|e| match e {
            OpFail::Unsupported(m) => ExecError::Node {
                node: label(),
                msg: format!("unsupported: {m}"),
            },
            e => ExecError::Node {
                node: label(),
                msg: e.to_string(),
            },
        })?;
        for (slot, o) in node.outputs.iter().enumerate() {
            if let Some(v) = o {
                let t = outs.get(slot).cloned().ok_or_else(|| ExecError::Node {
                    node: label(),
                    msg: format!("produced {} outputs, output {slot} is missing", outs.len()),
                })?;
                values[v.index()] = Some(t);
            }
        }
        drop(outs);
        for &v in &frees[s] {
            values[v.index()] = None;
        }
    }
    let seconds = start.elapsed().as_secs_f64();

    let mut outputs = Vec::new();
    for &o in &graph.outputs {
        let name = graph.value(o).name.clone();
        let t = values[o.index()]
            .clone()
            .ok_or_else(|| ExecError::MissingOutput { name: name.clone() })?;
        outputs.push((name, t));
    }
    Ok(RunResult {
        outputs,
        peak_bytes: stats.peak(),
        resident_bytes: resident,
        dims,
        seconds,
    })
}

/// A weight as a tensor: zero-copy over the model bytes when aligned.
pub fn weight_tensor(t: &memplan_ir::TensorData) -> Result<Tensor, TensorError> {
    let Some(raw) = t.raw() else {
        return Err(TensorError::Unsupported(DataType::String));
    };
    let dims: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
    // Weights are charged as resident by the caller, so the copy (if any) is not charged again.
    Tensor::from_bytes(t.dtype, &dims, raw.clone(), None)
}

/// Shared handle to a run's stats, for callers that run several graphs.
pub type Stats = Arc<MemStats>;

#[cfg(test)]
mod tests {
    use super::*;
    use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType};
    use memplan_ir::TensorData;

    fn attr(name: &str, value: AttrValue) -> Attribute {
        Attribute {
            name: name.into(),
            value,
            doc: String::new(),
        }
    }

    /// x [B, 3] -> MatMul W [3, 4] -> Add b -> Softmax -> Reshape [-1] (a view) -> Slice [2..6)
    /// and ReduceSum over the rows of the softmax; every value checked by hand.
    #[test]
    fn small_graph_runs_end_to_end() {
        let mut g = Graph::default();
        let x = g.add_input(
            "x",
            DeclType::tensor(
                DataType::F32,
                vec![DeclDim::Param("B".into()), DeclDim::Value(3)],
            ),
        );
        let w = g.add_initializer(TensorData::from_f32(
            "W",
            vec![3, 4],
            &[1., 0., 0., 0., 0., 1., 0., 0., 0., 0., 1., 1.],
        ));
        let b = g.add_initializer(TensorData::from_f32("b", vec![4], &[0., 0., 0., 0.]));
        let flat = g.add_initializer(TensorData::from_i64("flat", vec![1], &[-1]));
        let (st, en) = (
            g.add_initializer(TensorData::from_i64("st", vec![1], &[2])),
            g.add_initializer(TensorData::from_i64("en", vec![1], &[6])),
        );
        let axes = g.add_initializer(TensorData::from_i64("ax", vec![1], &[1]));
        let (_, mm) = g.add_node("mm", "MatMul", &[Some(x), Some(w)], &["mm"], vec![]);
        let (_, ad) = g.add_node("add", "Add", &[Some(mm[0]), Some(b)], &["ad"], vec![]);
        let (_, sm) = g.add_node(
            "sm",
            "Softmax",
            &[Some(ad[0])],
            &["sm"],
            vec![attr("axis", AttrValue::Int(-1))],
        );
        let (_, fl) = g.add_node(
            "flat",
            "Reshape",
            &[Some(sm[0]), Some(flat)],
            &["fl"],
            vec![],
        );
        let (_, sl) = g.add_node(
            "slice",
            "Slice",
            &[Some(fl[0]), Some(st), Some(en)],
            &["sl"],
            vec![],
        );
        let (_, rs) = g.add_node(
            "rsum",
            "ReduceSum",
            &[Some(sm[0]), Some(axes)],
            &["rs"],
            vec![],
        );
        g.outputs.extend([sl[0], rs[0]]);
        let facts = memplan_ir::infer_graph(&g, 18).unwrap();
        let mut inputs = BTreeMap::new();
        // Row 0 gives logits [0, 0, ln 2, ln 2]; row 1 gives all-equal logits.
        let l2 = std::f32::consts::LN_2;
        inputs.insert(
            "x".to_string(),
            Tensor::from_vec::<f32>(&[2, 3], &[0., 0., l2, 1., 1., 1.], None).unwrap(),
        );
        let r = run(&g, &facts, inputs, &RunOptions::default()).unwrap();
        assert_eq!(r.dims.get("B"), Some(&2));
        let (name, sl) = &r.outputs[0];
        assert_eq!(name, "sl");
        assert_eq!(sl.shape, [4]);
        let v = sl.data::<f32>().unwrap();
        let want = [1. / 3., 1. / 3., 0.25, 0.25];
        for (a, b) in v.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{v:?}");
        }
        let rs = r.outputs[1].1.data::<f32>().unwrap();
        assert_eq!(r.outputs[1].1.shape, [2, 1]);
        assert!(rs.iter().all(|s| (s - 1.0).abs() < 1e-6));
        // Weights and the input are resident; the run's peak covers at least them plus one activation.
        assert!(r.peak_bytes >= r.resident_bytes + 32);
        // Running again gives the same bits.
        let mut again = BTreeMap::new();
        again.insert(
            "x".to_string(),
            Tensor::from_vec::<f32>(&[2, 3], &[0., 0., l2, 1., 1., 1.], None).unwrap(),
        );
        let r2 = run(&g, &facts, again, &RunOptions::default()).unwrap();
        assert_eq!(r2.outputs[0].1.bytes(), r.outputs[0].1.bytes());
        assert_eq!(r2.peak_bytes, r.peak_bytes);
    }

    #[test]
    fn unknown_op_is_an_error_naming_the_node() {
        let mut g = Graph::default();
        let x = g.add_input(
            "x",
            DeclType::tensor(DataType::F32, vec![DeclDim::Value(2)]),
        );
        let (_, y) = g.add_node("weird", "NoSuchOp", &[Some(x)], &["y"], vec![]);
        g.outputs.push(y[0]);
        let Ok(facts) = memplan_ir::infer_graph(&g, 18) else {
            return;
        };
        let mut inputs = BTreeMap::new();
        inputs.insert(
            "x".to_string(),
            Tensor::from_vec::<f32>(&[2], &[1., 2.], None).unwrap(),
        );
        // Without a rule the value has no type, so the schedule is refused before any kernel runs.
        let e = run(&g, &facts, inputs, &RunOptions::default()).unwrap_err();
        assert!(
            matches!(e, ExecError::NotImplemented { .. } | ExecError::Schedule(_)),
            "{e}"
        );
    }
}
