//! The same model, dims and budget give the same plan and the same rewritten model, byte for
//! byte: twice in a row, on one thread (`RAYON_NUM_THREADS=1`) and, where `taskset` exists, pinned
//! to one core. The searches are bounded by work, never by time, and nothing depends on the
//! thread count.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::repo;

/// `memplan optimize` with `env` set (and `taskset -c 0` first when `pin`); the plan JSON and the
/// written model's bytes.
fn optimize(
    model: &Path,
    budget: &str,
    tag: &str,
    env: &[(&str, &str)],
    pin: bool,
) -> (Vec<u8>, Vec<u8>) {
    let dir = std::env::temp_dir().join(format!("memplan-determinism-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (out, plan) = (
        dir.join(format!("{tag}.onnx")),
        dir.join(format!("{tag}.json")),
    );
    let exe = env!("CARGO_BIN_EXE_memplan");
    let mut cmd = if pin {
        let mut c = Command::new("taskset");
        c.args(["-c", "0", exe]);
        c
    } else {
        Command::new(exe)
    };
    cmd.arg("optimize")
        .arg(model)
        .args(["--dim", "N=48", "--budget", budget, "-o"])
        .arg(&out)
        .arg("--plan-out")
        .arg(&plan);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let r = cmd.output().unwrap();
    // 0: fits; 3: the lowest plan reached is written all the same.
    assert!(
        matches!(r.status.code(), Some(0 | 3)),
        "{tag}: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    (std::fs::read(&plan).unwrap(), std::fs::read(&out).unwrap())
}

#[test]
fn the_same_input_gives_the_same_plan_on_any_thread_count() {
    let taskset = Command::new("taskset")
        .args(["-c", "0", "true"])
        .status()
        .is_ok_and(|s| s.success());
    for name in [
        "of3_tri_att_start",
        "of3_tri_att_start.legacy",
        "of3_pairformer_block",
    ] {
        let model = repo().join(format!("tests/corpus/models/{name}.onnx"));
        let free = common::json_of(&[
            "estimate",
            model.to_str().unwrap(),
            "--dim",
            "N=48",
            "--json",
        ]);
        let budget = (free["peak_bytes"].as_u64().unwrap() / 4).to_string();
        let first = optimize(&model, &budget, &format!("{name}.a"), &[], false);
        assert!(!first.0.is_empty() && !first.1.is_empty());
        let again = optimize(&model, &budget, &format!("{name}.b"), &[], false);
        assert!(first == again, "{name}: two runs differ");
        let one = optimize(
            &model,
            &budget,
            &format!("{name}.c"),
            &[("RAYON_NUM_THREADS", "1")],
            false,
        );
        assert!(first == one, "{name}: one thread differs");
        if taskset {
            let pinned = optimize(&model, &budget, &format!("{name}.d"), &[], true);
            assert!(first == pinned, "{name}: taskset -c 0 differs");
        }
    }
    let dir = std::env::temp_dir().join(format!("memplan-determinism-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(dir);
}
