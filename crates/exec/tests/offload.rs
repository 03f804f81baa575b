//! Offload to a host tier: a skip connection idle across the peak moves to the host and comes
//! back for its reader, its copies on the copier thread beside the compute where the budget leaves
//! room for their windows; the device tier measured is the planned one and below what the plan
//! without offload needs, the host tier holds what the plan says, the copies' time and the time the
//! compute waited for them are reported, the outputs are the same bits, and the checker refuses
//! offloads that break its rules.

use std::collections::BTreeMap;

use memplan_exec::{run, run_planned, RunOptions, Tensor};
use memplan_ir::graph::{DeclDim, DeclType, Graph, ValueId};
use memplan_ir::DataType;
use memplan_plan::offload::{offload, DEFAULT_BANDWIDTH};
use memplan_plan::{check, optimize, Options, Plan, PlanError};

/// A graph of one `[N, N]` input `x` and single-output nodes `(op, inputs, output)` in order;
/// the last node's value is the output.
fn chain(steps: &[(&str, &[&str], &str)]) -> Graph {
    let mut g = Graph::default();
    let n = || DeclDim::Param("N".into());
    let mut by_name = BTreeMap::from([(
        "x",
        g.add_input("x", DeclType::tensor(DataType::F32, vec![n(), n()])),
    )]);
    for &(op, ins, out) in steps {
        let ins: Vec<Option<ValueId>> = ins.iter().map(|i| Some(by_name[i])).collect();
        let v = g
            .add_node(format!("{out}_node"), op, &ins, &[out], vec![])
            .1[0];
        by_name.insert(out, v);
        g.outputs = vec![v];
    }
    g
}

/// `skip = Relu(x)`, then a chain from it whose peak holds two more `[N, N]` tensors, then
/// `y = h + skip`.
fn skip_graph() -> Graph {
    chain(&[
        ("Relu", &["x"], "skip"),
        ("Tanh", &["skip"], "a"),
        ("Sigmoid", &["a"], "b"),
        ("Mul", &["a", "b"], "c"),
        ("Neg", &["c"], "d"),
        ("Add", &["d", "b"], "h"),
        ("Add", &["h", "skip"], "y"),
    ])
}

/// The input `x` of `[n, n]` values in [-1.2, 1.2) made from `i * k % m`.
fn input(n: usize, k: usize, m: usize) -> BTreeMap<String, Tensor> {
    let x: Vec<f32> = (0..n * n)
        .map(|i| ((i * k) % m) as f32 / 40.0 - 1.2)
        .collect();
    BTreeMap::from([(
        "x".to_string(),
        Tensor::from_vec(&[n, n], &x, None).unwrap(),
    )])
}

#[test]
fn a_skip_connection_waits_on_the_host() {
    let g = skip_graph();
    let facts = memplan_ir::infer_graph(&g, 18).unwrap();
    let n = 64usize;
    let dims = BTreeMap::from([("N".to_string(), n as i64)]);
    let inputs = || input(n, 31, 97);
    let plain = run(&g, &facts, inputs(), &RunOptions::default()).unwrap();
    let out = optimize(&g, &facts, &dims, &Options::default()).unwrap();
    let planned_peak = out.report.peak_bytes_after;
    let tensor = (4 * n * n) as u64;
    let budget = planned_peak - tensor / 2;
    let (plan, rep) = offload(&g, &facts, &out.plan, budget, DEFAULT_BANDWIDTH).unwrap();
    assert!(rep.fits, "{rep:?}");
    assert_eq!(rep.moved.len(), 1, "{rep:?}");
    assert_eq!(
        (rep.moved[0].value.as_str(), rep.moved[0].bytes),
        ("skip", tensor)
    );
    assert_eq!(plan.host_bytes, tensor);
    assert_eq!(rep.transfer_bytes, 2 * tensor);
    // Neither copy has room beside compute: beside `b` (after its last use, `a`) or `h` (before
    // its reader) `skip` would be held with two more tensors, over the budget. Both copies are
    // synchronous, and the compute waits for the whole transfer.
    let o = &plan.offloads[0];
    assert_eq!(
        (o.out_done, o.in_start),
        (o.out_after, o.in_before),
        "{}",
        plan.render()
    );
    let whole = rep.predicted_seconds;
    assert!(
        (rep.predicted_exposed_seconds - whole).abs() < 1e-9 * whole,
        "{rep:?}"
    );
    assert!(rep.device_peak_after <= budget && rep.device_peak_before == planned_peak);
    assert_eq!(plan.device_budget, Some(budget));

    let r = run_planned(&g, &facts, inputs(), &plan, 18).unwrap();
    assert_eq!(
        r.peak_bytes, rep.device_peak_after,
        "device tier: measured = planned"
    );
    let pr = r.plan.as_ref().unwrap();
    assert_eq!(
        pr.host_peak_bytes, plan.host_bytes,
        "host tier: measured = planned"
    );
    assert_eq!(pr.transfers, 2);
    assert_eq!(pr.transfer_bytes, rep.transfer_bytes);
    assert_eq!(
        r.outputs[0].1.bytes(),
        plain.outputs[0].1.bytes(),
        "bit-identical"
    );

    // The checker's rule 8 and the tiers' totals.
    let o = plan.offloads[0].clone();
    let mut bad = plan.clone();
    bad.offloads[0].in_start = o.out_done;
    assert!(matches!(
        check(&g, &facts, &bad),
        Err(PlanError::Offload { .. })
    ));
    let mut bad = plan.clone();
    bad.offloads[0].in_before = plan.schedule.len() - 1 + 1;
    assert!(matches!(
        check(&g, &facts, &bad),
        Err(PlanError::Offload { .. })
    ));
    let mut bad = plan.clone();
    bad.offloads[0].out_after = o.in_before - 1;
    bad.offloads[0].out_done = o.in_before - 1;
    bad.offloads[0].in_start = o.in_before - 1;
    bad.offloads[0].in_before = o.in_before - 1;
    assert!(matches!(
        check(&g, &facts, &bad),
        Err(PlanError::Offload { .. })
    ));
    let mut bad = plan.clone();
    bad.host_bytes += 1;
    assert!(matches!(
        check(&g, &facts, &bad),
        Err(PlanError::Host { .. })
    ));
    let mut bad = plan.clone();
    bad.device_budget = Some(rep.device_peak_after - 1);
    assert!(matches!(
        check(&g, &facts, &bad),
        Err(PlanError::DeviceBudget { .. })
    ));
    // Back at the offset of a buffer live at the same time.
    let mut bad = plan.clone();
    let live_then = bad
        .buffers
        .iter()
        .find(|b| {
            b.first <= o.in_before && o.in_before <= b.last && b.values.first() != Some(&o.value)
        })
        .map(|b| b.offset)
        .unwrap();
    bad.offloads[0].offset = live_then;
    assert!(check(&g, &facts, &bad).is_err());
    // Reading it while it is on the host.
    let mut bad = plan.clone();
    let reader = bad
        .schedule
        .iter()
        .position(|s| s.name == "y_node")
        .unwrap();
    bad.offloads[0].in_before = reader + 1;
    assert!(check(&g, &facts, &bad).is_err());
}

