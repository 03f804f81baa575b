//! `memplan grad` on every corpus model (both exporters): the training graph type-checks, runs with
//! the measured peak equal to `memplan estimate`'s to the byte and every kernel's scratch as declared,
//! and its gradients match onnxruntime's on the same graph (`tests/fixtures/grad_ort`, made by
//! `tools/grad_fixtures.py`; rtol 1e-4, atol 1e-5 times the gradient tensor's largest magnitude
//! when that exceeds 1).

use crate::common;

use crate::npz;

use std::path::Path;

use common::{json_of, memplan, repo};

fn values(a: &npz::Array) -> Vec<f64> {
    let b = &a.data;
    match a.dtype {
        memplan_ir::DataType::F32 => b
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
            .collect(),
        memplan_ir::DataType::F64 => b
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        d => panic!("unexpected gradient type {d}"),
    }
}

fn check_model(file_stem: &str, tmp: &Path) -> usize {
    let fx = repo().join(format!("tests/fixtures/grad_ort/{file_stem}.json"));
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&fx).unwrap()).unwrap();
    let model = repo().join(format!("tests/corpus/models/{file_stem}.onnx"));
    let train = tmp.join(format!("{file_stem}.train.onnx"));
    let out = tmp.join(format!("{file_stem}.out.npz"));
    let wrt = meta["wrt"].as_str().unwrap();
    let o = memplan(&[
        "grad",
        model.to_str().unwrap(),
        "--wrt",
        wrt,
        "-o",
        train.to_str().unwrap(),
    ]);
    assert!(
        o.status.success(),
        "{file_stem}: grad failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    let inputs = repo().join(meta["inputs"].as_str().unwrap());
    let run = json_of(&[
        "run",
        train.to_str().unwrap(),
        "--inputs-npz",
        inputs.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(
        run["scratch_mismatches"].as_array().unwrap().len(),
        0,
        "{file_stem}: {}",
        run["scratch_mismatches"]
    );
    let dims: Vec<String> = meta["dims"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| format!("--dim={k}={v}"))
        .collect();
    let mut est_args = vec!["estimate", train.to_str().unwrap(), "--json"];
    est_args.extend(dims.iter().map(String::as_str));
    let est = json_of(&est_args);
    assert_eq!(
        run["peak_bytes"], est["peak_bytes"],
        "{file_stem}: measured training-step peak vs estimate"
    );

    let got = npz::read(&out).unwrap();
    let want = npz::read(&repo().join(format!("tests/fixtures/grad_ort/{file_stem}.npz"))).unwrap();
    assert!(!want.is_empty(), "{file_stem}: fixture has no gradients");
    for w in &want {
        let g = got
            .iter()
            .find(|g| g.name == w.name)
            .unwrap_or_else(|| panic!("{file_stem}: no output '{}'", w.name));
        assert_eq!(g.shape, w.shape, "{file_stem}: shape of '{}'", w.name);
        let (gv, wv) = (values(g), values(w));
        // A gradient that cancels to (nearly) zero, like a key bias's under softmax, is float32
        // noise in both runtimes: the absolute slack scales with the tensor's largest element.
        let scale = wv.iter().fold(1.0f64, |m, x| m.max(x.abs()));
        for (i, (a, b)) in gv.iter().zip(&wv).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * scale + 1e-4 * b.abs(),
                "{file_stem}: '{}'[{i}] = {a}, onnxruntime {b}",
                w.name
            );
        }
    }
    want.len()
}

#[test]
fn corpus_gradients_match_onnxruntime_and_the_estimate() {
    let tmp = std::env::temp_dir().join(format!("memplan-grad-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut stems: Vec<String> = std::fs::read_dir(repo().join("tests/fixtures/grad_ort"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| p.file_stem().unwrap().to_str().unwrap().to_string())
        .collect();
    stems.sort();
    assert_eq!(stems.len(), 18, "one fixture per corpus file");
    let mut total = 0;
    for s in &stems {
        total += check_model(s, &tmp);
    }
    assert!(total > 200, "only {total} gradients checked");
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn bad_input_is_one_line() {
    let tri = repo().join("tests/corpus/models/of3_tri_mul_out.onnx");
    let frame = repo().join("tests/corpus/models/of3_token_frame_atoms_gather.onnx");
    let out = std::env::temp_dir().join(format!("memplan-grad-bad-{}.onnx", std::process::id()));
    for (model, args, want) in [
        (&tri, vec!["--of", "nope"], "no graph output named 'nope'"),
        (
            &tri,
            vec!["--wrt", "missing_value"],
            "no value named 'missing_value'",
        ),
        (
            &frame,
            vec!["--wrt", "atom_to_token"],
            "not a floating-point tensor",
        ),
    ] {
        let mut full = vec!["grad", model.to_str().unwrap(), "-o", out.to_str().unwrap()];
        full.extend(args.iter().copied());
        let o = memplan(&full);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(want), "{want}: {err}");
        assert!(!out.exists(), "a failed grad left {}", out.display());
    }
}
