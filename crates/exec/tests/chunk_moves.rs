//! Regions through ops with several outputs and through layers beside `Conv`: a gated unit whose
//! projection is cut in two by `Split` (both halves sliced per chunk), and a `ConvTranspose`
//! upsampling chunked along the batch and along its output channels, and a `Resize` whose `sizes`
//! an exporter computed from `Shape` (a chunk reads its own shape as sizes). Each chunked graph runs to the
//! same bits as the original, plain and from its plan, with the measured peak the planned one.

use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType, Graph, Model};
use memplan_ir::{DataType, TensorData, ValueId};

use crate::chunk_conv::{check, image_input, ints, weights};

/// x [S, 8] -> MatMul to 2 * `half` -> Split in two halves a, b -> a * Sigmoid(b) -> MatMul to 8.
fn gated_unit(half: u64) -> Model {
    let mut g = Graph::default();
    let x = g.add_input(
        "x",
        DeclType::tensor(
            DataType::F32,
            vec![DeclDim::Param("S".into()), DeclDim::Value(8)],
        ),
    );
    let w1 = g.add_initializer(weights("w1", &[8, 2 * half]));
    let w2 = g.add_initializer(weights("w2", &[half, 8]));
    let (_, p) = g.add_node("proj", "MatMul", &[Some(x), Some(w1)], &["p"], vec![]);
    let axis = Attribute {
        name: "axis".into(),
        value: AttrValue::Int(-1),
        doc: String::new(),
    };
    let (_, ab) = g.add_node("split", "Split", &[Some(p[0])], &["a", "b"], vec![axis]);
    let (_, s) = g.add_node("sig", "Sigmoid", &[Some(ab[1])], &["s"], vec![]);
    let (_, m) = g.add_node("gate", "Mul", &[Some(ab[0]), Some(s[0])], &["m"], vec![]);
    let (_, y) = g.add_node("out", "MatMul", &[Some(m[0]), Some(w2)], &["y"], vec![]);
    g.outputs.push(y[0]);
    Model {
        graph: g,
        ..Model::default()
    }
}

/// The whole unit is one region along the rows: `Split` passes them to both halves.
#[test]
fn a_split_passes_its_rows_to_both_halves() {
    let steps = check(&gated_unit(64), &[("S", 48)], &[48, 8]);
    assert!(
        steps.iter().any(|s| s.starts_with("5 nodes proj..out")),
        "{steps:?}"
    );
}

/// `g` with `u` -> Relu -> GlobalAveragePool -> the output `y`, as a model.
fn relu_pool(mut g: Graph, u: ValueId) -> Model {
    let (_, r) = g.add_node("relu", "Relu", &[Some(u)], &["r"], vec![]);
    let (_, y) = g.add_node("pool", "GlobalAveragePool", &[Some(r[0])], &["y"], vec![]);
    g.outputs.push(y[0]);
    Model {
        graph: g,
        ..Model::default()
    }
}

/// x [B, 4, H, W] -> ConvTranspose (`mid` filters, 2x2, stride 2, bias) -> Relu ->
/// GlobalAveragePool: every node passes the batch and the channels.
fn upsampler(mid: u64) -> Model {
    let mut g = Graph::default();
    let x = image_input(&mut g);
    let w1 = g.add_initializer(weights("w1", &[4, mid, 2, 2]));
    let b1 = g.add_initializer(weights("b1", &[mid]));
    let (_, u) = g.add_node(
        "up",
        "ConvTranspose",
        &[Some(x), Some(w1), Some(b1)],
        &["u"],
        vec![ints("strides", &[2, 2])],
    );
    relu_pool(g, u[0])
}

#[test]
fn a_conv_transpose_chunks_along_the_batch_and_its_filters() {
    let steps = check(
        &upsampler(8),
        &[("B", 6), ("H", 6), ("W", 6)],
        &[6, 4, 6, 6],
    );
    let whole = |e: i64| {
        let s = format!("3 nodes up..pool, extent {e}");
        move |steps: &[String]| steps.contains(&s)
    };
    assert!(whole(6)(&steps), "{steps:?}");
    let steps = check(
        &upsampler(64),
        &[("B", 1), ("H", 8), ("W", 8)],
        &[1, 4, 8, 8],
    );
    assert!(whole(64)(&steps), "{steps:?}");
}

/// x [B, 4, H, W] -> Resize to [B, 4, 16, 16] (`sizes` = Shape(x)[0:2] ++ [16, 16], as torch writes
/// an upsampling) -> Relu -> GlobalAveragePool.
fn upsampled_by_sizes() -> Model {
    let mut g = Graph::default();
    let x = image_input(&mut g);
    let from = g.add_initializer(TensorData::from_i64("from", vec![1], &[0]));
    let to = g.add_initializer(TensorData::from_i64("to", vec![1], &[2]));
    let hw = g.add_initializer(TensorData::from_i64("hw", vec![2], &[16, 16]));
    let (_, sh) = g.add_node("shape", "Shape", &[Some(x)], &["sh"], vec![]);
    let (_, bc) = g.add_node(
        "bc",
        "Slice",
        &[Some(sh[0]), Some(from), Some(to)],
        &["bc"],
        vec![],
    );
    let axis = Attribute {
        name: "axis".into(),
        value: AttrValue::Int(0),
        doc: String::new(),
    };
    let (_, sizes) = g.add_node(
        "sizes",
        "Concat",
        &[Some(bc[0]), Some(hw)],
        &["sizes"],
        vec![axis],
    );
    let mode = Attribute {
        name: "mode".into(),
        value: AttrValue::String(b"linear".to_vec()),
        doc: String::new(),
    };
    let (_, u) = g.add_node(
        "up",
        "Resize",
        &[Some(x), None, None, Some(sizes[0])],
        &["u"],
        vec![mode],
    );
    relu_pool(g, u[0])
}

#[test]
fn a_resize_by_sizes_chunks_along_the_axes_it_keeps() {
    let steps = check(
        &upsampled_by_sizes(),
        &[("B", 6), ("H", 5), ("W", 7)],
        &[6, 4, 5, 7],
    );
    assert!(
        steps.iter().any(|s| s.starts_with("3 nodes up..pool")),
        "{steps:?}"
    );
}
