//! In-place elementwise ops on outputs large enough for the staged path to split them over worker
//! threads: bit-identical to the plain run, every decision run without a copy, the planned peak.

use std::collections::BTreeMap;

use memplan_exec::{run, run_planned, RunOptions, Tensor};
use memplan_ir::graph::{DeclDim, DeclType, Graph};
use memplan_ir::DataType;
use memplan_plan::{optimize, Options};

/// How the mask broadcasts over x [N, C].
#[derive(Clone, Copy)]
enum Mask {
    /// m [N, 1]: one value per row.
    Rows,
    /// m [C]: one row for all.
    Cols,
}

/// x [N, C], m -> s = Sigmoid(x) -> a = s * x (over s) -> y = a * m (over a; m broadcasts).
fn graph(mask: Mask) -> Graph {
    let mut g = Graph::default();
    let (n, c) = (DeclDim::Param("N".into()), DeclDim::Param("C".into()));
    let x = g.add_input(
        "x",
        DeclType::tensor(DataType::F32, vec![n.clone(), c.clone()]),
    );
    let mdims = match mask {
        Mask::Rows => vec![n, DeclDim::Value(1)],
        Mask::Cols => vec![c],
    };
    let m = g.add_input("m", DeclType::tensor(DataType::F32, mdims));
    let (_, s) = g.add_node("sig", "Sigmoid", &[Some(x)], &["s"], vec![]);
    let (_, a) = g.add_node("silu", "Mul", &[Some(s[0]), Some(x)], &["a"], vec![]);
    let (_, y) = g.add_node("mask", "Mul", &[Some(a[0]), Some(m)], &["y"], vec![]);
    g.outputs.push(y[0]);
    g
}

fn inputs(n: usize, c: usize, mask: Mask) -> BTreeMap<String, Tensor> {
    let x: Vec<f32> = (0..n * c).map(|i| (i as f32 * 0.37).sin() * 4.0).collect();
    let ms = match mask {
        Mask::Rows => vec![n, 1],
        Mask::Cols => vec![c],
    };
    let m: Vec<f32> = (0..ms.iter().product())
        .map(|i| (i % 3) as f32 - 0.5)
        .collect();
    BTreeMap::from([
        (
            "x".into(),
            Tensor::from_vec::<f32>(&[n, c], &x, None).unwrap(),
        ),
        ("m".into(), Tensor::from_vec::<f32>(&ms, &m, None).unwrap()),
    ])
}

fn check(n: usize, c: usize, mask: Mask, threads: usize) {
    let g = graph(mask);
    let facts = memplan_ir::infer_graph(&g, 18).unwrap();
    let dims = BTreeMap::from([("N".to_string(), n as i64), ("C".to_string(), c as i64)]);
    let p = optimize(&g, &facts, &dims, &Options::default())
        .unwrap()
        .plan;
    let outs: Vec<&str> = p.inplace.iter().map(|d| d.output.as_str()).collect();
    assert_eq!(outs, ["a", "y"], "{}", p.render());
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let (plain, planned) = pool.install(|| {
        (
            run(&g, &facts, inputs(n, c, mask), &RunOptions::default()).unwrap(),
            run_planned(&g, &facts, inputs(n, c, mask), &p, 18).unwrap(),
        )
    });
    assert_eq!(plain.outputs[0].1.bytes(), planned.outputs[0].1.bytes());
    let report = planned.plan.unwrap();
    assert_eq!(report.inplace_done, 2);
    assert!(
        report.inplace_copied.is_empty(),
        "{:?}",
        report.inplace_copied
    );
    assert!(report.misses.is_empty(), "{:?}", report.misses);
    assert_eq!(planned.peak_bytes, p.arena_bytes + p.resident_bytes);
}

#[test]
fn large_in_place_ops_split_over_threads_stay_bit_identical() {
    // 2 Mi elements: several staging chunks per thread; chunks are whole rows.
    for mask in [Mask::Rows, Mask::Cols] {
        check(8192, 256, mask, 2);
        check(8191, 33, mask, 3);
        check(8191, 33, mask, 1);
    }
    // Rows longer than a staging chunk: flat chunks that cut rows, the mask gathered.
    check(9, 100_003, Mask::Rows, 2);
    check(9, 100_003, Mask::Cols, 3);
}

#[test]
fn small_in_place_ops_run_on_one_range() {
    check(7, 5, Mask::Rows, 2);
    check(7, 5, Mask::Cols, 1);
}
