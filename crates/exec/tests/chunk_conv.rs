//! `Conv` inside chunked regions: along the batch, along output channels (one group: a chunk of
//! filters and biases), and along spatial axes (a 1x1 kernel with unit strides and no padding).
//! Each chunked graph runs to the same bits as the original, plain and from its plan, with the
//! measured peak the planned one.

use std::collections::BTreeMap;

use memplan_exec::{run, run_planned, RunOptions, Tensor};
use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType, Graph, Model};
use memplan_ir::{DataType, TensorData};
use memplan_plan::chunk::{chunk_to_budget, ChunkOptions};

pub(crate) fn ints(name: &str, v: &[i64]) -> Attribute {
    Attribute {
        name: name.into(),
        value: AttrValue::Ints(v.to_vec()),
        doc: String::new(),
    }
}

pub(crate) fn weights(name: &str, shape: &[u64]) -> TensorData {
    let n: u64 = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 7919 % 97) as f32 - 48.0) / 61.0)
        .collect();
    TensorData::from_f32(name, shape.to_vec(), &v)
}

/// The graph input `x`, `[B, 4, H, W]`.
pub(crate) fn image_input(g: &mut Graph) -> memplan_ir::ValueId {
    let dim = |s: &str| DeclDim::Param(s.into());
    g.add_input(
        "x",
        DeclType::tensor(
            DataType::F32,
            vec![dim("B"), DeclDim::Value(4), dim("H"), dim("W")],
        ),
    )
}

/// x [B, 4, H, W] -> a = Conv (k1 x k1, `mid` filters, bias) -> Relu(a) * Sigmoid(a) -> Conv
/// (k2 x k2, 4 filters) -> y. A 1x1 kernel has no padding, a 3x3 one padding 1.
fn conv_model(k1: u64, k2: u64, mid: u64) -> Model {
    let mut g = Graph::default();
    let x = image_input(&mut g);
    let w1 = g.add_initializer(weights("w1", &[mid, 4, k1, k1]));
    let b1 = g.add_initializer(weights("b1", &[mid]));
    let w2 = g.add_initializer(weights("w2", &[4, mid, k2, k2]));
    let attrs = |k: u64| {
        let p = (k / 2) as i64;
        vec![ints("pads", &[p, p, p, p])]
    };
    let (_, a) = g.add_node(
        "c1",
        "Conv",
        &[Some(x), Some(w1), Some(b1)],
        &["a"],
        attrs(k1),
    );
    let (_, r) = g.add_node("relu", "Relu", &[Some(a[0])], &["r"], vec![]);
    let (_, s) = g.add_node("sig", "Sigmoid", &[Some(a[0])], &["s"], vec![]);
    let (_, m) = g.add_node("gate", "Mul", &[Some(r[0]), Some(s[0])], &["m"], vec![]);
    let (_, y) = g.add_node("c2", "Conv", &[Some(m[0]), Some(w2)], &["y"], attrs(k2));
    g.outputs.push(y[0]);
    Model {
        graph: g,
        ..Model::default()
    }
}

/// An inverted residual block as MobileNet's: x [B, 4, H, W] -> 1x1 Conv to `mid` channels -> Relu
/// -> depthwise 3x3 Conv (`mid` groups, stride 2, padding 1) -> Relu -> 1x1 Conv to 4 -> y. The
/// depthwise convolution mixes channels and rows; every node passes the batch.
fn inverted_residual(mid: u64) -> Model {
    let mut g = Graph::default();
    let x = image_input(&mut g);
    let w1 = g.add_initializer(weights("w1", &[mid, 4, 1, 1]));
    let wd = g.add_initializer(weights("wd", &[mid, 1, 3, 3]));
    let w3 = g.add_initializer(weights("w3", &[4, mid, 1, 1]));
    let (_, a) = g.add_node("expand", "Conv", &[Some(x), Some(w1)], &["a"], vec![]);
    let (_, r) = g.add_node("relu1", "Relu", &[Some(a[0])], &["r"], vec![]);
    let depthwise = vec![
        ints("pads", &[1, 1, 1, 1]),
        ints("strides", &[2, 2]),
        Attribute {
            name: "group".into(),
            value: AttrValue::Int(mid as i64),
            doc: String::new(),
        },
    ];
    let (_, d) = g.add_node("dw", "Conv", &[Some(r[0]), Some(wd)], &["d"], depthwise);
    let (_, r2) = g.add_node("relu2", "Relu", &[Some(d[0])], &["r2"], vec![]);
    let (_, y) = g.add_node("project", "Conv", &[Some(r2[0]), Some(w3)], &["y"], vec![]);
    g.outputs.push(y[0]);
    Model {
        graph: g,
        ..Model::default()
    }
}

/// A step as "NODES nodes FIRST..LAST, extent E".
pub(crate) fn describe(s: &memplan_plan::chunk::ChunkStep) -> String {
    format!(
        "{} nodes {}..{}, extent {}",
        s.nodes, s.first, s.last, s.extent
    )
}

pub(crate) fn input(shape: &[usize]) -> BTreeMap<String, Tensor> {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 31 % 113) as f32) / 40.0 - 1.4)
        .collect();
    BTreeMap::from([("x".to_string(), Tensor::from_vec(shape, &v, None).unwrap())])
}

