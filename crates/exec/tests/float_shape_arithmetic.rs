//! Shape arithmetic done in floats on a symbolic size (`Cast(h, float)`, divided by a constant,
//! `Ceil`/`Floor`, multiplied back, cast to an integer: `math.ceil(h / p) * p` as TorchScript
//! exports it). Inference keeps it symbolic (`ir::infer::Ratio`); here every inferred expression
//! is checked against what the executor's float kernels compute, for every size 1..=300.

use std::collections::BTreeMap;

use memplan_exec::{run, RunOptions, Tensor};
use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType, Graph};
use memplan_ir::infer::Known;
use memplan_ir::{DataType, TensorData, ValueId};

fn cast(g: &mut Graph, name: &str, x: ValueId, to: DataType) -> ValueId {
    let a = Attribute {
        name: "to".into(),
        value: AttrValue::Int(i64::from(to.onnx_code())),
        doc: String::new(),
    };
    g.add_node(name, "Cast", &[Some(x)], &[name], vec![a]).1[0]
}

fn op(g: &mut Graph, name: &str, op: &str, ins: &[ValueId]) -> ValueId {
    let ins: Vec<Option<ValueId>> = ins.iter().map(|&v| Some(v)).collect();
    g.add_node(name, op, &ins, &[name], vec![]).1[0]
}

/// One output per (float type, divisor, rounding): `Cast(Mul(R(Div(Cast(h), p)), p), int64)`,
/// and with `Floor` alone `Cast(Floor(Div(Cast(h), p)), int64)`.
fn graph() -> Graph {
    let mut g = Graph::default();
    let x = g.add_input(
        "x",
        DeclType::tensor(DataType::F32, vec![DeclDim::Param("N".into())]),
    );
    let s = op(&mut g, "s", "Shape", &[x]);
    let zero = g.add_initializer(TensorData::from_i64("zero", vec![], &[0]));
    let h = g
        .add_node("h", "Gather", &[Some(s), Some(zero)], &["h"], vec![])
        .1[0];
    for (ft, tag) in [(DataType::F32, "f"), (DataType::F64, "d")] {
        let hf = cast(&mut g, &format!("h_{tag}"), h, ft);
        for p in [2.0f64, 3.0, 7.0, 0.5, 12.0] {
            let pname = format!("p{p}_{tag}");
            let pc = match ft {
                DataType::F32 => TensorData::from_f32(&pname, vec![], &[p as f32]),
                _ => TensorData::from_raw(
                    pname.clone(),
                    DataType::F64,
                    vec![],
                    bytes::Bytes::copy_from_slice(&p.to_le_bytes()),
                )
                .unwrap(),
            };
            let pv = g.add_initializer(pc);
            let q = op(&mut g, &format!("q{p}_{tag}"), "Div", &[hf, pv]);
            for r in ["Ceil", "Floor"] {
                let rq = op(&mut g, &format!("{r}{p}_{tag}"), r, &[q]);
                let m = op(&mut g, &format!("m{r}{p}_{tag}"), "Mul", &[rq, pv]);
                let out = cast(&mut g, &format!("out_{r}{p}_{tag}"), m, DataType::I64);
                g.outputs.push(out);
            }
            let t = cast(&mut g, &format!("out_trunc{p}_{tag}"), q, DataType::I64);
            g.outputs.push(t);
        }
    }
    g
}

#[test]
fn float_shape_arithmetic_infers_what_the_kernels_compute() {
    memplan_exec::install_const_folder();
    let g = graph();
    let facts = memplan_ir::infer_graph(&g, 18).unwrap();
    assert!(facts.skipped.is_empty(), "{:?}", facts.skipped);
    let exprs: Vec<_> = g
        .outputs
        .iter()
        .map(|&o| match &facts.get(o).value {
            Some(k @ Known::Int(_)) => k.as_exprs().unwrap()[0].clone(),
            other => panic!("{}: not folded: {other:?}", g.value(o).name),
        })
        .collect();
    for n in 1..=300usize {
        let x = Tensor::from_vec::<f32>(&[n], &vec![0.0; n], None).unwrap();
        let r = run(
            &g,
            &facts,
            BTreeMap::from([("x".to_string(), x)]),
            &RunOptions::default(),
        )
        .unwrap();
        let dims = BTreeMap::from([("N".to_string(), n as i64)]);
        for ((name, t), e) in r.outputs.iter().zip(&exprs) {
            let got = t.data::<i64>().unwrap()[0];
            assert_eq!(e.eval_map(&dims).unwrap(), got, "{name} at N={n}: {e}");
        }
    }
}

