//! Control flow (`If`, `Loop`, `Scan`) on small hand-built graphs: outputs checked by hand, and
//! the simulator's peak (bodies included) equal to the executor's measured peak, byte for byte,
//! at several sizes and trip counts, data-dependent symbols bound to what the run did.

use std::collections::BTreeMap;

use memplan_exec::{run, RunOptions, Tensor};
use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType, Graph, ValueKind};
use memplan_ir::{DataType, TensorData, ValueId};

fn attr(name: &str, value: AttrValue) -> Attribute {
    Attribute {
        name: name.into(),
        value,
        doc: String::new(),
    }
}

fn outer(g: &mut Graph, name: &str) -> ValueId {
    g.add_value(name, ValueKind::Outer)
}

fn f32s(shape: &[usize], f: impl Fn(usize) -> f32) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(f).collect();
    Tensor::from_vec::<f32>(shape, &v, None).unwrap()
}

/// Runs `g` and checks estimate == measured at the run's dims plus `extra`.
fn check_exact(
    g: &Graph,
    inputs: BTreeMap<String, Tensor>,
    extra: &[(&str, i64)],
) -> Vec<(String, Tensor)> {
    let facts = memplan_ir::infer_graph(g, 18).unwrap();
    assert!(facts.skipped.is_empty(), "{:?}", facts.skipped);
    let r = run(g, &facts, inputs, &RunOptions::default()).unwrap();
    let mut dims = r.dims.clone();
    for (k, v) in extra {
        dims.insert(k.to_string(), *v);
    }
    let t = memplan_sim::Timeline::build(g, &facts, &facts.order).unwrap();
    let est = memplan_sim::peak::concrete_peak(&t, &dims).unwrap();
    assert_eq!(
        est.peak_bytes, r.peak_bytes,
        "estimate vs measured at {dims:?}"
    );
    r.outputs
}

