//! Shared by the corpus tests: the repository root, running `memplan` for its JSON, and the third
//! size every corpus model is run at (besides the two sizes with onnxruntime fixtures).

#![allow(dead_code)]

pub mod run_check;

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn memplan(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .output()
        .unwrap()
}

/// `memplan ARGS` must succeed; its stdout parsed as JSON.
pub fn json_of(args: &[&str]) -> serde_json::Value {
    let out = memplan(args);
    assert!(
        out.status.success(),
        "memplan {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The third size of each corpus model (by base name): odd extents between or beside the fixtures'
/// two sizes, and batch 3 where the fixtures have 1 and 2, so that extents of 1 and of more than 1
/// are both exercised. Inputs are random (`memplan run --random`) unless
/// `tests/fixtures/third_size/<base>.npz` exists (models whose inputs must be consistent; made by
/// `tools/third_size_inputs.py`).
pub const THIRD_SIZE: &[(&str, &[(&str, i64)])] = &[
    ("bert_encoder", &[("B", 3), ("S", 77)]),
    ("gpt2_decoder", &[("B", 3), ("S", 77)]),
    ("logspace_matrix_chain", &[("n", 6), ("t", 37)]),
    ("of3_attn_pair_bias", &[("N", 57)]),
    ("of3_pair_transition", &[("N", 57)]),
    ("of3_pairformer_block", &[("N", 57)]),
    (
        "of3_token_frame_atoms_gather",
        &[("N_atom", 297), ("N_token", 81)],
    ),
    ("of3_tri_att_start", &[("N", 57)]),
    ("of3_tri_mul_out", &[("N", 57)]),
];

/// `--dim=K=V` flags of a model's third size.
pub fn third_size_flags(base: &str) -> Vec<String> {
    THIRD_SIZE
        .iter()
        .find(|(b, _)| *b == base)
        .unwrap_or_else(|| panic!("{base} has no third size in THIRD_SIZE"))
        .1
        .iter()
        .map(|(k, v)| format!("--dim={k}={v}"))
        .collect()
}

/// `memplan run` arguments giving a model's third-size inputs (`seed` for random ones).
pub fn third_size_inputs(base: &str, seed: u64) -> Vec<String> {
    let npz = repo().join(format!("tests/fixtures/third_size/{base}.npz"));
    if npz.exists() {
        vec!["--inputs-npz".into(), npz.display().to_string()]
    } else {
        vec!["--random".into(), "--seed".into(), seed.to_string()]
    }
}

/// The ONNX backend node conformance cases: `$MEMPLAN_NODE_TESTS`, `target/onnx-node-tests/node`
/// (made by `tools/gen_onnx_node_tests.py`) or `../shared/onnx-node-tests/node`, sorted; `None`
/// when none is present.
pub fn node_cases() -> Option<Vec<PathBuf>> {
    let dir = std::env::var_os("MEMPLAN_NODE_TESTS")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            repo().join("target/onnx-node-tests/node"),
            repo().join("../shared/onnx-node-tests/node"),
        ])
        .find(|d| d.is_dir())?;
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    cases.sort();
    Some(cases)
}

/// A serialized `TensorProto` (a node case's `input_<i>.pb`) as an owned executor tensor.
pub fn load_pb_tensor(path: &Path) -> Result<memplan_exec::Tensor, String> {
    use prost::Message;
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let proto = memplan_onnx::proto::TensorProto::decode(bytes.as_slice())
        .map_err(|e| format!("not a TensorProto: {e}"))?;
    let data =
        memplan_onnx::import::import_tensor(&proto, &mut memplan_onnx::ExternalDataReader::none())
            .map_err(|e| e.to_string())?;
    let t = memplan_exec::interp::weight_tensor(&data).map_err(|e| e.to_string())?;
    let mut owned =
        memplan_exec::Tensor::zeros(t.dtype, &t.shape, None).map_err(|e| e.to_string())?;
    owned
        .bytes_mut()
        .map_err(|e| e.to_string())?
        .copy_from_slice(t.bytes());
    Ok(owned)
}
