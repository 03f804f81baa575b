//! A chain of movements that is a gather along one axis (XLNet's relative shift: scores
//! `[.., S, 2S]` reshaped to `[.., 2S, S]`, the first row dropped, reshaped to `[.., S, 2S - 1]`,
//! the first `S` columns gathered), inside an attention: chunking writes the chain as
//! `GatherElements` of a light index (`plan::chunk::gathers`), so the attention chunks along its
//! query rows, where the reshapes let it split only its heads. The chunked graph runs plain and
//! from its plan to the original's bits, the measured peak the planned one; the reshape targets
//! and the gathered range come from `Shape`, as TorchScript writes them.

use std::collections::BTreeMap;

use memplan_exec::{run, RunOptions, Tensor};
use memplan_ir::graph::{AttrValue, DeclDim, DeclType, Model};
use memplan_ir::{DataType, ValueId};
use memplan_plan::chunk::{chunk_to_budget, ChunkOptions};

use super::graph_builder::{axis, B};
use super::same_bits::runs_to_the_bits_of;

const H: usize = 2;
const D: usize = 4;
/// Rows per block of the banded attention.
const BL: i64 = 2;

impl B {
    fn dim(&mut self, x: ValueId, k: i64) -> ValueId {
        let s = self.op("Shape", &[x], vec![]);
        let i = self.ints(&format!("dim{}", self.0.values.len()), vec![1], &[k]);
        self.op("Gather", &[s, i], vec![])
    }

    fn heads_input(&mut self, name: &str, len: &str) -> ValueId {
        let dims = vec![
            DeclDim::Value(1),
            DeclDim::Value(H as i64),
            DeclDim::Param(len.into()),
            DeclDim::Value(D as i64),
        ];
        self.input(name, dims)
    }

    /// `a @ b^T` over the last two axes.
    fn scores(&mut self, a: ValueId, b: ValueId) -> ValueId {
        let perm = AttrValue::Ints(vec![0, 1, 3, 2]);
        let t = self.op("Transpose", &[b], vec![("perm", perm)]);
        self.op("MatMul", &[a, t], vec![])
    }
}

/// `Softmax(q k^T + shift(q r^T)) v` of `q, k, v [1, H, S, D]` and relative keys `r [1, H, T, D]`
/// (`T = 2S`), `shift(x)[.., i, j] = x[.., i, S - i + j]`.
fn relative_attention() -> Model {
    let mut b = B::default();
    let (q, k, r, v) = (
        b.heads_input("q", "S"),
        b.heads_input("k", "S"),
        b.heads_input("r", "T"),
        b.heads_input("v", "S"),
    );
    let ac = b.scores(q, k);
    let bd = b.scores(q, r);
    let d: Vec<ValueId> = (0..4).map(|i| b.dim(bd, i)).collect();
    let axis0 = || axis(0);
    let swapped = b.op("Concat", &[d[0], d[1], d[3], d[2]], axis0());
    let r1 = b.op("Reshape", &[bd, swapped], vec![]);
    let (one, big, two) = (
        b.ints("one", vec![1], &[1]),
        b.ints("big", vec![1], &[i64::MAX]),
        b.ints("two", vec![1], &[2]),
    );
    let cut = b.op("Slice", &[r1, one, big, two], vec![]);
    let t1 = b.op("Sub", &[d[3], one], vec![]);
    let back = b.op("Concat", &[d[0], d[1], d[2], t1], axis0());
    let r2 = b.op("Reshape", &[cut, back], vec![]);
    let (zero, step) = (b.ints("zero", vec![], &[0]), b.ints("step", vec![], &[1]));
    let axes0 = b.ints("axes0", vec![1], &[0]);
    let s = b.op("Squeeze", &[d[2], axes0], vec![]);
    let range = b.op("Range", &[zero, s, step], vec![]);
    let shifted = b.op("Gather", &[r2, range], vec![("axis", AttrValue::Int(3))]);
    let sum = b.op("Add", &[ac, shifted], vec![]);
    let p = b.op("Softmax", &[sum], vec![("axis", AttrValue::Int(-1))]);
    let y = b.op("MatMul", &[p, v], vec![]);
    b.model(y)
}

/// A tensor of `shape` holding a fixed pattern of values in [-1, 1), shifted by `seed`.
fn pattern(shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| (((i + seed) * 37 % 101) as f32) / 50.0 - 1.0)
        .collect();
    Tensor::from_vec(shape, &v, None).unwrap()
}

fn inputs(s: usize) -> BTreeMap<String, Tensor> {
    let t = |len: usize, seed: usize| pattern(&[1, H, len, D], seed);
    BTreeMap::from([
        ("q".to_string(), t(s, 1)),
        ("k".to_string(), t(s, 2)),
        ("r".to_string(), t(2 * s, 3)),
        ("v".to_string(), t(s, 4)),
    ])
}

