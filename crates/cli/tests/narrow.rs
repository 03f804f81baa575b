//! Narrowing on a real export: the dynamo export of transformers' `LlamaModel` (the wide corpus)
//! builds its causal mask once, as a float `[B, 1, S, S]` of `0` and the float minimum made by
//! `Where` from comparisons of the position ids, and every layer adds it to its scores, so it is
//! live at the peak. `memplan optimize --budget` stores it as `bool` and widens it for each reader:
//! the graph-order peak drops by exactly the bytes saved, the planned run is bit-identical to the
//! plain run of the original, and the measured peak is the planned one.

use crate::common;

use common::{json_of, memplan, repo};

#[test]
fn the_causal_mask_of_an_exported_llama_is_stored_as_bool() {
    let tmp = std::env::temp_dir().join(format!("memplan-narrow-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let model = repo().join("tests/wide/models/llama_decoder.onnx");
    let m = model.to_str().unwrap();
    let dims = ["--dim", "B=1", "--dim", "S=512"];
    let reference = tmp.join("ref.npz");
    let mut args = vec![
        "run",
        m,
        "--random",
        "--out",
        reference.to_str().unwrap(),
        "--json",
    ];
    args.extend(dims);
    let plain = json_of(&args);
    let plain_peak = plain["peak_bytes"].as_u64().unwrap();

    // A budget one byte below the graph-order peak: narrowing is the first lever.
    let (out, plan) = (tmp.join("narrow.onnx"), tmp.join("narrow.json"));
    let budget = format!("{}B", plain_peak - 1);
    let mut args = vec![
        "optimize",
        m,
        "--budget",
        &budget,
        "-o",
        out.to_str().unwrap(),
        "--plan-out",
        plan.to_str().unwrap(),
        "--json",
    ];
    args.extend(dims);
    let opt = json_of(&args);
    let n = &opt["narrowing"];
    assert_eq!(n["peak_bytes_before"].as_u64(), Some(plain_peak), "{n}");
    let step = &n["steps"][0];
    let s = 512u64;
    assert_eq!(step["bytes"].as_u64(), Some(4 * s * s), "{step}");
    assert_eq!(step["stored_as"], "bool", "{step}");
    assert_eq!(step["narrow_bytes"].as_u64(), Some(s * s), "{step}");
    assert_eq!(
        step["peak_bytes"].as_u64(),
        Some(plain_peak - 3 * s * s + 8),
        "the peak drops by the bytes saved, less the two f32 constants of the widening: {step}"
    );
    let proof: Vec<&str> = step["proof"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(
        proof[0].contains("{0, -3.4028234663852886e38}") && proof[0].contains("Where"),
        "{proof:?}"
    );
    assert!(
        proof.iter().any(|l| l.contains("its type is bool")),
        "{proof:?}"
    );

    let mut args = vec![
        "run",
        out.to_str().unwrap(),
        "--plan",
        plan.to_str().unwrap(),
        "--random",
        "--compare",
        reference.to_str().unwrap(),
        "--exact",
        "--json",
    ];
    args.extend(dims);
    let run = json_of(&args);
    assert_eq!(
        run["peak_bytes"].as_u64(),
        opt["peak_bytes_after"].as_u64(),
        "measured = planned"
    );
    assert_eq!(run["compared"], true, "{run}");
    assert_eq!(run["mismatches"].as_array().unwrap().len(), 0, "{run}");

    // --no-narrow leaves the mask as it is.
    let mut args = vec!["optimize", m, "--budget", &budget, "--no-narrow", "--json"];
    args.extend(dims);
    let o = memplan(&args);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(j.get("narrowing").is_none(), "{j}");
    std::fs::remove_dir_all(&tmp).ok();
}

/// Narrowing is chosen on the graph-order peak, before chunking. Where chunking is needed, a
/// narrowed mask is widened whole for each reader where chunking would have made each chunk's
/// slice of it, so the lowest plan with narrowing stood above the one without (qwen2, phi, gemma
/// and wav2vec2 exports: 5.54 MiB against 4.54 MiB). `fit_budget` fits both and keeps the better:
/// the default is never above `--no-narrow`, and what it writes runs bit-identical at its planned
/// peak.
#[test]
fn narrowing_never_raises_the_lowest_plan() {
    let tmp = std::env::temp_dir().join(format!("memplan-narrow-low-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let model = repo().join("tests/wide/models/llama_decoder.onnx");
    let m = model.to_str().unwrap();
    let dims = ["--dim", "B=1", "--dim", "S=256"];
    let (out, plan) = (tmp.join("low.onnx"), tmp.join("low.json"));
    let (o, p) = (out.to_str().unwrap(), plan.to_str().unwrap());
    let lowest = |extra: &[&str]| -> u64 {
        let mut args = vec![
            "optimize",
            m,
            "--budget",
            "lowest",
            "-o",
            o,
            "--plan-out",
            p,
        ];
        args.extend(dims);
        args.extend(extra);
        args.push("--json");
        json_of(&args)["peak_bytes_after"].as_u64().unwrap()
    };
    let plain = lowest(&["--no-narrow"]);
    let default = lowest(&[]);
    assert!(
        default <= plain,
        "lowest {default} B with narrowing, {plain} B without"
    );

    let reference = tmp.join("ref.npz");
    let mut args = vec!["run", m, "--random", "--out", reference.to_str().unwrap()];
    args.extend(dims);
    json_of(&[args.as_slice(), &["--json"]].concat());
    let mut args = vec!["run", o, "--plan", p, "--random", "--compare"];
    args.extend([reference.to_str().unwrap(), "--exact", "--json"]);
    args.extend(dims);
    let run = json_of(&args);
    assert_eq!(
        run["peak_bytes"].as_u64(),
        Some(default),
        "measured = planned"
    );
    assert_eq!(run["mismatches"].as_array().unwrap().len(), 0, "{run}");
    std::fs::remove_dir_all(&tmp).ok();
}
