//! Random ops end to end on exported models with dropout left in the graph (`tests/fixtures/random`,
//! made by `tools/export_random_fixtures.py` with both torch exporters): every op has a rule, the
//! estimate equals the measured peak to the byte, reruns (any thread count) and the planned run of
//! the lowest plan give bit-identical outputs (the generator is counter-based).

use crate::common;

use common::{json_of, memplan, repo};

#[test]
fn exported_dropout_models_estimate_run_and_plan_deterministically() {
    let tmp = std::env::temp_dir().join(format!("memplan-random-ops-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let dims = ["--dim=B=3", "--dim=N=37"];
    for name in ["dropout_torchscript", "dropout_dynamo"] {
        let model = repo().join(format!("tests/fixtures/random/{name}.onnx"));
        let m = model.to_str().unwrap();
        let inspect = memplan(&["inspect", m]);
        assert!(inspect.status.success(), "{name}: inspect failed");
        let text = String::from_utf8_lossy(&inspect.stdout);
        assert!(text.contains("unsupported: none"), "{name}: {text}");
        for op in ["Dropout", "RandomUniformLike", "RandomNormalLike"] {
            assert!(text.contains(op), "{name}: {op} not in the graph");
        }

        let (a, b) = (
            tmp.join(format!("{name}.a.npz")),
            tmp.join(format!("{name}.b.npz")),
        );
        let mut args = vec!["run", m, "--random", "--json", "--out", a.to_str().unwrap()];
        args.extend(dims);
        let run = json_of(&args);
        assert_eq!(
            run["scratch_mismatches"].as_array().unwrap().len(),
            0,
            "{name}"
        );
        let mut args = vec!["estimate", m, "--json"];
        args.extend(dims);
        let estimate = json_of(&args)["peak_bytes"].as_u64().unwrap();
        assert_eq!(run["peak_bytes"].as_u64().unwrap(), estimate, "{name}");

        let mut args = vec!["run", m, "--random", "--json", "--threads", "1"];
        args.extend(["--out", b.to_str().unwrap()]);
        args.extend(dims);
        json_of(&args);
        assert_eq!(
            std::fs::read(&a).unwrap(),
            std::fs::read(&b).unwrap(),
            "{name}: a rerun on one thread draws other values"
        );

        let (opt, plan) = (
            tmp.join(format!("{name}.opt.onnx")),
            tmp.join(format!("{name}.plan.json")),
        );
        let mut args = vec!["optimize", m, "-o", opt.to_str().unwrap()];
        args.extend([
            "--plan-out",
            plan.to_str().unwrap(),
            "--budget",
            "lowest",
            "--json",
        ]);
        args.extend(dims);
        // The lowest plan: chunking acts wherever it can, the random ops stay whole.
        let out = memplan(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rep: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            rep["peak_bytes_after"].as_u64().unwrap() <= estimate,
            "{name}"
        );
        let mut args = vec!["run", opt.to_str().unwrap(), "--random", "--json"];
        args.extend([
            "--plan",
            plan.to_str().unwrap(),
            "--compare",
            a.to_str().unwrap(),
        ]);
        args.extend(["--exact"]);
        args.extend(dims);
        let planned = json_of(&args);
        assert_eq!(planned["planned"], true);
        assert_eq!(planned["mismatches"].as_array().unwrap().len(), 0, "{name}");
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
