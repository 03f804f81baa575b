//! A large value made to keep a small selection of it: transformers' bidirectional mask, built
//! `[1, 1, S, S]` (a `[1, S]` padding mask expanded to a shape computed from `Shape`, as
//! TorchScript writes it, then `Where` to 0 or the lowest float) and read as `mask[:, 0, 0, :]`
//! (two gathers of one index). Chunking first makes the mask already selected
//! (`plan::chunk::sink`): the `Expand` and `Where` run on one row, and no value of `S * S`
//! elements is left. Also a strided slice of rows of such a mask. (The cases it leaves alone are
//! `plan`'s `sink::tests`.)

use std::collections::BTreeMap;

use memplan_exec::{run, RunOptions, Tensor};
use memplan_ir::graph::{DeclDim, Model};
use memplan_ir::ValueId;
use memplan_plan::chunk::{chunk_to_budget, ChunkOptions};

use super::graph_builder::{axis, B};
use super::same_bits::runs_to_the_bits_of;

const D: usize = 4;

/// How the mask is read.
#[derive(Clone, Copy, Debug)]
enum Read {
    /// `mask[:, 0, 0, :]`, added to each column of `x`.
    FirstRow,
    /// Rows `1, 3, 5, ...` of `mask[0, 0]`, summed over the keys, added to `x`'s first rows.
    OddRows,
}

/// `x [1, S, D]` plus a read of the mask of padding mask `m [1, S]`.
fn masked(read: Read) -> Model {
    let p = |s: &str| DeclDim::Param(s.into());
    let mut b = B::default();
    let x = b.input(
        "x",
        vec![DeclDim::Value(1), p("S"), DeclDim::Value(D as i64)],
    );
    let m = b.input("m", vec![DeclDim::Value(1), p("S")]);
    let axes = b.ints("axes12", vec![2], &[1, 2]);
    let m4 = b.op("Unsqueeze", &[m, axes], vec![]);
    // The target `[1, 1, S, S]` from `Shape(x)`, as TorchScript computes it.
    let sx = b.op("Shape", &[x], vec![]);
    let i1 = b.ints("i1", vec![1], &[1]);
    let s = b.op("Gather", &[sx, i1], axis(0));
    let one = b.ints("one", vec![1], &[1]);
    let target = b.op("Concat", &[one, one, s, s], axis(0));
    let e = b.op("Expand", &[m4, target], vec![]);
    let (half, zero, low) = (
        b.float("half", 0.5),
        b.float("zero", 0.0),
        b.float("low", f32::MIN),
    );
    let keep = b.op("Greater", &[e, half], vec![]);
    let mask = b.op("Where", &[keep, zero, low], vec![]);
    let first = |b: &mut B, mask: ValueId| {
        let i0 = b.ints(&format!("i0_{}", b.0.values.len()), vec![], &[0]);
        let r = b.op("Gather", &[mask, i0], axis(1));
        let r = b.op("Gather", &[r, i0], axis(1));
        let last = b.ints("last", vec![1], &[2]);
        b.op("Unsqueeze", &[r, last], vec![])
    };
    let y = match read {
        Read::FirstRow => {
            let r = first(&mut b, mask);
            b.op("Add", &[x, r], vec![])
        }
        Read::OddRows => {
            let (st, en, ax, step) = (
                b.ints("st", vec![1], &[1]),
                b.ints("en", vec![1], &[i64::MAX]),
                b.ints("ax", vec![1], &[2]),
                b.ints("step", vec![1], &[2]),
            );
            let rows = b.op("Slice", &[mask, st, en, ax, step], vec![]);
            let keys = b.ints("keys", vec![1], &[3]);
            let sum = b.op("ReduceSum", &[rows, keys], vec![]);
            let flat = b.ints("flat", vec![3], &[1, -1, 1]);
            let sum = b.op("Reshape", &[sum, flat], vec![]);
            // The first S/2 rows of x, each plus one odd row's sum.
            let (s0, ax1) = (b.ints("s0", vec![1], &[0]), b.ints("ax1", vec![1], &[1]));
            let sh = b.op("Shape", &[sum], vec![]);
            let n = b.op("Gather", &[sh, i1], axis(0));
            let xs = b.op("Slice", &[x, s0, n, ax1], vec![]);
            b.op("Add", &[xs, sum], vec![])
        }
    };
    b.model(y)
}

fn inputs(s: usize) -> BTreeMap<String, Tensor> {
    let x: Vec<f32> = (0..s * D).map(|i| ((i * 37 % 101) as f32) / 50.0).collect();
    let m: Vec<f32> = (0..s).map(|i| (i % 5 != 3) as u8 as f32).collect();
    BTreeMap::from([
        (
            "x".to_string(),
            Tensor::from_vec(&[1, s, D], &x, None).unwrap(),
        ),
        (
            "m".to_string(),
            Tensor::from_vec(&[1, s], &m, None).unwrap(),
        ),
    ])
}

/// The model rewritten before chunking (no budget, so the rewrites apply; no chunk count, so
/// no region is chunked) at `S = s`, after checking it runs to the original's bits; with its
/// values' largest element count at `s`.
fn chunked(read: Read, s: usize) -> (Model, u64) {
    let model = masked(read);
    let dims = BTreeMap::from([("S".to_string(), s as i64)]);
    let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
    let want = run(&model.graph, &facts, inputs(s), &RunOptions::default()).unwrap();
    let opts = ChunkOptions {
        chunk_counts: Vec::new(),
        ..ChunkOptions::default()
    };
    let c = chunk_to_budget(&model, &dims, &opts).unwrap();
    assert!(c.steps.is_empty());
    let want = want.outputs[0].1.bytes();
    let what = format!("{read:?} S={s}");
    runs_to_the_bits_of(&c.model, &dims, || inputs(s), want, &what);
    let f = memplan_ir::infer_model_for(&c.model, &dims).unwrap();
    let largest = c
        .model
        .graph
        .value_ids()
        .filter_map(|v| f.get(v).shape_at(&dims))
        .map(|sh| sh.iter().product::<u64>())
        .max()
        .unwrap_or(0);
    (c.model, largest)
}

#[test]
fn a_mask_read_in_one_row_is_made_one_row() {
    for s in [32usize, 75] {
        let s2 = (s * s) as u64;
        let (m, largest) = chunked(Read::FirstRow, s);
        assert!(
            largest <= (s * D) as u64,
            "S={s}: a value of {largest} elements is left"
        );
        let ops: Vec<&str> = m.graph.nodes.iter().map(|n| n.op.as_str()).collect();
        assert!(ops.contains(&"Where") && ops.contains(&"Expand"), "{ops:?}");
        let (_, largest) = chunked(Read::OddRows, s);
        assert!(
            largest <= s2 / 2 + s as u64,
            "S={s}: {largest} elements for the odd rows"
        );
    }
}
