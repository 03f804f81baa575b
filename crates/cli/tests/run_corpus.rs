//! The executor on the corpus: every model (both exporters) at three sizes runs through `memplan
//! run`, and the measured tensor peak equals `memplan estimate`'s prediction for the same dims within
//! 1%, with every node's kernel scratch exactly what the op table declares. At the two sizes with
//! fixtures the outputs match onnxruntime's (`tests/fixtures/ort_outputs`, rtol 1e-4, atol 1e-5); the
//! third size ([`common::THIRD_SIZE`]) runs on random or derived inputs.

use crate::common;

use std::path::PathBuf;

use common::{json_of, repo, third_size_flags, third_size_inputs};

/// Runs `model` (with `run_args` giving its inputs) and estimates it at `dims`; checks the peaks.
fn check_peak(label: &str, model: &str, run_args: &[&str], dims: &[String]) {
    let mut args = vec!["run", model, "--json"];
    args.extend(run_args);
    args.extend(dims.iter().map(String::as_str));
    let run = json_of(&args);
    assert_eq!(
        run["scratch_mismatches"].as_array().unwrap().len(),
        0,
        "{label}: {}",
        run["scratch_mismatches"]
    );
    let mut est_args = vec!["estimate", model, "--json"];
    est_args.extend(dims.iter().map(String::as_str));
    let est = json_of(&est_args);
    let measured = run["peak_bytes"].as_u64().unwrap() as f64;
    let predicted = est["peak_bytes"].as_u64().unwrap() as f64;
    assert!(
        (measured - predicted).abs() <= 0.01 * predicted,
        "{label}: measured peak {measured} vs estimate {predicted}"
    );
}

#[test]
fn corpus_runs_match_onnxruntime_and_the_estimate() {
    let shapes = repo().join("tests/fixtures/ort_shapes");
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir(&shapes)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    fixtures.sort();
    let mut ran = 0;
    let mut files = Vec::new();
    for fx in fixtures {
        let stem = fx.file_stem().unwrap().to_str().unwrap().to_string();
        let (file_stem, size) = stem.rsplit_once('.').unwrap();
        let base = file_stem.strip_suffix(".legacy").unwrap_or(file_stem);
        let model = repo().join(format!("tests/corpus/models/{file_stem}.onnx"));
        let inputs = repo().join(format!("tests/corpus/inputs/{base}_{size}.npz"));
        let reference = repo().join(format!("tests/fixtures/ort_outputs/{stem}.npz"));
        let fixture: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&fx).unwrap()).unwrap();
        let dims: Vec<String> = fixture["dims"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("--dim={k}={v}"))
            .collect();
        // The inputs bind the dims; --dim must agree with them.
        check_peak(
            &stem,
            model.to_str().unwrap(),
            &[
                "--inputs-npz",
                inputs.to_str().unwrap(),
                "--compare",
                reference.to_str().unwrap(),
            ],
            &dims,
        );
        ran += 1;
        files.push((file_stem.to_string(), base.to_string()));
    }
    assert_eq!(ran, 36);
    files.sort();
    files.dedup();
    assert_eq!(files.len(), 18);
    for (file_stem, base) in &files {
        let model = repo().join(format!("tests/corpus/models/{file_stem}.onnx"));
        let label = format!("{file_stem} (third size)");
        let dims = third_size_flags(base);
        let given = third_size_inputs(base, 3);
        let given: Vec<&str> = given.iter().map(String::as_str).collect();
        check_peak(&label, model.to_str().unwrap(), &given, &dims);
    }
}