/// `Loop(M, cond, acc)`: body `t = acc * w` (w from the outer scope), `acc' = t + acc`, scan
/// output `-t`, condition passed through (a copy each iteration). `acc` is [N, 4].
fn loop_graph(m_known: Option<i64>) -> Graph {
    let mut body = Graph {
        name: "body".into(),
        ..Graph::default()
    };
    let _i = body.add_input("i", DeclType::tensor(DataType::I64, vec![]));
    let c = body.add_input("c", DeclType::tensor(DataType::Bool, vec![]));
    let acc = body.add_input(
        "acc_in",
        DeclType::tensor(
            DataType::F32,
            vec![DeclDim::Param("N".into()), DeclDim::Value(4)],
        ),
    );
    let w = outer(&mut body, "w");
    let (_, t) = body.add_node("mul", "Mul", &[Some(acc), Some(w)], &["t"], vec![]);
    let (_, a2) = body.add_node("add", "Add", &[Some(t[0]), Some(acc)], &["acc_out"], vec![]);
    let (_, ng) = body.add_node("neg", "Neg", &[Some(t[0])], &["scan_out"], vec![]);
    let (_, co) = body.add_node("cid", "Identity", &[Some(c)], &["c_out"], vec![]);
    body.outputs.extend([co[0], a2[0], ng[0]]);

    let mut g = Graph::default();
    let x = g.add_input(
        "x",
        DeclType::tensor(
            DataType::F32,
            vec![DeclDim::Param("N".into()), DeclDim::Value(4)],
        ),
    );
    let m = match m_known {
        Some(m) => g.add_initializer(TensorData::from_i64("M", vec![], &[m])),
        None => g.add_input("M", DeclType::tensor(DataType::I64, vec![])),
    };
    let (_, w) = g.add_node("w", "Sigmoid", &[Some(x)], &["w"], vec![]);
    let (_, y) = g.add_node(
        "loop",
        "Loop",
        &[Some(m), None, Some(x)],
        &["acc", "scans"],
        vec![attr("body", AttrValue::Graph(Box::new(body)))],
    );
    let _ = w;
    g.outputs.extend([y[0], y[1]]);
    g
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn loop_with_known_trip_count_is_exact() {
    for (n, m) in [(3usize, 4i64), (5, 1), (2, 0), (7, 2)] {
        let g = loop_graph(Some(m));
        let x = f32s(&[n, 4], |i| (i as f32 * 0.3).sin());
        let xs = x.to_f32_vec().unwrap();
        let outs = check_exact(&g, BTreeMap::from([("x".to_string(), x)]), &[]);
        // acc_{k+1} = acc_k * (1 + w), scan_k = -acc_k * w.
        let acc = outs[0].1.to_f32_vec().unwrap();
        let scans = &outs[1].1;
        assert_eq!(scans.shape, [m as usize, n, 4]);
        let sv = scans.to_f32_vec().unwrap();
        for e in 0..n * 4 {
            let w = sigmoid(xs[e]);
            let mut a = xs[e];
            for k in 0..m as usize {
                let want = -(a * w);
                assert!((sv[k * n * 4 + e] - want).abs() < 1e-5);
                a = a * w + a;
            }
            assert!((acc[e] - a).abs() < 1e-4, "{} vs {a}", acc[e]);
        }
    }
}

#[test]
fn loop_with_data_dependent_trip_count_is_exact_once_bound() {
    let g = loop_graph(None);
    let facts = memplan_ir::infer_graph(&g, 18).unwrap();
    let sym = facts.symbols.introduced[0].name.clone();
    assert!(sym.starts_with("loop_trips"), "{sym}");
    // Symbols are at least 1 (the simplifier assumes it), so a symbolic trip count is exact from
    // one iteration on; a constant trip count of 0 is covered above.
    for (n, m) in [(3usize, 3i64), (4, 1), (2, 5)] {
        let x = f32s(&[n, 4], |i| i as f32 * 0.1);
        let mt = Tensor::from_vec::<i64>(&[], &[m], None).unwrap();
        let ins = BTreeMap::from([("x".to_string(), x), ("M".to_string(), mt)]);
        let outs = check_exact(&g, ins, &[(sym.as_str(), m)]);
        assert_eq!(outs[1].1.shape, [m as usize, n, 4]);
    }
}

/// `Scan` over xs [T, 3] with state s [3]: `s' = s + x`, scan output `s' * s'`, reversed output
/// direction on the second graph.
fn scan_graph(reverse_out: bool) -> Graph {
    let mut body = Graph {
        name: "scan_body".into(),
        ..Graph::default()
    };
    let s = body.add_input(
        "s",
        DeclType::tensor(DataType::F32, vec![DeclDim::Value(3)]),
    );
    let x = body.add_input(
        "xe",
        DeclType::tensor(DataType::F32, vec![DeclDim::Value(3)]),
    );
    let (_, s2) = body.add_node("add", "Add", &[Some(s), Some(x)], &["s_out"], vec![]);
    let (_, y) = body.add_node("sq", "Mul", &[Some(s2[0]), Some(s2[0])], &["y"], vec![]);
    body.outputs.extend([s2[0], y[0]]);
    let mut g = Graph::default();
    let s0 = g.add_input(
        "s0",
        DeclType::tensor(DataType::F32, vec![DeclDim::Value(3)]),
    );
    let xs = g.add_input(
        "xs",
        DeclType::tensor(
            DataType::F32,
            vec![DeclDim::Param("T".into()), DeclDim::Value(3)],
        ),
    );
    let mut attrs = vec![
        attr("body", AttrValue::Graph(Box::new(body))),
        attr("num_scan_inputs", AttrValue::Int(1)),
    ];
    if reverse_out {
        attrs.push(attr("scan_output_directions", AttrValue::Ints(vec![1])));
    }
    let (_, o) = g.add_node(
        "scan",
        "Scan",
        &[Some(s0), Some(xs)],
        &["s_end", "ys"],
        attrs,
    );
    g.outputs.extend([o[0], o[1]]);
    g
}

#[test]
fn scan_is_exact_and_stacks_its_outputs() {
    for rev in [false, true] {
        for t in [1usize, 2, 4] {
            let g = scan_graph(rev);
            let ins = BTreeMap::from([
                ("s0".to_string(), f32s(&[3], |i| i as f32)),
                ("xs".to_string(), f32s(&[t, 3], |i| 1.0 + i as f32)),
            ]);
            let outs = check_exact(&g, ins, &[]);
            assert_eq!(outs[1].1.shape, [t, 3]);
            let mut s = [0.0f32, 1.0, 2.0];
            let ys = outs[1].1.to_f32_vec().unwrap();
            for k in 0..t {
                for e in 0..3 {
                    s[e] += 1.0 + (k * 3 + e) as f32;
                }
                let row = if rev { t - 1 - k } else { k };
                for e in 0..3 {
                    assert_eq!(ys[row * 3 + e], s[e] * s[e]);
                }
            }
            assert_eq!(outs[0].1.to_f32_vec().unwrap(), s);
        }
    }
}

/// `If(c)`: then `Relu(x)` [N], else `Concat(x, x)` [2N] plus a body initializer; `x` from outside.
fn if_graph(cond: Option<bool>) -> Graph {
    let mut then_g = Graph {
        name: "then".into(),
        ..Graph::default()
    };
    let x1 = outer(&mut then_g, "x");
    let (_, r) = then_g.add_node("relu", "Relu", &[Some(x1)], &["r"], vec![]);
    then_g.outputs.push(r[0]);
    let mut else_g = Graph {
        name: "else".into(),
        ..Graph::default()
    };
    let x2 = outer(&mut else_g, "x");
    let k = else_g.add_initializer(TensorData::from_f32("k", vec![1], &[2.0]));
    let (_, cc) = else_g.add_node(
        "cat",
        "Concat",
        &[Some(x2), Some(x2)],
        &["cc"],
        vec![attr("axis", AttrValue::Int(0))],
    );
    let (_, e) = else_g.add_node("scale", "Mul", &[Some(cc[0]), Some(k)], &["e"], vec![]);
    else_g.outputs.push(e[0]);
    let mut g = Graph::default();
    let x = g.add_input(
        "x",
        DeclType::tensor(DataType::F32, vec![DeclDim::Param("N".into())]),
    );
    let c = match cond {
        Some(b) => {
            let raw = vec![u8::from(b)];
            let t = TensorData::from_raw("c", DataType::Bool, vec![], raw.into()).unwrap();
            g.add_initializer(t)
        }
        None => g.add_input("c", DeclType::tensor(DataType::Bool, vec![])),
    };
    let (_, o) = g.add_node(
        "if",
        "If",
        &[Some(c)],
        &["out"],
        vec![
            attr("then_branch", AttrValue::Graph(Box::new(then_g))),
            attr("else_branch", AttrValue::Graph(Box::new(else_g))),
        ],
    );
    let (_, z) = g.add_node("neg", "Neg", &[Some(o[0])], &["z"], vec![]);
    g.outputs.push(z[0]);
    let _ = x;
    g
}

#[test]
fn if_with_a_runtime_condition_is_exact_once_the_branch_is_bound() {
    let g = if_graph(None);
    let facts = memplan_ir::infer_graph(&g, 18).unwrap();
    let names: Vec<&str> = facts
        .symbols
        .introduced
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let (dim, cond) = (names[0].to_string(), names[1].to_string());
    for n in [1usize, 5] {
        for b in [true, false] {
            let x = f32s(&[n], |i| i as f32 - 2.0);
            let mut c = Tensor::from_vec::<u8>(&[], &[u8::from(b)], None).unwrap();
            c.dtype = DataType::Bool;
            let ins = BTreeMap::from([("x".to_string(), x), ("c".to_string(), c)]);
            let len = if b { n } else { 2 * n };
            let outs = check_exact(&g, ins, &[(&dim, len as i64), (&cond, i64::from(b))]);
            let z = outs[0].1.to_f32_vec().unwrap();
            assert_eq!(z.len(), len);
            for (i, v) in z.iter().enumerate() {
                let xi = (i % n) as f32 - 2.0;
                let want = if b { -xi.max(0.0) } else { -2.0 * xi };
                assert_eq!(*v, want);
            }
        }
    }
}

#[test]
fn if_with_a_known_condition_takes_that_branch() {
    for b in [true, false] {
        let g = if_graph(Some(b));
        let facts = memplan_ir::infer_graph(&g, 18).unwrap();
        assert!(facts.symbols.introduced.is_empty());
        let x = f32s(&[4], |i| i as f32 - 2.0);
        let outs = check_exact(&g, BTreeMap::from([("x".to_string(), x)]), &[]);
        assert_eq!(outs[0].1.shape, [if b { 4 } else { 8 }]);
    }
}
