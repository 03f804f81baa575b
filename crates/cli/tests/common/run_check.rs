//! Import, inference and a run of one model's bytes, for robustness checks: shared by
//! `node_mutations.rs` and the `run` fuzz target (`fuzz/fuzz_targets/run.rs`, which includes this
//! file by path).

use std::collections::BTreeMap;

use memplan_exec::{RunOptions, Tensor};
use memplan_ir::graph::{DeclDim, ValueKind};

/// The largest estimated peak a check runs, in bytes: a larger model stops after inference, as
/// `memplan run` refuses a model that does not fit the memory available.
pub const RUN_LIMIT: u64 = 256 << 20;

/// Imports and infers `bytes` and, when every node has facts and the estimated peak at the inputs'
/// dims is at most [`RUN_LIMIT`] (or depends on the data), runs the model on `inputs` (graph inputs by name; one
/// missing from the map is zeros of its declared shape when that shape is fixed). `Ok` when every
/// stage succeeded or the model was not run; `Err` carries the first error's message.
pub fn check_run(bytes: &[u8], mut inputs: BTreeMap<String, Tensor>) -> Result<(), String> {
    let model = memplan_onnx::import::import_bytes(
        bytes::Bytes::copy_from_slice(bytes),
        std::path::Path::new("<mutated>"),
    )
    .map_err(|e| e.to_string())?;
    let facts = memplan_ir::infer_model(&model).map_err(|e| e.to_string())?;
    if let Some(s) = facts.skipped.first() {
        return Err(format!("no facts for {}: {}", s.label, s.reason));
    }
    let g = &model.graph;
    for &v in &g.inputs {
        let val = g.value(v);
        if inputs.contains_key(&val.name) || matches!(val.kind, ValueKind::Initializer(_)) {
            continue;
        }
        let Some((Some(dtype), Some(dims))) = val.decl.as_ref().and_then(|d| d.as_tensor()) else {
            continue;
        };
        let shape: Option<Vec<usize>> = dims
            .iter()
            .map(|d| match d.dim {
                DeclDim::Value(n) => usize::try_from(n).ok().filter(|&n| n <= 1 << 16),
                _ => None,
            })
            .collect();
        if let Some(t) = shape.and_then(|s| Tensor::zeros(dtype, &s, None).ok()) {
            inputs.insert(val.name.clone(), t);
        }
    }
    let dims = memplan_exec::interp::bind_inputs(g, &inputs).map_err(|e| e.to_string())?;
    let Ok(t) = memplan_sim::timeline::Timeline::build(g, &facts, &facts.order) else {
        return Ok(());
    };
    // A peak that depends on the data is not known before running; kernels allocate fallibly.
    if let Ok(p) = memplan_sim::peak::concrete_peak(&t, &dims) {
        if p.peak_bytes > RUN_LIMIT {
            return Ok(());
        }
    }
    let opset = model.onnx_opset().unwrap_or(memplan_ir::ops::DEFAULT_OPSET);
    memplan_exec::interp::run_with_opset(g, &facts, inputs, &RunOptions::default(), opset)
        .map(|_| ())
        .map_err(|e| e.to_string())
}
