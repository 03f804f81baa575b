//! `memplan run --plan` on the corpus: every model at three sizes (the two input archives and
//! [`common::THIRD_SIZE`]) is planned by `memplan optimize`, run from the plan's
//! arena and compared bit for bit with the unplanned run. The planned peak is at most the estimate in
//! graph order; the measured tensor peak equals the planned arena plus the resident weights and
//! inputs, with every in-place decision run in place and nothing allocated outside the plan; and the
//! process heap beyond the arena does not grow with the dims. An invalid plan is refused.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::{json_of, memplan, repo, third_size_flags, third_size_inputs};

/// The process heap beyond the arena (weights copied when misaligned, kernels' bounded workspaces
/// such as GEMM packing, the run's bookkeeping) may differ between sizes by 16 KiB, plus in-place
/// staging: sized to the node's range up to `STAGE_BYTES` per staged input (two at most here) so
/// that small nodes do not pay for a large buffer, it grows with small dims up to that bound. A
/// buffer proportional to a tensor (an output copied out of the arena, a kernel's temporary on the
/// heap) keeps growing past it.
const HEAP_SLACK: u64 = (16 << 10) + 2 * memplan_exec::inplace::STAGE_BYTES as u64;

#[test]
fn corpus_runs_from_the_plan_arena() {
    let tmp = std::env::temp_dir().join(format!("memplan-run-planned-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    // (model, size, inputs) of the dynamo exports, both archived sizes.
    let mut inputs: Vec<(String, u32, PathBuf)> =
        std::fs::read_dir(repo().join("tests/corpus/inputs"))
            .unwrap()
            .map(|e| {
                let path = e.unwrap().path();
                let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
                let (base, size) = stem.rsplit_once('_').unwrap();
                (base.to_string(), size.parse().unwrap(), path)
            })
            .collect();
    inputs.sort();
    assert_eq!(inputs.len(), 18);
    // Per model: the heap beyond the arena at each size.
    let mut beyond: BTreeMap<String, Vec<(String, u64)>> = BTreeMap::new();
    let mut cases: Vec<(String, String, Vec<String>)> = inputs
        .iter()
        .map(|(base, size, npz)| {
            let given = vec!["--inputs-npz".to_string(), npz.display().to_string()];
            (base.clone(), size.to_string(), given)
        })
        .collect();
    let mut bases: Vec<String> = inputs.iter().map(|i| i.0.clone()).collect();
    bases.dedup();
    for base in bases {
        let mut given = third_size_inputs(&base, 5);
        given.extend(third_size_flags(&base));
        cases.push((base, "third".to_string(), given));
    }
    for (base, size, given) in &cases {
        let label = format!("{base} ({size})");
        let model = repo().join(format!("tests/corpus/models/{base}.onnx"));
        let m = model.to_str().unwrap();
        let given: Vec<&str> = given.iter().map(String::as_str).collect();
        let reference = tmp.join(format!("{base}_{size}.ref.npz"));
        let mut args = vec!["run", m, "--out", reference.to_str().unwrap(), "--json"];
        args.extend(&given);
        let free = json_of(&args);
        assert_eq!(free["planned"], false);
        let dims: Vec<String> = free["dims"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("--dim={k}={v}"))
            .collect();
        let mut args = vec!["estimate", m, "--json"];
        args.extend(dims.iter().map(String::as_str));
        let estimate = json_of(&args)["peak_bytes"].as_u64().unwrap();
        let (opt, plan) = (
            tmp.join(format!("{base}_{size}.onnx")),
            tmp.join(format!("{base}_{size}.plan.json")),
        );
        let mut args = vec![
            "optimize",
            m,
            "-o",
            opt.to_str().unwrap(),
            "--plan-out",
            plan.to_str().unwrap(),
            "--exact-work",
            "200000",
            "--json",
        ];
        args.extend(dims.iter().map(String::as_str));
        let report = json_of(&args);
        assert_eq!(report["peak_bytes_before"], estimate, "{label}");
        let planned_peak = report["peak_bytes_after"].as_u64().unwrap();
        assert!(
            planned_peak <= estimate,
            "{label}: planned {planned_peak} > graph order {estimate}"
        );
        let mut args = vec![
            "run",
            opt.to_str().unwrap(),
            "--plan",
            plan.to_str().unwrap(),
            "--compare",
            reference.to_str().unwrap(),
            "--exact",
            "--json",
            // One thread: kernels' per-thread workspaces then do not depend on scheduling, so the
            // process heap is deterministic (the outputs do not depend on the thread count).
            "--threads",
            "1",
        ];
        args.extend(&given);
        let planned = json_of(&args);
        assert_eq!(planned["planned"], true);
        assert_eq!(
            planned["mismatches"].as_array().unwrap().len(),
            0,
            "{label}"
        );
        assert_eq!(planned["arena_bytes"], report["arena_bytes"], "{label}");
        assert_eq!(planned["planned_peak_bytes"], planned_peak, "{label}");
        assert_eq!(
            planned["inplace_copied"].as_array().unwrap().len(),
            0,
            "{label}: {}",
            planned["inplace_copied"]
        );
        let misses = planned["plan_misses"].as_array().unwrap();
        assert!(misses.is_empty(), "{label}: {misses:?}");
        assert_eq!(
            planned["peak_bytes"], planned_peak,
            "{label}: measured vs planned"
        );
        let heap = planned["process_peak_bytes"].as_u64().unwrap();
        let arena = planned["arena_bytes"].as_u64().unwrap();
        assert!(heap >= arena, "{label}: heap {heap} < arena {arena}");
        beyond
            .entry(base.clone())
            .or_default()
            .push((size.clone(), heap - arena));
    }
    assert_eq!(cases.len(), 27);
    let growing: Vec<String> = beyond
        .iter()
        .filter(|(_, sizes)| {
            let lo = sizes.iter().map(|s| s.1).min().unwrap();
            let hi = sizes.iter().map(|s| s.1).max().unwrap();
            hi - lo > HEAP_SLACK
        })
        .map(|(base, sizes)| format!("{base}: {sizes:?}"))
        .collect();
    assert!(
        growing.is_empty(),
        "the process heap beyond the arena changes with the dims:\n{}",
        growing.join("\n")
    );

    // An invalid plan is refused with one line naming the rule.
    let opt = tmp.join("of3_tri_mul_out_48.onnx");
    let plan = tmp.join("of3_tri_mul_out_48.plan.json");
    let mut p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    p["arena_bytes"] = (p["arena_bytes"].as_u64().unwrap() + 64).into();
    let bad = tmp.join("bad.plan.json");
    std::fs::write(&bad, p.to_string()).unwrap();
    let npz = repo().join("tests/corpus/inputs/of3_tri_mul_out_48.npz");
    let out = memplan(&[
        "run",
        opt.to_str().unwrap(),
        "--plan",
        bad.to_str().unwrap(),
        "--inputs-npz",
        npz.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("invalid plan: arena:"), "{err}");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `run --profile --json` reports every node's measured time beside the time the cost model
/// predicts for it and the kind and amount of work that prediction was read off. Under a cost
/// model whose curves are proportional (a contraction costs its multiply-adds in seconds, a copy
/// or other node twice its elements) and whose elementwise pass is free (so a contraction pays
/// nothing for packing its operands), each prediction is exactly that, the per-op sums add the
/// nodes up, and a bad model file is refused before anything runs.
#[test]
fn the_profile_sets_each_nodes_time_beside_the_cost_models_prediction() {
    let tmp = std::env::temp_dir().join(format!("memplan-profile-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let cost = tmp.join("cost.json");
    let curve = |s: f64| serde_json::json!([[1.0, s]]);
    let model = serde_json::json!({
        "threads": 2, "view_seconds": 1e-9, "fault_seconds_per_byte": 0.0,
        "elementwise": curve(0.0), "copy": curve(2.0), "contraction": curve(1.0), "other": curve(2.0),
    });
    std::fs::write(&cost, model.to_string()).unwrap();
    let onnx = repo().join("tests/corpus/models/of3_tri_mul_out.legacy.onnx");
    let (m, c) = (onnx.to_str().unwrap(), cost.to_str().unwrap());
    let args = ["run", m, "--dim", "N=16", "--random", "--profile", "--json"];
    let j = json_of(&[&args[..], &["--cost-model", c]].concat());
    let nodes = j["node_profile"].as_array().unwrap();
    assert!(!nodes.is_empty());
    let mut kinds = BTreeMap::new();
    for n in nodes {
        let (pred, seconds) = (
            n["predicted_seconds"].as_f64().unwrap(),
            n["seconds"].as_f64(),
        );
        assert!(seconds.is_some_and(|s| s >= 0.0), "{n}");
        let want = match (n["kind"].as_str(), n["work"].as_f64()) {
            (Some("contraction"), Some(w)) => w,
            (Some("view" | "elementwise") | None, _) => 1e-9,
            (Some(_), Some(w)) => (2.0 * w).max(1e-9),
            other => panic!("{n}: kind and work {other:?}"),
        };
        assert!(
            (pred - want).abs() <= 1e-12 * want.max(1.0),
            "{n}: predicted {pred}, want {want}"
        );
        *kinds
            .entry(n["kind"].as_str().unwrap_or("-").to_string())
            .or_insert(0) += 1;
    }
    // The triangle multiplication has projections (contractions), gates (elementwise) and views.
    for k in ["contraction", "elementwise", "view"] {
        assert!(kinds.contains_key(k), "no {k} node: {kinds:?}");
    }
    for p in j["profile"].as_array().unwrap() {
        let op = p["op"].as_str().unwrap();
        let sum: f64 = nodes
            .iter()
            .filter(|n| n["op"] == op)
            .map(|n| n["predicted_seconds"].as_f64().unwrap())
            .sum();
        let got = p["predicted_seconds"].as_f64().unwrap();
        assert!(
            (got - sum).abs() <= 1e-9 * sum.max(1.0),
            "{op}: {got} vs {sum}"
        );
    }
    // The built-in model predicts too; a malformed file is refused, naming it.
    let j = json_of(&args);
    assert!(j["profile"][0]["predicted_seconds"].as_f64().unwrap() > 0.0);
    std::fs::write(&cost, "{\"threads\": 0}").unwrap();
    let out = memplan(&[&args[..], &["--cost-model", c]].concat());
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--cost-model") && err.contains("cost.json"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "ran despite the bad cost model");
    std::fs::remove_dir_all(&tmp).ok();
}
