//! `memplan run --plan` on the corpus: every model (smaller size) is planned by `memplan optimize`,
//! run from the plan's arena, and compared bit for bit with the unplanned run; the measured tensor
//! peak equals the planned arena plus the resident weights and inputs. An invalid plan is refused.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn memplan(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .output()
        .unwrap()
}

fn json_of(args: &[&str]) -> serde_json::Value {
    let out = memplan(args);
    assert!(
        out.status.success(),
        "memplan {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn corpus_runs_from_the_plan_arena() {
    let tmp = std::env::temp_dir().join(format!("memplan-run-planned-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    // (model, size, inputs), the smaller size of each model only.
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
    inputs.dedup_by(|b, a| a.0 == b.0);
    let mut ran = 0;
    for (base, _, npz) in &inputs {
        let base = base.as_str();
        let model = repo().join(format!("tests/corpus/models/{base}.onnx"));
        let (m, i) = (model.to_str().unwrap(), npz.to_str().unwrap());
        let reference = tmp.join(format!("{base}.ref.npz"));
        let free = json_of(&[
            "run",
            m,
            "--inputs-npz",
            i,
            "--out",
            reference.to_str().unwrap(),
            "--json",
        ]);
        assert_eq!(free["planned"], false);
        let dims: Vec<String> = free["dims"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("--dim={k}={v}"))
            .collect();
        let (opt, plan) = (
            tmp.join(format!("{base}.onnx")),
            tmp.join(format!("{base}.plan.json")),
        );
        let mut args = vec![
            "optimize",
            m,
            "-o",
            opt.to_str().unwrap(),
            "--plan-out",
            plan.to_str().unwrap(),
            "--exact-ms",
            "50",
            "--json",
        ];
        args.extend(dims.iter().map(String::as_str));
        let report = json_of(&args);
        let planned = json_of(&[
            "run",
            opt.to_str().unwrap(),
            "--plan",
            plan.to_str().unwrap(),
            "--inputs-npz",
            i,
            "--compare",
            reference.to_str().unwrap(),
            "--exact",
            "--json",
        ]);
        assert_eq!(planned["planned"], true);
        assert_eq!(planned["mismatches"].as_array().unwrap().len(), 0, "{base}");
        assert_eq!(planned["arena_bytes"], report["arena_bytes"], "{base}");
        assert_eq!(
            planned["planned_peak_bytes"], report["peak_bytes_after"],
            "{base}"
        );
        assert_eq!(
            planned["inplace_copied"].as_array().unwrap().len(),
            0,
            "{base}"
        );
        let (peak, want) = (
            planned["peak_bytes"].as_u64().unwrap(),
            planned["planned_peak_bytes"].as_u64().unwrap(),
        );
        let misses = planned["plan_misses"].as_array().unwrap();
        assert!(misses.is_empty(), "{base}: {misses:?}");
        assert_eq!(peak, want, "{base}: measured vs planned");
        ran += 1;
    }
    assert_eq!(ran, 9);

    // An invalid plan is refused with one line naming the rule.
    let opt = tmp.join("of3_tri_mul_out.onnx");
    let plan = tmp.join("of3_tri_mul_out.plan.json");
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