#[test]
fn a_relative_shift_is_chunked_along_query_rows_as_a_gather() {
    for s in [16usize, 21, 40] {
        let dims = BTreeMap::from([("S".to_string(), s as i64), ("T".to_string(), 2 * s as i64)]);
        let model = relative_attention();
        let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
        let want = run(&model.graph, &facts, inputs(s), &RunOptions::default()).unwrap();
        let opts = ChunkOptions {
            chunk_counts: vec![8],
            ..ChunkOptions::default()
        };
        let c = chunk_to_budget(&model, &dims, &opts).unwrap();
        let ops: Vec<&str> = c.model.graph.nodes.iter().map(|n| n.op.as_str()).collect();
        let steps: Vec<(usize, i64)> = c.steps.iter().map(|st| (st.nodes, st.extent)).collect();
        assert!(ops.contains(&"GatherElements"), "S={s}: {ops:?}");
        assert!(
            !ops.iter()
                .any(|o| matches!(*o, "Reshape" | "Range" | "Shape")),
            "S={s}: the shift's reshapes, and the range only they read, are gone: {ops:?}"
        );
        assert!(
            steps.iter().any(|&(_, e)| e == s as i64),
            "S={s}: no region along the query rows: {steps:?}"
        );
        assert!(
            c.peak_after < c.peak_before,
            "{} -> {}",
            c.peak_before,
            c.peak_after
        );
        let want = want.outputs[0].1.bytes();
        runs_to_the_bits_of(&c.model, &dims, || inputs(s), want, &format!("S={s}"));
    }
}

/// Block-banded attention (BigBird's middle band): query block `l` attends to key blocks
/// `l - 1, l, l + 1`, the band made of three slices of the key blocks at offsets 0, 1 and 2 along
/// the block axis, concatenated, and the middle query blocks one more slice. Each slice copies
/// (the heads come before the block axis), so chunking writes it as a gather of the blocks it
/// keeps, and the attention chunks along its middle blocks, which the slices' flow mixes.
fn banded_attention(nb: i64) -> Model {
    let mut b = B::default();
    let x = |b: &mut B, name: &str| {
        let dims = [1, H as i64, nb, BL, D as i64].map(DeclDim::Value).to_vec();
        b.0.add_input(name, DeclType::tensor(DataType::F32, dims))
    };
    let (q, k, v) = (x(&mut b, "q"), x(&mut b, "k"), x(&mut b, "v"));
    let axis2 = b.ints("axis2", vec![1], &[2]);
    let mut blocks = |b: &mut B, t: ValueId, from: i64| {
        let s = b.ints(&format!("s{}", b.0.values.len()), vec![1], &[from]);
        let e = b.ints(&format!("e{}", b.0.values.len()), vec![1], &[from + nb - 2]);
        b.op("Slice", &[t, s, e, axis2], vec![])
    };
    let band = |b: &mut B, t: ValueId, blocks: &mut dyn FnMut(&mut B, ValueId, i64) -> ValueId| {
        let parts: Vec<ValueId> = (0..3).map(|o| blocks(b, t, o)).collect();
        b.op("Concat", &parts, vec![("axis", AttrValue::Int(3))])
    };
    let qm = blocks(&mut b, q, 1);
    let kb = band(&mut b, k, &mut blocks);
    let vb = band(&mut b, v, &mut blocks);
    let perm = AttrValue::Ints(vec![0, 1, 2, 4, 3]);
    let kt = b.op("Transpose", &[kb], vec![("perm", perm)]);
    let s = b.op("MatMul", &[qm, kt], vec![]);
    let p = b.op("Softmax", &[s], vec![("axis", AttrValue::Int(-1))]);
    let y = b.op("MatMul", &[p, vb], vec![]);
    b.model(y)
}

#[test]
fn a_band_of_sliced_blocks_is_chunked_along_its_blocks() {
    for nb in [10i64, 14, 26] {
        let model = banded_attention(nb);
        let dims = BTreeMap::new();
        let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
        let inputs = || {
            let t = |seed: usize| pattern(&[1, H, nb as usize, BL as usize, D], seed);
            BTreeMap::from([
                ("q".to_string(), t(1)),
                ("k".to_string(), t(2)),
                ("v".to_string(), t(3)),
            ])
        };
        let want = run(&model.graph, &facts, inputs(), &RunOptions::default()).unwrap();
        let opts = ChunkOptions {
            chunk_counts: vec![4],
            ..ChunkOptions::default()
        };
        let c = chunk_to_budget(&model, &dims, &opts).unwrap();
        let steps: Vec<(usize, i64)> = c.steps.iter().map(|st| (st.nodes, st.extent)).collect();
        assert!(
            steps.iter().any(|&(_, e)| e == nb - 2),
            "nb={nb}: no region along the middle blocks: {steps:?}"
        );
        assert!(
            c.peak_after < c.peak_before,
            "{} -> {}",
            c.peak_before,
            c.peak_after
        );
        let want = want.outputs[0].1.bytes();
        runs_to_the_bits_of(&c.model, &dims, inputs, want, &format!("nb={nb}"));
    }
}
