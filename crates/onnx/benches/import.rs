//! Bench: import and infer shapes of synthetic graphs of 10k and 100k nodes (goal: 100k under 1 s).
//! `cargo bench -p memplan-onnx --bench import`; prints the median of 5 runs per size.
//!
//! The graph is a transformer-like chain over `x: [B, S, 64]`: per block a MatMul with a weight, an
//! Add, a Relu, a Shape -> Gather -> Concat -> Reshape round trip (symbolic shape arithmetic) and a
//! Softmax, so inference exercises folding as well as plain elementwise rules.

use std::time::Instant;

use bytes::Bytes;
use memplan_onnx::proto::{
    tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use prost::Message;

fn node(op: &str, inputs: Vec<String>, output: String, attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        name: Some(format!("{op}_{output}")),
        op_type: Some(op.into()),
        input: inputs,
        output: vec![output],
        attribute: attrs,
        ..Default::default()
    }
}

fn int_tensor(name: &str, dims: Vec<i64>, vals: Vec<i64>) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        data_type: Some(7),
        dims,
        int64_data: vals,
        ..Default::default()
    }
}

fn synthetic(nodes: usize) -> ModelProto {
    let dim = |d: &str| tensor_shape_proto::Dimension {
        denotation: None,
        value: Some(match d.parse::<i64>() {
            Ok(v) => tensor_shape_proto::dimension::Value::DimValue(v),
            Err(_) => tensor_shape_proto::dimension::Value::DimParam(d.into()),
        }),
    };
    let ty = TypeProto {
        denotation: None,
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(1),
            shape: Some(TensorShapeProto {
                dim: vec![dim("B"), dim("S"), dim("64")],
            }),
        })),
    };
    let mut g = GraphProto {
        name: Some("synthetic".into()),
        input: vec![ValueInfoProto {
            name: Some("x".into()),
            r#type: Some(ty.clone()),
            ..Default::default()
        }],
        ..Default::default()
    };
    g.initializer.push(TensorProto {
        name: Some("w".into()),
        data_type: Some(1),
        dims: vec![64, 64],
        raw_data: Some(Bytes::from(vec![0u8; 64 * 64 * 4])),
        ..Default::default()
    });
    g.initializer.push(int_tensor("idx01", vec![2], vec![0, 1]));
    g.initializer.push(int_tensor("c64", vec![1], vec![64]));
    let mut cur = "x".to_string();
    let mut i = 0usize;
    while g.node.len() + 8 <= nodes {
        let v = |k: &str| format!("{k}{i}");
        g.node.push(node(
            "MatMul",
            vec![cur.clone(), "w".into()],
            v("mm"),
            vec![],
        ));
        g.node
            .push(node("Add", vec![v("mm"), cur.clone()], v("add"), vec![]));
        g.node.push(node("Relu", vec![v("add")], v("relu"), vec![]));
        g.node
            .push(node("Shape", vec![v("relu")], v("shape"), vec![]));
        g.node.push(node(
            "Gather",
            vec![v("shape"), "idx01".into()],
            v("bs"),
            vec![],
        ));
        g.node.push(node(
            "Concat",
            vec![v("bs"), "c64".into()],
            v("newshape"),
            vec![AttributeProto {
                name: Some("axis".into()),
                r#type: Some(2),
                i: Some(0),
                ..Default::default()
            }],
        ));
        g.node.push(node(
            "Reshape",
            vec![v("relu"), v("newshape")],
            v("resh"),
            vec![],
        ));
        g.node
            .push(node("Softmax", vec![v("resh")], v("sm"), vec![]));
        cur = v("sm");
        i += 1;
    }
    g.output.push(ValueInfoProto {
        name: Some(cur),
        r#type: Some(ty),
        ..Default::default()
    });
    ModelProto {
        ir_version: Some(10),
        opset_import: vec![OperatorSetIdProto {
            domain: None,
            version: Some(18),
        }],
        graph: Some(g),
        ..Default::default()
    }
}

fn main() {
    for n in [10_000usize, 100_000] {
        let bytes = Bytes::from(synthetic(n).encode_to_vec());
        let mut times = Vec::new();
        let mut count = 0;
        for _ in 0..5 {
            let t = Instant::now();
            let model =
                memplan_onnx::import_bytes(bytes.clone(), std::path::Path::new("synthetic"))
                    .unwrap();
            let facts = memplan_ir::infer_model(&model).unwrap();
            times.push(t.elapsed().as_secs_f64());
            assert!(facts.skipped.is_empty());
            count = model.graph.nodes.len();
        }
        times.sort_by(|a, b| a.total_cmp(b));
        println!(
            "import+infer {count:>6} nodes: median {:.3} s (min {:.3}, max {:.3})",
            times[2], times[0], times[4]
        );
    }
}