/// Float arithmetic with a symbolic divisor (`floor(h * (64 / w))`, torchvision's detection
/// resize) has no exact formula: inference leaves the node it sizes without facts, for want of
/// contents, and `infer_model_at` gives the facts at a point, which equal what the run makes.
#[test]
fn shape_arithmetic_without_a_formula_is_inferred_at_a_point() {
    memplan_exec::install_const_folder();
    let mut g = Graph::default();
    let x = g.add_input(
        "x",
        DeclType::tensor(
            DataType::F32,
            vec![DeclDim::Param("H".into()), DeclDim::Param("W".into())],
        ),
    );
    let s = op(&mut g, "s", "Shape", &[x]);
    let sf = cast(&mut g, "sf", s, DataType::F32);
    let (i0, i1) = (
        g.add_initializer(TensorData::from_i64("i0", vec![], &[0])),
        g.add_initializer(TensorData::from_i64("i1", vec![], &[1])),
    );
    let hf = g
        .add_node("hf", "Gather", &[Some(sf), Some(i0)], &["hf"], vec![])
        .1[0];
    let wf = g
        .add_node("wf", "Gather", &[Some(sf), Some(i1)], &["wf"], vec![])
        .1[0];
    let c64 = g.add_initializer(TensorData::from_f32("c64", vec![], &[64.0]));
    let scale = op(&mut g, "scale", "Div", &[c64, wf]);
    let size = op(&mut g, "size", "Mul", &[hf, scale]);
    let fl = op(&mut g, "fl", "Floor", &[size]);
    let n = cast(&mut g, "n", fl, DataType::I64);
    let axes = g.add_initializer(TensorData::from_i64("axes", vec![1], &[0]));
    let n1 = op(&mut g, "n1", "Unsqueeze", &[n, axes]);
    let y = op(&mut g, "y", "ConstantOfShape", &[n1]);
    g.outputs.push(y);
    let model = memplan_ir::Model {
        graph: g,
        ..Default::default()
    };
    let symbolic = memplan_ir::infer_model(&model).unwrap();
    assert!(!symbolic.skipped.is_empty());
    assert!(symbolic.skipped.iter().all(|s| s.unknown_input));
    let h_only = BTreeMap::from([("H".to_string(), 5)]);
    assert!(!memplan_ir::wants_point(&symbolic, &h_only));
    for (h, w) in [(5i64, 7i64), (64, 64), (3, 48), (100, 3)] {
        let dims = BTreeMap::from([("H".to_string(), h), ("W".to_string(), w)]);
        assert!(memplan_ir::wants_point(&symbolic, &dims));
        let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
        assert!(facts.skipped.is_empty(), "{:?}", facts.skipped);
        assert_eq!(facts.symbols.declared, ["H", "W"]);
        let shape = facts.get(y).shape.clone().unwrap();
        let x = Tensor::from_vec::<f32>(
            &[h as usize, w as usize],
            &vec![0.0; (h * w) as usize],
            None,
        )
        .unwrap();
        let r = run(
            &model.graph,
            &facts,
            BTreeMap::from([("x".to_string(), x)]),
            &RunOptions::default(),
        )
        .unwrap();
        assert_eq!(shape[0].as_const(), Some(r.outputs[0].1.shape[0] as i64));
        let t = memplan_sim::Timeline::build(&model.graph, &facts, &facts.order).unwrap();
        let est = memplan_sim::peak::concrete_peak(&t, &r.dims).unwrap();
        assert_eq!(est.peak_bytes, r.peak_bytes, "H={h} W={w}");
    }
}
