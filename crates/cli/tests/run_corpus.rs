//! The executor on the corpus: every model (both exporters) at two sizes runs through `memplan run`,
//! its outputs match onnxruntime's (`tests/fixtures/ort_outputs`, rtol 1e-4, atol 1e-5), and the
//! measured tensor peak equals `memplan estimate`'s prediction for the same dims within 1%.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn json_of(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "memplan {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
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
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let run = json_of(&[
            "run",
            model.to_str().unwrap(),
            "--inputs-npz",
            inputs.to_str().unwrap(),
            "--compare",
            reference.to_str().unwrap(),
            "--json",
        ]);
        let mut est_args = vec!["estimate", model.to_str().unwrap(), "--json"];
        let dim_flags: Vec<String> = dims.iter().map(|d| format!("--dim={d}")).collect();
        est_args.extend(dim_flags.iter().map(String::as_str));
        let est = json_of(&est_args);
        assert_eq!(
            run["scratch_mismatches"].as_array().unwrap().len(),
            0,
            "{stem}: {}",
            run["scratch_mismatches"]
        );
        let measured = run["peak_bytes"].as_u64().unwrap() as f64;
        let predicted = est["peak_bytes"].as_u64().unwrap() as f64;
        assert!(
            (measured - predicted).abs() <= 0.01 * predicted,
            "{stem}: measured peak {measured} vs estimate {predicted}"
        );
        ran += 1;
    }
    assert_eq!(ran, 36);
}
