//! Snapshot tests on small hand-built graphs: event sequence, live set, formula, placement.

use std::collections::BTreeMap;

use expect_test::{expect, Expect};
use memplan_ir::graph::{DeclDim, DeclType, Graph};
use memplan_ir::{infer_graph, DataType, TensorData};
use memplan_sim::estimate::{estimate, EstimateOptions};
use memplan_sim::formula::{MaxFit, PeakFormula};
use memplan_sim::peak::{concrete_peak, symbolic_steps};
use memplan_sim::place::{check_placement, place_best_fit};
use memplan_sim::{Event, Timeline};

/// x[N,8] -> MatMul(w[8,8]) -> a; b = a*a; c = Reshape(b, [-1]) (a view); out = c + c.
fn chain() -> Graph {
    let mut g = Graph::default();
    let x = g.add_input(
        "x",
        DeclType::tensor(
            DataType::F32,
            vec![DeclDim::Param("N".into()), DeclDim::Value(8)],
        ),
    );
    let w = g.add_initializer(TensorData::from_f32("w", vec![8, 8], &[0.5; 64]));
    let s = g.add_initializer(TensorData::from_i64("flat", vec![1], &[-1]));
    let (_, a) = g.add_node("mm", "MatMul", &[Some(x), Some(w)], &["a"], vec![]);
    let (_, b) = g.add_node("sq", "Mul", &[Some(a[0]), Some(a[0])], &["b"], vec![]);
    let (_, c) = g.add_node("flat", "Reshape", &[Some(b[0]), Some(s)], &["c"], vec![]);
    let (_, o) = g.add_node("dbl", "Add", &[Some(c[0]), Some(c[0])], &["out"], vec![]);
    g.outputs.push(o[0]);
    g
}

fn events_text(g: &Graph, t: &Timeline) -> String {
    let mut s = String::new();
    for e in t.events() {
        let (kind, step, buf) = match e {
            Event::Alloc { step, buf } => ("alloc", step, buf),
            Event::Free { step, buf } => ("free ", step, buf),
        };
        let b = &t.buffers[buf.0 as usize];
        let name = b
            .value
            .map(|v| g.value(v).name.clone())
            .unwrap_or_else(|| "scratch".into());
        s.push_str(&format!("{step} {kind} {name} {}\n", b.size));
    }
    s
}

fn check(actual: String, expect: Expect) {
    expect.assert_eq(&actual);
}