/// A skip connection whose copies both hide behind a step: out beside the step after its last
/// use, back beside the step before its reader (the budget holds with either window).
fn prefetch_graph() -> Graph {
    chain(&[
        ("Relu", &["x"], "skip"),
        ("Tanh", &["skip"], "a"),
        ("Neg", &["a"], "a2"),
        ("Transpose", &["a2"], "t"),
        ("Sigmoid", &["t"], "b"),
        ("Mul", &["t", "b"], "c"),
        ("Add", &["c", "b"], "d"),
        ("Neg", &["d"], "h"),
        ("Add", &["h", "skip"], "y"),
    ])
}

#[test]
fn copies_run_beside_compute_and_the_wait_is_reported() {
    let g = prefetch_graph();
    let facts = memplan_ir::infer_graph(&g, 18).unwrap();
    let n = 256usize;
    let dims = BTreeMap::from([("N".to_string(), n as i64)]);
    let inputs = || input(n, 37, 101);
    let plain = run(&g, &facts, inputs(), &RunOptions::default()).unwrap();
    let out = optimize(&g, &facts, &dims, &Options::default()).unwrap();
    let tensor = (4 * n * n) as u64;
    let budget = out.report.peak_bytes_after - tensor / 2;
    let (plan, rep) = offload(&g, &facts, &out.plan, budget, DEFAULT_BANDWIDTH).unwrap();
    assert!(rep.fits, "{rep:?}");
    let o = plan.offloads[0].clone();
    assert_eq!(o.value, "skip");
    assert!(
        o.out_done > o.out_after && o.in_start < o.in_before,
        "{}",
        plan.render()
    );
    assert_eq!(rep.predicted_exposed_seconds, 0.0, "{rep:?}");
    // The same moves copied synchronously, at the same ranges, is a valid plan too.
    let mut sync = plan.clone();
    sync.offloads[0].out_done = o.out_after;
    sync.offloads[0].in_start = o.in_before;
    check(&g, &facts, &sync).unwrap();

    let runs = |p: &Plan| {
        let r = run_planned(&g, &facts, inputs(), p, 18).unwrap();
        assert_eq!(
            r.outputs[0].1.bytes(),
            plain.outputs[0].1.bytes(),
            "bit-identical"
        );
        assert_eq!(r.peak_bytes, rep.device_peak_after, "device tier");
        let pr = r.plan.clone().unwrap();
        assert_eq!(pr.host_peak_bytes, p.host_bytes, "host tier");
        assert_eq!((pr.transfers, pr.transfer_bytes), (2, 2 * tensor));
        assert!(pr.transfer_nanos > 0, "{pr:?}");
        // The compute waits for each copy at least as long as it takes to ask whether it is done.
        assert!(pr.transfer_wait_nanos > 0, "{pr:?}");
        assert!(pr.transfer_wait_nanos as f64 * 1e-9 <= r.seconds, "{pr:?}");
        pr
    };
    let overlapped = runs(&plan);
    let synchronous = runs(&sync);
    eprintln!(
        "copies {:.3} ms, waited {:.3} ms (overlapped); copies {:.3} ms, waited {:.3} ms (synchronous)",
        overlapped.transfer_nanos as f64 * 1e-6,
        overlapped.transfer_wait_nanos as f64 * 1e-6,
        synchronous.transfer_nanos as f64 * 1e-6,
        synchronous.transfer_wait_nanos as f64 * 1e-6
    );
}
