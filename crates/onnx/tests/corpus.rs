//! Corpus tests: every real model under the corpus directory decodes, and re-encodes to the same
//! message (and the same bytes); saving with external data and reading back gives the same payloads.
//!
//! The corpus directory is the first that exists of: `$MEMPLAN_CORPUS_DIR`, `<repo>/tests/corpus/models`,
//! `<repo>/../shared/corpus/models`. When none exists the tests print a note and pass: the repository
//! must not require files outside it.

use std::path::{Path, PathBuf};

use memplan_onnx::data::{for_each_model_tensor_mut, TensorStorage};
use memplan_onnx::proto::{ModelProto, TensorProto};
use memplan_onnx::{
    decode_model_proto, inline_functions, load_external_data, load_model_proto, save_model_proto,
    tensor_bytes, ExternalData, ExternalDataReader, OnnxError,
};
use prost::Message;

fn corpus_models() -> Option<Vec<PathBuf>> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let candidates = std::env::var_os("MEMPLAN_CORPUS_DIR")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            repo.join("tests/corpus/models"),
            repo.join("../shared/corpus/models"),
        ]);
    for dir in candidates {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut models: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "onnx"))
            .collect();
        models.sort();
        if !models.is_empty() {
            eprintln!("corpus: {} models in {}", models.len(), dir.display());
            return Some(models);
        }
    }
    eprintln!("note: no corpus directory found (set MEMPLAN_CORPUS_DIR); corpus tests skipped");
    None
}

/// Every tensor payload of a model in order, as packed bytes (strings concatenated).
fn payloads(m: &mut ModelProto, dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut reader = ExternalDataReader::new(dir);
    let mut out = Vec::new();
    for_each_model_tensor_mut(m, &mut |t: &mut TensorProto| -> Result<(), OnnxError> {
        let bytes = match tensor_bytes(t, &mut reader)? {
            TensorStorage::Raw(b) => b.to_vec(),
            TensorStorage::Strings(s) => s.concat(),
        };
        out.push((t.name.clone().unwrap_or_default(), bytes));
        Ok(())
    })
    .unwrap();
    out
}

#[test]
fn corpus_models_reencode_identically() {
    let Some(models) = corpus_models() else {
        return;
    };
    for path in models {
        let original = std::fs::read(&path).unwrap();
        let m = load_model_proto(&path).unwrap_or_else(|e| panic!("{e}"));
        let encoded = m.encode_to_vec();
        let back = decode_model_proto(encoded.clone().into(), &path).unwrap();
        assert!(back == m, "{}: decode(encode(m)) != m", path.display());
        assert!(
            encoded == original,
            "{}: re-encoding changed the bytes",
            path.display()
        );

        // The corpus declares no local functions; inlining must then leave the model unchanged.
        let mut inlined = m.clone();
        inline_functions(&mut inlined).unwrap();
        assert!(
            inlined == m,
            "{}: inlining changed a model without functions",
            path.display()
        );
    }
}

#[test]
fn corpus_models_survive_external_data_round_trip() {
    let Some(models) = corpus_models() else {
        return;
    };
    let out_dir = std::env::temp_dir().join(format!("memplan-onnx-corpus-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    for path in models {
        let mut m = load_model_proto(&path).unwrap();
        let want = payloads(&mut m, path.parent().unwrap());
        let out = out_dir.join(path.file_name().unwrap());
        save_model_proto(&m, &out, ExternalData::Auto { threshold: 1024 }).unwrap();
        let mut back = load_model_proto(&out).unwrap();
        assert_eq!(payloads(&mut back, &out_dir), want, "{}", path.display());
        load_external_data(&mut back, &out_dir).unwrap();
        assert_eq!(
            back.graph.as_ref().unwrap().node,
            m.graph.as_ref().unwrap().node,
            "{}",
            path.display()
        );
    }
    std::fs::remove_dir_all(&out_dir).unwrap();
}

#[test]
fn corpus_models_round_trip_through_the_ir() {
    let Some(models) = corpus_models() else {
        return;
    };
    for path in models {
        let original = load_model_proto(&path).unwrap();
        let model = memplan_onnx::import(&path).unwrap_or_else(|e| panic!("{e}"));
        let back = memplan_onnx::export(&model);
        let (a, b) = (
            original.graph.as_ref().unwrap(),
            back.graph.as_ref().unwrap(),
        );
        assert_eq!(a.node, b.node, "{}: nodes", path.display());
        assert_eq!(a.input, b.input, "{}: inputs", path.display());
        assert_eq!(a.output, b.output, "{}: outputs", path.display());
        assert_eq!(a.value_info, b.value_info, "{}: value_info", path.display());
        assert_eq!(
            a.initializer,
            b.initializer,
            "{}: initializers",
            path.display()
        );
        let (mut x, mut y) = (original.clone(), back.clone());
        x.graph = None;
        y.graph = None;
        // An absent and an empty opset domain both mean the default domain; the IR keeps one form.
        for o in x.opset_import.iter_mut().chain(y.opset_import.iter_mut()) {
            o.domain = o.domain.take().filter(|d| !d.is_empty());
        }
        assert_eq!(x, y, "{}: model-level fields", path.display());
        x.graph = original.graph.clone();
        y.graph = back.graph.clone();
        assert!(x == y, "{}: graph-level fields differ", path.display());
    }
}