/// Chunks `model` as low as it goes with each chunk count, runs the result plain and planned:
/// the output bits of the original run, measured = planned. Returns the chunked steps' texts.
pub(crate) fn check(model: &Model, dims: &[(&str, i64)], shape: &[usize]) -> Vec<String> {
    let dims: BTreeMap<String, i64> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let facts = memplan_ir::infer_model_for(model, &dims).unwrap();
    let want = run(&model.graph, &facts, input(shape), &RunOptions::default()).unwrap();
    let mut steps = Vec::new();
    for chunks in [2, 3, 4, 8] {
        let opts = ChunkOptions {
            chunk_counts: vec![chunks],
            ..ChunkOptions::default()
        };
        let c = chunk_to_budget(model, &dims, &opts).unwrap();
        let f = memplan_ir::infer_model_for(&c.model, &dims).unwrap();
        let plain = run(&c.model.graph, &f, input(shape), &RunOptions::default()).unwrap();
        let out = memplan_plan::optimize(&c.model.graph, &f, &dims, &Default::default()).unwrap();
        let planned = run_planned(&c.model.graph, &f, input(shape), &out.plan, 18).unwrap();
        for got in [&plain, &planned] {
            assert_eq!(
                got.outputs[0].1.bytes(),
                want.outputs[0].1.bytes(),
                "{chunks} chunks: {:?}",
                c.steps.iter().map(describe).collect::<Vec<_>>()
            );
        }
        assert_eq!(planned.peak_bytes, out.report.peak_bytes_after);
        steps.extend(c.steps.iter().map(describe));
    }
    steps
}

/// Whether some step split an axis of extent `e`.
pub(crate) fn split_at(steps: &[String], e: i64) -> bool {
    steps.iter().any(|s| s.ends_with(&format!("extent {e}")))
}

#[test]
fn pointwise_convs_chunk_along_rows_bit_identical() {
    let steps = check(
        &conv_model(1, 1, 32),
        &[("B", 1), ("H", 24), ("W", 16)],
        &[1, 4, 24, 16],
    );
    assert!(split_at(&steps, 24), "{steps:?}");
}

#[test]
fn convs_chunk_along_the_batch_bit_identical() {
    let steps = check(
        &conv_model(3, 3, 4),
        &[("B", 12), ("H", 8), ("W", 8)],
        &[12, 4, 8, 8],
    );
    assert!(split_at(&steps, 12), "{steps:?}");
}

/// The batch is the smallest axis of both 3x3 convolutions' outputs, below their channels, rows and
/// columns; the rows and columns grow no region (the kernel mixes them), so the batch is still one
/// of the axes a seed is tried on, and the whole model chunks along it.
#[test]
fn the_batch_is_tried_when_it_is_smaller_than_the_axes_a_conv_mixes() {
    let steps = check(
        &conv_model(3, 3, 64),
        &[("B", 3), ("H", 12), ("W", 12)],
        &[3, 4, 12, 12],
    );
    assert!(split_at(&steps, 3), "{steps:?}");
}

#[test]
fn a_conv_chunks_over_its_filters_bit_identical() {
    // One image, a 3x3 kernel first: its filters (with the gate after them) can be cut, and the
    // pointwise Conv after them reads every channel.
    let steps = check(
        &conv_model(3, 1, 64),
        &[("B", 1), ("H", 16), ("W", 16)],
        &[1, 4, 16, 16],
    );
    assert!(split_at(&steps, 64), "{steps:?}");
}

/// A 3x3 convolution of a large image runs its GEMM over tiles of whole output lines, so its
/// im2col scratch is one tile (`COL_TILE_ELEMS`), not `C * 9 * H * W` elements: the second `Conv`
/// here (32 channels in, 200 x 200) holds 18 lines of 200 columns of 288 rows (4 MiB), where the
/// whole matrix is 44 MiB. The memory rule says the same: the estimate is the measured peak,
/// unplanned and planned, and the planned peak stays below the whole matrix alone.
#[test]
fn a_large_convs_scratch_is_one_tile_and_the_estimate_is_measured() {
    let model = conv_model(3, 3, 32);
    let dims = BTreeMap::from([
        ("B".to_string(), 1i64),
        ("H".to_string(), 200),
        ("W".to_string(), 200),
    ]);
    let shape = [1, 4, 200, 200];
    let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
    let g = &model.graph;
    let c2 = g.node(g.node_ids().find(|&n| g.node(n).name == "c2").unwrap());
    let fact = |v: Option<memplan_ir::graph::ValueId>| v.map(|v| facts.get(v));
    let ins: Vec<_> = c2.inputs.iter().map(|&v| fact(v)).collect();
    let outs: Vec<_> = c2.outputs.iter().map(|&v| fact(v)).collect();
    let rule = memplan_ir::ops::lookup(c2).unwrap().mem.scratch.unwrap();
    let scratch = rule(c2, facts.opset, &ins, &outs).eval_map(&dims).unwrap();
    assert_eq!(scratch, 288 * 18 * 200 * 4);
    let plain = run(&model.graph, &facts, input(&shape), &RunOptions::default()).unwrap();
    let out = memplan_plan::optimize(&model.graph, &facts, &dims, &Default::default()).unwrap();
    assert_eq!(
        plain.peak_bytes, out.report.peak_bytes_before,
        "estimate = measured"
    );
    let planned = run_planned(&model.graph, &facts, input(&shape), &out.plan, 18).unwrap();
    assert_eq!(planned.peak_bytes, out.report.peak_bytes_after);
    assert_eq!(planned.outputs[0].1.bytes(), plain.outputs[0].1.bytes());
    assert!(out.report.peak_bytes_after < 288 * 200 * 200 * 4);
}

/// The peak is the expansion's output, whose channels and rows are larger than its batch; only the
/// batch passes the depthwise convolution, so it is tried too.
#[test]
fn the_batch_is_tried_when_it_is_the_seeds_smallest_axis() {
    let steps = check(
        &inverted_residual(16),
        &[("B", 3), ("H", 12), ("W", 12)],
        &[3, 4, 12, 12],
    );
    assert!(split_at(&steps, 3), "{steps:?}");
}
