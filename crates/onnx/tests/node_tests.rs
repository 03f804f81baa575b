//! The ONNX backend node conformance models (`onnx-node-tests/node/*/model.onnx`): every one imports
//! and infers, or is rejected with a one-line error naming the construct; nothing panics.
//!
//! The cases are generated from the `onnx` package by `tools/gen_onnx_node_tests.py` into
//! `target/onnx-node-tests/node` (`.ci/run` does it when missing); `$MEMPLAN_NODE_TESTS` or
//! `../shared/onnx-node-tests/node` are used when present. Without any, the test says so and passes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn node_tests_dir() -> Option<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::env::var_os("MEMPLAN_NODE_TESTS")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            repo.join("target/onnx-node-tests/node"),
            repo.join("../shared/onnx-node-tests/node"),
        ])
        .find(|d| d.is_dir())
}

#[test]
fn every_node_test_model_imports_or_is_rejected_in_one_line() {
    let Some(dir) = node_tests_dir() else {
        eprintln!("note: no ONNX node tests found (run tools/gen_onnx_node_tests.py); skipped");
        return;
    };
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path().join("model.onnx"))
        .filter(|p| p.is_file())
        .collect();
    cases.sort();
    assert!(
        cases.len() > 1000,
        "{}: only {} cases",
        dir.display(),
        cases.len()
    );
    let (mut inferred, mut partial, mut rejected) = (0usize, 0usize, 0usize);
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for path in &cases {
        let case = path
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let outcome = std::panic::catch_unwind(|| {
            let model = memplan_onnx::import(path).map_err(|e| e.to_string())?;
            let facts = memplan_ir::infer_model(&model).map_err(|e| e.to_string())?;
            Ok::<usize, String>(facts.skipped.len())
        });
        match outcome {
            Err(_) => panic!("{case}: import or inference panicked"),
            Ok(Ok(0)) => inferred += 1,
            Ok(Ok(_)) => partial += 1,
            Ok(Err(msg)) => {
                assert!(!msg.contains('\n'), "{case}: error is not one line: {msg}");
                assert!(!msg.is_empty(), "{case}: empty error");
                rejected += 1;
                let key: String = msg
                    .split(':')
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(60)
                    .collect();
                *reasons.entry(key).or_default() += 1;
            }
        }
    }
    eprintln!(
        "node tests: {} cases: {inferred} fully inferred, {partial} imported with unsupported ops, \
         {rejected} rejected",
        cases.len()
    );
    for (r, n) in &reasons {
        eprintln!("  rejected {n:4}: {r}");
    }
    // Today's floor; raise it as rules are added.
    assert!(
        inferred >= 1090,
        "only {inferred} node-test models fully inferred"
    );
}
