//! Bad input to every op, end to end: each ONNX node conformance model (valid, one per op and
//! variant) is mutated structurally with fixed seeds (`memplan_onnx::fuzzgen::mutate_model`:
//! attributes out of range, dropped, retyped or added; inputs dropped, emptied or dangling;
//! initializers with out-of-range integers or wrong dims; wrong declared dims and types; broken
//! `If`/`Loop`/`Scan` bodies). Import, inference and, where the mutated model still has facts, a run
//! on the case's own inputs must never panic, and every error must be one non-empty line. The `run`
//! fuzz target (`fuzz/fuzz_targets/run.rs`) makes the same check on arbitrary bytes.

use crate::common;

use std::collections::BTreeMap;

use memplan_onnx::fuzzgen::{mutate_model, Rng};
use memplan_onnx::proto::ModelProto;
use prost::Message;

/// Mutations per node case.
const MUTATIONS: u64 = 60;

/// The case's inputs (`test_data_set_0/input_<i>.pb`) by graph input name.
fn case_inputs(
    model: &ModelProto,
    dir: &std::path::Path,
) -> BTreeMap<String, memplan_exec::Tensor> {
    let g = model.graph.as_ref().unwrap();
    let inits: Vec<&str> = g
        .initializer
        .iter()
        .filter_map(|t| t.name.as_deref())
        .collect();
    g.input
        .iter()
        .filter_map(|v| v.name.as_deref())
        .filter(|n| !inits.contains(n))
        .enumerate()
        .filter_map(|(i, name)| {
            let p = dir.join(format!("test_data_set_0/input_{i}.pb"));
            Some((name.to_string(), common::load_pb_tensor(&p).ok()?))
        })
        .collect()
}

#[test]
fn mutated_node_models_never_panic_and_errors_are_one_line() {
    let Some(cases) = common::node_cases() else {
        eprintln!("note: no ONNX node tests found (run tools/gen_onnx_node_tests.py); skipped");
        return;
    };
    let (mut ran, mut rejected) = (0usize, 0usize);
    let mut problems = Vec::new();
    for (ci, case) in cases.iter().enumerate() {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(case.join("model.onnx")).unwrap();
        let Ok(orig) = ModelProto::decode(bytes.as_slice()) else {
            continue;
        };
        let inputs = case_inputs(&orig, case);
        for k in 0..MUTATIONS {
            let seed = (ci as u64) * MUTATIONS + k;
            let mut m = orig.clone();
            mutate_model(&mut Rng::new(seed), &mut m);
            let mutated = m.encode_to_vec();
            let given = inputs.clone();
            let r = std::panic::catch_unwind(move || common::run_check::check_run(&mutated, given));
            match r {
                Err(_) => problems.push(format!("{name} seed {seed}: PANIC")),
                Ok(Ok(())) => ran += 1,
                Ok(Err(msg)) => {
                    if msg.trim().is_empty() || msg.contains('\n') {
                        problems.push(format!("{name} seed {seed}: not one line: {msg:?}"));
                    }
                    rejected += 1;
                }
            }
        }
    }
    eprintln!(
        "{} node cases x {MUTATIONS} mutations: {ran} accepted, {rejected} rejected with one line",
        cases.len()
    );
    assert!(
        problems.is_empty(),
        "{} mutated models broke the rules:\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(
        ran > 0 && rejected > 0,
        "the mutations must leave some models valid and make others invalid"
    );
}
