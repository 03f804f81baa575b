//! Shape arithmetic as real exporters emit it, end to end (`tests/fixtures/folding`, made by
//! `tools/export_folding_fixtures.py`): an einops rearrange of an AlphaFold-3 style pair tensor with
//! `n ** 2 // 4` (TorchScript emits `Pow` on the shape value; `pow_reshape` is the dynamo pattern
//! `Concat(Reshape(Div(Pow(N, 2), 4)))` built by hand), and a Swin window partition that pads H and
//! W to a multiple of the window with `Mod` and returns `arange(0, Hp, 4)`. Every node has a rule,
//! output shapes are symbolic, `estimate` equals the measured peak to the byte, and the run's
//! outputs have the shapes the formulas give.

use crate::common;

use crate::npz;

use std::collections::BTreeMap;

use common::{json_of, repo};
use memplan_ir::Expr;

/// Inferred output shapes (with the executor's kernels as the constant folder, like the CLI).
fn output_shapes(path: &std::path::Path) -> Vec<Vec<Expr>> {
    memplan_exec::install_const_folder();
    let model = memplan_onnx::import(path).unwrap();
    let facts = memplan_ir::infer_model(&model).unwrap();
    assert!(
        facts.skipped.is_empty(),
        "{}: {:?}",
        path.display(),
        facts.skipped
    );
    assert!(
        facts.symbols.introduced.is_empty(),
        "{:?}",
        facts.symbols.introduced
    );
    model
        .graph
        .outputs
        .iter()
        .map(|&v| facts.get(v).shape.clone().expect("output shape"))
        .collect()
}

fn eval(shape: &[Expr], dims: &BTreeMap<String, i64>) -> Vec<usize> {
    shape
        .iter()
        .map(|d| d.eval_map(dims).unwrap() as usize)
        .collect()
}

/// Runs and estimates `model` at `dims`; checks estimate == measured and the output shapes against
/// `want`; returns the outputs.
fn run_checked(name: &str, dims: &[(&str, i64)], want: &[Vec<usize>]) -> Vec<npz::Array> {
    let model = repo().join(format!("tests/fixtures/folding/{name}.onnx"));
    let m = model.to_str().unwrap();
    let shapes = output_shapes(&model);
    let env: BTreeMap<String, i64> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let inferred: Vec<Vec<usize>> = shapes.iter().map(|s| eval(s, &env)).collect();
    assert_eq!(inferred, want, "{name}: inferred shapes at {dims:?}");

    let tmp = std::env::temp_dir().join(format!("memplan-folding-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let out = tmp.join(format!(
        "{name}.{}.npz",
        dims.iter()
            .map(|d| d.1.to_string())
            .collect::<Vec<_>>()
            .join("x")
    ));
    let flags: Vec<String> = dims.iter().map(|(k, v)| format!("--dim={k}={v}")).collect();
    let mut args = vec![
        "run",
        m,
        "--random",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(flags.iter().map(String::as_str));
    let run = json_of(&args);
    assert_eq!(
        run["scratch_mismatches"].as_array().unwrap().len(),
        0,
        "{name}"
    );
    let mut args = vec!["estimate", m, "--json"];
    args.extend(flags.iter().map(String::as_str));
    let estimate = json_of(&args)["peak_bytes"].as_u64().unwrap();
    assert_eq!(
        run["peak_bytes"].as_u64().unwrap(),
        estimate,
        "{name} at {dims:?}"
    );
    let arrays = npz::read(&out).unwrap();
    let got: Vec<Vec<usize>> = arrays.iter().map(|a| a.shape.clone()).collect();
    assert_eq!(got, want, "{name}: run output shapes at {dims:?}");
    arrays
}

fn i64s(a: &npz::Array) -> Vec<i64> {
    a.data
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn einops_pair_reshapes_through_pow_fold() {
    for n in [6, 10] {
        let nn = (n * n) as usize;
        for name in ["pair_torchscript", "pair_dynamo"] {
            run_checked(
                name,
                &[("N", n)],
                &[vec![2, 4, nn, 2], vec![2, nn / 4, 4, 8]],
            );
        }
        run_checked("pow_reshape", &[("N", n)], &[vec![2, nn / 4, 4, 8]]);
    }
}

#[test]
fn swin_window_partition_pads_to_the_window() {
    for name in ["swin_torchscript", "swin_dynamo"] {
        for (h, w) in [(7, 10), (8, 8), (5, 13)] {
            let (hp, wp) = ((h + 3) / 4 * 4, (w + 3) / 4 * 4);
            let wins = (hp / 4 * (wp / 4)) as usize;
            let outs = run_checked(
                name,
                &[("H", h), ("W", w)],
                &[vec![wins, 16, 8], vec![(hp / 4) as usize]],
            );
            let idx: Vec<i64> = (0..hp).step_by(4).collect();
            assert_eq!(i64s(&outs[1]), idx, "{name} H={h}");
        }
    }
}
