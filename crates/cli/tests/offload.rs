//! `memplan optimize --device-budget` on a training step: the backward graph of the corpus
//! PairFormer block (`memplan grad --of z_out`) at N=32, with recomputation and chunking, does not
//! reach a device budget halfway between the lowest plan they reach and what the host tier makes of
//! it; moving buffers idle across the peak to the host tier does. The planned run's
//! device tier is the planned one, its host tier holds what the plan says, and the gradients are
//! the unoptimized training step's bits. A device budget nothing reaches exits 3 with the lowest
//! plan written, and `--device-budget` with `--budget` is a usage error (one line, status 1).

use crate::common;

use common::{json_of, memplan, repo};

#[test]
fn a_training_step_fits_a_device_budget_with_a_host_tier() {
    let tmp = std::env::temp_dir().join(format!("memplan-offload-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let model = repo().join("tests/corpus/models/of3_pairformer_block.onnx");
    let train = tmp.join("train.onnx");
    let t = train.to_str().unwrap();
    let g = memplan(&["grad", model.to_str().unwrap(), "--of", "z_out", "-o", t]);
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let reference = tmp.join("ref.npz");
    json_of(&[
        "run",
        t,
        "--dim",
        "N=32",
        "--random",
        "--out",
        reference.to_str().unwrap(),
        "--json",
    ]);

    let (out, plan) = (tmp.join("o.onnx"), tmp.join("o.json"));
    // The lowest device tier recomputation and chunking reach, and what offload makes of it; the
    // device budget halfway between needs the host tier.
    let probe = memplan(&[
        "optimize",
        t,
        "--dim",
        "N=32",
        "--recompute",
        "--device-budget",
        "lowest",
        "--json",
    ]);
    assert_eq!(probe.status.code(), Some(0), "the lowest plan");
    let probe: serde_json::Value = serde_json::from_slice(&probe.stdout).unwrap();
    let (lowest, offloaded) = (
        probe["offload"]["device_peak_before"].as_u64().unwrap(),
        probe["offload"]["device_peak_after"].as_u64().unwrap(),
    );
    assert!(
        offloaded < lowest,
        "the host tier lowers the lowest plan: {}",
        probe["offload"]
    );
    let device = (lowest + offloaded) / 2;
    let d = format!("{device}B");
    let args = [
        "optimize",
        t,
        "--dim",
        "N=32",
        "--recompute",
        "--device-budget",
        &d,
        "-o",
        out.to_str().unwrap(),
        "--plan-out",
        plan.to_str().unwrap(),
        "--json",
    ];
    let o = json_of(&args);
    let off = &o["offload"];
    assert!(
        off["device_peak_before"].as_u64().unwrap() > device,
        "recomputation and chunking alone do not reach it: {off}"
    );
    let after = off["device_peak_after"].as_u64().unwrap();
    assert!(
        after <= device && off["fits"] == true && o["fits"] == true,
        "{off}"
    );
    assert_eq!(o["peak_bytes_after"].as_u64(), Some(after));
    assert!(!off["moved"].as_array().unwrap().is_empty());
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert_eq!(p["device_budget"].as_u64(), Some(device));
    let host = p["host_bytes"].as_u64().unwrap();
    assert_eq!(off["host_bytes"].as_u64(), Some(host));

    let r = json_of(&[
        "run",
        out.to_str().unwrap(),
        "--plan",
        plan.to_str().unwrap(),
        "--dim",
        "N=32",
        "--random",
        "--compare",
        reference.to_str().unwrap(),
        "--exact",
        "--json",
    ]);
    assert_eq!(
        r["peak_bytes"].as_u64(),
        Some(after),
        "device tier: measured = planned"
    );
    assert_eq!(
        r["host_peak_bytes"].as_u64(),
        Some(host),
        "host tier: measured = planned"
    );
    assert_eq!(
        r["host_transfers"].as_u64(),
        Some(2 * off["moved"].as_array().unwrap().len() as u64)
    );
    // The copies' predicted time, the part of it the compute waits for, and what the run measured.
    let (total, exposed) = (
        off["predicted_seconds"].as_f64().unwrap(),
        off["predicted_exposed_seconds"].as_f64().unwrap(),
    );
    assert!(
        total > 0.0 && (0.0..=total * (1.0 + 1e-9)).contains(&exposed),
        "{off}"
    );
    let moved_exposed: f64 = off["moved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["exposed_seconds"].as_f64().unwrap())
        .sum();
    assert!((moved_exposed - exposed).abs() <= 1e-9 * total, "{off}");
    assert_eq!(r["host_transfer_bytes"], off["transfer_bytes"]);
    let (copying, waited) = (
        r["host_transfer_seconds"].as_f64().unwrap(),
        r["host_transfer_wait_seconds"].as_f64().unwrap(),
    );
    assert!(copying > 0.0 && waited > 0.0, "{r}");
    assert_eq!(r["compared"], true);
    assert_eq!(r["mismatches"].as_array().unwrap().len(), 0, "{r}");

    // Under the floor (what no plan goes below): refused in one line, status 1. Between the floor
    // and the lowest plan: the lowest plan is written and the status says it does not fit.
    let floor = probe["floor"]["bytes"].as_u64().unwrap();
    let under = memplan(&[
        "optimize",
        t,
        "--dim",
        "N=32",
        "--device-budget",
        &format!("{}B", floor - 1),
    ]);
    assert_eq!(under.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&under.stderr)
            .trim()
            .lines()
            .count(),
        1
    );
    let low = memplan(&[
        "optimize",
        t,
        "--dim",
        "N=32",
        "--device-budget",
        &format!("{}B", floor + 1),
        "-o",
        out.to_str().unwrap(),
        "--plan-out",
        plan.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(low.status.code(), Some(3));
    let j: serde_json::Value = serde_json::from_slice(&low.stdout).unwrap();
    assert_eq!(j["fits"], false);
    assert!(out.exists() && plan.exists());
    let both = memplan(&[
        "optimize",
        t,
        "--dim",
        "N=32",
        "--budget",
        "1MB",
        "--device-budget",
        "1MB",
    ]);
    assert_eq!(both.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&both.stderr).trim().lines().count(),
        1
    );
    std::fs::remove_dir_all(&tmp).ok();
}
