//! The executor's kernels as inference's constant folder (see `memplan_ir::fold`): a node whose
//! inputs are all known small constants is evaluated by the op implementation that runs it.

use memplan_ir::fold::ConstFolder;
use memplan_ir::graph::Node;
use memplan_ir::TensorData;

use crate::interp::weight_tensor;
use crate::mem::MemStats;
use crate::ops::{lookup, OpCtx};

/// Runs one node's kernel on constant inputs, outside any run: its memory is charged to a
/// throwaway [`MemStats`], never to a run's.
struct KernelFolder;

impl ConstFolder for KernelFolder {
    fn fold(
        &self,
        node: &Node,
        opset: i64,
        inputs: &[Option<&TensorData>],
    ) -> Option<Vec<TensorData>> {
        let f = lookup(node)?;
        let tensors = inputs
            .iter()
            .map(|t| t.map(weight_tensor).transpose())
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        let refs: Vec<_> = tensors.iter().map(|t| t.as_ref()).collect();
        let stats = MemStats::new();
        let ctx = OpCtx {
            node,
            opset,
            view: false,
            stats: &stats,
        };
        let outs = f(&ctx, &refs).ok()?;
        outs.iter()
            .map(|t| {
                let dims = t.shape.iter().map(|&d| d as u64).collect();
                let raw = bytes::Bytes::copy_from_slice(t.bytes());
                TensorData::from_raw(String::new(), t.dtype, dims, raw).ok()
            })
            .collect()
    }
}

static FOLDER: KernelFolder = KernelFolder;

/// Registers the executor's kernels as inference's constant folder, once per process (later calls
/// do nothing). Call it before inferring a model whose facts a run will use: the CLI does at
/// startup, and [`crate::run`] / [`crate::run_planned`] do for their callers' later inferences.
pub fn install_const_folder() {
    memplan_ir::fold::set_const_folder(&FOLDER);
}