#[test]
fn chain_events_and_steps() {
    let g = chain();
    let facts = infer_graph(&g, 18).unwrap();
    let t = Timeline::build(&g, &facts, &facts.order).unwrap();
    check(
        events_text(&g, &t),
        expect![[r#"
            0 alloc a 32*N
            1 alloc b 32*N
            1 free  a 32*N
            3 alloc out 32*N
            3 free  b 32*N
        "#]],
    );
    let steps: Vec<String> = symbolic_steps(&t).iter().map(|e| e.to_string()).collect();
    check(
        steps.join("\n"),
        expect![[r#"
        64*N + 264
        96*N + 264
        64*N + 264
        96*N + 264"#]],
    );
    // The view costs nothing and maps to its source's buffer.
    assert!(t.node_is_view[2]);
    let c = g.find_value("c").unwrap();
    let b = g.find_value("b").unwrap();
    assert_eq!(t.value_buf[c.index()], t.value_buf[b.index()]);
}

#[test]
fn chain_peak_live_set_and_formula() {
    let g = chain();
    let facts = infer_graph(&g, 18).unwrap();
    let dims: BTreeMap<String, i64> = [("N".to_string(), 100)].into();
    let e = estimate(
        &g,
        &facts,
        &facts.order,
        &dims,
        &EstimateOptions {
            budget: Some(10_000),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(e.peak_bytes, 96 * 100 + 264);
    assert_eq!(e.peak_step, Some(1));
    assert_eq!(e.peak_node.as_deref(), Some("sq (Mul)"));
    let live: Vec<String> = e
        .live_at_peak
        .iter()
        .map(|l| {
            format!(
                "{} {} {:?} {} {} {:?}",
                l.name, l.symbolic_shape, l.shape, l.bytes, l.category, l.producer
            )
        })
        .collect();
    check(
        live.join("\n"),
        expect![[r#"
        x [N, 8] [100, 8] 3200 inputs None
        a [N, 8] [100, 8] 3200 activations Some("mm (MatMul)")
        b [N, 8] [100, 8] 3200 activations Some("sq (Mul)")
        w [8, 8] [8, 8] 256 weights None
        flat [1] [1] 8 weights None"#]],
    );
    assert_eq!(e.breakdown.weights, 264);
    assert_eq!(e.breakdown.inputs, 3200);
    assert_eq!(e.breakdown.activations, 6400);
    let f = e.formula.as_ref().unwrap();
    assert_eq!(f.dominant, "96*N + 264");
    // 96*N + 264 <= 10000  <=>  N <= 101.4
    let m = e.max_fitting.unwrap();
    assert_eq!((m.symbol.as_str(), m.value), ("N", Some(101)));
    assert_eq!(e.fits, Some(true));
}

#[test]
fn formula_agrees_with_evaluation_and_max_fitting_is_exact() {
    let g = chain();
    let facts = infer_graph(&g, 18).unwrap();
    let t = Timeline::build(&g, &facts, &facts.order).unwrap();
    let pf = PeakFormula::new(&t);
    for n in [1i64, 2, 7, 64, 1000, 123_457] {
        let env: BTreeMap<String, i64> = [("N".to_string(), n)].into();
        let cp = concrete_peak(&t, &env).unwrap();
        assert_eq!(pf.eval(&env).unwrap().0 as u64, cp.peak_bytes, "N={n}");
    }
    let peak_at = |env: &BTreeMap<String, i64>| Ok(Some(concrete_peak(&t, env)?.peak_bytes));
    for budget in [500u64, 9_864, 9_865, 1 << 30] {
        match pf
            .max_fitting("N", &BTreeMap::new(), budget, &peak_at)
            .unwrap()
        {
            MaxFit::Value(v) => {
                let at = |n: i64| peak_at(&[("N".to_string(), n)].into()).unwrap().unwrap();
                assert!(
                    at(v) <= budget && at(v + 1) > budget,
                    "budget {budget}: {v}"
                );
            }
            other => panic!("budget {budget}: {other:?}"),
        }
    }
    assert_eq!(
        pf.max_fitting("N", &BTreeMap::new(), 300, &peak_at)
            .unwrap(),
        MaxFit::None
    );
}

#[test]
fn placement_never_overlaps_and_meets_the_liveness_bound_on_a_chain() {
    let g = chain();
    let facts = infer_graph(&g, 18).unwrap();
    let t = Timeline::build(&g, &facts, &facts.order).unwrap();
    let env: BTreeMap<String, i64> = [("N".to_string(), 10)].into();
    let cp = concrete_peak(&t, &env).unwrap();
    let p = place_best_fit(&t, &cp.sizes);
    check_placement(&t, &cp.sizes, &p).unwrap();
    // Two 320-byte buffers live at once at most: 2 * 320 rounded to the 64-byte alignment.
    assert_eq!(p.arena_bytes, 640);
    // Resident buffers stay outside the arena.
    assert!(t
        .buffers
        .iter()
        .zip(&p.offsets)
        .all(|(b, o)| b.alloc.is_some() == o.is_some()));
}

#[test]
fn missing_dims_and_bad_schedules_are_errors() {
    let g = chain();
    let facts = infer_graph(&g, 18).unwrap();
    let t = Timeline::build(&g, &facts, &facts.order).unwrap();
    let e = concrete_peak(&t, &BTreeMap::new()).unwrap_err();
    assert_eq!(e.to_string(), "dim 'N' is not given a value");
    let rev: Vec<_> = facts.order.iter().rev().copied().collect();
    let e = Timeline::build(&g, &facts, &rev).unwrap_err();
    assert!(e.to_string().contains("not a topological order"), "{e}");
    let e = Timeline::build(&g, &facts, &facts.order[..2]).unwrap_err();
    assert!(e.to_string().contains("has 2 steps"), "{e}");
}

/// Two branches off one input, one dead value, and a graph output that is a view:
/// x[N,4] -> Relu a; Neg dead (nobody reads it); Softmax(a) s; Mul(s, a) m; out = Reshape(m) (a view).
fn branches() -> Graph {
    let mut g = Graph::default();
    let x = g.add_input(
        "x",
        DeclType::tensor(
            DataType::F32,
            vec![DeclDim::Param("N".into()), DeclDim::Value(4)],
        ),
    );
    let shape = g.add_initializer(TensorData::from_i64("shape", vec![2], &[4, -1]));
    let (_, a) = g.add_node("relu", "Relu", &[Some(x)], &["a"], vec![]);
    let _ = g.add_node("neg", "Neg", &[Some(x)], &["dead"], vec![]);
    let (_, s) = g.add_node("sm", "Softmax", &[Some(a[0])], &["s"], vec![]);
    let (_, m) = g.add_node("mul", "Mul", &[Some(s[0]), Some(a[0])], &["m"], vec![]);
    let (_, o) = g.add_node(
        "view",
        "Reshape",
        &[Some(m[0]), Some(shape)],
        &["out"],
        vec![],
    );
    g.outputs.push(o[0]);
    g
}

#[test]
fn branches_events_live_set_and_formula() {
    let g = branches();
    let facts = infer_graph(&g, 18).unwrap();
    let t = Timeline::build(&g, &facts, &facts.order).unwrap();
    check(
        events_text(&g, &t),
        expect![[r#"
            0 alloc a 16*N
            1 alloc dead 16*N
            1 free  dead 16*N
            2 alloc s 16*N
            3 alloc m 16*N
            3 free  a 16*N
            3 free  s 16*N
        "#]],
    );
    let dims: BTreeMap<String, i64> = [("N".to_string(), 10)].into();
    let e = estimate(&g, &facts, &facts.order, &dims, &EstimateOptions::default()).unwrap();
    let live: Vec<String> = e
        .live_at_peak
        .iter()
        .map(|l| {
            format!(
                "{} {:?} {} {} {:?} {:?}",
                l.name, l.shape, l.bytes, l.category, l.producer, l.last_consumer
            )
        })
        .collect();
    check(
        format!(
            "peak {} at {:?}\n{}",
            e.peak_bytes,
            e.peak_node,
            live.join("\n")
        ),
        expect![[r#"
            peak 656 at Some("mul (Mul)")
            x [10, 4] 160 inputs None Some("neg (Neg)")
            a [10, 4] 160 activations Some("relu (Relu)") Some("mul (Mul)")
            s [10, 4] 160 activations Some("sm (Softmax)") Some("mul (Mul)")
            m [10, 4] 160 outputs Some("mul (Mul)") Some("view (Reshape)")
            shape [2] 16 weights None Some("view (Reshape)")"#]],
    );
    let f = e.formula.unwrap();
    check(
        format!("{}\n{} at {}", f.text, f.dominant, f.node),
        expect![[r#"
            peak ≈ 64·N + 16 B (for N ≥ 1)
            64*N + 16 at mul (Mul)"#]],
    );
    // Three 160-byte buffers at once, each rounded up to the 64-byte alignment.
    assert_eq!((e.arena_bytes, e.arena_lower_bound), (576, 480));
}

/// The exact formula equals the simulated peak (value and step) at every swept point, the dominant
/// regime is the peak from its bound on, and max_fitting is exact, on a synthetic attention stack.
#[test]
fn formula_sweep_and_max_fitting_on_a_synthetic_stack() {
    let g = memplan_sim::synth::transformer(6);
    let facts = infer_graph(&g, 18).unwrap();
    let an = memplan_sim::estimate::Analysis::new(&g, &facts, &facts.order).unwrap();
    let t = &an.timeline;
    for b in [1i64, 2, 3] {
        let fixed: BTreeMap<String, i64> = [("B".to_string(), b)].into();
        let d = an.formula.dominant("S", &fixed).unwrap().unwrap();
        assert!(d.exact);
        for s in (1..=70).chain([100, 127, 128, 129, 1000, 4096, 65_536]) {
            let env: BTreeMap<String, i64> = [("B".to_string(), b), ("S".to_string(), s)].into();
            let cp = concrete_peak(t, &env).unwrap();
            let (v, step) = an.formula.eval(&env).unwrap();
            assert_eq!(
                (v as u64, step),
                (cp.peak_bytes, cp.peak_step),
                "B={b} S={s}"
            );
            if s >= d.from {
                assert_eq!(
                    d.along.eval_map(&env).unwrap() as u64,
                    cp.peak_bytes,
                    "dominant at B={b} S={s}"
                );
            }
        }
        for budget in [1u64, 70_000, 100_000, 1 << 20, 123_456_789, 80 << 30] {
            let m = an.max_fitting("S", &fixed, budget).unwrap();
            let at = |s: i64| {
                an.simulate_peak(&[("B".to_string(), b), ("S".to_string(), s)].into())
                    .unwrap()
                    .unwrap()
            };
            match m.value {
                Some(v) => assert!(
                    at(v) <= budget && at(v + 1) > budget,
                    "B={b} budget {budget}: {v}"
                ),
                None => assert!(!m.unbounded && at(1) > budget, "B={b} budget {budget}"),
            }
        }
    }
    let f = an
        .formula_report("S", &[("B".to_string(), 1)].into())
        .unwrap()
        .unwrap();
    check(
        f.text.clone(),
        expect!["peak ≈ 8·S² + 512·S + 32.02 KiB (for S ≥ 128)"],
    );
}

/// Scratch lives during its node's step only, and a rule that depends on whether an extent is 1
/// stays exact: x[N,4] -> Softmax over axis 0 (the executor transposes the input and the result
/// when N > 1: 2 * 4 B * |x| of scratch) -> out.
#[test]
fn scratch_events_and_a_piecewise_formula() {
    let mut g = Graph::default();
    let x = g.add_input(
        "x",
        DeclType::tensor(
            DataType::F32,
            vec![DeclDim::Param("N".into()), DeclDim::Value(4)],
        ),
    );
    let axis = memplan_ir::graph::Attribute {
        name: "axis".into(),
        value: memplan_ir::graph::AttrValue::Int(0),
        doc: String::new(),
    };
    let (_, s) = g.add_node("sm", "Softmax", &[Some(x)], &["s"], vec![axis]);
    let (_, o) = g.add_node("neg", "Neg", &[Some(s[0])], &["out"], vec![]);
    g.outputs.push(o[0]);
    let facts = infer_graph(&g, 18).unwrap();
    let t = Timeline::build(&g, &facts, &facts.order).unwrap();
    check(
        events_text(&g, &t),
        expect![[r#"
            0 alloc s 16*N
            0 alloc scratch 32*N*min(N, 2) - 32*N
            0 free  scratch 32*N*min(N, 2) - 32*N
            1 alloc out 16*N
            1 free  s 16*N
        "#]],
    );
    let pf = PeakFormula::new(&t);
    for n in 1..=40i64 {
        let env: BTreeMap<String, i64> = [("N".to_string(), n)].into();
        let cp = concrete_peak(&t, &env).unwrap();
        assert_eq!(pf.eval(&env).unwrap().0 as u64, cp.peak_bytes, "N={n}");
        // N = 1: no transpose, so the peak is x + s + out; from N = 2 on, x + s + scratch.
        let want = if n == 1 { 48 } else { 16 * n + 16 * n + 32 * n } as u64;
        assert_eq!(cp.peak_bytes, want, "N={n}");
    }
    let peak_at = |env: &BTreeMap<String, i64>| Ok(Some(concrete_peak(&t, env)?.peak_bytes));
    for budget in [48u64, 127, 128, 6400, 6463, 6464] {
        match pf
            .max_fitting("N", &BTreeMap::new(), budget, &peak_at)
            .unwrap()
        {
            MaxFit::Value(v) => {
                let at = |n: i64| peak_at(&[("N".to_string(), n)].into()).unwrap().unwrap();
                assert!(
                    at(v) <= budget && at(v + 1) > budget,
                    "budget {budget}: {v}"
                );
            }
            other => panic!("budget {budget}: {other:?}"),
        }
    }
}
