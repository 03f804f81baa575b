//! A slice assignment as TorchScript writes it: `z = zeros(B, S + 1, S + 1); z[:, 1:, 1:] = s`
//! becomes a `ScatterND` of every element's index tuple, a grid of three `int64` coordinates
//! (each a `Range` computed from `Shape`, reshaped and expanded along its own axis, concatenated
//! along a last axis): six times the bytes of the scores, and a scatter whose flow mixes every
//! axis its tuples address. Chunking writes the scatter of a box as slices of the data around
//! the box joined with the update (`plan::chunk::boxes`): no index grid, and the attention after
//! it chunks through. The chunked graph runs plain and from its plan to the original's bits.

use std::collections::BTreeMap;

use memplan_exec::{run, RunOptions, Tensor};
use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType, Graph, Model};
use memplan_ir::{DataType, TensorData, ValueId};
use memplan_plan::chunk::{chunk_to_budget_with, ChunkOptions};

use super::same_bits::runs_to_the_bits_of;

const D: usize = 4;

struct B(Graph);

impl B {
    fn ints(&mut self, dims: Vec<u64>, v: &[i64]) -> ValueId {
        let name = format!("c{}", self.0.values.len());
        self.0.add_initializer(TensorData::from_i64(name, dims, v))
    }

    fn op(&mut self, op: &str, ins: &[ValueId], attrs: Vec<(&str, AttrValue)>) -> ValueId {
        let name = format!("n{}", self.0.nodes.len());
        let ins: Vec<Option<ValueId>> = ins.iter().map(|&v| Some(v)).collect();
        let attrs = attrs
            .into_iter()
            .map(|(n, value)| Attribute {
                name: n.into(),
                value,
                doc: String::new(),
            })
            .collect();
        self.0.add_node(name.clone(), op, &ins, &[&name], attrs).1[0]
    }

    /// Dim `k` of `x`, as a scalar.
    fn dim(&mut self, x: ValueId, k: i64) -> ValueId {
        let s = self.op("Shape", &[x], vec![]);
        let i = self.ints(vec![], &[k]);
        self.op("Gather", &[s, i], vec![])
    }

    fn axis(v: i64) -> Vec<(&'static str, AttrValue)> {
        vec![("axis", AttrValue::Int(v))]
    }
}

/// `x [B, S, D]`: `Softmax(z)` summed over its last axis, `z` the scores `x x^T` written into
/// rows `1..` and columns `1..` of zeros `[B, S + 1, S + 1]`, by a grid of tuples (`step` apart
/// along the columns: 1 is a box, 2 is not one).
fn assigned(step: i64) -> Model {
    let mut b = B(Graph::default());
    let p = |s: &str| DeclDim::Param(s.into());
    let dims = vec![p("B"), p("S"), DeclDim::Value(D as i64)];
    let x = b.0.add_input("x", DeclType::tensor(DataType::F32, dims));
    let perm = AttrValue::Ints(vec![0, 2, 1]);
    let xt = b.op("Transpose", &[x], vec![("perm", perm)]);
    let scores = b.op("MatMul", &[x, xt], vec![]);
    let (bn, sn) = (b.dim(x, 0), b.dim(x, 1));
    let (zero_i, one, st) = (
        b.ints(vec![], &[0]),
        b.ints(vec![], &[1]),
        b.ints(vec![], &[step]),
    );
    // Columns `1, 1 + step, ..`: `S` of them, in `S * step + 1`.
    let cols_end = b.op("Mul", &[sn, st], vec![]);
    let cols_end = b.op("Add", &[cols_end, one], vec![]);
    let rows_end = b.op("Add", &[sn, one], vec![]);
    let unsq0 = b.ints(vec![1], &[0]);
    let shape: Vec<ValueId> = [bn, sn, rows_end, cols_end]
        .iter()
        .map(|&d| b.op("Unsqueeze", &[d, unsq0], vec![]))
        .collect();
    let zshape = b.op("Concat", &[shape[0], shape[2], shape[3]], B::axis(0));
    let zero = TensorData::from_f32("zero", vec![1], &[0.0]);
    let z = b.op(
        "ConstantOfShape",
        &[zshape],
        vec![("value", AttrValue::Tensor(zero))],
    );
    // The grid: coordinate k a `Range` shaped along axis k, expanded to `[B, S, S]`.
    let grid_shape = b.op("Concat", &[shape[0], shape[1], shape[1]], B::axis(0));
    let last = b.ints(vec![1], &[-1]);
    let ranges = [
        b.op("Range", &[zero_i, bn, one], vec![]),
        b.op("Range", &[one, rows_end, one], vec![]),
        b.op("Range", &[one, cols_end, st], vec![]),
    ];
    let mut coords = Vec::new();
    for (k, r) in ranges.into_iter().enumerate() {
        let mut t = vec![1i64; 3];
        t[k] = -1;
        let t = b.ints(vec![3], &t);
        let r = b.op("Reshape", &[r, t], vec![]);
        let r = b.op("Expand", &[r, grid_shape], vec![]);
        coords.push(b.op("Unsqueeze", &[r, last], vec![]));
    }
    let idx = b.op("Concat", &coords, B::axis(-1));
    let w = b.op("ScatterND", &[z, idx, scores], vec![]);
    let sm = b.op("Softmax", &[w], B::axis(-1));
    let axes = b.ints(vec![1], &[2]);
    let y = b.op(
        "ReduceSum",
        &[sm, axes],
        vec![("keepdims", AttrValue::Int(0))],
    );
    b.0.outputs.push(y);
    Model {
        graph: b.0,
        ..Model::default()
    }
}

fn inputs(bn: usize, s: usize) -> BTreeMap<String, Tensor> {
    let v: Vec<f32> = (0..bn * s * D)
        .map(|i| ((i * 37 % 101) as f32) / 50.0 - 1.0)
        .collect();
    let x = Tensor::from_vec(&[bn, s, D], &v, None).unwrap();
    BTreeMap::from([("x".to_string(), x)])
}

#[test]
fn a_slice_assignment_by_an_index_grid_chunks_through() {
    for (bn, s) in [(4usize, 16usize), (3, 27)] {
        let dims = BTreeMap::from([("B".to_string(), bn as i64), ("S".to_string(), s as i64)]);
        for step in [1i64, 2] {
            let model = assigned(step);
            let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
            let want = run(&model.graph, &facts, inputs(bn, s), &RunOptions::default()).unwrap();
            let opts = ChunkOptions {
                chunk_counts: vec![2, 4, 8],
                ..ChunkOptions::default()
            };
            let (with, traded) = chunk_to_budget_with(&model, &dims, &opts, true).unwrap();
            let (without, _) = chunk_to_budget_with(&model, &dims, &opts, false).unwrap();
            let what = format!("B={bn} S={s} step {step}");
            // A box (step 1) is written as slices and concatenations; a grid with gaps is not.
            assert_eq!(traded, step == 1, "{what}");
            let scatters = |m: &Model| m.graph.nodes.iter().any(|n| n.op == "ScatterND");
            assert_eq!(scatters(&with.model), step != 1, "{what}");
            if step == 1 {
                assert!(
                    with.peak_after < without.peak_after,
                    "{what}: {} vs {} without",
                    with.peak_after,
                    without.peak_after
                );
            }
            let want = want.outputs[0].1.bytes();
            runs_to_the_bits_of(&with.model, &dims, || inputs(bn, s), want, &what);
        }
    }
}
