//! A slice assignment as TorchScript writes it: `z = zeros(B, S + 1, S + 1); z[:, 1:, 1:] = s`
//! becomes a `ScatterND` of every element's index tuple, a grid of three `int64` coordinates
//! (each a `Range` computed from `Shape`, reshaped and expanded along its own axis, concatenated
//! along a last axis): six times the bytes of the scores, and a scatter whose flow mixes every
//! axis its tuples address. Chunking writes the scatter of a box as slices of the data around
//! the box joined with the update (`plan::chunk::boxes`): no index grid, and the attention after
//! it chunks through. The chunked graph runs plain and from its plan to the original's bits.

use std::collections::BTreeMap;

use memplan_exec::{run, RunOptions, Tensor};
use memplan_ir::graph::{AttrValue, DeclDim, Model};
use memplan_ir::{TensorData, ValueId};
use memplan_plan::chunk::{chunk_to_budget_with, ChunkOptions};

use super::graph_builder::{axis, B};
use super::same_bits::runs_to_the_bits_of;

/// An int64 constant, named by its place among the graph's values.
fn ints(b: &mut B, dims: Vec<u64>, v: &[i64]) -> ValueId {
    let name = format!("c{}", b.0.values.len());
    b.ints(&name, dims, v)
}

/// Dim `k` of `x`, as a scalar.
fn dim(b: &mut B, x: ValueId, k: i64) -> ValueId {
    let s = b.op("Shape", &[x], vec![]);
    let i = ints(b, vec![], &[k]);
    b.op("Gather", &[s, i], vec![])
}

const D: usize = 4;

/// `x [B, S, D]`: `Softmax(z)` summed over its last axis, `z` the scores `x x^T` written into
/// rows `1..` and columns `1..` of zeros `[B, S + 1, S + 1]`, by a grid of tuples (`step` apart
/// along the columns: 1 is a box, 2 is not one).
fn assigned(step: i64) -> Model {
    let mut b = B::default();
    let p = |s: &str| DeclDim::Param(s.into());
    let dims = vec![p("B"), p("S"), DeclDim::Value(D as i64)];
    let x = b.input("x", dims);
    let perm = AttrValue::Ints(vec![0, 2, 1]);
    let xt = b.op("Transpose", &[x], vec![("perm", perm)]);
    let scores = b.op("MatMul", &[x, xt], vec![]);
    let (bn, sn) = (dim(&mut b, x, 0), dim(&mut b, x, 1));
    let (zero_i, one, st) = (
        ints(&mut b, vec![], &[0]),
        ints(&mut b, vec![], &[1]),
        ints(&mut b, vec![], &[step]),
    );
    // Columns `1, 1 + step, ..`: `S` of them, in `S * step + 1`.
    let cols_end = b.op("Mul", &[sn, st], vec![]);
    let cols_end = b.op("Add", &[cols_end, one], vec![]);
    let rows_end = b.op("Add", &[sn, one], vec![]);
    let unsq0 = ints(&mut b, vec![1], &[0]);
    let shape: Vec<ValueId> = [bn, sn, rows_end, cols_end]
        .iter()
        .map(|&d| b.op("Unsqueeze", &[d, unsq0], vec![]))
        .collect();
    let zshape = b.op("Concat", &[shape[0], shape[2], shape[3]], axis(0));
    let zero = TensorData::from_f32("zero", vec![1], &[0.0]);
    let z = b.op(
        "ConstantOfShape",
        &[zshape],
        vec![("value", AttrValue::Tensor(zero))],
    );
    // The grid: coordinate k a `Range` shaped along axis k, expanded to `[B, S, S]`.
    let grid_shape = b.op("Concat", &[shape[0], shape[1], shape[1]], axis(0));
    let last = ints(&mut b, vec![1], &[-1]);
    let ranges = [
        b.op("Range", &[zero_i, bn, one], vec![]),
        b.op("Range", &[one, rows_end, one], vec![]),
        b.op("Range", &[one, cols_end, st], vec![]),
    ];
    let mut coords = Vec::new();
    for (k, r) in ranges.into_iter().enumerate() {
        let mut t = vec![1i64; 3];
        t[k] = -1;
        let t = ints(&mut b, vec![3], &t);
        let r = b.op("Reshape", &[r, t], vec![]);
        let r = b.op("Expand", &[r, grid_shape], vec![]);
        coords.push(b.op("Unsqueeze", &[r, last], vec![]));
    }
    let idx = b.op("Concat", &coords, axis(-1));
    let w = b.op("ScatterND", &[z, idx, scores], vec![]);
    let sm = b.op("Softmax", &[w], axis(-1));
    let axes = ints(&mut b, vec![1], &[2]);
    let y = b.op(
        "ReduceSum",
        &[sm, axes],
        vec![("keepdims", AttrValue::Int(0))],
    );
    b.model(y)
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
