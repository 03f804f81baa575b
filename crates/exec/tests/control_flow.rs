//! Control flow (`If`, `Loop`, `Scan`) on small hand-built graphs: outputs checked by hand, and
//! the simulator's peak (bodies included) equal to the executor's measured peak, byte for byte,
//! at several sizes and trip counts, data-dependent symbols bound to what the run did.

use std::collections::BTreeMap;

use memplan_exec::{RunOptions, Tensor};
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
    check_exact_at(g, inputs, extra, 18)
}

/// [`check_exact`] at a given default-domain opset.
fn check_exact_at(
    g: &Graph,
    inputs: BTreeMap<String, Tensor>,
    extra: &[(&str, i64)],
    opset: i64,
) -> Vec<(String, Tensor)> {
    let facts = memplan_ir::infer_graph(g, opset).unwrap();
    assert!(facts.skipped.is_empty(), "{:?}", facts.skipped);
    let r = memplan_exec::interp::run_with_opset(g, &facts, inputs, &RunOptions::default(), opset)
        .unwrap();
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

/// Opset-8 `Scan(sequence_lens?, s0 [B, 3], xs [B, T, 3])`: body `s' = s + x`, scan output
/// `s' * s'` (a fresh buffer) and `Identity(s')` (a view, copied when the body ends).
fn scan8_graph(with_lens: bool, reverse: bool) -> Graph {
    let mut body = Graph {
        name: "scan8_body".into(),
        ..Graph::default()
    };
    let vec3 = || DeclType::tensor(DataType::F32, vec![DeclDim::Value(3)]);
    let s = body.add_input("s", vec3());
    let x = body.add_input("xe", vec3());
    let (_, s2) = body.add_node("add", "Add", &[Some(s), Some(x)], &["s_out"], vec![]);
    let (_, y) = body.add_node("sq", "Mul", &[Some(s2[0]), Some(s2[0])], &["y"], vec![]);
    let (_, z) = body.add_node("id", "Identity", &[Some(s2[0])], &["z"], vec![]);
    body.outputs.extend([s2[0], y[0], z[0]]);
    let mut g = Graph::default();
    let dims = |v: Vec<DeclDim>| DeclType::tensor(DataType::F32, v);
    let s0 = g.add_input(
        "s0",
        dims(vec![DeclDim::Param("B".into()), DeclDim::Value(3)]),
    );
    let xs = g.add_input(
        "xs",
        dims(vec![
            DeclDim::Param("B".into()),
            DeclDim::Param("T".into()),
            DeclDim::Value(3),
        ]),
    );
    let lens = with_lens.then(|| {
        g.add_input(
            "lens",
            DeclType::tensor(DataType::I32, vec![DeclDim::Param("B".into())]),
        )
    });
    let mut attrs = vec![
        attr("body", AttrValue::Graph(Box::new(body))),
        attr("num_scan_inputs", AttrValue::Int(1)),
    ];
    if reverse {
        attrs.push(attr("directions", AttrValue::Ints(vec![1])));
    }
    let (_, o) = g.add_node(
        "scan",
        "Scan",
        &[lens, Some(s0), Some(xs)],
        &["s_end", "ys", "zs"],
        attrs,
    );
    g.outputs.extend([o[0], o[1], o[2]]);
    g
}

/// The opset-8 Scan by hand: per batch entry, the running sums over its first `len` steps
/// (reversed when asked), zero past them.
fn scan8_want(
    s0: &[f32],
    xs: &[f32],
    b: usize,
    t: usize,
    lens: &[usize],
    rev: bool,
) -> (Vec<f32>, Vec<f32>) {
    let (mut ends, mut ys) = (vec![0.0f32; b * 3], vec![0.0f32; b * t * 3]);
    for e in 0..b {
        let mut s = [s0[e * 3], s0[e * 3 + 1], s0[e * 3 + 2]];
        let len = lens[e];
        for k in 0..len {
            let step = if rev { len - 1 - k } else { k };
            for c in 0..3 {
                s[c] += xs[(e * t + step) * 3 + c];
                ys[(e * t + k) * 3 + c] = s[c];
            }
        }
        ends[e * 3..e * 3 + 3].copy_from_slice(&s);
    }
    (ends, ys)
}

#[test]
fn batched_scan_of_opset_8_is_exact() {
    for rev in [false, true] {
        for (b, t) in [(1usize, 3usize), (2, 1), (3, 4)] {
            let g = scan8_graph(false, rev);
            let s0 = f32s(&[b, 3], |i| i as f32);
            let xs = f32s(&[b, t, 3], |i| 1.0 + (i as f32) * 0.5);
            let (s0v, xsv) = (s0.to_f32_vec().unwrap(), xs.to_f32_vec().unwrap());
            let ins = BTreeMap::from([("s0".to_string(), s0), ("xs".to_string(), xs)]);
            let outs = check_exact_at(&g, ins, &[], 8);
            let (ends, sums) = scan8_want(&s0v, &xsv, b, t, &vec![t; b], rev);
            assert_eq!(outs[0].1.shape, [b, 3]);
            assert_eq!(outs[0].1.to_f32_vec().unwrap(), ends);
            assert_eq!(outs[1].1.shape, [b, t, 3]);
            let sq: Vec<f32> = sums.iter().map(|v| v * v).collect();
            assert_eq!(outs[1].1.to_f32_vec().unwrap(), sq);
            assert_eq!(outs[2].1.to_f32_vec().unwrap(), sums);
        }
    }
}

#[test]
fn batched_scan_with_sequence_lens_stops_each_entry_at_its_length() {
    let g = scan8_graph(true, true);
    let facts = memplan_ir::infer_graph(&g, 8).unwrap();
    let runs = facts.symbols.introduced[0].name.clone();
    assert!(runs.starts_with("scan_runs"), "{runs}");
    let (b, t) = (3usize, 4usize);
    for lens in [[4usize, 2, 1], [0, 3, 0]] {
        let s0 = f32s(&[b, 3], |i| i as f32);
        let xs = f32s(&[b, t, 3], |i| (i as f32).cos());
        let (s0v, xsv) = (s0.to_f32_vec().unwrap(), xs.to_f32_vec().unwrap());
        let lt: Vec<i32> = lens.iter().map(|&l| l as i32).collect();
        let ins = BTreeMap::from([
            ("s0".to_string(), s0),
            ("xs".to_string(), xs),
            (
                "lens".to_string(),
                Tensor::from_vec::<i32>(&[b], &lt, None).unwrap(),
            ),
        ]);
        let total: usize = lens.iter().sum();
        let outs = check_exact_at(&g, ins, &[(runs.as_str(), total as i64)], 8);
        let (ends, sums) = scan8_want(&s0v, &xsv, b, t, &lens, true);
        assert_eq!(outs[0].1.to_f32_vec().unwrap(), ends);
        assert_eq!(outs[2].1.to_f32_vec().unwrap(), sums);
    }
}

#[test]
fn if_with_a_known_condition_ignores_an_invalid_untaken_branch() {
    // The untaken branch adds x [N] to a [5, 7] initializer: invalid for any N but 1 or 7, and
    // never run. Inference must not reject the graph, and the estimate stays exact.
    for b in [true, false] {
        let mut g = if_graph(Some(b));
        let k = g.nodes.iter().position(|n| n.op == "If").unwrap();
        let name = if b { "else_branch" } else { "then_branch" };
        let bad = g.nodes[k]
            .attrs
            .iter_mut()
            .find(|a| a.name == name)
            .unwrap();
        let AttrValue::Graph(body) = &mut bad.value else {
            panic!("{name} is a graph attribute")
        };
        let x = body.find_value("x").unwrap();
        let w = body.add_initializer(TensorData::from_f32("w57", vec![5, 7], &[1.0; 35]));
        let (_, o) = body.add_node("bad", "Add", &[Some(x), Some(w)], &["bad_out"], vec![]);
        body.outputs = vec![o[0]];
        let x = f32s(&[4], |i| i as f32 - 2.0);
        let facts = memplan_ir::infer_graph(&g, 18).unwrap();
        let cf = facts.control.values().next().unwrap();
        assert!(cf.bodies.iter().any(|f| f.values.is_empty()));
        let outs = check_exact(&g, BTreeMap::from([("x".to_string(), x)]), &[]);
        assert_eq!(outs[0].1.shape, [if b { 4 } else { 8 }]);
    }
}

/// Plans `g` at the dims of a plain run, runs the plan and checks: outputs bit-identical, the
/// measured peak equal to the planned one (arena, resident and the bodies' heap), no misses.
/// Returns the plan's heap bytes.
fn check_planned(g: &Graph, inputs: impl Fn() -> BTreeMap<String, Tensor>) -> u64 {
    check_planned_with(g, inputs, &memplan_plan::Options::default())
}

/// [`check_planned`] with the planner's options `opts`.
fn check_planned_with(
    g: &Graph,
    inputs: impl Fn() -> BTreeMap<String, Tensor>,
    opts: &memplan_plan::Options,
) -> u64 {
    let facts = memplan_ir::infer_graph(g, 18).unwrap();
    let plain = memplan_exec::run(g, &facts, inputs(), &RunOptions::default()).unwrap();
    let out = memplan_plan::optimize(g, &facts, &plain.dims, opts).unwrap();
    let p = out.plan;
    let planned = memplan_exec::run_planned(g, &facts, inputs(), &p, 18).unwrap();
    for ((name, a), (_, b)) in plain.outputs.iter().zip(&planned.outputs) {
        assert_eq!(a.bytes(), b.bytes(), "output {name}");
    }
    let rep = planned.plan.unwrap();
    assert!(rep.misses.is_empty(), "{:?}", rep.misses);
    assert_eq!(
        rep.planned_peak_bytes,
        p.arena_bytes + p.resident_bytes + p.heap_bytes
    );
    assert_eq!(out.report.peak_bytes_after, rep.planned_peak_bytes);
    assert_eq!(
        planned.peak_bytes,
        rep.planned_peak_bytes,
        "{}",
        p.to_json()
    );
    p.heap_bytes
}

#[test]
fn planned_runs_with_control_flow_measure_what_they_plan() {
    for (n, m) in [(3usize, 4i64), (5, 1), (2, 0)] {
        let g = loop_graph(Some(m));
        let heap = check_planned(&g, || {
            BTreeMap::from([("x".to_string(), f32s(&[n, 4], |i| i as f32 * 0.3))])
        });
        // The outputs alone, acc [N, 4] and the scans [M, N, 4], are made on the heap.
        assert!(heap >= (16 * n * (1 + m as usize)) as u64, "{heap}");
    }
    // A Scan makes its scan outputs [T, 3] first, in their arena range, and fills them in place:
    // what the heap holds (one body run and the final state) does not grow with T (from T = 2 on,
    // when an iteration also holds the state it was given).
    let scan_heap: Vec<u64> = [1usize, 3, 8]
        .iter()
        .map(|&t| {
            check_planned(&scan_graph(false), || {
                BTreeMap::from([
                    ("s0".to_string(), f32s(&[3], |i| i as f32)),
                    ("xs".to_string(), f32s(&[t, 3], |i| 1.0 + i as f32)),
                ])
            })
        })
        .collect();
    assert!(scan_heap[0] >= 12, "{scan_heap:?}");
    assert_eq!(scan_heap[1], scan_heap[0] + 12, "{scan_heap:?}");
    assert_eq!(scan_heap[2], scan_heap[1], "{scan_heap:?}");
    for b in [true, false] {
        let heap = check_planned(&if_graph(Some(b)), || {
            BTreeMap::from([("x".to_string(), f32s(&[4], |i| i as f32 - 2.0))])
        });
        assert!(heap >= if b { 16 } else { 32 }, "{heap}");
    }
}

/// A `Scan` that carries no state: `zs[t] = y * y` with `y = -exp(xs[t]) + w`, `xs` scanned
/// backwards, `w` read from the enclosing graph.
fn stateless_scan_graph() -> Graph {
    let mut body = Graph {
        name: "stateless_body".into(),
        ..Graph::default()
    };
    let x = body.add_input(
        "xe",
        DeclType::tensor(DataType::F32, vec![DeclDim::Value(64)]),
    );
    let w = outer(&mut body, "w");
    let (_, e) = body.add_node("exp", "Exp", &[Some(x)], &["e"], vec![]);
    let (_, n) = body.add_node("neg", "Neg", &[Some(e[0])], &["n"], vec![]);
    let (_, y) = body.add_node("add", "Add", &[Some(n[0]), Some(w)], &["y"], vec![]);
    let (_, z) = body.add_node("sq", "Mul", &[Some(y[0]), Some(y[0])], &["z"], vec![]);
    body.outputs.push(z[0]);
    let mut g = Graph::default();
    let xs = g.add_input(
        "xs",
        DeclType::tensor(
            DataType::F32,
            vec![DeclDim::Param("T".into()), DeclDim::Value(64)],
        ),
    );
    g.add_input(
        "w",
        DeclType::tensor(DataType::F32, vec![DeclDim::Value(64)]),
    );
    let attrs = vec![
        attr("body", AttrValue::Graph(Box::new(body))),
        attr("num_scan_inputs", AttrValue::Int(1)),
        attr("scan_input_directions", AttrValue::Ints(vec![1])),
    ];
    let (_, o) = g.add_node("scan", "Scan", &[Some(xs)], &["zs"], attrs);
    g.outputs.push(o[0]);
    g
}

#[test]
fn a_scan_without_state_runs_its_body_from_one_planned_arena() {
    let g = stateless_scan_graph();
    let facts = memplan_ir::infer_graph(&g, 18).unwrap();
    let heaps: Vec<u64> = [1usize, 3, 8]
        .iter()
        .map(|&t| {
            let inputs = || {
                BTreeMap::from([
                    (
                        "xs".to_string(),
                        f32s(&[t, 64], |i| (i as f32 * 0.37).sin()),
                    ),
                    ("w".to_string(), f32s(&[64], |i| i as f32 * 0.5)),
                ])
            };
            let heap = check_planned(&g, inputs);
            let dims = BTreeMap::from([("T".to_string(), t as i64)]);
            let plan = memplan_plan::optimize(&g, &facts, &dims, &Default::default())
                .unwrap()
                .plan;
            let body = &plan
                .body(0)
                .expect("the Scan runs its body from a plan")
                .plan;
            // The body plan's arena holds e, then n, y and z over it in place: 256 B; its
            // resident bytes are the one slice it scans.
            assert_eq!(body.inplace.len(), 3, "{}", body.render());
            assert_eq!(body.arena_bytes, 256, "{}", body.render());
            assert_eq!(body.resident_bytes, 256);
            assert_eq!(heap, memplan_plan::body::heap_of(body));
            // The unplanned body holds two of e, n, y and z at once, besides its slice.
            let unplanned = memplan_sim::control::scratch(&g, &facts, memplan_ir::NodeId(0))
                .unwrap()
                .unwrap()
                .eval_map(&dims)
                .unwrap() as u64;
            assert!(heap < unplanned, "{heap} vs {unplanned}");
            let out = memplan_exec::run(&g, &facts, inputs(), &RunOptions::default()).unwrap();
            let zs = out.outputs[0].1.to_f32_vec().unwrap();
            let xs = inputs()["xs"].to_f32_vec().unwrap();
            let w = inputs()["w"].to_f32_vec().unwrap();
            // xs is scanned backwards: piece k comes from row T - 1 - k.
            for k in 0..t {
                for j in 0..64 {
                    let y = -xs[(t - 1 - k) * 64 + j].exp() + w[j];
                    let (want, got) = (y * y, zs[k * 64 + j]);
                    assert!(
                        (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                        "{got} vs {want}"
                    );
                }
            }
            heap
        })
        .collect();
    // One arena, one slice buffer: the same heap whatever the trip count.
    assert!(heaps.iter().all(|&h| h == heaps[0]), "{heaps:?}");
}

#[test]
fn a_planned_scan_body_runs_in_lanes_that_hold_their_own_memory() {
    let g = stateless_scan_graph();
    let facts = memplan_ir::infer_graph(&g, 18).unwrap();
    for t in [1usize, 3, 8] {
        let inputs = || {
            BTreeMap::from([
                (
                    "xs".to_string(),
                    f32s(&[t, 64], |i| (i as f32 * 0.37).sin()),
                ),
                ("w".to_string(), f32s(&[64], |i| i as f32 * 0.5)),
            ])
        };
        let dims = BTreeMap::from([("T".to_string(), t as i64)]);
        let one = memplan_plan::optimize(&g, &facts, &dims, &Default::default())
            .unwrap()
            .plan;
        let body = memplan_plan::body::heap_of(&one.body(0).unwrap().plan);
        for lanes in [2u32, 3] {
            let opts = memplan_plan::Options {
                lanes,
                ..Default::default()
            };
            // On one thread and on three: the same outputs as the unplanned run, and the measured
            // peak is the planned one, which holds one body per lane (no more lanes than
            // iterations).
            for threads in [1, 3] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let heap = pool.install(|| check_planned_with(&g, inputs, &opts));
                let held = lanes.min(t as u32);
                assert_eq!(heap, one.heap_bytes + u64::from(held - 1) * body, "T={t}");
            }
            let plan = memplan_plan::optimize(&g, &facts, &dims, &opts)
                .unwrap()
                .plan;
            assert_eq!(plan.body(0).unwrap().lanes, lanes.min(t as u32));
        }
    }
}

#[test]
fn the_checker_refuses_a_body_plan_that_does_not_hold() {
    use memplan_plan::PlanError;
    let g = stateless_scan_graph();
    let facts = memplan_ir::infer_graph(&g, 18).unwrap();
    let dims = BTreeMap::from([("T".to_string(), 3)]);
    let plan = memplan_plan::optimize(&g, &facts, &dims, &Default::default())
        .unwrap()
        .plan;
    memplan_plan::check(&g, &facts, &plan).unwrap();
    let refused = |p: &memplan_plan::Plan| memplan_plan::check(&g, &facts, p).unwrap_err();
    // A body plan whose arena lies: refused by the body's own rules, named by the node.
    let mut p = plan.clone();
    p.bodies[0].plan.arena_bytes += 64;
    let e = refused(&p);
    assert!(
        matches!(&e, PlanError::Body { node, why } if node.contains("scan") && why.contains("arena")),
        "{e}"
    );
    // Without its body plan, the node's heap is the simulator's, not what the plan says.
    let mut p = plan.clone();
    p.bodies.clear();
    assert!(matches!(refused(&p), PlanError::Heap { .. }));
    // Made for other dims, listed twice, or for a node that runs no body.
    let mut p = plan.clone();
    p.bodies[0].plan.dims.insert("T".into(), 4);
    assert!(matches!(refused(&p), PlanError::Body { why, .. } if why.contains("other dims")));
    let mut p = plan.clone();
    p.bodies.push(p.bodies[0].clone());
    assert!(matches!(refused(&p), PlanError::Body { why, .. } if why.contains("two")));
    let mut p = plan.clone();
    p.bodies[0].node = 7;
    assert!(matches!(
        refused(&p),
        PlanError::Body { .. } | PlanError::Heap { .. }
    ));
    // No lane, or lanes the heap does not count.
    let mut p = plan.clone();
    p.bodies[0].lanes = 0;
    assert!(matches!(refused(&p), PlanError::Body { why, .. } if why.contains("no lane")));
    let mut p = plan.clone();
    p.bodies[0].lanes = 2;
    assert!(matches!(refused(&p), PlanError::Heap { .. }));
}
