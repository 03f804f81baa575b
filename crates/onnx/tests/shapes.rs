//! Inferred shapes against onnxruntime: for every corpus model (both exporters) at two concrete sizes,
//! every intermediate value's symbolic shape, evaluated at the sizes, equals the shape onnxruntime
//! produced (`tests/fixtures/ort_shapes`, made by `tools/ort_shapes.py`), and its type agrees.
//! Dims that depend on data (fresh symbols inference introduced and reported) are not evaluated but
//! must be declared as such.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use memplan_ir::infer_model;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn inferred_shapes_match_onnxruntime_on_the_corpus() {
    let dir = repo().join("tests/fixtures/ort_shapes");
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/ort_shapes is checked in")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    fixtures.sort();
    assert_eq!(fixtures.len(), 36, "18 models x 2 sizes");
    let mut checked = 0usize;
    for fx in fixtures {
        // <file stem>.<size>.json, e.g. of3_tri_att_start.legacy.64.json
        let stem = fx.file_stem().unwrap().to_str().unwrap();
        let model_stem = stem.rsplit_once('.').unwrap().0;
        let model_path = repo().join(format!("tests/corpus/models/{model_stem}.onnx"));
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&fx).unwrap()).unwrap();
        let dims: BTreeMap<String, i64> = json["dims"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_i64().unwrap()))
            .collect();
        let model = memplan_onnx::import(&model_path).unwrap_or_else(|e| panic!("{e}"));
        let facts = infer_model(&model).unwrap_or_else(|e| panic!("{stem}: {e}"));
        assert!(
            facts.skipped.is_empty(),
            "{stem}: nodes without facts: {:?}",
            facts.skipped
        );
        let introduced: Vec<&str> = facts
            .symbols
            .introduced
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        let g = &model.graph;
        for (name, want) in json["values"].as_object().unwrap() {
            let v = g
                .find_value(name)
                .unwrap_or_else(|| panic!("{stem}: no value '{name}'"));
            let f = facts.get(v);
            let want_dtype = want["dtype"].as_str().unwrap();
            let have_dtype = f.dtype.map(|d| d.onnx_name()).unwrap_or("?");
            assert_eq!(have_dtype, want_dtype, "{stem}: type of '{name}'");
            let want_shape: Vec<i64> = want["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_i64().unwrap())
                .collect();
            let shape = f
                .shape
                .as_ref()
                .unwrap_or_else(|| panic!("{stem}: '{name}' has no inferred shape"));
            assert_eq!(shape.len(), want_shape.len(), "{stem}: rank of '{name}'");
            for (k, (e, &w)) in shape.iter().zip(&want_shape).enumerate() {
                match e.eval_map(&dims) {
                    Ok(x) => assert_eq!(x, w, "{stem}: '{name}' dim {k} = {e}"),
                    Err(_) => {
                        let syms = e.symbols();
                        assert!(
                            syms.iter().any(|s| introduced.contains(&s.as_str())),
                            "{stem}: '{name}' dim {k} = {e} cannot be evaluated at {dims:?}"
                        );
                    }
                }
            }
            checked += 1;
        }
    }
    assert!(checked > 3000, "only {checked} values checked");
}
