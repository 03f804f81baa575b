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

#[cfg(test)]
mod tests {
    use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType, Graph};
    use memplan_ir::{DataType, Expr, Known, TensorData};

    fn to(t: DataType) -> Attribute {
        Attribute {
            name: "to".into(),
            value: AttrValue::Int(t as i64),
            doc: String::new(),
        }
    }

    /// Float shape arithmetic (`Sqrt` of a cast shape, cast back) has no rule that folds it: the
    /// kernels do, and the Reshape it feeds gets concrete dims. A kernel error (an out-of-range
    /// Gather index) leaves the value unknown without failing inference.
    #[test]
    fn kernels_fold_concrete_float_shape_arithmetic() {
        super::install_const_folder();
        let mut g = Graph::default();
        let x = g.add_input(
            "x",
            DeclType::tensor(DataType::F32, vec![DeclDim::Value(4), DeclDim::Value(16)]),
        );
        let (_, s) = g.add_node("s", "Shape", &[Some(x)], &["s"], vec![]);
        let (_, c) = g.add_node("c", "Cast", &[Some(s[0])], &["c"], vec![to(DataType::F32)]);
        let (_, q) = g.add_node("q", "Sqrt", &[Some(c[0])], &["q"], vec![]);
        let (_, i) = g.add_node("i", "Cast", &[Some(q[0])], &["i"], vec![to(DataType::I64)]);
        let axis0 = Attribute {
            name: "axis".into(),
            value: AttrValue::Int(0),
            doc: String::new(),
        };
        let (_, t) = g.add_node(
            "t",
            "Concat",
            &[Some(i[0]), Some(i[0])],
            &["t"],
            vec![axis0],
        );
        let (_, r) = g.add_node("r", "Reshape", &[Some(x), Some(t[0])], &["r"], vec![]);
        let bad = g.add_initializer(TensorData::from_i64("bad", vec![], &[5]));
        let (_, gb) = g.add_node("gb", "Gather", &[Some(s[0]), Some(bad)], &["gb"], vec![]);
        g.outputs.extend([r[0], gb[0]]);
        let facts = memplan_ir::infer_graph(&g, 18).unwrap();
        assert_eq!(
            facts.get(i[0]).value,
            Some(Known::Int(vec![Expr::int(2), Expr::int(4)]))
        );
        let dims = [2, 4, 2, 4].map(Expr::int).to_vec();
        assert_eq!(facts.get(r[0]).shape, Some(dims));
        assert_eq!(facts.get(gb[0]).value, None);
    }
}
