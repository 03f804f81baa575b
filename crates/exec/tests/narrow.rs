//! Value sets and narrowing: the sets are the exact bits the kernels compute (`-0` included), a
//! tensor that may hold anything has none, and a model whose additive mask is live across its
//! layers is fitted by narrowing that mask: the graph-order peak drops by the bytes saved, the
//! planned run is bit-identical to the plain run, and the measured peak is the planned one.

use std::collections::BTreeMap;

use memplan_exec::{run, run_planned, RunOptions, Tensor};
use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType, Graph, Model, ValueId};
use memplan_ir::value_set::value_sets;
use memplan_ir::{DataType, TensorData};
use memplan_plan::{fit_budget, FitOptions};

fn attr_int(name: &str, v: i64) -> Attribute {
    Attribute {
        name: name.into(),
        value: AttrValue::Int(v),
        doc: String::new(),
    }
}

fn scalar(g: &mut Graph, name: &str, v: f32) -> ValueId {
    g.add_initializer(TensorData::from_f32(name, vec![], &[v]))
}

fn op(g: &mut Graph, op: &str, ins: &[ValueId], out: &str, attrs: Vec<Attribute>) -> ValueId {
    let ins: Vec<Option<ValueId>> = ins.iter().map(|&v| Some(v)).collect();
    g.add_node(format!("{out}_node"), op, &ins, &[out], attrs).1[0]
}

fn bits(values: &[f64]) -> Vec<u64> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// `m` bool `[N, N]` made into an additive mask `(Cast(m) - 1) * 1e9`, as exporters write it.
fn additive_mask(g: &mut Graph) -> (ValueId, ValueId) {
    let n = || DeclDim::Param("N".into());
    let m = g.add_input("m", DeclType::tensor(DataType::Bool, vec![n(), n()]));
    let f = op(g, "Cast", &[m], "maskf", vec![attr_int("to", 1)]);
    let one = scalar(g, "one", 1.0);
    let big = scalar(g, "big", 1e9);
    let d = op(g, "Sub", &[f, one], "maskd", vec![]);
    (f, op(g, "Mul", &[d, big], "bias", vec![]))
}

#[test]
fn value_sets_are_the_kernels_bits() {
    memplan_exec::install_const_folder();
    let mut g = Graph::default();
    let (f, bias) = additive_mask(&mut g);
    let x = g.add_input(
        "x",
        DeclType::tensor(DataType::F32, vec![DeclDim::Param("N".into())]),
    );
    let min = scalar(&mut g, "min", f32::MIN);
    let one = scalar(&mut g, "one2", 1.0);
    let inv = op(&mut g, "Sub", &[one, f], "inv", vec![]);
    let add_min = op(&mut g, "Mul", &[inv, min], "addmin", vec![]);
    let t = op(&mut g, "Transpose", &[add_min], "t", vec![]);
    let two = op(&mut g, "Add", &[f, f], "two", vec![]);
    let anything = op(&mut g, "Add", &[x, f], "anything", vec![]);
    g.outputs = vec![bias, t, two, anything];
    let facts = memplan_ir::infer_graph(&g, 18).unwrap();
    let sets = value_sets(&g, &facts);
    let set = |v: ValueId| sets[v.index()].as_ref().map(|s| bits(&s.values));
    assert_eq!(set(f), Some(bits(&[0.0, 1.0])));
    // (1 - 1) * min is -0, not 0: the set holds what the kernel computes.
    let mut expect = bits(&[-0.0, f64::from(f32::MIN)]);
    expect.sort();
    assert_eq!(set(add_min), Some(expect.clone()));
    assert_eq!(set(t), Some(expect), "a transpose copies elements");
    assert_eq!(set(two), Some(bits(&[0.0, 1.0, 2.0])));
    assert_eq!(set(bias), Some(bits(&[0.0, -1e9])));
    assert_eq!(set(anything), None, "a float input may hold anything");
}

