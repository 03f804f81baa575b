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
    let x = g.add_input("x", DeclType::tensor(DataType::F32, vec![DeclDim::Param("N".into()), DeclDim::Value(8)]));
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
        let name = b.value.map(|v| g.value(v).name.clone()).unwrap_or_else(|| "scratch".into());
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
    check(steps.join("\n"), expect![[r#"
        64*N + 264
        96*N + 264
        64*N + 264
        96*N + 264"#]]);
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
    let e = estimate(&g, &facts, &facts.order, &dims, &EstimateOptions { budget: Some(10_000), ..Default::default() })
        .unwrap();
    assert_eq!(e.peak_bytes, 96 * 100 + 264);
    assert_eq!(e.peak_step, Some(1));
    assert_eq!(e.peak_node.as_deref(), Some("sq (Mul)"));
    let live: Vec<String> = e
        .live_at_peak
        .iter()
        .map(|l| format!("{} {} {} {} {:?}", l.name, l.shape, l.bytes, l.category, l.producer))
        .collect();
    check(live.join("\n"), expect![[r#"
        x [N, 8] 3200 inputs None
        a [N, 8] 3200 activations Some("mm (MatMul)")
        b [N, 8] 3200 activations Some("sq (Mul)")
        w [8, 8] 256 weights None
        flat [1] 8 weights None"#]]);
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
    let peak_at = |env: &BTreeMap<String, i64>| Ok(concrete_peak(&t, env)?.peak_bytes);
    for budget in [500u64, 9_864, 9_865, 1 << 30] {
        match pf.max_fitting("N", &BTreeMap::new(), budget, &peak_at).unwrap() {
            MaxFit::Value(v) => {
                let at = |n: i64| peak_at(&[("N".to_string(), n)].into()).unwrap();
                assert!(at(v) <= budget && at(v + 1) > budget, "budget {budget}: {v}");
            }
            other => panic!("budget {budget}: {other:?}"),
        }
    }
    assert_eq!(pf.max_fitting("N", &BTreeMap::new(), 300, &peak_at).unwrap(), MaxFit::None);
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
    assert!(t.buffers.iter().zip(&p.offsets).all(|(b, o)| b.alloc.is_some() == o.is_some()));
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