/// Three attention-like layers reading the same `[N, N]` bias: `s = h h^T`, `p = Softmax(s + bias)`,
/// `h = (p^3 + p^2 + s) h`.
fn layered_model() -> Model {
    let mut g = Graph::default();
    let (_, bias) = additive_mask(&mut g);
    let mut h = g.add_input(
        "x",
        DeclType::tensor(
            DataType::F32,
            vec![DeclDim::Param("N".into()), DeclDim::Value(4)],
        ),
    );
    for l in 0..3 {
        let ht = op(&mut g, "Transpose", &[h], &format!("ht{l}"), vec![]);
        let s = op(&mut g, "MatMul", &[h, ht], &format!("s{l}"), vec![]);
        let sb = op(&mut g, "Add", &[s, bias], &format!("sb{l}"), vec![]);
        let p = op(
            &mut g,
            "Softmax",
            &[sb],
            &format!("p{l}"),
            vec![attr_int("axis", -1)],
        );
        // The layer's peak (s, p, q, r and the bias live) is away from the bias's reader.
        let q = op(&mut g, "Mul", &[p, p], &format!("q{l}"), vec![]);
        let r = op(&mut g, "Mul", &[q, p], &format!("r{l}"), vec![]);
        let u = op(&mut g, "Add", &[r, q], &format!("u{l}"), vec![]);
        let u = op(&mut g, "Add", &[u, s], &format!("v{l}"), vec![]);
        h = op(&mut g, "MatMul", &[u, h], &format!("h{l}"), vec![]);
    }
    g.outputs = vec![h];
    Model {
        graph: g,
        ..Model::default()
    }
}

#[test]
fn a_mask_live_across_layers_is_narrowed_exactly() {
    memplan_exec::install_const_folder();
    let model = layered_model();
    let facts = memplan_ir::infer_model(&model).unwrap();
    let n = 64usize;
    let dims = BTreeMap::from([("N".to_string(), n as i64)]);
    let inputs = || {
        let m: Vec<u8> = (0..n * n)
            .map(|i| u8::from((i % n) <= i / n || i % 7 == 0))
            .collect();
        let x: Vec<f32> = (0..n * 4)
            .map(|i| ((i * 37) % 23) as f32 / 11.0 - 1.0)
            .collect();
        BTreeMap::from([
            (
                "m".to_string(),
                Tensor::from_bytes(DataType::Bool, &[n, n], m.into(), None).unwrap(),
            ),
            (
                "x".to_string(),
                Tensor::from_vec(&[n, 4], &x, None).unwrap(),
            ),
        ])
    };
    let plain = run(&model.graph, &facts, inputs(), &RunOptions::default()).unwrap();
    let budget = plain.peak_bytes - 1;
    let fit = fit_budget(&model, &facts, &dims, &FitOptions::new(budget)).unwrap();
    let report = fit.narrowing.as_ref().expect("the bias is narrowed");
    assert_eq!(report.peak_bytes_before, plain.peak_bytes);
    let step = &report.steps[0];
    assert_eq!(step.value, "bias");
    assert_eq!(
        (step.bytes, step.narrow_bytes),
        ((4 * n * n) as u64, (n * n) as u64)
    );
    assert_eq!(step.readers, 3);
    // The bytes saved, less the two f32 constants `Where` widens with (resident).
    assert_eq!(step.peak_bytes, plain.peak_bytes - 3 * (n * n) as u64 + 8);
    assert!(
        step.proof[0].starts_with("'bias' in {0, -1"),
        "{:?}",
        step.proof
    );
    let planned = run_planned(
        &fit.model.graph,
        &fit.facts,
        inputs(),
        &fit.outcome.plan,
        18,
    )
    .unwrap();
    assert_eq!(planned.peak_bytes, fit.outcome.report.peak_bytes_after);
    for ((a, ta), (b, tb)) in plain.outputs.iter().zip(&planned.outputs) {
        assert_eq!(a, b);
        assert_eq!(ta.bytes(), tb.bytes(), "output '{a}' differs");
    }
    // Without narrowing, the plan fits no better.
    let opts = FitOptions {
        narrow: None,
        ..FitOptions::new(budget)
    };
    let without = fit_budget(&model, &facts, &dims, &opts).unwrap();
    assert!(without.narrowing.is_none());
}
